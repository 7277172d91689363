//! What each write does, written once for both providers over a small
//! table interface, so the two cannot disagree about an offset, a floor or
//! a byte count: the conformance suite checks that they agree, and this is
//! why they do.
//!
//! A provider hands [`apply_batch`] its tables inside whatever makes the
//! batch atomic (a redb write transaction; for memory, nothing can fail
//! once the batch has passed `validate`), and a copy of its budget that it
//! keeps only if the whole batch commits.

use super::budget::Budget;
use super::error::StoreError;
use super::types::{
    ChannelState, Message, Outcome, Refusal, TrimRule, Trimmed, Write, ENTRY_OVERHEAD_BYTES,
    POSITION_OVERHEAD_BYTES,
};

/// A record's place and what a trim needs to judge it, without its body.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordHead {
    pub(crate) offset: u64,
    pub(crate) received_at_ms: u64,
    pub(crate) size_bytes: u64,
}

/// The tables a batch is applied to. Counters are read and written through
/// `state`/`set_state`, which a provider may stage and store once per
/// channel per batch.
pub(crate) trait Tables {
    /// The channel's counters as this batch has left them so far;
    /// `ChannelState::default()` (`next` and `floor` at `FIRST_OFFSET`)
    /// for a channel nothing was ever written to.
    fn state(&mut self, channel: &str) -> Result<ChannelState, StoreError>;
    fn set_state(&mut self, channel: &str, state: ChannelState) -> Result<(), StoreError>;
    fn insert_record(
        &mut self,
        channel: &str,
        offset: u64,
        message: &Message,
    ) -> Result<(), StoreError>;
    /// Up to `limit` of the oldest records, ascending.
    fn oldest(&mut self, channel: &str, limit: usize) -> Result<Vec<RecordHead>, StoreError>;
    fn remove_records(&mut self, channel: &str, offsets: &[u64]) -> Result<(), StoreError>;
    fn position(&mut self, channel: &str, reader: &str) -> Result<Option<u64>, StoreError>;
    fn set_position(&mut self, channel: &str, reader: &str, offset: u64) -> Result<(), StoreError>;
    /// Whether there was one to remove.
    fn remove_position(&mut self, channel: &str, reader: &str) -> Result<bool, StoreError>;
    /// The record at `offset`, if one is held there.
    fn record_head(&mut self, channel: &str, offset: u64)
        -> Result<Option<RecordHead>, StoreError>;
    /// The length of the entry's value, if the key is held.
    fn entry_len(&mut self, channel: &str, key: &str) -> Result<Option<u64>, StoreError>;
    fn put_entry(&mut self, channel: &str, key: &str, value: &[u8]) -> Result<(), StoreError>;
    fn remove_entry(&mut self, channel: &str, key: &str) -> Result<(), StoreError>;
}

/// What a stored entry counts against the provider.
pub(crate) fn entry_size_bytes(key: &str, value_len: u64) -> u64 {
    key.len() as u64 + value_len + ENTRY_OVERHEAD_BYTES
}

/// What a stored position counts against the provider.
pub(crate) fn position_size_bytes(reader: &str) -> u64 {
    reader.len() as u64 + POSITION_OVERHEAD_BYTES
}

