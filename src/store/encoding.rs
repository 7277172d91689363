//! The byte form of a message and of a channel's counters, shared by the
//! redb provider's values and the snapshot files.
//!
//! Little-endian throughout; every variable-length field is a `u32` length
//! and its bytes. Decoding checks every declared length and count against
//! the bytes actually present before it allocates anything, so a damaged
//! value cannot ask for four gigabytes.

use super::message_id::MessageId;
use super::types::{ChannelState, Message, FIRST_OFFSET};

/// Why bytes could not be decoded; the caller adds which file or key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) String);

pub(crate) type Decoded<T> = Result<T, DecodeError>;

fn fail<T>(why: impl Into<String>) -> Decoded<T> {
    Err(DecodeError(why.into()))
}

/// Appends fields to a buffer.
#[derive(Default)]
pub(crate) struct Encoder {
    pub(crate) buf: Vec<u8>,
}

impl Encoder {
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        Encoder {
            buf: Vec::with_capacity(bytes),
        }
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// A length and the bytes. Lengths were validated before encoding (see
    /// `validate`), so one past `u32` is a bug, not an input.
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        let len = u32::try_from(v.len()).expect("field lengths are validated below u32::MAX");
        self.u32(len);
        self.buf.extend_from_slice(v);
    }

    pub(crate) fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
}

/// Reads fields from a slice, refusing anything that runs past its end.
pub(crate) struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Decoder { bytes, at: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Decoded<&'a [u8]> {
        if n > self.remaining() {
            return fail(format!(
                "{what} needs {n} bytes at byte {} and only {} remain: the data is truncated or damaged",
                self.at,
                self.remaining()
            ));
        }
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    pub(crate) fn fixed<const N: usize>(&mut self, what: &str) -> Decoded<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: &str) -> Decoded<u8> {
        Ok(self.fixed::<1>(what)?[0])
    }

    pub(crate) fn u32(&mut self, what: &str) -> Decoded<u32> {
        Ok(u32::from_le_bytes(self.fixed(what)?))
    }

    pub(crate) fn u64(&mut self, what: &str) -> Decoded<u64> {
        Ok(u64::from_le_bytes(self.fixed(what)?))
    }

    /// A length-prefixed field, checked against what remains before use.
    pub(crate) fn bytes(&mut self, what: &str) -> Decoded<&'a [u8]> {
        let len = self.u32(what)?;
        let len = usize::try_from(len).map_err(|_| DecodeError(format!("{what} is too long")))?;
        self.take(len, what)
    }

    pub(crate) fn string(&mut self, what: &str) -> Decoded<String> {
        let raw = self.bytes(what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => fail(format!("{what} is not valid UTF-8")),
        }
    }

    /// A count of items each at least `min_item_bytes` long: refused when
    /// the bytes left could not hold that many, before anything is sized
    /// from it.
    pub(crate) fn count(&mut self, what: &str, min_item_bytes: usize) -> Decoded<usize> {
        let n = self.u32(what)?;
        let n = usize::try_from(n).map_err(|_| DecodeError(format!("{what} is too large")))?;
        if n.saturating_mul(min_item_bytes.max(1)) > self.remaining() {
            return fail(format!(
                "{what} says {n}, more than the {} bytes left could hold: the data is damaged",
                self.remaining()
            ));
        }
        Ok(n)
    }

    pub(crate) fn finish(&self, what: &str) -> Decoded<()> {
        if self.remaining() != 0 {
            return fail(format!(
                "{} bytes follow the end of {what}: the data is damaged",
                self.remaining()
            ));
        }
        Ok(())
    }
}

const FLAG_RETAIN: u8 = 1 << 0;
const FLAG_PAYLOAD_FORMAT: u8 = 1 << 1;
const FLAG_EXPIRY: u8 = 1 << 2;
const FLAG_CONTENT_TYPE: u8 = 1 << 3;
const FLAG_RESPONSE_TOPIC: u8 = 1 << 4;
const FLAG_CORRELATION: u8 = 1 << 5;
const FLAG_PUBLISHER: u8 = 1 << 6;
const FLAGS_KNOWN: u8 = (1 << 7) - 1;

