//! What a channel's provider holds at startup, read before the provider
//! moves to its storage thread: where the channel stands, a `latest`
//! channel's current values and a `queue`'s jobs with their attempt counts.
//!
//! Records are read in bounded batches and only what the core keeps is
//! held: a latest value's index entry, a job's head, never a body. A
//! latest record a newer one of its topic replaced - left by a crash
//! between a value's commit and the removal that follows it - is removed
//! here, so the channel holds one record per topic again.

use std::collections::HashMap;

use super::latest::{fold_records, StoredValue};
use super::queue::{parse_attempts, HeldJob};
use super::ChannelSettings;
use crate::codec::topic;
use crate::store::{Provider, Read, ReadLimit, Record, StoreError, Write, MAX_BATCH_WRITES};

/// One batch of records read at startup.
const LOAD_BATCH: ReadLimit = ReadLimit {
    max_records: 1_024,
    max_bytes: 4 * 1024 * 1024,
};

/// Fills in what `channel`'s provider holds: its `next` and `floor`, and
/// for a latest channel or a queue, what the core keeps of its records.
pub fn load_at_start(
    provider: &mut dyn Provider,
    channel: &mut ChannelSettings,
) -> Result<(), StoreError> {
    if let Some(latest) = &mut channel.latest {
        latest.values = latest_values(provider, &channel.name, &channel.filters)?;
    }
    if let Some(queue) = &mut channel.queue {
        queue.held = held_jobs(&*provider, &channel.name)?;
    }
    let state = provider.channel(&channel.name);
    channel.next = state.next;
    channel.floor = state.floor;
    Ok(())
}

/// The entry in a channel's own space naming the type its records were
/// written as.
pub const TYPE_KEY: &str = "$type";

fn type_name(channel: &ChannelSettings) -> &'static str {
    match (&channel.latest, &channel.queue) {
        (Some(_), _) => "latest",
        (_, Some(_)) => "queue",
        _ => "append",
    }
}

