//! The values a provider stores and answers with: a message and the record
//! it becomes, a channel's counters, the writes a batch holds and what
//! each of them came to.
//!
//! Every on-disk number is `u64` or `u32`, never `usize`, so a 32-bit
//! gateway reads a file exactly as a 64-bit one wrote it.

use super::message_id::MessageId;

/// What a record costs beyond its variable-length fields, in the unit the
/// bounds count: the offset, the timestamp, the flags and the fixed-size
/// properties, plus the bookkeeping either provider keeps beside them. A
/// constant rather than a measurement, so both providers count a record
/// identically and a trim gives back exactly what the append charged.
pub const RECORD_OVERHEAD_BYTES: u64 = 64;

/// What a stored consumer position costs beyond its reader name.
pub const POSITION_OVERHEAD_BYTES: u64 = 32;

/// What a keyed entry costs beyond its key and value.
pub const ENTRY_OVERHEAD_BYTES: u64 = 32;

/// A published message as a channel keeps it: everything a consumer
/// replaying the channel is owed, and the publisher's client id for
/// No Local (which is never sent to a client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Stable for the life of the message (invariant 8).
    pub id: MessageId,
    /// The broker's receipt clock in Unix milliseconds; 0 means unset, and
    /// a record with no time is never too old for retention.
    pub received_at_ms: u64,
    pub topic: String,
    pub payload: Vec<u8>,
    /// MQTT 5 User Properties in the publisher's order, repeated names kept.
    pub user_properties: Vec<(String, String)>,
    pub payload_format_indicator: Option<u8>,
    pub message_expiry_interval_s: Option<u32>,
    pub content_type: Option<String>,
    pub response_topic: Option<String>,
    pub correlation_data: Option<Vec<u8>>,
    /// The publishing client id, for No Local; `None` for a message with
    /// no MQTT publisher (a bridge, a redrive).
    pub publisher: Option<String>,
    /// The QoS it was published at, 0 to 2.
    pub qos: u8,
    /// The retain flag the publisher set: stored, not acted on.
    pub retain: bool,
}

impl Message {
    /// A QoS 1 message with only what every record has: no properties, no
    /// publisher, no retain flag.
    pub fn new(id: MessageId, received_at_ms: u64, topic: String, payload: Vec<u8>) -> Message {
        Message {
            id,
            received_at_ms,
            topic,
            payload,
            user_properties: Vec::new(),
            payload_format_indicator: None,
            message_expiry_interval_s: None,
            content_type: None,
            response_topic: None,
            correlation_data: None,
            publisher: None,
            qos: 1,
            retain: false,
        }
    }

    /// What this message counts against a channel's and a provider's byte
    /// bounds. Both providers count with this one function.
    pub fn size_bytes(&self) -> u64 {
        // Summed as u64: on a 32-bit target the lengths are each a usize,
        // and only their total is what the bounds compare.
        let len = |n: usize| n as u64;
        let optional = |s: &Option<String>| s.as_ref().map_or(0, |s| len(s.len()));
        len(self.topic.len())
            + len(self.payload.len())
            + len(self.id.stored_len())
            + self
                .user_properties
                .iter()
                .map(|(k, v)| len(k.len()) + len(v.len()))
                .sum::<u64>()
            + optional(&self.content_type)
            + optional(&self.response_topic)
            + self.correlation_data.as_ref().map_or(0, |c| len(c.len()))
            + optional(&self.publisher)
            + RECORD_OVERHEAD_BYTES
    }
}

/// A message at its place in a channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Assigned by the store from the channel's `next`; never reused.
    pub offset: u64,
    pub message: Message,
}

