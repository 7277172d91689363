//! An application message as the broker routes it, what one session is
//! owed of it, and how it turns into a PUBLISH or a stored record.

use std::rc::Rc;

use crate::codec::{Properties, Publish, QoS};
use crate::core::slab::Key;
use crate::store::{self, MessageId};

/// An application message as the broker holds it once admitted: shared by
/// every session it is owed to, never copied per subscriber.
#[derive(Debug)]
pub struct Message {
    pub topic: Box<str>,
    pub payload: Vec<u8>,
    pub qos: QoS,
    pub retain: bool,
    /// The publisher's properties, less Topic Alias and Subscription
    /// Identifiers, which belong to one hop. Shared (see
    /// [`shared_properties`]): the struct holds every packet's properties,
    /// 328 bytes, and a message is moved several times on its way.
    pub properties: Rc<Properties>,
    /// When the broker received it, in Unix milliseconds.
    pub received_at_unix_ms: u64,
    /// The publishing client id, for No Local. Never sent to a subscriber.
    pub publisher: Option<Rc<str>>,
}

thread_local! {
    /// The properties of every message that has none.
    static NO_PROPERTIES: Rc<Properties> = Rc::new(Properties::default());
}

/// `properties` to hang on a message: most messages carry none, and those
/// share one empty set rather than allocating their own.
pub fn shared_properties(properties: Properties) -> Rc<Properties> {
    if properties.is_empty() {
        NO_PROPERTIES.with(Rc::clone)
    } else {
        Rc::new(properties)
    }
}

impl Message {
    /// What holding this message costs a session, for `session_queue_bytes`:
    /// its bytes plus a fixed estimate of the entry that tracks it.
    pub fn cost_bytes(&self) -> u64 {
        const ENTRY_OVERHEAD_BYTES: u64 = 96;
        let user_properties: usize = self
            .properties
            .user_properties
            .iter()
            .map(|(k, v)| k.len() + v.len() + 4)
            .sum();
        (self.payload.len() + self.topic.len() + user_properties) as u64 + ENTRY_OVERHEAD_BYTES
    }

    /// The Message Expiry Interval left after waiting until `now_ms`, or
    /// `Err(Expired)` once it has run out. `Ok(None)` when the publisher set
    /// none.
    pub fn remaining_expiry_s(&self, now_unix_ms: u64) -> Result<Option<u32>, Expired> {
        let Some(interval_s) = self.properties.message_expiry_interval_s else {
            return Ok(None);
        };
        let waited_s = now_unix_ms.saturating_sub(self.received_at_unix_ms) / 1000;
        match u64::from(interval_s).checked_sub(waited_s) {
            Some(left_s) if left_s > 0 => Ok(Some(left_s as u32)),
            _ => Err(Expired),
        }
    }
}

/// A message whose Message Expiry Interval has run out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired;

/// One message owed to one session, at the QoS and with the identifiers of
/// the subscriptions that matched it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub message: Rc<Message>,
    pub qos: QoS,
    pub retain: bool,
    pub subscription_ids: Vec<u32>,
    /// The shared group that handed it to this session, if one did.
    pub group: Option<Key>,
    /// The channel reader and record offset it came from, if a channel's.
    pub reader: Option<(Key, u64, u32)>,
    /// The offset of the `latest` value it carries, if it carries one: it
    /// is never given up for room, and is withdrawn at a resume once a
    /// newer value has replaced it.
    pub latest: Option<u64>,
}

impl Delivery {
    /// What is left of the publisher's Message Expiry Interval. A channel's
    /// record outlives it (invariant 2): once it has run out the record is
    /// still delivered, without the property; only a broadcast expires.
    pub fn remaining_expiry_s(&self, now_unix_ms: u64) -> Result<Option<u32>, Expired> {
        match self.message.remaining_expiry_s(now_unix_ms) {
            Err(Expired) if self.reader.is_some() || self.latest.is_some() => Ok(None),
            other => other,
        }
    }
}

/// The PUBLISH that carries `delivery` to its subscriber. `remaining_expiry_s`
/// replaces the publisher's Message Expiry Interval with what is left of it;
/// `None` leaves a broadcast's as it is and takes a channel record's off.
pub(crate) fn outgoing_publish(
    delivery: &Delivery,
    packet_id: Option<u16>,
    remaining_expiry_s: Option<u32>,
) -> Publish {
    let message = &delivery.message;
    let mut properties = Properties::clone(&message.properties);
    properties.subscription_identifiers = delivery.subscription_ids.clone();
    let from_channel = delivery.reader.is_some() || delivery.latest.is_some();
    match remaining_expiry_s {
        Some(left_s) => properties.message_expiry_interval_s = Some(left_s),
        // A channel's record whose expiry ran out goes without it.
        None if from_channel => properties.message_expiry_interval_s = None,
        None => {}
    }
    Publish {
        dup: false,
        qos: delivery.qos,
        retain: delivery.retain,
        topic: message.topic.to_string(),
        packet_id,
        properties,
        payload: message.payload.clone(),
    }
}

