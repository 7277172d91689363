//! The embedded default configuration shows the product: run without
//! --config, the broker keeps sessions and retained messages in redb under
//! `./data`, and both survive a restart.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BrokerProcess, RawClient, Received, TempDir, WAIT};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};
use saguin::config::DEFAULT_CONFIG_YAML;

#[test]
fn without_a_config_the_broker_creates_its_data_dir_under_the_working_directory() {
    let dir = TempDir::new("default-cwd");
    let redb = dir.path().join("data").join("saguin.redb");
    let mut child = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the broker");
    // The provider opens before the door does, so the file is there
    // whether or not port 1883 was free to bind.
    let deadline = Instant::now() + WAIT;
    let mut exited = false;
    while !redb.exists() && !exited {
        exited = child.try_wait().unwrap().is_some();
        assert!(Instant::now() < deadline, "no {} appeared", redb.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    assert!(redb.exists(), "{} was not created", redb.display());
}

/// The embedded default with only its door moved to a port the kernel
/// picks and its `./` anchored at `dir`, as running it in `dir` would.
fn default_in(dir: &Path) -> String {
    let door = "address: 0.0.0.0:1883";
    let data = "file_path: ./data/";
    assert!(DEFAULT_CONFIG_YAML.contains(door) && DEFAULT_CONFIG_YAML.contains(data));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    DEFAULT_CONFIG_YAML
        .replace(door, "address: 127.0.0.1:0")
        .replace(data, &format!("file_path: {}/data/", dir.display()))
}

/// A 3.1.1 connection that keeps its session (Clean Session 0), and
/// whether the broker had one for it.
fn connect_keeping_session(address: &str, client_id: &str) -> (RawClient, bool) {
    let mut client = RawClient::open(address, ProtocolVersion::V311);
    let mut connect = common::connect_packet(ProtocolVersion::V311, client_id);
    connect.clean_start = false;
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code.0, 0, "refused: {connack:?}");
            (client, connack.session_present)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

fn publish_qos1(address: &str, topic: &str, payload: &[u8], retain: bool) {
    let mut publisher = RawClient::connect(address, ProtocolVersion::V5, "publisher");
    publisher.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain,
        topic: topic.into(),
        packet_id: Some(1),
        payload: payload.to_vec(),
        ..Publish::default()
    }));
    assert!(matches!(
        publisher.recv(),
        Received::Packet(Packet::Puback(ack)) if ack.reason_code.0 == 0
    ));
}

/// The next PUBLISH the client is sent, acknowledged.
fn next_publish(client: &mut RawClient) -> Publish {
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                if let Some(packet_id) = publish.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                return publish;
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while waiting for a PUBLISH"),
        }
    }
}

#[test]
fn on_the_default_storage_a_retained_message_and_a_kept_session_survive_a_restart() {
    let dir = TempDir::new("default-restart");
    let config = default_in(dir.path());
    let mut broker = BrokerProcess::start_with_config(dir.path(), &config);
    let (mut subscriber, present) = connect_keeping_session(&broker.address(), "hub");
    assert!(!present);
    subscriber.subscribe("alarms/#", QoS::AtLeastOnce);
    drop(subscriber);
    publish_qos1(&broker.address(), "state/lamp", b"on", true);
    assert!(broker.terminate().success());
    drop(broker);

    let broker = BrokerProcess::start_with_config(dir.path(), &config);
    // The session came back with its subscription: no SUBSCRIBE is sent.
    let (mut subscriber, present) = connect_keeping_session(&broker.address(), "hub");
    assert!(present, "the session did not survive the restart");
    publish_qos1(&broker.address(), "alarms/smoke", b"kitchen", false);
    let alarm = next_publish(&mut subscriber);
    assert_eq!(
        (alarm.topic.as_str(), &alarm.payload[..]),
        ("alarms/smoke", &b"kitchen"[..])
    );

    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("state/#", QoS::AtLeastOnce);
    let lamp = next_publish(&mut reader);
    assert!(lamp.retain);
    assert_eq!(
        (lamp.topic.as_str(), &lamp.payload[..]),
        ("state/lamp", &b"on"[..])
    );
}
