//! The broker's rules as a sans-IO state machine.
//!
//! The core is fed events - a connection accepted, a packet decoded, a
//! connection lost, a tick with the current time - and answers through a
//! [`Transport`]: packets to send and connections to close. It reads no
//! clock, opens no socket and spawns nothing, so the same code runs under a
//! deterministic test with simulated time and under the smol shell.

pub mod broadcast;
mod broker;
pub mod channel;
pub mod connection;
pub mod message;
pub mod observe;
pub mod partition;
pub mod refusal;
pub mod refusal_counts;
pub mod session;
pub mod slab;
#[cfg(test)]
mod tests;
mod timer;

use std::sync::Arc;

use crate::codec::{
    Connack, DecodeError, Disconnect, Packet, Properties, ProtocolVersion, ReasonCode, Subscribe,
    Unsubscribe,
};
use crate::fast_hash::FastHashMap;
use crate::store::{ReadLimit, Write};
pub use broadcast::log::{read_log, LogAtStart, BROADCAST_SPACE};
pub use broadcast::qos2_holds::{is_hold_key, StoredHold};
pub use broadcast::retained::RETAINED_SPACE;
use broadcast::topic_index::{Matched, TopicIndex};
pub use broker::persist::SESSIONS_SPACE;
/// The User Property a bridge's publish keeps, stored with the record:
/// a record carrying it never leaves over a bridge.
pub const BRIDGED_MARK: &str = "saguin-bridged";
/// The client ids a bridge's own sessions hold (`saguin-bridge/<name>...`);
/// an ordinary client is refused one, so a session holding one is a bridge's.
pub const BRIDGE_CLIENT_ID_PREFIX: &str = "saguin-bridge/";

/// Whether `client_id` is one of a bridge's own sessions.
pub(crate) fn is_bridge_client_id(client_id: &str) -> bool {
    client_id.starts_with(BRIDGE_CLIENT_ID_PREFIX)
}
pub use channel::{ChannelSettings, ChannelStart};
// The paths the network shell and the configuration name channel kinds by.
pub use channel::queue::dead_letter;
pub use channel::queue::rules as queue_rules;
pub use channel::{claims, latest, load as channel_load, queue};
pub use connection::origin::{Introduction, Origin, Source};
use connection::{Active, Connection};
pub use refusal::Refusal;
pub use session::table::ClientIdKey;
pub use slab::Key;
use slab::Slab;

/// Topic aliases a client may register with the broker on one connection.
/// Sixteen bounds the table at sixteen topics per connection.
pub const TOPIC_ALIAS_MAXIMUM: u16 = 16;

/// How the core's answers leave it. Implemented by the network shell, and by
/// tests that record what the broker said.
pub trait Transport {
    /// Queues `packet` for `conn`. A `droppable` packet (a QoS 0 broadcast)
    /// may be refused when the connection's outbound buffer is full; the
    /// return value says whether it was queued. Any other packet is always
    /// queued.
    fn send(
        &mut self,
        conn: Key,
        version: ProtocolVersion,
        packet: &Packet,
        droppable: bool,
    ) -> bool;

    /// Closes `conn` once what was queued for it has been written.
    fn close(&mut self, conn: Key);

    /// Hands a request to provider `provider`'s storage thread; its answer
    /// comes back through [`Broker::handle_store_completion`]. False when the
    /// thread cannot take it now: the request was not queued.
    fn store(&mut self, provider: usize, request: StoreRequest) -> bool;
}

