//! `channels:`: the channels the broker keeps records for, and the topics
//! each one claims.
//!
//! A channel claims the topics its `filter` matches; a topic no filter
//! matches is broadcast. Which of several overlapping filters holds a
//! topic is settled by [`crate::core::claims`], never by the order of this
//! file. The only tie that rule can meet is two channels carrying one
//! filter, which is refused here, compared after `{a,b}` is expanded.
//!
//! The block may be written as a list of groups, each a file named by
//! `!include` or channels written in place (see [`super::include`]).
//!
//! Every channel type is served: `append` here, with the keys of `queue`
//! and `latest` read in [`super::queue`] and [`super::latest`].

use std::collections::HashMap;

use serde_yaml::{Mapping, Value};

use super::findings::{join, show, Findings};
use super::include::{self, Entry, Listed, Origin};
use super::latest;
use super::limits::Limits;
use super::queue::{self, dead_letter_filter, QueueConfig, DLQ_LEVEL};
use super::storage::StorageConfig;
use super::table::{is_include, table, Keys, Table};
use super::values::{size, NoneRule, PositiveOrNone, Unit};
use crate::core::dead_letter::dead_letter_channel_name;
use crate::store::{snapshot_file_name, MAX_CHANNEL_NAME_BYTES};

/// One entry under `channels:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelConfig {
    /// The key it is written under: one flat topic level, the root of its
    /// snapshot file, storage key and control topics.
    pub name: String,
    pub kind: ChannelKind,
    /// `filter` as written, braces and all; `<name>/#` when none is.
    pub filter: String,
    /// `filter` with every `{a,b}` expanded, in the order written. These
    /// are what claim topics.
    pub filters: Vec<String>,
    /// The provider holding it: `storage`, or `broker.storage.default`.
    pub storage: String,
    /// `retention_period` in whole seconds; `None` for `none`. Taken from
    /// `broker.storage.default_retention_period` when not written.
    pub retention_period_s: Option<u64>,
    /// `retention_bytes`, which removes the oldest records to stay under;
    /// `None` for `none`. Defaults as the period does.
    pub retention_bytes: Option<u64>,
    /// `max_bytes`, which refuses the publish that would exceed it; `None`
    /// for no bound of the channel's own.
    pub max_bytes: Option<u64>,
    pub start: Start,
}

/// `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelKind {
    /// A durable log each reader replays from its own position.
    Append,
    /// Jobs handed to one worker at a time (see [`super::queue`]).
    Queue(QueueConfig),
    /// The current value of each topic. A deletion is kept for
    /// `deletion_retention_period` in whole seconds; `None` for `none`.
    Latest {
        deletion_retention_period_s: Option<u64>,
    },
}

/// `start`: where a reader with no stored position begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Everything the channel still holds, then what follows. The default.
    Floor,
    /// Only what arrives after it subscribed.
    Tail,
}

/// The most plain filters one `filter:` may expand to. Braces multiply,
/// so a few braced levels reach thousands; a bound keeps a typo from
/// holding startup and memory hostage.
pub const MAX_FILTER_EXPANSIONS: usize = 1024;

const PATH: &str = "channels";

const APPEND_KEYS: Keys = Keys {
    supported: &[
        "type",
        "filter",
        "storage",
        "retention_period",
        "retention_bytes",
        "max_bytes",
        "start",
    ],
    not_yet: &[],
};

/// Keys of the other channel types, each with why an append channel does
/// not take it.
const OTHER_TYPE_KEYS: [(&str, &str); 6] = [
    ("deletion_retention_period", "it applies only to a latest channel, which keeps deletions for the brokers mirroring it; an append channel's records age out by retention_period and retention_bytes; remove it"),
    ("visibility_timeout", "it applies only to a queue, whose jobs are claimed by workers; remove it"),
    ("job_expires_after", "it applies only to a queue, whose jobs are claimed by workers; remove it"),
    ("retry", "it applies only to a queue, whose jobs are claimed by workers; remove it"),
    ("dlq_retention_period", "it applies only to a queue, the one kind of channel that derives a dead-letter channel; remove it"),
    ("dlq_retention_bytes", "it applies only to a queue, the one kind of channel that derives a dead-letter channel; remove it"),
];

/// Every key any channel type takes, for a channel whose type could not
/// be read: its other keys are still checked, without guessing its type.
const ANY_KEYS: Keys = Keys {
    supported: &[
        "type",
        "filter",
        "storage",
        "retention_period",
        "retention_bytes",
        "max_bytes",
        "start",
        "deletion_retention_period",
        "visibility_timeout",
        "job_expires_after",
        "retry",
        "dlq_retention_period",
        "dlq_retention_bytes",
    ],
    not_yet: &[],
};

const LISTED: Listed = Listed {
    noun: "channel",
    example: "events: {type: append}",
    file_example: "channels/telemetry.yaml",
};

/// Why `channels: !include <file>` is refused.
const INCLUDE_AS_BLOCK: &str = "!include is written as an entry of a list, so that more files can follow it, such as channels: [!include channels/telemetry.yaml]";

/// Why `<name>: !include <file>` is refused.
const INCLUDE_AS_CHANNEL: &str = "!include names a file of channels, and is written as an entry of the list form of channels, such as channels: [!include channels/telemetry.yaml], not as one channel's settings";

/// What `broker:` says that channels are checked against. A part that
/// could not be read is `None`, and the checks needing it are skipped:
/// that part has findings of its own.
pub(super) struct Scope {
    pub(super) limits: Option<Limits>,
    /// `Some(None)` when `broker.storage` is absent.
    pub(super) storage: Option<Option<StorageConfig>>,
}

impl Scope {
    /// For a `broker:` that is not a block of keys at all.
    pub(super) fn unknown() -> Scope {
        Scope {
            limits: None,
            storage: None,
        }
    }
}

/// Where a channel's filter came from, to name it in a finding.
struct FilterSite {
    /// `channels.<name>.filter`, or `channels.<name>` when none is written.
    path: String,
    /// The value as written; `None` for the `<name>/#` a channel gets.
    written: Option<Value>,
    text: String,
}

impl FilterSite {
    fn report(&self, f: &mut Findings, why: impl AsRef<str>) {
        match &self.written {
            Some(value) => f.value(&self.path, value, why),
            None => f.key(
                &self.path,
                format!(
                    "no filter is written, so the channel claims {:?}, and {}",
                    self.text,
                    why.as_ref()
                ),
            ),
        }
    }
}

/// A channel's filter, read and expanded, for the check across channels.
struct Claimed {
    name: String,
    /// The included file the channel is written in; `None` for the
    /// configuration file.
    file: Option<String>,
    site: FilterSite,
    filters: Vec<String>,
}

/// What the walk over the channels gathers for the checks made once.
#[derive(Default)]
struct Gathered {
    claimed: Vec<Claimed>,
    /// Channels that need a provider while `broker.storage` is absent.
    without_storage: Vec<String>,
}

