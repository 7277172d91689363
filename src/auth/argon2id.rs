//! `$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<digest>`: the
//! notation libargon2 writes and mosquitto 2.1 keeps in its password files,
//! salt and digest in standard base64 without padding.
//!
//! Its memory is a bound like any other here: one check holds `m` KiB for
//! as long as it runs, so a file asking for more than [`MAX_MEMORY_KIB`] is
//! refused when it is read, never discovered as a stall or an allocation
//! failure at a CONNECT.

use argon2::{Algorithm, Argon2, Block, Params, Version};
use base64ct::{Base64Unpadded, Encoding};

/// The most memory one check may take: 64 MiB, above mosquitto 2.1's
/// 46 MiB (47,104 KiB) and the common recommendations, and within what a
/// gateway can set aside for the one check that runs at a time.
pub const MAX_MEMORY_KIB: u32 = 65_536;

/// The most passes over that memory. A check's time grows with
/// `memory × passes`; 16 passes of 64 MiB is about what a `$7$` entry of
/// a million iterations costs.
pub const MAX_PASSES: u32 = 16;

/// The most lanes. Lanes are computed one after another here, so they
/// add no speed, only the floor of 8 KiB of memory each.
pub const MAX_LANES: u32 = 16;

/// What `saguin --passwd add --argon2id` writes: mosquitto 2.1's memory and
/// passes, with the salt and digest lengths RFC 9106 recommends.
pub const WRITE_MEMORY_KIB: u32 = 47_104;
pub const WRITE_PASSES: u32 = 1;
pub const WRITE_LANES: u32 = 1;
pub const WRITE_SALT_BYTES: usize = 16;
pub const WRITE_DIGEST_BYTES: usize = 32;

/// The longest digest read: mosquitto 2.1 writes 64 bytes.
const MAX_DIGEST_BYTES: usize = 64;

/// One `$argon2id$` entry, read.
#[derive(Clone, PartialEq, Eq)]
pub struct Argon2idHash {
    pub memory_kib: u32,
    pub passes: u32,
    pub lanes: u32,
    pub salt: Box<[u8]>,
    pub digest: Box<[u8]>,
}

impl Argon2idHash {
    /// Reads the text after `$argon2id$`. The error names the field and
    /// what to do.
    pub fn parse(rest: &str) -> Result<Argon2idHash, String> {
        let fields: Vec<&str> = rest.split('$').collect();
        let [version, parameters, salt, digest] = fields.as_slice() else {
            return Err("an $argon2id$ hash is $argon2id$v=19$m=...,t=...,p=...$salt$digest, and this one has another number of $-separated fields".into());
        };
        if *version != "v=19" {
            return Err(format!("argon2 version {version:?} is not read: only v=19, the one libargon2 and mosquitto 2.1 write; write the user again with saguin --passwd"));
        }
        let numbers: Vec<Option<u32>> = ["m=", "t=", "p="]
            .iter()
            .zip(parameters.split(','))
            .map(|(name, field)| field.strip_prefix(name).and_then(|n| n.parse().ok()))
            .collect();
        let [Some(memory_kib), Some(passes), Some(lanes)] = numbers[..] else {
            return Err(format!("the argon2 parameters {parameters:?} are not m=<KiB>,t=<passes>,p=<lanes> in whole numbers"));
        };
        if parameters.split(',').count() != 3 {
            return Err(format!("the argon2 parameters {parameters:?} hold more than m, t and p, which this broker does not read"));
        }
        check_bounds(memory_kib, passes, lanes)?;
        let salt = Base64Unpadded::decode_vec(salt)
            .ok()
            .filter(|s| s.len() >= argon2::MIN_SALT_LEN)
            .ok_or("the argon2 salt is not base64 of at least 8 bytes")?;
        let digest = Base64Unpadded::decode_vec(digest)
            .ok()
            .filter(|d| (Params::MIN_OUTPUT_LEN..=MAX_DIGEST_BYTES).contains(&d.len()))
            .ok_or("the argon2 digest is not base64 of 4 to 64 bytes")?;
        Ok(Argon2idHash {
            memory_kib,
            passes,
            lanes,
            salt: salt.into_boxed_slice(),
            digest: digest.into_boxed_slice(),
        })
    }

