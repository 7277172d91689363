//! `bridges:`: each named block is one link to another broker, read into
//! the settings the bridge owns, every mistake named with its key.

use serde_yaml::Value;

use super::channels;
use super::findings::{join, Findings};
use super::table::{table, Keys};
use super::values::{duration_ms, whole_number, NoneRule};
use crate::bridge::{template, BridgeSettings, Direction, Peer, PeerTls, Rule};
use crate::codec::topic::is_valid_topic_filter;

const BRIDGE_KEYS: Keys = Keys {
    supported: &[
        "peer",
        "client_id",
        "username",
        "password",
        "session_expiry",
        "receive_maximum",
        "ack_interval",
        "ca_file",
        "cert_file",
        "key_file",
        "topics",
    ],
    not_yet: &[],
};

const RULE_KEYS: Keys = Keys {
    supported: &["filter", "direction", "topic"],
    not_yet: &[],
};

const DEFAULT_SESSION_EXPIRY_S: u32 = 86_400;
const DEFAULT_RECEIVE_MAXIMUM: u16 = 20;
const DEFAULT_ACK_INTERVAL_MS: u64 = 5;
/// MQTT's own ceiling for a session expiry, less the value meaning "never".
const MAX_SESSION_EXPIRY_S: u64 = u32::MAX as u64 - 1;

/// Reads `bridges:`; absent is none.
pub(super) fn parse(f: &mut Findings, value: Option<&Value>) -> Option<Vec<BridgeSettings>> {
    let Some(value) = value else {
        return Some(Vec::new());
    };
    let Value::Mapping(blocks) = value else {
        if value.is_null() {
            return Some(Vec::new());
        }
        f.value(
            "bridges",
            value,
            "a block of named bridges is expected here",
        );
        return None;
    };
    let before = f.len();
    let mut bridges = Vec::new();
    for (name, block) in blocks {
        let Some(name) = name.as_str() else {
            f.key("bridges", "a bridge's name is written as text");
            continue;
        };
        if let Some(bridge) = bridge(f, name, block) {
            bridges.push(bridge);
        }
    }
    for (at, a) in bridges.iter().enumerate() {
        if let Some(b) = bridges[..at].iter().find(|b| {
            b.client_id == a.client_id && (&b.peer.host, b.peer.port) == (&a.peer.host, a.peer.port)
        }) {
            f.key(
                &format!("bridges.{}.client_id", a.name),
                format!(
                    "{:?} is also bridge {:?}'s at the same peer; the peer closes one session when the other connects, so neither would carry anything - give each its own",
                    a.client_id, b.name
                ),
            );
        }
    }
    (f.len() == before).then_some(bridges)
}

fn bridge(f: &mut Findings, name: &str, block: &Value) -> Option<BridgeSettings> {
    let path = join("bridges", name);
    let t = table(f, &path, block, &BRIDGE_KEYS)?;
    let before = f.len();
    let peer = match t.get("peer") {
        Some(v) => peer(f, &join(&path, "peer"), v),
        None => {
            f.key(
                &join(&path, "peer"),
                "required: the broker to dial, such as tcp://mqtt.example.com:1883",
            );
            None
        }
    };
    let client_id = match t.get("client_id") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(v) => {
            f.value(
                &join(&path, "client_id"),
                v,
                "a non-empty name is expected: this broker's identity at the peer",
            );
            None
        }
        None => {
            f.key(
                &join(&path, "client_id"),
                "required, with no default: it decides which session the peer resumes, and an invented one could be shared by two gateways",
            );
            None
        }
    };
    let username = text(f, &path, &t, "username");
    let password = text(f, &path, &t, "password");
    let peer = peer.map(|mut peer| {
        let before = f.len();
        peer.tls = peer_tls(f, &path, &t, peer.tls.is_some());
        if let (Some(tls), true) = (&peer.tls, f.len() == before) {
            let named = (name.to_string(), peer.host.clone(), tls.clone());
            f.named.bridge_tls.push(named);
        }
        peer
    });
    let session_expiry_s = session_expiry(f, &path, t.get("session_expiry"));
    let receive_maximum = receive_maximum(f, &path, t.get("receive_maximum"));
    let ack_interval_ms = ack_interval(f, &path, t.get("ack_interval"));
    let rules = rules(f, &path, t.get("topics"));
    if f.len() != before {
        return None;
    }
    Some(BridgeSettings {
        name: name.to_string(),
        peer: peer?,
        client_id: client_id?,
        username,
        password,
        session_expiry_s: session_expiry_s?,
        receive_maximum: receive_maximum?,
        ack_interval_ms: ack_interval_ms?,
        rules: rules?,
    })
}

