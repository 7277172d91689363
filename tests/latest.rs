//! `latest` channels over real sockets: current state on subscribe, changes
//! after, deletions, resumes, point reads, the catalogue, retention, and
//! every acknowledged value surviving a SIGKILL on redb.

mod common;

use std::collections::HashMap;

use common::{BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{
    Connect, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS, ReasonCode, Subscribe,
    SubscriptionOptions,
};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const MEMORY: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: {dir}\n";
const CHANNELS: &str = "channels:\n  state:\n    type: latest\n    filter: state/#\n  schemas:\n    type: latest\n    filter: schemas/#\n  events:\n    type: append\n    filter: events/{a,b}/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";

fn start(dir: &TempDir) -> BrokerProcess {
    BrokerProcess::start_in(dir.path(), REDB, CHANNELS)
}

fn publish_packet(topic: &str, payload: &[u8], packet_id: u16) -> Publish {
    Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(packet_id),
        payload: payload.to_vec(),
        ..Publish::default()
    }
}

/// Publishes at QoS 1 and returns the PUBACK.
fn publish_with(client: &mut RawClient, publish: Publish) -> PubAck {
    client.send(&Packet::Publish(publish));
    match client.recv() {
        Received::Packet(Packet::Puback(ack)) => ack,
        other => panic!("expected a PUBACK, got {other:?}"),
    }
}

fn set(client: &mut RawClient, topic: &str, payload: &[u8]) {
    let ack = publish_with(client, publish_packet(topic, payload, 7));
    assert_eq!(ack.reason_code, ReasonCode::SUCCESS, "{ack:?}");
}

fn subscribe_with(
    client: &mut RawClient,
    filter: &str,
    options: SubscriptionOptions,
    props: Properties,
) {
    let subscribe = Subscribe {
        packet_id: 9,
        properties: props,
        filters: vec![(filter.into(), options)],
    };
    client.send(&Packet::Subscribe(subscribe));
    match client.recv() {
        Received::Packet(Packet::Suback(suback)) => {
            assert!(!suback.reason_codes[0].is_error(), "{suback:?}")
        }
        other => panic!("expected the SUBACK first, got {other:?}"),
    }
}

/// Subscribes at QoS 1 and checks the SUBACK.
fn subscribe_qos1(client: &mut RawClient, filter: &str, properties: Properties) {
    subscribe_with(client, filter, qos(QoS::AtLeastOnce), properties);
}

fn qos(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions {
        qos,
        ..SubscriptionOptions::default()
    }
}

fn with_deletions() -> Properties {
    Properties {
        user_properties: vec![("saguin-deletions".into(), String::new())],
        ..Properties::default()
    }
}

/// The next PUBLISH, acknowledged when it asks to be.
fn next_publish(client: &mut RawClient) -> Publish {
    match client.recv() {
        Received::Packet(Packet::Publish(publish)) => {
            if let Some(packet_id) = publish.packet_id {
                client.send(&Packet::Puback(PubAck {
                    packet_id,
                    ..PubAck::default()
                }));
            }
            publish
        }
        other => panic!("expected a PUBLISH, got {other:?}"),
    }
}

