//! The replica-choice study (`experiments/replica-choice/`): Gillet, Hanusse & Lalanne,
//! ALGOTEL 2017 (spec `load-balancing.md` §5, "Numbers to reproduce"), run on the real node
//! code (the balance protocol of `meridian-replication`) in the simulator's virtual time,
//! side by side with the paper's figures; plus C3 against the dynamic snitch with one slow
//! node (NSDI'15).
//!
//! | part | cluster | load | what |
//! |---|---|---|---|
//! | dynamic scenario (Fig. 1–3) | 1 DC × 32 nodes, f = 2, 256 small objects, `fixed:30` service, 1 read worker | open-loop Poisson at λ ∈ {64, 128, 192, 256, 512}, phases U, Z, U, Z, U (Zipf s = 2, ranks permuted per Zipf phase) | latency and throughput over time, mean / p50 / p99 / p99.9, copies' time to usable, duplicates |
//! | baselines | same | λ = 256 | least_outstanding, power_of_d, c3, round_robin with and without copies |
//! | capacity | same | round_robin, uniform keys, λ up to 2000 | served throughput against the ideal 32 / 30 ms = 1067 req/s |
//! | f sweep | 1 DC × 32 nodes, f ∈ {2, 4, 8, 16} | a batch of requests (adversarial: one ring partition's objects; few popular: Zipf s = 1) | completion time of the batch |
//! | heterogeneous | 1 DC × 32 nodes, f = 3, `exp:30`, one node `exp:90` | uniform keys, open loop | c3 against dynamic_snitch: p50 / p99 / p99.9 / mean / throughput |
//! | sensitivity | as the dynamic scenario and the f sweep, with `exp:30` service | λ = 256; batches | what a variable service time changes for the deferred strategies |
//!
//! [`StudyOptions::reduced`] (the default) runs 80 000 requests per dynamic run, a fifth of
//! the paper's; [`StudyOptions::full`] the paper's 400 000.
//!
//! Every read is an eventual GET with R = 1, `read_fanout = quorum`, PR = 0 and
//! `notfound_ok`, so it goes through the balance protocol's one-replica path
//! (`Node::read_one`): the bucket's `replica_selection` picks the replica (immediate
//! strategies) or enqueues the read at every candidate (Naive, AVR), and `extra_copies`
//! turns the DC root's hot-key copies on. Hedging is off (`hedge_ms` of ten days) and the
//! timeout is ten days, so a read of a saturated run waits as long as its queue takes.
//!
//! Latency is measured from a request's **intended** arrival (open loop, no coordinated
//! omission) to the GET's return. Everything is seeded: the workload of a λ is the same for
//! every strategy (common random numbers), and the same seed gives the same numbers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use meridian_cluster::{Quorum, ReadFanout};
use meridian_core::NodeId;
use meridian_replication::{
    BucketProps, DeferredClaim, EventualNode, GetOptions, PutOptions, ServiceModel, Strategy,
};
use meridian_sim::SyncPolicy;
use meridian_sim::cluster::{SimCluster, SimConfig};
use parking_lot::Mutex;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::BenchError;
use crate::cluster::virtual_runtime;

mod files;
mod report;
mod study;

pub use files::{copies_csv, runs_csv, timeseries_csv, write_results};
pub use report::{PAPER_FIG3, summary_markdown};
use report::{copies_word, find};
use study::dist_name;
pub use study::{
    BASELINES, HETERO_STRATEGIES, PAPER_STRATEGIES, SWEEP_STRATEGIES, StudyOptions, StudyResults,
    run_study, study_scenarios,
};

