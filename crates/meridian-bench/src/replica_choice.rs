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
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
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
use crate::output::write_file;
use crate::plot::{CdfSeries, XyAxes, XySeries, latency_cdf, xy_lines};

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

// ---------------------------------------------------------------------------------------------
// The study.

/// How much of the study to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StudyOptions {
    /// Requests of each dynamic-scenario run (the paper: 400 000).
    pub requests: usize,
    /// Requests of each f-sweep batch.
    pub batch_requests: usize,
    /// Requests of each heterogeneous (C3) run.
    pub hetero_requests: usize,
    /// Requests of each capacity run.
    pub capacity_requests: usize,
    /// The seed of every cluster and workload.
    pub seed: u64,
    /// Runs executed at once (each on its own thread and virtual-time runtime).
    pub jobs: usize,
}

impl StudyOptions {
    /// The default, reduced study (see the README: 5× fewer requests per dynamic run).
    pub fn reduced(seed: u64) -> StudyOptions {
        StudyOptions {
            requests: DEFAULT_REQUESTS,
            batch_requests: BATCH_REQUESTS,
            hetero_requests: 40_000,
            capacity_requests: 20_000,
            seed,
            jobs: 2,
        }
    }

    /// The study's sizes (`--full`).
    pub fn full(seed: u64) -> StudyOptions {
        StudyOptions {
            requests: PAPER_REQUESTS,
            hetero_requests: 200_000,
            capacity_requests: 100_000,
            ..StudyOptions::reduced(seed)
        }
    }

    /// A smoke run (`--quick`): 4 000 requests per dynamic run, small batches.
    pub fn quick(seed: u64) -> StudyOptions {
        StudyOptions {
            requests: DEFAULT_REQUESTS / 20,
            batch_requests: BATCH_REQUESTS / 2,
            hetero_requests: 4_000,
            capacity_requests: 4_000,
            ..StudyOptions::reduced(seed)
        }
    }
}

/// The three strategies of the paper, in its order.
pub const PAPER_STRATEGIES: [Strategy; 3] =
    [Strategy::DynamicSnitch, Strategy::Avr, Strategy::Naive];
/// The extra baselines (at [`LAMBDA_MAIN`]).
pub const BASELINES: [Strategy; 4] = [
    Strategy::LeastOutstanding,
    Strategy::PowerOfD,
    Strategy::C3,
    Strategy::RoundRobin,
];
/// The f sweep's strategies.
pub const SWEEP_STRATEGIES: [Strategy; 3] =
    [Strategy::Naive, Strategy::Avr, Strategy::LeastOutstanding];
/// The heterogeneous run's strategies.
pub const HETERO_STRATEGIES: [Strategy; 4] = [
    Strategy::DynamicSnitch,
    Strategy::C3,
    Strategy::LeastOutstanding,
    Strategy::RoundRobin,
];

/// Everything the study measured.
#[derive(Debug, Clone)]
pub struct StudyResults {
    /// The options it ran with.
    pub options: StudyOptions,
    /// The paper's strategies × copies × λ.
    pub dynamic: Vec<RunResult>,
    /// The baselines at [`LAMBDA_MAIN`].
    pub baselines: Vec<RunResult>,
    /// round_robin under uniform load.
    pub capacity: Vec<RunResult>,
    /// The f sweep (batches).
    pub fsweep: Vec<RunResult>,
    /// One slow node (and the same runs without it).
    pub hetero: Vec<RunResult>,
    /// Sensitivity: the paper's strategies at [`LAMBDA_MAIN`] with `exp:30` service.
    pub dynamic_exp: Vec<RunResult>,
    /// Sensitivity: the f sweep with `exp:30` service.
    pub fsweep_exp: Vec<RunResult>,
    /// The deferred strategies at [`LAMBDA_MAIN`] under the study's `cancel` claim rule.
    pub dynamic_cancel: Vec<RunResult>,
    /// The f sweep's deferred strategies under the `cancel` claim rule.
    pub fsweep_cancel: Vec<RunResult>,
}

/// The study's scenarios, by part.
pub fn study_scenarios(o: &StudyOptions) -> Vec<(&'static str, Scenario)> {
    let mut v = Vec::new();
    for &lambda in &LAMBDAS {
        for s in PAPER_STRATEGIES {
            for copies in [false, true] {
                v.push((
                    "dynamic",
                    Scenario::dynamic(s, copies, lambda, o.requests, o.seed),
                ));
            }
        }
    }
    for s in BASELINES {
        for copies in [false, true] {
            v.push((
                "baselines",
                Scenario::dynamic(s, copies, LAMBDA_MAIN, o.requests, o.seed),
            ));
        }
    }
    for &lambda in &CAPACITY_LAMBDAS {
        let mut sc = Scenario::dynamic(
            Strategy::RoundRobin,
            false,
            lambda,
            o.capacity_requests,
            o.seed,
        );
        sc.phases = vec![KeyDist::Uniform];
        sc.label = format!("round_robin, uniform, λ = {lambda}");
        v.push(("capacity", sc));
    }
    let exp = ServiceModel::Exp {
        mean_us: SERVICE_US,
    };
    for (part, service, claim) in [
        ("fsweep", None, DeferredClaim::Token),
        ("fsweep_exp", Some(exp), DeferredClaim::Token),
        ("fsweep_cancel", None, DeferredClaim::Cancel),
    ] {
        for dist in [KeyDist::Partition, KeyDist::Zipf(1.0)] {
            for &f in &F_SWEEP {
                for s in SWEEP_STRATEGIES {
                    if claim == DeferredClaim::Cancel && !s.is_deferred() {
                        continue;
                    }
                    let mut sc = Scenario::dynamic(s, false, 0.0, o.batch_requests, o.seed);
                    sc.arrivals = Arrivals::Batch { spread_ms: 1_000 };
                    sc.f = f;
                    sc.phases = vec![dist];
                    sc.workload_seed = o.seed ^ 0xba7c;
                    sc.label = format!("{}, f = {f}, {}", s.name(), dist_name(dist));
                    if let Some(m) = service {
                        sc.service = m;
                        sc.label.push_str(", exp:30");
                    }
                    if claim == DeferredClaim::Cancel {
                        sc.claim = claim;
                        sc.label.push_str(", claim = cancel");
                    }
                    v.push((part, sc));
                }
            }
        }
    }
    for s in PAPER_STRATEGIES {
        for copies in [false, true] {
            let mut sc = Scenario::dynamic(s, copies, LAMBDA_MAIN, o.requests, o.seed);
            sc.service = exp;
            sc.label.push_str(", exp:30");
            v.push(("dynamic_exp", sc));
        }
    }
    for s in PAPER_STRATEGIES.into_iter().filter(|s| s.is_deferred()) {
        for copies in [false, true] {
            let mut sc = Scenario::dynamic(s, copies, LAMBDA_MAIN, o.requests, o.seed);
            sc.claim = DeferredClaim::Cancel;
            sc.label.push_str(", claim = cancel");
            v.push(("dynamic_cancel", sc));
        }
    }
    for slow in [true, false] {
        for s in HETERO_STRATEGIES {
            let mut sc = Scenario::dynamic(s, false, HETERO_LAMBDA, o.hetero_requests, o.seed);
            sc.f = HETERO_F;
            sc.phases = vec![KeyDist::Uniform];
            sc.service = ServiceModel::Exp {
                mean_us: SERVICE_US,
            };
            if slow {
                sc.slow = Some((
                    SLOW_NODE,
                    ServiceModel::Exp {
                        mean_us: SERVICE_US * u64::from(SLOW_FACTOR),
                    },
                ));
            }
            sc.label = format!(
                "{}, {}",
                s.name(),
                if slow {
                    "one node 3× slower"
                } else {
                    "all nodes equal"
                }
            );
            v.push(("hetero", sc));
        }
    }
    v
}

