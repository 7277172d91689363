//! `append` channels over real sockets, on real providers: what a consumer
//! misses while away it gets on return, and nothing acknowledged is lost to
//! a crash or a restart.

mod common;

use std::collections::BTreeSet;

use common::{durable_connect, publish_all, BrokerProcess, RawClient, Received, TempDir};
use saguin::codec::{Packet, ProtocolVersion, PubAck, QoS};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const MEMORY: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: {dir}\n";
const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";

/// Reads `count` deliveries, acknowledging each; returns (offset, payload).
fn consume(client: &mut RawClient, count: usize) -> Vec<(u64, Vec<u8>)> {
    let mut received = Vec::new();
    while received.len() < count {
        match client.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                let offset = publish
                    .properties
                    .user_properties
                    .iter()
                    .find(|(name, _)| name == "saguin-offset")
                    .map(|(_, value)| value.parse::<u64>().expect("a numeric offset"))
                    .expect("a channel delivery carries saguin-offset");
                if let Some(packet_id) = publish.packet_id {
                    client.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
                received.push((offset, publish.payload));
            }
            other => panic!(
                "expected a delivery, got {other:?} after {} of {count}",
                received.len()
            ),
        }
    }
    received
}

fn payloads(prefix: &str, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("{prefix}-{i:05}").into_bytes())
        .collect()
}

/// The redb storage with a checkpoint a minute away: what a test stores
/// before it kills the broker is durable only in the journal.
fn redb_checkpointing_every_minute() -> String {
    REDB.replace(
        "        max_bytes: 64MiB\n",
        "        max_bytes: 64MiB\n        checkpoint_interval: 1m\n",
    )
}

/// Starts the broker again on `dir` and reads `count` records with a new
/// consumer, from the channel's start.
fn restart_and_read(
    dir: &std::path::Path,
    storage: &str,
    count: usize,
) -> (BrokerProcess, RawClient, Vec<(u64, Vec<u8>)>) {
    let broker = BrokerProcess::start_in(dir, storage, EVENTS);
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    let records = consume(&mut reader, count);
    (broker, reader, records)
}

fn assert_rising(received: &[(u64, Vec<u8>)]) {
    assert!(
        received.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets strictly rise: {:?}",
        received.iter().map(|r| r.0).collect::<Vec<_>>()
    );
}

#[test]
fn a_durable_consumer_gets_exactly_what_it_missed() {
    let dir = TempDir::new("missed");
    let broker = BrokerProcess::start_in(dir.path(), REDB, EVENTS);
    let address = broker.address();
    let (mut consumer, _) = durable_connect(&address, "consumer");
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    let before = payloads("before", 5);
    publish_all(&mut publisher, "events/a", &before);
    let first = consume(&mut consumer, 5);
    assert_eq!(
        first.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        before
    );
    consumer.send(&Packet::Disconnect(Default::default()));
    drop(consumer);

    let missed = payloads("missed", 30);
    publish_all(&mut publisher, "events/a", &missed);
    let (mut consumer, session_present) = durable_connect(&address, "consumer");
    assert!(session_present);
    let again = consume(&mut consumer, 30);
    assert_eq!(
        again.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        missed,
        "exactly what it missed, in order"
    );
    assert_rising(&again);
    assert_eq!(
        again[0].0, 6,
        "resumed right after the last acknowledged record (offsets start at 1)"
    );
    // And nothing more.
    assert!(consumer
        .recv_within(std::time::Duration::from_millis(300))
        .is_none());
}

#[test]
fn every_acknowledged_record_survives_sigkill_on_redb() {
    let dir = TempDir::new("sigkill");
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, EVENTS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let all = payloads("record", 20_000);
    // Kill the broker from another thread while the run is in progress.
    let acknowledged = std::thread::scope(|scope| {
        let run = scope.spawn(|| publish_all(&mut publisher, "events/load", &all));
        // Wait until some records are stored, then cut the power.
        let mut watcher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "watcher");
        watcher.subscribe("events/#", QoS::AtLeastOnce);
        consume(&mut watcher, 300);
        broker.kill();
        run.join().unwrap()
    });
    assert!(
        !acknowledged.is_empty() && acknowledged.len() < all.len(),
        "killed mid-run: {} acknowledged",
        acknowledged.len()
    );

    let broker = BrokerProcess::start_in(dir.path(), REDB, EVENTS);
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    // Read until the reader has everything acknowledged; more may be there
    // (stored, but the PUBACK lost with the process), never fewer.
    let mut received = Vec::new();
    let wanted: BTreeSet<Vec<u8>> = acknowledged.iter().cloned().collect();
    let mut seen = BTreeSet::new();
    while !wanted.is_subset(&seen) {
        let batch = consume(&mut reader, 1);
        seen.insert(batch[0].1.clone());
        received.extend(batch);
    }
    assert_rising(&received);
    assert_eq!(
        received[0].0, 1,
        "the replay starts at the first record, offset 1"
    );
    let distinct: BTreeSet<u64> = received.iter().map(|r| r.0).collect();
    assert_eq!(distinct.len(), received.len(), "no offset reused");
}

#[test]
fn records_acknowledged_only_into_the_journal_survive_sigkill_at_their_offsets() {
    let dir = TempDir::new("journal-sigkill");
    let storage = redb_checkpointing_every_minute();
    let mut broker = BrokerProcess::start_in(dir.path(), &storage, EVENTS);
    let mut watcher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "watcher");
    watcher.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let all = payloads("journal", 500);
    let acknowledged = publish_all(&mut publisher, "events/j", &all);
    assert_eq!(acknowledged, all);
    // What the live broker delivered, with the offsets it gave.
    let live = consume(&mut watcher, all.len());
    assert!(dir.path().join("saguin.redb.journal").exists());
    broker.kill();

    let (_broker, mut reader, after) = restart_and_read(dir.path(), &storage, all.len());
    assert_eq!(
        after, live,
        "every acknowledged record, at the offset it had"
    );
    assert_eq!(
        after.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..=500).collect::<Vec<u64>>()
    );
    // And nothing more.
    assert!(reader
        .recv_within(std::time::Duration::from_millis(300))
        .is_none());
}

