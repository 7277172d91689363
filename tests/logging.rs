//! The broker's log lines as an operator reads them: each format parsed
//! line by line over a session's whole life, and SIGUSR1 changing the
//! level under a connected client.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{connect_packet, BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Disconnect, Packet, ProtocolVersion, PubAck, Publish, QoS};

const V5: ProtocolVersion = ProtocolVersion::V5;

fn config(dir: &std::path::Path, level: &str, format: &str) -> String {
    let _ = dir;
    format!(
        "broker:\n  id: edge-7\n  log_level: {level}\n  log_format: {format}\n  mqtt:\n    \
         trust_unchecked_user_names: true\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n"
    )
}

/// A PUBACK for a packet identifier nothing awaits: answered by nothing,
/// noted at `debug`.
fn stray_puback(client: &mut RawClient) {
    client.send(&Packet::Puback(PubAck {
        packet_id: 777,
        ..PubAck::default()
    }));
}

#[test]
fn sigusr1_reads_the_log_level_again_and_keeps_the_client_connected() {
    let dir = TempDir::new("log-level");
    let mut broker =
        BrokerProcess::start_with_config(dir.path(), &config(dir.path(), "info", "text"));
    let mut client = RawClient::connect(&broker.address(), V5, "steady");
    stray_puback(&mut client);
    client.assert_alive();
    assert!(
        broker
            .wait_for_log_within("ignoring an acknowledgement", Duration::from_millis(300))
            .is_none(),
        "a debug line was written at info"
    );

    let path = dir.path().join("saguin.yaml");
    std::fs::write(&path, config(dir.path(), "debug", "text")).unwrap();
    broker.signal("USR1");
    broker.wait_for_log("log_level was info, is debug");

    stray_puback(&mut client);
    let line = broker.wait_for_log("ignoring an acknowledgement for packet identifier 777");
    assert!(line.contains(" DEBUG "), "{line}");
    // The same connection, still served.
    client.assert_alive();

    // A file that no longer reads leaves the level as it was.
    std::fs::write(&path, "broker:\n  id: edge-7\n  log_level: loud\n").unwrap();
    broker.signal("USR1");
    broker.wait_for_log("the log level stays debug");
    let finding = broker.wait_for_log("broker.log_level \"loud\"");
    assert!(
        finding.contains("one of debug, info, warn or error"),
        "{finding}"
    );
    client.assert_alive();
}

/// Runs a session's life against a broker logging in `format`, then stops
/// it, and returns every line it wrote.
fn a_session_life(format: &str) -> Vec<String> {
    let dir = TempDir::new(&format!("log-{format}"));
    let mut broker =
        BrokerProcess::start_with_config(dir.path(), &config(dir.path(), "debug", format));
    let address = broker.address();
    let mut connect = connect_packet(V5, "pump-7");
    connect.username = Some("alice smith".into());
    let mut client = RawClient::open(&address, V5);
    assert_eq!(client.connect_with(connect), 0);
    client.subscribe("plant/+/temp", QoS::AtLeastOnce);
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: "plant/a/temp".into(),
        packet_id: Some(1),
        payload: b"21.5".to_vec(),
        ..Publish::default()
    }));
    let mut acked = false;
    let mut delivered = false;
    while !(acked && delivered) {
        match client.recv() {
            Received::Packet(Packet::Puback(_)) => acked = true,
            Received::Packet(Packet::Publish(_)) => delivered = true,
            other => panic!("unexpected {other:?}"),
        }
    }
    stray_puback(&mut client);
    broker.wait_for_log("ignoring an acknowledgement");
    // A refusal: a second CONNECT on the same connection breaks the rules.
    client.send(&Packet::Connect(Box::new(connect_packet(V5, "pump-7"))));
    let _ = client.recv_until_closed();
    let mut second = RawClient::connect(&address, V5, "pump-8");
    second.send(&Packet::Disconnect(Disconnect::default()));
    let _ = second.recv_until_closed();
    assert!(broker.terminate().success());
    // Every line to the end: the wait ends when its output closes.
    broker.wait_for_log_within("\u{0}", common::WAIT);
    broker.log_lines.clone()
}

