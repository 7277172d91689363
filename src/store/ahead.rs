//! Batches of appends answered as soon as their journal frame is synced,
//! and applied to redb afterwards.
//!
//! An append reads and changes nothing but counters the provider keeps in
//! memory (a channel's next offset and bytes, the provider's budget), so
//! its outcome is known before redb holds the record. A batch of appends
//! is therefore forecast over those counters, its frame written and
//! synced, and the batch answered; the frame is applied to the open redb
//! transaction later - when the storage thread finds its queue empty,
//! before anything reads the file or commits any other kind of write, or
//! once `BEHIND_MAX_BATCHES` are waiting. The apply, the larger part of a
//! record's CPU on the storage thread, then runs while the clients turn
//! their answers round instead of ahead of every sync (rfcs/0003,
//! "Applied after the sync").
//!
//! Nothing answered depends on the apply: a crash leaves the frames in the
//! journal, and the replay at open applies them; a failure applying one
//! rebuilds the transaction from every frame, as after any failure inside
//! it (`pending.rs`).

use std::collections::VecDeque;
use std::ops::Range;

use super::apply::{apply_batch, RecordHead, Tables};
use super::budget::Budget;
use super::error::StoreError;
use super::pending::Base;
use super::redb_schema::ChannelMap;
use super::redb_tables::{Applied, Staging};
use super::types::{ChannelState, Message, Write};

/// The most answered batches left unapplied before the next commit
/// applies them first: a bound on memory and on the work a read may find
/// waiting.
pub(crate) const BEHIND_MAX_BATCHES: usize = 32;
/// The most frame bytes left unapplied (one batch may take it past).
pub(crate) const BEHIND_MAX_FRAME_BYTES: usize = 256 << 10;

/// Answered frames not yet in redb's open transaction, oldest first, and
/// the counters as that transaction has them.
pub(crate) struct Behind {
    pub(crate) channels: ChannelMap,
    pub(crate) next_channel_id: u32,
    batches: VecDeque<Answered>,
    frame_bytes: usize,
}

/// One answered batch: its journal sequence and frame, and the writes the
/// frame holds (those not refused), to be applied as they are.
pub(crate) struct Answered {
    pub(crate) sequence: u64,
    pub(crate) frame: Vec<u8>,
    /// Where each append's record lies in `frame`, for the apply.
    pub(crate) records: Vec<Range<usize>>,
    pub(crate) writes: Vec<Write>,
}

impl Behind {
    /// Nothing behind yet; redb's transaction is at these counters.
    pub(crate) fn new(channels: ChannelMap, next_channel_id: u32) -> Self {
        Behind {
            channels,
            next_channel_id,
            batches: VecDeque::new(),
            frame_bytes: 0,
        }
    }

    pub(crate) fn push(&mut self, batch: Answered) {
        self.frame_bytes += batch.frame.len();
        self.batches.push_back(batch);
    }

    /// The oldest batch not applied yet.
    pub(crate) fn pop(&mut self) -> Option<Answered> {
        let next = self.batches.pop_front()?;
        self.frame_bytes -= next.frame.len();
        Some(next)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.batches.len() >= BEHIND_MAX_BATCHES || self.frame_bytes >= BEHIND_MAX_FRAME_BYTES
    }

    /// Where a new transaction for these frames starts.
    pub(crate) fn base(&self) -> Base {
        Base {
            channels: self.channels.clone(),
            next_channel_id: self.next_channel_id,
        }
    }

    /// The frames not applied yet, oldest first.
    pub(crate) fn into_frames(self) -> impl Iterator<Item = (u64, Vec<u8>)> {
        self.batches.into_iter().map(|b| (b.sequence, b.frame))
    }
}

/// What a batch of appends will do, worked out over the counters alone:
/// the same code that applies it (`apply.rs`), with the records left for
/// the apply. The caller has checked that every write is an append.
pub(crate) fn forecast(
    channels: &ChannelMap,
    next_channel_id: u32,
    mut budget: Budget,
    writes: &[Write],
) -> Result<Applied, StoreError> {
    debug_assert!(writes.iter().all(|w| matches!(w, Write::Append { .. })));
    let mut counters = Staging::new(channels, next_channel_id);
    let outcomes = apply_batch(&mut counters, &mut budget, writes)?;
    Ok(Applied {
        outcomes,
        staged: counters.staged,
        next_channel_id: counters.next_channel_id,
        budget,
    })
}

/// Counters only: an append is all a forecast is asked for.
impl Tables for Staging<'_> {
    fn state(&mut self, channel: &str) -> Result<ChannelState, StoreError> {
        Ok(Staging::state(self, channel))
    }

    fn set_state(&mut self, channel: &str, state: ChannelState) -> Result<(), StoreError> {
        Staging::set_state(self, channel, state)
    }

    /// The record reaches redb when the frame is applied.
    fn insert_record(&mut self, _: &str, _: u64, _: &Message) -> Result<(), StoreError> {
        Ok(())
    }

    fn oldest(&mut self, _: &str, _: usize) -> Result<Vec<RecordHead>, StoreError> {
        Err(not_forecast())
    }

    fn remove_records(&mut self, _: &str, _: &[u64]) -> Result<(), StoreError> {
        Err(not_forecast())
    }

    fn position(&mut self, _: &str, _: &str) -> Result<Option<u64>, StoreError> {
        Err(not_forecast())
    }

    fn set_position(&mut self, _: &str, _: &str, _: u64) -> Result<(), StoreError> {
        Err(not_forecast())
    }

    fn remove_position(&mut self, _: &str, _: &str) -> Result<bool, StoreError> {
        Err(not_forecast())
    }

    fn record_head(&mut self, _: &str, _: u64) -> Result<Option<RecordHead>, StoreError> {
        Err(not_forecast())
    }

    fn entry_len(&mut self, _: &str, _: &str) -> Result<Option<u64>, StoreError> {
        Err(not_forecast())
    }

    fn put_entry(&mut self, _: &str, _: &str, _: &[u8]) -> Result<(), StoreError> {
        Err(not_forecast())
    }

    fn remove_entry(&mut self, _: &str, _: &str) -> Result<(), StoreError> {
        Err(not_forecast())
    }
}

/// A write that reads redb reached a forecast: a bug, refused without
/// effect (nothing is written before a forecast succeeds).
fn not_forecast() -> StoreError {
    StoreError::Invalid("only appends are forecast without redb".to_string())
}
