//! Serving a `latest` channel to one session: the state a subscription is
//! handed, the changes after it, and what a resumed session missed.
//!
//! State - what a SUBSCRIBE or a resume is owed - is served by cursors
//! over the channel's values in offset order, so a reader holds a few
//! numbers for it however many topics the channel has. Changes since are
//! waiting entries, at most one per topic, keyed by the offset of the
//! topic's current value: a newer value takes the place of one still
//! waiting, so a subscriber that falls behind is sent what is current when
//! it has room, never every value in between. A value is only ever sent as
//! its topic's current one and current offsets only rise, so a subscriber
//! is never sent an older value of a topic after a newer one. The
//! publisher never waits for any of this (invariant 16): a commit only
//! marks topics as waiting.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use crate::codec::QoS;
use crate::core::channel::latest::{read_bodies, LatestPending, LatestState};
use crate::core::channel::{ReaderFilter, StoredSend};
use crate::core::message::{with_channel, Delivery, Message};
use crate::core::{Broker, Key, Transport};
use crate::store::{self, ReadLimit, FIRST_OFFSET};

/// Values a reader asks storage for at once.
const READ_BATCH_RECORDS: u32 = 64;

/// Changes a reader holds one by one. Past this a subscriber that has
/// fallen behind is served its changes by a cursor from the lowest one
/// waiting instead, so what it holds stays small however many topics move.
pub(crate) const WAITING_CHANGES_MAX: usize = 1_024;
const _: () = assert!(READ_BATCH_RECORDS > 0 && WAITING_CHANGES_MAX > 0);

/// A cursor over the channel's current values: sent as state (RETAIN
/// set) for a SUBSCRIBE's state pass or what a resume missed, or as changes
/// for a subscriber whose waiting changes passed their bound.
struct Pass {
    /// The filter it serves; `None` for every filter of the reader.
    filter: Option<Box<str>>,
    /// Deletions are served too (`saguin-deletions`).
    deletions: bool,
    /// The next offset to consider.
    next: u64,
    /// The channel's next offset when it began: what is committed after
    /// that reaches the reader as a change. `u64::MAX` for a pass of
    /// changes, which takes every change until it has caught up.
    end: u64,
    /// Served as state rather than as changes.
    as_state: bool,
}

/// One session's subscription to one `latest` channel.
pub(crate) struct LatestReader {
    session: Key,
    channel: usize,
    /// The session's filters that reach this channel.
    filters: Vec<ReaderFilter>,
    /// Changes waiting to be sent, by the offset of the topic's current
    /// value.
    waiting: BTreeMap<u64, Rc<str>>,
    /// The offset each waiting topic waits under.
    waiting_topics: HashMap<Rc<str>, u64>,
    /// State still to be sent; at most one pass per filter, and one for a
    /// resume.
    passes: Vec<Pass>,
    /// Bodies of one storage read, by offset.
    bodies: HashMap<u64, Rc<Message>>,
    reading: bool,
    /// While its session is away: where a resume is served from, the
    /// lowest offset not yet delivered.
    resume_from: Option<u64>,
    /// The lowest offset of a value that could not be delivered (larger
    /// than the client's Maximum Packet Size): a resume starts below it.
    missed_from: Option<u64>,
}

/// A reader's storage read, to be matched with its answer.
pub(crate) struct ReadFor {
    reader: Key,
    from_offset: u64,
}

impl LatestReader {
    /// Whether its session declared a partition slice on a filter that
    /// reaches the channel.
    pub(crate) fn declares_slice(&self) -> bool {
        self.filters.iter().any(|f| f.slice.is_some())
    }

