//! mosquitto's `acl_file`, read as mosquitto reads it and written as this
//! broker's roles, so that what each user may do stays what it was.
//!
//! mosquitto decides a check in two passes, each taking its denials first
//! and the first line that matches: the user's own lines (the anonymous
//! section for a client without a user name), then the `pattern` lines,
//! which apply to everybody. So a topic is allowed when no user `deny`
//! matches it and either a user grant does, or no `pattern deny` does and
//! a pattern grant does. The roles format only grants, so each denial is
//! taken out of the grants it meets here:
//!
//! - a grant a denial covers whole is dropped, which is exact;
//! - a grant a denial only cuts into is dropped too, refusing more than
//!   mosquitto did, and the report says what to write instead: a grant
//!   minus a part of it is no union of filters;
//! - a denial meeting no grant changes nothing.
//!
//! `%u` and `%c` keep their meaning: the roles format puts the user name
//! and client id into a rule the same way, one pass each. A pattern is
//! compared with a user's denials with that user's name put in; `%c`
//! stays unknown, so a level holding it may equal any level.

use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use super::report::Report;
use super::Failure;
use crate::acl::filter::covers;
use crate::codec::topic::is_valid_topic_filter;

/// The roles a migrated file names.
const PATTERNS_ROLE: &str = "patterns";
const ANONYMOUS_ROLE: &str = "anonymous";
const NO_TOPICS_ROLE: &str = "no-topics";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    ReadWrite,
    Deny,
}

impl Access {
    fn verbs(self) -> &'static [&'static str] {
        match self {
            Access::Read => &["read"],
            Access::Write => &["write"],
            Access::ReadWrite => &["write", "read"],
            Access::Deny => &[],
        }
    }
}

/// One `topic` or `pattern` line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    line: usize,
    access: Access,
    topic: String,
}

/// The lines of one `user` section, or of the anonymous one.
#[derive(Clone, Debug, Default)]
struct Section {
    /// The `user` lines that open it.
    opened_at: Vec<usize>,
    rules: Vec<Rule>,
}

/// A mosquitto acl_file as read.
#[derive(Debug)]
pub struct MosquittoAcl {
    path: PathBuf,
    anonymous: Section,
    /// In the order first named; a user named twice gathers both sections,
    /// as mosquitto does.
    users: Vec<(String, Section)>,
    patterns: Section,
}

/// Reads the file at `path`.
pub fn read(path: &Path) -> Result<MosquittoAcl, Failure> {
    parse(path, &super::read_text(path, "the acl_file")?)
}

/// Reads `text` as the acl_file `path`.
pub fn parse(path: &Path, text: &str) -> Result<MosquittoAcl, Failure> {
    let mut acl = MosquittoAcl {
        path: path.to_path_buf(),
        anonymous: Section::default(),
        users: Vec::new(),
        patterns: Section::default(),
    };
    // The section `topic` lines go to: `None` for the anonymous one.
    let mut current: Option<usize> = None;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let fail = |why: String| Failure::at(path, Some(number), why);
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (keyword, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
        let rest = rest.trim();
        match keyword {
            "user" if rest.is_empty() => {
                return Err(fail("user names no one; write user <name>".into()))
            }
            "user" => {
                if rest.contains('*') {
                    return Err(fail(format!("the user name {rest:?} holds *, which the roles format reads as \"any characters\", so its lines would reach other users; rename the user in the password file and here, then migrate again")));
                }
                let at = match acl.users.iter().position(|(name, _)| name == rest) {
                    Some(at) => at,
                    None => {
                        acl.users.push((rest.to_string(), Section::default()));
                        acl.users.len() - 1
                    }
                };
                acl.users[at].1.opened_at.push(number);
                current = Some(at);
            }
            "topic" | "pattern" => {
                let rule = rule(number, rest).map_err(|why| fail(format!("{keyword} {rest}: {why}")))?;
                let section = match (keyword, current) {
                    ("pattern", _) => &mut acl.patterns,
                    (_, None) => &mut acl.anonymous,
                    (_, Some(at)) => &mut acl.users[at].1,
                };
                section.rules.push(rule);
            }
            other => {
                return Err(fail(format!(
                    "{other:?} is not a line of a mosquitto acl_file, which holds user, topic and pattern lines; mosquitto refuses it too"
                )))
            }
        }
    }
    Ok(acl)
}

