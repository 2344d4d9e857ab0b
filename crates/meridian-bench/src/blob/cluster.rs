//! The cluster `meridian bench blob` transfers against: the embedded cluster's parts (one
//! `MemNetwork` behind a real-time WAN emulator, `MemEngine` + `EventualNode` per node on the
//! system clock, a `claim` layout) with the object service of each node
//! ([`meridian_server::objects::Objects`] over a [`ClusterBackend`]), without the RESP/HTTP
//! listeners the benchmark does not use.
//!
//! Unlike `start_embedded`, each node gets the chunk store the run asks for **before** it
//! serves (`Node::set_chunk_store` takes one store per node, once): memory, files under a
//! directory of the run, either behind a [`ThrottledChunkStore`].
//!
//! Shapes ([`Topology`]):
//! - `local`: one node; the client's node stores everything (admission, memory, disk).
//! - `lan`: two nodes in one DC; `wan`: one node in each of two DCs. Node 1 is the client's
//!   coordinator, node 2 the "server". The link between them is [`ClusterOptions::link`].
//!
//! Placement ([`PlacementMode`]) of the bucket `blob`:
//! - `remote`: N = 1 and every object's key is chosen so that its one replica is node 2:
//!   every chunk crosses the link once per transfer, like the study's client–server copies.
//! - `both`: N = 2, W = all: both nodes store every chunk and an upload waits for node 2
//!   (a geo-replicated write: the link is on the upload's critical path; reads stay local).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use meridian_blob::throttled::{DiskConfig, DiskModel, DiskStats, RealClock};
use meridian_blob::{ChunkStore, FileChunkStore, MemChunkStore, ThrottledChunkStore};
use meridian_cluster::{Member, Props, Quorum, Ring, Topology as ClusterTopology, claim};
use meridian_core::{Clock, DcId, NodeId, SystemClock};
use meridian_net::MemNetwork;
use meridian_net::wan::{LinkConfig, Placement, WanConfig, WanControl, WanEmulator, WanStats};
use meridian_replication::{
    BucketProps, Buckets, ClusterMeta, ClusterShape, EventualNode, MemberRecord, Msg,
};
use meridian_server::cluster::{ClusterBackend, LocalNodes};
use meridian_server::objects::{Backend, BlobConfig, Objects, object_key};
use meridian_storage::MemEngine;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::BenchError;

/// The bucket every benchmark object lives in.
pub const BUCKET: &str = "blob";

/// How many nodes, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// One node.
    Local,
    /// Two nodes in one DC.
    Lan,
    /// One node in each of two DCs.
    Wan,
}

impl Topology {
    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Topology::Local => "local",
            Topology::Lan => "lan",
            Topology::Wan => "wan",
        }
    }

    fn shape(self) -> (u32, u32) {
        match self {
            Topology::Local => (1, 1),
            Topology::Lan => (1, 2),
            Topology::Wan => (2, 1),
        }
    }
}

/// Where the bucket's replicas are (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementMode {
    /// N = 1, on node 2.
    Remote,
    /// N = 2, W = all.
    Both,
}

/// Where chunks are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// In memory.
    Mem,
    /// One file per chunk, under the run's directory (no fsync).
    Files,
}

/// The emulated link between the client's node and the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkSpec {
    /// Round-trip time.
    pub rtt: Duration,
    /// Bandwidth, bytes per second (`None`: unlimited).
    pub bandwidth: Option<u64>,
}

impl LinkSpec {
    /// 1 Gb/s, 0.2 ms RTT (the study's LAN).
    pub fn lan() -> LinkSpec {
        LinkSpec {
            rtt: Duration::from_micros(200),
            bandwidth: Some(125_000_000),
        }
    }

    /// 620 Mb/s (the study's WAN iperf figure) with round trip `rtt`.
    pub fn wan(rtt: Duration) -> LinkSpec {
        LinkSpec {
            rtt,
            bandwidth: Some(77_500_000),
        }
    }