/// A logfmt line's pairs; panics on one that is not logfmt.
fn logfmt_pairs(line: &str) -> HashMap<String, String> {
    let mut pairs = HashMap::new();
    let mut rest = line;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .unwrap_or_else(|| panic!("no key=value in {rest:?} of {line:?}"));
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad key {key:?} in {line:?}"
        );
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let (value, used) =
                json_string(quoted).unwrap_or_else(|| panic!("unterminated value in {line:?}"));
            (value, &quoted[used..])
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let bare = &after[..end];
            assert!(!bare.contains('"'), "bare value with a quote in {line:?}");
            (bare.to_string(), &after[end..])
        };
        assert!(
            after.is_empty() || after.starts_with(' '),
            "no space after {key} in {line:?}"
        );
        pairs.insert(key.to_string(), value);
        rest = after.strip_prefix(' ').unwrap_or(after);
    }
    pairs
}

/// The JSON string starting after its opening quote: the text, and the
/// bytes used including the closing quote.
fn json_string(text: &str) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = (0..4)
                        .filter_map(|_| chars.next().map(|(_, c)| c))
                        .collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                c @ ('"' | '\\' | '/') => out.push(c),
                _ => return None,
            },
            c if u32::from(c) < 0x20 => return None,
            c => out.push(c),
        }
    }
    None
}

/// A JSON line holding one object of string members; panics otherwise.
fn json_object(line: &str) -> HashMap<String, String> {
    let mut members = HashMap::new();
    let mut rest = line
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .unwrap_or_else(|| panic!("not an object: {line:?}"));
    while !rest.is_empty() {
        let quoted = rest.strip_prefix('"').unwrap_or_else(|| panic!("{line:?}"));
        let (key, used) = json_string(quoted).unwrap_or_else(|| panic!("{line:?}"));
        let after = quoted[used..]
            .strip_prefix(":\"")
            .unwrap_or_else(|| panic!("{line:?}"));
        let (value, used) = json_string(after).unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            members.insert(key, value).is_none(),
            "a key twice in {line:?}"
        );
        rest = &after[used..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    members
}

/// What every structured line says, and that the connection's lines name
/// it: listener, remote address, client id and user.
fn check_fields(lines: Vec<HashMap<String, String>>) {
    for fields in &lines {
        for key in ["time", "level", "target", "broker", "msg"] {
            assert!(fields.contains_key(key), "no {key} in {fields:?}");
        }
        assert_eq!(fields["broker"], "edge-7");
    }
    let of_pump = |fields: &&HashMap<String, String>| {
        fields.get("client_id").map(String::as_str) == Some("pump-7")
    };
    let pump: Vec<_> = lines.iter().filter(of_pump).collect();
    assert!(!pump.is_empty(), "no line names pump-7: {lines:?}");
    for fields in &pump {
        assert_eq!(fields["listener"], "tcp", "{fields:?}");
        assert!(fields["remote"].starts_with("127.0.0.1:"), "{fields:?}");
        assert_eq!(fields["user"], "alice smith", "{fields:?}");
    }
    assert!(
        pump.iter()
            .any(|f| f["msg"].contains("ignoring an acknowledgement")),
        "the debug line is not pump-7's: {pump:?}"
    );
    assert!(
        lines
            .iter()
            .any(|f| f.get("client_id").map(String::as_str) == Some("pump-8")),
        "no line names pump-8"
    );
}

#[test]
fn json_lines_each_parse_and_name_the_connection() {
    let lines = a_session_life("json");
    check_fields(lines.iter().map(|l| json_object(l)).collect());
}

#[test]
fn logfmt_lines_each_parse_and_name_the_connection() {
    let lines = a_session_life("logfmt");
    check_fields(lines.iter().map(|l| logfmt_pairs(l)).collect());
}

#[test]
fn text_lines_stay_readable_and_name_the_connection() {
    let lines = a_session_life("text");
    for line in &lines {
        // time, level, target in brackets, as always.
        let mut words = line.split_whitespace();
        let time = words.next().unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{line}");
        let level = words.next().unwrap();
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&level),
            "{line}"
        );
        assert!(words.next().unwrap().starts_with('['), "{line}");
    }
    let stray = lines
        .iter()
        .find(|l| l.contains("ignoring an acknowledgement"))
        .unwrap();
    assert!(
        stray.contains("[listener tcp remote 127.0.0.1:")
            && stray.contains(" client_id pump-7 user alice smith] ignoring"),
        "{stray}"
    );
}
