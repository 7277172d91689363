//! Refusals counted by the reason the metrics catalogue labels them with.
//!
//! The label is the MQTT specification's name for the code the client was
//! answered with, in lower case. Three labels are not codes: the two
//! `0x97` answers an operator acts on differently from a full store (a
//! publisher over its rate, and one holding too many unfinished
//! exactly-once exchanges), and a Will the session store had no room for,
//! which is a store to look at rather than a client. Counting is one array
//! increment: the vocabulary is closed, so no label is ever allocated.

use super::refusal::Refusal;
use crate::codec::ReasonCode;

/// Names of the error codes 0x80 to 0xA2, in code order.
const CODE_NAMES: [&str; 35] = [
    "unspecified error",
    "malformed packet",
    "protocol error",
    "implementation specific error",
    "unsupported protocol version",
    "client identifier not valid",
    "bad user name or password",
    "not authorized",
    "server unavailable",
    "server busy",
    "banned",
    "server shutting down",
    "bad authentication method",
    "keep alive timeout",
    "session taken over",
    "topic filter invalid",
    "topic name invalid",
    "packet identifier in use",
    "packet identifier not found",
    "receive maximum exceeded",
    "topic alias invalid",
    "packet too large",
    "message rate too high",
    "quota exceeded",
    "administrative action",
    "payload format invalid",
    "retain not supported",
    "qos not supported",
    "use another server",
    "server moved",
    "shared subscriptions not supported",
    "connection rate exceeded",
    "maximum connect time",
    "subscription identifiers not supported",
    "wildcard subscriptions not supported",
];

/// The labels that are not a code's name, after [`CODE_NAMES`].
const SPLIT_NAMES: [&str; 4] = [
    "publish rate exceeded",
    "inflight allowance exceeded",
    "session store full",
    // A code outside the error range: nothing the table answers with.
    "rejected",
];

const LABELS: usize = CODE_NAMES.len() + SPLIT_NAMES.len();

/// Counts by reason label; each is zero until its reason happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasonCounts([u64; LABELS]);

impl Default for ReasonCounts {
    fn default() -> ReasonCounts {
        ReasonCounts([0; LABELS])
    }
}

/// Why something was refused: a rule of the table, or a code of the
/// codec's own for a packet that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Rule(Refusal),
    Code(ReasonCode),
}

impl From<Refusal> for Reason {
    fn from(refusal: Refusal) -> Reason {
        Reason::Rule(refusal)
    }
}

impl Reason {
    /// The label the catalogue and the refused-clients route name it by.
    pub fn label(self) -> &'static str {
        label_name(self.index())
    }

    fn index(self) -> usize {
        match self {
            Reason::Rule(refusal) => label_of(refusal),
            Reason::Code(code) => label_of_code(code),
        }
    }
}

fn label_name(index: usize) -> &'static str {
    match CODE_NAMES.get(index) {
        Some(name) => name,
        None => SPLIT_NAMES[index - CODE_NAMES.len()],
    }
}

impl ReasonCounts {
    /// One refusal.
    pub fn count(&mut self, reason: impl Into<Reason>) {
        self.0[reason.into().index()] += 1;
    }

    /// One refusal answered with a code of the codec's own, for a packet
    /// that could not be read.
    pub fn count_code(&mut self, code: ReasonCode) {
        self.count(Reason::Code(code));
    }

    /// `n` refusals answered `server busy`.
    pub fn add_busy(&mut self, n: u64) {
        self.0[label_of_code(ReasonCode::SERVER_BUSY)] += n;
    }

    /// The labels counted at least once, with their counts.
    pub fn nonzero(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        CODE_NAMES
            .iter()
            .chain(SPLIT_NAMES.iter())
            .zip(self.0.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(label, n)| (*label, *n))
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

fn label_of(refusal: Refusal) -> usize {
    let split = |i: usize| CODE_NAMES.len() + i;
    match refusal {
        Refusal::PublishRateExceeded => split(0),
        Refusal::InflightExceeded => split(1),
        Refusal::WillNoRoom => split(2),
        other => label_of_code(other.code()),
    }
}

fn label_of_code(code: ReasonCode) -> usize {
    match code.0 {
        0x80..=0xA2 => usize::from(code.0 - 0x80),
        _ => CODE_NAMES.len() + 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_is_counted_under_its_codes_name_or_its_own() {
        let mut counts = ReasonCounts::default();
        counts.count(Refusal::PublishNotAuthorized);
        counts.count(Refusal::DeadLetterPublish);
        counts.count(Refusal::PublishRateExceeded);
        counts.count(Refusal::ChannelFull);
        counts.count(Refusal::WillNoRoom);
        counts.count_code(ReasonCode::MALFORMED_PACKET);
        counts.count_code(ReasonCode(0x10));
        counts.add_busy(2);
        let seen: Vec<_> = counts.nonzero().collect();
        assert_eq!(
            seen,
            [
                ("malformed packet", 1),
                ("not authorized", 2),
                ("server busy", 2),
                ("quota exceeded", 1),
                ("publish rate exceeded", 1),
                ("session store full", 1),
                ("rejected", 1),
            ]
        );
        assert_eq!(counts.total(), 9);
        assert_eq!(
            Reason::Rule(Refusal::InflightExceeded).label(),
            "inflight allowance exceeded"
        );
        assert_eq!(
            Reason::Code(ReasonCode::MALFORMED_PACKET).label(),
            "malformed packet"
        );
    }

    #[test]
    fn every_rule_of_the_table_has_a_label_that_is_not_rejected() {
        for &refusal in Refusal::ALL {
            assert!(label_of(refusal) < LABELS - 1, "{refusal:?}");
        }
        assert_eq!(CODE_NAMES[usize::from(0x97u8 - 0x80)], "quota exceeded");
        assert_eq!(
            CODE_NAMES[usize::from(0xA2u8 - 0x80)],
            "wildcard subscriptions not supported"
        );
    }
}
