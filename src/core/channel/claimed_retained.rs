//! Retained values on topics a `latest` channel now claims, moved into
//! the channel at startup so that a topic's value is held in one place.
//!
//! A retained value can only be on such a topic when the channel, or its
//! filter's reach, is newer than the value. The channel's record is
//! committed first and the retained entry dropped after: a crash between
//! the two leaves the same value in both, and the next start finds the
//! channel's copy no older than the retained one and only drops the entry.

use crate::core::channel::claims::Claims;
use crate::core::channel::latest::StoredValue;
use crate::core::channel::ChannelSettings;
use crate::core::RETAINED_SPACE;
use crate::store::{encoding, Outcome, Provider, StoreError, Write};

/// Moves each of `retained` (the entries the retained store's provider,
/// `providers[retained_provider]`, held at start) whose topic a `latest`
/// channel claims into that channel, unless the channel holds a value for
/// the topic at least as new, and drops it from the retained store either
/// way. `retained` keeps only the entries left where they were. A channel
/// with no room leaves the value in the retained store, unserved (the
/// retained pass never serves a topic a `latest` channel claims), and says
/// so.
pub fn move_into_latest_channels(
    providers: &mut [Box<dyn Provider>],
    channels: &mut [ChannelSettings],
    retained_provider: usize,
    retained: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), StoreError> {
    let claims = Claims::new(
        &channels
            .iter()
            .map(|c| (c.name.as_str(), c.filters.as_slice()))
            .collect::<Vec<_>>(),
    );
    let mut kept = Vec::with_capacity(retained.len());
    for (topic, bytes) in std::mem::take(retained) {
        let Some(channel) = claims
            .channel_for_topic(&topic)
            .map(|c| &mut channels[c])
            .filter(|c| c.latest.is_some())
        else {
            kept.push((topic, bytes));
            continue;
        };
        let Ok(message) = encoding::message_from_bytes(&bytes) else {
            // Restoring the store says it cannot be read.
            kept.push((topic, bytes));
            continue;
        };
        if !move_one(&mut *providers[channel.provider], channel, message)? {
            log::warn!(
                "the retained value of {topic:?} is under channel {}, which has no room for it: it stays in the retained store and is not served; raise the channel's max_bytes",
                channel.name
            );
            kept.push((topic, bytes));
            continue;
        }
        providers[retained_provider].commit(&[Write::DropEntry {
            channel: RETAINED_SPACE.to_string(),
            key: topic,
        }])?;
    }
    *retained = kept;
    Ok(())
}

/// Makes `message` its topic's value in `channel` unless the channel holds
/// one at least as new. False when the channel had no room for it.
fn move_one(
    provider: &mut dyn Provider,
    channel: &mut ChannelSettings,
    message: crate::store::Message,
) -> Result<bool, StoreError> {
    let latest = channel.latest.as_mut().expect("a latest channel");
    let held = latest.values.iter().position(|v| v.topic == message.topic);
    if let Some(i) = held {
        if latest.values[i].received_at_ms >= message.received_at_ms {
            return Ok(true);
        }
    }
    let replaced = held.map_or(u64::MAX, |i| latest.values[i].offset);
    let write = Write::Replace {
        channel: channel.name.clone(),
        offset: replaced,
        channel_max_bytes: channel.max_bytes,
        message: message.clone(),
    };
    let offset = match provider.commit(&[write])?.as_slice() {
        [Outcome::Appended { offset }] => *offset,
        _ => return Ok(false),
    };
    log::info!(
        "channel {}: the retained value of {:?} moved in at offset {offset}",
        channel.name,
        message.topic
    );
    let value = StoredValue {
        topic: message.topic.clone(),
        offset,
        received_at_ms: message.received_at_ms,
        deleted: message.payload.is_empty(),
    };
    match held {
        Some(i) => latest.values[i] = value,
        None => latest.values.push(value),
    }
    let state = provider.channel(&channel.name);
    channel.next = state.next;
    channel.floor = state.floor;
    Ok(true)
}
