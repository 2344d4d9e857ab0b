//! Operation metrics shared by every front end, rendered as Prometheus text by `GET /metrics`.
//!
//! The hot path is lock-free: a front end asks for an [`OpStats`] handle per operation name
//! once, keeps it, and records each call with a few relaxed atomic increments. Latencies go
//! into fixed buckets (10 µs to 10 s, roughly ×2.5 apart), enough for p50/p99 estimates from
//! Prometheus while costing no allocation per call.
//!
//! In cluster mode the node also exports its replication layer ([`ReplicationGauges`],
//! sampled at render time) and counts the replication errors its front ends answer, by spec
//! code ([`Metrics::replication_error`]), plus its timeline counters (`meridian_timeline_*`,
//! from `EventualNode::tl_stats`) and its read load balancing series (`meridian_read_queue`,
//! `meridian_replica_chosen_total{peer}`, `meridian_extra_copies`, `meridian_copy_create_ms`,
//! ..., from `EventualNode::balance_stats`) and its transaction series (`meridian_txn_*`:
//! commits, aborts, clock and prepared waits, and the cross-node planner's rounds, key moves,
//! `key_moving` aborts, `wrong_partition` redirects and key-directory size, from
//! `EventualNode::txn_stats`); a single node renders none of those series.
//!
//! `meridian_copy_create_ms` is a gauge with a `quantile` label (0.5, 0.99 and 1) over the
//! sliding window of recent copies the node keeps as its DC's root, beside
//! `meridian_copy_create_samples`: not a Prometheus summary, whose `_sum` and `_count` must
//! be cumulative, which that window cannot give.
//!
//! The text is written here, not through the `prometheus-client` crate (0.25), which cannot
//! keep this exposition's names: its encoder follows OpenMetrics and names a counter family
//! without `_total` in `# HELP` and `# TYPE` (`# TYPE meridian_ops counter` above
//! `meridian_ops_total` samples), where these lines have always read
//! `# TYPE meridian_ops_total counter` (dashboards and the tests grep them); its registry
//! appends a `.` to every help text; it writes floats through `dtoa`, so the latency buckets
//! `le="1"` and `le="10"` would become new series `le="1.0"` and `le="10.0"`; and its
//! `Histogram` and `Family` take a lock per observation or lookup, which the hot path here
//! avoids (it would keep its own atomics and use the crate only to print them).

use meridian_replication::{BalanceStats, NodeStats, TimelineStats, TxnMoveStats, TxnStats};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds (`+Inf` is implicit).
const BUCKETS_US: [u64; 14] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000, 1_000_000, 10_000_000,
];

/// Counters and a latency histogram for one operation of one front end.
#[derive(Debug, Default)]
pub struct OpStats {
    calls: AtomicU64,
    errors: AtomicU64,
    /// Calls refused before they ran (arity, authentication, memory): counted in `calls`
    /// and `errors` too, told apart for INFO commandstats.
    rejected: AtomicU64,
    latency_sum_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
}

impl OpStats {
    /// Records one call that took `latency`, failed or not.
    #[inline]
    pub fn observe(&self, latency: Duration, error: bool) {
        let us = latency.as_micros().min(u64::MAX as u128) as u64;
        self.calls.fetch_add(1, Ordering::Relaxed);
        if error {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.latency_sum_us.fetch_add(us, Ordering::Relaxed);
        let i = BUCKETS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls recorded so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Failed calls recorded so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Records that a call (also [`OpStats::observe`]d, as an error) was refused before it
    /// ran.
    pub fn reject(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls refused before they ran.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Microseconds spent in every call.
    pub fn latency_sum_us(&self) -> u64 {
        self.latency_sum_us.load(Ordering::Relaxed)
    }
}

/// Which front end an operation or connection belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Frontend {
    /// The Redis protocol.
    Resp,
    /// The HTTP API.
    Http,
    /// The S3 endpoint.
    S3,
}

impl Frontend {
    fn label(self) -> &'static str {
        match self {
            Frontend::Resp => "resp",
            Frontend::Http => "http",
            Frontend::S3 => "s3",
        }
    }
}

/// Gauges and counters describing one front end's connections.
#[derive(Debug, Default)]
pub struct ConnStats {
    /// Connections open now.
    pub open: AtomicI64,
    /// Connections accepted since start.
    pub accepted: AtomicU64,
    /// Connections refused because the client limit was reached.
    pub rejected: AtomicU64,
    /// Failed authentications (a wrong `AUTH` password, a missing or wrong HTTP bearer).
    pub auth_failures: AtomicU64,
}

/// Engine sizes as last sampled, exported as gauges.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineGauges {
    /// Live keys.
    pub live_keys: u64,
    /// Stored versions.
    pub versions: u64,
    /// Stored bytes.
    pub bytes: u64,
    /// The keyspace's used-memory estimate (standalone nodes; INFO `used_memory`).
    pub used_memory: u64,
    /// `maxmemory` (0: no limit).
    pub maxmemory: u64,
    /// Keys evicted by `maxmemory` since start (or CONFIG RESETSTAT).
    pub evicted_keys: u64,
}

/// One member as this node's failure detector sees it.
#[derive(Clone, Debug)]
pub struct MemberGauge {
    /// Its name (`dc0-n1`).
    pub name: String,
    /// Its DC id.
    pub dc: u32,
    /// Whether the detector considers it up (this node itself always is).
    pub up: bool,
}

