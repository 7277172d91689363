//! A redb file opened through the disk seam: redb's `StorageBackend` over
//! a [`DiskFile`], so every byte redb reads, writes and syncs passes the
//! same trait the journal and the snapshots use.
//!
//! The backend takes no locks of its own (redb then runs in its default
//! exclusive-writer mode): the provider's lock file, taken before the file
//! is opened, is what keeps a second broker out.
//!
//! A provider's own file also keeps its header sector after each sync in
//! `redb_header.rs`'s copy, and is opened with [`create_provider_db`],
//! which puts the copy back over a header a power cut garbled.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ::redb::{Builder, Database, DatabaseError, StorageBackend, StorageError};

use super::disk::{Disk, DiskFile, OpenMode};
use super::error::{db_error, StoreError};
use super::redb_header::{looks_like_redb_header, HeaderCopy, SECTOR_BYTES};

/// redb's storage: one open file.
pub(crate) struct DiskBackend {
    file: Box<dyn DiskFile>,
    failures: Arc<IoFailures>,
    /// Where the header sector goes after each sync: a provider's own file.
    header_copy: Option<Arc<HeaderCopy>>,
}

impl DiskBackend {
    /// Notes what failed, for the provider to tell a failed sync from a
    /// full device: redb keeps only the message, and after any failed
    /// operation of its file refuses every later one.
    fn noted<T>(&self, action: &'static str, result: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &result {
            let mut last = self.failures.0.lock().unwrap_or_else(|p| p.into_inner());
            *last = Some(IoFailure {
                action,
                no_space: e.kind() == io::ErrorKind::StorageFull,
                cause: e.to_string(),
            });
        }
        result
    }
}

/// The file's first sector; `None` while the file is shorter.
fn header_sector(file: &dyn DiskFile) -> io::Result<Option<[u8; SECTOR_BYTES]>> {
    let mut sector = [0u8; SECTOR_BYTES];
    match file.read_exact_at(&mut sector, 0) {
        Ok(()) => Ok(Some(sector)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// The last operation on a redb file that failed, as the device answered.
#[derive(Default)]
pub(crate) struct IoFailures(Mutex<Option<IoFailure>>);

impl IoFailures {
    /// The failure noted since the last call, if any.
    pub(crate) fn take(&self) -> Option<IoFailure> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[derive(Debug)]
pub(crate) struct IoFailure {
    /// What was being done to the file: "sync", "write".
    pub(crate) action: &'static str,
    /// `ENOSPC`: the device is full.
    pub(crate) no_space: bool,
    pub(crate) cause: String,
}

impl fmt::Debug for DiskBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskBackend").finish_non_exhaustive()
    }
}

impl StorageBackend for DiskBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.size_bytes()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.file.read_exact_at(out, offset)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.noted("resize", self.file.set_len(len))
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.noted("sync", self.file.sync_data())?;
        match (&self.header_copy, header_sector(self.file.as_ref())?) {
            (Some(copy), Some(sector)) => copy.record(&sector),
            _ => Ok(()),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.noted("write", self.file.write_all_at(data, offset))
    }
}

/// What opening a redb file through the seam can fail at.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The file itself could not be opened or created.
    File(io::Error),
    Database(DatabaseError),
}

impl OpenError {
    /// The store's error for `action` on the file at `path`.
    pub(crate) fn at(self, path: &Path, action: &'static str) -> StoreError {
        match self {
            OpenError::File(e) => StoreError::io(path, action, e),
            // What redb's recovery, and its check of the whole file, could
            // not mend.
            OpenError::Database(DatabaseError::Storage(StorageError::Corrupted(detail))) => {
                StoreError::Damaged {
                    path: path.to_path_buf(),
                    detail,
                }
            }
            OpenError::Database(e) => db_error(path, action)(e),
        }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::File(e) => e.fmt(f),
            OpenError::Database(e) => e.fmt(f),
        }
    }
}

/// Opens (creating, 0600, when absent) the redb file at `path` on `disk`
/// with `builder`'s settings.
pub(crate) fn create_db(
    disk: &dyn Disk,
    path: &Path,
    builder: &Builder,
) -> Result<Database, OpenError> {
    create_watched_db(disk, path, builder, Arc::default())
}

