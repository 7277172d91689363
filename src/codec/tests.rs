//! Codec tests: round trips, golden vectors, the malformed table, and
//! robustness against truncated and mutated input. Library unit tests so
//! that CI runs them under qemu on 32- and 64-bit ARM too.

use super::malformed_cases::cases;
use super::properties::id;
use super::*;
use ProtocolVersion::{V311, V5};

// ---- helpers ----

fn to_bytes(packet: &Packet, version: ProtocolVersion) -> Vec<u8> {
    let mut out = Vec::new();
    encode(packet, version, &mut out);
    out
}

/// The version to decode with: none for a CONNECT, which opens a connection.
fn decode_version(bytes: &[u8], version: ProtocolVersion) -> Option<ProtocolVersion> {
    match bytes.first() {
        Some(first) if first >> 4 == 1 => None,
        _ => Some(version),
    }
}

/// Decodes one whole packet, checking that `bytes` holds exactly one.
fn decode_one(bytes: &[u8], version: ProtocolVersion) -> Result<Packet, DecodeError> {
    let header = decode_fixed_header(bytes)?.expect("the whole fixed header");
    assert_eq!(header.packet_len(), bytes.len(), "one whole packet");
    decode_packet(
        &header,
        &bytes[header.header_len..],
        decode_version(bytes, version),
    )
}

fn assert_round_trip(packet: &Packet, version: ProtocolVersion) {
    let bytes = to_bytes(packet, version);
    assert_eq!(bytes.len(), encoded_len(packet, version), "{packet:?}");
    let decoded = decode_one(&bytes, version).unwrap_or_else(|e| panic!("{e} in {packet:?}"));
    assert_eq!(&decoded, packet, "{version:?} {bytes:02X?}");
}

fn user(name: &str, value: &str) -> (String, String) {
    (name.to_owned(), value.to_owned())
}

fn options(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions {
        qos,
        ..SubscriptionOptions::default()
    }
}

// ---- sample packets ----

fn v5_samples() -> Vec<Packet> {
    vec![
        Packet::Connect(Box::new(Connect {
            protocol_version: V5,
            clean_start: true,
            keep_alive_s: 30,
            client_id: "gateway-7".into(),
            will: Some(Will {
                topic: "status/gateway-7".into(),
                payload: b"offline".to_vec(),
                qos: QoS::AtLeastOnce,
                retain: true,
                properties: Properties {
                    will_delay_interval_s: Some(5),
                    ..Properties::default()
                },
            }),
            username: None,
            password: Some(b"secret".to_vec()),
            properties: Properties {
                session_expiry_interval_s: Some(3600),
                receive_maximum: Some(20),
                ..Properties::default()
            },
        })),
        Packet::Connack(Connack {
            session_present: true,
            reason_code: ReasonCode::SUCCESS,
            properties: Properties {
                assigned_client_identifier: Some("auto-1".into()),
                ..Properties::default()
            },
        }),
        Packet::Publish(Publish {
            dup: true,
            qos: QoS::ExactlyOnce,
            retain: true,
            topic: "sensors/temp".into(),
            packet_id: Some(65535),
            properties: Properties {
                message_expiry_interval_s: Some(60),
                ..Properties::default()
            },
            payload: vec![0, 1, 2, 255],
        }),
        Packet::Puback(PubAck {
            packet_id: 1,
            reason_code: ReasonCode::NO_MATCHING_SUBSCRIBERS,
            properties: Properties {
                reason_string: Some("nobody".into()),
                ..Properties::default()
            },
        }),
        Packet::Pubrec(PubAck {
            packet_id: 2,
            reason_code: ReasonCode::QUOTA_EXCEEDED,
            properties: Properties::default(),
        }),
        Packet::Pubrel(PubAck {
            packet_id: 3,
            ..PubAck::default()
        }),
        Packet::Pubcomp(PubAck {
            packet_id: 4,
            reason_code: ReasonCode::PACKET_IDENTIFIER_NOT_FOUND,
            properties: Properties::default(),
        }),
        Packet::Subscribe(Subscribe {
            packet_id: 5,
            properties: Properties {
                subscription_identifiers: vec![7],
                ..Properties::default()
            },
            filters: vec![
                ("a/+/c".into(), options(QoS::AtMostOnce)),
                (
                    "$share/g/b/#".into(),
                    SubscriptionOptions {
                        qos: QoS::ExactlyOnce,
                        no_local: true,
                        retain_as_published: true,
                        retain_handling: RetainHandling::DoNotSend,
                    },
                ),
            ],
        }),
        Packet::Suback(Suback {
            packet_id: 5,
            properties: Properties::default(),
            reason_codes: vec![
                ReasonCode(0),
                ReasonCode(1),
                ReasonCode(2),
                ReasonCode(0x80),
                ReasonCode(0x8F),
            ],
        }),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 6,
            properties: Properties {
                user_properties: vec![user("k", "v")],
                ..Properties::default()
            },
            filters: vec!["a/+/c".into(), "x".into()],
        }),
        Packet::Unsuback(Unsuback {
            packet_id: 6,
            properties: Properties::default(),
            reason_codes: vec![ReasonCode::SUCCESS, ReasonCode::NO_SUBSCRIPTION_EXISTED],
        }),
        Packet::Pingreq,
        Packet::Pingresp,
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::DISCONNECT_WITH_WILL,
            properties: Properties {
                session_expiry_interval_s: Some(0),
                ..Properties::default()
            },
        }),
        Packet::Auth(Auth {
            reason_code: ReasonCode::CONTINUE_AUTHENTICATION,
            properties: Properties {
                authentication_method: Some("SCRAM-SHA-1".into()),
                authentication_data: Some(vec![1, 2, 3]),
                ..Properties::default()
            },
        }),
    ]
}

