//! Start-up time with a full channel: a redb provider file holding many
//! records in one append channel, written through the library rather than
//! over MQTT, and the time from spawning saguin on it to its `listener tcp
//! bound to` log line. saguin writes that line after it has opened storage
//! (redb checks the whole file's integrity at open) and read every
//! channel's counters, so the figure is what a restart costs before the
//! broker takes its first connection.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use saguin::codec::ProtocolVersion;
use saguin::store::{
    Message, MessageIdGenerator, Outcome, Provider, RedbProvider, Write, MAX_BATCH_WRITES,
};

use crate::brokers::{self, BrokerKind, TempDir, SAGUIN_CONFIG_YAML};
use crate::client::{Client, ClientOptions};
use crate::report::{self, Better, Row, Sample, Unit};

/// The append channel the fixture fills, and what it claims.
pub const CHANNEL: &str = "startup";
pub const FILTER: &str = "startup/#";
/// Every record's topic.
pub const TOPIC: &str = "startup/t";
pub const PAYLOAD_BYTES: usize = 128;
/// Records in one commit while the fixture is built: as many as one
/// transaction takes.
pub const COMMIT_RECORDS: usize = MAX_BATCH_WRITES;
/// Starts on each file; the figure is their median.
pub const STARTS: usize = 3;
/// The provider's name in the library and in the broker's configuration.
const PROVIDER: &str = "local";
/// The provider's bound, in the library and the configuration alike: far
/// above the fixture's use.
const MAX_BYTES: u64 = 2 << 30;
const MAX_BYTES_TEXT: &str = "2GiB";
/// One largest record under the bench's limits: `max_message_size` 1MiB
/// plus the default `max_header_bytes` 8KiB.
const RESERVE_BYTES: u64 = (1 << 20) + (8 << 10);
/// The line whose appearance ends a start.
const BOUND_LINE: &str = "listener tcp bound to ";
/// Longest a start may take to log `BOUND_LINE`.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a broker may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the broker's log is read while it starts: the figure's
/// resolution.
const POLL_INTERVAL: Duration = Duration::from_millis(1);

/// The start-up figure: starts on the full file and, for contrast, on an
/// empty one.
pub struct StartupFigure {
    pub records: u64,
    /// Starts on the file holding `records`.
    pub loaded: Row,
    /// Starts on a provider file holding no records.
    pub empty: Row,
    /// The size of the file holding `records`, or why it was not built.
    pub file_bytes: Result<u64, String>,
    pub build_time: Option<Duration>,
}

impl StartupFigure {
    pub fn rows(&self) -> [&Row; 2] {
        [&self.loaded, &self.empty]
    }
}

/// Builds both files, then `STARTS` starts on each, alternating, each
/// stopped before the next; the files are removed afterwards.
pub fn measure(saguin: &Path, records: u64) -> StartupFigure {
    let mut figure = StartupFigure {
        records,
        loaded: Row::new(
            format!(
                "start-up with {} records in a redb channel",
                report::with_thousands(records as f64)
            ),
            Unit::Milliseconds,
            Better::Lower,
        ),
        empty: Row::new(
            "start-up with an empty redb provider",
            Unit::Milliseconds,
            Better::Lower,
        ),
        file_bytes: Err("not built".to_string()),
        build_time: None,
    };
    figure.loaded.saguin_only = true;
    figure.empty.saguin_only = true;
    println!(
        "   writing {} records of {PAYLOAD_BYTES} B to a redb channel, {COMMIT_RECORDS} a commit",
        report::with_thousands(records as f64)
    );
    let loaded = Fixture::build("startup-full", records);
    let empty = Fixture::build("startup-empty", 0);
    match &loaded {
        Ok(fixture) => {
            println!(
                "   {} written in {:.1} s: {}",
                fixture.path().display(),
                fixture.build_time.as_secs_f64(),
                report::format_bytes(fixture.file_bytes as f64)
            );
            figure.file_bytes = Ok(fixture.file_bytes);
            figure.build_time = Some(fixture.build_time);
        }
        Err(failure) => {
            println!("   cannot build the fixture: {failure}");
            figure.file_bytes = Err(failure.clone());
        }
    }
    for run in 1..=STARTS {
        for (fixture, row, what) in [
            (&loaded, &mut figure.loaded, "with the records"),
            (&empty, &mut figure.empty, "empty provider  "),
        ] {
            let prefix = format!("   start {run} {what}");
            let sample = match fixture {
                Ok(fixture) => match fixture.time_start(saguin) {
                    Ok(elapsed) => {
                        let ms = elapsed.as_secs_f64() * 1e3;
                        println!("{prefix} {ms:>9.1} ms");
                        Sample::Value(ms)
                    }
                    Err(failure) => {
                        println!("{prefix} FAILED: {failure}");
                        Sample::Failed(failure)
                    }
                },
                Err(failure) => Sample::Failed(format!("no fixture: {failure}")),
            };
            row.push(BrokerKind::Saguin, sample);
        }
    }
    println!(
        "   {}: {} (empty provider: {})",
        figure.loaded.label,
        figure.loaded.median_cell(BrokerKind::Saguin),
        figure.empty.median_cell(BrokerKind::Saguin)
    );
    figure
}