fn text(f: &mut Findings, path: &str, t: &super::table::Table<'_>, key: &str) -> Option<String> {
    match t.get(key)? {
        Value::String(s) => Some(s.clone()),
        v => {
            f.value(&join(path, key), v, "text is expected here");
            None
        }
    }
}

/// The certificate keys: read for a `tls://` peer, refused beside a
/// `tcp://` one, where they would read as a link being verified when
/// nothing is. `Some` for a `tls://` peer (whose files are all valid).
fn peer_tls(
    f: &mut Findings,
    path: &str,
    t: &super::table::Table<'_>,
    is_tls: bool,
) -> Option<PeerTls> {
    let mut files = [None, None, None];
    for (at, key) in ["ca_file", "cert_file", "key_file"].into_iter().enumerate() {
        let Some(value) = t.get(key) else { continue };
        let here = join(path, key);
        if !is_tls {
            f.key(&here, "only a tls:// or wss:// peer has a handshake for it to take part in; dial one of those or remove it");
            continue;
        }
        let example = ["peer-ca.pem", "bridge.pem", "bridge-key.pem"][at];
        files[at] = super::tls::file(f, &here, value, example);
    }
    let [ca_file, cert_file, key_file] = files;
    let identity = match (cert_file, key_file) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (Some(_), None) => {
            f.key(
                &join(path, "key_file"),
                "required beside cert_file: a certificate cannot be presented without its key",
            );
            None
        }
        (None, Some(_)) => {
            f.key(
                &join(path, "cert_file"),
                "required beside key_file: a key with no certificate names nobody",
            );
            None
        }
    };
    is_tls.then_some(PeerTls { ca_file, identity })
}

fn peer(f: &mut Findings, path: &str, value: &Value) -> Option<Peer> {
    let Some(text) = value.as_str() else {
        f.value(
            path,
            value,
            "a peer address is expected, such as tcp://mqtt.example.com:1883",
        );
        return None;
    };
    let Some((scheme, rest)) = text.split_once("://") else {
        f.value(path, value, "the address needs a scheme: tcp://host:port");
        return None;
    };
    let (tls, websocket) = match scheme {
        "tcp" | "ws" => (false, scheme == "ws"),
        "tls" | "wss" => (true, scheme == "wss"),
        other => {
            f.value(
                path,
                value,
                format!("{other}:// is not a scheme a bridge can dial; use tcp://, tls://, ws:// or wss://"),
            );
            return None;
        }
    };
    let tls = tls.then_some(PeerTls {
        ca_file: None,
        identity: None,
    });
    // A WebSocket peer's address may carry the path it is upgraded at.
    let (rest, websocket) = match rest.find('/') {
        Some(_) if !websocket => {
            f.value(
                path,
                value,
                format!("a {scheme}:// peer is host:port and nothing after it; only ws:// and wss:// take a path"),
            );
            return None;
        }
        Some(at) => {
            let upgrade_path = &rest[at..];
            if upgrade_path
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
            {
                f.value(
                    path,
                    value,
                    "the path holds no spaces or control characters",
                );
                return None;
            }
            (&rest[..at], Some(upgrade_path.to_string()))
        }
        None => (
            rest,
            websocket.then(|| crate::bridge::DEFAULT_WEBSOCKET_PATH.to_string()),
        ),
    };
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => (host, port),
        _ => {
            f.value(
                path,
                value,
                "the address needs a host and a port: tcp://host:port",
            );
            return None;
        }
    };
    let Ok(port) = port.parse::<u16>() else {
        f.value(path, value, "the port is a number from 1 to 65535");
        return None;
    };
    if port == 0 {
        f.value(path, value, "the port is a number from 1 to 65535");
        return None;
    }
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Some(Peer {
        host,
        port,
        tls,
        websocket,
    })
}

