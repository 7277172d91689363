//! The broadcast log: QoS 1 broadcasts owed to sessions that outlive their
//! connections, kept once in the session provider as the records of the
//! internal append space `$broadcast`, with one stored cursor per session
//! (the lowest offset it still owes an acknowledgement for).
//!
//! A QoS 1 broadcast that a durable session's subscription reaches is
//! appended before it is routed, and its PUBACK follows the commit. Routing
//! and delivery stay in memory as for any broadcast; the log is what a
//! restart reads back. Each session's cursor is derived from what it still
//! holds (waiting or on the wire) and stored every
//! `broker.session.ack_commit_interval`, before a clean DISCONNECT's record,
//! and at a graceful stop; the log is trimmed below the lowest cursor.
//!
//! At a start, each restored session is queued what lies after its cursor
//! and matches its subscriptions, within `limits.session_queue_bytes`.

use std::collections::HashMap;
use std::rc::{Rc, Weak};

use crate::codec::{topic, PubAck};
use crate::core::message::Message;
use crate::core::Key;
use crate::store::{self, encoding, Write};

/// The internal append space of the broadcast log.
pub const BROADCAST_SPACE: &str = "$broadcast";

/// Leads a shared group's cursor name; a client id holds no NUL, so it
/// never meets a session's.
pub(crate) const GROUP_READER_PREFIX: &str = "\u{0}share\u{0}";

/// The name a shared group's cursor is stored under.
pub(crate) fn group_reader(share_name: &str, filter: &str) -> String {
    format!("{GROUP_READER_PREFIX}{share_name}\u{0}{filter}")
}

/// Leads a session's window entry in the log's entry space.
const WINDOW_PREFIX: &str = "$window\u{0}";

pub(crate) fn window_key(client_id: &str) -> String {
    format!("{WINDOW_PREFIX}{client_id}")
}

pub(crate) fn window_bytes(window: &[(u16, u64, bool)]) -> Vec<u8> {
    let mut e = encoding::Encoder::with_capacity(4 + window.len() * 12);
    e.u32(window.len() as u32);
    for &(packet_id, offset, released) in window {
        // The PUBREL stage rides above the identifier's sixteen bits.
        e.u32(u32::from(packet_id) | u32::from(released) << 16);
        e.u64(offset);
    }
    e.buf
}

fn window_from_bytes(bytes: &[u8]) -> Option<Vec<(u16, u64, bool)>> {
    let mut d = encoding::Decoder::new(bytes);
    let count = d.count("a window", 12).ok()?;
    let mut window = Vec::with_capacity(count);
    for _ in 0..count {
        let bits = d.u32("a packet identifier").ok()?;
        let packet_id = u16::try_from(bits & 0xFFFF).ok()?;
        window.push((packet_id, d.u64("an offset").ok()?, bits >> 16 == 1));
    }
    d.finish("a window").ok()?;
    Some(window)
}

/// Records removed per trim write.
pub(crate) const TRIM_BATCH_RECORDS: u32 = 1_000;
const _: () = assert!(TRIM_BATCH_RECORDS > 0);

/// What the provider held of the log at start.
#[derive(Debug, Default)]
pub struct LogAtStart {
    /// The offset the next record takes.
    pub next: u64,
    /// Each session's stored cursor, by client id.
    pub cursors: HashMap<String, u64>,
    /// Each session's stored window: packet identifier, log offset, and
    /// whether its PUBREC came (the PUBREL stage).
    pub windows: HashMap<String, Vec<(u16, u64, bool)>>,
    /// The records from the lowest cursor on, ascending.
    pub records: Vec<store::Record>,
}

#[derive(Default)]
pub(crate) struct BroadcastLog {
    /// The offset the next record takes, as commits have reported it.
    pub(crate) next: u64,
    /// The offset of each logged message memory still holds, by the
    /// address of its shared message.
    pub(crate) offsets: HashMap<usize, (Weak<Message>, u64)>,
    /// Each session's cursor as last stored, by client id.
    pub(crate) stored: HashMap<Box<str>, u64>,
    /// Each session's window as last stored, by client id.
    pub(crate) windows: HashMap<Box<str>, Vec<(u16, u64, bool)>>,
    /// The offset of the message being routed now, if it was logged.
    pub(crate) routing: Option<u64>,
    /// The floor the last trim asked for.
    pub(crate) trimmed_to: u64,
    /// Deliveries in a window not yet stored, and so not yet sent.
    pub(crate) unsent: Vec<(Key, u16)>,
    /// Deliveries whose window write is in flight: exactly those the write
    /// names, so one held while it was on its way waits for the next.
    pub(crate) window_writing: Vec<(Key, u16)>,
    /// PUBRELs whose window write the storage thread could not take yet:
    /// connection, session, and the PUBREL.
    pub(crate) pubrels: Vec<(Key, Key, PubAck)>,
}

impl BroadcastLog {
    /// Whether a message was written to the log.
    pub(crate) fn is_logged(&self, message: &Rc<Message>) -> bool {
        self.offsets
            .get(&address(message))
            .is_some_and(|(weak, _)| weak.as_ptr() == Rc::as_ptr(message))
    }

    /// A delivery put in a session's window and not yet sent.
    pub(crate) fn hold_unsent(&mut self, session: Key, packet_id: u16) {
        self.unsent.push((session, packet_id));
    }

    /// Makes the next cursor commit write the session's cursor and window
    /// again: a write of them was not taken, or not stored. Each is kept
    /// as a value that matches nothing, so an ending still drops what the
    /// provider may hold.
    pub(crate) fn forget_window(&mut self, client_id: &str) {
        if let Some(cursor) = self.stored.get_mut(client_id) {
            *cursor = u64::MAX;
        }
        self.windows
            .insert(client_id.into(), vec![(0, u64::MAX, false)]);
    }

