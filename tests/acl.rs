//! The authorization file over real sockets: what each role may and may
//! not do, how a denied feature looks on the wire, and a reload that
//! withdraws a grant from live subscribers and consumers.

mod common;

use std::process::Command;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{
    Connack, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, Subscribe,
    SubscriptionOptions, Will,
};

const STORAGE: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: {dir}\n";
const CHANNELS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";

const ACL: &str = "\
roles:
  watcher:
    - channel: events
      allow: [read]
    - topic: alerts/#
      allow: [read]
    - topic: other/#
      allow: [read]
  writer:
    - channel: events
      allow: [write]
    - channel: state
      allow: [write]
    - channel: jobs
      allow: [write]
    - topic: \"#\"
      allow: [write]
  device:
    - topic: iot/%u/health/%c
      allow: [write, read]
  constrained:
    - broker: features
      deny: [persistent, will, share, retained, qos2]
    - topic: \"#\"
      allow: [write, read]
  on-call:
    - broker: sessions
      allow: [disconnect]
  worker:
    - channel: jobs
      allow: [consume]
    - topic: other/#
      allow: [read]
  keeper:
    - topic: \"$private/#\"
      allow: [write]
  everything:
    - channel: events
      allow: [read]
    - channel: state
      allow: [read]
    - channel: jobs__dlq
      allow: [read]
    - topic: \"#\"
      allow: [read]
users:
  all: [everything]
  watcher: [watcher]
  writer: [writer]
  \"dev-*\":
    roles: [device]
    client_ids: \"%u-*\"
  small: [constrained]
  oncall: [on-call]
  worker: [worker]
  keeper: [keeper]
";

/// The password every user of [`USERS`] connects with.
const PASSWORD: &[u8] = b"secret";
/// The user names the tests connect under.
const USERS: [&str; 8] = [
    "all", "watcher", "writer", "dev-a", "small", "oncall", "worker", "keeper",
];

/// Writes `dir`/clients.passwd naming every one of [`USERS`]: an acl_file
/// governs authenticated names, so the broker needs a password file.
fn write_password_file(dir: &TempDir) {
    use saguin::auth::hash::{PasswordHash, SALT_BYTES};
    let hash = PasswordHash::new_pbkdf2(PASSWORD, &[7; SALT_BYTES]);
    let lines: String = USERS
        .iter()
        .map(|user| format!("{user}:{hash}\n"))
        .collect();
    std::fs::write(dir.path().join("clients.passwd"), lines).unwrap();
}

/// `broker.mqtt`'s keys for the acl_file and password file in `dir`.
fn mqtt_keys(dir: &TempDir) -> String {
    write_password_file(dir);
    format!(
        "    acl_file: {0}/acl.yaml\n    password_file: {0}/clients.passwd\n",
        dir.path().display()
    )
}

/// A broker whose acl_file is `acl`, in a directory of its own.
fn start(dir: &TempDir, acl: &str) -> BrokerProcess {
    std::fs::write(dir.path().join("acl.yaml"), acl).unwrap();
    let broker_yaml = format!("{}{STORAGE}", mqtt_keys(dir));
    BrokerProcess::start_in(dir.path(), &broker_yaml, CHANNELS)
}

/// Rewrites the acl_file and signals the broker to read it again.
fn reload(broker: &mut BrokerProcess, dir: &TempDir, acl: &str) {
    std::fs::write(dir.path().join("acl.yaml"), acl).unwrap();
    // Each reload logs one line: the earlier ones are set aside first.
    broker.log_lines.retain(|l| !l.contains("re-read"));
    let status = Command::new("kill")
        .args(["-USR1", &broker.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    broker.wait_for_log("re-read");
}

fn try_connect(
    address: &str,
    version: ProtocolVersion,
    user: &str,
    client_id: &str,
    shape: impl FnOnce(&mut saguin::codec::Connect),
) -> (RawClient, Connack) {
    let mut client = RawClient::open(address, version);
    let mut connect = common::connect_packet(version, client_id);
    connect.username = Some(user.into());
    connect.password = Some(PASSWORD.to_vec());
    shape(&mut connect);
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => (client, connack),
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

fn connect(address: &str, version: ProtocolVersion, user: &str, client_id: &str) -> RawClient {
    let (client, connack) = try_connect(address, version, user, client_id, |_| {});
    assert_eq!(connack.reason_code.0, 0, "{user} refused: {connack:?}");
    client
}

fn publish_qos1(client: &mut RawClient, topic: &str, payload: &[u8], properties: Properties) -> u8 {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(7),
        payload: payload.to_vec(),
        properties,
        ..Publish::default()
    }));
    match client.recv() {
        Received::Packet(Packet::Puback(PubAck { reason_code, .. })) => reason_code.0,
        other => panic!("expected a PUBACK for {topic}, got {other:?}"),
    }
}

fn suback(client: &mut RawClient, filters: &[&str]) -> Vec<u8> {
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    client.send(&Packet::Subscribe(Subscribe {
        packet_id: 3,
        properties: Properties::default(),
        filters: filters.iter().map(|f| (f.to_string(), options)).collect(),
    }));
    match client.recv() {
        Received::Packet(Packet::Suback(suback)) => {
            suback.reason_codes.iter().map(|c| c.0).collect()
        }
        other => panic!("expected a SUBACK, got {other:?}"),
    }
}

