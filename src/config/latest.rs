//! The keys a `type: latest` channel takes beyond those every channel
//! shares: `deletion_retention_period`, and the refusal, with its reason,
//! of each key that belongs to another channel type.
//!
//! A latest channel holds one value per topic, so it is bounded by how
//! many topics are live rather than by a history: it takes
//! `retention_period` and no size key.

use serde_yaml::Mapping;

use super::findings::{join, Findings};
use super::table::{Keys, Table};
use super::values::{PositiveOrNone, Unit};

/// The keys a latest channel reads.
pub(super) const KEYS: Keys = Keys {
    supported: &[
        "type",
        "filter",
        "storage",
        "retention_period",
        "deletion_retention_period",
    ],
    not_yet: &[],
};

/// How long a deletion is kept when the file does not say: a day.
pub const DEFAULT_DELETION_RETENTION_PERIOD_S: u64 = 86_400;

/// Keys other channel types take, each with why a latest channel does not.
const OTHER_TYPE_KEYS: [(&str, &str); 8] = [
    ("retention_bytes", "a latest channel holds one value per topic rather than a history, so there is no oldest record for a size bound to remove; a topic that has gone quiet is removed by retention_period; remove it"),
    ("max_bytes", "a latest channel holds one value per topic, so what grows is the number of topics, and its provider's max_bytes is what bounds it; remove it"),
    ("start", "a latest channel sends a new subscription the current value of every topic it reaches, so there is no starting place to choose; remove it"),
    ("visibility_timeout", "it applies only to a queue, whose jobs are claimed by workers; remove it"),
    ("job_expires_after", "it applies only to a queue, whose jobs are claimed by workers; remove it"),
    ("retry", "it applies only to a queue, whose jobs are claimed by workers; remove it"),
    ("dlq_retention_period", "it applies only to a queue, the one kind of channel that derives a dead-letter channel; remove it"),
    ("dlq_retention_bytes", "it applies only to a queue, the one kind of channel that derives a dead-letter channel; remove it"),
];

/// Reports, with why, the keys a latest channel does not take, and returns
/// the rest.
pub(super) fn without_other_type_keys(f: &mut Findings, path: &str, mapping: &Mapping) -> Mapping {
    let mut rest = mapping.clone();
    for (key, why) in OTHER_TYPE_KEYS {
        if rest.remove(key).is_some() {
            f.key(&join(path, key), why);
        }
    }
    rest
}

/// `deletion_retention_period`: how long a stored deletion is kept, in
/// whole seconds; `Some(None)` for `none`, which keeps it as long as the
/// channel exists.
const DELETION_RETENTION_PERIOD: PositiveOrNone = PositiveOrNone {
    key: "deletion_retention_period",
    unit: Unit::Seconds,
    allowed: "it is a duration in whole seconds, 1s or more, such as 1d: the longest outage after which a subscriber can still be told a topic was deleted; `none` keeps deletions as long as the channel exists; omit it for a day",
    zero: "zero would forget a deletion before any subscriber could be told of it",
};

pub(super) fn deletion_retention_period(
    f: &mut Findings,
    channel_path: &str,
    table: &Table<'_>,
) -> Option<Option<u64>> {
    let default = Some(Some(DEFAULT_DELETION_RETENTION_PERIOD_S));
    DELETION_RETENTION_PERIOD.read(f, channel_path, table, default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_contains, the_one};
    use crate::config::{parse, ChannelConfig, ChannelKind};

    const FILE: &str = "saguin.yaml";

    fn file(channel: &str) -> String {
        let indented: String = channel.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "broker:
  id: t
  storage:
    default: local
    default_retention_period: 3d
    default_retention_bytes: 1GiB
    providers:
      local: {{type: memory, max_bytes: 64MiB, snapshot_dir: none}}
channels:
  state:
    type: latest
{indented}"
        )
    }

    fn read(channel: &str) -> ChannelConfig {
        match parse(&file(channel), FILE) {
            Ok(mut c) => c.channels.remove(0),
            Err(e) => panic!("expected a valid configuration, got:\n{e}"),
        }
    }

    fn refusal(channel: &str) -> String {
        match parse(&file(channel), FILE) {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => {
                assert_eq!(e.file, FILE);
                the_one(e.findings)
            }
        }
    }

    fn deletions(c: &ChannelConfig) -> Option<u64> {
        match c.kind {
            ChannelKind::Latest {
                deletion_retention_period_s,
            } => deletion_retention_period_s,
            other => panic!("expected a latest channel, got {other:?}"),
        }
    }

    #[test]
    fn a_latest_channel_is_read_with_both_periods() {
        let c = read("filter: iot/+/{state,location}\nretention_period: 30d\ndeletion_retention_period: 2h\n");
        assert_eq!(c.filter, "iot/+/{state,location}");
        assert_eq!(c.filters, ["iot/+/state", "iot/+/location"]);
        assert_eq!(c.retention_period_s, Some(30 * 86_400));
        assert_eq!(deletions(&c), Some(2 * 3_600));
        // No size bound applies, whatever the provider's default says.
        assert_eq!((c.retention_bytes, c.max_bytes), (None, None));
    }

    #[test]
    fn unwritten_periods_take_their_defaults_and_none_keeps_for_ever() {
        let c = read("filter: state/#\n");
        assert_eq!(c.retention_period_s, Some(3 * 86_400));
        assert_eq!(deletions(&c), Some(DEFAULT_DELETION_RETENTION_PERIOD_S));
        let c = read("retention_period: none\ndeletion_retention_period: none\n");
        assert_eq!(c.filters, ["state/#"]);
        assert_eq!((c.retention_period_s, deletions(&c)), (None, None));
    }

    #[test]
    fn a_bad_deletion_period_is_refused_naming_the_key_and_the_fix() {
        let f = refusal("deletion_retention_period: 0s\n");
        assert_contains(
            &f,
            &[
                "channels.state.deletion_retention_period \"0s\"",
                "zero",
                "1d",
            ],
        );
        let f = refusal("deletion_retention_period: 1500ms\n");
        assert_contains(
            &f,
            &["channels.state.deletion_retention_period", "1s or 2s"],
        );
        let f = refusal("deletion_retention_period: 5\n");
        assert_contains(&f, &["channels.state.deletion_retention_period 5", "unit"]);
    }

    #[test]
    fn keys_of_other_types_are_refused_with_their_reason() {
        for (key, value, why) in [
            ("retention_bytes", "1GiB", "retention_period"),
            ("max_bytes", "1GiB", "provider's max_bytes"),
            ("start", "tail", "current value"),
            ("visibility_timeout", "30s", "only to a queue"),
            ("dlq_retention_period", "30d", "only to a queue"),
        ] {
            let f = refusal(&format!("{key}: {value}\n"));
            assert_contains(&f, &[&format!("channels.state.{key}:"), why, "remove it"]);
        }
    }
}
