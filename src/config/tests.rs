//! Tests over whole configuration files: defaults, every refusal, the
//! report's wording, and the files shipped in `config/` and `boards/`.

use super::*;
use crate::net::websocket::Origins;
use crate::net::Listen;

const FILE: &str = "saguin.yaml";

/// The smallest valid file.
const MINIMAL: &str = "broker:\n  id: edge-1\n";

fn ok(text: &str) -> Config {
    match parse(text, FILE) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid configuration, got:\n{e}"),
    }
}

fn findings(text: &str) -> Vec<String> {
    match parse(text, FILE) {
        Ok(c) => panic!("expected a refusal, got {c:?}"),
        Err(e) => {
            assert_eq!(e.file, FILE);
            e.findings
        }
    }
}

/// The single finding for a file, asserting there is exactly one.
fn only_finding(text: &str) -> String {
    the_one(findings(text))
}

/// A file with `broker.id` and one line under `broker.limits`.
fn limits(line: &str) -> String {
    format!("broker:\n  id: edge-1\n  limits:\n    {line}\n")
}

fn limits_ok(line: &str) -> Limits {
    ok(&limits(line)).broker.limits
}

fn limits_refused(line: &str) -> String {
    only_finding(&limits(line))
}

/// A file with `broker.id` and the given YAML under `broker.mqtt`.
fn mqtt(block: &str) -> String {
    let indented: String = block.lines().map(|l| format!("    {l}\n")).collect();
    format!("broker:\n  id: edge-1\n  mqtt:\n{indented}")
}

/// The one finding of a refusal that should have exactly one.
pub(super) fn the_one(mut findings: Vec<String>) -> String {
    assert_eq!(findings.len(), 1, "expected one finding, got {findings:#?}");
    findings.remove(0)
}

/// Shared by every configuration test module: each needle is in the text.
pub(super) fn assert_contains(haystack: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            haystack.contains(needle),
            "expected {needle:?} in:\n{haystack}"
        );
    }
}

// ---- defaults -----------------------------------------------------------

#[test]
fn a_minimal_file_takes_every_default() {
    let c = ok(MINIMAL);
    assert_eq!(c.source, FILE);
    assert_eq!(c.broker.id, "edge-1");
    assert_eq!(c.broker.log_level, LogLevel::Info);
    assert_eq!(c.broker.pid_file, None);
    assert_eq!(c.broker.mqtt.doors, vec![door("tcp", "0.0.0.0:1883")]);
    assert_eq!(c.broker.mqtt.min_protocol_version, MinProtocolVersion::V311);
    assert_eq!(c.broker.limits, Limits::default());
}

#[test]
fn every_limit_default_is_the_documented_one() {
    let l = ok(MINIMAL).broker.limits;
    assert_eq!(l.max_message_size_bytes, 1024 * 1024);
    assert_eq!(l.max_topic_length, 1024);
    assert_eq!(l.max_client_id_length, 256);
    assert_eq!(l.max_header_count, 32);
    assert_eq!(l.max_header_bytes, 8 * 1024);
    assert_eq!(l.max_connections, 10_000);
    assert_eq!(l.max_subscriptions, 10_000);
    assert_eq!(l.max_topic_levels, 200);
    assert_eq!(l.max_persistent_sessions, 10_000);
    assert_eq!(l.max_shared_groups, 1_000);
    assert_eq!(l.max_session_expiry_s, 30 * 86_400);
    assert_eq!(l.max_keepalive_s, None);
    assert_eq!(l.publish_rate_per_s, None);
    assert_eq!(l.publish_bytes_per_s, None);
    assert_eq!(l.write_timeout_ms, Some(5_000));
    assert_eq!(l.connect_timeout_s, 10);
    assert_eq!(l.max_connect_size_bytes, 100 * 1024);
    assert_eq!(l.max_connect_rate_per_s, Some(500));
    assert_eq!(l.session_queue_bytes, 1024 * 1024);
}

#[test]
fn empty_blocks_read_as_their_defaults() {
    let c = ok("broker:\n  id: edge-1\n  limits:\n  mqtt:\n    listen:\n");
    assert_eq!(c.broker.limits, Limits::default());
    assert_eq!(c.broker.mqtt.doors, vec![door("tcp", "0.0.0.0:1883")]);
}

#[test]
fn max_connect_size_defaults_to_max_message_size_when_that_is_smaller() {
    let l = limits_ok("max_message_size: 64KiB");
    assert_eq!(l.max_connect_size_bytes, 64 * 1024);
    let l = limits_ok("max_message_size: 4MiB");
    assert_eq!(l.max_connect_size_bytes, 100 * 1024);
}

#[test]
fn session_queue_bytes_defaults_to_max_message_size_when_that_is_larger() {
    let l = limits_ok("max_message_size: 4MiB");
    assert_eq!(l.session_queue_bytes, 4 * 1024 * 1024);
    let l = limits_ok("max_message_size: 64KiB");
    assert_eq!(l.session_queue_bytes, 1024 * 1024);
}

// ---- values that are accepted --------------------------------------------

