//! The replies a connection's requests still owe it while storage answers
//! them (a point read of a value not in memory, a seek): the part of the
//! connection's outbound bound (rfcs/0003, "Per-connection memory") that
//! the core holds and the shell cannot see. The shell takes a connection's
//! next packet only while what its outbox holds unwritten and these
//! together are under the bound, so a client that asks and never reads is
//! not read from rather than answered without end.

use crate::core::channel::Pending;
use crate::core::{Broker, Key, Settings};

impl Broker {
    /// The most one reply to one request may take on the wire: a stored
    /// value or a seek's answer, with the request's Response Topic and
    /// Correlation Data, each part within `max_message_size`.
    pub fn largest_reply_bytes(settings: &Settings) -> u64 {
        2 * u64::from(settings.max_message_size_bytes)
    }

    /// What `conn`'s replies waiting on storage may take once written,
    /// each counted at the largest a reply to this client may be.
    pub fn owed_reply_bytes(&self, conn: Key) -> u64 {
        let Some(&count) = self.replies_owed.get(&conn) else {
            return 0;
        };
        let client_max = self
            .connections
            .get(conn)
            .and_then(|c| c.active.as_ref())
            .map_or(u32::MAX, |a| a.client_max_packet_size);
        let each = Self::largest_reply_bytes(&self.settings).min(u64::from(client_max));
        u64::from(count) * each
    }

    /// Whether the core holds `conn`'s packets behind a session write: it
    /// takes none until that write is answered, which writes a reply (or
    /// closes the connection) and so wakes the connection again.
    pub fn holds_packets(&self, conn: Key) -> bool {
        self.persist.is_paused(conn)
    }

    /// Files a storage request; one whose answer is a reply to a
    /// connection is counted against that connection until it comes back.
    pub(crate) fn park(&mut self, ticket: u64, pending: Pending) {
        if let Some(conn) = pending.reply_to() {
            *self.replies_owed.entry(conn).or_default() += 1;
        }
        self.pending.insert(ticket, pending);
    }

    /// A storage request came back: what it owed is no longer waiting
    /// (its reply is written now, or it asks again through `park`).
    pub(crate) fn unpark(&mut self, pending: &Pending) {
        let Some(conn) = pending.reply_to() else {
            return;
        };
        if let Some(count) = self.replies_owed.get_mut(&conn) {
            *count -= 1;
            if *count == 0 {
                self.replies_owed.remove(&conn);
            }
        }
    }

    /// A connection ended: nothing is owed to it any more.
    pub(crate) fn forget_replies(&mut self, conn: Key) {
        self.replies_owed.remove(&conn);
    }
}
