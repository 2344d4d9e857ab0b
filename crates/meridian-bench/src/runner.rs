//! The load generator core (spec `experiments.md` §4, issue 6 point 1): drives a
//! [`CoreWorkload`] against any [`Target`] with one of three [`Arrival`] processes and records
//! every operation into [`stats::Recorder`]s.
//!
//! - [`Arrival::Closed`] (`max`): each client thread runs its next op as soon as the previous
//!   one completes.
//! - [`Arrival::Paced`] (basho_bench `{rate, λ}`): each thread sleeps `Exp(mean 1/λ)`, then runs
//!   one op; latency is measured from the op's actual start. **This is a closed loop**: a slow
//!   op delays the thread's next op, so throughput drops and stalls are under-reported
//!   (coordinated omission), exactly as in the geo study.
//! - [`Arrival::Open`]: Poisson arrivals independent of completions; each op runs as its own
//!   task and its latency is measured from its **intended** start, so a stalled target shows up
//!   in the latencies of every op that should have started during the stall. A cap on in-flight
//!   ops bounds memory; arrivals over the cap are *counted* ([`RunResult::ops_dropped`] and error
//!   code [`DROPPED`]), never silently skipped, and starts later than their intended time are
//!   counted in [`RunResult::late_starts`]. Tokio's timers fire on a 1 ms grid, so an open-loop
//!   op may start up to 1 ms after its intended start; that lag is *in* its latency (it did
//!   start late) and is reported in [`RunResult::max_start_lag`].
//!
//! Guarantees:
//! - **One clock:** every time comes from [`tokio::time::Instant`], so the same code runs in
//!   real time, under a paused test clock and in the simulator's virtual time; no OS clock read.
//! - **Deterministic choices:** client `c` draws from `ChaCha8Rng::seed_from_u64(seed)` on stream
//!   `c`, so its sequence of ops, keys, values and sleeps depends only on the seed, the
//!   workload and `c` — never on the target's timing or the scheduler — except in workloads
//!   with inserts, whose key numbers and readable key range follow the inserts completed so
//!   far, as in YCSB (in virtual time that too replays exactly).
//! - **Warm-up excluded:** samples whose intended start is before [`RunConfig::warmup`] are not
//!   in the report; the run lasts at most `warmup + duration`. When [`RunConfig::max_ops`]
//!   fixes the number of ops, the warm-up also ends after the first
//!   [`WARMUP_MAX_SHARE`] of them, so a short run is never swallowed whole by its warm-up:
//!   an op is excluded only if it started before the warm-up time **and** was among those
//!   first ops.
//! - **Bounded end:** no op starts after `warmup + duration`; ops still running then get
//!   [`RunConfig::drain_timeout`] to finish, after which they are abandoned and recorded with
//!   error code [`ABANDONED`], so a hung target cannot hang the run.
//!
//! A target must take non-zero (virtual) time or yield to a timer: under a paused clock a
//! closed loop against a target that never waits would never see time advance.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::BenchError;
use crate::generator::KeyChooser;
use crate::locality::{LocalityChooser, home_dc};
use crate::stats::{self, Locality, Recorder};
use crate::workload::{CoreWorkload, Op, OpChooser, ScanLengthChooser};

/// The smallest paced or open-loop rate, in ops/s: one operation per 1000 s on average
/// (the largest exponential gap stays far inside `Duration`).
pub const MIN_RATE: f64 = 1e-3;

/// Error code of an open-loop arrival refused because [`RunConfig::max_in_flight`] ops were
/// already running.
pub const DROPPED: &str = "DROPPED";
/// Error code of an op still running [`RunConfig::drain_timeout`] after the run's end.
pub const ABANDONED: &str = "ABANDONED";
/// Error code of an op whose target task panicked (open loop).
pub const PANICKED: &str = "PANICKED";
/// An open-loop op that starts more than this after its intended start counts as late.
pub const LATE_START_THRESHOLD: Duration = Duration::from_millis(1);
/// Interval between two progress callbacks.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// What an op carries besides its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Nothing (reads).
    None,
    /// The value to write (updates, inserts, read-modify-writes).
    Value(Vec<u8>),
    /// The number of records to scan (scans).
    ScanLength(u64),
}

/// One operation for a [`Target`] to execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The operation type.
    pub op: Op,
    /// The key number (its home DC is `keynum mod dcs`).
    pub keynum: u64,
    /// The key's bytes (YCSB's `user…` name).
    pub key: Vec<u8>,
    /// Value or scan length.
    pub payload: Payload,
    /// The issuing client's DC: a target talks only to nodes in that DC.
    pub dc: u32,
    /// The issuing client's index (open loop: the DC's generator).
    pub client: u32,
    /// The op's position in its client's sequence, from 0.
    pub seq: u64,
}

