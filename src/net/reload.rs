//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.
//!
//! What is re-read is the password files the broker started with. All or
//! nothing: the new table goes into force only if every file read, and a
//! failure leaves the old one in force, logged at `error` naming the file
//! and line. Connected clients keep their connections either way. Every
//! other setting is read once, at startup.

use std::sync::Arc;

use super::SharedRef;

/// What SIGUSR1 re-reads: the credential table in force in the broker,
/// whose rules name the files.
pub(crate) struct Reload {
    shared: SharedRef,
}

impl Reload {
    pub(crate) fn new(shared: SharedRef) -> Reload {
        Reload { shared }
    }

    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) async fn reload(&mut self) {
        let current = Arc::clone(self.shared.borrow().broker.authentication());
        if current.files().is_empty() {
            log::info!(
                "received SIGUSR1: nothing to reload; no password file is configured, and every \
                 other setting is read at startup, so a changed configuration takes effect at \
                 the next restart"
            );
            return;
        }
        // Off the executor: a file on a slow card must not stall the clients.
        match smol::unblock(move || current.reload()).await {
            Ok(next) => {
                log::info!(
                    "received SIGUSR1: read again and in force: {}; addresses, limits and storage \
                     change only with a restart",
                    next.summary()
                );
                self.shared
                    .borrow_mut()
                    .broker
                    .set_authentication(Arc::new(next));
            }
            Err(error) => {
                log::error!(
                    "received SIGUSR1: {error}; the password files read before stay in force"
                );
            }
        }
    }
}
