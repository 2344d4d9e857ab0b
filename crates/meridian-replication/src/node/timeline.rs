//! Timeline buckets on a node (spec `timeline.md`): the coordinator's routing of reads and
//! writes to a record's master, the master's write path, ordered reliable propagation to the
//! other primaries, catch-up by version, and the forced re-master. The decisions themselves
//! (versions, merge, migration) are the pure functions of [`crate::timeline`].
//!
//! ## How a request runs
//!
//! - **Write / test-and-set / delete** (§3): the coordinator finds the master hint: its own
//!   record's master when it is a replica of the key, else its hint cache, else the record of
//!   the nearest replica (`read_any`, a LAN round trip). No record anywhere near: the write goes
//!   to the partition's **insert arbiter** (its first primary, §5). The receiver runs
//!   [`master_write`] under the key's lock. A receiver that is not the master forwards once
//!   (`hops = 1`, `await` = its version); a forwarded request that still finds another master
//!   waits up to `migrate_wait` for the version that names it master, then answers
//!   `not_master`, and the coordinator retries once at that hint.
//! - **Reads** (§2): `read_any` reads the local replica, or the nearest up replica (own DC
//!   first); `read_critical(v)` does the same and goes to the master only when that copy is
//!   older than `v`; `read_latest` asks the master, which answers only while it is master.
//! - **Propagation** (§4): the master applies its record, then queues it for every other
//!   primary of the key. One sender per peer sends batches in key order, one batch in flight,
//!   and retransmits after `tl_retry` with exponential backoff up to `tl_retry_max`. A queued
//!   record replaces an older queued record of the same key, so the log is compacted per key: a
//!   replica may skip versions, never reorder them (apply keeps the higher version).
//! - **Catch-up** (§8): every `tl_sync_interval` the node compares one page of its records'
//!   versions with one peer (round-robin), and both sides copy the newer record of every key
//!   where they differ. This also repairs what a crash took from the in-memory queues.
//! - **Failures** (§7): a master the detector marks down fails the request at once with
//!   `master_unavailable`; one that does not answer fails it after `master_timeout_ms`, marked
//!   "may have applied" for writes. `read_any` keeps working from any replica.
//! - **Forced re-master** (§7, [`EventualNode::tl_force_master`]): the reachable replica of
//!   the chosen DC with the highest version writes the record in the next master epoch; the
//!   old master's later records lose every merge ([`crate::timeline::Merge::Fenced`]).
//!
//! ## Deviations from the spec
//!
//! - The replication log is an in-memory queue compacted per key, not an engine-backed log of
//!   every version: a master that crashes loses its queue, and catch-up restores the peers
//!   (within `tl_sync_interval`). Ordering and convergence are as the spec requires; "resume
//!   each stream from the persisted acked lsn" becomes "catch up by version".
//! - Lag is reported as records waiting per peer DC, not as an lsn distance.
//! - `read_latest_fanout = all` and `read_any_fanout` are accepted and served as `master`
//!   and local reads.
//! - Tombstones are never reaped.
//! - After a layout change a master that is no longer a primary of the key hands mastership
//!   to a primary with its next write; records are not moved by ownership handoff, but
//!   catch-up copies them to new primaries from the remaining ones.

use super::EventualNode;
use crate::bucket::BucketType;
use crate::error::{ReplicationError, Result};
use crate::messages::{Msg, RemoteError};
use crate::object_store::is_reserved_key;
use crate::timeline::{
    Content, Expect, Merge, Record, ReplicaRef, TimelineProps, TlStore, Version, WriteOp,
    WriteRefusal, force_remaster, master_write, new_master_in,
};
use bytes::Bytes;
use meridian_cluster::bucket_and_key;
use meridian_core::{DcId, NodeId, PartitionId};
use meridian_net::NetError;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// How a timeline read picks its replica (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// Any committed version, possibly stale: the nearest replica.
    Any,
    /// A version at least this one: the nearest replica if fresh enough, else the master.
    Critical(Version),
    /// The master's current version.
    Latest,
}

/// What a timeline read returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlReadResult {
    /// The record (`None`: never written here; a tombstone: deleted).
    pub record: Option<Record>,
    /// The node that served it.
    pub served_by: NodeId,
    /// Whether the read's critical path crossed DCs.
    pub remote: bool,
}

impl TlReadResult {
    /// The value, if the record is live.
    pub fn value(&self) -> Option<&Bytes> {
        self.record.as_ref().and_then(|r| r.content.value())
    }

    /// The record's version (a tombstone's too).
    pub fn version(&self) -> Option<Version> {
        self.record.as_ref().map(|r| r.ver)
    }
}

/// What an acknowledged timeline write returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlWriteResult {
    /// The record the master issued (its version, and the master after the write).
    pub record: Record,
    /// The replica that issued it.
    pub issued_by: ReplicaRef,
    /// Whether the write's critical path crossed DCs, as the coordinator sees it: the node
    /// it sent the write to, or the node that issued it, is in another DC (a forward between
    /// two nodes of this DC through a third DC is not seen).
    pub remote: bool,
}

/// What kind of record a master issued (for observers such as the simulator's checkers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlIssueKind {
    /// The insert arbiter created an absent record.
    Insert,
    /// A write, test-and-set or delete by the master.
    Write,
    /// A forced re-master.
    ForceMaster,
}

/// An event of the timeline protocol, reported to an observer as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlTrace {
    /// This node issued `record` (and stored it).
    Issued {
        /// The client key.
        key: Bytes,
        /// The record issued.
        record: Record,
        /// What kind of record.
        kind: TlIssueKind,
        /// The issuer (this node).
        by: ReplicaRef,
        /// The DC the write came from.
        origin_dc: DcId,
    },
    /// This node stored `record` (its own issue, a replicated record or a catch-up copy).
    Applied {
        /// The client key.
        key: Bytes,
        /// This node.
        node: NodeId,
        /// The record stored.
        record: Record,
    },
}

/// A callback receiving [`TlTrace`] events. It runs synchronously right after the store, on
/// the storing task, so keep it short; on a multi-threaded runtime two events of one key may
/// be reported out of storage order (the simulator's single thread cannot interleave them).
pub type TlObserver = Arc<dyn Fn(TlTrace) + Send + Sync>;