/// Nothing more was sent: a PINGREQ's answer is the next packet.
fn assert_nothing_more(client: &mut RawClient) {
    client.send(&Packet::Pingreq);
    match client.recv() {
        Received::Packet(Packet::Pingresp) => {}
        other => panic!("expected nothing before the PINGRESP, got {other:?}"),
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

fn offset(publish: &Publish) -> u64 {
    label(publish, "saguin-offset")
        .expect("a channel delivery carries saguin-offset")
        .parse()
        .unwrap()
}

fn durable(address: &str, client_id: &str, receive_maximum: Option<u16>) -> (RawClient, bool) {
    let mut client = RawClient::open(address, ProtocolVersion::V5);
    let mut connect: Connect = common::connect_packet(ProtocolVersion::V5, client_id);
    connect.clean_start = false;
    connect.properties.session_expiry_interval_s = Some(3600);
    connect.properties.receive_maximum = receive_maximum;
    client.send(&Packet::Connect(Box::new(connect)));
    match client.recv() {
        Received::Packet(Packet::Connack(connack)) => {
            assert_eq!(connack.reason_code, ReasonCode::SUCCESS);
            (client, connack.session_present)
        }
        other => panic!("expected a CONNACK, got {other:?}"),
    }
}

fn topics_and_payloads(publishes: &[Publish]) -> Vec<(String, Vec<u8>)> {
    publishes
        .iter()
        .map(|p| (p.topic.clone(), p.payload.clone()))
        .collect()
}

// ---- state and changes -----------------------------------------------------

#[test]
fn a_subscriber_gets_current_state_with_retain_after_the_suback_then_changes_without() {
    let dir = TempDir::new("latest-state");
    let broker = start(&dir);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/pump", b"off");
    set(&mut publisher, "state/pump", b"on");
    set(&mut publisher, "state/fw", b"1.2");

    let mut subscriber = RawClient::connect(&broker.address(), ProtocolVersion::V5, "sub");
    subscribe_qos1(&mut subscriber, "state/#", Properties::default());
    let state = [next_publish(&mut subscriber), next_publish(&mut subscriber)];
    assert_eq!(
        topics_and_payloads(&state),
        [
            ("state/pump".to_string(), b"on".to_vec()),
            ("state/fw".to_string(), b"1.2".to_vec())
        ],
        "one current value per topic, never the replaced one"
    );
    for value in &state {
        assert!(value.retain, "state carries RETAIN");
        assert!(label(value, "saguin-id").is_some());
        let timestamp: u64 = label(value, "saguin-timestamp").unwrap().parse().unwrap();
        assert!(
            timestamp > 1_600_000_000_000,
            "Unix milliseconds: {timestamp}"
        );
    }
    assert!(offset(&state[0]) < offset(&state[1]));
    assert_nothing_more(&mut subscriber);

    let mut retained = publish_packet("state/pump", b"auto", 8);
    retained.retain = true;
    publish_with(&mut publisher, retained);
    let change = next_publish(&mut subscriber);
    assert_eq!(change.payload, b"auto");
    assert!(!change.retain, "a live change carries no RETAIN");
    assert!(offset(&change) > offset(&state[1]));
    assert!(label(&change, "saguin-timestamp").is_some());
}

#[test]
fn retain_as_published_keeps_the_publishers_flag_on_changes_only() {
    let dir = TempDir::new("latest-rap");
    let broker = start(&dir);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"1");
    let mut subscriber = RawClient::connect(&broker.address(), ProtocolVersion::V5, "sub");
    let options = SubscriptionOptions {
        retain_as_published: true,
        ..qos(QoS::AtLeastOnce)
    };
    subscribe_with(&mut subscriber, "state/#", options, Properties::default());
    assert!(
        next_publish(&mut subscriber).retain,
        "the state pass is flagged for everybody"
    );
    set(&mut publisher, "state/a", b"2");
    assert!(
        !next_publish(&mut subscriber).retain,
        "published without the flag"
    );
    let mut retained = publish_packet("state/a", b"3", 8);
    retained.retain = true;
    publish_with(&mut publisher, retained);
    assert!(
        next_publish(&mut subscriber).retain,
        "published with the flag"
    );
}

#[test]
fn retain_handling_decides_the_state_pass() {
    let dir = TempDir::new("latest-rh");
    let broker = start(&dir);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"1");
    let mut subscriber = RawClient::connect(&broker.address(), ProtocolVersion::V5, "sub");
    let never = SubscriptionOptions {
        retain_handling: saguin::codec::RetainHandling::DoNotSend,
        ..qos(QoS::AtLeastOnce)
    };
    subscribe_with(&mut subscriber, "state/#", never, Properties::default());
    assert_nothing_more(&mut subscriber);
    let if_new = SubscriptionOptions {
        retain_handling: saguin::codec::RetainHandling::SendIfNew,
        ..qos(QoS::AtLeastOnce)
    };
    subscribe_with(&mut subscriber, "state/#", if_new, Properties::default());
    assert_nothing_more(&mut subscriber);
    // Asked for always, on the next SUBSCRIBE: the whole state again.
    subscribe_qos1(&mut subscriber, "state/#", Properties::default());
    assert_eq!(next_publish(&mut subscriber).payload, b"1");
}

