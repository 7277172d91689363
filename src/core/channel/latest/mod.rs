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

use crate::core::refusal::Refusal;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use crate::core::channel::latest::point_read::PointRead;
use crate::core::channel::latest::reader::ReadFor;
use crate::core::channel::{ChannelSettings, Pending, PendingAck};
use crate::core::message::labelled;
use crate::core::message::Message;
use crate::core::StoreRequest;
use crate::core::{Broker, Transport};
use crate::store::{self, Answer, MessageId, Outcome, Read, Record, Write};

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
const CACHE_BYTES: u64 = 256 * 1024;

/// Values removed by one sweep write, so that a sweep never holds the
/// storage thread for long.
const SWEEP_BATCH_RECORDS: usize = 1_000;

#[derive(Default)]
struct BodyCache {
    bodies: HashMap<u64, Rc<Message>>,
    order: VecDeque<u64>,
    bytes: u64,
}

impl BodyCache {
    fn insert(&mut self, offset: u64, message: Rc<Message>) {
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

    fn forget(&mut self, offset: u64) {
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
    storing: HashMap<Rc<str>, u32>,
    cache: BodyCache,
    /// The latest readers subscribed to this channel.
    pub readers: Vec<crate::core::Key>,
    sweeping: bool,
    /// Replaced records whose removal storage could not take yet, tried
    /// again at the next tick. At most one per record the channel holds.
    unremoved: Vec<(Rc<str>, u64)>,
    /// Per topic, replaced records whose removal is not yet confirmed. The
    /// sweep leaves such a topic alone: removing its current record first
    /// would let a restart find the replaced one as current again.
    removing: HashMap<Rc<str>, u32>,
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
    fn removed_replaced(&mut self, topic: &str) {
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

impl Broker {
    /// A deletion of a topic that has no value, and none on its way to
    /// storage: there is nothing to say is gone, so nothing is stored.
    pub(crate) fn latest_delete_of_nothing(&self, channel: usize, message: &Message) -> bool {
        let Some(latest) = self.channels[channel].latest.as_deref() else {
            return false;
        };
        message.payload.is_empty()
            && latest.live_value(&message.topic).is_none()
            && !latest.storing.contains_key(&*message.topic)
    }

    /// A deletion of nothing: nothing to say is gone, so nothing is stored
    /// and it is answered at once - unless it is an exactly-once release
    /// whose hold is stored. Then the answer waits for the hold's removal:
    /// a restart finding it still held would take the client's next
    /// publish under that identifier for a resend (invariant 18). Gives
    /// the message back when storage cannot take the removal now.
    pub(crate) fn latest_release_of_nothing(
        &mut self,
        channel: usize,
        message: Message,
        conn: Option<(crate::core::Key, PendingAck)>,
        release_drop: Option<Write>,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Result<(), Box<Message>> {
        let provider = self.channels[channel].settings.provider;
        match (release_drop, conn) {
            (Some(drop), Some((conn, ack))) => {
                let ticket = self.next_ticket();
                let writes = vec![drop];
                if !out.store(provider, StoreRequest::Commit { ticket, writes }) {
                    return Err(Box::new(message));
                }
                let message = Box::new(message);
                let pending = LatestPending::ReleaseDropped { conn, ack, message };
                self.pending.insert(ticket, Pending::Latest(pending));
            }
            (drop, conn) => {
                self.holds_dropped(drop.map(|d| (provider, d)).into_iter().collect(), out);
                if let Some((conn, ack)) = conn {
                    self.answer_publish(conn, ack, Ok(()), now_ms, out);
                }
            }
        }
        Ok(())
    }

    /// The record a new value for `topic` replaces, for a `latest`
    /// channel: its current one, stored or a deletion. The write that
    /// stores the new value removes it in the same transaction, so a value
    /// no larger than the last is taken even by a full provider. Where
    /// another value of the topic is still on its way, the record named
    /// here may already be gone when the write runs; the write is then a
    /// plain append, and the one in between is removed after its commit.
    pub(crate) fn latest_replaces(&self, channel: usize, topic: &str) -> Option<u64> {
        let latest = self.channels[channel].latest.as_deref()?;
        latest.values.get(topic).map(|v| v.offset)
    }

    /// Counts a publish to a `latest` topic on its way to storage
    /// (`started`) or answered.
    pub(crate) fn latest_storing(&mut self, channel: usize, topic: &str, started: bool) {
        let Some(latest) = self.channels[channel].latest.as_deref_mut() else {
            return;
        };
        if started {
            *latest.storing.entry(topic.into()).or_insert(0) += 1;
        } else if let Some(count) = latest.storing.get_mut(topic) {
            *count -= 1;
            if *count == 0 {
                latest.storing.remove(topic);
            }
        }
    }

    /// A value was committed at `offset`: it becomes its topic's current
    /// value, the record it replaced is removed, and every subscriber is
    /// handed it (a deletion too: that is how a subscriber learns of it).
    pub(crate) fn latest_committed(
        &mut self,
        channel: usize,
        message: Message,
        id: &MessageId,
        offset: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let labelled = Rc::new(labelled(message, id, offset));
        let ch = &mut self.channels[channel];
        ch.next = ch.next.max(offset + 1);
        let latest = ch.latest.as_deref_mut().expect("a latest channel");
        let topic: Rc<str> = latest
            .topic(&labelled.topic)
            .unwrap_or_else(|| Rc::from(&*labelled.topic));
        let value = Value {
            offset,
            received_at_ms: labelled.received_at_unix_ms,
            deleted: labelled.payload.is_empty(),
        };
        let replaced = latest.values.insert(Rc::clone(&topic), value);
        latest.by_offset.insert(offset, Rc::clone(&topic));
        latest.cache.insert(offset, Rc::clone(&labelled));
        if let Some(old) = replaced {
            latest.by_offset.remove(&old.offset);
            latest.cache.forget(old.offset);
            *latest.removing.entry(Rc::clone(&topic)).or_insert(0) += 1;
            self.remove_replaced(channel, vec![(Rc::clone(&topic), old.offset)], out);
        }
        self.offer_change(channel, &topic, offset, now_ms, out);
        // A shared group is served changes, one member at a time.
        self.hand_to_groups(&labelled, now_ms, out);
    }

    /// Removes records newer values replaced, in a write of their own after
    /// the new value's commit: a batch holding both would remove the old
    /// value even where the new one is refused. What storage cannot take
    /// now is tried again at the next tick (and a crash in between is
    /// mended at startup).
    fn remove_replaced(
        &mut self,
        channel: usize,
        removals: Vec<(Rc<str>, u64)>,
        out: &mut impl Transport,
    ) {
        let settings = &self.channels[channel].settings;
        let (name, provider) = (settings.name.clone(), settings.provider);
        let writes = removals
            .iter()
            .map(|&(_, offset)| Write::Remove {
                channel: name.clone(),
                offset,
            })
            .collect();
        let ticket = self.next_ticket();
        if out.store(provider, StoreRequest::Commit { ticket, writes }) {
            self.channels[channel].room_freed();
            let pending = LatestPending::Superseded { channel, removals };
            self.pending.insert(ticket, Pending::Latest(pending));
        } else if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
            latest.unremoved.extend(removals);
        }
    }

    /// At each tick: removals storage could not take, and subscribers with
    /// values still waiting.
    pub(crate) fn latest_tick(&mut self, now_ms: u64, out: &mut impl Transport) {
        for channel in 0..self.channels.len() {
            let Some(latest) = self.channels[channel].latest.as_deref_mut() else {
                continue;
            };
            if latest.unremoved.is_empty() {
                continue;
            }
            let batch = latest.unremoved.len().min(store::MAX_BATCH_WRITES);
            let removals: Vec<(Rc<str>, u64)> = latest.unremoved.drain(..batch).collect();
            self.remove_replaced(channel, removals, out);
        }
        self.pump_all_latest(now_ms, out);
    }

    /// Asks for the values past their period to be removed: a value older
    /// than `retention_period`, a deletion older than
    /// `deletion_retention_period`. A topic whose value goes is then
    /// absent, exactly as one never set.
    pub(crate) fn sweep_latest(&mut self, channel: usize, now_ms: u64, out: &mut impl Transport) {
        let now_unix_ms = self.unix_ms(now_ms);
        let ch = &self.channels[channel];
        let Some(latest) = ch.latest.as_deref() else {
            return;
        };
        if latest.sweeping {
            return;
        }
        let cutoff = |period_s: Option<u64>| {
            period_s.map(|s| now_unix_ms.saturating_sub(s.saturating_mul(1000)))
        };
        let value_cutoff_ms = cutoff(ch.settings.retention_period_s);
        let deletion_cutoff_ms = cutoff(latest.deletion_retention_period_s);
        let mut removed = Vec::new();
        let mut more = false;
        for (topic, value) in &latest.values {
            if latest.removing.contains_key(topic) {
                // Taken at a later sweep, once what it replaced is gone.
                continue;
            }
            let cutoff_ms = if value.deleted {
                deletion_cutoff_ms
            } else {
                value_cutoff_ms
            };
            // A record with no receipt time is never too old.
            let expired =
                cutoff_ms.is_some_and(|c| value.received_at_ms != 0 && value.received_at_ms < c);
            if !expired {
                continue;
            }
            if removed.len() == SWEEP_BATCH_RECORDS {
                more = true;
                break;
            }
            removed.push((Rc::clone(topic), value.offset));
        }
        if removed.is_empty() {
            return;
        }
        let writes = removed
            .iter()
            .map(|(_, offset)| Write::Remove {
                channel: ch.settings.name.clone(),
                offset: *offset,
            })
            .collect();
        let provider = ch.settings.provider;
        let ticket = self.next_ticket();
        if out.store(provider, StoreRequest::Commit { ticket, writes }) {
            self.channels[channel].room_freed();
            let pending = LatestPending::Sweep {
                channel,
                removed,
                more,
            };
            self.pending.insert(ticket, Pending::Latest(pending));
            if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                latest.sweeping = true;
            }
        }
    }

    pub(crate) fn latest_answered(
        &mut self,
        pending: LatestPending,
        answer: Answer,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        match (pending, answer) {
            (LatestPending::Superseded { channel, removals }, Answer::Committed(result)) => {
                match result {
                    Ok(outcomes) => {
                        self.floor_after_removals(channel, &outcomes);
                        if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                            for (topic, _) in &removals {
                                latest.removed_replaced(topic);
                            }
                        }
                    }
                    Err(error) => {
                        log::warn!(
                            "removing replaced values of {} failed: {error}; it is tried again",
                            self.channels[channel].settings.name
                        );
                        if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                            latest.unremoved.extend(removals);
                        }
                    }
                }
            }
            (
                LatestPending::Sweep {
                    channel,
                    removed,
                    more,
                },
                Answer::Committed(result),
            ) => {
                if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                    latest.sweeping = false;
                }
                match result {
                    Ok(outcomes) => {
                        self.floor_after_removals(channel, &outcomes);
                        self.expired(channel, &removed);
                        if more {
                            self.sweep_latest(channel, now_ms, out);
                        }
                    }
                    Err(error) => log::warn!(
                        "a retention sweep of {} failed: {error}; it runs again at the next sweep",
                        self.channels[channel].settings.name
                    ),
                }
            }
            (LatestPending::ReaderRead(read), Answer::Read(result)) => {
                self.latest_read_completed(read, result, now_ms, out)
            }
            (LatestPending::PointRead(read), Answer::Read(result)) => {
                self.point_read_completed(read, result, now_ms, out)
            }
            (LatestPending::ReleaseDropped { conn, ack, message }, Answer::Committed(result)) => {
                match result {
                    Ok(_) => self.answer_publish(conn, ack, Ok(()), now_ms, out),
                    Err(error) => {
                        log::warn!("removing an exactly-once publish's hold failed: {error}");
                        // Still stored, so held again: the PUBREL on the
                        // next connection completes it.
                        if let PendingAck::Pubcomp { packet_id } = ack {
                            self.hold_again(conn, packet_id, *message, now_ms);
                        }
                        let refusal = Refusal::ExactlyOnceNotCompleted;
                        self.answer_publish(conn, ack, Err(refusal), now_ms, out);
                    }
                }
            }
            (_, answer) => {
                log::error!("a storage answer did not match its latest request: {answer:?}")
            }
        }
    }

