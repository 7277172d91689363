//! The configuration this process resolved, as one document: every key
//! with the value in force, defaults filled in, files named by path and
//! never read. `saguin --check-config FILE --output` prints it as YAML
//! and `/v1/operations/config` serves it as JSON, from the same tree.
//!
//! Nothing here can carry a secret: every credential in the schema is a
//! path, but for a bridge's `password`, which is left out.

use serde_yaml::{Mapping, Value};

use super::broker::BrokerConfig;
use super::channels::{ChannelConfig, ChannelKind, Start};
use crate::bridge::BridgeSettings;
use crate::net::Listen;
use crate::store::{CommitPolicy, ProviderKind, ProviderSettings};

/// The sections `?section=` names, each a part of the document.
pub const SECTIONS: [&str; 7] = [
    "bridges",
    "channels",
    "limits",
    "listeners",
    "operations",
    "providers",
    "storage",
];

/// What the document is rendered from: a configuration's three parts.
pub struct Parts<'a> {
    pub broker: &'a BrokerConfig,
    pub channels: &'a [ChannelConfig],
    pub bridges: &'a [BridgeSettings],
}

/// The whole document, and each section of it, as JSON.
pub fn json(config: &Parts<'_>) -> crate::ops::ResolvedConfig {
    let whole = document(config);
    let sections = SECTIONS
        .iter()
        .map(|&name| (name, to_json(&section(config, &whole, name))))
        .collect();
    crate::ops::ResolvedConfig {
        whole: to_json(&whole),
        sections,
    }
}

/// The whole document as YAML: block mappings, with every scalar and
/// every list item written as JSON, which YAML reads as it is. Written
/// here rather than by the YAML library's emitter, which would cost the
/// binary more than this does.
pub fn yaml(config: &Parts<'_>) -> String {
    match document(config) {
        Value::Mapping(map) => yaml_block(&map),
        _ => String::new(),
    }
}

/// `map` as block-style YAML, as [`yaml`] writes the document: for any
/// other writer of configuration (`saguin migrate`).
pub fn yaml_block(map: &Mapping) -> String {
    let mut out = String::new();
    block(map, 0, &mut out);
    out
}

fn block(map: &Mapping, indent: usize, out: &mut String) {
    for (key, value) in map {
        let key = key.as_str().unwrap_or_default();
        let plain = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        out.push_str(&" ".repeat(indent));
        match plain {
            true => out.push_str(key),
            false => out.push_str(&crate::ops::json::string(key)),
        }
        out.push(':');
        match value {
            Value::Mapping(inner) if !inner.is_empty() => {
                out.push('\n');
                block(inner, indent + 2, out);
            }
            Value::Sequence(items) if !items.is_empty() => {
                out.push('\n');
                for item in items {
                    let lead = format!("{}- ", " ".repeat(indent + 2));
                    match item {
                        // A mapping in a list is a block of its own, its
                        // first key on the dash's line.
                        Value::Mapping(inner) if !inner.is_empty() => {
                            let mut item_text = String::new();
                            block(inner, indent + 4, &mut item_text);
                            out.push_str(&lead);
                            out.push_str(&item_text[indent + 4..]);
                        }
                        _ => {
                            out.push_str(&lead);
                            out.push_str(&to_json(item));
                            out.push('\n');
                        }
                    }
                }
            }
            other => {
                out.push(' ');
                out.push_str(&to_json(other));
                out.push('\n');
            }
        }
    }
}

