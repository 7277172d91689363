//! A copy of the redb file's first sector, as of its last sync, in
//! `<file_path>.header`.
//!
//! redb rewrites its header in place at every commit, both commit slots
//! in the file's first 512 bytes. On flash without power-loss protection
//! the sector being written when the power goes can read back as
//! garbage, which takes both slots and so the whole file, although every
//! page of its last durable commit is intact. After each successful sync
//! of the file this module keeps that sector, durable, in one of two
//! slots of its own file; an open that finds the file's header
//! unreadable puts the copy back (the last durable commit, to which the
//! journal's replay then adds what came after) and says so in one line.
//!
//! ```text
//! slot 0 at 0, slot 1 at 1024, each: "SAGUINHC", sequence u64,
//! CRC32C u32 of the sequence and the sector, 4 zero bytes, the sector
//! ```
//!
//! Each slot has sectors of its own, so a copy torn while it is written
//! leaves the other slot whole; the higher sequence that checks out wins.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::checksum::crc32c_of;
use super::disk::{Disk, DiskFile, OpenMode};
use super::error::StoreError;
use super::files::sync_parent;

/// The bytes of the redb file kept: its first sector, which holds redb's
/// whole header.
pub(crate) const SECTOR_BYTES: usize = 512;
const MAGIC: &[u8; 8] = b"SAGUINHC";
/// The first bytes of every redb file (redb's file format). A header
/// sector without them was not written whole; one with them is never
/// replaced, so a copy left beside another file (one restored from a
/// backup) is never put over a header redb can read.
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

/// Whether `sector` can be a redb header at all.
pub(crate) fn looks_like_redb_header(sector: &[u8; SECTOR_BYTES]) -> bool {
    sector.starts_with(&REDB_MAGIC)
}
const SLOT_HEAD_BYTES: usize = 24;
/// Two sectors a slot, so the slots share none.
const SLOT_BYTES: u64 = 1024;

/// `<file_path>.header`.
pub(crate) fn header_copy_path_for(file_path: &Path) -> PathBuf {
    let mut name = OsString::from(file_path.as_os_str());
    name.push(".header");
    PathBuf::from(name)
}

/// The copy file, open for the provider's life.
pub(crate) struct HeaderCopy {
    /// Opened `O_DSYNC`: a slot is durable when its write returns.
    file: Box<dyn DiskFile>,
    path: PathBuf,
    /// The sequence and sector of the newest slot.
    last: Mutex<(u64, Option<[u8; SECTOR_BYTES]>)>,
}

impl HeaderCopy {
    /// Opens the copy beside `file_path`, creating it (and making its
    /// name durable) when absent; `fresh` empties one left beside a file
    /// that is new, since it copied another.
    pub(crate) fn open(disk: &dyn Disk, file_path: &Path, fresh: bool) -> Result<Self, StoreError> {
        let path = header_copy_path_for(file_path);
        let existed = disk
            .exists(&path)
            .map_err(|e| StoreError::io(&path, "look for the header copy", e))?;
        let mode = OpenMode {
            create: true,
            truncate: fresh,
            permissions: 0o600,
            sync_writes: true,
            ..OpenMode::read_write()
        };
        let file = disk
            .open(&path, mode)
            .map_err(|e| StoreError::io(&path, "open the header copy", e))?;
        if !existed {
            sync_parent(disk, &path)?;
        }
        let copy = HeaderCopy {
            file,
            path,
            last: Mutex::new((0, None)),
        };
        let newest = if fresh { None } else { copy.read_newest() };
        *copy.lock() = newest.map_or((0, None), |(seq, sector)| (seq, Some(sector)));
        Ok(copy)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<[u8; SECTOR_BYTES]>)> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest sector kept, if any.
    pub(crate) fn newest(&self) -> Option<[u8; SECTOR_BYTES]> {
        self.lock().1
    }

    /// Keeps `sector`, just synced in the redb file, unless it is the one
    /// kept already. Durable when this returns.
    pub(crate) fn record(&self, sector: &[u8; SECTOR_BYTES]) -> io::Result<()> {
        let mut last = self.lock();
        if last.1.as_ref() == Some(sector) {
            return Ok(());
        }
        let sequence = last.0 + 1;
        let mut slot = [0u8; SLOT_HEAD_BYTES + SECTOR_BYTES];
        slot[..8].copy_from_slice(MAGIC);
        slot[8..16].copy_from_slice(&sequence.to_le_bytes());
        let crc = crc32c_of(&[&sequence.to_le_bytes(), sector]);
        slot[16..20].copy_from_slice(&crc.to_le_bytes());
        slot[SLOT_HEAD_BYTES..].copy_from_slice(sector);
        self.file.write_all_at(&slot, (sequence % 2) * SLOT_BYTES)?;
        *last = (sequence, Some(*sector));
        Ok(())
    }

    /// The slot that checks out with the higher sequence.
    fn read_newest(&self) -> Option<(u64, [u8; SECTOR_BYTES])> {
        (0..2u64)
            .filter_map(|index| {
                let mut slot = [0u8; SLOT_HEAD_BYTES + SECTOR_BYTES];
                self.file
                    .read_exact_at(&mut slot, index * SLOT_BYTES)
                    .ok()?;
                let sequence = u64::from_le_bytes(slot[8..16].try_into().ok()?);
                let crc = u32::from_le_bytes(slot[16..20].try_into().ok()?);
                let sector: [u8; SECTOR_BYTES] = slot[SLOT_HEAD_BYTES..].try_into().ok()?;
                (&slot[..8] == MAGIC && crc32c_of(&[&sequence.to_le_bytes(), &sector]) == crc)
                    .then_some((sequence, sector))
            })
            .max_by_key(|(sequence, _)| *sequence)
    }
}
