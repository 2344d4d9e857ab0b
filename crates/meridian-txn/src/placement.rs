//! Where a transactional key lives when hashing is not the answer (spec `repartitioning.md`
//! §6): the versioned key directory that overrides hash placement, and the planner that
//! proposes moves from the co-access graph of recent transactions.
//!
//! **Directory.** `partition(k) = dir.get(k).unwrap_or(hash_partition(k))`. It holds only
//! moved keys (Schism's lookup table): a key moved back to its hash partition leaves it. Each
//! change bumps the directory's epoch, and the changed entry carries that epoch, so entry
//! epochs are unique and increase along a key's history even across removals (the spec's
//! `At{q, e + 1}` is here `At{q, e'}` with `e' > e`). While an entry is `Moving{from, to}` the
//! key is still served (read-only) by `from`.
//!
//! **Planner.** Fed the key sets of transactions (and the DC each came from), it keeps the
//! co-access graph of the last W of them ([`CoAccessGraph`]). A round partitions the graph
//! into one part per *transactional site* — a partition leader: partitions that share a
//! leader share its clock and its store, so a transaction across them already commits in one
//! step, and moving keys between them cuts no two-phase commit — relabels the parts onto the
//! sites the keys are on now, and emits moves only if the cut (plus the geo cost, below)
//! drops by at least `min_gain`, at most `max_moves_per_round`, never moving a key moved less
//! than `min_residence` ago. When every partition has its own leader, sites are partitions
//! and k is the number of transactional partitions, as the spec puts it.
//!
//! Moves are chosen cluster by cluster: the keys that should move and are connected through
//! edges inside their target site form one cluster, clusters are taken whole by decreasing
//! gain per key until the budget is spent, and a cluster whose move would not lower the cost
//! is left out — so a budget never splits an affinity group, and a round never makes the cut
//! worse.
//!
//! **Geo variant** (`geo_weight > 0`): a key placed on a site whose leader is outside the DC
//! that accesses it most costs `geo_weight × accesses` on top of its cut edges. After the
//! partitioner, a local search moves whole clusters (connected keys on one site) to the site
//! that lowers this cost most, within the partitioner's capacity (1.2 × the mean site load).
//!
//! Determinism: every map is ordered, the partitioners are deterministic (invariant 6), and
//! ties break on key order, so the same window and placement give the same plan.

use crate::types::{Result, TxnError};
use bytes::Bytes;
use meridian_balance::repart::{CoAccessGraph, Csr, Fennel, Partitioner, graph_ref, relabel};
use meridian_core::{DcId, NodeId, PartitionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;

/// A moved key's entry in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// Step 1–2 of a move: `from` still serves the key (reads only), `to` is receiving it.
    Moving {
        /// The partition serving it.
        from: PartitionId,
        /// The partition it is moving to.
        to: PartitionId,
        /// The directory epoch of this entry.
        epoch: u64,
    },
    /// The key lives at `partition`.
    At {
        /// Its partition.
        partition: PartitionId,
        /// The directory epoch of this entry.
        epoch: u64,
    },
}

impl Placement {
    /// The partition that serves the key now (`from` while it moves).
    pub fn serving(&self) -> PartitionId {
        match *self {
            Placement::Moving { from, .. } => from,
            Placement::At { partition, .. } => partition,
        }
    }

    /// The entry's epoch.
    pub fn epoch(&self) -> u64 {
        match *self {
            Placement::Moving { epoch, .. } | Placement::At { epoch, .. } => epoch,
        }
    }

    /// Whether a move is under way.
    pub fn is_moving(&self) -> bool {
        matches!(self, Placement::Moving { .. })
    }
}

/// Where a directory sends a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The partition that serves it.
    pub partition: PartitionId,
    /// Whether it is moving (its server refuses writes until the move ends).
    pub moving: bool,
    /// The directory's epoch.
    pub dir_epoch: u64,
}

/// The versioned key directory of a transactional keyspace (module docs). Replicated whole:
/// a node adopts a copy with a higher epoch ([`KeyDirectory::adopt`]). Serialized as a list
/// of entries, so text formats (the metadata file is JSON) carry it too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "DirWire", into = "DirWire")]
pub struct KeyDirectory {
    epoch: u64,
    entries: BTreeMap<Bytes, Placement>,
}

#[derive(Serialize, Deserialize)]
struct DirWire {
    epoch: u64,
    entries: Vec<(Bytes, Placement)>,
}

impl From<KeyDirectory> for DirWire {
    fn from(d: KeyDirectory) -> Self {
        DirWire {
            epoch: d.epoch,
            entries: d.entries.into_iter().collect(),
        }
    }
}

impl From<DirWire> for KeyDirectory {
    fn from(w: DirWire) -> Self {
        KeyDirectory {
            epoch: w.epoch,
            entries: w.entries.into_iter().collect(),
        }
    }
}