pub(crate) fn apply_batch<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    writes: &[Write],
) -> Result<Vec<Outcome>, StoreError> {
    let mut outcomes = Vec::with_capacity(writes.len());
    for write in writes {
        let outcome = match write {
            Write::Append {
                channel,
                message,
                channel_max_bytes,
            } => append(tables, budget, channel, message, *channel_max_bytes)?,
            Write::SetPosition {
                channel,
                reader,
                offset,
            } => set_position(tables, budget, channel, reader, *offset)?,
            Write::DropPosition { channel, reader } => {
                drop_position(tables, budget, channel, reader)?
            }
            Write::Trim {
                channel,
                rule,
                max_records,
            } => Outcome::Trimmed(trim(tables, budget, channel, *rule, *max_records)?),
            Write::Replace {
                channel,
                offset,
                message,
                channel_max_bytes,
            } => replace(
                tables,
                budget,
                channel,
                *offset,
                message,
                *channel_max_bytes,
            )?,
            Write::Remove { channel, offset } => remove(tables, budget, channel, *offset)?,
            Write::PutEntry {
                channel,
                key,
                value,
                use_reserve,
            } => put_entry(tables, budget, channel, key, value, *use_reserve)?,
            Write::DropEntry { channel, key } => drop_entry_of(tables, budget, channel, key)?,
            Write::Move {
                channel,
                offset,
                to,
                message,
                drop_entry,
            } => {
                let outcome = move_record(tables, budget, channel, *offset, to, message)?;
                if let (Outcome::Moved { .. }, Some(key)) = (&outcome, drop_entry) {
                    drop_entry_of(tables, budget, channel, key)?;
                }
                outcome
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

fn append<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    message: &Message,
    channel_max_bytes: Option<u64>,
) -> Result<Outcome, StoreError> {
    let mut state = tables.state(channel)?;
    let size_bytes = message.size_bytes();
    let over_channel = channel_max_bytes.is_some_and(|max| {
        state
            .record_bytes
            .checked_add(size_bytes)
            .is_none_or(|after| after > max)
    });
    // A channel that has used every offset is full for good: wrapping
    // would reuse offsets (invariant 9).
    let Some(after_next) = state.next.checked_add(1) else {
        return Ok(Outcome::Refused(Refusal::ChannelFull));
    };
    if over_channel {
        return Ok(Outcome::Refused(Refusal::ChannelFull));
    }
    if !budget.admits_append(size_bytes) {
        return Ok(Outcome::Refused(Refusal::ProviderFull));
    }
    let offset = state.next;
    tables.insert_record(channel, offset, message)?;
    state.next = after_next;
    state.record_bytes += size_bytes;
    state.record_count += 1;
    tables.set_state(channel, state)?;
    budget.charge(size_bytes);
    Ok(Outcome::Appended { offset })
}

fn set_position<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    reader: &str,
    offset: u64,
) -> Result<Outcome, StoreError> {
    let mut state = tables.state(channel)?;
    if offset > state.next {
        return Ok(Outcome::Refused(Refusal::PositionPastNext {
            next: state.next,
        }));
    }
    if tables.position(channel, reader)?.is_some() {
        tables.set_position(channel, reader, offset)?;
        return Ok(Outcome::PositionSet);
    }
    let size_bytes = position_size_bytes(reader);
    if !budget.admits_relief(size_bytes) {
        return Ok(Outcome::Refused(Refusal::ProviderFull));
    }
    tables.set_position(channel, reader, offset)?;
    state.position_bytes += size_bytes;
    state.position_count += 1;
    tables.set_state(channel, state)?;
    budget.charge(size_bytes);
    Ok(Outcome::PositionSet)
}

fn drop_position<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    reader: &str,
) -> Result<Outcome, StoreError> {
    if !tables.remove_position(channel, reader)? {
        return Ok(Outcome::PositionDropped { existed: false });
    }
    let mut state = tables.state(channel)?;
    let size_bytes = position_size_bytes(reader);
    state.position_bytes = state.position_bytes.saturating_sub(size_bytes);
    state.position_count = state.position_count.saturating_sub(1);
    tables.set_state(channel, state)?;
    budget.release(size_bytes);
    Ok(Outcome::PositionDropped { existed: true })
}

/// Removes from the oldest and stops at the first record that stays, so a
/// trim reads what it removes rather than what the channel holds. The
/// floor rises in the same batch (invariant 1), never falls, and `next` is
/// never touched (invariant 9).
fn trim<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    rule: TrimRule,
    max_records: u32,
) -> Result<Trimmed, StoreError> {
    let mut state = tables.state(channel)?;
    let max_records = max_records as usize;
    // One more than may go, to tell "stopped at the bound" from "done".
    let heads = tables.oldest(channel, max_records + 1)?;
    let mut remaining_bytes = state.record_bytes;
    let mut removed = Vec::with_capacity(heads.len().min(max_records));
    let mut freed_bytes = 0u64;
    let mut more = false;
    for head in &heads {
        let goes = match rule {
            TrimRule::BeforeOffset(before) => head.offset < before,
            // An unset time is 0, which taken at face value is older than
            // everything: such a record is never too old.
            TrimRule::OlderThan { cutoff_ms } => {
                head.received_at_ms != 0 && head.received_at_ms < cutoff_ms
            }
            TrimRule::ToBytes(target) => remaining_bytes > target,
        };
        if !goes {
            break;
        }
        if removed.len() == max_records {
            more = true;
            break;
        }
        removed.push(head.offset);
        remaining_bytes = remaining_bytes.saturating_sub(head.size_bytes);
        freed_bytes += head.size_bytes;
    }
    tables.remove_records(channel, &removed)?;
    let mut floor = state.floor;
    if let Some(&last) = removed.last() {
        floor = floor.max(last + 1);
    }
    if let (TrimRule::BeforeOffset(before), false) = (rule, more) {
        floor = floor.max(before.min(state.next));
    }
    if floor != state.floor || !removed.is_empty() {
        state.floor = floor;
        state.record_bytes = state.record_bytes.saturating_sub(freed_bytes);
        state.record_count = state.record_count.saturating_sub(removed.len() as u64);
        tables.set_state(channel, state)?;
        budget.release(freed_bytes);
    }
    Ok(Trimmed {
        removed_records: removed.len() as u64,
        freed_bytes,
        floor,
        more,
    })
}

