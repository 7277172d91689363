//! The memory promise under attack: for every board profile, scaled down
//! to run in seconds, a driver pushes every path by which memory grows
//! with what clients do to its bound at once (`common::worst_case`), and
//! the broker's peak resident memory must stay within the worst case it
//! printed at startup plus a fixed allowance. `saguin-bench worst-case`
//! runs the same driver at full size.

mod common;

use std::time::Duration;

use common::worst_case::{
    bounds_of, peak_rss_bytes, printed_worst_case_bytes, push, scaled_profile, ALLOWANCE_BYTES,
};
use common::{BrokerProcess, TempDir};

/// Connections and kept sessions are a tenth of the profile's: a few
/// seconds on two cores, every other bound as shipped.
const SCALE: f64 = 0.1;

fn holds(board: &str, profile: &str) {
    let dir = TempDir::new("worst-case");
    let config = scaled_profile(profile, dir.path(), SCALE);
    std::fs::write(dir.path().join("resolved-from.yaml"), &config).unwrap();
    let resolved = std::process::Command::new(env!("CARGO_BIN_EXE_saguin"))
        .arg("--check-config")
        .arg(dir.path().join("resolved-from.yaml"))
        .arg("--output")
        .output()
        .unwrap();
    assert!(resolved.status.success(), "{board}: {resolved:?}");
    let bounds = bounds_of(&String::from_utf8_lossy(&resolved.stdout));
    let mut broker = BrokerProcess::start_with_config(dir.path(), &config);
    let line = broker.wait_for_log("bytes in all at every bound");
    let worst = printed_worst_case_bytes(&line)
        .unwrap_or_else(|| panic!("{board}: no worst case in {line:?}"));
    let (pushed, held) = push(&broker.address(), &bounds, 0x5eed, Duration::from_secs(20));
    // Every path reached: each slot but the publisher's a reader, and
    // every kind of message taken.
    assert!(
        pushed.readers == bounds.connections - 1
            && pushed.sessions_left > bounds.persistent_sessions
            && pushed.qos2_held == pushed.readers * bounds.qos2_inflight
            && pushed.retained > 0
            && pushed.published > 0
            && pushed.published_qos0 > 0,
        "{board}: the driver fell short of the bounds {bounds:?}: {pushed:?}"
    );
    let peak = peak_rss_bytes(broker.pid()).expect("the broker's /proc status");
    drop(held);
    eprintln!("{board}: {pushed:?}; peak RSS {peak} bytes, worst case printed {worst} bytes");
    assert!(
        peak <= worst + ALLOWANCE_BYTES,
        "{board}: peak RSS {peak} bytes is over the printed worst case {worst} plus {ALLOWANCE_BYTES}"
    );
}

#[test]
fn the_pi_zero_2w_profile_holds_its_worst_case() {
    holds(
        "raspberry-pi-zero-2w",
        include_str!("../boards/raspberry-pi-zero-2w.yaml"),
    );
}

#[test]
fn the_openwrt_profile_holds_its_worst_case() {
    holds(
        "openwrt-128mb",
        include_str!("../boards/openwrt-128mb.yaml"),
    );
}

#[test]
fn the_pi_4_profile_holds_its_worst_case() {
    holds(
        "raspberry-pi-4",
        include_str!("../boards/raspberry-pi-4.yaml"),
    );
}

#[test]
fn the_industrial_profile_holds_its_worst_case() {
    holds(
        "industrial-arm-512mb",
        include_str!("../boards/industrial-arm-512mb.yaml"),
    );
}
