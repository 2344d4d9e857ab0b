//! [`Quicklist`]: a list in memory, as Redis's quicklist keeps it — a deque of chunks, each
//! a small byte buffer of elements in [`super::encoding`]'s element format (each element's length at
//! both ends) with its element count.
//!
//! - A chunk holds at most [`CHUNK_BYTES`] bytes of encoded elements, unless it holds a single
//!   larger element (such an element has a chunk of its own, as Redis's plain nodes). No
//!   chunk is empty.
//! - A push or a pop at either end touches one end chunk: a tail push appends to the last
//!   chunk (or starts a new one), a head push shifts the bytes of the first chunk only. O(1)
//!   amortized (O([`CHUNK_BYTES`]) bytes moved at worst).
//! - Reaching element `i` walks the chunk counts from the nearer end, then the elements of
//!   one chunk from its nearer end: O(n / elements per chunk + elements per chunk).
//! - [`Quicklist::memory`] is a running total of the chunks' capacities: O(1).
//!
//! For 3-byte values an element takes 5 bytes, and full chunks use their capacity to the
//! last element: about 5 bytes per element plus 32 per chunk of ~800.
//!
//! The chunks are built by this module only (a decode checks every element of the stored
//! bytes first), so a walk over them cannot fail; should one ever meet bytes it cannot read,
//! it stops rather than panic, and a change that cannot proceed leaves the list as it was.

use super::End;
use super::encoding::{Elem, Elems, HEADER, Raw, TAG, elem_len, put_elem};
use crate::collection::{Collection, Typed};
use crate::error::{RedisError, Result};
use crate::view::Kind;
use bytes::Bytes;
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;

/// The most bytes of encoded elements a chunk holds (unless it holds one larger element).
pub const CHUNK_BYTES: usize = 4096;

/// The most elements a list holds (its stored count is a `u32`).
pub const MAX_LEN: usize = u32::MAX as usize;

/// A run of elements, encoded back to back.
#[derive(Clone, Default)]
struct Chunk {
    data: Vec<u8>,
    count: usize,
}

impl Chunk {
    /// A walk over its elements.
    fn walk(&self) -> Elems<'_> {
        Elems::over(&self.data, self.count)
    }

    /// Its elements' bytes, from either end (a walk that cannot read stops).
    fn elems(&self) -> impl DoubleEndedIterator<Item = &[u8]> {
        let data = &self.data[..];
        self.walk()
            .filter_map(move |e| e.ok().and_then(|e| data.get(e.start..e.end)))
    }

    /// Its element `off` (`off < count`), walked to from the nearer end.
    fn elem_at(&self, off: usize) -> Option<Elem> {
        let mut walk = self.walk();
        let e = if off < self.count / 2 {
            walk.nth(off)
        } else {
            walk.nth_back(self.count.checked_sub(off + 1)?)
        };
        e?.ok()
    }

    /// Whether `n` more bytes fit.
    fn fits(&self, n: usize) -> bool {
        self.data.len().saturating_add(n) <= CHUNK_BYTES
    }

    /// Room for `n` more bytes: capacity doubles up to [`CHUNK_BYTES`] (so a full chunk
    /// wastes nothing), or is exactly what one larger element needs.
    fn reserve(&mut self, n: usize) {
        let need = self.data.len().saturating_add(n);
        let cap = self.data.capacity();
        if need <= cap {
            return;
        }
        let target = need.max(cap.saturating_mul(2).clamp(16, CHUNK_BYTES));
        self.data.reserve_exact(target - self.data.len());
    }

    /// Gives back capacity a trim left unused (more than half of it).
    fn shrink(&mut self) {
        if self.data.capacity() / 2 > self.data.len() {
            self.data.shrink_to_fit();
        }
    }
}

/// A list in memory: see the module docs.
#[derive(Clone, Default)]
pub struct Quicklist {
    chunks: VecDeque<Chunk>,
    /// Elements, over all chunks.
    len: usize,
    /// The chunks' capacities, summed.
    heap: usize,
}

impl fmt::Debug for Quicklist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quicklist")
            .field("len", &self.len)
            .field("chunks", &self.chunks.len())
            .field("heap", &self.heap)
            .finish()
    }
}

