//! The keys only a `type: queue` channel takes, and the dead-letter
//! channel each queue derives.
//!
//! A queue keeps jobs until a worker resolves them, so it takes a
//! `max_bytes` (flow control: a publish past it is refused) and never a
//! retention, which would delete unresolved work. Its failed work moves to
//! `<name>__dlq`, an append channel on the same provider, so that the move
//! is one provider's business.

use serde_yaml::{Mapping, Value};

use super::findings::{join, Findings};
use super::table::{table, Keys, Table};
use super::values::{duration_ms, whole_number, whole_seconds, NoneRule, PositiveOrNone, Unit};
pub use crate::core::dead_letter::{dead_letter_filter, dead_letter_topic, DLQ_LEVEL};

/// `visibility_timeout` where none is written.
pub const DEFAULT_VISIBILITY_TIMEOUT_S: u64 = 30;

/// `retry.max_attempts` where none is written.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// A queue's own settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// How long a worker holds a job after its PUBACK before it is taken back.
    pub visibility_timeout_s: u64,
    /// A job older than this is dead-lettered unoffered; `None` never.
    pub job_expires_after_s: Option<u64>,
    /// Attempts before a job is dead-lettered; at least 1.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// The gap's unit; 0 with [`Backoff::None`].
    pub backoff_base_s: u64,
    /// The dead-letter channel's retention; defaults as an append
    /// channel's do.
    pub dlq_retention_period_s: Option<u64>,
    pub dlq_retention_bytes: Option<u64>,
}

/// `retry.backoff`: the gap before a job that came back is offered again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// Offered again on the next tick.
    None,
    /// `backoff_base × n` after `n` attempts.
    Linear,
    /// `backoff_base × 2^(n-1)` after `n` attempts.
    Exponential,
}

/// The keys a queue reads.
pub(super) const QUEUE_KEYS: Keys = Keys {
    supported: &[
        "type",
        "filter",
        "storage",
        "max_bytes",
        "visibility_timeout",
        "job_expires_after",
        "retry",
        "dlq_retention_period",
        "dlq_retention_bytes",
    ],
    not_yet: &[],
};

/// Keys of other channel types, each with why a queue does not take it.
const OTHER_TYPE_KEYS: [(&str, &str); 4] = [
    ("retention_period", "a queue never removes a job nobody resolved (invariant 2); its bound is max_bytes, which refuses new work until workers catch up, and its dead-letter channel's retention is dlq_retention_period; remove it"),
    ("retention_bytes", "a queue never removes a job nobody resolved (invariant 2); bound it with max_bytes, which refuses new work until workers catch up, and bound its dead letters with dlq_retention_bytes; remove it"),
    ("start", "a queue has no readers with positions: workers take each job once, through $saguin/queue/<name>; remove it"),
    ("deletion_retention_period", "it applies only to a latest channel; remove it"),
];

const RETRY_KEYS: Keys = Keys {
    supported: &["max_attempts", "backoff", "backoff_base"],
    not_yet: &[],
};

/// Reports the keys of other channel types on a queue, and returns the rest.
pub(super) fn without_other_type_keys(f: &mut Findings, path: &str, mapping: &Mapping) -> Mapping {
    let mut rest = mapping.clone();
    for (key, why) in OTHER_TYPE_KEYS {
        if rest.remove(key).is_some() {
            f.key(&join(path, key), why);
        }
    }
    rest
}

/// Refuses braces in a queue's filter: two filters would be two ways to
/// place a dead letter, and a queue's name is its one population of workers.
pub(super) fn filter_has_no_braces(f: &mut Findings, path: &str, written: Option<&Value>) -> bool {
    match written {
        Some(value @ Value::String(s)) if s.contains('{') => {
            f.value(
                &join(path, "filter"),
                value,
                "a queue's filter carries no {a,b}: its dead letters take one derived topic, so it is one filter; split it into one queue per alternative, or use +",
            );
            false
        }
        _ => true,
    }
}