/// The replication layer of a cluster-mode node, as last sampled.
#[derive(Clone, Debug, Default)]
pub struct ReplicationGauges {
    /// The replication node's counters.
    pub stats: NodeStats,
    /// Hints waiting for their primaries (`None`: the store could not count them).
    pub hints_pending: Option<u64>,
    /// The layout's epoch.
    pub layout_epoch: u64,
    /// Every member, in id order.
    pub members: Vec<MemberGauge>,
    /// The node's timeline counters (timeline buckets).
    pub timeline: TimelineStats,
    /// The node's read load balancing counters and its view of its peers.
    pub balance: BalanceStats,
    /// The node's transaction counters (transactional buckets).
    pub txn: TxnStats,
    /// The node's key-move counters and its copy of the key directory.
    pub txn_moves: TxnMoveStats,
}

/// Every metric of a node.
#[derive(Debug, Default)]
pub struct Metrics {
    ops: RwLock<BTreeMap<(Frontend, &'static str), Arc<OpStats>>>,
    resp_conns: ConnStats,
    http_conns: ConnStats,
    s3_conns: ConnStats,
    /// Replication errors answered, by front end and spec code (rare: a lock is fine).
    replication_errors: Mutex<BTreeMap<(Frontend, &'static str), u64>>,
    /// The worker-shard executor's counters, once one runs (`repart.mode`).
    repart: std::sync::OnceLock<Arc<crate::repart::RepartStats>>,
}

impl Metrics {
    /// An empty set of metrics.
    pub fn new() -> Self {
        Self::default()
    }

    /// Exports the worker-shard executor's counters as `meridian_repart_*`.
    pub fn attach_repart(&self, stats: Arc<crate::repart::RepartStats>) {
        let _ = self.repart.set(stats);
    }

    /// The handle recording operation `name` of `frontend`; keep it, do not call per request.
    pub fn op(&self, frontend: Frontend, name: &'static str) -> Arc<OpStats> {
        if let Some(s) = self.ops.read().get(&(frontend, name)) {
            return s.clone();
        }
        self.ops
            .write()
            .entry((frontend, name))
            .or_default()
            .clone()
    }

    /// Connection statistics of `frontend`.
    pub fn connections(&self, frontend: Frontend) -> &ConnStats {
        match frontend {
            Frontend::Resp => &self.resp_conns,
            Frontend::Http => &self.http_conns,
            Frontend::S3 => &self.s3_conns,
        }
    }

    /// Total calls over every operation of `frontend`.
    pub fn total_calls(&self, frontend: Frontend) -> u64 {
        self.ops
            .read()
            .iter()
            .filter(|((f, _), _)| *f == frontend)
            .map(|(_, s)| s.calls())
            .sum()
    }

    /// Counts one replication error answered by `frontend`; `code` is the spec's snake_case
    /// code (`ReplicationError::code`, e.g. `r_val_unsatisfied`).
    pub fn replication_error(&self, frontend: Frontend, code: &'static str) {
        *self
            .replication_errors
            .lock()
            .entry((frontend, code))
            .or_default() += 1;
    }

    /// Replication errors with `code` answered by `frontend` so far.
    pub fn replication_errors(&self, frontend: Frontend, code: &str) -> u64 {
        self.replication_errors
            .lock()
            .iter()
            .find(|((f, c), _)| *f == frontend && *c == code)
            .map_or(0, |(_, n)| *n)
    }

    /// Renders everything in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self, engine: EngineGauges) -> String {
        self.render_with(engine, None)
    }

    /// Like [`Metrics::render`], plus the replication series of a cluster-mode node.
    pub fn render_cluster(&self, engine: EngineGauges, replication: &ReplicationGauges) -> String {
        self.render_with(engine, Some(replication))
    }

    fn render_with(&self, engine: EngineGauges, replication: Option<&ReplicationGauges>) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let ops = self.ops.read();
        out.push_str("# HELP meridian_ops_total Operations served, by front end and command.\n");
        out.push_str("# TYPE meridian_ops_total counter\n");
        for ((f, name), s) in ops.iter() {
            let _ = writeln!(
                out,
                "meridian_ops_total{{frontend=\"{}\",op=\"{name}\"}} {}",
                f.label(),
                s.calls()
            );
        }
        out.push_str("# HELP meridian_op_errors_total Operations answered with an error.\n");
        out.push_str("# TYPE meridian_op_errors_total counter\n");
        for ((f, name), s) in ops.iter() {
            let _ = writeln!(
                out,
                "meridian_op_errors_total{{frontend=\"{}\",op=\"{name}\"}} {}",
                f.label(),
                s.errors()
            );
        }
        out.push_str(
            "# HELP meridian_op_latency_seconds Time from parsed request to reply, by command.\n",
        );
        out.push_str("# TYPE meridian_op_latency_seconds histogram\n");
        for ((f, name), s) in ops.iter() {
            let labels = format!("frontend=\"{}\",op=\"{name}\"", f.label());
            let mut cumulative = 0;
            for (i, bound) in BUCKETS_US.iter().enumerate() {
                cumulative += s.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "meridian_op_latency_seconds_bucket{{{labels},le=\"{}\"}} {cumulative}",
                    *bound as f64 / 1e6
                );
            }
            cumulative += s.buckets[BUCKETS_US.len()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "meridian_op_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "meridian_op_latency_seconds_sum{{{labels}}} {}",
                s.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "meridian_op_latency_seconds_count{{{labels}}} {cumulative}"
            );
        }
        drop(ops);
        for (metric, help, kind, get) in [
            (
                "meridian_connections",
                "Client connections open now.",
                "gauge",
                (|c: &ConnStats| c.open.load(Ordering::Relaxed).max(0) as u64)
                    as fn(&ConnStats) -> u64,
            ),
            (
                "meridian_connections_accepted_total",
                "Client connections accepted.",
                "counter",
                |c: &ConnStats| c.accepted.load(Ordering::Relaxed),
            ),
            (
                "meridian_connections_rejected_total",
                "Client connections refused at the client limit.",
                "counter",
                |c: &ConnStats| c.rejected.load(Ordering::Relaxed),
            ),
            (
                "meridian_auth_failures_total",
                "Failed authentications (wrong AUTH password, missing or wrong bearer, refused S3 signature).",
                "counter",
                |c: &ConnStats| c.auth_failures.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
            for f in [Frontend::Resp, Frontend::Http, Frontend::S3] {
                let _ = writeln!(
                    out,
                    "{metric}{{frontend=\"{}\"}} {}",
                    f.label(),
                    get(self.connections(f))
                );
            }
        }
        for (metric, help, value) in [
            (
                "meridian_engine_keys",
                "Live keys in the storage engine.",
                engine.live_keys,
            ),
            (
                "meridian_engine_versions",
                "Versions stored, tombstones included.",
                engine.versions,
            ),
            (
                "meridian_engine_bytes",
                "Bytes of keys and values stored.",
                engine.bytes,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {metric} {help}\n# TYPE {metric} gauge\n{metric} {value}"
            );
        }
        // The keyspace's memory accounting runs on standalone nodes only: a cluster-mode
        // node does not enforce maxmemory, so it does not pretend to with zeros.
        if replication.is_none() {
            for (metric, kind, help, value) in [
                (
                    "meridian_used_memory_bytes",
                    "gauge",
                    "Used memory as the keyspace estimates it (keys, values, per-key overhead).",
                    engine.used_memory,
                ),
                (
                    "meridian_maxmemory_bytes",
                    "gauge",
                    "The maxmemory limit (0: none).",
                    engine.maxmemory,
                ),
                (
                    "meridian_evicted_keys_total",
                    "counter",
                    "Keys evicted to stay under maxmemory.",
                    engine.evicted_keys,
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {value}"
                );
            }
        }
        if let Some(r) = replication {
            self.render_replication(&mut out, r);
        }
        if let Some(r) = self.repart.get() {
            render_repart(&mut out, &r.snapshot());
        }
        out.push_str("# EOF\n");
        out
    }

