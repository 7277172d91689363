//! One password hash in Mosquitto's notation, read, written and checked.
//!
//! Three kinds, as Mosquitto writes them:
//!
//! - `$6$<salt>$<digest>`: SHA-512 over the password followed by the salt;
//! - `$7$<iterations>$<salt>$<digest>`: PBKDF2-HMAC-SHA512, 64 bytes;
//! - `$argon2id$...`: mosquitto 2.1's default ([`super::argon2id`]).
//!
//! The first two carry salt and digest in standard base64 with padding.

use std::fmt;

use base64ct::{Base64, Encoding};
use pbkdf2::pbkdf2_hmac;
use sha2::{Digest, Sha512};
use subtle::ConstantTimeEq;

use super::argon2id::{self, Argon2idHash};

/// The length of a SHA-512 digest, which both kinds store.
pub const DIGEST_BYTES: usize = 64;

/// The salt written for a new entry. Mosquitto refuses a longer one in the
/// files it reads, so this is the most a file meant for it may carry.
pub const SALT_BYTES: usize = 12;

/// The PBKDF2 iteration count written for a new entry: Mosquitto's own, so
/// a file moved either way costs the same to check (rfcs/0008).
pub const WRITE_ITERATIONS: u32 = 101;

/// The largest iteration count read. A count past it is a typing slip or a
/// file meant to stall the broker: each check would take seconds.
pub const MAX_ITERATIONS: u32 = 1_000_000;

#[derive(Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$6$`.
    Sha512 {
        salt: Box<[u8]>,
        digest: [u8; DIGEST_BYTES],
    },
    /// `$7$`.
    Pbkdf2Sha512 {
        iterations: u32,
        salt: Box<[u8]>,
        digest: [u8; DIGEST_BYTES],
    },
    /// `$argon2id$`.
    Argon2id(Argon2idHash),
}

impl fmt::Debug for PasswordHash {
    // Never shown in full: a digest in a log is an offline guessing target.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PasswordHash::Sha512 { .. } => f.write_str("PasswordHash($6$)"),
            PasswordHash::Pbkdf2Sha512 { iterations, .. } => {
                write!(f, "PasswordHash($7$, {iterations} iterations)")
            }
            PasswordHash::Argon2id(a) => write!(f, "PasswordHash({a:?})"),
        }
    }
}

impl PasswordHash {
    /// Reads the part of a line after `user:`. The error says why, in words
    /// for an operator.
    pub fn parse(text: &str) -> Result<PasswordHash, String> {
        if let Some(rest) = text.strip_prefix("$argon2id$") {
            return Argon2idHash::parse(rest).map(PasswordHash::Argon2id);
        }
        if text.starts_with("$argon2") {
            return Err("an argon2i or argon2d hash, which this broker does not read (it reads argon2id, as mosquitto writes it); write the user again with saguin --passwd".into());
        }
        let fields: Vec<&str> = text.split('$').collect();
        match fields.as_slice() {
            ["", "6", salt, digest] => Ok(PasswordHash::Sha512 {
                salt: decode_salt(salt)?,
                digest: decode_digest(digest)?,
            }),
            ["", "7", iterations, salt, digest] => Ok(PasswordHash::Pbkdf2Sha512 {
                iterations: parse_iterations(iterations)?,
                salt: decode_salt(salt)?,
                digest: decode_digest(digest)?,
            }),
            ["", kind, ..] if *kind == "6" || *kind == "7" => Err(format!(
                "a ${kind}$ hash with the wrong number of $-separated fields"
            )),
            _ if !text.starts_with('$') => {
                Err("not a hash: a plain-text password, or a damaged line; write the user again with saguin --passwd".into())
            }
            _ => Err("a hash kind this broker does not read: it reads $6$ (SHA-512), $7$ (PBKDF2-SHA512) and $argon2id$".into()),
        }
    }

    /// A new `$7$` entry for `password` with `salt`.
    pub fn new_pbkdf2(password: &[u8], salt: &[u8; SALT_BYTES]) -> PasswordHash {
        PasswordHash::Pbkdf2Sha512 {
            iterations: WRITE_ITERATIONS,
            salt: Box::new(*salt),
            digest: pbkdf2_digest(password, salt, WRITE_ITERATIONS),
        }
    }

    /// A new `$argon2id$` entry for `password` with `salt`.
    pub fn new_argon2id(password: &[u8], salt: &[u8; argon2id::WRITE_SALT_BYTES]) -> PasswordHash {
        PasswordHash::Argon2id(Argon2idHash::new(password, salt))
    }

