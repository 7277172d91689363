//! Deterministic tests of the core: simulated clients, simulated time, and
//! a transport that records what the broker said to whom.

use crate::codec::{
    Connack, Connect, PubAck, Publish, QoS, RetainHandling, Subscribe, SubscriptionOptions,
    Unsubscribe, Will,
};
use crate::core::channel::{ChannelSettings, ChannelStart};
use crate::core::*;

#[derive(Default)]
struct Recorder {
    sent: Vec<(Key, Packet)>,
    closed: Vec<Key>,
    /// Connections whose buffer is full, so droppable packets are refused.
    full: Vec<Key>,
    /// Storage requests, with their provider.
    stored: Vec<(usize, StoreRequest)>,
    /// Storage threads are behind: every request is refused.
    storage_busy: bool,
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

    fn store(&mut self, provider: usize, request: StoreRequest) -> bool {
        if self.storage_busy {
            return false;
        }
        self.stored.push((provider, request));
        true
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
        self.broker
            .accept(self.now_ms, crate::core::Origin::default())
            .expect("a free slot")
    }

    /// The client acknowledges a QoS 1 delivery.
    fn puback(&mut self, conn: Key, packet_id: u16) {
        self.packet(
            conn,
            Packet::Puback(PubAck {
                packet_id,
                ..PubAck::default()
            }),
        );
    }

    fn packet(&mut self, conn: Key, packet: Packet) {
        self.broker
            .handle_packet(conn, packet, self.now_ms, &mut self.out);
    }

    fn connect_with(&mut self, connect: Connect) -> (Key, Connack) {
        let conn = self.open();
        self.packet(conn, Packet::Connect(Box::new(connect)));
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
        let mut replies = self.out.take(conn);
        let rest = replies.split_off(1.min(replies.len()));
        // What follows the SUBACK (retained values) stays for the test.
        self.out
            .sent
            .extend(rest.into_iter().map(|packet| (conn, packet)));
        match replies.as_slice() {
            [Packet::Suback(suback)] => suback.reason_codes.clone(),
            other => panic!("expected a SUBACK first, got {other:?}"),
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

/// The PUBACKs and PUBRECs among `packets`, as (packet id, reason code).
fn acks(packets: &[Packet]) -> Vec<(u16, ReasonCode)> {
    packets
        .iter()
        .filter_map(|p| match p {
            Packet::Puback(ack) | Packet::Pubrec(ack) => Some((ack.packet_id, ack.reason_code)),
            _ => None,
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
        .get(h.broker.sessions.key_of("sub").expect("a session"))
        .unwrap();
    assert_eq!(session.inflight.len(), 1);
    h.puback(subscriber, packet_id);
    let session = h
        .broker
        .sessions
        .get(h.broker.sessions.key_of("sub").expect("a session"))
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
    let refusals = [
        ("a/b#", ReasonCode::TOPIC_FILTER_INVALID),
        ("a/b/c/d", ReasonCode::TOPIC_FILTER_INVALID),
        ("$share//t", ReasonCode::TOPIC_FILTER_INVALID),
        ("$SHARE/g/t", ReasonCode::TOPIC_FILTER_INVALID),
        ("$SYS/#", ReasonCode::NOT_AUTHORIZED),
    ];
    for (filter, code) in refusals {
        assert_eq!(
            h.subscribe(client, filter, qos(QoS::AtMostOnce), None),
            vec![code],
            "{filter}"
        );
    }
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
    assert!(h
        .broker
        .accept(h.now_ms, crate::core::Origin::default())
        .is_none());
    assert_eq!(h.broker.stats().connections_refused_busy, 1);
    h.broker.handle_connection_lost(a, h.now_ms, &mut h.out);
    assert!(
        h.broker
            .accept(h.now_ms, crate::core::Origin::default())
            .is_some(),
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
    open_for_15_s_then_timed_out(&mut h, conn, "15 s of silence is within 1.5 x 10 s");
}

#[test]
fn the_keepalive_counts_from_the_connect_not_from_the_accept() {
    let mut h = Harness::new(Settings {
        connect_timeout_ms: 10_000,
        ..Settings::default()
    });
    let conn = h.open();
    h.advance(8_000);
    let mut connect = connect_packet("late", ProtocolVersion::V5);
    connect.keep_alive_s = 10;
    h.packet(conn, Packet::Connect(Box::new(connect)));
    h.out.take(conn);
    open_for_15_s_then_timed_out(
        &mut h,
        conn,
        "15 s after the CONNECT (23 s after the accept) is within 1.5 x 10 s",
    );
}

/// A 10 s keep-alive: the connection is still open 15 s on (`why`), and
/// closed 100 ms later with Keep Alive timeout.
fn open_for_15_s_then_timed_out(h: &mut Harness, conn: Key, why: &str) {
    h.advance(15_000);
    assert!(h.broker.is_open(conn), "{why}");
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
            h.puback(subscriber, packet_id);
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
    h.puback(subscriber, packet_id);
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

fn retained(topic: &str, payload: &[u8]) -> Publish {
    Publish {
        retain: true,
        ..publish_packet(topic, QoS::AtLeastOnce, Some(1), payload)
    }
}

fn subscribe_with(
    h: &mut Harness,
    conn: Key,
    filter: &str,
    options: SubscriptionOptions,
) -> Vec<Packet> {
    h.subscribe(conn, filter, options, None);
    h.out.take(conn)
}

#[test]
fn retained_values_follow_the_suback_and_retain_handling_decides_when() {
    let mut h = Harness::new(Settings::default());
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(publisher, Packet::Publish(retained("home/a", b"on")));
    h.packet(publisher, Packet::Publish(retained("home/b", b"off")));
    h.packet(publisher, Packet::Publish(retained("home/b", b"")));
    h.out.take(publisher);

    let subscriber = h.connect("sub", ProtocolVersion::V5);
    // `subscribe` reads the SUBACK first: the retained value comes after it.
    let after = subscribe_with(&mut h, subscriber, "home/+", qos(QoS::AtLeastOnce));
    let values = publishes(&after);
    assert_eq!(values.len(), 1, "an empty payload deleted home/b");
    assert!(values[0].retain && values[0].payload == b"on");

    let send_if_new = SubscriptionOptions {
        retain_handling: RetainHandling::SendIfNew,
        ..qos(QoS::AtLeastOnce)
    };
    assert!(publishes(&subscribe_with(&mut h, subscriber, "home/+", send_if_new)).is_empty());
    assert_eq!(
        publishes(&subscribe_with(&mut h, subscriber, "home/#", send_if_new)).len(),
        1
    );
    let never = SubscriptionOptions {
        retain_handling: RetainHandling::DoNotSend,
        ..qos(QoS::AtLeastOnce)
    };
    assert!(publishes(&subscribe_with(&mut h, subscriber, "+/a", never)).is_empty());
}

#[test]
fn a_live_retained_publish_keeps_retain_only_for_retain_as_published() {
    let mut h = Harness::new(Settings::default());
    let plain = h.connect("plain", ProtocolVersion::V5);
    let rap = h.connect("rap", ProtocolVersion::V5);
    h.subscribe(plain, "t", qos(QoS::AtMostOnce), None);
    let options = SubscriptionOptions {
        retain_as_published: true,
        ..qos(QoS::AtMostOnce)
    };
    h.subscribe(rap, "t", options, None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(publisher, Packet::Publish(retained("t", b"v")));
    assert!(!publishes(&h.out.take(plain))[0].retain);
    assert!(publishes(&h.out.take(rap))[0].retain);
}

#[test]
fn a_full_retained_store_refuses_and_keeps_what_it_holds() {
    let settings = Settings {
        retained_max_bytes: 300,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(publisher, Packet::Publish(retained("a", &[1; 150])));
    assert_eq!(
        h.out.take(publisher),
        vec![Packet::Puback(PubAck {
            packet_id: 1,
            ..PubAck::default()
        })]
    );
    h.packet(publisher, Packet::Publish(retained("b", &[2; 150])));
    match h.out.take(publisher).as_slice() {
        [Packet::Puback(ack)] => assert_eq!(ack.reason_code, ReasonCode::QUOTA_EXCEEDED),
        other => panic!("expected PUBACK 0x97, got {other:?}"),
    }
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let values = subscribe_with(&mut h, subscriber, "#", qos(QoS::AtMostOnce));
    assert_eq!(publishes(&values).len(), 1);
    assert_eq!(publishes(&values)[0].payload, vec![1; 150]);
}

#[test]
fn a_retained_value_past_its_expiry_is_not_served() {
    let mut h = Harness::new(Settings::default());
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let mut publish = retained("t", b"v");
    publish.properties.message_expiry_interval_s = Some(10);
    h.packet(publisher, Packet::Publish(publish));
    h.advance(4_000);
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    let values = subscribe_with(&mut h, subscriber, "t", qos(QoS::AtMostOnce));
    assert_eq!(
        publishes(&values)[0].properties.message_expiry_interval_s,
        Some(6)
    );
    h.advance(6_000);
    let late = h.connect("late", ProtocolVersion::V5);
    assert!(publishes(&subscribe_with(&mut h, late, "t", qos(QoS::AtMostOnce))).is_empty());
}

#[test]
fn shared_groups_take_turns_and_never_get_retained_values() {
    let mut h = Harness::new(Settings::default());
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(publisher, Packet::Publish(retained("jobs/x", b"old")));
    h.out.take(publisher);
    let a = h.connect("a", ProtocolVersion::V5);
    let b = h.connect("b", ProtocolVersion::V5);
    assert!(publishes(&subscribe_with(
        &mut h,
        a,
        "$share/g/jobs/+",
        qos(QoS::AtMostOnce)
    ))
    .is_empty());
    assert!(publishes(&subscribe_with(
        &mut h,
        b,
        "$share/g/jobs/+",
        qos(QoS::AtMostOnce)
    ))
    .is_empty());
    for i in 0..4u8 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("jobs/x", QoS::AtMostOnce, None, &[i])),
        );
    }
    let to_a: Vec<u8> = publishes(&h.out.take(a))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    let to_b: Vec<u8> = publishes(&h.out.take(b))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(
        to_a.len() + to_b.len(),
        4,
        "each message to exactly one member"
    );
    assert_eq!(to_a.len(), 2, "members take turns");
}

#[test]
fn a_shared_group_skips_a_member_with_no_room_and_holds_what_none_can_take() {
    let mut h = Harness::new(Settings::default());
    let mut narrow = connect_packet("narrow", ProtocolVersion::V5);
    narrow.properties.receive_maximum = Some(1);
    let (a, _) = h.connect_with(narrow.clone());
    h.subscribe(a, "$share/g/t", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for i in 0..3u8 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("t", QoS::AtLeastOnce, Some(1), &[i])),
        );
    }
    let first = h.out.take(a);
    assert_eq!(
        publishes(&first).len(),
        1,
        "one in flight; the rest wait in the group"
    );
    let packet_id = publishes(&first)[0].packet_id.unwrap();
    h.puback(a, packet_id);
    let next = h.out.take(a);
    assert_eq!(
        publishes(&next)[0].payload,
        vec![1],
        "the backlog drains in order"
    );

    // A member that ends with a QoS 1 delivery unfinished gives it back.
    let mut other = connect_packet("other", ProtocolVersion::V5);
    other.properties.receive_maximum = Some(1);
    let (b, _) = h.connect_with(other);
    h.subscribe(b, "$share/g/t", qos(QoS::AtLeastOnce), None);
    let joined = h.out.take(b);
    assert_eq!(
        publishes(&joined)[0].payload,
        vec![2],
        "a joining member drains the backlog"
    );
    h.broker.handle_connection_lost(a, h.now_ms, &mut h.out);
    assert!(
        publishes(&h.out.take(b)).is_empty(),
        "b has no room until it answers"
    );
    let packet_id = publishes(&joined)[0].packet_id.unwrap();
    h.puback(b, packet_id);
    let redelivered: Vec<u8> = publishes(&h.out.take(b))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(
        redelivered,
        vec![1],
        "a's unfinished delivery went back to the group"
    );
}

#[test]
fn no_local_on_a_shared_subscription_is_a_protocol_error() {
    let mut h = Harness::new(Settings::default());
    let client = h.connect("c", ProtocolVersion::V5);
    let options = SubscriptionOptions {
        no_local: true,
        ..qos(QoS::AtMostOnce)
    };
    let subscribe = Subscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: vec![("$share/g/t".into(), options)],
    };
    h.packet(client, Packet::Subscribe(subscribe));
    assert_eq!(
        disconnect_code(&h.out.take(client)),
        Some(ReasonCode::PROTOCOL_ERROR)
    );
}

#[test]
fn saguin_properties_are_stripped_from_publishes_and_refused_on_subscribe() {
    let mut h = Harness::new(Settings::default());
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    h.subscribe(subscriber, "t", qos(QoS::AtMostOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let mut publish = publish_packet("t", QoS::AtMostOnce, None, b"x");
    publish.properties.user_properties = vec![
        ("saguin-offset".into(), "7".into()),
        ("saguin-id".into(), "mine".into()),
        ("app".into(), "kept".into()),
    ];
    h.packet(publisher, Packet::Publish(publish));
    let received = h.out.take(subscriber);
    assert_eq!(
        publishes(&received)[0].properties.user_properties,
        vec![
            ("saguin-id".to_string(), "mine".to_string()),
            ("app".to_string(), "kept".to_string())
        ]
    );

    let mut properties = Properties::default();
    properties
        .user_properties
        .push(("saguin-slice".into(), "1/2".into()));
    let subscribe = Subscribe {
        packet_id: 2,
        properties,
        filters: vec![
            ("a".into(), qos(QoS::AtMostOnce)),
            ("b".into(), qos(QoS::AtMostOnce)),
        ],
    };
    h.packet(subscriber, Packet::Subscribe(subscribe));
    match h.out.take(subscriber).as_slice() {
        [Packet::Suback(suback)] => assert_eq!(
            suback.reason_codes,
            vec![ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR; 2]
        ),
        other => panic!("expected a SUBACK, got {other:?}"),
    }

    let mut properties = Properties::default();
    properties
        .user_properties
        .push(("saguin-slice".into(), "1/2".into()));
    let unsubscribe = Unsubscribe {
        packet_id: 3,
        properties,
        filters: vec!["t".into()],
    };
    h.packet(subscriber, Packet::Unsubscribe(unsubscribe));
    match h.out.take(subscriber).as_slice() {
        [Packet::Unsuback(unsuback)] => {
            assert_eq!(
                unsuback.reason_codes,
                vec![ReasonCode::SUCCESS],
                "the unsubscribe still happens"
            );
            assert_eq!(unsuback.properties.user_properties[0].0, "saguin-unread");
        }
        other => panic!("expected an UNSUBACK, got {other:?}"),
    }
}

#[test]
fn unfinished_qos2_past_receive_maximum_is_disconnected() {
    let settings = Settings {
        receive_maximum: 2,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let (publisher, connack) = h.connect_with(connect_packet("pub", ProtocolVersion::V5));
    assert_eq!(connack.properties.receive_maximum, Some(2));
    for id in 1..=3u16 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("t", QoS::ExactlyOnce, Some(id), b"x")),
        );
    }
    assert_eq!(
        disconnect_code(&h.out.take(publisher)),
        Some(ReasonCode::RECEIVE_MAXIMUM_EXCEEDED)
    );
}

#[test]
fn unreleased_qos2_past_the_allowance_is_refused_on_pubrec_and_expires() {
    let settings = Settings {
        qos2_max_inflight_per_client: 1,
        qos2_expires_after_ms: 5_000,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::ExactlyOnce, Some(1), b"x")),
    );
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::ExactlyOnce, Some(2), b"y")),
    );
    let codes: Vec<ReasonCode> = acks(&h.out.take(publisher))
        .into_iter()
        .map(|(_, code)| code)
        .collect();
    assert_eq!(codes, vec![ReasonCode::SUCCESS, ReasonCode::QUOTA_EXCEEDED]);
    assert!(
        h.broker.is_open(publisher),
        "inside a bound, not misbehaving"
    );
    h.advance(5_100);
    h.packet(
        publisher,
        Packet::Pubrel(PubAck {
            packet_id: 1,
            ..PubAck::default()
        }),
    );
    match h.out.take(publisher).as_slice() {
        [Packet::Pubcomp(ack)] => {
            assert_eq!(ack.reason_code, ReasonCode::PACKET_IDENTIFIER_NOT_FOUND)
        }
        other => panic!("expected PUBCOMP 0x92, got {other:?}"),
    }
    assert_eq!(h.broker.stats().qos2_abandoned, 1);
}

