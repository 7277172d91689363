//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.
//!
//! What is re-read is the password files and every TLS door's certificate,
//! key and client authorities the broker started with, and the operations
//! listener's operators files. All or nothing for the first two:
//! every file is read first, and the new credential table and certificates
//! go into force together only if every one of them read; a failure leaves
//! all the old ones in force, logged at `error` naming the file. The
//! operators files are read on their own, all or nothing among themselves.
//! Connected clients keep their connections (and their handshakes) either way. Every
//! other setting is read once, at startup.

use std::rc::Rc;
use std::sync::Arc;

use super::{tls, SharedRef};

/// What SIGUSR1 re-reads: the credential table in force in the broker,
/// whose rules name the files, and the doors' TLS files.
pub(crate) struct Reload {
    shared: SharedRef,
    tls_doors: Rc<tls::TlsDoors>,
    /// The operations listener's operators files, when it is open.
    operators: Option<crate::ops::Reloader>,
}

impl Reload {
    pub(crate) fn new(
        shared: SharedRef,
        tls_doors: Rc<tls::TlsDoors>,
        operators: Option<crate::ops::Reloader>,
    ) -> Reload {
        Reload {
            shared,
            tls_doors,
            operators,
        }
    }

    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) async fn reload(&mut self) {
        if let Some(operators) = self.operators.clone() {
            log::info!("received SIGUSR1: re-reading the operations listener's operators files");
            // Off the executor, as the password files below are.
            smol::unblock(move || operators.reload()).await;
        }
        let current = Arc::clone(self.shared.borrow().broker.authentication());
        let passwords = !current.files().is_empty();
        let certificates = self.tls_doors.any();
        if !passwords && !certificates && self.operators.is_some() {
            return;
        }
        if !passwords && !certificates {
            log::info!(
                "received SIGUSR1: nothing to reload; no password file is configured, no door \
                 serves TLS, and every other setting is read at startup, so a changed \
                 configuration takes effect at the next restart"
            );
            return;
        }
        let tls_settings = self.tls_doors.settings().to_vec();
        // Off the executor: a file on a slow card must not stall the clients.
        let (table, read) = smol::unblock(move || {
            let table = passwords.then(|| current.reload());
            let read = certificates.then(|| tls::read_all(&tls_settings));
            (table, read)
        })
        .await;
        let mut errors = Vec::new();
        if let Some(Err(error)) = &table {
            errors.push(error.to_string());
        }
        if let Some(Err(tls_errors)) = &read {
            errors.extend(tls_errors.iter().cloned());
        }
        if !errors.is_empty() {
            let mut kept = Vec::new();
            if passwords {
                kept.push("the password files read before stay in force");
            }
            if certificates {
                kept.push("certificates not reloaded: every TLS door goes on serving what it served before");
            }
            log::error!(
                "received SIGUSR1: {}; {}",
                errors.join("; "),
                kept.join("; ")
            );
            return;
        }
        let mut applied = Vec::new();
        if let Some(Ok(next)) = table {
            applied.push(format!("read again and in force: {}", next.summary()));
            self.shared
                .borrow_mut()
                .broker
                .set_authentication(Arc::new(next));
        }
        if let Some(Ok(read)) = read {
            self.tls_doors.apply(read, tls::now_unix_s());
            applied.push("certificates re-read; new connections are served with them".into());
        }
        log::info!(
            "received SIGUSR1: {}; addresses, limits and storage change only with a restart",
            applied.join("; ")
        );
    }
}
