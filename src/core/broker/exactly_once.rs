//! Holding and releasing exactly-once publishes between PUBREC and
//! PUBREL, for a session that outlives its connection: each is kept as a
//! keyed entry in the store the release writes to - the channel's own
//! entry space for a channel topic, the broadcast log's for a broadcast -
//! so the release (the record, and the hold's removal) is one commit in
//! one provider, and a crash leaves either the hold or the record, never
//! both and never neither.
//!
//! The PUBREC follows the hold's commit. A restart gives each restored
//! session back its holds, so the PUBREL its client sends again completes
//! the exchange once; a hold whose session did not come back is dropped
//! and counted as abandoned.

use crate::core::refusal::Refusal;
use std::rc::Rc;

use crate::codec::{Packet, PubAck};
use crate::core::broadcast::log::BROADCAST_SPACE;
use crate::core::broadcast::qos2_holds::{hold_key, parse_hold_key, StoredHold};
use crate::core::message::Message;
use crate::core::message::{from_stored, publisher_id, to_stored};
use crate::core::session::HeldPublish;
use crate::core::{Broker, Key, Transport};
use crate::core::{Then, Written};
use crate::store::{encoding, Answer, Outcome, Write};

/// What waits on a hold's write.
pub(crate) enum HoldThen {
    /// The PUBREC, once the hold is stored.
    Pubrec { conn: Key, packet_id: u16 },
    /// A broadcast's release: routed and answered PUBCOMP once the hold is
    /// gone and, where a durable session is owed it, the log holds it.
    Release {
        conn: Key,
        packet_id: u16,
        message: Box<Message>,
        logged: bool,
        /// Durable groups' first cursors, written ahead of the message.
        group_cursors: Vec<Write>,
        /// The log already gave up its oldest to make room once: a trim
        /// leads the commit.
        made_room: bool,
    },
}

impl Broker {
    /// The provider and space a hold for `topic` is kept in.
    fn hold_place(&self, topic: &str) -> Option<(usize, String)> {
        match self.channel_for(topic) {
            Some(channel) => {
                let settings = &self.channels[channel].settings;
                Some((settings.provider, settings.name.clone()))
            }
            None => Some((self.settings.session_provider?, BROADCAST_SPACE.to_string())),
        }
    }

    fn holds_stored(&self, session_key: Key) -> bool {
        self.keeps_record(session_key)
    }

    /// The write that stores a held publish, where its session keeps
    /// a record.
    fn hold_write(&mut self, session_key: Key, packet_id: u16) -> Option<(usize, Write)> {
        if !self.holds_stored(session_key) {
            return None;
        }
        let session = self.sessions.get(session_key)?;
        let client_id = Rc::clone(&session.client_id);
        let message = &session.held_publishes.get(&packet_id)?.message;
        let (provider, space) = self.hold_place(&message.topic)?;
        let stored_id = publisher_id(message);
        let received_at_ms = message.received_at_unix_ms;
        let id = stored_id.unwrap_or_else(|| self.id_generator.next_id(received_at_ms));
        let message = &self.sessions.get(session_key)?.held_publishes[&packet_id].message;
        let value = encoding::message_bytes(&to_stored(message, &id));
        Some((
            provider,
            Write::PutEntry {
                channel: space,
                key: hold_key(&client_id, packet_id),
                value,
                use_reserve: false,
            },
        ))
    }

    /// Sends the PUBREC of a publish just held: at once for a session kept
    /// in memory only, after the hold's commit for one that keeps a record.
    pub(crate) fn pubrec_after_hold(
        &mut self,
        conn: Key,
        session_key: Key,
        packet_id: u16,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some((provider, write)) = self.hold_write(session_key, packet_id) else {
            let ack = PubAck {
                packet_id,
                ..PubAck::default()
            };
            self.send(conn, &Packet::Pubrec(ack), out);
            return;
        };
        let then = Then::Hold(Box::new(HoldThen::Pubrec { conn, packet_id }));
        if let Err(then) = self.send_write(provider, write, then, out) {
            self.finish_session_write(*then, Written::Failed, now_ms, out);
        }
    }

    /// Stores again a hold whose release was refused: the refused commit
    /// took the stored hold with it. Nobody waits on it.
    pub(crate) fn rehold(&mut self, conn: Key, packet_id: u16, out: &mut impl Transport) {
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        if let Some((provider, write)) = self.hold_write(session_key, packet_id) {
            let ticket = self.next_ticket();
            let request = crate::core::StoreRequest::Commit {
                ticket,
                writes: vec![write],
            };
            if !out.store(provider, request) {
                log::warn!("storage is behind: a held exactly-once publish is held in memory only");
            }
        }
    }

    /// The write that removes a hold, for a release or an ending.
    pub(crate) fn hold_drop(
        &self,
        session_key: Key,
        packet_id: u16,
        topic: &str,
    ) -> Option<(usize, Write)> {
        self.hold_drop_for(self.sessions.get(session_key)?, packet_id, topic)
    }