    fn render_replication(&self, out: &mut String, r: &ReplicationGauges) {
        // Destructured so a new counter of the replication node fails to compile until it
        // is exported here.
        let NodeStats {
            read_repairs,
            read_repairs_deferred,
            hinted_handoffs,
            handoff_bytes,
            coord_redirs,
            aae_exchanges,
            aae_keys_repaired,
            ownership_handoffs,
            tombstones_reaped,
            peer_requests_refused,
        } = r.stats;
        for (metric, help, value) in [
            (
                "meridian_read_repairs_total",
                "Read-repair messages sent to stale or missing replicas.",
                read_repairs,
            ),
            (
                "meridian_tombstones_reaped_total",
                "Tombstones forgotten under the bucket's delete_mode once every node had them.",
                tombstones_reaped,
            ),
            (
                "meridian_read_repairs_deferred_total",
                "Cross-DC read repairs dropped for want of WAN budget (left to anti-entropy).",
                read_repairs_deferred,
            ),
            (
                "meridian_hinted_handoffs_total",
                "Hints delivered to their primaries and deleted.",
                hinted_handoffs,
            ),
            (
                "meridian_handoff_bytes_total",
                "Encoded bytes of delivered hints.",
                handoff_bytes,
            ),
            (
                "meridian_forwarded_writes_total",
                "Writes forwarded to another coordinator (coordinator redirects).",
                coord_redirs,
            ),
            (
                "meridian_anti_entropy_exchanges_total",
                "Anti-entropy exchanges completed as initiator.",
                aae_exchanges,
            ),
            (
                "meridian_anti_entropy_keys_repaired_total",
                "Differing keys synced by anti-entropy exchanges this node initiated.",
                aae_keys_repaired,
            ),
            (
                "meridian_ownership_handoffs_total",
                "Objects handed off to their new owners after a layout change.",
                ownership_handoffs,
            ),
            (
                "meridian_peer_requests_refused_total",
                "Peer requests refused unserved for asking more than this node's limits allow.",
                peer_requests_refused,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {metric} {help}\n# TYPE {metric} counter\n{metric} {value}"
            );
        }
        out.push_str(
            "# HELP meridian_replication_errors_total Replication errors answered, by front end \
             and spec code.\n# TYPE meridian_replication_errors_total counter\n",
        );
        for ((f, code), n) in self.replication_errors.lock().iter() {
            let _ = writeln!(
                out,
                "meridian_replication_errors_total{{frontend=\"{}\",code=\"{code}\"}} {n}",
                f.label()
            );
        }
        out.push_str(
            "# HELP meridian_hints_pending Hints stored for unreachable primaries.\n\
             # TYPE meridian_hints_pending gauge\n",
        );
        if let Some(n) = r.hints_pending {
            let _ = writeln!(out, "meridian_hints_pending {n}");
        }
        let up = r.members.iter().filter(|m| m.up).count();
        let _ = writeln!(
            out,
            "# HELP meridian_cluster_members Cluster members by this node's failure-detector \
             verdict.\n# TYPE meridian_cluster_members gauge\n\
             meridian_cluster_members{{status=\"up\"}} {up}\n\
             meridian_cluster_members{{status=\"down\"}} {}",
            r.members.len() - up
        );
        out.push_str(
            "# HELP meridian_cluster_member_up Whether this node's failure detector considers \
             the member up (1) or down (0).\n# TYPE meridian_cluster_member_up gauge\n",
        );
        for m in &r.members {
            let _ = writeln!(
                out,
                "meridian_cluster_member_up{{node=\"{}\",dc=\"{}\"}} {}",
                escape_label(&m.name),
                m.dc,
                u8::from(m.up)
            );
        }
        let _ = writeln!(
            out,
            "# HELP meridian_layout_epoch Epoch of the partition layout this node uses.\n\
             # TYPE meridian_layout_epoch gauge\nmeridian_layout_epoch {}",
            r.layout_epoch
        );
        render_timeline(out, r);
        render_balance(out, &r.balance);
        render_txn(out, &r.txn, &r.txn_moves);
    }
}

