//! Append channels as the broker drives them: storing a publish and
//! answering it once storage commits (and routing every storage
//! completion to its owner), feeding each reader from storage, committing
//! readers' positions, and trimming by retention. The channels' state and
//! their pure rules live in [`crate::core::channel`].

use crate::codec::{encoded_len, Disconnect, Packet, QoS, RetainHandling};
use crate::core::broadcast::topic_index::Target;
use crate::core::channel::positions::OwedDrop;
use crate::core::channel::*;
use crate::core::message::outgoing_publish;
use crate::core::message::{
    from_stored, labelled, publisher_id, to_stored, with_channel, Delivery, Message,
};
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key, StoreRequest, Transport};
use crate::log_limit::{limited, LogLimit};
use crate::store::{
    self, Answer, Completion, MessageId, Outcome, Read, ReadLimit, TrimRule, Write,
};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::rc::Rc;

/// Positions not stored: retried every interval, so a provider that has
/// stopped taking writes would otherwise repeat the line forever.
pub(crate) static POSITIONS_NOT_STORED: LogLimit = LogLimit::new(
    "consumer positions were not stored",
    log::Level::Warn,
    3,
    60_000,
);

impl Broker {
    pub(crate) fn next_ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        debug_assert!(
            !self.pending.contains_key(&self.next_ticket),
            "a ticket names one request"
        );
        self.next_ticket
    }

    /// The channel that holds `topic`, if one does.
    pub(crate) fn channel_for(&self, topic: &str) -> Option<usize> {
        self.claims.channel_for_topic(topic)
    }

    /// Asks a channel's provider to store `message`. Gives the message back
    /// when the storage thread cannot take the request (it is behind, or
    /// stopped).
    pub(crate) fn store_publish(
        &mut self,
        channel: usize,
        message: Message,
        conn: Option<(Key, PendingAck)>,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Result<(), Box<Message>> {
        // An exactly-once release takes its stored hold in the same commit.
        let release_drop = self.persist.release_drop.take();
        if self.latest_delete_of_nothing(channel, &message) {
            return self.latest_release_of_nothing(
                channel,
                message,
                conn,
                release_drop,
                now_ms,
                out,
            );
        }
        let mut message = message;
        self.prepare_for_channel(channel, &mut message);
        // Publishes waiting on storage are held twice (the message and its
        // record); past the bound the storage thread is behind, and a new
        // one is refused rather than held without limit.
        let cost_bytes = message.cost_bytes() * 2;
        if self.pending_publish_bytes > 0
            && self.pending_publish_bytes + cost_bytes > self.pending_publish_max_bytes()
        {
            return Err(Box::new(message));
        }
        let id = publisher_id(&message)
            .unwrap_or_else(|| self.id_generator.next_id(message.received_at_unix_ms));
        let stored = to_stored(&message, &id);
        let replaces = self.latest_replaces(channel, &message.topic);
        let settings = &self.channels[channel].settings;
        let write = match replaces {
            Some(offset) => Write::Replace {
                channel: settings.name.clone(),
                offset,
                message: stored,
                channel_max_bytes: settings.max_bytes,
            },
            None => Write::Append {
                channel: settings.name.clone(),
                message: stored,
                channel_max_bytes: settings.max_bytes,
            },
        };
        let provider = settings.provider;
        let ticket = self.next_ticket();
        let mut writes = vec![write];
        writes.extend(release_drop);
        if !out.store(provider, StoreRequest::Commit { ticket, writes }) {
            return Err(Box::new(message));
        }
        self.pending_publish_bytes += cost_bytes;
        // One publish is always taken; past that, the bound holds.
        debug_assert!(
            self.pending_publish_bytes == cost_bytes
                || self.pending_publish_bytes <= self.pending_publish_max_bytes()
        );
        self.latest_storing(channel, &message.topic, true);
        let pending = match conn {
            Some((conn, ack)) => Pending::Publish {
                conn,
                ack,
                channel,
                message,
                id,
            },
            None => Pending::Unanswered {
                channel,
                message,
                id,
            },
        };
        self.pending.insert(ticket, pending);
        Ok(())
    }

    /// A publish's commit answer, noting whether the channel is at its
    /// bound.
    fn channel_commit_answer(
        &mut self,
        channel: usize,
        result: Result<Vec<Outcome>, store::StoreError>,
    ) -> Result<u64, Refusal> {
        let answer = commit_answer(result);
        match answer {
            Ok(_) => self.channels[channel].at_bound = false,
            Err(Refusal::ChannelFull) => self.channels[channel].at_bound = true,
            Err(_) => {}
        }
        answer
    }

    /// What publishes waiting on storage may hold: enough for any burst a
    /// gateway's storage can absorb, and always a few of the largest.
    fn pending_publish_max_bytes(&self) -> u64 {
        Self::waiting_publish_max_bytes(&self.settings)
    }

    /// The bound [`Self::pending_publish_max_bytes`] applies, from settings.
    pub fn waiting_publish_max_bytes(settings: &crate::core::Settings) -> u64 {
        (16 * 1024 * 1024).max(4 * u64::from(settings.max_message_size_bytes))
    }

    pub fn handle_store_completion(
        &mut self,
        completion: Completion,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(pending) = self.pending.remove(&completion.ticket.0) else {
            if let Some(then) = self.persist.take(completion.ticket.0) {
                self.session_write_completed(then, completion, now_ms, out);
            }
            return;
        };
        self.unpark(&pending);
        if let Pending::Publish {
            message, channel, ..
        }
        | Pending::Unanswered {
            message, channel, ..
        } = &pending
        {
            self.pending_publish_bytes -= message.cost_bytes() * 2;
            self.latest_storing(*channel, &message.topic, false);
        }
        match (pending, completion.answer) {
            (
                Pending::Publish {
                    conn,
                    ack,
                    channel,
                    message,
                    id,
                },
                Answer::Committed(result),
            ) => match self.channel_commit_answer(channel, result) {
                Ok(offset) => {
                    let answer = Some((conn, ack));
                    self.record_committed(channel, message, id, offset, answer, now_ms, out);
                }
                Err(refusal) => {
                    if let PendingAck::Pubcomp { packet_id } = ack {
                        self.hold_again(conn, packet_id, message, now_ms);
                        // Its stored hold went with the refused commit.
                        self.rehold(conn, packet_id, out);
                    }
                    self.answer_publish(conn, ack, Err(refusal), now_ms, out);
                }
            },
            (
                Pending::Unanswered {
                    channel,
                    message,
                    id,
                },
                Answer::Committed(result),
            ) => match self.channel_commit_answer(channel, result) {
                Ok(offset) => {
                    self.record_committed(channel, message, id, offset, None, now_ms, out)
                }
                Err(reason) => {
                    log::warn!(
                        "a message for channel {} was not stored: {reason}",
                        self.channels[channel].settings.name
                    )
                }
            },
            (Pending::Read { reader, era }, Answer::Read(result)) => {
                let result = result.map(|read| (era, read));
                self.read_completed(reader, result, now_ms, out)
            }
            (Pending::Position { reader }, Answer::Position(result)) => {
                self.position_loaded(reader, result, now_ms, out)
            }
            (Pending::Positions { writes }, Answer::Committed(result)) => {
                if result.is_ok() {
                    log::debug!("{writes} consumer positions stored");
                }
                if let Err(error) = result {
                    limited!(
                        POSITIONS_NOT_STORED,
                        now_ms,
                        "consumer positions were not stored: {error}; they are written again"
                    );
                    self.mark_all_readers_dirty();
                }
            }
            (Pending::PositionDrops { drops }, Answer::Committed(result)) => {
                if let Err(error) = result {
                    limited!(
                        POSITIONS_NOT_STORED,
                        now_ms,
                        "stored consumer positions were not dropped: {error}; they are dropped again"
                    );
                    self.position_duties.owe(drops);
                }
            }
            (Pending::CloseAfterPositions { conn }, Answer::Committed(result)) => {
                if result.is_ok() {
                    log::debug!("consumer positions stored before a close");
                }
                if let Err(error) = result {
                    limited!(
                        POSITIONS_NOT_STORED,
                        now_ms,
                        "consumer positions were not stored before a close: {error}; they are written again"
                    );
                    self.mark_all_readers_dirty();
                }
                self.positions_before_close_written(conn, now_ms, out);
            }
            (
                Pending::SeekTime {
                    reply,
                    session,
                    channel,
                    at_unix_ms,
                },
                Answer::Offset(result),
            ) => {
                let asked = (session, channel, at_unix_ms);
                self.seek_time_answered(reply, asked, result, now_ms, out)
            }
            (
                Pending::SeekStored {
                    reply,
                    session,
                    channel,
                    offset,
                },
                Answer::Committed(result),
            ) => self.seek_stored(reply, (session, channel, offset), result, now_ms, out),
            (Pending::Trim { channel }, Answer::Committed(result)) => {
                self.trim_completed(channel, result, now_ms, out)
            }
            (Pending::Latest(pending), answer) => {
                self.latest_answered(pending, answer, now_ms, out)
            }
            (Pending::Queue(pending), answer) => {
                self.queue_store_answered(pending, answer, now_ms, out)
            }
            (_, answer) => log::error!("a storage answer did not match its request: {answer:?}"),
        }
    }

    /// A record was committed at `offset`: the channel moves on and its
    /// readers are served.
    /// A record was committed: its readers and groups are served, and its
    /// publisher, if `answer` names one, is answered - once the broadcast
    /// log holds it too where a durable shared group is owed it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_committed(
        &mut self,
        channel: usize,
        message: Message,
        id: MessageId,
        offset: u64,
        answer: Option<(Key, PendingAck)>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.tallies.published(channel);
        if self.channels[channel].latest.is_some() {
            self.latest_committed(channel, message, &id, offset, now_ms, out);
            self.answer_committed(answer, now_ms, out);
            return;
        }
        let received_at_unix_ms = message.received_at_unix_ms;
        let routed_to_groups = self.topic_has_groups(&message.topic);
        let ch = &mut self.channels[channel];
        ch.next = ch.next.max(offset + 1);
        ch.cache(offset, message, id);
        // A queue's record is a job: offered to one worker, never routed.
        if self.queue_record_committed(channel, offset, received_at_unix_ms, now_ms, out) {
            self.answer_committed(answer, now_ms, out);
            return;
        }
        for reader in self.channels[channel].readers.clone() {
            self.pump_reader(reader, now_ms, out);
        }
        if !routed_to_groups {
            return self.answer_committed(answer, now_ms, out);
        }
        // The newest record is always cached (the tail keeps at least one).
        let Some(labelled) = self.channels[channel].cached(offset) else {
            debug_assert!(false, "the record just committed is cached");
            return self.answer_committed(answer, now_ms, out);
        };
        if self.owed_to_durable_group(&labelled) {
            let record = self.next_ticket();
            // The log keeps its own copy, as the store keeps any record.
            let message = Message {
                topic: labelled.topic.clone(),
                payload: labelled.payload.clone(),
                properties: labelled.properties.clone(),
                publisher: labelled.publisher.clone(),
                ..*labelled
            };
            self.records_for_groups.insert(record, (labelled, answer));
            self.log_for_groups(record, message, now_ms, out);
            return;
        }
        self.hand_to_groups(&labelled, now_ms, out);
        self.answer_committed(answer, now_ms, out);
    }

    /// The log answered for a record owed to durable shared groups: they
    /// are handed it, and its publisher answered.
    pub(crate) fn record_logged_for_groups(
        &mut self,
        record: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some((labelled, answer)) = self.records_for_groups.remove(&record) else {
            return;
        };
        self.note_logged(&labelled);
        self.hand_to_groups(&labelled, now_ms, out);
        self.answer_committed(answer, now_ms, out);
    }

    fn answer_committed(
        &mut self,
        answer: Option<(Key, PendingAck)>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if let Some((conn, ack)) = answer {
            self.answer_publish(conn, ack, Ok(()), now_ms, out);
        }
    }

    /// Whether any shared group's filter matches `topic`.
    fn topic_has_groups(&self, topic: &str) -> bool {
        // A group's filter is in the index exactly while the group exists,
        // so with none there is no walk to make for every record.
        if self.groups.is_empty() {
            return false;
        }
        let mut found = false;
        self.index.for_each_match(topic, |subscriber| {
            found |= matches!(subscriber.target, Target::Group(_));
        });
        found
    }

    /// A shared group over a channel is handed each new record, to one
    /// member, as over a broadcast topic; it keeps no position of its own.
    pub(crate) fn hand_to_groups(
        &mut self,
        labelled: &Rc<Message>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let mut groups = Vec::new();
        self.index.for_each_match(&labelled.topic, |subscriber| {
            if let Target::Group(group) = subscriber.target {
                groups.push(group);
            }
        });
        for group in groups {
            self.route_to_group(group, labelled, now_ms, out);
        }
    }

    /// Tells a publisher how its stored publish went: its PUBACK in order,
    /// or, for an exactly-once release, its PUBCOMP - or a DISCONNECT with
    /// the message still held, to be released again on the next connection.
    pub(crate) fn answer_publish(
        &mut self,
        conn: Key,
        ack: PendingAck,
        answer: Result<(), Refusal>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        match (ack, answer) {
            (PendingAck::None, Ok(())) => {}
            (PendingAck::None, Err(reason)) => {
                self.stats.count_publish_refusal(reason);
                log::warn!(
                    "a QoS 0 publish from {} was not stored: {reason}",
                    self.client_id_of(conn)
                );
            }
            (PendingAck::Puback { slot }, answer) => {
                self.answer_puback(conn, slot, answer, now_ms, out)
            }
            (PendingAck::Pubcomp { packet_id }, Ok(())) => {
                self.send(
                    conn,
                    &Packet::Pubcomp(crate::codec::PubAck {
                        packet_id,
                        ..Default::default()
                    }),
                    out,
                );
            }
            (PendingAck::Pubcomp { .. }, Err(refusal)) => {
                self.end_connection(conn, Some(refusal), true, now_ms, out)
            }
        }
    }

    /// Puts a released exactly-once publish whose record was refused back
    /// among the session's held ones.
    pub(crate) fn hold_again(&mut self, conn: Key, packet_id: u16, message: Message, now_ms: u64) {
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        if let Some(session) = self.sessions.get_mut(session_key) {
            let held = crate::core::session::HeldPublish {
                message,
                received_at_ms: now_ms,
            };
            session.held_publishes.insert(packet_id, held);
        }
    }

    /// Adds `filter` to the session's reader of every channel it reaches,
    /// making readers as needed. Returns the readers made.
    pub(crate) fn subscribe_channels(
        &mut self,
        session_key: Key,
        entry: ReaderFilter,
        out: &mut impl Transport,
    ) -> Vec<Key> {
        let mut made = Vec::new();
        let reached = self.claims.channels_reached_by(&entry.filter);
        let entry = ReaderFilter {
            names_channel: reached.len() > 1,
            ..entry
        };
        let options = entry.options;
        for channel in reached {
            if self.channels[channel].latest.is_some() {
                self.subscribe_latest(session_key, channel, entry.clone());
                continue;
            }
            // A queue's records leave only through its form (invariant 11).
            if self.queues.is_queue(channel) {
                continue;
            }
            let existing = self.channels[channel].readers.iter().copied().find(|&r| {
                self.readers
                    .get(r)
                    .is_some_and(|r| r.session == session_key)
            });
            let reader_key = match existing {
                Some(key) => key,
                None => {
                    let key = self.readers.insert_with(|_| Reader {
                        session: session_key,
                        channel,
                        filters: Vec::new(),
                        ready: false,
                        loading: false,
                        seeking: false,
                        next_offset: 0,
                        unacked: BTreeSet::new(),
                        buffer: VecDeque::new(),
                        reading: false,
                        dirty: false,
                        from_head: false,
                        era: 0,
                    });
                    let key = key.expect("readers are bounded by subscriptions");
                    self.channels[channel].readers.push(key);
                    if let Some(session) = self.sessions.get_mut(session_key) {
                        session.readers.push(key);
                    }
                    made.push(key);
                    key
                }
            };
            let reader = self
                .readers
                .get_mut(reader_key)
                .expect("found or made above");
            ReaderFilter::set(&mut reader.filters, entry.clone());
            if options.retain_handling == RetainHandling::DoNotSend && made.contains(&reader_key) {
                reader.from_head = true;
            }
        }
        for &reader in &made {
            self.load_position(reader, out);
        }
        made
    }

    /// Asks the provider for a new reader's stored position. A session that
    /// ends with its connection has none and starts where the channel says.
    fn load_position(&mut self, reader_key: Key, out: &mut impl Transport) {
        let Some(reader) = self.readers.get(reader_key) else {
            return;
        };
        let durable = self
            .sessions
            .get(reader.session)
            .is_some_and(|s| s.expiry_interval_s > 0);
        let channel = &self.channels[reader.channel];
        if !durable {
            let start = start_offset(channel, reader.from_head);
            let reader = self.readers.get_mut(reader_key).expect("checked above");
            reader.next_offset = start;
            reader.ready = true;
            return;
        }
        let client_id = self
            .sessions
            .get(reader.session)
            .map(|s| s.client_id.to_string())
            .unwrap_or_default();
        let request_channel = channel.settings.name.clone();
        let provider = channel.settings.provider;
        let ticket = self.next_ticket();
        let request = StoreRequest::Position {
            ticket,
            channel: request_channel,
            reader: client_id,
        };
        if out.store(provider, request) {
            self.pending
                .insert(ticket, Pending::Position { reader: reader_key });
            self.readers
                .get_mut(reader_key)
                .expect("checked above")
                .loading = true;
        }
        // Storage is behind: the reader waits and asks again at the next
        // tick. Starting where the channel says instead would skip the
        // backlog of a `start: tail` channel in silence.
    }

    fn position_loaded(
        &mut self,
        reader_key: Key,
        result: Result<Option<u64>, store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(reader) = self.readers.get_mut(reader_key) else {
            return;
        };
        reader.loading = false;
        if reader.ready {
            // A seek placed the reader meanwhile; what was stored before
            // it is older news.
            return;
        }
        let reader = self.readers.get(reader_key).expect("checked above");
        let channel = &self.channels[reader.channel];
        let passed = match &result {
            Ok(Some(position)) if !reader.from_head && *position < channel.floor => Some(*position),
            _ => None,
        };
        let (index, session) = (reader.channel, reader.session);
        let start = match result {
            Ok(Some(_)) if reader.from_head => start_offset(channel, true),
            Ok(Some(position))
                if position < channel.floor && !self.session_is_connected(session) =>
            {
                // Loaded for a session that is away (a restart restored it):
                // the reader stays below the floor, so the session's next
                // CONNECT finds the gap and is told Session Present 0, as
                // a gap opened during the run is (invariant 1).
                log::warn!(
                    "consumer {} of channel {}: its stored position {position} is below the floor {}; its next connection starts a new session",
                    self.sessions.get(session).map(|s| &*s.client_id).unwrap_or("-"),
                    channel.settings.name,
                    channel.floor
                );
                let reader = self.readers.get_mut(reader_key).expect("checked above");
                reader.next_offset = position;
                reader.ready = true;
                return;
            }
            Ok(Some(position)) if position < channel.floor => {
                // Invariant 1: the gap is said, never served in silence.
                log::warn!(
                    "consumer {} of channel {}: its position {position} is below the floor {}; it starts again where the channel says",
                    self.sessions.get(reader.session).map(|s| &*s.client_id).unwrap_or("-"),
                    channel.settings.name,
                    channel.floor
                );
                start_offset(channel, false)
            }
            Ok(Some(position)) => position.min(channel.next),
            Ok(None) => start_offset(channel, reader.from_head),
            Err(error) => {
                // Not knowing the position is not having none: the reader
                // waits and asks again at the next tick.
                log::warn!(
                    "reading a stored position of channel {} failed: {error}; it is asked for again",
                    channel.settings.name
                );
                return;
            }
        };
        let from_head = reader.from_head;
        let reader = self.readers.get_mut(reader_key).expect("checked above");
        reader.next_offset = start;
        reader.ready = true;
        // Retain Handling 2 commits the head, dropping the backlog.
        reader.dirty = from_head;
        let client_id = self.sessions.get(session).map(|s| Rc::clone(&s.client_id));
        if let (Some(position), Some(id)) = (passed, client_id) {
            self.record_loss(
                index,
                &id,
                crate::core::observe::LossKind::Consumer,
                position,
                now_ms,
            );
        }
        self.pump_reader(reader_key, now_ms, out);
    }

    /// Sends the reader's next records while its session has room on the
    /// wire. A channel's record is never dropped for want of room: it waits
    /// in the channel, and the cursor waits with it.
    pub(crate) fn pump_reader(&mut self, reader_key: Key, now_ms: u64, out: &mut impl Transport) {
        loop {
            let Some(reader) = self.readers.get(reader_key) else {
                return;
            };
            if !reader.ready && !reader.loading {
                self.load_position(reader_key, out);
                return;
            }
            if !reader.ready || !self.session_has_room(reader.session) {
                return;
            }
            let channel = &self.channels[reader.channel];
            let offset = reader.next_offset;
            if offset >= channel.next {
                return;
            }
            if reader.unacked.contains(&offset) {
                // Still on the wire from before an earlier record was
                // taken back (`return_to_reader`): not sent twice.
                let reader = self.readers.get_mut(reader_key).expect("checked above");
                reader.next_offset = offset + 1;
                continue;
            }
            if offset < channel.floor {
                log::warn!(
                    "a reader of channel {} fell below the floor {}: records {offset}..{} were removed by retention",
                    channel.settings.name,
                    channel.floor,
                    channel.floor
                );
                let (floor, index, session) = (channel.floor, reader.channel, reader.session);
                if let Some(id) = self.sessions.get(session).map(|s| Rc::clone(&s.client_id)) {
                    self.record_loss(
                        index,
                        &id,
                        crate::core::observe::LossKind::Consumer,
                        offset,
                        now_ms,
                    );
                }
                let reader = self.readers.get_mut(reader_key).expect("checked above");
                reader.next_offset = floor;
                reader.buffer.clear();
                continue;
            }
            let record = match reader.buffer.front() {
                Some((buffered, message)) if *buffered == offset => Some(Rc::clone(message)),
                _ => channel.cached(offset),
            };
            let Some(message) = record else {
                self.request_read(reader_key, out);
                return;
            };
            if self.withheld_from_reader(reader_key, &message, offset) {
                // Stalled at this record, never past it, until a grant returns.
                return;
            }
            let own = self.published_by(reader.session, &message);
            let reader = self.readers.get_mut(reader_key).expect("checked above");
            if reader.buffer.front().is_some_and(|(o, _)| *o == offset) {
                reader.buffer.pop_front();
            }
            reader.next_offset = offset + 1;
            reader.dirty = true;
            let Some(mut delivery) = delivery_for(reader_key, reader, &message, offset, own) else {
                // None of this session's filters matches: stepped over.
                continue;
            };
            let names_channel = reader
                .filters
                .iter()
                .any(|f| f.names_channel && f.reaches(&message.topic));
            let channel = reader.channel;
            if names_channel || self.queues.is_dead_letter_channel(channel) {
                let name = &self.channels[channel].settings.name;
                delivery.message = with_channel(&message, name);
            }
            let reader = self.readers.get_mut(reader_key).expect("checked above");
            let session = reader.session;
            // A bridge's outbound rule keeps its place at every record,
            // whatever QoS it was published at: this reader's position is
            // the rule's, and it must hold through an outage.
            let bridge_rule = self
                .sessions
                .get(session)
                .is_some_and(|s| crate::core::is_bridge_client_id(&s.client_id));
            if bridge_rule {
                delivery.qos = delivery.qos.max(QoS::AtLeastOnce);
            }
            let qos = delivery.qos;
            let reader = self.readers.get_mut(reader_key).expect("checked above");
            if qos != QoS::AtMostOnce {
                reader.unacked.insert(offset);
            }
            if !self.deliver_record(session, delivery, now_ms, out) {
                // Not sent: the cursor stays on this record.
                if let Some(reader) = self.readers.get_mut(reader_key) {
                    reader.next_offset = offset;
                    reader.unacked.remove(&offset);
                }
                return;
            }
        }
    }

    /// Hands one record to its session. A record too large for the client
    /// ends the connection (0x95) rather than being skipped, which would
    /// let the consumer believe it had everything; QoS 0 goes straight to
    /// the socket, and waits in the channel while the connection's buffer
    /// is full. Returns whether the record left the channel's hands.
    fn deliver_record(
        &mut self,
        session_key: Key,
        delivery: Delivery,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> bool {
        match self.send_stored(session_key, delivery, now_ms, out) {
            StoredSend::NoConnection => false,
            // An expired record is still the channel's; this delivery of it
            // is simply not made.
            StoredSend::Expired | StoredSend::Queued => true,
            StoredSend::TooLarge { conn, .. } => {
                let reason = Refusal::RecordTooLarge;
                self.end_connection(conn, Some(reason), true, now_ms, out);
                false
            }
            StoredSend::Sent(sent) => sent,
        }
    }

    /// The way to the wire that a stored record and a stored value share:
    /// QoS 1 and 2 join the session's deliveries, QoS 0 goes to the socket
    /// if its buffer has room. What to do with a record too large for the
    /// client is the caller's.
    pub(crate) fn send_stored(
        &mut self,
        session_key: Key,
        delivery: Delivery,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> StoredSend {
        let Some(conn) = self.sessions.get(session_key).and_then(|s| s.connection) else {
            return StoredSend::NoConnection;
        };
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return StoredSend::NoConnection;
        };
        let (version, max_packet_size) = (active.version, active.client_max_packet_size);
        let Ok(remaining_expiry_s) = delivery.remaining_expiry_s(self.unix_ms(now_ms)) else {
            self.stats.deliveries_expired += 1;
            return StoredSend::Expired;
        };
        let packet_id = (delivery.qos != QoS::AtMostOnce).then_some(1);
        // A client that set no Maximum Packet Size takes any packet, so a
        // QoS 1 or 2 record is not built here only to be measured: `pump`
        // builds the one that is sent.
        let limited = max_packet_size != u32::MAX;
        if limited || delivery.qos == QoS::AtMostOnce {
            let packet =
                Packet::Publish(outgoing_publish(&delivery, packet_id, remaining_expiry_s));
            if limited && encoded_len(&packet, version) > max_packet_size as usize {
                return StoredSend::TooLarge { conn, delivery };
            }
            if delivery.qos == QoS::AtMostOnce {
                let sent = out.send(conn, version, &packet, true);
                if sent {
                    self.stats.deliveries_sent += 1;
                }
                return StoredSend::Sent(sent);
            }
        }
        self.deliver(session_key, delivery, now_ms, out);
        StoredSend::Queued
    }

    fn request_read(&mut self, reader_key: Key, out: &mut impl Transport) {
        let Some(reader) = self.readers.get(reader_key) else {
            return;
        };
        if reader.reading {
            return;
        }
        let channel = &self.channels[reader.channel];
        let limit = ReadLimit {
            max_records: READ_BATCH_RECORDS,
            max_bytes: self.settings.session_queue_bytes / 2,
        };
        let request_channel = channel.settings.name.clone();
        let provider = channel.settings.provider;
        let (from_offset, era) = (reader.next_offset, reader.era);
        let ticket = self.next_ticket();
        let request = StoreRequest::Read {
            ticket,
            channel: request_channel,
            from_offset,
            limit,
        };
        if out.store(provider, request) {
            self.pending.insert(
                ticket,
                Pending::Read {
                    reader: reader_key,
                    era,
                },
            );
            self.readers
                .get_mut(reader_key)
                .expect("checked above")
                .reading = true;
        }
        // A busy storage thread is asked again at the next tick.
    }

    fn read_completed(
        &mut self,
        reader_key: Key,
        result: Result<(u32, Read), store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(reader) = self.readers.get_mut(reader_key) else {
            return;
        };
        reader.reading = false;
        match result {
            // Asked for before a seek moved the reader: read again from
            // where it is now.
            Ok((era, _)) if era != reader.era => {}
            Ok((_, Read::Records(batch))) => {
                reader.buffer = batch
                    .records
                    .into_iter()
                    .map(|record| {
                        let message = from_stored(&record.message);
                        (
                            record.offset,
                            Rc::new(labelled(message, &record.message.id, record.offset)),
                        )
                    })
                    .collect();
                let channel = &mut self.channels[reader.channel];
                channel.floor = channel.floor.max(batch.floor);
                channel.next = channel.next.max(batch.next);
            }
            Ok((_, Read::BelowFloor { floor })) => {
                let channel = &mut self.channels[reader.channel];
                channel.floor = channel.floor.max(floor);
            }
            Ok((_, Read::PastNext { next })) => {
                log::warn!("a reader asked past the end of its channel; it moves back to {next}");
                reader.next_offset = next;
            }
            Err(error) => {
                log::warn!("reading a channel failed: {error}; the read is tried again");
                return;
            }
        }
        self.pump_reader(reader_key, now_ms, out);
    }

    /// Moves a session's reader of `channel` to `offset` for a seek: what
    /// it had outstanding is forgotten, and its era moves on so that a late
    /// acknowledgement cannot move the position past the seek.
    pub(crate) fn restart_reader_at(&mut self, session_key: Key, channel: usize, offset: u64) {
        let readers = self.readers_of(session_key);
        for key in readers {
            let Some(reader) = self.readers.get_mut(key).filter(|r| r.channel == channel) else {
                continue;
            };
            reader.era = reader.era.wrapping_add(1);
            reader.next_offset = offset;
            reader.unacked.clear();
            reader.buffer.clear();
            reader.ready = true;
            reader.from_head = false;
            reader.seeking = false;
            // The seek stored this position itself.
            reader.dirty = false;
        }
    }

    /// A delivery from a channel reached its last answer: the reader's
    /// position may move past it.
    pub(crate) fn channel_delivery_finished(&mut self, delivery: &Delivery) {
        release_reader_mark(&mut self.readers, delivery);
    }

    /// A record its session was owed and may not have now goes back to
    /// its reader, which reads from it again and stalls there while it is
    /// refused. Later records still on the wire are not sent twice (see
    /// `pump_reader`).
    pub(crate) fn return_to_reader(&mut self, delivery: &Delivery) {
        let Some((reader_key, offset, era)) = delivery.reader else {
            return;
        };
        let Some(reader) = self.readers.get_mut(reader_key).filter(|r| r.era == era) else {
            return;
        };
        reader.unacked.remove(&offset);
        reader.next_offset = reader.next_offset.min(offset);
        reader.buffer.clear();
        reader.dirty = true;
    }

    /// The channel readers a session has, copied so each can be served.
    fn readers_of(&self, session_key: Key) -> Vec<Key> {
        self.sessions
            .get(session_key)
            .map(|s| s.readers.clone())
            .unwrap_or_default()
    }

    /// Serves every reader of `session`: after it reconnects or acknowledges.
    pub(crate) fn pump_readers_of(
        &mut self,
        session_key: Key,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let readers = self.readers_of(session_key);
        for reader in readers {
            self.pump_reader(reader, now_ms, out);
        }
        self.pump_latest_of(session_key, now_ms, out);
    }

    /// Stores the positions that moved, for the readers of sessions that
    /// outlive their connections: every `ack_commit_interval`, at a
    /// disconnect and at shutdown.
    pub(crate) fn commit_positions(&mut self, only_session: Option<Key>, out: &mut impl Transport) {
        for (provider, writes) in self.position_writes(only_session) {
            for chunk in writes.chunks(store::MAX_REQUEST_WRITES) {
                let ticket = self.next_ticket();
                if out.store(
                    provider,
                    StoreRequest::Commit {
                        ticket,
                        writes: chunk.to_vec(),
                    },
                ) {
                    let writes = chunk.len();
                    self.pending.insert(ticket, Pending::Positions { writes });
                } else {
                    self.mark_all_readers_dirty();
                }
            }
        }
    }

    /// Stores the moved positions of the session `conn` owns before its
    /// clean DISCONNECT closes it. True when a commit was sent: the
    /// DISCONNECT is served again once every one has come back.
    pub(crate) fn positions_before_close(
        &mut self,
        conn: Key,
        disconnect: &Disconnect,
        out: &mut impl Transport,
    ) -> bool {
        if self.position_duties.closing.contains_key(&conn) {
            return false;
        }
        let Some(session_key) = self.session_of(conn) else {
            return false;
        };
        let mut outstanding = 0;
        for (provider, writes) in self.position_writes(Some(session_key)) {
            for chunk in writes.chunks(store::MAX_REQUEST_WRITES) {
                let ticket = self.next_ticket();
                let writes = chunk.to_vec();
                if out.store(provider, StoreRequest::Commit { ticket, writes }) {
                    self.pending
                        .insert(ticket, Pending::CloseAfterPositions { conn });
                    outstanding += 1;
                } else {
                    // Written again at the next interval; the close does
                    // not wait on a storage thread too far behind.
                    self.mark_all_readers_dirty();
                }
            }
        }
        // One entry per connection, gone when its DISCONNECT is served.
        let disconnect = (outstanding > 0).then(|| disconnect.clone());
        self.position_duties.closing.insert(
            conn,
            positions::CloseWait {
                disconnect,
                outstanding,
            },
        );
        outstanding > 0
    }

    /// One of the commits a clean close waits on came back.
    fn positions_before_close_written(&mut self, conn: Key, now_ms: u64, out: &mut impl Transport) {
        let Some(wait) = self.position_duties.closing.get_mut(&conn) else {
            return;
        };
        wait.outstanding -= 1;
        if wait.outstanding > 0 {
            return;
        }
        let disconnect = wait.disconnect.take();
        if !self.connections.contains(conn) {
            self.position_duties.closing.remove(&conn);
            return;
        }
        if let Some(disconnect) = disconnect {
            self.handle_disconnect(conn, disconnect, now_ms, out);
        }
    }

    /// The connection ended: its DISCONNECT was served, or it ended
    /// otherwise.
    pub(crate) fn close_served(&mut self, conn: Key) {
        self.position_duties.closing.remove(&conn);
    }

    /// The writes of the positions that moved, by provider, marking them
    /// written.
    fn position_writes(&mut self, only_session: Option<Key>) -> HashMap<usize, Vec<Write>> {
        let mut by_provider: HashMap<usize, Vec<Write>> = HashMap::new();
        for key in self.readers.keys() {
            let reader = self.readers.get(key).expect("key just listed");
            if !reader.dirty
                || !reader.ready
                || reader.seeking
                || only_session.is_some_and(|s| s != reader.session)
            {
                continue;
            }
            let Some(session) = self.sessions.get(reader.session) else {
                continue;
            };
            if session.expiry_interval_s == 0 {
                continue;
            }
            let channel = &self.channels[reader.channel].settings;
            log::debug!(
                "storing the position of {} in {}: offset {}",
                session.client_id,
                channel.name,
                reader.position()
            );
            by_provider
                .entry(channel.provider)
                .or_default()
                .push(Write::SetPosition {
                    channel: channel.name.clone(),
                    reader: session.client_id.to_string(),
                    offset: reader.position(),
                });
            self.readers.get_mut(key).expect("key just listed").dirty = false;
        }
        by_provider
    }

    fn mark_all_readers_dirty(&mut self) {
        for key in self.readers.keys() {
            self.readers.get_mut(key).expect("key just listed").dirty = true;
        }
    }

    /// Whether any of the session's readers stands below its channel's
    /// floor: retention removed records it had not read.
    pub(crate) fn below_floor(&self, session_key: Key) -> bool {
        let Some(session) = self.sessions.get(session_key) else {
            return false;
        };
        session
            .readers
            .iter()
            .filter_map(|&r| self.readers.get(r))
            .any(|reader| reader.ready && reader.position() < self.channels[reader.channel].floor)
    }

    /// Drops the stored positions retention has passed.
    pub(crate) fn drop_positions_below_floor(
        &mut self,
        session_key: Key,
        out: &mut impl Transport,
    ) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let client_id = session.client_id.to_string();
        let passed: Vec<(usize, String)> = session
            .readers
            .iter()
            .filter_map(|&r| self.readers.get(r))
            .filter(|reader| {
                reader.ready && reader.position() < self.channels[reader.channel].floor
            })
            .map(|reader| {
                let channel = &self.channels[reader.channel].settings;
                (channel.provider, channel.name.clone())
            })
            .collect();
        for (provider, channel) in passed {
            let ticket = self.next_ticket();
            let write = Write::DropPosition {
                channel,
                reader: client_id.clone(),
            };
            if out.store(
                provider,
                StoreRequest::Commit {
                    ticket,
                    writes: vec![write],
                },
            ) {
                self.pending
                    .insert(ticket, Pending::Positions { writes: 1 });
            }
        }
    }

    /// Removes a session's readers as the session ends; a stored position
    /// ends with it.
    pub(crate) fn drop_readers(
        &mut self,
        session_key: Key,
        (client_id, epoch): (&Rc<str>, u64),
        durable: bool,
        out: &mut impl Transport,
    ) {
        self.drop_latest_readers(session_key);
        let readers: Vec<Key> = self
            .readers
            .keys()
            .into_iter()
            .filter(|&k| {
                self.readers
                    .get(k)
                    .is_some_and(|r| r.session == session_key)
            })
            .collect();
        let mut drops = Vec::new();
        for key in readers {
            let reader = self.readers.remove(key).expect("listed above");
            let channel = &mut self.channels[reader.channel];
            channel.readers.retain(|&r| r != key);
            if durable {
                drops.push(OwedDrop {
                    provider: channel.settings.provider,
                    channel: channel.settings.name.clone(),
                    client_id: Rc::clone(client_id),
                    epoch,
                });
            }
        }
        self.commit_position_drops(drops, out);
    }

    /// Drops whatever positions `client_id` has stored in every channel
    /// that keeps positions: for a session new in this run, anything
    /// stored under its client id belongs to a session that is gone (one
    /// kept in memory, lost with a crash), which it must not resume from.
    pub(crate) fn drop_stored_positions(&mut self, session_key: Key, out: &mut impl Transport) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let (client_id, epoch) = (Rc::clone(&session.client_id), session.epoch);
        let drops = self
            .channels
            .iter()
            .enumerate()
            .filter(|&(index, channel)| channel.latest.is_none() && !self.queues.is_queue(index))
            .map(|(_, channel)| OwedDrop {
                provider: channel.settings.provider,
                channel: channel.settings.name.clone(),
                client_id: Rc::clone(&client_id),
                epoch,
            })
            .collect();
        self.commit_position_drops(drops, out);
    }

    /// Sends position drops; one the storage thread cannot take, or whose
    /// commit fails, is owed and written again at the next interval.
    fn commit_position_drops(&mut self, drops: Vec<OwedDrop>, out: &mut impl Transport) {
        let mut by_provider: HashMap<usize, Vec<OwedDrop>> = HashMap::new();
        for drop in drops {
            by_provider.entry(drop.provider).or_default().push(drop);
        }
        for (provider, drops) in by_provider {
            for chunk in drops.chunks(store::MAX_REQUEST_WRITES) {
                let ticket = self.next_ticket();
                let writes = chunk
                    .iter()
                    .map(|d| Write::DropPosition {
                        channel: d.channel.clone(),
                        reader: d.client_id.to_string(),
                    })
                    .collect();
                let drops = chunk.to_vec();
                if out.store(provider, StoreRequest::Commit { ticket, writes }) {
                    self.pending
                        .insert(ticket, Pending::PositionDrops { drops });
                } else {
                    self.position_duties.owe(drops);
                }
            }
        }
    }

    /// Writes again the position drops still owed. A drop whose client id
    /// a newer session holds now is given up: what is stored under it is
    /// that session's. One a session owes for itself (dropped as it
    /// began) is given up for a channel it reads, whose position it
    /// writes from memory instead.
    pub(crate) fn retry_position_drops(&mut self, out: &mut impl Transport) {
        let mut again = Vec::new();
        for drop in self.position_duties.take_owed() {
            let holder = self
                .sessions
                .key_of(&drop.client_id)
                .and_then(|k| self.sessions.get(k).map(|s| (k, s.epoch)));
            match holder {
                None => again.push(drop),
                Some((_, epoch)) if epoch > drop.epoch => {
                    log::debug!(
                        "a newer session of {} holds its positions: an older drop on {} is not written",
                        drop.client_id,
                        drop.channel
                    );
                }
                Some((key, _)) => {
                    let reading = self.readers_of(key).into_iter().find(|&r| {
                        self.readers.get(r).is_some_and(|reader| {
                            self.channels[reader.channel].settings.name == drop.channel
                        })
                    });
                    match reading {
                        Some(reader) => {
                            if let Some(reader) = self.readers.get_mut(reader) {
                                reader.dirty = true;
                            }
                        }
                        None => again.push(drop),
                    }
                }
            }
        }
        self.commit_position_drops(again, out);
    }

    /// Removes `filter` from the session's readers; a reader left with no
    /// filter stops, keeping its stored position for a later subscription.
    /// A reader the unsubscribe leaves without filters goes; the position
    /// it moved since the last write is stored first, so a later
    /// subscription resumes there instead of serving acknowledged records
    /// again (found by the core power-cut simulation, seed 424).
    pub(crate) fn unsubscribe_channels(
        &mut self,
        session_key: Key,
        filter: &str,
        out: &mut impl Transport,
    ) {
        self.unsubscribe_latest(session_key, filter);
        let readers = self.readers_of(session_key);
        let emptied = readers.iter().any(|&key| {
            self.readers
                .get(key)
                .is_some_and(|r| r.dirty && r.filters.iter().all(|f| *f.filter == *filter))
        });
        if emptied {
            self.commit_positions(Some(session_key), out);
        }
        for key in readers {
            let Some(reader) = self.readers.get_mut(key) else {
                continue;
            };
            reader.filters.retain(|f| *f.filter != *filter);
            if reader.filters.is_empty() {
                let channel = reader.channel;
                self.readers.remove(key);
                self.channels[channel].readers.retain(|&r| r != key);
                if let Some(session) = self.sessions.get_mut(session_key) {
                    session.readers.retain(|&r| r != key);
                }
            }
        }
    }

    /// Retention: removes what is older than a channel's period or beyond
    /// its bytes, raising the floor in the same transaction.
    pub(crate) fn sweep_retention(
        &mut self,
        now_ms: u64,
        by_age: bool,
        by_size: bool,
        out: &mut impl Transport,
    ) {
        let now_unix_ms = self.unix_ms(now_ms);
        for index in 0..self.channels.len() {
            if self.channels[index].latest.is_some() {
                // A latest channel removes by topic, on its own clocks.
                if by_age {
                    self.sweep_latest(index, now_ms, out);
                }
                continue;
            }
            let channel = &self.channels[index];
            if channel.trimming || channel.floor >= channel.next {
                continue;
            }
            let settings = &channel.settings;
            let mut writes = Vec::new();
            if let Some(period_s) = settings.retention_period_s.filter(|_| by_age) {
                let cutoff_ms = now_unix_ms.saturating_sub(period_s.saturating_mul(1000));
                writes.push(Write::Trim {
                    channel: settings.name.clone(),
                    rule: TrimRule::OlderThan { cutoff_ms },
                    max_records: TRIM_BATCH_RECORDS,
                });
            }
            if let Some(bytes) = settings.retention_bytes.filter(|_| by_size) {
                writes.push(Write::Trim {
                    channel: settings.name.clone(),
                    rule: TrimRule::ToBytes(bytes),
                    max_records: TRIM_BATCH_RECORDS,
                });
            }
            if writes.is_empty() {
                continue;
            }
            let provider = settings.provider;
            let ticket = self.next_ticket();
            if out.store(provider, StoreRequest::Commit { ticket, writes }) {
                self.pending
                    .insert(ticket, Pending::Trim { channel: index });
                self.channels[index].trimming = true;
                self.channels[index].room_freed();
            }
        }
    }

    fn trim_completed(
        &mut self,
        channel: usize,
        result: Result<Vec<Outcome>, store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.channels[channel].trimming = false;
        let outcomes = match result {
            Ok(outcomes) => outcomes,
            Err(error) => {
                log::warn!(
                    "a retention sweep of {} failed: {error}",
                    self.channels[channel].settings.name
                );
                return;
            }
        };
        let mut more = false;
        for outcome in outcomes {
            if let Outcome::Trimmed(trimmed) = outcome {
                let ch = &mut self.channels[channel];
                if trimmed.removed_records > 0 {
                    log::info!(
                        "retention removed {} records ({} bytes) from {}; its floor is {}",
                        trimmed.removed_records,
                        trimmed.freed_bytes,
                        ch.settings.name,
                        trimmed.floor
                    );
                }
                ch.floor = ch.floor.max(trimmed.floor);
                more |= trimmed.more;
                self.tallies
                    .retention_removed(channel, trimmed.removed_records);
            }
        }
        let floor = self.channels[channel].floor;
        let ch = &mut self.channels[channel];
        while ch.tail.front().is_some_and(|cached| cached.offset < floor) {
            ch.drop_oldest();
        }
        if more {
            self.sweep_retention(now_ms, true, true, out);
        }
    }
}

impl Broker {
    /// Whether `message` was published by `session_key`'s client (for No
    /// Local; a record keeps its publisher).
    pub(crate) fn published_by(&self, session_key: Key, message: &Message) -> bool {
        message.publisher.as_ref().is_some_and(|publisher| {
            self.sessions
                .get(session_key)
                .is_some_and(|s| s.client_id == *publisher)
        })
    }
}