/// What follows a session write once it is answered.
pub(crate) enum Then {
    Connack {
        conn: Key,
        session: Key,
        connack: Box<Connack>,
        /// The session was made by this CONNECT: a refusal ends it.
        made: bool,
    },
    Subscribe {
        conn: Key,
        subscribe: Subscribe,
    },
    Unsubscribe {
        conn: Key,
        unsubscribe: Unsubscribe,
    },
    Disconnect {
        conn: Key,
        disconnect: Disconnect,
    },
    /// Nobody waits: a refusal is written again.
    Background {
        client_id: Box<str>,
    },
    /// A retained publish, routed and acknowledged once its value is kept.
    Retained(Box<crate::core::broker::retained_writes::RetainedWrite>),
    /// A retained value's change nobody waits on.
    RetainedBehind {
        topic: Box<str>,
    },
    /// A QoS 1 broadcast waiting on its log write.
    Logged(Box<crate::core::broadcast::log::LoggedPublish>),
    /// An exactly-once publish's hold, or its release.
    Hold(Box<crate::core::broker::exactly_once::HoldThen>),
    /// The cursors and windows stored at an interval: nobody waits, and
    /// a failure has them written again at the next.
    Cursors,
    /// The drops of an ended session's cursor and window, alone.
    LogEnded {
        client_id: Box<str>,
    },
    /// Deliveries waiting on the window that names them.
    Window {
        session: Key,
    },
    /// A PUBREL waiting on the window that records its PUBREC.
    Pubrel {
        conn: Key,
        reply: crate::codec::PubAck,
    },
}

/// How a session write came back.
pub(crate) enum Written {
    Stored,
    Full,
    Failed,
}

/// What the core asks of a provider's storage thread.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreRequest {
    Commit {
        ticket: u64,
        writes: Vec<Write>,
    },
    Read {
        ticket: u64,
        channel: String,
        from_offset: u64,
        limit: ReadLimit,
    },
    Position {
        ticket: u64,
        channel: String,
        reader: String,
    },
    /// The earliest offset received at or after a moment, for a seek.
    FirstAtOrAfter {
        ticket: u64,
        channel: String,
        at_unix_ms: u64,
    },
}

/// The limits the core enforces, taken from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub max_connections: u32,
    pub max_message_size_bytes: u32,
    pub max_connect_size_bytes: u32,
    pub max_topic_length: u32,
    pub max_topic_levels: u32,
    pub max_client_id_length: u32,
    pub max_header_count: u32,
    pub max_header_bytes: u32,
    pub max_subscriptions: u32,
    /// Most sessions kept past their connections at once.
    pub max_persistent_sessions: u32,
    /// Most shared groups held at once.
    pub max_shared_groups: u32,
    pub max_session_expiry_s: u32,
    pub max_keepalive_s: Option<u16>,
    pub connect_timeout_ms: u64,
    pub session_queue_bytes: u64,
    pub publish_rate_per_s: Option<u32>,
    pub publish_bytes_per_s: Option<u64>,
    pub min_protocol_version: ProtocolVersion,
    /// Exactly-once publishes one client may hold unreleased.
    pub qos2_max_inflight_per_client: u32,
    /// How long an unreleased exactly-once publish is held.
    pub qos2_expires_after_ms: u64,
    /// The retained store's bound, until it lives on a storage provider.
    pub retained_max_bytes: u64,
    /// The Unix time in milliseconds when the core's clock read 0: the
    /// core's clock is monotonic, and a record's timestamp is wall time.
    pub start_unix_ms: u64,
    /// Unfinished inbound QoS 2 exchanges the CONNACK allows a client;
    /// 65,535 is MQTT's default and is not sent.
    pub receive_maximum: u16,
    /// How long a shared group's backlog keeps a message; `None` for as
    /// long as a member could collect it.
    pub share_expires_after_ms: Option<u64>,
    /// The `append` channels, in configuration order.
    pub channels: Vec<ChannelSettings>,
    /// How often moved consumer positions are stored.
    pub ack_commit_interval_ms: u64,
    /// The provider that keeps session records, if one is named.
    pub session_provider: Option<usize>,
    /// The provider that keeps retained values, if one is named.
    pub retained_provider: Option<usize>,
    /// How long a retained value is kept after it was set.
    pub retained_retention_period_s: Option<u64>,
    /// The bound on what sessions are charged (`session::charge`): a
    /// session outlives its connection, and a filter is taken, only
    /// within it. The session store's provider's `max_bytes`.
    pub session_memory_max_bytes: u64,
    /// What assigned client ids are derived from; the shell draws it from
    /// the operating system at every start.
    pub client_id_key: ClientIdKey,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_connections: 10_000,
            max_message_size_bytes: 1024 * 1024,
            max_connect_size_bytes: 100 * 1024,
            max_topic_length: 1024,
            max_topic_levels: 200,
            max_client_id_length: 256,
            max_header_count: 32,
            max_header_bytes: 8 * 1024,
            max_subscriptions: 10_000,
            max_persistent_sessions: 10_000,
            max_shared_groups: 1_000,
            max_session_expiry_s: 30 * 24 * 3600,
            max_keepalive_s: None,
            connect_timeout_ms: 10_000,
            session_queue_bytes: 1024 * 1024,
            publish_rate_per_s: None,
            publish_bytes_per_s: None,
            min_protocol_version: ProtocolVersion::V311,
            qos2_max_inflight_per_client: 20,
            qos2_expires_after_ms: 5 * 60 * 1000,
            retained_max_bytes: 8 * 1024 * 1024,
            receive_maximum: u16::MAX,
            share_expires_after_ms: None,
            start_unix_ms: 0,
            channels: Vec::new(),
            ack_commit_interval_ms: 200,
            session_provider: None,
            retained_provider: None,
            retained_retention_period_s: None,
            session_memory_max_bytes: session::charge::DEFAULT_SESSION_MEMORY_BYTES,
            client_id_key: Default::default(),
        }
    }
}

