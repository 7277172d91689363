//! The configuration file: its model, its defaults, and a validation that
//! reports every mistake in one pass.
//!
//! The file is read as a plain YAML tree and walked by hand rather than
//! deserialised into structs, so that each finding can name the key path
//! it is about, quote the value as written, and say what would be accepted.
//! A key this version does not implement is refused rather than ignored:
//! an operator must never believe a setting is in force when it is not.
//!
//! Entry points: [`load`] for a file on disk, [`parse`] for text already
//! in memory, [`parse_with_base`] for text read from a file elsewhere,
//! [`default_config`] for the file shipped in `config/saguin.yaml`.
//!
//! `channels:` and `broker.storage.providers` may each be written as a
//! list of groups, each a file named by `!include` or entries written in
//! place. An `!include` resolves against the directory of the file that
//! holds it, so only [`load`] and [`parse_with_base`] can follow one.

pub mod acl_file;
mod acl_lines;
mod channels;
mod exchanges;
mod include;
mod latest;
mod limits;
mod listen;
mod parse;
mod persistence;
pub mod queue;
mod storage;
mod units;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use channels::{ChannelConfig, ChannelKind, Start, MAX_FILTER_EXPANSIONS};
pub use exchanges::{Qos2Config, SessionConfig, ShareConfig};
pub use latest::DEFAULT_DELETION_RETENTION_PERIOD_S;
pub use limits::Limits;
pub use persistence::RetainedConfig;
pub use queue::{Backoff, QueueConfig};
pub use storage::{
    declared_memory_bytes, reserve_bytes, CommitPolicy, ProviderConfig, ProviderKind,
    StorageConfig, MAX_PUBLISH_COMMIT_INTERVAL_MS,
};
pub use units::{format_seconds, format_size, parse_duration_ms, parse_size_bytes};

/// The configuration shipped with the broker, used when none is given.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../config/saguin.yaml");

/// The source name [`default_config`] reports.
pub const EMBEDDED_SOURCE: &str = "<embedded default>";

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub broker: BrokerConfig,
    /// `channels:`, in the order written. The order decides nothing about
    /// which channel holds a topic; it is kept so findings and listings
    /// read as the file does.
    pub channels: Vec<ChannelConfig>,
    /// Where it was read from: the path as given, or `<embedded default>`.
    pub source: String,
}

/// Everything under `broker:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `broker.id`: names this broker in its logs and metrics. Required.
    pub id: String,
    /// `broker.log_level`.
    pub log_level: LogLevel,
    /// `broker.pid_file`: an absolute path, or `None` for no pid file.
    pub pid_file: Option<PathBuf>,
    /// `broker.mqtt`.
    pub mqtt: MqttConfig,
    /// `broker.limits`.
    pub limits: Limits,
    /// `broker.qos2`.
    pub qos2: Qos2Config,
    /// `broker.share`.
    pub share: ShareConfig,
    /// `broker.session`.
    pub session: SessionConfig,
    /// `broker.retained`.
    pub retained: RetainedConfig,
    /// `broker.storage`: `None` when the block is absent, which is valid
    /// while no channel needs a provider; written, it is complete.
    pub storage: Option<StorageConfig>,
}

/// `broker.log_level`: how much the broker says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// The filter to hand the `log` facade.
    pub fn to_level_filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Error => log::LevelFilter::Error,
        }
    }

    /// The word written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything under `broker.mqtt:` that this version implements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttConfig {
    /// The TCP doors to listen on, in the order written. Never empty in a
    /// validated configuration: with no listener written, one door named
    /// `tcp` on `0.0.0.0:1883`.
    pub tcp: Vec<TcpDoor>,
    /// `broker.mqtt.min_protocol_version`.
    pub min_protocol_version: MinProtocolVersion,
    /// `broker.mqtt.acl_file`: an absolute path; `None` lets every client
    /// do anything.
    pub acl_file: Option<PathBuf>,
}

