//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.

/// What SIGUSR1 re-reads. Every setting this build knows is read once, at
/// startup, so nothing is held here yet; a setting that becomes
/// re-readable keeps what it needs here and is re-read in [`Reload::reload`].
#[derive(Debug, Default)]
pub(crate) struct Reload {}

impl Reload {
    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) fn reload(&mut self) {
        log::info!(
            "received SIGUSR1: nothing to reload; every setting is read at startup, \
             so a changed configuration takes effect at the next restart"
        );
    }
}
