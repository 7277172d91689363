//! One bridge's protocol state, sans-IO: it is fed packets from the peer
//! and from its own session at this broker, and the clock, and answers
//! with packets to send either way. It reads no clock and opens no socket,
//! so its rules are tested with simulated time.
//!
//! The bridge is MQTT clients joined together. At this broker each outbound
//! rule reads through an ordinary durable session of its own, so the
//! position in an `append` channel is that rule's, stored and resumed as
//! any consumer's is, and a record is acknowledged there only once the
//! peer has acknowledged it; one more session publishes what the peer
//! sends. At the peer
//! it is an ordinary client too: what arrives there is published into this
//! broker through its own publish path, and acknowledged to the peer only
//! once this broker has acknowledged it, that is once it is stored.

use std::collections::VecDeque;

use super::backoff::Backoff;
use super::settings::{fnv1a, BridgeSettings, Rule};
use super::template::{self, Unmappable};
use crate::codec::{
    Connect, Packet, ProtocolVersion, PubAck, Publish, QoS, ReasonCode, RetainHandling, Subscribe,
    SubscriptionOptions,
};

pub use crate::core::BRIDGED_MARK;
/// Labels of this broker's own a record loses on the way out: the far end
/// assigns its own offset and time. `saguin-id` crosses.
const LOCAL_LABELS: [&str; 3] = ["saguin-offset", "saguin-timestamp", "saguin-expires"];
/// How long a record the peer refused waits before it is offered again.
const REFUSED_RETRY_MS: u64 = 1_000;
/// The keepalive asked of the peer.
pub const PEER_KEEP_ALIVE_S: u16 = 30;
/// How long a connection attempt may wait for its CONNACK.
const CONNACK_TIMEOUT_MS: u64 = 10_000;
/// How often the bridge's lag is logged while records wait for the peer.
const LAG_LOG_INTERVAL_MS: u64 = 30_000;

/// What kind of record a delivery from this broker is, which decides what
/// the bridge does with it while the link is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carriage {
    /// An `append` record: held at its position until the peer takes it.
    Stored,
    /// A `latest` change: while down, only the newest per topic waits.
    Latest,
    /// Broadcast: crosses only while the link is up.
    Live,
}

/// One of the bridge's sessions at this broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    /// Publishes here what the peer sends; holds nothing between
    /// connections.
    Writer,
    /// Reads this broker's channels for the n-th outbound rule
    /// ([`BridgeSettings::readers`]), through a durable session whose
    /// positions are that rule's.
    Reader(usize),
}

/// What the link asks its shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    ToPeer(Packet),
    ToLocal(Local, Packet),
    /// End the peer connection; the shell then reports [`Link::peer_lost`].
    ClosePeer(&'static str),
}

/// Counters for the log, and for the metrics once there is a listener.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    pub sent: u64,
    pub received: u64,
    pub loops_skipped: u64,
    pub unsent_unmappable: u64,
    pub unsent_peer_refused: u64,
    pub unsent_live_down: u64,
    pub unsent_superseded: u64,
    /// QoS 0 records dropped because a window of them already waited.
    pub unsent_live_queue_full: u64,
    pub unstored_no_rule: u64,
    pub unstored_unmappable: u64,
    pub unstored_never_accepted: u64,
    pub unstored_queue_full: u64,
    pub duplicates_acknowledged: u64,
    pub reconnects: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerState {
    Down { since_ms: u64 },
    Connecting { since_ms: u64, down_since_ms: u64 },
    Up { receive_maximum: u16 },
}

/// A record read here, waiting for the peer to take it.
#[derive(Debug)]
struct Outbound {
    /// The reader that read it, which it is acknowledged to.
    reader: usize,
    /// Its packet identifier on the reader's session; `None` at QoS 0.
    local_id: Option<u16>,
    carriage: Carriage,
    /// As it goes to the peer, without a packet identifier.
    publish: Publish,
    /// Its identifier at the peer while it is in flight there.
    peer_id: Option<u16>,
    /// Its offset in its channel, for the log's lag.
    offset: Option<u64>,
    /// Not offered again before this time, after a refusal.
    retry_at_ms: u64,
}

