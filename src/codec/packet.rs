//! The in-memory shape of every MQTT 3.1.1 and 5 control packet.
//!
//! One struct per packet, shared by both protocol versions: a field that a
//! version cannot carry is left at its default when decoding that version and
//! ignored when encoding it.

use super::properties::Properties;
use super::reason::ReasonCode;

/// The protocol level byte of CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolVersion {
    /// MQTT 3.1.1, protocol level 4.
    V311,
    /// MQTT 5, protocol level 5.
    V5,
}

impl ProtocolVersion {
    pub fn level(self) -> u8 {
        match self {
            ProtocolVersion::V311 => 4,
            ProtocolVersion::V5 => 5,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum QoS {
    #[default]
    AtMostOnce = 0,
    AtLeastOnce = 1,
    ExactlyOnce = 2,
}

impl QoS {
    pub fn from_bits(bits: u8) -> Option<QoS> {
        match bits {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

/// The control packet type, the high nibble of the first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketType {
    Connect = 1,
    Connack = 2,
    Publish = 3,
    Puback = 4,
    Pubrec = 5,
    Pubrel = 6,
    Pubcomp = 7,
    Subscribe = 8,
    Suback = 9,
    Unsubscribe = 10,
    Unsuback = 11,
    Pingreq = 12,
    Pingresp = 13,
    Disconnect = 14,
    Auth = 15,
}

// CONNECT, the largest by far (two property sets), is boxed: it comes
// once a connection, while every PUBLISH is moved through several calls
// at the enum's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    Connect(Box<Connect>),
    Connack(Connack),
    Publish(Publish),
    Puback(PubAck),
    Pubrec(PubAck),
    Pubrel(PubAck),
    Pubcomp(PubAck),
    Subscribe(Subscribe),
    Suback(Suback),
    Unsubscribe(Unsubscribe),
    Unsuback(Unsuback),
    Pingreq,
    Pingresp,
    Disconnect(Disconnect),
    Auth(Auth),
}

impl Packet {
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect(_) => PacketType::Connect,
            Packet::Connack(_) => PacketType::Connack,
            Packet::Publish(_) => PacketType::Publish,
            Packet::Puback(_) => PacketType::Puback,
            Packet::Pubrec(_) => PacketType::Pubrec,
            Packet::Pubrel(_) => PacketType::Pubrel,
            Packet::Pubcomp(_) => PacketType::Pubcomp,
            Packet::Subscribe(_) => PacketType::Subscribe,
            Packet::Suback(_) => PacketType::Suback,
            Packet::Unsubscribe(_) => PacketType::Unsubscribe,
            Packet::Unsuback(_) => PacketType::Unsuback,
            Packet::Pingreq => PacketType::Pingreq,
            Packet::Pingresp => PacketType::Pingresp,
            Packet::Disconnect(_) => PacketType::Disconnect,
            Packet::Auth(_) => PacketType::Auth,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Will {
    pub topic: String,
    pub payload: Vec<u8>,
    pub qos: QoS,
    pub retain: bool,
    /// Will properties (MQTT 5 only).
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    pub protocol_version: ProtocolVersion,
    pub clean_start: bool,
    pub keep_alive_s: u16,
    pub client_id: String,
    pub will: Option<Will>,
    pub username: Option<String>,
    pub password: Option<Vec<u8>>,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Connack {
    pub session_present: bool,
    /// On 3.1.1 the encoder maps this to the nearest of the five return codes
    /// (see `ReasonCode::connack_return_code_v311`).
    pub reason_code: ReasonCode,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Publish {
    pub dup: bool,
    pub qos: QoS,
    pub retain: bool,
    /// May be empty on MQTT 5 when a Topic Alias property names the topic.
    pub topic: String,
    /// Present exactly when `qos` is 1 or 2; never zero.
    pub packet_id: Option<u16>,
    pub properties: Properties,
    pub payload: Vec<u8>,
}

/// PUBACK, PUBREC, PUBREL and PUBCOMP share one shape.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PubAck {
    pub packet_id: u16,
    pub reason_code: ReasonCode,
    pub properties: Properties,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetainHandling {
    /// Send retained messages at the time of the subscribe.
    #[default]
    SendAlways = 0,
    /// Send them only if the subscription did not already exist.
    SendIfNew = 1,
    /// Do not send them.
    DoNotSend = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubscriptionOptions {
    pub qos: QoS,
    pub no_local: bool,
    pub retain_as_published: bool,
    pub retain_handling: RetainHandling,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    pub packet_id: u16,
    /// Holds at most one Subscription Identifier (MQTT-3.8.2.1.2).
    pub properties: Properties,
    /// Never empty once decoded: a SUBSCRIBE with no filter is a protocol error.
    pub filters: Vec<(String, SubscriptionOptions)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Suback {
    pub packet_id: u16,
    pub properties: Properties,
    /// One per filter of the SUBSCRIBE. On 3.1.1 any code of 0x80 or above
    /// is written as 0x80.
    pub reason_codes: Vec<ReasonCode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unsubscribe {
    pub packet_id: u16,
    pub properties: Properties,
    pub filters: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unsuback {
    pub packet_id: u16,
    pub properties: Properties,
    /// MQTT 5 only; a 3.1.1 UNSUBACK carries none.
    pub reason_codes: Vec<ReasonCode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disconnect {
    pub reason_code: ReasonCode,
    pub properties: Properties,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Auth {
    pub reason_code: ReasonCode,
    pub properties: Properties,
}
