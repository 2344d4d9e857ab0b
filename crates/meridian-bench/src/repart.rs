//! The in-node repartitioning study's replay runner (spec `repartitioning.md` §5, "Run
//! shape"; `experiments/repartitioning/`): a kvpaxos request stream replayed through the
//! worker-shard executor (`meridian_server::repart`) against a shared [`MemEngine`], as fast
//! as the executor accepts it, with throughput in 1 s bins, the makespan and the executor's
//! metrics. [`report`] turns a directory of runs into the study's tables and plots.
//!
//! # Run shape
//!
//! - Keys are 4-byte big-endian `u32` ([`kvpaxos::key_bytes`]); values are
//!   [`ReplayConfig::value_size`] bytes (4 KiB), freshly allocated for every write.
//! - One shared [`MemEngine`]; its GC horizon is `Timestamp::MAX`, so a write keeps only the
//!   newest version of its key (an UPDATE-heavy file does not grow the engine).
//! - **Population first**: the writes of keys `0..=records` ([`kvpaxos::population`]) go
//!   through the executor (and so through the tracker and, in `base` mode, count towards Δp),
//!   as in kvpaxos. Then the executor is quiesced, and the **measured stream** is dispatched.
//! - One plain std thread dispatches everything, one request after another, as fast as the
//!   executor accepts them. Each shard queue holds at most [`ReplayConfig::queue_cap`]
//!   requests (default [`DEFAULT_QUEUE_CAP`] = 2048), so the dispatcher cannot run ahead of
//!   execution by more than `shards × queue_cap` requests and throughput reflects execution,
//!   not queueing. (A stop-the-world pause of the dispatcher then shows as a throughput dip
//!   once the queues drain: 8 × 2048 requests are a few tens of ms of work.)
//! - Each operation runs on its shard: READ = `get`, WRITE (insert) and UPDATE = `put` of a
//!   fresh value (timestamp = the request's position in the stream, so per-key versions grow
//!   with dispatch order), SCAN = an ordered engine scan of at most `arg` keys from the key,
//!   bounded above by `key + arg`. The executor places a scan by its keys `[key, key + arg)`,
//!   as the spec says, so the bound keeps the scan to the keys it was synchronised on; on
//!   the study's dense integer keys the rows are those of an unbounded scan of `arg` keys.
//!   (The bound also matters for cost: [`MemEngine`]'s scan takes up to `arg` rows from each
//!   of its 64 internal shards before merging: one worker replaying YCSB E over 10⁶ keys of
//!   4 KiB ran ≈ 160 µs per request unbounded, ≈ 60 µs bounded, on a 2-core machine.)
//! - **Measured**: completions per bin (an atomic counter sampled by a thread every
//!   [`ReplayConfig::bin`], together with a snapshot of the executor's metrics and the
//!   longest dispatch stall of the bin), the makespan (first dispatch of the measured stream
//!   to the end of the quiesce that follows the last one), the longest dispatch stall of the
//!   population and of the measured stream, and the executor's metrics at the end.
//! - **Checks** on every run: the number of operations executed, engine errors, reads that
//!   found no value and scans that did not return exactly the keys `[key, key + arg)`. On a
//!   generated file ([`kvpaxos::generate`]) the last three are 0: every key read or scanned
//!   was populated or inserted earlier in dispatch order (a raw kvpaxos file may differ).
//!
//! Everything but the timings is deterministic given the request file and the settings.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_server::repart::{
    Executor, Mode, NewKeys, PartitionerKind, RepartConfig, RepartSnapshot, Runtime, UnmappedPolicy,
};
use meridian_storage::{Engine, MemEngine};
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::kvpaxos::{self, Op, Request};
use crate::plot::{self, ThroughputSeries};

/// Each shard queue's capacity in requests during a replay.
pub const DEFAULT_QUEUE_CAP: usize = 2048;
/// The value size of the study (4 KiB).
pub const DEFAULT_VALUE_SIZE: usize = 4096;
/// The largest value a replay writes.
pub const MAX_VALUE_SIZE: usize = 16 << 20;

/// One replay's settings.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// The run's name in tables and plots (see [`default_label`]).
    pub label: String,
    /// The executor's mode (not `off`).
    pub mode: Mode,
    /// P, worker shards (the mode `single` runs 1 whatever this says).
    pub shards: u32,
    /// W, the co-access graph's window in requests (0: unwindowed).
    pub window: usize,
    /// METIS or FENNEL.
    pub partitioner: PartitionerKind,
    /// What a swap does with keys the new partition does not mention.
    pub unmapped: UnmappedPolicy,
    /// Relabel new partitions onto the current shards.
    pub relabel: bool,
    /// Bytes per value written.
    pub value_size: usize,
    /// Each shard queue's capacity (> 0: the dispatcher waits when a queue is full).
    pub queue_cap: usize,
    /// `n_records`: the population writes keys `0..=records`.
    pub records: u32,
    /// The partitioner's seed.
    pub seed: i32,
    /// Pin shard threads to CPUs.
    pub pin: bool,
    /// How much nicer than the replay the tracker and partitioner threads run (0..=19).
    pub actor_nice: i32,
    /// The throughput bin (1 s).
    pub bin: Duration,
}

impl ReplayConfig {
    /// The study's defaults for `mode` over a population of `records` keys: 8 shards,
    /// unwindowed, METIS, `drop` (as kvpaxos), relabelling on, 4 KiB values, queues of
    /// [`DEFAULT_QUEUE_CAP`], seed 1, no pinning, 1 s bins.
    pub fn new(mode: Mode, records: u32) -> Self {
        Self {
            label: String::new(),
            mode,
            shards: 8,
            window: 0,
            partitioner: PartitionerKind::Metis,
            unmapped: UnmappedPolicy::Drop,
            relabel: true,
            value_size: DEFAULT_VALUE_SIZE,
            queue_cap: DEFAULT_QUEUE_CAP,
            records,
            seed: 1,
            pin: false,
            actor_nice: RepartConfig::default().actor_nice,
            bin: Duration::from_secs(1),
        }
    }

