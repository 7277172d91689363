//! Deterministic tests of the core: simulated clients, simulated time, and
//! a transport that records what the broker said to whom.

use super::*;
use crate::codec::{
    Connack, Connect, PubAck, Publish, QoS, RetainHandling, Subscribe, SubscriptionOptions,
    Unsubscribe,
};

#[derive(Default)]
struct Recorder {
    sent: Vec<(Key, Packet)>,
    closed: Vec<Key>,
    /// Connections whose buffer is full, so droppable packets are refused.
    full: Vec<Key>,
}

impl Transport for Recorder {
    fn send(
        &mut self,
        conn: Key,
        _version: ProtocolVersion,
        packet: &Packet,
        droppable: bool,
    ) -> bool {
        if droppable && self.full.contains(&conn) {
            return false;
        }
        self.sent.push((conn, packet.clone()));
        true
    }

    fn close(&mut self, conn: Key) {
        self.closed.push(conn);
    }
}

impl Recorder {
    fn take(&mut self, conn: Key) -> Vec<Packet> {
        let (mine, rest): (Vec<_>, Vec<_>) = self.sent.drain(..).partition(|(k, _)| *k == conn);
        self.sent = rest;
        mine.into_iter().map(|(_, p)| p).collect()
    }
}

struct Harness {
    broker: Broker,
    out: Recorder,
    now_ms: u64,
}

fn connect_packet(client_id: &str, version: ProtocolVersion) -> Connect {
    Connect {
        protocol_version: version,
        clean_start: true,
        keep_alive_s: 60,
        client_id: client_id.into(),
        will: None,
        username: None,
        password: None,
        properties: Properties::default(),
    }
}

fn publish_packet(topic: &str, qos: QoS, packet_id: Option<u16>, payload: &[u8]) -> Publish {
    Publish {
        qos,
        topic: topic.into(),
        packet_id,
        payload: payload.to_vec(),
        ..Publish::default()
    }
}

impl Harness {
    fn new(settings: Settings) -> Harness {
        Harness {
            broker: Broker::new(settings),
            out: Recorder::default(),
            now_ms: 1_000,
        }
    }

    fn open(&mut self) -> Key {
        self.broker.accept(self.now_ms).expect("a free slot")
    }

    fn packet(&mut self, conn: Key, packet: Packet) {
        self.broker
            .handle_packet(conn, packet, self.now_ms, &mut self.out);
    }

    fn connect_with(&mut self, connect: Connect) -> (Key, Connack) {
        let conn = self.open();
        self.packet(conn, Packet::Connect(connect));
        let mut replies = self.out.take(conn);
        let rest = replies.split_off(1.min(replies.len()));
        // What follows the CONNACK stays for the test to read.
        self.out
            .sent
            .extend(rest.into_iter().map(|packet| (conn, packet)));
        match replies.first() {
            Some(Packet::Connack(connack)) => (conn, connack.clone()),
            other => panic!("expected a CONNACK, got {other:?}"),
        }
    }

    fn connect(&mut self, client_id: &str, version: ProtocolVersion) -> Key {
        let (conn, connack) = self.connect_with(connect_packet(client_id, version));
        assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
        conn
    }