/// The timeline counters of one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimelineStats {
    /// Writes this node received for a record it does not master and forwarded
    /// (`wrong_master_total`).
    pub wrong_master_forwards: u64,
    /// Writes this node issued that moved the mastership (`master_migrations_total`).
    pub migrations: u64,
    /// Records refused because another record had the same version (`timeline_forks_total`;
    /// a bug if ever non-zero).
    pub forks: u64,
    /// Records refused because a forced re-master fenced their master epoch
    /// (`timeline_fenced_total`): updates of a deposed master, or their retransmissions.
    pub fenced: u64,
    /// Reads coordinated here whose critical path stayed in this DC / crossed DCs.
    pub local_reads: u64,
    /// See `local_reads`.
    pub remote_reads: u64,
    /// Writes coordinated here whose critical path stayed in this DC / crossed DCs.
    pub local_writes: u64,
    /// See `local_writes`.
    pub remote_writes: u64,
    /// Records waiting to be acknowledged, by peer DC (replication lag).
    pub lag_by_dc: BTreeMap<DcId, u64>,
    /// Catch-up copies this node applied or sent.
    pub caught_up: u64,
}

#[derive(Debug, Default)]
struct TlCounters {
    wrong_master_forwards: AtomicU64,
    migrations: AtomicU64,
    forks: AtomicU64,
    fenced: AtomicU64,
    local_reads: AtomicU64,
    remote_reads: AtomicU64,
    local_writes: AtomicU64,
    remote_writes: AtomicU64,
    caught_up: AtomicU64,
}

/// Per-peer propagation state.
#[derive(Debug, Default)]
struct Outbound {
    /// The newest unacknowledged record of each key, per peer.
    pending: BTreeMap<NodeId, BTreeMap<Bytes, Record>>,
    /// Peers with a batch in flight.
    inflight: BTreeSet<NodeId>,
    /// Peers backing off after a failed batch: when to retry, and the current delay.
    backoff: BTreeMap<NodeId, (Instant, Duration)>,
}

/// The timeline state of a node.
pub(super) struct Timeline {
    store: TlStore,
    /// Master hints of keys this node is not a replica of, with the version of the record
    /// that named that master (the master waits for it if it has not applied it yet).
    hints: Mutex<BTreeMap<Bytes, (ReplicaRef, Version)>>,
    outbound: Mutex<Outbound>,
    /// Wakes the propagation task (new records queued, a batch acknowledged).
    wake: tokio::sync::Notify,
    /// Wakes requests waiting for a record to arrive (a new master awaiting its hand-over).
    applied: tokio::sync::Notify,
    counters: TlCounters,
    observer: RwLock<Option<TlObserver>>,
    /// Catch-up position: peer index and the last key compared.
    sync_cursor: Mutex<(usize, Option<Bytes>)>,
    /// Keys this node masters and knows it holds the latest record of: it issued or was
    /// handed that record during this run. Records naming it master that it found on disk
    /// at start are confirmed with the peers first (see [`EventualNode::tl_confirm`]).
    confirmed: Mutex<BTreeSet<Bytes>>,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Timeline {
    pub(super) fn new(store: TlStore, sync_start: usize) -> Timeline {
        Timeline {
            store,
            hints: Mutex::new(BTreeMap::new()),
            outbound: Mutex::new(Outbound::default()),
            wake: tokio::sync::Notify::new(),
            applied: tokio::sync::Notify::new(),
            counters: TlCounters::default(),
            observer: RwLock::new(None),
            sync_cursor: Mutex::new((sync_start, None)),
            confirmed: Mutex::new(BTreeSet::new()),
        }
    }
}

/// The key's placement as timeline sees it.
struct Placement {
    partition: PartitionId,
    /// The key's N primaries, in claim order.
    replicas: Vec<ReplicaRef>,
    props: TimelineProps,
}

impl Placement {
    fn arbiter(&self) -> ReplicaRef {
        self.replicas[0]
    }

    fn holds(&self, node: NodeId) -> bool {
        self.replicas.iter().any(|r| r.node == node)
    }
}

/// Where a write goes first.
#[derive(Debug, Clone, Copy)]
enum Target {
    Master(ReplicaRef),
    Arbiter(ReplicaRef),
}

impl Target {
    fn replica(self) -> ReplicaRef {
        match self {
            Target::Master(r) | Target::Arbiter(r) => r,
        }
    }
}

/// What the master's write path decided under the key's lock.
enum Decision {
    Issued(Record, TlIssueKind, Option<ReplicaRef>),
    /// Another replica should take it: the master (or the arbiter), and the version the
    /// receiver should wait for.
    Elsewhere(ReplicaRef, Option<Version>),
    Refused(ReplicationError),
}

/// Most keys remembered as confirmed (see [`Timeline`]'s `confirmed`).
const CONFIRMED_MAX: usize = 1 << 20;

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

fn newer(a: &Version, b: &Version) -> bool {
    a.precedence() > b.precedence()
}

fn at_least(a: &Version, b: &Version) -> bool {
    a.precedence() >= b.precedence()
}

impl EventualNode {
    // ----- configuration and inspection -----

    /// Installs a callback that sees every record this node issues or stores (the
    /// simulator's issue and apply logs).
    pub fn set_timeline_observer(&self, observer: TlObserver) {
        *self.inner.tl.observer.write() = Some(observer);
    }

    /// This node's timeline record of `key` (inspection and tools; no routing).
    pub fn tl_local(&self, key: &[u8]) -> Result<Option<Record>> {
        self.inner.tl.store.get(key)
    }

    /// Records queued for peers and not yet acknowledged.
    pub fn tl_pending(&self) -> usize {
        self.inner
            .tl
            .outbound
            .lock()
            .pending
            .values()
            .map(BTreeMap::len)
            .sum()
    }

    /// The node's timeline counters.
    pub fn tl_stats(&self) -> TimelineStats {
        let c = &self.inner.tl.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut lag_by_dc = BTreeMap::new();
        {
            let out = self.inner.tl.outbound.lock();
            let layout = self.layout();
            for (peer, pending) in &out.pending {
                if let Some(dc) = layout.topology().dc_of(*peer) {
                    *lag_by_dc.entry(dc).or_insert(0) += pending.len() as u64;
                }
            }
        }
        TimelineStats {
            wrong_master_forwards: load(&c.wrong_master_forwards),
            migrations: load(&c.migrations),
            forks: load(&c.forks),
            fenced: load(&c.fenced),
            local_reads: load(&c.local_reads),
            remote_reads: load(&c.remote_reads),
            local_writes: load(&c.local_writes),
            remote_writes: load(&c.remote_writes),
            lag_by_dc,
            caught_up: load(&c.caught_up),
        }
    }