/// A batch of directory changes, applied all or nothing (one cluster-metadata version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirChange {
    /// Step 1: each key starts moving from where it is to the partition given.
    Begin(Vec<(Bytes, PartitionId)>),
    /// Step 3: each key's move ends at its destination.
    Finish(Vec<Bytes>),
    /// Each key's move is given up: it stays at its source.
    Cancel(Vec<Bytes>),
}

impl KeyDirectory {
    /// An empty directory at epoch 0 (hash placement for every key).
    pub fn new() -> KeyDirectory {
        KeyDirectory::default()
    }

    /// The epoch: the number of changes applied.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The moved keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is moved.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `key`'s entry, if it was moved.
    pub fn get(&self, key: &[u8]) -> Option<&Placement> {
        self.entries.get(key)
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Bytes, &Placement)> {
        self.entries.iter()
    }

    /// The partition serving `key`: its entry's, else `home()` (its hash partition).
    pub fn partition(&self, key: &[u8], home: impl FnOnce() -> PartitionId) -> PartitionId {
        self.get(key).map_or_else(home, Placement::serving)
    }

    /// Where to send `key` (see [`Route`]).
    pub fn route(&self, key: &[u8], home: impl FnOnce() -> PartitionId) -> Route {
        match self.get(key) {
            Some(p) => Route {
                partition: p.serving(),
                moving: p.is_moving(),
                dir_epoch: self.epoch,
            },
            None => Route {
                partition: home(),
                moving: false,
                dir_epoch: self.epoch,
            },
        }
    }

    /// Step 1: `key` starts moving from `from` (where it must be, and not already moving) to
    /// `to`. Returns the new epoch.
    pub fn begin_move(
        &mut self,
        key: &[u8],
        home: PartitionId,
        from: PartitionId,
        to: PartitionId,
    ) -> Result<u64> {
        let now = self.partition(key, || home);
        if self.get(key).is_some_and(Placement::is_moving) {
            return Err(TxnError::BadRequest(format!(
                "key {} is already moving",
                String::from_utf8_lossy(key)
            )));
        }
        if now != from || from == to {
            return Err(TxnError::BadRequest(format!(
                "move of {} from {from} to {to}: it is at {now}",
                String::from_utf8_lossy(key)
            )));
        }
        self.epoch += 1;
        let epoch = self.epoch;
        self.entries.insert(
            Bytes::copy_from_slice(key),
            Placement::Moving { from, to, epoch },
        );
        Ok(epoch)
    }

    /// Step 3: the move of `key` ends at its `to` (the entry goes when that is its hash
    /// partition `home`). Returns the new epoch.
    pub fn finish_move(&mut self, key: &[u8], home: PartitionId) -> Result<u64> {
        let Some(Placement::Moving { to, .. }) = self.get(key).copied() else {
            return Err(TxnError::BadRequest(format!(
                "key {} is not moving",
                String::from_utf8_lossy(key)
            )));
        };
        Ok(self.settle(key, home, to))
    }

    /// Gives a move up: `key` stays at its `from`. Returns the new epoch.
    pub fn cancel_move(&mut self, key: &[u8], home: PartitionId) -> Result<u64> {
        let Some(Placement::Moving { from, .. }) = self.get(key).copied() else {
            return Err(TxnError::BadRequest(format!(
                "key {} is not moving",
                String::from_utf8_lossy(key)
            )));
        };
        Ok(self.settle(key, home, from))
    }

    fn settle(&mut self, key: &[u8], home: PartitionId, at: PartitionId) -> u64 {
        self.epoch += 1;
        if at == home {
            self.entries.remove(key);
        } else {
            self.entries.insert(
                Bytes::copy_from_slice(key),
                Placement::At {
                    partition: at,
                    epoch: self.epoch,
                },
            );
        }
        self.epoch
    }

    /// Applies `change` (all or nothing); `home` gives a key's hash partition.
    ///
    /// # Errors
    /// `BadRequest` naming the first key whose change does not fit (nothing is applied).
    pub fn apply(&mut self, change: &DirChange, home: impl Fn(&[u8]) -> PartitionId) -> Result<()> {
        let mut next = self.clone();
        match change {
            DirChange::Begin(moves) => {
                for (k, to) in moves {
                    let from = next.partition(k, || home(k));
                    next.begin_move(k, home(k), from, *to)?;
                }
            }
            DirChange::Finish(keys) => {
                for k in keys {
                    next.finish_move(k, home(k))?;
                }
            }
            DirChange::Cancel(keys) => {
                for k in keys {
                    next.cancel_move(k, home(k))?;
                }
            }
        }
        *self = next;
        Ok(())
    }

    /// Replaces this copy by `newer` if its epoch is higher; whether it did.
    pub fn adopt(&mut self, newer: &KeyDirectory) -> bool {
        if newer.epoch > self.epoch {
            *self = newer.clone();
            true
        } else {
            false
        }
    }
}

