//! SIGUSR1: the authorization file is read again and replaces the one in
//! force, all or nothing. A file that cannot be used is logged at `error`
//! and the broker goes on with what it had.

use smol::stream::StreamExt;

use super::SharedRef;
use crate::acl::Acl;

/// Reads the authorization file again; the caller knows where it is and
/// how to check it, so the shell reads no file of its own.
pub type AclReader = Box<dyn Fn() -> Result<Acl, String>>;

/// Takes SIGUSR1 from the process, before any client can arrive: its
/// default action would end the broker.
pub(super) fn reload_signal() -> std::io::Result<async_signal::Signals> {
    async_signal::Signals::new([async_signal::Signal::Usr1])
}

/// Waits for SIGUSR1 and puts each new reading in force.
pub(super) async fn on_reload_signal(
    shared: SharedRef,
    mut signals: async_signal::Signals,
    read: AclReader,
) {
    while let Some(Ok(_)) = signals.next().await {
        match read() {
            Ok(acl) => put_in_force(&shared, acl, "re-read"),
            Err(error) => log::error!("{error}; the rules read before stay in force"),
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