/// A successful op's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The op's critical path crossed a DC boundary.
    pub remote: bool,
}

/// Something that executes requests: the embedded cluster, a RESP server, a fake in tests.
///
/// `Err` carries a short error code (`TIMEOUT`, `UNAVAILABLE`, ...) that reports count by.
pub trait Target: Send + Sync + 'static {
    /// Executes one request.
    fn execute(&self, request: Request) -> impl Future<Output = Result<Outcome, String>> + Send;
}

/// When ops start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    /// `threads` client threads, each running ops back to back (`max`).
    Closed {
        /// Client threads in all, spread round-robin over the DCs.
        threads: u32,
    },
    /// `threads` client threads, each sleeping `Exp(mean 1 / rate_per_thread)` before each op
    /// (basho_bench `{rate, λ}`; a closed loop, latency from the op's start).
    Paced {
        /// Client threads in all, spread round-robin over the DCs.
        threads: u32,
        /// λ, in ops per second per thread.
        rate_per_thread: f64,
    },
    /// Poisson arrivals at `rate` ops/s in all, split evenly over the DCs (one generator per
    /// DC); latency from the intended start.
    Open {
        /// Total arrival rate, ops per second.
        rate: f64,
    },
}

/// The largest share of a fixed number of ops ([`RunConfig::max_ops`]) the warm-up may take:
/// with YCSB's `operationcount` at 1000, at most the first 100 ops are excluded, however fast
/// they run.
pub const WARMUP_MAX_SHARE: f64 = 0.1;

/// How to run a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The arrival process; client DCs are `0..workload.dcs`.
    pub arrival: Arrival,
    /// The measured phase, after the warm-up.
    pub duration: Duration,
    /// The excluded phase at the start of the run (with `max_ops`, at most its first
    /// [`WARMUP_MAX_SHARE`] of ops).
    pub warmup: Duration,
    /// The run's seed; client `c` uses stream `c` of `ChaCha8Rng::seed_from_u64(seed)`.
    pub seed: u64,
    /// Open loop: most ops running at once (all DCs together); arrivals beyond are dropped
    /// and counted.
    pub max_in_flight: usize,
    /// How long ops still running at the run's end may take before being abandoned.
    pub drain_timeout: Duration,
    /// YCSB's `operationcount`: no op starts once this many have started (warm-up
    /// included; in an open loop, arrivals dropped by the in-flight cap count too); `None`,
    /// or 0, runs for the whole duration.
    pub max_ops: Option<u64>,
}

impl RunConfig {
    /// A configuration with no warm-up, seed 0, at most 10 000 ops in flight and a 10 s drain.
    pub fn new(arrival: Arrival, duration: Duration) -> Self {
        RunConfig {
            arrival,
            duration,
            warmup: Duration::ZERO,
            seed: 0,
            max_in_flight: 10_000,
            drain_timeout: Duration::from_secs(10),
            max_ops: None,
        }
    }

    fn validate(&self, workload: &CoreWorkload) -> Result<(), BenchError> {
        let bad = |reason: String| Err(BenchError::InvalidDesign { reason });
        match self.arrival {
            Arrival::Closed { threads } | Arrival::Paced { threads, .. } if threads == 0 => {
                return bad("a closed or paced run needs at least one thread".into());
            }
            Arrival::Paced {
                rate_per_thread, ..
            } if !(rate_per_thread.is_finite() && rate_per_thread >= MIN_RATE) => {
                return bad(format!(
                    "rate per thread {rate_per_thread} must be a finite number of ops/s of at \
                     least {MIN_RATE}"
                ));
            }
            // Below MIN_RATE an exponential gap (mean 1/rate) overflows `Duration`.
            Arrival::Open { rate } if !(rate.is_finite() && rate >= MIN_RATE) => {
                return bad(format!(
                    "open-loop rate {rate} must be a finite number of ops/s of at least \
                     {MIN_RATE}"
                ));
            }
            _ => {}
        }
        if self.duration.is_zero() {
            return bad("the measured duration must be positive".into());
        }
        if self.max_in_flight == 0 || self.max_in_flight > Semaphore::MAX_PERMITS {
            return bad(format!(
                "max_in_flight {} must be in 1..={}",
                self.max_in_flight,
                Semaphore::MAX_PERMITS
            ));
        }
        workload.validate()?;
        if workload.dcs == 0 || workload.record_count < u64::from(workload.dcs) {
            return bad(format!(
                "recordcount {} must be at least the number of DCs {} (and at least 1)",
                workload.record_count, workload.dcs
            ));
        }
        Ok(())
    }
}

