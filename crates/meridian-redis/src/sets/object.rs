//! [`Set`]: a set in memory, what a view that keeps objects holds for a key of kind
//! [`Kind::Set`], and what every set command changes or reads.
//!
//! Two representations, as Redis's `t_set.c` has:
//! - **integers**: a sorted `Vec<i64>` while every member is an integer in `string2ll` form
//!   (so its decimal text is the member, byte for byte) and there are at most
//!   [`INTSET_MAX_ENTRIES`] of them — Redis's intset. Membership is a binary search over at
//!   most 512 values; an add or a removal shifts at most 512.
//! - **a table**: the members in a dense `Vec<Box<[u8]>>` (in no particular order) plus a
//!   hash table of their positions in it (std's seeded SipHash, as Redis's dict). Add,
//!   remove, membership and a uniform random member are O(1): a removal moves the last
//!   member into the hole (`swap_remove`) and repoints its table slot. A set that outgrows
//!   the integers (a non-integer member, or a 513th) becomes a table and stays one, as in
//!   Redis; the table and the list shrink when a quarter full.
//!
//! - **sorted slices**: what decoding the stored form gives for anything but an intset — the
//!   members as `Bytes` slices of the stored value (no copy), strictly ascending. A view of
//!   bytes decodes, changes and re-encodes a set on every command; this makes that a copy
//!   each way plus a binary search and a shift (or one merge for many members), as cheap as
//!   the stored form allows. A held set leaves it at its first write ([`Set::settle`]: O(n)
//!   once), so it never costs a held set more than that one conversion.
//!
//! Whatever the representation, the length is the list's and [`Collection::memory`] is O(1)
//! (a running total of the members' heap bytes). The stored form is the module's sorted
//! encoding ([`super::encode`]): [`Collection::encode`] copies sorted slices, sorts a table.

use super::{INTSET_MAX_ENTRIES, PREALLOCATED_MEMBERS, data_len, encode, walk};
use crate::collection::{Collection, Typed};
use crate::dense_table::{DenseTable, KeyOf};
use crate::error::Result;
use crate::value::parse_i64;
use crate::view::Kind;
use bytes::Bytes;
use std::any::Any;

/// A set in memory. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Set {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// Strictly ascending; at most [`INTSET_MAX_ENTRIES`].
    Ints(Vec<i64>),
    /// As decoded from the stored form: strictly ascending by bytes, slices of the stored
    /// value (no copy). See [`Set::settle`].
    Sorted(Sorted),
    Table(Table),
}

/// Members strictly ascending by bytes, and their bytes in total.
#[derive(Clone, Debug, Default)]
struct Sorted {
    members: Vec<Bytes>,
    heap: usize,
}

impl Sorted {
    fn position(&self, m: &[u8]) -> std::result::Result<usize, usize> {
        self.members.binary_search_by(|x| x[..].cmp(m))
    }
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Ints(Vec::new())
    }
}

/// A member, borrowed: its bytes, or the value of an integer set's member.
#[derive(Clone, Copy, Debug)]
pub enum Member<'a> {
    /// A table's member.
    Bytes(&'a [u8]),
    /// An integer set's member (its text is the decimal form).
    Int(i64),
}

impl Member<'_> {
    /// Runs `f` over the member's bytes (an integer formatted on the stack).
    pub fn with<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Member::Bytes(b) => f(b),
            Member::Int(i) => f(itoa::Buffer::new().format(i).as_bytes()),
        }
    }

    /// The member's bytes, copied.
    pub fn to_bytes(self) -> Bytes {
        self.with(Bytes::copy_from_slice)
    }
}

/// A table's entries are its members, whole.
#[derive(Clone, Copy, Debug)]
struct Whole;

impl KeyOf for Whole {
    #[inline]
    fn key(entry: &[u8]) -> &[u8] {
        entry
    }
}

/// The members in a dense list, indexed by a hash table of their positions (in no order:
/// Redis's sets keep none).
type Table = DenseTable<Whole>;

/// An empty table with room for `n` members.
fn table(n: usize) -> Table {
    Table::with_capacity(n, 0)
}