/// A redb provider file written once per bench run, removed with its
/// directory when dropped.
pub struct Fixture {
    dir: TempDir,
    pub records: u64,
    pub file_bytes: u64,
    /// How long writing the records took (commits of `COMMIT_RECORDS`).
    pub build_time: Duration,
}

impl Fixture {
    /// A fresh directory holding a provider file with `records` records
    /// of `PAYLOAD_BYTES` on `TOPIC` in the append channel `CHANNEL`,
    /// closed again so that its lock is free for the broker. With 0
    /// records, the file holds only its tables.
    pub fn build(label: &str, records: u64) -> Result<Fixture, String> {
        let dir = TempDir::new(label)?;
        let file_path = provider_file(dir.path());
        let started = Instant::now();
        let mut provider = RedbProvider::open(PROVIDER, &file_path, MAX_BYTES, RESERVE_BYTES)
            .map_err(|e| format!("open {}: {e}", file_path.display()))?;
        let mut ids = MessageIdGenerator::from_entropy();
        let payload = vec![0x5A; PAYLOAD_BYTES];
        let now_ms = unix_now_ms();
        let mut written = 0u64;
        while written < records {
            let batch = (records - written).min(COMMIT_RECORDS as u64);
            let writes: Vec<Write> = (0..batch)
                .map(|_| Write::Append {
                    channel: CHANNEL.to_string(),
                    message: Message {
                        publisher: Some("saguin-bench".to_string()),
                        ..Message::new(
                            ids.next_id(now_ms),
                            now_ms,
                            TOPIC.to_string(),
                            payload.clone(),
                        )
                    },
                    channel_max_bytes: None,
                })
                .collect();
            let outcomes = provider
                .commit(&writes)
                .map_err(|e| format!("commit to {}: {e}", file_path.display()))?;
            if let Some(refused) = outcomes
                .iter()
                .find(|o| !matches!(o, Outcome::Appended { .. }))
            {
                return Err(format!(
                    "after {written} records, an append came to {refused:?}"
                ));
            }
            written += batch;
        }
        let state = provider.channel(CHANNEL);
        Box::new(provider)
            .close()
            .map_err(|e| format!("close {}: {e}", file_path.display()))?;
        let build_time = started.elapsed();
        if state.next - state.floor != records {
            return Err(format!(
                "the channel holds floor {} to next {}, not {records} records",
                state.floor, state.next
            ));
        }
        let file_bytes = fs::metadata(&file_path)
            .map_err(|e| format!("{}: {e}", file_path.display()))?
            .len();
        Ok(Fixture {
            dir,
            records,
            file_bytes,
            build_time,
        })
    }

    pub fn path(&self) -> PathBuf {
        provider_file(self.dir.path())
    }

