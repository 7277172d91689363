//! Protocol rules a peer broker's black-box suite checks byte for byte:
//! the client's Maximum Packet Size on everything the broker sends,
//! acknowledgements of the wrong kind, and when a Will waiting out its
//! delay goes out at a reconnect.

use super::*;
use crate::codec::{decode_fixed_header, decode_packet, encode, Suback};

/// PUBACK, PUBREC, PUBREL or PUBCOMP, by the constructor that makes it.
type AckKind = fn(PubAck) -> Packet;

fn decoded_connect(bytes: &[u8]) -> Packet {
    let header = decode_fixed_header(bytes).unwrap().unwrap();
    decode_packet(&header, &bytes[header.header_len..], None).expect("a CONNECT")
}

fn wire(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
    let mut bytes = Vec::new();
    encode(packet, version, &mut bytes);
    bytes
}

/// What the broker sent `conn` since last asked, as MQTT 5 bytes.
fn sent_bytes(h: &mut Harness, conn: Key) -> Vec<Vec<u8>> {
    let sent = h.out.take(conn);
    sent.iter().map(|p| wire(p, ProtocolVersion::V5)).collect()
}

/// A clean MQTT 5 CONNECT for `client_id` whose client takes packets of at
/// most `max_bytes`.
fn connect_within(client_id: &str, max_bytes: u32) -> Connect {
    let mut connect = connect_packet(client_id, ProtocolVersion::V5);
    connect.properties.maximum_packet_size = Some(max_bytes);
    connect
}

#[test]
fn a_client_no_connack_fits_is_closed_unanswered_and_its_session_untouched() {
    // MQTT 5, Clean Start, keepalive 10, Maximum Packet Size 2, client "p".
    let mut bytes = vec![
        0x10, 0x13, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x02, 0x00, 0x0A, 0x05, 0x27, 0x00,
        0x00, 0x00, 0x02, 0x00, 0x01, b'p',
    ];
    // The smallest CONNACK this broker can send states its own Maximum
    // Packet Size: 10 bytes.
    for max_bytes in 2..=9u8 {
        bytes[17] = max_bytes;
        let mut h = Harness::new(Settings::default());
        let conn = h.open();
        h.packet(conn, decoded_connect(&bytes));
        assert!(h.out.take(conn).is_empty(), "nothing sent at {max_bytes}");
        assert!(!h.broker.is_open(conn), "closed at {max_bytes}");
        assert!(
            h.broker.sessions.key_of("p").is_none(),
            "no session at {max_bytes}"
        );
        let refused = h
            .broker
            .stats()
            .connections_refused
            .nonzero()
            .collect::<Vec<_>>();
        assert_eq!(refused, [("packet too large", 1)]);
    }
    // Topic Alias Maximum is given up first; it is all a CONNACK gives up.
    for max_bytes in 10..=13u8 {
        bytes[17] = max_bytes;
        let mut h = Harness::new(Settings::default());
        let conn = h.open();
        h.packet(conn, decoded_connect(&bytes));
        let sent = h.out.take(conn);
        let expected: &[u8] = match max_bytes {
            13 => &[
                0x20, 0x0B, 0x00, 0x00, 0x08, 0x22, 0x00, 0x10, 0x27, 0x00, 0x10, 0x00, 0x00,
            ],
            _ => &[0x20, 0x08, 0x00, 0x00, 0x05, 0x27, 0x00, 0x10, 0x00, 0x00],
        };
        assert_eq!(
            wire(&sent[0], ProtocolVersion::V5),
            expected,
            "at {max_bytes}"
        );
        assert!(h.broker.is_open(conn));
    }
}

