//! Where MQTT says exactly what a server answers, over real sockets: the
//! client's Maximum Packet Size, filters that are no filters, a Will at a
//! reconnect inside its delay, the protocol name, acknowledgements of the
//! wrong kind, and a first packet that is not a CONNECT. (The malformed
//! filters and protocol names are also rows of the codec's malformed table,
//! which `tests/protocol.rs` sends over a socket in both versions.)

mod common;

use common::{connect_packet, BrokerProcess, RawClient, Received};
use saguin::codec::{
    Connect, Disconnect, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode,
    Subscribe, SubscriptionOptions, Will,
};

/// PUBACK, PUBREC, PUBREL or PUBCOMP, by the constructor that makes it.
type AckKind = fn(PubAck) -> Packet;

#[test]
fn a_client_whose_maximum_packet_size_no_connack_fits_is_closed_unanswered() {
    let broker = BrokerProcess::start("");
    // MQTT 5, Clean Start, keepalive 10, Maximum Packet Size 2, client "p".
    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
    client.send_bytes(&[
        0x10, 0x13, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x02, 0x00, 0x0A, 0x05, 0x27, 0x00,
        0x00, 0x00, 0x02, 0x00, 0x01, b'p',
    ]);
    assert_eq!(client.recv_until_closed(), []);

    // Ten bytes take the CONNACK without its Topic Alias Maximum.
    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect = connect_packet(ProtocolVersion::V5, "ten");
    connect.properties.maximum_packet_size = Some(10);
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
            assert_eq!(connack.properties.topic_alias_maximum, None);
            assert_eq!(connack.properties.maximum_packet_size, Some(1024 * 1024));
        }
        other => panic!("expected the CONNACK, got {other:?}"),
    }
    client.assert_alive();
}

#[test]
fn a_reply_too_large_for_the_client_is_sent_without_its_reason_string() {
    let broker = BrokerProcess::start("");
    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
    let mut connect = connect_packet(ProtocolVersion::V5, "small");
    connect.properties.maximum_packet_size = Some(10);
    client.send(&Packet::Connect(Box::new(connect)));
    assert!(matches!(
        client.recv(),
        Received::Packet(Packet::Connack(_))
    ));
    client.send(&Packet::Subscribe(Subscribe {
        packet_id: 7,
        properties: Properties::default(),
        filters: vec![("$SYS/#".into(), SubscriptionOptions::default())],
    }));
    match client.recv() {
        Received::Packet(Packet::Suback(suback)) => {
            assert_eq!(suback.reason_codes, [ReasonCode::NOT_AUTHORIZED]);
            assert_eq!(suback.properties.reason_string, None);
        }
        other => panic!("expected the SUBACK, got {other:?}"),
    }
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        packet_id: Some(8),
        topic: "$SYS/x".into(),
        ..Publish::default()
    }));
    assert_eq!(
        client.recv(),
        Received::Packet(Packet::Puback(PubAck {
            packet_id: 8,
            reason_code: ReasonCode::NOT_AUTHORIZED,
            properties: Properties::default(),
        }))
    );
    client.assert_alive();
}

#[test]
fn a_filter_that_is_no_filter_closes_and_a_refused_one_is_answered_per_filter() {
    let broker = BrokerProcess::start("");
    for version in [ProtocolVersion::V5, ProtocolVersion::V311] {
        // Well formed, and refused: "$share" is written in lower case.
        let mut client = RawClient::connect(&broker.address(), version, "refused");
        client.send(&Packet::Subscribe(Subscribe {
            packet_id: 1,
            properties: Properties::default(),
            filters: vec![("$SHARE/g/t".into(), SubscriptionOptions::default())],
        }));
        let refused = match version {
            ProtocolVersion::V5 => ReasonCode::TOPIC_FILTER_INVALID,
            ProtocolVersion::V311 => ReasonCode::UNSPECIFIED_ERROR,
        };
        match client.recv() {
            Received::Packet(Packet::Suback(suback)) => {
                assert_eq!(suback.reason_codes, [refused], "{version:?}")
            }
            other => panic!("expected the SUBACK, got {other:?}"),
        }
        client.assert_alive();
        // No filter at all: the connection ends.
        for filter in ["#/test/topic", ""] {
            let mut client = RawClient::connect(&broker.address(), version, "malformed");
            client.send(&Packet::Subscribe(Subscribe {
                packet_id: 1,
                properties: Properties::default(),
                filters: vec![(filter.into(), SubscriptionOptions::default())],
            }));
            let told = client.recv_until_closed();
            let expected = match version {
                ProtocolVersion::V5 => vec![ReasonCode::PROTOCOL_ERROR],
                ProtocolVersion::V311 => vec![],
            };
            let codes: Vec<ReasonCode> = told
                .iter()
                .map(|p| match p {
                    Packet::Disconnect(d) => d.reason_code,
                    other => panic!("{filter:?} on {version:?}: {other:?}"),
                })
                .collect();
            assert_eq!(codes, expected, "{filter:?} on {version:?}");
        }
    }
}