/// A channel's stored counters. `next` and `floor` are kept, never derived
/// from the records that survive (invariants 1 and 9): deleting every
/// record changes neither, and only a removal raises the floor, in the same
/// transaction.
///
/// A channel nothing has been written to has `next` and `floor` at
/// [`FIRST_OFFSET`] and everything else at zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelState {
    /// The offset the next record takes.
    pub next: u64,
    /// The oldest offset that can still be read; a read below it is refused.
    pub floor: u64,
    /// Sum of [`Message::size_bytes`] over the records held.
    pub record_bytes: u64,
    pub record_count: u64,
    /// What the stored positions on this channel count against the provider.
    pub position_bytes: u64,
    pub position_count: u64,
    /// What the channel's keyed entries count against the provider.
    pub entry_bytes: u64,
    pub entry_count: u64,
}

/// The first record of a channel has offset 1, so that a seek's `0` (the
/// floor) and `-1` (the head) can never be mistaken for an offset.
pub const FIRST_OFFSET: u64 = 1;

impl Default for ChannelState {
    fn default() -> Self {
        ChannelState {
            next: FIRST_OFFSET,
            floor: FIRST_OFFSET,
            record_bytes: 0,
            record_count: 0,
            position_bytes: 0,
            position_count: 0,
            entry_bytes: 0,
            entry_count: 0,
        }
    }
}

/// A provider's byte bound and what is using it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    /// The configured `max_bytes`.
    pub max_bytes: u64,
    /// Held back from appends for the writes that relieve a full provider:
    /// one largest record, `max_message_size + max_header_bytes`.
    pub reserve_bytes: u64,
    /// Records, positions and entries, as counted (not the size of any
    /// file).
    pub used_bytes: u64,
}

impl Usage {
    /// Where appends stop.
    pub fn append_limit_bytes(&self) -> u64 {
        self.max_bytes.saturating_sub(self.reserve_bytes)
    }
}

/// Which records a trim removes, always from the oldest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimRule {
    /// Every record below this offset; the floor rises to it (at most to
    /// `next`) once they are gone.
    BeforeOffset(u64),
    /// Records received before this Unix time in milliseconds, stopping at
    /// the first that is not (and at any with no timestamp).
    OlderThan { cutoff_ms: u64 },
    /// The oldest records until the channel holds at most this many bytes.
    ToBytes(u64),
}

/// One change to a provider. A batch of them commits in one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Store a message at the channel's `next` offset. Refused, without
    /// failing the batch, when it would take the provider into its reserve
    /// or the channel past `channel_max_bytes`.
    Append {
        channel: String,
        message: Message,
        /// The channel's own `max_bytes`, if it has one.
        channel_max_bytes: Option<u64>,
    },
    /// Store a reader's position (the next offset it will read). May use
    /// the reserve: it relieves rather than fills.
    SetPosition {
        channel: String,
        reader: String,
        offset: u64,
    },
    DropPosition {
        channel: String,
        reader: String,
    },
    /// Remove the oldest records by `rule`, at most `max_records` of them,
    /// raising the floor in the same transaction.
    Trim {
        channel: String,
        rule: TrimRule,
        max_records: u32,
    },
    /// Store a message at `next` and remove the record at `offset` it
    /// replaces, both or neither: a `latest` channel's new value for a
    /// topic. Judged against the bounds only for what it adds over the
    /// record it replaces, so a value no larger than the last always fits.
    /// Where no record is held at `offset`, it is a plain append.
    Replace {
        channel: String,
        offset: u64,
        message: Message,
        channel_max_bytes: Option<u64>,
    },
    /// Remove one record wherever it lies (a resolved job, a superseded
    /// value). May use the reserve: it relieves. When it was the oldest
    /// record held, the floor rises to the next one still held, or to
    /// `next`.
    Remove {
        channel: String,
        offset: u64,
    },
    /// Store or replace one keyed entry beside the channel's records (a
    /// session, a job's attempt count). Refused when it would take the
    /// provider into its reserve, or past `max_bytes` with `use_reserve`.
    PutEntry {
        channel: String,
        key: String,
        value: Vec<u8>,
        use_reserve: bool,
    },
    DropEntry {
        channel: String,
        key: String,
    },
    /// Move one record into another channel (a job into its dead-letter
    /// channel) in one step: `message` is appended to `to` and the record
    /// at `offset` removed from `channel`, or neither happens. May use the
    /// reserve, since it takes work out of a channel that needs relief; it
    /// is refused, changing nothing, only when even `max_bytes` cannot take
    /// what `message` adds over the record it replaces.
    Move {
        channel: String,
        offset: u64,
        to: String,
        message: Message,
        /// An entry of `channel` dropped with the record (a job's attempt
        /// count): only when the record moves, so a refused move keeps it.
        drop_entry: Option<String>,
    },
}

