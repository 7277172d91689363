//! The journal in front of a redb provider: one file of fixed size,
//! written with zeros when it is created, into which each committed batch
//! is appended as a checksummed frame and synced before anyone is told.
//! Appends never change the file's size, so a sync writes the frame's
//! pages and no file metadata.
//!
//! ```text
//!    0  header page: "SAGUINJL", version u32, journal id u64,
//!       capacity u64, CRC32C u32 of the 28 bytes before it
//! 4096  frames, each at the start of a block: payload length u32,
//!       sequence u64, CRC32C u32 of the length, the sequence and the
//!       payload; then the payload, then zeros to the block's end
//! ```
//!
//! Each frame starts a fresh block (format 2), so an append writes only
//! blocks no acknowledged frame is in: a write torn or garbled by a power
//! cut can take only the frame it was writing. Format 1 packed frames
//! end to end and rewrote the start of the current block with each
//! append; it is still read, replayed once and replaced.
//!
//! Sequences rise by one from frame to frame for the journal's whole life.
//! After a checkpoint (everything up to a sequence is durable in redb) the
//! next frame is written at the start again, over older ones. Replay reads
//! frames from the start while each one's checksum holds and its sequence
//! follows the one before; a frame left over from before the last reset
//! has a lower sequence, so the chain stops there, as it does at zeros and
//! at a frame torn by a crash. Where the chain ends, the blocks after are
//! searched for a frame that checks out with a higher sequence: one means
//! a frame in the middle was damaged, not torn (see [`ChainEnd`]).

use std::path::{Path, PathBuf};

use super::checksum::{crc32c, crc32c_of};
use super::disk::{Disk, DiskFile, OpenMode};
use super::error::StoreError;
use super::files::sync_parent;

const MAGIC: &[u8; 8] = b"SAGUINJL";
/// Format 2: a frame a block. Format 1 (frames packed) is read for replay.
const VERSION: u32 = 2;
const PACKED_VERSION: u32 = 1;
const HEADER_BYTES: usize = 32;
/// The unit every append writes: a device block and a memory page.
const BLOCK_BYTES: usize = 4096;
/// Frames start on the second block, so rewriting the first frame never
/// touches the header.
pub(crate) const FRAMES_START: u64 = BLOCK_BYTES as u64;
pub(crate) const FRAME_HEADER_BYTES: u64 = 16;

/// One frame found by a replay.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) sequence: u64,
    pub(crate) payload: Vec<u8>,
}

/// Where a journal's chain of frames ended, and what lies after it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ChainEnd {
    /// The file offset where the chain stopped: where the next frame would
    /// have been.
    pub(crate) offset: u64,
    /// Bytes at `offset` that are neither zeros nor a whole older frame:
    /// a frame torn by a crash, or one damaged since. 0 at zeros, at an
    /// older frame and at the file's end.
    pub(crate) dropped_bytes: u64,
    /// The first frame after `offset` that checks out and is newer than
    /// the chain's last (any, if the chain is empty): its offset and
    /// sequence. Format 2 only, where frames start on blocks.
    pub(crate) later: Option<(u64, u64)>,
}

/// The journal file beside a provider's redb file.
///
/// Appends bypass the page cache (`O_DIRECT`) and write whole blocks: the
/// kernel's cache may hold a file in folios of many pages, and a buffered
/// append re-dirties, and writes back, the whole folio it lands in - 64KiB
/// a sync where this file was measured. Where the file system refuses
/// direct I/O (tmpfs) the same block writes go through the cache.
pub(crate) struct Journal {
    file: Box<dyn DiskFile>,
    path: PathBuf,
    capacity_bytes: u64,
    /// Where the next frame goes: always the start of a block, so no
    /// append writes over a block an earlier frame is in.
    write_at: u64,
    /// The blocks an append writes, kept for the next one up to
    /// [`KEPT_BUFFER_BYTES`]: a batch then allocates nothing here.
    buffer: Vec<u8>,
}

/// The largest append buffer kept between appends; one grown past it by
/// a large frame is given back.
const KEPT_BUFFER_BYTES: usize = 64 << 10;

