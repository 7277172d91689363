//! Client-declared partitioning over real sockets: members declaring
//! `saguin-filter: topic_hash(3, i)` split broadcast traffic, its retained
//! pass, an `append` replay and a `latest` state pass into disjoint slices
//! that together are everything; malformed declarations are refused with
//! their Reason String; a declaration survives a restart on redb.

mod common;

use std::collections::BTreeSet;
use std::thread;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{
    Connect, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode, Suback,
    Subscribe, SubscriptionOptions,
};
use saguin::core::partition::topic_hash;

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const CHANNELS: &str = "channels:\n  log:\n    type: append\n    filter: log/#\n  state:\n    type: latest\n    filter: state/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";

const TOPICS: usize = 4_000;
const MEMBERS: u32 = 3;

/// The topic shape whose repeated identifier defeats an unmixed FNV-1a.
fn topics(prefix: &str) -> Vec<String> {
    (0..TOPICS)
        .map(|id| format!("{prefix}devices/{id}/messages/devicebound/{id}"))
        .collect()
}

fn declaration(values: &[&str]) -> Properties {
    Properties {
        user_properties: values
            .iter()
            .map(|v| ("saguin-filter".to_string(), v.to_string()))
            .collect(),
        ..Properties::default()
    }
}

fn connect(address: &str, client_id: &str, durable: bool, problem_information: bool) -> RawClient {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect: Connect = common::connect_packet(ProtocolVersion::V5, client_id);
    if durable {
        connect.clean_start = false;
        connect.properties.session_expiry_interval_s = Some(3600);
    }
    if !problem_information {
        connect.properties.request_problem_information = Some(0);
    }
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => assert_eq!(connack.reason_code.0, 0),
        other => panic!("expected a CONNACK, got {other:?}"),
    }
    client
}

fn subscribe(client: &mut RawClient, filters: &[&str], properties: Properties) -> Suback {
    let options = SubscriptionOptions {
        qos: QoS::AtLeastOnce,
        ..SubscriptionOptions::default()
    };
    client.send(&Packet::Subscribe(Subscribe {
        packet_id: 3,
        properties,
        filters: filters.iter().map(|f| (f.to_string(), options)).collect(),
    }));
    match client.recv() {
        Received::Packet(Packet::Suback(suback)) => suback,
        other => panic!("expected a SUBACK, got {other:?}"),
    }
}

fn publish_all(client: &mut RawClient, topics: &[String], retain: bool) {
    for (i, topic) in topics.iter().enumerate() {
        let packet_id = (i % 60_000) as u16 + 1;
        client.send(&Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            retain,
            topic: topic.clone(),
            packet_id: Some(packet_id),
            payload: b"v".to_vec(),
            ..Publish::default()
        }));
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) => {
                assert_eq!(ack.packet_id, packet_id);
                assert_eq!(ack.reason_code.0, 0, "{topic}: {ack:?}");
            }
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
}

/// Reads deliveries, acknowledging each, until `until` is among them;
/// returns every topic received before it.
fn receive_until(client: &mut RawClient, until: &str) -> Vec<String> {
    let mut received = Vec::new();
    loop {
        match client.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                if let Some(packet_id) = publish.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                if publish.topic == until {
                    return received;
                }
                received.push(publish.topic);
            }
            other => panic!("expected a delivery, got {other:?}"),
        }
    }
}

/// Reads `count` deliveries, acknowledging each.
fn receive(client: &mut RawClient, count: usize) -> Vec<String> {
    let mut received = Vec::new();
    while received.len() < count {
        match client.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                if let Some(packet_id) = publish.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                received.push(publish.topic);
            }
            other => panic!("expected a delivery, got {other:?}"),
        }
    }
    received
}

/// The slices are disjoint, their union is every topic, each is what the
/// hash assigns it, and each is within a few percent of a third.
fn assert_split(slices: &[Vec<String>], all: &[String]) {
    let mut union = BTreeSet::new();
    for (index, slice) in slices.iter().enumerate() {
        let distinct: BTreeSet<&String> = slice.iter().collect();
        assert_eq!(
            distinct.len(),
            slice.len(),
            "member {index} got a topic twice"
        );
        for topic in slice {
            assert!(union.insert(topic.clone()), "{topic} reached two members");
            assert_eq!(
                topic_hash(topic) % u64::from(MEMBERS),
                index as u64,
                "{topic}"
            );
        }
        let third = all.len() / MEMBERS as usize;
        assert!(
            slice.len().abs_diff(third) * 100 <= third * 5,
            "member {index} got {} of {}",
            slice.len(),
            all.len()
        );
    }
    let everything: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(union, everything, "the slices together are everything");
}

