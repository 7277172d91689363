//! `saguin-bench worst-case`: the driver `tests/worst_case_memory.rs`
//! runs scaled down, run on a board profile at full size (or any scale),
//! with the broker's peak resident memory beside the worst case it
//! printed. `make bench` runs it for the Pi Zero 2 W and OpenWrt profiles
//! and writes the "## Worst case in memory" section.

#[path = "../../tests/common/worst_case.rs"]
pub(crate) mod driver;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const SECTION_HEADING: &str = "## Worst case in memory";

const USAGE: &str = "\
usage: saguin-bench worst-case --board FILE [--board FILE ...] [--scale F] [--saguin-bin PATH] [--write FILE]
  --board FILE       a board profile (boards/*.yaml); repeat for more
  --scale F          connections and kept sessions times F (default 1: the profile as shipped)
  --saguin-bin PATH  the broker binary (default: saguin beside this executable)
  --write FILE       also put the section into FILE (BENCHMARKS.md), replacing an older one";

/// How long any one step may wait on the broker.
const WAIT: Duration = Duration::from_secs(30);

struct Row {
    board: String,
    connections: usize,
    persistent_sessions: usize,
    printed_bytes: u64,
    peak_bytes: u64,
    pushed: driver::Pushed,
}

pub fn main(args: &[String]) -> ExitCode {
    let mut boards = Vec::new();
    let mut scale = 1.0;
    let mut saguin_bin = None;
    let mut write = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned();
        match (arg.as_str(), value()) {
            ("--board", Some(v)) => boards.push(PathBuf::from(v)),
            ("--scale", Some(v)) => match v.parse::<f64>() {
                Ok(f) if f > 0.0 => scale = f,
                _ => return usage(&format!("--scale {v}: give a number above 0")),
            },
            ("--saguin-bin", Some(v)) => saguin_bin = Some(PathBuf::from(v)),
            ("--write", Some(v)) => write = Some(PathBuf::from(v)),
            (other, _) => return usage(&format!("{other}: not understood or missing its value")),
        }
    }
    if boards.is_empty() {
        return usage("give at least one --board");
    }
    let saguin = saguin_bin.unwrap_or_else(|| {
        std::env::current_exe()
            .map(|p| p.with_file_name("saguin"))
            .unwrap_or_else(|_| PathBuf::from("saguin"))
    });
    let mut rows = Vec::new();
    for board in &boards {
        match run_one(&saguin, board, scale) {
            Ok(row) => rows.push(row),
            Err(message) => {
                eprintln!("worst-case {}: {message}", board.display());
                return ExitCode::FAILURE;
            }
        }
    }
    let section = render(&rows, scale);
    println!("{section}");
    if let Some(path) = write {
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        if let Err(error) = std::fs::write(&path, with_section(&old, &section)) {
            eprintln!("cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let over = rows
        .iter()
        .any(|r| r.peak_bytes > r.printed_bytes + driver::ALLOWANCE_BYTES);
    if over {
        eprintln!(
            "worst-case: a broker's peak RSS passed its printed worst case plus the allowance"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn usage(message: &str) -> ExitCode {
    eprintln!("{message}\n{USAGE}");
    ExitCode::from(2)
}

fn run_one(saguin: &Path, board: &Path, scale: f64) -> Result<Row, String> {
    let profile = std::fs::read_to_string(board).map_err(|e| format!("cannot read it: {e}"))?;
    let dir = std::env::temp_dir().join(format!("saguin-worst-case-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let config_path = dir.join("saguin.yaml");
    std::fs::write(&config_path, driver::scaled_profile(&profile, &dir, scale))
        .map_err(|e| e.to_string())?;
    let resolved = Command::new(saguin)
        .arg("--check-config")
        .arg(&config_path)
        .arg("--output")
        .output()
        .map_err(|e| format!("{}: {e}", saguin.display()))?;
    if !resolved.status.success() {
        return Err(String::from_utf8_lossy(&resolved.stderr).into_owned());
    }
    let bounds = driver::bounds_of(&String::from_utf8_lossy(&resolved.stdout));
    let mut child = Command::new(saguin)
        .arg("--config")
        .arg(&config_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", saguin.display()))?;
    let result = drive(&mut child, &bounds);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let (printed_bytes, peak_bytes, pushed) = result?;
    Ok(Row {
        board: board
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
        connections: bounds.connections,
        persistent_sessions: bounds.persistent_sessions,
        printed_bytes,
        peak_bytes,
        pushed,
    })
}

fn drive(child: &mut Child, bounds: &driver::Bounds) -> Result<(u64, u64, driver::Pushed), String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().ok_or("no standard output")?;
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + WAIT;
    let (mut printed, mut port) = (None, None);
    while printed.is_none() || port.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .map_err(|_| "the broker logged no worst case and no port in time".to_string())?;
        if line.contains("bytes in all at every bound") {
            printed = driver::printed_worst_case_bytes(&line);
        }
        if line.contains("bound to") && port.is_none() {
            port = line
                .rsplit(':')
                .next()
                .and_then(|p| p.trim().parse::<u16>().ok());
        }
    }
    let address = format!("127.0.0.1:{}", port.unwrap_or(0));
    let (pushed, held) = driver::push(&address, bounds, 0x5eed, WAIT);
    let peak = driver::peak_rss_bytes(child.id()).ok_or("no /proc status for the broker")?;
    drop(held);
    Ok((printed.unwrap_or(0), peak, pushed))
}

fn render(rows: &[Row], scale: f64) -> String {
    let mut out = format!(
        "{SECTION_HEADING}\n\n\
         `saguin-bench worst-case` (the driver of `tests/worst_case_memory.rs`) at scale {scale}: \
         random client ids leaving sessions with every filter, readers that never read holding \
         their QoS 2 exchanges, retained values past the store's bound and a flood filling every \
         queue, all at once over loopback. Peak RSS is the broker's VmHWM; it may not pass the \
         printed worst case plus {} MiB.\n\n\
         | profile | connections | kept sessions | printed worst case | peak RSS | share of it | pushed |\n\
         |---|---|---|---|---|---|---|\n",
        driver::ALLOWANCE_BYTES >> 20
    );
    for r in rows {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1 << 20));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {:.0}% | {} sessions left, {} readers, {} QoS 2 held, {} retained, {} + {} published at QoS 1 + 0 |\n",
            r.board,
            r.connections,
            r.persistent_sessions,
            mib(r.printed_bytes),
            mib(r.peak_bytes),
            100.0 * r.peak_bytes as f64 / r.printed_bytes.max(1) as f64,
            r.pushed.sessions_left,
            r.pushed.readers,
            r.pushed.qos2_held,
            r.pushed.retained,
            r.pushed.published,
            r.pushed.published_qos0,
        ));
    }
    out
}

/// `document` with its worst-case section replaced by `section`, or
/// `section` added at its end.
pub fn with_section(document: &str, section: &str) -> String {
    let section = section.trim_end();
    match section_of(document) {
        Some(old) => {
            let start = document.find(old).unwrap_or(0);
            let tail = &document[start + old.len()..];
            let gap = if tail.is_empty() { "\n" } else { "\n\n" };
            format!("{}{section}{gap}{tail}", &document[..start])
        }
        None if document.is_empty() => format!("{section}\n"),
        None => format!("{}\n\n{section}\n", document.trim_end()),
    }
}

/// The worst-case section of `document`, up to the next heading.
pub fn section_of(document: &str) -> Option<&str> {
    let start = document.find(&format!("{SECTION_HEADING}\n"))?;
    let rest = &document[start + SECTION_HEADING.len()..];
    let end = rest
        .find("\n## ")
        .map_or(document.len(), |i| start + SECTION_HEADING.len() + i + 1);
    Some(&document[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_replaced_in_place_and_the_rest_kept() {
        let old = format!("# B\n\n{SECTION_HEADING}\n\nold\n\n## Soak\n\nkept\n");
        let new = with_section(&old, &format!("{SECTION_HEADING}\n\nnew\n"));
        assert_eq!(
            new,
            format!("# B\n\n{SECTION_HEADING}\n\nnew\n\n## Soak\n\nkept\n")
        );
        assert_eq!(
            with_section("# B\n", &format!("{SECTION_HEADING}\n\nx\n")),
            format!("# B\n\n{SECTION_HEADING}\n\nx\n")
        );
    }
}
