//! What the broker costs to carry and to keep running: stripped binary
//! sizes, and resident memory idle and with many idle clients.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use saguin::codec::ProtocolVersion;

use crate::brokers::{BenchDoor, Broker, BrokerBinaries, BrokerKind};
use crate::client::{Client, ClientOptions, Endpoint};

/// Idle clients held open for the memory figure.
pub const IDLE_CLIENTS: usize = 1000;
/// Descriptors needed: the bench's and the broker's end of each client,
/// each process under the same limit, plus room for everything else.
const OPEN_FILES_NEEDED: u64 = 2100;
/// Time for a broker to finish allocating before its memory is read.
const SETTLE: Duration = Duration::from_secs(1);
/// Longest a cross build may take before it is abandoned.
const CROSS_BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// One row of the binary size table.
pub struct BinarySize {
    pub label: String,
    pub size_bytes: Result<u64, String>,
}

const CROSS_TARGETS: [(&str, &str); 2] = [
    ("armv7", "armv7-unknown-linux-gnueabihf"),
    ("aarch64", "aarch64-unknown-linux-gnu"),
];
const NOT_BUILT: &str = "not built; run make release-armv7 release-aarch64";

/// What became of the attempt to build the cross binaries.
#[derive(Default)]
pub struct CrossBuild {
    started_at: Option<SystemTime>,
    failure: Option<String>,
}

impl CrossBuild {
    /// Why `binary` may not be the current source's: the build failed
    /// before rewriting it.
    fn staleness(&self, binary: &Path) -> Option<&str> {
        let failure = self.failure.as_deref()?;
        let modified = fs::metadata(binary).and_then(|m| m.modified()).ok();
        match (self.started_at, modified) {
            (Some(started_at), Some(modified)) if modified >= started_at => None,
            _ => Some(failure),
        }
    }
}

/// Builds the cross binaries with the project's Makefile when the cross
/// toolchains are installed: always when `rebuild`, else only if missing.
pub fn build_cross_binaries(target_dir: &Path, rebuild: bool) -> CrossBuild {
    let missing = CROSS_TARGETS
        .iter()
        .any(|(_, triple)| !cross_binary(target_dir, triple).exists());
    if !(rebuild || missing) {
        return CrossBuild::default();
    }
    let toolchains = ["arm-linux-gnueabihf-gcc", "aarch64-linux-gnu-gcc"];
    if !toolchains.iter().all(|tool| command_exists(tool)) {
        return CrossBuild {
            started_at: None,
            failure: Some("cross toolchains not installed".to_string()),
        };
    }
    let log_path = target_dir.join("saguin-bench-cross-build.log");
    eprintln!(
        "building the armv7 and aarch64 release binaries (make release-armv7 release-aarch64; log in {})",
        log_path.display()
    );
    let started_at = SystemTime::now();
    CrossBuild {
        started_at: Some(started_at),
        failure: run_make_cross(&log_path).err(),
    }
}

fn run_make_cross(log_path: &Path) -> Result<(), String> {
    let log = fs::File::create(log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new("make")
        .args(["release-armv7", "release-aarch64"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| format!("make: {e}"))?;
    let deadline = Instant::now() + CROSS_BUILD_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(format!(
                    "make failed ({status}); see {}",
                    log_path.display()
                ))
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("make took longer than {CROSS_BUILD_TIMEOUT:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(format!("make: {e}")),
        }
    }
}

fn command_exists(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn cross_binary(target_dir: &Path, triple: &str) -> PathBuf {
    target_dir.join(triple).join("release").join("saguin")
}

/// Sizes of saguin for each target, and of the mosquitto binary for scale.
pub fn binary_sizes(
    target_dir: &Path,
    binaries: &BrokerBinaries,
    cross_build: &CrossBuild,
) -> Vec<BinarySize> {
    let mut sizes = vec![BinarySize {
        label: "saguin x86_64 (target/release/saguin, stripped)".to_string(),
        size_bytes: file_size(&binaries.saguin),
    }];
    for (name, triple) in CROSS_TARGETS {
        let path = cross_binary(target_dir, triple);
        let mut label = format!("saguin {name} (target/{triple}/release/saguin, stripped)");
        let size_bytes = if path.exists() {
            if let Some(failure) = cross_build.staleness(&path) {
                label.push_str(&format!(
                    " — from an earlier build, rebuilding failed: {failure}"
                ));
            }
            file_size(&path)
        } else {
            Err(cross_build
                .failure
                .as_deref()
                .unwrap_or(NOT_BUILT)
                .to_string())
        };
        sizes.push(BinarySize { label, size_bytes });
    }
    sizes.push(BinarySize {
        label: format!(
            "mosquitto x86_64 ({}, dynamically linked: shared libraries not counted)",
            binaries.mosquitto.display()
        ),
        size_bytes: file_size(&binaries.mosquitto),
    });
    sizes
}

fn file_size(path: &Path) -> Result<u64, String> {
    fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The soft limit on open files, from /proc/self/limits.
fn open_files_soft_limit() -> Option<u64> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// Why the memory figure cannot be taken here, if it cannot.
pub fn memory_figure_blocker() -> Option<String> {
    match open_files_soft_limit() {
        Some(limit) if limit >= OPEN_FILES_NEEDED => None,
        Some(limit) => Some(format!(
            "skipped: `ulimit -n` is {limit}, below the {OPEN_FILES_NEEDED} that {IDLE_CLIENTS} \
             clients need; raise it (ulimit -n 4096) and run again"
        )),
        None => Some("skipped: cannot read the open files limit from /proc/self/limits".into()),
    }
}

/// Resident memory of one fresh broker, idle and with the idle clients.
#[derive(Clone, Copy, Debug)]
pub struct MemorySample {
    pub idle_bytes: u64,
    pub connected_bytes: u64,
}

impl MemorySample {
    pub fn per_connection_bytes(&self) -> f64 {
        (self.connected_bytes as f64 - self.idle_bytes as f64) / IDLE_CLIENTS as f64
    }
}

/// Starts a fresh broker, reads its memory idle, connects the idle clients
/// (MQTT 3.1.1, keepalive 600 s) over TCP, or through `door` where given,
/// and reads it again.
pub fn measure_memory(
    kind: BrokerKind,
    binaries: &BrokerBinaries,
    door: Option<BenchDoor>,
    run_label: &str,
) -> Result<MemorySample, String> {
    let broker = match door {
        None => Broker::start(kind, binaries)?,
        Some(door) => Broker::start_door(kind, binaries, door)?,
    };
    std::thread::sleep(SETTLE);
    let idle_bytes = broker.rss_bytes()?;
    let clients = connect_idle_clients(&broker.endpoint(), run_label)?;
    std::thread::sleep(SETTLE);
    let connected_bytes = broker.rss_bytes()?;
    drop(clients);
    broker.stop();
    Ok(MemorySample {
        idle_bytes,
        connected_bytes,
    })
}

fn connect_idle_clients(endpoint: &Endpoint, run_label: &str) -> Result<Vec<Client>, String> {
    let options = ClientOptions {
        version: ProtocolVersion::V311,
        keep_alive_s: 600,
        receive_maximum: None,
    };
    (0..IDLE_CLIENTS)
        .map(|i| {
            Client::connect_to(endpoint, &format!("{run_label}-idle{i}"), &options)
                .map_err(|e| format!("idle client {i} of {IDLE_CLIENTS}: {e}"))
        })
        .collect()
}