    fn me(&self) -> ReplicaRef {
        ReplicaRef {
            node: self.id(),
            dc: self.dc(),
        }
    }

    fn trace(&self, t: TlTrace) {
        if let Some(o) = self.inner.tl.observer.read().as_ref() {
            o(t);
        }
    }

    /// The placement of a timeline key; `wrong_bucket_type` for other buckets.
    fn tl_placement(&self, key: &[u8]) -> Result<Placement> {
        let (bucket, k) = bucket_and_key(key);
        let (n, props, ty) = {
            let reg = self.registry();
            let b = reg.props_for(bucket);
            let n = reg.resolve(bucket, &Default::default()).n_val;
            (n, b.timeline, b.bucket_type)
        };
        if ty != BucketType::Timeline {
            return Err(ReplicationError::WrongBucketType {
                bucket: lossy(bucket),
                actual: format!("{ty:?}").to_lowercase(),
                hint: "timeline read modes, versions and IFVERSION need a timeline bucket".into(),
            });
        }
        let layout = self.layout();
        let partition = layout.ring().partition_of(bucket, k);
        let list = layout.replicas(partition);
        let topo = layout.topology();
        let replicas = list[..(n as usize).min(list.len())]
            .iter()
            .map(|&node| ReplicaRef {
                node,
                dc: topo.dc_of(node).expect("layouts only list members"),
            })
            .collect();
        Ok(Placement {
            partition,
            replicas,
            props,
        })
    }

    /// Whether the key's bucket is a timeline bucket.
    pub fn is_timeline(&self, key: &[u8]) -> bool {
        let (bucket, _) = bucket_and_key(key);
        self.registry().props_for(bucket).bucket_type == BucketType::Timeline
    }

    fn tl_check(&self, key: &[u8]) -> Result<Placement> {
        if is_reserved_key(key) {
            return Err(ReplicationError::ReservedKey);
        }
        self.check_joined()?;
        self.tl_placement(key)
    }

    // ----- coordinator: reads -----

