//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.
//!
//! Today that is the authorization file: read again and put in force
//! whole, or, where it cannot be used, logged at `error` while the rules
//! already in force stay.

use super::SharedRef;
use crate::acl::Acl;

/// Reads the authorization file again; the caller knows where it is and
/// how to check it, so the shell reads no file of its own.
pub type AclReader = Box<dyn Fn() -> Result<Acl, String>>;

/// What SIGUSR1 re-reads: the authorization file, where one is in force.
/// Every other setting is read once, at startup.
#[derive(Default)]
pub(crate) struct Reload {
    acl: Option<(SharedRef, AclReader)>,
}

impl Reload {
    /// Re-reads the authorization file `read` gives into `shared`'s broker.
    pub(crate) fn acl(shared: SharedRef, read: AclReader) -> Reload {
        Reload {
            acl: Some((shared, read)),
        }
    }

    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) fn reload(&mut self) {
        let Some((shared, read)) = &self.acl else {
            log::info!(
                "received SIGUSR1: nothing to reload; every setting is read at startup, \
                 so a changed configuration takes effect at the next restart"
            );
            return;
        };
        match read() {
            Ok(acl) => put_in_force(shared, acl, "received SIGUSR1: re-read"),
            Err(error) => {
                log::error!("received SIGUSR1: {error}; the rules read before stay in force")
            }
        }
    }
}

/// Puts `acl` in force for every session, saying what it holds.
pub(super) fn put_in_force(shared: &SharedRef, acl: Acl, how: &str) {
    log::info!(
        "{how} {}: {} user entries, {} roles now in force",
        acl.source,
        acl.entries.len(),
        acl.roles.len()
    );
    let mut guard = shared.borrow_mut();
    let state = &mut *guard;
    let now_ms = state.now_ms();
    state.broker.set_acl(Some(acl), now_ms, &mut state.outboxes);
}
