//! A client's PUBLISH on its way in, and the acknowledgements it sends for
//! what the broker delivered to it.

use crate::core::refusal::{Refusal, V311Answer};
use std::rc::Rc;

use crate::codec::{Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode};
use crate::core::channel::PendingAck;
use crate::core::message::{shared_properties, Message};
use crate::core::session::{HeldPublish, OutboundStage};
use crate::core::{Broker, Key, Transport};
use crate::log_limit::{limited, LogLimit};

/// A client may send a refused publish in every packet: a line each would
/// let it write as much log as it sends.
pub(crate) static PUBLISH_REFUSED: LogLimit =
    LogLimit::new("refusing a publish", log::Level::Warn, 10, 10_000);

impl Broker {
    pub(crate) fn handle_publish(
        &mut self,
        conn: Key,
        mut publish: Publish,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.stats.publishes_received += 1;
        if !publish.properties.subscription_identifiers.is_empty() {
            // Only a server sets one (MQTT-3.3.4-6).
            let reason = Refusal::SubscriptionIdFromClient;
            self.end_connection(conn, Some(reason), true, now_ms, out);
            return;
        }
        if let Err(refusal) = self.resolve_topic_alias(conn, &mut publish) {
            self.end_connection(conn, Some(refusal), true, now_ms, out);
            return;
        }
        if let Some(breach) = self.feature_breach(conn, &publish) {
            self.end_connection(conn, Some(breach), true, now_ms, out);
            return;
        }
        // The channel holding the topic, looked up once for the whole way.
        let channel = self.channel_for(&publish.topic);
        let (qos, packet_id) = (publish.qos, publish.packet_id);
        // A QoS 1 publish takes its place in the PUBACK order on arrival.
        let slot =
            (qos == QoS::AtLeastOnce).then(|| self.reserve_puback(conn, packet_id.unwrap_or(0)));
        let admitted = self
            .admit_topic(&publish.topic)
            .and_then(|()| self.admit_properties(&publish))
            .and_then(|()| admit_seek_qos(&publish))
            .and_then(|()| self.admit_into_channel(channel))
            .and_then(|()| self.authorize_publish(conn, &publish))
            .and_then(|()| self.spend_publish_budget(conn, publish.payload.len(), now_ms));
        if let Err(refusal) = admitted {
            self.refuse_publish(
                conn,
                &publish.topic,
                qos,
                packet_id,
                slot,
                refusal,
                now_ms,
                out,
            );
            return;
        }
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let session_key = active.session;
        if let Some(channel_name) = crate::core::channel::append::seek::seek_channel(&publish.topic)
        {
            let ack = slot.map_or(PendingAck::None, |slot| PendingAck::Puback { slot });
            let channel_name = channel_name.to_string();
            self.handle_seek(conn, session_key, &channel_name, &publish, ack, now_ms, out);
            return;
        }
        if publish.topic == super::hang_up::HANG_UP_TOPIC {
            self.handle_hang_up(conn, &publish, slot, now_ms, out);
            return;
        }
        if crate::core::channel::latest::point_read::is_request(&publish.topic) {
            self.handle_request(conn, &publish, slot, now_ms, out);
            return;
        }
        if Self::is_queue_response_topic(&publish.topic) {
            let puback = slot.map(|slot| (conn, slot));
            let answer = match qos {
                QoS::ExactlyOnce => Err(Refusal::QueueResponseAtQos2),
                _ => self.handle_queue_response(session_key, &publish, puback, now_ms, out),
            };
            match (answer, slot) {
                // Answered when the job's removal is committed.
                (Ok(true), _) => {}
                (Ok(false), Some(slot)) => self.complete_puback(conn, slot, Ok(()), now_ms, out),
                (Ok(false), None) => {}
                (Err(refusal), slot) => self.refuse_publish(
                    conn,
                    &publish.topic,
                    qos,
                    packet_id,
                    slot,
                    refusal,
                    now_ms,
                    out,
                ),
            }
            return;
        }
        let client_id = self
            .sessions
            .get(session_key)
            .map(|s| Rc::clone(&s.client_id));
        let bridged = self.connections.get(conn).is_some_and(|c| c.bridge);
        let message = message_from_publish(publish, client_id, bridged, self.unix_ms(now_ms));
        if qos == QoS::ExactlyOnce {
            let packet_id = packet_id.unwrap_or(0);
            self.hold_exactly_once(conn, session_key, packet_id, message, now_ms, out);
            return;
        }
        // A retained broadcast whose store has a provider is kept first.
        let message = match channel {
            Some(_) => message,
            None => match self.retain_after_write(conn, slot, message, now_ms, out) {
                Some(message) => {
                    match self.log_before_route(Some(conn), slot, message, now_ms, out) {
                        Some(message) => message,
                        None => return,
                    }
                }
                None => return,
            },
        };
        let topic = message.topic.clone();
        let result = match channel {
            None => self.accept_message(message, now_ms, out),
            Some(channel) => {
                // Answered once the record is committed.
                let ack = slot.map_or(PendingAck::None, |slot| PendingAck::Puback { slot });
                if self
                    .store_publish(channel, message, Some((conn, ack)), now_ms, out)
                    .is_ok()
                {
                    return;
                }
                Err(Refusal::StorageBehind)
            }
        };
        match result {
            Ok(()) => {
                if let Some(slot) = slot {
                    self.complete_puback(conn, slot, Ok(()), now_ms, out);
                }
            }
            Err(refusal) => {
                self.refuse_publish(conn, &topic, qos, packet_id, slot, refusal, now_ms, out)
            }
        }
    }

