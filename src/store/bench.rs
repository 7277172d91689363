//! A micro-benchmark of durable appends on a redb provider through the
//! storage thread: each submitter publishes one record, waits for its
//! completion the way a QoS 1 publisher waits for its PUBACK, and
//! publishes the next. Not a test: callable from a bench binary, and run
//! by the ignored test below.
//!
//! ```text
//! cargo test --release --lib store::bench -- --ignored --nocapture
//! ```
//!
//! Put `TMPDIR` on real storage: on a tmpfs an fsync does nothing and the
//! figures measure memory.

use std::fs;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Instant;

use super::error::StoreError;
use super::message_id::MessageIdGenerator;
use super::redb::RedbProvider;
use super::settings::CommitPolicy;
use super::types::{Message, Outcome, Write};
use super::writer::{Answer, StorageThread, Ticket};
use super::Provider;

/// What one run measured.
#[derive(Clone, Copy, Debug)]
pub struct BenchReport {
    pub policy: CommitPolicy,
    pub submitters: u32,
    pub records: u64,
    pub elapsed_ms: u64,
    /// Transactions committed (each one fsync or more).
    pub commits: u64,
    pub records_per_s: u64,
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?}, {} submitters: {} records in {} ms, {} commits ({:.1} records a commit), {} records/s",
            self.policy,
            self.submitters,
            self.records,
            self.elapsed_ms,
            self.commits,
            self.records as f64 / self.commits.max(1) as f64,
            self.records_per_s
        )
    }
}