/// A live snapshot, passed to the progress callback about once per [`PROGRESS_INTERVAL`].
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Time since the run start.
    pub elapsed: Duration,
    /// Still in the warm-up.
    pub warming_up: bool,
    /// Successful ops completed since the run start (warm-up included).
    pub completed: u64,
    /// Failed ops since the run start (warm-up included).
    pub errors: u64,
    /// Successful ops per second over the last interval.
    pub throughput: f64,
    /// p99 latency (µs) of the ops completed in the last interval; 0 if none.
    pub p99_us: u64,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The statistics of the measured phase.
    pub report: stats::Report,
    /// The merged samples the report was made from (histograms for CDF plots).
    pub recorder: Recorder,
    /// Successful ops per second over the measured phase.
    pub mean_throughput: f64,
    /// Ops handed to the target (warm-up included).
    pub ops_started: u64,
    /// Open loop: arrivals refused by the in-flight cap (warm-up included).
    pub ops_dropped: u64,
    /// Ops abandoned at the end of the drain (warm-up included).
    pub ops_abandoned: u64,
    /// Open loop: ops that started more than [`LATE_START_THRESHOLD`] after their intended start.
    pub late_starts: u64,
    /// Open loop: the largest gap between an op's intended and actual start.
    pub max_start_lag: Duration,
    /// From the run start until the last op finished or was abandoned.
    pub elapsed: Duration,
    /// The measured phase: from the warm-up end to the configured end, or to the last op's
    /// completion if `max_ops` ended the run earlier. Throughput and the histogram log span it.
    pub measured: Duration,
    /// Where the warm-up ended, since the run start: [`RunConfig::warmup`], or earlier when
    /// the first [`WARMUP_MAX_SHARE`] of `max_ops` had started by then (also
    /// `report.warmup_end_us`).
    pub warmup_end: Duration,
}

/// Op name as reports write it (the serde name of [`Op`]).
pub fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Update => "update",
        Op::Insert => "insert",
        Op::Scan => "scan",
        Op::ReadModifyWrite => "readmodifywrite",
    }
}

/// A client's random choices: everything that makes a [`Request`], from its own RNG.
struct RequestSource {
    rng: ChaCha8Rng,
    ops: OpChooser,
    keys: Keys,
    scans: ScanLengthChooser,
    workload: Arc<CoreWorkload>,
    client: u32,
    dc: u32,
    seq: u64,
    keys_space: Arc<KeySpace>,
}

/// The run's key space, shared by every client as YCSB shares it: inserts take the next key
/// number, and reads, updates and scans draw from the records loaded plus the inserts
/// acknowledged so far (YCSB's `AcknowledgedCounterGenerator`), so a workload such as D reads
/// what it inserted. An insert is acknowledged when it completes, successfully or not (as
/// YCSB does); the limit only moves past a key once every key below it is acknowledged.
struct KeySpace {
    next_insert: AtomicU64,
    limit: AtomicU64,
    /// Acknowledged inserts above the limit, waiting for the ones below them.
    pending: Mutex<std::collections::BTreeSet<u64>>,
}

