//! The keys a Unix-socket door takes, on the MQTT listener and the
//! operations listener alike: its `path`, its `mode` and `proxy_protocol`,
//! and the absolute file paths both listeners name.

use std::path::PathBuf;

use serde_yaml::Value;

use super::findings::Findings;

/// The socket file's permissions when `mode` is not written: owner and
/// group, nobody else.
pub const DEFAULT_MODE: u32 = 0o660;

/// A door's `path`: an absolute file path, or `@name` for an abstract
/// socket. `example` is a path such a door might take, for the findings.
pub(super) fn path(
    f: &mut Findings,
    door_path: &str,
    value: Option<&Value>,
    example: &str,
) -> Option<PathBuf> {
    let Some(value) = value else {
        f.key(
            door_path,
            format!("this door has no path, and a socket with no path is a mistake rather than a default; write path: with the socket file, such as {example}"),
        );
        return None;
    };
    let key = format!("{door_path}.path");
    match value {
        Value::String(text) if text.starts_with('@') => {
            if text.len() == 1 || text.contains('\0') {
                f.value(
                    &key,
                    value,
                    "an abstract socket is @ and a name holding no NUL, such as @saguin",
                );
                return None;
            }
            Some(PathBuf::from(text))
        }
        _ => absolute_file(f, &key, value, example),
    }
}

/// A door's `mode`: octal permission bits, quoted so YAML keeps the
/// leading 0; [`DEFAULT_MODE`] when absent.
pub(super) fn mode(f: &mut Findings, door_path: &str, value: Option<&Value>) -> Option<u32> {
    let Some(value) = value else {
        return Some(DEFAULT_MODE);
    };
    let mode = match value {
        Value::String(s) if (3..=4).contains(&s.len()) => u32::from_str_radix(s, 8).ok(),
        _ => None,
    };
    let mode = mode.filter(|m| *m <= 0o777);
    if mode.is_none() {
        f.value(
            &format!("{door_path}.mode"),
            value,
            "a mode is octal permission bits in quotes, such as \"0660\"",
        );
    }
    mode
}

/// A door's `proxy_protocol`; `false` when absent.
pub(super) fn proxy_protocol(
    f: &mut Findings,
    door_path: &str,
    value: Option<&Value>,
) -> Option<bool> {
    match value {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => {
            f.value(
                &format!("{door_path}.proxy_protocol"),
                v,
                "it is true (every connection starts with a PROXY protocol v2 header from the proxy in front of the socket) or false",
            );
            None
        }
    }
}

/// An absolute path to a file, as every path in this file is written.
pub(super) fn absolute_file(
    f: &mut Findings,
    path: &str,
    value: &Value,
    example: &str,
) -> Option<PathBuf> {
    let Value::String(text) = value else {
        f.value(
            path,
            value,
            format!("it is an absolute file path, such as {example}"),
        );
        return None;
    };
    let last = text.rsplit('/').next().unwrap_or("");
    let why = if !text.starts_with('/') {
        Some(format!("it must be absolute, so what the broker reads does not depend on where it was started; write it from /, such as {example}"))
    } else if text.contains('\0') {
        Some("a path holds no NUL character".to_string())
    } else if last.is_empty() || last == "." || last == ".." {
        Some(format!(
            "it names a directory, not a file; end it with a file name, such as {example}"
        ))
    } else {
        None
    };
    match why {
        Some(why) => {
            f.value(path, value, why);
            None
        }
        None => Some(PathBuf::from(text)),
    }
}

/// Two socket paths the kernel would take as one: compared once cleaned
/// (`/x/./r.sock` is `/x/r.sock`, `/x//r.sock` too).
pub(super) fn same_socket(a: &std::path::Path, b: &std::path::Path) -> bool {
    a.components().eq(b.components())
}