/// Lists are equal when their elements are, however chunked.
impl PartialEq for Quicklist {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Quicklist {}

/// The elements `elems` in order (tests and tools).
impl<'e> FromIterator<&'e [u8]> for Quicklist {
    fn from_iter<I: IntoIterator<Item = &'e [u8]>>(elems: I) -> Self {
        let mut l = Quicklist::default();
        for e in elems {
            l.push(End::Right, e);
        }
        l
    }
}

impl Quicklist {
    /// How many elements it holds.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Runs `f` over chunk `ci`, keeping the capacity total.
    fn edit<R>(&mut self, ci: usize, f: impl FnOnce(&mut Chunk) -> R) -> Option<R> {
        let c = self.chunks.get_mut(ci)?;
        let before = c.data.capacity();
        let r = f(c);
        self.heap = self.heap.saturating_sub(before) + c.data.capacity();
        Some(r)
    }

    fn add_chunk(&mut self, at: End, c: Chunk) {
        self.heap += c.data.capacity();
        match at {
            End::Left => self.chunks.push_front(c),
            End::Right => self.chunks.push_back(c),
        }
    }

    fn drop_chunk(&mut self, ci: usize) {
        if let Some(c) = self.chunks.remove(ci) {
            self.heap = self.heap.saturating_sub(c.data.capacity());
        }
    }

    /// The index of the chunk at `end`.
    fn end_chunk(&self, end: End) -> Option<usize> {
        match end {
            End::Left if !self.chunks.is_empty() => Some(0),
            End::Left => None,
            End::Right => self.chunks.len().checked_sub(1),
        }
    }

    /// Pushes `e` at `end` (the caller keeps the length under [`MAX_LEN`]).
    pub fn push(&mut self, end: End, e: &[u8]) {
        let n = elem_len(e.len());
        let target = self
            .end_chunk(end)
            .filter(|&ci| self.chunks.get(ci).is_some_and(|c| c.fits(n)));
        match target {
            Some(ci) => {
                self.edit(ci, |c| {
                    c.reserve(n);
                    put_elem(&mut c.data, e);
                    if end == End::Left {
                        c.data.rotate_right(n);
                    }
                    c.count += 1;
                });
            }
            None => {
                let mut c = Chunk::default();
                c.reserve(n);
                put_elem(&mut c.data, e);
                c.count = 1;
                self.add_chunk(end, c);
            }
        }
        self.len += 1;
    }

    /// The element at `end`, if any.
    pub fn peek(&self, end: End) -> Option<&[u8]> {
        let c = self.chunks.get(self.end_chunk(end)?)?;
        match end {
            End::Left => c.elems().next(),
            End::Right => c.elems().next_back(),
        }
    }

    /// Pops the element at `end`, if any.
    pub fn pop(&mut self, end: End) -> Option<Bytes> {
        let ci = self.end_chunk(end)?;
        let c = self.chunks.get(ci)?;
        let e = match end {
            End::Left => c.walk().next(),
            End::Right => c.walk().next_back(),
        }?
        .ok()?;
        let popped = Bytes::copy_from_slice(c.data.get(e.start..e.end)?);
        if c.count <= 1 {
            self.drop_chunk(ci);
        } else {
            self.edit(ci, |c| {
                match end {
                    End::Left => {
                        c.data.drain(..e.enc_end);
                    }
                    End::Right => c.data.truncate(e.enc_start),
                }
                c.count -= 1;
            });
        }
        self.len -= 1;
        Some(popped)
    }

