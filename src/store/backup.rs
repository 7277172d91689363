//! An online backup of a redb provider: a copy of the whole provider as of
//! one moment, taken while the broker goes on committing.
//!
//! The storage thread that owns the database begins a read transaction
//! between two commits - a redb read transaction is a consistent snapshot,
//! and beginning one waits for nothing - and hands it to a thread of its
//! own, which copies every table into a new redb file, commits it durably,
//! and verifies it: the copy is opened with its integrity checked, every
//! table's rows are compared with the snapshot's by count and checksum,
//! and every channel's counters are checked against what it holds. Commits
//! never wait for any of this; while the copy runs, redb keeps the pages
//! the snapshot reads, so the file may grow by what is written meanwhile.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ::redb::{
    Builder, Durability, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition,
    Value, WriteTransaction,
};

use super::checksum::crc32c;
use super::disk::Disk;
use super::error::{db_error, StoreError};
use super::files::{create_new_file, sync_parent};
use super::redb_file::create_db;
use super::redb_schema::{
    CHANNELS, ENTRIES, META, META_JOURNAL_ID, META_JOURNAL_SEQUENCE, POSITIONS, RECORDS,
    REDB_CACHE_BYTES,
};
use super::stored::StoredProvider;

/// A consistent view of a whole redb provider, taken between two commits.
pub struct BackupView {
    pub provider: String,
    pub(crate) source: PathBuf,
    pub(crate) txn: ReadTransaction,
    /// The provider's disk, which the copy is written to.
    pub(crate) disk: Arc<dyn Disk>,
}

/// What a finished, verified backup holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupReport {
    pub provider: String,
    pub destination: PathBuf,
    pub channels: u64,
    /// Rows of the records table: every record of every channel.
    pub records: u64,
    /// Rows of every table.
    pub rows: u64,
    /// The copy's size on disk.
    pub file_bytes: u64,
    /// From the snapshot to the verified copy.
    pub took_ms: u64,
}

/// Where a finished backup is reported, from the thread that took it.
pub type BackupReply = Box<dyn FnOnce(Result<BackupReport, StoreError>) + Send>;

/// A reply several places may hold and the first to answer uses: the
/// thread that copies, and whoever must answer when that thread never
/// gets the request.
#[derive(Clone)]
pub(crate) struct SharedReply(Arc<Mutex<Option<BackupReply>>>);

impl SharedReply {
    pub(crate) fn new(reply: BackupReply) -> SharedReply {
        SharedReply(Arc::new(Mutex::new(Some(reply))))
    }

    /// Answers, unless somebody already did.
    pub(crate) fn answer(&self, result: Result<BackupReport, StoreError>) {
        if let Some(reply) = self.0.lock().ok().and_then(|mut r| r.take()) {
            reply(result);
        }
    }
}

/// Every table's row count and a checksum over its rows, in key order.
#[derive(Debug, Default, PartialEq, Eq)]
struct Digest {
    rows: u64,
    records: u64,
    channels: u64,
    sum: u64,
}

impl Digest {
    fn row(&mut self, key: &[u8], value: &[u8]) {
        let mut bytes = Vec::with_capacity(8 + key.len() + value.len());
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
        bytes.extend_from_slice(value);
        // Order matters: a row moved to another place changes the sum.
        self.sum = self.sum.rotate_left(7) ^ u64::from(crc32c(&bytes));
        self.rows += 1;
    }
}

/// Calls `each` for every table a provider has, with its definition.
macro_rules! for_each_table {
    ($each:ident, $($arg:expr),*) => {{
        $each(META, $($arg),*)?;
        let channels = $each(CHANNELS, $($arg),*)?;
        let records = $each(RECORDS, $($arg),*)?;
        $each(POSITIONS, $($arg),*)?;
        $each(ENTRIES, $($arg),*)?;
        (channels, records)
    }};
}

/// The meta rows tying a file to its journal stay behind: a backup holds
/// everything acknowledged without one, and a restored copy must not take
/// up the live file's journal as its own.
fn is_journal_row<K: Key + 'static, V: Value + 'static>(
    table: &TableDefinition<K, V>,
    key: &[u8],
) -> bool {
    ::redb::TableHandle::name(table) == ::redb::TableHandle::name(&META)
        && (key == META_JOURNAL_ID.as_bytes() || key == META_JOURNAL_SEQUENCE.as_bytes())
}

