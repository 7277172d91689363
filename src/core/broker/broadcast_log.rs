//! The broadcast log as the broker drives it: logging a publish before it
//! is routed, each session's cursor and window of unacknowledged offsets,
//! committing cursors, and replaying the log at start. The log's state
//! and its pure rules live in [`crate::core::broadcast::log`].

use crate::codec::{topic, Packet, PubAck, QoS, ReasonCode};
use crate::core::broadcast::log::*;
use crate::core::broadcast::topic_index::Target;
use crate::core::message::{from_stored, publisher_id, to_stored};
use crate::core::message::{Delivery, Message};
use crate::core::refusal::Refusal;
use crate::core::session::{InFlight, OutboundStage};
use crate::core::{Broker, Key, StoreRequest, Transport};
use crate::core::{Then, Written};
use crate::store::{self, Answer, Outcome, TrimRule, Write};
use std::collections::HashMap;
use std::rc::Rc;

impl Broker {
    /// Whether a durable session's subscription reaches `message` at QoS 1.
    pub(crate) fn owed_to_durable(&self, message: &Message) -> bool {
        if self.settings.session_provider.is_none() || message.qos == QoS::AtMostOnce {
            return false;
        }
        let mut owed = false;
        self.index.for_each_match(&message.topic, |subscriber| {
            let key = match subscriber.target {
                Target::Session(key) => key,
                Target::Group(group) => {
                    // A group keeps a backlog for a member that can come back.
                    owed |= self.group_is_durable(group);
                    return;
                }
            };
            if owed || subscriber.options.qos == QoS::AtMostOnce {
                return;
            }
            owed = self.sessions.get(key).is_some_and(|s| {
                s.expiry_interval_s > 0
                    && !(subscriber.options.no_local
                        && message.publisher.as_deref() == Some(&*s.client_id))
            });
        });
        owed
    }

