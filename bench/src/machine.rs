//! What the figures were measured on, and when.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub mosquitto_version: String,
    pub saguin_revision: String,
}

pub fn describe(mosquitto: &Path) -> Machine {
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model: cpu_model().unwrap_or_else(|| "unknown".into()),
        kernel: command_output("uname", &["-r"]).unwrap_or_else(|| "unknown".into()),
        mosquitto_version: mosquitto_version(mosquitto).unwrap_or_else(|| "unknown".into()),
        saguin_revision: saguin_revision(),
    }
}

fn cpu_model() -> Option<String> {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = cpuinfo.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

/// The trimmed standard output of a command that succeeded.
pub fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// mosquitto prints its version on the first line of `-h`, and exits 3.
fn mosquitto_version(mosquitto: &Path) -> Option<String> {
    let output = Command::new(mosquitto).arg("-h").output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let line = text.lines().find(|l| l.contains("version"))?;
    Some(
        line.trim()
            .trim_start_matches("mosquitto version ")
            .to_string(),
    )
}

/// The crate version and the commit, marked when the tree had changes.
fn saguin_revision() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let Some(commit) = command_output("git", &["rev-parse", "--short", "HEAD"]) else {
        return version.to_string();
    };
    let dirty = command_output("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    let marker = if dirty { " + uncommitted changes" } else { "" };
    format!("{version} (commit {commit}{marker})")
}

/// The commit of the git checkout `binary` lies in (its `target/`), which
/// is the commit it was built from when built there and left alone.
pub fn revision_of(binary: &Path) -> String {
    let dir = binary.parent().unwrap_or(Path::new("."));
    let dir = dir.to_string_lossy();
    command_output("git", &["-C", &dir, "rev-parse", "--short", "HEAD"])
        .map_or("commit unknown".to_string(), |commit| {
            format!("built in a checkout of commit {commit}")
        })
}

/// The file system holding `path`, as `ext4 on /dev/vda (mounted at /)`:
/// the entry of /proc/mounts with the longest mount point containing it.
pub fn file_system_of(path: &Path) -> Option<String> {
    let path = fs::canonicalize(path).ok()?;
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (device, mount_point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            // /proc/mounts writes a space in a path as \040.
            let mount_point = mount_point.replace("\\040", " ");
            path.starts_with(&mount_point)
                .then(|| (mount_point, device.to_string(), kind.to_string()))
        })
        .max_by_key(|(mount_point, _, _)| mount_point.len())
        .map(|(mount_point, device, kind)| format!("{kind} on {device} (mounted at {mount_point})"))
}

/// The 1-minute load average: other work on the machine shows up here and
/// as noise in the figures.
pub fn load_average_1min() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Clock ticks per second, the unit of /proc/PID/stat CPU times.
pub fn clock_ticks_per_s() -> u64 {
    command_output("getconf", &["CLK_TCK"])
        .and_then(|text| text.parse().ok())
        .filter(|&ticks| ticks > 0)
        .unwrap_or(100)
}

/// Now in UTC as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(seconds)
}

fn format_utc(seconds_since_epoch: u64) -> String {
    const SECONDS_PER_DAY: u64 = 86_400;
    let (year, month, day) =
        saguin::ops::json::civil_from_days(seconds_since_epoch / SECONDS_PER_DAY);
    let second_of_day = seconds_since_epoch % SECONDS_PER_DAY;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        second_of_day / 3600,
        second_of_day % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        // 2000-02-29 12:34:56 UTC, a leap day.
        assert_eq!(format_utc(951_827_696), "2000-02-29 12:34 UTC");
        // 2024-12-31 23:59:59 UTC.
        assert_eq!(format_utc(1_735_689_599), "2024-12-31 23:59 UTC");
    }
}
