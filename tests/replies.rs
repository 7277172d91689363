//! What a client is sent in reply to its own requests is bounded like
//! everything else it is owed: a client that asks and never reads is not
//! read from once it is owed `OUTBOX_PAUSE_BYTES` and the largest reply
//! one more request may bring, so the broker's resident memory grows by no
//! more than the per-connection figure its startup line prints. Each kind
//! of reply is driven by a client that writes requests until the broker
//! stops taking them, and never reads one answer.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{BrokerProcess, RawClient, Received, TempDir, WAIT};
use saguin::codec::{encode, Packet, Properties, ProtocolVersion, PubAck, Publish, QoS};
use saguin::codec::{Subscribe, SubscriptionOptions};

const STORAGE: &str = "  storage:\n    default: volatile\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      volatile:\n        type: memory\n        max_bytes: 256MiB\n        snapshot_dir: {dir}\n";
const LIMITS: &str = "  limits:\n    max_connections: 8\n    max_message_size: 128KiB\n    session_queue_bytes: 128KiB\n";
const CHANNELS: &str = "channels:\n  state:\n    type: latest\n    filter: state/#\n  events:\n    type: append\n    filter: events/#\n  jobs:\n    type: queue\n    filter: jobs/#\n";

/// Correlation Data a request carries where its reply is small otherwise,
/// which the reply echoes: large, so that a few requests fill the socket's
/// buffers once the broker stops reading them, and each reply is large.
const CORRELATION_BYTES: usize = 32 * 1024;
/// A value larger than a third of the `latest` body cache: four of them
/// leave the first out of it, so reading it goes to storage.
const VALUE_BYTES: usize = 100 * 1024;
/// What a client writes at most, if the broker never stops reading it.
const FLOOD_BYTES: usize = 16 * 1024 * 1024;

struct Rig {
    label: &'static str,
    broker: BrokerProcess,
    /// The startup line's figure for one connection.
    per_connection_bytes: u64,
    _dir: TempDir,
}

fn start(label: &'static str) -> Rig {
    let dir = TempDir::new(label);
    let extra = format!("{STORAGE}{LIMITS}");
    let mut broker = BrokerProcess::start_in(dir.path(), &extra, CHANNELS);
    let line = broker.wait_for_log("bytes of buffers");
    let per_connection_bytes = line
        .split("each holding at most ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no per-connection figure in {line:?}"));
    Rig {
        label,
        broker,
        per_connection_bytes,
        _dir: dir,
    }
}

/// The broker's resident memory, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib * 1024
}

/// An MQTT 5 client, with an hour's session where `durable`.
fn connect(address: &str, client_id: &str, durable: bool) -> RawClient {
    match durable {
        true => common::durable_connect(address, client_id).0,
        false => RawClient::connect(address, ProtocolVersion::V5, client_id),
    }
}

fn publish(client: &mut RawClient, topic: &str, payload: Vec<u8>) {
    client.send(&Packet::Publish(Publish {
        qos: QoS::AtLeastOnce,
        topic: topic.into(),
        packet_id: Some(1),
        payload,
        ..Publish::default()
    }));
    match client.recv() {
        Received::Packet(Packet::Puback(ack)) => assert_eq!(ack.reason_code.0, 0, "{ack:?}"),
        other => panic!("expected a PUBACK, got {other:?}"),
    }
}

/// `count` QoS 1 requests to `topic`, answered on `replies/flood`, each
/// carrying `correlation_bytes` of Correlation Data.
fn requests(topic: &str, payload: &[u8], correlation_bytes: usize, count: u16) -> Vec<Packet> {
    let request = |packet_id| {
        Packet::Publish(Publish {
            qos: QoS::AtLeastOnce,
            topic: topic.into(),
            packet_id: Some(packet_id),
            payload: payload.to_vec(),
            properties: Properties {
                response_topic: Some("replies/flood".into()),
                correlation_data: (correlation_bytes > 0).then(|| vec![b'c'; correlation_bytes]),
                ..Properties::default()
            },
            ..Publish::default()
        })
    };
    (1..=count).map(request).collect()
}

/// Writes `packets` again and again, reading nothing, until the broker
/// stops taking them (a write makes no progress for two seconds) or
/// `FLOOD_BYTES` are written; then, once the broker has said it stopped
/// reading from `client_id` - or its memory has grown past the figure,
/// which fails the test - checks the growth.
fn flood_and_measure(rig: &mut Rig, stream: TcpStream, client_id: &str, packets: &[Packet]) {
    let pid = rig.broker.pid();
    let before = rss_bytes(pid);
    let mut bytes = Vec::new();
    for packet in packets {
        encode(packet, ProtocolVersion::V5, &mut bytes);
    }
    // Set once the outcome is known: a broker that keeps reading is not
    // fed until it has taken the machine's memory.
    let stop = Arc::new(AtomicBool::new(false));
    let stop_writing = Arc::clone(&stop);
    let writer = std::thread::spawn(move || {
        let mut stream = stream;
        stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut written = 0;
        while written < FLOOD_BYTES && !stop_writing.load(Ordering::Relaxed) {
            if stream.write_all(&bytes).is_err() {
                break;
            }
            written += bytes.len();
        }
        (stream, written)
    });
    let limit = before + rig.per_connection_bytes;
    let needle = format!("client {client_id} is owed");
    let deadline = Instant::now() + WAIT;
    loop {
        let said = rig.broker.log_lines.iter().any(|l| l.contains(&needle));
        let grown = rss_bytes(pid) > limit;
        if said || grown || Instant::now() > deadline {
            break;
        }
        // Takes the broker's log lines as they come, for at most 50 ms.
        let _ = rig
            .broker
            .wait_for_log_within(&needle, Duration::from_millis(50));
    }
    let after = rss_bytes(pid);
    stop.store(true, Ordering::Relaxed);
    let (stream, written) = writer.join().unwrap();
    drop(stream);
    eprintln!(
        "{} {client_id}: {written} bytes of requests written, resident memory grew by {} of at most {} bytes",
        rig.label,
        after.saturating_sub(before),
        rig.per_connection_bytes
    );
    assert!(
        after <= limit,
        "{client_id}: resident memory grew by {} bytes, past the {} bytes a connection may hold, with {written} bytes of requests written",
        after.saturating_sub(before),
        rig.per_connection_bytes
    );
    assert!(
        rig.broker.log_lines.iter().any(|l| l.contains(&needle)),
        "the broker never stopped reading from {client_id}"
    );
}