    fn config(&self) -> LinkConfig {
        let l = LinkConfig::wan(self.rtt, 0.0);
        match self.bandwidth {
            Some(b) => l.with_bandwidth(b),
            None => l,
        }
    }
}

/// Everything a benchmark cluster is made of.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterOptions {
    /// Its shape.
    pub topology: Topology,
    /// The link between node 1 and node 2 (unused with `local`).
    pub link: LinkSpec,
    /// Where the bucket's replicas are.
    pub placement: PlacementMode,
    /// Chunk stores.
    pub store: StoreKind,
    /// Where `files` stores live (a fresh subdirectory per run, removed at shutdown).
    pub files_dir: PathBuf,
    /// The server's store is behind a disk model (node 2, or the one node of `local`).
    pub disk: Option<DiskConfig>,
    /// The object service's settings on every node (not validated: chunk sizes below the
    /// configurable 64 KiB are allowed here, for the study's 16 and 32 KiB blocks).
    pub blob: BlobConfig,
    /// Per-bulk-connection socket buffer of the WAN emulator (`None`: no window cap).
    pub bulk_buffer: Option<usize>,
    /// Seed of the emulator and the nodes.
    pub seed: u64,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            topology: Topology::Local,
            link: LinkSpec::lan(),
            placement: PlacementMode::Remote,
            store: StoreKind::Mem,
            files_dir: std::env::temp_dir(),
            disk: None,
            blob: BlobConfig::default(),
            bulk_buffer: None,
            seed: 1,
        }
    }
}

/// A running benchmark cluster. Stop it with [`BlobCluster::shutdown`].
pub struct BlobCluster {
    opts: ClusterOptions,
    wan: WanControl,
    _net: MemNetwork<Msg>,
    nodes: Vec<EventualNode>,
    objects: Vec<Arc<Objects>>,
    throttle: Option<Arc<ThrottledChunkStore>>,
    stores: Vec<Arc<dyn ChunkStore>>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    dir: Option<PathBuf>,
}

fn target(reason: impl std::fmt::Display) -> BenchError {
    BenchError::Target {
        reason: reason.to_string(),
    }
}