    /// Forgets what was stored of a session's cursor and window: they are
    /// being dropped, and what a session of the id holds is stored anew.
    pub(crate) fn forget_stored(&mut self, client_id: &str) {
        self.stored.remove(client_id);
        self.windows.remove(client_id);
    }

    /// Makes the next interval write every cursor and window again, and
    /// trim again: a commit of them was not taken, or not stored.
    pub(crate) fn forget_cursors(&mut self) {
        for cursor in self.stored.values_mut() {
            *cursor = u64::MAX;
        }
        let windows: Vec<Box<str>> = self.windows.keys().cloned().collect();
        for client_id in windows {
            self.forget_window(&client_id);
        }
        self.trimmed_to = 0;
    }

    /// Whether a delivery waits on a window write, to be sent once it is
    /// stored rather than from memory.
    pub(crate) fn held_for_window(&self, session: Key, packet_id: u16) -> bool {
        self.unsent.contains(&(session, packet_id))
            || self.window_writing.contains(&(session, packet_id))
    }

    /// Sessions holding deliveries whose window write is not on its way.
    pub(crate) fn waiting_for_window(&self) -> Vec<Key> {
        let mut sessions: Vec<Key> = Vec::new();
        for &(session, _) in &self.unsent {
            if !sessions.contains(&session)
                && !self.window_writing.iter().any(|(s, _)| *s == session)
            {
                sessions.push(session);
            }
        }
        sessions
    }

    /// The message routed next was written at `offset`.
    pub(crate) fn routing_at(&mut self, offset: u64) {
        self.next = self.next.max(offset + 1);
        self.routing = Some(offset);
    }
}

/// A QoS 1 broadcast waiting on its log write.
pub(crate) struct LoggedPublish {
    /// The publisher's connection; none for a Will.
    pub(crate) conn: Option<Key>,
    pub(crate) slot: Option<u64>,
    pub(crate) message: Message,
    /// The log already gave up its oldest to make room once.
    pub(crate) made_room: bool,
    /// The cursors of durable groups it reaches that none is stored for
    /// yet, written in its commit ahead of it.
    pub(crate) group_cursors: Vec<Write>,
    /// For a channel's record owed to durable shared groups: the token its
    /// channel keeps the record and its publisher's answer under.
    pub(crate) record: Option<u64>,
}

pub(crate) fn address(message: &Rc<Message>) -> usize {
    Rc::as_ptr(message) as usize
}

/// Reads what the broadcast log holds after the lowest stored cursor, at
/// most `session_queue_bytes` for each session with a cursor: what a
/// session may be owed is bounded by that, and a record past it would be
/// given up at the bound anyway. Run by the shell at start, before the
/// provider moves to its storage thread.
pub fn read_log(
    provider: &dyn store::Provider,
    sessions: &[(String, Vec<u8>)],
    session_queue_bytes: u64,
) -> Result<LogAtStart, store::StoreError> {
    let state = provider.channel(BROADCAST_SPACE);
    let mut log = LogAtStart {
        next: state.next,
        ..Default::default()
    };
    for (client_id, bytes) in sessions {
        if let Some(cursor) = provider.position(BROADCAST_SPACE, client_id)? {
            log.cursors.insert(client_id.clone(), cursor);
        }
        // The shared groups its record holds keep cursors of their own.
        let Ok(record) = crate::core::session::record::SessionRecord::from_bytes(bytes) else {
            continue;
        };
        for subscription in &record.subscriptions {
            if let Some(Ok(shared)) = topic::parse_shared(&subscription.filter) {
                let reader = group_reader(shared.share_name, shared.filter);
                if let Some(cursor) = provider.position(BROADCAST_SPACE, &reader)? {
                    log.cursors.insert(reader, cursor);
                }
            }
        }
    }
    for (key, value) in provider.entries(BROADCAST_SPACE)? {
        if let Some(client_id) = key.strip_prefix(WINDOW_PREFIX) {
            if let Some(window) = window_from_bytes(&value) {
                log.windows.insert(client_id.to_string(), window);
            }
        }
    }
    let mut cursors: Vec<u64> = log.cursors.values().copied().collect();
    cursors.sort_unstable();
    cursors.dedup();
    let limit = store::ReadLimit {
        max_records: 1_024,
        max_bytes: 1024 * 1024,
    };
    // Each cursor is read its own `session_queue_bytes` past it, counting
    // what a lower one's read already holds: reading only past the lowest
    // would leave a session far ahead of it nothing of what it is owed.
    let mut from = 0u64;
    let mut read_bytes = 0u64;
    let (mut below, mut below_bytes) = (0usize, 0u64);
    for cursor in cursors {
        while let Some(record) = log.records.get(below).filter(|r| r.offset < cursor) {
            below_bytes += record.message.size_bytes();
            below += 1;
        }
        from = from.max(cursor);
        while read_bytes - below_bytes < session_queue_bytes {
            match provider.read(BROADCAST_SPACE, from, limit)? {
                store::Read::Records(batch) => {
                    let Some(last) = batch.records.last() else {
                        break;
                    };
                    from = last.offset + 1;
                    read_bytes += batch
                        .records
                        .iter()
                        .map(|r| r.message.size_bytes())
                        .sum::<u64>();
                    log.records.extend(batch.records);
                }
                store::Read::BelowFloor { floor } => from = floor,
                store::Read::PastNext { .. } => break,
            }
        }
    }
    Ok(log)
}
