//! Client-declared partitioning: a subscriber names the slice of a hash
//! space it takes with `saguin-filter: topic_hash(<partitions>, <index>)`
//! User Properties on its SUBSCRIBE (rfcs/0015). The hash is part of the
//! protocol - a client computes it to know its own slice - so it is spelled
//! out here with fixed-width arithmetic and no seed.

use crate::core::refusal::Refusal;

/// The User Property a SUBSCRIBE declares a slice with.
pub const DECLARATION: &str = "saguin-filter";

/// The largest partition count or index: one bound on every target, so a
/// declaration legal on a 64-bit server is legal on a 32-bit gateway.
const ARGUMENT_MAX: u64 = 2_147_483_647;

const FNV_OFFSET_BASIS: u64 = 14_695_981_039_346_656_037;
const FNV_PRIME: u64 = 1_099_511_628_211;
const MIX_FIRST: u64 = 13_787_848_793_156_543_929;
const MIX_SECOND: u64 = 10_723_151_780_598_845_931;

/// FNV-1a 64 over the topic's UTF-8 bytes: the first half of the hash.
fn fnv1a_64(topic: &str) -> u64 {
    topic.bytes().fold(FNV_OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The finalizer: FNV-1a barely stirs its low bits, which are the ones a
/// modulus reads, so they are mixed from the high ones before slicing.
fn mix(mut hash: u64) -> u64 {
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(MIX_FIRST);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(MIX_SECOND);
    hash ^ (hash >> 31)
}

/// The value a topic's slice is taken from.
pub fn topic_hash(topic: &str) -> u64 {
    mix(fnv1a_64(topic))
}

/// The slices one SUBSCRIBE declared: one partition count, and the
/// indices it takes (sorted, each once), which are an OR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    partitions: u32,
    indices: Box<[u32]>,
}

impl Slice {
    /// A slice of `partitions` taking `indices`; `None` when the count is 0
    /// or an index is not below it.
    pub fn new(partitions: u32, indices: &[u32]) -> Option<Slice> {
        if partitions == 0 || indices.is_empty() || indices.iter().any(|&i| i >= partitions) {
            return None;
        }
        let mut indices = indices.to_vec();
        indices.sort_unstable();
        indices.dedup();
        Some(Slice {
            partitions,
            indices: indices.into(),
        })
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    pub fn indices(&self) -> &[u32] {
        &self.indices
    }

    /// Whether a topic with this hash falls in the slice.
    pub fn admits_hash(&self, hash: u64) -> bool {
        let index = hash % u64::from(self.partitions);
        // Below `partitions`, so it fits a u32.
        self.indices.binary_search(&(index as u32)).is_ok()
    }

    pub fn admits(&self, topic: &str) -> bool {
        self.admits_hash(topic_hash(topic))
    }
}

/// Whether `topic` reaches a subscription with this declaration: an
/// undeclared subscription takes every topic.
pub fn admits(slice: Option<&Slice>, topic: &str) -> bool {
    slice.is_none_or(|slice| slice.admits(topic))
}

/// The slice a SUBSCRIBE's User Properties declare: `None` when it carries
/// no `saguin-filter`, a refusal naming the broken rule when one is not a
/// well-formed call or two name different counts.
pub fn declared(user_properties: &[(String, String)]) -> Result<Option<Slice>, Refusal> {
    let mut partitions = None;
    let mut indices = Vec::new();
    for (_, value) in user_properties.iter().filter(|(n, _)| n == DECLARATION) {
        let (count, index) = parse_call(value)?;
        if *partitions.get_or_insert(count) != count {
            return Err(Refusal::SliceCountsDiffer);
        }
        indices.push(index);
    }
    Ok(partitions.and_then(|count| Slice::new(count, &indices)))
}

/// Space, tab, carriage return and line feed: the only characters ignored
/// in a declaration, and only around its tokens.
fn is_declaration_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// One `topic_hash(<partitions>, <index>)` call.
fn parse_call(value: &str) -> Result<(u32, u32), Refusal> {
    let call = value.trim_matches(is_declaration_space);
    let (Some(open), Some(inner_end)) = (call.find('('), call.strip_suffix(')')) else {
        return Err(Refusal::SliceNotACall);
    };
    let name = call[..open].trim_end_matches(is_declaration_space);
    if name.is_empty() {
        return Err(Refusal::SliceNotACall);
    }
    if name != "topic_hash" {
        return Err(Refusal::SliceUnknownFunction);
    }
    let inner = &inner_end[open + 1..];
    let arguments: Vec<&str> = if inner.trim_matches(is_declaration_space).is_empty() {
        Vec::new()
    } else {
        inner.split(',').collect()
    };
    let [partitions, index] = arguments[..] else {
        return Err(Refusal::SliceArgumentCount);
    };
    let partitions = parse_argument(partitions)?;
    let index = parse_argument(index)?;
    if partitions == 0 {
        return Err(Refusal::SlicePartitionsZero);
    }
    if index >= partitions {
        return Err(Refusal::SliceIndexOutOfRange);
    }
    Ok((partitions, index))
}

/// Decimal digits and nothing else; leading zeros are allowed.
fn parse_argument(text: &str) -> Result<u32, Refusal> {
    let digits = text.trim_matches(is_declaration_space);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::SliceArgumentNotDigits);
    }
    let value = digits.bytes().try_fold(0u64, |value, digit| {
        let value = value * 10 + u64::from(digit - b'0');
        (value <= ARGUMENT_MAX).then_some(value)
    });
    match value {
        // At most ARGUMENT_MAX, which fits a u32.
        Some(value) => Ok(value as u32),
        None => Err(Refusal::SliceArgumentTooLarge),
    }
}