/// A device's MQTT 5 CONNECT: a session and a Will delay of an hour, so
/// that no Will here can fall due by its delay while a test runs.
fn device_connect(clean_start: bool) -> Connect {
    let mut connect = connect_packet(ProtocolVersion::V5, "device");
    connect.clean_start = clean_start;
    connect.properties.session_expiry_interval_s = Some(3600);
    let mut will = Will {
        topic: "status".into(),
        payload: b"gone".to_vec(),
        ..Will::default()
    };
    will.properties.will_delay_interval_s = Some(3600);
    connect.will = Some(will);
    connect
}

fn connect_device(address: &str, clean_start: bool) -> (RawClient, bool) {
    let mut device = RawClient::open(address, ProtocolVersion::V5);
    device.send(&Packet::Connect(Box::new(device_connect(clean_start))));
    match device.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
            (device, connack.session_present)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

/// The payloads `watcher` receives on "status" up to and including `marker`.
fn status_until(watcher: &mut RawClient, marker: &[u8]) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    loop {
        match watcher.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                let done = publish.payload == marker;
                seen.push(publish.payload);
                if done {
                    return seen;
                }
            }
            other => panic!("expected a status, got {other:?}"),
        }
    }
}

fn publish_marker(address: &str, marker: &[u8]) {
    let mut publisher = RawClient::connect(address, ProtocolVersion::V5, "marker");
    publisher.send(&Packet::Publish(Publish {
        topic: "status".into(),
        payload: marker.to_vec(),
        ..Publish::default()
    }));
    publisher.assert_alive();
}

/// A broker, its address, and a client watching "status".
fn watched() -> (BrokerProcess, String, RawClient) {
    let broker = BrokerProcess::start("");
    let address = broker.address();
    let mut watcher = RawClient::connect(&address, ProtocolVersion::V5, "watcher");
    watcher.subscribe("status", QoS::AtMostOnce);
    (broker, address, watcher)
}

/// Ends the device's session now, with a clean DISCONNECT that sets its
/// expiry to 0, which would publish a Will still waiting in it; and sees
/// that none was.
fn assert_no_will_waits(mut device: RawClient, address: &str, watcher: &mut RawClient) {
    let mut goodbye = Disconnect::default();
    goodbye.properties.session_expiry_interval_s = Some(0);
    device.send(&Packet::Disconnect(goodbye));
    assert_eq!(device.recv_until_closed(), []);
    publish_marker(address, b"two");
    assert_eq!(status_until(watcher, b"two"), [&b"two"[..]]);
}

#[test]
fn a_reconnect_inside_the_will_delay_withholds_the_will_whatever_its_clean_start() {
    let (mut broker, address, mut watcher) = watched();
    for (round, clean_start) in [(1, true), (2, false)] {
        let (device, _) = connect_device(&address, clean_start);
        drop(device);
        // The close is seen before the client id comes back, so this is a
        // reconnect, not a takeover of an open connection. Each round logs
        // two: this close and the DISCONNECT that ends it.
        broker.wait_for_nth_log("client device disconnected", 2 * round - 1);
        let (device, present) = connect_device(&address, clean_start);
        assert_eq!(present, !clean_start);
        let marker = format!("after clean start {clean_start}");
        publish_marker(&address, marker.as_bytes());
        assert_eq!(
            status_until(&mut watcher, marker.as_bytes()),
            [marker.as_bytes()],
            "no Will before the marker"
        );
        assert_no_will_waits(device, &address, &mut watcher);
    }
}

#[test]
fn a_takeover_inside_the_will_delay_publishes_the_will_with_clean_start_1_only() {
    let (_broker, address, mut watcher) = watched();

    let (mut old, _) = connect_device(&address, true);
    let (new, _) = connect_device(&address, true);
    assert!(matches!(
        old.recv_until_closed().as_slice(),
        [Packet::Disconnect(d)] if d.reason_code == ReasonCode::SESSION_TAKEN_OVER
    ));
    publish_marker(&address, b"one");
    assert_eq!(status_until(&mut watcher, b"one"), [&b"gone"[..], b"one"]);

    drop(new);
    let (mut old, _) = connect_device(&address, false);
    let (device, present) = connect_device(&address, false);
    assert!(present);
    old.recv_until_closed();
    assert_no_will_waits(device, &address, &mut watcher);
}

