//! Active anti-entropy (spec §10): per-partition Merkle trees over a replica's objects, and
//! the pieces of the background exchange that [`crate::EventualNode`] runs.
//!
//! ## Trees
//!
//! A node keeps one [`MerkleTree`] ([`meridian_cluster::merkle`]) per partition it holds a
//! replica of (every partition whose `layout.replicas(p)` names it; on a layout change the
//! node calls [`AaeTrees::set_held`] and fills the new trees from its store). A tree's entries are the node's **own objects** of that partition: key =
//! the client key, digest = [`digest`], the object's causal clock encoding
//! ([`meridian_cluster::dvv::Clock::encode`]). Tombstones are objects like any other, so
//! deletes are compared and repaired too. **Hints are not in the trees**: they are kept for
//! another node and are not this replica's data.
//!
//! Guarantees:
//! - **Incremental and exact.** [`crate::ObjectStore`] calls [`AaeTrees::record`] after every
//!   write of a client key (coordinator put, replicate apply, read repair, handoff,
//!   anti-entropy repair), while still holding that key's stripe lock, so the tree always
//!   holds the digest of the object last written to the engine (writes of one key are
//!   recorded in engine order). A write touches exactly the key's segment and the inner
//!   nodes above it.
//! - **Rebuild equals incremental.** [`AaeTrees::build`] scans the engine in pages of
//!   bounded size (memory: one page plus the trees) and gives exactly the trees the
//!   incremental updates give for the same objects (tested). The node builds its trees in
//!   [`crate::EventualNode::new`], before anyone else can write through it.
//! - Keys whose partition is not held here are ignored (they cannot be primary data here;
//!   the node's writes of such keys go to the hint space).
//!
//! ## Exchange (run by the node, see `node.rs`)
//!
//! Every `anti_entropy_interval` a node takes the next `(partition, peer)` pair, round-robin
//! over its held partitions and, within each, the other replicas of the layout (seeded
//! start), skipping peers the failure detector says are down. Then, over the node's
//! transport:
//! 1. [`AaeMsg::Hashes`](messages::AaeMsg::Hashes) rounds drive an [`Exchange`](meridian_cluster::Exchange) (roots, then
//!    differing branches, then segments); the peer answers with [`MerkleTree::answer`];
//! 2. [`AaeMsg::Keys`](messages::AaeMsg::Keys) fetches the `(key, item hash)` lists of the
//!    differing segments; [`diff_keys`](meridian_cluster::diff_keys) against the local lists gives the differing keys, at
//!    most `anti_entropy_max_keys` per round (the rest is found again next round, so a large
//!    divergence is repaired over several rounds);
//! 3. [`AaeMsg::Sync`](messages::AaeMsg::Sync) carries the initiator's objects of those keys
//!    (or `None`); the peer merges each into its store and answers its resulting object,
//!    which the initiator merges in turn. Merge is commutative, associative and idempotent,
//!    and the LWW resolution is a function of the merged object, so both replicas end with
//!    the same object (LWW buckets resolve with `lww` as every other merge does).
//!
//! Repairs are **repair paths**: they use `merge_apply`, never subject to client limits
//! (`siblings_max`, `object_max`). A key is only synced when both sides are among the first
//! `n_val` replicas of its bucket (a bucket with a smaller `n_val` is not copied to nodes
//! that should not hold it).
//!
//! ## Deviations from the spec
//!
//! - The trees live in memory; there is no periodic `aae_rebuild` (they are rebuilt from the
//!   engine whenever the node is created, and a partition gained in a layout change gets its
//!   tree from a scan of the store).
//! - The default shape is 64 × 64 segments ([`default_tree`], 64 KiB per tree) instead of
//!   the spec's 256 × 256 (1 MiB per tree), because every held partition's tree is resident;
//!   [`MerkleConfig::SPEC`] can be configured. Both replicas of an exchange must use the
//!   same shape (a mismatch fails the exchange and is logged).
//! - There is no `aae_wan_bytes_per_s` of its own: exchanges with a peer in another DC draw
//!   their key lists and synced objects (both directions) from the node's WAN budget of
//!   background traffic (`repair_wan_bytes_per_sec`), shared with read repair and handoff.