/// A record from the peer, waiting for this broker to store it.
#[derive(Debug)]
struct Inbound {
    /// Its identifier at the peer; `None` at QoS 0.
    peer_id: Option<u16>,
    digest: u64,
    publish: Publish,
    /// Its identifier on the local session while it is being stored.
    local_id: Option<u16>,
    retry_at_ms: u64,
}

pub struct Link {
    settings: BridgeSettings,
    /// The outbound rules, indexed as [`Local::Reader`] is.
    readers: Vec<Rule>,
    classify: Box<dyn Fn(&str) -> Carriage>,
    peer: PeerState,
    /// MQTT 5 until the peer shows it speaks only 3.1.1.
    peer_version: ProtocolVersion,
    retain_available: bool,
    retain_cleared_logged: bool,
    /// Whether the current run of `live_queue_full` drops has been logged.
    live_full_logged: bool,
    local_up: bool,
    next_peer_id: u16,
    next_local_id: u16,
    last_peer_packet_ms: u64,
    last_ping_ms: u64,
    last_lag_log_ms: u64,
    /// The `saguin-offset` of the last record the peer took, for the log.
    last_taken_offset: Option<u64>,
    outbound: VecDeque<Outbound>,
    inbound: VecDeque<Inbound>,
    /// Identifiers of the peer's records stored and acknowledged, with a
    /// digest of each: a redelivery carrying DUP that matches one is
    /// acknowledged again rather than stored twice.
    settled: VecDeque<(u16, u64)>,
    acks_due: Vec<u16>,
    backoff: Backoff,
    pub stats: Stats,
}

