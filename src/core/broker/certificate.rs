//! A client certificate's name as the connection's user name, and where
//! a connection really comes from.
//!
//! The network shell verifies the certificate during the TLS handshake, or
//! reads the name a proxy in front verified from its PROXY header, and
//! hands it over before any packet is read; from the CONNECT on, that name
//! is who the client is, whatever user name the CONNECT carries, and no
//! password file is asked (see `authenticate.rs`).

use std::rc::Rc;

use super::connect::has_control_character;
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key, Source};

impl Broker {
    /// Records the name connection `conn`'s verified client certificate
    /// gives it.
    pub fn certified(&mut self, conn: Key, user_name: Box<str>) {
        if let Some(connection) = self.connections.get_mut(conn) {
            connection.origin.introduction_mut().certificate_user = Some(user_name);
        }
    }

    /// Records where connection `conn` really comes from, as its door
    /// learnt it: the client a proxy speaks for, or a Unix socket's peer.
    pub fn introduced_from(&mut self, conn: Key, source: Source) {
        if let Some(connection) = self.connections.get_mut(conn) {
            connection.origin.source = Some(source);
        }
    }

    /// What a log line written on connection `conn`'s behalf names: its
    /// door (by `door_names`, indexed as the doors are) and source, and
    /// once it is admitted its client id and user. Each is the `Rc<str>`
    /// kept here, so making it copies no string.
    pub fn log_scope(&self, conn: Key, door_names: &[Rc<str>]) -> Option<crate::logging::Scope> {
        let connection = self.connections.get(conn)?;
        let session = connection
            .active
            .as_ref()
            .and_then(|a| self.sessions.get(a.session));
        Some(crate::logging::Scope {
            listener: door_names
                .get(connection.origin.door)
                .cloned()
                .unwrap_or_default(),
            remote: connection.origin.source.clone(),
            client_id: session.map(|s| Rc::clone(&s.client_id)),
            user: session.and(connection.user.clone()),
        })
    }

    /// Where connection `conn` comes from, when its door learnt that.
    pub fn source(&self, conn: Key) -> Option<&Source> {
        self.connections.get(conn)?.origin.source()
    }

    /// A certificate name holding U+0000 or a control character could
    /// rewrite the log line that records it, so it names nobody and the
    /// CONNECT is refused as a bad user name.
    pub(crate) fn admit_certificate(&self, conn: Key) -> Result<(), Refusal> {
        let name = self
            .connections
            .get(conn)
            .and_then(|c| c.origin.certificate_user());
        match name {
            Some(name) if name.contains('\0') || has_control_character(name) => {
                Err(Refusal::CertificateNameControlCharacter)
            }
            _ => Ok(()),
        }
    }
}