fn document(config: &Parts<'_>) -> Value {
    let b = &config.broker;
    let mut broker = Mapping::new();
    put(&mut broker, "id", b.id.as_str());
    put(&mut broker, "log_level", b.log_level.as_str());
    put(&mut broker, "log_format", b.log_format.as_str());
    put(&mut broker, "pid_file", path(b.pid_file.as_deref()));
    put(&mut broker, "mqtt", mqtt(config));
    put(&mut broker, "limits", limits(config));
    let mut qos2 = Mapping::new();
    put(
        &mut qos2,
        "max_inflight_per_client",
        b.qos2.max_inflight_per_client,
    );
    put(
        &mut qos2,
        "expires_after",
        seconds(Some(u64::from(b.qos2.expires_after_s))),
    );
    put(&mut broker, "qos2", qos2);
    let mut share = Mapping::new();
    put(
        &mut share,
        "expires_after",
        seconds(b.share.expires_after_s.map(u64::from)),
    );
    put(&mut broker, "share", share);
    let mut session = Mapping::new();
    put(&mut session, "storage", b.session.storage.as_deref());
    put(
        &mut session,
        "ack_commit_interval",
        format!("{}ms", b.session.ack_commit_interval_ms),
    );
    put(&mut broker, "session", session);
    let mut retained = Mapping::new();
    put(&mut retained, "storage", b.retained.storage.as_deref());
    put(
        &mut retained,
        "retention_period",
        seconds(b.retained.retention_period_s),
    );
    put(&mut broker, "retained", retained);
    put(&mut broker, "storage", storage(config));
    put(&mut broker, "operations", operations(config));
    let mut root = Mapping::new();
    put(&mut root, "broker", broker);
    put(&mut root, "channels", channels(config));
    put(&mut root, "bridges", bridges(config));
    Value::Mapping(root)
}

/// One section, keyed by its name: an empty mapping where it is unused.
fn section(config: &Parts<'_>, whole: &Value, name: &str) -> Value {
    let part = match name {
        "providers" => providers(config),
        "listeners" => whole["broker"]["mqtt"]["listen"].clone(),
        "bridges" | "channels" => whole[name].clone(),
        _ => whole["broker"][name].clone(),
    };
    let part = match part {
        Value::Null => Value::Mapping(Mapping::new()),
        other => other,
    };
    let mut named = Mapping::new();
    put(&mut named, name, part);
    Value::Mapping(named)
}

fn mqtt(config: &Parts<'_>) -> Mapping {
    let m = &config.broker.mqtt;
    let mut kinds: Vec<(&str, Mapping)> = ["tcp", "ws", "unix"]
        .into_iter()
        .map(|kind| (kind, Mapping::new()))
        .collect();
    // Each door as it admits clients: its own keys, or the block's.
    for (door, rule) in m.doors.iter().zip(m.door_rules()) {
        let mut d = Mapping::new();
        match &door.listen {
            Listen::Tcp { address } => put(&mut d, "address", address.as_str()),
            Listen::WebSocket { address, origins } => {
                put(&mut d, "address", address.as_str());
                put(&mut d, "same_origin", origins.same_origin);
                let allowed: Vec<Value> = origins
                    .allowed()
                    .iter()
                    .map(|o| Value::String(o.clone()))
                    .collect();
                put(&mut d, "allowed_origins", Value::Sequence(allowed));
            }
            Listen::Unix {
                path: socket,
                mode,
                proxy_protocol,
            } => {
                put(&mut d, "path", path(Some(socket)));
                put(&mut d, "mode", format!("{mode:04o}"));
                put(&mut d, "proxy_protocol", *proxy_protocol);
            }
        }
        put(&mut d, "password_file", path(rule.password_file.as_deref()));
        put(&mut d, "allow_anonymous", rule.allow_anonymous);
        if let Some(tls) = &door.tls {
            let files = [&tls.cert_file, &tls.key_file];
            // What the handshake does: with no authorities to check a
            // certificate against, none is asked for, whatever the default.
            let required = tls.client_ca_file.is_some() && tls.require_certificate;
            let t = tls_block(files, tls.client_ca_file.as_deref(), required);
            put(&mut d, "tls", t);
        }
        if let Some((_, doors)) = kinds.iter_mut().find(|(kind, _)| *kind == door.kind()) {
            put(doors, door.name.as_str(), d);
        }
    }
    let mut listen = Mapping::new();
    for (kind, doors) in kinds {
        if !doors.is_empty() {
            put(&mut listen, kind, doors);
        }
    }
    let mut out = Mapping::new();
    put(&mut out, "listen", listen);
    let version = match m.min_protocol_version {
        super::broker::MinProtocolVersion::V311 => "3.1.1",
        super::broker::MinProtocolVersion::V5 => "5",
    };
    put(&mut out, "min_protocol_version", version);
    put(&mut out, "acl_file", path(m.acl_file.as_deref()));
    // The block's keys as written: `null` where each door decides.
    put(
        &mut out,
        "password_file",
        path(m.authentication.password_file.as_deref()),
    );
    put(
        &mut out,
        "allow_anonymous",
        m.authentication.allow_anonymous,
    );
    put(
        &mut out,
        "trust_unchecked_user_names",
        m.trust_unchecked_user_names,
    );
    out
}

