//! `saguin migrate MOSQUITTO_CONF OUT_DIR`: a mosquitto configuration, its
//! password files and its acl_file, as this broker's (rfcs/0016).
//!
//! [`conf`] reads the configuration as mosquitto does, `include_dir` and
//! all; [`convert`] gives each option to the broker, a listener
//! ([`listeners`]) or a bridge ([`bridges`]) as mosquitto does and writes
//! the keys that do the same here; [`acl`] turns the acl_file into roles.
//! Every option met gets a line of the [`report`].
//!
//! Nothing is written unless everything is: the files go into a new
//! directory beside `OUT_DIR`, the configuration there is checked as
//! `--check-config` checks it, and only then is the directory renamed to
//! `OUT_DIR`, which must not exist or be empty. A migration that fails
//! leaves nothing behind.

pub mod acl;
mod bridges;
mod conf;
mod convert;
mod db_import;
mod listeners;
pub mod mosquitto_db;
pub mod report;

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

pub use convert::{ACL_FILE, CONFIG_FILE, REPORT_FILE};
use report::Report;

/// Why a migration stopped: the file, the line where there is one, and
/// what is wrong with what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub why: String,
}

impl Failure {
    pub fn at(file: &Path, line: Option<usize>, why: impl Into<String>) -> Failure {
        Failure {
            file: file.to_path_buf(),
            line,
            why: why.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}, line {line}: {}", self.file.display(), self.why),
            None => write!(f, "{}: {}", self.file.display(), self.why),
        }
    }
}

/// The largest input file read, a configuration or an acl_file.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The text of `path`, a `what` (for messages), within [`MAX_FILE_BYTES`].
fn read_text(path: &Path, what: &str) -> Result<String, Failure> {
    let size = fs::metadata(path)
        .map_err(|e| Failure::at(path, None, format!("{what} cannot be read: {e}")))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(Failure::at(
            path,
            None,
            format!("{what} is {size} bytes; it is read up to {MAX_FILE_BYTES}"),
        ));
    }
    fs::read_to_string(path)
        .map_err(|e| Failure::at(path, None, format!("{what} cannot be read as text: {e}")))
}

/// `key: value` into a YAML mapping.
fn put(map: &mut Mapping, key: &str, value: impl Into<Value>) {
    map.insert(Value::String(key.to_string()), value.into());
}

/// mosquitto's `true` or `false`.
fn boolean(line: &conf::Line) -> Result<bool, Failure> {
    match line.value().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(line.fail(format!("{} is true or false", line.key))),
    }
}

/// The note a written file starts with.
fn header(written_at: &str, conf: &Path) -> String {
    format!(
        "# Written by `saguin migrate` from {} at {written_at}.\n# {REPORT_FILE} beside this file says what became of each mosquitto option.\n",
        conf.display()
    )
}

/// Migrates `conf` into `out`, which must not exist or be an empty
/// directory; returns the report. On failure nothing is left behind.
pub fn run(conf: &Path, out: &Path) -> Result<Report, Failure> {
    let conf = &conf
        .canonicalize()
        .map_err(|e| Failure::at(conf, None, format!("cannot be read: {e}")))?;
    let out = absolute_out(out)?;
    let parent = out.parent().expect("an absolute path below /");
    let name = out.file_name().expect("a directory name").to_string_lossy();
    let staging = parent.join(format!(".{name}.migrating-{}", std::process::id()));
    let written_at = now();
    let host = host_name();
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|e| {
            Failure::at(
                &staging,
                None,
                format!("cannot be made beside the destination: {e}"),
            )
        })?;
    let mut imported = None;
    let done = stage(conf, &staging, &out, &written_at, &host, &mut imported).and_then(|report| {
        fs::rename(&staging, &out)
            .and_then(|()| fs::File::open(parent)?.sync_all())
            .map_err(|e| Failure::at(&out, None, format!("cannot be put in place: {e}")))?;
        Ok(report)
    });
    if done.is_err() {
        let _ = fs::remove_dir_all(&staging);
        if let Some(redb) = imported {
            db_import::remove(&redb);
        }
    }
    done
}