fn rule(line: usize, rest: &str) -> Result<Rule, String> {
    let (first, after) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
    let access = match first {
        "read" => Some(Access::Read),
        "write" => Some(Access::Write),
        "readwrite" => Some(Access::ReadWrite),
        "deny" => Some(Access::Deny),
        _ => None,
    };
    let (access, topic) = match access {
        Some(access) => (access, after.trim()),
        // Without an access word the topic is one word, as mosquitto reads
        // it, and the access is readwrite.
        None if !after.trim().is_empty() => {
            return Err(
                "a topic holding a space needs its access word first: topic readwrite <topic>"
                    .into(),
            )
        }
        None => (Access::ReadWrite, first),
    };
    if topic.is_empty() {
        return Err("names no topic".into());
    }
    Ok(Rule {
        line,
        access,
        topic: topic.to_string(),
    })
}

/// Whether some topic may match both filters, a level holding `%` being
/// any level (a name is put in there later). A filter starting with a
/// wildcard reaches no `$` topic, as MQTT and mosquitto's ACL read it.
fn may_meet(a: &str, b: &str) -> bool {
    if dollar_apart(a, b) {
        return false;
    }
    let (mut a, mut b) = (a.split('/'), b.split('/'));
    loop {
        match (a.next(), b.next()) {
            (Some("#"), _) | (_, Some("#")) => return true,
            (None, None) => return true,
            (None, Some(_)) | (Some(_), None) => return false,
            (Some(x), Some(y)) if x == y || x == "+" || y == "+" => {}
            (Some(x), Some(y)) if x.contains('%') || y.contains('%') => {}
            _ => return false,
        }
    }
}

/// Whether every topic `inner` matches, `outer` matches too, whatever
/// names are put into either: `%` levels count only where spelled alike.
fn covers_whole(outer: &str, inner: &str) -> bool {
    !dollar_apart(outer, inner) && covers(outer, inner)
}

/// One filter reaches only `$` topics and the other, starting with a
/// wildcard, none.
fn dollar_apart(a: &str, b: &str) -> bool {
    let wild = |f: &str| f.starts_with('+') || f.starts_with('#');
    (a.starts_with('$') && wild(b)) || (b.starts_with('$') && wild(a))
}

/// A grant kept, with its verbs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Grant {
    line: usize,
    topic: String,
    verbs: &'static [&'static str],
}

/// What each line became, gathered while the roles are built.
#[derive(Default)]
struct Notes(Vec<(usize, String)>);

impl Notes {
    fn add(&mut self, line: usize, text: String) {
        if !self.0.iter().any(|(l, t)| *l == line && *t == text) {
            self.0.push((line, text));
        }
    }

    fn of(&self, line: usize) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(l, _)| *l == line)
            .map(|(_, t)| t.as_str())
            .collect()
    }
}

/// `grants` with `denials` taken out. With `into`, each line is noted:
/// the role it went into, or why it did not.
fn taken_out(
    grants: &[Rule],
    denials: &[Rule],
    into: Option<&str>,
    notes: &mut Notes,
) -> Vec<Grant> {
    let mut kept = Vec::new();
    for grant in grants {
        let meeting: Vec<&Rule> = denials
            .iter()
            .filter(|d| may_meet(&d.topic, &grant.topic))
            .collect();
        let Some(role) = into else {
            if meeting.is_empty() {
                kept.push(grant_of(grant));
            }
            continue;
        };
        let named: Vec<String> = meeting
            .iter()
            .map(|d| format!("deny {} (line {})", d.topic, d.line))
            .collect();
        for denial in &meeting {
            notes.add(
                denial.line,
                format!(
                    "took {} (line {}) out of role {role}",
                    grant.topic, grant.line
                ),
            );
        }
        if meeting.is_empty() {
            notes.add(grant.line, format!("a topic rule of role {role}"));
            kept.push(grant_of(grant));
        } else if meeting.iter().any(|d| covers_whole(&d.topic, &grant.topic)) {
            notes.add(
                grant.line,
                format!(
                    "left out of role {role}: {} covers all of it, as in mosquitto",
                    named.join(", ")
                ),
            );
        } else {
            notes.add(
                grant.line,
                format!(
                    "ACTION: left out of role {role}, refusing more than mosquitto did: {} takes a part of it away and roles only grant; write the topics it should still grant as topic lines and migrate again",
                    named.join(", ")
                ),
            );
        }
    }
    kept
}

fn grant_of(rule: &Rule) -> Grant {
    Grant {
        line: rule.line,
        topic: rule.topic.clone(),
        verbs: rule.access.verbs(),
    }
}

