//! Embedded-cluster tests of the replication layer (`eventual`: eventual-consistency buckets,
//! `timeline`: timeline buckets): 2 DCs × 3 nodes over an in-process
//! network wrapped by the WAN emulator (100 ms RTT between DCs, 2 ms inside), `MemEngine`s,
//! one `TokioClock` per node, a layout from `claim` (Q = 64, target N = 3).
//!
//! Every test runs under paused tokio time, so WAN delays, heartbeats, detector timeouts
//! and request deadlines advance instantly and deterministically; durations asserted below
//! are virtual. The WAN seed of every cluster is printed.
//!
//! Anti-entropy is off unless a test starts the cluster with [`Cluster::start_aae`], so the
//! read-repair and hand-off tests show those mechanisms alone.

use bytes::Bytes;
use meridian_cluster::{Member, MerkleConfig, Object, Props, Quorum, Ring, Role, Topology, claim};
use meridian_core::{DcId, NodeId, SkewedClock, Timestamp};
use meridian_net::MemNetwork;
use meridian_net::wan::{LinkConfig, Placement, Scope, WanConfig, WanControl, WanEmulator};
use meridian_replication::{
    BucketProps, Buckets, ClusterMeta, ClusterShape, EventualNode, GetOptions, GetResult,
    MemberRecord, MetaChange, Msg, NodeConfig, PutOptions, TokioClock,
};
use meridian_storage::{
    Engine, EngineStats, GcStats, MemEngine, StorageError, Version, WriteBatch,
};
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

// ----- harness -----

/// A `MemEngine` whose reads and writes fail while `broken` is set (a failing disk). With
/// `lazy_disk` set it behaves as an engine whose writes reach disk only when synced
/// (`everysec`): it counts its syncs, which fail while `sync_broken` is set.
#[derive(Debug, Default)]
struct FlakyEngine {
    inner: MemEngine,
    broken: AtomicBool,
    lazy_disk: AtomicBool,
    sync_broken: AtomicBool,
    syncs: std::sync::atomic::AtomicU64,
}

impl FlakyEngine {
    fn check(&self) -> meridian_storage::Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            Err(StorageError::Backend("injected failure".into()))
        } else {
            Ok(())
        }
    }
}

impl Engine for FlakyEngine {
    fn name(&self) -> &'static str {
        "flaky"
    }
    fn write_batch(&self, batch: WriteBatch) -> meridian_storage::Result<()> {
        self.check()?;
        self.inner.write_batch(batch)
    }
    fn get(&self, key: &[u8], at: Timestamp) -> meridian_storage::Result<Option<Version>> {
        self.check()?;
        self.inner.get(key, at)
    }
    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> meridian_storage::Result<Vec<(Bytes, Version)>> {
        self.check()?;
        self.inner.scan(start, end, at, limit, include_tombstones)
    }
    fn versions(&self, key: &[u8]) -> meridian_storage::Result<Vec<Version>> {
        self.inner.versions(key)
    }
    fn set_gc_horizon(&self, horizon: Timestamp) {
        self.inner.set_gc_horizon(horizon)
    }
    fn gc(&self, horizon: Timestamp) -> meridian_storage::Result<GcStats> {
        self.inner.gc(horizon)
    }
    fn clear(&self) -> meridian_storage::Result<()> {
        self.inner.clear()
    }
    fn flush(&self) -> meridian_storage::Result<()> {
        self.inner.flush()
    }
    fn write_durability(&self) -> meridian_storage::WriteDurability {
        if self.lazy_disk.load(Ordering::Relaxed) {
            meridian_storage::WriteDurability::OnSync
        } else {
            meridian_storage::WriteDurability::Volatile
        }
    }
    fn sync_written(&self) -> meridian_storage::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if self.sync_broken.load(Ordering::Relaxed) {
            return Err(StorageError::Backend("injected fsync failure".into()));
        }
        Ok(())
    }
    fn stats(&self) -> EngineStats {
        self.inner.stats()
    }
}

struct Cluster {
    nodes: Vec<EventualNode>,
    engines: Vec<Arc<FlakyEngine>>,
    configs: Vec<NodeConfig>,
    /// Per node, cancelled to stop it (children of `stop`).
    node_stops: Vec<CancellationToken>,
    net: MemNetwork<Msg>,
    emulator: WanEmulator,
    /// The cluster's first metadata version (what every node starts from).
    meta: ClusterMeta,
    wan: WanControl,
    stop: CancellationToken,
    /// When the cluster started: every node's clock reads the same time, a restarted one too.
    epoch: Instant,
    /// Payloads sent by these nodes get a bit flipped on the wire (`blob.rs`).
    damage_payloads_from: Arc<parking_lot::Mutex<BTreeSet<NodeId>>>,
    /// Each node's clock, whose offset a test may change ([`Cluster::skew`]).
    clocks: parking_lot::Mutex<std::collections::BTreeMap<NodeId, Arc<SkewedClock<TokioClock>>>>,
}

