//! A consumer moving its own position with `$saguin/consumer/<channel>/seek`,
//! over real sockets on a redb provider.

mod common;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";

fn connect(address: &str, client_id: &str, durable: bool) -> RawClient {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, client_id);
    if durable {
        connect.properties.session_expiry_interval_s = Some(3600);
    }
    client.send(&Packet::Connect(Box::new(connect)));
    assert!(matches!(client.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0));
    client
}

fn publish_records(address: &str, count: usize) {
    let mut publisher = RawClient::connect(address, ProtocolVersion::V5, "publisher");
    for i in 0..count {
        let publish = Publish {
            qos: QoS::AtLeastOnce,
            topic: "events/e".into(),
            packet_id: Some(i as u16 + 1),
            payload: format!("r{i}").into_bytes(),
            ..Publish::default()
        };
        publisher.send(&Packet::Publish(publish));
        assert!(
            matches!(publisher.recv(), Received::Packet(Packet::Puback(a)) if a.reason_code.0 == 0)
        );
    }
}

fn offset_of(publish: &Publish) -> u64 {
    publish
        .properties
        .user_properties
        .iter()
        .find(|(name, _)| name == "saguin-offset")
        .map(|(_, v)| v.parse().unwrap())
        .expect("saguin-offset")
}

/// Sends a seek and returns (reply payload, reply properties, PUBACK code),
/// acknowledging and collecting the record offsets that arrive meanwhile.
fn seek(
    client: &mut RawClient,
    payload: &str,
    packet_id: u16,
) -> (String, Properties, ReasonCode, Vec<u64>) {
    let properties = Properties {
        response_topic: Some("replies/me".into()),
        correlation_data: Some(b"c-1".to_vec()),
        ..Properties::default()
    };
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: "$saguin/consumer/events/seek".into(),
        packet_id: Some(packet_id),
        payload: payload.as_bytes().to_vec(),
        properties,
        ..Publish::default()
    };
    client.send(&Packet::Publish(publish));
    let mut reply = None;
    let mut code = None;
    let mut offsets = Vec::new();
    while reply.is_none() || code.is_none() {
        match client.recv() {
            Received::Packet(Packet::Publish(p)) if p.topic == "replies/me" => {
                assert_eq!(
                    p.properties.correlation_data.as_deref(),
                    Some(&b"c-1"[..]),
                    "correlation data echoed"
                );
                assert!(code.is_none(), "the reply comes before the PUBACK");
                reply = Some((String::from_utf8(p.payload).unwrap(), p.properties));
            }
            Received::Packet(Packet::Publish(p)) => {
                offsets.push(offset_of(&p));
                client.send(&Packet::Puback(PubAck {
                    packet_id: p.packet_id.unwrap(),
                    ..PubAck::default()
                }));
            }
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == packet_id => {
                code = Some(ack.reason_code)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let (payload, properties) = reply.unwrap();
    (payload, properties, code.unwrap(), offsets)
}

/// Reads deliveries until `count` have arrived; returns their offsets.
fn read_offsets(client: &mut RawClient, count: usize) -> Vec<u64> {
    let mut offsets = Vec::new();
    while offsets.len() < count {
        match client.recv() {
            Received::Packet(Packet::Publish(p)) => {
                offsets.push(offset_of(&p));
                client.send(&Packet::Puback(PubAck {
                    packet_id: p.packet_id.unwrap(),
                    ..PubAck::default()
                }));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    offsets
}

#[test]
fn every_seek_form_moves_the_consumer_and_is_answered() {
    let dir = TempDir::new("seek");
    let broker = BrokerProcess::start_in(dir.path(), REDB, EVENTS);
    let address = broker.address();
    publish_records(&address, 10);
    let mut consumer = connect(&address, "consumer", true);
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    assert_eq!(
        read_offsets(&mut consumer, 10),
        (1..=10).collect::<Vec<_>>()
    );

    // `0`: back to the floor; everything is sent again after the reply.
    let (reply, _, code, early) = seek(&mut consumer, "0", 100);
    assert_eq!((reply.as_str(), code), ("1", ReasonCode::SUCCESS));
    let mut again = early;
    again.extend(read_offsets(&mut consumer, 10 - again.len()));
    assert_eq!(again, (1..=10).collect::<Vec<_>>());

    // An offset.
    let (reply, _, code, early) = seek(&mut consumer, "7", 101);
    assert_eq!((reply.as_str(), code), ("7", ReasonCode::SUCCESS));
    let mut from_seven = early;
    from_seven.extend(read_offsets(&mut consumer, 4 - from_seven.len()));
    assert_eq!(from_seven, vec![7, 8, 9, 10]);

    // A duration ago and an RFC 3339 moment before everything: the floor.
    for (payload, id) in [("-1h", 102), ("2020-01-01T00:00:00Z", 103)] {
        let (reply, _, code, early) = seek(&mut consumer, payload, id);
        assert_eq!(
            (reply.as_str(), code),
            ("1", ReasonCode::SUCCESS),
            "{payload}"
        );
        let mut all = early;
        all.extend(read_offsets(&mut consumer, 10 - all.len()));
        assert_eq!(all.len(), 10);
    }

    // `-1`: only what comes next.
    let (reply, _, code, _) = seek(&mut consumer, "-1", 104);
    assert_eq!((reply.as_str(), code), ("11", ReasonCode::SUCCESS));
    publish_records(&address, 1);
    assert_eq!(read_offsets(&mut consumer, 1), vec![11]);

    // Refusals: past the end, and not a position at all.
    let (reply, properties, code, _) = seek(&mut consumer, "500", 105);
    assert_eq!(
        (reply.as_str(), code),
        ("beyond-end", ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR)
    );
    assert!(properties
        .user_properties
        .contains(&("saguin-next".into(), "12".into())));
    let (reply, _, code, _) = seek(&mut consumer, "2026-08-14", 106);
    assert_eq!(
        (reply.as_str(), code),
        ("malformed", ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR)
    );
}

#[test]
fn a_seek_needs_a_durable_session_and_a_channel_that_exists() {
    let dir = TempDir::new("seek-refusals");
    let channels = format!("{EVENTS}  jobs:\n    type: queue\n    filter: jobs/#\n  state:\n    type: latest\n    filter: state/#\n");
    let broker = BrokerProcess::start_in(dir.path(), REDB, &channels);
    let mut clean = connect(&broker.address(), "clean", false);
    let (reply, _, code, _) = seek(&mut clean, "0", 1);
    assert_eq!(
        (reply.as_str(), code),
        ("no-session", ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR)
    );

    // A name that is no append channel is told what it is instead.
    for (packet_id, name, says) in [
        (2, "nosuch", "no channel has that name"),
        (3, "jobs", "that channel is a queue"),
        (4, "state", "that channel is a latest channel"),
    ] {
        let publish = Publish {
            qos: QoS::AtLeastOnce,
            topic: format!("$saguin/consumer/{name}/seek"),
            packet_id: Some(packet_id),
            payload: b"0".to_vec(),
            ..Publish::default()
        };
        clean.send(&Packet::Publish(publish));
        match clean.recv() {
            Received::Packet(Packet::Puback(ack)) => {
                assert_eq!(ack.reason_code, ReasonCode::TOPIC_NAME_INVALID, "{name}");
                let why = ack.properties.reason_string.unwrap_or_default();
                assert!(why.starts_with(says), "{name}: {why:?}");
            }
            other => panic!("expected PUBACK 0x90, got {other:?}"),
        }
    }
}

/// Defect: a moment older than the oldest surviving record, once retention
/// has moved the floor, was answered with the floor - records the consumer
/// asked for were gone and it was not told.
#[test]
fn a_time_seek_past_what_retention_removed_is_refused_below_floor() {
    let dir = TempDir::new("seek-time-floor");
    let channels =
        "channels:\n  events:\n    type: append\n    filter: events/#\n    retention_bytes: 4KiB\n";
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, channels);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    for i in 0..40u16 {
        publisher.send(&Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: "events/big".into(),
            packet_id: Some(i + 1),
            payload: vec![i as u8; 1024],
            ..Publish::default()
        }));
        assert!(
            matches!(publisher.recv(), Received::Packet(Packet::Puback(a)) if a.reason_code.0 == 0)
        );
    }
    broker.wait_for_log("retention removed");
    let mut consumer = connect(&address, "consumer", true);
    let (payload, properties, code, _) = seek(&mut consumer, "-12h", 1);
    assert_eq!(payload, "below-floor");
    assert_eq!(code, ReasonCode(0x83));
    assert!(properties
        .user_properties
        .iter()
        .any(|(name, value)| name == "saguin-floor" && value.parse::<u64>().unwrap() > 1));
    // A moment after every record is the head: nothing asked for is gone.
    let (payload, _, code, _) = seek(&mut consumer, "2999-01-01T00:00:00Z", 2);
    assert_eq!((payload.as_str(), code), ("41", ReasonCode::SUCCESS));
}
