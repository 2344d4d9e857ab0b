//! The bytes of a stored list (the `data` of an envelope of kind [`Kind::List`]):
//!
//! ```text
//! [tag 0x01][count: u32 LE][element]...      element = [len: LEB128][bytes][len: LEB128, bytes reversed]
//! ```
//!
//! Each element carries its length at both ends (the trailing copy's bytes in reverse order,
//! so that reading backwards from the element's end decodes it as ordinary LEB128): either
//! end of a run of elements is reached in O(1), and walking from either end costs a varint
//! read per element, with no decoding of the elements themselves.
//!
//! Shared by the Redis layer and the eventual buckets' sequence CRDT, which shows its
//! elements in this form. The same element format is the Redis layer's in-memory one: a
//! `Quicklist`'s chunks are runs of elements as they appear here, so its encode is the
//! header followed by its chunks' bytes, and its decode checks every element once and copies runs of them
//! into chunks (O(n) each way; [`Elems::over`] walks one chunk). The stored form is what a
//! view that holds bytes keeps and what DUMP, SORT and a MULTI overlay read; this module's
//! [`decode`], [`encode`], [`start`] and [`put_elem`] serve them.
//!
//! Everything here reads hostile bytes: every length is bounds-checked against the walk's
//! limit, an element's two lengths must agree, a count of zero (an empty list is never
//! stored) or one the bytes cannot hold is refused, and a walk that reaches the count must
//! have reached the end of the bytes too. A damaged value is a [`BadEnvelope`] naming the damage, never a
//! panic, and nothing is allocated from a length read out of the value.

use crate::envelope::BadEnvelope;
#[cfg(doc)]
use crate::envelope::Kind;

/// The encoding's tag, the first byte of every list.
pub const TAG: u8 = 1;
/// The header's length: the tag and the count.
pub const HEADER: usize = 5;
/// The longest LEB128 varint of a `u64`.
const MAX_VARINT: usize = 10;

type Result<T> = std::result::Result<T, BadEnvelope>;

fn corrupt(why: &'static str) -> BadEnvelope {
    BadEnvelope(why)
}

/// How many bytes the LEB128 encoding of `n` takes.
#[inline]
pub fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - (n | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// How many bytes an element of `n` bytes takes, its two lengths included.
#[inline]
pub fn elem_len(n: usize) -> usize {
    n.saturating_add(2 * varint_len(n))
}

/// Appends one element: its length, its bytes, its length reversed.
#[inline]
pub fn put_elem(out: &mut Vec<u8>, e: &[u8]) {
    let mut buf = [0u8; MAX_VARINT];
    let mut n = e.len();
    let mut k = 0;
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            buf[k] = byte;
            k += 1;
            break;
        }
        buf[k] = byte | 0x80;
        k += 1;
    }
    out.extend_from_slice(&buf[..k]);
    out.extend_from_slice(e);
    out.extend(buf[..k].iter().rev());
}

/// A new list value of `count` elements whose elements take `body_len` bytes: the header
/// written, room for the body reserved (one allocation). Refuses, before allocating, a list
/// longer than `max` bytes or of more than `u32::MAX` elements.
pub fn start(count: usize, body_len: usize, max: usize) -> Result<Vec<u8>> {
    let count = u32::try_from(count).map_err(|_| corrupt("list too large"))?;
    let total = body_len
        .checked_add(HEADER)
        .filter(|&t| t <= max)
        .ok_or(corrupt("list too large"))?;
    let mut out = Vec::with_capacity(total);
    out.push(TAG);
    out.extend_from_slice(&count.to_le_bytes());
    Ok(out)
}

/// One element's place in a list's body: its encoding spans `enc_start..enc_end`, its bytes
/// `start..end` (offsets in the body).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elem {
    /// Where its encoding starts.
    pub enc_start: usize,
    /// Where its bytes start.
    pub start: usize,
    /// Where its bytes end.
    pub end: usize,
    /// Where its encoding ends (the next element's `enc_start`).
    pub enc_end: usize,
}

/// A stored list, its header checked: the element count and the elements' bytes.
#[derive(Clone, Copy, Debug)]
pub struct Raw<'a> {
    len: usize,
    body: &'a [u8],
}

impl<'a> Raw<'a> {
    /// Checks the header of `data`: the tag, a count of at least one, and bytes enough for
    /// that many elements (each takes at least two bytes).
    pub fn parse(data: &'a [u8]) -> Result<Raw<'a>> {
        let (Some(&tag), Some(count)) = (data.first(), data.get(1..HEADER)) else {
            return Err(corrupt("list: truncated header"));
        };
        if tag != TAG {
            return Err(corrupt("list: unknown encoding"));
        }
        let mut le = [0u8; 4];
        le.copy_from_slice(count);
        let len = u32::from_le_bytes(le) as usize;
        let body = &data[HEADER..];
        if len == 0 {
            return Err(corrupt("list: an empty list stored"));
        }
        if body.len() / 2 < len {
            return Err(corrupt("list: fewer bytes than elements"));
        }
        Ok(Raw { len, body })
    }

    /// The number of elements (at least one).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a stored list has an element.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements' bytes.
    #[inline]
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// A walk over the elements, from either end.
    pub fn elems(&self) -> Elems<'a> {
        Elems {
            body: self.body,
            front: 0,
            back: self.body.len(),
            left: self.len,
            failed: false,
        }
    }
}

/// A walk over a list's elements from both ends (a double-ended iterator of [`Elem`]s); a
/// damaged element ends it with an error. When the count is reached the front and back must
/// meet, so a walk over every element checks the whole value.
#[derive(Clone, Debug)]
pub struct Elems<'a> {
    body: &'a [u8],
    front: usize,
    back: usize,
    left: usize,
    failed: bool,
}