/// A wire that flips one bit of every payload sent by the nodes in `from` (damage on the
/// wire that the frame CRC cannot see: payloads are covered by their chunk digests).
struct DamagingWire {
    inner: Arc<dyn meridian_net::Wire<Msg>>,
    from: Arc<parking_lot::Mutex<BTreeSet<NodeId>>>,
}

impl DamagingWire {
    fn damage(&self, mut env: meridian_net::Envelope<Msg>) -> meridian_net::Envelope<Msg> {
        if self.from.lock().contains(&env.from)
            && let Some(p) = &env.payload
            && let meridian_net::PayloadData::Bytes(b) = p.data()
            && !b.is_empty()
        {
            let mut v = b.to_vec();
            v[b.len() / 2] ^= 0x10;
            env.payload = Some(meridian_net::Payload::bytes(Bytes::from(v)).on_stream(p.stream()));
        }
        env
    }
}

impl meridian_net::Wire<Msg> for DamagingWire {
    fn transmit(
        &self,
        to: NodeId,
        env: meridian_net::Envelope<Msg>,
    ) -> Result<(), meridian_net::NetError> {
        self.inner.transmit(to, self.damage(env))
    }

    fn transmit_wait(
        &self,
        to: NodeId,
        env: meridian_net::Envelope<Msg>,
    ) -> meridian_net::transport::BoxFuture<'_, Result<(), meridian_net::NetError>> {
        let env = self.damage(env);
        self.inner.transmit_wait(to, env)
    }
}

const DCS: u32 = 2;
const PER_DC: u32 = 3;

fn dc_of(id: NodeId) -> DcId {
    DcId((id.0 - 1) / PER_DC)
}

fn record(id: NodeId) -> MemberRecord {
    MemberRecord::in_process(id, dc_of(id))
}

impl Cluster {
    /// Starts the cluster (anti-entropy off) and waits until every failure detector has heard
    /// from everyone.
    async fn start(seed: u64, handoff_interval: Duration) -> Cluster {
        Cluster::start_aae(seed, handoff_interval, Duration::ZERO, 1000).await
    }

    /// [`Cluster::start`] with anti-entropy every `aae_interval` (zero: off), at most
    /// `aae_max_keys` keys per exchange, over small trees (16 × 16 segments).
    async fn start_aae(
        seed: u64,
        handoff_interval: Duration,
        aae_interval: Duration,
        aae_max_keys: usize,
    ) -> Cluster {
        Cluster::start_with(seed, |cfg| {
            cfg.handoff_interval = handoff_interval;
            cfg.anti_entropy_interval = aae_interval;
            cfg.anti_entropy_max_keys = aae_max_keys;
        })
        .await
    }

    /// Starts the cluster with every node's configuration changed by `tune` (anti-entropy
    /// off and hand-off every second unless it changes them; small 16 × 16 trees).
    async fn start_with(seed: u64, tune: impl Fn(&mut NodeConfig)) -> Cluster {
        println!("cluster seed = {seed}");
        let ids: Vec<NodeId> = (1..=DCS * PER_DC).map(NodeId).collect();
        let wan = WanEmulator::new(WanConfig {
            seed,
            intra_dc: LinkConfig::wan(Duration::from_millis(2), 0.0),
            inter_dc: LinkConfig::wan(Duration::from_millis(100), 0.0),
            nodes: ids
                .iter()
                .map(|&node| Placement {
                    node,
                    dc: dc_of(node),
                })
                .collect(),
            ..WanConfig::default()
        })
        .unwrap();
        let topo = Topology::new(ids.iter().map(|&n| Member::new(n, dc_of(n)))).unwrap();
        let layout = claim(&topo, Ring::new(64).unwrap(), 3).unwrap();
        let buckets = Buckets::new(ClusterShape::of(&layout)).unwrap();
        let meta =
            ClusterMeta::new(layout, ids.iter().map(|&n| record(n)).collect(), &buckets).unwrap();
        let net = MemNetwork::<Msg>::new();
        let stop = CancellationToken::new();
        let mut c = Cluster {
            nodes: Vec::new(),
            engines: Vec::new(),
            configs: Vec::new(),
            node_stops: Vec::new(),
            net,
            wan: wan.control(),
            emulator: wan,
            meta,
            stop,
            epoch: Instant::now(),
            damage_payloads_from: Default::default(),
            clocks: Default::default(),
        };
        for &id in &ids {
            let mut cfg = NodeConfig::new(id);
            cfg.heartbeat_interval = Duration::from_millis(100);
            cfg.detector.first_interval = Duration::from_millis(100);
            cfg.detector.min_std_dev = Duration::from_millis(50);
            cfg.handoff_interval = Duration::from_secs(1);
            cfg.seed = seed ^ u64::from(id.0);
            cfg.anti_entropy_interval = Duration::ZERO;
            cfg.anti_entropy_tree = MerkleConfig::new(16, 2).unwrap();
            tune(&mut cfg);
            let (node, engine, node_stop) = c.launch(cfg.clone());
            c.nodes.push(node);
            c.engines.push(engine);
            c.configs.push(cfg);
            c.node_stops.push(node_stop);
        }
        c.settle().await;
        c
    }