    /// The executor's configuration.
    pub fn executor_config(&self) -> RepartConfig {
        RepartConfig {
            mode: self.mode,
            shards: self.shards,
            window: self.window,
            queue_cap: self.queue_cap,
            partitioner: self.partitioner,
            ufactor: 200,
            seed: self.seed,
            relabel: self.relabel,
            unmapped_policy: self.unmapped,
            new_keys: NewKeys::RoundRobin,
            pin: self.pin,
            actor_nice: self.actor_nice,
            // Keep every request in the graph, as the study does (a replay's tracker lags by
            // up to ≈ 7 × 10⁵ requests on two cores).
            max_tracker_lag: meridian_server::repart::MAX_TRACKER_LAG,
            // Swap every new partition, as kvpaxos does (no hysteresis).
            min_gain: 0.0,
            ..RepartConfig::default()
        }
    }

    /// Checks the settings the executor does not; errors name the flag.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |property: &str, reason: String| {
            Err(BenchError::InvalidProperty {
                property: property.to_owned(),
                reason,
            })
        };
        if !self.mode.enabled() {
            return bad("--mode", "off runs no executor".into());
        }
        if self.value_size == 0 || self.value_size > MAX_VALUE_SIZE {
            return bad(
                "--value-size",
                format!(
                    "{} is out of range: expected 1..={MAX_VALUE_SIZE}",
                    self.value_size
                ),
            );
        }
        if self.queue_cap == 0 {
            return bad(
                "--queue-cap",
                "0 (unbounded) lets the dispatcher run ahead of execution; give a capacity".into(),
            );
        }
        if self.bin.is_zero() {
            return bad("bin", "must be positive".into());
        }
        if !(0..=19).contains(&self.actor_nice) {
            return bad(
                "--actor-nice",
                format!("{} is out of range: expected 0..=19", self.actor_nice),
            );
        }
        self.executor_config()
            .validate()
            .or_else(|e| bad("--shards", e))
    }
}

/// A run's name from its settings: `SW`, `RR`, `NS W=1000`, `Base Δp=100000`,
/// `Base Δp=1000 W=1000`, `Free Δp=…`.
pub fn default_label(mode: Mode, window: usize) -> String {
    let w = if window > 0 {
        format!(" W={window}")
    } else {
        String::new()
    };
    match mode {
        Mode::Off => "off".into(),
        Mode::Single => "SW".into(),
        Mode::RoundRobin => "RR".into(),
        Mode::NonStop => format!("NS W={window}"),
        Mode::Base { interval } => format!("Base Δp={interval}{w}"),
        Mode::Free { interval } => format!("Free Δp={interval}{w}"),
    }
}

/// Request counts by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    /// READ.
    pub read: u64,
    /// WRITE (insert).
    pub write: u64,
    /// SCAN.
    pub scan: u64,
    /// UPDATE.
    pub update: u64,
}

impl OpCounts {
    /// Counts `requests` by type.
    pub fn of(requests: &[Request]) -> Self {
        let mut c = OpCounts::default();
        for r in requests {
            match r.op {
                Op::Read => c.read += 1,
                Op::Write => c.write += 1,
                Op::Scan => c.scan += 1,
                Op::Update => c.update += 1,
            }
        }
        c
    }
}

/// One throughput bin of the measured stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bin {
    /// The bin's end, seconds since the first dispatch of the measured stream (the last bin
    /// ends at the makespan and may be shorter than the others).
    pub t_s: f64,
    /// Requests of the measured stream that completed in the bin.
    pub completed: u64,
    /// Requests dispatched so far (population included).
    pub dispatched: u64,
    /// The longest dispatch stall in the bin, µs.
    pub stall_max_us: u64,
    /// Partitions computed so far.
    pub partitions: u64,
    /// Maps swapped in so far.
    pub swaps: u64,
    /// Keys moved by all partitions so far.
    pub keys_moved_total: u64,
    /// Vertices of the last graph snapshot.
    pub graph_vertices: u64,
    /// Requests handed to the tracker but not yet tracked.
    pub tracker_lag: u64,
    /// Requests so far that spanned several shards.
    pub sync_requests: u64,
}

/// What one replay measured (`result.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayResult {
    /// The run's name.
    pub label: String,
    /// The request file.
    pub file: String,
    /// `single`, `round_robin`, `base:Δp`, `free:Δp` or `non_stop`.
    pub mode: String,
    /// Shards the executor ran.
    pub shards: u32,
    /// W.
    pub window: usize,
    /// `metis` or `fennel`.
    pub partitioner: String,
    /// `drop` or `keep`.
    pub unmapped: String,
    /// Relabelling on.
    pub relabel: bool,
    /// Bytes per value.
    pub value_size: usize,
    /// Each shard queue's capacity.
    pub queue_cap: usize,
    /// Shard threads pinned.
    pub pin: bool,
    /// The tracker's and partitioner's niceness above the replay's (0 in results older
    /// than the setting, which ran them at the replay's priority).
    #[serde(default)]
    pub actor_nice: i32,
    /// `n_records` (the population is keys `0..=records`).
    pub records: u32,
    /// Population writes.
    pub population: u64,
    /// Requests of the measured stream.
    pub requests: u64,
    /// The measured stream by type.
    pub ops: OpCounts,
    /// Requests of the measured stream executed (must equal `requests`).
    pub executed: u64,
    /// Engine errors (must be 0).
    pub engine_errors: u64,
    /// Reads that found no value.
    pub read_misses: u64,
    /// Scans whose result was not exactly the keys `[key, key + arg)`.
    pub scan_mismatches: u64,
    /// Keys returned by all scans.
    pub scan_keys_read: u64,
    /// The population's duration, s (dispatch to quiesce).
    pub population_s: f64,
    /// The measured stream's makespan, s.
    pub makespan_s: f64,
    /// `requests / makespan_s`.
    pub throughput_rps: f64,
    /// The longest dispatch stall while populating, µs.
    pub population_stall_max_us: u64,
    /// The longest dispatch stall of the measured stream, µs.
    pub measured_stall_max_us: u64,
    /// Dispatches of the measured stream that stalled at least 1, 10 and 100 ms
    /// ([`meridian_server::repart::STALL_OVER_US`]); absent from older results.
    #[serde(default)]
    pub measured_stalls_over: [u64; 3],
    /// Throughput bins of the measured stream.
    pub bins: Vec<Bin>,
    /// The executor's metrics after the population (a [`RepartSnapshot`]).
    pub stats_after_population: serde_json::Value,
    /// The executor's metrics at the end (a [`RepartSnapshot`]).
    pub stats: serde_json::Value,
}

