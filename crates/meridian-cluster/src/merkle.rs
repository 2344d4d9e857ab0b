//! Active anti-entropy Merkle trees (spec §10): one tree per (partition, replica), compared
//! between replicas to find the few segments whose keys differ.
//!
//! **Shape.** A tree has a fixed [`MerkleConfig`]: `fanout` children per inner node and `depth`
//! levels below the root, so `fanout^depth` **segments** (leaves). The spec's shape is
//! [`MerkleConfig::SPEC`]: fanout 256, depth 2, that is 256 branches of 256 segments, `2^16`
//! segments. Level 0 is the root, level `depth` holds the segments; node `i` of level `l` has
//! the children `i·fanout .. (i+1)·fanout` on level `l + 1`.
//!
//! **Hashes** (all 128-bit, all `xxh3_128`):
//! - a key's segment is `key_hash(bucket, key) mod segments` ([`MerkleConfig::segment_of`]),
//!   with the flat key split by [`bucket_and_key`] and hashed by [`key_hash`] (xxh3, not the
//!   ring's placement: the ring places keys by their Redis hash slot, `crate::ring::slot_of`),
//!   so the keys of one partition, even those sharing a hash tag, spread over all segments;
//! - a key's **item hash** is `xxh3_128(u64_le(len(key)) ‖ key ‖ digest)` ([`item_hash`]), where
//!   `digest` is the caller's canonical encoding of the object's causal clock (for instance
//!   [`crate::Clock::encode`]). Tombstones must be included while they exist, or deletes would
//!   never be repaired;
//! - a segment's hash is the **XOR** of the item hashes of its keys (0 when empty);
//! - an inner node's hash is `xxh3_128` of its children's hashes, each as 16 little-endian
//!   bytes, in index order.
//!
//! **Why XOR is safe here.** XOR is commutative and self-inverse, so the segment hash is a
//! function of the *set* of (key, digest) pairs, independent of write order, and every change is
//! exact and incremental: XOR out the old item hash, XOR in the new one. Rebuilding from an
//! engine scan therefore gives exactly the tree that the incremental updates gave (tested). The
//! usual XOR pitfall, two equal terms cancelling, cannot happen by accident:
//! - the tree keeps each key's current item hash, so a key is in its segment at most once; a
//!   repeated [`MerkleTree::insert`] replaces instead of XOR-ing twice, and [`MerkleTree::remove`]
//!   of an absent key is a no-op;
//! - the key is hashed together with its digest, so two keys with the same clock bytes give
//!   unrelated item hashes, and the length prefix keeps `("ab", "c")` and `("a", "bc")` apart.
//!
//! What remains is a 128-bit collision (two different sets of a segment XOR to the same value),
//! probability about `2^-128` per compared segment for non-adversarial keys. xxh3 is not a
//! cryptographic hash and XOR is linear, so a client that chooses keys *and* can make replicas
//! diverge on purpose could hide a difference; that is out of scope, as in Riak's AAE.
//!
//! **Cost.** A change touches one segment and recomputes the `depth` inner nodes above it
//! (`O(depth)` node updates, each hashing `fanout · 16` bytes; 8 KiB per write with the spec's
//! shape), plus an `O(log n)` map update. [`MerkleTree::from_entries`] is `O(n + nodes)`.
//! Memory: `16 · (segments + inner nodes)` bytes (about 1 MiB for the spec's shape), plus, once
//! the tree holds a key, `24 · segments` bytes of per-segment key lists (96 KiB for the node's
//! default 64×64 shape, 1.5 MiB for the spec's) and the keys themselves.
//!
//! **Compare.** [`diff_segments`] compares two local trees top-down. For replicas on different
//! nodes, [`Exchange`] runs the spec's protocol step by step: the initiator asks for the root
//! ([`HashRequest::Root`]), then for the children of every node that differed
//! ([`HashRequest::Children`]); the responder answers with [`MerkleTree::answer`]. It ends after
//! at most `depth + 1` round trips with the differing segments, having compared at most
//! `1 + k · depth · fanout` node hashes for `k` differing segments. The last stage, comparing
//! `(key, item hash)` lists of one segment, uses [`MerkleTree::key_hashes`] and [`diff_keys`].
//!
//! Everything here is pure and deterministic: no I/O, clocks, randomness or hash-map iteration
//! order (each segment's keys are a sorted list); results are sorted.

use crate::ring::{bucket_and_key, key_hash};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;
use xxhash_rust::xxh3::Xxh3;

/// A segment (leaf) of a Merkle tree: `key_hash mod segments`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SegmentId(pub u32);

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seg{}", self.0)
    }
}

/// An invalid tree shape, a mismatch between two trees, or a malformed exchange message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MerkleError {
    /// The fanout must be a power of two in `2..=256`, the depth at least 1, and the tree at
    /// most `2^20` segments.
    #[error("invalid merkle shape fanout={fanout} depth={depth}")]
    InvalidConfig {
        /// The rejected fanout.
        fanout: u32,
        /// The rejected depth.
        depth: u32,
    },
    /// The two sides of a comparison have different shapes.
    #[error("merkle shape mismatch local={local} remote={remote}")]
    ConfigMismatch {
        /// This side's shape.
        local: MerkleConfig,
        /// The other side's shape.
        remote: MerkleConfig,
    },
    /// A node outside the tree was named.
    #[error("merkle node out of range level={level} index={index}")]
    NodeOutOfRange {
        /// The level named.
        level: u32,
        /// The index named.
        index: u32,
    },
    /// A reply does not answer the pending request (wrong level or number of hashes).
    #[error(
        "merkle reply mismatch expected level={level} hashes={expected} got level={got_level} hashes={got}"
    )]
    ReplyMismatch {
        /// The level whose hashes were expected.
        level: u32,
        /// The number of hashes expected.
        expected: usize,
        /// The level in the reply.
        got_level: u32,
        /// The number of hashes in the reply.
        got: usize,
    },
    /// A reply arrived after the exchange had finished.
    #[error("merkle reply after the exchange finished")]
    Finished,
}

