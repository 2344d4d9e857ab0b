//! The read-balancing invariants under faults (spec `load-balancing.md`, invariants 1, 9
//! and 10), on the real nodes in virtual time.
//!
//! The cluster is the default 2 DC × 3 node shape with bucket `hot`: `n_val = 2` (one home
//! replica per DC), reads of one replica (`r = pr = 1`, `read_fanout = quorum`: a primary or
//! an extra copy, never a fallback's hints) chosen round robin
//! among the home replica and the extra copies of its DC, writes acknowledged by every
//! primary (`w = pw = all`), `extra_copies = true`. Clients:
//! - one writer per key writes `v1, v2, ...` in order, each carrying the context of the last
//!   acknowledged write (after a failure it re-reads every replica for a full context);
//! - in every node, a reader reads a key every 20 ms, the hottest key 80 % of the time, so
//!   each DC's root gives it extra copies.
//!
//! Faults: crashes (disks kept), slow nodes, clock jumps and DC partitions, plus isolated
//! nodes; pair partitions inside a DC are left out, because an extra copy's holder cut off
//! from a writer's home replica but not from its root and readers is outside what the copy
//! protocol promises (see `meridian_replication::balance`).
//!
//! **Checked:** every read that completed returns a version at least as new as every write
//! acknowledged before the read started (so no extra copy serves a version a write has
//! replaced: a home replica holds every acknowledged write, as `pw = all`); and the copies
//! were used (the run does not pass vacuously).

use crate::cluster::{LiveNodes, SimCluster, SimConfig};
use crate::faults::{self, Fault, FaultKinds, ScheduledFault};
use crate::scenario::{faults_until, heal};
use bytes::Bytes;
use meridian_cluster::{Props, Quorum, ReadFanout};
use meridian_core::NodeId;
use meridian_replication::{BucketProps, GetOptions, GetResult, PutOptions, Strategy};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Keys of the run (`hot:k0` is the hot one).
pub const KEYS: usize = 4;

/// One run's outcome.
#[derive(Debug, Clone, Default)]
pub struct BalanceReport {
    /// The seed (replays the run).
    pub seed: u64,
    /// Reads that returned.
    pub reads_ok: u64,
    /// Reads that failed.
    pub reads_failed: u64,
    /// Writes acknowledged.
    pub writes_ok: u64,
    /// Writes that failed (maybe written).
    pub writes_failed: u64,
    /// Reads served from extra copies, summed over the nodes alive at the end.
    pub extra_reads: u64,
    /// The faults injected.
    pub faults: Vec<String>,
    /// Reads that returned an older version than a write acknowledged before they started.
    pub violations: Vec<String>,
}

impl BalanceReport {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl std::fmt::Display for BalanceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "balance seed {}: {} ({} reads ok, {} failed; {} writes ok, {} failed; {} reads \
             from extra copies)",
            self.seed,
            if self.passed() { "PASS" } else { "FAIL" },
            self.reads_ok,
            self.reads_failed,
            self.writes_ok,
            self.writes_failed,
            self.extra_reads
        )?;
        for x in &self.faults {
            writeln!(f, "  fault: {x}")?;
        }
        for v in &self.violations {
            writeln!(f, "  violation: {v}")?;
        }
        Ok(())
    }
}

/// The run's bucket (see the module docs).
pub fn hot_bucket() -> BucketProps {
    BucketProps {
        props: Props {
            n_val: Some(2),
            r: Some(Quorum::Count(1)),
            pr: Some(Quorum::Count(1)),
            w: Some(Quorum::All),
            pw: Some(Quorum::All),
            read_fanout: Some(ReadFanout::Quorum),
            replica_selection: Some(Strategy::RoundRobin),
            timeout_ms: Some(2_000),
            ..Props::default()
        },
        extra_copies: Some(true),
        ..BucketProps::default()
    }
}

#[derive(Debug, Default)]
struct Log {
    /// (key, version, acknowledged at).
    acked: Vec<(usize, u64, Instant)>,
    /// (key, started, newest version returned, coordinator).
    reads: Vec<(usize, Instant, u64, NodeId)>,
    reads_failed: u64,
    writes_failed: u64,
}

fn key(i: usize) -> Vec<u8> {
    format!("hot:k{i}").into_bytes()
}

fn version_of(r: &GetResult) -> u64 {
    r.values()
        .iter()
        .filter_map(|v| std::str::from_utf8(v).ok()?.strip_prefix('v')?.parse().ok())
        .max()
        .unwrap_or(0)
}

