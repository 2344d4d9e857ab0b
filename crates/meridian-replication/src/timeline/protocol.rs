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
//!   primary of the key. One sender per peer sends batches, oldest queued key first, up to eight in flight,
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
//!
//! [`master_write`]: crate::timeline::master_write

use super::messages::TimelineMsg;
pub use super::messages::WriteId;
use crate::bucket::BucketType;
use crate::error::{ReplicationError, Result};
use crate::kernel::{Incoming, Node, Protocol};
use crate::kernel::{Msg, RemoteError};
use crate::object_store::is_reserved_key;
use crate::timeline::{Content, Expect, Record, ReplicaRef, TimelineProps, TlStore, Version};
use bytes::Bytes;
use meridian_cluster::bucket_and_key;
use meridian_core::{DcId, NodeId, PartitionId};
use parking_lot::{Mutex, RwLock};
use queue::KeyQueue;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

pub use group::{GroupOutcome, MAX_GROUP_ITEMS};

mod catch_up;
mod failover;
mod group;
mod master;
mod propagate;
mod queue;
mod read;
mod write;

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

/// Sets and maps keyed by client keys, looked up on every write: hashed (a B-tree compared
/// long shared key prefixes on each step, a fifth of a timeline SET's CPU), with a per-process
/// seed so hostile keys cannot aim at one bucket. None of them is iterated (only probed,
/// inserted, removed and cleared), so their per-process order cannot reach the simulator's
/// replay: hence the crate's hash-map lint is allowed here.
#[allow(clippy::disallowed_types)]
type KeySet = std::collections::HashSet<Bytes, foldhash::quality::RandomState>;
#[allow(clippy::disallowed_types)]
type KeyMap<V> = std::collections::HashMap<Bytes, V, foldhash::quality::RandomState>;

/// Per-peer propagation state.
#[derive(Debug, Default)]
struct Outbound {
    /// The newest unacknowledged record of each key, per peer, oldest first: batches are
    /// taken from the front, so the order (and a simulation's replay) does not depend on the
    /// hash seed.
    pending: BTreeMap<NodeId, KeyQueue>,
    /// Batches in flight per peer.
    inflight: BTreeMap<NodeId, usize>,
    /// Peers backing off after a failed batch: when to retry, and the current delay.
    backoff: BTreeMap<NodeId, (Instant, Duration)>,
}

/// The timeline state of a node.
pub(crate) struct Timeline {
    store: TlStore,
    /// Master hints of keys this node is not a replica of, with the version of the record
    /// that named that master (the master waits for it if it has not applied it yet).
    hints: Mutex<KeyMap<(ReplicaRef, Version)>>,
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
    issued_here: Mutex<KeySet>,
    /// Keys already confirmed with the peers this run.
    peer_checked: Mutex<KeySet>,
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
            hints: Mutex::new(KeyMap::default()),
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
            issued_here: Mutex::new(KeySet::default()),
            peer_checked: Mutex::new(KeySet::default()),
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
    /// The insert arbiter: the first primary, or with `failover` the first one up.
    arbiter: ReplicaRef,
}

impl Placement {
    fn arbiter(&self) -> ReplicaRef {
        self.arbiter
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
fn remember(set: &Mutex<KeySet>, key: &[u8]) {
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

impl Node {
    /// Timeline's state (registered with the kernel when the node is built).
    pub(crate) fn tl_state(&self) -> &Timeline {
        self.protocol::<Timeline>()
    }
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
            TimelineMsg::TakeOver { key, from } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.tl_serve_take_over(&key, from).await;
                    req.answer(TimelineMsg::WriteReply(r));
                });
            }
            TimelineMsg::Group {
                items,
                origin_dc,
                move_to,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                if items.len() > MAX_GROUP_ITEMS {
                    let why = format!(
                        "TimelineMsg::Group.items has {} items: at most {MAX_GROUP_ITEMS}",
                        items.len()
                    );
                    return req.refuse_oversized(node, why);
                }
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.tl_master_group(items, origin_dc, move_to).await;
                    req.answer(TimelineMsg::GroupReply(r));
                });
            }
            other @ (TimelineMsg::WriteReply(_)
            | TimelineMsg::GroupReply(_)
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
            .map(KeyQueue::len)
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
        let replicas: Vec<ReplicaRef> = list[..(n as usize).min(list.len())]
            .iter()
            .map(|&node| ReplicaRef {
                node,
                dc: topo.dc_of(node).expect("layouts only list members"),
            })
            .collect();
        let arbiter = if props.failover {
            replicas
                .iter()
                .find(|r| self.is_up(r.node))
                .unwrap_or(&replicas[0])
        } else {
            &replicas[0]
        };
        Ok(Placement {
            partition,
            arbiter: *arbiter,
            replicas,
            props,
        })
    }

    /// Whether every key is in one partition of the ring (one hash slot's range).
    pub fn same_partition<K: AsRef<[u8]>>(&self, keys: &[K]) -> bool {
        let ring = self.layout().ring();
        let mut parts = keys.iter().map(|k| ring.partition_of(k.as_ref()));
        let first = parts.next();
        parts.all(|p| Some(p) == first)
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
}

/// A client write as the master path receives it.
#[derive(Debug, Clone)]
pub(crate) struct WriteMsg {
    pub(crate) id: WriteId,
    pub(crate) content: Content,
    pub(crate) expect: Expect,
    pub(crate) origin_dc: DcId,
}