impl ReplayResult {
    /// A counter of [`ReplayResult::stats`] by name (0 if absent).
    pub fn stat(&self, name: &str) -> u64 {
        self.stats.get(name).and_then(|v| v.as_u64()).unwrap_or(0)
    }

    /// The highest and lowest full-bin throughput, req/s (the last, partial bin aside).
    pub fn peak_and_dip_rps(&self) -> (f64, f64) {
        let mut prev = 0.0;
        let mut peak: f64 = 0.0;
        let mut dip = f64::INFINITY;
        let n = self.bins.len();
        for (i, b) in self.bins.iter().enumerate() {
            let len = b.t_s - prev;
            prev = b.t_s;
            if len <= 0.0 || (i + 1 == n && n > 1) {
                continue;
            }
            let rps = b.completed as f64 / len;
            peak = peak.max(rps);
            dip = dip.min(rps);
        }
        (peak, if dip.is_finite() { dip } else { 0.0 })
    }
}

/// Observes each request's execution (tests).
#[derive(Debug)]
struct Probe {
    runs: Vec<AtomicU8>,
}

/// What every operation shares.
struct Ctx {
    engine: MemEngine,
    value_size: usize,
    /// Requests of the measured stream completed.
    done: AtomicU64,
    errors: AtomicU64,
    read_misses: AtomicU64,
    scan_mismatches: AtomicU64,
    scan_keys: AtomicU64,
    /// The first sequence number of the measured stream.
    measured_from: u64,
    probe: Option<Probe>,
}

impl Ctx {
    fn value(&self, key: u32, seq: u64) -> Bytes {
        let mut v = vec![0u8; self.value_size];
        let stamp = [&key.to_be_bytes()[..], &seq.to_be_bytes()[..]].concat();
        let n = stamp.len().min(v.len());
        v[..n].copy_from_slice(&stamp[..n]);
        Bytes::from(v)
    }

