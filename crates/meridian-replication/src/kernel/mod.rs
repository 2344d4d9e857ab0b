//! [`EventualNode`]: one node of a cluster serving eventual-consistency buckets — the GET
//! and PUT coordinators of spec §§5–6, the replica side of the protocol, read repair (§8),
//! sloppy quorums with hinted handoff (§9), and heartbeats feeding a phi-accrual failure
//! detector.
//!
//! ## How a request runs
//!
//! - **Preference list.** `preflist(layout, p, N, my_dc, up)` where `up` is the failure
//!   detector's verdict at the node clock's `now()`; a node always considers itself up.
//! - **GET** (§5): pre-checks, then `Get` to every apl entry (the local replica is read
//!   directly); each reply feeds a [`GetTally`]; the client gets its answer as soon as the
//!   tally is enough. Collection then continues until every apl member answered or the
//!   request deadline passed, and **read repair** sends the merge of every object received
//!   to each replica that answered notfound or an object different from (hence dominated
//!   by) the merge. A timeout is reported as `timeout` with the apl members that did not
//!   answer.
//! - **PUT / DELETE** (§6): pre-checks, then the write is coordinated by a **primary** of
//!   the key's partition: this node if it is a primary in the apl, else the request is
//!   forwarded (`Forward`) to the first primary of the apl (local DC first, so normally a
//!   LAN hop) which runs it and returns its result. The coordinator applies
//!   `coordinator_put` locally (counting as its own w, dw and pw), sends `Replicate` to every
//!   other apl member and answers per the [`PutTally`] rules. A write to a fallback carries
//!   `hint_for`; the fallback stores it in its hint space (not as its own data), and reads
//!   sent to a fallback read that hint space.
//! - **Hinted handoff** (§9): every `handoff_interval` each hint whose primary the detector
//!   says is up is sent to it as a plain `Replicate`; after the ack the hint is deleted
//!   (only if unchanged since it was sent).
//! - **LWW buckets** (`allow_mult = false`): every merge and coordinator write is followed by
//!   `lww`; the clock is kept.
//! - **Active anti-entropy** (§10, module [`crate::anti_entropy`]): the node keeps a Merkle
//!   tree per held partition over its own objects (not hints), built from the engine in
//!   [`EventualNode::new`] and updated on every object write. Every
//!   `anti_entropy_interval` (0 disables it) it compares one `(partition, peer)` pair,
//!   round-robin from a seeded start, with a peer the detector says is up, and syncs at most
//!   `anti_entropy_max_keys` differing keys both ways through `merge_apply` (a repair path:
//!   no client limits), so both replicas end with the same object.
//!
//! ## Guarantees
//!
//! - Never answers ok with fewer acks / oks than the resolved parameters require (the
//!   tallies decide); an error never rolls back replicas that applied a write ("maybe
//!   written").
//! - A request's answer arrives by its deadline (`timeout_ms`, tokio time); replica
//!   requests still in flight at that point are abandoned.
//! - Time comes only from the node's [`meridian_core::Clock`] and tokio timers; randomness
//!   (the start offsets of the periodic tasks) from a ChaCha8 RNG seeded by
//!   [`NodeConfig::seed`]; no map iteration order affects behaviour.
//!
//! ## Choices and deviations from the spec
//!
//! - **Only primaries coordinate writes.** A dot `(partition, node, incarnation, n)` must
//!   never be issued twice. A primary's stored object carries its highest counter; a
//!   fallback's hint is deleted after handoff, so a fallback coordinating later writes
//!   could reissue a dot and silently lose a write. When the apl has no primary at all
//!   (every primary of the partition down) a write fails with `no_coordinator`, where Riak
//!   would accept it. A forwarded write that lands on a node which is not a primary in its
//!   own apl (layouts or detector views differ) also fails with `no_coordinator` rather
//!   than being forwarded again.
//! - `read_fanout = quorum` sends the GET to the first R apl entries (local first) and asks
//!   the next entry when a reply fails or does not count as ok, and every `hedge_ms` while
//!   the tally is undecided; read repair then covers only the replicas that were asked.
//! - `dw`: an ack is durable once the engine's write returned, which is what the engine's
//!   fsync policy promises (`MemEngine`: dw = w).
//! - Hints are keyed by `(for_node, key)` rather than `(partition, for_node)`; handoff is
//!   one transfer at a time per node, in `(for_node, key)` order, at most
//!   `handoff_batch` hints per round.
//! - Tombstones are never reaped (`delete_mode = keep`); the cross-DC read-repair token
//!   bucket is not implemented. Anti-entropy departs from the spec as its module documents
//!   (in-memory trees rebuilt at node creation, smaller default tree, no WAN byte cap).
//! - **Membership** (submodule `handoff`): the node follows a versioned
//!   [`ClusterMeta`] (layout, previous layout during a handoff, members, buckets); changes go
//!   through the claimant ([`EventualNode::change`]); after a layout change the node hands
//!   off what it no longer owns (see that module for the guarantees). Ownership handoff
//!   sends whole objects in batched messages rather than the chunked stream of
//!   `large-objects.md` (not built yet).
//! - A replica refuses requests with `overload` while more than `overload_backlog`
//!   messages wait in its inbox.

mod handoff;
mod timeline;

pub use timeline::{
    ReadMode, TimelineStats, TlIssueKind, TlObserver, TlReadResult, TlTrace, TlWriteResult, WriteId,
};

use crate::anti_entropy::{AaeError, AaeTrees, KEYS_PER_SYNC, SEGMENTS_PER_REQUEST};
use crate::bucket::{BucketProps, Buckets};
use crate::error::{Missing, ReplicationError, Result};
use crate::membership::{ClusterMeta, MetaChange};
use crate::messages::{AaeItem, Msg, RemoteError};
use crate::object_store::{ObjectStore, is_reserved_key};
use bytes::Bytes;
use handoff::Ownership;
use meridian_cluster::dvv::{self, Clock as CausalClock, Content, Object, ReplicaId};
use meridian_cluster::{
    ApEntry, AplSummary, DetectorConfig, Exchange, FailKind, FailureDetector, GetReply, GetTally,
    HashRequest, Layout, Preflist, Props, PutTally, QuorumError, ReadFanout, Role, SegmentId,
    bucket_and_key, diff_keys, precheck_get, precheck_put, preflist,
};
use meridian_core::{Clock, DcId, NodeId, PartitionId};
use meridian_net::{Inbox, Incoming, NetError, Transport};
use parking_lot::{MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior, sleep_until};
use tokio_util::sync::CancellationToken;