    /// Joins a node with `cfg` and a fresh empty engine to the network and starts it.
    fn launch(&self, cfg: NodeConfig) -> (EventualNode, Arc<FlakyEngine>, CancellationToken) {
        self.launch_with(cfg, self.meta.clone())
    }

    /// [`Cluster::launch`] from metadata `meta`.
    fn launch_with(
        &self,
        cfg: NodeConfig,
        meta: ClusterMeta,
    ) -> (EventualNode, Arc<FlakyEngine>, CancellationToken) {
        self.launch_on(cfg, meta, Arc::new(FlakyEngine::default()))
    }

    /// [`Cluster::launch_with`] over an existing `engine` (a disk that survived a crash).
    fn launch_on(
        &self,
        cfg: NodeConfig,
        meta: ClusterMeta,
        engine: Arc<FlakyEngine>,
    ) -> (EventualNode, Arc<FlakyEngine>, CancellationToken) {
        let (t, inbox) = self.net.join(cfg.id).unwrap();
        t.layer(|w| self.emulator.wrap(w));
        let from = self.damage_payloads_from.clone();
        t.layer(|inner| Arc::new(DamagingWire { inner, from }));
        let clock = Arc::new(SkewedClock::new(
            TokioClock::new(Timestamp(
                1_700_000_000_000_000 + self.epoch.elapsed().as_micros() as u64,
            )),
            0,
            0.0,
        ));
        self.clocks.lock().insert(cfg.id, clock.clone());
        let node = EventualNode::new(cfg, engine.clone(), clock, t, meta);
        let node_stop = self.stop.child_token();
        node.spawn(inbox, node_stop.clone());
        (node, engine, node_stop)
    }

    /// Starts node `id` in `dc` (waiting to join) and has the claimant admit it.
    async fn join(&mut self, id: NodeId, dc: DcId) -> ClusterMeta {
        let mut cfg = self.configs[0].clone();
        cfg.id = id;
        cfg.seed ^= u64::from(id.0);
        let mut rec = record(id);
        rec.dc = dc;
        rec.dc_name = format!("dc{}", dc.0);
        self.wan.place(id, dc);
        let mut joining = self.nodes[0].meta();
        joining.version = 0;
        joining.members.push(rec.clone());
        let (node, engine, stop) = self.launch_with(cfg.clone(), joining);
        assert_eq!(
            node.get(b"k", GetOptions::default())
                .await
                .unwrap_err()
                .code(),
            "not_joined"
        );
        self.nodes.push(node);
        self.engines.push(engine);
        self.configs.push(cfg);
        self.node_stops.push(stop);
        self.nodes[0].change(MetaChange::Join(rec)).await.unwrap()
    }

    /// Waits (at most 5 virtual minutes) until the claimant ended the handoff and every
    /// running node follows the same metadata version.
    async fn wait_handoff(&self) {
        for _ in 0..3000 {
            let metas: Vec<ClusterMeta> = self.nodes.iter().map(|n| n.meta()).collect();
            if metas
                .iter()
                .all(|m| m.previous.is_none() && m.version == metas[0].version)
            {
                return;
            }
            sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "handoff did not complete: {:?}",
            self.nodes[0].meta().previous.map(|p| p.epoch())
        );
    }