#[test]
fn a_deletion_is_delivered_live_and_hidden_from_later_subscribers_unless_asked() {
    let dir = TempDir::new("latest-delete");
    let broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"1");
    set(&mut publisher, "state/b", b"2");
    let mut live = RawClient::connect(&address, ProtocolVersion::V5, "live");
    subscribe_qos1(&mut live, "state/#", Properties::default());
    let before = [next_publish(&mut live), next_publish(&mut live)];

    set(&mut publisher, "state/a", b"");
    let deletion = next_publish(&mut live);
    assert_eq!(
        (deletion.topic.as_str(), deletion.payload.len()),
        ("state/a", 0)
    );
    assert!(!deletion.retain);
    assert!(
        offset(&deletion) > offset(&before[1]),
        "a deletion has an offset of its own"
    );

    let mut later = RawClient::connect(&address, ProtocolVersion::V5, "later");
    subscribe_qos1(&mut later, "state/#", Properties::default());
    assert_eq!(next_publish(&mut later).topic, "state/b");
    assert_nothing_more(&mut later);

    let mut mirror = RawClient::connect(&address, ProtocolVersion::V5, "mirror");
    subscribe_qos1(&mut mirror, "state/#", with_deletions());
    let state = [next_publish(&mut mirror), next_publish(&mut mirror)];
    assert_eq!(
        topics_and_payloads(&state),
        [
            ("state/b".to_string(), b"2".to_vec()),
            ("state/a".to_string(), Vec::new())
        ]
    );
    assert_eq!(offset(&state[1]), offset(&deletion));
    assert!(state[1].retain);
    assert_nothing_more(&mut mirror);
}

#[test]
fn deleting_an_absent_topic_stores_nothing() {
    let dir = TempDir::new("latest-absent");
    let broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    let mut watcher = RawClient::connect(&address, ProtocolVersion::V5, "watcher");
    subscribe_qos1(&mut watcher, "state/#", Properties::default());
    set(&mut publisher, "state/x", b"1");
    let first = offset(&next_publish(&mut watcher));
    for _ in 0..3 {
        set(&mut publisher, "state/never-set", b"");
    }
    set(&mut publisher, "state/x", b"");
    set(&mut publisher, "state/x", b"");
    let deletion = next_publish(&mut watcher);
    assert_eq!(deletion.payload.len(), 0);
    assert_eq!(
        offset(&deletion),
        first + 1,
        "no offset was spent on the absent topic"
    );
    set(&mut publisher, "state/y", b"1");
    let after = next_publish(&mut watcher);
    assert_eq!(
        offset(&after),
        first + 2,
        "nor on deleting a topic already deleted"
    );
    let mut mirror = RawClient::connect(&address, ProtocolVersion::V5, "mirror");
    subscribe_qos1(&mut mirror, "state/#", with_deletions());
    let state = [next_publish(&mut mirror), next_publish(&mut mirror)];
    assert_eq!(
        topics_and_payloads(&state),
        [
            ("state/x".to_string(), Vec::new()),
            ("state/y".to_string(), b"1".to_vec())
        ]
    );
    assert_nothing_more(&mut mirror);
}

#[test]
fn a_resumed_session_gets_only_what_changed_and_qos0_gets_the_whole_state() {
    let dir = TempDir::new("latest-resume");
    let mut broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    for topic in ["state/a", "state/b", "state/c"] {
        set(&mut publisher, topic, b"1");
    }
    let (mut consumer, _) = durable(&address, "consumer", None);
    subscribe_qos1(&mut consumer, "state/#", Properties::default());
    let (mut quiet, _) = durable(&address, "quiet", None);
    subscribe_with(
        &mut quiet,
        "state/#",
        qos(QoS::AtMostOnce),
        Properties::default(),
    );
    for _ in 0..3 {
        next_publish(&mut consumer);
        next_publish(&mut quiet);
    }
    assert_nothing_more(&mut consumer);
    consumer.send(&Packet::Disconnect(Default::default()));
    quiet.send(&Packet::Disconnect(Default::default()));
    drop((consumer, quiet));
    // Both are away before anything changes.
    broker.wait_for_log("client consumer disconnected");
    broker.wait_for_log("client quiet disconnected");

    set(&mut publisher, "state/b", b"2");
    set(&mut publisher, "state/b", b"3");
    set(&mut publisher, "state/c", b"");

    let (mut consumer, present) = durable(&address, "consumer", None);
    assert!(present);
    let missed = next_publish(&mut consumer);
    assert_eq!(
        (missed.topic.as_str(), missed.payload.as_slice()),
        ("state/b", &b"3"[..])
    );
    assert_nothing_more(&mut consumer);

    let (mut quiet, present) = durable(&address, "quiet", None);
    assert!(present);
    let state = [next_publish(&mut quiet), next_publish(&mut quiet)];
    assert_eq!(
        topics_and_payloads(&state),
        [
            ("state/a".to_string(), b"1".to_vec()),
            ("state/b".to_string(), b"3".to_vec())
        ],
        "nothing is acknowledged at QoS 0, so the whole state is sent again"
    );
    assert_nothing_more(&mut quiet);
}

