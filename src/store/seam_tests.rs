//! The disk seam carries what it should: a disk that records every call,
//! put under each provider and tool, sees the files they write, their
//! syncs and their directory operations.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::conformance::{append, msg, TempDir};
use super::disk::{Disk, DiskFile, Locked, OpenMode, RealDisk};
use super::*;

const MAX_BYTES: u64 = 64 << 20;

/// The operating system's disk, noting each call as `"<call> <file name>"`.
#[derive(Clone, Default)]
struct Recording {
    calls: Arc<Mutex<Vec<String>>>,
}

impl Recording {
    fn note(&self, call: &str, path: &Path) {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        self.calls.lock().unwrap().push(format!("{call} {name}"));
    }

    fn saw(&self, call: &str) -> bool {
        self.calls.lock().unwrap().iter().any(|c| c == call)
    }

    fn disk(&self) -> Arc<dyn Disk> {
        Arc::new(self.clone())
    }
}

struct RecordingFile {
    inner: Box<dyn DiskFile>,
    path: PathBuf,
    log: Recording,
}

impl DiskFile for RecordingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.log.note("read", &self.path);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.log.note("write", &self.path);
        self.inner.write_at(buf, offset)
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.inner.size_bytes()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.log.note("set_len", &self.path);
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.log.note("sync_data", &self.path);
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.log.note("sync_all", &self.path);
        self.inner.sync_all()
    }
    fn try_lock(&self, shared: bool) -> io::Result<Locked> {
        self.log
            .note(if shared { "lock_shared" } else { "lock" }, &self.path);
        self.inner.try_lock(shared)
    }
}

impl Disk for Recording {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        self.note("open", path);
        if mode.sync_writes {
            self.note("open_dsync", path);
        }
        Ok(Box::new(RecordingFile {
            inner: RealDisk.open(path, mode)?,
            path: path.to_path_buf(),
            log: self.clone(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.note("rename", to);
        RealDisk.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.note("remove_file", path);
        RealDisk.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path, permissions: u32) -> io::Result<()> {
        self.note("create_dir_all", path);
        RealDisk.create_dir_all(path, permissions)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.note("remove_dir_all", path);
        RealDisk.remove_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.note("sync_dir", path);
        RealDisk.sync_dir(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        self.note("read_dir", path);
        RealDisk.read_dir(path)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        RealDisk.exists(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        RealDisk.file_len(path)
    }
}

fn dir_name(dir: &TempDir) -> String {
    dir.path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_redb_file_its_lock_and_its_directory_go_through_the_disk() {
    let dir = TempDir::new("seam-redb");
    let log = Recording::default();
    let file = dir.path().join("p.redb");
    let mut p = RedbProvider::open_on(log.disk(), "p", &file, MAX_BYTES, 0).expect("open");
    p.commit(&[append("c", msg("t", b"one", 1))])
        .expect("commit");
    p.checkpoint().expect("checkpoint");
    for call in [
        "open p.redb.lock",
        "lock p.redb.lock",
        "open p.redb",
        "write p.redb",
        "read p.redb",
        "sync_data p.redb",
        &format!("sync_dir {}", dir_name(&dir)),
        "open p.redb.journal-new",
        "write p.redb.journal-new",
        "sync_all p.redb.journal-new",
        "rename p.redb.journal",
        "open_dsync p.redb.journal",
        "write p.redb.journal",
        "open_dsync p.redb.header",
        "write p.redb.header",
    ] {
        assert!(log.saw(call), "{call} missing from {:?}", log.calls);
    }
    Box::new(p).close().expect("close");
    let again = RedbProvider::open_on(log.disk(), "p", &file, MAX_BYTES, 0).expect("reopen");
    assert_eq!(again.channel("c").next, FIRST_OFFSET + 1);
    assert!(
        log.saw("read p.redb.journal"),
        "the reopen reads the journal"
    );
}

#[test]
fn a_memory_snapshot_is_written_renamed_and_synced_through_the_disk() {
    let dir = TempDir::new("seam-memory");
    let log = Recording::default();
    let mut p =
        MemoryProvider::open_on(log.disk(), "m", MAX_BYTES, 0, Some(dir.path())).expect("open");
    p.commit(&[append("c", msg("t", b"one", 1))])
        .expect("commit");
    Box::new(p).close().expect("close");
    let file = snapshot_file_name("c").unwrap();
    for call in [
        "lock saguin.lock".to_string(),
        format!("write {file}.tmp"),
        format!("sync_all {file}.tmp"),
        format!("rename {file}"),
        "rename saguin.manifest".to_string(),
        format!("sync_dir {}", dir_name(&dir)),
    ] {
        assert!(log.saw(&call), "{call} missing from {:?}", log.calls);
    }
    let reload = Recording::default();
    let again =
        MemoryProvider::open_on(reload.disk(), "m", MAX_BYTES, 0, Some(dir.path())).expect("load");
    assert_eq!(again.channel("c").next, FIRST_OFFSET + 1);
    assert!(reload.saw(&format!("read {file}")));
}

#[test]
fn a_backup_and_a_conversion_write_through_the_providers_disk() {
    let dir = TempDir::new("seam-copies");
    let log = Recording::default();
    let file = dir.path().join("p.redb");
    let mut p = RedbProvider::open_on(log.disk(), "p", &file, MAX_BYTES, 0).expect("open");
    p.commit(&[append("c", msg("t", b"one", 1))])
        .expect("commit");
    let view = p.backup_view().expect("a view").expect("taken");
    take_backup(view, &dir.path().join("copy.redb")).expect("backup");
    for call in ["open copy.redb", "write copy.redb", "sync_data copy.redb"] {
        assert!(log.saw(call), "{call} missing from {:?}", log.calls);
    }
    Box::new(p).close().expect("close");

    let snapshots = dir.path().join("snaps");
    let converted = convert::redb_to_snapshots_on(log.disk(), &file, &snapshots).expect("convert");
    assert_eq!(converted.records, 1);
    let channel_file = snapshot_file_name("c").unwrap();
    for call in [
        "create_dir_all snaps".to_string(),
        format!("rename {channel_file}"),
        "sync_dir snaps".to_string(),
    ] {
        assert!(log.saw(&call), "{call} missing from {:?}", log.calls);
    }
    let back = dir.path().join("back.redb");
    convert::snapshots_to_redb_on(log.disk(), &snapshots, &back).expect("convert back");
    assert!(log.saw("write back.redb") && log.saw("lock back.redb.lock"));
}

/// A redb header sector a power cut turned to garbage is put back from
/// `<file_path>.header`, on the real disk as on the simulated one.
#[test]
fn a_garbled_redb_header_sector_is_put_back_from_its_copy() {
    use std::os::unix::fs::FileExt;
    let dir = TempDir::new("seam-header");
    let file = dir.path().join("p.redb");
    let mut p = RedbProvider::open("p", &file, MAX_BYTES, 0).expect("open");
    p.commit(&[append("c", msg("t", b"one", 1))])
        .expect("commit");
    Box::new(p).close().expect("close");
    let raw = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    raw.write_all_at(&[0xa5u8; 512], 0).unwrap();
    drop(raw);
    let again = RedbProvider::open("p", &file, MAX_BYTES, 0).expect("reopened through the copy");
    assert_eq!(again.channel("c").next, FIRST_OFFSET + 1);
}