    /// Starts saguin on this file, times it to `BOUND_LINE`, checks that
    /// it saw every record, and stops it with SIGTERM.
    pub fn time_start(&self, saguin: &Path) -> Result<Duration, String> {
        let dir = self.dir.path();
        let config_path = dir.join("saguin.yaml");
        fs::write(&config_path, config(&provider_file(dir)))
            .map_err(|e| format!("write config: {e}"))?;
        let (stdout, stderr) = brokers::output_file(dir)?;
        let log_path = dir.join("output.log");
        let started = Instant::now();
        let child = Command::new(saguin)
            .arg("--config")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start {}: {e}", saguin.display()))?;
        let mut running = Running { child };
        let (elapsed, log) = running.wait_for_bound_line(started, &log_path)?;
        let outcome = self.check_log(&log);
        // Ready means serving, signal handlers installed: SIGTERM any
        // sooner would kill it uncleanly, and leave redb a repair to do at
        // the next start.
        let serving = bound_address(&log).and_then(probe);
        let stopped = running.stop(&log_path);
        outcome?;
        serving?;
        stopped?;
        Ok(elapsed)
    }

    /// The broker must have read the counters the fixture wrote.
    fn check_log(&self, log: &str) -> Result<(), String> {
        let expected = format!(
            "channel {CHANNEL} on {PROVIDER}: floor 1, next {}",
            self.records + 1
        );
        if log.contains(&expected) {
            return Ok(());
        }
        let seen = log
            .lines()
            .find(|l| l.contains(&format!("channel {CHANNEL} on ")))
            .unwrap_or("no channel line");
        Err(format!("expected `{expected}` in its log, found: {seen}"))
    }
}

fn provider_file(dir: &Path) -> PathBuf {
    dir.join("startup.redb")
}

fn unix_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// saguin as for figures 1 to 5, logging at `info` (the figure is timed to
/// an info line), with the fixture's provider and an append channel on it.
fn config(file_path: &Path) -> String {
    let base = SAGUIN_CONFIG_YAML.replace("log_level: warn", "log_level: info");
    format!(
        "{base}  \
         storage:\n    \
           default: {PROVIDER}\n    \
           default_retention_period: none\n    \
           default_retention_bytes: none\n    \
           providers:\n      \
             {PROVIDER}:\n        \
               type: redb\n        \
               file_path: {}\n        \
               max_bytes: {MAX_BYTES_TEXT}\n\
         channels:\n  \
           {CHANNEL}:\n    \
             type: append\n    \
             filter: {FILTER}\n",
        file_path.display()
    )
}

/// The configuration, for BENCHMARKS.md.
pub fn config_text() -> String {
    config(Path::new("<temporary directory>/startup.redb"))
}

/// The address in `listener tcp bound to 127.0.0.1:PORT`.
fn bound_address(log: &str) -> Result<SocketAddr, String> {
    log.lines()
        .find_map(|line| line.split_once(BOUND_LINE))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no address after `{BOUND_LINE}` in its log"))
}

/// One CONNECT/CONNACK round trip.
fn probe(address: SocketAddr) -> Result<(), String> {
    let options = ClientOptions {
        version: ProtocolVersion::V311,
        keep_alive_s: 60,
        receive_maximum: None,
    };
    let client = Client::connect(address, "bench-startup-probe", &options)
        .map_err(|e| format!("it never answered a CONNECT: {e}"))?;
    client.disconnect();
    Ok(())
}

/// A started broker, killed if dropped before it has been stopped.
struct Running {
    child: Child,
}

impl Running {
    /// The time from `started` to the first sight of `BOUND_LINE`, and the
    /// log so far.
    fn wait_for_bound_line(
        &mut self,
        started: Instant,
        log_path: &Path,
    ) -> Result<(Duration, String), String> {
        loop {
            let log = fs::read_to_string(log_path).unwrap_or_default();
            if log.contains(BOUND_LINE) {
                return Ok((started.elapsed(), log));
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("saguin exited ({status}) while starting: {log}"));
            }
            if started.elapsed() >= START_TIMEOUT {
                return Err(format!(
                    "saguin logged no `{BOUND_LINE}` within {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// SIGTERM, and a clean exit within `STOP_TIMEOUT`.
    fn stop(&mut self, log_path: &Path) -> Result<(), String> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    let log = fs::read_to_string(log_path).unwrap_or_default();
                    return Err(format!("saguin exited {status} at SIGTERM: {log}"));
                }
                Ok(None) if Instant::now() >= deadline => {
                    return Err(format!(
                        "saguin had not exited {STOP_TIMEOUT:?} after SIGTERM"
                    ))
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("wait: {e}")),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
