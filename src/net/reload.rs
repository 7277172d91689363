//! SIGUSR1: the one place a running broker re-reads what may change
//! without a restart. A restart costs every connection and every delivery
//! in flight, so what can be re-read is re-read here, and nowhere else.
//!
//! What is re-read is the password files, every TLS door's certificate,
//! key and client authorities, and the authorization file the broker
//! started with. All or nothing: every file is read first, and the new
//! credential table, certificates and rules go into force together only if
//! every one of them read; a failure leaves all the old ones in force,
//! logged at `error` naming the file. Connected clients keep their
//! connections (and their handshakes) either way; what they may do from
//! then on is what the new authorization file grants. The operations
//! listener's operators files and its doors' certificates are re-read
//! too, each on its own, and so is `broker.log_level` from the
//! configuration file, first, so a reload's own lines are written at the
//! new level. Every other setting is read once, at startup.

use std::rc::Rc;
use std::sync::Arc;

use super::{tls, SharedRef};
use crate::acl::Acl;

/// Reads the authorization file again; the caller knows where it is and
/// how to check it, so the shell reads no file of its own. It runs off the
/// executor, as the password files are read.
pub type AclReader = Arc<dyn Fn() -> Result<Acl, String> + Send + Sync>;

/// What SIGUSR1 re-reads: the credential table in force in the broker,
/// whose rules name the files, the doors' TLS files, and the authorization
/// file where one is in force.
pub(crate) struct Reload {
    shared: SharedRef,
    tls_doors: Rc<tls::TlsDoors>,
    /// The operations listener's operators files, when it is open.
    operators: Option<crate::ops::Reloader>,
    acl: Option<AclReader>,
}

impl Reload {
    pub(crate) fn new(
        shared: SharedRef,
        tls_doors: Rc<tls::TlsDoors>,
        operators: Option<crate::ops::Reloader>,
        acl: Option<AclReader>,
    ) -> Reload {
        Reload {
            shared,
            tls_doors,
            operators,
            acl,
        }
    }

    /// Re-reads what may change under a running broker and logs what it
    /// applied, and that the rest waits for a restart.
    pub(crate) async fn reload(&mut self) {
        let level = match crate::logging::level_reader() {
            // Off the executor, as every file below is read.
            Some(read) => Some(smol::unblock(move || read()).await),
            None => None,
        };
        match level {
            Some(Ok(level)) => {
                let was = log::max_level();
                log::set_max_level(level);
                log::info!(
                    "received SIGUSR1: log_level was {}, is {}",
                    was.as_str().to_ascii_lowercase(),
                    level.as_str().to_ascii_lowercase()
                );
            }
            Some(Err(error)) => log::error!(
                "received SIGUSR1: the log level stays {}, as the configuration does not read: {error}",
                log::max_level().as_str().to_ascii_lowercase()
            ),
            None => {}
        }
        if let Some(operators) = self.operators.clone() {
            log::info!(
                "received SIGUSR1: re-reading the operations listener's operators files and certificates"
            );
            // Off the executor, as the password files below are.
            smol::unblock(move || operators.reload()).await;
        }
        let current = Arc::clone(self.shared.borrow().broker.authentication());
        let passwords = !current.files().is_empty();
        let certificates = self.tls_doors.any();
        if !passwords && !certificates && self.acl.is_none() && self.operators.is_some() {
            return;
        }
        if !passwords && !certificates && self.acl.is_none() {
            log::info!(
                "received SIGUSR1: nothing to reload; no password file or acl_file is \
                 configured, no door serves TLS, and every other setting but log_level is read at \
                 startup, so a changed configuration takes effect at the next restart"
            );
            return;
        }
        let tls_settings = self.tls_doors.settings().to_vec();
        let read_acl = self.acl.clone();
        // Off the executor: a file on a slow card must not stall the clients.
        let (table, read, acl) = smol::unblock(move || {
            let table = passwords.then(|| current.reload());
            let read = certificates.then(|| tls::read_all(&tls_settings));
            let acl = read_acl.map(|read| read());
            (table, read, acl)
        })
        .await;
        let mut errors = Vec::new();
        if let Some(Err(file_errors)) = &table {
            errors.extend(file_errors.iter().map(ToString::to_string));
        }
        if let Some(Err(tls_errors)) = &read {
            errors.extend(tls_errors.iter().cloned());
        }
        if let Some(Err(error)) = &acl {
            errors.push(error.clone());
        }
        if !errors.is_empty() {
            let mut kept = Vec::new();
            if passwords {
                kept.push("the password files read before stay in force");
            }
            if certificates {
                kept.push("certificates not reloaded: every TLS door goes on serving what it served before");
            }
            if self.acl.is_some() {
                kept.push("the acl_file read before stays in force");
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
        if let Some(Ok(acl)) = acl {
            applied.push(put_in_force(&self.shared, acl, "re-read"));
        }
        log::info!(
            "received SIGUSR1: {}; addresses, limits and storage change only with a restart",
            applied.join("; ")
        );
    }
}

/// Puts `acl` in force for every session; says what it holds, `how` it
/// came to be read.
pub(super) fn put_in_force(shared: &SharedRef, acl: Acl, how: &str) -> String {
    let said = format!(
        "{how} {}: {} user entries, {} roles now in force",
        acl.source,
        acl.entries.len(),
        acl.roles.len()
    );
    let mut guard = shared.borrow_mut();
    let state = &mut *guard;
    let now_ms = state.now_ms();
    state.broker.set_acl(Some(acl), now_ms, &mut state.outboxes);
    said
}