/// The value at quantile `q` (0..=1) of `sorted` by nearest rank; `None` when it is empty.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1).min(sorted.len() - 1))
        .copied()
}

/// The read load balancing series (`load-balancing.md` §4): rendered on every cluster node,
/// zero (or without samples) until reads need one replica or keys get hot.
fn render_balance(out: &mut String, b: &BalanceStats) {
    // Destructured so a new balance counter fails to compile until it is exported.
    let BalanceStats {
        extra_copies,
        extra_reads,
        extra_misses,
        duplicate_services,
        cancelled,
        c3_overloads,
        queue,
        ref copy_create_ms,
        sketch_error_bound,
        ref peers,
    } = *b;
    for (metric, help, kind, value) in [
        (
            "meridian_read_queue",
            "Reads queued or in service at this node's read workers now.",
            "gauge",
            queue,
        ),
        (
            "meridian_extra_copies",
            "Extra copies of hot keys this node holds now.",
            "gauge",
            extra_copies,
        ),
        (
            "meridian_extra_reads_total",
            "Reads this node served from its extra copies.",
            "counter",
            extra_reads,
        ),
        (
            "meridian_extra_misses_total",
            "Reads asked of an extra copy this node did not (or no longer) hold.",
            "counter",
            extra_misses,
        ),
        (
            "meridian_duplicate_services_total",
            "Deferred reads (naive, avr) coordinated here that more than one replica served.",
            "counter",
            duplicate_services,
        ),
        (
            "meridian_deferred_cancelled_total",
            "Deferred reads dropped from this node's queue because another replica served them.",
            "counter",
            cancelled,
        ),
        (
            "meridian_c3_overloads_total",
            "Reads refused because C3's backlog was full.",
            "counter",
            c3_overloads,
        ),
        (
            "meridian_sketch_error_bound",
            "Error bound of the DC root's merged hot-key sketch (0 on nodes that are not root).",
            "gauge",
            sketch_error_bound,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {value}"
        );
    }
    for (metric, help, kind, column) in [
        (
            "meridian_replica_chosen_total",
            "Reads this coordinator's replica-selection strategies sent to each peer (the \
             chosen replica's share is its value over the sum).",
            "counter",
            0,
        ),
        (
            "meridian_replica_outstanding",
            "Reads this coordinator has in flight at each peer.",
            "gauge",
            1,
        ),
        (
            "meridian_replica_reported_queue",
            "The read queue length each peer last reported to this coordinator.",
            "gauge",
            2,
        ),
    ] {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} {kind}");
        for p in peers {
            let v = [p.chosen, u64::from(p.outstanding), u64::from(p.queue)][column];
            let peer = p.node.to_string();
            let _ = writeln!(out, "{metric}{{peer=\"{}\"}} {v}", escape_label(&peer));
        }
    }
    let mut sorted = copy_create_ms.clone();
    sorted.sort_unstable();
    out.push_str(
        "# HELP meridian_copy_create_ms Milliseconds from the root's decision to an extra copy \
         being usable, over the most recent copies this node made as its DC's root (at most \
         1024): quantile 0.5, 0.99 and 1 (the maximum). A gauge of a sliding window, not a \
         summary (no cumulative sum or count exists).\n# TYPE meridian_copy_create_ms gauge\n",
    );
    for (label, q) in [("0.5", 0.5), ("0.99", 0.99), ("1", 1.0)] {
        if let Some(v) = percentile(&sorted, q) {
            let _ = writeln!(out, "meridian_copy_create_ms{{quantile=\"{label}\"}} {v}");
        }
    }
    let _ = writeln!(
        out,
        "# HELP meridian_copy_create_samples Extra copies in the meridian_copy_create_ms \
         window.\n# TYPE meridian_copy_create_samples gauge\nmeridian_copy_create_samples {}",
        sorted.len()
    );
}

