//! Joining a redb file to its journal at open: the frames the file does not
//! hold yet are applied again, in order, and made durable, so every
//! acknowledged write is back at the offset it was acknowledged with (the
//! apply is deterministic from the same state).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ::redb::{Database, Durability, WriteTransaction};

use super::batch_encoding::decode_batch;
use super::budget::Budget;
use super::disk::Disk;
use super::error::db_error;
use super::error::StoreError;
use super::files::sync_parent;
use super::journal::{journal_path_for, ChainEnd, Frame, Journal, Opened};
use super::redb_schema::{
    counted_bytes, load_channels, now_ms, read_meta_number, read_next_channel_id, write_meta_u64,
    ChannelMap, JOURNAL_CAPACITY_BYTES, META_JOURNAL_ID, META_JOURNAL_SEQUENCE,
};
use super::redb_tables::{apply_in, Applied, EncodedRecords};
use super::types::{Outcome, Write};

/// Opens (or creates) the journal of the redb file at `path`, applies the
/// frames the file lacks, and returns the journal, emptied, with the last
/// sequence the file holds.
pub(crate) fn attach_journal(
    disk: &dyn Disk,
    db: &Database,
    path: &Path,
) -> Result<(Journal, u64), StoreError> {
    let journal_path = journal_path_for(path);
    let Some(id) = read_meta_number(db, path, META_JOURNAL_ID)? else {
        // A file without a journal yet: new, written by an older build, a
        // backup or a conversion. Whatever journal lies beside it was some
        // other file's.
        set_aside(
            disk,
            &journal_path,
            "the redb file beside it has no journal of its own",
        )?;
        return start_journal(disk, db, path, &journal_path);
    };
    let sequence = read_meta_number(db, path, META_JOURNAL_SEQUENCE)?.unwrap_or(0);
    match Journal::open(disk, &journal_path, id)? {
        None => {
            log::warn!(
                "{}: its journal {} is missing; a new one is started. Only if the broker did not stop cleanly can writes acknowledged since the last checkpoint be missing",
                path.display(),
                journal_path.display()
            );
            start_journal(disk, db, path, &journal_path)
        }
        Some(Opened::Foreign { id: theirs }) => {
            set_aside(
                disk,
                &journal_path,
                &format!("it was written for another redb file (journal {theirs:#x}, this file's is {id:#x})"),
            )?;
            start_journal(disk, db, path, &journal_path)
        }
        Some(Opened::Ours {
            mut journal,
            frames,
            end,
            packed,
        }) => {
            let last = replay_frames(db, path, &frames, sequence, journal.path())?;
            if report_end(&journal_path, &end, last) {
                // The frames after the damage cannot be applied without
                // the lost one; the journal keeps them for the operator.
                drop(journal);
                set_aside(disk, &journal_path, "a frame in it is damaged")?;
                return start_journal(disk, db, path, &journal_path);
            }
            if packed {
                // Its frames are durable in the file now: a format 2
                // journal, of the same id, replaces it.
                drop(journal);
                let journal = Journal::create(disk, &journal_path, id, JOURNAL_CAPACITY_BYTES)?;
                log::info!(
                    "{}: journal replaced by one of the current format",
                    journal_path.display()
                );
                return Ok((journal, last));
            }
            journal.reset();
            Ok((journal, last))
        }
    }
}

/// Applies to the redb file at `path` (a tool's private copy) the frames of
/// the journal beside `original` that it lacks, and says how many. Never
/// writes the journal.
pub(crate) fn replay_into_copy(
    disk: &dyn Disk,
    db: &Database,
    path: &Path,
    original: &Path,
) -> Result<u64, StoreError> {
    let Some(id) = read_meta_number(db, path, META_JOURNAL_ID)? else {
        return Ok(0);
    };
    let sequence = read_meta_number(db, path, META_JOURNAL_SEQUENCE)?.unwrap_or(0);
    let journal_path = journal_path_for(original);
    match Journal::open(disk, &journal_path, id)? {
        Some(Opened::Ours { frames, end, .. }) => {
            let last = replay_frames(db, path, &frames, sequence, &journal_path)?;
            report_end(&journal_path, &end, last);
            Ok(last - sequence)
        }
        _ => Ok(0),
    }
}

