//! LZF decompression, as Redis's `lzf_d.c` reads what its `lzf_c.c` writes (an RDB string
//! of encoding `RDB_ENC_LZF`).
//!
//! The stream is a sequence of runs, each starting with a control byte `c`:
//!
//! - `c < 32`: a literal run, the next `c + 1` bytes copied as they are;
//! - otherwise a back reference: length `c >> 5` (if 7, plus the next byte), then copy
//!   `length + 2` bytes starting `((c & 31) << 8) + next byte + 1` bytes back in the output
//!   (the copy may overlap what it writes, repeating a pattern).
//!
//! The input is hostile: a run past the input's end, a reference before the output's start,
//! or output beyond the length the payload announced are errors, never a panic; the output
//! is allocated once, at the announced length, which the caller has bounded.

/// Why a stream does not decompress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadLzf;

/// Decompresses `input` into exactly `len` bytes (the length the payload announced; the
/// caller bounds it before calling). Fewer or more bytes than `len` is an error, as in
/// Redis (`lzf_decompress(...) != len`).
pub fn decompress(input: &[u8], len: usize) -> Result<Vec<u8>, BadLzf> {
    let mut out: Vec<u8> = Vec::with_capacity(len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = input.get(i..i + run).ok_or(BadLzf)?;
            if out.len() + run > len {
                return Err(BadLzf);
            }
            out.extend_from_slice(lit);
            i += run;
        } else {
            let mut run = ctrl >> 5;
            if run == 7 {
                run += usize::from(*input.get(i).ok_or(BadLzf)?);
                i += 1;
            }
            run += 2;
            let low = usize::from(*input.get(i).ok_or(BadLzf)?);
            i += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            let from = out.len().checked_sub(back).ok_or(BadLzf)?;
            if out.len() + run > len {
                return Err(BadLzf);
            }
            // Byte by byte: the source may overlap the bytes being written.
            for k in 0..run {
                let b = out[from + k];
                out.push(b);
            }
        }
    }
    if out.len() != len {
        return Err(BadLzf);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_overlapping_reference() {
        // "abc" then a reference 3 back of length 6: "abcabcabc".
        let input = [2, b'a', b'b', b'c', (4 << 5), 2];
        assert_eq!(decompress(&input, 9).unwrap(), b"abcabcabc");
        // The announced length must match exactly.
        assert_eq!(decompress(&input, 8), Err(BadLzf));
        assert_eq!(decompress(&input, 10), Err(BadLzf));
    }

    #[test]
    fn hostile_streams_fail() {
        assert_eq!(decompress(&[5, b'a'], 6), Err(BadLzf)); // literal past the input
        assert_eq!(decompress(&[0x20, 0], 2), Err(BadLzf)); // reference before the start
        assert_eq!(decompress(&[0, b'a', 0xe0], 20), Err(BadLzf)); // truncated long run
        assert_eq!(decompress(&[0, b'a', 0x20], 20), Err(BadLzf)); // truncated offset
        assert_eq!(decompress(&[], 0).unwrap(), b"");
    }
}
