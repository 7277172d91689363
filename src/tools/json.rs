//! The few JSON values the tools write by hand: strings, and `null` where
//! a column would show `-`.

/// `value` as a JSON string, quotes included.
pub fn string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

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
    let (year, month, day) = date_of(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60,
        unix_ms % 1000
    )
}

/// The Gregorian date `days` after 1970-01-01: counted in 400-year eras
/// of 146,097 days, each starting on 1 March so that a leap day ends a year.
fn date_of(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468;
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
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
