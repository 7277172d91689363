//! The few JSON values the tools write by hand: strings (the operations
//! listener's), `null` where a column would show `-`, and times.

pub use crate::ops::json::string;
use crate::ops::json::timestamp;

/// A string, or `null` for none.
pub fn opt_string(value: Option<&str>) -> String {
    value.map_or_else(|| "null".to_string(), string)
}

/// A number, or `null` for none.
pub fn opt_number(value: Option<u64>) -> String {
    value.map_or_else(|| "null".to_string(), |n| n.to_string())
}

/// Unix milliseconds as a UTC time to the millisecond, `2026-12-01T10:54:37.123Z`:
/// the operations listener's timestamp with the milliseconds added.
pub fn utc(unix_ms: u64) -> String {
    let seconds = timestamp(Some(unix_ms));
    let bare = seconds.trim_matches('"').trim_end_matches('Z');
    format!("{bare}.{:03}Z", unix_ms % 1000)
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
