//! `broker:` and `broker.mqtt:`: the broker's own keys, and the walk that
//! reads each block under `broker:` through the module that owns it.

use std::fmt;
use std::path::PathBuf;

use serde_yaml::Value;

use super::acl_identity;
use super::authentication::{self, AuthenticationKeys};
use super::channels::Scope;
use super::exchanges::{self, Qos2Config, SessionConfig, ShareConfig};
use super::findings::{show, Findings};
use super::include::Origin;
use super::limits::{self, Limits};
use super::listen::{self, MqttDoor};
use super::persistence::{self, RetainedConfig};
use super::storage::{self, StorageConfig};
use super::table::{table, Keys};
use crate::auth::DoorRule;

/// Everything under `broker:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `broker.id`: names this broker in its logs and metrics. Required.
    pub id: String,
    /// `broker.log_level`.
    pub log_level: LogLevel,
    /// `broker.log_format`.
    pub log_format: LogFormat,
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
    /// `broker.operations`: `None` when absent, which opens no listener.
    pub operations: Option<crate::ops::Settings>,
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

/// `broker.log_format`: what a log line looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Readable prose, a connection's fields in brackets.
    Text,
    /// `key=value` pairs, values quoted where they must be.
    Logfmt,
    /// One JSON object a line.
    Json,
}

impl LogFormat {
    /// The word written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Logfmt => "logfmt",
            LogFormat::Json => "json",
        }
    }
}

/// Everything under `broker.mqtt:` that this version implements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttConfig {
    /// The doors to listen on, every kind's, `tcp` then `ws` then `unix`,
    /// each kind's in the order written. Never empty in a validated
    /// configuration: with no listener written, one door named `tcp` on
    /// `0.0.0.0:1883`.
    pub doors: Vec<MqttDoor>,
    /// `broker.mqtt.min_protocol_version`.
    pub min_protocol_version: MinProtocolVersion,
    /// `broker.mqtt.acl_file`: an absolute path; `None` lets every client
    /// do anything.
    pub acl_file: Option<PathBuf>,
    /// `broker.mqtt.password_file` and `allow_anonymous`, as written;
    /// [`MqttConfig::door_rules`] settles what each door does.
    pub authentication: AuthenticationKeys,
    /// `broker.mqtt.trust_unchecked_user_names`: a user name stated on a
    /// door no password file guards is the client's identity. False by
    /// default: a name nothing checked names nobody.
    pub trust_unchecked_user_names: bool,
}

impl MqttConfig {
    /// Each door's rule for who may connect, in door order.
    pub fn door_rules(&self) -> Vec<DoorRule> {
        authentication::door_rules(
            &self.authentication,
            self.trust_unchecked_user_names,
            self.door_keys(),
        )
    }

    /// What the configuration allows that is worth saying at every start
    /// and by `--check-config`: names taken unchecked, and doors an
    /// acl_file cannot tell clients apart at.
    pub fn warnings(&self) -> Vec<String> {
        let rules = self.door_rules();
        let mut warnings = authentication::trusted_names(&rules);
        warnings.extend(acl_identity::unidentified_doors(
            self.acl_file.as_deref(),
            &rules,
            &self.doors,
        ));
        warnings
    }

    fn door_keys(&self) -> impl Iterator<Item = authentication::DoorKeys<'_>> {
        self.doors
            .iter()
            .map(|door| (door.kind(), door.name.as_str(), &door.authentication))
    }
}

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

const BROKER_KEYS: Keys = Keys {
    supported: &[
        "id",
        "log_level",
        "log_format",
        "pid_file",
        "mqtt",
        "limits",
        "qos2",
        "share",
        "storage",
        "session",
        "retained",
        "operations",
    ],
    not_yet: &[],
};

const MQTT_KEYS: Keys = Keys {
    supported: &[
        "listen",
        "min_protocol_version",
        "password_file",
        "allow_anonymous",
        "trust_unchecked_user_names",
        "acl_file",
    ],
    not_yet: &[],
};

