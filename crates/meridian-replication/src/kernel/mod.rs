//! The node **kernel**: the services every protocol of a node shares — identity, the
//! cluster metadata view, the transport, the object store, placement, the failure detector,
//! the clock, the seeded RNG, timers and counters — and the serving task that hands each
//! incoming message to its protocol. The kernel names no protocol.
//!
//! A node ([`Node`], also known by its historical name [`EventualNode`]) is this kernel plus
//! one state per protocol, held as **values**: a registry keyed by type ([`Protocols`]),
//! filled once when the node is built and read by [`Node::protocol`]. Each protocol wraps that
//! in its own accessor (`node.txn_state()`, `node.tl_state()`, ...), which is also how one
//! protocol reaches another: through the kernel, not through a field of a shared type.
//!
//! | part | owns | module |
//! |---|---|---|
//! | kernel | identity (id, DC, [`NodeConfig`]), the cluster metadata view (layout, members, bucket registry) and its adoption hooks, the claimant's side of changes, the failure detector and heartbeats, the transport and the serving task, the seeded RNG, the clock, the object store (engine handle), the `maxmemory` state, counters | here, `kernel/meta.rs`, `kernel/protocols.rs` |
//! | wiring | building the kernel and every protocol's state, routing each [`Msg`] variant, the spawn of every background task | [`crate::node`] |
//! | eventual | quorum GET/PUT/DELETE coordinators, forwarding, the replica side, read repair | [`crate::eventual`] |
//! | timeline | per-record masters, propagation, catch-up, forced re-master | [`crate::timeline`] |
//! | handoff | hinted handoff (hints to their primaries) and ownership handoff (after a layout change) | [`crate::handoff`] |
//! | anti-entropy | Merkle trees and their round-robin exchange | [`crate::anti_entropy`] |
//! | transactions | partition leaders (snapshot reads, certification, prepare/commit), coordinators (2PC, decision log), the timestamp oracle | [`crate::txn`] (core in `meridian-txn`) |
//! | blob | large objects' chunks on their replicas, cluster-wide listings | [`crate::blob`] (core in `meridian-blob`) |
//! | balance | reads that need one replica (strategies, deferred reads), the replica's read queue and service model, the DC's root, hot-key sketches and extra copies | [`crate::balance`] (core in `meridian-balance`) |
//!
//! ## Routing: how a protocol registers
//!
//! Every protocol has its own message enum, wrapped by one variant of the wire type
//! [`Msg`] (module [`crate::msg`], which imports no protocol), and a state that implements
//! [`Protocol`] for that enum. The kernel's serving task reads the inbox, wraps each message
//! in an [`Incoming`] (sender, reply handle, and whether the inbox is backed up) and calls
//! the node's [`Router`], a function the wiring ([`crate::node`]) registers when it builds the
//! node: it matches on the outer variant and hands the inner message to that protocol's
//! [`Protocol::handle`]. Dispatch stays static — a `match` and a direct call, no trait
//! objects, no boxing. A protocol answers through its [`Incoming`] with its own enum
//! (converted into [`Msg`] by `From`), or with [`Msg::Error`]; under overload it refuses the
//! requests it chooses ([`Incoming::refuse_if_overloaded`]).
//!
//! Adding a protocol inside this crate touches its own module, one variant of [`Msg`] and the
//! wiring (see [`crate::node`]); the kernel and the other protocols do not change.
//!
//! **External crates** cannot add a variant to [`Msg`] without a dependency cycle. The
//! chosen path, not built yet because nothing needs it: an escape hatch
//! `Msg::Ext { protocol: u16, payload: Bytes }` carrying the protocol's own postcard-encoded
//! enum, and handlers registered with the protocols' states. That costs a second decode and
//! one dynamic call per message of that protocol only; the built-in protocols keep the static
//! `match`.
//!
//! ## Determinism
//!
//! Time comes only from the node's [`meridian_core::Clock`] and tokio timers; randomness
//! (the start offsets of the periodic tasks, the protocols' round-robin starts) from one
//! ChaCha8 RNG seeded by [`NodeConfig::seed`], drawn in a fixed order at creation and at
//! spawn (the order is the wiring's, [`crate::node`]); no map iteration order affects
//! behaviour.
//!
//! ## Guarantees of the kernel
//!
//! - A node follows one versioned [`ClusterMeta`] (layout, previous layout during a
//!   handoff, members, buckets); changes go through the claimant ([`Node::change`]), which
//!   publishes each version; heartbeats carry the version and a node that hears an older
//!   one pushes its document.
//! - A replica refuses requests with `overload` while more than `overload_backlog`
//!   messages wait in its inbox (each protocol says which of its messages are requests).

