//! `saguin --acl`: what a user may do, and why, as text.
//!
//! Two forms. The table answers a list of user names a line each, seven
//! tab-separated columns under a `#` header, so a run over a fleet can be
//! cut and compared. The paragraph answers one user (and client id) with
//! what the table leaves out: which entry applied, which it shadowed,
//! whether the client id may carry the name, and the rules withheld.

use std::fmt::Write;

use super::filter::substitute;
use super::{Acl, Entry, Limits, Subject};

/// The table's header, `#` first so that a kept run can be fed back in.
pub const TABLE_HEADER: &str = "# user\trole\tkind\tsubject\tverbs\trate\tbytes";

/// One printed grant: a rule of a role, with the user's names put in.
struct Row {
    role: String,
    kind: &'static str,
    subject: String,
    verbs: Vec<&'static str>,
    denies: Vec<&'static str>,
}

impl Row {
    /// The verbs column: the verbs, or what a features rule denies.
    fn verbs_text(&self) -> String {
        match self.denies.is_empty() {
            true => self.verbs.join(","),
            false => format!("deny {}", self.denies.join(",")),
        }
    }

    fn json(&self) -> String {
        format!(
            r#""role":{},"kind":"{}","subject":{},"verbs":{},"denies":{}"#,
            json_string(&self.role),
            self.kind,
            json_string(&self.subject),
            json_list(&self.verbs),
            json_list(&self.denies)
        )
    }
}

/// What an entry gives one user, rule by rule, and the rules withheld.
struct Resolved<'a> {
    entry: Option<&'a Entry>,
    rows: Vec<Row>,
    withheld: Vec<String>,
    uses_client_id: bool,
}

fn resolve<'a>(acl: &'a Acl, user: &str, client_id: Option<&str>) -> Resolved<'a> {
    let entry = acl.entry_for(user);
    let mut resolved = Resolved {
        entry,
        rows: Vec::new(),
        withheld: Vec::new(),
        uses_client_id: false,
    };
    let Some(entry) = entry else {
        return resolved;
    };
    for &role_index in &entry.roles {
        let role = &acl.roles[role_index];
        for rule in &role.rules {
            resolved.uses_client_id |= rule.uses_client_id();
            let (verbs, denies) = (rule.verbs.names(), rule.denies.names());
            let (kind, channel) = match &rule.subject {
                Subject::Channel(name) => ("channel", Some(name.as_str())),
                Subject::Topic => ("topic", None),
                Subject::Sessions | Subject::Features => ("broker", None),
            };
            let fixed_subject = match &rule.subject {
                Subject::Sessions => Some("sessions"),
                Subject::Features => Some("features"),
                _ => None,
            };
            if let Some(subject) = fixed_subject.or(channel.filter(|_| rule.filters.is_empty())) {
                resolved.rows.push(Row {
                    role: role.name.clone(),
                    kind,
                    subject: subject.to_string(),
                    verbs: verbs.clone(),
                    denies: denies.clone(),
                });
                continue;
            }
            for filter in &rule.filters {
                match substitute(filter, user, client_id) {
                    Ok(filter) => resolved.rows.push(Row {
                        role: role.name.clone(),
                        kind,
                        subject: match channel {
                            Some(name) => format!("{name} ({filter})"),
                            None => filter,
                        },
                        verbs: verbs.clone(),
                        denies: denies.clone(),
                    }),
                    Err(withheld) => resolved.withheld.push(format!(
                        "role {}: {} {filter}: the name {} puts in holds +, # or /, which would change what the rule matches",
                        role.name,
                        kind,
                        withheld.marker
                    )),
                }
            }
        }
    }
    resolved
}

/// The bounds `user` is held to: its entry's where it writes `limits:`,
/// the broker-wide ones otherwise.
fn limits_for(entry: Option<&Entry>, broker_wide: Limits) -> Limits {
    entry.and_then(|e| e.limits).unwrap_or(broker_wide)
}

fn bound(value: Option<u64>) -> String {
    value.map_or_else(|| "no bound".to_string(), |v| v.to_string())
}

/// The table form's lines for one user (without the header). A user no
/// entry grants anything gets a row of `-` rather than no row.
pub fn table_rows(acl: &Acl, user: &str, client_id: Option<&str>, broker_wide: Limits) -> String {
    let resolved = resolve(acl, user, client_id);
    let limits = limits_for(resolved.entry, broker_wide);
    let rate = bound(limits.publish_rate_per_s.map(u64::from));
    let bytes = bound(limits.publish_bytes_per_s);
    let mut out = String::new();
    if resolved.rows.is_empty() {
        let _ = writeln!(out, "{user}\t-\t-\t-\t-\t{rate}\t{bytes}");
    }
    for row in &resolved.rows {
        let _ = writeln!(
            out,
            "{user}\t{}\t{}\t{}\t{}\t{rate}\t{bytes}",
            row.role,
            row.kind,
            row.subject,
            row.verbs_text()
        );
    }
    out
}

