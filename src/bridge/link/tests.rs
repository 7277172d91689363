//! The link's rules, driven with simulated time and no sockets.

use super::*;
use crate::bridge::settings::{Direction, Peer, Rule};
use crate::codec::{Connack, Properties};

fn settings(rules: Vec<Rule>) -> BridgeSettings {
    BridgeSettings {
        name: "up".into(),
        peer: Peer {
            host: "127.0.0.1".into(),
            port: 1883,
            tls: None,
            websocket: None,
        },
        client_id: "gw-1".into(),
        username: None,
        password: None,
        session_expiry_s: 86_400,
        receive_maximum: 4,
        ack_interval_ms: 5,
        rules,
    }
}

fn rule(filter: &str, direction: Direction, topic: Option<&str>) -> Rule {
    Rule {
        filter: filter.into(),
        direction,
        topic: topic.map(str::to_string),
    }
}

fn link_with(rules: Vec<Rule>, carriage: Carriage) -> Link {
    let mut link = Link::new(settings(rules), Box::new(move |_| carriage), 1);
    for (local, _) in link.local_connects() {
        link.local_packet(local, Packet::Connack(Connack::default()), 0);
    }
    link
}

fn up(link: &mut Link, now_ms: u64, session_present: bool) -> Vec<Action> {
    link.peer_connecting(now_ms);
    link.peer_packet(
        Packet::Connack(Connack {
            session_present,
            ..Connack::default()
        }),
        now_ms,
    )
}

fn delivery(topic: &str, local_id: u16, payload: &str) -> Packet {
    Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(local_id),
        payload: payload.into(),
        properties: Properties {
            user_properties: vec![
                ("saguin-id".into(), format!("id-{local_id}")),
                ("saguin-offset".into(), local_id.to_string()),
            ],
            ..Properties::default()
        },
        ..Publish::default()
    })
}

fn to_peer(actions: &[Action]) -> Vec<&Publish> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToPeer(Packet::Publish(p)) => Some(p),
            _ => None,
        })
        .collect()
}

fn local_acks(actions: &[Action]) -> Vec<u16> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToLocal(Local::Reader(_), Packet::Puback(ack)) => Some(ack.packet_id),
            _ => None,
        })
        .collect()
}

fn peer_ack(link: &mut Link, id: u16, now_ms: u64) -> Vec<Action> {
    link.peer_packet(
        Packet::Puback(PubAck {
            packet_id: id,
            ..PubAck::default()
        }),
        now_ms,
    )
}

#[test]
fn stored_records_wait_through_an_outage_and_cross_in_order_once() {
    let mut link = link_with(
        vec![rule("t/#", Direction::Out, Some("up/$#"))],
        Carriage::Stored,
    );
    for n in 1..=3 {
        let actions = link.local_packet(Local::Reader(0), delivery("t/a", n, &n.to_string()), 10);
        assert!(actions.is_empty(), "nothing moves while the link is down");
    }
    let actions = up(&mut link, 20, false);
    // One topic: one in flight, in order, labels of this broker stripped.
    let sent = to_peer(&actions);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].topic, "up/a");
    assert_eq!(sent[0].payload, b"1");
    assert_eq!(
        sent[0].properties.user_properties,
        vec![("saguin-id".to_string(), "id-1".to_string())]
    );
    let mut payloads = vec![sent[0].payload.clone()];
    let mut acked_here = Vec::new();
    let mut next = sent[0].packet_id.unwrap();
    for _ in 0..3 {
        let actions = peer_ack(&mut link, next, 30);
        acked_here.extend(local_acks(&actions));
        if let Some(p) = to_peer(&actions).first() {
            payloads.push(p.payload.clone());
            next = p.packet_id.unwrap();
        }
    }
    assert_eq!(payloads, vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
    assert_eq!(
        acked_here,
        vec![1, 2, 3],
        "acknowledged here only once taken there"
    );
    assert_eq!(link.stats.sent, 3);
}