    /// How many passes and waiting changes it holds, for tests of its bound.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.passes.len(), self.waiting.len())
    }

    /// Adds a change of `topic` at `offset`, replacing an older one. Past
    /// the bound, the waiting changes become one pass of changes from the
    /// lowest of them, which also takes every change after (current
    /// offsets only rise, so nothing a change pass has not reached is lost).
    /// Returns whether the change took the place of one still waiting.
    fn offer(&mut self, topic: &Rc<str>, offset: u64) -> bool {
        if self.passes.iter().any(|pass| !pass.as_state) {
            return false;
        }
        let mut superseded = false;
        if let Some(&queued) = self.waiting_topics.get(topic) {
            if queued >= offset {
                return false;
            }
            self.waiting.remove(&queued);
            superseded = true;
        }
        self.waiting_topics.insert(Rc::clone(topic), offset);
        self.waiting.insert(offset, Rc::clone(topic));
        if self.waiting.len() > WAITING_CHANGES_MAX {
            let from = self.waiting.keys().next().copied().unwrap_or(offset);
            self.waiting.clear();
            self.waiting_topics.clear();
            self.passes.push(Pass {
                filter: None,
                // A live deletion reaches every subscriber.
                deletions: true,
                next: from,
                end: u64::MAX,
                as_state: false,
            });
        }
        superseded
    }

    fn withdraw(&mut self, offset: u64) {
        if let Some(topic) = self.waiting.remove(&offset) {
            self.waiting_topics.remove(&topic);
        }
    }

    /// Moves each pass to its next value, dropping the passes that are
    /// done; returns the lowest offset a pass offers, and whether a state
    /// pass offers it.
    fn settle_passes(&mut self, latest: &LatestState) -> Option<(u64, bool)> {
        let filters = &self.filters;
        for pass in &mut self.passes {
            let found = latest
                .by_offset
                .range(pass.next..pass.end)
                .find(|(_, name)| {
                    let deleted = latest.values.get(*name).is_some_and(|v| v.deleted);
                    let reached = match &pass.filter {
                        Some(filter) => filters
                            .iter()
                            .any(|f| f.filter == *filter && f.reaches(name)),
                        None => filters.iter().any(|f| f.reaches(name)),
                    };
                    reached && (pass.deletions || !deleted)
                })
                .map(|(&offset, _)| offset);
            pass.next = found.unwrap_or(pass.end);
        }
        self.passes.retain(|pass| pass.next < pass.end);
        let lowest = self.passes.iter().map(|pass| pass.next).min()?;
        let as_state = self
            .passes
            .iter()
            .any(|pass| pass.as_state && pass.next == lowest);
        Some((lowest, as_state))
    }

    /// Marks `offset` as served: taken off the waiting changes, and every
    /// pass standing on it moves past it.
    fn served(&mut self, offset: u64) {
        self.withdraw(offset);
        for pass in &mut self.passes {
            if pass.next == offset {
                pass.next = offset + 1;
            }
        }
    }

    /// The lowest offset still owed, for a resume position.
    fn lowest_owed(&self) -> Option<u64> {
        let waiting = self.waiting.keys().next().copied();
        let passes = self.passes.iter().map(|pass| pass.next).min();
        [waiting, passes, self.missed_from]
            .into_iter()
            .flatten()
            .min()
    }

    fn matches(&self, topic_name: &str) -> bool {
        self.filters.iter().any(|f| f.reaches(topic_name))
    }

    /// Only QoS 0 is granted: nothing is acknowledged, so nothing can be
    /// known to have arrived, and a resume is served the whole state.
    fn at_most_once(&self) -> bool {
        self.filters
            .iter()
            .all(|f| f.options.qos == QoS::AtMostOnce)
    }

    /// The delivery of `message` to this reader: the highest QoS its
    /// matching filters grant, their identifiers, RETAIN for state and
    /// otherwise only under Retain As Published. `None` when no filter
    /// matches, or No Local withholds it from every one that does.
    fn delivery_for(
        &self,
        message: &Rc<Message>,
        offset: u64,
        as_state: bool,
        client_id: &str,
    ) -> Option<Delivery> {
        let own = message.publisher.as_deref() == Some(client_id);
        let mut granted: Option<QoS> = None;
        let mut ids = Vec::new();
        let mut retain_as_published = false;
        for entry in &self.filters {
            let options = entry.options;
            if !entry.reaches(&message.topic) || (options.no_local && own) {
                continue;
            }
            granted = Some(granted.map_or(options.qos, |q| q.max(options.qos)));
            ids.extend(entry.subscription_id);
            retain_as_published |= options.retain_as_published;
        }
        let mut qos = granted?.min(message.qos);
        // A bridge's outbound rule is owed each change whatever QoS it was
        // published at, so one made while the link is down waits for it.
        if crate::core::is_bridge_client_id(client_id) {
            qos = qos.max(QoS::AtLeastOnce);
        }
        Some(Delivery {
            qos,
            retain: as_state || (retain_as_published && message.retain),
            subscription_ids: ids,
            group: None,
            reader: None,
            latest: Some(offset),
            message: Rc::clone(message),
        })
    }
}

