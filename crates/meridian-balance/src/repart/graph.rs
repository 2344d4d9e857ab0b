//! The co-access graph (spec `repartitioning.md` §2): the pattern tracker of workload-aware
//! repartitioning, and its CSR snapshot.
//!
//! [`CoAccessGraph`] turns a stream of requests, each one a set of keys, into a weighted
//! undirected graph:
//!
//! - one vertex per key, weighted by the number of windowed requests that touched the key;
//! - one edge per pair of keys touched by a common request, weighted by the number of windowed
//!   requests that touched both (every request adds a clique over its keys, as in kvpaxos).
//!
//! **Guarantee (invariant 3, the window model).** After any sequence of
//! [`record`](CoAccessGraph::record) calls, the graph equals the graph built from scratch from
//! exactly the last W requests (W = 0: every request since [`new`](CoAccessGraph::new) or
//! [`clear`](CoAccessGraph::clear)). That covers vertices, edges and every weight. Entries
//! whose weight falls to zero are erased, not kept at zero, so a key that leaves the window costs
//! no memory. W is counted in requests, not keys. Each request is normalised the same way when
//! it enters and when it leaves the window:
//!
//! - its keys are deduplicated (a request that touches a key twice counts once) and their order
//!   does not matter;
//! - only its [`MAX_CLIQUE_KEYS`] smallest distinct keys form the clique. Every key still counts
//!   as a vertex access. Scans (at most 8 keys) and ordinary transactions are far below the cap.
//!   It bounds the per-request work (O(k²) pair updates for k keys) against a request that
//!   touches many keys.
//!
//! Counters are `u32`. They are exact for every window, because [`new`](CoAccessGraph::new)
//! rejects W > `u32::MAX`. With W = 0 (never forget) they saturate at `u32::MAX` rather than
//! wrap.
//!
//! **Snapshots (invariant 4).** [`CoAccessGraph::to_csr`] returns a [`Csr`] in METIS's layout:
//! vertices sorted by key, neighbour lists ascending, symmetric, no self-loops, every weight
//! positive and saturated to `i32::MAX`.
//!
//! **Representation.** Keys are interned to dense `u32` ids, and ids are reused once a key leaves
//! the graph. The adjacency and the window hold ids, so a key is stored twice (the key → id map
//! and the id → key table) however many edges and windowed requests it appears in. Keys are
//! hashed with std's keyed SipHash because clients choose them. Ids are assigned here, so
//! adjacency maps hash them with a multiplicative hash. A request allocates nothing once the
//! scratch buffers, the window ring and the maps have grown. Hash maps give memory back once
//! they are a quarter full. The id table keeps its peak length, about 48 bytes per key for
//! `u32` keys.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};

use super::RepartError;

/// A compressed-sparse-row snapshot of a [`CoAccessGraph`], in METIS's layout.
///
/// Vertices are the keys sorted ascending; `keys[v]` is vertex `v`'s key. The adjacency is
/// symmetric, has no self-loops, and every weight is positive and saturated to `i32::MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csr<K> {
    /// `xadj[v]..xadj[v + 1]` indexes `v`'s neighbours in `adjncy`/`adjwgt`; `len = n + 1`.
    pub xadj: Vec<i32>,
    /// Neighbour vertices, ascending within each vertex's range.
    pub adjncy: Vec<i32>,
    /// Edge weights: the number of windowed requests that touched both keys.
    pub adjwgt: Vec<i32>,
    /// Vertex weights: the number of windowed requests that touched the key.
    pub vwgt: Vec<i32>,
    /// Vertex → key.
    pub keys: Vec<K>,
}

impl<K> Csr<K> {
    /// Number of vertices.
    pub fn vertices(&self) -> usize {
        self.vwgt.len()
    }
    /// Number of undirected edges.
    pub fn edges(&self) -> usize {
        self.adjncy.len() / 2
    }
}

/// At most this many distinct keys of one request form its clique: the smallest ones in key
/// order. This bounds a request's pair updates at 64 · 63 directed ones. All of the request's keys
/// still count as vertex accesses. The same keys are used when the request leaves the window.
pub const MAX_CLIQUE_KEYS: usize = 64;

/// Hashes ids that clients cannot choose: the graph's interned ids (dense, assigned by the
/// graph) and a node's 64-bit key ids (a keyed hash). So a multiplicative (Fx-style) hash is
/// safe. The rotation moves the well-mixed high bits of the product into the low bits that
/// pick a bucket, and the top bits that tag entries depend on every bit of the id.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

const ID_HASH_SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(ID_HASH_SEED);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(i)).wrapping_mul(ID_HASH_SEED);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(ID_HASH_SEED);
    }
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

