//! [`SimCluster`]: the real replication nodes ([`EventualNode`]) of a multi-DC cluster in one
//! process, on an in-process network behind the WAN emulator, run by the caller's paused-clock
//! tokio runtime so every delay is virtual.
//!
//! Each node has a [`SimDisk`] (its storage across crashes, with an fsync policy) and a clock
//! derived from virtual time with its own seeded offset (±20 ms) and drift (±50 ppm)
//! ([`SkewedClock`] over [`TokioClock`]), which a fault can jump forward or set back. A crash stops the node's tasks, takes it off the network and
//! crashes (or wipes) its disk; a restart mounts the disk again under a new incarnation and
//! starts a new node from the metadata it had last adopted (kept across the crash, as a
//! durable node keeps its ring; peers push anything newer).
//!
//! Determinism: everything is created in a fixed order, randomness comes from seeds derived
//! from [`SimConfig::seed`], and the nodes' own code takes time from the clocks and tokio's
//! paused timers only, so one seed replays one run exactly.

use crate::disk::{SimDisk, SyncPolicy};
use meridian_cluster::{Member, Ring, Topology, claim};
use meridian_core::{Clock, DcId, NodeId, SkewedClock, Timestamp};
use meridian_net::MemNetwork;
use meridian_net::wan::{LinkConfig, Placement, WanConfig, WanControl, WanEmulator};
use meridian_replication::{
    BucketProps, Buckets, ClusterMeta, ClusterShape, EventualNode, MemberRecord, MetaChange, Msg,
    NodeConfig, TlObserver, TlTrace, TokioClock,
};
use parking_lot::RwLock;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The shape and settings of a simulated cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Seed of every random choice (WAN, nodes, disks).
    pub seed: u64,
    /// Number of DCs.
    pub dcs: u32,
    /// Nodes per DC.
    pub nodes_per_dc: u32,
    /// Ring partitions.
    pub q: u32,
    /// The layout's target N.
    pub n: u32,
    /// One-way latency between DCs.
    pub wan_latency: Duration,
    /// Jitter of the inter-DC link (fraction of the latency).
    pub jitter: f64,
    /// One-way latency inside a DC.
    pub lan_latency: Duration,
    /// Jitter of the intra-DC links (fraction of the latency; the spec's LAN is 167 µs RTT
    /// with 90 µs of jitter, 0.54).
    pub lan_jitter: f64,
    /// Each disk's fsync policy.
    pub sync: SyncPolicy,
    /// Heartbeat period.
    pub heartbeat: Duration,
    /// Hinted/ownership handoff period.
    pub handoff: Duration,
    /// Anti-entropy exchange period.
    pub anti_entropy: Duration,
    /// Buckets besides `default`.
    pub buckets: BTreeMap<String, BucketProps>,
    /// Read balancing: each node's service model (by node id; `real` for the others).
    pub service_models: BTreeMap<NodeId, meridian_replication::ServiceModel>,
    /// Read balancing: the default service model of every node not in `service_models`.
    pub service_model: meridian_replication::ServiceModel,
    /// Read balancing: read workers per node.
    pub read_workers: usize,
    /// Read balancing: how replicas claim deferred reads.
    pub deferred_claim: meridian_replication::DeferredClaim,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            dcs: 2,
            nodes_per_dc: 3,
            q: 64,
            n: 3,
            wan_latency: Duration::from_millis(100),
            jitter: 0.0,
            lan_latency: Duration::from_millis(1),
            lan_jitter: 0.0,
            sync: SyncPolicy::Always,
            heartbeat: Duration::from_millis(500),
            handoff: Duration::from_secs(2),
            anti_entropy: Duration::from_secs(2),
            buckets: BTreeMap::new(),
            service_models: BTreeMap::new(),
            service_model: meridian_replication::ServiceModel::Real,
            read_workers: 4,
            deferred_claim: meridian_replication::DeferredClaim::Token,
        }
    }
}

