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
//! [`default_config_in`] for the file shipped in `config/saguin.yaml`.
//! [`Config::shell_settings`] then gives `net`, `core` and `store` the
//! settings each owns; none of them reads this module.
//!
//! Each block has its file (`broker`, `limits`, `storage`, `channels`, ...);
//! they share leaf helpers that use no block's file: `findings` (how a
//! mistake is said), `table` (a block's keys), `values` (numbers, sizes,
//! durations, `none`) and `units`.
//!
//! `channels:` and `broker.storage.providers` may each be written as a
//! list of groups, each a file named by `!include` or entries written in
//! place. An `!include` resolves against the directory of the file that
//! holds it, so only [`load`] and [`parse_with_base`] can follow one.

pub mod acl_file;
mod acl_identity;
mod acl_lines;
mod address;
mod authentication;
mod bridges;
mod broker;
mod channels;
mod embedded;
mod exchanges;
mod files;
mod findings;
mod include;
mod latest;
mod limits;
mod listen;
mod operations;
mod parse;
mod persistence;
pub mod queue;
pub mod resolved;
mod settings;
mod sockets;
mod storage;
mod table;
mod tls;
mod units;
mod values;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

pub use authentication::AuthenticationKeys;
pub use broker::{BrokerConfig, LogFormat, LogLevel, MinProtocolVersion, MqttConfig};
pub use channels::{ChannelConfig, ChannelKind, Start, MAX_FILTER_EXPANSIONS};
pub use embedded::{DEFAULT_CONFIG_YAML, EMBEDDED_DATA_DIR, EMBEDDED_SOURCE};
pub use exchanges::{Qos2Config, SessionConfig, ShareConfig};
pub use latest::DEFAULT_DELETION_RETENTION_PERIOD_S;
pub use limits::Limits;
pub use listen::{MqttDoor, DEFAULT_TCP_ADDRESS, DEFAULT_TCP_DOOR_NAME};
pub use persistence::RetainedConfig;
pub use queue::{Backoff, QueueConfig};
pub use storage::{
    declared_memory_bytes, reserve_bytes, CommitPolicy, ProviderConfig, ProviderKind,
    StorageConfig, MAX_PUBLISH_COMMIT_INTERVAL_MS,
};
pub use units::{format_seconds, format_size, parse_duration_ms, parse_size_bytes};

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub broker: BrokerConfig,
    /// `channels:`, in the order written. The order decides nothing about
    /// which channel holds a topic; it is kept so findings and listings
    /// read as the file does.
    pub channels: Vec<ChannelConfig>,
    /// `bridges:`, in the order written.
    pub bridges: Vec<crate::bridge::BridgeSettings>,
    /// Where it was read from: the path as given, or `<embedded default>`.
    pub source: String,
}

impl Config {
    /// What the network shell runs with: the settings `net`, `core` and
    /// `store` own, built from this configuration.
    /// What `--check-config --output` and `/v1/operations/config` render.
    pub fn resolved_parts(&self) -> resolved::Parts<'_> {
        resolved::Parts {
            broker: &self.broker,
            channels: &self.channels,
            bridges: &self.bridges,
        }
    }

    pub fn shell_settings(&self) -> crate::net::Settings {
        let mut shell = settings::shell(&self.broker, &self.channels, &self.bridges);
        if let Some(operations) = &mut shell.operations {
            operations.resolved = std::sync::Arc::new(resolved::json(&self.resolved_parts()));
        }
        shell
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
/// Password and operators files are read too; certificates, keys and the
/// acl_file are left to whoever uses them, or to [`check`].
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    read(path, false)
}

/// [`load`], and every certificate, key, authority and acl_file the
/// configuration names read and checked as well, even where the YAML has
/// mistakes: `--check-config`, which reports every fault of every file in
/// one run.
pub fn check(path: &Path) -> Result<Config, ConfigError> {
    read(path, true)
}

fn read(path: &Path, read_files: bool) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    let base = path.parent().unwrap_or(Path::new(""));
    match std::fs::read_to_string(path) {
        Ok(text) => parse_text(&text, &file, Some(base), read_files),
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
    parse_text(text, source, base, false)
}

fn parse_text(
    text: &str,
    source: &str,
    base: Option<&Path>,
    read_files: bool,
) -> Result<Config, ConfigError> {
    match serde_yaml::from_str(text) {
        Ok(root) => parse_tree(root, source, base, read_files),
        Err(e) => Err(ConfigError {
            file: source.to_string(),
            findings: vec![findings::syntax_finding(&e)],
        }),
    }
}

/// [`parse_with_base`] for a tree already read from its text; with
/// `read_files`, as [`check`] reads it.
pub(super) fn parse_tree(
    mut root: serde_yaml::Value,
    source: &str,
    base: Option<&Path>,
    read_files: bool,
) -> Result<Config, ConfigError> {
    let refuse = |findings: Vec<String>| ConfigError {
        file: source.to_string(),
        findings,
    };
    if let Err(e) = root.apply_merge() {
        return Err(refuse(vec![format!(
            "the YAML merge key `<<` cannot be applied: {e}"
        )]));
    }
    let origin = include::Origin { source, base };
    match parse::root(&root, &origin, read_files) {
        Ok((broker, channels, bridges)) => Ok(Config {
            broker,
            channels,
            bridges,
            source: source.to_string(),
        }),
        Err(findings) => Err(refuse(findings)),
    }
}

/// The shipped default configuration, its `./` paths anchored at
/// `working_dir`.
///
/// # Panics
///
/// Only if `config/saguin.yaml` is invalid, which a unit test rules out.
pub fn default_config_in(working_dir: &Path) -> Config {
    match parse_tree(embedded::tree_in(working_dir), EMBEDDED_SOURCE, None, false) {
        Ok(config) => config,
        Err(e) => panic!("the shipped default configuration is invalid: {e}"),
    }
}
