//! The MQTT data representations (spec section 1.5): reading them from a
//! byte slice without ever panicking, and writing them to any [`Sink`].

use super::{DecodeError, MAX_REMAINING_LENGTH};

pub(crate) const ENDS_EARLY: DecodeError = DecodeError::malformed("packet ends before a field");

/// Parses the variable byte integer at the start of `buf`: its value and the
/// bytes it takes, or `Ok(None)` if `buf` ends before its last byte.
///
/// Rejects a fifth byte and, per MQTT-1.5.5-1, a value not written in the
/// fewest bytes (a trailing 0x00 byte after a continuation bit).
pub(crate) fn parse_varint(buf: &[u8]) -> Result<Option<(u32, usize)>, DecodeError> {
    let mut value: u32 = 0;
    for (index, &byte) in buf.iter().take(4).enumerate() {
        value |= u32::from(byte & 0x7F) << (7 * index);
        if byte & 0x80 == 0 {
            if index > 0 && byte == 0 {
                return Err(DecodeError::malformed(
                    "variable byte integer not in its shortest form",
                ));
            }
            return Ok(Some((value, index + 1)));
        }
    }
    if buf.len() >= 4 {
        Err(DecodeError::malformed(
            "variable byte integer longer than 4 bytes",
        ))
    } else {
        Ok(None)
    }
}

/// Bytes a variable byte integer takes on the wire.
pub(crate) fn varint_len(value: u32) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// A cursor over the bytes of one packet (or of one property block).
/// Every read checks the length first, so no input can make it panic.
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { rest: buf }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if len > self.rest.len() {
            return Err(ENDS_EARLY);
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    pub(crate) fn take_rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        let (&byte, tail) = self.rest.split_first().ok_or(ENDS_EARLY)?;
        self.rest = tail;
        Ok(byte)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        let bytes = self.take(2)?.try_into().map_err(|_| ENDS_EARLY)?;
        Ok(u16::from_be_bytes(bytes))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let bytes = self.take(4)?.try_into().map_err(|_| ENDS_EARLY)?;
        Ok(u32::from_be_bytes(bytes))
    }

    pub(crate) fn varint(&mut self) -> Result<u32, DecodeError> {
        let (value, len) = parse_varint(self.rest)?.ok_or(ENDS_EARLY)?;
        self.take(len)?;
        Ok(value)
    }

    /// Binary Data: a two-byte length, then that many bytes.
    pub(crate) fn binary(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u16()?;
        self.take(usize::from(len))
    }

    /// UTF-8 Encoded String: well-formed UTF-8 (which excludes surrogates
    /// and overlong forms) without U+0000 (MQTT-1.5.4-1, -2).
    pub(crate) fn utf8(&mut self) -> Result<&'a str, DecodeError> {
        let text = std::str::from_utf8(self.binary()?)
            .map_err(|_| DecodeError::malformed("string is not well-formed UTF-8"))?;
        if text.contains('\0') {
            return Err(DecodeError::malformed("string contains U+0000"));
        }
        Ok(text)
    }

    /// Fails if any byte is left over after the last field.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::malformed("bytes left after the last field"))
        }
    }
}

/// Where encoded bytes go: a buffer, or a [`Counter`] that only measures,
/// so that one writer serves both `encode` and `encoded_len`.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]);

    fn put_u8(&mut self, byte: u8) {
        self.put(&[byte]);
    }

    fn put_u16(&mut self, value: u16) {
        self.put(&value.to_be_bytes());
    }

    fn put_u32(&mut self, value: u32) {
        self.put(&value.to_be_bytes());
    }

    /// Values past the four-byte maximum are a caller bug; they are clamped
    /// so that the framing stays readable.
    fn put_varint(&mut self, value: u32) {
        debug_assert!(value <= MAX_REMAINING_LENGTH, "varint too large: {value}");
        let mut rest = value.min(MAX_REMAINING_LENGTH);
        loop {
            let low_bits = (rest & 0x7F) as u8;
            rest >>= 7;
            if rest == 0 {
                self.put_u8(low_bits);
                return;
            }
            self.put_u8(low_bits | 0x80);
        }
    }

    /// Binary Data longer than 65,535 bytes is a caller bug; it is cut so
    /// that the framing stays readable.
    fn put_binary(&mut self, bytes: &[u8]) {
        debug_assert!(bytes.len() <= usize::from(u16::MAX), "binary too long");
        let len = bytes.len().min(usize::from(u16::MAX));
        self.put_u16(len as u16);
        self.put(&bytes[..len]);
    }

    /// Like `put_binary`, but a cut falls on a character boundary so the
    /// result stays well-formed UTF-8.
    fn put_str(&mut self, text: &str) {
        debug_assert!(text.len() <= usize::from(u16::MAX), "string too long");
        self.put_binary(&text.as_bytes()[..fitting_str_len(text)]);
    }
}

/// The longest prefix of `text` that fits a two-byte length and ends on a
/// character boundary.
fn fitting_str_len(text: &str) -> usize {
    let mut len = text.len().min(usize::from(u16::MAX));
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    len
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A sink that counts bytes instead of storing them.
#[derive(Default)]
pub(crate) struct Counter {
    pub(crate) len: usize,
}

impl Sink for Counter {
    fn put(&mut self, bytes: &[u8]) {
        self.len += bytes.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_boundaries_round_trip() {
        for value in [
            0,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            MAX_REMAINING_LENGTH,
        ] {
            let mut out = Vec::new();
            out.put_varint(value);
            assert_eq!(out.len(), varint_len(value), "{value}");
            assert_eq!(parse_varint(&out), Ok(Some((value, out.len()))));
        }
    }

    #[test]
    fn varint_rejects_a_fifth_byte_and_waits_for_more() {
        assert!(parse_varint(&[0xFF, 0xFF, 0xFF, 0xFF]).is_err());
        assert_eq!(parse_varint(&[0xFF, 0xFF, 0xFF]), Ok(None));
        assert_eq!(parse_varint(&[]), Ok(None));
        assert!(parse_varint(&[0x80, 0x00]).is_err());
    }

    #[test]
    fn reader_never_reads_past_the_end() {
        let mut reader = Reader::new(&[0x00, 0x05, b'a']);
        assert_eq!(reader.utf8(), Err(ENDS_EARLY));
        let mut reader = Reader::new(&[0x01]);
        assert_eq!(reader.u16(), Err(ENDS_EARLY));
    }

    #[test]
    fn long_strings_are_cut_on_a_char_boundary() {
        // 'é' is two bytes, so 65,535 falls mid-character.
        let text = "é".repeat(32_768);
        assert_eq!(fitting_str_len(&text), 65_534);
        assert_eq!(fitting_str_len("abc"), 3);
    }
}
