//! A quick hash for maps on the publish path whose keys the broker or its
//! operator chooses: channel names, configured filter levels, tickets.
//!
//! The standard library's SipHash resists a client who picks keys to
//! collide, and costs a few hundred instructions for a short string; these
//! maps are probed several times per durable record. Their keys come from
//! the configuration or from counters, so no client can fill them with
//! colliding entries: a lookup with a client's string meets at most the
//! few keys the operator wrote. Maps keyed by what clients choose keep
//! SipHash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` with [`FastHasher`].
pub(crate) type FastHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Multiply-rotate over eight bytes at a time (the scheme rustc's own
/// tables use), finished with a multiply so the top bits, which pick a
/// hashbrown group, depend on every input bit.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length keeps "a" apart from "a\0".
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
            .wrapping_mul(0x9e_37_79_b9_7f_4a_7c_15)
            .rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};

    fn hash(s: &str) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(s)
    }

    #[test]
    fn strings_that_differ_anywhere_hash_apart() {
        let names = [
            "",
            "a",
            "a\0",
            "b",
            "ab",
            "ba",
            "durable",
            "durable/a",
            "durable/b",
            "12345678",
            "123456789",
            "123456780",
            "sensors/+/temp",
        ];
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(hash(a), hash(b), "{a:?} and {b:?}");
            }
        }
    }

    #[test]
    fn sequential_tickets_spread_over_the_top_bits() {
        // hashbrown picks a control byte from the top 7 bits: counters
        // must not all land on one.
        let build = BuildHasherDefault::<FastHasher>::default();
        let tops: std::collections::HashSet<u64> =
            (0..1_000u64).map(|n| build.hash_one(n) >> 57).collect();
        assert!(tops.len() > 100, "{} distinct top bytes", tops.len());
    }
}