    fn subscribe(
        &mut self,
        conn: Key,
        filter: &str,
        options: SubscriptionOptions,
        id: Option<u32>,
    ) -> Vec<ReasonCode> {
        let mut properties = Properties::default();
        properties.subscription_identifiers.extend(id);
        let subscribe = Subscribe {
            packet_id: 7,
            properties,
            filters: vec![(filter.into(), options)],
        };
        self.packet(conn, Packet::Subscribe(subscribe));
        match self.out.take(conn).as_slice() {
            [Packet::Suback(suback)] => suback.reason_codes.clone(),
            other => panic!("expected one SUBACK, got {other:?}"),
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
        self.broker.tick(self.now_ms, &mut self.out);
    }
}

fn qos(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions {
        qos,
        ..SubscriptionOptions::default()
    }
}

fn publishes(packets: &[Packet]) -> Vec<&Publish> {
    packets
        .iter()
        .filter_map(|p| {
            if let Packet::Publish(p) = p {
                Some(p)
            } else {
                None
            }
        })
        .collect()
}

fn disconnect_code(packets: &[Packet]) -> Option<ReasonCode> {
    packets.iter().find_map(|p| {
        if let Packet::Disconnect(d) = p {
            Some(d.reason_code)
        } else {
            None
        }
    })
}

#[test]
fn qos1_publish_reaches_a_subscriber_and_is_acknowledged() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V311);
    assert_eq!(
        h.subscribe(subscriber, "sensors/+/temp", qos(QoS::AtLeastOnce), Some(9)),
        vec![ReasonCode(1)]
    );

    h.packet(
        publisher,
        Packet::Publish(publish_packet(
            "sensors/a/temp",
            QoS::AtLeastOnce,
            Some(3),
            b"21.5",
        )),
    );
    assert_eq!(
        h.out.take(publisher),
        vec![Packet::Puback(PubAck {
            packet_id: 3,
            ..PubAck::default()
        })]
    );
    let received = h.out.take(subscriber);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].payload, b"21.5");
    assert_eq!(delivered[0].qos, QoS::AtLeastOnce);
    assert_eq!(delivered[0].properties.subscription_identifiers, vec![9]);
    let packet_id = delivered[0].packet_id.unwrap();

    // The delivery stays owed until the subscriber acknowledges it.
    let session = h
        .broker
        .sessions
        .get(h.broker.sessions_by_client_id["sub"])
        .unwrap();
    assert_eq!(session.inflight.len(), 1);
    h.packet(
        subscriber,
        Packet::Puback(PubAck {
            packet_id,
            ..PubAck::default()
        }),
    );
    let session = h
        .broker
        .sessions
        .get(h.broker.sessions_by_client_id["sub"])
        .unwrap();
    assert!(session.inflight.is_empty());
    assert_eq!(session.held_bytes, 0);
}

#[test]
fn delivered_qos_is_the_lower_of_message_and_subscription() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "a", qos(QoS::AtMostOnce), None);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("a", QoS::AtLeastOnce, Some(1), b"x")),
    );
    let received = h.out.take(subscriber);
    assert_eq!(publishes(&received)[0].qos, QoS::AtMostOnce);
    assert_eq!(publishes(&received)[0].packet_id, None);
}

#[test]
fn overlapping_subscriptions_get_one_copy_with_every_identifier() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "a/#", qos(QoS::AtMostOnce), Some(1));
    h.subscribe(subscriber, "a/+", qos(QoS::AtLeastOnce), Some(2));
    h.packet(
        publisher,
        Packet::Publish(publish_packet("a/b", QoS::AtLeastOnce, Some(1), b"x")),
    );
    let received = h.out.take(subscriber);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].qos, QoS::AtLeastOnce);
    let mut ids = delivered[0].properties.subscription_identifiers.clone();
    ids.sort();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn no_local_keeps_a_publishers_own_messages_from_it() {
    let mut h = Harness::new(Settings::default());
    let client = h.connect("c", ProtocolVersion::V5);
    let options = SubscriptionOptions {
        no_local: true,
        ..qos(QoS::AtMostOnce)
    };
    h.subscribe(client, "t", options, None);
    h.packet(
        client,
        Packet::Publish(publish_packet("t", QoS::AtMostOnce, None, b"x")),
    );
    assert!(publishes(&h.out.take(client)).is_empty());
}

#[test]
fn wildcard_filters_do_not_reach_dollar_topics() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "#", qos(QoS::AtMostOnce), None);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("$data/x", QoS::AtMostOnce, None, b"x")),
    );
    assert!(publishes(&h.out.take(subscriber)).is_empty());
}

#[test]
fn unsubscribe_stops_delivery_and_reports_unknown_filters() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "t", qos(QoS::AtMostOnce), None);
    let unsubscribe = Unsubscribe {
        packet_id: 4,
        properties: Properties::default(),
        filters: vec!["t".into(), "u".into()],
    };
    h.packet(subscriber, Packet::Unsubscribe(unsubscribe));
    match h.out.take(subscriber).as_slice() {
        [Packet::Unsuback(unsuback)] => {
            assert_eq!(
                unsuback.reason_codes,
                vec![ReasonCode::SUCCESS, ReasonCode::NO_SUBSCRIPTION_EXISTED]
            )
        }
        other => panic!("expected an UNSUBACK, got {other:?}"),
    }
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::AtMostOnce, None, b"x")),
    );
    assert!(publishes(&h.out.take(subscriber)).is_empty());
}