/// The short forms MQTT 5 allows, and edge values.
fn v5_short_forms() -> Vec<Packet> {
    vec![
        Packet::Puback(PubAck {
            packet_id: 9,
            ..PubAck::default()
        }),
        Packet::Pubrec(PubAck {
            packet_id: 9,
            reason_code: ReasonCode::UNSPECIFIED_ERROR,
            properties: Properties::default(),
        }),
        Packet::Disconnect(Disconnect::default()),
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::SESSION_TAKEN_OVER,
            properties: Properties::default(),
        }),
        Packet::Auth(Auth::default()),
        Packet::Auth(Auth {
            reason_code: ReasonCode::RE_AUTHENTICATE,
            properties: Properties::default(),
        }),
        Packet::Publish(Publish {
            topic: String::new(),
            properties: Properties {
                topic_alias: Some(3),
                ..Properties::default()
            },
            ..Publish::default()
        }),
        Packet::Publish(Publish {
            topic: "t".into(),
            payload: vec![7; 200],
            ..Publish::default()
        }),
        Packet::Connect(Box::new(Connect {
            protocol_version: V5,
            clean_start: false,
            keep_alive_s: 0,
            client_id: String::new(),
            will: None,
            username: Some("user".into()),
            password: None,
            properties: Properties::default(),
        })),
        Packet::Suback(Suback {
            packet_id: 1,
            properties: Properties::default(),
            reason_codes: vec![],
        }),
    ]
}

fn v311_samples() -> Vec<Packet> {
    vec![
        Packet::Connect(Box::new(Connect {
            protocol_version: V311,
            clean_start: true,
            keep_alive_s: 60,
            client_id: "mosq-pub".into(),
            will: Some(Will {
                topic: "bye".into(),
                payload: vec![],
                qos: QoS::ExactlyOnce,
                retain: false,
                properties: Properties::default(),
            }),
            username: Some("u".into()),
            password: Some(vec![]),
            properties: Properties::default(),
        })),
        Packet::Connack(Connack {
            session_present: true,
            reason_code: ReasonCode::BAD_USER_NAME_OR_PASSWORD,
            properties: Properties::default(),
        }),
        Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: "a/b".into(),
            packet_id: Some(10),
            payload: b"hi".to_vec(),
            ..Publish::default()
        }),
        Packet::Puback(PubAck {
            packet_id: 10,
            ..PubAck::default()
        }),
        Packet::Pubrec(PubAck {
            packet_id: 11,
            ..PubAck::default()
        }),
        Packet::Pubrel(PubAck {
            packet_id: 11,
            ..PubAck::default()
        }),
        Packet::Pubcomp(PubAck {
            packet_id: 11,
            ..PubAck::default()
        }),
        Packet::Subscribe(Subscribe {
            packet_id: 12,
            properties: Properties::default(),
            filters: vec![
                ("#".into(), options(QoS::ExactlyOnce)),
                ("a".into(), options(QoS::AtMostOnce)),
            ],
        }),
        Packet::Suback(Suback {
            packet_id: 12,
            properties: Properties::default(),
            reason_codes: vec![ReasonCode(2), ReasonCode(0x80)],
        }),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 13,
            properties: Properties::default(),
            filters: vec!["#".into()],
        }),
        Packet::Unsuback(Unsuback {
            packet_id: 13,
            ..Unsuback::default()
        }),
        Packet::Pingreq,
        Packet::Pingresp,
        Packet::Disconnect(Disconnect::default()),
    ]
}