#[test]
fn a_refusing_connack_loses_its_reason_string_to_fit() {
    let settings = Settings {
        max_client_id_length: 4,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    for (max_bytes, expected) in [(5, Some(vec![0x20, 0x03, 0x00, 0x85, 0x00])), (4, None)] {
        let conn = h.open();
        h.packet(
            conn,
            Packet::Connect(Box::new(connect_within("too-long", max_bytes))),
        );
        let sent = sent_bytes(&mut h, conn);
        assert_eq!(
            sent,
            expected.into_iter().collect::<Vec<_>>(),
            "at {max_bytes}"
        );
        assert!(!h.broker.is_open(conn));
    }
}

#[test]
fn replies_lose_their_reason_strings_to_fit_and_one_that_cannot_fit_closes() {
    let mut h = Harness::new(Settings::default());
    let (small, _) = h.connect_with(connect_within("small", 10));
    // SUBACK and PUBACK keep their codes and lose their Reason Strings.
    h.packet(
        small,
        Packet::Subscribe(Subscribe {
            packet_id: 7,
            properties: Properties::default(),
            filters: vec![("$SYS/#".into(), qos(QoS::AtMostOnce))],
        }),
    );
    let publish = publish_packet("$SYS/x", QoS::AtLeastOnce, Some(8), b"no");
    h.packet(small, Packet::Publish(publish));
    let sent = sent_bytes(&mut h, small);
    assert_eq!(
        sent,
        [
            vec![0x90, 0x04, 0x00, 0x07, 0x00, 0x87],
            vec![0x40, 0x03, 0x00, 0x08, 0x87]
        ]
    );
    // A DISCONNECT keeps its code: a takeover says 0x8E in three bytes.
    h.connect_with(connect_within("small", 10));
    let told = sent_bytes(&mut h, small);
    assert_eq!(told, [vec![0xE0, 0x01, 0x8E]]);

    // Eight granted filters make a SUBACK of 13 bytes: it cannot be sent,
    // and its client would wait for it for ever.
    let subscribe_to = |h: &mut Harness, conn, count| {
        let filters = (0..count)
            .map(|i| (format!("t/{i}"), qos(QoS::AtMostOnce)))
            .collect();
        let properties = Properties::default();
        let subscribe = Subscribe {
            packet_id: 9,
            properties,
            filters,
        };
        h.packet(conn, Packet::Subscribe(subscribe));
        h.out.take(conn)
    };
    let (tiny, _) = h.connect_with(connect_within("tiny", 12));
    assert!(subscribe_to(&mut h, tiny, 8).is_empty());
    assert!(h.out.closed.contains(&tiny));
    // Seven make one of 12, which is sent.
    let (fits, _) = h.connect_with(connect_within("fits", 12));
    match subscribe_to(&mut h, fits, 7).as_slice() {
        [Packet::Suback(Suback { reason_codes, .. })] => assert_eq!(reason_codes.len(), 7),
        other => panic!("expected the SUBACK, got {other:?}"),
    }
    assert!(!h.out.closed.contains(&fits));
}

/// A subscriber at `sub_qos` on "t", sent one publish at that QoS; returns
/// the harness, the subscriber and the delivery's packet identifier.
fn one_delivery(version: ProtocolVersion, sub_qos: QoS) -> (Harness, Key, u16) {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", version);
    h.subscribe(subscriber, "t", qos(sub_qos), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let id = Some(3).filter(|_| sub_qos != QoS::AtMostOnce);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", sub_qos, id, b"x")),
    );
    if sub_qos == QoS::ExactlyOnce {
        // Delivered once released.
        let release = PubAck {
            packet_id: 3,
            ..PubAck::default()
        };
        h.packet(publisher, Packet::Pubrel(release));
    }
    let delivered = h.out.take(subscriber);
    let packet_id = publishes(&delivered)[0].packet_id.expect("QoS 1 or 2");
    (h, subscriber, packet_id)
}

#[test]
fn an_acknowledgement_of_the_wrong_kind_is_a_protocol_error() {
    let ack = |packet_id| PubAck {
        packet_id,
        ..PubAck::default()
    };
    let wrong: [(QoS, AckKind); 4] = [
        (QoS::ExactlyOnce, Packet::Puback),
        (QoS::ExactlyOnce, Packet::Pubcomp),
        (QoS::AtLeastOnce, Packet::Pubrec),
        (QoS::AtLeastOnce, Packet::Pubcomp),
    ];
    for version in [ProtocolVersion::V5, ProtocolVersion::V311] {
        for (sub_qos, kind) in wrong {
            let (mut h, subscriber, packet_id) = one_delivery(version, sub_qos);
            let packet = kind(ack(packet_id));
            let what = format!("{packet:?} for QoS {sub_qos:?} on {version:?}");
            h.packet(subscriber, packet);
            let told = h.out.take(subscriber);
            match version {
                ProtocolVersion::V5 => {
                    assert_eq!(
                        disconnect_code(&told),
                        Some(ReasonCode::PROTOCOL_ERROR),
                        "{what}"
                    )
                }
                ProtocolVersion::V311 => assert!(told.is_empty(), "{what}: {told:?}"),
            }
            assert!(!h.broker.is_open(subscriber), "{what}");
        }
    }
    // A PUBCOMP after the PUBREL it answers, and answers nothing awaits,
    // are not errors.
    let (mut h, subscriber, packet_id) = one_delivery(ProtocolVersion::V5, QoS::ExactlyOnce);
    h.packet(subscriber, Packet::Pubrec(ack(packet_id)));
    assert_eq!(h.out.take(subscriber), [Packet::Pubrel(ack(packet_id))]);
    h.packet(subscriber, Packet::Pubcomp(ack(packet_id)));
    h.packet(subscriber, Packet::Puback(ack(packet_id + 1)));
    h.packet(subscriber, Packet::Pubcomp(ack(packet_id + 2)));
    assert!(h.out.take(subscriber).is_empty());
    assert!(h.broker.is_open(subscriber));
    let (mut h, subscriber, packet_id) = one_delivery(ProtocolVersion::V5, QoS::AtLeastOnce);
    h.packet(subscriber, Packet::Puback(ack(packet_id)));
    assert!(h.broker.is_open(subscriber));
}

/// A device's CONNECT with a session of 30 s and a Will waiting 3 s.
fn device_connect(clean_start: bool) -> Connect {
    let mut connect = connect_packet("device", ProtocolVersion::V5);
    connect.clean_start = clean_start;
    connect.properties.session_expiry_interval_s = Some(30);
    let mut will = Will {
        topic: "status".into(),
        payload: b"gone".to_vec(),
        ..Will::default()
    };
    will.properties.will_delay_interval_s = Some(3);
    connect.will = Some(will);
    connect
}

fn watched() -> (Harness, Key) {
    let mut h = Harness::new(Settings::default());
    let watcher = h.connect("watcher", ProtocolVersion::V5);
    h.subscribe(watcher, "status", qos(QoS::AtMostOnce), None);
    (h, watcher)
}

fn wills(h: &mut Harness, watcher: Key) -> usize {
    publishes(&h.out.take(watcher)).len()
}

#[test]
fn a_reconnect_inside_the_will_delay_withholds_the_will_whatever_its_clean_start() {
    // The socket closed, and the same CONNECT comes back a second later.
    for clean_start in [true, false] {
        let (mut h, watcher) = watched();
        let (device, _) = h.connect_with(device_connect(clean_start));
        h.broker
            .handle_connection_lost(device, h.now_ms, &mut h.out);
        h.advance(1_000);
        assert_eq!(wills(&mut h, watcher), 0, "waiting out its delay");
        let (device, connack) = h.connect_with(device_connect(clean_start));
        assert_eq!(connack.session_present, !clean_start);
        h.advance(10_000);
        assert_eq!(wills(&mut h, watcher), 0, "clean start {clean_start}");
        assert_eq!(h.broker.tallies.wills_cancelled, 1);
        assert!(h.broker.is_open(device));
    }

    // A reconnect after the delay ran out, before the tick that would
    // publish it, still gets it published.
    let (mut h, watcher) = watched();
    let (device, _) = h.connect_with(device_connect(true));
    h.broker
        .handle_connection_lost(device, h.now_ms, &mut h.out);
    h.now_ms += 3_000;
    h.connect_with(device_connect(true));
    assert_eq!(wills(&mut h, watcher), 1, "its delay had passed");
    assert_eq!(h.broker.tallies.wills_cancelled, 0);
}

#[test]
fn a_takeover_publishes_a_delayed_will_only_when_the_session_ends() {
    // The old connection is still open when the same client id connects.
    let (mut h, watcher) = watched();
    h.connect_with(device_connect(true));
    h.connect_with(device_connect(true));
    assert_eq!(wills(&mut h, watcher), 1, "Clean Start 1 ended the session");

    let (mut h, watcher) = watched();
    h.connect_with(device_connect(false));
    let (_, connack) = h.connect_with(device_connect(false));
    assert!(connack.session_present);
    h.advance(10_000);
    assert_eq!(wills(&mut h, watcher), 0, "a resumed session cancels it");

    // A session that ended with its connection takes its Will with it.
    let (mut h, watcher) = watched();
    let mut brief = device_connect(false);
    brief.properties.session_expiry_interval_s = None;
    h.connect_with(brief.clone());
    let (_, connack) = h.connect_with(brief);
    assert!(!connack.session_present);
    assert_eq!(wills(&mut h, watcher), 1);
}

#[test]
fn a_resumed_session_discards_what_no_longer_fits_and_resends_the_rest() {
    let mut h = Harness::new(Settings::default());
    let mut connect = connect_packet("sub", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(100);
    let (subscriber, _) = h.connect_with(connect.clone());
    h.subscribe(subscriber, "t", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for (id, size) in [(1, 200), (2, 10)] {
        let publish = publish_packet("t", QoS::AtLeastOnce, Some(id), &vec![b'x'; size]);
        h.packet(publisher, Packet::Publish(publish));
    }
    assert_eq!(
        publishes(&h.out.take(subscriber)).len(),
        2,
        "both on the wire"
    );
    h.broker
        .handle_connection_lost(subscriber, h.now_ms, &mut h.out);

    // Back with room for the small one only.
    connect.properties.maximum_packet_size = Some(100);
    let (subscriber, connack) = h.connect_with(connect);
    assert!(connack.session_present);
    let resent = h.out.take(subscriber);
    let resent = publishes(&resent);
    assert_eq!(resent.len(), 1);
    assert!(resent[0].dup && resent[0].payload.len() == 10);
    assert_eq!(h.broker.stats().deliveries_too_large, 1);
    let session = h.broker.sessions.key_of("sub").unwrap();
    assert_eq!(h.broker.sessions.get(session).unwrap().inflight.len(), 1);
}
