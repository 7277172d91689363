//! Who may connect: the password files and each door's rule for a client
//! that offers no user name.
//!
//! This module knows no sockets and no configuration file: it is handed
//! each door's rule, reads the password files those rules name, and
//! answers, for a CONNECT's user name and password, whether it is admitted.
//! What it loads is never changed in place; a reload builds a whole new
//! [`Authentication`], so a half-read file is never in force.

pub mod argon2id;
pub mod command;
pub mod file;
pub mod hash;

use std::path::PathBuf;

pub use file::{FileError, PasswordFile};
pub use hash::PasswordHash;

/// What one MQTT door asks of a client, as the configuration settled it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorRule {
    /// The door's name, for messages.
    pub door: String,
    /// The password file its users are checked against, if any.
    pub password_file: Option<PathBuf>,
    /// Whether a client offering no user name is admitted.
    pub allow_anonymous: bool,
    /// Whether a user name no password file checks is the client's
    /// identity (`trust_unchecked_user_names`); otherwise it names nobody.
    pub trusts_unchecked_names: bool,
}

/// Every door's rule and every password file they name, as loaded.
/// [`Authentication::default`] has no rules and admits everybody.
#[derive(Debug, Clone, Default)]
pub struct Authentication {
    rules: Vec<DoorRule>,
    /// Each distinct path once, in the order first named.
    files: Vec<PasswordFile>,
    /// For each door, its file's index in `files`.
    door_files: Vec<Option<usize>>,
}

/// The answer to a CONNECT's credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A password file names the user and the password is its own.
    Authenticated,
    /// No user name, on a door that admits clients without one.
    Anonymous,
    /// A user name on a door with no password file, taken as stated:
    /// the door trusts unchecked names, or has no rule at all.
    Unchecked,
    /// A user name on a door with no password file that trusts no
    /// unchecked name: the client is admitted as nobody, the name that
    /// nothing checked being no identity.
    NameIgnored,
    Refused(Refusal),
}

/// Why credentials were refused. All are one code on the wire; the log
/// tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoUserName,
    UnknownUser,
    NoPassword,
    WrongPassword,
}

impl Refusal {
    /// For the log, which the operator reads and the caller does not.
    pub fn describe(self) -> &'static str {
        match self {
            Refusal::NoUserName => {
                "it offered no user name, and this door admits no anonymous client"
            }
            Refusal::UnknownUser => "its user name is in no password file of this door",
            Refusal::NoPassword => "it offered a user name and no password",
            Refusal::WrongPassword => "its password is wrong",
        }
    }
}

impl Authentication {
    /// Reads every password file the rules name. Refused whole if any file
    /// cannot be read, or names nobody on a door that admits nobody else;
    /// every fault of every file is one error.
    pub fn load(rules: &[DoorRule]) -> Result<Authentication, Vec<FileError>> {
        let mut files: Vec<PasswordFile> = Vec::new();
        let mut errors = Vec::new();
        let mut refused: Vec<&std::path::Path> = Vec::new();
        let mut door_files = Vec::with_capacity(rules.len());
        for rule in rules {
            let index = match &rule.password_file {
                None => None,
                // Its faults are already told, once.
                Some(path) if refused.contains(&path.as_path()) => None,
                Some(path) => match files.iter().position(|f| &f.path == path) {
                    Some(index) => Some(index),
                    None => match PasswordFile::load(path) {
                        Ok(file) => {
                            files.push(file);
                            Some(files.len() - 1)
                        }
                        Err(file_errors) => {
                            errors.extend(file_errors);
                            refused.push(path);
                            None
                        }
                    },
                },
            };
            if let Some(file) = index.map(|i| &files[i]) {
                if file.user_count() == 0 && !rule.allow_anonymous {
                    errors.push(FileError {
                        path: file.path.clone(),
                        lines: Vec::new(),
                        why: format!(
                            "names no user, and door {:?} admits nobody else; add a user with saguin --passwd, or allow_anonymous: true on the door",
                            rule.door
                        ),
                    });
                }
            }
            door_files.push(index);
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Authentication {
            rules: rules.to_vec(),
            files,
            door_files,
        })
    }