/// Removes one record. The floor moves only when the oldest record held
/// goes, and then only up to the next one still held: a gap left in the
/// middle stays readable around.
fn remove<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    offset: u64,
) -> Result<Outcome, StoreError> {
    let mut state = tables.state(channel)?;
    let Some(head) = tables.record_head(channel, offset)? else {
        return Ok(Outcome::Removed {
            existed: false,
            freed_bytes: 0,
            floor: state.floor,
        });
    };
    let was_oldest = tables
        .oldest(channel, 1)?
        .first()
        .is_some_and(|oldest| oldest.offset == offset);
    tables.remove_records(channel, &[offset])?;
    if was_oldest {
        let after = tables
            .oldest(channel, 1)?
            .first()
            .map_or(state.next, |oldest| oldest.offset);
        state.floor = state.floor.max(after);
    }
    state.record_bytes = state.record_bytes.saturating_sub(head.size_bytes);
    state.record_count = state.record_count.saturating_sub(1);
    tables.set_state(channel, state)?;
    budget.release(head.size_bytes);
    Ok(Outcome::Removed {
        existed: true,
        freed_bytes: head.size_bytes,
        floor: state.floor,
    })
}

fn put_entry<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    key: &str,
    value: &[u8],
    use_reserve: bool,
) -> Result<Outcome, StoreError> {
    let mut state = tables.state(channel)?;
    let old_bytes = tables
        .entry_len(channel, key)?
        .map(|len| entry_size_bytes(key, len));
    let new_bytes = entry_size_bytes(key, value.len() as u64);
    // Only growth is judged against the bound: a replacement no larger
    // than what it replaces always fits.
    let growth = new_bytes.saturating_sub(old_bytes.unwrap_or(0));
    let admitted = growth == 0
        || if use_reserve {
            budget.admits_relief(growth)
        } else {
            budget.admits_append(growth)
        };
    if !admitted {
        return Ok(Outcome::Refused(Refusal::ProviderFull));
    }
    tables.put_entry(channel, key, value)?;
    budget.release(old_bytes.unwrap_or(0));
    budget.charge(new_bytes);
    state.entry_bytes = state.entry_bytes.saturating_sub(old_bytes.unwrap_or(0)) + new_bytes;
    if old_bytes.is_none() {
        state.entry_count += 1;
    }
    tables.set_state(channel, state)?;
    Ok(Outcome::EntryPut)
}

