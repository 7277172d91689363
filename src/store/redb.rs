//! `type: redb`: one redb file per provider and its journal. Every batch
//! is applied in a write transaction and synced to the journal (or, at a
//! checkpoint, committed with `Durability::Immediate`) before `commit`
//! returns, so a record is on disk before its publisher is told anything,
//! and a power cut loses nothing that was acknowledged. The transaction
//! stays open for the batches after it until a read or a bound commits it
//! (`pending.rs`).
//!
//! Tables:
//!
//! | table | key | value |
//! |---|---|---|
//! | `meta` | `&str` | format version, who created the file and when, the next channel id, the journal's id and the last journal sequence the file holds |
//! | `channels` | channel name | channel id (`u32`) and its [`ChannelState`] |
//! | `records` | (channel id, offset) | the encoded message |
//! | `positions` | (channel id, reader) | the reader's offset |
//!
//! Channel ids keep a channel's name out of every record key. Counters are
//! loaded once at open and kept in memory beside the file: the provider is
//! the only writer, and it updates them only from transactions that
//! committed.

#[cfg(test)]
use std::cell::Cell;
use std::cell::RefCell;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::redb::{
    Builder, Database, Durability, Key, ReadOnlyTable, ReadableDatabase, TableDefinition, Value,
};

use super::ahead::{forecast, Answered, Behind};
use super::backup::BackupView;
use super::batch_encoding::encode_batch;
use super::budget::Budget;
use super::disk::{Disk, RealDisk};
use super::encoding::{message_from_bytes, message_header};
use super::error::db_error;
use super::error::{Failure, StoreError, SYNC_FAILED_REMEDY};
use super::files::lock_path_for;
use super::files::sync_parent;
use super::journal::Journal;
use super::lock::LockFile;
use super::pending::{Base, Pending, Rebuild, PENDING_MAX_AGE_MS};
use super::redb_file::{create_provider_db, IoFailures};
use super::redb_schema::{
    check_format, counted_bytes, for_each_keyed, load_channels, read_next_channel_id, ChannelMap,
    ENTRIES, POSITIONS, RECORDS, REDB_CACHE_BYTES,
};
use super::redb_tables::{apply_in, Applied, EncodedRecords};
use super::replay::{apply_journalled, attach_journal, checkpoint_db, FrameWrites};
use super::types::{
    empty_read, ChannelState, Outcome, Read, ReadBatch, ReadLimit, Record, Usage, Write,
};
use super::validate::check_writes;
use super::Provider;

/// How long a batch may sit in the journal alone before redb is made
/// durable with it, unless the provider's `checkpoint_interval` says.
/// Longer writes fewer redb pages per record, and makes the replay after
/// a crash longer and redb's unwritten pages more.
pub const DEFAULT_CHECKPOINT_INTERVAL_MS: u32 = 1_000;

/// How often a provider whose device was full tries again to open its
/// file, which reads the file's tree: at a commit or while idle, no more
/// often than this.
const ROOM_RETRY_MS: u64 = 5_000;

/// A device found full under the redb file: redb takes nothing more from
/// that opening of the file, so it is opened again once there is room.
#[derive(Debug)]
struct FullDevice {
    /// What the commit that met it was doing.
    action: &'static str,
    /// The last try to open the file again.
    tried: Instant,
}

/// When redb was last made durable, and whether it must be next.
#[derive(Debug)]
struct CheckpointState {
    interval_ms: u64,
    /// The first journalled commit since the last checkpoint.
    since: Option<Instant>,
    /// A frame may be on the disk without its transaction: the next
    /// commit is a checkpoint, whose sequence passes it.
    must: bool,
}

