//! [`DenseTable`]: byte-string entries in a dense `Vec`, indexed by a hash table of their
//! positions keyed by a part of each entry — the in-memory form of a large set (the entry is
//! the member) and of a hash (the entry packs a field and its value; the field is the key).
//!
//! What it guarantees: lookup, insert and delete by key are O(1) (std's seeded SipHash, as
//! Redis's dict), and so is the entry at a uniform position (a random member). A deletion
//! moves the last entry into the hole (`swap_remove`) and repoints its slot — unless the
//! table **keeps insertion order**, which it does while it has never held more than its
//! `order_limit` entries (Redis's listpack before it converts to a dict for good): then a
//! deletion closes the gap, O(n) for such a small n. The list and the index shrink when a
//! quarter full, and [`DenseTable::memory`] is O(1) from a running total of entry bytes.

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use std::hash::{BuildHasher, RandomState};
use std::marker::PhantomData;

/// The part of an entry a [`DenseTable`] is keyed by.
pub(crate) trait KeyOf {
    /// The key of `entry` (all of it, or a part).
    fn key(entry: &[u8]) -> &[u8];
}

/// The heap bytes an allocation of `len` bytes takes, approximately (allocations come in
/// words).
pub(crate) fn heap_of(len: usize) -> usize {
    len.div_ceil(8).saturating_mul(8)
}

/// See the module docs.
pub(crate) struct DenseTable<K> {
    entries: Vec<Box<[u8]>>,
    index: HashTable<usize>,
    hasher: RandomState,
    /// The entries' heap bytes ([`heap_of`] each), kept as they come and go.
    heap: usize,
    /// Keeps insertion order while it has never held more entries than this.
    order_limit: usize,
    /// Never held more than `order_limit` entries.
    in_order: bool,
    _key: PhantomData<K>,
}

impl<K> Clone for DenseTable<K> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
            index: self.index.clone(),
            hasher: self.hasher.clone(),
            heap: self.heap,
            order_limit: self.order_limit,
            in_order: self.in_order,
            _key: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for DenseTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DenseTable")
            .field("len", &self.entries.len())
            .field("heap", &self.heap)
            .field("in_order", &self.in_order)
            .finish_non_exhaustive()
    }
}

impl<K: KeyOf> DenseTable<K> {
    /// An empty table with room for `n` entries, keeping insertion order while it has never
    /// held more than `order_limit` (0: never).
    pub(crate) fn with_capacity(n: usize, order_limit: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            hasher: RandomState::new(),
            heap: 0,
            order_limit,
            in_order: order_limit > 0,
            _key: PhantomData,
        }
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entries, in the table's order.
    pub(crate) fn entries(&self) -> &[Box<[u8]>] {
        &self.entries
    }

    /// Whether the entries are in insertion order (see the module docs).
    pub(crate) fn in_order(&self) -> bool {
        self.in_order
    }

