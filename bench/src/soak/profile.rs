//! The broker's configuration for a soak: a board profile as shipped, with
//! its door, its storage file and its snapshot directory moved into the
//! broker's temporary directory, an operations listener on loopback, and
//! the channels and bridge the gateway mix uses.

use std::path::Path;

/// The board profile the soak runs on unless told otherwise.
pub const DEFAULT_BOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../boards/raspberry-pi-zero-2w.yaml"
);

/// Topics of the `latest` channel of device state: `state/<sensor>`.
pub const STATE_FILTER: &str = "state/+";
/// The `append` log: `log/<sensor>/event`.
pub const LOG_FILTER: &str = "log/#";
/// The queue and its name: jobs are published to `work/job`.
pub const QUEUE_FILTER: &str = "work/#";
pub const QUEUE_NAME: &str = "work";
/// Where the queue's dead letters land (its derived append channel).
pub const DEAD_LETTER_FILTER: &str = "work/__dlq/#";
/// The bridge carries the log out to the peer under this prefix.
pub const UPSTREAM_FILTER: &str = "up/log/#";
/// The log's retention: small enough that an hour's run reaches it and
/// shows the file staying put once records are trimmed, large enough to
/// hold what the away consumer and the bridge fall behind by (minutes).
pub const LOG_RETENTION: &str = "8MiB";
/// The queue's own bound.
pub const QUEUE_MAX_BYTES: &str = "4MiB";
/// An `append` channel nobody reads, filled before the clock starts with
/// what a gateway running for weeks holds: `ARCHIVE_RECORDS` records of
/// `ARCHIVE_RECORD_BYTES`, 10 MiB, more than redb's 8 MiB page cache, so
/// the samples see the cache full rather than filling (which a short run
/// could not tell from a leak).
pub const ARCHIVE_FILTER: &str = "archive/#";
pub const ARCHIVE_RECORDS: u64 = 2560;
pub const ARCHIVE_RECORD_BYTES: usize = 4096;
/// The name of the redb file in the broker's directory.
pub const STORE_FILE: &str = "saguin.redb";

/// `profile` rewritten for a soak in `dir`, with the operations listener
/// on `ops_port` and the bridge dialling a peer on `peer_port`.
pub fn soak_config(
    profile: &str,
    dir: &Path,
    ops_port: u16,
    peer_port: u16,
) -> Result<String, String> {
    let mut doors = 0;
    let mut files = 0;
    let mut out = String::with_capacity(profile.len() + 1024);
    for line in profile.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        if trimmed.starts_with("address:") {
            doors += 1;
            out.push_str(&format!("{indent}address: 127.0.0.1:0\n"));
        } else if trimmed.starts_with("file_path:") {
            files += 1;
            let path = dir.join(STORE_FILE);
            out.push_str(&format!("{indent}file_path: {}\n", path.display()));
        } else if trimmed.starts_with("snapshot_dir:") {
            out.push_str(&format!("{indent}snapshot_dir: {}\n", dir.display()));
        } else {
            out.push_str(line);
            out.push('\n');
        }
        if line == "broker:" {
            out.push_str(&format!(
                "  operations:\n    listen:\n      tcp:\n        address: 127.0.0.1:{ops_port}\n"
            ));
        }
    }
    if doors != 1 || files != 1 || !profile.lines().any(|l| l == "broker:") {
        return Err(format!(
            "the board profile must have a top-level `broker:`, one listener `address:` and one \
             redb `file_path:` for the soak to move into its own directory (found {doors} \
             address lines and {files} file_path lines)"
        ));
    }
    out.push_str(&format!(
        "channels:\n  \
           device-state:\n    type: latest\n    filter: {STATE_FILTER}\n  \
           events:\n    type: append\n    filter: {LOG_FILTER}\n    retention_bytes: {LOG_RETENTION}\n  \
           archive:\n    type: append\n    filter: {ARCHIVE_FILTER}\n  \
           {QUEUE_NAME}:\n    type: queue\n    filter: {QUEUE_FILTER}\n    max_bytes: {QUEUE_MAX_BYTES}\n\
         bridges:\n  \
           upstream:\n    peer: tcp://127.0.0.1:{peer_port}\n    client_id: soak-gateway\n    \
             topics:\n      - filter: {LOG_FILTER}\n        topic: up/log/$#\n        direction: out\n"
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_profile_is_moved_into_the_directory() {
        let profile = std::fs::read_to_string(DEFAULT_BOARD).unwrap();
        let config = soak_config(&profile, Path::new("/tmp/x"), 9001, 9002).unwrap();
        assert!(config.contains("address: 127.0.0.1:0\n"));
        assert!(config.contains("file_path: /tmp/x/saguin.redb\n"));
        assert!(config.contains("address: 127.0.0.1:9001\n"));
        assert!(config.contains("peer: tcp://127.0.0.1:9002\n"));
        let settings = config.lines().filter(|l| !l.trim_start().starts_with('#'));
        assert!(settings
            .clone()
            .all(|l| !l.contains("/var/lib") && !l.contains("0.0.0.0")));
        assert!(settings.clone().any(|l| l == "broker:"));
    }

    #[test]
    fn a_profile_without_a_store_is_refused() {
        let profile = "broker:\n  mqtt:\n    listen:\n      tcp:\n        address: 0.0.0.0:1883\n";
        let error = soak_config(profile, Path::new("/tmp/x"), 1, 2).unwrap_err();
        assert!(error.contains("file_path"), "{error}");
    }
}