/// The table of an integer set's members, with room for one more.
fn table_of(ints: &[i64]) -> Table {
    let mut t = table(ints.len() + 1);
    let mut buf = itoa::Buffer::new();
    for &i in ints {
        t.push_new(buf.format(i).as_bytes().into());
    }
    t
}

impl Set {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set of `members` (any order; repeats count once).
    pub fn from_members<M: AsRef<[u8]>>(members: impl IntoIterator<Item = M>) -> Self {
        let mut s = Set::new();
        for m in members {
            s.insert(m.as_ref());
        }
        s
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Ints(v) => v.len(),
            Repr::Sorted(s) => s.members.len(),
            Repr::Table(t) => t.len(),
        }
    }

    /// Whether there is no member.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `m` is a member.
    pub fn contains(&self, m: &[u8]) -> bool {
        match &self.repr {
            Repr::Ints(v) => parse_i64(m).is_some_and(|i| v.binary_search(&i).is_ok()),
            Repr::Sorted(s) => s.position(m).is_ok(),
            Repr::Table(t) => t.position(m).is_some(),
        }
    }

    /// Adds `m`: whether it was not a member.
    pub fn insert(&mut self, m: &[u8]) -> bool {
        let v = match &mut self.repr {
            Repr::Table(t) => return t.find_or_push(m, || m.into()).is_err(),
            Repr::Sorted(s) => {
                return match s.position(m) {
                    Ok(_) => false,
                    Err(at) => {
                        s.heap = s.heap.saturating_add(m.len());
                        s.members.insert(at, Bytes::copy_from_slice(m));
                        true
                    }
                };
            }
            Repr::Ints(v) => v,
        };
        if let Some(i) = parse_i64(m) {
            match v.binary_search(&i) {
                Ok(_) => return false,
                Err(at) if v.len() < INTSET_MAX_ENTRIES => {
                    v.insert(at, i);
                    return true;
                }
                Err(_) => {}
            }
        }
        // Not an integer, or a 513th: the set becomes a table, as Redis's intset converts.
        let mut t = table_of(v);
        t.push_new(m.into());
        self.repr = Repr::Table(t);
        true
    }

    /// Removes `m`: whether it was a member.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Ints(v) => match parse_i64(m).map(|i| v.binary_search(&i)) {
                Some(Ok(at)) => {
                    v.remove(at);
                    true
                }
                _ => false,
            },
            Repr::Sorted(s) => match s.position(m) {
                Ok(at) => {
                    let gone = s.members.remove(at);
                    s.heap = s.heap.saturating_sub(gone.len());
                    true
                }
                Err(_) => false,
            },
            Repr::Table(t) => t.remove(m),
        }
    }

    /// The member at position `at` (below [`Set::len`]): positions are the representation's
    /// order, so a uniform position is a uniform member. `None` out of range.
    pub fn get(&self, at: usize) -> Option<Member<'_>> {
        match &self.repr {
            Repr::Ints(v) => v.get(at).map(|&i| Member::Int(i)),
            Repr::Sorted(s) => s.members.get(at).map(|m| Member::Bytes(m)),
            Repr::Table(t) => t.entries().get(at).map(|m| Member::Bytes(m)),
        }
    }

    /// Removes and returns the member at position `at`; `None` out of range. O(1) for a
    /// table (the last member takes the position), O(512) at most for integers.
    pub fn take(&mut self, at: usize) -> Option<Bytes> {
        if at >= self.len() {
            return None;
        }
        Some(match &mut self.repr {
            Repr::Ints(v) => Member::Int(v.remove(at)).to_bytes(),
            Repr::Sorted(s) => {
                let m = s.members.remove(at);
                s.heap = s.heap.saturating_sub(m.len());
                m
            }
            Repr::Table(t) => Bytes::from(t.take(at)?.into_vec()),
        })
    }

    /// Every member, in the representation's order.
    pub fn iter(&self) -> impl Iterator<Item = Member<'_>> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Every member, copied, in the representation's order.
    pub fn to_vec(&self) -> Vec<Bytes> {
        self.iter().map(Member::to_bytes).collect()
    }

    /// Keeps the members `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        match &mut self.repr {
            Repr::Ints(v) => v.retain(|&i| keep(itoa::Buffer::new().format(i).as_bytes())),
            Repr::Sorted(s) => {
                let mut gone = 0usize;
                s.members.retain(|m| {
                    let k = keep(m);
                    if !k {
                        gone += m.len();
                    }
                    k
                });
                s.heap = s.heap.saturating_sub(gone);
            }
            Repr::Table(t) => {
                let mut at = 0;
                while at < t.len() {
                    if t.entries().get(at).is_some_and(|m| keep(m)) {
                        at += 1;
                    } else {
                        // The last member moves to `at`: look at it next.
                        t.take(at);
                    }
                }
            }
        }
    }

    /// Runs `f` over every member in the order Redis answers them: numeric when Redis would
    /// hold the set as an intset (at most [`INTSET_MAX_ENTRIES`] members, each a `string2ll`
    /// integer), else ascending by bytes. The order depends on the members only, never on
    /// the representation or the history of the set.
    pub fn for_each_ordered(&self, mut f: impl FnMut(&[u8])) {
        match &self.repr {
            Repr::Ints(v) => {
                let mut buf = itoa::Buffer::new();
                for &i in v {
                    f(buf.format(i).as_bytes());
                }
            }
            Repr::Sorted(s) => {
                if let Some(ints) = small_ints(s.members.iter().map(|m| &m[..]), s.members.len()) {
                    let mut buf = itoa::Buffer::new();
                    for i in ints {
                        f(buf.format(i).as_bytes());
                    }
                    return;
                }
                for m in &s.members {
                    f(m);
                }
            }
            Repr::Table(t) => {
                if let Some(ints) = small_ints(t.entries().iter().map(|m| &m[..]), t.len()) {
                    let mut buf = itoa::Buffer::new();
                    for i in ints {
                        f(buf.format(i).as_bytes());
                    }
                    return;
                }
                let mut refs: Vec<&[u8]> = t.entries().iter().map(|m| &m[..]).collect();
                refs.sort_unstable();
                for m in refs {
                    f(m);
                }
            }
        }
    }

    /// Adds every member of `new` (a repeat counts once): how many were added. Merged in
    /// one pass, O(n + k log k), into the sorted slices of a decoded set; one by one
    /// otherwise.
    pub fn insert_all(&mut self, new: &[&[u8]]) -> usize {
        let Repr::Sorted(s) = &mut self.repr else {
            return new.iter().filter(|m| self.insert(m)).count();
        };
        if new.len() <= 4 {
            return new.iter().filter(|m| self.insert(m)).count();
        }
        let mut new: Vec<&[u8]> = new.to_vec();
        new.sort_unstable();
        new.dedup();
        let old = std::mem::take(&mut s.members);
        let mut out = Vec::with_capacity(old.len() + new.len());
        let mut added = 0;
        let mut old = old.into_iter().peekable();
        for n in new {
            while let Some(o) = old.next_if(|o| &o[..] < n) {
                out.push(o);
            }
            if old.peek().is_some_and(|o| &o[..] == n) {
                continue;
            }
            s.heap = s.heap.saturating_add(n.len());
            out.push(Bytes::copy_from_slice(n));
            added += 1;
        }
        out.extend(old);
        s.members = out;
        added
    }

    /// Removes every member of `gone`: how many were removed (one pass over the sorted
    /// slices of a decoded set when there are many).
    pub fn remove_all(&mut self, gone: &[&[u8]]) -> usize {
        if gone.len() <= 4 || !matches!(self.repr, Repr::Sorted(_)) {
            return gone.iter().filter(|m| self.remove(m)).count();
        }
        let mut gone: Vec<&[u8]> = gone.to_vec();
        gone.sort_unstable();
        let before = self.len();
        self.retain(|m| gone.binary_search(&m).is_err());
        before - self.len()
    }

    /// Removes `count` (below [`Set::len`]) distinct uniformly random members and returns
    /// them in random order: O(count) on a table, one pass over the sorted slices.
    pub fn pop_random(&mut self, count: usize, rng: &mut impl rand::Rng) -> Vec<Bytes> {
        let n = self.len();
        let count = count.min(n);
        if let Repr::Sorted(s) = &mut self.repr {
            let picked = rand::seq::index::sample(rng, n, count);
            let mut taken = vec![false; n];
            let mut out = Vec::with_capacity(count);
            for i in picked {
                if let (Some(t), Some(m)) = (taken.get_mut(i), s.members.get(i)) {
                    *t = true;
                    out.push(m.clone());
                }
            }
            let mut at = 0;
            let mut freed = 0;
            s.members.retain(|m| {
                let keep = !taken.get(at).copied().unwrap_or(false);
                if !keep {
                    freed += m.len();
                }
                at += 1;
                keep
            });
            s.heap = s.heap.saturating_sub(freed);
            return out;
        }
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            let i = rng.random_range(0..self.len());
            out.extend(self.take(i));
        }
        out
    }

    /// Makes a decoded set (sorted slices of its stored value, where an add or a removal
    /// shifts the rest) the shape a held set keeps, once, in O(n): integers if Redis would
    /// hold an intset, else a table, so that every change after is O(1). A view of bytes
    /// never settles: it decodes, changes and re-encodes each time, and the sorted slices
    /// make that a copy each way.
    pub fn settle(&mut self) {
        let Repr::Sorted(s) = &self.repr else {
            return;
        };
        if s.members.len() <= INTSET_MAX_ENTRIES {
            let ints: Option<Vec<i64>> = s.members.iter().map(|m| parse_i64(m)).collect();
            if let Some(mut ints) = ints {
                ints.sort_unstable();
                self.repr = Repr::Ints(ints);
                return;
            }
        }
        let mut t = table(s.members.len());
        for m in &s.members {
            t.push_new(m[..].into());
        }
        self.repr = Repr::Table(t);
    }

    /// Whether the set is held as integers (Redis's intset).
    #[cfg(test)]
    pub(crate) fn is_ints(&self) -> bool {
        matches!(self.repr, Repr::Ints(_))
    }
}

