//! A simulated disk for tests: a [`Disk`] that remembers, for every file,
//! what is durable and what was only written, and for every directory
//! which entries are durable, so a test can cut the power at any moment
//! and restart on what a real device would have kept (`rfcs/0003`,
//! "The simulated disk").
//!
//! Everything is deterministic: a power cut takes a seed, and the same
//! seed over the same history keeps the same bytes.
//!
//! The model, rule by rule:
//! - A write lands in the page cache: reads see it at once, and it becomes
//!   durable at the file's next `sync_data`/`sync_all`. A write through a
//!   file opened with `sync_writes` (`O_DSYNC`) is durable when it
//!   returns. `direct` (`O_DIRECT`) skips the cache but not the device's
//!   own: its writes are no more durable than buffered ones, and its
//!   offsets and lengths must be whole 512-byte sectors (`EINVAL`).
//! - A directory entry (create, rename, unlink, mkdir) is durable only once
//!   its directory is synced with [`Disk::sync_dir`]. A file's data
//!   belongs to the file, not to its name.
//! - [`SimDisk::power_cut`] keeps the durable state, plus each unsynced
//!   write's sectors each kept or lost by the seed (so a later write may
//!   survive an earlier one: writes between two syncs are reordered). One
//!   sector in flight reads back as its old bytes, its new ones or garbage,
//!   the whole 512 bytes, as flash without power-loss protection does.
//!   The disk then looks as a restarted machine finds it: files opened
//!   before the cut fail with `EIO`, locks are gone.
//! - Faults a test chooses ([`Fault`]): `EIO` on a write or a sync,
//!   `ENOSPC`, a short write, or a sync that returns `Ok` and keeps
//!   nothing (the lying disk). A failed sync leaves the cached bytes
//!   readable but never durable, as Linux does ("fsyncgate").
//! - [`SimDisk::stop_after`] makes the Nth next operation the one in
//!   flight at the cut: it is recorded as unsynced, fails, and every
//!   operation after it fails with `EIO`, as if the machine had died.
//! - `flock`: one exclusive holder or many shared ones per file, released
//!   when the open file is dropped or the power is cut.

use super::disk::{Disk, DiskFile, Locked, OpenMode};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The device's sector: the unit a torn write is torn at.
pub const SECTOR_BYTES: u64 = 512;

/// SplitMix64: small, seedable, and the same on every platform.
#[derive(Clone, Debug)]
pub struct SimRng(u64);

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A value in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound
    }
    /// True with probability `num`/`den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// Which operations a [`Fault`] watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOn {
    /// `write_at` and `set_len`.
    Write,
    /// `sync_data`, `sync_all` and `sync_dir`.
    Sync,
}

/// What a fault does to the operation it hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`. A failed sync's writes stay readable and are never durable.
    Eio,
    /// `ENOSPC`; nothing is written.
    NoSpace,
    /// A write writes at most this many bytes and says so.
    Short(usize),
    /// The operation returns `Ok` and keeps nothing durable: a sync that
    /// syncs nothing, an `O_DSYNC` write left in the cache.
    Lie,
}

/// A fault a test plants: the `nth` (from 1) operation of kind `on` on a
/// path containing `path_contains` gets `kind`; with `sticky`, that one
/// and every matching one after it, until [`SimDisk::clear_faults`].
#[derive(Clone, Debug)]
pub struct Fault {
    pub path_contains: String,
    pub on: FaultOn,
    pub nth: u64,
    pub kind: FaultKind,
    pub sticky: bool,
    seen: u64,
}

impl Fault {
    pub fn new(path_contains: &str, on: FaultOn, nth: u64, kind: FaultKind) -> Fault {
        Fault {
            path_contains: path_contains.to_string(),
            on,
            nth: nth.max(1),
            kind,
            sticky: false,
            seen: 0,
        }
    }
    pub fn sticky(mut self) -> Fault {
        self.sticky = true;
        self
    }
}

/// How the sector in flight at a cut may read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TornSector {
    /// Old bytes or new ones, never others (a device with power-loss
    /// protection).
    OldOrNew,
    /// Old, new, or garbage over the whole sector (flash without it).
    OldNewOrGarbage,
}