/// The publisher's own `saguin-id`, which becomes the record's id.
pub(crate) fn publisher_id(message: &Message) -> Option<MessageId> {
    message
        .properties
        .user_properties
        .iter()
        .find(|(name, _)| name == "saguin-id")
        .map(|(_, value)| MessageId::from_publisher(value))
}

/// The record a provider keeps for `message`.
pub(crate) fn to_stored(message: &Message, id: &MessageId) -> store::Message {
    let p = &message.properties;
    store::Message {
        id: id.clone(),
        received_at_ms: message.received_at_unix_ms,
        // `String::from`, not `to_string`: a `Box<str>` would go through
        // the formatter.
        topic: String::from(&*message.topic),
        payload: message.payload.clone(),
        user_properties: p
            .user_properties
            .iter()
            .filter(|(name, _)| name != "saguin-id")
            .cloned()
            .collect(),
        payload_format_indicator: p.payload_format_indicator,
        message_expiry_interval_s: p.message_expiry_interval_s,
        content_type: p.content_type.clone(),
        response_topic: p.response_topic.clone(),
        correlation_data: p.correlation_data.clone(),
        publisher: message.publisher.as_deref().map(str::to_string),
        qos: message.qos as u8,
        retain: message.retain,
    }
}

/// The message a stored record delivers, before its labels.
pub(crate) fn from_stored(stored: &store::Message) -> Message {
    Message {
        topic: stored.topic.as_str().into(),
        payload: stored.payload.clone(),
        qos: QoS::from_bits(stored.qos).unwrap_or(QoS::AtMostOnce),
        retain: stored.retain,
        properties: shared_properties(Properties {
            payload_format_indicator: stored.payload_format_indicator,
            message_expiry_interval_s: stored.message_expiry_interval_s,
            content_type: stored.content_type.clone(),
            response_topic: stored.response_topic.clone(),
            correlation_data: stored.correlation_data.clone(),
            user_properties: stored.user_properties.clone(),
            ..Properties::default()
        }),
        received_at_unix_ms: stored.received_at_ms,
        publisher: stored.publisher.as_deref().map(Into::into),
    }
}

/// A record as every reader is sent it: the publisher's User Properties,
/// then `saguin-id`, `saguin-offset`, `saguin-timestamp`, and
/// `saguin-expires` where the publisher set an expiry. A record stored
/// without a receipt time (0) carries neither of the last two: 0 is not a
/// moment.
pub(crate) fn labelled(mut message: Message, id: &MessageId, offset: u64) -> Message {
    let received_ms = message.received_at_unix_ms;
    let expiry_s = message.properties.message_expiry_interval_s;
    let labels = &mut Rc::make_mut(&mut message.properties).user_properties;
    labels.retain(|(name, _)| name != "saguin-id");
    labels.reserve(4);
    labels.push(("saguin-id".into(), id.to_string()));
    labels.push(("saguin-offset".into(), offset.to_string()));
    if received_ms == 0 {
        return message;
    }
    labels.push(("saguin-timestamp".into(), received_ms.to_string()));
    if let Some(expiry_s) = expiry_s {
        let expires_ms = received_ms.saturating_add(u64::from(expiry_s) * 1000);
        labels.push(("saguin-expires".into(), expires_ms.to_string()));
    }
    message
}

/// A record with `saguin-channel` naming the channel it is in, for a
/// consumer whose filter reaches more than one (its offsets are per
/// channel) and for a dead letter. Built at delivery, never stored.
pub(crate) fn with_channel(message: &Rc<Message>, channel: &str) -> Rc<Message> {
    let mut properties = Properties::clone(&message.properties);
    properties
        .user_properties
        .push(("saguin-channel".into(), channel.to_string()));
    Rc::new(Message {
        topic: message.topic.clone(),
        payload: message.payload.clone(),
        qos: message.qos,
        retain: message.retain,
        properties: Rc::new(properties),
        received_at_unix_ms: message.received_at_unix_ms,
        publisher: message.publisher.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every session, cached tail and waiting publish holds messages; the
    /// struct of all properties (328 bytes) stays out of them.
    const MAX_MESSAGE_BYTES: usize = 96;

    #[test]
    fn a_message_stays_small_and_messages_without_properties_share_them() {
        assert!(
            std::mem::size_of::<Message>() <= MAX_MESSAGE_BYTES,
            "a Message is {} bytes",
            std::mem::size_of::<Message>()
        );
        let a = shared_properties(Properties::default());
        let b = shared_properties(Properties::default());
        assert!(Rc::ptr_eq(&a, &b));
        let with = shared_properties(Properties {
            content_type: Some("text/plain".into()),
            ..Properties::default()
        });
        assert!(!Rc::ptr_eq(&a, &with));
        assert_eq!(with.content_type.as_deref(), Some("text/plain"));
    }
}
