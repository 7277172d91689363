//! The few JSON values the tools write by hand: strings (the operations
//! listener's), `null` where a column would show `-`, and times.

use crate::ops::json::civil_from_days;
pub use crate::ops::json::string;

/// A string, or `null` for none.
pub fn opt_string(value: Option<&str>) -> String {
    value.map_or_else(|| "null".to_string(), string)
}

/// A number, or `null` for none.
pub fn opt_number(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_string(), |n| n.to_string())
}

/// Unix milliseconds as a UTC time to the millisecond, `2026-12-01T10:54:37.123Z`.
pub fn utc(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, in_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_and_absence_is_null() {
        assert_eq!(string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(opt_string(None), "null");
        assert_eq!(opt_number(Some(7)), "7");
    }

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(utc(1_796_122_477_123), "2026-12-01T10:54:37.123Z");
    }
}