impl Collection for Set {
    fn kind(&self) -> Kind {
        Kind::Set
    }

    fn encode(&self) -> Vec<u8> {
        match &self.repr {
            Repr::Ints(v) => {
                let mut buf = itoa::Buffer::new();
                let mut texts: Vec<Vec<u8>> = v
                    .iter()
                    .map(|&i| buf.format(i).as_bytes().to_vec())
                    .collect();
                texts.sort_unstable();
                encode(&texts)
            }
            Repr::Sorted(s) => encode(&s.members),
            Repr::Table(t) => {
                let mut refs: Vec<&[u8]> = t.entries().iter().map(|m| &m[..]).collect();
                refs.sort_unstable();
                encode(&refs)
            }
        }
    }

    fn is_empty(&self) -> bool {
        Set::is_empty(self)
    }

    fn len(&self) -> usize {
        Set::len(self)
    }

    fn settle(&mut self) {
        Set::settle(self)
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.repr {
                Repr::Ints(v) => v.capacity() * std::mem::size_of::<i64>(),
                Repr::Sorted(s) => s.members.capacity() * std::mem::size_of::<Bytes>() + s.heap,
                Repr::Table(t) => t.memory(),
            }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Typed for Set {
    const NAME: &'static str = "set";
    const KIND: Kind = Kind::Set;

    /// Integers if Redis would hold an intset, else the sorted slices of `data` (no copy of
    /// the members; see [`Set::settle`]). Every length, the strict order and the end are
    /// checked, so damage is `Corrupt`.
    fn stored_len(data: &Bytes) -> Result<usize> {
        data_len(data)
    }

    fn decode(data: &Bytes) -> Result<Self> {
        let count = data_len(data)?;
        let small = count <= INTSET_MAX_ENTRIES;
        let mut ints: Vec<i64> = Vec::new();
        let mut all_ints = small;
        // The count is proven by its data only as members decode: the list grows with them.
        let mut members: Vec<Bytes> = Vec::with_capacity(count.min(PREALLOCATED_MEMBERS));
        let mut heap = 0usize;
        walk(data, |r| {
            if all_ints {
                match parse_i64(&data[r.clone()]) {
                    Some(i) => ints.push(i),
                    None => all_ints = false,
                }
            }
            heap += r.len();
            members.push(data.slice(r));
        })?;
        if all_ints {
            ints.sort_unstable();
            return Ok(Set {
                repr: Repr::Ints(ints),
            });
        }
        Ok(Set {
            repr: Repr::Sorted(Sorted { members, heap }),
        })
    }
}

/// The members as integers in numeric order, if they are all integers and few enough for
/// Redis to hold them as an intset (whose replies come in that order).
fn small_ints<'a>(members: impl Iterator<Item = &'a [u8]>, n: usize) -> Option<Vec<i64>> {
    if n > INTSET_MAX_ENTRIES {
        return None;
    }
    let mut ints: Vec<i64> = members.map(parse_i64).collect::<Option<_>>()?;
    ints.sort_unstable();
    Some(ints)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    impl Set {
        /// Checks the representation's invariants against `model`.
        fn check(&self, model: &BTreeSet<Vec<u8>>) {
            assert_eq!(self.len(), model.len());
            match &self.repr {
                Repr::Ints(v) => {
                    assert!(v.len() <= INTSET_MAX_ENTRIES);
                    assert!(v.windows(2).all(|w| w[0] < w[1]), "ascending");
                }
                Repr::Sorted(s) => {
                    assert!(s.members.windows(2).all(|w| w[0] < w[1]), "ascending");
                    let heap: usize = s.members.iter().map(|m| m.len()).sum();
                    assert_eq!(s.heap, heap, "the running total");
                }
                Repr::Table(t) => t.check(),
            }
            for m in model {
                assert!(self.contains(m));
            }
            let mut all: Vec<Vec<u8>> = self.iter().map(|m| m.with(<[u8]>::to_vec)).collect();
            all.sort();
            assert_eq!(all, model.iter().cloned().collect::<Vec<_>>());
            let data = Bytes::from(self.encode());
            let want: Vec<&Vec<u8>> = model.iter().collect();
            assert_eq!(data, Bytes::from(encode(&want)), "the sorted encoding");
            let back = Set::decode(&data).unwrap();
            assert_eq!(back.len(), model.len());
            assert!(model.iter().all(|m| back.contains(m)));
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(Vec<u8>),
        Remove(Vec<u8>),
        Take(usize),
        InsertInts(u16, u16),
        RemoveInts(u16, u16),
        Retain(u8),
        InsertAll(Vec<Vec<u8>>),
        RemoveAll(Vec<Vec<u8>>),
        PopRandom(u8),
        /// Through the stored form and back (sorted slices or integers), then maybe settled.
        Reload(bool),
    }

    fn member() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (-20i64..20).prop_map(|i| i.to_string().into_bytes()),
            prop::collection::vec(any::<u8>(), 0..6),
            Just(b"007".to_vec()),
            Just(b"-0".to_vec()),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            member().prop_map(Op::Insert),
            member().prop_map(Op::Remove),
            any::<usize>().prop_map(Op::Take),
            (0u16..1000, 1u16..600).prop_map(|(f, n)| Op::InsertInts(f, n)),
            (0u16..1000, 1u16..900).prop_map(|(f, n)| Op::RemoveInts(f, n)),
            any::<u8>().prop_map(Op::Retain),
            prop::collection::vec(member(), 0..12).prop_map(Op::InsertAll),
            prop::collection::vec(member(), 0..12).prop_map(Op::RemoveAll),
            any::<u8>().prop_map(Op::PopRandom),
            any::<bool>().prop_map(Op::Reload),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Every operation against a `BTreeSet`, with the representation's invariants (the
        /// index, the running memory total, the encoding) checked after each.
        #[test]
        fn a_set_matches_a_btreeset(ops in prop::collection::vec(op(), 1..30)) {
            let mut s = Set::new();
            let mut model: BTreeSet<Vec<u8>> = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(m) => prop_assert_eq!(s.insert(&m), model.insert(m)),
                    Op::Remove(m) => prop_assert_eq!(s.remove(&m), model.remove(&m)),
                    Op::Take(i) => {
                        let at = if s.is_empty() { i } else { i % s.len() };
                        match s.take(at) {
                            Some(m) => prop_assert!(model.remove(&m[..])),
                            None => prop_assert!(model.is_empty()),
                        }
                    }
                    Op::InsertInts(from, n) => {
                        for i in from..from + n {
                            let m = i.to_string().into_bytes();
                            prop_assert_eq!(s.insert(&m), model.insert(m));
                        }
                    }
                    Op::RemoveInts(from, n) => {
                        for i in from..from + n {
                            let m = i.to_string().into_bytes();
                            prop_assert_eq!(s.remove(&m), model.remove(&m));
                        }
                    }
                    Op::InsertAll(ms) => {
                        let refs: Vec<&[u8]> = ms.iter().map(Vec::as_slice).collect();
                        let before = model.len();
                        model.extend(ms.iter().cloned());
                        prop_assert_eq!(s.insert_all(&refs), model.len() - before);
                    }
                    Op::RemoveAll(ms) => {
                        let refs: Vec<&[u8]> = ms.iter().map(Vec::as_slice).collect();
                        let before = model.len();
                        for m in &ms {
                            model.remove(m);
                        }
                        prop_assert_eq!(s.remove_all(&refs), before - model.len());
                    }
                    Op::PopRandom(c) => {
                        let c = (c as usize).min(s.len());
                        let popped = s.pop_random(c, &mut rand::rng());
                        prop_assert_eq!(popped.len(), c);
                        for m in popped {
                            prop_assert!(model.remove(&m[..]), "popped once");
                        }
                    }
                    Op::Reload(settle) => {
                        s = Set::decode(&Bytes::from(s.encode())).unwrap();
                        if settle {
                            s.settle();
                        }
                    }
                    Op::Retain(k) => {
                        let keep = |m: &[u8]| m.iter().map(|&b| b as usize).sum::<usize>() % 3 != k as usize % 3;
                        s.retain(keep);
                        model.retain(|m| keep(m));
                    }
                }
                s.check(&model);
            }
        }