fn dist_name(d: KeyDist) -> &'static str {
    match d {
        KeyDist::Partition => "adversarial",
        KeyDist::Zipf(_) => "few popular",
        KeyDist::Uniform => "uniform",
    }
}

/// Runs the whole study, `jobs` runs at a time, reporting each finished run through `log`.
pub fn run_study(
    opts: &StudyOptions,
    log: &(dyn Fn(&str) + Sync),
) -> Result<StudyResults, BenchError> {
    let scenarios = study_scenarios(opts);
    let total = scenarios.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<RunResult, BenchError>>>> =
        (0..total).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((part, sc)) = scenarios.get(i) else {
                        break;
                    };
                    let started = std::time::Instant::now();
                    let r = run_blocking(sc);
                    let lambda = sc.lambda().map_or(String::new(), |l| format!(", λ = {l}"));
                    let what = match &r {
                        Ok(r) => format!(
                            "mean {:.3} s, p99 {:.0} ms, {} failed, {} unfinished",
                            r.mean_s(),
                            r.q_ms(0.99),
                            r.failed,
                            r.unfinished
                        ),
                        Err(e) => format!("FAILED: {e}"),
                    };
                    log(&format!(
                        "[{}/{total}] {part}: {}{lambda} ({:.1} s wall): {what}",
                        i + 1,
                        sc.label,
                        started.elapsed().as_secs_f64()
                    ));
                    *slots[i].lock() = Some(r);
                }
            });
        }
    });
    let mut res = StudyResults {
        options: *opts,
        dynamic: Vec::new(),
        baselines: Vec::new(),
        capacity: Vec::new(),
        fsweep: Vec::new(),
        hetero: Vec::new(),
        dynamic_exp: Vec::new(),
        fsweep_exp: Vec::new(),
        dynamic_cancel: Vec::new(),
        fsweep_cancel: Vec::new(),
    };
    for ((part, _), slot) in scenarios.iter().zip(slots) {
        let r = slot.into_inner().unwrap_or_else(|| {
            Err(BenchError::Target {
                reason: "run not executed".into(),
            })
        })?;
        match *part {
            "dynamic" => res.dynamic.push(r),
            "baselines" => res.baselines.push(r),
            "capacity" => res.capacity.push(r),
            "fsweep" => res.fsweep.push(r),
            "dynamic_exp" => res.dynamic_exp.push(r),
            "fsweep_exp" => res.fsweep_exp.push(r),
            "dynamic_cancel" => res.dynamic_cancel.push(r),
            "fsweep_cancel" => res.fsweep_cancel.push(r),
            _ => res.hetero.push(r),
        }
    }
    Ok(res)
}

// ---------------------------------------------------------------------------------------------
// Derived figures.

impl RunResult {
    /// `[start, end)` of phase `p`, s (the last phase ends at the last arrival).
    pub fn phase_window(&self, p: usize) -> (f64, f64) {
        let a = self.phase_starts_s.get(p).copied().unwrap_or(0.0);
        let b = self
            .phase_starts_s
            .get(p + 1)
            .copied()
            .unwrap_or(self.arrivals_end_s);
        (a, b)
    }

    /// Mean latency (s) of the requests issued in `[from, to)` s (1 s bins).
    pub fn issued_mean_s(&self, from: f64, to: f64) -> f64 {
        let lo = from.max(0.0).floor() as usize;
        let hi = (to.max(0.0).ceil() as usize).min(self.bins.len());
        let (mut n, mut sum) = (0u64, 0.0);
        for b in self.bins.get(lo..hi).unwrap_or(&[]) {
            n += b.issued;
            sum += b.mean_ms * b.issued as f64;
        }
        if n == 0 {
            f64::NAN
        } else {
            sum / n as f64 / 1e3
        }
    }

    /// Mean latency (s) of the requests issued in the last tenth of phase `p`: how far the
    /// backlog grew by its end.
    pub fn phase_end_s(&self, p: usize) -> f64 {
        let (a, b) = self.phase_window(p);
        self.issued_mean_s(b - (b - a) / 10.0, b)
    }

    /// Mean latency of phase `p`, s.
    pub fn phase_mean_s(&self, p: usize) -> f64 {
        self.phase_latency
            .get(p)
            .filter(|h| !h.is_empty())
            .map_or(f64::NAN, |h| h.mean() / 1e6)
    }

