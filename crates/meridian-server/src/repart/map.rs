//! The dispatcher's key → shard map (spec `repartitioning.md` §1).
//!
//! Two layers, so that installing a partition of 10⁶ keys does not stall dispatch:
//! - the **base**, an immutable map shared by `Arc`, built whole by the partitioner off the
//!   dispatch path and installed by one pointer swap;
//! - the **overlay**, the keys the dispatcher placed itself since that swap (new keys, which
//!   go round-robin).
//!
//! A lookup reads the overlay first. A swap costs the dispatcher O(overlay): under `drop`
//! the overlay is emptied (its keys go round-robin again at their next access, as kvpaxos's
//! do), under `keep` only the keys the new base places leave it. The old base and overlay
//! are handed back to the caller to be freed elsewhere.

use super::config::UnmappedPolicy;
use meridian_balance::repart::ShardId;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// What a key must be to be placed: hashed, ordered (the graph's vertices are sorted by
/// key), and storable.
///
/// Requests name their keys borrowed (`Ref`: a slice of a connection's read buffer for
/// `Bytes`), so a lookup copies nothing; the map and the graph keep owned copies.
pub trait Key: Clone + Eq + Hash + Ord + Send + Sync + 'static + Borrow<Self::Ref> {
    /// The borrowed form requests name keys by.
    type Ref: ?Sized + Eq + Hash;
    /// The owned copy the map and the graph keep.
    fn from_ref(r: &Self::Ref) -> Self;
}

impl Key for u32 {
    type Ref = u32;
    fn from_ref(r: &u32) -> Self {
        *r
    }
}

impl Key for bytes::Bytes {
    type Ref = [u8];
    fn from_ref(r: &[u8]) -> Self {
        bytes::Bytes::copy_from_slice(r)
    }
}

/// The build hasher of the executor's maps (keys from clients: seeded per process by std).
pub type KeyHasher = std::hash::RandomState;

/// An immutable key → shard map, shared between the dispatcher and the partitioner.
pub type Base<K> = Arc<HashMap<K, ShardId, KeyHasher>>;

/// What a swap leaves behind for the caller to drop off the dispatch path.
pub struct Leftovers<K> {
    /// The previous base.
    pub base: Base<K>,
    /// The dropped overlay (empty under `keep`).
    pub overlay: HashMap<K, ShardId, KeyHasher>,
}

/// The key → shard map and the round-robin cursor for new keys.
pub struct ShardMap<K> {
    base: Base<K>,
    overlay: HashMap<K, ShardId, KeyHasher>,
    next: ShardId,
    shards: ShardId,
}

impl<K: Key> ShardMap<K> {
    /// An empty map over `shards` shards (at least 1).
    pub fn new(shards: u32) -> Self {
        Self {
            base: Arc::default(),
            overlay: HashMap::default(),
            next: 0,
            shards: shards.max(1),
        }
    }

    /// The number of shards.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The shard `key` is mapped to, if any.
    pub fn get(&self, key: &K::Ref) -> Option<ShardId> {
        self.overlay
            .get(key)
            .or_else(|| self.base.get(key))
            .copied()
    }

    /// The spec's `shards_of`: the shard of every key of one request, placing the request's
    /// new keys all on the next round-robin shard. `each` receives every key's shard in
    /// order; the returned set is sorted and deduplicated in `set`.
    pub fn place<'k>(
        &mut self,
        keys: impl IntoIterator<Item = &'k K::Ref>,
        each: &mut Vec<ShardId>,
        set: &mut Vec<ShardId>,
    ) where
        K::Ref: 'k,
    {
        each.clear();
        set.clear();
        let fresh = self.next;
        let mut new = false;
        for k in keys {
            let s = match self.get(k) {
                Some(s) => s,
                None => {
                    new = true;
                    self.overlay.insert(K::from_ref(k), fresh);
                    fresh
                }
            };
            each.push(s);
            set.push(s);
        }
        if new {
            self.next = (self.next + 1) % self.shards;
        }
        set.sort_unstable();
        set.dedup();
    }

    /// The current base, for the partitioner to merge its new labels into.
    pub fn base(&self) -> Base<K> {
        self.base.clone()
    }

    /// Every mapped key (a key in both layers counted once).
    pub fn len(&self) -> usize {
        self.base.len()
            + self
                .overlay
                .keys()
                .filter(|k| !self.base.contains_key((*k).borrow()))
                .count()
    }

    /// Whether no key is mapped.
    pub fn is_empty(&self) -> bool {
        self.base.is_empty() && self.overlay.is_empty()
    }

    /// Installs `base` (every key the new partition places, and under `keep` every key the
    /// old base placed that it does not), returning what the caller should free elsewhere.
    pub fn swap(&mut self, base: Base<K>, policy: UnmappedPolicy) -> Leftovers<K> {
        let overlay = match policy {
            UnmappedPolicy::Drop => std::mem::take(&mut self.overlay),
            UnmappedPolicy::Keep => {
                self.overlay.retain(|k, _| !base.contains_key(k.borrow()));
                HashMap::default()
            }
        };
        let old = std::mem::replace(&mut self.base, base);
        Leftovers { base: old, overlay }
    }
}

