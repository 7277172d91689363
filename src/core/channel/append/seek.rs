//! A consumer moving its own position in an `append` channel: a publish to
//! `$saguin/consumer/<channel>/seek` whose payload names where to go.

use crate::core::channel::PendingAck;
use crate::core::refusal::Refusal;
use crate::core::slab::Key;

/// Where a seek's payload asks to go, before the channel is consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTarget {
    /// `0`: the retention floor.
    Floor,
    /// `-1`: the next offset.
    Head,
    Offset(u64),
    /// A duration ago or an RFC 3339 moment: the earliest offset received
    /// at or after this Unix time in milliseconds.
    Since {
        at_unix_ms: u64,
    },
}

/// The channel a seek topic names, if the topic is one.
pub fn seek_channel(topic: &str) -> Option<&str> {
    let rest = topic.strip_prefix("$saguin/consumer/")?;
    let channel = rest.strip_suffix("/seek")?;
    (!channel.is_empty() && !channel.contains('/')).then_some(channel)
}

/// The topic a seek is answered on when the client set no Response Topic.
pub fn reply_topic(channel: &str) -> String {
    format!("$saguin/consumer/{channel}/seek/reply")
}

/// Reads a seek payload; `None` is `malformed`.
pub fn parse_target(payload: &[u8], now_unix_ms: u64) -> Option<SeekTarget> {
    let text = std::str::from_utf8(payload).ok()?.trim();
    match text {
        "0" => return Some(SeekTarget::Floor),
        "-1" => return Some(SeekTarget::Head),
        _ => {}
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok().map(SeekTarget::Offset);
    }
    if let Some(ago_ms) = parse_duration_ago_ms(text) {
        return Some(SeekTarget::Since {
            at_unix_ms: now_unix_ms.saturating_sub(ago_ms),
        });
    }
    parse_rfc3339_ms(text).map(|at_unix_ms| SeekTarget::Since { at_unix_ms })
}

/// `-12h`, `90m`, `7d`: a duration that means "ago" with or without its
/// sign.
fn parse_duration_ago_ms(text: &str) -> Option<u64> {
    let text = text.strip_prefix('-').unwrap_or(text);
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms)
}

/// An RFC 3339 date-time (`2026-08-14T09:00:00Z`, fractions and offsets
/// allowed) as Unix milliseconds; a bare date is not one.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || !matches!(bytes[10], b'T' | b't')
    {
        return None;
    }
    if bytes[13] != b':' || bytes[16] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut fraction_ms = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(fraction.len());
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        fraction_ms = padded.parse::<u64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_s: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let hours: i64 = rest[1..3].parse().ok()?;
            let minutes: i64 = rest[4..6].parse().ok()?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let days = days_from_civil(year as i64, month as i64, day as i64);
    let seconds = days * 86_400 + (hour * 3600 + minute * 60 + second.min(59)) as i64 - offset_s;
    u64::try_from(seconds)
        .ok()?
        .checked_mul(1000)?
        .checked_add(fraction_ms)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Where a seek's answer goes.
#[derive(Debug, Clone)]
pub(crate) struct SeekReply {
    pub conn: Key,
    pub topic: String,
    pub correlation_data: Option<Vec<u8>>,
    /// The PUBACK slot of a QoS 1 seek.
    pub ack: PendingAck,
}

/// The answer word for a payload that is not a place in a channel.
pub(crate) const MALFORMED: &str = "malformed";

/// The refusal a seek's answer word stands for.
pub(crate) fn seek_refusal(word: &str) -> Refusal {
    match word {
        "below-floor" => Refusal::SeekBelowFloor,
        "beyond-end" => Refusal::SeekBeyondEnd,
        "no-session" => Refusal::SeekNoSession,
        MALFORMED => Refusal::SeekMalformed,
        _ => Refusal::SeekNotStored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_words_name_their_refusals() {
        assert_eq!(seek_refusal("below-floor"), Refusal::SeekBelowFloor);
        assert_eq!(seek_refusal("beyond-end"), Refusal::SeekBeyondEnd);
        assert_eq!(seek_refusal("no-session"), Refusal::SeekNoSession);
        assert_eq!(seek_refusal(MALFORMED), Refusal::SeekMalformed);
        assert_eq!(seek_refusal("store failed"), Refusal::SeekNotStored);
    }

    #[test]
    fn payload_forms() {
        let now = 10 * 86_400_000;
        assert_eq!(parse_target(b"0", now), Some(SeekTarget::Floor));
        assert_eq!(parse_target(b"-1", now), Some(SeekTarget::Head));
        assert_eq!(parse_target(b"42", now), Some(SeekTarget::Offset(42)));
        assert_eq!(
            parse_target(b"-12h", now),
            Some(SeekTarget::Since {
                at_unix_ms: now - 12 * 3_600_000
            })
        );
        assert_eq!(
            parse_target(b"12h", now),
            parse_target(b"-12h", now),
            "a duration means ago either way"
        );
        assert_eq!(
            parse_target(b"7d", now),
            Some(SeekTarget::Since {
                at_unix_ms: now - 7 * 86_400_000
            })
        );
        assert_eq!(
            parse_target(b"-2", now),
            None,
            "other negatives are refused"
        );
        assert_eq!(
            parse_target(b"2026-08-14", now),
            None,
            "a bare date is not a moment"
        );
        assert_eq!(parse_target(b"soon", now), None);
        assert_eq!(parse_target(&[0xff], now), None);
    }

    #[test]
    fn rfc3339_moments() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-08-14T09:00:00Z"),
            Some(1_786_698_000_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-08-14T11:00:00+02:00"),
            Some(1_786_698_000_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-08-14T09:00:00.5Z"),
            Some(1_786_698_000_500)
        );
        assert_eq!(parse_rfc3339_ms("2026-02-30T09:00:00Z"), None);
        assert_eq!(parse_rfc3339_ms("2026-08-14 09:00:00"), None);
    }

    #[test]
    fn seek_topics() {
        assert_eq!(seek_channel("$saguin/consumer/events/seek"), Some("events"));
        assert_eq!(seek_channel("$saguin/consumer/events/seek/reply"), None);
        assert_eq!(seek_channel("$saguin/consumer//seek"), None);
        assert_eq!(seek_channel("$saguin/consumer/a/b/seek"), None);
    }
}