impl Link {
    pub fn new(
        settings: BridgeSettings,
        classify: Box<dyn Fn(&str) -> Carriage>,
        seed: u64,
    ) -> Link {
        Link {
            readers: settings.readers().cloned().collect(),
            settings,
            classify,
            peer: PeerState::Down { since_ms: 0 },
            peer_version: ProtocolVersion::V5,
            retain_available: true,
            retain_cleared_logged: false,
            live_full_logged: false,
            local_up: false,
            next_peer_id: 0,
            next_local_id: 0,
            last_peer_packet_ms: 0,
            last_ping_ms: 0,
            last_lag_log_ms: 0,
            last_taken_offset: None,
            outbound: VecDeque::new(),
            inbound: VecDeque::new(),
            settled: VecDeque::new(),
            acks_due: Vec::new(),
            backoff: Backoff::new(seed),
            stats: Stats::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn settings(&self) -> &BridgeSettings {
        &self.settings
    }

    /// The version the peer's packets are read and written in.
    pub fn peer_version(&self) -> ProtocolVersion {
        self.peer_version
    }

    pub fn is_up(&self) -> bool {
        matches!(self.peer, PeerState::Up { .. })
    }

    /// Records read here and not yet taken by the peer: the bridge's lag
    /// beyond what still waits in the channels.
    pub fn waiting_out(&self) -> usize {
        self.outbound.len()
    }

    fn receive_maximum(&self) -> usize {
        usize::from(self.settings.receive_maximum)
    }

    /// Whether the peer's records waiting to be stored here fill the
    /// window: the shell stops reading the peer until they do not, which
    /// bounds them whatever the peer sends.
    pub fn inbound_full(&self) -> bool {
        self.inbound.len() >= self.receive_maximum()
    }

    // ----- this broker's side -------------------------------------------

    /// The bridge's sessions here and the CONNECT that opens each: the
    /// writer, then one reader per outbound rule, durable so that its
    /// positions outlive a restart, each windowed by `receive_maximum`.
    pub fn local_connects(&self) -> Vec<(Local, Packet)> {
        let connect = |client_id: String, durable: bool| {
            let mut connect = Connect {
                protocol_version: ProtocolVersion::V5,
                clean_start: !durable,
                keep_alive_s: 0,
                client_id,
                will: None,
                username: None,
                password: None,
                properties: Default::default(),
            };
            connect.properties.session_expiry_interval_s = Some(if durable { u32::MAX } else { 0 });
            connect.properties.receive_maximum = Some(self.settings.receive_maximum);
            Packet::Connect(Box::new(connect))
        };
        let mut sessions = vec![(
            Local::Writer,
            connect(self.settings.local_client_id(), false),
        )];
        for (n, rule) in self.readers.iter().enumerate() {
            let client_id = self.settings.reader_client_id(rule);
            sessions.push((Local::Reader(n), connect(client_id, true)));
        }
        sessions
    }

    pub fn local_packet(&mut self, from: Local, packet: Packet, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        match (from, packet) {
            (Local::Writer, Packet::Connack(connack)) if !connack.reason_code.is_error() => {
                self.local_up = true;
                self.pump_in(now_ms, &mut actions);
            }
            (Local::Reader(n), Packet::Connack(connack)) if !connack.reason_code.is_error() => {
                let rule = &self.readers[n];
                actions.push(Action::ToLocal(
                    from,
                    Packet::Subscribe(Subscribe {
                        packet_id: 1,
                        properties: Default::default(),
                        filters: vec![(rule.filter.clone(), local_subscription())],
                    }),
                ));
            }
            (_, Packet::Connack(connack)) => log::error!(
                "bridge {}: this broker refused the bridge's own session ({:#04x}); if it is 0x85, raise limits.max_client_id_length",
                self.settings.name,
                connack.reason_code.0
            ),
            (Local::Reader(n), Packet::Suback(suback)) => {
                let rule = &self.readers[n];
                match suback.reason_codes.iter().find(|c| c.is_error()) {
                    Some(code) => log::warn!(
                        "bridge {}: the out filter {:?} was refused here ({:#04x})",
                        self.settings.name,
                        rule.filter,
                        code.0
                    ),
                    None => log::info!(
                        "bridge {}: reading its out filter {:?} here as session {}",
                        self.settings.name,
                        rule.filter,
                        self.settings.reader_client_id(rule)
                    ),
                }
            }
            (Local::Reader(n), Packet::Publish(publish)) => {
                self.read_local(n, publish, now_ms, &mut actions)
            }
            (Local::Writer, Packet::Puback(ack)) => self.stored_locally(ack, now_ms, &mut actions),
            (Local::Writer, Packet::Disconnect(_)) => self.local_up = false,
            _ => {}
        }
        actions
    }

    /// A delivery to reader `reader`: carried, held, or acknowledged at once.
    fn read_local(
        &mut self,
        reader: usize,
        publish: Publish,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) {
        let local_id = publish.packet_id;
        let finish = |actions: &mut Vec<Action>| {
            if let Some(id) = local_id {
                actions.push(reader_ack(reader, id));
            }
        };
        if has_label(&publish, BRIDGED_MARK) {
            self.stats.loops_skipped += 1;
            return finish(actions);
        }
        let topic = match template::map(&self.readers[reader], &publish.topic) {
            Some(Ok(topic)) => topic,
            Some(Err(why)) => {
                self.stats.unsent_unmappable += 1;
                log::warn!(
                    "bridge {}: {:?} is not sent: {}",
                    self.settings.name,
                    publish.topic,
                    unmappable_text(why)
                );
                return finish(actions);
            }
            None => return finish(actions),
        };
        let carriage = (self.classify)(&publish.topic);
        if carriage == Carriage::Live && !self.is_up() {
            self.stats.unsent_live_down += 1;
            return finish(actions);
        }
        if local_id.is_none() && !self.room_for_qos0() {
            return;
        }
        let offset = label(&publish, "saguin-offset").and_then(|v| v.parse().ok());
        let mut outgoing = publish;
        outgoing.topic = topic;
        outgoing.packet_id = None;
        outgoing.dup = false;
        outgoing.properties.subscription_identifiers.clear();
        outgoing
            .properties
            .user_properties
            .retain(|(name, _)| !LOCAL_LABELS.contains(&name.as_str()));
        if carriage == Carriage::Latest {
            let older = self.outbound.iter().position(|o| {
                o.carriage == Carriage::Latest
                    && o.peer_id.is_none()
                    && o.publish.topic == outgoing.topic
            });
            if let Some(at) = older {
                let superseded = self.outbound.remove(at).expect("found above");
                self.stats.unsent_superseded += 1;
                if let Some(id) = superseded.local_id {
                    actions.push(reader_ack(superseded.reader, id));
                }
            }
        }
        self.outbound.push_back(Outbound {
            reader,
            local_id,
            carriage,
            publish: outgoing,
            peer_id: None,
            offset,
            retry_at_ms: 0,
        });
        self.pump_out(now_ms, actions);
    }

    /// Whether a QoS 0 delivery may wait for the peer. Nothing here
    /// windows them (only broadcast reaches a reader at QoS 0), so at most
    /// `receive_maximum` wait; past that one is dropped and counted, as
    /// a slow subscriber's QoS 0 broadcast is, rather than hold memory.
    fn room_for_qos0(&mut self) -> bool {
        let waiting = self
            .outbound
            .iter()
            .filter(|o| o.local_id.is_none())
            .count();
        if waiting < self.receive_maximum() {
            if self.live_full_logged {
                self.live_full_logged = false;
                log::info!(
                    "bridge {}: QoS 0 records wait for the peer again",
                    self.settings.name
                );
            }
            return true;
        }
        self.stats.unsent_live_queue_full += 1;
        if !self.live_full_logged {
            self.live_full_logged = true;
            log::warn!(
                "bridge {}: {waiting} QoS 0 records already wait for the peer; dropping more until they cross",
                self.settings.name
            );
        }
        false
    }

    /// This broker answered a record the bridge brought in.
    fn stored_locally(&mut self, ack: PubAck, now_ms: u64, actions: &mut Vec<Action>) {
        let Some(at) = self
            .inbound
            .iter()
            .position(|i| i.local_id == Some(ack.packet_id))
        else {
            return;
        };
        let code = ack.reason_code;
        if code.is_error() && !never_accepted(code) {
            // A full channel or a failing store can recover: offered again.
            let record = &mut self.inbound[at];
            record.local_id = None;
            record.retry_at_ms = now_ms + REFUSED_RETRY_MS;
            log::debug!(
                "bridge {}: {:?} refused here ({:#04x}); offered again",
                self.settings.name,
                record.publish.topic,
                code.0
            );
            return;
        }
        let record = self.inbound.remove(at).expect("found above");
        if code.is_error() {
            self.stats.unstored_never_accepted += 1;
            log::warn!(
                "bridge {}: {:?} from the peer can never be accepted here ({:#04x}); dropped",
                self.settings.name,
                record.publish.topic,
                code.0
            );
        } else {
            self.stats.received += 1;
        }
        if let Some(peer_id) = record.peer_id {
            self.settle(peer_id, record.digest);
        }
        self.pump_in(now_ms, actions);
    }

    fn settle(&mut self, peer_id: u16, digest: u64) {
        if self.settled.len() >= self.receive_maximum() {
            self.settled.pop_front();
        }
        self.settled.push_back((peer_id, digest));
        self.acks_due.push(peer_id);
    }

    // ----- the peer's side ----------------------------------------------

    /// The CONNECT for the next attempt at the peer.
    pub fn peer_connecting(&mut self, now_ms: u64) -> Packet {
        let down_since_ms = match self.peer {
            PeerState::Down { since_ms } => since_ms,
            PeerState::Connecting { down_since_ms, .. } => down_since_ms,
            PeerState::Up { .. } => now_ms,
        };
        self.peer = PeerState::Connecting {
            since_ms: now_ms,
            down_since_ms,
        };
        log::debug!(
            "bridge {}: dialling {} (MQTT {})",
            self.settings.name,
            self.settings.peer.address(),
            if self.peer_version == ProtocolVersion::V5 {
                "5"
            } else {
                "3.1.1"
            }
        );
        let mut connect = Connect {
            protocol_version: self.peer_version,
            clean_start: false,
            keep_alive_s: PEER_KEEP_ALIVE_S,
            client_id: self.settings.client_id.clone(),
            will: None,
            username: self.settings.username.clone(),
            password: self.settings.password.clone().map(String::into_bytes),
            properties: Default::default(),
        };
        connect.properties.session_expiry_interval_s = Some(self.settings.session_expiry_s);
        connect.properties.receive_maximum = Some(self.settings.receive_maximum);
        Packet::Connect(Box::new(connect))
    }

    /// The link is gone, or an attempt failed: how long to wait before
    /// the next one. A peer that answered MQTT 5 with no CONNACK it could
    /// read is dialled again at once in 3.1.1.
    /// The actions acknowledge here the live records the outage dropped.
    pub fn peer_lost(&mut self, now_ms: u64, why: &str) -> (u64, Vec<Action>) {
        let mut actions = Vec::new();
        // Acknowledgements owed on the old connection are owed no more: the
        // peer redelivers those records marked DUP, and they are answered
        // from `settled`. What is in flight outward goes again on the next.
        self.acks_due.clear();
        let mut kept = VecDeque::with_capacity(self.outbound.len());
        for record in self.outbound.drain(..) {
            if record.carriage != Carriage::Live {
                kept.push_back(record);
                continue;
            }
            self.stats.unsent_live_down += 1;
            if let Some(id) = record.local_id {
                actions.push(reader_ack(record.reader, id));
            }
        }
        self.outbound = kept;
        match self.peer {
            PeerState::Up { .. } => {
                self.stats.reconnects += 1;
                log::warn!(
                    "bridge {}: link to {} down ({why}); {} records read here wait for it",
                    self.settings.name,
                    self.settings.peer.address(),
                    self.outbound.len()
                );
                self.peer = PeerState::Down { since_ms: now_ms };
            }
            PeerState::Connecting { down_since_ms, .. } => {
                log::debug!("bridge {}: attempt failed: {why}", self.settings.name);
                self.peer = PeerState::Down {
                    since_ms: down_since_ms,
                };
            }
            PeerState::Down { .. } => {}
        }
        (self.backoff.next_wait_ms(), actions)
    }

    fn fall_back_to_311(&mut self, why: &str) -> bool {
        if self.peer_version != ProtocolVersion::V5 {
            return false;
        }
        log::info!(
            "bridge {}: the peer does not speak MQTT 5 ({why}); speaking 3.1.1 to it",
            self.settings.name
        );
        self.peer_version = ProtocolVersion::V311;
        true
    }

    /// A connection attempt ended before a CONNACK could be read. Returns
    /// whether to dial again at once in 3.1.1.
    pub fn peer_unreadable_before_connack(&mut self) -> bool {
        matches!(self.peer, PeerState::Connecting { .. })
            && self.fall_back_to_311("it answered a CONNECT in another version")
    }

    pub fn peer_packet(&mut self, packet: Packet, now_ms: u64) -> Vec<Action> {
        self.last_peer_packet_ms = now_ms;
        let mut actions = Vec::new();
        match packet {
            Packet::Connack(connack) => self.connected(connack, now_ms, &mut actions),
            Packet::Publish(publish) => self.received(publish, now_ms, &mut actions),
            Packet::Puback(ack) => self.taken(ack, now_ms, &mut actions),
            Packet::Suback(suback) => {
                for code in suback.reason_codes.iter().filter(|c| c.is_error()) {
                    log::warn!(
                        "bridge {}: the peer refused an in filter ({:#04x})",
                        self.settings.name,
                        code.0
                    );
                }
            }
            Packet::Pubrec(ack) => {
                // Records go out at QoS 1 at most; a PUBREC names nothing sent.
                actions.push(Action::ToPeer(Packet::Pubrel(PubAck {
                    packet_id: ack.packet_id,
                    reason_code: ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
                    properties: Default::default(),
                })));
            }
            Packet::Disconnect(_) => actions.push(Action::ClosePeer("the peer disconnected")),
            _ => {}
        }
        actions
    }

    fn connected(
        &mut self,
        connack: crate::codec::Connack,
        now_ms: u64,
        actions: &mut Vec<Action>,
    ) {
        let code = connack.reason_code;
        let old_version = matches!(
            code,
            ReasonCode::UNSUPPORTED_PROTOCOL_VERSION | ReasonCode(0x01)
        );
        if code.is_error() || code.0 != 0 {
            if old_version && self.fall_back_to_311("CONNACK refused the protocol version") {
                actions.push(Action::ClosePeer("falling back to MQTT 3.1.1"));
            } else {
                log::warn!(
                    "bridge {}: the peer refused the connection ({:#04x})",
                    self.settings.name,
                    code.0
                );
                actions.push(Action::ClosePeer("refused by the peer"));
            }
            return;
        }
        let down_ms = match self.peer {
            PeerState::Connecting { down_since_ms, .. } => now_ms.saturating_sub(down_since_ms),
            _ => 0,
        };
        let peer_max = connack.properties.receive_maximum.unwrap_or(u16::MAX);
        self.retain_available = connack.properties.retain_available != Some(0);
        self.peer = PeerState::Up {
            receive_maximum: peer_max.min(self.settings.receive_maximum).max(1),
        };
        self.backoff.reset();
        self.last_ping_ms = now_ms;
        log::warn!(
            "bridge {}: link to {} up (MQTT {}, session {}) after {} ms down; {} records read here waiting",
            self.settings.name,
            self.settings.peer.address(),
            if self.peer_version == ProtocolVersion::V5 { "5" } else { "3.1.1" },
            if connack.session_present { "resumed" } else { "new" },
            down_ms,
            self.outbound.len()
        );
        if !connack.session_present {
            let filters: Vec<(String, SubscriptionOptions)> = self
                .settings
                .rules
                .iter()
                .filter(|r| r.direction.carries_in())
                .map(|r| (r.filter.clone(), peer_subscription()))
                .collect();
            if !filters.is_empty() {
                actions.push(Action::ToPeer(Packet::Subscribe(Subscribe {
                    packet_id: self.peer_id(),
                    properties: Default::default(),
                    filters,
                })));
            }
        }
        // What was in flight goes again first, in its order, marked DUP.
        let retain_ok = self.retain_available;
        for record in self.outbound.iter_mut().filter(|o| o.peer_id.is_some()) {
            let mut publish = record.publish.clone();
            publish.packet_id = record.peer_id;
            publish.dup = true;
            publish.retain &= retain_ok;
            actions.push(Action::ToPeer(Packet::Publish(publish)));
        }
        self.pump_out(now_ms, actions);
    }

    /// A record from the peer: stored here before it is acknowledged there.
    fn received(&mut self, publish: Publish, now_ms: u64, actions: &mut Vec<Action>) {
        let peer_id = publish.packet_id;
        let digest = digest(&publish);
        if let Some(id) = peer_id {
            if self.inbound.iter().any(|i| i.peer_id == Some(id)) {
                // Already waiting to be stored: its acknowledgement follows.
                return;
            }
            if publish.dup && self.settled.contains(&(id, digest)) {
                self.stats.duplicates_acknowledged += 1;
                self.acks_due.push(id);
                return;
            }
        }
        let mapped = self
            .settings
            .rules
            .iter()
            .filter(|r| r.direction.carries_in())
            .find_map(|r| template::map(r, &publish.topic));
        let topic = match mapped {
            Some(Ok(topic)) => topic,
            other => {
                match other {
                    None => self.stats.unstored_no_rule += 1,
                    _ => self.stats.unstored_unmappable += 1,
                }
                log::warn!(
                    "bridge {}: {:?} from the peer is not stored: {}",
                    self.settings.name,
                    publish.topic,
                    match other {
                        Some(Err(why)) => unmappable_text(why),
                        _ => "no rule covers it",
                    }
                );
                if let Some(id) = peer_id {
                    self.acks_due.push(id);
                }
                return;
            }
        };
        if peer_id.is_none() && self.inbound_full() {
            self.stats.unstored_queue_full += 1;
            return;
        }
        let mut local = publish;
        local.topic = topic;
        local.dup = false;
        local.qos = QoS::AtLeastOnce;
        local.properties.topic_alias = None;
        local.properties.subscription_identifiers.clear();
        let labels = &mut local.properties.user_properties;
        labels.retain(|(name, _)| !name.starts_with("saguin-") || name == "saguin-id");
        labels.push((BRIDGED_MARK.into(), self.settings.name.clone()));
        self.inbound.push_back(Inbound {
            peer_id,
            digest,
            publish: local,
            local_id: None,
            retry_at_ms: 0,
        });
        self.pump_in(now_ms, actions);
    }

    /// The peer acknowledged a record sent from here.
    fn taken(&mut self, ack: PubAck, now_ms: u64, actions: &mut Vec<Action>) {
        let Some(at) = self
            .outbound
            .iter()
            .position(|o| o.peer_id == Some(ack.packet_id))
        else {
            return;
        };
        if ack.reason_code.is_error() {
            let record = &mut self.outbound[at];
            record.peer_id = None;
            record.retry_at_ms = now_ms + REFUSED_RETRY_MS;
            self.stats.unsent_peer_refused += 1;
            log::warn!(
                "bridge {}: the peer refused {:?} ({:#04x}); offered again",
                self.settings.name,
                record.publish.topic,
                ack.reason_code.0
            );
        } else {
            let record = self.outbound.remove(at).expect("found above");
            self.stats.sent += 1;
            self.last_taken_offset = record.offset.or(self.last_taken_offset);
            if let Some(id) = record.local_id {
                actions.push(reader_ack(record.reader, id));
            }
        }
        self.pump_out(now_ms, actions);
    }

    /// Acknowledgements due to the peer, keepalive, and the records whose
    /// retry time has come. Called every `ack_interval`.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        match self.peer {
            PeerState::Up { .. } => {
                for id in self.acks_due.drain(..) {
                    actions.push(Action::ToPeer(puback(id, ReasonCode::SUCCESS)));
                }
                let keepalive_ms = u64::from(PEER_KEEP_ALIVE_S) * 1000;
                if now_ms.saturating_sub(self.last_peer_packet_ms) > keepalive_ms * 3 / 2 {
                    actions.push(Action::ClosePeer("the peer went quiet"));
                    return actions;
                }
                if now_ms.saturating_sub(self.last_ping_ms) >= keepalive_ms / 2 {
                    self.last_ping_ms = now_ms;
                    actions.push(Action::ToPeer(Packet::Pingreq));
                }
                self.pump_out(now_ms, &mut actions);
            }
            PeerState::Connecting { since_ms, .. }
                if now_ms.saturating_sub(since_ms) > CONNACK_TIMEOUT_MS =>
            {
                actions.push(Action::ClosePeer("no CONNACK in time"));
            }
            _ => {}
        }
        self.pump_in(now_ms, &mut actions);
        self.log_lag(now_ms);
        actions
    }

