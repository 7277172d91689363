//! The byte form of a batch of writes: a journal frame's payload. A tag
//! byte per write, then its fields in declaration order, messages in the
//! record encoding, optional fields behind a presence byte.

use std::ops::Range;

use super::encoding::{decode_message, encode_message, DecodeError, Decoded, Decoder, Encoder};
use super::types::{TrimRule, Write};

const APPEND: u8 = 1;
const SET_POSITION: u8 = 2;
const DROP_POSITION: u8 = 3;
const TRIM: u8 = 4;
const REPLACE: u8 = 5;
const REMOVE: u8 = 6;
const PUT_ENTRY: u8 = 7;
const DROP_ENTRY: u8 = 8;
const MOVE: u8 = 9;

const TRIM_BEFORE_OFFSET: u8 = 1;
const TRIM_OLDER_THAN: u8 = 2;
const TRIM_TO_BYTES: u8 = 3;

/// The fewest bytes a write takes: its tag and an empty channel name.
const WRITE_MIN_BYTES: usize = 5;

/// A batch's bytes, and where each append's record encoding lies in them,
/// in order: the bytes redb stores for the record, so the apply need not
/// encode it again.
pub(crate) fn encode_batch<'w>(
    writes: impl ExactSizeIterator<Item = &'w Write> + Clone,
) -> (Vec<u8>, Vec<Range<usize>>) {
    // Sized up front from the messages' counted sizes (which include a
    // record's fixed overhead), so the buffer is not grown record by record.
    let estimate: u64 = writes.clone().map(estimated_bytes).sum();
    let mut e = Encoder::with_capacity(usize::try_from(estimate).unwrap_or(0).saturating_add(4));
    e.u32(u32::try_from(writes.len()).unwrap_or(u32::MAX));
    let mut records = Vec::with_capacity(writes.len());
    for w in writes {
        records.extend(encode_write(w, &mut e));
    }
    (e.buf, records)
}

/// About what a write's encoding takes: exact enough to size a buffer.
fn estimated_bytes(write: &Write) -> u64 {
    const SMALL_WRITE_BYTES: u64 = 64;
    match write {
        Write::Append { message, .. }
        | Write::Replace { message, .. }
        | Write::Move { message, .. } => message.size_bytes(),
        Write::PutEntry { value, .. } => SMALL_WRITE_BYTES + value.len() as u64,
        _ => SMALL_WRITE_BYTES,
    }
}

pub(crate) fn decode_batch(bytes: &[u8]) -> Decoded<Vec<Write>> {
    let mut d = Decoder::new(bytes);
    let n = d.count("the number of writes", WRITE_MIN_BYTES)?;
    let mut writes = Vec::with_capacity(n);
    for _ in 0..n {
        writes.push(decode_write(&mut d)?);
    }
    d.finish("the batch")?;
    Ok(writes)
}

fn option_u64(v: Option<u64>, e: &mut Encoder) {
    match v {
        Some(v) => {
            e.u8(1);
            e.u64(v);
        }
        None => e.u8(0),
    }
}

fn decode_option_u64(d: &mut Decoder<'_>, what: &str) -> Decoded<Option<u64>> {
    match d.u8(what)? {
        0 => Ok(None),
        1 => Ok(Some(d.u64(what)?)),
        other => Err(DecodeError(format!("{what}: presence byte {other}"))),
    }
}

/// Encodes `w`; for an append, returns where its record's encoding went.
fn encode_write(w: &Write, e: &mut Encoder) -> Option<Range<usize>> {
    match w {
        Write::Append {
            channel,
            message,
            channel_max_bytes,
        } => {
            e.u8(APPEND);
            e.str(channel);
            let start = e.buf.len();
            encode_message(message, e);
            let record = start..e.buf.len();
            option_u64(*channel_max_bytes, e);
            return Some(record);
        }
        Write::SetPosition {
            channel,
            reader,
            offset,
        } => {
            e.u8(SET_POSITION);
            e.str(channel);
            e.str(reader);
            e.u64(*offset);
        }
        Write::DropPosition { channel, reader } => {
            e.u8(DROP_POSITION);
            e.str(channel);
            e.str(reader);
        }
        Write::Trim {
            channel,
            rule,
            max_records,
        } => {
            e.u8(TRIM);
            e.str(channel);
            let (kind, value) = match rule {
                TrimRule::BeforeOffset(v) => (TRIM_BEFORE_OFFSET, *v),
                TrimRule::OlderThan { cutoff_ms } => (TRIM_OLDER_THAN, *cutoff_ms),
                TrimRule::ToBytes(v) => (TRIM_TO_BYTES, *v),
            };
            e.u8(kind);
            e.u64(value);
            e.u32(*max_records);
        }
        Write::Replace {
            channel,
            offset,
            message,
            channel_max_bytes,
        } => {
            e.u8(REPLACE);
            e.str(channel);
            e.u64(*offset);
            encode_message(message, e);
            option_u64(*channel_max_bytes, e);
        }
        Write::Remove { channel, offset } => {
            e.u8(REMOVE);
            e.str(channel);
            e.u64(*offset);
        }
        Write::PutEntry {
            channel,
            key,
            value,
            use_reserve,
        } => {
            e.u8(PUT_ENTRY);
            e.str(channel);
            e.str(key);
            e.bytes(value);
            e.u8(u8::from(*use_reserve));
        }
        Write::DropEntry { channel, key } => {
            e.u8(DROP_ENTRY);
            e.str(channel);
            e.str(key);
        }
        Write::Move {
            channel,
            offset,
            to,
            message,
            drop_entry,
        } => {
            e.u8(MOVE);
            e.str(channel);
            e.u64(*offset);
            e.str(to);
            encode_message(message, e);
            match drop_entry {
                Some(key) => {
                    e.u8(1);
                    e.str(key);
                }
                None => e.u8(0),
            }
        }
    }
    None
}

