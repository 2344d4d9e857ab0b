//! The cross-node planner study (issue 17's second experiment; spec `repartitioning.md` §6
//! "Experiment"): a YCSB+T-style transactional workload over hidden affinity groups on the
//! simulator's cluster in virtual time, before and after the planner co-locates the groups.
//!
//! | part | what |
//! |---|---|
//! | cluster | 1 DC of `leaders` nodes, every one leading partitions of the ring; LAN 1 ms one way ([`LAN_ONE_WAY`]); one Clock-SI transactional bucket ([`AFFINITY_BUCKET`]) |
//! | workload | `groups` groups of `group_size` keys; a transaction reads and then writes every key of one group (with probability `cross_group`, half its keys come from a second group). Key names carry no group and CRC16 slots scatter each group over the leaders |
//! | clients | closed loops; a client sends each transaction to the leader of its first key (a cluster-aware client, as with `CLUSTER SLOTS`) and routes with its contact node's directory copy |
//! | service | the driver-side [`ServiceModel`] of the Clock-SI throughput part, charged per message at every leader a transaction touches (below), so throughput reflects the work 2PC adds |
//! | phases | warm-up and *before* with the planner off; at `planner_start` [`Node::set_txn_planner`] on every node; *planning* while the claimant plans every `plan_interval` and moves keys; *after*, measured once the moves have settled (the planner stays on) |
//!
//! **Service model.** Each node is a FIFO server (as in [`crate::ycsbt`]); per transaction the
//! coordinator (its origin) is charged one message for the client's request, and every leader
//! of its keys one message for the reads plus one for a single-leader commit (`CommitLocal`)
//! or two for two-phase commit (prepare, commit), plus `update_extra_us` for installing its
//! writes. The charges are taken before the transaction runs, at every leader at once. Key
//! moves are not charged.
//!
//! **What is measured.** Per time bin and per phase: committed transactions per second,
//! p50/p99 latency of commits (client round trip included), the fraction of committed
//! transactions that were *distributed* (their keys had more than one leader in the client's
//! routing view when they started), the nodes' two-phase-commit counter
//! ([`TxnStats::two_phase_commits`]; every transaction writes every key it reads, so it
//! commits through 2PC exactly when it is distributed), aborts by kind (`key_moving`,
//! `ww_conflict`, ...; an aborted transaction is not retried, the client goes on), and keys
//! moved: the harness samples the claimant's routing of every workload key each
//! [`SAMPLE_MS`] and counts keys whose partition changed; changes less than half a
//! `plan_interval` apart belong to one planning round.
//!
//! **Guarantees.** Deterministic given the seed: the cluster, the key names, the clients'
//! choices and the planner (FENNEL, seeded) all derive from it, and every time is virtual
//! (a paused current-thread runtime, [`virtual_runtime`]), so a run is reproduced exactly
//! and its figures are virtual-time figures, bounded by the service model, not by this
//! machine. Virtual time resolves 1 ms (tokio's timers).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use meridian_core::{NodeId, PartitionId};
use meridian_replication::{
    BucketProps, EventualNode, PlannerConfig, TxnError, TxnOptions, TxnStats,
};
use meridian_sim::SyncPolicy;
use meridian_sim::cluster::{SimCluster, SimConfig};
use parking_lot::Mutex;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::BenchError;
use crate::clocksi::{LAN_ONE_WAY, SERVICE_US, THROUGHPUT_SCALE};
use crate::cluster::virtual_runtime;
use crate::output::write_file;
use crate::plot::{XyAxes, XySeries, xy_lines};
use crate::ycsbt::{
    Cpus, Protocol, ServiceModel, diff_stats, error_code, new_histogram, sum_stats,
};

/// The transactional bucket the workload's keys live in.
pub const AFFINITY_BUCKET: &str = "aff";

/// How often the harness samples the claimant's routing of the workload's keys, ms.
pub const SAMPLE_MS: u64 = 100;

/// The planner's knobs for the study (spec §6; see [`PlannerConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannerSettings {
    /// How often the claimant plans, ms of virtual time.
    pub plan_interval_ms: u64,
    /// W: the planner's window, in transactions.
    pub window: usize,
    /// A round moves nothing unless the cut drops by at least this many co-accesses.
    pub min_gain: u64,
    /// At most this many keys move per round.
    pub max_moves_per_round: usize,
    /// A moved key stays put at least this long, ms.
    pub min_residence_ms: u64,
}

impl PlannerSettings {
    /// The node's planner configuration.
    pub fn config(&self) -> PlannerConfig {
        PlannerConfig {
            window: self.window,
            plan_interval_us: self.plan_interval_ms * 1_000,
            min_gain: self.min_gain,
            max_moves_per_round: self.max_moves_per_round,
            min_residence_us: self.min_residence_ms * 1_000,
            geo_weight: 0,
        }
    }
}