/// The timeline series (`timeline.md` §4, §6): rendered on every cluster node, zero until a
/// timeline bucket is used, so dashboards and alerts need no special case.
fn render_timeline(out: &mut String, r: &ReplicationGauges) {
    // Destructured so a new timeline counter fails to compile until it is exported here.
    let TimelineStats {
        wrong_master_forwards,
        migrations,
        forks,
        fenced,
        local_reads,
        remote_reads,
        local_writes,
        remote_writes,
        ref lag_by_dc,
        caught_up,
    } = r.timeline;
    for (metric, help, value) in [
        (
            "meridian_timeline_wrong_master_total",
            "Timeline writes this node received for a record it does not master and forwarded \
             to the master.",
            wrong_master_forwards,
        ),
        (
            "meridian_timeline_master_migrations_total",
            "Timeline writes this node issued that moved the record's mastership to another DC.",
            migrations,
        ),
        (
            "meridian_timeline_forks_total",
            "Timeline records refused because another record had the same version (a bug if \
             ever non-zero).",
            forks,
        ),
        (
            "meridian_timeline_fenced_total",
            "Timeline records refused because a forced re-master fenced their master epoch.",
            fenced,
        ),
        (
            "meridian_timeline_caught_up_total",
            "Timeline records copied by catch-up (applied here or sent to a peer).",
            caught_up,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} counter\n{metric} {value}"
        );
    }
    for (metric, help, read, write) in [
        (
            "meridian_timeline_remote_ops_total",
            "Timeline operations coordinated here whose critical path crossed DCs.",
            remote_reads,
            remote_writes,
        ),
        (
            "meridian_timeline_local_ops_total",
            "Timeline operations coordinated here whose critical path stayed in this DC.",
            local_reads,
            local_writes,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} counter\n\
             {metric}{{op=\"read\"}} {read}\n{metric}{{op=\"write\"}} {write}"
        );
    }
    out.push_str(
        "# HELP meridian_timeline_replication_lag_records Timeline records this node masters \
         that a peer in the DC has not acknowledged yet.\n\
         # TYPE meridian_timeline_replication_lag_records gauge\n",
    );
    // Every DC of the cluster, so a DC that has caught up reads 0 rather than vanishing.
    let mut dcs: Vec<u32> = r.members.iter().map(|m| m.dc).collect();
    dcs.extend(lag_by_dc.keys().map(|d| d.0));
    dcs.sort_unstable();
    dcs.dedup();
    for dc in dcs {
        let lag = lag_by_dc
            .get(&meridian_core::DcId(dc))
            .copied()
            .unwrap_or(0);
        let _ = writeln!(
            out,
            "meridian_timeline_replication_lag_records{{dc=\"{dc}\"}} {lag}"
        );
    }
}

/// The transaction series (`meridian_txn_*`, spec `transactions.md` metrics and
/// `repartitioning.md` §6): rendered on every cluster node, zero until a transactional bucket
/// is used. Planning rounds and moves count on the node that ran them (the claimant), aborts
/// and redirects on the coordinator that saw them; the directory gauges are this node's copy.
fn render_txn(out: &mut String, t: &TxnStats, m: &TxnMoveStats) {
    // Destructured so a new transaction counter fails to compile until it is exported here.
    let TxnStats {
        commits,
        aborts,
        r1_waits,
        r1_wait_us,
        r2_waits,
        r2_wait_us,
        tso_rpcs,
        tso_timestamps,
        versions_collected,
        two_phase_commits,
    } = *t;
    let TxnMoveStats {
        plan_rounds,
        keys_moved,
        moves_cancelled,
        key_moving_aborts,
        wrong_partition,
        directory_keys,
        directory_epoch,
        planner_enabled,
    } = *m;
    let secs = |us: u64| us as f64 / 1e6;
    let series: [(&str, &str, &str, f64); 18] = [
        (
            "meridian_txn_commits_total",
            "counter",
            "Transactions coordinated here that committed (read-only ones included).",
            commits as f64,
        ),
        (
            "meridian_txn_two_phase_commits_total",
            "counter",
            "Transactions coordinated here that committed through two-phase commit (more than one leader).",
            two_phase_commits as f64,
        ),
        (
            "meridian_txn_aborts_total",
            "counter",
            "Transactions coordinated here whose commit aborted (retryable, no effect).",
            aborts as f64,
        ),
        (
            "meridian_txn_r1_waits_total",
            "counter",
            "Reads at this leader that waited for its clock to pass the snapshot (R1).",
            r1_waits as f64,
        ),
        (
            "meridian_txn_r1_wait_seconds_total",
            "counter",
            "Time reads at this leader spent in R1 waits.",
            secs(r1_wait_us),
        ),
        (
            "meridian_txn_r2_waits_total",
            "counter",
            "Reads at this leader that waited for a prepared transaction (R2).",
            r2_waits as f64,
        ),
        (
            "meridian_txn_r2_wait_seconds_total",
            "counter",
            "Time reads at this leader spent in R2 waits.",
            secs(r2_wait_us),
        ),
        (
            "meridian_txn_tso_rpcs_total",
            "counter",
            "Timestamp oracle RPCs this node sent.",
            tso_rpcs as f64,
        ),
        (
            "meridian_txn_tso_timestamps_total",
            "counter",
            "Timestamps those oracle RPCs carried.",
            tso_timestamps as f64,
        ),
        (
            "meridian_txn_versions_collected_total",
            "counter",
            "Versions garbage-collected at this leader.",
            versions_collected as f64,
        ),
        (
            "meridian_txn_plan_rounds_total",
            "counter",
            "Rounds of the cross-node placement planner run here (txn.planner; the claimant plans).",
            plan_rounds as f64,
        ),
        (
            "meridian_txn_keys_moved_total",
            "counter",
            "Transactional keys this node moved to another partition.",
            keys_moved as f64,
        ),
        (
            "meridian_txn_moves_cancelled_total",
            "counter",
            "Key moves this node gave up (a step failed, or a stale move was cancelled); the keys stayed put.",
            moves_cancelled as f64,
        ),
        (
            "meridian_txn_key_moving_aborts_total",
            "counter",
            "Reads and commits of transactions coordinated here refused with key_moving (retried, no effect).",
            key_moving_aborts as f64,
        ),
        (
            "meridian_txn_wrong_partition_total",
            "counter",
            "wrong_partition answers to transactions coordinated here: a stale key directory, waited for and retried.",
            wrong_partition as f64,
        ),
        (
            "meridian_txn_directory_keys",
            "gauge",
            "Moved keys in this node's copy of the key directory.",
            directory_keys as f64,
        ),
        (
            "meridian_txn_directory_epoch",
            "gauge",
            "Epoch of this node's copy of the key directory.",
            directory_epoch as f64,
        ),
        (
            "meridian_txn_planner_enabled",
            "gauge",
            "Whether the cross-node placement planner is on here (1) or off (0).",
            f64::from(u8::from(planner_enabled)),
        ),
    ];
    for (metric, kind, help, value) in series {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {value}"
        );
    }
}