impl Write {
    /// The channel this write is about.
    pub fn channel(&self) -> &str {
        match self {
            Write::Append { channel, .. }
            | Write::SetPosition { channel, .. }
            | Write::DropPosition { channel, .. }
            | Write::Trim { channel, .. }
            | Write::Replace { channel, .. }
            | Write::Remove { channel, .. }
            | Write::PutEntry { channel, .. }
            | Write::DropEntry { channel, .. }
            | Write::Move { channel, .. } => channel,
        }
    }

    /// The second channel a write changes: a move's destination.
    pub fn other_channel(&self) -> Option<&str> {
        match self {
            Write::Move { to, .. } => Some(to),
            _ => None,
        }
    }

    pub fn is_append(&self) -> bool {
        matches!(self, Write::Append { .. } | Write::Replace { .. })
    }
}

/// Why one write was refused while the rest of its batch went on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The provider is at `max_bytes` (for an append: at the reserve). The
    /// broker answers a publish with 0x97.
    ProviderFull,
    /// The channel is at its own `max_bytes`. Also 0x97.
    ChannelFull,
    /// A position past the channel's `next` would point at an offset that
    /// does not exist yet.
    PositionPastNext { next: u64 },
}

/// What a trim did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trimmed {
    pub removed_records: u64,
    pub freed_bytes: u64,
    /// The floor after the trim.
    pub floor: u64,
    /// Stopped at `max_records` with more to remove: run it again.
    pub more: bool,
}

/// What one write came to, in the order the writes were given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Appended {
        offset: u64,
    },
    Refused(Refusal),
    PositionSet,
    PositionDropped {
        existed: bool,
    },
    Trimmed(Trimmed),
    Removed {
        existed: bool,
        freed_bytes: u64,
        /// The floor after the removal.
        floor: u64,
    },
    EntryPut,
    EntryDropped {
        existed: bool,
    },
    /// `to_offset` is where the record now is in the destination; `None`
    /// when the source held no record at that offset, and nothing moved.
    Moved {
        to_offset: Option<u64>,
        /// The source's floor after the move.
        floor: u64,
    },
}

/// How much one read may return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimit {
    /// At most this many records (at least 1 is sensible).
    pub max_records: u32,
    /// At most this many bytes as [`Message::size_bytes`] counts them,
    /// except that the first record is always returned, so a record larger
    /// than the limit can still be read. A record is bounded by
    /// `max_message_size`, so the batch stays bounded.
    pub max_bytes: u64,
}

/// Records read from a channel, with the counters from the same snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBatch {
    pub floor: u64,
    pub next: u64,
    /// Ascending offsets from the requested one; empty when caught up.
    pub records: Vec<Record>,
}

/// The answer to a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    Records(ReadBatch),
    /// The requested offset is below the floor: those records were
    /// removed, and nothing is served in their place (invariant 1).
    BelowFloor {
        floor: u64,
    },
    /// The requested offset is past `next`: no record has it yet, and a
    /// position there is not one this channel ever handed out.
    PastNext {
        next: u64,
    },
}

/// The answer for a read that returns no records: below the floor, past
/// next, or caught up.
pub(crate) fn empty_read(s: ChannelState, from_offset: u64) -> Read {
    if from_offset < s.floor {
        Read::BelowFloor { floor: s.floor }
    } else if from_offset > s.next {
        Read::PastNext { next: s.next }
    } else {
        Read::Records(ReadBatch {
            floor: s.floor,
            next: s.next,
            records: Vec::new(),
        })
    }
}