pub struct RedbProvider {
    name: String,
    path: PathBuf,
    /// Acknowledged batches applied in a transaction not committed yet
    /// (`pending.rs`); committed before anything reads the file. Declared
    /// before the file, so a drop aborts it first.
    pending: RefCell<Option<Pending>>,
    /// Batches of appends answered and not yet applied in `pending`
    /// (`ahead.rs`); applied before anything else touches it.
    pub(crate) behind: RefCell<Option<Behind>>,
    /// Set when the device failed an operation the provider relies on (a
    /// sync of the journal or the file), or when acknowledged batches
    /// could not be put back into a transaction after a failure: only a
    /// restart (the journal's replay of what is truly on the disk) brings
    /// the provider back, so nothing more is taken and nothing retried.
    failure: RefCell<Option<Arc<Failure>>>,
    /// What the redb file's operations last failed at: redb keeps only
    /// the message.
    file_failures: Arc<IoFailures>,
    /// Set while the redb file's device has no room: every call is
    /// refused 0x97 until the file opens again.
    full: RefCell<Option<FullDevice>>,
    room_retry: Duration,
    pending_max_age: Duration,
    // Declared before the lock, so an unclean drop closes the file before
    // another broker may take it.
    db: Database,
    budget: Budget,
    channels: ChannelMap,
    next_channel_id: u32,
    journal: Journal,
    /// The last journal sequence used (or attempted).
    journal_sequence: u64,
    checkpoint: CheckpointState,
    _lock: LockFile,
    /// Where every file of the provider is read and written.
    disk: Arc<dyn Disk>,
    /// Tests make a commit fail after its writes are in the transaction.
    #[cfg(test)]
    pub(crate) fail_next_commit: bool,
    /// Tests count the commits of batch-holding transactions.
    #[cfg(test)]
    pub(crate) redb_commits: Cell<u64>,
    /// Tests make the next apply of an answered batch fail.
    #[cfg(test)]
    pub(crate) fail_next_apply: Cell<bool>,
    /// Tests make the next journal append fail with this OS error, as the
    /// device would answer its `O_DSYNC` write.
    #[cfg(test)]
    pub(crate) fail_next_append: Option<i32>,
}

impl RedbProvider {
    /// Opens (creating if absent) the provider's file. The lock
    /// `<file_path>.lock` is taken first, so a broker that may not have the
    /// provider never touches its file; then the file's format is checked,
    /// and every channel's counters are loaded.
    ///
    /// The parent directory must exist: a typo in `file_path` is reported,
    /// not turned into a new tree of directories.
    pub fn open(
        name: &str,
        file_path: &Path,
        max_bytes: u64,
        reserve_bytes: u64,
    ) -> Result<RedbProvider, StoreError> {
        Self::open_on(
            RealDisk::shared(),
            name,
            file_path,
            max_bytes,
            reserve_bytes,
        )
    }

    /// [`RedbProvider::open`] on `disk`: every file of the provider is
    /// read and written through it.
    pub fn open_on(
        disk: Arc<dyn Disk>,
        name: &str,
        file_path: &Path,
        max_bytes: u64,
        reserve_bytes: u64,
    ) -> Result<RedbProvider, StoreError> {
        let lock = LockFile::acquire(disk.as_ref(), &lock_path_for(file_path), name)?;
        // A file altered outside redb is reported as corrupt instead of
        // trusted: the price is a read of the whole file at each start.
        let builder = builder(true);
        let file_failures = Arc::<IoFailures>::default();
        let db = create_provider_db(disk.as_ref(), file_path, &builder, file_failures.clone())
            .map_err(|e| zeroed_is_damaged(disk.as_ref(), file_path, e))?;
        check_format(&db, file_path)?;
        sync_parent(disk.as_ref(), file_path)?;
        let (journal, journal_sequence) = attach_journal(disk.as_ref(), &db, file_path)?;
        let next_channel_id = read_next_channel_id(&db, file_path)?;
        let channels = load_channels(&db, file_path)?;
        let mut budget = Budget::new(max_bytes, reserve_bytes);
        budget.used_bytes = counted_bytes(&channels);
        Ok(RedbProvider {
            name: name.to_string(),
            path: file_path.to_path_buf(),
            pending: RefCell::new(None),
            behind: RefCell::new(None),
            failure: RefCell::new(None),
            file_failures,
            full: RefCell::new(None),
            room_retry: Duration::from_millis(ROOM_RETRY_MS),
            pending_max_age: Duration::from_millis(PENDING_MAX_AGE_MS),
            db,
            budget,
            channels,
            next_channel_id,
            journal,
            journal_sequence,
            checkpoint: CheckpointState {
                interval_ms: u64::from(DEFAULT_CHECKPOINT_INTERVAL_MS),
                since: None,
                must: false,
            },
            _lock: lock,
            disk,
            #[cfg(test)]
            fail_next_commit: false,
            #[cfg(test)]
            redb_commits: Cell::new(0),
            #[cfg(test)]
            fail_next_apply: Cell::new(false),
            #[cfg(test)]
            fail_next_append: None,
        })
    }

    pub fn file_path(&self) -> &Path {
        &self.path
    }

    /// Sets how often a full device is tried again; tests make it at once.
    #[cfg(test)]
    pub(crate) fn set_room_retry_ms(&mut self, retry_ms: u64) {
        self.room_retry = Duration::from_millis(retry_ms);
    }

    /// Sets how long a batch may sit in the journal alone; tests stretch it
    /// so that a crash image is certain to need the journal.
    pub fn set_checkpoint_interval_ms(&mut self, interval_ms: u64) {
        self.checkpoint.interval_ms = interval_ms;
    }

