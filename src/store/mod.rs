//! Storage providers: where a channel's records, its counters and its
//! consumers' positions are kept, behind one synchronous trait that runs
//! on the storage thread.
//!
//! - [`RedbProvider`] (`type: redb`): one redb file and a journal in
//!   front of it; every batch is synced before its commit returns, and
//!   the file is made durable every `checkpoint_interval`; survives a
//!   crash and a power cut whole.
//! - [`MemoryProvider`] (`type: memory`): everything in memory, written to
//!   a snapshot at a graceful shutdown and loaded at the next start;
//!   survives exactly that (invariant 14).
//! - [`StorageThread`]: owns one provider on a thread of its own and
//!   collects the writes that arrive while a commit runs into the next
//!   one (group commit), so the executor never waits on a disk.
//!
//! Both providers keep `next` and `floor` as stored values (invariants 1
//! and 9), count bytes with one function, and hold back a reserve that
//! appends may not use and relieving writes may. `rfcs/0003-storage.md`
//! has the formats and the reasoning.

mod ahead;
mod apply;
mod backup;
mod backups;
mod batch_encoding;
pub mod bench;
mod budget;
pub(crate) mod checksum;
mod convert;
mod dirs;
pub mod disk;
pub(crate) mod encoding;
mod error;
mod failed;
mod files;
mod journal;
mod lock;
mod memory;
mod memory_channel;
mod message_id;
mod open;
mod pending;
mod redb;
mod redb_file;
mod redb_header;
mod redb_schema;
mod redb_tables;
mod replay;
mod settings;
mod snapshot;
mod stored;
mod types;
mod validate;
mod writer;

#[cfg(test)]
mod ahead_tests;
#[cfg(test)]
mod backup_tests;
#[cfg(test)]
mod conformance;
#[cfg(test)]
mod diskfail_tests;
#[cfg(test)]
mod journal_tests;
#[cfg(test)]
mod pending_tests;
#[cfg(test)]
mod powercut_tests;
#[cfg(test)]
mod seam_tests;
#[cfg(test)]
pub(crate) mod sim_disk;
#[cfg(test)]
mod sim_disk_tests;
#[cfg(test)]
mod writer_tests;

pub use self::redb::{RedbProvider, DEFAULT_CHECKPOINT_INTERVAL_MS};
pub use backup::{take_backup, BackupReply, BackupReport, BackupView};
pub use backups::Backups;
pub use convert::{
    redb_to_snapshots, redb_to_snapshots_on, snapshots_to_redb, snapshots_to_redb_on, Converted,
};
pub use dirs::create_dir_all_synced;
pub use error::{Failure, StoreError};
pub use failed::damaged_files_total;
pub use memory::MemoryProvider;
pub use message_id::{MessageId, MessageIdGenerator, MAX_MESSAGE_ID_TEXT_BYTES};
pub use open::{open_provider, open_provider_on};
pub use redb_schema::{JOURNAL_CAPACITY_BYTES, REDB_CACHE_BYTES, REDB_FORMAT_VERSION};
pub use replay::damaged_journals_total;
pub use settings::{
    declared_memory_bytes, reserve_bytes, CommitPolicy, ProviderKind, ProviderSettings,
};
pub use snapshot::snapshot_file_name;
pub use stored::{stored_kind, ChannelSummary, StoredKind, StoredProvider};
pub use types::{
    ChannelState, Message, Outcome, Read, ReadBatch, ReadLimit, Record, Refusal, TrimRule, Trimmed,
    Usage, Write, ENTRY_OVERHEAD_BYTES, FIRST_OFFSET, POSITION_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
};
pub use validate::{
    check_channel_name, MAX_BATCH_WRITES, MAX_CHANNEL_NAME_BYTES, MAX_ENTRY_KEY_BYTES,
    MAX_ENTRY_VALUE_BYTES, MAX_PAYLOAD_BYTES, MAX_READER_BYTES, MAX_STRING_BYTES, MAX_TRIM_RECORDS,
    MAX_USER_PROPERTIES,
};
pub use writer::{
    Answer, ChannelBytesReply, CommitStats, Completion, StorageHandle, StorageThread, StorageWatch,
    SubmitError, Ticket, COLLECT_MAX_RECORDS, MAX_REQUEST_WRITES, REQUEST_BYTES,
};

