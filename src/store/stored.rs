//! A stopped broker's provider, read by a tool without changing it: a redb
//! file or a memory provider's snapshot directory, told apart by what is
//! on disk rather than by a configuration.
//!
//! Reading never writes. The provider's lock is taken shared, which a
//! running broker's exclusive lock refuses, so a file being written is
//! never read and a broker cannot start half-way through. A redb file is
//! copied to a temporary file and the copy opened as the broker would open
//! it - recovered if a killed broker left it needing that, its integrity
//! checked - so the original is only ever read.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ::redb::{Builder, Database, ReadTransaction, ReadableDatabase, TableHandle};

use super::disk::{Disk, OpenMode, RealDisk};
use super::encoding::{message_from_bytes, message_header};
use super::error::db_error;
use super::error::StoreError;
use super::files::lock_path_for;
use super::journal::journal_path_for;
use super::lock::LockFile;
use super::memory_channel::MemoryChannel;
use super::redb_schema::{
    for_each_keyed, format_refusal, not_a_provider, read_channel_rows, ChannelEntry, ENTRIES, META,
    META_CREATED_AT_MS, META_CREATED_BY, META_FORMAT_VERSION, POSITIONS, RECORDS, REDB_CACHE_BYTES,
    REDB_FORMAT_VERSION,
};
use super::replay::replay_into_copy;
use super::snapshot::{
    channel_files, check_counters, check_entry_key, check_position, check_record_offset,
    read_channel_file, LOCK_FILE, MAGIC, MANIFEST_FILE,
};
use super::types::ChannelState;

/// The first bytes of every redb file.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Which kind of provider a path holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredKind {
    Redb,
    Snapshots,
}

impl StoredKind {
    pub fn name(self) -> &'static str {
        match self {
            StoredKind::Redb => "redb",
            StoredKind::Snapshots => "memory snapshots",
        }
    }
}

/// What `path` holds, judged by its contents: a directory is a snapshot
/// directory, a file starting with redb's magic a redb file. Anything else
/// is refused, saying what it is and what was expected.
pub fn stored_kind(path: &Path) -> Result<StoredKind, StoreError> {
    stored_kind_on(&RealDisk, path)
}

fn stored_kind_on(disk: &dyn Disk, path: &Path) -> Result<StoredKind, StoreError> {
    match disk.read_dir(path) {
        Ok(_) => return Ok(StoredKind::Snapshots),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {}
        Err(e) => return Err(StoreError::io(path, "open it", e)),
    }
    let mut head = [0u8; REDB_MAGIC.len()];
    let read = disk
        .open(path, OpenMode::read_only())
        .and_then(|f| f.read_at(&mut head, 0))
        .map_err(|e| StoreError::io(path, "read it", e))?;
    if read == head.len() && head == REDB_MAGIC {
        return Ok(StoredKind::Redb);
    }
    let hint = if head[..read.min(MAGIC.len())] == MAGIC[..read.min(MAGIC.len())] && read >= 8 {
        "a single snapshot file: give the snapshot directory that holds it"
    } else {
        "neither a redb file nor a snapshot directory: give a redb provider's file_path or a memory provider's snapshot_dir"
    };
    Err(StoreError::format(path, hint))
}

/// A channel as a tool shows it: counters, positions and entries whole,
/// records summarised.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChannelSummary {
    pub name: String,
    pub state: ChannelState,
    pub oldest_received_at_ms: Option<u64>,
    pub newest_received_at_ms: Option<u64>,
    pub positions: BTreeMap<String, u64>,
    pub entries: BTreeMap<String, Vec<u8>>,
}

fn widen(summary: &mut ChannelSummary, received_at_ms: u64) {
    // 0 is a record with no receipt time.
    if received_at_ms == 0 {
        return;
    }
    let oldest = summary.oldest_received_at_ms.get_or_insert(received_at_ms);
    *oldest = (*oldest).min(received_at_ms);
    let newest = summary.newest_received_at_ms.get_or_insert(received_at_ms);
    *newest = (*newest).max(received_at_ms);
}

/// A temporary file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A redb file open for reading: a checked copy of the original, removed
/// when dropped, or a file this process has just written.
struct RedbCopy {
    db: Database,
    // Dropped after `db`: the copy goes once nothing reads it.
    _copy: Option<TempFile>,
}

impl RedbCopy {
    fn begin_read(&self) -> Result<ReadTransaction, ::redb::TransactionError> {
        self.db.begin_read()
    }
}

