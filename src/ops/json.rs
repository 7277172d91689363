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

#[cfg(test)]
mod tests {
    #[test]
    fn quotes_backslashes_and_controls_are_escaped() {
        assert_eq!(super::string("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\u0001\"");
    }
}