/// A node's settings (everything that is not a bucket property).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// This node's id (must be a member of the layout's topology).
    pub id: NodeId,
    /// Bumped whenever this node's storage is wiped, so its dots are never reissued.
    pub incarnation: u32,
    /// How often a heartbeat goes to every member (default 1 s).
    pub heartbeat_interval: Duration,
    /// Failure detector settings.
    pub detector: DetectorConfig,
    /// How often hints are offered to their primaries (default 10 s, spec §9).
    pub handoff_interval: Duration,
    /// Timeout of one hand-off transfer (default 5 s).
    pub handoff_timeout: Duration,
    /// Most hints read per hand-off round (default 10 000).
    pub handoff_batch: usize,
    /// Client writes leaving more siblings are refused (default 100).
    pub siblings_max: usize,
    /// A warning is logged when a write leaves at least this many siblings (default 25).
    pub siblings_warn: usize,
    /// Largest inline value, bytes (default 50 MiB).
    pub object_max: usize,
    /// Inbox backlog above which requests are refused with `overload` (default 512).
    pub overload_backlog: usize,
    /// Part of a forwarded write's timeout kept for the reply's trip back (default 50 ms,
    /// at most a tenth of the timeout).
    pub forward_reserve: Duration,
    /// Seed of the node's RNG.
    pub seed: u64,
    /// How often an anti-entropy exchange runs (§10; default 30 s). Zero disables
    /// anti-entropy: no trees are built or kept, and exchange requests are refused.
    pub anti_entropy_interval: Duration,
    /// Timeout of each anti-entropy request (default 5 s).
    pub anti_entropy_timeout: Duration,
    /// Most differing keys repaired per exchange (default 1000); the rest waits for later
    /// rounds.
    pub anti_entropy_max_keys: usize,
    /// Shape of the anti-entropy trees (default 64 × 64 segments); every node of a cluster
    /// must use the same.
    pub anti_entropy_tree: meridian_cluster::MerkleConfig,
    /// Keys read per engine scan page while building the trees (default 1024).
    pub anti_entropy_scan_page: usize,
    /// Timeline: first retransmission delay of an unacknowledged batch (default 200 ms).
    pub tl_retry: Duration,
    /// Timeline: the longest retransmission delay (default 5 s).
    pub tl_retry_max: Duration,
    /// Timeline: most records per propagation batch (default 256).
    pub tl_batch: usize,
    /// Timeline: how often a catch-up exchange runs (default 10 s; zero disables it).
    pub tl_sync_interval: Duration,
    /// Timeline: records compared per catch-up page (default 512).
    pub tl_sync_page: usize,
    /// Timeline: how long a new master waits for the record that hands it the mastership
    /// (default 2 s).
    pub tl_migrate_wait: Duration,
    /// Timeline: master hints cached for keys this node does not replicate (default 100 000).
    pub tl_hint_cache: usize,
    /// Timeline: how long a master that may not hold a key's latest record waits for the
    /// other primaries' copies before it acts (default 1 s; see `tl_confirm`).
    pub tl_confirm_timeout: Duration,
}

impl NodeConfig {
    /// Defaults for node `id`.
    pub fn new(id: NodeId) -> NodeConfig {
        NodeConfig {
            id,
            incarnation: 0,
            heartbeat_interval: Duration::from_secs(1),
            detector: DetectorConfig::default(),
            handoff_interval: Duration::from_secs(10),
            handoff_timeout: Duration::from_secs(5),
            handoff_batch: 10_000,
            siblings_max: 100,
            siblings_warn: 25,
            object_max: 50 << 20,
            overload_backlog: 512,
            forward_reserve: Duration::from_millis(50),
            seed: u64::from(id.0),
            anti_entropy_interval: Duration::from_secs(30),
            anti_entropy_timeout: Duration::from_secs(5),
            anti_entropy_max_keys: 1000,
            anti_entropy_tree: crate::anti_entropy::default_tree(),
            anti_entropy_scan_page: 1024,
            tl_retry: Duration::from_millis(200),
            tl_retry_max: Duration::from_secs(5),
            tl_batch: 256,
            tl_sync_interval: Duration::from_secs(10),
            tl_sync_page: 512,
            tl_migrate_wait: Duration::from_secs(2),
            tl_hint_cache: 100_000,
            tl_confirm_timeout: Duration::from_secs(1),
        }
    }
}

/// Per-request overrides of a GET.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetOptions {
    /// Overrides of the bucket's parameters (`r`, `pr`, `notfound_ok`, `basic_quorum`,
    /// `timeout_ms`, ...); unset fields use the bucket's.
    pub props: Props,
    /// Reply a tombstone's context instead of a bare notfound (Riak's `deletedvclock`).
    pub deleted_context: bool,
}

/// Per-request overrides of a PUT or DELETE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutOptions {
    /// Overrides of the bucket's parameters (`w`, `dw`, `pw`, `node_confirms`,
    /// `dc_confirms`, `timeout_ms`, ...); unset fields use the bucket's.
    pub props: Props,
    /// Return the coordinator's values after the write.
    pub return_body: bool,
}

/// The answer to a GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetResult {
    /// The key has values: one, or several concurrent siblings (in dot order).
    Found {
        /// The live values.
        values: Vec<Bytes>,
        /// The opaque causal context to send back with the next write.
        context: Bytes,
        /// Index in `values` of the sibling with the greatest `(meta.ts_us, dot)`: the one
        /// last-writer-wins would keep (front ends that must show one value show it).
        latest: usize,
    },
    /// No value: never written, or deleted.
    NotFound {
        /// The tombstone's context, when the key was deleted and the request asked for it.
        deleted_context: Option<Bytes>,
    },
}

impl GetResult {
    /// The values (empty for notfound).
    pub fn values(&self) -> &[Bytes] {
        match self {
            GetResult::Found { values, .. } => values,
            GetResult::NotFound { .. } => &[],
        }
    }

    /// The value last-writer-wins would keep (greatest `(meta.ts_us, dot)`), if any.
    pub fn latest(&self) -> Option<&Bytes> {
        match self {
            GetResult::Found { values, latest, .. } => values.get(*latest),
            GetResult::NotFound { .. } => None,
        }
    }

    /// The context to write back with (empty bytes, a blind write, for a plain notfound).
    pub fn context(&self) -> Bytes {
        match self {
            GetResult::Found { context, .. } => context.clone(),
            GetResult::NotFound { deleted_context } => deleted_context.clone().unwrap_or_default(),
        }
    }
}

/// The answer to a successful PUT or DELETE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResult {
    /// The context of the coordinator's object after the write (writing with it supersedes
    /// every value the coordinator held).
    pub context: Vec<u8>,
    /// The coordinator's live values after the write, when `return_body` was set.
    pub values: Option<Vec<Vec<u8>>>,
    /// Whether the write's critical path crossed a DC boundary: it was forwarded to a
    /// coordinator in another DC, or the acknowledgement that completed the write quorum came
    /// from another DC (spec `experiments.md` §3, "local vs remote").
    #[serde(default)]
    pub remote: bool,
}

/// Counters of one node (the spec's metrics, not yet exported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Read-repair messages sent (`read_repairs_total`).
    pub read_repairs: u64,
    /// Hints delivered and deleted (`hinted_handoffs_total`).
    pub hinted_handoffs: u64,
    /// Encoded bytes of delivered hints (`handoff_bytes`).
    pub handoff_bytes: u64,
    /// Writes forwarded to another coordinator (`coord_redirs_total`).
    pub coord_redirs: u64,
    /// Anti-entropy exchanges completed as initiator (`aae_exchanges_total`).
    pub aae_exchanges: u64,
    /// Differing keys synced by anti-entropy exchanges this node initiated
    /// (`aae_keys_repaired_total`).
    pub aae_keys_repaired: u64,
    /// Objects handed off to their new owners after a layout change (and deleted here).
    pub ownership_handoffs: u64,
}

#[derive(Debug, Default)]
struct Counters {
    read_repairs: AtomicU64,
    hinted_handoffs: AtomicU64,
    handoff_bytes: AtomicU64,
    coord_redirs: AtomicU64,
    aae_exchanges: AtomicU64,
    aae_keys_repaired: AtomicU64,
    ownership_handoffs: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    cfg: NodeConfig,
    /// This node's DC (from its member record; fixed for the node's life).
    dc: DcId,
    store: ObjectStore,
    clock: Arc<dyn Clock>,
    transport: Transport<Msg>,
    /// The cluster metadata this node follows, and the bucket registry derived from it.
    view: RwLock<View>,
    /// Ownership-handoff bookkeeping (module `handoff`).
    ownership: Mutex<Ownership>,
    /// Set when the node may hold objects it does not own (a layout change, or a write of a
    /// key it does not own); the handoff task then scans and hands them off.
    drain_needed: AtomicBool,
    /// Wakes the handoff task early (a layout change).
    drain_wake: tokio::sync::Notify,
    /// Called with every adopted metadata document (address books, member tables).
    hooks: MetaHooks,
    detector: Mutex<FailureDetector>,
    rng: Mutex<ChaCha8Rng>,
    counters: Counters,
    /// Index of the next `(partition, peer)` pair of anti-entropy.
    aae_cursor: Mutex<usize>,
    /// Timeline buckets' records, queues and counters (module `timeline`).
    tl: timeline::Timeline,
}

