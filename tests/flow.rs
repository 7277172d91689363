//! A subscriber that stops reading must not hold up anyone else: the
//! publisher is answered, and the other subscribers are served, while the
//! stalled one is shed and then hung up on.

mod common;

use common::{BrokerProcess, RawClient, Received};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};

const MESSAGES: usize = 3_000;
const PAYLOAD_BYTES: usize = 1_024;
/// QoS 0 bytes per message for the stalled subscriber to fall behind on:
/// enough in all to fill its socket's buffers many times over.
const FLOOD_BYTES: usize = 8 * 1024;
/// Unacknowledged publishes the publisher keeps in flight.
const WINDOW: usize = 32;

#[test]
fn a_stalled_subscriber_never_delays_the_publisher_or_other_subscribers() {
    let mut broker = BrokerProcess::start("  limits:\n    write_timeout: 1s\n");
    // Subscribes at both QoS levels and then never reads a byte.
    let mut stalled = RawClient::connect(&broker.address(), ProtocolVersion::V5, "stalled");
    stalled.subscribe("load/qos1", QoS::AtLeastOnce);
    stalled.subscribe("load/qos0", QoS::AtMostOnce);
    // Reads and acknowledges everything, on a thread of its own.
    let mut healthy = RawClient::connect(&broker.address(), ProtocolVersion::V5, "healthy");
    healthy.subscribe("load/qos1", QoS::AtLeastOnce);
    let reader = std::thread::spawn(move || {
        let mut received = Vec::with_capacity(MESSAGES);
        while received.len() < MESSAGES {
            match healthy.recv() {
                Received::Packet(Packet::Publish(publish)) => {
                    received.push(u64::from_be_bytes(publish.payload[..8].try_into().unwrap()));
                    let packet_id = publish.packet_id.expect("QoS 1");
                    healthy.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                other => panic!("subscriber expected a PUBLISH, got {other:?}"),
            }
        }
        received
    });

    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let mut unacknowledged = 0;
    for i in 0..MESSAGES {
        // QoS 0 traffic the stalled subscriber cannot keep up with.
        let flood = Publish {
            topic: "load/qos0".into(),
            payload: vec![0; FLOOD_BYTES],
            ..Publish::default()
        };
        publisher.send(&Packet::Publish(flood));
        let mut payload = vec![0; PAYLOAD_BYTES];
        payload[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let packet_id = (i % 60_000) as u16 + 1;
        let publish = Publish {
            qos: QoS::AtLeastOnce,
            topic: "load/qos1".into(),
            packet_id: Some(packet_id),
            payload,
            ..Publish::default()
        };
        publisher.send(&Packet::Publish(publish));
        unacknowledged += 1;
        while unacknowledged >= WINDOW || (i + 1 == MESSAGES && unacknowledged > 0) {
            match publisher.recv() {
                Received::Packet(Packet::Puback(ack)) => {
                    assert_eq!(ack.reason_code.0, 0);
                    unacknowledged -= 1;
                }
                other => panic!("publisher expected a PUBACK, got {other:?}"),
            }
        }
    }
    let received = reader.join().expect("the healthy subscriber");
    let expected: Vec<u64> = (0..MESSAGES as u64).collect();
    assert_eq!(
        received, expected,
        "every message, in order, to the subscriber that reads"
    );

    // The stalled subscriber was hung up on once its socket stopped taking
    // writes; the broker says so in its log.
    broker.wait_for_log("closing a connection whose writes failed");
    drop(stalled);
}
