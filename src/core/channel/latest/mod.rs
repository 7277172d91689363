//! `latest` channels in the core: one current value per topic.
//!
//! A publish is appended as a record like any channel's; once it is
//! committed it becomes its topic's current value and the record it
//! replaced is removed by a second write. A zero-length payload is a
//! deletion: stored as a record with no payload (so it has an offset and
//! orders against the value it replaced), shown to nobody who subscribes
//! later unless asked, and kept for `deletion_retention_period`.
//!
//! The channel keeps in memory only an index - topic to offset,
//! receipt time and whether it is a deletion - plus a bounded cache of
//! recent bodies. Anything else is read back from the provider when it is
//! served, so memory does not grow with the size of the values.

pub(crate) mod point_read;
pub(crate) mod reader;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use crate::core::channel::latest::point_read::PointRead;
use crate::core::channel::latest::reader::ReadFor;
use crate::core::channel::{ChannelSettings, PendingAck};
use crate::core::message::labelled;
use crate::core::message::Message;
use crate::store::{self, Read, Record};

/// What the configuration and the provider say of a `latest` channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestSettings {
    /// How long a deletion is kept, in seconds; `None` for as long as the
    /// channel exists.
    pub deletion_retention_period_s: Option<u64>,
    /// The values the provider held at startup. Moved into the channel's
    /// index when the core is built, so they are held once.
    pub values: Vec<StoredValue>,
}

/// A topic's current record as the index keeps it: no body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue {
    pub topic: String,
    pub offset: u64,
    pub received_at_ms: u64,
    /// A stored deletion: a record with no payload.
    pub deleted: bool,
}

impl StoredValue {
    fn of(record: &Record) -> StoredValue {
        StoredValue {
            topic: record.message.topic.clone(),
            offset: record.offset,
            received_at_ms: record.message.received_at_ms,
            deleted: record.message.payload.is_empty(),
        }
    }
}

/// Folds a channel's records, read in ascending offsets, into the newest
/// per topic. Returns the offsets a newer record of the same topic has
/// replaced: a crash between a value's commit and the removal of the one
/// before it leaves both, and these are removed at startup.
pub fn fold_records(
    records: impl IntoIterator<Item = Record>,
    newest: &mut HashMap<String, StoredValue>,
) -> Vec<u64> {
    let mut superseded = Vec::new();
    for record in records {
        let value = StoredValue::of(&record);
        if let Some(old) = newest.insert(value.topic.clone(), value) {
            superseded.push(old.offset);
        }
    }
    superseded
}

/// A copy of `settings` holding its startup values, leaving none behind:
/// they are then held once, by the channel's index.
pub(crate) fn moved_out(settings: &mut ChannelSettings) -> ChannelSettings {
    let values = settings
        .latest
        .as_mut()
        .map(|l| std::mem::take(&mut l.values));
    let mut copy = settings.clone();
    if let (Some(latest), Some(values)) = (copy.latest.as_mut(), values) {
        latest.values = values;
    }
    copy
}

/// A `latest` channel's `deletion_retention_period`, for the sweep's clock.
pub fn deletion_period_s(settings: &ChannelSettings) -> Option<u64> {
    settings
        .latest
        .as_ref()
        .and_then(|l| l.deletion_retention_period_s)
}

/// One topic's current record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Value {
    pub offset: u64,
    pub received_at_ms: u64,
    pub deleted: bool,
}

/// Bodies of recent values, so that live subscribers and point reads are
/// served without a storage read. Bounded in bytes; the oldest go first.
pub(crate) const CACHE_BYTES: u64 = 256 * 1024;

/// Values removed by one sweep write, so that a sweep never holds the
/// storage thread for long.
pub(crate) const SWEEP_BATCH_RECORDS: usize = 1_000;

#[derive(Default)]
pub(crate) struct BodyCache {
    bodies: HashMap<u64, Rc<Message>>,
    order: VecDeque<u64>,
    bytes: u64,
}

impl BodyCache {
    pub(crate) fn insert(&mut self, offset: u64, message: Rc<Message>) {
        self.bytes += message.cost_bytes();
        self.bodies.insert(offset, message);
        self.order.push_back(offset);
        while self.bytes > CACHE_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.forget(old);
        }
    }

    pub(crate) fn forget(&mut self, offset: u64) {
        if let Some(message) = self.bodies.remove(&offset) {
            self.bytes -= message.cost_bytes();
        }
        // `order` keeps the offset until it reaches the front; an offset
        // is never reused, so a stale one there removes nothing.
        if self.order.len() > 4 * self.bodies.len() + 64 {
            let bodies = &self.bodies;
            self.order.retain(|o| bodies.contains_key(o));
        }
    }
}

pub(crate) struct LatestState {
    pub deletion_retention_period_s: Option<u64>,
    /// Every topic's current record, deletions included.
    pub values: HashMap<Rc<str>, Value>,
    /// The same records by offset, so that a state pass or a resume walks
    /// them in order with a cursor rather than copying them per reader.
    pub by_offset: BTreeMap<u64, Rc<str>>,
    /// Publishes per topic handed to storage and not yet answered: a
    /// deletion behind one has something to delete.
    pub(crate) storing: HashMap<Rc<str>, u32>,
    pub(crate) cache: BodyCache,
    /// The latest readers subscribed to this channel.
    pub readers: Vec<crate::core::Key>,
    pub(crate) sweeping: bool,
    /// Replaced records whose removal storage could not take yet, tried
    /// again at the next tick. At most one per record the channel holds.
    pub(crate) unremoved: Vec<(Rc<str>, u64)>,
    /// Per topic, replaced records whose removal is not yet confirmed. The
    /// sweep leaves such a topic alone: removing its current record first
    /// would let a restart find the replaced one as current again.
    pub(crate) removing: HashMap<Rc<str>, u32>,
}