/// Appends `records_per_submitter` records of `payload_bytes` from each of
/// `submitters` threads to a fresh provider file in `dir`, each waiting for
/// its commit before the next, and reports the rate. The file is removed
/// afterwards.
pub fn durable_appends(
    dir: &Path,
    policy: CommitPolicy,
    submitters: u32,
    records_per_submitter: u32,
    payload_bytes: u32,
) -> Result<BenchReport, StoreError> {
    let file = dir.join(format!("saguin-bench-{}.redb", std::process::id()));
    let lock = dir.join(format!("saguin-bench-{}.redb.lock", std::process::id()));
    let _ = fs::remove_file(&file);
    let provider = RedbProvider::open("bench", &file, 1 << 40, 1 << 20)?;
    // Completions are routed to the submitter whose index the ticket holds.
    let senders: Arc<Mutex<Vec<mpsc::Sender<bool>>>> = Arc::new(Mutex::new(Vec::new()));
    let mut receivers = Vec::new();
    for _ in 0..submitters {
        let (tx, rx) = mpsc::channel();
        senders.lock().map_err(|_| StoreError::Stopped)?.push(tx);
        receivers.push(rx);
    }
    let routes = Arc::clone(&senders);
    let thread = StorageThread::spawn(
        Box::new(provider),
        policy,
        submitters as usize * 2,
        move |c| {
            let stored = matches!(&c.answer, Answer::Committed(Ok(o)) if matches!(o[..], [Outcome::Appended { .. }]));
            if let Ok(routes) = routes.lock() {
                if let Some(tx) = routes.get((c.ticket.0 >> 32) as usize) {
                    let _ = tx.send(stored);
                }
            }
        },
    )?;
    let started = Instant::now();
    let mut workers = Vec::new();
    for (index, rx) in receivers.into_iter().enumerate() {
        let handle = thread.handle();
        workers.push(thread::spawn(move || -> u64 {
            let mut ids = MessageIdGenerator::from_entropy();
            let mut stored = 0;
            for n in 0..records_per_submitter {
                let message = Message::new(
                    ids.next_id(1),
                    1,
                    format!("bench/{index}"),
                    vec![0x5A; payload_bytes as usize],
                );
                let ticket = Ticket(((index as u64) << 32) | u64::from(n));
                let write = Write::Append {
                    channel: "bench".into(),
                    message,
                    channel_max_bytes: None,
                };
                if handle.try_commit(ticket, vec![write]).is_err() {
                    break;
                }
                match rx.recv() {
                    Ok(true) => stored += 1,
                    _ => break,
                }
            }
            stored
        }));
    }
    let mut records = 0;
    for w in workers {
        records += w.join().unwrap_or(0);
    }
    let elapsed = started.elapsed();
    let commits = thread.stats().commits;
    let closed = thread.shutdown();
    let _ = fs::remove_file(&file);
    let _ = fs::remove_file(&lock);
    let _ = fs::remove_file(super::journal::journal_path_for(&file));
    closed?;
    let elapsed_ms = u64::try_from(elapsed.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    Ok(BenchReport {
        policy,
        submitters,
        records,
        elapsed_ms,
        commits,
        records_per_s: records * 1_000 / elapsed_ms,
    })
}

/// Bytes this process has caused to be written to storage so far
/// (`write_bytes` of `/proc/self/io`: each page dirtied counts once until
/// it is written back).
pub fn process_write_bytes() -> Option<u64> {
    let io = fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
}

/// Bytes written to storage per record when each of `records` records of
/// `payload_bytes` is committed alone: straight into redb with
/// `durability` (the `Immediate` row is the provider before its journal),
/// or through the provider (`None` for `durability`). The provider row
/// ends with its close, so its checkpoint is counted.
pub fn device_bytes_per_record(
    dir: &Path,
    durability: Option<::redb::Durability>,
    records: u32,
    payload_bytes: u32,
) -> Result<u64, StoreError> {
    let file = dir.join(format!("saguin-wear-{}.redb", std::process::id()));
    let remove = || {
        let _ = fs::remove_file(&file);
        let _ = fs::remove_file(super::files::lock_path_for(&file));
        let _ = fs::remove_file(super::journal::journal_path_for(&file));
    };
    remove();
    let payload = vec![0x5A; payload_bytes as usize];
    let written = match durability {
        Some(durability) => {
            let table = ::redb::TableDefinition::<u64, &[u8]>::new("records");
            let db = ::redb::Builder::new()
                .set_cache_size(super::redb_schema::REDB_CACHE_BYTES)
                .create(&file)
                .map_err(super::error::db_error(&file, "create"))?;
            let before = process_write_bytes().unwrap_or(0);
            for n in 0..u64::from(records) {
                let mut txn = db
                    .begin_write()
                    .map_err(super::error::db_error(&file, "begin"))?;
                txn.set_durability(durability)
                    .map_err(super::error::db_error(&file, "durability"))?;
                txn.open_table(table)
                    .map_err(super::error::db_error(&file, "open"))?
                    .insert(n, payload.as_slice())
                    .map_err(super::error::db_error(&file, "insert"))?;
                txn.commit()
                    .map_err(super::error::db_error(&file, "commit"))?;
            }
            process_write_bytes().unwrap_or(0) - before
        }
        None => {
            let mut provider = RedbProvider::open("wear", &file, 1 << 40, 1 << 20)?;
            let mut ids = MessageIdGenerator::from_entropy();
            let before = process_write_bytes().unwrap_or(0);
            for _ in 0..records {
                let message = Message::new(ids.next_id(1), 1, "wear".into(), payload.clone());
                provider.commit(&[Write::Append {
                    channel: "wear".into(),
                    message,
                    channel_max_bytes: None,
                }])?;
            }
            Box::new(provider).close()?;
            process_write_bytes().unwrap_or(0) - before
        }
    };
    remove();
    Ok(written / u64::from(records.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "a measurement: run with --ignored --nocapture, TMPDIR on real storage"]
    fn bytes_written_per_record_committed_alone() {
        let dir = std::env::temp_dir();
        for (name, durability) in [
            (
                "redb, Durability::Immediate",
                Some(::redb::Durability::Immediate),
            ),
            ("redb, Durability::None", Some(::redb::Durability::None)),
            ("provider: journal, then a checkpoint", None),
        ] {
            let bytes = device_bytes_per_record(&dir, durability, 1000, 64).expect("measure");
            println!("{name}: {bytes} B a record");
        }
    }

    #[test]
    #[ignore = "a benchmark: run with --ignored --nocapture, TMPDIR on real storage"]
    fn group_commit_against_a_commit_per_record() {
        let dir = std::env::temp_dir();
        for (policy, submitters) in [
            (CommitPolicy::PerPublish, 1),
            (CommitPolicy::Collect, 1),
            (CommitPolicy::PerPublish, 8),
            (CommitPolicy::Collect, 8),
            (
                CommitPolicy::Interval {
                    interval_ms: 2,
                    max_records: 8,
                },
                8,
            ),
            (
                CommitPolicy::Interval {
                    interval_ms: 2,
                    max_records: 256,
                },
                8,
            ),
            (CommitPolicy::PerPublish, 32),
            (CommitPolicy::Collect, 32),
        ] {
            let report = durable_appends(&dir, policy, submitters, 400, 128).expect("bench");
            println!("{report}");
        }
    }
}
