//! An online backup of a running broker, taken while a publisher publishes
//! as fast as its acknowledgements come back, restored into a second
//! broker: every record acknowledged before the backup began is there.
//! The publisher's latency during the backup is printed beside its
//! latency just before, for the record (no test asserts a time).

mod common;

use std::collections::VecDeque;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{BrokerProcess, RawClient, Received, TempDir, WAIT};
use saguin::codec::{Packet, ProtocolVersion, PubAck, Publish, QoS};

const REDB: &str = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 256MiB\n";
const OPERATIONS: &str = "  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n";
const EVENTS: &str = "channels:\n  events:\n    type: append\n    filter: events/#\n";
/// Records published before the backup is asked for.
const BEFORE: u64 = 5_000;

fn payload(index: u64) -> Vec<u8> {
    format!("record-{index:08}-{}", "x".repeat(100)).into_bytes()
}

/// What the publisher measured: when each publish was sent, and how long
/// its PUBACK took.
#[derive(Default)]
struct Measured {
    samples: Vec<(Instant, Duration)>,
}

/// Publishes `payload(i)` for i = 0, 1, ... at QoS 1 with 16 in flight
/// until `stop`; `acked` is how many from the first are acknowledged
/// (PUBACKs come in order).
fn publish_until(
    address: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    measured: Arc<Mutex<Measured>>,
) {
    const WINDOW: usize = 16;
    let mut client = RawClient::connect(&address, ProtocolVersion::V5, "publisher");
    let mut in_flight: VecDeque<(u16, Instant)> = VecDeque::new();
    let mut next = 0u64;
    loop {
        while in_flight.len() < WINDOW && !stop.load(Ordering::Relaxed) {
            let packet_id = (next % 60_000) as u16 + 1;
            client.send(&Packet::Publish(Publish {
                qos: QoS::AtLeastOnce,
                topic: "events/a".into(),
                packet_id: Some(packet_id),
                payload: payload(next),
                ..Publish::default()
            }));
            in_flight.push_back((packet_id, Instant::now()));
            next += 1;
        }
        if in_flight.is_empty() {
            return;
        }
        match client.recv() {
            Received::Packet(Packet::Puback(ack)) => {
                assert_eq!(ack.reason_code.0, 0, "refused: {ack:?}");
                let (packet_id, sent) = in_flight.pop_front().expect("an ack for a publish");
                assert_eq!(ack.packet_id, packet_id, "PUBACKs come in order");
                measured
                    .lock()
                    .unwrap()
                    .samples
                    .push((sent, sent.elapsed()));
                acked.fetch_add(1, Ordering::SeqCst);
            }
            other => panic!("expected a PUBACK, got {other:?}"),
        }
    }
}

