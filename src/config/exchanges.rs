//! `broker.qos2` and `broker.share`: what an unfinished exactly-once
//! publish and a shared group's backlog may hold, and for how long.

use serde_yaml::Value;

use super::findings::{join, Findings};
use super::table::{table, Keys};
use super::values::{count_key, duration_ms, whole_seconds, CountRule, NoneRule};

/// `broker.qos2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Qos2Config {
    /// Exactly-once publishes one client may hold unreleased at once.
    pub max_inflight_per_client: u32,
    /// How long a publish waits for its PUBREL before it is dropped.
    pub expires_after_s: u32,
}

impl Default for Qos2Config {
    fn default() -> Self {
        Qos2Config {
            max_inflight_per_client: 20,
            expires_after_s: 300,
        }
    }
}

/// `broker.share`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShareConfig {
    /// How long a backlogged delivery waits for a member; `None` for as
    /// long as a member could come to collect it.
    pub expires_after_s: Option<u32>,
}

/// `broker.session`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// How often a connected session's acknowledgements, and the channel
    /// positions they move, are written.
    pub ack_commit_interval_ms: u64,
    /// The provider that keeps sessions that outlive their connections;
    /// `None` when no `broker.storage` is configured, and sessions live in
    /// memory only.
    pub storage: Option<String>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            ack_commit_interval_ms: 200,
            storage: None,
        }
    }
}

const SESSION_KEYS: Keys = Keys {
    supported: &["ack_commit_interval", "storage"],
    not_yet: &[],
};

/// Reads `broker.session`; absent reads as the defaults. Its `storage` is
/// resolved once `broker.storage` is known.
pub(super) fn session<'a>(
    f: &mut Findings,
    value: Option<&'a Value>,
) -> Option<(SessionConfig, Option<&'a Value>)> {
    const PATH: &str = "broker.session";
    const ALLOWED: &str = "it is a duration from 10ms to 1s, such as 200ms; omit the key for 200ms";
    let t = table(f, PATH, value.unwrap_or(&Value::Null), &SESSION_KEYS)?;
    let path = join(PATH, "ack_commit_interval");
    let ack_commit_interval_ms = match t.get("ack_commit_interval") {
        None => SessionConfig::default().ack_commit_interval_ms,
        Some(v) => {
            let why = "acknowledgements are always stored; `none` would never store them";
            let ms = duration_ms(f, &path, v, NoneRule::Refused(why), ALLOWED)??;
            if !(10..=1_000).contains(&ms) {
                // Past a second an unclean stop re-sends seconds of traffic;
                // below ten milliseconds nothing is gained.
                f.value(&path, v, format!("out of range; {ALLOWED}"));
                return None;
            }
            ms
        }
    };
    Some((
        SessionConfig {
            ack_commit_interval_ms,
            storage: None,
        },
        t.get("storage"),
    ))
}

const QOS2_KEYS: Keys = Keys {
    supported: &["max_inflight_per_client", "expires_after"],
    not_yet: &[],
};
const SHARE_KEYS: Keys = Keys {
    supported: &["expires_after"],
    not_yet: &[],
};

/// Reads `broker.qos2`; absent reads as the defaults.
pub(super) fn qos2(f: &mut Findings, value: Option<&Value>) -> Option<Qos2Config> {
    const PATH: &str = "broker.qos2";
    let t = table(f, PATH, value.unwrap_or(&Value::Null), &QOS2_KEYS)?;
    let d = Qos2Config::default();
    let max_inflight_per_client = count_key(
        f,
        (
            join(PATH, "max_inflight_per_client"),
            t.get("max_inflight_per_client"),
        ),
        d.max_inflight_per_client,
        CountRule {
            min: 1,
            max: 65_535,
            allowed: "it is a whole number from 1 to 65535; omit the key for 20",
            below: "0 would refuse every QoS 2 publish while the CONNACK offers QoS 2",
            none: "each unfinished exchange holds a message in memory",
        },
    );
    let expires_after_s = match t.get("expires_after") {
        None => Some(d.expires_after_s),
        Some(v) => seconds(
            f,
            &join(PATH, "expires_after"),
            v,
            NoneRule::Refused(
                "an exchange whose client never comes back would be held until its session ends",
            ),
            "it is a duration in whole seconds, 1s or more, such as 5m; omit the key for 5m",
        )
        .flatten(),
    };
    Some(Qos2Config {
        max_inflight_per_client: max_inflight_per_client?,
        expires_after_s: expires_after_s?,
    })
}