/// Frames found damaged in the middle of a journal since the process
/// started: each one lost acknowledged batches (`saguin_journal_damaged_total`).
static DAMAGED_JOURNALS: AtomicU64 = AtomicU64::new(0);

/// How many journals were found with a damaged frame followed by later
/// ones since start.
pub fn damaged_journals_total() -> u64 {
    DAMAGED_JOURNALS.load(Ordering::Relaxed)
}

/// Says what lies where a journal's chain ended, `last` being the last
/// batch the redb file now holds. A frame that does not check out there
/// is a torn write when nothing newer follows it: it was never
/// acknowledged, and one line says what was dropped. A newer frame after
/// it means an acknowledged frame was damaged: logged as an error and
/// counted, and `true` is returned.
fn report_end(journal_path: &Path, end: &ChainEnd, last: u64) -> bool {
    match end.later {
        Some((offset, sequence)) if sequence > last => {
            DAMAGED_JOURNALS.fetch_add(1, Ordering::Relaxed);
            log::error!(
                "{}: the frame at offset {} is damaged, and batch {sequence} at offset {offset} was written after it: batches {} to {} were acknowledged and are lost. The batches up to {last} were applied; those after the damage cannot be applied without the lost ones, so the journal is moved aside for inspection and a new one started. Check the device: damage there is not a crash",
                journal_path.display(),
                end.offset,
                last + 1,
                sequence - 1,
            );
            true
        }
        _ => {
            if end.dropped_bytes > 0 {
                log::info!(
                    "{}: a torn frame of {} bytes at offset {} dropped; it was never acknowledged",
                    journal_path.display(),
                    end.dropped_bytes,
                    end.offset
                );
            }
            false
        }
    }
}

/// A durable commit that records `sequence` as the last frame the file
/// holds, and so makes every commit before it durable too.
pub(crate) fn checkpoint_db(db: &Database, path: &Path, sequence: u64) -> Result<(), StoreError> {
    let mut txn = db
        .begin_write()
        .map_err(db_error(path, "begin a checkpoint"))?;
    write_meta_u64(&txn, path, META_JOURNAL_SEQUENCE, sequence)?;
    txn.set_durability(Durability::Immediate)
        .map_err(db_error(path, "ask for a durable commit"))?;
    txn.commit().map_err(db_error(path, "commit a checkpoint"))
}

/// Applies the frames after `sequence`, which must follow it without a
/// gap, then checkpoints. Returns the last sequence the file now holds.
fn replay_frames(
    db: &Database,
    path: &Path,
    frames: &[Frame],
    sequence: u64,
    journal_path: &Path,
) -> Result<u64, StoreError> {
    let newer: Vec<&Frame> = frames.iter().filter(|f| f.sequence > sequence).collect();
    let Some(first) = newer.first() else {
        return Ok(sequence.max(frames.last().map_or(0, |f| f.sequence)));
    };
    if first.sequence != sequence + 1 {
        return Err(StoreError::format(
            journal_path,
            format!("holds batches from {} on, but the redb file holds only up to {sequence}: batches between are missing, so neither file is trusted alone; restore the provider from a backup", first.sequence),
        ));
    }
    let mut channels = load_channels(db, path)?;
    let mut next_channel_id = read_next_channel_id(db, path)?;
    for frame in &newer {
        let mut txn = db
            .begin_write()
            .map_err(db_error(path, "begin replaying a journal batch"))?;
        txn.set_durability(Durability::None)
            .map_err(db_error(path, "ask for a commit without a sync"))?;
        let applied = apply_journalled(
            &txn,
            path,
            journal_path,
            &channels,
            next_channel_id,
            frame.sequence,
            decode_frame(journal_path, frame.sequence, &frame.payload)?
                .as_slice()
                .into(),
        )?;
        write_meta_u64(&txn, path, META_JOURNAL_SEQUENCE, frame.sequence)?;
        txn.commit()
            .map_err(db_error(path, "commit a journal batch"))?;
        channels.extend(applied.staged);
        next_channel_id = applied.next_channel_id;
    }
    let last = newer.last().map_or(sequence, |f| f.sequence);
    checkpoint_db(db, path, last)?;
    log::info!(
        "{}: {} batches applied again from its journal",
        path.display(),
        newer.len()
    );
    Ok(last)
}