fn any_node(live: &LiveNodes, rng: &mut ChaCha8Rng) -> Option<meridian_replication::Node> {
    let nodes: Vec<_> = live.read().values().cloned().collect();
    if nodes.is_empty() {
        return None;
    }
    Some(nodes[rng.random_range(0..nodes.len())].clone())
}

async fn writer(
    i: usize,
    live: LiveNodes,
    log: Arc<Mutex<Log>>,
    seed: u64,
    until: CancellationToken,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (i as u64) << 8);
    let mut ctx: Option<Vec<u8>> = None;
    let mut v = 0u64;
    while !until.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..900))).await;
        let Some(node) = any_node(&live, &mut rng) else {
            continue;
        };
        v += 1;
        let value = Bytes::from(format!("v{v}"));
        match node
            .put(&key(i), value, ctx.as_deref(), PutOptions::default())
            .await
        {
            Ok(w) => {
                ctx = Some(w.context);
                log.lock().acked.push((i, v, Instant::now()));
            }
            Err(_) => {
                log.lock().writes_failed += 1;
                // Maybe written: read every replica for a context that covers it.
                let all = GetOptions {
                    props: Props {
                        r: Some(Quorum::All),
                        read_fanout: Some(ReadFanout::All),
                        ..Props::default()
                    },
                    ..GetOptions::default()
                };
                if let Ok(r) = node.get(&key(i), all).await {
                    ctx = Some(r.context().to_vec());
                    v = v.max(version_of(&r));
                }
            }
        }
    }
}

async fn reader(
    id: NodeId,
    live: LiveNodes,
    log: Arc<Mutex<Log>>,
    seed: u64,
    until: CancellationToken,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ u64::from(id.0) << 16 ^ 0x4ead);
    while !until.is_cancelled() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let Some(node) = live.read().get(&id).cloned() else {
            continue;
        };
        let k = if rng.random_bool(0.8) {
            0
        } else {
            rng.random_range(1..KEYS)
        };
        let started = Instant::now();
        match node.get(&key(k), GetOptions::default()).await {
            Ok(r) => log.lock().reads.push((k, started, version_of(&r), id)),
            Err(_) => log.lock().reads_failed += 1,
        }
    }
}

/// Runs the scenario for `seed` with `duration` of workload (see the module docs).
pub fn run(seed: u64, duration: Duration) -> BalanceReport {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(run_in_runtime(seed, duration))
}

async fn run_in_runtime(seed: u64, duration: Duration) -> BalanceReport {
    let mut cfg = SimConfig {
        seed,
        ..SimConfig::default()
    };
    cfg.buckets.insert("hot".into(), hot_bucket());
    let mut cluster = SimCluster::start(cfg);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xba1a);
    let kinds = FaultKinds {
        crash: true,
        partition: true,
        slow: true,
        clock: true,
        ..FaultKinds::NONE
    };
    let schedule: Vec<ScheduledFault> =
        faults::generate(&mut rng, kinds, &cluster.machines(), duration)
            .into_iter()
            .filter(|f| !matches!(f.fault, Fault::PartitionNodes { .. }))
            .collect();
    let log = Arc::new(Mutex::new(Log::default()));
    let until = CancellationToken::new();
    for i in 0..KEYS {
        tokio::spawn(writer(i, cluster.live(), log.clone(), seed, until.clone()));
    }
    for (id, _) in cluster.machines() {
        tokio::spawn(reader(id, cluster.live(), log.clone(), seed, until.clone()));
    }
    let origin = Instant::now();
    let baseline = cluster.wan().config().inter_dc;
    let faults = faults_until(&mut cluster, &schedule, origin, duration, &baseline).await;
    until.cancel();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _ = heal(&mut cluster, baseline).await;
    let extra_reads = cluster
        .live()
        .read()
        .values()
        .map(|n| n.balance_stats().extra_reads)
        .sum();
    cluster.shutdown();

    let log = log.lock();
    let mut violations = Vec::new();
    for &(k, started, got, coord) in &log.reads {
        let bound = log
            .acked
            .iter()
            .filter(|(kk, _, at)| *kk == k && *at <= started)
            .map(|(_, v, _)| *v)
            .max()
            .unwrap_or(0);
        if got < bound {
            violations.push(format!(
                "read of hot:k{k} through {coord} started at t={:?} returned v{got}, but v{bound} \
                 was acknowledged before",
                started.duration_since(origin)
            ));
        }
    }
    BalanceReport {
        seed,
        reads_ok: log.reads.len() as u64,
        reads_failed: log.reads_failed,
        writes_ok: log.acked.len() as u64,
        writes_failed: log.writes_failed,
        extra_reads,
        faults,
        violations,
    }
}
