//! The walk over the YAML tree: the top level, `broker:` and
//! `broker.mqtt:`, plus the helpers every part of the walk shares.
//!
//! Each step reports what it finds wrong into [`Findings`] and carries on,
//! so one run names every mistake in the file.

use std::path::PathBuf;

use serde_yaml::Value;

use super::channels::{self, ChannelConfig, Scope};
use super::include::Origin;
use super::{limits, listen, BrokerConfig, LogLevel, MinProtocolVersion, MqttConfig};

/// The mistakes found so far, each already written as one finding.
#[derive(Debug, Default)]
pub(super) struct Findings {
    list: Vec<String>,
    /// The `!include`d file being read, which every finding made meanwhile
    /// begins with; `None` for the configuration file itself, which the
    /// report names once at its head.
    file: Option<String>,
}

impl Findings {
    /// `<path> <value>: <why>`.
    pub(super) fn value(&mut self, path: &str, value: &Value, why: impl AsRef<str>) {
        self.push(format!("{path} {}: {}", show(value), why.as_ref()));
    }

    /// `<path> <value> <phrase>`, for a finding that reads as a sentence
    /// about the value (`"20h" is longer than ...`).
    pub(super) fn value_is(&mut self, path: &str, value: &Value, phrase: impl AsRef<str>) {
        self.push(format!("{path} {} {}", show(value), phrase.as_ref()));
    }

    /// `<path>: <why>`, for a finding about a key rather than a value.
    pub(super) fn key(&mut self, path: &str, why: impl AsRef<str>) {
        self.push(format!("{path}: {}", why.as_ref()));
    }

    /// A finding already written whole, such as a YAML syntax error.
    pub(super) fn whole(&mut self, finding: impl Into<String>) {
        self.push(finding.into());
    }

    /// Runs `body` with every finding it makes naming `file` first: the
    /// `!include`d file being read, or `None` for the configuration file.
    pub(super) fn within<T>(&mut self, file: Option<&str>, body: impl FnOnce(&mut Self) -> T) -> T {
        let outer = std::mem::replace(&mut self.file, file.map(str::to_string));
        let result = body(self);
        self.file = outer;
        result
    }

    fn push(&mut self, finding: String) {
        match &self.file {
            Some(file) => self.list.push(format!("{file}: {finding}")),
            None => self.list.push(finding),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn into_vec(self) -> Vec<String> {
        self.list
    }
}

/// Quotes a value as a finding shows it: strings in double quotes, numbers
/// and booleans bare, anything larger by its shape.
pub(super) fn show(value: &Value) -> String {
    const LONGEST: usize = 80;
    match value {
        Value::Null => "(empty)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > LONGEST => {
            let head: String = s.chars().take(LONGEST).collect();
            format!("{head:?}...")
        }
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "(a list)".to_string(),
        Value::Mapping(_) => "(a mapping)".to_string(),
        Value::Tagged(t) => format!("(tagged {})", t.tag),
    }
}

/// `parent.key`, or `key` at the top.
pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Which keys a mapping may hold.
pub(super) struct Keys {
    /// Keys this version reads.
    pub(super) supported: &'static [&'static str],
    /// Keys of the full configuration that this version does not implement.
    pub(super) not_yet: &'static [&'static str],
}

/// A mapping whose keys have been checked: only supported keys remain.
pub(super) struct Table<'a> {
    entries: Vec<(&'a str, &'a Value)>,
}

impl<'a> Table<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }
}

/// Reads `value` as a mapping with the given keys, reporting every other
/// key. An empty value (every child commented out) reads as an empty
/// mapping. Returns `None`, with a finding, when the value is not a
/// mapping at all.
pub(super) fn table<'a>(
    f: &mut Findings,
    path: &str,
    value: &'a Value,
    keys: &Keys,
) -> Option<Table<'a>> {
    let mapping = match value {
        Value::Null => {
            return Some(Table {
                entries: Vec::new(),
            })
        }
        Value::Mapping(m) => m,
        other => {
            let here = if path.is_empty() { "the file" } else { path };
            if is_include(other) {
                f.value(here, other, MISPLACED_INCLUDE);
            } else {
                f.value(
                    here,
                    other,
                    format!(
                        "a block of keys is expected here ({})",
                        keys.supported.join(", ")
                    ),
                );
            }
            return None;
        }
    };
    let mut entries = Vec::new();
    for (k, v) in mapping {
        let Value::String(name) = k else {
            f.key(
                &join(path, &show(k)),
                "a key is a name written as text; this one is not",
            );
            continue;
        };
        let here = join(path, name);
        if keys.supported.contains(&name.as_str()) {
            entries.push((name.as_str(), v));
        } else if keys.not_yet.contains(&name.as_str()) {
            f.key(
                &here,
                "recognised, but not supported by this version of Sagüin yet, so nothing it says would be in force; remove it",
            );
        } else {
            f.key(&here, unknown_key(name, keys));
        }
    }
    Some(Table { entries })
}

/// Why an `!include` written anywhere but in the two lists is refused.
const MISPLACED_INCLUDE: &str = "!include is read only as an entry of the list form of channels or of broker.storage.providers, such as channels: [!include channels/telemetry.yaml]; write the block here in place";

/// Whether `value` is tagged `!include`.
pub(super) fn is_include(value: &Value) -> bool {
    matches!(value, Value::Tagged(t) if t.tag == "include")
}

