//! A provider whose file was found damaged beyond repair at the start:
//! the file is moved aside, never replaced, and the provider stands in
//! its place refusing every write, so the broker starts and says so
//! (`/health`, a metric, one log line) instead of serving an empty file
//! as if it were the one the operator had.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::disk::Disk;
use super::error::{Failure, StoreError};
use super::files::{lock_path_for, sync_parent};
use super::lock::LockFile;
use super::types::{empty_read, ChannelState, Outcome, Read, ReadLimit, Usage, Write};
use super::Provider;

static DAMAGED_FILES: AtomicU64 = AtomicU64::new(0);

/// How many redb files were found damaged beyond repair and moved aside
/// since the process started.
pub fn damaged_files_total() -> u64 {
    DAMAGED_FILES.load(Ordering::Relaxed)
}

/// `<file>.damaged-<unix ms>`: when, and why.
fn aside_path(file: &Path, unix_ms: u128) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(format!(".damaged-{unix_ms}"));
    PathBuf::from(name)
}

/// Moves the damaged file at `file` aside, durably, and returns the
/// provider that stands for it, holding its lock so that no other broker
/// starts it afresh meanwhile. Logged once at ERROR with the operator's
/// choices, and counted.
pub(crate) fn set_aside_damaged(
    disk: Arc<dyn Disk>,
    provider: &str,
    file: &Path,
    detail: &str,
    max_bytes: u64,
) -> Result<FailedProvider, StoreError> {
    let lock = LockFile::acquire(disk.as_ref(), &lock_path_for(file), provider)?;
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let aside = aside_path(file, unix_ms);
    disk.rename(file, &aside)
        .map_err(|e| StoreError::io(file, "move the damaged redb file aside", e))?;
    sync_parent(disk.as_ref(), file)?;
    DAMAGED_FILES.fetch_add(1, Ordering::Relaxed);
    let failure = Arc::new(Failure {
        provider: provider.to_string(),
        path: file.to_path_buf(),
        action: "open".into(),
        cause: format!(
            "redb found it damaged beyond repair ({detail}); it was moved aside as {} and nothing was put in its place",
            aside.display()
        ),
        remedy: format!(
            "the provider takes no writes and its channels refuse publishes (0x83). Either restore a backup to {file} and restart the broker, or restart it to start the provider empty (the damaged file stays where it was moved); `saguin inspect {aside}` says whether any of it can still be read, and the device that damaged it may need replacing",
            file = file.display(),
            aside = aside.display()
        ),
    });
    log::error!("{failure}");
    Ok(FailedProvider {
        name: provider.to_string(),
        max_bytes,
        failure,
        _lock: lock,
    })
}

/// Refuses every write with its failure; reads find nothing, since
/// nothing of the damaged file is served.
pub(crate) struct FailedProvider {
    name: String,
    max_bytes: u64,
    failure: Arc<Failure>,
    _lock: LockFile,
}

impl FailedProvider {
    fn refused(&self) -> StoreError {
        StoreError::Failed(Arc::clone(&self.failure))
    }
}

impl Provider for FailedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn usage(&self) -> Usage {
        Usage {
            used_bytes: 0,
            max_bytes: self.max_bytes,
            reserve_bytes: 0,
        }
    }

    fn channel(&self, _channel: &str) -> ChannelState {
        ChannelState::default()
    }

    fn channels(&self) -> Vec<(String, ChannelState)> {
        Vec::new()
    }

    fn commit(&mut self, _writes: &[Write]) -> Result<Vec<Outcome>, StoreError> {
        Err(self.refused())
    }

    fn read(&self, _channel: &str, from_offset: u64, _: ReadLimit) -> Result<Read, StoreError> {
        Ok(empty_read(ChannelState::default(), from_offset))
    }

    fn position(&self, _channel: &str, _reader: &str) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    fn lowest_position(&self, _channel: &str) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    fn first_at_or_after(&self, _channel: &str, _at_ms: u64) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    fn entries(&self, _channel: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(Vec::new())
    }

    fn entry(&self, _channel: &str, _key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }

    fn backup_view(&self) -> Option<Result<super::BackupView, StoreError>> {
        Some(Err(self.refused()))
    }

    fn failure(&self) -> Option<Arc<Failure>> {
        Some(Arc::clone(&self.failure))
    }

    fn close(self: Box<Self>) -> Result<(), StoreError> {
        Ok(())
    }
}
