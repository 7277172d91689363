//! Online backups through the storage thread: what a backup holds, that
//! commits go on while it is copied, and what is refused.

use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use super::conformance::{append, msg, TempDir};
use super::*;

const WAIT: Duration = Duration::from_secs(30);
const MAX_BYTES: u64 = 64 << 20;

struct Rig {
    thread: StorageThread,
    completions: Receiver<Completion>,
    next_ticket: u64,
}

fn rig(provider: Box<dyn Provider>) -> Rig {
    let (tx, completions) = mpsc::channel();
    let thread = StorageThread::spawn(provider, CommitPolicy::Collect, 4096, move |c| {
        let _ = tx.send(c);
    })
    .expect("spawn");
    Rig {
        thread,
        completions,
        next_ticket: 0,
    }
}

impl Rig {
    /// Submits `count` appends to `channel` without waiting.
    fn submit(&mut self, channel: &str, count: u64) {
        for _ in 0..count {
            self.next_ticket += 1;
            let at = self.next_ticket;
            let payload = format!("record-{at}");
            self.thread
                .handle()
                .try_commit(
                    Ticket(at),
                    vec![append(channel, msg("t", payload.as_bytes(), at))],
                )
                .expect("queued");
        }
    }

    /// Waits for `count` completions, each a committed append.
    fn committed(&self, count: u64) {
        for _ in 0..count {
            let c = self.completions.recv_timeout(WAIT).expect("a completion");
            assert!(
                matches!(c.answer, Answer::Committed(Ok(ref o)) if matches!(o[..], [Outcome::Appended { .. }])),
                "{c:?}"
            );
        }
    }

    fn backup(&self, destination: &Path) -> Receiver<Result<BackupReport, StoreError>> {
        let (tx, rx) = mpsc::channel();
        self.thread
            .handle()
            .try_backup(
                destination.to_path_buf(),
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            )
            .expect("queued");
        rx
    }
}

fn redb(dir: &TempDir, file: &str) -> Box<dyn Provider> {
    Box::new(RedbProvider::open("local", &dir.path().join(file), MAX_BYTES, 0).expect("open"))
}

#[test]
fn a_backup_holds_every_record_committed_before_it_and_commits_go_on_meanwhile() {
    let dir = TempDir::new("backup");
    let mut rig = rig(redb(&dir, "live.redb"));
    rig.submit("events", 300);
    rig.committed(300);
    // Commits queued behind the backup request and beside its copy.
    let destination = dir.path().join("copy.redb");
    let answer = rig.backup(&destination);
    rig.submit("events", 300);
    rig.committed(300);
    let report = answer
        .recv_timeout(WAIT)
        .expect("an answer")
        .expect("a backup");
    assert_eq!(report.destination, destination);
    assert!((300..=600).contains(&report.records), "{report:?}");
    assert_eq!(report.channels, 1);
    rig.thread.shutdown().expect("close");

    let copy = RedbProvider::open("copy", &destination, MAX_BYTES, 0).expect("the copy opens");
    let state = copy.channel("events");
    assert_eq!(state.record_count, report.records);
    assert_eq!(state.next, report.records + 1, "a consistent cut: no gap");
    let Read::Records(batch) = copy
        .read(
            "events",
            1,
            ReadLimit {
                max_records: 1000,
                max_bytes: u64::MAX,
            },
        )
        .expect("read")
    else {
        panic!("records");
    };
    for (i, record) in batch.records.iter().enumerate() {
        assert_eq!(record.offset, i as u64 + 1);
        assert_eq!(
            record.message.payload,
            format!("record-{}", i + 1).into_bytes()
        );
    }
}

#[test]
fn a_backup_never_writes_over_a_file_and_a_memory_provider_has_none() {
    let dir = TempDir::new("backup-refusals");
    let rig = rig(redb(&dir, "live.redb"));
    let existing = dir.path().join("existing.redb");
    std::fs::write(&existing, b"keep me").unwrap();
    let refused = rig.backup(&existing).recv_timeout(WAIT).expect("an answer");
    assert!(refused.unwrap_err().to_string().contains("already exists"));
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
    rig.thread.shutdown().expect("close");

    let memory = MemoryProvider::open("volatile", MAX_BYTES, 0, None).expect("open");
    let rig = self::rig(Box::new(memory));
    let refused = rig
        .backup(&dir.path().join("memory.redb"))
        .recv_timeout(WAIT)
        .expect("an answer");
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains("snapshot directory"));
    assert!(!dir.path().join("memory.redb").exists());
    rig.thread.shutdown().expect("close");
}