/// Reads a queue's own keys, each with its default. `retention_defaults`
/// are `broker.storage`'s, for the dead-letter channel; `None` while they
/// cannot be known.
pub(super) fn settings(
    f: &mut Findings,
    path: &str,
    t: &Table<'_>,
    retention_defaults: Option<(Option<u64>, Option<u64>)>,
) -> Option<QueueConfig> {
    let visibility = seconds_key(
        f,
        path,
        "visibility_timeout",
        t.get("visibility_timeout"),
        "it is how long a worker holds a job after acknowledging its PUBLISH before the job is offered again: a duration in whole seconds, 1s or more, such as 30s; omit it for 30s",
    );
    let expires = seconds_key(
        f,
        path,
        "job_expires_after",
        t.get("job_expires_after"),
        "it is the age at which a job still waiting is dead-lettered with reason expired: a duration in whole seconds, longer than visibility_timeout, such as 6h; omit it and no job ever expires",
    );
    let retry = retry(f, path, t.get("retry"));
    let (period_default, bytes_default) = match retention_defaults {
        Some((p, b)) => (Some(p), Some(b)),
        None => (None, None),
    };
    let dlq_period = DLQ_RETENTION_PERIOD.read(f, path, t, period_default);
    let dlq_bytes = DLQ_RETENTION_BYTES.read(f, path, t, bytes_default);
    let visibility_timeout_s = visibility.map(|v| v.unwrap_or(DEFAULT_VISIBILITY_TIMEOUT_S));
    if let (Some(v), Some(Some(e))) = (visibility_timeout_s, expires) {
        if e <= v {
            let at = join(path, "job_expires_after");
            f.key(
                &at,
                format!("{e}s is not longer than visibility_timeout ({v}s), so a job could expire while its first worker still holds it; make job_expires_after longer, or visibility_timeout shorter"),
            );
            return None;
        }
    }
    let (max_attempts, backoff, backoff_base_s) = retry?;
    Some(QueueConfig {
        visibility_timeout_s: visibility_timeout_s?,
        job_expires_after_s: expires?,
        max_attempts,
        backoff,
        backoff_base_s,
        dlq_retention_period_s: dlq_period?,
        dlq_retention_bytes: dlq_bytes?,
    })
}

/// A duration key held in whole seconds, above zero. `Some(None)` when
/// not written.
fn seconds_key(
    f: &mut Findings,
    path: &str,
    key: &str,
    value: Option<&Value>,
    allowed: &str,
) -> Option<Option<u64>> {
    let Some(value) = value else {
        return Some(None);
    };
    let at = join(path, key);
    let ms = duration_ms(
        f,
        &at,
        value,
        NoneRule::Refused("a queue's clocks are always running"),
        allowed,
    )??;
    let seconds = whole_seconds(f, &at, value, ms)?;
    if seconds == 0 {
        f.value(&at, value, format!("zero is refused; {allowed}"));
        return None;
    }
    Some(Some(seconds))
}

