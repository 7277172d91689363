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

/// One TCP listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Door {
    /// Its name in logs and findings.
    pub name: String,
    /// `host:port`, ready for `async_net::TcpListener::bind`.
    pub address: String,
    /// Its `tls` block; `None` for a plain door.
    pub tls: Option<super::tls::TlsSettings>,
}
