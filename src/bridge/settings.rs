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
    /// `tls://`: the connection is TLS, verified.
    pub tls: Option<PeerTls>,
}

impl Peer {
    /// `host:port`, for `async_net::TcpStream::connect`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
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
    /// The client id of the session this bridge holds at this broker: its
    /// durable position in every channel it drains is that session's.
    pub fn local_client_id(&self) -> String {
        format!("{}{}", crate::core::BRIDGE_CLIENT_ID_PREFIX, self.name)
    }
}