    /// While records wait for the peer, says so now and then: how many
    /// are read here and not taken, and the offset the peer last took.
    fn log_lag(&mut self, now_ms: u64) {
        if self.outbound.is_empty()
            || now_ms.saturating_sub(self.last_lag_log_ms) < LAG_LOG_INTERVAL_MS
        {
            return;
        }
        self.last_lag_log_ms = now_ms;
        log::info!(
            "bridge {}: link {}; {} records read here wait for the peer; last taken offset {}; {} sent since start",
            self.settings.name,
            if self.is_up() { "up" } else { "down" },
            self.outbound.len(),
            self.last_taken_offset
                .map_or_else(|| "none".to_string(), |o| o.to_string()),
            self.stats.sent
        );
    }

    /// Sends what the window allows: one record in flight per topic, and
    /// no more in all than the smaller of the two Receive Maximums.
    fn pump_out(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        let PeerState::Up { receive_maximum } = self.peer else {
            return;
        };
        let mut in_flight = self
            .outbound
            .iter()
            .filter(|o| o.peer_id.is_some() && o.publish.qos != QoS::AtMostOnce)
            .count();
        let mut busy: Vec<String> = self
            .outbound
            .iter()
            .filter(|o| o.peer_id.is_some())
            .map(|o| o.publish.topic.clone())
            .collect();
        let mut at = 0;
        while at < self.outbound.len() && in_flight < usize::from(receive_maximum) {
            let record = &self.outbound[at];
            let waiting = record.peer_id.is_none()
                && record.retry_at_ms <= now_ms
                && !busy.contains(&record.publish.topic);
            if !waiting {
                if record.peer_id.is_none() {
                    // A topic's later records wait behind its earlier one.
                    busy.push(record.publish.topic.clone());
                }
                at += 1;
                continue;
            }
            let mut publish = record.publish.clone();
            if publish.retain && !self.retain_available {
                publish.retain = false;
                if !self.retain_cleared_logged {
                    self.retain_cleared_logged = true;
                    log::warn!(
                        "bridge {}: the peer holds no retained messages; the flag is cleared on what crosses",
                        self.settings.name
                    );
                }
            }
            if publish.qos == QoS::AtMostOnce {
                let record = self.outbound.remove(at).expect("indexed above");
                if let Some(id) = record.local_id {
                    actions.push(reader_ack(record.reader, id));
                }
                self.stats.sent += 1;
                actions.push(Action::ToPeer(Packet::Publish(publish)));
                continue;
            }
            publish.qos = QoS::AtLeastOnce;
            let id = self.peer_id();
            publish.packet_id = Some(id);
            let record = &mut self.outbound[at];
            record.peer_id = Some(id);
            record.publish.qos = QoS::AtLeastOnce;
            busy.push(record.publish.topic.clone());
            in_flight += 1;
            actions.push(Action::ToPeer(Packet::Publish(publish)));
            at += 1;
        }
    }

