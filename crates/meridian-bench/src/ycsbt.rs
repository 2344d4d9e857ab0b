//! YCSB+T on transactional buckets (spec `transactions.md`, "Numbers to reproduce"): the
//! Clock-SI paper's micro-benchmark and the closed-economy workload of Dey et al.
//!
//! | part | what |
//! |---|---|
//! | [`Protocol`] | Clock-SI (Δ = 0), the oracle unbatched, the oracle batched: a bucket's [`TxnProps`] |
//! | [`YcsbtWorkload`] | transactions of `items_per_partition` uniform keys at each of 1..n partitions, read-only or update-only |
//! | [`TxnClient`], [`run_clients`] | closed-loop clients, each running its transactions on its origin node (the leader nearest to it) |
//! | [`ServiceModel`] | an optional per-node service time charged by the driver (the emulated cluster has none) |
//! | [`closed_economy`] | transfers between accounts and a one-snapshot validation read; the anomaly score |
//!
//! A **partition** here is what the paper calls one: a node leading partitions of the ring
//! ([`EventualNode::txn_leader`]). A transaction touching `p` partitions draws
//! `items_per_partition` distinct keys uniformly among the keys each of `p` leaders leads
//! (rejection sampling over a key space of `key_count` keys, so nothing is preloaded: a read
//! of a key never written returns `None` at the same cost).
//!
//! Everything is deterministic given the seeds, and all time is tokio's: under a paused clock
//! the runs are in virtual time.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use meridian_core::{NodeId, Timestamp};
use meridian_replication::{
    EventualNode, TimestampSource, TsoBatching, TxnError, TxnOptions, TxnProps, TxnStats,
};
use parking_lot::Mutex;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::BenchError;

/// The transactional bucket YCSB+T keys live in.
pub const TXN_BUCKET: &str = "ycsbt";

/// Where a transaction's timestamps come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Clock-SI with Δ = 0 (the paper's setting).
    ClockSi,
    /// Conventional SI, one oracle RPC per timestamp.
    TsoUnbatched,
    /// Conventional SI, one oracle RPC in flight per node carrying every waiting request.
    TsoBatched,
}

impl Protocol {
    /// Every protocol, in report order.
    pub const ALL: [Protocol; 3] = [
        Protocol::ClockSi,
        Protocol::TsoUnbatched,
        Protocol::TsoBatched,
    ];

    /// The name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::ClockSi => "clock_si",
            Protocol::TsoUnbatched => "tso_unbatched",
            Protocol::TsoBatched => "tso_batched",
        }
    }

    /// The bucket's transaction properties: the oracle on DC `tso_dc` at `tso_max_rate` RPCs/s.
    pub fn props(self, tso_dc: u32, tso_max_rate: Option<u32>) -> TxnProps {
        let mut p = TxnProps {
            snapshot_delta_us: Some(0),
            ..TxnProps::default()
        };
        match self {
            Protocol::ClockSi => p.timestamps = Some(TimestampSource::ClockSi),
            Protocol::TsoUnbatched | Protocol::TsoBatched => {
                p.timestamps = Some(TimestampSource::Tso);
                p.tso_dc = Some(tso_dc);
                p.tso_max_rate = tso_max_rate;
                p.tso_batching = Some(if self == Protocol::TsoBatched {
                    TsoBatching::Batched
                } else {
                    TsoBatching::Unbatched
                });
            }
        }
        p
    }
}

/// The YCSB+T transaction shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct YcsbtWorkload {
    /// Keys read or written at each partition a transaction touches (the paper: 8).
    pub items_per_partition: usize,
    /// Size of the key space (uniform popularity).
    pub key_count: u64,
    /// Bytes of each written value.
    pub value_size: usize,
    /// Read-only transactions, or update-only (blind writes) ones.
    pub read_only: bool,
}

impl Default for YcsbtWorkload {
    fn default() -> Self {
        YcsbtWorkload {
            items_per_partition: 8,
            key_count: 10_000_000,
            value_size: 100,
            read_only: true,
        }
    }
}

/// Draws per leader before a key space is declared to have no key on it.
const MAX_DRAWS: usize = 100_000;

impl YcsbtWorkload {
    /// Key number `i` in the bucket.
    pub fn key(i: u64) -> Bytes {
        Bytes::from(format!("{TXN_BUCKET}:user{i}"))
    }