fn expected_count(all: &[String], index: u32) -> usize {
    all.iter()
        .filter(|t| topic_hash(t) % u64::from(MEMBERS) == u64::from(index))
        .count()
}

#[test]
fn three_members_split_broadcast_traffic_and_the_retained_pass() {
    let broker = BrokerProcess::start("");
    let address = broker.address();
    let live = topics("");
    // Live traffic: each member takes its slice, and an undeclared
    // subscription to `end` in its own SUBSCRIBE says the stream is over.
    let members: Vec<_> = (0..MEMBERS)
        .map(|index| {
            let mut member = connect(&address, &format!("member-{index}"), false, true);
            let slice = format!("topic_hash({MEMBERS}, {index})");
            let suback = subscribe(&mut member, &["devices/#"], declaration(&[&slice]));
            assert_eq!(suback.reason_codes, vec![ReasonCode(1)]);
            subscribe(&mut member, &["end"], Properties::default());
            thread::spawn(move || receive_until(&mut member, "end"))
        })
        .collect();
    let mut publisher = connect(&address, "publisher", false, true);
    publish_all(&mut publisher, &live, false);
    publish_all(&mut publisher, &["end".to_string()], false);
    let slices: Vec<_> = members.into_iter().map(|m| m.join().unwrap()).collect();
    assert_split(&slices, &live);

    // The retained pass a new subscriber is handed takes the slice too.
    let retained = topics("kept/");
    publish_all(&mut publisher, &retained, true);
    let slices: Vec<_> = (0..MEMBERS)
        .map(|index| {
            let mut member = connect(&address, &format!("late-{index}"), false, true);
            let slice = format!("topic_hash({MEMBERS}, {index})");
            subscribe(&mut member, &["kept/#"], declaration(&[&slice]));
            receive(&mut member, expected_count(&retained, index))
        })
        .collect();
    assert_split(&slices, &retained);
}

#[test]
fn three_members_split_an_append_replay_and_a_latest_state_pass() {
    let dir = TempDir::new("split");
    let broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let address = broker.address();
    let mut publisher = connect(&address, "publisher", false, true);
    for prefix in ["log/", "state/"] {
        let all = topics(prefix);
        publish_all(&mut publisher, &all, false);
        let filter = format!("{prefix}#");
        let slices: Vec<_> = (0..MEMBERS)
            .map(|index| {
                let id = format!("{prefix}member-{index}");
                let mut member = connect(&address, &id, false, true);
                let slice = format!("topic_hash({MEMBERS}, {index})");
                subscribe(&mut member, &[&filter], declaration(&[&slice]));
                receive(&mut member, expected_count(&all, index))
            })
            .collect();
        assert_split(&slices, &all);
    }
}

#[test]
fn a_declared_slice_and_an_overlapping_undeclared_filter_get_the_union_once() {
    let dir = TempDir::new("union");
    let broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let address = broker.address();
    let all: Vec<String> = (0..60).map(|i| format!("log/a/{i}")).collect();
    let mut publisher = connect(&address, "publisher", false, true);
    let live: Vec<String> = (0..60).map(|i| format!("live/a/{i}")).collect();
    let mut member = connect(&address, "member", false, true);
    subscribe(
        &mut member,
        &["log/#", "live/#"],
        declaration(&["topic_hash(3, 0)"]),
    );
    subscribe(&mut member, &["log/a/+", "live/a/+"], Properties::default());
    publish_all(&mut publisher, &all, false);
    publish_all(&mut publisher, &live, false);
    let received = receive(&mut member, all.len() + live.len());
    let mut expected: Vec<String> = all.iter().chain(&live).cloned().collect();
    let mut got = received.clone();
    expected.sort();
    got.sort();
    assert_eq!(got, expected, "everything, each once");
}

