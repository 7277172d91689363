//! `queue` channels over real sockets on a redb provider: each job goes to
//! one worker at a time, comes back when its worker leaves or its lease
//! runs out, is dead-lettered when its attempts are spent, and survives a
//! crash unless a worker acknowledged it.

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use common::{BrokerProcess, RawClient, Received, TempDir, WAIT};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS, ReasonCode, Subscribe};
use saguin::codec::{Properties, SubscriptionOptions};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n";
const FORM: &str = "$saguin/queue/jobs";
const RESPONSE: &str = "$saguin/queue/jobs/response";

/// A queue `jobs` on `jobs/#` with `extra` keys.
fn queue(extra: &str) -> String {
    let extra: String = extra.lines().map(|l| format!("    {l}\n")).collect();
    format!("channels:\n  jobs:\n    type: queue\n    filter: jobs/#\n{extra}")
}

fn start(dir: &TempDir, extra: &str) -> BrokerProcess {
    BrokerProcess::start_in(dir.path(), REDB, &queue(extra))
}

fn subscribe_code(client: &mut RawClient, filter: &str, options: SubscriptionOptions) -> u8 {
    let subscribe = Subscribe {
        packet_id: 5,
        properties: Properties::default(),
        filters: vec![(filter.into(), options)],
    };
    client.send(&Packet::Subscribe(subscribe));
    loop {
        match client.recv() {
            Received::Packet(Packet::Suback(suback)) => return suback.reason_codes[0].0,
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed before the SUBACK"),
        }
    }
}

fn at(qos: QoS) -> SubscriptionOptions {
    SubscriptionOptions {
        qos,
        ..SubscriptionOptions::default()
    }
}

/// A client reading jobs: one that arrives while it waits for another
/// answer is kept for the next read.
struct Worker {
    client: RawClient,
    early: VecDeque<Publish>,
}

impl Worker {
    fn assert_alive(&mut self) {
        self.client.send(&Packet::Pingreq);
        loop {
            match self.client.recv() {
                Received::Packet(Packet::Pingresp) => return,
                Received::Packet(Packet::Publish(job)) => self.early.push_back(job),
                Received::Packet(_) => continue,
                Received::Closed => panic!("closed"),
            }
        }
    }
}

fn worker(address: &str, id: &str) -> Worker {
    let mut client = RawClient::connect(address, ProtocolVersion::V5, id);
    assert_eq!(subscribe_code(&mut client, FORM, at(QoS::AtLeastOnce)), 1);
    Worker {
        client,
        early: VecDeque::new(),
    }
}

/// The next job delivered to a worker, within `timeout`; other packets
/// (the PUBACKs of its answers) are passed over.
fn next_job_within(w: &mut Worker, timeout: Duration) -> Option<Publish> {
    if let Some(job) = w.early.pop_front() {
        return Some(job);
    }
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match w.client.recv_within(left)? {
            Received::Packet(Packet::Publish(publish)) => return Some(publish),
            Received::Packet(_) => continue,
            Received::Closed => return None,
        }
    }
}

fn next_job(w: &mut Worker) -> Publish {
    next_job_within(w, WAIT).expect("a job within the wait")
}

/// A reader of the dead-letter channel.
fn reader(address: &str) -> Worker {
    let mut client = RawClient::connect(address, ProtocolVersion::V5, "reader");
    assert_eq!(
        subscribe_code(&mut client, "jobs/__dlq/#", at(QoS::AtLeastOnce)),
        1
    );
    Worker {
        client,
        early: VecDeque::new(),
    }
}

fn label<'a>(job: &'a Publish, name: &str) -> Option<&'a str> {
    job.properties
        .user_properties
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn attempt(job: &Publish) -> u32 {
    label(job, "saguin-attempt").unwrap().parse().unwrap()
}

fn offset(job: &Publish) -> u64 {
    label(job, "saguin-offset").unwrap().parse().unwrap()
}

fn puback(w: &mut Worker, job: &Publish) {
    w.client.send(&Packet::Puback(PubAck {
        packet_id: job.packet_id.unwrap(),
        ..PubAck::default()
    }));
}

