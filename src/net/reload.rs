//! SIGUSR1: the password files the broker started with, read again.
//!
//! All or nothing: the new table goes into force only if every file read,
//! and a failure leaves the old one in force, logged at `error` naming the
//! file and line. Connected clients keep their connections either way.

use std::sync::Arc;

use super::SharedRef;

pub(super) async fn reload(shared: &SharedRef) {
    let current = Arc::clone(shared.borrow().broker.authentication());
    // Off the executor: a file on a slow card must not stall the clients.
    match smol::unblock(move || current.reload()).await {
        Ok(next) => {
            log::info!(
                "SIGUSR1: read again and in force: {}; addresses, limits and storage change only with a restart",
                next.summary()
            );
            shared
                .borrow_mut()
                .broker
                .set_authentication(Arc::new(next));
        }
        Err(error) => {
            log::error!("SIGUSR1: {error}; the password files read before stay in force");
        }
    }
}