    /// What checking a password against this hash costs, in SHA-512
    /// compressions of a short password: one for `$6$` (salts past a block
    /// add one each), two per PBKDF2 iteration plus the key's set-up for
    /// `$7$`, and for argon2id about two for each KiB it fills per pass.
    /// Only compared between hashes, to find the costliest.
    pub fn cost(&self) -> u64 {
        const BLOCK_BYTES: u64 = 128;
        match self {
            PasswordHash::Sha512 { salt, .. } => 1 + salt.len() as u64 / BLOCK_BYTES,
            PasswordHash::Pbkdf2Sha512 {
                iterations, salt, ..
            } => 2 * u64::from(*iterations) + 4 + salt.len() as u64 / BLOCK_BYTES,
            PasswordHash::Argon2id(a) => 2 * u64::from(a.memory_kib) * u64::from(a.passes),
        }
    }

    /// Whether `password` is the one this hash was made from. The digests
    /// are compared in constant time.
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            PasswordHash::Sha512 { salt, digest } => {
                sha512_digest(password, salt).ct_eq(digest).into()
            }
            PasswordHash::Pbkdf2Sha512 {
                iterations,
                salt,
                digest,
            } => pbkdf2_digest(password, salt, *iterations)
                .ct_eq(digest)
                .into(),
            PasswordHash::Argon2id(a) => a.compute(password).ct_eq(&a.digest).into(),
        }
    }

    /// The memory one check holds while it runs, beyond a few KiB.
    pub fn memory_bytes(&self) -> u64 {
        match self {
            PasswordHash::Argon2id(a) => u64::from(a.memory_kib) * 1024,
            _ => 0,
        }
    }
}

impl fmt::Display for PasswordHash {
    /// The notation [`PasswordHash::parse`] reads, as Mosquitto writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PasswordHash::Sha512 { salt, digest } => write!(
                f,
                "$6${}${}",
                Base64::encode_string(salt),
                Base64::encode_string(digest)
            ),
            PasswordHash::Pbkdf2Sha512 {
                iterations,
                salt,
                digest,
            } => write!(
                f,
                "$7${iterations}${}${}",
                Base64::encode_string(salt),
                Base64::encode_string(digest)
            ),
            PasswordHash::Argon2id(a) => write!(f, "$argon2id${}", a.notation()),
        }
    }
}

fn sha512_digest(password: &[u8], salt: &[u8]) -> [u8; DIGEST_BYTES] {
    let mut hasher = Sha512::new();
    hasher.update(password);
    hasher.update(salt);
    hasher.finalize().into()
}

fn pbkdf2_digest(password: &[u8], salt: &[u8], iterations: u32) -> [u8; DIGEST_BYTES] {
    let mut digest = [0u8; DIGEST_BYTES];
    pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut digest);
    digest
}

fn parse_iterations(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_ITERATIONS).contains(&n) => Ok(n),
        _ => Err(format!(
            "the iteration count {text:?} is not a whole number from 1 to {MAX_ITERATIONS}"
        )),
    }
}

/// Any length is read, since files other tools wrote may carry longer
/// salts than this broker writes.
fn decode_salt(text: &str) -> Result<Box<[u8]>, String> {
    match Base64::decode_vec(text) {
        Ok(salt) if !salt.is_empty() => Ok(salt.into_boxed_slice()),
        _ => Err("the salt is not base64, or is empty".into()),
    }
}

