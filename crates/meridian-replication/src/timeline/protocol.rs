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
//!   to the partition's **insert arbiter** (its first primary, §5). The request carries the
//!   version of the record that named the hinted master (`await`), and a write id. The
//!   receiver runs [`master_write`] under the key's lock. A receiver whose copy is older than
//!   `await` waits up to `migrate_wait` for it (a hint can be fresher than the new master's
//!   copy right after a migration); one that is still not the master forwards once
//!   (`hops = 1`, `await` = its version); a forwarded request that still finds another master
//!   answers `not_master`, and the coordinator retries once at that hint. A duplicated
//!   request (same write id) is answered with the first one's result.
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
//! - **Restarts, wipes and layout changes**: a master may not hold the latest record of a key
//!   when it read the record from disk after a start (a crash under a lossy fsync policy can
//!   take the tail), or finds none on a node that was wiped or gained the partition and has
//!   not completed a catch-up pass with every other primary. Before it acts (write, insert,
//!   read_latest) it then asks the other primaries for their copies and applies any newer
//!   one (`Node::tl_confirm`). And its first write over a record it did not issue
//!   during this run opens a new generation, so no version is ever issued twice, even one a
//!   crash erased everywhere. Catch-up runs at the retry pace until a pass with every peer has
//!   completed.
//! - **Failures** (§7): a master the detector marks down fails the request at once with
//!   `master_unavailable`; one that does not answer fails it after `master_timeout_ms`, marked
//!   "may have applied" for writes (as is every transport failure once the request was sent).
//!   `read_any` keeps working from any replica, within one `master_timeout_ms` budget.
//! - **Forced re-master** (§7, [`Node::tl_force_master`]): the reachable replica of
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
//! - **Tombstone GC** (§5): catch-up rounds also let a record's master forget a tombstone it
//!   issued once it is `tl_tombstone_grace` old (default 24 h) and every other primary holds
//!   it as it is; tombstones of a master epoch above 0 are kept (see [`Node::tl_reap`]).
//! - After a layout change a master that is no longer a primary of the key hands mastership
//!   to a primary with its next write; records are not moved by ownership handoff, but
//!   catch-up copies them to new primaries from the remaining ones (and confirmation covers
//!   the time until it has).
//! - A master's first write after a restart or a hand-over opens a new generation (see
//!   above), where the spec continues `seq`. Versions still increase, and clients see no
//!   difference beyond the number.
//! - With `timeline_w = 1` (the default, as in the study) a write the master acknowledged
//!   and had not yet sent anywhere is lost if the master's disk is (a wipe, or a crash under
//!   a lossy fsync policy); `timeline_w = 2` keeps it on a second replica before the ack.
//! - The forced re-master works per key (`--partition` is not built).

use super::messages::TimelineMsg;
use crate::balance::{Cand, ReadAnswer, ReadFail, ReadKind, ReadPlan};
use crate::bucket::BucketType;
use crate::error::{ReplicationError, Result};
use crate::kernel::{Incoming, Node, Protocol};
use crate::kernel::{Msg, RemoteError};
use crate::object_store::is_reserved_key;
use crate::timeline::{
    Content, Expect, Merge, Record, ReplicaRef, TimelineProps, TlStore, Version, WriteOp,
    WriteRefusal, force_remaster, master_write, new_master_in,
};
use bytes::Bytes;
use meridian_cluster::bucket_and_key;
use meridian_core::{DcId, NodeId, PartitionId};
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
pub(crate) struct Timeline {
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
    /// Catch-up position.
    sync_cursor: Mutex<SyncCursor>,
    /// Keys whose latest record this node issued during this run (a write or a forced
    /// re-master). For any other record naming it master, an earlier run of this node may
    /// have issued versions beyond it that a crash lost (see [`Node::tl_confirm`] and
    /// the new-generation rule in `decide`).
    issued_here: Mutex<BTreeSet<Bytes>>,
    /// Keys already confirmed with the peers this run.
    peer_checked: Mutex<BTreeSet<Bytes>>,
    /// Peers with which a full catch-up pass completed since this node started, under the
    /// layout epoch given (a layout change starts over): for a partition whose other
    /// primaries are all here, this node holds every record they held then.
    synced_with: Mutex<(u64, BTreeSet<NodeId>)>,
    /// Results of recent writes by request id, so a duplicated request is answered, not
    /// applied twice.
    recent_writes: Mutex<RecentWrites>,
    /// Ids of this node's write requests.
    next_write: AtomicU64,
}

/// Where catch-up stands: the peer (an index into the other members), the last key of the
/// pass so far, and whether every exchange of the pass succeeded.
#[derive(Debug)]
struct SyncCursor {
    peer: usize,
    after: Option<Bytes>,
    pass_ok: bool,
}

/// A bounded map of recent write results by request id, oldest evicted first.
#[derive(Debug, Default)]
struct RecentWrites {
    results: BTreeMap<WriteId, (Record, ReplicaRef)>,
    order: std::collections::VecDeque<WriteId>,
}

impl RecentWrites {
    fn insert(&mut self, id: WriteId, result: (Record, ReplicaRef)) {
        if self.results.insert(id, result).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > RECENT_WRITES_MAX {
            if let Some(old) = self.order.pop_front() {
                self.results.remove(&old);
            }
        }
    }
}