/// The shape of a tree: `fanout` children per inner node, `depth` levels below the root.
///
/// Both replicas of an exchange must use the same shape; [`HashRequest::Root`] carries it so
/// the responder can check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "ConfigRepr", into = "ConfigRepr")]
pub struct MerkleConfig {
    fanout_bits: u32,
    depth: u32,
}

#[derive(Serialize, Deserialize)]
struct ConfigRepr {
    fanout: u32,
    depth: u32,
}

impl TryFrom<ConfigRepr> for MerkleConfig {
    type Error = MerkleError;
    fn try_from(r: ConfigRepr) -> Result<MerkleConfig, MerkleError> {
        MerkleConfig::new(r.fanout, r.depth)
    }
}

impl From<MerkleConfig> for ConfigRepr {
    fn from(c: MerkleConfig) -> ConfigRepr {
        ConfigRepr {
            fanout: c.fanout(),
            depth: c.depth,
        }
    }
}

impl fmt::Display for MerkleConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}^{}", self.fanout(), self.depth)
    }
}

impl MerkleConfig {
    /// The spec's shape: 256 branches of 256 segments (`2^16` segments).
    pub const SPEC: MerkleConfig = MerkleConfig {
        fanout_bits: 8,
        depth: 2,
    };
    /// The largest allowed fanout.
    pub const MAX_FANOUT: u32 = 256;
    /// The largest allowed number of segments, `2^20`.
    pub const MAX_SEGMENTS: u32 = 1 << 20;

    /// A shape with `fanout` (a power of two in `2..=256`) and `depth ≥ 1`, at most
    /// [`Self::MAX_SEGMENTS`] segments; otherwise [`MerkleError::InvalidConfig`].
    pub fn new(fanout: u32, depth: u32) -> Result<MerkleConfig, MerkleError> {
        let bad = MerkleError::InvalidConfig { fanout, depth };
        if !fanout.is_power_of_two() || !(2..=Self::MAX_FANOUT).contains(&fanout) || depth == 0 {
            return Err(bad);
        }
        let fanout_bits = fanout.trailing_zeros();
        match fanout_bits.checked_mul(depth) {
            Some(bits) if bits <= Self::MAX_SEGMENTS.trailing_zeros() => {
                Ok(MerkleConfig { fanout_bits, depth })
            }
            _ => Err(bad),
        }
    }

    /// Children per inner node.
    pub fn fanout(self) -> u32 {
        1 << self.fanout_bits
    }

    /// Levels below the root; level `depth` holds the segments.
    pub fn depth(self) -> u32 {
        self.depth
    }

    /// Number of segments, `fanout^depth`.
    pub fn segments(self) -> u32 {
        1 << (self.fanout_bits * self.depth)
    }

    /// Number of nodes on `level` (`fanout^level`; 1 for the root).
    ///
    /// # Panics
    /// If `level > depth`.
    pub fn level_len(self, level: u32) -> u32 {
        assert!(level <= self.depth, "level {level} > depth {}", self.depth);
        1 << (self.fanout_bits * level)
    }

    /// The segment of a flat key (`bucket:key`, split by [`bucket_and_key`]):
    /// `key_hash(bucket, key) mod segments`. This is how the caller selects the keys of a
    /// segment when scanning its engine.
    pub fn segment_of(self, key: &[u8]) -> SegmentId {
        self.segment_of_hash(Self::hash_of(key))
    }

    /// The [`key_hash`] of a flat key (`bucket:key`, split by [`bucket_and_key`]); its low
    /// bits are the key's segment.
    pub fn hash_of(key: &[u8]) -> u64 {
        let (bucket, k) = bucket_and_key(key);
        key_hash(bucket, k)
    }

    /// The segment of a key whose [`key_hash`] is `h`: its low `log2 segments` bits.
    pub fn segment_of_hash(self, h: u64) -> SegmentId {
        SegmentId((h & u64::from(self.segments() - 1)) as u32)
    }

    /// The index, on `level`, of the ancestor of `segment` (the segment itself on level
    /// `depth`).
    ///
    /// # Panics
    /// If `level > depth`.
    pub fn ancestor(self, segment: SegmentId, level: u32) -> u32 {
        assert!(level <= self.depth, "level {level} > depth {}", self.depth);
        segment.0 >> (self.fanout_bits * (self.depth - level))
    }
}

impl Default for MerkleConfig {
    fn default() -> Self {
        Self::SPEC
    }
}

