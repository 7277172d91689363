//! The operators' password file: who may read this listener, and which
//! routes each of them reaches.
//!
//! One line per operator, `name:hash` or `name:hash:routes`, in
//! Mosquitto's hash formats (`$7$` PBKDF2-SHA512, `$6$` salted SHA-512
//! and mosquitto 2.1's `$argon2id$`), read and checked by [`crate::auth::PasswordHash`] as the MQTT
//! password files are. The third field is a comma-separated list of route paths; a
//! line without it reaches every route. A path grants itself and every
//! route below it at a `/` boundary, so `/v1/operations` grants
//! `/v1/operations/consumers` and not `/v1/operationsomething`.
//!
//! A refusal costs what checking the file's costliest entry costs, whether
//! the name is unknown, or known with a cheaper hash, so its time tells
//! nobody which names exist. An accepted password is remembered, as a
//! keyed digest in its operator's entry, so the next request with it is
//! answered without a hash; a reload reads a new file with nothing
//! remembered.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use sha2::{Digest, Sha512};
use subtle::ConstantTimeEq;

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
    /// The entry whose hash costs most to check: what an unknown name is
    /// checked against.
    costliest: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Operator {
    name: String,
    hash: PasswordHash,
    /// `None` reaches every route.
    scopes: Option<Vec<String>>,
    remembered: Remembered,
}

/// The keyed digest of the password last accepted for one operator.
#[derive(Default)]
struct Remembered(Mutex<Option<[u8; REMEMBERED_BYTES]>>);

const REMEMBERED_BYTES: usize = 32;

impl Remembered {
    fn get(&self) -> Option<[u8; REMEMBERED_BYTES]> {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, digest: [u8; REMEMBERED_BYTES]) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(digest);
    }
}

/// What is remembered is not what the file says: a copy starts empty and
/// every two compare equal.
impl Clone for Remembered {
    fn clone(&self) -> Remembered {
        Remembered::default()
    }
}

impl PartialEq for Remembered {
    fn eq(&self, _: &Remembered) -> bool {
        true
    }
}

impl Eq for Remembered {}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Remembered")
    }
}

/// A password's digest under a key drawn once per process from the
/// standard library's random hash keys: memory holding it does not give
/// the password away to whoever has the file.
fn remembered_digest(password: &[u8]) -> [u8; REMEMBERED_BYTES] {
    static KEY: OnceLock<[u8; 16]> = OnceLock::new();
    let key = KEY.get_or_init(|| {
        let state = RandomState::new();
        let mut key = [0u8; 16];
        for (half, part) in key.chunks_exact_mut(8).enumerate() {
            let mut hasher = state.build_hasher();
            hasher.write_usize(half);
            part.copy_from_slice(&hasher.finish().to_le_bytes());
        }
        key
    });
    let digest = Sha512::new()
        .chain_update(key)
        .chain_update(password)
        .finalize();
    let mut out = [0u8; REMEMBERED_BYTES];
    out.copy_from_slice(&digest[..REMEMBERED_BYTES]);
    out
}

