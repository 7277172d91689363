//! Where a provider's files live beside each other, and the directory
//! sync that makes a new name durable. Both sit just above the disk seam
//! so every layer of the store can use them without importing another.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::disk::{parent_dir, Disk, OpenMode};
use super::error::StoreError;

/// The lock guarding the redb file at `file_path`: `<file_path>.lock`.
pub(crate) fn lock_path_for(file_path: &Path) -> PathBuf {
    let mut name = OsString::from(file_path.as_os_str());
    name.push(".lock");
    PathBuf::from(name)
}

/// Makes the directory entry of `file_path` durable: a sync of the file
/// makes its contents durable, and without this a new file could survive
/// a power cut under no name at all.
pub(crate) fn sync_parent(disk: &dyn Disk, file_path: &Path) -> Result<(), StoreError> {
    let dir = parent_dir(file_path);
    disk.sync_dir(dir)
        .map_err(|e| StoreError::io(dir, "sync the directory holding the file", e))
}

/// Creates `path` for the broker's user only (it holds what applications
/// published), refusing one that exists: `what` never writes over
/// anything.
pub(crate) fn create_new_file(disk: &dyn Disk, path: &Path, what: &str) -> Result<(), StoreError> {
    let mode = OpenMode {
        write: true,
        create_new: true,
        permissions: 0o600,
        ..OpenMode::default()
    };
    disk.open(path, mode).map(drop).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => StoreError::format(
            path,
            format!("already exists, and {what} never writes over anything: give a new file name"),
        ),
        _ => StoreError::io(path, "create the file", e),
    })
}