/// What [`Journal::open`] found.
pub(crate) enum Opened {
    /// The journal of this id, and the chain of frames from its start.
    Ours {
        journal: Journal,
        frames: Vec<Frame>,
        end: ChainEnd,
        /// Written in format 1: to be replaced once its frames are
        /// durable elsewhere, since appends to it would not be format 2.
        packed: bool,
    },
    /// A journal written for another redb file (its id differs).
    Foreign { id: u64 },
}

/// `<file_path>.journal`.
pub(crate) fn journal_path_for(file_path: &Path) -> PathBuf {
    let mut name = file_path.as_os_str().to_owned();
    name.push(".journal");
    PathBuf::from(name)
}

impl Journal {
    /// Creates the journal file, replacing any file at `path`: the header,
    /// then zeros up to `capacity_bytes`, synced with the directory.
    pub(crate) fn create(
        disk: &dyn Disk,
        path: &Path,
        id: u64,
        capacity_bytes: u64,
    ) -> Result<Journal, StoreError> {
        let capacity_bytes = capacity_bytes.max(FRAMES_START + BLOCK_BYTES as u64)
            / BLOCK_BYTES as u64
            * BLOCK_BYTES as u64;
        let temp = path.with_extension("journal-new");
        let mode = OpenMode {
            create: true,
            truncate: true,
            permissions: 0o600,
            ..OpenMode::read_write()
        };
        let file = disk
            .open(&temp, mode)
            .map_err(|e| StoreError::io(&temp, "create the journal", e))?;
        let io = |e| StoreError::io(&temp, "write the journal's zeros", e);
        let zeros = vec![0u8; 64 << 10];
        let mut at = 0u64;
        while at < capacity_bytes {
            let n = (capacity_bytes - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at).map_err(io)?;
            at += n as u64;
        }
        file.write_all_at(&header(id, capacity_bytes), 0)
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        drop(file);
        disk.rename(&temp, path)
            .map_err(|e| StoreError::io(path, "put the new journal in place", e))?;
        sync_parent(disk, path)?;
        Ok(Journal {
            file: open_for_appends(disk, path)?,
            path: path.to_path_buf(),
            capacity_bytes,
            write_at: FRAMES_START,
            buffer: Vec::new(),
        })
    }

    /// Opens the journal at `path` (`None` if there is none) and reads the
    /// chain of frames from its start, and what lies where it ends. A
    /// damaged header is an error: the file may hold acknowledged batches,
    /// and nothing here can tell.
    pub(crate) fn open(
        disk: &dyn Disk,
        path: &Path,
        expected_id: u64,
    ) -> Result<Option<Opened>, StoreError> {
        let file = match disk.open(path, OpenMode::read_only()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(path, "open the journal", e)),
        };
        let length = file
            .size_bytes()
            .map_err(|e| StoreError::io(path, "read the journal's size", e))?;
        let mut head = [0u8; HEADER_BYTES];
        let (version, id, capacity_bytes) = match file.read_exact_at(&mut head, 0) {
            Ok(()) => parse_header(&head).ok_or_else(|| damaged(path, "its header"))?,
            Err(_) => return Err(damaged(path, "its header (the file is too short)")),
        };
        if capacity_bytes != length {
            return Err(damaged(
                path,
                "its size, which is not the size its header states",
            ));
        }
        if id != expected_id {
            return Ok(Some(Opened::Foreign { id }));
        }
        let packed = version == PACKED_VERSION;
        let align = if packed { 1 } else { BLOCK_BYTES };
        // Read only as far as the chain goes: after a clean stop that is
        // the first block, so the chain is read from 64KiB of the file.
        let body_bytes = (capacity_bytes - FRAMES_START) as usize;
        let mut read_bytes = (64usize << 10).min(body_bytes);
        let (frames, stopped_at) = loop {
            let mut body = vec![0u8; read_bytes];
            file.read_exact_at(&mut body, FRAMES_START)
                .map_err(|e| StoreError::io(path, "read the journal", e))?;
            let (frames, ran_short, stopped_at) = chain(&body, align);
            if !ran_short || read_bytes == body_bytes {
                break (frames, stopped_at);
            }
            read_bytes = read_bytes.saturating_mul(4).min(body_bytes);
        };
        let offset = FRAMES_START + stopped_at as u64;
        let read = |e| StoreError::io(path, "read the journal", e);
        let mut end = ChainEnd {
            offset,
            dropped_bytes: dropped_at(file.as_ref(), offset, capacity_bytes).map_err(read)?,
            later: None,
        };
        if !packed {
            let newer_than = frames.last().map(|f| f.sequence);
            end.later = newer_frame_after(file.as_ref(), offset, capacity_bytes, newer_than)
                .map_err(read)?;
        }
        drop(file);
        Ok(Some(Opened::Ours {
            journal: Journal {
                file: open_for_appends(disk, path)?,
                path: path.to_path_buf(),
                capacity_bytes,
                write_at: FRAMES_START,
                buffer: Vec::new(),
            },
            frames,
            end,
            packed,
        }))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a frame of `payload_bytes` fits after those written since
    /// the last reset.
    pub(crate) fn fits(&self, payload_bytes: usize) -> bool {
        self.write_at
            .saturating_add(FRAME_HEADER_BYTES)
            .saturating_add(payload_bytes as u64)
            <= self.capacity_bytes
    }