impl KeySpace {
    fn new(record_count: u64) -> Self {
        KeySpace {
            next_insert: AtomicU64::new(record_count),
            limit: AtomicU64::new(record_count),
            pending: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    /// The number of keys reads may draw from.
    fn limit(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }

    fn next_insert(&self) -> u64 {
        self.next_insert.fetch_add(1, Ordering::Relaxed)
    }

    fn acknowledge(&self, keynum: u64) {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.insert(keynum);
        let mut limit = self.limit.load(Ordering::Acquire);
        while pending.remove(&limit) {
            limit += 1;
        }
        self.limit.store(limit, Ordering::Release);
    }
}

#[derive(Clone)]
enum Keys {
    Plain(KeyChooser),
    Local(LocalityChooser),
}

impl Keys {
    /// The workload's key choice, prepared for its record count: built once per run and
    /// cloned into every client, so no client computes zipfian constants during the run.
    fn prepared(workload: &CoreWorkload) -> Result<Keys, BenchError> {
        let n = workload.record_count;
        Ok(match workload.locality {
            Some(l) => {
                let mut c = LocalityChooser::new(workload.dcs, l, &workload.request_distribution)?;
                c.prepare(n);
                Keys::Local(c)
            }
            None => {
                let mut c = workload.key_chooser()?;
                c.prepare(n);
                Keys::Plain(c)
            }
        })
    }
}

impl RequestSource {
    fn new(
        workload: &Arc<CoreWorkload>,
        keys: Keys,
        keys_space: &Arc<KeySpace>,
        seed: u64,
        client: u32,
        dc: u32,
    ) -> Result<Self, BenchError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        // Streams of one key are independent sequences: clients share no randomness.
        rng.set_stream(u64::from(client));
        Ok(RequestSource {
            rng,
            ops: workload.op_chooser(),
            keys,
            scans: workload.scan_length_chooser()?,
            workload: Arc::clone(workload),
            client,
            dc,
            seq: 0,
            keys_space: Arc::clone(keys_space),
        })
    }

    /// An `Exp(mean)` sleep, by inversion (`1 - u` is in `(0, 1]`, so the log is finite).
    fn exponential(&mut self, mean: f64) -> Duration {
        let u: f64 = self.rng.random();
        Duration::from_secs_f64(-(1.0 - u).ln() * mean)
    }

    fn next(&mut self) -> Request {
        let op = self.ops.next_op(&mut self.rng);
        let n = self.keys_space.limit();
        let keynum = if op == Op::Insert {
            self.keys_space.next_insert()
        } else {
            match &mut self.keys {
                Keys::Plain(c) => c.next_key(&mut self.rng, n),
                Keys::Local(c) => c.next_key(&mut self.rng, self.dc, n),
            }
        };
        // Versions differ across clients and ops, so readers can tell writes apart.
        let version = (u64::from(self.client) << 40) | self.seq;
        let payload = match op {
            Op::Read => Payload::None,
            Op::Scan => Payload::ScanLength(self.scans.next_length(&mut self.rng)),
            Op::Update | Op::Insert | Op::ReadModifyWrite => {
                Payload::Value(self.workload.value(keynum, version))
            }
        };
        let request = Request {
            op,
            keynum,
            key: self.workload.key_name(keynum).into_bytes(),
            payload,
            dc: self.dc,
            client: self.client,
            seq: self.seq,
        };
        self.seq += 1;
        request
    }
}

/// Live figures since the last progress tick (coarse: 2 significant digits keep it small).
struct Live {
    completed: u64,
    errors: u64,
    interval_completed: u64,
    interval: Histogram<u64>,
}

/// The statistics of a shard of clients (client `c` records into shard `c mod shards`),
/// shared with their open-loop op tasks and the progress ticker. The lock is held only to
/// record a sample. Sharding rather than one recorder per client keeps the histograms few
/// (each is ~200 KB at 3 significant digits up to an hour): with hundreds of clients,
/// per-client histograms cost hundreds of MB and a cache miss per sample.
struct ClientStats {
    recorder: Recorder,
    live: Live,
}

type Shared = Arc<Mutex<ClientStats>>;

/// Stats shards: enough that worker threads rarely meet on one lock.
const STATS_SHARDS: usize = 16;

fn lock(stats: &Shared) -> MutexGuard<'_, ClientStats> {
    // A panic while recording leaves the counters consistent enough to keep reporting.
    stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The runner makes the warm-up cut itself ([`Warmup`]), so its recorders keep everything.
fn new_shared() -> Shared {
    let interval = Histogram::new_with_bounds(1, stats::MAX_LATENCY_US, 2)
        .expect("constant bounds 1 µs ..= 1 h with 2 significant digits are valid");
    Arc::new(Mutex::new(ClientStats {
        recorder: Recorder::new(Duration::ZERO),
        live: Live {
            completed: 0,
            errors: 0,
            interval_completed: 0,
            interval,
        },
    }))
}

/// Counters of one client (summed at the end).
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    started: u64,
    dropped: u64,
    abandoned: u64,
    late: u64,
    max_lag: Duration,
}

/// The warm-up cut: an op is excluded when its intended start is before `time` and it is
/// among the first `ops` ops (all ops when the run's count is not fixed).
struct Warmup {
    time: Duration,
    /// With [`RunConfig::max_ops`]: how many of the first ops the warm-up may take.
    ops: Option<u64>,
    /// The intended start (ns since the run start) of op number `ops`, the first one past
    /// the op-count warm-up; `u64::MAX` until it starts.
    ops_end_ns: AtomicU64,
}

impl Warmup {
    fn new(config: &RunConfig) -> Self {
        Warmup {
            time: config.warmup,
            ops: config
                .max_ops
                .filter(|&n| n > 0)
                .map(|n| (n as f64 * WARMUP_MAX_SHARE) as u64),
            ops_end_ns: AtomicU64::new(u64::MAX),
        }
    }

    /// Whether an op that intended to start at `at` and is inside the op-count window
    /// (see [`OpBudget::take`]) belongs to the warm-up.
    fn excludes(&self, at: Duration, in_window: bool) -> bool {
        in_window && at < self.time
    }