mod exchange;
pub mod messages;

use crate::error::{ReplicationError, Result};
use crate::object_store::format::{RESERVED_PREFIX, decode_object};
use bytes::Bytes;
pub(crate) use exchange::Aae;
use meridian_cluster::{MerkleConfig, MerkleTree, Object, Ring};
use meridian_core::{NodeId, PartitionId, Timestamp};
use meridian_storage::Engine;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Segments whose key lists one [`messages::AaeMsg::Keys`] asks for.
pub const SEGMENTS_PER_REQUEST: usize = 64;

/// Keys one [`messages::AaeMsg::Sync`] carries.
pub const KEYS_PER_SYNC: usize = 64;

/// Why an anti-entropy exchange stopped early (the next rounds retry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AaeError {
    /// The peer did not answer, refused, or answered something unexpected.
    #[error("anti-entropy with {peer} failed: {reason}")]
    Peer {
        /// The other replica.
        peer: NodeId,
        /// What went wrong.
        reason: String,
    },
    /// The local store failed.
    #[error(transparent)]
    Store(#[from] ReplicationError),
}

/// The default tree shape: fanout 64, depth 2 (4096 segments, 64 KiB per tree).
pub fn default_tree() -> MerkleConfig {
    MerkleConfig::new(64, 2).expect("a valid shape")
}

/// The digest of an object in the trees: its causal clock's canonical encoding.
pub fn digest(o: &Object) -> Vec<u8> {
    o.clock().encode()
}

/// The anti-entropy trees of one node: one [`MerkleTree`] per held partition. See the
/// module docs.
#[derive(Debug)]
pub struct AaeTrees {
    config: MerkleConfig,
    ring: Ring,
    trees: RwLock<BTreeMap<PartitionId, Mutex<MerkleTree>>>,
}

impl AaeTrees {
    /// Empty trees of shape `config` for the partitions `held` of `ring`.
    pub fn empty(
        config: MerkleConfig,
        ring: Ring,
        held: impl IntoIterator<Item = PartitionId>,
    ) -> AaeTrees {
        AaeTrees {
            config,
            ring,
            trees: RwLock::new(
                held.into_iter()
                    .map(|p| (p, Mutex::new(MerkleTree::new(config))))
                    .collect(),
            ),
        }
    }

    /// The trees of `held`, built from the client objects stored in `engine`, read in
    /// pages of at most `page` keys (hints and other reserved keys are skipped; objects that
    /// do not decode are skipped with a warning).
    pub fn build(
        engine: &dyn Engine,
        config: MerkleConfig,
        ring: Ring,
        held: impl IntoIterator<Item = PartitionId>,
        page: usize,
    ) -> Result<AaeTrees> {
        let mut entries: BTreeMap<PartitionId, Vec<(Bytes, Vec<u8>)>> =
            held.into_iter().map(|p| (p, Vec::new())).collect();
        let page = page.max(1);
        let end = Bound::Excluded(Bytes::from_static(&[RESERVED_PREFIX]));
        let mut start = Bound::Unbounded;
        loop {
            let rows = engine.scan(start, end.clone(), Timestamp::MAX, page, false)?;
            let full = rows.len() == page;
            let mut last = None;
            for (k, v) in rows {
                if let Some(bytes) = v.value
                    && let Some(list) = entries.get_mut(&ring.partition_of(&k))
                {
                    match decode_object(&bytes) {
                        Ok(o) => list.push((k.clone(), digest(&o))),
                        Err(e) => {
                            tracing::warn!(key = ?k, error = %e, "anti-entropy build skips an undecodable object")
                        }
                    }
                }
                last = Some(k);
            }
            match last {
                Some(k) if full => start = Bound::Excluded(k),
                _ => break,
            }
        }
        Ok(AaeTrees {
            config,
            ring,
            trees: RwLock::new(
                entries
                    .into_iter()
                    .map(|(p, e)| (p, Mutex::new(MerkleTree::from_entries(config, e))))
                    .collect(),
            ),
        })
    }

    /// The trees' shape.
    pub fn config(&self) -> MerkleConfig {
        self.config
    }