/// Answers `job` at QoS 1 and waits for the broker to take the answer; a
/// job offered meanwhile is kept.
fn answer(w: &mut Worker, job: &Publish, outcome: &str) {
    let mut publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: RESPONSE.into(),
        packet_id: Some(900),
        payload: outcome.as_bytes().to_vec(),
        ..Publish::default()
    };
    publish.properties.correlation_data = job.properties.correlation_data.clone();
    w.client.send(&Packet::Publish(publish));
    loop {
        match w.client.recv() {
            Received::Packet(Packet::Puback(ack)) if ack.packet_id == 900 => {
                assert_eq!(ack.reason_code.0, 0);
                return;
            }
            Received::Packet(Packet::Publish(job)) => w.early.push_back(job),
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while answering"),
        }
    }
}

/// Publishes at QoS 1 and returns the PUBACK's reason code.
fn publish(client: &mut RawClient, topic: &str, payload: &[u8], properties: Properties) -> u8 {
    let publish = Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(1),
        payload: payload.to_vec(),
        properties,
        ..Publish::default()
    };
    client.send(&Packet::Publish(publish));
    loop {
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) => return ack.reason_code.0,
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed while publishing"),
        }
    }
}

#[test]
fn two_workers_never_hold_the_same_record() {
    let dir = TempDir::new("queue-two");
    let broker = start(&dir, "visibility_timeout: 120s");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    const JOBS: u64 = 60;
    for i in 0..JOBS {
        assert_eq!(
            publish(
                &mut producer,
                &format!("jobs/{i}"),
                b"x",
                Properties::default()
            ),
            0
        );
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let run = |id: &'static str| {
        let address = address.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut client = worker(&address, id);
            let mut taken = Vec::new();
            let deadline = Instant::now() + 3 * WAIT;
            while done.load(std::sync::atomic::Ordering::SeqCst) < JOBS {
                assert!(Instant::now() < deadline, "the backlog was not drained");
                let Some(job) = next_job_within(&mut client, Duration::from_millis(100)) else {
                    continue;
                };
                assert_eq!(attempt(&job), 1, "nothing was redelivered");
                taken.push(offset(&job));
                puback(&mut client, &job);
                answer(&mut client, &job, "ack");
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            taken
        })
    };
    let (a, b) = (run("w1"), run("w2"));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    let first: BTreeSet<u64> = a.iter().copied().collect();
    let second: BTreeSet<u64> = b.iter().copied().collect();
    assert_eq!(first.len(), a.len());
    assert_eq!(second.len(), b.len());
    assert!(first.is_disjoint(&second), "{first:?} / {second:?}");
    let all: BTreeSet<u64> = first.union(&second).copied().collect();
    assert_eq!(all, (1..=JOBS).collect());
}

#[test]
fn a_worker_that_disconnects_mid_job_has_it_redelivered_to_another_with_attempt_2() {
    let dir = TempDir::new("queue-leave");
    let broker = start(&dir, "");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    publish(&mut producer, "jobs/one", b"work", Properties::default());
    let mut first = worker(&address, "w1");
    let job = next_job(&mut first);
    assert_eq!(attempt(&job), 1);
    let mut second = worker(&address, "w2");
    puback(&mut first, &job);
    first.assert_alive();
    drop(first);
    let again = next_job(&mut second);
    assert_eq!(offset(&again), offset(&job));
    assert_eq!(attempt(&again), 2);
    assert_eq!(again.payload, b"work");
    assert_ne!(
        again.properties.correlation_data, job.properties.correlation_data,
        "each attempt has its own Delivery ID"
    );
}

#[test]
fn a_stale_delivery_id_after_a_timeout_resolves_nothing() {
    let dir = TempDir::new("queue-stale");
    let broker = start(&dir, "visibility_timeout: 1s");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    publish(&mut producer, "jobs/slow", b"x", Properties::default());
    let mut slow = worker(&address, "slow");
    let job = next_job(&mut slow);
    puback(&mut slow, &job);
    // The lease runs out; the only other worker gets it as attempt 2.
    let mut other = worker(&address, "other");
    let second = next_job(&mut other);
    assert_eq!(attempt(&second), 2);
    puback(&mut other, &second);
    other.assert_alive();
    // The slow worker's ack comes too late and changes nothing.
    answer(&mut slow, &job, "ack");
    drop(other);
    // Still unresolved: it comes back once more.
    let third = next_job(&mut slow);
    assert_eq!(offset(&third), offset(&job));
    assert_eq!(attempt(&third), 3);
}

