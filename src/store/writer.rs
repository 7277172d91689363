//! The storage thread: owns one provider, takes requests from a bounded
//! queue, and answers each through a completion hook, so the executor
//! submits without blocking and learns the outcome without polling a disk.
//!
//! **Group commit.** The writes that arrive while a commit runs wait in the
//! queue and form the next batch, committed in one transaction - so a
//! provider's durable throughput is fsyncs per second times batch size,
//! not one fsync per message. How a batch closes is the provider's
//! [`CommitPolicy`]:
//!
//! - `Collect` (the keys absent): whatever is queued joins, up to
//!   [`COLLECT_MAX_RECORDS`] publishes; nothing waits for company.
//! - `PerPublish` (`publish_commit_interval: none`): every request is its
//!   own transaction.
//! - `Interval`: a batch holding a publish waits for more, closing at
//!   `max_records` publishes or `interval_ms` after it opened, whichever
//!   comes first. A batch holding no publish never waits.
//!
//! Reads are served as they arrive, between commits and while a batch
//! waits for company, so a reader never waits out an interval. A read sees
//! every commit whose completion was delivered before it was submitted.
//!
//! A completion is delivered only after the commit holding its writes has
//! returned (invariant 18). When a batch fails, its requests are committed
//! again one by one, so one request's failure is not its neighbours' -
//! unless the device failed it (a failed sync, a full disk): that answer
//! is every request's, and a sync is never retried and then trusted.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::backup::{take_backup, BackupReply, SharedReply};
use super::error::{Failure, StoreError};
use super::settings::CommitPolicy;
use super::types::{Outcome, Read, ReadLimit, Write};
use super::validate::MAX_BATCH_WRITES;
use super::Provider;

/// The most publishes a batch collects when no interval is set.
pub const COLLECT_MAX_RECORDS: u32 = 256;

/// The most writes one request may carry.
pub const MAX_REQUEST_WRITES: usize = 1_024;

/// The caller's name for a request, handed back with its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(pub u64);

/// What a request came to.
#[derive(Debug)]
pub enum Answer {
    /// One outcome per write, in order; `Err` means none of the writes was
    /// stored.
    Committed(Result<Vec<Outcome>, StoreError>),
    Read(Result<Read, StoreError>),
    Position(Result<Option<u64>, StoreError>),
    /// The earliest offset received at or after a moment.
    Offset(Result<Option<u64>, StoreError>),
    /// A channel's keyed entries, in ascending key order.
    Entries(Result<Vec<(String, Vec<u8>)>, StoreError>),
}

#[derive(Debug)]
pub struct Completion {
    pub ticket: Ticket,
    pub answer: Answer,
}

/// Why a request was not queued. Nothing was stored.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is at its bound: the storage thread is behind. The caller
    /// answers as for a full store, or waits for a completion and tries
    /// again; the submit itself never blocks.
    Busy,
    /// More than [`MAX_REQUEST_WRITES`] writes in one request.
    TooLarge,
    /// The storage thread has stopped.
    Stopped,
}

/// What one queued request takes in the queue itself, before what it
/// carries (publishes are bounded as waiting publishes, sessions by their
/// charge).
pub const REQUEST_BYTES: usize = std::mem::size_of::<Request>();

enum Request {
    Commit {
        ticket: Ticket,
        writes: Vec<Write>,
    },
    Read {
        ticket: Ticket,
        channel: String,
        from_offset: u64,
        limit: ReadLimit,
    },
    Position {
        ticket: Ticket,
        channel: String,
        reader: String,
    },
    FirstAtOrAfter {
        ticket: Ticket,
        channel: String,
        at_ms: u64,
    },
    Entries {
        ticket: Ticket,
        channel: String,
    },
    Backup {
        destination: PathBuf,
        reply: BackupReply,
    },
    ChannelBytes {
        reply: ChannelBytesReply,
    },
    Shutdown,
}

/// Takes each channel's record bytes, by name, as the provider counts them
/// against `max_bytes`; an empty list from a stopped thread.
pub type ChannelBytesReply = Box<dyn FnOnce(Vec<(String, u64)>) + Send>;

