//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.

/// What SIGUSR1 re-reads: the operations listener's operators files. Every
/// other setting is read once, at startup; a setting that becomes
/// re-readable keeps what it needs here and is re-read in [`Reload::reload`].
#[derive(Debug, Default)]
pub(crate) struct Reload {
    /// The operators files of the operations listener, when it is open.
    pub operators: Option<crate::ops::Reloader>,
}

impl Reload {
    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) fn reload(&mut self) {
        let Some(operators) = &self.operators else {
            log::info!(
                "received SIGUSR1: nothing to reload; every setting is read at startup, \
                 so a changed configuration takes effect at the next restart"
            );
            return;
        };
        log::info!(
            "received SIGUSR1: re-reading the operations listener's operators files; \
             every other setting is read at startup and waits for the next restart"
        );
        operators.reload();
    }
}
