//! Message identity (invariant 8): a publisher's own `saguin-id`, or a
//! UUIDv7 the broker generates.
//!
//! The generator is sans-IO: it is handed the time, and seeded once from
//! the standard library's per-process random keys, so it needs no crate of
//! its own.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

/// The longest publisher-supplied id a record keeps.
pub const MAX_MESSAGE_ID_TEXT_BYTES: usize = 255;

/// A message's identity, unchanged by redelivery, dead-lettering and replay.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MessageId {
    /// A UUID in its 16 bytes: one the broker generated, or a publisher's
    /// `saguin-id` written in canonical lowercase form.
    Uuid([u8; 16]),
    /// A publisher's `saguin-id` in any other form, kept byte for byte so it
    /// goes back out exactly as it came in.
    Text(String),
}

impl MessageId {
    /// The id for a publisher's `saguin-id`. Canonical lowercase UUID text
    /// is held as 16 bytes; anything else is held as written.
    pub fn from_publisher(text: &str) -> MessageId {
        match parse_canonical(text) {
            Some(bytes) => MessageId::Uuid(bytes),
            None => MessageId::Text(text.to_string()),
        }
    }

    /// What the id occupies in a stored record.
    pub fn stored_len(&self) -> usize {
        match self {
            MessageId::Uuid(_) => 16,
            MessageId::Text(t) => t.len(),
        }
    }
}

impl fmt::Display for MessageId {
    /// The text delivered as `saguin-id`: 8-4-4-4-12 lowercase hex for a
    /// UUID, the publisher's text otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageId::Text(t) => f.write_str(t),
            MessageId::Uuid(b) => {
                // Every stored record is labelled with this text, so it is
                // built in one buffer rather than through 16 `{:02x}`s.
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = [0u8; 36];
                let mut at = 0;
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        text[at] = b'-';
                        at += 1;
                    }
                    text[at] = HEX[usize::from(byte >> 4)];
                    text[at + 1] = HEX[usize::from(byte & 0xf)];
                    at += 2;
                }
                f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
            }
        }
    }
}

/// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` in lowercase hex only, so
/// that formatting the bytes gives back the same text.
fn parse_canonical(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut nibbles = bytes
        .iter()
        .enumerate()
        .filter(|(i, _)| !matches!(i, 8 | 13 | 18 | 23));
    if [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return None;
    }
    for byte in &mut out {
        let (_, hi) = nibbles.next()?;
        let (_, lo) = nibbles.next()?;
        *byte = (hex_value(*hi)? << 4) | hex_value(*lo)?;
    }
    Some(out)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Generates UUIDv7 ids (RFC 9562): 48 bits of Unix milliseconds, a 12-bit
/// counter that keeps ids from one millisecond in order, and 62 random
/// bits. Ids from one generator are strictly increasing even when the
/// clock steps back: the generator carries on from the last millisecond it
/// used rather than going backwards.
#[derive(Clone, Debug)]
pub struct MessageIdGenerator {
    last_ms: u64,
    counter: u16,
    random_state: u64,
}

const COUNTER_MAX: u16 = 0x0FFF;
const TIMESTAMP_MASK: u64 = (1 << 48) - 1;

impl MessageIdGenerator {
    /// A generator seeded from `seed` (tests use a fixed one).
    pub fn with_seed(seed: u64) -> Self {
        MessageIdGenerator {
            last_ms: 0,
            counter: 0,
            // splitmix64 never leaves a zero state, whatever the seed.
            random_state: seed,
        }
    }

    /// A generator seeded from the process's random hash keys, which the
    /// standard library draws from the operating system.
    pub fn from_entropy() -> Self {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Self::with_seed(hasher.finish())
    }

    /// The next id, for a message received at `now_ms`.
    pub fn next_id(&mut self, now_ms: u64) -> MessageId {
        let now_ms = now_ms & TIMESTAMP_MASK;
        if now_ms > self.last_ms {
            self.last_ms = now_ms;
            self.counter = 0;
        } else if self.counter < COUNTER_MAX {
            self.counter += 1;
        } else {
            // 4096 ids in one millisecond: borrow the next millisecond
            // rather than repeat or reorder.
            self.last_ms = (self.last_ms + 1) & TIMESTAMP_MASK;
            self.counter = 0;
        }
        let random = self.next_random();
        let mut b = [0u8; 16];
        b[..6].copy_from_slice(&self.last_ms.to_be_bytes()[2..]);
        b[6] = 0x70 | ((self.counter >> 8) as u8 & 0x0F);
        b[7] = self.counter as u8;
        b[8..].copy_from_slice(&random.to_be_bytes());
        b[8] = 0x80 | (b[8] & 0x3F);
        MessageId::Uuid(b)
    }

    /// splitmix64: small, fast, and plenty for ids that only need to differ.
    fn next_random(&mut self) -> u64 {
        self.random_state = self.random_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.random_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(id: &MessageId) -> [u8; 16] {
        match id {
            MessageId::Uuid(b) => *b,
            MessageId::Text(t) => panic!("expected a uuid, got {t}"),
        }
    }

    #[test]
    fn a_v7_id_carries_its_version_variant_and_time() {
        let mut g = MessageIdGenerator::with_seed(7);
        let id = g.next_id(0x0123_4567_89AB);
        let b = bytes(&id);
        assert_eq!(&b[..6], &[0x01, 0x23, 0x45, 0x67, 0x89, 0xAB]);
        assert_eq!(b[6] >> 4, 7, "version");
        assert_eq!(b[8] >> 6, 0b10, "variant");
        let text = id.to_string();
        assert_eq!(text.len(), 36);
        assert!(text.starts_with("01234567-89ab-7"), "{text}");
    }

    #[test]
    fn ids_rise_within_a_millisecond_and_when_the_clock_steps_back() {
        let mut g = MessageIdGenerator::with_seed(1);
        let mut last = bytes(&g.next_id(1_000));
        for now_ms in [1_000, 1_000, 999, 500, 1_000, 1_001] {
            let b = bytes(&g.next_id(now_ms));
            assert!(b > last, "{b:?} after {last:?}");
            last = b;
        }
        // Exhausting the counter borrows the next millisecond.
        let mut g = MessageIdGenerator::with_seed(2);
        let mut last = bytes(&g.next_id(5));
        for _ in 0..5_000 {
            let b = bytes(&g.next_id(5));
            assert!(b > last);
            last = b;
        }
    }

    #[test]
    fn publisher_text_round_trips_exactly() {
        let canonical = "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b";
        let id = MessageId::from_publisher(canonical);
        assert!(matches!(id, MessageId::Uuid(_)));
        assert_eq!(id.to_string(), canonical);
        for other in [
            "0190A3B4-5C6D-7E8F-9A0B-1C2D3E4F5A6B",
            "order-42",
            "",
            "0190a3b45c6d7e8f9a0b1c2d3e4f5a6b",
            "0190a3b4-5c6d-7e8f-9a0b-1c2d3e4f5a6g",
        ] {
            let id = MessageId::from_publisher(other);
            assert_eq!(id, MessageId::Text(other.to_string()));
            assert_eq!(id.to_string(), other);
        }
    }

    #[test]
    fn entropy_seeds_differ() {
        let a = MessageIdGenerator::from_entropy().next_id(1);
        let b = MessageIdGenerator::from_entropy().next_id(1);
        assert_ne!(a, b);
    }
}