/// One run of the study.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AffinityConfig {
    /// Seed of the cluster, the key names and the clients.
    pub seed: u64,
    /// Nodes, all in one DC; each leads some of the ring's partitions.
    pub leaders: u32,
    /// Ring partitions.
    pub q: u32,
    /// Affinity groups.
    pub groups: usize,
    /// Keys per group.
    pub group_size: usize,
    /// Fraction of transactions touching two groups (half their keys from each).
    pub cross_group: f64,
    /// Closed-loop clients.
    pub clients: usize,
    /// Bytes of each written value.
    pub value_size: usize,
    /// Not measured, planner off, ms.
    pub warmup_ms: u64,
    /// Measured with the planner off, ms.
    pub before_ms: u64,
    /// From the planner's start until the *after* phase, ms.
    pub planning_ms: u64,
    /// Measured once the moves settled, ms.
    pub after_ms: u64,
    /// Width of a time-series bin, ms (every phase is a whole number of bins).
    pub bin_ms: u64,
    /// The planner (`None`: never turned on, the control run).
    pub planner: Option<PlannerSettings>,
    /// The per-node service model (`None`: no service time, latency only).
    pub service: Option<ServiceModel>,
}

impl AffinityConfig {
    /// The reproduction's run: 8 leaders, 64 groups of 8 keys (spec: "one group of 8 keys").
    pub fn full(seed: u64) -> AffinityConfig {
        AffinityConfig {
            seed,
            leaders: 8,
            q: 64,
            groups: 64,
            group_size: 8,
            cross_group: 0.05,
            clients: 32,
            value_size: 100,
            warmup_ms: 2_000,
            before_ms: 10_000,
            planning_ms: 20_000,
            after_ms: 10_000,
            bin_ms: 1_000,
            planner: Some(PlannerSettings {
                plan_interval_ms: 5_000,
                window: 5_000,
                min_gain: 16,
                max_moves_per_round: 200,
                min_residence_ms: 120_000,
            }),
            service: Some(scaled_service()),
        }
    }

    /// A small run for tests and a first look: 6 leaders, 24 groups of 4 keys, a few
    /// virtual seconds.
    pub fn quick(seed: u64) -> AffinityConfig {
        AffinityConfig {
            seed,
            leaders: 6,
            q: 64,
            groups: 24,
            group_size: 4,
            cross_group: 0.05,
            clients: 8,
            value_size: 100,
            warmup_ms: 500,
            before_ms: 1_500,
            planning_ms: 4_000,
            after_ms: 1_500,
            bin_ms: 500,
            planner: Some(PlannerSettings {
                plan_interval_ms: 1_000,
                window: 2_000,
                min_gain: 8,
                max_moves_per_round: 40,
                min_residence_ms: 60_000,
            }),
            service: Some(scaled_service()),
        }
    }

    /// Checks the sizes and that every phase is a whole number of bins.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |reason: String| Err(BenchError::InvalidDesign { reason });
        if self.leaders < 2 {
            return bad(format!(
                "{} leaders: moving keys needs at least 2",
                self.leaders
            ));
        }
        if self.groups < 2 || self.group_size < 2 {
            return bad(format!(
                "{} groups of {} keys: at least 2 groups of 2 keys",
                self.groups, self.group_size
            ));
        }
        if !(0.0..=1.0).contains(&self.cross_group) {
            return bad(format!(
                "cross_group {} is not a fraction in [0, 1]",
                self.cross_group
            ));
        }
        if self.clients == 0 {
            return bad("no client".into());
        }
        if self.bin_ms == 0 || !self.bin_ms.is_multiple_of(SAMPLE_MS) {
            return bad(format!(
                "bin of {} ms: a positive multiple of {SAMPLE_MS} ms",
                self.bin_ms
            ));
        }
        for (name, ms) in [
            ("warmup", self.warmup_ms),
            ("before", self.before_ms),
            ("planning", self.planning_ms),
            ("after", self.after_ms),
        ] {
            if !ms.is_multiple_of(self.bin_ms) {
                return bad(format!(
                    "{name} of {ms} ms is not a whole number of {} ms bins",
                    self.bin_ms
                ));
            }
        }
        if self.before_ms == 0 || self.after_ms == 0 {
            return bad("the before and after phases must be measured (> 0 ms)".into());
        }
        if let Some(p) = &self.planner
            && (p.plan_interval_ms == 0 || p.window == 0 || p.max_moves_per_round == 0)
        {
            return bad(
                "the planner needs a positive plan interval, window and move budget".into(),
            );
        }
        Ok(())
    }

    fn total_ms(&self) -> u64 {
        self.warmup_ms + self.before_ms + self.planning_ms + self.after_ms
    }

    fn bins(&self) -> usize {
        (self.total_ms() / self.bin_ms) as usize
    }

    /// The phase of the bin starting at `ms` since the run start.
    fn phase_at(&self, ms: u64) -> Phase {
        if ms < self.warmup_ms {
            Phase::Warmup
        } else if ms < self.warmup_ms + self.before_ms {
            Phase::Before
        } else if ms < self.warmup_ms + self.before_ms + self.planning_ms {
            Phase::Planning
        } else {
            Phase::After
        }
    }
}

/// The Clock-SI study's throughput model ([`SERVICE_US`] per message, as much again to
/// install an update), slowed down [`THROUGHPUT_SCALE`]× like there, so the simulator runs
/// 10× fewer transactions for the same utilisation.
pub fn scaled_service() -> ServiceModel {
    ServiceModel {
        per_message_us: SERVICE_US * THROUGHPUT_SCALE,
        update_extra_us: SERVICE_US * THROUGHPUT_SCALE,
    }
}

