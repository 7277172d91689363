//! Where session state and the retained store are kept:
//! `broker.session.storage`, and `broker.retained` with its `storage` and
//! `retention_period`.
//!
//! Both name a provider under `broker.storage.providers` and default to
//! `broker.storage.default`. With no `broker.storage` block at all, neither
//! may be written, and both live in memory for the life of the process.

use serde_yaml::Value;

use super::findings::{join, Findings};
use super::storage::StorageConfig;
use super::table::{table, Keys};
use super::values::{duration_ms, whole_seconds, NoneRule};

/// `broker.retained`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetainedConfig {
    /// The provider that keeps retained values; `None` when no
    /// `broker.storage` is configured, and the values live in memory only.
    pub storage: Option<String>,
    /// How long a value is kept after it was set; `None` for `none`.
    pub retention_period_s: Option<u64>,
}

/// A `storage` key as written, before `broker.storage` is known.
pub(super) struct Named<'a> {
    path: String,
    value: Option<&'a Value>,
}

/// `broker.retained` as written, before its provider is resolved.
pub(super) struct RetainedDraft<'a> {
    storage: Named<'a>,
    retention_period_s: Option<Option<u64>>,
}

const RETAINED_KEYS: Keys = Keys {
    supported: &[
        "storage",
        "retention_period",
        "retention_bytes",
        "max_bytes",
    ],
    not_yet: &[],
};

/// Reads `broker.retained`; absent reads as the defaults.
pub(super) fn retained<'a>(
    f: &mut Findings,
    value: Option<&'a Value>,
) -> Option<RetainedDraft<'a>> {
    const PATH: &str = "broker.retained";
    const ALLOWED: &str = "it is a duration in whole seconds, 1s or more, such as 7d, or `none` to keep a value until it is replaced or deleted; omit the key for none";
    let t = table(f, PATH, value.unwrap_or(&Value::Null), &RETAINED_KEYS)?;
    let mut sound = true;
    for key in ["retention_bytes", "max_bytes"] {
        if t.get(key).is_some() {
            f.key(
                &join(PATH, key),
                "the retained store is bounded by its provider's max_bytes, and a value is refused rather than evicted at it; remove the key, and bound the provider instead",
            );
            sound = false;
        }
    }
    let path = join(PATH, "retention_period");
    let retention_period_s = match t.get("retention_period") {
        None => Some(None),
        Some(v) => match duration_ms(f, &path, v, NoneRule::Allowed, ALLOWED)? {
            None => Some(None),
            Some(ms) => {
                let s = whole_seconds(f, &path, v, ms)?;
                if s == 0 {
                    f.value(
                        &path,
                        v,
                        format!("zero could be read as keep nothing or as keep everything, so it is refused; {ALLOWED}"),
                    );
                    None
                } else {
                    Some(Some(s))
                }
            }
        },
    };
    sound.then_some(RetainedDraft {
        storage: Named {
            path: join(PATH, "storage"),
            value: t.get("storage"),
        },
        retention_period_s,
    })
}

impl RetainedDraft<'_> {
    /// The finished block, once `broker.storage` is known.
    pub(super) fn resolve(
        self,
        f: &mut Findings,
        storage: Option<&StorageConfig>,
    ) -> Option<RetainedConfig> {
        let provider = self.storage.resolve(f, storage, "retained values");
        Some(RetainedConfig {
            storage: provider?,
            retention_period_s: self.retention_period_s?,
        })
    }
}

/// `broker.session.storage` as written.
pub(super) fn session_storage(value: Option<&Value>) -> Named<'_> {
    Named {
        path: "broker.session.storage".to_string(),
        value,
    }
}