/// Most write results remembered for duplicate detection.
const RECENT_WRITES_MAX: usize = 16_384;

/// The id of one client write: the coordinator, its incarnation and a counter. Every
/// forward and retry of the write carries it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct WriteId {
    /// The coordinator.
    pub node: NodeId,
    /// Its incarnation.
    pub incarnation: u32,
    /// Its counter.
    pub seq: u64,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Timeline {
    pub(crate) fn new(store: TlStore, sync_start: usize) -> Timeline {
        Timeline {
            store,
            hints: Mutex::new(BTreeMap::new()),
            outbound: Mutex::new(Outbound::default()),
            wake: tokio::sync::Notify::new(),
            applied: tokio::sync::Notify::new(),
            counters: TlCounters::default(),
            observer: RwLock::new(None),
            sync_cursor: Mutex::new(SyncCursor {
                peer: sync_start,
                after: None,
                pass_ok: true,
            }),
            issued_here: Mutex::new(BTreeSet::new()),
            peer_checked: Mutex::new(BTreeSet::new()),
            synced_with: Mutex::new((0, BTreeSet::new())),
            recent_writes: Mutex::new(RecentWrites::default()),
            next_write: AtomicU64::new(0),
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

/// One request to a master (or the arbiter), for error reporting.
struct Ask<'a> {
    key: &'a [u8],
    pl: &'a Placement,
    target: Target,
    to: ReplicaRef,
    /// A write (its outcome is unknown when the transport fails).
    write: bool,
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
    /// The request was already applied (a duplicate): its result.
    Duplicate((Record, ReplicaRef)),
    /// Another replica should take it: the master (or the arbiter), and the version the
    /// receiver should wait for.
    Elsewhere(ReplicaRef, Option<Version>),
    Refused(ReplicationError),
}

/// Most keys remembered in each of [`Timeline`]'s `issued_here` and `peer_checked`.
const CONFIRMED_MAX: usize = 1 << 20;

/// Adds `key` to a bounded set of keys; a full set starts over (forgetting only costs a
/// repeated check).
fn remember(set: &Mutex<BTreeSet<Bytes>>, key: &[u8]) {
    let mut c = set.lock();
    if c.len() >= CONFIRMED_MAX && !c.contains(key) {
        c.clear();
    }
    c.insert(Bytes::copy_from_slice(key));
}

fn lossy(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

fn newer(a: &Version, b: &Version) -> bool {
    a.precedence() > b.precedence()
}

/// Whether a node holding `have` is behind a sender that knows `awaited`: it should wait for
/// the newer record (one naming it master, as far as the sender knows) rather than act on its
/// old copy.
fn is_behind(awaited: Option<Version>, have: Option<Version>) -> bool {
    match (awaited, have) {
        (Some(a), Some(h)) => newer(&a, &h),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn at_least(a: &Version, b: &Version) -> bool {
    a.precedence() >= b.precedence()
}

impl Protocol for Timeline {
    type Msg = TimelineMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: TimelineMsg) {
        match msg {
            TimelineMsg::Write {
                id,
                key,
                content,
                expect,
                origin_dc,
                hops,
                await_ver,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let node = node.clone();
                tokio::spawn(async move {
                    let op = WriteMsg {
                        id,
                        content,
                        expect,
                        origin_dc,
                    };
                    let r = node.tl_master_write(&key, op, hops, await_ver).await;
                    req.answer(TimelineMsg::WriteReply(r));
                });
            }
            TimelineMsg::Read {
                key,
                latest,
                await_ver,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                if latest {
                    let node = node.clone();
                    tokio::spawn(async move {
                        req.answer(TimelineMsg::ReadReply(
                            node.tl_serve_read(&key, latest, await_ver).await,
                        ));
                    });
                } else {
                    req.answer(TimelineMsg::ReadReply(node.tl_local(&key)));
                }
            }
            TimelineMsg::Replicate { records } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let cap = peer_batch_cap(node.kernel().cfg.tl_batch);
                if records.len() > cap {
                    let why = format!(
                        "TimelineMsg::Replicate.records has {} records: at most {cap}",
                        records.len()
                    );
                    return req.refuse_oversized(node, why);
                }
                let hot: Vec<Vec<u8>> = records
                    .iter()
                    .filter(|(k, _)| node.is_hot(k))
                    .map(|(k, _)| k.clone())
                    .collect();
                let applied = match node.tl_apply(records) {
                    Ok(_) => Msg::Timeline(TimelineMsg::Ack),
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                };
                if hot.is_empty() {
                    req.answer(applied);
                } else {
                    // Extra copies of hot keys go before the replica acknowledges.
                    let node = node.clone();
                    tokio::spawn(async move {
                        for k in hot {
                            node.invalidate_if_hot(&k).await;
                        }
                        req.answer(applied);
                    });
                }
            }
            TimelineMsg::Sync { items, after, upto } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let cap = peer_batch_cap(node.kernel().cfg.tl_sync_page);
                if items.len() > cap {
                    let why = format!(
                        "TimelineMsg::Sync.items has {} items: at most {cap}",
                        items.len()
                    );
                    return req.refuse_oversized(node, why);
                }
                let from = req.from;
                req.answer(match node.tl_serve_sync(from, items, after, upto) {
                    Ok(m) => m,
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            TimelineMsg::Force { key } => {
                req.answer(TimelineMsg::WriteReply(node.tl_serve_force(&key)));
            }
            TimelineMsg::Reap { key, ver } => node.tl_reap_local(&key, ver),
            other @ (TimelineMsg::WriteReply(_)
            | TimelineMsg::ReadReply(_)
            | TimelineMsg::SyncReply { .. }
            | TimelineMsg::Ack) => req.unexpected(node, &other),
        }
    }
}

/// The most entries a peer's batch may carry, from this node's own batch size `own`: four
/// times it (nodes share their configuration; the margin tolerates a peer configured a
/// little larger), never a count the peer chose.
fn peer_batch_cap(own: usize) -> usize {
    own.max(1).saturating_mul(4)
}

impl Node {
    // ----- configuration and inspection -----

    /// Installs a callback that sees every record this node issues or stores (the
    /// simulator's issue and apply logs).
    pub fn set_timeline_observer(&self, observer: TlObserver) {
        *self.tl_state().observer.write() = Some(observer);
    }

    /// This node's timeline record of `key` (inspection and tools; no routing).
    pub fn tl_local(&self, key: &[u8]) -> Result<Option<Record>> {
        self.tl_state().store.get(key)
    }

    /// Records queued for peers and not yet acknowledged.
    pub fn tl_pending(&self) -> usize {
        self.tl_state()
            .outbound
            .lock()
            .pending
            .values()
            .map(BTreeMap::len)
            .sum()
    }

    /// The node's timeline counters.
    pub fn tl_stats(&self) -> TimelineStats {
        let c = &self.tl_state().counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut lag_by_dc = BTreeMap::new();
        {
            let out = self.tl_state().outbound.lock();
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
        if let Some(o) = self.tl_state().observer.read().as_ref() {
            o(t);
        }
    }

    /// The placement of a timeline key; `wrong_bucket_type` for other buckets.
    fn tl_placement(&self, key: &[u8]) -> Result<Placement> {
        let (bucket, _) = bucket_and_key(key);
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
        let partition = layout.ring().partition_of(key);
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
        self.tl_get_with(key, mode, None).await
    }

    /// [`Self::tl_get`] with a replica-selection strategy for a `read_any` (default: the
    /// bucket's `replica_selection`).
    pub async fn tl_get_with(
        &self,
        key: &[u8],
        mode: ReadMode,
        selection: Option<meridian_balance::Strategy>,
    ) -> Result<TlReadResult> {
        let pl = self.tl_check(key)?;
        let r = match mode {
            ReadMode::Any => self.tl_read_any(key, &pl, selection).await,
            ReadMode::Latest => self.tl_read_latest(key, &pl, None).await,
            ReadMode::Critical(v) => self.tl_read_critical(key, &pl, v).await,
        };
        self.forget_master_on_failure(key, &r);
        if let Ok(r) = &r {
            let c = &self.tl_state().counters;
            let n = if r.remote {
                &c.remote_reads
            } else {
                &c.local_reads
            };
            n.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// A record from one replica (or extra copy), as the bucket's (or the request's) replica
    /// selection chooses: by default the nearest replica — local if this node is one, else
    /// the up replicas in order (own DC first).
    async fn tl_read_any(
        &self,
        key: &[u8],
        pl: &Placement,
        selection: Option<meridian_balance::Strategy>,
    ) -> Result<TlReadResult> {
        let (bucket, _) = bucket_and_key(key);
        let (strategy, extra_copies) = {
            let reg = self.registry();
            let s = selection.unwrap_or(reg.resolve(bucket, &Default::default()).replica_selection);
            (s, reg.props_for(bucket).extra_copies.unwrap_or(false))
        };
        let plain = strategy == meridian_balance::Strategy::LocalFirst
            && !extra_copies
            && self.service_model().is_real();
        if plain && pl.holds(self.id()) {
            return Ok(TlReadResult {
                record: self.tl_state().store.get(key)?,
                served_by: self.id(),
                remote: false,
            });
        }
        // One budget for all attempts, so a read never takes more than master_timeout_ms.
        let deadline = Instant::now() + Duration::from_millis(pl.props.master_timeout_ms);
        let me = self.id();
        let mut homes: Vec<Cand> = pl
            .replicas
            .iter()
            .filter(|r| r.node == me || self.is_up(r.node))
            .map(|r| Cand {
                node: r.node,
                dc: r.dc,
                kind: ReadKind::Timeline,
                extra: false,
                failover_only: false,
            })
            .collect();
        homes.sort_by_key(|c| (c.node != me, c.dc != self.dc()));
        let plan = ReadPlan {
            strategy,
            hedge: None,
            deadline,
            hot_copies: extra_copies,
        };
        match self.read_one(key, homes, plan).await {
            Ok(one) => {
                let record = match one.answer {
                    ReadAnswer::Record(r) => r,
                    _ => None,
                };
                if let Some(rec) = &record {
                    self.remember_master(key, rec);
                }
                Ok(TlReadResult {
                    record,
                    served_by: one.cand.node,
                    remote: one.cand.dc != self.dc(),
                })
            }
            Err(ReadFail::Overload) => Err(ReplicationError::Overload),
            Err(ReadFail::Failed(failed)) => Err(ReplicationError::Timeout {
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
            }),
        }
    }

    /// The master's record: at the hinted master, retrying once at the hint a stale master
    /// returns.
    async fn tl_read_latest(
        &self,
        key: &[u8],
        pl: &Placement,
        local: Option<std::result::Result<&TlReadResult, ()>>,
    ) -> Result<TlReadResult> {
        let (target, mut await_ver) = match local {
            Some(Ok(l)) => match &l.record {
                Some(r) => (Target::Master(r.master), Some(r.ver)),
                None => (Target::Arbiter(pl.arbiter()), None),
            },
            // The replicas did not answer: a cached hint, else the arbiter (which redirects).
            Some(Err(())) => match self.tl_state().hints.lock().get(key) {
                Some((m, v)) => (Target::Master(*m), Some(*v)),
                None => (Target::Arbiter(pl.arbiter()), None),
            },
            None => self.master_target(key, pl).await?,
        };
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut to = target.replica();
        // A stale master in another DC that redirects to one in ours still cost a WAN trip.
        let mut crossed = false;
        for attempt in 0..2 {
            crossed |= to.dc != self.dc();
            let r = if to.node == self.id() {
                self.tl_serve_read(key, true, await_ver).await
            } else {
                let msg = Msg::Timeline(TimelineMsg::Read {
                    key: key.to_vec(),
                    latest: true,
                    await_ver,
                });
                let ask = Ask {
                    key,
                    pl,
                    target,
                    to,
                    write: false,
                };
                match self.tl_ask(&ask, msg, timeout).await {
                    Ok(Msg::Timeline(TimelineMsg::ReadReply(r))) => r,
                    Ok(other) => Err(self.unexpected(&ask, &other)),
                    Err(e) => Err(e),
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
                        remote: crossed,
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
        let local = self.tl_read_any(key, pl, None).await.ok();
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
        let known = Some(local.as_ref().ok_or(()));
        match self.tl_read_latest(key, pl, known).await {
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
            && let Some((m, v)) = self.tl_state().hints.lock().get(key)
        {
            return Ok((Target::Master(*m), Some(*v)));
        }
        let near = self.tl_read_any(key, pl, None).await?;
        Ok(match near.record {
            Some(r) => (Target::Master(r.master), Some(r.ver)),
            None => (Target::Arbiter(pl.arbiter()), None),
        })
    }

    fn remember_master(&self, key: &[u8], record: &Record) {
        let mut h = self.tl_state().hints.lock();
        if h.len() >= self.kernel().cfg.tl_hint_cache && !h.contains_key(key) {
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
            self.tl_state().hints.lock().remove(key);
        }
    }

    /// Sends `msg` to `ask.to` and returns the reply. A target the detector marks down fails
    /// at once, unsent. A shed request is `overload`; a
    /// transport failure is `master_unavailable` (`insert_arbiter_unavailable` when asking the
    /// arbiter), and for a write "may have applied": once the request left this node, a
    /// timeout or a peer that left after receiving it says nothing about the outcome.
    async fn tl_ask(&self, ask: &Ask<'_>, msg: Msg, timeout: Duration) -> Result<Msg> {
        if !self.is_up(ask.to.node) {
            // Fail fast; the request never left, so nothing can have applied.
            return Err(self.unavailable(
                ask.key,
                ask.to,
                ask.pl,
                ask.target,
                "the failure detector marks it down",
                false,
            ));
        }
        match self
            .kernel()
            .transport
            .request(ask.to.node, msg, timeout)
            .await
        {
            Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
            Ok(m) => Ok(m),
            Err(e) => Err(self.unavailable(
                ask.key,
                ask.to,
                ask.pl,
                ask.target,
                &e.to_string(),
                ask.write,
            )),
        }
    }

    /// The error for a reply of the wrong kind to a [`Node::tl_ask`].
    fn unexpected(&self, ask: &Ask<'_>, reply: &Msg) -> ReplicationError {
        self.unavailable(
            ask.key,
            ask.to,
            ask.pl,
            ask.target,
            &format!("unexpected reply {reply:?}"),
            ask.write,
        )
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
    /// the input errors of [`Node::tl_get`].
    pub async fn tl_put(
        &self,
        key: &[u8],
        content: Content,
        expect: Expect,
    ) -> Result<TlWriteResult> {
        let pl = self.tl_check(key)?;
        if let Some(v) = content.value()
            && v.len() > self.kernel().cfg.object_max
        {
            return Err(ReplicationError::ObjectTooLarge {
                len: v.len(),
                max: self.kernel().cfg.object_max,
            });
        }
        let (target, hint_ver) = self.master_target(key, &pl).await?;
        let op = WriteMsg {
            id: WriteId {
                node: self.id(),
                incarnation: self.kernel().cfg.incarnation,
                seq: self.tl_state().next_write.fetch_add(1, Ordering::Relaxed),
            },
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
        let c = &self.tl_state().counters;
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
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let msg = Msg::Timeline(TimelineMsg::Write {
            id: op.id,
            key: key.to_vec(),
            content: op.content.clone(),
            expect: op.expect,
            origin_dc: op.origin_dc,
            hops,
            await_ver,
        });
        let ask = Ask {
            key,
            pl,
            target,
            to,
            write: true,
        };
        match self.tl_ask(&ask, msg, timeout).await {
            Ok(Msg::Timeline(TimelineMsg::WriteReply(r))) => r,
            Ok(other) => Err(self.unexpected(&ask, &other)),
            Err(e) => Err(e),
        }
    }

    // ----- master side -----

    /// The master's (or insert arbiter's) write path (§3, §5).
    pub(crate) async fn tl_master_write(
        &self,
        key: &[u8],
        op: WriteMsg,
        hops: u8,
        await_ver: Option<Version>,
    ) -> Result<(Record, ReplicaRef)> {
        let deadline = Instant::now() + self.kernel().cfg.tl_migrate_wait;
        loop {
            let pl = self.tl_placement(key)?;
            self.tl_confirm(key, &pl).await?;
            let applied = self.tl_state().applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            let me = self.me();
            let now_us = self.kernel().clock.now().micros();
            let wop = WriteOp {
                content: op.content.clone(),
                origin_dc: op.origin_dc,
                expect: op.expect,
            };
            let decision = {
                let up = |n: NodeId| self.is_up(n);
                let mut decision = None;
                let fresh = !self.tl_state().issued_here.lock().contains(key);
                let stored = self.tl_state().store.write_with(key, |cur| {
                    // Checked and recorded under the key's lock: a duplicate of this request
                    // waits for the lock, then finds the result.
                    if let Some(done) = self.tl_state().recent_writes.lock().results.get(&op.id) {
                        return Err(Decision::Duplicate(done.clone()));
                    }
                    let d = self.decide(cur, wop, &pl, me, now_us, &up, fresh);
                    match d {
                        Decision::Issued(r, kind, prev) => {
                            decision = Some((kind, prev));
                            self.tl_state()
                                .recent_writes
                                .lock()
                                .insert(op.id, (r.clone(), me));
                            Ok(r)
                        }
                        other => Err(other),
                    }
                });
                let stored = match stored {
                    Ok(s) => s,
                    Err(e) => {
                        self.tl_state().recent_writes.lock().results.remove(&op.id);
                        return Err(e);
                    }
                };
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
                        self.tl_state()
                            .counters
                            .migrations
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.tl_state().applied.notify_waiters();
                    let key = Bytes::copy_from_slice(key);
                    self.tl_enqueue(&key, &record, &pl);
                    // Extra copies of a hot key go before the write is acknowledged.
                    self.invalidate_if_hot(&key).await;
                    if pl.props.timeline_w > 1 {
                        self.tl_await_acks(&key, &record, &pl).await?;
                    }
                    return Ok((record, me));
                }
                Decision::Refused(e) => return Err(e),
                Decision::Duplicate(done) => return Ok(done),
                Decision::Elsewhere(hint, ver) => {
                    let behind = is_behind(await_ver, ver);
                    let now = Instant::now();
                    if behind && now < deadline {
                        // The sender knows a newer record (one naming this node master, as
                        // far as it knows): wait for it rather than forward on an old copy.
                        let _ = tokio::time::timeout(deadline - now, applied).await;
                        continue;
                    }
                    if hops == 0 {
                        self.tl_state()
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

    /// The decision of the write path on the current record (under the key's lock). `fresh`:
    /// this node has not issued nor been handed the key's record during this run.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        cur: Option<&Record>,
        op: WriteOp,
        pl: &Placement,
        me: ReplicaRef,
        now_us: u64,
        up: &impl Fn(NodeId) -> bool,
        fresh: bool,
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
                // This node's first write over a record it did not issue during this run opens
                // a new generation: an earlier run of this node may have issued (and a crash
                // under a lossy fsync policy lost) versions after the one it holds, and a
                // version must never be issued twice. A record it was handed by a migration is
                // no exception: a retransmission can hand it over again after a restart.
                if fresh
                    && let Some(c) = cur
                    && r.ver.generation == c.ver.generation
                    && r.ver.mepoch == c.ver.mepoch
                {
                    r.ver = Version::new(
                        now_us.max(c.ver.generation.saturating_add(1)),
                        c.ver.mepoch,
                        1,
                    );
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
    pub(crate) async fn tl_serve_read(
        &self,
        key: &[u8],
        latest: bool,
        await_ver: Option<Version>,
    ) -> Result<Option<Record>> {
        if !latest {
            return self.tl_state().store.get(key);
        }
        let deadline = Instant::now() + self.kernel().cfg.tl_migrate_wait;
        loop {
            let pl = self.tl_placement(key)?;
            self.tl_confirm(key, &pl).await?;
            let applied = self.tl_state().applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            let cur = self.tl_state().store.get(key)?;
            let (hint, have) = match &cur {
                Some(r) if r.master.node == self.id() => return Ok(cur),
                None if pl.arbiter().node == self.id() => return Ok(None),
                Some(r) => (r.master, Some(r.ver)),
                None => (pl.arbiter(), None),
            };
            let behind = is_behind(await_ver, have);
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

    /// Notes that this node issued the latest record of a key it masters.
    fn mark_confirmed(&self, key: &[u8], record: &Record) {
        if record.master.node != self.id() {
            return;
        }
        remember(&self.tl_state().issued_here, key);
    }

    /// Whether this node holds every record its peers held, for the partition of `pl`, as
    /// of a full catch-up pass with each other primary since it started.
    fn partition_synced(&self, pl: &Placement) -> bool {
        let epoch = self.layout().epoch();
        let s = self.tl_state().synced_with.lock();
        s.0 == epoch
            && pl
                .replicas
                .iter()
                .all(|r| r.node == self.id() || s.1.contains(&r.node))
    }

    /// Before this node acts as master (or insert arbiter) of a key whose latest record it may
    /// not hold, it asks the other primaries for their copies and applies any newer one. That
    /// is the case for a record naming it master that it read from disk after a start (a crash
    /// may have taken the tail its peers hold), and for an absent record on a node that was
    /// wiped, or that gained the partition in a layout change, before it completed a catch-up
    /// pass with every other primary. All primaries are asked, whatever the detector says
    /// (right after a start it has heard nobody); one that does not answer within
    /// `tl_confirm_timeout` is skipped, which is the residual risk: a record held only by a
    /// replica unreachable right now.
    async fn tl_confirm(&self, key: &[u8], pl: &Placement) -> Result<()> {
        let me = self.id();
        if self.tl_state().issued_here.lock().contains(key)
            || self.tl_state().peer_checked.lock().contains(key)
        {
            return Ok(());
        }
        let local = self.tl_state().store.get(key)?;
        if local.as_ref().is_some_and(|r| r.master.node != me) || self.partition_synced(pl) {
            return Ok(());
        }
        let timeout = self.kernel().cfg.tl_confirm_timeout;
        let mut calls = futures_util::stream::FuturesUnordered::new();
        for peer in pl.replicas.iter().filter(|r| r.node != me) {
            let t = self.kernel().transport.clone();
            let msg = Msg::Timeline(TimelineMsg::Read {
                key: key.to_vec(),
                latest: false,
                await_ver: None,
            });
            let node = peer.node;
            calls.push(async move { t.request(node, msg, timeout).await });
        }
        let mut copies = Vec::new();
        use futures_util::StreamExt;
        while let Some(r) = calls.next().await {
            if let Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(Some(rec))))) = r {
                copies.push((key.to_vec(), rec));
            }
        }
        if !copies.is_empty() {
            self.tl_apply(copies)?;
        }
        remember(&self.tl_state().peer_checked, key);
        Ok(())
    }

    /// Serves a `TlForce`: takes the mastership of `key` in the next master epoch.
    pub(crate) fn tl_serve_force(&self, key: &[u8]) -> Result<(Record, ReplicaRef)> {
        let pl = self.tl_placement(key)?;
        let me = self.me();
        let r = self.tl_state().store.write_with(key, |cur| match cur {
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
        self.tl_state().applied.notify_waiters();
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
                self.tl_state().store.get(key).ok().flatten()
            } else {
                let msg = Msg::Timeline(TimelineMsg::Read {
                    key: key.to_vec(),
                    latest: false,
                    await_ver: None,
                });
                match self.kernel().transport.request(r.node, msg, timeout).await {
                    Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(rec)))) => rec,
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
            let msg = Msg::Timeline(TimelineMsg::Force { key: key.to_vec() });
            match self.kernel().transport.request(to.node, msg, timeout).await {
                Ok(Msg::Timeline(TimelineMsg::WriteReply(r))) => r?,
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
            let mut out = self.tl_state().outbound.lock();
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
        self.tl_state().wake.notify_one();
    }

    /// Waits for `timeline_w − 1` peers to acknowledge `record` (sent directly, besides the
    /// queue that keeps retrying).
    async fn tl_await_acks(&self, key: &Bytes, record: &Record, pl: &Placement) -> Result<()> {
        let need = pl.props.timeline_w as usize - 1;
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut calls = futures_util::stream::FuturesUnordered::new();
        for peer in pl.replicas.iter().filter(|r| r.node != self.id()) {
            let t = self.kernel().transport.clone();
            let msg = Msg::Timeline(TimelineMsg::Replicate {
                records: vec![(key.to_vec(), record.clone())],
            });
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
            if matches!(r, Ok(Msg::Timeline(TimelineMsg::Ack))) {
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
    pub(crate) fn tl_apply(&self, records: Vec<(Vec<u8>, Record)>) -> Result<usize> {
        let mut stored = 0;
        for (key, rec) in records {
            let m = self.tl_state().store.apply(&key, &rec)?;
            let c = &self.tl_state().counters;
            match m {
                Merge::Apply => {
                    stored += 1;
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
            self.tl_state().applied.notify_waiters();
        }
        Ok(stored)
    }

    /// The propagation task: sends each peer's queued records, one batch in flight per peer.
    pub(crate) async fn tl_streams(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.kernel().cfg.tl_retry);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.tl_state().wake.notified() => {}
                _ = tick.tick() => {}
            }
            self.tl_pump();
        }
    }

    fn tl_pump(&self) {
        let now = Instant::now();
        let batch_max = self.kernel().cfg.tl_batch.max(1);
        let mut starts = Vec::new();
        {
            let mut out = self.tl_state().outbound.lock();
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
        let msg = Msg::Timeline(TimelineMsg::Replicate {
            records: batch.iter().map(|(k, r)| (k.to_vec(), r.clone())).collect(),
        });
        let r = self
            .kernel()
            .transport
            .request(peer, msg, self.kernel().cfg.handoff_timeout)
            .await;
        let mut out = self.tl_state().outbound.lock();
        out.inflight.remove(&peer);
        if matches!(r, Ok(Msg::Timeline(TimelineMsg::Ack))) {
            out.backoff.remove(&peer);
            if let Some(q) = out.pending.get_mut(&peer) {
                for (k, sent) in &batch {
                    if q.get(k).is_some_and(|queued| queued.ver == sent.ver) {
                        q.remove(k);
                    }
                }
            }
            drop(out);
            self.tl_state().wake.notify_one();
        } else {
            let cfg = &self.kernel().cfg;
            let delay = match out.backoff.get(&peer) {
                Some((_, d)) => (*d * 2).min(cfg.tl_retry_max),
                None => cfg.tl_retry,
            };
            out.backoff.insert(peer, (Instant::now() + delay, delay));
        }
    }

    // ----- catch-up -----

    /// The catch-up task: one [`Node::tl_sync_round`] every `tl_sync_interval`.
    pub(crate) async fn tl_catch_up(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.tl_sync_interval;
        if every.is_zero() {
            return;
        }
        // Until a full pass with every peer has completed (after a start, a layout change, or
        // while a peer is away) rounds follow each other at the retry pace: until then this
        // node confirms with its peers before acting as master, which costs a round trip.
        let quick = self.kernel().cfg.tl_retry;
        let mut next = Instant::now() + self.start_offset(quick);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(next) => {}
            }
            if let Err(e) = self.tl_sync_round().await {
                tracing::debug!(node = %self.id(), error = %e, "timeline catch-up round failed");
            }
            next = Instant::now()
                + if self.tl_synced_with_all() {
                    every
                } else {
                    quick
                };
        }
    }

    /// Whether a full catch-up pass with every other member completed under the current
    /// layout epoch.
    pub fn tl_synced_with_all(&self) -> bool {
        let layout = self.layout();
        let s = self.tl_state().synced_with.lock();
        s.0 == layout.epoch()
            && layout
                .topology()
                .members()
                .iter()
                .all(|m| m.id == self.id() || s.1.contains(&m.id))
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
        let epoch = self.layout().epoch();
        let (peer, after) = {
            let mut c = self.tl_state().sync_cursor.lock();
            if c.after.is_none() {
                c.pass_ok = true;
            }
            let peer = peers[c.peer % peers.len()];
            if !self.is_up(peer) {
                // Skip a peer that is down without scanning: its pass restarts when it is back.
                c.peer = c.peer.wrapping_add(1);
                c.after = None;
                return Ok(0);
            }
            (peer, c.after.clone())
        };
        let (page, next) =
            self.tl_state()
                .store
                .page(after.as_deref(), None, self.kernel().cfg.tl_sync_page)?;
        // Moves the cursor on, and records a pass that completed without a failure.
        let advance = |ok: bool| {
            let mut c = self.tl_state().sync_cursor.lock();
            c.pass_ok &= ok;
            match &next {
                Some(k) => c.after = Some(k.clone()),
                None => {
                    if c.pass_ok {
                        let mut s = self.tl_state().synced_with.lock();
                        if s.0 != epoch {
                            *s = (epoch, BTreeSet::new());
                        }
                        s.1.insert(peer);
                    }
                    c.peer = c.peer.wrapping_add(1);
                    c.after = None;
                }
            }
        };
        let mut items = Vec::new();
        for (k, r) in &page {
            if self.tl_placement(k).is_ok_and(|pl| pl.holds(peer)) {
                items.push((k.to_vec(), r.ver));
            }
        }
        let msg = Msg::Timeline(TimelineMsg::Sync {
            items,
            after: after.map(|a| a.to_vec()),
            upto: next.as_ref().map(|n| n.to_vec()),
        });
        let timeout = self.kernel().cfg.anti_entropy_timeout;
        let (newer_there, want, complete) =
            match self.kernel().transport.request(peer, msg, timeout).await {
                Ok(Msg::Timeline(TimelineMsg::SyncReply {
                    newer,
                    want,
                    complete,
                })) => (newer, want, complete),
                Ok(other) => {
                    advance(false);
                    return Err(ReplicationError::Storage {
                        reason: format!("unexpected catch-up reply from {peer}: {other:?}"),
                    });
                }
                Err(e) => {
                    advance(false);
                    return Err(ReplicationError::ForwardFailed {
                        node: peer,
                        reason: e.to_string(),
                    });
                }
            };
        for (k, r) in &page {
            if let Err(e) = self.tl_reap(k, r).await {
                tracing::debug!(node = %self.id(), error = %e, "timeline tombstone GC failed");
            }
        }
        let applied = self.tl_apply(newer_there);
        // The pass counts only if this exchange covered the whole range and applied.
        advance(complete && applied.is_ok());
        let mut copied = applied?;
        let mut out = self.tl_state().outbound.lock();
        let q = out.pending.entry(peer).or_default();
        for k in want {
            if let Some(r) = self.tl_state().store.get(&k)? {
                q.insert(Bytes::from(k), r);
                copied += 1;
            }
        }
        drop(out);
        self.tl_state().wake.notify_one();
        self.tl_state()
            .counters
            .caught_up
            .fetch_add(copied as u64, Ordering::Relaxed);
        Ok(copied)
    }

    /// One page of this replica's records after `after`, in key order, and where the next
    /// page starts (the expiry sweep's scan, `crate::expiry`).
    pub(crate) fn tl_records_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<super::RecordPage> {
        self.tl_state().store.page(after, None, limit)
    }

    /// Stores the record of `key` as a tombstone if a truncation mark hides it (the sweep's
    /// rewrite, `crate::expiry`); returns whether it did.
    pub(crate) fn tl_prune(&self, key: &[u8]) -> Result<bool> {
        self.tl_state().store.prune(key)
    }

    /// Tombstone GC (§5), run by the record's master on each page catch-up visits: a
    /// tombstone it issued, stored here at least `tl_tombstone_grace` ago, that every other
    /// primary holds as it is, is forgotten by every primary. Returns whether it was.
    ///
    /// Kept: tombstones in a master epoch above 0 (after a forced re-master a re-insert's
    /// epoch-0 version would lose to a copy that missed the reap), and every tombstone while
    /// a layout change is under way or a primary does not answer.
    async fn tl_reap(&self, key: &[u8], r: &Record) -> Result<bool> {
        let me = self.id();
        let grace = self.kernel().cfg.tl_tombstone_grace;
        if !r.is_tombstone() || r.master.node != me || r.ver.mepoch != 0 || grace.is_zero() {
            return Ok(false);
        }
        let store = &self.tl_state().store;
        let now = self.kernel().clock.now();
        let old_enough = store
            .stored_at(key)?
            .is_some_and(|at| Duration::from_micros(now.0.saturating_sub(at.0)) >= grace);
        if !old_enough || self.kernel().view.read().meta.previous.is_some() {
            return Ok(false);
        }
        let pl = self.tl_placement(key)?;
        let others: Vec<NodeId> = pl
            .replicas
            .iter()
            .map(|rr| rr.node)
            .filter(|&n| n != me)
            .collect();
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let asks = others.iter().map(|&n| {
            let msg = Msg::Timeline(TimelineMsg::Read {
                key: key.to_vec(),
                latest: false,
                await_ver: None,
            });
            self.kernel().transport.request(n, msg, timeout)
        });
        let everywhere = futures_util::future::join_all(asks).await.into_iter().all(|a| {
            matches!(a, Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(Some(theirs))))) if &theirs == r)
        });
        if !everywhere {
            return Ok(false);
        }
        for &n in &others {
            let msg = Msg::Timeline(TimelineMsg::Reap {
                key: key.to_vec(),
                ver: r.ver,
            });
            let _ = self.kernel().transport.send(n, msg);
        }
        self.tl_reap_local(key, r.ver);
        Ok(true)
    }

    /// Forgets `key` here if its record is still the tombstone of version `ver`.
    fn tl_reap_local(&self, key: &[u8], ver: Version) {
        self.count_reap(self.tl_state().store.reap_if_unchanged(key, ver));
    }

    /// Serves a `TlSync` from `from`.
    pub(crate) fn tl_serve_sync(
        &self,
        from: NodeId,
        items: Vec<(Vec<u8>, Version)>,
        after: Option<Vec<u8>>,
        upto: Option<Vec<u8>>,
    ) -> Result<Msg> {
        let theirs: BTreeMap<Vec<u8>, Version> = items.into_iter().collect();
        let mut newer_here = Vec::new();
        let mut complete = true;
        let mut cursor = after.map(Bytes::from);
        loop {
            let (page, next) = self.tl_state().store.page(
                cursor.as_deref(),
                upto.as_deref(),
                self.kernel().cfg.tl_sync_page,
            )?;
            for (k, r) in page {
                if !self.tl_placement(&k).is_ok_and(|pl| pl.holds(from)) {
                    continue;
                }
                match theirs.get(k.as_ref()) {
                    Some(v) if !newer(&r.ver, v) => {}
                    _ => newer_here.push((k.to_vec(), r)),
                }
            }
            match next {
                Some(n) if newer_here.len() < self.kernel().cfg.tl_sync_page * 8 => {
                    cursor = Some(n)
                }
                Some(_) => {
                    complete = false;
                    break;
                }
                None => break,
            }
        }
        // Judged by this node's own copy, whatever its view of placement: a key the sender
        // holds at this node's version is never asked for again.
        let mut want = Vec::new();
        for (k, v) in &theirs {
            if self
                .tl_state()
                .store
                .get(k)?
                .is_none_or(|mine| newer(v, &mine.ver))
            {
                want.push(k.clone());
            }
        }
        Ok(Msg::Timeline(TimelineMsg::SyncReply {
            newer: newer_here,
            want,
            complete,
        }))
    }
}

/// A client write as the master path receives it.
#[derive(Debug, Clone)]
pub(crate) struct WriteMsg {
    pub(crate) id: WriteId,
    pub(crate) content: Content,
    pub(crate) expect: Expect,
    pub(crate) origin_dc: DcId,
}