/// A key's item hash: `xxh3_128(u64_le(len(key)) ‖ key ‖ digest)`, where `digest` is the
/// caller's canonical encoding of the object's causal clock. Segment hashes XOR these.
pub fn item_hash(key: &[u8], digest: &[u8]) -> u128 {
    let mut h = Xxh3::new();
    h.update(&(key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(digest);
    h.digest128()
}

/// `xxh3_128` of `children`, each as 16 little-endian bytes, in order.
fn inner_hash(children: &[u128]) -> u128 {
    let mut buf = [0u8; 16 * MerkleConfig::MAX_FANOUT as usize];
    for (chunk, c) in buf.chunks_exact_mut(16).zip(children) {
        chunk.copy_from_slice(&c.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_128(&buf[..16 * children.len()])
}

/// A Merkle tree over the keys of one partition on one replica (spec §10).
///
/// It keeps each key's current item hash, so [`Self::insert`], [`Self::remove`] and
/// [`Self::update`] are exact, idempotent and `O(depth)` node updates each. Two trees are
/// equal (`==`) exactly when they have the same shape and the same `(key, item hash)` pairs.
#[derive(Debug, Clone)]
pub struct MerkleTree {
    config: MerkleConfig,
    /// `levels[0] = [root]`, …, `levels[depth]` = the segment hashes.
    levels: Vec<Vec<u128>>,
    /// Indexed by segment: its keys with their item hashes, sorted by (key hash, key). Empty
    /// (no allocation at all) until the first key arrives; then one slot per segment, so a
    /// write finds its segment with one index and its key by a binary search over the inline
    /// 64-bit hashes, touching one key's bytes — not a walk down maps of segments and keys
    /// (profiled: the cluster write path's costliest step, a chain of cache misses per write,
    /// worst when a hash tag puts many keys in one partition).
    keys: Vec<Vec<Entry>>,
    len: usize,
}

/// One key of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// The key's [`key_hash`] (what the segment list is sorted by, before the key).
    hash: u64,
    key: Bytes,
    item: u128,
}

/// Where `key` (of hash `hash`) is, or would be, in a segment's sorted list.
fn find(entries: &[Entry], hash: u64, key: &[u8]) -> Result<usize, usize> {
    entries.binary_search_by(|e| e.hash.cmp(&hash).then_with(|| e.key[..].cmp(key)))
}

impl PartialEq for MerkleTree {
    fn eq(&self, other: &Self) -> bool {
        let segments = self.config.segments();
        self.config == other.config
            && self.len == other.len
            && self.levels == other.levels
            && (0..segments).all(|s| self.segment(SegmentId(s)) == other.segment(SegmentId(s)))
    }
}

impl Eq for MerkleTree {}

impl MerkleTree {
    /// An empty tree of the given shape (every segment hash is 0).
    pub fn new(config: MerkleConfig) -> MerkleTree {
        let levels = (0..=config.depth)
            .map(|l| vec![0u128; config.level_len(l) as usize])
            .collect();
        let mut t = MerkleTree {
            config,
            levels,
            keys: Vec::new(),
            len: 0,
        };
        t.recompute_inner();
        t
    }

    /// Rebuilds a tree from scratch, for instance from an engine scan: the same tree as
    /// inserting the pairs one by one into [`Self::new`] (a repeated key keeps its last
    /// digest), but hashing each inner node only once.
    pub fn from_entries<I, K, D>(config: MerkleConfig, entries: I) -> MerkleTree
    where
        I: IntoIterator<Item = (K, D)>,
        K: AsRef<[u8]>,
        D: AsRef<[u8]>,
    {
        let mut t = MerkleTree::new(config);
        for (k, d) in entries {
            let (k, d) = (k.as_ref(), d.as_ref());
            t.set_item(MerkleConfig::hash_of(k), k, Some(item_hash(k, d)));
        }
        t.recompute_inner();
        t
    }

    /// The tree's shape.
    pub fn config(&self) -> MerkleConfig {
        self.config
    }

    /// Number of keys in the tree.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree has no keys.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segment of `key` in this tree's shape ([`MerkleConfig::segment_of`]).
    pub fn segment_of(&self, key: &[u8]) -> SegmentId {
        self.config.segment_of(key)
    }

    /// Sets `key`'s digest (insert or replace); returns its previous item hash.
    pub fn insert(&mut self, key: &[u8], digest: &[u8]) -> Option<u128> {
        self.update(key, Some(digest))
    }

    /// Removes `key`; returns its item hash, or `None` (and changes nothing) if it was absent.
    pub fn remove(&mut self, key: &[u8]) -> Option<u128> {
        self.update(key, None)
    }

    /// Applies the new state of `key`: `Some(digest)` inserts or replaces, `None` removes.
    /// Returns the previous item hash. Recomputes only the path from the key's segment to the
    /// root, and nothing when the item hash is unchanged.
    pub fn update(&mut self, key: &[u8], digest: Option<&[u8]>) -> Option<u128> {
        let hash = MerkleConfig::hash_of(key);
        let new = digest.map(|d| item_hash(key, d));
        let old = self.set_item(hash, key, new);
        if old != new {
            self.recompute_path(self.config.segment_of_hash(hash));
        }
        old
    }

    /// The item hash stored for `key`, if present.
    pub fn get(&self, key: &[u8]) -> Option<u128> {
        let hash = MerkleConfig::hash_of(key);
        let entries = self.segment(self.config.segment_of_hash(hash));
        let i = find(entries, hash, key).ok()?;
        Some(entries[i].item)
    }

    /// The root hash.
    pub fn root(&self) -> u128 {
        self.levels[0][0]
    }

    /// All node hashes of `level` (level 0 is `[root]`, level `depth` the segments).
    ///
    /// # Panics
    /// If `level > depth`.
    pub fn level(&self, level: u32) -> &[u128] {
        assert!(level <= self.config.depth, "level {level} > depth");
        &self.levels[level as usize]
    }

    /// The hash of node `index` of `level`.
    ///
    /// # Panics
    /// If the node is outside the tree.
    pub fn node(&self, level: u32, index: u32) -> u128 {
        self.level(level)[index as usize]
    }

    /// The hash of `segment` (XOR of its keys' item hashes).
    ///
    /// # Panics
    /// If `segment` is outside the tree.
    pub fn segment_hash(&self, segment: SegmentId) -> u128 {
        self.node(self.config.depth, segment.0)
    }

    /// The hashes of the `fanout` children (on `level + 1`) of node `index` of `level`.
    ///
    /// # Panics
    /// If `level >= depth` or the node is outside the tree.
    pub fn children_of(&self, level: u32, index: u32) -> &[u128] {
        assert!(level < self.config.depth, "segments have no children");
        let f = self.config.fanout() as usize;
        let start = index as usize * f;
        &self.level(level + 1)[start..start + f]
    }

    /// The keys of `segment` with their item hashes, in key order.
    pub fn segment_entries(&self, segment: SegmentId) -> impl Iterator<Item = (&Bytes, u128)> {
        // Stored by hash for the write path; this (rare, anti-entropy) reader sorts by key.
        let mut entries: Vec<(&Bytes, u128)> = self
            .segment(segment)
            .iter()
            .map(|e| (&e.key, e.item))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        entries.into_iter()
    }

    /// The sorted `(key, item hash)` entries of `segment` (empty outside the tree).
    fn segment(&self, segment: SegmentId) -> &[Entry] {
        self.keys.get(segment.0 as usize).map_or(&[], Vec::as_slice)
    }

    /// The `(key, item hash)` list of `segment`, for the last stage of an exchange.
    pub fn key_hashes(&self, segment: SegmentId) -> KeyHashes {
        KeyHashes {
            segment,
            entries: self
                .segment_entries(segment)
                .map(|(k, hash)| KeyHash {
                    key: k.clone(),
                    hash,
                })
                .collect(),
        }
    }

    /// Of the nodes `indices` of `level`, those whose local hash differs from the remote one
    /// (`remote[i]` is the other side's hash of `indices[i]`), in the given order: the nodes to
    /// descend into.
    pub fn differing(
        &self,
        level: u32,
        indices: &[u32],
        remote: &[u128],
    ) -> Result<Vec<u32>, MerkleError> {
        if indices.len() != remote.len() {
            return Err(MerkleError::ReplyMismatch {
                level,
                expected: indices.len(),
                got_level: level,
                got: remote.len(),
            });
        }
        let nodes = self.checked_level(level, indices.iter().copied().max().unwrap_or(0))?;
        Ok(indices
            .iter()
            .zip(remote)
            .filter(|&(&i, &r)| nodes[i as usize] != r)
            .map(|(&i, _)| i)
            .collect())
    }

    /// The responder's side of an [`Exchange`]: the hashes `request` asks for.
    ///
    /// Errors: [`MerkleError::ConfigMismatch`] if the requester's shape differs (checked on
    /// [`HashRequest::Root`]), [`MerkleError::NodeOutOfRange`] for a parent outside the tree or
    /// on the segment level.
    pub fn answer(&self, request: &HashRequest) -> Result<HashReply, MerkleError> {
        match request {
            HashRequest::Root { config } => {
                if *config != self.config {
                    return Err(MerkleError::ConfigMismatch {
                        local: self.config,
                        remote: *config,
                    });
                }
                Ok(HashReply {
                    level: 0,
                    hashes: vec![self.root()],
                })
            }
            HashRequest::Children { level, parents } => {
                let max = parents.iter().copied().max().unwrap_or(0);
                if *level >= self.config.depth {
                    return Err(MerkleError::NodeOutOfRange {
                        level: *level,
                        index: max,
                    });
                }
                self.checked_level(*level, max)?;
                let mut hashes = Vec::with_capacity(parents.len() * self.config.fanout() as usize);
                for &p in parents {
                    hashes.extend_from_slice(self.children_of(*level, p));
                }
                Ok(HashReply {
                    level: level + 1,
                    hashes,
                })
            }
        }
    }

    /// The hashes of `level`, if `level` exists and `max_index` is inside it.
    fn checked_level(&self, level: u32, max_index: u32) -> Result<&[u128], MerkleError> {
        match self.levels.get(level as usize) {
            Some(nodes) if (max_index as usize) < nodes.len() => Ok(nodes),
            _ => Err(MerkleError::NodeOutOfRange {
                level,
                index: max_index,
            }),
        }
    }

    /// Sets (or removes) `key`'s item hash in the map and XORs the segment hash accordingly;
    /// does not touch inner nodes. Returns the previous item hash.
    fn set_item(&mut self, hash: u64, key: &[u8], new: Option<u128>) -> Option<u128> {
        let seg = self.config.segment_of_hash(hash);
        if self.keys.is_empty() {
            new?;
            self.keys = vec![Vec::new(); self.config.segments() as usize];
        }
        let entries = &mut self.keys[seg.0 as usize];
        let old = match (find(entries, hash, key), new) {
            (Ok(i), Some(h)) => Some(std::mem::replace(&mut entries[i].item, h)),
            (Ok(i), None) => Some(entries.remove(i).item),
            (Err(i), Some(item)) => {
                let key = Bytes::copy_from_slice(key);
                entries.insert(i, Entry { hash, key, item });
                None
            }
            (Err(_), None) => None,
        };
        match (old.is_some(), new.is_some()) {
            (false, true) => self.len += 1,
            (true, false) => self.len -= 1,
            _ => {}
        }
        let leaf = &mut self.levels[self.config.depth as usize][seg.0 as usize];
        *leaf ^= old.unwrap_or(0) ^ new.unwrap_or(0);
        old
    }

    /// Recomputes the ancestors of `seg`, bottom-up.
    fn recompute_path(&mut self, seg: SegmentId) {
        let f = self.config.fanout() as usize;
        for level in (0..self.config.depth).rev() {
            let i = self.config.ancestor(seg, level) as usize;
            let h = inner_hash(&self.levels[level as usize + 1][i * f..(i + 1) * f]);
            self.levels[level as usize][i] = h;
        }
    }

    /// Recomputes every inner node from the segment hashes.
    fn recompute_inner(&mut self) {
        let f = self.config.fanout() as usize;
        for level in (0..self.config.depth as usize).rev() {
            let (upper, lower) = self.levels.split_at_mut(level + 1);
            for (node, children) in upper[level].iter_mut().zip(lower[0].chunks_exact(f)) {
                *node = inner_hash(children);
            }
        }
    }
}

/// The segments where two trees differ, ascending, found top-down (only the children of
/// differing nodes are compared). Empty exactly when the roots are equal.
///
/// # Panics
/// If the trees have different shapes (use [`Exchange`] for untrusted remote input).
pub fn diff_segments(a: &MerkleTree, b: &MerkleTree) -> Vec<SegmentId> {
    assert_eq!(
        a.config, b.config,
        "diff_segments: trees of different shapes"
    );
    let f = a.config.fanout();
    let mut frontier: Vec<u32> = if a.root() == b.root() {
        vec![]
    } else {
        vec![0]
    };
    for level in 1..=a.config.depth {
        let (la, lb) = (a.level(level), b.level(level));
        frontier = frontier
            .iter()
            .flat_map(|&p| p * f..(p + 1) * f)
            .filter(|&c| la[c as usize] != lb[c as usize])
            .collect();
    }
    frontier.into_iter().map(SegmentId).collect()
}

/// A request for node hashes, sent by the initiator of an [`Exchange`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashRequest {
    /// The root hash; carries the initiator's shape so the responder can check it.
    Root {
        /// The initiator's tree shape.
        config: MerkleConfig,
    },
    /// The hashes of all children (on `level + 1`) of the nodes `parents` of `level`.
    Children {
        /// The level of the parents (`< depth`).
        level: u32,
        /// Parent indices on `level`, ascending.
        parents: Vec<u32>,
    },
}

/// The responder's answer to a [`HashRequest`] ([`MerkleTree::answer`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HashReply {
    /// The level of the hashes: 0 for the root, `level + 1` for children.
    pub level: u32,
    /// The root hash, or for each requested parent in order its `fanout` children's hashes in
    /// index order.
    pub hashes: Vec<u128>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ExchangeState {
    AwaitRoot,
    AwaitChildren { level: u32, parents: Vec<u32> },
    Done(Vec<SegmentId>),
}

/// The initiator's side of the spec's exchange: roots, then differing branches, then
/// segments, one round trip per level.
///
/// Loop: send [`Self::request`] to the peer, pass the peer's [`MerkleTree::answer`] to
/// [`Self::receive`] with the local tree, until [`Self::segments`] is `Some`. At most
/// `depth + 1` round trips and `1 + k · depth · fanout` compared hashes for `k` differing
/// segments. The local tree must not change during an exchange (or the result mixes
/// versions; anti-entropy will catch up on the next round).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    config: MerkleConfig,
    state: ExchangeState,
    compared: usize,
    rounds: usize,
}

impl Exchange {
    /// A new exchange between trees of shape `config`.
    pub fn new(config: MerkleConfig) -> Exchange {
        Exchange {
            config,
            state: ExchangeState::AwaitRoot,
            compared: 0,
            rounds: 0,
        }
    }

    /// The next request to send, or `None` once finished.
    pub fn request(&self) -> Option<HashRequest> {
        match &self.state {
            ExchangeState::AwaitRoot => Some(HashRequest::Root {
                config: self.config,
            }),
            ExchangeState::AwaitChildren { level, parents } => Some(HashRequest::Children {
                level: *level,
                parents: parents.clone(),
            }),
            ExchangeState::Done(_) => None,
        }
    }

    /// Compares the peer's reply with `local` and moves to the next level.
    ///
    /// Errors (the exchange state is unchanged): [`MerkleError::ConfigMismatch`] if `local`
    /// has another shape, [`MerkleError::ReplyMismatch`] if the reply does not answer the
    /// pending request, [`MerkleError::Finished`] after the end.
    pub fn receive(&mut self, local: &MerkleTree, reply: &HashReply) -> Result<(), MerkleError> {
        if local.config != self.config {
            return Err(MerkleError::ConfigMismatch {
                local: local.config,
                remote: self.config,
            });
        }
        let (level, parents) = match &self.state {
            ExchangeState::Done(_) => return Err(MerkleError::Finished),
            ExchangeState::AwaitRoot => (0, None),
            ExchangeState::AwaitChildren { level, parents } => (level + 1, Some(parents)),
        };
        let f = self.config.fanout();
        let indices: Vec<u32> = match parents {
            None => vec![0],
            Some(ps) => ps.iter().flat_map(|&p| p * f..(p + 1) * f).collect(),
        };
        if reply.level != level || reply.hashes.len() != indices.len() {
            return Err(MerkleError::ReplyMismatch {
                level,
                expected: indices.len(),
                got_level: reply.level,
                got: reply.hashes.len(),
            });
        }
        let differing = local.differing(level, &indices, &reply.hashes)?;
        self.compared += indices.len();
        self.rounds += 1;
        self.state = if level == self.config.depth || differing.is_empty() {
            ExchangeState::Done(differing.into_iter().map(SegmentId).collect())
        } else {
            ExchangeState::AwaitChildren {
                level,
                parents: differing,
            }
        };
        Ok(())
    }

    /// Whether the exchange has finished.
    pub fn is_done(&self) -> bool {
        matches!(self.state, ExchangeState::Done(_))
    }

    /// The differing segments, ascending, once finished.
    pub fn segments(&self) -> Option<&[SegmentId]> {
        match &self.state {
            ExchangeState::Done(s) => Some(s),
            _ => None,
        }
    }

    /// Node hashes compared so far (the hashes received).
    pub fn nodes_compared(&self) -> usize {
        self.compared
    }

    /// Replies received so far (round trips).
    pub fn rounds(&self) -> usize {
        self.rounds
    }
}

/// One key of a segment with its item hash ([`item_hash`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHash {
    /// The flat key.
    pub key: Bytes,
    /// Its item hash.
    pub hash: u128,
}