fn p99(mut latencies: Vec<Duration>) -> Option<Duration> {
    latencies.sort();
    let at = (latencies.len() * 99).div_ceil(100).checked_sub(1)?;
    latencies.get(at).copied()
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_backup_under_full_publishing_holds_everything_acknowledged_before_it() {
    let dir = TempDir::new("backup-live");
    let block = format!("{REDB}{OPERATIONS}");
    let mut broker = BrokerProcess::start_in(dir.path(), &block, EVENTS);
    let line = broker.wait_for_log("operations door tcp bound to");
    let operations = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let backups = dir.path().join("backups");
    std::fs::create_dir(&backups).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let measured = Arc::new(Mutex::new(Measured::default()));
    let publisher = {
        let (address, stop, acked, measured) = (
            broker.address(),
            stop.clone(),
            acked.clone(),
            measured.clone(),
        );
        std::thread::spawn(move || publish_until(address, stop, acked, measured))
    };
    wait_until("the first records", || {
        acked.load(Ordering::SeqCst) >= BEFORE
    });

    let acknowledged_before = acked.load(Ordering::SeqCst);
    let began = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .args(["backup", &operations, backups.to_str().unwrap()])
        .output()
        .expect("run saguin backup");
    let ended = Instant::now();
    // A little more publishing after the backup, then stop.
    let after = acked.load(Ordering::SeqCst) + 200;
    wait_until("publishing after the backup", || {
        acked.load(Ordering::SeqCst) >= after
    });
    stop.store(true, Ordering::Relaxed);
    publisher.join().expect("the publisher");
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{answer}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(answer.contains("\"provider\":\"local\""), "{answer}");
    assert!(answer.contains("\"verified\":true"), "{answer}");

    let samples = std::mem::take(&mut measured.lock().unwrap().samples);
    let took = ended - began;
    let during: Vec<Duration> = samples
        .iter()
        .filter(|(sent, _)| *sent >= began && *sent <= ended)
        .map(|s| s.1)
        .collect();
    let before: Vec<Duration> = samples
        .iter()
        .filter(|(sent, _)| *sent < began && *sent + took * 4 >= began)
        .map(|s| s.1)
        .collect();
    println!(
        "backup took {took:?}; publisher p99 during it {:?} over {} publishes, just before it {:?} over {}",
        p99(during.clone()),
        during.len(),
        p99(before.clone()),
        before.len()
    );
    assert!(broker.terminate().success());

    // Restore: the backup file where the second broker's file_path says.
    let copies: Vec<_> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert!(copies[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("local-"));
    let second = TempDir::new("backup-restored");
    std::fs::copy(&copies[0], second.path().join("saguin.redb")).unwrap();
    let restored = BrokerProcess::start_in(second.path(), REDB, EVENTS);
    let mut reader = RawClient::connect(&restored.address(), ProtocolVersion::V5, "reader");
    reader.subscribe("events/#", QoS::AtLeastOnce);
    for index in 0..acknowledged_before {
        match reader.recv() {
            Received::Packet(Packet::Publish(publish)) => {
                assert_eq!(publish.payload, payload(index), "record {index}");
                if let Some(packet_id) = publish.packet_id {
                    reader.send(&Packet::Puback(PubAck {
                        packet_id,
                        ..PubAck::default()
                    }));
                }
            }
            other => panic!("record {index} of {acknowledged_before} missing: {other:?}"),
        }
    }
}

/// Runs `saguin backup` against `operations`; its exit code and stderr.
fn backup_refused(operations: &str, dir: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_saguin"))
        .args(["backup", operations, dir])
        .output()
        .expect("run saguin backup");
    assert!(out.stdout.is_empty());
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_backup_is_refused_in_one_line_without_a_directory_a_redb_provider_or_a_post() {
    let dir = TempDir::new("backup-refused");
    let memory = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: memory\n        max_bytes: 64MiB\n        snapshot_dir: none\n";
    let mut broker = BrokerProcess::start_in(dir.path(), &format!("{memory}{OPERATIONS}"), EVENTS);
    let line = broker.wait_for_log("operations door tcp bound to");
    let operations = line.rsplit("bound to ").next().unwrap().trim().to_string();
    let here = dir.path().to_str().unwrap();

    let (code, err) = backup_refused(&operations, "relative/dir");
    assert_eq!((code, err.lines().count()), (2, 1), "{err}");
    assert!(
        err.contains("relative/dir") && err.contains("absolute"),
        "{err}"
    );
    let missing = format!("{here}/missing");
    let (code, err) = backup_refused(&operations, &missing);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(
        err.contains("answered 400") && err.contains(&missing),
        "{err}"
    );
    let (code, err) = backup_refused(&operations, here);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(
        err.contains("answered 409") && err.contains("snapshot directory"),
        "{err}"
    );
    let (code, err) = backup_refused("127.0.0.1:1", here);
    assert_eq!((code, err.lines().count()), (1, 1), "{err}");
    assert!(
        err.contains("cannot reach the operations listener at 127.0.0.1:1"),
        "{err}"
    );

    // Only POST starts one: a GET that a browser or a scraper might send
    // is refused and writes nothing.
    let mut stream = std::net::TcpStream::connect(&operations).unwrap();
    use std::io::{Read as _, Write as _};
    write!(stream, "GET /v1/operations/backup?dir={here} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    assert!(answer.contains("Allow: POST"), "{answer}");
}
