//! Who may connect, asked at CONNECT before any session is looked at, so a
//! refused client takes over nothing and fires no Will.
//!
//! The credential table is handed in whole and swapped whole on a reload;
//! connections already admitted are not asked again.

use std::rc::Rc;
use std::sync::Arc;

use crate::auth::{Authentication, Verdict};
use crate::codec::Connect;
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key};
use crate::log_limit::{limited, LogLimit};

/// A fleet of clients typing user names at a door with no password file
/// would write this at every connect.
pub(crate) static NAME_NOT_IDENTITY: LogLimit =
    LogLimit::new("a user name nothing checks", log::Level::Info, 10, 60_000);

impl Broker {
    /// Puts a newly loaded credential table in force for the CONNECTs to come.
    pub fn set_authentication(&mut self, authentication: Arc<Authentication>) {
        self.authentication = authentication;
    }

    pub fn authentication(&self) -> &Arc<Authentication> {
        &self.authentication
    }

    /// The user name `conn` was admitted under: a verified certificate's,
    /// or the one its CONNECT stated. `None` for an anonymous client.
    pub fn user_name(&self, conn: Key) -> Option<&str> {
        self.connections.get(conn)?.user.as_deref()
    }

    /// The door `conn` came in by, when its coming CONNECT's credentials
    /// are still to be checked: not yet admitted, and named by no
    /// certificate.
    pub fn credential_door(&self, conn: Key) -> Option<usize> {
        let connection = self.connections.get(conn)?;
        let unchecked =
            connection.active.is_none() && connection.origin.certificate_user().is_none();
        unchecked.then_some(connection.origin.door)
    }

    /// The verdict on `conn`'s CONNECT, checked by the shell against the
    /// table in force; the CONNECT that follows is judged by it.
    pub fn credentials_checked(&mut self, conn: Key, verdict: Verdict) {
        if let Some(connection) = self.connections.get_mut(conn) {
            connection.checked = Some(verdict);
        }
    }

    /// Checks a CONNECT's credentials by its door's rule, and on success
    /// records whom the connection speaks for.
    pub(crate) fn authenticate(
        &mut self,
        conn: Key,
        connect: &Connect,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let Some(connection) = self.connections.get_mut(conn) else {
            return Err(Refusal::BadCredentials);
        };
        // A bridge's session is the broker's own and came in by no door:
        // no door's password file applies to it.
        if connection.bridge {
            return Ok(());
        }
        // A certificate the shell verified names the client; no password
        // file is asked.
        if let Some(name) = connection.origin.certificate_user() {
            connection.user = Some(name.into());
            return Ok(());
        }
        let door = connection.origin.door;
        let user = connect.username.as_deref();
        let verdict = match connection.checked.take() {
            Some(verdict) => verdict,
            None => self
                .authentication
                .check(door, user, connect.password.as_deref()),
        };
        match verdict {
            Verdict::Refused(why) => {
                // Never the password: only which of the refusals it was.
                log::warn!(
                    "refusing CONNECT from client id {:?} as user {:?} on door {}: {}",
                    connect.client_id,
                    user.unwrap_or("-"),
                    self.authentication.door_name(door),
                    why.describe()
                );
                Err(Refusal::BadCredentials)
            }
            Verdict::Authenticated | Verdict::Unchecked | Verdict::Anonymous => {
                connection.user = user.map(Rc::from);
                Ok(())
            }
            Verdict::NameIgnored => {
                // A name nothing checked is nobody's: the client is anonymous.
                connection.user = None;
                limited!(
                    NAME_NOT_IDENTITY,
                    now_ms,
                    "client id {:?} offered user name {:?} on door {}, which no password_file checks: it connects as nobody (broker.mqtt.trust_unchecked_user_names: true would take the name as stated)",
                    connect.client_id,
                    user.unwrap_or("-"),
                    self.authentication.door_name(door)
                );
                Ok(())
            }
        }
    }
}
