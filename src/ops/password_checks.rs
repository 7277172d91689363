//! Operators' password checks, off the operations thread and bounded.
//!
//! A check is a PBKDF2 hash: a tenth of a second for an entry of 200,000
//! iterations, longer on a gateway's core. Run where requests are served,
//! a few wrong passwords would hold up `/health`. So checks run one at a
//! time on the blocking pool, and at most [`PasswordChecks::most`] wait or
//! run at once; a request past that is answered `503` at once, since a
//! queue nobody bounds is a queue a stranger fills. A password accepted
//! before is recognised on the operations thread without a check
//! ([`Operators::remembered`]), so a scraper keeps its way in while
//! strangers keep the checks busy.

use std::cell::Cell;
use std::sync::Arc;

use smol::lock::Semaphore;

use super::operators::{Check, Operators};

/// The most checks pending for a listener serving `max_connections` at
/// once: a quarter of them, so a stranger's wrong guesses leave most
/// connections free of waiting.
pub fn most_for(max_connections: usize) -> usize {
    max_connections.div_ceil(4)
}

/// The checks waiting and running, and the one turn they take in order.
pub struct PasswordChecks {
    most: usize,
    pending: Cell<usize>,
    turn: Semaphore,
}

/// One check counted as pending until it ends, however it ends.
struct Pending<'a>(&'a Cell<usize>);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl PasswordChecks {
    /// At most `most` checks pending at once; 0 is taken as 1.
    pub fn new(most: usize) -> PasswordChecks {
        PasswordChecks {
            most: most.max(1),
            pending: Cell::new(0),
            turn: Semaphore::new(1),
        }
    }

    /// The most checks that wait or run at once.
    pub fn most(&self) -> usize {
        self.most
    }

    /// Checks `password` for `name` against `operators` on the blocking
    /// pool once it is this check's turn; `None`, at once, when
    /// [`PasswordChecks::most`] are already pending.
    pub async fn check(
        &self,
        operators: Arc<Operators>,
        name: String,
        password: Vec<u8>,
        door: &str,
    ) -> Option<Check> {
        if self.pending.get() >= self.most {
            log::debug!(
                "operations door {door}: {} password checks are pending; answered 503",
                self.most
            );
            return None;
        }
        self.pending.set(self.pending.get() + 1);
        let _pending = Pending(&self.pending);
        log::debug!(
            "operations door {door}: checking a password off the operations thread, {} pending",
            self.pending.get()
        );
        let _turn = self.turn.acquire().await;
        Some(smol::unblock(move || operators.check(&name, &password)).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_past_the_bound_are_refused_at_once_and_a_finished_one_frees_its_place() {
        let text = crate::ops::operators::hash_line("a", "pw", b"test-salt-12");
        let ops = Arc::new(Operators::parse("f", &text, &["/metrics"]).unwrap());
        let checks = PasswordChecks::new(1);
        smol::block_on(async {
            // The turn is held, so the first check waits for it, pending.
            let turn = checks.turn.acquire().await;
            let mut first = Box::pin(checks.check(ops.clone(), "a".into(), b"pw".to_vec(), "d"));
            assert!(smol::future::poll_once(&mut first).await.is_none());
            let second = checks.check(ops.clone(), "a".into(), b"pw".to_vec(), "d");
            assert_eq!(second.await, None);
            drop(turn);
            assert_eq!(first.await, Some(Check::Accepted));
            let third = checks.check(ops.clone(), "a".into(), b"no".to_vec(), "d");
            assert_eq!(third.await, Some(Check::Refused));
        });
        assert_eq!(PasswordChecks::new(0).most(), 1);
        assert_eq!((most_for(1), most_for(16), most_for(17)), (1, 4, 5));
    }
}