    /// A new entry for `password` with `salt`, at the parameters written.
    pub fn new(password: &[u8], salt: &[u8; WRITE_SALT_BYTES]) -> Argon2idHash {
        let mut hash = Argon2idHash {
            memory_kib: WRITE_MEMORY_KIB,
            passes: WRITE_PASSES,
            lanes: WRITE_LANES,
            salt: Box::new(*salt),
            digest: vec![0; WRITE_DIGEST_BYTES].into_boxed_slice(),
        };
        hash.digest = hash.compute(password);
        hash
    }

    /// The digest `password` gives under these parameters.
    pub fn compute(&self, password: &[u8]) -> Box<[u8]> {
        let mut digest = vec![0u8; self.digest.len()];
        // The bounds were checked when the hash was read or made, so the
        // parameters are ones the crate takes.
        let params = Params::new(
            self.memory_kib,
            self.passes,
            self.lanes,
            Some(self.digest.len()),
        )
        .expect("parameters checked when read");
        let mut memory = vec![Block::default(); params.block_count()];
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password_into_with_memory(password, &self.salt, &mut digest, &mut memory)
            .expect("lengths checked when read");
        digest.into_boxed_slice()
    }

    /// The notation [`Argon2idHash::parse`] reads, after `$argon2id$`.
    pub fn notation(&self) -> String {
        format!(
            "v=19$m={},t={},p={}${}${}",
            self.memory_kib,
            self.passes,
            self.lanes,
            Base64Unpadded::encode_string(&self.salt),
            Base64Unpadded::encode_string(&self.digest)
        )
    }
}

impl std::fmt::Debug for Argon2idHash {
    // Never the salt or digest: a digest in a log is an offline guessing target.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "$argon2id$, m={} KiB, t={}, p={}",
            self.memory_kib, self.passes, self.lanes
        )
    }
}