#[test]
fn subscribe_refusals_carry_their_codes() {
    let settings = Settings {
        max_topic_levels: 3,
        max_subscriptions: 2,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let client = h.connect("c", ProtocolVersion::V5);
    assert_eq!(
        h.subscribe(client, "a/b#", qos(QoS::AtMostOnce), None),
        vec![ReasonCode::TOPIC_FILTER_INVALID]
    );
    assert_eq!(
        h.subscribe(client, "a/b/c/d", qos(QoS::AtMostOnce), None),
        vec![ReasonCode::TOPIC_FILTER_INVALID]
    );
    assert_eq!(
        h.subscribe(client, "$share/g/t", qos(QoS::AtMostOnce), None),
        vec![ReasonCode::SHARED_SUBSCRIPTIONS_NOT_SUPPORTED]
    );
    assert_eq!(
        h.subscribe(client, "a", qos(QoS::AtMostOnce), None),
        vec![ReasonCode(0)]
    );
    assert_eq!(
        h.subscribe(client, "b", qos(QoS::AtLeastOnce), None),
        vec![ReasonCode(1)]
    );
    assert_eq!(
        h.subscribe(client, "c", qos(QoS::AtMostOnce), None),
        vec![ReasonCode::QUOTA_EXCEEDED]
    );
    // Replacing a filter already held adds nothing, so it is not refused.
    assert_eq!(
        h.subscribe(client, "a", qos(QoS::ExactlyOnce), None),
        vec![ReasonCode(2)]
    );
}

#[test]
fn refused_publishes_are_told_on_mqtt5_and_closed_on_311() {
    let settings = Settings {
        max_topic_length: 8,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let v5 = h.connect("five", ProtocolVersion::V5);
    h.packet(
        v5,
        Packet::Publish(publish_packet(
            "much/too/long",
            QoS::AtLeastOnce,
            Some(5),
            b"x",
        )),
    );
    match h.out.take(v5).as_slice() {
        [Packet::Puback(ack)] => assert_eq!(ack.reason_code, ReasonCode::TOPIC_NAME_INVALID),
        other => panic!("expected a refusing PUBACK, got {other:?}"),
    }
    h.packet(
        v5,
        Packet::Publish(publish_packet("$SYS/x", QoS::AtLeastOnce, Some(6), b"x")),
    );
    match h.out.take(v5).as_slice() {
        [Packet::Puback(ack)] => assert_eq!(ack.reason_code, ReasonCode::NOT_AUTHORIZED),
        other => panic!("expected a refusing PUBACK, got {other:?}"),
    }
    let mut bad_utf8 = publish_packet("t", QoS::AtLeastOnce, Some(7), &[0xff, 0xfe]);
    bad_utf8.properties.payload_format_indicator = Some(1);
    h.packet(v5, Packet::Publish(bad_utf8));
    match h.out.take(v5).as_slice() {
        [Packet::Puback(ack)] => assert_eq!(ack.reason_code, ReasonCode::PAYLOAD_FORMAT_INVALID),
        other => panic!("expected a refusing PUBACK, got {other:?}"),
    }
    assert!(h.broker.is_open(v5));

    let v311 = h.connect("three", ProtocolVersion::V311);
    h.packet(
        v311,
        Packet::Publish(publish_packet(
            "much/too/long",
            QoS::AtLeastOnce,
            Some(5),
            b"x",
        )),
    );
    assert!(
        h.out.take(v311).is_empty(),
        "3.1.1 must not be acknowledged for a refused publish"
    );
    assert!(h.out.closed.contains(&v311));
    assert!(!h.broker.is_open(v311));
}

#[test]
fn topic_aliases_are_resolved_and_bounded() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "long/topic", qos(QoS::AtMostOnce), None);
    let mut first = publish_packet("long/topic", QoS::AtMostOnce, None, b"1");
    first.properties.topic_alias = Some(3);
    h.packet(publisher, Packet::Publish(first));
    let mut second = publish_packet("", QoS::AtMostOnce, None, b"2");
    second.properties.topic_alias = Some(3);
    h.packet(publisher, Packet::Publish(second));
    let received = h.out.take(subscriber);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 2);
    assert!(delivered
        .iter()
        .all(|p| p.topic == "long/topic" && p.properties.topic_alias.is_none()));

    let mut unknown = publish_packet("", QoS::AtMostOnce, None, b"3");
    unknown.properties.topic_alias = Some(4);
    h.packet(publisher, Packet::Publish(unknown));
    assert_eq!(
        disconnect_code(&h.out.take(publisher)),
        Some(ReasonCode::PROTOCOL_ERROR)
    );

    let other = h.connect("other", ProtocolVersion::V5);
    let mut too_high = publish_packet("x", QoS::AtMostOnce, None, b"4");
    too_high.properties.topic_alias = Some(17);
    h.packet(other, Packet::Publish(too_high));
    assert_eq!(
        disconnect_code(&h.out.take(other)),
        Some(ReasonCode::TOPIC_ALIAS_INVALID)
    );
}