#[test]
fn a_poison_job_is_dead_lettered_and_a_redrive_keeping_its_id_is_a_new_record() {
    let dir = TempDir::new("queue-dlq");
    let broker = start(&dir, "retry:\n  max_attempts: 2");
    let address = broker.address();
    let mut reader = reader(&address);
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    let own = Properties {
        user_properties: vec![("tenant".into(), "a".into())],
        ..Properties::default()
    };
    assert_eq!(publish(&mut producer, "jobs/resize/42", b"bad", own), 0);
    let mut w = worker(&address, "w");
    for expected in 1..=2 {
        let job = next_job(&mut w);
        assert_eq!(attempt(&job), expected);
        // Answered before the PUBACK, as a handler answering inline does.
        answer(&mut w, &job, "return");
        puback(&mut w, &job);
    }
    let letter = next_job(&mut reader);
    assert_eq!(letter.topic, "jobs/__dlq/resize/42");
    assert_eq!(letter.payload, b"bad");
    assert_eq!(label(&letter, "tenant"), Some("a"));
    assert_eq!(label(&letter, "saguin-dlq-channel"), Some("jobs"));
    assert_eq!(label(&letter, "saguin-dlq-offset"), Some("1"));
    assert_eq!(label(&letter, "saguin-dlq-attempts"), Some("2"));
    assert_eq!(
        label(&letter, "saguin-dlq-reason"),
        Some("attempts_exhausted")
    );
    for name in ["saguin-dlq-first", "saguin-dlq-last", "saguin-dlq-at"] {
        let at: u64 = label(&letter, name).unwrap().parse().unwrap();
        assert!(at > 1_600_000_000_000, "{name} is a Unix time in ms");
    }
    assert!(next_job_within(&mut w, Duration::from_millis(500)).is_none());
    // The dead-letter channel takes records only from its queue.
    assert_eq!(
        publish(
            &mut producer,
            "jobs/__dlq/forged",
            b"x",
            Properties::default()
        ),
        ReasonCode::NOT_AUTHORIZED.0
    );
    // Redrive: the letter's payload and properties back to the job's topic.
    let id = label(&letter, "saguin-id").unwrap().to_string();
    let back = Properties {
        user_properties: letter
            .properties
            .user_properties
            .iter()
            .filter(|(k, _)| k == "tenant" || k == "saguin-id" || k.starts_with("saguin-dlq-"))
            .cloned()
            .collect(),
        ..Properties::default()
    };
    assert_eq!(
        publish(&mut producer, "jobs/resize/42", &letter.payload, back),
        0
    );
    let job = next_job(&mut w);
    assert_eq!(label(&job, "saguin-id"), Some(id.as_str()));
    assert_eq!(offset(&job), 2, "a new record");
    assert_eq!(attempt(&job), 1, "with a fresh count");
    assert_eq!(label(&job, "saguin-dlq-reason"), None);
    assert_eq!(label(&job, "tenant"), Some("a"));
}

#[test]
fn a_full_queue_refuses_publishes_but_still_dead_letters_and_drains() {
    let dir = TempDir::new("queue-full");
    let broker = start(&dir, "max_bytes: 2KiB\nretry:\n  max_attempts: 1");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    let payload = vec![b'j'; 200];
    let mut accepted = 0;
    loop {
        let code = publish(&mut producer, "jobs/x", &payload, Properties::default());
        if code != 0 {
            assert_eq!(code, ReasonCode::QUOTA_EXCEEDED.0);
            break;
        }
        accepted += 1;
        assert!(accepted < 100, "max_bytes never refused");
    }
    let mut w = worker(&address, "w");
    let first = next_job(&mut w);
    puback(&mut w, &first);
    answer(&mut w, &first, "return");
    for _ in 1..accepted {
        let job = next_job(&mut w);
        puback(&mut w, &job);
        answer(&mut w, &job, "ack");
    }
    assert!(next_job_within(&mut w, Duration::from_millis(500)).is_none());
    let mut reader = reader(&address);
    assert_eq!(offset(&next_job(&mut reader)), 1);
    assert_eq!(
        publish(&mut producer, "jobs/x", &payload, Properties::default()),
        0
    );
}

