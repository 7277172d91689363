//! What the broker keeps for a client id between connections.

pub(crate) mod charge;
pub(crate) mod record;
pub(crate) mod table;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use crate::codec::{SubscriptionOptions, Will};
use crate::core::message::{Delivery, Message};
use crate::core::partition::Slice;
use crate::core::slab::Key;

/// Where an outgoing QoS 1 or 2 exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboundStage {
    /// PUBLISH sent, waiting for PUBACK (QoS 1) or PUBREC (QoS 2).
    Published,
    /// PUBREL sent, waiting for PUBCOMP.
    Released,
}

#[derive(Debug)]
pub struct InFlight {
    pub delivery: Delivery,
    pub stage: OutboundStage,
}

/// A QoS 2 publish received from the client and not yet released.
#[derive(Debug)]
pub struct HeldPublish {
    pub message: Message,
    pub received_at_ms: u64,
}

#[derive(Debug, Clone)]
pub struct SubscriptionEntry {
    pub options: SubscriptionOptions,
    pub subscription_id: Option<u32>,
    /// The shared group this subscription made the session a member of.
    pub group: Option<Key>,
    /// The slice its SUBSCRIBE declared; `None` takes every topic.
    pub slice: Option<Rc<Slice>>,
}

pub struct Session {
    pub client_id: Rc<str>,
    /// The connection that owns the session, if it is connected.
    pub connection: Option<Key>,
    pub subscriptions: HashMap<Box<str>, SubscriptionEntry>,
    /// The granted Session Expiry Interval; 0 ends the session with its
    /// connection, `u32::MAX` never expires it.
    pub expiry_interval_s: u32,
    /// Set while the session is away and will expire.
    pub expires_at_ms: Option<u64>,
    /// QoS 1 and 2 deliveries on the wire, by packet identifier.
    pub inflight: BTreeMap<u16, InFlight>,
    /// QoS 1 and 2 deliveries waiting for window, oldest first.
    pub waiting: VecDeque<Delivery>,
    /// What `inflight` and `waiting` cost, against `session_queue_bytes`.
    pub held_bytes: u64,
    /// What `inflight` alone costs.
    pub inflight_bytes: u64,
    pub next_packet_id: u16,
    /// Exactly-once publishes received and not yet released, by packet id.
    pub held_publishes: BTreeMap<u16, HeldPublish>,
    /// A Will waiting out its delay after its connection ended, and when
    /// it is due.
    pub pending_will: Option<Box<(Will, u64)>>,
    /// Its cursors into channels.
    pub readers: Vec<Key>,
    /// Its subscriptions to `latest` channels, one per channel.
    pub latest_readers: Vec<Key>,
    /// Ending this session leaves its stored positions in place.
    pub keep_positions: bool,
    /// True until the session's first connection is answered, so that its
    /// CONNACK says Session Present 0.
    pub is_new: bool,
    /// The order the table took it in, this run: a newer session of the
    /// same client id has a larger one. Set by the table.
    pub epoch: u64,
    /// What the table counts it at against the bound on session memory.
    pub charged_bytes: u64,
}

impl Session {
    pub fn new(client_id: &str, expiry_interval_s: u32) -> Session {
        Session {
            client_id: client_id.into(),
            connection: None,
            subscriptions: HashMap::new(),
            expiry_interval_s,
            expires_at_ms: None,
            inflight: BTreeMap::new(),
            waiting: VecDeque::new(),
            held_bytes: 0,
            inflight_bytes: 0,
            next_packet_id: 1,
            held_publishes: BTreeMap::new(),
            pending_will: None,
            is_new: true,
            readers: Vec::new(),
            latest_readers: Vec::new(),
            keep_positions: false,
            epoch: 0,
            charged_bytes: 0,
        }
    }

    /// A packet identifier no outgoing exchange of this session holds.
    /// The window is bounded well below 65,535, so one is always free.
    pub fn allocate_packet_id(&mut self) -> u16 {
        // Receive Maximum keeps far fewer than 65,535 exchanges open.
        debug_assert!(
            self.inflight.len() < usize::from(u16::MAX),
            "a free identifier"
        );
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = if id == u16::MAX { 1 } else { id + 1 };
            if !self.inflight.contains_key(&id) {
                debug_assert_ne!(id, 0, "0 is no packet identifier");
                return id;
            }
        }
    }

    /// Drops the oldest waiting delivery that may be given up; returns
    /// false if none may. A channel's record never is: its cursor waits
    /// for it, and dropping it would leave the position stuck below it.
    pub fn drop_oldest_waiting(&mut self) -> bool {
        let Some(index) = self
            .waiting
            .iter()
            .position(|d| d.reader.is_none() && d.latest.is_none())
        else {
            return false;
        };
        let delivery = self.waiting.remove(index).expect("index found above");
        self.held_bytes -= delivery.message.cost_bytes();
        true
    }
}