fn session_expiry(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<u32> {
    let Some(value) = value else {
        return Some(DEFAULT_SESSION_EXPIRY_S);
    };
    let at = join(path, "session_expiry");
    let allowed = "a duration up to 136 years, such as 1d; the peer holds this bridge's backlog for that long, on its operator's storage";
    let ms = duration_ms(
        f,
        &at,
        value,
        NoneRule::Refused("a session that never expires stays on somebody else's broker after this gateway is gone"),
        allowed,
    )??;
    let seconds = ms / 1000;
    if seconds == 0 || seconds > MAX_SESSION_EXPIRY_S {
        f.value(&at, value, format!("out of range; {allowed}"));
        return None;
    }
    u32::try_from(seconds).ok()
}

fn receive_maximum(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<u16> {
    let Some(value) = value else {
        return Some(DEFAULT_RECEIVE_MAXIMUM);
    };
    let at = join(path, "receive_maximum");
    let allowed = "a whole number from 1 to 65535: this many records may be held unacknowledged in memory each way";
    let n = whole_number(
        f,
        &at,
        value,
        NoneRule::Refused("MQTT has no unlimited Receive Maximum"),
        allowed,
    )??;
    match u16::try_from(n) {
        Ok(n) if n > 0 => Some(n),
        _ => {
            f.value(&at, value, format!("out of range; {allowed}"));
            None
        }
    }
}

fn ack_interval(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<u64> {
    let Some(value) = value else {
        return Some(DEFAULT_ACK_INTERVAL_MS);
    };
    let at = join(path, "ack_interval");
    let allowed = "a duration from 1ms to 1s; with receive_maximum it caps the link at receive_maximum / ack_interval records a second";
    let ms = duration_ms(
        f,
        &at,
        value,
        NoneRule::Refused("an acknowledgement must be sent"),
        allowed,
    )??;
    if !(1..=1000).contains(&ms) {
        f.value(&at, value, format!("out of range; {allowed}"));
        return None;
    }
    Some(ms)
}

fn rules(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<Vec<Rule>> {
    let at = join(path, "topics");
    let items = match value {
        Some(Value::Sequence(items)) if !items.is_empty() => items,
        Some(v @ Value::Sequence(_)) | Some(v) => {
            f.value(&at, v, "a list of at least one rule (filter, direction, topic) is expected; a bridge carrying nothing holds a session at the peer for nothing");
            return None;
        }
        None => {
            f.key(&at, "required: at least one rule; a bridge carrying nothing holds a session at the peer for nothing");
            return None;
        }
    };
    let before = f.len();
    let mut rules: Vec<Rule> = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let here = format!("{at}[{n}]");
        let Some(spelled) = rule(f, &here, item) else {
            continue;
        };
        for rule in spelled {
            let twin = rules.iter().any(|r| {
                r.direction.carries_out()
                    && rule.direction.carries_out()
                    && r.filter == rule.filter
                    && r.topic == rule.topic
            });
            if twin {
                f.key(&here, format!("another outbound rule has the filter {:?} and this topic; every record would be sent twice, so keep one", rule.filter));
            }
            rules.push(rule);
        }
    }
    (f.len() == before).then_some(rules)
}

/// One entry of `topics:`, as one rule per spelling of its braced levels.
fn rule(f: &mut Findings, path: &str, value: &Value) -> Option<Vec<Rule>> {
    let t = table(f, path, value, &RULE_KEYS)?;
    let before = f.len();
    let filters = match t.get("filter") {
        Some(Value::String(s)) => filter(f, &join(path, "filter"), s),
        Some(v) => {
            f.value(&join(path, "filter"), v, "an MQTT topic filter is expected");
            None
        }
        None => {
            f.key(
                &join(path, "filter"),
                "required: the MQTT topic filter this rule carries",
            );
            None
        }
    };
    let direction = match t.get("direction").map(|v| (v, v.as_str())) {
        Some((_, Some("in"))) => Some(Direction::In),
        Some((_, Some("out"))) => Some(Direction::Out),
        Some((_, Some("both"))) => Some(Direction::Both),
        Some((v, _)) => {
            f.value(&join(path, "direction"), v, "one of in, out or both");
            None
        }
        None => {
            f.key(
                &join(path, "direction"),
                "required, with no default: in, out or both - whether this broker's records leave it must be written down",
            );
            None
        }
    };
    let topic = t.get("topic");
    let (Some(filters), Some(direction)) = (filters, direction) else {
        return None;
    };
    // Spellings are plain levels, so every expansion captures alike.
    let filter = filters[0].clone();
    let topic_path = join(path, "topic");
    let topic = match (direction, topic) {
        (Direction::Both, None) => None,
        (Direction::Both, Some(_)) => {
            f.key(&topic_path, "refused on a both rule, which keeps the topic both ways; a rewrite cannot be inverted, so write an in rule and an out rule instead");
            return None;
        }
        (_, None) => {
            f.key(&topic_path, "required on an in or out rule: the whole topic a record takes at the other end, with $1..$N and $#");
            return None;
        }
        (_, Some(Value::String(template))) => {
            if let Err(why) = template::check(&filter, template) {
                f.value(&topic_path, &Value::String(template.clone()), why);
            }
            Some(template.clone())
        }
        (_, Some(v)) => {
            f.value(&topic_path, v, "a topic template is expected");
            return None;
        }
    };
    if let Some(dollar) = filters.iter().find(|plain| plain.starts_with('$')) {
        if direction == Direction::Both {
            f.value(&join(path, "filter"), &Value::String(dollar.clone()), "a both rule keeps the topic, and nothing may publish a $ topic here; use an in rule with a topic");
        }
    }
    (f.len() == before).then(|| {
        filters
            .into_iter()
            .map(|filter| Rule {
                filter,
                direction,
                topic: topic.clone(),
            })
            .collect()
    })
}

/// The plain filters a written one stands for, or `None` with its findings.
fn filter(f: &mut Findings, path: &str, filter: &str) -> Option<Vec<String>> {
    let value = Value::String(filter.to_string());
    let refuse = |f: &mut Findings, why: &str| {
        f.value(path, &value, why);
        None
    };
    let problems = channels::brace_problems(filter);
    if let Some(why) = problems.first() {
        return refuse(f, why);
    }
    let filters = match channels::expand(filter) {
        Ok(filters) => filters,
        Err(why) => return refuse(f, &why),
    };
    // Asked of each spelling: a brace may spell a reserved first level.
    if filters
        .iter()
        .any(|plain| plain.starts_with("$saguin/") || plain == "$saguin")
    {
        return refuse(f, "the $saguin/ space is this broker's own (queue deliveries and acknowledgements); a bridge never carries it");
    }
    if filters.iter().any(|plain| plain.starts_with("$share/")) {
        return refuse(f, "a shared subscription is not a filter a bridge carries");
    }
    if !filters.iter().all(|plain| is_valid_topic_filter(plain)) {
        return refuse(f, "not a well-formed MQTT topic filter: # only as the last level, and + and # each a whole level");
    }
    Some(filters)
}

#[cfg(test)]
mod tests {
    use crate::bridge::{Direction, Peer, PeerTls};
    use crate::config::parse;

    fn with_bridge(block: &str) -> String {
        format!("broker:\n  id: edge-1\nbridges:\n  up:\n{block}")
    }

    const RULE: &str = "    topics:\n      - filter: a/#\n        direction: both\n";

    fn findings(block: &str) -> Vec<String> {
        match parse(&with_bridge(block), "saguin.yaml") {
            Ok(c) => panic!("expected a refusal, got {:?}", c.bridges),
            Err(e) => e.findings,
        }
    }

    fn refused(block: &str, key: &str, words: &str) {
        let found = findings(block);
        assert!(
            found
                .iter()
                .any(|f| f.starts_with(key) && f.contains(words)),
            "no finding at {key} saying {words:?}: {found:?}"
        );
    }

    #[test]
    fn every_key_is_read_with_its_defaults() {
        let text = with_bridge(
            "    peer: tcp://127.0.0.1:1884\n    client_id: gw-7\n    username: u\n    password: p\n    topics:\n      - filter: fleet/+/t/#\n        topic: in/$1/$#\n        direction: in\n      - filter: alerts/#\n        direction: both\n",
        );
        let config = parse(&text, "saguin.yaml").unwrap();
        let bridge = &config.bridges[0];
        assert_eq!(bridge.name, "up");
        assert_eq!(
            bridge.peer,
            Peer {
                host: "127.0.0.1".into(),
                port: 1884,
                tls: None,
                websocket: None,
            }
        );
        assert_eq!(
            (
                bridge.session_expiry_s,
                bridge.receive_maximum,
                bridge.ack_interval_ms
            ),
            (86_400, 20, 5)
        );
        assert_eq!(bridge.username.as_deref(), Some("u"));
        assert_eq!(bridge.password.as_deref(), Some("p"));
        assert_eq!(bridge.rules[0].direction, Direction::In);
        assert_eq!(bridge.rules[0].topic.as_deref(), Some("in/$1/$#"));
        assert_eq!(bridge.rules[1].topic, None);
        assert_eq!(config.shell_settings().bridges.len(), 1);

        let tuned = with_bridge(&format!(
            "    peer: tcp://h:1\n    client_id: c\n    session_expiry: 2h\n    receive_maximum: 5\n    ack_interval: 50ms\n{RULE}"
        ));
        let bridge = &parse(&tuned, "saguin.yaml").unwrap().bridges[0];
        assert_eq!(
            (
                bridge.session_expiry_s,
                bridge.receive_maximum,
                bridge.ack_interval_ms
            ),
            (7200, 5, 50)
        );
    }

    #[test]
    fn peers_are_refused_by_scheme_and_shape() {
        let p = |peer: &str| format!("    peer: {peer}\n    client_id: c\n{RULE}");
        refused(&p("mqtt://h:1883"), "bridges.up.peer", "not a scheme");
        refused(&p("tcp://h:1883/mqtt"), "bridges.up.peer", "only ws://");
        refused(&p("ws://h:80/a b"), "bridges.up.peer", "no spaces");
        refused(&p("h:1883"), "bridges.up.peer", "scheme");
        refused(&p("tcp://h"), "bridges.up.peer", "host and a port");
        refused(&p("tcp://h:0"), "bridges.up.peer", "port");
        refused(
            &format!("    client_id: c\n{RULE}"),
            "bridges.up.peer",
            "required",
        );
    }

    #[test]
    fn a_websocket_peer_is_upgraded_at_its_path_or_at_mqtt() {
        let at = |peer: &str| {
            let text = with_bridge(&format!("    peer: {peer}\n    client_id: c\n{RULE}"));
            parse(&text, "saguin.yaml").unwrap().bridges[0].peer.clone()
        };
        let plain = at("ws://h:8083");
        assert_eq!(plain.websocket.as_deref(), Some("/mqtt"));
        assert!(plain.tls.is_none());
        assert_eq!(plain.url(), "ws://h:8083/mqtt");
        let secured = at("wss://[::1]:443/ws/mqtt?x=1");
        assert_eq!(secured.websocket.as_deref(), Some("/ws/mqtt?x=1"));
        assert!(secured.tls.is_some());
        assert_eq!(secured.host, "::1");
        assert_eq!(secured.url(), "wss://[::1]:443/ws/mqtt?x=1");
        assert_eq!(at("tls://h:8883").url(), "tls://h:8883");
    }

    #[test]
    fn a_tls_peer_takes_an_authority_and_an_identity_both_optional() {
        let t = |keys: &str| format!("    peer: tls://h:8883\n    client_id: c\n{keys}{RULE}");
        let bare = parse(&with_bridge(&t("")), "saguin.yaml").unwrap();
        assert_eq!(
            bare.bridges[0].peer.tls,
            Some(PeerTls {
                ca_file: None,
                identity: None
            }),
            "no ca_file: the system's authorities"
        );
        let full = t(
            "    ca_file: /etc/ca.pem\n    cert_file: /etc/b.pem\n    key_file: /etc/b-key.pem\n",
        );
        let full = parse(&with_bridge(&full), "saguin.yaml").unwrap();
        assert_eq!(
            full.bridges[0].peer.tls,
            Some(PeerTls {
                ca_file: Some("/etc/ca.pem".into()),
                identity: Some(("/etc/b.pem".into(), "/etc/b-key.pem".into())),
            })
        );
        refused(
            &t("    ca_file: ca.pem\n"),
            "bridges.up.ca_file",
            "absolute",
        );
        refused(
            &t("    cert_file: /etc/b.pem\n"),
            "bridges.up.key_file",
            "beside cert_file",
        );
        refused(
            &t("    key_file: /etc/k.pem\n"),
            "bridges.up.cert_file",
            "beside key_file",
        );
    }

    #[test]
    fn the_link_keys_are_held_to_their_ranges() {
        let k = |line: &str| format!("    peer: tcp://h:1\n    client_id: c\n    {line}\n{RULE}");
        refused(
            &format!("    peer: tcp://h:1\n{RULE}"),
            "bridges.up.client_id",
            "no default",
        );
        refused(
            &k("session_expiry: none"),
            "bridges.up.session_expiry",
            "never expires",
        );
        refused(&k("session_expiry: 200y"), "bridges.up.session_expiry", "");
        refused(
            &k("receive_maximum: 0"),
            "bridges.up.receive_maximum",
            "1 to 65535",
        );
        refused(
            &k("receive_maximum: 65536"),
            "bridges.up.receive_maximum",
            "1 to 65535",
        );
        refused(
            &k("ack_interval: 2s"),
            "bridges.up.ack_interval",
            "1ms to 1s",
        );
        refused(
            &k("ack_interval: 0ms"),
            "bridges.up.ack_interval",
            "1ms to 1s",
        );
        refused(&k("ca_file: /etc/ca.pem"), "bridges.up.ca_file", "tls://");
        refused(
            &k("cert_file: /etc/c.pem"),
            "bridges.up.cert_file",
            "tls://",
        );
        refused(&k("colour: red"), "bridges.up.colour", "");
    }

    #[test]
    fn rules_are_checked_one_by_one() {
        let r = |rule: &str| {
            format!("    peer: tcp://h:1\n    client_id: c\n    topics:\n      - {rule}\n")
        };
        refused(
            "    peer: tcp://h:1\n    client_id: c\n",
            "bridges.up.topics",
            "at least one rule",
        );
        refused(
            &r("filter: a"),
            "bridges.up.topics[0].direction",
            "no default",
        );
        refused(
            &r("direction: in\n        topic: b"),
            "bridges.up.topics[0].filter",
            "required",
        );
        refused(
            &r("filter: a\n        direction: sideways"),
            "bridges.up.topics[0].direction",
            "in, out or both",
        );
        refused(
            &r("filter: a\n        direction: in"),
            "bridges.up.topics[0].topic",
            "required",
        );
        refused(
            &r("filter: a\n        direction: both\n        topic: b"),
            "bridges.up.topics[0].topic",
            "refused on a both",
        );
        refused(
            &r("filter: $saguin/#\n        direction: in\n        topic: x/$#"),
            "bridges.up.topics[0].filter",
            "$saguin/",
        );
        refused(
            &r("filter: $SYS/#\n        direction: both"),
            "bridges.up.topics[0].filter",
            "$ topic",
        );
        refused(
            &r("filter: a/#/b\n        direction: both"),
            "bridges.up.topics[0].filter",
            "well-formed",
        );
        refused(
            &r("filter: fleet/a+b/#\n        direction: both"),
            "bridges.up.topics[0].filter",
            "well-formed",
        );
        refused(
            &r("filter: a/#\n        direction: in\n        topic: b"),
            "bridges.up.topics[0].topic",
            "$#",
        );
        refused(
            &r("filter: a/+\n        direction: out\n        topic: b/$2"),
            "bridges.up.topics[0].topic",
            "$2",
        );
        refused(
            &r("filter: a/{b,}/#\n        direction: both"),
            "bridges.up.topics[0].filter",
            "empty spelling",
        );
        refused(
            &r("filter: a/{b/c}\n        direction: both"),
            "bridges.up.topics[0].filter",
            "braces hold no /",
        );
        refused(
            &r("filter: a/{+,b}\n        direction: both"),
            "bridges.up.topics[0].filter",
            "wildcard",
        );
        refused(
            &r("filter: a/x{b,c}\n        direction: both"),
            "bridges.up.topics[0].filter",
            "whole level",
        );
        let twins = "    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: a/#\n        direction: out\n        topic: b/$#\n      - filter: a/#\n        direction: out\n        topic: b/$#\n";
        refused(twins, "bridges.up.topics[1]", "twice");
        let sys = r("filter: $SYS/#\n        direction: in\n        topic: sys/$#");
        assert!(parse(&with_bridge(&sys), "saguin.yaml").is_ok());
    }

    #[test]
    fn a_braced_level_is_one_rule_per_spelling_checked_as_written() {
        let rules = "    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: \"fleet/+/{data,events}/{a,b}/#\"\n        direction: out\n        topic: up/$1/$#\n";
        let bridge = &parse(&with_bridge(rules), "saguin.yaml").unwrap().bridges[0];
        let filters: Vec<&str> = bridge.rules.iter().map(|r| r.filter.as_str()).collect();
        assert_eq!(
            filters,
            [
                "fleet/+/data/a/#",
                "fleet/+/data/b/#",
                "fleet/+/events/a/#",
                "fleet/+/events/b/#"
            ]
        );
        assert!(bridge
            .rules
            .iter()
            .all(|r| r.topic.as_deref() == Some("up/$1/$#") && r.direction == Direction::Out));

        // A spelling meeting a written rule with the same topic is a twin.
        let twins = "    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: a/b/#\n        direction: out\n        topic: x/$#\n      - filter: \"a/{c,b}/#\"\n        direction: out\n        topic: x/$#\n";
        refused(twins, "bridges.up.topics[1]", "\"a/b/#\"");
        // $1 numbers the + levels; a braced level is not one.
        let r = "    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: \"{a,b}/+\"\n        direction: in\n        topic: x/$2\n";
        refused(r, "bridges.up.topics[0].topic", "$2");
        let both = "    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: \"{a,$SYS}/#\"\n        direction: both\n";
        refused(both, "bridges.up.topics[0].filter", "$ topic");
        let reserved = "    peer: tcp://h:1\n    client_id: c\n    topics:\n      - filter: \"{a,$saguin}/#\"\n        direction: in\n        topic: x/$#\n";
        refused(reserved, "bridges.up.topics[0].filter", "$saguin/");
    }

    #[test]
    fn two_bridges_may_not_share_a_client_id_at_one_peer() {
        let text = format!(
            "broker:\n  id: e\nbridges:\n  a:\n    peer: tcp://h:1\n    client_id: c\n{RULE}  b:\n    peer: tcp://h:1\n    client_id: c\n{RULE}  c:\n    peer: tcp://other:1\n    client_id: c\n{RULE}"
        );
        let found = parse(&text, "f").unwrap_err().findings;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("bridges.b.client_id"), "{found:?}");
    }
}
