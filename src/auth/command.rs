//! `saguin --passwd FILE add|delete|list [USER]`: keeps a password file;
//! `saguin --passwd FILE scope USER ROUTES|all` sets the routes an
//! operator reaches in an operations listener's operators file.
//!
//! A file with a third field on any line is an operators file, and is
//! read as the listener reads one (its routes checked); `add` keeps a
//! line's routes when it sets a new password.
//!
//! The file is rewritten whole through a temporary file beside it, synced
//! and renamed over it, so a broker re-reading it on SIGUSR1 sees the old
//! file or the new one and never a part. It is owner-only (0600). A file
//! that does not read is not edited: the edit would hide the fault.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::file::{entry, PasswordFile};
use super::hash::PasswordHash;

pub const USAGE: &str =
    "saguin --passwd FILE add USER [--argon2id] | delete USER | list | scope USER ROUTES|all";

/// The longest user name MQTT can carry.
const MAX_USER_BYTES: usize = 65_535;

/// The longest password read, as MQTT bounds it.
const MAX_PASSWORD_BYTES: usize = 65_535;

#[derive(Debug, PartialEq, Eq)]
enum Edit {
    /// With `true`, an `$argon2id$` entry rather than `$7$`.
    Add(String, bool),
    Delete(String),
    List,
    /// An operator's routes, comma-separated; `None` for every route.
    Scope(String, Option<String>),
}

/// Runs the command on its arguments (those after `--passwd`). What it
/// prints on success goes to standard output; the error is for standard
/// error.
pub fn run(args: &[String]) -> Result<(), String> {
    let (path, edit) = parse_args(args)?;
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound && matches!(edit, Edit::Add(..)) => {
            String::new()
        }
        Err(e) => return Err(format!("{}: cannot be read: {e}", path.display())),
    };
    checked(&path, &text).map_err(|e| format!("{e}; mend it before editing"))?;
    match edit {
        Edit::List => {
            for user in users(&text) {
                println!("{user}");
            }
            Ok(())
        }
        Edit::Add(user, argon2id) => {
            let password = read_password(&user)?;
            // `$7$` unless asked: mosquitto 2.0 reads no argon2id.
            let hash = match argon2id {
                false => PasswordHash::new_pbkdf2(password.as_bytes(), &random_bytes()?),
                true => PasswordHash::new_argon2id(password.as_bytes(), &random_bytes()?),
            };
            write_atomically(&path, &with_user(&text, &user, &hash.to_string()))?;
            eprintln!("{}: user {user} set", path.display());
            Ok(())
        }
        Edit::Delete(user) => {
            if !users(&text).any(|u| u == user) {
                return Err(format!("{}: no user {user:?} to delete", path.display()));
            }
            write_atomically(&path, &without_user(&text, &user))?;
            eprintln!("{}: user {user} deleted", path.display());
            Ok(())
        }
        Edit::Scope(user, routes) => {
            if !users(&text).any(|u| u == user) {
                return Err(format!(
                    "{}: no operator {user:?}; add one first with saguin --passwd {} add {user}",
                    path.display(),
                    path.display()
                ));
            }
            let edited = with_scope(&text, &user, routes.as_deref());
            // The routes are checked as the listener will read them.
            checked(&path, &edited).map_err(|e| format!("{e}; nothing was written"))?;
            write_atomically(&path, &edited)?;
            match routes {
                Some(routes) => eprintln!("{}: {user} reaches {routes}", path.display()),
                None => eprintln!("{}: {user} reaches every route", path.display()),
            }
            Ok(())
        }
    }
}

/// Reads `text` as the file it is: an operators file, when a line names
/// routes, or a password file.
fn checked(path: &Path, text: &str) -> Result<(), String> {
    let scoped = text
        .lines()
        .filter_map(entry)
        .filter_map(Result::ok)
        .any(|(_, rest)| rest.contains(':'));
    if scoped {
        let name = path.display().to_string();
        crate::ops::operators::Operators::parse(&name, text, crate::ops::route::ROUTES)
            .map(drop)
            .map_err(|e| format!("{name}: {}", e.join("; ")))
    } else {
        PasswordFile::parse(path, text).map(drop).map_err(|errors| {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            errors.join("; ")
        })
    }
}