#[test]
fn a_dropped_link_resends_what_was_in_flight_marked_dup_and_nothing_twice_here() {
    let mut link = link_with(
        vec![rule("t/#", Direction::Out, Some("$#"))],
        Carriage::Stored,
    );
    up(&mut link, 0, false);
    let first =
        to_peer(&link.local_packet(Local::Reader(0), delivery("t/a", 1, "x"), 1))[0].clone();
    let (_wait, actions) = link.peer_lost(2, "test");
    assert!(
        actions.is_empty(),
        "a stored record is kept, not acknowledged here"
    );
    let actions = up(&mut link, 3, true);
    let again = to_peer(&actions);
    assert_eq!(again.len(), 1);
    assert!(again[0].dup);
    assert_eq!(again[0].packet_id, first.packet_id);
    assert_eq!(
        local_acks(&peer_ack(&mut link, first.packet_id.unwrap(), 4)),
        vec![1]
    );
}

#[test]
fn topics_share_the_window_and_each_topic_stays_serial() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    up(&mut link, 0, true);
    let mut sent = 0;
    for (n, topic) in ["a", "a", "b", "c", "d", "e"].iter().enumerate() {
        sent +=
            to_peer(&link.local_packet(Local::Reader(0), delivery(topic, n as u16 + 1, "x"), 1))
                .len();
    }
    // a, b, c, d: receive_maximum 4, the second "a" behind the first.
    assert_eq!(sent, 4);
}

#[test]
fn live_records_are_dropped_while_down_and_latest_changes_coalesce() {
    let mut live = link_with(vec![rule("#", Direction::Both, None)], Carriage::Live);
    assert_eq!(
        local_acks(&live.local_packet(Local::Reader(0), delivery("a", 1, "x"), 1)),
        vec![1]
    );
    assert_eq!(live.stats.unsent_live_down, 1);

    let mut latest = link_with(vec![rule("#", Direction::Both, None)], Carriage::Latest);
    latest.local_packet(Local::Reader(0), delivery("s", 1, "old"), 1);
    assert_eq!(
        local_acks(&latest.local_packet(Local::Reader(0), delivery("s", 2, "new"), 2)),
        vec![1]
    );
    let sent = to_peer(&up(&mut latest, 3, true))
        .iter()
        .map(|p| p.payload.clone())
        .collect::<Vec<_>>();
    assert_eq!(sent, vec![b"new".to_vec()]);
}

#[test]
fn a_bridged_record_never_leaves_over_a_bridge() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    up(&mut link, 0, true);
    let Packet::Publish(mut publish) = delivery("a", 1, "x") else {
        unreachable!()
    };
    publish
        .properties
        .user_properties
        .push((BRIDGED_MARK.into(), "other".into()));
    let actions = link.local_packet(Local::Reader(0), Packet::Publish(publish), 1);
    assert!(to_peer(&actions).is_empty());
    assert_eq!(local_acks(&actions), vec![1]);
    assert_eq!(link.stats.loops_skipped, 1);
}

fn from_peer(topic: &str, id: u16, dup: bool) -> Packet {
    Packet::Publish(Publish {
        dup,
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(id),
        payload: b"p".to_vec(),
        ..Publish::default()
    })
}

fn local_publishes(actions: &[Action]) -> Vec<&Publish> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToLocal(Local::Writer, Packet::Publish(p)) => Some(p),
            _ => None,
        })
        .collect()
}

fn peer_acks(actions: &[Action]) -> Vec<u16> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::ToPeer(Packet::Puback(ack)) => Some(ack.packet_id),
            _ => None,
        })
        .collect()
}

fn stored_here(link: &mut Link, local_id: u16, now_ms: u64) -> Vec<Action> {
    link.local_packet(
        Local::Writer,
        Packet::Puback(PubAck {
            packet_id: local_id,
            ..PubAck::default()
        }),
        now_ms,
    )
}