/// A run's phases, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Planner off, not measured.
    Warmup,
    /// Planner off, measured.
    Before,
    /// Planner on, keys moving.
    Planning,
    /// Planner on, moves settled, measured.
    After,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 4] = [Phase::Warmup, Phase::Before, Phase::Planning, Phase::After];

    /// The name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Before => "before",
            Phase::Planning => "planning",
            Phase::After => "after",
        }
    }
}

/// One time bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bin {
    /// Start of the bin, s since the run start.
    pub start_s: f64,
    /// Its phase.
    pub phase: Phase,
    /// Transactions committed in the bin (by the clients' count).
    pub commits: u64,
    /// Committed transactions per second.
    pub txn_per_s: f64,
    /// Committed transactions whose keys had more than one leader.
    pub distributed: u64,
    /// Commits counted by the nodes (coordinators) in the bin.
    pub node_commits: u64,
    /// Of those, committed through two-phase commit.
    pub two_phase_commits: u64,
    /// Aborted transactions, by kind.
    pub aborts: BTreeMap<String, u64>,
    /// Median latency of the bin's commits, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Keys whose partition changed in the bin.
    pub keys_moved: u64,
    /// Entries in the key directory at the bin's end.
    pub directory_len: usize,
}

impl Bin {
    /// Distributed commits / commits (NaN without commits).
    pub fn distributed_fraction(&self) -> f64 {
        self.distributed as f64 / self.commits as f64
    }

    /// 2PC commits / node commits (NaN without commits).
    pub fn two_phase_fraction(&self) -> f64 {
        self.two_phase_commits as f64 / self.node_commits as f64
    }
}

/// One phase, aggregated over its bins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// The phase.
    pub phase: Phase,
    /// Its start, s since the run start.
    pub from_s: f64,
    /// Its length, s.
    pub seconds: f64,
    /// Committed transactions.
    pub commits: u64,
    /// Committed transactions per second.
    pub txn_per_s: f64,
    /// Committed transactions whose keys had more than one leader.
    pub distributed: u64,
    /// `distributed / commits`.
    pub distributed_fraction: f64,
    /// Commits counted by the nodes.
    pub node_commits: u64,
    /// Of those, through two-phase commit.
    pub two_phase_commits: u64,
    /// `two_phase_commits / node_commits`.
    pub two_phase_fraction: f64,
    /// Median latency of commits, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Aborted transactions, by kind.
    pub aborts: BTreeMap<String, u64>,
    /// Keys whose partition changed during the phase.
    pub keys_moved: u64,
}

/// One planning round, as observed in the claimant's routing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// 1, 2, ...
    pub index: usize,
    /// When its first change was seen, s since the run start.
    pub at_s: f64,
    /// Keys whose partition changed.
    pub keys_moved: u64,
    /// Of those, keys that changed leader (a move between two partitions of one leader only
    /// rewrites the directory).
    pub keys_changed_leader: u64,
    /// Entries in the key directory after the round.
    pub directory_len: usize,
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AffinityResult {
    /// The run's configuration (its seed included).
    pub config: AffinityConfig,
    /// Nodes leading at least one of the workload's keys before the run.
    pub sites: usize,
    /// When the planner was turned on, s since the run start (`None`: control run).
    pub planner_start_s: Option<f64>,
    /// When the *after* phase began, s.
    pub after_start_s: f64,
    /// Per time bin.
    pub bins: Vec<Bin>,
    /// Per phase, in order.
    pub phases: Vec<PhaseReport>,
    /// Planning rounds that moved keys.
    pub rounds: Vec<Round>,
    /// Groups whose keys all had one leader when the planner started.
    pub colocated_before: usize,
    /// And at the end.
    pub colocated_after: usize,
    /// Keys in the directory at the end.
    pub directory_len: usize,
}

impl AffinityResult {
    /// The report of `phase`.
    pub fn phase(&self, phase: Phase) -> Option<&PhaseReport> {
        self.phases.iter().find(|p| p.phase == phase)
    }

    /// `1 − after / before` of the distributed fraction (NaN if a phase is missing).
    pub fn distributed_reduction(&self) -> f64 {
        match (self.phase(Phase::Before), self.phase(Phase::After)) {
            (Some(b), Some(a)) => 1.0 - a.distributed_fraction / b.distributed_fraction,
            _ => f64::NAN,
        }
    }

    /// Keys moved over the whole run.
    pub fn keys_moved(&self) -> u64 {
        self.bins.iter().map(|b| b.keys_moved).sum()
    }
}

/// Key `i` of the workload (its name says nothing of its group).
pub fn key(i: usize) -> Bytes {
    Bytes::from(format!("{AFFINITY_BUCKET}:rec{i}"))
}

/// The groups: `groups` lists of `group_size` keys, drawn by a seeded permutation of the
/// key numbers so neighbouring names fall in different groups.
pub fn groups(cfg: &AffinityConfig) -> Vec<Vec<Bytes>> {
    let n = cfg.groups * cfg.group_size;
    let mut ids: Vec<usize> = (0..n).collect();
    ids.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed ^ 0xaff1_0000));
    ids.chunks(cfg.group_size)
        .map(|c| c.iter().map(|&i| key(i)).collect())
        .collect()
}

