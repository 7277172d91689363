//! Why a provider could not do what it was asked. A refusal the broker
//! answers with 0x97 is not an error: it is a [`super::Refusal`] in the
//! write's outcome. An error is a failure to store (0x83 on a PUBACK), a
//! provider that cannot be opened, or a write the store cannot take.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug)]
pub enum StoreError {
    /// A file operation failed.
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    /// The redb engine refused or failed.
    Database {
        path: PathBuf,
        action: &'static str,
        detail: String,
    },
    /// Another broker holds the provider.
    Locked {
        provider: String,
        lock_path: PathBuf,
    },
    /// A file is damaged, truncated, or in a format this build does not read.
    Format { path: PathBuf, detail: String },
    /// A write the store cannot take whatever its state (a name too long,
    /// a field past its ceiling). The whole batch is refused.
    Invalid(String),
    /// Several files failed, as a snapshot at shutdown reports them: every
    /// failure, not only the first.
    Several(Vec<StoreError>),
    /// The storage thread has stopped.
    Stopped,
    /// The provider takes no more writes: its device failed an operation
    /// whose success the store relies on (a sync), so what it holds on the
    /// disk is known only to a restart's replay. Every later call gets the
    /// same failure back without touching the disk.
    Failed(Arc<Failure>),
    /// The device had no room (`ENOSPC`) for what `action` wrote, before
    /// the provider reached its `max_bytes`. Nothing of the commit was
    /// stored; what was acknowledged before stays, and the provider takes
    /// writes again once there is room. Answered 0x97, as a full provider.
    DeviceFull { path: PathBuf, action: &'static str },
    /// redb found the file damaged beyond what its recovery mends.
    Damaged { path: PathBuf, detail: String },
}

/// What stopped a provider, kept for every call after it, the log line,
/// `/health` and the storage thread's watch.
#[derive(Debug)]
pub struct Failure {
    pub provider: String,
    /// The file whose operation failed.
    pub path: PathBuf,
    /// What was being done: "sync a journal frame", "sync the redb file".
    pub action: String,
    pub cause: String,
    /// What it costs and what the operator can do.
    pub remedy: String,
}

/// What a failed sync costs, and the operator's choices.
pub(crate) const SYNC_FAILED_REMEDY: &str = "it takes no more writes and its channels refuse publishes (0x83) until the broker restarts and replays what is truly on the disk. Check the device (dmesg, its SMART or wear figures) and its free space, then restart the broker; if the file cannot be read, restore it from a backup";

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "storage provider {} has failed: cannot {} {}: {}; {}",
            self.provider,
            self.action,
            self.path.display(),
            self.cause,
            self.remedy
        )
    }
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, action: &'static str, source: io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            action,
            source,
        }
    }

    /// Whether the whole commit met the device's answer, not one of its
    /// writes: each request of the batch would meet it again alone.
    pub fn is_device_error(&self) -> bool {
        matches!(self, StoreError::Failed(_) | StoreError::DeviceFull { .. })
    }

    /// The same answer for another request of a failed batch; `None` for
    /// an error that is one request's own.
    pub(crate) fn for_another(&self) -> Option<StoreError> {
        match self {
            StoreError::Failed(failure) => Some(StoreError::Failed(Arc::clone(failure))),
            StoreError::DeviceFull { path, action } => Some(StoreError::DeviceFull {
                path: path.clone(),
                action,
            }),
            _ => None,
        }
    }

    pub(crate) fn format(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        StoreError::Format {
            path: path.into(),
            detail: detail.into(),
        }
    }
}

/// A redb failure at `action` on the file at `path`, for `map_err`.
pub(crate) fn db_error<'p, E: fmt::Display>(
    path: &'p Path,
    action: &'static str,
) -> impl FnOnce(E) -> StoreError + use<'p, E> {
    move |e| StoreError::Database {
        path: path.to_path_buf(),
        action,
        detail: e.to_string(),
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io {
                path,
                action,
                source,
            } => write!(f, "storage {}: cannot {action}: {source}", path.display()),
            StoreError::Database {
                path,
                action,
                detail,
            } => write!(f, "storage {}: cannot {action}: {detail}", path.display()),
            StoreError::Locked {
                provider,
                lock_path,
            } => write!(
                f,
                "storage provider {provider} is held by another running broker: {} is locked; stop that broker, or give this one a provider of its own",
                lock_path.display()
            ),
            StoreError::Format { path, detail } => {
                write!(f, "storage {}: {detail}", path.display())
            }
            StoreError::Invalid(why) => write!(f, "storage refused a write: {why}"),
            StoreError::Several(all) => {
                for (i, e) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
            StoreError::Stopped => f.write_str("the storage thread has stopped"),
            StoreError::Failed(failure) => failure.fmt(f),
            StoreError::Damaged { path, detail } => write!(
                f,
                "storage {}: damaged beyond repair: {detail}",
                path.display()
            ),
            StoreError::DeviceFull { path, action } => write!(
                f,
                "storage {}: cannot {action}: the device is full (ENOSPC); the commit was refused and nothing acknowledged is lost. Free space on the device (or lower max_bytes below what it can hold): writes resume by themselves",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