    /// Smallest and largest 10 s moving average of completions per second, from 10 s to
    /// the last arrival.
    pub fn throughput_range(&self) -> (f64, f64) {
        let end = (self.arrivals_end_s.floor() as usize).min(self.bins.len());
        let c: Vec<f64> = self.bins[..end]
            .iter()
            .map(|b| b.completed as f64)
            .collect();
        if c.len() < 20 {
            return (f64::NAN, f64::NAN);
        }
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for w in c[10..].windows(10) {
            let m = w.iter().sum::<f64>() / 10.0;
            lo = lo.min(m);
            hi = hi.max(m);
        }
        (lo, hi)
    }

    /// Share of the reads the strategies sent to `node`.
    pub fn share_of(&self, node: NodeId) -> f64 {
        let total: u64 = self.chosen.values().sum();
        if total == 0 {
            f64::NAN
        } else {
            self.chosen.get(&node).copied().unwrap_or(0) as f64 / total as f64
        }
    }

    fn copy_ms_q(&self, q: f64) -> f64 {
        if self.copy_create_ms.is_empty() {
            return f64::NAN;
        }
        let mut v = self.copy_create_ms.clone();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i] as f64
    }
}

/// The paper's Fig. 3 (mean latency in s, "oui" / "non").
pub const PAPER_FIG3: [(Strategy, f64, f64); 3] = [
    (Strategy::DynamicSnitch, 19.0, 244.0),
    (Strategy::Avr, 0.8, 198.0),
    (Strategy::Naive, 0.2, 192.0),
];

fn find(runs: &[RunResult], s: Strategy, copies: bool, lambda: f64) -> Option<&RunResult> {
    runs.iter().find(|r| {
        r.scenario.strategy == s
            && r.scenario.extra_copies == copies
            && r.scenario.lambda() == Some(lambda)
    })
}

fn f1(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("never".into(), |x| format!("{x:.1}"))
}

fn copies_word(c: bool) -> &'static str {
    if c { "copies" } else { "no copies" }
}

fn status(r: &RunResult) -> String {
    let mut s = format!("{}", r.completed);
    if r.failed > 0 {
        let _ = write!(s, " (**{} failed**)", r.failed);
    }
    if r.unfinished > 0 {
        let _ = write!(s, " (**{} unfinished**)", r.unfinished);
    }
    s
}

/// The f sweep's table: completion time per distribution × strategy × f.
fn fsweep_table(
    s: &mut String,
    fsweep: &[RunResult],
    strategies: &[Strategy],
    batch_requests: usize,
) {
    let _ = writeln!(
        s,
        "| distribution | strategy | {} | T(2) / T(16) | duplicates at f = {} |\n|---|---|{}---:|---|",
        F_SWEEP.map(|f| format!("f = {f}")).join(" | "),
        F_SWEEP.map(|f| f.to_string()).join(" / "),
        "---:|".repeat(F_SWEEP.len())
    );
    for dist in [KeyDist::Partition, KeyDist::Zipf(1.0)] {
        for &st in strategies {
            let runs: Vec<&RunResult> = F_SWEEP
                .iter()
                .filter_map(|&f| {
                    fsweep.iter().find(|r| {
                        r.scenario.f == f
                            && r.scenario.strategy == st
                            && r.scenario.phases.first() == Some(&dist)
                    })
                })
                .collect();
            let t: Vec<f64> = runs.iter().map(|r| r.makespan_s).collect();
            let cells: Vec<String> = runs
                .iter()
                .map(|r| {
                    let mut c = f1(r.makespan_s);
                    if r.failed + r.unfinished > 0 {
                        let _ = write!(c, " (**{} lost**)", r.failed + r.unfinished);
                    }
                    c
                })
                .collect();
            let dups: Vec<String> = runs
                .iter()
                .map(|r| r.duplicate_services.to_string())
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                dist_name(dist),
                st.name(),
                cells.join(" | "),
                match (t.first(), t.last()) {
                    (Some(a), Some(b)) if *b > 0.0 => format!("{:.1}", a / b),
                    _ => "–".into(),
                },
                dups.join(" / ")
            );
        }
    }
    let adv_ideal: Vec<String> = F_SWEEP
        .iter()
        .map(|&f| f1(batch_requests as f64 * SERVICE_US as f64 / 1e6 / f64::from(f)))
        .collect();
    let _ = writeln!(
        s,
        "| adversarial | ideal (R·30 ms / f) | {} | 8.0 | |",
        adv_ideal.join(" | ")
    );
}

