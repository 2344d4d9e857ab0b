//! Simulated clients of transactional buckets (spec `transactions.md`), and the run of a
//! transactional scenario: the bank, list-append, write-skew and counter workloads under the
//! scenario's faults and clock nemesis, judged by the bank audits, the SI checker and the
//! counter and prepared-mark checks.
//!
//! **Workloads** (all at once, clients in every DC, each on its own transactional bucket with
//! the run's [`TxnProps`]):
//! - **bank** (`bank:acct<i>`): `accounts` accounts of `initial` each, written by one
//!   transaction before the clients start; transfers read two accounts and move an amount
//!   if the source allows; read-only audits read **every** account in one transaction, and
//!   every audit that returned is checked ([`check_bank_audits`]: constant total, no
//!   negative balance);
//! - **list-append** (`la:<k>`, values comma-separated integers): 1–4 micro-ops per
//!   transaction, recorded as an Elle [`TxnHistory`] with `commit_ts` and `snapshot_ts`,
//!   checked with [`check_si`] under the run's model;
//! - **write-skew** (`ws:<2j>`, `ws:<2j+1>`, rw-register): read both keys of a pair, write
//!   one; must pass SI, and where the run asks for it must be flagged not serializable
//!   (the positive control);
//! - **counter** (`ctr:c`): increments (read, write + 1), first a burst of concurrent ones
//!   from every node, then a client per DC; the final value must equal the committed
//!   increments (within the unknown outcomes): lost updates show;
//! - **key moves** (`movers`, off by default; spec `repartitioning.md` §6): movers move a
//!   random account and a random list-append key to a partition led by another node, every
//!   `move_every`, while the other clients run — the bank audits and the SI checker then
//!   judge the histories across moves (invariant 9).
//!
//! **Outcomes.** A transaction that fails before its commit is a certain abort (`fail`); at
//! the commit, `timeout`, `coordinator_lost`, storage and request errors, and any answer from
//! a coordinator that crashed meanwhile, are unknown (`info`); other errors are certain.
//!
//! **After the run** every fault is healed and the cluster quiesces; then one read-only
//! transaction per DC reads every key: it must succeed without waiting for a prepared
//! transaction (no mark remains once outcomes are known), and its results join the
//! histories (a final audit, a final read of every list and register, the counter's value).

use crate::checker::Verdict;
use crate::checker::si::{AnomalyKind, Model, SiReport, check as check_si, check_bank_audits};
use crate::checker::txn_history::{EventType, Mop, TxnHistory};
use crate::cluster::{CrashCounts, LiveNodes};
use crate::faults::ScheduledFault;
use crate::history::History;
use crate::scenario::{Report, Scenario};
use crate::workload::OpCounts;
use bytes::Bytes;
use meridian_core::{NodeId, SkewedClock, Timestamp};
use meridian_replication::{
    BucketProps, EventualNode, TimestampSource, TokioClock, TsoBatching, TxnControls as Controls,
    TxnError, TxnOptions, TxnProps, TxnStats,
};
use meridian_txn::Abort;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The buckets of a transactional run.
pub const TXN_BUCKETS: [&str; 4] = ["bank", "la", "ws", "ctr"];

/// How the nodes' clocks behave during a transactional run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ClockPlan {
    /// The cluster's defaults: ±20 ms offsets, ±50 ppm drift.
    Default,
    /// Node `i` runs `+skew` (even `i`) or `−skew` (odd `i`) from true time, no drift.
    Alternating {
        /// The offset, µs.
        skew_us: i64,
    },
    /// The spec's clock nemesis: offsets up to ±500 ms and drift up to ±100 ppm at the start,
    /// then every 1–4 s one of: a forward jump (0.1–2 s), a backward step (0.1–0.5 s, which
    /// the nodes' monotonic clocks turn into a stall), strobing (for 1 s the offset flips by
    /// ±(10–200) ms every 20 ms), or a new drift.
    Nemesis,
}

/// What a transactional run must find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnExpect {
    /// Every check passes.
    Pass,
    /// A negative control: at least one check must fail (the run passes iff one did).
    Caught,
}

/// The clients of a transactional run.
#[derive(Debug, Clone)]
pub struct TxnWorkloadConfig {
    /// Bank accounts.
    pub accounts: usize,
    /// Each account's initial balance.
    pub initial: i64,
    /// Transfer clients per DC.
    pub transfer_clients: usize,
    /// Audit clients per DC.
    pub audit_clients: usize,
    /// List-append clients per DC.
    pub list_clients: usize,
    /// List-append keys.
    pub list_keys: i64,
    /// Write-skew clients per DC.
    pub skew_clients: usize,
    /// Write-skew key pairs.
    pub skew_pairs: i64,
    /// Counter clients per DC (after the burst).
    pub counter_clients: usize,
    /// Pause between a client's transactions (up to).
    pub think: Duration,
    /// Longest a transaction may take before its outcome is taken as unknown (a backstop:
    /// the protocol bounds every step itself).
    pub timeout: Duration,
    /// Clients moving keys between leaders (in the first DC; 0: no moves).
    pub movers: usize,
    /// Pause between a mover's batches.
    pub move_every: Duration,
}

impl Default for TxnWorkloadConfig {
    fn default() -> Self {
        TxnWorkloadConfig {
            accounts: 24,
            initial: 100,
            transfer_clients: 2,
            audit_clients: 1,
            list_clients: 2,
            list_keys: 8,
            skew_clients: 1,
            skew_pairs: 2,
            counter_clients: 1,
            think: Duration::from_millis(50),
            timeout: Duration::from_secs(30),
            movers: 0,
            move_every: Duration::from_millis(200),
        }
    }
}

