//! What channels promise a consumer, over real sockets and the real binary:
//! a gap is never served in silence, across a restart as within a run.

mod common;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Connect, Packet, ProtocolVersion, PubAck, Publish, QoS};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const SMALL_EVENTS: &str =
    "channels:\n  events:\n    type: append\n    filter: events/#\n    retention_bytes: 4KiB\n";

/// A durable consumer: Clean Start 0 and an hour's session. Returns
/// Session Present.
fn durable_connect(address: &str, client_id: &str) -> (RawClient, bool) {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect: Connect = common::connect_packet(ProtocolVersion::V5, client_id);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code.0, 0);
            (client, connack.session_present)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

fn publish(client: &mut RawClient, topic: &str, payloads: &[Vec<u8>]) {
    for (i, payload) in payloads.iter().enumerate() {
        let packet_id = i as u16 + 1;
        client.send(&Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: topic.into(),
            packet_id: Some(packet_id),
            payload: payload.clone(),
            ..Publish::default()
        }));
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) => assert_eq!(ack.reason_code.0, 0, "{ack:?}"),
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
}

/// Receives one delivery and acknowledges it; returns its payload.
fn consume_one(client: &mut RawClient) -> Vec<u8> {
    match client.recv() {
        Received::Packet(Packet::Publish(publish)) => {
            if let Some(packet_id) = publish.packet_id {
                client.send(&Packet::Puback(PubAck {
                    packet_id,
                    ..PubAck::default()
                }));
            }
            publish.payload
        }
        other => panic!("expected a delivery, got {other:?}"),
    }
}

/// Defect: a stored position below the floor, loaded as a restart restored
/// the session, was moved up to the floor and the session resumed with
/// Session Present 1 - a gap served in silence.
#[test]
fn a_position_below_the_floor_after_a_sigkill_is_told_session_present_0() {
    let dir = TempDir::new("restart-floor");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, SMALL_EVENTS);
    let address = broker.address();
    let (mut consumer, _) = durable_connect(&address, "lagging");
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    publish(&mut publisher, "events/a", &[b"first".to_vec()]);
    assert_eq!(consume_one(&mut consumer), b"first");
    consumer.send(&Packet::Disconnect(Default::default()));
    drop(consumer);
    // A graceful stop stores the position past the one record it read.
    assert!(broker.terminate().success());

    // While it is away, retention passes its position; then a crash.
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, SMALL_EVENTS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let records: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 1024]).collect();
    publish(&mut publisher, "events/big", &records);
    broker.wait_for_log("retention removed");
    broker.kill();

    let mut broker = BrokerProcess::start_in(dir.path(), REDB, SMALL_EVENTS);
    broker.wait_for_log("below the floor");
    let (mut consumer, session_present) = durable_connect(&broker.address(), "lagging");
    assert!(
        !session_present,
        "a gap found at start is reported as one found during the run is"
    );
    broker.wait_for_log("fell below its floor");
    // Subscribing again starts at the floor, never at the passed position.
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    let first = consume_one(&mut consumer);
    assert_ne!(first, b"first");
}

/// Defect: a retained value kept before a `latest` channel claimed its
/// topic stayed in the retained store (hidden, not deleted), so a value
/// was held in two places. It is moved into the channel at start, and
/// is gone from the retained store even after a crash.
#[test]
fn a_retained_value_on_a_topic_a_latest_channel_now_claims_is_moved_into_it() {
    let dir = TempDir::new("retained-claimed");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, "");
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publisher.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
        topic: "state/a".into(),
        packet_id: Some(1),
        payload: b"old".to_vec(),
        ..Publish::default()
    }));
    assert!(
        matches!(publisher.recv(), Received::Packet(Packet::Puback(a)) if a.reason_code.0 == 0)
    );
    assert!(broker.terminate().success());

    let state = "channels:\n  state:\n    type: latest\n    filter: state/#\n";
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, state);
    broker.wait_for_log("moved in at offset");
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publish(&mut publisher, "state/b", &[b"new".to_vec()]);
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("state/#", QoS::AtLeastOnce);
    let mut served = Vec::new();
    for _ in 0..2 {
        match reader.recv() {
            Received::Packet(Packet::Publish(p)) => served.push((p.topic, p.payload)),
            other => panic!("expected the channel's state, got {other:?}"),
        }
    }
    served.sort();
    assert_eq!(
        served,
        [
            ("state/a".to_string(), b"old".to_vec()),
            ("state/b".to_string(), b"new".to_vec())
        ],
        "the channel serves the value it took over"
    );
    broker.kill();

    // Without the channel, the retained store no longer holds the value.
    let broker = BrokerProcess::start_in(dir.path(), REDB, "");
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("state/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publish(&mut publisher, "state/marker", &[b"live".to_vec()]);
    match reader.recv() {
        Received::Packet(Packet::Publish(p)) => assert_eq!(
            p.topic, "state/marker",
            "a retained value moved into a channel is not also kept as retained"
        ),
        other => panic!("expected the live publish, got {other:?}"),
    }
}

