//! Moving a stopped provider between the two kinds: a memory provider's
//! snapshot directory into a new redb file, and a redb file into a new
//! snapshot directory.
//!
//! A channel arrives meaning what it meant: `next`, the floor and every
//! byte counter as they stand, each record at the offset it had, every
//! consumer position, and every keyed entry - sessions, a queue job's
//! attempt count - byte for byte. Nothing is renumbered.
//!
//! The source is only read (see [`StoredProvider`]). The destination must
//! not exist (a snapshot directory may exist if it holds no snapshot and
//! no manifest), is locked as a broker would lock it, and is read back and
//! compared with the source, channel by channel, before success is
//! reported. A conversion that fails removes what it wrote, so the same
//! command can be run again.

use std::path::Path;
use std::sync::Arc;

use ::redb::{Builder, Database, Durability};

use super::disk::{parent_dir, Disk, RealDisk};
use super::encoding::message_bytes;
use super::error::db_error;
use super::error::StoreError;
use super::files::{create_new_file, lock_path_for, sync_parent};
use super::lock::LockFile;
use super::memory_channel::MemoryChannel;
use super::redb_file::create_db;
use super::redb_schema::{
    check_format, encode_entry, ChannelEntry, CHANNELS, ENTRIES, META, META_NEXT_CHANNEL_ID,
    POSITIONS, RECORDS, REDB_CACHE_BYTES,
};
use super::snapshot::{
    channel_files, save_channel, save_manifest, sync_dir, LOCK_FILE, MANIFEST_FILE,
};
use super::stored::{StoredKind, StoredProvider};

/// The generation a converted snapshot directory's files carry: the first
/// shutdown, as far as a broker loading them can tell.
const CONVERTED_GENERATION: u64 = 1;

/// What a conversion carried, once it was read back and found equal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Converted {
    pub channels: u64,
    pub records: u64,
    pub positions: u64,
    pub entries: u64,
}

impl Converted {
    fn add(&mut self, channel: &MemoryChannel) {
        self.channels += 1;
        self.records += channel.records.len() as u64;
        self.positions += channel.positions.len() as u64;
        self.entries += channel.entries.len() as u64;
    }
}

/// Opens the source and checks it is the kind the conversion reads.
fn open_source(source: &Path, kind: StoredKind) -> Result<StoredProvider, StoreError> {
    let stored = StoredProvider::open(source)?;
    if stored.kind() != kind {
        let other = match stored.kind() {
            StoredKind::Redb => "--redb-to-snapshots",
            StoredKind::Snapshots => "--snapshots-to-redb",
        };
        return Err(StoreError::format(
            source,
            format!(
                "is {}, not {}: to convert it, use {other}",
                stored.kind().name(),
                kind.name()
            ),
        ));
    }
    if stored.channel_keys().is_empty() {
        return Err(StoreError::format(
            source,
            "holds no channel: there is nothing to convert, and nothing was created",
        ));
    }
    Ok(stored)
}