/// The next PUBLISH delivered, acknowledged; its topic and payload.
fn next_delivery(client: &mut RawClient) -> (String, Vec<u8>) {
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                if let Some(packet_id) = publish.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                return (publish.topic, publish.payload);
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while waiting for a delivery"),
        }
    }
}

fn with_response_topic() -> Properties {
    Properties {
        response_topic: Some("replies/x".into()),
        ..Properties::default()
    }
}

#[test]
fn a_role_reads_one_channel_and_nothing_else() {
    let dir = TempDir::new("acl-verbs");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    // read on events is granted; the other channels and verbs are not.
    assert_eq!(suback(&mut watcher, &["events/#"]), [1]);
    assert_eq!(
        publish_qos1(&mut watcher, "events/a", b"x", Properties::default()),
        0x87
    );
    let seek = publish_qos1(
        &mut watcher,
        "$saguin/consumer/events/seek",
        b"earliest",
        with_response_topic(),
    );
    assert_eq!(seek, 0x87, "seek without the seek verb");
    let point_read = publish_qos1(
        &mut watcher,
        "$saguin/kv/get",
        b"state/a",
        with_response_topic(),
    );
    assert_eq!(point_read, 0x87, "a point read without read on state");
    assert_eq!(suback(&mut watcher, &["state/#"]), [0x87]);
    assert_eq!(suback(&mut watcher, &["$saguin/queue/jobs"]), [0x87]);
    assert_eq!(
        publish_qos1(&mut watcher, "jobs/a", b"x", Properties::default()),
        0x87
    );
    // A writer may write each channel, and read none of them.
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    assert_eq!(
        publish_qos1(&mut writer, "events/a", b"x", Properties::default()),
        0
    );
    assert_eq!(
        publish_qos1(&mut writer, "state/a", b"x", Properties::default()),
        0
    );
    assert_eq!(
        publish_qos1(&mut writer, "jobs/a", b"x", Properties::default()),
        0
    );
    // A deletion on a latest channel is its own verb.
    assert_eq!(
        publish_qos1(&mut writer, "state/a", b"", Properties::default()),
        0x87
    );
    assert_eq!(suback(&mut writer, &["events/#", "alerts/#"]), [0x87, 0x87]);
    // The watcher's granted subscription delivers what the writer wrote.
    assert_eq!(
        next_delivery(&mut watcher),
        ("events/a".into(), b"x".to_vec())
    );
}

#[test]
fn a_refused_publish_is_0x87_and_a_311_client_is_closed() {
    let dir = TempDir::new("acl-publish");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    assert_eq!(
        publish_qos1(&mut watcher, "alerts/fire", b"x", Properties::default()),
        0x87
    );
    watcher.assert_alive();
    let mut old = connect(&address, ProtocolVersion::V311, "watcher", "w2");
    old.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: "alerts/fire".into(),
        packet_id: Some(1),
        payload: b"x".to_vec(),
        ..Publish::default()
    }));
    assert!(
        old.recv_until_closed().is_empty(),
        "3.1.1 is closed, never acknowledged"
    );
}

#[test]
fn a_subscribe_is_answered_per_filter() {
    let dir = TempDir::new("acl-subscribe");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    // The interoperability suite's expectation: a denied filter is 0x87.
    let codes = suback(
        &mut watcher,
        &["alerts/#", "test/nosubscribe", "events/#", "#", "$app/#"],
    );
    assert_eq!(codes, [1, 0x87, 1, 0x87, 0x87]);
    // `#` crosses the queue, whose jobs it is never served: it asks only
    // the channels it reads and broadcast.
    let mut all = connect(&address, ProtocolVersion::V5, "all", "a1");
    assert_eq!(suback(&mut all, &["#"]), [1]);
    let mut old = connect(&address, ProtocolVersion::V311, "watcher", "w2");
    assert_eq!(
        suback(&mut old, &["test/nosubscribe", "alerts/x"]),
        [0x80, 1]
    );
}

#[test]
fn patterns_give_each_device_its_own_subtree() {
    let dir = TempDir::new("acl-patterns");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut device = connect(&address, ProtocolVersion::V5, "dev-a", "dev-a-1");
    let own = publish_qos1(
        &mut device,
        "iot/dev-a/health/dev-a-1",
        b"ok",
        Properties::default(),
    );
    assert_eq!(own, 0);
    for other in ["iot/dev-b/health/dev-a-1", "iot/dev-a/health/dev-a-2"] {
        assert_eq!(
            publish_qos1(&mut device, other, b"x", Properties::default()),
            0x87,
            "{other}"
        );
    }
    assert_eq!(
        suback(&mut device, &["iot/dev-a/health/dev-a-1", "iot/+/health/+"]),
        [1, 0x87]
    );
    // client_ids: "%u-*" keeps the name to its own devices: 0x86.
    let (_, connack) = try_connect(&address, ProtocolVersion::V5, "dev-a", "dev-b-1", |_| {});
    assert_eq!(connack.reason_code.0, 0x86);
    let (_, connack) = try_connect(&address, ProtocolVersion::V311, "dev-a", "dev-b-1", |_| {});
    assert_eq!(
        connack.reason_code.0, 0x86,
        "3.1.1's return code 4 reads back as 0x86"
    );
    // An id left to the broker to assign is not one the pattern admits.
    let (_, connack) = try_connect(&address, ProtocolVersion::V5, "dev-a", "", |_| {});
    assert_eq!(connack.reason_code.0, 0x86);
}