#[test]
fn exactly_once_out_resumes_with_pubrel_and_dup() {
    let mut h = Harness::new(Settings::default());
    let mut connect = connect_packet("q2", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(60);
    let (subscriber, _) = h.connect_with(connect.clone());
    h.subscribe(subscriber, "t", qos(QoS::ExactlyOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for (id, payload) in [(1u16, b"a"), (2, b"b")] {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("t", QoS::ExactlyOnce, Some(id), payload)),
        );
        h.packet(
            publisher,
            Packet::Pubrel(PubAck {
                packet_id: id,
                ..PubAck::default()
            }),
        );
    }
    let received = h.out.take(subscriber);
    let ids: Vec<u16> = publishes(&received)
        .iter()
        .map(|p| p.packet_id.unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    // The first reaches PUBREC; the second is never answered.
    h.packet(
        subscriber,
        Packet::Pubrec(PubAck {
            packet_id: ids[0],
            ..PubAck::default()
        }),
    );
    assert_eq!(
        h.out.take(subscriber),
        vec![Packet::Pubrel(PubAck {
            packet_id: ids[0],
            ..PubAck::default()
        })]
    );
    h.broker
        .handle_connection_lost(subscriber, h.now_ms, &mut h.out);

    let (subscriber, connack) = h.connect_with(connect);
    assert!(connack.session_present);
    let resent = h.out.take(subscriber);
    assert_eq!(resent.len(), 2);
    assert_eq!(
        resent[0],
        Packet::Pubrel(PubAck {
            packet_id: ids[0],
            ..PubAck::default()
        })
    );
    match &resent[1] {
        Packet::Publish(p) => assert!(p.dup && p.packet_id == Some(ids[1]) && p.payload == b"b"),
        other => panic!("expected the PUBLISH again with DUP, got {other:?}"),
    }
    h.packet(
        subscriber,
        Packet::Pubcomp(PubAck {
            packet_id: ids[0],
            ..PubAck::default()
        }),
    );
    let session = h
        .broker
        .sessions
        .get(h.broker.sessions.key_of("q2").expect("a session"))
        .unwrap();
    assert_eq!(session.inflight.len(), 1);
}

#[test]
fn a_will_waits_out_its_delay_and_a_resumed_session_cancels_it() {
    let mut h = Harness::new(Settings::default());
    let watcher = h.connect("watcher", ProtocolVersion::V5);
    h.subscribe(watcher, "status", qos(QoS::AtMostOnce), None);
    let mut connect = connect_packet("device", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(100);
    let mut will = Will {
        topic: "status".into(),
        payload: b"gone".to_vec(),
        ..Will::default()
    };
    will.properties.will_delay_interval_s = Some(10);
    connect.will = Some(will);

    let (device, _) = h.connect_with(connect.clone());
    h.broker
        .handle_connection_lost(device, h.now_ms, &mut h.out);
    h.advance(5_000);
    let (device, _) = h.connect_with(connect.clone());
    h.advance(10_000);
    assert!(
        publishes(&h.out.take(watcher)).is_empty(),
        "resuming cancelled the waiting Will"
    );

    h.broker
        .handle_connection_lost(device, h.now_ms, &mut h.out);
    h.advance(9_900);
    assert!(publishes(&h.out.take(watcher)).is_empty());
    h.advance(200);
    assert_eq!(publishes(&h.out.take(watcher)).len(), 1);
}

#[test]
fn disconnect_with_will_publishes_it_and_a_retained_will_is_kept() {
    let mut h = Harness::new(Settings::default());
    let mut connect = connect_packet("device", ProtocolVersion::V5);
    connect.will = Some(Will {
        topic: "status".into(),
        payload: b"bye".to_vec(),
        retain: true,
        ..Will::default()
    });
    let (device, _) = h.connect_with(connect);
    let with_will = Disconnect {
        reason_code: ReasonCode::DISCONNECT_WITH_WILL,
        ..Disconnect::default()
    };
    h.packet(device, Packet::Disconnect(with_will));
    let later = h.connect("later", ProtocolVersion::V5);
    let values = subscribe_with(&mut h, later, "status", qos(QoS::AtMostOnce));
    assert_eq!(publishes(&values)[0].payload, b"bye");
}

#[test]
fn a_client_publish_may_not_carry_a_subscription_identifier() {
    let mut h = Harness::new(Settings::default());
    let client = h.connect("c", ProtocolVersion::V5);
    let mut publish = publish_packet("t", QoS::AtMostOnce, None, b"x");
    publish.properties.subscription_identifiers.push(3);
    h.packet(client, Packet::Publish(publish));
    assert_eq!(
        disconnect_code(&h.out.take(client)),
        Some(ReasonCode::PROTOCOL_ERROR)
    );
}

// ---- append channels ------------------------------------------------------

use crate::store::{self, Answer, Completion, MessageId, Outcome, Read, ReadBatch, Ticket, Write};

fn events_channel(start: ChannelStart) -> Settings {
    Settings {
        channels: vec![ChannelSettings {
            name: "events".into(),
            filters: vec!["events/#".into()],
            provider: 0,
            start,
            max_bytes: None,
            retention_period_s: None,
            retention_bytes: None,
            next: 0,
            floor: 0,
            written_filter: "events/#".into(),
            latest: None,
            queue: None,
        }],
        ..Settings::default()
    }
}

impl Harness {
    fn stored(&mut self) -> Vec<StoreRequest> {
        self.out
            .stored
            .drain(..)
            .map(|(_, request)| request)
            .collect()
    }

    fn complete(&mut self, ticket: u64, answer: Answer) {
        let completion = Completion {
            ticket: Ticket(ticket),
            answer,
        };
        self.broker
            .handle_store_completion(completion, self.now_ms, &mut self.out);
    }

    /// The positions queued to be stored, draining every request.
    fn stored_positions(&mut self) -> Vec<u64> {
        self.stored()
            .into_iter()
            .flat_map(|r| match r {
                StoreRequest::Commit { writes, .. } => writes,
                _ => vec![],
            })
            .filter_map(|w| {
                if let Write::SetPosition { offset, .. } = w {
                    Some(offset)
                } else {
                    None
                }
            })
            .collect()
    }

    /// Answers every queued append as stored, at rising offsets from `first`.
    fn commit_appends(&mut self, first: u64) -> Vec<store::Message> {
        let mut stored = Vec::new();
        let mut offset = first;
        for request in self.stored() {
            if let StoreRequest::Commit { ticket, writes } = request {
                if let [Write::Append { message, .. } | Write::Replace { message, .. }] =
                    writes.as_slice()
                {
                    stored.push(message.clone());
                    self.complete(
                        ticket,
                        Answer::Committed(Ok(vec![Outcome::Appended { offset }])),
                    );
                    offset += 1;
                }
            }
        }
        stored
    }
}

fn label<'a>(publish: &'a Publish, name: &str) -> Option<&'a str> {
    publish
        .properties
        .user_properties
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_channel_publish_is_acknowledged_only_once_stored_and_delivered_with_labels() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    h.subscribe(subscriber, "events/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet(
            "events/door",
            QoS::AtLeastOnce,
            Some(4),
            b"open",
        )),
    );
    assert!(
        h.out.take(publisher).is_empty(),
        "no PUBACK before the commit"
    );
    assert!(
        publishes(&h.out.take(subscriber)).is_empty(),
        "no delivery before the commit"
    );

    let stored = h.commit_appends(0);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].topic, "events/door");
    assert_eq!(stored[0].publisher.as_deref(), Some("pub"));
    assert_eq!(
        h.out.take(publisher),
        vec![Packet::Puback(PubAck {
            packet_id: 4,
            ..PubAck::default()
        })]
    );
    let received = h.out.take(subscriber);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 1);
    assert_eq!(label(delivered[0], "saguin-offset"), Some("0"));
    assert!(
        label(delivered[0], "saguin-id").is_some_and(|id| id.len() == 36),
        "a UUID"
    );
    assert!(label(delivered[0], "saguin-timestamp").is_some());
    assert!(!delivered[0].retain);
}

