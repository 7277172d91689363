//! The operator's command-line tools, each run instead of a broker:
//!
//! - [`route`]: `--route CONFIG [TOPIC]`, where a topic lands;
//! - [`landing`]: where each bridge rule's records land, for `--check-config`;
//! - [`inspect`]: `inspect FILE`, what a stopped broker's provider holds;
//! - `--snapshots-to-redb` and `--redb-to-snapshots`: the conversions
//!   between a memory provider's snapshots and a redb file
//!   ([`crate::store::snapshots_to_redb`]);
//! - [`backup`]: `backup ADDRESS DIR`, an online backup of a running
//!   broker's redb providers through its operations listener;
//! - [`licenses`]: `--licenses`, the licences of the crates compiled in.
//!
//! Every tool answers bad input with one line naming the file and what to
//! do, and exits non-zero.

pub mod backup;
pub mod inspect;
pub mod json;
pub mod landing;
pub mod licenses;
pub mod migrate;
pub mod route;

use std::io::{self, IsTerminal as _};
use std::path::Path;
use std::process::ExitCode;

use crate::config::Config;
use crate::store::{self, StoreError};

/// The tools' part of `saguin --help`.
pub const USAGE: &str = "       saguin --licenses            the licences of every crate compiled into this binary
       saguin --route CONFIG [TOPIC-OR-FILTER] [--json]
                                   where a topic lands; without one, a subject a line from stdin
       saguin inspect PATH [--json]  what a stopped broker's redb file or snapshot directory holds
       saguin --snapshots-to-redb SNAPSHOT_DIR REDB_FILE
       saguin --redb-to-snapshots REDB_FILE SNAPSHOT_DIR
                                   convert a stopped provider; the destination must be new
       saguin backup OPERATIONS_ADDRESS DIR
                                   back up a running broker's redb providers into DIR (host:port or a socket path;
                                   a credential from SAGUIN_OPERATOR=name:password)
       saguin migrate MOSQUITTO_CONF OUT_DIR
                                   write a configuration (and acl_file) doing what a mosquitto one does into OUT_DIR,
                                   which must be new; prints a line for every option met";

/// Exit status for a usage or input mistake, as `--check-config` uses.
const BAD_INPUT: u8 = 2;

/// Runs the tool `args` name, or `None` when they name no tool.
pub fn dispatch(args: &[String]) -> Option<ExitCode> {
    let (json, rest): (Vec<&String>, Vec<&String>) = args.iter().partition(|a| *a == "--json");
    let json = !json.is_empty();
    let rest: Vec<&str> = rest.iter().map(|s| s.as_str()).collect();
    match rest.as_slice() {
        ["--route", config] => Some(route_command(Path::new(config), None, json)),
        ["--route", config, subject] => Some(route_command(Path::new(config), Some(subject), json)),
        ["--route", ..] => Some(usage_error(
            "--route takes a configuration file and at most one topic or filter",
        )),
        ["inspect", path] => Some(inspect_command(Path::new(path), json)),
        ["inspect", ..] => Some(usage_error(
            "inspect takes one redb file or snapshot directory",
        )),
        // --json belongs to --route and inspect here; another command that
        // takes it (--acl) is main's to dispatch.
        _ if json => None,
        ["--licenses"] => Some(licenses_command()),
        ["backup", address, dir] => Some(backup_command(address, dir)),
        ["backup", ..] => Some(usage_error(
            "backup takes the operations listener's address and the directory to write into",
        )),
        ["migrate", conf, out] => Some(migrate_command(Path::new(conf), Path::new(out))),
        ["migrate", ..] => Some(usage_error(
            "migrate takes a mosquitto configuration file and a directory that does not exist yet",
        )),
        ["--snapshots-to-redb", from, to] => {
            Some(convert_command(from, to, store::snapshots_to_redb))
        }
        ["--redb-to-snapshots", from, to] => {
            Some(convert_command(from, to, store::redb_to_snapshots))
        }
        ["--snapshots-to-redb" | "--redb-to-snapshots", ..] => Some(usage_error(
            "a conversion takes a source and a destination that does not exist yet",
        )),
        _ => None,
    }
}

fn licenses_command() -> ExitCode {
    match licenses::text() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("{why}");
            ExitCode::FAILURE
        }
    }
}