/// The planner's knobs (spec §6; defaults from it where it gives them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannerConfig {
    /// W: the window, in transactions (0: every transaction since the start).
    pub window: usize,
    /// How often a round runs, µs (60 s).
    pub plan_interval_us: u64,
    /// A round moves nothing unless the cost (cut edge weight, plus the geo cost) drops by at
    /// least this much. Our default: 16 co-accesses.
    pub min_gain: u64,
    /// At most this many moves per round (1000).
    pub max_moves_per_round: usize,
    /// A key moved less than this long ago does not move again, µs (10 min).
    pub min_residence_us: u64,
    /// The geo variant's cost per access of a key placed outside the DC that accesses it
    /// most, in co-access units (0: off).
    pub geo_weight: u64,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            window: 10_000,
            plan_interval_us: 60_000_000,
            min_gain: 16,
            max_moves_per_round: 1_000,
            min_residence_us: 600_000_000,
            geo_weight: 0,
        }
    }
}

/// One transactional partition as the planner sees it: its leader and the leader's DC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartInfo {
    /// The partition.
    pub partition: PartitionId,
    /// Its leader (the transactional site it belongs to).
    pub leader: NodeId,
    /// The leader's DC.
    pub dc: DcId,
}

/// A proposed move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The key.
    pub key: Bytes,
    /// The partition serving it now.
    pub from: PartitionId,
    /// Where it goes.
    pub to: PartitionId,
}

/// A round's outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The moves, in key order.
    pub moves: Vec<Move>,
    /// The cost (cut + geo) of the current placement over the window.
    pub cost_before: u64,
    /// The cost once the moves are done.
    pub cost_after: u64,
    /// Keys the partition would have moved.
    pub candidates: usize,
    /// Candidates held back because they moved less than `min_residence` ago.
    pub held_by_residence: usize,
    /// Keys in the graph.
    pub vertices: usize,
}

/// The cross-node planner (module docs). Feed it with [`Planner::record`]; call
/// [`Planner::plan`] when [`Planner::due`].
pub struct Planner {
    cfg: PlannerConfig,
    graph: CoAccessGraph<Bytes>,
    /// The window's origin DCs and key sets (geo variant only).
    origins: VecDeque<(DcId, Vec<Bytes>)>,
    /// Per key, accesses by DC over the window (geo variant only).
    by_dc: BTreeMap<Bytes, BTreeMap<DcId, u32>>,
    /// When each recently moved key moved, µs.
    moved_at: BTreeMap<Bytes, u64>,
    last_round: Option<u64>,
    partitioner: Box<dyn Partitioner + Send>,
}

impl fmt::Debug for Planner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Planner")
            .field("cfg", &self.cfg)
            .field("vertices", &self.graph.vertices())
            .field("window_len", &self.graph.window_len())
            .field("recently_moved", &self.moved_at.len())
            .field("partitioner", &self.partitioner.name())
            .finish()
    }
}

/// A stable hash of a key (FNV-1a), to spread moved keys over a site's partitions.
fn fnv(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One transactional site: a leader, its DC, its partitions.
#[derive(Debug)]
struct Site {
    dc: DcId,
    partitions: Vec<PartitionId>,
}

/// The cost model of one round over the CSR: cut edges between sites plus the geo cost.
struct Cost<'a> {
    g: &'a Csr<Bytes>,
    /// Per vertex: the geo cost at each site (empty when the variant is off).
    geo: Vec<Vec<u64>>,
}

impl Cost<'_> {
    fn neighbours(&self, v: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (a, b) = (self.g.xadj[v] as usize, self.g.xadj[v + 1] as usize);
        self.g.adjncy[a..b]
            .iter()
            .zip(&self.g.adjwgt[a..b])
            .map(|(&u, &w)| (u as usize, w.max(0) as u64))
    }

    fn geo(&self, v: usize, site: u32) -> u64 {
        self.geo
            .get(v)
            .and_then(|c| c.get(site as usize))
            .copied()
            .unwrap_or(0)
    }

    fn total(&self, assign: &[u32]) -> u64 {
        let mut c = 0;
        for (v, &sv) in assign.iter().enumerate() {
            c += self.geo(v, sv);
            for (u, w) in self.neighbours(v) {
                if u > v && assign[u] != sv {
                    c += w;
                }
            }
        }
        c
    }

    /// The cost change if every vertex of `set` (flagged in `member`) goes to `to[v]`.
    fn delta(
        &self,
        assign: &[u32],
        set: &[usize],
        member: &[bool],
        to: impl Fn(usize) -> u32,
    ) -> i64 {
        let mut d = 0i64;
        for &v in set {
            let (old, new) = (assign[v], to(v));
            d += self.geo(v, new) as i64 - self.geo(v, old) as i64;
            for (u, w) in self.neighbours(v) {
                let (u_old, u_new) = if member[u] {
                    if u < v {
                        continue; // counted from u
                    }
                    (assign[u], to(u))
                } else {
                    (assign[u], assign[u])
                };
                let before = i64::from(old != u_old);
                let after = i64::from(new != u_new);
                d += (after - before) * w as i64;
            }
        }
        d
    }
}