/// How the storage thread has been committing: what a metrics scrape or a
/// benchmark reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Transactions committed, retries included.
    pub commits: u64,
    /// Requests answered through a commit.
    pub requests: u64,
    /// Records appended.
    pub records: u64,
    /// Batches that closed because they reached their record count.
    pub closed_by_records: u64,
    /// Batches that closed because their interval ran out.
    pub closed_by_interval: u64,
    /// Batches of publishes that closed holding what had arrived, with
    /// nothing to wait for (`Collect`), and publishes committed one to a
    /// transaction (`PerPublish`).
    pub closed_by_commit: u64,
    pub unbatched: u64,
    /// Batches that failed as a whole and were retried request by request.
    pub failed_batches: u64,
    /// Commits the provider failed, each retry of a failed batch counted.
    pub failed_commits: u64,
    /// What the provider holds, as its `max_bytes` counts it, after the
    /// last commit.
    pub used_bytes: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    requests: AtomicU64,
    records: AtomicU64,
    closed_by_records: AtomicU64,
    closed_by_interval: AtomicU64,
    closed_by_commit: AtomicU64,
    unbatched: AtomicU64,
    failed_batches: AtomicU64,
    failed_commits: AtomicU64,
    used_bytes: AtomicU64,
    /// Set when the thread has ended, cleanly or not.
    stopped: std::sync::atomic::AtomicBool,
    /// The thread's id in `/proc/self/task`, once it runs; 0 until then,
    /// or where `/proc` does not say. What it wrote is read from there.
    thread_id: std::sync::atomic::AtomicU32,
    /// What stopped the provider taking writes, once something has.
    failure: std::sync::Mutex<Option<Arc<Failure>>>,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> CommitStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CommitStats {
            commits: get(&self.commits),
            requests: get(&self.requests),
            records: get(&self.records),
            closed_by_records: get(&self.closed_by_records),
            closed_by_interval: get(&self.closed_by_interval),
            closed_by_commit: get(&self.closed_by_commit),
            unbatched: get(&self.unbatched),
            failed_batches: get(&self.failed_batches),
            failed_commits: get(&self.failed_commits),
            used_bytes: get(&self.used_bytes),
        }
    }
}

/// Submits requests to a storage thread; cheap to clone, one per task.
#[derive(Clone)]
pub struct StorageHandle {
    tx: SyncSender<Request>,
}

impl StorageHandle {
    fn submit(&self, request: Request) -> Result<(), SubmitError> {
        self.tx.try_send(request).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Busy,
            TrySendError::Disconnected(_) => SubmitError::Stopped,
        })
    }

    /// Queues `writes` to be committed together, atomically. Never blocks.
    pub fn try_commit(&self, ticket: Ticket, writes: Vec<Write>) -> Result<(), SubmitError> {
        if writes.len() > MAX_REQUEST_WRITES {
            return Err(SubmitError::TooLarge);
        }
        self.submit(Request::Commit { ticket, writes })
    }

    /// Queues a bounded read. Never blocks.
    pub fn try_read(
        &self,
        ticket: Ticket,
        channel: String,
        from_offset: u64,
        limit: ReadLimit,
    ) -> Result<(), SubmitError> {
        self.submit(Request::Read {
            ticket,
            channel,
            from_offset,
            limit,
        })
    }

    /// Queues a lookup of a reader's stored position. Never blocks.
    pub fn try_position(
        &self,
        ticket: Ticket,
        channel: String,
        reader: String,
    ) -> Result<(), SubmitError> {
        self.submit(Request::Position {
            ticket,
            channel,
            reader,
        })
    }

    /// Asks for every keyed entry of `channel`.
    pub fn try_entries(&self, ticket: Ticket, channel: String) -> Result<(), SubmitError> {
        self.submit(Request::Entries { ticket, channel })
    }

    /// Asks for an online backup of the provider into a new file at
    /// `destination`. The storage thread takes a consistent view between
    /// two commits and a thread of its own copies and verifies it, so no
    /// commit waits for the copy; `reply` is called from that thread with
    /// the verified copy or why there is none. One backup runs at a time
    /// per provider; a memory provider has none to take.
    pub fn try_backup(&self, destination: PathBuf, reply: BackupReply) -> Result<(), SubmitError> {
        self.submit(Request::Backup { destination, reply })
    }

    /// Asks for every channel's record bytes, read from the provider's
    /// counters in memory between commits: a metrics scrape's question.
    pub fn try_channel_bytes(&self, reply: ChannelBytesReply) -> Result<(), SubmitError> {
        self.submit(Request::ChannelBytes { reply })
    }

    /// Asks for the earliest offset of `channel` received at or after
    /// `at_ms` (Unix milliseconds), for a seek by time.
    pub fn try_first_at_or_after(
        &self,
        ticket: Ticket,
        channel: String,
        at_ms: u64,
    ) -> Result<(), SubmitError> {
        self.submit(Request::FirstAtOrAfter {
            ticket,
            channel,
            at_ms,
        })
    }
}