        #[test]
        fn decoding_random_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = Set::decode(&Bytes::from(bytes));
        }
    }

    #[test]
    fn integers_until_set_max_intset_entries_then_a_table() {
        let mut s = Set::from_members((0..INTSET_MAX_ENTRIES).map(|i| i.to_string()));
        assert!(s.is_ints());
        assert!(s.insert(b"-1"));
        assert!(!s.is_ints(), "a 513th member");
        let mut s = Set::from_members(["1", "2"]);
        s.insert(b"01");
        assert!(!s.is_ints(), "not a string2ll integer");
        assert!(s.remove(b"01"));
        assert!(!s.is_ints(), "a table stays one, as in Redis");
        let back = Set::decode(&Bytes::from(s.encode())).unwrap();
        assert!(back.is_ints(), "decoded as Redis would load it");
        let mut order = Vec::new();
        Set::from_members(["10", "9", "-1"]).for_each_ordered(|m| order.push(m.to_vec()));
        assert_eq!(order, [&b"-1"[..], b"9", b"10"]);
    }

    /// Memory is a running total: it grows with the members, gives back most of it as they
    /// go, and stays within a small multiple of the members' bytes.
    #[test]
    fn memory_follows_the_members() {
        let mut s = Set::new();
        let small = s.memory();
        let n = 100_000usize;
        for i in 0..n {
            s.insert(format!("member:{i}").as_bytes());
        }
        let full = s.memory();
        // Each member: 16 bytes of text in the heap, a 16-byte box, about 9 bytes of index.
        assert!(full > n * 32, "{full}");
        assert!(full < n * 80, "{full}");
        for i in 0..n - 10 {
            assert!(s.remove(format!("member:{i}").as_bytes()));
        }
        assert_eq!(s.len(), 10);
        assert!(s.memory() < full / 100, "shrunk: {}", s.memory());
        let ints = Set::from_members((0..512).map(|i| i.to_string()));
        assert!(ints.memory() <= small + 512 * 8 + 64, "{}", ints.memory());
    }
}