/// What the clients record per bin.
#[derive(Debug)]
struct BinTally {
    commits: u64,
    distributed: u64,
    aborts: BTreeMap<String, u64>,
    latency: Histogram<u64>,
}

impl Default for BinTally {
    fn default() -> Self {
        BinTally {
            commits: 0,
            distributed: 0,
            aborts: BTreeMap::new(),
            latency: new_histogram(),
        }
    }
}

/// What the sampler records per bin.
#[derive(Debug, Clone, Default)]
struct BinSample {
    stats: TxnStats,
    keys_moved: u64,
    directory_len: usize,
}

fn ms_at(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return f64::NAN;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

/// One transaction: read every key, write every key.
async fn transaction(node: &EventualNode, keys: &[Bytes], value: &Bytes) -> Result<(), TxnError> {
    let mut t = node.begin(TxnOptions::default());
    t.read(keys).await?;
    for k in keys {
        t.write(k.clone(), Some(value.clone()))?;
    }
    t.commit().await.map(|_| ())
}

/// A client's next transaction's keys.
fn pick(cfg: &AffinityConfig, groups: &[Vec<Bytes>], rng: &mut ChaCha8Rng) -> Vec<Bytes> {
    let a = rng.random_range(0..groups.len());
    if cfg.cross_group > 0.0 && rng.random_bool(cfg.cross_group) {
        let mut b = rng.random_range(0..groups.len() - 1);
        if b >= a {
            b += 1;
        }
        let half = cfg.group_size / 2;
        let mut ka = groups[a].clone();
        let mut kb = groups[b].clone();
        ka.shuffle(rng);
        kb.shuffle(rng);
        ka.truncate(cfg.group_size - half);
        ka.extend(kb.into_iter().take(half));
        ka
    } else {
        groups[a].clone()
    }
}

/// The partition and leader of every workload key in `node`'s view.
fn routing(node: &EventualNode, keys: &[Bytes]) -> Vec<(PartitionId, NodeId)> {
    keys.iter().map(|k| node.txn_leader(k)).collect()
}

fn colocated(node: &EventualNode, groups: &[Vec<Bytes>]) -> usize {
    groups
        .iter()
        .filter(|g| {
            g.iter()
                .map(|k| node.txn_leader(k).1)
                .collect::<BTreeSet<_>>()
                .len()
                == 1
        })
        .count()
}

struct Sim {
    cluster: SimCluster,
    nodes: BTreeMap<NodeId, EventualNode>,
}

async fn start_cluster(cfg: &AffinityConfig) -> Result<Sim, BenchError> {
    let mut bucket = BucketProps::transactional(Protocol::ClockSi.props(0, None));
    let n = cfg.leaders.min(3);
    bucket.props.n_val = Some(n);
    let cluster = SimCluster::start(SimConfig {
        seed: cfg.seed,
        dcs: 1,
        nodes_per_dc: cfg.leaders,
        q: cfg.q,
        n,
        lan_latency: LAN_ONE_WAY,
        lan_jitter: 0.0,
        // Not `Never`: a simulated disk keeps every write since its last sync in a journal
        // (after-images of whole version chains), which no crash here ever needs, and which
        // grew past 24 GB over the full run. A sync a virtual second bounds it.
        sync: SyncPolicy::EverySec,
        buckets: [(AFFINITY_BUCKET.to_owned(), bucket)].into(),
        ..SimConfig::default()
    });
    // Let the failure detectors hear from everyone before the load starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut nodes = BTreeMap::new();
    {
        let live = cluster.live();
        let live = live.read();
        for (id, _) in cluster.machines() {
            cluster.set_clock_offset(id, 0);
            if let Some(n) = live.get(&id) {
                nodes.insert(id, n.clone());
            }
        }
    }
    if nodes.len() != cfg.leaders as usize {
        cluster.shutdown();
        return Err(BenchError::Target {
            reason: format!("{} of {} simulated nodes came up", nodes.len(), cfg.leaders),
        });
    }
    Ok(Sim { cluster, nodes })
}

/// The sampler's view of moves: the claimant's routing of every key, and the rounds.
struct MoveWatch {
    keys: Vec<Bytes>,
    last: Vec<(PartitionId, NodeId)>,
    rounds: Vec<Round>,
    last_change_ms: Option<u64>,
    round_gap_ms: u64,
}

impl MoveWatch {
    /// Samples `claimant`'s routing at `ms`: keys moved since the last sample.
    fn sample(&mut self, claimant: &EventualNode, ms: u64) -> u64 {
        let now = routing(claimant, &self.keys);
        let mut moved = 0;
        let mut changed_leader = 0;
        for (a, b) in self.last.iter().zip(&now) {
            if a.0 != b.0 {
                moved += 1;
                if a.1 != b.1 {
                    changed_leader += 1;
                }
            }
        }
        self.last = now;
        if moved > 0 {
            let dir = claimant.meta().key_directory.len();
            let new_round = self
                .last_change_ms
                .is_none_or(|t| ms.saturating_sub(t) > self.round_gap_ms);
            if new_round {
                self.rounds.push(Round {
                    index: self.rounds.len() + 1,
                    at_s: ms as f64 / 1e3,
                    keys_moved: 0,
                    keys_changed_leader: 0,
                    directory_len: dir,
                });
            }
            if let Some(r) = self.rounds.last_mut() {
                r.keys_moved += moved;
                r.keys_changed_leader += changed_leader;
                r.directory_len = dir;
            }
            self.last_change_ms = Some(ms);
        }
        moved
    }
}

async fn run_async(cfg: AffinityConfig) -> Result<AffinityResult, BenchError> {
    let sim = start_cluster(&cfg).await?;
    let r = drive(&cfg, &sim).await;
    sim.cluster.shutdown();
    r
}

async fn drive(cfg: &AffinityConfig, sim: &Sim) -> Result<AffinityResult, BenchError> {
    let all: Vec<EventualNode> = sim.nodes.values().cloned().collect();
    let Some(first) = all.first().cloned() else {
        return Err(BenchError::Target {
            reason: "no node".into(),
        });
    };
    let claimant_id = first.meta().claimant();
    let claimant = sim.nodes.get(&claimant_id).cloned().unwrap_or(first);
    let groups = Arc::new(groups(cfg));
    let keys: Vec<Bytes> = groups.iter().flatten().cloned().collect();
    let sites = routing(&claimant, &keys)
        .into_iter()
        .map(|(_, l)| l)
        .collect::<BTreeSet<_>>()
        .len();
    let nbins = cfg.bins();
    let bin = Duration::from_millis(cfg.bin_ms);
    let t0 = Instant::now();
    let end = t0 + Duration::from_millis(cfg.total_ms());
    let planner_at = t0 + Duration::from_millis(cfg.warmup_ms + cfg.before_ms);
    let tallies: Arc<Mutex<Vec<BinTally>>> = Arc::new(Mutex::new(
        (0..nbins).map(|_| BinTally::default()).collect(),
    ));
    let cpus = cfg.service.map(|m| Arc::new(Cpus::new(m, t0, &all)));
    let value = Bytes::from(vec![b'v'; cfg.value_size]);
    let hop = LAN_ONE_WAY * 2;
    let mut tasks = Vec::with_capacity(cfg.clients);
    for i in 0..cfg.clients {
        let cfg = cfg.clone();
        let groups = groups.clone();
        let tallies = tallies.clone();
        let cpus = cpus.clone();
        let value = value.clone();
        let contact = all[i % all.len()].clone();
        let nodes = sim.nodes.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng =
                ChaCha8Rng::seed_from_u64(cfg.seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9));
            loop {
                let start = Instant::now();
                if start >= end {
                    return;
                }
                let keys = pick(&cfg, &groups, &mut rng);
                let route = routing(&contact, &keys);
                let leaders: BTreeSet<NodeId> = route.iter().map(|&(_, l)| l).collect();
                let origin_id = route.first().map_or(contact.id(), |&(_, l)| l);
                let origin = nodes.get(&origin_id).unwrap_or(&contact);
                tokio::time::sleep(hop).await;
                if let Some(c) = &cpus {
                    let m = c.model();
                    c.charge(origin_id, m.per_message_us).await;
                    let commit_msgs = if leaders.len() == 1 { 1.0 } else { 2.0 };
                    let per_leader = m.per_message_us * (1.0 + commit_msgs) + m.update_extra_us;
                    join_all(leaders.iter().map(|&l| c.charge(l, per_leader))).await;
                }
                let r = transaction(origin, &keys, &value).await;
                let done = Instant::now();
                let idx = (done.duration_since(t0).as_millis() / u128::from(cfg.bin_ms)) as usize;
                let mut t = tallies.lock();
                let Some(b) = t.get_mut(idx) else { continue };
                match r {
                    Ok(()) => {
                        b.commits += 1;
                        if leaders.len() > 1 {
                            b.distributed += 1;
                        }
                        let us = done.duration_since(start).as_micros() as u64;
                        let _ = b.latency.record(us.max(1));
                    }
                    Err(e) => *b.aborts.entry(error_code(&e)).or_default() += 1,
                }
            }
        }));
    }
    // The sampler: node counters at bin edges, the claimant's routing every SAMPLE_MS, the
    // planner switched on at its time.
    let mut watch = MoveWatch {
        last: routing(&claimant, &keys),
        keys,
        rounds: Vec::new(),
        last_change_ms: None,
        round_gap_ms: cfg
            .planner
            .map_or(u64::MAX, |p| (p.plan_interval_ms / 2).max(SAMPLE_MS)),
    };
    let mut samples: Vec<BinSample> = vec![BinSample::default(); nbins];
    let mut edge_stats = sum_stats(&all);
    let mut colocated_before = colocated(&claimant, &groups);
    let mut planner_on = false;
    let ticks_per_bin = cfg.bin_ms / SAMPLE_MS;
    for tick in 1..=(nbins as u64 * ticks_per_bin) {
        let at = t0 + Duration::from_millis(tick * SAMPLE_MS);
        if !planner_on
            && let Some(p) = cfg.planner
            && at >= planner_at
        {
            tokio::time::sleep_until(planner_at).await;
            colocated_before = colocated(&claimant, &groups);
            for n in &all {
                n.set_txn_planner(Some(p.config()));
            }
            planner_on = true;
        }
        tokio::time::sleep_until(at).await;
        let b = ((tick - 1) / ticks_per_bin) as usize;
        let moved = watch.sample(&claimant, tick * SAMPLE_MS);
        if let Some(s) = samples.get_mut(b) {
            s.keys_moved += moved;
            if tick.is_multiple_of(ticks_per_bin) {
                let now = sum_stats(&all);
                s.stats = diff_stats(edge_stats, now);
                edge_stats = now;
                s.directory_len = claimant.meta().key_directory.len();
            }
        }
    }
    for t in tasks {
        t.await.map_err(|e| BenchError::Target {
            reason: format!("a client task failed: {e}"),
        })?;
    }
    if cfg.planner.is_none() {
        colocated_before = colocated(&claimant, &groups);
    }
    let colocated_after = colocated(&claimant, &groups);
    let tallies = std::mem::take(&mut *tallies.lock());
    let bins: Vec<Bin> = tallies
        .iter()
        .zip(&samples)
        .enumerate()
        .map(|(i, (t, s))| Bin {
            start_s: (i as u64 * cfg.bin_ms) as f64 / 1e3,
            phase: cfg.phase_at(i as u64 * cfg.bin_ms),
            commits: t.commits,
            txn_per_s: t.commits as f64 / bin.as_secs_f64(),
            distributed: t.distributed,
            node_commits: s.stats.commits,
            two_phase_commits: s.stats.two_phase_commits,
            aborts: t.aborts.clone(),
            p50_ms: ms_at(&t.latency, 0.5),
            p99_ms: ms_at(&t.latency, 0.99),
            keys_moved: s.keys_moved,
            directory_len: s.directory_len,
        })
        .collect();
    let phases = Phase::ALL
        .iter()
        .filter_map(|&phase| phase_report(cfg, phase, &bins, &tallies))
        .collect();
    Ok(AffinityResult {
        config: cfg.clone(),
        sites,
        planner_start_s: cfg
            .planner
            .map(|_| (cfg.warmup_ms + cfg.before_ms) as f64 / 1e3),
        after_start_s: (cfg.warmup_ms + cfg.before_ms + cfg.planning_ms) as f64 / 1e3,
        bins,
        phases,
        rounds: watch.rounds,
        colocated_before,
        colocated_after,
        directory_len: claimant.meta().key_directory.len(),
    })
}

