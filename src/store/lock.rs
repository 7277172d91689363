//! One broker at a time per provider: a lock file beside what it guards,
//! taken through the disk seam before the guarded files are touched and
//! held for as long as the provider is open. The kernel drops the lock
//! when the process ends, so a killed broker leaves nothing to clean up.

use std::fmt;
use std::path::Path;

use super::disk::{Disk, DiskFile, Locked, OpenMode};
use super::error::StoreError;

pub(crate) struct LockFile {
    // Held, never read: closing it is what releases the lock.
    _file: Box<dyn DiskFile>,
}

impl fmt::Debug for LockFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockFile").finish_non_exhaustive()
    }
}

impl LockFile {
    /// Takes the lock at `path` for `provider`, creating the file (0600)
    /// if it is missing, or says who cannot.
    pub(crate) fn acquire(
        disk: &dyn Disk,
        path: &Path,
        provider: &str,
    ) -> Result<LockFile, StoreError> {
        let mode = OpenMode {
            create: true,
            permissions: 0o600,
            ..OpenMode::read_write()
        };
        let file = disk
            .open(path, mode)
            .map_err(|e| StoreError::io(path, "take the lock file", e))?;
        match file.try_lock(false) {
            Ok(Locked::Taken) => Ok(LockFile { _file: file }),
            Ok(Locked::HeldElsewhere) => Err(StoreError::Locked {
                provider: provider.to_string(),
                lock_path: path.to_path_buf(),
            }),
            Err(e) => Err(StoreError::io(path, "take the lock file", e)),
        }
    }

    /// For a tool that only reads: a shared lock on an existing lock file,
    /// which a running broker's exclusive one refuses, so a file being
    /// written is never read. Creates nothing: with no lock file, no
    /// broker has ever held the provider and `None` is returned.
    pub(crate) fn share_if_present(
        disk: &dyn Disk,
        path: &Path,
        what: &str,
    ) -> Result<Option<LockFile>, StoreError> {
        let file = match disk.open(path, OpenMode::read_only()) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(path, "open the lock file", e)),
        };
        match file.try_lock(true) {
            Ok(Locked::Taken) => Ok(Some(LockFile { _file: file })),
            Ok(Locked::HeldElsewhere) => Err(StoreError::Locked {
                provider: what.to_string(),
                lock_path: path.to_path_buf(),
            }),
            Err(e) => Err(StoreError::io(path, "lock the lock file", e)),
        }
    }
}