fn unknown_key(name: &str, keys: &Keys) -> String {
    let near = keys
        .supported
        .iter()
        .chain(keys.not_yet)
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min();
    let listed = if keys.supported.is_empty() {
        "this block takes no keys in this version".to_string()
    } else {
        format!("the keys here are {}", keys.supported.join(", "))
    };
    match near {
        Some((_, k)) => format!("not a key Sagüin takes here; did you mean {k}? ({listed})"),
        None => format!("not a key Sagüin takes here; {listed}"),
    }
}

/// Levenshtein distance, for "did you mean" hints on short key names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            let cost = usize::from(ca != *cb);
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + cost);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// A YAML syntax error as a finding with its line and column.
pub(super) fn syntax_finding(e: &serde_yaml::Error) -> String {
    let message = e.to_string();
    match e.location() {
        Some(at) => {
            let suffix = format!(" at line {} column {}", at.line(), at.column());
            let message = message.strip_suffix(&suffix).unwrap_or(&message);
            format!(
                "line {}, column {}: not valid YAML: {message}",
                at.line(),
                at.column()
            )
        }
        None => format!("not valid YAML: {message}"),
    }
}

const ROOT_KEYS: Keys = Keys {
    supported: &["broker", "channels"],
    not_yet: &["bridges"],
};

const BROKER_KEYS: Keys = Keys {
    supported: &[
        "id",
        "log_level",
        "pid_file",
        "mqtt",
        "limits",
        "qos2",
        "share",
        "storage",
        "session",
        "retained",
    ],
    not_yet: &["operations"],
};

const MQTT_KEYS: Keys = Keys {
    supported: &["listen", "min_protocol_version", "acl_file"],
    not_yet: &["password_file", "allow_anonymous"],
};

/// Walks the whole tree and returns the broker's configuration and its
/// channels, or every finding.
pub(super) fn root(
    value: &Value,
    origin: &Origin<'_>,
) -> Result<(BrokerConfig, Vec<ChannelConfig>), Vec<String>> {
    let mut f = Findings::default();
    // An empty file reads as an empty mapping, and is refused for its
    // missing broker.id like any other file without one.
    let parsed = table(&mut f, "", value, &ROOT_KEYS).and_then(|t| {
        let (broker, scope) = broker(&mut f, t.get("broker").unwrap_or(&Value::Null), origin);
        let channels = channels::parse(&mut f, t.get("channels"), &scope, origin);
        Some((broker?, channels?))
    });
    match parsed {
        Some(parsed) if f.is_empty() => Ok(parsed),
        _ if !f.is_empty() => Err(f.into_vec()),
        // Every path that yields None records a finding first; this arm
        // keeps a slip in that rule from becoming an accepted file.
        _ => Err(vec![
            "the configuration could not be read, for a reason this version failed to name"
                .to_string(),
        ]),
    }
}

/// Reads `broker:`, and returns beside it what channels are checked
/// against, which is known even where other parts of `broker:` are not.
fn broker(f: &mut Findings, value: &Value, origin: &Origin<'_>) -> (Option<BrokerConfig>, Scope) {
    let Some(t) = table(f, "broker", value, &BROKER_KEYS) else {
        return (None, Scope::unknown());
    };
    let id = broker_id(f, t.get("id"));
    let log_level = log_level(f, t.get("log_level"));
    let pid_file = pid_file(f, t.get("pid_file"));
    let mqtt = mqtt(f, t.get("mqtt"));
    let limits = limits::parse(f, "broker.limits", t.get("limits"));
    let qos2 = super::exchanges::qos2(f, t.get("qos2"));
    let share = super::exchanges::share(f, t.get("share"));
    let session = super::exchanges::session(f, t.get("session"));
    let retained = super::persistence::retained(f, t.get("retained"));
    let storage = super::storage::parse(f, t.get("storage"), limits.as_ref(), origin);
    // Both name a provider, so they are settled once storage is known; a
    // broken broker.storage has its own findings.
    let (session, retained) = match &storage {
        Some(known) => {
            let session = session.and_then(|(mut session, name)| {
                session.storage = super::persistence::session_storage(name).resolve(
                    f,
                    known.as_ref(),
                    "sessions",
                )?;
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
            pid_file: pid_file?,
            mqtt: mqtt?,
            limits: limits?,
            qos2: qos2?,
            share: share?,
            session: session?,
            retained: retained?,
            storage: storage?,
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
    let tcp = listen::parse(f, "broker.mqtt.listen", t.get("listen"));
    let min_protocol_version = min_protocol_version(f, t.get("min_protocol_version"));
    let acl_file = acl_file(f, t.get("acl_file"));
    Some(MqttConfig {
        tcp: tcp?,
        min_protocol_version: min_protocol_version?,
        acl_file: acl_file?,
    })
}

/// `broker.mqtt.acl_file`: `Some(None)` when absent. The file itself is
/// read by [`super::acl_file::load`], against the channels.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_shown_by_kind() {
        assert_eq!(show(&Value::String("verbose".into())), "\"verbose\"");
        assert_eq!(show(&Value::Number(5.into())), "5");
        assert_eq!(show(&Value::Null), "(empty)");
        assert_eq!(show(&Value::Bool(true)), "true");
        assert_eq!(show(&Value::Sequence(vec![])), "(a list)");
        let long = "x".repeat(200);
        assert_eq!(show(&Value::String(long)).len(), 80 + 2 + 3);
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("max_conections", "max_connections"), 1);
        assert_eq!(edit_distance("loglevel", "log_level"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