    /// Writes one frame, from the start of the next free block, and syncs
    /// it. The caller checked [`Self::fits`]. On an error the frame may or
    /// may not be on the disk; no earlier frame is touched either way.
    pub(crate) fn append(&mut self, sequence: u64, payload: &[u8]) -> Result<(), StoreError> {
        debug_assert!(self.fits(payload.len()));
        let frame_bytes = FRAME_HEADER_BYTES as usize + payload.len();
        let blocks_bytes = frame_bytes.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        // Direct I/O wants the memory aligned as well as the offset.
        if self.buffer.len() < blocks_bytes + BLOCK_BYTES {
            self.buffer = vec![0u8; blocks_bytes + BLOCK_BYTES];
        }
        let skew = self
            .buffer
            .as_ptr()
            .align_offset(BLOCK_BYTES)
            .min(BLOCK_BYTES);
        let blocks = &mut self.buffer[skew..skew + blocks_bytes];
        write_frame(&mut blocks[..frame_bytes], sequence, payload);
        blocks[frame_bytes..].fill(0);
        // The file is a whole number of blocks and the frame fits, so the
        // blocks never run past it; the write is clipped to be sure.
        let end = (self.write_at + blocks_bytes as u64).min(self.capacity_bytes);
        let blocks = &blocks[..(end - self.write_at) as usize];
        // The file is open with O_DSYNC: the write is the sync.
        self.file
            .write_all_at(blocks, self.write_at)
            .map_err(|e| StoreError::io(&self.path, "write and sync a journal frame", e))?;
        self.write_at = end;
        if self.buffer.len() > KEPT_BUFFER_BYTES {
            self.buffer = Vec::new();
        }
        Ok(())
    }

    /// Everything written so far is durable elsewhere: the next frame goes
    /// at the start again.
    pub(crate) fn reset(&mut self) {
        self.write_at = FRAMES_START;
    }

    /// Empties the journal for good: a reset, and zeros over its first
    /// block, so the next open finds no chain to read.
    pub(crate) fn clear(&mut self) -> Result<(), StoreError> {
        self.reset();
        let buffer = vec![0u8; 2 * BLOCK_BYTES];
        let skew = buffer.as_ptr().align_offset(BLOCK_BYTES).min(BLOCK_BYTES);
        self.file
            .write_all_at(&buffer[skew..skew + BLOCK_BYTES], FRAMES_START)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| StoreError::io(&self.path, "clear the journal", e))
    }

    /// Bytes of the journal's capacity taken since the last reset: whole
    /// blocks, one or more a frame.
    #[cfg(test)]
    pub(crate) fn used_bytes(&self) -> u64 {
        self.write_at - FRAMES_START
    }
}

/// The journal opened for appends: `O_DSYNC`, so a write returns once its
/// blocks are on the device and a frame costs one blocking call, not a
/// write and an `fdatasync` (on a busy machine each wake-up from a
/// blocking call waits for a CPU); and direct I/O where the file system
/// allows it (the disk falls back to buffered writes where it does not).
fn open_for_appends(disk: &dyn Disk, path: &Path) -> Result<Box<dyn DiskFile>, StoreError> {
    disk.open(path, append_mode())
        .map_err(|e| StoreError::io(path, "open the journal for appends", e))
}

