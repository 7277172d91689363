//! Sessions that outlive their connections, across a restart of the real
//! broker: a memory provider across a graceful stop (SIGTERM), redb across
//! a graceful stop and across SIGKILL.

mod common;

use std::time::{Duration, Instant};

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{
    Connect, Disconnect, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode,
    Will,
};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const MEMORY: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: {dir}\n";

/// How the broker goes down between the two halves of a test.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// SIGTERM on a memory provider: its snapshot is written.
    MemoryStop,
    /// SIGTERM on redb.
    RedbStop,
    /// SIGKILL on redb: only what was committed survives.
    RedbKill,
}

const EVERY_OUTAGE: [Outage; 3] = [Outage::MemoryStop, Outage::RedbStop, Outage::RedbKill];

impl Outage {
    fn storage(self) -> &'static str {
        match self {
            Outage::MemoryStop => MEMORY,
            Outage::RedbStop | Outage::RedbKill => REDB,
        }
    }

    fn start(self, dir: &TempDir) -> BrokerProcess {
        BrokerProcess::start_in(dir.path(), self.storage(), "")
    }

    /// Takes the broker down and brings it back on the same storage.
    fn restart(self, mut broker: BrokerProcess, dir: &TempDir) -> BrokerProcess {
        match self {
            Outage::MemoryStop | Outage::RedbStop => {
                assert!(broker.terminate().success())
            }
            Outage::RedbKill => broker.kill(),
        }
        drop(broker);
        self.start(dir)
    }
}

/// A CONNECT for a session that outlives its connection by `expiry_s`.
fn durable(client_id: &str, expiry_s: u32) -> Connect {
    let mut connect = common::connect_packet(ProtocolVersion::V5, client_id);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(expiry_s);
    connect
}

/// Connects and returns the client with its CONNACK's Session Present.
fn connect(address: &str, connect: Connect) -> (RawClient, bool) {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code.0, 0, "refused: {connack:?}");
            (client, connack.session_present)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

fn disconnect(client: &mut RawClient) {
    client.send(&Packet::Disconnect(Disconnect {
        reason_code: ReasonCode::SUCCESS,
        properties: Properties::default(),
    }));
    // The broker closes once the disconnect is stored.
    assert!(matches!(client.recv(), Received::Closed));
}