pub mod messages;
mod meta;
mod protocols;
mod wan_budget;

use crate::bucket::{BucketProps, Buckets};
use crate::error::Result;
use crate::membership::{ClusterMeta, MetaChange};
use crate::memory::limit::MemoryLimit;
pub use crate::msg::{KernelMsg, Msg, RemoteError};
use crate::object_store::ObjectStore;
use crate::truncation::marks::{FlooredClock, Marks, SharedMarks};
use meridian_cluster::{
    DetectorConfig, FailureDetector, Layout, Preflist, Props, ReplicaLoad, bucket_and_key, preflist,
};
use meridian_core::{Clock, DcId, NodeId, PartitionId};
use meridian_net::{Inbox, Responder, Transport};
pub(crate) use meta::held;
use parking_lot::{MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};
pub(crate) use protocols::Protocols;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// How long [`Node::set_bucket`] waits for every live member to adopt a bucket change.
pub const BUCKET_ADOPTION_WAIT: Duration = Duration::from_secs(10);

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
    /// Most hints handed off to one primary per round (default 10 000).
    pub handoff_batch: usize,
    /// Primaries a node hands hints off to at once (default 2, spec §9's
    /// `handoff_concurrency`).
    pub handoff_concurrency: usize,
    /// Background traffic to each other DC — hinted, ownership and chunk handoff, read and
    /// scrub repair, anti-entropy — is paced to this many bytes per second, so it never takes
    /// a WAN link from clients (default 12.5 MB/s, a tenth of a 1 Gb/s link; 0: unpaced).
    pub repair_wan_bytes_per_sec: u64,
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
    /// How often the expiry sweep looks at a page of keys (`crate::expiry`; default 1 s;
    /// zero disables it: expired values stay invisible but are not deleted).
    pub expiry_sweep_interval: Duration,
    /// Keys of each bucket type the expiry sweep looks at per round (default 512).
    pub expiry_sweep_page: usize,
    /// Eventual hashes (`crate::eventual::map`): how much older than a map's newest write a
    /// field removal may be before the map's coordinator drops it (default 24 h). It must
    /// exceed how long a concurrent write can stay unseen (replication, hinted handoff,
    /// anti-entropy), or that write's field may come back.
    pub map_tombstone_horizon: Duration,
    /// Timeline: how long a tombstone is kept before its master may reap it once every
    /// primary holds it (spec §5 `tombstone_grace`; default 24 h; zero: never reaped).
    pub tl_tombstone_grace: Duration,
    /// Timeline: how long a new master waits for the record that hands it the mastership
    /// (default 2 s).
    pub tl_migrate_wait: Duration,
    /// Timeline: master hints cached for keys this node does not replicate (default 100 000).
    pub tl_hint_cache: usize,
    /// Timeline: how long a master that may not hold a key's latest record waits for the
    /// other primaries' copies before it acts (default 1 s; see `tl_confirm`).
    pub tl_confirm_timeout: Duration,
    /// Transactions: waits, timeouts and limits (spec `transactions.md` defaults).
    pub txn: meridian_txn::TxnLimits,
    /// Read balancing: how long a read occupies a worker (`real`: the engine's own time).
    pub service_model: meridian_balance::ServiceModel,
    /// Read balancing: workers serving the read queue (default 4; the replica-choice study
    /// uses 1).
    pub read_workers: usize,
    /// Read balancing: how a replica claims a deferred read before serving it (default
    /// `token`: its coordinator grants the first claim only).
    pub deferred_claim: meridian_balance::DeferredClaim,
    /// Read balancing: how often a node reports its load to its DC's root and hears the
    /// average load and the copy map's epoch back (default 100 ms).
    pub balance_tick: Duration,
    /// Read balancing: the hot-key decision period P (default 1 s).
    pub hot_period: Duration,
    /// Read balancing: how long an extra copy serves without a renewal from its root
    /// (default 1 s).
    pub copy_lease: Duration,
    /// Read balancing: timeout of each step of making an extra copy (default 5 s).
    pub copy_timeout: Duration,
    /// Redis's `maxmemory`: the used-memory estimate this node stays within (module
    /// [`crate::memory`]; default 0: no limit). Changed at runtime with
    /// [`Node::set_maxmemory`].
    pub maxmemory: u64,
    /// Redis's `maxmemory-policy` (default `noeviction`).
    pub maxmemory_policy: meridian_core::memory::MaxmemoryPolicy,
    /// How often the eviction task looks at the used-memory estimate (default 100 ms; zero
    /// disables eviction, `noeviction`'s refusals still apply).
    pub eviction_interval: Duration,
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
            handoff_concurrency: 2,
            repair_wan_bytes_per_sec: 12_500_000,
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
            tl_tombstone_grace: Duration::from_secs(24 * 3600),
            expiry_sweep_interval: Duration::from_secs(1),
            expiry_sweep_page: 512,
            map_tombstone_horizon: Duration::from_secs(24 * 3600),
            tl_sync_page: 512,
            tl_migrate_wait: Duration::from_secs(2),
            tl_hint_cache: 100_000,
            tl_confirm_timeout: Duration::from_secs(1),
            txn: meridian_txn::TxnLimits::default(),
            service_model: meridian_balance::ServiceModel::Real,
            read_workers: 4,
            deferred_claim: meridian_balance::DeferredClaim::Token,
            balance_tick: Duration::from_millis(100),
            hot_period: Duration::from_secs(1),
            copy_lease: Duration::from_secs(1),
            copy_timeout: Duration::from_secs(5),
            maxmemory: 0,
            maxmemory_policy: meridian_core::memory::MaxmemoryPolicy::NoEviction,
            eviction_interval: Duration::from_millis(100),
        }
    }
}