#[test]
fn an_inbound_record_is_acknowledged_to_the_peer_only_once_stored_and_marked() {
    let mut link = link_with(
        vec![rule("fleet/+/t/#", Direction::In, Some("in/$1/$#"))],
        Carriage::Stored,
    );
    let subscribe = up(&mut link, 0, false);
    assert!(subscribe.iter().any(
        |a| matches!(a, Action::ToPeer(Packet::Subscribe(s)) if s.filters[0].0 == "fleet/+/t/#")
    ));
    let actions = link.peer_packet(from_peer("fleet/v7/t/psi", 9, false), 1);
    let local = local_publishes(&actions);
    assert_eq!(local[0].topic, "in/v7/psi");
    assert!(has_label(local[0], BRIDGED_MARK));
    let local_id = local[0].packet_id.unwrap();
    assert!(peer_acks(&link.tick(2)).is_empty(), "not stored yet");
    stored_here(&mut link, local_id, 3);
    assert_eq!(peer_acks(&link.tick(4)), vec![9]);
}

#[test]
fn a_qos1_redelivery_after_a_dropped_link_is_stored_once() {
    let mut link = link_with(vec![rule("a", Direction::In, Some("b"))], Carriage::Stored);
    up(&mut link, 0, false);
    let actions = link.peer_packet(from_peer("a", 5, false), 1);
    let local_id = local_publishes(&actions)[0].packet_id.unwrap();
    stored_here(&mut link, local_id, 2);
    // The link drops before the acknowledgement is sent.
    link.peer_lost(3, "test");
    up(&mut link, 4, true);
    let actions = link.peer_packet(from_peer("a", 5, true), 5);
    assert!(
        local_publishes(&actions).is_empty(),
        "not stored a second time"
    );
    assert_eq!(peer_acks(&link.tick(6)), vec![5]);
    assert_eq!(link.stats.received, 1);
    assert_eq!(link.stats.duplicates_acknowledged, 1);
    // The same identifier reused without DUP is a new record.
    let actions = link.peer_packet(from_peer("a", 5, false), 7);
    assert_eq!(local_publishes(&actions).len(), 1);
}

#[test]
fn a_full_channel_holds_the_peer_and_a_record_never_accepted_is_dropped() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    up(&mut link, 0, false);
    let actions = link.peer_packet(from_peer("a", 1, false), 1);
    let first = local_publishes(&actions)[0].packet_id.unwrap();
    link.local_packet(
        Local::Writer,
        Packet::Puback(PubAck {
            packet_id: first,
            reason_code: ReasonCode::QUOTA_EXCEEDED,
            ..PubAck::default()
        }),
        2,
    );
    assert!(peer_acks(&link.tick(3)).is_empty());
    let retry = local_publishes(&link.tick(2 + REFUSED_RETRY_MS)).len();
    assert_eq!(retry, 1, "offered again after a refusal that can recover");

    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    up(&mut link, 0, false);
    let actions = link.peer_packet(from_peer("a", 1, false), 1);
    let first = local_publishes(&actions)[0].packet_id.unwrap();
    link.local_packet(
        Local::Writer,
        Packet::Puback(PubAck {
            packet_id: first,
            reason_code: ReasonCode::TOPIC_NAME_INVALID,
            ..PubAck::default()
        }),
        2,
    );
    assert_eq!(peer_acks(&link.tick(3)), vec![1]);
    assert_eq!(link.stats.unstored_never_accepted, 1);
}

#[test]
fn a_peer_answering_in_311_is_dialled_again_in_311() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    link.peer_connecting(0);
    let actions = link.peer_packet(
        Packet::Connack(Connack {
            reason_code: ReasonCode(0x01),
            ..Connack::default()
        }),
        1,
    );
    assert!(matches!(actions[0], Action::ClosePeer(_)));
    assert_eq!(link.peer_version(), ProtocolVersion::V311);
    let Packet::Connect(connect) = link.peer_connecting(2) else {
        unreachable!()
    };
    assert_eq!(connect.protocol_version, ProtocolVersion::V311);
}

