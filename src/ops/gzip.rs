//! gzip members (RFC 1952) around miniz_oxide's deflate: what `/metrics`
//! answers a client that accepts gzip with, and how the status page and
//! the licence text are carried in the binary.
//!
//! The build script compiles this file too (`build.rs`), so the bytes the
//! binary carries are made by the code that reads them back. It uses
//! nothing of the crate but the CRC-32 in `store::checksum`, which the
//! build script compiles beside it.

use crate::store::checksum::crc32_gzip;

/// The fixed header written: deflate, no flags, no time, no OS named, so
/// the same text always makes the same bytes.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
const TRAILER_BYTES: usize = 8;
/// miniz_oxide's level 9 of 10: 10 costs more and wins little on text.
const LEVEL: u8 = 9;

/// `bytes` as one gzip member.
pub fn compress(bytes: &[u8]) -> Vec<u8> {
    compress_at(bytes, LEVEL)
}

/// `bytes` as one gzip member, compressed at miniz_oxide's `level`
/// (1 fastest to 10 smallest).
pub fn compress_at(bytes: &[u8], level: u8) -> Vec<u8> {
    let deflated = miniz_oxide::deflate::compress_to_vec(bytes, level);
    let mut out = Vec::with_capacity(HEADER.len() + deflated.len() + TRAILER_BYTES);
    out.extend_from_slice(&HEADER);
    out.extend_from_slice(&deflated);
    out.extend_from_slice(&crc32_gzip(bytes).to_le_bytes());
    // ISIZE is the length modulo 2^32.
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out
}

/// What a gzip member written by [`compress`] holds, at most `max_bytes`
/// of it; an error for anything else, a damaged one or a longer one.
pub fn decompress(member: &[u8], max_bytes: usize) -> Result<Vec<u8>, &'static str> {
    let body = member
        .strip_prefix(&HEADER[..4])
        .filter(|_| member.len() >= HEADER.len() + TRAILER_BYTES)
        .ok_or("not a gzip member this broker wrote")?;
    let body = &body[HEADER.len() - 4..];
    let (deflated, trailer) = body.split_at(body.len() - TRAILER_BYTES);
    let bytes = miniz_oxide::inflate::decompress_to_vec_with_limit(deflated, max_bytes)
        .map_err(|_| "a damaged gzip member, or one larger than its bound")?;
    let crc = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let size = u32::from_le_bytes([trailer[4], trailer[5], trailer[6], trailer[7]]);
    if crc != crc32_gzip(&bytes) || size != bytes.len() as u32 {
        return Err("a gzip member whose checksum or length does not match it");
    }
    Ok(bytes)
}

/// Whether an `Accept-Encoding` value takes gzip: listed (or `*`) with a
/// weight that is not zero.
pub fn accepted(accept_encoding: &str) -> bool {
    let mut gzip = None;
    let mut any = None;
    for item in accept_encoding.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        let weight = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(weight > 0.0);
        } else if coding == "*" {
            any = Some(weight > 0.0);
        }
    }
    gzip.or(any).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_compressed_comes_back_and_the_system_gzip_reads_it() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("saguin_metric{{n=\"{}\"}} {i}\n", i % 37).into_bytes())
            .collect();
        let member = compress(&text);
        assert!(member.len() < text.len() / 5, "{} bytes", member.len());
        assert_eq!(decompress(&member, text.len()).unwrap(), text);
        assert!(
            decompress(&member, text.len() - 1).is_err(),
            "over its bound"
        );
        assert_eq!(decompress(&compress(b""), 0).unwrap(), b"");
        // The same text makes the same bytes: nothing in the header varies.
        assert_eq!(compress(&text), member);
        // A reader nobody here wrote takes it.
        if let Ok(mut child) = std::process::Command::new("gzip")
            .arg("-dc")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(&member).unwrap();
            let output = child.wait_with_output().unwrap();
            assert!(output.status.success());
            assert_eq!(output.stdout, text);
        }
    }

    #[test]
    fn a_damaged_member_is_refused() {
        let mut member = compress(b"the quick brown fox jumps over the lazy dog");
        let last = member.len() - 5;
        member[last] ^= 1;
        assert!(decompress(&member, 1024).is_err(), "its checksum");
        assert!(decompress(b"plain text, not gzip", 1024).is_err());
        assert!(decompress(&HEADER, 1024).is_err(), "no trailer");
    }

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        for yes in [
            "gzip",
            "gzip, deflate, br",
            "deflate, GZIP;q=0.5",
            "*",
            "br, *;q=1",
        ] {
            assert!(accepted(yes), "{yes}");
        }
        for no in [
            "",
            "identity",
            "deflate, br",
            "gzip;q=0",
            "gzip;q=0.0, *",
            "*;q=0",
        ] {
            assert!(!accepted(no), "{no}");
        }
    }
}