/// Neighbour id → edge weight.
type IdMap = HashMap<u32, u32, BuildHasherDefault<IdHasher>>;

/// One interned id: live (`key` set, `weight > 0`) or on the free list (`None`, 0, empty).
#[derive(Clone)]
struct Slot<K> {
    key: Option<K>,
    weight: u32,
    adj: IdMap,
}

/// The co-access graph over a sliding window of the last W requests (module docs).
///
/// Vertex weight = number of windowed requests that touched the key; edge weight = number of
/// windowed requests that touched both keys.
#[derive(Clone)]
pub struct CoAccessGraph<K> {
    /// W, in requests; 0 = no window.
    window: usize,
    /// Key → id of every live vertex.
    ids: HashMap<K, u32, super::KeyHasher>,
    /// Id → key, weight and adjacency. Free ids are empty slots.
    slots: Vec<Slot<K>>,
    /// Free ids, reused before the table grows.
    free: Vec<u32>,
    /// The windowed requests' normalised ids, oldest first (only when W > 0).
    win_ids: VecDeque<u32>,
    /// The windowed requests' lengths in `win_ids`, oldest first (only when W > 0).
    win_lens: VecDeque<usize>,
    /// Requests the graph reflects: `win_lens.len()` when W > 0; all since `new`/`clear` else.
    requests: usize,
    /// Directed adjacency entries (twice the undirected edges).
    directed: usize,
    /// Sum of vertex weights.
    total_vw: u64,
    /// Sum of undirected edge weights.
    total_ew: u64,
    /// Scratch for deduplicating a request's keys.
    scratch_keys: Vec<K>,
    /// Scratch for a request's ids.
    scratch_ids: Vec<u32>,
}

impl<K> fmt::Debug for CoAccessGraph<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoAccessGraph")
            .field("window", &self.window)
            .field("window_len", &self.requests)
            .field("vertices", &self.ids.len())
            .field("edges", &(self.directed / 2))
            .field("total_vertex_weight", &self.total_vw)
            .field("total_edge_weight", &self.total_ew)
            .finish()
    }
}

/// Gives a map's memory back once it is less than a quarter full, keeping room to grow. The
/// cost is amortised: a shrink halves the capacity at least, and it follows at least 3/4 ×
/// capacity removals.
fn release<Q: Hash + Eq, V, S: BuildHasher>(m: &mut HashMap<Q, V, S>) {
    if m.capacity() > 64 && m.len() * 4 < m.capacity() {
        m.shrink_to(m.len() * 2);
    }
}

/// A `u32` counter as a METIS weight.
fn saturate(w: u32) -> i32 {
    i32::try_from(w).unwrap_or(i32::MAX)
}

impl<K: Clone + Ord + Hash + Eq> CoAccessGraph<K> {
    /// An empty graph over a window of the last `window` requests; `window = 0` means no window
    /// (the graph never forgets).
    ///
    /// # Panics
    ///
    /// If `window > u32::MAX`: the `u32` counters could then saturate and the window model
    /// would not hold.
    pub fn new(window: usize) -> Self {
        assert!(
            u32::try_from(window).is_ok(),
            "co-access window {window} exceeds u32::MAX requests"
        );
        Self {
            window,
            ids: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            win_ids: VecDeque::new(),
            win_lens: VecDeque::new(),
            requests: 0,
            directed: 0,
            total_vw: 0,
            total_ew: 0,
            scratch_keys: Vec::new(),
            scratch_ids: Vec::new(),
        }
    }

    /// Records one request that touched `keys`. The keys are deduplicated, each one gains an
    /// access, and the [`MAX_CLIQUE_KEYS`] smallest distinct keys gain a clique of co-accesses.
    /// When W > 0 and the window then holds more than W requests, the oldest one is taken
    /// back the same way and entries that reach 0 are erased.
    ///
    /// An empty `keys` still counts as a request of the window.
    ///
    /// Cost: O(k log k + min(k, 64)²) hash-map operations for k keys. Nothing is allocated once
    /// the buffers and maps have grown.
    ///
    /// # Panics
    ///
    /// If more than 2³² distinct keys would be live at once.
    pub fn record(&mut self, keys: &[K]) {
        let mut ks = std::mem::take(&mut self.scratch_keys);
        ks.clear();
        ks.extend_from_slice(keys);
        ks.sort_unstable();
        ks.dedup();
        let mut ids = std::mem::take(&mut self.scratch_ids);
        ids.clear();
        for key in ks.drain(..) {
            let id = match self.ids.entry(key) {
                Entry::Occupied(e) => *e.get(),
                Entry::Vacant(e) => {
                    let id = match self.free.pop() {
                        Some(id) => id,
                        None => {
                            let id = u32::try_from(self.slots.len())
                                .expect("more than 2^32 live keys in the co-access graph");
                            self.slots.push(Slot {
                                key: None,
                                weight: 0,
                                adj: IdMap::default(),
                            });
                            id
                        }
                    };
                    self.slots[id as usize].key = Some(e.key().clone());
                    e.insert(id);
                    id
                }
            };
            ids.push(id);
        }
        self.scratch_keys = ks;

        self.add(&ids);
        self.requests = self.requests.saturating_add(1);
        if self.window > 0 {
            self.win_ids.extend(ids.iter().copied());
            self.win_lens.push_back(ids.len());
            if self.win_lens.len() > self.window {
                let n = self.win_lens.pop_front().expect("window is not empty");
                ids.clear();
                ids.extend(self.win_ids.drain(..n));
                self.remove(&ids);
                self.requests -= 1;
            }
        }
        self.scratch_ids = ids;
    }

