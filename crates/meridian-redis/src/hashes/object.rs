//! [`Hash`]: a hash in memory, what a view that keeps objects holds for a key of kind
//! [`Kind::Hash`], and what every hash command changes or reads.
//!
//! Two representations:
//! - **a table**: each field and its value packed in one allocation
//!   (`[field length, LEB128][field][value]`) in a dense `Vec`, plus a hash table of their
//!   positions (std's seeded SipHash, as Redis's dict). Get, set and a uniform random field
//!   are O(1). One allocation per field is what keeps a large hash near Redis's own memory
//!   (a field and its value as two allocations cost a third more). The list and the table
//!   shrink when a quarter full.
//!
//!   While the table has never held more than [`COMPACT_MAX`] fields it is **compact**, as
//!   Redis's listpack is: the list keeps insertion order (a deletion closes the gap, O(n) for
//!   n ≤ 128) and the hash answers in that order, as Redis answers a small hash. Past that,
//!   as Redis converts a listpack to a dict for good, a deletion moves the last entry into
//!   the hole (`swap_remove`, O(1)) and the hash answers in field order.
//! - **sorted slices**: what decoding the stored form gives — a map of `Bytes` slices of the
//!   stored value (no copy), in field order. A view of bytes decodes, changes and re-encodes
//!   a hash on every command; this makes that one copy each way and O(log n) per field. A
//!   held hash leaves it at its first write ([`Hash::settle`]: O(n) once).
//!
//! Whatever the representation, [`Collection::memory`] is O(1) (a running total of the
//! entries' heap bytes) and the stored form is [`meridian_core::hash`]'s field-ordered
//! encoding: [`Collection::encode`] sorts a table's entries.

use crate::collection::{Collection, Typed};
use crate::dense_table::{DenseTable, KeyOf};
use crate::error::{RedisError, Result};
use crate::view::Kind;
use bytes::Bytes;
use meridian_core::hash::Fields;
use std::any::Any;

/// A held hash keeps insertion order while it has never held more fields than this: Redis's
/// default `hash-max-listpack-entries`.
pub const COMPACT_MAX: usize = 128;

/// A hash in memory. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Hash {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// As decoded from the stored form: slices of the stored value. See [`Hash::settle`].
    Sorted(Sorted),
    Table(Table),
}

impl Default for Repr {
    /// A new hash is a table from its first field, so a compact one keeps the order of the
    /// fields of the command that created it.
    fn default() -> Self {
        Repr::Table(table(0))
    }
}

/// Fields in field order, and their bytes (fields and values) in total.
#[derive(Clone, Debug, Default)]
struct Sorted {
    fields: Fields,
    heap: usize,
}

/// A field and its value in one allocation: `[field length, LEB128][field][value]`.
fn pack(field: &[u8], value: &[u8]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(field.len() + value.len() + 4);
    meridian_core::leb128::put(&mut out, field.len() as u64);
    out.extend_from_slice(field);
    out.extend_from_slice(value);
    out.into_boxed_slice()
}

/// The field and value of a [`pack`]ed entry (empty parts for bytes `pack` did not make,
/// never a panic). Every lookup's comparison unpacks: a field shorter than 128 bytes (one
/// length byte) takes the short path.
#[inline]
fn unpack(entry: &[u8]) -> (&[u8], &[u8]) {
    if let Some((&n, rest)) = entry.split_first()
        && n < 0x80
    {
        return rest.split_at_checked(usize::from(n)).unwrap_or((rest, &[]));
    }
    let mut at = 0;
    let n = meridian_core::leb128::get(entry, &mut at)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let rest = entry.get(at..).unwrap_or_default();
    rest.split_at_checked(n).unwrap_or((rest, &[]))
}

/// The field of a [`pack`]ed entry.
#[inline]
fn field_of(entry: &[u8]) -> &[u8] {
    unpack(entry).0
}