/// Every channel of `source`, loaded one at a time: what failed to load is
/// collected rather than stopping the rest.
fn each_channel(
    source: &StoredProvider,
    mut write: impl FnMut(&str, &MemoryChannel) -> Result<(), StoreError>,
) -> Result<Converted, StoreError> {
    let mut converted = Converted::default();
    let mut errors = Vec::new();
    for key in source.channel_keys() {
        let done = source
            .load(&key)
            .and_then(|(name, channel)| write(&name, &channel).map(|()| channel));
        match done {
            Ok(channel) => converted.add(&channel),
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => Ok(converted),
        1 => Err(errors.remove(0)),
        _ => Err(StoreError::Several(errors)),
    }
}

/// Reads the destination back and compares every channel with the source.
fn verify(source: &StoredProvider, destination: &StoredProvider) -> Result<(), StoreError> {
    let mut wanted = Vec::new();
    for key in source.channel_keys() {
        wanted.push(source.load(&key)?);
    }
    let mut found = Vec::new();
    for key in destination.channel_keys() {
        found.push(destination.load(&key)?);
    }
    wanted.sort_by(|a, b| a.0.cmp(&b.0));
    found.sort_by(|a, b| a.0.cmp(&b.0));
    if wanted.len() != found.len() {
        return Err(StoreError::format(
            destination.path(),
            format!(
                "read back {} channels where the source has {}: the conversion is not trusted",
                found.len(),
                wanted.len()
            ),
        ));
    }
    for ((name, want), (got_name, got)) in wanted.iter().zip(&found) {
        if name != got_name || want != got {
            return Err(StoreError::format(
                destination.path(),
                format!("channel {name:?} reads back differently from the source: the conversion is not trusted"),
            ));
        }
    }
    Ok(())
}

/// A memory provider's snapshot directory into a new redb file.
pub fn snapshots_to_redb(source: &Path, destination: &Path) -> Result<Converted, StoreError> {
    snapshots_to_redb_on(RealDisk::shared(), source, destination)
}

/// [`snapshots_to_redb`], writing the new file on `disk`.
pub fn snapshots_to_redb_on(
    disk: Arc<dyn Disk>,
    source: &Path,
    destination: &Path,
) -> Result<Converted, StoreError> {
    let stored = open_source(source, StoredKind::Snapshots)?;
    let lock = LockFile::acquire(
        disk.as_ref(),
        &lock_path_for(destination),
        &destination.display().to_string(),
    )?;
    create_new_file(disk.as_ref(), destination, "a conversion")?;
    let result = write_redb(disk.as_ref(), &stored, destination).and_then(|converted| {
        let written = StoredProvider::open_while_locked(disk.clone(), destination)?;
        verify(&stored, &written).map(|()| converted)
    });
    if result.is_err() {
        let _ = disk.remove_file(destination);
        // Or a power cut could bring the half-written file back.
        let _ = sync_parent(disk.as_ref(), destination);
    }
    drop(lock);
    result
}

fn write_redb(
    disk: &dyn Disk,
    stored: &StoredProvider,
    destination: &Path,
) -> Result<Converted, StoreError> {
    let mut builder = Builder::new();
    builder.set_cache_size(REDB_CACHE_BYTES);
    let db = create_db(disk, destination, &builder)
        .map_err(|e| e.at(destination, "create the redb file"))?;
    let mut next_id = check_format(&db, destination)?;
    let converted = each_channel(stored, |name, channel| {
        let id = next_id;
        write_redb_channel(
            &db,
            destination,
            ChannelEntry {
                id,
                state: channel.state,
            },
            name,
            channel,
        )?;
        next_id += 1;
        Ok(())
    })?;
    db.close()
        .map_err(db_error(destination, "close the redb file"))?;
    sync_parent(disk, destination)?;
    Ok(converted)
}

/// One channel in one durable transaction: its row, records, positions and
/// entries, and the next channel id past it.
fn write_redb_channel(
    db: &Database,
    path: &Path,
    entry: ChannelEntry,
    name: &str,
    channel: &MemoryChannel,
) -> Result<(), StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(db_error(path, "begin a transaction"))?;
    txn.set_durability(Durability::Immediate)
        .map_err(db_error(path, "ask for a durable commit"))?;
    {
        let id = entry.id;
        let mut rows = txn
            .open_table(CHANNELS)
            .map_err(db_error(path, "open the channels table"))?;
        rows.insert(name, encode_entry(&entry).as_slice())
            .map_err(db_error(path, "write a channel's counters"))?;
        let mut records = txn
            .open_table(RECORDS)
            .map_err(db_error(path, "open the records table"))?;
        for (&offset, message) in &channel.records {
            records
                .insert((id, offset), message_bytes(message).as_slice())
                .map_err(db_error(path, "write a record"))?;
        }
        let mut positions = txn
            .open_table(POSITIONS)
            .map_err(db_error(path, "open the positions table"))?;
        for (reader, &offset) in &channel.positions {
            positions
                .insert((id, reader.as_str()), offset)
                .map_err(db_error(path, "write a position"))?;
        }
        let mut entries = txn
            .open_table(ENTRIES)
            .map_err(db_error(path, "open the entries table"))?;
        for (key, value) in &channel.entries {
            entries
                .insert((id, key.as_str()), value.as_slice())
                .map_err(db_error(path, "write an entry"))?;
        }
        let mut meta = txn
            .open_table(META)
            .map_err(db_error(path, "open the meta table"))?;
        let next = id.checked_add(1).ok_or_else(|| {
            StoreError::Invalid("the redb file has used every channel id".to_string())
        })?;
        meta.insert(META_NEXT_CHANNEL_ID, next.to_le_bytes().as_slice())
            .map_err(db_error(path, "write the next channel id"))?;
    }
    txn.commit().map_err(db_error(path, "commit"))
}