    /// The chunk holding element `i` and its offset there, walking the counts from the
    /// nearer end; `None` when `i` is out of range.
    fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.len {
            return None;
        }
        if i < self.len / 2 {
            let mut i = i;
            for (ci, c) in self.chunks.iter().enumerate() {
                if i < c.count {
                    return Some((ci, i));
                }
                i -= c.count;
            }
        } else {
            let mut j = self.len - 1 - i;
            for (ci, c) in self.chunks.iter().enumerate().rev() {
                if j < c.count {
                    return Some((ci, c.count - 1 - j));
                }
                j -= c.count;
            }
        }
        None
    }

    /// Element `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let (ci, off) = self.locate(i)?;
        let c = self.chunks.get(ci)?;
        let e = c.elem_at(off)?;
        c.data.get(e.start..e.end)
    }

    /// Every element, from either end.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> {
        self.chunks.iter().flat_map(Chunk::elems)
    }

    /// Up to `n` elements from element `first` on.
    pub fn range(&self, first: usize, n: usize) -> impl Iterator<Item = &[u8]> {
        let (ci, off) = self.locate(first).unwrap_or((self.chunks.len(), 0));
        self.chunks
            .range(ci..)
            .flat_map(Chunk::elems)
            .skip(off)
            .take(n)
    }

    /// Replaces element `i` with `e`; `false` (nothing changed) when `i` is out of range.
    pub fn set(&mut self, i: usize, e: &[u8]) -> bool {
        let Some((ci, off)) = self.locate(i) else {
            return false;
        };
        let Some(at) = self.chunks.get(ci).and_then(|c| c.elem_at(off)) else {
            return false;
        };
        let mut enc = Vec::with_capacity(elem_len(e.len()));
        put_elem(&mut enc, e);
        self.edit(ci, |c| {
            let grows = enc.len().saturating_sub(at.enc_end - at.enc_start);
            c.reserve(grows);
            c.data.splice(at.enc_start..at.enc_end, enc);
        });
        self.split(ci);
        true
    }

    /// Inserts `e` before element `i` (at the tail when `i` is the length); `false` (nothing
    /// changed) when `i` is past it. The caller keeps the length under [`MAX_LEN`].
    pub fn insert(&mut self, i: usize, e: &[u8]) -> bool {
        if i == 0 {
            self.push(End::Left, e);
            return true;
        }
        if i == self.len {
            self.push(End::Right, e);
            return true;
        }
        let Some((ci, off)) = self.locate(i) else {
            return false;
        };
        let Some(at) = self.chunks.get(ci).and_then(|c| c.elem_at(off)) else {
            return false;
        };
        let mut enc = Vec::with_capacity(elem_len(e.len()));
        put_elem(&mut enc, e);
        self.edit(ci, |c| {
            c.reserve(enc.len());
            c.data.splice(at.enc_start..at.enc_start, enc);
            c.count += 1;
        });
        self.len += 1;
        self.split(ci);
        true
    }

    /// Cuts chunk `ci` into chunks of at most [`CHUNK_BYTES`] if a change made it larger.
    fn split(&mut self, ci: usize) {
        let Some(c) = self.chunks.get(ci) else {
            return;
        };
        if c.data.len() <= CHUNK_BYTES || c.count <= 1 {
            return;
        }
        let mut pieces = Vec::new();
        let (mut run_start, mut run_count) = (0, 0);
        for e in c.walk() {
            let Ok(e) = e else {
                // Unreadable: keep the chunk whole (still a list, only a large chunk).
                return;
            };
            if run_count > 0 && e.enc_end - run_start > CHUNK_BYTES {
                pieces.push((run_start..e.enc_start, run_count));
                (run_start, run_count) = (e.enc_start, 0);
            }
            run_count += 1;
        }
        pieces.push((run_start..c.data.len(), run_count));
        let pieces: Vec<Chunk> = pieces
            .into_iter()
            .map(|(r, count)| Chunk {
                data: c.data.get(r).unwrap_or_default().to_vec(),
                count,
            })
            .collect();
        self.drop_chunk(ci);
        for (k, p) in pieces.into_iter().enumerate() {
            self.heap += p.data.capacity();
            self.chunks.insert(ci + k, p);
        }
    }

    /// Keeps elements `first..=last` only (`first <= last < len`), dropping whole chunks
    /// and cutting the two chunks at the edges.
    pub fn trim(&mut self, first: usize, last: usize) {
        if first > last || last >= self.len {
            return;
        }
        let (mut front, mut back) = (first, self.len - 1 - last);
        while front > 0 {
            let Some(c) = self.chunks.front() else { break };
            if c.count <= front {
                front -= c.count;
                self.len -= c.count;
                self.drop_chunk(0);
                continue;
            }
            let Some(Ok(e)) = c.walk().nth(front - 1) else {
                break;
            };
            self.edit(0, |c| {
                c.data.drain(..e.enc_end);
                c.count -= front;
                c.shrink();
            });
            self.len -= front;
            front = 0;
        }
        while back > 0 {
            let Some(ci) = self.chunks.len().checked_sub(1) else {
                break;
            };
            let Some(c) = self.chunks.get(ci) else { break };
            if c.count <= back {
                back -= c.count;
                self.len -= c.count;
                self.drop_chunk(ci);
                continue;
            }
            let Some(Ok(e)) = c.walk().nth_back(back - 1) else {
                break;
            };
            self.edit(ci, |c| {
                c.data.truncate(e.enc_start);
                c.count -= back;
                c.shrink();
            });
            self.len -= back;
            back = 0;
        }
    }

    /// Drops every element whose index is in `gone` (ascending), rebuilding the chunks
    /// compactly: O(n).
    pub fn remove_indexes(&mut self, gone: &[usize]) {
        if gone.is_empty() {
            return;
        }
        let mut out = Quicklist::default();
        let mut gone = gone.iter().peekable();
        for (i, e) in self.iter().enumerate() {
            if gone.next_if_eq(&&i).is_none() {
                out.push(End::Right, e);
            }
        }
        *self = out;
    }

    /// Whether some element equals `e`.
    pub fn contains(&self, e: &[u8]) -> bool {
        self.iter().any(|x| x == e)
    }

    /// The index of the first element equal to `e`.
    pub fn position(&self, e: &[u8]) -> Option<usize> {
        self.iter().position(|x| x == e)
    }

    /// Checks the invariants (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut len = 0;
        let mut heap = 0;
        for c in &self.chunks {
            assert!(c.count > 0, "an empty chunk");
            assert!(
                c.data.len() <= CHUNK_BYTES || c.count == 1,
                "an oversized chunk"
            );
            let walked: Vec<_> = c
                .walk()
                .collect::<std::result::Result<_, _>>()
                .expect("a readable chunk");
            assert_eq!(walked.len(), c.count);
            len += c.count;
            heap += c.data.capacity();
        }
        assert_eq!(len, self.len);
        assert_eq!(heap, self.heap);
    }

    /// How many chunks it has (tests).
    #[cfg(test)]
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}