#[test]
fn pubacks_keep_arrival_order_across_stored_and_broadcast_publishes() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("events/a", QoS::AtLeastOnce, Some(1), b"x")),
    );
    h.packet(
        publisher,
        Packet::Publish(publish_packet("other", QoS::AtLeastOnce, Some(2), b"y")),
    );
    assert!(
        h.out.take(publisher).is_empty(),
        "the broadcast PUBACK waits behind the stored one"
    );
    h.commit_appends(0);
    let ids: Vec<u16> = acks(&h.out.take(publisher))
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, vec![1, 2]);
}

#[test]
fn a_full_channel_refuses_with_quota_exceeded_and_311_is_closed() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let v5 = h.connect("five", ProtocolVersion::V5);
    let v311 = h.connect("three", ProtocolVersion::V311);
    h.packet(
        v5,
        Packet::Publish(publish_packet("events/a", QoS::AtLeastOnce, Some(1), b"x")),
    );
    h.packet(
        v311,
        Packet::Publish(publish_packet("events/a", QoS::AtLeastOnce, Some(1), b"x")),
    );
    for request in h.stored() {
        if let StoreRequest::Commit { ticket, .. } = request {
            let refused = Outcome::Refused(store::Refusal::ChannelFull);
            h.complete(ticket, Answer::Committed(Ok(vec![refused])));
        }
    }
    match h.out.take(v5).as_slice() {
        [Packet::Puback(ack)] => assert_eq!(ack.reason_code, ReasonCode::QUOTA_EXCEEDED),
        other => panic!("expected PUBACK 0x97, got {other:?}"),
    }
    assert!(h.out.take(v311).is_empty());
    assert!(
        !h.broker.is_open(v311),
        "3.1.1 cannot be told: closed, never acknowledged"
    );
}

#[test]
fn a_storage_failure_is_answered_0x83() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("events/a", QoS::AtLeastOnce, Some(1), b"x")),
    );
    let ticket = match h.stored().as_slice() {
        [StoreRequest::Commit { ticket, .. }] => *ticket,
        other => panic!("expected one commit, got {other:?}"),
    };
    let error = store::StoreError::Invalid("disk gone".into());
    h.complete(ticket, Answer::Committed(Err(error)));
    match h.out.take(publisher).as_slice() {
        [Packet::Puback(ack)] => {
            assert_eq!(ack.reason_code, ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR)
        }
        other => panic!("expected PUBACK 0x83, got {other:?}"),
    }
}