    /// Where the warm-up ends, as far as is known now: its time, or earlier once the first
    /// op past the op-count window has started.
    fn end(&self) -> Duration {
        let ops_end = self.ops_end_ns.load(Ordering::Relaxed);
        if ops_end == u64::MAX {
            self.time
        } else {
            self.time.min(Duration::from_nanos(ops_end))
        }
    }
}

/// The ops left to start under [`RunConfig::max_ops`], shared by every client.
struct OpBudget {
    max: u64,
    left: Option<AtomicU64>,
}

impl OpBudget {
    fn new(max_ops: Option<u64>) -> Self {
        let max = max_ops.filter(|&n| n > 0);
        OpBudget {
            max: max.unwrap_or(0),
            left: max.map(AtomicU64::new),
        }
    }

    /// Takes one op, meant to start at `at` since the run start, from the budget: `None`
    /// once it is spent, else whether the op is inside `warmup`'s op-count window (always,
    /// when the count is not fixed). The op just past the window marks where it ended.
    fn take(&self, at: Duration, warmup: &Warmup) -> Option<bool> {
        let Some(left) = &self.left else {
            return Some(true);
        };
        let before = left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .ok()?;
        let index = self.max - before;
        let window = warmup.ops.unwrap_or(u64::MAX);
        if index == window {
            let ns = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX - 1);
            warmup.ops_end_ns.store(ns, Ordering::Relaxed);
        }
        Some(index < window)
    }
}

/// Everything an op needs to execute and record itself.
struct OpContext<T> {
    target: Arc<T>,
    keys_space: Arc<KeySpace>,
    budget: Arc<OpBudget>,
    warmup: Arc<Warmup>,
    stats: Shared,
    start: Instant,
    /// Cancelled [`RunConfig::drain_timeout`] after the run's end: ops still running are
    /// abandoned. A token rather than a timer per op: arming a timer for every op costs more
    /// than the op's own bookkeeping under load.
    abandon: CancellationToken,
    dcs: u32,
}

// Not derived: a derive would require `T: Clone`, but only the `Arc` is cloned.
impl<T> Clone for OpContext<T> {
    fn clone(&self) -> Self {
        OpContext {
            target: Arc::clone(&self.target),
            keys_space: Arc::clone(&self.keys_space),
            budget: Arc::clone(&self.budget),
            warmup: Arc::clone(&self.warmup),
            stats: Arc::clone(&self.stats),
            start: self.start,
            abandon: self.abandon.clone(),
            dcs: self.dcs,
        }
    }
}

/// The locality an error is filed under: the target says nothing, so use the key's home.
fn expected_locality(keynum: u64, dc: u32, dcs: u32) -> Locality {
    if home_dc(keynum, dcs) == dc {
        Locality::Local
    } else {
        Locality::Remote
    }
}

/// Runs `request`, meant to start at `intended`, and records it (`in_window`: inside the
/// op-count warm-up window, [`OpBudget::take`]); returns whether it was abandoned, and when
/// it completed (a closed loop's next start: one clock read fewer per op).
async fn execute_and_record<T: Target>(
    ctx: &OpContext<T>,
    request: Request,
    intended: Instant,
    in_window: bool,
) -> (bool, Instant) {
    let name = op_name(request.op);
    let fallback = expected_locality(request.keynum, request.dc, ctx.dcs);
    let inserted = (request.op == Op::Insert).then_some(request.keynum);
    let result = tokio::select! {
        biased;
        r = ctx.target.execute(request) => Ok(r),
        () = ctx.abandon.cancelled() => Err(()),
    };
    if let Some(keynum) = inserted {
        ctx.keys_space.acknowledge(keynum);
    }
    let completed = Instant::now();
    let latency = completed.saturating_duration_since(intended);
    let intended_since_start = intended.saturating_duration_since(ctx.start);
    let warm = ctx.warmup.excludes(intended_since_start, in_window);
    let mut guard = lock(&ctx.stats);
    let stats = &mut *guard;
    if warm {
        stats.recorder.exclude_warmup_sample();
    }
    match result {
        Ok(Ok(outcome)) => {
            let locality = if outcome.remote {
                Locality::Remote
            } else {
                Locality::Local
            };
            if !warm {
                stats
                    .recorder
                    .record(name, locality, intended_since_start, latency);
            }
            stats.live.completed += 1;
            stats.live.interval_completed += 1;
            let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            stats.live.interval.saturating_record(us);
            (false, completed)
        }
        Ok(Err(code)) => {
            if !warm {
                stats
                    .recorder
                    .record_error(name, fallback, intended_since_start, &code);
            }
            stats.live.errors += 1;
            (false, completed)
        }
        Err(_elapsed) => {
            if !warm {
                stats
                    .recorder
                    .record_error(name, fallback, intended_since_start, ABANDONED);
            }
            stats.live.errors += 1;
            (true, completed)
        }
    }
}