    /// `items_per_partition` distinct keys, uniform over the key space, led by `leader`.
    pub fn keys_on(
        &self,
        node: &EventualNode,
        leader: NodeId,
        rng: &mut impl Rng,
        out: &mut Vec<Bytes>,
    ) -> Result<(), BenchError> {
        let start = out.len();
        let mut draws = 0;
        while out.len() - start < self.items_per_partition {
            draws += 1;
            if draws > MAX_DRAWS {
                return Err(BenchError::Target {
                    reason: format!("no key of the key space is led by {leader}"),
                });
            }
            let k = Self::key(rng.random_range(0..self.key_count.max(1)));
            if node.txn_leader(&k).1 == leader && !out[start..].contains(&k) {
                out.push(k);
            }
        }
        Ok(())
    }

    /// The keys of one transaction over `partitions` (leaders).
    pub fn transaction(
        &self,
        node: &EventualNode,
        partitions: &[NodeId],
        rng: &mut impl Rng,
    ) -> Result<Vec<Bytes>, BenchError> {
        let mut keys = Vec::with_capacity(partitions.len() * self.items_per_partition);
        for &p in partitions {
            self.keys_on(node, p, rng, &mut keys)?;
        }
        Ok(keys)
    }
}

/// Runs one YCSB+T transaction on `node`: reads every key, or writes `value` to every key.
pub async fn run_transaction(
    node: &EventualNode,
    keys: &[Bytes],
    read_only: bool,
    value: &Bytes,
) -> Result<Timestamp, TxnError> {
    let mut t = node.begin(TxnOptions {
        read_only,
        session: None,
    });
    if read_only {
        t.read(keys).await?;
    } else {
        for k in keys {
            t.write(k.clone(), Some(value.clone()))?;
        }
    }
    t.commit().await
}

/// A per-node service time, charged by the driver because the emulated cluster charges none
/// (a node in virtual time serves any number of requests at once): each node is a FIFO single
/// server that spends `per_message_us` on each client request it serves and on each oracle
/// RPC it sends, plus `update_extra_us` on an update transaction's request (installing
/// versions). Times are kept in fractional µs, so throughput is exact even though tokio's
/// virtual timers resolve 1 ms (a request's completion is rounded up to the next ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServiceModel {
    /// µs per message handled.
    pub per_message_us: f64,
    /// Extra µs of an update transaction's request.
    pub update_extra_us: f64,
}

#[derive(Debug, Default)]
struct NodeCpu {
    next_free_us: Mutex<f64>,
    charged_rpcs: AtomicU64,
}

/// The per-node servers of a [`ServiceModel`].
#[derive(Debug)]
pub(crate) struct Cpus {
    model: ServiceModel,
    origin: Instant,
    nodes: BTreeMap<NodeId, NodeCpu>,
}

impl Cpus {
    /// Idle servers for `nodes`, in time since `origin`.
    pub(crate) fn new(model: ServiceModel, origin: Instant, nodes: &[EventualNode]) -> Cpus {
        Cpus {
            model,
            origin,
            nodes: nodes
                .iter()
                .map(|n| {
                    let c = NodeCpu::default();
                    c.charged_rpcs
                        .store(n.txn_stats().tso_rpcs, Ordering::Relaxed);
                    (n.id(), c)
                })
                .collect(),
        }
    }

    /// The model.
    pub(crate) fn model(&self) -> ServiceModel {
        self.model
    }

    /// Queues `cost_us` of work at `node`'s server and waits until it is done.
    pub(crate) async fn charge(&self, node: NodeId, cost_us: f64) {
        let Some(cpu) = self.nodes.get(&node) else {
            return;
        };
        if cost_us <= 0.0 {
            return;
        }
        let now = self.origin.elapsed().as_secs_f64() * 1e6;
        let done = {
            let mut nf = cpu.next_free_us.lock();
            *nf = nf.max(now) + cost_us;
            *nf
        };
        tokio::time::sleep_until(self.origin + Duration::from_secs_f64(done / 1e6)).await;
    }

    /// Charges the oracle RPCs `node` sent since the last charge.
    async fn charge_rpcs(&self, node: &EventualNode) {
        let Some(cpu) = self.nodes.get(&node.id()) else {
            return;
        };
        let now = node.txn_stats().tso_rpcs;
        let before = cpu.charged_rpcs.swap(now, Ordering::Relaxed);
        let n = now.saturating_sub(before);
        self.charge(node.id(), n as f64 * self.model.per_message_us)
            .await;
    }
}

/// One closed-loop client.
#[derive(Clone)]
pub struct TxnClient {
    /// The node the client's transactions run on (its nearest partition's leader).
    pub origin: EventualNode,
    /// The partitions (leaders) it may touch, nearest first; the first is the origin's.
    pub partitions: Vec<NodeId>,
    /// Take the nearest partitions after the origin (true) or random ones (false).
    pub nearest: bool,
    /// The report group the client's latencies go to (e.g. its DC).
    pub group: String,
}

