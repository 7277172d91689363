//! The memory provider's snapshot: one file per channel and a manifest, in
//! a binary format written by hand so that a file this build does not
//! fully understand is refused by name rather than read as plausible
//! wrong state.
//!
//! Every file is:
//!
//! ```text
//!  0  magic           8 bytes, "SAGUINSN"
//!  8  format version  u32
//! 12  kind            u8: 1 a channel, 2 the manifest
//! 13  writer          24 bytes, the build that wrote it, NUL-padded
//! 37  written at      u64, Unix milliseconds
//! 45  body
//!     checksum        u32, CRC32C of every byte before it
//! ```
//!
//! The header never moves, so a file of another version can still say
//! which version, which build and when. The checksum trails, so a file cut
//! short has none and fails the same check as a flipped bit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::checksum::crc32c;
use super::disk::{Disk, OpenMode};
use super::encoding::{
    decode_channel_state, decode_message, encode_channel_state, encode_message, DecodeError,
    Decoder, Encoder, MESSAGE_MIN_BYTES,
};
use super::error::StoreError;
use super::lock::LockFile;
use super::memory_channel::{counted, MemoryChannel};
use super::types::{ChannelState, FIRST_OFFSET};
use super::validate::{check_channel_name, MAX_ENTRY_KEY_BYTES, MAX_READER_BYTES};

pub(crate) const MAGIC: [u8; 8] = *b"SAGUINSN";
/// The one format this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 2;
pub(crate) const KIND_CHANNEL: u8 = 1;
pub(crate) const KIND_MANIFEST: u8 = 2;
const WRITER_BYTES: usize = 24;
pub(crate) const HEADER_BYTES: usize = 8 + 4 + 1 + WRITER_BYTES + 8;
const CHECKSUM_BYTES: usize = 4;

pub(crate) const MANIFEST_FILE: &str = "saguin.manifest";
pub(crate) const LOCK_FILE: &str = "saguin.lock";
const CHANNEL_SUFFIX: &str = ".snapshot";
const TEMP_SUFFIX: &str = ".tmp";
/// The longest file name the common Linux filesystems take.
const NAME_MAX_BYTES: usize = 255;

