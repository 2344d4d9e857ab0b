//! CRC-64/Jones as Redis computes it (`crc64.c`): reflected input and output, polynomial
//! `0xad93d23594c935a9`, initial value 0, no final xor. The check value (the CRC of
//! `"123456789"`) is `0xe9c6d914c4b8d9ca`. A DUMP payload ends with the CRC of everything
//! before it, little-endian.

/// The polynomial in its usual (most significant bit first) spelling.
const POLY: u64 = 0xad93_d235_94c9_35a9;

/// One table row per byte value, for the reflected (least significant bit first) algorithm.
const TABLE: [u64; 256] = table();

const fn table() -> [u64; 256] {
    let reflected = POLY.reverse_bits();
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ reflected
            } else {
                c >> 1
            };
            bit += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

/// The CRC of `data`, continuing from `crc` (0 to start).
pub fn crc64(crc: u64, data: &[u8]) -> u64 {
    data.iter().fold(crc, |c, &b| {
        TABLE[((c ^ u64::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::crc64;

    #[test]
    fn redis_check_value() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(0, b""), 0);
        // Continuing a CRC over a split input gives the CRC of the whole.
        assert_eq!(crc64(crc64(0, b"1234"), b"56789"), 0xe9c6_d914_c4b8_d9ca);
    }
}
