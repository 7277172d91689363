//! From a provider's settings to an open provider.

use std::sync::Arc;

use super::disk::{Disk, RealDisk};
use super::error::StoreError;
use super::failed::set_aside_damaged;
use super::memory::MemoryProvider;
use super::redb::RedbProvider;
use super::settings::{ProviderKind, ProviderSettings};
use super::Provider;

/// Opens the provider `settings` describes, holding back `reserve_bytes`
/// (see [`super::reserve_bytes`]) from appends. Takes the
/// provider's lock first; a provider another broker holds is refused,
/// naming the provider and the lock file.
pub fn open_provider(
    settings: &ProviderSettings,
    reserve_bytes: u64,
) -> Result<Box<dyn Provider>, StoreError> {
    open_provider_on(RealDisk::shared(), settings, reserve_bytes)
}

/// [`open_provider`] on `disk`: every file the provider reads or writes
/// goes through it.
pub fn open_provider_on(
    disk: Arc<dyn Disk>,
    settings: &ProviderSettings,
    reserve_bytes: u64,
) -> Result<Box<dyn Provider>, StoreError> {
    match &settings.kind {
        ProviderKind::Redb {
            file_path,
            checkpoint_interval_ms,
            ..
        } => {
            let opened = RedbProvider::open_on(
                disk.clone(),
                &settings.name,
                file_path,
                settings.max_bytes,
                reserve_bytes,
            );
            let mut provider = match opened {
                Ok(provider) => provider,
                // The broker starts, and the provider stands failed.
                Err(StoreError::Damaged { path, detail }) if path == *file_path => {
                    let failed = set_aside_damaged(
                        disk,
                        &settings.name,
                        file_path,
                        &detail,
                        settings.max_bytes,
                    )?;
                    return Ok(Box::new(failed));
                }
                Err(e) => return Err(e),
            };
            provider.set_checkpoint_interval_ms(u64::from(*checkpoint_interval_ms));
            Ok(Box::new(provider))
        }
        ProviderKind::Memory { snapshot_dir } => Ok(Box::new(MemoryProvider::open_on(
            disk,
            &settings.name,
            settings.max_bytes,
            reserve_bytes,
            snapshot_dir.as_deref(),
        )?)),
    }
}