/// The build that writes a file, as its header records it.
fn writer() -> [u8; WRITER_BYTES] {
    let text = concat!("saguin ", env!("CARGO_PKG_VERSION"));
    let mut out = [0u8; WRITER_BYTES];
    let n = text.len().min(WRITER_BYTES);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

/// The file a channel's snapshot is written to: every byte outside
/// `[A-Za-z0-9_-]` percent-encoded, the percent sign and the dot included,
/// so no channel name can reach `.`, `..`, a path separator or another
/// channel's file. Refused when the result is too long for a file name;
/// configuration validation can call this to refuse such a name at start.
pub fn snapshot_file_name(channel: &str) -> Result<String, String> {
    check_channel_name(channel)?;
    let mut out = String::with_capacity(channel.len() + CHANNEL_SUFFIX.len());
    for b in channel.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push_str(CHANNEL_SUFFIX);
    if out.len() + TEMP_SUFFIX.len() > NAME_MAX_BYTES {
        return Err(format!(
            "channel name {channel:?} encodes to a snapshot file name of {} bytes, longer than a file name may be; shorten it, especially its dots and non-ASCII characters, which take three bytes each",
            out.len()
        ));
    }
    Ok(out)
}

/// The largest snapshot file a provider bounded by `max_bytes` reads: its
/// records counted as they are bounded, plus room for the format's own
/// framing. A larger file was not written under this bound, or is damaged.
pub(crate) fn max_file_bytes(max_bytes: u64) -> u64 {
    max_bytes.saturating_mul(2).saturating_add(1 << 20)
}

/// A snapshot directory, the disk it is on, and the lock that makes it
/// this broker's.
pub(crate) struct SnapshotDir {
    path: PathBuf,
    disk: Arc<dyn Disk>,
    _lock: LockFile,
}

impl std::fmt::Debug for SnapshotDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotDir")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SnapshotDir {
    /// Checks that `path` is a directory and takes its `saguin.lock`.
    pub(crate) fn open(
        disk: Arc<dyn Disk>,
        path: &Path,
        provider: &str,
    ) -> Result<SnapshotDir, StoreError> {
        match disk.read_dir(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                return Err(StoreError::format(path, "snapshot_dir is not a directory"))
            }
            Err(e) => return Err(StoreError::io(path, "open the snapshot directory", e)),
        }
        let lock = LockFile::acquire(disk.as_ref(), &path.join(LOCK_FILE), provider)?;
        Ok(SnapshotDir {
            path: path.to_path_buf(),
            disk,
            _lock: lock,
        })
    }

    pub(crate) fn path(&self) -> &PathBuf {
        &self.path
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The header and checksum around a body.
fn frame(kind: u8, written_at_ms: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len() + CHECKSUM_BYTES);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.push(kind);
    out.extend_from_slice(&writer());
    out.extend_from_slice(&written_at_ms.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// What a file's header says, once its checksum has been verified.
#[derive(Debug)]
pub(crate) struct Unframed<'a> {
    pub(crate) body: &'a [u8],
}

/// Checks a whole file: magic, version, checksum, kind - in that order, so
/// a file of another version is named as such even though this build
/// cannot check its body.
pub(crate) fn unframe<'a>(
    path: &Path,
    bytes: &'a [u8],
    expected_kind: u8,
) -> Result<Unframed<'a>, StoreError> {
    let bad = |detail: String| StoreError::format(path, detail);
    if bytes.len() < HEADER_BYTES + CHECKSUM_BYTES {
        return Err(bad(format!(
            "a snapshot file is at least {} bytes and this one is {}: it is truncated, or not a snapshot; move it aside to start without it",
            HEADER_BYTES + CHECKSUM_BYTES,
            bytes.len()
        )));
    }
    if bytes[..8] != MAGIC {
        return Err(bad(
            "not a Sagüin snapshot file (its first bytes are not the snapshot magic); move it out of snapshot_dir"
                .to_string(),
        ));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    let writer_raw = &bytes[13..13 + WRITER_BYTES];
    let writer_end = writer_raw
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(WRITER_BYTES);
    let writer = String::from_utf8_lossy(&writer_raw[..writer_end]).into_owned();
    let mut at = [0u8; 8];
    at.copy_from_slice(&bytes[13 + WRITER_BYTES..HEADER_BYTES]);
    let written_at_ms = u64::from_le_bytes(at);
    if version != FORMAT_VERSION {
        return Err(bad(format!(
            "snapshot format {version} (written by {writer:?} at {written_at_ms} ms since 1970); this broker reads format {FORMAT_VERSION} only, and nothing converts one: start the build that wrote it to drain it"
        )));
    }
    let split = bytes.len() - CHECKSUM_BYTES;
    let stored = u32::from_le_bytes([
        bytes[split],
        bytes[split + 1],
        bytes[split + 2],
        bytes[split + 3],
    ]);
    let actual = crc32c(&bytes[..split]);
    if stored != actual {
        return Err(bad(format!(
            "damaged: its checksum is {stored:#010x} and its bytes sum to {actual:#010x}, so it was cut short or altered after {writer:?} wrote it; the broker does not start on it, and moving it aside loses that channel's records"
        )));
    }
    let kind = bytes[12];
    if kind != expected_kind {
        return Err(bad(format!(
            "holds a {} where a {} was expected",
            kind_name(kind),
            kind_name(expected_kind)
        )));
    }
    Ok(Unframed {
        body: &bytes[HEADER_BYTES..split],
    })
}

fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_CHANNEL => "channel snapshot",
        KIND_MANIFEST => "manifest",
        _ => "file of an unknown kind",
    }
}