/// Counters of one node (the spec's metrics, not yet exported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Read-repair messages sent (`read_repairs_total`).
    pub read_repairs: u64,
    /// Cross-DC read repairs dropped because the WAN budget had no room for them (left to
    /// anti-entropy; `read_repairs_deferred_total`).
    pub read_repairs_deferred: u64,
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
    /// Tombstones this replica forgot under `delete_mode` (`tombstones_reaped_total`).
    pub tombstones_reaped: u64,
    /// Peer requests refused unserved because they asked for more than this node's own
    /// limits allow (repeated or too many ids, counts past a cap;
    /// `peer_requests_refused_total`).
    pub peer_requests_refused: u64,
}

/// The node's counters, shared by the protocols (each bumps its own).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) read_repairs: AtomicU64,
    pub(crate) read_repairs_deferred: AtomicU64,
    pub(crate) hinted_handoffs: AtomicU64,
    pub(crate) handoff_bytes: AtomicU64,
    pub(crate) coord_redirs: AtomicU64,
    pub(crate) aae_exchanges: AtomicU64,
    pub(crate) aae_keys_repaired: AtomicU64,
    pub(crate) ownership_handoffs: AtomicU64,
    pub(crate) tombstones_reaped: AtomicU64,
    pub(crate) peer_requests_refused: AtomicU64,
}

