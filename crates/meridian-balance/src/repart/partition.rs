//! Partitioners (spec `repartitioning.md` §3): split a co-access graph's vertices into `k`
//! parts so that few co-accessed pairs are cut while the parts' vertex weights stay close,
//! then map the new part labels onto the current shards so that little moves.
//!
//! - [`Partitioner`] is the object-safe interface the executor holds as a
//!   `Box<dyn Partitioner + Send>` ([`by_name`] builds one from a config string). It takes a
//!   key-less [`GraphRef`] view of a [`Csr`] (`GraphRef::from(&csr)` or [`graph_ref`]).
//! - [`Metis`] (feature `metis`): multilevel k-way METIS 5, minimising the edge cut with
//!   `ufactor` 200 (max part weight ≤ 1.2 × mean, give or take one vertex) and a pinned seed.
//! - [`Fennel`]: pure-Rust streaming FENNEL with restreaming passes (ReFENNEL), with a hard
//!   per-part capacity `slack · V / k`.
//! - [`relabel`] and [`moved`]: greedy overlap relabelling of new labels onto current shards,
//!   and the number of keys a labelling moves.
//! - [`edge_cut`] and [`imbalance`]: the quality metrics exported by the pipelines.
//!
//! Guarantees:
//! - Every partitioner returns exactly one label in `0..k` per vertex, or an error; `k = 0`
//!   is [`RepartError::NoParts`], an empty graph gives an empty vector, `k = 1` gives all zeros
//!   without running anything, and a malformed CSR is [`RepartError::InvalidInput`] (never a
//!   panic or an out-of-bounds read in C).
//! - Both are deterministic (invariant 6): the same graph, `k` and parameters give the same
//!   labels, on any thread. METIS keeps its random state in a C global, so every METIS call
//!   in the process is serialised behind one lock and reseeded with the pinned seed.
//! - [`relabel`] never moves more keys, nor more vertex weight, than the raw labels
//!   (invariant 7).
//!
//! The input graph is assumed symmetric, as [`Csr`] promises: it is validated for shape, not
//! for symmetry (an asymmetric graph still gets valid labels, with a meaningless cut).

use super::{Csr, RepartError, ShardId};

/// A key-less, borrowed view of a [`Csr`] graph: the four arrays METIS reads.
///
/// `xadj[v]..xadj[v + 1]` indexes vertex `v`'s neighbours in `adjncy` and their edge weights in
/// `adjwgt`; `vwgt[v]` is `v`'s weight. An empty graph may have `xadj` empty or `[0]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphRef<'a> {
    /// Offsets into `adjncy`/`adjwgt`, `len = n + 1`.
    pub xadj: &'a [i32],
    /// Neighbour vertices.
    pub adjncy: &'a [i32],
    /// Edge weights, one per `adjncy` entry.
    pub adjwgt: &'a [i32],
    /// Vertex weights, `len = n`.
    pub vwgt: &'a [i32],
}

impl<'a, K> From<&'a Csr<K>> for GraphRef<'a> {
    fn from(c: &'a Csr<K>) -> Self {
        graph_ref(c)
    }
}

/// The key-less view of `c` the partitioners read (same as `GraphRef::from(c)`).
pub fn graph_ref<K>(c: &Csr<K>) -> GraphRef<'_> {
    GraphRef {
        xadj: &c.xadj,
        adjncy: &c.adjncy,
        adjwgt: &c.adjwgt,
        vwgt: &c.vwgt,
    }
}

impl GraphRef<'_> {
    /// Number of vertices (`vwgt.len()`).
    pub fn vertices(&self) -> usize {
        self.vwgt.len()
    }

    /// Sum of the vertex weights.
    pub fn total_vertex_weight(&self) -> i64 {
        self.vwgt.iter().map(|&w| i64::from(w)).sum()
    }

    /// Sum of the edge weights, each undirected edge counted once (half the `adjwgt` sum).
    pub fn total_edge_weight(&self) -> i64 {
        self.adjwgt.iter().map(|&w| i64::from(w)).sum::<i64>() / 2
    }

    /// Checks the CSR's shape: `xadj` has `n + 1` monotone offsets from 0 to `adjncy.len()`
    /// (or is empty when `n = 0`), `adjwgt` matches `adjncy`, every neighbour is in `0..n`
    /// and no weight is negative. Symmetry is not checked.
    pub fn validate(&self) -> Result<(), RepartError> {
        let bad = |m: String| Err(RepartError::InvalidInput(m));
        let n = self.vertices();
        if n == 0 && self.xadj.is_empty() {
            if !self.adjncy.is_empty() || !self.adjwgt.is_empty() {
                return bad("edges in a graph without vertices".into());
            }
            return Ok(());
        }
        if self.xadj.len() != n + 1 {
            return bad(format!(
                "xadj has {} entries for {n} vertices",
                self.xadj.len()
            ));
        }
        if self.xadj[0] != 0 {
            return bad(format!("xadj[0] = {}", self.xadj[0]));
        }
        if let Some(v) = self.xadj.windows(2).position(|w| w[0] > w[1]) {
            return bad(format!("xadj decreases at vertex {v}"));
        }
        if usize::try_from(self.xadj[n]).ok() != Some(self.adjncy.len()) {
            return bad(format!(
                "xadj[n] = {} but adjncy has {} entries",
                self.xadj[n],
                self.adjncy.len()
            ));
        }
        if self.adjwgt.len() != self.adjncy.len() {
            return bad(format!(
                "adjwgt has {} entries, adjncy {}",
                self.adjwgt.len(),
                self.adjncy.len()
            ));
        }
        if let Some(&u) = self
            .adjncy
            .iter()
            .find(|&&u| usize::try_from(u).map_or(true, |u| u >= n))
        {
            return bad(format!("neighbour {u} out of range 0..{n}"));
        }
        if let Some(v) = self.vwgt.iter().position(|&w| w < 0) {
            return bad(format!("negative weight on vertex {v}"));
        }
        if let Some(e) = self.adjwgt.iter().position(|&w| w < 0) {
            return bad(format!("negative weight on adjacency entry {e}"));
        }
        Ok(())
    }

    /// `v`'s neighbours and edge weights (the graph must be valid).
    fn neighbours(&self, v: usize) -> impl Iterator<Item = (usize, i32)> + '_ {
        let (a, b) = (self.xadj[v] as usize, self.xadj[v + 1] as usize);
        self.adjncy[a..b]
            .iter()
            .zip(&self.adjwgt[a..b])
            .map(|(&u, &w)| (u as usize, w))
    }
}