/// A device with no room (`ENOSPC` before `max_bytes`) is answered as a
/// full provider, 0x97: room returns and the publisher may try again.
#[test]
fn a_full_device_is_answered_0x97() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("events/a", QoS::AtLeastOnce, Some(1), b"x")),
    );
    let ticket = match h.stored().as_slice() {
        [StoreRequest::Commit { ticket, .. }] => *ticket,
        other => panic!("expected one commit, got {other:?}"),
    };
    let error = store::StoreError::DeviceFull {
        path: "/data/saguin.redb".into(),
        action: "write the redb file",
    };
    h.complete(ticket, Answer::Committed(Err(error)));
    match h.out.take(publisher).as_slice() {
        [Packet::Puback(ack)] => assert_eq!(ack.reason_code, ReasonCode::QUOTA_EXCEEDED),
        other => panic!("expected PUBACK 0x97, got {other:?}"),
    }
}

fn stored_record(offset: u64, topic: &str, payload: &[u8]) -> store::Record {
    store::Record {
        offset,
        message: store::Message::new(
            MessageId::Text(format!("id-{offset}")),
            1,
            topic.into(),
            payload.to_vec(),
        ),
    }
}

#[test]
fn a_durable_consumer_resumes_from_its_stored_position_and_stores_it_as_it_acknowledges() {
    let (mut h, consumer) = durable_events_consumer();

    // The stored position is asked for, then the records from it.
    let ticket = match h.stored().as_slice() {
        [StoreRequest::Position {
            ticket,
            channel,
            reader,
        }] => {
            assert_eq!((channel.as_str(), reader.as_str()), ("events", "consumer"));
            *ticket
        }
        other => panic!("expected a position read, got {other:?}"),
    };
    h.complete(ticket, Answer::Position(Ok(Some(7))));
    let ticket = match h.stored().as_slice() {
        [StoreRequest::Read {
            ticket,
            from_offset: 7,
            ..
        }] => *ticket,
        other => panic!("expected a read from 7, got {other:?}"),
    };
    let records = (7..10)
        .map(|o| stored_record(o, "events/x", &[o as u8]))
        .collect();
    h.complete(
        ticket,
        Answer::Read(Ok(Read::Records(ReadBatch {
            floor: 0,
            next: 10,
            records,
        }))),
    );
    let received = h.out.take(consumer);
    let delivered = publishes(&received);
    let offsets: Vec<&str> = delivered
        .iter()
        .filter_map(|p| label(p, "saguin-offset"))
        .collect();
    assert_eq!(offsets, vec!["7", "8", "9"]);
    assert_eq!(label(delivered[0], "saguin-id"), Some("id-7"));

    // Acknowledging 7 and 8 moves the stored position to 9 at the next commit.
    for publish in &delivered[..2] {
        let packet_id = publish.packet_id.unwrap();
        h.puback(consumer, packet_id);
    }
    h.advance(300);
    let positions = h.stored_positions();
    assert_eq!(positions, vec![9]);
}

#[test]
fn a_reader_with_no_position_starts_where_the_channel_says() {
    for (start, expected_from) in [(ChannelStart::Floor, 3u64), (ChannelStart::Tail, 10)] {
        let mut settings = events_channel(start);
        settings.channels[0].next = 10;
        settings.channels[0].floor = 3;
        let mut h = Harness::new(settings);
        let consumer = h.connect("clean", ProtocolVersion::V5);
        h.subscribe(consumer, "events/#", qos(QoS::AtLeastOnce), None);
        let reads: Vec<u64> = h
            .stored()
            .into_iter()
            .filter_map(|r| {
                if let StoreRequest::Read { from_offset, .. } = r {
                    Some(from_offset)
                } else {
                    None
                }
            })
            .collect();
        match start {
            ChannelStart::Floor => assert_eq!(reads, vec![expected_from]),
            ChannelStart::Tail => assert!(reads.is_empty(), "nothing to read at the tail"),
        }
    }
}

#[test]
fn a_record_larger_than_the_subscribers_maximum_packet_size_disconnects_it() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let mut connect = connect_packet("small", ProtocolVersion::V5);
    connect.properties.maximum_packet_size = Some(64);
    let (subscriber, _) = h.connect_with(connect);
    h.subscribe(subscriber, "events/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("events/a", QoS::AtMostOnce, None, &[0; 200])),
    );
    h.commit_appends(0);
    assert_eq!(
        disconnect_code(&h.out.take(subscriber)),
        Some(ReasonCode::PACKET_TOO_LARGE)
    );
}

#[test]
fn a_filter_reaching_a_channel_and_broadcast_gets_both() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    h.subscribe(subscriber, "#", qos(QoS::AtMostOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("events/a", QoS::AtMostOnce, None, b"stored")),
    );
    h.packet(
        publisher,
        Packet::Publish(publish_packet("plain", QoS::AtMostOnce, None, b"broadcast")),
    );
    h.commit_appends(0);
    let received = h.out.take(subscriber);
    let mut payloads: Vec<&[u8]> = publishes(&received)
        .iter()
        .map(|p| p.payload.as_slice())
        .collect();
    payloads.sort();
    assert_eq!(payloads, vec![&b"broadcast"[..], &b"stored"[..]]);
}

#[test]
fn retention_by_age_runs_at_startup_and_then_at_a_tenth_of_the_period() {
    let mut settings = events_channel(ChannelStart::Floor);
    settings.channels[0].retention_period_s = Some(100);
    settings.channels[0].next = 5;
    settings.channels[0].floor = 1;
    let mut h = Harness::new(settings);
    let mut trims_at = Vec::new();
    for _ in 0..120 {
        h.advance(100);
        for request in h.stored() {
            if let StoreRequest::Commit { ticket, writes } = request {
                if let [Write::Trim {
                    rule: store::TrimRule::OlderThan { .. },
                    ..
                }] = writes.as_slice()
                {
                    trims_at.push(h.now_ms);
                    let trimmed = store::Trimmed {
                        removed_records: 0,
                        freed_bytes: 0,
                        floor: 1,
                        more: false,
                    };
                    h.complete(
                        ticket,
                        Answer::Committed(Ok(vec![Outcome::Trimmed(trimmed)])),
                    );
                }
            }
        }
    }
    // Started at 1,000 ms: the first tick, then every 10 s.
    assert_eq!(trims_at, vec![1_100, 11_100]);
}

#[test]
fn a_session_whose_position_retention_passed_is_told_session_present_0() {
    let mut settings = events_channel(ChannelStart::Floor);
    settings.channels[0].retention_bytes = Some(1);
    settings.channels[0].next = 10;
    settings.channels[0].floor = 1;
    let mut h = Harness::new(settings);
    let mut connect = connect_packet("lagging", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    let (consumer, _) = h.connect_with(connect.clone());
    // Subscribed, but reads nothing: its stored position is 1.
    h.subscribe(consumer, "events/#", qos(QoS::AtLeastOnce), None);
    for request in h.stored() {
        if let StoreRequest::Position { ticket, .. } = request {
            h.complete(ticket, Answer::Position(Ok(Some(1))));
        }
    }
    h.broker
        .handle_connection_lost(consumer, h.now_ms, &mut h.out);
    h.stored();
    // Retention moves the floor to 6 while it is away.
    h.advance(1_100);
    for request in h.stored() {
        if let StoreRequest::Commit { ticket, writes } = request {
            if writes.iter().any(|w| matches!(w, Write::Trim { .. })) {
                let trimmed = store::Trimmed {
                    removed_records: 5,
                    freed_bytes: 500,
                    floor: 6,
                    more: false,
                };
                h.complete(
                    ticket,
                    Answer::Committed(Ok(vec![Outcome::Trimmed(trimmed)])),
                );
            }
        }
    }
    let (_, connack) = h.connect_with(connect);
    assert!(!connack.session_present, "a gap is never served in silence");
    let dropped = h.stored().into_iter().any(|r| match r {
        StoreRequest::Commit { writes, .. } => writes
            .iter()
            .any(|w| matches!(w, Write::DropPosition { .. })),
        _ => false,
    });
    assert!(dropped, "the passed position is dropped");
}

#[test]
fn publishes_waiting_on_storage_are_bounded() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let megabyte = vec![0u8; 1024 * 1024];
    for id in 1..=12u16 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet(
                "events/big",
                QoS::AtLeastOnce,
                Some(id),
                &megabyte,
            )),
        );
    }
    // 16 MiB holds seven of them twice over; the rest are refused at once
    // rather than held while storage is behind. PUBACKs keep their order,
    // so the refusals wait behind the seven still pending.
    assert_eq!(h.out.stored.len(), 7);
    assert!(h.out.take(publisher).is_empty());
    h.commit_appends(1);
    let codes: Vec<u8> = acks(&h.out.take(publisher))
        .into_iter()
        .map(|(_, code)| code.0)
        .collect();
    assert_eq!(codes, [vec![0x00; 7], vec![0x83; 5]].concat());
}

#[test]
fn retain_handling_2_starts_a_durable_reader_at_the_head_and_stores_it() {
    let mut settings = events_channel(ChannelStart::Floor);
    settings.channels[0].next = 10;
    settings.channels[0].floor = 1;
    let mut h = Harness::new(settings);
    let mut connect = connect_packet("now-only", ProtocolVersion::V5);
    connect.properties.session_expiry_interval_s = Some(60);
    let (consumer, _) = h.connect_with(connect);
    let options = SubscriptionOptions {
        retain_handling: RetainHandling::DoNotSend,
        ..qos(QoS::AtLeastOnce)
    };
    h.subscribe(consumer, "events/#", options, None);
    for request in h.stored() {
        if let StoreRequest::Position { ticket, .. } = request {
            h.complete(ticket, Answer::Position(Ok(Some(3))));
        }
    }
    assert!(h.stored().is_empty(), "no backlog is read");
    h.advance(300);
    let positions = h.stored_positions();
    assert_eq!(
        positions,
        vec![10],
        "the head is stored, dropping the backlog"
    );
}