/// Every MQTT 5 property, spread over packets that may carry it.
fn all_properties_samples() -> Vec<Packet> {
    let will_properties = Properties {
        payload_format_indicator: Some(1),
        message_expiry_interval_s: Some(120),
        content_type: Some("text/plain".into()),
        response_topic: Some("replies/1".into()),
        correlation_data: Some(vec![0xDE, 0xAD]),
        will_delay_interval_s: Some(30),
        user_properties: vec![user("w", "1")],
        ..Properties::default()
    };
    let connect_properties = Properties {
        session_expiry_interval_s: Some(u32::MAX),
        authentication_method: Some("PLAIN".into()),
        authentication_data: Some(b"\0u\0p".to_vec()),
        request_problem_information: Some(0),
        request_response_information: Some(1),
        receive_maximum: Some(65535),
        topic_alias_maximum: Some(0),
        maximum_packet_size: Some(1024),
        user_properties: vec![user("a", "1"), user("b", "2"), user("a", "3")],
        ..Properties::default()
    };
    let connack_properties = Properties {
        session_expiry_interval_s: Some(10),
        assigned_client_identifier: Some("gen-1".into()),
        server_keep_alive_s: Some(120),
        authentication_method: Some("PLAIN".into()),
        authentication_data: Some(vec![]),
        response_information: Some("resp/".into()),
        server_reference: Some("other:1883".into()),
        reason_string: Some("welcome".into()),
        receive_maximum: Some(1),
        topic_alias_maximum: Some(10),
        maximum_qos: Some(1),
        retain_available: Some(0),
        user_properties: vec![user("x", ""), user("", "y")],
        maximum_packet_size: Some(268_435_460),
        wildcard_subscription_available: Some(1),
        subscription_identifier_available: Some(0),
        shared_subscription_available: Some(1),
        ..Properties::default()
    };
    let publish_properties = Properties {
        payload_format_indicator: Some(0),
        message_expiry_interval_s: Some(0),
        content_type: Some("application/json".into()),
        response_topic: Some("r".into()),
        correlation_data: Some(vec![1]),
        subscription_identifiers: vec![1, 268_435_455, 300, 1],
        topic_alias: Some(65535),
        user_properties: vec![user("k", "1"), user("k", "2"), user("é", "ü")],
        ..Properties::default()
    };
    vec![
        Packet::Connect(Box::new(Connect {
            protocol_version: V5,
            clean_start: false,
            keep_alive_s: 65535,
            client_id: "c".into(),
            will: Some(Will {
                topic: "w".into(),
                payload: vec![1],
                qos: QoS::ExactlyOnce,
                retain: true,
                properties: will_properties,
            }),
            username: Some("u".into()),
            password: Some(b"p".to_vec()),
            properties: connect_properties,
        })),
        Packet::Connack(Connack {
            session_present: false,
            reason_code: ReasonCode::SERVER_MOVED,
            properties: connack_properties,
        }),
        Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: "p".into(),
            packet_id: Some(1),
            properties: publish_properties,
            ..Publish::default()
        }),
        Packet::Subscribe(Subscribe {
            packet_id: 1,
            properties: Properties {
                subscription_identifiers: vec![268_435_455],
                user_properties: vec![user("s", "1")],
                ..Properties::default()
            },
            filters: vec![("f".into(), options(QoS::AtLeastOnce))],
        }),
        Packet::Disconnect(Disconnect {
            reason_code: ReasonCode::USE_ANOTHER_SERVER,
            properties: Properties {
                session_expiry_interval_s: Some(0),
                reason_string: Some("moving".into()),
                server_reference: Some("b:1883".into()),
                user_properties: vec![user("d", "1")],
                ..Properties::default()
            },
        }),
        Packet::Auth(Auth {
            reason_code: ReasonCode::SUCCESS,
            properties: Properties {
                authentication_method: Some("M".into()),
                authentication_data: Some(vec![9; 3]),
                reason_string: Some("ok".into()),
                user_properties: vec![user("au", "1")],
                ..Properties::default()
            },
        }),
        Packet::Pubcomp(PubAck {
            packet_id: 2,
            reason_code: ReasonCode::SUCCESS,
            properties: Properties {
                reason_string: Some("done".into()),
                user_properties: vec![user("pc", "1")],
                ..Properties::default()
            },
        }),
    ]
}

/// The identifiers of the properties present in `p`.
fn present_ids(p: &Properties) -> Vec<u8> {
    let present = [
        (
            id::PAYLOAD_FORMAT_INDICATOR,
            p.payload_format_indicator.is_some(),
        ),
        (
            id::MESSAGE_EXPIRY_INTERVAL,
            p.message_expiry_interval_s.is_some(),
        ),
        (id::CONTENT_TYPE, p.content_type.is_some()),
        (id::RESPONSE_TOPIC, p.response_topic.is_some()),
        (id::CORRELATION_DATA, p.correlation_data.is_some()),
        (
            id::SUBSCRIPTION_IDENTIFIER,
            !p.subscription_identifiers.is_empty(),
        ),
        (
            id::SESSION_EXPIRY_INTERVAL,
            p.session_expiry_interval_s.is_some(),
        ),
        (
            id::ASSIGNED_CLIENT_IDENTIFIER,
            p.assigned_client_identifier.is_some(),
        ),
        (id::SERVER_KEEP_ALIVE, p.server_keep_alive_s.is_some()),
        (id::AUTHENTICATION_METHOD, p.authentication_method.is_some()),
        (id::AUTHENTICATION_DATA, p.authentication_data.is_some()),
        (
            id::REQUEST_PROBLEM_INFORMATION,
            p.request_problem_information.is_some(),
        ),
        (id::WILL_DELAY_INTERVAL, p.will_delay_interval_s.is_some()),
        (
            id::REQUEST_RESPONSE_INFORMATION,
            p.request_response_information.is_some(),
        ),
        (id::RESPONSE_INFORMATION, p.response_information.is_some()),
        (id::SERVER_REFERENCE, p.server_reference.is_some()),
        (id::REASON_STRING, p.reason_string.is_some()),
        (id::RECEIVE_MAXIMUM, p.receive_maximum.is_some()),
        (id::TOPIC_ALIAS_MAXIMUM, p.topic_alias_maximum.is_some()),
        (id::TOPIC_ALIAS, p.topic_alias.is_some()),
        (id::MAXIMUM_QOS, p.maximum_qos.is_some()),
        (id::RETAIN_AVAILABLE, p.retain_available.is_some()),
        (id::USER_PROPERTY, !p.user_properties.is_empty()),
        (id::MAXIMUM_PACKET_SIZE, p.maximum_packet_size.is_some()),
        (
            id::WILDCARD_SUBSCRIPTION_AVAILABLE,
            p.wildcard_subscription_available.is_some(),
        ),
        (
            id::SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            p.subscription_identifier_available.is_some(),
        ),
        (
            id::SHARED_SUBSCRIPTION_AVAILABLE,
            p.shared_subscription_available.is_some(),
        ),
    ];
    present
        .iter()
        .filter(|(_, is)| *is)
        .map(|(id, _)| *id)
        .collect()
}