/// Refuses a channel configured as another type than the one its stored
/// records were written as (an `append` log read as `latest` values, or
/// a queue's jobs as a log, would be served as what they are not), with
/// the message naming the channel, the provider and the fix. Stamps the
/// type on a channel that has none stored yet, or holds no records.
pub fn check_type(provider: &mut dyn Provider, channel: &ChannelSettings) -> Result<(), String> {
    let configured = type_name(channel);
    let stored = provider
        .entry(&channel.name, TYPE_KEY)
        .map_err(|e| e.to_string())?;
    let records = provider.channel(&channel.name).record_count;
    match stored.as_deref() {
        Some(stored) if stored == configured.as_bytes() => return Ok(()),
        Some(stored) if records > 0 => {
            let stored = String::from_utf8_lossy(stored);
            return Err(format!(
                "channels.{name}: provider {provider} holds {records} records of channel {name} written with type: {stored}, and it is now configured with type: {configured}; set channels.{name}.type back to {stored}, or give the {configured} channel another name so that it starts empty",
                name = channel.name,
                provider = provider.name(),
            ));
        }
        _ => {}
    }
    provider
        .commit(&[Write::PutEntry {
            channel: channel.name.clone(),
            key: TYPE_KEY.to_string(),
            value: configured.as_bytes().to_vec(),
            use_reserve: true,
        }])
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Hands every record of `channel`, from its floor on, to `take` a batch
/// at a time.
fn each_batch(
    provider: &dyn Provider,
    channel: &str,
    mut take: impl FnMut(Vec<Record>),
) -> Result<(), StoreError> {
    let mut from_offset = provider.channel(channel).floor;
    loop {
        let batch = match provider.read(channel, from_offset, LOAD_BATCH)? {
            Read::Records(batch) => batch,
            Read::BelowFloor { floor } => {
                from_offset = floor;
                continue;
            }
            Read::PastNext { .. } => return Ok(()),
        };
        let Some(last) = batch.records.last().map(|r| r.offset) else {
            return Ok(());
        };
        take(batch.records);
        from_offset = last + 1;
    }
}

/// A latest channel's current values, removing the records they replaced.
/// `filters` are what the channel claims now: a value stored under a
/// filter since edited is reachable by nothing, and the count is logged.
fn latest_values(
    provider: &mut dyn Provider,
    channel: &str,
    filters: &[String],
) -> Result<Vec<StoredValue>, StoreError> {
    let mut newest: HashMap<String, StoredValue> = HashMap::new();
    let mut superseded = Vec::new();
    each_batch(&*provider, channel, |records| {
        superseded.extend(fold_records(records, &mut newest));
    })?;
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

/// A queue's jobs: their heads, ascending by offset, with their stored
/// attempt counts. Every job is available again after a restart.
fn held_jobs(provider: &dyn Provider, queue: &str) -> Result<Vec<HeldJob>, StoreError> {
    let mut held = Vec::new();
    each_batch(provider, queue, |records| {
        held.extend(records.iter().map(|r| HeldJob {
            offset: r.offset,
            received_at_unix_ms: r.message.received_at_ms,
            attempts: 0,
        }));
    })?;
    for (key, value) in provider.entries(queue)? {
        // An exactly-once publish held for the queue is the session's.
        if crate::core::broadcast::qos2_holds::is_hold_key(&key) || key == TYPE_KEY {
            continue;
        }
        let Some((offset, attempts)) = parse_attempts(&key, &value) else {
            log::warn!("queue {queue}: an entry {key:?} is not an attempt count; ignored");
            continue;
        };
        if let Ok(i) = held.binary_search_by_key(&offset, |h| h.offset) {
            held[i].attempts = attempts;
        }
    }
    log::info!("queue {queue}: {} jobs held, all available", held.len());
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::channel::ChannelStart;
    use crate::core::latest::LatestSettings;
    use crate::core::queue::{attempts_key, QueueSettings};
    use crate::core::queue_rules::Backoff;
    use crate::store::{MemoryProvider, Message, MessageId};

    fn append(channel: &str, topic: &str, payload: &[u8], received_at_ms: u64) -> Write {
        Write::Append {
            channel: channel.into(),
            message: Message::new(
                MessageId::from_publisher("id"),
                received_at_ms,
                topic.into(),
                payload.to_vec(),
            ),
            channel_max_bytes: None,
        }
    }

    fn settings(name: &str) -> ChannelSettings {
        ChannelSettings {
            name: name.into(),
            filters: vec![format!("{name}/#")],
            provider: 0,
            start: ChannelStart::Floor,
            max_bytes: None,
            retention_period_s: None,
            retention_bytes: None,
            next: 0,
            floor: 0,
            written_filter: format!("{name}/#"),
            latest: None,
            queue: None,
        }
    }

    #[test]
    fn a_latest_channel_keeps_each_topics_newest_value_and_removes_the_rest() {
        let mut provider = MemoryProvider::open("p", 1 << 20, 0, None).unwrap();
        provider
            .commit(&[
                append("l", "l/a", b"1", 10),
                append("l", "l/b", b"1", 20),
                append("l", "l/a", b"2", 30),
                append("l", "l/b", b"", 40),
            ])
            .unwrap();
        let mut channel = settings("l");
        channel.latest = Some(LatestSettings {
            deletion_retention_period_s: Some(60),
            values: Vec::new(),
        });
        load_at_start(&mut provider, &mut channel).unwrap();
        let mut values = channel.latest.unwrap().values;
        values.sort_by_key(|v| v.offset);
        let kept: Vec<_> = values
            .iter()
            .map(|v| (v.topic.as_str(), v.offset, v.deleted))
            .collect();
        assert_eq!(kept, [("l/a", 3, false), ("l/b", 4, true)]);
        // The replaced records are gone from the provider, not only skipped.
        assert_eq!((channel.next, channel.floor), (5, 3));
        let Read::Records(batch) = provider.read("l", channel.floor, LOAD_BATCH).unwrap() else {
            panic!("records expected");
        };
        let offsets: Vec<u64> = batch.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, [3, 4]);
    }

    #[test]
    fn a_queue_holds_every_job_with_its_stored_attempts() {
        let mut provider = MemoryProvider::open("p", 1 << 20, 0, None).unwrap();
        provider
            .commit(&[
                append("q", "q/a", b"job", 7),
                append("q", "q/b", b"job", 8),
                Write::PutEntry {
                    channel: "q".into(),
                    key: attempts_key(2),
                    value: 3u32.to_be_bytes().to_vec(),
                    use_reserve: false,
                },
            ])
            .unwrap();
        let mut channel = settings("q");
        channel.queue = Some(QueueSettings {
            visibility_timeout_ms: 30_000,
            job_expires_after_ms: None,
            max_attempts: 5,
            backoff: Backoff::None,
            backoff_base_ms: 0,
            held: Vec::new(),
        });
        load_at_start(&mut provider, &mut channel).unwrap();
        let held = channel.queue.unwrap().held;
        let held: Vec<_> = held
            .iter()
            .map(|h| (h.offset, h.received_at_unix_ms, h.attempts))
            .collect();
        assert_eq!(held, [(1, 7, 0), (2, 8, 3)]);
        assert_eq!((channel.next, channel.floor), (3, 1));
    }
}
