//! mosquitto's bridges (`connection` and the options under it) as this
//! broker's `bridges:` blocks.
//!
//! A `topic pattern direction qos local-prefix remote-prefix` line is a
//! rule whose filter is the pattern behind one prefix and whose topic
//! template is the pattern behind the other, its `+` levels written `$1..$N`
//! and its `#` written `$#`, so prefix remapping carries over exactly. One
//! `both` line with two different prefixes becomes an `in` rule and an
//! `out` rule, since a `both` rule keeps the topic as it is.

use std::path::Path;

use serde_yaml::{Mapping, Value};

use super::conf::Line;
use super::listeners::absolute;
use super::put;
use super::Failure;
use crate::codec::topic::is_valid_topic_filter;

/// The options mosquitto reads for the bridge they follow.
pub const KEYS: &[&str] = &[
    "address",
    "addresses",
    "bridge_alpn",
    "bridge_attempt_unsubscribe",
    "bridge_bind_address",
    "bridge_cafile",
    "bridge_capath",
    "bridge_certfile",
    "bridge_identity",
    "bridge_insecure",
    "bridge_keyfile",
    "bridge_max_packet_size",
    "bridge_outgoing_retain",
    "bridge_protocol_version",
    "bridge_psk",
    "bridge_require_ocsp",
    "bridge_tls_version",
    "cleansession",
    "clientid",
    "idle_timeout",
    "keepalive_interval",
    "local_cleansession",
    "local_clientid",
    "local_password",
    "local_username",
    "notification_topic",
    "notifications",
    "notifications_local_only",
    "password",
    "remote_clientid",
    "remote_password",
    "remote_username",
    "restart_timeout",
    "round_robin",
    "start_type",
    "threshold",
    "topic",
    "try_private",
    "username",
];

/// One `connection` block as written.
#[derive(Clone, Debug)]
pub struct Bridge {
    pub line: Line,
    pub options: Vec<Line>,
}

/// What became of one bridge.
pub struct Converted {
    pub name: String,
    pub block: Mapping,
    pub outcomes: Vec<(Line, String)>,
}

impl Bridge {
    fn last(&self, keys: &[&str]) -> Option<&Line> {
        self.options
            .iter()
            .rev()
            .find(|l| keys.contains(&l.key.as_str()))
    }
}

/// The bridge block for `bridge`; `host` is this machine's name, for the
/// client id mosquitto would have made up.
pub fn convert(bridge: &Bridge, host: &str, base: &Path) -> Result<Converted, Failure> {
    let name = bridge.line.value();
    if name.is_empty() || name.contains(['/', '+', '#', ' ']) {
        return Err(bridge.line.fail("a bridge's name here is one topic level of letters, digits, ., - and _; rename the connection"));
    }
    let key = format!("bridges.{name}");
    let mut outcomes: Vec<(Line, String)> = Vec::new();
    let mut block = Mapping::new();

    let address = bridge.last(&["address", "addresses"]).ok_or_else(|| {
        bridge
            .line
            .fail("a connection needs an address; mosquitto refuses one without")
    })?;
    let (host_port, others) = first_address(address)?;
    let tls_ca = bridge.last(&["bridge_cafile"]);
    let tls_path = bridge.last(&["bridge_capath"]);
    let is_tls = tls_ca.is_some() || tls_path.is_some();
    let scheme = if is_tls { "tls" } else { "tcp" };
    put(&mut block, "peer", format!("{scheme}://{host_port}"));
    outcomes.push((
        address.clone(),
        match others.as_slice() {
            [] => format!("became {key}.peer {scheme}://{host_port}"),
            _ => format!(
                "became {key}.peer {scheme}://{host_port}; ACTION: not carried: {}; a bridge here dials one peer, so put the brokers behind one name or address (a DNS name with several records, or a load balancer)",
                others.join(", ")
            ),
        },
    ));

    let client_id = match bridge.last(&["remote_clientid", "clientid"]) {
        Some(line) => {
            outcomes.push((line.clone(), format!("became {key}.client_id")));
            line.value()
        }
        None => format!("{name}.{host}"),
    };
    put(&mut block, "client_id", client_id.as_str());
    outcomes.push((
        bridge.line.clone(),
        format!("became {key}, client id {client_id:?} at the peer"),
    ));
    for (keys, yaml) in [
        (&["remote_username", "username"][..], "username"),
        (&["remote_password", "password"][..], "password"),
    ] {
        if let Some(line) = bridge.last(keys) {
            put(&mut block, yaml, line.value());
            outcomes.push((line.clone(), format!("became {key}.{yaml}")));
        }
    }
    for (line, yaml) in [
        (tls_ca, "ca_file"),
        (bridge.last(&["bridge_certfile"]), "cert_file"),
        (bridge.last(&["bridge_keyfile"]), "key_file"),
    ] {
        let Some(line) = line else { continue };
        if !is_tls {
            outcomes.push((line.clone(), "not carried: without bridge_cafile or bridge_capath mosquitto dialled this peer without TLS, so no certificate was presented".into()));
            continue;
        }
        let (path, note) = absolute(base, line);
        put(&mut block, yaml, path.display().to_string());
        outcomes.push((
            line.clone(),
            format!("became {key}.{yaml}{}", note.unwrap_or_default()),
        ));
    }
    if let Some(line) = tls_path {
        let outcome = match tls_ca {
            Some(_) => "not carried: bridge_cafile names the authorities the peer is checked against".to_string(),
            None => format!("became {key}.peer tls://, checked against the system's authorities; ACTION: if the peer's authority is only in {}, name it in one file as ca_file", line.value()),
        };
        outcomes.push((line.clone(), outcome));
    }

    let mut rules: Vec<Value> = Vec::new();
    for line in bridge.options.iter().filter(|l| l.key == "topic") {
        let (made, outcome) = topic_rules(line)?;
        rules.extend(made);
        outcomes.push((line.clone(), outcome));
    }
    if rules.is_empty() {
        return Err(bridge
            .line
            .fail("a connection with no topic line carries nothing; mosquitto refuses it too"));
    }
    put(&mut block, "topics", rules);

    for option in &bridge.options {
        if outcomes.iter().any(|(l, _)| l == option) {
            continue;
        }
        outcomes.push((option.clone(), other_option(option, &key)?));
    }
    Ok(Converted {
        name,
        block,
        outcomes,
    })
}