/// The writes one journal frame holds.
pub(crate) fn decode_frame(
    journal_path: &Path,
    sequence: u64,
    payload: &[u8],
) -> Result<Vec<Write>, StoreError> {
    decode_batch(payload).map_err(|e| {
        StoreError::format(
            journal_path,
            format!("batch {sequence} checks out and cannot be read: {}", e.0),
        )
    })
}

/// A frame's writes, and its records' bytes where the frame is at hand.
pub(crate) struct FrameWrites<'a> {
    pub(crate) writes: &'a [Write],
    pub(crate) encoded: Option<EncodedRecords<'a>>,
}

impl<'a> From<&'a [Write]> for FrameWrites<'a> {
    fn from(writes: &'a [Write]) -> Self {
        FrameWrites {
            writes,
            encoded: None,
        }
    }
}

/// Applies one journal frame's writes in `txn` over `channels`, as they
/// were applied when acknowledged. The batch was admitted once, so no byte
/// bound (which may have been lowered since) refuses it now; a write that
/// is refused all the same means the file is not the state the frame was
/// written against.
pub(crate) fn apply_journalled(
    txn: &WriteTransaction,
    path: &Path,
    journal_path: &Path,
    channels: &ChannelMap,
    next_channel_id: u32,
    sequence: u64,
    writes: FrameWrites<'_>,
) -> Result<Applied, StoreError> {
    let mut unbounded = Budget::new(u64::MAX, 0);
    unbounded.used_bytes = counted_bytes(channels);
    let applied = apply_in(
        txn,
        path,
        channels,
        next_channel_id,
        unbounded,
        writes.writes,
        writes.encoded,
    )?;
    if applied
        .outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Refused(_)))
    {
        return Err(StoreError::format(
            journal_path,
            format!("batch {sequence} is refused when applied again: the redb file is not the state it was written against; restore the provider from a backup"),
        ));
    }
    Ok(applied)
}

/// A new journal for a file that has none, its id in the file's meta.
fn start_journal(
    disk: &dyn Disk,
    db: &Database,
    path: &Path,
    journal_path: &Path,
) -> Result<(Journal, u64), StoreError> {
    let id = new_journal_id(path);
    let sequence = read_meta_number(db, path, META_JOURNAL_SEQUENCE)?.unwrap_or(0);
    let journal = Journal::create(disk, journal_path, id, JOURNAL_CAPACITY_BYTES)?;
    let mut txn = db
        .begin_write()
        .map_err(db_error(path, "begin a transaction"))?;
    write_meta_u64(&txn, path, META_JOURNAL_ID, id)?;
    write_meta_u64(&txn, path, META_JOURNAL_SEQUENCE, sequence)?;
    txn.set_durability(Durability::Immediate)
        .map_err(db_error(path, "ask for a durable commit"))?;
    txn.commit()
        .map_err(db_error(path, "record the journal's id"))?;
    Ok((journal, sequence))
}

/// Renames a journal that is not this file's out of the way, keeping it:
/// it may hold another file's acknowledged writes.
fn set_aside(disk: &dyn Disk, journal_path: &Path, why: &str) -> Result<(), StoreError> {
    let present = disk
        .exists(journal_path)
        .map_err(|e| StoreError::io(journal_path, "look for the journal", e))?;
    if !present {
        return Ok(());
    }
    let mut aside = journal_path.as_os_str().to_owned();
    aside.push(format!(".set-aside-{}", now_ms()));
    let aside = PathBuf::from(aside);
    disk.rename(journal_path, &aside)
        .map_err(|e| StoreError::io(journal_path, "move a journal aside", e))?;
    // The rename is kept only once the directory is synced.
    sync_parent(disk, journal_path)?;
    log::warn!(
        "journal {} moved to {}: {why}",
        journal_path.display(),
        aside.display()
    );
    Ok(())
}

/// Distinct for each file and each start: the clock, the process and the
/// path, mixed.
fn new_journal_id(path: &Path) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut bytes = nanos.to_le_bytes().to_vec();
    bytes.extend_from_slice(&std::process::id().to_le_bytes());
    bytes.extend_from_slice(path.as_os_str().as_encoded_bytes());
    let low = super::checksum::crc32c(&bytes);
    (nanos << 32) ^ u64::from(low) | 1
}