    /// A QoS 1 broadcast that a durable session is owed is appended to the
    /// log first; its routing and PUBACK follow the commit. Gives the
    /// message back when nothing needs logging.
    pub(crate) fn log_before_route(
        &mut self,
        conn: Option<Key>,
        slot: Option<u64>,
        message: Message,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Option<Message> {
        if self.persist.writes_through || !self.owed_to_durable(&message) {
            return Some(message);
        }
        self.settings.session_provider?;
        let group_cursors = self.new_group_cursors(&message.topic);
        let logged = LoggedPublish {
            conn,
            slot,
            message,
            made_room: false,
            group_cursors,
            record: None,
        };
        self.append_to_log(logged, Vec::new(), now_ms, out);
        None
    }

    /// Whether a durable shared group reaches `message` at QoS 1 or 2.
    pub(crate) fn owed_to_durable_group(&self, message: &Message) -> bool {
        if self.settings.session_provider.is_none() || message.qos == QoS::AtMostOnce {
            return false;
        }
        let mut owed = false;
        self.index.for_each_match(&message.topic, |subscriber| {
            if let Target::Group(group) = subscriber.target {
                owed |= self.group_is_durable(group);
            }
        });
        owed
    }

    /// Appends a channel's record, as its readers are sent it, to the log
    /// for the durable shared groups over the channel: a group's backlog is
    /// rebuilt from the log after a restart. The channel is told, under
    /// `record`, once the log has answered.
    pub(crate) fn log_for_groups(
        &mut self,
        record: u64,
        message: Message,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let group_cursors = self.new_group_cursors(&message.topic);
        let logged = LoggedPublish {
            conn: None,
            slot: None,
            message,
            made_room: false,
            group_cursors,
            record: Some(record),
        };
        self.append_to_log(logged, Vec::new(), now_ms, out);
    }

    /// The cursor of each durable shared group matching `topic` that has
    /// none stored: a group's first logged message must find it stored,
    /// or a restart has nothing to give the group back from. Marked
    /// stored here; `forget_group_cursors` undoes that where the commit
    /// carrying them fails.
    pub(crate) fn new_group_cursors(&mut self, topic: &str) -> Vec<Write> {
        let mut groups = Vec::new();
        self.index.for_each_match(topic, |subscriber| {
            if let Target::Group(group) = subscriber.target {
                if !groups.contains(&group) {
                    groups.push(group);
                }
            }
        });
        let mut writes = Vec::new();
        for group_key in groups {
            if !self.group_is_durable(group_key) {
                continue;
            }
            let Some(group) = self.groups.get(group_key) else {
                continue;
            };
            let reader = group_reader(&group.share_name, &group.filter);
            if self.persist.log.stored.contains_key(reader.as_str()) {
                continue;
            }
            let Some(cursor) = self.group_cursor(group_key) else {
                continue;
            };
            writes.push(self.store_group_cursor(reader, cursor));
        }
        writes
    }

    /// Records `cursor` as the one stored for the group reader `reader`,
    /// and the write that stores it.
    fn store_group_cursor(&mut self, reader: String, cursor: u64) -> Write {
        self.persist
            .log
            .stored
            .insert(reader.as_str().into(), cursor);
        Write::SetPosition {
            channel: BROADCAST_SPACE.to_string(),
            reader,
            offset: cursor,
        }
    }

    /// Group cursors a failed commit carried are written again later.
    pub(crate) fn forget_group_cursors(&mut self, writes: &[Write]) {
        for write in writes {
            if let Write::SetPosition { reader, .. } = write {
                self.persist.log.stored.remove(reader.as_str());
            }
        }
    }

    /// Appends a message to the log, after `first` in the same commit.
    fn append_to_log(
        &mut self,
        logged: LoggedPublish,
        mut first: Vec<Write>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(provider) = self.settings.session_provider else {
            return;
        };
        first.extend(logged.group_cursors.iter().cloned());
        let message = &logged.message;
        let id = publisher_id(message)
            .unwrap_or_else(|| self.id_generator.next_id(message.received_at_unix_ms));
        first.push(Write::Append {
            channel: BROADCAST_SPACE.to_string(),
            message: to_stored(message, &id),
            channel_max_bytes: None,
        });
        let ticket = self.next_ticket();
        let request = StoreRequest::Commit {
            ticket,
            writes: first,
        };
        let then = Then::Logged(Box::new(logged));
        if out.store(provider, request) {
            self.persist.track(ticket, then);
        } else {
            self.finish_session_write(then, Written::Failed, now_ms, out);
        }
    }

    /// The offset below which the log may give up its oldest to make
    /// room: nothing a session has on the wire is given up.
    pub(crate) fn room_floor(&self) -> u64 {
        let mut floor = self.persist.log.next;
        for key in self.sessions.keys() {
            let on_wire = self.sessions.get(key).into_iter().flat_map(|s| {
                s.inflight
                    .values()
                    .filter_map(|f| self.offset_of(&f.delivery.message))
            });
            floor = on_wire.fold(floor, u64::min);
        }
        floor
    }

    /// The log write came back: the message is routed, its deliveries
    /// marked with their offset, and the publisher answered.
    pub(crate) fn logged(
        &mut self,
        logged: LoggedPublish,
        answer: Option<Answer>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let outcome = match &answer {
            // The append is the last write of its commit, after any trim
            // that made room for it.
            Some(Answer::Committed(Ok(outcomes))) => {
                for o in outcomes {
                    if let Outcome::Trimmed(trimmed) = o {
                        self.stats.log_dropped += trimmed.removed_records;
                    }
                }
                outcomes.last().copied()
            }
            Some(Answer::Committed(Err(error))) => {
                log::error!("the broadcast log could not keep a message: {error}");
                None
            }
            _ => None,
        };
        let floor = self.room_floor();
        if matches!(outcome, Some(Outcome::Refused(_)))
            && !logged.made_room
            && floor > self.persist.log.trimmed_to
        {
            // The log gives up its oldest messages, none a session has on
            // the wire, and the append is tried once more.
            log::warn!(
                "the broadcast log's provider is full: messages below offset {floor} are given up for the sessions away that were owed them"
            );
            self.persist.log.trimmed_to = floor;
            let trim = Write::Trim {
                channel: BROADCAST_SPACE.to_string(),
                rule: TrimRule::BeforeOffset(floor),
                max_records: store::MAX_TRIM_RECORDS,
            };
            let logged = LoggedPublish {
                made_room: true,
                ..logged
            };
            self.append_to_log(logged, vec![trim], now_ms, out);
            return;
        }
        if !matches!(outcome, Some(Outcome::Appended { .. })) {
            self.forget_group_cursors(&logged.group_cursors);
        }
        if let Some(record) = logged.record {
            // The record is the channel's whatever the log answered: a
            // group's loss is not its publisher's.
            match outcome {
                Some(Outcome::Appended { offset }) => {
                    self.persist.log.routing_at(offset);
                }
                _ => {
                    log::warn!("the broadcast log did not keep a channel record owed to shared groups: it is handed to them from memory only");
                    self.stats.log_dropped += 1;
                }
            }
            self.record_logged_for_groups(record, now_ms, out);
            self.persist.log.routing = None;
            return;
        }
        let LoggedPublish {
            conn,
            slot,
            message,
            ..
        } = logged;
        let answer = match outcome {
            Some(Outcome::Appended { offset }) => {
                self.persist.log.next = self.persist.log.next.max(offset + 1);
                self.persist.log.routing = Some(offset);
                let before = std::mem::replace(&mut self.persist.writes_through, true);
                let routed = self.accept_message(message, now_ms, out);
                self.persist.writes_through = before;
                self.persist.log.routing = None;
                routed
            }
            Some(Outcome::Refused(_)) => {
                // The loss is the sessions', not the publisher's: it is
                // delivered from memory and kept for nobody past a restart.
                log::warn!("the broadcast log's provider is full: a message owed to sessions away is kept in memory only");
                self.stats.log_dropped += 1;
                let before = std::mem::replace(&mut self.persist.writes_through, true);
                let routed = self.accept_message(message, now_ms, out);
                self.persist.writes_through = before;
                routed
            }
            _ => Err(Refusal::LogNotStored),
        };
        match (conn, slot) {
            (Some(conn), Some(slot)) => self.answer_puback(conn, slot, answer, now_ms, out),
            _ => {
                if let Err(reason) = answer {
                    log::warn!("a message owed to sessions away was not kept: {reason}");
                }
            }
        }
    }

    /// Whether a member of the group outlives its connection, so the
    /// group keeps a cursor in the log.
    pub(crate) fn group_is_durable(&self, group_key: Key) -> bool {
        self.groups.get(group_key).is_some_and(|g| {
            g.members.iter().any(|m| {
                self.sessions
                    .get(m.session)
                    .is_some_and(|s| s.expiry_interval_s > 0 && m.options.qos != QoS::AtMostOnce)
            })
        })
    }

    /// The lowest offset a group still owes: in its backlog, or handed to
    /// a member and not yet acknowledged by it.
    fn group_cursor(&self, group_key: Key) -> Option<u64> {
        let group = self.groups.get(group_key)?;
        let handed = group
            .members
            .iter()
            .filter_map(|m| self.sessions.get(m.session))
            .flat_map(|s| {
                s.inflight
                    .values()
                    .map(|f| &f.delivery)
                    .chain(s.waiting.iter())
                    .filter(|d| d.group == Some(group_key))
                    .map(|d| &d.message)
            });
        let owed = group
            .backlog()
            .chain(handed)
            .filter_map(|m| self.offset_of(m))
            .min();
        Some(owed.unwrap_or(self.persist.log.next))
    }

    /// Marks a message being routed with the log offset it was written at.
    pub(crate) fn note_logged(&mut self, message: &Rc<Message>) {
        if let Some(offset) = self.persist.log.routing.take() {
            self.persist
                .log
                .offsets
                .insert(address(message), (Rc::downgrade(message), offset));
        }
    }

    fn offset_of(&self, message: &Rc<Message>) -> Option<u64> {
        self.persist
            .log
            .offsets
            .get(&address(message))
            .filter(|(weak, _)| weak.as_ptr() == Rc::as_ptr(message))
            .map(|(_, offset)| *offset)
    }

    /// The lowest offset a session still owes an acknowledgement for, or
    /// the log's next when it owes none.
    fn cursor_of(&self, session_key: Key) -> Option<u64> {
        let session = self.sessions.get(session_key)?;
        let owed = session
            .inflight
            .values()
            .map(|f| &f.delivery.message)
            .chain(session.waiting.iter().map(|d| &d.message))
            .filter_map(|m| self.offset_of(m))
            .min();
        Some(owed.unwrap_or(self.persist.log.next))
    }

    /// The writes of a durable session's cursor and window, where they
    /// moved since they were last stored.
    pub(crate) fn cursor_writes(&mut self, session_key: Key) -> Vec<Write> {
        let mut writes = Vec::new();
        let Some(cursor) = self.cursor_of(session_key) else {
            return writes;
        };
        let window = self.window_of(session_key);
        let Some(session) = self.sessions.get(session_key) else {
            return writes;
        };
        if session.expiry_interval_s == 0 || self.persist.log.next == 0 {
            return writes;
        }
        let client_id: Box<str> = session.client_id.as_ref().into();
        if self.persist.log.stored.get(&client_id) != Some(&cursor) {
            self.persist.log.stored.insert(client_id.clone(), cursor);
            writes.push(Write::SetPosition {
                channel: BROADCAST_SPACE.to_string(),
                reader: client_id.to_string(),
                offset: cursor,
            });
        }
        let stored_window = self.persist.log.windows.get(&client_id);
        if stored_window.map_or(!window.is_empty(), |w| *w != window) {
            writes.push(if window.is_empty() {
                Write::DropEntry {
                    channel: BROADCAST_SPACE.to_string(),
                    key: window_key(&client_id),
                }
            } else {
                Write::PutEntry {
                    channel: BROADCAST_SPACE.to_string(),
                    key: window_key(&client_id),
                    value: window_bytes(&window),
                    use_reserve: true,
                }
            });
            self.persist.log.windows.insert(client_id, window);
        }
        writes
    }

    /// Sends a PUBREL once the window that says its PUBREC came is stored,
    /// for a logged delivery to a durable session; at once otherwise.
    pub(crate) fn pubrel_after_window(
        &mut self,
        conn: Key,
        session_key: Key,
        reply: PubAck,
        out: &mut impl Transport,
    ) {
        let logged = self
            .sessions
            .get(session_key)
            .and_then(|s| s.inflight.get(&reply.packet_id))
            .and_then(|f| self.offset_of(&f.delivery.message))
            .is_some();
        let mut writes = if logged && reply.reason_code == ReasonCode::SUCCESS {
            self.cursor_writes(session_key)
        } else {
            Vec::new()
        };
        if logged && reply.reason_code == ReasonCode::SUCCESS && writes.is_empty() {
            // Taken for writing by a commit that may not have landed yet.
            writes = self.window_rewrite(session_key);
        }
        let (false, Some(provider)) = (writes.is_empty(), self.settings.session_provider) else {
            self.send(conn, &Packet::Pubrel(reply), out);
            return;
        };
        let ticket = self.next_ticket();
        let request = StoreRequest::Commit { ticket, writes };
        if out.store(provider, request) {
            self.persist.track(ticket, Then::Pubrel { conn, reply });
        } else if let Some(session) = self.sessions.get(session_key) {
            // The storage thread is too far behind to take it: the PUBREL
            // waits for the next `ack_commit_interval`, the connection kept.
            let client_id = Rc::clone(&session.client_id);
            self.persist.log.forget_window(&client_id);
            self.persist.log.pubrels.push((conn, session_key, reply));
        }
    }

    /// The window holding a PUBREC came back: the PUBREL goes out, or, where
    /// it was not stored, the connection ends and the exchange resumes from
    /// its PUBLISH when the session does.
    pub(crate) fn pubrel_written(
        &mut self,
        conn: Key,
        reply: PubAck,
        written: Written,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if matches!(written, Written::Stored) {
            self.send(conn, &Packet::Pubrel(reply), out);
            return;
        }
        if let Some(session_key) = self.session_of(conn) {
            if let Some(session) = self.sessions.get_mut(session_key) {
                if let Some(inflight) = session.inflight.get_mut(&reply.packet_id) {
                    inflight.stage = OutboundStage::Published;
                }
                // Written again with what memory holds.
                self.persist.log.forget_window(&session.client_id);
            }
        }
        let reason = Refusal::OutboundExchangeNotStored;
        self.end_connection(conn, Some(reason), true, now_ms, out);
    }

    /// Stores the window holding a session's unsent deliveries, and
    /// sends them once it is stored.
    pub(crate) fn send_after_window(&mut self, session_key: Key, out: &mut impl Transport) {
        let log = &self.persist.log;
        if !log.unsent.iter().any(|(s, _)| *s == session_key)
            || log.window_writing.iter().any(|(s, _)| *s == session_key)
        {
            return;
        }
        if !self.sessions.contains(session_key) {
            // Ended: what it held went with it.
            self.persist.log.unsent.retain(|(s, _)| *s != session_key);
            return;
        }
        let Some(provider) = self.settings.session_provider else {
            return;
        };
        let mut writes = self.cursor_writes(session_key);
        if writes.is_empty() {
            // The window was taken for writing by a commit that may not
            // have landed yet: writing it again behind that one is what
            // says it has.
            writes = self.window_rewrite(session_key);
        }
        let ticket = self.next_ticket();
        let request = StoreRequest::Commit { ticket, writes };
        if out.store(provider, request) {
            let log = &mut self.persist.log;
            let mut covered = Vec::new();
            log.unsent.retain(|&(s, id)| {
                if s == session_key {
                    covered.push((s, id));
                }
                s != session_key
            });
            log.window_writing.extend(covered);
            self.persist.track(
                ticket,
                Then::Window {
                    session: session_key,
                },
            );
        } else if let Some(session) = self.sessions.get(session_key) {
            // The storage thread is too far behind to take it: the
            // deliveries stay held, and the write is tried again at the
            // next `ack_commit_interval`, the connection kept.
            let client_id = Rc::clone(&session.client_id);
            self.persist.log.forget_window(&client_id);
        }
    }

    /// Writes again the windows a storage thread too far behind could not
    /// take, so what they hold goes on the wire.
    pub(crate) fn retry_windows(&mut self, out: &mut impl Transport) {
        for session_key in self.persist.log.waiting_for_window() {
            self.send_after_window(session_key, out);
        }
        for (conn, session_key, reply) in std::mem::take(&mut self.persist.log.pubrels) {
            // Only while the connection that sent the PUBREC still owns the
            // session: a resumed one is sent the PUBREL as it resumes.
            if self.session_of(conn) == Some(session_key) {
                self.pubrel_after_window(conn, session_key, reply, out);
            }
        }
    }

    /// A window write for unsent deliveries came back: they go out, or,
    /// not stored, wait in the session to be sent when it resumes.
    pub(crate) fn send_unsent(
        &mut self,
        session_key: Key,
        stored: bool,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let log = &mut self.persist.log;
        let mut ids = Vec::new();
        log.window_writing.retain(|&(s, id)| {
            if s == session_key {
                ids.push(id);
            }
            s != session_key
        });
        if !stored {
            // Those held meanwhile go with the connection the failure ends.
            log.unsent.retain(|&(s, _)| s != session_key);
        }
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let Some(conn) = session.connection else {
            return;
        };
        if !stored {
            if let Some(client_id) = self
                .sessions
                .get(session_key)
                .map(|s| Rc::clone(&s.client_id))
            {
                self.persist.log.forget_window(&client_id);
            }
            let reason = Refusal::WindowNotStored;
            self.end_connection(conn, Some(reason), true, now_ms, out);
            return;
        }
        let Some(version) = self.version(conn) else {
            return;
        };
        for id in ids {
            let Some(inflight) = self
                .sessions
                .get(session_key)
                .and_then(|s| s.inflight.get(&id))
            else {
                continue;
            };
            if inflight.stage != OutboundStage::Published {
                continue;
            }
            let Ok(remaining_expiry_s) = inflight
                .delivery
                .message
                .remaining_expiry_s(self.unix_ms(now_ms))
            else {
                // Expired while its window was written: let go, as the
                // window would have let it go.
                let session = self.sessions.get_mut(session_key).expect("found above");
                let cost = session
                    .inflight
                    .remove(&id)
                    .map_or(0, |f| f.delivery.message.cost_bytes());
                session.inflight_bytes -= cost;
                session.held_bytes -= cost;
                self.stats.deliveries_expired += 1;
                continue;
            };
            let packet = Packet::Publish(crate::core::message::outgoing_publish(
                &inflight.delivery,
                Some(id),
                remaining_expiry_s,
            ));
            out.send(conn, version, &packet, false);
        }
        // More may have been held while this write was in flight.
        self.send_after_window(session_key, out);
    }

    /// The session's current window as one write, stored whether or not it
    /// changed.
    fn window_rewrite(&mut self, session_key: Key) -> Vec<Write> {
        let window = self.window_of(session_key);
        let Some(session) = self.sessions.get(session_key) else {
            return Vec::new();
        };
        let client_id: Box<str> = session.client_id.as_ref().into();
        let write = Write::PutEntry {
            channel: BROADCAST_SPACE.to_string(),
            key: window_key(&client_id),
            value: window_bytes(&window),
            use_reserve: true,
        };
        self.persist.log.windows.insert(client_id, window);
        vec![write]
    }

    /// The packet identifiers a session's logged messages are on the wire
    /// under, so a restart sends them again under the same ones.
    fn window_of(&self, session_key: Key) -> Vec<(u16, u64, bool)> {
        let Some(session) = self.sessions.get(session_key) else {
            return Vec::new();
        };
        session
            .inflight
            .iter()
            .filter_map(|(&packet_id, f)| {
                let offset = self.offset_of(&f.delivery.message)?;
                Some((packet_id, offset, f.stage == OutboundStage::Released))
            })
            .collect()
    }

    /// Stores the cursors that moved and trims the log below the lowest:
    /// every `ack_commit_interval` and as the broker stops.
    pub(crate) fn commit_cursors(&mut self, out: &mut impl Transport) {
        let Some(provider) = self.settings.session_provider else {
            return;
        };
        self.send_log_ends(out);
        if self.persist.log.next == 0 {
            return;
        }
        self.persist
            .log
            .offsets
            .retain(|_, (weak, _)| weak.strong_count() > 0);
        let mut writes = Vec::new();
        let mut floor = self.persist.log.next;
        for key in self.sessions.keys() {
            if self
                .sessions
                .get(key)
                .is_some_and(|s| s.expiry_interval_s > 0)
            {
                floor = floor.min(self.cursor_of(key).unwrap_or(floor));
                writes.extend(self.cursor_writes(key));
            }
        }
        let mut live_groups = Vec::new();
        for key in self.groups.keys() {
            if !self.group_is_durable(key) {
                continue;
            }
            let group = self.groups.get(key).expect("key just listed");
            let reader = group_reader(&group.share_name, &group.filter);
            let Some(cursor) = self.group_cursor(key) else {
                continue;
            };
            floor = floor.min(cursor);
            if self.persist.log.stored.get(reader.as_str()) != Some(&cursor) {
                writes.push(self.store_group_cursor(reader.clone(), cursor));
            }
            live_groups.push(reader);
        }
        // A group that ended, or kept no durable member, takes its cursor.
        let ended: Vec<Box<str>> = self
            .persist
            .log
            .stored
            .keys()
            .filter(|r| {
                r.starts_with(GROUP_READER_PREFIX) && !live_groups.iter().any(|l| **l == ***r)
            })
            .cloned()
            .collect();
        for reader in ended {
            self.persist.log.stored.remove(&reader);
            writes.push(Write::DropPosition {
                channel: BROADCAST_SPACE.to_string(),
                reader: reader.to_string(),
            });
        }
        if floor > self.persist.log.trimmed_to {
            self.persist.log.trimmed_to = floor;
            writes.push(Write::Trim {
                channel: BROADCAST_SPACE.to_string(),
                rule: TrimRule::BeforeOffset(floor),
                max_records: TRIM_BATCH_RECORDS,
            });
        }
        for chunk in writes.chunks(store::MAX_REQUEST_WRITES) {
            let ticket = self.next_ticket();
            let request = StoreRequest::Commit {
                ticket,
                writes: chunk.to_vec(),
            };
            if out.store(provider, request) {
                self.persist.track(ticket, Then::Cursors);
            } else {
                // Written again at the next interval.
                self.persist.log.forget_cursors();
            }
        }
    }

    /// Takes in what the provider held of the log at start.
    pub(crate) fn restore_log(&mut self, log: &LogAtStart) {
        self.persist.log.next = log.next;
        for (client_id, &cursor) in &log.cursors {
            self.persist
                .log
                .stored
                .insert(client_id.as_str().into(), cursor);
        }
        for (client_id, window) in &log.windows {
            self.persist
                .log
                .windows
                .insert(client_id.as_str().into(), window.clone());
        }
    }

    /// Gives each restored shared group with a stored cursor its backlog:
    /// what lies after the cursor and matches its filter, in order.
    pub(crate) fn replay_groups(
        &mut self,
        log: &LogAtStart,
        messages: &mut HashMap<u64, Rc<Message>>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        for key in self.groups.keys() {
            let Some(group) = self.groups.get(key) else {
                continue;
            };
            let reader = group_reader(&group.share_name, &group.filter);
            let Some(&cursor) = log.cursors.get(&reader) else {
                continue;
            };
            let filter = group.filter.clone();
            let mut backlog = Vec::new();
            for record in log.records.iter().filter(|r| r.offset >= cursor) {
                if !topic::matches(&filter, &record.message.topic) {
                    continue;
                }
                let message = Rc::clone(
                    messages
                        .entry(record.offset)
                        .or_insert_with(|| Rc::new(from_stored(&record.message))),
                );
                self.persist
                    .log
                    .offsets
                    .insert(address(&message), (Rc::downgrade(&message), record.offset));
                backlog.push(message);
            }
            if let Some(group) = self.groups.get_mut(key) {
                group.restore(backlog);
            }
            self.drain_group(key, now_ms, out);
        }
    }

    /// Queues a restored session what lies after its cursor and matches
    /// its subscriptions, within its `session_queue_bytes`.
    pub(crate) fn replay_log(
        &mut self,
        session_key: Key,
        log: &LogAtStart,
        messages: &mut HashMap<u64, Rc<Message>>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session) = self.sessions.get(session_key) else {
            return;
        };
        let Some(&cursor) = log.cursors.get(&*session.client_id) else {
            return;
        };
        let client_id = Rc::clone(&session.client_id);
        let window = log.windows.get(&*client_id).cloned().unwrap_or_default();
        let filters: Vec<_> = session
            .subscriptions
            .iter()
            .filter(|(_, entry)| entry.group.is_none() && entry.options.qos != QoS::AtMostOnce)
            .map(|(filter, entry)| (filter.clone(), entry.options, entry.subscription_id))
            .collect();
        for record in log.records.iter().filter(|r| r.offset >= cursor) {
            let stored = &record.message;
            // A channel's record is logged for shared groups only: a
            // session reads the channel itself.
            if self.channel_for(&stored.topic).is_some() {
                continue;
            }
            let matching: Vec<_> = filters
                .iter()
                .filter(|(filter, options, _)| {
                    topic::matches(filter, &stored.topic)
                        && !(options.no_local && stored.publisher.as_deref() == Some(&*client_id))
                })
                .collect();
            if matching.is_empty() {
                continue;
            }
            let message = Rc::clone(
                messages
                    .entry(record.offset)
                    .or_insert_with(|| Rc::new(from_stored(stored))),
            );
            self.persist
                .log
                .offsets
                .insert(address(&message), (Rc::downgrade(&message), record.offset));
            let delivery = Delivery {
                qos: matching
                    .iter()
                    .map(|(_, o, _)| o.qos)
                    .max()
                    .unwrap_or(QoS::AtLeastOnce)
                    .min(message.qos),
                retain: message.retain && matching.iter().any(|(_, o, _)| o.retain_as_published),
                subscription_ids: matching.iter().filter_map(|(_, _, id)| *id).collect(),
                group: None,
                reader: None,
                latest: None,
                message,
            };
            // One that was on the wire goes back on it under its identifier,
            // to be sent again with DUP when the session resumes.
            let on_wire = window
                .iter()
                .find(|(_, offset, _)| *offset == record.offset);
            match (on_wire, self.sessions.get_mut(session_key)) {
                (Some(&(packet_id, _, released)), Some(session))
                    if !session.inflight.contains_key(&packet_id) =>
                {
                    let cost = delivery.message.cost_bytes();
                    session.held_bytes += cost;
                    session.inflight_bytes += cost;
                    session.inflight.insert(
                        packet_id,
                        InFlight {
                            delivery,
                            stage: if released {
                                OutboundStage::Released
                            } else {
                                OutboundStage::Published
                            },
                        },
                    );
                }
                _ => self.deliver(session_key, delivery, now_ms, out),
            }
        }
    }
}