impl LatestState {
    /// The state of the channel `settings` describes, taking its startup
    /// values out of the settings; `None` for any other channel type.
    pub(crate) fn for_channel(settings: &mut ChannelSettings) -> Option<Box<LatestState>> {
        let latest = settings.latest.as_mut()?;
        let mut values = HashMap::new();
        let mut by_offset = BTreeMap::new();
        for v in std::mem::take(&mut latest.values) {
            let topic: Rc<str> = Rc::from(v.topic);
            let value = Value {
                offset: v.offset,
                received_at_ms: v.received_at_ms,
                deleted: v.deleted,
            };
            by_offset.insert(v.offset, Rc::clone(&topic));
            values.insert(topic, value);
        }
        Some(Box::new(LatestState {
            deletion_retention_period_s: latest.deletion_retention_period_s,
            values,
            by_offset,
            storing: HashMap::new(),
            cache: BodyCache::default(),
            readers: Vec::new(),
            sweeping: false,
            unremoved: Vec::new(),
            removing: HashMap::new(),
        }))
    }

    /// The topic's current value, if it has one that is not a deletion.
    pub fn live_value(&self, topic: &str) -> Option<Value> {
        self.values.get(topic).copied().filter(|v| !v.deleted)
    }

    pub fn cached(&self, offset: u64) -> Option<Rc<Message>> {
        self.cache.bodies.get(&offset).cloned()
    }

    /// A replaced record of `topic` is confirmed removed.
    pub(crate) fn removed_replaced(&mut self, topic: &str) {
        if let Some(count) = self.removing.get_mut(topic) {
            *count -= 1;
            if *count == 0 {
                self.removing.remove(topic);
            }
        }
    }

    /// The topic as the index holds it, so readers share one allocation.
    pub fn topic(&self, topic: &str) -> Option<Rc<str>> {
        self.values.get_key_value(topic).map(|(k, _)| Rc::clone(k))
    }
}

/// What a `latest` channel asked storage for.
pub(crate) enum LatestPending {
    /// Records newer values replaced are being removed, with their topics.
    Superseded {
        channel: usize,
        removals: Vec<(Rc<str>, u64)>,
    },
    /// Values past their period, by topic and offset.
    Sweep {
        channel: usize,
        removed: Vec<(Rc<str>, u64)>,
        more: bool,
    },
    /// Bodies for a reader's waiting values.
    ReaderRead(ReadFor),
    /// A value's body for a point read.
    PointRead(PointRead),
    /// The stored hold of an exactly-once deletion of nothing is being
    /// removed; its PUBCOMP follows.
    ReleaseDropped {
        conn: crate::core::Key,
        ack: PendingAck,
        message: Box<Message>,
    },
}

/// The records a read returned, as the messages subscribers are sent.
pub(crate) fn read_bodies(result: Result<Read, store::StoreError>) -> Vec<(u64, Rc<Message>)> {
    match result {
        Ok(Read::Records(batch)) => batch
            .records
            .into_iter()
            .map(|record| {
                let message = crate::core::message::from_stored(&record.message);
                let message = labelled(message, &record.message.id, record.offset);
                (record.offset, Rc::new(message))
            })
            .collect(),
        Ok(_) => Vec::new(),
        Err(error) => {
            log::warn!("reading a latest channel failed: {error}");
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MessageId;

    fn record(offset: u64, topic: &str, payload: &[u8]) -> Record {
        Record {
            offset,
            message: store::Message::new(
                MessageId::from_publisher("id"),
                offset * 10,
                topic.into(),
                payload.to_vec(),
            ),
        }
    }

    #[test]
    fn folding_keeps_the_newest_record_of_each_topic_and_names_the_rest() {
        let mut newest = HashMap::new();
        let superseded = fold_records(
            [
                record(1, "a", b"1"),
                record(2, "b", b"1"),
                record(3, "a", b"2"),
                record(4, "b", b""),
            ],
            &mut newest,
        );
        assert_eq!(superseded, [1, 2]);
        assert_eq!(newest["a"].offset, 3);
        assert!(!newest["a"].deleted);
        assert_eq!((newest["b"].offset, newest["b"].deleted), (4, true));
        assert_eq!(newest["b"].received_at_ms, 40);
    }

    #[test]
    fn the_body_cache_stays_within_its_bytes() {
        let mut cache = BodyCache::default();
        for offset in 0..2_000u64 {
            let message =
                crate::core::message::from_stored(&record(offset, "t", &[0; 512]).message);
            cache.insert(offset, Rc::new(message));
            assert!(cache.bytes <= CACHE_BYTES);
        }
        assert!(cache.bodies.contains_key(&1_999));
        assert!(!cache.bodies.contains_key(&0));
        assert!(cache.order.len() <= 4 * cache.bodies.len() + 64 + 1);
    }
}