impl Named<'_> {
    /// The provider this key names: the one written, which must exist, or
    /// `broker.storage.default`; `Some(None)` when there is no storage at
    /// all and the key is not written.
    pub(super) fn resolve(
        &self,
        f: &mut Findings,
        storage: Option<&StorageConfig>,
        what: &str,
    ) -> Option<Option<String>> {
        let Some(storage) = storage else {
            if let Some(value) = self.value {
                f.value(
                    &self.path,
                    value,
                    format!("there is no broker.storage block, so there is no provider to keep {what} in; write broker.storage with this provider, or remove the key and keep {what} in memory until the broker stops"),
                );
                return None;
            }
            return Some(None);
        };
        let Some(value) = self.value else {
            return Some(Some(storage.default_provider.clone()));
        };
        let names: Vec<&str> = storage.providers.iter().map(|p| p.name.as_str()).collect();
        match value {
            Value::String(name) if storage.provider(name).is_some() => Some(Some(name.clone())),
            _ => {
                f.value(
                    &self.path,
                    value,
                    format!(
                        "it names a provider under broker.storage.providers, one of {}, or is omitted for broker.storage.default ({})",
                        names.join(", "),
                        storage.default_provider
                    ),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;

    const STORAGE: &str = "  storage:\n    default: disk\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      disk:\n        type: memory\n        max_bytes: 16MiB\n        snapshot_dir: none\n      other:\n        type: memory\n        max_bytes: 16MiB\n        snapshot_dir: none\n";

    fn findings(yaml: &str) -> String {
        parse(&format!("broker:\n  id: t\n{yaml}"), "t.yaml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn both_default_to_the_default_provider_and_to_memory_without_storage() {
        let config = parse(&format!("broker:\n  id: t\n{STORAGE}"), "t.yaml").unwrap();
        assert_eq!(config.broker.session.storage.as_deref(), Some("disk"));
        assert_eq!(config.broker.retained.storage.as_deref(), Some("disk"));
        assert_eq!(config.broker.retained.retention_period_s, None);
        let bare = parse("broker:\n  id: t\n", "t.yaml").unwrap();
        assert_eq!(bare.broker.session.storage, None);
        assert_eq!(bare.broker.retained.storage, None);
    }

    #[test]
    fn a_named_provider_is_read() {
        let yaml = format!("broker:\n  id: t\n{STORAGE}  session:\n    storage: other\n  retained:\n    storage: other\n    retention_period: 2h\n");
        let config = parse(&yaml, "t.yaml").unwrap();
        assert_eq!(config.broker.session.storage.as_deref(), Some("other"));
        assert_eq!(config.broker.retained.storage.as_deref(), Some("other"));
        assert_eq!(config.broker.retained.retention_period_s, Some(7200));
    }

    #[test]
    fn an_unknown_provider_or_a_missing_storage_block_is_named() {
        let text = findings(&format!(
            "{STORAGE}  session:\n    storage: nowhere\n  retained:\n    storage: elsewhere\n"
        ));
        assert!(
            text.contains("broker.session.storage \"nowhere\"") && text.contains("disk, other"),
            "{text}"
        );
        assert!(
            text.contains("broker.retained.storage \"elsewhere\""),
            "{text}"
        );
        let text = findings("  session:\n    storage: disk\n");
        assert!(
            text.contains("broker.session.storage") && text.contains("no broker.storage block"),
            "{text}"
        );
    }

    #[test]
    fn retained_bounds_other_than_the_provider_are_refused() {
        let text = findings(&format!(
            "{STORAGE}  retained:\n    max_bytes: 1MiB\n    retention_bytes: 1MiB\n"
        ));
        assert!(text.contains("broker.retained.max_bytes"), "{text}");
        assert!(text.contains("broker.retained.retention_bytes"), "{text}");
        for bad in ["0s", "1500ms", "soon"] {
            let text = findings(&format!(
                "{STORAGE}  retained:\n    retention_period: {bad}\n"
            ));
            assert!(text.contains("broker.retained.retention_period"), "{text}");
        }
        let text = findings(&format!("{STORAGE}  session:\n    max_bytes: 1MiB\n"));
        assert!(text.contains("broker.session.max_bytes"), "{text}");
    }
}