impl BlobCluster {
    /// Starts the cluster and returns once every node's failure detector sees every peer.
    pub async fn start(opts: ClusterOptions) -> Result<BlobCluster, BenchError> {
        if let Some(d) = &opts.disk {
            d.validate().map_err(target)?;
        }
        let (dcs, per_dc) = opts.topology.shape();
        let total = dcs * per_dc;
        let ids: Vec<NodeId> = (1..=total).map(NodeId).collect();
        let dc_of = |id: NodeId| DcId((id.0 - 1) / per_dc);
        let records: Vec<MemberRecord> = ids
            .iter()
            .map(|&id| MemberRecord::in_process(id, dc_of(id)))
            .collect();
        let link = opts.link.config();
        let wan_cfg = WanConfig {
            seed: opts.seed,
            intra_dc: if opts.topology == Topology::Lan {
                link.clone()
            } else {
                LinkConfig::lan()
            },
            inter_dc: link,
            nodes: records
                .iter()
                .map(|r| Placement {
                    node: r.id,
                    dc: r.dc,
                })
                .collect(),
            real_time: true,
            bulk_buffer: opts.bulk_buffer,
            ..WanConfig::default()
        };
        let emulator = WanEmulator::new(wan_cfg).map_err(|e| target(format!("WAN: {e}")))?;
        let wan = emulator.control();
        apply_bulk_buffer(&wan, opts.bulk_buffer)?;

        let n = match (opts.topology, opts.placement) {
            (Topology::Local, _) | (_, PlacementMode::Remote) => 1,
            (_, PlacementMode::Both) => 2,
        };
        let topo = ClusterTopology::new(records.iter().map(|r| Member::new(r.id, r.dc)))
            .map_err(|e| target(format!("topology: {e}")))?;
        let layout = claim(&topo, Ring::new(64).map_err(target)?, total as usize)
            .map_err(|e| target(format!("layout: {e}")))?;
        let mut buckets = BTreeMap::new();
        buckets.insert(
            BUCKET.to_owned(),
            BucketProps {
                props: Props {
                    n_val: Some(n),
                    r: Some(Quorum::One),
                    w: Some(Quorum::All),
                    dw: Some(Quorum::One),
                    notfound_ok: Some(false),
                    allow_mult: Some(false),
                    // Chunks may wait behind many others on a narrow link.
                    timeout_ms: Some(300_000),
                    ..Props::default()
                },
                dc_rule: Some(false),
                ..BucketProps::default()
            },
        );
        buckets
            .entry(meridian_replication::DEFAULT_BUCKET_NAME.to_owned())
            .or_insert_with(BucketProps::default)
            .props
            .n_val
            .get_or_insert(total);
        let registry = Buckets::from_map(ClusterShape::of(&layout), buckets)
            .map_err(|e| target(format!("buckets: {e}")))?;
        let meta = ClusterMeta::new(layout, records, &registry).map_err(target)?;

        let dir = match opts.store {
            StoreKind::Mem => None,
            StoreKind::Files => {
                static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let d = opts
                    .files_dir
                    .join(format!("meridian-bench-blob-{}-{run}", std::process::id()));
                std::fs::create_dir_all(&d).map_err(|e| BenchError::Io {
                    path: d.display().to_string(),
                    reason: e.to_string(),
                })?;
                Some(d)
            }
        };
        let server = if total == 1 { NodeId(1) } else { NodeId(2) };
        let net = MemNetwork::<Msg>::new();
        let stop = CancellationToken::new();
        let local = LocalNodes::default();
        let mut c = BlobCluster {
            opts: opts.clone(),
            wan,
            _net: net.clone(),
            nodes: Vec::new(),
            objects: Vec::new(),
            throttle: None,
            stores: Vec::new(),
            stop: stop.clone(),
            tasks: Vec::new(),
            dir: dir.clone(),
        };
        for &id in &ids {
            let (t, inbox) = net.join(id).map_err(target)?;
            t.layer(|w| emulator.wrap(w));
            let mut rc = meridian_replication::NodeConfig::new(id);
            let heartbeat = Duration::from_millis(500);
            rc.heartbeat_interval = heartbeat;
            rc.detector.first_interval = heartbeat;
            rc.detector.min_std_dev = heartbeat / 2;
            // A machine busy hashing gigabytes pauses heartbeats: not a failure.
            rc.detector.acceptable_pause = Duration::from_secs(5);
            rc.seed = opts.seed ^ u64::from(id.0);
            let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
            let node = EventualNode::new(
                rc,
                Arc::new(MemEngine::new()),
                clock.clone(),
                t,
                meta.clone(),
            );
            let base: Arc<dyn ChunkStore> = match &dir {
                None => Arc::new(MemChunkStore::new()),
                Some(d) => Arc::new(
                    FileChunkStore::open(d.join(format!("n{}", id.0)), false).map_err(|e| {
                        BenchError::Io {
                            path: d.display().to_string(),
                            reason: e.to_string(),
                        }
                    })?,
                ),
            };
            let store: Arc<dyn ChunkStore> = match (&opts.disk, id == server) {
                (Some(cfg), true) => {
                    let t = Arc::new(ThrottledChunkStore::new(
                        base,
                        Arc::new(DiskModel::new(cfg.clone())),
                        Arc::new(RealClock::new()),
                    ));
                    c.throttle = Some(t.clone());
                    t
                }
                _ => base,
            };
            if !node.set_chunk_store(store.clone()) {
                return Err(target("the node's chunk store was already set"));
            }
            c.stores.push(store);
            c.tasks.push(node.spawn(inbox, stop.child_token()));
            let backend = Arc::new(ClusterBackend::in_process(
                node.clone(),
                Some(c.wan.clone()),
                local.clone(),
            ));
            c.objects.push(Arc::new(Objects::new(
                Backend::Cluster(backend),
                opts.blob.clone(),
                clock,
                opts.seed ^ (u64::from(id.0) << 40),
            )));
            c.nodes.push(node);
        }
        if let Err(e) = c.wait_all_up(Duration::from_secs(30)).await {
            c.shutdown().await;
            return Err(e);
        }
        Ok(c)
    }