fn properties_of(packet: &Packet) -> Vec<&Properties> {
    match packet {
        Packet::Connect(c) => c
            .will
            .iter()
            .map(|w| &w.properties)
            .chain([&c.properties])
            .collect(),
        Packet::Connack(p) => vec![&p.properties],
        Packet::Publish(p) => vec![&p.properties],
        Packet::Puback(p) | Packet::Pubrec(p) | Packet::Pubrel(p) | Packet::Pubcomp(p) => {
            vec![&p.properties]
        }
        Packet::Subscribe(p) => vec![&p.properties],
        Packet::Suback(p) => vec![&p.properties],
        Packet::Unsubscribe(p) => vec![&p.properties],
        Packet::Unsuback(p) => vec![&p.properties],
        Packet::Disconnect(p) => vec![&p.properties],
        Packet::Auth(p) => vec![&p.properties],
        Packet::Pingreq | Packet::Pingresp => vec![],
    }
}

// ---- round trips ----

#[test]
fn every_v5_packet_type_round_trips() {
    let samples = v5_samples();
    let mut types: Vec<u8> = samples.iter().map(|p| p.packet_type() as u8).collect();
    types.dedup();
    assert_eq!(types, (1..=15).collect::<Vec<u8>>());
    for packet in samples.iter().chain(&v5_short_forms()) {
        assert_round_trip(packet, V5);
    }
}

#[test]
fn every_v311_packet_type_round_trips() {
    let samples = v311_samples();
    let mut types: Vec<u8> = samples.iter().map(|p| p.packet_type() as u8).collect();
    types.dedup();
    assert_eq!(types, (1..=14).collect::<Vec<u8>>());
    for packet in &samples {
        assert_round_trip(packet, V311);
    }
}

#[test]
fn every_property_round_trips() {
    let samples = all_properties_samples();
    let mut seen: Vec<u8> = samples
        .iter()
        .flat_map(properties_of)
        .flat_map(present_ids)
        .collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 27, "every property appears: {seen:02X?}");
    for packet in &samples {
        assert_round_trip(packet, V5);
    }
}

#[test]
fn repeated_properties_keep_their_order() {
    let samples = all_properties_samples();
    let Packet::Publish(publish) = &samples[2] else {
        panic!("a PUBLISH")
    };
    let Ok(Packet::Publish(decoded)) = decode_one(&to_bytes(&samples[2], V5), V5) else {
        panic!("decodes")
    };
    assert_eq!(
        decoded.properties.subscription_identifiers,
        [1, 268_435_455, 300, 1]
    );
    assert_eq!(
        decoded.properties.user_properties,
        publish.properties.user_properties
    );
}

#[test]
fn encoded_len_matches_encode_for_all_samples() {
    let all = [
        (v5_samples(), V5),
        (v5_short_forms(), V5),
        (all_properties_samples(), V5),
        (v311_samples(), V311),
        (v5_samples(), V311),
    ];
    for (packets, version) in all {
        for packet in packets
            .iter()
            .filter(|p| !matches!((p, version), (Packet::Auth(_), V311)))
        {
            assert_eq!(
                to_bytes(packet, version).len(),
                encoded_len(packet, version),
                "{packet:?}"
            );
        }
    }
    assert_eq!(encoded_len(&Packet::Auth(Auth::default()), V311), 0);
}

#[test]
fn large_packets_use_longer_remaining_lengths() {
    for payload_len in [121, 122, 16_379, 16_380, 2_097_147] {
        let packet = Packet::Publish(Publish {
            topic: "t".into(),
            payload: vec![0xA5; payload_len],
            ..Publish::default()
        });
        let bytes = to_bytes(&packet, V5);
        assert_eq!(bytes.len(), encoded_len(&packet, V5));
        assert_eq!(decode_one(&bytes, V5), Ok(packet));
    }
}

// ---- 3.1.1 drops what it cannot say ----

#[test]
fn v311_drops_mqtt5_fields() {
    let rich = v5_samples();
    let expected_connect = {
        let Packet::Connect(mut c) = rich[0].clone() else {
            unreachable!()
        };
        c.protocol_version = V311;
        c.properties = Properties::default();
        if let Some(will) = c.will.as_mut() {
            will.properties = Properties::default();
        }
        // Without a user name 3.1.1 cannot carry the password; the decoder
        // refuses that, which this test does not exercise.
        c.username = Some("u".into());
        c
    };
    let mut connect = expected_connect.clone();
    connect.properties.session_expiry_interval_s = Some(9);
    assert_eq!(
        decode_one(&to_bytes(&Packet::Connect(connect), V311), V311),
        Ok(Packet::Connect(expected_connect))
    );

    let stripped = [
        (
            &rich[3],
            Packet::Puback(PubAck {
                packet_id: 1,
                ..PubAck::default()
            }),
        ),
        (
            &rich[8],
            Packet::Suback(Suback {
                packet_id: 5,
                properties: Properties::default(),
                reason_codes: vec![
                    ReasonCode(0),
                    ReasonCode(1),
                    ReasonCode(2),
                    ReasonCode(0x80),
                    ReasonCode(0x80),
                ],
            }),
        ),
        (
            &rich[10],
            Packet::Unsuback(Unsuback {
                packet_id: 6,
                ..Unsuback::default()
            }),
        ),
        (&rich[13], Packet::Disconnect(Disconnect::default())),
    ];
    for (packet, expected) in stripped {
        assert_eq!(
            decode_one(&to_bytes(packet, V311), V311).as_ref(),
            Ok(&expected)
        );
    }
}

#[test]
fn v311_connack_maps_reasons_to_return_codes() {
    let cases = [
        (0x00, 0x00),
        (0x84, 0x01),
        (0x85, 0x02),
        (0x88, 0x03),
        (0x86, 0x04),
        (0x87, 0x05),
        (0x8A, 0x05),
        (0x89, 0x03),
    ];
    for (reason, return_code) in cases {
        let packet = Packet::Connack(Connack {
            reason_code: ReasonCode(reason),
            ..Connack::default()
        });
        assert_eq!(to_bytes(&packet, V311), [0x20, 0x02, 0x00, return_code]);
    }
}

