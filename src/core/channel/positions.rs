//! Channel positions still owed to the store: drops a failed commit left
//! undone, and clean closes waiting for their session's positions.
//!
//! A drop is owed by one session, named by its client id and its epoch
//! (the order sessions were made in this run). It is written again at each
//! `ack_commit_interval` only while no newer session holds the client id:
//! a newer session's positions are its own, and an old drop landing after
//! them would take them away.

use std::collections::HashMap;
use std::rc::Rc;

use crate::codec::Disconnect;
use crate::core::slab::Key;

/// Drops kept for another try; past it a drop is given up and logged, and
/// the stale position waits for the next new session of its client id,
/// which drops it.
pub(crate) const MAX_OWED_DROPS: usize = 4_096;

#[derive(Debug, Clone)]
pub(crate) struct OwedDrop {
    pub provider: usize,
    pub channel: String,
    pub client_id: Rc<str>,
    /// The epoch of the session the drop is for.
    pub epoch: u64,
}

/// A clean DISCONNECT waiting for its session's positions to be stored.
pub(crate) struct CloseWait {
    /// Taken when the last commit comes back and the DISCONNECT is served.
    pub disconnect: Option<Disconnect>,
    pub outstanding: u32,
}

#[derive(Default)]
pub(crate) struct PositionDuties {
    owed: Vec<OwedDrop>,
    /// By connection; an entry with no DISCONNECT left has had its wait.
    pub closing: HashMap<Key, CloseWait>,
}

impl PositionDuties {
    /// Keeps `drops` for another try, within the bound.
    pub fn owe(&mut self, drops: Vec<OwedDrop>) {
        for drop in drops {
            if self.owed.len() >= MAX_OWED_DROPS {
                log::warn!(
                    "a stored position of {} on channel {} could not be dropped and {MAX_OWED_DROPS} drops already wait: it stays until {} next starts a new session",
                    drop.client_id,
                    drop.channel,
                    drop.client_id
                );
                continue;
            }
            self.owed.push(drop);
        }
        debug_assert!(self.owed.len() <= MAX_OWED_DROPS);
    }

    pub fn take_owed(&mut self) -> Vec<OwedDrop> {
        std::mem::take(&mut self.owed)
    }

    #[cfg(test)]
    pub fn owed_len(&self) -> usize {
        self.owed.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop_for(client_id: &str) -> OwedDrop {
        OwedDrop {
            provider: 0,
            channel: "events".into(),
            client_id: client_id.into(),
            epoch: 1,
        }
    }

    #[test]
    fn owed_drops_are_bounded() {
        let mut duties = PositionDuties::default();
        duties.owe((0..MAX_OWED_DROPS + 3).map(|_| drop_for("a")).collect());
        assert_eq!(duties.owed_len(), MAX_OWED_DROPS);
        assert_eq!(duties.take_owed().len(), MAX_OWED_DROPS);
        assert_eq!(duties.owed_len(), 0);
    }
}