/// A measured run of [`TxnClient`]s.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The transactions.
    pub workload: YcsbtWorkload,
    /// Partitions each transaction touches.
    pub partitions_per_txn: usize,
    /// Excluded from the results.
    pub warmup: Duration,
    /// Measured.
    pub measure: Duration,
    /// The client's round trip to its origin node, paid before each transaction.
    pub client_hop: Duration,
    /// A per-node service time, if any.
    pub service: Option<ServiceModel>,
    /// Seed of the key choices.
    pub seed: u64,
}

/// What a run measured (transactions that finished inside the measured window).
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Latency (µs, client hop included) of committed transactions, per client group.
    pub latency: BTreeMap<String, Histogram<u64>>,
    /// Committed transactions.
    pub commits: u64,
    /// Aborted ones, by error code.
    pub aborts: BTreeMap<String, u64>,
    /// Measured seconds.
    pub seconds: f64,
    /// The nodes' counters over the window, summed.
    pub stats: TxnStats,
}

impl RunOutcome {
    /// Committed transactions per second.
    pub fn throughput(&self) -> f64 {
        self.commits as f64 / self.seconds.max(1e-9)
    }

    /// Aborted transactions.
    pub fn abort_count(&self) -> u64 {
        self.aborts.values().sum()
    }

    /// Every group's latencies merged.
    pub fn all_latency(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for g in self.latency.values() {
            let _ = h.add(g);
        }
        h
    }
}

/// An empty latency histogram (µs, 1 µs .. 1 h, 3 digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// Every node's counters, summed.
pub fn sum_stats(nodes: &[EventualNode]) -> TxnStats {
    let mut s = TxnStats::default();
    for n in nodes {
        let t = n.txn_stats();
        s.commits += t.commits;
        s.aborts += t.aborts;
        s.r1_waits += t.r1_waits;
        s.r1_wait_us += t.r1_wait_us;
        s.r2_waits += t.r2_waits;
        s.r2_wait_us += t.r2_wait_us;
        s.tso_rpcs += t.tso_rpcs;
        s.tso_timestamps += t.tso_timestamps;
        s.versions_collected += t.versions_collected;
        s.two_phase_commits += t.two_phase_commits;
    }
    s
}

/// The counters' change from `a` to `b`.
pub fn diff_stats(a: TxnStats, b: TxnStats) -> TxnStats {
    TxnStats {
        commits: b.commits - a.commits,
        aborts: b.aborts - a.aborts,
        r1_waits: b.r1_waits - a.r1_waits,
        r1_wait_us: b.r1_wait_us - a.r1_wait_us,
        r2_waits: b.r2_waits - a.r2_waits,
        r2_wait_us: b.r2_wait_us - a.r2_wait_us,
        tso_rpcs: b.tso_rpcs - a.tso_rpcs,
        tso_timestamps: b.tso_timestamps - a.tso_timestamps,
        versions_collected: b.versions_collected - a.versions_collected,
        two_phase_commits: b.two_phase_commits - a.two_phase_commits,
    }
}

/// A short code for a transaction error (`ww_conflict`, `timeout`, ...).
pub fn error_code(e: &TxnError) -> String {
    let s = e.to_string();
    let mut words = s.split_whitespace();
    let first = words.next().unwrap_or("error");
    match (first, words.next()) {
        ("txn_aborted", Some(why)) => why
            .split(['=', '(', '{', ':'])
            .next()
            .unwrap_or(why)
            .to_owned(),
        _ => first.to_owned(),
    }
}

#[derive(Default)]
struct Tally {
    latency: BTreeMap<String, Histogram<u64>>,
    commits: u64,
    aborts: BTreeMap<String, u64>,
}