/// Publishes `job-<i>` for `range` at QoS 1 with a window of 16; returns
/// the payloads the broker acknowledged before the connection ended.
fn publish_jobs(producer: &mut RawClient, range: std::ops::Range<u32>) -> Vec<String> {
    let mut acknowledged = Vec::new();
    let mut in_flight = VecDeque::new();
    let mut next = range.start;
    while next < range.end || !in_flight.is_empty() {
        while next < range.end && in_flight.len() < 16 {
            let packet_id = (next % 60_000) as u16 + 1;
            let publish = Publish {
                qos: QoS::AtLeastOnce,
                topic: format!("jobs/{next}"),
                packet_id: Some(packet_id),
                payload: format!("job-{next}").into_bytes(),
                ..Publish::default()
            };
            producer.send(&Packet::Publish(publish));
            in_flight.push_back(next);
            next += 1;
        }
        match producer.recv() {
            Received::Packet(Packet::Puback(ack)) => {
                let i = in_flight.pop_front().expect("an ack for something sent");
                assert_eq!(ack.reason_code.0, 0, "refused: {ack:?}");
                acknowledged.push(format!("job-{i}"));
            }
            Received::Closed => break,
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
    acknowledged
}

#[test]
fn sigkill_mid_run_on_redb_loses_no_job() {
    let dir = TempDir::new("queue-kill");
    let mut broker = start(&dir, "visibility_timeout: 120s");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    let mut published = publish_jobs(&mut producer, 0..600);
    let mut w = worker(&address, "w");
    let (more, acked) = std::thread::scope(|scope| {
        let run = scope.spawn(move || publish_jobs(&mut producer, 600..20_000));
        let mut acked = BTreeSet::new();
        while acked.len() < 200 {
            let job = next_job(&mut w);
            puback(&mut w, &job);
            answer(&mut w, &job, "ack");
            acked.insert(String::from_utf8(job.payload).unwrap());
        }
        broker.kill();
        (run.join().unwrap(), acked)
    });
    published.extend(more);
    let broker = start(&dir, "visibility_timeout: 120s");
    let mut w = worker(&broker.address(), "w-after");
    let owed: BTreeSet<String> = published
        .iter()
        .filter(|job| !acked.contains(*job))
        .cloned()
        .collect();
    assert!(owed.len() >= 400, "the restart has work left to offer");
    let mut after = BTreeSet::new();
    // Every job a worker had not acked must come again; one that was acked
    // just before the kill may come again too.
    while !owed.is_subset(&after) {
        let Some(job) = next_job_within(&mut w, WAIT) else {
            let lost: Vec<&String> = owed.difference(&after).take(5).collect();
            panic!("acknowledged to their publisher, never acked by a worker, and gone: {lost:?}");
        };
        // One job may have been out with the worker at the kill: its
        // attempt was counted and survives.
        assert!(attempt(&job) <= 2, "{job:?}");
        puback(&mut w, &job);
        answer(&mut w, &job, "ack");
        after.insert(String::from_utf8(job.payload).unwrap());
    }
}

#[test]
fn every_subscription_refusal_carries_its_code() {
    let dir = TempDir::new("queue-refusals");
    let broker = start(&dir, "");
    let address = broker.address();
    let mut client = RawClient::connect(&address, ProtocolVersion::V5, "c");
    let no_local = SubscriptionOptions {
        no_local: true,
        ..at(QoS::AtLeastOnce)
    };
    let cases = [
        ("$saguin/queue/jobs/#", at(QoS::AtLeastOnce), 0x8F),
        ("$saguin/queue/jobs/w-7", at(QoS::AtLeastOnce), 0x8F),
        ("$saguin/queue/#", at(QoS::AtLeastOnce), 0x8F),
        ("$saguin/queue/jbos", at(QoS::AtLeastOnce), 0x8F),
        ("$saguin/queue/jobs__dlq", at(QoS::AtLeastOnce), 0x8F),
        ("jobs/resize/+", at(QoS::AtLeastOnce), 0x8F),
        (FORM, no_local, 0x8F),
        (FORM, at(QoS::AtMostOnce), 0x83),
        (FORM, at(QoS::ExactlyOnce), 0x01),
        ("#", at(QoS::AtLeastOnce), 0x01),
    ];
    for (filter, options, code) in cases {
        assert_eq!(
            subscribe_code(&mut client, filter, options),
            code,
            "{filter}"
        );
    }
    client.assert_alive();
    let mut old = RawClient::connect(&address, ProtocolVersion::V311, "old");
    assert_eq!(subscribe_code(&mut old, FORM, at(QoS::AtLeastOnce)), 0x80);
    old.assert_alive();
}

#[test]
fn a_restart_offers_every_held_job_at_once_and_attempt_counts_survive() {
    let dir = TempDir::new("queue-restart");
    let keys = "visibility_timeout: 120s\nretry:\n  max_attempts: 2";
    let mut broker = start(&dir, keys);
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    publish(&mut producer, "jobs/a", b"a", Properties::default());
    publish(&mut producer, "jobs/b", b"b", Properties::default());
    let mut w = worker(&address, "w");
    let held = next_job(&mut w);
    assert_eq!(held.payload, b"a");
    puback(&mut w, &held);
    w.assert_alive();
    // A stop waits for what storage was asked, the attempt count included.
    assert!(broker.terminate().success());
    // Nothing is in flight after the restart: both jobs are offered at
    // once, the held one on its second and last attempt.
    let broker = start(&dir, keys);
    let address = broker.address();
    let mut w = worker(&address, "w2");
    let mut w2 = worker(&address, "w3");
    let first = next_job(&mut w);
    let second = next_job(&mut w2);
    let mut seen = [
        (first.payload.clone(), attempt(&first)),
        (second.payload.clone(), attempt(&second)),
    ];
    seen.sort();
    assert_eq!(seen, [(b"a".to_vec(), 2), (b"b".to_vec(), 1)]);
    let (holder, job) = if first.payload == b"a" {
        (&mut w, first)
    } else {
        (&mut w2, second)
    };
    puback(holder, &job);
    answer(holder, &job, "return");
    let mut reader = reader(&address);
    let letter = next_job(&mut reader);
    assert_eq!(letter.payload, b"a");
    assert_eq!(label(&letter, "saguin-dlq-attempts"), Some("2"));
}

#[test]
fn a_filter_crossing_a_queue_is_served_everything_but_its_jobs() {
    let dir = TempDir::new("queue-cross");
    let broker = start(&dir, "");
    let address = broker.address();
    let mut watcher = RawClient::connect(&address, ProtocolVersion::V5, "watcher");
    assert_eq!(subscribe_code(&mut watcher, "#", at(QoS::AtLeastOnce)), 1);
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    assert_eq!(
        publish(&mut producer, "jobs/secret", b"work", Properties::default()),
        0
    );
    assert_eq!(
        publish(&mut producer, "marker/after", b"m", Properties::default()),
        0
    );
    // Deliveries to one session keep their order: the marker comes first
    // only if the job never came.
    match watcher.recv() {
        Received::Packet(Packet::Publish(first)) => assert_eq!(first.topic, "marker/after"),
        other => panic!("expected the marker, got {other:?}"),
    }
    let mut w = worker(&address, "w");
    assert_eq!(next_job(&mut w).topic, "jobs/secret");
}

#[test]
fn the_dead_letter_channel_is_read_and_sought_as_an_append_channel() {
    let dir = TempDir::new("queue-dlq-seek");
    let broker = start(&dir, "retry:\n  max_attempts: 1");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    assert_eq!(
        publish(&mut producer, "jobs/p", b"poison", Properties::default()),
        0
    );
    let mut w = worker(&address, "w");
    let job = next_job(&mut w);
    puback(&mut w, &job);
    answer(&mut w, &job, "return");
    // A durable reader, added after the fact, replays the channel.
    let mut reader = RawClient::open(&address, ProtocolVersion::V5);
    let mut connect = common::connect_packet(ProtocolVersion::V5, "auditor");
    connect.properties.session_expiry_interval_s = Some(600);
    reader.send(&Packet::Connect(Box::new(connect)));
    assert!(matches!(reader.recv(), Received::Packet(Packet::Connack(c)) if c.reason_code.0 == 0));
    assert_eq!(
        subscribe_code(&mut reader, "jobs/__dlq/#", at(QoS::AtLeastOnce)),
        1
    );
    let read_letter = |reader: &mut RawClient| loop {
        match reader.recv() {
            Received::Packet(Packet::Publish(p)) if p.topic == "jobs/__dlq/p" => {
                reader.send(&Packet::Puback(PubAck {
                    packet_id: p.packet_id.unwrap(),
                    ..PubAck::default()
                }));
                return p;
            }
            Received::Packet(_) => continue,
            Received::Closed => panic!("closed"),
        }
    };
    let first = read_letter(&mut reader);
    assert_eq!(label(&first, "saguin-offset"), Some("1"));
    // Seek back to the floor: the letter comes again.
    reader.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: "$saguin/consumer/jobs__dlq/seek".into(),
        packet_id: Some(77),
        payload: b"0".to_vec(),
        ..Publish::default()
    }));
    let again = read_letter(&mut reader);
    assert_eq!(again.payload, b"poison");
    assert_eq!(label(&again, "saguin-offset"), Some("1"));
    assert_eq!(
        label(&again, "saguin-dlq-reason"),
        Some("attempts_exhausted")
    );
}

