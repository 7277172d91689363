//! Authorization in the core, deterministically: grants replaced under
//! live sessions, and a feature taken away as MQTT says it.

use super::*;
use crate::acl::{Acl, Entry, Features, Role, Rule, Subject, Verbs};

/// `reader` may read and write `news/#`; `quiet` may too, without QoS 2.
pub(crate) fn acl(reader_reads: bool) -> Acl {
    let topic_rule = |verbs| Rule {
        subject: Subject::Topic,
        written_filter: Some("news/#".into()),
        filters: vec!["news/#".into()],
        verbs,
        denies: Features::NONE,
    };
    let reader_verbs = match reader_reads {
        true => Verbs::WRITE.with(Verbs::READ),
        false => Verbs::WRITE,
    };
    let no_qos2 = Rule {
        subject: Subject::Features,
        written_filter: None,
        filters: Vec::new(),
        verbs: Verbs::NONE,
        denies: Features::QOS2,
    };
    let entry = |pattern: &str, role| Entry {
        pattern: pattern.into(),
        roles: vec![role],
        client_ids: None,
        limits: None,
    };
    Acl {
        source: "test".into(),
        roles: vec![
            Role {
                name: "reader".into(),
                rules: vec![topic_rule(reader_verbs)],
            },
            Role {
                name: "quiet".into(),
                rules: vec![topic_rule(Verbs::WRITE.with(Verbs::READ)), no_qos2],
            },
        ],
        entries: vec![entry("reader", 0), entry("quiet", 1)],
    }
}

fn connect_as(h: &mut Harness, user: &str, client_id: &str) -> (Key, Connack) {
    let mut connect = connect_packet(client_id, ProtocolVersion::V5);
    connect.username = Some(user.into());
    h.connect_with(connect)
}

fn delivered_payloads(h: &mut Harness, conn: Key) -> Vec<Vec<u8>> {
    h.out
        .take(conn)
        .into_iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.payload),
            _ => None,
        })
        .collect()
}

#[test]
fn a_replaced_file_stops_and_restarts_delivery_at_once() {
    let mut h = Harness::new(Settings::default());
    h.broker.set_acl(Some(acl(true)), h.now_ms, &mut h.out);
    let (reader, _) = connect_as(&mut h, "reader", "r1");
    assert_eq!(
        h.subscribe(reader, "news/#", qos(QoS::AtMostOnce), None),
        [ReasonCode::GRANTED_QOS_0]
    );
    let (writer, _) = connect_as(&mut h, "reader", "w1");
    let publish = |h: &mut Harness, payload: &[u8]| {
        h.packet(
            writer,
            Packet::Publish(publish_packet("news/a", QoS::AtMostOnce, None, payload)),
        );
    };
    publish(&mut h, b"1");
    assert_eq!(delivered_payloads(&mut h, reader), [b"1".to_vec()]);
    h.broker.set_acl(Some(acl(false)), h.now_ms, &mut h.out);
    publish(&mut h, b"2");
    assert!(delivered_payloads(&mut h, reader).is_empty());
    h.broker.set_acl(Some(acl(true)), h.now_ms, &mut h.out);
    publish(&mut h, b"3");
    assert_eq!(delivered_payloads(&mut h, reader), [b"3".to_vec()]);
    // Without a file, everything is allowed again.
    h.broker.set_acl(None, h.now_ms, &mut h.out);
    publish(&mut h, b"4");
    assert_eq!(delivered_payloads(&mut h, reader), [b"4".to_vec()]);
}

#[test]
fn qos2_taken_away_is_maximum_qos_1_and_a_qos2_subscription_granted_1() {
    let mut h = Harness::new(Settings::default());
    h.broker.set_acl(Some(acl(true)), h.now_ms, &mut h.out);
    let (quiet, connack) = connect_as(&mut h, "quiet", "q1");
    assert_eq!(connack.properties.maximum_qos, Some(1));
    assert_eq!(
        h.subscribe(quiet, "news/#", qos(QoS::ExactlyOnce), None),
        [ReasonCode::GRANTED_QOS_1]
    );
    let (_, connack) = connect_as(&mut h, "reader", "r1");
    assert_eq!(connack.properties.maximum_qos, None);
    // A name no entry matches connects and is granted nothing.
    let (stranger, connack) = connect_as(&mut h, "stranger", "s1");
    assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
    assert_eq!(
        h.subscribe(stranger, "news/#", qos(QoS::AtMostOnce), None),
        [ReasonCode::NOT_AUTHORIZED]
    );
}