/// A channel's file: its name, the shutdown it belongs to, its counters,
/// its positions and its records.
pub(crate) fn encode_channel(name: &str, channel: &MemoryChannel, generation: u64) -> Vec<u8> {
    let mut e = Encoder::with_capacity(
        64 + usize::try_from(channel.used_bytes()).unwrap_or(usize::MAX / 2),
    );
    e.str(name);
    e.u64(generation);
    encode_channel_state(&channel.state, &mut e);
    e.u32(u32::try_from(channel.positions.len()).unwrap_or(u32::MAX));
    for (reader, offset) in &channel.positions {
        e.str(reader);
        e.u64(*offset);
    }
    e.u32(u32::try_from(channel.records.len()).unwrap_or(u32::MAX));
    for (offset, message) in &channel.records {
        e.u64(*offset);
        encode_message(message, &mut e);
    }
    e.u32(u32::try_from(channel.entries.len()).unwrap_or(u32::MAX));
    for (key, value) in &channel.entries {
        e.str(key);
        e.bytes(value);
    }
    frame(KIND_CHANNEL, now_ms(), &e.buf)
}

/// Decodes and checks a channel file. The checksum proves the bytes are
/// the ones written; the checks after it cover what it cannot - that the
/// writer was right: a floor no lower than the first offset (1), offsets
/// ascending inside `[floor, next)`, positions inside `[1, next]`, counters
/// that match the contents.
pub(crate) fn decode_channel(
    path: &Path,
    bytes: &[u8],
) -> Result<(String, u64, MemoryChannel), StoreError> {
    let body = unframe(path, bytes, KIND_CHANNEL)?.body;
    decode_channel_body(body).map_err(|DecodeError(why)| StoreError::format(path, why))
}

fn decode_channel_body(body: &[u8]) -> Result<(String, u64, MemoryChannel), DecodeError> {
    let fail = |why: String| Err(DecodeError(why));
    let mut d = Decoder::new(body);
    let name = d.string("the channel name")?;
    if let Err(why) = check_channel_name(&name) {
        return fail(why);
    }
    let generation = d.u64("the shutdown generation")?;
    let state = decode_channel_state(&mut d)?;
    let mut channel = MemoryChannel {
        state,
        ..MemoryChannel::default()
    };
    let positions = d.count("the position count", 4 + 1 + 8)?;
    for _ in 0..positions {
        let reader = d.string("a reader name")?;
        let offset = d.u64("a position")?;
        check_position(&state, &reader, offset)?;
        if channel.positions.insert(reader.clone(), offset).is_some() {
            return fail(format!("reader {reader:?} appears twice"));
        }
    }
    let records = d.count("the record count", 8 + MESSAGE_MIN_BYTES)?;
    let mut previous: Option<u64> = None;
    for _ in 0..records {
        let offset = d.u64("a record offset")?;
        check_record_offset(&state, offset)?;
        if previous.is_some_and(|p| offset <= p) {
            return fail(format!("record {offset} follows a record at or after it"));
        }
        previous = Some(offset);
        let message = decode_message(&mut d)?;
        channel.records.insert(offset, message);
    }
    let entries = d.count("the entry count", 4 + 1 + 4)?;
    let mut previous_key: Option<String> = None;
    for _ in 0..entries {
        let key = d.string("an entry key")?;
        let value = d.bytes("an entry value")?;
        check_entry_key(&key)?;
        if previous_key.as_ref().is_some_and(|p| key <= *p) {
            return fail(format!("entry {key:?} follows an entry at or after it"));
        }
        previous_key = Some(key.clone());
        channel.entries.insert(key, value.to_vec());
    }
    d.finish("the channel")?;
    check_counters(&channel)?;
    Ok((name, generation, channel))
}

/// A stored position must name an offset a reader can hold: from the
/// first offset up to `next`.
pub(crate) fn check_position(
    state: &ChannelState,
    reader: &str,
    offset: u64,
) -> Result<(), DecodeError> {
    if reader.is_empty() || reader.len() > MAX_READER_BYTES {
        return Err(DecodeError(format!(
            "a reader name of {} bytes",
            reader.len()
        )));
    }
    if offset < FIRST_OFFSET || offset > state.next {
        return Err(DecodeError(format!(
            "reader {reader:?} is at {offset}, outside the first offset {FIRST_OFFSET} and next {}",
            state.next
        )));
    }
    Ok(())
}

/// A stored record lies inside `[floor, next)`.
pub(crate) fn check_record_offset(state: &ChannelState, offset: u64) -> Result<(), DecodeError> {
    if offset < state.floor || offset >= state.next {
        return Err(DecodeError(format!(
            "record {offset} lies outside floor {} and next {}",
            state.floor, state.next
        )));
    }
    Ok(())
}

