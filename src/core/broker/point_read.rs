//! A point read or a catalogue request answered: the request is checked,
//! the value read from memory or storage, and the answer sent to the
//! Response Topic, or the refusal on the PUBACK. What the requests are is
//! the `latest` channel's (`channel/latest/point_read.rs`).

use std::rc::Rc;

use crate::codec::{encoded_len, topic, Packet, Properties, ProtocolVersion, Publish, QoS};
use crate::core::channel::latest::point_read::{
    json_string, PointRead, ReplyTo, CATALOGUE_PREFIX, KV_GET,
};
use crate::core::channel::latest::LatestPending;
use crate::core::message::Message;
use crate::core::refusal::Refusal;
use crate::core::{Broker, Key, Transport};
use crate::store::{self, ReadLimit};

impl Broker {
    /// A publish to `$saguin/kv/get` or `$saguin/catalogue/<channel>`.
    pub(crate) fn handle_request(
        &mut self,
        conn: Key,
        publish: &Publish,
        slot: Option<u64>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(slot) = slot else {
            if publish.qos == QoS::ExactlyOnce {
                let refusal = Refusal::RequestAtQos2;
                let (topic, id) = (&publish.topic, publish.packet_id);
                self.refuse_publish(conn, topic, publish.qos, id, None, refusal, now_ms, out);
            } else {
                log::debug!(
                    "dropping a QoS 0 request to {} from {}: there is no PUBACK to answer on",
                    publish.topic,
                    self.client_id_of(conn)
                );
            }
            return;
        };
        let Some(response_topic) = publish.properties.response_topic.clone() else {
            let refusal = Refusal::RequestWithoutResponseTopic;
            self.refuse_request(conn, &publish.topic, slot, refusal, now_ms, out);
            return;
        };
        let reply = |otherwise: Option<Vec<u8>>| ReplyTo {
            conn,
            topic: response_topic.clone(),
            correlation_data: publish.properties.correlation_data.clone().or(otherwise),
            slot,
        };
        if let Some(name) = publish.topic.strip_prefix(CATALOGUE_PREFIX) {
            // An empty name is a name no channel has: the empty reply.
            if name.contains('/') {
                let refusal = Refusal::CatalogueNameHasLevels;
                self.refuse_request(conn, &publish.topic, slot, refusal, now_ms, out);
                return;
            }
            let answer = self.catalogue_entry(conn, name).into_bytes();
            self.answer_request(reply(None), None, answer, now_ms, out);
            return;
        }
        match self.point_read_target(&publish.payload) {
            Err(refusal) => self.refuse_request(conn, &publish.topic, slot, refusal, now_ms, out),
            Ok((channel, key)) => {
                let reply = reply(Some(key.as_bytes().to_vec()));
                self.point_read(reply, channel, key, now_ms, out);
            }
        }
    }

    /// The channel and topic a point read's payload names, or why it names
    /// nothing that holds a value.
    fn point_read_target(&self, payload: &[u8]) -> Result<(usize, String), Refusal> {
        let key = std::str::from_utf8(payload).map_err(|_| Refusal::KeyNotUtf8)?;
        if key.is_empty() {
            return Err(Refusal::KeyEmpty);
        }
        if key.len() > self.settings.max_topic_length as usize {
            return Err(Refusal::KeyTooLong);
        }
        if topic::level_count(key) > self.settings.max_topic_levels as usize {
            return Err(Refusal::KeyTooDeep);
        }
        if key.contains(['+', '#']) {
            return Err(Refusal::KeyHasWildcard);
        }
        if key.starts_with('$') {
            return Err(Refusal::KeyReserved);
        }
        let Some(channel) = self.channel_for(key) else {
            return Err(Refusal::KeyUnclaimed);
        };
        if self.channels[channel].latest.is_none() {
            log::info!(
                "a point read of {key} reaches channel {}, which is not a latest channel",
                self.channels[channel].settings.name
            );
            return Err(if self.queues.is_queue(channel) {
                Refusal::KeyOnQueue
            } else {
                Refusal::KeyOnAppend
            });
        }
        Ok((channel, key.to_string()))
    }

    /// Answers with the key's current value: from memory where its body is
    /// cached, otherwise after one storage read.
    fn point_read(
        &mut self,
        reply: ReplyTo,
        channel: usize,
        key: String,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let latest = self.channels[channel]
            .latest
            .as_deref()
            .expect("checked a latest channel");
        let Some(value) = latest.live_value(&key) else {
            // Never set, deleted, or past its period: the same answer.
            self.answer_request(reply, None, Vec::new(), now_ms, out);
            return;
        };
        if let Some(message) = latest.cached(value.offset) {
            self.answer_value(reply, &message, now_ms, out);
            return;
        }
        // The first record is always returned, whatever its size.
        let limit = ReadLimit {
            max_records: 1,
            max_bytes: 1,
        };
        let offset = value.offset;
        let pending = LatestPending::PointRead(PointRead {
            reply: reply.clone(),
            channel,
            key,
            offset,
        });
        if !self.read_latest(channel, offset, limit, pending, out) {
            let refusal = Refusal::StorageBehind;
            let topic = KV_GET;
            self.refuse_request(reply.conn, topic, reply.slot, refusal, now_ms, out);
        }
    }