    async fn wait_all_up(&self, timeout: Duration) -> Result<(), BenchError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ids: Vec<NodeId> = self.nodes.iter().map(|n| n.id()).collect();
            if self.nodes.iter().all(|n| ids.iter().all(|&id| n.is_up(id))) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(target(format!(
                    "the benchmark cluster's failure detectors did not see every peer within \
                     {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The options it was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// The object service of the client's node (node 1): every transfer goes through it, so
    /// its admission control is the one the run measures.
    pub fn client(&self) -> &Arc<Objects> {
        &self.objects[0]
    }

    /// The node storing the objects (node 2; node 1 with `local`).
    pub fn server(&self) -> NodeId {
        if self.nodes.len() == 1 {
            NodeId(1)
        } else {
            NodeId(2)
        }
    }

    /// The key to store object `name` under: with `remote` placement a suffix is added until
    /// the key's replica is the server.
    pub fn key_for(&self, name: &str) -> Vec<u8> {
        if self.nodes.len() == 1 || self.opts.placement == PlacementMode::Both {
            return name.as_bytes().to_vec();
        }
        let server = self.server();
        for i in 0u32.. {
            let key = format!("{name}.{i}");
            let full = object_key(BUCKET, key.as_bytes());
            let (_, apl) = self.nodes[0].preflist_for(&full, 1);
            if apl.nodes().next() == Some(server) {
                return key.into_bytes();
            }
        }
        unreachable!("some suffix lands on the server")
    }

    /// The WAN emulator's control.
    pub fn wan(&self) -> &WanControl {
        &self.wan
    }

    /// What the emulator has done so far.
    pub fn wan_stats(&self) -> WanStats {
        self.wan.stats()
    }

    /// Makes the link ideal (loading and verifying are not measured) or puts the configured
    /// one back.
    pub fn set_link_ideal(&self, ideal: bool) -> Result<(), BenchError> {
        let link = if ideal {
            LinkConfig::ideal()
        } else {
            self.opts.link.config()
        };
        let r = match self.opts.topology {
            Topology::Local => Ok(()),
            Topology::Lan => self.wan.set_intra_dc(link),
            Topology::Wan => self.wan.set_inter_dc(link),
        };
        r.map_err(|e| target(format!("WAN: {e}")))?;
        apply_bulk_buffer(&self.wan, if ideal { None } else { self.opts.bulk_buffer })
    }

    /// Switches the server's disk model on or off (no-op without one).
    pub fn set_throttle(&self, on: bool) {
        if let Some(t) = &self.throttle {
            t.set_enabled(on);
        }
    }

    /// The server's disk statistics, if it has a disk model.
    pub fn disk_stats(&self) -> Option<DiskStats> {
        self.throttle.as_ref().map(|t| t.disk().stats())
    }

    /// Bytes of chunks stored on each node.
    pub fn stored_bytes(&self) -> Vec<u64> {
        self.stores.iter().map(|s| s.stored_bytes()).collect()
    }

    /// Stops every node and removes the run's chunk files.
    pub async fn shutdown(self) {
        self.stop.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        drop(self.objects);
        drop(self.stores);
        drop(self.throttle);
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Sets the emulator's per-bulk-stream socket buffer: a chunk-carrying message then moves at
/// most `buffer / RTT` on its stream (`None`: no window cap).
fn apply_bulk_buffer(wan: &WanControl, buffer: Option<usize>) -> Result<(), BenchError> {
    wan.set_bulk_buffer(buffer);
    Ok(())
}