/// Writes the migration into `staging`, checks it there, then writes it
/// again as it will read in `out`.
fn stage(
    conf: &Path,
    staging: &Path,
    out: &Path,
    written_at: &str,
    host: &str,
    imported: &mut Option<PathBuf>,
) -> Result<Report, Failure> {
    let trial = convert::plan(conf, staging, written_at, host)?;
    write_files(staging, &trial.files)?;
    let checked = staging.join(CONFIG_FILE);
    let warnings = match super::check_config(&checked) {
        Ok((_, warnings)) => warnings,
        Err(why) => {
            return Err(Failure::at(
                conf,
                None,
                format!("the configuration it migrates to does not pass --check-config, so nothing was written:\n{why}"),
            ))
        }
    };
    let mut plan = convert::plan(conf, out, written_at, host)?;
    // What --check-config would warn about is said with the rest.
    for warning in warnings {
        plan.report
            .note_file(&out.join(CONFIG_FILE), "warning", warning);
    }
    if let Some(kept) = &plan.persistence {
        *imported = import_db(kept, &mut plan.report)?;
    }
    let mut files = plan.files;
    files.push((REPORT_FILE.to_string(), plan.report.text()));
    write_files(staging, &files)?;
    Ok(plan.report)
}

/// Carries what `mosquitto.db` holds into the provider's new file, with a
/// report line for each kind of thing; returns the file when one was made.
fn import_db(kept: &convert::Kept, report: &mut Report) -> Result<Option<PathBuf>, Failure> {
    let path = &kept.mosquitto_db;
    let size = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            report.note_file(
                path,
                "mosquitto.db",
                "not found: mosquitto kept no retained value or session to carry",
            );
            return Ok(None);
        }
        Err(e) => return Err(Failure::at(path, None, format!("cannot be read: {e}"))),
    };
    if size > mosquitto_db::MAX_DB_BYTES {
        return Err(Failure::at(path, None, format!("is {size} bytes, more than the migrated provider's {} hold; move it aside to migrate without its data", mosquitto_db::MAX_DB_BYTES)));
    }
    let bytes =
        fs::read(path).map_err(|e| Failure::at(path, None, format!("cannot be read: {e}")))?;
    let db = mosquitto_db::read(&bytes).map_err(|why| {
        Failure::at(
            path,
            None,
            format!("{why}; nothing was written (move the file aside to migrate without its data)"),
        )
    })?;
    let now_ms = now_unix_ms();
    let import = db_import::plan(
        &db,
        now_ms,
        &mut crate::store::MessageIdGenerator::from_entropy(),
    );
    for (what, outcome) in &import.notes {
        report.note_file(path, *what, outcome.clone());
    }
    if import.is_empty() {
        return Ok(None);
    }
    db_import::write(
        import,
        convert::PROVIDER_NAME,
        &kept.redb,
        convert::PROVIDER_MAX_BYTES,
    )?;
    report.note_file(&kept.redb, "written", format!("the redb provider {}, holding what mosquitto.db carried; owned by the user who ran the migration: give it to the broker's user (chown saguin) before starting the broker", convert::PROVIDER_NAME));
    Ok(Some(kept.redb.clone()))
}

fn write_files(dir: &Path, files: &[(String, String)]) -> Result<(), Failure> {
    for (name, text) in files {
        let path = dir.join(name);
        let written = (|| -> io::Result<()> {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })();
        written.map_err(|e| Failure::at(&path, None, format!("cannot be written: {e}")))?;
    }
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Failure::at(dir, None, format!("cannot be synced: {e}")))
}

/// `out` made absolute, refused where it exists and is not an empty
/// directory, or where its parent does not exist.
fn absolute_out(out: &Path) -> Result<PathBuf, Failure> {
    let never =
        "the migration never overwrites; name a directory that does not exist yet (or is empty)";
    match fs::read_dir(out).map(|mut entries| entries.next().is_some()) {
        Ok(true) => {
            return Err(Failure::at(
                out,
                None,
                format!("holds files already: {never}"),
            ))
        }
        Ok(false) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(_) if out.exists() => {
            return Err(Failure::at(
                out,
                None,
                format!("exists and is not a directory: {never}"),
            ))
        }
        Err(e) => return Err(Failure::at(out, None, format!("cannot be read: {e}"))),
    }
    let name = out
        .file_name()
        .filter(|n| *n != "." && *n != "..")
        .ok_or_else(|| {
            Failure::at(
                out,
                None,
                "names no directory; give the directory to write, such as /etc/saguin-migrated",
            )
        })?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent = parent.canonicalize().map_err(|e| {
        Failure::at(
            &parent,
            None,
            format!("cannot be used as the destination's parent: {e}"),
        )
    })?;
    Ok(parent.join(name))
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The time now, as RFC 3339 UTC.
fn now() -> String {
    crate::ops::json::timestamp(Some(now_unix_ms()))
        .trim_matches('"')
        .to_string()
}

/// This machine's name, for `broker.id` and bridge client ids.
fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "gateway".to_string())
}
