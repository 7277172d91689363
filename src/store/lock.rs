//! One broker at a time per provider: a lock file (`crate::lock_file`)
//! beside what it guards, taken before the guarded files are touched and
//! held for as long as the provider is open.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;

use super::error::StoreError;

#[derive(Debug)]
pub(crate) struct LockFile {
    // Held, never read: closing it is what releases the lock.
    _file: File,
}

impl LockFile {
    /// Takes the lock at `path` for `provider`, or says who cannot.
    pub(crate) fn acquire(path: &Path, provider: &str) -> Result<LockFile, StoreError> {
        match crate::lock_file::take_exclusive(path) {
            Ok(Some(file)) => Ok(LockFile { _file: file }),
            Ok(None) => Err(StoreError::Locked {
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
        path: &Path,
        what: &str,
    ) -> Result<Option<LockFile>, StoreError> {
        let file = match OpenOptions::new().read(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(StoreError::io(path, "open the lock file", e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(LockFile { _file: file })),
            Err(TryLockError::WouldBlock) => Err(StoreError::Locked {
                provider: what.to_string(),
                lock_path: path.to_path_buf(),
            }),
            Err(TryLockError::Error(e)) => Err(StoreError::io(path, "lock the lock file", e)),
        }
    }
}