/// A record is acknowledged once its journal frame is synced; the redb
/// transaction holding it stays open for the records after it until a
/// read or a bound commits it. Killed right after the last PUBACK, with no
/// reader having looked, the latest records are in no committed
/// transaction, and the journal brings every one back at its offset.
#[test]
fn records_acknowledged_while_their_transaction_is_open_survive_sigkill() {
    let dir = TempDir::new("open-transaction-sigkill");
    let storage = redb_checkpointing_every_minute();
    let mut broker = BrokerProcess::start_in(dir.path(), &storage, EVENTS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let all = payloads("open", 300);
    let acknowledged = publish_all(&mut publisher, "events/o", &all);
    assert_eq!(acknowledged, all);
    broker.kill();

    let (_broker, _reader, after) = restart_and_read(dir.path(), &storage, all.len());
    assert_eq!(
        after,
        (1..=300u64).zip(all).collect::<Vec<_>>(),
        "every acknowledged record, in order, at offsets from 1"
    );
}

#[test]
fn a_memory_channel_survives_a_graceful_restart_and_continues_its_offsets() {
    let dir = TempDir::new("memory");
    let mut broker = BrokerProcess::start_in(dir.path(), MEMORY, EVENTS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let first = payloads("first", 20);
    publish_all(&mut publisher, "events/m", &first);
    drop(publisher);
    assert!(broker.terminate().success());

    let broker = BrokerProcess::start_in(dir.path(), MEMORY, EVENTS);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let second = payloads("second", 5);
    publish_all(&mut publisher, "events/m", &second);
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    let received = consume(&mut reader, 25);
    let expected: Vec<Vec<u8>> = first.iter().chain(&second).cloned().collect();
    assert_eq!(
        received.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        expected
    );
    assert_eq!(
        received.iter().map(|r| r.0).collect::<Vec<_>>(),
        (1..26).collect::<Vec<u64>>()
    );
}

#[test]
fn retention_by_bytes_moves_the_floor() {
    let dir = TempDir::new("retention");
    let channels =
        "channels:\n  events:\n    type: append\n    filter: events/#\n    retention_bytes: 8KiB\n";
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, channels);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    let records: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 1024]).collect();
    publish_all(&mut publisher, "events/big", &records);
    broker.wait_for_log("retention removed");
    let mut reader = RawClient::connect(&broker.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    let first = consume(&mut reader, 1);
    assert!(
        first[0].0 > 1,
        "the floor rose above 0: the reader starts at {}",
        first[0].0
    );
}

#[test]
fn a_sqlite_provider_is_refused_naming_redb() {
    let dir = TempDir::new("sqlite");
    let path = dir.path().join("bad.yaml");
    let text = "broker:\n  id: t\n  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: sqlite\n        file_path: /var/lib/saguin/saguin.db\n";
    std::fs::write(&path, text).unwrap();
    let output = common::check_config(&path);
    assert!(!output.status.success());
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("bad.yaml") && message.contains("broker.storage.providers.local.type"),
        "{message}"
    );
    assert!(message.contains("redb"), "{message}");
}

#[test]
fn a_311_subscriber_gets_the_topic_and_payload_of_a_record() {
    let dir = TempDir::new("v311");
    let broker = BrokerProcess::start_in(dir.path(), REDB, EVENTS);
    let mut subscriber = RawClient::connect(&broker.address(), ProtocolVersion::V311, "old-device");
    subscriber.subscribe("events/#", QoS::AtLeastOnce);
    let mut publisher = RawClient::connect(&broker.address(), ProtocolVersion::V5, "publisher");
    publish_all(&mut publisher, "events/door", &[b"open".to_vec()]);
    match subscriber.recv() {
        Received::Packet(Packet::Publish(publish)) => {
            assert_eq!(
                (publish.topic.as_str(), publish.payload.as_slice()),
                ("events/door", &b"open"[..])
            );
            assert!(
                publish.properties.user_properties.is_empty(),
                "3.1.1 has no room for labels"
            );
        }
        other => panic!("expected the record, got {other:?}"),
    }
}

#[test]
fn a_consumer_whose_position_retention_passed_is_told_its_session_is_gone() {
    let dir = TempDir::new("below-floor");
    let channels =
        "channels:\n  events:\n    type: append\n    filter: events/#\n    retention_bytes: 4KiB\n";
    let mut broker = BrokerProcess::start_in(dir.path(), REDB, channels);
    let address = broker.address();
    let (mut consumer, _) = durable_connect(&address, "lagging");
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    consumer.send(&Packet::Disconnect(Default::default()));
    drop(consumer);
    // While it is away, far more than 4 KiB arrives: retention moves the
    // floor past everything it had not read.
    let mut publisher = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    let records: Vec<Vec<u8>> = (0..40).map(|i| vec![i as u8; 1024]).collect();
    publish_all(&mut publisher, "events/big", &records);
    broker.wait_for_log("retention removed");
    let (mut consumer, session_present) = durable_connect(&address, "lagging");
    assert!(
        !session_present,
        "a gap is reported, never served in silence"
    );
    broker.wait_for_log("fell below its floor");
    // Subscribing again starts where the channel says: at the floor.
    consumer.subscribe("events/#", QoS::AtLeastOnce);
    let first = consume(&mut consumer, 1);
    assert!(first[0].0 > 1, "served from the floor, {}", first[0].0);
}