/// A table's entries are keyed by their field.
#[derive(Clone, Copy, Debug)]
struct ByField;

impl KeyOf for ByField {
    #[inline]
    fn key(entry: &[u8]) -> &[u8] {
        field_of(entry)
    }
}

type Table = DenseTable<ByField>;

/// An empty table with room for `n` fields.
fn table(n: usize) -> Table {
    Table::with_capacity(n, COMPACT_MAX)
}

/// Sets `field` to `value` in `t`: whether the field is new. A value of the old one's length
/// is written over it in place (no allocation).
fn table_insert(t: &mut Table, field: &[u8], value: &[u8]) -> bool {
    let Ok(at) = t.find_or_push(field, || pack(field, value)) else {
        return true;
    };
    let same_len = t
        .entries()
        .get(at)
        .is_some_and(|e| unpack(e).1.len() == value.len());
    if same_len && let Some(e) = t.entry_mut(at) {
        let value_at = e.len() - value.len();
        e[value_at..].copy_from_slice(value);
    } else {
        t.replace(at, pack(field, value));
    }
    false
}

impl Hash {
    /// An empty hash.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of fields.
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Sorted(s) => s.fields.len(),
            Repr::Table(t) => t.len(),
        }
    }

    /// Whether there is no field.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match &self.repr {
            Repr::Sorted(s) => s.fields.get(field).map(|v| &v[..]),
            Repr::Table(t) => t.position(field).map(|at| unpack(&t.entries()[at]).1),
        }
    }

    /// Whether `field` exists.
    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Sets `field` to `value`: whether the field is new.
    pub fn insert(&mut self, field: &[u8], value: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Table(t) => table_insert(t, field, value),
            Repr::Sorted(s) => {
                let added = field.len() + value.len();
                match s
                    .fields
                    .insert(Bytes::copy_from_slice(field), Bytes::copy_from_slice(value))
                {
                    Some(old) => {
                        s.heap = s.heap.saturating_sub(old.len()).saturating_add(value.len());
                        false
                    }
                    None => {
                        s.heap = s.heap.saturating_add(added);
                        true
                    }
                }
            }
        }
    }

    /// Deletes `field`: whether it existed.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Table(t) => t.remove(field),
            Repr::Sorted(s) => match s.fields.remove_entry(field) {
                Some((f, v)) => {
                    s.heap = s.heap.saturating_sub(f.len() + v.len());
                    true
                }
                None => false,
            },
        }
    }

    /// Every field and its value, in the representation's order (positions as
    /// [`Hash::indexed`] numbers them).
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match &self.repr {
            Repr::Sorted(s) => Box::new(s.fields.iter().map(|(f, v)| (&f[..], &v[..]))),
            Repr::Table(t) => Box::new(t.entries().iter().map(|e| unpack(e))),
        }
    }

    /// Every field and its value in the order HGETALL, HKEYS and HVALS answer: insertion
    /// order for a compact table (as Redis answers a listpack), else field order (sorted for
    /// the call, O(n log n), for a large table).
    pub fn ordered(&self) -> Vec<(&[u8], &[u8])> {
        let mut all: Vec<(&[u8], &[u8])> = self.iter().collect();
        if matches!(&self.repr, Repr::Table(t) if !t.in_order()) {
            all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        all
    }

    /// Every field and its value in field order (the stored form's).
    fn by_field(&self) -> Vec<(&[u8], &[u8])> {
        let mut all: Vec<(&[u8], &[u8])> = self.iter().collect();
        if matches!(self.repr, Repr::Table(_)) {
            all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        all
    }

    /// Runs `f` with a lookup of the entry at a position (below [`Hash::len`]), for picks by
    /// position (HRANDFIELD, HSCAN): O(1) per lookup on a table; a decoded hash's entries are
    /// listed once, in O(n), for the call (its decode was O(n) already).
    pub fn indexed<'h, R>(
        &'h self,
        f: impl FnOnce(&dyn Fn(usize) -> Option<(&'h [u8], &'h [u8])>) -> R,
    ) -> R {
        match &self.repr {
            Repr::Table(t) => f(&|i| t.entries().get(i).map(|e| unpack(e))),
            Repr::Sorted(_) => {
                let all: Vec<(&[u8], &[u8])> = self.iter().collect();
                f(&|i| all.get(i).copied())
            }
        }
    }

    /// Makes a decoded hash (slices of its stored value) the table a held hash keeps, once,
    /// in O(n), so that every change after is O(1). A view of bytes never settles.
    pub fn settle(&mut self) {
        let Repr::Sorted(s) = &self.repr else {
            return;
        };
        let mut t = table(s.fields.len());
        for (f, v) in &s.fields {
            t.push_new(pack(f, v));
        }
        self.repr = Repr::Table(t);
    }

    /// The fields as a map (copies of a table's entries; the slices of a decoded hash).
    pub fn to_fields(&self) -> Fields {
        match &self.repr {
            Repr::Sorted(s) => s.fields.clone(),
            Repr::Table(t) => t
                .entries()
                .iter()
                .map(|e| {
                    let (f, v) = unpack(e);
                    (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v))
                })
                .collect(),
        }
    }

    /// A hash of `fields` (decoded form: it settles when a view keeps it).
    pub fn from_fields(fields: Fields) -> Self {
        let heap = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
        Hash {
            repr: Repr::Sorted(Sorted { fields, heap }),
        }
    }
}