fn limits(config: &Parts<'_>) -> Mapping {
    let l = &config.broker.limits;
    let mut out = Mapping::new();
    put(&mut out, "max_message_size", l.max_message_size_bytes);
    put(&mut out, "max_topic_length", l.max_topic_length);
    put(&mut out, "max_client_id_length", l.max_client_id_length);
    put(&mut out, "max_header_count", l.max_header_count);
    put(&mut out, "max_header_bytes", l.max_header_bytes);
    put(&mut out, "max_connections", l.max_connections);
    put(&mut out, "max_subscriptions", l.max_subscriptions);
    put(&mut out, "max_topic_levels", l.max_topic_levels);
    put(
        &mut out,
        "max_persistent_sessions",
        l.max_persistent_sessions,
    );
    put(&mut out, "max_shared_groups", l.max_shared_groups);
    put(
        &mut out,
        "max_session_expiry",
        seconds(Some(u64::from(l.max_session_expiry_s))),
    );
    put(
        &mut out,
        "max_keepalive",
        seconds(l.max_keepalive_s.map(u64::from)),
    );
    put(&mut out, "publish_rate", l.publish_rate_per_s);
    put(&mut out, "publish_bytes_rate", l.publish_bytes_per_s);
    put(
        &mut out,
        "write_timeout",
        l.write_timeout_ms.map(|ms| format!("{ms}ms")),
    );
    put(
        &mut out,
        "connect_timeout",
        seconds(Some(u64::from(l.connect_timeout_s))),
    );
    put(&mut out, "max_connect_size", l.max_connect_size_bytes);
    put(&mut out, "max_connect_rate", l.max_connect_rate_per_s);
    put(&mut out, "session_queue_bytes", l.session_queue_bytes);
    out
}

fn storage(config: &Parts<'_>) -> Value {
    let Some(s) = &config.broker.storage else {
        return Value::Null;
    };
    let mut out = Mapping::new();
    put(&mut out, "default", s.default_provider.as_str());
    put(
        &mut out,
        "default_retention_period",
        seconds(s.default_retention_period_s),
    );
    put(
        &mut out,
        "default_retention_bytes",
        s.default_retention_bytes,
    );
    put(&mut out, "providers", providers(config));
    Value::Mapping(out)
}

fn providers(config: &Parts<'_>) -> Value {
    let mut out = Mapping::new();
    let listed: &[ProviderSettings] = config
        .broker
        .storage
        .as_ref()
        .map_or(&[], |s| s.providers.as_slice());
    for p in listed {
        let mut m = Mapping::new();
        put(&mut m, "max_bytes", p.max_bytes);
        match &p.kind {
            ProviderKind::Redb {
                file_path,
                commit,
                checkpoint_interval_ms,
            } => {
                put(&mut m, "type", "redb");
                put(&mut m, "file_path", path(Some(file_path)));
                let (interval, records) = match commit {
                    CommitPolicy::Collect => (None, None),
                    CommitPolicy::PerPublish => (Some("none".to_string()), None),
                    CommitPolicy::Interval {
                        interval_ms,
                        max_records,
                    } => (Some(format!("{interval_ms}ms")), Some(*max_records)),
                };
                put(&mut m, "publish_commit_interval", interval);
                put(&mut m, "publish_commit_max_records", records);
                let checkpoint = format!("{checkpoint_interval_ms}ms");
                put(&mut m, "checkpoint_interval", checkpoint);
            }
            ProviderKind::Memory { snapshot_dir } => {
                put(&mut m, "type", "memory");
                put(&mut m, "snapshot_dir", path(snapshot_dir.as_deref()));
            }
        }
        put(&mut out, p.name.as_str(), m);
    }
    Value::Mapping(out)
}

/// A door's `tls` block: its files by path, never their contents.
fn tls_block(
    [cert_file, key_file]: [&std::path::PathBuf; 2],
    client_ca_file: Option<&std::path::Path>,
    require_certificate: bool,
) -> Mapping {
    let mut t = Mapping::new();
    put(&mut t, "cert_file", path(Some(cert_file)));
    put(&mut t, "key_file", path(Some(key_file)));
    put(&mut t, "client_ca_file", path(client_ca_file));
    put(&mut t, "require_certificate", require_certificate);
    t
}