/// [`create_db`], noting each failed operation of the file in `failures`.
pub(crate) fn create_watched_db(
    disk: &dyn Disk,
    path: &Path,
    builder: &Builder,
    failures: Arc<IoFailures>,
) -> Result<Database, OpenError> {
    let mode = OpenMode {
        create: true,
        // Whatever the umask: the file holds what applications published.
        permissions: 0o600,
        ..OpenMode::read_write()
    };
    let file = disk.open(path, mode).map_err(OpenError::File)?;
    builder
        .create_with_backend(DiskBackend {
            file,
            failures,
            header_copy: None,
        })
        .map_err(OpenError::Database)
}

fn provider_file_mode() -> OpenMode {
    OpenMode {
        create: true,
        permissions: 0o600,
        ..OpenMode::read_write()
    }
}

/// [`create_db`] for a provider's own file: its header sector is kept
/// after each sync, and an open that fails on a header sector that is
/// not a redb header (torn into garbage) puts the one last synced back
/// and tries once more. What redb
/// then opens is its last durable commit, whose pages a commit never
/// overwrites; the journal holds every batch after it.
///
/// Each failed operation of the file is noted in `failures`.
pub(crate) fn create_provider_db(
    disk: &dyn Disk,
    path: &Path,
    builder: &Builder,
    failures: Arc<IoFailures>,
) -> Result<Database, StoreError> {
    let action = "open the redb file";
    let fresh = !disk
        .exists(path)
        .map_err(|e| StoreError::io(path, "look for the redb file", e))?;
    let copy = Arc::new(HeaderCopy::open(disk, path, fresh)?);
    let open = || {
        let file = disk
            .open(path, provider_file_mode())
            .map_err(OpenError::File)?;
        let backend = DiskBackend {
            file,
            failures: failures.clone(),
            header_copy: Some(copy.clone()),
        };
        builder
            .create_with_backend(backend)
            .map_err(OpenError::Database)
    };
    let failed = match open() {
        Ok(db) => return Ok(db),
        Err(OpenError::File(e)) => return Err(StoreError::io(path, action, e)),
        Err(OpenError::Database(e)) => e,
    };
    let file = disk
        .open(path, provider_file_mode())
        .map_err(|e| StoreError::io(path, action, e))?;
    let on_file = header_sector(file.as_ref()).map_err(|e| StoreError::io(path, action, e))?;
    let torn = on_file.is_some_and(|sector| !looks_like_redb_header(&sector));
    let Some(kept) = copy
        .newest()
        .filter(|kept| torn && looks_like_redb_header(kept))
    else {
        return Err(OpenError::Database(failed).at(path, action));
    };
    file.write_all_at(&kept, 0)
        .and_then(|()| file.sync_data())
        .map_err(|e| StoreError::io(path, "put the header copy back", e))?;
    drop(file);
    log::warn!(
        "{}: its header could not be read ({failed}), as after a power cut during its write; the header of its last durable commit, kept in {}, was put back, and the journal's replay adds the batches after it",
        path.display(),
        copy.path().display()
    );
    open().map_err(|e| e.at(path, action))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::disk::RealDisk;
    use ::redb::{ReadableDatabase, TableDefinition};

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    #[test]
    fn a_database_on_the_seam_writes_and_reads_back_after_reopening() {
        let dir = std::env::temp_dir().join(format!("saguin-redb-file-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.redb");
        let disk = RealDisk::shared();
        let open = || match create_db(disk.as_ref(), &path, &Builder::new()) {
            Ok(db) => db,
            Err(_) => panic!("open {}", path.display()),
        };
        let db = open();
        let txn = db.begin_write().unwrap();
        txn.open_table(T).unwrap().insert(7, 49).unwrap();
        txn.commit().unwrap();
        drop(db);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        let db = open();
        let read = db.begin_read().unwrap();
        let got = read.open_table(T).unwrap().get(7).unwrap().unwrap().value();
        assert_eq!(got, 49);
        drop(read);
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