/// Where a declaration may not go: a shared subscription and a queue's
/// form already divide their stream, so slicing them is refused. Decided
/// by the prefixes alone, before asking which channels the filter reaches.
pub fn refused_on(filter: &str) -> Option<Refusal> {
    if filter.starts_with("$share/") {
        Some(Refusal::SliceOnShared)
    } else if filter.starts_with("$saguin/queue/") {
        Some(Refusal::SliceOnQueue)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's worked examples: FNV-1a alone, after mixing, and the
    /// slices of 3 and 8 - equal on every target the tests run on.
    #[test]
    fn the_hash_equals_the_worked_examples_bit_for_bit() {
        let examples: [(&str, u64, u64, u64, u64); 4] = [
            (
                "iot/depot/events/dev-1",
                9_321_193_355_118_713_112,
                16_961_261_177_379_703_000,
                1,
                0,
            ),
            (
                "iot/water/w-7/inspect",
                14_147_658_934_179_859_562,
                16_406_880_391_913_018_636,
                2,
                4,
            ),
            (
                "orders/resize/thumbnails/42",
                15_020_795_679_369_718_730,
                10_596_179_872_049_748_585,
                0,
                1,
            ),
            (
                "a",
                12_638_187_200_555_641_996,
                198_367_012_849_983_736,
                1,
                0,
            ),
        ];
        for (topic, fnv, mixed, mod3, mod8) in examples {
            assert_eq!(fnv1a_64(topic), fnv, "{topic}: FNV-1a");
            assert_eq!(topic_hash(topic), mixed, "{topic}: after mixing");
            assert_eq!(topic_hash(topic) % 3, mod3, "{topic} mod 3");
            assert_eq!(topic_hash(topic) % 8, mod8, "{topic} mod 8");
            assert!(Slice::new(3, &[mod3 as u32]).unwrap().admits(topic));
            assert!(!Slice::new(3, &[(mod3 as u32 + 1) % 3])
                .unwrap()
                .admits(topic));
        }
    }

    /// A topic carrying its identifier twice defeats FNV-1a's low bits;
    /// the mixed hash still splits such topics evenly.
    #[test]
    fn repeated_identifiers_split_evenly_in_four() {
        let mut counts = [0u32; 4];
        for id in 0..4000 {
            let topic = format!("devices/{id}/messages/devicebound/{id}");
            counts[(topic_hash(&topic) % 4) as usize] += 1;
        }
        for count in counts {
            assert!((900..1100).contains(&count), "{counts:?}");
        }
    }

    fn one(value: &str) -> Result<Option<Slice>, Refusal> {
        declared(&[(DECLARATION.to_string(), value.to_string())])
    }

    #[test]
    fn well_formed_declarations() {
        let slice = |p, i: &[u32]| Ok(Some(Slice::new(p, i).unwrap()));
        assert_eq!(one("topic_hash(3, 0)"), slice(3, &[0]));
        assert_eq!(one(" \ttopic_hash ( 3 ,\r\n2 ) "), slice(3, &[2]));
        assert_eq!(one("topic_hash(0008,007)"), slice(8, &[7]));
        assert_eq!(one("topic_hash(1,0)"), slice(1, &[0]));
        assert_eq!(
            one("topic_hash(2147483647, 2147483646)"),
            slice(2_147_483_647, &[2_147_483_646])
        );
        let two = [
            (DECLARATION.to_string(), "topic_hash(8, 5)".to_string()),
            ("other".to_string(), "topic_hash(2, 9)".to_string()),
            (DECLARATION.to_string(), "topic_hash(8, 1)".to_string()),
            (DECLARATION.to_string(), "topic_hash(8, 5)".to_string()),
        ];
        assert_eq!(declared(&two), slice(8, &[1, 5]));
        assert_eq!(declared(&[]), Ok(None));
    }

    #[test]
    fn every_malformed_declaration_names_its_rule() {
        use Refusal::*;
        let cases = [
            ("", SliceNotACall),
            ("   ", SliceNotACall),
            ("3, 0", SliceNotACall),
            ("(3, 0)", SliceNotACall),
            ("topic_hash(3, 0", SliceNotACall),
            ("topic_hash", SliceNotACall),
            ("$topic_hash % 3 == 0", SliceNotACall),
            ("TOPIC_HASH(3, 0)", SliceUnknownFunction),
            ("topic_hash2(3, 0)", SliceUnknownFunction),
            ("\u{a0}topic_hash(3, 0)", SliceUnknownFunction),
            ("topic_hash()", SliceArgumentCount),
            ("topic_hash(3)", SliceArgumentCount),
            ("topic_hash(3, 0, 1)", SliceArgumentCount),
            ("topic_hash(+3, 0)", SliceArgumentNotDigits),
            ("topic_hash(0x3, 0)", SliceArgumentNotDigits),
            ("topic_hash(3e0, 0)", SliceArgumentNotDigits),
            ("topic_hash(3, -0)", SliceArgumentNotDigits),
            ("topic_hash(3, )", SliceArgumentNotDigits),
            ("topic_hash(3,\u{a0}0)", SliceArgumentNotDigits),
            ("topic_hash(3 1, 0)", SliceArgumentNotDigits),
            ("topic_hash(2147483648, 0)", SliceArgumentTooLarge),
            (
                "topic_hash(100000000000000000000000, 0)",
                SliceArgumentTooLarge,
            ),
            ("topic_hash(0, 0)", SlicePartitionsZero),
            ("topic_hash(3, 3)", SliceIndexOutOfRange),
            ("topic_hash(1, 8)", SliceIndexOutOfRange),
        ];
        for (value, refusal) in cases {
            assert_eq!(one(value), Err(refusal), "{value:?}");
        }
        let differ = [
            (DECLARATION.to_string(), "topic_hash(4, 0)".to_string()),
            (DECLARATION.to_string(), "topic_hash(6, 1)".to_string()),
        ];
        assert_eq!(declared(&differ), Err(SliceCountsDiffer));
    }

    #[test]
    fn shared_and_queue_forms_refuse_a_declaration_by_prefix() {
        assert_eq!(refused_on("$share/g/a/#"), Some(Refusal::SliceOnShared));
        assert_eq!(
            refused_on("$saguin/queue/jobs"),
            Some(Refusal::SliceOnQueue)
        );
        assert_eq!(refused_on("a/#"), None);
        assert_eq!(refused_on("#"), None);
    }
}
