//! CRC32C (Castagnoli), the checksum of journal frames and snapshot
//! files, and gzip's CRC-32. Written here rather than taken from a crate:
//! the formats depend on nothing else. CRC32C folds eight bytes per step
//! through eight tables (slicing-by-8), a quarter of the work of one table
//! a byte: a journal frame is checksummed on every commit. gzip's takes a
//! byte a step through one table: it sums a scrape at most once a minute.

/// `TABLES[0]` is the classic byte table; `TABLES[k][b]` is the CRC of
/// byte `b` followed by `k` zero bytes.
const TABLES: [[u32; 256]; 8] = build_tables(0x82F6_3B78);

/// gzip's CRC-32 (ISO-HDLC, RFC 1952), reflected.
const GZIP_TABLE: [[u32; 256]; 1] = build_tables(0xEDB8_8320);

const fn build_tables<const N: usize>(poly_reflected: u32) -> [[u32; 256]; N] {
    let mut tables = [[0u32; 256]; N];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ poly_reflected
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < N {
        let mut i = 0;
        while i < 256 {
            let previous = tables[k - 1][i];
            tables[k][i] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

/// The CRC32C of `bytes`.
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_of(&[bytes])
}

/// The CRC32C of `parts` laid end to end, without joining them.
pub(crate) fn crc32c_of(parts: &[&[u8]]) -> u32 {
    let mut crc = !0u32;
    for part in parts {
        crc = update(crc, part);
    }
    !crc
}

fn update(mut crc: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let low = crc ^ u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        let high = u32::from_le_bytes([word[4], word[5], word[6], word[7]]);
        crc = TABLES[7][(low & 0xFF) as usize]
            ^ TABLES[6][((low >> 8) & 0xFF) as usize]
            ^ TABLES[5][((low >> 16) & 0xFF) as usize]
            ^ TABLES[4][(low >> 24) as usize]
            ^ TABLES[3][(high & 0xFF) as usize]
            ^ TABLES[2][((high >> 8) & 0xFF) as usize]
            ^ TABLES[1][((high >> 16) & 0xFF) as usize]
            ^ TABLES[0][(high >> 24) as usize];
    }
    bytewise(&TABLES[0], crc, words.remainder())
}

fn bytewise(table: &[u32; 256], mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = table[((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

/// gzip's CRC-32 of `bytes`.
pub(crate) fn crc32_gzip(bytes: &[u8]) -> u32 {
    !bytewise(&GZIP_TABLE[0], !0, bytes)
}

#[cfg(test)]
mod tests {
    use super::{crc32_gzip, crc32c, crc32c_of};

    #[test]
    fn known_vectors() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32_gzip(b""), 0);
        assert_eq!(crc32_gzip(b"123456789"), 0xCBF4_3926);
    }

    /// The folding by eight agrees with a byte at a time, at every length
    /// and wherever a frame's parts are split.
    #[test]
    fn eight_at_a_time_is_a_byte_at_a_time() {
        fn bytewise(bytes: &[u8]) -> u32 {
            let mut crc = !0u32;
            for &b in bytes {
                crc ^= u32::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 == 1 {
                        (crc >> 1) ^ 0x82F6_3B78
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        let data: Vec<u8> = (0..67u32).map(|i| (i * 151 + 7) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(crc32c(&data[..len]), bytewise(&data[..len]), "length {len}");
            for split in 0..=len {
                let (a, b) = data[..len].split_at(split);
                assert_eq!(crc32c_of(&[a, b]), bytewise(&data[..len]));
            }
        }
    }

    #[test]
    fn a_flipped_bit_changes_it() {
        let mut data = b"the quick brown fox".to_vec();
        let before = crc32c(&data);
        data[3] ^= 0x10;
        assert_ne!(crc32c(&data), before);
    }
}
