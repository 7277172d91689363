//! The checks a batch passes before a provider touches anything: every one
//! depends only on the writes themselves, never on what is stored, so a
//! batch that fails them has changed nothing in either provider.

use super::error::StoreError;
use super::message_id::{MessageId, MAX_MESSAGE_ID_TEXT_BYTES};
use super::types::{Message, Write, FIRST_OFFSET};

/// The longest channel name a store keeps (RFC 0002's channel name limit).
pub const MAX_CHANNEL_NAME_BYTES: usize = 128;
/// The longest reader name: a scheme such as `mqtt:` and a client id or
/// bridge name of up to 65535 bytes.
pub const MAX_READER_BYTES: usize = 65_535 + 16;
/// The longest string field of a record: MQTT's own string limit.
pub const MAX_STRING_BYTES: usize = 65_535;
/// The largest payload: the largest `max_message_size` the configuration
/// admits.
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024 * 1024;
/// The most User Properties one record may carry.
pub const MAX_USER_PROPERTIES: usize = 65_535;
/// The most records one trim write may remove, so a transaction stays
/// bounded however far behind retention has fallen.
pub const MAX_TRIM_RECORDS: u32 = 65_536;
/// The longest key of a keyed entry.
pub const MAX_ENTRY_KEY_BYTES: usize = 4_096;
/// The largest value of a keyed entry: a largest payload with room for
/// what a session or a job keeps beside it.
pub const MAX_ENTRY_VALUE_BYTES: usize = MAX_PAYLOAD_BYTES + 64 * 1024;
/// The most writes one batch may hold.
pub const MAX_BATCH_WRITES: usize = 4_096;

pub(crate) fn check_writes(writes: &[Write]) -> Result<(), StoreError> {
    if writes.len() > MAX_BATCH_WRITES {
        return Err(StoreError::Invalid(format!(
            "a batch of {} writes is more than the {MAX_BATCH_WRITES} one transaction takes",
            writes.len()
        )));
    }
    for (i, w) in writes.iter().enumerate() {
        check_write(w).map_err(|why| StoreError::Invalid(format!("write {i}: {why}")))?;
    }
    Ok(())
}

fn check_write(w: &Write) -> Result<(), String> {
    check_channel_name(w.channel())?;
    if let Some(other) = w.other_channel() {
        check_channel_name(other)?;
    }
    match w {
        Write::Append { message, .. } => check_message(message),
        Write::Replace {
            offset, message, ..
        } => {
            if *offset < FIRST_OFFSET {
                return Err(format!(
                    "offsets start at {FIRST_OFFSET}, so {offset} names no record to replace"
                ));
            }
            check_message(message)
        }
        Write::SetPosition { reader, offset, .. } => {
            check_reader(reader)?;
            // Offsets start at 1, so 0 is no offset at all: as a seek it
            // means the floor, and a caller storing it has not resolved it.
            if *offset < FIRST_OFFSET {
                return Err(format!(
                    "a position is an offset, and offsets start at {FIRST_OFFSET}, not {offset}"
                ));
            }
            Ok(())
        }
        Write::DropPosition { reader, .. } => check_reader(reader),
        Write::Trim { max_records, .. } => {
            if *max_records == 0 || *max_records > MAX_TRIM_RECORDS {
                Err(format!(
                    "a trim removes 1 to {MAX_TRIM_RECORDS} records, not {max_records}"
                ))
            } else {
                Ok(())
            }
        }
        Write::Remove { offset, .. } => {
            if *offset < FIRST_OFFSET {
                return Err(format!(
                    "offsets start at {FIRST_OFFSET}, so {offset} names no record"
                ));
            }
            Ok(())
        }
        Write::PutEntry { key, value, .. } => {
            check_entry_key(key)?;
            if value.len() > MAX_ENTRY_VALUE_BYTES {
                return Err(format!(
                    "an entry value of {} bytes is longer than {MAX_ENTRY_VALUE_BYTES}",
                    value.len()
                ));
            }
            Ok(())
        }
        Write::DropEntry { key, .. } => check_entry_key(key),
        Write::Move {
            channel,
            offset,
            to,
            message,
            drop_entry,
        } => {
            if let Some(key) = drop_entry {
                check_entry_key(key)?;
            }
            if channel == to {
                return Err(format!(
                    "a move takes a record out of {channel:?} into another channel"
                ));
            }
            if *offset < FIRST_OFFSET {
                return Err(format!(
                    "offsets start at {FIRST_OFFSET}, so {offset} names no record"
                ));
            }
            check_message(message)
        }
    }
}

fn check_entry_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_ENTRY_KEY_BYTES {
        return Err(format!(
            "an entry key is 1 to {MAX_ENTRY_KEY_BYTES} bytes, not {}",
            key.len()
        ));
    }
    Ok(())
}

/// A channel name the store can key and, on a memory provider, name a
/// file after.
pub fn check_channel_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_CHANNEL_NAME_BYTES {
        return Err(format!(
            "a channel name is 1 to {MAX_CHANNEL_NAME_BYTES} bytes, and {name:?} is {}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("channel name {name:?} holds a control character"));
    }
    Ok(())
}

fn check_reader(reader: &str) -> Result<(), String> {
    if reader.is_empty() || reader.len() > MAX_READER_BYTES {
        return Err(format!(
            "a reader name is 1 to {MAX_READER_BYTES} bytes, not {}",
            reader.len()
        ));
    }
    Ok(())
}

fn check_message(m: &Message) -> Result<(), String> {
    let long = |what: &str, len: usize, max: usize| -> Result<(), String> {
        if len > max {
            Err(format!("{what} of {len} bytes is longer than {max}"))
        } else {
            Ok(())
        }
    };
    if let MessageId::Text(t) = &m.id {
        long("a message id", t.len(), MAX_MESSAGE_ID_TEXT_BYTES)?;
    }
    long("a topic", m.topic.len(), MAX_STRING_BYTES)?;
    long("a payload", m.payload.len(), MAX_PAYLOAD_BYTES)?;
    if m.user_properties.len() > MAX_USER_PROPERTIES {
        return Err(format!(
            "{} user properties are more than {MAX_USER_PROPERTIES}",
            m.user_properties.len()
        ));
    }
    for (k, v) in &m.user_properties {
        long("a user property name", k.len(), MAX_STRING_BYTES)?;
        long("a user property value", v.len(), MAX_STRING_BYTES)?;
    }
    for (what, field) in [
        ("a content type", &m.content_type),
        ("a response topic", &m.response_topic),
        ("a publisher client id", &m.publisher),
    ] {
        long(
            what,
            field.as_ref().map_or(0, String::len),
            MAX_STRING_BYTES,
        )?;
    }
    long(
        "correlation data",
        m.correlation_data.as_ref().map_or(0, Vec::len),
        MAX_STRING_BYTES,
    )?;
    if m.qos > 2 {
        return Err(format!("QoS {} is not 0, 1 or 2", m.qos));
    }
    Ok(())
}
