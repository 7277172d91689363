//! A lock file: an exclusive `flock` on a file beside what it guards, held
//! for as long as the returned handle lives. The kernel releases it when
//! the process ends, so a broker that was killed leaves nothing to clean
//! up; the file itself stays, because removing it under a running broker
//! would defeat it. Unix-socket doors take one; storage providers take
//! theirs through the store's disk seam (`store::lock`).

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Takes the lock at `path`, creating the file (mode 0600) if it is
/// missing. `Ok(None)` when another process holds it.
pub(crate) fn take_exclusive(path: &Path) -> io::Result<Option<File>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(error)) => Err(error),
    }
}