    fn floor_after_removals(&mut self, channel: usize, outcomes: &[Outcome]) {
        let ch = &mut self.channels[channel];
        for outcome in outcomes {
            if let Outcome::Removed { floor, .. } = outcome {
                ch.floor = ch.floor.max(*floor);
            }
        }
    }

    /// Values the sweep removed leave the index, and nobody is sent one
    /// still waiting: a value past its period is not there at all.
    fn expired(&mut self, channel: usize, removed: &[(Rc<str>, u64)]) {
        let ch = &mut self.channels[channel];
        let name = ch.settings.name.clone();
        let latest = ch.latest.as_deref_mut().expect("a latest channel");
        let mut gone = Vec::new();
        for (topic, offset) in removed {
            // A newer value committed since the sweep asked stays.
            if latest
                .values
                .get(topic)
                .is_some_and(|v| v.offset == *offset)
            {
                latest.values.remove(topic);
                latest.by_offset.remove(offset);
                latest.cache.forget(*offset);
                gone.push(*offset);
            }
        }
        if !gone.is_empty() {
            log::info!(
                "retention removed {} values and deletions from {name}",
                gone.len()
            );
        }
        self.withdraw_waiting(channel, &gone);
    }

    /// Reads a `latest` channel's stored value for a point read or a
    /// reader: one storage read from `from_offset`.
    pub(crate) fn read_latest(
        &mut self,
        channel: usize,
        from_offset: u64,
        limit: store::ReadLimit,
        pending: LatestPending,
        out: &mut impl Transport,
    ) -> bool {
        let settings = &self.channels[channel].settings;
        let (name, provider) = (settings.name.clone(), settings.provider);
        let ticket = self.next_ticket();
        let request = StoreRequest::Read {
            ticket,
            channel: name,
            from_offset,
            limit,
        };
        if !out.store(provider, request) {
            return false;
        }
        self.pending.insert(ticket, Pending::Latest(pending));
        true
    }
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