/// `rules` less the `$SYS` ones and any that is no MQTT filter, each of
/// those noted; then split into grants and denials.
fn usable(rules: &[Rule], notes: &mut Notes) -> (Vec<Rule>, Vec<Rule>) {
    let kept: Vec<Rule> = rules
        .iter()
        .filter(|rule| {
            let why = if rule.topic == "$SYS" || rule.topic.starts_with("$SYS/") {
                "not carried: this broker serves no $SYS tree (its figures are on the operations listener's /metrics), so nothing is read or written there"
            } else if !is_valid_topic_filter(&rule.topic) {
                "not carried: not a well-formed MQTT topic filter, so it matched nothing in mosquitto either"
            } else {
                return true;
            };
            notes.add(rule.line, why.to_string());
            false
        })
        .cloned()
        .collect();
    kept.into_iter().partition(|r| r.access != Access::Deny)
}

/// `rules` with `name` put in for `%u`.
fn named(rules: &[Rule], name: &str) -> Vec<Rule> {
    rules
        .iter()
        .map(|r| Rule {
            topic: r.topic.replace("%u", name),
            ..r.clone()
        })
        .collect()
}

impl MosquittoAcl {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file as roles, a note for each of its lines in `report`.
    /// `anonymous_admitted` says whether mosquitto let clients without a
    /// user name in, which decides what the anonymous section meant.
    pub fn convert(&self, anonymous_admitted: bool, report: &mut Report) -> Mapping {
        let mut notes = Notes::default();
        let mut roles = Mapping::new();
        let mut users = Mapping::new();

        let (pattern_grants, pattern_denials) = usable(&self.patterns.rules, &mut notes);
        // What any user is given, its name unknown.
        let shared = taken_out(
            &pattern_grants,
            &pattern_denials,
            Some(PATTERNS_ROLE),
            &mut notes,
        );
        for (name, section) in &self.users {
            let role = format!("user-{name}");
            let (grants, denials) = usable(&section.rules, &mut notes);
            let mut own = taken_out(&grants, &denials, Some(&role), &mut notes);
            let mut entry: Vec<Value> = Vec::new();
            // mosquitto refuses every pattern to a name holding + or #.
            if !pattern_grants.is_empty() && !name.contains(['+', '#']) {
                let mut all_denials = named(&pattern_denials, name);
                all_denials.extend(denials.iter().cloned());
                let mut quiet = Notes::default();
                let mine = taken_out(
                    &named(&pattern_grants, name),
                    &all_denials,
                    None,
                    &mut quiet,
                );
                let shared_as_mine: Vec<Grant> = shared
                    .iter()
                    .map(|g| Grant {
                        topic: g.topic.replace("%u", name),
                        ..g.clone()
                    })
                    .collect();
                if mine == shared_as_mine {
                    entry.push(PATTERNS_ROLE.into());
                } else {
                    // Its name, or its own denials, cut the patterns
                    // otherwise than for anybody: it gets its own copy.
                    for denial in &denials {
                        for grant in named(&pattern_grants, name) {
                            if may_meet(&denial.topic, &grant.topic) {
                                notes.add(
                                    denial.line,
                                    format!(
                                        "took pattern {} (line {}) out of what user {name} gets",
                                        grant.topic, grant.line
                                    ),
                                );
                            }
                        }
                    }
                    for grant in &pattern_grants {
                        let has = |list: &[Grant]| list.iter().any(|g| g.line == grant.line);
                        match (has(&mine), has(&shared)) {
                            (true, false) => notes.add(grant.line, format!("kept for user {name} in role {role}: with its name put in, no denial meets it")),
                            (false, true) => notes.add(grant.line, format!("left out for user {name}: its own deny lines, or the patterns' with its name put in, take it away")),
                            _ => {}
                        }
                    }
                    own.extend(mine);
                }
            }
            if !own.is_empty() {
                roles.insert(role.clone().into(), rules_yaml(&own));
                entry.insert(0, role.into());
            }
            if entry.is_empty() && !shared.is_empty() {
                // With no entry, the "*" one would give it the patterns
                // its own lines took away.
                roles.insert(NO_TOPICS_ROLE.into(), no_topics_role());
                entry.push(NO_TOPICS_ROLE.into());
            }
            let said = match entry.as_slice() {
                [] => format!("no users: entry: user {name} is granted nothing, as in mosquitto"),
                // An entry of the patterns alone says what "*" says.
                [only] if only.as_str() == Some(PATTERNS_ROLE) => {
                    format!("no users: entry of its own: user {name} gets what \"*\" gives")
                }
                _ => {
                    let names: Vec<&str> = entry.iter().filter_map(Value::as_str).collect();
                    format!(
                        "became users: entry {name:?} with roles [{}]",
                        names.join(", ")
                    )
                }
            };
            for line in &section.opened_at {
                notes.add(*line, said.clone());
            }
            let patterns_alone =
                matches!(entry.as_slice(), [only] if only.as_str() == Some(PATTERNS_ROLE));
            if !entry.is_empty() && !patterns_alone {
                users.insert(name.as_str().into(), Value::Sequence(entry));
            }
        }
        if !shared.is_empty() {
            roles.insert(PATTERNS_ROLE.into(), rules_yaml(&shared));
            users.insert("*".into(), Value::Sequence(vec![PATTERNS_ROLE.into()]));
        }
        self.anonymous_role(anonymous_admitted, &mut roles, &mut notes);

        for line in self.lines() {
            let said = notes.of(line.0);
            let outcome = match said.is_empty() {
                true => "a denial meeting no grant: nothing to take away".to_string(),
                false => said.join("; "),
            };
            report.note_at(&self.path, line.0, line.1, outcome);
        }
        let mut acl = Mapping::new();
        acl.insert("roles".into(), Value::Mapping(roles));
        acl.insert("users".into(), Value::Mapping(users));
        acl
    }

