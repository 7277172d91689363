//! What a queue's provider holds at startup, read before the provider moves
//! to its storage thread: each job's head, without its body, and its stored
//! attempt count.

use crate::config;
use crate::core::queue::{self, HeldJob, QueueSettings};
use crate::core::queue_rules::Backoff;
use crate::store;

/// A queue's settings, with the jobs its provider holds now: their heads
/// only, read in batches, and their stored attempt counts.
pub fn queue_settings(
    provider: &dyn store::Provider,
    name: &str,
    queue: &config::QueueConfig,
) -> Result<QueueSettings, store::StoreError> {
    let mut held = Vec::new();
    let mut from = store::FIRST_OFFSET;
    loop {
        let limit = store::ReadLimit {
            max_records: 1_024,
            max_bytes: 4 * 1024 * 1024,
        };
        let batch = match provider.read(name, from, limit)? {
            store::Read::Records(batch) => batch,
            store::Read::BelowFloor { floor } => {
                from = floor;
                continue;
            }
            store::Read::PastNext { .. } => break,
        };
        let Some(last) = batch.records.last() else {
            break;
        };
        from = last.offset + 1;
        held.extend(batch.records.iter().map(|r| HeldJob {
            offset: r.offset,
            received_at_unix_ms: r.message.received_at_ms,
            attempts: 0,
        }));
    }
    for (key, value) in provider.entries(name)? {
        let Some((offset, attempts)) = queue::parse_attempts(&key, &value) else {
            log::warn!("queue {name}: an entry {key:?} is not an attempt count; ignored");
            continue;
        };
        if let Ok(i) = held.binary_search_by_key(&offset, |h| h.offset) {
            held[i].attempts = attempts;
        }
    }
    log::info!("queue {name}: {} jobs held, all available", held.len());
    Ok(QueueSettings {
        visibility_timeout_ms: queue.visibility_timeout_s * 1000,
        job_expires_after_ms: queue.job_expires_after_s.map(|s| s * 1000),
        max_attempts: queue.max_attempts,
        backoff: match queue.backoff {
            config::Backoff::None => Backoff::None,
            config::Backoff::Linear => Backoff::Linear,
            config::Backoff::Exponential => Backoff::Exponential,
        },
        backoff_base_ms: queue.backoff_base_s * 1000,
        held,
    })
}