impl Broker {
    /// Adds `filter` to the session's subscription to a `latest` channel,
    /// making it if needed. Nothing is sent here: the state pass follows
    /// the SUBACK.
    pub(crate) fn subscribe_latest(
        &mut self,
        session_key: Key,
        channel: usize,
        entry: ReaderFilter,
    ) {
        let existing = self.reader_of(session_key, channel);
        let key = match existing {
            Some(key) => key,
            None => {
                let key = self
                    .latest_readers
                    .insert_with(|_| LatestReader {
                        session: session_key,
                        channel,
                        filters: Vec::new(),
                        waiting: BTreeMap::new(),
                        waiting_topics: HashMap::new(),
                        passes: Vec::new(),
                        bodies: HashMap::new(),
                        reading: false,
                        resume_from: None,
                        missed_from: None,
                    })
                    .expect("readers are bounded by subscriptions");
                if let Some(latest) = self.channels[channel].latest.as_deref_mut() {
                    latest.readers.push(key);
                }
                if let Some(session) = self.sessions.get_mut(session_key) {
                    session.latest_readers.push(key);
                }
                key
            }
        };
        let reader = self.latest_readers.get_mut(key).expect("found or made");
        ReaderFilter::set(&mut reader.filters, entry);
    }

    fn reader_of(&self, session_key: Key, channel: usize) -> Option<Key> {
        self.sessions
            .get(session_key)?
            .latest_readers
            .iter()
            .copied()
            .find(|&k| {
                self.latest_readers
                    .get(k)
                    .is_some_and(|r| r.channel == channel)
            })
    }

    /// The current value of every topic `filter` reaches in each `latest`
    /// channel, to be sent as state (RETAIN set): a pass over the values
    /// held when the SUBSCRIBE arrived. Deletions are included only for a
    /// SUBSCRIBE that carried `saguin-deletions`.
    pub(crate) fn latest_state_pass(&mut self, session_key: Key, filter: &str, deletions: bool) {
        for channel in self.claims.channels_reached_by(filter) {
            let Some(reader_key) = self.reader_of(session_key, channel) else {
                continue;
            };
            let ch = &self.channels[channel];
            let pass = Pass {
                filter: Some(filter.into()),
                deletions,
                next: ch.floor,
                end: ch.next,
                as_state: true,
            };
            let reader = self
                .latest_readers
                .get_mut(reader_key)
                .expect("listed by its session");
            // The whole state is on its way: a value missed earlier no
            // longer holds the resume position down.
            reader.missed_from = None;
            reader
                .passes
                .retain(|p| p.filter.as_deref() != Some(filter));
            reader.passes.push(pass);
        }
    }

    /// A topic's value changed: every connected subscriber it reaches has
    /// it waiting, and is served as its window allows. A session that is
    /// away is served from its resume position when it comes back.
    pub(crate) fn offer_change(
        &mut self,
        channel: usize,
        topic_name: &Rc<str>,
        offset: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let readers = match self.channels[channel].latest.as_deref() {
            Some(latest) => latest.readers.clone(),
            None => return,
        };
        for key in readers {
            let Some(reader) = self.latest_readers.get(key) else {
                continue;
            };
            if reader.resume_from.is_some() || !reader.matches(topic_name) {
                continue;
            }
            let session = reader.session;
            if !self.session_is_connected(session) {
                continue;
            }
            let reader = self.latest_readers.get_mut(key).expect("checked above");
            if reader.offer(topic_name, offset) {
                self.tallies.latest_superseded(channel);
            }
            self.pump_latest(key, now_ms, out);
        }
    }