/// Splits a graph into `k` parts: `part[v] ∈ 0..k` for every vertex `v`.
///
/// Object-safe, so the executor can hold a `Box<dyn Partitioner + Send>` chosen at runtime
/// (see [`by_name`]).
pub trait Partitioner {
    /// Partitions `g` into `k` parts, returning one label per vertex.
    ///
    /// # Errors
    /// [`RepartError::NoParts`] if `k = 0`; [`RepartError::InvalidInput`] if `g` is malformed
    /// or the partitioner's parameters are out of range; partitioner-specific errors
    /// ([`RepartError::GraphTooLarge`], [`RepartError::Metis`]).
    fn partition(&mut self, g: GraphRef<'_>, k: u32) -> Result<Vec<ShardId>, RepartError>;

    /// The partitioner's config name: `"metis"` or `"fennel"`.
    fn name(&self) -> &'static str;
}

/// The partitioner a config string names, with its default parameters: `"fennel"` or
/// `"metis"`. `None` for any other name, and for `"metis"` when the crate is built without
/// the `metis` feature.
pub fn by_name(name: &str) -> Option<Box<dyn Partitioner + Send>> {
    match name {
        "fennel" => Some(Box::new(Fennel::default())),
        #[cfg(feature = "metis")]
        "metis" => Some(Box::new(Metis::default())),
        _ => None,
    }
}

/// The checks every partitioner starts with. `Ok(Some(labels))` is a finished answer
/// (empty graph, or `k = 1`); `Ok(None)` means "go on and partition".
fn trivial(g: &GraphRef<'_>, k: u32) -> Result<Option<Vec<ShardId>>, RepartError> {
    if k == 0 {
        return Err(RepartError::NoParts);
    }
    g.validate()?;
    let n = g.vertices();
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    if k == 1 {
        return Ok(Some(vec![0; n]));
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------
// METIS
// ---------------------------------------------------------------------------------------

/// METIS 5 multilevel k-way partitioning (`METIS_PartGraphKway`) minimising the edge cut,
/// through the `metis` crate's vendored C sources.
///
/// - `k = 1` is answered without calling METIS; `k > n` too, with every vertex alone in its
///   own part (`part[v] = v`), the most balanced labelling there is (METIS itself returns
///   OK there but prints "too many parts" and leaves parts empty while pairing vertices).
/// - Graphs whose vertex or adjacency counts exceed `i32::MAX` are
///   [`RepartError::GraphTooLarge`]. If the vertex-weight or edge-weight totals would
///   overflow METIS's 32-bit sums, the weights handed to METIS are divided by a common
///   factor (each positive weight staying ≥ 1) first.
/// - Every return code is checked ([`RepartError::Metis`]), and so are the labels.
/// - Calls are serialised process-wide (METIS's RNG state is a C global) and the seed is
///   always set, so the output is a function of the graph, `k` and the parameters.
#[cfg(feature = "metis")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metis {
    /// Allowed imbalance in thousandths over 1: max part weight ≤ (1 + ufactor/1000) × mean.
    /// Default 200 (1.2, as in kvpaxos; METIS's own default is 30).
    pub ufactor: i32,
    /// METIS's random seed, always passed. Default 0.
    pub seed: i32,
}

#[cfg(feature = "metis")]
impl Default for Metis {
    fn default() -> Self {
        Self {
            ufactor: 200,
            seed: 0,
        }
    }
}

/// Serialises METIS calls: its Mersenne-Twister state (`GKlib/random.c`) and its signal
/// handlers are process-global.
#[cfg(feature = "metis")]
static METIS_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// METIS accumulates weights in `i32`; totals are kept at or below this before the call.
#[cfg(feature = "metis")]
const METIS_WEIGHT_BUDGET: i64 = 1 << 29;

/// `Err(GraphTooLarge)` if `n` vertices or `m` adjacency entries do not fit METIS's `i32`
/// indices (`xadj` has `n + 1` entries, and `xadj[n] = m`).
#[cfg(any(feature = "metis", test))]
fn check_size(n: usize, m: usize) -> Result<(), RepartError> {
    let limit = i32::MAX as usize;
    if n >= limit || m > limit {
        return Err(RepartError::GraphTooLarge {
            vertices: n,
            edges: m,
            limit,
        });
    }
    Ok(())
}

/// `w` divided by a common factor so that its sum is at most about `budget + w.len()`, each
/// positive weight staying ≥ 1; `None` if the sum is already within `budget`.
#[cfg(any(feature = "metis", test))]
fn scale_weights(w: &[i32], budget: i64) -> Option<Vec<i32>> {
    let sum: i64 = w.iter().map(|&x| i64::from(x)).sum();
    if sum <= budget {
        return None;
    }
    let f = (sum + budget - 1) / budget;
    Some(
        w.iter()
            .map(|&x| {
                if x > 0 {
                    (i64::from(x) / f).max(1) as i32
                } else {
                    x
                }
            })
            .collect(),
    )
}

#[cfg(feature = "metis")]
impl Partitioner for Metis {
    fn partition(&mut self, g: GraphRef<'_>, k: u32) -> Result<Vec<ShardId>, RepartError> {
        use metis::option::{ObjType, Seed, UFactor};

        if k == 0 {
            return Err(RepartError::NoParts);
        }
        check_size(g.vertices(), g.adjncy.len())?;
        if let Some(done) = trivial(&g, k)? {
            return Ok(done);
        }
        let n = g.vertices();
        if k as usize > n {
            // Fewer vertices than parts: METIS's balance targets cannot be met; one vertex
            // per part is the most balanced labelling there is.
            return Ok((0..n as u32).collect());
        }
        let vw = scale_weights(g.vwgt, METIS_WEIGHT_BUDGET);
        let ew = scale_weights(g.adjwgt, METIS_WEIGHT_BUDGET);
        let vw = vw.as_deref().unwrap_or(g.vwgt);
        let ew = ew.as_deref().unwrap_or(g.adjwgt);
        if vw.iter().map(|&x| i64::from(x)).sum::<i64>() > i64::from(i32::MAX)
            || ew.iter().map(|&x| i64::from(x)).sum::<i64>() > i64::from(i32::MAX)
        {
            return Err(RepartError::GraphTooLarge {
                vertices: n,
                edges: g.adjncy.len(),
                limit: METIS_WEIGHT_BUDGET as usize,
            });
        }

        let mut part = vec![0 as metis::Idx; n];
        let metis_err = |e: &dyn std::fmt::Display| RepartError::Metis(e.to_string());
        {
            let _guard = METIS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
            metis::Graph::new(1, k as metis::Idx, g.xadj, g.adjncy)
                .map_err(|e| metis_err(&e))?
                .set_vwgt(vw)
                .set_adjwgt(ew)
                .set_option(ObjType::Cut)
                .set_option(UFactor(self.ufactor))
                .set_option(Seed(self.seed))
                .part_kway(&mut part)
                .map_err(|e| metis_err(&e))?;
        }
        part.into_iter()
            .map(|p| match u32::try_from(p) {
                Ok(p) if p < k => Ok(p),
                _ => Err(RepartError::Metis(format!("label {p} out of range 0..{k}"))),
            })
            .collect()
    }

    fn name(&self) -> &'static str {
        "metis"
    }
}

// ---------------------------------------------------------------------------------------
// FENNEL
// ---------------------------------------------------------------------------------------

/// Streaming FENNEL with restreaming (ReFENNEL, after `gabrieltron/kvpaxos`
/// `src/graph/partitioning.cpp`), in pure Rust and deterministic.
///
/// With `α = E · k^(γ−1) / V^γ` (`E` the total undirected edge weight, `V` the total vertex
/// weight) and `cap = slack · V / k`, each pass visits the vertices in order (key order) and
/// puts `v` (weight `w_v`) in the part `p` maximising
/// `Σ_{u ∈ N(v) ∩ p} w(u, v) − α·((W_p + w_v)^γ − W_p^γ)` among the parts with
/// `W_p + w_v ≤ cap`; ties go to the lowest `W_p`, then the lowest `p`; if no part has room,
/// to the lightest part. Pass 0 starts empty (not-yet-placed neighbours count for nothing);
/// later passes start from the previous pass's labels, taking `v` out of its part first.
///
/// Unlike kvpaxos, `α` (not `γ`) multiplies the balance term, the capacity is enforced, and
/// no state is kept between calls.
///
/// Balance: if every vertex weighs at most `(slack − 1) · V / k`, some part always has room,
/// so no part ends above `cap`. Cost: `O(passes · (n·k + m))`.
#[derive(Debug, Clone, PartialEq)]
pub struct Fennel {
    /// The balance exponent γ (finite, > 0). Default 1.5.
    pub gamma: f64,
    /// Streaming passes; 0 is taken as 1. Default 3.
    pub passes: u32,
    /// Capacity factor: no part may exceed `slack · V / k` while another has room (finite,
    /// > 0). Default 1.2.
    pub slack: f64,
}

impl Default for Fennel {
    fn default() -> Self {
        Self {
            gamma: 1.5,
            passes: 3,
            slack: 1.2,
        }
    }
}

impl Fennel {
    /// The per-part capacity `slack · V / k` for a graph of total vertex weight `total`.
    pub fn cap(&self, total: i64, k: u32) -> f64 {
        self.slack * total as f64 / f64::from(k)
    }
}

impl Partitioner for Fennel {
    fn partition(&mut self, g: GraphRef<'_>, k: u32) -> Result<Vec<ShardId>, RepartError> {
        if k == 0 {
            return Err(RepartError::NoParts);
        }
        if !(self.gamma.is_finite() && self.gamma > 0.0) {
            return Err(RepartError::InvalidInput(format!(
                "fennel gamma {}",
                self.gamma
            )));
        }
        if !(self.slack.is_finite() && self.slack > 0.0) {
            return Err(RepartError::InvalidInput(format!(
                "fennel slack {}",
                self.slack
            )));
        }
        if let Some(done) = trivial(&g, k)? {
            return Ok(done);
        }
        let n = g.vertices();
        let ku = k as usize;
        let gamma = self.gamma;
        let v_total = g.total_vertex_weight();
        let e_total = g.total_edge_weight();
        let alpha = if v_total > 0 {
            e_total as f64 * f64::from(k).powf(gamma - 1.0) / (v_total as f64).powf(gamma)
        } else {
            0.0
        };
        let cap = self.cap(v_total, k);
        // x^γ: the default γ = 1.5 as x·√x, several times cheaper than `powf`.
        let pow = |x: f64| {
            if gamma == 1.5 {
                x * x.sqrt()
            } else {
                x.powf(gamma)
            }
        };

        const UNPLACED: u32 = u32::MAX;
        let mut part = vec![UNPLACED; n];
        let mut load = vec![0i64; ku];
        // load[p]^γ, kept in step with `load`.
        let mut load_pow = vec![0f64; ku];
        // Per-vertex neighbour weight by part, reset through `touched` only.
        let mut nsum = vec![0i64; ku];
        let mut is_touched = vec![false; ku];
        let mut touched: Vec<usize> = Vec::with_capacity(ku);

        for pass in 0..self.passes.max(1) {
            for v in 0..n {
                let w = i64::from(g.vwgt[v]);
                if pass > 0 {
                    let p = part[v] as usize;
                    load[p] -= w;
                    load_pow[p] = pow(load[p] as f64);
                }
                for (u, ew) in g.neighbours(v) {
                    let p = part[u];
                    if u == v || p == UNPLACED {
                        continue;
                    }
                    let p = p as usize;
                    if !is_touched[p] {
                        is_touched[p] = true;
                        touched.push(p);
                    }
                    nsum[p] += i64::from(ew);
                }

                // (score, load, part) of the best part with room so far.
                let mut best: Option<(f64, i64, usize)> = None;
                for p in 0..ku {
                    let after = load[p] + w;
                    if after as f64 > cap {
                        continue;
                    }
                    let score = nsum[p] as f64 - alpha * (pow(after as f64) - load_pow[p]);
                    let better = match best {
                        None => true,
                        Some((bs, bl, _)) => score > bs || (score == bs && load[p] < bl),
                    };
                    if better {
                        best = Some((score, load[p], p));
                    }
                }
                let chosen = match best {
                    Some((_, _, p)) => p,
                    // No part has room: the lightest (lowest index on ties).
                    None => (0..ku).min_by_key(|&p| (load[p], p)).unwrap_or(0),
                };

                for &p in &touched {
                    nsum[p] = 0;
                    is_touched[p] = false;
                }
                touched.clear();

                part[v] = chosen as u32;
                load[chosen] += w;
                load_pow[chosen] = pow(load[chosen] as f64);
            }
        }
        Ok(part)
    }