/// What every protocol of a node shares. See the module docs.
#[derive(Debug)]
pub(crate) struct Kernel {
    pub(crate) cfg: NodeConfig,
    /// This node's DC (from its member record; fixed for the node's life).
    pub(crate) dc: DcId,
    /// The replica's objects and hints over the engine (the engine handle of every protocol).
    pub(crate) store: ObjectStore,
    /// The node's clock: `floored`, as every protocol must read it.
    pub(crate) clock: Arc<dyn Clock>,
    /// The same clock, whose floor adopted truncation marks raise (module
    /// [`crate::truncation`]).
    pub(crate) floored: Arc<FlooredClock>,
    /// The buckets' truncation marks, shared with the stores.
    pub(crate) marks: SharedMarks,
    pub(crate) transport: Transport<Msg>,
    /// The cluster metadata this node follows, and the bucket registry derived from it.
    pub(crate) view: RwLock<View>,
    /// Called with every adopted metadata document (address books, member tables).
    pub(crate) hooks: MetaHooks,
    pub(crate) detector: Mutex<FailureDetector>,
    pub(crate) rng: Mutex<ChaCha8Rng>,
    pub(crate) counters: Counters,
    /// The load each peer last reported with a read reply (what replica selection reads).
    pub(crate) loads: Mutex<BTreeMap<NodeId, ReplicaLoad>>,
    /// The metadata version each peer's last heartbeat carried.
    pub(crate) peer_versions: Mutex<BTreeMap<NodeId, u64>>,
    /// Whether any bucket is transactional (kept with the registry; one atomic load lets the
    /// front ends skip a registry lookup on every request of clusters without them).
    pub(crate) has_txn_buckets: std::sync::atomic::AtomicBool,
    /// Whether any bucket has extra copies (one atomic load lets every write of a cluster
    /// without them skip the hot-key check).
    pub(crate) has_extra_copies: std::sync::atomic::AtomicBool,
    /// Whether any bucket belongs to the S3 endpoint (kept with the registry).
    pub(crate) has_s3_buckets: std::sync::atomic::AtomicBool,
    /// The WAN budgets of background traffic (module `wan_budget`).
    pub(crate) wan_budgets: wan_budget::WanBudgets,
    /// `maxmemory`: the limit, the policy, the peers that refuse writes, the access index
    /// (module [`crate::memory`]).
    pub(crate) memory: MemoryLimit,
}

/// A node: the kernel, the protocols' states (registered values the kernel does not name),
/// and the router that hands each incoming message to its protocol.
#[derive(Debug)]
struct Inner {
    kernel: Kernel,
    protocols: Protocols,
    router: Router,
}

/// Hands one incoming message to the protocol that owns it: set once when the node is built
/// (by [`crate::node`], which knows every protocol), called by the kernel's serving task.
pub(crate) type Router = fn(&Node, Incoming, Msg);

/// What a node believes about the cluster: the metadata document and its bucket registry.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) meta: ClusterMeta,
    pub(crate) buckets: Buckets,
}

/// A callback run with each adopted metadata document.
pub(crate) type MetaHook = Box<dyn Fn(&ClusterMeta) + Send + Sync>;

#[derive(Default)]
pub(crate) struct MetaHooks(pub(crate) Mutex<Vec<MetaHook>>);

impl std::fmt::Debug for MetaHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MetaHooks({})", self.0.lock().len())
    }
}

/// One node: the kernel and its protocols. Cheap to clone (clones share the node). See the
/// module docs; the client operations are documented with their protocols
/// ([`crate::eventual`], [`crate::timeline`], [`crate::handoff`], [`crate::anti_entropy`]).
#[derive(Debug, Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

/// The node's historical name (it served only eventual buckets once); the same type.
pub type EventualNode = Node;

impl Kernel {
    /// The kernel of a node storing its objects (and hints) in `engine`, stamping writes with
    /// `clock` (floored by the truncation marks of `meta`), talking over `transport`, and
    /// following `meta`. Draws nothing from the RNG: the protocols draw their seeds, in the
    /// order the node's wiring registers them.
    ///
    /// # Panics
    /// If `meta` has no member record for `config.id`, or its buckets do not validate.
    pub(crate) fn new(
        config: NodeConfig,
        engine: Arc<dyn meridian_storage::Engine>,
        clock: Arc<dyn Clock>,
        transport: Transport<Msg>,
        meta: ClusterMeta,
    ) -> Kernel {
        let dc = meta
            .member(config.id)
            .unwrap_or_else(|| panic!("{} has no member record", config.id))
            .dc;
        let buckets = meta
            .bucket_registry()
            .expect("the metadata's buckets validate");
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        let marks = Marks::of(&meta);
        let floored = Arc::new(FlooredClock::new(clock));
        floored.stay_above(marks.highest());
        let clock: Arc<dyn Clock> = floored.clone();
        let marks: SharedMarks = Arc::new(RwLock::new(marks));
        let store = ObjectStore::new(engine, clock.clone()).with_marks(marks.clone());
        let has_txn = buckets.has_transactional();
        let has_extra = buckets.has_extra_copies();
        let has_s3 = buckets.has_s3();
        let memory = MemoryLimit::new(config.maxmemory, config.maxmemory_policy);
        Kernel {
            store,
            detector: Mutex::new(FailureDetector::new(config.detector.clone())),
            cfg: config,
            dc,
            clock,
            floored,
            marks,
            transport,
            view: RwLock::new(View { meta, buckets }),
            hooks: MetaHooks::default(),
            rng: Mutex::new(rng),
            counters: Counters::default(),
            loads: Mutex::new(BTreeMap::new()),
            peer_versions: Mutex::new(BTreeMap::new()),
            has_txn_buckets: std::sync::atomic::AtomicBool::new(has_txn),
            has_extra_copies: std::sync::atomic::AtomicBool::new(has_extra),
            has_s3_buckets: std::sync::atomic::AtomicBool::new(has_s3),
            wan_budgets: Default::default(),
            memory,
        }
    }
}

