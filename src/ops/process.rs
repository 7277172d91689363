//! The process's own figures, read from `/proc/self` at a scrape and at
//! no other time: resident memory, open descriptors, CPU time and the
//! moment it started. Where `/proc` is missing a figure is left out
//! rather than reported as zero.

/// What `/proc/self` says about this process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    pub resident_memory_bytes: Option<u64>,
    pub virtual_memory_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
}

/// Clock ticks per second as `/proc` counts them: 100 on every Linux
/// architecture this broker is built for.
const TICKS_PER_S: f64 = 100.0;
/// The page size `statm` counts in, on the same architectures.
const PAGE_BYTES: u64 = 4096;

pub fn read() -> Process {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let fields = stat.as_deref().and_then(stat_fields);
    let boot_time_s = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| boot_time_s(&text));
    // Resident memory from `statm`: qemu-user, which runs the ARM tests,
    // synthesises `stat` with a resident size of 0, but passes `statm`.
    let resident_pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| text.split_whitespace().nth(1)?.parse::<u64>().ok());
    Process {
        resident_memory_bytes: resident_pages
            .or(fields.as_ref().map(|f| f.rss_pages))
            .map(|pages| pages * PAGE_BYTES),
        virtual_memory_bytes: fields.as_ref().map(|f| f.vsize_bytes),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|dir| dir.count() as u64),
        max_fds: std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|text| max_open_files(&text)),
        cpu_seconds: fields
            .as_ref()
            .map(|f| (f.utime_ticks + f.stime_ticks) as f64 / TICKS_PER_S),
        start_time_seconds: fields
            .as_ref()
            .zip(boot_time_s)
            .map(|(f, boot)| boot as f64 + f.start_ticks as f64 / TICKS_PER_S),
    }
}

#[derive(Debug, PartialEq)]
struct StatFields {
    utime_ticks: u64,
    stime_ticks: u64,
    start_ticks: u64,
    vsize_bytes: u64,
    rss_pages: u64,
}

/// `/proc/self/stat`: the command name is in parentheses and may hold
/// spaces, so fields are counted from the last `)`.
fn stat_fields(text: &str) -> Option<StatFields> {
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name, field 3 (state) is index 0: utime is field 14.
    let at = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime_ticks: at(14)?,
        stime_ticks: at(15)?,
        start_ticks: at(22)?,
        vsize_bytes: at(23)?,
        rss_pages: at(24)?,
    })
}

/// What thread `thread_id` of this process has caused to be written to
/// storage devices: `write_bytes` of its `/proc/self/task/<id>/io`, which
/// the kernel counts as pages are dirtied and as direct writes are sent,
/// and which is 0 on a file system in memory (tmpfs), which wears nothing.
pub fn thread_written_bytes(thread_id: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{thread_id}/io")).ok()?;
    written_bytes(&text)
}

fn written_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
}

fn boot_time_s(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

fn max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_read_past_a_name_holding_spaces_and_parentheses() {
        let text = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1234 9000000 512 18446744073709551615";
        let fields = stat_fields(text).unwrap();
        assert_eq!(fields.utime_ticks, 250);
        assert_eq!(fields.stime_ticks, 50);
        assert_eq!(fields.start_ticks, 1234);
        assert_eq!(fields.vsize_bytes, 9_000_000);
        assert_eq!(fields.rss_pages, 512);
    }

    #[test]
    fn this_process_is_measured() {
        let process = read();
        assert!(process.resident_memory_bytes.unwrap() > 0);
        assert!(process.open_fds.unwrap() > 0);
        assert!(process.start_time_seconds.unwrap() > 1_000_000_000.0);
    }

    #[test]
    fn a_threads_written_bytes_are_read_from_its_io() {
        let io = "rchar: 10\nwchar: 1000000\nsyscr: 0\nsyscw: 1\nread_bytes: 0\nwrite_bytes: 1024000\ncancelled_write_bytes: 0\n";
        assert_eq!(written_bytes(io), Some(1_024_000));
        assert_eq!(written_bytes("wchar: 3\n"), None);
    }

    #[test]
    fn limits_give_the_soft_descriptor_limit() {
        let text = "Limit Soft Limit Hard Limit Units\nMax open files            1024                 4096                 files\n";
        assert_eq!(max_open_files(text), Some(1024));
    }
}