    fn name(&self) -> &'static str {
        "fennel"
    }
}

// ---------------------------------------------------------------------------------------
// Relabelling and metrics
// ---------------------------------------------------------------------------------------

/// Maps a new partition's labels onto the current shards so that little moves (spec §3,
/// "Relabelling").
///
/// `current[v]` is the shard vertex `v` is on now (`None` if unmapped), `new[v] ∈ 0..k` its
/// new label, `weights[v]` its weight (negative weights count as 0). Greedy on the k×k
/// overlap matrix `O[a][b]` = (weight, count) of the vertices labelled `a` that are on
/// shard `b` now, compared by weight then count: repeatedly take the largest remaining
/// overlap with `a` and `b` both unassigned (ties: lowest `a`, then lowest `b`) and map
/// `a → b`; labels left over map to the shards left over in ascending order. Current shards
/// `≥ k` take part in no pairing. The Hungarian method (an optimal assignment) is not used.
///
/// As greedy can lose to the raw labels, the result falls back to `new` unchanged whenever
/// the greedy mapping would move more keys ([`moved`]) or more weight than `new` itself
/// does. So relabelling never moves more keys, nor more weight, than not relabelling
/// (invariant 7), and a permuted copy of `current` comes back as `current`.
///
/// Returns the relabelled vector; the mapping is a bijection of `0..k`, so the partition
/// itself (its cut and balance) is unchanged. `O(n + k² log k)` time at worst, `O(min(n, k²))`
/// extra memory.
///
/// # Panics
/// If the three slices differ in length, or a label in `new` is `≥ k`.
pub fn relabel(
    current: &[Option<ShardId>],
    new: &[ShardId],
    weights: &[i32],
    k: u32,
) -> Vec<ShardId> {
    assert_eq!(
        current.len(),
        new.len(),
        "relabel: current and new lengths differ"
    );
    assert_eq!(
        weights.len(),
        new.len(),
        "relabel: weights and new lengths differ"
    );
    if let Some(&a) = new.iter().find(|&&a| a >= k) {
        panic!("relabel: label {a} out of range 0..{k}");
    }
    let ku = k as usize;

    // Sparse overlap: (label, shard) → (weight, count), for present pairs only.
    let mut overlap: std::collections::HashMap<(u32, u32), (i64, u64)> =
        std::collections::HashMap::new();
    for ((&cur, &a), &w) in current.iter().zip(new).zip(weights) {
        if let Some(b) = cur.filter(|&b| b < k) {
            let e = overlap.entry((a, b)).or_insert((0, 0));
            e.0 += i64::from(w.max(0));
            e.1 += 1;
        }
    }
    let mut entries: Vec<((u32, u32), (i64, u64))> = overlap.into_iter().collect();
    // Largest (weight, count) first; ties by lowest label, then lowest shard.
    entries.sort_unstable_by(|(ka, va), (kb, vb)| vb.cmp(va).then(ka.cmp(kb)));

    const FREE: u32 = u32::MAX;
    let mut map = vec![FREE; ku]; // label → shard
    let mut shard_taken = vec![false; ku];
    for ((a, b), _) in entries {
        if map[a as usize] == FREE && !shard_taken[b as usize] {
            map[a as usize] = b;
            shard_taken[b as usize] = true;
        }
    }
    // Equal (zero) overlaps: lowest free label with lowest free shard, and so on.
    let mut free_shards = (0..k).filter(|&b| !shard_taken[b as usize]);
    for m in map.iter_mut().filter(|m| **m == FREE) {
        *m = free_shards
            .next()
            .expect("as many free shards as free labels");
    }

    let mapped: Vec<ShardId> = new.iter().map(|&a| map[a as usize]).collect();
    let stays = |labels: &[ShardId]| -> (u64, i64) {
        let mut keys = 0u64;
        let mut weight = 0i64;
        for ((&cur, &l), &w) in current.iter().zip(labels).zip(weights) {
            if cur == Some(l) {
                keys += 1;
                weight += i64::from(w.max(0));
            }
        }
        (keys, weight)
    };
    let (greedy_keys, greedy_weight) = stays(&mapped);
    let (raw_keys, raw_weight) = stays(new);
    if greedy_keys >= raw_keys && greedy_weight >= raw_weight {
        mapped
    } else {
        new.to_vec()
    }
}

