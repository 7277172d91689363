//! `broker.storage`: the providers channels keep their records in, which
//! one a channel gets when it names none, and the retention a channel gets
//! when it states none.
//!
//! The whole block is optional while the broker has no channels: absent,
//! [`BrokerConfig::storage`](super::BrokerConfig::storage) is `None` and
//! nothing is stored anywhere. Written, it must be complete - a default
//! provider, both default retentions (`none` is a value, not an omission)
//! and at least one provider - because Sagüin keeps nothing in a store the
//! operator did not name.
//!
//! `providers` may be written as a list of groups, each a file named by
//! `!include` or providers written in place (see [`super::include`]); a
//! channel names its provider by name, wherever either is written.

use std::path::{Component, Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::findings::{join, show, Findings};
use super::include::{self, Listed, Origin};
use super::limits::Limits;
use super::table::{is_include, table, Keys};
use super::units::format_size;
use super::values::{duration_ms, size, whole_number, whole_seconds, NoneRule};
use crate::store::{self, ProviderSettings};
pub use crate::store::{CommitPolicy, ProviderKind};

/// `broker.storage`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// `default`: the provider a channel uses when it names none.
    pub default_provider: String,
    /// `default_retention_period` in whole seconds; `None` for `none`.
    pub default_retention_period_s: Option<u64>,
    /// `default_retention_bytes`; `None` for `none`.
    pub default_retention_bytes: Option<u64>,
    /// Every provider, in the order written; never empty.
    pub providers: Vec<ProviderConfig>,
}

impl StorageConfig {
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }
}

/// One entry under `broker.storage.providers`: the store's own settings
/// for the provider, which the store opens as written here.
pub type ProviderConfig = ProviderSettings;

/// What the memory providers may hold between them (see
/// [`crate::store::declared_memory_bytes`]).
pub fn declared_memory_bytes(storage: &StorageConfig) -> u64 {
    store::declared_memory_bytes(&storage.providers)
}

/// What every provider holds back for the writes that relieve a full one
/// (see [`crate::store::reserve_bytes`]).
pub fn reserve_bytes(limits: &Limits) -> u64 {
    store::reserve_bytes(limits.max_message_size_bytes, limits.max_header_bytes)
}

/// The longest `publish_commit_interval`: the wait is paid per connection,
/// so at one second a client that waits for its acknowledgement publishes
/// once a second.
pub const MAX_PUBLISH_COMMIT_INTERVAL_MS: u32 = 1_000;

const STORAGE_KEYS: Keys = Keys {
    supported: &[
        "default",
        "default_retention_period",
        "default_retention_bytes",
        "providers",
    ],
    not_yet: &[],
};
const REDB_KEYS: Keys = Keys {
    supported: &[
        "type",
        "max_bytes",
        "device_endurance",
        "file_path",
        "publish_commit_interval",
        "publish_commit_max_records",
        "checkpoint_interval",
    ],
    not_yet: &[],
};
const MEMORY_KEYS: Keys = Keys {
    supported: &["type", "max_bytes", "snapshot_dir", "device_endurance"],
    not_yet: &[],
};
const ANY_PROVIDER_KEYS: Keys = Keys {
    supported: &[
        "type",
        "max_bytes",
        "device_endurance",
        "file_path",
        "snapshot_dir",
        "publish_commit_interval",
        "publish_commit_max_records",
        "checkpoint_interval",
    ],
    not_yet: &[],
};

const PATH: &str = "broker.storage";

const LISTED: Listed = Listed {
    noun: "provider",
    example: "local: {type: redb, file_path: /var/lib/saguin/saguin.redb, max_bytes: 256MiB}",
    file_example: "storage/local.yaml",
};
const MAX_PROVIDER_NAME_CHARS: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Type {
    Redb,
    Memory,
}

/// Reads `broker.storage`. `Some(None)` when absent.
pub(super) fn parse(
    f: &mut Findings,
    value: Option<&Value>,
    limits: Option<&Limits>,
    origin: &Origin<'_>,
) -> Option<Option<StorageConfig>> {
    let Some(value) = value else {
        return Some(None);
    };
    let empty = match value {
        Value::Null => true,
        Value::Mapping(m) => m.is_empty(),
        _ => false,
    };
    if empty {
        f.key(
            PATH,
            "the block holds no keys; remove it to run with no storage provider, or write default, default_retention_period, default_retention_bytes and providers",
        );
        return None;
    }
    let t = table(f, PATH, value, &STORAGE_KEYS)?;
    let providers = providers(f, t.get("providers"), limits, origin);
    let default_provider = default_provider(f, t.get("default"), providers.as_deref());
    let default_retention_period_s = retention_period(f, t.get("default_retention_period"));
    let default_retention_bytes = retention_bytes(f, t.get("default_retention_bytes"));
    Some(Some(StorageConfig {
        default_provider: default_provider?,
        default_retention_period_s: default_retention_period_s?,
        default_retention_bytes: default_retention_bytes?,
        providers: providers?,
    }))
}

fn default_provider(
    f: &mut Findings,
    value: Option<&Value>,
    providers: Option<&[ProviderConfig]>,
) -> Option<String> {
    let path = join(PATH, "default");
    let Some(value) = value else {
        f.key(
            &path,
            "missing: name the provider a channel uses when it names none, such as default: local; there is no default, because Sagüin keeps nothing in a store the operator did not name",
        );
        return None;
    };
    let Value::String(name) = value else {
        f.value(
            &path,
            value,
            "it is the name of a provider under broker.storage.providers, written as text",
        );
        return None;
    };
    // Unknown only once the providers are known: a broken providers block
    // already has its own findings.
    let providers = providers?;
    if providers.iter().any(|p| &p.name == name) {
        return Some(name.clone());
    }
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    f.value(
        &path,
        value,
        format!(
            "no provider has that name; it names one of {}",
            names.join(", ")
        ),
    );
    None
}

