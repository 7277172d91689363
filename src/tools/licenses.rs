//! `saguin --licenses`: the licences of every crate compiled into this
//! binary, with the texts they ship. `packaging/licenses.py` writes them
//! from Cargo.lock and `build.rs` carries them here gzipped, so the
//! answer needs no file beside the binary and no configuration.

/// The text as carried.
pub const GZIPPED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/licenses.txt.gz"));

/// The most the text inflates to; it is a few hundred KiB.
const MAX_TEXT_BYTES: usize = 4 * 1024 * 1024;

/// The licences, as `packaging/licenses.txt` holds them.
pub fn text() -> Result<String, String> {
    let bytes = crate::ops::gzip::decompress(GZIPPED, MAX_TEXT_BYTES)
        .map_err(|why| format!("the licences this binary carries cannot be read: {why}"))?;
    String::from_utf8(bytes).map_err(|_| "the licences this binary carries are not UTF-8".into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_text_carried_is_the_file_written() {
        let file = include_str!("../../packaging/licenses.txt");
        assert_eq!(super::text().unwrap(), file);
        assert!(super::GZIPPED.len() < file.len() / 4);
    }
}