/// The PBKDF2 iterations checking `hash` runs; a `$6$` hash is one
/// SHA-512, next to nothing; an argon2id one, the iterations that cost as
/// much (`PasswordHash::cost` counts two compressions an iteration).
fn iterations(hash: &PasswordHash) -> u32 {
    match hash {
        PasswordHash::Sha512 { .. } => 0,
        PasswordHash::Pbkdf2Sha512 { iterations, .. } => *iterations,
        PasswordHash::Argon2id(_) => u32::try_from(hash.cost() / 2).unwrap_or(u32::MAX),
    }
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
    /// serves, which every scope must reach at least one of. Every line at
    /// fault is one error.
    pub fn load(path: &Path, routes: &[&str]) -> Result<Operators, Vec<String>> {
        let unreadable = |e: std::io::Error| {
            vec![format!("cannot be read: {e}; name an operators file the broker's user may read (saguin --passwd FILE add USER writes one)")]
        };
        let size = std::fs::metadata(path).map_err(unreadable)?.len();
        if size > MAX_FILE_BYTES {
            return Err(vec![format!(
                "is {size} bytes, and an operators file is read only up to {MAX_FILE_BYTES}"
            )]);
        }
        let text = std::fs::read_to_string(path).map_err(unreadable)?;
        Operators::parse(&path.display().to_string(), &text, routes)
    }

    /// [`Operators::load`] for text already read.
    pub fn parse(path: &str, text: &str, routes: &[&str]) -> Result<Operators, Vec<String>> {
        let mut list: Vec<Operator> = Vec::new();
        let mut errors = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let at = index + 1;
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let operator = match parse_line(line, routes) {
                Ok(operator) => operator,
                Err(why) => {
                    errors.push(format!("line {at}: {why}"));
                    continue;
                }
            };
            if list.iter().any(|o| o.name == operator.name) {
                errors.push(format!(
                    "line {at}: {:?} is named twice; one line per operator, so delete one",
                    operator.name
                ));
                continue;
            }
            if list.len() == MAX_OPERATORS {
                errors.push(format!("names more than {MAX_OPERATORS} operators"));
                break;
            }
            list.push(operator);
        }
        if list.is_empty() && errors.is_empty() {
            errors.push("names nobody, so nobody could read this listener; add an operator with saguin --passwd, or remove the key".to_string());
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let costliest = (0..list.len())
            .max_by_key(|&i| iterations(&list[i].hash))
            .unwrap_or_default();
        Ok(Operators {
            path: path.to_string(),
            list,
            costliest,
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

    /// Whether `password` is the one last accepted for `name`: one
    /// SHA-512, computed whether or not the name exists.
    pub fn remembered(&self, name: &str, password: &[u8]) -> bool {
        let digest = remembered_digest(password);
        let held = self
            .list
            .iter()
            .find(|o| o.name == name)
            .and_then(|o| o.remembered.get());
        held.is_some_and(|held| bool::from(held.ct_eq(&digest)))
    }

    /// Checks the password against the hash: the costly step, which the
    /// listener runs off its own thread. A refusal does the costliest
    /// entry's work whatever the name; an acceptance is remembered.
    pub fn check(&self, name: &str, password: &[u8]) -> Check {
        let Some(operator) = self.list.iter().find(|o| o.name == name) else {
            // black_box: a result nobody reads must still be computed.
            std::hint::black_box(self.list[self.costliest].hash.verify(password));
            return Check::Refused;
        };
        if operator.hash.verify(password) {
            operator.remembered.set(remembered_digest(password));
            return Check::Accepted;
        }
        let mut wasted = [0u8; 64];
        let padding = self.padding(name);
        if padding > 0 {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, b"padding", padding, &mut wasted);
            std::hint::black_box(&wasted);
        }
        Check::Refused
    }

    /// The iterations a refusal of the known `name` runs beyond its own
    /// hash, so that it costs what the costliest entry costs.
    fn padding(&self, name: &str) -> u32 {
        let costliest = iterations(&self.list[self.costliest].hash);
        let own = self.list.iter().find(|o| o.name == name);
        costliest - own.map_or(costliest, |o| iterations(&o.hash))
    }

    /// Whether the operator `name` reaches `path`; `false` for a name the
    /// file does not hold. Every operator reaches the status page, which
    /// holds nothing but what the routes it reads give that operator.
    pub fn reaches(&self, name: &str, path: &str) -> bool {
        match self.list.iter().find(|o| o.name == name) {
            Some(_) if path == super::page::PATH => true,
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
        let fresh = Operators::load(Path::new(&path), routes).map_err(|e| e.join("; "))?;
        let fresh = Arc::new(fresh);
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
        remembered: Remembered::default(),
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
        // The page holds nothing of its own: a scope need not name it.
        assert!(ops.reaches("prometheus", "/"));
        assert!(!ops.reaches("stranger", "/"));
    }

    /// A `$7$` line of `iterations` that no password matches.
    fn costly_line(name: &str, iterations: u32) -> String {
        use base64ct::{Base64, Encoding};
        let salt = Base64::encode_string(SALT);
        let zeros = Base64::encode_string(&[0u8; 64]);
        format!("{name}:$7${iterations}${salt}${zeros}")
    }

    #[test]
    fn every_refusal_runs_the_costliest_entry_s_iterations() {
        let text = format!(
            "{}\n{}\n{}\n",
            hash_line("cheap", "pw", SALT),
            costly_line("costly", 5_000),
            "sha:$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==",
        );
        let ops = Operators::parse("f", &text, ROUTES).unwrap();
        assert_eq!(iterations(&ops.list[ops.costliest].hash), 5_000);
        // An unknown name is checked against the costliest entry itself.
        assert_eq!(ops.padding("nobody"), 0);
        assert_eq!(ops.padding("costly"), 0);
        assert_eq!(
            ops.padding("cheap"),
            5_000 - crate::auth::hash::WRITE_ITERATIONS
        );
        assert_eq!(ops.padding("sha"), 5_000);
        for name in ["nobody", "costly", "cheap", "sha"] {
            assert_eq!(ops.check(name, b"wrong"), Check::Refused, "{name}");
        }
    }

    #[test]
    fn an_accepted_password_is_remembered_until_the_file_is_read_again() {
        let text = format!(
            "{}\n{}\n",
            hash_line("a", "pw", SALT),
            hash_line("b", "pw", SALT)
        );
        let ops = Operators::parse("f", &text, ROUTES).unwrap();
        assert!(!ops.remembered("a", b"pw"));
        assert_eq!(ops.check("a", b"wrong"), Check::Refused);
        assert!(
            !ops.remembered("a", b"wrong"),
            "a refusal is not remembered"
        );
        assert_eq!(ops.check("a", b"pw"), Check::Accepted);
        assert!(ops.remembered("a", b"pw"));
        assert!(!ops.remembered("a", b"px"));
        assert!(!ops.remembered("b", b"pw"), "each operator's own");
        assert!(!ops.remembered("nobody", b"pw"));
        // A copy remembers nothing; a reload reads a new one.
        assert!(!ops.clone().remembered("a", b"pw"));
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
            assert_eq!(e.len(), 1, "{text:?}: {e:?}");
            assert!(e[0].contains(expected), "{text:?}: {e:?}");
        }
    }

    #[test]
    fn every_line_at_fault_is_named_in_one_reading() {
        let good = hash_line("a", "pw", SALT);
        let text = format!("x\n{good}\nb:plain\n{good}\n{good}:metrics\n");
        let e = Operators::parse("f", &text, ROUTES).unwrap_err();
        let lines: Vec<&str> = e.iter().map(|e| e.split(':').next().unwrap()).collect();
        assert_eq!(lines, ["line 1", "line 3", "line 4", "line 5"], "{e:?}");
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