/// Counters an operator reads to see what the broker refused or dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub connections_accepted: u64,
    pub connections_refused_busy: u64,
    pub publishes_received: u64,
    pub publishes_refused: u64,
    pub publishes_rate_limited: u64,
    pub deliveries_sent: u64,
    /// QoS 0 broadcasts shed because the connection's buffer was full.
    pub deliveries_dropped: u64,
    /// Deliveries a session gave up or was refused at `session_queue_bytes`.
    pub session_queue_full: u64,
    /// Deliveries over the receiving client's Maximum Packet Size.
    pub deliveries_too_large: u64,
    /// Deliveries whose Message Expiry Interval ran out before they were sent.
    pub deliveries_expired: u64,
    pub qos2_abandoned: u64,
    /// Shared-group messages no member could take and none could hold.
    pub shared_dropped: u64,
    /// Messages a shared group's backlog gave up at its bound or its end.
    pub shared_backlog_dropped: u64,
    /// Retained publishes refused because the retained store was full.
    pub retained_refused: u64,
    /// Sessions told at CONNECT that they end with their connection, the
    /// session store having no room for their record.
    pub sessions_dropped_storage_full: u64,
    /// Sessions told at CONNECT that they end with their connection,
    /// `limits.max_persistent_sessions` being kept already.
    pub sessions_dropped_persistent_full: u64,
    /// Broadcast log messages given up, or never kept, for want of room.
    pub log_dropped: u64,
    /// Retain flags dropped from publishes into a queue, whose jobs are
    /// work rather than values to keep.
    pub queue_retain_ignored: u64,
    // What the operations listener's catalogue reads beside the above.
    /// Publishes refused, by the reason their client was answered with.
    pub publish_refused: refusal_counts::ReasonCounts,
    /// Connections refused at CONNECT or ended for a refusal, by reason;
    /// `server busy` sockets are `connections_refused_busy`.
    pub connections_refused: refusal_counts::ReasonCounts,
    /// Topic filters a SUBACK refused, by reason.
    pub subscriptions_refused: refusal_counts::ReasonCounts,
    /// Broadcast deliveries refused because the session already held
    /// `session_queue_bytes` unacknowledged.
    pub deliveries_refused: u64,
    /// Bytes read from and written to MQTT connections.
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// Deliveries put on a shared group's backlog, and handed from it.
    pub shares_held: u64,
    pub shares_drained: u64,
    /// Backlogged shared deliveries dropped: at their bound, with the last
    /// member gone, past `broker.share.expires_after`, and QoS 2 ones a
    /// member's ending took with it.
    pub shares_dropped_backlog_full: u64,
    pub shares_dropped_no_member_left: u64,
    pub shares_dropped_expired: u64,
    pub shares_dropped_member_ended: u64,
}