/// Connected components of the vertices with `pick(v)`, through edges whose two ends are
/// picked and have the same `label`. Each component lists its vertices ascending; the
/// components come in order of their smallest vertex.
fn components(cost: &Cost<'_>, label: &[u32], pick: impl Fn(usize) -> bool) -> Vec<Vec<usize>> {
    let n = label.len();
    let mut seen = vec![false; n];
    let mut out = Vec::new();
    for s in 0..n {
        if seen[s] || !pick(s) {
            continue;
        }
        seen[s] = true;
        let mut comp = vec![s];
        let mut i = 0;
        while i < comp.len() {
            let v = comp[i];
            i += 1;
            for (u, _) in cost.neighbours(v) {
                if !seen[u] && pick(u) && label[u] == label[v] {
                    seen[u] = true;
                    comp.push(u);
                }
            }
        }
        comp.sort_unstable();
        out.push(comp);
    }
    out
}

impl Planner {
    /// A planner with `cfg`, partitioning with `partitioner`.
    pub fn new(cfg: PlannerConfig, partitioner: Box<dyn Partitioner + Send>) -> Planner {
        Planner {
            cfg,
            graph: CoAccessGraph::new(cfg.window),
            origins: VecDeque::new(),
            by_dc: BTreeMap::new(),
            moved_at: BTreeMap::new(),
            last_round: None,
            partitioner,
        }
    }

    /// A planner with `cfg` and FENNEL (pure Rust, deterministic).
    pub fn with_fennel(cfg: PlannerConfig) -> Planner {
        Planner::new(cfg, Box::new(Fennel::default()))
    }

    /// The configuration.
    pub fn config(&self) -> &PlannerConfig {
        &self.cfg
    }

    /// Records one transaction's keys (reads, writes and watches), coordinated in `dc`.
    pub fn record(&mut self, keys: &[Bytes], dc: DcId) {
        self.graph.record(keys);
        if self.cfg.geo_weight == 0 {
            return;
        }
        let mut ks = keys.to_vec();
        ks.sort_unstable();
        ks.dedup();
        for k in &ks {
            *self
                .by_dc
                .entry(k.clone())
                .or_default()
                .entry(dc)
                .or_default() += 1;
        }
        self.origins.push_back((dc, ks));
        if self.cfg.window > 0
            && self.origins.len() > self.cfg.window
            && let Some((dc, old)) = self.origins.pop_front()
        {
            for k in old {
                let Some(m) = self.by_dc.get_mut(&k) else {
                    continue;
                };
                if let Some(c) = m.get_mut(&dc) {
                    *c -= 1;
                    if *c == 0 {
                        m.remove(&dc);
                    }
                }
                if m.is_empty() {
                    self.by_dc.remove(&k);
                }
            }
        }
    }

    /// Whether a round is due at `now_us` (the first one is due at once).
    pub fn due(&self, now_us: u64) -> bool {
        self.last_round
            .is_none_or(|t| now_us >= t.saturating_add(self.cfg.plan_interval_us))
    }