#[test]
fn each_feature_denial_shows_on_the_wire() {
    let dir = TempDir::new("acl-features");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let (mut small, connack) = try_connect(&address, ProtocolVersion::V5, "small", "s1", |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval_s = Some(3600);
    });
    assert_eq!(connack.reason_code.0, 0);
    assert_eq!(connack.properties.maximum_qos, Some(1), "qos2");
    assert_eq!(
        connack.properties.shared_subscription_available,
        Some(0),
        "share"
    );
    assert_eq!(
        connack.properties.session_expiry_interval_s,
        Some(0),
        "persistent"
    );
    // QoS 2 asked is granted 1.
    let options = SubscriptionOptions {
        qos: QoS::ExactlyOnce,
        ..SubscriptionOptions::default()
    };
    small.send(&Packet::Subscribe(Subscribe {
        packet_id: 2,
        properties: Properties::default(),
        filters: vec![("anything/#".into(), options)],
    }));
    match small.recv() {
        Received::Packet(Packet::Suback(s)) => assert_eq!(s.reason_codes[0].0, 1),
        other => panic!("expected a SUBACK, got {other:?}"),
    }
    // A QoS 2 publish anyway is closed 0x9B.
    small.send(&Packet::Publish(Publish {
        qos: QoS::ExactlyOnce,
        topic: "anything/x".into(),
        packet_id: Some(1),
        ..Publish::default()
    }));
    assert_disconnected(&mut small, 0x9B);
    // A retained broadcast value is closed 0x9A; on a channel it is not asked.
    let mut small = connect(&address, ProtocolVersion::V5, "small", "s2");
    small.send(&Packet::Publish(Publish {
        qos: QoS::AtMostOnce,
        retain: true,
        topic: "anything/x".into(),
        ..Publish::default()
    }));
    assert_disconnected(&mut small, 0x9A);
    // A shared subscription is a protocol breach: 0x9E.
    let mut small = connect(&address, ProtocolVersion::V5, "small", "s3");
    small.send(&Packet::Subscribe(Subscribe {
        packet_id: 2,
        properties: Properties::default(),
        filters: vec![("$share/g/anything/#".into(), SubscriptionOptions::default())],
    }));
    assert_disconnected(&mut small, 0x9E);
    // A Will is refused 0x87 on MQTT 5 and 0x05 on 3.1.1.
    for (version, code) in [(ProtocolVersion::V5, 0x87), (ProtocolVersion::V311, 0x87)] {
        let (_, connack) = try_connect(&address, version, "small", "s4", |c| {
            c.will = Some(Will {
                topic: "anything/gone".into(),
                payload: b"bye".to_vec(),
                qos: QoS::AtMostOnce,
                retain: false,
                properties: Properties::default(),
            });
        });
        assert_eq!(connack.reason_code.0, code, "{version:?}");
    }
}

fn assert_disconnected(client: &mut RawClient, code: u8) {
    let packets = client.recv_until_closed();
    match packets.last() {
        Some(Packet::Disconnect(d)) => assert_eq!(d.reason_code.0, code, "{d:?}"),
        other => panic!("expected a DISCONNECT 0x{code:02X}, got {other:?}"),
    }
}

/// The watcher file with `read` on alerts/# and events taken away.
fn narrowed() -> String {
    ACL.replace(
        "    - channel: events\n      allow: [read]\n    - topic: alerts/#\n      allow: [read]\n",
        "",
    )
}

/// Sends SIGUSR1 and waits for the log line saying a file was refused.
fn refused_reload(broker: &mut BrokerProcess) {
    broker.log_lines.retain(|l| !l.contains("stay in force"));
    Command::new("kill")
        .args(["-USR1", &broker.pid().to_string()])
        .status()
        .unwrap();
    broker.wait_for_log("stay in force");
}

#[test]
fn a_reload_puts_neither_file_in_force_unless_both_read() {
    let dir = TempDir::new("acl-reload-both");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let passwd = dir.path().join("clients.passwd");
    let users = std::fs::read_to_string(&passwd).unwrap();
    // A narrowed acl_file beside a password file that does not read.
    std::fs::write(dir.path().join("acl.yaml"), narrowed()).unwrap();
    std::fs::write(&passwd, format!("{users}broken-line\n")).unwrap();
    refused_reload(&mut broker);
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    assert_eq!(
        suback(&mut watcher, &["alerts/#"]),
        [1],
        "the old rules stay"
    );
    // A new user beside an acl_file that does not read.
    std::fs::write(dir.path().join("acl.yaml"), "roles: [").unwrap();
    let newbie = users.lines().next().unwrap().replacen("all:", "newbie:", 1);
    std::fs::write(&passwd, format!("{users}{newbie}\n")).unwrap();
    refused_reload(&mut broker);
    let (_, connack) = try_connect(&address, ProtocolVersion::V5, "newbie", "n1", |_| {});
    assert_eq!(connack.reason_code.0, 0x86, "the old password file stays");
    // Both read: both in force.
    std::fs::write(dir.path().join("acl.yaml"), narrowed()).unwrap();
    reload(&mut broker, &dir, &narrowed());
    let (_, connack) = try_connect(&address, ProtocolVersion::V5, "newbie", "n2", |_| {});
    assert_eq!(connack.reason_code.0, 0, "the new user is in force");
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w3");
    assert_eq!(
        suback(&mut watcher, &["alerts/#"]),
        [0x87],
        "the new rules are"
    );
}