/// The markdown report, side by side with the paper.
pub fn summary_markdown(res: &StudyResults) -> String {
    let o = &res.options;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Replica-choice study on Meridian (generated)\n\nSeed {}; {} requests per dynamic run (the paper: {PAPER_REQUESTS}), phases of {} requests; \
         batches of {} requests in the f sweep; {} requests per heterogeneous run; {} per capacity run. \
         Cluster: 1 DC × {NODES} nodes, `fixed:30` service, 1 read worker per node, LAN {} ms one way, q = 64. Latencies from the intended arrival. \
         The paper's columns quote its text (Fig. 1 and 2 are images whose numbers are not in the text).\n",
        o.seed,
        o.requests,
        o.requests / 5,
        o.batch_requests,
        o.hetero_requests,
        o.capacity_requests,
        LAN_ONE_WAY.as_millis()
    );

    // Fig. 3.
    let _ = writeln!(
        s,
        "## Fig. 3: mean latency (s), with and without extra copies\n\n| algorithm | paper \"oui\" | paper \"non\" | paper non/oui | ours, λ = {LAMBDA_MAIN}: copies | no copies | ours non/oui |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (st, oui, non) in PAPER_FIG3 {
        let y = find(&res.dynamic, st, true, LAMBDA_MAIN).map_or(f64::NAN, RunResult::mean_s);
        let n = find(&res.dynamic, st, false, LAMBDA_MAIN).map_or(f64::NAN, RunResult::mean_s);
        let _ = writeln!(
            s,
            "| {} | {oui} | {non} | {:.0}× | {} | {} | {}× |",
            variant_label(st, true).trim_end_matches(", copies"),
            non / oui,
            f1(y),
            f1(n),
            f1(n / y)
        );
    }
    let _ = writeln!(
        s,
        "\n### Mean latency (s) at every λ\n\n| strategy | copies | {} |\n|---|---|{}",
        LAMBDAS.map(|l| format!("λ = {l}")).join(" | "),
        "---:|".repeat(LAMBDAS.len())
    );
    for st in PAPER_STRATEGIES {
        for copies in [false, true] {
            let cells: Vec<String> = LAMBDAS
                .iter()
                .map(|&l| find(&res.dynamic, st, copies, l).map_or("–".into(), |r| f1(r.mean_s())))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                st.name(),
                copies_word(copies),
                cells.join(" | ")
            );
        }
    }

    // Fig. 1: saturation.
    let _ = writeln!(
        s,
        "\n## Fig. 1: latency over time — does the backlog grow in the Zipf phases?\n\nPer phase (U, Z, U, Z, U): mean latency (s) of the phase's requests; \"Z end\": mean latency of the requests issued in the last tenth of each Zipf phase (a backlog that grows without bound shows as Z end ≫ 0.03 s). \
         The paper: Cassandra saturates from 128 req/s; Naive and AVR behave very well at 256. \"failed\": GETs that returned an error (a deferred read whose claiming replica no longer held its extra copy, see the README); they are left out of the latencies.\n\n| strategy | copies | λ | completed | U1 | Z1 | Z1 end | U2 | Z2 | Z2 end | U3 | p50 ms | p99 ms | p99.9 ms | max s | drain after last arrival, s |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &l in &LAMBDAS {
        for st in PAPER_STRATEGIES {
            for copies in [false, true] {
                let Some(r) = find(&res.dynamic, st, copies, l) else {
                    continue;
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {l} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    st.name(),
                    copies_word(copies),
                    status(r),
                    f1(r.phase_mean_s(0)),
                    f1(r.phase_mean_s(1)),
                    f1(r.phase_end_s(1)),
                    f1(r.phase_mean_s(2)),
                    f1(r.phase_mean_s(3)),
                    f1(r.phase_end_s(3)),
                    f1(r.phase_mean_s(4)),
                    f1(r.q_ms(0.5)),
                    f1(r.q_ms(0.99)),
                    f1(r.q_ms(0.999)),
                    f1(r.q_ms(1.0) / 1e3),
                    f1((r.makespan_s - r.arrivals_end_s).max(0.0)),
                );
            }
        }
    }

    // Fig. 2: throughput.
    let _ = writeln!(
        s,
        "\n## Fig. 2: throughput at λ = {LAMBDA_MAIN}\n\nCompletions per second, 10 s moving average from 10 s to the last arrival: smallest and largest, as a fraction of λ (1.00 = throughput ≈ λ). The paper: \"extremely stable\" for Naive and AVR, not for Cassandra.\n\n| strategy | copies | min / λ | max / λ | mean until the last completion (req/s) |\n|---|---|---:|---:|---:|"
    );
    for st in PAPER_STRATEGIES.iter().chain(BASELINES.iter()) {
        for copies in [false, true] {
            let runs = if PAPER_STRATEGIES.contains(st) {
                &res.dynamic
            } else {
                &res.baselines
            };
            let Some(r) = find(runs, *st, copies, LAMBDA_MAIN) else {
                continue;
            };
            let (lo, hi) = r.throughput_range();
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {:.2} | {:.0} |",
                st.name(),
                copies_word(copies),
                lo / LAMBDA_MAIN,
                hi / LAMBDA_MAIN,
                r.throughput()
            );
        }
    }

    // Copies.
    let _ = writeln!(
        s,
        "\n## Extra copies: from a phase change to usable copies\n\nFor each Zipf phase, its most popular object (60.9 % of its requests): seconds from the phase's first request until one coordinator's map listed a copy, until all {NODES} did, the most copies listed (the spec's want = ⌊0.609·32⌋ = 19), and seconds until 90 % of that. `copy_create_ms`: the root's decision-to-usable times (objects here are 100 B, so this is protocol time only; a 10 MB object adds ≈ 84 ms at 1 Gb/s). The paper: copies created \"in a few seconds\"; the issue's target: usable within 5 s.\n\n| strategy | λ | phase | first usable s | everywhere s | peak copies | 90 % of peak s | copy_create_ms p50 / p99 / max | reads served by copies | reads that missed a copy |\n|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
    );
    for r in res.dynamic.iter().chain(res.baselines.iter()) {
        if !r.scenario.extra_copies {
            continue;
        }
        for c in &r.copies {
            let _ = writeln!(
                s,
                "| {} | {} | Z{} | {} | {} | {} | {} | {} / {} / {} | {} | {} |",
                r.scenario.strategy.name(),
                r.scenario.lambda().unwrap_or(0.0),
                c.phase / 2 + 1,
                opt_s(c.first_s),
                opt_s(c.all_s),
                c.peak,
                opt_s(c.peak90_s),
                f1(r.copy_ms_q(0.5)),
                f1(r.copy_ms_q(0.99)),
                f1(r.copy_ms_q(1.0)),
                r.extra_reads,
                r.extra_misses
            );
        }
    }

    // Duplicates.
    let _ = writeln!(
        s,
        "\n## Deferred decision: duplicate services\n\nExtra services of deferred reads (counted by the coordinators: a read served by k replicas counts k − 1) and reads dropped by a `Cancel` (at the replicas), as a share of the requests.\n\n| strategy | copies | λ | duplicates | share | cancelled |\n|---|---|---:|---:|---:|---:|"
    );
    for r in &res.dynamic {
        if !r.scenario.strategy.is_deferred() {
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} % | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            r.scenario.lambda().unwrap_or(0.0),
            r.duplicate_services,
            100.0 * r.duplicate_services as f64 / r.scenario.requests as f64,
            r.cancelled
        );
    }

    // Baselines.
    let _ = writeln!(
        s,
        "\n## Baselines at λ = {LAMBDA_MAIN}\n\n| strategy | copies | completed | mean s | Z1 end s | Z2 end s | p50 ms | p99 ms | p99.9 ms | C3 overloads |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in res.baselines.iter().chain(
        res.dynamic
            .iter()
            .filter(|r| r.scenario.lambda() == Some(LAMBDA_MAIN)),
    ) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            status(r),
            f1(r.mean_s()),
            f1(r.phase_end_s(1)),
            f1(r.phase_end_s(3)),
            f1(r.q_ms(0.5)),
            f1(r.q_ms(0.99)),
            f1(r.q_ms(0.999)),
            r.c3_overloads
        );
    }

    // Capacity.
    let ideal = f64::from(NODES) * 1e6 / SERVICE_US as f64;
    let _ = writeln!(
        s,
        "\n## Capacity: round_robin, uniform keys\n\nIdeal: {NODES} nodes / 30 ms = {ideal:.0} req/s. \"Served while arriving\": mean completions per second from 2 s to the last arrival. With 256 objects on a q = 64 ring the busiest node holds more key-replicas than the average, so it saturates before the cluster does (see the README).\n\n| λ | completed | served while arriving (req/s) | served / λ | served / ideal | mean latency s | p99 ms | drain after last arrival, s |\n|---:|---|---:|---:|---:|---:|---:|---:|"
    );
    for r in &res.capacity {
        let l = r.scenario.lambda().unwrap_or(0.0);
        let served = r.completions_between(2, r.arrivals_end_s.floor() as usize);
        let _ = writeln!(
            s,
            "| {l} | {} | {served:.0} | {:.2} | {:.2} | {} | {} | {} |",
            status(r),
            served / l,
            served / ideal,
            f1(r.mean_s()),
            f1(r.q_ms(0.99)),
            f1((r.makespan_s - r.arrivals_end_s).max(0.0))
        );
    }

    // f sweep.
    let _ = writeln!(
        s,
        "\n## f sweep: completion time of a batch of {} requests (s)\n\nAll requests submitted within the first second from uniformly chosen coordinators; no extra copies. Adversarial: only the objects of the ring partition holding the most objects (all their f replicas are the same f nodes), ideal R·30 ms / f. Few popular: Zipf(s = 1) over the 256 objects (the top object gets 16 % of the requests), ideal R·30 ms / 32 = {:.1} s. \
         The paper: on adversarial inputs the completion time is divided by ≈ f; on \"few popular\" inputs it grows from f = 8, f = 4 already balances well (duplicated services).\n",
        o.batch_requests,
        o.batch_requests as f64 * SERVICE_US as f64 / 1e6 / f64::from(NODES)
    );
    fsweep_table(&mut s, &res.fsweep, &SWEEP_STRATEGIES, o.batch_requests);
    // Heterogeneous.
    let _ = writeln!(
        s,
        "\n## C3 against the dynamic snitch, one node 3× slower\n\n1 DC × {NODES} nodes, f = {HETERO_F} (C3's RF), `exp:30` service and node {} at `exp:90`, uniform keys, open loop at λ = {HETERO_LAMBDA} req/s (≈ 48 % of the healthy capacity). The NSDI'15 claim: C3 improves p99.9 up to 3× over the dynamic snitch, with better mean, median and throughput.\n\n| strategy | cluster | completed | mean ms | p50 ms | p99 ms | p99.9 ms | throughput (req/s) | share of reads sent to node {} |\n|---|---|---|---:|---:|---:|---:|---:|---:|",
        SLOW_NODE.0, SLOW_NODE.0
    );
    for r in &res.hetero {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} % |",
            r.scenario.strategy.name(),
            if r.scenario.slow.is_some() {
                "one node 3× slower"
            } else {
                "all equal"
            },
            status(r),
            f1(r.mean_s() * 1e3),
            f1(r.q_ms(0.5)),
            f1(r.q_ms(0.99)),
            f1(r.q_ms(0.999)),
            r.throughput(),
            100.0 * r.share_of(SLOW_NODE)
        );
    }
    let pick = |st: Strategy| {
        res.hetero
            .iter()
            .find(|r| r.scenario.strategy == st && r.scenario.slow.is_some())
    };
    if let (Some(d), Some(c)) = (pick(Strategy::DynamicSnitch), pick(Strategy::C3)) {
        let _ = writeln!(
            s,
            "\nWith the slow node, dynamic_snitch / c3: p99.9 {:.2}×, p99 {:.2}×, mean {:.2}×, p50 {:.2}× (> 1: C3 better).",
            d.q_ms(0.999) / c.q_ms(0.999),
            d.q_ms(0.99) / c.q_ms(0.99),
            d.mean_s() / c.mean_s(),
            d.q_ms(0.5) / c.q_ms(0.5)
        );
    }

    // Sensitivity to the service-time distribution.
    let _ = writeln!(
        s,
        "\n## Sensitivity: exponential service times (`exp:30`) instead of `fixed:30`\n\nThe same runs with service times drawn from an exponential of mean 30 ms (as in C3's and absim's evaluations). With a fixed service time, replicas that received the same deferred reads at the same instant pop them in lockstep (see the README); random service times break the lockstep.\n\n| strategy | copies | λ | completed | mean s | Z1 end s | Z2 end s | p50 ms | p99 ms | p99.9 ms | duplicates | `fixed:30` mean s | `fixed:30` duplicates |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &res.dynamic_exp {
        let fixed = find(
            &res.dynamic,
            r.scenario.strategy,
            r.scenario.extra_copies,
            LAMBDA_MAIN,
        );
        let _ = writeln!(
            s,
            "| {} | {} | {LAMBDA_MAIN} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            status(r),
            f1(r.mean_s()),
            f1(r.phase_end_s(1)),
            f1(r.phase_end_s(3)),
            f1(r.q_ms(0.5)),
            f1(r.q_ms(0.99)),
            f1(r.q_ms(0.999)),
            r.duplicate_services,
            fixed.map_or("–".into(), |f| f1(f.mean_s())),
            fixed.map_or("–".into(), |f| f.duplicate_services.to_string()),
        );
    }
    let _ = writeln!(s, "\n### f sweep with `exp:30`\n");
    fsweep_table(&mut s, &res.fsweep_exp, &SWEEP_STRATEGIES, o.batch_requests);

    // The study's claim rule against Meridian's claim tokens.
    let _ = writeln!(
        s,
        "\n## Claiming a deferred read: the study's `cancel` rule against `token`\n\nEvery run above uses Meridian's default `deferred_claim = token` (the replica asks the read's coordinator before serving; the first claim only is granted). Here the deferred strategies run under the study's rule: broadcast `Cancel`, then serve. `fixed:30`, λ = {LAMBDA_MAIN}.\n\n| strategy | copies | `cancel`: completed | mean s | Z1 end s | Z2 end s | p99 ms | duplicates | `token`: mean s | p99 ms | duplicates |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &res.dynamic_cancel {
        let token = find(
            &res.dynamic,
            r.scenario.strategy,
            r.scenario.extra_copies,
            LAMBDA_MAIN,
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            status(r),
            f1(r.mean_s()),
            f1(r.phase_end_s(1)),
            f1(r.phase_end_s(3)),
            f1(r.q_ms(0.99)),
            r.duplicate_services,
            token.map_or("–".into(), |t| f1(t.mean_s())),
            token.map_or("–".into(), |t| f1(t.q_ms(0.99))),
            token.map_or("–".into(), |t| t.duplicate_services.to_string()),
        );
    }
    let _ = writeln!(s, "\n### f sweep under `cancel`\n");
    let deferred: Vec<Strategy> = SWEEP_STRATEGIES
        .into_iter()
        .filter(|s| s.is_deferred())
        .collect();
    fsweep_table(&mut s, &res.fsweep_cancel, &deferred, o.batch_requests);
    s
}