fn operations(config: &Parts<'_>) -> Value {
    let Some(o) = &config.broker.operations else {
        return Value::Null;
    };
    let file = |f: &Option<std::sync::Arc<crate::ops::operators::Operators>>| {
        f.as_ref().map(|o| o.path.clone())
    };
    let mut tcp = Mapping::new();
    for door in &o.tcp {
        let mut d = Mapping::new();
        put(&mut d, "address", door.address.as_str());
        put(&mut d, "password_file", file(&door.password_file));
        if let Some(tls) = &door.tls {
            let files = [&tls.cert_file, &tls.key_file];
            let t = tls_block(
                files,
                tls.client_ca_file.as_deref(),
                tls.certificate_required,
            );
            put(&mut d, "tls", t);
        }
        put(&mut tcp, door.name.as_str(), d);
    }
    let mut unix = Mapping::new();
    for door in &o.unix {
        let mut d = Mapping::new();
        put(&mut d, "path", path(Some(&door.path)));
        put(&mut d, "mode", format!("{:04o}", door.mode));
        put(&mut d, "password_file", file(&door.password_file));
        put(&mut d, "proxy_protocol", door.proxy_protocol);
        put(&mut unix, door.name.as_str(), d);
    }
    let mut listen = Mapping::new();
    put(&mut listen, "tcp", tcp);
    put(&mut listen, "unix", unix);
    let mut out = Mapping::new();
    put(&mut out, "listen", listen);
    put(&mut out, "password_file", file(&o.password_file));
    put(
        &mut out,
        "min_scrape_interval",
        seconds(Some(u64::from(o.min_scrape_interval_s))),
    );
    put(&mut out, "max_connections", o.max_connections as u64);
    Value::Mapping(out)
}

fn channels(config: &Parts<'_>) -> Mapping {
    let mut out = Mapping::new();
    for c in config.channels {
        put(&mut out, c.name.as_str(), channel(c));
    }
    out
}

fn channel(c: &ChannelConfig) -> Mapping {
    let mut m = Mapping::new();
    let kind = match c.kind {
        ChannelKind::Append => "append",
        ChannelKind::Queue(_) => "queue",
        ChannelKind::Latest { .. } => "latest",
    };
    put(&mut m, "type", kind);
    put(&mut m, "filter", c.filter.as_str());
    put(&mut m, "storage", c.storage.as_str());
    put(&mut m, "retention_period", seconds(c.retention_period_s));
    put(&mut m, "retention_bytes", c.retention_bytes);
    put(&mut m, "max_bytes", c.max_bytes);
    match c.kind {
        ChannelKind::Append => {
            let start = match c.start {
                Start::Floor => "floor",
                Start::Tail => "tail",
            };
            put(&mut m, "start", start);
        }
        ChannelKind::Latest {
            deletion_retention_period_s,
        } => put(
            &mut m,
            "deletion_retention_period",
            seconds(deletion_retention_period_s),
        ),
        ChannelKind::Queue(q) => {
            put(
                &mut m,
                "visibility_timeout",
                seconds(Some(q.visibility_timeout_s)),
            );
            put(&mut m, "job_expires_after", seconds(q.job_expires_after_s));
            let mut retry = Mapping::new();
            put(&mut retry, "max_attempts", q.max_attempts);
            put(
                &mut retry,
                "backoff",
                format!("{:?}", q.backoff).to_lowercase(),
            );
            put(&mut retry, "backoff_base", seconds(Some(q.backoff_base_s)));
            put(&mut m, "retry", retry);
            let mut dlq = Mapping::new();
            put(
                &mut dlq,
                "retention_period",
                seconds(q.dlq_retention_period_s),
            );
            put(&mut dlq, "retention_bytes", q.dlq_retention_bytes);
            put(&mut m, "dead_letter", dlq);
        }
    }
    m
}

