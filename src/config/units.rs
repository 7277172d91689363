//! The written forms a value takes besides plain numbers: durations
//! (`30s`, `250ms`, `7d`), sizes (`1MiB`, `512`) and a flash device's
//! rated endurance (`30TBW`, `3000 cycles of 32GiB`).
//!
//! Both parsers are pure and return a reason in words when they refuse, so
//! the caller can put the key path and the written value in front of it.
//! All arithmetic is checked: a value that does not fit is refused, never
//! wrapped.

/// Milliseconds in one second.
pub const MS_PER_S: u64 = 1_000;

const DURATION_UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

const SIZE_UNITS: [(&str, u64); 4] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
];

/// Reads a duration written as one whole number followed by one unit
/// (`ms`, `s`, `m`, `h` or `d`) and returns it in milliseconds.
///
/// `90m` is accepted; `1h30m`, `1.5h`, `90 m`, `90` and `-5s` are not, and
/// the error says what to write instead.
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    const FORM: &str =
        "a duration is a whole number and one unit from ms, s, m, h and d, such as 30s";
    if text.is_empty() {
        return Err(FORM.to_string());
    }
    if text.chars().any(char::is_whitespace) {
        let joined: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        return Err(if parse_duration_ms(&joined).is_ok() {
            format!("a duration holds no spaces: write {joined}")
        } else {
            format!("a duration holds no spaces; {FORM}")
        });
    }
    if let Some(rest) = text.strip_prefix('-') {
        return Err(format!(
            "a duration cannot be negative; did you mean {rest}?"
        ));
    }
    if text.starts_with('+') {
        return Err(format!("{FORM}, without a sign"));
    }
    let (digits, rest) = split_number(text);
    if digits.is_empty() {
        return Err(FORM.to_string());
    }
    if rest.starts_with('.') || rest.starts_with(',') {
        return Err(match fraction_hint(text, &DURATION_UNITS) {
            Some(instead) => {
                format!("a duration is a whole number: write {instead} rather than {text}")
            }
            None => "a duration is a whole number: write it in a smaller unit, such as 90m rather than 1.5h"
                .to_string(),
        });
    }
    if rest.is_empty() {
        return Err(format!(
            "a duration needs a unit: write {digits}s for seconds (units are ms, s, m, h and d)"
        ));
    }
    let (unit, after) = split_unit(rest);
    let Some(scale) = lookup(&DURATION_UNITS, unit) else {
        return Err(format!(
            "{unit:?} is not a unit; a duration takes one of ms, s, m, h and d, such as 30s"
        ));
    };
    if !after.is_empty() {
        return Err(compound_duration_hint(text));
    }
    let number = parse_whole(digits).ok_or_else(too_long_duration)?;
    number.checked_mul(scale).ok_or_else(too_long_duration)
}

fn too_long_duration() -> String {
    "that duration is too long to hold".to_string()
}

/// The advice for `1h30m`: write the total in the smallest unit used.
fn compound_duration_hint(text: &str) -> String {
    let general = "a duration is one number and one unit, such as 90m rather than 1h30m";
    let mut rest = text;
    let mut total_ms: u64 = 0;
    let mut smallest: Option<(&str, u64)> = None;
    while !rest.is_empty() {
        let (digits, after_digits) = split_number(rest);
        let (unit, after_unit) = split_unit(after_digits);
        let (Some(number), Some(scale)) = (parse_whole(digits), lookup(&DURATION_UNITS, unit))
        else {
            return general.to_string();
        };
        let Some(sum) = number
            .checked_mul(scale)
            .and_then(|part| total_ms.checked_add(part))
        else {
            return general.to_string();
        };
        total_ms = sum;
        match smallest {
            Some((_, s)) if s <= scale => {}
            _ => smallest = Some((unit, scale)),
        }
        rest = after_unit;
    }
    match smallest {
        Some((unit, scale)) => format!(
            "a duration is one number and one unit: write {}{unit} rather than {text}",
            total_ms / scale
        ),
        None => general.to_string(),
    }
}

