//! The operators' password file: who may read this listener, and which
//! routes each of them reaches.
//!
//! One line per operator, `name:hash` or `name:hash:routes`, in
//! Mosquitto's hash formats (`$7$` PBKDF2-SHA512 and `$6$` salted
//! SHA-512), read and checked by [`crate::auth::PasswordHash`] as the MQTT
//! password files are. The third field is a comma-separated list of route paths; a
//! line without it reaches every route. A path grants itself and every
//! route below it at a `/` boundary, so `/v1/operations` grants
//! `/v1/operations/consumers` and not `/v1/operationsomething`.

use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::auth::hash::SALT_BYTES;
use crate::auth::PasswordHash;

/// The most operators one file may name; a bound on what is held.
pub const MAX_OPERATORS: usize = 1_024;
/// The largest password file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The operators one file names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operators {
    /// The file, as the configuration named it.
    pub path: String,
    list: Vec<Operator>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Operator {
    name: String,
    hash: PasswordHash,
    /// `None` reaches every route.
    scopes: Option<Vec<String>>,
}

/// What a name and password come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The password is right.
    Accepted,
    /// An unknown name or a wrong password: told apart to nobody.
    Refused,
}

impl Operators {
    /// Reads and checks the file; `routes` are the paths this listener
    /// serves, which every scope must reach at least one of.
    pub fn load(path: &Path, routes: &[&str]) -> Result<Operators, String> {
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot be read: {e}"))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(format!(
                "is {size} bytes, and an operators file is read only up to {MAX_FILE_BYTES}"
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot be read: {e}"))?;
        Operators::parse(&path.display().to_string(), &text, routes)
    }

    /// [`Operators::load`] for text already read.
    pub fn parse(path: &str, text: &str, routes: &[&str]) -> Result<Operators, String> {
        let mut list: Vec<Operator> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let at = index + 1;
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let operator = parse_line(line, routes).map_err(|why| format!("line {at}: {why}"))?;
            if list.iter().any(|o| o.name == operator.name) {
                return Err(format!(
                    "line {at}: {:?} is named twice; one line per operator",
                    operator.name
                ));
            }
            if list.len() == MAX_OPERATORS {
                return Err(format!("names more than {MAX_OPERATORS} operators"));
            }
            list.push(operator);
        }
        if list.is_empty() {
            return Err("names nobody, so nobody could read this listener; add an operator with saguin --passwd, or remove the key".to_string());
        }
        Ok(Operators {
            path: path.to_string(),
            list,
        })
    }

    /// How many operators the file names.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether `name` has an entry.
    pub fn knows(&self, name: &str) -> bool {
        self.list.iter().any(|o| o.name == name)
    }

    pub fn check(&self, name: &str, password: &[u8]) -> Check {
        match self.list.iter().find(|o| o.name == name) {
            Some(operator) if operator.hash.verify(password) => Check::Accepted,
            _ => Check::Refused,
        }
    }

    /// Whether the operator `name` reaches `path`; `false` for a name the
    /// file does not hold.
    pub fn reaches(&self, name: &str, path: &str) -> bool {
        match self.list.iter().find(|o| o.name == name) {
            Some(Operator { scopes: None, .. }) => true,
            Some(Operator {
                scopes: Some(scopes),
                ..
            }) => scopes.iter().any(|scope| grants(scope, path)),
            None => false,
        }
    }
}

/// An operators file the listener reads while a reload may replace it.
#[derive(Debug)]
pub struct Reloadable(RwLock<Arc<Operators>>);

impl Reloadable {
    pub fn new(operators: Arc<Operators>) -> Arc<Reloadable> {
        Arc::new(Reloadable(RwLock::new(operators)))
    }