#[test]
fn connack_states_what_the_broker_offers() {
    let settings = Settings {
        max_session_expiry_s: 100,
        max_keepalive_s: Some(30),
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let mut connect = connect_packet("", ProtocolVersion::V5);
    connect.properties.session_expiry_interval_s = Some(1000);
    connect.keep_alive_s = 0;
    let (_, connack) = h.connect_with(connect);
    let p = &connack.properties;
    assert_eq!(p.topic_alias_maximum, Some(16));
    assert_eq!(p.maximum_packet_size, Some(1024 * 1024));
    assert_eq!(p.session_expiry_interval_s, Some(100));
    assert_eq!(p.server_keep_alive_s, Some(30));
    assert!(p
        .assigned_client_identifier
        .as_deref()
        .is_some_and(|id| !id.is_empty()));
    assert_eq!(p.maximum_qos, None, "absent Maximum QoS means 2");
}

#[test]
fn connect_refusals() {
    let settings = Settings {
        max_client_id_length: 4,
        min_protocol_version: ProtocolVersion::V5,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let cases: Vec<(Connect, ReasonCode)> = vec![
        (
            connect_packet("toolong", ProtocolVersion::V5),
            ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
        ),
        (
            Connect {
                clean_start: false,
                ..connect_packet("", ProtocolVersion::V5)
            },
            ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
        ),
        (
            connect_packet("a\u{7}", ProtocolVersion::V5),
            ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
        ),
        (
            connect_packet("ok", ProtocolVersion::V311),
            ReasonCode::UNSUPPORTED_PROTOCOL_VERSION,
        ),
        (
            Connect {
                properties: Properties {
                    authentication_method: Some("SCRAM".into()),
                    ..Properties::default()
                },
                ..connect_packet("ok", ProtocolVersion::V5)
            },
            ReasonCode::BAD_AUTHENTICATION_METHOD,
        ),
        (
            Connect {
                will: Some(Will {
                    topic: "$saguin/x".into(),
                    ..Will::default()
                }),
                ..connect_packet("ok", ProtocolVersion::V5)
            },
            ReasonCode::TOPIC_NAME_INVALID,
        ),
    ];
    for (connect, expected) in cases {
        let (conn, connack) = h.connect_with(connect.clone());
        assert_eq!(connack.reason_code, expected, "{connect:?}");
        assert!(!h.broker.is_open(conn));
    }
    assert_eq!(
        h.broker.session_count(),
        0,
        "a refused CONNECT creates nothing"
    );
}

#[test]
fn the_connection_table_is_bounded() {
    let mut h = Harness::new(Settings {
        max_connections: 2,
        ..Settings::default()
    });
    let a = h.open();
    let _b = h.open();
    assert!(h.broker.accept(h.now_ms).is_none());
    assert_eq!(h.broker.stats().connections_refused_busy, 1);
    h.broker.handle_connection_lost(a, h.now_ms, &mut h.out);
    assert!(
        h.broker.accept(h.now_ms).is_some(),
        "a freed slot is reused at once"
    );
}

#[test]
fn a_socket_that_sends_no_connect_is_closed_at_connect_timeout() {
    let mut h = Harness::new(Settings {
        connect_timeout_ms: 10_000,
        ..Settings::default()
    });
    let conn = h.open();
    h.advance(9_900);
    assert!(h.broker.is_open(conn));
    h.advance(200);
    assert!(!h.broker.is_open(conn));
    assert!(h.out.take(conn).is_empty(), "closed with nothing written");
}

#[test]
fn keepalive_allows_one_and_a_half_intervals() {
    let mut h = Harness::new(Settings::default());
    let mut connect = connect_packet("k", ProtocolVersion::V5);
    connect.keep_alive_s = 10;
    let (conn, _) = h.connect_with(connect);
    h.advance(14_000);
    h.packet(conn, Packet::Pingreq);
    assert_eq!(h.out.take(conn), vec![Packet::Pingresp]);
    h.advance(15_000);
    assert!(
        h.broker.is_open(conn),
        "15 s of silence is within 1.5 x 10 s"
    );
    h.advance(100);
    assert!(!h.broker.is_open(conn));
    assert_eq!(
        disconnect_code(&h.out.take(conn)),
        Some(ReasonCode::KEEP_ALIVE_TIMEOUT)
    );
}

#[test]
fn a_second_connection_takes_the_session_over() {
    let mut h = Harness::new(Settings::default());
    let first = h.connect("same", ProtocolVersion::V5);
    let second = h.connect("same", ProtocolVersion::V5);
    assert_eq!(
        disconnect_code(&h.out.take(first)),
        Some(ReasonCode::SESSION_TAKEN_OVER)
    );
    assert!(!h.broker.is_open(first));
    assert!(h.broker.is_open(second));
    assert_eq!(h.broker.session_count(), 1);
}

#[test]
fn a_persistent_session_keeps_qos1_messages_while_away() {
    let mut h = Harness::new(Settings::default());
    let mut connect = connect_packet("durable", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(60);
    let (subscriber, _) = h.connect_with(connect.clone());
    h.subscribe(subscriber, "t", qos(QoS::AtLeastOnce), None);
    h.packet(subscriber, Packet::Disconnect(Disconnect::default()));
    assert!(!h.broker.is_open(subscriber));

    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::AtLeastOnce, Some(1), b"kept")),
    );
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::AtMostOnce, None, b"not kept")),
    );

    let (subscriber, connack) = h.connect_with(connect.clone());
    assert!(connack.session_present);
    let received = h.out.take(subscriber);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].payload, b"kept");

    // Away past its expiry, the session ends whole.
    h.packet(subscriber, Packet::Disconnect(Disconnect::default()));
    h.advance(61_000);
    assert_eq!(
        h.broker.session_count(),
        1,
        "only the publisher's session is left"
    );
    let (_, connack) = h.connect_with(connect);
    assert!(!connack.session_present);
}