    pub(crate) fn point_read_completed(
        &mut self,
        read: PointRead,
        result: Result<store::Read, store::StoreError>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if let Err(error) = &result {
            log::warn!("a point read of {} failed: {error}", read.key);
            let refusal = Refusal::ValueNotRead;
            self.refuse_request(
                read.reply.conn,
                KV_GET,
                read.reply.slot,
                refusal,
                now_ms,
                out,
            );
            return;
        }
        let found = crate::core::channel::latest::read_bodies(result)
            .into_iter()
            .find(|(offset, _)| *offset == read.offset);
        let still_current = self.channels[read.channel]
            .latest
            .as_deref()
            .and_then(|l| l.live_value(&read.key))
            .is_some_and(|v| v.offset == read.offset);
        match found {
            Some((_, message)) => self.answer_value(read.reply, &message, now_ms, out),
            // Replaced or removed while it was read: asked again, of what
            // is current now, which is always a later offset or none.
            None if !still_current => {
                self.point_read(read.reply, read.channel, read.key, now_ms, out)
            }
            None => {
                log::error!(
                    "the current value of {} at offset {} is not in storage",
                    read.key,
                    read.offset
                );
                let refusal = Refusal::ValueNotRead;
                self.refuse_request(
                    read.reply.conn,
                    KV_GET,
                    read.reply.slot,
                    refusal,
                    now_ms,
                    out,
                );
            }
        }
    }

    /// The reply carrying a value: its payload and the publisher's
    /// properties with the broker's labels, less what belonged to the
    /// publisher's own exchange.
    fn answer_value(
        &mut self,
        reply: ReplyTo,
        message: &Rc<Message>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        // A value outlives its publisher's expiry (invariant 2), which is
        // why the reply never carries the property.
        let properties = Properties {
            response_topic: None,
            correlation_data: None,
            message_expiry_interval_s: None,
            ..Properties::clone(&message.properties)
        };
        let payload = message.payload.clone();
        self.answer_request(reply, Some(properties), payload, now_ms, out);
    }

    /// Writes the reply to the asking connection alone - no subscription is
    /// needed and nobody else receives it - then the PUBACK.
    fn answer_request(
        &mut self,
        reply: ReplyTo,
        properties: Option<Properties>,
        payload: Vec<u8>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(active) = self
            .connections
            .get(reply.conn)
            .and_then(|c| c.active.as_ref())
        else {
            return;
        };
        let (version, max_packet_size) = (active.version, active.client_max_packet_size);
        let mut properties = properties.unwrap_or_default();
        properties.correlation_data = reply.correlation_data;
        let publish = Publish {
            qos: QoS::AtMostOnce,
            topic: reply.topic,
            payload,
            properties,
            ..Publish::default()
        };
        let packet = Packet::Publish(publish);
        debug_assert_eq!(version, ProtocolVersion::V5, "a Response Topic is MQTT 5's");
        if encoded_len(&packet, version) > max_packet_size as usize {
            let refusal = Refusal::AnswerTooLarge;
            self.refuse_request(reply.conn, KV_GET, reply.slot, refusal, now_ms, out);
            return;
        }
        out.send(reply.conn, version, &packet, false);
        self.stats.deliveries_sent += 1;
        self.complete_puback(reply.conn, reply.slot, Ok(()), now_ms, out);
    }

    fn refuse_request(
        &mut self,
        conn: Key,
        topic: &str,
        slot: u64,
        refusal: Refusal,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let qos = QoS::AtLeastOnce;
        self.refuse_publish(conn, topic, qos, None, Some(slot), refusal, now_ms, out);
    }

    /// What `$saguin/catalogue/<name>` answers: the channel as JSON with
    /// the verbs the asking client holds on it, or nothing for a name no
    /// channel has and for a channel the client holds no verb on - the
    /// same nothing, so asking discovers no channel.
    fn catalogue_entry(&self, conn: Key, name: &str) -> String {
        let Some(index) = self.channels.iter().position(|c| c.settings.name == name) else {
            return String::new();
        };
        let settings = &self.channels[index].settings;
        let kind = if settings.latest.is_some() {
            crate::acl::ChannelType::Latest
        } else if self.queues.is_queue(index) {
            crate::acl::ChannelType::Queue
        } else {
            crate::acl::ChannelType::Append
        };
        let held = self.verbs_held(conn, index, kind.verbs());
        if held.is_empty() {
            return String::new();
        }
        let verbs = format!(
            "[{}]",
            held.names()
                .iter()
                .map(|v| format!("\"{v}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        let kind = kind.name();
        // Only a queue has a subscription form of its own.
        let pin = match kind {
            "queue" => format!(
                r#","pin":{}"#,
                json_string(&format!("$saguin/queue/{name}"))
            ),
            _ => String::new(),
        };
        format!(
            r#"{{"name":{},"type":"{kind}","filter":{},"verbs":{verbs}{pin}}}"#,
            json_string(&settings.name),
            json_string(&settings.written_filter)
        )
    }
}