/// A storage thread's counters and whether it has ended, readable from
/// any thread without asking the storage thread anything.
#[derive(Clone)]
pub struct StorageWatch(Arc<Counters>);

impl StorageWatch {
    pub fn stats(&self) -> CommitStats {
        self.0.snapshot()
    }

    /// Whether the thread has ended: nothing it is asked is answered.
    pub fn stopped(&self) -> bool {
        self.0.stopped.load(Ordering::Relaxed)
    }

    /// The thread's id in `/proc/self/task`, where the kernel counts what
    /// it wrote: every write of its provider's files is made on it.
    pub fn thread_id(&self) -> Option<u32> {
        Some(self.0.thread_id.load(Ordering::Relaxed)).filter(|&id| id != 0)
    }

    /// Why the provider takes no more writes, once its device failed it.
    pub fn failure(&self) -> Option<Arc<Failure>> {
        let failure = self.0.failure.lock().unwrap_or_else(|p| p.into_inner());
        failure.clone()
    }
}

/// A running storage thread.
pub struct StorageThread {
    handle: StorageHandle,
    counters: Arc<Counters>,
    join: JoinHandle<Result<(), StoreError>>,
}

impl StorageThread {
    /// Moves `provider` onto a thread of its own. At most `queue_capacity`
    /// requests wait at once (a submit past it is [`SubmitError::Busy`]);
    /// the broker sizes it from `limits.max_connections`, since a
    /// connection has at most a few requests outstanding.
    ///
    /// `deliver` runs on the storage thread once per request, after the
    /// commit holding it returned. It must not block: hand the completion
    /// to a channel (an `async-channel`/`smol::channel` sender's
    /// `try_send` on an unbounded channel, or a `std::sync::mpsc` sender
    /// plus a waker), and the number in flight is bounded by the queue.
    pub fn spawn(
        provider: Box<dyn Provider>,
        policy: CommitPolicy,
        queue_capacity: usize,
        deliver: impl FnMut(Completion) + Send + 'static,
    ) -> Result<StorageThread, StoreError> {
        let (tx, rx) = mpsc::sync_channel(queue_capacity.max(1));
        let counters = Arc::new(Counters::default());
        counters
            .used_bytes
            .store(provider.usage().used_bytes, Ordering::Relaxed);
        // A provider can stand failed from its start (a damaged file).
        *counters.failure.lock().unwrap_or_else(|p| p.into_inner()) = provider.failure();
        let thread_counters = Arc::clone(&counters);
        let name = format!("saguin-storage-{}", provider.name());
        let (running_tx, running) = mpsc::sync_channel(1);
        let join = thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Some(id) = this_thread_id() {
                    thread_counters.thread_id.store(id, Ordering::Relaxed);
                }
                let _ = running_tx.send(());
                let worker = Worker {
                    provider,
                    rx,
                    policy,
                    deliver: Box::new(deliver),
                    counters: Arc::clone(&thread_counters),
                    carried: None,
                    stopping: false,
                    backup: None,
                };
                let result = worker.run();
                thread_counters.stopped.store(true, Ordering::Relaxed);
                result
            })
            .map_err(|e| StoreError::io(name, "start the storage thread", e))?;
        // Once it runs its id is known, so a first reading of what it
        // wrote (the flash-wear window's start) is never missed.
        let _ = running.recv();
        Ok(StorageThread {
            handle: StorageHandle { tx },
            counters,
            join,
        })
    }

    pub fn handle(&self) -> StorageHandle {
        self.handle.clone()
    }

    pub fn stats(&self) -> CommitStats {
        self.counters.snapshot()
    }

    /// A view of this thread's counters that another thread may keep.
    pub fn watch(&self) -> StorageWatch {
        StorageWatch(Arc::clone(&self.counters))
    }

    /// Finishes what is queued ahead of the request to stop, answers
    /// anything behind it with [`StoreError::Stopped`], closes the provider
    /// (a memory provider writes its snapshot here) and returns how that
    /// went. Blocks until then: call it from the shell's shutdown path, not
    /// from the executor.
    pub fn shutdown(self) -> Result<(), StoreError> {
        // A blocking send: the queue may be full, and shutdown waits its turn.
        let _ = self.handle.tx.send(Request::Shutdown);
        drop(self.handle);
        match self.join.join() {
            Ok(result) => result,
            Err(_) => Err(StoreError::Stopped),
        }
    }
}