fn decode_digest(text: &str) -> Result<[u8; DIGEST_BYTES], String> {
    Base64::decode_vec(text)
        .ok()
        .and_then(|digest| <[u8; DIGEST_BYTES]>::try_from(digest).ok())
        .ok_or_else(|| format!("the digest is not {DIGEST_BYTES} bytes of base64"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Written by Debian's mosquitto_passwd 2.0.11 (`-H sha512-pbkdf2` and
    // `-H sha512`), for "secret" and "hunter2".
    const PBKDF2_SECRET: &str = "$7$101$nsHM/ZOBJ77cIDS9$hkferJSlk1YzbAtDpJ/qmydTLFCMjUEY/+tbqCUDY+tcRE3PosQw4qqxd2nYX5EoGkWImwmcSbkLHx+OFo6kbQ==";
    const SHA512_HUNTER2: &str = "$6$DssEkUY/ld4blukw$9EvI2OdZOnUSp3rG8Qjszy7fwnQxLXJGRPu9kUowxiIPjM9xRKwAAn/h8/6b8fmq77JWiZKEY/HdIpz+/DUDrQ==";

    #[test]
    fn mosquitto_hashes_verify_their_password_and_no_other() {
        let pbkdf2 = PasswordHash::parse(PBKDF2_SECRET).unwrap();
        assert!(pbkdf2.verify(b"secret"));
        assert!(!pbkdf2.verify(b"secreT"));
        assert!(!pbkdf2.verify(b""));
        let sha512 = PasswordHash::parse(SHA512_HUNTER2).unwrap();
        assert!(sha512.verify(b"hunter2"));
        assert!(!sha512.verify(b"hunter3"));
    }

    #[test]
    fn a_long_salt_is_read() {
        // 64 bytes of salt, as some tools write.
        let line = "$7$1000$QjBTs3j6XCFjvCv3YxaE5q28rgEaNSCZtjxWa3rsrRraJ/dRpCJwKMFy8yokdtElRic9jGjCGeYK5F7/GqJ9Zg==$x/eWvYbM++JCQcvSsWeNMua8qr3VEujpVSM5R40ptbWZV+pZepXPrThpdjgGfQlKYLjobOn0Wx1Hk4H77cE2zA==";
        match PasswordHash::parse(line).unwrap() {
            PasswordHash::Pbkdf2Sha512 {
                iterations, salt, ..
            } => {
                assert_eq!(iterations, 1000);
                assert_eq!(salt.len(), 64);
            }
            other => panic!("read as {other:?}"),
        }
    }

    #[test]
    fn a_written_hash_reads_back_and_verifies() {
        let hash = PasswordHash::new_pbkdf2(b"p4ss", &[7; SALT_BYTES]);
        let text = hash.to_string();
        assert!(text.starts_with("$7$101$BwcHBwcHBwcHBwcH$"), "{text}");
        let read = PasswordHash::parse(&text).unwrap();
        assert_eq!(read, hash);
        assert!(read.verify(b"p4ss"));
        assert!(!read.verify(b"p4sS"));
    }

    #[test]
    fn every_kind_mosquitto_writes_reads_and_shows_itself_again() {
        // libargon2 (mosquitto 2.1's), "password" and "somesalt", t=2, 64 MiB.
        let argon2id =
            "$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc";
        for text in [PBKDF2_SECRET, SHA512_HUNTER2, argon2id] {
            assert_eq!(PasswordHash::parse(text).unwrap().to_string(), text);
        }
        let hash = PasswordHash::parse(argon2id).unwrap();
        assert!(hash.verify(b"password"));
        assert!(!hash.verify(b"Password"));
        assert_eq!(hash.memory_bytes(), 64 * 1024 * 1024);
        assert_eq!(
            format!("{hash:?}"),
            "PasswordHash($argon2id$, m=65536 KiB, t=2, p=1)"
        );
    }

    #[test]
    fn cost_orders_the_kinds_by_what_a_check_takes() {
        let pbkdf2 = |iterations: u32| PasswordHash::Pbkdf2Sha512 {
            iterations,
            salt: Box::new([1; 12]),
            digest: [0; DIGEST_BYTES],
        };
        let sha512 = PasswordHash::parse(SHA512_HUNTER2).unwrap();
        let mosquitto_21_argon2id = PasswordHash::new_argon2id(b"x", &[3; 16]);
        assert!(sha512.cost() < pbkdf2(101).cost());
        assert!(pbkdf2(101).cost() < mosquitto_21_argon2id.cost());
        assert!(mosquitto_21_argon2id.cost() < pbkdf2(210_000).cost());
    }

    #[test]
    fn unreadable_hashes_are_refused_with_a_reason() {
        let argon = "$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA";
        assert!(PasswordHash::parse(argon)
            .unwrap_err()
            .contains("argon2 salt"));
        let argon2i = "$argon2i$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$aGFzaA";
        assert!(PasswordHash::parse(argon2i)
            .unwrap_err()
            .contains("argon2i or argon2d"));
        assert!(PasswordHash::parse("plain")
            .unwrap_err()
            .contains("plain-text"));
        assert!(PasswordHash::parse("$5$abc$def")
            .unwrap_err()
            .contains("$6$"));
        assert!(PasswordHash::parse("$6$c2FsdA==$c2hvcnQ=")
            .unwrap_err()
            .contains("64 bytes"));
        assert!(PasswordHash::parse("$7$0$c2FsdA==$c2hvcnQ=")
            .unwrap_err()
            .contains("iteration"));
        assert!(PasswordHash::parse("$7$101$c2FsdA==")
            .unwrap_err()
            .contains("fields"));
        assert!(PasswordHash::parse("$6$!!$c2hvcnQ=")
            .unwrap_err()
            .contains("salt"));
    }

    #[test]
    fn pbkdf2_costs_more_with_more_iterations_and_more_than_sha512() {
        let pbkdf2 = |iterations| {
            PasswordHash::parse(&PBKDF2_SECRET.replacen("$101$", &format!("${iterations}$"), 1))
                .unwrap()
                .cost()
        };
        let sha512 = PasswordHash::parse(SHA512_HUNTER2).unwrap().cost();
        assert!(sha512 < pbkdf2(1));
        assert!(pbkdf2(101) < pbkdf2(200_000));
    }

    #[test]
    fn debug_shows_no_digest() {
        let hash = PasswordHash::parse(PBKDF2_SECRET).unwrap();
        assert_eq!(format!("{hash:?}"), "PasswordHash($7$, 101 iterations)");
    }
}
