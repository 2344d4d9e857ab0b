//! Issue 5's performance figures for timeline buckets, measured in real time on the embedded
//! 2-DC × 3-node cluster (N = 3, 100 ms one-way emulated WAN, no jitter), side by side in one
//! run. Run it with `bash bench/timeline.sh` (or `cargo run --release -p meridian-server
//! --example timeline_bench -- --help`).
//!
//! Each round starts a fresh cluster with a timeline bucket `tl` (T = 3) and runs:
//!
//! 1. **Load**: every key is inserted once by a client in its home DC (key `i` has home DC
//!    `i % 2`). The insert arbiter masters it (`initial_master = insert_arbiter`).
//! 2. **Warm-up** (spec §9): update-only traffic with the locality, `--warmup-passes` passes
//!    (default 5·T = 15) in which every key is written once, in a fresh random order, from its
//!    home DC with probability `--locality` and from the other DC otherwise (what a client mix
//!    with 90 % write locality gives each key). Reports the fraction of keys mastered in their
//!    home DC after the load and after the warm-up, and the migrations of the last pass.
//! 3. **Measured phase**: `--rate` operations per second for `--duration` seconds, clients in
//!    both DCs at equal rates, 2:1 reads to writes. A client in DC d picks a key of its own
//!    home with probability `--locality`, else one of the other DC's keys (for every
//!    operation), and calls the node API of a round-robin node of DC d as coordinator. A read
//!    is `read_latest` with probability `--latest-share`, else `read_any`.
//!
//! Load generation is open-loop: a pacer thread starts the operations as a Poisson process of
//! the given rate, each as its own task, and the latency is measured from its intended start
//! (no coordinated omission: a late start, a busy runtime or a slow operation all count).
//! Latencies go into HdrHistograms (µs, 3 significant digits). Figures are reported per round
//! and as medians over rounds, as a Markdown table.
//!
//! Classification: a write is "from the master's DC" when the client's DC is the DC of the
//! replica that issued it (`TlWriteResult::issued_by`, the master at the time of the write); a
//! `read_latest` is "from the other DC" when the master that served it is in the other DC. A
//! write is local when `TlWriteResult::remote` is false. A write migrated the mastership when
//! the record's master after it differs from its issuer.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use meridian_core::NodeId;
use meridian_replication::timeline::{Content, Expect, Record};
use meridian_replication::{BucketProps, EventualNode, ReadMode};
use meridian_server::cluster::{EmbeddedConfig, start_embedded};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

const BUCKET: &str = "tl";
const DCS: usize = 2;

const USAGE: &str = "\
timeline_bench: issue 5's timeline figures on the embedded 2-DC x 3-node cluster

OPTIONS (defaults in brackets):
    --rounds N            rounds, each on a fresh cluster [3]
    --duration SECS       measured phase per round [30]
    --rate OPS            measured-phase operations per second, both DCs together [1000]
    --keys K              keys (half homed in each DC) [1000]
    --warmup-passes P     warm-up writes per key (spec: >= 5*T = 15) [15]
    --warmup-rate OPS     load and warm-up writes per second [1500]
    --locality F          probability that a client picks a key homed in its DC [0.9]
    --latest-share F      fraction of reads that are read_latest (others read_any) [0.5]
    --value-size B        value bytes [100]
    --wan-ms MS           one-way WAN latency [100]
    --seed S              workload seed (round r uses S + r) [1]";

#[derive(Debug, Clone)]
struct Args {
    rounds: usize,
    duration: f64,
    rate: f64,
    keys: usize,
    warmup_passes: usize,
    warmup_rate: f64,
    locality: f64,
    latest_share: f64,
    value_size: usize,
    wan_ms: u64,
    seed: u64,
}

