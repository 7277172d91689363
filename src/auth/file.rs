//! A password file in Mosquitto's format: one `user:hash` a line.
//!
//! Blank lines and lines starting with `#` are skipped; blanks around the
//! user and the hash are dropped, as Mosquitto drops them. Everything else
//! must read, or the whole file is refused naming every line at fault: a
//! file half understood would refuse devices that have the right password.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::hash::PasswordHash;

/// The users one password file names, as it was read.
#[derive(Debug, Clone)]
pub struct PasswordFile {
    pub path: PathBuf,
    users: HashMap<Box<str>, PasswordHash>,
    /// The costliest entry, checked in an unknown user's place.
    stand_in: Option<PasswordHash>,
}

/// Why a password file was refused: its path, the lines at fault (none for
/// the file as a whole) and what is wrong, never holding a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    pub path: PathBuf,
    /// 1-based.
    pub lines: Vec<usize>,
    pub why: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "password file {}", self.path.display())?;
        match self.lines.as_slice() {
            [] => {}
            [line] => write!(f, ", line {line}")?,
            [first, second] => write!(f, ", lines {first} and {second}")?,
            lines => write!(f, ", lines {lines:?}")?,
        }
        write!(f, ": {}", self.why)
    }
}

impl std::error::Error for FileError {}

/// A line as this format reads it: `None` for one that names nobody.
pub(super) fn entry(line: &str) -> Option<Result<(&str, &str), String>> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.trim().is_empty() || line.starts_with('#') {
        return None;
    }
    let Some((user, hash)) = line.split_once(':') else {
        return Some(Err(
            "a line is user:hash, and this one has no colon; saguin --passwd FILE add USER writes one".to_string()
        ));
    };
    let user = user.trim_matches([' ', '\t']);
    let hash = hash.trim_matches([' ', '\t']);
    if user.is_empty() {
        return Some(Err(
            "the user name before the colon is empty; write the user's name there".to_string(),
        ));
    }
    Some(Ok((user, hash)))
}

impl PasswordFile {
    /// Reads the file; every line at fault is one error.
    pub fn load(path: &Path) -> Result<PasswordFile, Vec<FileError>> {
        let text = std::fs::read_to_string(path).map_err(|error| {
            vec![FileError {
                path: path.to_path_buf(),
                lines: Vec::new(),
                why: format!("cannot be read: {error}; name a password file the broker's user may read (saguin --passwd FILE add USER writes one)"),
            }]
        })?;
        PasswordFile::parse(path, &text)
    }

