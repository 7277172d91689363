//! A `latest` channel's index, rebuilt at startup from its records before
//! its provider moves to the storage thread.
//!
//! The records are read in bounded batches and folded to the newest per
//! topic, so only the index stays in memory: bodies are read back when they
//! are served. A record a newer one of its topic replaced - left by a crash
//! between a value's commit and the removal that follows it - is removed
//! here, so the channel holds one record per topic again.

use std::collections::HashMap;

use crate::codec::topic;
use crate::config::{ChannelConfig, ChannelKind};
use crate::core::latest::{fold_records, LatestSettings, StoredValue};
use crate::store::{Provider, Read, ReadLimit, StoreError, Write, MAX_BATCH_WRITES};

/// Records read per batch at startup.
const LOAD_BATCH_RECORDS: u32 = 1_024;
const LOAD_BATCH_BYTES: u64 = 4 * 1024 * 1024;

/// What the core needs of a `latest` channel, its values read; `None` for
/// a channel of another type.
pub fn latest_settings(
    provider: &mut dyn Provider,
    channel: &ChannelConfig,
) -> Result<Option<LatestSettings>, StoreError> {
    let ChannelKind::Latest {
        deletion_retention_period_s,
    } = channel.kind
    else {
        return Ok(None);
    };
    Ok(Some(LatestSettings {
        deletion_retention_period_s,
        values: load(provider, &channel.name, &channel.filters)?,
    }))
}

/// Reads `channel`'s current values, removing the records they replaced.
/// `filters` are what the channel claims now: a value stored under a
/// filter since edited is reachable by nothing, and the count is logged.
fn load(
    provider: &mut dyn Provider,
    channel: &str,
    filters: &[String],
) -> Result<Vec<StoredValue>, StoreError> {
    let mut newest: HashMap<String, StoredValue> = HashMap::new();
    let mut superseded = Vec::new();
    let mut from_offset = provider.channel(channel).floor;
    let limit = ReadLimit {
        max_records: LOAD_BATCH_RECORDS,
        max_bytes: LOAD_BATCH_BYTES,
    };
    loop {
        let batch = match provider.read(channel, from_offset, limit)? {
            Read::Records(batch) => batch,
            Read::BelowFloor { floor } => {
                from_offset = floor;
                continue;
            }
            Read::PastNext { .. } => break,
        };
        let Some(last) = batch.records.last().map(|r| r.offset) else {
            break;
        };
        superseded.extend(fold_records(batch.records, &mut newest));
        from_offset = last + 1;
    }
    if !superseded.is_empty() {
        log::info!(
            "channel {channel}: removing {} values a newer one replaced before a restart",
            superseded.len()
        );
    }
    for offsets in superseded.chunks(MAX_BATCH_WRITES) {
        let writes: Vec<Write> = offsets
            .iter()
            .map(|&offset| Write::Remove {
                channel: channel.to_string(),
                offset,
            })
            .collect();
        provider.commit(&writes)?;
    }
    let values: Vec<StoredValue> = newest.into_values().collect();
    log::info!(
        "channel {channel}: {} topics, {} of them deletions",
        values.len(),
        values.iter().filter(|v| v.deleted).count()
    );
    let unreachable = values
        .iter()
        .filter(|v| !filters.iter().any(|f| topic::matches(f, &v.topic)))
        .count();
    if unreachable > 0 {
        log::warn!(
            "channel {channel}: {unreachable} stored values are under topics its filter no longer matches; nothing reaches them"
        );
    }
    Ok(values)
}