impl Args {
    fn parse() -> Result<Args> {
        let mut a = Args {
            rounds: 3,
            duration: 30.0,
            rate: 1000.0,
            keys: 1000,
            warmup_passes: 15,
            warmup_rate: 1500.0,
            locality: 0.9,
            latest_share: 0.5,
            value_size: 100,
            wan_ms: 100,
            seed: 1,
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "-h" || flag == "--help" {
                println!("{USAGE}");
                std::process::exit(0);
            }
            let v = it
                .next()
                .with_context(|| format!("{flag} needs a value\n\n{USAGE}"))?;
            let bad = || format!("invalid value {v:?} for {flag}");
            match flag.as_str() {
                "--rounds" => a.rounds = v.parse().with_context(bad)?,
                "--duration" => a.duration = v.parse().with_context(bad)?,
                "--rate" => a.rate = v.parse().with_context(bad)?,
                "--keys" => a.keys = v.parse().with_context(bad)?,
                "--warmup-passes" => a.warmup_passes = v.parse().with_context(bad)?,
                "--warmup-rate" => a.warmup_rate = v.parse().with_context(bad)?,
                "--locality" => a.locality = v.parse().with_context(bad)?,
                "--latest-share" => a.latest_share = v.parse().with_context(bad)?,
                "--value-size" => a.value_size = v.parse().with_context(bad)?,
                "--wan-ms" => a.wan_ms = v.parse().with_context(bad)?,
                "--seed" => a.seed = v.parse().with_context(bad)?,
                _ => bail!("unknown option {flag}\n\n{USAGE}"),
            }
        }
        if a.rounds == 0 || a.keys < 2 || a.rate <= 0.0 || a.warmup_rate <= 0.0 {
            bail!("--rounds, --rate and --warmup-rate must be positive and --keys at least 2");
        }
        if !(0.0..=1.0).contains(&a.locality) || !(0.0..=1.0).contains(&a.latest_share) {
            bail!("--locality and --latest-share are fractions in [0, 1]");
        }
        Ok(a)
    }
}

/// splitmix64: the workload's seeded randomness (no extra dependency).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    ReadAny,
    ReadLatest,
}

/// One operation to start: which key, from which DC, and the warm-up pass (0 otherwise).
#[derive(Debug, Clone, Copy)]
struct Op {
    key: usize,
    client_dc: usize,
    kind: Kind,
    pass: usize,
}

/// What the clients share: the coordinators of each DC, the keys and the value.
struct Ctx {
    dc_nodes: Vec<Vec<EventualNode>>,
    rr: Vec<AtomicUsize>,
    dc_of: HashMap<NodeId, usize>,
    keys: Vec<Bytes>,
    value: Bytes,
}

impl Ctx {
    /// A round-robin coordinator of `dc`.
    fn coordinator(&self, dc: usize) -> &EventualNode {
        let nodes = &self.dc_nodes[dc];
        &nodes[self.rr[dc].fetch_add(1, Ordering::Relaxed) % nodes.len()]
    }

    fn home(&self, key: usize) -> usize {
        key % DCS
    }

    /// The newest record of `key` over every node (after quiescence: the master's).
    fn newest(&self, key: usize) -> Option<Record> {
        self.dc_nodes
            .iter()
            .flatten()
            .filter_map(|n| n.tl_local(&self.keys[key]).ok().flatten())
            .max_by_key(|r| r.ver.precedence())
    }

    /// Fraction of keys whose master is in their home DC.
    fn home_mastered(&self) -> f64 {
        let home = (0..self.keys.len())
            .filter(|&k| {
                self.newest(k)
                    .is_some_and(|r| r.master.dc.0 as usize == self.home(k))
            })
            .count();
        home as f64 / self.keys.len() as f64
    }