fn bridges(config: &Parts<'_>) -> Mapping {
    let mut out = Mapping::new();
    for b in config.bridges {
        let mut m = Mapping::new();
        put(&mut m, "peer", b.peer.url());
        put(&mut m, "client_id", b.client_id.as_str());
        put(&mut m, "username", b.username.as_deref());
        put(
            &mut m,
            "session_expiry",
            seconds(Some(u64::from(b.session_expiry_s))),
        );
        put(&mut m, "receive_maximum", b.receive_maximum);
        put(&mut m, "ack_interval", format!("{}ms", b.ack_interval_ms));
        let rules: Vec<Value> = b
            .rules
            .iter()
            .map(|r| {
                let mut rule = Mapping::new();
                put(&mut rule, "filter", r.filter.as_str());
                put(
                    &mut rule,
                    "direction",
                    format!("{:?}", r.direction).to_lowercase(),
                );
                put(&mut rule, "topic", r.topic.as_deref());
                Value::Mapping(rule)
            })
            .collect();
        put(&mut m, "topics", rules);
        put(&mut out, b.name.as_str(), m);
    }
    out
}

fn put(map: &mut Mapping, key: &str, value: impl ToValue) {
    map.insert(Value::String(key.to_string()), value.to_value());
}

/// What a key of the document may hold; `None` is `null`.
trait ToValue {
    fn to_value(self) -> Value;
}

macro_rules! to_value_by_into {
    ($($t:ty),*) => {
        $(impl ToValue for $t {
            fn to_value(self) -> Value {
                self.into()
            }
        })*
    };
}

to_value_by_into!(
    &str,
    String,
    bool,
    u16,
    u32,
    u64,
    Mapping,
    Value,
    Vec<Value>
);

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(self) -> Value {
        self.map_or(Value::Null, ToValue::to_value)
    }
}

fn path(path: Option<&std::path::Path>) -> Option<String> {
    path.map(|p| p.display().to_string())
}

/// A duration as the file writes one; `None` for none.
fn seconds(value: Option<u64>) -> Option<String> {
    value.map(|s| format!("{s}s"))
}

/// `value` as compact JSON. A YAML key that is not a string does not
/// occur in this document.
fn to_json(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => crate::ops::json::string(s),
        Value::Sequence(items) => {
            let items: Vec<String> = items.iter().map(to_json).collect();
            format!("[{}]", items.join(","))
        }
        Value::Mapping(map) => {
            let fields: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    let key = k.as_str().unwrap_or_default();
                    format!("{}:{}", crate::ops::json::string(key), to_json(v))
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Tagged(tagged) => to_json(&tagged.value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yaml_reads_back_as_the_document() {
        let mut rule = Mapping::new();
        put(&mut rule, "filter", "a/#");
        put(&mut rule, "topic", None::<String>);
        let mut inner = Mapping::new();
        put(&mut inner, "odd key: \"x\"", "line\nbreak");
        put(&mut inner, "empty", Mapping::new());
        let mut nested = Mapping::new();
        put(&mut nested, "deep", vec![Value::from("x"), Value::Null]);
        put(&mut nested, "then", 1u32);
        put(
            &mut inner,
            "rules",
            vec![
                Value::Mapping(rule),
                Value::Mapping(nested),
                Value::from(2u32),
            ],
        );
        put(&mut inner, "count", 3u32);
        let mut outer = Mapping::new();
        put(&mut outer, "broker", inner);
        let mut text = String::new();
        block(&outer, 0, &mut text);
        let read: Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(read, Value::Mapping(outer), "{text}");
    }

    #[test]
    fn a_door_without_client_authorities_requires_no_certificate() {
        let text = "broker:\n  id: a\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:8883\n        tls:\n          cert_file: /etc/saguin/cert.pem\n          key_file: /etc/saguin/key.pem\n";
        let config = crate::config::parse(text, "saguin.yaml").unwrap();
        let listeners = &json(&config.resolved_parts()).sections;
        let listeners = listeners.iter().find(|(name, _)| *name == "listeners");
        let json = &listeners.unwrap().1;
        assert!(json.contains("\"require_certificate\":false"), "{json}");
        assert!(json.contains("\"client_ca_file\":null"), "{json}");
    }

    #[test]
    fn json_escapes_strings_and_keeps_nesting() {
        let mut inner = Mapping::new();
        put(&mut inner, "a \"b\"", vec![Value::from(1u32), Value::Null]);
        let mut outer = Mapping::new();
        put(&mut outer, "x", inner);
        assert_eq!(
            to_json(&Value::Mapping(outer)),
            r#"{"x":{"a \"b\"":[1,null]}}"#
        );
    }
}