/// The transactional part of a scenario.
#[derive(Debug, Clone)]
pub struct TxnRun {
    /// The buckets' settings (timestamp source, Δ, oracle batching).
    pub props: TxnProps,
    /// Whether list-append clients pass their session token (last commit timestamp).
    pub session: bool,
    /// The model the list-append history is judged against.
    pub model: Model,
    /// Protocol rules switched off on every node (negative controls).
    pub controls: Controls,
    /// The clocks.
    pub clocks: ClockPlan,
    /// The clients.
    pub workload: TxnWorkloadConfig,
    /// Whether the write-skew history must be flagged not serializable (positive control).
    pub require_write_skew: bool,
    /// What the run must find.
    pub expect: TxnExpect,
}

impl TxnRun {
    /// A run with `source` timestamps (the oracle batched when `tso`), session tokens,
    /// judged under strong-session SI, every rule on, default clocks, expected to pass.
    pub fn new(source: TimestampSource) -> TxnRun {
        TxnRun {
            props: TxnProps {
                timestamps: Some(source),
                tso_batching: (source == TimestampSource::Tso).then_some(TsoBatching::Batched),
                ..TxnProps::default()
            },
            session: true,
            model: Model::StrongSessionSnapshotIsolation,
            controls: Controls::default(),
            clocks: ClockPlan::Default,
            workload: TxnWorkloadConfig::default(),
            require_write_skew: false,
            expect: TxnExpect::Pass,
        }
    }

    /// The buckets to add to the cluster.
    pub fn buckets(&self) -> BTreeMap<String, BucketProps> {
        TXN_BUCKETS
            .iter()
            .map(|b| ((*b).to_owned(), BucketProps::transactional(self.props)))
            .collect()
    }
}

/// What a transactional run recorded and concluded.
#[derive(Debug, Clone, Default)]
pub struct TxnOutcome {
    /// The list-append history (Elle JSON lines via [`TxnHistory::save`]).
    pub list_append: TxnHistory,
    /// The write-skew history (rw-register).
    pub write_skew: TxnHistory,
    /// Every bank audit that returned (account → balance), the final ones included.
    pub audits: Vec<BTreeMap<usize, i64>>,
    /// The list-append history under the run's model.
    pub si: Option<SiReport>,
    /// The write-skew history under snapshot isolation.
    pub skew_si: Option<SiReport>,
    /// The write-skew history under serializability.
    pub skew_serializable: Option<SiReport>,
    /// The nodes' transaction counters at the end (current lives), summed.
    pub stats: TxnStats,
    /// Errors seen by clients, by kind.
    pub errors: BTreeMap<String, u64>,
    /// Transfers committed / unknown.
    pub transfers: (u64, u64),
}

#[derive(Debug, Default)]
struct Logs {
    la: TxnHistory,
    ws: TxnHistory,
    audits: Vec<BTreeMap<usize, i64>>,
    errors: BTreeMap<String, u64>,
    transfers: (u64, u64),
    /// Counter increments committed, unknown.
    counter: (u64, u64),
    counts: OpCounts,
    /// The highest commit timestamp any client was told (the final reads' session token).
    max_commit: Option<Timestamp>,
}

struct Ctx {
    cfg: TxnWorkloadConfig,
    session: bool,
    live: LiveNodes,
    crashes: CrashCounts,
    origin: Instant,
    logs: Mutex<Logs>,
    next_value: Mutex<i64>,
    /// Keys the movers moved.
    moved: std::sync::atomic::AtomicUsize,
}

impl Ctx {
    fn now_ns(&self) -> u64 {
        Instant::now().duration_since(self.origin).as_nanos() as u64
    }

    fn unique(&self) -> i64 {
        let mut v = self.next_value.lock();
        *v += 1;
        *v
    }

    fn error(&self, e: &str) {
        *self.logs.lock().errors.entry(e.to_owned()).or_insert(0) += 1;
    }
}

fn account(i: usize) -> Bytes {
    Bytes::from(format!("bank:acct{i}"))
}

fn la_key(k: i64) -> Bytes {
    Bytes::from(format!("la:{k}"))
}

fn ws_key(k: i64) -> Bytes {
    Bytes::from(format!("ws:{k}"))
}

fn counter_key() -> Bytes {
    Bytes::from_static(b"ctr:c")
}

fn parse_int(v: &Option<Bytes>) -> Option<i64> {
    v.as_ref()
        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
}

fn parse_list(v: &Option<Bytes>) -> Vec<i64> {
    match v {
        None => Vec::new(),
        Some(b) => String::from_utf8_lossy(b)
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap_or(i64::MIN))
            .collect(),
    }
}