// ---------------------------------------------------------------------------------------------
// Files.

fn part_runs(res: &StudyResults) -> Vec<(&'static str, &RunResult)> {
    let mut v: Vec<(&'static str, &RunResult)> = Vec::new();
    v.extend(res.dynamic.iter().map(|r| ("dynamic", r)));
    v.extend(res.baselines.iter().map(|r| ("baselines", r)));
    v.extend(res.capacity.iter().map(|r| ("capacity", r)));
    v.extend(res.fsweep.iter().map(|r| ("fsweep", r)));
    v.extend(res.hetero.iter().map(|r| ("hetero", r)));
    v.extend(res.dynamic_exp.iter().map(|r| ("dynamic_exp", r)));
    v.extend(res.fsweep_exp.iter().map(|r| ("fsweep_exp", r)));
    v.extend(res.dynamic_cancel.iter().map(|r| ("dynamic_cancel", r)));
    v.extend(res.fsweep_cancel.iter().map(|r| ("fsweep_cancel", r)));
    v
}

fn service_name(m: ServiceModel) -> String {
    match m {
        ServiceModel::Real => "real".into(),
        ServiceModel::Fixed { us } => format!("fixed:{}", us as f64 / 1e3),
        ServiceModel::Exp { mean_us } => format!("exp:{}", mean_us as f64 / 1e3),
    }
}

fn csv_num(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.4}")
    }
}