impl<'a> Elems<'a> {
    /// A walk over `count` elements encoded back to back in `body` (a list's body, or one
    /// chunk of an in-memory list): the same checks as a stored list's walk.
    pub fn over(body: &'a [u8], count: usize) -> Elems<'a> {
        Elems {
            body,
            front: 0,
            back: body.len(),
            left: count,
            failed: false,
        }
    }

    /// Where the unwalked bytes start.
    pub fn front(&self) -> usize {
        self.front
    }

    /// Where the unwalked bytes end.
    pub fn back(&self) -> usize {
        self.back
    }

    /// How many elements are left.
    pub fn left(&self) -> usize {
        self.left
    }

    /// The next `Some` when the count is reached: an error if bytes remain.
    fn at_count(&mut self) -> Option<Result<Elem>> {
        if self.front == self.back {
            None
        } else {
            self.failed = true;
            Some(Err(corrupt("list: bytes after the last element")))
        }
    }

    fn fail(&mut self, e: BadEnvelope) -> Option<Result<Elem>> {
        self.failed = true;
        Some(Err(e))
    }
}

impl Iterator for Elems<'_> {
    type Item = Result<Elem>;

    fn next(&mut self) -> Option<Result<Elem>> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            return self.at_count();
        }
        match read_forward(self.body, self.front, self.back) {
            Ok(e) => {
                self.front = e.enc_end;
                self.left -= 1;
                if self.left == 0 && self.front != self.back {
                    return self.fail(corrupt("list: bytes after the last element"));
                }
                Some(Ok(e))
            }
            Err(e) => self.fail(e),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left.saturating_add(1)))
    }
}

impl DoubleEndedIterator for Elems<'_> {
    fn next_back(&mut self) -> Option<Result<Elem>> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            return self.at_count();
        }
        match read_backward(self.body, self.front, self.back) {
            Ok(e) => {
                self.back = e.enc_start;
                self.left -= 1;
                if self.left == 0 && self.front != self.back {
                    return self.fail(corrupt("list: bytes before the first element"));
                }
                Some(Ok(e))
            }
            Err(e) => self.fail(e),
        }
    }
}

/// Reads a LEB128 varint from the start of `b`: its value and its length in bytes.
fn varint(b: impl Iterator<Item = u8>) -> Result<(usize, usize)> {
    let mut v: u64 = 0;
    for (i, byte) in b.take(MAX_VARINT).enumerate() {
        let group = u64::from(byte & 0x7f);
        let shift = 7 * i as u32;
        if shift == 63 && group > 1 {
            return Err(corrupt("list: element length overflows"));
        }
        v |= group << shift;
        if byte & 0x80 == 0 {
            let v = usize::try_from(v).map_err(|_| corrupt("list: element length overflows"))?;
            return Ok((v, i + 1));
        }
    }
    Err(corrupt("list: truncated element length"))
}

/// The element whose encoding starts at `pos`, all of it before `limit`.
fn read_forward(body: &[u8], pos: usize, limit: usize) -> Result<Elem> {
    let room = body
        .get(pos..limit)
        .ok_or(corrupt("list: walk out of bounds"))?;
    let (n, k) = varint(room.iter().copied())?;
    let start = pos + k;
    let end = start
        .checked_add(n)
        .filter(|&e| e <= limit)
        .ok_or(corrupt("list: element runs past the end"))?;
    let enc_end = end
        .checked_add(k)
        .filter(|&e| e <= limit)
        .ok_or(corrupt("list: element runs past the end"))?;
    if !body[end..enc_end].iter().eq(body[pos..start].iter().rev()) {
        return Err(corrupt("list: an element's lengths disagree"));
    }
    Ok(Elem {
        enc_start: pos,
        start,
        end,
        enc_end,
    })
}

/// The element whose encoding ends at `end`, all of it from `floor` on.
fn read_backward(body: &[u8], floor: usize, enc_end: usize) -> Result<Elem> {
    let room = body
        .get(floor..enc_end)
        .ok_or(corrupt("list: walk out of bounds"))?;
    let (n, k) = varint(room.iter().rev().copied())?;
    let end = enc_end - k;
    let start = end
        .checked_sub(n)
        .filter(|&s| s >= floor)
        .ok_or(corrupt("list: element runs past the start"))?;
    let enc_start = start
        .checked_sub(k)
        .filter(|&s| s >= floor)
        .ok_or(corrupt("list: element runs past the start"))?;
    if !body[enc_start..start]
        .iter()
        .eq(body[end..enc_end].iter().rev())
    {
        return Err(corrupt("list: an element's lengths disagree"));
    }
    Ok(Elem {
        enc_start,
        start,
        end,
        enc_end,
    })
}

/// Every element of `data`, checked (tests and tools; commands walk only what they need).
pub fn decode(data: &[u8]) -> Result<Vec<&[u8]>> {
    let raw = Raw::parse(data)?;
    let body = raw.body();
    raw.elems()
        .map(|e| e.map(|e| &body[e.start..e.end]))
        .collect()
}

/// The list of `elems` (tests and tools); `None` when it has no element.
pub fn encode<'e>(elems: impl IntoIterator<Item = &'e [u8]> + Clone) -> Option<Vec<u8>> {
    let (count, body) = elems
        .clone()
        .into_iter()
        .fold((0usize, 0usize), |(c, b), e| (c + 1, b + elem_len(e.len())));
    if count == 0 {
        return None;
    }
    let mut out = start(count, body, usize::MAX).ok()?;
    for e in elems {
        put_elem(&mut out, e);
    }
    Some(out)
}