    /// Offsets that are gone from the channel are sent to nobody.
    pub(crate) fn withdraw_waiting(&mut self, channel: usize, offsets: &[u64]) {
        let readers = match self.channels[channel].latest.as_deref() {
            Some(latest) => latest.readers.clone(),
            None => return,
        };
        for key in readers {
            if let Some(reader) = self.latest_readers.get_mut(key) {
                for &offset in offsets {
                    reader.withdraw(offset);
                }
            }
        }
    }

    /// The latest readers a session has, copied so each can be served.
    fn latest_readers_of(&self, session_key: Key) -> Vec<Key> {
        self.sessions
            .get(session_key)
            .map(|s| s.latest_readers.clone())
            .unwrap_or_default()
    }

    pub(crate) fn pump_latest_of(
        &mut self,
        session_key: Key,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let readers = self.latest_readers_of(session_key);
        for key in readers {
            self.pump_latest(key, now_ms, out);
        }
    }

    /// Serves every reader with something waiting: at each tick, for a QoS 0
    /// subscriber whose buffer was full and a read storage could not take.
    pub(crate) fn pump_all_latest(&mut self, now_ms: u64, out: &mut impl Transport) {
        for key in self.latest_readers.keys() {
            if self
                .latest_readers
                .get(key)
                .is_some_and(|r| !r.waiting.is_empty() || !r.passes.is_empty())
            {
                self.pump_latest(key, now_ms, out);
            }
        }
    }

    /// Sends what the reader is owed, lowest offset first, while its
    /// session has room on the wire. A body not in memory is read from
    /// storage first; the reader resumes when it arrives.
    fn pump_latest(&mut self, key: Key, now_ms: u64, out: &mut impl Transport) {
        loop {
            let Some(reader) = self.latest_readers.get_mut(key) else {
                return;
            };
            if reader.resume_from.is_some() {
                return;
            }
            let latest = self.channels[reader.channel]
                .latest
                .as_deref()
                .expect("a latest channel");
            let passed = reader.settle_passes(latest);
            let change = reader.waiting.keys().next().copied();
            let from_pass = passed.map(|(offset, _)| offset);
            let Some(offset) = [from_pass, change].into_iter().flatten().min() else {
                return;
            };
            let session_key = reader.session;
            if !self.session_has_room(session_key) {
                return;
            }
            let reader = self.latest_readers.get(key).expect("checked above");
            let latest = self.channels[reader.channel]
                .latest
                .as_deref()
                .expect("a latest channel");
            let body = reader
                .bodies
                .get(&offset)
                .cloned()
                .or_else(|| latest.cached(offset));
            let Some(message) = body else {
                self.request_bodies(key, offset, out);
                return;
            };
            let client_id = self
                .sessions
                .get(session_key)
                .map(|s| Rc::clone(&s.client_id))
                .unwrap_or_else(|| Rc::from(""));
            let as_state = passed.is_some_and(|(o, state)| o == offset && state);
            let mut delivery = reader.delivery_for(&message, offset, as_state, &client_id);
            if delivery.is_some() && !self.may_read(session_key, &message.topic) {
                // Stalled here until a grant returns.
                return;
            }
            let names_channel = reader
                .filters
                .iter()
                .any(|f| f.names_channel && f.reaches(&message.topic));
            if let Some(delivery) = delivery.as_mut().filter(|_| names_channel) {
                let name = &self.channels[reader.channel].settings.name;
                delivery.message = with_channel(&message, name);
            }
            let sent = match delivery {
                Some(delivery) => self.send_value(key, session_key, delivery, now_ms, out),
                None => true,
            };
            if !sent {
                // The connection's buffer is full: it waits for the next try.
                return;
            }
            if let Some(reader) = self.latest_readers.get_mut(key) {
                reader.served(offset);
                reader.bodies.remove(&offset);
            }
        }
    }