const ID_UUID: u8 = 1;
const ID_TEXT: u8 = 2;

/// Where the receipt time and the counted size sit in an encoded message,
/// so a trim by age and a size sum read them without decoding the rest.
pub(crate) const MESSAGE_HEADER_BYTES: usize = 16;

/// The fewest bytes an encoded message can take: the header, flags, QoS,
/// id kind, then an empty text id, topic, payload and property count.
pub(crate) const MESSAGE_MIN_BYTES: usize = MESSAGE_HEADER_BYTES + 3 + 4 * 4;

pub(crate) fn encode_message(m: &Message, e: &mut Encoder) {
    e.u64(m.received_at_ms);
    e.u64(m.size_bytes());
    let mut flags = 0;
    for (set, flag) in [
        (m.retain, FLAG_RETAIN),
        (m.payload_format_indicator.is_some(), FLAG_PAYLOAD_FORMAT),
        (m.message_expiry_interval_s.is_some(), FLAG_EXPIRY),
        (m.content_type.is_some(), FLAG_CONTENT_TYPE),
        (m.response_topic.is_some(), FLAG_RESPONSE_TOPIC),
        (m.correlation_data.is_some(), FLAG_CORRELATION),
        (m.publisher.is_some(), FLAG_PUBLISHER),
    ] {
        if set {
            flags |= flag;
        }
    }
    e.u8(flags);
    e.u8(m.qos);
    match &m.id {
        MessageId::Uuid(b) => {
            e.u8(ID_UUID);
            e.buf.extend_from_slice(b);
        }
        MessageId::Text(t) => {
            e.u8(ID_TEXT);
            e.str(t);
        }
    }
    e.str(&m.topic);
    e.bytes(&m.payload);
    let count = u32::try_from(m.user_properties.len()).expect("validated");
    e.u32(count);
    for (k, v) in &m.user_properties {
        e.str(k);
        e.str(v);
    }
    if let Some(v) = m.payload_format_indicator {
        e.u8(v);
    }
    if let Some(v) = m.message_expiry_interval_s {
        e.u32(v);
    }
    for s in [&m.content_type, &m.response_topic].into_iter().flatten() {
        e.str(s);
    }
    if let Some(v) = &m.correlation_data {
        e.bytes(v);
    }
    if let Some(v) = &m.publisher {
        e.str(v);
    }
}

/// The message as bytes, for a redb value.
pub(crate) fn message_bytes(m: &Message) -> Vec<u8> {
    let mut e = Encoder::with_capacity(m.size_bytes() as usize);
    encode_message(m, &mut e);
    e.buf
}

/// The receipt time and counted size at the head of an encoded message.
pub(crate) fn message_header(bytes: &[u8]) -> Decoded<(u64, u64)> {
    let mut d = Decoder::new(bytes);
    Ok((d.u64("the receipt time")?, d.u64("the record size")?))
}