fn retention_period(f: &mut Findings, value: Option<&Value>) -> Option<Option<u64>> {
    const ALLOWED: &str = "it is a duration in whole seconds, 1s or more, such as 3d, or `none` to keep records until a size bound removes them";
    let path = join(PATH, "default_retention_period");
    let Some(value) = value else {
        f.key(
            &path,
            format!("missing: {ALLOWED}. It is required because either built-in answer would be wrong: a period quietly turns a replayable log into the last few days of one, and `none` grows every channel until the disk is full"),
        );
        return None;
    };
    let Some(ms) = duration_ms(f, &path, value, NoneRule::Allowed, ALLOWED)? else {
        return Some(None);
    };
    let s = whole_seconds(f, &path, value, ms)?;
    if s == 0 {
        f.value(
            &path,
            value,
            format!("zero could be read as keep nothing or as keep everything, so it is refused; {ALLOWED}"),
        );
        return None;
    }
    Some(Some(s))
}

fn retention_bytes(f: &mut Findings, value: Option<&Value>) -> Option<Option<u64>> {
    const ALLOWED: &str = "it is a size, 1B or more, such as 1GiB, or `none` to keep records until a period removes them";
    let path = join(PATH, "default_retention_bytes");
    let Some(value) = value else {
        f.key(
            &path,
            format!("missing: {ALLOWED}. It is required, like default_retention_period, so that what a channel keeps is always something the operator wrote"),
        );
        return None;
    };
    let n = size(f, &path, value, NoneRule::Allowed, ALLOWED)?;
    if n == Some(0) {
        f.value(
            &path,
            value,
            format!("zero could be read as keep nothing or as keep everything, so it is refused; {ALLOWED}"),
        );
        return None;
    }
    Some(n)
}

fn providers(
    f: &mut Findings,
    value: Option<&Value>,
    limits: Option<&Limits>,
    origin: &Origin<'_>,
) -> Option<Vec<ProviderConfig>> {
    let path = join(PATH, "providers");
    let Some(value) = value else {
        f.key(
            &path,
            "missing: define at least one provider, such as local: {type: redb, file_path: /var/lib/saguin/saguin.redb, max_bytes: 256MiB}",
        );
        return None;
    };
    let (entries, mut ok) = match value {
        Value::Mapping(m) if !m.is_empty() => (include::in_place(m), true),
        Value::Mapping(_) | Value::Null => {
            f.value(&path, value, "define at least one provider under it");
            return None;
        }
        Value::Sequence(items) => include::list(f, &path, items, origin, &LISTED),
        _ if is_include(value) => {
            f.value(
                &path,
                value,
                "!include is written as an entry of a list, so that more files can follow it, such as providers: [!include storage/local.yaml]",
            );
            return None;
        }
        other => {
            f.value(
                &path,
                other,
                "a block of providers is expected here, each under its name",
            );
            return None;
        }
    };
    if ok && entries.is_empty() {
        f.value(
            &path,
            value,
            "the list defines no provider; define at least one, in a file it includes or in place",
        );
        return None;
    }
    let mut all = Vec::new();
    let mut files = Vec::new();
    for entry in &entries {
        let file = entry.file.as_deref();
        let read = f.within(file, |f| {
            let name = provider_name(f, &path, &entry.key)?;
            provider(f, &join(&path, &name), &name, &entry.value, limits)
        });
        match read {
            Some(p) => {
                all.push(p);
                files.push(file);
            }
            None => ok = false,
        }
    }
    ok &= refuse_shared_paths(f, &path, &all, &files, origin);
    ok.then_some(all)
}

fn provider_name(f: &mut Findings, parent: &str, key: &Value) -> Option<String> {
    let Value::String(name) = key else {
        f.key(
            &join(parent, &show(key)),
            "a provider's name is text; this one is not",
        );
        return None;
    };
    let fits = !name.is_empty()
        && name.chars().count() <= MAX_PROVIDER_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !fits {
        f.key(
            &join(parent, name),
            format!("a provider's name is 1 to {MAX_PROVIDER_NAME_CHARS} letters, digits, - and _, such as local or vessel-07"),
        );
        return None;
    }
    Some(name.clone())
}