#[test]
fn a_shared_subscriber_gets_changes_only() {
    let dir = TempDir::new("latest-shared");
    let broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"old");
    let mut member = RawClient::connect(&address, ProtocolVersion::V5, "member");
    subscribe_qos1(&mut member, "$share/g/state/#", Properties::default());
    assert_nothing_more(&mut member);
    set(&mut publisher, "state/a", b"new");
    let change = next_publish(&mut member);
    assert_eq!(change.payload, b"new");
    assert!(label(&change, "saguin-offset").is_some());
}

#[test]
fn a_311_subscriber_gets_the_whole_state_with_retain() {
    let dir = TempDir::new("latest-311");
    let broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"1");
    set(&mut publisher, "state/b", b"2");
    let mut old = RawClient::connect(&address, ProtocolVersion::V311, "old-device");
    old.subscribe("state/#", QoS::AtLeastOnce);
    let state = [next_publish(&mut old), next_publish(&mut old)];
    assert!(state.iter().all(|p| p.retain));
    assert_eq!(state[0].payload, b"1");
    set(&mut publisher, "state/a", b"3");
    let change = next_publish(&mut old);
    assert_eq!(
        (change.payload.as_slice(), change.retain),
        (&b"3"[..], false)
    );
}

#[test]
fn a_retained_publish_into_a_channel_is_kept_by_the_channel_alone() {
    let dir = TempDir::new("latest-retain-flag");
    let broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    for topic in ["state/r", "events/a/r"] {
        let mut retained = publish_packet(topic, b"kept", 3);
        retained.retain = true;
        let ack = publish_with(&mut publisher, retained);
        assert_eq!(ack.reason_code, ReasonCode::SUCCESS);
    }
    let mut later = RawClient::connect(&address, ProtocolVersion::V5, "later");
    subscribe_qos1(&mut later, "state/r", Properties::default());
    let value = next_publish(&mut later);
    assert!(value.retain && label(&value, "saguin-offset").is_some());
    subscribe_qos1(&mut later, "events/a/r", Properties::default());
    let record = next_publish(&mut later);
    assert_eq!(record.payload, b"kept");
    assert!(
        label(&record, "saguin-offset").is_some(),
        "replayed by the channel"
    );
    assert_nothing_more(&mut later);
}

// ---- a slow subscriber -----------------------------------------------------

#[test]
fn a_slow_subscriber_never_holds_the_publisher_and_ends_with_the_newest_value() {
    // Receive Maximum 1 at QoS 1, and it reads nothing while the publisher runs.
    slow_subscriber(QoS::AtLeastOnce);
}

#[test]
fn a_slow_qos0_subscriber_whose_socket_is_full_ends_with_the_newest_value() {
    // At QoS 0 nothing bounds the window but the connection's buffer and
    // the socket, which fill while it reads nothing.
    slow_subscriber(QoS::AtMostOnce);
}

fn slow_subscriber(granted: QoS) {
    let dir = TempDir::new("latest-slow");
    // The subscriber reads nothing until the publisher is done, however
    // long a loaded machine makes that: a write it stalls must not reach
    // the write timeout, which would close it instead.
    let broker_yaml = format!("{REDB}  limits:\n    write_timeout: 10m\n");
    let broker = BrokerProcess::start_in(dir.path(), &broker_yaml, CHANNELS);
    let address = broker.address();
    let (mut slow, _) = durable(&address, "slow", Some(1));
    subscribe_with(&mut slow, "state/hot", qos(granted), Properties::default());
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    // At QoS 0, values large enough that the socket and the connection's
    // buffer fill long before the run ends.
    let (values, size_bytes): (u32, usize) = match granted {
        QoS::AtMostOnce => (1_000, 32 * 1024),
        _ => (3_000, 1024),
    };
    let payload = |i: u32| {
        let mut p = i.to_be_bytes().to_vec();
        p.resize(size_bytes, b'.');
        p
    };
    // Every PUBACK arrives while the subscriber has not read its socket.
    for i in 0..values {
        set(&mut publisher, "state/hot", &payload(i));
    }
    let mut last = None;
    let mut received = 0;
    loop {
        let value = next_publish(&mut slow);
        received += 1;
        let this = offset(&value);
        assert!(
            last.is_none_or(|l| this > l),
            "never an older value after a newer one"
        );
        last = Some(this);
        if value.payload == payload(values - 1) {
            break;
        }
    }
    assert!(received < values, "waiting values coalesced: {received}");
    assert_nothing_more(&mut slow);
}