impl Stats {
    /// A publish refused by `refusal`.
    pub(crate) fn count_publish_refusal(&mut self, refusal: Refusal) {
        self.publishes_refused += 1;
        self.publish_refused.count(refusal);
    }
}

pub struct Broker {
    pub(crate) settings: Settings,
    pub(crate) connections: Slab<Connection>,
    pub(crate) sessions: session::table::Sessions,
    pub(crate) index: TopicIndex,
    pub(crate) stats: Stats,
    pub(crate) budgets: connection::budget::PublishBudgets,
    pub(crate) retained: broadcast::retained::RetainedStore,
    pub(crate) groups: broadcast::shared::SharedGroups,
    pub(crate) channels: Vec<channel::Channel>,
    pub(crate) claims: channel::claims::Claims,
    pub(crate) readers: Slab<channel::Reader>,
    pub(crate) latest_readers: Slab<channel::latest::reader::LatestReader>,
    /// Storage requests in flight, by ticket.
    pub(crate) pending: FastHashMap<u64, channel::Pending>,
    /// By connection, how many of them owe it a reply (`broker/replies.rs`).
    pub(crate) replies_owed: FastHashMap<Key, u32>,
    pub(crate) position_duties: channel::positions::PositionDuties,
    /// Channel records owed to durable shared groups, waiting on their log
    /// write, with their publisher's answer; bounded by the publishes
    /// waiting on storage.
    pub(crate) records_for_groups: FastHashMap<u64, channel::RecordForGroups>,
    pub(crate) next_ticket: u64,
    /// What publishes waiting on storage hold, against its bound.
    pub(crate) pending_publish_bytes: u64,
    pub(crate) id_generator: crate::store::MessageIdGenerator,
    timers: timer::Timers,
    /// Reused by routing so that a publish allocates no match list.
    pub(crate) match_scratch: Vec<Matched>,
    /// Session records in the session provider.
    pub(crate) persist: broker::persist::Persistence,
    pub(crate) queues: channel::queue::Queues,
    /// What only the operations listener reads.
    pub(crate) tallies: observe::Tallies,
    /// Who may connect; replaced whole on a reload.
    pub(crate) authentication: Arc<crate::auth::Authentication>,
    /// The authorization file in force and each session's grants.
    pub(crate) authorization: broker::authorize::Authorization,
}