    /// The operators as last read.
    pub fn current(&self) -> Arc<Operators> {
        match self.0.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Reads the file again. One that cannot be read or does not check
    /// changes nothing - it may be half saved - and the reason is returned.
    pub fn reload(&self, routes: &[&str]) -> Result<Arc<Operators>, String> {
        let path = self.current().path.clone();
        let fresh = Arc::new(Operators::load(Path::new(&path), routes)?);
        match self.0.write() {
            Ok(mut guard) => *guard = Arc::clone(&fresh),
            Err(poisoned) => *poisoned.into_inner() = Arc::clone(&fresh),
        }
        Ok(fresh)
    }
}

/// Whether scope `scope` covers `path` at a segment boundary.
pub fn grants(scope: &str, path: &str) -> bool {
    let scope = scope.trim_end_matches('/');
    match path.strip_prefix(scope) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

fn parse_line(line: &str, routes: &[&str]) -> Result<Operator, String> {
    let mut fields = line.splitn(3, ':');
    let name = fields.next().unwrap_or_default();
    let Some(hash) = fields.next() else {
        return Err("is not name:hash; write it with saguin --passwd".to_string());
    };
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(
            "an operator's name is text that is not empty and holds no control characters"
                .to_string(),
        );
    }
    let hash = PasswordHash::parse(hash)?;
    let scopes = match fields.next() {
        None => None,
        Some(field) => Some(parse_scopes(field, routes)?),
    };
    Ok(Operator {
        name: name.to_string(),
        hash,
        scopes,
    })
}

fn parse_scopes(field: &str, routes: &[&str]) -> Result<Vec<String>, String> {
    let mut scopes = Vec::new();
    for scope in field.split(',').map(str::trim) {
        if !scope.starts_with('/') {
            return Err(format!(
                "the route {scope:?} is not a path; routes are written from /, such as /metrics or /v1/operations"
            ));
        }
        if !routes.iter().any(|route| grants(scope, route)) {
            return Err(format!(
                "the route {scope:?} names no route this listener serves, so it would grant nothing; the routes are {}",
                routes.join(", ")
            ));
        }
        scopes.push(scope.to_string());
    }
    Ok(scopes)
}

/// A `$7$` line for `name`, for tests and tools: PBKDF2-SHA512 over a
/// caller-chosen salt.
pub fn hash_line(name: &str, password: &str, salt: &[u8; SALT_BYTES]) -> String {
    format!(
        "{name}:{}",
        PasswordHash::new_pbkdf2(password.as_bytes(), salt)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SALT: &[u8; SALT_BYTES] = b"0123456789ab";

    const ROUTES: &[&str] = &[
        "/metrics",
        "/v1/operations/consumers",
        "/v1/operations/sessions",
    ];

    /// A line `mosquitto_passwd -b` wrote for user `alice`, password `secret`.
    const MOSQUITTO_LINE: &str = "alice:$7$101$LGv+q/eNa4Ocl6mi$/O+L5TUsFPa3Uxp+p9eKIJ/dnD9t50t6E+XeHT4DwqQ6G224AiWSrQt/3oA3+be7DGn86nLY5ZkYif+n6AruTw==";

    #[test]
    fn scopes_match_at_a_segment_boundary() {
        assert!(grants("/v1/operations", "/v1/operations/consumers"));
        assert!(grants("/v1/operations/", "/v1/operations/consumers"));
        assert!(grants("/metrics", "/metrics"));
        assert!(!grants("/v1/operations", "/v1/operationsomething"));
        assert!(!grants("/metrics", "/v1/operations/consumers"));
    }

    #[test]
    fn a_hash_made_here_checks_and_a_wrong_password_does_not() {
        let line = hash_line("prometheus", "pw", SALT);
        let ops = Operators::parse("f", &format!("{line}:/metrics\n"), ROUTES).unwrap();
        assert_eq!(ops.check("prometheus", b"pw"), Check::Accepted);
        assert_eq!(ops.check("prometheus", b"px"), Check::Refused);
        assert_eq!(ops.check("nobody", b"pw"), Check::Refused);
        assert!(ops.reaches("prometheus", "/metrics"));
        assert!(!ops.reaches("prometheus", "/v1/operations/sessions"));
    }

    #[test]
    fn a_line_without_routes_reaches_every_route() {
        let line = hash_line("oncall", "pw", SALT);
        let ops = Operators::parse("f", &line, ROUTES).unwrap();
        assert!(ops.reaches("oncall", "/v1/operations/sessions"));
        assert!(ops.reaches("oncall", "/metrics"));
    }

    #[test]
    fn bad_files_are_refused_with_the_line() {
        let good = hash_line("a", "pw", SALT);
        let cases = [
            ("", "names nobody"),
            ("a", "line 1: is not name:hash"),
            ("a:plain", "not a hash"),
            ("a:$9$x", "a hash kind this broker does not read"),
            (&format!("{good}:/nothing"), "names no route"),
            (&format!("{good}:metrics"), "not a path"),
            (&format!("{good}\n{good}"), "line 2: \"a\" is named twice"),
        ];
        for (text, expected) in cases {
            let e = Operators::parse("f", text, ROUTES).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_scope_above_several_routes_is_one_that_grants_something() {
        let line = format!("{}:/v1", hash_line("a", "pw", SALT));
        let ops = Operators::parse("f", &line, ROUTES).unwrap();
        assert!(ops.reaches("a", "/v1/operations/consumers"));
        assert!(!ops.reaches("a", "/metrics"));
    }

    #[test]
    fn mosquitto_written_hashes_are_read() {
        let ops = Operators::parse("f", MOSQUITTO_LINE, ROUTES).unwrap();
        assert_eq!(ops.check("alice", b"secret"), Check::Accepted);
        assert_eq!(ops.check("alice", b"Secret"), Check::Refused);
    }
}