fn provider(
    f: &mut Findings,
    path: &str,
    name: &str,
    value: &Value,
    limits: Option<&Limits>,
) -> Option<ProviderConfig> {
    let Value::Mapping(mapping) = value else {
        let why = if is_include(value) {
            "!include names a file of providers, and is written as an entry of the list form of broker.storage.providers, such as providers: [!include storage/local.yaml], not as one provider's settings"
        } else {
            "a provider is a block of keys beginning with type: redb or type: memory"
        };
        f.value(path, value, why);
        return None;
    };
    let kind = provider_type(f, path, mapping.get("type"));
    let rest = without_misplaced_keys(f, path, mapping, kind);
    let keys = match kind {
        Some(Type::Redb) => &REDB_KEYS,
        Some(Type::Memory) => &MEMORY_KEYS,
        None => &ANY_PROVIDER_KEYS,
    };
    let rest = Value::Mapping(rest);
    let t = table(f, path, &rest, keys)?;
    let max_bytes = max_bytes(f, path, t.get("max_bytes"), kind, limits);
    let endurance = device_endurance(f, path, t.get("device_endurance"));
    let kind = match kind? {
        Type::Redb => {
            let file_path = file_path(f, path, t.get("file_path"));
            let commit = commit_policy(
                f,
                path,
                t.get("publish_commit_interval"),
                t.get("publish_commit_max_records"),
                limits,
            );
            let checkpoint = checkpoint_interval(f, path, t.get("checkpoint_interval"));
            ProviderKind::Redb {
                file_path: file_path?,
                commit: commit?,
                checkpoint_interval_ms: checkpoint?,
            }
        }
        Type::Memory => ProviderKind::Memory {
            snapshot_dir: snapshot_dir(f, path, t.get("snapshot_dir"))?,
        },
    };
    Some(ProviderConfig {
        name: name.to_string(),
        max_bytes: max_bytes?,
        kind,
        device_endurance_bytes: endurance?,
    })
}

/// `device_endurance`: what the device under the provider is rated to be
/// written before it wears out; `Some(None)` when absent.
fn device_endurance(
    f: &mut Findings,
    provider_path: &str,
    value: Option<&Value>,
) -> Option<Option<u64>> {
    let Some(value) = value else {
        return Some(None);
    };
    let path = join(provider_path, "device_endurance");
    let read = match value {
        Value::String(text) => super::units::parse_endurance_bytes(text),
        _ => Err(super::units::ENDURANCE_FORMS.to_string()),
    };
    match read {
        Ok(bytes) => Some(Some(bytes)),
        Err(why) => {
            f.value(&path, value, why);
            None
        }
    }
}

fn provider_type(f: &mut Findings, path: &str, value: Option<&Value>) -> Option<Type> {
    let path = join(path, "type");
    let Some(value) = value else {
        f.key(
            &path,
            "missing: a provider is type: redb, whose records survive a crash and a power cut, or type: memory, whose records survive only a graceful shutdown",
        );
        return None;
    };
    match value {
        Value::String(s) if s == "redb" => Some(Type::Redb),
        Value::String(s) if s == "memory" => Some(Type::Memory),
        Value::String(s) if s == "sqlite" => {
            f.value(
                &path,
                value,
                "this edition keeps durable channels in redb rather than SQLite: write type: redb with a file_path; every publish it acknowledges is already on disk",
            );
            None
        }
        _ => {
            f.value(&path, value, "it is redb or memory");
            None
        }
    }
}

/// Reports, by what they are, the keys that belong to the reference
/// broker's sqlite provider or to the other type, and returns the rest.
fn without_misplaced_keys(
    f: &mut Findings,
    path: &str,
    mapping: &Mapping,
    kind: Option<Type>,
) -> Mapping {
    let mut rest = mapping.clone();
    let mut misplaced = |key: &str, why: &str| {
        if rest.remove(key).is_some() {
            f.key(&join(path, key), why);
        }
    };
    for key in ["read_connections", "flush_interval"] {
        misplaced(
            key,
            "a setting of the reference broker's sqlite provider, which does not apply to redb: redb reads beside its writer without a pool, and every commit is synced to the provider's journal before it is acknowledged, so there is nothing left to flush; remove it (checkpoint_interval says how often the redb file catches up with its journal)",
        );
    }
    match kind {
        Some(Type::Redb) => misplaced(
            "snapshot_dir",
            "a memory provider's directory; a redb provider keeps its records in file_path",
        ),
        Some(Type::Memory) => {
            misplaced(
                "file_path",
                "names a redb provider's file; a memory provider takes snapshot_dir, a directory, or snapshot_dir: none",
            );
            for key in ["publish_commit_interval", "publish_commit_max_records"] {
                misplaced(
                    key,
                    "a memory provider has no transaction to collect publishes into; remove it, or use a redb provider",
                );
            }
            misplaced(
                "checkpoint_interval",
                "a memory provider has no journal to checkpoint; remove it, or use a redb provider",
            );
        }
        None => {}
    }
    rest
}

fn max_bytes(
    f: &mut Findings,
    provider_path: &str,
    value: Option<&Value>,
    kind: Option<Type>,
    limits: Option<&Limits>,
) -> Option<u64> {
    const ALLOWED: &str = "it is a size, such as 256MiB";
    let path = join(provider_path, "max_bytes");
    let Some(value) = value else {
        f.key(
            &path,
            "missing: write the most this provider may hold, such as max_bytes: 256MiB; there is no default, because a provider with no bound fills its disk or its memory and then fails every write instead of refusing with 0x97",
        );
        return None;
    };
    let n = size(
        f,
        &path,
        value,
        NoneRule::Refused(
            "a provider with no bound fills its disk or its memory and then fails every write",
        ),
        ALLOWED,
    )??;
    if kind == Some(Type::Memory) && usize::try_from(n).is_err() {
        f.value(
            &path,
            value,
            format!(
                "a memory provider cannot hold more than this machine can address ({}); lower it",
                format_size(usize::MAX as u64)
            ),
        );
        return None;
    }
    let Some(limits) = limits else {
        return Some(n);
    };
    let reserve = reserve_bytes(limits);
    let floor = reserve.saturating_mul(2);
    if n < floor {
        f.value(
            &path,
            value,
            format!(
                "it must be at least twice the reserve every provider holds back for the writes that free it, which is one largest record: broker.limits.max_message_size {} plus broker.limits.max_header_bytes {} is {}, so max_bytes is at least {}; raise max_bytes, or lower broker.limits.max_message_size",
                format_size(u64::from(limits.max_message_size_bytes)),
                format_size(u64::from(limits.max_header_bytes)),
                format_size(reserve),
                format_size(floor),
            ),
        );
        return None;
    }
    Some(n)
}