#[test]
fn encoder_leaves_out_properties_the_packet_may_not_carry() {
    // A Topic Alias is not allowed in PUBACK, so this is the short form.
    let ack = Packet::Puback(PubAck {
        packet_id: 7,
        reason_code: ReasonCode::SUCCESS,
        properties: Properties {
            topic_alias: Some(1),
            ..Properties::default()
        },
    });
    assert_eq!(to_bytes(&ack, V5), [0x40, 0x02, 0x00, 0x07]);
    // SUBSCRIBE carries one Subscription Identifier at most.
    let subscribe = Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Properties {
            subscription_identifiers: vec![2, 3],
            ..Properties::default()
        },
        filters: vec![("t".into(), options(QoS::AtMostOnce))],
    });
    assert_eq!(
        to_bytes(&subscribe, V5),
        [0x82, 0x09, 0x00, 0x01, 0x02, 0x0B, 0x02, 0x00, 0x01, b't', 0x00]
    );
}

#[test]
fn dup_is_dropped_from_a_qos_0_publish() {
    let publish = Packet::Publish(Publish {
        dup: true,
        topic: "t".into(),
        ..Publish::default()
    });
    assert_eq!(to_bytes(&publish, V5)[0], 0x30);
}

// ---- golden vectors, written from the spec's layouts ----

#[rustfmt::skip]
fn golden_vectors() -> Vec<(&'static str, ProtocolVersion, Vec<u8>, Packet)> {
    let connect_v311 = Packet::Connect(Box::new(Connect {
        protocol_version: V311, clean_start: true, keep_alive_s: 60, client_id: "mosq-pub".into(),
        will: None, username: None, password: None, properties: Properties::default(),
    }));
    let connect_v5 = Packet::Connect(Box::new(Connect {
        protocol_version: V5, clean_start: true, keep_alive_s: 60, client_id: String::new(),
        will: None, username: None, password: None,
        properties: Properties { receive_maximum: Some(10), ..Properties::default() },
    }));
    let publish = Packet::Publish(Publish {
        qos: QoS::AtLeastOnce, topic: "a/b".into(), packet_id: Some(1), payload: b"hi".to_vec(), ..Publish::default()
    });
    let subscribe = Packet::Subscribe(Subscribe {
        packet_id: 10, properties: Properties::default(),
        filters: vec![("a/#".into(), SubscriptionOptions {
            qos: QoS::AtLeastOnce, no_local: true, retain_as_published: false, retain_handling: RetainHandling::DoNotSend,
        })],
    });
    vec![
        ("3.1.1 CONNECT as mosquitto_pub sends it", V311,
         vec![0x10, 0x14, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x04, 0x02, 0x00, 0x3C, 0x00, 0x08, b'm', b'o', b's', b'q', b'-', b'p', b'u', b'b'],
         connect_v311),
        ("MQTT 5 CONNECT with Receive Maximum", V5,
         vec![0x10, 0x10, 0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x02, 0x00, 0x3C, 0x03, 0x21, 0x00, 0x0A, 0x00, 0x00],
         connect_v5),
        ("3.1.1 CONNACK, session present", V311, vec![0x20, 0x02, 0x01, 0x00],
         Packet::Connack(Connack { session_present: true, ..Connack::default() })),
        ("MQTT 5 CONNACK with Receive Maximum", V5, vec![0x20, 0x06, 0x00, 0x00, 0x03, 0x21, 0x00, 0x14],
         Packet::Connack(Connack { properties: Properties { receive_maximum: Some(20), ..Properties::default() }, ..Connack::default() })),
        ("3.1.1 PUBLISH QoS 1", V311, vec![0x32, 0x09, 0x00, 0x03, b'a', b'/', b'b', 0x00, 0x01, b'h', b'i'], publish),
        ("MQTT 5 PUBLISH QoS 0", V5, vec![0x30, 0x05, 0x00, 0x01, b'a', 0x00, b'x'],
         Packet::Publish(Publish { topic: "a".into(), payload: b"x".to_vec(), ..Publish::default() })),
        ("MQTT 5 short PUBACK", V5, vec![0x40, 0x02, 0x00, 0x07],
         Packet::Puback(PubAck { packet_id: 7, ..PubAck::default() })),
        ("MQTT 5 PUBACK with a reason code only", V5, vec![0x40, 0x03, 0x00, 0x07, 0x10],
         Packet::Puback(PubAck { packet_id: 7, reason_code: ReasonCode(0x10), ..PubAck::default() })),
        ("3.1.1 PUBREL", V311, vec![0x62, 0x02, 0x12, 0x34],
         Packet::Pubrel(PubAck { packet_id: 0x1234, ..PubAck::default() })),
        ("MQTT 5 SUBSCRIBE", V5, vec![0x82, 0x09, 0x00, 0x0A, 0x00, 0x00, 0x03, b'a', b'/', b'#', 0x25], subscribe),
        ("3.1.1 SUBACK", V311, vec![0x90, 0x04, 0x00, 0x0A, 0x01, 0x80],
         Packet::Suback(Suback { packet_id: 10, properties: Properties::default(), reason_codes: vec![ReasonCode(1), ReasonCode(0x80)] })),
        ("3.1.1 UNSUBACK", V311, vec![0xB0, 0x02, 0x00, 0x0A],
         Packet::Unsuback(Unsuback { packet_id: 10, ..Unsuback::default() })),
        ("MQTT 5 UNSUBACK", V5, vec![0xB0, 0x05, 0x00, 0x0A, 0x00, 0x00, 0x11],
         Packet::Unsuback(Unsuback { packet_id: 10, properties: Properties::default(), reason_codes: vec![ReasonCode(0), ReasonCode(0x11)] })),
        ("PINGREQ", V311, vec![0xC0, 0x00], Packet::Pingreq),
        ("PINGRESP", V5, vec![0xD0, 0x00], Packet::Pingresp),
        ("MQTT 5 short DISCONNECT", V5, vec![0xE0, 0x00], Packet::Disconnect(Disconnect::default())),
        ("MQTT 5 DISCONNECT with a reason code only", V5, vec![0xE0, 0x01, 0x8E],
         Packet::Disconnect(Disconnect { reason_code: ReasonCode(0x8E), ..Disconnect::default() })),
        ("MQTT 5 empty AUTH", V5, vec![0xF0, 0x00], Packet::Auth(Auth::default())),
        ("MQTT 5 AUTH continue", V5, vec![0xF0, 0x06, 0x18, 0x04, 0x15, 0x00, 0x01, b'm'],
         Packet::Auth(Auth { reason_code: ReasonCode(0x18), properties: Properties { authentication_method: Some("m".into()), ..Properties::default() } })),
    ]
}