/// What a node believes about the cluster: the metadata document and its bucket registry.
#[derive(Debug)]
struct View {
    meta: ClusterMeta,
    buckets: Buckets,
}

/// A callback run with each adopted metadata document.
type MetaHook = Box<dyn Fn(&ClusterMeta) + Send + Sync>;

#[derive(Default)]
struct MetaHooks(Mutex<Vec<MetaHook>>);

impl std::fmt::Debug for MetaHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetaHooks({})", self.0.lock().len())
    }
}

/// One node of an eventual-consistency cluster. Cheap to clone (clones share the node).
/// See the module docs.
#[derive(Debug, Clone)]
pub struct EventualNode {
    inner: Arc<Inner>,
}

/// A replica's answer to a `Get`, as the coordinator classifies it.
type GetAnswer = std::result::Result<Option<Object>, FailKind>;
/// A replica's answer to a `Replicate`: durable or not, or a failure.
type PutAnswer = std::result::Result<bool, FailKind>;

fn fail_kind(e: &NetError) -> FailKind {
    match e {
        NetError::Timeout { .. } => FailKind::Timeout,
        NetError::Overloaded { .. } => FailKind::Overload,
        _ => FailKind::Error,
    }
}

fn remote_fail(e: &RemoteError) -> FailKind {
    match e {
        RemoteError::Overload => FailKind::Overload,
        _ => FailKind::Error,
    }
}

fn hint_for(e: &ApEntry) -> Option<NodeId> {
    match e.role {
        Role::Primary { .. } => None,
        Role::Fallback { for_node, .. } => Some(for_node),
    }
}

fn missing(apl: &Preflist, answered: &[NodeId]) -> Missing {
    Missing(apl.nodes().filter(|n| !answered.contains(n)).collect())
}

impl EventualNode {
    /// A node storing its objects (and hints) in `engine`, stamping writes with `clock`,
    /// talking over `transport`, and following the cluster metadata `meta` (layout, members,
    /// buckets) until a newer version arrives. Call [`EventualNode::spawn`] to start
    /// serving. A node started to join a cluster gets a version-0 document
    /// ([`ClusterMeta::joining`]) and serves no client request until a member sends it the
    /// cluster's.
    ///
    /// # Panics
    /// If `meta` has no member record for `config.id`, or its buckets do not validate
    /// (documents from [`ClusterMeta::new`] always do).
    pub fn new(
        config: NodeConfig,
        engine: Arc<dyn meridian_storage::Engine>,
        clock: Arc<dyn Clock>,
        transport: Transport<Msg>,
        meta: ClusterMeta,
    ) -> EventualNode {
        let dc = meta
            .member(config.id)
            .unwrap_or_else(|| panic!("{} has no member record", config.id))
            .dc;
        let buckets = meta
            .bucket_registry()
            .expect("the metadata's buckets validate");
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let store = ObjectStore::new(engine, clock.clone());
        let held = handoff::held(&meta.layout, config.id);
        if !config.anti_entropy_interval.is_zero() {
            let ring = meta.layout.ring();
            // Nobody else can write through this node yet, so the scan and the attach
            // cannot miss a write.
            match AaeTrees::build(
                store.engine().as_ref(),
                config.anti_entropy_tree,
                ring,
                held.iter().copied(),
                config.anti_entropy_scan_page,
            ) {
                Ok(t) => {
                    store.attach_trees(Arc::new(t));
                }
                Err(e) => {
                    tracing::error!(node = %config.id, error = %e, "anti-entropy trees not built; anti-entropy disabled");
                }
            }
        }
        let aae_cursor = rng.random_range(0..1usize << 20);
        let tl = timeline::Timeline::new(
            crate::timeline::TlStore::new(store.engine().clone(), clock.clone()),
            rng.random_range(0..1usize << 20),
        );
        EventualNode {
            inner: Arc::new(Inner {
                store,
                detector: Mutex::new(FailureDetector::new(config.detector.clone())),
                cfg: config,
                dc,
                clock,
                transport,
                view: RwLock::new(View { meta, buckets }),
                ownership: Mutex::new(Ownership::default()),
                drain_needed: AtomicBool::new(false),
                drain_wake: tokio::sync::Notify::new(),
                hooks: MetaHooks::default(),
                rng: Mutex::new(rng),
                counters: Counters::default(),
                aae_cursor: Mutex::new(aae_cursor),
                tl,
            }),
        }
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.cfg.id
    }

    /// This node's DC.
    pub fn dc(&self) -> DcId {
        self.inner.dc
    }

