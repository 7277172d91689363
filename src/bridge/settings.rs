//! What one bridge runs with. The configuration reader builds it, so the
//! bridge never reads the configuration itself.

use std::path::PathBuf;

/// Which way a rule carries records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Subscribed at the peer, published into this broker.
    In,
    /// Read from this broker, published at the peer.
    Out,
    /// Both of the above on one filter, the topic unchanged.
    Both,
}

impl Direction {
    pub fn carries_in(self) -> bool {
        matches!(self, Direction::In | Direction::Both)
    }

    pub fn carries_out(self) -> bool {
        matches!(self, Direction::Out | Direction::Both)
    }
}

/// One entry of `topics:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// An MQTT topic filter: at the peer for `in`, here for `out`.
    pub filter: String,
    pub direction: Direction,
    /// The topic a record takes at the other end, with `$1..$N` and `$#`
    /// substitutions; `None` on a `both` rule, which keeps the topic.
    pub topic: Option<String>,
}

/// TLS to the peer. Verification is always on: the peer's certificate is
/// checked against `ca_file`, or the system's authorities without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerTls {
    /// The authority that signs the peer's certificate. Absolute.
    pub ca_file: Option<PathBuf>,
    /// The certificate this broker presents when the peer asks for one,
    /// and its key: both or neither. Absolute.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Where the peer listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub host: String,
    pub port: u16,
    /// `tls://` or `wss://`: the connection is TLS, verified.
    pub tls: Option<PeerTls>,
    /// `ws://` or `wss://`: MQTT over WebSocket, upgraded at this path.
    pub websocket: Option<String>,
}

/// The path a `ws://` or `wss://` peer is upgraded at when its address
/// names none: the one MQTT over WebSocket servers commonly take.
pub const DEFAULT_WEBSOCKET_PATH: &str = "/mqtt";

impl Peer {
    /// `host:port`, for `async_net::TcpStream::connect`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The peer as its `peer` key writes it: `tcp://`, `tls://`, `ws://`
    /// or `wss://`, then the address and a WebSocket's path.
    pub fn url(&self) -> String {
        let scheme = match (self.tls.is_some(), self.websocket.is_some()) {
            (false, false) => "tcp",
            (true, false) => "tls",
            (false, true) => "ws",
            (true, true) => "wss",
        };
        let path = self.websocket.as_deref().unwrap_or("");
        format!("{scheme}://{}{path}", self.address())
    }
}

/// One `bridges.<name>` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSettings {
    pub name: String,
    pub peer: Peer,
    /// This broker's identity at the peer.
    pub client_id: String,
    /// Sent in CONNECT for a peer that asks for them.
    pub username: Option<String>,
    pub password: Option<String>,
    /// How long the peer keeps this bridge's session.
    pub session_expiry_s: u32,
    /// What the peer may have in flight to this bridge, and what this
    /// bridge has in flight to the peer at most.
    pub receive_maximum: u16,
    /// How long an acknowledgement to the peer may wait.
    pub ack_interval_ms: u64,
    /// Tried in the order written; the first match wins.
    pub rules: Vec<Rule>,
}

impl BridgeSettings {
    /// The client id of the session that publishes here what the peer
    /// sends. It holds nothing between connections.
    pub fn local_client_id(&self) -> String {
        format!("{}{}", crate::core::BRIDGE_CLIENT_ID_PREFIX, self.name)
    }

    /// The rules that read this broker's channels, each through a durable
    /// session of its own, in the order written.
    pub fn readers(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(|r| r.direction.carries_out())
    }

    /// The client id of the session that reads for `rule`: named by the
    /// bridge, the filter and the topic, so the position it holds is that
    /// rule's, and a rule whose filter or topic is edited is a new reader.
    pub fn reader_client_id(&self, rule: &Rule) -> String {
        let topic = rule.topic.as_deref().unwrap_or("");
        let hash = fnv1a(rule.filter.bytes().chain([0u8]).chain(topic.bytes()));
        format!("{}/{hash:016x}", self.local_client_id())
    }
}

/// FNV-1a, 64 bits: small, and the same on every build, which a name kept
/// in storage needs.
pub(super) fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
