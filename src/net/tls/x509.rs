//! The three things the broker reads from a certificate itself: when it
//! stops being valid, its subject's Common Name, and its DNS names.
//!
//! rustls and webpki verify certificates but do not hand these out, and a
//! general X.509 parser would cost more than the rest of TLS in binary
//! size, so this walks the DER of the few fields needed. It reads only
//! certificates already parsed by rustls (the broker's own, or a client's
//! that passed verification), and it answers `None` rather than panicking
//! on anything it does not understand.

/// What a certificate says about itself, as far as the broker asks.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// The end of its validity, in seconds since the Unix epoch.
    pub not_after_unix_s: Option<i64>,
    /// The first Common Name of its subject, exactly as written.
    pub common_name: Option<String>,
    /// Its subject alternative DNS names, in order.
    pub dns_names: Vec<String>,
}

impl Facts {
    /// The name a client certificate gives its holder: the Common Name, or
    /// the first DNS name when there is no Common Name.
    pub fn name(&self) -> Option<&str> {
        self.common_name
            .as_deref()
            .or_else(|| self.dns_names.first().map(String::as_str))
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[0] EXPLICIT Version`, `[3] EXPLICIT Extensions` in a TBSCertificate.
const VERSION_TAG: u8 = 0xa0;
const EXTENSIONS_TAG: u8 = 0xa3;
/// `dNSName [2] IA5String` in a GeneralName.
const DNS_NAME_TAG: u8 = 0x82;
/// 2.5.4.3, id-at-commonName.
const COMMON_NAME_OID: &[u8] = &[0x55, 0x04, 0x03];
/// 2.5.29.17, id-ce-subjectAltName.
const SUBJECT_ALT_NAME_OID: &[u8] = &[0x55, 0x1d, 0x11];

/// Reads what it can of a DER certificate.
pub fn read(der: &[u8]) -> Facts {
    read_certificate(der).unwrap_or_default()
}

fn read_certificate(der: &[u8]) -> Option<Facts> {
    let mut outer = Reader(der);
    let certificate = outer.expect(SEQUENCE)?;
    let mut tbs = Reader(Reader(certificate).expect(SEQUENCE)?);
    if tbs.peek_tag() == Some(VERSION_TAG) {
        tbs.any()?;
    }
    let _serial = tbs.any()?;
    let _signature_algorithm = tbs.expect(SEQUENCE)?;
    let _issuer = tbs.expect(SEQUENCE)?;
    let mut validity = Reader(tbs.expect(SEQUENCE)?);
    let _not_before = validity.any()?;
    let (time_tag, time) = validity.any()?;
    let subject = tbs.expect(SEQUENCE)?;
    let _public_key = tbs.expect(SEQUENCE)?;
    let mut dns_names = Vec::new();
    while let Some((tag, body)) = tbs.any() {
        if tag == EXTENSIONS_TAG {
            dns_names = subject_alt_dns_names(body).unwrap_or_default();
        }
    }
    Some(Facts {
        not_after_unix_s: unix_time(time_tag, time),
        common_name: common_name(subject),
        dns_names,
    })
}

/// The first Common Name among a Name's relative distinguished names.
fn common_name(name: &[u8]) -> Option<String> {
    let mut rdns = Reader(name);
    while let Some(rdn) = rdns.expect(SET) {
        let mut attributes = Reader(rdn);
        while let Some(attribute) = attributes.expect(SEQUENCE) {
            let mut attribute = Reader(attribute);
            if attribute.expect(OID)? == COMMON_NAME_OID {
                let (tag, value) = attribute.any()?;
                return directory_string(tag, value);
            }
        }
    }
    None
}

/// A DirectoryString as text; `None` for a form that is not valid.
fn directory_string(tag: u8, value: &[u8]) -> Option<String> {
    match tag {
        // UTF8String, PrintableString, IA5String.
        0x0c | 0x13 | 0x16 => String::from_utf8(value.to_vec()).ok(),
        // TeletexString, read as Latin-1 as most software does.
        0x14 => Some(value.iter().map(|&b| char::from(b)).collect()),
        // BMPString: UTF-16, big-endian.
        0x1e if value.len().is_multiple_of(2) => {
            let units = value.chunks(2).map(|p| u16::from_be_bytes([p[0], p[1]]));
            char::decode_utf16(units)
                .collect::<Result<String, _>>()
                .ok()
        }
        _ => None,
    }
}

fn subject_alt_dns_names(extensions_explicit: &[u8]) -> Option<Vec<String>> {
    let mut extensions = Reader(Reader(extensions_explicit).expect(SEQUENCE)?);
    while let Some(extension) = extensions.expect(SEQUENCE) {
        let mut extension = Reader(extension);
        if extension.expect(OID)? != SUBJECT_ALT_NAME_OID {
            continue;
        }
        // `critical BOOLEAN DEFAULT FALSE` may stand before the value.
        let mut value = extension.any()?;
        if value.0 != OCTET_STRING {
            value = extension.any()?;
        }
        let mut names = Reader(Reader(value.1).expect(SEQUENCE)?);
        let mut dns_names = Vec::new();
        while let Some((tag, name)) = names.any() {
            if tag == DNS_NAME_TAG {
                dns_names.push(String::from_utf8(name.to_vec()).ok()?);
            }
        }
        return Some(dns_names);
    }
    Some(Vec::new())
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`), the two forms RFC 5280 allows, as Unix seconds.
fn unix_time(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy = number(0..2)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, 2)
        }
        (GENERALIZED_TIME, 14) => (number(0..4)?, 4),
        _ => return None,
    };
    let month = number(rest..rest + 2)?;
    let day = number(rest + 2..rest + 4)?;
    let hour = number(rest + 4..rest + 6)?;
    let minute = number(rest + 6..rest + 8)?;
    let second = number(rest + 8..rest + 10)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let shifted_month = (month + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS UTC`, for log lines.
pub fn show_unix_time(unix_s: i64) -> String {
    let days = unix_s.div_euclid(86_400);
    let second_of_day = unix_s.rem_euclid(86_400);
    // The inverse of days_from_civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        second_of_day / 3_600,
        second_of_day % 3_600 / 60,
        second_of_day % 60
    )
}

/// A cursor over DER elements with single-byte tags.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn peek_tag(&self) -> Option<u8> {
        self.0.first().copied()
    }

    /// The next element's tag and contents.
    fn any(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        // A multi-byte tag is not one this reader needs.
        if tag & 0x1f == 0x1f {
            return None;
        }
        let (&first, rest) = rest.split_first()?;
        let (length, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let length = rest[..count]
                .iter()
                .fold(0usize, |n, &b| (n << 8) | usize::from(b));
            (length, &rest[count..])
        };
        if rest.len() < length {
            return None;
        }
        let (body, after) = rest.split_at(length);
        self.0 = after;
        Some((tag, body))
    }

    /// The next element's contents, if its tag is `tag`.
    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        match self.any()? {
            (found, body) if found == tag => Some(body),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_and_show_as_utc() {
        assert_eq!(unix_time(UTC_TIME, b"700101000000Z"), Some(0));
        assert_eq!(unix_time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(
            unix_time(GENERALIZED_TIME, b"20380119031408Z"),
            Some(2_147_483_648)
        );
        assert_eq!(unix_time(UTC_TIME, b"700101000000"), None);
        assert_eq!(unix_time(UTC_TIME, b"701301000000Z"), None);
        assert_eq!(show_unix_time(2_147_483_648), "2038-01-19 03:14:08 UTC");
        assert_eq!(show_unix_time(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn truncated_or_foreign_input_reads_as_nothing() {
        assert_eq!(read(&[]), Facts::default());
        assert_eq!(
            read(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            Facts::default()
        );
        assert_eq!(read(&[0x30, 0x03, 0x30, 0x01]), Facts::default());
    }

    #[test]
    fn a_bmp_common_name_is_decoded() {
        assert_eq!(
            directory_string(0x1e, &[0x00, 0x64, 0x00, 0xe9]),
            Some("dé".to_string())
        );
        assert_eq!(directory_string(0x1e, &[0x00]), None);
    }
}