/// Reads `broker:`, and returns beside it what channels are checked
/// against, which is known even where other parts of `broker:` are not.
pub(super) fn broker(
    f: &mut Findings,
    value: &Value,
    origin: &Origin<'_>,
) -> (Option<BrokerConfig>, Scope) {
    let Some(t) = table(f, "broker", value, &BROKER_KEYS) else {
        return (None, Scope::unknown());
    };
    let id = broker_id(f, t.get("id"));
    let log_level = log_level(f, t.get("log_level"));
    let log_format = log_format(f, t.get("log_format"));
    let pid_file = pid_file(f, t.get("pid_file"));
    let mqtt = mqtt(f, t.get("mqtt"));
    let limits = limits::parse(f, "broker.limits", t.get("limits"));
    let qos2 = exchanges::qos2(f, t.get("qos2"));
    let share = exchanges::share(f, t.get("share"));
    let session = exchanges::session(f, t.get("session"));
    let retained = persistence::retained(f, t.get("retained"));
    let operations = super::operations::parse(
        f,
        t.get("operations"),
        mqtt.as_ref().map(|m| m.doors.as_slice()),
    );
    let storage = storage::parse(f, t.get("storage"), limits.as_ref(), origin);
    // Both name a provider, so they are settled once storage is known; a
    // broken broker.storage has its own findings.
    let (session, retained) = match &storage {
        Some(known) => {
            let session = session.and_then(|(mut session, name)| {
                session.storage =
                    persistence::session_storage(name).resolve(f, known.as_ref(), "sessions")?;
                Some(session)
            });
            let retained = retained.and_then(|r| r.resolve(f, known.as_ref()));
            (session, retained)
        }
        None => (None, None),
    };
    let scope = Scope {
        limits: limits.clone(),
        storage: storage.clone(),
    };
    let broker = || {
        Some(BrokerConfig {
            id: id?,
            log_level: log_level?,
            log_format: log_format?,
            pid_file: pid_file?,
            mqtt: mqtt?,
            limits: limits?,
            qos2: qos2?,
            share: share?,
            session: session?,
            retained: retained?,
            storage: storage?,
            operations: operations?,
        })
    };
    (broker(), scope)
}

fn broker_id(f: &mut Findings, value: Option<&Value>) -> Option<String> {
    const PATH: &str = "broker.id";
    const HOW: &str = "name this broker with text, such as id: gateway-1; its log lines and metrics carry it, and there is no default";
    let Some(value) = value else {
        f.key(PATH, format!("missing: {HOW}"));
        return None;
    };
    match value {
        Value::String(s) if s.trim().is_empty() => {
            f.value(PATH, value, HOW);
            None
        }
        Value::String(s) if s.chars().any(char::is_control) => {
            f.value(PATH, value, "an id holds no control characters");
            None
        }
        Value::String(s) => Some(s.clone()),
        Value::Number(_) | Value::Bool(_) => {
            f.value(
                PATH,
                value,
                format!(
                    "an id is text: write it in quotes, such as id: \"{}\"",
                    show(value)
                ),
            );
            None
        }
        _ => {
            f.value(PATH, value, HOW);
            None
        }
    }
}

fn log_level(f: &mut Findings, value: Option<&Value>) -> Option<LogLevel> {
    let Some(value) = value else {
        return Some(LogLevel::Info);
    };
    let level = match value {
        Value::String(s) => match s.as_str() {
            "debug" => Some(LogLevel::Debug),
            "info" => Some(LogLevel::Info),
            "warn" => Some(LogLevel::Warn),
            "error" => Some(LogLevel::Error),
            _ => None,
        },
        _ => None,
    };
    if level.is_none() {
        f.value(
            "broker.log_level",
            value,
            "it is one of debug, info, warn or error; omit the key for info",
        );
    }
    level
}

fn log_format(f: &mut Findings, value: Option<&Value>) -> Option<LogFormat> {
    let Some(value) = value else {
        return Some(LogFormat::Text);
    };
    let format = match value {
        Value::String(s) => match s.as_str() {
            "text" => Some(LogFormat::Text),
            "logfmt" => Some(LogFormat::Logfmt),
            "json" => Some(LogFormat::Json),
            _ => None,
        },
        _ => None,
    };
    if format.is_none() {
        f.value(
            "broker.log_format",
            value,
            "it is one of text, logfmt or json; omit the key for text",
        );
    }
    format
}