#[test]
fn every_limit_reads_its_written_value() {
    let c = ok("broker:
  id: edge-1
  limits:
    max_message_size: 2MiB
    max_topic_length: 256
    max_client_id_length: 23
    max_header_count: 4
    max_header_bytes: 512
    max_connections: 64
    max_subscriptions: 8
    max_topic_levels: 12
    max_session_expiry: 1d
    max_keepalive: 5m
    publish_rate: 200
    publish_bytes: 128KiB
    write_timeout: 250ms
    connect_timeout: 3000ms
    max_connect_size: 2MiB
    max_connect_rate: none
    session_queue_bytes: 4MiB
");
    let l = c.broker.limits;
    assert_eq!(
        l,
        Limits {
            max_message_size_bytes: 2 * 1024 * 1024,
            max_topic_length: 256,
            max_client_id_length: 23,
            max_header_count: 4,
            max_header_bytes: 512,
            max_connections: 64,
            max_subscriptions: 8,
            max_topic_levels: 12,
            max_persistent_sessions: 10_000,
            max_shared_groups: 1_000,
            max_session_expiry_s: 86_400,
            max_keepalive_s: Some(300),
            publish_rate_per_s: Some(200),
            publish_bytes_per_s: Some(128 * 1024),
            write_timeout_ms: Some(250),
            connect_timeout_s: 3,
            max_connect_size_bytes: 2 * 1024 * 1024,
            max_connect_rate_per_s: None,
            session_queue_bytes: 4 * 1024 * 1024,
        }
    );
}

#[test]
fn none_is_read_where_a_key_allows_it() {
    assert_eq!(limits_ok("max_keepalive: none").max_keepalive_s, None);
    assert_eq!(limits_ok("write_timeout: none").write_timeout_ms, None);
    assert_eq!(
        limits_ok("max_connect_rate: none").max_connect_rate_per_s,
        None
    );
    assert_eq!(limits_ok("publish_rate: none").publish_rate_per_s, None);
    assert_eq!(limits_ok("publish_bytes: none").publish_bytes_per_s, None);
}

#[test]
fn a_bare_integer_size_is_bytes() {
    assert_eq!(limits_ok("max_header_bytes: 4096").max_header_bytes, 4096);
    assert_eq!(
        limits_ok("max_header_bytes: \"4096\"").max_header_bytes,
        4096
    );
}

#[test]
fn whole_second_keys_take_milliseconds_that_are_whole_seconds() {
    assert_eq!(limits_ok("connect_timeout: 2000ms").connect_timeout_s, 2);
    assert_eq!(
        limits_ok("max_keepalive: 60000ms").max_keepalive_s,
        Some(60)
    );
}

#[test]
fn the_keepalive_ceiling_reaches_exactly_what_mqtt_can_carry() {
    assert_eq!(
        limits_ok("max_keepalive: 65535s").max_keepalive_s,
        Some(65_535)
    );
}

#[test]
fn the_session_expiry_reaches_one_second_short_of_never() {
    assert_eq!(
        limits_ok("max_session_expiry: 4294967294s").max_session_expiry_s,
        u32::MAX - 1
    );
}

#[test]
fn every_log_level_is_read() {
    for (word, level, filter) in [
        ("debug", LogLevel::Debug, log::LevelFilter::Debug),
        ("info", LogLevel::Info, log::LevelFilter::Info),
        ("warn", LogLevel::Warn, log::LevelFilter::Warn),
        ("error", LogLevel::Error, log::LevelFilter::Error),
    ] {
        let c = ok(&format!("broker:\n  id: a\n  log_level: {word}\n"));
        assert_eq!(c.broker.log_level, level);
        assert_eq!(level.to_level_filter(), filter);
        assert_eq!(level.to_string(), word);
    }
}

#[test]
fn every_log_format_is_read_and_text_is_the_default() {
    assert_eq!(ok("broker:\n  id: a\n").broker.log_format, LogFormat::Text);
    for (word, format) in [
        ("text", LogFormat::Text),
        ("logfmt", LogFormat::Logfmt),
        ("json", LogFormat::Json),
    ] {
        let c = ok(&format!("broker:\n  id: a\n  log_format: {word}\n"));
        assert_eq!(c.broker.log_format, format);
        assert_eq!(format.as_str(), word);
    }
}

#[test]
fn an_unknown_log_format_is_refused_with_the_choices() {
    let f = only_finding("broker:\n  id: a\n  log_format: xml\n");
    assert_contains(
        &f,
        &[
            "broker.log_format \"xml\"",
            "it is one of text, logfmt or json; omit the key for text",
        ],
    );
}

#[test]
fn an_absolute_pid_file_is_read() {
    let c = ok("broker:\n  id: a\n  pid_file: /run/saguin/saguin.pid\n");
    assert_eq!(
        c.broker.pid_file,
        Some(std::path::PathBuf::from("/run/saguin/saguin.pid"))
    );
}

// ---- min_protocol_version ----------------------------------------------

#[test]
fn min_protocol_version_takes_5_quoted_or_not_and_3_1_1() {
    for (text, want) in [
        ("min_protocol_version: 5", MinProtocolVersion::V5),
        ("min_protocol_version: \"5\"", MinProtocolVersion::V5),
        ("min_protocol_version: '5'", MinProtocolVersion::V5),
        ("min_protocol_version: \"3.1.1\"", MinProtocolVersion::V311),
        ("min_protocol_version: 3.1.1", MinProtocolVersion::V311),
    ] {
        assert_eq!(
            ok(&mqtt(text)).broker.mqtt.min_protocol_version,
            want,
            "{text}"
        );
    }
}

#[test]
fn min_protocol_version_refuses_3_and_anything_else() {
    for (text, shown) in [
        ("3", "3"),
        ("\"3.1\"", "\"3.1\""),
        ("3.1", "3.1"),
        ("4", "4"),
        ("5.0", "5.0"),
        ("\"v5\"", "\"v5\""),
    ] {
        let f = only_finding(&mqtt(&format!("min_protocol_version: {text}")));
        assert_contains(
            &f,
            &[
                &format!("broker.mqtt.min_protocol_version {shown}:"),
                "\"3.1.1\"",
                "or 5",
                "MQTT 3.1 is never admitted",
            ],
        );
    }
}

#[test]
fn protocol_levels_admitted_follow_the_minimum() {
    assert!(MinProtocolVersion::V311.admits(4));
    assert!(MinProtocolVersion::V311.admits(5));
    assert!(!MinProtocolVersion::V311.admits(3));
    assert!(!MinProtocolVersion::V5.admits(4));
    assert!(MinProtocolVersion::V5.admits(5));
}

// ---- broker.id, log_level, pid_file -------------------------------------

#[test]
fn a_missing_broker_id_is_refused() {
    let f = only_finding("broker:\n  log_level: info\n");
    assert_contains(&f, &["broker.id: missing", "no default"]);
}

#[test]
fn an_empty_file_is_refused_for_its_missing_broker_id() {
    assert_contains(&only_finding(""), &["broker.id: missing"]);
}

#[test]
fn a_blank_or_numeric_broker_id_is_refused() {
    assert_contains(
        &only_finding("broker:\n  id: \"  \"\n"),
        &["broker.id \"  \":"],
    );
    assert_contains(
        &only_finding("broker:\n  id: 7\n"),
        &["broker.id 7:", "write it in quotes"],
    );
}

#[test]
fn an_unknown_log_level_is_refused_with_the_allowed_ones() {
    let f = only_finding("broker:\n  id: a\n  log_level: verbose\n");
    assert_eq!(
        f,
        "broker.log_level \"verbose\": it is one of debug, info, warn or error; omit the key for info"
    );
}

#[test]
fn a_relative_pid_file_is_refused() {
    let f = only_finding("broker:\n  id: a\n  pid_file: run/saguin.pid\n");
    assert_contains(&f, &["broker.pid_file \"run/saguin.pid\":", "absolute"]);
}

#[test]
fn a_pid_file_naming_a_directory_is_refused() {
    let f = only_finding("broker:\n  id: a\n  pid_file: /run/saguin/\n");
    assert_contains(&f, &["broker.pid_file \"/run/saguin/\":", "directory"]);
}

// ---- zero -----------------------------------------------------------------

#[test]
fn zero_is_refused_for_every_count() {
    for key in [
        "max_topic_length",
        "max_header_count",
        "max_connections",
        "max_subscriptions",
        "max_topic_levels",
        "max_persistent_sessions",
        "max_shared_groups",
    ] {
        let f = limits_refused(&format!("{key}: 0"));
        assert_contains(
            &f,
            &[&format!("broker.limits.{key} 0:"), "would refuse every"],
        );
    }
}

#[test]
fn zero_is_refused_for_every_size() {
    for key in [
        "max_message_size",
        "max_header_bytes",
        "max_connect_size",
        "publish_bytes",
    ] {
        let f = limits_refused(&format!("{key}: 0"));
        assert_contains(&f, &[&format!("broker.limits.{key} 0:"), "0 would"]);
    }
    let f = limits_refused("session_queue_bytes: 0B");
    assert_contains(&f, &["broker.limits.session_queue_bytes \"0B\":", "below"]);
}

#[test]
fn zero_is_refused_for_every_duration() {
    for key in [
        "max_session_expiry",
        "max_keepalive",
        "write_timeout",
        "connect_timeout",
    ] {
        let f = limits_refused(&format!("{key}: 0s"));
        assert_contains(&f, &[&format!("broker.limits.{key} \"0s\":"), "0 "]);
    }
}

#[test]
fn a_publish_rate_of_zero_is_refused() {
    let f = limits_refused("publish_rate: 0");
    assert_contains(
        &f,
        &[
            "broker.limits.publish_rate 0:",
            "refuse every publish",
            "omit the key for no bound",
        ],
    );
}

#[test]
fn a_connect_rate_of_zero_is_refused() {
    let f = limits_refused("max_connect_rate: 0");
    assert_contains(
        &f,
        &["broker.limits.max_connect_rate 0:", "`none` for no limit"],
    );
}

// ---- none -----------------------------------------------------------------

#[test]
fn none_is_refused_where_a_key_forbids_it() {
    for key in [
        "max_message_size",
        "max_topic_length",
        "max_client_id_length",
        "max_header_count",
        "max_header_bytes",
        "max_connections",
        "max_subscriptions",
        "max_topic_levels",
        "max_session_expiry",
        "connect_timeout",
        "max_connect_size",
        "session_queue_bytes",
    ] {
        let f = limits_refused(&format!("{key}: none"));
        assert_contains(
            &f,
            &[
                &format!("broker.limits.{key} \"none\":"),
                "`none` is not accepted here",
            ],
        );
    }
}

#[test]
fn connect_timeout_none_names_the_reason() {
    let f = limits_refused("connect_timeout: none");
    assert_contains(&f, &["descriptors"]);
}

#[test]
fn session_queue_bytes_none_names_the_reason() {
    let f = limits_refused("session_queue_bytes: none");
    assert_contains(&f, &["would hold everything it is sent"]);
}

// ---- whole seconds ------------------------------------------------------------

#[test]
fn a_fraction_of_a_second_is_refused_where_a_key_holds_whole_seconds() {
    for key in ["max_session_expiry", "max_keepalive", "connect_timeout"] {
        let f = limits_refused(&format!("{key}: 1500ms"));
        assert_contains(
            &f,
            &[
                &format!("broker.limits.{key} \"1500ms\":"),
                "held in whole seconds",
                "write 1s or 2s",
            ],
        );
    }
    let f = limits_refused("connect_timeout: 500ms");
    assert_contains(&f, &["held in whole seconds", "write 1s"]);
}

#[test]
fn write_timeout_takes_milliseconds() {
    assert_eq!(
        limits_ok("write_timeout: 1500ms").write_timeout_ms,
        Some(1_500)
    );
}

// ---- ranges -------------------------------------------------------------------

#[test]
fn max_keepalive_above_65535_seconds_is_refused() {
    let f = limits_refused("max_keepalive: 20h");
    assert_eq!(
        f,
        "broker.limits.max_keepalive \"20h\" is longer than MQTT can express, which is 65535 seconds (about 18 hours); write `none` for no ceiling"
    );
    assert_contains(&limits_refused("max_keepalive: 65536s"), &["65535 seconds"]);
}

#[test]
fn max_session_expiry_of_never_is_refused() {
    let f = limits_refused("max_session_expiry: 4294967295s");
    assert_contains(&f, &["never expiring", "4294967294s"]);
}

#[test]
fn max_client_id_length_below_23_is_refused() {
    let f = limits_refused("max_client_id_length: 22");
    assert_contains(
        &f,
        &[
            "broker.limits.max_client_id_length 22:",
            "1 to 23 bytes",
            "from 23 to 65535",
        ],
    );
}

#[test]
fn max_topic_length_above_what_mqtt_carries_is_refused() {
    let f = limits_refused("max_topic_length: 65536");
    assert_contains(
        &f,
        &["broker.limits.max_topic_length 65536:", "from 1 to 65535"],
    );
}

#[test]
fn max_message_size_above_what_mqtt_frames_is_refused() {
    let f = limits_refused("max_message_size: 257MiB");
    assert_contains(
        &f,
        &["broker.limits.max_message_size \"257MiB\":", "256MiB"],
    );
    assert_eq!(
        limits_ok("max_message_size: 256MiB").max_message_size_bytes,
        256 * 1024 * 1024
    );
}

#[test]
fn a_count_too_large_for_its_field_is_refused() {
    let f = limits_refused("max_connections: 4294967296");
    assert_contains(
        &f,
        &["broker.limits.max_connections 4294967296:", "too large"],
    );
}

#[test]
fn max_connect_size_above_max_message_size_is_refused() {
    let text =
        "broker:\n  id: a\n  limits:\n    max_message_size: 64KiB\n    max_connect_size: 100KiB\n";
    let f = only_finding(text);
    assert_eq!(
        f,
        "broker.limits.max_connect_size \"100KiB\": it may not exceed broker.limits.max_message_size, which is 64KiB (65536 bytes); lower it, or raise max_message_size"
    );
}

#[test]
fn max_connect_size_equal_to_max_message_size_is_accepted() {
    let c = ok(
        "broker:\n  id: a\n  limits:\n    max_message_size: 64KiB\n    max_connect_size: 65536\n",
    );
    assert_eq!(c.broker.limits.max_connect_size_bytes, 65_536);
}

#[test]
fn session_queue_bytes_below_max_message_size_is_refused() {
    let text =
        "broker:\n  id: a\n  limits:\n    max_message_size: 2MiB\n    session_queue_bytes: 1MiB\n";
    let f = only_finding(text);
    assert_contains(
        &f,
        &[
            "broker.limits.session_queue_bytes \"1MiB\":",
            "below broker.limits.max_message_size, which is 2MiB (2097152 bytes)",
            "largest message",
        ],
    );
}

#[test]
fn an_explicit_session_queue_below_the_default_max_message_size_is_refused() {
    let f = limits_refused("session_queue_bytes: 512KiB");
    assert_contains(&f, &["below broker.limits.max_message_size, which is 1MiB"]);
}

// ---- forms ------------------------------------------------------------------------

#[test]
fn a_duration_without_a_unit_is_refused_with_the_fix() {
    let f = limits_refused("connect_timeout: 10");
    assert_contains(&f, &["broker.limits.connect_timeout 10:", "write 10s"]);
}

#[test]
fn a_compound_duration_is_refused_with_the_total() {
    let f = limits_refused("max_session_expiry: 1h30m");
    assert_contains(&f, &["\"1h30m\"", "write 90m"]);
}

#[test]
fn a_decimal_size_unit_is_refused_with_the_binary_one() {
    let f = limits_refused("max_message_size: 1MB");
    assert_contains(
        &f,
        &["broker.limits.max_message_size \"1MB\":", "write 1MiB"],
    );
}

#[test]
fn a_count_may_be_quoted() {
    assert_eq!(limits_ok("max_connections: \"64\"").max_connections, 64);
}

#[test]
fn a_count_written_as_text_is_refused() {
    let f = limits_refused("max_connections: lots");
    assert_contains(
        &f,
        &[
            "broker.limits.max_connections \"lots\":",
            "not a whole number",
        ],
    );
}

#[test]
fn a_negative_count_is_refused() {
    let f = limits_refused("max_connections: -1");
    assert_contains(
        &f,
        &["broker.limits.max_connections -1:", "not a whole number"],
    );
}

// ---- keys -------------------------------------------------------------------------

#[test]
fn an_unknown_key_is_refused_by_name() {
    let f = only_finding("broker:\n  id: a\n  colour: blue\n");
    assert_contains(
        &f,
        &[
            "broker.colour:",
            "not a key Sagüin takes here",
            "id, log_level",
        ],
    );
}

#[test]
fn an_unknown_key_near_a_known_one_gets_a_suggestion() {
    let f = limits_refused("max_conections: 5");
    assert_contains(
        &f,
        &[
            "broker.limits.max_conections:",
            "did you mean max_connections?",
        ],
    );
}

#[test]
fn an_operations_unix_door_s_proxy_protocol_is_true_or_false() {
    let operators =
        std::env::temp_dir().join(format!("saguin-proxy-ops-{}.passwd", std::process::id()));
    let line = crate::ops::operators::hash_line("oncall", "pw", b"test-salt-12");
    std::fs::write(&operators, format!("{line}\n")).unwrap();
    let door = |value: &str| {
        format!("broker:\n  id: a\n  operations:\n    password_file: {}\n    listen:\n      unix:\n        path: /run/o.sock\n        proxy_protocol: {value}\n", operators.display())
    };
    let settings = ok(&door("true")).broker.operations.unwrap();
    assert!(settings.unix[0].proxy_protocol);
    let settings = ok(&door("false")).broker.operations.unwrap();
    assert!(!settings.unix[0].proxy_protocol);
    let f = only_finding(&door("v2"));
    assert_contains(
        &f,
        &[
            "broker.operations.listen.unix.proxy_protocol",
            "true",
            "false",
        ],
    );
    // With no operators file anywhere, every caller behind the proxy
    // would be the trusted nobody: refused, naming the key and the fix.
    let open = "broker:\n  id: a\n  operations:\n    listen:\n      unix:\n        path: /run/o.sock\n        proxy_protocol: true\n";
    let f = only_finding(open);
    assert_contains(
        &f,
        &[
            "broker.operations.listen.unix.proxy_protocol",
            "every route",
            "broker.operations.password_file",
        ],
    );
    let _ = std::fs::remove_file(&operators);
}

#[test]
fn the_operations_listener_s_max_connections_is_1_to_1024_and_16_unwritten() {
    let block = |extra: &str| {
        format!("broker:\n  id: a\n  operations:\n    listen:\n      unix:\n        path: /run/o.sock\n{extra}")
    };
    let settings = ok(&block("")).broker.operations.unwrap();
    assert_eq!(settings.max_connections, 16);
    let settings = ok(&block("    max_connections: 1\n"))
        .broker
        .operations
        .unwrap();
    assert_eq!(settings.max_connections, 1);
    for refused in ["0", "1025", "none", "many"] {
        let f = only_finding(&block(&format!("    max_connections: {refused}\n")));
        assert_contains(&f, &["broker.operations.max_connections", "1 to 1024"]);
    }
}

#[test]
fn an_unknown_top_level_key_is_refused() {
    let f = only_finding("broker:\n  id: a\nbrokers:\n  id: b\n");
    assert_contains(&f, &["brokers:", "did you mean broker?"]);
}

#[test]
fn acl_file_is_an_absolute_path() {
    let f = only_finding(&mqtt("acl_file: acl.yaml"));
    assert_contains(&f, &["broker.mqtt.acl_file \"acl.yaml\"", "absolute path"]);
}

#[test]
fn a_ws_door_admits_its_own_pages_unless_told_otherwise() {
    let read = doors("listen:\n  ws:\n    address: 127.0.0.1:8083");
    assert_eq!(read[0].name, "ws");
    assert_eq!(
        read[0].listen,
        Listen::WebSocket {
            address: "127.0.0.1:8083".into(),
            origins: Origins::new(true, Vec::new()),
        }
    );
    let listed = doors(
        "listen:\n  ws:\n    address: :8083\n    same_origin: false\n    allowed_origins:\n      - HTTPS://Dash.example.com\n      - http://192.0.2.10:8443",
    );
    let Listen::WebSocket { origins, .. } = &listed[0].listen else {
        panic!("{listed:?}")
    };
    assert!(!origins.same_origin);
    assert_eq!(
        origins.allowed(),
        ["https://dash.example.com:443", "http://192.0.2.10:8443"]
    );
    for (entry, said) in [
        ("https://dash.example.com/app", "no path"),
        ("dash.example.com", "scheme://host"),
        ("null", "Origin: null cannot be listed"),
        ("ftp://x", "http or https"),
    ] {
        let f = only_finding(&mqtt(&format!(
            "listen:\n  ws:\n    address: :8083\n    allowed_origins: [\"{entry}\"]"
        )));
        assert_contains(&f, &["broker.mqtt.listen.ws.allowed_origins[0]", said]);
    }
    let f = only_finding(&mqtt(
        "listen:\n  ws:\n    address: :8083\n    same_origin: yes please",
    ));
    assert_contains(&f, &["broker.mqtt.listen.ws.same_origin", "true"]);
}

#[test]
fn a_unix_door_takes_a_path_a_mode_and_proxy_protocol() {
    let read = doors("listen:\n  unix:\n    path: /run/saguin/saguin.sock");
    assert_eq!(
        read,
        vec![MqttDoor {
            name: "unix".into(),
            listen: Listen::Unix {
                path: "/run/saguin/saguin.sock".into(),
                mode: 0o660,
                proxy_protocol: false,
            },
            authentication: Default::default(),
            tls: None,
        }],
        "a socket alone turns the default tcp door off"
    );
    let proxied = doors(
        "listen:\n  unix:\n    path: '@saguin'\n    mode: \"0600\"\n    proxy_protocol: true",
    );
    assert_eq!(
        proxied[0].listen,
        Listen::Unix {
            path: "@saguin".into(),
            mode: 0o600,
            proxy_protocol: true,
        }
    );
    for (block, said) in [
        ("unix:\n    path: run/s.sock", "must be absolute"),
        ("unix:\n    mode: \"0660\"", "no path"),
        ("unix:\n    path: /run/s.sock\n    mode: 660", "octal"),
        (
            "unix:\n    path: /run/s.sock\n    proxy_protocol: on",
            "true",
        ),
        ("unix:\n    path: /run/s.sock\n    tls: {}", "tls"),
        (
            "tcp:\n    address: :1883\n    proxy_protocol: true",
            "proxy_protocol",
        ),
        ("unix:", "no path"),
    ] {
        let f = only_finding(&mqtt(&format!("listen:\n  {block}")));
        assert_contains(&f, &["broker.mqtt.listen.", said]);
    }
}

#[test]
fn names_ports_and_sockets_are_compared_across_every_kind() {
    let f = only_finding(&mqtt(
        "listen:\n  tcp:\n    name: ws\n    address: 127.0.0.1:1883\n  ws:\n    address: 127.0.0.1:8083",
    ));
    assert_contains(
        &f,
        &[
            "broker.mqtt.listen.ws.name:",
            "\"ws\" is already the name of the door at broker.mqtt.listen.tcp",
        ],
    );
    let f = only_finding(&mqtt(
        "listen:\n  tcp:\n    address: 0.0.0.0:1883\n  ws:\n    address: 127.0.0.1:1883",
    ));
    assert_contains(
        &f,
        &[
            "broker.mqtt.listen.ws.address:",
            "port 1883",
            "broker.mqtt.listen.tcp",
        ],
    );
    let f = only_finding(&mqtt(
        "listen:\n  unix:\n    - {name: a, path: /run/x/s.sock}\n    - {name: b, path: /run/x/./s.sock}",
    ));
    assert_contains(
        &f,
        &[
            "broker.mqtt.listen.unix[1].path:",
            "already the socket of the door at broker.mqtt.listen.unix[0]",
        ],
    );
    let with_operations = "broker:\n  id: edge-1\n  mqtt:\n    listen:\n      unix:\n        path: /run/s.sock\n  operations:\n    listen:\n      unix:\n        path: /run/s.sock\n";
    let f = only_finding(with_operations);
    assert_contains(
        &f,
        &[
            "broker.operations.listen.unix.path:",
            "broker.mqtt.listen.unix",
        ],
    );
}

#[test]
fn an_operations_door_s_tls_is_read_at_the_check_with_its_client_authorities() {
    let door = |tls: &str| {
        format!("broker:\n  id: a\n  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n        tls:\n{tls}")
    };
    // Each file that cannot be read is its own finding, naming its key.
    let missing = findings(&door(
        "          cert_file: /nonexistent/ops.pem\n          key_file: /nonexistent/ops-key.pem\n",
    ));
    assert_eq!(missing.len(), 2, "{missing:#?}");
    assert_contains(
        &missing[0],
        &["broker.operations.listen.tcp.tls.cert_file /nonexistent/ops.pem: cannot read it"],
    );
    assert_contains(
        &missing[1],
        &["broker.operations.listen.tcp.tls.key_file /nonexistent/ops-key.pem: cannot read it"],
    );
    // The client authorities are read as the certificate is.
    let authorities = findings(&door(
        "          cert_file: /nonexistent/ops.pem\n          key_file: /nonexistent/ops-key.pem\n          client_ca_file: /nonexistent/ca.pem\n",
    ))
    .join("\n");
    assert_contains(
        &authorities,
        &["broker.operations.listen.tcp.tls.client_ca_file /nonexistent/ca.pem: cannot read it"],
    );
    assert!(!authorities.contains("not supported"), "{authorities}");
}

#[test]
fn a_file_that_is_not_a_mapping_is_refused() {
    let f = only_finding("- broker\n");
    assert_contains(&f, &["the file (a list):", "block of keys", "broker"]);
}

#[test]
fn a_block_that_is_not_a_mapping_is_refused() {
    let f = only_finding("broker:\n  id: a\n  limits: 5\n");
    assert_contains(
        &f,
        &["broker.limits 5:", "block of keys", "max_message_size"],
    );
}

// ---- listeners ----------------------------------------------------------------------

fn doors(block: &str) -> Vec<MqttDoor> {
    ok(&mqtt(block)).broker.mqtt.doors
}

fn door(name: &str, address: &str) -> MqttDoor {
    MqttDoor {
        name: name.into(),
        listen: Listen::Tcp {
            address: address.into(),
        },
        authentication: Default::default(),
        tls: None,
    }
}

#[test]
fn a_single_mapping_is_one_door_named_tcp() {
    assert_eq!(
        doors("listen:\n  tcp:\n    address: 127.0.0.1:1884"),
        vec![door("tcp", "127.0.0.1:1884")]
    );
    assert_eq!(
        doors("listen:\n  tcp:\n    name: lan\n    address: \"[::1]:0\""),
        vec![door("lan", "[::1]:0")]
    );
}

#[test]
fn a_list_is_several_named_doors_in_order() {
    let got = doors(
        "listen:\n  tcp:\n    - name: local\n      address: 127.0.0.1:1883\n    - name: lan\n      address: 192.168.1.1:1883\n    - name: v6\n      address: \"[::1]:1884\"",
    );
    assert_eq!(
        got,
        vec![
            door("local", "127.0.0.1:1883"),
            door("lan", "192.168.1.1:1883"),
            door("v6", "[::1]:1884"),
        ]
    );
}

#[test]
fn a_list_of_one_unnamed_door_is_named_tcp() {
    assert_eq!(
        doors("listen:\n  tcp:\n    - address: :1883"),
        vec![door("tcp", "0.0.0.0:1883")]
    );
}

#[test]
fn a_door_without_a_name_in_a_list_of_several_is_refused() {
    let f = only_finding(&mqtt(
        "listen:\n  tcp:\n    - name: local\n      address: 127.0.0.1:1883\n    - address: 0.0.0.0:8883",
    ));
    assert_contains(&f, &["broker.mqtt.listen.tcp[1]:", "needs a name"]);
}

#[test]
fn a_door_without_an_address_is_refused() {
    let f = only_finding(&mqtt("listen:\n  tcp:\n    name: lan"));
    assert_contains(
        &f,
        &["broker.mqtt.listen.tcp:", "no address", "0.0.0.0:1883"],
    );
    let f = only_finding(&mqtt("listen:\n  tcp:"));
    assert_contains(&f, &["broker.mqtt.listen.tcp:", "no address"]);
}

#[test]
fn a_bad_listener_address_is_refused_with_its_path_and_value() {
    let f = only_finding(&mqtt("listen:\n  tcp:\n    address: 0.0.0.0"));
    assert_eq!(
        f,
        "broker.mqtt.listen.tcp.address \"0.0.0.0\": no port: write it as host:port, such as 0.0.0.0:1883"
    );
    let f = only_finding(&mqtt("listen:\n  tcp:\n    address: \"::1:1883\""));
    assert_contains(
        &f,
        &["broker.mqtt.listen.tcp.address \"::1:1883\":", "brackets"],
    );
    let f = only_finding(&mqtt("listen:\n  tcp:\n    address: 0.0.0.0:70000"));
    assert_contains(&f, &["\"0.0.0.0:70000\":", "above 65535"]);
}

#[test]
fn duplicate_door_names_are_refused_naming_both_doors() {
    let f = only_finding(&mqtt(
        "listen:\n  tcp:\n    - name: lan\n      address: 127.0.0.1:1883\n    - name: lan\n      address: 127.0.0.1:1884",
    ));
    assert_contains(
        &f,
        &[
            "broker.mqtt.listen.tcp[1].name:",
            "\"lan\" is already the name of the door at broker.mqtt.listen.tcp[0] (\"127.0.0.1:1883\")",
        ],
    );
}

#[test]
fn two_doors_on_one_port_clash() {
    let f = only_finding(&mqtt(
        "listen:\n  tcp:\n    - name: local\n      address: 127.0.0.1:1883\n    - name: all\n      address: 0.0.0.0:1883",
    ));
    assert_contains(
        &f,
        &[
            "broker.mqtt.listen.tcp[1].address:",
            "\"0.0.0.0:1883\" needs port 1883",
            "the door at broker.mqtt.listen.tcp[0] (\"127.0.0.1:1883\") already takes",
            "another port",
        ],
    );
}

#[test]
fn doors_on_port_zero_or_on_different_hosts_do_not_clash() {
    let got = doors(
        "listen:\n  tcp:\n    - name: a\n      address: 0.0.0.0:0\n    - name: b\n      address: 0.0.0.0:0\n    - name: c\n      address: 127.0.0.1:1883\n    - name: d\n      address: 10.0.0.1:1883",
    );
    assert_eq!(got.len(), 4);
}

#[test]
fn name_and_port_checks_still_run_beside_a_refused_door() {
    let all = findings(&mqtt(
        "listen:\n  tcp:\n    - name: a\n      address: 0.0.0.0:1883\n    - name: b\n      address: nope\n    - name: a\n      address: 127.0.0.1:1883",
    ));
    assert_eq!(all.len(), 3, "{all:#?}");
    assert_contains(&all[0], &["broker.mqtt.listen.tcp[1].address \"nope\":"]);
    assert_contains(
        &all[1],
        &["broker.mqtt.listen.tcp[2].name:", "\"a\" is already"],
    );
    assert_contains(
        &all[2],
        &["broker.mqtt.listen.tcp[2].address:", "port 1883"],
    );
}

#[test]
fn an_empty_list_of_doors_is_refused() {
    let f = only_finding(&mqtt("listen:\n  tcp: []"));
    assert_contains(&f, &["broker.mqtt.listen.tcp (a list):", "opens no door"]);
}

#[test]
fn every_door_problem_is_reported_at_once() {
    let all = findings(&mqtt(
        "listen:\n  tcp:\n    - name: a\n      address: nope\n    - address: 0.0.0.0:1\n    - name: c\n      tls:\n        cert_file: /c\n      address: 0.0.0.0:2",
    ));
    assert_eq!(all.len(), 3, "{all:#?}");
    assert_contains(&all[0], &["broker.mqtt.listen.tcp[0].address \"nope\":"]);
    assert_contains(&all[1], &["broker.mqtt.listen.tcp[1]:", "needs a name"]);
    assert_contains(
        &all[2],
        &["broker.mqtt.listen.tcp[2].tls:", "needs key_file"],
    );
}

// ---- the report -------------------------------------------------------------------------

#[test]
fn several_mistakes_are_all_reported_at_once() {
    let text = "broker:
  log_level: verbose
  pid_file: saguin.pid
  storage: {}
  mqtt:
    min_protocol_version: 3
    listen:
      tcp:
        address: 0.0.0.0
  limits:
    max_keepalive: 20h
    publish_rate: 0
    connect_timeout: none
    session_queue_bytes: 1KiB
    max_connect_size: 2MiB
    nonsense: 1
";
    let e = parse(text, FILE).unwrap_err();
    let all = e.findings.join("\n");
    assert_eq!(e.findings.len(), 12, "{all}");
    assert_contains(
        &all,
        &[
            "broker.storage:",
            "broker.id: missing",
            "broker.log_level \"verbose\"",
            "broker.pid_file \"saguin.pid\"",
            "broker.mqtt.listen.tcp.address \"0.0.0.0\"",
            "broker.mqtt.min_protocol_version 3",
            "broker.limits.nonsense:",
            "broker.limits.max_keepalive \"20h\"",
            "broker.limits.publish_rate 0",
            "broker.limits.connect_timeout \"none\"",
            "broker.limits.session_queue_bytes \"1KiB\"",
            "broker.limits.max_connect_size \"2MiB\"",
        ],
    );
}

#[test]
fn the_report_names_the_file_then_each_finding() {
    let text = "broker:\n  id: a\n  log_level: verbose\n  limits:\n    max_keepalive: 20h\n";
    let e = parse(text, "saguin.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "configuration is invalid:
saguin.yaml:
  - broker.log_level \"verbose\": it is one of debug, info, warn or error; omit the key for info
  - broker.limits.max_keepalive \"20h\" is longer than MQTT can express, which is 65535 seconds (about 18 hours); write `none` for no ceiling"
    );
    let as_error: &dyn std::error::Error = &e;
    assert!(as_error
        .to_string()
        .starts_with("configuration is invalid:"));
}

#[test]
fn a_yaml_syntax_error_names_the_line_and_column() {
    let e = parse("broker:\n  id: a\n  limits: [1\n", "gw.yaml").unwrap_err();
    assert_eq!(e.file, "gw.yaml");
    assert_eq!(e.findings.len(), 1);
    assert_contains(&e.findings[0], &["line 4, column 1:", "not valid YAML"]);
    assert!(e
        .to_string()
        .starts_with("configuration is invalid:\ngw.yaml:\n  - line 4"));
}

#[test]
fn a_duplicated_key_is_refused_as_invalid_yaml() {
    let e = parse("broker:\n  id: a\n  id: b\n", FILE).unwrap_err();
    assert_contains(&e.findings[0], &["not valid YAML", "duplicate", "id"]);
}

#[test]
fn an_unreadable_file_names_the_path_and_the_os_error() {
    let path = std::path::Path::new("/nonexistent/saguin-test/saguin.yaml");
    let e = load(path).unwrap_err();
    assert_eq!(e.file, "/nonexistent/saguin-test/saguin.yaml");
    assert_eq!(e.findings.len(), 1);
    assert_contains(&e.findings[0], &["cannot be read", "No such file"]);
}

#[test]
fn load_reads_a_file_and_keeps_its_name() {
    let dir = std::env::temp_dir().join(format!("saguin-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("gw.yaml");
    std::fs::write(&path, MINIMAL).unwrap();
    let c = load(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    let c = c.unwrap();
    assert_eq!(c.source, path.display().to_string());
    assert_eq!(c.broker.id, "edge-1");
}

// ---- shipped files --------------------------------------------------------------------

/// Every file shipped in `config/` and `boards/`, embedded so the test runs
/// where the source tree is not at hand (under QEMU, for one).
const SHIPPED: [(&str, &str); 5] = [
    ("config/saguin.yaml", DEFAULT_CONFIG_YAML),
    (
        "boards/raspberry-pi-4.yaml",
        include_str!("../../boards/raspberry-pi-4.yaml"),
    ),
    (
        "boards/raspberry-pi-zero-2w.yaml",
        include_str!("../../boards/raspberry-pi-zero-2w.yaml"),
    ),
    (
        "boards/openwrt-128mb.yaml",
        include_str!("../../boards/openwrt-128mb.yaml"),
    ),
    (
        "boards/industrial-arm-512mb.yaml",
        include_str!("../../boards/industrial-arm-512mb.yaml"),
    ),
];

#[test]
fn every_shipped_file_is_valid() {
    for (name, text) in SHIPPED {
        if text == DEFAULT_CONFIG_YAML {
            // Its `./data` path is valid only as the embedded default
            // (config::embedded), which panics if the file is invalid.
            default_config_in(std::path::Path::new("/srv"));
            continue;
        }
        if let Err(e) = parse(text, name) {
            panic!("{e}");
        }
    }
}

/// Every board profile writes its board's RAM as `# board_ram: SIZE`, and
/// the worst case the broker prints for it leaves at least a quarter of
/// that RAM to the OS.
#[test]
fn every_boards_worst_case_leaves_a_quarter_of_its_ram() {
    for (name, text) in SHIPPED.iter().filter(|(n, _)| n.starts_with("boards/")) {
        let ram = text
            .lines()
            .find_map(|line| line.strip_prefix("# board_ram: "))
            .unwrap_or_else(|| panic!("{name} writes no `# board_ram: SIZE` line"));
        let ram_bytes = super::units::parse_size_bytes(ram.trim()).unwrap();
        let config = parse(text, name).unwrap();
        let worst = crate::net::worst_case::WorstCase::of(&config.shell_settings());
        let worst_bytes = worst.total_bytes();
        assert!(
            worst_bytes <= ram_bytes / 4 * 3,
            "{name}: the worst case {worst_bytes} leaves less than a quarter of {ram_bytes} bytes:\n{}",
            worst.lines().join("\n")
        );
    }
}

#[test]
fn every_shipped_file_is_in_the_embedded_list() {
    // Where the source tree is present, a board added without a line above
    // fails here rather than going untested.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["config", "boards"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".yaml") || name.ends_with(".yml") {
                let shipped = format!("{dir}/{name}");
                assert!(
                    SHIPPED.iter().any(|(n, _)| *n == shipped),
                    "{shipped} is not in SHIPPED, so no test reads it"
                );
            }
        }
    }
}

#[test]
fn the_default_configuration_is_gateway_sized() {
    let c = default_config_in(std::path::Path::new("/srv"));
    assert_eq!(c.source, "<embedded default>");
    assert_eq!(c.broker.id, "gateway");
    assert_eq!(c.broker.mqtt.doors, vec![door("tcp", "0.0.0.0:1883")]);
    assert_eq!(c.broker.limits.max_connections, 1000);
    let l = &c.broker.limits;
    assert!(l.max_connect_size_bytes <= l.max_message_size_bytes);
    assert!(l.session_queue_bytes >= u64::from(l.max_message_size_bytes));
}

#[test]
fn every_board_keeps_sessions_and_retained_messages_across_a_restart() {
    // redb under /var/lib/saguin, except on OpenWrt: /var is RAM there and
    // a write per message would wear the router's flash, so it holds them
    // in memory and snapshots them to flash under /etc at a clean stop.
    for (name, text) in SHIPPED.iter().filter(|(n, _)| n.starts_with("boards/")) {
        let broker = parse(text, name).unwrap().broker;
        let storage = broker.storage.as_ref().expect(name);
        for kept_in in [&broker.session.storage, &broker.retained.storage] {
            let provider = storage.provider(kept_in.as_deref().expect(name)).unwrap();
            match &provider.kind {
                ProviderKind::Redb { file_path, .. } => {
                    assert!(file_path.starts_with("/var/lib/saguin"), "{name}")
                }
                ProviderKind::Memory {
                    snapshot_dir: Some(dir),
                    ..
                } if name.contains("openwrt") => assert!(dir.starts_with("/etc/saguin"), "{name}"),
                other => panic!("{name}: {other:?} keeps nothing across a restart"),
            }
        }
    }
}

#[test]
fn every_board_bounds_its_session_queues_to_a_share_of_its_memory() {
    // (board, RAM in MiB): queued deliveries at their bound on every
    // connection may take at most a quarter of the board's memory.
    for (name, ram_mib) in [
        ("boards/raspberry-pi-4.yaml", 2048u64),
        ("boards/raspberry-pi-zero-2w.yaml", 512),
        ("boards/openwrt-128mb.yaml", 128),
        ("boards/industrial-arm-512mb.yaml", 512),
    ] {
        let text = SHIPPED.iter().find(|(n, _)| *n == name).unwrap().1;
        let l = parse(text, name).unwrap().broker.limits;
        let queues = u64::from(l.max_connections)
            .checked_mul(l.session_queue_bytes)
            .unwrap();
        assert!(
            queues <= ram_mib * 1024 * 1024 / 4,
            "{name}: {queues} bytes of session queues"
        );
    }
}

#[test]
fn every_board_on_flash_waits_for_company_before_a_commit() {
    // Each commit rewrites several pages however few records it carries,
    // so a board whose file is on flash groups records; OpenWrt's storage
    // is a memory provider, which writes flash only at a clean stop.
    for (name, text) in SHIPPED.iter().filter(|(n, _)| n.starts_with("boards/")) {
        let broker = parse(text, name).unwrap().broker;
        let storage = broker.storage.as_ref().expect(name);
        let policy = storage.provider("local").expect(name).commit_policy();
        if *name == "boards/openwrt-128mb.yaml" {
            assert_eq!(policy, CommitPolicy::Collect, "{name}");
            continue;
        }
        let CommitPolicy::Interval {
            interval_ms,
            max_records,
        } = policy
        else {
            panic!("{name}: {policy:?} does not wait for company");
        };
        assert!((10..=50).contains(&interval_ms), "{name}: {interval_ms} ms");
        assert_eq!(max_records, 16, "{name}");
    }
}
