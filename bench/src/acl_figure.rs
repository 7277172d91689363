//! The ACL figure: broadcast QoS 1 throughput (figure 2's load) on saguin
//! with a large `acl_file` in force, against the same saguin without one.
//! Both check every CONNECT against one password file, so the file is the
//! only difference; runs alternate between the two.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use saguin::auth::hash::{PasswordHash, SALT_BYTES};

use crate::brokers::{Broker, BrokerBinaries, TempDir};
use crate::load::{self, Throughput};
use crate::report::{self, Better, PairRow, Unit};

/// Users in the file, each with a role of its own.
pub const USERS: usize = 1000;
/// Rules in each role: 5,000 in all.
pub const RULES_PER_ROLE: usize = 5;
/// The user every load client logs in as (any user would do: every role
/// grants `bench/#`), and the password every user has.
const LOAD_USER: usize = USERS / 2;
const PASSWORD: &str = "bench-password";

fn user_name(index: usize) -> String {
    format!("device-{index:04}")
}

/// The two files, written into a directory of their own.
pub struct AclFiles {
    _dir: TempDir,
    pub password_file: PathBuf,
    pub acl_file: PathBuf,
}

/// Writes the password file (every user `$7$`, as `saguin --passwd`
/// writes them) and the acl_file.
pub fn write_files() -> Result<AclFiles, String> {
    let dir = TempDir::new("acl")?;
    let files = AclFiles {
        password_file: dir.path().join("clients.passwd"),
        acl_file: dir.path().join("acl.yaml"),
        _dir: dir,
    };
    write(&files.password_file, &password_file_text(USERS))?;
    write(&files.acl_file, &acl_file_text())?;
    Ok(files)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}

/// The first `users` users, each with `PASSWORD`.
fn password_file_text(users: usize) -> String {
    let mut text = String::new();
    for index in 0..users {
        // A salt of its own per user; a bench needs no secret one.
        let mut salt = [0u8; SALT_BYTES];
        salt[..8].copy_from_slice(&(index as u64 + 1).to_le_bytes());
        let hash = PasswordHash::new_pbkdf2(PASSWORD.as_bytes(), &salt);
        let _ = writeln!(text, "{}:{hash}", user_name(index));
    }
    text
}

/// One role per user, each of five topic rules: four over its own part of
/// the fleet's topics (one through `%c`), and `bench/#`, where the load
/// runs.
pub fn acl_file_text() -> String {
    let mut text = String::from("roles:\n");
    for index in 0..USERS {
        let _ = write!(
            text,
            "  fleet-{index:04}:\n\
             \x20   - topic: fleet/{index:04}/telemetry/#\n      allow: [write]\n\
             \x20   - topic: fleet/{index:04}/commands/+\n      allow: [read]\n\
             \x20   - topic: fleet/{index:04}/state/%c\n      allow: [read, write]\n\
             \x20   - topic: fleet/shared/{index:04}/#\n      allow: [read]\n\
             \x20   - topic: bench/#\n      allow: [read, write]\n"
        );
    }
    text.push_str("users:\n");
    for index in 0..USERS {
        let _ = writeln!(text, "  {}: [fleet-{index:04}]", user_name(index));
    }
    text
}

/// Runs `load` `runs` times on each of saguin with the file and without
/// it, alternating, after one warm-up each; the rows are the delivery rate
/// and the broker's CPU time per delivery.
pub fn run(
    binaries: &BrokerBinaries,
    load: &Throughput,
    warmup: &Throughput,
    runs: usize,
    ticks_per_s: u64,
) -> Result<[PairRow; 2], String> {
    let files = write_files()?;
    let credentials = (user_name(LOAD_USER), PASSWORD.to_string());
    let with = Broker::start_with_acl(
        binaries,
        &files.password_file,
        Some(&files.acl_file),
        credentials.clone(),
    )?;
    let without = Broker::start_with_acl(binaries, &files.password_file, None, credentials)?;
    let label = format!(
        "12. broadcast QoS 1, 1 → 1, 64 B, logged in; acl_file of {} users and {} rules",
        report::with_thousands(USERS as f64),
        report::with_thousands((USERS * RULES_PER_ROLE) as f64)
    );
    println!("\n== {label}");
    let mut rate = PairRow::new(&label, Unit::MessagesPerS, Better::Higher);
    let mut cpu = PairRow::new(
        format!("{label}: broker CPU per delivery"),
        Unit::Microseconds,
        Better::Lower,
    );
    let pair = [(&with, "with-acl"), (&without, "no-acl")];
    for (broker, name) in pair {
        let outcome = load::run_throughput(&broker.endpoint(), warmup, &format!("w12{name}"));
        if let Some(failure) = outcome.failure {
            println!("   warm-up {name}: {failure}");
        }
        std::thread::sleep(crate::BETWEEN_RUNS);
    }
    for run in 1..=runs {
        for (first, (broker, name)) in [true, false].into_iter().zip(pair) {
            let (r, c) = crate::measure_throughput("12", load, run, (broker, name), ticks_per_s);
            rate.push(first, r);
            cpu.push(first, c);
            std::thread::sleep(crate::BETWEEN_RUNS);
        }
    }
    with.stop();
    without.stop();
    Ok([rate, cpu])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_the_users_and_rules_it_is_said_to() {
        let text = acl_file_text();
        assert_eq!(text.matches("  - topic: ").count(), USERS * RULES_PER_ROLE);
        assert_eq!(text.matches(": [fleet-").count(), USERS);
    }

    #[test]
    fn each_user_logs_in_with_the_password() {
        let text = password_file_text(3);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        for (index, line) in lines.into_iter().enumerate() {
            let (user, hash) = line.split_once(':').expect("user:hash");
            assert_eq!(user, user_name(index));
            let hash = PasswordHash::parse(hash).expect("a hash the broker reads");
            assert!(hash.verify(PASSWORD.as_bytes()));
            assert!(!hash.verify(b"another"));
        }
    }

    /// The broker's own reader accepts the file, and the load's user is
    /// granted `bench/...`.
    #[test]
    fn the_broker_reads_the_file_and_grants_the_load_its_topic() {
        let acl = saguin::config::acl_file::parse(&acl_file_text(), "acl.yaml", &[])
            .expect("the generated acl_file is accepted");
        assert_eq!(acl.entries.len(), USERS);
        let rules: usize = acl.roles.iter().map(|r| r.rules.len()).sum();
        assert_eq!(rules, USERS * RULES_PER_ROLE);
        let entry = acl.entry_for(&user_name(LOAD_USER)).expect("an entry");
        assert!(acl.roles[entry.roles[0]]
            .rules
            .iter()
            .any(|r| r.filters == ["bench/#"]));
    }
}
