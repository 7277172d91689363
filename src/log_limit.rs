//! Repeated log lines, bounded. A line a client can make the broker write
//! once per filter or per packet would otherwise let one packet write
//! thousands of lines, which on an SD card is flash wear as well as noise.
//!
//! Each kind of line has a [`LogLimit`] of its own, a `static` at the place
//! that writes it: at most `burst` lines of the kind are written in a
//! window of `window_ms`, the rest are counted, and the next line written
//! says how many like it were left out. [`report_suppressed`] says so for
//! kinds that went quiet, so a count is never kept back for good.
//!
//! Callers pass the time, as everything in the core does: the limiter
//! reads no clock. Its counters are atomics so that it can be a `static`;
//! every writer of one kind is on one thread, so a relaxed order is enough.

use std::sync::atomic::{AtomicU64, Ordering};

/// One kind of line, and what its window has let through.
pub struct LogLimit {
    /// What the kind is, for the line reporting lines left out.
    what: &'static str,
    level: log::Level,
    burst: u64,
    window_ms: u64,
    /// When the current window began, plus one; 0 before the first line.
    window_start: AtomicU64,
    /// Lines written in the current window.
    written: AtomicU64,
    /// Lines left out since the last one written or reported.
    suppressed: AtomicU64,
}

impl LogLimit {
    /// A kind written at `level`, at most `burst` lines every `window_ms`.
    pub const fn new(what: &'static str, level: log::Level, burst: u64, window_ms: u64) -> Self {
        LogLimit {
            what,
            level,
            burst,
            window_ms,
            window_start: AtomicU64::new(0),
            written: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    pub fn level(&self) -> log::Level {
        self.level
    }

    /// Whether a line may be written at `now_ms`: `Some` with how many
    /// lines of the kind were left out before it, to be said on it, or
    /// `None` when this one is left out (and counted).
    pub fn admit(&self, now_ms: u64) -> Option<u64> {
        let start = self.window_start.load(Ordering::Relaxed);
        if start == 0 || now_ms.saturating_sub(start - 1) >= self.window_ms {
            self.window_start.store(now_ms + 1, Ordering::Relaxed);
            self.written.store(0, Ordering::Relaxed);
        }
        if self.written.load(Ordering::Relaxed) >= self.burst {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.written.fetch_add(1, Ordering::Relaxed);
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }

    /// The lines left out in a window that has ended, taken to be told.
    fn overdue(&self, now_ms: u64) -> Option<u64> {
        let start = self.window_start.load(Ordering::Relaxed);
        let ended = start != 0 && now_ms.saturating_sub(start - 1) >= self.window_ms;
        if !ended || self.suppressed.load(Ordering::Relaxed) == 0 {
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// Says, for each kind whose window has ended with lines left out, how
/// many there were. Run from a periodic tick.
pub fn report_suppressed(limits: &[&LogLimit], now_ms: u64) {
    for limit in limits {
        if let Some(count) = limit.overdue(now_ms) {
            log::log!(
                limit.level,
                "{count} more lines like \"{}\" were left out, at most {} being written every {} s",
                limit.what,
                limit.burst,
                limit.window_ms / 1000
            );
        }
    }
}

/// Writes a line through a [`LogLimit`]:
/// `limited!(LIMIT, now_ms, "refusing {x}: {why}")`, at the limit's level.
macro_rules! limited {
    ($limit:expr, $now_ms:expr, $($arg:tt)+) => {{
        let limit: &$crate::log_limit::LogLimit = &$limit;
        if log::log_enabled!(limit.level()) {
            match limit.admit($now_ms) {
                None => {}
                Some(0) => log::log!(limit.level(), $($arg)+),
                Some(left_out) => log::log!(
                    limit.level(),
                    "{} ({left_out} more like this left out before it)",
                    format_args!($($arg)+)
                ),
            }
        }
    }};
}
pub(crate) use limited;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_let_through_and_the_rest_counted_until_the_window_ends() {
        let limit = LogLimit::new("x", log::Level::Warn, 3, 1_000);
        let admitted: Vec<Option<u64>> = (0..5).map(|_| limit.admit(10)).collect();
        assert_eq!(admitted, [Some(0), Some(0), Some(0), None, None]);
        assert_eq!(limit.overdue(500), None, "the window has not ended");
        // The next window's first line says how many were left out.
        assert_eq!(limit.admit(1_010), Some(2));
        assert_eq!(limit.admit(1_011), Some(0));
    }

    #[test]
    fn lines_left_out_are_reported_once_the_window_ends() {
        let limit = LogLimit::new("x", log::Level::Warn, 1, 1_000);
        assert_eq!(limit.admit(0), Some(0));
        assert_eq!(limit.admit(1), None);
        assert_eq!(limit.admit(2), None);
        assert_eq!(limit.overdue(999), None);
        assert_eq!(limit.overdue(1_000), Some(2));
        assert_eq!(limit.overdue(1_001), None, "told once");
        assert_eq!(limit.admit(1_002), Some(0));
    }
}