/// Reads `channels:`, a block or a list of groups; absent or empty is no
/// channel.
pub(super) fn parse(
    f: &mut Findings,
    value: Option<&Value>,
    scope: &Scope,
    origin: &Origin<'_>,
) -> Option<Vec<ChannelConfig>> {
    let (entries, mut ok) = match value {
        None | Some(Value::Null) => return Some(Vec::new()),
        Some(Value::Mapping(m)) => (include::in_place(m), true),
        Some(Value::Sequence(items)) => include::list(f, PATH, items, origin, &LISTED),
        Some(v) if is_include(v) => {
            f.value(PATH, v, INCLUDE_AS_BLOCK);
            return None;
        }
        Some(other) => {
            f.value(
                PATH,
                other,
                "a block of channels is expected here, each under its name, such as events: {type: append}",
            );
            return None;
        }
    };
    let mut gathered = Gathered::default();
    let mut channels = Vec::with_capacity(entries.len());
    for entry in &entries {
        let file = entry.file.as_deref();
        match f.within(file, |f| channel(f, entry, scope, &mut gathered)) {
            Some(c) => channels.push(c),
            None => ok = false,
        }
    }
    if !gathered.without_storage.is_empty() {
        storage_required(f, &gathered.without_storage);
        ok = false;
    }
    ok &= refuse_shared_filters(f, &gathered.claimed, origin);
    add_dead_letter_channels(&mut channels);
    ok.then_some(channels)
}

fn channel(
    f: &mut Findings,
    entry: &Entry,
    scope: &Scope,
    gathered: &mut Gathered,
) -> Option<ChannelConfig> {
    let (key, body) = (&entry.key, &entry.value);
    let Value::String(name) = key else {
        f.key(
            &join(PATH, &show(key)),
            "a channel's name is text; this one is not",
        );
        return None;
    };
    let path = join(PATH, name);
    let name_ok = channel_name(f, &path, name);
    let mapping = match body {
        Value::Mapping(m) => m,
        _ if is_include(body) => {
            f.value(&path, body, INCLUDE_AS_CHANNEL);
            return None;
        }
        other => {
            f.value(
                &path,
                other,
                "a channel is a block of keys beginning with type: append",
            );
            return None;
        }
    };
    let kind = channel_type(f, &path, mapping.get("type"));
    let rest = match kind {
        TypeRead::Append => without_other_type_keys(f, &path, mapping),
        TypeRead::Queue => queue::without_other_type_keys(f, &path, mapping),
        TypeRead::Latest => latest::without_other_type_keys(f, &path, mapping),
        _ => mapping.clone(),
    };
    let keys = match kind {
        TypeRead::Append => &APPEND_KEYS,
        TypeRead::Queue => &queue::QUEUE_KEYS,
        TypeRead::Latest => &latest::KEYS,
        _ => &ANY_KEYS,
    };
    let braces_ok =
        kind != TypeRead::Queue || queue::filter_has_no_braces(f, &path, rest.get("filter"));
    let name_ok = name_ok && (kind != TypeRead::Queue || dead_letter_name_fits(f, &path, name));
    let rest = Value::Mapping(rest);
    let t = table(f, &path, &rest, keys)?;
    let mut config = settings(
        f,
        &path,
        (name, name_ok, entry.file.as_deref()),
        &t,
        scope,
        gathered,
    );
    if kind == TypeRead::Queue {
        let defaults = match &scope.storage {
            Some(Some(s)) => Some((s.default_retention_period_s, s.default_retention_bytes)),
            _ => None,
        };
        let queue = queue::settings(f, &path, &t, defaults);
        config = match (config, queue) {
            (Some(c), Some(q)) if braces_ok => Some(ChannelConfig {
                kind: ChannelKind::Queue(q),
                retention_period_s: None,
                retention_bytes: None,
                ..c
            }),
            _ => None,
        };
    }
    if kind == TypeRead::Latest {
        let deletions = latest::deletion_retention_period(f, &path, &t);
        config = config
            .zip(deletions)
            .map(|(config, deletions)| ChannelConfig {
                kind: ChannelKind::Latest {
                    deletion_retention_period_s: deletions,
                },
                retention_bytes: None,
                ..config
            });
    }
    // A channel whose name or type is wrong is still read through, so
    // every finding in it is reported.
    if kind == TypeRead::Unreadable || !name_ok {
        return None;
    }
    config
}

/// Reads an append channel's keys, each with its default. `file` is the
/// included file the channel is written in.
fn settings(
    f: &mut Findings,
    path: &str,
    (name, name_ok, file): (&str, bool, Option<&str>),
    t: &Table<'_>,
    scope: &Scope,
    gathered: &mut Gathered,
) -> Option<ChannelConfig> {
    let filter = filter(f, path, name, name_ok, t.get("filter"), scope);
    let filter = filter.map(|(site, filters)| {
        let written = site.text.clone();
        gathered.claimed.push(Claimed {
            name: name.to_string(),
            file: file.map(str::to_string),
            site,
            filters: filters.clone(),
        });
        (written, filters)
    });
    let storage = provider(f, path, name, t.get("storage"), scope, gathered);
    let defaults = match &scope.storage {
        Some(Some(s)) => Some(s),
        _ => None,
    };
    let retention_period_s =
        RETENTION_PERIOD.read(f, path, t, defaults.map(|s| s.default_retention_period_s));
    let retention_bytes =
        RETENTION_BYTES.read(f, path, t, defaults.map(|s| s.default_retention_bytes));
    let max_bytes = max_bytes(f, path, t.get("max_bytes"));
    let start = start(f, path, t.get("start"));
    let (filter, filters) = filter?;
    Some(ChannelConfig {
        name: name.to_string(),
        kind: ChannelKind::Append,
        filter,
        filters,
        storage: storage?,
        retention_period_s: retention_period_s?,
        retention_bytes: retention_bytes?,
        max_bytes: max_bytes?,
        start: start?,
    })
}

/// Checks a channel's name, reporting the first rule it breaks.
fn channel_name(f: &mut Findings, path: &str, name: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let why = if name.is_empty() {
        Some("a channel's name is not empty".to_string())
    } else if name.len() > MAX_CHANNEL_NAME_BYTES {
        Some(format!(
            "a channel's name is at most {MAX_CHANNEL_NAME_BYTES} bytes, and this one is {}",
            name.len()
        ))
    } else if let Some(c) = name.chars().find(|&c| !allowed(c)) {
        Some(format!(
            "{c:?} cannot be in a channel's name, which holds only letters a-z and A-Z, digits 0-9, '-', '_' and '.': the name is one topic level, and the root of the channel's control topics, snapshot file and metric label; where its records sit in the topic space is what its filter says"
        ))
    } else if name == "." || name == ".." {
        Some(format!(
            "{name:?} names a directory in every listing a channel's name becomes a file in; choose another name"
        ))
    } else if name.ends_with(DLQ_LEVEL) {
        Some(format!(
            "a name ending in {DLQ_LEVEL} is reserved for the dead-letter channel a queue derives; choose another name"
        ))
    } else {
        snapshot_file_name(name).err()
    };
    match why {
        Some(why) => {
            f.key(path, why);
            false
        }
        None => true,
    }
}