    /// The DC that accesses `key` most (lowest DC on ties), geo variant only.
    fn home_dc(&self, key: &[u8]) -> Option<DcId> {
        self.by_dc
            .get(key)?
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(&dc, _)| dc)
    }

    /// One planning round at `now_us` over the transactional partitions `parts`; `place`
    /// gives a key's partition now (the directory's answer), `home` its hash partition. The
    /// moves are recorded as done for `min_residence` (run them, or cancel them with
    /// [`Planner::forget_moves`]).
    ///
    /// # Errors
    /// `TxnError::Plan` when the partitioner fails.
    pub fn plan(
        &mut self,
        now_us: u64,
        parts: &[PartInfo],
        place: impl Fn(&[u8]) -> PartitionId,
        home: impl Fn(&[u8]) -> PartitionId,
    ) -> Result<Plan> {
        self.last_round = Some(now_us);
        let min_res = self.cfg.min_residence_us;
        self.moved_at
            .retain(|_, &mut t| t.saturating_add(min_res) > now_us);
        let mut sites: BTreeMap<NodeId, Site> = BTreeMap::new();
        for p in parts {
            let s = sites.entry(p.leader).or_insert_with(|| Site {
                dc: p.dc,
                partitions: Vec::new(),
            });
            s.partitions.push(p.partition);
        }
        for s in sites.values_mut() {
            s.partitions.sort_unstable();
            s.partitions.dedup();
        }
        let site_of: BTreeMap<PartitionId, u32> = sites
            .values()
            .enumerate()
            .flat_map(|(i, s)| s.partitions.iter().map(move |&p| (p, i as u32)))
            .collect();
        let sites: Vec<Site> = sites.into_values().collect();
        let k = sites.len() as u32;
        let g = self
            .graph
            .try_to_csr()
            .map_err(|e| TxnError::Plan(e.to_string()))?;
        let n = g.vertices();
        let mut plan = Plan {
            vertices: n,
            ..Plan::default()
        };
        if n == 0 || k < 2 {
            return Ok(plan);
        }
        // Now: each key's site; keys outside `parts` are pinned where they are, under a label
        // of their own (k) that no move targets.
        let cur: Vec<Option<u32>> = g
            .keys
            .iter()
            .map(|key| site_of.get(&place(key)).copied())
            .collect();
        let geo = if self.cfg.geo_weight > 0 {
            g.keys
                .iter()
                .zip(&g.vwgt)
                .map(|(key, &w)| {
                    let Some(dc) = self.home_dc(key) else {
                        return vec![0; sites.len()];
                    };
                    let c = self.cfg.geo_weight.saturating_mul(w.max(0) as u64);
                    sites
                        .iter()
                        .map(|s| if s.dc == dc { 0 } else { c })
                        .collect()
                })
                .collect()
        } else {
            Vec::new()
        };
        let cost = Cost { g: &g, geo };
        let labels = self
            .partitioner
            .partition(graph_ref(&g), k)
            .map_err(|e| TxnError::Plan(e.to_string()))?;
        let mut target = relabel(&cur, &labels, &g.vwgt, k);
        let now: Vec<u32> = cur.iter().map(|c| c.unwrap_or(k)).collect();
        for (t, c) in target.iter_mut().zip(&cur) {
            if c.is_none() {
                *t = k;
            }
        }
        if self.cfg.geo_weight > 0 {
            self.refine_geo(&cost, &mut target, k);
        }
        plan.cost_before = cost.total(&now);
        // Candidates, and those residence holds back.
        let mut wants = vec![false; n];
        for v in 0..n {
            if now[v] == k || target[v] == now[v] {
                continue;
            }
            plan.candidates += 1;
            if self.moved_at.contains_key(&g.keys[v]) {
                plan.held_by_residence += 1;
                target[v] = now[v];
            } else {
                wants[v] = true;
            }
        }
        // Clusters of wanted moves, taken whole by decreasing gain per key.
        let clusters = components(&cost, &target, |v| wants[v]);
        let mut assign = now.clone();
        let mut member = vec![false; n];
        let mut scored: Vec<(i64, usize)> = Vec::with_capacity(clusters.len());
        for (i, c) in clusters.iter().enumerate() {
            c.iter().for_each(|&v| member[v] = true);
            let d = cost.delta(&assign, c, &member, |v| target[v]);
            c.iter().for_each(|&v| member[v] = false);
            scored.push((d, i));
        }
        // Most negative delta per key first; ties by the cluster's first key.
        scored.sort_by(|a, b| {
            let (la, lb) = (clusters[a.1].len() as i64, clusters[b.1].len() as i64);
            (a.0 * lb).cmp(&(b.0 * la)).then(a.1.cmp(&b.1))
        });
        let mut budget = self.cfg.max_moves_per_round;
        for (_, i) in scored {
            let c = &clusters[i];
            if c.len() > budget {
                continue;
            }
            // Re-score against what was already taken.
            c.iter().for_each(|&v| member[v] = true);
            let d = cost.delta(&assign, c, &member, |v| target[v]);
            c.iter().for_each(|&v| member[v] = false);
            if d >= 0 {
                continue;
            }
            for &v in c {
                assign[v] = target[v];
            }
            budget -= c.len();
        }
        plan.cost_after = cost.total(&assign);
        if plan.cost_before < plan.cost_after.saturating_add(self.cfg.min_gain) {
            plan.cost_after = plan.cost_before;
            return Ok(plan);
        }
        for v in 0..n {
            if assign[v] == now[v] {
                continue;
            }
            let key = &g.keys[v];
            let site = &sites[assign[v] as usize];
            let h = home(key);
            let to = if site.partitions.contains(&h) {
                h
            } else {
                site.partitions[(fnv(key) % site.partitions.len() as u64) as usize]
            };
            plan.moves.push(Move {
                key: key.clone(),
                from: place(key),
                to,
            });
            self.moved_at.insert(key.clone(), now_us);
        }
        Ok(plan)
    }

    /// Forgets that these keys moved (their moves were cancelled): residence no longer
    /// holds them.
    pub fn forget_moves<'k>(&mut self, keys: impl IntoIterator<Item = &'k Bytes>) {
        for k in keys {
            self.moved_at.remove(k);
        }
    }

    /// The geo variant's local search: moves whole clusters (keys connected inside their
    /// site) to the site lowering the cost most, within 1.2 × the mean site load, up to three
    /// passes.
    fn refine_geo(&self, cost: &Cost<'_>, target: &mut [u32], k: u32) {
        let g = cost.g;
        let total: i64 = g.vwgt.iter().map(|&w| i64::from(w.max(0))).sum();
        let cap = total as f64 * 1.2 / f64::from(k);
        let mut load = vec![0i64; k as usize];
        for (v, &s) in target.iter().enumerate() {
            if s < k {
                load[s as usize] += i64::from(g.vwgt[v].max(0));
            }
        }
        let mut member = vec![false; target.len()];
        for _ in 0..3 {
            let mut improved = false;
            let clusters = components(cost, target, |v| target[v] < k);
            for c in clusters {
                let from = target[c[0]];
                let w: i64 = c.iter().map(|&v| i64::from(g.vwgt[v].max(0))).sum();
                c.iter().for_each(|&v| member[v] = true);
                let mut best: Option<(i64, u32)> = None;
                for s in (0..k).filter(|&s| s != from) {
                    if (load[s as usize] + w) as f64 > cap {
                        continue;
                    }
                    let d = cost.delta(target, &c, &member, |_| s);
                    if d < 0 && best.is_none_or(|(bd, _)| d < bd) {
                        best = Some((d, s));
                    }
                }
                c.iter().for_each(|&v| member[v] = false);
                if let Some((_, s)) = best {
                    for &v in &c {
                        target[v] = s;
                    }
                    load[from as usize] -= w;
                    load[s as usize] += w;
                    improved = true;
                }
            }
            if !improved {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: u32 = 64;

    /// 64 partitions led by `sites` leaders round-robin; leaders alternate between 2 DCs.
    fn parts(sites: u32) -> Vec<PartInfo> {
        (0..Q)
            .map(|p| PartInfo {
                partition: PartitionId(p),
                leader: NodeId(1 + p % sites),
                dc: DcId((p % sites) % 2),
            })
            .collect()
    }

    fn home(key: &[u8]) -> PartitionId {
        PartitionId((fnv(key) >> 7) as u32 % Q)
    }

    fn key(g: usize, j: usize) -> Bytes {
        Bytes::from(format!("bank:g{g}k{j}"))
    }

    /// xorshift64*, seeded.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// `n` transactions, each over one of `groups` affinity groups of 8 keys, with its DC.
    fn workload(seed: u64, groups: usize, n: usize) -> Vec<(Vec<Bytes>, DcId)> {
        let mut r = Rng(seed | 1);
        (0..n)
            .map(|_| {
                let g = r.next() as usize % groups;
                ((0..8).map(|j| key(g, j)).collect(), DcId((g % 2) as u32))
            })
            .collect()
    }

    /// The placement after a directory's moves.
    fn placed(dir: &KeyDirectory) -> impl Fn(&[u8]) -> PartitionId + '_ {
        move |k: &[u8]| dir.partition(k, || home(k))
    }

    fn leader_of(parts: &[PartInfo], p: PartitionId) -> NodeId {
        parts[p.0 as usize].leader
    }

    /// The fraction of transactions whose keys span more than one leader.
    fn distributed(txns: &[(Vec<Bytes>, DcId)], parts: &[PartInfo], dir: &KeyDirectory) -> f64 {
        let place = placed(dir);
        let d = txns
            .iter()
            .filter(|(ks, _)| {
                let mut ls: Vec<NodeId> = ks.iter().map(|k| leader_of(parts, place(k))).collect();
                ls.sort_unstable();
                ls.dedup();
                ls.len() > 1
            })
            .count();
        d as f64 / txns.len() as f64
    }

    fn apply(dir: &mut KeyDirectory, plan: &Plan) {
        for m in &plan.moves {
            dir.begin_move(&m.key, home(&m.key), m.from, m.to).unwrap();
            dir.finish_move(&m.key, home(&m.key)).unwrap();
        }
    }

    fn planner(cfg: PlannerConfig) -> Planner {
        Planner::with_fennel(cfg)
    }

    fn feed(p: &mut Planner, txns: &[(Vec<Bytes>, DcId)]) {
        for (ks, dc) in txns {
            p.record(ks, *dc);
        }
    }

    fn round(p: &mut Planner, now: u64, parts: &[PartInfo], dir: &KeyDirectory) -> Plan {
        p.plan(now, parts, placed(dir), home).unwrap()
    }

    #[test]
    fn the_directory_overrides_hashing_and_holds_only_moved_keys() {
        let mut d = KeyDirectory::new();
        let k = b"bank:a";
        let h = home(k);
        let q = PartitionId((h.0 + 1) % Q);
        assert_eq!(d.partition(k, || h), h);
        assert!(d.begin_move(k, h, q, h).is_err(), "not at q");
        let e1 = d.begin_move(k, h, h, q).unwrap();
        assert_eq!(
            d.route(k, || h),
            Route {
                partition: h,
                moving: true,
                dir_epoch: e1
            }
        );
        assert!(d.begin_move(k, h, h, q).is_err(), "already moving");
        let e2 = d.finish_move(k, h).unwrap();
        assert!(e2 > e1);
        assert_eq!(
            d.get(k),
            Some(&Placement::At {
                partition: q,
                epoch: e2
            })
        );
        assert_eq!(d.partition(k, || h), q);
        // Back home: the entry goes, the epoch still grows.
        let e3 = d.begin_move(k, h, q, h).unwrap();
        let e4 = d.finish_move(k, h).unwrap();
        assert!(e4 > e3 && e3 > e2);
        assert!(d.is_empty());
        assert_eq!(d.partition(k, || h), h);
        // A cancelled move leaves the key where it was.
        d.begin_move(k, h, h, q).unwrap();
        d.cancel_move(k, h).unwrap();
        assert!(d.is_empty());
        // Replication: only a newer copy is adopted.
        let mut stale = KeyDirectory::new();
        assert!(stale.adopt(&d));
        assert_eq!(stale, d);
        assert!(!stale.adopt(&KeyDirectory::new()));
    }

    #[test]
    fn batches_apply_all_or_nothing_and_round_trip_through_json_and_postcard() {
        let mut d = KeyDirectory::new();
        let (a, b) = (Bytes::from("bank:a"), Bytes::from("bank:b"));
        let to = |k: &[u8]| PartitionId((home(k).0 + 1) % Q);
        d.apply(
            &DirChange::Begin(vec![(a.clone(), to(&a)), (b.clone(), to(&b))]),
            home,
        )
        .unwrap();
        assert_eq!(d.epoch(), 2);
        let before = d.clone();
        // b is not moving twice: the batch is refused whole.
        assert!(
            d.apply(&DirChange::Begin(vec![(b.clone(), home(&b))]), home)
                .is_err()
        );
        assert_eq!(d, before);
        d.apply(&DirChange::Finish(vec![a.clone()]), home).unwrap();
        d.apply(&DirChange::Cancel(vec![b.clone()]), home).unwrap();
        assert_eq!(d.partition(&a, || home(&a)), to(&a));
        assert_eq!(d.partition(&b, || home(&b)), home(&b));
        assert_eq!(d.len(), 1);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<KeyDirectory>(&json).unwrap(), d);
        let bin = postcard::to_stdvec(&d).unwrap();
        assert_eq!(postcard::from_bytes::<KeyDirectory>(&bin).unwrap(), d);
    }

    #[test]
    fn planted_groups_scattered_by_hashing_are_colocated_after_one_round() {
        let parts = parts(4);
        let txns = workload(7, 100, 3_000);
        let mut dir = KeyDirectory::new();
        let before = distributed(&txns, &parts, &dir);
        let mut p = planner(PlannerConfig::default());
        feed(&mut p, &txns);
        let plan = round(&mut p, 0, &parts, &dir);
        apply(&mut dir, &plan);
        let after = distributed(&txns, &parts, &dir);
        println!(
            "distributed {before:.3} -> {after:.3}, {} moves, cost {} -> {}",
            plan.moves.len(),
            plan.cost_before,
            plan.cost_after
        );
        assert!(before > 0.9, "hashing scatters the groups: {before}");
        assert!(after <= before * 0.2, "{before} -> {after}");
        assert!(plan.cost_after < plan.cost_before);
        assert!(plan.moves.len() <= 800);
        // Every move lands on a partition and leaves its source.
        for m in &plan.moves {
            assert_ne!(leader_of(&parts, m.from), leader_of(&parts, m.to));
        }
        // Moves only: the directory holds no key that was not moved.
        assert!(dir.len() <= plan.moves.len());
    }

    #[test]
    fn a_stationary_workload_does_not_move_keys_back_and_forth() {
        let parts = parts(4);
        let cfg = PlannerConfig {
            window: 3_000,
            ..PlannerConfig::default()
        };
        let mut p = planner(cfg);
        let mut dir = KeyDirectory::new();
        feed(&mut p, &workload(1, 100, 3_000));
        let first = round(&mut p, 0, &parts, &dir);
        assert!(!first.moves.is_empty());
        apply(&mut dir, &first);
        // The same workload, other samples, for several rounds: before min_residence every
        // round's moved keys are held; after it, nothing worth moving is left.
        let mut moved_again = 0;
        for (i, now) in [60_000_000u64, 120_000_000, 700_000_000, 1_400_000_000]
            .into_iter()
            .enumerate()
        {
            feed(&mut p, &workload(10 + i as u64, 100, 3_000));
            let plan = round(&mut p, now, &parts, &dir);
            for m in &plan.moves {
                let recent = first.moves.iter().any(|f| f.key == m.key);
                assert!(
                    !(recent && now < cfg.min_residence_us),
                    "{:?} moved again within min_residence",
                    m.key
                );
            }
            moved_again += plan.moves.len();
            apply(&mut dir, &plan);
        }
        assert!(
            moved_again * 20 <= first.moves.len(),
            "{moved_again} keys moved again after a first round of {}",
            first.moves.len()
        );
    }

    #[test]
    fn min_residence_holds_recently_moved_keys() {
        let parts = parts(4);
        let mut p = planner(PlannerConfig::default());
        let dir = KeyDirectory::new();
        let txns = workload(3, 50, 2_000);
        feed(&mut p, &txns);
        let first = round(&mut p, 0, &parts, &dir);
        assert!(!first.moves.is_empty());
        // The moves were not applied (say, cancelled): the same plan comes up again, but its
        // keys are held until min_residence passes.
        let early = round(&mut p, 1_000_000, &parts, &dir);
        assert!(early.moves.is_empty(), "{:?}", early.moves.len());
        assert_eq!(early.held_by_residence, early.candidates);
        let late = round(&mut p, 600_000_001, &parts, &dir);
        assert_eq!(late.moves, first.moves);
        // Forgetting cancelled moves releases them at once.
        p.forget_moves(late.moves.iter().map(|m| &m.key));
        assert_eq!(round(&mut p, 600_000_002, &parts, &dir).moves, first.moves);
    }

    #[test]
    fn the_move_budget_is_respected_and_never_splits_a_group() {
        let parts = parts(4);
        let cfg = PlannerConfig {
            max_moves_per_round: 40,
            ..PlannerConfig::default()
        };
        let txns = workload(5, 100, 3_000);
        let mut dir = KeyDirectory::new();
        let before = distributed(&txns, &parts, &dir);
        let mut p = planner(cfg);
        feed(&mut p, &txns);
        let plan = round(&mut p, 0, &parts, &dir);
        assert!(!plan.moves.is_empty());
        assert!(plan.moves.len() <= 40, "{}", plan.moves.len());
        assert!(plan.cost_after < plan.cost_before);
        apply(&mut dir, &plan);
        let after = distributed(&txns, &parts, &dir);
        assert!(after < before, "{before} -> {after}");
        // Each group a move touched is now on one leader.
        let place = placed(&dir);
        for m in &plan.moves {
            let g: String = String::from_utf8_lossy(&m.key)
                .trim_start_matches("bank:g")
                .split('k')
                .next()
                .unwrap()
                .to_string();
            let g: usize = g.parse().unwrap();
            let mut ls: Vec<NodeId> = (0..8)
                .map(|j| leader_of(&parts, place(&key(g, j))))
                .collect();
            ls.dedup();
            assert_eq!(ls.len(), 1, "group {g} split");
        }
    }

    #[test]
    fn plans_are_deterministic() {
        let parts = parts(4);
        let txns = workload(9, 80, 2_000);
        let run = || {
            let mut p = planner(PlannerConfig::default());
            feed(&mut p, &txns);
            round(&mut p, 0, &parts, &KeyDirectory::new())
        };
        let a = run();
        assert!(!a.moves.is_empty());
        assert_eq!(a, run());
    }

    #[test]
    fn below_min_gain_nothing_moves() {
        let parts = parts(4);
        let txns = workload(11, 100, 3_000);
        let mut p = planner(PlannerConfig {
            min_gain: u64::MAX / 2,
            ..PlannerConfig::default()
        });
        feed(&mut p, &txns);
        let plan = round(&mut p, 0, &parts, &KeyDirectory::new());
        assert!(plan.moves.is_empty());
        assert!(plan.candidates > 0);
        // One site: nothing to plan.
        let one: Vec<PartInfo> = parts
            .iter()
            .map(|p| PartInfo {
                leader: NodeId(1),
                ..*p
            })
            .collect();
        let mut p = planner(PlannerConfig::default());
        feed(&mut p, &txns);
        assert!(
            round(&mut p, 0, &one, &KeyDirectory::new())
                .moves
                .is_empty()
        );
    }

    #[test]
    fn the_geo_variant_places_groups_in_the_dc_that_accesses_them() {
        let parts = parts(4);
        // Group g is accessed from DC g % 2; sites 1, 3 are in DC 0 and 2, 4 in DC 1.
        let txns = workload(13, 60, 3_000);
        let dc_of = |p: PartitionId| parts[p.0 as usize].dc;
        let local = |dir: &KeyDirectory| {
            let place = placed(dir);
            let n = (0..60)
                .flat_map(|g| (0..8).map(move |j| (g, j)))
                .filter(|&(g, j)| dc_of(place(&key(g, j))) == DcId((g % 2) as u32))
                .count();
            n as f64 / 480.0
        };
        let mut plain = KeyDirectory::new();
        let mut p = planner(PlannerConfig::default());
        feed(&mut p, &txns);
        let plan = round(&mut p, 0, &parts, &plain);
        apply(&mut plain, &plan);
        let mut geo = KeyDirectory::new();
        let mut p = planner(PlannerConfig {
            geo_weight: 2,
            ..PlannerConfig::default()
        });
        feed(&mut p, &txns);
        let plan = round(&mut p, 0, &parts, &geo);
        apply(&mut geo, &plan);
        println!(
            "keys in their accessing DC: plain {:.2}, geo {:.2}",
            local(&plain),
            local(&geo)
        );
        assert!(local(&geo) >= 0.95, "{}", local(&geo));
        assert!(distributed(&txns, &parts, &geo) <= 0.1);
    }
}