    /// Hands one value to its session; false when a QoS 0 value found the
    /// connection's buffer full. A value too large for the client is not
    /// sent and holds the resume position below it.
    fn send_value(
        &mut self,
        key: Key,
        session_key: Key,
        delivery: Delivery,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        match self.send_stored(session_key, delivery, now_ms, out) {
            StoredSend::NoConnection | StoredSend::Expired | StoredSend::Queued => true,
            StoredSend::TooLarge { conn, delivery } => {
                self.stats.deliveries_too_large += 1;
                let offset = delivery.latest.unwrap_or(0);
                log::warn!(
                    "a value of {} for {} is larger than its Maximum Packet Size and was not sent",
                    delivery.message.topic,
                    self.client_id_of(conn)
                );
                if let Some(reader) = self.latest_readers.get_mut(key) {
                    reader.missed_from = Some(reader.missed_from.map_or(offset, |m| m.min(offset)));
                }
                true
            }
            StoredSend::Sent(sent) => sent,
        }
    }

    /// Reads the bodies of the reader's waiting values from `from_offset`.
    fn request_bodies(&mut self, key: Key, from_offset: u64, out: &mut impl Transport) {
        let Some(reader) = self.latest_readers.get(key) else {
            return;
        };
        if reader.reading {
            return;
        }
        let channel = reader.channel;
        let limit = ReadLimit {
            max_records: READ_BATCH_RECORDS,
            max_bytes: self.settings.session_queue_bytes / 2,
        };
        let pending = LatestPending::ReaderRead(ReadFor {
            reader: key,
            from_offset,
        });
        // A busy storage thread is asked again at the next tick.
        if self.read_latest(channel, from_offset, limit, pending, out) {
            self.latest_readers.get_mut(key).expect("checked").reading = true;
        }
    }

    pub(crate) fn latest_read_completed(
        &mut self,
        read: ReadFor,
        result: Result<store::Read, store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(reader) = self.latest_readers.get_mut(read.reader) else {
            return;
        };
        reader.reading = false;
        if result.is_err() {
            // Logged by `read_bodies`; asked again at the next tick.
            read_bodies(result);
            return;
        }
        reader.bodies = read_bodies(result).into_iter().collect();
        if !reader.bodies.contains_key(&read.from_offset) {
            // The value it was read for is gone: replaced or expired since,
            // in which case the index has moved on too, or missing from
            // storage, which is said and stepped over rather than asked for
            // again and again.
            let latest = self.channels[reader.channel]
                .latest
                .as_deref()
                .expect("a latest channel");
            if latest.by_offset.contains_key(&read.from_offset) {
                log::error!(
                    "value {} of channel {} is in the index but not in storage; it is not sent",
                    read.from_offset,
                    self.channels[reader.channel].settings.name
                );
                reader.served(read.from_offset);
            } else {
                reader.withdraw(read.from_offset);
            }
        }
        self.pump_latest(read.reader, now_ms, out);
    }

    /// The session's connection ended and the session is kept: each
    /// reader remembers the lowest offset it has not delivered, and what
    /// was waiting is dropped (a resume serves it again from there).
    pub(crate) fn latest_readers_away(&mut self, session_key: Key) {
        let readers = self.latest_readers_of(session_key);
        for key in readers {
            let Some(reader) = self.latest_readers.get(key) else {
                continue;
            };
            let next = self.channels[reader.channel].next;
            let from = if reader.at_most_once() {
                FIRST_OFFSET
            } else {
                reader.lowest_owed().map_or(next, |owed| owed.min(next))
            };
            let reader = self.latest_readers.get_mut(key).expect("checked above");
            reader.resume_from = Some(from);
            reader.waiting.clear();
            reader.waiting_topics.clear();
            reader.passes.clear();
            reader.bodies.clear();
        }
    }

    /// A session restored at a start: its marks were not kept, so its
    /// client's next resume is served the whole of each channel's state.
    pub(crate) fn latest_readers_restored(&mut self, session_key: Key) {
        let readers = self.latest_readers_of(session_key);
        for key in readers {
            let Some(reader) = self.latest_readers.get(key) else {
                continue;
            };
            let floor = self.channels[reader.channel].floor;
            let reader = self.latest_readers.get_mut(key).expect("checked above");
            reader.resume_from = Some(floor);
        }
    }