/// One row per run.
pub fn runs_csv(res: &StudyResults) -> String {
    let mut s = String::from(
        "part,label,strategy,extra_copies,claim,service,lambda,f,phases,requests,completed,failed,unfinished,mean_s,p50_ms,p99_ms,p999_ms,max_ms,phase_means_s,makespan_s,arrivals_end_s,throughput,duplicate_services,cancelled,extra_reads,extra_misses,c3_overloads,copy_create_ms_p50,copy_create_ms_max\n",
    );
    for (part, r) in part_runs(res) {
        let sc = &r.scenario;
        let phases: Vec<String> = sc.phases.iter().map(|d| d.short()).collect();
        let means: Vec<String> = (0..sc.phases.len())
            .map(|p| csv_num(r.phase_mean_s(p)))
            .collect();
        let _ = writeln!(
            s,
            "{part},\"{}\",{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            sc.label,
            sc.strategy.name(),
            sc.extra_copies,
            sc.claim,
            service_name(sc.service),
            sc.lambda().map_or(String::new(), |l| l.to_string()),
            sc.f,
            phases.join("-"),
            sc.requests,
            r.completed,
            r.failed,
            r.unfinished,
            csv_num(r.mean_s()),
            csv_num(r.q_ms(0.5)),
            csv_num(r.q_ms(0.99)),
            csv_num(r.q_ms(0.999)),
            csv_num(r.q_ms(1.0)),
            means.join(";"),
            csv_num(r.makespan_s),
            csv_num(r.arrivals_end_s),
            csv_num(r.throughput()),
            r.duplicate_services,
            r.cancelled,
            r.extra_reads,
            r.extra_misses,
            r.c3_overloads,
            csv_num(r.copy_ms_q(0.5)),
            csv_num(r.copy_ms_q(1.0)),
        );
    }
    s
}

/// Per second of every dynamic and baseline run.
pub fn timeseries_csv(res: &StudyResults) -> String {
    let mut s = String::from(
        "strategy,extra_copies,lambda,second,issued,mean_latency_ms,max_latency_ms,completed,copies_listed\n",
    );
    for r in res.dynamic.iter().chain(res.baselines.iter()) {
        for (t, b) in r.bins.iter().enumerate() {
            let _ = writeln!(
                s,
                "{},{},{},{t},{},{:.1},{:.1},{},{}",
                r.scenario.strategy.name(),
                r.scenario.extra_copies,
                r.scenario.lambda().unwrap_or(0.0),
                b.issued,
                b.mean_ms,
                b.max_ms,
                b.completed,
                b.copies
            );
        }
    }
    s
}

/// Per Zipf phase of every run with copies.
pub fn copies_csv(res: &StudyResults) -> String {
    let mut s = String::from(
        "strategy,lambda,phase,top_object,first_usable_s,all_coordinators_s,peak_copies,peak90_s\n",
    );
    let o = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.3}"));
    for r in res.dynamic.iter().chain(res.baselines.iter()) {
        for c in &r.copies {
            if !r.scenario.extra_copies {
                continue;
            }
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{}",
                r.scenario.strategy.name(),
                r.scenario.lambda().unwrap_or(0.0),
                c.phase,
                c.top,
                o(c.first_s),
                o(c.all_s),
                c.peak,
                o(c.peak90_s)
            );
        }
    }
    s
}