    /// Takes the next place in a connection's PUBACK order.
    fn reserve_puback(&mut self, conn: Key, packet_id: u16) -> u64 {
        let active = self
            .connections
            .get_mut(conn)
            .and_then(|c| c.active.as_mut())
            .expect("an active connection");
        active.pubacks.reserve(packet_id)
    }

    /// A stored QoS 1 publish's answer: a refusal counted and logged with
    /// the publisher's name, then the PUBACK (`complete_puback`).
    pub(crate) fn answer_puback(
        &mut self,
        conn: Key,
        slot: u64,
        answer: Result<(), Refusal>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if let Err(reason) = answer {
            self.stats.count_publish_refusal(reason);
            limited!(
                PUBLISH_REFUSED,
                now_ms,
                "refusing a publish from {}: {reason}",
                self.client_id_of(conn)
            );
        }
        self.complete_puback(conn, slot, answer, now_ms, out);
    }

    /// Records a QoS 1 publish's answer and sends every PUBACK now due, in
    /// arrival order. A refusal reaching a 3.1.1 client closes it instead.
    pub(crate) fn complete_puback(
        &mut self,
        conn: Key,
        slot: u64,
        answer: Result<(), Refusal>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(active) = self
            .connections
            .get_mut(conn)
            .and_then(|c| c.active.as_mut())
        else {
            return;
        };
        active.pubacks.answer(slot, answer);
        loop {
            let Some(active) = self
                .connections
                .get_mut(conn)
                .and_then(|c| c.active.as_mut())
            else {
                return;
            };
            let (version, max_bytes) = (active.version, active.client_max_packet_size);
            let Some((packet_id, answer)) = active.pubacks.next_due() else {
                return;
            };
            let mut ack = PubAck {
                packet_id,
                ..PubAck::default()
            };
            if let Err(refusal) = answer {
                if version == ProtocolVersion::V311 {
                    debug_assert_eq!(refusal.rule().v311, V311Answer::Close);
                    self.connection_refused(conn, None, refusal.into(), now_ms);
                    self.end_connection(conn, None, true, now_ms, out);
                    return;
                }
                ack.reason_code = refusal.code();
                ack.properties.reason_string = self.reason_string(conn, refusal.reason());
            }
            if !self.send_within(conn, version, max_bytes, &Packet::Puback(ack), out) {
                return;
            }
        }
    }