    /// Reads `text` as the contents of `path`, naming every line at fault,
    /// not only the first, so one check finds them all.
    pub fn parse(path: &Path, text: &str) -> Result<PasswordFile, Vec<FileError>> {
        let mut errors = Vec::new();
        let mut refuse = |lines: Vec<usize>, why: String| {
            errors.push(FileError {
                path: path.to_path_buf(),
                lines,
                why,
            })
        };
        let mut users = HashMap::new();
        let mut first_line: HashMap<&str, usize> = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let (user, hash) = match entry(line) {
                None => continue,
                Some(Err(why)) => {
                    refuse(vec![number], why);
                    continue;
                }
                Some(Ok(read)) => read,
            };
            if let Some(&first) = first_line.get(user) {
                refuse(
                    vec![first, number],
                    format!("user {user:?} is named twice; only one of its passwords could be the one checked, so delete one line"),
                );
                continue;
            }
            first_line.insert(user, number);
            match PasswordHash::parse(hash) {
                Ok(hash) => {
                    users.insert(user.into(), hash);
                }
                Err(why) => refuse(vec![number], format!("user {user:?}: {why}")),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let stand_in = users.values().max_by_key(|hash| hash.cost()).cloned();
        Ok(PasswordFile {
            path: path.to_path_buf(),
            users,
            stand_in,
        })
    }

    pub fn get(&self, user: &str) -> Option<&PasswordHash> {
        self.users.get(user)
    }

    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// The user names, in no order.
    pub fn users(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(|user| &**user)
    }

    /// The file's costliest entry, checked in place of an unknown user's so
    /// that a refusal of an unknown name costs what the dearest known one
    /// does: with entries of different costs, any other entry would let
    /// the time of a refusal tell names apart. Settled as the file is read,
    /// so a SIGUSR1 re-read settles it again.
    pub(super) fn stand_in(&self) -> Option<&PasswordHash> {
        self.stand_in.as_ref()
    }

    /// The most memory one check against this file holds: argon2id's.
    pub fn check_memory_bytes(&self) -> u64 {
        self.users
            .values()
            .map(PasswordHash::memory_bytes)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA512_HUNTER2: &str = "$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==";

    fn parse(text: &str) -> Result<PasswordFile, Vec<FileError>> {
        PasswordFile::parse(Path::new("/etc/p"), text)
    }

    /// The one error of a file refused for one fault.
    fn refused(text: &str) -> FileError {
        let mut errors = parse(text).unwrap_err();
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors.remove(0)
    }

    #[test]
    fn users_comments_and_blank_lines() {
        let text = format!("# devices\n\nbob:{SHA512_HUNTER2}\n  carol :\t{SHA512_HUNTER2} \r\n");
        let file = parse(&text).unwrap();
        assert_eq!(file.user_count(), 2);
        assert!(file.get("bob").unwrap().verify(b"hunter2"));
        assert!(file.get("carol").is_some());
        assert!(file.get("alice").is_none());
    }

    #[test]
    fn a_user_on_two_lines_is_refused_naming_both() {
        let text = format!("bob:{SHA512_HUNTER2}\n# x\nbob:{SHA512_HUNTER2}\n");
        let error = refused(&text);
        assert_eq!(error.lines, vec![1, 3]);
        assert_eq!(
            error.to_string(),
            "password file /etc/p, lines 1 and 3: user \"bob\" is named twice; only one of its passwords could be the one checked, so delete one line"
        );
    }

    #[test]
    fn unreadable_lines_are_refused_naming_the_line() {
        let argon = format!(
            "bob:{SHA512_HUNTER2}\neve:$argon2id$v=19$m=131072,t=1,p=1$c2FsdGZvcmV2ZQ$aGFzaA\n"
        );
        let error = refused(&argon);
        assert_eq!(error.lines, vec![2]);
        assert!(error
            .to_string()
            .starts_with("password file /etc/p, line 2: user \"eve\": the argon2 memory m=131072 KiB is above"), "{error}");
        assert_eq!(refused("nocolon\n").lines, vec![1]);
        assert_eq!(refused(&format!(":{SHA512_HUNTER2}")).lines, vec![1]);
        let plain = refused("\n\ndave:letmein\n");
        assert_eq!(plain.lines, vec![3]);
        // The refusal quotes no password.
        assert!(!plain.to_string().contains("letmein"), "{plain}");
    }

    #[test]
    fn an_unknown_user_is_checked_against_the_costliest_entry() {
        let dear = "$7$200000$nsHM/ZOBJ77cIDS9$hkferJSlk1YzbAtDpJ/qmydTLFCMjUEY/+tbqCUDY+tcRE3PosQw4qqxd2nYX5EoGkWImwmcSbkLHx+OFo6kbQ==";
        let mut text: String = (0..20)
            .map(|n| format!("cheap{n}:{SHA512_HUNTER2}\n"))
            .collect();
        text.push_str(&format!("dear:{dear}\n"));
        let file = parse(&text).unwrap();
        assert_eq!(file.stand_in(), file.get("dear"));
    }

    #[test]
    fn the_stand_in_for_an_unknown_user_is_the_costliest_entry() {
        // "secret" by mosquitto_passwd 2.0.11 at 101 iterations; the rest
        // hashes of other passwords, at costs around it.
        let pbkdf2_101 = "$7$101$nsHM/ZOBJ77cIDS9$hkferJSlk1YzbAtDpJ/qmydTLFCMjUEY/+tbqCUDY+tcRE3PosQw4qqxd2nYX5EoGkWImwmcSbkLHx+OFo6kbQ==";
        let argon2id = PasswordHash::new_argon2id(b"a", &[1; 16]).to_string();
        let pbkdf2_210k = PasswordHash::Pbkdf2Sha512 {
            iterations: 210_000,
            salt: Box::new([2; 12]),
            digest: [0; 64],
        }
        .to_string();
        let text = format!("a:{SHA512_HUNTER2}\nb:{pbkdf2_101}\nc:{argon2id}\nd:{pbkdf2_210k}\n");
        let file = parse(&text).unwrap();
        assert_eq!(file.stand_in().unwrap().to_string(), pbkdf2_210k);
        assert_eq!(file.check_memory_bytes(), 47_104 * 1024);
        let without_the_costliest =
            parse(&text.replace(&format!("d:{pbkdf2_210k}\n"), "")).unwrap();
        assert_eq!(
            without_the_costliest.stand_in().unwrap().to_string(),
            argon2id
        );
    }

    #[test]
    fn an_unreadable_file_names_itself() {
        let mut errors = PasswordFile::load(Path::new("/nonexistent/saguin.passwd")).unwrap_err();
        let error = errors.remove(0);
        assert!(errors.is_empty());
        assert!(error.lines.is_empty());
        assert!(error
            .to_string()
            .starts_with("password file /nonexistent/saguin.passwd: cannot be read"));
        assert!(error.to_string().contains("saguin --passwd FILE add USER"));
    }

    #[test]
    fn every_line_at_fault_is_named_in_one_reading() {
        let text = format!(
            "nocolon\nbob:{SHA512_HUNTER2}\n:{SHA512_HUNTER2}\nbob:{SHA512_HUNTER2}\neve:plain\ncarol:{SHA512_HUNTER2}\n"
        );
        let errors = parse(&text).unwrap_err();
        let lines: Vec<Vec<usize>> = errors.iter().map(|e| e.lines.clone()).collect();
        assert_eq!(lines, vec![vec![1], vec![3], vec![2, 4], vec![5]]);
        assert!(errors[0].to_string().contains("no colon"), "{errors:?}");
    }
}
