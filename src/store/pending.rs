//! Batches that are acknowledged and not yet committed to redb.
//!
//! A batch is durable once its journal frame is synced; redb is only where
//! it is kept for reading. So a redb provider applies each batch into one
//! write transaction that stays open across batches and commits it
//! (without a sync) only when something needs to look at the file - a
//! read, a backup, a checkpoint - or when it has held enough: a write
//! transaction's begin and commit cost more CPU than the handful of
//! records a batch carries at a client's pace (rfcs/0003, "Batches kept
//! open"). Batches of appends join it after they are answered
//! (`ahead.rs`).
//!
//! The open transaction also keeps each batch's frame, and the provider's
//! counters as of the last commit, so that when one batch fails inside it
//! (or its commit does), the transaction is dropped and rebuilt from the
//! frames: the batches before the failure stay as they were acknowledged,
//! and the failed one leaves no trace. A crash drops it too; the frames
//! are in the journal and the replay at open applies them again.

use std::path::Path;
use std::time::{Duration, Instant};

use ::redb::{Database, Durability, WriteTransaction};

use super::error::db_error;
use super::error::StoreError;
use super::redb_schema::{write_meta_u64, ChannelMap, META_JOURNAL_SEQUENCE};
use super::replay::{apply_journalled, decode_frame};

/// The most batches one open transaction holds before it is committed.
pub(crate) const PENDING_MAX_BATCHES: usize = 128;
/// The most frame bytes an open transaction keeps for a rebuild before it
/// is committed (one batch may take it past, by at most one frame).
pub(crate) const PENDING_MAX_FRAME_BYTES: usize = 1 << 20;
/// The longest an open transaction holds its first batch before it is
/// committed, by the next batch or, when none comes, by the idle storage
/// thread (tests stretch it, `RedbProvider::set_pending_max_age_ms`).
pub(crate) const PENDING_MAX_AGE_MS: u64 = 20;

/// The provider's memory as of the last redb commit: where a rebuild
/// starts.
#[derive(Clone)]
pub(crate) struct Base {
    pub(crate) channels: ChannelMap,
    pub(crate) next_channel_id: u32,
}

/// An open write transaction and the frames of the batches applied in it.
pub(crate) struct Pending {
    pub(crate) txn: WriteTransaction,
    base: Base,
    /// (journal sequence, payload) of each batch applied, in order.
    frames: Vec<(u64, Vec<u8>)>,
    frame_bytes: usize,
    /// When the first batch was applied; `None` while it holds none.
    since: Option<Instant>,
    max_age: Duration,
}

impl Pending {
    /// A new write transaction over the state `base` describes.
    pub(crate) fn begin(
        db: &Database,
        path: &Path,
        base: Base,
        max_age: Duration,
    ) -> Result<Pending, StoreError> {
        let txn = db
            .begin_write()
            .map_err(db_error(path, "begin a transaction"))?;
        Ok(Pending {
            txn,
            base,
            frames: Vec::new(),
            frame_bytes: 0,
            since: None,
            max_age,
        })
    }

    /// Records that the batch framed as `payload` is applied in the
    /// transaction and its frame synced.
    pub(crate) fn push(&mut self, sequence: u64, payload: Vec<u8>) {
        self.frame_bytes += payload.len();
        self.frames.push((sequence, payload));
        self.since.get_or_insert_with(Instant::now);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Holding as much as it may: commit it now.
    pub(crate) fn is_full(&self) -> bool {
        self.frames.len() >= PENDING_MAX_BATCHES
            || self.frame_bytes >= PENDING_MAX_FRAME_BYTES
            || self.due_in() == Some(Duration::ZERO)
    }

    /// How long until its age says to commit it; `None` while it holds no
    /// batch.
    pub(crate) fn due_in(&self) -> Option<Duration> {
        let since = self.since?;
        Some(self.max_age.saturating_sub(since.elapsed()))
    }

    /// Commits the transaction, recording `sequence` as the last journal
    /// frame the file holds. On failure the transaction is gone and the
    /// returned `Rebuild` can make it again (boxed: a failure is rare, and
    /// the success path should not carry its size).
    pub(crate) fn commit(
        self,
        path: &Path,
        sequence: u64,
        durability: Durability,
    ) -> Result<(), Box<(StoreError, Rebuild)>> {
        let Pending {
            mut txn,
            base,
            frames,
            max_age,
            ..
        } = self;
        let rebuild = Rebuild {
            base,
            frames,
            max_age,
        };
        let committed = write_meta_u64(&txn, path, META_JOURNAL_SEQUENCE, sequence)
            .and_then(|()| {
                txn.set_durability(durability)
                    .map_err(db_error(path, "choose how a commit syncs"))
            })
            .and_then(|()| txn.commit().map_err(db_error(path, "commit")));
        committed.map_err(|e| Box::new((e, rebuild)))
    }

    /// Drops the transaction, keeping what rebuilds it.
    pub(crate) fn abandon(self) -> Rebuild {
        Rebuild {
            base: self.base,
            frames: self.frames,
            max_age: self.max_age,
        }
    }
}

/// What rebuilds an open transaction that was dropped: the state before
/// it and the frames applied in it.
pub(crate) struct Rebuild {
    base: Base,
    frames: Vec<(u64, Vec<u8>)>,
    max_age: Duration,
}

impl Rebuild {
    /// Adds frames that were answered and not yet applied in the dropped
    /// transaction (`ahead.rs`), after those that were.
    pub(crate) fn then(&mut self, frames: impl IntoIterator<Item = (u64, Vec<u8>)>) {
        self.frames.extend(frames);
    }

    /// A new transaction holding every frame again, in order. The counters
    /// it arrives at must be `expected` (what the provider's memory says),
    /// or the rebuild is refused: the file would then disagree with what
    /// was acknowledged.
    pub(crate) fn run(
        self,
        db: &Database,
        path: &Path,
        journal_path: &Path,
        expected: &ChannelMap,
    ) -> Result<Pending, StoreError> {
        let mut pending = Pending::begin(db, path, self.base.clone(), self.max_age)?;
        let mut channels = self.base.channels;
        let mut next_channel_id = self.base.next_channel_id;
        for (sequence, payload) in self.frames {
            let applied = apply_journalled(
                &pending.txn,
                path,
                journal_path,
                &channels,
                next_channel_id,
                sequence,
                decode_frame(journal_path, sequence, &payload)?
                    .as_slice()
                    .into(),
            )?;
            channels.extend(applied.staged);
            next_channel_id = applied.next_channel_id;
            pending.push(sequence, payload);
        }
        let agrees = channels.len() == expected.len()
            && channels
                .iter()
                .all(|(name, entry)| expected.get(name).is_some_and(|e| e == entry));
        if !agrees {
            return Err(StoreError::format(
                path,
                "the batches held for the next commit do not arrive at the counters acknowledged; restart the broker, which applies them again from the journal",
            ));
        }
        Ok(pending)
    }
}
