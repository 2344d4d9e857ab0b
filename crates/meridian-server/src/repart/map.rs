//! The dispatcher's key → shard map (spec `repartitioning.md` §1).
//!
//! Two layers, so that installing a partition of 10⁶ keys does not stall dispatch:
//! - the **base**, an immutable map shared by `Arc`, built whole by the partitioner off the
//!   dispatch path and installed by one pointer swap;
//! - the **overlay**, the keys the dispatcher placed itself since that swap (new keys, under
//!   `new_keys = round_robin`; under `hash` a new key's shard is a function of the key, and
//!   nothing is recorded). It is split into [`OVERLAY_SEGMENTS`] hash maps by a hash of the key,
//!   so that growing it rehashes one segment at a time: a map that only grows (round-robin
//!   never swaps) would otherwise copy all of its 10⁶ keys on the dispatch path at once.
//!
//! A lookup reads the overlay first. A swap costs the dispatcher O(overlay): under `drop`
//! the overlay is emptied (its keys go round-robin again at their next access, as kvpaxos's
//! do), under `keep` only the keys the new base places leave it. The old base and overlay
//! are handed back to the caller to be freed elsewhere.
//!
//! Both layers, and the co-access graph, are keyed by a key's 64-bit id ([`key_id`]), not
//! by the key: a lookup hashes the key once and probes a table of integers, without
//! following a pointer to the key's bytes and comparing them — on a 100k-key workload the
//! keyed maps cost two cache misses and a `memcmp` per request, an eighth of a profile of
//! the dispatch path. Two keys with
//! the same id (a chance of 2⁻⁶⁴ per pair) share one entry and so one shard: per-key order
//! and barriers only need every key to map to one shard at a time, so that costs balance,
//! never correctness.

use super::config::{NewKeys, UnmappedPolicy};
use meridian_balance::repart::{IdHasher, ShardId};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash};
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

/// What a key must be to be placed: hashed into its id. Requests name their keys borrowed
/// (`Ref`: a slice of a connection's read buffer for `Bytes`), so a lookup copies nothing,
/// and the co-access graph tracks ids, never copies of keys.
pub trait Key: Send + Sync + 'static + Borrow<Self::Ref> {
    /// The borrowed form requests name keys by.
    type Ref: ?Sized + Eq + Hash;
}

impl Key for u32 {
    type Ref = u32;
}

impl Key for bytes::Bytes {
    type Ref = [u8];
}

pub use meridian_balance::repart::KeyHasher;

/// A key's id in the maps and the co-access graph (see [`key_id`]).
pub type KeyId = u64;

/// A key's id in the maps: the key hashed with a seed drawn once per process, so that the
/// dispatcher and the partitioner's bases agree on it and a client cannot aim its keys at
/// one bucket. Placement never depends on an id's value, only on which keys share one.
pub fn key_id<R: Hash + ?Sized>(key: &R) -> KeyId {
    static IDS: OnceLock<KeyHasher> = OnceLock::new();
    IDS.get_or_init(KeyHasher::default).hash_one(key)
}

/// Id → shard. Ids are a keyed hash, so the tables hash them with one multiply: the top
/// bits that pick an overlay segment are the same for all of a segment's ids, and
/// [`IdHasher`] spreads the rest over the bits the table indexes and tags by.
type IdMap = HashMap<u64, ShardId, BuildHasherDefault<IdHasher>>;

/// An immutable key → shard map, built whole by the partitioner.
pub struct BaseMap<K> {
    shards: IdMap,
    keys: PhantomData<fn(K)>,
}

impl<K> Default for BaseMap<K> {
    fn default() -> Self {
        Self {
            shards: IdMap::default(),
            keys: PhantomData,
        }
    }
}

impl<K> BaseMap<K> {
    fn get(&self, id: u64) -> Option<ShardId> {
        self.shards.get(&id).copied()
    }

    fn contains(&self, id: u64) -> bool {
        self.shards.contains_key(&id)
    }

    /// The number of keys it places.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Whether it places no key.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }
}

/// The base, shared between the dispatcher and the partitioner.
pub type Base<K> = Arc<BaseMap<K>>;

/// What a swap leaves behind for the caller to drop off the dispatch path.
pub struct Leftovers<K> {
    /// The previous base.
    pub base: Base<K>,
    /// The dropped overlay (empty under `keep`).
    pub overlay: Overlay<K>,
}

/// How many hash maps the overlay is split into: growing it rehashes 1/64 of its keys.
pub const OVERLAY_SEGMENTS: usize = 64;
const SEGMENT_SHIFT: u32 = u64::BITS - OVERLAY_SEGMENTS.trailing_zeros();
const _: () = assert!(OVERLAY_SEGMENTS.is_power_of_two());

/// The keys the dispatcher placed since the last swap, in [`OVERLAY_SEGMENTS`] maps picked
/// by the top bits of a key's id.
pub struct Overlay<K> {
    segments: Box<[IdMap]>,
    keys: PhantomData<fn(K)>,
}