/// A provider at its bound refuses a new topic 0x97, and still takes a new
/// value for a topic it holds, and its deletion: each replaces a record no
/// smaller than itself, in the same write.
#[test]
fn a_full_provider_still_takes_new_values_and_deletions_of_topics_it_holds() {
    let dir = TempDir::new("latest-full");
    // Sessions are kept apart: their memory is charged against their
    // provider's max_bytes, and 8KiB holds two at most.
    let broker_yaml = "  limits:\n    max_message_size: 1KiB\n    max_header_bytes: 1KiB\n  session:\n    storage: sessions\n  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 8KiB\n      sessions:\n        type: memory\n        max_bytes: 1MiB\n        snapshot_dir: none\n";
    let broker = BrokerProcess::start_in(dir.path(), broker_yaml, CHANNELS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    let value = |n: u8| vec![n; 500];
    let mut held = 0u8;
    loop {
        let topic = format!("state/t{held}");
        let ack = publish_with(&mut publisher, publish_packet(&topic, &value(1), 7));
        if ack.reason_code == ReasonCode::QUOTA_EXCEEDED {
            break;
        }
        assert_eq!(ack.reason_code, ReasonCode::SUCCESS, "{ack:?}");
        held += 1;
        assert!(held < 100, "the provider never filled");
    }
    assert!(held > 1);
    // Full: a new value for a held topic, then its deletion, are taken.
    set(&mut publisher, "state/t0", &value(2));
    set(&mut publisher, "state/t0", &value(3));
    set(&mut publisher, "state/t1", b"");
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    subscribe_qos1(&mut reader, "state/t0", Properties::default());
    assert_eq!(next_publish(&mut reader).payload, value(3));
}

// ---- crash and restart -----------------------------------------------------

#[test]
fn every_acknowledged_value_and_deletion_survives_sigkill_on_redb() {
    let dir = TempDir::new("latest-sigkill");
    let mut broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    for i in 0..20u32 {
        set(&mut publisher, &format!("state/keep/{i}"), b"v1");
        set(
            &mut publisher,
            &format!("state/keep/{i}"),
            format!("v2-{i}").as_bytes(),
        );
    }
    for i in 0..5u32 {
        set(&mut publisher, &format!("state/keep/{i}"), b"");
    }
    // A run cut short by the kill: the last acknowledged value of each topic
    // must be there afterwards (or a later one whose PUBACK was lost).
    let mut acknowledged: HashMap<String, u32> = HashMap::new();
    std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            let mut counter = 0u32;
            loop {
                let topic = format!("state/run/{}", counter % 10);
                let publish = publish_packet(&topic, &counter.to_be_bytes(), 5);
                publisher.send(&Packet::Publish(publish));
                match publisher.recv() {
                    Received::Packet(Packet::Puback(ack)) if ack.reason_code.0 == 0 => {
                        acknowledged.insert(topic, counter);
                    }
                    _ => return,
                }
                counter += 1;
            }
        });
        let mut watcher = RawClient::connect(&address, ProtocolVersion::V5, "watcher");
        subscribe_qos1(&mut watcher, "state/run/#", Properties::default());
        for _ in 0..200 {
            next_publish(&mut watcher);
        }
        broker.kill();
        run.join().unwrap();
    });
    assert!(acknowledged.len() == 10, "the run went round every topic");

    let broker = start(&dir);
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    subscribe_qos1(&mut reader, "state/#", with_deletions());
    let mut state: HashMap<String, Vec<u8>> = HashMap::new();
    let mut offsets = Vec::new();
    while state.len() < 30 {
        let value = next_publish(&mut reader);
        offsets.push(offset(&value));
        assert!(
            state.insert(value.topic.clone(), value.payload).is_none(),
            "one value per topic after a restart"
        );
    }
    assert_nothing_more(&mut reader);
    for i in 0..20u32 {
        let expected = if i < 5 {
            Vec::new()
        } else {
            format!("v2-{i}").into_bytes()
        };
        assert_eq!(
            state[&format!("state/keep/{i}")],
            expected,
            "state/keep/{i}"
        );
    }
    for (topic, counter) in acknowledged {
        let stored = u32::from_be_bytes(state[&topic].clone().try_into().unwrap());
        assert!(
            stored >= counter,
            "{topic}: {stored} is older than acknowledged {counter}"
        );
    }
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(offsets, sorted, "the state pass is in offset order");
}