    /// The one path every admitted message takes, whoever published it: a
    /// retained value is stored first, and a store with no room refuses the
    /// whole publish rather than deliver what it cannot keep.
    pub(crate) fn accept_message(
        &mut self,
        message: Message,
        now_ms: u64,
        out: &mut impl Transport,
    ) -> Result<(), Refusal> {
        let message = Rc::new(message);
        self.note_logged(&message);
        if message.retain && self.retained.set(Rc::clone(&message)).is_err() {
            self.stats.retained_refused += 1;
            return Err(Refusal::RetainedStoreFull);
        }
        if message.retain {
            self.retained_set_behind(&message, out);
        }
        self.route(message, now_ms, out);
        Ok(())
    }

    /// Replaces a Topic Alias with the topic it stands for, registering a
    /// new one where the publish carries both.
    fn resolve_topic_alias(&mut self, conn: Key, publish: &mut Publish) -> Result<(), Refusal> {
        let Some(alias) = publish.properties.topic_alias.take() else {
            return Ok(());
        };
        let max_topic_length_bytes = self.settings.max_topic_length as usize;
        let active = self
            .connections
            .get_mut(conn)
            .and_then(|c| c.active.as_mut())
            .expect("an active connection");
        active
            .topic_aliases
            .resolve(alias, &mut publish.topic, max_topic_length_bytes)
    }

    /// The checks every topic a message is published to must pass, whoever
    /// publishes it.
    pub(crate) fn admit_topic(&self, topic: &str) -> Result<(), Refusal> {
        if topic.len() > self.settings.max_topic_length as usize {
            return Err(Refusal::TopicTooLong);
        }
        if crate::codec::topic::level_count(topic) > self.settings.max_topic_levels as usize {
            return Err(Refusal::TopicTooDeep);
        }
        let defined = crate::core::channel::append::seek::seek_channel(topic).is_some()
            || topic == super::hang_up::HANG_UP_TOPIC
            || Self::is_queue_response_topic(topic)
            || crate::core::channel::latest::point_read::is_request(topic);
        if (topic.starts_with("$saguin/") && !defined) || topic == "$saguin" {
            return Err(Refusal::TopicReserved);
        }
        if topic.starts_with("$share/") {
            return Err(Refusal::TopicShareForm);
        }
        if topic == "$SYS" || topic.starts_with("$SYS/") {
            return Err(Refusal::TopicSysTree);
        }
        Ok(())
    }

    fn admit_properties(&self, publish: &Publish) -> Result<(), Refusal> {
        let user_properties = &publish.properties.user_properties;
        if user_properties.len() > self.settings.max_header_count as usize {
            return Err(Refusal::TooManyHeaders);
        }
        let header_bytes: usize = user_properties.iter().map(|(k, v)| k.len() + v.len()).sum();
        if header_bytes > self.settings.max_header_bytes as usize {
            return Err(Refusal::HeadersTooLarge);
        }
        if publish.properties.payload_format_indicator == Some(1)
            && std::str::from_utf8(&publish.payload).is_err()
        {
            return Err(Refusal::PayloadNotUtf8);
        }
        Ok(())
    }

    /// Spends the client's `publish_rate` and `publish_bytes` budgets.
    fn spend_publish_budget(
        &mut self,
        conn: Key,
        payload_bytes: usize,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        let own_limits = self.grants_limits(conn);
        if own_limits.is_none() && !self.budgets.is_limited() {
            // No bucket to spend from: no client id to look up.
            return Ok(());
        }
        let client_id = self
            .connections
            .get(conn)
            .and_then(|c| c.active.as_ref())
            .and_then(|a| self.sessions.get(a.session))
            .map_or("-", |s| &*s.client_id);
        let spent = match own_limits {
            Some(own) => self.budgets.spend_own(
                client_id,
                payload_bytes,
                own.publish_rate_per_s,
                own.publish_bytes_per_s,
                now_ms,
            ),
            None => self.budgets.spend(client_id, payload_bytes, now_ms),
        };
        if spent.is_err() {
            self.stats.publishes_rate_limited += 1;
        }
        spent
    }