    /// Publishes the peer's records here, in order, one at a time: each
    /// waits for this broker's answer before the next goes.
    fn pump_in(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        if !self.local_up || self.inbound.iter().any(|i| i.local_id.is_some()) {
            return;
        }
        let Some(first) = self.inbound.front() else {
            return;
        };
        if first.retry_at_ms > now_ms {
            return;
        }
        self.next_local_id = self.next_local_id % u16::MAX + 1;
        let id = self.next_local_id;
        let record = self.inbound.front_mut().expect("checked above");
        record.local_id = Some(id);
        let mut publish = record.publish.clone();
        publish.packet_id = Some(id);
        actions.push(Action::ToLocal(Local::Writer, Packet::Publish(publish)));
    }

    fn peer_id(&mut self) -> u16 {
        loop {
            self.next_peer_id = self.next_peer_id % u16::MAX + 1;
            let id = self.next_peer_id;
            if !self.outbound.iter().any(|o| o.peer_id == Some(id)) {
                return id;
            }
        }
    }
}

fn local_subscription() -> SubscriptionOptions {
    SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        no_local: true,
        retain_as_published: true,
        // A bridge carries records as they are written, never a stored pass.
        retain_handling: RetainHandling::DoNotSend,
    }
}

fn peer_subscription() -> SubscriptionOptions {
    SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        no_local: true,
        retain_as_published: true,
        retain_handling: RetainHandling::SendAlways,
    }
}