    /// Sets how long acknowledged batches may wait in the open
    /// transaction; tests stretch it so that only counts and reads commit.
    pub fn set_pending_max_age_ms(&mut self, max_age_ms: u64) {
        self.pending_max_age = Duration::from_millis(max_age_ms);
    }

    fn checkpoint_due(&self) -> bool {
        self.checkpoint
            .since
            .is_some_and(|t| t.elapsed() >= Duration::from_millis(self.checkpoint.interval_ms))
    }

    /// Where a new transaction starts: the counters as committed.
    fn base(&self) -> Base {
        Base {
            channels: self.channels.clone(),
            next_channel_id: self.next_channel_id,
        }
    }

    /// Refuses, without touching the disk, anything asked of a provider
    /// that has failed.
    fn unbroken(&self) -> Result<(), StoreError> {
        if let Some(failure) = self.failure.borrow().as_ref() {
            return Err(StoreError::Failed(Arc::clone(failure)));
        }
        match self.full.borrow().as_ref() {
            Some(full) => Err(self.device_full(full.action)),
            None => Ok(()),
        }
    }

    fn device_full(&self, action: &'static str) -> StoreError {
        StoreError::DeviceFull {
            path: self.path.clone(),
            action,
        }
    }

    /// While the redb file's device was full: opens the file again once
    /// a retry is due, which replays the journal and checkpoints, as a
    /// restart would. Still no room is the same refusal; any other
    /// failure stops the provider.
    fn regain_room(&mut self) -> Result<(), StoreError> {
        let Some(full) = self.full.get_mut() else {
            return Ok(());
        };
        let action = full.action;
        if full.tried.elapsed() < self.room_retry {
            return Err(self.device_full(action));
        }
        full.tried = Instant::now();
        self.file_failures.take();
        match self.reopen() {
            Ok(()) => {
                *self.full.get_mut() = None;
                log::info!(
                    "storage provider {}: there is room for {} again; writes resume",
                    self.name,
                    self.path.display()
                );
                Ok(())
            }
            Err(e) if no_space(&e) || self.file_failures.take().is_some_and(|f| f.no_space) => {
                Err(self.device_full(action))
            }
            Err(e) => Err(self.fail(
                &self.path,
                "open the redb file again after its device was full",
                e.to_string(),
            )),
        }
    }

    /// Opens the redb file again in place of an opening redb refuses
    /// everything on. What the open transaction and the answered batches
    /// held is in the journal, and comes back by its replay.
    fn reopen(&mut self) -> Result<(), StoreError> {
        self.pending.get_mut().take();
        self.behind.get_mut().take();
        // The old opening must be gone before the file is opened again;
        // an empty database in memory holds its place meanwhile, and the
        // provider stays refused (`full`) until the file is back.
        let placeholder = Builder::new()
            .create_with_backend(::redb::backends::InMemoryBackend::new())
            .map_err(db_error(
                &self.path,
                "make room to open the redb file again",
            ))?;
        drop(std::mem::replace(&mut self.db, placeholder));
        // Checked whole at the start; this process has been its only writer.
        let db = create_provider_db(
            self.disk.as_ref(),
            &self.path,
            &builder(false),
            self.file_failures.clone(),
        )?;
        check_format(&db, &self.path)?;
        let (journal, journal_sequence) = attach_journal(self.disk.as_ref(), &db, &self.path)?;
        let next_channel_id = read_next_channel_id(&db, &self.path)?;
        let channels = load_channels(&db, &self.path)?;
        self.budget.used_bytes = counted_bytes(&channels);
        self.channels = channels;
        self.next_channel_id = next_channel_id;
        self.journal = journal;
        self.journal_sequence = journal_sequence;
        self.db = db;
        self.checkpoint.since = None;
        self.checkpoint.must = false;
        Ok(())
    }

    /// Stops the provider for good (until a restart): logged once, at
    /// ERROR, with what the operator can do.
    fn fail(&self, path: &Path, action: impl Into<String>, cause: impl Into<String>) -> StoreError {
        let failure = Arc::new(Failure {
            provider: self.name.clone(),
            path: path.to_path_buf(),
            action: action.into(),
            cause: cause.into(),
            remedy: SYNC_FAILED_REMEDY.into(),
        });
        log::error!("{failure}");
        *self.failure.borrow_mut() = Some(Arc::clone(&failure));
        *self.full.borrow_mut() = None;
        StoreError::Failed(failure)
    }

