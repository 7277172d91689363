//! What the broker keeps for one connection: when it was accepted and last
//! heard from, and once its CONNECT is accepted, what was agreed - version,
//! keepalive, the client's limits, its topic aliases, its Will and the
//! order its PUBACKs go out in.

use std::collections::VecDeque;

use crate::codec::{ProtocolVersion, Will};
use crate::core::refusal::Refusal;
use crate::core::slab::Key;
use crate::core::TOPIC_ALIAS_MAXIMUM;

/// A connection that has sent its CONNECT and been accepted.
pub(crate) struct Active {
    pub version: ProtocolVersion,
    pub session: Key,
    /// The keepalive in force, after any Server Keep Alive; 0 for none.
    pub keep_alive_s: u16,
    pub client_max_packet_size: u32,
    pub client_receive_maximum: u16,
    /// Made on the first alias: most connections never use one.
    pub topic_aliases: Option<Box<[Option<Box<str>>; TOPIC_ALIAS_MAXIMUM as usize]>>,
    /// False when the client asked not to be sent Reason Strings.
    pub problem_information: bool,
    /// The Session Expiry Interval granted at CONNECT.
    pub connect_expiry_s: u32,
    /// Boxed: a Will with its properties is large, and most have none.
    pub will: Option<Box<Will>>,
    /// QoS 1 publishes awaiting their PUBACK, in arrival order: MQTT has
    /// PUBACKs sent in that order, and a stored publish is answered only
    /// once its commit returns (MQTT-4.6.0-2).
    pub pubacks: VecDeque<PubackSlot>,
    pub next_puback_slot: u64,
}

/// One QoS 1 publish's place in the PUBACK order, and its answer once known.
pub(crate) struct PubackSlot {
    pub slot: u64,
    pub packet_id: u16,
    pub answer: Option<Result<(), Refusal>>,
}

pub(crate) struct Connection {
    pub accepted_at_ms: u64,
    pub last_received_ms: u64,
    pub active: Option<Active>,
}

/// A per-client token bucket for `publish_rate` and `publish_bytes`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PublishBudget {
    pub messages: f64,
    pub bytes: f64,
    pub updated_ms: u64,
}