pub(crate) fn decode_message(d: &mut Decoder<'_>) -> Decoded<Message> {
    let received_at_ms = d.u64("the receipt time")?;
    let size_bytes = d.u64("the record size")?;
    let flags = d.u8("the flags")?;
    if flags & !FLAGS_KNOWN != 0 {
        return fail(format!("unknown record flags {flags:#04x}"));
    }
    let qos = d.u8("the QoS")?;
    if qos > 2 {
        return fail(format!("QoS {qos} is not 0, 1 or 2"));
    }
    let id = match d.u8("the message id kind")? {
        ID_UUID => MessageId::Uuid(d.fixed("the message id")?),
        ID_TEXT => MessageId::Text(d.string("the message id")?),
        other => return fail(format!("unknown message id kind {other}")),
    };
    let topic = d.string("the topic")?;
    let payload = d.bytes("the payload")?.to_vec();
    let count = d.count("the user property count", 8)?;
    let mut user_properties = Vec::with_capacity(count);
    for _ in 0..count {
        let k = d.string("a user property name")?;
        let v = d.string("a user property value")?;
        user_properties.push((k, v));
    }
    let has = |flag: u8| flags & flag != 0;
    let payload_format_indicator = if has(FLAG_PAYLOAD_FORMAT) {
        Some(d.u8("the payload format indicator")?)
    } else {
        None
    };
    let message_expiry_interval_s = if has(FLAG_EXPIRY) {
        Some(d.u32("the message expiry interval")?)
    } else {
        None
    };
    let content_type = has(FLAG_CONTENT_TYPE)
        .then(|| d.string("the content type"))
        .transpose()?;
    let response_topic = has(FLAG_RESPONSE_TOPIC)
        .then(|| d.string("the response topic"))
        .transpose()?;
    let correlation_data = has(FLAG_CORRELATION)
        .then(|| d.bytes("the correlation data").map(<[u8]>::to_vec))
        .transpose()?;
    let publisher = has(FLAG_PUBLISHER)
        .then(|| d.string("the publisher"))
        .transpose()?;
    let m = Message {
        id,
        received_at_ms,
        topic,
        payload,
        user_properties,
        payload_format_indicator,
        message_expiry_interval_s,
        content_type,
        response_topic,
        correlation_data,
        publisher,
        qos,
        retain: has(FLAG_RETAIN),
    };
    if m.size_bytes() != size_bytes {
        return fail(format!(
            "the record says it counts {size_bytes} bytes and its fields count {}",
            m.size_bytes()
        ));
    }
    Ok(m)
}

/// A whole value holding exactly one message.
pub(crate) fn message_from_bytes(bytes: &[u8]) -> Decoded<Message> {
    let mut d = Decoder::new(bytes);
    let m = decode_message(&mut d)?;
    d.finish("the record")?;
    Ok(m)
}

/// The fixed size of an encoded [`ChannelState`].
pub(crate) const CHANNEL_STATE_BYTES: usize = 64;

pub(crate) fn encode_channel_state(s: &ChannelState, e: &mut Encoder) {
    for v in [
        s.next,
        s.floor,
        s.record_bytes,
        s.record_count,
        s.position_bytes,
        s.position_count,
        s.entry_bytes,
        s.entry_count,
    ] {
        e.u64(v);
    }
}