#[test]
fn golden_vectors_decode_and_encode_byte_exact() {
    for (name, version, bytes, packet) in golden_vectors() {
        assert_eq!(decode_one(&bytes, version).as_ref(), Ok(&packet), "{name}");
        assert_eq!(to_bytes(&packet, version), bytes, "{name}");
    }
}

#[test]
fn fixed_header_waits_for_its_last_byte() {
    assert_eq!(decode_fixed_header(&[]), Ok(None));
    assert_eq!(decode_fixed_header(&[0x30]), Ok(None));
    assert_eq!(decode_fixed_header(&[0x30, 0xFF, 0xFF, 0xFF]), Ok(None));
    let header = decode_fixed_header(&[0x30, 0xFF, 0xFF, 0xFF, 0x7F, 0xAA])
        .unwrap()
        .unwrap();
    assert_eq!(header.remaining_length, MAX_REMAINING_LENGTH);
    assert_eq!(header.header_len, 5);
    assert_eq!(header.packet_len(), 268_435_460);
    // The first byte is judged before the length arrives.
    assert!(decode_fixed_header(&[0x00]).is_err());
    assert!(decode_fixed_header(&[0x60]).is_err());
}

// ---- the malformed table ----

#[test]
fn every_malformed_case_is_refused_with_its_code() {
    for case in cases() {
        let got = decode_one(&case.bytes, case.version).map_err(|e| e.code);
        assert_eq!(
            got,
            Err(case.expected),
            "{}: {:02X?}",
            case.name,
            case.bytes
        );
    }
}

#[test]
fn malformed_table_covers_every_packet_type_and_has_unique_names() {
    let cases = cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "duplicate names");
    for packet_type in 0..=15u8 {
        assert!(
            cases.iter().any(|c| c.bytes[0] >> 4 == packet_type),
            "type {packet_type}"
        );
    }
    for version in [V311, V5] {
        assert!(cases.iter().any(|c| c.version == version));
    }
}

#[test]
fn only_a_first_packet_may_be_connect() {
    let connect = to_bytes(&v5_samples()[0], V5);
    let header = decode_fixed_header(&connect).unwrap().unwrap();
    let body = &connect[header.header_len..];
    assert!(decode_packet(&header, body, None).is_ok());
    for version in [V311, V5] {
        assert_eq!(
            decode_packet(&header, body, Some(version)).map_err(|e| e.code),
            Err(ReasonCode::PROTOCOL_ERROR)
        );
    }
    for packet in v5_samples().iter().skip(1) {
        let bytes = to_bytes(packet, V5);
        let header = decode_fixed_header(&bytes).unwrap().unwrap();
        let got = decode_packet(&header, &bytes[header.header_len..], None).map_err(|e| e.code);
        assert_eq!(got, Err(ReasonCode::PROTOCOL_ERROR), "{packet:?}");
    }
}

#[test]
fn a_first_packet_is_refused_on_its_first_byte_unless_a_connect() {
    // Nothing after the first byte is waited for: not the length, not the body.
    for first in [0x30, 0x82, 0xC0, 0xE0] {
        assert_eq!(
            decode_first_header(&[first]).map_err(|e| e.code),
            Err(ReasonCode::PROTOCOL_ERROR),
            "{first:02X}"
        );
    }
    // A PUBLISH declaring a body of 2 MiB is refused before any of it.
    assert_eq!(
        decode_first_header(&[0x30, 0x80, 0x80, 0x80]).map_err(|e| e.code),
        Err(ReasonCode::PROTOCOL_ERROR)
    );
    // A first byte no packet has is malformed, as anywhere else.
    assert_eq!(
        decode_first_header(&[0x00]).map_err(|e| e.code),
        Err(ReasonCode::MALFORMED_PACKET)
    );
    assert_eq!(decode_first_header(&[]), Ok(None));
    assert_eq!(decode_first_header(&[0x10]), Ok(None));
    let connect = to_bytes(&v5_samples()[0], V5);
    assert_eq!(decode_first_header(&connect), decode_fixed_header(&connect));
}