/// A broker holding four large values under `state/`: `state/d` is in
/// memory, `state/a` was pushed out of the body cache, so each read of it
/// waits on storage.
fn start_with_values(label: &'static str) -> Rig {
    let rig = start(label);
    let mut writer = connect(&rig.broker.address(), "writer", false);
    for key in ["state/a", "state/b", "state/c", "state/d"] {
        publish(&mut writer, key, vec![b'v'; VALUE_BYTES]);
    }
    rig
}

/// A client of `rig` (durable where asked) that sends `asks` until the
/// broker stops reading it.
fn asks_and_never_reads(mut rig: Rig, durable: bool, asks: &[Packet]) {
    let stream = connect(&rig.broker.address(), "asker", durable).into_stream();
    flood_and_measure(&mut rig, stream, "asker", asks);
}

#[test]
fn point_reads_of_a_value_in_memory() {
    // Forty-odd bytes asking for a hundred kibibytes: hundreds fit one read.
    let reads = requests("$saguin/kv/get", b"state/d", 0, 64);
    asks_and_never_reads(start_with_values("replies-kv-cached"), false, &reads);
}

#[test]
fn point_reads_of_a_value_read_from_storage() {
    let reads = requests("$saguin/kv/get", b"state/a", 0, 64);
    asks_and_never_reads(start_with_values("replies-kv-stored"), false, &reads);
}

/// A durable session's SUBSCRIBE waits on its record's write, and what
/// the client sends meanwhile is not taken either: it would otherwise be
/// held and then answered all at once.
#[test]
fn point_reads_behind_a_session_write() {
    let mut asks = vec![Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: vec![("events/#".into(), SubscriptionOptions::default())],
    })];
    asks.extend(requests("$saguin/kv/get", b"state/d", 0, 64));
    asks_and_never_reads(start_with_values("replies-kv-held"), true, &asks);
}

#[test]
fn catalogue_answers() {
    let asks = requests("$saguin/catalogue/state", b"", CORRELATION_BYTES, 8);
    asks_and_never_reads(start("replies-catalogue"), false, &asks);
}

#[test]
fn hang_up_replies() {
    let topic = "$saguin/sessions/disconnect";
    let asks = requests(topic, b"nobody", CORRELATION_BYTES, 8);
    asks_and_never_reads(start("replies-hang-up"), false, &asks);
}

#[test]
fn seek_replies() {
    // Each seek stores its position before it is answered.
    let topic = "$saguin/consumer/events/seek";
    let seeks = requests(topic, b"0", CORRELATION_BYTES, 8);
    asks_and_never_reads(start("replies-seek"), true, &seeks);
}

/// A worker is offered one job at a time, each offer counting against the
/// same bound as every other reply: a worker that acknowledges its jobs
/// blindly, reads none of the next ones and asks for more (catalogue
/// answers) is stopped at the bound.
#[test]
fn queue_offers_to_a_worker_that_never_reads() {
    let mut rig = start("replies-queue");
    let address = rig.broker.address();
    let mut producer = connect(&address, "producer", false);
    for _ in 0..16 {
        publish(&mut producer, "jobs/x", vec![b'j'; VALUE_BYTES]);
    }
    let mut worker = connect(&address, "worker", false);
    worker.send(&Packet::Subscribe(Subscribe {
        packet_id: 1,
        properties: Properties::default(),
        filters: vec![(
            "$saguin/queue/jobs".into(),
            SubscriptionOptions {
                qos: QoS::AtLeastOnce,
                ..SubscriptionOptions::default()
            },
        )],
    }));
    // The SUBACK and the first offer are read; nothing after them is.
    let mut offered = false;
    while !offered {
        match worker.recv() {
            Received::Packet(Packet::Suback(_)) => {}
            Received::Packet(Packet::Publish(_)) => offered = true,
            other => panic!("expected the SUBACK and a job, got {other:?}"),
        }
    }
    let mut asks: Vec<Packet> = (1..=16)
        .map(|packet_id| {
            Packet::Puback(PubAck {
                packet_id,
                ..PubAck::default()
            })
        })
        .collect();
    asks.extend(requests(
        "$saguin/catalogue/jobs",
        b"",
        CORRELATION_BYTES,
        8,
    ));
    flood_and_measure(&mut rig, worker.into_stream(), "worker", &asks);
}