#[test]
fn every_malformed_declaration_is_refused_with_its_reason_string() {
    let dir = TempDir::new("refused");
    let broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let address = broker.address();
    let mut client = connect(&address, "asker", false, true);
    let cases: [(&[&str], &str); 9] = [
        (&[""], "is not a call"),
        (
            &["TOPIC_HASH(3, 0)"],
            "names a function this broker does not have",
        ),
        (&["topic_hash(3)"], "takes two arguments"),
        (&["topic_hash(+3, 0)"], "is not a number"),
        (
            &["topic_hash(100000000000000000000000, 0)"],
            "above 2147483647",
        ),
        (&["topic_hash(0, 0)"], "partition count is 0"),
        (
            &["topic_hash(1, 8)"],
            "index is not below its partition count",
        ),
        (
            &["topic_hash(4, 0)", "topic_hash(6, 1)"],
            "the same partition count",
        ),
        (&["$topic_hash % 3 == 0"], "is not a call"),
    ];
    for (values, words) in cases {
        let suback = subscribe(&mut client, &["a/#", "b"], declaration(values));
        assert_eq!(suback.reason_codes, vec![ReasonCode(0x83); 2], "{values:?}");
        let reason = suback.properties.reason_string.unwrap_or_default();
        assert!(reason.contains("saguin-filter"), "{values:?}: {reason}");
        assert!(reason.contains(words), "{values:?}: {reason}");
    }
    // Refused on the two forms that already divide a stream; the other
    // filter of the same SUBSCRIBE is granted.
    let suback = subscribe(
        &mut client,
        &["$share/g/a/#", "a/#"],
        declaration(&["topic_hash(2, 1)"]),
    );
    assert_eq!(suback.reason_codes, vec![ReasonCode(0x83), ReasonCode(1)]);
    assert!(suback.properties.reason_string.unwrap().contains("$share/"));
    let suback = subscribe(
        &mut client,
        &["$saguin/queue/jobs"],
        declaration(&["topic_hash(2, 1)"]),
    );
    assert_eq!(suback.reason_codes, vec![ReasonCode(0x83)]);
    assert!(suback
        .properties
        .reason_string
        .unwrap()
        .contains("$saguin/queue/"));
    // A client that asked for no problem information gets the code alone.
    let mut quiet = connect(&address, "quiet", false, false);
    let suback = subscribe(&mut quiet, &["a/#"], declaration(&["topic_hash(3, 3)"]));
    assert_eq!(suback.reason_codes, vec![ReasonCode(0x83)]);
    assert_eq!(suback.properties.reason_string, None);
}

#[test]
fn two_subscribers_declaring_different_counts_on_one_filter_are_logged_by_name() {
    let mut broker = BrokerProcess::start("");
    let address = broker.address();
    let mut first = connect(&address, "member-of-three", false, true);
    subscribe(
        &mut first,
        &["devices/#"],
        declaration(&["topic_hash(3, 0)"]),
    );
    let mut second = connect(&address, "member-of-two", false, true);
    subscribe(
        &mut second,
        &["devices/#"],
        declaration(&["topic_hash(2, 0)"]),
    );
    let line = broker.wait_for_log("different partition counts");
    assert!(line.contains("member-of-three"), "{line}");
    assert!(line.contains("member-of-two"), "{line}");
}

#[test]
fn a_declaration_is_kept_by_a_durable_session_across_a_sigkill() {
    let dir = TempDir::new("kept");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let address = broker.address();
    let mut member = connect(&address, "member", true, true);
    subscribe(&mut member, &["log/#"], declaration(&["topic_hash(3, 1)"]));
    member.send(&Packet::Disconnect(Default::default()));
    drop(member);
    broker.kill();
    let broker = BrokerProcess::start_in(dir.path(), REDB, CHANNELS);
    let address = broker.address();
    let all = topics("log/");
    let mut publisher = connect(&address, "publisher", false, true);
    publish_all(&mut publisher, &all[..300], false);
    // Resumed without subscribing again: only its slice arrives.
    let mut member = connect(&address, "member", true, true);
    let expected: Vec<String> = all[..300]
        .iter()
        .filter(|t| topic_hash(t) % 3 == 1)
        .cloned()
        .collect();
    let received = receive(&mut member, expected.len());
    assert_eq!(received, expected);
}