impl<K> Overlay<K> {
    fn new() -> Self {
        Self {
            segments: (0..OVERLAY_SEGMENTS).map(|_| IdMap::default()).collect(),
            keys: PhantomData,
        }
    }

    fn segment(id: u64) -> usize {
        (id >> SEGMENT_SHIFT) as usize
    }

    fn get(&self, id: u64) -> Option<ShardId> {
        self.segments[Self::segment(id)].get(&id).copied()
    }

    fn insert(&mut self, id: u64, shard: ShardId) {
        self.segments[Self::segment(id)].insert(id, shard);
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.segments.iter().map(HashMap::len).sum()
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> bool {
        self.segments.iter().all(HashMap::is_empty)
    }

    fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.segments.iter().flat_map(HashMap::keys).copied()
    }

    fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        for s in self.segments.iter_mut() {
            s.retain(|id, _| keep(*id));
        }
    }

    /// Empties it, returning the keys it held.
    fn take(&mut self) -> Self {
        std::mem::replace(self, Self::new())
    }
}

/// One request's placement by [`ShardMap::place`] (buffers reused across requests).
#[derive(Default)]
pub struct Placement {
    /// Every key's id, in request order.
    pub ids: Vec<KeyId>,
    /// Every key's shard, in request order.
    pub each: Vec<ShardId>,
    /// The shards it spans, sorted, without duplicates.
    pub set: Vec<ShardId>,
}

impl Placement {
    fn clear(&mut self) {
        self.ids.clear();
        self.each.clear();
        self.set.clear();
    }
}

/// The key → shard map and the round-robin cursor for new keys.
pub struct ShardMap<K> {
    base: Base<K>,
    overlay: Overlay<K>,
    new_keys: NewKeys,
    next: ShardId,
    shards: ShardId,
}

/// The shard a key of id `id` hashes to under `new_keys = hash`: the id's top bits scaled
/// to `shards` (ids are a keyed hash, so any bits are uniform).
fn hashed(id: u64, shards: ShardId) -> ShardId {
    ((u128::from(id) * u128::from(shards)) >> 64) as ShardId
}

impl<K: Key> ShardMap<K> {
    /// An empty map over `shards` shards (at least 1), placing new keys by `new_keys`.
    pub fn new(shards: u32, new_keys: NewKeys) -> Self {
        Self {
            base: Arc::default(),
            overlay: Overlay::new(),
            new_keys,
            next: 0,
            shards: shards.max(1),
        }
    }

    /// The number of shards.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// The shard `key` is recorded on, if any (under `new_keys = hash`, a key no partition
    /// placed is on the shard it hashes to, and recorded nowhere).
    pub fn get(&self, key: &K::Ref) -> Option<ShardId> {
        self.get_id(key_id(key))
    }

    fn get_id(&self, id: u64) -> Option<ShardId> {
        self.overlay.get(id).or_else(|| self.base.get(id))
    }

    /// The spec's `shards_of`: the shard of every key of one request, placing the request's
    /// new keys by [`NewKeys`] (round-robin: all on the next shard in turn), into `out`.
    pub fn place<'k>(&mut self, keys: impl IntoIterator<Item = &'k K::Ref>, out: &mut Placement)
    where
        K::Ref: 'k,
    {
        out.clear();
        let fresh = self.next;
        let mut new = false;
        for k in keys {
            let id = key_id(k);
            let s = match (self.get_id(id), self.new_keys) {
                (Some(s), _) => s,
                (None, NewKeys::Hash) => hashed(id, self.shards),
                (None, NewKeys::RoundRobin) => {
                    new = true;
                    self.overlay.insert(id, fresh);
                    fresh
                }
            };
            out.ids.push(id);
            out.each.push(s);
            out.set.push(s);
        }
        if new {
            self.next = (self.next + 1) % self.shards;
        }
        if out.set.len() > 1 {
            out.set.sort_unstable();
            out.set.dedup();
        }
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
                .ids()
                .filter(|id| !self.base.contains(*id))
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
            UnmappedPolicy::Drop => self.overlay.take(),
            UnmappedPolicy::Keep => {
                self.overlay.retain(|id| !base.contains(id));
                Overlay::new()
            }
        };
        let old = std::mem::replace(&mut self.base, base);
        Leftovers { base: old, overlay }
    }
}