fn encode_list(l: &[i64]) -> Bytes {
    Bytes::from(l.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

fn int_bytes(v: i64) -> Bytes {
    Bytes::from(v.to_string())
}

/// A short name for an error (`txn_aborted ww_conflict`).
fn error_kind(e: &TxnError) -> String {
    e.to_string()
        .split(' ')
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a commit that returned `e` certainly did not commit.
fn certainly_aborted(e: &TxnError) -> bool {
    !matches!(
        e,
        TxnError::Aborted(Abort::Timeout(_) | Abort::CoordinatorLost)
            | TxnError::Storage(_)
            | TxnError::BadRequest(_)
    )
}

/// How a transaction ended, for the recorder.
enum Ended {
    Committed(Timestamp),
    Aborted,
    Unknown,
}

fn pick(ctx: &Ctx, nodes: &[NodeId], rng: &mut ChaCha8Rng) -> Option<(EventualNode, u32)> {
    let node = crate::workload::pick_coordinator(&ctx.live, nodes, rng)?;
    let crashes = ctx.crashes.read().get(&node.id()).copied().unwrap_or(0);
    Some((node, crashes))
}

fn crashed_since(ctx: &Ctx, node: &EventualNode, crashes: u32) -> bool {
    ctx.crashes.read().get(&node.id()).copied().unwrap_or(0) != crashes
}

/// Commits `t` and classifies the outcome (`crashes`: the coordinator's crash count at the
/// start; a coordinator that crashed meanwhile gives an unknown outcome).
async fn finish(
    ctx: &Ctx,
    node: &EventualNode,
    crashes: u32,
    t: meridian_replication::Transaction,
) -> Ended {
    let r = tokio::time::timeout(ctx.cfg.timeout, t.commit()).await;
    if crashed_since(ctx, node, crashes) {
        return Ended::Unknown;
    }
    match r {
        Ok(Ok(ts)) => {
            let mut l = ctx.logs.lock();
            l.max_commit = Some(l.max_commit.map_or(ts, |m| m.max(ts)));
            Ended::Committed(ts)
        }
        Ok(Err(e)) => {
            ctx.error(&format!("commit: {}", error_kind(&e)));
            if certainly_aborted(&e) {
                Ended::Aborted
            } else {
                Ended::Unknown
            }
        }
        Err(_) => {
            ctx.error("commit: client timeout");
            Ended::Unknown
        }
    }
}

async fn think(ctx: &Ctx, rng: &mut ChaCha8Rng) {
    let max = ctx.cfg.think.as_micros() as u64;
    tokio::time::sleep(Duration::from_micros(rng.random_range(1..=max.max(1)))).await;
}

async fn transfer(ctx: &Ctx, nodes: &[NodeId], rng: &mut ChaCha8Rng) {
    let Some((node, crashes)) = pick(ctx, nodes, rng) else {
        return;
    };
    let a = rng.random_range(0..ctx.cfg.accounts);
    let b = (a + rng.random_range(1..ctx.cfg.accounts)) % ctx.cfg.accounts;
    let amount = rng.random_range(1..=20);
    let mut t = node.begin(TxnOptions::default());
    let read = tokio::time::timeout(ctx.cfg.timeout, t.read(&[account(a), account(b)])).await;
    let Ok(Ok(vals)) = read else {
        if let Ok(Err(e)) = read {
            ctx.error(&format!("transfer read: {}", error_kind(&e)));
        }
        return;
    };
    let (Some(from), Some(to)) = (parse_int(&vals[0]), parse_int(&vals[1])) else {
        ctx.error("transfer read: account missing");
        return;
    };
    if from < amount {
        return;
    }
    let w1 = t.write(account(a), Some(int_bytes(from - amount)));
    let w2 = t.write(account(b), Some(int_bytes(to + amount)));
    if w1.is_err() || w2.is_err() {
        return;
    }
    match finish(ctx, &node, crashes, t).await {
        Ended::Committed(_) => ctx.logs.lock().transfers.0 += 1,
        Ended::Unknown => ctx.logs.lock().transfers.1 += 1,
        Ended::Aborted => {}
    }
}

/// One read-only transaction over every account; the balances if it returned.
async fn audit_once(
    ctx: &Ctx,
    node: &EventualNode,
    crashes: u32,
) -> Result<BTreeMap<usize, i64>, String> {
    let keys: Vec<Bytes> = (0..ctx.cfg.accounts).map(account).collect();
    let mut t = node.begin(TxnOptions {
        read_only: true,
        session: None,
    });
    let r = tokio::time::timeout(ctx.cfg.timeout, t.read(&keys)).await;
    if crashed_since(ctx, node, crashes) {
        return Err("coordinator crashed".into());
    }
    let vals = match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(error_kind(&e)),
        Err(_) => return Err("client timeout".into()),
    };
    let _ = t.commit().await;
    Ok(vals
        .iter()
        .enumerate()
        // A missing account counts as 0: the total shows it.
        .map(|(i, v)| (i, parse_int(v).unwrap_or(0)))
        .collect())
}

async fn audit(ctx: &Ctx, nodes: &[NodeId], rng: &mut ChaCha8Rng) {
    let Some((node, crashes)) = pick(ctx, nodes, rng) else {
        return;
    };
    match audit_once(ctx, &node, crashes).await {
        Ok(a) => ctx.logs.lock().audits.push(a),
        Err(e) => ctx.error(&format!("audit: {e}")),
    }
}

/// One list-append transaction (process `process`); returns the new session token: the
/// highest timestamp a commit returned (a read-only transaction's is its snapshot).
async fn list_append(
    ctx: &Ctx,
    nodes: &[NodeId],
    rng: &mut ChaCha8Rng,
    process: u64,
    session: Option<Timestamp>,
) -> Option<Timestamp> {
    let (node, crashes) = pick(ctx, nodes, rng)?;
    let n = rng.random_range(1..=4);
    let mut ops: Vec<Mop> = (0..n)
        .map(|_| {
            let k = rng.random_range(0..ctx.cfg.list_keys);
            if rng.random_bool(0.5) {
                Mop::read(k)
            } else {
                Mop::append(k, ctx.unique())
            }
        })
        .collect();
    {
        let mut l = ctx.logs.lock();
        let now = ctx.now_ns();
        l.la.invoke(process, &ops, now);
    }
    let mut t = node.begin(TxnOptions {
        read_only: false,
        session: if ctx.session { session } else { None },
    });
    let mut failed = None;
    for op in &mut ops {
        let key = la_key(op.key());
        let r = tokio::time::timeout(ctx.cfg.timeout, t.read(std::slice::from_ref(&key))).await;
        let list = match r {
            Ok(Ok(v)) => parse_list(&v[0]),
            Ok(Err(e)) => {
                failed = Some(error_kind(&e));
                break;
            }
            Err(_) => {
                failed = Some("client timeout".into());
                break;
            }
        };
        match op {
            Mop::Read { key, .. } => *op = Mop::read_list(*key, &list),
            Mop::Append { value, .. } => {
                let mut l = list;
                l.push(*value);
                if t.write(key, Some(encode_list(&l))).is_err() {
                    failed = Some("write refused".into());
                    break;
                }
            }
            Mop::Write { .. } => {}
        }
    }
    let snap = t.snapshot();
    let writes = ops.iter().any(|m| matches!(m, Mop::Append { .. }));
    let ended = match failed {
        Some(e) => {
            ctx.error(&format!("list-append read: {e}"));
            Ended::Aborted
        }
        None => finish(ctx, &node, crashes, t).await,
    };
    let mut l = ctx.logs.lock();
    let now = ctx.now_ns();
    match ended {
        Ended::Committed(ts) => {
            l.counts.ok += 1;
            let e = l.la.record(EventType::Ok, process, ops, now);
            e.snapshot_ts = snap.map(|s| s.0);
            // A read-only transaction's "commit timestamp" is its snapshot: not recorded
            // in the history, but it is the session token all the same (the next snapshot
            // must not go below what this one saw).
            if writes {
                e.commit_ts = Some(ts.0);
            }
            Some(session.map_or(ts, |s| s.max(ts)))
        }
        Ended::Aborted => {
            l.counts.failed += 1;
            let invoked: Vec<Mop> = ops.iter().map(Mop::as_invoked).collect();
            l.la.record(EventType::Fail, process, invoked, now);
            session
        }
        Ended::Unknown => {
            l.counts.unknown += 1;
            let invoked: Vec<Mop> = ops.iter().map(Mop::as_invoked).collect();
            l.la.record(EventType::Info, process, invoked, now);
            session
        }
    }
}

/// One write-skew transaction: read both keys of a pair, write one.
async fn write_skew(ctx: &Ctx, nodes: &[NodeId], rng: &mut ChaCha8Rng, process: u64) {
    let Some((node, crashes)) = pick(ctx, nodes, rng) else {
        return;
    };
    let pair = rng.random_range(0..ctx.cfg.skew_pairs);
    let (x, y) = (2 * pair, 2 * pair + 1);
    let target = if rng.random_bool(0.5) { x } else { y };
    let value = ctx.unique();
    let invoked = vec![Mop::read(x), Mop::read(y), Mop::write(target, value)];
    {
        let mut l = ctx.logs.lock();
        let now = ctx.now_ns();
        l.ws.invoke(process, &invoked, now);
    }
    let mut t = node.begin(TxnOptions::default());
    let r = tokio::time::timeout(ctx.cfg.timeout, t.read(&[ws_key(x), ws_key(y)])).await;
    let mut snap_ts = None;
    let ended = match r {
        Ok(Ok(vals)) => {
            snap_ts = t.snapshot().map(|s| s.0);
            let ops = vec![
                Mop::read_register(x, parse_int(&vals[0])),
                Mop::read_register(y, parse_int(&vals[1])),
                Mop::write(target, value),
            ];
            if t.write(ws_key(target), Some(int_bytes(value))).is_err() {
                (Ended::Aborted, ops)
            } else {
                (finish(ctx, &node, crashes, t).await, ops)
            }
        }
        other => {
            if let Ok(Err(e)) = other {
                ctx.error(&format!("write-skew read: {}", error_kind(&e)));
            }
            (Ended::Aborted, invoked.clone())
        }
    };
    let mut l = ctx.logs.lock();
    let now = ctx.now_ns();
    match ended {
        (Ended::Committed(ts), ops) => {
            l.counts.ok += 1;
            let e = l.ws.record(EventType::Ok, process, ops, now);
            e.commit_ts = Some(ts.0);
            e.snapshot_ts = snap_ts;
        }
        (Ended::Aborted, _) => {
            l.counts.failed += 1;
            let inv: Vec<Mop> = invoked.iter().map(Mop::as_invoked).collect();
            l.ws.record(EventType::Fail, process, inv, now);
        }
        (Ended::Unknown, _) => {
            l.counts.unknown += 1;
            let inv: Vec<Mop> = invoked.iter().map(Mop::as_invoked).collect();
            l.ws.record(EventType::Info, process, inv, now);
        }
    }
}

/// One increment of the counter; how it ended.
async fn increment(ctx: &Ctx, node: &EventualNode, crashes: u32) -> Ended {
    let mut t = node.begin(TxnOptions::default());
    let r = tokio::time::timeout(ctx.cfg.timeout, t.read(&[counter_key()])).await;
    let v = match r {
        Ok(Ok(v)) => parse_int(&v[0]).unwrap_or(0),
        Ok(Err(e)) => {
            ctx.error(&format!("increment read: {}", error_kind(&e)));
            return Ended::Aborted;
        }
        Err(_) => return Ended::Aborted,
    };
    if t.write(counter_key(), Some(int_bytes(v + 1))).is_err() {
        return Ended::Aborted;
    }
    let e = finish(ctx, node, crashes, t).await;
    let mut l = ctx.logs.lock();
    match e {
        Ended::Committed(_) => l.counter.0 += 1,
        Ended::Unknown => l.counter.1 += 1,
        Ended::Aborted => {}
    }
    e
}

#[derive(Clone, Copy)]
enum Kind {
    Transfer,
    Audit,
    List(u64),
    Skew(u64),
    Counter,
    Mover,
}

/// Moves a random account and a random list-append key to partitions led by other nodes.
async fn move_keys(ctx: &Ctx, nodes: &[NodeId], rng: &mut ChaCha8Rng) {
    let Some((node, _)) = pick(ctx, nodes, rng) else {
        return;
    };
    let keys = [
        account(rng.random_range(0..ctx.cfg.accounts)),
        la_key(rng.random_range(0..ctx.cfg.list_keys)),
    ];
    let moves: Vec<(Bytes, meridian_core::PartitionId)> = keys
        .into_iter()
        .filter_map(|k| {
            let now = node.txn_leader(&k).1;
            let layout = node.layout();
            let others: Vec<_> = layout
                .ring()
                .partitions()
                .filter(|&p| layout.replicas(p).first().is_some_and(|&l| l != now))
                .collect();
            if others.is_empty() {
                return None;
            }
            let to = others[rng.random_range(0..others.len())];
            Some((k, to))
        })
        .collect();
    // Failures (a crashed leader, a refused batch) leave the keys where they were.
    if let Ok(r) = node.txn_move_keys(moves).await {
        ctx.moved
            .fetch_add(r.moved, std::sync::atomic::Ordering::Relaxed);
    }
    tokio::time::sleep(ctx.cfg.move_every).await;
}

async fn client(
    ctx: Arc<Ctx>,
    kind: Kind,
    nodes: Vec<NodeId>,
    mut rng: ChaCha8Rng,
    until: CancellationToken,
) {
    let mut session = None;
    while !until.is_cancelled() {
        match kind {
            Kind::Transfer => transfer(&ctx, &nodes, &mut rng).await,
            Kind::Audit => audit(&ctx, &nodes, &mut rng).await,
            Kind::List(p) => session = list_append(&ctx, &nodes, &mut rng, p, session).await,
            Kind::Skew(p) => write_skew(&ctx, &nodes, &mut rng, p).await,
            Kind::Counter => {
                if let Some((node, crashes)) = pick(&ctx, &nodes, &mut rng) {
                    increment(&ctx, &node, crashes).await;
                }
            }
            Kind::Mover => {
                move_keys(&ctx, &nodes, &mut rng).await;
                continue;
            }
        }
        think(&ctx, &mut rng).await;
    }
}

/// Writes every account's initial balance in one transaction (retried until it commits).
async fn init_bank(ctx: &Ctx) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..50 {
        let node = ctx.live.read().values().next().cloned();
        let Some(node) = node else {
            return Err("no live node".into());
        };
        let mut t = node.begin(TxnOptions::default());
        for i in 0..ctx.cfg.accounts {
            t.write(account(i), Some(int_bytes(ctx.cfg.initial)))
                .map_err(|e| e.to_string())?;
        }
        match t.commit().await {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("the bank's accounts were not created: {last}"))
}

/// Sets the clocks per `plan` and, for the nemesis, runs it until `until` (a task).
fn drive_clocks(
    plan: ClockPlan,
    clocks: Vec<(NodeId, Arc<SkewedClock<TokioClock>>)>,
    seed: u64,
    until: CancellationToken,
    log: Arc<Mutex<Vec<String>>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc10c);
    match plan {
        ClockPlan::Default => {}
        ClockPlan::Alternating { skew_us } => {
            for (i, (_, c)) in clocks.iter().enumerate() {
                c.set_drift(0.0);
                c.set_offset(if i % 2 == 0 { skew_us } else { -skew_us });
            }
        }
        ClockPlan::Nemesis => {
            let mut offsets: Vec<i64> = Vec::new();
            for (id, c) in &clocks {
                let o = rng.random_range(-500_000..=500_000);
                let d = rng.random_range(-100.0..=100.0);
                c.set_drift(d);
                c.set_offset(o);
                offsets.push(o);
                log.lock().push(format!(
                    "clock of {id}: offset {:+.1} ms, drift {d:+.0} ppm",
                    o as f64 / 1e3
                ));
            }
            let origin = Instant::now();
            tokio::spawn(async move {
                loop {
                    let wait = Duration::from_millis(rng.random_range(1_000..4_000));
                    tokio::select! {
                        biased;
                        _ = until.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                    let i = rng.random_range(0..clocks.len());
                    let (id, c) = &clocks[i];
                    let at = Instant::now().duration_since(origin).as_secs_f64();
                    match rng.random_range(0..4) {
                        0 => {
                            // Cumulative jumps stay below +2.5 s: beyond `read_wait_max`
                            // (5 s) of skew, Clock-SI only aborts (ClockWait).
                            let by = rng.random_range(100_000..2_000_000);
                            offsets[i] = (offsets[i] + by).min(2_500_000);
                            c.set_offset(offsets[i]);
                            log.lock()
                                .push(format!("t={at:.1}s clock of {id} jumps +{} ms", by / 1000));
                        }
                        1 => {
                            let by = rng.random_range(100_000..500_000);
                            offsets[i] -= by;
                            c.set_offset(offsets[i]);
                            log.lock().push(format!(
                                "t={at:.1}s clock of {id} steps back {} ms (stalls)",
                                by / 1000
                            ));
                        }
                        2 => {
                            let amp = rng.random_range(10_000..200_000);
                            log.lock().push(format!(
                                "t={at:.1}s clock of {id} strobes ±{} ms for 1 s",
                                amp / 1000
                            ));
                            for k in 0..50 {
                                c.set_offset(offsets[i] + if k % 2 == 0 { amp } else { -amp });
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            c.set_offset(offsets[i]);
                        }
                        _ => {
                            let d = rng.random_range(-100.0..=100.0);
                            c.set_drift(d);
                            log.lock()
                                .push(format!("t={at:.1}s clock of {id} drifts {d:+.0} ppm"));
                        }
                    }
                }
            });
        }
    }
}

fn sum_stats(nodes: &[EventualNode]) -> TxnStats {
    let mut t = TxnStats::default();
    for s in nodes.iter().map(EventualNode::txn_stats) {
        t.commits += s.commits;
        t.aborts += s.aborts;
        t.r1_waits += s.r1_waits;
        t.r1_wait_us += s.r1_wait_us;
        t.r2_waits += s.r2_waits;
        t.r2_wait_us += s.r2_wait_us;
        t.tso_rpcs += s.tso_rpcs;
        t.tso_timestamps += s.tso_timestamps;
        t.versions_collected += s.versions_collected;
    }
    t
}

/// The final read from one node of every key: (bank audit, lists, registers, counter).
type FinalRead = (
    BTreeMap<usize, i64>,
    Vec<(i64, Vec<i64>)>,
    Vec<(i64, Option<i64>)>,
    i64,
    Timestamp,
);

/// `session`: a token above every commit the read must see (Clock-SI snapshots follow the
/// reading node's clock, which the nemesis may have left behind another's).
async fn final_read(
    cfg: &TxnWorkloadConfig,
    node: &EventualNode,
    session: Option<Timestamp>,
) -> Result<FinalRead, TxnError> {
    let la: Vec<i64> = (0..cfg.list_keys).collect();
    let ws: Vec<i64> = (0..2 * cfg.skew_pairs).collect();
    let e = |e: TxnError| e;
    let ro = TxnOptions {
        read_only: true,
        session,
    };
    let mut t = node.begin(ro);
    let keys: Vec<Bytes> = (0..cfg.accounts).map(account).collect();
    let bank = t.read(&keys).await.map_err(e)?;
    let snap = t.snapshot().unwrap_or_default();
    // One snapshot per bucket: a transaction's keys share one timestamp source, and all
    // buckets here do, so one transaction reads everything.
    let lists = t
        .read(&la.iter().map(|&k| la_key(k)).collect::<Vec<_>>())
        .await
        .map_err(e)?;
    let regs = t
        .read(&ws.iter().map(|&k| ws_key(k)).collect::<Vec<_>>())
        .await
        .map_err(e)?;
    let ctr = t.read(&[counter_key()]).await.map_err(e)?;
    Ok((
        bank.iter()
            .enumerate()
            .map(|(i, v)| (i, parse_int(v).unwrap_or(0)))
            .collect(),
        la.iter()
            .zip(&lists)
            .map(|(&k, v)| (k, parse_list(v)))
            .collect(),
        ws.iter()
            .zip(&regs)
            .map(|(&k, v)| (k, parse_int(v)))
            .collect(),
        parse_int(&ctr[0]).unwrap_or(0),
        snap,
    ))
}

fn si_verdict(name: &'static str, what: &str, r: &Result<SiReport, crate::Error>) -> Verdict {
    let mut v = Verdict::new(name);
    match r {
        Ok(r) => {
            v.checked = format!("{} transactions under {} ({what})", r.txns, r.model.name());
            for a in r.anomalies.iter().filter(|a| a.kind.forbidden_by(r.model)) {
                v.violation(
                    &Bytes::from(format!("{what}:{:?}", a.key)),
                    Vec::new(),
                    a.to_string(),
                );
            }
        }
        Err(e) => v.violation(&Bytes::new(), Vec::new(), format!("unusable history: {e}")),
    }
    v
}

/// Runs a transactional scenario (see the module docs).
pub(crate) async fn run(scenario: &Scenario, tx: &TxnRun, seed: u64) -> Report {
    let start = Instant::now();
    let (mut cluster, schedule) = crate::scenario::start_cluster(scenario, seed).await;
    let schedule: Vec<ScheduledFault> = schedule;
    for node in cluster.live().read().values() {
        node.set_txn_controls(tx.controls);
    }
    let clock_log = Arc::new(Mutex::new(Vec::new()));
    let until = CancellationToken::new();
    drive_clocks(
        tx.clocks,
        cluster.clocks(),
        seed,
        until.clone(),
        clock_log.clone(),
    );
    let ctx = Arc::new(Ctx {
        cfg: tx.workload.clone(),
        session: tx.session,
        live: cluster.live(),
        crashes: cluster.crash_counts(),
        origin: Instant::now(),
        logs: Mutex::new(Logs::default()),
        next_value: Mutex::new(0),
        moved: std::sync::atomic::AtomicUsize::new(0),
    });
    let mut verdicts = Vec::new();
    let mut notes = Vec::new();
    let init = init_bank(&ctx).await;
    let mut setup = Verdict::new("txn-setup");
    setup.checked = format!(
        "{} accounts created in one transaction",
        tx.workload.accounts
    );
    if let Err(e) = &init {
        setup.violation(&Bytes::from_static(b"bank"), Vec::new(), e.clone());
    }
    verdicts.push(setup);

    // The counter burst: one increment from every node at once.
    let before = {
        let node = ctx.live.read().values().next().cloned();
        match node {
            Some(n) => {
                let session = ctx.logs.lock().max_commit;
                final_read(&tx.workload, &n, session).await
            }
            .map(|f| f.3)
            .unwrap_or(0),
            None => 0,
        }
    };
    let nodes: Vec<(EventualNode, u32)> = {
        let live = ctx.live.read();
        live.values().map(|n| (n.clone(), 0)).collect()
    };
    let burst =
        futures_util::future::join_all(nodes.iter().map(|(n, c)| increment(&ctx, n, *c))).await;
    let burst_ok = burst
        .iter()
        .filter(|e| matches!(e, Ended::Committed(_)))
        .count();
    let after = {
        let node = ctx.live.read().values().next().cloned();
        match node {
            Some(n) => {
                let session = ctx.logs.lock().max_commit;
                final_read(&tx.workload, &n, session).await
            }
            .map(|f| f.3)
            .unwrap_or(0),
            None => 0,
        }
    };

    let origin = Instant::now();
    let machines = cluster.machines();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7a7a);
    let dcs: Vec<_> = {
        let mut d: Vec<_> = machines.iter().map(|m| m.1).collect();
        d.dedup();
        d
    };
    let w = &tx.workload;
    let mut process = 0u64;
    let mut first_dc = true;
    for dc in dcs {
        let in_dc: Vec<NodeId> = machines.iter().filter(|m| m.1 == dc).map(|m| m.0).collect();
        let mut kinds = Vec::new();
        kinds.extend(std::iter::repeat_n(Kind::Transfer, w.transfer_clients));
        kinds.extend(std::iter::repeat_n(Kind::Audit, w.audit_clients));
        kinds.extend(std::iter::repeat_n(Kind::Counter, w.counter_clients));
        for _ in 0..w.list_clients {
            kinds.push(Kind::List(process));
            process += 1;
        }
        for _ in 0..w.skew_clients {
            kinds.push(Kind::Skew(process));
            process += 1;
        }
        if first_dc {
            kinds.extend(std::iter::repeat_n(Kind::Mover, w.movers));
            first_dc = false;
        }
        for kind in kinds {
            let rng = ChaCha8Rng::seed_from_u64(rng.random());
            tokio::spawn(client(ctx.clone(), kind, in_dc.clone(), rng, until.clone()));
        }
    }
    let baseline_link = cluster.wan().config().inter_dc;
    let log = crate::scenario::faults_until(
        &mut cluster,
        &schedule,
        origin,
        scenario.duration,
        &baseline_link,
    )
    .await;
    until.cancel();
    // Transactions already started end within their bounded waits.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let wan = crate::scenario::heal(&mut cluster, baseline_link).await;

    // Prepared marks: a read of every key from each DC must not wait for one.
    let live: Vec<EventualNode> = cluster.live().read().values().cloned().collect();
    let r2_before = sum_stats(&live).r2_waits;
    let mut marks = Verdict::new("txn-marks");
    let mut finals = Vec::new();
    let mut seen_dc = Vec::new();
    for (id, dc) in &machines {
        if seen_dc.contains(dc) {
            continue;
        }
        seen_dc.push(*dc);
        let Some(node) = live.iter().find(|n| n.id() == *id) else {
            continue;
        };
        let mut session = ctx.logs.lock().max_commit;
        let mut result = final_read(&tx.workload, node, session).await;
        // Clocks the nemesis set more than `max_txn_duration` + 1 s apart refuse the slow
        // node's snapshots at the fast leaders (documented): read above the watermark.
        for _ in 0..5 {
            let Err(TxnError::SnapshotTooOld { watermark, .. }) = &result else {
                break;
            };
            session = Some(Timestamp(*watermark));
            tokio::time::sleep(Duration::from_millis(100)).await;
            result = final_read(&tx.workload, node, session).await;
        }
        match result {
            Ok(f) => finals.push(f),
            Err(e) => marks.violation(
                &Bytes::new(),
                Vec::new(),
                format!("the final read through {id} failed: {e}"),
            ),
        }
    }
    let r2_waits = sum_stats(&live).r2_waits - r2_before;
    if r2_waits > 0 {
        marks.violation(
            &Bytes::new(),
            Vec::new(),
            format!("{r2_waits} final read(s) waited for a prepared transaction after healing"),
        );
    }
    marks.checked = format!("{} final reads of every key after healing", finals.len());
    let stats = sum_stats(&live);

    let mut logs = std::mem::take(&mut *ctx.logs.lock());
    let final_process = 1_000_000;
    for (i, (bank, lists, regs, _, snap)) in finals.iter().enumerate() {
        logs.audits.push(bank.clone());
        let p = final_process + i as u64;
        let ops: Vec<Mop> = lists.iter().map(|(k, l)| Mop::read_list(*k, l)).collect();
        let now = Instant::now().duration_since(ctx.origin).as_nanos() as u64;
        logs.la.invoke(p, &ops, now);
        logs.la.record(EventType::Ok, p, ops, now + 1).snapshot_ts = Some(snap.0);
        let ops: Vec<Mop> = regs
            .iter()
            .map(|(k, v)| Mop::read_register(*k, *v))
            .collect();
        logs.ws.invoke(p, &ops, now);
        logs.ws.record(EventType::Ok, p, ops, now + 1);
    }

    // Bank.
    let mut bank = Verdict::new("txn-bank");
    let total = tx.workload.initial * tx.workload.accounts as i64;
    bank.checked = format!(
        "{} audits of {} accounts (total {total}); {} transfers committed, {} unknown",
        logs.audits.len(),
        tx.workload.accounts,
        logs.transfers.0,
        logs.transfers.1
    );
    if let Err(v) = check_bank_audits(&logs.audits, Some(total)) {
        bank.violation(
            &Bytes::from_static(b"bank"),
            Vec::new(),
            format!(
                "audit {}: {}: {:?}",
                v.audit, v.reason, logs.audits[v.audit]
            ),
        );
    }
    verdicts.push(bank);

    // SI on list-append, SI and serializability on write skew.
    let si = check_si(&logs.la, tx.model);
    verdicts.push(si_verdict("txn-si", "list-append", &si));
    let skew_si = check_si(&logs.ws, Model::SnapshotIsolation);
    verdicts.push(si_verdict("txn-write-skew-si", "write-skew", &skew_si));
    let skew_ser = check_si(&logs.ws, Model::Serializable);
    if tx.require_write_skew {
        let mut v = Verdict::new("txn-write-skew-control");
        v.checked = "the write-skew history must be flagged not serializable (G2-item)".into();
        match &skew_ser {
            Ok(r) if !r.valid && r.has(AnomalyKind::G2Item) => {}
            Ok(r) => v.violation(
                &Bytes::from_static(b"ws"),
                Vec::new(),
                format!(
                    "no G2-item found in {} write-skew transactions: the positive control \
                     is broken",
                    r.txns
                ),
            ),
            Err(e) => v.violation(&Bytes::new(), Vec::new(), e.to_string()),
        }
        verdicts.push(v);
    }

    // Counter.
    let mut ctr = Verdict::new("txn-counter");
    let final_ctr = finals.first().map(|f| f.3);
    let (committed, unknown) = logs.counter;
    ctr.checked = format!(
        "burst: {burst_ok} of {} concurrent increments committed, counter {before} -> \
         {after}; in all {committed} committed, {unknown} unknown, final value {final_ctr:?}",
        burst.len()
    );
    if after - before != burst_ok as i64 {
        ctr.violation(
            &counter_key(),
            Vec::new(),
            format!(
                "lost update: {burst_ok} concurrent increments committed but the counter moved \
                 from {before} to {after}"
            ),
        );
    }
    if let Some(v) = final_ctr
        && (v < committed as i64 || v > (committed + unknown) as i64)
    {
        ctr.violation(
            &counter_key(),
            Vec::new(),
            format!(
                "the counter is {v} after {committed} committed and {unknown} unknown \
                 increments"
            ),
        );
    }
    verdicts.push(ctr);
    verdicts.push(marks);

    let all_pass = verdicts.iter().all(Verdict::passed);
    let passed = match tx.expect {
        TxnExpect::Pass => all_pass,
        // The setup must work even for a negative control.
        TxnExpect::Caught => !all_pass && verdicts[0].passed(),
    };
    if tx.expect == TxnExpect::Caught {
        let caught: Vec<&str> = verdicts
            .iter()
            .filter(|v| !v.passed())
            .map(|v| v.checker)
            .collect();
        notes.push(format!(
            "negative control: {} (caught by: {})",
            if passed { "caught" } else { "NOT CAUGHT" },
            caught.join(", ")
        ));
    }
    if tx.workload.movers > 0 {
        notes.push(format!(
            "key moves: {} keys moved between leaders",
            ctx.moved.load(std::sync::atomic::Ordering::Relaxed)
        ));
    }
    notes.push(format!(
        "txn counters: {} commits, {} aborts; R1 waits {} ({:.1} ms mean), R2 waits {} ({:.1} \
         ms mean); {} TSO RPCs for {} timestamps; {} versions collected",
        stats.commits,
        stats.aborts,
        stats.r1_waits,
        stats.r1_wait_us as f64 / 1e3 / stats.r1_waits.max(1) as f64,
        stats.r2_waits,
        stats.r2_wait_us as f64 / 1e3 / stats.r2_waits.max(1) as f64,
        stats.tso_rpcs,
        stats.tso_timestamps,
        stats.versions_collected
    ));
    if !logs.errors.is_empty() {
        notes.push(format!(
            "client errors: {}",
            logs.errors
                .iter()
                .map(|(k, n)| format!("{k} x{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    notes.extend(clock_log.lock().iter().cloned());
    let messages = wan.stats().sent;
    cluster.shutdown();
    let outcome = TxnOutcome {
        list_append: logs.la,
        write_skew: logs.ws,
        audits: logs.audits,
        si: si.ok(),
        skew_si: skew_si.ok(),
        skew_serializable: skew_ser.ok(),
        stats,
        errors: logs.errors,
        transfers: logs.transfers,
    };
    Report {
        scenario: scenario.name.to_owned(),
        seed,
        duration: scenario.duration,
        ops: logs.counts,
        faults: log,
        verdicts,
        passed,
        history: History::new(),
        messages,
        simulated: Instant::now().duration_since(start),
        timeline: None,
        tl_stats: None,
        notes,
        txn: Some(Box::new(outcome)),
    }
}
