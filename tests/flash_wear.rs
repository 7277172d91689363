//! The flash-wear figures of a provider under a known write load: what
//! its storage thread had written to the device, as the kernel counts it
//! (read here from the broker's `/proc/<pid>/task/<tid>/io`, beside the
//! broker's own answer), the rate a day it gives over the broker's uptime,
//! and the years the configured endurance lasts at that rate. The rate's
//! arithmetic over days is tested with simulated time in `ops::wear`.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::http::{get_body as get, sample};
use common::{BrokerProcess, RawClient, TempDir, WAIT};
use saguin::codec::ProtocolVersion;

const DAY_S: f64 = 86_400.0;
const RECORDS: usize = 200;
const RECORD_BYTES: usize = 4096;
/// `3000 cycles of 32GiB`.
const ENDURANCE_BYTES: f64 = 3000.0 * 32.0 * 1024.0 * 1024.0 * 1024.0;

/// What the kernel counts the broker's storage thread as having written:
/// the one thread whose name starts `saguin-storage` (a thread's name is
/// cut to 15 bytes).
fn storage_thread_written(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.starts_with("saguin-storage") {
            let io = std::fs::read_to_string(task.path().join("io")).ok()?;
            return io
                .lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok());
        }
    }
    None
}

fn within_a_tenth(measured: f64, expected: f64) -> bool {
    (measured - expected).abs() <= expected * 0.1
}

#[test]
fn a_known_write_load_gives_the_bytes_a_day_and_the_life_left_of_the_configured_endurance() {
    let dir = TempDir::new("flash-wear");
    let block = "  storage:\n    default: local\n    default_retention_period: none\n    default_retention_bytes: none\n    providers:\n      local:\n        type: redb\n        file_path: {dir}/saguin.redb\n        max_bytes: 64MiB\n        device_endurance: 3000 cycles of 32GiB\n  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:0\n";
    let channels = "channels:\n  events:\n    type: append\n    filter: events/#\n";
    let mut broker = BrokerProcess::start_in(dir.path(), block, channels);
    let line = broker.wait_for_log("operations door tcp bound to");
    let ops = line.rsplit("bound to ").next().unwrap().trim().to_string();
    // Without the kernel's per-task I/O accounting there is no io file.
    if !std::path::Path::new(&format!("/proc/{}/io", broker.pid())).exists() {
        let _ = std::io::stderr().write_all(
            b"\n*** SKIPPED the flash-wear test: /proc does not count a thread's writes here ***\n",
        );
        return;
    }
    // The storage thread starts once its provider is open and its
    // channels loaded, which may be after the doors are bound.
    let deadline = Instant::now() + WAIT;
    let before = loop {
        if let Some(written) = storage_thread_written(broker.pid()) {
            break written;
        }
        assert!(Instant::now() < deadline, "no saguin-storage thread");
        std::thread::sleep(Duration::from_millis(20));
    };

    // The load: every record acknowledged, so stored and synced.
    let mut client = RawClient::connect(&broker.address(), ProtocolVersion::V5, "logger");
    let payloads: Vec<Vec<u8>> = (0..RECORDS).map(|i| vec![i as u8; RECORD_BYTES]).collect();
    assert_eq!(
        common::publish_all(&mut client, "events/a", &payloads).len(),
        RECORDS
    );

    let low = storage_thread_written(broker.pid()).unwrap();
    let body = get(&ops, "/metrics");
    let high = storage_thread_written(broker.pid()).unwrap();
    let written: f64 = sample(
        &body,
        "saguin_provider_written_bytes_total{provider=\"local\"}",
    );
    assert!(
        (low as f64..=high as f64).contains(&written),
        "the broker says {written} written, the kernel {low}..{high}"
    );
    let load = written - before as f64;
    assert!(
        load >= (RECORDS * RECORD_BYTES) as f64,
        "{load} bytes written for {} bytes of records",
        RECORDS * RECORD_BYTES
    );

    let uptime_s: f64 = sample(&body, "saguin_uptime_seconds");
    let per_day: f64 = sample(
        &body,
        "saguin_provider_written_bytes_per_day{provider=\"local\"}",
    );
    let expected_per_day = load / uptime_s * DAY_S;
    assert!(
        within_a_tenth(per_day, expected_per_day),
        "{per_day} bytes a day; {load} bytes in {uptime_s} s is {expected_per_day}"
    );
    let endurance: f64 = sample(
        &body,
        "saguin_provider_device_endurance_bytes{provider=\"local\"}",
    );
    assert_eq!(endurance, ENDURANCE_BYTES);
    let life: f64 = sample(
        &body,
        "saguin_provider_device_life_years{provider=\"local\"}",
    );
    let expected_life = ENDURANCE_BYTES / expected_per_day / 365.25;
    assert!(
        within_a_tenth(life, expected_life),
        "{life} years; at {expected_per_day} bytes a day it is {expected_life}"
    );
}
