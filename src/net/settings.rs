//! What the network shell runs with. The configuration reader builds it,
//! so the shell never reads the configuration itself.

use std::path::PathBuf;

use crate::core;
use crate::store::ProviderSettings;

/// Everything the shell needs to start and serve.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Names this broker in its logs.
    pub broker_id: String,
    /// The core's settings. Its channels name their providers by index in
    /// [`Settings::providers`]; what each provider holds of them is read
    /// in when the providers open.
    pub core: core::Settings,
    /// The doors to listen on, in the order written; never empty.
    pub doors: Vec<Door>,
    /// Written once the signal handlers are in place; `None` for none.
    pub pid_file: Option<PathBuf>,
    /// Connections each door accepts a second; `None` for no limit.
    pub max_connect_rate_per_s: Option<u32>,
    /// Longest wait to hand a packet to a client; `None` for no ceiling.
    pub write_timeout_ms: Option<u64>,
    /// Every storage provider, in the order written.
    pub providers: Vec<ProviderSettings>,
    /// What every provider holds back for the writes that relieve a full
    /// one (see [`crate::store::reserve_bytes`]).
    pub reserve_bytes: u64,
    /// The bridges to run, each with a session of its own here.
    pub bridges: Vec<crate::bridge::BridgeSettings>,
    /// The operations listener; `None` opens none.
    pub operations: Option<crate::ops::Settings>,
}

/// One MQTT door.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Door {
    /// Its name in logs and findings.
    pub name: String,
    /// What it listens on, and what it speaks there.
    pub listen: Listen,
    /// Its `tls` block; `None` for a plain door, and always for a socket.
    pub tls: Option<super::tls::TlsSettings>,
}

/// What a door listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// MQTT on a TCP port: `host:port`, ready for
    /// `async_net::TcpListener::bind`.
    Tcp { address: String },
    /// MQTT over WebSocket on a TCP port, the upgrade refused to a page
    /// whose origin `origins` does not admit.
    WebSocket {
        address: String,
        origins: super::websocket::Origins,
    },
    /// MQTT on a Unix socket (`crate::unix_socket`), its file given
    /// `mode`; with `proxy_protocol`, every connection starts with a
    /// PROXY protocol v2 header from the proxy in front.
    Unix {
        path: PathBuf,
        mode: u32,
        proxy_protocol: bool,
    },
}

impl Door {
    /// The kind's word, as `broker.mqtt.listen` spells it.
    pub fn kind(&self) -> &'static str {
        self.listen.kind()
    }

    /// What messages call it: `broker.mqtt.listen.ws` for a door named
    /// after its kind, `broker.mqtt.listen.ws[dashboard]` otherwise.
    pub fn label(&self) -> String {
        door_label(self.kind(), &self.name)
    }
}

impl Listen {
    pub fn kind(&self) -> &'static str {
        match self {
            Listen::Tcp { .. } => "tcp",
            Listen::WebSocket { .. } => "ws",
            Listen::Unix { .. } => "unix",
        }
    }

    /// The TCP address, for the two kinds that take a port.
    pub fn address(&self) -> Option<&str> {
        match self {
            Listen::Tcp { address } | Listen::WebSocket { address, .. } => Some(address),
            Listen::Unix { .. } => None,
        }
    }
}

/// What messages call a door of `kind` named `name`.
pub fn door_label(kind: &str, name: &str) -> String {
    if name == kind {
        format!("broker.mqtt.listen.{kind}")
    } else {
        format!("broker.mqtt.listen.{kind}[{name}]")
    }
}