fn decode_write(d: &mut Decoder<'_>) -> Decoded<Write> {
    let tag = d.u8("a write's kind")?;
    let channel = d.string("a write's channel")?;
    Ok(match tag {
        APPEND => Write::Append {
            channel,
            message: decode_message(d)?,
            channel_max_bytes: decode_option_u64(d, "the channel's max_bytes")?,
        },
        SET_POSITION => Write::SetPosition {
            channel,
            reader: d.string("the reader")?,
            offset: d.u64("the position")?,
        },
        DROP_POSITION => Write::DropPosition {
            channel,
            reader: d.string("the reader")?,
        },
        TRIM => {
            let kind = d.u8("the trim rule")?;
            let value = d.u64("the trim bound")?;
            let rule = match kind {
                TRIM_BEFORE_OFFSET => TrimRule::BeforeOffset(value),
                TRIM_OLDER_THAN => TrimRule::OlderThan { cutoff_ms: value },
                TRIM_TO_BYTES => TrimRule::ToBytes(value),
                other => return Err(DecodeError(format!("unknown trim rule {other}"))),
            };
            Write::Trim {
                channel,
                rule,
                max_records: d.u32("the trim's record bound")?,
            }
        }
        REPLACE => Write::Replace {
            channel,
            offset: d.u64("the replaced offset")?,
            message: decode_message(d)?,
            channel_max_bytes: decode_option_u64(d, "the channel's max_bytes")?,
        },
        REMOVE => Write::Remove {
            channel,
            offset: d.u64("the removed offset")?,
        },
        PUT_ENTRY => Write::PutEntry {
            channel,
            key: d.string("the entry key")?,
            value: d.bytes("the entry value")?.to_vec(),
            use_reserve: match d.u8("the reserve flag")? {
                0 => false,
                1 => true,
                other => return Err(DecodeError(format!("reserve flag {other}"))),
            },
        },
        DROP_ENTRY => Write::DropEntry {
            channel,
            key: d.string("the entry key")?,
        },
        MOVE => Write::Move {
            channel,
            offset: d.u64("the moved offset")?,
            to: d.string("the destination channel")?,
            message: decode_message(d)?,
            drop_entry: match d.u8("the dropped entry's presence")? {
                0 => None,
                1 => Some(d.string("the dropped entry")?),
                other => return Err(DecodeError(format!("presence byte {other}"))),
            },
        },
        other => return Err(DecodeError(format!("unknown write kind {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::encoding::tests::{full_message, plain_message};

    #[test]
    fn every_kind_of_write_comes_back_as_it_went() {
        let writes = vec![
            Write::Append {
                channel: "a".into(),
                message: full_message(),
                channel_max_bytes: Some(99),
            },
            Write::Append {
                channel: "a".into(),
                message: plain_message("t", b"p"),
                channel_max_bytes: None,
            },
            Write::SetPosition {
                channel: "a".into(),
                reader: "mqtt:c".into(),
                offset: 3,
            },
            Write::DropPosition {
                channel: "a".into(),
                reader: "mqtt:c".into(),
            },
            Write::Trim {
                channel: "a".into(),
                rule: TrimRule::BeforeOffset(5),
                max_records: 10,
            },
            Write::Trim {
                channel: "a".into(),
                rule: TrimRule::OlderThan { cutoff_ms: 77 },
                max_records: 1,
            },
            Write::Trim {
                channel: "a".into(),
                rule: TrimRule::ToBytes(1000),
                max_records: 2,
            },
            Write::Replace {
                channel: "l".into(),
                offset: 4,
                message: plain_message("x", b"y"),
                channel_max_bytes: Some(1),
            },
            Write::Remove {
                channel: "q".into(),
                offset: 9,
            },
            Write::PutEntry {
                channel: "$s".into(),
                key: "k".into(),
                value: vec![0, 1, 2],
                use_reserve: true,
            },
            Write::DropEntry {
                channel: "$s".into(),
                key: "k".into(),
            },
            Write::Move {
                channel: "q".into(),
                offset: 2,
                to: "dlq".into(),
                message: full_message(),
                drop_entry: Some("attempts:2".into()),
            },
            Write::Move {
                channel: "q".into(),
                offset: 3,
                to: "dlq".into(),
                message: plain_message("a", b""),
                drop_entry: None,
            },
        ];
        let (bytes, _) = encode_batch(writes.iter());
        assert_eq!(decode_batch(&bytes).unwrap(), writes);
        // Every shortened form is refused, never misread.
        for cut in 0..bytes.len() {
            assert!(decode_batch(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_noted_records_are_the_appends_record_encodings_in_order() {
        let appended = [full_message(), plain_message("t", b"p")];
        let writes = [
            Write::SetPosition {
                channel: "a".into(),
                reader: "mqtt:c".into(),
                offset: 3,
            },
            Write::Append {
                channel: "a".into(),
                message: appended[0].clone(),
                channel_max_bytes: Some(99),
            },
            Write::Move {
                channel: "q".into(),
                offset: 2,
                to: "dlq".into(),
                message: plain_message("moved", b"m"),
                drop_entry: None,
            },
            Write::Append {
                channel: "b".into(),
                message: appended[1].clone(),
                channel_max_bytes: None,
            },
        ];
        let (bytes, records) = encode_batch(writes.iter());
        assert_eq!(records.len(), appended.len());
        for (record, message) in records.iter().zip(&appended) {
            let mut alone = Encoder::default();
            encode_message(message, &mut alone);
            assert_eq!(&bytes[record.clone()], alone.buf.as_slice());
        }
    }
}