/// A queue's dead-letter channel is named `<name>__dlq`; a queue name
/// whose derived name breaks a channel name's bounds is refused here, or
/// every dead-letter move would fail for the whole run.
fn dead_letter_name_fits(f: &mut Findings, path: &str, name: &str) -> bool {
    let derived = dead_letter_channel_name(name);
    let why = if derived.len() > MAX_CHANNEL_NAME_BYTES {
        Some(format!(
            "this queue's dead-letter channel is named {derived:?}, {} bytes, and a channel's name is at most {MAX_CHANNEL_NAME_BYTES}; shorten the queue's name",
            derived.len()
        ))
    } else {
        snapshot_file_name(&derived)
            .err()
            .map(|why| format!("this queue's dead-letter channel is named {derived:?}: {why}"))
    };
    match why {
        Some(why) => {
            f.key(path, &why);
            false
        }
        None => true,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum TypeRead {
    Append,
    Queue,
    Latest,
    /// Missing or not a type; reported.
    Unreadable,
}

fn channel_type(f: &mut Findings, channel_path: &str, value: Option<&Value>) -> TypeRead {
    const ALLOWED: &str = "a channel is type: append, a durable log each reader replays from its own position; type: queue, jobs each handed to one worker at a time; or type: latest, the current value of each topic";
    let path = join(channel_path, "type");
    let Some(value) = value else {
        f.key(&path, format!("missing: {ALLOWED}; there is no default"));
        return TypeRead::Unreadable;
    };
    match value {
        Value::String(s) if s == "append" => TypeRead::Append,
        Value::String(s) if s == "queue" => TypeRead::Queue,
        Value::String(s) if s == "latest" => TypeRead::Latest,
        Value::String(s) if s == "broadcast" => {
            f.value(
                &path,
                value,
                "there is no broadcast type: a topic no channel's filter matches is broadcast already; remove the channel",
            );
            TypeRead::Unreadable
        }
        _ => {
            f.value(&path, value, ALLOWED);
            TypeRead::Unreadable
        }
    }
}

/// Reports, with why, the keys belonging to the other channel types, and
/// returns the rest.
fn without_other_type_keys(f: &mut Findings, path: &str, mapping: &Mapping) -> Mapping {
    let mut rest = mapping.clone();
    for (key, why) in OTHER_TYPE_KEYS {
        if rest.remove(key).is_some() {
            f.key(&join(path, key), why);
        }
    }
    rest
}

/// Reads, checks and expands a channel's filter. Returns where it came
/// from and its expansions.
fn filter(
    f: &mut Findings,
    channel_path: &str,
    name: &str,
    name_ok: bool,
    value: Option<&Value>,
    scope: &Scope,
) -> Option<(FilterSite, Vec<String>)> {
    let path = join(channel_path, "filter");
    let site = match value {
        // A name that broke its rules has its finding; the filter made
        // from it would only repeat it.
        None if !name_ok => return None,
        None => FilterSite {
            path: channel_path.to_string(),
            written: None,
            text: format!("{name}/#"),
        },
        Some(v @ Value::String(s)) => FilterSite {
            path,
            written: Some(v.clone()),
            text: s.clone(),
        },
        Some(v @ Value::Mapping(_)) => {
            f.value(
                &path,
                v,
                "a filter is text, but YAML read this one as a block of keys, as it reads any value beginning with {; put the filter in quotes, such as filter: \"{north,south}/events/#\"",
            );
            return None;
        }
        Some(other) => {
            f.value(
                &path,
                other,
                "a filter is text: an MQTT topic filter, such as iot/+/events/#",
            );
            return None;
        }
    };
    let problems = written_form_problems(&site.text);
    for why in &problems {
        site.report(f, why);
    }
    if !problems.is_empty() {
        return None;
    }
    let filters = match expand(&site.text) {
        Ok(filters) => filters,
        Err(why) => {
            site.report(f, why);
            return None;
        }
    };
    if let Some(limits) = &scope.limits {
        if !fits_limits(f, &site, &filters, limits) {
            return None;
        }
    }
    Some((site, filters))
}

/// Every rule the written filter breaks, each said once.
fn written_form_problems(text: &str) -> Vec<String> {
    if text.is_empty() {
        return vec![
            "a filter is not empty: write an MQTT topic filter, such as iot/+/events/#".into(),
        ];
    }
    let mut problems = Vec::new();
    if text.contains('\0') {
        problems.push("a filter holds no NUL character".to_string());
    }
    // Until the braces pair up, the levels holding them cannot be read;
    // the rest still can.
    let brace_problem = brace_problem(text);
    let braces_read = brace_problem.is_none();
    problems.extend(brace_problem);
    let levels: Vec<&str> = text.split('/').collect();
    let last = levels.len() - 1;
    for (index, level) in levels.iter().enumerate() {
        let spellings = match braced(level) {
            Braced::No => vec![*level],
            _ if !braces_read => continue,
            Braced::Yes(spellings) => {
                problems.extend(spelling_problems(level, &spellings));
                spellings
            }
            Braced::Partly => {
                problems.push(partly_braced(level));
                continue;
            }
        };
        for spelling in spellings {
            problems.extend(level_problem(spelling, index, index == last));
        }
    }
    let mut seen = Vec::new();
    problems.retain(|p| {
        let first = !seen.contains(p);
        seen.push(p.clone());
        first
    });
    problems
}

/// What is wrong with the braces of `text` alone - pairing, whole levels,
/// spellings - for a filter held to other rules per level, a bridge
/// rule's. A spelling is a level spelled out: a wildcard in braces would
/// make the expansions differ in what they capture.
pub(super) fn brace_problems(text: &str) -> Vec<String> {
    if let Some(problem) = brace_problem(text) {
        return vec![problem];
    }
    let mut problems = Vec::new();
    for level in text.split('/') {
        match braced(level) {
            Braced::No => {}
            Braced::Yes(spellings) => {
                problems.extend(spelling_problems(level, &spellings));
                if spellings.iter().any(|s| s.contains(['+', '#'])) {
                    problems.push(format!(
                        "{level} holds a wildcard: each spelling in braces is a level spelled out; write + outside braces instead"
                    ));
                }
            }
            Braced::Partly => problems.push(partly_braced(level)),
        }
    }
    problems
}

fn partly_braced(level: &str) -> String {
    format!("braces are a whole level, such as {{data,events}}, and {level:?} has other text beside them")
}

/// Whether braces pair up, hold no `/` and do not nest.
fn brace_problem(text: &str) -> Option<String> {
    const NESTED: &str = "braces do not nest: {a,b} is one level with several spellings";
    const UNOPENED: &str = "a } closes no {";
    const SUBTREE: &str = "braces hold no /: each spelling in {a,b} is one level, never a subtree; write the levels outside the braces, or use +";
    const UNCLOSED: &str = "a { is never closed";
    let mut open = false;
    for c in text.chars() {
        let why = match c {
            '{' if open => NESTED,
            '{' => {
                open = true;
                continue;
            }
            '}' if !open => UNOPENED,
            '}' => {
                open = false;
                continue;
            }
            '/' if open => SUBTREE,
            _ => continue,
        };
        return Some(why.to_string());
    }
    open.then(|| UNCLOSED.to_string())
}

enum Braced<'a> {
    No,
    Yes(Vec<&'a str>),
    /// Braces beside other text in one level, such as `dev-{a,b}`.
    Partly,
}

fn braced(level: &str) -> Braced<'_> {
    if !level.contains(['{', '}']) {
        return Braced::No;
    }
    match level.strip_prefix('{').and_then(|l| l.strip_suffix('}')) {
        Some(inner) if !inner.contains(['{', '}']) => Braced::Yes(inner.split(',').collect()),
        _ => Braced::Partly,
    }
}

fn spelling_problems(level: &str, spellings: &[&str]) -> Vec<String> {
    if spellings == [""] {
        return vec![format!(
            "{level} spells no level: write at least one spelling inside the braces, or remove them"
        )];
    }
    let mut problems = Vec::new();
    if spellings.contains(&"") {
        problems.push(format!(
            "{level} holds an empty spelling: each spelling between the commas is a level, so none is empty"
        ));
    }
    for (i, s) in spellings.iter().enumerate() {
        if !s.is_empty() && spellings[..i].contains(s) {
            problems.push(format!("{level} spells {s:?} twice"));
        }
    }
    problems
}

/// What is wrong with one level (or one spelling inside braces) at
/// `index`, if anything.
fn level_problem(level: &str, index: usize, is_last: bool) -> Option<String> {
    match level {
        "+" | "#" if index == 0 => Some(format!(
            "the first level is spelled out: {level} there would claim the broker's own $SYS and $saguin topics along with everything else; write the first level of the topics this channel holds"
        )),
        "#" if !is_last => Some(
            "# stands for every level below it, so it is only ever the last level".into(),
        ),
        "+" | "#" => None,
        _ if level.contains(['+', '#']) => Some(format!(
            "+ and # each stand for a whole level, so {level:?} is not a level a filter can hold"
        )),
        DLQ_LEVEL => Some(format!(
            "the level {DLQ_LEVEL} is reserved: only the dead-letter channel a queue derives carries it"
        )),
        _ if index == 0 && level.starts_with('$') => Some(
            "the first level does not begin with $, which marks the broker's own topics ($SYS, $saguin)"
                .into(),
        ),
        _ => None,
    }
}

/// The plain filters a written one stands for, every combination of its
/// braced levels in the order written.
pub(super) fn expand(text: &str) -> Result<Vec<String>, String> {
    let levels: Vec<Vec<&str>> = text
        .split('/')
        .map(|level| match braced(level) {
            Braced::Yes(spellings) => spellings,
            _ => vec![level],
        })
        .collect();
    let count = levels
        .iter()
        .try_fold(1usize, |n, spellings| n.checked_mul(spellings.len()))
        .filter(|&n| n <= MAX_FILTER_EXPANSIONS);
    if count.is_none() {
        return Err(format!(
            "its braces expand to more than {MAX_FILTER_EXPANSIONS} plain filters, the most one filter may stand for; write a level with many spellings as + instead"
        ));
    }
    let mut filters = vec![String::new()];
    for (index, spellings) in levels.iter().enumerate() {
        filters = filters
            .iter()
            .flat_map(|prefix| {
                spellings.iter().map(move |s| {
                    if index == 0 {
                        (*s).to_string()
                    } else {
                        format!("{prefix}/{s}")
                    }
                })
            })
            .collect();
    }
    Ok(filters)
}

/// A filter deeper or longer than a publish may be claims topics nobody
/// can publish, and a subscriber could not even subscribe with it.
fn fits_limits(f: &mut Findings, site: &FilterSite, filters: &[String], limits: &Limits) -> bool {
    let mut fits = true;
    // Braces hold no `/`, so every expansion has the written depth.
    let levels = site.text.split('/').count();
    if levels > limits.max_topic_levels as usize {
        site.report(
            f,
            format!(
                "it is {levels} levels deep, more than broker.limits.max_topic_levels ({}) lets a topic or a filter be, so no publish could carry a topic it claims; shorten it or raise the limit",
                limits.max_topic_levels
            ),
        );
        fits = false;
    }
    // One byte per wildcard is the shortest level a device would publish
    // there, so a filter fits exactly when its own spelling does.
    let longest = filters.iter().max_by_key(|f| f.len());
    if let Some(longest) = longest.filter(|l| l.len() > limits.max_topic_length as usize) {
        let spelled = if filters.len() > 1 {
            format!("its longest expansion {longest:?} is")
        } else {
            "it is".to_string()
        };
        site.report(
            f,
            format!(
                "{spelled} {} bytes, so a topic it claims, with a level of one byte for each + and #, is longer than broker.limits.max_topic_length ({}) lets a publish carry; shorten it or raise the limit",
                longest.len(),
                limits.max_topic_length
            ),
        );
        fits = false;
    }
    fits
}

/// The provider a channel is kept in.
fn provider(
    f: &mut Findings,
    channel_path: &str,
    name: &str,
    value: Option<&Value>,
    scope: &Scope,
    gathered: &mut Gathered,
) -> Option<String> {
    let path = join(channel_path, "storage");
    let storage = match &scope.storage {
        Some(Some(storage)) => storage,
        Some(None) => {
            gathered.without_storage.push(name.to_string());
            return None;
        }
        // broker.storage is written but broken, and has its findings.
        None => return None,
    };
    let Some(value) = value else {
        return Some(storage.default_provider.clone());
    };
    let names: Vec<&str> = storage.providers.iter().map(|p| p.name.as_str()).collect();
    match value {
        Value::String(s) if storage.provider(s).is_some() => Some(s.clone()),
        Value::String(_) => {
            f.value(
                &path,
                value,
                format!(
                    "no provider under broker.storage.providers has that name; it names one of {}, or is omitted for broker.storage.default ({})",
                    names.join(", "),
                    storage.default_provider
                ),
            );
            None
        }
        _ => {
            f.value(
                &path,
                value,
                format!(
                    "it is the name of a provider under broker.storage.providers, one of {}",
                    names.join(", ")
                ),
            );
            None
        }
    }
}

fn storage_required(f: &mut Findings, names: &[String]) {
    let which = match names {
        [one] => format!("channel {one} keeps its records"),
        _ => format!("channels {} keep their records", names.join(", ")),
    };
    f.key(
        "broker.storage",
        format!(
            "missing, and {which} in a storage provider, so it must be configured: write broker.storage with default, default_retention_period, default_retention_bytes and at least one provider under providers"
        ),
    );
}

const ZERO_RETENTION: &str =
    "zero could be read as keep nothing or as keep everything, so it is refused";

/// A channel's `retention_period`. Its default is `None` while no default
/// can be known, which `broker.storage` already reports.
const RETENTION_PERIOD: PositiveOrNone = PositiveOrNone {
    key: "retention_period",
    unit: Unit::Seconds,
    allowed: "it is a duration in whole seconds, 1s or more, such as 7d, or `none` to keep records until a size bound removes them; omit it for broker.storage.default_retention_period",
    zero: ZERO_RETENTION,
};

const RETENTION_BYTES: PositiveOrNone = PositiveOrNone {
    key: "retention_bytes",
    unit: Unit::Bytes,
    allowed: "it is a size, 1B or more, such as 20GiB, or `none` to keep records until a period removes them; omit it for broker.storage.default_retention_bytes",
    zero: ZERO_RETENTION,
};

fn max_bytes(f: &mut Findings, channel_path: &str, value: Option<&Value>) -> Option<Option<u64>> {
    const ALLOWED: &str = "it is a size, 1B or more, such as 1GiB: a publish that would take the channel past it is refused with 0x97 and nothing stored is removed; write `none`, or omit it, for no bound of the channel's own";
    let path = join(channel_path, "max_bytes");
    let Some(value) = value else {
        return Some(None);
    };
    let bytes = size(f, &path, value, NoneRule::Allowed, ALLOWED)?;
    if bytes == Some(0) {
        f.value(
            &path,
            value,
            format!("0 would refuse every publish; {ALLOWED}"),
        );
        return None;
    }
    Some(bytes)
}

fn start(f: &mut Findings, channel_path: &str, value: Option<&Value>) -> Option<Start> {
    let Some(value) = value else {
        return Some(Start::Floor);
    };
    match value {
        Value::String(s) if s == "floor" => Some(Start::Floor),
        Value::String(s) if s == "tail" => Some(Start::Tail),
        _ => {
            f.value(
                &join(channel_path, "start"),
                value,
                "it is floor, the default, where a reader with no stored position is served everything the channel still holds, or tail, where it is served only what arrives after it subscribed",
            );
            None
        }
    }
}

/// Two channels carrying one plain filter tie on every topic it matches,
/// and only file order could break the tie. Each is refused at the
/// channel written second, naming the first and what collided, and the
/// files the two are written in where those differ.
fn refuse_shared_filters(f: &mut Findings, claimed: &[Claimed], origin: &Origin<'_>) -> bool {
    let mut holder: HashMap<&str, usize> = HashMap::new();
    let mut ok = true;
    for (index, channel) in claimed.iter().enumerate() {
        // By the earlier channel, in the order first met.
        let mut clashes: Vec<(usize, Vec<&str>)> = Vec::new();
        for filter in &channel.filters {
            match holder.get(filter.as_str()) {
                Some(&other) => match clashes.iter_mut().find(|(o, _)| *o == other) {
                    Some((_, list)) => list.push(filter),
                    None => clashes.push((other, vec![filter])),
                },
                None => {
                    holder.insert(filter, index);
                }
            }
        }
        for (other, filters) in clashes {
            ok = false;
            let other = &claimed[other];
            let what = match filters.as_slice() {
                _ if channel.filters.len() == 1 => "this filter is".to_string(),
                [one] => format!("its expansion {one:?} is"),
                many => format!("its expansions {} are", listed(many)),
            };
            let theirs = match &other.site.written {
                Some(_) => format!("filter {:?}", other.site.text),
                None => format!("which writes no filter and so claims {:?}", other.site.text),
            };
            let (mine, its) = (
                origin.file_of(channel.file.as_deref()),
                origin.file_of(other.file.as_deref()),
            );
            let files = if mine == its {
                String::new()
            } else {
                format!(", defined in {its} while this channel is in {mine}")
            };
            f.within(channel.file.as_deref(), |f| {
                channel.site.report(
                    f,
                    format!(
                        "{what} carried by channel {} as well ({theirs}{files}); two channels may not carry the same filter, since only the order of the configuration could then say which holds those topics; change one of the two",
                        other.name,
                    ),
                )
            });
        }
    }
    ok
}

/// `"a/b" and "a/c"`, or the first few and a count.
fn listed(filters: &[&str]) -> String {
    const SHOWN: usize = 4;
    let quoted: Vec<String> = filters
        .iter()
        .take(SHOWN)
        .map(|f| format!("{f:?}"))
        .collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        _ if filters.len() > SHOWN => {
            format!("{} and {} more", quoted.join(", "), filters.len() - SHOWN)
        }
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The append channel every queue derives: same provider, the derived
/// filter, the queue's `dlq_retention_*`.
pub fn dead_letter_channel(queue: &ChannelConfig, settings: &QueueConfig) -> ChannelConfig {
    let filters: Vec<String> = queue
        .filters
        .iter()
        .map(|f| dead_letter_filter(f))
        .collect();
    ChannelConfig {
        name: dead_letter_channel_name(&queue.name),
        kind: ChannelKind::Append,
        filter: dead_letter_filter(&queue.filter),
        filters,
        storage: queue.storage.clone(),
        retention_period_s: settings.dlq_retention_period_s,
        retention_bytes: settings.dlq_retention_bytes,
        max_bytes: None,
        start: Start::Floor,
    }
}

/// Appends each queue's dead-letter channel after the channels written.
fn add_dead_letter_channels(channels: &mut Vec<ChannelConfig>) {
    let derived: Vec<ChannelConfig> = channels
        .iter()
        .filter_map(|c| match c.kind {
            ChannelKind::Queue(q) => Some(dead_letter_channel(c, &q)),
            _ => None,
        })
        .collect();
    channels.extend(derived);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{assert_contains, the_one};
    use crate::config::{parse as parse_config, Config, ConfigError};

    const FILE: &str = "saguin.yaml";

    const BROKER: &str = "broker:
  id: t
  storage:
    default: local
    default_retention_period: 3d
    default_retention_bytes: none
    providers:
      local: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
      other: {type: memory, max_bytes: 64MiB, snapshot_dir: none}
";

    /// A file with a complete `broker.storage` and `block` under
    /// `channels:`.
    fn with_channels(block: &str) -> String {
        let indented: String = block.lines().map(|l| format!("  {l}\n")).collect();
        format!("{BROKER}channels:\n{indented}")
    }

    fn ok(block: &str) -> Vec<ChannelConfig> {
        match parse_config(&with_channels(block), FILE) {
            Ok(c) => c.channels,
            Err(e) => panic!("expected a valid configuration, got:\n{e}"),
        }
    }

    fn one(block: &str) -> ChannelConfig {
        let mut all = ok(block);
        assert_eq!(all.len(), 1, "{all:#?}");
        all.remove(0)
    }

    fn refused_file(text: &str) -> ConfigError {
        match parse_config(text, FILE) {
            Ok(c) => panic!("expected a refusal, got {c:?}"),
            Err(e) => e,
        }
    }

    fn refused(block: &str) -> Vec<String> {
        refused_file(&with_channels(block)).findings
    }

    /// Defect: a queue whose derived `<name>__dlq` broke a channel name's
    /// bounds passed the check, then failed every dead-letter move.
    #[test]
    fn a_queue_whose_dead_letter_name_cannot_be_a_channel_is_refused() {
        let long = "q".repeat(MAX_CHANNEL_NAME_BYTES - 4);
        let dotted = (1..MAX_CHANNEL_NAME_BYTES)
            .map(|k| format!("q{}", ".".repeat(k)))
            .find(|n| {
                snapshot_file_name(n).is_ok()
                    && snapshot_file_name(&dead_letter_channel_name(n)).is_err()
            })
            .expect("a dotted name that fits while its dead-letter name does not");
        for name in [long, dotted] {
            let finding = one_refusal(&format!("{name:?}:\n  type: queue\n  filter: jobs/#\n"));
            assert_contains(&finding, &["dead-letter channel is named", &name]);
        }
    }

    fn one_refusal(block: &str) -> String {
        the_one(refused(block))
    }

    /// The one finding for a channel `c` of type append with `lines`.
    fn append_refusal(lines: &str) -> String {
        one_refusal(&format!("c:\n  type: append\n{}", indent(lines)))
    }

    fn append_ok(lines: &str) -> ChannelConfig {
        one(&format!("c:\n  type: append\n{}", indent(lines)))
    }

    fn indent(lines: &str) -> String {
        lines.lines().map(|l| format!("  {l}\n")).collect()
    }

    // ---- what is read ---------------------------------------------------

    #[test]
    fn a_complete_append_channel_is_read() {
        let c = one("events:\n  type: append\n  filter: iot/+/+/events/#\n  storage: other\n  retention_period: 7d\n  retention_bytes: 20GiB\n  max_bytes: 30GiB\n  start: tail\n");
        assert_eq!(
            c,
            ChannelConfig {
                name: "events".into(),
                kind: ChannelKind::Append,
                filter: "iot/+/+/events/#".into(),
                filters: vec!["iot/+/+/events/#".into()],
                storage: "other".into(),
                retention_period_s: Some(7 * 86_400),
                retention_bytes: Some(20 << 30),
                max_bytes: Some(30 << 30),
                start: Start::Tail,
            }
        );
    }

    #[test]
    fn unwritten_keys_take_their_defaults() {
        let c = one("events:\n  type: append\n");
        assert_eq!(c.filter, "events/#");
        assert_eq!(c.filters, vec!["events/#"]);
        assert_eq!(c.storage, "local");
        assert_eq!(c.retention_period_s, Some(3 * 86_400));
        assert_eq!(c.retention_bytes, None);
        assert_eq!(c.max_bytes, None);
        assert_eq!(c.start, Start::Floor);
    }

    #[test]
    fn none_is_a_value_for_every_bound() {
        let c = append_ok("retention_period: none\nretention_bytes: none\nmax_bytes: none");
        assert_eq!(c.retention_period_s, None);
        assert_eq!(c.retention_bytes, None);
        assert_eq!(c.max_bytes, None);
        let c = append_ok("retention_bytes: 1024\nmax_bytes: 1");
        assert_eq!((c.retention_bytes, c.max_bytes), (Some(1024), Some(1)));
    }

    #[test]
    fn braces_expand_to_every_combination_in_written_order() {
        let c = append_ok("filter: iot/weather/+/{data,events}");
        assert_eq!(c.filter, "iot/weather/+/{data,events}");
        assert_eq!(
            c.filters,
            vec!["iot/weather/+/data", "iot/weather/+/events"]
        );
        let c = append_ok("filter: \"{north,south}/{a,b}/#\"");
        assert_eq!(
            c.filters,
            vec!["north/a/#", "north/b/#", "south/a/#", "south/b/#"]
        );
        let c = append_ok("filter: x/{one}");
        assert_eq!(c.filters, vec!["x/one"]);
    }

    #[test]
    fn no_channels_is_valid() {
        for text in [BROKER.to_string(), format!("{BROKER}channels:\n")] {
            let c: Config = parse_config(&text, FILE).unwrap();
            assert!(c.channels.is_empty());
        }
        // Without a channel, storage is not needed.
        let c = parse_config("broker:\n  id: t\nchannels: {}\n", FILE).unwrap();
        assert!(c.channels.is_empty());
    }

    #[test]
    fn overlapping_filters_are_accepted_and_order_is_kept() {
        let all = ok("water-measurement:\n  type: append\n  filter: iot/water/+/+/#\nwater-location:\n  type: append\n  filter: iot/water/+/location/#\n");
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["water-measurement", "water-location"]);
    }

    #[test]
    fn the_claims_built_from_channels_route_by_exactness() {
        use crate::core::claims::Claims;
        let all = ok("events:\n  type: append\n  filter: iot/+/+/events/#\nalarms:\n  type: append\n  filter: iot/hq/+/events/{alarms,faults}\n");
        let input: Vec<(&str, &[String])> = all
            .iter()
            .map(|c| (c.name.as_str(), c.filters.as_slice()))
            .collect();
        let claims = Claims::new(&input);
        assert_eq!(claims.channel_for_topic("iot/hq/d/events/faults"), Some(1));
        assert_eq!(claims.channel_for_topic("iot/hq/d/events/other"), Some(0));
        assert_eq!(claims.channels_reached_by("iot/hq/#"), vec![0, 1]);
    }

    // ---- types and keys -------------------------------------------------

    #[test]
    fn a_missing_or_unknown_type_is_refused_and_the_rest_still_checked() {
        let all = refused("c:\n  filter: a/#/b\n");
        assert_eq!(all.len(), 2, "{all:#?}");
        assert_contains(&all[0], &["channels.c.type: missing", "type: append"]);
        assert_contains(&all[1], &["channels.c.filter \"a/#/b\"", "last level"]);
        let f = one_refusal("c:\n  type: log\n");
        assert_contains(&f, &["channels.c.type \"log\"", "type: append"]);
        let f = one_refusal("c:\n  type: broadcast\n");
        assert_contains(
            &f,
            &[
                "channels.c.type \"broadcast\"",
                "no channel's filter matches is broadcast",
            ],
        );
    }

    #[test]
    fn keys_of_other_types_are_refused_on_append_with_their_reason() {
        let all = refused("c:\n  type: append\n  deletion_retention_period: 1d\n  visibility_timeout: 30s\n  job_expires_after: 6h\n  retry: {max_attempts: 5}\n  dlq_retention_period: 30d\n  dlq_retention_bytes: 1GiB\n");
        assert_eq!(all.len(), 6, "{all:#?}");
        assert_contains(
            &all[0],
            &["channels.c.deletion_retention_period:", "latest channel"],
        );
        for (f, key) in all[1..4]
            .iter()
            .zip(["visibility_timeout", "job_expires_after", "retry"])
        {
            assert_contains(f, &[&format!("channels.c.{key}:"), "only to a queue"]);
        }
        for (f, key) in all[4..]
            .iter()
            .zip(["dlq_retention_period", "dlq_retention_bytes"])
        {
            assert_contains(f, &[&format!("channels.c.{key}:"), "dead-letter channel"]);
        }
    }

    #[test]
    fn an_unknown_key_is_refused_with_a_suggestion() {
        let f = append_refusal("retention_perod: 1d");
        assert_contains(
            &f,
            &[
                "channels.c.retention_perod:",
                "did you mean retention_period?",
            ],
        );
    }

    #[test]
    fn the_list_form_is_read_and_an_include_without_a_file_is_refused() {
        // Groups written in place, in the order written; no file needed.
        let all = ok("- events:\n    type: append\n-\n- alarms:\n    type: append\n  faults:\n    type: append\n");
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["events", "alarms", "faults"]);
        assert!(ok("[]").is_empty());
        // Text not read from a file has no directory to resolve against.
        let f = one_refusal("- !include channels/telemetry.yaml\n");
        assert_contains(
            &f,
            &[
                "channels (entry 1) \"channels/telemetry.yaml\":",
                "saguin.yaml is not read from a file",
            ],
        );
        // Two groups in one file defining one name.
        let f = one_refusal("- events:\n    type: append\n- events:\n    type: append\n");
        assert_contains(
            &f,
            &[
                "channels.events:",
                "channel events is defined twice in saguin.yaml",
            ],
        );
    }

    #[test]
    fn an_include_anywhere_but_a_list_entry_is_refused() {
        let f = only(refused_file(&format!(
            "{BROKER}channels: !include channels.yaml\n"
        )));
        assert_contains(&f, &["channels (tagged !include)", "an entry of a list"]);
        let f = one_refusal("events: !include events.yaml\n");
        assert_contains(
            &f,
            &[
                "channels.events (tagged !include)",
                "not as one channel's settings",
            ],
        );
        let f = one_refusal("- events: !include events.yaml\n");
        assert_contains(&f, &["channels.events (tagged !include)"]);
        let f = one_refusal("- !other x.yaml\n");
        assert_contains(
            &f,
            &[
                "channels (entry 1) (tagged !other)",
                "!other is not a tag Sagüin reads",
            ],
        );
        let f = one_refusal("- events\n");
        assert_contains(
            &f,
            &[
                "channels (entry 1) \"events\"",
                "an entry of the list is !include",
            ],
        );
        let f = only(refused_file(&BROKER.replace(
            "broker:\n  id: t\n",
            "broker:\n  id: t\n  limits: !include limits.yaml\n",
        )));
        assert_contains(
            &f,
            &[
                "broker.limits (tagged !include)",
                "read only as an entry of the list form",
            ],
        );
        let f = only(refused_file(&format!("{BROKER}channels: events\n")));
        assert_contains(&f, &["channels \"events\"", "block of channels"]);
        let f = one_refusal("events: append\n");
        assert_contains(&f, &["channels.events \"append\"", "type: append"]);
    }

    fn only(e: ConfigError) -> String {
        assert_eq!(e.findings.len(), 1, "{:#?}", e.findings);
        e.findings[0].clone()
    }

    // ---- names ----------------------------------------------------------

    #[test]
    fn channel_names_follow_the_rules() {
        let long = "n".repeat(129);
        let dotted = "a..".repeat(40);
        let cases: [(&str, &str); 8] = [
            ("\"a/b\"", "'/' cannot be in a channel's name"),
            ("\"a b\"", "' ' cannot be in a channel's name"),
            ("\"a+\"", "'+' cannot be"),
            ("\"\"", "not empty"),
            ("\".\"", "names a directory"),
            ("\"..\"", "names a directory"),
            ("jobs__dlq", "reserved for the dead-letter channel"),
            (&long, "at most 128 bytes, and this one is 129"),
        ];
        for (name, why) in cases {
            let f = one_refusal(&format!("{name}:\n  type: append\n  filter: x/y\n"));
            assert_contains(&f, &["channels.", why]);
        }
        // 120 bytes is within the limit, but 80 dots take three bytes each
        // in the snapshot file's name.
        let f = one_refusal(&format!("\"{dotted}\":\n  type: append\n  filter: x/y\n"));
        assert_contains(&f, &[&format!("channels.{dotted}:"), "snapshot file name"]);
        // Every allowed character, and the longest name.
        ok(&format!(
            "Ab-_.9:\n  type: append\n{}:\n  type: append\n",
            "n".repeat(128)
        ));
        let f = one_refusal("5:\n  type: append\n");
        assert_contains(&f, &["channels.5:", "name is text"]);
    }

    #[test]
    fn a_bad_name_without_a_filter_is_reported_once() {
        let f = one_refusal("\"$x\":\n  type: append\n");
        assert_contains(&f, &["channels.$x:", "'$' cannot be"]);
    }

    // ---- filters --------------------------------------------------------

    #[test]
    fn filters_follow_mqtt_and_the_channel_rules() {
        let cases = [
            ("a/#/b", "only ever the last level"),
            ("a/b#", "whole level"),
            ("a/+b/c", "whole level"),
            ("+/x", "first level is spelled out"),
            ("\"#\"", "first level is spelled out"),
            ("$SYS/x", "does not begin with $"),
            ("\"{$a,b}/x\"", "does not begin with $"),
            ("\"{+,b}/x\"", "first level is spelled out"),
            ("a/__dlq", "__dlq is reserved"),
            ("a/{b,__dlq}/#", "__dlq is reserved"),
            ("a/{b/c}", "braces hold no /"),
            ("a/{}", "spells no level"),
            ("a/{b,}", "empty spelling"),
            ("a/{,b}", "empty spelling"),
            ("a/{b,b}", "spells \"b\" twice"),
            ("a/dev-{1,2}", "braces are a whole level"),
            ("a/{b", "never closed"),
            ("a/b}", "closes no {"),
            ("a/{b,{c}}", "do not nest"),
            ("a/{b,#}/c", "only ever the last level"),
            ("\"\"", "not empty"),
            ("\"a/\\0\"", "NUL"),
        ];
        for (filter, why) in cases {
            let f = append_refusal(&format!("filter: {filter}"));
            assert_contains(&f, &["channels.c.filter \"", why]);
        }
        // A valid filter in every shape MQTT allows.
        for filter in ["a", "a/+", "a/#", "a//b", "a/+/+/#", "a/{b,+}/#", "a/{b,#}"] {
            append_ok(&format!("filter: \"{filter}\""));
        }
    }

    #[test]
    fn a_filter_yaml_read_as_something_else_is_explained() {
        let f = append_refusal("filter: {a,b}");
        assert_contains(
            &f,
            &["channels.c.filter (a mapping)", "put the filter in quotes"],
        );
        let f = append_refusal("filter: 7");
        assert_contains(&f, &["channels.c.filter 7", "a filter is text"]);
    }

    #[test]
    fn every_rule_a_filter_breaks_is_reported() {
        let all = refused("c:\n  type: append\n  filter: +/a+/__dlq/#/x\n");
        assert_eq!(all.len(), 4, "{all:#?}");
        assert_contains(&all[0], &["first level is spelled out"]);
        assert_contains(&all[1], &["\"a+\" is not a level"]);
        assert_contains(&all[2], &["__dlq is reserved"]);
        assert_contains(&all[3], &["only ever the last level"]);
        // Braces that do not pair up hide only the levels holding them.
        let all = refused("c:\n  type: append\n  filter: +/{b/c}\n");
        assert_eq!(all.len(), 2, "{all:#?}");
        assert_contains(&all[0], &["braces hold no /"]);
        assert_contains(&all[1], &["first level is spelled out"]);
    }

    #[test]
    fn expansions_are_bounded() {
        // 4 x 4 x 4 x 4 x 4 = 1024 is the most; one more spelling is over.
        let level = "{a,b,c,d}";
        let at_bound = format!("x/{}", [level; 5].join("/"));
        assert_eq!(
            append_ok(&format!("filter: {at_bound}")).filters.len(),
            1024
        );
        let over = format!("{at_bound}/{{y,z}}");
        let f = append_refusal(&format!("filter: {over}"));
        assert_contains(&f, &["channels.c.filter", "more than 1024 plain filters"]);
    }

    #[test]
    fn two_channels_carrying_one_filter_are_refused_naming_both() {
        let f = one_refusal(
            "a:\n  type: append\n  filter: x/{p,q}/#\nb:\n  type: append\n  filter: x/{q,r}/#\n",
        );
        assert_contains(
            &f,
            &[
                "channels.b.filter \"x/{q,r}/#\"",
                "its expansion \"x/q/#\" is carried by channel a as well",
                "filter \"x/{p,q}/#\"",
            ],
        );
        let f =
            one_refusal("a:\n  type: append\n  filter: x/y\nb:\n  type: append\n  filter: x/y\n");
        assert_contains(
            &f,
            &["channels.b.filter \"x/y\": this filter is carried by channel a"],
        );
        let f = one_refusal("a:\n  type: append\n  filter: \"{x,y,z}/{1,2}\"\nb:\n  type: append\n  filter: \"{x,y}/{1,2}\"\n");
        assert_contains(
            &f,
            &["its expansions \"x/1\", \"x/2\", \"y/1\" and \"y/2\" are carried by channel a"],
        );
        let f = one_refusal("events:\n  type: append\nb:\n  type: append\n  filter: events/#\n");
        assert_contains(
            &f,
            &[
                "channels.b.filter \"events/#\"",
                "channel events as well (which writes no filter and so claims \"events/#\")",
            ],
        );
        let f = one_refusal("a:\n  type: append\n  filter: events/#\nevents:\n  type: append\n");
        assert_contains(
            &f,
            &[
                "channels.events: no filter is written, so the channel claims \"events/#\"",
                "channel a as well",
            ],
        );
    }

    #[test]
    fn a_filter_claiming_what_another_spells_differently_is_not_a_duplicate() {
        // Overlap is the point; only identical expansions tie.
        ok("a:\n  type: append\n  filter: x/+\nb:\n  type: append\n  filter: x/{p,q}\nc:\n  type: append\n  filter: x/#\n");
    }

    fn with_limits(limits: &str, block: &str) -> String {
        with_channels(block).replace(
            "broker:\n  id: t\n",
            &format!("broker:\n  id: t\n  limits:\n{}", indent(&indent(limits))),
        )
    }

    #[test]
    fn a_filter_leaves_room_under_max_topic_length() {
        let text = with_limits(
            "max_topic_length: 10",
            "c:\n  type: append\n  filter: abcdefg/+/#\n",
        );
        let f = only(refused_file(&text));
        assert_contains(&f, &["channels.c.filter \"abcdefg/+/#\"", "it is 11 bytes"]);
        let text = with_limits(
            "max_topic_length: 10",
            "c:\n  type: append\n  filter: abcdef/+/#\n",
        );
        assert_eq!(parse_config(&text, FILE).unwrap().channels.len(), 1);
        let text = with_limits(
            "max_topic_length: 10",
            "c:\n  type: append\n  filter: a/{b,cdefghijk}\n",
        );
        let f = only(refused_file(&text));
        assert_contains(
            &f,
            &[
                "its longest expansion \"a/cdefghijk\" is 11 bytes",
                "broker.limits.max_topic_length (10)",
            ],
        );
        let text = with_limits("max_topic_length: 8", "longname:\n  type: append\n");
        let f = only(refused_file(&text));
        assert_contains(
            &f,
            &[
                "channels.longname: no filter is written, so the channel claims \"longname/#\"",
                "10 bytes",
            ],
        );
    }

    #[test]
    fn a_filter_deeper_than_max_topic_levels_is_refused() {
        let text = with_limits(
            "max_topic_levels: 3",
            "c:\n  type: append\n  filter: a/b/c/#\n",
        );
        let f = only(refused_file(&text));
        assert_contains(
            &f,
            &[
                "channels.c.filter \"a/b/c/#\"",
                "4 levels deep",
                "broker.limits.max_topic_levels (3)",
            ],
        );
        let text = with_limits(
            "max_topic_levels: 3",
            "c:\n  type: append\n  filter: a/+/#\n",
        );
        assert!(parse_config(&text, FILE).is_ok());
    }

    // ---- storage and bounds ---------------------------------------------

    #[test]
    fn storage_names_a_defined_provider() {
        let f = append_refusal("storage: nowhere");
        assert_contains(
            &f,
            &[
                "channels.c.storage \"nowhere\"",
                "one of local, other",
                "broker.storage.default (local)",
            ],
        );
        let f = append_refusal("storage: [local]");
        assert_contains(&f, &["channels.c.storage (a list)", "name of a provider"]);
    }

    #[test]
    fn a_channel_without_broker_storage_is_refused_once() {
        let e = refused_file("broker:\n  id: t\nchannels:\n  a:\n    type: append\n  b:\n    type: append\n    storage: local\n");
        assert_eq!(e.findings.len(), 1, "{:#?}", e.findings);
        assert_contains(
            &e.findings[0],
            &[
                "broker.storage: missing",
                "channels a, b keep their records",
                "must be configured",
            ],
        );
        let f = only(refused_file(
            "broker:\n  id: t\nchannels:\n  a:\n    type: append\n",
        ));
        assert_contains(&f, &["channel a keeps its records"]);
    }

    #[test]
    fn a_broken_storage_block_is_not_blamed_on_the_channels() {
        let text = with_channels("c:\n  type: append\n").replace("default: local", "default: gone");
        let f = only(refused_file(&text));
        assert_contains(&f, &["broker.storage.default \"gone\""]);
    }

    #[test]
    fn retention_is_a_duration_or_size_or_none_and_never_zero() {
        let cases = [
            (
                "retention_period: 0s",
                "channels.c.retention_period \"0s\"",
                "zero could be read",
            ),
            (
                "retention_period: 1500ms",
                "channels.c.retention_period \"1500ms\"",
                "whole seconds",
            ),
            (
                "retention_period: 7",
                "channels.c.retention_period 7",
                "needs a unit",
            ),
            (
                "retention_period: forever",
                "channels.c.retention_period \"forever\"",
                "duration",
            ),
            (
                "retention_bytes: 0",
                "channels.c.retention_bytes 0",
                "zero could be read",
            ),
            (
                "retention_bytes: 1GB",
                "channels.c.retention_bytes \"1GB\"",
                "binary",
            ),
            (
                "max_bytes: 0B",
                "channels.c.max_bytes \"0B\"",
                "0 would refuse every publish",
            ),
            ("max_bytes: lots", "channels.c.max_bytes \"lots\"", "size"),
            ("start: head", "channels.c.start \"head\"", "floor"),
        ];
        for (line, path, why) in cases {
            let f = append_refusal(line);
            assert_contains(&f, &[path, why]);
        }
    }

    // ---- the report -----------------------------------------------------

    #[test]
    fn every_finding_is_reported_and_names_the_file() {
        let text = format!(
            "{}channels:\n  a:\n    type: append\n    filter: +/x\n    start: now\n  b__dlq:\n    type: append\n  c:\n    type: queue\n    retention_bytes: 1GiB\n  d:\n    type: append\n    filter: d/#\n  e:\n    type: append\n    filter: d/#\n    storage: elsewhere\n",
            BROKER.replace("id: t", "id: t\n  log_level: loud")
        );
        let e = refused_file(&text);
        let report = e.to_string();
        let expected = [
            "broker.log_level \"loud\"",
            "channels.a.filter \"+/x\"",
            "channels.a.start \"now\"",
            "channels.b__dlq:",
            "channels.c.retention_bytes:",
            "channels.e.storage \"elsewhere\"",
            "channels.e.filter \"d/#\": this filter is carried by channel d",
        ];
        assert_eq!(e.findings.len(), expected.len(), "{report}");
        assert_contains(&report, &["configuration is invalid:", "saguin.yaml:"]);
        for (finding, needle) in e.findings.iter().zip(expected) {
            assert_contains(finding, &[needle]);
            assert_contains(&report, &[&format!("  - {finding}")]);
        }
    }

    // ---- the shipped file -------------------------------------------------

    #[test]
    fn the_shipped_file_enables_no_channel() {
        assert!(crate::config::default_config_in(std::path::Path::new("/"))
            .channels
            .is_empty());
    }

    /// The commented-out example in `config/saguin.yaml`, uncommented
    /// beside a storage block, is a valid channel.
    #[test]
    fn the_shipped_example_channel_is_valid() {
        let shipped = crate::config::DEFAULT_CONFIG_YAML;
        let start = shipped.find("# channels:").expect("the example block");
        let example: String = shipped[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#')))
            .map(|l| format!("{l}\n"))
            .collect();
        let config = match parse_config(&format!("{BROKER}{example}"), FILE) {
            Ok(config) => config,
            Err(e) => panic!("the example in config/saguin.yaml is invalid:\n{e}"),
        };
        let [c] = config.channels.as_slice() else {
            panic!("expected one channel, got {:#?}", config.channels);
        };
        assert_eq!(c.name, "events");
        assert_eq!(c.filters, vec!["site/+/alarms", "site/+/faults"]);
        assert_eq!(c.retention_bytes, Some(64 << 20));
    }
}
