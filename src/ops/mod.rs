//! The operations listener: what Sagüin tells the people running it.
//!
//! One small HTTP/1.1 server answers `/health`, `/metrics`, the
//! `/v1/operations/*` routes and a status page drawn from them on the doors `broker.operations.listen`
//! names. It runs on a thread of its own, so parsing a request, checking a
//! password and formatting a scrape never hold the MQTT executor; what it
//! needs from the broker it asks for over a bounded channel, and the
//! executor answers by copying numbers (see [`Ask`]).
//!
//! - [`http`]: reading one bounded request, writing one response;
//! - [`server`]: the doors, their accept loops and connections;
//! - [`seats`]: how many connections are served, and who makes room;
//! - [`link`]: the bounded questions the executor thread answers;
//! - [`route`]: which path answers what, and who may ask;
//! - [`operators`]: the operators' password file and its route scopes;
//! - [`password_checks`]: checking a password off the listener's thread;
//! - [`metrics`]: the Prometheus text catalogue;
//! - [`process`]: the process's own figures, read from `/proc`;
//! - [`v1`]: the JSON routes;
//! - [`page`]: the status page at `/`, which reads the routes above;
//! - [`wear`]: what each provider writes, and how long its device lasts;
//! - [`gzip`]: compressed answers, and what the binary carries compressed.

pub mod backup;
pub mod gzip;
pub mod http;
pub mod json;
pub mod link;
pub mod metrics;
pub mod operators;
pub mod page;
pub mod password_checks;
pub mod process;
pub mod proxy;
pub mod route;
mod seats;
pub mod server;
pub mod v1;
pub mod wear;

use std::path::PathBuf;
use std::sync::Arc;

pub use link::{answer, Ask, BridgeObservation, Link, Provider, Scrape};
pub use server::{bind, Bound, Reloader, SocketFiles};

/// The shortest `min_scrape_interval`, and its default.
pub const MIN_SCRAPE_INTERVAL_S: u32 = 60;

/// `max_connections` when it is not written: connections served at once
/// over every door, with as many more answered `/health` alone.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;
/// The largest `max_connections` taken.
pub const MAX_MAX_CONNECTIONS: usize = 1_024;

/// `broker.operations`, as the configuration resolved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub tcp: Vec<TcpDoor>,
    pub unix: Vec<UnixDoor>,
    /// `broker.operations.password_file`: the operators a door that names
    /// none of its own takes.
    pub password_file: Option<Arc<operators::Operators>>,
    /// The shortest interval at which the metrics are recomputed.
    pub min_scrape_interval_s: u32,
    /// Connections served at once over every door; as many more are
    /// answered `/health` alone (`server.rs`).
    pub max_connections: usize,
    /// The configuration this process resolved, for
    /// `/v1/operations/config`; rendered once, at startup.
    pub resolved: Arc<ResolvedConfig>,
}

/// The resolved configuration as JSON, whole and by section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedConfig {
    pub whole: String,
    /// Each section `?section=` may name, as `{"<name>": ...}`.
    pub sections: Vec<(&'static str, String)>,
}

/// One TCP door of the operations listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpDoor {
    pub name: String,
    /// `host:port`, ready to bind.
    pub address: String,
    /// This door's own operators, which win over the block's.
    pub password_file: Option<Arc<operators::Operators>>,
    /// What its TLS handshakes run on, loaded at startup; `None` for
    /// plain HTTP.
    pub tls: Option<DoorTls>,
}

/// A TCP door's TLS: what its handshakes run on, and how SIGUSR1 reads it
/// again from the door's files (the configuration knows where they are
/// and how to check them).
#[derive(Clone)]
pub struct DoorTls {
    /// What messages call the door: `broker.operations.listen.tcp`.
    pub door: String,
    pub config: Arc<rustls::ServerConfig>,
    pub read_again: TlsReader,
    /// Whether the handshake refuses a caller without a certificate its
    /// `client_ca_file` signed: the credential the loopback rule accepts
    /// in place of a password file.
    pub certificate_required: bool,
    pub name_of: CertificateNamer,
    /// The files, as `/v1/operations/config` names them.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_ca_file: Option<PathBuf>,
}

/// The name a verified client certificate (DER) gives its holder: its
/// Common Name, or its first DNS name; `None` when it has neither.
pub type CertificateNamer = Arc<dyn Fn(&[u8]) -> Option<String> + Send + Sync>;

/// Reads a door's certificate and key again; the error names the key and
/// the file.
pub type TlsReader = Arc<dyn Fn() -> Result<Arc<rustls::ServerConfig>, String> + Send + Sync>;

impl std::fmt::Debug for DoorTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorTls")
    }
}

impl PartialEq for DoorTls {
    fn eq(&self, other: &DoorTls) -> bool {
        self.door == other.door && Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for DoorTls {}

/// One Unix-socket door of the operations listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnixDoor {
    pub name: String,
    pub path: PathBuf,
    /// The socket file's permissions, which decide who may speak to it.
    pub mode: u32,
    pub password_file: Option<Arc<operators::Operators>>,
    /// Every connection starts with a PROXY protocol v2 header (`proxy.rs`).
    pub proxy_protocol: bool,
}