#[test]
fn a_memory_channel_keeps_its_values_across_a_graceful_restart() {
    let dir = TempDir::new("latest-memory");
    let mut broker = BrokerProcess::start_in(dir.path(), MEMORY, CHANNELS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"1");
    set(&mut publisher, "state/a", b"2");
    set(&mut publisher, "state/b", b"x");
    set(&mut publisher, "state/b", b"");
    drop(publisher);
    assert!(broker.terminate().success());
    let broker = BrokerProcess::start_in(dir.path(), MEMORY, CHANNELS);
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    subscribe_qos1(&mut reader, "state/#", with_deletions());
    let state = [next_publish(&mut reader), next_publish(&mut reader)];
    assert_eq!(
        topics_and_payloads(&state),
        [
            ("state/a".to_string(), b"2".to_vec()),
            ("state/b".to_string(), Vec::new())
        ]
    );
    assert_nothing_more(&mut reader);
}

// ---- retention -------------------------------------------------------------

#[test]
fn retention_removes_old_values_and_old_deletions() {
    // One channel per clock, each with exactly one thing to remove, so
    // that each removal is one log line whenever the sweep runs.
    let dir = TempDir::new("latest-retention");
    let channels = "channels:\n  values:\n    type: latest\n    filter: v/#\n    retention_period: 1s\n    deletion_retention_period: none\n  deletions:\n    type: latest\n    filter: d/#\n    retention_period: none\n    deletion_retention_period: 1s\n";
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, channels);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    set(&mut publisher, "v/a", b"1");
    set(&mut publisher, "d/b", b"1");
    set(&mut publisher, "d/b", b"");
    set(&mut publisher, "d/kept", b"1");
    broker.wait_for_log("retention removed 1 values and deletions from values");
    broker.wait_for_log("retention removed 1 values and deletions from deletions");
    let mut later = RawClient::connect(&address, ProtocolVersion::V5, "later");
    for filter in ["v/#", "d/#"] {
        subscribe_with(&mut later, filter, qos(QoS::AtLeastOnce), with_deletions());
    }
    let kept = next_publish(&mut later);
    assert_eq!(
        kept.topic, "d/kept",
        "a value under retention_period: none stays"
    );
    assert_nothing_more(&mut later);
    let reply = point_read(&mut later, b"v/a", None);
    assert_eq!(
        reply.payload.len(),
        0,
        "a value past its period is not there at all"
    );
}

// ---- point reads -----------------------------------------------------------

fn request(
    topic: &str,
    payload: &[u8],
    response_topic: Option<&str>,
    correlation: Option<&[u8]>,
) -> Publish {
    let mut publish = publish_packet(topic, payload, 21);
    publish.properties.response_topic = response_topic.map(str::to_string);
    publish.properties.correlation_data = correlation.map(<[u8]>::to_vec);
    publish
}

/// A point read answered: the reply (which comes before the PUBACK).
fn point_read(client: &mut RawClient, key: &[u8], correlation: Option<&[u8]>) -> Publish {
    client.send(&Packet::Publish(request(
        "$saguin/kv/get",
        key,
        Some("replies/me"),
        correlation,
    )));
    let reply = match client.recv() {
        Received::Packet(Packet::Publish(reply)) => reply,
        other => panic!("expected the reply, got {other:?}"),
    };
    assert_eq!(reply.topic, "replies/me");
    match client.recv() {
        Received::Packet(Packet::Puback(ack)) => assert_eq!(ack.reason_code, ReasonCode::SUCCESS),
        other => panic!("expected the PUBACK, got {other:?}"),
    }
    reply
}