enum Source {
    Redb {
        db: RedbCopy,
        channels: BTreeMap<String, ChannelEntry>,
    },
    Snapshots {
        files: Vec<String>,
    },
}

/// A stopped broker's provider, open for reading.
pub struct StoredProvider {
    path: PathBuf,
    disk: Arc<dyn Disk>,
    source: Source,
    /// What the header says about the file: format, who wrote it, when.
    pub described: String,
    /// What a reader should know and that did not stop the read.
    pub notes: Vec<String>,
    _lock: Option<LockFile>,
}

impl StoredProvider {
    /// Opens what `path` holds for reading. Refuses a provider a running
    /// broker holds, a file of another kind or format, and a damaged one.
    pub fn open(path: &Path) -> Result<StoredProvider, StoreError> {
        Self::open_with(RealDisk::shared(), path, true)
    }

    /// Opens what this process has just written on `disk` and still holds
    /// the exclusive lock of, to read it back.
    pub(crate) fn open_while_locked(
        disk: Arc<dyn Disk>,
        path: &Path,
    ) -> Result<StoredProvider, StoreError> {
        Self::open_with(disk, path, false)
    }

    /// Reads a redb file this process has just written and opened.
    pub(crate) fn from_database(
        disk: Arc<dyn Disk>,
        path: &Path,
        db: Database,
    ) -> Result<StoredProvider, StoreError> {
        redb_provider(disk, path, RedbCopy { db, _copy: None })
    }