/// The calling thread's id, from `/proc/thread-self` (`<pid>/task/<tid>`).
fn this_thread_id() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// Why a batch stopped collecting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closed {
    Records,
    Interval,
    Other,
}

struct Batch {
    requests: Vec<(Ticket, Vec<Write>)>,
    records: u32,
    writes: usize,
}

impl Batch {
    fn fits(&self, writes: &[Write], max_records: u32) -> bool {
        let records = appends(writes);
        self.records.saturating_add(records) <= max_records
            && self.writes + writes.len() <= MAX_BATCH_WRITES
    }

    fn push(&mut self, ticket: Ticket, writes: Vec<Write>) {
        self.records = self.records.saturating_add(appends(&writes));
        self.writes += writes.len();
        self.requests.push((ticket, writes));
    }
}

fn appends(writes: &[Write]) -> u32 {
    u32::try_from(writes.iter().filter(|w| w.is_append()).count()).unwrap_or(u32::MAX)
}

struct Worker {
    provider: Box<dyn Provider>,
    rx: Receiver<Request>,
    policy: CommitPolicy,
    deliver: Box<dyn FnMut(Completion) + Send>,
    counters: Arc<Counters>,
    /// A request that did not fit the last batch; it opens the next.
    carried: Option<Request>,
    stopping: bool,
    /// The backup being copied, if one is.
    backup: Option<JoinHandle<()>>,
}

impl Worker {
    fn run(mut self) -> Result<(), StoreError> {
        loop {
            let request = match self.carried.take() {
                Some(r) => r,
                None if self.stopping => break,
                None => match self.next_request() {
                    Some(r) => r,
                    None => break,
                },
            };
            let Request::Commit { ticket, writes } = request else {
                if !self.serve(request) {
                    self.stopping = true;
                }
                continue;
            };
            let mut batch = Batch {
                requests: Vec::new(),
                records: 0,
                writes: 0,
            };
            batch.push(ticket, writes);
            let closed = self.gather(&mut batch);
            match closed {
                Closed::Records => Counters::add(&self.counters.closed_by_records, 1),
                Closed::Interval => Counters::add(&self.counters.closed_by_interval, 1),
                // Only a transaction that stored publishes is counted.
                Closed::Other if batch.records == 0 => {}
                Closed::Other => match self.policy {
                    CommitPolicy::PerPublish => Counters::add(&self.counters.unbatched, 1),
                    _ => Counters::add(&self.counters.closed_by_commit, 1),
                },
            }
            self.commit(batch);
        }
        // Anything submitted after the request to stop was never stored.
        while let Ok(request) = self.rx.try_recv() {
            self.refuse(request);
        }
        // A copy reading the file finishes before the file is closed.
        if let Some(backup) = self.backup.take() {
            let _ = backup.join();
        }
        self.provider.close()
    }