/// Reads a size written as a whole number of bytes, optionally followed by
/// one unit from `B`, `KiB`, `MiB` and `GiB`, and returns it in bytes.
///
/// Decimal units (`KB`, `MB`, `GB`) are refused with a hint to write the
/// binary one, because the two differ by enough to matter for a memory
/// bound and guessing which was meant would be wrong half the time.
pub fn parse_size_bytes(text: &str) -> Result<u64, String> {
    const FORM: &str =
        "a size is a whole number of bytes, optionally with one unit from B, KiB, MiB and GiB, such as 512KiB";
    if text.is_empty() {
        return Err(FORM.to_string());
    }
    if text.chars().any(char::is_whitespace) {
        let joined: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        return Err(if parse_size_bytes(&joined).is_ok() {
            format!("a size holds no spaces: write {joined}")
        } else {
            format!("a size holds no spaces; {FORM}")
        });
    }
    if text.starts_with('-') {
        return Err("a size cannot be negative".to_string());
    }
    if text.starts_with('+') {
        return Err(format!("{FORM}, without a sign"));
    }
    let (digits, rest) = split_number(text);
    if digits.is_empty() {
        return Err(FORM.to_string());
    }
    if rest.starts_with('.') || rest.starts_with(',') {
        return Err(match fraction_hint(text, &SIZE_UNITS) {
            Some(instead) => format!("a size is a whole number: write {instead} rather than {text}"),
            None => "a size is a whole number: write it in a smaller unit, such as 1536KiB rather than 1.5MiB"
                .to_string(),
        });
    }
    let scale = if rest.is_empty() {
        1
    } else if let Some(scale) = lookup(&SIZE_UNITS, rest) {
        scale
    } else {
        return Err(size_unit_hint(digits, rest));
    };
    let too_large = || "that size is too large to hold".to_string();
    let number = parse_whole(digits).ok_or_else(too_large)?;
    number.checked_mul(scale).ok_or_else(too_large)
}

/// The advice for a unit the size form does not take.
fn size_unit_hint(digits: &str, unit: &str) -> String {
    let binary = match unit.to_ascii_lowercase().as_str() {
        "k" | "kb" | "kib" => Some("KiB"),
        "m" | "mb" | "mib" => Some("MiB"),
        "g" | "gb" | "gib" => Some("GiB"),
        "b" | "byte" | "bytes" => Some("B"),
        _ => None,
    };
    match binary {
        Some(right) if unit.eq_ignore_ascii_case(right) => {
            format!("the unit is written {right}: write {digits}{right}")
        }
        Some("B") => format!("write {digits}B, or the number alone, for bytes"),
        Some(right) => format!(
            "{unit:?} is not accepted because decimal and binary units differ; sizes are binary: write {digits}{right}"
        ),
        None if unit.eq_ignore_ascii_case("tib") || unit.eq_ignore_ascii_case("tb") => {
            "the largest unit is GiB: write the size in GiB".to_string()
        }
        None => format!("{unit:?} is not a unit; a size takes one of B, KiB, MiB and GiB"),
    }
}

/// Writes a byte count the way an operator would: `1MiB` where a binary
/// unit divides it exactly, otherwise a plain count of bytes.
pub fn format_size(bytes: u64) -> String {
    for (unit, scale) in SIZE_UNITS.iter().rev() {
        if *scale > 1 && bytes >= *scale && bytes.is_multiple_of(*scale) {
            return format!("{}{unit} ({bytes} bytes)", bytes / scale);
        }
    }
    if bytes == 1 {
        "1 byte".to_string()
    } else {
        format!("{bytes} bytes")
    }
}

/// Writes a number of seconds in the largest unit that divides it exactly.
pub fn format_seconds(seconds: u64) -> String {
    for (unit, scale_ms) in DURATION_UNITS.iter().rev() {
        let scale = scale_ms / MS_PER_S;
        if scale >= 1 && seconds >= scale && seconds.is_multiple_of(scale) {
            return format!("{}{unit}", seconds / scale);
        }
    }
    format!("{seconds}s")
}

/// For `2.5s` or `1.5MiB`: the same amount as a whole number of the
/// largest unit that holds it exactly (`2500ms`, `1536KiB`), if any does.
fn fraction_hint(text: &str, table: &[(&str, u64)]) -> Option<String> {
    let (whole, rest) = split_number(text);
    let (fraction, unit) = split_number(rest.strip_prefix('.')?);
    let scale = lookup(table, unit)?;
    let whole = if whole.is_empty() {
        0
    } else {
        parse_whole(whole)?
    };
    let (numerator, denominator) = if fraction.is_empty() {
        (0, 1)
    } else {
        let places = u32::try_from(fraction.len()).ok()?;
        (parse_whole(fraction)?, 10u64.checked_pow(places)?)
    };
    let part = numerator.checked_mul(scale)?;
    if part % denominator != 0 {
        return None;
    }
    let total = whole.checked_mul(scale)?.checked_add(part / denominator)?;
    if total == 0 {
        return None;
    }
    let (name, unit_scale) = table
        .iter()
        .rev()
        .find(|(_, s)| *s <= scale && total % s == 0)?;
    Some(format!("{}{name}", total / unit_scale))
}

