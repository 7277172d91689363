//! The subscribers of latest channels as the broker drives them: a
//! pass over every current value, then each change as it lands. The
//! reader's state and its pure rules live in
//! [`crate::core::channel::latest::reader`].

use crate::core::channel::latest::reader::*;
use crate::core::channel::latest::{read_bodies, LatestPending};
use crate::core::channel::{ReaderFilter, StoredSend};
use crate::core::message::{with_channel, Delivery};
use crate::core::{Broker, Key, Transport};
use crate::store::{self, ReadLimit, FIRST_OFFSET};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

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

    /// Withdraws the `latest` values a resumed session holds that a newer
    /// value replaced, or that it may no longer read (invariant 16).
    fn withdraw_superseded(&mut self, session_key: Key) {
        let current = |broker: &Broker, delivery: &Delivery| {
            let Some(offset) = delivery.latest else {
                return true;
            };
            broker.may_read(session_key, &delivery.message.topic)
                && broker
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
