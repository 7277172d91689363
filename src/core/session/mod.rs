//! What the broker keeps for a client id between connections.

pub(crate) mod charge;
pub(crate) mod record;
pub(crate) mod table;

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Deref, DerefMut};
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
    pub subscriptions: BTreeMap<Box<str>, SubscriptionEntry>,
    /// The granted Session Expiry Interval; 0 ends the session with its
    /// connection, `u32::MAX` never expires it.
    pub expiry_interval_s: u32,
    /// When the session expires while it is away; `NEVER_MS` while it is
    /// connected or never expires (read through `expires_at_ms()`). Not an
    /// `Option`, which would cost the entry 8 B.
    expires_at_ms: u64,
    /// A Will waiting out its delay after its connection ended, and when
    /// it is due.
    pub pending_will: Option<Box<(Will, u64)>>,
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
    /// Made on first change: an idle session has none (see the `Deref`).
    traffic: Option<Box<Traffic>>,
}

/// What a session holds only while messages move through it: the larger
/// part of a session, boxed so that an idle one does not carry it. Its
/// fields read as the session's own through `Deref`.
#[derive(Default)]
pub struct Traffic {
    /// QoS 1 and 2 deliveries on the wire, by packet identifier.
    pub inflight: BTreeMap<u16, InFlight>,
    /// QoS 1 and 2 deliveries waiting for window, oldest first.
    pub waiting: VecDeque<Delivery>,
    /// What `inflight` and `waiting` cost, against `session_queue_bytes`.
    pub held_bytes: u64,
    /// What `inflight` alone costs.
    pub inflight_bytes: u64,
    /// The packet identifier given last; 0 before the first.
    last_packet_id: u16,
    /// Exactly-once publishes received and not yet released, by packet id.
    pub held_publishes: BTreeMap<u16, HeldPublish>,
    /// Its cursors into channels.
    pub readers: Vec<Key>,
    /// Its subscriptions to `latest` channels, one per channel.
    pub latest_readers: Vec<Key>,
}

/// `Session::expires_at_ms` when there is no deadline.
const NEVER_MS: u64 = u64::MAX;

thread_local! {
    /// What a session without traffic reads as: one per thread, never
    /// changed (`Traffic` holds `Rc`s, so it cannot be a shared static).
    static NO_TRAFFIC: &'static Traffic = Box::leak(Box::default());
}

impl Traffic {
    /// A packet identifier no outgoing exchange of this session holds.
    /// The window is bounded well below 65,535, so one is always free.
    pub fn allocate_packet_id(&mut self) -> u16 {
        // Receive Maximum keeps far fewer than 65,535 exchanges open.
        debug_assert!(
            self.inflight.len() < usize::from(u16::MAX),
            "a free identifier"
        );
        loop {
            let last = self.last_packet_id;
            let id = if last == u16::MAX { 1 } else { last + 1 };
            self.last_packet_id = id;
            if !self.inflight.contains_key(&id) {
                return id;
            }
        }
    }
}

impl Deref for Session {
    type Target = Traffic;

    fn deref(&self) -> &Traffic {
        match &self.traffic {
            Some(traffic) => traffic,
            None => NO_TRAFFIC.with(|none| *none),
        }
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Traffic {
        self.traffic.get_or_insert_with(Box::default)
    }
}

impl Session {
    pub fn new(client_id: &str, expiry_interval_s: u32) -> Session {
        Session {
            client_id: client_id.into(),
            connection: None,
            subscriptions: BTreeMap::new(),
            expiry_interval_s,
            expires_at_ms: NEVER_MS,
            pending_will: None,
            is_new: true,
            keep_positions: false,
            epoch: 0,
            charged_bytes: 0,
            traffic: None,
        }
    }

    /// Set while the session is away and will expire.
    pub fn expires_at_ms(&self) -> Option<u64> {
        Some(self.expires_at_ms).filter(|&at_ms| at_ms != NEVER_MS)
    }

    /// A deadline of `u64::MAX` ms, past any clock, is stored as none.
    pub fn set_expires_at_ms(&mut self, at_ms: Option<u64>) {
        self.expires_at_ms = at_ms.unwrap_or(NEVER_MS);
    }

    /// Whether the session has made its traffic box.
    #[cfg(test)]
    pub fn has_traffic(&self) -> bool {
        self.traffic.is_some()
    }

    /// Takes what the session holds in flight and waiting, leaving none.
    pub fn take_traffic(&mut self) -> Traffic {
        self.traffic
            .take()
            .map(|traffic| *traffic)
            .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A session entry's bytes: every connected client has one, so an
    /// idle connection pays this.
    const MAX_SESSION_ENTRY_BYTES: usize = 96;

    #[test]
    fn a_session_entry_stays_small() {
        let size_bytes = std::mem::size_of::<Session>();
        assert!(
            size_bytes <= MAX_SESSION_ENTRY_BYTES,
            "a session entry is {size_bytes} B, over {MAX_SESSION_ENTRY_BYTES} B"
        );
    }

    #[test]
    fn packet_ids_start_at_one_and_skip_zero_when_they_wrap() {
        let mut session = Session::new("a", 0);
        assert!(!session.has_traffic());
        assert_eq!(session.allocate_packet_id(), 1);
        assert_eq!(session.allocate_packet_id(), 2);
        session.last_packet_id = u16::MAX - 1;
        assert_eq!(session.allocate_packet_id(), u16::MAX);
        assert_eq!(session.allocate_packet_id(), 1);
    }
}