#[test]
fn a_peer_without_retained_messages_gets_the_flag_cleared() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    link.peer_connecting(0);
    let mut connack = Connack::default();
    connack.properties.retain_available = Some(0);
    link.peer_packet(Packet::Connack(connack), 1);
    let Packet::Publish(mut publish) = delivery("a", 1, "x") else {
        unreachable!()
    };
    publish.retain = true;
    let actions = link.local_packet(Local::Reader(0), Packet::Publish(publish), 2);
    assert!(!to_peer(&actions)[0].retain);
}

#[test]
fn records_waiting_to_be_stored_fill_the_window_and_qos0_past_it_is_dropped() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Stored);
    up(&mut link, 0, false);
    for id in 1..=4 {
        assert!(!link.inbound_full());
        link.peer_packet(from_peer("a", id, false), 1);
    }
    assert!(link.inbound_full(), "the shell stops reading the peer");
    let Packet::Publish(mut qos0) = from_peer("a", 9, false) else {
        unreachable!()
    };
    qos0.qos = QoS::AtMostOnce;
    qos0.packet_id = None;
    link.peer_packet(Packet::Publish(qos0), 2);
    assert_eq!(link.stats.unstored_queue_full, 1);
}

#[test]
fn each_out_rule_reads_through_its_own_durable_session_and_is_acknowledged_there() {
    let mut link = link_with(
        vec![
            rule("a/#", Direction::Out, Some("x/$#")),
            rule("in/#", Direction::In, Some("here/$#")),
            rule("b/#", Direction::Out, Some("y/$#")),
        ],
        Carriage::Stored,
    );
    let sessions = link.local_connects();
    let ids: Vec<(Local, String, bool)> = sessions
        .iter()
        .map(|(local, packet)| match packet {
            Packet::Connect(c) => (*local, c.client_id.clone(), c.clean_start),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(ids.len(), 3, "the writer and one reader per out rule");
    assert_eq!(
        (ids[0].0, ids[0].1.as_str(), ids[0].2),
        (Local::Writer, "saguin-bridge/up", true)
    );
    assert_eq!((ids[1].0, ids[1].2), (Local::Reader(0), false));
    assert_eq!((ids[2].0, ids[2].2), (Local::Reader(1), false));
    assert!(ids[1].1.starts_with("saguin-bridge/up/") && ids[1].1 != ids[2].1);

    // Editing a rule's topic names a new reader.
    let mut edited = settings(vec![rule("a/#", Direction::Out, Some("z/$#"))]);
    let first = edited.reader_client_id(&edited.rules[0]);
    edited.rules[0].topic = Some("x/$#".into());
    assert_eq!(edited.reader_client_id(&edited.rules[0]), ids[1].1);
    assert_ne!(first, ids[1].1);

    up(&mut link, 0, true);
    // The second reader's delivery is mapped by its own rule and
    // acknowledged on its own session once the peer takes it.
    let actions = link.local_packet(Local::Reader(1), delivery("b/k", 7, "v"), 1);
    let sent = to_peer(&actions)[0].clone();
    assert_eq!(sent.topic, "y/k");
    let actions = peer_ack(&mut link, sent.packet_id.unwrap(), 2);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::ToLocal(Local::Reader(1), Packet::Puback(ack)) if ack.packet_id == 7
    )));
}

#[test]
fn qos0_records_waiting_for_the_peer_are_bounded_by_the_window() {
    let mut link = link_with(vec![rule("#", Direction::Both, None)], Carriage::Live);
    up(&mut link, 0, true);
    // A QoS 1 record holds the topic; QoS 0 ones behind it wait.
    link.local_packet(Local::Reader(0), delivery("a", 1, "held"), 1);
    let qos0 = || {
        Packet::Publish(Publish {
            topic: "a".into(),
            payload: b"q0".to_vec(),
            ..Publish::default()
        })
    };
    for _ in 0..4 {
        assert!(to_peer(&link.local_packet(Local::Reader(0), qos0(), 2)).is_empty());
    }
    assert_eq!(link.waiting_out(), 5);
    link.local_packet(Local::Reader(0), qos0(), 3);
    assert_eq!(link.waiting_out(), 5, "the fifth QoS 0 record is not held");
    assert_eq!(link.stats.unsent_live_queue_full, 1);
}