    fn migrations_counted(&self) -> u64 {
        self.dc_nodes
            .iter()
            .flatten()
            .map(|n| n.tl_stats().migrations)
            .sum()
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

/// The latency figures of one class of operation.
#[derive(Debug, Clone, Copy, Default)]
struct Pcts {
    n: u64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Pcts {
    fn of(h: &Histogram<u64>) -> Pcts {
        let ms = |us: u64| us as f64 / 1000.0;
        if h.is_empty() {
            return Pcts::default();
        }
        Pcts {
            n: h.len(),
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }
}

/// What the operations of one phase recorded.
struct Recorder {
    read_any: Histogram<u64>,
    latest_master_dc: Histogram<u64>,
    latest_other_dc: Histogram<u64>,
    write_master_dc: Histogram<u64>,
    write_other_dc: Histogram<u64>,
    write_all: Histogram<u64>,
    /// read_any served by the coordinator itself / by another node of its DC.
    read_any_self: Histogram<u64>,
    read_any_lan: Histogram<u64>,
    /// Writes from the master's DC issued by the coordinator itself / by another node.
    write_master_self: Histogram<u64>,
    write_master_lan: Histogram<u64>,
    /// From the intended start to the moment the operation's task ran.
    start_lag: Histogram<u64>,
    /// Writes flagged local (`remote == false`) that took at least the one-way WAN latency.
    slow_local_writes: u64,
    /// The one-way WAN latency, µs.
    wan_us: u64,
    writes_local: u64,
    writes_remote: u64,
    /// Writes from the master's DC whose critical path still crossed DCs (a stale hint).
    master_dc_writes_remote: u64,
    /// Per warm-up pass (index 0: outside the warm-up): writes and migrations.
    pass_writes: Vec<u64>,
    pass_migrations: Vec<u64>,
    errors: BTreeMap<String, u64>,
    /// The first few oddities (errors, local-flagged writes slower than the WAN), with detail.
    anomalies: Vec<String>,
    /// The latest an operation started after its intended start.
    max_start_lag_us: u64,
}

impl Recorder {
    fn new(passes: usize, wan_ms: u64) -> Recorder {
        Recorder {
            read_any_self: hist(),
            read_any_lan: hist(),
            write_master_self: hist(),
            write_master_lan: hist(),
            start_lag: hist(),
            slow_local_writes: 0,
            wan_us: wan_ms * 1000,
            read_any: hist(),
            latest_master_dc: hist(),
            latest_other_dc: hist(),
            write_master_dc: hist(),
            write_other_dc: hist(),
            write_all: hist(),
            writes_local: 0,
            writes_remote: 0,
            master_dc_writes_remote: 0,
            pass_writes: vec![0; passes + 1],
            pass_migrations: vec![0; passes + 1],
            errors: BTreeMap::new(),
            anomalies: Vec::new(),
            max_start_lag_us: 0,
        }
    }

    fn error(&mut self, what: &str, e: &dyn std::fmt::Display) {
        let mut s = format!("{what}: {e}");
        s.truncate(120);
        *self.errors.entry(s).or_default() += 1;
    }

    fn anomaly(&mut self, f: impl FnOnce() -> String) {
        if self.anomalies.len() < 8 {
            self.anomalies.push(f());
        }
    }

    fn migrations(&self) -> u64 {
        self.pass_migrations.iter().sum()
    }

    fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

fn micros(d: Duration) -> u64 {
    d.as_micros().try_into().unwrap_or(u64::MAX)
}

/// Runs one operation and records it; latency from `intended`.
async fn run_op(ctx: Arc<Ctx>, rec: Arc<Mutex<Recorder>>, op: Op, intended: Instant) {
    let lag = micros(intended.elapsed());
    let node = ctx.coordinator(op.client_dc);
    let me = node.id();
    let key = &ctx.keys[op.key];
    // Whether the coordinator is a replica of the key (it holds a record once loaded).
    let replica = || node.tl_local(key).ok().flatten().is_some();
    let dc_of = |n: NodeId| ctx.dc_of.get(&n).copied().unwrap_or(usize::MAX);
    match op.kind {
        Kind::Write => {
            let r = node
                .tl_put(key, Content::Value(ctx.value.clone()), Expect::Any)
                .await;
            let lat = micros(intended.elapsed());
            let mut g = rec.lock();
            g.max_start_lag_us = g.max_start_lag_us.max(lag);
            g.start_lag.saturating_record(lag);
            match r {
                Ok(w) => {
                    g.write_all.saturating_record(lat);
                    let from_master_dc = w.issued_by.dc.0 as usize == op.client_dc;
                    if from_master_dc {
                        g.write_master_dc.saturating_record(lat);
                        if w.issued_by.node == me {
                            g.write_master_self.saturating_record(lat);
                        } else {
                            g.write_master_lan.saturating_record(lat);
                        }
                        if w.remote {
                            g.master_dc_writes_remote += 1;
                        }
                    } else {
                        g.write_other_dc.saturating_record(lat);
                    }
                    if w.remote {
                        g.writes_remote += 1;
                    } else {
                        g.writes_local += 1;
                        if lat >= g.wan_us {
                            g.slow_local_writes += 1;
                            let rep = replica();
                            g.anomaly(|| {
                                format!(
                                    "write flagged local took {:.1} ms: key {}, client dc{}, \
                                     coordinator {me} (replica: {rep}), issued by {} -> ver {} \
                                     master {} recent {:?}",
                                    lat as f64 / 1000.0,
                                    String::from_utf8_lossy(key),
                                    op.client_dc,
                                    w.issued_by,
                                    w.record.ver,
                                    w.record.master,
                                    w.record.recent
                                )
                            });
                        }
                    }
                    g.pass_writes[op.pass] += 1;
                    if w.record.master.node != w.issued_by.node {
                        g.pass_migrations[op.pass] += 1;
                    }
                }
                Err(e) => {
                    let rep = replica();
                    g.anomaly(|| {
                        format!(
                            "write failed after {:.1} ms: client dc{}, coordinator {me} \
                             (replica: {rep}): {e}",
                            lat as f64 / 1000.0,
                            op.client_dc
                        )
                    });
                    g.error("write", &e);
                }
            }
        }
        Kind::ReadAny | Kind::ReadLatest => {
            let mode = if op.kind == Kind::ReadAny {
                ReadMode::Any
            } else {
                ReadMode::Latest
            };
            let r = node.tl_get(key, mode).await;
            let lat = micros(intended.elapsed());
            let mut g = rec.lock();
            g.max_start_lag_us = g.max_start_lag_us.max(lag);
            g.start_lag.saturating_record(lag);
            match r {
                Ok(read) if op.kind == Kind::ReadAny => {
                    g.read_any.saturating_record(lat);
                    if read.served_by == me {
                        g.read_any_self.saturating_record(lat);
                    } else {
                        g.read_any_lan.saturating_record(lat);
                    }
                }
                Ok(read) => {
                    if dc_of(read.served_by) == op.client_dc {
                        g.latest_master_dc.saturating_record(lat);
                    } else {
                        g.latest_other_dc.saturating_record(lat);
                    }
                }
                Err(e) => {
                    let what = if op.kind == Kind::ReadAny {
                        "read_any"
                    } else {
                        "read_latest"
                    };
                    let rep = replica();
                    g.anomaly(|| {
                        format!(
                            "{what} failed after {:.1} ms: client dc{}, coordinator {me} \
                             (replica: {rep}): {e}",
                            lat as f64 / 1000.0,
                            op.client_dc
                        )
                    });
                    g.error(what, &e);
                }
            }
        }
    }
}

/// Starts `ops` open-loop as a Poisson process of `rate` per second, each as its own task at
/// its intended start (on a blocking thread, so the pacing does not depend on the runtime's
/// 1 ms timer), then waits for all of them. Exponential gaps, not a fixed period: a period
/// that divides the runtime's 1 ms timer tick would start every operation at the same phase
/// of the tick, and the emulator's tick-rounded LAN hops would then cost all or nothing.
async fn run_open_loop(
    ctx: &Arc<Ctx>,
    rec: &Arc<Mutex<Recorder>>,
    ops: Vec<Op>,
    rate: f64,
    seed: u64,
) -> Result<()> {
    let handle = Handle::current();
    let (ctx2, rec2) = (ctx.clone(), rec.clone());
    let tasks: Vec<JoinHandle<()>> = tokio::task::spawn_blocking(move || {
        let mut rng = Rng(seed ^ 0x5EED_0FA1);
        let t0 = Instant::now() + Duration::from_millis(5);
        let mut at = 0.0_f64;
        let mut tasks = Vec::with_capacity(ops.len());
        for op in ops {
            at += -(1.0 - rng.unit()).ln() / rate;
            let intended = t0 + Duration::from_secs_f64(at);
            let now = Instant::now();
            if intended > now {
                std::thread::sleep(intended - now);
            }
            tasks.push(handle.spawn(run_op(ctx2.clone(), rec2.clone(), op, intended)));
        }
        tasks
    })
    .await?;
    for t in tasks {
        t.await?;
    }
    Ok(())
}

/// The figures of one round.
#[derive(Debug, Clone, Default)]
struct RoundResult {
    home_after_load: f64,
    home_after_warmup: f64,
    home_after_measure: f64,
    warmup_migrations: u64,
    last_pass_migration_rate: f64,
    warmup_errors: u64,
    warmup_secs: f64,
    read_any: Pcts,
    latest_master_dc: Pcts,
    latest_other_dc: Pcts,
    write_master_dc: Pcts,
    write_other_dc: Pcts,
    write_all: Pcts,
    read_any_self: Pcts,
    read_any_lan: Pcts,
    write_master_self: Pcts,
    write_master_lan: Pcts,
    start_lag: Pcts,
    slow_local_writes: u64,
    local_write_share: f64,
    master_dc_writes_remote: u64,
    migrations: u64,
    migrations_by_stats: u64,
    errors: BTreeMap<String, u64>,
    anomalies: Vec<String>,
    ops_per_sec: f64,
    max_start_lag_ms: f64,
}

async fn run_round(args: &Args, round: usize) -> Result<RoundResult> {
    let seed = args.seed + round as u64;
    let mut rng = Rng(seed);
    let cfg = EmbeddedConfig {
        dcs: DCS as u32,
        nodes_per_dc: 3,
        n: 3,
        wan_latency: Duration::from_millis(args.wan_ms),
        jitter: 0.0,
        seed,
        ..EmbeddedConfig::default()
    };
    let cluster = start_embedded(cfg, Duration::from_secs(60))
        .await
        .context("starting the embedded cluster")?;
    cluster
        .node(0)
        .set_bucket(BUCKET, BucketProps::timeline())
        .await
        .context("creating the timeline bucket")?;
    let mut dc_nodes: Vec<Vec<EventualNode>> = vec![Vec::new(); DCS];
    let mut dc_of = HashMap::new();
    for (i, m) in cluster.members.iter().enumerate() {
        dc_nodes[m.dc.0 as usize].push(cluster.node(i).clone());
        dc_of.insert(m.id, m.dc.0 as usize);
    }
    let probe = format!("{BUCKET}:probe");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dc_nodes
        .iter()
        .flatten()
        .all(|n| n.is_timeline(probe.as_bytes()))
    {
        if Instant::now() > deadline {
            bail!("the timeline bucket did not reach every node");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ctx = Arc::new(Ctx {
        dc_nodes,
        rr: (0..DCS).map(|_| AtomicUsize::new(0)).collect(),
        dc_of,
        keys: (0..args.keys)
            .map(|i| Bytes::from(format!("{BUCKET}:k{i:06}")))
            .collect(),
        value: Bytes::from(vec![b'v'; args.value_size]),
    });
    let mut out = RoundResult::default();

    // 1. Load: each key inserted once from its home DC.
    let load: Vec<Op> = (0..args.keys)
        .map(|key| Op {
            key,
            client_dc: ctx.home(key),
            kind: Kind::Write,
            pass: 0,
        })
        .collect();
    let rec = Arc::new(Mutex::new(Recorder::new(0, args.wan_ms)));
    run_open_loop(&ctx, &rec, load, args.warmup_rate, seed).await?;
    if rec.lock().error_count() > 0 {
        bail!("load failed: {:?}", rec.lock().errors);
    }
    tokio::time::sleep(Duration::from_millis(2 * args.wan_ms + 300)).await;
    out.home_after_load = ctx.home_mastered();

    // 2. Warm-up: every pass writes every key once, from its home DC with the locality.
    let mut warm = Vec::with_capacity(args.keys * args.warmup_passes);
    for pass in 1..=args.warmup_passes {
        let mut order: Vec<usize> = (0..args.keys).collect();
        rng.shuffle(&mut order);
        for key in order {
            let home = ctx.home(key);
            let client_dc = if rng.unit() < args.locality {
                home
            } else {
                1 - home
            };
            warm.push(Op {
                key,
                client_dc,
                kind: Kind::Write,
                pass,
            });
        }
    }
    let rec = Arc::new(Mutex::new(Recorder::new(args.warmup_passes, args.wan_ms)));
    let t = Instant::now();
    run_open_loop(&ctx, &rec, warm, args.warmup_rate, seed + 100).await?;
    out.warmup_secs = t.elapsed().as_secs_f64();
    {
        let g = rec.lock();
        out.warmup_migrations = g.migrations();
        out.warmup_errors = g.error_count();
        if args.warmup_passes > 0 {
            let last = args.warmup_passes;
            out.last_pass_migration_rate =
                g.pass_migrations[last] as f64 / g.pass_writes[last].max(1) as f64;
        }
    }
    tokio::time::sleep(Duration::from_millis(2 * args.wan_ms + 300)).await;
    out.home_after_warmup = ctx.home_mastered();

    // 3. Measured phase: 2:1 reads to writes, the locality on every key choice.
    let n_ops = (args.rate * args.duration).round() as usize;
    let half = args.keys / DCS;
    let ops: Vec<Op> = (0..n_ops)
        .map(|_| {
            let client_dc = rng.below(DCS);
            let key_dc = if rng.unit() < args.locality {
                client_dc
            } else {
                1 - client_dc
            };
            // Keys homed in DC h are h, h + 2, h + 4, ...
            let key = rng.below(half) * DCS + key_dc;
            let x = rng.unit();
            let kind = if x < 1.0 / 3.0 {
                Kind::Write
            } else if rng.unit() < args.latest_share {
                Kind::ReadLatest
            } else {
                Kind::ReadAny
            };
            Op {
                key,
                client_dc,
                kind,
                pass: 0,
            }
        })
        .collect();
    let rec = Arc::new(Mutex::new(Recorder::new(0, args.wan_ms)));
    let before = ctx.migrations_counted();
    let t = Instant::now();
    run_open_loop(&ctx, &rec, ops, args.rate, seed + 200).await?;
    let elapsed = t.elapsed().as_secs_f64();
    out.migrations_by_stats = ctx.migrations_counted() - before;
    {
        let g = rec.lock();
        out.read_any = Pcts::of(&g.read_any);
        out.latest_master_dc = Pcts::of(&g.latest_master_dc);
        out.latest_other_dc = Pcts::of(&g.latest_other_dc);
        out.write_master_dc = Pcts::of(&g.write_master_dc);
        out.write_other_dc = Pcts::of(&g.write_other_dc);
        out.write_all = Pcts::of(&g.write_all);
        out.read_any_self = Pcts::of(&g.read_any_self);
        out.read_any_lan = Pcts::of(&g.read_any_lan);
        out.write_master_self = Pcts::of(&g.write_master_self);
        out.write_master_lan = Pcts::of(&g.write_master_lan);
        out.start_lag = Pcts::of(&g.start_lag);
        out.slow_local_writes = g.slow_local_writes;
        out.local_write_share =
            g.writes_local as f64 / (g.writes_local + g.writes_remote).max(1) as f64;
        out.master_dc_writes_remote = g.master_dc_writes_remote;
        out.migrations = g.migrations();
        out.errors = g.errors.clone();
        out.anomalies = g.anomalies.clone();
        out.ops_per_sec = n_ops as f64 / elapsed;
        out.max_start_lag_ms = g.max_start_lag_us as f64 / 1000.0;
    }
    tokio::time::sleep(Duration::from_millis(2 * args.wan_ms + 300)).await;
    out.home_after_measure = ctx.home_mastered();
    cluster.shutdown().await;
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn main() -> Result<()> {
    let args = Args::parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let rtt = 2 * args.wan_ms;
    println!(
        "# timeline bench: 2 DCs x 3 nodes, N=3, {} ms one-way WAN (RTT {rtt} ms), no jitter, \
         T=3; {} keys, locality {}, warm-up {} writes/key at {}/s; measured {} s at {} ops/s \
         (2:1 read/write, {:.0} % of reads read_latest), {} B values; {} rounds",
        args.wan_ms,
        args.keys,
        args.locality,
        args.warmup_passes,
        args.warmup_rate,
        args.duration,
        args.rate,
        args.latest_share * 100.0,
        args.value_size,
        args.rounds
    );
    let mut rounds = Vec::new();
    for round in 0..args.rounds {
        let t = Instant::now();
        let r = runtime.block_on(run_round(&args, round))?;
        println!(
            "round {}: {:.1} s; home-mastered {} after load, {} after warm-up ({:.1} s, {} \
             migrations, last pass {}, {} errors), {} after the measured phase; {:.0} ops/s, \
             max start lag {:.2} ms",
            round + 1,
            t.elapsed().as_secs_f64(),
            pct(r.home_after_load),
            pct(r.home_after_warmup),
            r.warmup_secs,
            r.warmup_migrations,
            pct(r.last_pass_migration_rate),
            r.warmup_errors,
            pct(r.home_after_measure),
            r.ops_per_sec,
            r.max_start_lag_ms
        );
        for (name, p) in [
            ("read_any", r.read_any),
            ("read_latest, master's DC", r.latest_master_dc),
            ("read_latest, other DC", r.latest_other_dc),
            ("write, master's DC", r.write_master_dc),
            ("write, other DC", r.write_other_dc),
            ("write, all", r.write_all),
            ("read_any, coordinator", r.read_any_self),
            ("read_any, LAN replica", r.read_any_lan),
            ("write m-DC, coordinator", r.write_master_self),
            ("write m-DC, LAN master", r.write_master_lan),
            ("start lag (pacer+spawn)", r.start_lag),
        ] {
            println!(
                "  {name:<26} n={:<6} p50 {:>8.3}  p90 {:>8.3}  p99 {:>8.3}  max {:>8.3} ms",
                p.n, p.p50, p.p90, p.p99, p.max
            );
        }
        println!(
            "  local write share {}; writes from the master's DC that went remote: {}; \
             local-flagged writes slower than the one-way WAN: {}; migrations {} (issuers' \
             counters: {}); errors {:?}",
            pct(r.local_write_share),
            r.master_dc_writes_remote,
            r.slow_local_writes,
            r.migrations,
            r.migrations_by_stats,
            r.errors
        );
        for a in &r.anomalies {
            println!("  note: {a}");
        }
        rounds.push(r);
    }

    let med = |f: &dyn Fn(&RoundResult) -> f64| median(rounds.iter().map(f).collect());
    let n = rounds.len();
    println!();
    println!("## Medians of {n} rounds (latency in ms, from the intended start)");
    println!();
    println!("| figure | p50 | p90 | p99 | max | samples/round | target |");
    println!("|---|---|---|---|---|---|---|");
    type Pick = fn(&RoundResult) -> Pcts;
    let rows: [(&str, Pick, String); 11] = [
        ("read_any (all)", |r| r.read_any, "p50 < 1 ms".into()),
        (
            "write, client in the master's DC",
            |r| r.write_master_dc,
            "p50 < 1 ms".into(),
        ),
        ("write, all", |r| r.write_all, String::new()),
        (
            "write, client in the other DC",
            |r| r.write_other_dc,
            String::new(),
        ),
        (
            "read_latest, client in the other DC",
            |r| r.latest_other_dc,
            format!("p50 within 2 ms of {rtt} ms"),
        ),
        (
            "read_latest, client in the master's DC",
            |r| r.latest_master_dc,
            String::new(),
        ),
        (
            "… read_any served by the coordinator itself",
            |r| r.read_any_self,
            String::new(),
        ),
        (
            "… read_any served by another node of the DC",
            |r| r.read_any_lan,
            String::new(),
        ),
        (
            "… master's-DC write, coordinator is the master",
            |r| r.write_master_self,
            String::new(),
        ),
        (
            "… master's-DC write, master is another node of the DC",
            |r| r.write_master_lan,
            String::new(),
        ),
        (
            "… start lag (intended start to task start)",
            |r| r.start_lag,
            String::new(),
        ),
    ];
    for (name, pick, target) in rows {
        let verdict = if target.is_empty() {
            String::new()
        } else {
            let p50 = med(&|r| pick(r).p50);
            let met = if target.starts_with("p50 < 1") {
                p50 < 1.0
            } else {
                (p50 - rtt as f64).abs() <= 2.0
            };
            format!("{target}: **{}**", if met { "met" } else { "missed" })
        };
        println!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {verdict} |",
            med(&|r| pick(r).p50),
            med(&|r| pick(r).p90),
            med(&|r| pick(r).p99),
            med(&|r| pick(r).max),
            med(&|r| pick(r).n as f64),
        );
    }
    println!();
    let share = med(&|r| r.local_write_share);
    println!("| after warm-up | median | per round |");
    println!("|---|---|---|");
    let per =
        |f: &dyn Fn(&RoundResult) -> String| rounds.iter().map(f).collect::<Vec<_>>().join(" / ");
    println!(
        "| writes served locally (`remote == false`), target ≥ 85 % | **{}** ({}) | {} |",
        pct(share),
        if share >= 0.85 { "met" } else { "missed" },
        per(&|r| pct(r.local_write_share))
    );
    println!(
        "| writes flagged local that took ≥ the one-way WAN latency | {} | {} |",
        med(&|r| r.slow_local_writes as f64),
        per(&|r| r.slow_local_writes.to_string())
    );
    println!(
        "| keys mastered in their home DC after load | {} | {} |",
        pct(med(&|r| r.home_after_load)),
        per(&|r| pct(r.home_after_load))
    );
    println!(
        "| keys mastered in their home DC after warm-up | {} | {} |",
        pct(med(&|r| r.home_after_warmup)),
        per(&|r| pct(r.home_after_warmup))
    );
    println!(
        "| migrations per write in the last warm-up pass | {} | {} |",
        pct(med(&|r| r.last_pass_migration_rate)),
        per(&|r| pct(r.last_pass_migration_rate))
    );
    println!(
        "| migrations during the measured phase | {} | {} |",
        med(&|r| r.migrations as f64),
        per(&|r| r.migrations.to_string())
    );
    println!(
        "| completed ops/s (phase wall time incl. the drain) | {:.0} | {} |",
        med(&|r| r.ops_per_sec),
        per(&|r| format!("{:.0}", r.ops_per_sec))
    );
    println!(
        "| failed operations in the measured phase | {} | {} |",
        med(&|r| r.errors.values().sum::<u64>() as f64),
        per(&|r| r.errors.values().sum::<u64>().to_string())
    );
    Ok(())
}