/// Splits leading ASCII digits from the rest.
fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Terabytes written, and their kin, as flash makers rate endurance: in
/// decimal units, as their data sheets write them.
const WRITTEN_UNITS: [(&str, u64); 3] = [
    ("GBW", 1_000_000_000),
    ("TBW", 1_000_000_000_000),
    ("PBW", 1_000_000_000_000_000),
];

/// The accepted forms of a device's endurance, for every refusal.
pub const ENDURANCE_FORMS: &str = "write the device's rated endurance as the bytes it may be written in decimal units, such as 30TBW (also GBW and PBW, a fraction allowed: 1.5PBW), or as program/erase cycles of its capacity, such as 3000 cycles of 32GiB";

/// Reads a flash device's rated endurance, in bytes it may be written
/// before it wears out: `<n>TBW` (or `GBW`, `PBW`; a decimal fraction is
/// taken, `1.5PBW`), or `<cycles> cycles of <size>`, the size as
/// [`parse_size_bytes`] reads it.
pub fn parse_endurance_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let too_large = || "that endurance is too large to hold in bytes".to_string();
    if let Some((cycles, capacity)) = text.split_once(" cycles of ") {
        let cycles = parse_whole(cycles.trim())
            .filter(|_| cycles.trim().bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| {
                format!(
                    "{:?} is not a whole number of cycles; {ENDURANCE_FORMS}",
                    cycles.trim()
                )
            })?;
        let capacity = parse_size_bytes(capacity.trim())?;
        let bytes = cycles.checked_mul(capacity).ok_or_else(too_large)?;
        return positive(bytes);
    }
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let unit_at = compact
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| ENDURANCE_FORMS.to_string())?;
    let (number, unit) = compact.split_at(unit_at);
    let Some(scale) = WRITTEN_UNITS
        .iter()
        .find(|(u, _)| u.eq_ignore_ascii_case(unit))
        .map(|(_, scale)| *scale)
    else {
        return Err(format!(
            "{unit:?} is not an endurance unit; {ENDURANCE_FORMS}"
        ));
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits_only(whole) || !digits_only(fraction) || fraction.len() > 9 {
        return Err(format!(
            "{number:?} is not a number of {unit}; {ENDURANCE_FORMS}"
        ));
    }
    let whole = parse_whole(whole).ok_or_else(too_large)?;
    let mut bytes = whole.checked_mul(scale).ok_or_else(too_large)?;
    let mut place = scale;
    for digit in fraction.bytes() {
        place /= 10;
        bytes = bytes
            .checked_add(u64::from(digit - b'0') * place)
            .ok_or_else(too_large)?;
    }
    positive(bytes)
}

fn positive(bytes: u64) -> Result<u64, String> {
    if bytes == 0 {
        return Err(format!(
            "a device rated to be written nothing wears out at once; {ENDURANCE_FORMS}"
        ));
    }
    Ok(bytes)
}

/// Splits a leading run of letters from the rest.
fn split_unit(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_alphabetic())
        .unwrap_or(text.len());
    text.split_at(end)
}

fn lookup(table: &[(&str, u64)], unit: &str) -> Option<u64> {
    table
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, scale)| *scale)
}