    fn open_with(
        disk: Arc<dyn Disk>,
        path: &Path,
        share_lock: bool,
    ) -> Result<StoredProvider, StoreError> {
        let kind = stored_kind_on(disk.as_ref(), path)?;
        let lock_path = match kind {
            StoredKind::Snapshots => path.join(LOCK_FILE),
            StoredKind::Redb => lock_path_for(path),
        };
        let lock = match share_lock {
            true => {
                LockFile::share_if_present(disk.as_ref(), &lock_path, &path.display().to_string())?
            }
            false => None,
        };
        let mut stored = match kind {
            StoredKind::Snapshots => open_snapshots(disk, path)?,
            StoredKind::Redb => open_redb(disk, path)?,
        };
        stored._lock = lock;
        Ok(stored)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kind(&self) -> StoredKind {
        match self.source {
            Source::Redb { .. } => StoredKind::Redb,
            Source::Snapshots { .. } => StoredKind::Snapshots,
        }
    }

    /// Every channel's key, in order: its name in a redb file, its file
    /// name in a snapshot directory.
    pub fn channel_keys(&self) -> Vec<String> {
        match &self.source {
            Source::Redb { channels, .. } => channels.keys().cloned().collect(),
            Source::Snapshots { files } => files.clone(),
        }
    }

    /// One channel whole, checked as a broker's open checks it.
    pub(crate) fn load(&self, key: &str) -> Result<(String, MemoryChannel), StoreError> {
        match &self.source {
            Source::Snapshots { files: _ } => {
                let (name, _, channel) =
                    read_channel_file(self.disk.as_ref(), &self.path, key, u64::MAX)?;
                Ok((name, channel))
            }
            Source::Redb { db, channels } => {
                let entry = channels.get(key).copied().unwrap_or(ChannelEntry {
                    id: u32::MAX,
                    state: ChannelState::default(),
                });
                let mut channel = MemoryChannel {
                    state: entry.state,
                    ..MemoryChannel::default()
                };
                let mut summary = ChannelSummary::default();
                self.read_redb_channel(db, key, entry, &mut summary, |offset, bytes| {
                    let message = message_from_bytes(bytes)?;
                    channel.records.insert(offset, message);
                    Ok(())
                })?;
                channel.positions = summary.positions;
                channel.entries = summary.entries;
                check_counters(&channel).map_err(|e| self.damaged(key, e.0))?;
                Ok((key.to_string(), channel))
            }
        }
    }

    /// One channel's counters, positions and entries, and its records'
    /// receipt times without holding the records.
    pub fn summary(&self, key: &str) -> Result<ChannelSummary, StoreError> {
        match &self.source {
            Source::Snapshots { .. } => {
                let (name, channel) = self.load(key)?;
                let mut summary = ChannelSummary {
                    name,
                    state: channel.state,
                    ..ChannelSummary::default()
                };
                for message in channel.records.values() {
                    widen(&mut summary, message.received_at_ms);
                }
                summary.positions = channel.positions;
                summary.entries = channel.entries;
                Ok(summary)
            }
            Source::Redb { db, channels } => {
                let entry = channels.get(key).copied().ok_or_else(|| {
                    StoreError::format(&self.path, format!("holds no channel {key:?}"))
                })?;
                let mut summary = ChannelSummary {
                    name: key.to_string(),
                    state: entry.state,
                    ..ChannelSummary::default()
                };
                let (mut count, mut bytes) = (0u64, 0u64);
                let mut times = Vec::new();
                self.read_redb_channel(db, key, entry, &mut summary, |_, record| {
                    let (received_at_ms, size) = message_header(record)?;
                    count += 1;
                    bytes += size;
                    times.push(received_at_ms);
                    Ok(())
                })?;
                for t in times {
                    widen(&mut summary, t);
                }
                let s = entry.state;
                if count != s.record_count || bytes != s.record_bytes {
                    return Err(self.damaged(
                        key,
                        format!(
                            "its counters say {} records of {} bytes, and it holds {count} records of {bytes} bytes",
                            s.record_count, s.record_bytes
                        ),
                    ));
                }
                Ok(summary)
            }
        }
    }

    fn damaged(&self, channel: &str, why: String) -> StoreError {
        StoreError::format(&self.path, format!("channel {channel:?} is damaged: {why}"))
    }

    /// Reads a redb channel's positions and entries into `summary` and
    /// hands each record to `record`, in one read transaction.
    fn read_redb_channel(
        &self,
        db: &RedbCopy,
        name: &str,
        entry: ChannelEntry,
        summary: &mut ChannelSummary,
        mut record: impl FnMut(u64, &[u8]) -> Result<(), super::encoding::DecodeError>,
    ) -> Result<(), StoreError> {
        let path = self.path.as_path();
        let txn = db
            .begin_read()
            .map_err(db_error(path, "begin a read transaction"))?;
        let state = entry.state;
        let records = txn
            .open_table(RECORDS)
            .map_err(db_error(path, "open the records table"))?;
        for row in records
            .range((entry.id, 0)..=(entry.id, u64::MAX))
            .map_err(db_error(path, "read records"))?
        {
            let (k, v) = row.map_err(db_error(path, "read a record"))?;
            let offset = k.value().1;
            check_record_offset(&state, offset)
                .and_then(|()| record(offset, v.value()))
                .map_err(|e| self.damaged(name, e.0))?;
        }
        let positions = txn
            .open_table(POSITIONS)
            .map_err(db_error(path, "open the positions table"))?;
        for_each_keyed(&positions, entry.id, path, |reader, offset| {
            check_position(&state, reader, offset).map_err(|e| self.damaged(name, e.0))?;
            summary.positions.insert(reader.to_string(), offset);
            Ok(())
        })?;
        let entries = txn
            .open_table(ENTRIES)
            .map_err(db_error(path, "open the entries table"))?;
        for_each_keyed(&entries, entry.id, path, |key, value| {
            check_entry_key(key).map_err(|e| self.damaged(name, e.0))?;
            summary.entries.insert(key.to_string(), value.to_vec());
            Ok(())
        })?;
        Ok(())
    }
}

fn open_snapshots(disk: Arc<dyn Disk>, path: &Path) -> Result<StoredProvider, StoreError> {
    let files = channel_files(disk.as_ref(), path)?;
    let manifest = disk.exists(&path.join(MANIFEST_FILE)).unwrap_or(false);
    if files.is_empty() && !manifest {
        return Err(StoreError::format(
            path,
            "holds no snapshot and no manifest: not a memory provider's snapshot_dir, or one no graceful stop has written to yet",
        ));
    }
    let mut notes = Vec::new();
    if !manifest {
        notes.push(format!(
            "{MANIFEST_FILE} is missing: which channels the last shutdown wrote cannot be checked"
        ));
    }
    Ok(StoredProvider {
        path: path.to_path_buf(),
        disk,
        described: format!("memory provider snapshots, {} channel files", files.len()),
        source: Source::Snapshots { files },
        notes,
        _lock: None,
    })
}

/// A stopped broker's file with the journal batches it lacks applied to the
/// copy, so a tool sees every acknowledged write; the original and its
/// journal are only read.
fn open_redb(disk: Arc<dyn Disk>, path: &Path) -> Result<StoredProvider, StoreError> {
    let copy = checked_copy(disk.as_ref(), path)?;
    {
        let txn = copy
            .begin_read()
            .map_err(db_error(path, "begin a read transaction"))?;
        read_format(&txn, path)?;
    }
    let replayed = replay_into_copy(disk.as_ref(), &copy.db, path, path)?;
    let mut stored = redb_provider(disk, path, copy)?;
    if replayed > 0 {
        stored.notes.push(format!(
            "{replayed} batches were read from its journal {}: the broker did not stop cleanly, and the file alone holds them only after its next start",
            journal_path_for(path).display()
        ));
    }
    Ok(stored)
}

fn redb_provider(
    disk: Arc<dyn Disk>,
    path: &Path,
    db: RedbCopy,
) -> Result<StoredProvider, StoreError> {
    let txn = db
        .begin_read()
        .map_err(db_error(path, "begin a read transaction"))?;
    let described = read_format(&txn, path)?;
    let channels = read_channel_rows(&txn, path)?.into_iter().collect();
    drop(txn);
    Ok(StoredProvider {
        path: path.to_path_buf(),
        disk,
        source: Source::Redb { db, channels },
        described,
        notes: Vec::new(),
        _lock: None,
    })
}

/// Copies the file to a temporary one and opens the copy as the broker
/// opens a provider: recovered if its broker never closed it, and its
/// integrity checked, which reports a damaged file as such where a
/// read-only open would stop the process. The original is only read.
fn checked_copy(disk: &dyn Disk, path: &Path) -> Result<RedbCopy, StoreError> {
    static COPIES: AtomicU32 = AtomicU32::new(0);
    let temp = std::env::temp_dir().join(format!(
        "saguin-read-{}-{}-{}.redb",
        std::process::id(),
        COPIES.fetch_add(1, Ordering::Relaxed),
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("provider")
    ));
    let temp = TempFile(temp);
    copy_out(disk, path, &temp.0).map_err(|e| {
        StoreError::io(
            &temp.0,
            "copy the redb file to read it (TMPDIR needs room for the whole file)",
            e,
        )
    })?;
    let db = Builder::new()
        .set_cache_size(REDB_CACHE_BYTES)
        .set_check_integrity_on_open(true)
        .create(&temp.0)
        .map_err(|e| {
            StoreError::format(
                path,
                format!("is damaged ({e}): restore the provider from a backup"),
            )
        })?;
    Ok(RedbCopy {
        db,
        _copy: Some(temp),
    })
}

/// Copies the file at `path` on `disk` into a scratch file of the
/// operating system's: the copy is a tool's private working file, never
/// the provider's state, so it needs no durability.
fn copy_out(disk: &dyn Disk, path: &Path, scratch: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let source = disk.open(path, OpenMode::read_only())?;
    // 0600: it holds what applications published.
    let out = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(scratch)?;
    let mut buf = vec![0u8; 256 << 10];
    let mut at = 0u64;
    loop {
        let n = source.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(());
        }
        out.write_all_at(&buf[..n], at)?;
        at += n as u64;
    }
}