impl Broker {
    pub fn new(mut settings: Settings) -> Broker {
        let max_connections = settings.max_connections as usize;
        // Takes the job heads out of the settings, which are kept.
        let queues = channel::queue::Queues::new(&mut settings.channels, settings.start_unix_ms);
        Broker {
            connections: Slab::with_capacity(max_connections),
            sessions: session::table::Sessions::new(
                settings.session_memory_max_bytes,
                settings.client_id_key.clone(),
            ),
            index: TopicIndex::new(),
            stats: Stats::default(),
            budgets: connection::budget::PublishBudgets::new(
                settings.publish_rate_per_s,
                settings.publish_bytes_per_s,
            ),
            retained: broadcast::retained::RetainedStore::new(settings.retained_max_bytes),
            groups: broadcast::shared::SharedGroups::new(),
            channels: settings
                .channels
                .iter_mut()
                .map(channel::latest::moved_out)
                .map(channel::Channel::new)
                .collect(),
            claims: claims_for(&settings.channels),
            queues,
            readers: Slab::growable(u32::MAX as usize),
            latest_readers: Slab::growable(u32::MAX as usize),
            pending: FastHashMap::default(),
            replies_owed: FastHashMap::default(),
            position_duties: Default::default(),
            records_for_groups: FastHashMap::default(),
            next_ticket: 0,
            pending_publish_bytes: 0,
            id_generator: crate::store::MessageIdGenerator::with_seed(settings.start_unix_ms),
            timers: timer::Timers::new(
                settings.ack_commit_interval_ms,
                settings
                    .channels
                    .iter()
                    .flat_map(|c| [c.retention_period_s, channel::latest::deletion_period_s(c)])
                    .flatten()
                    .min(),
            ),
            match_scratch: Vec::new(),
            persist: broker::persist::Persistence::default(),
            tallies: observe::Tallies::new(settings.channels.len()),
            authentication: Arc::default(),
            authorization: Default::default(),
            settings,
        }
    }