/// What a power cut kept, for a failing seed's message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Unsynced sectors written back / dropped.
    pub kept_sectors: u64,
    pub lost_sectors: u64,
    /// The sector in flight, its file and offset, if it came back garbage.
    pub garbled: Option<(PathBuf, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Node {
    File(u64),
    Dir(u64),
}

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Debug)]
struct Pending {
    op: Op,
    /// Durable when it returned (`O_DSYNC`): kept by every cut.
    forced: bool,
}

#[derive(Default)]
struct FileInode {
    /// What the device holds as of the last successful sync.
    durable: Vec<u8>,
    /// Writes since, in the order they were made.
    pending: Vec<Pending>,
    /// What reads see.
    current: Vec<u8>,
    /// Open files holding a lock: (handle, shared).
    locks: Vec<(u64, bool)>,
}

#[derive(Default)]
struct DirInode {
    current: BTreeMap<OsString, Node>,
    durable: BTreeMap<OsString, Node>,
}

const ROOT: u64 = 0;

struct State {
    files: HashMap<u64, FileInode>,
    dirs: HashMap<u64, DirInode>,
    next_inode: u64,
    next_handle: u64,
    /// Bumped by every cut: files opened before it are dead.
    generation: u64,
    faults: Vec<Fault>,
    torn: TornSector,
    /// Operations left before the machine dies; `None`: it does not.
    stop_after: Option<u64>,
    stopped: bool,
    /// The last write, for the cut to tear: (inode, index in pending).
    in_flight: Option<(u64, usize)>,
    writes: u64,
    syncs: u64,
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated EIO: {what}"))
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

fn apply(data: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, bytes } => {
            let end = *offset as usize + bytes.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            data[*offset as usize..end].copy_from_slice(bytes);
        }
        Op::SetLen(len) => data.resize(*len as usize, 0),
    }
}

/// The names of `path`, the root's `/` and `.` dropped.
fn names(path: &Path) -> io::Result<Vec<OsString>> {
    let mut out = Vec::new();
    for part in path.components() {
        match part {
            Component::Normal(name) => out.push(name.to_os_string()),
            Component::RootDir | Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the simulated disk takes no '..' or prefix: {}",
                        path.display()
                    ),
                ))
            }
        }
    }
    Ok(out)
}

impl State {
    fn new() -> State {
        let mut dirs = HashMap::new();
        dirs.insert(ROOT, DirInode::default());
        State {
            files: HashMap::new(),
            dirs,
            next_inode: ROOT + 1,
            next_handle: 1,
            generation: 0,
            faults: Vec::new(),
            torn: TornSector::OldNewOrGarbage,
            stop_after: None,
            stopped: false,
            in_flight: None,
            writes: 0,
            syncs: 0,
        }
    }