#[test]
fn connect_version_can_be_peeked_even_when_the_rest_is_bad() {
    let body = |bytes: &[u8]| bytes[2..].to_vec();
    assert_eq!(
        peek_connect_version(&body(&to_bytes(&v5_samples()[0], V5))),
        Some(V5)
    );
    assert_eq!(
        peek_connect_version(&body(&to_bytes(&v311_samples()[0], V311))),
        Some(V311)
    );
    let reserved_flag = [0x00, 0x04, b'M', b'Q', b'T', b'T', 0x05, 0x03];
    assert_eq!(peek_connect_version(&reserved_flag), Some(V5));
    assert_eq!(
        peek_connect_version(&[0x00, 0x06, b'M', b'Q', b'I', b's', b'd', b'p', 0x03]),
        None
    );
    assert_eq!(
        peek_connect_version(&[0x00, 0x04, b'M', b'Q', b'T', b'T']),
        None
    );
    assert_eq!(peek_connect_version(&[]), None);
}

#[test]
fn a_filter_that_is_no_filter_is_a_protocol_error_and_a_refusable_one_decodes() {
    // "a/#/b" then "": neither is a topic filter, so the packet is refused.
    let bytes = [
        0x82, 0x0E, 0x00, 0x01, 0x00, 0x00, 0x05, b'a', b'/', b'#', b'/', b'b', 0x00, 0x00, 0x00,
        0x00,
    ];
    let refused = decode_one(&bytes, V5).unwrap_err();
    assert_eq!(refused.code, ReasonCode::PROTOCOL_ERROR);
    assert_eq!(refused.reason, "a wildcard takes less than a whole level");
    // Well formed, if the broker will not take them: for the SUBACK to say.
    let refusable = ["$SHARE/g/t", "$SYS/#", "$share", "a/b/c/d/e/f"];
    let subscribe = Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: refusable
            .iter()
            .map(|f| (f.to_string(), SubscriptionOptions::default()))
            .collect(),
    });
    for version in [V311, V5] {
        assert_eq!(
            decode_one(&to_bytes(&subscribe, version), version),
            Ok(subscribe.clone())
        );
    }
    // 3.1.1 has no shared form: `$share/name` is a filter like another.
    let shared_form = Packet::Unsubscribe(Unsubscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: vec!["$share/name".into()],
    });
    let bytes = to_bytes(&shared_form, V311);
    assert_eq!(decode_one(&bytes, V311), Ok(shared_form.clone()));
    let on_mqtt5 = decode_one(&to_bytes(&shared_form, V5), V5).map_err(|e| e.code);
    assert_eq!(on_mqtt5, Err(ReasonCode::PROTOCOL_ERROR));
}

#[test]
fn password_without_user_name_is_fine_on_mqtt5() {
    let packet = &v5_samples()[0];
    let Packet::Connect(connect) = packet else {
        panic!()
    };
    assert!(connect.username.is_none() && connect.password.is_some());
    assert_round_trip(packet, V5);
}

// ---- robustness ----

fn all_encoded_samples() -> Vec<(Vec<u8>, ProtocolVersion)> {
    let v5 = v5_samples()
        .into_iter()
        .chain(v5_short_forms())
        .chain(all_properties_samples());
    let v5 = v5.map(|p| (to_bytes(&p, V5), V5));
    let v311 = v311_samples()
        .into_iter()
        .map(|p| (to_bytes(&p, V311), V311));
    v5.chain(v311).collect()
}

#[test]
fn strict_prefixes_are_incomplete_or_refused_never_a_panic() {
    for (bytes, version) in all_encoded_samples() {
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let Some(header) = decode_fixed_header(prefix).expect("a valid packet's header") else {
                continue;
            };
            assert!(header.packet_len() > cut, "{bytes:02X?} cut at {cut}");
            let body = &prefix[header.header_len..];
            assert!(
                decode_packet(&header, body, Some(version)).is_err(),
                "length mismatch"
            );
            // The same bytes framed as a whole, shorter packet.
            let shorter = FixedHeader {
                remaining_length: body.len() as u32,
                ..header
            };
            let _ = decode_packet(&shorter, body, decode_version(&bytes, version));
        }
    }
}

/// The fuzz target's property: whatever decodes re-encodes to the same packet.
fn check_decode_and_round_trip(data: &[u8]) {
    let Ok(Some(header)) = decode_fixed_header(data) else {
        return;
    };
    let Some(body) = data.get(header.header_len..header.packet_len()) else {
        return;
    };
    for version in [None, Some(V311), Some(V5)] {
        let Ok(packet) = decode_packet(&header, body, version) else {
            continue;
        };
        let write_version = match &packet {
            Packet::Connect(connect) => connect.protocol_version,
            _ => version.expect("only CONNECT decodes without a version"),
        };
        let bytes = to_bytes(&packet, write_version);
        assert_eq!(bytes.len(), encoded_len(&packet, write_version));
        let again = decode_one(&bytes, write_version);
        assert_eq!(again.as_ref(), Ok(&packet), "{data:02X?}");
        assert_filters_well_formed(&packet, write_version);
    }
}

/// What the decoder accepts as a SUBSCRIBE or UNSUBSCRIBE names topic
/// filters only (the fuzz target checks the same).
fn assert_filters_well_formed(packet: &Packet, version: ProtocolVersion) {
    let filters: Vec<&str> = match packet {
        Packet::Subscribe(subscribe) => subscribe.filters.iter().map(|(f, _)| f.as_str()).collect(),
        Packet::Unsubscribe(unsubscribe) => {
            unsubscribe.filters.iter().map(String::as_str).collect()
        }
        _ => return,
    };
    for filter in filters {
        assert_eq!(
            topic::filter_form_error(filter, version == V5),
            None,
            "{filter:?}"
        );
    }
}