/// A closed or paced client: `mean_sleep` is `None` for closed.
async fn closed_client<T: Target>(
    ctx: OpContext<T>,
    mut source: RequestSource,
    end: Instant,
    mean_sleep: Option<f64>,
) -> Counters {
    let mut counters = Counters::default();
    let mut now = Instant::now();
    loop {
        if let Some(mean) = mean_sleep {
            let wake = now + source.exponential(mean);
            if wake >= end {
                break;
            }
            tokio::time::sleep_until(wake).await;
            now = Instant::now();
        }
        // Closed loop: the op's intended start is its actual start (for a closed loop, the
        // previous op's completion).
        if now >= end {
            break;
        }
        let Some(in_window) = ctx.budget.take(now - ctx.start, &ctx.warmup) else {
            break;
        };
        let request = source.next();
        counters.started += 1;
        let (abandoned, completed) = execute_and_record(&ctx, request, now, in_window).await;
        counters.abandoned += u64::from(abandoned);
        now = completed;
    }
    counters
}

/// One DC's open-loop generator: Poisson arrivals at `rate`, each op its own task.
async fn open_client<T: Target>(
    ctx: OpContext<T>,
    mut source: RequestSource,
    end: Instant,
    rate: f64,
    in_flight: Arc<Semaphore>,
) -> Counters {
    let mut counters = Counters::default();
    let mut tasks: JoinSet<bool> = JoinSet::new();
    let mean = 1.0 / rate;
    let mut intended = ctx.start;
    loop {
        // Arrival times accumulate from the schedule, not from when we woke: falling behind
        // never thins the arrival process.
        intended += source.exponential(mean);
        if intended >= end {
            break;
        }
        tokio::time::sleep_until(intended).await;
        while let Some(done) = tasks.try_join_next() {
            counters.abandoned += u64::from(reap(&ctx, done));
        }
        let at = intended.saturating_duration_since(ctx.start);
        let Some(in_window) = ctx.budget.take(at, &ctx.warmup) else {
            break;
        };
        let lag = Instant::now().saturating_duration_since(intended);
        if lag > LATE_START_THRESHOLD {
            counters.late += 1;
        }
        counters.max_lag = counters.max_lag.max(lag);
        // The request is drawn even when dropped: the op/key sequence stays seed-determined.
        let request = source.next();
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            counters.dropped += 1;
            let fallback = expected_locality(request.keynum, request.dc, ctx.dcs);
            let mut stats = lock(&ctx.stats);
            if ctx.warmup.excludes(at, in_window) {
                stats.recorder.exclude_warmup_sample();
            } else {
                stats
                    .recorder
                    .record_error(op_name(request.op), fallback, at, DROPPED);
            }
            stats.live.errors += 1;
            continue;
        };
        counters.started += 1;
        let op_ctx = ctx.clone();
        tasks.spawn(async move {
            let (abandoned, _) = execute_and_record(&op_ctx, request, intended, in_window).await;
            drop(permit);
            abandoned
        });
    }
    while let Some(done) = tasks.join_next().await {
        counters.abandoned += u64::from(reap(&ctx, done));
    }
    counters
}

/// A finished op task's "abandoned" flag; a panicked target is counted as an error.
fn reap<T>(ctx: &OpContext<T>, done: Result<bool, tokio::task::JoinError>) -> bool {
    match done {
        Ok(abandoned) => abandoned,
        Err(e) if e.is_panic() => {
            // The op's name and intended start died with the task: file the panic under
            // `unknown`, at the time it was noticed (so the warm-up cut still applies).
            let mut stats = lock(&ctx.stats);
            let at = Instant::now().saturating_duration_since(ctx.start);
            if at < ctx.warmup.end() {
                stats.recorder.exclude_warmup_sample();
            } else {
                stats
                    .recorder
                    .record_error("unknown", Locality::Local, at, PANICKED);
            }
            stats.live.errors += 1;
            false
        }
        Err(_) => false,
    }
}