#[test]
fn a_point_read_answers_the_asking_session_alone_with_correlation_data() {
    let dir = TempDir::new("latest-kv");
    let broker = start(&dir);
    let address = broker.address();
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "pub");
    let mut value = publish_packet("state/pump", b"on", 4);
    value.properties.content_type = Some("text/plain".into());
    publish_with(&mut publisher, value);
    set(&mut publisher, "state/gone", b"1");
    set(&mut publisher, "state/gone", b"");
    let mut bystander = RawClient::connect(&address, ProtocolVersion::V5, "bystander");
    subscribe_qos1(&mut bystander, "replies/#", Properties::default());

    let mut asker = RawClient::connect(&address, ProtocolVersion::V5, "asker");
    let reply = point_read(&mut asker, b"state/pump", Some(b"req-1"));
    assert_eq!(reply.payload, b"on");
    assert_eq!(
        reply.properties.correlation_data.as_deref(),
        Some(&b"req-1"[..])
    );
    assert_eq!(reply.properties.content_type.as_deref(), Some("text/plain"));
    assert!(
        label(&reply, "saguin-timestamp").is_some() && label(&reply, "saguin-offset").is_some()
    );
    assert!(reply.properties.response_topic.is_none());

    let reply = point_read(&mut asker, b"state/pump", None);
    assert_eq!(
        reply.properties.correlation_data.as_deref(),
        Some(&b"state/pump"[..]),
        "without the caller's, the key is the Correlation Data"
    );
    for key in [&b"state/gone"[..], b"state/never"] {
        let reply = point_read(&mut asker, key, None);
        assert_eq!(reply.payload.len(), 0, "no value is an empty reply");
        assert_eq!(reply.properties.correlation_data.as_deref(), Some(key));
    }
    assert_nothing_more(&mut bystander);
    assert_nothing_more(&mut asker);
}

#[test]
fn a_point_read_after_a_restart_reads_the_value_from_storage() {
    let dir = TempDir::new("latest-kv-restart");
    let mut broker = start(&dir);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/fw", b"2.0.1");
    drop(publisher);
    broker.kill();
    let broker = start(&dir);
    let mut asker = RawClient::connect(&broker.address(), ProtocolVersion::V5, "asker");
    assert_eq!(point_read(&mut asker, b"state/fw", None).payload, b"2.0.1");
}

#[test]
fn every_point_read_refusal_rides_the_puback_with_its_code_and_reason() {
    let dir = TempDir::new("latest-kv-refusals");
    let broker = start(&dir);
    let mut asker = RawClient::connect(&broker.address(), ProtocolVersion::V5, "asker");
    let long = "state/".to_string() + &"x".repeat(1100);
    let deep = "state".to_string() + &"/x".repeat(250);
    let cases: [(&[u8], Option<&str>, u8); 10] = [
        (b"state/a", None, 0x83),
        (b"jobs/inspect", Some("r"), 0x90),
        (b"", Some("r"), 0x83),
        (b"state/+", Some("r"), 0x90),
        (b"state/#", Some("r"), 0x90),
        (b"$SYS/x", Some("r"), 0x90),
        (b"nobody/claims/this", Some("r"), 0x90),
        (b"events/a/1", Some("r"), 0x90),
        (long.as_bytes(), Some("r"), 0x90),
        (deep.as_bytes(), Some("r"), 0x90),
    ];
    for (key, response_topic, code) in cases {
        let ack = publish_with(
            &mut asker,
            request("$saguin/kv/get", key, response_topic, None),
        );
        assert_eq!(
            ack.reason_code.0,
            code,
            "{:?}",
            String::from_utf8_lossy(&key[..key.len().min(20)])
        );
        assert!(ack.properties.reason_string.is_some(), "a refusal says why");
    }
    // QoS 0: dropped, nothing answers.
    let mut quiet = request("$saguin/kv/get", b"state/a", Some("r"), None);
    quiet.qos = QoS::AtMostOnce;
    quiet.packet_id = None;
    asker.send(&Packet::Publish(quiet));
    assert_nothing_more(&mut asker);
}

// ---- the catalogue ---------------------------------------------------------