/// A label value with `\\`, `"` and newlines escaped, as the text format requires.
fn escape_label(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

/// The executor's series (spec `repartitioning.md` §4); durations in seconds.
fn render_repart(out: &mut String, s: &crate::repart::RepartSnapshot) {
    let secs = |us: u64| us as f64 / 1e6;
    let series: [(&str, &str, &str, f64); 25] = [
        (
            "meridian_repart_dispatched_total",
            "counter",
            "Requests the dispatcher placed on worker shards.",
            s.dispatched as f64,
        ),
        (
            "meridian_repart_inline_total",
            "counter",
            "Requests their connection ran itself on a free shard instead of handing them to its worker.",
            s.inline as f64,
        ),
        (
            "meridian_repart_dispatch_stall_seconds_max",
            "gauge",
            "The longest time one dispatch (one request, or a connection's batch of pipelined ones) spent placing and repartitioning (queue backpressure excluded).",
            secs(s.dispatch_stall_max_us),
        ),
        (
            "meridian_repart_tracked_dropped_total",
            "counter",
            "Requests left out of the co-access graph because the tracker was repart.max_tracker_lag requests behind.",
            s.tracked_dropped as f64,
        ),
        (
            "meridian_repart_dispatch_stalls_over_1ms_total",
            "counter",
            "Dispatches that held the dispatcher 1 ms or more (queue backpressure excluded).",
            s.dispatch_stalls_over[0] as f64,
        ),
        (
            "meridian_repart_dispatch_stalls_over_10ms_total",
            "counter",
            "Dispatches that held the dispatcher 10 ms or more (queue backpressure excluded).",
            s.dispatch_stalls_over[1] as f64,
        ),
        (
            "meridian_repart_dispatch_stalls_over_100ms_total",
            "counter",
            "Dispatches that held the dispatcher 100 ms or more (queue backpressure excluded).",
            s.dispatch_stalls_over[2] as f64,
        ),
        (
            "meridian_repart_sync_requests_total",
            "counter",
            "Requests that spanned several shards and waited on barriers.",
            s.sync_requests as f64,
        ),
        (
            "meridian_repart_barrier_wait_seconds_total",
            "counter",
            "Time shards spent waiting at barriers.",
            secs(s.barrier_wait_us),
        ),
        (
            "meridian_repart_tracker_lag",
            "gauge",
            "Requests handed to the tracker and not yet in its graph.",
            s.tracked_sent.saturating_sub(s.tracked) as f64,
        ),
        (
            "meridian_repart_graph_vertices",
            "gauge",
            "Keys in the last co-access graph snapshot.",
            s.graph_vertices as f64,
        ),
        (
            "meridian_repart_graph_edges",
            "gauge",
            "Co-access edges in the last snapshot.",
            s.graph_edges as f64,
        ),
        (
            "meridian_repart_csr_build_seconds_last",
            "gauge",
            "The last graph snapshot (CSR) build.",
            secs(s.csr_us_last),
        ),
        (
            "meridian_repart_csr_build_seconds_max",
            "gauge",
            "The longest graph snapshot build.",
            secs(s.csr_us_max),
        ),
        (
            "meridian_repart_partition_seconds_last",
            "gauge",
            "The last partition (with relabelling and the next map).",
            secs(s.partition_us_last),
        ),
        (
            "meridian_repart_partition_seconds_max",
            "gauge",
            "The longest partition.",
            secs(s.partition_us_max),
        ),
        (
            "meridian_repart_partitions_total",
            "counter",
            "Partitions computed.",
            s.partitions as f64,
        ),
        (
            "meridian_repart_partitions_kept_total",
            "counter",
            "Partitions not worth a swap (repart.min_gain, max_imbalance): the map stayed.",
            s.kept as f64,
        ),
        (
            "meridian_repart_failures_total",
            "counter",
            "Partitions that failed (the map stayed).",
            s.failures as f64,
        ),
        (
            "meridian_repart_edge_cut",
            "gauge",
            "The last partition's edge cut.",
            s.edge_cut as f64,
        ),
        (
            "meridian_repart_imbalance",
            "gauge",
            "The last partition's heaviest shard over the mean.",
            s.imbalance_milli as f64 / 1000.0,
        ),
        (
            "meridian_repart_keys_moved_total",
            "counter",
            "Keys moved between shards by swaps.",
            s.keys_moved_total as f64,
        ),
        (
            "meridian_repart_keys_moved_unrelabelled_total",
            "counter",
            "Keys the partitions would have moved without relabelling.",
            s.keys_moved_raw_total as f64,
        ),
        (
            "meridian_repart_swaps_total",
            "counter",
            "Maps swapped in.",
            s.swaps as f64,
        ),
        (
            "meridian_repart_swap_seconds_max",
            "gauge",
            "The longest swap on the dispatcher.",
            secs(s.swap_us_max),
        ),
    ];
    for (metric, kind, help, value) in series {
        let _ = writeln!(
            out,
            "# HELP {metric} {help}\n# TYPE {metric} {kind}\n{metric} {value}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_counted() {
        let m = Metrics::new();
        let get = m.op(Frontend::Resp, "get");
        get.observe(Duration::from_micros(5), false);
        get.observe(Duration::from_micros(300), false);
        get.observe(Duration::from_secs(60), true);
        assert!(
            Arc::ptr_eq(&get, &m.op(Frontend::Resp, "get")),
            "one handle per op"
        );
        let text = m.render(EngineGauges {
            live_keys: 7,
            ..Default::default()
        });
        assert!(text.contains("meridian_ops_total{frontend=\"resp\",op=\"get\"} 3"));
        assert!(text.contains("meridian_op_errors_total{frontend=\"resp\",op=\"get\"} 1"));
        assert!(text.contains(
            "meridian_op_latency_seconds_bucket{frontend=\"resp\",op=\"get\",le=\"0.00001\"} 1"
        ));
        assert!(text.contains(
            "meridian_op_latency_seconds_bucket{frontend=\"resp\",op=\"get\",le=\"0.0005\"} 2"
        ));
        assert!(text.contains(
            "meridian_op_latency_seconds_bucket{frontend=\"resp\",op=\"get\",le=\"+Inf\"} 3"
        ));
        assert!(text.contains("meridian_engine_keys 7"));
        let mem = m.render(EngineGauges {
            used_memory: 1234,
            maxmemory: 1 << 20,
            evicted_keys: 5,
            ..Default::default()
        });
        assert!(mem.contains("\nmeridian_used_memory_bytes 1234\n"), "{mem}");
        assert!(
            mem.contains("\nmeridian_maxmemory_bytes 1048576\n"),
            "{mem}"
        );
        assert!(
            mem.contains(
                "# TYPE meridian_evicted_keys_total counter\nmeridian_evicted_keys_total 5\n"
            ),
            "{mem}"
        );
        assert_eq!(m.total_calls(Frontend::Resp), 3);
        assert_eq!(m.total_calls(Frontend::Http), 0);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[7], 0.99), Some(7));
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), Some(50));
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&v, f64::NAN), Some(1));
    }

    #[test]
    fn replication_series_only_in_cluster_mode() {
        let m = Metrics::new();
        m.replication_error(Frontend::Resp, "n_val_violation");
        m.replication_error(Frontend::Resp, "n_val_violation");
        m.replication_error(Frontend::Http, "r_val_unsatisfied");
        assert_eq!(m.replication_errors(Frontend::Resp, "n_val_violation"), 2);
        assert_eq!(m.replication_errors(Frontend::Http, "n_val_violation"), 0);
        let single = m.render(EngineGauges::default());
        assert!(!single.contains("replication"), "{single}");
        assert!(!single.contains("meridian_cluster"), "{single}");
        let r = ReplicationGauges {
            stats: NodeStats {
                read_repairs: 3,
                coord_redirs: 5,
                handoff_bytes: 120,
                ..NodeStats::default()
            },
            hints_pending: Some(2),
            layout_epoch: 1,
            members: vec![
                MemberGauge {
                    name: "dc0-n0".into(),
                    dc: 0,
                    up: true,
                },
                MemberGauge {
                    name: "dc1-\"x\"".into(),
                    dc: 1,
                    up: false,
                },
            ],
            timeline: TimelineStats {
                wrong_master_forwards: 4,
                migrations: 2,
                fenced: 1,
                local_reads: 5,
                remote_reads: 6,
                local_writes: 7,
                remote_writes: 8,
                lag_by_dc: [(meridian_core::DcId(1), 9)].into(),
                ..TimelineStats::default()
            },
            balance: BalanceStats {
                extra_copies: 2,
                extra_reads: 11,
                extra_misses: 1,
                duplicate_services: 3,
                cancelled: 4,
                c3_overloads: 5,
                queue: 6,
                copy_create_ms: vec![300, 100, 200, 400],
                sketch_error_bound: 7,
                peers: vec![meridian_replication::PeerView {
                    node: meridian_core::NodeId(3),
                    outstanding: 2,
                    queue: 9,
                    service_us: 0.0,
                    snitch_score: 0.0,
                    c3_score: 0.0,
                    c3_rate: 0.0,
                    chosen: 40,
                }],
            },
            txn: TxnStats {
                commits: 12,
                r1_wait_us: 1_500_000,
                ..TxnStats::default()
            },
            txn_moves: TxnMoveStats {
                plan_rounds: 3,
                keys_moved: 40,
                moves_cancelled: 2,
                key_moving_aborts: 5,
                wrong_partition: 1,
                directory_keys: 38,
                directory_epoch: 7,
                planner_enabled: true,
            },
        };
        let text = m.render_cluster(EngineGauges::default(), &r);
        // The same series up to the standalone-only memory ones, then the replication ones.
        let common = single
            .split("# HELP meridian_used_memory_bytes")
            .next()
            .unwrap();
        assert!(text.starts_with(common));
        assert!(!text.contains("meridian_used_memory_bytes"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        for line in [
            "# TYPE meridian_read_repairs_total counter",
            "meridian_read_repairs_total 3",
            "meridian_forwarded_writes_total 5",
            "meridian_handoff_bytes_total 120",
            "meridian_hinted_handoffs_total 0",
            "meridian_anti_entropy_exchanges_total 0",
            "meridian_anti_entropy_keys_repaired_total 0",
            "meridian_replication_errors_total{frontend=\"resp\",code=\"n_val_violation\"} 2",
            "meridian_replication_errors_total{frontend=\"http\",code=\"r_val_unsatisfied\"} 1",
            "# TYPE meridian_hints_pending gauge",
            "meridian_hints_pending 2",
            "meridian_cluster_members{status=\"up\"} 1",
            "meridian_cluster_members{status=\"down\"} 1",
            "meridian_cluster_member_up{node=\"dc0-n0\",dc=\"0\"} 1",
            "meridian_cluster_member_up{node=\"dc1-\\\"x\\\"\",dc=\"1\"} 0",
            "meridian_layout_epoch 1",
            "# TYPE meridian_timeline_wrong_master_total counter",
            "meridian_timeline_wrong_master_total 4",
            "meridian_timeline_master_migrations_total 2",
            "meridian_timeline_forks_total 0",
            "meridian_timeline_fenced_total 1",
            "meridian_timeline_caught_up_total 0",
            "meridian_timeline_remote_ops_total{op=\"read\"} 6",
            "meridian_timeline_remote_ops_total{op=\"write\"} 8",
            "meridian_timeline_local_ops_total{op=\"read\"} 5",
            "meridian_timeline_local_ops_total{op=\"write\"} 7",
            "# TYPE meridian_timeline_replication_lag_records gauge",
            "meridian_timeline_replication_lag_records{dc=\"0\"} 0",
            "meridian_timeline_replication_lag_records{dc=\"1\"} 9",
            "# TYPE meridian_read_queue gauge",
            "meridian_read_queue 6",
            "# TYPE meridian_extra_copies gauge",
            "meridian_extra_copies 2",
            "# TYPE meridian_extra_reads_total counter",
            "meridian_extra_reads_total 11",
            "meridian_extra_misses_total 1",
            "meridian_duplicate_services_total 3",
            "meridian_deferred_cancelled_total 4",
            "meridian_c3_overloads_total 5",
            "# TYPE meridian_sketch_error_bound gauge",
            "meridian_sketch_error_bound 7",
            "# TYPE meridian_replica_chosen_total counter",
            "meridian_replica_chosen_total{peer=\"n3\"} 40",
            "meridian_replica_outstanding{peer=\"n3\"} 2",
            "meridian_replica_reported_queue{peer=\"n3\"} 9",
            "# TYPE meridian_copy_create_ms gauge",
            "meridian_copy_create_ms{quantile=\"0.5\"} 200",
            "meridian_copy_create_ms{quantile=\"0.99\"} 400",
            "meridian_copy_create_ms{quantile=\"1\"} 400",
            "meridian_copy_create_samples 4",
            "# TYPE meridian_txn_commits_total counter",
            "meridian_txn_commits_total 12",
            "meridian_txn_aborts_total 0",
            "meridian_txn_r1_wait_seconds_total 1.5",
            "meridian_txn_plan_rounds_total 3",
            "meridian_txn_keys_moved_total 40",
            "meridian_txn_moves_cancelled_total 2",
            "meridian_txn_key_moving_aborts_total 5",
            "meridian_txn_wrong_partition_total 1",
            "# TYPE meridian_txn_directory_keys gauge",
            "meridian_txn_directory_keys 38",
            "meridian_txn_directory_epoch 7",
            "meridian_txn_planner_enabled 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
        }
    }
}