impl Collection for Hash {
    fn kind(&self) -> Kind {
        Kind::Hash
    }

    fn encode(&self) -> Vec<u8> {
        meridian_core::hash::encode(self.by_field().into_iter())
    }

    fn is_empty(&self) -> bool {
        Hash::is_empty(self)
    }

    fn len(&self) -> usize {
        Hash::len(self)
    }

    fn settle(&mut self) {
        Hash::settle(self)
    }

    fn memory(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.repr {
                // A map node per field: the two slices' headers and the node's share.
                Repr::Sorted(s) => s.fields.len() * 2 * std::mem::size_of::<Bytes>() + s.heap,
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

impl Typed for Hash {
    const NAME: &'static str = "hash";
    const KIND: Kind = Kind::Hash;

    /// The sorted slices of `data` (no copy; see [`Hash::settle`]): every length, the strict
    /// field order and the end are checked, so damage is `Corrupt`.
    fn decode(data: &Bytes) -> Result<Self> {
        let fields = meridian_core::hash::decode(data).map_err(|b| RedisError::Corrupt(b.0))?;
        Ok(Hash::from_fields(fields))
    }

    fn stored_len(data: &Bytes) -> Result<usize> {
        meridian_core::hash::len(data).map_err(|b| RedisError::Corrupt(b.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, u8),
        Del(u8),
        Settle,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..40, any::<u8>()).prop_map(|(f, v)| Op::Set(f, v)),
            3 => (0u8..40).prop_map(Op::Del),
            1 => Just(Op::Settle),
        ]
    }

    fn field(f: u8) -> Vec<u8> {
        // Fields of several lengths, so packing's length prefix is exercised.
        format!("f{}", "x".repeat(usize::from(f % 7)) + &f.to_string()).into_bytes()
    }

    proptest! {
        /// Any sequence of sets and deletes, settled or not at any point, agrees with a
        /// `BTreeMap` model: replies, length, lookups, order, and the stored form, which
        /// decodes back to the same hash.
        #[test]
        fn agrees_with_a_btreemap(ops in proptest::collection::vec(op(), 0..200)) {
            let mut h = Hash::new();
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(f, v) => {
                        let value = vec![v; usize::from(v % 5)];
                        let created = model.insert(field(f), value.clone()).is_none();
                        prop_assert_eq!(h.insert(&field(f), &value), created);
                    }
                    Op::Del(f) => {
                        prop_assert_eq!(h.remove(&field(f)), model.remove(&field(f)).is_some());
                    }
                    Op::Settle => h.settle(),
                }
                prop_assert_eq!(h.len(), model.len());
                if let Repr::Table(t) = &h.repr {
                    t.check();
                }
            }
            for f in 0..40u8 {
                prop_assert_eq!(h.get(&field(f)), model.get(&field(f)).map(|v| &v[..]));
            }
            let listed: Vec<(Vec<u8>, Vec<u8>)> =
                h.by_field().into_iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
            prop_assert_eq!(&listed, &expected);
            let mut answered: Vec<(Vec<u8>, Vec<u8>)> =
                h.ordered().into_iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            answered.sort();
            prop_assert_eq!(&answered, &expected);
            h.indexed(|at| {
                let mut by_position: Vec<(Vec<u8>, Vec<u8>)> = (0..model.len())
                    .map(|i| at(i).map(|(f, v)| (f.to_vec(), v.to_vec())).unwrap())
                    .collect();
                by_position.sort();
                assert_eq!(by_position, expected);
                assert!(at(model.len()).is_none());
            });
            let back = Hash::decode(&Bytes::from(h.encode())).unwrap();
            prop_assert_eq!(back.to_fields(), h.to_fields());
        }
    }