/// Defect: with sessions kept in memory and a channel on redb, a session
/// lost in a crash left its stored position behind; a new session under
/// the same client id, told Session Present 0, resumed from it.
#[test]
fn a_new_session_never_resumes_from_a_lost_sessions_position() {
    let dir = TempDir::new("lost-session");
    let storage = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n      volatile:\n        type: memory\n        max_bytes: 16MiB\n        snapshot_dir: none\n  session:\n    storage: volatile\n";
    let events = "channels:\n  events:\n    type: append\n    filter: events/#\n";
    let mut broker = BrokerProcess::start_in(dir.path(), storage, events);
    let (mut consumer, _) = durable_connect(&broker.address(), "consumer");
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let first: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i]).collect();
    publish(&mut publisher, "events/a", &first);
    for expected in &first {
        assert_eq!(&consume_one(&mut consumer), expected);
    }
    // Its connection's end stores its position; a record acknowledged
    // after that, on the same provider, is committed after it.
    consumer.send(&Packet::Disconnect(Default::default()));
    assert_eq!(consumer.recv(), Received::Closed);
    publish(&mut publisher, "events/a", &[vec![3]]);
    broker.kill();

    let broker = BrokerProcess::start_in(dir.path(), storage, events);
    let mut consumer = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect: Connect = common::connect_packet(ProtocolVersion::V5, "consumer");
    connect.properties.session_expiry_interval_s = Some(3600);
    consumer.send(&Packet::Connect(Box::new(connect)));
    assert!(
        matches!(consumer.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0 && !c.session_present)
    );
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    assert_eq!(
        consume_one(&mut consumer),
        vec![0],
        "a new session starts at the floor"
    );
}

/// Defect: a provider nothing names was opened, creating and locking its
/// file. It is left alone, and the log says so once, naming its key.
#[test]
fn a_provider_nothing_names_is_neither_opened_nor_locked() {
    let dir = TempDir::new("unnamed-provider");
    let storage = format!("{REDB}      spare:\n        type: redb\n        file_path: {{dir}}/spare.redb\n        max_bytes: 8MiB\n");
    let mut broker = BrokerProcess::start_in(dir.path(), &storage, SMALL_EVENTS);
    let line = broker.wait_for_log("broker.storage.providers.spare");
    assert!(line.contains("not opened"), "{line}");
    assert!(dir.path().join("saguin.redb").exists());
    assert!(
        !dir.path().join("spare.redb").exists(),
        "a provider nothing names is not opened"
    );
}

