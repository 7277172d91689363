//! What the migration says: one line for every mosquitto option and
//! acl_file line it met, naming where it was written, what it became, or
//! why it has no equivalent and what to do instead.

use std::path::Path;

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Where the option was written: `file:line`.
    pub place: String,
    /// The option as written, any secret in it hidden.
    pub option: String,
    /// What became of it.
    pub outcome: String,
}

/// Every note, in the order the lines were met.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub notes: Vec<Note>,
}

/// Options whose value is a secret: the report shows that it was met,
/// never what it holds.
const SECRETS: [&str; 6] = [
    "remote_password",
    "password",
    "local_password",
    "bridge_psk",
    "tls_engine_kpass_sha1",
    "psk_hint",
];

impl Report {
    /// A note about line `line` of `file`.
    pub fn note_at(
        &mut self,
        file: &Path,
        line: usize,
        option: impl Into<String>,
        outcome: impl Into<String>,
    ) {
        self.notes.push(Note {
            place: format!("{}:{line}", file.display()),
            option: option.into(),
            outcome: outcome.into(),
        });
    }

    /// A note about `file` as a whole: what it leaves unwritten.
    pub fn note_file(
        &mut self,
        file: &Path,
        option: impl Into<String>,
        outcome: impl Into<String>,
    ) {
        self.notes.push(Note {
            place: file.display().to_string(),
            option: option.into(),
            outcome: outcome.into(),
        });
    }

    /// A note about a mosquitto.conf option, its value hidden where it is
    /// a secret.
    pub fn note_option(&mut self, line: &super::conf::Line, outcome: impl Into<String>) {
        let option = match SECRETS.contains(&line.key.as_str()) {
            true => format!("{} (hidden)", line.key),
            false => format!("{} {}", line.key, line.value())
                .trim_end()
                .to_string(),
        };
        self.note_at(&line.file, line.number, option, outcome);
    }

    /// The report as printed: a line a note, `place: option: outcome`.
    pub fn text(&self) -> String {
        self.notes
            .iter()
            .map(|n| format!("{}: {}: {}\n", n.place, n.option, n.outcome))
            .collect()
    }

    /// The notes about `place`, for tests and callers that look one up.
    pub fn about(&self, place: &str) -> Vec<&Note> {
        self.notes.iter().filter(|n| n.place == place).collect()
    }
}