fn phase_report(
    cfg: &AffinityConfig,
    phase: Phase,
    bins: &[Bin],
    tallies: &[BinTally],
) -> Option<PhaseReport> {
    let idx: Vec<usize> = (0..bins.len())
        .filter(|&i| bins[i].phase == phase)
        .collect();
    let first = *idx.first()?;
    let seconds = (idx.len() as u64 * cfg.bin_ms) as f64 / 1e3;
    let mut h = new_histogram();
    let mut aborts: BTreeMap<String, u64> = BTreeMap::new();
    let (mut commits, mut distributed, mut node_commits, mut two_phase, mut moved) =
        (0, 0, 0, 0, 0);
    for &i in &idx {
        let _ = h.add(&tallies[i].latency);
        let b = &bins[i];
        commits += b.commits;
        distributed += b.distributed;
        node_commits += b.node_commits;
        two_phase += b.two_phase_commits;
        moved += b.keys_moved;
        for (k, v) in &b.aborts {
            *aborts.entry(k.clone()).or_default() += v;
        }
    }
    Some(PhaseReport {
        phase,
        from_s: bins[first].start_s,
        seconds,
        commits,
        txn_per_s: commits as f64 / seconds,
        distributed,
        distributed_fraction: distributed as f64 / commits as f64,
        node_commits,
        two_phase_commits: two_phase,
        two_phase_fraction: two_phase as f64 / node_commits as f64,
        p50_ms: ms_at(&h, 0.5),
        p99_ms: ms_at(&h, 0.99),
        aborts,
        keys_moved: moved,
    })
}