/// One TCP listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpDoor {
    /// Unique across every MQTT door; `tcp` for a door written as a single
    /// mapping without a name.
    pub name: String,
    /// `host:port`, IPv6 in brackets, ready for `ToSocketAddrs` or
    /// `async_net::TcpListener::bind`. The host is kept as written except
    /// that an empty host (`:1883`, every interface) is given as `0.0.0.0`,
    /// and the port is written as a plain decimal number.
    pub address: String,
}

/// The name a door takes when the file gives it none.
pub const DEFAULT_TCP_DOOR_NAME: &str = "tcp";

/// The address of the door opened when no listener is written.
pub const DEFAULT_TCP_ADDRESS: &str = "0.0.0.0:1883";

/// `broker.mqtt.min_protocol_version`: the oldest MQTT admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinProtocolVersion {
    /// `"3.1.1"`, the default: 3.1.1 and 5 clients are admitted.
    V311,
    /// `5`: MQTT 5 clients only.
    V5,
}

impl MinProtocolVersion {
    /// Whether a CONNECT's protocol level (4 for 3.1.1, 5 for MQTT 5) is
    /// admitted. Level 3 (MQTT 3.1) never is.
    pub fn admits(self, protocol_level: u8) -> bool {
        match self {
            MinProtocolVersion::V311 => protocol_level == 4 || protocol_level == 5,
            MinProtocolVersion::V5 => protocol_level == 5,
        }
    }
}

/// Why a configuration was refused: every finding, not only the first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file the findings are about, as it was named.
    pub file: String,
    /// One line each, naming the key path, the value and what is allowed.
    pub findings: Vec<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "configuration is invalid:")?;
        write!(f, "{}:", self.file)?;
        for finding in &self.findings {
            write!(f, "\n  - {finding}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Reads and validates the configuration file at `path`.
///
/// Findings name the file as `path` was given, so an operator sees the
/// name they typed. An `!include` in it resolves against its directory.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let base = path.parent().unwrap_or(Path::new(""));
    match std::fs::read_to_string(path) {
        Ok(text) => parse_with_base(&text, &file, Some(base)),
        Err(e) => Err(ConfigError {
            file,
            findings: vec![format!("the file cannot be read: {e}")],
        }),
    }
}

/// Validates configuration text; `source` names it in findings and is kept
/// in [`Config::source`].
///
/// The text has no directory, so an `!include` in it is refused; use
/// [`parse_with_base`] for text read from a file.
pub fn parse(text: &str, source: &str) -> Result<Config, ConfigError> {
    parse_with_base(text, source, None)
}

/// [`parse`], for text read from a file in the directory `base`: an
/// `!include` path resolves against `base`, never against the process's
/// working directory. `None` refuses every `!include`.
pub fn parse_with_base(
    text: &str,
    source: &str,
    base: Option<&Path>,
) -> Result<Config, ConfigError> {
    let refuse = |findings: Vec<String>| ConfigError {
        file: source.to_string(),
        findings,
    };
    let mut root: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(root) => root,
        Err(e) => return Err(refuse(vec![parse::syntax_finding(&e)])),
    };
    if let Err(e) = root.apply_merge() {
        return Err(refuse(vec![format!(
            "the YAML merge key `<<` cannot be applied: {e}"
        )]));
    }
    let origin = include::Origin { source, base };
    match parse::root(&root, &origin) {
        Ok((broker, channels)) => Ok(Config {
            broker,
            channels,
            source: source.to_string(),
        }),
        Err(findings) => Err(refuse(findings)),
    }
}

/// The shipped default configuration.
///
/// # Panics
///
/// Only if `config/saguin.yaml` is invalid, which a unit test rules out.
pub fn default_config() -> Config {
    match parse(DEFAULT_CONFIG_YAML, EMBEDDED_SOURCE) {
        Ok(config) => config,
        Err(e) => panic!("the shipped default configuration is invalid: {e}"),
    }
}