    fn fields(h: &Hash) -> Vec<String> {
        h.ordered()
            .into_iter()
            .map(|(f, _)| String::from_utf8(f.to_vec()).unwrap())
            .collect()
    }

    /// A held hash answers in insertion order (deletions keep the rest in order) while it
    /// has never held more than `COMPACT_MAX` fields, as Redis's listpack; then in field
    /// order for good, as Redis's dict never converts back.
    #[test]
    fn a_compact_hash_keeps_insertion_order_until_it_outgrows_it() {
        let mut h = Hash::new();
        h.settle();
        for f in ["z", "b", "y", "a"] {
            h.insert(f.as_bytes(), b"1");
        }
        h.remove(b"b");
        h.insert(b"y", b"2");
        assert_eq!(fields(&h), ["z", "y", "a"]);
        assert_eq!(
            h.get(b"a"),
            Some(&b"1"[..]),
            "positions repointed after the gap closed"
        );
        for i in 0..COMPACT_MAX {
            h.insert(format!("n{i:03}").as_bytes(), b"1");
        }
        for i in 0..COMPACT_MAX {
            h.remove(format!("n{i:03}").as_bytes());
        }
        assert_eq!(fields(&h), ["a", "y", "z"]);
        let mut decoded = Hash::decode(&Bytes::from(h.encode())).unwrap();
        assert_eq!(fields(&decoded), ["a", "y", "z"], "stored in field order");
        decoded.settle();
        decoded.insert(b"b", b"1");
        assert_eq!(
            fields(&decoded),
            ["a", "y", "z", "b"],
            "a settled small hash is compact"
        );
    }

    #[test]
    fn memory_follows_the_entries() {
        let mut h = Hash::new();
        h.settle();
        let empty = h.memory();
        for i in 0..1000 {
            h.insert(format!("field:{i}").as_bytes(), b"value");
        }
        let full = h.memory();
        assert!(full > empty + 1000 * 16, "{empty} -> {full}");
        for i in 0..1000 {
            h.remove(format!("field:{i}").as_bytes());
        }
        assert!(h.is_empty());
        assert!(h.memory() < full / 4, "{full} -> {}", h.memory());
    }

    #[test]
    fn unpack_never_panics_on_foreign_bytes() {
        for bytes in [
            &[][..],
            &[0x80],
            &[5, b'a'],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        ] {
            let (f, v) = unpack(bytes);
            assert!(f.len() + v.len() <= bytes.len());
        }
        assert_eq!(
            unpack(&pack(b"field", b"value")),
            (&b"field"[..], &b"value"[..])
        );
    }
}