    /// Applies +1 for a normalised request (distinct ids, in key order).
    fn add(&mut self, ids: &[u32]) {
        for &id in ids {
            let slot = &mut self.slots[id as usize];
            if slot.weight < u32::MAX {
                slot.weight += 1;
                self.total_vw += 1;
            }
        }
        let clique = &ids[..ids.len().min(MAX_CLIQUE_KEYS)];
        for (i, &a) in clique.iter().enumerate() {
            let adj = &mut self.slots[a as usize].adj;
            if adj.capacity() == 0 {
                // A new vertex: one allocation of the right size instead of growing it.
                adj.reserve(clique.len() - 1);
            }
            for (j, &b) in clique.iter().enumerate() {
                if i == j {
                    continue;
                }
                let w = adj.entry(b).or_insert(0);
                if *w == 0 {
                    self.directed += 1;
                }
                // Both directions hold the same count, so they saturate together.
                if *w < u32::MAX {
                    *w += 1;
                    if i < j {
                        self.total_ew += 1;
                    }
                }
            }
        }
    }

    /// Applies −1 for a normalised request leaving the window. Erases what reaches 0.
    fn remove(&mut self, ids: &[u32]) {
        let clique = &ids[..ids.len().min(MAX_CLIQUE_KEYS)];
        for (i, &a) in clique.iter().enumerate() {
            let adj = &mut self.slots[a as usize].adj;
            for (j, &b) in clique.iter().enumerate() {
                if i == j {
                    continue;
                }
                let w = adj
                    .get_mut(&b)
                    .expect("a windowed request's edge is in the graph");
                *w -= 1;
                if i < j {
                    self.total_ew -= 1;
                }
                if *w == 0 {
                    adj.remove(&b);
                    self.directed -= 1;
                }
            }
            release(adj);
        }
        for &id in ids {
            let slot = &mut self.slots[id as usize];
            slot.weight -= 1;
            self.total_vw -= 1;
            if slot.weight == 0 {
                // Every edge of the key came from a request still windowed, so none is left.
                debug_assert!(slot.adj.is_empty());
                slot.adj = IdMap::default();
                let key = slot.key.take().expect("a live id has a key");
                self.ids.remove(&key);
                self.free.push(id);
            }
        }
        release(&mut self.ids);
    }

    /// The window W, in requests (0 = no window).
    pub fn window(&self) -> usize {
        self.window
    }

    /// Number of requests the graph reflects: at most W when W > 0, every request recorded
    /// since [`new`](Self::new) or [`clear`](Self::clear) when W = 0.
    pub fn window_len(&self) -> usize {
        self.requests
    }

    /// Number of vertices: distinct keys touched by the windowed requests.
    pub fn vertices(&self) -> usize {
        self.ids.len()
    }

    /// Number of undirected edges: distinct pairs of keys co-accessed by a windowed request.
    pub fn edges(&self) -> usize {
        self.directed / 2
    }

    /// True when no windowed request touched any key (no vertices).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Number of windowed requests that touched `key`; 0 when it is not a vertex.
    pub fn vertex_weight(&self, key: &K) -> u32 {
        self.ids
            .get(key)
            .map_or(0, |&id| self.slots[id as usize].weight)
    }