/// Defect: a channel configured as another type than its stored records
/// were written as was started and served them as what they are not. The
/// start is refused, naming the channel, the provider and the fix.
#[test]
fn a_channel_whose_type_changed_since_its_records_were_written_is_refused_at_start() {
    let dir = TempDir::new("type-changed");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, SMALL_EVENTS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publish(&mut publisher, "events/a", &[b"logged".to_vec()]);
    broker.kill();

    let config = format!(
        "broker:\n  id: test\n  mqtt:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n{}channels:\n  events:\n    type: latest\n    filter: events/#\n",
        REDB.replace("{dir}", &dir.path().display().to_string())
    );
    let config_path = dir.path().join("saguin.yaml");
    std::fs::write(&config_path, config).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--config")
        .arg(&config_path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A broker that starts anyway serves until stopped: waited on with a
    // bound, never forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the broker started on records written as another type");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success(), "the start is refused");
    let said = String::from_utf8_lossy(&output.stderr).to_string()
        + &String::from_utf8_lossy(&output.stdout);
    for needle in [
        "channels.events",
        "provider local",
        "written with type: append",
        "set channels.events.type back to append",
    ] {
        assert!(said.contains(needle), "{needle:?} not in {said}");
    }
}

/// Defect: a QoS 2 publish into a channel already at its `max_bytes` was
/// accepted at PUBREC and refused only at PUBREL. It is refused at PUBREC
/// with 0x97, and nothing is held for it.
#[test]
fn a_qos2_publish_into_a_channel_at_its_bound_is_refused_at_pubrec() {
    let dir = TempDir::new("qos2-full");
    let small = "channels:\n  small:\n    type: append\n    filter: small/#\n    max_bytes: 2KiB\n";
    let broker = BrokerProcess::start_in(dir.path(), REDB, small);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let mut refused = false;
    for packet_id in 1..=64u16 {
        publisher.send(&Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: "small/a".into(),
            packet_id: Some(packet_id),
            payload: vec![7; 300],
            ..Publish::default()
        }));
        match publisher.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.reason_code.0 == 0 => {}
            Received::Packet(Packet::Puback(ack)) => {
                assert_eq!(ack.reason_code.0, 0x97, "{ack:?}");
                refused = true;
                break;
            }
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
    assert!(refused, "the channel reached its bound");
    publisher.send(&Packet::Publish(Publish {
        qos: QoS::ExactlyOnce,
        topic: "small/a".into(),
        packet_id: Some(100),
        payload: vec![7; 300],
        ..Publish::default()
    }));
    match publisher.recv() {
        Received::Packet(Packet::Pubrec(ack)) => {
            assert_eq!(ack.packet_id, 100);
            assert_eq!(ack.reason_code.0, 0x97, "refused at PUBREC: {ack:?}");
        }
        other => panic!("expected a PUBREC, got {other:?}"),
    }
    // Nothing is held: a PUBREL for it names no exchange.
    publisher.send(&Packet::Pubrel(PubAck {
        packet_id: 100,
        ..PubAck::default()
    }));
    match publisher.recv() {
        Received::Packet(Packet::Pubcomp(ack)) => assert_eq!(ack.reason_code.0, 0x92),
        other => panic!("expected a PUBCOMP, got {other:?}"),
    }
}

/// Defect: a channel's records owed to a durable shared group were kept in
/// memory only, so a crash lost the group's backlog. They are in the log
/// before their PUBACK, and the group gets them back after a SIGKILL.
#[test]
fn a_durable_shared_groups_channel_backlog_survives_a_sigkill() {
    let dir = TempDir::new("group-backlog");
    let events = "channels:\n  events:\n    type: append\n    filter: events/#\n";
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, events);
    // A group member and a plain reader of the channel, both away.
    for (client_id, filter) in [("worker", "$share/g/events/#"), ("reader", "events/#")] {
        let (mut client, _) = durable_connect(&broker.address(), client_id);
        client.subscribe(filter, QoS::AtLeastOnce);
        client.send(&Packet::Disconnect(Default::default()));
        assert_eq!(client.recv(), Received::Closed);
    }
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publish(
        &mut publisher,
        "events/a",
        &[b"r1".to_vec(), b"r2".to_vec()],
    );
    broker.kill();

    let broker = BrokerProcess::start_in(dir.path(), REDB, events);
    let (mut worker, session_present) = durable_connect(&broker.address(), "worker");
    assert!(session_present);
    let received = [consume_one(&mut worker), consume_one(&mut worker)];
    assert_eq!(received, [b"r1".to_vec(), b"r2".to_vec()]);
    // The reader reads the channel, and is not served the group's copies
    // from the log beside it.
    let (mut reader, _) = durable_connect(&broker.address(), "reader");
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publish(&mut publisher, "events/a", &[b"r3".to_vec()]);
    let mut read: Vec<Vec<u8>> = (0..3).map(|_| consume_one(&mut reader)).collect();
    read.sort();
    assert_eq!(read, [b"r1".to_vec(), b"r2".to_vec(), b"r3".to_vec()]);
}