/// How [`open_for_appends`] opens the journal.
fn append_mode() -> OpenMode {
    OpenMode {
        write: true,
        sync_writes: true,
        direct: true,
        ..OpenMode::default()
    }
}

fn damaged(path: &Path, what: &str) -> StoreError {
    StoreError::format(
        path,
        format!("the journal is damaged in {what}; it may hold acknowledged writes, so it is not replaced: move it aside only if the redb file beside it is known to hold everything"),
    )
}

fn header(id: u64, capacity_bytes: u64) -> [u8; HEADER_BYTES] {
    header_of_version(VERSION, id, capacity_bytes)
}

fn header_of_version(version: u32, id: u64, capacity_bytes: u64) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..20].copy_from_slice(&id.to_le_bytes());
    h[20..28].copy_from_slice(&capacity_bytes.to_le_bytes());
    let crc = crc32c(&h[..28]);
    h[28..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The version, id and capacity of a header that checks out and is of a
/// format this build reads.
fn parse_header(h: &[u8; HEADER_BYTES]) -> Option<(u32, u64, u64)> {
    let crc = u32::from_le_bytes(h[28..].try_into().ok()?);
    if &h[..8] != MAGIC || crc32c(&h[..28]) != crc {
        return None;
    }
    let version = u32::from_le_bytes(h[8..12].try_into().ok()?);
    if version != VERSION && version != PACKED_VERSION {
        return None;
    }
    let id = u64::from_le_bytes(h[12..20].try_into().ok()?);
    let capacity = u64::from_le_bytes(h[20..28].try_into().ok()?);
    (capacity > FRAMES_START && capacity % BLOCK_BYTES as u64 == 0)
        .then_some((version, id, capacity))
}

/// Rewrites the journal at `path` as format 1 would have held the same
/// frames: packed end to end after the header.
#[cfg(test)]
pub(crate) fn rewrite_as_packed(path: &Path) {
    let bytes = std::fs::read(path).expect("read the journal");
    let head: [u8; HEADER_BYTES] = bytes[..HEADER_BYTES].try_into().expect("a header");
    let (_, id, capacity) = parse_header(&head).expect("a header that checks out");
    let (frames, _, _) = chain(&bytes[FRAMES_START as usize..], BLOCK_BYTES);
    let mut packed = vec![0u8; capacity as usize];
    packed[..HEADER_BYTES].copy_from_slice(&header_of_version(PACKED_VERSION, id, capacity));
    let mut at = FRAMES_START as usize;
    for f in &frames {
        let frame = encode_frame(f.sequence, &f.payload);
        packed[at..at + frame.len()].copy_from_slice(&frame);
        at += frame.len();
    }
    std::fs::write(path, packed).expect("write the packed journal");
}

/// The format version in the journal header at `path`.
#[cfg(test)]
pub(crate) fn version_of(path: &Path) -> u32 {
    let bytes = std::fs::read(path).expect("read the journal");
    u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"))
}

#[cfg(test)]
pub(crate) fn encode_frame(sequence: u64, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8; FRAME_HEADER_BYTES as usize + payload.len()];
    write_frame(&mut frame, sequence, payload);
    frame
}

/// Writes the frame of `payload` into `into`, which is exactly its size.
fn write_frame(into: &mut [u8], sequence: u64, payload: &[u8]) {
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    into[..4].copy_from_slice(&length.to_le_bytes());
    into[4..12].copy_from_slice(&sequence.to_le_bytes());
    into[12..16].copy_from_slice(&frame_crc(length, sequence, payload).to_le_bytes());
    into[16..].copy_from_slice(payload);
}

fn frame_crc(length: u32, sequence: u64, payload: &[u8]) -> u32 {
    crc32c_of(&[&length.to_le_bytes(), &sequence.to_le_bytes(), payload])
}