/// A subscriber at `qos` on "t" of `version`, sent one publish; returns it
/// with the delivery's packet identifier.
fn one_delivery(address: &str, version: ProtocolVersion, qos: QoS) -> (RawClient, u16) {
    let mut subscriber = RawClient::connect(address, version, &format!("sub-{version:?}"));
    subscriber.subscribe("t", qos);
    let mut publisher = RawClient::connect(address, ProtocolVersion::V5, "pub");
    publisher.send(&Packet::Publish(Publish {
        qos,
        packet_id: Some(1),
        topic: "t".into(),
        payload: b"x".to_vec(),
        ..Publish::default()
    }));
    let ack = PubAck {
        packet_id: 1,
        ..PubAck::default()
    };
    if qos == QoS::ExactlyOnce {
        // Delivered once released.
        assert_eq!(
            publisher.recv(),
            Received::Packet(Packet::Pubrec(ack.clone()))
        );
        publisher.send(&Packet::Pubrel(ack.clone()));
        assert_eq!(publisher.recv(), Received::Packet(Packet::Pubcomp(ack)));
    } else {
        assert_eq!(publisher.recv(), Received::Packet(Packet::Puback(ack)));
    }
    match subscriber.recv() {
        Received::Packet(Packet::Publish(publish)) => (subscriber, publish.packet_id.unwrap()),
        other => panic!("expected the delivery, got {other:?}"),
    }
}

#[test]
fn an_acknowledgement_of_the_wrong_kind_ends_the_connection() {
    let broker = BrokerProcess::start("");
    let address = broker.address();
    let wrong: [(QoS, AckKind); 2] = [
        // A PUBACK for a QoS 2 delivery.
        (QoS::ExactlyOnce, Packet::Puback),
        // A PUBCOMP where a PUBREC is owed.
        (QoS::ExactlyOnce, Packet::Pubcomp),
    ];
    for version in [ProtocolVersion::V5, ProtocolVersion::V311] {
        for (qos, kind) in wrong {
            let (mut subscriber, packet_id) = one_delivery(&address, version, qos);
            subscriber.send(&kind(PubAck {
                packet_id,
                ..PubAck::default()
            }));
            let told = subscriber.recv_until_closed();
            match version {
                ProtocolVersion::V5 => assert!(
                    matches!(told.as_slice(), [Packet::Disconnect(d)] if d.reason_code == ReasonCode::PROTOCOL_ERROR),
                    "{told:?}"
                ),
                ProtocolVersion::V311 => assert_eq!(told, []),
            }
        }
    }
}

#[test]
fn a_first_packet_that_is_not_a_connect_is_refused_on_its_first_byte() {
    // Long enough that only the first byte can have closed the socket.
    let broker = BrokerProcess::start("  limits:\n    connect_timeout: 1h\n");
    // A PUBLISH's first byte alone.
    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V5);
    client.send_bytes(&[0x30]);
    assert_eq!(client.recv(), Received::Closed);
    // A PUBLISH declaring 64 KiB, within max_connect_size, none of it sent.
    let mut client = RawClient::open(&broker.address(), ProtocolVersion::V311);
    client.send_bytes(&[0x30, 0x80, 0x80, 0x04]);
    assert_eq!(client.recv(), Received::Closed);
    // The broker serves on.
    RawClient::connect(&broker.address(), ProtocolVersion::V5, "after").assert_alive();
}

/// A filter in the reserved `$saguin/` space that names none of the topics
/// the broker delivers on is the client's business, not a malformed
/// filter: 0x87, as for `$SYS`. A queue's misspelt form stays 0x8F.
#[test]
fn a_reserved_filter_nothing_is_delivered_on_is_not_authorized() {
    let broker = BrokerProcess::start("");
    let mut client = RawClient::connect(&broker.address(), ProtocolVersion::V5, "asker");
    let filters = [
        "$saguin/#",
        "$saguin/sessions/+",
        "$saguin",
        "$saguin/queue/#",
    ];
    client.send(&Packet::Subscribe(Subscribe {
        packet_id: 9,
        properties: Properties::default(),
        filters: filters
            .iter()
            .map(|f| (f.to_string(), SubscriptionOptions::default()))
            .collect(),
    }));
    match client.recv() {
        Received::Packet(Packet::Suback(suback)) => assert_eq!(
            suback.reason_codes,
            [
                ReasonCode::NOT_AUTHORIZED,
                ReasonCode::NOT_AUTHORIZED,
                ReasonCode::NOT_AUTHORIZED,
                ReasonCode::TOPIC_FILTER_INVALID,
            ],
            "{filters:?}"
        ),
        other => panic!("expected the SUBACK, got {other:?}"),
    }
    client.assert_alive();
}