    fn lookup(&self, path: &Path) -> io::Result<Option<Node>> {
        let mut node = Node::Dir(ROOT);
        for name in names(path)? {
            let Node::Dir(dir) = node else {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("not a directory on the way to {}", path.display()),
                ));
            };
            match self.dirs[&dir].current.get(&name) {
                Some(next) => node = *next,
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    /// The directory holding `path` and the last name, which must exist.
    fn parent_of(&self, path: &Path) -> io::Result<(u64, OsString)> {
        let mut parts = names(path)?;
        let name = parts
            .pop()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the root has no parent"))?;
        let parent: PathBuf = parts.iter().collect();
        match self.lookup(&parent)? {
            Some(Node::Dir(dir)) => Ok((dir, name)),
            Some(Node::File(_)) => Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is a file", parent.display()),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no directory {}", parent.display()),
            )),
        }
    }

    fn not_found(path: &Path) -> io::Error {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("simulated disk: no {}", path.display()),
        )
    }

    /// Counts one operation toward a planned stop: `Err` once stopped.
    /// `Ok(true)` when this operation is the one in flight.
    fn tick(&mut self) -> io::Result<bool> {
        if self.stopped {
            return Err(eio("the machine has stopped"));
        }
        match self.stop_after.as_mut() {
            Some(0) | None => Ok(false),
            Some(left) => {
                *left -= 1;
                if *left == 0 {
                    self.stopped = true;
                    Ok(true)
                } else {
                    Ok(false)
                }
            }
        }
    }

    /// The fault planted for this operation, if one fires.
    fn fault(&mut self, path: &str, on: FaultOn) -> Option<FaultKind> {
        let mut fired = None;
        self.faults.retain_mut(|fault| {
            if fault.on != on || !path.contains(&fault.path_contains) {
                return true;
            }
            fault.seen += 1;
            if fault.seen >= fault.nth && fired.is_none() {
                fired = Some(fault.kind);
                return fault.sticky;
            }
            true
        });
        fired
    }

    fn path_of(&self, inode: u64) -> PathBuf {
        fn walk(state: &State, dir: u64, at: PathBuf, inode: u64) -> Option<PathBuf> {
            for (name, node) in &state.dirs[&dir].current {
                match node {
                    Node::File(ino) if *ino == inode => return Some(at.join(name)),
                    Node::Dir(sub) => {
                        if let Some(found) = walk(state, *sub, at.join(name), inode) {
                            return Some(found);
                        }
                    }
                    _ => {}
                }
            }
            None
        }
        walk(self, ROOT, PathBuf::from("/"), inode).unwrap_or_else(|| PathBuf::from("(unlinked)"))
    }

    fn cut(&mut self, seed: u64) -> CutReport {
        let mut rng = SimRng::new(seed);
        let mut report = CutReport::default();
        // The namespace: durable entries reachable from the root.
        let mut reachable_files = Vec::new();
        let mut stack = vec![ROOT];
        let mut reachable_dirs = Vec::new();
        while let Some(dir) = stack.pop() {
            reachable_dirs.push(dir);
            let entries = self.dirs[&dir].durable.clone();
            for node in entries.values() {
                match node {
                    Node::Dir(sub) if self.dirs.contains_key(sub) => stack.push(*sub),
                    Node::File(ino) => reachable_files.push(*ino),
                    _ => {}
                }
            }
            let dir = self.dirs.get_mut(&dir).expect("a reachable directory");
            dir.current = dir.durable.clone();
        }
        self.dirs.retain(|ino, _| reachable_dirs.contains(ino));
        let in_flight = self.in_flight.take();
        let mut inodes: Vec<u64> = self.files.keys().copied().collect();
        inodes.sort_unstable();
        let torn = self.torn;
        let mut garbled = None;
        for ino in inodes {
            let path = self.path_of(ino);
            let file = self.files.get_mut(&ino).expect("listed");
            let mut data = std::mem::take(&mut file.durable);
            for (index, pending) in std::mem::take(&mut file.pending).into_iter().enumerate() {
                let tearing = in_flight == Some((ino, index)) && !pending.forced;
                let Op::Write { offset, bytes } = &pending.op else {
                    if pending.forced || rng.chance(1, 2) {
                        apply(&mut data, &pending.op);
                    }
                    continue;
                };
                // Sector by sector, each kept or lost by the seed.
                let end = offset + bytes.len() as u64;
                let mut at = *offset;
                let tear_at = if tearing && end > at {
                    Some(rng.below((end - at).div_ceil(SECTOR_BYTES) + 1))
                } else {
                    None
                };
                let mut sector_index = 0;
                while at < end {
                    let next = ((at / SECTOR_BYTES) + 1) * SECTOR_BYTES;
                    let piece_end = next.min(end);
                    let piece = Op::Write {
                        offset: at,
                        bytes: bytes[(at - offset) as usize..(piece_end - offset) as usize]
                            .to_vec(),
                    };
                    let keep = match tear_at {
                        // The write in flight reached the device in order:
                        // sectors before the tear, then the torn one.
                        Some(tear) if sector_index < tear => true,
                        Some(tear) if sector_index == tear => {
                            match rng.below(3) {
                                0 => false,
                                1 => true,
                                _ if torn == TornSector::OldNewOrGarbage => {
                                    let start = at / SECTOR_BYTES * SECTOR_BYTES;
                                    // The whole sector, as far as the file reaches.
                                    let stop = (start + SECTOR_BYTES)
                                        .min((data.len() as u64).max(piece_end));
                                    if data.len() < stop as usize {
                                        data.resize(stop as usize, 0);
                                    }
                                    for byte in &mut data[start as usize..stop as usize] {
                                        *byte = rng.next_u64() as u8;
                                    }
                                    garbled = Some((path.clone(), start));
                                    sector_index += 1;
                                    at = piece_end;
                                    report.lost_sectors += 1;
                                    continue;
                                }
                                _ => true,
                            }
                        }
                        Some(_) => false,
                        None => pending.forced || rng.chance(1, 2),
                    };
                    if keep {
                        apply(&mut data, &piece);
                        report.kept_sectors += 1;
                    } else {
                        report.lost_sectors += 1;
                    }
                    sector_index += 1;
                    at = piece_end;
                }
            }
            file.current = data.clone();
            file.durable = data;
            file.locks.clear();
        }
        self.files.retain(|ino, _| reachable_files.contains(ino));
        self.generation += 1;
        self.faults.clear();
        self.stop_after = None;
        self.stopped = false;
        report.garbled = garbled;
        report
    }
}

