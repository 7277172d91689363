//! A JSON string literal, for the few bodies this listener writes by hand.

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

/// Unix milliseconds as an RFC 3339 UTC timestamp in whole seconds, in
/// quotes; `null` for none.
pub fn timestamp(unix_ms: Option<u64>) -> String {
    let Some(unix_ms) = unix_ms else {
        return "null".to_string();
    };
    let seconds = unix_ms / 1000;
    let (days, in_day) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "\"{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z\"",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01, as (year, month,
/// day) (Howard Hinnant's days-to-civil algorithm).
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc_3339_in_utc() {
        assert_eq!(super::timestamp(Some(0)), "\"1970-01-01T00:00:00Z\"");
        // 2026-08-28T16:27:27Z
        assert_eq!(
            super::timestamp(Some(1_787_934_447_000)),
            "\"2026-08-28T16:27:27Z\""
        );
        assert_eq!(
            super::timestamp(Some(951_782_400_999)),
            "\"2000-02-29T00:00:00Z\""
        );
        assert_eq!(super::timestamp(None), "null");
    }

    #[test]
    fn quotes_backslashes_and_controls_are_escaped() {
        assert_eq!(super::string("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
    }
}