#[test]
fn the_catalogue_says_what_a_channel_is() {
    let dir = TempDir::new("latest-catalogue");
    let broker = start(&dir);
    let mut asker = RawClient::connect(&broker.address(), ProtocolVersion::V5, "asker");
    let mut ask = |name: &str| {
        let topic = format!("$saguin/catalogue/{name}");
        asker.send(&Packet::Publish(request(
            &topic,
            b"",
            Some("cat"),
            Some(b"c1"),
        )));
        let reply = match asker.recv() {
            Received::Packet(Packet::Publish(reply)) => reply,
            other => panic!("expected the reply, got {other:?}"),
        };
        assert_eq!(
            reply.properties.correlation_data.as_deref(),
            Some(&b"c1"[..])
        );
        assert!(
            matches!(asker.recv(), Received::Packet(Packet::Puback(ack)) if ack.reason_code.0 == 0)
        );
        String::from_utf8(reply.payload).unwrap()
    };
    assert_eq!(
        ask("state"),
        r#"{"name":"state","type":"latest","filter":"state/#","verbs":["write","read","delete"]}"#
    );
    assert_eq!(
        ask("events"),
        r#"{"name":"events","type":"append","filter":"events/{a,b}/#","verbs":["write","read","seek"]}"#
    );
    assert_eq!(
        ask("jobs"),
        r#"{"name":"jobs","type":"queue","filter":"jobs/#","verbs":["write","consume"],"pin":"$saguin/queue/jobs"}"#
    );
    assert_eq!(ask("nothing"), "", "no such channel is the empty reply");
    assert_eq!(ask(""), "", "nor is there one with no name");
    // Correlation Data is echoed, so a request without it is answered without.
    asker.send(&Packet::Publish(request(
        "$saguin/catalogue/state",
        b"",
        Some("cat"),
        None,
    )));
    match asker.recv() {
        Received::Packet(Packet::Publish(reply)) => {
            assert_eq!(reply.properties.correlation_data, None)
        }
        other => panic!("expected the reply, got {other:?}"),
    }
    assert!(
        matches!(asker.recv(), Received::Packet(Packet::Puback(ack)) if ack.reason_code.0 == 0)
    );
    let ack = publish_with(
        &mut asker,
        request("$saguin/catalogue/a/b", b"", Some("cat"), None),
    );
    assert_eq!(ack.reason_code, ReasonCode::TOPIC_NAME_INVALID);
    let ack = publish_with(
        &mut asker,
        request("$saguin/catalogue/state", b"", None, None),
    );
    assert_eq!(ack.reason_code, ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR);
    assert!(ack.properties.reason_string.is_some());
}

// ---- the schema-registry convention ----------------------------------------

#[test]
fn a_consumer_finds_a_payloads_schema_by_point_read() {
    let dir = TempDir::new("latest-schema");
    let broker = start(&dir);
    let address = broker.address();
    let schema =
        br#"{"type":"record","name":"WeatherReading","fields":[{"name":"c","type":"float"}]}"#;
    let mut registrar = RawClient::connect(&address, ProtocolVersion::V5, "registrar");
    set(&mut registrar, "schemas/acme/weather-v1", schema);

    let mut consumer = RawClient::connect(&address, ProtocolVersion::V5, "consumer");
    subscribe_qos1(&mut consumer, "state/weather/#", Properties::default());
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    let mut reading = publish_packet("state/weather/roof", br#"{"c":21.5}"#, 2);
    reading.properties.content_type = Some("application/json".into());
    reading
        .properties
        .user_properties
        .push(("schema".into(), "schemas/acme/weather-v1".into()));
    publish_with(&mut producer, reading);

    let delivered = next_publish(&mut consumer);
    assert_eq!(
        delivered.properties.content_type.as_deref(),
        Some("application/json")
    );
    let pointer = label(&delivered, "schema")
        .expect("the schema property is carried")
        .to_string();
    let found = point_read(&mut consumer, pointer.as_bytes(), None);
    assert_eq!(found.payload, schema);

    // Retired by a deletion: the pointer then finds nothing.
    set(&mut registrar, "schemas/acme/weather-v1", b"");
    assert_eq!(
        point_read(&mut consumer, pointer.as_bytes(), None)
            .payload
            .len(),
        0
    );
}

#[test]
fn values_a_changed_filter_no_longer_reaches_are_counted_at_startup() {
    let dir = TempDir::new("latest-filter-changed");
    let mut broker = start(&dir);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "pub");
    set(&mut publisher, "state/a", b"1");
    set(&mut publisher, "state/b/c", b"1");
    drop(publisher);
    assert!(broker.terminate().success());
    let narrowed = CHANNELS.replace("filter: state/#", "filter: state/+");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, &narrowed);
    broker.wait_for_log(
        "channel state: 1 stored values are under topics its filter no longer matches",
    );
}