/// One simulated machine: its disk and clock outlive crashes; its node does not.
struct Machine {
    id: NodeId,
    dc: DcId,
    disk: SimDisk,
    clock: Arc<SkewedClock<TokioClock>>,
    incarnation: u32,
    /// How many times a crash took state its node had stored (a wipe, or unsynced batches
    /// lost): each time the node resumes as a new replica life (see `life_observer`).
    lives_lost: u32,
    stop: Option<CancellationToken>,
    /// The metadata the node last adopted (kept across a crash, as a node persists it).
    meta: ClusterMeta,
}

/// The live nodes, shared with workload clients (a crashed node is absent).
pub type LiveNodes = Arc<RwLock<BTreeMap<NodeId, EventualNode>>>;

/// How many times each machine has crashed so far, shared with workload clients: a client
/// whose coordinator crashed while an operation ran never hears its answer (a real client
/// sees its connection drop), whatever the dying node's code returned.
pub type CrashCounts = Arc<RwLock<BTreeMap<NodeId, u32>>>;

/// A running simulated cluster. See the module docs.
pub struct SimCluster {
    cfg: SimConfig,
    net: MemNetwork<Msg>,
    emulator: WanEmulator,
    wan: WanControl,
    meta: ClusterMeta,
    machines: Vec<Machine>,
    live: LiveNodes,
    stop: CancellationToken,
    rng: ChaCha8Rng,
    /// The timeline observer every node (restarted ones too) reports to.
    tl_observer: Option<TlObserver>,
    crashes: CrashCounts,
}