/// Runs the study on its own virtual-time runtime.
pub fn run(cfg: &AffinityConfig) -> Result<AffinityResult, BenchError> {
    cfg.validate()?;
    virtual_runtime()?.block_on(run_async(cfg.clone()))
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1} %", 100.0 * x)
    } else {
        "–".into()
    }
}

fn aborts_cell(a: &BTreeMap<String, u64>) -> String {
    if a.is_empty() {
        return "0".into();
    }
    a.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The markdown summary: setup, the per-phase table, rounds, and the target's check.
pub fn summary_markdown(r: &AffinityResult) -> String {
    let c = &r.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Cross-node planner on hidden affinity groups (spec `repartitioning.md` §6)\n"
    );
    let _ = writeln!(
        s,
        "Seed {}. 1 DC, {} nodes ({} leading the workload's keys), Q = {}, LAN {} ms one way, Clock-SI. \
         {} groups of {} keys, {:.0} % cross-group transactions; each transaction reads then writes its keys. \
         {} closed-loop clients, each transaction sent to the leader of its first key. Virtual time.\n",
        c.seed,
        c.leaders,
        r.sites,
        c.q,
        LAN_ONE_WAY.as_millis(),
        c.groups,
        c.group_size,
        100.0 * c.cross_group,
        c.clients
    );
    match &c.service {
        Some(m) => {
            let _ = writeln!(
                s,
                "Service model (driver-side): {} µs per message at each node, {} µs more to install a leader's writes; \
                 a leader of a 1-leader transaction handles 2 messages, of a 2PC one 3. \
                 Throughputs are those of this model ({}× slower than the Clock-SI paper's scale), not of this machine.\n",
                m.per_message_us, m.update_extra_us, THROUGHPUT_SCALE
            );
        }
        None => {
            let _ = writeln!(s, "No service model: latency-bound only.\n");
        }
    }
    match (&c.planner, r.planner_start_s) {
        (Some(p), Some(at)) => {
            let _ = writeln!(
                s,
                "Planner on at {at:.1} s: plan interval {} s, window W = {} transactions, min_gain {}, \
                 at most {} moves per round, min_residence {} s. *After* starts at {:.1} s.\n",
                p.plan_interval_ms as f64 / 1e3,
                p.window,
                p.min_gain,
                p.max_moves_per_round,
                p.min_residence_ms as f64 / 1e3,
                r.after_start_s
            );
        }
        _ => {
            let _ = writeln!(s, "Control run: the planner is never turned on.\n");
        }
    }
    let _ = writeln!(
        s,
        "| phase | from s | s | commits | txn/s | distributed | 2PC commits (nodes) | 2PC fraction | p50 ms | p99 ms | aborts | keys moved |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
    );
    for p in &r.phases {
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.1} | {} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {} | {} |",
            p.phase.as_str(),
            p.from_s,
            p.seconds,
            p.commits,
            p.txn_per_s,
            pct(p.distributed_fraction),
            p.two_phase_commits,
            pct(p.two_phase_fraction),
            p.p50_ms,
            p.p99_ms,
            aborts_cell(&p.aborts),
            p.keys_moved
        );
    }
    let _ = writeln!(s, "\n## Planning rounds (keys moved per round)\n");
    if r.rounds.is_empty() {
        let _ = writeln!(s, "No key moved.");
    } else {
        let _ = writeln!(
            s,
            "| round | at s | keys moved | of which changed leader | directory entries after |"
        );
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|");
        for rd in &r.rounds {
            let _ = writeln!(
                s,
                "| {} | {:.1} | {} | {} | {} |",
                rd.index, rd.at_s, rd.keys_moved, rd.keys_changed_leader, rd.directory_len
            );
        }
    }
    let _ = writeln!(
        s,
        "\nGroups on one leader: {} of {} when the planner started, {} at the end; {} keys in the directory.",
        r.colocated_before, c.groups, r.colocated_after, r.directory_len
    );
    if let (Some(b), Some(a)) = (r.phase(Phase::Before), r.phase(Phase::After)) {
        let red = r.distributed_reduction();
        let _ = writeln!(
            s,
            "\n## Target (BENCHMARKS): distributed fraction −≥ 80 %, throughput up\n\n\
             Distributed fraction {} → {} ({} reduction: {}); 2PC commits {} → {} per phase; \
             throughput {:.0} → {:.0} txn/s (×{:.2}: {}); p99 {:.1} → {:.1} ms.",
            pct(b.distributed_fraction),
            pct(a.distributed_fraction),
            pct(red),
            if red >= 0.8 { "met" } else { "NOT met" },
            b.two_phase_commits,
            a.two_phase_commits,
            b.txn_per_s,
            a.txn_per_s,
            a.txn_per_s / b.txn_per_s,
            if a.txn_per_s > b.txn_per_s {
                "met"
            } else {
                "NOT met"
            },
            b.p99_ms,
            a.p99_ms
        );
    }
    s
}

