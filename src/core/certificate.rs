//! A client certificate's name as the connection's user name.
//!
//! The network shell verifies the certificate during the TLS handshake and
//! hands its name over before any packet is read; from the CONNECT on,
//! that name is who the client is, whatever user name the CONNECT carries.

use super::connect::has_control_character;
use super::{Broker, Key};
use crate::codec::ReasonCode;

impl Broker {
    /// Records the name connection `conn`'s verified client certificate
    /// gives it.
    pub fn certified(&mut self, conn: Key, user_name: Box<str>) {
        if let Some(connection) = self.connections.get_mut(conn) {
            connection.origin.certificate_user = Some(user_name);
        }
    }

    /// The name a certificate gave connection `conn`, if any.
    pub(crate) fn certificate_user(&self, conn: Key) -> Option<Box<str>> {
        self.connections.get(conn)?.origin.certificate_user.clone()
    }

    /// A certificate name holding U+0000 or a control character could
    /// rewrite the log line that records it, so it names nobody and the
    /// CONNECT is refused as a bad user name.
    pub(crate) fn admit_certificate(&self, conn: Key) -> Result<(), (ReasonCode, &'static str)> {
        match self.certificate_user(conn) {
            Some(name) if name.contains('\0') || has_control_character(&name) => Err((
                ReasonCode::BAD_USER_NAME_OR_PASSWORD,
                "the client certificate's name holds a control character",
            )),
            _ => Ok(()),
        }
    }
}
