//! Readers of the compact encodings Redis embeds in an RDB string: the listpack (Redis 7's
//! small hashes, sorted sets and list nodes), the ziplist (the same, before Redis 7), the
//! intset (small sets of integers) and the zipmap (small hashes before Redis 2.6).
//!
//! Each reader takes the whole embedded string and checks it as Redis's deep sanitization
//! does (`lpValidateIntegrity`, `ziplistValidateIntegrity`, `intsetValidateIntegrity`,
//! `zipmapValidateIntegrity` with `deep` set): the header's byte count equals the length,
//! the terminator is where it must be, every entry lies within the bytes, a listpack
//! entry's back-length matches its length, a ziplist entry's previous-length matches the
//! entry before it and the tail offset points at the last entry, the element count agrees
//! with the header (unless the header says "unknown"), intset members are strictly
//! ascending. Integers come out as their decimal strings, as Redis reads them. Nothing is
//! allocated from a count read out of the bytes: vectors grow as entries decode.

use bytes::Bytes;

/// Damaged bytes: RESTORE answers `ERR Bad data format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bad;

type Result<T> = std::result::Result<T, Bad>;

fn int_bytes(v: i64) -> Bytes {
    Bytes::copy_from_slice(itoa::Buffer::new().format(v).as_bytes())
}

fn le_u16(b: &[u8]) -> usize {
    usize::from(u16::from_le_bytes([b[0], b[1]]))
}