fn parse_args(args: &[String]) -> Result<(PathBuf, Edit), String> {
    let edit = match args {
        [_, action, user] if action == "add" => Edit::Add(checked_user(user)?, false),
        [_, action, user, kind] if action == "add" && kind == "--argon2id" => {
            Edit::Add(checked_user(user)?, true)
        }
        [_, action, user] if action == "delete" => Edit::Delete(user.clone()),
        [_, action] if action == "list" => Edit::List,
        [_, action, user, routes] if action == "scope" => {
            let routes = (routes != "all").then(|| routes.replace(' ', ""));
            Edit::Scope(user.clone(), routes)
        }
        _ => return Err(format!("usage: {USAGE}")),
    };
    Ok((PathBuf::from(&args[0]), edit))
}

/// A user name every reader of the format reads back as written.
fn checked_user(user: &str) -> Result<String, String> {
    let why = if user.is_empty() {
        "is empty"
    } else if user.contains(':') {
        "holds a colon, which ends a user name in this format"
    } else if user.chars().any(char::is_control) {
        "holds a control character"
    } else if user.trim_matches([' ', '\t']) != user {
        "starts or ends with a blank, which readers drop"
    } else if user.starts_with('#') {
        "starts with #, which marks a comment line"
    } else if user.len() > MAX_USER_BYTES {
        "is longer than MQTT carries (65,535 bytes)"
    } else {
        return Ok(user.to_string());
    };
    Err(format!("the user name {user:?} {why}"))
}

/// The user names in `text`, in file order.
fn users(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter_map(entry)
        .filter_map(Result::ok)
        .map(|(user, _)| user)
}

fn is_line_of(line: &str, user: &str) -> bool {
    matches!(entry(line), Some(Ok((u, _))) if u == user)
}

/// The routes field of a line, `user:hash:routes`, if it has one.
fn routes_of(line: &str) -> Option<&str> {
    let (_, rest) = entry(line)?.ok()?;
    rest.split_once(':').map(|(_, routes)| routes.trim())
}

/// The hash of a line, without its routes.
fn hash_of(line: &str) -> &str {
    let rest = entry(line)
        .and_then(Result::ok)
        .map_or("", |(_, rest)| rest);
    rest.split_once(':').map_or(rest, |(hash, _)| hash)
}

/// `text` with `user`'s line set to `hash`, its routes kept: in its place
/// if it had one, at the end otherwise. Every other line is kept as it was.
fn with_user(text: &str, user: &str, hash: &str) -> String {
    let mut replaced = false;
    let mut out = String::with_capacity(text.len() + hash.len() + user.len() + 2);
    for line in text.lines() {
        if is_line_of(line, user) {
            out.push_str(&line_of(user, hash, routes_of(line)));
            replaced = true;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if !replaced {
        out.push_str(&line_of(user, hash, None));
        out.push('\n');
    }
    out
}

fn line_of(user: &str, hash: &str, routes: Option<&str>) -> String {
    match routes {
        Some(routes) => format!("{user}:{hash}:{routes}"),
        None => format!("{user}:{hash}"),
    }
}

/// `text` with `user`'s routes set to `routes`; `None` drops the field,
/// which reaches every route. Its hash and every other line are kept.
fn with_scope(text: &str, user: &str, routes: Option<&str>) -> String {
    text.lines()
        .map(|line| {
            if is_line_of(line, user) {
                line_of(user, hash_of(line), routes)
            } else {
                line.to_string()
            }
        })
        .flat_map(|line| [line, "\n".to_string()])
        .collect()
}

fn without_user(text: &str, user: &str) -> String {
    text.lines()
        .filter(|line| !is_line_of(line, user))
        .flat_map(|line| [line, "\n"])
        .collect()
}

/// A salt for either kind, of the length each writes.
fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut salt = [0u8; N];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut salt))
        .map_err(|e| format!("cannot read /dev/urandom for a salt: {e}"))?;
    Ok(salt)
}

/// From the terminal without echo, asked twice; from standard input, one
/// line, when it is not a terminal.
fn read_password(user: &str) -> Result<String, String> {
    let stdin = io::stdin();
    let password = if rustix::termios::isatty(&stdin) {
        let first = read_hidden(&format!("Password for {user}: "))?;
        let again = read_hidden("Password again: ")?;
        if first != again {
            return Err("the two passwords differ; nothing was written".to_string());
        }
        first
    } else {
        let mut line = String::new();
        stdin
            .lock()
            .take(MAX_PASSWORD_BYTES as u64 + 2)
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the password from standard input: {e}"))?;
        line.trim_end_matches(['\n', '\r']).to_string()
    };
    if password.is_empty() {
        return Err("an empty password admits nobody; nothing was written".to_string());
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err("the password is longer than MQTT carries (65,535 bytes)".to_string());
    }
    Ok(password)
}