    /// What a failed redb commit of `action` comes to: when the file's
    /// device failed it, redb refuses everything after, and the provider
    /// stops (a full device is said so); otherwise `error` as it was, and
    /// `None` so the caller rebuilds the transaction.
    fn file_failure(&self, action: &'static str, error: &StoreError) -> Option<StoreError> {
        let failed = self.file_failures.take()?;
        if failed.no_space {
            log::warn!(
                "storage provider {}: the device under {} is full ({}); commits are refused (0x97) until there is room, tried again every {} s, and nothing acknowledged is lost. Free space on the device, or lower max_bytes below what it holds",
                self.name,
                self.path.display(),
                failed.cause,
                self.room_retry.as_secs()
            );
            *self.full.borrow_mut() = Some(FullDevice {
                action,
                tried: Instant::now(),
            });
            return Some(self.device_full(action));
        }
        Some(self.fail(
            &self.path,
            format!("{action} (a {} of the file failed)", failed.action),
            format!("{}; redb said: {error}", failed.cause),
        ))
    }

    /// What a failed journal append comes to: a full device refuses this
    /// batch only; any other failure of the write, which is the frame's
    /// sync, stops the provider, since the frame's blocks may be neither
    /// old nor new and the kernel may report the loss only once.
    fn append_failure(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::Io {
                path,
                action,
                source,
            } if source.kind() == std::io::ErrorKind::StorageFull => {
                StoreError::DeviceFull { path, action }
            }
            StoreError::Io {
                path,
                action,
                source,
            } => self.fail(&path, action, source.to_string()),
            other => other,
        }
    }

    /// After a failure inside the open transaction: a new one holding the
    /// acknowledged batches again, or, if even that fails, the provider
    /// stops taking anything until a restart replays them.
    fn rebuild(&self, rebuild: Rebuild) {
        match rebuild.run(&self.db, &self.path, self.journal.path(), &self.channels) {
            Ok(pending) if pending.is_empty() => {}
            Ok(pending) => *self.pending.borrow_mut() = Some(pending),
            Err(e) => {
                self.fail(
                    &self.path,
                    "apply acknowledged batches again after a failed commit to",
                    e.to_string(),
                );
            }
        }
    }

    /// Commits the open transaction without a sync: every batch in it is
    /// synced in the journal already. Reads call this first, so they see
    /// every acknowledged batch.
    fn settle(&self) -> Result<(), StoreError> {
        self.unbroken()?;
        self.catch_up()?;
        let Some(pending) = self.pending.borrow_mut().take() else {
            return Ok(());
        };
        self.commit_pending(pending, Durability::None)
    }

    /// Commits the open transaction, recording the last journal sequence
    /// used; after a failure it is rebuilt without the failed batch.
    fn commit_pending(&self, pending: Pending, durability: Durability) -> Result<(), StoreError> {
        #[cfg(test)]
        self.redb_commits.set(self.redb_commits.get() + 1);
        pending
            .commit(&self.path, self.journal_sequence, durability)
            .map_err(|failed| {
                let (e, rebuild) = *failed;
                if let Some(failed) = self.file_failure("commit batches to", &e) {
                    // Every batch in it is in the journal, for the replay.
                    drop(rebuild);
                    return failed;
                }
                self.rebuild(rebuild);
                e
            })
    }

    /// A checkpoint: redb made durable with everything acknowledged, so
    /// the journal's frames are no longer needed.
    fn make_durable(&mut self) -> Result<(), StoreError> {
        self.unbroken()?;
        self.catch_up()?;
        if self.checkpoint.since.is_none() && !self.checkpoint.must {
            return Ok(());
        }
        match self.pending.get_mut().take() {
            Some(pending) => self.commit_pending(pending, Durability::Immediate)?,
            None => checkpoint_db(&self.db, &self.path, self.journal_sequence)
                .map_err(|e| self.file_failure("checkpoint", &e).unwrap_or(e))?,
        }
        self.checkpointed();
        Ok(())
    }

    /// The counters of a batch that committed (or whose frame is synced).
    fn adopt(&mut self, applied: Applied) -> Vec<Outcome> {
        self.channels.extend(applied.staged);
        self.next_channel_id = applied.next_channel_id;
        self.budget = applied.budget;
        applied.outcomes
    }

    /// Applies the answered batches that are not in the open transaction
    /// yet, oldest first. After a failure the transaction is rebuilt from
    /// every frame, or the provider stops until a restart replays them.
    fn catch_up(&self) -> Result<(), StoreError> {
        let Some(mut behind) = self.behind.borrow_mut().take() else {
            return Ok(());
        };
        let mut slot = self.pending.borrow_mut();
        let mut pending = match slot.take() {
            Some(pending) => pending,
            None => match Pending::begin(&self.db, &self.path, behind.base(), self.pending_max_age)
            {
                Ok(pending) => pending,
                Err(e) => {
                    // Nothing applied: the batches wait for the next try.
                    drop(slot);
                    *self.behind.borrow_mut() = Some(behind);
                    return Err(e);
                }
            },
        };
        while let Some(Answered {
            sequence,
            frame,
            records,
            writes,
        }) = behind.pop()
        {
            #[cfg(test)]
            let injected = self.fail_next_apply.replace(false);
            #[cfg(not(test))]
            let injected = false;
            let applied = if injected {
                Err(StoreError::Invalid("a failure injected by a test".into()))
            } else {
                apply_journalled(
                    &pending.txn,
                    &self.path,
                    self.journal.path(),
                    &behind.channels,
                    behind.next_channel_id,
                    sequence,
                    FrameWrites {
                        writes: &writes,
                        encoded: Some(EncodedRecords::new(&frame, &records)),
                    },
                )
            };
            match applied {
                Ok(applied) => {
                    behind.channels.extend(applied.staged);
                    behind.next_channel_id = applied.next_channel_id;
                    pending.push(sequence, frame);
                }
                Err(e) => {
                    let mut rebuild = pending.abandon();
                    rebuild.then(std::iter::once((sequence, frame)));
                    rebuild.then(behind.into_frames());
                    drop(slot);
                    self.rebuild(rebuild);
                    return Err(e);
                }
            }
        }
        *slot = Some(pending);
        Ok(())
    }

    /// Commits a batch of appends ahead of redb (`ahead.rs`): forecast,
    /// journalled, answered, applied later. `None` when this batch must
    /// go the usual way (a checkpoint is owed, or the journal is full).
    fn commit_ahead(
        &mut self,
        writes: &mut Vec<Write>,
    ) -> Result<Option<Vec<Outcome>>, StoreError> {
        if self.checkpoint.must || self.checkpoint_due() {
            return Ok(None);
        }
        let forecast = forecast(&self.channels, self.next_channel_id, self.budget, writes)?;
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_commit) {
            return Err(StoreError::Invalid("a failure injected by a test".into()));
        }
        let (frame, records) = frame_of_kept(writes, &forecast.outcomes);
        if !self.journal.fits(frame.len()) {
            return Ok(None);
        }
        self.journal_sequence += 1;
        // As in `commit`: a frame that may be on the disk unanswered is
        // passed by a checkpoint before anything newer is journalled.
        self.checkpoint.must = true;
        if let Err(e) = self.append(&frame) {
            return Err(self.append_failure(e));
        }
        self.checkpoint.must = false;
        self.checkpoint.since.get_or_insert_with(Instant::now);
        let behind = self
            .behind
            .get_mut()
            .get_or_insert_with(|| Behind::new(self.channels.clone(), self.next_channel_id));
        // What the frame holds is what is applied: not the refused.
        let mut outcomes = forecast.outcomes.iter();
        writes.retain(|_| !matches!(outcomes.next(), Some(Outcome::Refused(_))));
        behind.push(Answered {
            sequence: self.journal_sequence,
            frame,
            records,
            writes: std::mem::take(writes),
        });
        Ok(Some(self.adopt(forecast)))
    }

    /// Appends `frame` to the journal at the current sequence.
    fn append(&mut self, frame: &[u8]) -> Result<(), StoreError> {
        #[cfg(test)]
        if let Some(errno) = self.fail_next_append.take() {
            return Err(StoreError::io(
                self.journal.path(),
                "write and sync a journal frame",
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        self.journal.append(self.journal_sequence, frame)
    }

    fn checkpointed(&mut self) {
        self.journal.reset();
        self.checkpoint.since = None;
        self.checkpoint.must = false;
    }
}

/// A file whose first page is zeros is this provider's file damaged (a
/// power cut on flash can leave one so), not some other program's file:
/// any file format starts with something. `error` as it was otherwise.
fn zeroed_is_damaged(disk: &dyn Disk, path: &Path, error: StoreError) -> StoreError {
    let zeroed = || -> std::io::Result<bool> {
        let file = disk.open(path, super::disk::OpenMode::read_only())?;
        let mut head = vec![0u8; 4_096.min(file.size_bytes()? as usize)];
        file.read_exact_at(&mut head, 0)?;
        Ok(!head.is_empty() && head.iter().all(|&b| b == 0))
    };
    match error {
        StoreError::Database { detail, .. } if zeroed().unwrap_or(false) => StoreError::Damaged {
            path: path.to_path_buf(),
            detail: format!("its first page is zeros ({detail})"),
        },
        other => other,
    }
}

/// redb's settings for the provider's file; `check` reads it whole at
/// the open.
fn builder(check: bool) -> Builder {
    let mut b = Builder::new();
    b.set_cache_size(REDB_CACHE_BYTES)
        .set_check_integrity_on_open(check);
    b
}

/// Whether `error` is the device's `ENOSPC`.
fn no_space(error: &StoreError) -> bool {
    match error {
        StoreError::Io { source, .. } => source.kind() == std::io::ErrorKind::StorageFull,
        StoreError::DeviceFull { .. } => true,
        _ => false,
    }
}

/// The journal frame of a batch: only what was not refused is
/// journalled. A refused write changed nothing, and a replay then needs no
/// byte bound to refuse it again.
fn frame_of_kept(writes: &[Write], outcomes: &[Outcome]) -> (Vec<u8>, Vec<Range<usize>>) {
    let kept = writes
        .iter()
        .zip(outcomes)
        .filter(|(_, o)| !matches!(o, Outcome::Refused(_)))
        .map(|(w, _)| w);
    encode_batch(kept.collect::<Vec<_>>().into_iter())
}

impl RedbProvider {
    /// One table in a fresh read transaction: every read sees one snapshot.
    fn read_table<K: Key + 'static, V: Value + 'static>(
        &self,
        table: TableDefinition<K, V>,
        opening: &'static str,
    ) -> Result<ReadOnlyTable<K, V>, StoreError> {
        self.settle()?;
        let path = self.path.as_path();
        let txn = self
            .db
            .begin_read()
            .map_err(db_error(path, "begin a read transaction"))?;
        txn.open_table(table).map_err(db_error(path, opening))
    }
}

impl Provider for RedbProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn usage(&self) -> Usage {
        self.budget.usage()
    }

    fn channel(&self, channel: &str) -> ChannelState {
        self.channels
            .get(channel)
            .map(|e| e.state)
            .unwrap_or_default()
    }

    fn channels(&self) -> Vec<(String, ChannelState)> {
        let mut all: Vec<_> = self
            .channels
            .iter()
            .map(|(name, e)| (name.clone(), e.state))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The batch is applied in the open write transaction (begun if none
    /// is), and its frame appended to the journal and synced; the
    /// transaction stays open for the next batches and is committed
    /// without a sync of its own when full or when anything reads. When a
    /// checkpoint is due, or the frame does not fit the journal, the
    /// transaction is instead committed at once with
    /// `Durability::Immediate`. Either way the batch is on disk when this
    /// returns `Ok`. The counters in memory change only after that; a
    /// failure anywhere leaves the provider as it was.
    fn commit(&mut self, writes: &[Write]) -> Result<Vec<Outcome>, StoreError> {
        check_writes(writes)?;
        self.regain_room()?;
        self.unbroken()?;
        self.catch_up()?;
        let pending = match self.pending.get_mut().take() {
            Some(pending) => pending,
            None => Pending::begin(&self.db, &self.path, self.base(), self.pending_max_age)?,
        };
        let applied = match apply_in(
            &pending.txn,
            &self.path,
            &self.channels,
            self.next_channel_id,
            self.budget,
            writes,
            None,
        ) {
            Ok(applied) => applied,
            Err(e) => {
                self.rebuild(pending.abandon());
                return Err(e);
            }
        };
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_commit) {
            self.rebuild(pending.abandon());
            return Err(StoreError::Invalid("a failure injected by a test".into()));
        }
        let (frame, _) = frame_of_kept(writes, &applied.outcomes);
        let journalled =
            !self.checkpoint.must && !self.checkpoint_due() && self.journal.fits(frame.len());
        if !journalled {
            self.commit_pending(pending, Durability::Immediate)?;
            self.checkpointed();
            return Ok(self.adopt(applied));
        }
        self.journal_sequence += 1;
        // Until a checkpoint, a frame that may be on the disk without its
        // batch acknowledged must not be replayed after newer ones: the
        // next commit is a checkpoint, past its sequence.
        self.checkpoint.must = true;
        if let Err(e) = self.append(&frame) {
            let e = self.append_failure(e);
            if matches!(e, StoreError::Failed(_)) {
                // Every acknowledged batch is in the journal, for the replay.
                drop(pending);
            } else {
                self.rebuild(pending.abandon());
            }
            return Err(e);
        }
        self.checkpoint.must = false;
        self.checkpoint.since.get_or_insert_with(Instant::now);
        let mut pending = pending;
        pending.push(self.journal_sequence, frame);
        let full = pending.is_full();
        *self.pending.get_mut() = Some(pending);
        let outcomes = self.adopt(applied);
        if full {
            // The batch is durable already; a failed commit here is put
            // back and reported to the next read or commit.
            match self.settle() {
                // Said when it happened.
                Err(StoreError::Failed(_) | StoreError::DeviceFull { .. }) | Ok(()) => {}
                Err(e) => log::warn!("{}: {e}", self.path.display()),
            }
        }
        Ok(outcomes)
    }

    /// A batch of nothing but appends is answered ahead of redb
    /// (`ahead.rs`) and its writes kept for the apply; any other goes
    /// through [`Provider::commit`].
    fn commit_owned(
        &mut self,
        mut writes: Vec<Write>,
    ) -> Result<Vec<Outcome>, (StoreError, Vec<Write>)> {
        let behind_full = self.behind.get_mut().as_ref().is_some_and(Behind::is_full);
        let only_appends = writes.iter().all(|w| matches!(w, Write::Append { .. }));
        if !behind_full && only_appends {
            let checked = check_writes(&writes)
                .and_then(|()| self.regain_room())
                .and_then(|()| self.unbroken());
            match checked.and_then(|()| self.commit_ahead(&mut writes)) {
                Ok(Some(outcomes)) => return Ok(outcomes),
                Ok(None) => {}
                Err(e) => return Err((e, writes)),
            }
        }
        self.commit(&writes).map_err(|e| (e, writes))
    }

    fn checkpoint_due_in(&self) -> Option<Duration> {
        if let Some(full) = self.full.borrow().as_ref() {
            // The file is tried again while idle, so reads resume too.
            return Some(self.room_retry.saturating_sub(full.tried.elapsed()));
        }
        if self.behind.borrow().is_some() {
            // Answered batches wait for the apply: now, if nothing is queued.
            return Some(Duration::ZERO);
        }
        let checkpoint = self.checkpoint.since.map(|since| {
            Duration::from_millis(self.checkpoint.interval_ms).saturating_sub(since.elapsed())
        });
        let settle = self.pending.borrow().as_ref().and_then(Pending::due_in);
        match (checkpoint, settle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn failure(&self) -> Option<Arc<Failure>> {
        self.failure.borrow().clone()
    }

    /// While idle: a checkpoint when one is due, otherwise the commit of
    /// the open transaction whose age ran out.
    fn checkpoint(&mut self) -> Result<(), StoreError> {
        self.regain_room()?;
        if self.checkpoint_due() {
            return self.make_durable();
        }
        if self.behind.get_mut().is_some() {
            self.unbroken()?;
            self.catch_up()?;
            if !self
                .pending
                .get_mut()
                .as_ref()
                .is_some_and(Pending::is_full)
            {
                return Ok(());
            }
        }
        self.settle()
    }

    /// Reads run on the storage thread between commits, so the counters in
    /// memory are exactly what is committed, and the records come from one
    /// read transaction.
    fn read(&self, channel: &str, from_offset: u64, limit: ReadLimit) -> Result<Read, StoreError> {
        let Some(entry) = self.channels.get(channel) else {
            return Ok(empty_read(ChannelState::default(), from_offset));
        };
        let s = entry.state;
        if from_offset < s.floor || from_offset >= s.next {
            return Ok(empty_read(s, from_offset));
        }
        let path = self.path.as_path();
        let table = self.read_table(RECORDS, "open the records table")?;
        let mut records = Vec::new();
        let mut bytes = 0u64;
        let range = table
            .range((entry.id, from_offset)..=(entry.id, u64::MAX))
            .map_err(db_error(path, "read records"))?;
        for row in range {
            if records.len() as u64 >= u64::from(limit.max_records) {
                break;
            }
            let (k, v) = row.map_err(db_error(path, "read a record"))?;
            let value = v.value();
            let (_, size) = message_header(value).map_err(|e| StoreError::format(path, e.0))?;
            if !records.is_empty() && bytes.saturating_add(size) > limit.max_bytes {
                break;
            }
            bytes += size;
            let message = message_from_bytes(value).map_err(|e| {
                StoreError::format(
                    path,
                    format!(
                        "record {} of channel {channel:?} is damaged: {}",
                        k.value().1,
                        e.0
                    ),
                )
            })?;
            records.push(Record {
                offset: k.value().1,
                message,
            });
        }
        Ok(Read::Records(ReadBatch {
            floor: s.floor,
            next: s.next,
            records,
        }))
    }

    fn position(&self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError> {
        let Some(entry) = self.channels.get(channel) else {
            return Ok(None);
        };
        let path = self.path.as_path();
        let table = self.read_table(POSITIONS, "open the positions table")?;
        Ok(table
            .get((entry.id, reader))
            .map_err(db_error(path, "read a position"))?
            .map(|v| v.value()))
    }

    fn lowest_position(&self, channel: &str) -> Result<Option<u64>, StoreError> {
        let Some(entry) = self.channels.get(channel) else {
            return Ok(None);
        };
        let path = self.path.as_path();
        let table = self.read_table(POSITIONS, "open the positions table")?;
        let mut lowest: Option<u64> = None;
        for_each_keyed(&table, entry.id, path, |_, offset| {
            lowest = Some(lowest.map_or(offset, |l| l.min(offset)));
            Ok(())
        })?;
        Ok(lowest)
    }

    fn first_at_or_after(&self, channel: &str, at_ms: u64) -> Result<Option<u64>, StoreError> {
        let Some(entry) = self.channels.get(channel) else {
            return Ok(None);
        };
        let path = self.path.as_path();
        let table = self.read_table(RECORDS, "open the records table")?;
        // Every candidate is looked at rather than bisected: receipt times
        // run backwards when the clock is stepped.
        for row in table
            .range((entry.id, 0)..=(entry.id, u64::MAX))
            .map_err(db_error(path, "read records"))?
        {
            let (k, v) = row.map_err(db_error(path, "read a record"))?;
            let (received_at_ms, _) =
                message_header(v.value()).map_err(|e| StoreError::format(path, e.0))?;
            if received_at_ms >= at_ms {
                return Ok(Some(k.value().1));
            }
        }
        Ok(None)
    }

    fn entries(&self, channel: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let Some(entry) = self.channels.get(channel) else {
            return Ok(Vec::new());
        };
        let path = self.path.as_path();
        let table = self.read_table(ENTRIES, "open the entries table")?;
        let mut all = Vec::new();
        for_each_keyed(&table, entry.id, path, |key, value| {
            all.push((key.to_string(), value.to_vec()));
            Ok(())
        })?;
        Ok(all)
    }

    fn entry(&self, channel: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(entry) = self.channels.get(channel) else {
            return Ok(None);
        };
        let path = self.path.as_path();
        let table = self.read_table(ENTRIES, "open the entries table")?;
        Ok(table
            .get((entry.id, key))
            .map_err(db_error(path, "read an entry"))?
            .map(|v| v.value().to_vec()))
    }

    /// A read transaction: redb's snapshot of the last commit, begun
    /// without waiting for or holding up any write.
    fn backup_view(&self) -> Option<Result<BackupView, StoreError>> {
        if let Err(e) = self.settle() {
            return Some(Err(e));
        }
        Some(
            self.db
                .begin_read()
                .map_err(db_error(&self.path, "begin the backup's read transaction"))
                .map(|txn| BackupView {
                    provider: self.name.clone(),
                    source: self.path.clone(),
                    txn,
                    disk: self.disk.clone(),
                }),
        )
    }

    fn close(mut self: Box<Self>) -> Result<(), StoreError> {
        // The file alone then holds everything: it can be copied or
        // converted without its journal.
        self.make_durable()?;
        self.journal.clear()?;
        let RedbProvider {
            path, db, _lock, ..
        } = *self;
        db.close().map_err(db_error(&path, "close the redb file"))?;
        drop(_lock);
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::store::redb_schema::{
        encode_entry, ChannelEntry, CHANNELS, META, META_NEXT_CHANNEL_ID,
    };
    use ::redb::ReadableTable;

    /// Writes a channel's counters straight into a closed provider's file,
    /// to stand a channel up at an offset no test could append its way to.
    pub(crate) fn seed_channel(file_path: &Path, channel: &str, state: ChannelState) {
        let db = Database::create(file_path).expect("open the file to seed");
        let txn = db.begin_write().expect("begin");
        let id;
        {
            let mut meta = txn.open_table(META).expect("meta");
            id = meta
                .get(META_NEXT_CHANNEL_ID)
                .expect("read")
                .map_or(0, |v| {
                    u32::from_le_bytes(v.value().try_into().expect("u32"))
                });
            meta.insert(META_NEXT_CHANNEL_ID, (id + 1).to_le_bytes().as_slice())
                .expect("write");
            let mut rows = txn.open_table(CHANNELS).expect("channels");
            rows.insert(
                channel,
                encode_entry(&ChannelEntry { id, state }).as_slice(),
            )
            .expect("write");
        }
        txn.commit().expect("commit");
    }
}
