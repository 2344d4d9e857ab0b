//! The bytes of a sorted set, and the in-memory [`ZSet`] they decode to.
//!
//! **Encoding** (the `data` of an envelope of kind [`crate::Kind::ZSet`]):
//!
//! ```text
//! [count: LEB128 u64]
//! count × ( [score: f64, IEEE-754, 8 bytes big-endian] [member length: LEB128 u64] [member] )
//! ```
//!
//! Entries are in ascending (score, member) order, members compared byte-wise, scores as
//! Redis compares them (`-0` equals `0`; ties go to the member), each member once, no score
//! NaN. An entry costs 9 bytes plus its member (plus one length byte per 7 bits of member
//! length beyond the first): a million 10-byte members encode in about 20 MB.
//!
//! **Decoding is defensive**: every length is checked against the bytes left before anything
//! is sliced or allocated (a count is believed only as far as 9 bytes per entry remain), an
//! over-long or overflowing LEB128, a NaN score, an entry out of order, a repeated member or
//! trailing bytes is reported as damage (`Err` with a static reason), never a panic.
//!
//! **Cost**: decoding builds both orders of the set — `(score, member)` → for ranges, ranks
//! and pops, `member` → score for lookups — in O(n log n), the members sliced out of the
//! stored value without a copy; encoding is O(n). A view that keeps objects decodes a set
//! once (or never, when ZADD creates it) and changes the [`ZSet`] in place from then on:
//! an insert, a removal, a pop or a lookup is O(log n), a rank O(min(rank, n − rank)) (two
//! B-trees have no order statistics), and [`Collection::memory`] is O(1) from a running
//! count of member bytes.

use crate::collection::{Collection, Typed};
use crate::error::{RedisError, Result as RedisResult};
use crate::view::Kind;
use bytes::Bytes;
use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

/// A score: an `f64` that is never NaN, ordered as Redis orders scores (`-0 == 0`).
#[derive(Clone, Copy, Debug)]
pub struct Score(f64);

impl Score {
    /// The score `v`, unless it is NaN.
    pub fn new(v: f64) -> Option<Self> {
        (!v.is_nan()).then_some(Score(v))
    }

    /// Its value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        // Never NaN (see `new`), so `partial_cmp` always answers.
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// A member of a [`ZSet`]: one allocation of its bytes (behind a count), shared by both
/// orders — 16 bytes in each tree where a `Bytes` handle took 32 (and its shared header
/// another allocation): what keeps a large sorted set near Redis's own memory.
pub type Member = Arc<[u8]>;

/// A sorted set in memory: both its orders, sharing each member's one allocation.
#[derive(Clone, Debug, Default)]
pub struct ZSet {
    by_score: BTreeSet<(Score, Member)>,
    by_member: BTreeMap<Member, Score>,
    /// The sum of the members' lengths, kept by every insert and removal ([`ZSet::memory`]).
    member_bytes: usize,
}

/// What one member costs beyond its bytes, roughly: its entry in both trees (a score, a
/// `Bytes` handle each) and their share of the trees' nodes.
const ENTRY_OVERHEAD: usize = 2 * (8 + std::mem::size_of::<Member>()) + 32 + 16;

impl ZSet {
    /// The number of members.
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    /// Whether it has no member (an empty sorted set is never stored).
    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }

    /// The member's score.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.by_member.get(member).map(|s| s.get())
    }

    /// Sets the member's score; returns the previous one. An existing member keeps the
    /// allocation it has (only its score changes); a new one is copied into its own.
    pub fn insert(&mut self, member: &[u8], score: Score) -> Option<f64> {
        match self.by_member.get_key_value(member) {
            Some((m, &old)) => {
                let m = m.clone();
                self.by_score.remove(&(old, m.clone()));
                self.by_score.insert((score, m.clone()));
                self.by_member.insert(m, score);
                Some(old.get())
            }
            None => {
                self.member_bytes = self.member_bytes.saturating_add(member.len());
                let member = Member::from(member);
                self.by_member.insert(member.clone(), score);
                self.by_score.insert((score, member));
                None
            }
        }
    }

    /// Removes the member; returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let (m, old) = self.by_member.remove_entry(member)?;
        self.member_bytes = self.member_bytes.saturating_sub(m.len());
        self.by_score.remove(&(old, m));
        Some(old.get())
    }

    /// Removes and returns the lowest (`max`: false) or highest entry.
    pub fn pop(&mut self, max: bool) -> Option<(f64, Member)> {
        let (s, m) = if max {
            self.by_score.pop_last()?
        } else {
            self.by_score.pop_first()?
        };
        self.by_member.remove(&m);
        self.member_bytes = self.member_bytes.saturating_sub(m.len());
        Some((s.get(), m))
    }

    /// The member's 0-based rank in ascending order: O(min(rank, n − rank)), counting from
    /// both ends at once.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let (m, s) = self.by_member.get_key_value(member)?;
        let at = (*s, m.clone());
        let mut below = self.by_score.range(..at.clone());
        let mut above = self.by_score.range((Bound::Excluded(at), Bound::Unbounded));
        let (mut a, mut b) = (0usize, 0usize);
        loop {
            if below.next().is_none() {
                return Some(a);
            }
            a += 1;
            if above.next().is_none() {
                return Some(self.len().saturating_sub(1).saturating_sub(b));
            }
            b += 1;
        }
    }

    /// Every entry, `(score, member)`, in ascending order (reversible).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (f64, &Member)> + Clone + '_ {
        self.by_score.iter().map(|(s, m)| (s.get(), m))
    }

    /// The entries at or after `(score, member)` (after it when `excluded`), ascending:
    /// O(log n) to the first.
    pub fn iter_from(
        &self,
        score: Score,
        member: &[u8],
        excluded: bool,
    ) -> impl DoubleEndedIterator<Item = (f64, &Member)> + '_ {
        let at = (score, Member::from(member));
        let lo = if excluded {
            Bound::Excluded(at)
        } else {
            Bound::Included(at)
        };
        self.by_score
            .range((lo, Bound::Unbounded))
            .map(|(s, m)| (s.get(), m))
    }

    /// The entries before `(score, member)` (up to and including it when `included`),
    /// ascending (reverse it to walk down from there): O(log n) to the last.
    pub fn iter_until(
        &self,
        score: Score,
        member: &[u8],
        included: bool,
    ) -> impl DoubleEndedIterator<Item = (f64, &Member)> + '_ {
        let at = (score, Member::from(member));
        let hi = if included {
            Bound::Included(at)
        } else {
            Bound::Excluded(at)
        };
        self.by_score
            .range((Bound::Unbounded, hi))
            .map(|(s, m)| (s.get(), m))
    }

    /// The lowest and the highest entry's scores.
    pub fn score_bounds(&self) -> Option<(f64, f64)> {
        let lo = self.by_score.first()?.0.get();
        let hi = self.by_score.last()?.0.get();
        Some((lo, hi))
    }

    /// The memory it holds, approximately: its members' bytes and a per-entry overhead, O(1).
    pub fn memory(&self) -> usize {
        self.len()
            .saturating_mul(ENTRY_OVERHEAD)
            .saturating_add(self.member_bytes)
            .saturating_add(std::mem::size_of::<Self>())
    }

    /// The members with their scores, in member order.
    pub fn members(&self) -> impl Iterator<Item = (&Member, f64)> + '_ {
        self.by_member.iter().map(|(m, s)| (m, s.get()))
    }

    /// The encoding (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        meridian_core::collection_data::encode_zset(
            self.by_score.iter().map(|(s, m)| (s.get(), &m[..])),
        )
    }

    /// Decodes [`ZSet::encode`]'s bytes (each member copied into its own allocation).
    pub fn decode(data: &Bytes) -> Result<ZSet, &'static str> {
        let mut z = ZSet::default();
        let mut repeated = false;
        meridian_core::collection_data::walk_zset(data, |score, r| {
            let Some(score) = Score::new(score) else {
                return;
            };
            let member = Member::from(&data[r]);
            z.member_bytes = z.member_bytes.saturating_add(member.len());
            repeated |= z.by_member.insert(member.clone(), score).is_some();
            z.by_score.insert((score, member));
        })
        .map_err(|e| e.0)?;
        if repeated {
            return Err("sorted set member repeated");
        }
        Ok(z)
    }
}

impl Collection for ZSet {
    fn kind(&self) -> Kind {
        Kind::ZSet
    }
    fn encode(&self) -> Vec<u8> {
        ZSet::encode(self)
    }
    fn is_empty(&self) -> bool {
        ZSet::is_empty(self)
    }
    fn len(&self) -> usize {
        ZSet::len(self)
    }
    fn memory(&self) -> usize {
        ZSet::memory(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Typed for ZSet {
    const NAME: &'static str = "zset";
    const KIND: Kind = Kind::ZSet;
    fn decode(data: &Bytes) -> RedisResult<Self> {
        ZSet::decode(data).map_err(RedisError::Corrupt)
    }
    fn stored_len(data: &Bytes) -> RedisResult<usize> {
        let n = encoded_len(data).map_err(RedisError::Corrupt)?;
        usize::try_from(n).map_err(|_| RedisError::Corrupt("zset count out of range"))
    }
}

/// The member count of an encoded sorted set, read without decoding it (ZCARD).
pub fn encoded_len(data: &[u8]) -> Result<u64, &'static str> {
    Reader { data, pos: 0 }.uvarint()
}

/// Appends `v` as an unsigned LEB128.
pub fn put_uvarint(out: &mut Vec<u8>, v: u64) {
    meridian_core::leb128::put(out, v);
}

/// A cursor over encoded bytes that never reads past them.
pub(crate) struct Reader<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    /// Bytes not yet read.
    pub(crate) fn left(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.left() {
            return Err("truncated collection value");
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// An unsigned LEB128 of at most 10 bytes that fits a `u64`.
    pub(crate) fn uvarint(&mut self) -> Result<u64, &'static str> {
        use meridian_core::leb128::{Bad, get};
        get(self.data, &mut self.pos).map_err(|e| match e {
            Bad::Truncated => "truncated collection value",
            Bad::Overflow => "varint overflows 64 bits",
        })
    }
}