/// Nodes of the study's cluster (one DC).
pub const NODES: u32 = 32;
/// Objects (the study's m).
pub const OBJECTS: usize = 256;
/// The study's service time per read, µs.
pub const SERVICE_US: u64 = 30_000;
/// The bucket every object lives in.
pub const BUCKET: &str = "rc";
/// The study's request count.
pub const PAPER_REQUESTS: usize = 400_000;
/// The default (reduced) request count of the dynamic scenario: a fifth of the paper's
/// (see the README).
pub const DEFAULT_REQUESTS: usize = 80_000;
/// The study's injection rates, req/s.
pub const LAMBDAS: [f64; 5] = [64.0, 128.0, 192.0, 256.0, 512.0];
/// The rate of Fig. 2, the baselines and the headline table.
pub const LAMBDA_MAIN: f64 = 256.0;
/// Replicas per object (the study's f).
pub const F: u32 = 2;
/// The intra-DC one-way delay: tokio's virtual timers resolve 1 ms, so the LAN is 1 ms one
/// way (2 ms RTT), what virtual time represents exactly.
pub const LAN_ONE_WAY: Duration = Duration::from_millis(1);
/// Requests of an f-sweep batch (100 per node: an ideal completion time of 3 s).
pub const BATCH_REQUESTS: usize = 3_200;
/// Replication factors of the f sweep.
pub const F_SWEEP: [u32; 4] = [2, 4, 8, 16];
/// The heterogeneous run: the slow node and its slowdown.
pub const SLOW_NODE: NodeId = NodeId(7);
/// How many times slower [`SLOW_NODE`] serves in the heterogeneous run.
pub const SLOW_FACTOR: u32 = 3;
/// Replicas per object in the heterogeneous run (C3's evaluation used RF = 3).
pub const HETERO_F: u32 = 3;
/// Offered load of the heterogeneous run, req/s (≈ 50 % of the healthy capacity).
pub const HETERO_LAMBDA: f64 = 512.0;
/// The capacity check's rates, req/s.
pub const CAPACITY_LAMBDAS: [f64; 3] = [533.0, 800.0, 2_000.0];
/// Ten days, in ms: the reads' timeout and hedge delay (neither must ever fire).
const NEVER_MS: u64 = 10 * 24 * 3_600 * 1_000;
/// Longest latency the histograms hold, µs (a day).
const MAX_LATENCY_US: u64 = 24 * 3_600 * 1_000_000;
/// How often the monitor looks at the extra-copy maps.
const MONITOR_EVERY: Duration = Duration::from_millis(100);

/// The key popularity of one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every object equally likely.
    Uniform,
    /// Zipf with exponent `s` over ranks, ranks mapped to objects by a seeded permutation
    /// redrawn at every such phase.
    Zipf(f64),
    /// Adversarial: only the objects of the ring partition holding the most objects (so all
    /// their replicas are the same f nodes, whatever f).
    Partition,
}

impl KeyDist {
    /// Short name: `U`, `Z2`, `adv`.
    pub fn short(self) -> String {
        match self {
            KeyDist::Uniform => "U".into(),
            KeyDist::Zipf(s) => format!("Z{s}"),
            KeyDist::Partition => "adv".into(),
        }
    }
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Open loop, Poisson at `lambda` req/s.
    Poisson {
        /// Requests per second.
        lambda: f64,
    },
    /// A batch: every request submitted within the first `spread_ms` (evenly), completion
    /// time measured from 0.
    Batch {
        /// Submission window, ms.
        spread_ms: u64,
    },
}

/// One run: a fresh cluster, its objects loaded, then the requests.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Row label.
    pub label: String,
    /// Nodes of the one DC.
    pub nodes: u32,
    /// Replicas per object (`n_val`).
    pub f: u32,
    /// Objects.
    pub objects: usize,
    /// The bucket's `replica_selection`.
    pub strategy: Strategy,
    /// The bucket's `extra_copies`.
    pub extra_copies: bool,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Requests in total.
    pub requests: usize,
    /// Key popularity per phase; the requests are split evenly over the phases.
    pub phases: Vec<KeyDist>,
    /// Every node's service model.
    pub service: ServiceModel,
    /// One node's own service model (the heterogeneous run).
    pub slow: Option<(NodeId, ServiceModel)>,
    /// Seed of the cluster (nodes, network).
    pub seed: u64,
    /// Seed of the workload (arrivals, keys, coordinators).
    pub workload_seed: u64,
    /// Give up waiting for unfinished reads this long after the last arrival.
    pub drain_cap: Duration,
    /// Jitter of the intra-DC links (fraction of [`LAN_ONE_WAY`]; the study's runs: 0).
    pub lan_jitter: f64,
    /// How replicas claim deferred reads (Meridian's default `token`; the study's `cancel`).
    pub claim: DeferredClaim,
}