/// Runs `clients` in closed loops for `spec.warmup + spec.measure`, then waits for every
/// transaction in flight. `nodes`: every node, for the counters.
pub async fn run_clients(
    clients: Vec<TxnClient>,
    nodes: &[EventualNode],
    spec: &RunSpec,
) -> Result<RunOutcome, BenchError> {
    if spec.partitions_per_txn == 0 {
        return Err(BenchError::InvalidDesign {
            reason: "a transaction touches at least one partition".into(),
        });
    }
    if let Some(c) = clients
        .iter()
        .find(|c| c.partitions.len() < spec.partitions_per_txn)
    {
        return Err(BenchError::InvalidDesign {
            reason: format!(
                "client of {} sees {} partitions, fewer than the {} a transaction touches",
                c.group,
                c.partitions.len(),
                spec.partitions_per_txn
            ),
        });
    }
    let t0 = Instant::now();
    let cpus = spec
        .service
        .map(|model| Arc::new(Cpus::new(model, t0, nodes)));
    let window_start = t0 + spec.warmup;
    let window_end = window_start + spec.measure;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let spec = Arc::new(spec.clone());
    let value = Bytes::from(vec![b'v'; spec.workload.value_size]);
    let mut tasks = Vec::with_capacity(clients.len());
    for (i, client) in clients.into_iter().enumerate() {
        let spec = spec.clone();
        let tally = tally.clone();
        let cpus = cpus.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng =
                ChaCha8Rng::seed_from_u64(spec.seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
            let p = spec.partitions_per_txn;
            let mut chosen = Vec::with_capacity(p);
            loop {
                let start = Instant::now();
                if start >= window_end {
                    return Ok::<(), BenchError>(());
                }
                chosen.clear();
                chosen.push(client.partitions[0]);
                if client.nearest {
                    chosen.extend_from_slice(&client.partitions[1..p]);
                } else {
                    let mut rest = client.partitions[1..].to_vec();
                    rest.shuffle(&mut rng);
                    chosen.extend_from_slice(&rest[..p - 1]);
                }
                let keys = spec
                    .workload
                    .transaction(&client.origin, &chosen, &mut rng)?;
                tokio::time::sleep(spec.client_hop).await;
                if let Some(c) = &cpus {
                    let extra = if spec.workload.read_only {
                        0.0
                    } else {
                        c.model.update_extra_us
                    };
                    c.charge(client.origin.id(), c.model.per_message_us + extra)
                        .await;
                }
                let r =
                    run_transaction(&client.origin, &keys, spec.workload.read_only, &value).await;
                if let Some(c) = &cpus {
                    c.charge_rpcs(&client.origin).await;
                }
                let end = Instant::now();
                if end < window_start || end >= window_end {
                    continue;
                }
                let mut t = tally.lock();
                match r {
                    Ok(_) => {
                        t.commits += 1;
                        let us = end.duration_since(start).as_micros() as u64;
                        let h = t
                            .latency
                            .entry(client.group.clone())
                            .or_insert_with(new_histogram);
                        let _ = h.record(us.max(1));
                    }
                    Err(e) => *t.aborts.entry(error_code(&e)).or_default() += 1,
                }
            }
        }));
    }
    tokio::time::sleep_until(window_start).await;
    let before = sum_stats(nodes);
    tokio::time::sleep_until(window_end).await;
    let after = sum_stats(nodes);
    for t in tasks {
        t.await.map_err(|e| BenchError::Target {
            reason: format!("a client task failed: {e}"),
        })??;
    }
    let t = std::mem::take(&mut *tally.lock());
    Ok(RunOutcome {
        latency: t.latency,
        commits: t.commits,
        aborts: t.aborts,
        seconds: spec.measure.as_secs_f64(),
        stats: diff_stats(before, after),
    })
}

/// The closed-economy workload (Dey et al., YCSB+T): accounts holding a fixed total, clients
/// moving money between random pairs, and a validation that reads every account in one
/// snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EconomyConfig {
    /// Accounts.
    pub accounts: usize,
    /// Each account's initial balance.
    pub initial_balance: i64,
    /// Concurrent clients.
    pub clients: usize,
    /// Transfers each client attempts.
    pub transfers_per_client: usize,
    /// A client audits (one read-only snapshot of every account) after every this many
    /// transfers (0: never).
    pub audit_every: usize,
    /// Seed of the choices.
    pub seed: u64,
}

impl Default for EconomyConfig {
    fn default() -> Self {
        EconomyConfig {
            accounts: 100,
            initial_balance: 1_000,
            clients: 16,
            transfers_per_client: 50,
            audit_every: 10,
            seed: 1,
        }
    }
}

/// What a closed-economy run found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EconomyReport {
    /// Operations: transfers attempted, audits and the final validation.
    pub operations: u64,
    /// Transfers that committed.
    pub committed: u64,
    /// Transfers that aborted (retryable conflicts; an aborted transfer moves nothing).
    pub aborted: u64,
    /// The money loaded.
    pub expected_total: i64,
    /// The money the final one-snapshot validation counted.
    pub counted_total: i64,
    /// Audits whose snapshot did not sum to the total (0 under snapshot isolation).
    pub bad_audits: u64,
    /// Audits run.
    pub audits: u64,
    /// `|expected_total − counted_total| / operations` (Dey et al.'s anomaly score).
    pub score: f64,
}