/// A tiny deterministic generator, so the test needs no dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn mutated_packets_never_panic_and_round_trip_when_accepted() {
    let mut rng = XorShift(0x5A61_6775_696E);
    for (bytes, _) in all_encoded_samples() {
        check_decode_and_round_trip(&bytes);
        for _ in 0..500 {
            let mut mutated = bytes.clone();
            for _ in 0..=rng.below(3) {
                let at = rng.below(mutated.len());
                match rng.below(4) {
                    0 => mutated[at] ^= 1 << rng.below(8),
                    1 => mutated[at] = rng.next() as u8,
                    2 => mutated.insert(at, rng.next() as u8),
                    _ => {
                        mutated.remove(at);
                        if mutated.is_empty() {
                            mutated.push(0x30);
                        }
                    }
                }
            }
            // Keep the remaining length consistent half of the time, so
            // that mutations reach the body decoders.
            if rng.below(2) == 0 && mutated.len() >= 2 && mutated.len() < 129 {
                mutated[1] = (mutated.len() - 2) as u8;
            }
            check_decode_and_round_trip(&mutated);
        }
    }
}

#[test]
fn malformed_cases_pass_the_fuzz_property() {
    for case in cases() {
        check_decode_and_round_trip(&case.bytes);
    }
}

/// Writes every sample and malformed row as a fuzzing seed:
/// `SAGUIN_FUZZ_SEEDS=fuzz/corpus/decode cargo test --lib write_fuzz_seeds -- --ignored`
#[test]
#[ignore = "writes files; run by hand before fuzzing"]
fn write_fuzz_seeds() {
    let dir = std::env::var("SAGUIN_FUZZ_SEEDS").expect("SAGUIN_FUZZ_SEEDS names a directory");
    std::fs::create_dir_all(&dir).expect("seed directory");
    let samples = all_encoded_samples().into_iter().map(|(bytes, _)| bytes);
    let rows = cases().into_iter().map(|case| case.bytes);
    for (index, bytes) in samples.chain(rows).enumerate() {
        std::fs::write(format!("{dir}/seed-{index:03}"), bytes).expect("seed file");
    }
}

#[test]
fn plain_acks_take_the_shortcut_and_match_the_general_encoding() {
    let kinds: [fn(PubAck) -> Packet; 4] = [
        Packet::Puback,
        Packet::Pubrec,
        Packet::Pubrel,
        Packet::Pubcomp,
    ];
    for kind in kinds {
        for version in [V311, V5] {
            for packet_id in [1, 0x1234, u16::MAX] {
                let plain = kind(PubAck {
                    packet_id,
                    ..PubAck::default()
                });
                let mut general = Vec::new();
                super::encode::encode_any(&plain, version, &mut general);
                let bytes = to_bytes(&plain, version);
                assert_eq!(bytes, general, "{plain:?} on {version:?}");
                assert_eq!(bytes.len(), 4);
                assert_eq!(decode_one(&bytes, version).unwrap(), plain);
            }
            // A reason or a property is not plain: the general path, with
            // the reason kept on MQTT 5.
            let refused = kind(PubAck {
                packet_id: 7,
                reason_code: ReasonCode(0x83),
                properties: Properties {
                    reason_string: Some("full".into()),
                    ..Properties::default()
                },
            });
            let mut general = Vec::new();
            super::encode::encode_any(&refused, version, &mut general);
            assert_eq!(to_bytes(&refused, version), general);
            if version == V5 {
                assert!(general.len() > 4, "{general:?}");
            }
        }
    }
}

#[test]
fn properties_are_empty_only_when_every_property_is_absent() {
    assert!(Properties::default().is_empty());
    // One property set, every other absent.
    macro_rules! only {
        ($field:ident: $value:expr) => {
            Properties {
                $field: $value,
                ..Properties::default()
            }
        };
    }
    let one_each = [
        only!(payload_format_indicator: Some(0)),
        only!(message_expiry_interval_s: Some(0)),
        only!(content_type: Some(String::new())),
        only!(response_topic: Some("r".into())),
        only!(correlation_data: Some(Vec::new())),
        only!(subscription_identifiers: vec![1]),
        only!(session_expiry_interval_s: Some(0)),
        only!(assigned_client_identifier: Some("c".into())),
        only!(server_keep_alive_s: Some(0)),
        only!(authentication_method: Some("m".into())),
        only!(authentication_data: Some(Vec::new())),
        only!(request_problem_information: Some(0)),
        only!(will_delay_interval_s: Some(0)),
        only!(request_response_information: Some(0)),
        only!(response_information: Some("i".into())),
        only!(server_reference: Some("s".into())),
        only!(reason_string: Some(String::new())),
        only!(receive_maximum: Some(1)),
        only!(topic_alias_maximum: Some(0)),
        only!(topic_alias: Some(1)),
        only!(maximum_qos: Some(0)),
        only!(retain_available: Some(0)),
        only!(user_properties: vec![user("", "")]),
        only!(maximum_packet_size: Some(1)),
        only!(wildcard_subscription_available: Some(0)),
        only!(subscription_identifier_available: Some(0)),
        only!(shared_subscription_available: Some(0)),
    ];
    for properties in &one_each {
        assert!(!properties.is_empty(), "{properties:?}");
        assert_ne!(*properties, Properties::default());
    }
    // One for each property MQTT 5 defines.
    assert_eq!(one_each.len(), 27);
    for packet in all_properties_samples() {
        for p in properties_of(&packet) {
            assert_eq!(p.is_empty(), *p == Properties::default(), "{p:?}");
        }
    }
}
