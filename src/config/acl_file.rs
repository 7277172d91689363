//! `broker.mqtt.acl_file`: the authorization file, read and checked
//! against the channels the configuration declares.
//!
//! Every mistake is a finding naming its line, the key path, what was
//! written and what to write instead; one run reports them all. A file
//! with any finding is refused whole: at startup the broker does not
//! start, and on a reload it keeps what it had.

use std::fmt;
use std::path::Path;

use serde_yaml::{Mapping, Value};

use super::acl_lines::{Lines, Step};
use super::channels::{expand, ChannelConfig, ChannelKind};
use super::findings::{show, syntax_finding};
use crate::acl::filter::{covers, globs_overlap, intersect, literal_count};
use crate::acl::{Acl, ChannelType, Entry, Features, Limits, Role, Rule, Subject, Verbs};
use crate::codec::topic::is_valid_topic_filter;

/// Why an acl_file was refused: every finding, each naming its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFileError {
    pub file: String,
    pub findings: Vec<String>,
}

impl fmt::Display for AclFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "acl_file {} cannot be used:", self.file)?;
        for finding in &self.findings {
            write!(f, "\n  - {finding}")?;
        }
        Ok(())
    }
}

impl std::error::Error for AclFileError {}

/// Reads and checks the file at `path` against `channels`.
pub fn load(path: &Path, channels: &[ChannelConfig]) -> Result<Acl, AclFileError> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, &file, channels),
        Err(e) => Err(AclFileError {
            file,
            findings: vec![unreadable(&e)],
        }),
    }
}

/// The finding for an acl_file that cannot be read.
pub(super) fn unreadable(e: &std::io::Error) -> String {
    format!("the file cannot be read: {e}; name the authorization file the broker's user may read, or remove broker.mqtt.acl_file to let every client do anything")
}

/// Checks acl_file text; `source` names it.
pub fn parse(text: &str, source: &str, channels: &[ChannelConfig]) -> Result<Acl, AclFileError> {
    let refuse = |findings| AclFileError {
        file: source.to_string(),
        findings,
    };
    let root: Value = serde_yaml::from_str(text).map_err(|e| refuse(vec![syntax_finding(&e)]))?;
    let mut reader = Reader {
        lines: Lines::new(text),
        findings: Vec::new(),
        channels,
    };
    let acl = reader.root(&root, source);
    match acl {
        Some(acl) if reader.findings.is_empty() => Ok(acl),
        _ if reader.findings.is_empty() => Err(refuse(vec![
            "the file could not be read, for a reason this version failed to name".into(),
        ])),
        _ => Err(refuse(reader.findings)),
    }
}

struct Reader<'a> {
    lines: Lines<'a>,
    findings: Vec<String>,
    channels: &'a [ChannelConfig],
}

/// The dotted path a finding names, built alongside the line steps.
fn dotted(steps: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Key(key) if out.is_empty() => out.push_str(key),
            Step::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Step::Item(n) => out.push_str(&format!("[{n}]")),
        }
    }
    out
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) => Some(s),
        _ => None,
    }
}

fn channel_type(kind: &ChannelKind) -> ChannelType {
    match kind {
        ChannelKind::Append => ChannelType::Append,
        ChannelKind::Latest { .. } => ChannelType::Latest,
        ChannelKind::Queue(_) => ChannelType::Queue,
    }
}