#[test]
fn a_channel_record_is_never_given_up_for_a_full_session_queue() {
    let mut settings = events_channel(ChannelStart::Tail);
    settings.session_queue_bytes = 4_000;
    let mut h = Harness::new(settings);
    let subscriber = h.connect("sub", ProtocolVersion::V5);
    h.subscribe(subscriber, "events/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    // The first leaves room under half the bound; the second does not fit
    // beside it in the whole bound, and must wait rather than vanish.
    h.packet(
        publisher,
        Packet::Publish(publish_packet(
            "events/a",
            QoS::AtLeastOnce,
            Some(1),
            &[1; 1_800],
        )),
    );
    h.packet(
        publisher,
        Packet::Publish(publish_packet(
            "events/a",
            QoS::AtLeastOnce,
            Some(2),
            &[2; 2_400],
        )),
    );
    h.commit_appends(0);
    let first = h.out.take(subscriber);
    let delivered = publishes(&first);
    assert_eq!(delivered.len(), 1);
    let packet_id = delivered[0].packet_id.unwrap();
    h.puback(subscriber, packet_id);
    let second = h.out.take(subscriber);
    assert_eq!(
        publishes(&second).len(),
        1,
        "the second record arrives once there is room"
    );
    assert_eq!(publishes(&second)[0].payload[0], 2);
}

#[test]
fn a_shared_group_over_a_channel_gets_each_new_record_once() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let a = h.connect("a", ProtocolVersion::V5);
    let b = h.connect("b", ProtocolVersion::V5);
    h.subscribe(a, "$share/workers/events/#", qos(QoS::AtMostOnce), None);
    h.subscribe(b, "$share/workers/events/#", qos(QoS::AtMostOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for i in 0..4u8 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet("events/x", QoS::AtMostOnce, None, &[i])),
        );
    }
    h.commit_appends(0);
    let to_a = h.out.take(a);
    let to_b = h.out.take(b);
    let (to_a, to_b) = (publishes(&to_a), publishes(&to_b));
    assert_eq!(
        (to_a.len(), to_b.len()),
        (2, 2),
        "each record to one member, in turn"
    );
    assert!(to_a
        .iter()
        .chain(&to_b)
        .all(|p| label(p, "saguin-offset").is_some()));
}

#[path = "channel/latest/broker_tests.rs"]
mod latest_tests;

/// Defect: a `start: tail` reader whose stored position could not be read
/// (storage busy, or the read failing) started at the tail, skipping the
/// backlog behind its real position in silence.
#[test]
fn a_position_that_cannot_be_read_is_asked_for_again_never_guessed() {
    let mut settings = events_channel(ChannelStart::Tail);
    settings.channels[0].next = 10;
    let mut h = Harness::new(settings);
    let mut connect = connect_packet("consumer", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    let (consumer, _) = h.connect_with(connect);
    h.out.storage_busy = true;
    h.subscribe(consumer, "events/#", qos(QoS::AtLeastOnce), None);
    h.out.storage_busy = false;
    h.advance(300);
    let position_read = |requests: Vec<StoreRequest>| {
        requests.into_iter().find_map(|r| match r {
            StoreRequest::Position { ticket, .. } => Some(ticket),
            _ => None,
        })
    };
    let ticket = position_read(h.stored()).expect("asked again once storage takes requests");
    let error = store::StoreError::Invalid("disk busy".into());
    h.complete(ticket, Answer::Position(Err(error)));
    assert!(h.stored().is_empty(), "no read from a guessed position");
    h.advance(300);
    let ticket = position_read(h.stored()).expect("asked again after the failure");
    h.complete(ticket, Answer::Position(Ok(Some(7))));
    let reads: Vec<u64> = h
        .stored()
        .into_iter()
        .filter_map(|r| match r {
            StoreRequest::Read { from_offset, .. } => Some(from_offset),
            _ => None,
        })
        .collect();
    assert_eq!(reads, vec![7], "the backlog from the stored position");
}

/// A durable session subscribed to `events` (next offset 10), its
/// position read not yet answered. What a new session drops under its
/// client id is taken and not looked at, as a restored session's would be.
fn durable_events_consumer() -> (Harness, Key) {
    durable_events_reader("consumer", false)
}

/// [`durable_events_consumer`] as `client_id`, on a bridge's in-process
/// connection when `bridge` says so.
fn durable_events_reader(client_id: &str, bridge: bool) -> (Harness, Key) {
    let mut settings = events_channel(ChannelStart::Floor);
    settings.channels[0].next = 10;
    let mut h = Harness::new(settings);
    let mut connect = connect_packet(client_id, ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    let consumer = if bridge {
        let conn = h.broker.accept_bridge(h.now_ms).expect("a free slot");
        h.packet(conn, Packet::Connect(Box::new(connect)));
        assert!(matches!(h.out.take(conn).as_slice(), [Packet::Connack(_)]));
        conn
    } else {
        h.connect_with(connect).0
    };
    h.stored();
    h.subscribe(consumer, "events/#", qos(QoS::AtLeastOnce), None);
    (h, consumer)
}

/// A durable consumer of `events` reading from stored position 7: records
/// 7 to 9 delivered and acknowledged, every request drained.
fn consumer_at_seven() -> (Harness, Key) {
    let (mut h, consumer) = acknowledged_to_ten(durable_events_consumer());
    h.advance(300);
    h.stored();
    (h, consumer)
}

/// The reader of [`durable_events_reader`], resumed at stored position 7,
/// has acknowledged records 7 to 9; no `ack_commit_interval` has passed.
fn acknowledged_to_ten((mut h, consumer): (Harness, Key)) -> (Harness, Key) {
    let ticket = match h.stored().as_slice() {
        [StoreRequest::Position { ticket, .. }] => *ticket,
        other => panic!("expected a position read, got {other:?}"),
    };
    h.complete(ticket, Answer::Position(Ok(Some(7))));
    let ticket = match h.stored().as_slice() {
        [StoreRequest::Read { ticket, .. }] => *ticket,
        other => panic!("expected a read, got {other:?}"),
    };
    let records = (7..10)
        .map(|o| stored_record(o, "events/x", &[o as u8]))
        .collect();
    let batch = ReadBatch {
        floor: 0,
        next: 10,
        records,
    };
    h.complete(ticket, Answer::Read(Ok(Read::Records(batch))));
    let received = h.out.take(consumer);
    for publish in publishes(&received) {
        h.puback(consumer, publish.packet_id.expect("QoS 1"));
    }
    (h, consumer)
}

fn seek_packet(payload: &str, packet_id: u16) -> Packet {
    let mut publish = publish_packet(
        "$saguin/consumer/events/seek",
        QoS::AtLeastOnce,
        Some(packet_id),
        payload.as_bytes(),
    );
    publish.properties.response_topic = Some("replies".into());
    Packet::Publish(publish)
}

/// The seek's own write, answered `answer`; returns what else was asked.
fn answer_seek_write(h: &mut Harness, answer: Answer) -> Vec<StoreRequest> {
    let (seek, rest): (Vec<_>, Vec<_>) = h.stored().into_iter().partition(|r| {
        matches!(r, StoreRequest::Commit { writes, .. }
            if matches!(writes.as_slice(), [Write::SetPosition { offset: 2, .. }]))
    });
    let [StoreRequest::Commit { ticket, .. }] = seek.as_slice() else {
        panic!("expected the seek's position write, got {seek:?}");
    };
    h.complete(*ticket, answer);
    rest
}

fn reads_from(requests: &[StoreRequest]) -> Vec<u64> {
    requests
        .iter()
        .filter_map(|r| match r {
            StoreRequest::Read { from_offset, .. } => Some(*from_offset),
            _ => None,
        })
        .collect()
}

/// Defect: a seek moved the reader before its position was stored, so a
/// refused write still moved it, records from the new place could precede
/// the reply, and the reader's own position written meanwhile could land
/// after the seek's.
#[test]
fn a_seek_moves_the_reader_only_once_its_position_is_stored() {
    let (mut h, consumer) = consumer_at_seven();
    h.packet(consumer, seek_packet("2", 21));
    // Before the write is answered: nothing read from 2, no position of
    // the reader's own written.
    h.advance(300);
    let meanwhile = answer_seek_write(
        &mut h,
        Answer::Committed(Err(store::StoreError::Invalid("disk full".into()))),
    );
    assert!(reads_from(&meanwhile).is_empty(), "{meanwhile:?}");
    assert!(
        !meanwhile
            .iter()
            .any(|r| matches!(r, StoreRequest::Commit { writes, .. }
            if writes.iter().any(|w| matches!(w, Write::SetPosition { .. })))),
        "no position written while the seek's is: {meanwhile:?}"
    );
    let answered = h.out.take(consumer);
    let reply = publishes(&answered);
    assert_eq!(reply.len(), 1);
    assert_eq!(reply[0].payload, b"storage");
    assert_eq!(acks(&answered), vec![(21, ReasonCode(0x83))]);
    // Refused: the reader stays where it was.
    h.advance(300);
    assert!(
        reads_from(&h.stored()).is_empty(),
        "a refused seek moves nothing"
    );

    // Stored: the reply first, then the records from the new place.
    h.packet(consumer, seek_packet("2", 22));
    let rest = answer_seek_write(&mut h, Answer::Committed(Ok(vec![Outcome::PositionSet])));
    assert!(reads_from(&rest).is_empty());
    let answered = h.out.take(consumer);
    assert_eq!(publishes(&answered)[0].payload, b"2");
    assert_eq!(reads_from(&h.stored()), vec![2]);
}

/// Defect: an `append` record whose publisher's Message Expiry had run
/// out was skipped; a channel keeps it readable, delivered without the
/// property (invariant 2).
#[test]
fn an_expired_append_record_is_still_delivered_without_its_expiry() {
    let mut h = Harness::new(events_channel(ChannelStart::Floor));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    let mut publish = publish_packet("events/a", QoS::AtLeastOnce, Some(1), b"late");
    publish.properties.message_expiry_interval_s = Some(1);
    h.packet(publisher, Packet::Publish(publish));
    h.commit_appends(0);
    h.advance(5_000);
    let consumer = h.connect("consumer", ProtocolVersion::V5);
    h.subscribe(consumer, "events/#", qos(QoS::AtLeastOnce), None);
    let received = h.out.take(consumer);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 1, "{received:?}");
    assert_eq!(delivered[0].payload, b"late");
    assert_eq!(delivered[0].properties.message_expiry_interval_s, None);
}

/// Defect: No Local was not applied on `append` channels, although the
/// record keeps its publisher.
#[test]
fn no_local_withholds_a_clients_own_append_records() {
    let mut h = Harness::new(events_channel(ChannelStart::Tail));
    let me = h.connect("me", ProtocolVersion::V5);
    let options = SubscriptionOptions {
        no_local: true,
        ..qos(QoS::AtLeastOnce)
    };
    h.subscribe(me, "events/#", options, None);
    h.packet(
        me,
        Packet::Publish(publish_packet(
            "events/a",
            QoS::AtLeastOnce,
            Some(1),
            b"mine",
        )),
    );
    h.commit_appends(0);
    let other = h.connect("other", ProtocolVersion::V5);
    h.packet(
        other,
        Packet::Publish(publish_packet(
            "events/a",
            QoS::AtLeastOnce,
            Some(1),
            b"theirs",
        )),
    );
    h.commit_appends(1);
    let received = h.out.take(me);
    let payloads: Vec<&[u8]> = publishes(&received)
        .iter()
        .map(|p| p.payload.as_slice())
        .collect();
    assert_eq!(payloads, vec![&b"theirs"[..]]);
}

/// Defect: `saguin-channel` was never sent, though a consumer whose filter
/// reaches two channels receives two offset sequences interleaved; and a
/// record stored without a receipt time said `saguin-timestamp: 0`.
#[test]
fn a_filter_reaching_two_channels_is_told_which_channel_each_record_is_in() {
    let mut settings = events_channel(ChannelStart::Tail);
    let mut logs = settings.channels[0].clone();
    logs.name = "logs".into();
    logs.filters = vec!["logs/#".into()];
    logs.written_filter = "logs/#".into();
    settings.channels.push(logs);
    let mut h = Harness::new(settings);
    let both = h.connect("both", ProtocolVersion::V5);
    h.subscribe(both, "+/a", qos(QoS::AtLeastOnce), None);
    let one = h.connect("one", ProtocolVersion::V5);
    h.subscribe(one, "events/#", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for topic in ["events/a", "logs/a"] {
        h.packet(
            publisher,
            Packet::Publish(publish_packet(topic, QoS::AtLeastOnce, Some(1), b"x")),
        );
        h.commit_appends(0);
    }
    let received = h.out.take(both);
    let named: Vec<(&str, Option<&str>)> = publishes(&received)
        .iter()
        .map(|p| (p.topic.as_str(), label(p, "saguin-channel")))
        .collect();
    assert_eq!(
        named,
        vec![("events/a", Some("events")), ("logs/a", Some("logs"))]
    );
    let received = h.out.take(one);
    let delivered = publishes(&received);
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        label(delivered[0], "saguin-channel"),
        None,
        "one channel: no cost"
    );
}

#[test]
fn a_record_without_a_receipt_time_carries_no_timestamp() {
    let message = crate::core::message::labelled(
        crate::core::message::from_stored(&store::Message::new(
            MessageId::Text("m".into()),
            0,
            "events/a".into(),
            b"x".to_vec(),
        )),
        &MessageId::Text("m".into()),
        1,
    );
    let names: Vec<&str> = message
        .properties
        .user_properties
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, vec!["saguin-id", "saguin-offset"]);
}