    fn execute(&self, r: Request, seq: u64) {
        let key = kvpaxos::key_bytes(r.key);
        let ok = match r.op {
            Op::Read => match self.engine.get_value(&key, Timestamp::MAX) {
                Ok(v) => {
                    if v.is_none() {
                        self.read_misses.fetch_add(1, Ordering::Relaxed);
                    }
                    std::hint::black_box(v);
                    true
                }
                Err(_) => false,
            },
            Op::Write | Op::Update => self
                .engine
                .put(
                    Bytes::copy_from_slice(&key),
                    Timestamp(seq + 1),
                    self.value(r.key, seq),
                )
                .is_ok(),
            Op::Scan => {
                let len = r.arg as usize;
                // Bounded by the keys the executor placed the scan by: it reads nothing it
                // was not synchronised on, and on the dense integer keys of the study it
                // returns the same rows as an unbounded scan of `len` keys.
                let end = match r.key.checked_add(r.arg) {
                    Some(end) => Bound::Excluded(Bytes::copy_from_slice(&kvpaxos::key_bytes(end))),
                    None => Bound::Unbounded,
                };
                match self.engine.scan(
                    Bound::Included(Bytes::copy_from_slice(&key)),
                    end,
                    Timestamp::MAX,
                    len,
                    false,
                ) {
                    Ok(rows) => {
                        self.scan_keys
                            .fetch_add(rows.len() as u64, Ordering::Relaxed);
                        let exact = rows.len() == len
                            && rows
                                .iter()
                                .zip(r.keys())
                                .all(|((k, _), want)| k[..] == kvpaxos::key_bytes(want));
                        if !exact {
                            self.scan_mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                        std::hint::black_box(rows);
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(p) = &self.probe
            && let Some(c) = p.runs.get(seq as usize)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if seq >= self.measured_from {
            self.done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn snapshot_value(s: &RepartSnapshot) -> serde_json::Value {
    serde_json::to_value(s).unwrap_or(serde_json::Value::Null)
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, BenchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| BenchError::Target {
            reason: format!("cannot build a runtime: {e}"),
        })?;
    Ok(rt.block_on(f))
}

/// Replays `requests` (after the population of `config.records` keys) through the executor;
/// `file` names the request file in the result. Call it from a plain thread (it blocks).
pub fn replay(
    config: &ReplayConfig,
    requests: &[Request],
    file: &str,
) -> Result<ReplayResult, BenchError> {
    run(config, requests, file, false).map(|(r, _)| r)
}

/// [`replay`], returning also how many times each request ran when `probe` (population
/// first, then the measured stream).
fn run(
    config: &ReplayConfig,
    requests: &[Request],
    file: &str,
    probe: bool,
) -> Result<(ReplayResult, Vec<u8>), BenchError> {
    config.validate()?;
    let population: Vec<Request> = kvpaxos::population(config.records).collect();
    let n_pop = population.len() as u64;
    let total = n_pop + requests.len() as u64;
    let engine = MemEngine::new();
    engine.set_gc_horizon(Timestamp::MAX);
    let ctx = Arc::new(Ctx {
        engine,
        value_size: config.value_size,
        done: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        read_misses: AtomicU64::new(0),
        scan_mismatches: AtomicU64::new(0),
        scan_keys: AtomicU64::new(0),
        measured_from: n_pop,
        probe: probe.then(|| Probe {
            runs: (0..total).map(|_| AtomicU8::new(0)).collect(),
        }),
    });
    let exec = Executor::<u32>::start(
        &config.executor_config(),
        Runtime::Threads { pin: config.pin },
    )
    .map_err(|e| BenchError::InvalidProperty {
        property: "--mode".into(),
        reason: e.to_string(),
    })?;
    let mut keys: Vec<u32> = Vec::with_capacity(16);
    let mut dispatch = |seq: u64, r: Request| {
        keys.clear();
        keys.extend(r.keys());
        let c = ctx.clone();
        exec.dispatch(&keys, Box::new(move || c.execute(r, seq)));
    };

    // The population.
    let t = Instant::now();
    for (seq, r) in population.into_iter().enumerate() {
        dispatch(seq as u64, r);
    }
    block_on(exec.quiesce())?;
    let population_s = t.elapsed().as_secs_f64();
    let after_pop = exec.stats().snapshot();
    exec.stats().reset_stall();

    // The measured stream, with the sampler.
    let stats = exec.stats().clone();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let (makespan, mut bins) = std::thread::scope(|s| -> Result<_, BenchError> {
        let sampler = s.spawn(|| {
            let mut bins = Vec::new();
            let mut next = t0 + config.bin;
            let mut last = 0;
            loop {
                loop {
                    let now = Instant::now();
                    if stop.load(Ordering::Acquire) || now >= next {
                        break;
                    }
                    std::thread::sleep((next - now).min(Duration::from_millis(20)));
                }
                let stopped = stop.load(Ordering::Acquire);
                let t = t0.elapsed().as_secs_f64();
                let done = ctx.done.load(Ordering::Relaxed);
                let snap = stats.snapshot();
                stats.reset_stall();
                bins.push(Bin {
                    t_s: t,
                    completed: done - last,
                    dispatched: snap.dispatched,
                    stall_max_us: snap.dispatch_stall_max_us,
                    partitions: snap.partitions,
                    swaps: snap.swaps,
                    keys_moved_total: snap.keys_moved_total,
                    graph_vertices: snap.graph_vertices,
                    tracker_lag: snap.tracked_sent.saturating_sub(snap.tracked),
                    sync_requests: snap.sync_requests,
                });
                last = done;
                if stopped {
                    return bins;
                }
                next += config.bin;
            }
        });
        for (i, &r) in requests.iter().enumerate() {
            dispatch(n_pop + i as u64, r);
        }
        let q = block_on(exec.quiesce());
        let makespan = t0.elapsed();
        stop.store(true, Ordering::Release);
        let bins = sampler.join().map_err(|_| BenchError::Target {
            reason: "the throughput sampler panicked".into(),
        })?;
        q?;
        Ok((makespan, bins))
    })?;
    let end = exec.stats().snapshot();
    exec.shutdown();
    let makespan_s = makespan.as_secs_f64();
    // The final bin ends at the makespan (it was sampled just after).
    if let Some(last) = bins.last_mut() {
        last.t_s = makespan_s;
    }
    if bins.len() >= 2 && bins[bins.len() - 1].t_s <= bins[bins.len() - 2].t_s {
        // The last full bin was sampled after the makespan: fold the empty tail into it.
        let tail = bins.pop().unwrap_or_else(|| unreachable!());
        if let Some(last) = bins.last_mut() {
            last.completed += tail.completed;
            last.t_s = makespan_s;
            last.stall_max_us = last.stall_max_us.max(tail.stall_max_us);
        }
    }
    let measured_stall_max_us = bins.iter().map(|b| b.stall_max_us).max().unwrap_or(0);
    let executed = ctx.done.load(Ordering::Relaxed);
    let runs = ctx
        .probe
        .as_ref()
        .map(|p| p.runs.iter().map(|c| c.load(Ordering::Relaxed)).collect())
        .unwrap_or_default();
    let result = ReplayResult {
        label: if config.label.is_empty() {
            default_label(config.mode, config.window)
        } else {
            config.label.clone()
        },
        file: file.to_owned(),
        mode: config.mode.to_string(),
        shards: config.executor_config().shard_count(),
        window: config.window,
        partitioner: match config.partitioner {
            PartitionerKind::Metis => "metis".into(),
            PartitionerKind::Fennel => "fennel".into(),
        },
        unmapped: match config.unmapped {
            UnmappedPolicy::Drop => "drop".into(),
            UnmappedPolicy::Keep => "keep".into(),
        },
        relabel: config.relabel,
        value_size: config.value_size,
        queue_cap: config.queue_cap,
        pin: config.pin,
        actor_nice: config.actor_nice,
        records: config.records,
        population: n_pop,
        requests: requests.len() as u64,
        ops: OpCounts::of(requests),
        executed,
        engine_errors: ctx.errors.load(Ordering::Relaxed),
        read_misses: ctx.read_misses.load(Ordering::Relaxed),
        scan_mismatches: ctx.scan_mismatches.load(Ordering::Relaxed),
        scan_keys_read: ctx.scan_keys.load(Ordering::Relaxed),
        population_s,
        makespan_s,
        throughput_rps: if makespan_s > 0.0 {
            requests.len() as f64 / makespan_s
        } else {
            0.0
        },
        population_stall_max_us: after_pop.dispatch_stall_max_us,
        measured_stall_max_us,
        measured_stalls_over: std::array::from_fn(|i| {
            end.dispatch_stalls_over[i].saturating_sub(after_pop.dispatch_stalls_over[i])
        }),
        bins,
        stats_after_population: snapshot_value(&after_pop),
        stats: snapshot_value(&end),
    };
    Ok((result, runs))
}

/// `n_records` of a request file generated by [`kvpaxos::generate`]: inserts take sequential
/// keys from `n_records`, so it is the smallest WRITE key. `None` without writes.
pub fn infer_records(requests: &[Request]) -> Option<u32> {
    requests
        .iter()
        .filter(|r| r.op == Op::Write)
        .map(|r| r.key)
        .min()
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The bins as CSV, one line per bin.
pub fn bins_csv(result: &ReplayResult) -> String {
    let mut out = String::from(
        "t_s,completed,dispatched,stall_max_us,partitions,swaps,keys_moved_total,graph_vertices,tracker_lag,sync_requests\n",
    );
    for b in &result.bins {
        let _ = writeln!(
            out,
            "{:.3},{},{},{},{},{},{},{},{},{}",
            b.t_s,
            b.completed,
            b.dispatched,
            b.stall_max_us,
            b.partitions,
            b.swaps,
            b.keys_moved_total,
            b.graph_vertices,
            b.tracker_lag,
            b.sync_requests
        );
    }
    out
}

/// Writes `result.json` and `bins.csv` into `dir` (created); returns their paths.
pub fn write_result(dir: &Path, result: &ReplayResult) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let json = dir.join("result.json");
    let text = serde_json::to_string_pretty(result).map_err(|e| io_err(&json, e))?;
    std::fs::write(&json, text + "\n").map_err(|e| io_err(&json, e))?;
    let csv = dir.join("bins.csv");
    std::fs::write(&csv, bins_csv(result)).map_err(|e| io_err(&csv, e))?;
    Ok(vec![json, csv])
}

// ---------------------------------------------------------------------------------------------
// The study's report: tables, shape checks and plots over a directory of runs.

/// Where a run sorts in tables: SW, RR, NS by window, Free, Base by (window, Δp).
fn order_key(r: &ReplayResult) -> (u8, usize, u64, String) {
    let mode: Mode = r.mode.parse().unwrap_or(Mode::Off);
    let (rank, interval) = match mode {
        Mode::Single => (0, 0),
        Mode::RoundRobin => (1, 0),
        Mode::NonStop => (2, 0),
        Mode::Free { interval } => (3, interval),
        Mode::Base { interval } => (4, interval),
        Mode::Off => (5, 0),
    };
    (rank, r.window, interval, r.label.clone())
}

/// Every `result.json` under `dir/<workload>/<run>/`, by workload, in table order.
pub fn load_results(dir: &Path) -> Result<BTreeMap<String, Vec<ReplayResult>>, BenchError> {
    let mut out: BTreeMap<String, Vec<ReplayResult>> = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| io_err(dir, e))?;
    for w in entries.flatten() {
        if !w.path().is_dir() {
            continue;
        }
        let workload = w.file_name().to_string_lossy().into_owned();
        let runs = std::fs::read_dir(w.path()).map_err(|e| io_err(&w.path(), e))?;
        for run in runs.flatten() {
            let path = run.path().join("result.json");
            if !path.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|e| io_err(&path, e))?;
            let r: ReplayResult = serde_json::from_str(&text).map_err(|e| io_err(&path, e))?;
            out.entry(workload.clone()).or_default().push(r);
        }
    }
    for runs in out.values_mut() {
        runs.sort_by_key(order_key);
    }
    Ok(out)
}

fn is(r: &ReplayResult, f: impl Fn(Mode) -> bool) -> bool {
    r.mode.parse().map(f).unwrap_or(false)
}

/// One shape check: whether it holds and the numbers behind it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shape {
    /// The workload directory.
    pub workload: String,
    /// The shape, as the spec states it.
    pub shape: String,
    /// `Some(true)`: holds; `Some(false)`: does not; `None`: the runs it needs are missing.
    pub holds: Option<bool>,
    /// The numbers.
    pub detail: String,
}

/// The spec's "shapes that must hold", checked on one workload's runs (`d`: single-key,
/// `e`: multi-key; other names get both checks that apply).
pub fn shapes(workload: &str, runs: &[ReplayResult]) -> Vec<Shape> {
    let mut out = Vec::new();
    let best = |f: &dyn Fn(&ReplayResult) -> bool| {
        runs.iter()
            .filter(|r| f(r))
            .min_by(|a, b| a.makespan_s.total_cmp(&b.makespan_s))
    };
    let rr = best(&|r| is(r, |m| m == Mode::RoundRobin) && r.shards > 1);
    let any = best(&|_| true);
    let repart = best(&|r| is(r, Mode::tracks));
    let base = best(&|r| is(r, |m| matches!(m, Mode::Base { .. })));
    let ns_small = best(&|r| is(r, |m| m == Mode::NonStop) && r.window > 0 && r.window <= 1000);
    let ns_unwindowed = best(&|r| is(r, |m| m == Mode::NonStop) && r.window == 0);
    let multi_key = runs.iter().any(|r| r.ops.scan > 0);
    let mk = |shape: &str, holds: Option<bool>, detail: String| Shape {
        workload: workload.to_owned(),
        shape: shape.to_owned(),
        holds,
        detail,
    };
    if !multi_key {
        let shape = "single-key: RR ≈ the best (within 10 %), and repartitioning costs a little";
        match (rr, any, repart) {
            (Some(rr), Some(any), Some(rp)) => {
                let near = rr.makespan_s <= any.makespan_s * 1.10;
                let costs = rp.makespan_s >= rr.makespan_s * 0.98;
                out.push(mk(
                    shape,
                    Some(near && costs),
                    format!(
                        "RR {:.2} s; best overall {} {:.2} s; best repartitioning {} {:.2} s ({:+.1} % vs RR)",
                        rr.makespan_s,
                        any.label,
                        any.makespan_s,
                        rp.label,
                        rp.makespan_s,
                        100.0 * (rp.makespan_s / rr.makespan_s - 1.0)
                    ),
                ));
            }
            _ => out.push(mk(shape, None, "needs RR and a repartitioning run".into())),
        }
    } else {
        let shape = "multi-key: NS with a small window (W ≤ 1000) beats Base and RR by a wide margin (≥ 25 %)";
        match (ns_small, base, rr) {
            (Some(ns), Some(base), Some(rr)) => {
                let vs_base = 1.0 - ns.makespan_s / base.makespan_s;
                let vs_rr = 1.0 - ns.makespan_s / rr.makespan_s;
                out.push(mk(
                    shape,
                    Some(vs_base >= 0.25 && vs_rr >= 0.25),
                    format!(
                        "{} {:.2} s; best Base {} {:.2} s ({:.0} % less); RR {:.2} s ({:.0} % less). Paper: −46 % vs Base, −91 % vs RR",
                        ns.label,
                        ns.makespan_s,
                        base.label,
                        base.makespan_s,
                        100.0 * vs_base,
                        rr.makespan_s,
                        100.0 * vs_rr
                    ),
                ));
            }
            _ => out.push(mk(
                shape,
                None,
                "needs NS with W ≤ 1000, Base and RR".into(),
            )),
        }
        let shape =
            "unwindowed graph: the partitioner is too slow to matter (NS W=0 ≈ RR, within 25 %)";
        match (ns_unwindowed, rr) {
            (Some(ns), Some(rr)) => {
                let ratio = ns.makespan_s / rr.makespan_s;
                out.push(mk(
                    shape,
                    Some((0.75..=1.25).contains(&ratio)),
                    format!(
                        "NS W=0 {:.2} s with {} swaps (longest partition {:.1} s, graph {} vertices); RR {:.2} s (ratio {:.2})",
                        ns.makespan_s,
                        ns.stat("swaps"),
                        ns.stat("partition_us_max") as f64 / 1e6,
                        ns.stat("graph_vertices"),
                        rr.makespan_s,
                        ratio
                    ),
                ));
            }
            _ => out.push(mk(shape, None, "needs NS W=0 and RR".into())),
        }
    }
    out
}

/// The run table of one workload, as Markdown.
pub fn table(runs: &[ReplayResult]) -> String {
    let rr = runs
        .iter()
        .find(|r| is(r, |m| m == Mode::RoundRobin) && r.shards > 1)
        .map(|r| r.makespan_s);
    let mut t = String::from(
        "| run | makespan s | vs RR | mean kreq/s | peak kreq/s | lowest kreq/s | max dispatch stall ms | stalls ≥ 10 ms | partitions | swaps | longest swap ms | longest partition ms | last graph V / E | keys moved (raw) | sync requests | population s | checks |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|\n",
    );
    for r in runs {
        let (peak, dip) = r.peak_and_dip_rps();
        let vs = rr.map_or("–".to_string(), |rr| {
            format!("{:+.0} %", 100.0 * (r.makespan_s / rr - 1.0))
        });
        let ok = r.executed == r.requests
            && r.engine_errors == 0
            && r.read_misses == 0
            && r.scan_mismatches == 0;
        let checks = if ok {
            "ok".to_string()
        } else {
            format!(
                "executed {}/{}, errors {}, read misses {}, scan mismatches {}",
                r.executed, r.requests, r.engine_errors, r.read_misses, r.scan_mismatches
            )
        };
        let _ = writeln!(
            t,
            "| {} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {} | {} | {} | {:.1} | {:.0} | {} / {} | {} ({}) | {} | {:.1} | {} |",
            r.label,
            r.makespan_s,
            vs,
            r.throughput_rps / 1e3,
            peak / 1e3,
            dip / 1e3,
            r.measured_stall_max_us as f64 / 1e3,
            r.measured_stalls_over[1],
            r.stat("partitions"),
            r.stat("swaps"),
            r.stat("swap_us_max") as f64 / 1e3,
            r.stat("partition_us_max") as f64 / 1e3,
            r.stat("graph_vertices"),
            r.stat("graph_edges"),
            r.stat("keys_moved_total"),
            r.stat("keys_moved_raw_total"),
            r.stat("sync_requests"),
            r.population_s,
            checks
        );
    }
    t
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes a horizontal bar chart as SVG: one bar per `(label, value)`, the value printed at
/// its end. Deterministic; no fonts needed (text stays text).
pub fn svg_bars(
    path: &Path,
    title: &str,
    unit: &str,
    bars: &[(String, f64)],
) -> Result<(), BenchError> {
    let (left, right, top, row) = (190.0, 120.0, 50.0, 26.0);
    let width = 900.0;
    let plot_w = width - left - right;
    let height = top + row * bars.len().max(1) as f64 + 30.0;
    let max = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" font-family=\"sans-serif\" font-size=\"13\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"28\" font-size=\"17\" text-anchor=\"middle\">{}</text>",
        width / 2.0,
        escape(title)
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = top + row * i as f64;
        let w = if max > 0.0 && v.is_finite() {
            plot_w * v / max
        } else {
            0.0
        };
        let colour = ["#4E79A7", "#F28E2B", "#E15759", "#76B7B2", "#59A14F"][i % 5];
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            y + row * 0.65,
            escape(label)
        );
        let _ = writeln!(
            s,
            "<rect x=\"{left}\" y=\"{}\" width=\"{w:.1}\" height=\"{}\" fill=\"{colour}\"/>",
            y + 3.0,
            row - 6.0
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\">{} {}</text>",
            left + w + 6.0,
            y + row * 0.65,
            fmt_num(*v),
            escape(unit)
        );
    }
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{left}\" y2=\"{}\" stroke=\"#888\"/>",
        top,
        top + row * bars.len() as f64
    );
    s.push_str("</svg>\n");
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    std::fs::write(path, s).map_err(|e| io_err(path, e))
}

fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn series(r: &ReplayResult) -> ThroughputSeries {
    // Bins are 1 s; the last, shorter one is scaled by `measured` in the plot.
    ThroughputSeries {
        label: format!("{} ({:.1} s)", r.label, r.makespan_s),
        per_second: r.bins.iter().map(|b| b.completed).collect(),
        measured: Some((0.0, r.makespan_s.max(0.0))),
    }
}

/// Writes the study's report for every workload under `dir` (see [`load_results`]) into
/// `out`: `summary.md` (tables and shape checks), throughput over time (PNG and SVG, one
/// figure with SW/RR/NS and one with SW/RR/Base per workload), and SVG bars of makespan,
/// longest dispatch stall and keys moved. Returns the summary.
pub fn report(dir: &Path, out: &Path) -> Result<String, BenchError> {
    let all = load_results(dir)?;
    let mut md = String::from(
        "# In-node repartitioning: results\n\nGenerated by `meridian bench repart-plot`.\n",
    );
    for (workload, runs) in &all {
        let _ = writeln!(md, "\n## Workload {workload}\n");
        if let Some(r) = runs.first() {
            let _ = writeln!(
                md,
                "{} requests after a population of {} keys ({} reads, {} inserts, {} scans, {} updates); {} B values; queue cap {} per shard; partitioner {}, unmapped keys {}.\n",
                r.requests,
                r.population,
                r.ops.read,
                r.ops.write,
                r.ops.scan,
                r.ops.update,
                r.value_size,
                r.queue_cap,
                r.partitioner,
                r.unmapped
            );
        }
        md.push_str(&table(runs));
        md.push_str("\nShapes:\n\n");
        for s in shapes(workload, runs) {
            let verdict = match s.holds {
                Some(true) => "**holds**",
                Some(false) => "**does not hold**",
                None => "not checked",
            };
            let _ = writeln!(md, "- {}: {verdict}. {}", s.shape, s.detail);
        }
        let reference = |r: &ReplayResult| is(r, |m| matches!(m, Mode::Single | Mode::RoundRobin));
        let ns: Vec<_> = runs
            .iter()
            .filter(|r| reference(r) || is(r, |m| matches!(m, Mode::NonStop | Mode::Free { .. })))
            .map(series)
            .collect();
        let base: Vec<_> = runs
            .iter()
            .filter(|r| reference(r) || is(r, |m| matches!(m, Mode::Base { .. })))
            .map(series)
            .collect();
        plot::throughput_over_time(
            &out.join(format!("throughput_{workload}_ns")),
            &format!(
                "YCSB {}: SW, RR and non-stop, requests/s",
                workload.to_uppercase()
            ),
            &ns,
        )?;
        plot::throughput_over_time(
            &out.join(format!("throughput_{workload}_base")),
            &format!(
                "YCSB {}: SW, RR and Base, requests/s",
                workload.to_uppercase()
            ),
            &base,
        )?;
        let bars = |f: &dyn Fn(&ReplayResult) -> f64| -> Vec<(String, f64)> {
            runs.iter().map(|r| (r.label.clone(), f(r))).collect()
        };
        let up = workload.to_uppercase();
        svg_bars(
            &out.join(format!("makespan_{workload}.svg")),
            &format!("YCSB {up}: makespan"),
            "s",
            &bars(&|r| r.makespan_s),
        )?;
        svg_bars(
            &out.join(format!("stall_{workload}.svg")),
            &format!("YCSB {up}: longest dispatch stall (measured stream)"),
            "ms",
            &bars(&|r| r.measured_stall_max_us as f64 / 1e3),
        )?;
        svg_bars(
            &out.join(format!("keys_moved_{workload}.svg")),
            &format!("YCSB {up}: keys moved by repartitioning (after relabelling)"),
            "keys",
            &bars(&|r| r.stat("keys_moved_total") as f64),
        )?;
        let _ = writeln!(
            md,
            "\nPlots: `throughput_{workload}_ns.{{png,svg}}`, `throughput_{workload}_base.{{png,svg}}`, `makespan_{workload}.svg`, `stall_{workload}.svg`, `keys_moved_{workload}.svg`."
        );
    }
    std::fs::create_dir_all(out).map_err(|e| io_err(out, e))?;
    let path = out.join("summary.md");
    std::fs::write(&path, &md).map_err(|e| io_err(&path, e))?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kvpaxos::{Workload, generate};

    fn tiny(mode: Mode, workload: &Workload) -> (ReplayResult, Vec<u8>, Vec<Request>) {
        let requests: Vec<Request> = generate(workload, 7).unwrap().collect();
        let mut c = ReplayConfig::new(mode, workload.n_records);
        c.partitioner = PartitionerKind::Fennel;
        c.window = 500;
        c.value_size = 64;
        c.queue_cap = 64;
        c.bin = Duration::from_millis(50);
        let (r, runs) = run(&c, &requests, "tiny", true).unwrap();
        (r, runs, requests)
    }

    const MODES: [Mode; 5] = [
        Mode::Single,
        Mode::RoundRobin,
        Mode::Base { interval: 700 },
        Mode::Free { interval: 700 },
        Mode::NonStop,
    ];

    #[test]
    fn every_request_runs_exactly_once_in_every_mode() {
        for workload in [Workload::ycsb_d(1000, 5000), Workload::ycsb_e(1000, 5000)] {
            for mode in MODES {
                let (r, runs, requests) = tiny(mode, &workload);
                assert_eq!(runs.len(), 1001 + 5000, "{mode}");
                if let Some(i) = runs.iter().position(|&n| n != 1) {
                    panic!("{mode}: request {i} ran {} times", runs[i]);
                }
                assert_eq!(r.executed, 5000, "{mode}");
                assert_eq!(r.requests, 5000);
                assert_eq!(r.population, 1001);
                assert_eq!(r.engine_errors, 0, "{mode}");
                // Every read and scan sees keys populated or inserted earlier in dispatch
                // order, whatever shard ran them.
                assert_eq!(r.read_misses, 0, "{mode}");
                assert_eq!(r.scan_mismatches, 0, "{mode}");
                let scanned: u64 = requests
                    .iter()
                    .filter(|q| q.op == Op::Scan)
                    .map(|q| u64::from(q.arg))
                    .sum();
                assert_eq!(r.scan_keys_read, scanned, "{mode}");
                assert_eq!(r.ops, OpCounts::of(&requests));
                assert_eq!(
                    r.bins.iter().map(|b| b.completed).sum::<u64>(),
                    5000,
                    "{mode}"
                );
                assert_eq!(r.stat("dispatched"), 6001, "{mode}");
                assert_eq!(r.shards, if mode == Mode::Single { 1 } else { 8 });
                if mode.tracks() {
                    assert!(r.stat("partitions") > 0, "{mode}: {:?}", r.stats);
                }
            }
        }
    }

    #[test]
    fn scans_read_the_keys_they_were_placed_by() {
        let c = Ctx {
            engine: MemEngine::new(),
            value_size: 16,
            done: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            read_misses: AtomicU64::new(0),
            scan_mismatches: AtomicU64::new(0),
            scan_keys: AtomicU64::new(0),
            measured_from: 0,
            probe: None,
        };
        for k in [1u32, 2, 3, 255, 256, 257, 65_536] {
            c.execute(
                Request {
                    op: Op::Write,
                    key: k,
                    arg: 0,
                },
                u64::from(k),
            );
        }
        // 255, 256, 257 are consecutive as integers and as big-endian bytes.
        c.execute(
            Request {
                op: Op::Scan,
                key: 255,
                arg: 3,
            },
            1000,
        );
        assert_eq!(c.scan_mismatches.load(Ordering::Relaxed), 0);
        assert_eq!(c.scan_keys.load(Ordering::Relaxed), 3);
        // 3, 4, 5: 4 and 5 are absent, so the engine returns 3 alone: a mismatch.
        c.execute(
            Request {
                op: Op::Scan,
                key: 3,
                arg: 3,
            },
            1001,
        );
        assert_eq!(c.scan_mismatches.load(Ordering::Relaxed), 1);
        c.execute(
            Request {
                op: Op::Read,
                key: 4,
                arg: 0,
            },
            1002,
        );
        assert_eq!(c.read_misses.load(Ordering::Relaxed), 1);
        assert_eq!(c.done.load(Ordering::Relaxed), 10);
        let v = c
            .engine
            .get_value(&kvpaxos::key_bytes(2), Timestamp::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(v.len(), 16);
        assert_eq!(&v[..4], &2u32.to_be_bytes());
    }

    #[test]
    fn the_result_has_its_fields_and_round_trips() {
        let (r, _, _) = tiny(Mode::NonStop, &Workload::ycsb_e(1000, 2000));
        let v = serde_json::to_value(&r).unwrap();
        for field in [
            "label",
            "mode",
            "makespan_s",
            "throughput_rps",
            "population_s",
            "bins",
            "executed",
            "measured_stall_max_us",
            "population_stall_max_us",
            "stats",
        ] {
            assert!(v.get(field).is_some(), "{field} missing: {v}");
        }
        for field in [
            "dispatch_stall_max_us",
            "sync_requests",
            "partitions",
            "partition_us_max",
            "csr_us_max",
            "graph_vertices",
            "graph_edges",
            "edge_cut",
            "imbalance_milli",
            "keys_moved_total",
            "keys_moved_raw_total",
            "swaps",
            "swap_us_max",
        ] {
            assert!(v["stats"].get(field).is_some(), "stats.{field} missing");
        }
        assert_eq!(r.label, "NS W=500");
        assert_eq!(r.mode, "non_stop");
        let back: ReplayResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
        let csv = bins_csv(&r);
        assert_eq!(csv.lines().count(), r.bins.len() + 1);
        assert!(csv.starts_with("t_s,completed,"));
        let dir = tempfile::tempdir().unwrap();
        write_result(&dir.path().join("e").join("ns"), &r).unwrap();
        let mut rr = r.clone();
        rr.mode = "round_robin".into();
        rr.label = "RR".into();
        write_result(&dir.path().join("e").join("rr"), &rr).unwrap();
        let loaded = load_results(dir.path()).unwrap();
        assert_eq!(loaded["e"].len(), 2);
        assert_eq!(loaded["e"][0].label, "RR");
        let md = report(dir.path(), &dir.path().join("out")).unwrap();
        assert!(md.contains("| NS W=500 |"), "{md}");
        assert!(dir.path().join("out/makespan_e.svg").is_file());
        assert!(dir.path().join("out/throughput_e_ns.png").is_file());
    }

    #[test]
    fn settings_are_validated_naming_the_flag() {
        let mut c = ReplayConfig::new(Mode::RoundRobin, 10);
        c.value_size = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("--value-size")
        );
        let mut c = ReplayConfig::new(Mode::RoundRobin, 10);
        c.queue_cap = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("--queue-cap")
        );
        let mut c = ReplayConfig::new(Mode::RoundRobin, 10);
        c.shards = 0;
        assert!(c.validate().unwrap_err().to_string().contains("--shards"));
        for nice in [-1, 20] {
            let mut c = ReplayConfig::new(Mode::NonStop, 10);
            c.actor_nice = nice;
            assert!(
                c.validate()
                    .unwrap_err()
                    .to_string()
                    .contains("--actor-nice")
            );
        }
        assert!(
            ReplayConfig::new(Mode::Off, 10)
                .validate()
                .unwrap_err()
                .to_string()
                .contains("--mode")
        );
        assert!(ReplayConfig::new(Mode::NonStop, 10).validate().is_ok());
    }

    #[test]
    fn records_are_inferred_from_the_first_insert() {
        let requests: Vec<Request> = generate(&Workload::ycsb_d(1000, 3000), 1)
            .unwrap()
            .collect();
        assert_eq!(infer_records(&requests), Some(1000));
        assert_eq!(infer_records(&[]), None);
    }
}