pub(crate) fn check_entry_key(key: &str) -> Result<(), DecodeError> {
    if key.is_empty() || key.len() > MAX_ENTRY_KEY_BYTES {
        return Err(DecodeError(format!("an entry key of {} bytes", key.len())));
    }
    Ok(())
}

/// The counters a channel carries match what it holds.
pub(crate) fn check_counters(channel: &MemoryChannel) -> Result<(), DecodeError> {
    let state = channel.state;
    let (record_bytes, position_bytes, entry_bytes) = counted(channel);
    if record_bytes != state.record_bytes
        || channel.records.len() as u64 != state.record_count
        || position_bytes != state.position_bytes
        || channel.positions.len() as u64 != state.position_count
        || entry_bytes != state.entry_bytes
        || channel.entries.len() as u64 != state.entry_count
    {
        return Err(DecodeError(format!(
            "its counters say {} records of {} bytes, {} positions of {} bytes and {} entries of {} bytes, and it holds {} records of {record_bytes} bytes, {} positions of {position_bytes} bytes and {} entries of {entry_bytes} bytes",
            state.record_count,
            state.record_bytes,
            state.position_count,
            state.position_bytes,
            state.entry_count,
            state.entry_bytes,
            channel.records.len(),
            channel.positions.len(),
            channel.entries.len()
        )));
    }
    Ok(())
}

/// The manifest: which shutdown this was and which channels it wrote.
pub(crate) fn encode_manifest<'a>(
    generation: u64,
    channels: impl ExactSizeIterator<Item = &'a String>,
) -> Vec<u8> {
    let mut e = Encoder::default();
    e.u64(generation);
    e.u32(u32::try_from(channels.len()).unwrap_or(u32::MAX));
    for name in channels {
        e.str(name);
    }
    frame(KIND_MANIFEST, now_ms(), &e.buf)
}

fn decode_manifest(path: &Path, bytes: &[u8]) -> Result<(u64, Vec<String>), StoreError> {
    let body = unframe(path, bytes, KIND_MANIFEST)?.body;
    let parse = || -> Result<(u64, Vec<String>), DecodeError> {
        let mut d = Decoder::new(body);
        let generation = d.u64("the shutdown generation")?;
        let n = d.count("the channel count", 4)?;
        let mut names = Vec::with_capacity(n);
        for _ in 0..n {
            names.push(d.string("a channel name")?);
        }
        d.finish("the manifest")?;
        Ok((generation, names))
    };
    parse().map_err(|DecodeError(why)| StoreError::format(path, why))
}

/// What a snapshot directory held.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub(crate) channels: BTreeMap<String, MemoryChannel>,
    /// The newest shutdown any file came from.
    pub(crate) last_generation: u64,
    pub(crate) warnings: Vec<String>,
}

/// Reads a file whole, refusing one larger than `max_bytes` before
/// allocating for it.
fn read_bounded(disk: &dyn Disk, path: &Path, max_bytes: u64) -> Result<Vec<u8>, StoreError> {
    let file = disk
        .open(path, OpenMode::read_only())
        .map_err(|e| StoreError::io(path, "open the snapshot", e))?;
    let len = file
        .size_bytes()
        .map_err(|e| StoreError::io(path, "read the snapshot's size", e))?;
    let too_large = || {
        StoreError::format(
            path,
            format!(
                "{len} bytes is more than this provider's max_bytes lets a snapshot hold ({max_bytes} bytes): it was written under a larger bound or is damaged; raise max_bytes to load it"
            ),
        )
    };
    if len > max_bytes {
        return Err(too_large());
    }
    let len = usize::try_from(len).map_err(|_| too_large())?;
    let mut bytes = vec![0u8; len];
    file.read_exact_at(&mut bytes, 0)
        .map_err(|e| StoreError::io(path, "read the snapshot", e))?;
    Ok(bytes)
}