#[test]
fn session_queue_bytes_drops_the_oldest_waiting() {
    let settings = Settings {
        session_queue_bytes: 1000,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let mut connect = connect_packet("slow", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(60);
    let (subscriber, _) = h.connect_with(connect.clone());
    h.subscribe(subscriber, "t", qos(QoS::AtLeastOnce), None);
    h.packet(subscriber, Packet::Disconnect(Disconnect::default()));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for i in 0..20u8 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("t", QoS::AtLeastOnce, Some(1), &[i; 100])),
        );
    }
    assert!(h.broker.stats().session_queue_full > 0);
    let (subscriber, _) = h.connect_with(connect);
    // Acknowledge as they come: no more than half the bound is on the wire.
    let mut payloads = Vec::new();
    loop {
        let received = h.out.take(subscriber);
        let delivered = publishes(&received);
        if delivered.is_empty() {
            break;
        }
        assert!(
            delivered.len() <= 2,
            "half of 1000 bytes holds two 197-byte deliveries"
        );
        for publish in delivered {
            payloads.push(publish.payload[0]);
            let packet_id = publish.packet_id.unwrap();
            h.packet(
                subscriber,
                Packet::Puback(PubAck {
                    packet_id,
                    ..PubAck::default()
                }),
            );
        }
    }
    // What survives is the newest, in order: five of 197 bytes fit in 1000.
    assert_eq!(payloads, vec![15, 16, 17, 18, 19]);
}

#[test]
fn receive_maximum_bounds_what_is_on_the_wire() {
    let mut h = Harness::new(Settings::default());
    let mut connect = connect_packet("narrow", ProtocolVersion::V5);
    connect.properties.receive_maximum = Some(2);
    let (subscriber, _) = h.connect_with(connect);
    h.subscribe(subscriber, "t", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for i in 0..5u8 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("t", QoS::AtLeastOnce, Some(1), &[i])),
        );
    }
    let received = h.out.take(subscriber);
    let first = publishes(&received);
    assert_eq!(first.len(), 2);
    let packet_id = first[0].packet_id.unwrap();
    h.packet(
        subscriber,
        Packet::Puback(PubAck {
            packet_id,
            ..PubAck::default()
        }),
    );
    let received = h.out.take(subscriber);
    let next = publishes(&received);
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].payload, vec![2]);
}