impl Reader<'_> {
    /// Records a finding about the key at `steps`: `line N: path: why`.
    fn finding(&mut self, steps: &[Step<'_>], why: impl AsRef<str>) {
        let path = dotted(steps);
        let finding = match self.lines.of(steps) {
            Some(line) => format!("line {line}: {path}: {}", why.as_ref()),
            None => format!("{path}: {}", why.as_ref()),
        };
        self.findings.push(finding);
    }

    fn root(&mut self, root: &Value, source: &str) -> Option<Acl> {
        let empty = Mapping::new();
        let map = match root {
            Value::Mapping(map) => map,
            Value::Null => &empty,
            _ => {
                self.findings.push(
                    "the file is a mapping with roles: and users:, such as roles: {reader: [{topic: \"alerts/#\", allow: [read]}]}".into(),
                );
                return None;
            }
        };
        for (key, _) in map {
            match text(key) {
                Some("roles") | Some("users") => {}
                Some("clients") => self.finding(
                    &[Step::Key("clients")],
                    "the block is users:, keyed by the user name a client authenticates under; a client id proves nothing and no rule reads it, so rename the block users:",
                ),
                Some(other) => self.finding(
                    &[Step::Key(other)],
                    "not a key of an acl_file; it holds roles: and users:",
                ),
                None => self
                    .findings
                    .push(format!("{}: not a key of an acl_file", show(key))),
            }
        }
        let roles = self.roles(map.get("roles"));
        let entries = self.users(map.get("users"), &roles);
        Some(Acl {
            source: source.to_string(),
            roles,
            entries,
        })
    }

    fn roles(&mut self, value: Option<&Value>) -> Vec<Role> {
        let mut roles = Vec::new();
        let Some(value) = value else {
            return roles;
        };
        let Value::Mapping(map) = value else {
            self.finding(
                &[Step::Key("roles")],
                "it maps each role's name to its list of rules",
            );
            return roles;
        };
        for (name, rules) in map {
            let Some(name) = text(name) else {
                self.findings
                    .push(format!("roles: the role name {} is not text", show(name)));
                continue;
            };
            let at = [Step::Key("roles"), Step::Key(name)];
            let Value::Sequence(list) = rules else {
                self.finding(
                    &at,
                    "a role is a list of rules, each beginning with channel:, topic: or broker:",
                );
                continue;
            };
            if list.is_empty() {
                self.finding(
                    &at,
                    "a role with no rules grants nothing; give it a rule or remove it",
                );
            }
            let rules = list
                .iter()
                .enumerate()
                .filter_map(|(i, rule)| self.rule(&[at[0], at[1], Step::Item(i)], rule))
                .collect();
            roles.push(Role {
                name: name.to_string(),
                rules,
            });
        }
        roles
    }

    fn rule(&mut self, at: &[Step<'_>], value: &Value) -> Option<Rule> {
        let Value::Mapping(map) = value else {
            self.finding(
                at,
                "a rule is a mapping: channel:, topic: or broker:, with allow:",
            );
            return None;
        };
        let subjects: Vec<&str> = ["channel", "topic", "broker"]
            .into_iter()
            .filter(|k| map.contains_key(*k))
            .collect();
        let kind = match subjects.as_slice() {
            [one] => *one,
            [] => {
                self.finding(
                    at,
                    "a rule names what it is about with one of channel:, topic: or broker:",
                );
                return None;
            }
            _ => {
                self.finding(
                    at,
                    format!(
                        "a rule is about one thing, and this names {}; write one rule each",
                        subjects.join(" and ")
                    ),
                );
                return None;
            }
        };
        let allowed_keys: &[&str] = match kind {
            "channel" => &["channel", "filter", "allow"],
            "topic" => &["topic", "allow"],
            _ => &["broker", "allow", "deny"],
        };
        let mut ok = true;
        for (key, _) in map {
            let key = text(key).unwrap_or("?");
            if allowed_keys.contains(&key) {
                continue;
            }
            let why = match key {
                "deny" => "deny: is written only on a broker: features rule; a rule elsewhere can only grant".to_string(),
                "filter" => "filter: narrows a channel rule; a topic: rule is its own filter".to_string(),
                _ => format!("not a key of a {kind} rule; it takes {}", allowed_keys.join(", ")),
            };
            self.finding(&[at, &[Step::Key(key)]].concat(), why);
            ok = false;
        }
        let rule = match kind {
            "channel" => self.channel_rule(at, map),
            "topic" => self.topic_rule(at, map),
            _ => self.broker_rule(at, map),
        };
        rule.filter(|_| ok)
    }

    fn verbs(
        &mut self,
        at: &[Step<'_>],
        value: Option<&Value>,
        allowed: Verbs,
        what: &str,
    ) -> Option<Verbs> {
        let at = [at, &[Step::Key("allow")]].concat();
        let Some(Value::Sequence(list)) = value else {
            self.finding(
                &at,
                format!(
                    "{what} rule lists what it allows, such as allow: [{}]",
                    allowed.names().join(", ")
                ),
            );
            return None;
        };
        if list.is_empty() {
            self.finding(
                &at,
                "an empty allow: grants nothing; name a verb or remove the rule",
            );
            return None;
        }
        let mut verbs = Verbs::NONE;
        let mut ok = true;
        for item in list {
            let name = text(item).unwrap_or("");
            match Verbs::named(name) {
                Some(verb) if verbs.contains(verb) => {
                    self.finding(&at, format!("{name} is written twice; write it once"));
                    ok = false;
                }
                Some(verb) if allowed.contains(verb) => verbs = verbs.with(verb),
                _ if name == "read" && what == "a queue channel" => {
                    self.finding(
                        &at,
                        "read is not a verb of a queue: taking a job holds it for one worker, so a queue cannot be watched at all - its depth is on the metrics listener; a worker is granted consume",
                    );
                    ok = false;
                }
                _ => {
                    self.finding(
                        &at,
                        format!(
                            "{} is not a verb of {what} rule; it takes {}",
                            show(item),
                            allowed.names().join(", ")
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(verbs)
    }

    /// A filter as a rule writes it, expanded and checked for shape.
    fn rule_filters(
        &mut self,
        at: &[Step<'_>],
        key: &str,
        value: &Value,
        first_level_free: bool,
    ) -> Option<Vec<String>> {
        let at = [at, &[Step::Key(key)]].concat();
        let Some(written) = text(value) else {
            self.finding(
                &at,
                format!(
                    "{} is not a topic filter; write it as text, such as {key}: iot/+/health/%u",
                    show(value)
                ),
            );
            return None;
        };
        let filters = match expand(written) {
            Ok(filters) => filters,
            Err(why) => {
                self.finding(&at, format!("{written:?}: {why}"));
                return None;
            }
        };
        for filter in &filters {
            let why = if !is_valid_topic_filter(filter) {
                Some("+ and # each take a whole level, and # is only ever the last level; a # in the middle would stand for everything after it")
            } else if !first_level_free && filter.starts_with(['+', '#']) {
                Some("its first level is spelled out, as a channel's is")
            } else {
                None
            };
            if let Some(why) = why {
                self.finding(
                    &at,
                    format!("{written:?} is not a well-formed filter: {why}"),
                );
                return None;
            }
        }
        Some(filters)
    }

    fn channel_rule(&mut self, at: &[Step<'_>], map: &Mapping) -> Option<Rule> {
        let channel_at = [at, &[Step::Key("channel")]].concat();
        let name = text(map.get("channel")?).unwrap_or("");
        if name.contains('%') {
            self.finding(
                &channel_at,
                format!("{name:?}: %u and %c are put into filters, never into a channel name, which is declared once for every client; name the channel and narrow it with filter:"),
            );
            return None;
        }
        let Some(channel) = self.channels.iter().find(|c| c.name == name) else {
            let known: Vec<&str> = self.channels.iter().map(|c| c.name.as_str()).collect();
            let listed = if known.is_empty() {
                "the configuration declares no channels".to_string()
            } else {
                format!("the channels are {}", known.join(", "))
            };
            self.finding(
                &channel_at,
                format!("{name:?} is not a configured channel; {listed}"),
            );
            return None;
        };
        let channel_type = channel_type(&channel.kind);
        let what = match channel_type {
            ChannelType::Append => "an append channel",
            ChannelType::Latest => "a latest channel",
            ChannelType::Queue => "a queue channel",
        };
        let verbs = self.verbs(at, map.get("allow"), channel_type.verbs(), what);
        let (written_filter, filters) = match map.get("filter") {
            None => (None, Vec::new()),
            Some(value) => {
                let filters = self.rule_filters(at, "filter", value, false)?;
                for filter in &filters {
                    // `%u` and `%c` stand as spelled-out levels here.
                    if !channel
                        .filters
                        .iter()
                        .any(|own| intersect(filter, own).is_some())
                    {
                        self.finding(
                            &[at, &[Step::Key("filter")]].concat(),
                            format!(
                                "{filter:?} matches none of channel {name}'s topics, whose filter is {:?}, so it grants nothing; write a filter inside the channel's",
                                channel.filter
                            ),
                        );
                        return None;
                    }
                }
                (text(value).map(str::to_string), filters)
            }
        };
        Some(Rule {
            subject: Subject::Channel(name.to_string()),
            written_filter,
            filters,
            verbs: verbs?,
            denies: Features::NONE,
        })
    }

    fn topic_rule(&mut self, at: &[Step<'_>], map: &Mapping) -> Option<Rule> {
        let value = map.get("topic")?;
        let filters = self.rule_filters(at, "topic", value, true);
        let verbs = self.verbs(
            at,
            map.get("allow"),
            Verbs::WRITE.with(Verbs::READ),
            "a topic",
        );
        let filters = filters?;
        for filter in &filters {
            let inside = self
                .channels
                .iter()
                .find_map(|c| c.filters.iter().find(|own| covers(own, filter)).map(|_| c));
            if let Some(channel) = inside {
                self.finding(
                    &[at, &[Step::Key("topic")]].concat(),
                    format!(
                        "topic {filter:?} is inside channel {}, whose filter is {:?}: a topic: rule governs broadcast only; write it as a channel rule, channel: {} with filter: {filter}",
                        channel.name, channel.filter, channel.name
                    ),
                );
                return None;
            }
        }
        Some(Rule {
            subject: Subject::Topic,
            written_filter: text(value).map(str::to_string),
            filters,
            verbs: verbs?,
            denies: Features::NONE,
        })
    }

    fn broker_rule(&mut self, at: &[Step<'_>], map: &Mapping) -> Option<Rule> {
        let broker_at = [at, &[Step::Key("broker")]].concat();
        match map.get("broker").and_then(text) {
            Some("sessions") => {
                if map.contains_key("deny") {
                    self.finding(&[at, &[Step::Key("deny")]].concat(), "deny: is written only on a broker: features rule; broker: sessions takes allow: [disconnect]");
                    return None;
                }
                let verbs = self.verbs(
                    at,
                    map.get("allow"),
                    Verbs::DISCONNECT,
                    "a broker: sessions",
                )?;
                Some(Rule {
                    subject: Subject::Sessions,
                    written_filter: None,
                    filters: Vec::new(),
                    verbs,
                    denies: Features::NONE,
                })
            }
            Some("features") => {
                if map.contains_key("allow") {
                    self.finding(
                        &[at, &[Step::Key("allow")]].concat(),
                        "a feature is every client's until a role takes it away, so broker: features takes deny: and nothing else",
                    );
                    return None;
                }
                let denies = self.denies(at, map.get("deny"))?;
                Some(Rule {
                    subject: Subject::Features,
                    written_filter: None,
                    filters: Vec::new(),
                    verbs: Verbs::NONE,
                    denies,
                })
            }
            _ => {
                self.finding(
                    &broker_at,
                    format!("{} is not a facility of the broker; it is sessions (allow: [disconnect]) or features (deny: [...])", show(map.get("broker").unwrap_or(&Value::Null))),
                );
                None
            }
        }
    }

    fn denies(&mut self, at: &[Step<'_>], value: Option<&Value>) -> Option<Features> {
        let at = [at, &[Step::Key("deny")]].concat();
        let names: Vec<&str> = Features::ALL.iter().map(|(_, n)| *n).collect();
        let Some(Value::Sequence(list)) =
            value.filter(|v| !matches!(v, Value::Sequence(l) if l.is_empty()))
        else {
            self.finding(
                &at,
                format!(
                    "broker: features lists the features it takes away, from {}",
                    names.join(", ")
                ),
            );
            return None;
        };
        let mut denies = Features::NONE;
        let mut ok = true;
        for item in list {
            let name = text(item).unwrap_or("");
            match Features::named(name) {
                Some(feature) if denies.contains(feature) => {
                    self.finding(&at, format!("{name} is written twice; write it once"));
                    ok = false;
                }
                Some(feature) => denies = denies.with(feature),
                None if name == "retain" => {
                    self.finding(&at, "the feature is retained, named for the broker block that configures it; write retained");
                    ok = false;
                }
                None => {
                    self.finding(
                        &at,
                        format!(
                            "{} is not a feature a role may take away; they are {}",
                            show(item),
                            names.join(", ")
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(denies)
    }

    fn users(&mut self, value: Option<&Value>, roles: &[Role]) -> Vec<Entry> {
        let mut entries: Vec<Entry> = Vec::new();
        let Some(value) = value else {
            return entries;
        };
        let Value::Mapping(map) = value else {
            self.finding(
                &[Step::Key("users")],
                "it maps each user-name pattern to its roles, such as \"device-*\": [device]",
            );
            return entries;
        };
        for (pattern, body) in map {
            let Some(pattern) = text(pattern) else {
                self.findings.push(format!(
                    "users: the pattern {} is not text; write it in quotes",
                    show(pattern)
                ));
                continue;
            };
            let at = [Step::Key("users"), Step::Key(pattern)];
            if let Some(entry) = self.entry(&at, pattern, body, roles) {
                entries.push(entry);
            }
        }
        for (i, a) in entries.iter().enumerate() {
            for b in &entries[i + 1..] {
                if literal_count(&a.pattern) == literal_count(&b.pattern)
                    && globs_overlap(&a.pattern, &b.pattern)
                {
                    let at = [Step::Key("users"), Step::Key(&b.pattern)];
                    let why = format!(
                        "{:?} and {:?} spell out as many characters and can match the same name, so nothing would decide which applies; spell one of them out further",
                        a.pattern, b.pattern
                    );
                    self.finding(&at, why);
                }
            }
        }
        entries
    }

    fn entry(
        &mut self,
        at: &[Step<'_>],
        pattern: &str,
        body: &Value,
        roles: &[Role],
    ) -> Option<Entry> {
        let (role_list, client_ids, limits) = match body {
            Value::Sequence(_) => (Some(body), None, None),
            Value::Mapping(map) => {
                for (key, _) in map {
                    let key = text(key).unwrap_or("?");
                    if !["roles", "client_ids", "limits"].contains(&key) {
                        self.finding(
                            &[at, &[Step::Key(key)]].concat(),
                            "not a key of a user entry; it takes roles, client_ids and limits",
                        );
                    }
                }
                (
                    map.get("roles"),
                    map.get("client_ids").map(Some),
                    map.get("limits"),
                )
            }
            _ => {
                self.finding(at, "an entry is a list of roles, or a mapping with roles:, client_ids: and limits:");
                return None;
            }
        };
        let role_indexes = self.entry_roles(at, role_list, roles);
        let client_ids = match client_ids {
            None => Some(None),
            Some(value) => self.client_ids(at, value).map(Some),
        };
        let limits = match limits {
            None => Some(None),
            Some(value) => self.limits(at, value).map(Some),
        };
        Some(Entry {
            pattern: pattern.to_string(),
            roles: role_indexes?,
            client_ids: client_ids?,
            limits: limits?,
        })
    }

    fn entry_roles(
        &mut self,
        at: &[Step<'_>],
        value: Option<&Value>,
        roles: &[Role],
    ) -> Option<Vec<usize>> {
        let list = match value {
            Some(Value::Sequence(list)) if !list.is_empty() => list,
            _ => {
                self.finding(
                    at,
                    "an entry names the roles it gives, such as roles: [device]; it is the whole statement about the names it matches, so one with no roles is refused rather than read as granting nothing",
                );
                return None;
            }
        };
        let mut indexes = Vec::new();
        for item in list {
            let name = text(item).unwrap_or("");
            match roles.iter().position(|r| r.name == name) {
                Some(index) if !indexes.contains(&index) => indexes.push(index),
                Some(_) => {}
                None => {
                    let known: Vec<&str> = roles.iter().map(|r| r.name.as_str()).collect();
                    self.finding(
                        at,
                        format!(
                            "{} is not a role under roles:; the roles are {}",
                            show(item),
                            known.join(", ")
                        ),
                    );
                    return None;
                }
            }
        }
        Some(indexes)
    }

    fn client_ids(&mut self, at: &[Step<'_>], value: Option<&Value>) -> Option<Vec<String>> {
        let at = [at, &[Step::Key("client_ids")]].concat();
        let patterns: Option<Vec<String>> = match value {
            Some(Value::String(s)) if !s.is_empty() => Some(vec![s.clone()]),
            Some(Value::Sequence(list)) if !list.is_empty() => list
                .iter()
                .map(|v| text(v).filter(|s| !s.is_empty()).map(str::to_string))
                .collect(),
            _ => None,
        };
        if patterns.is_none() {
            self.finding(
                &at,
                "it admits no client id, which would refuse every device holding this credential; write a pattern such as \"%u\" or \"north-*\", or remove the key to admit any",
            );
        }
        patterns
    }

    fn limits(&mut self, at: &[Step<'_>], value: &Value) -> Option<Limits> {
        let at = [at, &[Step::Key("limits")]].concat();
        let Value::Mapping(map) = value else {
            self.finding(&at, "it is a mapping with publish_rate: and publish_bytes:");
            return None;
        };
        let mut limits = Limits::default();
        let mut ok = true;
        for (key, value) in map {
            let key = text(key).unwrap_or("?");
            let here = [at.as_slice(), &[Step::Key(key)]].concat();
            match key {
                "publish_rate" => match value
                    .as_u64()
                    .filter(|&n| n > 0 && n <= u64::from(u32::MAX))
                {
                    Some(n) => limits.publish_rate_per_s = Some(n as u32),
                    None => {
                        self.finding(&here, format!("{} is not a rate: it is a whole number of messages per second above 0; omit it for no bound", show(value)));
                        ok = false;
                    }
                },
                "publish_bytes" => {
                    let parsed = match value {
                        Value::String(s) => super::units::parse_size_bytes(s).ok(),
                        Value::Number(n) => n.as_u64(),
                        _ => None,
                    };
                    match parsed.filter(|&n| n > 0) {
                        Some(n) => limits.publish_bytes_per_s = Some(n),
                        None => {
                            self.finding(&here, format!("{} is not a size per second: write one such as 8KiB; omit it for no bound", show(value)));
                            ok = false;
                        }
                    }
                }
                _ => {
                    self.finding(
                        &here,
                        "not a limit an entry sets; it takes publish_rate and publish_bytes",
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(limits)
    }
}

#[cfg(test)]
#[path = "acl_file_tests.rs"]
mod tests;