/// Account `i`'s key.
pub fn account_key(i: usize) -> Bytes {
    Bytes::from(format!("{TXN_BUCKET}:acct{i}"))
}

fn balance(v: &Option<Bytes>) -> i64 {
    v.as_ref()
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0)
}

async fn sum_accounts(node: &EventualNode, keys: &[Bytes]) -> Result<i64, TxnError> {
    let mut t = node.begin(TxnOptions {
        read_only: true,
        session: None,
    });
    let v = t.read(keys).await?;
    t.commit().await?;
    Ok(v.iter().map(balance).sum())
}

/// Runs the closed economy on `nodes` (clients round-robin over them): loads the accounts in
/// one transaction, runs the transfers and audits, then validates.
pub async fn closed_economy(
    nodes: &[EventualNode],
    cfg: &EconomyConfig,
) -> Result<EconomyReport, BenchError> {
    if nodes.is_empty() || cfg.accounts < 2 {
        return Err(BenchError::InvalidDesign {
            reason: "the closed economy needs a node and at least 2 accounts".into(),
        });
    }
    let target = |e: TxnError| BenchError::Target {
        reason: format!("closed economy: {e}"),
    };
    let keys: Arc<Vec<Bytes>> = Arc::new((0..cfg.accounts).map(account_key).collect());
    let mut load = nodes[0].begin(TxnOptions::default());
    for k in keys.iter() {
        load.write(
            k.clone(),
            Some(Bytes::from(cfg.initial_balance.to_string())),
        )
        .map_err(target)?;
    }
    load.commit().await.map_err(target)?;
    let expected_total = cfg.initial_balance * cfg.accounts as i64;
    let mut tasks = Vec::new();
    for c in 0..cfg.clients {
        let node = nodes[c % nodes.len()].clone();
        let keys = keys.clone();
        let cfg = cfg.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ ((c as u64 + 1) << 20));
            let (mut ok, mut aborted, mut audits, mut bad) = (0u64, 0u64, 0u64, 0u64);
            for i in 0..cfg.transfers_per_client {
                let a = rng.random_range(0..keys.len());
                let mut b = rng.random_range(0..keys.len() - 1);
                if b >= a {
                    b += 1;
                }
                let r = async {
                    let mut t = node.begin(TxnOptions::default());
                    let v = t.read(&[keys[a].clone(), keys[b].clone()]).await?;
                    let (va, vb) = (balance(&v[0]), balance(&v[1]));
                    let amount = rng.random_range(0..=va.clamp(0, 10));
                    t.write(
                        keys[a].clone(),
                        Some(Bytes::from((va - amount).to_string())),
                    )?;
                    t.write(
                        keys[b].clone(),
                        Some(Bytes::from((vb + amount).to_string())),
                    )?;
                    t.commit().await
                }
                .await;
                match r {
                    Ok(_) => ok += 1,
                    Err(_) => aborted += 1,
                }
                if cfg.audit_every > 0 && (i + 1) % cfg.audit_every == 0 {
                    audits += 1;
                    match sum_accounts(&node, &keys).await {
                        Ok(s) if s == expected_total => {}
                        _ => bad += 1,
                    }
                }
            }
            (ok, aborted, audits, bad)
        }));
    }
    let (mut committed, mut aborted, mut audits, mut bad_audits) = (0, 0, 0, 0);
    for t in tasks {
        let (o, a, au, b) = t.await.map_err(|e| BenchError::Target {
            reason: format!("a closed-economy client failed: {e}"),
        })?;
        committed += o;
        aborted += a;
        audits += au;
        bad_audits += b;
    }
    let counted_total = sum_accounts(&nodes[nodes.len() - 1], &keys)
        .await
        .map_err(target)?;
    let operations = committed + aborted + audits + 1;
    Ok(EconomyReport {
        operations,
        committed,
        aborted,
        expected_total,
        counted_total,
        bad_audits,
        audits,
        score: (expected_total - counted_total).unsigned_abs() as f64 / operations as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_set_their_timestamp_source() {
        assert_eq!(
            Protocol::ClockSi.props(0, None).source(),
            TimestampSource::ClockSi
        );
        let t = Protocol::TsoBatched.props(2, Some(64_000));
        assert_eq!(t.source(), TimestampSource::Tso);
        assert_eq!(t.tso_dc, Some(2));
        assert_eq!(t.tso_batching, Some(TsoBatching::Batched));
        assert!(t.validate().is_ok());
    }

    #[test]
    fn error_codes_are_short() {
        let e: TxnError = meridian_replication::TxnError::BadRequest("x y".into());
        assert!(!error_code(&e).contains(' '));
    }
}