#[test]
fn a_reload_withdraws_a_grant_from_a_live_subscriber() {
    let dir = TempDir::new("acl-reload");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    assert_eq!(suback(&mut watcher, &["alerts/#", "other/#"]), [1, 1]);
    let mut member = connect(&address, ProtocolVersion::V5, "watcher", "w2");
    assert_eq!(
        suback(&mut member, &["$share/g/alerts/#", "other/#"]),
        [1, 1]
    );
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    assert_eq!(
        publish_qos1(&mut writer, "alerts/1", b"before", Properties::default()),
        0
    );
    for client in [&mut watcher, &mut member] {
        assert_eq!(
            next_delivery(client),
            ("alerts/1".into(), b"before".to_vec())
        );
    }
    reload(&mut broker, &dir, &narrowed());
    assert_eq!(
        publish_qos1(&mut writer, "alerts/2", b"withheld", Properties::default()),
        0
    );
    assert_eq!(
        publish_qos1(&mut writer, "other/1", b"marker", Properties::default()),
        0
    );
    // Deliveries keep their order, so the marker arriving first means the
    // withheld message was never sent.
    for client in [&mut watcher, &mut member] {
        assert_eq!(
            next_delivery(client),
            ("other/1".into(), b"marker".to_vec())
        );
    }
    assert_eq!(suback(&mut watcher, &["alerts/#"]), [0x87]);
}

#[test]
fn a_channel_consumer_stalls_at_its_position_and_resumes() {
    let dir = TempDir::new("acl-stall");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    assert_eq!(suback(&mut watcher, &["events/#", "other/#"]), [1, 1]);
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    assert_eq!(
        publish_qos1(&mut writer, "events/1", b"first", Properties::default()),
        0
    );
    assert_eq!(
        next_delivery(&mut watcher),
        ("events/1".into(), b"first".to_vec())
    );
    reload(&mut broker, &dir, &narrowed());
    assert_eq!(
        publish_qos1(&mut writer, "events/2", b"second", Properties::default()),
        0
    );
    assert_eq!(
        publish_qos1(&mut writer, "other/1", b"marker", Properties::default()),
        0
    );
    assert_eq!(
        next_delivery(&mut watcher),
        ("other/1".into(), b"marker".to_vec())
    );
    // The grant returns, and the record the consumer stalled on follows.
    reload(&mut broker, &dir, ACL);
    assert_eq!(
        next_delivery(&mut watcher),
        ("events/2".into(), b"second".to_vec())
    );
}

#[test]
fn a_file_that_cannot_be_used_stops_the_start_and_a_reload_keeps_the_old_one() {
    let dir = TempDir::new("acl-refused");
    let config = dir.path().join("saguin.yaml");
    std::fs::write(
        dir.path().join("acl.yaml"),
        "roles:\n  r:\n    - channel: nowhere\n      allow: [read]\n",
    )
    .unwrap();
    std::fs::write(
        &config,
        format!("broker:\n  id: t\n  mqtt:\n{}", mqtt_keys(&dir)),
    )
    .unwrap();
    let output = common::check_config(&config);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("acl.yaml"), "{stderr}");
    assert!(stderr.contains("line 3: roles.r[0].channel"), "{stderr}");
    // A running broker keeps its rules when the new file is refused.
    let dir = TempDir::new("acl-reload-refused");
    let mut broker = start(&dir, ACL);
    std::fs::write(dir.path().join("acl.yaml"), "roles: [").unwrap();
    Command::new("kill")
        .args(["-USR1", &broker.pid().to_string()])
        .status()
        .unwrap();
    broker.wait_for_log("stay in force");
    let mut watcher = connect(&broker.address(), ProtocolVersion::V5, "watcher", "w1");
    assert_eq!(suback(&mut watcher, &["alerts/#"]), [1]);
}

/// `--check-config` on `mqtt` (the keys under `broker.mqtt`): its exit
/// code and standard error.
fn check_config(dir: &TempDir, mqtt: &str) -> (Option<i32>, String) {
    let config = dir.path().join("saguin.yaml");
    let text = format!(
        "broker:\n  id: t\n  mqtt:\n{mqtt}{}{CHANNELS}",
        STORAGE.replace("{dir}", &dir.path().display().to_string())
    );
    std::fs::write(&config, text).unwrap();
    let output = common::check_config(&config);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code(), stderr)
}