/// Sends a QoS 2 publish and returns its PUBREC's reason code.
fn publish_exactly_once(client: &mut RawClient, topic: &str, packet_id: u16) -> u8 {
    client.send(&Packet::Publish(Publish {
        qos: QoS::ExactlyOnce,
        topic: topic.into(),
        packet_id: Some(packet_id),
        payload: vec![b'j'; 200],
        ..Publish::default()
    }));
    match client.recv() {
        Received::Packet(Packet::Pubrec(ack)) => {
            assert_eq!(ack.packet_id, packet_id);
            ack.reason_code.0
        }
        other => panic!("expected a PUBREC, got {other:?}"),
    }
}

/// A queue at its `max_bytes` refuses a QoS 2 publish at PUBREC (0x97);
/// once a job is resolved it takes one again, PUBREC to PUBCOMP.
#[test]
fn a_full_queue_refuses_exactly_once_at_pubrec_until_a_job_is_resolved() {
    let dir = TempDir::new("queue-full-qos2");
    let broker = start(&dir, "max_bytes: 2KiB");
    let address = broker.address();
    let mut producer = RawClient::connect(&address, ProtocolVersion::V5, "producer");
    let payload = vec![b'j'; 200];
    let mut accepted = 0;
    while publish(&mut producer, "jobs/x", &payload, Properties::default()) == 0 {
        accepted += 1;
        assert!(accepted < 100, "max_bytes never refused");
    }
    assert_eq!(
        publish_exactly_once(&mut producer, "jobs/x", 500),
        ReasonCode::QUOTA_EXCEEDED.0
    );
    let mut w = worker(&address, "w");
    let job = next_job(&mut w);
    puback(&mut w, &job);
    answer(&mut w, &job, "ack");
    assert_eq!(publish_exactly_once(&mut producer, "jobs/x", 501), 0);
    producer.send(&Packet::Pubrel(PubAck {
        packet_id: 501,
        ..PubAck::default()
    }));
    match producer.recv() {
        Received::Packet(Packet::Pubcomp(ack)) => assert_eq!(ack.reason_code.0, 0, "{ack:?}"),
        other => panic!("expected a PUBCOMP, got {other:?}"),
    }
}