    /// mosquitto gives a client without a user name its anonymous section,
    /// then the patterns that name no `%u`. This broker admits no such
    /// client beside an acl_file, so the role is written for a user the
    /// operator names for them.
    fn anonymous_role(&self, admitted: bool, roles: &mut Mapping, notes: &mut Notes) {
        if !admitted {
            for rule in &self.anonymous.rules {
                notes.add(rule.line, "anonymous section: not carried: mosquitto admitted no client without a user name, so it applied to nobody".to_string());
            }
            return;
        }
        let (grants, denials) = usable(&self.anonymous.rules, notes);
        let mut kept = taken_out(&grants, &denials, Some(ANONYMOUS_ROLE), notes);
        let anonymous_patterns: Vec<Rule> = self
            .patterns
            .rules
            .iter()
            .filter(|r| !r.topic.contains("%u"))
            .cloned()
            .collect();
        let (pattern_grants, mut pattern_denials) =
            usable(&anonymous_patterns, &mut Notes::default());
        pattern_denials.extend(denials);
        kept.extend(taken_out(
            &pattern_grants,
            &pattern_denials,
            None,
            &mut Notes::default(),
        ));
        if kept.is_empty() {
            return;
        }
        roles.insert(ANONYMOUS_ROLE.into(), rules_yaml(&kept));
        for rule in &self.anonymous.rules {
            notes.add(rule.line, "this broker admits no client without a user name beside an acl_file, so role anonymous is given to no user: give those clients a user name (saguin --passwd FILE add guest) and list it under users: with [anonymous]".to_string());
        }
    }

    /// Every rule line and how it was written, in file order.
    fn lines(&self) -> Vec<(usize, String)> {
        let show = |keyword: &str, r: &Rule| {
            let access = match r.access {
                Access::Read => "read",
                Access::Write => "write",
                Access::ReadWrite => "readwrite",
                Access::Deny => "deny",
            };
            (r.line, format!("{keyword} {access} {}", r.topic))
        };
        let mut lines: Vec<(usize, String)> = self
            .patterns
            .rules
            .iter()
            .map(|r| show("pattern", r))
            .chain(self.anonymous.rules.iter().map(|r| show("topic", r)))
            .chain(
                self.users
                    .iter()
                    .flat_map(|(_, s)| s.rules.iter().map(|r| show("topic", r))),
            )
            .chain(self.users.iter().flat_map(|(name, s)| {
                s.opened_at
                    .iter()
                    .map(move |line| (*line, format!("user {name}")))
            }))
            .collect();
        lines.sort();
        lines
    }
}