#[test]
fn an_acl_file_needs_clients_named_and_a_door_nothing_guards_is_warned_about() {
    let dir = TempDir::new("acl-identity");
    std::fs::write(dir.path().join("acl.yaml"), ACL).unwrap();
    let acl_only = format!("    acl_file: {}/acl.yaml\n", dir.path().display());
    let (code, stderr) = check_config(&dir, &acl_only);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("broker.mqtt.acl_file: an authorization file needs"),
        "{stderr}"
    );
    let anonymous = format!("{}    allow_anonymous: true\n", mqtt_keys(&dir));
    let (code, stderr) = check_config(&dir, &anonymous);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("broker.mqtt.allow_anonymous: true beside"),
        "{stderr}"
    );
    // The fleet's door checks its clients; the local one checks nobody.
    let doors = format!(
        "    acl_file: {0}/acl.yaml\n    listen:\n      tcp:\n        - name: fleet\n          address: 127.0.0.1:0\n          password_file: {0}/clients.passwd\n        - name: local\n          address: 127.0.0.1:0\n",
        dir.path().display()
    );
    let (code, stderr) = check_config(&dir, &doors);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: broker.mqtt.listen.tcp (local): no password_file checks"),
        "{stderr}"
    );
    assert!(!stderr.contains("(fleet)"), "{stderr}");
}

#[test]
fn acl_explains_a_user() {
    let dir = TempDir::new("acl-explain");
    std::fs::write(dir.path().join("acl.yaml"), ACL).unwrap();
    let config = dir.path().join("saguin.yaml");
    std::fs::write(
        &config,
        format!(
            "broker:\n  id: t\n  mqtt:\n{}{}{CHANNELS}",
            mqtt_keys(&dir),
            STORAGE.replace("{dir}", &dir.path().display().to_string())
        ),
    )
    .unwrap();
    let run = |args: &[&str], input: &str| {
        let mut saguin = Command::new(env!("CARGO_BIN_EXE_saguin"));
        saguin.arg("--acl").arg(&config).args(args);
        let output = common::output_with_input(&mut saguin, input).unwrap();
        assert!(output.status.success());
        String::from_utf8(output.stdout).unwrap()
    };
    let table = run(&[], "watcher\ndev-a dev-a-1\nnobody\n");
    assert_eq!(
        table,
        "# user\trole\tkind\tsubject\tverbs\trate\tbytes\n\
         watcher\twatcher\tchannel\tevents\tread\tno bound\tno bound\n\
         watcher\twatcher\ttopic\talerts/#\tread\tno bound\tno bound\n\
         watcher\twatcher\ttopic\tother/#\tread\tno bound\tno bound\n\
         dev-a\tdevice\ttopic\tiot/dev-a/health/dev-a-1\twrite,read\tno bound\tno bound\n\
         nobody\t-\t-\t-\t-\tno bound\tno bound\n"
    );
    let json = run(&["--json"], "dev-a dev-a-1\nnobody\n");
    assert_eq!(
        json,
        concat!(
            r#"{"user":"dev-a","role":"device","kind":"topic","subject":"iot/dev-a/health/dev-a-1","verbs":["write","read"],"denies":[],"publish_rate":null,"publish_bytes":null}"#,
            "\n",
            r#"{"user":"nobody","role":null,"kind":null,"subject":null,"verbs":[],"denies":[],"publish_rate":null,"publish_bytes":null}"#,
            "\n"
        )
    );
    let one = run(&["dev-a", "dev-b-1", "--json"], "");
    for field in [
        r#""pattern_applied":"dev-*""#,
        r#""patterns_matched":["dev-*"]"#,
        r#""grants":[{"role":"device","kind":"topic","subject":"iot/dev-a/health/dev-b-1","verbs":["write","read"],"denies":[]}]"#,
        r#""client_id_allowed":false"#,
    ] {
        assert!(one.contains(field), "{field} in {one}");
    }
    let paragraph = run(&["dev-a", "dev-b-1"], "");
    assert!(
        paragraph.contains("entry in force: \"dev-*\""),
        "{paragraph}"
    );
    assert!(paragraph.contains("may NOT carry this name"), "{paragraph}");
}

fn request(
    client: &mut RawClient,
    topic: &str,
    payload: &[u8],
    response_topic: Option<&str>,
) -> (u8, Option<Vec<u8>>) {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(9),
        payload: payload.to_vec(),
        properties: Properties {
            response_topic: response_topic.map(Into::into),
            correlation_data: Some(b"c1".to_vec()),
            ..Properties::default()
        },
        ..Publish::default()
    }));
    let mut reply = None;
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(p)) => {
                assert_eq!(p.properties.correlation_data.as_deref(), Some(&b"c1"[..]));
                reply = Some(p.payload);
            }
            Received::Packet(Packet::Puback(ack)) => return (ack.reason_code.0, reply),
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
}