fn drop_entry_of<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    key: &str,
) -> Result<Outcome, StoreError> {
    let Some(len) = tables.entry_len(channel, key)? else {
        return Ok(Outcome::EntryDropped { existed: false });
    };
    let mut state = tables.state(channel)?;
    let size_bytes = entry_size_bytes(key, len);
    tables.remove_entry(channel, key)?;
    state.entry_bytes = state.entry_bytes.saturating_sub(size_bytes);
    state.entry_count = state.entry_count.saturating_sub(1);
    tables.set_state(channel, state)?;
    budget.release(size_bytes);
    Ok(Outcome::EntryDropped { existed: true })
}

/// Moves one record: removed from `channel` and `message` appended to
/// `to`, both or neither. Judged against `max_bytes` (the reserve may be
/// used) for only what the new record adds over the one it replaces.
fn move_record<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    offset: u64,
    to: &str,
    message: &Message,
) -> Result<Outcome, StoreError> {
    let Some(head) = tables.record_head(channel, offset)? else {
        let floor = tables.state(channel)?.floor;
        return Ok(Outcome::Moved {
            to_offset: None,
            floor,
        });
    };
    let size_bytes = message.size_bytes();
    let mut target = tables.state(to)?;
    let Some(after_next) = target.next.checked_add(1) else {
        return Ok(Outcome::Refused(Refusal::ChannelFull));
    };
    if !budget.admits_relief(size_bytes.saturating_sub(head.size_bytes)) {
        return Ok(Outcome::Refused(Refusal::ProviderFull));
    }
    let Outcome::Removed { floor, .. } = remove(tables, budget, channel, offset)? else {
        unreachable!("remove answers Removed");
    };
    let to_offset = target.next;
    tables.insert_record(to, to_offset, message)?;
    target.next = after_next;
    target.record_bytes += size_bytes;
    target.record_count += 1;
    tables.set_state(to, target)?;
    budget.charge(size_bytes);
    Ok(Outcome::Moved {
        to_offset: Some(to_offset),
        floor,
    })
}

/// Appends `message` and removes the record at `offset` in one write. The
/// bounds see only the growth: the new record less the one it replaces.
fn replace<T: Tables>(
    tables: &mut T,
    budget: &mut Budget,
    channel: &str,
    offset: u64,
    message: &Message,
    channel_max_bytes: Option<u64>,
) -> Result<Outcome, StoreError> {
    let Some(old) = tables.record_head(channel, offset)? else {
        return append(tables, budget, channel, message, channel_max_bytes);
    };
    let state = tables.state(channel)?;
    let size_bytes = message.size_bytes();
    let growth = size_bytes.saturating_sub(old.size_bytes);
    if state.next.checked_add(1).is_none() {
        return Ok(Outcome::Refused(Refusal::ChannelFull));
    }
    let over_channel = channel_max_bytes.is_some_and(|max| {
        growth > 0
            && (state.record_bytes - old.size_bytes)
                .checked_add(size_bytes)
                .is_none_or(|after| after > max)
    });
    if over_channel {
        return Ok(Outcome::Refused(Refusal::ChannelFull));
    }
    if growth > 0 && !budget.admits_append(growth) {
        return Ok(Outcome::Refused(Refusal::ProviderFull));
    }
    remove(tables, budget, channel, offset)?;
    let mut state = tables.state(channel)?;
    let new_offset = state.next;
    tables.insert_record(channel, new_offset, message)?;
    state.next += 1;
    state.record_bytes += size_bytes;
    state.record_count += 1;
    tables.set_state(channel, state)?;
    budget.charge(size_bytes);
    Ok(Outcome::Appended { offset: new_offset })
}