/// Builds the next base from a partition: the key of id `ids[v]` goes to `labels[v]`;
/// under `keep`, every key of `old` not among them keeps its shard. Runs on the
/// partitioner, not the dispatcher.
pub fn next_base<K>(
    old: &Base<K>,
    ids: &[KeyId],
    labels: &[ShardId],
    policy: UnmappedPolicy,
) -> Base<K> {
    let mut shards = match policy {
        UnmappedPolicy::Drop => IdMap::with_capacity_and_hasher(ids.len(), Default::default()),
        UnmappedPolicy::Keep => old.shards.clone(),
    };
    shards.extend(ids.iter().copied().zip(labels.iter().copied()));
    Arc::new(BaseMap {
        shards,
        keys: PhantomData,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(m: &mut ShardMap<u32>, keys: &[u32]) -> (Vec<u32>, Vec<u32>) {
        let mut out = Placement::default();
        m.place(keys.iter(), &mut out);
        assert_eq!(out.ids, keys.iter().map(key_id).collect::<Vec<_>>());
        (out.each, out.set)
    }

    fn ids(keys: &[u32]) -> Vec<KeyId> {
        keys.iter().map(key_id).collect()
    }

    #[test]
    fn new_keys_of_one_request_share_the_next_round_robin_shard() {
        let mut m = ShardMap::new(3, NewKeys::RoundRobin);
        assert_eq!(place(&mut m, &[1]), (vec![0], vec![0]));
        assert_eq!(place(&mut m, &[2, 3]), (vec![1, 1], vec![1]));
        // 1 is known (0), 4 is new (2): the request spans both.
        assert_eq!(place(&mut m, &[1, 4]), (vec![0, 2], vec![0, 2]));
        // Only known keys: the cursor does not move.
        assert_eq!(place(&mut m, &[3]), (vec![1], vec![1]));
        assert_eq!(place(&mut m, &[5]), (vec![0], vec![0]));
        assert_eq!(m.len(), 5);
    }

    /// The overlay is a map like any other: a model check against one `HashMap` over keys
    /// that span every segment, through placements and a `keep` swap.
    #[test]
    fn the_segmented_overlay_matches_a_single_map() {
        let mut m = ShardMap::<u32>::new(5, NewKeys::RoundRobin);
        let mut model = HashMap::new();
        let mut next = 0;
        for k in (0..20_000u32).map(|i| i.wrapping_mul(2_654_435_761) % 50_000) {
            let want = *model.entry(k).or_insert_with(|| {
                let s = next;
                next = (next + 1) % 5;
                s
            });
            assert_eq!(place(&mut m, &[k]).0, vec![want]);
        }
        assert_eq!(m.len(), model.len());
        assert!(
            m.overlay.segments.iter().all(|s| !s.is_empty()),
            "keys spread over every segment"
        );
        let moved: Vec<u32> = model.keys().copied().filter(|k| k % 3 == 0).collect();
        let base = next_base(
            &m.base(),
            &ids(&moved),
            &vec![4; moved.len()],
            UnmappedPolicy::Keep,
        );
        m.swap(base, UnmappedPolicy::Keep);
        for k in &moved {
            model.insert(*k, 4);
        }
        assert_eq!(m.overlay.len(), model.len() - moved.len());
        for (k, s) in &model {
            assert_eq!(m.get(k), Some(*s), "key {k}");
        }
        assert_eq!(m.get(&50_001), None);
    }

    /// Under `hash`, a key no partition placed goes where it hashes, every time, and is not
    /// recorded; a partition's placement overrides that until a `drop` swap forgets it.
    #[test]
    fn hashed_new_keys_are_placed_by_their_id_and_recorded_nowhere() {
        let mut m = ShardMap::<u32>::new(4, NewKeys::Hash);
        let mut counts = [0u32; 4];
        for k in 0..4_000u32 {
            let (each, _) = place(&mut m, &[k]);
            assert_eq!(place(&mut m, &[k]).0, each, "key {k} stays put");
            counts[each[0] as usize] += 1;
        }
        assert!(m.is_empty(), "nothing recorded");
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        // Two new keys of one request go where each hashes.
        let (a, b) = (0u32..)
            .flat_map(|a| (a + 1..a + 50).map(move |b| (a, b)))
            .find(|&(a, b)| place(&mut m, &[a]).0 != place(&mut m, &[b]).0)
            .unwrap();
        assert_eq!(place(&mut m, &[a, b]).1.len(), 2);
        let home = place(&mut m, &[a]).0[0];
        let elsewhere = (home + 1) % 4;
        let base = next_base(&m.base(), &ids(&[a]), &[elsewhere], UnmappedPolicy::Drop);
        m.swap(base, UnmappedPolicy::Drop);
        assert_eq!(place(&mut m, &[a]).0, vec![elsewhere]);
        m.swap(
            next_base(&m.base(), &ids(&[b]), &[0], UnmappedPolicy::Drop),
            UnmappedPolicy::Drop,
        );
        assert_eq!(place(&mut m, &[a]).0, vec![home], "dropped: hashed again");
    }

    #[test]
    fn swap_keep_and_drop() {
        for policy in [UnmappedPolicy::Keep, UnmappedPolicy::Drop] {
            let mut m = ShardMap::new(4, NewKeys::RoundRobin);
            for k in 0..8u32 {
                place(&mut m, &[k]);
            }
            // The partition places 0..4 on shard 3.
            let keys = [0u32, 1, 2, 3];
            let base = next_base(&m.base(), &ids(&keys), &[3; 4], policy);
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
            let base = next_base(&m.base(), &ids(&[7]), &[0], policy);
            m.swap(base, policy);
            assert_eq!(m.get(&7), Some(0));
            let kept = (policy == UnmappedPolicy::Keep).then_some(3);
            assert_eq!(m.get(&0), kept, "{policy:?}");
        }
    }
}