pub(crate) fn decode_channel_state(d: &mut Decoder<'_>) -> Decoded<ChannelState> {
    let s = ChannelState {
        next: d.u64("next")?,
        floor: d.u64("floor")?,
        record_bytes: d.u64("the record bytes")?,
        record_count: d.u64("the record count")?,
        position_bytes: d.u64("the position bytes")?,
        position_count: d.u64("the position count")?,
        entry_bytes: d.u64("the entry bytes")?,
        entry_count: d.u64("the entry count")?,
    };
    // Offsets start at 1: a floor of 0 (and so a `next` of 0) was never
    // written by this layout, whatever else the row says.
    if s.floor < FIRST_OFFSET {
        return fail(format!(
            "the floor {} is below the first offset {FIRST_OFFSET}: the counters are damaged",
            s.floor
        ));
    }
    if s.floor > s.next {
        return fail(format!(
            "the floor {} is past next {}: the counters are damaged",
            s.floor, s.next
        ));
    }
    if s.record_count > s.next - s.floor {
        return fail(format!(
            "{} records cannot lie between floor {} and next {}",
            s.record_count, s.floor, s.next
        ));
    }
    Ok(s)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A message with every field set, repeated user property names and a
    /// binary payload: what a round trip must carry whole.
    pub(crate) fn full_message() -> Message {
        Message {
            id: MessageId::Uuid([7; 16]),
            received_at_ms: 1_700_000_000_123,
            topic: "iot/site-1/dev-9/events".into(),
            payload: vec![0, 1, 2, 255, 254, 0],
            user_properties: vec![
                ("b".into(), "2".into()),
                ("a".into(), "1".into()),
                ("b".into(), "3".into()),
            ],
            payload_format_indicator: Some(1),
            message_expiry_interval_s: Some(3600),
            content_type: Some("application/json".into()),
            response_topic: Some("reply/here".into()),
            correlation_data: Some(vec![9, 8, 7]),
            publisher: Some("dev-9".into()),
            qos: 2,
            retain: true,
        }
    }

    pub(crate) fn plain_message(topic: &str, payload: &[u8]) -> Message {
        Message {
            qos: 0,
            ..Message::new(
                MessageId::Text("m".into()),
                0,
                topic.into(),
                payload.to_vec(),
            )
        }
    }

    #[test]
    fn messages_round_trip() {
        for m in [full_message(), plain_message("t", b"")] {
            let bytes = message_bytes(&m);
            assert_eq!(message_from_bytes(&bytes), Ok(m.clone()));
            assert_eq!(
                message_header(&bytes),
                Ok((m.received_at_ms, m.size_bytes()))
            );
        }
        let mut smallest = plain_message("", b"");
        smallest.id = MessageId::Text(String::new());
        assert_eq!(message_bytes(&smallest).len(), MESSAGE_MIN_BYTES);
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = message_bytes(&full_message());
        for cut in 0..bytes.len() {
            assert!(message_from_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(message_from_bytes(&longer).is_err());
    }

    #[test]
    fn a_huge_declared_count_is_refused_before_allocation() {
        let mut m = plain_message("t", b"x");
        m.user_properties.push(("k".into(), "v".into()));
        let mut bytes = message_bytes(&m);
        // The user property count sits after header, flags, qos, id, topic
        // and payload.
        let at = MESSAGE_HEADER_BYTES + 2 + 1 + 4 + 1 + 4 + 1 + 4 + 1;
        assert_eq!(&bytes[at..at + 4], &1u32.to_le_bytes());
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = message_from_bytes(&bytes).unwrap_err();
        assert!(err.0.contains("more than the"), "{err:?}");
    }

    #[test]
    fn a_size_that_disagrees_with_the_fields_is_refused() {
        let mut bytes = message_bytes(&full_message());
        bytes[8] ^= 1;
        assert!(message_from_bytes(&bytes).unwrap_err().0.contains("counts"));
    }

    #[test]
    fn channel_states_round_trip_and_are_checked() {
        let s = ChannelState {
            next: u64::from(u32::MAX) + 10,
            floor: u64::from(u32::MAX) + 2,
            record_bytes: 5_000_000_000,
            record_count: 8,
            position_bytes: 40,
            position_count: 1,
            entry_bytes: 70,
            entry_count: 2,
        };
        let mut e = Encoder::default();
        encode_channel_state(&s, &mut e);
        assert_eq!(e.buf.len(), CHANNEL_STATE_BYTES);
        assert_eq!(decode_channel_state(&mut Decoder::new(&e.buf)), Ok(s));
        let decode = |s: ChannelState| {
            let mut e = Encoder::default();
            encode_channel_state(&s, &mut e);
            decode_channel_state(&mut Decoder::new(&e.buf))
        };
        assert_eq!(decode(ChannelState::default()), Ok(ChannelState::default()));
        let past = decode(ChannelState {
            floor: 11,
            next: 10,
            ..ChannelState::default()
        });
        assert!(past.unwrap_err().0.contains("past next"));
        // Offsets start at 1: a floor of 0 is damage, even with nothing
        // else wrong, and so is the all-zero row of a 0-based layout.
        for (floor, next) in [(0, 0), (0, 3)] {
            let err = decode(ChannelState {
                floor,
                next,
                ..ChannelState::default()
            })
            .unwrap_err();
            assert!(err.0.contains("below the first offset 1"), "{err:?}");
        }
        let crowded = decode(ChannelState {
            floor: 1,
            next: 3,
            record_count: 3,
            ..ChannelState::default()
        });
        assert!(crowded.unwrap_err().0.contains("cannot lie between"));
    }
}