/// Tells a reader's session here its delivery is finished with.
fn reader_ack(reader: usize, packet_id: u16) -> Action {
    Action::ToLocal(
        Local::Reader(reader),
        puback(packet_id, ReasonCode::SUCCESS),
    )
}

fn puback(packet_id: u16, reason_code: ReasonCode) -> Packet {
    Packet::Puback(PubAck {
        packet_id,
        reason_code,
        properties: Default::default(),
    })
}

fn has_label(publish: &Publish, name: &str) -> bool {
    label(publish, name).is_some()
}

fn label<'a>(publish: &'a Publish, name: &str) -> Option<&'a str> {
    publish
        .properties
        .user_properties
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Refusals no retry can turn into an acceptance.
fn never_accepted(code: ReasonCode) -> bool {
    matches!(
        code,
        ReasonCode::TOPIC_NAME_INVALID
            | ReasonCode::PACKET_TOO_LARGE
            | ReasonCode::PAYLOAD_FORMAT_INVALID
            | ReasonCode::PROTOCOL_ERROR
            | ReasonCode::NOT_AUTHORIZED
    )
}

fn unmappable_text(why: Unmappable) -> &'static str {
    match why {
        Unmappable::Empty => "its rule leaves no topic (a # matched nothing)",
        Unmappable::Reserved => "its rule makes a topic in the reserved $ space",
    }
}

/// FNV-1a over topic and payload: enough to tell a redelivery from a new
/// record that reuses a packet identifier.
fn digest(publish: &Publish) -> u64 {
    fnv1a(
        publish
            .topic
            .bytes()
            .chain([0u8])
            .chain(publish.payload.iter().copied()),
    )
}

#[cfg(test)]
mod tests;