/// The paragraph form: everything about one user and, where given, the
/// client id it connects as.
pub fn paragraph(acl: &Acl, user: &str, client_id: Option<&str>, broker_wide: Limits) -> String {
    let resolved = resolve(acl, user, client_id);
    let mut out = String::new();
    let _ = writeln!(out, "user {user:?} in {}", acl.source);
    let Some(entry) = resolved.entry else {
        let _ = writeln!(
            out,
            "no pattern under users: matches this name, so it is granted nothing: every publish and subscription it makes is refused 0x87"
        );
        return out;
    };
    let _ = writeln!(out, "entry in force: {:?}", entry.pattern);
    let shadowed: Vec<&Entry> = acl
        .entries_matching(user)
        .filter(|e| e.pattern != entry.pattern)
        .collect();
    for other in &shadowed {
        let _ = write!(
            out,
            "  shadows {:?}, which matches too but spells the name out less exactly and gives nothing",
            other.pattern
        );
        if other.limits.is_some() && entry.limits.is_none() {
            let _ = write!(
                out,
                "; it carries limits: and the entry in force does not, so this user is held only to the broker-wide bounds"
            );
        }
        let _ = writeln!(out);
    }
    match (client_id, &entry.client_ids) {
        (_, None) => {
            let _ = writeln!(out, "client ids: any may carry this name");
        }
        (Some(id), Some(patterns)) => {
            let verdict = if entry.admits_client_id(user, id) {
                "may carry this name"
            } else {
                "may NOT carry this name: its CONNECT is refused 0x86"
            };
            let _ = writeln!(
                out,
                "client id {id:?} {verdict} (client_ids: {})",
                patterns.join(", ")
            );
        }
        (None, Some(patterns)) => {
            let _ = writeln!(out, "client ids: only {}", patterns.join(", "));
        }
    }
    let limits = limits_for(Some(entry), broker_wide);
    let source = if entry.limits.is_some() {
        "from this entry"
    } else {
        "broker-wide"
    };
    let _ = writeln!(
        out,
        "publish bounds ({source}): {} messages/s, {} bytes/s",
        bound(limits.publish_rate_per_s.map(u64::from)),
        bound(limits.publish_bytes_per_s)
    );
    let _ = writeln!(out, "grants:");
    if resolved.rows.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for row in &resolved.rows {
        let _ = writeln!(
            out,
            "  role {}: {} {}: {}",
            row.role,
            row.kind,
            row.subject,
            row.verbs_text()
        );
    }
    for withheld in &resolved.withheld {
        let _ = writeln!(out, "  withheld: {withheld}");
    }
    if resolved.uses_client_id {
        match client_id {
            None => {
                let _ = writeln!(
                    out,
                    "a rule here uses %c, and no client id was given: %c is left as written above, and those grants match no real topic; name a client id after the user name"
                );
            }
            Some(_) => {
                let _ = writeln!(
                    out,
                    "note: %c is the client id the device chose, which nothing proves: scoping by it separates devices sharing one credential by convention, not by force"
                );
            }
        }
    }
    out
}

/// `text` as a JSON string.
pub fn json_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if u32::from(c) < 0x20 => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn json_list<S: AsRef<str>>(items: &[S]) -> String {
    let items: Vec<String> = items.iter().map(|i| json_string(i.as_ref())).collect();
    format!("[{}]", items.join(","))
}

fn json_number(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_string(), |v| v.to_string())
}

/// What `--json` answers for a configuration naming no acl_file.
pub const JSON_NO_ACL: &str = r#"{"acl_file":null,"everything_allowed":true}"#;

/// The table form as JSON: one compact object a line, `null` where the
/// table prints `-` or `no bound`.
pub fn json_rows(acl: &Acl, user: &str, client_id: Option<&str>, broker_wide: Limits) -> String {
    let resolved = resolve(acl, user, client_id);
    let limits = limits_for(resolved.entry, broker_wide);
    let bounds = format!(
        r#""publish_rate":{},"publish_bytes":{}"#,
        json_number(limits.publish_rate_per_s.map(u64::from)),
        json_number(limits.publish_bytes_per_s)
    );
    let user = json_string(user);
    if resolved.rows.is_empty() {
        return format!(
            r#"{{"user":{user},"role":null,"kind":null,"subject":null,"verbs":[],"denies":[],{bounds}}}"#
        ) + "\n";
    }
    resolved
        .rows
        .iter()
        .map(|row| format!("{{\"user\":{user},{},{bounds}}}\n", row.json()))
        .collect()
}

/// The paragraph form as one JSON object, every field always present.
pub fn json_paragraph(acl: &Acl, user: &str, client_id: Option<&str>) -> String {
    let resolved = resolve(acl, user, client_id);
    let matched: Vec<&str> = acl
        .entries_matching(user)
        .map(|e| e.pattern.as_str())
        .collect();
    let in_file: Vec<&str> = acl.entries.iter().map(|e| e.pattern.as_str()).collect();
    let grants: Vec<String> = resolved
        .rows
        .iter()
        .map(|r| format!("{{{}}}", r.json()))
        .collect();
    let allowed = match (client_id, resolved.entry) {
        (Some(id), Some(entry)) => entry.admits_client_id(user, id).to_string(),
        (Some(_), None) => "true".to_string(),
        (None, _) => "null".to_string(),
    };
    format!(
        r#"{{"user":{},"acl_file":{},"pattern_applied":{},"patterns_matched":{},"patterns_in_file":{},"grants":[{}],"grants_withheld":{},"client_id_allowed":{allowed}}}"#,
        json_string(user),
        json_string(&acl.source),
        resolved
            .entry
            .map_or_else(|| "null".to_string(), |e| json_string(&e.pattern)),
        json_list(&matched),
        json_list(&in_file),
        grants.join(","),
        json_list(&resolved.withheld)
    ) + "\n"
}