/// The first `host[:port]` of an `address` line, and the others.
fn first_address(line: &Line) -> Result<(String, Vec<String>), Failure> {
    let with_port = |written: &str| -> Result<String, Failure> {
        // An IPv6 address carries its port after the last colon, and
        // mosquitto then requires it.
        match written.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') || host.starts_with('[') => {
                port.parse::<u16>().map_err(|_| {
                    line.fail(format!("{written:?}: the port is a number from 1 to 65535"))
                })?;
                Ok(written.to_string())
            }
            Some((host, port)) => Ok(format!("[{}]:{port}", host.trim_matches(['[', ']']))),
            None => Ok(format!("{written}:1883")),
        }
    };
    let mut all = line.args.iter().map(|a| with_port(a));
    let first = all
        .next()
        .ok_or_else(|| line.fail("address names no host"))??;
    let others = all.collect::<Result<Vec<_>, _>>()?;
    Ok((first, others))
}

/// The rules one `topic` line makes, and what to report.
fn topic_rules(line: &Line) -> Result<(Vec<Value>, String), Failure> {
    let unquote = |s: &str| {
        if s == "\"\"" {
            String::new()
        } else {
            s.to_string()
        }
    };
    let args = &line.args;
    let pattern = args
        .first()
        .map(|p| unquote(p))
        .ok_or_else(|| line.fail("topic names no pattern"))?;
    let direction = args.get(1).map(String::as_str).unwrap_or("out");
    if !["in", "out", "both"].contains(&direction) {
        return Err(line.fail(format!("{direction:?} is not a direction: in, out or both")));
    }
    let qos = args.get(2).map(String::as_str).unwrap_or("0");
    if !["0", "1", "2"].contains(&qos) {
        return Err(line.fail(format!("{qos:?} is not a QoS: 0, 1 or 2")));
    }
    let (local, remote) = match args.get(3..) {
        Some([l, r]) => (unquote(l), unquote(r)),
        Some([]) | None => (String::new(), String::new()),
        Some(_) => {
            return Err(line.fail(
                "a topic line takes a local prefix and a remote prefix together, or neither",
            ))
        }
    };
    if pattern.is_empty() && (local.is_empty() || remote.is_empty()) {
        return Err(line.fail(
            "an empty pattern remaps one topic and needs both prefixes, as mosquitto requires",
        ));
    }
    let (local_filter, remote_filter) = (format!("{local}{pattern}"), format!("{remote}{pattern}"));
    for filter in [&local_filter, &remote_filter] {
        if !is_valid_topic_filter(filter) {
            return Err(line.fail(format!("{filter:?} (prefix and pattern together) is not a well-formed MQTT topic filter; end a prefix with /")));
        }
    }
    let rule = |filter: &str, direction: &str, topic: Option<String>| {
        let mut rule = Mapping::new();
        put(&mut rule, "filter", filter);
        put(&mut rule, "direction", direction);
        if let Some(topic) = topic {
            put(&mut rule, "topic", topic);
        }
        Value::Mapping(rule)
    };
    let out = || rule(&local_filter, "out", Some(template(&remote, &pattern)));
    let into = || rule(&remote_filter, "in", Some(template(&local, &pattern)));
    let mut rules = match (direction, local == remote) {
        ("both", true) if local_filter.starts_with('$') => vec![into(), out()],
        ("both", true) => vec![rule(&local_filter, "both", None)],
        ("both", false) => vec![into(), out()],
        ("in", _) => vec![into()],
        _ => vec![out()],
    };
    // A bridge publishes into no `$` topic at either end here.
    let dollar = |r: &Value| {
        let first = r
            .get("topic")
            .and_then(Value::as_str)
            .and_then(|t| t.split('/').next());
        first.is_some_and(|level| {
            let substitution =
                level == "$#" || level.len() > 1 && level[1..].bytes().all(|b| b.is_ascii_digit());
            level.starts_with('$') && !substitution
        })
    };
    if rules.iter().any(dollar) {
        rules.retain(|r| !dollar(r));
        let left = match rules.as_slice() {
            [] => "the line carries nothing".to_string(),
            [only] => format!(
                "its {} rule is kept",
                only.get("direction")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
            _ => String::new(),
        };
        return Ok((rules, format!("ACTION: not carried towards the $ side: a bridge publishes into no $ topic here; {left}")));
    }
    let qos_note = match qos {
        "0" => "",
        _ => "; differs: every record crosses at QoS 1 and is acknowledged both ways, and while the link is down broadcast bound for the peer is dropped where mosquitto queued QoS 1 and 2 for it; declare an append channel over the filter to keep records through an outage",
    };
    let shape = match rules.len() {
        1 => format!(
            "became {} {direction} rule, filter {}",
            if direction == "both" { "a" } else { "an" },
            rule_filter(&rules[0])
        ),
        _ => format!("became an in rule (filter {remote_filter}) and an out rule (filter {local_filter}), as a both rule here keeps the topic unchanged"),
    };
    Ok((rules, format!("{shape}{qos_note}")))
}

fn rule_filter(rule: &Value) -> String {
    rule.get("filter")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The topic a record matching `pattern` takes behind `prefix`: the
/// pattern's `+` levels as `$1..$N`, its `#` as `$#`.
fn template(prefix: &str, pattern: &str) -> String {
    let mut plus = 0;
    let levels: Vec<String> = pattern
        .split('/')
        .map(|level| match level {
            "+" => {
                plus += 1;
                format!("${plus}")
            }
            "#" => "$#".to_string(),
            other => other.to_string(),
        })
        .collect();
    match pattern.is_empty() {
        true => prefix.to_string(),
        false => format!("{prefix}{}", levels.join("/")),
    }
}

/// What becomes of a bridge option without a key of its own here.
fn other_option(option: &Line, key: &str) -> Result<String, Failure> {
    let value = option.value();
    Ok(match option.key.as_str() {
        "round_robin" => "not carried: a bridge here dials its one peer (see its address line)".into(),
        "cleansession" if value == "true" => format!("differs: {key} keeps its session at the peer across reconnections (session_expiry, 1d by default), which clean sessions did not"),
        "cleansession" => format!("carried: {key} keeps its session at the peer (session_expiry, 1d by default)"),
        "local_cleansession" => "not carried: the bridge's sessions here are the broker's own".into(),
        "keepalive_interval" => "not carried: the link pings every 30 s and drops a peer silent for 45 s".into(),
        "try_private" => "not carried: loops are stopped by a label the broker puts on what crossed, and No Local at the peer".into(),
        "notifications" | "notifications_local_only" | "notification_topic" => "not carried: no $SYS state topic is published; the link going up and down is logged at warn".into(),
        "local_clientid" | "local_username" | "local_password" => "not carried: the bridge's sessions here are the broker's own, which no password file or acl_file applies to".into(),
        "bridge_protocol_version" => "not carried: the bridge dials MQTT 5 and falls back to 3.1.1 for a peer that refuses it".into(),
        "bridge_insecure" if value == "true" => "ACTION: not carried: the peer's certificate must name its host here; give the peer a certificate that does".into(),
        "bridge_insecure" => "carried: the peer's certificate is always checked".into(),
        "bridge_tls_version" => "not carried: TLS 1.2 or 1.3, whichever the peer offers".into(),
        "bridge_outgoing_retain" => "not carried: the RETAIN flag is cleared only towards a peer that says it keeps no retained messages".into(),
        "restart_timeout" => "not carried: a failed dial waits from 250 ms, doubling to 30 s".into(),
        "start_type" | "idle_timeout" | "threshold" => "not carried: the link is dialled at start and kept up".into(),
        "bridge_attempt_unsubscribe" => "not carried".into(),
        "bridge_bind_address" => "not carried: the link leaves by the route the kernel chooses".into(),
        "bridge_max_packet_size" => "not carried: the peer's own Maximum Packet Size is kept to".into(),
        "bridge_identity" | "bridge_psk" => "ACTION: not carried: TLS with pre-shared keys is not dialled; use certificates".into(),
        "bridge_alpn" | "bridge_require_ocsp" => "not carried".into(),
        other => return Err(option.fail(format!("{other} is not an option of a bridge"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(key: &str, value: &str) -> Line {
        Line {
            file: "/etc/mosquitto/mosquitto.conf".into(),
            number: 1,
            key: key.into(),
            args: value.split(' ').map(str::to_string).collect(),
        }
    }

    fn rules(value: &str) -> Vec<(String, String, Option<String>)> {
        let (made, _) = topic_rules(&line("topic", value)).unwrap();
        made.iter()
            .map(|r| {
                let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
                (
                    text("filter").unwrap(),
                    text("direction").unwrap(),
                    text("topic"),
                )
            })
            .collect()
    }

    fn rule(
        filter: &str,
        direction: &str,
        topic: Option<&str>,
    ) -> (String, String, Option<String>) {
        (filter.into(), direction.into(), topic.map(str::to_string))
    }

    #[test]
    fn prefixes_become_templates_both_ways() {
        assert_eq!(rules("#"), [rule("#", "out", Some("$#"))]);
        assert_eq!(
            rules("sensors/+/temp in 1 local/ remote/"),
            [rule(
                "remote/sensors/+/temp",
                "in",
                Some("local/sensors/$1/temp")
            )]
        );
        assert_eq!(
            rules("# out 1 gw/ fleet/gw-1/"),
            [rule("gw/#", "out", Some("fleet/gw-1/$#"))]
        );
        assert_eq!(rules("alerts/# both 2"), [rule("alerts/#", "both", None)]);
        assert_eq!(
            rules("# both 2 local/topic/ remote/topic/"),
            [
                rule("remote/topic/#", "in", Some("local/topic/$#")),
                rule("local/topic/#", "out", Some("remote/topic/$#")),
            ]
        );
        // The man page's own example: one remote $SYS topic remapped in.
        assert_eq!(
            rules("clients/total in 0 test/mosquitto/org/ $SYS/broker/"),
            [rule(
                "$SYS/broker/clients/total",
                "in",
                Some("test/mosquitto/org/clients/total")
            )]
        );
        // Nothing is published into a $ topic at either end.
        assert_eq!(
            rules("# both 0 local/ $SYS/"),
            [rule("$SYS/#", "in", Some("local/$#"))]
        );
        assert!(rules("# out 0 \"\" $SYS/").is_empty());
        // An empty pattern remaps one topic to another.
        assert_eq!(
            rules("\"\" out 0 local/state remote/state"),
            [rule("local/state", "out", Some("remote/state"))]
        );
    }

    #[test]
    fn malformed_topic_lines_are_refused_naming_the_line() {
        for bad in [
            "# sideways",
            "# in 3",
            "# in 1 only-one-prefix",
            "# out 0 local remote/",
            "\"\" out 0 \"\" remote/",
        ] {
            let error = topic_rules(&line("topic", bad)).unwrap_err().to_string();
            assert!(
                error.starts_with("/etc/mosquitto/mosquitto.conf, line 1: "),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn several_addresses_keep_the_first_and_report_the_rest() {
        let (first, others) =
            first_address(&line("address", "a.example:1884 b.example [::1]:1885")).unwrap();
        assert_eq!(first, "a.example:1884");
        assert_eq!(others, ["b.example:1883", "[::1]:1885"]);
        assert_eq!(
            first_address(&line("address", "::1:1886")).unwrap().0,
            "[::1]:1886"
        );
    }
}
