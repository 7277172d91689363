//! Reading one value: a whole number, a size, a duration, or `none`, each
//! checked against what its key allows and reported in the words of that
//! key when it is wrong.

use serde_yaml::Value;

use super::findings::{join, Findings};
use super::table::Table;
use super::units::{format_seconds, parse_duration_ms, parse_size_bytes, MS_PER_S};

/// Whether a key takes the word `none`, and if not, why not.
#[derive(Clone, Copy)]
pub(super) enum NoneRule {
    Allowed,
    Refused(&'static str),
}

/// The range and the reasons for a key holding a plain count.
pub(super) struct CountRule {
    pub(super) min: u64,
    pub(super) max: u64,
    pub(super) allowed: &'static str,
    pub(super) below: &'static str,
    pub(super) none: &'static str,
}

pub(super) fn count_key(
    f: &mut Findings,
    (path, value): (String, Option<&Value>),
    default: u32,
    rule: CountRule,
) -> Option<u32> {
    let Some(value) = value else {
        return Some(default);
    };
    let n = whole_number(f, &path, value, NoneRule::Refused(rule.none), rule.allowed)??;
    if n < rule.min {
        f.value(&path, value, format!("{}; {}", rule.below, rule.allowed));
        return None;
    }
    if n > rule.max {
        f.value(&path, value, format!("too large; {}", rule.allowed));
        return None;
    }
    to_u32(f, &path, value, n, rule.allowed)
}

/// Reads a whole number, or `none` under `rule`. `Some(None)` is `none`.
pub(super) fn whole_number(
    f: &mut Findings,
    path: &str,
    value: &Value,
    rule: NoneRule,
    allowed: &str,
) -> Option<Option<u64>> {
    match value {
        Value::Number(n) if n.as_u64().is_some() => n.as_u64().map(Some),
        Value::String(s) if s == "none" => none(f, path, value, rule, allowed),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            match s.parse::<u64>() {
                Ok(n) => Some(Some(n)),
                Err(_) => {
                    f.value(path, value, format!("too large; {allowed}"));
                    None
                }
            }
        }
        _ => {
            f.value(path, value, format!("not a whole number; {allowed}"));
            None
        }
    }
}

/// Reads a size: a bare whole number of bytes, or text such as `512KiB`;
/// `Some(None)` is `none`.
pub(super) fn size(
    f: &mut Findings,
    path: &str,
    value: &Value,
    rule: NoneRule,
    allowed: &str,
) -> Option<Option<u64>> {
    match value {
        Value::Number(n) => match n.as_u64() {
            Some(bytes) => Some(Some(bytes)),
            None => {
                f.value(
                    path,
                    value,
                    format!("a size is a whole number of bytes, or one with a unit such as 512KiB; {allowed}"),
                );
                None
            }
        },
        Value::String(s) if s == "none" => none(f, path, value, rule, allowed),
        Value::String(s) => parsed(f, path, value, parse_size_bytes(s)),
        _ => {
            f.value(
                path,
                value,
                format!("a size is expected here, such as 512KiB; {allowed}"),
            );
            None
        }
    }
}

/// Reads a duration in milliseconds; `Some(None)` is `none`.
pub(super) fn duration_ms(
    f: &mut Findings,
    path: &str,
    value: &Value,
    rule: NoneRule,
    allowed: &str,
) -> Option<Option<u64>> {
    match value {
        Value::Number(n) if n.as_u64().is_some() => {
            f.value(
                path,
                value,
                format!(
                    "a duration needs a unit: write {n}s for seconds (units are ms, s, m, h and d)"
                ),
            );
            None
        }
        Value::String(s) if s == "none" => none(f, path, value, rule, allowed),
        Value::String(s) => parsed(f, path, value, parse_duration_ms(s)),
        _ => {
            f.value(
                path,
                value,
                "a duration is expected here: a whole number and one unit from ms, s, m, h and d, such as 30s",
            );
            None
        }
    }
}

/// What a unit's parser made of `value`'s text, or its finding.
fn parsed(
    f: &mut Findings,
    path: &str,
    value: &Value,
    read: Result<u64, String>,
) -> Option<Option<u64>> {
    match read {
        Ok(amount) => Some(Some(amount)),
        Err(why) => {
            f.value(path, value, why);
            None
        }
    }
}

fn none(
    f: &mut Findings,
    path: &str,
    value: &Value,
    rule: NoneRule,
    allowed: &str,
) -> Option<Option<u64>> {
    match rule {
        NoneRule::Allowed => Some(None),
        NoneRule::Refused(why) => {
            f.value(
                path,
                value,
                format!("`none` is not accepted here: {why}; {allowed}"),
            );
            None
        }
    }
}

/// Refuses a duration that is not a whole number of seconds, for a key
/// held in whole seconds: the fraction would be lost, and a sub-second
/// value would become 0, which means something else entirely.
pub(super) fn whole_seconds(f: &mut Findings, path: &str, value: &Value, ms: u64) -> Option<u64> {
    if ms.is_multiple_of(MS_PER_S) {
        return Some(ms / MS_PER_S);
    }
    let down = ms / MS_PER_S;
    let up = down.saturating_add(1);
    let instead = if down == 0 {
        format_seconds(up)
    } else {
        format!("{} or {}", format_seconds(down), format_seconds(up))
    };
    f.value(
        path,
        value,
        format!("this key is held in whole seconds, so a fraction of a second cannot be honoured; write {instead}"),
    );
    None
}

pub(super) fn to_u32(
    f: &mut Findings,
    path: &str,
    value: &Value,
    n: u64,
    allowed: &str,
) -> Option<u32> {
    match u32::try_from(n) {
        Ok(n) => Some(n),
        Err(_) => {
            f.value(path, value, format!("too large; {allowed}"));
            None
        }
    }
}

/// What a positive amount is counted in.
pub(super) enum Unit {
    /// A duration, in whole seconds.
    Seconds,
    /// A size, in bytes.
    Bytes,
}

/// A key that takes a positive period or size, or `none`.
pub(super) struct PositiveOrNone {
    pub(super) key: &'static str,
    pub(super) unit: Unit,
    /// What the key takes, said with every finding about it.
    pub(super) allowed: &'static str,
    /// Why 0 is refused.
    pub(super) zero: &'static str,
}

impl PositiveOrNone {
    /// The key under `parent` in `table`: `Some(None)` for `none`, and
    /// `default` when it is absent.
    pub(super) fn read(
        &self,
        f: &mut Findings,
        parent: &str,
        table: &Table<'_>,
        default: Option<Option<u64>>,
    ) -> Option<Option<u64>> {
        let Some(value) = table.get(self.key) else {
            return default;
        };
        let at = join(parent, self.key);
        let amount = match self.unit {
            Unit::Seconds => match duration_ms(f, &at, value, NoneRule::Allowed, self.allowed)? {
                Some(ms) => Some(whole_seconds(f, &at, value, ms)?),
                None => None,
            },
            Unit::Bytes => size(f, &at, value, NoneRule::Allowed, self.allowed)?,
        };
        if amount == Some(0) {
            f.value(&at, value, format!("{}; {}", self.zero, self.allowed));
            return None;
        }
        Some(amount)
    }
}