/// One line for a store error, with what to do where the error alone
/// does not say.
fn explain(error: &StoreError) -> String {
    match error {
        StoreError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
            format!("{error}: check the path")
        }
        StoreError::Locked { lock_path, .. } => format!(
            "{} is in use by a running broker ({} is locked): stop the broker first, or take an online backup with `saguin backup` and use the copy",
            error_subject(lock_path),
            lock_path.display()
        ),
        _ => error.to_string(),
    }
}

/// The provider a lock file guards.
fn error_subject(lock_path: &Path) -> String {
    let text = lock_path.display().to_string();
    match text.strip_suffix(".lock") {
        Some(file) if !text.ends_with("/saguin.lock") => file.to_string(),
        _ => lock_path
            .parent()
            .map_or(text.clone(), |p| p.display().to_string()),
    }
}

fn inspect_command(path: &Path, json: bool) -> ExitCode {
    match inspect::read(path) {
        Ok(report) if json => println!("{}", inspect::json(&report)),
        Ok(report) => print!("{}", inspect::text(&report)),
        Err(error) => {
            eprintln!("saguin inspect: {}", explain(&error));
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn convert_command(
    from: &str,
    to: &str,
    convert: fn(&Path, &Path) -> Result<store::Converted, StoreError>,
) -> ExitCode {
    match convert(Path::new(from), Path::new(to)) {
        Ok(c) => {
            println!(
                "{to}: {} channels, {} records, {} positions and {} entries from {from}, read back and equal to the source",
                c.channels, c.records, c.positions, c.entries
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("saguin: cannot convert {from} to {to}: {}", explain(&error));
            ExitCode::FAILURE
        }
    }
}

fn backup_command(address: &str, dir: &str) -> ExitCode {
    if let Err(why) = backup::check_dir(dir) {
        eprintln!("saguin backup: {why}");
        return ExitCode::from(BAD_INPUT);
    }
    let credential = std::env::var(backup::CREDENTIAL_VARIABLE).ok();
    match backup::ask(address, dir, credential.as_deref()) {
        Ok(answer) if answer.status == 200 => {
            print!("{}", answer.body);
            ExitCode::SUCCESS
        }
        Ok(answer) => {
            eprintln!(
                "saguin backup: the broker at {address} answered {}: {}",
                answer.status,
                answer.body.trim().replace('\n', " ")
            );
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("saguin backup: cannot reach the operations listener at {address}: {error}; check broker.operations.listen and that the broker runs");
            ExitCode::FAILURE
        }
    }
}

fn migrate_command(conf: &Path, out: &Path) -> ExitCode {
    match migrate::run(conf, out) {
        Ok(report) => {
            print!("{}", report.text());
            println!(
                "{}: written; start from {} (saguin --check-config checks it again), and give the broker's user read access to the directory",
                out.display(),
                out.join(migrate::CONFIG_FILE).display()
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("saguin migrate: {failure}");
            ExitCode::from(BAD_INPUT)
        }
    }
}

/// What `--check-config` asks of a configuration file: that it loads, and
/// that every file it names reads as a start would read it, every fault
/// in any of them reported at once ([`crate::config::check`]). The warnings are for a door beside an acl_file
/// that nothing identifies clients on.
pub fn check_config(path: &Path) -> Result<(Config, Vec<String>), String> {
    let config = crate::config::check(path).map_err(|e| e.to_string())?;
    let warnings = config.broker.mqtt.warnings();
    Ok((config, warnings))
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("saguin: {message}");
    ExitCode::from(BAD_INPUT)
}

fn route_command(config_path: &Path, subject: Option<&str>, json: bool) -> ExitCode {
    if !config_path.is_file() {
        eprintln!(
            "saguin --route: {} cannot be read as a file: give the configuration file the broker runs with",
            config_path.display()
        );
        return ExitCode::from(BAD_INPUT);
    }
    // A configuration with mistakes is answered as --check-config answers
    // it: every finding, one a line.
    let config = match crate::config::load(config_path) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(BAD_INPUT);
        }
    };
    let router = route::Router::new(&config);
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let answered = match subject {
        Some(subject) => {
            route::answer_one(&router, subject, json, &mut out).map(|ok| ok as usize ^ 1)
        }
        None => {
            if io::stdin().is_terminal() {
                eprintln!("saguin --route: reading topics and filters from standard input, one a line (end with Ctrl-D)");
            }
            route::answer_lines(&router, io::stdin().lock(), json, &mut out)
        }
    };
    match answered {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(BAD_INPUT),
        Err(error) => {
            eprintln!("saguin --route: cannot write the answer: {error}");
            ExitCode::FAILURE
        }
    }
}