/// The number of vertices that `labels` moves: `current[v]` is `Some(s)` with
/// `s != labels[v]`. Unmapped vertices (`None`) move nothing.
///
/// # Panics
/// If the slices differ in length.
pub fn moved(current: &[Option<ShardId>], labels: &[ShardId]) -> usize {
    assert_eq!(current.len(), labels.len(), "moved: lengths differ");
    current
        .iter()
        .zip(labels)
        .filter(|&(c, &l)| matches!(c, Some(s) if *s != l))
        .count()
}

/// The edge cut of `part` on `g`: the total weight of the edges whose ends are in different
/// parts, each undirected edge counted once (from its lower-numbered end; `g` symmetric).
///
/// # Panics
/// If `part.len()` is not `g`'s vertex count, or `g` is malformed.
pub fn edge_cut<'a>(g: impl Into<GraphRef<'a>>, part: &[ShardId]) -> u64 {
    let g = g.into();
    assert_eq!(part.len(), g.vertices(), "edge_cut: one label per vertex");
    let mut cut = 0u64;
    for v in 0..g.vertices() {
        for (u, w) in g.neighbours(v) {
            if u > v && part[u] != part[v] {
                cut += u64::try_from(w).unwrap_or(0);
            }
        }
    }
    cut
}

/// The imbalance of `part` on `g`: the heaviest part's vertex weight over the mean part
/// weight `V / k` (1.0 is perfect). 1.0 when `k = 0` or the total weight is 0.
///
/// # Panics
/// If `part.len()` is not `g`'s vertex count, or a label is `≥ k`.
pub fn imbalance<'a>(g: impl Into<GraphRef<'a>>, part: &[ShardId], k: u32) -> f64 {
    let g = g.into();
    assert_eq!(part.len(), g.vertices(), "imbalance: one label per vertex");
    let total = g.total_vertex_weight();
    if k == 0 || total <= 0 {
        return 1.0;
    }
    let mut load = vec![0i64; k as usize];
    for (&p, &w) in part.iter().zip(g.vwgt) {
        load[p as usize] += i64::from(w);
    }
    let max = load.iter().copied().max().unwrap_or(0);
    max as f64 * f64::from(k) / total as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A symmetric CSR over vertices `0..n` (key = vertex number) from undirected edges;
    /// duplicates are summed, self-loops dropped.
    fn csr(vwgt: Vec<i32>, edges: &[(usize, usize, i32)]) -> Csr<u32> {
        let n = vwgt.len();
        let mut dir: Vec<(usize, usize, i32)> = Vec::with_capacity(2 * edges.len());
        for &(u, v, w) in edges {
            if u != v {
                dir.push((u, v, w));
                dir.push((v, u, w));
            }
        }
        dir.sort_unstable_by_key(|&(u, v, _)| (u, v));
        let mut xadj = vec![0i32; n + 1];
        let mut adjncy = Vec::with_capacity(dir.len());
        let mut adjwgt: Vec<i32> = Vec::with_capacity(dir.len());
        let mut last = None;
        for (u, v, w) in dir {
            if last == Some((u, v)) {
                let l = adjwgt.last_mut().unwrap();
                *l = l.saturating_add(w);
            } else {
                adjncy.push(v as i32);
                adjwgt.push(w);
                xadj[u + 1] += 1;
                last = Some((u, v));
            }
        }
        for v in 0..n {
            xadj[v + 1] += xadj[v];
        }
        Csr {
            xadj,
            adjncy,
            adjwgt,
            vwgt,
            keys: (0..n as u32).collect(),
        }
    }

    /// Disjoint cliques of the given sizes, each of total vertex weight `total` (so a
    /// balanced k-way split exists only with one clique per part), random edge weights
    /// 1..=10, and vertex numbers shuffled so that the cliques interleave in key order.
    /// Returns the graph and each vertex's clique.
    fn planted_cliques(sizes: &[usize], total: i32, seed: u64) -> (Csr<u32>, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut slots: Vec<(usize, usize)> = sizes
            .iter()
            .enumerate()
            .flat_map(|(c, &s)| (0..s).map(move |i| (c, i)))
            .collect();
        slots.shuffle(&mut rng);
        let n = slots.len();
        let mut clique_of = vec![0; n];
        let mut vwgt = vec![0; n];
        let mut members = vec![Vec::new(); sizes.len()];
        for (v, &(c, i)) in slots.iter().enumerate() {
            let s = sizes[c] as i32;
            clique_of[v] = c;
            vwgt[v] = total / s + i32::from((i as i32) < total % s);
            members[c].push(v);
        }
        let mut edges = Vec::new();
        for m in &members {
            for (x, &u) in m.iter().enumerate() {
                for &v in &m[x + 1..] {
                    edges.push((u, v, rng.random_range(1..=10)));
                }
            }
        }
        (csr(vwgt, &edges), clique_of)
    }

    /// A clustered random graph: each vertex joins one of `clusters` clusters at random,
    /// links to `intra` random members of its own cluster (weight 1..=5) and to `inter`
    /// random vertices anywhere (weight 1); vertex weights 1..=10.
    fn clustered(n: usize, clusters: usize, intra: usize, inter: usize, seed: u64) -> Csr<u32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let cluster_of: Vec<usize> = (0..n).map(|_| rng.random_range(0..clusters)).collect();
        let mut members = vec![Vec::new(); clusters];
        for (v, &c) in cluster_of.iter().enumerate() {
            members[c].push(v);
        }
        let mut edges = Vec::with_capacity(n * (intra + inter));
        for v in 0..n {
            let m = &members[cluster_of[v]];
            for _ in 0..intra {
                edges.push((v, m[rng.random_range(0..m.len())], rng.random_range(1..=5)));
            }
            for _ in 0..inter {
                edges.push((v, rng.random_range(0..n), 1));
            }
        }
        let vwgt = (0..n).map(|_| rng.random_range(1..=10)).collect();
        csr(vwgt, &edges)
    }

    fn loads(g: &Csr<u32>, part: &[ShardId], k: u32) -> Vec<i64> {
        let mut l = vec![0i64; k as usize];
        for (&p, &w) in part.iter().zip(&g.vwgt) {
            l[p as usize] += i64::from(w);
        }
        l
    }

    fn round_robin(n: usize, k: u32) -> Vec<ShardId> {
        (0..n as u32).map(|v| v % k).collect()
    }

    /// Every clique sits in one part, and no two cliques share one.
    fn assert_planted(part: &[ShardId], clique_of: &[usize], cliques: usize, who: &str) {
        let mut part_of = vec![None; cliques];
        for (v, &c) in clique_of.iter().enumerate() {
            match part_of[c] {
                None => part_of[c] = Some(part[v]),
                Some(p) => assert_eq!(p, part[v], "{who}: clique {c} split"),
            }
        }
        let mut ps: Vec<_> = part_of.iter().map(|p| p.unwrap()).collect();
        ps.sort_unstable();
        ps.dedup();
        assert_eq!(ps.len(), cliques, "{who}: two cliques share a part");
    }

    fn partitioners() -> Vec<Box<dyn Partitioner + Send>> {
        vec![
            Box::new(Fennel::default()),
            #[cfg(feature = "metis")]
            Box::new(Metis::default()),
        ]
    }

    const CLIQUE_SETS: &[&[usize]] = &[
        &[10, 20, 25, 50],
        &[30, 30, 30, 30],
        &[10, 15, 20, 25, 30, 35, 40, 50],
        &[12, 12, 12, 12, 12, 12, 12, 12],
    ];

    // ---- invariant 5: partition quality ----------------------------------------------

    #[cfg(feature = "metis")]
    #[test]
    fn metis_recovers_planted_cliques() {
        for (i, sizes) in CLIQUE_SETS.iter().enumerate() {
            for seed in 0..5u64 {
                let k = sizes.len() as u32;
                let (g, clique_of) = planted_cliques(sizes, 200, seed + 100 * i as u64);
                let part = Metis::default().partition((&g).into(), k).unwrap();
                assert_eq!(edge_cut(&g, &part), 0, "sizes {sizes:?} seed {seed}");
                assert_planted(&part, &clique_of, sizes.len(), "metis");
                let max_w = f64::from(*g.vwgt.iter().max().unwrap());
                let mean = g.vwgt.iter().map(|&w| f64::from(w)).sum::<f64>() / f64::from(k);
                assert!(imbalance(&g, &part, k) <= 1.2 + max_w / mean);
            }
        }
    }

    /// FENNEL is a streaming heuristic: with the spec's 3 passes it recovers the planted
    /// cliques on these instances, but not on every instance (see the next test).
    #[test]
    fn fennel_recovers_planted_cliques() {
        for (i, sizes) in CLIQUE_SETS.iter().enumerate() {
            for seed in 0..5u64 {
                let k = sizes.len() as u32;
                let (g, clique_of) = planted_cliques(sizes, 200, seed + 100 * i as u64);
                let mut f = Fennel::default();
                let part = f.partition((&g).into(), k).unwrap();
                assert_eq!(edge_cut(&g, &part), 0, "sizes {sizes:?} seed {seed}");
                assert_planted(&part, &clique_of, sizes.len(), "fennel");
                let cap = f.cap(graph_ref(&g).total_vertex_weight(), k);
                assert!(loads(&g, &part, k).iter().all(|&l| l as f64 <= cap));
            }
        }
    }

    /// Over 800 planted instances, FENNEL's 3 passes recover all the 4-clique ones and
    /// ≈ 96 % of the 8-clique ones (784/800 overall when written); the misses are balanced
    /// local optima (a clique split over two parts at the capacity bound) that more passes
    /// mostly do not fix (4/800 remain with 5). Every result respects the capacity.
    #[test]
    fn fennel_recovery_rate_on_many_planted_instances() {
        let (mut recovered, mut total) = (0, 0);
        for (i, sizes) in CLIQUE_SETS.iter().enumerate() {
            let k = sizes.len() as u32;
            for seed in 0..200u64 {
                let (g, _) = planted_cliques(sizes, 200, seed + 1000 * i as u64);
                let mut f = Fennel::default();
                let part = f.partition((&g).into(), k).unwrap();
                total += 1;
                recovered += usize::from(edge_cut(&g, &part) == 0);
                let cap = f.cap(graph_ref(&g).total_vertex_weight(), k);
                assert!(loads(&g, &part, k).iter().all(|&l| l as f64 <= cap));
            }
        }
        assert!(recovered * 100 >= total * 95, "{recovered}/{total}");
    }

    #[test]
    fn both_cut_less_than_round_robin_on_clustered_graphs() {
        for (n, clusters, k, seed) in [(400, 8, 4, 1u64), (1000, 40, 8, 2), (2000, 16, 8, 3)] {
            let g = clustered(n, clusters, 6, 1, seed);
            let rr = edge_cut(&g, &round_robin(n, k));
            for mut p in partitioners() {
                let part = p.partition((&g).into(), k).unwrap();
                let cut = edge_cut(&g, &part);
                assert!(
                    cut * 2 < rr,
                    "{}: cut {cut} vs round-robin {rr} (n {n})",
                    p.name()
                );
                if p.name() == "fennel" {
                    let cap = Fennel::default().cap(graph_ref(&g).total_vertex_weight(), k);
                    let max = *loads(&g, &part, k).iter().max().unwrap();
                    assert!(max as f64 <= cap, "fennel: {max} > cap {cap}");
                } else {
                    let max_w = f64::from(*g.vwgt.iter().max().unwrap());
                    let mean = g.vwgt.iter().map(|&w| f64::from(w)).sum::<f64>() / f64::from(k);
                    assert!(imbalance(&g, &part, k) <= 1.2 + max_w / mean);
                }
            }
        }
    }

    #[test]
    fn fennel_without_edges_balances_greedily() {
        let g = csr(vec![5, 1, 1, 1, 1, 1, 4, 2], &[]);
        let part = Fennel::default().partition((&g).into(), 2).unwrap();
        // α = 0: every score ties, so each vertex goes to the lightest part.
        assert_eq!(part, vec![0, 1, 1, 1, 1, 1, 0, 1]);
        assert_eq!(loads(&g, &part, 2), vec![9, 7]);
    }

    #[test]
    fn fennel_follows_the_pseudo_code_on_a_small_graph() {
        // Two triangles {0,1,2} and {3,4,5} joined by a light edge 2–3; unit weights.
        // V = 6, E = 3·2 + 1 = 7, k = 2: α = 7·√2/6^1.5, cap = 3.6.
        let g = csr(
            vec![1; 6],
            &[
                (0, 1, 1),
                (0, 2, 1),
                (1, 2, 1),
                (3, 4, 1),
                (3, 5, 1),
                (4, 5, 1),
                (2, 3, 1),
            ],
        );
        let part = Fennel::default().partition((&g).into(), 2).unwrap();
        assert_eq!(edge_cut(&g, &part), 1);
        assert_eq!(loads(&g, &part, 2), vec![3, 3]);
        assert_eq!(part[0], part[1]);
        assert_eq!(part[3], part[4]);
    }

    #[test]
    fn fennel_takes_the_lightest_part_when_nothing_fits() {
        // Vertex 0 alone outweighs cap = 1.2 · 103 / 2.
        let g = csr(vec![100, 1, 1, 1], &[(0, 1, 1)]);
        let part = Fennel::default().partition((&g).into(), 2).unwrap();
        assert!(part.iter().all(|&p| p < 2));
        // Vertex 0 has a part to itself after the last pass: everything else fits elsewhere.
        assert!(part[1..].iter().all(|&p| p != part[0]));
    }

    // ---- invariant 6: determinism -----------------------------------------------------

    #[test]
    fn same_graph_and_seed_give_the_same_map() {
        let g = clustered(3000, 60, 6, 2, 7);
        for mut p in partitioners() {
            let a = p.partition((&g).into(), 8).unwrap();
            let b = p.partition((&g).into(), 8).unwrap();
            let c = by_name(p.name())
                .unwrap()
                .partition((&g).into(), 8)
                .unwrap();
            assert_eq!(a, b, "{}", p.name());
            assert_eq!(a, c, "{}", p.name());
        }
    }

    #[cfg(feature = "metis")]
    #[test]
    fn metis_is_deterministic_across_threads() {
        let g = clustered(3000, 60, 6, 2, 8);
        let want = Metis::default().partition((&g).into(), 8).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| Metis::default().partition((&g).into(), 8).unwrap()))
                .collect();
            for h in hs {
                assert_eq!(h.join().unwrap(), want);
            }
        });
        // A different seed is a different run (and still a valid one).
        let other = Metis {
            seed: 12345,
            ..Metis::default()
        };
        let p = { other }.partition((&g).into(), 8).unwrap();
        assert!(p.iter().all(|&x| x < 8));
    }

    // ---- invariant 7: relabelling ------------------------------------------------------

    fn moved_weight(current: &[Option<ShardId>], labels: &[ShardId], w: &[i32]) -> i64 {
        current
            .iter()
            .zip(labels)
            .zip(w)
            .filter(|((c, l), _)| matches!(c, Some(s) if s != *l))
            .map(|(_, &w)| i64::from(w))
            .sum()
    }

    fn assignment() -> impl Strategy<Value = (u32, Vec<(Option<u32>, u32, i32)>)> {
        (1u32..=8).prop_flat_map(|k| {
            let v = (
                prop::option::weighted(0.9, 0..k),
                0..k,
                prop_oneof![Just(1i32), 1i32..=100],
            );
            (Just(k), prop::collection::vec(v, 0..200))
        })
    }

    proptest! {
        #[test]
        fn relabelling_never_moves_more(
            (k, rows) in assignment(),
            unit in any::<bool>(),
        ) {
            let current: Vec<_> = rows.iter().map(|r| r.0).collect();
            let new: Vec<_> = rows.iter().map(|r| r.1).collect();
            let w: Vec<_> = rows.iter().map(|r| if unit { 1 } else { r.2 }).collect();
            let l = relabel(&current, &new, &w, k);
            prop_assert!(moved(&current, &l) <= moved(&current, &new));
            prop_assert!(moved_weight(&current, &l, &w) <= moved_weight(&current, &new, &w));
            // A bijection of labels: same partition, labels in range.
            let mut map = vec![None; k as usize];
            for (&a, &b) in new.iter().zip(&l) {
                prop_assert!(b < k);
                prop_assert!(map[a as usize].is_none_or(|m| m == b));
                map[a as usize] = Some(b);
            }
            let mut images: Vec<_> = map.iter().flatten().collect();
            let len = images.len();
            images.sort_unstable();
            images.dedup();
            prop_assert_eq!(images.len(), len);
        }

        #[test]
        fn relabelling_a_permuted_copy_moves_nothing(
            (k, rows) in assignment(),
            seed in any::<u64>(),
        ) {
            let mut perm: Vec<u32> = (0..k).collect();
            perm.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
            let current: Vec<_> = rows.iter().map(|r| r.0).collect();
            // Unmapped vertices get any label; mapped ones the permuted current shard.
            let new: Vec<_> = rows
                .iter()
                .map(|r| r.0.map_or(r.1, |s| perm[s as usize]))
                .collect();
            let w: Vec<_> = rows.iter().map(|r| r.2).collect();
            let l = relabel(&current, &new, &w, k);
            prop_assert_eq!(moved(&current, &l), 0);
        }
    }

    #[test]
    fn relabel_greedy_and_its_ties() {
        // Overlap (label → shard): 0→2: 10, 1→0: 7, 1→2: 9, 2→1: 3.
        // Greedy: 0→2 (10), then 1→0 (7; 1→2 is taken), then 2→1.
        let current = [Some(2), Some(0), Some(2), Some(1), None];
        let new = [0, 1, 1, 2, 0];
        let w = [10, 7, 9, 3, 50];
        assert_eq!(relabel(&current, &new, &w, 3), vec![2, 0, 0, 1, 2]);
        // Ties: equal overlaps 0→1 and 1→0 and 1→1 — lowest label first, then lowest shard.
        let current = [Some(1), Some(0), Some(1)];
        let new = [0, 1, 1];
        assert_eq!(relabel(&current, &new, &[1, 1, 1], 2), vec![1, 0, 0]);
        // Labels without overlap take the free shards in ascending order.
        let current = [Some(3), None, None];
        let new = [1, 0, 2];
        assert_eq!(relabel(&current, &new, &[1, 1, 1], 4), vec![3, 0, 1]);
        // Empty.
        assert_eq!(relabel(&[], &[], &[], 0), Vec::<u32>::new());
    }

    #[test]
    fn relabel_falls_back_to_raw_labels_when_greedy_loses() {
        // Overlap 0→0: 5, 0→1: 6, 1→1: 5. Greedy takes 0→1 (6) and keeps 6; the raw labels
        // keep 10.
        let mut current = vec![Some(0); 5];
        current.extend([Some(1); 6]);
        current.extend([Some(1); 5]);
        let mut new = vec![0; 11];
        new.extend([1; 5]);
        let w = vec![1; 16];
        let l = relabel(&current, &new, &w, 2);
        assert_eq!(l, new);
        assert_eq!(moved(&current, &l), 6);
        // Weight-heavy greedy choice that would move more keys: also falls back.
        let current = [Some(0), Some(0), Some(0), Some(0)];
        let new = [0, 0, 0, 1];
        let l = relabel(&current, &new, &[1, 1, 1, 100], 2);
        assert_eq!(l, new.to_vec());
    }

    #[test]
    fn moved_counts_only_mapped_keys_that_change() {
        assert_eq!(moved(&[Some(0), Some(1), None, Some(2)], &[0, 2, 1, 2]), 1);
        assert_eq!(moved(&[], &[]), 0);
    }

    // ---- metrics ---------------------------------------------------------------------------

    #[test]
    fn edge_cut_and_imbalance() {
        let g = csr(
            vec![1, 2, 3, 4],
            &[(0, 1, 5), (1, 2, 7), (2, 3, 11), (0, 3, 13)],
        );
        assert_eq!(edge_cut(&g, &[0, 0, 0, 0]), 0);
        assert_eq!(edge_cut(&g, &[0, 0, 1, 1]), 7 + 13);
        assert_eq!(edge_cut(graph_ref(&g), &[0, 1, 0, 1]), 5 + 7 + 11 + 13);
        assert!((imbalance(&g, &[0, 0, 1, 1], 2) - 7.0 / 5.0).abs() < 1e-12);
        assert!((imbalance(&g, &[0, 1, 1, 0], 2) - 1.0).abs() < 1e-12);
        assert!((imbalance(&g, &[0, 0, 0, 0], 4) - 4.0).abs() < 1e-12);
        let empty = csr(vec![], &[]);
        assert_eq!(edge_cut(&empty, &[]), 0);
        assert_eq!(imbalance(&empty, &[], 4), 1.0);
    }

    // ---- edge cases ----------------------------------------------------------------------

    #[test]
    fn zero_parts_is_an_error() {
        let g = csr(vec![1, 1], &[(0, 1, 1)]);
        for mut p in partitioners() {
            assert_eq!(p.partition((&g).into(), 0), Err(RepartError::NoParts));
            let e = csr(vec![], &[]);
            assert_eq!(p.partition((&e).into(), 0), Err(RepartError::NoParts));
        }
    }

    #[test]
    fn one_part_is_all_zeros_and_empty_graphs_are_empty() {
        let g = clustered(100, 4, 3, 1, 9);
        let empty_a = csr(vec![], &[]); // xadj = [0]
        let empty_b: Csr<u32> = Csr {
            xadj: vec![],
            adjncy: vec![],
            adjwgt: vec![],
            vwgt: vec![],
            keys: vec![],
        };
        for mut p in partitioners() {
            assert_eq!(
                p.partition((&g).into(), 1).unwrap(),
                vec![0; 100],
                "{}",
                p.name()
            );
            for k in [1, 2, 8] {
                assert_eq!(
                    p.partition((&empty_a).into(), k).unwrap(),
                    Vec::<u32>::new()
                );
                assert_eq!(
                    p.partition((&empty_b).into(), k).unwrap(),
                    Vec::<u32>::new()
                );
            }
        }
    }

    #[test]
    fn more_parts_than_vertices() {
        let g = csr(vec![3, 1, 2], &[(0, 1, 4), (1, 2, 1)]);
        for mut p in partitioners() {
            for k in [3, 4, 8, 1000] {
                let part = p.partition((&g).into(), k).unwrap();
                assert_eq!(part.len(), 3);
                assert!(part.iter().all(|&x| x < k), "{}: {part:?}", p.name());
                // The heaviest part is one vertex: as balanced as 3 vertices get.
                let mut sorted = part.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), 3, "{} k {k}: {part:?}", p.name());
            }
        }
        #[cfg(feature = "metis")]
        assert_eq!(
            Metis::default().partition((&g).into(), 4).unwrap(),
            vec![0, 1, 2]
        );
    }

    #[cfg(feature = "metis")]
    #[test]
    fn metis_on_graphs_without_edges_and_with_huge_weights() {
        let g = csr((1..=40).collect(), &[]);
        let part = Metis::default().partition((&g).into(), 4).unwrap();
        assert!(part.iter().all(|&p| p < 4));
        let max_w = 40.0;
        let mean = (40.0 * 41.0 / 2.0) / 4.0;
        assert!(imbalance(&g, &part, 4) <= 1.2 + max_w / mean);

        // Saturated weights: the totals overflow i32, so METIS gets scaled weights.
        let mut g = planted_cliques(&[20, 20, 20, 20], 80, 4).0;
        g.vwgt.iter_mut().for_each(|w| *w = i32::MAX);
        g.adjwgt.iter_mut().for_each(|w| *w = i32::MAX - 1);
        let part = Metis::default().partition((&g).into(), 4).unwrap();
        assert_eq!(edge_cut(&g, &part), 0);
        assert!((imbalance(&g, &part, 4) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn malformed_graphs_are_rejected_not_panicked_on() {
        let ok = csr(vec![1, 1, 1], &[(0, 1, 1), (1, 2, 1)]);
        let mut bads = Vec::new();
        let mut b = ok.clone();
        b.xadj.pop();
        bads.push(b);
        let mut b = ok.clone();
        b.adjncy[0] = 7;
        bads.push(b);
        let mut b = ok.clone();
        b.adjncy[0] = -1;
        bads.push(b);
        let mut b = ok.clone();
        b.adjwgt.pop();
        bads.push(b);
        let mut b = ok.clone();
        b.xadj[1] = 3;
        b.xadj[2] = 2;
        bads.push(b);
        let mut b = ok.clone();
        b.vwgt[2] = -1;
        bads.push(b);
        let mut b = ok.clone();
        b.xadj[0] = 1;
        bads.push(b);
        for (i, b) in bads.iter().enumerate() {
            for mut p in partitioners() {
                for k in [1, 2] {
                    assert!(
                        matches!(p.partition(b.into(), k), Err(RepartError::InvalidInput(_))),
                        "{} case {i} k {k}",
                        p.name()
                    );
                }
            }
        }
        let bad_params = [
            Fennel {
                gamma: f64::NAN,
                ..Fennel::default()
            },
            Fennel {
                slack: 0.0,
                ..Fennel::default()
            },
        ];
        for mut f in bad_params {
            assert!(matches!(
                f.partition((&ok).into(), 2),
                Err(RepartError::InvalidInput(_))
            ));
        }
    }

    #[test]
    fn size_limits_and_weight_scaling() {
        let lim = i32::MAX as usize;
        assert!(check_size(1_000_000, 20_000_000).is_ok());
        assert!(check_size(lim - 1, lim).is_ok());
        assert_eq!(
            check_size(lim, 0),
            Err(RepartError::GraphTooLarge {
                vertices: lim,
                edges: 0,
                limit: lim
            })
        );
        assert!(matches!(
            check_size(10, lim + 1),
            Err(RepartError::GraphTooLarge { .. })
        ));

        assert_eq!(scale_weights(&[1, 2, 3], 6), None);
        let s = scale_weights(&[i32::MAX, i32::MAX, 1, 0], 1 << 29).unwrap();
        assert_eq!(s[2], 1);
        assert_eq!(s[3], 0);
        assert!(s.iter().map(|&x| i64::from(x)).sum::<i64>() <= (1 << 29) + 4);
    }

    #[test]
    fn names() {
        assert_eq!(by_name("fennel").unwrap().name(), "fennel");
        #[cfg(feature = "metis")]
        assert_eq!(by_name("metis").unwrap().name(), "metis");
        assert!(by_name("kahip").is_none());
    }

    // ---- scale (ignored; run in release) ---------------------------------------------------

    fn measure(label: &str, g: &Csr<u32>, k: u32, p: &mut dyn Partitioner) {
        let t = std::time::Instant::now();
        let part = p.partition(g.into(), k).unwrap();
        let dt = t.elapsed();
        let cut = edge_cut(g, &part);
        let rr = edge_cut(g, &round_robin(g.vertices(), k));
        println!(
            "{label}: {:>7} vertices {:>8} edges k {k} {:<6} {:>9.1} ms  imbalance {:.3}  \
             cut {cut} ({:.1}% of round-robin's {rr})",
            g.vertices(),
            g.edges(),
            p.name(),
            dt.as_secs_f64() * 1e3,
            imbalance(g, &part, k),
            100.0 * cut as f64 / rr as f64,
        );
    }

    #[test]
    #[ignore = "timing; run with --release -- --ignored partition_scale --nocapture"]
    fn partition_scale() {
        for (n, label) in [(10_000usize, "1e4"), (1_000_000, "1e6")] {
            let t = std::time::Instant::now();
            let g = clustered(n, n / 50, 6, 1, 42);
            println!("{label}: graph built in {:.1} s", t.elapsed().as_secs_f64());
            #[cfg(feature = "metis")]
            for _ in 0..3 {
                measure(label, &g, 8, &mut Metis::default());
            }
            for _ in 0..3 {
                measure(label, &g, 8, &mut Fennel::default());
            }
        }
    }
}