/// The grants as a role's rules: one rule a topic, its verbs gathered,
/// in the order first written.
fn rules_yaml(grants: &[Grant]) -> Value {
    let mut merged: Vec<(String, Vec<&str>)> = Vec::new();
    for grant in grants {
        let at = match merged.iter().position(|(topic, _)| *topic == grant.topic) {
            Some(at) => at,
            None => {
                merged.push((grant.topic.clone(), Vec::new()));
                merged.len() - 1
            }
        };
        for verb in grant.verbs {
            if !merged[at].1.contains(verb) {
                merged[at].1.push(verb);
            }
        }
    }
    Value::Sequence(
        merged
            .into_iter()
            .map(|(topic, mut verbs)| {
                verbs.sort_by_key(|v| *v != "write");
                let mut rule = Mapping::new();
                rule.insert("topic".into(), topic.into());
                let verbs = verbs.into_iter().map(Value::from).collect();
                rule.insert("allow".into(), Value::Sequence(verbs));
                Value::Mapping(rule)
            })
            .collect(),
    )
}

/// A role granting no topic, for a user whose own lines took every
/// pattern away: an entry needs a role, and without one the `"*"` entry
/// would apply to it. Taking shared subscriptions away costs a client
/// that may read no topic nothing.
fn no_topics_role() -> Value {
    let mut rule = Mapping::new();
    rule.insert("broker".into(), "features".into());
    rule.insert("deny".into(), Value::Sequence(vec!["share".into()]));
    Value::Sequence(vec![Value::Mapping(rule)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn converted(text: &str) -> (String, Report) {
        let acl = parse(Path::new("/etc/mosquitto/acl"), text).unwrap();
        let mut report = Report::default();
        let yaml = acl.convert(false, &mut report);
        (crate::config::resolved::yaml_block(&yaml), report)
    }

    #[test]
    fn lines_mosquitto_refuses_are_refused_naming_the_line() {
        let refused = |text: &str| parse(Path::new("/a"), text).unwrap_err().to_string();
        assert!(refused("user bob\nsubscribe x\n")
            .starts_with("/a, line 2: \"subscribe\" is not a line"));
        assert!(refused("\nuser dev*\n").starts_with("/a, line 2: the user name \"dev*\" holds *"));
        assert!(refused("topic a b\n").contains("needs its access word first"));
        assert!(refused("topic read\n").contains("names no topic"));
        assert!(refused("user\n").contains("names no one"));
    }

    #[test]
    fn sections_patterns_and_denials_become_roles() {
        let (yaml, report) = converted(
            "topic read anon/#\nuser bob\ntopic read a/#\ntopic deny a/#\ntopic b/c\nuser bob\ntopic write d\npattern read p/%u/#\npattern deny p/x/#\n",
        );
        let read: Value = serde_yaml::from_str(&yaml).unwrap();
        // bob's two sections are one; a/# is denied whole; the pattern
        // cut by a denial naming another user is kept for bob by name and
        // left out for the names nobody knows yet.
        assert_eq!(
            read["roles"]["user-bob"],
            serde_yaml::from_str::<Value>("[{topic: b/c, allow: [write, read]}, {topic: d, allow: [write]}, {topic: p/bob/#, allow: [read]}]").unwrap(),
            "{yaml}"
        );
        assert!(read["roles"].get("patterns").is_none(), "{yaml}");
        assert!(read["users"].get("*").is_none(), "{yaml}");
        assert_eq!(
            read["users"]["bob"],
            serde_yaml::from_str::<Value>("[user-bob]").unwrap()
        );
        // The anonymous section applied to nobody: mosquitto admitted no one
        // without a user name.
        assert!(read["roles"].get("anonymous").is_none());
        let said = |line: usize| {
            report.about(&format!("/etc/mosquitto/acl:{line}"))[0]
                .outcome
                .clone()
        };
        assert!(
            said(1).starts_with("anonymous section: not carried"),
            "{}",
            said(1)
        );
        assert!(
            said(3).contains("deny a/# (line 4) covers all of it"),
            "{}",
            said(3)
        );
        assert!(
            said(8).starts_with("ACTION: left out of role patterns"),
            "{}",
            said(8)
        );
        assert!(said(8).contains("for user bob"), "{}", said(8));
        // The result is a file the broker reads.
        crate::config::acl_file::parse(&yaml, "acl.yaml", &[]).unwrap();
    }

    #[test]
    fn filters_meet_where_a_name_could_make_them_meet() {
        assert!(may_meet("a/%u/b", "a/x/b"));
        assert!(may_meet("a/+/b", "a/#"));
        assert!(!may_meet("a/b", "a/c"));
        assert!(!may_meet("#", "$SYS/x"));
        assert!(!may_meet("a/b/c", "a/b"));
        assert!(covers_whole("a/%u/#", "a/%u/b"));
        assert!(!covers_whole("a/x/#", "a/%u/b"));
        assert!(!covers_whole("#", "$SYS/#"));
    }
}