    /// The position of the entry keyed `key`.
    pub(crate) fn position(&self, key: &[u8]) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(self.hasher.hash_one(key), |&i| {
                entries.get(i).is_some_and(|e| K::key(e) == key)
            })
            .copied()
    }

    /// The position of the entry keyed `key` (`Ok`), or, when there is none, appends
    /// `make()` — whose key must be `key` — and answers `Err` with its position.
    pub(crate) fn find_or_push(
        &mut self,
        key: &[u8],
        make: impl FnOnce() -> Box<[u8]>,
    ) -> Result<usize, usize> {
        let DenseTable {
            entries,
            index,
            hasher,
            heap,
            order_limit,
            in_order,
            ..
        } = self;
        let slot = index.entry(
            hasher.hash_one(key),
            |&i| entries.get(i).is_some_and(|e| K::key(e) == key),
            |&i| hasher.hash_one(entries.get(i).map_or(&[][..], |e| K::key(e))),
        );
        match slot {
            Entry::Occupied(o) => Ok(*o.get()),
            Entry::Vacant(v) => {
                let entry = make();
                *heap = heap.saturating_add(heap_of(entry.len()));
                *in_order &= entries.len() < *order_limit;
                let at = entries.len();
                v.insert(at);
                entries.push(entry);
                Err(at)
            }
        }
    }

    /// Appends `entry`, whose key must not be in the table.
    pub(crate) fn push_new(&mut self, entry: Box<[u8]>) {
        let DenseTable {
            entries,
            index,
            hasher,
            heap,
            order_limit,
            in_order,
            ..
        } = self;
        let h = hasher.hash_one(K::key(&entry));
        *heap = heap.saturating_add(heap_of(entry.len()));
        *in_order &= entries.len() < *order_limit;
        let at = entries.len();
        entries.push(entry);
        index.insert_unique(h, at, |&i| {
            hasher.hash_one(entries.get(i).map_or(&[][..], |e| K::key(e)))
        });
    }

    /// The entry at `at`, to change in place without changing its key or length.
    pub(crate) fn entry_mut(&mut self, at: usize) -> Option<&mut [u8]> {
        self.entries.get_mut(at).map(|e| &mut e[..])
    }

    /// Replaces the entry at `at` by `entry`, which has the same key.
    pub(crate) fn replace(&mut self, at: usize, entry: Box<[u8]>) {
        if let Some(old) = self.entries.get_mut(at) {
            self.heap = self
                .heap
                .saturating_sub(heap_of(old.len()))
                .saturating_add(heap_of(entry.len()));
            *old = entry;
        }
    }

    /// Removes the entry keyed `key`: whether there was one.
    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        let h = self.hasher.hash_one(key);
        let entries = &self.entries;
        match self
            .index
            .find_entry(h, |&i| entries.get(i).is_some_and(|e| K::key(e) == key))
        {
            Ok(slot) => {
                let (at, _) = slot.remove();
                self.unlink(at);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes the entry at `at` (`None` out of range) and returns it.
    pub(crate) fn take(&mut self, at: usize) -> Option<Box<[u8]>> {
        let h = self.hasher.hash_one(K::key(self.entries.get(at)?));
        if let Ok(slot) = self.index.find_entry(h, |&i| i == at) {
            slot.remove();
        }
        Some(self.unlink(at))
    }

    /// Takes the entry at `at` out of the list once its slot has left the index: closing
    /// the gap while in insertion order, else moving the last entry into it.
    fn unlink(&mut self, at: usize) -> Box<[u8]> {
        let gone = if self.in_order {
            let gone = self.entries.remove(at);
            for slot in self.index.iter_mut() {
                if *slot > at {
                    *slot -= 1;
                }
            }
            gone
        } else {
            let last = self.entries.len() - 1;
            if at != last {
                let h = self.hasher.hash_one(K::key(&self.entries[last]));
                if let Some(slot) = self.index.find_mut(h, |&i| i == last) {
                    *slot = at;
                }
            }
            self.entries.swap_remove(at)
        };
        self.heap = self.heap.saturating_sub(heap_of(gone.len()));
        self.shrink();
        gone
    }

    /// Gives memory back once the list is a quarter full (at most once per halving, so
    /// deletions stay O(1) amortized).
    fn shrink(&mut self) {
        let len = self.entries.len();
        if self.entries.capacity() > 64 && len < self.entries.capacity() / 4 {
            let DenseTable {
                entries,
                index,
                hasher,
                ..
            } = self;
            entries.shrink_to(len * 2);
            index.shrink_to(len * 2, |&i| {
                hasher.hash_one(entries.get(i).map_or(&[][..], |e| K::key(e)))
            });
        }
    }

    /// The bytes it holds, approximately, in O(1).
    pub(crate) fn memory(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.heap
            + self.index.allocation_size()
    }

    /// Checks the index and the running total against the entries (tests).
    #[cfg(test)]
    pub(crate) fn check(&self) {
        assert_eq!(self.index.len(), self.entries.len());
        for (i, e) in self.entries.iter().enumerate() {
            assert_eq!(self.position(K::key(e)), Some(i), "every entry indexed");
        }
        let heap: usize = self.entries.iter().map(|e| heap_of(e.len())).sum();
        assert_eq!(self.heap, heap, "the running total");
    }
}