impl Scenario {
    /// The study's dynamic scenario at `lambda`: 32 nodes, f = 2, U Z U Z U.
    pub fn dynamic(
        strategy: Strategy,
        extra_copies: bool,
        lambda: f64,
        requests: usize,
        seed: u64,
    ) -> Scenario {
        Scenario {
            label: variant_label(strategy, extra_copies),
            nodes: NODES,
            f: F,
            objects: OBJECTS,
            strategy,
            extra_copies,
            arrivals: Arrivals::Poisson { lambda },
            requests,
            phases: vec![
                KeyDist::Uniform,
                KeyDist::Zipf(2.0),
                KeyDist::Uniform,
                KeyDist::Zipf(2.0),
                KeyDist::Uniform,
            ],
            service: ServiceModel::Fixed { us: SERVICE_US },
            slow: None,
            seed,
            workload_seed: seed ^ (lambda as u64).wrapping_mul(0x9e37_79b9),
            drain_cap: Duration::from_secs(4 * 3_600),
            lan_jitter: 0.0,
            claim: DeferredClaim::Token,
        }
    }

    /// The offered rate (batches: `None`).
    pub fn lambda(&self) -> Option<f64> {
        match self.arrivals {
            Arrivals::Poisson { lambda } => Some(lambda),
            Arrivals::Batch { .. } => None,
        }
    }
}

/// The paper's name for a strategy and copy setting.
pub fn variant_label(strategy: Strategy, copies: bool) -> String {
    let name = match strategy {
        Strategy::DynamicSnitch => "Cassandra (dynamic_snitch)".to_owned(),
        Strategy::Avr => "AVR".to_owned(),
        Strategy::Naive => "Naive".to_owned(),
        s => s.name().to_owned(),
    };
    format!("{name}, {}", if copies { "copies" } else { "no copies" })
}

/// When the copies of one Zipf phase's most popular object became usable.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyTiming {
    /// The phase (0-based).
    pub phase: usize,
    /// The phase's most popular object.
    pub top: usize,
    /// Seconds from the phase's first request until some coordinator's map listed a copy.
    pub first_s: Option<f64>,
    /// ... until every coordinator's map listed one.
    pub all_s: Option<f64>,
    /// The most copies the maps listed for it during the phase.
    pub peak: usize,
    /// ... and seconds until 90 % of that peak was first listed.
    pub peak90_s: Option<f64>,
}