/// Runs `workload` against `target` as `config` says; calls `progress` about once per second.
///
/// # Errors
/// [`BenchError`] if the workload or configuration is invalid (nothing has run then).
///
/// # Panics
/// If a closed or paced client task panics (that is, the target panicked).
pub async fn run<T, F>(
    target: Arc<T>,
    workload: &CoreWorkload,
    config: &RunConfig,
    mut progress: F,
) -> Result<RunResult, BenchError>
where
    T: Target,
    F: FnMut(&Progress) + Send,
{
    config.validate(workload)?;
    let workload = Arc::new(workload.clone());
    let dcs = workload.dcs;
    let clients = match config.arrival {
        Arrival::Closed { threads } | Arrival::Paced { threads, .. } => threads,
        Arrival::Open { .. } => dcs,
    };
    let keys_space = Arc::new(KeySpace::new(workload.record_count));
    // Prepare the key choice once, before the clock starts: zipfian setup is not free.
    let keys = Keys::prepared(&workload)?;
    let mut sources = Vec::with_capacity(clients as usize);
    for client in 0..clients {
        let dc = client % dcs;
        sources.push(RequestSource::new(
            &workload,
            keys.clone(),
            &keys_space,
            config.seed,
            client,
            dc,
        )?);
    }
    let start = Instant::now();
    let end = start + config.warmup + config.duration;
    let in_flight = Arc::new(Semaphore::new(config.max_in_flight));
    let budget = Arc::new(OpBudget::new(config.max_ops));
    let warmup = Arc::new(Warmup::new(config));
    let shards = sources.len().clamp(1, STATS_SHARDS);
    let all_stats: Vec<Shared> = (0..shards).map(|_| new_shared()).collect();
    let abandon_at = end + config.drain_timeout;
    let abandon = CancellationToken::new();
    let mut tasks: JoinSet<Counters> = JoinSet::new();
    for (client, source) in sources.into_iter().enumerate() {
        let ctx = OpContext {
            target: Arc::clone(&target),
            keys_space: Arc::clone(&keys_space),
            budget: Arc::clone(&budget),
            warmup: Arc::clone(&warmup),
            stats: Arc::clone(&all_stats[client % shards]),
            start,
            // A child per client: waiting ops register with their client's token, not
            // all with one.
            abandon: abandon.child_token(),
            dcs,
        };
        match config.arrival {
            Arrival::Closed { .. } => tasks.spawn(closed_client(ctx, source, end, None)),
            Arrival::Paced {
                rate_per_thread, ..
            } => tasks.spawn(closed_client(ctx, source, end, Some(1.0 / rate_per_thread))),
            Arrival::Open { rate } => tasks.spawn(open_client(
                ctx,
                source,
                end,
                rate / f64::from(dcs),
                Arc::clone(&in_flight),
            )),
        };
    }

    let mut totals = Counters::default();
    let mut next_tick = start + PROGRESS_INTERVAL;
    let mut last_tick = start;
    loop {
        tokio::select! {
            biased;
            done = tasks.join_next() => match done {
                Some(Ok(c)) => {
                    totals.started += c.started;
                    totals.dropped += c.dropped;
                    totals.abandoned += c.abandoned;
                    totals.late += c.late;
                    totals.max_lag = totals.max_lag.max(c.max_lag);
                }
                Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Some(Err(_)) => {}
                None => break,
            },
            () = tokio::time::sleep_until(abandon_at), if !abandon.is_cancelled() => {
                abandon.cancel();
            }
            () = tokio::time::sleep_until(next_tick) => {
                let now = Instant::now();
                progress(&snapshot(&all_stats, now - start, now - last_tick, &warmup));
                last_tick = now;
                next_tick += PROGRESS_INTERVAL;
            }
        }
    }
    let elapsed = Instant::now() - start;

    let mut merged = Recorder::new(Duration::ZERO);
    for stats in &all_stats {
        merged.merge(&lock(stats).recorder)?;
    }
    let warmup_end = warmup.end();
    merged.set_warmup_end(warmup_end);
    let report = merged.report();
    let measurement_end = elapsed.min(config.warmup + config.duration);
    let mean_throughput = merged.mean_throughput(measurement_end);
    Ok(RunResult {
        report,
        recorder: merged,
        mean_throughput,
        ops_started: totals.started,
        ops_dropped: totals.dropped,
        ops_abandoned: totals.abandoned,
        late_starts: totals.late,
        max_start_lag: totals.max_lag,
        elapsed,
        measured: measurement_end.saturating_sub(warmup_end),
        warmup_end,
    })
}

/// How a progress display announces a run of `config` before its first figures:
/// `warm-up: ...` saying what is excluded, or `measure` when nothing is.
pub fn warmup_phase(config: &RunConfig) -> String {
    let Some(ops) = Warmup::new(config).ops.filter(|_| !config.warmup.is_zero()) else {
        return if config.warmup.is_zero() {
            "measure".to_owned()
        } else {
            format!(
                "warm-up: the first {} s are excluded from the results",
                config.warmup.as_secs_f64()
            )
        };
    };
    format!(
        "warm-up: the first {} s or {ops} operations, whichever ends first, are excluded from \
         the results",
        config.warmup.as_secs_f64()
    )
}