fn file_path(f: &mut Findings, provider_path: &str, value: Option<&Value>) -> Option<PathBuf> {
    const HOW: &str = "it is an absolute file path, such as /var/lib/saguin/saguin.redb";
    let path = join(provider_path, "file_path");
    let Some(value) = value else {
        f.key(
            &path,
            format!("missing: {HOW}; there is no default, because inventing a file name in your filesystem is not Sagüin's to do"),
        );
        return None;
    };
    let Value::String(text) = value else {
        f.value(&path, value, HOW);
        return None;
    };
    let last = text.rsplit('/').next().unwrap_or("");
    let why = if !text.starts_with('/') {
        Some("it must be absolute, so the records do not depend on the directory the broker was started from; write it from /")
    } else if text.contains('\0') {
        Some("a path holds no NUL character")
    } else if last.is_empty() || last == "." || last == ".." {
        Some("it names a directory, not a file; end it with a file name, such as /var/lib/saguin/saguin.redb")
    } else {
        None
    };
    match why {
        Some(why) => {
            f.value(&path, value, why);
            None
        }
        None => Some(PathBuf::from(text)),
    }
}

fn snapshot_dir(
    f: &mut Findings,
    provider_path: &str,
    value: Option<&Value>,
) -> Option<Option<PathBuf>> {
    const HOW: &str = "it is an absolute directory, such as /var/lib/saguin/snapshots, or `none` to keep nothing across a restart";
    let path = join(provider_path, "snapshot_dir");
    let Some(value) = value else {
        f.key(
            &path,
            format!("missing: {HOW}; there is no default, because a memory provider that quietly kept nothing would be the surprise nobody finds until a restart"),
        );
        return None;
    };
    let Value::String(text) = value else {
        f.value(&path, value, HOW);
        return None;
    };
    if text == "none" {
        return Some(None);
    }
    if !text.starts_with('/') {
        f.value(
            &path,
            value,
            "it must be absolute, so a snapshot does not depend on the directory the broker was started from; write it from /",
        );
        return None;
    }
    if text.contains('\0') {
        f.value(&path, value, "a path holds no NUL character");
        return None;
    }
    Some(Some(PathBuf::from(text)))
}

/// How long acknowledged writes may be durable only in the journal before
/// the redb file holds them too (RFC 0003): 10ms to 1m, 1s when absent.
fn checkpoint_interval(
    f: &mut Findings,
    provider_path: &str,
    value: Option<&Value>,
) -> Option<u32> {
    const ALLOWED: &str = "it is a duration from 10ms to 1m, such as 1s (the default): longer writes fewer pages per record and makes the replay after a crash longer";
    let Some(value) = value else {
        return Some(store::DEFAULT_CHECKPOINT_INTERVAL_MS);
    };
    let path = join(provider_path, "checkpoint_interval");
    let ms = duration_ms(
        f,
        &path,
        value,
        NoneRule::Refused(
            "every acknowledged write reaches the redb file in the end; write a duration",
        ),
        ALLOWED,
    )??;
    if !(10..=60_000).contains(&ms) {
        f.value(&path, value, ALLOWED);
        return None;
    }
    u32::try_from(ms).ok()
}

fn commit_policy(
    f: &mut Findings,
    provider_path: &str,
    interval: Option<&Value>,
    max_records: Option<&Value>,
    limits: Option<&Limits>,
) -> Option<CommitPolicy> {
    const ALLOWED: &str = "it is a duration from 1ms to 1s, such as 2ms, or `none` for a transaction per publish; omit it to collect the publishes that arrive during a commit without waiting for more";
    let interval_path = join(provider_path, "publish_commit_interval");
    let records_path = join(provider_path, "publish_commit_max_records");
    let interval_ms = match interval {
        None => None,
        Some(v) => match duration_ms(f, &interval_path, v, NoneRule::Allowed, ALLOWED)? {
            None => {
                if max_records.is_some() {
                    f.key(
                        &records_path,
                        "it applies only with a publish_commit_interval duration, and publish_commit_interval is none, which gives every publish its own transaction; remove it",
                    );
                    return None;
                }
                return Some(CommitPolicy::PerPublish);
            }
            Some(0) => {
                f.value(
                    &interval_path,
                    v,
                    "zero waits for nobody; omit the key to collect without waiting, or write none for a transaction per publish",
                );
                return None;
            }
            Some(ms) if ms > u64::from(MAX_PUBLISH_COMMIT_INTERVAL_MS) => {
                f.value(
                    &interval_path,
                    v,
                    format!("the wait is paid by every connection on every publish, so at 1s a client that waits for its acknowledgement publishes once a second, and nothing past a few milliseconds buys throughput; {ALLOWED}"),
                );
                return None;
            }
            Some(ms) => Some(u32::try_from(ms).ok()?),
        },
    };
    let Some(interval_ms) = interval_ms else {
        if max_records.is_some() {
            f.key(
                &records_path,
                "it applies only with publish_commit_interval, which is what makes a transaction wait for company; alone it would wait for nothing; remove it, or set publish_commit_interval as well",
            );
            return None;
        }
        return Some(CommitPolicy::Collect);
    };
    let Some(value) = max_records else {
        f.key(
            &records_path,
            "missing: publish_commit_interval makes a transaction wait for company, and this says how much; set it to the number of connections you expect to publish at the same time, from 2 to broker.limits.max_connections; there is no default",
        );
        return None;
    };
    let ceiling = limits.map_or(u64::from(u32::MAX), |l| u64::from(l.max_connections));
    let allowed = format!(
        "it is a whole number from 2 to broker.limits.max_connections ({ceiling}): the connections you expect to publish at the same time"
    );
    let n = whole_number(
        f,
        &records_path,
        value,
        NoneRule::Refused("a transaction must close on a count as well as on the interval"),
        &allowed,
    )??;
    if n < 2 {
        f.value(
            &records_path,
            value,
            format!("a transaction of one record waits out the interval and is slower than none; {allowed}"),
        );
        return None;
    }
    if n > ceiling {
        f.value(
            &records_path,
            value,
            format!("a batch holds at most one record per connection, so this count is never reached and every transaction would wait out the interval; {allowed}"),
        );
        return None;
    }
    Some(CommitPolicy::Interval {
        interval_ms,
        max_records: u32::try_from(n).ok()?,
    })
}

