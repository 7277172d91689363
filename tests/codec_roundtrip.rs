//! A client's view of the codec through the public API: it encodes what a
//! client sends and decodes what a server answers, on both versions.

use saguin::codec::*;

fn round_trip(packet: &Packet, version: ProtocolVersion) -> Packet {
    let mut bytes = Vec::new();
    encode(packet, version, &mut bytes);
    assert_eq!(bytes.len(), encoded_len(packet, version));
    let header = decode_fixed_header(&bytes).unwrap().unwrap();
    let first = matches!(packet, Packet::Connect(_));
    decode_packet(
        &header,
        &bytes[header.header_len..],
        (!first).then_some(version),
    )
    .unwrap()
}

#[test]
fn a_client_session_round_trips_on_both_versions() {
    for version in [ProtocolVersion::V311, ProtocolVersion::V5] {
        let session = [
            Packet::Connect(Box::new(Connect {
                protocol_version: version,
                clean_start: true,
                keep_alive_s: 10,
                client_id: "client".into(),
                will: None,
                username: Some("u".into()),
                password: Some(b"p".to_vec()),
                properties: Properties::default(),
            })),
            Packet::Connack(Connack::default()),
            Packet::Subscribe(Subscribe {
                packet_id: 1,
                properties: Properties::default(),
                filters: vec![("t/#".into(), SubscriptionOptions::default())],
            }),
            Packet::Suback(Suback {
                packet_id: 1,
                properties: Properties::default(),
                reason_codes: vec![ReasonCode::GRANTED_QOS_0],
            }),
            Packet::Publish(Publish {
                qos: QoS::ExactlyOnce,
                topic: "t/1".into(),
                packet_id: Some(2),
                payload: b"21.5".to_vec(),
                ..Publish::default()
            }),
            Packet::Pubrec(PubAck {
                packet_id: 2,
                ..PubAck::default()
            }),
            Packet::Pubrel(PubAck {
                packet_id: 2,
                ..PubAck::default()
            }),
            Packet::Pubcomp(PubAck {
                packet_id: 2,
                ..PubAck::default()
            }),
            Packet::Pingreq,
            Packet::Pingresp,
            Packet::Disconnect(Disconnect::default()),
        ];
        for packet in &session {
            assert_eq!(&round_trip(packet, version), packet, "{version:?}");
        }
    }
}

#[test]
fn topic_helpers_are_public() {
    assert!(topic::matches("t/#", "t/1"));
    assert!(topic::is_valid_topic_filter("t/+"));
    assert!(!topic::is_valid_topic_name("t/+"));
    assert_eq!(topic::level_count("a/b"), 2);
    let shared = topic::parse_shared("$share/g/t/#").unwrap().unwrap();
    assert_eq!((shared.share_name, shared.filter), ("g", "t/#"));
}