/// What a load phase did.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadResult {
    /// Records inserted.
    pub inserted: u64,
    /// Records that could not be inserted after [`LOAD_ATTEMPTS`] attempts, by the last
    /// attempt's error code.
    pub failed: BTreeMap<String, u64>,
    /// Wall (or virtual) time the load took.
    pub elapsed: Duration,
}

/// Attempts per record in a load phase: a record missing after the load would turn every
/// later read of it into an error, so a transient failure is retried.
pub const LOAD_ATTEMPTS: u32 = 3;

/// YCSB's load phase: inserts records `0..recordcount` once each with `threads` clients in
/// a closed loop. Record `i` is inserted by a client of its home DC (`i mod dcs`), so a
/// timeline key starts mastered by its insert arbiter as in the study. `progress(done,
/// total)` is called about once per second.
///
/// # Errors
/// [`BenchError`] if the workload is invalid or `threads` is 0.
pub async fn load<T: Target>(
    target: Arc<T>,
    workload: &CoreWorkload,
    threads: u32,
    mut progress: impl FnMut(u64, u64) + Send,
) -> Result<LoadResult, BenchError> {
    workload.validate()?;
    if threads == 0 {
        return Err(BenchError::InvalidDesign {
            reason: "the load phase needs at least one thread".into(),
        });
    }
    let total = workload.record_count;
    let dcs = workload.dcs.max(1);
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks: JoinSet<(u64, BTreeMap<String, u64>)> = JoinSet::new();
    for t in 0..u64::from(threads) {
        let (target, done, workload) = (Arc::clone(&target), Arc::clone(&done), workload.clone());
        tasks.spawn(async move {
            let (mut inserted, mut failed) = (0, BTreeMap::new());
            let mut keynum = t;
            let mut seq = 0;
            while keynum < total {
                let mut last = String::new();
                for _ in 0..LOAD_ATTEMPTS {
                    let request = Request {
                        op: Op::Insert,
                        keynum,
                        key: workload.key_name(keynum).into_bytes(),
                        payload: Payload::Value(workload.value(keynum, 0)),
                        dc: home_dc(keynum, dcs),
                        client: t as u32,
                        seq,
                    };
                    seq += 1;
                    match target.execute(request).await {
                        Ok(_) => {
                            last.clear();
                            break;
                        }
                        Err(code) => last = code,
                    }
                }
                if last.is_empty() {
                    inserted += 1;
                } else {
                    *failed.entry(last).or_insert(0) += 1;
                }
                done.fetch_add(1, Ordering::Relaxed);
                keynum += u64::from(threads);
            }
            (inserted, failed)
        });
    }
    let mut result = LoadResult {
        inserted: 0,
        failed: BTreeMap::new(),
        elapsed: Duration::ZERO,
    };
    let mut next_tick = start + PROGRESS_INTERVAL;
    loop {
        tokio::select! {
            biased;
            finished = tasks.join_next() => match finished {
                Some(Ok((inserted, failed))) => {
                    result.inserted += inserted;
                    for (code, n) in failed {
                        *result.failed.entry(code).or_insert(0) += n;
                    }
                }
                Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Some(Err(_)) => {}
                None => break,
            },
            () = tokio::time::sleep_until(next_tick) => {
                progress(done.load(Ordering::Relaxed), total);
                next_tick += PROGRESS_INTERVAL;
            }
        }
    }
    result.elapsed = Instant::now() - start;
    Ok(result)
}

/// Sums the clients' live figures and resets their interval histograms: one small histogram
/// add per client per second, whatever the load.
fn snapshot(
    all_stats: &[Shared],
    elapsed: Duration,
    interval: Duration,
    warmup: &Warmup,
) -> Progress {
    let mut hist = Histogram::<u64>::new_with_bounds(1, stats::MAX_LATENCY_US, 2)
        .expect("constant bounds 1 µs ..= 1 h with 2 significant digits are valid");
    let (mut completed, mut errors, mut interval_completed) = (0, 0, 0);
    for stats in all_stats {
        let mut s = lock(stats);
        completed += s.live.completed;
        errors += s.live.errors;
        interval_completed += s.live.interval_completed;
        s.live.interval_completed = 0;
        hist.add(&s.live.interval)
            .expect("histograms with identical bounds always add");
        s.live.interval.reset();
    }
    let secs = interval.as_secs_f64();
    Progress {
        elapsed,
        warming_up: elapsed < warmup.end(),
        completed,
        errors,
        throughput: if secs > 0.0 {
            interval_completed as f64 / secs
        } else {
            0.0
        },
        p99_us: if hist.is_empty() {
            0
        } else {
            hist.value_at_quantile(0.99)
        },
    }
}

#[cfg(test)]
mod tests;
