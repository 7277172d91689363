//! The mistakes a reading finds, each written as one line naming the key
//! path, the value as written and what would be accepted, and the helpers
//! that write those lines.
//!
//! Each step of the walk reports into [`Findings`] and carries on, so one
//! run names every mistake in the file. The walk also notes there the
//! files whose contents are read once it is over ([`NamedFiles`]), so a
//! mistake in one block hides no fault in a file another block names.

use std::path::PathBuf;

use serde_yaml::Value;

use crate::bridge::PeerTls;
use crate::net::tls::TlsSettings;

/// The mistakes found so far, each already written as one finding.
#[derive(Debug, Default)]
pub(super) struct Findings {
    list: Vec<String>,
    /// The `!include`d file being read, which every finding made meanwhile
    /// begins with; `None` for the configuration file itself, which the
    /// report names once at its head.
    file: Option<String>,
    /// Each file named in a block whose own keys read, whatever the rest.
    pub(super) named: NamedFiles,
}

/// The files the walk leaves to `files::check`: certificates, keys and
/// authorities, and the acl_file. (Password and operators files are read
/// during the walk.)
#[derive(Debug, Default)]
pub(super) struct NamedFiles {
    /// Each MQTT door's `tls` block.
    pub(super) door_tls: Vec<TlsSettings>,
    /// Each `tls://` or `wss://` bridge: its name, its peer's host, its files.
    pub(super) bridge_tls: Vec<(String, String, PeerTls)>,
    pub(super) acl_file: Option<PathBuf>,
}

impl Findings {
    /// `<path> <value>: <why>`.
    pub(super) fn value(&mut self, path: &str, value: &Value, why: impl AsRef<str>) {
        self.push(format!("{path} {}: {}", show(value), why.as_ref()));
    }

    /// `<path> <value> <phrase>`, for a finding that reads as a sentence
    /// about the value (`"20h" is longer than ...`).
    pub(super) fn value_is(&mut self, path: &str, value: &Value, phrase: impl AsRef<str>) {
        self.push(format!("{path} {} {}", show(value), phrase.as_ref()));
    }

    /// `<path>: <why>`, for a finding about a key rather than a value.
    pub(super) fn key(&mut self, path: &str, why: impl AsRef<str>) {
        self.push(format!("{path}: {}", why.as_ref()));
    }

    /// A finding already written whole, such as a YAML syntax error.
    pub(super) fn whole(&mut self, finding: impl Into<String>) {
        self.push(finding.into());
    }

    /// Runs `body` with every finding it makes naming `file` first: the
    /// `!include`d file being read, or `None` for the configuration file.
    pub(super) fn within<T>(&mut self, file: Option<&str>, body: impl FnOnce(&mut Self) -> T) -> T {
        let outer = std::mem::replace(&mut self.file, file.map(str::to_string));
        let result = body(self);
        self.file = outer;
        result
    }

    fn push(&mut self, finding: String) {
        match &self.file {
            Some(file) => self.list.push(format!("{file}: {finding}")),
            None => self.list.push(finding),
        }
    }

    /// How many findings so far, for a step that checks whether it added one.
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn into_vec(self) -> Vec<String> {
        self.list
    }
}

/// Quotes a value as a finding shows it: strings in double quotes, numbers
/// and booleans bare, anything larger by its shape.
pub(super) fn show(value: &Value) -> String {
    const LONGEST: usize = 80;
    match value {
        Value::Null => "(empty)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.chars().count() > LONGEST => {
            let head: String = s.chars().take(LONGEST).collect();
            format!("{head:?}...")
        }
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "(a list)".to_string(),
        Value::Mapping(_) => "(a mapping)".to_string(),
        Value::Tagged(t) => format!("(tagged {})", t.tag),
    }
}

/// `parent.key`, or `key` at the top.
pub(super) fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// A YAML syntax error as a finding with its line and column.
pub(super) fn syntax_finding(e: &serde_yaml::Error) -> String {
    let message = e.to_string();
    match e.location() {
        Some(at) => {
            let suffix = format!(" at line {} column {}", at.line(), at.column());
            let message = message.strip_suffix(&suffix).unwrap_or(&message);
            format!(
                "line {}, column {}: not valid YAML: {message}",
                at.line(),
                at.column()
            )
        }
        None => format!("not valid YAML: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_shown_by_kind() {
        assert_eq!(show(&Value::String("verbose".into())), "\"verbose\"");
        assert_eq!(show(&Value::Number(5.into())), "5");
        assert_eq!(show(&Value::Null), "(empty)");
        assert_eq!(show(&Value::Bool(true)), "true");
        assert_eq!(show(&Value::Sequence(vec![])), "(a list)");
        let long = "x".repeat(200);
        assert_eq!(show(&Value::String(long)).len(), 80 + 2 + 3);
    }
}