fn check_bounds(memory_kib: u32, passes: u32, lanes: u32) -> Result<(), String> {
    const FIX: &str =
        "write the user again with saguin --passwd, or with mosquitto_passwd at lower costs";
    if !(1..=MAX_LANES).contains(&lanes) {
        return Err(format!(
            "the argon2 lane count p={lanes} is not from 1 to {MAX_LANES}; {FIX}"
        ));
    }
    if !(1..=MAX_PASSES).contains(&passes) {
        return Err(format!(
            "the argon2 pass count t={passes} is not from 1 to {MAX_PASSES}: every check would take that many passes over its memory; {FIX}"
        ));
    }
    if memory_kib > MAX_MEMORY_KIB {
        return Err(format!(
            "the argon2 memory m={memory_kib} KiB is above the {MAX_MEMORY_KIB} KiB (64 MiB) one check may hold here; {FIX}"
        ));
    }
    if memory_kib < 8 * lanes {
        return Err(format!(
            "the argon2 memory m={memory_kib} KiB is below the 8 KiB each of its {lanes} lanes needs"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made by libargon2, the library mosquitto 2.1 hashes with (Debian's
    // `argon2` tool, 0~20171227): `echo -n PASSWORD | argon2 SALT -id -t T
    // -k M -p P [-l LEN] -e`.
    /// libargon2's own test vector: "password", "somesalt", t=2, 64 MiB.
    const LIBARGON2_VECTOR: &str =
        "v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc";
    /// "s3cret" at mosquitto 2.1's parameters and digest length.
    const MOSQUITTO_21_S3CRET: &str = "v=19$m=47104,t=1,p=1$c2FndWluLXNhbHQtMDAwMQ$O0thE2KRj4nGDn7Xv3Jena35svdruwzVMEC+Oq+NLunUieJY0fLXnrACtqxVUWcysE7U+ikiRsVT7gcsmFA+Rg";
    /// "hunter2" over four lanes.
    const FOUR_LANES_HUNTER2: &str =
        "v=19$m=1024,t=3,p=4$YW5vdGhlci1zYWx0LXh5eg$ZnsmdJZS1WSA9I9ma0tfCasl324J2x1VfGrEnL2e/zg";

    fn verifies(notation: &str, password: &[u8]) -> bool {
        let hash = Argon2idHash::parse(notation).unwrap();
        *hash.compute(password) == *hash.digest
    }

    #[test]
    fn libargon2_hashes_verify_their_password_and_no_other() {
        assert!(verifies(LIBARGON2_VECTOR, b"password"));
        assert!(!verifies(LIBARGON2_VECTOR, b"passwore"));
        assert!(verifies(MOSQUITTO_21_S3CRET, b"s3cret"));
        assert!(!verifies(MOSQUITTO_21_S3CRET, b"s3creT"));
        assert!(verifies(FOUR_LANES_HUNTER2, b"hunter2"));
        assert!(!verifies(FOUR_LANES_HUNTER2, b""));
    }

    #[test]
    fn rfc_9106_argon2id_test_vector() {
        // RFC 9106, section 5.3: the crate computes the function this
        // module hands it memory for. (The vector carries a secret and
        // associated data, which no password file does.)
        use argon2::{AssociatedData, ParamsBuilder};
        let params = ParamsBuilder::new()
            .m_cost(32)
            .t_cost(3)
            .p_cost(4)
            .data(AssociatedData::new(&[4; 12]).unwrap())
            .output_len(32)
            .build()
            .unwrap();
        let mut memory = vec![Block::default(); params.block_count()];
        let argon2 =
            Argon2::new_with_secret(&[3; 8], Algorithm::Argon2id, Version::V0x13, params).unwrap();
        let mut tag = [0u8; 32];
        argon2
            .hash_password_into_with_memory(&[1; 32], &[2; 16], &mut tag, &mut memory)
            .unwrap();
        let expected = [
            0x0d, 0x64, 0x0d, 0xf5, 0x8d, 0x78, 0x76, 0x6c, 0x08, 0xc0, 0x37, 0xa3, 0x4a, 0x8b,
            0x53, 0xc9, 0xd0, 0x1e, 0xf0, 0x45, 0x2d, 0x75, 0xb6, 0x5e, 0xb5, 0x25, 0x20, 0xe9,
            0x6b, 0x01, 0xe6, 0x59,
        ];
        assert_eq!(tag, expected);
    }

    #[test]
    fn a_written_hash_reads_back_and_verifies() {
        let hash = Argon2idHash::new(b"p4ss", &[9; WRITE_SALT_BYTES]);
        let notation = hash.notation();
        assert!(
            notation.starts_with("v=19$m=47104,t=1,p=1$CQkJCQkJCQkJCQkJCQkJCQ$"),
            "{notation}"
        );
        let read = Argon2idHash::parse(&notation).unwrap();
        assert!(read == hash);
        assert!(*read.compute(b"p4ss") == *read.digest);
        assert!(*read.compute(b"p4sS") != *read.digest);
    }

    #[test]
    fn parameters_past_the_bounds_are_refused_with_the_fix() {
        let refused = |notation: &str| Argon2idHash::parse(notation).unwrap_err();
        let big = refused("v=19$m=131072,t=1,p=1$c2FndWluLXNhbHQtMDAwMg$zxBLL9QhNYGXzlKnGJMKxjhp7VpYTEBdtqo74Cc4VzA");
        assert!(
            big.contains("m=131072 KiB is above the 65536 KiB (64 MiB)"),
            "{big}"
        );
        assert!(
            big.contains("write the user again with saguin --passwd"),
            "{big}"
        );
        assert!(refused(
            "v=19$m=1024,t=17,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
        )
        .contains("t=17"));
        assert!(refused(
            "v=19$m=1024,t=1,p=0$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
        )
        .contains("p=0"));
        assert!(refused(
            "v=19$m=8,t=1,p=4$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
        )
        .contains("8 KiB each"));
        assert!(refused(
            "v=16$m=1024,t=1,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
        )
        .contains("v=19"));
        assert!(refused("m=1024,t=1,p=1$c29tZXNhbHQ$CTFh").contains("fields"));
        assert!(refused(
            "v=19$t=1,m=1024,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
        )
        .contains("m=<KiB>"));
        assert!(refused(
            "v=19$m=1024,t=1,p=1,keyid=AA$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"
        )
        .contains("more than m, t and p"));
        assert!(
            refused("v=19$m=1024,t=1,p=1$c2FsdA$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc")
                .contains("salt")
        );
        assert!(refused("v=19$m=1024,t=1,p=1$c29tZXNhbHQ$!!").contains("digest"));
    }
}