    /// The held partitions, ascending.
    pub fn partitions(&self) -> impl Iterator<Item = PartitionId> + use<> {
        self.trees
            .read()
            .keys()
            .copied()
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// Makes `held` the set of partitions with a tree: trees of other partitions are dropped
    /// and new partitions get an empty tree, which the caller must then fill with the
    /// objects it already stores ([`crate::ObjectStore::record_partitions`]). Returns the
    /// new partitions.
    pub fn set_held(&self, held: &BTreeSet<PartitionId>) -> BTreeSet<PartitionId> {
        let mut trees = self.trees.write();
        trees.retain(|p, _| held.contains(p));
        let mut added = BTreeSet::new();
        for &p in held {
            trees.entry(p).or_insert_with(|| {
                added.insert(p);
                Mutex::new(MerkleTree::new(self.config))
            });
        }
        added
    }

    /// The partition of a client key.
    pub fn partition_of(&self, key: &[u8]) -> PartitionId {
        self.ring.partition_of(key)
    }

    /// Records the new state of client key `key` (`None`: no object any more). Keys of
    /// partitions not held here, and reserved keys, are ignored.
    pub fn record(&self, key: &[u8], object: Option<&Object>) {
        if key.first() == Some(&RESERVED_PREFIX) {
            return;
        }
        if let Some(t) = self.trees.read().get(&self.partition_of(key)) {
            let d = object.map(digest);
            t.lock().update(key, d.as_deref());
        }
    }

    /// Runs `f` on the tree of partition `p`, if held (the tree is locked meanwhile: keep
    /// `f` short).
    pub fn with_tree<R>(&self, p: PartitionId, f: impl FnOnce(&MerkleTree) -> R) -> Option<R> {
        self.trees.read().get(&p).map(|t| f(&t.lock()))
    }

    /// Number of keys in the tree of partition `p`, if held.
    pub fn tree_len(&self, p: PartitionId) -> Option<usize> {
        self.with_tree(p, MerkleTree::len)
    }

    /// A copy of the tree of partition `p`, if held.
    pub fn tree(&self, p: PartitionId) -> Option<MerkleTree> {
        self.with_tree(p, MerkleTree::clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectStore;
    use meridian_cluster::dvv::{Clock as CausalClock, Content, ReplicaId};
    use meridian_core::{ManualClock, NodeId};
    use meridian_storage::MemEngine;
    use std::sync::Arc;

    fn shape() -> MerkleConfig {
        MerkleConfig::new(16, 2).unwrap()
    }

    fn ring() -> Ring {
        Ring::new(64).unwrap()
    }

    /// A store over a fresh engine with trees for the even partitions attached.
    fn setup() -> (ObjectStore, Arc<AaeTrees>) {
        let s = ObjectStore::new(
            Arc::new(MemEngine::new()),
            Arc::new(ManualClock::new(Timestamp(1_000))),
        );
        let held = ring().partitions().filter(|p| p.0 % 2 == 0);
        let t = Arc::new(AaeTrees::empty(shape(), ring(), held));
        s.attach_trees(t.clone());
        (s, t)
    }

    fn held(t: &AaeTrees, key: &[u8]) -> bool {
        t.tree(t.partition_of(key)).is_some()
    }

    fn rid(p: PartitionId) -> ReplicaId {
        ReplicaId {
            partition: p,
            node: NodeId(1),
            incarnation: 0,
            epoch: 0,
        }
    }

    fn put(s: &ObjectStore, t: &AaeTrees, key: &[u8], v: &'static str) -> Object {
        let ctx = s
            .get(key)
            .unwrap()
            .map(|o| o.clock().clone())
            .unwrap_or_default();
        s.coordinator_put(
            key,
            &ctx,
            Content::Value(Bytes::from_static(v.as_bytes())),
            rid(t.partition_of(key)),
            true,
            100,
        )
        .unwrap()
    }

    fn rebuild(s: &ObjectStore, page: usize) -> AaeTrees {
        let held = ring().partitions().filter(|p| p.0 % 2 == 0);
        AaeTrees::build(s.engine().as_ref(), shape(), ring(), held, page).unwrap()
    }

    #[test]
    fn a_write_changes_exactly_the_keys_segment() {
        let (s, t) = setup();
        for i in 0..200 {
            let k = format!("b:k{i}").into_bytes();
            put(&s, &t, &k, "v");
        }
        let key = (0..)
            .map(|i| format!("b:x{i}").into_bytes())
            .find(|k| held(&t, k))
            .unwrap();
        let p = t.partition_of(&key);
        let before = t.tree(p).unwrap();
        let o = put(&s, &t, &key, "new");
        let after = t.tree(p).unwrap();
        let seg = shape().segment_of(&key);
        let depth = shape().depth();
        for i in 0..shape().segments() {
            let (b, a) = (
                before.level(depth)[i as usize],
                after.level(depth)[i as usize],
            );
            assert_eq!(b != a, i == seg.0, "segment {i}");
        }
        assert_eq!(after.len(), before.len() + 1);
        assert_eq!(
            after.get(&key),
            Some(meridian_cluster::item_hash(&key, &digest(&o)))
        );
        // Every other partition's tree is untouched.
        for q in t.partitions().filter(|&q| q != p) {
            assert_eq!(
                t.tree(q).unwrap().root(),
                rebuild(&s, 7).tree(q).unwrap().root()
            );
        }
        // Overwriting the key again changes the same segment only.
        let mid = t.tree(p).unwrap();
        put(&s, &t, &key, "newer");
        let fin = t.tree(p).unwrap();
        let changed: Vec<u32> = (0..shape().segments())
            .filter(|&i| mid.level(depth)[i as usize] != fin.level(depth)[i as usize])
            .collect();
        assert_eq!(changed, [seg.0]);
    }

    #[test]
    fn rebuilding_from_the_store_equals_the_incremental_trees() {
        let (s, t) = setup();
        let other = ObjectStore::new(
            Arc::new(MemEngine::new()),
            Arc::new(ManualClock::new(Timestamp(5_000))),
        );
        for i in 0..300 {
            let k = format!("b{}:k{i}", i % 3).into_bytes();
            put(&s, &t, &k, "v1");
            if i % 4 == 0 {
                put(&s, &t, &k, "v2");
            }
            if i % 5 == 0 {
                // A concurrent write merged in (replicate / repair path).
                let o = other
                    .coordinator_put(
                        &k,
                        &CausalClock::new(),
                        Content::Tombstone,
                        ReplicaId {
                            partition: t.partition_of(&k),
                            node: NodeId(2),
                            incarnation: 0,
                            epoch: 0,
                        },
                        true,
                        100,
                    )
                    .unwrap();
                s.merge_apply(&k, &o, i % 2 == 0).unwrap();
            }
            if i % 7 == 0 {
                // Hints are not the node's data.
                let o = s.get(&k).unwrap().unwrap();
                s.add_hint(NodeId(9), &format!("h:{i}").into_bytes(), &o, true)
                    .unwrap();
            }
        }
        let total: usize = t.partitions().map(|p| t.tree(p).unwrap().len()).sum();
        assert!(total > 100 && total < 300, "{total}");
        for page in [1, 7, 10_000] {
            let r = rebuild(&s, page);
            for p in t.partitions() {
                assert_eq!(r.tree(p), t.tree(p), "partition {p:?} page {page}");
            }
        }
        // Nothing of an unheld partition or the hint space is recorded.
        for p in t.partitions() {
            let tree = t.tree(p).unwrap();
            for seg in 0..shape().segments() {
                for (k, _) in tree.segment_entries(meridian_cluster::SegmentId(seg)) {
                    assert_eq!(t.partition_of(k), p);
                    assert!(!k.starts_with(b"h:"));
                }
            }
        }
    }

    #[test]
    fn merging_an_unchanged_object_leaves_the_tree_alone() {
        let (s, t) = setup();
        let key = (0..)
            .map(|i| format!("b:y{i}").into_bytes())
            .find(|k| held(&t, k))
            .unwrap();
        let o = put(&s, &t, &key, "v");
        let p = t.partition_of(&key);
        let before = t.tree(p).unwrap();
        s.merge_apply(&key, &o, true).unwrap();
        assert_eq!(t.tree(p).unwrap(), before);
        t.record(&key, None);
        assert!(t.tree(p).unwrap().is_empty());
    }
}