/// `bins.csv`: the time series.
pub fn bins_csv(r: &AffinityResult) -> String {
    let mut s = String::from(
        "start_s,phase,commits,txn_per_s,distributed,distributed_fraction,node_commits,two_phase_commits,two_phase_fraction,aborts,key_moving_aborts,p50_ms,p99_ms,keys_moved,directory_len\n",
    );
    for b in &r.bins {
        let _ = writeln!(
            s,
            "{:.3},{},{},{:.1},{},{:.4},{},{},{:.4},{},{},{:.3},{:.3},{},{}",
            b.start_s,
            b.phase.as_str(),
            b.commits,
            b.txn_per_s,
            b.distributed,
            b.distributed_fraction(),
            b.node_commits,
            b.two_phase_commits,
            b.two_phase_fraction(),
            b.aborts.values().sum::<u64>(),
            b.aborts.get("key_moving").copied().unwrap_or(0),
            b.p50_ms,
            b.p99_ms,
            b.keys_moved,
            b.directory_len
        );
    }
    s
}

/// `phases.csv`: one line per phase.
pub fn phases_csv(r: &AffinityResult) -> String {
    let mut s = String::from(
        "phase,from_s,seconds,commits,txn_per_s,distributed,distributed_fraction,node_commits,two_phase_commits,two_phase_fraction,p50_ms,p99_ms,aborts,keys_moved\n",
    );
    for p in &r.phases {
        let _ = writeln!(
            s,
            "{},{:.3},{:.3},{},{:.1},{},{:.4},{},{},{:.4},{:.3},{:.3},{},{}",
            p.phase.as_str(),
            p.from_s,
            p.seconds,
            p.commits,
            p.txn_per_s,
            p.distributed,
            p.distributed_fraction,
            p.node_commits,
            p.two_phase_commits,
            p.two_phase_fraction,
            p.p50_ms,
            p.p99_ms,
            p.aborts.values().sum::<u64>(),
            p.keys_moved
        );
    }
    s
}