    /// A timeline read of `key` (spec §2). See the module docs for the routing.
    ///
    /// # Errors
    /// `wrong_bucket_type`, `reserved_key`, `not_joined`; `master_unavailable` (read_latest)
    /// or `stale_version_unavailable` (read_critical) when the master is down or silent;
    /// `timeout` when no replica answers a read_any.
    pub async fn tl_get(&self, key: &[u8], mode: ReadMode) -> Result<TlReadResult> {
        let pl = self.tl_check(key)?;
        let r = match mode {
            ReadMode::Any => self.tl_read_any(key, &pl).await,
            ReadMode::Latest => self.tl_read_latest(key, &pl, None).await,
            ReadMode::Critical(v) => self.tl_read_critical(key, &pl, v).await,
        };
        self.forget_master_on_failure(key, &r);
        if let Ok(r) = &r {
            let c = &self.inner.tl.counters;
            let n = if r.remote {
                &c.remote_reads
            } else {
                &c.local_reads
            };
            n.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// The nearest replica's record: local if this node is a replica, else the up replicas
    /// in order (own DC first).
    async fn tl_read_any(&self, key: &[u8], pl: &Placement) -> Result<TlReadResult> {
        if pl.holds(self.id()) {
            return Ok(TlReadResult {
                record: self.inner.tl.store.get(key)?,
                served_by: self.id(),
                remote: false,
            });
        }
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut order: Vec<ReplicaRef> = pl
            .replicas
            .iter()
            .filter(|r| self.is_up(r.node))
            .copied()
            .collect();
        order.sort_by_key(|r| r.dc != self.dc());
        let mut failed = Vec::new();
        for r in order {
            let msg = Msg::TlRead {
                key: key.to_vec(),
                latest: false,
                await_ver: None,
            };
            match self.inner.transport.request(r.node, msg, timeout).await {
                Ok(Msg::TlReadReply(Ok(record))) => {
                    if let Some(rec) = &record {
                        self.remember_master(key, rec);
                    }
                    return Ok(TlReadResult {
                        record,
                        served_by: r.node,
                        remote: r.dc != self.dc(),
                    });
                }
                _ => failed.push(r.node),
            }
        }
        Err(ReplicationError::Timeout {
            need: 1,
            ok: 0,
            nf: 0,
            fail: failed.len() as u32,
            missing: crate::error::Missing(
                pl.replicas
                    .iter()
                    .map(|r| r.node)
                    .filter(|n| !failed.contains(n))
                    .collect(),
            ),
        })
    }

    /// The master's record: at the hinted master, retrying once at the hint a stale master
    /// returns.
    async fn tl_read_latest(
        &self,
        key: &[u8],
        pl: &Placement,
        local: Option<&TlReadResult>,
    ) -> Result<TlReadResult> {
        let (target, mut await_ver) = match local {
            Some(l) => match &l.record {
                Some(r) => (Target::Master(r.master), Some(r.ver)),
                None => (Target::Arbiter(pl.arbiter()), None),
            },
            None => self.master_target(key, pl).await?,
        };
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut to = target.replica();
        for attempt in 0..2 {
            let r = if to.node == self.id() {
                self.tl_serve_read(key, true, await_ver).await
            } else if !self.is_up(to.node) {
                Err(self.unavailable(
                    key,
                    to,
                    pl,
                    target,
                    "the failure detector marks it down",
                    false,
                ))
            } else {
                let msg = Msg::TlRead {
                    key: key.to_vec(),
                    latest: true,
                    await_ver,
                };
                match self.inner.transport.request(to.node, msg, timeout).await {
                    Ok(Msg::TlReadReply(r)) => r,
                    Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
                    Ok(other) => Err(self.unavailable(
                        key,
                        to,
                        pl,
                        target,
                        &format!("unexpected reply {other:?}"),
                        false,
                    )),
                    Err(e) => Err(self.unavailable(key, to, pl, target, &e.to_string(), false)),
                }
            };
            match r {
                Ok(record) => {
                    if let Some(rec) = &record {
                        self.remember_master(key, rec);
                    }
                    return Ok(TlReadResult {
                        record,
                        served_by: to.node,
                        remote: to.dc != self.dc(),
                    });
                }
                Err(ReplicationError::NotMaster { hint, await_ver: v }) if attempt == 0 => {
                    to = hint;
                    await_ver = Some(v);
                }
                Err(ReplicationError::NotMaster { hint, .. }) => {
                    return Err(ReplicationError::MasterUnavailable {
                        key: lossy(key),
                        master: hint.node,
                        dc: hint.dc,
                        reason: "the mastership is moving: retry".into(),
                        maybe_applied: false,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    async fn tl_read_critical(
        &self,
        key: &[u8],
        pl: &Placement,
        min: Version,
    ) -> Result<TlReadResult> {
        let local = self.tl_read_any(key, pl).await.ok();
        if let Some(l) = &local
            && l.version().is_some_and(|v| at_least(&v, &min))
        {
            return Ok(l.clone());
        }
        let stale =
            |master: ReplicaRef, reason: String| ReplicationError::StaleVersionUnavailable {
                required: min,
                local: local.as_ref().and_then(TlReadResult::version),
                master: master.node,
                reason,
            };
        match self.tl_read_latest(key, pl, local.as_ref()).await {
            Ok(r) if r.version().is_some_and(|v| at_least(&v, &min)) => Ok(r),
            Ok(r) => Err(stale(
                ReplicaRef {
                    node: r.served_by,
                    dc: self.dc(),
                },
                format!(
                    "the master holds {}: version {min} was never issued",
                    r.version().map_or("nothing".to_owned(), |v| v.to_string())
                ),
            )),
            Err(ReplicationError::MasterUnavailable {
                master, dc, reason, ..
            }) => Err(stale(ReplicaRef { node: master, dc }, reason)),
            Err(e) => Err(e),
        }
    }

    /// Where a write or read_latest of `key` goes first (§3's `master_hint`), and the
    /// version of the record that named that master: the target waits until it has applied
    /// it, so a hint fresher than the target's own copy (just after a migration) costs no
    /// bounce through the old master.
    async fn master_target(&self, key: &[u8], pl: &Placement) -> Result<(Target, Option<Version>)> {
        if !pl.holds(self.id())
            && let Some((m, v)) = self.inner.tl.hints.lock().get(key)
        {
            return Ok((Target::Master(*m), Some(*v)));
        }
        let near = self.tl_read_any(key, pl).await?;
        Ok(match near.record {
            Some(r) => (Target::Master(r.master), Some(r.ver)),
            None => (Target::Arbiter(pl.arbiter()), None),
        })
    }

    fn remember_master(&self, key: &[u8], record: &Record) {
        let mut h = self.inner.tl.hints.lock();
        if h.len() >= self.inner.cfg.tl_hint_cache && !h.contains_key(key) {
            // A full cache starts over: hints are only an optimisation.
            h.clear();
        }
        h.insert(Bytes::copy_from_slice(key), (record.master, record.ver));
    }

    /// Drops the cached hint of a key whose master failed, so the next request asks a
    /// replica again (the mastership may have moved, or been forced elsewhere).
    fn forget_master_on_failure<T>(&self, key: &[u8], r: &Result<T>) {
        if matches!(
            r,
            Err(ReplicationError::MasterUnavailable { .. }
                | ReplicationError::StaleVersionUnavailable { .. })
        ) {
            self.inner.tl.hints.lock().remove(key);
        }
    }

    fn unavailable(
        &self,
        key: &[u8],
        to: ReplicaRef,
        pl: &Placement,
        target: Target,
        reason: &str,
        maybe_applied: bool,
    ) -> ReplicationError {
        match target {
            Target::Arbiter(a) if a == to => ReplicationError::InsertArbiterUnavailable {
                partition: pl.partition.0,
                node: to.node,
                reason: reason.to_owned(),
                maybe_applied,
            },
            _ => ReplicationError::MasterUnavailable {
                key: lossy(key),
                master: to.node,
                dc: to.dc,
                reason: reason.to_owned(),
                maybe_applied,
            },
        }
    }

    // ----- coordinator: writes -----

    /// A timeline write of `key` (spec §2–§3): `content` (a tombstone deletes) under the
    /// precondition `expect`. Returns the record the master issued.
    ///
    /// # Errors
    /// `version_mismatch` / `already_exists` when the precondition fails;
    /// `master_unavailable` / `insert_arbiter_unavailable` when the master (arbiter) is down
    /// or silent (with "may have applied" when the request was sent); `object_too_large`;
    /// the input errors of [`EventualNode::tl_get`].
    pub async fn tl_put(
        &self,
        key: &[u8],
        content: Content,
        expect: Expect,
    ) -> Result<TlWriteResult> {
        let pl = self.tl_check(key)?;
        if let Some(v) = content.value()
            && v.len() > self.inner.cfg.object_max
        {
            return Err(ReplicationError::ObjectTooLarge {
                len: v.len(),
                max: self.inner.cfg.object_max,
            });
        }
        let (target, hint_ver) = self.master_target(key, &pl).await?;
        let op = WriteMsg {
            content,
            expect,
            origin_dc: self.dc(),
        };
        let mut to = target.replica();
        let mut r = self
            .tl_send_write(key, &pl, target, to, &op, 0, hint_ver)
            .await;
        if let Err(ReplicationError::NotMaster { hint, await_ver }) = r {
            to = hint;
            r = self
                .tl_send_write(
                    key,
                    &pl,
                    Target::Master(hint),
                    hint,
                    &op,
                    1,
                    Some(await_ver),
                )
                .await;
        }
        self.forget_master_on_failure(key, &r);
        let (record, issued_by) = match r {
            Err(ReplicationError::NotMaster { hint, .. }) => {
                return Err(ReplicationError::MasterUnavailable {
                    key: lossy(key),
                    master: hint.node,
                    dc: hint.dc,
                    reason: "the mastership is moving: retry".into(),
                    maybe_applied: false,
                });
            }
            r => r?,
        };
        if !pl.holds(self.id()) {
            self.remember_master(key, &record);
        }
        let remote = to.dc != self.dc() || issued_by.dc != self.dc();
        let c = &self.inner.tl.counters;
        let n = if remote {
            &c.remote_writes
        } else {
            &c.local_writes
        };
        n.fetch_add(1, Ordering::Relaxed);
        Ok(TlWriteResult {
            record,
            issued_by,
            remote,
        })
    }

    /// Sends a write to `to` (or runs it here) and maps transport failures to
    /// `master_unavailable` / `insert_arbiter_unavailable`.
    #[allow(clippy::too_many_arguments)]
    async fn tl_send_write(
        &self,
        key: &[u8],
        pl: &Placement,
        target: Target,
        to: ReplicaRef,
        op: &WriteMsg,
        hops: u8,
        await_ver: Option<Version>,
    ) -> Result<(Record, ReplicaRef)> {
        if to.node == self.id() {
            return Box::pin(self.tl_master_write(key, op.clone(), hops, await_ver)).await;
        }
        if !self.is_up(to.node) {
            return Err(self.unavailable(
                key,
                to,
                pl,
                target,
                "the failure detector marks it down",
                false,
            ));
        }
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let msg = Msg::TlWrite {
            key: key.to_vec(),
            content: op.content.clone(),
            expect: op.expect,
            origin_dc: op.origin_dc,
            hops,
            await_ver,
        };
        match self.inner.transport.request(to.node, msg, timeout).await {
            Ok(Msg::TlWriteReply(r)) => r,
            Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
            Ok(other) => Err(self.unavailable(
                key,
                to,
                pl,
                target,
                &format!("unexpected reply {other:?}"),
                true,
            )),
            Err(e) => {
                let maybe = matches!(e, NetError::Timeout { .. });
                Err(self.unavailable(key, to, pl, target, &e.to_string(), maybe))
            }
        }
    }

    // ----- master side -----

    /// The master's (or insert arbiter's) write path (§3, §5).
    pub(super) async fn tl_master_write(
        &self,
        key: &[u8],
        op: WriteMsg,
        hops: u8,
        await_ver: Option<Version>,
    ) -> Result<(Record, ReplicaRef)> {
        let deadline = Instant::now() + self.inner.cfg.tl_migrate_wait;
        loop {
            let pl = self.tl_placement(key)?;
            self.tl_confirm(key, &pl).await?;
            let applied = self.inner.tl.applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            let me = self.me();
            let now_us = self.inner.clock.now().micros();
            let wop = WriteOp {
                content: op.content.clone(),
                origin_dc: op.origin_dc,
                expect: op.expect,
            };
            let decision = {
                let up = |n: NodeId| self.is_up(n);
                let mut decision = None;
                let stored = self.inner.tl.store.write_with(key, |cur| {
                    let d = self.decide(cur, wop, &pl, me, now_us, &up);
                    match d {
                        Decision::Issued(r, kind, prev) => {
                            decision = Some((kind, prev));
                            Ok(r)
                        }
                        other => Err(other),
                    }
                })?;
                match stored {
                    Ok(record) => {
                        let (kind, prev) = decision.expect("set with the record");
                        self.trace(TlTrace::Issued {
                            key: Bytes::copy_from_slice(key),
                            record: record.clone(),
                            kind,
                            by: me,
                            origin_dc: op.origin_dc,
                        });
                        self.trace(TlTrace::Applied {
                            key: Bytes::copy_from_slice(key),
                            node: me.node,
                            record: record.clone(),
                        });
                        Decision::Issued(record, kind, prev)
                    }
                    Err(d) => d,
                }
            };
            match decision {
                Decision::Issued(record, _, prev) => {
                    self.mark_confirmed(key, &record);
                    if prev.is_some_and(|p| p.node != record.master.node) {
                        self.inner
                            .tl
                            .counters
                            .migrations
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.inner.tl.applied.notify_waiters();
                    let key = Bytes::copy_from_slice(key);
                    self.tl_enqueue(&key, &record, &pl);
                    if pl.props.timeline_w > 1 {
                        self.tl_await_acks(&key, &record, &pl).await?;
                    }
                    return Ok((record, me));
                }
                Decision::Refused(e) => return Err(e),
                Decision::Elsewhere(hint, ver) => {
                    let behind = match (await_ver, ver) {
                        (Some(a), Some(have)) => newer(&a, &have),
                        (Some(_), None) => true,
                        (None, _) => false,
                    };
                    let now = Instant::now();
                    if behind && now < deadline {
                        // The sender knows a newer record (one naming this node master, as
                        // far as it knows): wait for it rather than forward on an old copy.
                        let _ = tokio::time::timeout(deadline - now, applied).await;
                        continue;
                    }
                    if hops == 0 {
                        self.inner
                            .tl
                            .counters
                            .wrong_master_forwards
                            .fetch_add(1, Ordering::Relaxed);
                        let target = if ver.is_none() {
                            Target::Arbiter(hint)
                        } else {
                            Target::Master(hint)
                        };
                        return Box::pin(self.tl_send_write(key, &pl, target, hint, &op, 1, ver))
                            .await;
                    }
                    return Err(ReplicationError::NotMaster {
                        hint,
                        await_ver: ver.unwrap_or(Version::new(0, 0, 0)),
                    });
                }
            }
        }
    }

    /// The decision of the write path on the current record (under the key's lock).
    fn decide(
        &self,
        cur: Option<&Record>,
        op: WriteOp,
        pl: &Placement,
        me: ReplicaRef,
        now_us: u64,
        up: &impl Fn(NodeId) -> bool,
    ) -> Decision {
        match cur {
            None if pl.arbiter().node != me.node => return Decision::Elsewhere(pl.arbiter(), None),
            Some(r) if r.master.node != me.node => {
                return Decision::Elsewhere(r.master, Some(r.ver));
            }
            _ => {}
        }
        let origin = op.origin_dc;
        match master_write(cur, op, &pl.props, me, now_us, &pl.replicas, up) {
            Ok(mut r) => {
                // A master that a layout change left without a replica of the key hands
                // the mastership to a primary with this write.
                if !pl.holds(r.master.node)
                    && let Some(m) = new_master_in(origin, &pl.replicas, up)
                        .or_else(|| pl.replicas.iter().find(|x| up(x.node)).copied())
                {
                    r.master = m;
                }
                let kind = if cur.is_none() {
                    TlIssueKind::Insert
                } else {
                    TlIssueKind::Write
                };
                Decision::Issued(r, kind, cur.map(|c| c.master))
            }
            Err(WriteRefusal::NotMaster { hint, await_ver }) => {
                Decision::Elsewhere(hint, Some(await_ver))
            }
            Err(WriteRefusal::VersionMismatch { current }) => {
                Decision::Refused(ReplicationError::VersionMismatch { current })
            }
            Err(WriteRefusal::AlreadyExists { current }) => {
                Decision::Refused(ReplicationError::AlreadyExists { current })
            }
        }
    }

    /// Serves a `TlRead`: the local record; with `latest`, only as its master (or as the
    /// arbiter of an absent record), waiting up to `migrate_wait` for `await_ver`.
    pub(super) async fn tl_serve_read(
        &self,
        key: &[u8],
        latest: bool,
        await_ver: Option<Version>,
    ) -> Result<Option<Record>> {
        if !latest {
            return self.inner.tl.store.get(key);
        }
        let deadline = Instant::now() + self.inner.cfg.tl_migrate_wait;
        loop {
            let pl = self.tl_placement(key)?;
            self.tl_confirm(key, &pl).await?;
            let applied = self.inner.tl.applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            let cur = self.inner.tl.store.get(key)?;
            let (hint, have) = match &cur {
                Some(r) if r.master.node == self.id() => return Ok(cur),
                None if pl.arbiter().node == self.id() => return Ok(None),
                Some(r) => (r.master, Some(r.ver)),
                None => (pl.arbiter(), None),
            };
            let behind = match (await_ver, have) {
                (Some(a), Some(h)) => newer(&a, &h),
                (Some(_), None) => true,
                (None, _) => false,
            };
            let now = Instant::now();
            if behind && now < deadline {
                let _ = tokio::time::timeout(deadline - now, applied).await;
                continue;
            }
            return Err(ReplicationError::NotMaster {
                hint,
                await_ver: have.unwrap_or(Version::new(0, 0, 0)),
            });
        }
    }

    /// Notes that this node holds the latest record of a key it masters (it issued it, or
    /// it was handed the record by replication, which only ever moves forward).
    fn mark_confirmed(&self, key: &[u8], record: &Record) {
        if record.master.node != self.id() {
            return;
        }
        let mut c = self.inner.tl.confirmed.lock();
        if c.len() >= CONFIRMED_MAX && !c.contains(key) {
            // Forgetting only costs a re-confirmation round trip.
            c.clear();
        }
        c.insert(Bytes::copy_from_slice(key));
    }

    /// Before this node first acts as master of a record it found on disk at start, it asks
    /// the other primaries for their copies and applies any newer one. A crash under a lossy
    /// fsync policy may have taken the tail of its records after they were replicated;
    /// issuing again from the older copy would give one version two contents (a fork that
    /// version-based catch-up cannot see). Peers that do not answer are skipped: the
    /// residual risk is a lost tail held only by a replica unreachable right now.
    async fn tl_confirm(&self, key: &[u8], pl: &Placement) -> Result<()> {
        let me = self.id();
        if self.inner.tl.confirmed.lock().contains(key) {
            return Ok(());
        }
        let Some(local) = self.inner.tl.store.get(key)? else {
            return Ok(());
        };
        if local.master.node != me {
            return Ok(());
        }
        let timeout =
            Duration::from_millis(pl.props.master_timeout_ms).min(self.inner.cfg.tl_migrate_wait);
        let mut calls = futures_util::stream::FuturesUnordered::new();
        for peer in pl
            .replicas
            .iter()
            .filter(|r| r.node != me && self.is_up(r.node))
        {
            let t = self.inner.transport.clone();
            let msg = Msg::TlRead {
                key: key.to_vec(),
                latest: false,
                await_ver: None,
            };
            let node = peer.node;
            calls.push(async move { t.request(node, msg, timeout).await });
        }
        let mut newer_copies = Vec::new();
        use futures_util::StreamExt;
        while let Some(r) = calls.next().await {
            if let Ok(Msg::TlReadReply(Ok(Some(rec)))) = r
                && newer(&rec.ver, &local.ver)
            {
                newer_copies.push((key.to_vec(), rec));
            }
        }
        if !newer_copies.is_empty() {
            tracing::warn!(node = %me, key = %lossy(key), "a peer holds a newer record than this restarted master: adopting it");
            self.tl_apply(newer_copies)?;
        }
        self.mark_confirmed(key, &local);
        Ok(())
    }

    /// Serves a `TlForce`: takes the mastership of `key` in the next master epoch.
    pub(super) fn tl_serve_force(&self, key: &[u8]) -> Result<(Record, ReplicaRef)> {
        let pl = self.tl_placement(key)?;
        let me = self.me();
        let r = self.inner.tl.store.write_with(key, |cur| match cur {
            Some(c) => Ok(force_remaster(c, me)),
            None => Err(ReplicationError::ForceMasterRefused {
                key: lossy(key),
                reason: format!("{} holds no record of it", me.node),
            }),
        })??;
        tracing::warn!(node = %me.node, key = %lossy(key), ver = %r.ver, "forced re-master: this node is the master now");
        self.mark_confirmed(key, &r);
        let k = Bytes::copy_from_slice(key);
        self.trace(TlTrace::Issued {
            key: k.clone(),
            record: r.clone(),
            kind: TlIssueKind::ForceMaster,
            by: me,
            origin_dc: me.dc,
        });
        self.trace(TlTrace::Applied {
            key: k.clone(),
            node: me.node,
            record: r.clone(),
        });
        self.inner.tl.applied.notify_waiters();
        self.tl_enqueue(&k, &r, &pl);
        Ok((r, me))
    }

    /// Forces the mastership of `key` to DC `dc` (spec §7): the reachable replica there with
    /// the highest version writes the record in the next master epoch. **This may lose
    /// acknowledged writes**: whatever the old master issued and did not propagate to that
    /// replica is discarded when it arrives.
    ///
    /// # Errors
    /// `force_master_refused` when no replica in `dc` is reachable or holds the record.
    pub async fn tl_force_master(&self, key: &[u8], dc: DcId) -> Result<TlWriteResult> {
        let pl = self.tl_check(key)?;
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut best: Option<(ReplicaRef, Version)> = None;
        let mut tried = Vec::new();
        for r in pl.replicas.iter().filter(|r| r.dc == dc) {
            let rec = if r.node == self.id() {
                self.inner.tl.store.get(key).ok().flatten()
            } else {
                let msg = Msg::TlRead {
                    key: key.to_vec(),
                    latest: false,
                    await_ver: None,
                };
                match self.inner.transport.request(r.node, msg, timeout).await {
                    Ok(Msg::TlReadReply(Ok(rec))) => rec,
                    _ => None,
                }
            };
            tried.push(r.node.to_string());
            if let Some(rec) = rec
                && best.is_none_or(|(_, v)| newer(&rec.ver, &v))
            {
                best = Some((*r, rec.ver));
            }
        }
        let Some((to, _)) = best else {
            return Err(ReplicationError::ForceMasterRefused {
                key: lossy(key),
                reason: if tried.is_empty() {
                    format!("the key has no replica in {dc}")
                } else {
                    format!(
                        "no reachable replica in {dc} ({}) holds the record",
                        tried.join(",")
                    )
                },
            });
        };
        let (record, issued_by) = if to.node == self.id() {
            self.tl_serve_force(key)?
        } else {
            let msg = Msg::TlForce { key: key.to_vec() };
            match self.inner.transport.request(to.node, msg, timeout).await {
                Ok(Msg::TlWriteReply(r)) => r?,
                Ok(other) => {
                    return Err(ReplicationError::ForceMasterRefused {
                        key: lossy(key),
                        reason: format!("unexpected reply from {}: {other:?}", to.node),
                    });
                }
                Err(e) => {
                    return Err(ReplicationError::ForceMasterRefused {
                        key: lossy(key),
                        reason: format!("{} did not answer: {e}", to.node),
                    });
                }
            }
        };
        self.remember_master(key, &record);
        Ok(TlWriteResult {
            remote: issued_by.dc != self.dc(),
            record,
            issued_by,
        })
    }

    // ----- propagation -----

    /// Queues `record` for every other primary of the key.
    fn tl_enqueue(&self, key: &Bytes, record: &Record, pl: &Placement) {
        let me = self.id();
        {
            let mut out = self.inner.tl.outbound.lock();
            for peer in pl.replicas.iter().filter(|r| r.node != me) {
                let q = out.pending.entry(peer.node).or_default();
                match q.get(key) {
                    Some(queued) if !newer(&record.ver, &queued.ver) => {}
                    _ => {
                        q.insert(key.clone(), record.clone());
                    }
                }
            }
        }
        self.inner.tl.wake.notify_one();
    }

    /// Waits for `timeline_w − 1` peers to acknowledge `record` (sent directly, besides the
    /// queue that keeps retrying).
    async fn tl_await_acks(&self, key: &Bytes, record: &Record, pl: &Placement) -> Result<()> {
        let need = pl.props.timeline_w as usize - 1;
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut calls = futures_util::stream::FuturesUnordered::new();
        for peer in pl.replicas.iter().filter(|r| r.node != self.id()) {
            let t = self.inner.transport.clone();
            let msg = Msg::TlReplicate {
                records: vec![(key.to_vec(), record.clone())],
            };
            let node = peer.node;
            calls.push(async move { (node, t.request(node, msg, timeout).await) });
        }
        let mut acks = 0;
        let mut missing: Vec<NodeId> = pl
            .replicas
            .iter()
            .map(|r| r.node)
            .filter(|n| *n != self.id())
            .collect();
        use futures_util::StreamExt;
        while let Some((node, r)) = calls.next().await {
            if matches!(r, Ok(Msg::Ack { .. })) {
                acks += 1;
                missing.retain(|n| *n != node);
                if acks >= need {
                    return Ok(());
                }
            }
        }
        Err(ReplicationError::Timeout {
            need: pl.props.timeline_w,
            ok: acks as u32 + 1,
            nf: 0,
            fail: 0,
            missing: crate::error::Missing(missing),
        })
    }

    /// Applies replicated or caught-up records (the replica side of §4 and §8).
    pub(super) fn tl_apply(&self, records: Vec<(Vec<u8>, Record)>) -> Result<usize> {
        let mut stored = 0;
        for (key, rec) in records {
            let m = self.inner.tl.store.apply(&key, &rec)?;
            let c = &self.inner.tl.counters;
            match m {
                Merge::Apply => {
                    stored += 1;
                    self.mark_confirmed(&key, &rec);
                    self.trace(TlTrace::Applied {
                        key: Bytes::from(key),
                        node: self.id(),
                        record: rec,
                    });
                }
                Merge::Fork => {
                    c.forks.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(node = %self.id(), key = %lossy(&key), ver = %rec.ver, "timeline fork: two records with one version (a bug)");
                }
                Merge::Fenced => {
                    c.fenced.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(node = %self.id(), key = %lossy(&key), ver = %rec.ver, "discarded a record of a deposed master (forced re-master)");
                }
                Merge::Stale | Merge::Duplicate => {}
            }
        }
        if stored > 0 {
            self.inner.tl.applied.notify_waiters();
        }
        Ok(stored)
    }

    /// The propagation task: sends each peer's queued records, one batch in flight per peer.
    pub(super) async fn tl_streams(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.inner.cfg.tl_retry);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.inner.tl.wake.notified() => {}
                _ = tick.tick() => {}
            }
            self.tl_pump();
        }
    }

    fn tl_pump(&self) {
        let now = Instant::now();
        let batch_max = self.inner.cfg.tl_batch.max(1);
        let mut starts = Vec::new();
        {
            let mut out = self.inner.tl.outbound.lock();
            let Outbound {
                pending,
                inflight,
                backoff,
            } = &mut *out;
            pending.retain(|_, q| !q.is_empty());
            for (peer, q) in pending.iter() {
                if inflight.contains(peer) || backoff.get(peer).is_some_and(|(at, _)| *at > now) {
                    continue;
                }
                let batch: Vec<(Bytes, Record)> = q
                    .iter()
                    .take(batch_max)
                    .map(|(k, r)| (k.clone(), r.clone()))
                    .collect();
                inflight.insert(*peer);
                starts.push((*peer, batch));
            }
        }
        for (peer, batch) in starts {
            let node = self.clone();
            tokio::spawn(async move { node.tl_send_batch(peer, batch).await });
        }
    }

    async fn tl_send_batch(self, peer: NodeId, batch: Vec<(Bytes, Record)>) {
        let msg = Msg::TlReplicate {
            records: batch.iter().map(|(k, r)| (k.to_vec(), r.clone())).collect(),
        };
        let r = self
            .inner
            .transport
            .request(peer, msg, self.inner.cfg.handoff_timeout)
            .await;
        let mut out = self.inner.tl.outbound.lock();
        out.inflight.remove(&peer);
        if matches!(r, Ok(Msg::Ack { .. })) {
            out.backoff.remove(&peer);
            if let Some(q) = out.pending.get_mut(&peer) {
                for (k, sent) in &batch {
                    if q.get(k).is_some_and(|queued| queued.ver == sent.ver) {
                        q.remove(k);
                    }
                }
            }
            drop(out);
            self.inner.tl.wake.notify_one();
        } else {
            let cfg = &self.inner.cfg;
            let delay = match out.backoff.get(&peer) {
                Some((_, d)) => (*d * 2).min(cfg.tl_retry_max),
                None => cfg.tl_retry,
            };
            out.backoff.insert(peer, (Instant::now() + delay, delay));
        }
    }

    // ----- catch-up -----

    /// The catch-up task: one [`EventualNode::tl_sync_round`] every `tl_sync_interval`.
    pub(super) async fn tl_catch_up(self, shutdown: CancellationToken) {
        let every = self.inner.cfg.tl_sync_interval;
        if every.is_zero() {
            return;
        }
        let first = Instant::now() + self.start_offset(every);
        let mut tick = tokio::time::interval_at(first, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.tl_sync_round().await {
                tracing::debug!(node = %self.id(), error = %e, "timeline catch-up round failed");
            }
        }
    }

    /// One catch-up exchange (§8): compares one page of this node's records with the next
    /// peer in turn, and copies the newer record of every differing key both ways. Returns
    /// how many records were copied.
    pub async fn tl_sync_round(&self) -> Result<usize> {
        let peers: Vec<NodeId> = {
            let layout = self.layout();
            layout
                .topology()
                .members()
                .iter()
                .map(|m| m.id)
                .filter(|n| *n != self.id())
                .collect()
        };
        if peers.is_empty() {
            return Ok(0);
        }
        let (peer, after) = {
            let c = self.inner.tl.sync_cursor.lock();
            (peers[c.0 % peers.len()], c.1.clone())
        };
        let (page, next) =
            self.inner
                .tl
                .store
                .page(after.as_deref(), None, self.inner.cfg.tl_sync_page)?;
        {
            let mut c = self.inner.tl.sync_cursor.lock();
            match &next {
                Some(k) => c.1 = Some(k.clone()),
                None => {
                    c.0 = c.0.wrapping_add(1);
                    c.1 = None;
                }
            }
        }
        if !self.is_up(peer) {
            return Ok(0);
        }
        let mut items = Vec::new();
        for (k, r) in &page {
            if self.tl_placement(k).is_ok_and(|pl| pl.holds(peer)) {
                items.push((k.to_vec(), r.ver));
            }
        }
        let msg = Msg::TlSync {
            items,
            after: after.map(|a| a.to_vec()),
            upto: next.map(|n| n.to_vec()),
        };
        let timeout = self.inner.cfg.anti_entropy_timeout;
        let (newer_there, want) = match self.inner.transport.request(peer, msg, timeout).await {
            Ok(Msg::TlSyncReply { newer, want }) => (newer, want),
            Ok(other) => {
                return Err(ReplicationError::Storage {
                    reason: format!("unexpected catch-up reply from {peer}: {other:?}"),
                });
            }
            Err(e) => {
                return Err(ReplicationError::ForwardFailed {
                    node: peer,
                    reason: e.to_string(),
                });
            }
        };
        let mut copied = self.tl_apply(newer_there)?;
        let mut out = self.inner.tl.outbound.lock();
        let q = out.pending.entry(peer).or_default();
        for k in want {
            if let Some(r) = self.inner.tl.store.get(&k)? {
                q.insert(Bytes::from(k), r);
                copied += 1;
            }
        }
        drop(out);
        self.inner.tl.wake.notify_one();
        self.inner
            .tl
            .counters
            .caught_up
            .fetch_add(copied as u64, Ordering::Relaxed);
        Ok(copied)
    }

    /// Serves a `TlSync` from `from`.
    pub(super) fn tl_serve_sync(
        &self,
        from: NodeId,
        items: Vec<(Vec<u8>, Version)>,
        after: Option<Vec<u8>>,
        upto: Option<Vec<u8>>,
    ) -> Result<Msg> {
        let theirs: BTreeMap<Vec<u8>, Version> = items.into_iter().collect();
        let mut newer_here = Vec::new();
        let mut seen = BTreeSet::new();
        let mut cursor = after.map(Bytes::from);
        loop {
            let (page, next) = self.inner.tl.store.page(
                cursor.as_deref(),
                upto.as_deref(),
                self.inner.cfg.tl_sync_page,
            )?;
            for (k, r) in page {
                if !self.tl_placement(&k).is_ok_and(|pl| pl.holds(from)) {
                    continue;
                }
                seen.insert(k.to_vec());
                match theirs.get(k.as_ref()) {
                    Some(v) if !newer(&r.ver, v) => {}
                    _ => newer_here.push((k.to_vec(), r)),
                }
            }
            match next {
                Some(n) if newer_here.len() < self.inner.cfg.tl_sync_page * 8 => cursor = Some(n),
                _ => break,
            }
        }
        let mut want = Vec::new();
        for (k, v) in &theirs {
            let wanted = if seen.contains(k) {
                self.inner
                    .tl
                    .store
                    .get(k)?
                    .is_none_or(|mine| newer(v, &mine.ver))
            } else {
                true
            };
            if wanted {
                want.push(k.clone());
            }
        }
        Ok(Msg::TlSyncReply {
            newer: newer_here,
            want,
        })
    }
}

/// A client write as the master path receives it.
#[derive(Debug, Clone)]
pub(super) struct WriteMsg {
    pub(super) content: Content,
    pub(super) expect: Expect,
    pub(super) origin_dc: DcId,
}