    /// The same, for a session already taken out of the table.
    pub(crate) fn hold_drop_for(
        &self,
        session: &crate::core::session::Session,
        packet_id: u16,
        topic: &str,
    ) -> Option<(usize, Write)> {
        self.settings.session_provider?;
        if session.expiry_interval_s == 0 {
            return None;
        }
        let (provider, space) = self.hold_place(topic)?;
        Some((
            provider,
            Write::DropEntry {
                channel: space,
                key: hold_key(&session.client_id, packet_id),
            },
        ))
    }

    /// Removes holds that will never be released (their session ended,
    /// or they outlived `broker.qos2.expires_after`). Nobody waits.
    pub(crate) fn holds_dropped(&mut self, drops: Vec<(usize, Write)>, out: &mut impl Transport) {
        for (provider, write) in drops {
            let ticket = self.next_ticket();
            let request = crate::core::StoreRequest::Commit {
                ticket,
                writes: vec![write],
            };
            if !out.store(provider, request) {
                log::warn!("storage is behind: an abandoned exactly-once publish stays stored until the next start");
            }
        }
    }

    /// A broadcast's release for a session whose hold is stored: the log
    /// append (where a durable session is owed it) and the hold's removal
    /// are one commit, and the PUBCOMP follows it. Gives the message back
    /// when the hold is in memory only.
    pub(crate) fn release_after_write(
        &mut self,
        conn: Key,
        session_key: Key,
        packet_id: u16,
        message: Message,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Option<Message> {
        let drop = self.hold_drop(session_key, packet_id, &message.topic);
        // Logged where a durable session or group is owed it.
        let logged = self.owed_to_durable(&message);
        let provider = match &drop {
            Some((provider, _)) => *provider,
            None if logged => self.settings.session_provider?,
            None => return Some(message),
        };
        let mut writes = Vec::new();
        let group_cursors = if logged {
            self.new_group_cursors(&message.topic)
        } else {
            Vec::new()
        };
        if logged {
            writes.extend(group_cursors.iter().cloned());
            let id = publisher_id(&message)
                .unwrap_or_else(|| self.id_generator.next_id(message.received_at_unix_ms));
            writes.push(Write::Append {
                channel: BROADCAST_SPACE.to_string(),
                message: to_stored(&message, &id),
                channel_max_bytes: None,
            });
        }
        writes.extend(drop.map(|(_, write)| write));
        let ticket = self.next_ticket();
        let request = crate::core::StoreRequest::Commit { ticket, writes };
        let then = Then::Hold(Box::new(HoldThen::Release {
            conn,
            packet_id,
            message: Box::new(message),
            logged,
            group_cursors,
            made_room: false,
        }));
        if out.store(provider, request) {
            self.persist.track(ticket, then);
        } else {
            self.finish_session_write(then, Written::Failed, now_ms, out);
        }
        None
    }

    /// A hold's write came back.
    pub(crate) fn hold_written(
        &mut self,
        then: HoldThen,
        answer: Option<Answer>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let outcomes = match answer {
            Some(Answer::Committed(Ok(outcomes))) => Some(outcomes),
            Some(Answer::Committed(Err(error))) => {
                log::error!("an exactly-once publish could not be stored: {error}");
                None
            }
            _ => None,
        };
        match then {
            HoldThen::Pubrec { conn, packet_id } => {
                let mut ack = PubAck {
                    packet_id,
                    ..PubAck::default()
                };
                match outcomes.as_deref() {
                    Some([Outcome::EntryPut]) => {}
                    refused => {
                        // Refused before ownership is taken: nothing is held.
                        if let Some(session) =
                            self.session_of(conn).and_then(|s| self.sessions.get_mut(s))
                        {
                            session.held_publishes.remove(&packet_id);
                        }
                        let refusal = match refused {
                            Some([Outcome::Refused(_)]) => Refusal::ExchangeNoRoom,
                            _ => Refusal::ExchangeNotStored,
                        };
                        ack.reason_code = refusal.code();
                        ack.properties.reason_string = self.reason_string(conn, refusal.reason());
                    }
                }
                self.send(conn, &Packet::Pubrec(ack), out);
            }
            HoldThen::Release {
                conn,
                packet_id,
                message,
                logged,
                group_cursors,
                made_room,
            } => {
                if let Some(Outcome::Trimmed(trimmed)) = outcomes.as_deref().and_then(|o| o.first())
                {
                    if made_room {
                        self.stats.log_dropped += trimmed.removed_records;
                    }
                }
                // Past the trim and the group cursors written ahead of it.
                let ahead = group_cursors.len() + usize::from(made_room);
                let outcomes = outcomes.map(|o| o[ahead.min(o.len())..].to_vec());
                if !matches!(outcomes.as_deref(), Some([Outcome::Appended { .. }, ..])) {
                    self.forget_group_cursors(&group_cursors);
                }
                if logged
                    && !made_room
                    && matches!(outcomes.as_deref(), Some([Outcome::Refused(_), ..]))
                {
                    let floor = self.room_floor();
                    if floor > self.persist.log.trimmed_to {
                        // As for a QoS 1 append: the log gives up its oldest
                        // messages, none on the wire, and the append is
                        // tried once more; the hold's removal went with the
                        // first commit.
                        self.release_making_room(conn, packet_id, *message, floor, now_ms, out);
                        return;
                    }
                }
                let offset = match (logged, outcomes.as_deref()) {
                    (true, Some([Outcome::Appended { offset }, ..])) => Some(Some(*offset)),
                    // The log's provider is full: delivered from memory only.
                    (true, Some([Outcome::Refused(_), ..])) => Some(None),
                    // The hold's removal is stored: the retry's failure
                    // costs the sessions away, not the publisher.
                    (true, None) if made_room => Some(None),
                    (false, Some([Outcome::EntryDropped { .. }])) => Some(None),
                    _ => None,
                };
                let Some(offset) = offset else {
                    // Not written: the message stays held, and the PUBREL
                    // on the next connection releases it.
                    if let Some(session_key) = self.session_of(conn) {
                        if let Some(session) = self.sessions.get_mut(session_key) {
                            let held = HeldPublish {
                                message: *message,
                                received_at_ms: now_ms,
                            };
                            session.held_publishes.insert(packet_id, held);
                        }
                    }
                    let reason = Refusal::ReleaseNotStored;
                    self.end_connection(conn, Some(reason), true, now_ms, out);
                    return;
                };
                match offset {
                    Some(offset) => self.persist.log.routing_at(offset),
                    None if logged => {
                        log::warn!("the broadcast log's provider is full: a released message owed to sessions away is kept in memory only");
                        self.stats.log_dropped += 1;
                    }
                    None => {}
                }
                let before = std::mem::replace(&mut self.persist.writes_through, true);
                let routed = self.accept_message(*message, now_ms, out);
                self.persist.writes_through = before;
                if let Err(reason) = routed {
                    log::warn!("a released exactly-once publish was not routed: {reason}");
                }
                let ack = PubAck {
                    packet_id,
                    ..PubAck::default()
                };
                self.send(conn, &Packet::Pubcomp(ack), out);
            }
        }
    }

    /// A release the full log refused, appended again behind a trim of
    /// its oldest messages below `floor`.
    fn release_making_room(
        &mut self,
        conn: Key,
        packet_id: u16,
        message: Message,
        floor: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        log::warn!(
            "the broadcast log's provider is full: messages below offset {floor} are given up for the sessions away that were owed them"
        );
        self.persist.log.trimmed_to = floor;
        let mut writes = vec![Write::Trim {
            channel: BROADCAST_SPACE.to_string(),
            rule: crate::store::TrimRule::BeforeOffset(floor),
            max_records: crate::store::MAX_TRIM_RECORDS,
        }];
        let group_cursors = self.new_group_cursors(&message.topic);
        writes.extend(group_cursors.iter().cloned());
        let id = publisher_id(&message)
            .unwrap_or_else(|| self.id_generator.next_id(message.received_at_unix_ms));
        writes.push(Write::Append {
            channel: BROADCAST_SPACE.to_string(),
            message: to_stored(&message, &id),
            channel_max_bytes: None,
        });
        let then = Then::Hold(Box::new(HoldThen::Release {
            conn,
            packet_id,
            message: Box::new(message),
            logged: true,
            group_cursors,
            made_room: true,
        }));
        let ticket = self.next_ticket();
        let request = crate::core::StoreRequest::Commit { ticket, writes };
        match self.settings.session_provider {
            Some(provider) if out.store(provider, request) => self.persist.track(ticket, then),
            _ => self.finish_session_write(then, Written::Failed, now_ms, out),
        }
    }

    /// Gives restored sessions back the exactly-once publishes they held;
    /// a hold whose session did not come back is dropped and counted.
    pub fn restore_holds(&mut self, holds: Vec<StoredHold>, now_ms: u64, out: &mut impl Transport) {
        let (mut restored, mut abandoned) = (0u64, Vec::new());
        for hold in holds {
            let parsed = parse_hold_key(&hold.key).and_then(|(client_id, packet_id)| {
                let session = self.sessions.key_of(client_id)?;
                Some((session, packet_id))
            });
            let message = encoding::message_from_bytes(&hold.value)
                .ok()
                .map(|m| from_stored(&m));
            match (parsed, message) {
                (Some((session_key, packet_id)), Some(message)) => {
                    if let Some(session) = self.sessions.get_mut(session_key) {
                        let held = HeldPublish {
                            message,
                            received_at_ms: now_ms,
                        };
                        session.held_publishes.insert(packet_id, held);
                        restored += 1;
                    }
                }
                _ => {
                    abandoned.push((
                        hold.provider,
                        Write::DropEntry {
                            channel: hold.space,
                            key: hold.key,
                        },
                    ));
                }
            }
        }
        self.stats.qos2_abandoned += abandoned.len() as u64;
        if restored + abandoned.len() as u64 > 0 {
            log::info!(
                "exactly-once publishes held at the stop: {restored} restored, {} abandoned",
                abandoned.len()
            );
        }
        self.holds_dropped(abandoned, out);
    }
}