    /// A refused publish: MQTT 5 is told why on its PUBACK or PUBREC; a
    /// 3.1.1 client, whose acknowledgement cannot carry a refusal, is closed
    /// rather than told a success; QoS 0 is a counted, logged drop.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn refuse_publish(
        &mut self,
        conn: Key,
        topic: &str,
        qos: QoS,
        packet_id: Option<u16>,
        puback_slot: Option<u64>,
        refusal: Refusal,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.stats.count_publish_refusal(refusal);
        let client_id = self.client_id_of(conn);
        if refusal == Refusal::PublishRateExceeded {
            // A client held to its rate may earn one per publish.
            log::debug!("refusing a publish to {topic:?} from {client_id}: {refusal}");
        } else {
            limited!(
                PUBLISH_REFUSED,
                now_ms,
                "refusing a publish to {topic:?} from {client_id}: {refusal}"
            );
        }
        if let Some(slot) = puback_slot {
            self.complete_puback(conn, slot, Err(refusal), now_ms, out);
            return;
        }
        let (Some(version), Some(packet_id), QoS::ExactlyOnce) =
            (self.version(conn), packet_id, qos)
        else {
            return;
        };
        if version == ProtocolVersion::V311 {
            self.connection_refused(conn, None, refusal.into(), now_ms);
            self.end_connection(conn, None, true, now_ms, out);
            return;
        }
        let ack = PubAck {
            packet_id,
            reason_code: refusal.code(),
            properties: Properties {
                reason_string: self.reason_string(conn, refusal.reason()),
                ..Properties::default()
            },
        };
        self.send(conn, &Packet::Pubrec(ack), out);
    }

    /// QoS 2 in: the message is held from PUBREC until PUBREL releases it,
    /// so a re-sent PUBLISH under the same identifier is delivered once.
    fn hold_exactly_once(
        &mut self,
        conn: Key,
        session_key: Key,
        packet_id: u16,
        message: Message,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let limit = self.settings.qos2_max_inflight_per_client as usize;
        let receive_maximum = usize::from(self.settings.receive_maximum);
        // A channel is its own store: the retained store is for broadcast.
        let channel = self.channel_for(&message.topic);
        let on_channel = channel.is_some();
        let channel_at_bound = channel.is_some_and(|c| self.channels[c].at_bound);
        let retained_room = !message.retain || on_channel || self.retained.has_room_for(&message);
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        if session.held_publishes.contains_key(&packet_id) {
            // A re-sent PUBLISH of an exchange already held: answered
            // again, delivered once.
            let ack = PubAck {
                packet_id,
                ..PubAck::default()
            };
            self.send(conn, &Packet::Pubrec(ack), out);
            return;
        }
        if session.held_publishes.len() >= receive_maximum {
            let reason = Refusal::ReceiveMaximumExceeded;
            self.end_connection(conn, Some(reason), true, now_ms, out);
            return;
        }
        let refusal = if session.held_publishes.len() >= limit {
            Some(Refusal::InflightExceeded)
        } else if channel_at_bound {
            Some(Refusal::ChannelFull)
        } else if !retained_room {
            Some(Refusal::RetainedStoreFull)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            // Refused before ownership is taken: nothing is held.
            let topic = message.topic.clone();
            self.refuse_publish(
                conn,
                &topic,
                QoS::ExactlyOnce,
                Some(packet_id),
                None,
                refusal,
                now_ms,
                out,
            );
            return;
        }
        let held = HeldPublish {
            message,
            received_at_ms: now_ms,
        };
        let previous = session.held_publishes.insert(packet_id, held);
        debug_assert!(previous.is_none(), "checked above: a new exchange");
        debug_assert!(session.held_publishes.len() <= receive_maximum);
        // Stored first where the session keeps a record.
        self.pubrec_after_hold(conn, session_key, packet_id, now_ms, out);
    }

    pub(crate) fn handle_pubrel(
        &mut self,
        conn: Key,
        packet_id: u16,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        let held = self
            .sessions
            .get_mut(session_key)
            .and_then(|s| s.held_publishes.remove(&packet_id));
        let Some(held) = held else {
            let reason = self.reason_string(
                conn,
                "no exactly-once publish is held under this identifier",
            );
            let mut ack = PubAck {
                packet_id,
                reason_code: ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
                ..PubAck::default()
            };
            ack.properties.reason_string = reason;
            self.send(conn, &Packet::Pubcomp(ack), out);
            return;
        };
        if let Some(channel) = self.channel_for(&held.message.topic) {
            // The record is written now, and PUBCOMP follows its commit; a
            // stored hold goes in the same commit.
            self.persist.release_drop = self
                .hold_drop(session_key, packet_id, &held.message.topic)
                .map(|(_, write)| write);
            let ack = PendingAck::Pubcomp { packet_id };
            if let Err(message) =
                self.store_publish(channel, held.message, Some((conn, ack)), now_ms, out)
            {
                log::warn!("storage is behind; the exactly-once publish stays held");
                self.hold_again(conn, packet_id, *message, now_ms);
                self.end_connection(conn, Some(Refusal::StorageBehind), true, now_ms, out);
            }
            return;
        }
        let retained_room = !held.message.retain || self.retained.has_room_for(&held.message);
        if !retained_room {
            // The store filled since the PUBREC: the message stays held and
            // a PUBREL on the next connection completes it once there is room.
            if let Some(session) = self.sessions.get_mut(session_key) {
                session.held_publishes.insert(packet_id, held);
            }
            let reason = Refusal::RetainedStoreFull;
            self.end_connection(conn, Some(reason), true, now_ms, out);
            return;
        }
        let Some(message) =
            self.release_after_write(conn, session_key, packet_id, held.message, now_ms, out)
        else {
            return;
        };
        let accepted = self.accept_message(message, now_ms, out);
        debug_assert!(accepted.is_ok(), "room was checked above");
        let ack = PubAck {
            packet_id,
            ..PubAck::default()
        };
        self.send(conn, &Packet::Pubcomp(ack), out);
    }

    /// Drops exactly-once publishes whose PUBREL has not come within
    /// `broker.qos2.expires_after`.
    pub(crate) fn expire_held_publishes(&mut self, now_ms: u64, out: &mut impl Transport) {
        let expires_after_ms = self.settings.qos2_expires_after_ms;
        let mut abandoned = Vec::new();
        for key in self.sessions.keys() {
            let session = self.sessions.get_mut(key).expect("key just listed");
            if session.held_publishes.is_empty() {
                // Changing nothing keeps an idle session's traffic unmade.
                continue;
            }
            session.held_publishes.retain(|&packet_id, held| {
                let keep = now_ms.saturating_sub(held.received_at_ms) < expires_after_ms;
                if !keep {
                    abandoned.push((key, packet_id, held.message.topic.clone()));
                }
                keep
            });
        }
        self.stats.qos2_abandoned += abandoned.len() as u64;
        let drops = abandoned
            .iter()
            .filter_map(|(key, packet_id, topic)| self.hold_drop(*key, *packet_id, topic))
            .collect();
        self.holds_dropped(drops, out);
    }

    pub(crate) fn handle_puback(
        &mut self,
        conn: Key,
        packet_id: u16,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.finish_outbound(
            conn,
            packet_id,
            QoS::AtLeastOnce,
            OutboundStage::Published,
            now_ms,
            out,
        );
        if let Some(session_key) = self.session_of(conn) {
            self.queue_puback(session_key, packet_id, now_ms, out);
        }
    }

    pub(crate) fn handle_pubcomp(
        &mut self,
        conn: Key,
        packet_id: u16,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        self.finish_outbound(
            conn,
            packet_id,
            QoS::ExactlyOnce,
            OutboundStage::Released,
            now_ms,
            out,
        );
    }

    pub(crate) fn handle_pubrec(
        &mut self,
        conn: Key,
        ack: PubAck,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let packet_id = ack.packet_id;
        if ack.reason_code.is_error() {
            // The client refused the message: the exchange ends here.
            self.finish_outbound(
                conn,
                packet_id,
                QoS::ExactlyOnce,
                OutboundStage::Published,
                now_ms,
                out,
            );
            return;
        }
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        let mut reply = PubAck {
            packet_id,
            ..PubAck::default()
        };
        match session.inflight.get_mut(&packet_id) {
            // Again after its PUBREL, it is answered again.
            Some(inflight) if inflight.delivery.qos == QoS::ExactlyOnce => {
                inflight.stage = OutboundStage::Released
            }
            Some(_) => {
                let refusal = Refusal::AcknowledgementOutOfTurn;
                self.end_connection(conn, Some(refusal), true, now_ms, out);
                return;
            }
            None => reply.reason_code = ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
        }
        // A logged delivery's PUBREL waits for its PUBREC to be stored.
        self.pubrel_after_window(conn, session_key, reply, out);
    }

    /// Ends an outbound exchange on the answer that is its last, given at
    /// `stage` of a `qos` delivery. An answer under an identifier nothing
    /// awaits is let go (it can be a late one); one of the wrong kind for
    /// the exchange it names - a PUBACK for QoS 2, a PUBCOMP where a PUBREC
    /// is owed - is a protocol error.
    fn finish_outbound(
        &mut self,
        conn: Key,
        packet_id: u16,
        qos: QoS,
        stage: OutboundStage,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session_key) = self.session_of(conn) else {
            return;
        };
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        match session.inflight.get(&packet_id) {
            None => {
                log::debug!("ignoring an acknowledgement for packet identifier {packet_id}, which nothing awaits");
            }
            Some(f) if f.delivery.qos == qos && f.stage == stage => {
                self.outbound_finished(session_key, packet_id, now_ms, out)
            }
            Some(_) => {
                let refusal = Refusal::AcknowledgementOutOfTurn;
                self.end_connection(conn, Some(refusal), true, now_ms, out);
            }
        }
    }

    /// Ends an outbound exchange as completed, and sends what was waiting
    /// for the window it frees.
    pub(crate) fn outbound_finished(
        &mut self,
        session_key: Key,
        packet_id: u16,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(session) = self.sessions.get_mut(session_key) else {
            return;
        };
        // Looked at before the traffic box is touched mutably, which makes one.
        if !session.inflight.contains_key(&packet_id) {
            return;
        }
        let traffic = &mut **session;
        let finished = traffic.inflight.remove(&packet_id).expect("checked above");
        let cost = finished.delivery.message.cost_bytes();
        traffic.inflight_bytes -= cost;
        traffic.held_bytes -= cost;
        self.channel_delivery_finished(&finished.delivery);
        self.pump(session_key, now_ms, out);
        self.drain_groups_of(session_key, now_ms, out);
        self.pump_readers_of(session_key, now_ms, out);
    }
}