    /// A session resumed without a new SUBSCRIBE. First, a value it still
    /// holds that a newer one has replaced is withdrawn before anything is
    /// re-sent, so the stale one never goes on the wire again (and its
    /// packet identifier is not freed while owed). Then each reader is
    /// given a pass from its resume position: the values that changed
    /// while it was away, not the whole state. Deletions are left out, as
    /// from a state pass without `saguin-deletions`.
    pub(crate) fn resume_latest_readers(&mut self, session_key: Key) {
        self.withdraw_superseded(session_key);
        let readers = self.latest_readers_of(session_key);
        for key in readers {
            let Some(reader) = self.latest_readers.get_mut(key) else {
                continue;
            };
            let Some(from) = reader.resume_from.take() else {
                continue;
            };
            let end = self.channels[reader.channel].next;
            reader.passes.push(Pass {
                filter: None,
                deletions: false,
                next: from,
                end,
                as_state: true,
            });
        }
    }

    fn withdraw_superseded(&mut self, session_key: Key) {
        let current = |broker: &Broker, delivery: &Delivery| {
            let Some(offset) = delivery.latest else {
                return true;
            };
            broker
                .channel_for(&delivery.message.topic)
                .and_then(|c| broker.channels[c].latest.as_deref())
                .and_then(|l| l.values.get(&*delivery.message.topic))
                .is_some_and(|v| v.offset == offset)
        };
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let stale: Vec<u16> = session
            .inflight
            .iter()
            .filter(|(_, f)| {
                f.stage == crate::core::session::OutboundStage::Published
                    && !current(self, &f.delivery)
            })
            .map(|(&id, _)| id)
            .collect();
        let stale_waiting: Vec<usize> = session
            .waiting
            .iter()
            .enumerate()
            .filter(|(_, d)| !current(self, d))
            .map(|(i, _)| i)
            .collect();
        let session = self.sessions.get_mut(session_key).expect("checked above");
        for id in stale {
            let finished = session.inflight.remove(&id).expect("listed above");
            let cost = finished.delivery.message.cost_bytes();
            session.inflight_bytes -= cost;
            session.held_bytes -= cost;
        }
        for index in stale_waiting.into_iter().rev() {
            let delivery = session.waiting.remove(index).expect("listed above");
            session.held_bytes -= delivery.message.cost_bytes();
        }
    }

    /// Removes `filter` from the session's `latest` readers; a reader left
    /// with no filter ends.
    pub(crate) fn unsubscribe_latest(&mut self, session_key: Key, filter: &str) {
        let readers = self.latest_readers_of(session_key);
        for key in readers {
            let Some(reader) = self.latest_readers.get_mut(key) else {
                continue;
            };
            reader.filters.retain(|f| *f.filter != *filter);
            reader
                .passes
                .retain(|p| p.filter.as_deref() != Some(filter));
            if reader.filters.is_empty() {
                self.end_latest_reader(key);
            }
        }
    }

    /// Ends every `latest` reader of a session that ends.
    pub(crate) fn drop_latest_readers(&mut self, session_key: Key) {
        // Found by their session field: an ending session may already be
        // out of the table.
        let readers: Vec<Key> = self
            .latest_readers
            .iter()
            .filter(|(_, r)| r.session == session_key)
            .map(|(k, _)| k)
            .collect();
        for key in readers {
            self.end_latest_reader(key);
        }
    }

    fn end_latest_reader(&mut self, key: Key) {
        let Some(reader) = self.latest_readers.remove(key) else {
            return;
        };
        if let Some(latest) = self.channels[reader.channel].latest.as_deref_mut() {
            latest.readers.retain(|&r| r != key);
        }
        if let Some(session) = self.sessions.get_mut(reader.session) {
            session.latest_readers.retain(|&r| r != key);
        }
    }
}