/// A storage provider. Synchronous, and used from one thread at a time:
/// the storage thread owns it, so reads never interleave with a commit.
///
/// Reads and writes name a channel by its configured name; a channel
/// nothing has been written to reads as empty, with `next` and `floor` at
/// [`FIRST_OFFSET`] and every other counter at 0.
///
/// Offsets start at [`FIRST_OFFSET`] (1), never 0: a seek's `0` (the
/// floor) and `-1` (the head) can then never be taken for an offset, and
/// no record, floor, `next` or stored position is ever 0.
pub trait Provider: Send {
    /// The provider's configured name.
    fn name(&self) -> &str;

    /// The byte bound, its reserve and what is counted against it.
    fn usage(&self) -> Usage;

    /// A channel's counters, from memory: loaded at open and advanced only
    /// by committed batches, so this never fails.
    fn channel(&self, channel: &str) -> ChannelState;

    /// Every channel this provider holds anything for, by name.
    fn channels(&self) -> Vec<(String, ChannelState)>;

    /// Applies `writes` in order, atomically: either every write's outcome
    /// stands, or the call fails and nothing changed (no record, no
    /// position, no counter, no offset consumed). A [`Refusal`] is an
    /// outcome, not a failure: the rest of the batch still commits. On
    /// redb, the batch is on disk (fsynced) when this returns `Ok`.
    fn commit(&mut self, writes: &[Write]) -> Result<Vec<Outcome>, StoreError>;

    /// [`Provider::commit`], handed the writes to keep: a provider that
    /// applies a batch after answering it (redb, `ahead.rs`) holds on to
    /// them instead of decoding its frame again. A failure hands them back.
    fn commit_owned(
        &mut self,
        writes: Vec<Write>,
    ) -> Result<Vec<Outcome>, (StoreError, Vec<Write>)> {
        self.commit(&writes).map_err(|e| (e, writes))
    }

    /// Up to `limit` records from `from_offset` on, with the floor and next
    /// from the same moment. Below the floor is refused, never served with
    /// the oldest survivor (invariant 1).
    fn read(&self, channel: &str, from_offset: u64, limit: ReadLimit) -> Result<Read, StoreError>;

    /// A reader's stored position on a channel.
    fn position(&self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError>;

    /// The lowest stored position on a channel, for the catalogue.
    fn lowest_position(&self, channel: &str) -> Result<Option<u64>, StoreError>;

    /// The earliest offset whose receipt time is at or after `at_ms`, for a
    /// seek by time. Every record is considered, because receipt times can
    /// run backwards when the clock is stepped.
    fn first_at_or_after(&self, channel: &str, at_ms: u64) -> Result<Option<u64>, StoreError>;

    /// Every keyed entry of a channel, in ascending key order. Entries are
    /// bounded by the provider's `max_bytes`, and read whole: at start, or
    /// for a space known to be small.
    fn entries(&self, channel: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// One keyed entry's value.
    fn entry(&self, channel: &str, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// A consistent view of everything the provider holds, for an online
    /// backup to copy while commits go on; `None` for a provider with
    /// nothing on disk to copy until it closes (memory).
    fn backup_view(&self) -> Option<Result<BackupView, StoreError>> {
        None
    }

    /// How long until [`Provider::checkpoint`] is due if no commit comes
    /// first; `None` when nothing waits for one.
    fn checkpoint_due_in(&self) -> Option<std::time::Duration> {
        None
    }

    /// The work a provider with a journal defers until idle: on redb, the
    /// checkpoint (what so far is durable only in the journal made durable
    /// in the file) when it is due, otherwise the commit of the write
    /// transaction holding acknowledged batches. Called by the storage
    /// thread when [`Provider::checkpoint_due_in`] runs out while idle.
    fn checkpoint(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Why the provider takes no more writes, once its device failed it
    /// or its file was found damaged beyond repair; `None` while it works.
    fn failure(&self) -> Option<std::sync::Arc<Failure>> {
        None
    }

    /// A graceful close: a memory provider writes its snapshot, a redb
    /// provider closes its file; both then release their lock.
    fn close(self: Box<Self>) -> Result<(), StoreError>;
}