fn latency_series(r: &RunResult, label: String) -> XySeries {
    XySeries {
        label,
        points: r
            .bins
            .iter()
            .enumerate()
            .filter(|(_, b)| b.issued > 0 && b.mean_ms > 0.0)
            .map(|(t, b)| (t as f64 + 0.5, b.mean_ms))
            .collect(),
    }
}

fn throughput_series(r: &RunResult, label: String) -> XySeries {
    XySeries {
        label,
        points: r
            .bins
            .iter()
            .enumerate()
            .map(|(t, b)| (t as f64 + 0.5, b.completed as f64))
            .collect(),
    }
}

/// Writes `summary.md`, the CSVs and the plots into `out`; returns the summary's path.
pub fn write_results(res: &StudyResults, out: &Path) -> Result<PathBuf, BenchError> {
    write_file(&out.join("runs.csv"), runs_csv(res).as_bytes())?;
    write_file(&out.join("timeseries.csv"), timeseries_csv(res).as_bytes())?;
    write_file(&out.join("copies.csv"), copies_csv(res).as_bytes())?;
    let summary = out.join("summary.md");
    write_file(&summary, summary_markdown(res).as_bytes())?;
    let markers = |r: &RunResult| {
        r.phase_starts_s
            .iter()
            .skip(1)
            .copied()
            .collect::<Vec<f64>>()
    };
    // Fig. 1: one figure per λ, every paper variant.
    for &l in &LAMBDAS {
        let mut series = Vec::new();
        let mut marks = Vec::new();
        for st in PAPER_STRATEGIES {
            for copies in [false, true] {
                if let Some(r) = find(&res.dynamic, st, copies, l) {
                    marks = markers(r);
                    series.push(latency_series(r, variant_label(st, copies)));
                }
            }
        }
        xy_lines(
            &out.join(format!("fig1_latency_lambda{l}")),
            &XyAxes {
                title: format!("Latency over time, λ = {l} req/s (cf. Fig. 1); phases U Z U Z U"),
                x_desc: "time of the request's arrival (s)".into(),
                y_desc: "mean latency of the second's requests (ms, log)".into(),
                log_y: true,
                markers: marks,
            },
            &series,
        )?;
    }
    // Fig. 2: throughput at 256, with and without copies.
    for copies in [true, false] {
        let mut series = Vec::new();
        let mut marks = Vec::new();
        for st in PAPER_STRATEGIES {
            if let Some(r) = find(&res.dynamic, st, copies, LAMBDA_MAIN) {
                marks = markers(r);
                series.push(throughput_series(r, variant_label(st, copies)));
            }
        }
        xy_lines(
            &out.join(format!(
                "fig2_throughput_lambda{LAMBDA_MAIN}_{}",
                if copies { "copies" } else { "nocopies" }
            )),
            &XyAxes {
                title: format!(
                    "Throughput, λ = {LAMBDA_MAIN} req/s, {} (cf. Fig. 2)",
                    copies_word(copies)
                ),
                x_desc: "time (s)".into(),
                y_desc: "reads completed per second".into(),
                log_y: false,
                markers: marks,
            },
            &series,
        )?;
    }
    // Baselines.
    for copies in [false, true] {
        let mut series = Vec::new();
        let mut marks = Vec::new();
        let runs = res.baselines.iter().chain(find(
            &res.dynamic,
            Strategy::DynamicSnitch,
            copies,
            LAMBDA_MAIN,
        ));
        for r in runs.filter(|r| r.scenario.extra_copies == copies) {
            marks = markers(r);
            series.push(latency_series(
                r,
                variant_label(r.scenario.strategy, copies),
            ));
        }
        xy_lines(
            &out.join(format!(
                "baselines_latency_lambda{LAMBDA_MAIN}_{}",
                if copies { "copies" } else { "nocopies" }
            )),
            &XyAxes {
                title: format!(
                    "Baselines, latency over time, λ = {LAMBDA_MAIN}, {}",
                    copies_word(copies)
                ),
                x_desc: "time of the request's arrival (s)".into(),
                y_desc: "mean latency of the second's requests (ms, log)".into(),
                log_y: true,
                markers: marks,
            },
            &series,
        )?;
    }
    // f sweep.
    for dist in [KeyDist::Partition, KeyDist::Zipf(1.0)] {
        let mut series = Vec::new();
        for (runs, suffix) in [(&res.fsweep, ", fixed:30"), (&res.fsweep_exp, ", exp:30")] {
            for st in SWEEP_STRATEGIES {
                series.push(XySeries {
                    label: format!("{}{suffix}", st.name()),
                    points: runs
                        .iter()
                        .filter(|r| {
                            r.scenario.strategy == st && r.scenario.phases.first() == Some(&dist)
                        })
                        .map(|r| (f64::from(r.scenario.f), r.makespan_s))
                        .collect(),
                });
            }
        }
        if dist == KeyDist::Partition {
            series.push(XySeries {
                label: "ideal R·30 ms / f".into(),
                points: F_SWEEP
                    .iter()
                    .map(|&f| {
                        (
                            f64::from(f),
                            res.options.batch_requests as f64 * SERVICE_US as f64
                                / 1e6
                                / f64::from(f),
                        )
                    })
                    .collect(),
            });
        }
        xy_lines(
            &out.join(format!("fsweep_{}", dist_name(dist).replace(' ', "_"))),
            &XyAxes {
                title: format!(
                    "Batch completion time vs f, {} ({} requests)",
                    dist_name(dist),
                    res.options.batch_requests
                ),
                x_desc: "replication factor f".into(),
                y_desc: "completion time (s, log)".into(),
                log_y: true,
                markers: Vec::new(),
            },
            &series,
        )?;
    }
    // Heterogeneous: CDFs with the slow node.
    let cdfs: Vec<CdfSeries<'_>> = res
        .hetero
        .iter()
        .filter(|r| r.scenario.slow.is_some())
        .map(|r| CdfSeries {
            label: r.scenario.strategy.name().into(),
            histogram: &r.latency,
        })
        .collect();
    latency_cdf(
        &out.join("hetero_cdf"),
        "Latency CDF, one node 3× slower (exp:30, f = 3, λ = 512)",
        &cdfs,
    )?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny version of the scenario: 8 nodes, f = 2, 64 objects, `fixed:30`, one phase.
    fn tiny(
        strategy: Strategy,
        copies: bool,
        lambda: f64,
        requests: usize,
        dist: KeyDist,
    ) -> Scenario {
        let mut sc = Scenario::dynamic(strategy, copies, lambda, requests, 7);
        sc.nodes = 8;
        sc.objects = 64;
        sc.phases = vec![dist];
        sc.drain_cap = Duration::from_secs(600);
        sc
    }

    #[test]
    fn zipf_phases_follow_the_paper_and_permute_their_ranks() {
        let sc = Scenario::dynamic(Strategy::Naive, false, 256.0, 50_000, 3);
        let (reqs, starts) = generate(&sc, &[]);
        assert_eq!(reqs.len(), 50_000);
        let firsts: Vec<usize> = starts.iter().map(|s| s.0).collect();
        assert_eq!(firsts, [0, 10_000, 20_000, 30_000, 40_000]);
        // Zipf(2) over 256 objects: the top object takes 1/H = 60.9 %.
        let tops: Vec<usize> = starts.iter().filter_map(|s| s.1).collect();
        assert_eq!(tops.len(), 2);
        assert_ne!(
            tops[0], tops[1],
            "the permutation is redrawn per Zipf phase"
        );
        let share = |lo: usize, obj: usize| {
            reqs[lo..lo + 10_000]
                .iter()
                .filter(|r| usize::from(r.obj) == obj)
                .count() as f64
                / 10_000.0
        };
        assert!((share(10_000, tops[0]) - 0.609).abs() < 0.02);
        assert!((share(30_000, tops[1]) - 0.609).abs() < 0.02);
        assert!(
            share(0, tops[0]) < 0.02,
            "uniform phases have no hot object"
        );
        // Poisson at 256/s: 50 000 arrivals in ≈ 195 s; coordinators uniform.
        let end = reqs[49_999].at_us as f64 / 1e6;
        assert!((end - 50_000.0 / 256.0).abs() < 5.0, "{end}");
        assert!(reqs.iter().all(|r| r.coord < 32));
        // Same seed, same workload.
        assert_eq!(generate(&sc, &[]).0, reqs);
    }

    #[test]
    fn round_robin_throughput_follows_lambda_and_caps_at_the_service_model() {
        // 8 nodes × 1 worker × 30 ms: ideal 267 req/s.
        let r = run_blocking(&tiny(
            Strategy::RoundRobin,
            false,
            120.0,
            1_200,
            KeyDist::Uniform,
        ))
        .expect("run");
        assert_eq!((r.completed, r.failed, r.unfinished), (1_200, 0, 0));
        let served = r.completions_between(1, r.arrivals_end_s.floor() as usize);
        assert!(
            (served / 120.0 - 1.0).abs() < 0.15,
            "served {served} req/s at λ = 120"
        );
        // One service time plus one LAN round trip, with a little queueing.
        let p50 = r.q_ms(0.5);
        assert!((32.0..45.0).contains(&p50), "p50 {p50} ms");
        // Offered 600 req/s, more than every node can serve: the cluster serves its capacity.
        let r = run_blocking(&tiny(
            Strategy::RoundRobin,
            false,
            600.0,
            3_000,
            KeyDist::Uniform,
        ))
        .expect("run");
        let served = r.completions_between(1, r.arrivals_end_s.floor() as usize);
        let ideal = 8.0 / 0.030;
        assert!(
            served <= ideal * 1.02 && served >= ideal * 0.85,
            "served {served} req/s, ideal {ideal}"
        );
    }

    #[test]
    fn dynamic_snitch_backlog_grows_under_zipf_unless_copies_absorb_it() {
        // Zipf(2) over 64 objects at 160 req/s: the top object needs 98 req/s, its two
        // replicas serve 66.7.
        let z = run_blocking(&tiny(
            Strategy::DynamicSnitch,
            false,
            160.0,
            1_600,
            KeyDist::Zipf(2.0),
        ))
        .expect("run");
        let u = run_blocking(&tiny(
            Strategy::DynamicSnitch,
            false,
            160.0,
            1_600,
            KeyDist::Uniform,
        ))
        .expect("run");
        assert_eq!(z.completed + u.completed, 3_200);
        let (a, b) = z.phase_window(0);
        let start = z.issued_mean_s(a, a + (b - a) / 10.0);
        let end = z.phase_end_s(0);
        // The backlog grows by ≈ 31 req/s for 10 s: ≈ 4.6 s of waiting by the end.
        assert!(
            end > 2.0 && end > 5.0 * start,
            "Zipf: start {start} s, end {end} s"
        );
        assert!(
            u.phase_end_s(0) < 0.2,
            "uniform: end {} s",
            u.phase_end_s(0)
        );
        // With extra copies the root gives the hot object ⌊0.614·8⌋ = 4 more holders within
        // a few periods: 6 × 33.3 req/s > 98, so the backlog drains before the phase ends.
        let c = run_blocking(&tiny(
            Strategy::DynamicSnitch,
            true,
            160.0,
            1_600,
            KeyDist::Zipf(2.0),
        ))
        .expect("run");
        assert_eq!((c.completed, c.failed), (1_600, 0));
        assert!(
            c.extra_reads > 100,
            "{} reads served by copies",
            c.extra_reads
        );
        assert!(
            c.phase_end_s(0) < 0.5 && c.phase_end_s(0) * 4.0 < end,
            "copies: end {} s, without: {end} s",
            c.phase_end_s(0)
        );
        // Same seed, same numbers.
        let again = run_blocking(&tiny(
            Strategy::DynamicSnitch,
            false,
            160.0,
            1_600,
            KeyDist::Zipf(2.0),
        ))
        .expect("run");
        assert_eq!(again.latency, z.latency);
        assert_eq!(again.bins, z.bins);
    }
}