/// The channel files in a snapshot directory, by file name, sorted.
pub(crate) fn channel_files(disk: &dyn Disk, dir: &Path) -> Result<Vec<String>, StoreError> {
    let entries = disk
        .read_dir(dir)
        .map_err(|e| StoreError::io(dir, "list the snapshot directory", e))?;
    let mut names = Vec::new();
    for entry in entries {
        if let Some(name) = entry.file_name().and_then(|n| n.to_str()) {
            if name.ends_with(CHANNEL_SUFFIX) {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Reads, decodes and checks one channel file, and that it is the file
/// its channel's name gives.
pub(crate) fn read_channel_file(
    disk: &dyn Disk,
    dir: &Path,
    file_name: &str,
    max_file_bytes: u64,
) -> Result<(String, u64, MemoryChannel), StoreError> {
    let path = dir.join(file_name);
    let (name, generation, channel) =
        read_bounded(disk, &path, max_file_bytes).and_then(|b| decode_channel(&path, &b))?;
    if snapshot_file_name(&name).as_deref() != Ok(file_name) {
        return Err(StoreError::format(
            &path,
            format!("holds channel {name:?}, whose snapshot has another file name"),
        ));
    }
    Ok((name, generation, channel))
}

/// Loads every channel file in the directory. A channel file that fails
/// stops the start, and every failing file is named, not only the first:
/// an empty start would be indistinguishable from a fresh install and
/// would destroy the evidence. The manifest's findings are warnings: it
/// holds no records.
pub(crate) fn load(dir: &SnapshotDir, max_file_bytes: u64) -> Result<Loaded, StoreError> {
    let mut loaded = Loaded::default();
    let mut errors = Vec::new();
    let mut generations: BTreeMap<String, u64> = BTreeMap::new();
    let disk = dir.disk.as_ref();
    for file_name in channel_files(disk, &dir.path)? {
        match read_channel_file(disk, &dir.path, &file_name, max_file_bytes) {
            Ok((name, generation, channel)) => {
                loaded.last_generation = loaded.last_generation.max(generation);
                generations.insert(name.clone(), generation);
                loaded.channels.insert(name, channel);
            }
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => {}
        1 => return Err(errors.remove(0)),
        _ => return Err(StoreError::Several(errors)),
    }
    check_manifest(dir, &generations, &mut loaded);
    Ok(loaded)
}

fn check_manifest(dir: &SnapshotDir, generations: &BTreeMap<String, u64>, loaded: &mut Loaded) {
    let disk = dir.disk.as_ref();
    let path = dir.path.join(MANIFEST_FILE);
    if !disk.exists(&path).unwrap_or(false) {
        if !generations.is_empty() {
            loaded.warnings.push(format!(
                "{} is missing: which channels the last shutdown wrote cannot be checked",
                path.display()
            ));
        }
        return;
    }
    let manifest = read_bounded(disk, &path, 64 << 20).and_then(|b| decode_manifest(&path, &b));
    let (generation, listed) = match manifest {
        Ok(m) => m,
        Err(e) => {
            loaded
                .warnings
                .push(format!("{e}; the channel files are loaded without it"));
            return;
        }
    };
    loaded.last_generation = loaded.last_generation.max(generation);
    for name in &listed {
        match generations.get(name) {
            None => loaded.warnings.push(format!(
                "channel {name:?} was written by the last shutdown and its file is gone: its records are lost"
            )),
            Some(&g) if g < generation => loaded.warnings.push(format!(
                "channel {name:?} was not rewritten by the last shutdown: everything published to it after the shutdown before is lost"
            )),
            Some(&g) if g > generation => loaded.warnings.push(format!(
                "channel {name:?} is from a shutdown whose manifest was not written"
            )),
            Some(_) => {}
        }
    }
}

/// Writes `bytes` to `path` so that a failure at any point leaves either
/// the old file whole or the new one whole: a temporary file in the same
/// directory (a rename is atomic only within one filesystem), synced before
/// the rename (or a power cut could leave the name pointing at bytes still
/// in the page cache).
fn write_atomically(
    disk: &dyn Disk,
    dir: &Path,
    file_name: &str,
    bytes: &[u8],
) -> Result<(), StoreError> {
    let path = dir.join(file_name);
    let temp = dir.join(format!("{file_name}{TEMP_SUFFIX}"));
    let mode = OpenMode {
        write: true,
        create: true,
        truncate: true,
        permissions: 0o600,
        ..OpenMode::default()
    };
    let file = disk
        .open(&temp, mode)
        .map_err(|e| StoreError::io(&temp, "create the snapshot", e))?;
    file.write_all_at(bytes, 0)
        .map_err(|e| StoreError::io(&temp, "write the snapshot", e))?;
    file.sync_all()
        .map_err(|e| StoreError::io(&temp, "sync the snapshot", e))?;
    drop(file);
    disk.rename(&temp, &path)
        .map_err(|e| StoreError::io(&path, "rename the snapshot into place", e))
}

/// Syncs the directory, without which a renamed file's contents survive a
/// power cut and the entry naming them need not.
pub(crate) fn sync_dir(disk: &dyn Disk, dir: &Path) -> Result<(), StoreError> {
    disk.sync_dir(dir)
        .map_err(|e| StoreError::io(dir, "sync the snapshot directory", e))
}

/// Writes the manifest and makes it durable.
pub(crate) fn save_manifest<'a>(
    disk: &dyn Disk,
    dir: &Path,
    generation: u64,
    channels: impl ExactSizeIterator<Item = &'a String>,
) -> Result<(), StoreError> {
    write_atomically(
        disk,
        dir,
        MANIFEST_FILE,
        &encode_manifest(generation, channels),
    )?;
    sync_dir(disk, dir)
}

/// Writes one channel's file in place of any earlier one.
pub(crate) fn save_channel(
    disk: &dyn Disk,
    dir: &Path,
    name: &str,
    channel: &MemoryChannel,
    generation: u64,
) -> Result<(), StoreError> {
    let file = snapshot_file_name(name).map_err(StoreError::Invalid)?;
    write_atomically(disk, dir, &file, &encode_channel(name, channel, generation))
}

/// Writes the snapshot: the manifest first, made durable before any
/// channel, so a crash part-way leaves channel files the manifest can date;
/// then every channel. A channel that cannot be written keeps its last good
/// file, and every failure is reported, not only the first.
pub(crate) fn save(
    dir: &SnapshotDir,
    channels: &BTreeMap<String, MemoryChannel>,
    generation: u64,
) -> Result<(), StoreError> {
    let disk = dir.disk.as_ref();
    save_manifest(disk, &dir.path, generation, channels.keys())?;
    let mut errors = Vec::new();
    for (name, channel) in channels {
        if let Err(e) = save_channel(disk, &dir.path, name, channel, generation) {
            errors.push(e);
        }
    }
    if let Err(e) = sync_dir(disk, &dir.path) {
        errors.push(e);
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(StoreError::Several(errors)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::encoding::tests::{full_message, plain_message};
    use crate::store::types::ChannelState;

    fn sample_channel() -> MemoryChannel {
        let mut c = MemoryChannel::default();
        c.records.insert(3, full_message());
        c.records.insert(4, plain_message("a/b", b"xyz"));
        c.positions.insert("mqtt:one".into(), 4);
        c.entries.insert("a-key".into(), b"a value".to_vec());
        let (record_bytes, position_bytes, entry_bytes) = counted(&c);
        c.state = ChannelState {
            next: 5,
            floor: 3,
            record_bytes,
            record_count: 2,
            position_bytes,
            position_count: 1,
            entry_bytes,
            entry_count: 1,
        };
        c
    }

    /// A small fuzz: bodies mutated under a recomputed checksum reach the
    /// decoder beneath it, which must refuse or read them and never panic
    /// or allocate from a damaged count.
    #[test]
    fn mutated_bodies_never_panic_the_decoder() {
        let file = encode_channel("c", &sample_channel(), 3);
        let (name, generation, channel) = decode_channel(Path::new("/f"), &file).unwrap();
        assert_eq!((name.as_str(), generation), ("c", 3));
        assert_eq!(channel, sample_channel());
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let body = HEADER_BYTES..file.len() - CHECKSUM_BYTES;
        for round in 0..5_000 {
            let mut bytes = file.clone();
            if round % 5 == 0 {
                let keep = body.start + (next() as usize) % body.len();
                bytes.drain(keep..bytes.len() - CHECKSUM_BYTES);
            } else {
                for _ in 0..1 + next() % 4 {
                    let at = body.start + (next() as usize) % body.len();
                    bytes[at] = next() as u8;
                }
            }
            let split = bytes.len() - CHECKSUM_BYTES;
            let crc = crc32c(&bytes[..split]);
            bytes[split..].copy_from_slice(&crc.to_le_bytes());
            let _ = decode_channel(Path::new("/f"), &bytes);
        }
    }

    /// Offsets start at 1, so a file with a floor or a position at 0 was
    /// not written by this layout and is refused; one at the first offset
    /// loads.
    #[test]
    fn offsets_below_the_first_are_refused() {
        let path = Path::new("/f");
        let mut first = MemoryChannel::default();
        first.records.insert(1, plain_message("a", b"1"));
        first.positions.insert("mqtt:one".into(), 1);
        let (record_bytes, position_bytes, _) = counted(&first);
        first.state = ChannelState {
            next: 2,
            floor: 1,
            record_bytes,
            record_count: 1,
            position_bytes,
            position_count: 1,
            ..ChannelState::default()
        };
        let (_, _, loaded) = decode_channel(path, &encode_channel("c", &first, 1)).unwrap();
        assert_eq!(loaded, first);

        let mut at_zero = first.clone();
        at_zero.positions.insert("mqtt:one".into(), 0);
        let err = decode_channel(path, &encode_channel("c", &at_zero, 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is at 0, outside the first offset 1"), "{err}");

        let mut floor_zero = first.clone();
        floor_zero.state.floor = 0;
        let err = decode_channel(path, &encode_channel("c", &floor_zero, 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("below the first offset 1"), "{err}");
    }

    #[test]
    fn file_names_are_percent_encoded_and_bounded() {
        assert_eq!(snapshot_file_name("events").unwrap(), "events.snapshot");
        assert_eq!(snapshot_file_name("a.b").unwrap(), "a%2Eb.snapshot");
        assert_eq!(snapshot_file_name("..").unwrap(), "%2E%2E.snapshot");
        assert_eq!(snapshot_file_name("50%").unwrap(), "50%25.snapshot");
        assert_eq!(snapshot_file_name("a/b").unwrap(), "a%2Fb.snapshot");
        assert_eq!(snapshot_file_name("ñ").unwrap(), "%C3%B1.snapshot");
        assert_ne!(
            snapshot_file_name("a.b").unwrap(),
            snapshot_file_name("a%2Eb").unwrap()
        );
        assert!(snapshot_file_name(&"x".repeat(128)).is_ok());
        let dots = snapshot_file_name(&".".repeat(100)).unwrap_err();
        assert!(dots.contains("longer than a file name"), "{dots}");
        assert!(snapshot_file_name("").is_err());
    }

    #[test]
    fn a_frame_round_trips_and_names_every_fault() {
        let path = Path::new("/x/c.snapshot");
        let framed = frame(KIND_CHANNEL, 5, b"body");
        assert_eq!(unframe(path, &framed, KIND_CHANNEL).unwrap().body, b"body");
        let text = |bytes: &[u8], kind| unframe(path, bytes, kind).unwrap_err().to_string();
        assert!(text(&framed, KIND_MANIFEST).contains("holds a channel snapshot where a manifest"));
        assert!(text(&framed[..10], KIND_CHANNEL).contains("truncated"));
        let mut flipped = framed.clone();
        flipped[HEADER_BYTES] ^= 1;
        assert!(text(&flipped, KIND_CHANNEL).contains("damaged"));
        let mut magic = framed.clone();
        magic[0] = b'X';
        assert!(text(&magic, KIND_CHANNEL).contains("not a Sagüin snapshot"));
        let mut version = framed.clone();
        version[8] = 9;
        let v = text(&version, KIND_CHANNEL);
        assert!(
            v.contains("snapshot format 9") && v.contains("saguin "),
            "{v}"
        );
        for t in [
            text(&framed[..framed.len() - 1], KIND_CHANNEL),
            text(&flipped, KIND_CHANNEL),
        ] {
            assert!(t.contains("/x/c.snapshot"), "{t}");
        }
    }
}
