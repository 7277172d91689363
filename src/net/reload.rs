//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.
//!
//! What is re-read is the password files the broker started with and its
//! authorization file. All or nothing: both are read before either is put
//! in force, and a failure in either leaves both as they were, logged at
//! `error` naming the file. Connected clients keep their connections
//! either way; what they may do from then on is what the new
//! authorization file grants. Every other setting is read once, at
//! startup.

use std::sync::Arc;

use super::SharedRef;
use crate::acl::Acl;

/// Reads the authorization file again; the caller knows where it is and
/// how to check it, so the shell reads no file of its own. It runs off the
/// executor, as the password files are read.
pub type AclReader = Arc<dyn Fn() -> Result<Acl, String> + Send + Sync>;

/// What SIGUSR1 re-reads: the credential table in force in the broker,
/// whose rules name the files, and the authorization file where one is in
/// force.
pub(crate) struct Reload {
    shared: SharedRef,
    acl: Option<AclReader>,
}

impl Reload {
    pub(crate) fn new(shared: SharedRef, acl: Option<AclReader>) -> Reload {
        Reload { shared, acl }
    }

    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) async fn reload(&mut self) {
        let current = Arc::clone(self.shared.borrow().broker.authentication());
        let passwords = !current.files().is_empty();
        if !passwords && self.acl.is_none() {
            log::info!(
                "received SIGUSR1: nothing to reload; no password file or acl_file is configured, \
                 and every other setting is read at startup, so a changed configuration takes \
                 effect at the next restart"
            );
            return;
        }
        let read_acl = self.acl.clone();
        // Off the executor: a file on a slow card must not stall the clients.
        let read = smol::unblock(move || {
            let authentication = match passwords {
                true => Some(current.reload().map_err(|e| e.to_string())?),
                false => None,
            };
            let acl = read_acl.map(|read| read()).transpose()?;
            Ok::<_, String>((authentication, acl))
        })
        .await;
        match read {
            Ok((authentication, acl)) => {
                if let Some(next) = authentication {
                    log::info!(
                        "received SIGUSR1: read again and in force: {}; addresses, limits and \
                         storage change only with a restart",
                        next.summary()
                    );
                    self.shared
                        .borrow_mut()
                        .broker
                        .set_authentication(Arc::new(next));
                }
                if let Some(acl) = acl {
                    put_in_force(&self.shared, acl, "received SIGUSR1: re-read");
                }
            }
            Err(error) => {
                let kept = match (passwords, self.acl.is_some()) {
                    (true, true) => "the password files and the acl_file",
                    (true, false) => "the password files",
                    _ => "the acl_file",
                };
                log::error!("received SIGUSR1: {error}; {kept} read before stay in force");
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