impl Node {
    /// A node of `kernel`, the protocols' states `protocols` and the router that hands them
    /// their messages: what the wiring ([`crate::node`]) builds a node from.
    pub(crate) fn assemble(kernel: Kernel, protocols: Protocols, router: Router) -> Node {
        Node {
            inner: Arc::new(Inner {
                kernel,
                protocols,
                router,
            }),
        }
    }

    /// The shared part of the node.
    pub(crate) fn kernel(&self) -> &Kernel {
        &self.inner.kernel
    }

    /// The state the node's wiring registered for protocol type `T`: how a protocol reaches
    /// its own state and another's (each protocol wraps this in a named accessor).
    ///
    /// # Panics
    /// If no state of type `T` was registered (a wiring bug, caught by any test).
    pub(crate) fn protocol<T: Any>(&self) -> &T {
        self.inner.protocols.get::<T>().unwrap_or_else(|| {
            panic!(
                "protocol state {} is not registered",
                std::any::type_name::<T>()
            )
        })
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.kernel().cfg.id
    }

    /// The node's clock reading (what expiry and snapshots are judged by).
    pub fn clock_now(&self) -> meridian_core::Timestamp {
        self.kernel().clock.now()
    }

    /// This node's DC.
    pub fn dc(&self) -> DcId {
        self.kernel().dc
    }