    /// Waits for the next request; when the provider has a checkpoint
    /// coming due, makes it while idle rather than in a later commit.
    /// `None` once every handle is gone.
    fn next_request(&mut self) -> Option<Request> {
        loop {
            let Some(due_in) = self.provider.checkpoint_due_in() else {
                return self.rx.recv().ok();
            };
            match self.rx.recv_timeout(due_in) {
                Ok(r) => return Some(r),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = self.provider.checkpoint() {
                        Counters::add(&self.counters.failed_commits, 1);
                        if matches!(e, StoreError::DeviceFull { .. }) {
                            // Said once by the provider; it is tried again
                            // when its next retry is due.
                            continue;
                        }
                        // The records stay safe in the journal; the next
                        // commit checkpoints instead, or meets the failure.
                        if !self.note_failure(&e) {
                            log::warn!("storage provider {}: {e}", self.provider.name());
                        }
                        return self.rx.recv().ok();
                    }
                }
            }
        }
    }

    /// Answers a read or a lookup at once; `false` for the request to stop.
    fn serve(&mut self, request: Request) -> bool {
        let completion = match request {
            Request::Read {
                ticket,
                channel,
                from_offset,
                limit,
            } => Completion {
                ticket,
                answer: Answer::Read(self.provider.read(&channel, from_offset, limit)),
            },
            Request::Position {
                ticket,
                channel,
                reader,
            } => Completion {
                ticket,
                answer: Answer::Position(self.provider.position(&channel, &reader)),
            },
            Request::FirstAtOrAfter {
                ticket,
                channel,
                at_ms,
            } => Completion {
                ticket,
                answer: Answer::Offset(self.provider.first_at_or_after(&channel, at_ms)),
            },
            Request::Entries { ticket, channel } => Completion {
                ticket,
                answer: Answer::Entries(self.provider.entries(&channel)),
            },
            Request::Backup { destination, reply } => {
                self.start_backup(destination, reply);
                return true;
            }
            Request::ChannelBytes { reply } => {
                let channels = self.provider.channels().into_iter();
                reply(channels.map(|(name, s)| (name, s.record_bytes)).collect());
                return true;
            }
            Request::Shutdown => return false,
            Request::Commit { .. } => unreachable!("commits are batched, not served"),
        };
        (self.deliver)(completion);
        true
    }

    /// Takes the provider's view now, between two commits, and copies it
    /// on a thread of its own.
    fn start_backup(&mut self, destination: PathBuf, reply: BackupReply) {
        let name = self.provider.name().to_string();
        if self.backup.as_ref().is_some_and(|b| !b.is_finished()) {
            return reply(Err(StoreError::Invalid(format!(
                "a backup of provider {name} is already running; wait for it to finish"
            ))));
        }
        let view = match self.provider.backup_view() {
            Some(Ok(view)) => view,
            Some(Err(e)) => return reply(Err(e)),
            None => {
                return reply(Err(StoreError::Invalid(format!(
                    "provider {name} keeps its records in memory: its copy is its snapshot directory, written at a graceful stop"
                ))))
            }
        };
        // Shared so that a thread that cannot be started still answers.
        let reply = SharedReply::new(reply);
        let thread_reply = reply.clone();
        let spawned = thread::Builder::new()
            .name(format!("saguin-backup-{name}"))
            .spawn(move || thread_reply.answer(take_backup(view, &destination)));
        match spawned {
            Ok(handle) => self.backup = Some(handle),
            Err(e) => reply.answer(Err(StoreError::io(name, "start a backup thread", e))),
        }
    }

    fn refuse(&mut self, request: Request) {
        let (ticket, answer) = match request {
            Request::Commit { ticket, .. } => (ticket, Answer::Committed(Err(StoreError::Stopped))),
            Request::Read { ticket, .. } => (ticket, Answer::Read(Err(StoreError::Stopped))),
            Request::Position { ticket, .. } => {
                (ticket, Answer::Position(Err(StoreError::Stopped)))
            }
            Request::FirstAtOrAfter { ticket, .. } => {
                (ticket, Answer::Offset(Err(StoreError::Stopped)))
            }
            Request::Entries { ticket, .. } => (ticket, Answer::Entries(Err(StoreError::Stopped))),
            Request::Backup { reply, .. } => return reply(Err(StoreError::Stopped)),
            Request::ChannelBytes { reply } => return reply(Vec::new()),
            Request::Shutdown => return,
        };
        (self.deliver)(Completion { ticket, answer });
    }

    /// Takes one queued request into the batch, or serves it; `false` when
    /// the batch must close (it did not fit, or the thread is stopping).
    fn absorb(&mut self, request: Request, batch: &mut Batch, max_records: u32) -> bool {
        match request {
            Request::Commit { ticket, writes } => {
                if batch.fits(&writes, max_records) {
                    batch.push(ticket, writes);
                    true
                } else {
                    self.carried = Some(Request::Commit { ticket, writes });
                    false
                }
            }
            other => {
                let go_on = self.serve(other);
                if !go_on {
                    self.stopping = true;
                }
                go_on
            }
        }
    }

    fn gather(&mut self, batch: &mut Batch) -> Closed {
        let (wait, max_records) = match self.policy {
            CommitPolicy::PerPublish => return Closed::Other,
            CommitPolicy::Collect => (None, COLLECT_MAX_RECORDS),
            CommitPolicy::Interval {
                interval_ms,
                max_records,
            } => (
                Some(Duration::from_millis(u64::from(interval_ms))),
                max_records,
            ),
        };
        // Only a batch holding a publish waits for company.
        let deadline = match wait {
            Some(interval) if batch.records > 0 => Some(Instant::now() + interval),
            _ => None,
        };
        loop {
            if batch.records >= max_records {
                return Closed::Records;
            }
            let next = match deadline {
                None => match self.rx.try_recv() {
                    Ok(r) => r,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Closed::Other,
                },
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Closed::Interval;
                    }
                    match self.rx.recv_timeout(left) {
                        Ok(r) => r,
                        Err(RecvTimeoutError::Timeout) => return Closed::Interval,
                        Err(RecvTimeoutError::Disconnected) => return Closed::Other,
                    }
                }
            };
            if !self.absorb(next, batch, max_records) {
                return Closed::Other;
            }
        }
    }

    fn commit(&mut self, batch: Batch) {
        self.commit_batch(batch);
        // A provider can fail after answering a batch (its open
        // transaction's commit): `/health` hears of it now, not at the
        // next refusal.
        if let Some(failure) = self.provider.failure() {
            self.note_failure(&StoreError::Failed(failure));
        }
        let used_bytes = self.provider.usage().used_bytes;
        self.counters
            .used_bytes
            .store(used_bytes, Ordering::Relaxed);
    }

    fn commit_batch(&mut self, batch: Batch) {
        let mut tickets = Vec::with_capacity(batch.requests.len());
        let mut all = Vec::with_capacity(batch.writes);
        for (ticket, writes) in batch.requests {
            tickets.push((ticket, writes.len()));
            all.extend(writes);
        }
        match self.provider.commit_owned(all) {
            Ok(outcomes) => {
                self.count(&outcomes, tickets.len());
                let mut outcomes = outcomes.into_iter();
                for (ticket, n) in tickets {
                    let mine: Vec<Outcome> = outcomes.by_ref().take(n).collect();
                    (self.deliver)(Completion {
                        ticket,
                        answer: Answer::Committed(Ok(mine)),
                    });
                }
            }
            Err((e, _)) if tickets.len() == 1 || e.is_device_error() => {
                // The device's answer is every request's: alone, each
                // would meet it again, and a failed sync retried could
                // succeed over writes the device already dropped.
                self.note_failure(&e);
                Counters::add(&self.counters.failed_commits, 1);
                Counters::add(&self.counters.requests, tickets.len() as u64);
                let Some(((last, _), others)) = tickets.split_last() else {
                    return;
                };
                for (ticket, _) in others {
                    let again = e.for_another().unwrap_or(StoreError::Stopped);
                    (self.deliver)(Completion {
                        ticket: *ticket,
                        answer: Answer::Committed(Err(again)),
                    });
                }
                (self.deliver)(Completion {
                    ticket: *last,
                    answer: Answer::Committed(Err(e)),
                });
            }
            Err((_, all)) => {
                // One request's failure must not be its neighbours': each
                // runs again alone, and gets the answer it would have had.
                Counters::add(&self.counters.failed_batches, 1);
                Counters::add(&self.counters.failed_commits, 1);
                let mut at = 0;
                for (ticket, n) in tickets {
                    let result = self.provider.commit(&all[at..at + n]);
                    at += n;
                    match &result {
                        Ok(outcomes) => self.count(outcomes, 1),
                        Err(e) => {
                            self.note_failure(e);
                            Counters::add(&self.counters.failed_commits, 1);
                            Counters::add(&self.counters.requests, 1);
                        }
                    }
                    (self.deliver)(Completion {
                        ticket,
                        answer: Answer::Committed(result),
                    });
                }
            }
        }
    }

    /// Keeps a provider's failure where `/health` reads it; `true` when
    /// `error` is one (the provider has logged it already).
    fn note_failure(&self, error: &StoreError) -> bool {
        let StoreError::Failed(failure) = error else {
            return false;
        };
        let mut kept = self
            .counters
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        kept.get_or_insert_with(|| Arc::clone(failure));
        true
    }

    fn count(&self, outcomes: &[Outcome], requests: usize) {
        let appended = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Appended { .. }))
            .count();
        Counters::add(&self.counters.commits, 1);
        Counters::add(&self.counters.requests, requests as u64);
        Counters::add(&self.counters.records, appended as u64);
    }
}