/// A frame header's length and sequence.
fn frame_head(head: &[u8]) -> (u32, u64, u32) {
    (
        u32::from_le_bytes(head[..4].try_into().expect("4 bytes")),
        u64::from_le_bytes(head[4..12].try_into().expect("8 bytes")),
        u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")),
    )
}

/// The frames from the start of `body` while each is whole, checksummed
/// and one sequence after the one before, each starting `align` bytes
/// apart at least; `true` with them when the chain ran into the end of
/// `body` rather than ending in it; and where in `body` it stopped.
pub(crate) fn chain(body: &[u8], align: usize) -> (Vec<Frame>, bool, usize) {
    let mut frames: Vec<Frame> = Vec::new();
    let mut at = 0usize;
    loop {
        let Some(head) = body.get(at..at + FRAME_HEADER_BYTES as usize) else {
            return (frames, true, at.min(body.len()));
        };
        let (length, sequence, crc) = frame_head(head);
        let start = at + FRAME_HEADER_BYTES as usize;
        let Some(payload) = start
            .checked_add(length as usize)
            .and_then(|end| body.get(start..end))
        else {
            return (frames, true, at);
        };
        let follows = frames
            .last()
            .is_none_or(|last| last.sequence.checked_add(1) == Some(sequence));
        if length == 0 || !follows || frame_crc(length, sequence, payload) != crc {
            return (frames, false, at);
        }
        frames.push(Frame {
            sequence,
            payload: payload.to_vec(),
        });
        at = (start + length as usize).next_multiple_of(align);
    }
}

/// The bytes at `offset` a replay drops: those of what claims to be a
/// frame there and does not check out (to the end of its block when its
/// length cannot be believed). 0 at zeros and at a frame that checks out
/// (an older one, left from before a reset).
fn dropped_at(file: &dyn DiskFile, offset: u64, capacity_bytes: u64) -> std::io::Result<u64> {
    let block_end = (offset / BLOCK_BYTES as u64 + 1) * BLOCK_BYTES as u64;
    let mut block = vec![0u8; (block_end.min(capacity_bytes).saturating_sub(offset)) as usize];
    if block.len() < FRAME_HEADER_BYTES as usize {
        return Ok(0);
    }
    file.read_exact_at(&mut block, offset)?;
    if block.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let (length, sequence, crc) = frame_head(&block);
    let claimed = FRAME_HEADER_BYTES + u64::from(length);
    if length == 0 || offset + claimed > capacity_bytes {
        return Ok(block.len() as u64);
    }
    let mut payload = vec![0u8; length as usize];
    file.read_exact_at(&mut payload, offset + FRAME_HEADER_BYTES)?;
    Ok(if frame_crc(length, sequence, &payload) == crc {
        0
    } else {
        claimed
    })
}