fn copy_table<K: Key + 'static, V: Value + 'static>(
    table: TableDefinition<K, V>,
    from: &ReadTransaction,
    to: &WriteTransaction,
    path: &Path,
) -> Result<u64, StoreError> {
    let source = from
        .open_table(table)
        .map_err(db_error(path, "open a table of the snapshot"))?;
    let mut copy = to
        .open_table(table)
        .map_err(db_error(path, "create a table of the copy"))?;
    let mut rows = 0;
    for row in source.iter().map_err(db_error(path, "read the snapshot"))? {
        let (k, v) = row.map_err(db_error(path, "read the snapshot"))?;
        if is_journal_row(&table, K::as_bytes(&k.value()).as_ref()) {
            continue;
        }
        copy.insert(k.value(), v.value())
            .map_err(db_error(path, "write the copy"))?;
        rows += 1;
    }
    Ok(rows)
}

fn digest_table<K: Key + 'static, V: Value + 'static>(
    table: TableDefinition<K, V>,
    txn: &ReadTransaction,
    path: &Path,
    digest: &mut Digest,
) -> Result<u64, StoreError> {
    let rows = txn
        .open_table(table)
        .map_err(db_error(path, "open a table"))?;
    let before = digest.rows;
    for row in rows.iter().map_err(db_error(path, "read a table"))? {
        let (k, v) = row.map_err(db_error(path, "read a table"))?;
        if is_journal_row(&table, K::as_bytes(&k.value()).as_ref()) {
            continue;
        }
        digest.row(
            K::as_bytes(&k.value()).as_ref(),
            V::as_bytes(&v.value()).as_ref(),
        );
    }
    Ok(digest.rows - before)
}

fn digest(txn: &ReadTransaction, path: &Path) -> Result<Digest, StoreError> {
    let mut d = Digest::default();
    let (channels, records) = for_each_table!(digest_table, txn, path, &mut d);
    d.channels = channels;
    d.records = records;
    Ok(d)
}

/// Copies `view` into a new file at `destination` and verifies the copy.
/// A destination that exists is refused; a copy that fails or does not
/// verify is removed.
pub fn take_backup(view: BackupView, destination: &Path) -> Result<BackupReport, StoreError> {
    let started = Instant::now();
    let disk = view.disk.as_ref();
    create_new_file(disk, destination, "a backup")?;
    let result = copy_and_verify(&view, destination);
    if result.is_err() {
        let _ = disk.remove_file(destination);
        // Or a power cut could bring the half-written backup back.
        let _ = sync_parent(disk, destination);
    }
    let (channels, records, rows) = result?;
    let file_bytes = disk
        .file_len(destination)
        .map_err(|e| StoreError::io(destination, "read the backup's size", e))?;
    Ok(BackupReport {
        provider: view.provider,
        destination: destination.to_path_buf(),
        channels,
        records,
        rows,
        file_bytes,
        took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

fn copy_and_verify(view: &BackupView, destination: &Path) -> Result<(u64, u64, u64), StoreError> {
    let disk = view.disk.as_ref();
    let mut builder = Builder::new();
    builder.set_cache_size(REDB_CACHE_BYTES);
    let db = create_db(disk, destination, &builder)
        .map_err(|e| e.at(destination, "create the backup file"))?;
    let mut txn = db
        .begin_write()
        .map_err(db_error(destination, "begin the copy"))?;
    txn.set_durability(Durability::Immediate)
        .map_err(db_error(destination, "ask for a durable commit"))?;
    for_each_table!(copy_table, &view.txn, &txn, destination);
    txn.commit()
        .map_err(db_error(destination, "commit the copy"))?;
    db.close()
        .map_err(db_error(destination, "close the backup file"))?;
    sync_parent(disk, destination)?;
    let wanted = digest(&view.txn, &view.source)?;
    // Opened as the broker opens a provider, its integrity checked.
    builder.set_check_integrity_on_open(true);
    let copy = create_db(disk, destination, &builder)
        .map_err(|e| e.at(destination, "open the backup to verify it"))?;
    let found = digest(
        &copy
            .begin_read()
            .map_err(db_error(destination, "read the backup"))?,
        destination,
    )?;
    if found != wanted {
        return Err(StoreError::format(
            destination,
            format!(
                "reads back {} rows where the snapshot has {}, or other bytes: the backup is not trusted",
                found.rows, wanted.rows
            ),
        ));
    }
    let stored = StoredProvider::from_database(view.disk.clone(), destination, copy)?;
    for key in stored.channel_keys() {
        stored.summary(&key)?;
    }
    Ok((wanted.channels, wanted.records, wanted.rows))
}