    /// The same files read again, for a reload: the old table stays in
    /// force if this fails.
    pub fn reload(&self) -> Result<Authentication, Vec<FileError>> {
        Authentication::load(&self.rules)
    }

    /// Door `door`'s name, for the log; its index where it has no rule.
    pub fn door_name(&self, door: usize) -> String {
        match self.rules.get(door) {
            Some(rule) => format!("{:?}", rule.door),
            None => door.to_string(),
        }
    }

    pub fn files(&self) -> &[PasswordFile] {
        &self.files
    }

    /// Each door's rule, in door order.
    pub fn rules(&self) -> &[DoorRule] {
        &self.rules
    }

    /// The password file door `door` checks users against, if any.
    pub fn door_file(&self, door: usize) -> Option<&PasswordFile> {
        let index = (*self.door_files.get(door)?)?;
        self.files.get(index)
    }

    /// One line for the log: each file and how many users it holds.
    pub fn summary(&self) -> String {
        if self.files.is_empty() {
            return "no password file".to_string();
        }
        let files: Vec<String> = self
            .files
            .iter()
            .map(|f| format!("{} ({} users)", f.path.display(), f.user_count()))
            .collect();
        match self.check_memory_bytes() {
            0 => format!("password files {}", files.join(", ")),
            bytes => format!(
                "password files {}; one password check at a time, holding at most {bytes} bytes of argon2 memory",
                files.join(", ")
            ),
        }
    }

    /// The most memory one password check holds: the argon2id entry of any
    /// file asking for the most. Checks run one at a time
    /// (rfcs/0008-authentication.md, "Cost"), so this is also what they
    /// hold together.
    pub fn check_memory_bytes(&self) -> u64 {
        self.files
            .iter()
            .map(PasswordFile::check_memory_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Whether checking `user` on door `door` computes a hash, the one
    /// costly step, which the shell runs off its executor thread.
    pub fn computes_hash(&self, door: usize, user: Option<&str>) -> bool {
        user.is_some() && self.door_files.get(door).is_some_and(Option::is_some)
    }

    /// Checks what a CONNECT on door `door` offered. A door without a rule
    /// (the core's own tests; every configured door has one) admits
    /// everybody under the name it states.
    pub fn check(&self, door: usize, user: Option<&str>, password: Option<&[u8]>) -> Verdict {
        let Some(rule) = self.rules.get(door) else {
            return if user.is_some() {
                Verdict::Unchecked
            } else {
                Verdict::Anonymous
            };
        };
        let Some(user) = user else {
            return if rule.allow_anonymous {
                Verdict::Anonymous
            } else {
                Verdict::Refused(Refusal::NoUserName)
            };
        };
        let Some(file) = self.door_files[door].map(|i| &self.files[i]) else {
            return match rule.trusts_unchecked_names {
                true => Verdict::Unchecked,
                false => Verdict::NameIgnored,
            };
        };
        let offered = password.unwrap_or_default();
        let Some(hash) = file.get(user) else {
            // The same work as for a known user, so the time a refusal
            // takes does not say which names exist.
            if let Some(stand_in) = file.stand_in() {
                // black_box: a check whose answer nobody reads is still run.
                std::hint::black_box(stand_in.verify(offered));
            }
            return Verdict::Refused(Refusal::UnknownUser);
        };
        // Checked even when no password came, for the same reason.
        match (password, hash.verify(offered)) {
            (None, _) => Verdict::Refused(Refusal::NoPassword),
            (Some(_), true) => Verdict::Authenticated,
            (Some(_), false) => Verdict::Refused(Refusal::WrongPassword),
        }
    }
}

#[cfg(test)]
mod tests;