/// `retry`: `(max_attempts, backoff, backoff_base_s)`.
fn retry(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<(u32, Backoff, u64)> {
    let Some(value) = value else {
        return Some((DEFAULT_MAX_ATTEMPTS, Backoff::None, 0));
    };
    let path = join(path, "retry");
    let t = table(f, &path, value, &RETRY_KEYS)?;
    let attempts_allowed = "it is how many attempts a job is given before it is dead-lettered: a whole number, 1 or more; omit it for 5";
    let max_attempts = match t.get("max_attempts") {
        None => Some(DEFAULT_MAX_ATTEMPTS),
        Some(v) => {
            let at = join(&path, "max_attempts");
            match whole_number(
                f,
                &at,
                v,
                NoneRule::Refused("every job is given a number of attempts"),
                attempts_allowed,
            ) {
                Some(Some(n)) if n >= 1 && n <= u64::from(u32::MAX) => Some(n as u32),
                Some(_) => {
                    f.value(&at, v, format!("out of range; {attempts_allowed}"));
                    None
                }
                None => None,
            }
        }
    };
    let shape_allowed = "it is none (the default: offered again on the next tick), linear (backoff_base × attempts) or exponential (backoff_base × 2^(attempts-1))";
    let backoff = match t.get("backoff") {
        None => Some(None),
        Some(v) => match v {
            Value::String(s) if s == "none" => Some(Some(Backoff::None)),
            Value::String(s) if s == "linear" => Some(Some(Backoff::Linear)),
            Value::String(s) if s == "exponential" => Some(Some(Backoff::Exponential)),
            _ => {
                f.value(&join(&path, "backoff"), v, shape_allowed);
                None
            }
        },
    };
    let base = seconds_key(
        f,
        &path,
        "backoff_base",
        t.get("backoff_base"),
        "it is the unit of the gap between attempts: a duration in whole seconds, 1s or more, such as 2s",
    );
    let (max_attempts, backoff, base) = (max_attempts?, backoff?, base?);
    match (backoff, base) {
        (None, None) => Some((max_attempts, Backoff::None, 0)),
        (Some(Backoff::None), None) => Some((max_attempts, Backoff::None, 0)),
        (Some(Backoff::None), Some(_)) => {
            f.key(
                &join(&path, "backoff_base"),
                "backoff is none, so no gap is built from a base; remove backoff_base, or make backoff linear or exponential",
            );
            None
        }
        (Some(shape), Some(base_s)) => Some((max_attempts, shape, base_s)),
        (Some(_), None) => {
            f.key(
                &join(&path, "backoff"),
                "a shape with no backoff_base has no gap to build from; write backoff and backoff_base together, such as backoff: exponential with backoff_base: 2s",
            );
            None
        }
        (None, Some(_)) => {
            f.key(
                &join(&path, "backoff_base"),
                "a base with no shape is read by nothing; write backoff and backoff_base together, such as backoff: exponential with backoff_base: 2s",
            );
            None
        }
    }
}

const DLQ_RETENTION_PERIOD: PositiveOrNone = PositiveOrNone {
    key: "dlq_retention_period",
    unit: Unit::Seconds,
    allowed: "it is how long the dead-letter channel keeps a record: a duration in whole seconds, 1s or more, such as 30d, or `none`; omit it for broker.storage.default_retention_period",
    zero: "zero is refused",
};

const DLQ_RETENTION_BYTES: PositiveOrNone = PositiveOrNone {
    key: "dlq_retention_bytes",
    unit: Unit::Bytes,
    allowed: "it is how many bytes of dead letters are kept: a size, 1B or more, such as 1GiB, or `none`; omit it for broker.storage.default_retention_bytes",
    zero: "zero is refused",
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_contains, the_one};
    use crate::config::{parse as parse_config, ChannelConfig, ChannelKind};

    const BROKER: &str = "broker:
  id: t
  storage:
    default: local
    default_retention_period: 3d
    default_retention_bytes: none
    providers:
      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
";

    fn file(lines: &str) -> String {
        let body: String = lines.lines().map(|l| format!("    {l}\n")).collect();
        format!("{BROKER}channels:\n  jobs:\n    type: queue\n{body}")
    }

    fn read(lines: &str) -> Vec<ChannelConfig> {
        match parse_config(&file(lines), "saguin.yaml") {
            Ok(c) => c.channels,
            Err(e) => panic!("expected a valid configuration, got:\n{e}"),
        }
    }

    fn refusals(lines: &str) -> Vec<String> {
        match parse_config(&file(lines), "saguin.yaml") {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => e.findings,
        }
    }

    fn queue_of(c: &ChannelConfig) -> QueueConfig {
        match c.kind {
            ChannelKind::Queue(q) => q,
            other => panic!("not a queue: {other:?}"),
        }
    }

    #[test]
    fn a_complete_queue_is_read_and_derives_its_dead_letter_channel() {
        let all = read("filter: iot/+/+/work\nmax_bytes: 128MiB\nvisibility_timeout: 45s\njob_expires_after: 6h\nretry:\n  max_attempts: 3\n  backoff: exponential\n  backoff_base: 2s\ndlq_retention_period: 30d\ndlq_retention_bytes: 1GiB\n");
        assert_eq!(all.len(), 2, "{all:#?}");
        let q = queue_of(&all[0]);
        assert_eq!(
            q,
            QueueConfig {
                visibility_timeout_s: 45,
                job_expires_after_s: Some(6 * 3600),
                max_attempts: 3,
                backoff: Backoff::Exponential,
                backoff_base_s: 2,
                dlq_retention_period_s: Some(30 * 86_400),
                dlq_retention_bytes: Some(1 << 30),
            }
        );
        assert_eq!(all[0].max_bytes, Some(128 << 20));
        assert_eq!(all[0].retention_period_s, None);
        let dlq = &all[1];
        assert_eq!(dlq.name, "jobs__dlq");
        assert_eq!(dlq.kind, ChannelKind::Append);
        assert_eq!(dlq.filters, vec!["iot/+/+/work/__dlq".to_string()]);
        assert_eq!(dlq.storage, "local");
        assert_eq!(dlq.retention_period_s, Some(30 * 86_400));
        assert_eq!(dlq.retention_bytes, Some(1 << 30));
    }

    #[test]
    fn unwritten_queue_keys_take_their_defaults() {
        let all = read("");
        let q = queue_of(&all[0]);
        assert_eq!(q.visibility_timeout_s, 30);
        assert_eq!(q.job_expires_after_s, None);
        assert_eq!(q.max_attempts, 5);
        assert_eq!((q.backoff, q.backoff_base_s), (Backoff::None, 0));
        // The dead letters are kept as broker.storage says by default.
        assert_eq!(q.dlq_retention_period_s, Some(3 * 86_400));
        assert_eq!(all[0].filters, vec!["jobs/#".to_string()]);
        assert_eq!(all[1].filters, vec!["jobs/__dlq/#".to_string()]);
    }

    #[test]
    fn every_queue_key_is_checked_and_named() {
        let cases: [(&str, &[&str]); 12] = [
            (
                "visibility_timeout: 0s",
                &["channels.jobs.visibility_timeout", "zero is refused"],
            ),
            (
                "visibility_timeout: 500ms",
                &["channels.jobs.visibility_timeout", "whole seconds"],
            ),
            (
                "visibility_timeout: none",
                &["channels.jobs.visibility_timeout", "`none` is not accepted"],
            ),
            (
                "job_expires_after: 10s",
                &[
                    "channels.jobs.job_expires_after",
                    "not longer than visibility_timeout",
                ],
            ),
            (
                "retry: {max_attempts: 0}",
                &["channels.jobs.retry.max_attempts", "1 or more"],
            ),
            (
                "retry: {backoff: sometimes, backoff_base: 2s}",
                &["channels.jobs.retry.backoff", "linear"],
            ),
            (
                "retry: {backoff: linear}",
                &["channels.jobs.retry.backoff", "together"],
            ),
            (
                "retry: {backoff_base: 2s}",
                &["channels.jobs.retry.backoff_base", "together"],
            ),
            (
                "retry: {backoff: none, backoff_base: 2s}",
                &["channels.jobs.retry.backoff_base", "remove backoff_base"],
            ),
            ("retry: {attempts: 3}", &["channels.jobs.retry.attempts"]),
            (
                "retention_period: 1d",
                &["channels.jobs.retention_period", "invariant 2"],
            ),
            (
                "filter: \"{a,b}/work\"",
                &["channels.jobs.filter", "no {a,b}"],
            ),
        ];
        for (line, needles) in cases {
            let finding = the_one(refusals(line));
            assert_contains(&finding, needles);
        }
        let finding = the_one(refusals("dlq_retention_bytes: 0"));
        assert_contains(&finding, &["channels.jobs.dlq_retention_bytes", "zero"]);
        let finding = the_one(refusals("start: tail"));
        assert_contains(&finding, &["channels.jobs.start", "workers"]);
    }

    #[test]
    fn the_dead_letter_level_goes_at_the_hash_or_on_the_end() {
        assert_eq!(dead_letter_filter("jobs/#"), "jobs/__dlq/#");
        assert_eq!(dead_letter_filter("#"), "__dlq/#");
        assert_eq!(
            dead_letter_filter("iot/water/+/inspect"),
            "iot/water/+/inspect/__dlq"
        );
        assert_eq!(
            dead_letter_filter("iot/water/+/inspect/#"),
            "iot/water/+/inspect/__dlq/#"
        );
        assert_eq!(dead_letter_topic("jobs/#", "jobs/j1"), "jobs/__dlq/j1");
        assert_eq!(dead_letter_topic("jobs/#", "jobs"), "jobs/__dlq");
        assert_eq!(
            dead_letter_topic("iot/+/work/+", "iot/site/work/j1"),
            "iot/site/work/j1/__dlq"
        );
        assert_eq!(
            dead_letter_topic("orders/#", "orders/resize/thumbnails/42"),
            "orders/__dlq/resize/thumbnails/42"
        );
    }
}