fn le_u32(b: &[u8]) -> usize {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// `n` bytes of `buf` at `at`, if they lie before `end`.
fn within(buf: &[u8], at: usize, n: usize, end: usize) -> Result<&[u8]> {
    let stop = at.checked_add(n).filter(|&s| s <= end).ok_or(Bad)?;
    Ok(&buf[at..stop])
}

// ----- listpack --------------------------------------------------------------------------

const LP_HEADER: usize = 6;
const LP_EOF: u8 = 0xff;
const COUNT_UNKNOWN: usize = u16::MAX as usize;

/// The back-length a listpack entry of `n` bytes ends with (`lpEncodeBacklen`): the length
/// in 7-bit groups, most significant first, every group but the first flagged with 0x80.
fn backlen(n: usize, buf: &mut [u8; 5]) -> &[u8] {
    let size = match n {
        0..=127 => 1,
        128..16383 => 2,
        16383..2097151 => 3,
        2097151..268435455 => 4,
        _ => 5,
    };
    for (k, slot) in buf[..size].iter_mut().enumerate() {
        let shift = 7 * (size - 1 - k);
        let group = ((n >> shift) & 0x7f) as u8;
        *slot = if k == 0 { group } else { group | 0x80 };
    }
    &buf[..size]
}

/// Every element of a listpack, in order.
pub fn listpack(buf: &[u8]) -> Result<Vec<Bytes>> {
    if buf.len() < LP_HEADER + 1 || le_u32(buf) != buf.len() || buf[buf.len() - 1] != LP_EOF {
        return Err(Bad);
    }
    let declared = le_u16(&buf[4..]);
    let end = buf.len() - 1;
    let mut out = Vec::new();
    let mut p = LP_HEADER;
    while p < end {
        let b = buf[p];
        let (header, data_len, int): (usize, usize, Option<i64>) = if b & 0x80 == 0 {
            (1, 0, Some(i64::from(b & 0x7f)))
        } else if b & 0xc0 == 0x80 {
            (1, usize::from(b & 0x3f), None)
        } else if b & 0xe0 == 0xc0 {
            let lo = within(buf, p + 1, 1, end)?[0];
            let u = (i64::from(b & 0x1f) << 8) | i64::from(lo);
            (2, 0, Some(if u >= 1 << 12 { u - (1 << 13) } else { u }))
        } else if b & 0xf0 == 0xe0 {
            let lo = within(buf, p + 1, 1, end)?[0];
            (2, (usize::from(b & 0x0f) << 8) | usize::from(lo), None)
        } else {
            match b {
                0xf0 => (5, le_u32(within(buf, p + 1, 4, end)?), None),
                0xf1 => {
                    let d = within(buf, p + 1, 2, end)?;
                    (3, 0, Some(i64::from(i16::from_le_bytes([d[0], d[1]]))))
                }
                0xf2 => {
                    let d = within(buf, p + 1, 3, end)?;
                    // Sign-extend 24 bits: place them high in an i32 and shift back.
                    let v = i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8;
                    (4, 0, Some(i64::from(v)))
                }
                0xf3 => {
                    let d = within(buf, p + 1, 4, end)?;
                    (
                        5,
                        0,
                        Some(i64::from(i32::from_le_bytes([d[0], d[1], d[2], d[3]]))),
                    )
                }
                0xf4 => {
                    let d = within(buf, p + 1, 8, end)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(d);
                    (9, 0, Some(i64::from_le_bytes(a)))
                }
                _ => return Err(Bad), // 0xf5..=0xfe are no encoding; 0xff ends too early
            }
        };
        let entry = header.checked_add(data_len).ok_or(Bad)?;
        let mut scratch = [0u8; 5];
        let back = backlen(entry, &mut scratch);
        let whole = within(buf, p, entry + back.len(), end)?;
        if &whole[entry..] != back {
            return Err(Bad);
        }
        out.push(match int {
            Some(v) => int_bytes(v),
            None => Bytes::copy_from_slice(&whole[header..entry]),
        });
        p += whole.len();
    }
    if declared != COUNT_UNKNOWN && declared != out.len() {
        return Err(Bad);
    }
    Ok(out)
}

// ----- ziplist ---------------------------------------------------------------------------

const ZL_HEADER: usize = 10;
const ZL_END: u8 = 0xff;

/// Every element of a ziplist, in order.
pub fn ziplist(buf: &[u8]) -> Result<Vec<Bytes>> {
    if buf.len() < ZL_HEADER + 1 || le_u32(buf) != buf.len() || buf[buf.len() - 1] != ZL_END {
        return Err(Bad);
    }
    let end = buf.len() - 1;
    let tail = le_u32(&buf[4..]);
    if tail > end {
        return Err(Bad);
    }
    let declared = le_u16(&buf[8..]);
    let mut out = Vec::new();
    let mut p = ZL_HEADER;
    let mut prev_size = 0usize;
    let mut last = None;
    while buf[p] != ZL_END {
        // The previous entry's size: one byte, or 0xfe and four bytes.
        let (prev_len, ps) = if buf[p] < 0xfe {
            (usize::from(buf[p]), 1)
        } else {
            (le_u32(within(buf, p + 1, 4, end)?), 5)
        };
        if prev_len != prev_size {
            return Err(Bad);
        }
        let e = within(buf, p + ps, 1, end)?[0];
        let at = p + ps + 1;
        let (len_size, data_len, int): (usize, usize, Option<usize>) = match e >> 6 {
            0 => (1, usize::from(e & 0x3f), None),
            1 => {
                let lo = within(buf, at, 1, end)?[0];
                (2, (usize::from(e & 0x3f) << 8) | usize::from(lo), None)
            }
            2 => {
                let d = within(buf, at, 4, end)?;
                (
                    5,
                    u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize,
                    None,
                )
            }
            _ => match e {
                0xc0 => (1, 2, Some(2)),
                0xd0 => (1, 4, Some(4)),
                0xe0 => (1, 8, Some(8)),
                0xf0 => (1, 3, Some(3)),
                0xfe => (1, 1, Some(1)),
                0xf1..=0xfd => (1, 0, Some(0)),
                _ => return Err(Bad),
            },
        };
        let size = (ps + len_size).checked_add(data_len).ok_or(Bad)?;
        let whole = within(buf, p, size, end)?;
        let data = &whole[ps + len_size..];
        out.push(match int {
            None => Bytes::copy_from_slice(data),
            Some(0) => int_bytes(i64::from(e & 0x0f) - 1),
            Some(1) => int_bytes(i64::from(data[0] as i8)),
            Some(2) => int_bytes(i64::from(i16::from_le_bytes([data[0], data[1]]))),
            Some(3) => int_bytes(i64::from(
                i32::from_le_bytes([0, data[0], data[1], data[2]]) >> 8,
            )),
            Some(4) => int_bytes(i64::from(i32::from_le_bytes([
                data[0], data[1], data[2], data[3],
            ]))),
            Some(_) => {
                let mut a = [0u8; 8];
                a.copy_from_slice(data);
                int_bytes(i64::from_le_bytes(a))
            }
        });
        last = Some(p);
        prev_size = size;
        p += size;
    }
    if p != end || last.is_some_and(|l| l != tail) {
        return Err(Bad);
    }
    if declared != COUNT_UNKNOWN && declared != out.len() {
        return Err(Bad);
    }
    Ok(out)
}

// ----- intset ----------------------------------------------------------------------------

/// The members of an intset, strictly ascending (at least one).
pub fn intset(buf: &[u8]) -> Result<Vec<i64>> {
    if buf.len() < 8 {
        return Err(Bad);
    }
    let width = le_u32(buf);
    let count = le_u32(&buf[4..]);
    if !matches!(width, 2 | 4 | 8) || count == 0 {
        return Err(Bad);
    }
    // In u64: `count × width` must not wrap to a length that happens to fit.
    if 8 + (count as u64) * (width as u64) != buf.len() as u64 {
        return Err(Bad);
    }
    let mut out: Vec<i64> = Vec::with_capacity(count);
    for c in buf[8..].chunks_exact(width) {
        let v = match width {
            2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
            4 => i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            _ => {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                i64::from_le_bytes(a)
            }
        };
        if out.last().is_some_and(|&prev| prev >= v) {
            return Err(Bad);
        }
        out.push(v);
    }
    Ok(out)
}

// ----- zipmap ----------------------------------------------------------------------------

const ZM_END: u8 = 0xff;
const ZM_BIGLEN: u8 = 0xfe;

/// A zipmap length: one byte below 0xfe, or 0xfe and four bytes.
fn zm_len(buf: &[u8], at: usize, end: usize) -> Result<(usize, usize)> {
    let b = within(buf, at, 1, end)?[0];
    if b < ZM_BIGLEN {
        Ok((usize::from(b), 1))
    } else if b == ZM_BIGLEN {
        Ok((le_u32(within(buf, at + 1, 4, end)?), 5))
    } else {
        Err(Bad)
    }
}

/// The field/value pairs of a zipmap, in order (at least one).
pub fn zipmap(buf: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
    if buf.len() < 2 || buf[buf.len() - 1] != ZM_END {
        return Err(Bad);
    }
    let end = buf.len() - 1;
    let mut out = Vec::new();
    let mut p = 1;
    while buf[p] != ZM_END {
        let (flen, s) = zm_len(buf, p, end)?;
        let field = within(buf, p + s, flen, end)?;
        p += s + flen;
        let (vlen, s) = zm_len(buf, p, end)?;
        let free = usize::from(within(buf, p + s, 1, end)?[0]);
        p += s + 1;
        let value = within(buf, p, vlen, end)?;
        within(buf, p, vlen + free, end)?;
        p += vlen + free;
        out.push((Bytes::copy_from_slice(field), Bytes::copy_from_slice(value)));
    }
    if out.is_empty() || (buf[0] != ZM_BIGLEN && usize::from(buf[0]) != out.len()) {
        return Err(Bad);
    }
    Ok(out)
}

// ----- writing a listpack ------------------------------------------------------------------

/// A listpack being written (`lpAppend`): strings and integers, each in the encoding Redis
/// would choose for it. DUMP of a stream writes its nodes with it; tests build payloads.
#[derive(Debug)]
pub struct ListpackWriter {
    out: Vec<u8>,
    count: usize,
}

impl Default for ListpackWriter {
    fn default() -> Self {
        Self {
            out: vec![0u8; LP_HEADER],
            count: 0,
        }
    }
}

impl ListpackWriter {
    /// Ends an entry that began at `start`: its back-length.
    fn close(&mut self, start: usize) {
        let entry = self.out.len() - start;
        let mut scratch = [0u8; 5];
        self.out.extend_from_slice(backlen(entry, &mut scratch));
        self.count += 1;
    }

    /// Appends a string element (in a string encoding, whatever its bytes).
    pub fn string(&mut self, e: &[u8]) {
        let start = self.out.len();
        let n = e.len();
        if n < 64 {
            self.out.push(0x80 | n as u8);
        } else if n < 4096 {
            self.out
                .extend_from_slice(&[0xe0 | (n >> 8) as u8, n as u8]);
        } else {
            self.out.push(0xf0);
            self.out
                .extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
        }
        self.out.extend_from_slice(e);
        self.close(start);
    }

    /// Appends an integer element in the smallest integer encoding.
    pub fn int(&mut self, v: i64) {
        let start = self.out.len();
        if (0..=127).contains(&v) {
            self.out.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = (v as u16) & 0x1fff;
            self.out
                .extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
        } else if let Ok(v) = i16::try_from(v) {
            self.out.push(0xf1);
            self.out.extend_from_slice(&v.to_le_bytes());
        } else if (-(1 << 23)..(1 << 23)).contains(&v) {
            self.out.push(0xf2);
            self.out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if let Ok(v) = i32::try_from(v) {
            self.out.push(0xf3);
            self.out.extend_from_slice(&v.to_le_bytes());
        } else {
            self.out.push(0xf4);
            self.out.extend_from_slice(&v.to_le_bytes());
        }
        self.close(start);
    }

    /// The listpack's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.out.push(LP_EOF);
        let total = u32::try_from(self.out.len()).unwrap_or(u32::MAX);
        self.out[..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(COUNT_UNKNOWN) as u16;
        self.out[4..6].copy_from_slice(&count.to_le_bytes());
        self.out
    }
}

/// A listpack of `elems`, every element in a string encoding (Redis reads any encoding).
#[cfg(test)]
pub fn write_listpack(elems: &[&[u8]]) -> Vec<u8> {
    let mut w = ListpackWriter::default();
    for e in elems {
        w.string(e);
    }
    w.finish()
}