/// `Some(None)` when absent: no pid file is written.
fn pid_file(f: &mut Findings, value: Option<&Value>) -> Option<Option<PathBuf>> {
    const PATH: &str = "broker.pid_file";
    let Some(value) = value else {
        return Some(None);
    };
    let Value::String(text) = value else {
        f.value(
            PATH,
            value,
            "it is an absolute file path, such as /run/saguin/saguin.pid; omit the key for no pid file",
        );
        return None;
    };
    let last = text.rsplit('/').next().unwrap_or("");
    let why = if !text.starts_with('/') {
        Some("it must be absolute, so two copies started from different directories cannot write different files; write it from /, such as /run/saguin/saguin.pid")
    } else if text.contains('\0') {
        Some("a path holds no NUL character")
    } else if last.is_empty() || last == "." || last == ".." {
        Some("it names a directory, not a file; end it with a file name, such as /run/saguin/saguin.pid")
    } else {
        None
    };
    match why {
        Some(why) => {
            f.value(PATH, value, why);
            None
        }
        None => Some(Some(PathBuf::from(text))),
    }
}

fn mqtt(f: &mut Findings, value: Option<&Value>) -> Option<MqttConfig> {
    let t = table(f, "broker.mqtt", value.unwrap_or(&Value::Null), &MQTT_KEYS)?;
    let doors = listen::parse(f, "broker.mqtt.listen", t.get("listen"));
    let min_protocol_version = min_protocol_version(f, t.get("min_protocol_version"));
    let authentication = authentication::keys(f, "broker.mqtt", &t);
    let trust_unchecked_user_names =
        authentication::trust_unchecked_user_names(f, t.get("trust_unchecked_user_names"));
    let acl_file = acl_file(f, t.get("acl_file"));
    if let Some(Some(path)) = &acl_file {
        f.named.acl_file = Some(path.clone());
    }
    // The doors' password files are read whatever else here is wrong: a
    // mistake in another key hides no fault in them.
    let mut mqtt = MqttConfig {
        doors: doors?,
        min_protocol_version: MinProtocolVersion::V311,
        authentication: authentication?,
        trust_unchecked_user_names: trust_unchecked_user_names?,
        acl_file: None,
    };
    let rules = mqtt.door_rules();
    authentication::check(f, &rules, mqtt.door_keys());
    mqtt.acl_file = acl_file?;
    let acl_file = mqtt.acl_file.as_deref();
    acl_identity::check(f, acl_file, &mqtt.authentication, &rules, &mqtt.doors);
    mqtt.min_protocol_version = min_protocol_version?;
    Some(mqtt)
}

/// `broker.mqtt.acl_file`: `Some(None)` when absent. The file itself is
/// read by [`super::acl_file::load`], against the channels: at start, and
/// by `--check-config` once the walk is over (`files::check`).
fn acl_file(f: &mut Findings, value: Option<&Value>) -> Option<Option<PathBuf>> {
    let Some(value) = value else {
        return Some(None);
    };
    match value {
        Value::String(path) if path.starts_with('/') => Some(Some(PathBuf::from(path))),
        _ => {
            f.value(
                "broker.mqtt.acl_file",
                value,
                "it is an absolute path to the authorization file, such as /etc/saguin/acl.yaml; omit the key to let every client do anything",
            );
            None
        }
    }
}

/// Accepts `"3.1.1"` (YAML reads the bare form as text too) and `5`,
/// quoted or not.
fn min_protocol_version(f: &mut Findings, value: Option<&Value>) -> Option<MinProtocolVersion> {
    let Some(value) = value else {
        return Some(MinProtocolVersion::V311);
    };
    let version = match value {
        Value::String(s) if s == "3.1.1" => Some(MinProtocolVersion::V311),
        Value::String(s) if s == "5" => Some(MinProtocolVersion::V5),
        Value::Number(n) if n.as_u64() == Some(5) => Some(MinProtocolVersion::V5),
        _ => None,
    };
    if version.is_none() {
        f.value(
            "broker.mqtt.min_protocol_version",
            value,
            "it is \"3.1.1\" (the default: MQTT 3.1.1 and 5 clients) or 5 (MQTT 5 only); MQTT 3.1 is never admitted",
        );
    }
    version
}