#[test]
fn qos0_is_shed_when_the_connection_buffer_is_full() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "t", qos(QoS::AtMostOnce), None);
    h.out.full.push(subscriber);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::AtMostOnce, None, b"x")),
    );
    assert_eq!(h.broker.stats().deliveries_dropped, 1);
}

#[test]
fn exactly_once_in_delivers_once_at_pubrel() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.subscribe(subscriber, "t", qos(QoS::AtMostOnce), None);
    let publish = publish_packet("t", QoS::ExactlyOnce, Some(9), b"once");
    h.packet(publisher, Packet::Publish(publish.clone()));
    h.packet(
        publisher,
        Packet::Publish(Publish {
            dup: true,
            ..publish
        }),
    );
    assert_eq!(
        h.out.take(publisher),
        vec![
            Packet::Pubrec(PubAck {
                packet_id: 9,
                ..PubAck::default()
            });
            2
        ]
    );
    assert!(
        publishes(&h.out.take(subscriber)).is_empty(),
        "held until PUBREL"
    );
    h.packet(
        publisher,
        Packet::Pubrel(PubAck {
            packet_id: 9,
            ..PubAck::default()
        }),
    );
    assert_eq!(
        h.out.take(publisher),
        vec![Packet::Pubcomp(PubAck {
            packet_id: 9,
            ..PubAck::default()
        })]
    );
    assert_eq!(publishes(&h.out.take(subscriber)).len(), 1);
    h.packet(
        publisher,
        Packet::Pubrel(PubAck {
            packet_id: 9,
            ..PubAck::default()
        }),
    );
    match h.out.take(publisher).as_slice() {
        [Packet::Pubcomp(ack)] => {
            assert_eq!(ack.reason_code, ReasonCode::PACKET_IDENTIFIER_NOT_FOUND)
        }
        other => panic!("expected PUBCOMP 0x92, got {other:?}"),
    }
}

#[test]
fn a_will_is_published_when_the_connection_drops_and_not_after_a_clean_disconnect() {
    let mut h = Harness::new(Settings::default());
    let watcher = h.connect("watcher", ProtocolVersion::V5);
    h.subscribe(watcher, "status/#", qos(QoS::AtMostOnce), None);
    let mut connect = connect_packet("device", ProtocolVersion::V311);
    connect.will = Some(Will {
        topic: "status/device".into(),
        payload: b"offline".to_vec(),
        ..Will::default()
    });
    let (device, _) = h.connect_with(connect.clone());
    h.broker
        .handle_connection_lost(device, h.now_ms, &mut h.out);
    let received = h.out.take(watcher);
    assert_eq!(publishes(&received).len(), 1);
    assert_eq!(publishes(&received)[0].payload, b"offline");

    let (device, _) = h.connect_with(connect);
    h.packet(device, Packet::Disconnect(Disconnect::default()));
    assert!(publishes(&h.out.take(watcher)).is_empty());
}

#[test]
fn shutdown_says_goodbye_to_mqtt5_clients() {
    let mut h = Harness::new(Settings::default());
    let v5 = h.connect("five", ProtocolVersion::V5);
    let v311 = h.connect("three", ProtocolVersion::V311);
    let waiting = h.open();
    h.broker.shutdown(h.now_ms, &mut h.out);
    assert_eq!(
        disconnect_code(&h.out.take(v5)),
        Some(ReasonCode::SERVER_SHUTTING_DOWN)
    );
    assert!(h.out.take(v311).is_empty());
    for conn in [v5, v311, waiting] {
        assert!(h.out.closed.contains(&conn));
    }
    assert_eq!(h.broker.connection_count(), 0);
}

#[test]
fn retain_handling_is_decoded_but_retained_publishes_are_refused_for_now() {
    let mut h = Harness::new(Settings::default());
    let client = h.connect("c", ProtocolVersion::V5);
    let options = SubscriptionOptions {
        retain_handling: RetainHandling::DoNotSend,
        ..qos(QoS::AtMostOnce)
    };
    assert_eq!(h.subscribe(client, "t", options, None), vec![ReasonCode(0)]);
    let retained = Publish {
        retain: true,
        ..publish_packet("t", QoS::AtMostOnce, None, b"x")
    };
    h.packet(client, Packet::Publish(retained));
    assert_eq!(
        disconnect_code(&h.out.take(client)),
        Some(ReasonCode::RETAIN_NOT_SUPPORTED)
    );
}