/// Checks the file is a Sagüin provider in the format this build reads,
/// without writing, and describes it.
fn read_format(txn: &ReadTransaction, path: &Path) -> Result<String, StoreError> {
    let tables: Vec<String> = txn
        .list_tables()
        .map_err(db_error(path, "list the tables"))?
        .map(|t| t.name().to_string())
        .collect();
    if !tables.iter().any(|t| t == META.name()) {
        return Err(not_a_provider(path, &tables));
    }
    let meta = txn
        .open_table(META)
        .map_err(db_error(path, "open the meta table"))?;
    let get = |key: &str| -> Result<Option<Vec<u8>>, StoreError> {
        Ok(meta
            .get(key)
            .map_err(db_error(path, "read the meta table"))?
            .map(|v| v.value().to_vec()))
    };
    let Some(version) = get(META_FORMAT_VERSION)? else {
        return Err(not_a_provider(path, &tables));
    };
    if version != REDB_FORMAT_VERSION.to_le_bytes() {
        return Err(format_refusal(path, &version, get(META_CREATED_BY)?));
    }
    let by = get(META_CREATED_BY)?
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|| "an unknown build".into());
    let at = get(META_CREATED_AT_MS)?
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map_or(0, u64::from_le_bytes);
    Ok(format!(
        "redb provider format {REDB_FORMAT_VERSION}, created by {by} at {at} ms since 1970"
    ))
}