impl Collection for Quicklist {
    fn kind(&self) -> Kind {
        Kind::List
    }

    /// The stored list: the header, then the chunks' bytes as they are.
    fn encode(&self) -> Vec<u8> {
        let body: usize = self.chunks.iter().map(|c| c.data.len()).sum();
        let mut out = Vec::with_capacity(HEADER + body);
        out.push(TAG);
        // The length is kept under MAX_LEN by every command that grows a list.
        let count = u32::try_from(self.len).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for c in &self.chunks {
            out.extend_from_slice(&c.data);
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn len(&self) -> usize {
        self.len
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.heap
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Typed for Quicklist {
    const NAME: &'static str = "list";
    const KIND: Kind = Kind::List;

    /// Checks every element of the stored list and copies runs of them into chunks, one
    /// allocation of the exact size per chunk: O(n).
    fn stored_len(data: &Bytes) -> Result<usize> {
        Ok(Raw::parse(data)?.len())
    }

    fn decode(data: &Bytes) -> Result<Self> {
        let raw = Raw::parse(data)?;
        let body = raw.body();
        let mut l = Quicklist::default();
        let (mut run_start, mut run_count) = (0, 0);
        let flush = |l: &mut Quicklist, range: std::ops::Range<usize>, count: usize| {
            let data = body.get(range).unwrap_or_default().to_vec();
            l.len += count;
            l.add_chunk(End::Right, Chunk { data, count });
        };
        for e in raw.elems() {
            let e = e?;
            if run_count > 0 && e.enc_end - run_start > CHUNK_BYTES {
                flush(&mut l, run_start..e.enc_start, run_count);
                (run_start, run_count) = (e.enc_start, 0);
            }
            run_count += 1;
        }
        if run_count == 0 {
            return Err(RedisError::Corrupt("list: an empty list stored"));
        }
        flush(&mut l, run_start..body.len(), run_count);
        Ok(l)
    }
}