/// The simulated disk. Clones share one device.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

impl Default for SimDisk {
    fn default() -> Self {
        SimDisk::new()
    }
}

impl SimDisk {
    /// An empty disk holding only its root.
    pub fn new() -> SimDisk {
        SimDisk {
            state: Arc::new(Mutex::new(State::new())),
        }
    }

    /// The handle the store takes.
    pub fn shared(&self) -> Arc<dyn Disk> {
        Arc::new(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How the sector in flight may read back at a cut.
    pub fn set_torn_sector(&self, torn: TornSector) {
        self.lock().torn = torn;
    }

    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The `n`th next operation (from 1) is the one in flight when the
    /// machine dies; it and every one after fail with `EIO`.
    pub fn stop_after(&self, n: u64) {
        let mut state = self.lock();
        state.stop_after = Some(n.max(1));
        state.stopped = false;
    }

    /// Whether a planned stop has come.
    pub fn stopped(&self) -> bool {
        self.lock().stopped
    }

    /// Writes and syncs so far, for choosing where to stop.
    pub fn operations(&self) -> (u64, u64) {
        let state = self.lock();
        (state.writes, state.syncs)
    }

    /// Cuts the power: what survives is the durable state plus the
    /// unsynced sectors `seed` keeps; the disk is then the one a restart
    /// finds.
    pub fn power_cut(&self, seed: u64) -> CutReport {
        self.lock().cut(seed)
    }

    /// The bytes a read of `path` sees now, for tests' checks.
    pub fn contents(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.lock();
        match state.lookup(path)? {
            Some(Node::File(ino)) => Ok(state.files[&ino].current.clone()),
            _ => Err(State::not_found(path)),
        }
    }
}

struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    handle: u64,
    generation: u64,
    mode: OpenMode,
    path: String,
}

impl SimFile {
    fn lock(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.generation != self.generation {
            return Err(eio("the file was opened before a power cut"));
        }
        Ok(state)
    }

    fn write_op(&self, op: Op) -> io::Result<usize> {
        let mut state = self.lock()?;
        if !self.mode.write {
            return Err(io::Error::from_raw_os_error(9)); // EBADF
        }
        let in_flight = state.tick()?;
        state.writes += 1;
        let mut op = op;
        let mut forced = self.mode.sync_writes;
        let fault = if in_flight {
            None
        } else {
            state.fault(&self.path, FaultOn::Write)
        };
        let written = match (&mut op, fault) {
            (_, Some(FaultKind::Eio)) => return Err(eio(&self.path)),
            (_, Some(FaultKind::NoSpace)) => return Err(enospc()),
            (Op::Write { bytes, .. }, Some(FaultKind::Short(most))) => {
                bytes.truncate(most.max(1).min(bytes.len()));
                bytes.len()
            }
            (_, Some(FaultKind::Lie)) => {
                forced = false;
                op_len(&op)
            }
            _ => op_len(&op),
        };
        if in_flight {
            forced = false;
        }
        let file = state
            .files
            .get_mut(&self.inode)
            .expect("an open file's inode");
        apply(&mut file.current, &op);
        file.pending.push(Pending { op, forced });
        let index = file.pending.len() - 1;
        state.in_flight = Some((self.inode, index));
        if in_flight {
            return Err(eio("the machine stopped during this write"));
        }
        Ok(written)
    }