/// Builds the next base from a partition: `keys[v]` goes to `labels[v]`; under `keep`, every
/// key of `old` not among `keys` keeps its shard. Runs on the partitioner, not the
/// dispatcher.
pub fn next_base<K: Key>(
    old: &Base<K>,
    keys: &[K],
    labels: &[ShardId],
    policy: UnmappedPolicy,
) -> Base<K> {
    let mut m: HashMap<K, ShardId, KeyHasher> = match policy {
        UnmappedPolicy::Drop => HashMap::with_capacity_and_hasher(keys.len(), KeyHasher::new()),
        UnmappedPolicy::Keep => {
            let mut m =
                HashMap::with_capacity_and_hasher(old.len().max(keys.len()), KeyHasher::new());
            m.extend(old.iter().map(|(k, s)| (k.clone(), *s)));
            m
        }
    };
    m.extend(keys.iter().cloned().zip(labels.iter().copied()));
    Arc::new(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(m: &mut ShardMap<u32>, keys: &[u32]) -> (Vec<u32>, Vec<u32>) {
        let (mut each, mut set) = (Vec::new(), Vec::new());
        m.place(keys.iter(), &mut each, &mut set);
        (each, set)
    }

    #[test]
    fn new_keys_of_one_request_share_the_next_round_robin_shard() {
        let mut m = ShardMap::new(3);
        assert_eq!(place(&mut m, &[1]), (vec![0], vec![0]));
        assert_eq!(place(&mut m, &[2, 3]), (vec![1, 1], vec![1]));
        // 1 is known (0), 4 is new (2): the request spans both.
        assert_eq!(place(&mut m, &[1, 4]), (vec![0, 2], vec![0, 2]));
        // Only known keys: the cursor does not move.
        assert_eq!(place(&mut m, &[3]), (vec![1], vec![1]));
        assert_eq!(place(&mut m, &[5]), (vec![0], vec![0]));
        assert_eq!(m.len(), 5);
    }

    #[test]
    fn swap_keep_and_drop() {
        for policy in [UnmappedPolicy::Keep, UnmappedPolicy::Drop] {
            let mut m = ShardMap::new(4);
            for k in 0..8u32 {
                place(&mut m, &[k]);
            }
            // The partition places 0..4 on shard 3.
            let keys = [0u32, 1, 2, 3];
            let base = next_base(&m.base(), &keys, &[3; 4], policy);
            let left = m.swap(base, policy);
            for k in 0..4 {
                assert_eq!(m.get(&k), Some(3));
            }
            match policy {
                UnmappedPolicy::Keep => {
                    assert!(left.overlay.is_empty());
                    for k in 4..8u32 {
                        assert_eq!(m.get(&k), Some(k % 4), "key {k} kept");
                    }
                }
                UnmappedPolicy::Drop => {
                    assert_eq!(left.overlay.len(), 8);
                    for k in 4..8u32 {
                        assert_eq!(m.get(&k), None, "key {k} dropped");
                    }
                }
            }
            // A second swap under keep carries the old base's other keys over.
            let base = next_base(&m.base(), &[7], &[0], policy);
            m.swap(base, policy);
            assert_eq!(m.get(&7), Some(0));
            let kept = (policy == UnmappedPolicy::Keep).then_some(3);
            assert_eq!(m.get(&0), kept, "{policy:?}");
        }
    }
}
