//! Signals to the real broker: SIGHUP and SIGUSR1 leave it running and
//! serving; SIGTERM afterwards still stops it gracefully, so a memory
//! provider's acknowledged records are in its snapshot.

mod common;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};

const MEMORY: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: {dir}\n";

/// Publishes a retained value at QoS 1 and waits for its PUBACK: the
/// broker has taken it.
fn retain(address: &str, topic: &str, payload: &[u8]) {
    let mut publisher = RawClient::connect(address, ProtocolVersion::V5, "setter");
    publisher.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        retain: true,
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

/// Subscribes to `topic` and returns the first PUBLISH sent for it.
fn first_value(address: &str, topic: &str) -> Publish {
    let mut reader = RawClient::connect(address, ProtocolVersion::V5, "reader");
    reader.subscribe(topic, QoS::AtLeastOnce);
    loop {
        match reader.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                if let Some(packet_id) = publish.packet_id {
                    reader.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                return publish;
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while waiting for {topic}"),
        }
    }
}

#[test]
fn hup_and_usr1_leave_the_broker_serving_and_term_still_stops_it_gracefully() {
    let dir = TempDir::new("signals");
    let mut broker = BrokerProcess::start_in(dir.path(), MEMORY, "");
    retain(&broker.address(), "state/lamp", b"on");

    broker.signal("HUP");
    broker.wait_for_log("SIGHUP");
    broker.signal("USR1");
    broker.wait_for_log("nothing to reload");

    // Still serving: a new value reaches a new subscriber.
    retain(&broker.address(), "state/door", b"open");
    let door = first_value(&broker.address(), "state/door");
    assert_eq!(door.payload, b"open");

    // SIGTERM still stops it with its shutdown: the memory provider's
    // snapshot holds both acknowledged values.
    assert!(broker.terminate().success());
    drop(broker);
    let broker = BrokerProcess::start_in(dir.path(), MEMORY, "");
    assert_eq!(first_value(&broker.address(), "state/lamp").payload, b"on");
    assert_eq!(
        first_value(&broker.address(), "state/door").payload,
        b"open"
    );
}