    /// Wall time for a reading of the core's monotonic clock.
    pub(crate) fn unix_ms(&self, now_ms: u64) -> u64 {
        self.settings.start_unix_ms.saturating_add(now_ms)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn connection_count(&self) -> usize {
        self.connections.len()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Takes a slot in the connection table for a new socket, or `None`
    /// when every slot is taken.
    pub fn accept(&mut self, now_ms: u64, origin: Origin) -> Option<Key> {
        self.accept_as(now_ms, origin, false)
    }

    /// [`Broker::accept`] for a bridge's in-process session. It is the
    /// broker's own, so it arrives on no door: no door's password file or
    /// certificate rule applies, and the ACL lets it through.
    pub fn accept_bridge(&mut self, now_ms: u64) -> Option<Key> {
        self.accept_as(now_ms, Origin::default(), true)
    }

    fn accept_as(&mut self, now_ms: u64, origin: Origin, bridge: bool) -> Option<Key> {
        let key = self.connections.insert_with(|_| Connection {
            heard_ms: now_ms,
            active: None,
            bridge,
            origin,
            user: None,
            checked: None,
        });
        match key {
            Some(_) => self.stats.connections_accepted += 1,
            None => self.stats.connections_refused_busy += 1,
        }
        debug_assert!(self.connections.len() <= self.settings.max_connections as usize);
        key
    }

    /// The CONNACK that turns away a connection for which no slot is free.
    pub fn busy_connack() -> Packet {
        Packet::Connack(crate::codec::Connack {
            session_present: false,
            reason_code: Refusal::ServerBusy.code(),
            properties: Properties::default(),
        })
    }

    /// The protocol version a connection has settled on, once its CONNECT
    /// has been accepted; what its later packets are decoded as.
    pub fn version(&self, conn: Key) -> Option<ProtocolVersion> {
        self.connections
            .get(conn)?
            .active
            .as_ref()
            .map(|active| active.version)
    }

    pub fn is_open(&self, conn: Key) -> bool {
        self.connections.contains(conn)
    }

    /// The largest packet `conn` may send next: `max_connect_size` until its
    /// CONNECT is accepted, `max_message_size` after.
    pub fn inbound_limit_bytes(&self, conn: Key) -> u32 {
        match self.connections.get(conn) {
            Some(Connection {
                active: Some(_), ..
            }) => self.settings.max_message_size_bytes,
            _ => self.settings.max_connect_size_bytes,
        }
    }

    /// A packet decoded from `conn`.
    pub fn handle_packet(
        &mut self,
        conn: Key,
        packet: Packet,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(connection) = self.connections.get_mut(conn) else {
            return;
        };
        if connection.active.is_some() {
            connection.heard_ms = now_ms;
        } else {
            match packet {
                Packet::Connect(connect) => {
                    self.handle_connect(conn, *connect, now_ms, out);
                    // Accepted: the keepalive counts from this CONNECT.
                    // Refused: the connect timeout still counts from the
                    // accept, as for a client that sent nothing.
                    if let Some(accepted) = self.connections.get_mut(conn) {
                        if accepted.active.is_some() {
                            accepted.heard_ms = now_ms;
                        }
                    }
                }
                // The decoder refuses anything else before CONNECT.
                _ => self.close_silently(conn, now_ms, out),
            }
            return;
        }
        // A connection waiting on a session write is served in order after it.
        let Some(packet) = self.hold_while_paused(conn, packet, now_ms, out) else {
            return;
        };
        match packet {
            Packet::Publish(publish) => self.handle_publish(conn, publish, now_ms, out),
            Packet::Puback(ack) => self.handle_puback(conn, ack.packet_id, now_ms, out),
            Packet::Pubrec(ack) => self.handle_pubrec(conn, ack, now_ms, out),
            Packet::Pubrel(ack) => self.handle_pubrel(conn, ack.packet_id, now_ms, out),
            Packet::Pubcomp(ack) => self.handle_pubcomp(conn, ack.packet_id, now_ms, out),
            Packet::Subscribe(subscribe) => self.handle_subscribe(conn, subscribe, now_ms, out),
            Packet::Unsubscribe(unsubscribe) => {
                self.handle_unsubscribe(conn, unsubscribe, now_ms, out)
            }
            Packet::Pingreq => self.send(conn, &Packet::Pingresp, out),
            Packet::Disconnect(disconnect) => self.handle_disconnect(conn, disconnect, now_ms, out),
            Packet::Auth(_) => {
                self.end_connection(conn, Some(Refusal::AuthWithoutMethod), true, now_ms, out)
            }
            Packet::Connect(_) => {
                self.end_connection(conn, Some(Refusal::SecondConnect), true, now_ms, out)
            }
            Packet::Connack(_) | Packet::Suback(_) | Packet::Unsuback(_) | Packet::Pingresp => {
                self.end_connection(conn, Some(Refusal::ServerOnlyPacket), true, now_ms, out)
            }
        }
    }

    /// A packet from `conn` that could not be read. `connect_version` is the
    /// version a refused CONNECT declared, where it declared one it could.
    pub fn handle_decode_error(
        &mut self,
        conn: Key,
        error: DecodeError,
        connect_version: Option<ProtocolVersion>,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(connection) = self.connections.get(conn) else {
            return;
        };
        if connection.active.is_some() {
            let why = refusal_counts::Reason::Code(error.code);
            self.connection_refused(conn, None, why, now_ms);
            let reason = Some((error.code, error.reason));
            self.end_connection_saying(conn, reason, true, now_ms, out);
            return;
        }
        self.refuse_connect(conn, error, connect_version, now_ms, out);
    }

    /// The socket closed or failed without the broker deciding so.
    pub fn handle_connection_lost(&mut self, conn: Key, now_ms: u64, out: &mut impl Transport) {
        if self.connections.contains(conn) {
            self.end_connection(conn, None, true, now_ms, out);
        }
    }

    /// Runs every clock: CONNECT and keepalive deadlines, session expiry,
    /// delayed Wills, unreleased exactly-once publishes.
    pub fn tick(&mut self, now_ms: u64, out: &mut impl Transport) {
        // Only the connections past a deadline are listed, so a tick over
        // a fleet of idle connections allocates nothing.
        let connect_timeout_ms = self.settings.connect_timeout_ms;
        let expired: Vec<(Key, bool)> = self
            .connections
            .iter()
            .filter_map(|(key, c)| match c.active.as_ref().map(|a| a.keep_alive_s) {
                None => (now_ms.saturating_sub(c.heard_ms) >= connect_timeout_ms)
                    .then_some((key, false)),
                Some(0) => None,
                // MQTT allows one and a half keepalives of silence.
                Some(keep_alive_s) => (now_ms.saturating_sub(c.heard_ms)
                    > u64::from(keep_alive_s) * 1500)
                    .then_some((key, true)),
            })
            .collect();
        for (conn, keepalive) in expired {
            if keepalive {
                let reason = Refusal::KeepAliveExpired;
                self.end_connection(conn, Some(reason), true, now_ms, out);
            } else {
                log::debug!("closing a connection that sent no CONNECT within connect_timeout");
                self.close_silently(conn, now_ms, out);
            }
        }
        self.expire_sessions(now_ms, out);
        self.retry_session_writes(now_ms, out);
        self.expire_held_publishes(now_ms, out);
        self.budgets.forget_full(now_ms);
        let due = self.timers.due(now_ms);
        if due.positions {
            self.commit_positions(None, out);
            self.retry_position_drops(out);
            self.commit_cursors(out);
            self.retry_windows(out);
            // Readers whose storage read could not be queued try again.
            for reader in self.readers.keys() {
                self.pump_reader(reader, now_ms, out);
            }
            self.latest_tick(now_ms, out);
        }
        if due.size_sweep || due.age_sweep {
            self.sweep_retention(now_ms, due.age_sweep, due.size_sweep, out);
        }
        let retention_ms = self
            .settings
            .retained_retention_period_s
            .map(|s| s.saturating_mul(1000));
        let gone = self.retained.expire(self.unix_ms(now_ms), retention_ms);
        self.retained_left(gone, out);
        self.expire_group_backlogs(now_ms);
        self.queue_tick(now_ms, out);
        crate::log_limit::report_suppressed(&broker::LIMITED_LINES, now_ms);
    }

    /// Says goodbye to every client as the broker stops.
    pub fn shutdown(&mut self, now_ms: u64, out: &mut impl Transport) {
        // What the store refused is tried once more; then a stop is not a
        // disconnect: connected sessions' records stay reading as
        // connected, their Wills without a moment.
        self.flush_session_writes(now_ms, out);
        self.persist.stopping = true;
        self.commit_positions(None, out);
        self.commit_cursors(out);
        for conn in self.connections.keys() {
            let active = self
                .connections
                .get(conn)
                .and_then(|c| c.active.as_ref())
                .is_some();
            if active {
                self.end_connection(conn, Some(Refusal::ShuttingDown), false, now_ms, out);
            } else {
                self.close_silently(conn, now_ms, out);
            }
        }
        debug_assert_eq!(self.connections.len(), 0, "a stop closes every connection");
    }

    /// Sends `packet` to an accepted connection, within its client's
    /// Maximum Packet Size (see [`Broker::send_within`]).
    pub(crate) fn send(&mut self, conn: Key, packet: &Packet, out: &mut impl Transport) {
        let Some(active) = self.connections.get(conn).and_then(|c| c.active.as_ref()) else {
            return;
        };
        let (version, max_bytes) = (active.version, active.client_max_packet_size);
        self.send_within(conn, version, max_bytes, packet, out);
    }

    /// Sends `packet` trimmed to `max_bytes` as MQTT allows. A PUBLISH that
    /// cannot fit is discarded as though sent (MQTT-3.1.2-25); any other
    /// packet that cannot is an answer the client waits for and can never
    /// be given, so the connection is closed, and its end is reported back
    /// as a lost connection is. Returns whether the packet was sent.
    pub(crate) fn send_within(
        &mut self,
        conn: Key,
        version: ProtocolVersion,
        max_bytes: u32,
        packet: &Packet,
        out: &mut impl Transport,
    ) -> bool {
        if let Some(fitted) = connection::packet_size::fitted(packet, version, max_bytes) {
            out.send(conn, version, &fitted, false);
            return true;
        }
        if let Packet::Publish(_) = packet {
            self.stats.deliveries_too_large += 1;
        } else {
            log::info!(
                "closing the connection of {}: no {:?} it is owed fits its Maximum Packet Size of {max_bytes} bytes",
                self.client_id_of(conn),
                packet.packet_type()
            );
            out.close(conn);
        }
        false
    }

    /// A Reason String for `conn`, unless its client asked for none.
    pub(crate) fn reason_string(&self, conn: Key, reason: &str) -> Option<String> {
        let active = self.connections.get(conn)?.active.as_ref()?;
        (active.problem_information && active.version == ProtocolVersion::V5)
            .then(|| reason.to_string())
    }

    /// Closes a connection that has no session, writing nothing.
    pub(crate) fn close_silently(&mut self, conn: Key, _now_ms: u64, out: &mut impl Transport) {
        self.persist.forget_connection(conn);
        self.forget_replies(conn);
        if let Some(connection) = self.connections.remove(conn) {
            debug_assert!(connection.active.is_none());
            out.close(conn);
        }
    }

    /// Ends a connection the broker or the client decided to end: an MQTT 5
    /// client is told `reason` on a DISCONNECT first. Its session is kept or
    /// ended as its expiry says, and its Will goes out where `publish_will`.
    pub(crate) fn end_connection(
        &mut self,
        conn: Key,
        refusal: Option<Refusal>,
        publish_will: bool,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        if let Some(refusal) = refusal.filter(|r| r.ends_for_a_rule()) {
            self.connection_refused(conn, None, refusal.into(), now_ms);
        }
        let reason = refusal.map(|r| (r.code(), r.reason()));
        self.end_connection_saying(conn, reason, publish_will, now_ms, out);
    }

    /// [`Broker::end_connection`] with a code and words of the codec's own,
    /// for a packet that could not be read.
    fn end_connection_saying(
        &mut self,
        conn: Key,
        reason: Option<(ReasonCode, &str)>,
        publish_will: bool,
        now_ms: u64,
        out: &mut impl Transport,
    ) {
        let Some(connection) = self.connections.get(conn) else {
            return;
        };
        let Some(active) = connection.active.as_ref() else {
            self.close_silently(conn, now_ms, out);
            return;
        };
        if let Some((code, text)) = reason {
            if active.version == ProtocolVersion::V5 {
                let max_bytes = active.client_max_packet_size;
                let reason_string = self.reason_string(conn, text);
                let packet = Packet::Disconnect(Disconnect {
                    reason_code: code,
                    properties: Properties {
                        reason_string,
                        ..Properties::default()
                    },
                });
                // One that cannot fit is left unsaid: the close follows anyway.
                if let Some(fitted) =
                    connection::packet_size::fitted(&packet, ProtocolVersion::V5, max_bytes)
                {
                    out.send(conn, ProtocolVersion::V5, &fitted, false);
                }
            }
            if code.is_error() {
                log::info!(
                    "disconnecting {}: {} (0x{:02X})",
                    self.client_id_of(conn),
                    text,
                    code.0
                );
            }
        }
        out.close(conn);
        self.persist.forget_connection(conn);
        self.forget_replies(conn);
        self.close_served(conn);
        let connection = self.connections.remove(conn).expect("checked above");
        let active = connection.active.expect("checked above");
        self.detach_session(active, publish_will, now_ms, out);
        debug_assert!(
            !self.connections.contains(conn),
            "an ended connection is gone"
        );
    }

    pub(crate) fn client_id_of(&self, conn: Key) -> &str {
        self.connections
            .get(conn)
            .and_then(|c| c.active.as_ref())
            .and_then(|a| self.sessions.get(a.session))
            .map(|s| &*s.client_id)
            .unwrap_or("-")
    }
}

/// The claims table for a channel list.
fn claims_for(channels: &[ChannelSettings]) -> channel::claims::Claims {
    let list: Vec<(&str, &[String])> = channels
        .iter()
        .map(|c| (c.name.as_str(), c.filters.as_slice()))
        .collect();
    channel::claims::Claims::new(&list)
}