    /// The current layout (held read-locked: keep the guard short).
    pub fn layout(&self) -> MappedRwLockReadGuard<'_, Layout> {
        RwLockReadGuard::map(self.kernel().view.read(), |v| &v.meta.layout)
    }

    /// The bucket registry (held read-locked: keep the guard short).
    pub(crate) fn registry(&self) -> MappedRwLockReadGuard<'_, Buckets> {
        RwLockReadGuard::map(self.kernel().view.read(), |v| &v.buckets)
    }

    /// Member `id`'s RESP address for a client connected over TLS (`tls`) or not
    /// ([`crate::MemberRecord::client_resp`]), when known, without copying the metadata.
    pub fn member_resp(&self, id: NodeId, tls: bool) -> Option<std::net::SocketAddr> {
        let view = self.kernel().view.read();
        view.meta
            .members
            .iter()
            .find(|m| m.id == id)?
            .client_resp(tls)
    }

    /// A copy of the cluster metadata this node follows.
    pub fn meta(&self) -> ClusterMeta {
        self.kernel().view.read().meta.clone()
    }

    /// The replica's local objects and hints (for inspection and tools).
    pub fn store(&self) -> &ObjectStore {
        &self.kernel().store
    }

    /// Creates or replaces a bucket in the whole cluster (validated by the claimant, which
    /// publishes it to every member). When the call returns every member the failure
    /// detector considers up has adopted it (their heartbeats say so), so a client that goes
    /// to another DC next finds the bucket there; a member that stays silent for
    /// [`BUCKET_ADOPTION_WAIT`] gets it later (a warning is logged).
    pub async fn set_bucket(&self, name: &str, props: BucketProps) -> Result<()> {
        let meta = self
            .change(MetaChange::SetBucket {
                name: name.to_owned(),
                props: props.into(),
            })
            .await?;
        self.await_adoption(meta, name).await;
        Ok(())
    }

    /// Removes a bucket from the whole cluster (not `default`); returns as
    /// [`Node::set_bucket`] does. Its keys are not deleted: they take the `default` bucket's
    /// properties.
    pub async fn drop_bucket(&self, name: &str) -> Result<()> {
        let meta = self
            .change(MetaChange::DropBucket {
                name: name.to_owned(),
            })
            .await?;
        self.await_adoption(meta, name).await;
        Ok(())
    }

    /// Waits until every member the detector calls up has adopted `meta` (bounded by
    /// [`BUCKET_ADOPTION_WAIT`]).
    async fn await_adoption(&self, meta: ClusterMeta, name: &str) {
        let deadline = Instant::now() + BUCKET_ADOPTION_WAIT;
        loop {
            let lagging: Vec<NodeId> = meta
                .members
                .iter()
                .map(|m| m.id)
                .filter(|&p| p != self.id() && self.is_up(p))
                .filter(|p| {
                    self.kernel()
                        .peer_versions
                        .lock()
                        .get(p)
                        .is_none_or(|&v| v < meta.version)
                })
                .collect();
            if lagging.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(node = %self.id(), bucket = name, ?lagging,
                    "members have not adopted the bucket change yet; they will when they hear of it");
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A snapshot of the bucket registry.
    pub fn buckets(&self) -> Buckets {
        self.registry().clone()
    }

    /// The type of `key`'s bucket (one registry lookup, no copy): what the dispatch facade
    /// reads once per request.
    pub fn bucket_type(&self, key: &[u8]) -> crate::bucket::BucketType {
        self.registry().props_for(bucket_and_key(key).0).bucket_type
    }

    /// Whether `key`'s bucket is transactional: one atomic load when no bucket is.
    pub fn is_transactional(&self, key: &[u8]) -> bool {
        self.has_txn_buckets() && self.bucket_type(key) == crate::bucket::BucketType::Transactional
    }

    /// Whether some bucket is transactional (one atomic load).
    pub fn has_txn_buckets(&self) -> bool {
        self.kernel().has_txn_buckets.load(Ordering::Relaxed)
    }

    /// Whether some bucket belongs to the S3 endpoint (one atomic load).
    pub fn has_s3_buckets(&self) -> bool {
        self.kernel().has_s3_buckets.load(Ordering::Relaxed)
    }

    /// Whether bucket `name` (raw bytes from a key) belongs to the S3 endpoint: one atomic
    /// load when no bucket does.
    pub fn is_s3_bucket(&self, name: &[u8]) -> bool {
        self.kernel().has_s3_buckets.load(Ordering::Relaxed)
            && std::str::from_utf8(name)
                .ok()
                .and_then(|n| self.registry().get(n).map(|p| p.s3 == Some(true)))
                .unwrap_or(false)
    }

    /// Whether this node's failure detector considers `peer` up now (itself always).
    pub fn is_up(&self, peer: NodeId) -> bool {
        peer == self.id()
            || self
                .kernel()
                .detector
                .lock()
                .is_up(peer, self.kernel().clock.now())
    }

    /// How many of `peers` this node's failure detector considers up now (one lock, one
    /// clock reading for all of them).
    pub fn count_up(&self, peers: impl IntoIterator<Item = NodeId>) -> usize {
        let now = self.kernel().clock.now();
        let detector = self.kernel().detector.lock();
        peers
            .into_iter()
            .filter(|p| *p == self.id() || detector.is_up(*p, now))
            .count()
    }

    /// Counts a tombstone this replica forgot (eventual reaping, timeline tombstone GC), or
    /// logs why it could not.
    pub(crate) fn count_reap(&self, reaped: Result<bool>) {
        match reaped {
            Ok(true) => {
                self.kernel()
                    .counters
                    .tombstones_reaped
                    .fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(node = %self.id(), error = %e, "tombstone reaping failed"),
        }
    }

    /// The node's counters.
    pub fn stats(&self) -> NodeStats {
        let c = &self.kernel().counters;
        NodeStats {
            read_repairs: c.read_repairs.load(Ordering::Relaxed),
            read_repairs_deferred: c.read_repairs_deferred.load(Ordering::Relaxed),
            hinted_handoffs: c.hinted_handoffs.load(Ordering::Relaxed),
            handoff_bytes: c.handoff_bytes.load(Ordering::Relaxed),
            coord_redirs: c.coord_redirs.load(Ordering::Relaxed),
            aae_exchanges: c.aae_exchanges.load(Ordering::Relaxed),
            aae_keys_repaired: c.aae_keys_repaired.load(Ordering::Relaxed),
            ownership_handoffs: c.ownership_handoffs.load(Ordering::Relaxed),
            tombstones_reaped: c.tombstones_reaped.load(Ordering::Relaxed),
            peer_requests_refused: c.peer_requests_refused.load(Ordering::Relaxed),
        }
    }

    /// Hints waiting for their primaries (`hints_pending`).
    pub fn hints_pending(&self) -> Result<usize> {
        self.kernel().store.hints_pending()
    }

    /// The key's partition and active preference list for a bucket of `n` replicas.
    pub fn preflist_for(&self, key: &[u8], n: u32) -> (PartitionId, Preflist) {
        let layout = self.layout();
        let p = layout.ring().partition_of(key);
        let me = self.id();
        let now = self.kernel().clock.now();
        let det = self.kernel().detector.lock();
        let apl = preflist(&layout, p, n as usize, self.kernel().dc, |node| {
            node == me || det.is_up(node, now)
        });
        (p, apl)
    }

    /// Serves the inbox until `shutdown`: each message goes to the router (the kernel's
    /// serving task, started by [`Node::spawn`]).
    pub(crate) async fn serve(self, mut inbox: Inbox<Msg>, shutdown: CancellationToken) {
        loop {
            let m = tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                m = inbox.recv() => m,
            };
            let Some(m) = m else { break };
            let backlog = inbox.len();
            self.route(m, backlog);
        }
    }

    /// Wraps an incoming message into the envelope protocols see and hands it to the router.
    fn route(&self, m: meridian_net::Incoming<Msg>, backlog: usize) {
        let meridian_net::Incoming {
            from,
            body,
            reply,
            payload,
        } = m;
        let req = Incoming {
            from,
            backlog,
            overloaded: backlog > self.kernel().cfg.overload_backlog,
            reply,
            payload,
        };
        (self.inner.router)(self, req, body);
    }

    /// Keeps the load `peer` reported with a read reply.
    pub(crate) fn note_load(&self, peer: NodeId, load: ReplicaLoad) {
        self.kernel().loads.lock().insert(peer, load);
    }

    /// The load `peer` last reported with a read reply, if it has answered one: what replica
    /// selection strategies order a read's replicas by.
    pub fn replica_load(&self, peer: NodeId) -> Option<ReplicaLoad> {
        self.kernel().loads.lock().get(&peer).copied()
    }

    /// A seeded start offset in `[0, interval)` for a periodic task.
    pub(crate) fn start_offset(&self, interval: Duration) -> Duration {
        let ms = interval.as_millis().max(1) as u64;
        Duration::from_millis(self.kernel().rng.lock().random_range(0..ms))
    }

    /// The ticker of a periodic task: its first tick after `delay` plus a seeded jitter in
    /// `[0, jitter)` (so nodes do not act in lockstep), then every `every`; a late tick delays
    /// the next ones rather than bunching them.
    pub(crate) fn ticker(
        &self,
        delay: Duration,
        jitter: Duration,
        every: Duration,
    ) -> tokio::time::Interval {
        let first = Instant::now() + delay + self.start_offset(jitter);
        let mut tick = tokio::time::interval_at(first, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick
    }

    pub(crate) async fn heartbeats(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.heartbeat_interval;
        let mut tick = self.ticker(Duration::ZERO, every, every);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            // Our own tick tells the detector whether this process was running (see
            // `FailureDetector::local_beat`).
            let now = self.kernel().clock.now();
            self.kernel().detector.lock().local_beat(now, every);
            let (version, members): (u64, Vec<NodeId>) = {
                let v = self.kernel().view.read();
                let m = v.meta.members.iter().map(|m| m.id).collect();
                (v.meta.version, m)
            };
            let me = self.id();
            // Read once per beat: every peer hears the same state.
            let memory_full = self.memory_full();
            for peer in members.into_iter().filter(|&p| p != me) {
                let _ = self.kernel().transport.send(
                    peer,
                    Msg::Kernel(KernelMsg::Heartbeat {
                        from: me,
                        version,
                        memory_full,
                    }),
                );
            }
        }
    }

    /// The bucket parameters the trees and handoff need of a key: its bucket's `allow_mult` and `n_val`.
    pub(crate) fn bucket_params(&self, key: &[u8]) -> (bool, u32) {
        let (bucket, _) = bucket_and_key(key);
        let p = self.registry().resolve(bucket, &Props::default());
        (p.allow_mult, p.n_val)
    }

    /// Whether `node` is one of the first `n_val` replicas of `partition` for `key`'s bucket.
    pub(crate) fn holds(&self, node: NodeId, partition: PartitionId, key: &[u8]) -> bool {
        let (_, n_val) = self.bucket_params(key);
        let l = self.layout();
        l.replicas(partition)
            .iter()
            .position(|&r| r == node)
            .is_some_and(|i| i < n_val as usize)
    }
}

/// A protocol: the state of one module and the handler of its message enum. The kernel calls
/// [`Protocol::handle`] for every incoming message of the protocol's [`Msg`] variant.
pub trait Protocol {
    /// The protocol's message enum (one variant of [`Msg`]).
    type Msg;

    /// Serves one incoming message: answer through `req` (a one-way message has no reply
    /// handle and answers go nowhere), spawn a task for anything that waits.
    fn handle(&self, node: &Node, req: Incoming, msg: Self::Msg);
}

/// An incoming message's envelope as a protocol sees it.
#[derive(Debug)]
pub struct Incoming {
    /// The sending node.
    pub from: NodeId,
    /// Messages waiting in the inbox behind this one (the queue length a read reply reports).
    pub backlog: usize,
    /// Whether the inbox is backed up beyond `overload_backlog`.
    pub overloaded: bool,
    reply: Option<Responder<Msg>>,
    /// Bulk bytes that came beside the message (a large-object chunk).
    pub payload: Option<meridian_net::Payload>,
}

impl Incoming {
    /// Answers the request (nothing for a one-way message).
    pub fn answer(self, msg: impl Into<Msg>) {
        self.answer_with(msg, None);
    }

    /// Answers the request with `payload` beside the answer.
    pub fn answer_with(self, msg: impl Into<Msg>, payload: Option<meridian_net::Payload>) {
        if let Some(r) = self.reply {
            let _ = r.respond_with(msg.into(), payload);
        }
    }

    /// When the node is overloaded, answers `overload` and returns `None`; else gives the
    /// request back. A one-way message is never refused: nobody would hear the refusal, and
    /// dropping it would only defer its work to a repair.
    pub fn refuse_if_overloaded(self) -> Option<Incoming> {
        if self.overloaded && self.reply.is_some() {
            self.answer(RemoteError::Overload);
            return None;
        }
        Some(self)
    }

    /// Refuses a peer request that asks for more than the node's own limits allow, unserved:
    /// counts it (`peer_requests_refused`) and answers `BadRequest` with `why` (which names
    /// the field).
    pub fn refuse_oversized(self, node: &Node, why: String) {
        node.kernel()
            .counters
            .peer_requests_refused
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(node = %node.id(), peer = %self.from, %why, "refused a peer request");
        self.answer(RemoteError::BadRequest(why));
    }

    /// Answers a message the node does not serve (a reply sent as a request, ...).
    pub fn unexpected(self, node: &Node, msg: &dyn std::fmt::Debug) {
        tracing::debug!(node = %node.id(), peer = %self.from, msg = ?msg, "unexpected message");
        self.answer(RemoteError::BadRequest(
            "not a request this node serves".into(),
        ));
    }
}

impl Protocol for Kernel {
    type Msg = KernelMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: KernelMsg) {
        match msg {
            KernelMsg::Heartbeat {
                from: hb,
                version,
                memory_full,
            } => {
                self.detector.lock().heartbeat(hb, self.clock.now());
                self.memory.note_peer(hb, memory_full);
                self.peer_versions.lock().insert(hb, version);
                node.on_peer_version(hb, version);
            }
            KernelMsg::Meta(meta) => {
                node.adopt(*meta);
            }
            KernelMsg::Change(change) => {
                let node = node.clone();
                tokio::spawn(async move {
                    req.answer(KernelMsg::ChangeReply(
                        node.claimant_apply(&change).map(Box::new),
                    ));
                });
            }
            KernelMsg::Drained { from: peer, epoch } => node.on_drained(peer, epoch),
            KernelMsg::ClockRead => req.answer(KernelMsg::ClockReading(self.clock.now().0)),
            KernelMsg::Sync(meta) => {
                node.adopt(*meta);
                req.answer(KernelMsg::Synced(self.view.read().meta.version));
            }
            other @ (KernelMsg::ChangeReply(_)
            | KernelMsg::ClockReading(_)
            | KernelMsg::Synced(_)) => req.unexpected(node, &other),
        }
    }
}
