//! What the store is told about each provider: its name, its bound, where
//! it keeps its records and how its writes are batched. The configuration
//! reader builds these; the store never reads the configuration itself.

use std::path::PathBuf;

/// One storage provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderSettings {
    pub name: String,
    /// What the provider may hold, records and positions as counted, not a
    /// file size. At least twice [`reserve_bytes`].
    pub max_bytes: u64,
    pub kind: ProviderKind,
    /// What the device under it is rated to be written before it wears
    /// out, in bytes (`device_endurance`); `None` when not written. The
    /// store does not use it: the operations listener forecasts the
    /// device's life with it.
    pub device_endurance_bytes: Option<u64>,
}

impl ProviderSettings {
    /// How the storage thread batches this provider's writes. A memory
    /// provider has no transaction to wait for, so it takes whatever is
    /// queued and never waits.
    pub fn commit_policy(&self) -> CommitPolicy {
        match &self.kind {
            ProviderKind::Redb { commit, .. } => *commit,
            ProviderKind::Memory { .. } => CommitPolicy::Collect,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// A [`RedbProvider`](super::RedbProvider).
    Redb {
        /// Absolute. Its lock is `<file_path>.lock`.
        file_path: PathBuf,
        commit: CommitPolicy,
        /// How long acknowledged writes may be durable only in the
        /// journal before the file is made durable with them.
        checkpoint_interval_ms: u32,
    },
    /// A [`MemoryProvider`](super::MemoryProvider).
    Memory {
        /// Absolute; `None` keeps nothing across a restart. Its lock is
        /// `saguin.lock` inside it.
        snapshot_dir: Option<PathBuf>,
    },
}

/// How a redb provider groups publishes into transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitPolicy {
    /// A publish finding no commit running is committed at once; those
    /// arriving during a commit share the next one. Nothing waits for
    /// company.
    Collect,
    /// One transaction per publish.
    PerPublish,
    /// A transaction waits for company and closes at whichever comes first:
    /// `max_records` publishes, or `interval_ms` since it opened.
    Interval { interval_ms: u32, max_records: u32 },
}

/// What every provider holds back for the writes that relieve a full one:
/// one largest record, a publish of `max_message_size_bytes` carrying
/// `max_header_bytes` of User Properties.
pub fn reserve_bytes(max_message_size_bytes: u32, max_header_bytes: u32) -> u64 {
    u64::from(max_message_size_bytes) + u64::from(max_header_bytes)
}

/// What the memory providers may hold between them: the sum of their
/// `max_bytes`, which no single provider's check can see. `u64::MAX` if
/// the sum does not fit.
pub fn declared_memory_bytes(providers: &[ProviderSettings]) -> u64 {
    providers
        .iter()
        .filter(|p| matches!(p.kind, ProviderKind::Memory { .. }))
        .fold(0u64, |sum, p| sum.saturating_add(p.max_bytes))
}