impl SimCluster {
    /// Builds and starts the cluster. Call inside a (paused-clock) tokio runtime.
    ///
    /// # Panics
    /// If the configuration cannot be placed (e.g. fewer nodes than `n`) or a bucket does not
    /// validate: scenarios are fixed code, so this is a programming error.
    pub fn start(cfg: SimConfig) -> SimCluster {
        let ids: Vec<NodeId> = (1..=cfg.dcs * cfg.nodes_per_dc).map(NodeId).collect();
        let dc_of = |id: NodeId| DcId((id.0 - 1) / cfg.nodes_per_dc);
        let records: Vec<MemberRecord> = ids
            .iter()
            .map(|&id| MemberRecord::in_process(id, dc_of(id)))
            .collect();
        let emulator = WanEmulator::new(WanConfig {
            seed: cfg.seed,
            intra_dc: LinkConfig::wan(cfg.lan_latency * 2, cfg.lan_jitter),
            inter_dc: LinkConfig::wan(cfg.wan_latency * 2, cfg.jitter),
            nodes: records
                .iter()
                .map(|r| Placement {
                    node: r.id,
                    dc: r.dc,
                })
                .collect(),
            ..WanConfig::default()
        })
        .expect("valid WAN settings");
        let topo =
            Topology::new(records.iter().map(|r| Member::new(r.id, r.dc))).expect("topology");
        let layout = claim(&topo, Ring::new(cfg.q).expect("ring"), cfg.n as usize).expect("layout");
        let mut buckets = cfg.buckets.clone();
        buckets
            .entry(meridian_replication::DEFAULT_BUCKET_NAME.to_owned())
            .or_default()
            .props
            .n_val
            .get_or_insert(cfg.n);
        let registry = Buckets::from_map(ClusterShape::of(&layout), buckets).expect("buckets");
        let meta = ClusterMeta::new(layout, records, &registry).expect("metadata");
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5157_c1a5);
        let machines = ids
            .iter()
            .map(|&id| Machine {
                id,
                dc: dc_of(id),
                disk: SimDisk::new(cfg.sync),
                // Loosely synchronized clocks: each node off by up to ±20 ms and drifting by
                // up to ±50 ppm (faults add jumps and larger skews).
                clock: Arc::new(SkewedClock::new(
                    TokioClock::new(Timestamp(1_700_000_000_000_000)),
                    rand::Rng::random_range(&mut rng, -20_000..=20_000),
                    rand::Rng::random_range(&mut rng, -50.0..=50.0),
                )),
                incarnation: 1,
                lives_lost: 0,
                stop: None,
                meta: meta.clone(),
            })
            .collect();
        let wan = emulator.control();
        let mut c = SimCluster {
            cfg,
            net: MemNetwork::new(),
            emulator,
            wan,
            meta,
            machines,
            live: Arc::new(RwLock::new(BTreeMap::new())),
            stop: CancellationToken::new(),
            rng: ChaCha8Rng::seed_from_u64(rand::Rng::random(&mut rng)),
            tl_observer: None,
            crashes: CrashCounts::default(),
        };
        for i in 0..c.machines.len() {
            c.launch(i);
        }
        if c.cfg.sync == SyncPolicy::EverySec {
            let disks: Vec<SimDisk> = c.machines.iter().map(|m| m.disk.clone()).collect();
            let stop = c.stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => break,
                        _ = tick.tick() => disks.iter().for_each(SimDisk::sync),
                    }
                }
            });
        }
        c
    }

    fn launch(&mut self, i: usize) {
        let m = &mut self.machines[i];
        let (t, inbox) = self.net.join(m.id).expect("a machine joins once per life");
        t.layer(|w| self.emulator.wrap(w));
        let mut nc = NodeConfig::new(m.id);
        nc.incarnation = m.incarnation;
        nc.seed = self.cfg.seed ^ (u64::from(m.id.0) << 32) ^ u64::from(m.incarnation);
        nc.heartbeat_interval = self.cfg.heartbeat;
        nc.detector.first_interval = self.cfg.heartbeat;
        nc.detector.min_std_dev = self.cfg.heartbeat / 2;
        nc.handoff_interval = self.cfg.handoff;
        nc.anti_entropy_interval = self.cfg.anti_entropy;
        nc.anti_entropy_tree = meridian_cluster::MerkleConfig::new(16, 2).expect("tree shape");
        nc.service_model = self
            .cfg
            .service_models
            .get(&m.id)
            .copied()
            .unwrap_or(self.cfg.service_model);
        nc.read_workers = self.cfg.read_workers;
        nc.deferred_claim = self.cfg.deferred_claim;
        let meta = if m.meta.member(m.id).is_some() {
            m.meta.clone()
        } else {
            // It left the cluster and crashed since: it restarts as a node waiting to join
            // (version 0: it serves nothing until a member sends it the cluster's document).
            let mut joining = m.meta.clone();
            joining.members.extend(self.meta.member(m.id).cloned());
            joining.version = 0;
            joining
        };
        let node = EventualNode::new(
            nc,
            m.disk.mount(),
            m.clock.clone() as Arc<dyn Clock>,
            t,
            meta,
        );
        if let Some(o) = &self.tl_observer {
            node.set_timeline_observer(Self::life_observer(o, m.id, m.lives_lost));
        }
        let stop = self.stop.child_token();
        node.spawn(inbox, stop.clone());
        m.stop = Some(stop);
        self.live.write().insert(m.id, node);
    }

    /// The observer a node gets after `lives_lost` crashes that took stored state (a disk
    /// wipe, or unsynced batches under a lossy fsync policy): the node resumes from what its
    /// disk kept, which can be older than what it had applied before (that is what the wipe
    /// or the policy gives up), so its applies are logged as those of a new replica,
    /// [`life_id`], and the timeline-order checker judges each life's sequence on its own. A
    /// crash that lost nothing keeps the node's id: it must never go back.
    fn life_observer(o: &TlObserver, id: NodeId, lives_lost: u32) -> TlObserver {
        if lives_lost == 0 {
            return o.clone();
        }
        let o = o.clone();
        let life = life_id(id, lives_lost);
        Arc::new(move |t| match t {
            TlTrace::Applied { key, record, .. } => o(TlTrace::Applied {
                key,
                node: life,
                record,
            }),
            issued => o(issued),
        })
    }

    /// Installs `observer` on every live node and on every node started later (restarts), so
    /// it sees every timeline record any node issues or stores.
    pub fn set_timeline_observer(&mut self, observer: TlObserver) {
        for (id, node) in self.live.read().iter() {
            let lost = self
                .machines
                .iter()
                .find(|m| m.id == *id)
                .map_or(0, |m| m.lives_lost);
            node.set_timeline_observer(Self::life_observer(&observer, *id, lost));
        }
        self.tl_observer = Some(observer);
    }

    /// The nodes, by id, of the machines that are up.
    pub fn live(&self) -> LiveNodes {
        self.live.clone()
    }

    /// Each machine's crash count (absent: never crashed).
    pub fn crash_counts(&self) -> CrashCounts {
        self.crashes.clone()
    }

    /// Every machine's id and DC.
    pub fn machines(&self) -> Vec<(NodeId, DcId)> {
        self.machines.iter().map(|m| (m.id, m.dc)).collect()
    }

    /// The WAN emulator's control (partitions, loss, latency).
    pub fn wan(&self) -> &WanControl {
        &self.wan
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    fn index(&self, id: NodeId) -> usize {
        self.machines
            .iter()
            .position(|m| m.id == id)
            .unwrap_or_else(|| panic!("{id} is not a machine of this cluster"))
    }

    /// Whether `id` is up.
    pub fn is_up(&self, id: NodeId) -> bool {
        self.machines[self.index(id)].stop.is_some()
    }

    /// Crashes `id`: its tasks stop, it leaves the network, its disk loses what the fsync
    /// policy allows (`wipe`: everything). Returns a description for the run's log.
    pub fn crash(&mut self, id: NodeId, wipe: bool) -> String {
        let i = self.index(id);
        let Some(stop) = self.machines[i].stop.take() else {
            return format!("{id} already down");
        };
        stop.cancel();
        *self.crashes.write().entry(id).or_insert(0) += 1;
        if let Some(node) = self.live.write().remove(&id) {
            self.machines[i].meta = node.meta();
        }
        self.net.leave(id);
        let m = &mut self.machines[i];
        if wipe {
            m.disk.wipe();
            m.lives_lost += 1;
            format!("{id} crashed, disk wiped")
        } else {
            let r = m.disk.crash(&mut self.rng);
            if r.lost_batches > 0 {
                m.lives_lost += 1;
            }
            format!(
                "{id} crashed, kept {} and lost {} unsynced write batches",
                r.kept_batches, r.lost_batches
            )
        }
    }

    /// Restarts a crashed `id` under its next incarnation.
    pub fn restart(&mut self, id: NodeId) {
        let i = self.index(id);
        if self.machines[i].stop.is_some() {
            return;
        }
        self.machines[i].incarnation += 1;
        self.launch(i);
    }

    /// Restarts every crashed machine.
    pub fn restart_all(&mut self) {
        for m in self.machines.iter().map(|m| m.id).collect::<Vec<_>>() {
            self.restart(m);
        }
    }

    /// Applies a membership change through a live node (the claimant forwards it), retrying
    /// every half second while it is refused (a previous handoff still running), at most
    /// `attempts` times.
    pub async fn change_membership(
        &self,
        change: MetaChange,
        attempts: u32,
    ) -> Result<(), meridian_replication::ReplicationError> {
        let mut last = None;
        for _ in 0..attempts.max(1) {
            let node = self.live.read().values().next().cloned();
            let Some(node) = node else { break };
            match node.change(change.clone()).await {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(
            last.unwrap_or(meridian_replication::ReplicationError::MembershipRefused {
                reason: "no live node to ask".into(),
            }),
        )
    }

    /// Adds `id` back to the cluster (after a leave) with its original member record.
    pub async fn rejoin(&self, id: NodeId) -> Result<(), meridian_replication::ReplicationError> {
        let record = self
            .meta
            .member(id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} was never a member"));
        if self
            .live
            .read()
            .values()
            .next()
            .is_some_and(|n| n.layout().topology().contains(id))
        {
            return Ok(());
        }
        // Up to two minutes: the leave's handoff must finish first.
        self.change_membership(MetaChange::Join(record), 240).await
    }

    /// Rejoins every machine that left the cluster.
    pub async fn rejoin_all(&self) {
        for (id, _) in self.machines() {
            if let Err(e) = self.rejoin(id).await {
                tracing::warn!(node = %id, error = %e, "rejoin at the end of the run refused");
            }
        }
    }

    /// Sets `id`'s clock offset from true (virtual) time, in microseconds; raising it is a
    /// forward jump.
    pub fn set_clock_offset(&self, id: NodeId, offset_us: i64) {
        self.machines[self.index(id)].clock.set_offset(offset_us);
    }

    /// Every machine's clock (they outlive crashes), for a clock nemesis.
    pub fn clocks(&self) -> Vec<(NodeId, Arc<SkewedClock<TokioClock>>)> {
        self.machines
            .iter()
            .map(|m| (m.id, m.clock.clone()))
            .collect()
    }

    /// For every key, each owner's live values (owners: the first `n_val` replicas of the
    /// key's partition in the first live node's layout; a down owner is skipped).
    pub fn replica_values(
        &self,
        keys: &[bytes::Bytes],
        n_val: usize,
    ) -> BTreeMap<bytes::Bytes, BTreeMap<String, Vec<bytes::Bytes>>> {
        self.per_owner(keys, n_val, |node, key| match node.store().get(key) {
            Ok(Some(o)) => o.values().cloned().collect(),
            _ => Vec::new(),
        })
        .into_iter()
        .map(|(k, per)| {
            let per = per.into_iter().map(|(n, v)| (format!("n{}", n.0), v));
            (k, per.collect())
        })
        .collect()
    }

    /// For every key, the timeline record each of its primaries holds (primaries: the first
    /// `n_val` replicas of the key's partition in the first live node's layout; a down primary
    /// is skipped; `None`: it holds no record).
    pub fn timeline_records(
        &self,
        keys: &[bytes::Bytes],
        n_val: usize,
    ) -> BTreeMap<bytes::Bytes, BTreeMap<NodeId, Option<meridian_replication::timeline::Record>>>
    {
        self.per_owner(keys, n_val, |node, key| node.tl_local(key).ok().flatten())
    }

    /// `read(owner, key)` for every key and each of its first `n_val` owners that is up, in
    /// the first live node's layout.
    fn per_owner<T>(
        &self,
        keys: &[bytes::Bytes],
        n_val: usize,
        read: impl Fn(&EventualNode, &[u8]) -> T,
    ) -> BTreeMap<bytes::Bytes, BTreeMap<NodeId, T>> {
        let live = self.live.read();
        let Some(any) = live.values().next() else {
            return BTreeMap::new();
        };
        let layout = any.layout().clone();
        keys.iter()
            .map(|key| {
                let p = layout.ring().partition_of(key);
                let per = layout
                    .replicas(p)
                    .iter()
                    .take(n_val)
                    .filter_map(|owner| live.get(owner).map(|node| (*owner, read(node, key))))
                    .collect();
                (key.clone(), per)
            })
            .collect()
    }

    /// Stops every node.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        self.stop.cancel();
        // An observer may hold the live map, which holds the nodes, which hold the observer.
        self.live.write().clear();
    }
}

/// The replica id under which the apply log records node `id` after `lives_lost` (> 0)
/// crashes that took stored state (see `SimCluster::life_observer`): `id + 10 000 ·
/// lives_lost`.
pub fn life_id(id: NodeId, lives_lost: u32) -> NodeId {
    NodeId(id.0 + LIFE_STRIDE * lives_lost)
}

/// The machine whose life [`life_id`] names (the inverse of `life_id`): `(id, lives_lost)`.
pub fn machine_of(life: NodeId) -> (NodeId, u32) {
    (NodeId(life.0 % LIFE_STRIDE), life.0 / LIFE_STRIDE)
}

/// Machine ids stay below this; [`life_id`] adds multiples of it.
const LIFE_STRIDE: u32 = 10_000;
