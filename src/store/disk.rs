//! The one seam through which the store touches a disk: every file it
//! writes (journal, redb file, snapshots, lock files, backups and
//! conversions) and every directory operation that makes a name durable.
//!
//! Production uses [`RealDisk`], a thin pass-through to the operating
//! system. Tests put a simulated disk under the same trait, one that
//! remembers what was synced and what was only written, so a power cut
//! can be played at any moment (`rfcs/0003`).
//!
//! The trait is object-safe and taken as `Arc<dyn Disk>`: one dynamic call
//! per system call costs nothing beside the system call itself.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How a file is opened. Fields mirror `open(2)`'s flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenMode {
    pub read: bool,
    pub write: bool,
    /// `O_CREAT`: create the file if it is missing.
    pub create: bool,
    /// `O_CREAT | O_EXCL`: fail if the file exists.
    pub create_new: bool,
    /// `O_TRUNC`.
    pub truncate: bool,
    /// Permission bits for a file this open creates.
    pub permissions: u32,
    /// `O_DSYNC`: each write returns once its data is on the device.
    pub sync_writes: bool,
    /// `O_DIRECT` where the file system allows it; silently buffered
    /// where it does not (tmpfs).
    pub direct: bool,
}

impl OpenMode {
    /// Read only, of an existing file.
    pub fn read_only() -> OpenMode {
        OpenMode {
            read: true,
            ..OpenMode::default()
        }
    }

    /// Read and write an existing file.
    pub fn read_write() -> OpenMode {
        OpenMode {
            read: true,
            write: true,
            ..OpenMode::default()
        }
    }
}

/// What [`DiskFile::try_lock`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locked {
    /// The lock is ours until the file is dropped.
    Taken,
    /// Another open file (another process) holds it.
    HeldElsewhere,
}