/// Two providers on one file or one directory are two writers on it, each
/// with its own bound: refused, naming both, and the files each is written
/// in where those differ. Paths are compared after lexical cleaning, so
/// `/var/lib/x` and `/var/lib/./x` are one store. `files[i]` is the
/// included file `providers[i]` is written in.
fn refuse_shared_paths(
    f: &mut Findings,
    path: &str,
    providers: &[ProviderConfig],
    files: &[Option<&str>],
    origin: &Origin<'_>,
) -> bool {
    let mut seen: Vec<(PathBuf, &str, &Path, Option<&str>)> = Vec::new();
    let mut ok = true;
    for (p, &file) in providers.iter().zip(files) {
        let place = match &p.kind {
            ProviderKind::Redb { file_path, .. } => Some(file_path.as_path()),
            ProviderKind::Memory { snapshot_dir } => snapshot_dir.as_deref(),
        };
        let Some(place) = place else { continue };
        let cleaned = clean(place);
        if let Some((_, other, other_place, other_file)) =
            seen.iter().find(|(c, _, _, _)| *c == cleaned)
        {
            let (mine, its) = (origin.file_of(file), origin.file_of(*other_file));
            let files = if mine == its {
                String::new()
            } else {
                format!(
                    "; provider {other} is defined in {its}, and {} in {mine}",
                    p.name
                )
            };
            f.within(file, |f| {
                f.key(
                    &join(path, &p.name),
                    format!(
                        "it keeps its records at {}, which is where provider {other} keeps its own ({}){files}; two providers on one store are two writers on it, so give each its own",
                        place.display(),
                        other_place.display()
                    ),
                )
            });
            ok = false;
        } else {
            seen.push((cleaned, &p.name, place, file));
        }
    }
    ok
}

