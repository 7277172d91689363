//! A client certificate's name as the connection's user name.
//!
//! The network shell verifies the certificate during the TLS handshake and
//! hands its name over before any packet is read; from the CONNECT on,
//! that name is who the client is, whatever user name the CONNECT carries,
//! and no password file is asked (see `authenticate.rs`).

use super::connect::has_control_character;
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key};

impl Broker {
    /// Records the name connection `conn`'s verified client certificate
    /// gives it.
    pub fn certified(&mut self, conn: Key, user_name: Box<str>) {
        if let Some(connection) = self.connections.get_mut(conn) {
            connection.origin.certificate_user = Some(Box::new(user_name));
        }
    }

    /// A certificate name holding U+0000 or a control character could
    /// rewrite the log line that records it, so it names nobody and the
    /// CONNECT is refused as a bad user name.
    pub(crate) fn admit_certificate(&self, conn: Key) -> Result<(), Refusal> {
        let name = self
            .connections
            .get(conn)
            .and_then(|c| c.origin.certificate_user.as_deref())
            .map(|name| &**name);
        match name {
            Some(name) if name.contains('\0') || has_control_character(name) => {
                Err(Refusal::CertificateNameControlCharacter)
            }
            _ => Ok(()),
        }
    }
}