/// `rounds.csv`: keys moved per planning round.
pub fn rounds_csv(r: &AffinityResult) -> String {
    let mut s = String::from("round,at_s,keys_moved,keys_changed_leader,directory_len\n");
    for rd in &r.rounds {
        let _ = writeln!(
            s,
            "{},{:.3},{},{},{}",
            rd.index, rd.at_s, rd.keys_moved, rd.keys_changed_leader, rd.directory_len
        );
    }
    s
}

/// Writes `result.json`, `summary.md`, `bins.csv`, `phases.csv`, `rounds.csv` and the plots
/// `throughput_over_time` and `distributed_over_time` (PNG + SVG, the planner's start and
/// the *after* phase marked) into `out`; returns the summary's path.
pub fn write_results(r: &AffinityResult, out: &Path) -> Result<PathBuf, BenchError> {
    let json = serde_json::to_string_pretty(r).map_err(|e| BenchError::Io {
        path: out.join("result.json").display().to_string(),
        reason: format!("encoding the result: {e}"),
    })?;
    write_file(&out.join("result.json"), json.as_bytes())?;
    write_file(&out.join("bins.csv"), bins_csv(r).as_bytes())?;
    write_file(&out.join("phases.csv"), phases_csv(r).as_bytes())?;
    write_file(&out.join("rounds.csv"), rounds_csv(r).as_bytes())?;
    let summary = out.join("summary.md");
    write_file(&summary, summary_markdown(r).as_bytes())?;
    let half = r.config.bin_ms as f64 / 2e3;
    let mut markers: Vec<f64> = r.planner_start_s.into_iter().collect();
    markers.push(r.after_start_s);
    let series = |label: &str, f: &dyn Fn(&Bin) -> f64| XySeries {
        label: label.to_owned(),
        points: r
            .bins
            .iter()
            .filter(|b| b.phase != Phase::Warmup)
            .map(|b| (b.start_s + half, f(b)))
            .collect(),
    };
    xy_lines(
        &out.join("throughput_over_time"),
        &XyAxes {
            title: "Committed transactions/s (markers: planner on, after phase)".into(),
            x_desc: "virtual time, s".into(),
            y_desc: "txn/s".into(),
            log_y: false,
            markers: markers.clone(),
        },
        &[series("committed txn/s", &|b| b.txn_per_s)],
    )?;
    xy_lines(
        &out.join("distributed_over_time"),
        &XyAxes {
            title: "Distributed transactions and keys moved (markers: planner on, after phase)"
                .into(),
            x_desc: "virtual time, s".into(),
            y_desc: "% of commits / keys".into(),
            log_y: false,
            markers,
        },
        &[
            series("distributed, % of commits", &|b| {
                100.0 * b.distributed_fraction()
            }),
            series("2PC, % of node commits", &|b| {
                100.0 * b.two_phase_fraction()
            }),
            series("keys moved in the bin", &|b| b.keys_moved as f64),
        ],
    )?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_partition_the_keys() {
        let cfg = AffinityConfig::quick(3);
        let g = groups(&cfg);
        assert_eq!(g.len(), cfg.groups);
        let all: BTreeSet<Bytes> = g.iter().flatten().cloned().collect();
        assert_eq!(all.len(), cfg.groups * cfg.group_size);
        assert!(g.iter().all(|k| k.len() == cfg.group_size));
        assert_eq!(groups(&cfg), g, "deterministic in the seed");
    }

    #[test]
    fn cross_group_transactions_take_half_of_each() {
        let mut cfg = AffinityConfig::quick(1);
        cfg.cross_group = 1.0;
        let g = groups(&cfg);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..50 {
            let keys = pick(&cfg, &g, &mut rng);
            assert_eq!(keys.len(), cfg.group_size);
            let touched = g
                .iter()
                .filter(|grp| keys.iter().any(|k| grp.contains(k)))
                .count();
            assert_eq!(touched, 2);
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        let ok = AffinityConfig::quick(1);
        assert!(ok.validate().is_ok());
        assert!(AffinityConfig::full(1).validate().is_ok());
        for f in [
            (|c: &mut AffinityConfig| c.leaders = 1) as fn(&mut AffinityConfig),
            |c| c.groups = 1,
            |c| c.cross_group = 1.5,
            |c| c.clients = 0,
            |c| c.bin_ms = 150,
            |c| c.before_ms = 700,
            |c| c.after_ms = 0,
        ] {
            let mut c = ok.clone();
            f(&mut c);
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