#[test]
fn the_hang_up_needs_its_verb_and_answers_in_a_word() {
    let dir = TempDir::new("acl-hang-up");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    let mut oncall = connect(&address, ProtocolVersion::V5, "oncall", "o1");
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    let topic = "$saguin/sessions/disconnect";
    // A topic rule of "#" reaches every broadcast topic and not this.
    assert_eq!(
        request(&mut writer, topic, b"w1", Some("r/x")),
        (0x87, None)
    );
    assert_eq!(request(&mut oncall, topic, b"w1", None), (0x83, None));
    assert_eq!(
        request(&mut oncall, topic, b"o1", Some("r/x")),
        (0x83, None)
    );
    assert_eq!(request(&mut oncall, topic, b"", Some("r/x")), (0x83, None));
    let answer = request(&mut oncall, topic, b"w1", Some("r/x"));
    assert_eq!(answer, (0, Some(b"hung-up".to_vec())));
    assert_disconnected(&mut watcher, 0x98);
    let answer = request(&mut oncall, topic, b"w1", Some("r/x"));
    assert_eq!(answer, (0, Some(b"no-such-client".to_vec())));
}

#[test]
fn the_catalogue_names_only_the_verbs_held() {
    let dir = TempDir::new("acl-catalogue");
    let broker = start(&dir, ACL);
    let mut watcher = connect(&broker.address(), ProtocolVersion::V5, "watcher", "w1");
    let (code, reply) = request(&mut watcher, "$saguin/catalogue/events", b"", Some("r/x"));
    assert_eq!(code, 0);
    let reply = String::from_utf8(reply.expect("an answer")).unwrap();
    assert!(reply.contains(r#""verbs":["read"]"#), "{reply}");
    // No verb on state: the same empty answer as no channel at all.
    let (code, reply) = request(&mut watcher, "$saguin/catalogue/state", b"", Some("r/x"));
    assert_eq!((code, reply), (0, Some(Vec::new())));
}

#[test]
fn a_will_is_judged_again_when_it_fires() {
    let dir = TempDir::new("acl-will");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    assert_eq!(suback(&mut watcher, &["other/#"]), [1]);
    let with_will = |client_id: &str| {
        let will = Will {
            topic: format!("other/will/{client_id}"),
            payload: b"gone".to_vec(),
            qos: QoS::AtLeastOnce,
            retain: false,
            properties: Properties::default(),
        };
        let (client, connack) =
            try_connect(&address, ProtocolVersion::V5, "writer", client_id, |c| {
                c.will = Some(will)
            });
        assert_eq!(connack.reason_code.0, 0);
        client
    };
    drop(with_will("a"));
    assert_eq!(next_delivery(&mut watcher).0, "other/will/a");
    let b = with_will("b");
    // The writer loses write on broadcast; its Will is no longer its to send.
    reload(
        &mut broker,
        &dir,
        &ACL.replace("    - topic: \"#\"\n      allow: [write]\n", ""),
    );
    drop(b);
    broker.wait_for_log("the Will of b was not published");
    let mut small = connect(&address, ProtocolVersion::V5, "small", "s1");
    assert_eq!(
        publish_qos1(&mut small, "other/marker", b"m", Properties::default()),
        0
    );
    assert_eq!(next_delivery(&mut watcher).0, "other/marker");
}

#[test]
fn a_queue_worker_is_judged_when_a_job_is_chosen() {
    let dir = TempDir::new("acl-worker");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let mut worker = connect(&address, ProtocolVersion::V5, "worker", "k1");
    assert_eq!(
        suback(&mut worker, &["$saguin/queue/jobs", "other/#"]),
        [1, 1]
    );
    let without_consume = ACL.replace("    - channel: jobs\n      allow: [consume]\n", "");
    reload(&mut broker, &dir, &without_consume);
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    assert_eq!(
        publish_qos1(&mut writer, "jobs/1", b"job", Properties::default()),
        0
    );
    let mut small = connect(&address, ProtocolVersion::V5, "small", "s1");
    assert_eq!(
        publish_qos1(&mut small, "other/marker", b"m", Properties::default()),
        0
    );
    assert_eq!(next_delivery(&mut worker).0, "other/marker");
    reload(&mut broker, &dir, ACL);
    assert_eq!(
        next_delivery(&mut worker),
        ("jobs/1".into(), b"job".to_vec())
    );
}

#[test]
fn a_latest_reader_stalls_on_a_withdrawn_grant_and_resumes() {
    let dir = TempDir::new("acl-latest");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let mut all = connect(&address, ProtocolVersion::V5, "all", "a1");
    assert_eq!(suback(&mut all, &["state/#", "other/#"]), [1, 1]);
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    assert_eq!(
        publish_qos1(&mut writer, "state/a", b"1", Properties::default()),
        0
    );
    assert_eq!(next_delivery(&mut all), ("state/a".into(), b"1".to_vec()));
    let without_state = ACL.replace("    - channel: state\n      allow: [read]\n", "");
    reload(&mut broker, &dir, &without_state);
    assert_eq!(
        publish_qos1(&mut writer, "state/a", b"2", Properties::default()),
        0
    );
    let mut small = connect(&address, ProtocolVersion::V5, "small", "s1");
    assert_eq!(
        publish_qos1(&mut small, "other/marker", b"m", Properties::default()),
        0
    );
    assert_eq!(next_delivery(&mut all).0, "other/marker");
    reload(&mut broker, &dir, ACL);
    assert_eq!(next_delivery(&mut all), ("state/a".into(), b"2".to_vec()));
}

/// A durable session of `client_id` under `user`; whether one was present.
fn durable_as(address: &str, user: &str, client_id: &str) -> (RawClient, bool) {
    let (client, connack) = try_connect(address, ProtocolVersion::V5, user, client_id, |c| {
        c.clean_start = false;
        c.properties.session_expiry_interval_s = Some(3600);
    });
    assert_eq!(connack.reason_code.0, 0, "{user} refused: {connack:?}");
    (client, connack.session_present)
}

/// The publishes that arrive before the answer to a PINGREQ, which follows
/// whatever was sent to the client before it: none means none were sent.
fn publishes_before_a_ping(client: &mut RawClient) -> Vec<(String, Vec<u8>)> {
    client.send(&Packet::Pingreq);
    let mut got = Vec::new();
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(p)) => got.push((p.topic, p.payload)),
            Received::Packet(Packet::Pingresp) => return got,
            other => panic!("expected publishes and a PINGRESP, got {other:?}"),
        }
    }
}