    /// The current layout (held read-locked: keep the guard short).
    pub fn layout(&self) -> MappedRwLockReadGuard<'_, Layout> {
        RwLockReadGuard::map(self.inner.view.read(), |v| &v.meta.layout)
    }

    /// The bucket registry (held read-locked: keep the guard short).
    fn registry(&self) -> MappedRwLockReadGuard<'_, Buckets> {
        RwLockReadGuard::map(self.inner.view.read(), |v| &v.buckets)
    }

    /// A copy of the cluster metadata this node follows.
    pub fn meta(&self) -> ClusterMeta {
        self.inner.view.read().meta.clone()
    }

    /// The replica's local objects and hints (for inspection and tools).
    pub fn store(&self) -> &ObjectStore {
        &self.inner.store
    }

    /// Creates or replaces a bucket in the whole cluster (validated by the claimant, which
    /// publishes it to every member; this node has adopted it when the call returns).
    pub async fn set_bucket(&self, name: &str, props: BucketProps) -> Result<()> {
        self.change(MetaChange::SetBucket {
            name: name.to_owned(),
            props: props.into(),
        })
        .await
        .map(drop)
    }

    /// A snapshot of the bucket registry.
    pub fn buckets(&self) -> Buckets {
        self.registry().clone()
    }

    /// Whether this node's failure detector considers `peer` up now (itself always).
    pub fn is_up(&self, peer: NodeId) -> bool {
        peer == self.id()
            || self
                .inner
                .detector
                .lock()
                .is_up(peer, self.inner.clock.now())
    }

    /// The node's counters.
    pub fn stats(&self) -> NodeStats {
        let c = &self.inner.counters;
        NodeStats {
            read_repairs: c.read_repairs.load(Ordering::Relaxed),
            hinted_handoffs: c.hinted_handoffs.load(Ordering::Relaxed),
            handoff_bytes: c.handoff_bytes.load(Ordering::Relaxed),
            coord_redirs: c.coord_redirs.load(Ordering::Relaxed),
            aae_exchanges: c.aae_exchanges.load(Ordering::Relaxed),
            aae_keys_repaired: c.aae_keys_repaired.load(Ordering::Relaxed),
            ownership_handoffs: c.ownership_handoffs.load(Ordering::Relaxed),
        }
    }

    /// Refuses the eventual operations on a bucket of another type.
    fn eventual_only(&self, bucket: &[u8]) -> Result<()> {
        let ty = self.registry().props_for(bucket).bucket_type;
        if ty == crate::bucket::BucketType::Eventual {
            return Ok(());
        }
        Err(ReplicationError::WrongBucketType {
            bucket: String::from_utf8_lossy(bucket).into_owned(),
            actual: format!("{ty:?}").to_lowercase(),
            hint: "use the timeline operations (read modes and versions) on its keys".into(),
        })
    }

    /// Hints waiting for their primaries (`hints_pending`).
    pub fn hints_pending(&self) -> Result<usize> {
        self.inner.store.hints_pending()
    }

    /// The key's partition and active preference list for a bucket of `n` replicas.
    pub fn preflist_for(&self, key: &[u8], n: u32) -> (PartitionId, Preflist) {
        let layout = self.layout();
        let (bucket, k) = bucket_and_key(key);
        let p = layout.ring().partition_of(bucket, k);
        let me = self.id();
        let now = self.inner.clock.now();
        let det = self.inner.detector.lock();
        let apl = preflist(&layout, p, n as usize, self.inner.dc, |node| {
            node == me || det.is_up(node, now)
        });
        (p, apl)
    }

    /// Starts the node's background tasks: serving the inbox, heartbeats, hint delivery,
    /// anti-entropy. They stop when `shutdown` is cancelled; the handle completes then.
    pub fn spawn(&self, inbox: Inbox<Msg>, shutdown: CancellationToken) -> JoinHandle<()> {
        let (a, b, c, d) = (self.clone(), self.clone(), self.clone(), self.clone());
        let (e, f) = (self.clone(), self.clone());
        let s = shutdown;
        let (s1, s2, s3, s4, s5) = (s.clone(), s.clone(), s.clone(), s.clone(), s.clone());
        tokio::spawn(async move {
            tokio::join!(
                a.serve(inbox, s1),
                b.heartbeats(s2),
                c.handoffs(s3),
                d.anti_entropy(s4),
                e.tl_streams(s5),
                f.tl_catch_up(s)
            );
        })
    }

    // ----- replica side -----

    async fn serve(self, mut inbox: Inbox<Msg>, shutdown: CancellationToken) {
        loop {
            let m = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                m = inbox.recv() => m,
            };
            let Some(m) = m else { break };
            let backlog = inbox.len();
            self.handle(m, backlog);
        }
    }

    fn handle(&self, m: Incoming<Msg>, backlog: usize) {
        let Incoming { from, body, reply } = m;
        let overloaded = backlog > self.inner.cfg.overload_backlog;
        let answer = |msg: Msg| {
            if let Some(r) = reply {
                let _ = r.respond(msg);
            }
        };
        match body {
            Msg::Heartbeat { from: hb, version } => {
                self.inner
                    .detector
                    .lock()
                    .heartbeat(hb, self.inner.clock.now());
                self.on_peer_version(hb, version);
            }
            Msg::Meta(meta) => {
                self.adopt(*meta);
            }
            Msg::Change(change) => {
                let node = self.clone();
                tokio::spawn(async move {
                    answer(Msg::ChangeReply(node.claimant_apply(&change).map(Box::new)));
                });
            }
            Msg::Drained { from: peer, epoch } => self.on_drained(peer, epoch),
            Msg::Get { .. }
            | Msg::Replicate { .. }
            | Msg::Forward { .. }
            | Msg::AaeHashes { .. }
            | Msg::AaeKeys { .. }
            | Msg::AaeSync { .. }
            | Msg::Handoff { .. }
            | Msg::TlWrite { .. }
            | Msg::TlRead { .. }
            | Msg::TlReplicate { .. }
            | Msg::TlSync { .. }
                if overloaded =>
            {
                answer(Msg::Error(RemoteError::Overload));
            }
            Msg::Get { key, hint_for } => {
                let r = match hint_for {
                    Some(n) => self.inner.store.get_hint(n, &key),
                    None => self.inner.store.get(&key),
                };
                answer(match r {
                    Ok(o) => Msg::GetReply(o),
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            Msg::Replicate {
                key,
                object,
                hint_for,
                allow_mult,
            } => {
                answer(match self.apply(&key, &object, hint_for, allow_mult) {
                    Ok(()) => Msg::Ack { durable: true },
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            Msg::Repair {
                key,
                object,
                hint_for,
                allow_mult,
            } => {
                if let Err(e) = self.apply(&key, &object, hint_for, allow_mult) {
                    tracing::warn!(node = %self.id(), error = %e, "read repair failed");
                }
            }
            Msg::Forward {
                key,
                value,
                context,
                opts,
            } => {
                let node = self.clone();
                tokio::spawn(async move {
                    let content = match value {
                        Some(v) => Content::Value(Bytes::from(v)),
                        None => Content::Tombstone,
                    };
                    let r = node.write(&key, content, &context, opts, true).await;
                    answer(Msg::ForwardReply(r));
                });
            }
            Msg::AaeHashes { partition, request } => {
                answer(self.aae_answer_hashes(partition, &request));
            }
            Msg::AaeKeys {
                partition,
                segments,
            } => {
                answer(self.aae_answer_keys(partition, &segments));
            }
            Msg::AaeSync { partition, items } => {
                answer(self.aae_answer_sync(partition, items));
            }
            Msg::Handoff { items } => {
                answer(self.accept_handoff(items));
            }
            Msg::TlWrite {
                id,
                key,
                content,
                expect,
                origin_dc,
                hops,
                await_ver,
            } => {
                let node = self.clone();
                tokio::spawn(async move {
                    let op = timeline::WriteMsg {
                        id,
                        content,
                        expect,
                        origin_dc,
                    };
                    let r = node.tl_master_write(&key, op, hops, await_ver).await;
                    answer(Msg::TlWriteReply(r));
                });
            }
            Msg::TlRead {
                key,
                latest,
                await_ver,
            } => {
                if latest {
                    let node = self.clone();
                    tokio::spawn(async move {
                        answer(Msg::TlReadReply(
                            node.tl_serve_read(&key, latest, await_ver).await,
                        ));
                    });
                } else {
                    answer(Msg::TlReadReply(self.tl_local(&key)));
                }
            }
            Msg::TlReplicate { records } => {
                answer(match self.tl_apply(records) {
                    Ok(_) => Msg::Ack { durable: true },
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            Msg::TlSync { items, after, upto } => {
                answer(match self.tl_serve_sync(from, items, after, upto) {
                    Ok(m) => m,
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            Msg::TlForce { key } => {
                answer(Msg::TlWriteReply(self.tl_serve_force(&key)));
            }
            other => {
                tracing::debug!(node = %self.id(), peer = %from, msg = ?other, "unexpected message");
                answer(Msg::Error(RemoteError::BadRequest(
                    "not a request this node serves".into(),
                )));
            }
        }
    }

    fn apply(
        &self,
        key: &[u8],
        object: &Object,
        hint_for: Option<NodeId>,
        allow_mult: bool,
    ) -> Result<()> {
        match hint_for {
            Some(n) => {
                self.inner.store.add_hint(n, key, object, allow_mult)?;
            }
            None => {
                self.inner.store.merge_apply(key, object, allow_mult)?;
                self.note_if_not_owned(key);
            }
        }
        Ok(())
    }

    fn start_offset(&self, interval: Duration) -> Duration {
        let ms = interval.as_millis().max(1) as u64;
        Duration::from_millis(self.inner.rng.lock().random_range(0..ms))
    }

    async fn heartbeats(self, shutdown: CancellationToken) {
        let every = self.inner.cfg.heartbeat_interval;
        let first = Instant::now() + self.start_offset(every);
        let mut tick = tokio::time::interval_at(first, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let (version, members): (u64, Vec<NodeId>) = {
                let v = self.inner.view.read();
                let m = v.meta.members.iter().map(|m| m.id).collect();
                (v.meta.version, m)
            };
            let me = self.id();
            for peer in members.into_iter().filter(|&p| p != me) {
                let _ = self
                    .inner
                    .transport
                    .send(peer, Msg::Heartbeat { from: me, version });
            }
        }
    }

    async fn handoffs(self, shutdown: CancellationToken) {
        let every = self.inner.cfg.handoff_interval;
        // No round at start-up: the first comes after one interval (plus a seeded jitter of
        // up to a quarter interval, so nodes do not hand off in lockstep).
        let first = Instant::now() + every + self.start_offset(every / 4);
        let mut tick = tokio::time::interval_at(first, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                // A layout change: hand off at once rather than after up to an interval.
                _ = self.inner.drain_wake.notified() => {}
            }
            let rounds = async {
                if let Err(e) = self.handoff_round().await {
                    tracing::warn!(node = %self.id(), error = %e, "hinted handoff round failed");
                }
                if let Err(e) = self.ownership_round().await {
                    tracing::warn!(node = %self.id(), error = %e, "ownership handoff round failed");
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                () = rounds => {}
            }
        }
    }

    /// One hinted-handoff round (normally run every `handoff_interval` by the background
    /// task): each stored hint whose primary is up is sent to it, and deleted after the ack.
    /// A primary that fails a transfer gets no more this round. Returns how many hints were
    /// delivered.
    pub async fn handoff_round(&self) -> Result<usize> {
        let hints = self.inner.store.hints(self.inner.cfg.handoff_batch)?;
        let mut delivered = 0;
        let mut failed: Vec<NodeId> = Vec::new();
        for h in hints {
            if !self.layout().topology().contains(h.for_node) {
                // Its primary left the cluster: the hint becomes this node's data, which
                // ownership handoff delivers to the key's current owners.
                self.inner.store.merge_apply(&h.key, &h.object, true)?;
                self.inner
                    .store
                    .remove_hint(h.for_node, &h.key, &h.object)?;
                self.note_if_not_owned(&h.key);
                continue;
            }
            if failed.contains(&h.for_node) || !self.is_up(h.for_node) {
                continue;
            }
            let allow_mult = {
                let (bucket, _) = bucket_and_key(&h.key);
                self.registry()
                    .resolve(bucket, &Props::default())
                    .allow_mult
            };
            let msg = Msg::Replicate {
                key: h.key.to_vec(),
                object: h.object.clone(),
                hint_for: None,
                allow_mult,
            };
            let r = self
                .inner
                .transport
                .request(h.for_node, msg, self.inner.cfg.handoff_timeout)
                .await;
            match r {
                Ok(Msg::Ack { .. }) => {
                    if self
                        .inner
                        .store
                        .remove_hint(h.for_node, &h.key, &h.object)?
                    {
                        let bytes = crate::object_store::encode_object(&h.object).len() as u64;
                        let c = &self.inner.counters;
                        c.hinted_handoffs.fetch_add(1, Ordering::Relaxed);
                        c.handoff_bytes.fetch_add(bytes, Ordering::Relaxed);
                    }
                    delivered += 1;
                }
                other => {
                    tracing::debug!(node = %self.id(), to = %h.for_node, reply = ?other, "hand-off transfer failed");
                    failed.push(h.for_node);
                }
            }
        }
        Ok(delivered)
    }

    // ----- anti-entropy (§10) -----

    async fn anti_entropy(self, shutdown: CancellationToken) {
        let every = self.inner.cfg.anti_entropy_interval;
        if every.is_zero() || self.inner.store.trees().is_none() {
            return;
        }
        // Like hand-off: the first round after one interval plus a seeded jitter.
        let first = Instant::now() + every + self.start_offset(every / 4);
        let mut tick = tokio::time::interval_at(first, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                r = self.anti_entropy_round() => {
                    if let Err(e) = r {
                        tracing::debug!(node = %self.id(), error = %e, "anti-entropy exchange failed");
                    }
                }
            }
        }
    }

    /// The trees' counterpart of a key: its bucket's `allow_mult` and `n_val`.
    fn bucket_params(&self, key: &[u8]) -> (bool, u32) {
        let (bucket, _) = bucket_and_key(key);
        let p = self.registry().resolve(bucket, &Props::default());
        (p.allow_mult, p.n_val)
    }

    /// Whether `node` is one of the first `n_val` replicas of `partition` for `key`'s bucket.
    fn holds(&self, node: NodeId, partition: PartitionId, key: &[u8]) -> bool {
        let (_, n_val) = self.bucket_params(key);
        let l = self.layout();
        l.replicas(partition)
            .iter()
            .position(|&r| r == node)
            .is_some_and(|i| i < n_val as usize)
    }

    /// The next `(partition, peer)` pair, round-robin, whose peer is up; advances the
    /// cursor past it.
    fn aae_next_pair(&self, trees: &AaeTrees) -> Option<(PartitionId, NodeId)> {
        let me = self.id();
        let pairs: Vec<(PartitionId, NodeId)> = {
            let l = self.layout();
            trees
                .partitions()
                .flat_map(|p| {
                    l.replicas(p)
                        .iter()
                        .filter(|&&n| n != me)
                        .map(move |&n| (p, n))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        if pairs.is_empty() {
            return None;
        }
        let mut cursor = self.inner.aae_cursor.lock();
        for i in 0..pairs.len() {
            let idx = (*cursor + i) % pairs.len();
            let (p, peer) = pairs[idx];
            if self.is_up(peer) {
                *cursor = idx + 1;
                return Some((p, peer));
            }
        }
        None
    }

    /// One anti-entropy exchange (normally run every `anti_entropy_interval` by the
    /// background task) with the next `(partition, peer)` pair whose peer is up. Returns the
    /// number of differing keys synced (0 also when anti-entropy is disabled or no peer is
    /// up).
    pub async fn anti_entropy_round(&self) -> std::result::Result<usize, AaeError> {
        let Some(trees) = self.inner.store.trees().cloned() else {
            return Ok(0);
        };
        let Some((p, peer)) = self.aae_next_pair(&trees) else {
            return Ok(0);
        };
        self.anti_entropy_with(p, peer).await
    }

    async fn aae_request(&self, peer: NodeId, msg: Msg) -> std::result::Result<Msg, AaeError> {
        let timeout = self.inner.cfg.anti_entropy_timeout;
        match self.inner.transport.request(peer, msg, timeout).await {
            Ok(Msg::Error(e)) => Err(AaeError::Peer {
                peer,
                reason: format!("refused: {e:?}"),
            }),
            Ok(m) => Ok(m),
            Err(e) => Err(AaeError::Peer {
                peer,
                reason: e.to_string(),
            }),
        }
    }

    /// One anti-entropy exchange of `partition` with `peer` (module [`crate::anti_entropy`]):
    /// compare the trees, list the differing keys (at most `anti_entropy_max_keys`), and
    /// sync their objects both ways. Returns the number of keys synced.
    pub async fn anti_entropy_with(
        &self,
        partition: PartitionId,
        peer: NodeId,
    ) -> std::result::Result<usize, AaeError> {
        let Some(trees) = self.inner.store.trees().cloned() else {
            return Ok(0);
        };
        let bad = |reason: String| AaeError::Peer { peer, reason };
        let mut ex = Exchange::new(trees.config());
        while let Some(request) = ex.request() {
            let reply = match self
                .aae_request(peer, Msg::AaeHashes { partition, request })
                .await?
            {
                Msg::AaeHashReply(r) => r,
                other => return Err(bad(format!("unexpected reply {other:?}"))),
            };
            trees
                .with_tree(partition, |t| ex.receive(t, &reply))
                .ok_or_else(|| bad(format!("partition {} is not held here", partition.0)))?
                .map_err(|e| bad(e.to_string()))?;
        }
        let segments = ex.segments().unwrap_or_default().to_vec();

        let me = self.id();
        let max = self.inner.cfg.anti_entropy_max_keys.max(1);
        let mut keys: Vec<Bytes> = Vec::new();
        'segments: for chunk in segments.chunks(SEGMENTS_PER_REQUEST) {
            let msg = Msg::AaeKeys {
                partition,
                segments: chunk.to_vec(),
            };
            let lists = match self.aae_request(peer, msg).await? {
                Msg::AaeKeysReply(l) if l.len() == chunk.len() => l,
                other => return Err(bad(format!("unexpected reply {other:?}"))),
            };
            for (&seg, remote) in chunk.iter().zip(lists) {
                let local = trees
                    .with_tree(partition, |t| t.key_hashes(seg))
                    .map(|l| l.entries)
                    .unwrap_or_default();
                for k in diff_keys(&local, &remote.entries) {
                    // Only keys both replicas should hold (a bucket may have a smaller
                    // n_val than the layout's replica count).
                    if is_reserved_key(&k)
                        || trees.partition_of(&k) != partition
                        || !self.holds(me, partition, &k)
                        || !self.holds(peer, partition, &k)
                    {
                        continue;
                    }
                    keys.push(k);
                    if keys.len() >= max {
                        break 'segments;
                    }
                }
            }
        }

        let mut synced = 0;
        for chunk in keys.chunks(KEYS_PER_SYNC) {
            let mut items = Vec::with_capacity(chunk.len());
            for k in chunk {
                items.push(AaeItem {
                    key: k.to_vec(),
                    object: self.inner.store.get(k)?,
                });
            }
            let replies = match self
                .aae_request(peer, Msg::AaeSync { partition, items })
                .await?
            {
                Msg::AaeSyncReply(r) => r,
                other => return Err(bad(format!("unexpected reply {other:?}"))),
            };
            for item in replies {
                let Some(o) = item.object else { continue };
                if !chunk.iter().any(|k| k[..] == item.key[..]) {
                    continue;
                }
                let (allow_mult, _) = self.bucket_params(&item.key);
                self.inner.store.merge_apply(&item.key, &o, allow_mult)?;
            }
            synced += chunk.len();
            self.inner
                .counters
                .aae_keys_repaired
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        self.inner
            .counters
            .aae_exchanges
            .fetch_add(1, Ordering::Relaxed);
        Ok(synced)
    }

    /// The trees, if anti-entropy is on and `partition` is held; else why not.
    fn aae_trees(&self, partition: PartitionId) -> std::result::Result<&Arc<AaeTrees>, String> {
        let trees = self
            .inner
            .store
            .trees()
            .ok_or_else(|| "anti-entropy is disabled".to_owned())?;
        if trees.tree_len(partition).is_none() {
            return Err(format!("partition {} is not held", partition.0));
        }
        Ok(trees)
    }

    fn aae_answer_hashes(&self, partition: PartitionId, request: &HashRequest) -> Msg {
        let trees = match self.aae_trees(partition) {
            Ok(t) => t,
            Err(why) => return Msg::Error(RemoteError::BadRequest(why)),
        };
        match trees.with_tree(partition, |t| t.answer(request)) {
            Some(Ok(r)) => Msg::AaeHashReply(r),
            Some(Err(e)) => Msg::Error(RemoteError::BadRequest(e.to_string())),
            None => Msg::Error(RemoteError::BadRequest("partition not held".into())),
        }
    }

    fn aae_answer_keys(&self, partition: PartitionId, segments: &[SegmentId]) -> Msg {
        let trees = match self.aae_trees(partition) {
            Ok(t) => t,
            Err(why) => return Msg::Error(RemoteError::BadRequest(why)),
        };
        let lists = trees
            .with_tree(partition, |t| {
                segments.iter().map(|&s| t.key_hashes(s)).collect()
            })
            .unwrap_or_default();
        Msg::AaeKeysReply(lists)
    }

    fn aae_answer_sync(&self, partition: PartitionId, items: Vec<AaeItem>) -> Msg {
        let trees = match self.aae_trees(partition) {
            Ok(t) => t,
            Err(why) => return Msg::Error(RemoteError::BadRequest(why)),
        };
        let mut out = Vec::with_capacity(items.len());
        for AaeItem { key, object } in items {
            if is_reserved_key(&key)
                || trees.partition_of(&key) != partition
                || !self.holds(self.id(), partition, &key)
            {
                continue;
            }
            let (allow_mult, _) = self.bucket_params(&key);
            // A repair path: merge_apply, no client limits.
            let r = match object {
                Some(o) => self.inner.store.merge_apply(&key, &o, allow_mult).map(Some),
                None => self.inner.store.get(&key),
            };
            match r {
                Ok(object) => out.push(AaeItem { key, object }),
                Err(e) => return Msg::Error(RemoteError::Storage(e.to_string())),
            }
        }
        Msg::AaeSyncReply(out)
    }

    // ----- client API: GET -----

    /// Reads `key` (`bucket:rest`) with the bucket's parameters overridden by `opts`.
    ///
    /// Returns the values (siblings possible) and their context, or notfound; or the spec's
    /// error (`insufficient_vnodes`, `pr_val_unsatisfied`, `r_val_unsatisfied`, `overload`,
    /// `timeout` naming the replicas that did not answer, ...).
    pub async fn get(&self, key: &[u8], opts: GetOptions) -> Result<GetResult> {
        self.get_with_path(key, opts).await.map(|(r, _)| r)
    }

    /// [`Self::get`], also saying whether the read's critical path crossed a DC boundary:
    /// the reply that completed the read quorum came from another DC.
    pub async fn get_with_path(&self, key: &[u8], opts: GetOptions) -> Result<(GetResult, bool)> {
        if is_reserved_key(key) {
            return Err(ReplicationError::ReservedKey);
        }
        self.check_joined()?;
        let (bucket, _) = bucket_and_key(key);
        self.eventual_only(bucket)?;
        let params = self.registry().resolve(bucket, &opts.props);
        let (p, apl) = self.preflist_for(key, params.n_val);
        let gp = precheck_get(&params, AplSummary::from(&apl))?;
        let deadline = Instant::now() + Duration::from_millis(params.timeout_ms);
        let allow_mult = params.allow_mult;
        // During ownership handoff, previous owners may still hold what the new ones lack.
        let mut previous = self.previous_owners(key, p, params.n_val, &apl, deadline);

        let (tx, mut rx) = mpsc::unbounded_channel::<(ApEntry, GetAnswer)>();
        let ask = |e: ApEntry| {
            let hint = hint_for(&e);
            if e.node == self.id() {
                let r = match hint {
                    Some(n) => self.inner.store.get_hint(n, key),
                    None => self.inner.store.get(key),
                };
                let _ = tx.send((e, r.map_err(|_| FailKind::Error)));
                return;
            }
            let (t, tx, key) = (self.inner.transport.clone(), tx.clone(), key.to_vec());
            tokio::spawn(async move {
                let timeout = deadline.saturating_duration_since(Instant::now());
                let msg = Msg::Get {
                    key,
                    hint_for: hint,
                };
                let a = match t.request(e.node, msg, timeout).await {
                    Ok(Msg::GetReply(o)) => Ok(o),
                    Ok(Msg::Error(re)) => Err(remote_fail(&re)),
                    Ok(_) => Err(FailKind::Error),
                    Err(ne) => Err(fail_kind(&ne)),
                };
                let _ = tx.send((e, a));
            });
        };
        // `all`: the whole apl at once. `quorum`: R first, more on failure or hedge timeout.
        let entries = apl.entries();
        let mut asked = match params.read_fanout {
            ReadFanout::All => entries.len(),
            ReadFanout::Quorum => (gp.r as usize).min(entries.len()),
        };
        entries[..asked].iter().for_each(|&e| ask(e));
        let hedge = Duration::from_millis(params.hedge_ms.max(1));
        let mut hedge_at = Instant::now() + hedge;

        let mut tally = GetTally::new(gp, apl.len() as u32);
        let mut replies: Vec<(ApEntry, Option<Object>)> = Vec::new();
        let mut answered: Vec<NodeId> = Vec::new();
        // The tally is decided by the last answer counted, so its DC says where the read
        // waited.
        let mut remote;
        let outcome = loop {
            let next = tokio::select! {
                biased;
                _ = sleep_until(deadline) => None,
                r = rx.recv() => r,
                _ = sleep_until(hedge_at), if asked < entries.len() => {
                    ask(entries[asked]);
                    asked += 1;
                    hedge_at += hedge;
                    continue;
                }
            };
            let Some((e, a)) = next else {
                let mut err = ReplicationError::from(tally.timed_out());
                if let ReplicationError::Timeout { missing: m, .. } = &mut err {
                    *m = missing(&apl, &answered);
                }
                self.read_repair(key, &replies, &[], allow_mult);
                return Err(err);
            };
            answered.push(e.node);
            remote = e.dc != self.dc();
            let counts_ok = match a {
                Ok(Some(o)) => {
                    tally.ok(e.is_primary(), o.is_tombstone_only());
                    replies.push((e, Some(o)));
                    true
                }
                Ok(None) => {
                    tally.notfound(e.is_primary());
                    replies.push((e, None));
                    gp.notfound_ok
                }
                Err(k) => {
                    tally.fail(k);
                    false
                }
            };
            if let Some(out) = tally.outcome() {
                break out;
            }
            if !counts_ok && asked < entries.len() {
                ask(entries[asked]);
                asked += 1;
            }
        };

        let extra: Vec<Object> = match outcome {
            Ok(_) => previous.collect(deadline).await,
            Err(_) => Vec::new(),
        };
        let outcome = match outcome {
            Ok(GetReply::NotFound) if !extra.is_empty() => Ok(GetReply::Merge),
            o => o,
        };
        let result = match outcome {
            Err(q) => Err(ReplicationError::from(q)),
            Ok(GetReply::NotFound) => Ok(GetResult::NotFound {
                deleted_context: None,
            }),
            Ok(GetReply::Merge) => {
                let merged = merge_all(
                    replies
                        .iter()
                        .filter_map(|(_, o)| o.as_ref())
                        .chain(extra.iter()),
                    allow_mult,
                )
                .unwrap_or_default();
                let context = Bytes::from(merged.clock().encode());
                if merged.is_tombstone_only() {
                    Ok(GetResult::NotFound {
                        deleted_context: opts.deleted_context.then_some(context),
                    })
                } else {
                    let live = merged
                        .siblings()
                        .iter()
                        .filter(|s| matches!(s.content, Content::Value(_)));
                    let latest = live
                        .enumerate()
                        .max_by_key(|(_, s)| (s.meta.ts_us, s.dot))
                        .map_or(0, |(i, _)| i);
                    Ok(GetResult::Found {
                        values: merged.values().cloned().collect(),
                        context,
                        latest,
                    })
                }
            }
        };

        // Keep collecting until every asked replica answered or the deadline, then repair.
        let node = self.clone();
        let key = key.to_vec();
        let total = asked;
        tokio::spawn(async move {
            let mut replies = replies;
            let mut seen = answered.len();
            while seen < total {
                let next = tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => None,
                    r = rx.recv() => r,
                };
                let Some((e, a)) = next else { break };
                seen += 1;
                if let Ok(o) = a {
                    replies.push((e, o));
                }
            }
            node.read_repair(&key, &replies, &extra, allow_mult);
        });
        result.map(|r| (r, remote))
    }

    /// Read repair (§8): sends the merge of every object received (`extra`: from previous
    /// owners during a handoff, which are not repaired themselves) to each replica that
    /// answered notfound or something other than the merge.
    fn read_repair(
        &self,
        key: &[u8],
        replies: &[(ApEntry, Option<Object>)],
        extra: &[Object],
        allow_mult: bool,
    ) {
        let objects = replies.iter().filter_map(|(_, o)| o.as_ref());
        let Some(merged) = merge_all(objects.chain(extra), allow_mult) else {
            return;
        };
        for (e, o) in replies {
            if o.as_ref() == Some(&merged) {
                continue;
            }
            let hint = hint_for(e);
            if e.node == self.id() {
                if let Err(err) = self.apply(key, &merged, hint, allow_mult) {
                    tracing::warn!(node = %self.id(), error = %err, "local read repair failed");
                    continue;
                }
            } else {
                let msg = Msg::Repair {
                    key: key.to_vec(),
                    object: merged.clone(),
                    hint_for: hint,
                    allow_mult,
                };
                if self.inner.transport.send(e.node, msg).is_err() {
                    continue;
                }
            }
            self.inner
                .counters
                .read_repairs
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    // ----- client API: PUT / DELETE -----

    /// Writes `value` to `key` (`bucket:rest`). `context` is the opaque context of a previous
    /// GET (or PUT) of the key — the values it covers are superseded — or `None` for a blind
    /// write (which adds a sibling).
    ///
    /// An error never rolls back replicas that applied the write: treat it as "maybe
    /// written".
    pub async fn put(
        &self,
        key: &[u8],
        value: Bytes,
        context: Option<&[u8]>,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if value.len() > self.inner.cfg.object_max {
            return Err(ReplicationError::ObjectTooLarge {
                len: value.len(),
                max: self.inner.cfg.object_max,
            });
        }
        self.write(
            key,
            Content::Value(value),
            context.unwrap_or_default(),
            opts,
            false,
        )
        .await
    }

    /// Deletes `key`: a write of a tombstone with `context` (a GET's context, so the
    /// values it returned are superseded). GETs answer notfound once the tombstone is all
    /// that is left.
    pub async fn delete(
        &self,
        key: &[u8],
        context: Option<&[u8]>,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.write(
            key,
            Content::Tombstone,
            context.unwrap_or_default(),
            opts,
            false,
        )
        .await
    }

    async fn write(
        &self,
        key: &[u8],
        content: Content,
        context: &[u8],
        opts: PutOptions,
        forwarded: bool,
    ) -> Result<PutResult> {
        if is_reserved_key(key) {
            return Err(ReplicationError::ReservedKey);
        }
        self.check_joined()?;
        let ctx = CausalClock::decode(context).map_err(|e| ReplicationError::InvalidContext {
            reason: e.to_string(),
        })?;
        let (bucket, _) = bucket_and_key(key);
        self.eventual_only(bucket)?;
        let params = self.registry().resolve(bucket, &opts.props);
        let (partition, apl) = self.preflist_for(key, params.n_val);
        let pp = precheck_put(&params, AplSummary::from(&apl))?;
        let timeout = Duration::from_millis(params.timeout_ms);
        let deadline = Instant::now() + timeout;
        let me = self.id();

        let local_primary = apl.get(me).is_some_and(ApEntry::is_primary);
        if !local_primary {
            let no_coordinator = ReplicationError::NoCoordinator {
                partition: partition.0,
                apl_len: apl.len() as u32,
            };
            if forwarded {
                return Err(no_coordinator);
            }
            let Some(target) = apl.entries().iter().find(|e| e.is_primary()).copied() else {
                return Err(no_coordinator);
            };
            return self
                .forward(target, key, content, context, opts, timeout, pp.w)
                .await;
        }

        // Coordinate: apply locally first (our own w, dw and pw).
        let rid = ReplicaId {
            partition,
            node: me,
            incarnation: self.inner.cfg.incarnation,
            epoch: self.replica_epoch(partition),
        };
        let object = self.inner.store.coordinator_put(
            key,
            &ctx,
            content,
            rid,
            params.allow_mult,
            self.inner.cfg.siblings_max,
        )?;
        let siblings = object.siblings().len();
        if siblings >= self.inner.cfg.siblings_warn {
            tracing::warn!(node = %me, key = ?String::from_utf8_lossy(key), siblings, "many siblings");
        }
        let mut tally = PutTally::new(pp, apl.len() as u32);
        tally.w_ack(me, self.dc());
        // The outcome is checked after every answer, so the last ack's DC says where the
        // write waited.
        let mut remote = false;
        tally.dw_ack(true);
        let mut answered = vec![me];
        // During an ownership handoff the write must also reach a write quorum of the key's
        // previous owners, so a coordinator still placing keys with the previous layout (its
        // metadata not yet updated) reads it too.
        let previous = self.previous_replicas(partition, params.n_val);
        let need_previous = if previous.is_empty() {
            0
        } else {
            pp.w.max(pp.pw).min(previous.len() as u32) as usize
        };
        let mut previous_acks: Vec<NodeId> =
            previous.iter().copied().filter(|&n| n == me).collect();

        let (tx, mut rx) = mpsc::unbounded_channel::<(Option<ApEntry>, NodeId, PutAnswer)>();
        let replicate = |to: NodeId, entry: Option<ApEntry>, hint: Option<NodeId>| {
            let (t, tx) = (self.inner.transport.clone(), tx.clone());
            let msg = Msg::Replicate {
                key: key.to_vec(),
                object: object.clone(),
                hint_for: hint,
                allow_mult: params.allow_mult,
            };
            tokio::spawn(async move {
                let timeout = deadline.saturating_duration_since(Instant::now());
                let a = match t.request(to, msg, timeout).await {
                    Ok(Msg::Ack { durable }) => Ok(durable),
                    Ok(Msg::Error(re)) => Err(remote_fail(&re)),
                    Ok(_) => Err(FailKind::Error),
                    Err(ne) => Err(fail_kind(&ne)),
                };
                let _ = tx.send((entry, to, a));
            });
        };
        for &e in apl.entries().iter().filter(|e| e.node != me) {
            replicate(e.node, Some(e), hint_for(&e));
        }
        for &n in previous
            .iter()
            .filter(|&&n| n != me && apl.get(n).is_none())
        {
            replicate(n, None, None);
        }
        drop(tx);

        let outcome = loop {
            if let Some(out) = tally.outcome()
                && (out.is_err() || previous_acks.len() >= need_previous)
            {
                break out;
            }
            let next = tokio::select! {
                biased;
                _ = sleep_until(deadline) => None,
                r = rx.recv() => Some(r),
            };
            let Some(next) = next else {
                let mut err = ReplicationError::from(tally.timed_out());
                if let ReplicationError::Timeout { missing: m, .. } = &mut err {
                    *m = missing(&apl, &answered);
                }
                return Err(err);
            };
            let Some((entry, from, a)) = next else {
                // Every reply is in: the tally is decided, the previous owners fell short.
                return Err(ReplicationError::Quorum(QuorumError::WValUnsatisfied {
                    need: need_previous as u32,
                    got: previous_acks.len() as u32,
                }));
            };
            if a.is_ok() && previous.contains(&from) && !previous_acks.contains(&from) {
                previous_acks.push(from);
            }
            let Some(e) = entry else { continue };
            answered.push(e.node);
            match a {
                Ok(durable) => {
                    remote = e.dc != self.dc();
                    tally.w_ack(e.node, e.dc);
                    if durable {
                        tally.dw_ack(e.is_primary());
                    }
                }
                Err(k) => tally.fail(k),
            }
        };
        outcome?;
        Ok(PutResult {
            context: object.clock().encode(),
            values: opts
                .return_body
                .then(|| object.values().map(|v| v.to_vec()).collect()),
            remote,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn forward(
        &self,
        target: ApEntry,
        key: &[u8],
        content: Content,
        context: &[u8],
        mut opts: PutOptions,
        timeout: Duration,
        w: u32,
    ) -> Result<PutResult> {
        self.inner
            .counters
            .coord_redirs
            .fetch_add(1, Ordering::Relaxed);
        let reserve = self.inner.cfg.forward_reserve.min(timeout / 10);
        let budget = (timeout - reserve).as_millis().max(1) as u64;
        opts.props.timeout_ms = Some(budget);
        let msg = Msg::Forward {
            key: key.to_vec(),
            value: match content {
                Content::Value(v) => Some(v.to_vec()),
                Content::Tombstone => None,
            },
            context: context.to_vec(),
            opts,
        };
        let target_remote = target.dc != self.dc();
        let target = target.node;
        match self.inner.transport.request(target, msg, timeout).await {
            Ok(Msg::ForwardReply(r)) => r.map(|mut r| {
                r.remote |= target_remote;
                r
            }),
            Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
            Ok(other) => Err(ReplicationError::ForwardFailed {
                node: target,
                reason: format!("unexpected reply {other:?}"),
            }),
            Err(NetError::Timeout { .. }) => Err(ReplicationError::Timeout {
                need: w,
                ok: 0,
                nf: 0,
                fail: 0,
                missing: Missing(vec![target]),
            }),
            Err(e) => Err(ReplicationError::ForwardFailed {
                node: target,
                reason: e.to_string(),
            }),
        }
    }
}

fn merge_all<'a>(objs: impl Iterator<Item = &'a Object>, allow_mult: bool) -> Option<Object> {
    objs.fold(None, |acc: Option<Object>, o| {
        Some(match acc {
            None if allow_mult => o.clone(),
            None => dvv::lww(o.clone()),
            Some(a) => dvv::merge_with(&a, o, allow_mult),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_cluster::{Member, Ring, Topology, claim};
    use meridian_core::Timestamp;
    use meridian_net::MemNetwork;
    use meridian_storage::MemEngine;

    /// A one-node "cluster" with N=1: the full request paths without a network.
    async fn single() -> (EventualNode, CancellationToken) {
        let topo = Topology::new([Member::new(NodeId(1), DcId(0))]).unwrap();
        let layout = claim(&topo, Ring::new(64).unwrap(), 1).unwrap();
        let shape = crate::bucket::ClusterShape::of(&layout);
        let mut map = std::collections::BTreeMap::new();
        map.insert(
            "default".to_owned(),
            BucketProps {
                props: Props {
                    n_val: Some(1),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let buckets = Buckets::from_map(shape, map).unwrap();
        let net = MemNetwork::<Msg>::new();
        let (t, inbox) = net.join(NodeId(1)).unwrap();
        let node = EventualNode::new(
            NodeConfig::new(NodeId(1)),
            Arc::new(MemEngine::new()),
            Arc::new(crate::TokioClock::new(Timestamp(1_000_000))),
            t,
            ClusterMeta::new(
                layout,
                vec![crate::MemberRecord {
                    id: NodeId(1),
                    name: "n1".into(),
                    dc: DcId(0),
                    dc_name: "dc0".into(),
                    peer: None,
                    resp: None,
                    http: None,
                }],
                &buckets,
            )
            .unwrap(),
        );
        let stop = CancellationToken::new();
        node.spawn(inbox, stop.clone());
        (node, stop)
    }

    #[tokio::test(start_paused = true)]
    async fn put_get_delete_on_one_node() {
        let (n, stop) = single().await;
        let o = GetOptions::default();
        let w = PutOptions::default();
        assert_eq!(
            n.get(b"k", o).await.unwrap(),
            GetResult::NotFound {
                deleted_context: None
            }
        );
        n.put(b"k", Bytes::from_static(b"v1"), None, w)
            .await
            .unwrap();
        let g = n.get(b"k", o).await.unwrap();
        assert_eq!(g.values(), [Bytes::from_static(b"v1")]);
        n.put(b"k", Bytes::from_static(b"v2"), Some(&g.context()), w)
            .await
            .unwrap();
        let g = n.get(b"k", o).await.unwrap();
        assert_eq!(g.values(), [Bytes::from_static(b"v2")]);
        n.delete(b"k", Some(&g.context()), w).await.unwrap();
        let d = n
            .get(
                b"k",
                GetOptions {
                    deleted_context: true,
                    ..o
                },
            )
            .await
            .unwrap();
        assert!(matches!(
            d,
            GetResult::NotFound {
                deleted_context: Some(_)
            }
        ));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn client_input_is_checked() {
        let (n, stop) = single().await;
        let w = PutOptions::default();
        let e = n
            .get(b"\xffh-nope", GetOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e, ReplicationError::ReservedKey);
        let e = n
            .put(b"k", Bytes::from_static(b"v"), Some(b"\x07junk"), w)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "invalid_context");
        let e = n
            .put(b"k", Bytes::from(vec![0u8; (50 << 20) + 1]), None, w)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "object_too_large");
        let mut r2 = GetOptions::default();
        r2.props.r = Some(meridian_cluster::Quorum::Count(2));
        let e = n.get(b"k", r2).await.unwrap_err();
        assert_eq!(e.to_string(), "n_val_violation n=1");
        stop.cancel();
    }
}
