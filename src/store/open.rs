//! From a provider's configuration to an open provider.

use super::error::StoreError;
use super::memory::MemoryProvider;
use super::redb::RedbProvider;
use super::Provider;
use crate::config::{ProviderConfig, ProviderKind};

/// Opens the provider `config` describes, holding back `reserve_bytes`
/// (see [`crate::config::reserve_bytes`]) from appends. Takes the
/// provider's lock first; a provider another broker holds is refused,
/// naming the provider and the lock file.
pub fn open_provider(
    config: &ProviderConfig,
    reserve_bytes: u64,
) -> Result<Box<dyn Provider>, StoreError> {
    match &config.kind {
        ProviderKind::Redb { file_path, .. } => Ok(Box::new(RedbProvider::open(
            &config.name,
            file_path,
            config.max_bytes,
            reserve_bytes,
        )?)),
        ProviderKind::Memory { snapshot_dir } => Ok(Box::new(MemoryProvider::open(
            &config.name,
            config.max_bytes,
            reserve_bytes,
            snapshot_dir.as_deref(),
        )?)),
    }
}