/// The first frame that checks out at a block after `offset` with a
/// sequence above `newer_than` (any, when `None`): its offset and
/// sequence. Headers are read 64KiB at a time; a payload only for a
/// header that could be such a frame.
fn newer_frame_after(
    file: &dyn DiskFile,
    offset: u64,
    capacity_bytes: u64,
    newer_than: Option<u64>,
) -> std::io::Result<Option<(u64, u64)>> {
    let piece_bytes = 64u64 << 10;
    let mut block = (offset / BLOCK_BYTES as u64 + 1) * BLOCK_BYTES as u64;
    let mut piece = vec![0u8; piece_bytes as usize];
    while block < capacity_bytes {
        let n = piece_bytes.min(capacity_bytes - block) as usize;
        file.read_exact_at(&mut piece[..n], block)?;
        for at in (0..n).step_by(BLOCK_BYTES) {
            let (length, sequence, crc) = frame_head(&piece[at..at + FRAME_HEADER_BYTES as usize]);
            let frame_at = block + at as u64;
            let newer = newer_than.is_none_or(|last| sequence > last);
            if length == 0
                || !newer
                || frame_at + FRAME_HEADER_BYTES + u64::from(length) > capacity_bytes
            {
                continue;
            }
            let mut payload = vec![0u8; length as usize];
            file.read_exact_at(&mut payload, frame_at + FRAME_HEADER_BYTES)?;
            if frame_crc(length, sequence, &payload) == crc {
                return Ok(Some((frame_at, sequence)));
            }
        }
        block += n as u64;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;

    use super::super::disk::RealDisk;
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn dir(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("saguin-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    const BLOCK: usize = BLOCK_BYTES;

    fn end_of(path: &Path, id: u64) -> ChainEnd {
        match Journal::open(&RealDisk, path, id).unwrap() {
            Some(Opened::Ours { end, .. }) => end,
            _ => panic!("expected our journal"),
        }
    }

    fn frames_of(path: &Path, id: u64) -> Vec<(u64, Vec<u8>)> {
        match Journal::open(&RealDisk, path, id).unwrap() {
            Some(Opened::Ours { frames, .. }) => frames
                .into_iter()
                .map(|f| (f.sequence, f.payload))
                .collect(),
            _ => panic!("expected our journal"),
        }
    }

    #[test]
    fn frames_come_back_in_order_and_the_file_keeps_its_size() {
        let d = dir("order");
        let path = d.0.join("p.redb.journal");
        let mut j = Journal::create(&RealDisk, &path, 7, 64 << 10).unwrap();
        for s in 1..=5u64 {
            j.append(s, format!("batch {s}").as_bytes()).unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 << 10);
        let got = frames_of(&path, 7);
        assert_eq!(got.len(), 5);
        for (i, (s, p)) in got.iter().enumerate() {
            assert_eq!(*s, i as u64 + 1);
            assert_eq!(p, format!("batch {s}").as_bytes());
        }
    }

    #[test]
    fn a_flipped_bit_ends_the_chain_at_the_frame_it_is_in() {
        let d = dir("crc");
        let path = d.0.join("p.journal");
        let mut j = Journal::create(&RealDisk, &path, 1, 64 << 10).unwrap();
        j.append(1, b"first").unwrap();
        j.append(2, b"second").unwrap();
        j.append(3, b"third").unwrap();
        // A bit in the second frame's payload, in the second block.
        let at = FRAMES_START + BLOCK as u64 + FRAME_HEADER_BYTES + 1;
        let f = OpenOptions::new()
            .write(true)
            .read(true)
            .open(&path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
        let got = frames_of(&path, 1);
        assert_eq!(got, vec![(1, b"first".to_vec())]);
    }

    #[test]
    fn a_torn_tail_is_where_the_journal_ends() {
        let d = dir("torn");
        let path = d.0.join("p.journal");
        let mut j = Journal::create(&RealDisk, &path, 1, 64 << 10).unwrap();
        j.append(1, b"whole").unwrap();
        // The second frame's header reached the disk, half its payload did not.
        let frame = encode_frame(2, b"half written payload");
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        let at = FRAMES_START + BLOCK as u64;
        f.write_all_at(&frame[..frame.len() - 8], at).unwrap();
        assert_eq!(frames_of(&path, 1), vec![(1, b"whole".to_vec())]);
        let end = end_of(&path, 1);
        assert_eq!(end.offset, at);
        assert_eq!(
            end.dropped_bytes,
            frame.len() as u64,
            "what the header claims"
        );
        assert_eq!(end.later, None, "nothing newer: a torn tail");
    }

    #[test]
    fn after_a_reset_older_frames_behind_the_new_ones_are_not_replayed() {
        let d = dir("wrap");
        let path = d.0.join("p.journal");
        let mut j = Journal::create(&RealDisk, &path, 1, 64 << 10).unwrap();
        for s in 1..=4u64 {
            j.append(s, &[s as u8; 10]).unwrap();
        }
        j.reset();
        // Frames of exactly the old size, so the old ones line up behind.
        j.append(5, &[5u8; 10]).unwrap();
        j.append(6, &[6u8; 10]).unwrap();
        assert_eq!(j.used_bytes(), 2 * BLOCK as u64, "a block a frame");
        let got = frames_of(&path, 1);
        assert_eq!(got, vec![(5, vec![5u8; 10]), (6, vec![6u8; 10])]);
    }

    #[test]
    fn a_cleared_journal_holds_no_chain_and_a_long_one_is_read_whole() {
        let d = dir("clear");
        let path = d.0.join("p.journal");
        let mut j = Journal::create(&RealDisk, &path, 1, 1 << 20).unwrap();
        // Past the first 64KiB read: the chain is followed to its end.
        let payload = vec![3u8; 1000];
        for s in 1..=200u64 {
            j.append(s, &payload).unwrap();
        }
        assert_eq!(frames_of(&path, 1).len(), 200);
        j.clear().unwrap();
        assert!(frames_of(&path, 1).is_empty());
    }

    #[test]
    fn a_full_journal_says_so_before_anything_is_written() {
        let d = dir("full");
        let path = d.0.join("p.journal");
        let capacity = FRAMES_START + 4096;
        let mut j = Journal::create(&RealDisk, &path, 1, capacity).unwrap();
        let big = vec![1u8; 3000];
        assert!(j.fits(big.len()));
        j.append(1, &big).unwrap();
        assert!(!j.fits(big.len()), "a second one does not fit");
        assert!(
            !j.fits(1),
            "nor a small one: the frame's block is taken whole"
        );
        j.reset();
        assert!(j.fits(big.len()));
    }

    /// xorshift64: garbage and choices that are the same on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Flash without power-loss protection: a power cut during an append
    /// may leave each 512-byte sector the write touched holding its old
    /// bytes, its new bytes or garbage. Whatever the mix, every frame
    /// acknowledged before that append is replayed, before and after a
    /// reset has the file reused from its start.
    #[test]
    fn a_garbled_append_loses_no_acknowledged_frame() {
        const SECTOR: usize = 512;
        const PATTERNS: usize = 30;
        let d = dir("garble");
        let path = d.0.join("p.journal");
        let image_path = d.0.join("image.journal");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        // Frames that would share a block if packed, and ones that span two.
        let sizes = [10usize, 200, 700, 3000, 5000, 40, 1];
        let mut j = Journal::create(&RealDisk, &path, 1, 192 << 10).unwrap();
        let mut acknowledged: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut checkpointed = 0u64;
        let mut trials = 0usize;
        for round in 0..24usize {
            if round == 12 {
                // A checkpoint: the frames so far are durable elsewhere.
                j.reset();
                checkpointed = acknowledged.last().map_or(0, |a| a.0);
                acknowledged.clear();
            }
            let before = std::fs::read(&path).unwrap();
            let sequence = checkpointed.max(acknowledged.last().map_or(0, |a| a.0)) + 1;
            let payload: Vec<u8> = (0..sizes[round % sizes.len()])
                .map(|_| rng.next() as u8)
                .collect();
            j.append(sequence, &payload).unwrap();
            let after = std::fs::read(&path).unwrap();
            // An append writes whole blocks, so each block whose bytes
            // changed was written, every sector of it.
            let touched: Vec<usize> = (0..after.len() / BLOCK)
                .filter(|b| before[b * BLOCK..(b + 1) * BLOCK] != after[b * BLOCK..(b + 1) * BLOCK])
                .flat_map(|b| b * BLOCK / SECTOR..(b + 1) * BLOCK / SECTOR)
                .collect();
            assert!(!touched.is_empty(), "round {round}: the append wrote");
            std::fs::write(&image_path, &after).unwrap();
            let image = OpenOptions::new().write(true).open(&image_path).unwrap();
            for pattern in 0..PATTERNS {
                for &s in &touched {
                    let range = s * SECTOR..(s + 1) * SECTOR;
                    // All old, all new, all garbage, then mixes.
                    let sector: Vec<u8> = match if pattern < 3 {
                        pattern as u64
                    } else {
                        rng.next() % 3
                    } {
                        0 => before[range.clone()].to_vec(),
                        1 => after[range.clone()].to_vec(),
                        _ => (0..SECTOR).map(|_| rng.next() as u8).collect(),
                    };
                    image.write_all_at(&sector, range.start as u64).unwrap();
                }
                let got = frames_of(&image_path, 1);
                for ack in &acknowledged {
                    assert!(
                        got.contains(ack),
                        "round {round}, pattern {pattern}: acknowledged frame {} lost; the chain holds {:?}",
                        ack.0,
                        got.iter().map(|g| g.0).collect::<Vec<_>>()
                    );
                }
                let end = end_of(&image_path, 1);
                let newest = checkpointed.max(sequence);
                assert!(
                    end.later.is_none_or(
                        |(_, s)| s <= newest.min(got.last().map_or(checkpointed, |g| g.0))
                    ),
                    "round {round}, pattern {pattern}: a garbled tail taken for damage: {end:?}"
                );
                trials += 1;
            }
            acknowledged.push((sequence, payload));
        }
        assert_eq!(trials, 24 * PATTERNS);
    }

    #[test]
    fn a_damaged_frame_with_newer_ones_after_it_is_not_a_torn_tail() {
        let d = dir("middle");
        let path = d.0.join("p.journal");
        let mut j = Journal::create(&RealDisk, &path, 1, 64 << 10).unwrap();
        for s in 1..=5u64 {
            j.append(s, format!("batch {s}").as_bytes()).unwrap();
        }
        // The third frame's block reads back as garbage.
        let at = FRAMES_START + 2 * BLOCK as u64;
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0xa5u8; BLOCK], at).unwrap();
        let got = frames_of(&path, 1);
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![1, 2]);
        let end = end_of(&path, 1);
        assert_eq!(end.offset, at);
        assert_eq!(
            end.dropped_bytes, BLOCK as u64,
            "a length past the file: its block"
        );
        assert_eq!(
            end.later,
            Some((at + BLOCK as u64, 4)),
            "batch 4 follows the damage"
        );
    }

    #[test]
    fn a_packed_journal_of_format_1_is_read() {
        let d = dir("packed");
        let path = d.0.join("p.journal");
        let mut j = Journal::create(&RealDisk, &path, 9, 64 << 10).unwrap();
        for s in 1..=4u64 {
            j.append(s, &[s as u8; 100]).unwrap();
        }
        drop(j);
        rewrite_as_packed(&path);
        assert_eq!(version_of(&path), 1);
        match Journal::open(&RealDisk, &path, 9).unwrap() {
            Some(Opened::Ours {
                frames,
                packed,
                end,
                ..
            }) => {
                assert!(packed);
                assert_eq!(
                    frames.iter().map(|f| f.sequence).collect::<Vec<_>>(),
                    vec![1, 2, 3, 4]
                );
                assert_eq!(end.offset, FRAMES_START + 4 * (FRAME_HEADER_BYTES + 100));
                assert_eq!(end.later, None);
            }
            _ => panic!("expected our journal"),
        }
    }

    #[test]
    fn a_journal_of_another_file_is_told_apart_and_a_damaged_header_refused() {
        let d = dir("foreign");
        let path = d.0.join("p.journal");
        Journal::create(&RealDisk, &path, 42, 64 << 10).unwrap();
        assert!(matches!(
            Journal::open(&RealDisk, &path, 43).unwrap(),
            Some(Opened::Foreign { id: 42 })
        ));
        assert!(Journal::open(&RealDisk, &d.0.join("absent.journal"), 1)
            .unwrap()
            .is_none());
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(b"X", 3).unwrap();
        let err = Journal::open(&RealDisk, &path, 42)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("journal is damaged"), "{err}");
    }
}

#[cfg(test)]
mod open_flags_tests {
    use super::super::sim_disk::SimDisk;
    use super::*;

    /// The append is its own sync: on a disk that keeps only what was
    /// synced, a power cut right after an append (no `fdatasync`) keeps the
    /// frame. `disk.rs` shows that `sync_writes` is `O_DSYNC`, not `O_SYNC`.
    #[test]
    fn a_journal_write_is_its_own_data_sync() {
        let mode = append_mode();
        assert!(mode.sync_writes && mode.direct && mode.write);
        let sim = SimDisk::new();
        let path = Path::new("/j.journal");
        let mut journal = Journal::create(&sim, path, 7, 1 << 20).expect("create");
        journal.append(1, b"acknowledged").expect("append");
        drop(journal);
        sim.power_cut(1);
        match Journal::open(&sim, path, 7).expect("open") {
            Some(Opened::Ours { frames, .. }) => {
                assert_eq!(
                    frames,
                    vec![Frame {
                        sequence: 1,
                        payload: b"acknowledged".to_vec()
                    }]
                );
            }
            _ => panic!("expected our journal"),
        }
    }
}