/// Reads `broker.share`; absent reads as no expiry.
pub(super) fn share(f: &mut Findings, value: Option<&Value>) -> Option<ShareConfig> {
    const PATH: &str = "broker.share";
    let t = table(f, PATH, value.unwrap_or(&Value::Null), &SHARE_KEYS)?;
    let expires_after_s = match t.get("expires_after") {
        None => Some(None),
        Some(v) => seconds(
            f,
            &join(PATH, "expires_after"),
            v,
            NoneRule::Allowed,
            "it is a duration in whole seconds, 1s or more, such as 1h, or `none`; omit the key to keep a backlog as long as a member could collect it",
        ),
    };
    Some(ShareConfig {
        expires_after_s: expires_after_s?,
    })
}

/// A duration held in whole seconds, at least one; `Some(None)` is `none`.
fn seconds(
    f: &mut Findings,
    path: &str,
    value: &Value,
    rule: NoneRule,
    allowed: &'static str,
) -> Option<Option<u32>> {
    let Some(ms) = duration_ms(f, path, value, rule, allowed)? else {
        return Some(None);
    };
    let s = whole_seconds(f, path, value, ms)?;
    if s == 0 {
        f.value(path, value, format!("zero has no meaning here; {allowed}"));
        return None;
    }
    match u32::try_from(s) {
        Ok(s) => Some(Some(s)),
        Err(_) => {
            f.value(path, value, format!("too long; {allowed}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    fn findings(yaml: &str) -> String {
        parse(&format!("broker:\n  id: t\n{yaml}"), "t.yaml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn ack_commit_interval_is_read_and_bounded() {
        let config = parse(
            "broker:\n  id: t\n  session:\n    ack_commit_interval: 50ms\n",
            "t.yaml",
        )
        .unwrap();
        assert_eq!(config.broker.session.ack_commit_interval_ms, 50);
        assert_eq!(
            parse("broker:\n  id: t\n", "t.yaml")
                .unwrap()
                .broker
                .session
                .ack_commit_interval_ms,
            200
        );
        for bad in ["5ms", "2s", "none"] {
            let text = findings(&format!("  session:\n    ack_commit_interval: {bad}\n"));
            assert!(
                text.contains("broker.session.ack_commit_interval"),
                "{text}"
            );
        }
    }

    #[test]
    fn defaults_when_absent() {
        let config = parse("broker:\n  id: t\n", "t.yaml").unwrap();
        assert_eq!(config.broker.qos2.max_inflight_per_client, 20);
        assert_eq!(config.broker.qos2.expires_after_s, 300);
        assert_eq!(config.broker.share.expires_after_s, None);
    }

    #[test]
    fn values_are_read() {
        let yaml = "broker:\n  id: t\n  qos2:\n    max_inflight_per_client: 5\n    expires_after: 1m\n  share:\n    expires_after: 1h\n";
        let config = parse(yaml, "t.yaml").unwrap();
        assert_eq!(config.broker.qos2.max_inflight_per_client, 5);
        assert_eq!(config.broker.qos2.expires_after_s, 60);
        assert_eq!(config.broker.share.expires_after_s, Some(3600));
    }

    #[test]
    fn refusals_name_the_key_and_what_is_allowed() {
        let text = findings("  qos2:\n    max_inflight_per_client: 0\n    expires_after: 1500ms\n    max_bytes: 1MiB\n  share:\n    expires_after: 0s\n");
        assert!(
            text.contains("broker.qos2.max_inflight_per_client"),
            "{text}"
        );
        assert!(
            text.contains("broker.qos2.expires_after \"1500ms\""),
            "{text}"
        );
        assert!(text.contains("whole seconds"), "{text}");
        assert!(text.contains("broker.qos2.max_bytes"), "{text}");
        assert!(text.contains("broker.share.expires_after"), "{text}");
        let none = findings("  qos2:\n    expires_after: none\n");
        assert!(none.contains("`none` is not accepted"), "{none}");
    }
}