    /// The client keys stored on `id` that it does not own under its current layout.
    fn not_owned(&self, id: NodeId) -> Vec<Bytes> {
        let n = self.node(id);
        let (objects, _) = n.store().objects_after(None, usize::MAX).unwrap();
        objects
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !self.primaries(k).contains(&id))
            .collect()
    }

    /// Crashes `id` and brings it back with an empty engine (a lost disk): a new
    /// incarnation, so its dots are never reissued.
    async fn restart_wiped(&mut self, id: NodeId) {
        let i = (id.0 - 1) as usize;
        self.node_stops[i].cancel();
        self.net.leave(id);
        sleep(Duration::from_millis(10)).await;
        self.configs[i].incarnation += 1;
        let (node, engine, node_stop) = self.launch(self.configs[i].clone());
        self.nodes[i] = node;
        self.engines[i] = engine;
        self.node_stops[i] = node_stop;
    }

    /// Crashes `id` and restarts it over `engine` (what its disk kept), as a new
    /// incarnation.
    async fn restart_on(&mut self, id: NodeId, engine: Arc<FlakyEngine>) {
        let i = (id.0 - 1) as usize;
        self.node_stops[i].cancel();
        self.net.leave(id);
        sleep(Duration::from_millis(10)).await;
        self.configs[i].incarnation += 1;
        let (node, engine, node_stop) =
            self.launch_on(self.configs[i].clone(), self.meta.clone(), engine);
        self.nodes[i] = node;
        self.engines[i] = engine;
        self.node_stops[i] = node_stop;
    }

    /// Moves `id`'s clock `offset_us` away from the others' (a clock moved back stands still
    /// until the others' time catches up: clocks never read backwards).
    fn skew(&self, id: NodeId, offset_us: i64) {
        self.clocks.lock()[&id].set_offset(offset_us);
    }

    /// The objects each primary stores for `key`.
    fn objects(&self, key: &[u8]) -> Vec<Option<Object>> {
        self.primaries(key)
            .into_iter()
            .map(|p| self.node(p).store().get(key).unwrap())
            .collect()
    }

    /// Lets heartbeats flow long enough for every detector to agree with the network.
    async fn settle(&self) {
        sleep(Duration::from_secs(2)).await;
    }

    fn node(&self, id: NodeId) -> &EventualNode {
        &self.nodes[(id.0 - 1) as usize]
    }

    fn engine(&self, id: NodeId) -> &FlakyEngine {
        &self.engines[(id.0 - 1) as usize]
    }

    /// The N=3 primaries of `key`, in claim order.
    fn primaries(&self, key: &[u8]) -> Vec<NodeId> {
        let l = self.nodes[0].layout();
        l.replicas(l.ring().partition_of(key))[..3].to_vec()
    }

    /// Sets a bucket (through the claimant) and waits until every node has it.
    async fn set_bucket(&self, name: &str, props: BucketProps) {
        self.nodes[3].set_bucket(name, props).await.unwrap();
        let version = self.nodes[3].meta().version;
        for _ in 0..100 {
            if self.nodes.iter().all(|n| n.meta().version >= version) {
                return;
            }
            sleep(Duration::from_millis(50)).await;
        }
        panic!("bucket {name} did not reach every node");
    }

    /// The live values each primary stores for `key`.
    fn stored(&self, key: &[u8]) -> Vec<BTreeSet<Bytes>> {
        self.primaries(key)
            .into_iter()
            .map(|p| {
                self.node(p)
                    .store()
                    .get(key)
                    .unwrap()
                    .map(|o| o.values().cloned().collect())
                    .unwrap_or_default()
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn set(vals: &[Bytes]) -> BTreeSet<Bytes> {
    vals.iter().cloned().collect()
}

fn get_opts(f: impl FnOnce(&mut meridian_cluster::Props)) -> GetOptions {
    let mut o = GetOptions::default();
    f(&mut o.props);
    o
}

fn put_opts(f: impl FnOnce(&mut meridian_cluster::Props)) -> PutOptions {
    let mut o = PutOptions::default();
    f(&mut o.props);
    o
}

/// A key whose primaries satisfy `pred`.
fn key_where(c: &Cluster, prefix: &str, pred: impl Fn(&[NodeId]) -> bool) -> Vec<u8> {
    (0..10_000)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .find(|k| pred(&c.primaries(k)))
        .expect("some key matches")
}

mod balance;
mod blob;
mod eventual;
mod hash;
mod peer_bounds;
mod timeline;
mod truncate;
mod txn;