fn publish_qos1(address: &str, topic: &str, payload: &[u8]) {
    let mut publisher = RawClient::connect(address, ProtocolVersion::V5, "publisher");
    publisher.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(1),
        payload: payload.to_vec(),
        ..Publish::default()
    }));
    assert!(matches!(
        publisher.recv(),
        Received::Packet(Packet::Puback(_))
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

/// A watcher with a durable subscription to `wills/#`, so a Will published
/// while it is away waits in its session. Named to be restored first.
fn arm_watcher(address: &str) {
    let (mut watcher, _) = connect(address, durable("a-watcher", 3600));
    watcher.subscribe("wills/#", QoS::AtLeastOnce);
    disconnect(&mut watcher);
}

fn will(delay_s: u32) -> Will {
    Will {
        topic: "wills/z-device".into(),
        payload: b"gone".to_vec(),
        qos: QoS::AtLeastOnce,
        retain: false,
        properties: Properties {
            will_delay_interval_s: Some(delay_s),
            ..Properties::default()
        },
    }
}

#[test]
fn subscriptions_come_back_with_session_present_and_no_resubscribe() {
    for outage in EVERY_OUTAGE {
        let dir = TempDir::new("sessions-subscriptions");
        let broker = outage.start(&dir);
        let (mut client, present) = connect(&broker.address(), durable("keeper", 3600));
        assert!(!present);
        client.subscribe("plant/+/temp", QoS::AtLeastOnce);
        // SIGKILL right after the SUBACK: the SUBACK followed the commit.
        drop(client);
        let broker = outage.restart(broker, &dir);
        let (mut client, present) = connect(&broker.address(), durable("keeper", 3600));
        assert!(present, "{outage:?}: the session was not restored");
        publish_qos1(&broker.address(), "plant/boiler/temp", b"71");
        let publish = next_publish(&mut client);
        assert_eq!(
            (publish.topic.as_str(), publish.payload.as_slice()),
            ("plant/boiler/temp", &b"71"[..]),
            "{outage:?}"
        );
    }
}

#[test]
fn a_delayed_will_armed_before_a_restart_fires_after_it() {
    for outage in EVERY_OUTAGE {
        let dir = TempDir::new("sessions-will");
        let mut broker = outage.start(&dir);
        arm_watcher(&broker.address());
        let mut connect_with_will = durable("z-device", 3600);
        connect_with_will.will = Some(will(4));
        let (device, _) = connect(&broker.address(), connect_with_will);
        // The link drops: the Will's wait begins, and its moment is stored.
        drop(device);
        broker.wait_for_log("the session record of z-device is stored");
        let broker = outage.restart(broker, &dir);
        let (mut watcher, present) = connect(&broker.address(), durable("a-watcher", 3600));
        assert!(present);
        let publish = next_publish(&mut watcher);
        assert_eq!(
            (publish.topic.as_str(), publish.payload.as_slice()),
            ("wills/z-device", &b"gone"[..]),
            "{outage:?}"
        );
    }
}

#[test]
fn a_session_whose_expiry_passed_during_the_outage_is_gone_and_its_due_will_published() {
    for outage in EVERY_OUTAGE {
        let dir = TempDir::new("sessions-expired");
        let mut broker = outage.start(&dir);
        arm_watcher(&broker.address());
        let mut connect_expiring = durable("z-device", 1);
        // Longer than the session: the session's end makes it due.
        connect_expiring.will = Some(will(600));
        let (mut device, _) = connect(&broker.address(), connect_expiring);
        device.subscribe("plant/#", QoS::AtLeastOnce);
        drop(device);
        broker.wait_for_log("the session record of z-device is stored");
        let stopped_at = Instant::now();
        match outage {
            Outage::RedbKill => broker.kill(),
            _ => assert!(broker.terminate().success()),
        }
        drop(broker);
        // The outage outlasts the one-second session.
        while stopped_at.elapsed() < Duration::from_millis(1_500) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut broker = outage.start(&dir);
        broker.wait_for_log("ended at start: 1");
        let (_device, present) = connect(&broker.address(), durable("z-device", 60));
        assert!(!present, "{outage:?}: an expired session came back");
        let (mut watcher, _) = connect(&broker.address(), durable("a-watcher", 3600));
        let publish = next_publish(&mut watcher);
        assert_eq!(publish.topic, "wills/z-device", "{outage:?}");
    }
}

#[test]
fn a_clean_disconnect_withdraws_the_will_before_the_connection_closes() {
    for outage in [Outage::RedbKill, Outage::MemoryStop] {
        let dir = TempDir::new("sessions-withdrawn");
        let mut broker = outage.start(&dir);
        arm_watcher(&broker.address());
        let mut connect_with_will = durable("z-device", 2);
        connect_with_will.will = Some(will(0));
        let (mut device, _) = connect(&broker.address(), connect_with_will);
        // The close is seen only once the withdrawal is stored.
        disconnect(&mut device);
        let broker_dir = &dir;
        let mut broker = {
            match outage {
                Outage::RedbKill => broker.kill(),
                _ => assert!(broker.terminate().success()),
            }
            drop(broker);
            outage.start(broker_dir)
        };
        // Had the Will stayed on the record it would go at the session's
        // end: at the start, or at the expiry sweep, whichever ends it.
        broker.wait_for_log("session z-device e");
        publish_qos1(&broker.address(), "wills/marker", b"marker");
        let (mut watcher, _) = connect(&broker.address(), durable("a-watcher", 3600));
        let publish = next_publish(&mut watcher);
        assert_eq!(
            publish.topic, "wills/marker",
            "{outage:?}: a withdrawn Will was published"
        );
    }
}

#[test]
fn retained_values_and_their_deletions_survive_a_restart() {
    for outage in EVERY_OUTAGE {
        let dir = TempDir::new("sessions-retained");
        let broker = outage.start(&dir);
        let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "setter");
        for (packet_id, topic, payload) in [
            (1, "state/lamp", &b"on"[..]),
            (2, "state/door", &b"open"[..]),
            (3, "state/door", &b""[..]),
        ] {
            publisher.send(&Packet::Publish(Publish {
                qos: QoS::AtLeastOnce,
                retain: true,
                topic: topic.into(),
                packet_id: Some(packet_id),
                payload: payload.to_vec(),
                ..Publish::default()
            }));
            // Acknowledged once the value is kept.
            assert!(matches!(
                publisher.recv(),
                Received::Packet(Packet::Puback(ack)) if ack.packet_id == packet_id && ack.reason_code.0 == 0
            ));
        }
        drop(publisher);
        let broker = outage.restart(broker, &dir);
        let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
        reader.subscribe("state/#", QoS::AtLeastOnce);
        publish_qos1(&broker.address(), "state/marker", b"live");
        let mut seen = Vec::new();
        loop {
            let publish = next_publish(&mut reader);
            if publish.topic == "state/marker" {
                break;
            }
            assert!(publish.retain, "{outage:?}: a stored value without RETAIN");
            seen.push((publish.topic, publish.payload));
        }
        assert_eq!(
            seen,
            vec![("state/lamp".to_string(), b"on".to_vec())],
            "{outage:?}"
        );
    }
}

#[test]
fn an_offline_session_is_sent_after_a_restart_every_qos1_broadcast_published_while_away() {
    for outage in EVERY_OUTAGE {
        let dir = TempDir::new("sessions-log");
        let broker = outage.start(&dir);
        let (mut keeper, _) = connect(&broker.address(), durable("keeper", 3600));
        keeper.subscribe("plant/#", QoS::AtLeastOnce);
        disconnect(&mut keeper);
        let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
        for n in 1..=20u16 {
            publisher.send(&Packet::Publish(Publish {
                qos: QoS::AtLeastOnce,
                topic: format!("plant/m{n}"),
                packet_id: Some(n),
                payload: n.to_be_bytes().to_vec(),
                ..Publish::default()
            }));
            // Acknowledged once the log holds it.
            assert!(matches!(
                publisher.recv(),
                Received::Packet(Packet::Puback(ack)) if ack.packet_id == n && ack.reason_code.0 == 0
            ));
        }
        drop(publisher);
        let broker = outage.restart(broker, &dir);
        let (mut keeper, present) = connect(&broker.address(), durable("keeper", 3600));
        assert!(present, "{outage:?}");
        for n in 1..=20u16 {
            let publish = next_publish(&mut keeper);
            assert_eq!(publish.topic, format!("plant/m{n}"), "{outage:?}");
        }
    }
}

#[test]
fn a_qos2_publish_interrupted_between_pubrec_and_pubrel_completes_once_after_a_restart() {
    const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";
    for outage in EVERY_OUTAGE {
        let dir = TempDir::new("sessions-qos2");
        let start = |dir: &TempDir| BrokerProcess::start_in(dir.path(), outage.storage(), EVENTS);
        let mut broker = start(&dir);
        for (topic, packet_id) in [("events/a", 7u16), ("plain/b", 8)] {
            let (mut sender, _) = connect(&broker.address(), durable("sender", 3600));
            sender.send(&Packet::Publish(Publish {
                qos: QoS::ExactlyOnce,
                topic: topic.into(),
                packet_id: Some(packet_id),
                payload: b"once".to_vec(),
                ..Publish::default()
            }));
            // Ownership is the broker's from here: the hold is stored.
            assert!(matches!(
                sender.recv(),
                Received::Packet(Packet::Pubrec(ack)) if ack.reason_code.0 == 0
            ));
            disconnect(&mut sender);
        }
        // A watcher of the broadcast, kept across the restart.
        let (mut watcher, _) = connect(&broker.address(), durable("watcher", 3600));
        watcher.subscribe("plain/#", QoS::AtLeastOnce);
        disconnect(&mut watcher);
        match outage {
            Outage::RedbKill => broker.kill(),
            _ => assert!(broker.terminate().success()),
        }
        drop(broker);
        let broker = start(&dir);
        let (mut watcher, _) = connect(&broker.address(), durable("watcher", 3600));
        let (mut sender, present) = connect(&broker.address(), durable("sender", 3600));
        assert!(present, "{outage:?}");
        for packet_id in [7u16, 8] {
            for expected in [0x00, 0x92] {
                // The second PUBREL finds the exchange complete.
                sender.send(&Packet::Pubrel(PubAck {
                    packet_id,
                    ..PubAck::default()
                }));
                assert!(
                    matches!(sender.recv(), Received::Packet(Packet::Pubcomp(ack))
                        if ack.packet_id == packet_id && ack.reason_code.0 == expected),
                    "{outage:?}"
                );
            }
        }
        // The channel holds the record once, and the broadcast arrived once.
        let (mut reader, _) = connect(&broker.address(), durable("reader", 3600));
        reader.subscribe("events/#", QoS::AtLeastOnce);
        publish_qos1(&broker.address(), "events/marker", b"m");
        assert_eq!(next_publish(&mut reader).topic, "events/a", "{outage:?}");
        assert_eq!(
            next_publish(&mut reader).topic,
            "events/marker",
            "{outage:?}"
        );
        publish_qos1(&broker.address(), "plain/marker", b"m");
        assert_eq!(next_publish(&mut watcher).topic, "plain/b", "{outage:?}");
        assert_eq!(
            next_publish(&mut watcher).topic,
            "plain/marker",
            "{outage:?}"
        );
    }
}

#[test]
fn a_durable_queue_worker_is_a_worker_again_after_a_restart_without_resubscribing() {
    const JOBS: &str = "channels:\n  jobs:\n    type: queue\n    filter: jobs/#\n";
    for outage in [Outage::RedbKill, Outage::MemoryStop] {
        let dir = TempDir::new("sessions-queue");
        let start = |dir: &TempDir| BrokerProcess::start_in(dir.path(), outage.storage(), JOBS);
        let mut broker = start(&dir);
        let (mut worker, _) = connect(&broker.address(), durable("worker", 3600));
        worker.subscribe("$saguin/queue/jobs", QoS::AtLeastOnce);
        disconnect(&mut worker);
        match outage {
            Outage::RedbKill => broker.kill(),
            _ => assert!(broker.terminate().success()),
        }
        drop(broker);
        let broker = start(&dir);
        let (mut worker, present) = connect(&broker.address(), durable("worker", 3600));
        assert!(
            present,
            "{outage:?}: the worker's session did not come back"
        );
        publish_qos1(&broker.address(), "jobs/1", b"work");
        let job = next_publish(&mut worker);
        assert_eq!(
            (job.topic.as_str(), job.payload.as_slice()),
            ("jobs/1", &b"work"[..]),
            "{outage:?}"
        );
    }
}

#[test]
fn a_restored_subscriber_to_a_latest_channel_is_served_its_whole_state_on_resume() {
    const STATE: &str = "channels:\n  state:\n    type: latest\n    filter: dev/#\n";
    for outage in [Outage::RedbKill, Outage::MemoryStop] {
        let dir = TempDir::new("sessions-latest");
        let start = |dir: &TempDir| BrokerProcess::start_in(dir.path(), outage.storage(), STATE);
        let mut broker = start(&dir);
        let (mut watcher, _) = connect(&broker.address(), durable("watcher", 3600));
        watcher.subscribe("dev/#", QoS::AtLeastOnce);
        disconnect(&mut watcher);
        publish_qos1(&broker.address(), "dev/a", b"1");
        publish_qos1(&broker.address(), "dev/b", b"2");
        match outage {
            Outage::RedbKill => broker.kill(),
            _ => assert!(broker.terminate().success()),
        }
        drop(broker);
        let broker = start(&dir);
        let (mut watcher, present) = connect(&broker.address(), durable("watcher", 3600));
        assert!(present, "{outage:?}");
        // Its mark was not kept: the whole current state comes, no SUBSCRIBE.
        let mut topics = vec![
            next_publish(&mut watcher).topic,
            next_publish(&mut watcher).topic,
        ];
        topics.sort();
        assert_eq!(topics, ["dev/a", "dev/b"], "{outage:?}");
    }
}

/// The id the broker assigns a client that sent none, from its CONNACK.
fn assigned_id(address: &str) -> String {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "");
    connect.properties.session_expiry_interval_s = Some(3600);
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => connack
            .properties
            .assigned_client_identifier
            .expect("an assigned id"),
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

/// An assigned client id says nothing of any other: 128 bits drawn from
/// the operating system at each start, so ids cannot be walked to find a
/// session whose client never chose its id (and kept it for an hour).
#[test]
fn assigned_client_ids_cannot_be_guessed_from_one_another() {
    let mut ids = Vec::new();
    for _ in 0..2 {
        let broker = BrokerProcess::start("");
        ids.push(assigned_id(&broker.address()));
        ids.push(assigned_id(&broker.address()));
    }
    for id in &ids {
        let hex = id.strip_prefix("saguin-").expect("the broker's prefix");
        assert!(
            hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
    }
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "{ids:?}");
}