/// One second of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bin {
    /// Requests issued (intended arrival) in this second.
    pub issued: u64,
    /// Their mean latency, ms (over those that completed).
    pub mean_ms: f64,
    /// Their largest latency, ms.
    pub max_ms: f64,
    /// Requests completed in this second (throughput).
    pub completed: u64,
    /// Extra copies the root's map listed (all keys), at the last look in this second.
    pub copies: u64,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The scenario.
    pub scenario: Scenario,
    /// Latencies of the completed reads, µs.
    pub latency: Histogram<u64>,
    /// Latencies per phase, µs.
    pub phase_latency: Vec<Histogram<u64>>,
    /// Seconds (since the first arrival) at which each phase's first request arrived.
    pub phase_starts_s: Vec<f64>,
    /// When the last request arrived, s.
    pub arrivals_end_s: f64,
    /// When the last read completed, s.
    pub makespan_s: f64,
    /// Reads that returned a value.
    pub completed: u64,
    /// Reads that returned an error.
    pub failed: u64,
    /// Reads still running when the drain cap ran out.
    pub unfinished: u64,
    /// Per second.
    pub bins: Vec<Bin>,
    /// Per Zipf phase.
    pub copies: Vec<CopyTiming>,
    /// The root's copy creation times, ms (decision to usable).
    pub copy_create_ms: Vec<u64>,
    /// Deferred reads served more than once (summed over coordinators).
    pub duplicate_services: u64,
    /// Deferred reads dropped by a `Cancel` (summed over replicas).
    pub cancelled: u64,
    /// Reads served from extra copies.
    pub extra_reads: u64,
    /// Reads sent to an extra copy no longer held.
    pub extra_misses: u64,
    /// Reads refused by C3's full backlog.
    pub c3_overloads: u64,
    /// Reads the coordinators' strategies sent to each node (summed over coordinators).
    pub chosen: BTreeMap<NodeId, u64>,
}

impl RunResult {
    /// Mean latency, s.
    pub fn mean_s(&self) -> f64 {
        if self.latency.is_empty() {
            f64::NAN
        } else {
            self.latency.mean() / 1e6
        }
    }

    /// A quantile of the latency, ms.
    pub fn q_ms(&self, q: f64) -> f64 {
        q_ms(&self.latency, q)
    }

    /// Served reads per second between the first arrival and the last completion.
    pub fn throughput(&self) -> f64 {
        if self.makespan_s > 0.0 {
            self.completed as f64 / self.makespan_s
        } else {
            0.0
        }
    }

    /// Mean completions per second over the seconds `[from, to)` (1 s bins).
    pub fn completions_between(&self, from: usize, to: usize) -> f64 {
        let to = to.min(self.bins.len());
        if to <= from {
            return f64::NAN;
        }
        self.bins[from..to].iter().map(|b| b.completed).sum::<u64>() as f64 / (to - from) as f64
    }
}

fn q_ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        f64::NAN
    } else {
        h.value_at_quantile(q) as f64 / 1e3
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

fn object_key(i: usize) -> Vec<u8> {
    format!("{BUCKET}:o{i:03}").into_bytes()
}

/// The bucket of a scenario: one-replica reads through the balance protocol.
fn bucket(sc: &Scenario) -> BucketProps {
    let mut b = BucketProps::default();
    b.props.n_val = Some(sc.f);
    b.props.r = Some(Quorum::Count(1));
    b.props.pr = Some(Quorum::Count(0));
    b.props.w = Some(Quorum::All);
    b.props.notfound_ok = Some(true);
    b.props.read_fanout = Some(ReadFanout::Quorum);
    b.props.hedge_ms = Some(NEVER_MS);
    b.props.timeout_ms = Some(NEVER_MS);
    b.props.replica_selection = Some(sc.strategy);
    b.extra_copies = Some(sc.extra_copies);
    b
}

/// One request of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Req {
    at_us: u64,
    obj: u16,
    coord: u16,
}