/// `worker` may read nothing under alerts/ or events/. Connecting with the
/// client id of the watcher's durable session resumes it, and is sent none
/// of what the watcher was owed: neither the broadcasts queued while it was
/// away nor the channel records it was sent and never acknowledged. The
/// records stay owed: the watcher coming back gets them.
#[test]
fn taking_over_a_session_gets_none_of_what_it_was_owed() {
    let dir = TempDir::new("acl-takeover");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let (mut watcher, _) = durable_as(&address, "watcher", "w-durable");
    assert_eq!(suback(&mut watcher, &["alerts/#", "events/#"]), [1, 1]);
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    for payload in [&b"record-1"[..], b"record-2"] {
        assert_eq!(
            publish_qos1(&mut writer, "events/x", payload, Properties::default()),
            0
        );
    }
    // Both records arrive and are not acknowledged.
    for want in [&b"record-1"[..], b"record-2"] {
        match watcher.recv() {
            Received::Packet(Packet::Publish(p)) => assert_eq!(p.payload, want),
            other => panic!("expected a record, got {other:?}"),
        }
    }
    watcher.send(&Packet::Disconnect(Default::default()));
    assert!(watcher.recv_until_closed().is_empty());
    for n in 1..=3 {
        let payload = format!("alert-{n}");
        assert_eq!(
            publish_qos1(
                &mut writer,
                "alerts/x",
                payload.as_bytes(),
                Properties::default()
            ),
            0
        );
    }
    let (mut intruder, present) = durable_as(&address, "worker", "w-durable");
    assert!(present, "the session is resumed");
    assert_eq!(publishes_before_a_ping(&mut intruder), []);
    intruder.send(&Packet::Disconnect(Default::default()));
    assert!(intruder.recv_until_closed().is_empty());
    let (mut watcher, present) = durable_as(&address, "watcher", "w-durable");
    assert!(present);
    let topics: Vec<Vec<u8>> = publishes_before_a_ping(&mut watcher)
        .into_iter()
        .map(|(_, payload)| payload)
        .collect();
    assert_eq!(topics, [b"record-1".to_vec(), b"record-2".to_vec()]);
}

/// `#` does not reach a `$` topic: a user whose only broadcast rule is
/// `#` is refused `$private/#` and is sent no retained value under it on
/// a subscription to `#`.
#[test]
fn a_retained_value_on_a_dollar_topic_is_not_sent_to_a_hash_reader() {
    let dir = TempDir::new("acl-dollar");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut keeper = connect(&address, ProtocolVersion::V5, "keeper", "k1");
    keeper.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "$private/secret".into(),
        packet_id: Some(1),
        payload: b"secret".to_vec(),
        ..Publish::default()
    }));
    assert!(matches!(
        keeper.recv(),
        Received::Packet(Packet::Puback(PubAck { reason_code, .. })) if reason_code.0 == 0
    ));
    let mut writer = connect(&address, ProtocolVersion::V5, "writer", "wr1");
    writer.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "open/x".into(),
        packet_id: Some(1),
        payload: b"open".to_vec(),
        ..Publish::default()
    }));
    assert!(matches!(writer.recv(), Received::Packet(Packet::Puback(_))));
    let mut all = connect(&address, ProtocolVersion::V5, "all", "a1");
    assert_eq!(suback(&mut all, &["$private/#"]), [0x87]);
    assert_eq!(suback(&mut all, &["#"]), [1]);
    let delivered: Vec<Vec<u8>> = publishes_before_a_ping(&mut all)
        .into_iter()
        .map(|(_, payload)| payload)
        .collect();
    assert_eq!(delivered, [b"open".to_vec()]);
}

/// MQTT 3.1.1 has no CONNACK property to say Shared Subscription Available
/// 0, so a 3.1.1 client whose roles deny `share` is refused each `$share/`
/// filter on its SUBACK (0x80); MQTT 5 is closed 0x9E as before.
#[test]
fn a_share_denial_holds_for_a_3_1_1_client() {
    let dir = TempDir::new("acl-share-311");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut small = connect(&address, ProtocolVersion::V311, "small", "s1");
    assert_eq!(
        suback(&mut small, &["$share/g/anything/#", "anything/#"]),
        [0x80, 1]
    );
    small.assert_alive();
}