    /// Number of windowed requests whose clique contains both `a` and `b`; 0 when `a == b`
    /// (there are no self-loops) or when there is no such edge. Symmetric.
    pub fn edge_weight(&self, a: &K, b: &K) -> u32 {
        match (self.ids.get(a), self.ids.get(b)) {
            (Some(&ia), Some(&ib)) if ia != ib => {
                self.slots[ia as usize].adj.get(&ib).copied().unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// Sum of the vertex weights.
    pub fn total_vertex_weight(&self) -> u64 {
        self.total_vw
    }

    /// Sum of the undirected edge weights (each edge counted once).
    pub fn total_edge_weight(&self) -> u64 {
        self.total_ew
    }

    /// Forgets every request and releases the memory, keeping W.
    pub fn clear(&mut self) {
        *self = Self::new(self.window);
    }

    /// The CSR snapshot: vertices sorted by key, neighbour lists ascending by vertex index,
    /// symmetric, no self-loops, weights saturated to `i32::MAX`.
    ///
    /// O(n log n + m log d) for n vertices, m directed edges and maximum degree d. It allocates
    /// the output and a few O(n) buffers, and nothing per edge.
    ///
    /// # Panics
    ///
    /// If the graph does not fit 32-bit indices (see [`try_to_csr`](Self::try_to_csr)).
    pub fn to_csr(&self) -> Csr<K> {
        match self.try_to_csr() {
            Ok(csr) => csr,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`to_csr`](Self::to_csr), or [`RepartError::GraphTooLarge`] when there are more than
    /// `i32::MAX` vertices or directed edges.
    pub fn try_to_csr(&self) -> Result<Csr<K>, RepartError> {
        let n = self.ids.len();
        let limit = i32::MAX as usize;
        if n > limit || self.directed > limit {
            return Err(RepartError::GraphTooLarge {
                vertices: n,
                edges: self.directed,
                limit,
            });
        }
        let mut order: Vec<(K, u32)> = self.ids.iter().map(|(k, &id)| (k.clone(), id)).collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let (keys, order): (Vec<K>, Vec<u32>) = order.into_iter().unzip();
        // Id → vertex index. Free ids keep 0 and are never looked up.
        let mut rank = vec![0_i32; self.slots.len()];
        for (v, &id) in order.iter().enumerate() {
            rank[id as usize] = v as i32; // v < n ≤ i32::MAX, checked above
        }
        let mut xadj = Vec::with_capacity(n + 1);
        let mut adjncy = Vec::with_capacity(self.directed);
        let mut adjwgt = Vec::with_capacity(self.directed);
        let mut vwgt = Vec::with_capacity(n);
        let mut row: Vec<(i32, i32)> = Vec::new();
        xadj.push(0);
        for &id in &order {
            let slot = &self.slots[id as usize];
            vwgt.push(saturate(slot.weight));
            row.clear();
            row.extend(
                slot.adj
                    .iter()
                    .map(|(&b, &w)| (rank[b as usize], saturate(w))),
            );
            row.sort_unstable_by_key(|&(u, _)| u);
            for &(u, w) in &row {
                adjncy.push(u);
                adjwgt.push(w);
            }
            xadj.push(adjncy.len() as i32); // ≤ directed ≤ i32::MAX, checked above
        }
        Ok(Csr {
            xadj,
            adjncy,
            adjwgt,
            vwgt,
            keys,
        })
    }

    /// Test-only: sets a vertex's weight (the key must be a vertex), keeping the totals.
    #[cfg(test)]
    fn set_vertex_weight(&mut self, key: &K, w: u32) {
        assert!(w > 0);
        let slot = &mut self.slots[self.ids[key] as usize];
        self.total_vw = self.total_vw - u64::from(slot.weight) + u64::from(w);
        slot.weight = w;
    }

    /// Test-only: sets an edge's weight in both directions (the edge must exist).
    #[cfg(test)]
    fn set_edge_weight(&mut self, a: &K, b: &K, w: u32) {
        assert!(w > 0);
        let (ia, ib) = (self.ids[a], self.ids[b]);
        let old = self.slots[ia as usize].adj[&ib];
        *self.slots[ia as usize].adj.get_mut(&ib).unwrap() = w;
        *self.slots[ib as usize].adj.get_mut(&ia).unwrap() = w;
        self.total_ew = self.total_ew - u64::from(old) + u64::from(w);
    }

    /// Test-only: checks the internal bookkeeping (interning, symmetry, counters).
    #[cfg(test)]
    fn check_invariants(&self) {
        assert_eq!(self.ids.len() + self.free.len(), self.slots.len());
        for (k, &id) in &self.ids {
            let slot = &self.slots[id as usize];
            assert!(
                slot.key.as_ref() == Some(k),
                "id table disagrees with key map"
            );
            assert!(slot.weight > 0, "live vertex with weight 0");
        }
        for &id in &self.free {
            let slot = &self.slots[id as usize];
            assert!(slot.key.is_none() && slot.weight == 0 && slot.adj.is_empty());
            assert_eq!(slot.adj.capacity(), 0, "freed adjacency not released");
        }
        let (mut vw, mut ew, mut directed) = (0_u64, 0_u64, 0_usize);
        for (id, slot) in self.slots.iter().enumerate() {
            vw += u64::from(slot.weight);
            directed += slot.adj.len();
            for (&b, &w) in &slot.adj {
                assert_ne!(b as usize, id, "self-loop");
                assert!(w > 0, "zero-weight edge kept");
                assert!(self.slots[b as usize].key.is_some(), "edge to a free id");
                assert_eq!(self.slots[b as usize].adj.get(&(id as u32)), Some(&w));
                if (id as u32) < b {
                    ew += u64::from(w);
                }
            }
        }
        assert_eq!(vw, self.total_vw);
        assert_eq!(ew, self.total_ew);
        assert_eq!(directed, self.directed);
        if self.window > 0 {
            assert!(self.win_lens.len() <= self.window);
            assert_eq!(self.win_lens.len(), self.requests);
            assert_eq!(self.win_lens.iter().sum::<usize>(), self.win_ids.len());
        } else {
            assert!(self.win_lens.is_empty() && self.win_ids.is_empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    /// The graph of `reqs` built the obvious way: (vertex weights, edge weights with a < b).
    type Naive = (BTreeMap<u32, u32>, BTreeMap<(u32, u32), u32>);

    fn naive(reqs: &[Vec<u32>]) -> Naive {
        let (mut vw, mut ew) = (BTreeMap::new(), BTreeMap::new());
        for r in reqs {
            let set: Vec<u32> = r
                .iter()
                .copied()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            for &k in &set {
                *vw.entry(k).or_insert(0) += 1;
            }
            let clique = &set[..set.len().min(MAX_CLIQUE_KEYS)];
            for (i, &a) in clique.iter().enumerate() {
                for &b in &clique[i + 1..] {
                    *ew.entry((a, b)).or_insert(0) += 1;
                }
            }
        }
        (vw, ew)
    }

    /// The CSR of a naive graph, built independently of `to_csr`.
    fn naive_csr((vw, ew): &Naive) -> Csr<u32> {
        let keys: Vec<u32> = vw.keys().copied().collect();
        let index = |k: u32| keys.binary_search(&k).unwrap() as i32;
        let mut rows: Vec<BTreeMap<i32, i32>> = vec![BTreeMap::new(); keys.len()];
        for (&(a, b), &w) in ew {
            let w = w.min(i32::MAX as u32) as i32;
            rows[index(a) as usize].insert(index(b), w);
            rows[index(b) as usize].insert(index(a), w);
        }
        let mut csr = Csr {
            xadj: vec![0],
            adjncy: vec![],
            adjwgt: vec![],
            vwgt: vw
                .values()
                .map(|&w| w.min(i32::MAX as u32) as i32)
                .collect(),
            keys,
        };
        for row in rows {
            for (u, w) in row {
                csr.adjncy.push(u);
                csr.adjwgt.push(w);
            }
            csr.xadj.push(csr.adjncy.len() as i32);
        }
        csr
    }

    /// The windowed suffix of `reqs` under window `w`.
    fn tail(reqs: &[Vec<u32>], w: usize) -> &[Vec<u32>] {
        if w == 0 {
            reqs
        } else {
            &reqs[reqs.len().saturating_sub(w)..]
        }
    }

    /// Invariant 3: `g` equals the naive graph of the last W of `reqs`, over keys `0..alphabet`.
    fn assert_window_model(g: &CoAccessGraph<u32>, reqs: &[Vec<u32>], alphabet: u32) {
        g.check_invariants();
        let windowed = tail(reqs, g.window());
        let model = naive(windowed);
        let (vw, ew) = &model;
        assert_eq!(g.window_len(), windowed.len());
        assert_eq!(g.vertices(), vw.len());
        assert_eq!(g.edges(), ew.len());
        assert_eq!(g.is_empty(), vw.is_empty());
        assert_eq!(
            g.total_vertex_weight(),
            vw.values().map(|&w| u64::from(w)).sum::<u64>()
        );
        assert_eq!(
            g.total_edge_weight(),
            ew.values().map(|&w| u64::from(w)).sum::<u64>()
        );
        for a in 0..alphabet {
            assert_eq!(
                g.vertex_weight(&a),
                vw.get(&a).copied().unwrap_or(0),
                "vw[{a}]"
            );
            for b in 0..alphabet {
                let want = ew.get(&(a.min(b), a.max(b))).copied().unwrap_or(0);
                assert_eq!(g.edge_weight(&a, &b), want, "adj[{a}][{b}]");
            }
        }
        let csr = g.to_csr();
        assert_eq!(csr, naive_csr(&model));
        // And a graph rebuilt from scratch from the windowed requests only.
        let mut fresh = CoAccessGraph::new(0);
        for r in windowed {
            fresh.record(r);
        }
        assert_eq!(fresh.vertices(), g.vertices());
        assert_eq!(fresh.edges(), g.edges());
        assert_eq!(fresh.to_csr(), csr);
    }

    /// Invariant 4 on a snapshot.
    fn assert_csr_valid<K: Ord>(csr: &Csr<K>) {
        let n = csr.keys.len();
        assert_eq!(csr.vwgt.len(), n);
        assert_eq!(csr.vertices(), n);
        assert_eq!(csr.xadj.len(), n + 1);
        assert_eq!(csr.xadj[0], 0);
        assert_eq!(*csr.xadj.last().unwrap() as usize, csr.adjncy.len());
        assert_eq!(csr.adjncy.len(), csr.adjwgt.len());
        assert_eq!(csr.adjncy.len() % 2, 0);
        assert!(
            csr.xadj.windows(2).all(|w| w[0] <= w[1]),
            "xadj not monotone"
        );
        assert!(
            csr.keys.windows(2).all(|w| w[0] < w[1]),
            "keys not strictly ascending"
        );
        assert!(
            csr.vwgt.iter().all(|&w| w > 0),
            "non-positive vertex weight"
        );
        assert!(
            csr.adjwgt.iter().all(|&w| w > 0),
            "non-positive edge weight"
        );
        let row = |v: usize| csr.xadj[v] as usize..csr.xadj[v + 1] as usize;
        for v in 0..n {
            let nbrs = &csr.adjncy[row(v)];
            assert!(
                nbrs.windows(2).all(|w| w[0] < w[1]),
                "row {v} not ascending"
            );
            for (&u, &w) in nbrs.iter().zip(&csr.adjwgt[row(v)]) {
                assert!(u >= 0 && (u as usize) < n, "neighbour out of range");
                assert_ne!(u as usize, v, "self-loop");
                let back = row(u as usize);
                let pos = csr.adjncy[back.clone()]
                    .binary_search(&(v as i32))
                    .expect("asymmetric edge");
                assert_eq!(csr.adjwgt[back.start + pos], w, "asymmetric weight");
                // A pair cannot be co-accessed more often than either key is accessed.
                assert!(w <= csr.vwgt[v] && w <= csr.vwgt[u as usize]);
            }
        }
    }

    /// Requests of 1..6 keys from `0..alphabet`, a third of them with a key repeated.
    fn requests(alphabet: u32, max_len: usize) -> impl Strategy<Value = Vec<Vec<u32>>> {
        let req = (prop::collection::vec(0..alphabet, 1..max_len), any::<u8>()).prop_map(
            |(mut r, dup)| {
                if dup % 3 == 0 {
                    let k = r[dup as usize % r.len()];
                    r.push(k);
                }
                r
            },
        );
        prop::collection::vec(req, 0..60)
    }

    proptest! {
        /// Invariant 3, checked after every request.
        #[test]
        fn window_model_matches_naive_rebuild(reqs in requests(20, 6), w in 0usize..10) {
            let mut g = CoAccessGraph::new(w);
            for i in 0..reqs.len() {
                g.record(&reqs[i]);
                assert_window_model(&g, &reqs[..=i], 20);
            }
        }

        /// Invariant 3 with requests beyond the clique cap: the same keys enter and leave.
        #[test]
        fn window_model_with_capped_cliques(
            reqs in prop::collection::vec(prop::collection::vec(0u32..120, 0..90), 0..12),
            w in 0usize..4,
        ) {
            let mut g = CoAccessGraph::new(w);
            for i in 0..reqs.len() {
                g.record(&reqs[i]);
                assert_window_model(&g, &reqs[..=i], 120);
            }
        }

        /// Invariant 4 on random graphs, windowed or not.
        #[test]
        fn csr_is_valid(reqs in requests(50, 9), w in 0usize..20) {
            let mut g = CoAccessGraph::new(w);
            for r in &reqs {
                g.record(r);
            }
            let csr = g.to_csr();
            assert_csr_valid(&csr);
            prop_assert_eq!(csr.vertices(), g.vertices());
            prop_assert_eq!(csr.edges(), g.edges());
            for (v, k) in csr.keys.iter().enumerate() {
                prop_assert_eq!(csr.vwgt[v] as u32, g.vertex_weight(k));
                for e in csr.xadj[v] as usize..csr.xadj[v + 1] as usize {
                    let u = &csr.keys[csr.adjncy[e] as usize];
                    prop_assert_eq!(csr.adjwgt[e] as u32, g.edge_weight(k, u));
                }
            }
        }
    }

    #[test]
    fn naive_comparison_detects_a_wrong_graph() {
        // The checker must fail on a graph that is off by one request.
        let reqs = vec![vec![1, 2], vec![2, 3], vec![3, 4]];
        let mut g = CoAccessGraph::new(2);
        for r in &reqs {
            g.record(r);
        }
        assert_window_model(&g, &reqs, 5);
        let wrong = std::panic::catch_unwind(|| assert_window_model(&g, &reqs[..2], 5));
        assert!(wrong.is_err());
        let mut h = g.clone();
        h.set_edge_weight(&3, &4, 2);
        let wrong = std::panic::catch_unwind(|| assert_window_model(&h, &reqs, 5));
        assert!(wrong.is_err());
    }

    #[test]
    fn repeated_keys_count_once() {
        let mut g = CoAccessGraph::new(0);
        g.record(&[3, 3, 5, 3, 5]);
        assert_eq!(g.vertex_weight(&3), 1);
        assert_eq!(g.vertex_weight(&5), 1);
        assert_eq!(g.edge_weight(&3, &5), 1);
        assert_eq!(g.edge_weight(&5, &3), 1);
        assert_eq!(g.edge_weight(&3, &3), 0);
        assert_eq!((g.vertices(), g.edges()), (2, 1));
        assert_eq!((g.total_vertex_weight(), g.total_edge_weight()), (2, 1));
        g.record(&[7, 7]);
        assert_eq!((g.vertices(), g.edges(), g.vertex_weight(&7)), (3, 1, 1));
        // Key order within a request does not matter.
        let mut h = CoAccessGraph::new(0);
        h.record(&[5, 3]);
        h.record(&[7]);
        assert_eq!(g.to_csr(), h.to_csr());
        g.check_invariants();
    }

    #[test]
    fn entries_are_erased_when_the_window_slides_past() {
        let mut g = CoAccessGraph::new(2);
        g.record(&[1, 2]);
        g.record(&[3, 4, 3]);
        assert_eq!((g.vertices(), g.edges()), (4, 2));
        g.record(&[5, 6]);
        assert_eq!((g.vertices(), g.edges(), g.window_len()), (4, 2, 2));
        assert_eq!((g.vertex_weight(&1), g.edge_weight(&1, &2)), (0, 0));
        assert_eq!(g.edge_weight(&5, &6), 1);
        g.check_invariants();
        let peak = g.slots.len();
        assert_eq!(peak, 6);
        // Many more distinct keys pass through: ids are reused and the table does not grow.
        for k in 100..1000 {
            g.record(&[k]);
            g.check_invariants();
        }
        assert_eq!((g.vertices(), g.edges(), g.slots.len()), (2, 0, peak));
        assert_eq!((g.total_vertex_weight(), g.total_edge_weight()), (2, 0));
        assert_eq!(g.ids.len(), 2);
        // Empty requests still slide the window.
        g.record(&[]);
        g.record(&[]);
        assert_eq!((g.vertices(), g.window_len()), (0, 2));
        assert!(g.is_empty());
        assert!(g.ids.capacity() <= 64);
        assert_eq!(g.to_csr(), naive_csr(&naive(&[])));
        g.check_invariants();
    }

    #[test]
    fn a_hub_gives_its_adjacency_memory_back() {
        let mut g = CoAccessGraph::new(200);
        for k in 1..=200 {
            g.record(&[0, k]);
        }
        let hub = g.ids[&0] as usize;
        assert_eq!(g.slots[hub].adj.len(), 200);
        let big = g.slots[hub].adj.capacity();
        for _ in 0..199 {
            g.record(&[0]);
        }
        assert_eq!((g.vertices(), g.edges(), g.vertex_weight(&0)), (2, 1, 200));
        assert!(
            big >= 200 && g.slots[hub].adj.capacity() <= 64,
            "hub adjacency not shrunk"
        );
        g.check_invariants();
    }

    #[test]
    fn no_window_never_forgets() {
        let mut g = CoAccessGraph::new(0);
        for i in 0..1000_u32 {
            g.record(&[i % 10, (i + 1) % 10]);
        }
        assert_eq!((g.window_len(), g.vertices(), g.edges()), (1000, 10, 10));
        assert_eq!(g.vertex_weight(&0), 200);
        assert_eq!(g.edge_weight(&0, &1), 100);
        g.clear();
        assert!(g.is_empty());
        assert_eq!((g.window(), g.window_len(), g.edges()), (0, 0, 0));
        g.check_invariants();
    }

    #[test]
    fn clique_is_capped_at_the_smallest_keys() {
        let mut g = CoAccessGraph::new(1);
        let big: Vec<u32> = (0..100).rev().collect();
        g.record(&big);
        let c = MAX_CLIQUE_KEYS as u32;
        assert_eq!(g.vertices(), 100);
        assert_eq!(g.edges(), MAX_CLIQUE_KEYS * (MAX_CLIQUE_KEYS - 1) / 2);
        assert_eq!(g.edge_weight(&0, &(c - 1)), 1);
        assert_eq!(g.edge_weight(&0, &c), 0);
        assert_eq!(g.vertex_weight(&99), 1);
        assert_csr_valid(&g.to_csr());
        g.record(&[500]);
        assert_eq!((g.vertices(), g.edges(), g.total_edge_weight()), (1, 0, 0));
        g.check_invariants();
    }

    #[test]
    fn weights_saturate_to_i32_max() {
        let mut g = CoAccessGraph::new(0);
        g.record(&[1, 2]);
        g.record(&[2, 3]);
        g.set_vertex_weight(&1, u32::MAX);
        g.set_vertex_weight(&2, i32::MAX as u32 + 1);
        g.set_vertex_weight(&3, i32::MAX as u32);
        g.set_edge_weight(&1, &2, u32::MAX);
        g.set_edge_weight(&2, &3, i32::MAX as u32 - 1);
        let csr = g.to_csr();
        assert_eq!(csr.keys, vec![1, 2, 3]);
        assert_eq!(csr.vwgt, vec![i32::MAX, i32::MAX, i32::MAX]);
        assert_eq!(csr.xadj, vec![0, 1, 3, 4]);
        assert_eq!(csr.adjncy, vec![1, 0, 2, 1]);
        assert_eq!(
            csr.adjwgt,
            vec![i32::MAX, i32::MAX, i32::MAX - 1, i32::MAX - 1]
        );
        assert_csr_valid(&csr);
        // Unwindowed counters saturate at u32::MAX instead of wrapping; totals stay consistent.
        g.record(&[1, 2]);
        assert_eq!(g.vertex_weight(&1), u32::MAX);
        assert_eq!(g.edge_weight(&1, &2), u32::MAX);
        assert_eq!(g.edge_weight(&2, &1), u32::MAX);
        g.check_invariants();
    }

    #[test]
    fn too_large_graphs_are_an_error() {
        let mut g = CoAccessGraph::new(0);
        g.record(&[1, 2]);
        g.directed = i32::MAX as usize + 1; // pretend
        assert!(matches!(
            g.try_to_csr(),
            Err(RepartError::GraphTooLarge { vertices: 2, .. })
        ));
    }

    #[test]
    #[should_panic(expected = "exceeds u32::MAX")]
    fn window_beyond_u32_is_rejected() {
        let _ = CoAccessGraph::<u32>::new(u32::MAX as usize + 1);
    }

    /// Rough scale figures (run in release):
    /// `cargo test --release -p meridian-balance -- --ignored graph_scale --nocapture`.
    #[test]
    #[ignore = "measurement; run in release"]
    fn graph_scale() {
        use rand::{Rng, SeedableRng};
        use std::time::Instant;
        const N: u32 = 1_000_000;
        const SCANS: usize = 1_000_000;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let scans: Vec<(u32, u32)> = (0..SCANS)
            .map(|_| (rng.random_range(0..N), rng.random_range(2..=8)))
            .collect();
        let mut scan = Vec::with_capacity(8);
        for window in [0_usize, 1_000] {
            let mut g = CoAccessGraph::new(window);
            let t = Instant::now();
            for k in 0..N {
                g.record(&[k]);
            }
            let pop = t.elapsed();
            let t = Instant::now();
            for &(start, len) in &scans {
                scan.clear();
                scan.extend((start..start + len).map(|k| k % N));
                g.record(&scan);
            }
            let sc = t.elapsed();
            let t = Instant::now();
            let csr = g.to_csr();
            let snap = t.elapsed();
            assert_csr_valid(&csr);
            println!(
                "W={window}: {N} single-key records in {pop:?} ({:.2} M req/s); {SCANS} scans \
                 (len U[2,8]) in {sc:?} ({:.2} M req/s); graph {} vertices, {} edges; \
                 to_csr {snap:?}",
                f64::from(N) / pop.as_secs_f64() / 1e6,
                SCANS as f64 / sc.as_secs_f64() / 1e6,
                g.vertices(),
                g.edges(),
            );
            if let Ok(s) = std::fs::read_to_string("/proc/self/status") {
                for l in s
                    .lines()
                    .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
                {
                    println!("  {l}");
                }
            }
        }
    }
}