    fn sync(&self) -> io::Result<()> {
        let mut state = self.lock()?;
        if state.tick()? {
            return Err(eio("the machine stopped during this sync"));
        }
        state.syncs += 1;
        if state.in_flight.is_some_and(|(ino, _)| ino == self.inode) {
            state.in_flight = None;
        }
        let fault = state.fault(&self.path, FaultOn::Sync);
        let file = state
            .files
            .get_mut(&self.inode)
            .expect("an open file's inode");
        match fault {
            Some(FaultKind::Lie) => {}
            Some(FaultKind::Eio) | Some(FaultKind::NoSpace) => {
                // The cached bytes stay readable, and the device never
                // gets them: the next sync succeeds without them.
                file.pending.retain(|p| p.forced);
                for pending in std::mem::take(&mut file.pending) {
                    apply(&mut file.durable, &pending.op);
                }
                return Err(eio(&self.path));
            }
            _ => {
                for pending in std::mem::take(&mut file.pending) {
                    apply(&mut file.durable, &pending.op);
                }
            }
        }
        Ok(())
    }
}

fn op_len(op: &Op) -> usize {
    match op {
        Op::Write { bytes, .. } => bytes.len(),
        Op::SetLen(_) => 0,
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        if let Ok(mut state) = self.lock() {
            if let Some(file) = state.files.get_mut(&self.inode) {
                file.locks.retain(|(handle, _)| *handle != self.handle);
            }
        }
    }
}

impl DiskFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let state = self.lock()?;
        if state.stopped {
            return Err(eio("the machine has stopped"));
        }
        let data = &state.files[&self.inode].current;
        if offset >= data.len() as u64 {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - offset as usize);
        buf[..n].copy_from_slice(&data[offset as usize..offset as usize + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        if self.mode.direct
            && (!offset.is_multiple_of(SECTOR_BYTES)
                || !(buf.len() as u64).is_multiple_of(SECTOR_BYTES))
        {
            return Err(io::Error::from_raw_os_error(22)); // EINVAL
        }
        self.write_op(Op::Write {
            offset,
            bytes: buf.to_vec(),
        })
    }

    fn size_bytes(&self) -> io::Result<u64> {
        let state = self.lock()?;
        Ok(state.files[&self.inode].current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.write_op(Op::SetLen(len)).map(|_| ())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync()
    }

    fn try_lock(&self, shared: bool) -> io::Result<Locked> {
        let mut state = self.lock()?;
        let file = state
            .files
            .get_mut(&self.inode)
            .expect("an open file's inode");
        let others = file.locks.iter().filter(|(h, _)| *h != self.handle);
        let free = if shared {
            others.clone().all(|(_, s)| *s)
        } else {
            others.clone().next().is_none()
        };
        if !free {
            return Ok(Locked::HeldElsewhere);
        }
        file.locks.retain(|(h, _)| *h != self.handle);
        file.locks.push((self.handle, shared));
        Ok(Locked::Taken)
    }
}

impl Disk for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.lock();
        if state.stopped {
            return Err(eio("the machine has stopped"));
        }
        let inode = match state.lookup(path)? {
            Some(Node::Dir(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("{} is a directory", path.display()),
                ))
            }
            Some(Node::File(_)) if mode.create_new => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists", path.display()),
                ))
            }
            Some(Node::File(ino)) => ino,
            None if mode.create || mode.create_new => {
                if state.tick()? {
                    return Err(eio("the machine stopped during this create"));
                }
                let (dir, name) = state.parent_of(path)?;
                let ino = state.next_inode;
                state.next_inode += 1;
                state.files.insert(ino, FileInode::default());
                state
                    .dirs
                    .get_mut(&dir)
                    .expect("a looked-up directory")
                    .current
                    .insert(name, Node::File(ino));
                ino
            }
            None => return Err(State::not_found(path)),
        };
        let handle = state.next_handle;
        state.next_handle += 1;
        let file = SimFile {
            state: self.state.clone(),
            inode,
            handle,
            generation: state.generation,
            mode,
            path: path.to_string_lossy().into_owned(),
        };
        if mode.truncate && mode.write {
            drop(state);
            file.set_len(0)?;
        }
        Ok(Box::new(file))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let (from_dir, from_name) = state.parent_of(from)?;
        let (to_dir, to_name) = state.parent_of(to)?;
        let node = state.dirs[&from_dir]
            .current
            .get(&from_name)
            .copied()
            .ok_or_else(|| State::not_found(from))?;
        if state.tick()? {
            return Err(eio("the machine stopped during this rename"));
        }
        state
            .dirs
            .get_mut(&from_dir)
            .expect("found")
            .current
            .remove(&from_name);
        state
            .dirs
            .get_mut(&to_dir)
            .expect("found")
            .current
            .insert(to_name, node);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let (dir, name) = state.parent_of(path)?;
        match state.dirs[&dir].current.get(&name) {
            Some(Node::File(_)) => {}
            Some(Node::Dir(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("{} is a directory", path.display()),
                ))
            }
            None => return Err(State::not_found(path)),
        }
        if state.tick()? {
            return Err(eio("the machine stopped during this unlink"));
        }
        state
            .dirs
            .get_mut(&dir)
            .expect("found")
            .current
            .remove(&name);
        Ok(())
    }

    fn create_dir_all(&self, path: &Path, _permissions: u32) -> io::Result<()> {
        let mut state = self.lock();
        let mut dir = ROOT;
        for name in names(path)? {
            let next = state.dirs[&dir].current.get(&name).copied();
            dir = match next {
                Some(Node::Dir(sub)) => sub,
                Some(Node::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!("a file is in the way of {}", path.display()),
                    ))
                }
                None => {
                    if state.tick()? {
                        return Err(eio("the machine stopped during this mkdir"));
                    }
                    let sub = state.next_inode;
                    state.next_inode += 1;
                    state.dirs.insert(sub, DirInode::default());
                    state
                        .dirs
                        .get_mut(&dir)
                        .expect("walked")
                        .current
                        .insert(name, Node::Dir(sub));
                    sub
                }
            };
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let (dir, name) = state.parent_of(path)?;
        if !state.dirs[&dir].current.contains_key(&name) {
            return Err(State::not_found(path));
        }
        if state.tick()? {
            return Err(eio("the machine stopped during this removal"));
        }
        state
            .dirs
            .get_mut(&dir)
            .expect("found")
            .current
            .remove(&name);
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        let Some(Node::Dir(dir)) = state.lookup(path)? else {
            return Err(State::not_found(path));
        };
        if state.tick()? {
            return Err(eio("the machine stopped during this directory sync"));
        }
        state.syncs += 1;
        match state.fault(&path.to_string_lossy(), FaultOn::Sync) {
            Some(FaultKind::Lie) => Ok(()),
            Some(_) => Err(eio(&path.to_string_lossy())),
            None => {
                let entries = state.dirs.get_mut(&dir).expect("found");
                entries.durable = entries.current.clone();
                Ok(())
            }
        }
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let state = self.lock();
        let Some(Node::Dir(dir)) = state.lookup(path)? else {
            return Err(State::not_found(path));
        };
        // BTreeMap order is the sorted order.
        Ok(state.dirs[&dir]
            .current
            .keys()
            .map(|name| path.join(name))
            .collect())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.lock().lookup(path)?.is_some())
    }

    fn file_len(&self, path: &Path) -> io::Result<u64> {
        let state = self.lock();
        match state.lookup(path)? {
            Some(Node::File(ino)) => Ok(state.files[&ino].current.len() as u64),
            Some(Node::Dir(_)) => Ok(0),
            None => Err(State::not_found(path)),
        }
    }
}

/// A whole number from the environment variable `name`, for a simulation's
/// seed or seed count; a value that is not one stops the test naming it.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: give a whole number"))
    })
}

/// Runs `run` for every seed in `seeds`, split over `threads` threads by
/// seed number, so a seed runs on the same thread whatever the count.
pub fn on_threads(seeds: std::ops::Range<u64>, threads: u64, run: impl Fn(u64) + Sync) {
    std::thread::scope(|s| {
        for t in 0..threads {
            let (seeds, run) = (seeds.clone(), &run);
            s.spawn(move || seeds.filter(|n| n % threads == t).for_each(run));
        }
    });
}