fn read_hidden(prompt: &str) -> Result<String, String> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    let stdin = io::stdin();
    let fail = |e: io::Error| format!("cannot read the password from the terminal: {e}");
    let saved = tcgetattr(&stdin).map_err(|e| fail(e.into()))?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    eprint!("{prompt}");
    tcsetattr(&stdin, OptionalActions::Now, &quiet).map_err(|e| fail(e.into()))?;
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    // Echo comes back whatever the read did.
    let restored = tcsetattr(&stdin, OptionalActions::Now, &saved);
    eprintln!();
    read.map_err(fail)?;
    restored.map_err(|e| fail(e.into()))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

/// Replaces `path` with `text`: a temporary file beside it, owner-only,
/// synced, renamed over it, and the directory synced so the rename lasts.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let fail = |e: io::Error| format!("{}: cannot be written: {e}", path.display());
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| format!("{}: names a directory, not a file", path.display()))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written.map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        assert_eq!(
            parse_args(&args(&["/f", "add", "bob"])).unwrap(),
            (PathBuf::from("/f"), Edit::Add("bob".into(), false))
        );
        assert_eq!(
            parse_args(&args(&["/f", "add", "bob", "--argon2id"]))
                .unwrap()
                .1,
            Edit::Add("bob".into(), true)
        );
        assert!(parse_args(&args(&["/f", "add", "bob", "--sha512"])).is_err());
        assert_eq!(parse_args(&args(&["/f", "list"])).unwrap().1, Edit::List);
        assert!(parse_args(&args(&["/f", "add"])).is_err());
        assert!(parse_args(&args(&["/f", "rename", "a"])).is_err());
        for bad in ["", "a:b", "a\tb", " a", "#a"] {
            assert!(parse_args(&args(&["/f", "add", bad])).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_scope_sets_or_drops_an_operators_routes_and_nothing_else() {
        let text = "# operators\nprometheus:$7$p\noncall:$7$o:/v1/operations\n";
        assert_eq!(
            with_scope(text, "prometheus", Some("/metrics,/v1/operations/consumers")),
            "# operators\nprometheus:$7$p:/metrics,/v1/operations/consumers\noncall:$7$o:/v1/operations\n"
        );
        assert_eq!(
            with_scope(text, "oncall", None),
            "# operators\nprometheus:$7$p\noncall:$7$o\n"
        );
        assert_eq!(
            parse_args(&args(&["/f", "scope", "a", "/metrics, /v1"]))
                .unwrap()
                .1,
            Edit::Scope("a".into(), Some("/metrics,/v1".into()))
        );
        assert_eq!(
            parse_args(&args(&["/f", "scope", "a", "all"])).unwrap().1,
            Edit::Scope("a".into(), None)
        );
        assert!(parse_args(&args(&["/f", "scope", "a"])).is_err());
    }

    #[test]
    fn an_added_user_replaces_its_line_and_keeps_the_rest() {
        let text = "# fleet\nbob:$6$old\ncarol:$6$c\n";
        assert_eq!(
            with_user(text, "bob", "$7$new"),
            "# fleet\nbob:$7$new\ncarol:$6$c\n"
        );
        assert_eq!(with_user("", "dave", "$7$d"), "dave:$7$d\n");
        assert_eq!(without_user(text, "bob"), "# fleet\ncarol:$6$c\n");
        // An operator's routes stay with its new password.
        let scoped = "prometheus:$7$old:/metrics\n";
        assert_eq!(
            with_user(scoped, "prometheus", "$7$new"),
            "prometheus:$7$new:/metrics\n"
        );
        assert_eq!(users(text).collect::<Vec<_>>(), ["bob", "carol"]);
    }

    #[test]
    fn the_file_is_replaced_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("saguin-passwd-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("clients.passwd");
        fs::write(&path, "old\n").unwrap();
        write_atomically(&path, "new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "no temporary left");
        fs::remove_dir_all(&dir).unwrap();
    }
}