/// A seek is answered on its PUBACK, so it is published at QoS 0 or 1.
fn admit_seek_qos(publish: &Publish) -> Result<(), Refusal> {
    if publish.qos == QoS::ExactlyOnce
        && crate::core::channel::append::seek::seek_channel(&publish.topic).is_some()
    {
        return Err(Refusal::SeekAtQos2);
    }
    Ok(())
}

/// The message a publish becomes. `saguin-` User Properties are the
/// broker's own: a publisher's are stripped, all but its own `saguin-id`
/// and, from a bridge, the mark that it came over one.
fn message_from_publish(
    publish: Publish,
    publisher: Option<Rc<str>>,
    from_bridge: bool,
    now_unix_ms: u64,
) -> Message {
    let mut properties = publish.properties;
    properties.topic_alias = None;
    properties.subscription_identifiers.clear();
    properties.user_properties.retain(|(name, _)| {
        !name.starts_with("saguin-")
            || name == "saguin-id"
            || (from_bridge && name == crate::core::BRIDGED_MARK)
    });
    Message {
        topic: publish.topic.into(),
        payload: publish.payload,
        qos: publish.qos,
        retain: publish.retain,
        properties: shared_properties(properties),
        received_at_unix_ms: now_unix_ms,
        publisher,
    }
}
