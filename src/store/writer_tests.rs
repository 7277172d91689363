//! The storage thread: what forms a batch, what waits, what a failure
//! costs the neighbours, and that the executor side never blocks.

use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::conformance::{append, msg, TempDir};
use super::memory::MemoryProvider;
use super::*;

/// A memory provider that records each batch's size and can hold its
/// first commit until the test lets it go, so requests can be queued
/// behind a commit that is known to be running.
struct Observed {
    inner: MemoryProvider,
    batches: Arc<Mutex<Vec<usize>>>,
    /// (tell the test the commit started, wait for its release)
    hold_first: Option<(Sender<()>, Receiver<()>)>,
    /// Every commit after the held one meets this answer from the device.
    failing: Option<fn() -> StoreError>,
    /// What the provider says failed it once it has committed anything.
    quiet_failure: Option<Arc<Failure>>,
}

impl Provider for Observed {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn usage(&self) -> Usage {
        self.inner.usage()
    }
    fn channel(&self, channel: &str) -> ChannelState {
        self.inner.channel(channel)
    }
    fn channels(&self) -> Vec<(String, ChannelState)> {
        self.inner.channels()
    }
    fn commit(&mut self, writes: &[Write]) -> Result<Vec<Outcome>, StoreError> {
        let held = self.hold_first.take();
        if let Some((started, release)) = &held {
            started.send(()).expect("the test is waiting");
            release.recv().expect("the test releases the commit");
        }
        self.batches.lock().expect("lock").push(writes.len());
        match self.failing {
            Some(device) if held.is_none() => Err(device()),
            _ => self.inner.commit(writes),
        }
    }
    fn read(&self, channel: &str, from: u64, limit: ReadLimit) -> Result<Read, StoreError> {
        self.inner.read(channel, from, limit)
    }
    fn position(&self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError> {
        self.inner.position(channel, reader)
    }
    fn lowest_position(&self, channel: &str) -> Result<Option<u64>, StoreError> {
        self.inner.lowest_position(channel)
    }
    fn first_at_or_after(&self, channel: &str, at_ms: u64) -> Result<Option<u64>, StoreError> {
        self.inner.first_at_or_after(channel, at_ms)
    }
    fn entries(&self, channel: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.inner.entries(channel)
    }
    fn entry(&self, channel: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.entry(channel, key)
    }
    fn failure(&self) -> Option<Arc<Failure>> {
        // Failed after its first batch was answered, as a redb provider
        // whose open transaction's commit fails after the journal's sync.
        let committed = !self.batches.lock().expect("lock").is_empty();
        self.quiet_failure.clone().filter(|_| committed)
    }
    fn close(self: Box<Self>) -> Result<(), StoreError> {
        Box::new(self.inner).close()
    }
}

struct Rig {
    thread: StorageThread,
    handle: StorageHandle,
    completions: Receiver<Completion>,
    batches: Arc<Mutex<Vec<usize>>>,
    started: Option<Receiver<()>>,
    release: Option<Sender<()>>,
}

const WAIT: Duration = Duration::from_secs(30);

fn rig(policy: CommitPolicy, capacity: usize, hold_first: bool) -> Rig {
    rig_with(
        MemoryProvider::open("m", 1 << 20, 0, None).expect("open"),
        policy,
        capacity,
        hold_first,
    )
}

fn rig_with(inner: MemoryProvider, policy: CommitPolicy, capacity: usize, hold_first: bool) -> Rig {
    rig_observed(inner, policy, capacity, hold_first, None)
}

fn rig_observed(
    inner: MemoryProvider,
    policy: CommitPolicy,
    capacity: usize,
    hold_first: bool,
    failing: Option<fn() -> StoreError>,
) -> Rig {
    let (started_tx, started_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let provider = Observed {
        inner,
        batches: Arc::default(),
        hold_first: hold_first.then_some((started_tx, release_rx)),
        failing,
        quiet_failure: None,
    };
    rig_provider(
        provider, policy, capacity, hold_first, started_rx, release_tx,
    )
}

fn rig_provider(
    provider: Observed,
    policy: CommitPolicy,
    capacity: usize,
    hold_first: bool,
    started_rx: Receiver<()>,
    release_tx: Sender<()>,
) -> Rig {
    let batches = Arc::clone(&provider.batches);
    let (tx, completions) = mpsc::channel();
    let thread = StorageThread::spawn(Box::new(provider), policy, capacity, move |c| {
        let _ = tx.send(c);
    })
    .expect("spawn");
    let handle = thread.handle();
    Rig {
        thread,
        handle,
        completions,
        batches,
        started: hold_first.then_some(started_rx),
        release: hold_first.then_some(release_tx),
    }
}

impl Rig {
    fn publish(&self, ticket: u64) {
        self.handle
            .try_commit(
                Ticket(ticket),
                vec![append("c", msg("t", b"x", ticket + 1))],
            )
            .expect("queued");
    }

    fn wait_until_first_commit_runs(&self) {
        self.started
            .as_ref()
            .expect("held")
            .recv_timeout(WAIT)
            .expect("the first commit started");
    }

    fn release_first_commit(&self) {
        self.release
            .as_ref()
            .expect("held")
            .send(())
            .expect("release");
    }

    fn next(&self) -> Completion {
        self.completions.recv_timeout(WAIT).expect("a completion")
    }

    fn committed(&self) -> (u64, Result<Vec<Outcome>, StoreError>) {
        match self.next() {
            Completion {
                ticket,
                answer: Answer::Committed(r),
            } => (ticket.0, r),
            other => panic!("expected a commit, got {other:?}"),
        }
    }

    fn batches(&self) -> Vec<usize> {
        self.batches.lock().expect("lock").clone()
    }
}

#[test]
fn writes_arriving_during_a_commit_form_the_next_batch() {
    let r = rig(CommitPolicy::Collect, 64, true);
    r.publish(0);
    r.wait_until_first_commit_runs();
    for t in 1..=5 {
        r.publish(t);
    }
    r.release_first_commit();
    for expect in 0..=5 {
        let (ticket, result) = r.committed();
        assert_eq!(ticket, expect);
        // Offsets start at 1: ticket 0's record is the channel's first.
        assert_eq!(
            result.expect("stored"),
            vec![Outcome::Appended { offset: expect + 1 }]
        );
    }
    assert_eq!(r.batches(), vec![1, 5]);
    let stats = r.thread.stats();
    assert_eq!((stats.commits, stats.requests, stats.records), (2, 6, 6));
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn a_commit_per_publish_never_groups() {
    let r = rig(CommitPolicy::PerPublish, 64, true);
    r.publish(0);
    r.wait_until_first_commit_runs();
    for t in 1..=3 {
        r.publish(t);
    }
    r.release_first_commit();
    for expect in 0..=3 {
        assert_eq!(r.committed().0, expect);
    }
    assert_eq!(r.batches(), vec![1, 1, 1, 1]);
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn an_interval_batch_closes_on_its_count_or_its_interval() {
    let r = rig(
        CommitPolicy::Interval {
            interval_ms: 60_000,
            max_records: 3,
        },
        64,
        false,
    );
    for t in 0..3 {
        r.publish(t);
    }
    for _ in 0..3 {
        r.committed().1.expect("stored");
    }
    assert_eq!(r.batches(), vec![3]);
    assert_eq!(r.thread.stats().closed_by_records, 1);
    r.thread.shutdown().expect("shutdown");

    let r = rig(
        CommitPolicy::Interval {
            interval_ms: 50,
            max_records: 100,
        },
        64,
        false,
    );
    let started = Instant::now();
    r.publish(0);
    r.committed().1.expect("stored");
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(r.thread.stats().closed_by_interval, 1);
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn a_batch_without_a_publish_never_waits_for_company() {
    let r = rig(
        CommitPolicy::Interval {
            interval_ms: 60_000,
            max_records: 100,
        },
        64,
        false,
    );
    let started = Instant::now();
    let position = Write::SetPosition {
        channel: "c".into(),
        reader: "mqtt:a".into(),
        offset: FIRST_OFFSET,
    };
    r.handle
        .try_commit(Ticket(9), vec![position])
        .expect("queued");
    let (ticket, result) = r.committed();
    assert_eq!(ticket, 9);
    assert_eq!(result.expect("stored"), vec![Outcome::PositionSet]);
    assert!(started.elapsed() < Duration::from_secs(30));
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn reads_are_served_while_a_batch_waits_for_company() {
    let r = rig(
        CommitPolicy::Interval {
            interval_ms: 2_000,
            max_records: 100,
        },
        64,
        false,
    );
    r.publish(1);
    let limit = ReadLimit {
        max_records: 10,
        max_bytes: 1 << 20,
    };
    r.handle
        .try_read(Ticket(2), "c".into(), 1, limit)
        .expect("queued");
    match r.next() {
        Completion {
            ticket: Ticket(2),
            answer: Answer::Read(Ok(Read::Records(b))),
        } => {
            assert!(b.records.is_empty(), "the publish is not committed yet");
            assert_eq!((b.floor, b.next), (1, 1));
        }
        other => panic!("expected the read first, got {other:?}"),
    }
    assert_eq!(r.committed().0, 1);
    r.handle
        .try_read(Ticket(3), "c".into(), 1, limit)
        .expect("queued");
    match r.next().answer {
        Answer::Read(Ok(Read::Records(b))) => {
            let offsets: Vec<u64> = b.records.iter().map(|r| r.offset).collect();
            assert_eq!((b.floor, b.next, offsets), (1, 2, vec![1]));
        }
        other => panic!("{other:?}"),
    }
    r.handle
        .try_position(Ticket(4), "c".into(), "mqtt:x".into())
        .expect("queued");
    assert!(matches!(r.next().answer, Answer::Position(Ok(None))));
    let put = Write::PutEntry {
        channel: "$sessions".into(),
        key: "client".into(),
        value: b"record".to_vec(),
        use_reserve: false,
    };
    r.handle.try_commit(Ticket(5), vec![put]).expect("queued");
    assert_eq!(r.committed().0, 5);
    r.handle
        .try_entries(Ticket(6), "$sessions".into())
        .expect("queued");
    match r.next().answer {
        Answer::Entries(Ok(entries)) => {
            assert_eq!(entries, vec![("client".to_string(), b"record".to_vec())]);
        }
        other => panic!("{other:?}"),
    }
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn one_request_failing_is_not_its_neighbours_failure() {
    let r = rig(CommitPolicy::Collect, 64, true);
    r.publish(0);
    r.wait_until_first_commit_runs();
    r.publish(1);
    r.handle
        .try_commit(Ticket(2), vec![append("", msg("t", b"x", 1))])
        .expect("queued");
    r.publish(3);
    r.release_first_commit();
    let mut results: Vec<(u64, bool)> = (0..4)
        .map(|_| {
            let (t, res) = r.committed();
            (t, res.is_ok())
        })
        .collect();
    results.sort();
    assert_eq!(results, vec![(0, true), (1, true), (2, false), (3, true)]);
    let stats = r.thread.stats();
    assert_eq!(stats.failed_batches, 1);
    // The batch, then the one request that fails again alone.
    assert_eq!(stats.failed_commits, 2);
    assert!(stats.used_bytes > 0, "three records are held");
    r.thread.shutdown().expect("shutdown");
}

fn failed_sync() -> StoreError {
    StoreError::Failed(Arc::new(Failure {
        provider: "m".into(),
        path: "/data/m.redb.journal".into(),
        action: "write and sync a journal frame".into(),
        cause: "Input/output error (os error 5)".into(),
        remedy: "restart".into(),
    }))
}

fn full_device() -> StoreError {
    StoreError::DeviceFull {
        path: "/data/m.redb".into(),
        action: "write the redb file",
    }
}

/// A batch the device failed is answered whole, never split and tried
/// again request by request: after a failed sync a retry could succeed
/// over writes the device already dropped.
#[test]
fn a_batch_the_device_failed_is_not_retried() {
    for device in [failed_sync as fn() -> StoreError, full_device] {
        let memory = MemoryProvider::open("m", 1 << 20, 0, None).expect("open");
        let r = rig_observed(memory, CommitPolicy::Collect, 64, true, Some(device));
        r.publish(0);
        r.wait_until_first_commit_runs();
        for ticket in 1..4 {
            r.publish(ticket);
        }
        r.release_first_commit();
        let mut answers: Vec<(u64, String)> = (0..4)
            .map(|_| {
                let (t, res) = r.committed();
                (t, res.map_or_else(|e| e.to_string(), |_| "stored".into()))
            })
            .collect();
        answers.sort();
        assert_eq!(answers[0], (0, "stored".to_string()));
        for (_, answer) in &answers[1..] {
            assert_eq!(answer, &device().to_string());
        }
        // The held commit, then the batch of three once: no retries.
        assert_eq!(r.batches(), vec![1, 3]);
        let stats = r.thread.stats();
        assert_eq!((stats.failed_batches, stats.failed_commits), (0, 1));
        let failure = r.thread.watch().failure();
        match device() {
            StoreError::Failed(_) => {
                let failure = failure.expect("the watch holds the failure");
                assert_eq!(failure.path, Path::new("/data/m.redb.journal"));
            }
            _ => assert!(failure.is_none(), "a full device is no failure"),
        }
        r.thread.shutdown().expect("shutdown");
    }
}

/// A provider that failed after answering a batch is named by the watch
/// at once, not at the next refusal.
#[test]
fn a_failure_after_an_answered_batch_reaches_the_watch() {
    let StoreError::Failed(failure) = failed_sync() else {
        unreachable!()
    };
    // Nothing is held: the channels stand unused.
    let (_, started_rx) = mpsc::channel();
    let (release_tx, _) = mpsc::channel();
    let provider = Observed {
        inner: MemoryProvider::open("m", 1 << 20, 0, None).expect("open"),
        batches: Arc::default(),
        hold_first: None,
        failing: None,
        quiet_failure: Some(failure),
    };
    let r = rig_provider(
        provider,
        CommitPolicy::Collect,
        4,
        false,
        started_rx,
        release_tx,
    );
    assert!(r.thread.watch().failure().is_none());
    r.publish(0);
    assert!(r.committed().1.is_ok(), "the batch itself was answered");
    // The watch is set once the commit returns, just after its answer.
    let watch = r.thread.watch();
    let deadline = Instant::now() + WAIT;
    let failed = loop {
        match watch.failure() {
            Some(failed) => break failed,
            None if Instant::now() < deadline => std::thread::yield_now(),
            None => panic!("the watch never named the failure"),
        }
    };
    assert_eq!(failed.path, Path::new("/data/m.redb.journal"));
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn a_full_queue_is_refused_without_blocking() {
    let r = rig(CommitPolicy::Collect, 1, true);
    r.publish(0);
    r.wait_until_first_commit_runs();
    r.publish(1);
    let third = r
        .handle
        .try_commit(Ticket(2), vec![append("c", msg("t", b"x", 1))]);
    assert_eq!(third, Err(SubmitError::Busy));
    let too_many = vec![append("c", msg("t", b"x", 1)); MAX_REQUEST_WRITES + 1];
    assert_eq!(
        r.handle.try_commit(Ticket(3), too_many),
        Err(SubmitError::TooLarge)
    );
    r.release_first_commit();
    assert_eq!(r.committed().0, 0);
    assert_eq!(r.committed().0, 1);
    r.thread.shutdown().expect("shutdown");
}

#[test]
fn shutdown_closes_the_provider_and_stops_the_handle() {
    let dir = TempDir::new("writer-shutdown");
    let inner = MemoryProvider::open("m", 1 << 20, 0, Some(dir.path())).expect("open");
    let r = rig_with(inner, CommitPolicy::Collect, 8, false);
    r.publish(0);
    assert_eq!(r.committed().0, 0);
    let handle = r.handle.clone();
    r.thread.shutdown().expect("shutdown");
    assert!(dir.path().join("c.snapshot").exists());
    assert_eq!(
        handle.try_commit(Ticket(1), vec![append("c", msg("t", b"x", 1))]),
        Err(SubmitError::Stopped)
    );
    let reopened = MemoryProvider::open("m", 1 << 20, 0, Some(dir.path())).expect("reopen");
    assert_eq!(reopened.channel("c").next, 2);
}