#[test]
fn an_entry_s_limits_replace_the_broker_wide_ones() {
    let mut file = acl(true);
    file.entries[0].limits = Some(crate::acl::Limits {
        publish_rate_per_s: Some(1),
        publish_bytes_per_s: None,
    });
    let mut h = Harness::new(Settings::default());
    h.broker.set_acl(Some(file), h.now_ms, &mut h.out);
    let (reader, _) = connect_as(&mut h, "reader", "r1");
    let (quiet, _) = connect_as(&mut h, "quiet", "q1");
    let answer = |h: &mut Harness, conn: Key, packet_id: u16| {
        let publish = publish_packet("news/a", QoS::AtLeastOnce, Some(packet_id), b"x");
        h.packet(conn, Packet::Publish(publish));
        match h.out.take(conn).as_slice() {
            [Packet::Puback(ack)] => ack.reason_code,
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    };
    assert_eq!(answer(&mut h, reader, 1), ReasonCode::SUCCESS);
    assert_eq!(answer(&mut h, reader, 2), ReasonCode::QUOTA_EXCEEDED);
    // The broker-wide bound is none: the other entry is not held.
    for packet_id in 1..=5 {
        assert_eq!(answer(&mut h, quiet, packet_id), ReasonCode::SUCCESS);
    }
    h.advance(1_000);
    assert_eq!(answer(&mut h, reader, 3), ReasonCode::SUCCESS);
}

/// A declared slice and the ACL both filter a delivery: a topic outside
/// the slice is never sent, and one inside it only while the grant holds.
#[test]
fn a_slice_and_the_acl_both_filter_a_delivery() {
    use crate::core::partition::topic_hash;
    let mut h = Harness::new(Settings::default());
    h.broker.set_acl(Some(acl(true)), h.now_ms, &mut h.out);
    let (reader, _) = connect_as(&mut h, "reader", "r1");
    let topics: Vec<String> = (0..8).map(|i| format!("news/{i}")).collect();
    let index = topic_hash(&topics[0]) % 2;
    let outside = topics
        .iter()
        .find(|t| topic_hash(t) % 2 != index)
        .expect("eight topics span both halves");
    let mut subscribe = Subscribe {
        packet_id: 7,
        properties: Properties::default(),
        filters: vec![("news/#".into(), qos(QoS::AtMostOnce))],
    };
    subscribe
        .properties
        .user_properties
        .push(("saguin-filter".into(), format!("topic_hash(2, {index})")));
    h.packet(reader, Packet::Subscribe(subscribe));
    h.out.take(reader);
    let (writer, _) = connect_as(&mut h, "reader", "w1");
    let publish = |h: &mut Harness, topic: &str, payload: &[u8]| {
        h.packet(
            writer,
            Packet::Publish(publish_packet(topic, QoS::AtMostOnce, None, payload)),
        );
    };
    publish(&mut h, &topics[0], b"in");
    publish(&mut h, outside, b"out");
    assert_eq!(delivered_payloads(&mut h, reader), [b"in".to_vec()]);
    h.broker.set_acl(Some(acl(false)), h.now_ms, &mut h.out);
    publish(&mut h, &topics[0], b"in, not granted");
    publish(&mut h, outside, b"out, not granted");
    assert!(delivered_payloads(&mut h, reader).is_empty());
}

/// The topic's part of the read check is resolved once per message; each
/// target's grants are still asked: in one fan-out, the one subscriber
/// whose grant was withdrawn (sorted between two that keep theirs) gets
/// nothing, at QoS 0 and QoS 1, and the others get every message.
#[test]
fn a_fan_out_skips_only_the_subscriber_the_file_does_not_let_read() {
    let mut h = Harness::new(Settings::default());
    h.broker.set_acl(Some(acl(true)), h.now_ms, &mut h.out);
    let (first, _) = connect_as(&mut h, "quiet", "q1");
    let (refused, _) = connect_as(&mut h, "reader", "r1");
    let (last, _) = connect_as(&mut h, "quiet", "q2");
    for conn in [first, refused, last] {
        assert_eq!(
            h.subscribe(conn, "news/#", qos(QoS::AtLeastOnce), None),
            [ReasonCode::GRANTED_QOS_1]
        );
    }
    // "reader" keeps WRITE on news/# and loses READ.
    h.broker.set_acl(Some(acl(false)), h.now_ms, &mut h.out);
    let (writer, _) = connect_as(&mut h, "quiet", "w1");
    h.packet(
        writer,
        Packet::Publish(publish_packet("news/a", QoS::AtMostOnce, None, b"0")),
    );
    h.packet(
        writer,
        Packet::Publish(publish_packet("news/b", QoS::AtLeastOnce, Some(1), b"1")),
    );
    for conn in [first, last] {
        assert_eq!(
            delivered_payloads(&mut h, conn),
            [b"0".to_vec(), b"1".to_vec()]
        );
    }
    assert!(delivered_payloads(&mut h, refused).is_empty());
}

/// A durable session of `client_id` under `user`, its CONNECT kept for a
/// reconnect.
fn durable_as(user: &str, client_id: &str) -> Connect {
    let mut connect = connect_packet(client_id, ProtocolVersion::V5);
    connect.username = Some(user.into());
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    connect
}

/// Another user taking a session over by its client id is owed only what
/// its own grants let it read: the broadcasts queued for the session's
/// owner, in flight or waiting, are not sent to it (invariant 16).
#[test]
fn a_session_taken_over_is_owed_only_what_the_new_connection_may_read() {
    let settings = Settings::default();
    let mut h = Harness::new(settings);
    h.broker.set_acl(Some(acl(true)), h.now_ms, &mut h.out);
    let (owner, _) = h.connect_with(durable_as("reader", "alice"));
    assert_eq!(
        h.subscribe(owner, "news/#", qos(QoS::AtLeastOnce), None),
        [ReasonCode::GRANTED_QOS_1]
    );
    let (writer, _) = connect_as(&mut h, "quiet", "w1");
    // One in flight, unacknowledged, when the owner goes; two queued after.
    let publish = |h: &mut Harness, id: u16| {
        let payload = [b'0' + id as u8];
        let packet = publish_packet("news/a", QoS::AtLeastOnce, Some(id), &payload);
        h.packet(writer, Packet::Publish(packet));
    };
    publish(&mut h, 1);
    assert_eq!(delivered_payloads(&mut h, owner), [b"1".to_vec()]);
    h.packet(owner, Packet::Disconnect(Disconnect::default()));
    publish(&mut h, 2);
    publish(&mut h, 3);
    let (stranger, connack) = h.connect_with(durable_as("stranger", "alice"));
    assert!(connack.session_present);
    assert!(
        delivered_payloads(&mut h, stranger).is_empty(),
        "nothing the owner was owed reaches a user who may not read it"
    );
    // Dropped, not kept back: the owner coming back is owed nothing now.
    h.packet(stranger, Packet::Disconnect(Disconnect::default()));
    let (owner, _) = h.connect_with(durable_as("reader", "alice"));
    assert!(delivered_payloads(&mut h, owner).is_empty());
    publish(&mut h, 4);
    assert_eq!(delivered_payloads(&mut h, owner), [b"4".to_vec()]);
}

/// A retained value is a delivery like any other: a subscription granted
/// by a rule is sent only the retained values whose topics the rule
/// reaches, and `#` reaches no `$` topic.
#[test]
fn retained_values_are_asked_of_the_grants_topic_by_topic() {
    let mut file = acl(true);
    file.roles[0].rules[0].filters = vec!["#".into()];
    file.roles[1].rules[0].filters = vec!["#".into(), "$private/#".into()];
    let mut h = Harness::new(Settings::default());
    h.broker.set_acl(Some(file), h.now_ms, &mut h.out);
    let (publisher, _) = connect_as(&mut h, "quiet", "p");
    for topic in ["$private/secret", "open/x"] {
        let mut publish = publish_packet(topic, QoS::AtMostOnce, None, topic.as_bytes());
        publish.retain = true;
        h.packet(publisher, Packet::Publish(publish));
    }
    let (reader, _) = connect_as(&mut h, "reader", "r1");
    assert_eq!(
        h.subscribe(reader, "$private/#", qos(QoS::AtMostOnce), None),
        [ReasonCode::NOT_AUTHORIZED]
    );
    assert_eq!(
        h.subscribe(reader, "#", qos(QoS::AtMostOnce), None),
        [ReasonCode::GRANTED_QOS_0]
    );
    assert_eq!(delivered_payloads(&mut h, reader), [b"open/x".to_vec()]);
}

/// The grants a SUBSCRIBE is judged by never let a filter through that
/// reaches a topic its client may not read: every filter of a small
/// alphabet (`$` levels, empty levels and both wildcards among them), as
/// written and inside `$share/`, from MQTT 3.1.1 and MQTT 5 clients,
/// against rules that name `$` topics and ordinary ones. A client whose
/// roles take `share` away is granted no `$share/` filter on either.
#[test]
fn no_filter_granted_reaches_a_topic_the_grants_refuse() {
    use crate::acl::filter::tests::{all_filters, all_topics};
    let mut file = acl(true);
    file.roles[0].rules[0].filters = vec!["a/#".into(), "+/a".into(), "$s/$s".into()];
    file.roles[1].rules[0].filters = vec!["#".into()];
    file.roles[1].rules[1].denies = Features::SHARE;
    let topics = all_topics();
    for version in [ProtocolVersion::V311, ProtocolVersion::V5] {
        let mut h = Harness::new(Settings::default());
        h.broker.set_acl(Some(file.clone()), h.now_ms, &mut h.out);
        let mut connect = connect_packet("r", version);
        connect.username = Some("reader".into());
        let (reader, _) = h.connect_with(connect);
        let session = h.broker.session_of(reader).expect("connected");
        for inner in all_filters() {
            for filter in [inner.clone(), format!("$share/g/{inner}")] {
                let codes = h.subscribe(reader, &filter, qos(QoS::AtMostOnce), None);
                h.out.take(reader);
                if codes[0].is_error() {
                    continue;
                }
                for topic in topics
                    .iter()
                    .filter(|t| crate::codec::topic::matches(&inner, t))
                {
                    assert!(
                        h.broker.may_read(session, topic),
                        "{version:?}: {filter} was granted and reaches {topic}"
                    );
                }
            }
        }
        let mut connect = connect_packet("q", version);
        connect.username = Some("quiet".into());
        let (quiet, _) = h.connect_with(connect);
        let subscribe = Subscribe {
            packet_id: 7,
            properties: Properties::default(),
            filters: vec![("$share/g/a/#".into(), qos(QoS::AtMostOnce))],
        };
        h.packet(quiet, Packet::Subscribe(subscribe));
        let answer = h.out.take(quiet);
        match version {
            ProtocolVersion::V5 => assert_eq!(
                disconnect_code(&answer),
                Some(ReasonCode::SHARED_SUBSCRIPTIONS_NOT_SUPPORTED)
            ),
            ProtocolVersion::V311 => match answer.as_slice() {
                [Packet::Suback(suback)] => {
                    assert_eq!(suback.reason_codes, [ReasonCode::NOT_AUTHORIZED])
                }
                other => panic!("expected a SUBACK, got {other:?}"),
            },
        }
    }
}

/// The reserved space inside `$share/` is refused 0x87, a seek's reply
/// included: it is sent to one client's socket, never to a group.
#[test]
fn a_shared_subscription_to_the_reserved_space_is_not_authorized() {
    let mut h = Harness::new(Settings::default());
    let conn = h.connect("c", ProtocolVersion::V5);
    for filter in [
        "$share/g/$saguin/consumer/events/seek/reply",
        "$share/g/$saguin/#",
    ] {
        assert_eq!(
            h.subscribe(conn, filter, qos(QoS::AtMostOnce), None),
            [ReasonCode::NOT_AUTHORIZED],
            "{filter}"
        );
    }
    assert_eq!(
        h.subscribe(
            conn,
            "$saguin/consumer/events/seek/reply",
            qos(QoS::AtMostOnce),
            None
        ),
        [ReasonCode::GRANTED_QOS_0]
    );
}