/// The `(key, item hash)` list of one segment, exchanged in the last stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyHashes {
    /// The segment.
    pub segment: SegmentId,
    /// Its keys, in key order.
    pub entries: Vec<KeyHash>,
}

/// The keys whose item hashes differ between two lists (present on one side only, or with
/// different hashes), ascending and without duplicates: the keys to merge and write back to
/// both sides. The lists need not be sorted; if a list repeats a key, its last hash counts.
pub fn diff_keys(a: &[KeyHash], b: &[KeyHash]) -> Vec<Bytes> {
    let index = |l: &[KeyHash]| -> BTreeMap<Bytes, u128> {
        l.iter().map(|e| (e.key.clone(), e.hash)).collect()
    };
    let (ma, mb) = (index(a), index(b));
    let mut out: Vec<Bytes> = ma
        .iter()
        .filter(|(k, h)| mb.get(*k) != Some(h))
        .map(|(k, _)| k.clone())
        .chain(mb.keys().filter(|k| !ma.contains_key(*k)).cloned())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use xxhash_rust::xxh3::xxh3_128;

    fn small() -> MerkleConfig {
        MerkleConfig::new(4, 3).unwrap()
    }

    fn mid() -> MerkleConfig {
        MerkleConfig::new(16, 2).unwrap()
    }

    /// The first `n` keys `k<i>` of the form used in tests whose segment is `seg`.
    fn keys_in(config: MerkleConfig, seg: SegmentId, n: usize) -> Vec<Vec<u8>> {
        (0u32..)
            .map(|i| format!("b:k{i}").into_bytes())
            .filter(|k| config.segment_of(k) == seg)
            .take(n)
            .collect()
    }

    fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| {
                (
                    format!("b:k{i}").into_bytes(),
                    format!("clock{i}").into_bytes(),
                )
            })
            .collect()
    }

    /// Every segment whose hash differs, by brute force.
    fn brute_diff(a: &MerkleTree, b: &MerkleTree) -> Vec<SegmentId> {
        let d = a.config().depth();
        (0..a.config().segments())
            .filter(|&s| a.level(d)[s as usize] != b.level(d)[s as usize])
            .map(SegmentId)
            .collect()
    }

    /// Runs an exchange with `local` as initiator and `remote` as responder.
    fn exchange(local: &MerkleTree, remote: &MerkleTree) -> Exchange {
        let mut ex = Exchange::new(local.config());
        while let Some(req) = ex.request() {
            let reply = remote.answer(&req).unwrap();
            ex.receive(local, &reply).unwrap();
        }
        ex
    }

    /// Exact number of hashes an exchange compares for these differing segments.
    fn expected_compared(config: MerkleConfig, segs: &[SegmentId]) -> usize {
        let mut n = 1;
        for level in 0..config.depth() {
            let nodes: BTreeSet<u32> = segs.iter().map(|&s| config.ancestor(s, level)).collect();
            n += nodes.len() * config.fanout() as usize;
        }
        n
    }

    #[test]
    fn config_shapes() {
        let spec = MerkleConfig::SPEC;
        assert_eq!(MerkleConfig::default(), spec);
        assert_eq!(MerkleConfig::new(256, 2), Ok(spec));
        assert_eq!(
            (spec.fanout(), spec.depth(), spec.segments()),
            (256, 2, 1 << 16)
        );
        assert_eq!(spec.level_len(1), 256);
        assert_eq!(spec.ancestor(SegmentId(0x1234), 1), 0x12);
        assert_eq!(spec.ancestor(SegmentId(0x1234), 0), 0);
        assert_eq!(spec.to_string(), "256^2");
        for (f, d) in [(0, 2), (1, 2), (3, 2), (512, 1), (16, 0), (256, 3), (2, 21)] {
            assert_eq!(
                MerkleConfig::new(f, d),
                Err(MerkleError::InvalidConfig {
                    fanout: f,
                    depth: d
                })
            );
        }
        assert!(MerkleConfig::new(2, 20).is_ok());
        assert!(MerkleConfig::new(16, 5).is_ok());
    }

    #[test]
    fn segment_is_the_low_bits_of_the_key_hash() {
        let c = MerkleConfig::SPEC;
        let h = key_hash(b"img", b"cat.png");
        assert_eq!(c.segment_of(b"img:cat.png"), SegmentId((h & 0xffff) as u32));
        let h = key_hash(crate::ring::DEFAULT_BUCKET, b"plain");
        assert_eq!(c.segment_of(b"plain"), SegmentId((h & 0xffff) as u32));
        assert_eq!(
            small().segment_of_hash(0xffff_ffff_ffff_ff3f),
            SegmentId(0x3f)
        );
    }

    #[test]
    fn item_hash_is_the_documented_byte_string() {
        let mut bytes = 2u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"ab");
        bytes.extend_from_slice(b"c");
        assert_eq!(item_hash(b"ab", b"c"), xxh3_128(&bytes));
        // The length prefix keeps the key/digest boundary.
        assert_ne!(item_hash(b"ab", b"c"), item_hash(b"a", b"bc"));
    }

    #[test]
    fn inner_nodes_hash_their_children() {
        let t = MerkleTree::from_entries(mid(), entries(50));
        let mut bytes = Vec::new();
        for c in t.children_of(0, 0) {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        assert_eq!(t.root(), xxh3_128(&bytes));
        assert_eq!(t.level(0), [t.root()]);
        assert_eq!(t.level(1).len(), 16);
        assert_eq!(t.level(2).len(), 256);
        assert_eq!(t.children_of(1, 3), &t.level(2)[48..64]);
        // A segment is the XOR of its keys' item hashes.
        for s in 0..256 {
            let seg = SegmentId(s);
            let x = t.segment_entries(seg).fold(0, |acc, (_, h)| acc ^ h);
            assert_eq!(t.segment_hash(seg), x);
        }
        assert_eq!(t.len(), 50);
    }

    #[test]
    fn empty_trees() {
        let a = MerkleTree::new(MerkleConfig::SPEC);
        let b = MerkleTree::from_entries(MerkleConfig::SPEC, Vec::<(&[u8], &[u8])>::new());
        assert_eq!(a, b);
        assert!(a.is_empty());
        assert!(a.level(2).iter().all(|&h| h == 0));
        assert!(diff_segments(&a, &b).is_empty());
    }

    #[test]
    fn identical_sets_in_any_order_give_equal_trees() {
        let e = entries(300);
        let a = MerkleTree::from_entries(MerkleConfig::SPEC, e.iter().cloned());
        let mut b = MerkleTree::new(MerkleConfig::SPEC);
        for (k, d) in e.iter().rev() {
            b.insert(k, d);
        }
        assert_eq!(a.root(), b.root());
        assert_eq!(a, b);
        assert!(diff_segments(&a, &b).is_empty());
        let ex = exchange(&a, &b);
        assert_eq!(ex.segments(), Some(&[][..]));
        assert_eq!((ex.rounds(), ex.nodes_compared()), (1, 1));
        assert_eq!(ex.request(), None);
    }

    #[test]
    fn one_changed_missing_or_extra_key_is_found_in_its_segment() {
        let c = MerkleConfig::SPEC;
        let e = entries(500);
        let base = MerkleTree::from_entries(c, e.iter().cloned());
        let key = e[123].0.clone();
        let seg = c.segment_of(&key);

        let mut changed = base.clone();
        assert_eq!(
            changed.insert(&key, b"newer"),
            Some(item_hash(&key, b"clock123"))
        );
        let mut missing = base.clone();
        assert!(missing.remove(&key).is_some());
        let mut extra = base.clone();
        assert_eq!(extra.insert(b"b:fresh", b"c"), None);
        let extra_seg = c.segment_of(b"b:fresh");

        for (other, s) in [(&changed, seg), (&missing, seg), (&extra, extra_seg)] {
            assert_ne!(base.root(), other.root());
            assert_eq!(diff_segments(&base, other), [s]);
            assert_eq!(diff_segments(other, &base), [s]);
            let ex = exchange(&base, other);
            assert_eq!(ex.segments(), Some(&[s][..]));
            assert_eq!((ex.rounds(), ex.nodes_compared()), (3, 1 + 256 + 256));
            let keys = diff_keys(&base.key_hashes(s).entries, &other.key_hashes(s).entries);
            let expect = if s == seg {
                key.clone()
            } else {
                b"b:fresh".to_vec()
            };
            assert_eq!(keys, [Bytes::from(expect)]);
        }
    }

    #[test]
    fn insert_then_remove_restores_the_tree() {
        let c = small();
        let base = MerkleTree::from_entries(c, entries(40));
        let mut t = base.clone();
        t.insert(b"b:new", b"x");
        assert_ne!(t.root(), base.root());
        assert_eq!(t.remove(b"b:new"), Some(item_hash(b"b:new", b"x")));
        assert_eq!(t.root(), base.root());
        assert_eq!(t, base);
        // Removing an absent key changes nothing.
        assert_eq!(t.remove(b"b:absent"), None);
        assert_eq!(t, base);
        // update(None) removes, update(Some) upserts.
        t.update(b"b:k3", None);
        assert_eq!(t.get(b"b:k3"), None);
        t.update(b"b:k3", Some(b"clock3"));
        assert_eq!(t, base);
    }

    #[test]
    fn repeated_inserts_do_not_cancel() {
        let c = small();
        let mut once = MerkleTree::new(c);
        once.insert(b"b:k", b"d");
        let mut twice = once.clone();
        assert_eq!(twice.insert(b"b:k", b"d"), Some(item_hash(b"b:k", b"d")));
        assert_eq!(once, twice);
        assert_ne!(twice.root(), MerkleTree::new(c).root());
        assert_eq!(twice.len(), 1);
        // A rebuild with a repeated key keeps its last digest.
        let r = MerkleTree::from_entries(c, [(&b"b:k"[..], &b"old"[..]), (b"b:k", b"d")]);
        assert_eq!(r, once);
    }

    #[test]
    fn keys_with_equal_digests_in_one_segment_do_not_cancel() {
        let c = small();
        let ks = keys_in(c, SegmentId(5), 2);
        let t = MerkleTree::from_entries(c, ks.iter().map(|k| (k.clone(), b"same".to_vec())));
        assert_ne!(t.segment_hash(SegmentId(5)), 0);
        // Swapping the digests of two keys in a segment changes the segment.
        let a = MerkleTree::from_entries(c, [(&ks[0], b"x"), (&ks[1], b"y")]);
        let b = MerkleTree::from_entries(c, [(&ks[0], b"y"), (&ks[1], b"x")]);
        assert_eq!(diff_segments(&a, &b), [SegmentId(5)]);
    }

    #[test]
    fn exchange_rejects_bad_messages() {
        let t = MerkleTree::from_entries(small(), entries(10));
        let other = MerkleConfig::new(8, 2).unwrap();
        assert_eq!(
            t.answer(&HashRequest::Root { config: other }),
            Err(MerkleError::ConfigMismatch {
                local: small(),
                remote: other
            })
        );
        // Segments have no children; parents must exist.
        assert!(matches!(
            t.answer(&HashRequest::Children {
                level: 3,
                parents: vec![0]
            }),
            Err(MerkleError::NodeOutOfRange { .. })
        ));
        assert_eq!(
            t.answer(&HashRequest::Children {
                level: 1,
                parents: vec![4]
            }),
            Err(MerkleError::NodeOutOfRange { level: 1, index: 4 })
        );
        let r = t
            .answer(&HashRequest::Children {
                level: 1,
                parents: vec![1, 3],
            })
            .unwrap();
        assert_eq!(r.level, 2);
        assert_eq!(
            r.hashes,
            [t.children_of(1, 1), t.children_of(1, 3)].concat()
        );

        let mut ex = Exchange::new(small());
        let wrong_tree = MerkleTree::new(other);
        assert!(matches!(
            ex.receive(
                &wrong_tree,
                &HashReply {
                    level: 0,
                    hashes: vec![1]
                }
            ),
            Err(MerkleError::ConfigMismatch { .. })
        ));
        assert_eq!(
            ex.receive(
                &t,
                &HashReply {
                    level: 0,
                    hashes: vec![]
                }
            ),
            Err(MerkleError::ReplyMismatch {
                level: 0,
                expected: 1,
                got_level: 0,
                got: 0
            })
        );
        // The state is unchanged after an error.
        assert_eq!(ex.request(), Some(HashRequest::Root { config: small() }));
        ex.receive(
            &t,
            &HashReply {
                level: 0,
                hashes: vec![t.root() ^ 1],
            },
        )
        .unwrap();
        assert_eq!(
            ex.request(),
            Some(HashRequest::Children {
                level: 0,
                parents: vec![0]
            })
        );
        assert!(matches!(
            ex.receive(
                &t,
                &HashReply {
                    level: 2,
                    hashes: vec![0; 4]
                }
            ),
            Err(MerkleError::ReplyMismatch { .. })
        ));
        // Children equal although the root differed: ends with no segments.
        ex.receive(
            &t,
            &HashReply {
                level: 1,
                hashes: t.level(1).to_vec(),
            },
        )
        .unwrap();
        assert_eq!(ex.segments(), Some(&[][..]));
        assert_eq!(
            ex.receive(
                &t,
                &HashReply {
                    level: 0,
                    hashes: vec![0]
                }
            ),
            Err(MerkleError::Finished)
        );
        assert_eq!(
            t.differing(0, &[0], &[]),
            Err(MerkleError::ReplyMismatch {
                level: 0,
                expected: 1,
                got_level: 0,
                got: 0
            })
        );
    }

    #[test]
    fn diff_keys_finds_missing_extra_and_changed() {
        let kh = |k: &str, h: u128| KeyHash {
            key: Bytes::copy_from_slice(k.as_bytes()),
            hash: h,
        };
        let a = [kh("c", 3), kh("a", 1), kh("b", 2), kh("e", 5)];
        let b = [kh("a", 1), kh("b", 9), kh("d", 4), kh("e", 5)];
        let d = diff_keys(&a, &b);
        assert_eq!(d, [&b"b"[..], b"c", b"d"]);
        assert!(diff_keys(&a, &a).is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Del(u8),
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                3 => (any::<u8>(), any::<u8>()).prop_map(|(k, d)| Op::Put(k, d)),
                1 => any::<u8>().prop_map(Op::Del),
            ],
            0..200,
        )
    }

    fn configs() -> impl Strategy<Value = MerkleConfig> {
        prop_oneof![
            Just(small()),
            Just(mid()),
            Just(MerkleConfig::new(2, 5).unwrap())
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn incremental_equals_rebuild(config in configs(), ops in ops()) {
            let mut t = MerkleTree::new(config);
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for op in &ops {
                match *op {
                    Op::Put(k, d) => {
                        let (k, d) = (format!("b:{k}").into_bytes(), vec![d]);
                        let prev = t.insert(&k, &d);
                        prop_assert_eq!(prev, model.get(&k).map(|d| item_hash(&k, d)));
                        model.insert(k, d);
                    }
                    Op::Del(k) => {
                        let k = format!("b:{k}").into_bytes();
                        prop_assert_eq!(t.remove(&k).is_some(), model.remove(&k).is_some());
                    }
                }
            }
            let rebuilt = MerkleTree::from_entries(config, model.iter());
            prop_assert_eq!(t.len(), model.len());
            prop_assert_eq!(t.root(), rebuilt.root());
            prop_assert_eq!(&t, &rebuilt);
            // Rebuild order does not matter either.
            let reversed = MerkleTree::from_entries(config, model.iter().rev());
            prop_assert_eq!(&reversed, &rebuilt);
        }

        #[test]
        fn insert_then_remove_returns_to_the_previous_root(
            config in configs(), base in prop::collection::btree_set(any::<u16>(), 0..100),
            extra in prop::collection::btree_set(any::<u16>(), 1..20),
        ) {
            let base_entries = base.iter().map(|k| (format!("b:{k}"), k.to_le_bytes()));
            let mut t = MerkleTree::from_entries(config, base_entries);
            let before = t.clone();
            let fresh: Vec<u16> = extra.difference(&base).copied().collect();
            for k in &fresh {
                t.insert(format!("b:{k}").as_bytes(), b"v");
            }
            prop_assert_eq!(fresh.is_empty(), t.root() == before.root());
            for k in fresh.iter().rev() {
                t.remove(format!("b:{k}").as_bytes());
            }
            prop_assert_eq!(t.root(), before.root());
            prop_assert_eq!(&t, &before);
        }

        #[test]
        fn k_differences_are_found_exactly(
            config in prop_oneof![Just(small()), Just(mid()), Just(MerkleConfig::SPEC)],
            n in 0usize..400,
            changes in prop::collection::btree_map(0u32..500, 0u8..3, 0..10),
        ) {
            // Key i < n is in both trees; a change makes it differ (0: changed digest,
            // 1: missing on b, 2: extra on b, for i >= n also present only on b).
            let key = |i: u32| format!("b:k{i}").into_bytes();
            let a = MerkleTree::from_entries(config, (0..n as u32).map(|i| (key(i), vec![1])));
            let mut b = a.clone();
            let mut differing = BTreeSet::new();
            for (&i, &kind) in &changes {
                let k = key(i);
                let present = (i as usize) < n;
                match (present, kind) {
                    (true, 0) => { b.insert(&k, &[2]); }
                    (true, 1) => { b.remove(&k); }
                    (true, _) => continue,
                    (false, _) => { b.insert(&k, &[1]); }
                }
                differing.insert(config.segment_of(&k));
            }
            let expected: Vec<SegmentId> = differing.into_iter().collect();
            let diff = diff_segments(&a, &b);
            prop_assert_eq!(&diff, &expected);
            prop_assert_eq!(&brute_diff(&a, &b), &expected);
            prop_assert_eq!(&diff_segments(&b, &a), &expected);

            for (local, remote) in [(&a, &b), (&b, &a)] {
                let ex = exchange(local, remote);
                prop_assert_eq!(ex.segments(), Some(&expected[..]));
                let k = expected.len();
                let (depth, fanout) = (config.depth() as usize, config.fanout() as usize);
                prop_assert_eq!(ex.nodes_compared(), expected_compared(config, &expected));
                prop_assert!(ex.nodes_compared() <= 1 + k * depth * fanout);
                prop_assert_eq!(ex.rounds(), if k == 0 { 1 } else { depth + 1 });
            }

            // The last stage finds exactly the changed keys.
            let mut keys = Vec::new();
            for &s in &expected {
                keys.extend(diff_keys(&a.key_hashes(s).entries, &b.key_hashes(s).entries));
            }
            keys.sort();
            let mut want: Vec<Bytes> = changes
                .iter()
                .filter(|&(&i, &kind)| (i as usize) >= n || kind < 2)
                .map(|(&i, _)| Bytes::from(key(i)))
                .collect();
            want.sort();
            prop_assert_eq!(keys, want);
        }
    }
}