/// `.` and empty components dropped and `..` applied, without asking the
/// filesystem.
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse as parse_config;
    use crate::config::tests::{assert_contains, the_one};

    const FILE: &str = "saguin.yaml";

    /// A file whose `broker.storage` block is `block`, indented under it,
    /// with small limits so a small max_bytes is valid.
    fn with_storage(block: &str) -> String {
        let indented: String = block.lines().map(|l| format!("    {l}\n")).collect();
        format!("broker:\n  id: t\n  limits:\n    max_message_size: 64KiB\n    max_header_bytes: 1KiB\n    max_connections: 100\n  storage:\n{indented}")
    }

    fn ok(block: &str) -> StorageConfig {
        match parse_config(&with_storage(block), FILE) {
            Ok(c) => c.broker.storage.expect("a storage block"),
            Err(e) => panic!("expected a valid configuration, got:\n{e}"),
        }
    }

    fn refused(block: &str) -> Vec<String> {
        match parse_config(&with_storage(block), FILE) {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => e.findings,
        }
    }

    fn one_refusal(block: &str) -> String {
        the_one(refused(block))
    }

    const HEAD: &str =
        "default: local\ndefault_retention_period: 3d\ndefault_retention_bytes: none\nproviders:\n";

    fn providers(lines: &str) -> String {
        let indented: String = lines.lines().map(|l| format!("  {l}\n")).collect();
        format!("{HEAD}{indented}")
    }

    fn redb(extra: &str) -> String {
        providers(&format!(
            "local:\n  type: redb\n  file_path: /var/lib/saguin/saguin.redb\n  max_bytes: 64MiB\n{}",
            extra
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>()
        ))
    }

    #[test]
    fn absent_storage_is_none() {
        let c = parse_config("broker:\n  id: t\n", FILE).unwrap();
        assert_eq!(c.broker.storage, None);
    }

    #[test]
    fn a_complete_block_is_read() {
        let c = ok(&providers(
            "local:\n  type: redb\n  file_path: /var/lib/saguin/saguin.redb\n  max_bytes: 256MiB\nvolatile:\n  type: memory\n  max_bytes: 16MiB\n  snapshot_dir: /var/lib/saguin/snapshots\nscratch:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: none\n",
        ));
        assert_eq!(c.default_provider, "local");
        assert_eq!(c.default_retention_period_s, Some(3 * 86_400));
        assert_eq!(c.default_retention_bytes, None);
        assert_eq!(c.providers.len(), 3);
        assert_eq!(
            c.provider("local").unwrap().kind,
            ProviderKind::Redb {
                file_path: "/var/lib/saguin/saguin.redb".into(),
                commit: CommitPolicy::Collect,
                checkpoint_interval_ms: store::DEFAULT_CHECKPOINT_INTERVAL_MS,
            }
        );
        assert_eq!(c.provider("local").unwrap().max_bytes, 256 << 20);
        assert_eq!(
            c.provider("volatile").unwrap().kind,
            ProviderKind::Memory {
                snapshot_dir: Some("/var/lib/saguin/snapshots".into())
            }
        );
        assert_eq!(
            c.provider("scratch").unwrap().kind,
            ProviderKind::Memory { snapshot_dir: None }
        );
    }

    #[test]
    fn commit_policies() {
        let policy = |extra: &str| match &ok(&redb(extra)).providers[0].kind {
            ProviderKind::Redb { commit, .. } => *commit,
            other => panic!("{other:?}"),
        };
        assert_eq!(policy(""), CommitPolicy::Collect);
        assert_eq!(
            policy("publish_commit_interval: none"),
            CommitPolicy::PerPublish
        );
        assert_eq!(
            policy("publish_commit_interval: 2ms\npublish_commit_max_records: 8"),
            CommitPolicy::Interval {
                interval_ms: 2,
                max_records: 8
            }
        );
        assert_eq!(
            policy("publish_commit_interval: 1s\npublish_commit_max_records: 100"),
            CommitPolicy::Interval {
                interval_ms: 1_000,
                max_records: 100
            }
        );
    }

    #[test]
    fn checkpoint_intervals() {
        let interval = |extra: &str| match &ok(&redb(extra)).providers[0].kind {
            ProviderKind::Redb {
                checkpoint_interval_ms,
                ..
            } => *checkpoint_interval_ms,
            other => panic!("{other:?}"),
        };
        assert_eq!(interval(""), store::DEFAULT_CHECKPOINT_INTERVAL_MS);
        assert_eq!(interval("checkpoint_interval: 5s"), 5_000);
        assert_eq!(interval("checkpoint_interval: 10ms"), 10);
        for (extra, path, why) in [
            (
                "checkpoint_interval: 5ms",
                "checkpoint_interval \"5ms\"",
                "from 10ms to 1m",
            ),
            (
                "checkpoint_interval: 2m",
                "checkpoint_interval \"2m\"",
                "from 10ms to 1m",
            ),
            (
                "checkpoint_interval: none",
                "checkpoint_interval \"none\"",
                "reaches the redb file",
            ),
        ] {
            let f = one_refusal(&redb(extra));
            assert_contains(&f, &["broker.storage.providers.local.", path, why]);
        }
        let f = one_refusal(&providers(
            "local:\n  type: memory\n  max_bytes: 16MiB\n  snapshot_dir: none\n  checkpoint_interval: 1s\n",
        ));
        assert_contains(&f, &["checkpoint_interval", "no journal to checkpoint"]);
    }

    #[test]
    fn commit_keys_are_refused_with_their_reason() {
        let cases = [
            (
                "publish_commit_interval: 2s\npublish_commit_max_records: 8",
                "publish_commit_interval \"2s\"",
                "once a second",
            ),
            (
                "publish_commit_interval: 0ms\npublish_commit_max_records: 8",
                "publish_commit_interval \"0ms\"",
                "zero waits for nobody",
            ),
            (
                "publish_commit_interval: 2ms",
                "publish_commit_max_records: missing",
                "there is no default",
            ),
            (
                "publish_commit_max_records: 8",
                "publish_commit_max_records:",
                "alone it would wait for nothing",
            ),
            (
                "publish_commit_interval: none\npublish_commit_max_records: 8",
                "publish_commit_max_records:",
                "is none",
            ),
            (
                "publish_commit_interval: 2ms\npublish_commit_max_records: 1",
                "publish_commit_max_records 1",
                "slower than none",
            ),
            (
                "publish_commit_interval: 2ms\npublish_commit_max_records: 101",
                "publish_commit_max_records 101",
                "max_connections (100)",
            ),
            (
                "publish_commit_interval: soon\npublish_commit_max_records: 8",
                "publish_commit_interval \"soon\"",
                "duration",
            ),
        ];
        for (extra, path, why) in cases {
            let f = one_refusal(&redb(extra));
            assert_contains(&f, &["broker.storage.providers.local.", path, why]);
        }
    }

    #[test]
    fn sqlite_is_refused_naming_redb_and_its_keys_as_not_applying() {
        let f = one_refusal(&providers(
            "local:\n  type: sqlite\n  file_path: /var/lib/saguin/saguin.db\n  max_bytes: 64MiB\n",
        ));
        assert_contains(
            &f,
            &[
                "broker.storage.providers.local.type \"sqlite\"",
                "type: redb",
            ],
        );
        let all = refused(&redb("read_connections: 2\nflush_interval: 150ms"));
        assert_eq!(all.len(), 2, "{all:#?}");
        for (f, key) in all.iter().zip(["read_connections", "flush_interval"]) {
            assert_contains(
                f,
                &[
                    &format!("broker.storage.providers.local.{key}:"),
                    "does not apply to redb",
                ],
            );
        }
    }

    #[test]
    fn keys_of_the_other_type_are_named_for_what_they_are() {
        let f = one_refusal(&redb("snapshot_dir: /tmp/x"));
        assert_contains(&f, &["providers.local.snapshot_dir:", "file_path"]);
        let all = refused(&providers(
            "local:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: none\n  file_path: /x/y\n  publish_commit_interval: 2ms\n",
        ));
        assert_eq!(all.len(), 2, "{all:#?}");
        assert_contains(&all[0], &["providers.local.file_path:", "snapshot_dir"]);
        assert_contains(
            &all[1],
            &["providers.local.publish_commit_interval:", "no transaction"],
        );
        let f = one_refusal(&redb("max_byte: 1MiB"));
        assert_contains(
            &f,
            &["providers.local.max_byte:", "did you mean max_bytes?"],
        );
    }

    #[test]
    fn max_bytes_is_required_and_at_least_twice_the_reserve() {
        let f = one_refusal(&providers(
            "local:\n  type: redb\n  file_path: /var/lib/s.redb\n",
        ));
        assert_contains(&f, &["providers.local.max_bytes: missing"]);
        // The reserve here is 64KiB + 1KiB = 65KiB, so the floor is 130KiB.
        let f = one_refusal(&providers(
            "local:\n  type: memory\n  max_bytes: 129KiB\n  snapshot_dir: none\n",
        ));
        assert_contains(
            &f,
            &[
                "broker.storage.providers.local.max_bytes \"129KiB\"",
                "64KiB (65536 bytes)",
                "1KiB (1024 bytes)",
                "65KiB (66560 bytes)",
                "130KiB (133120 bytes)",
                "lower broker.limits.max_message_size",
            ],
        );
        ok(&providers(
            "local:\n  type: memory\n  max_bytes: 130KiB\n  snapshot_dir: none\n",
        ));
        for (v, why) in [
            ("none", "`none` is not accepted"),
            ("0", "at least twice"),
            ("1MB", "binary"),
        ] {
            let f = one_refusal(&providers(&format!(
                "local:\n  type: memory\n  max_bytes: {v}\n  snapshot_dir: none\n"
            )));
            assert_contains(&f, &["providers.local.max_bytes", why]);
        }
    }

    #[test]
    fn paths_must_be_absolute_and_present() {
        let f = one_refusal(&providers(
            "local:\n  type: redb\n  file_path: data/saguin.redb\n  max_bytes: 1MiB\n",
        ));
        assert_contains(
            &f,
            &["providers.local.file_path \"data/saguin.redb\"", "absolute"],
        );
        let f = one_refusal(&providers(
            "local:\n  type: redb\n  file_path: /var/lib/\n  max_bytes: 1MiB\n",
        ));
        assert_contains(&f, &["names a directory"]);
        let f = one_refusal(&providers("local:\n  type: redb\n  max_bytes: 1MiB\n"));
        assert_contains(&f, &["providers.local.file_path: missing"]);
        let f = one_refusal(&providers("local:\n  type: memory\n  max_bytes: 1MiB\n"));
        assert_contains(&f, &["providers.local.snapshot_dir: missing", "none"]);
        let f = one_refusal(&providers(
            "local:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: snaps\n",
        ));
        assert_contains(&f, &["snapshot_dir \"snaps\"", "absolute"]);
    }

    #[test]
    fn two_providers_on_one_store_are_refused_naming_both() {
        let f = one_refusal(&providers(
            "local:\n  type: redb\n  file_path: /var/lib/x.redb\n  max_bytes: 1MiB\nother:\n  type: redb\n  file_path: /var/lib/./x.redb\n  max_bytes: 1MiB\n",
        ));
        assert_contains(
            &f,
            &[
                "broker.storage.providers.other:",
                "/var/lib/./x.redb",
                "provider local",
                "/var/lib/x.redb",
            ],
        );
        let f = one_refusal(&providers(
            "a:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: /s\nlocal:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: /t/../s/\n",
        ));
        assert_contains(&f, &["providers.local:", "provider a"]);
        // Two memory providers with no directory share nothing.
        ok(&providers(
            "a:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: none\nlocal:\n  type: memory\n  max_bytes: 1MiB\n  snapshot_dir: none\n",
        ));
    }

    #[test]
    fn the_top_keys_are_required() {
        let all = refused(
            "providers:\n  local:\n    type: memory\n    max_bytes: 1MiB\n    snapshot_dir: none\n",
        );
        assert_eq!(all.len(), 3, "{all:#?}");
        assert_contains(&all[0], &["broker.storage.default: missing"]);
        assert_contains(
            &all[1],
            &["broker.storage.default_retention_period: missing", "none"],
        );
        assert_contains(
            &all[2],
            &["broker.storage.default_retention_bytes: missing"],
        );
        let f = one_refusal(
            "default: nowhere\ndefault_retention_period: none\ndefault_retention_bytes: 1GiB\nproviders:\n  local:\n    type: memory\n    max_bytes: 1MiB\n    snapshot_dir: none\n",
        );
        assert_contains(&f, &["broker.storage.default \"nowhere\"", "local"]);
        let f = one_refusal(
            "default: local\ndefault_retention_period: none\ndefault_retention_bytes: none\n",
        );
        assert_contains(&f, &["broker.storage.providers: missing"]);
    }

    #[test]
    fn retention_zero_is_refused_and_seconds_are_whole() {
        for (line, needle) in [
            (
                "default_retention_period: 0s",
                "default_retention_period \"0s\"",
            ),
            ("default_retention_period: 1500ms", "whole seconds"),
            ("default_retention_bytes: 0", "default_retention_bytes 0"),
        ] {
            let block = HEAD
                .replace(
                    "default_retention_period: 3d",
                    if line.contains("period") {
                        line
                    } else {
                        "default_retention_period: 3d"
                    },
                )
                .replace(
                    "default_retention_bytes: none",
                    if line.contains("bytes") {
                        line
                    } else {
                        "default_retention_bytes: none"
                    },
                );
            let f = one_refusal(&format!(
                "{block}  local:\n    type: memory\n    max_bytes: 1MiB\n    snapshot_dir: none\n"
            ));
            assert_contains(&f, &[needle]);
        }
    }

    #[test]
    fn empty_and_misshapen_blocks() {
        for text in ["{}", ""] {
            let c =
                parse_config(&format!("broker:\n  id: t\n  storage: {text}\n"), FILE).unwrap_err();
            assert_eq!(c.findings.len(), 1, "{:#?}", c.findings);
            assert_contains(
                &c.findings[0],
                &["broker.storage", "remove it to run with no storage"],
            );
        }
        let f = one_refusal(&format!("{HEAD}  - local\n"));
        assert_contains(
            &f,
            &["broker.storage.providers (entry 1) \"local\"", "!include"],
        );
        let f = one_refusal(&format!("{HEAD}  []\n"));
        assert_contains(
            &f,
            &["broker.storage.providers (a list)", "defines no provider"],
        );
        let f = one_refusal(&format!("{HEAD}  !include storage.yaml\n"));
        assert_contains(
            &f,
            &[
                "broker.storage.providers (tagged !include)",
                "entry of a list",
            ],
        );
        let f = one_refusal(&providers("local: !include local.yaml\n"));
        assert_contains(
            &f,
            &[
                "providers.local (tagged !include)",
                "not as one provider's settings",
            ],
        );
        let f = one_refusal(&providers("bad name:\n  type: memory\n"));
        assert_contains(&f, &["providers.bad name:", "letters, digits"]);
        let f = one_refusal(&providers("local: 5\n"));
        assert_contains(&f, &["providers.local 5", "type: redb or type: memory"]);
        let f = one_refusal(&providers("local:\n  type: disk\n  max_bytes: 1MiB\n"));
        assert_contains(&f, &["providers.local.type \"disk\"", "redb or memory"]);
    }

    #[test]
    fn a_providers_device_endurance_is_read_and_a_bad_one_named_with_its_fix() {
        let c = ok(&redb("device_endurance: 30TBW"));
        assert_eq!(
            c.providers[0].device_endurance_bytes,
            Some(30_000_000_000_000)
        );
        let c = ok(&redb("device_endurance: 3000 cycles of 32GiB"));
        assert_eq!(c.providers[0].device_endurance_bytes, Some(3000 << 35));
        assert_eq!(ok(&redb("")).providers[0].device_endurance_bytes, None);
        for bad in ["30TB", "30", "lots", "3000 cycles of 32GB"] {
            let f = one_refusal(&redb(&format!("device_endurance: {bad}")));
            assert!(
                f.contains("broker.storage.providers.local.device_endurance") && f.contains(bad),
                "{f}"
            );
        }
        let f = one_refusal(&redb("device_endurance: 30TB"));
        assert!(f.contains("such as 30TBW"), "{f}");
    }

    #[test]
    fn providers_written_in_place_in_a_list_are_read() {
        let c = ok(&providers(
            "- local:\n    type: redb\n    file_path: /var/lib/x.redb\n    max_bytes: 1MiB\n- a:\n    type: memory\n    max_bytes: 1MiB\n    snapshot_dir: none\n  b:\n    type: memory\n    max_bytes: 2MiB\n    snapshot_dir: /s\n",
        ));
        let names: Vec<&str> = c.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["local", "a", "b"]);
        assert_eq!(declared_memory_bytes(&c), 3 << 20);
        let f = one_refusal(&providers(
            "- local:\n    type: memory\n    max_bytes: 1MiB\n    snapshot_dir: none\n- local:\n    type: memory\n    max_bytes: 1MiB\n    snapshot_dir: none\n",
        ));
        assert_contains(
            &f,
            &[
                "providers.local:",
                "provider local is defined twice in saguin.yaml",
            ],
        );
    }

    #[test]
    fn declared_memory_counts_only_memory_providers_and_saturates() {
        let memory = |name: &str, max_bytes| ProviderConfig {
            name: name.into(),
            max_bytes,
            kind: ProviderKind::Memory { snapshot_dir: None },
            device_endurance_bytes: None,
        };
        let mut c = StorageConfig {
            default_provider: "a".into(),
            default_retention_period_s: None,
            default_retention_bytes: None,
            providers: vec![
                memory("a", 8 << 30),
                ProviderConfig {
                    name: "d".into(),
                    max_bytes: 1 << 40,
                    kind: ProviderKind::Redb {
                        file_path: "/x".into(),
                        commit: CommitPolicy::Collect,
                        checkpoint_interval_ms: store::DEFAULT_CHECKPOINT_INTERVAL_MS,
                    },
                    device_endurance_bytes: None,
                },
                memory("b", 8 << 30),
            ],
        };
        assert_eq!(declared_memory_bytes(&c), 16 << 30);
        c.providers.push(memory("c", u64::MAX));
        assert_eq!(declared_memory_bytes(&c), u64::MAX);
    }

    #[test]
    fn reserve_is_the_largest_record() {
        let limits = Limits::default();
        assert_eq!(reserve_bytes(&limits), 1_048_576 + 8_192);
    }
}
