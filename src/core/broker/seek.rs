//! A seek handled: the publish to `$saguin/consumer/<channel>/seek` is
//! checked, its position found and stored, and its answer sent. What a
//! seek's payload means is the channel's (`channel/append/seek.rs`).

use crate::codec::{Packet, Properties, ProtocolVersion, Publish, QoS};
use crate::core::channel::append::seek::{
    parse_target, reply_topic, seek_refusal, SeekReply, SeekTarget, MALFORMED,
};
use crate::core::channel::{Pending, PendingAck};
use crate::core::refusal::Refusal;
use crate::core::StoreRequest;
use crate::core::{Broker, Key, Transport};
use crate::store::{Outcome, Write, FIRST_OFFSET};

impl Broker {
    /// A publish to `$saguin/consumer/<channel>/seek`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn handle_seek(
        &mut self,
        conn: Key,
        session_key: Key,
        channel_name: &str,
        publish: &Publish,
        ack: PendingAck,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let named = self
            .channels
            .iter()
            .position(|c| c.settings.name == channel_name);
        // Which channel a topic names is the topic's business: 0x90, with
        // what the name is instead of an append channel.
        let refusal = match named {
            None => Some(Refusal::SeekNoChannel),
            Some(c) if self.queues.is_queue(c) => Some(Refusal::SeekOnQueue),
            Some(c) if self.channels[c].latest.is_some() => Some(Refusal::SeekOnLatest),
            Some(_) => None,
        };
        let (Some(channel), None) = (named, refusal) else {
            let refusal = refusal.unwrap_or(Refusal::SeekNoChannel);
            self.finish_seek_ack(conn, ack, Err(refusal), now_ms, out);
            return;
        };
        let reply = SeekReply {
            conn,
            topic: publish
                .properties
                .response_topic
                .clone()
                .unwrap_or_else(|| reply_topic(channel_name)),
            correlation_data: publish.properties.correlation_data.clone(),
            ack,
        };
        let durable = self
            .sessions
            .get(session_key)
            .is_some_and(|s| s.expiry_interval_s > 0 && s.connection == Some(conn));
        if !durable {
            self.answer_seek(reply, channel, Err("no-session"), now_ms, out);
            return;
        }
        let Some(target) = parse_target(&publish.payload, self.unix_ms(now_ms)) else {
            self.answer_seek(reply, channel, Err(MALFORMED), now_ms, out);
            return;
        };
        let ch = &self.channels[channel];
        let offset = match target {
            SeekTarget::Floor => ch.floor,
            SeekTarget::Head => ch.next,
            SeekTarget::Offset(offset) => offset,
            SeekTarget::Since { at_unix_ms } => {
                let request_channel = ch.settings.name.clone();
                let provider = ch.settings.provider;
                let ticket = self.next_ticket();
                let request = StoreRequest::FirstAtOrAfter {
                    ticket,
                    channel: request_channel,
                    at_unix_ms,
                };
                if out.store(provider, request) {
                    self.park(
                        ticket,
                        Pending::SeekTime {
                            reply,
                            session: session_key,
                            channel,
                            at_unix_ms,
                        },
                    );
                } else {
                    self.answer_seek(reply, channel, Err("storage"), now_ms, out);
                }
                return;
            }
        };
        self.seek_to(reply, session_key, channel, offset, now_ms, out);
    }

    /// The earliest offset at or after a seek's moment came back. `asked`
    /// is the session, the channel and the moment.
    pub(crate) fn seek_time_answered(
        &mut self,
        reply: SeekReply,
        asked: (Key, usize, u64),
        found: Result<Option<u64>, crate::store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let (session_key, channel, at_unix_ms) = asked;
        let ch = &self.channels[channel];
        // Retention has removed records (the floor moved), so a moment the
        // oldest survivor does not come after may name removed records: the
        // gap is refused, never served. A survivor stamped with the very
        // moment asked for is refused too, as removed records may share
        // its millisecond.
        let floor_moved = ch.floor > FIRST_OFFSET;
        let offset = match found {
            Ok(Some(offset)) if floor_moved && offset == ch.floor => {
                self.answer_seek(reply, channel, Err("below-floor"), now_ms, out);
                return;
            }
            Ok(Some(offset)) => offset,
            // Emptied by retention: every past moment named removed records.
            Ok(None)
                if floor_moved && ch.floor == ch.next && at_unix_ms <= self.unix_ms(now_ms) =>
            {
                self.answer_seek(reply, channel, Err("below-floor"), now_ms, out);
                return;
            }
            // Nothing that recent: the head is a complete answer.
            Ok(None) => ch.next,
            Err(error) => {
                log::warn!("a seek by time on {} failed: {error}", ch.settings.name);
                self.answer_seek(reply, channel, Err("storage"), now_ms, out);
                return;
            }
        };
        self.seek_to(reply, session_key, channel, offset, now_ms, out);
    }

    /// Stores the session's position at `offset`, once it is inside the
    /// channel; the reader moves only when that is stored (`seek_stored`),
    /// so a refused write moves nothing and no record from the new place
    /// precedes the reply.
    fn seek_to(
        &mut self,
        reply: SeekReply,
        session_key: Key,
        channel: usize,
        offset: u64,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let ch = &self.channels[channel];
        if offset < ch.floor {
            self.answer_seek(reply, channel, Err("below-floor"), now_ms, out);
            return;
        }
        if offset > ch.next {
            self.answer_seek(reply, channel, Err("beyond-end"), now_ms, out);
            return;
        }
        let (name, provider) = (ch.settings.name.clone(), ch.settings.provider);
        let Some(client_id) = self
            .sessions
            .get(session_key)
            .map(|s| s.client_id.to_string())
        else {
            return;
        };
        self.mark_seeking(session_key, channel, true);
        let write = Write::SetPosition {
            channel: name,
            reader: client_id,
            offset,
        };
        let ticket = self.next_ticket();
        if out.store(
            provider,
            StoreRequest::Commit {
                ticket,
                writes: vec![write],
            },
        ) {
            self.park(
                ticket,
                Pending::SeekStored {
                    reply,
                    session: session_key,
                    channel,
                    offset,
                },
            );
        } else {
            self.mark_seeking(session_key, channel, false);
            self.answer_seek(reply, channel, Err("storage"), now_ms, out);
        }
    }

    /// While a seek's position is being stored, the reader's own position
    /// is not written (it would land after the seek's and undo it).
    fn mark_seeking(&mut self, session_key: Key, channel: usize, seeking: bool) {
        let readers = self
            .sessions
            .get(session_key)
            .map(|s| s.readers.clone())
            .unwrap_or_default();
        for key in readers {
            if let Some(reader) = self.readers.get_mut(key).filter(|r| r.channel == channel) {
                reader.seeking = seeking;
            }
        }
    }

    /// The seek's position was written (or not); `sought` is the session,
    /// the channel and the offset.
    pub(crate) fn seek_stored(
        &mut self,
        reply: SeekReply,
        sought: (Key, usize, u64),
        result: Result<Vec<Outcome>, crate::store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let (session, channel, offset) = sought;
        match result.as_deref() {
            Ok([Outcome::PositionSet]) => {
                log::debug!(
                    "a seek moved a consumer of {} to offset {offset}, stored",
                    self.channels[channel].settings.name
                );
                self.restart_reader_at(session, channel, offset);
                self.answer_seek(reply, channel, Ok(offset), now_ms, out);
                // The records from the new place follow the reply.
                self.pump_readers_of(session, now_ms, out);
            }
            other => {
                log::warn!("a seek's position was not stored: {other:?}");
                self.mark_seeking(session, channel, false);
                self.answer_seek(reply, channel, Err("storage"), now_ms, out);
            }
        }
    }

    /// Sends the reply to the seeking connection alone, then its PUBACK:
    /// a refusal rides the PUBACK too, as 0x83, for a client reading no
    /// reply.
    fn answer_seek(
        &mut self,
        reply: SeekReply,
        channel: usize,
        answer: Result<u64, &'static str>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let ch = &self.channels[channel];
        let mut properties = Properties {
            correlation_data: reply.correlation_data.clone(),
            ..Properties::default()
        };
        let payload = match answer {
            Ok(offset) => offset.to_string(),
            Err(word) => {
                if word == "below-floor" {
                    properties
                        .user_properties
                        .push(("saguin-floor".into(), ch.floor.to_string()));
                }
                if word == "beyond-end" {
                    properties
                        .user_properties
                        .push(("saguin-next".into(), ch.next.to_string()));
                }
                word.to_string()
            }
        };
        if let Some(version) = self.version(reply.conn) {
            let publish = Publish {
                qos: QoS::AtMostOnce,
                topic: reply.topic.clone(),
                payload: payload.into_bytes(),
                properties,
                ..Publish::default()
            };
            let publish = if version == ProtocolVersion::V311 {
                Publish {
                    properties: Properties::default(),
                    ..publish
                }
            } else {
                publish
            };
            self.send(reply.conn, &Packet::Publish(publish), out);
        }
        let refusal = answer.err().map(seek_refusal);
        self.finish_seek_ack(
            reply.conn,
            reply.ack,
            refusal.map_or(Ok(()), Err),
            now_ms,
            out,
        );
    }

    fn finish_seek_ack(
        &mut self,
        conn: Key,
        ack: PendingAck,
        answer: Result<(), Refusal>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        match ack {
            PendingAck::Puback { slot } => self.complete_puback(conn, slot, answer, now_ms, out),
            _ => {
                if let Err(refusal) = answer {
                    log::warn!(
                        "a seek from {} was refused: {}",
                        self.client_id_of(conn),
                        refusal.reason()
                    );
                }
            }
        }
    }
}