/// A hang-up asked at QoS 2 is refused on its PUBREC, as every request
/// under `$saguin/` at QoS 2 is, and hangs nobody up; a shared
/// subscription to a seek's reply is not authorized.
#[test]
fn a_qos2_hang_up_is_refused_and_a_shared_seek_reply_not_authorized() {
    let dir = TempDir::new("acl-qos2-hang-up");
    let broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    let mut oncall = connect(&address, ProtocolVersion::V5, "oncall", "o1");
    oncall.send(&Packet::Publish(Publish {
        qos: QoS::ExactlyOnce,
        topic: "$saguin/sessions/disconnect".into(),
        packet_id: Some(5),
        payload: b"w1".to_vec(),
        properties: with_response_topic(),
        ..Publish::default()
    }));
    match oncall.recv() {
        Received::Packet(Packet::Pubrec(ack)) => {
            assert_eq!((ack.packet_id, ack.reason_code.0), (5, 0x83))
        }
        other => panic!("expected a PUBREC, got {other:?}"),
    }
    watcher.assert_alive();
    let mut all = connect(&address, ProtocolVersion::V5, "all", "a1");
    assert_eq!(
        suback(
            &mut all,
            &[
                "$share/g/$saguin/consumer/events/seek/reply",
                "$saguin/consumer/events/seek/reply"
            ]
        ),
        [0x87, 1]
    );
}

/// One SUBSCRIBE of 5,000 filters the client may not have writes a few
/// refusal lines and then says how many more there were, not 5,000 lines.
#[test]
fn a_subscribe_of_thousands_of_refused_filters_writes_a_few_lines() {
    let dir = TempDir::new("acl-log-flood");
    let mut broker = start(&dir, ACL);
    let address = broker.address();
    let mut watcher = connect(&address, ProtocolVersion::V5, "watcher", "w1");
    let filters: Vec<String> = (0..5_000).map(|n| format!("nope/{n}")).collect();
    let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
    let codes = suback(&mut watcher, &filters);
    assert_eq!(codes.len(), 5_000);
    assert!(codes.iter().all(|&c| c == 0x87));
    // The broker's log is one stream: once a later line is read, every
    // refusal line before it is too.
    connect(&address, ProtocolVersion::V5, "watcher", "marker");
    broker.wait_for_log("client marker connected");
    let refusals = broker
        .log_lines
        .iter()
        .filter(|l| l.contains("refusing a subscription"))
        .count();
    assert!(refusals <= 10, "{refusals} refusal lines");
    assert!(
        broker
            .log_lines
            .iter()
            .any(|l| l.contains("refusing a subscription")),
        "the refusals are still logged"
    );
}

/// A door no password file guards, beside an acl_file: the door writes
/// the config's `{dir}`.
fn open_door_config(dir: &TempDir, extra_mqtt: &str) -> String {
    write_password_file(dir);
    std::fs::write(dir.path().join("acl.yaml"), ACL).unwrap();
    format!(
        "broker:\n  id: t\n  log_level: debug\n  mqtt:\n    acl_file: {0}/acl.yaml\n{extra_mqtt}    listen:\n      tcp:\n        - name: fleet\n          address: 127.0.0.1:0\n          password_file: {0}/clients.passwd\n        - name: open\n          address: 127.0.0.1:0\n{1}{CHANNELS}",
        dir.path().display(),
        STORAGE.replace("{dir}", &dir.path().display().to_string())
    )
}

/// What a hang-up request from a client on the open door that typed the
/// user name `oncall`, and no password, is answered.
fn hang_up_as_typed_oncall(broker: &mut BrokerProcess) -> u8 {
    let port = broker.door_port("open");
    let address = format!("127.0.0.1:{port}");
    let mut client = RawClient::open(&address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "typed");
    connect.username = Some("oncall".into());
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => assert_eq!(connack.reason_code.0, 0),
        other => panic!("expected a CONNACK, got {other:?}"),
    }
    request(
        &mut client,
        "$saguin/sessions/disconnect",
        b"nobody",
        Some("r/x"),
    )
    .0
}

/// A user name nothing checked is no identity: on a door without a
/// password file a client typing `oncall` gets none of `oncall`'s rights,
/// unless `trust_unchecked_user_names` says otherwise, which
/// `--check-config` warns about.
#[test]
fn a_user_name_nothing_checked_is_not_an_identity() {
    let dir = TempDir::new("acl-unchecked-name");
    let config = open_door_config(&dir, "");
    let mut broker = BrokerProcess::start_with_config(dir.path(), &config);
    assert_eq!(hang_up_as_typed_oncall(&mut broker), 0x87);
    broker.wait_for_log(
        "offered user name \"oncall\" on door \"open\", which no password_file checks",
    );
    drop(broker);

    let trusting = open_door_config(&dir, "    trust_unchecked_user_names: true\n");
    let path = dir.path().join("trusting.yaml");
    std::fs::write(&path, &trusting).unwrap();
    let output = common::check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "warning: broker.mqtt.trust_unchecked_user_names: door \"open\" has no password_file"
        ),
        "{stderr}"
    );
    let mut broker = BrokerProcess::start_with_config(dir.path(), &trusting);
    assert_eq!(hang_up_as_typed_oncall(&mut broker), 0);
}