/// Defect: a QoS 2 delivery a shared group had handed a member, still
/// waiting in the member's queue (never sent), was dropped when the member
/// ended instead of going back to the group. One that was sent is not
/// given to another member: the first may have it.
#[test]
fn a_shared_members_unsent_qos2_delivery_goes_back_to_the_group() {
    // Room on the wire for one 1 KiB message, not two.
    let mut h = Harness::new(Settings {
        session_queue_bytes: 3_000,
        ..Settings::default()
    });
    let a = h.connect("a", ProtocolVersion::V5);
    h.subscribe(a, "$share/g/t", qos(QoS::ExactlyOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for i in 0..2u8 {
        let packet_id = u16::from(i) + 1;
        h.packet(
            publisher,
            Packet::Publish(publish_packet(
                "t",
                QoS::ExactlyOnce,
                Some(packet_id),
                &[i; 1000],
            )),
        );
        h.packet(
            publisher,
            Packet::Pubrel(PubAck {
                packet_id,
                ..PubAck::default()
            }),
        );
    }
    let sent_to_a: Vec<u8> = publishes(&h.out.take(a))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(sent_to_a, vec![0], "the second waits in a's queue");
    let b = h.connect("b", ProtocolVersion::V5);
    h.subscribe(b, "$share/g/t", qos(QoS::ExactlyOnce), None);
    h.out.take(b);
    h.broker.handle_connection_lost(a, h.now_ms, &mut h.out);
    let to_b: Vec<u8> = publishes(&h.out.take(b))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(
        to_b,
        vec![1],
        "the unsent one goes to b; the sent one does not"
    );
}

/// Defect: a shared-group member a message was too large for was handed
/// it anyway, and the message was dropped; it is passed over instead.
#[test]
fn a_shared_member_a_message_is_too_large_for_is_passed_over() {
    let mut h = Harness::new(Settings::default());
    let mut small = connect_packet("small", ProtocolVersion::V5);
    small.properties.maximum_packet_size = Some(64);
    let (a, _) = h.connect_with(small);
    h.subscribe(a, "$share/g/t", qos(QoS::AtLeastOnce), None);
    let b = h.connect("big", ProtocolVersion::V5);
    h.subscribe(b, "$share/g/t", qos(QoS::AtLeastOnce), None);
    let publisher = h.connect("pub", ProtocolVersion::V5);
    for i in 0..2u8 {
        h.packet(
            publisher,
            Packet::Publish(publish_packet(
                "t",
                QoS::AtLeastOnce,
                Some(u16::from(i) + 1),
                &[i; 200],
            )),
        );
    }
    let to_a = h.out.take(a);
    assert!(publishes(&to_a).is_empty(), "{to_a:?}");
    assert!(disconnect_code(&to_a).is_none(), "not disconnected");
    assert!(!h.out.closed.contains(&a));
    let to_b: Vec<u8> = publishes(&h.out.take(b))
        .iter()
        .map(|p| p.payload[0])
        .collect();
    assert_eq!(to_b, vec![0, 1], "every message reaches the member it fits");
}

#[path = "broker/authorize_tests.rs"]
pub(crate) mod authorize_tests;

/// A client certificate's name holding a control character names nobody:
/// its CONNECT is refused as a bad user name, and the connection closed.
#[test]
fn a_certificate_name_with_a_control_character_is_refused() {
    for name in ["dev\u{1b}[2Jice", "dev\0ice", "dev\u{85}ice"] {
        let mut h = Harness::new(Settings::default());
        let conn = h.open();
        h.broker.certified(conn, name.into());
        h.packet(
            conn,
            Packet::Connect(Box::new(connect_packet("device", ProtocolVersion::V5))),
        );
        match h.out.take(conn).first() {
            Some(Packet::Connack(connack)) => {
                assert_eq!(connack.reason_code, ReasonCode::BAD_USER_NAME_OR_PASSWORD)
            }
            other => panic!("expected a CONNACK, got {other:?}"),
        }
        assert!(h.out.closed.contains(&conn));
    }
    let mut h = Harness::new(Settings::default());
    let conn = h.open();
    h.broker.certified(conn, "device 7".into());
    h.packet(
        conn,
        Packet::Connect(Box::new(connect_packet("device", ProtocolVersion::V5))),
    );
    assert!(h.broker.version(conn).is_some(), "a plain name is admitted");
}

// ---- who may connect ------------------------------------------------------

/// Door 0 admits bob ("hunter2") and nobody else; door 1 admits anybody.
fn with_password_door(h: &mut Harness, test: &str) {
    use crate::auth::{Authentication, DoorRule};
    let dir = std::env::temp_dir().join(format!("saguin-core-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("clients.passwd");
    std::fs::write(&file, "bob:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==\n").unwrap();
    let rules = [
        DoorRule {
            door: "fleet".into(),
            password_file: Some(file),
            allow_anonymous: false,
            trusts_unchecked_names: false,
        },
        DoorRule {
            door: "local".into(),
            password_file: None,
            allow_anonymous: true,
            trusts_unchecked_names: false,
        },
    ];
    let authentication = Authentication::load(&rules).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    h.broker
        .set_authentication(std::sync::Arc::new(authentication));
}

impl Harness {
    fn connect_on_door(&mut self, door: usize, connect: Connect) -> (Key, ReasonCode) {
        let conn = self
            .broker
            .accept(
                self.now_ms,
                Origin {
                    door,
                    ..Origin::default()
                },
            )
            .expect("a free slot");
        self.packet(conn, Packet::Connect(Box::new(connect)));
        match self.out.take(conn).first() {
            Some(Packet::Connack(connack)) => (conn, connack.reason_code),
            other => panic!("expected a CONNACK, got {other:?}"),
        }
    }
}

fn credentials(client_id: &str, user: Option<&str>, password: Option<&str>) -> Connect {
    Connect {
        username: user.map(str::to_string),
        password: password.map(|p| p.as_bytes().to_vec()),
        ..connect_packet(client_id, ProtocolVersion::V5)
    }
}

#[test]
fn a_door_admits_by_its_own_rule_and_records_the_user() {
    let mut h = Harness::new(Settings::default());
    with_password_door(&mut h, "doors");
    let (bob, code) = h.connect_on_door(0, credentials("b", Some("bob"), Some("hunter2")));
    assert_eq!(code, ReasonCode::SUCCESS);
    assert_eq!(h.broker.user_name(bob), Some("bob"));
    let refused = [
        credentials("w", Some("bob"), Some("hunter3")),
        credentials("n", Some("bob"), None),
        credentials("u", Some("eve"), Some("hunter2")),
        credentials("a", None, None),
    ];
    for connect in refused {
        let (conn, code) = h.connect_on_door(0, connect);
        assert_eq!(code, ReasonCode::BAD_USER_NAME_OR_PASSWORD);
        assert!(h.out.closed.contains(&conn));
    }
    let (anonymous, code) = h.connect_on_door(1, credentials("x", None, None));
    assert_eq!(code, ReasonCode::SUCCESS);
    assert_eq!(h.broker.user_name(anonymous), None);
    assert_eq!(h.broker.connection_count(), 2);
}

#[test]
fn a_refused_connect_takes_over_no_session_and_fires_no_will() {
    let mut h = Harness::new(Settings::default());
    with_password_door(&mut h, "takeover");
    let (watcher, _) = h.connect_on_door(1, credentials("watcher", None, None));
    h.subscribe(watcher, "status/#", qos(QoS::AtMostOnce), None);
    let mut device = credentials("device", Some("bob"), Some("hunter2"));
    device.will = Some(Will {
        topic: "status/device".into(),
        payload: b"offline".to_vec(),
        ..Will::default()
    });
    let (first, code) = h.connect_on_door(0, device.clone());
    assert_eq!(code, ReasonCode::SUCCESS);
    device.password = Some(b"guess".to_vec());
    let (_, code) = h.connect_on_door(0, device);
    assert_eq!(code, ReasonCode::BAD_USER_NAME_OR_PASSWORD);
    assert!(h.broker.is_open(first), "the holder of the client id stays");
    assert!(h.out.take(first).is_empty(), "told nothing");
    assert!(publishes(&h.out.take(watcher)).is_empty(), "no Will");
    assert_eq!(h.broker.session_count(), 2);
}

#[test]
fn a_new_credential_table_leaves_connected_clients_be() {
    let mut h = Harness::new(Settings::default());
    with_password_door(&mut h, "swap");
    let (bob, _) = h.connect_on_door(0, credentials("b", Some("bob"), Some("hunter2")));
    // A table naming nobody on door 0 (as if bob had been deleted).
    h.broker.set_authentication(std::sync::Arc::new(
        crate::auth::Authentication::load(&[crate::auth::DoorRule {
            door: "fleet".into(),
            password_file: None,
            allow_anonymous: true,
            trusts_unchecked_names: false,
        }])
        .unwrap(),
    ));
    assert!(h.broker.is_open(bob));
    assert!(h.out.take(bob).is_empty());
    let (_, code) = h.connect_on_door(0, credentials("c", None, None));
    assert_eq!(code, ReasonCode::SUCCESS, "the new table is in force");
}

#[test]
fn a_certified_client_is_admitted_under_its_name_without_a_password() {
    let mut h = Harness::new(Settings::default());
    with_password_door(&mut h, "certified");
    let conn = h.broker.accept(h.now_ms, Origin::default()).unwrap();
    h.broker.certified(conn, "device-7".into());
    // A CONNECT naming another user and no password, on the password door.
    h.packet(
        conn,
        Packet::Connect(Box::new(credentials("d", Some("bob"), None))),
    );
    match h.out.take(conn).first() {
        Some(Packet::Connack(connack)) => assert_eq!(connack.reason_code, ReasonCode::SUCCESS),
        other => panic!("expected a CONNACK, got {other:?}"),
    }
    assert_eq!(h.broker.user_name(conn), Some("device-7"));
    // Without a certificate the same CONNECT meets the password file.
    let (_, code) = h.connect_on_door(0, credentials("e", Some("bob"), None));
    assert_eq!(code, ReasonCode::BAD_USER_NAME_OR_PASSWORD);
}

/// The `DropPosition` commits queued, by ticket, draining every request.
fn position_drops(h: &mut Harness) -> Vec<u64> {
    h.stored()
        .into_iter()
        .filter_map(|r| match r {
            StoreRequest::Commit { ticket, writes }
                if writes
                    .iter()
                    .any(|w| matches!(w, Write::DropPosition { .. })) =>
            {
                Some(ticket)
            }
            _ => None,
        })
        .collect()
}

/// A durable consumer of `events` with a one-second session, reading from
/// 7 and acknowledging 7 to 9, then ending its connection cleanly.
fn consumer_gone_with_positions_stored() -> Harness {
    let mut settings = events_channel(ChannelStart::Floor);
    settings.channels[0].next = 10;
    let mut h = Harness::new(settings);
    let mut connect = connect_packet("consumer", ProtocolVersion::V5);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(1);
    let (consumer, _) = h.connect_with(connect);
    h.stored();
    h.subscribe(consumer, "events/#", qos(QoS::AtLeastOnce), None);
    h.stored();
    h.packet(consumer, Packet::Disconnect(Default::default()));
    for request in h.stored() {
        if let StoreRequest::Commit { ticket, .. } = request {
            h.complete(ticket, Answer::Committed(Ok(vec![Outcome::PositionSet])));
        }
    }
    h
}

/// Defect: a clean DISCONNECT closed the connection before the session's
/// channel positions were stored, so a crash just after the close could
/// serve acknowledged records again.
#[test]
fn a_clean_disconnect_closes_only_once_the_positions_are_stored() {
    let (mut h, consumer) = acknowledged_to_ten(durable_events_consumer());
    h.packet(consumer, Packet::Disconnect(Default::default()));
    assert!(
        !h.out.closed.contains(&consumer),
        "the close waits for the positions"
    );
    let requests = h.stored();
    let ticket = match requests.as_slice() {
        [StoreRequest::Commit { ticket, writes }]
            if matches!(writes.as_slice(), [Write::SetPosition { offset: 10, .. }]) =>
        {
            *ticket
        }
        other => panic!("expected the position write, got {other:?}"),
    };
    h.complete(ticket, Answer::Committed(Ok(vec![Outcome::PositionSet])));
    assert!(h.out.closed.contains(&consumer), "closed once stored");
}

/// Defect: a stored position dropped as its session ended was tried once;
/// a failed drop left the position to outlive the session.
#[test]
fn a_failed_position_drop_is_written_again_until_it_lands() {
    let mut h = consumer_gone_with_positions_stored();
    h.advance(1_100);
    let drops = position_drops(&mut h);
    assert_eq!(drops.len(), 1, "the ended session's position is dropped");
    h.complete(drops[0], Answer::Committed(Err(store::StoreError::Stopped)));
    h.advance(300);
    let again = position_drops(&mut h);
    assert_eq!(again.len(), 1, "written again at the next interval");
    h.complete(again[0], Answer::Committed(Ok(vec![])));
    h.advance(300);
    assert!(
        position_drops(&mut h).is_empty(),
        "landed: not written again"
    );
}

/// A drop retried late never takes away a newer session's position.
#[test]
fn a_retried_position_drop_never_overwrites_a_newer_sessions_position() {
    let mut h = consumer_gone_with_positions_stored();
    h.advance(1_100);
    let drops = position_drops(&mut h);
    h.complete(drops[0], Answer::Committed(Err(store::StoreError::Stopped)));
    // Before the next interval, the client id comes back as a new
    // durable session, which drops what is stored under it as it begins.
    let mut connect = connect_packet("consumer", ProtocolVersion::V5);
    connect.properties.session_expiry_interval_s = Some(3600);
    h.connect_with(connect);
    for ticket in position_drops(&mut h) {
        h.complete(ticket, Answer::Committed(Ok(vec![])));
    }
    h.advance(300);
    assert!(
        position_drops(&mut h).is_empty(),
        "the older session's drop is not written over the newer session's position"
    );
}

/// Defect: sessions outliving their connections were bounded by nothing.
/// Within the bound on session memory a session is kept; past it one is
/// given a session that ends with its connection (Session Expiry Interval
/// 0), a Will finds no room and is refused 0x97, and a SUBSCRIBE is
/// refused 0x97 for every filter it would add.
#[test]
fn sessions_outliving_their_connections_are_bounded_by_session_memory() {
    let settings = Settings {
        // Two sessions of a one-letter client id and no filter: 2 x 3,501.
        session_memory_max_bytes: 7_500,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let durable = |client_id: &str| {
        let mut connect = connect_packet(client_id, ProtocolVersion::V5);
        connect.properties.session_expiry_interval_s = Some(60);
        connect
    };
    for client_id in ["a", "b"] {
        let (_, connack) = h.connect_with(durable(client_id));
        assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
        assert_eq!(connack.properties.session_expiry_interval_s, None);
    }
    let (_, connack) = h.connect_with(durable("c"));
    assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
    assert_eq!(
        connack.properties.session_expiry_interval_s,
        Some(0),
        "told its session ends with its connection"
    );
    assert_eq!(h.broker.stats().sessions_dropped_storage_full, 1);

    let mut with_will = durable("d");
    with_will.will = Some(Will {
        topic: "wills/d".into(),
        payload: b"gone".to_vec(),
        qos: QoS::AtMostOnce,
        retain: false,
        properties: Properties::default(),
    });
    let (_, connack) = h.connect_with(with_will);
    assert_eq!(connack.reason_code, ReasonCode::QUOTA_EXCEEDED);

    let a = h.connect("a", ProtocolVersion::V5);
    assert_eq!(
        h.subscribe(a, "x", qos(QoS::AtLeastOnce), None),
        vec![ReasonCode::QUOTA_EXCEEDED]
    );
}

/// Defect: the number of sessions kept past their connections had no
/// bound of its own, and each away session holds a queue the session
/// charge does not count. Past `max_persistent_sessions` a new one is
/// granted Session Expiry Interval 0 (3.1.1: made clean), counted; one
/// kept already resumes, and room comes back as a kept session ends.
#[test]
fn sessions_kept_past_their_connections_are_bounded_in_number() {
    let settings = Settings {
        max_persistent_sessions: 2,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let durable = |client_id: &str| {
        let mut connect = connect_packet(client_id, ProtocolVersion::V5);
        connect.clean_start = false;
        connect.properties.session_expiry_interval_s = Some(60);
        connect
    };
    let mut kept = Vec::new();
    for client_id in ["a", "b"] {
        let (conn, connack) = h.connect_with(durable(client_id));
        assert_eq!(connack.properties.session_expiry_interval_s, None);
        kept.push(conn);
    }
    let (_, connack) = h.connect_with(durable("c"));
    assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
    assert_eq!(
        connack.properties.session_expiry_interval_s,
        Some(0),
        "told its session ends with its connection"
    );
    assert_eq!(h.broker.stats().sessions_dropped_persistent_full, 1);

    let mut classic = connect_packet("d", ProtocolVersion::V311);
    classic.clean_start = false;
    let (d, connack) = h.connect_with(classic.clone());
    assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
    h.packet(d, Packet::Disconnect(Default::default()));
    let (_, connack) = h.connect_with(classic);
    assert!(
        !connack.session_present,
        "a 3.1.1 session past the bound is made clean"
    );
    assert_eq!(h.broker.stats().sessions_dropped_persistent_full, 3);

    // A kept session comes back as it was, the bound full.
    h.packet(kept[0], Packet::Disconnect(Default::default()));
    let (a, connack) = h.connect_with(durable("a"));
    assert!(connack.session_present);
    assert_eq!(connack.properties.session_expiry_interval_s, None);
    assert_eq!(h.broker.stats().sessions_dropped_persistent_full, 3);

    // Ended, it gives its room to the next.
    let mut ends = Disconnect::default();
    ends.properties.session_expiry_interval_s = Some(0);
    h.packet(a, Packet::Disconnect(ends));
    let (_, connack) = h.connect_with(durable("e"));
    assert_eq!(connack.properties.session_expiry_interval_s, None);
    assert_eq!(h.broker.stats().sessions_dropped_persistent_full, 3);
}

/// Defect: shared groups had no bound of their own, and each may hold a
/// backlog of `session_queue_bytes`. Past `max_shared_groups` a filter
/// making a new group is refused 0x97; joining a group held is not.
#[test]
fn shared_groups_are_bounded_in_number() {
    let settings = Settings {
        max_shared_groups: 1,
        ..Settings::default()
    };
    let mut h = Harness::new(settings);
    let a = h.connect("a", ProtocolVersion::V5);
    let b = h.connect("b", ProtocolVersion::V5);
    let q1 = qos(QoS::AtLeastOnce);
    assert_eq!(
        h.subscribe(a, "$share/g/x", q1, None),
        vec![ReasonCode::GRANTED_QOS_1]
    );
    assert_eq!(
        h.subscribe(b, "$share/g/x", q1, None),
        vec![ReasonCode::GRANTED_QOS_1]
    );
    assert_eq!(
        h.subscribe(b, "$share/h/x", q1, None),
        vec![ReasonCode::QUOTA_EXCEEDED]
    );
}

/// What a session is charged follows its filters, and leaves with it.
#[test]
fn a_sessions_charge_follows_its_filters_and_leaves_with_it() {
    let mut h = Harness::new(Settings::default());
    let conn = h.connect("a", ProtocolVersion::V5);
    assert_eq!(h.broker.sessions.charged_bytes(), 3_501);
    h.subscribe(conn, "x/y", qos(QoS::AtLeastOnce), None);
    assert_eq!(h.broker.sessions.charged_bytes(), 3_501 + 800 + 600 + 3);
    h.packet(
        conn,
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 8,
            properties: Properties::default(),
            filters: vec!["x/y".into()],
        }),
    );
    assert_eq!(h.broker.sessions.charged_bytes(), 3_501);
    h.packet(conn, Packet::Disconnect(Default::default()));
    assert_eq!(h.broker.sessions.charged_bytes(), 0);
}

/// A bridge rule's reader stores what its peer took when the link goes,
/// not at the next `ack_commit_interval`: a SIGKILL inside the interval
/// would otherwise send the peer again what it already holds.
#[test]
fn a_bridge_readers_moved_position_is_stored_at_once_when_its_link_goes() {
    let bridge = durable_events_reader("saguin-bridge/up/0123456789abcdef", true);
    let (mut h, reader) = acknowledged_to_ten(bridge);
    let is_position = |r: &StoreRequest| {
        matches!(r, StoreRequest::Commit { writes, .. }
            if writes.iter().any(|w| matches!(w, Write::SetPosition { .. })))
    };
    assert!(
        !h.stored().iter().any(is_position),
        "no interval has passed"
    );
    h.broker.store_bridge_positions(reader, &mut h.out);
    match h.stored().as_slice() {
        [StoreRequest::Commit { writes, .. }]
            if matches!(writes.as_slice(), [Write::SetPosition { offset: 10, .. }]) => {}
        other => panic!("expected the position write, got {other:?}"),
    }
    // An ordinary consumer's positions keep to the interval.
    let (mut h, consumer) = acknowledged_to_ten(durable_events_consumer());
    h.stored();
    h.broker.store_bridge_positions(consumer, &mut h.out);
    assert!(!h.stored().iter().any(is_position));
}

mod conformance;
mod counted;

#[test]
fn an_idle_session_carries_no_traffic_until_a_delivery() {
    let mut h = Harness::new(Settings::default());
    h.connect("idle", ProtocolVersion::V311);
    let sub = h.connect("sub", ProtocolVersion::V5);
    h.subscribe(sub, "t", qos(QoS::AtLeastOnce), None);
    let has_traffic = |h: &Harness, id: &str| {
        let key = h.broker.sessions.key_of(id).expect("a session");
        h.broker.sessions.get(key).expect("held").has_traffic()
    };
    h.advance(1_000);
    assert!(!has_traffic(&h, "idle"));
    assert!(!has_traffic(&h, "sub"));
    let publisher = h.connect("pub", ProtocolVersion::V5);
    h.packet(
        publisher,
        Packet::Publish(publish_packet("t", QoS::AtLeastOnce, Some(1), b"x")),
    );
    assert_eq!(publishes(&h.out.take(sub)).len(), 1);
    assert!(has_traffic(&h, "sub"));
    assert!(!has_traffic(&h, "idle"));
}
