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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_and_absence_is_null() {
        assert_eq!(string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(opt_string(None), "null");
        assert_eq!(opt_number(Some(7)), "7");
    }
}