/// A redb file into a new snapshot directory.
pub fn redb_to_snapshots(source: &Path, destination: &Path) -> Result<Converted, StoreError> {
    redb_to_snapshots_on(RealDisk::shared(), source, destination)
}

/// [`redb_to_snapshots`], writing the new directory on `disk`.
pub fn redb_to_snapshots_on(
    disk: Arc<dyn Disk>,
    source: &Path,
    destination: &Path,
) -> Result<Converted, StoreError> {
    let stored = open_source(source, StoredKind::Redb)?;
    let created = prepare_snapshot_dir(disk.as_ref(), destination)?;
    let lock = LockFile::acquire(
        disk.as_ref(),
        &destination.join(LOCK_FILE),
        &destination.display().to_string(),
    )?;
    let d = disk.as_ref();
    let result = save_manifest(
        d,
        destination,
        CONVERTED_GENERATION,
        stored.channel_keys().iter(),
    )
    .and_then(|()| {
        each_channel(&stored, |name, channel| {
            save_channel(d, destination, name, channel, CONVERTED_GENERATION)
        })
    })
    .and_then(|converted| sync_dir(d, destination).map(|()| converted))
    .and_then(|converted| {
        let written = StoredProvider::open_while_locked(disk.clone(), destination)?;
        verify(&stored, &written).map(|()| converted)
    });
    drop(lock);
    if result.is_err() {
        remove_written_snapshots(d, destination, created);
    }
    result
}

/// Creates the destination directory, or accepts an existing one holding
/// no snapshot and no manifest. Returns whether it was created.
fn prepare_snapshot_dir(disk: &dyn Disk, destination: &Path) -> Result<bool, StoreError> {
    match disk.read_dir(destination) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // The parent must exist, as `mkdir` without `-p` wants it.
            let parent = parent_dir(destination);
            if !disk.exists(parent).unwrap_or(false) {
                return Err(StoreError::io(
                    destination,
                    "create the snapshot directory",
                    std::io::ErrorKind::NotFound.into(),
                ));
            }
            disk.create_dir_all(destination, 0o700)
                .map_err(|e| StoreError::io(destination, "create the snapshot directory", e))?;
            // The new directory's entry, durable before anything is in it.
            sync_parent(disk, destination)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Err(StoreError::format(
            destination,
            "exists and is not a directory, and a conversion never writes over anything: give a new directory",
        )),
        Err(e) => Err(StoreError::io(destination, "look at the destination", e)),
        Ok(_) => {
            if !channel_files(disk, destination)?.is_empty()
                || disk.exists(&destination.join(MANIFEST_FILE)).unwrap_or(false)
            {
                return Err(StoreError::format(
                    destination,
                    "already holds snapshots, and writing beside them would put two histories under one name: give an empty or new directory",
                ));
            }
            Ok(false)
        }
    }
}

/// Undoes a failed conversion into a snapshot directory.
fn remove_written_snapshots(disk: &dyn Disk, destination: &Path, created: bool) {
    if created {
        let _ = disk.remove_dir_all(destination);
        let _ = sync_parent(disk, destination);
        return;
    }
    for file in channel_files(disk, destination).unwrap_or_default() {
        let _ = disk.remove_file(&destination.join(file));
    }
    let _ = disk.remove_file(&destination.join(MANIFEST_FILE));
    // Or a power cut could bring half a conversion back.
    let _ = disk.sync_dir(destination);
}