/// Parses ASCII digits as a u64, refusing anything that does not fit.
fn parse_whole(digits: &str) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.bytes().try_fold(0u64, |acc, b| {
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endurance_is_read_as_bytes_written_or_as_cycles_of_a_capacity() {
        let tb = 1_000_000_000_000u64;
        assert_eq!(parse_endurance_bytes("30TBW"), Ok(30 * tb));
        assert_eq!(parse_endurance_bytes("30 TBW"), Ok(30 * tb));
        assert_eq!(parse_endurance_bytes("1.5PBW"), Ok(1_500 * tb));
        assert_eq!(parse_endurance_bytes("600GBW"), Ok(600_000_000_000));
        assert_eq!(parse_endurance_bytes("0.25tbw"), Ok(tb / 4));
        assert_eq!(
            parse_endurance_bytes("3000 cycles of 32GiB"),
            Ok(3000 * 32 * (1 << 30))
        );
        for bad in [
            "",
            "30",
            "30TB",
            "30TiBW",
            "-3TBW",
            "1.2.3TBW",
            ".5TBW",
            "0TBW",
            "x cycles of 32GiB",
            "3000 cycles of 32GB",
            "0 cycles of 8GiB",
            "99999999999 PBW",
        ] {
            let why = parse_endurance_bytes(bad).expect_err(bad);
            assert!(!why.is_empty(), "{bad}");
        }
        assert!(parse_endurance_bytes("3000 cycles of 32GB")
            .unwrap_err()
            .contains("GiB"));
        assert!(parse_endurance_bytes("30TB").unwrap_err().contains("30TBW"));
    }

    #[test]
    fn durations_in_every_unit() {
        assert_eq!(parse_duration_ms("250ms"), Ok(250));
        assert_eq!(parse_duration_ms("5s"), Ok(5_000));
        assert_eq!(parse_duration_ms("90m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("2h"), Ok(7_200_000));
        assert_eq!(parse_duration_ms("30d"), Ok(2_592_000_000));
        assert_eq!(parse_duration_ms("0s"), Ok(0));
        assert_eq!(parse_duration_ms("010s"), Ok(10_000));
    }

    #[test]
    fn compound_durations_are_refused_with_the_total() {
        let e = parse_duration_ms("1h30m").unwrap_err();
        assert!(e.contains("write 90m rather than 1h30m"), "{e}");
        let e = parse_duration_ms("1m500ms").unwrap_err();
        assert!(e.contains("write 60500ms"), "{e}");
    }

    #[test]
    fn malformed_durations_are_refused_with_a_reason() {
        let cases = [
            ("", "whole number and one unit"),
            ("30", "needs a unit: write 30s"),
            ("1.5h", "whole number: write 90m rather than 1.5h"),
            ("2.5s", "write 2500ms rather than 2.5s"),
            ("0.25s", "write 250ms"),
            ("1.0001s", "smaller unit"),
            ("30 days", "no spaces; a duration is"),
            ("90 m", "no spaces: write 90m"),
            ("-5s", "cannot be negative"),
            ("+5s", "without a sign"),
            ("5sec", "\"sec\" is not a unit"),
            ("5S", "\"S\" is not a unit"),
            ("1w", "\"w\" is not a unit"),
            ("s", "whole number and one unit"),
            ("99999999999999999999s", "too long"),
            ("999999999999999999d", "too long"),
        ];
        for (text, expected) in cases {
            let e = parse_duration_ms(text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }

    #[test]
    fn sizes_in_every_unit() {
        assert_eq!(parse_size_bytes("512"), Ok(512));
        assert_eq!(parse_size_bytes("512B"), Ok(512));
        assert_eq!(parse_size_bytes("8KiB"), Ok(8_192));
        assert_eq!(parse_size_bytes("1MiB"), Ok(1_048_576));
        assert_eq!(parse_size_bytes("2GiB"), Ok(2_147_483_648));
        assert_eq!(parse_size_bytes("0"), Ok(0));
    }

    #[test]
    fn decimal_size_units_are_refused_with_the_binary_one() {
        let e = parse_size_bytes("100KB").unwrap_err();
        assert!(e.contains("write 100KiB"), "{e}");
        let e = parse_size_bytes("1MB").unwrap_err();
        assert!(e.contains("write 1MiB"), "{e}");
        let e = parse_size_bytes("2G").unwrap_err();
        assert!(e.contains("write 2GiB"), "{e}");
        let e = parse_size_bytes("4mib").unwrap_err();
        assert!(e.contains("written MiB: write 4MiB"), "{e}");
    }

    #[test]
    fn malformed_sizes_are_refused_with_a_reason() {
        let cases = [
            ("", "whole number of bytes"),
            ("1.5MiB", "whole number: write 1536KiB rather than 1.5MiB"),
            ("0.5KiB", "write 512B"),
            ("1.3B", "smaller unit"),
            ("1 MiB", "no spaces: write 1MiB"),
            ("-1", "cannot be negative"),
            ("1TiB", "largest unit is GiB"),
            ("3 bananas", "no spaces; a size is"),
            ("3bananas", "\"bananas\" is not a unit"),
            ("MiB", "whole number of bytes"),
            ("99999999999GiB", "too large"),
        ];
        for (text, expected) in cases {
            let e = parse_size_bytes(text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
    }

    #[test]
    fn sizes_and_seconds_are_written_back_readably() {
        assert_eq!(format_size(1_048_576), "1MiB (1048576 bytes)");
        assert_eq!(format_size(102_400), "100KiB (102400 bytes)");
        assert_eq!(format_size(1_000), "1000 bytes");
        assert_eq!(format_size(1), "1 byte");
        assert_eq!(format_seconds(65_535), "65535s");
        assert_eq!(format_seconds(2_592_000), "30d");
        assert_eq!(format_seconds(5_400), "90m");
    }
}