/// One open file. Positioned reads and writes only: no cursor, so a file
/// can be shared between threads without a lock around a seek.
pub trait DiskFile: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at or past the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes up to `buf.len()` bytes at `offset` and says how many it
    /// wrote; a short count is not an error (see [`DiskFile::write_all_at`]).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// The file's size.
    fn size_bytes(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fdatasync(2)`: the data written so far, and the size, are durable.
    fn sync_data(&self) -> io::Result<()>;
    /// `fsync(2)`: as [`DiskFile::sync_data`], and the file's metadata.
    fn sync_all(&self) -> io::Result<()>;
    /// An exclusive `flock` (shared when `shared`), not waiting.
    fn try_lock(&self, shared: bool) -> io::Result<Locked>;

    /// Reads exactly `buf.len()` bytes at `offset`, or fails with
    /// `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`, going on after short writes.
    fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A file system: opening files and the directory operations. A new name
/// (create, rename, unlink, mkdir) is durable only once its directory is
/// synced with [`Disk::sync_dir`], as on Linux.
pub trait Disk: Send + Sync {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>>;
    /// `rename(2)`: atomic, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// `mkdir -p`, each directory it creates with `permissions`.
    fn create_dir_all(&self, path: &Path, permissions: u32) -> io::Result<()>;
    fn remove_dir_all(&self, path: &Path) -> io::Result<()>;
    /// `fsync(2)` on the directory: its entries as they are now are durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// The names in a directory, sorted.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Whether anything is at `path` (`Ok(false)` when nothing is).
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// The size of the file at `path`.
    fn file_len(&self, path: &Path) -> io::Result<u64>;
}

/// The directory holding `path`, `.` for a bare file name.
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealDisk;

impl RealDisk {
    /// The shared handle production code passes around.
    pub fn shared() -> Arc<dyn Disk> {
        Arc::new(RealDisk)
    }
}

struct RealFile(std::fs::File);

impl DiskFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::write_at(&self.0, buf, offset)
    }
    fn size_bytes(&self) -> io::Result<u64> {
        self.0.metadata().map(|m| m.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn try_lock(&self, shared: bool) -> io::Result<Locked> {
        let tried = if shared {
            self.0.try_lock_shared()
        } else {
            self.0.try_lock()
        };
        match tried {
            Ok(()) => Ok(Locked::Taken),
            Err(std::fs::TryLockError::WouldBlock) => Ok(Locked::HeldElsewhere),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// `O_DSYNC` where its value is known (rustix's linux_raw `DSYNC` is
/// `O_SYNC`, which would sync the timestamps too); `O_SYNC` elsewhere.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "arm",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
const O_DSYNC: i32 = 0o10000;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "x86",
    target_arch = "arm",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
const O_DSYNC: i32 = rustix::fs::OFlags::SYNC.bits() as i32;

fn os_open(path: &Path, mode: OpenMode, direct: bool) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = 0;
    if mode.sync_writes {
        flags |= O_DSYNC;
    }
    if direct {
        flags |= rustix::fs::OFlags::DIRECT.bits() as i32;
    }
    let mut options = std::fs::OpenOptions::new();
    options
        .read(mode.read)
        .write(mode.write)
        .create(mode.create)
        .create_new(mode.create_new)
        .truncate(mode.truncate)
        .custom_flags(flags);
    if mode.create || mode.create_new {
        options.mode(mode.permissions);
    }
    options.open(path)
}

impl Disk for RealDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let file = if mode.direct {
            // Direct I/O is refused by some file systems (tmpfs): the same
            // writes then go through the page cache.
            os_open(path, mode, true).or_else(|_| os_open(path, mode, false))?
        } else {
            os_open(path, mode, false)?
        };
        Ok(Box::new(RealFile(file)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn create_dir_all(&self, path: &Path, permissions: u32) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(permissions)
            .create(path)
    }
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::File::open(path)?.sync_all()
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = std::fs::read_dir(path)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<io::Result<Vec<_>>>()?;
        names.sort();
        Ok(names)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        std::fs::symlink_metadata(path).map(|_| true).or_else(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Ok(false)
            } else {
                Err(e)
            }
        })
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        std::fs::metadata(path).map(|m| m.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("saguin-disk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn real_disk_writes_reads_renames_and_locks() {
        let dir = temp_dir("real");
        let disk = RealDisk::shared();
        let path = dir.join("a");
        let mode = OpenMode {
            create_new: true,
            permissions: 0o600,
            sync_writes: true,
            direct: false,
            ..OpenMode::read_write()
        };
        let file = disk.open(&path, mode).unwrap();
        file.write_all_at(b"hello", 3).unwrap();
        file.sync_data().unwrap();
        assert_eq!(file.size_bytes().unwrap(), 8);
        let mut buf = [0u8; 8];
        file.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"\0\0\0hello");
        assert!(
            disk.open(&path, mode).is_err(),
            "create_new refuses a file that exists"
        );
        assert_eq!(file.try_lock(false).unwrap(), Locked::Taken);
        let second = disk.open(&path, OpenMode::read_only()).unwrap();
        assert_eq!(second.try_lock(true).unwrap(), Locked::HeldElsewhere);
        disk.rename(&path, &dir.join("b")).unwrap();
        disk.sync_dir(&dir).unwrap();
        assert_eq!(disk.read_dir(&dir).unwrap(), vec![dir.join("b")]);
        assert!(!disk.exists(&path).unwrap());
        assert_eq!(disk.file_len(&dir.join("b")).unwrap(), 8);
        disk.remove_dir_all(&dir).unwrap();
    }

    /// The flags the kernel holds for `file` (`/proc/self/fdinfo`).
    fn kernel_flags(file: &std::fs::File) -> u32 {
        use std::os::fd::AsRawFd;
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()))
            .expect("read fdinfo");
        let line = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .expect("a flags line");
        u32::from_str_radix(line.trim(), 8).expect("octal flags")
    }

    /// `sync_writes` is `O_DSYNC` (each write its own data sync, as the
    /// journal relies on) and never `O_SYNC`, which would sync timestamps.
    #[test]
    fn sync_writes_opens_with_o_dsync_and_not_o_sync() {
        const KERNEL_O_DSYNC: u32 = 0o10000;
        const O_SYNC_ONLY_BIT: u32 = 0o4000000;
        let dir = temp_dir("flags");
        let path = dir.join("j");
        let mode = OpenMode {
            create: true,
            permissions: 0o600,
            sync_writes: true,
            ..OpenMode::read_write()
        };
        let file = os_open(&path, mode, false).expect("open");
        let flags = kernel_flags(&file);
        assert_ne!(
            flags & KERNEL_O_DSYNC,
            0,
            "writes must be synced by the write"
        );
        assert_eq!(
            flags & O_SYNC_ONLY_BIT,
            0,
            "O_SYNC would sync timestamps too"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