/// A Zipf(s) sampler over ranks `0..n` (rank 0 most popular).
struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    fn new(n: usize, s: f64) -> ZipfTable {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let cdf = w
            .iter()
            .map(|x| {
                acc += x / total;
                acc
            })
            .collect();
        ZipfTable { cdf }
    }

    fn sample(&self, rng: &mut impl Rng) -> usize {
        let u: f64 = rng.random();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

/// The requests of a scenario and, per phase, its first request's index and its most
/// popular object (Zipf phases). `hot`: the adversarial phase's objects.
fn generate(sc: &Scenario, hot: &[usize]) -> (Vec<Req>, Vec<(usize, Option<usize>)>) {
    let seed = sc.workload_seed;
    let mut arrive = ChaCha8Rng::seed_from_u64(seed ^ 0xa441_7a15);
    let mut keys = ChaCha8Rng::seed_from_u64(seed ^ 0x00b1_ec75);
    let mut coords = ChaCha8Rng::seed_from_u64(seed ^ 0xc00d);
    let mut perms = ChaCha8Rng::seed_from_u64(seed ^ 0x9e7);
    let n = sc.requests;
    let phases = sc.phases.len().max(1);
    let mut reqs = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(phases);
    let mut t = 0.0f64;
    for (p, dist) in sc.phases.iter().enumerate() {
        let lo = n * p / phases;
        let hi = n * (p + 1) / phases;
        let mut perm: Vec<usize> = (0..sc.objects).collect();
        let (zipf, top) = match *dist {
            KeyDist::Zipf(s) => {
                perm.shuffle(&mut perms);
                (Some(ZipfTable::new(sc.objects, s)), Some(perm[0]))
            }
            _ => (None, None),
        };
        starts.push((lo, top));
        for i in lo..hi {
            let at_us = match sc.arrivals {
                Arrivals::Poisson { lambda } => {
                    let u: f64 = arrive.random();
                    t += -(1.0 - u).ln() / lambda;
                    (t * 1e6) as u64
                }
                Arrivals::Batch { spread_ms } => (i as u64 * spread_ms * 1_000) / n.max(1) as u64,
            };
            let obj = match (dist, &zipf) {
                (KeyDist::Zipf(_), Some(z)) => perm[z.sample(&mut keys)],
                (KeyDist::Partition, _) if !hot.is_empty() => hot[keys.random_range(0..hot.len())],
                _ => keys.random_range(0..sc.objects),
            };
            let coord = coords.random_range(0..sc.nodes as usize);
            reqs.push(Req {
                at_us,
                obj: obj as u16,
                coord: coord as u16,
            });
        }
    }
    (reqs, starts)
}

/// One look of the monitor: per tracked object, how many coordinators list a copy and the
/// most holders any lists; and the copies the root lists in total.
#[derive(Debug, Clone)]
struct Look {
    at_us: u64,
    listing: Vec<usize>,
    holders: Vec<usize>,
    total: u64,
}

/// Per request: when it completed (µs since the first arrival) and whether it succeeded.
type Completions = Arc<Mutex<Vec<Option<(u64, bool)>>>>;

fn target_err(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Target {
        reason: format!("{what}: {e}"),
    }
}

/// Runs one scenario on a fresh simulated cluster. Call on a paused-clock runtime
/// ([`virtual_runtime`]).
pub async fn run_scenario(sc: &Scenario) -> Result<RunResult, BenchError> {
    let cluster = SimCluster::start(SimConfig {
        seed: sc.seed,
        dcs: 1,
        nodes_per_dc: sc.nodes,
        q: 64,
        n: sc.f,
        lan_latency: LAN_ONE_WAY,
        lan_jitter: sc.lan_jitter,
        sync: SyncPolicy::Never,
        heartbeat: Duration::from_secs(1),
        handoff: Duration::from_secs(600),
        anti_entropy: Duration::ZERO,
        buckets: [(BUCKET.to_owned(), bucket(sc))].into(),
        service_model: sc.service,
        service_models: sc.slow.into_iter().collect(),
        read_workers: 1,
        deferred_claim: sc.claim,
        ..SimConfig::default()
    });
    let result = drive(&cluster, sc).await;
    cluster.shutdown();
    result
}

async fn drive(cluster: &SimCluster, sc: &Scenario) -> Result<RunResult, BenchError> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let nodes: Vec<EventualNode> = cluster.live().read().values().cloned().collect();
    if nodes.len() != sc.nodes as usize {
        return Err(target_err("cluster", "not every node started"));
    }
    let keys: Vec<Vec<u8>> = (0..sc.objects).map(object_key).collect();
    for (i, k) in keys.iter().enumerate() {
        nodes[i % nodes.len()]
            .put(k, Bytes::from(vec![b'v'; 100]), None, PutOptions::default())
            .await
            .map_err(|e| target_err("loading the objects", e))?;
    }
    // The adversarial objects: those of the partition holding the most (lowest id on ties).
    let hot: Vec<usize> = {
        let layout = nodes[0].layout();
        let mut by_part: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            by_part
                .entry(layout.ring().partition_of(k).0)
                .or_default()
                .push(i);
        }
        let mut best: Vec<usize> = Vec::new();
        for objs in by_part.into_values() {
            if objs.len() > best.len() {
                best = objs;
            }
        }
        best
    };
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (reqs, starts) = generate(sc, &hot);
    let n = reqs.len();
    let tracked: Vec<usize> = starts.iter().filter_map(|(_, t)| *t).collect();
    let tracked_keys: Vec<Vec<u8>> = tracked.iter().map(|&o| object_key(o)).collect();
    let t0 = Instant::now();
    // Completion time (µs since t0) and success of each request.
    let done: Completions = Arc::new(Mutex::new(vec![None; n]));
    let looks: Arc<Mutex<Vec<Look>>> = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = {
        let nodes = nodes.clone();
        let looks = looks.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(MONITOR_EVERY);
            while !stop.load(Ordering::Relaxed) {
                every.tick().await;
                let mut listing = vec![0usize; tracked_keys.len()];
                let mut holders = vec![0usize; tracked_keys.len()];
                let mut total = 0u64;
                for (ni, node) in nodes.iter().enumerate() {
                    let map = node.extra_map();
                    if ni == 0 {
                        total = map.copies.iter().map(|(_, h)| h.len() as u64).sum();
                    }
                    for (j, k) in tracked_keys.iter().enumerate() {
                        if let Some((_, h)) = map.copies.iter().find(|(mk, _)| mk == k)
                            && !h.is_empty()
                        {
                            listing[j] += 1;
                            holders[j] = holders[j].max(h.len());
                        }
                    }
                }
                looks.lock().push(Look {
                    at_us: t0.elapsed().as_micros() as u64,
                    listing,
                    holders,
                    total,
                });
            }
        })
    };
    for (i, r) in reqs.iter().enumerate() {
        tokio::time::sleep_until(t0 + Duration::from_micros(r.at_us)).await;
        let node = nodes[r.coord as usize].clone();
        let key = keys[r.obj as usize].clone();
        let done = done.clone();
        tokio::spawn(async move {
            let ok = node.get(&key, GetOptions::default()).await.is_ok();
            let at = t0.elapsed().as_micros() as u64;
            done.lock()[i] = Some((at, ok));
        });
    }
    let last_arrival = t0 + Duration::from_micros(reqs.last().map_or(0, |r| r.at_us));
    loop {
        let finished = done.lock().iter().filter(|d| d.is_some()).count();
        if finished == n || Instant::now() >= last_arrival + sc.drain_cap {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = monitor.await;

    // Counters.
    let mut res = RunResult {
        scenario: sc.clone(),
        latency: new_histogram(),
        phase_latency: vec![new_histogram(); sc.phases.len()],
        phase_starts_s: starts
            .iter()
            .map(|&(i, _)| reqs.get(i).map_or(0.0, |r| r.at_us as f64 / 1e6))
            .collect(),
        arrivals_end_s: reqs.last().map_or(0.0, |r| r.at_us as f64 / 1e6),
        makespan_s: 0.0,
        completed: 0,
        failed: 0,
        unfinished: 0,
        bins: Vec::new(),
        copies: Vec::new(),
        copy_create_ms: Vec::new(),
        duplicate_services: 0,
        cancelled: 0,
        extra_reads: 0,
        extra_misses: 0,
        c3_overloads: 0,
        chosen: BTreeMap::new(),
    };
    for node in &nodes {
        let s = node.balance_stats();
        res.duplicate_services += s.duplicate_services;
        res.cancelled += s.cancelled;
        res.extra_reads += s.extra_reads;
        res.extra_misses += s.extra_misses;
        res.c3_overloads += s.c3_overloads;
        res.copy_create_ms.extend(s.copy_create_ms);
        for p in s.peers {
            *res.chosen.entry(p.node).or_default() += p.chosen;
        }
    }
    let done = done.lock().clone();
    let phase_of = |i: usize| (i * sc.phases.len().max(1)) / n.max(1);
    let mut bins: Vec<Bin> = Vec::new();
    let mut ok_in: Vec<u64> = Vec::new();
    let grow = |bins: &mut Vec<Bin>, ok_in: &mut Vec<u64>, s: usize| {
        if bins.len() <= s {
            bins.resize(s + 1, Bin::default());
            ok_in.resize(s + 1, 0);
        }
    };
    for (i, (r, d)) in reqs.iter().zip(&done).enumerate() {
        let s = (r.at_us / 1_000_000) as usize;
        grow(&mut bins, &mut ok_in, s);
        bins[s].issued += 1;
        match *d {
            None => res.unfinished += 1,
            Some((_, false)) => res.failed += 1,
            Some((at, true)) => {
                res.completed += 1;
                let lat = at.saturating_sub(r.at_us).max(1);
                res.latency.saturating_record(lat);
                res.phase_latency[phase_of(i).min(sc.phases.len() - 1)].saturating_record(lat);
                let ms = lat as f64 / 1e3;
                ok_in[s] += 1;
                bins[s].mean_ms += ms;
                bins[s].max_ms = bins[s].max_ms.max(ms);
                res.makespan_s = res.makespan_s.max(at as f64 / 1e6);
                let c = (at / 1_000_000) as usize;
                grow(&mut bins, &mut ok_in, c);
                bins[c].completed += 1;
            }
        }
    }
    // Sums to means, over the issued requests that completed.
    for (b, &ok) in bins.iter_mut().zip(&ok_in) {
        if ok > 0 {
            b.mean_ms /= ok as f64;
        }
    }
    res.bins = bins;
    let looks = looks.lock().clone();
    for l in &looks {
        let s = (l.at_us / 1_000_000) as usize;
        if s < res.bins.len() {
            res.bins[s].copies = l.total;
        }
    }
    // Copy timings per Zipf phase.
    let mut j = 0;
    for (p, &(first, top)) in starts.iter().enumerate() {
        let Some(top) = top else { continue };
        let from = reqs.get(first).map_or(0, |r| r.at_us);
        let to = starts
            .get(p + 1)
            .and_then(|&(i, _)| reqs.get(i))
            .map_or(u64::MAX, |r| r.at_us);
        let in_phase: Vec<&Look> = looks
            .iter()
            .filter(|l| l.at_us >= from && l.at_us < to)
            .collect();
        let secs = |l: &Look| (l.at_us - from) as f64 / 1e6;
        let peak = in_phase.iter().map(|l| l.holders[j]).max().unwrap_or(0);
        res.copies.push(CopyTiming {
            phase: p,
            top,
            first_s: in_phase.iter().find(|l| l.listing[j] > 0).map(|l| secs(l)),
            all_s: in_phase
                .iter()
                .find(|l| l.listing[j] == nodes.len())
                .map(|l| secs(l)),
            peak,
            peak90_s: if peak == 0 {
                None
            } else {
                in_phase
                    .iter()
                    .find(|l| l.holders[j] * 10 >= peak * 9)
                    .map(|l| secs(l))
            },
        });
        j += 1;
    }
    Ok(res)
}

/// Runs `sc` on its own virtual-time runtime.
pub fn run_blocking(sc: &Scenario) -> Result<RunResult, BenchError> {
    virtual_runtime()?.block_on(run_scenario(sc))
}

#[cfg(test)]
mod tests;
