//! Meridian's own nodes as a benchmark [`Target`]: the geo study's consistency **modes**
//! (`timeline.md` §9) on the embedded cluster in real time ([`EmbeddedCluster`]) or on the
//! simulator's cluster in virtual time ([`VirtualCluster`]).
//!
//! | mode | bucket | read | write |
//! |---|---|---|---|
//! | `ind1` | eventual, N=3, R=1, W=1, DW=1 | `get` | blind `put` (last writer wins) |
//! | `ind2` | eventual, N=3, R=1, W=2, DW=1 | `get` | blind `put` |
//! | `lt_qqer` | timeline, T = 3 | `read_any` | `write` |
//! | `lt_rec` | timeline, T = 3 | `read_latest` | `write` |
//!
//! Guarantees:
//! - A client of DC `d` sends every request to a node of DC `d` (round-robin by client), as
//!   the study's benchmark instances talked only to their own DC.
//! - In virtual time each request first pays the client's LAN round trip to its coordinator
//!   ([`NodeTarget::with_client_hop`]); the real-time embedded cluster is called in process.
//! - Each op's `remote` flag is the coordinator's: the node reports whether the op's critical
//!   path crossed a DC boundary.
//! - Errors become short codes ([`ReplicationError::code`], e.g. `timeout`,
//!   `master_unavailable`); a scan, which no mode serves, is `unsupported`.
//! - Both clusters are built from one [`ClusterSpec`], so a real-time and a virtual-time run
//!   of the same cell differ only in their clock.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use meridian_cluster::{Props, Quorum};
use meridian_core::NodeId;
use meridian_net::wan::LinkConfig;
use meridian_replication::timeline::{Content, Expect, InitialMaster};
use meridian_replication::{
    BucketProps, EventualNode, GetOptions, PutOptions, ReadMode, ReplicationError,
};
use meridian_server::cluster::{Embedded, EmbeddedConfig, start_embedded};
use meridian_sim::SyncPolicy;
use meridian_sim::cluster::{SimCluster, SimConfig};
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::runner::{Outcome, Payload, Request, Target};
use crate::workload::Op;

/// The bucket every mode's keys live in.
pub const BUCKET: &str = "bench";

/// A consistency mode of the geo study: consistency model × replication setting × requested
/// read version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Eventual, R=1 W=1.
    Ind1,
    /// Eventual, R=1 W=2.
    Ind2,
    /// Timeline, reads `read_any`.
    LtQqer,
    /// Timeline, reads `read_latest`.
    LtRec,
}

impl Mode {
    /// Every mode, in the study's order.
    pub const ALL: [Mode; 4] = [Mode::Ind1, Mode::Ind2, Mode::LtQqer, Mode::LtRec];

    /// The mode's name in design files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ind1 => "ind1",
            Mode::Ind2 => "ind2",
            Mode::LtQqer => "lt_qqer",
            Mode::LtRec => "lt_rec",
        }
    }

    /// The study's code for the mode in `percentiles.csv` (`ev1`, `ev2`, `any`, `lat`).
    pub fn paper_code(self) -> &'static str {
        match self {
            Mode::Ind1 => "ev1",
            Mode::Ind2 => "ev2",
            Mode::LtQqer => "any",
            Mode::LtRec => "lat",
        }
    }

    /// Whether the mode uses a timeline bucket (and so needs a warm-up for masters to
    /// migrate).
    pub fn is_timeline(self) -> bool {
        matches!(self, Mode::LtQqer | Mode::LtRec)
    }

    /// The bucket's properties for replication factor `n` and migration threshold `t`.
    pub fn bucket_props(self, n: u32, t: u32) -> BucketProps {
        if self.is_timeline() {
            let mut p = BucketProps::timeline();
            p.props.n_val = Some(n);
            p.timeline.migration_threshold = t;
            // The study's load phase inserts each key from its home DC; its master starts
            // at the insert arbiter and migrates during the warm-up.
            p.timeline.initial_master = InitialMaster::InsertArbiter;
            return p;
        }
        let w = if self == Mode::Ind2 { 2 } else { 1 };
        BucketProps {
            props: Props {
                n_val: Some(n),
                r: Some(Quorum::Count(1)),
                w: Some(Quorum::Count(w)),
                dw: Some(Quorum::Count(1)),
                notfound_ok: Some(false),
                // Riak's default of the study's time: blind writes, last writer wins.
                allow_mult: Some(false),
                ..Props::default()
            },
            ..BucketProps::default()
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = BenchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| BenchError::InvalidDesign {
                reason: format!("unknown mode `{s}`: use one of ind1, ind2, lt_qqer, lt_rec"),
            })
    }
}

/// The shape of a benchmarked cluster and its emulated network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Number of DCs.
    pub dcs: u32,
    /// Nodes in each DC.
    pub nodes_per_dc: u32,
    /// Replicas per key (N).
    pub n: u32,
    /// Ring partitions.
    pub q: u32,
    /// Round-trip time between DCs (the study's "latency" L).
    pub wan_rtt: Duration,
    /// Extra round-trip delay as a fraction of `wan_rtt`, at most (the study's "jitter" V).
    pub jitter: f64,
    /// Inter-DC loss probability (stream mode: a lost message arrives one retransmission
    /// timeout late).
    pub loss: f64,
    /// The consistency mode.
    pub mode: Mode,
    /// Timeline migration threshold T.
    pub migration_threshold: u32,
    /// Seed of the emulator and the nodes.
    pub seed: u64,
}

impl Default for ClusterSpec {
    /// The study's fixed parameters: 2 DCs, N = 3, T = 3, 100 ms RTT, no jitter.
    fn default() -> Self {
        ClusterSpec {
            dcs: 2,
            nodes_per_dc: 3,
            n: 3,
            q: 64,
            wan_rtt: Duration::from_millis(100),
            jitter: 0.0,
            loss: 0.0,
            mode: Mode::LtRec,
            migration_threshold: 3,
            seed: 1,
        }
    }
}

impl ClusterSpec {
    fn validate(&self) -> Result<(), BenchError> {
        let bad = |reason: String| Err(BenchError::InvalidDesign { reason });
        if self.dcs == 0 || self.nodes_per_dc == 0 {
            return bad("a cluster needs at least one DC and one node per DC".into());
        }
        if self.n == 0 || self.n > self.dcs * self.nodes_per_dc {
            return bad(format!(
                "N = {} must be in 1..={} (the number of nodes)",
                self.n,
                self.dcs * self.nodes_per_dc
            ));
        }
        if !(self.jitter.is_finite() && self.jitter >= 0.0) {
            return bad(format!("jitter {} must be a fraction >= 0", self.jitter));
        }
        if !(0.0..1.0).contains(&self.loss) {
            return bad(format!("loss {} must be in [0, 1)", self.loss));
        }
        if self.migration_threshold == 0 {
            return bad("the migration threshold T must be at least 1".into());
        }
        Ok(())
    }

    fn buckets(&self) -> BTreeMap<String, BucketProps> {
        BTreeMap::from([(
            BUCKET.to_owned(),
            self.mode.bucket_props(self.n, self.migration_threshold),
        )])
    }
}

/// Sends each [`Request`] to a node of the client's DC, as the spec's mode says.
#[derive(Clone)]
pub struct NodeTarget {
    dc_nodes: Arc<Vec<Vec<EventualNode>>>,
    mode: Mode,
    client_hop: Option<Duration>,
}

impl NodeTarget {
    /// A target over `dc_nodes[d]`, the nodes of DC `d`.
    pub fn new(dc_nodes: Vec<Vec<EventualNode>>, mode: Mode) -> Result<Self, BenchError> {
        if dc_nodes.is_empty() || dc_nodes.iter().any(Vec::is_empty) {
            return Err(BenchError::Target {
                reason: "every DC needs at least one node to send requests to".into(),
            });
        }
        Ok(NodeTarget {
            dc_nodes: Arc::new(dc_nodes),
            mode,
            client_hop: None,
        })
    }

    /// Makes every request first wait `rtt`: the client's round trip to its coordinator,
    /// which the geo study's benchmark machines paid over the LAN. The virtual cluster needs
    /// it: without it a request served by the coordinator's own replica takes no virtual
    /// time at all, and a closed loop of such requests would never let time advance.
    pub fn with_client_hop(mut self, rtt: Duration) -> Self {
        self.client_hop = Some(rtt);
        self
    }

    /// The nodes of every DC.
    pub fn nodes(&self) -> impl Iterator<Item = &EventualNode> {
        self.dc_nodes.iter().flatten()
    }

    fn coordinator(&self, dc: u32, client: u32) -> &EventualNode {
        let nodes = &self.dc_nodes[dc as usize % self.dc_nodes.len()];
        &nodes[client as usize % nodes.len()]
    }

    /// The protocol counters of every node, summed (`migrations`, `read_repairs`, ...).
    pub fn counters(&self) -> BTreeMap<String, f64> {
        let mut c: BTreeMap<String, f64> = BTreeMap::new();
        let mut add = |k: &str, v: u64| *c.entry(k.to_owned()).or_default() += v as f64;
        for n in self.nodes() {
            let s = n.stats();
            add("read_repairs", s.read_repairs);
            add("hinted_handoffs", s.hinted_handoffs);
            add("coordinator_redirects", s.coord_redirs);
            let t = n.tl_stats();
            add("migrations", t.migrations);
            add("wrong_master_forwards", t.wrong_master_forwards);
            add("forks", t.forks);
            add("fenced", t.fenced);
        }
        c
    }

    /// Fraction of `keys` whose timeline master is in their home DC (`keynum mod dcs`),
    /// as the first replica holding a record sees it; `None` for eventual modes.
    pub fn home_mastered(&self, keys: impl Iterator<Item = (u64, Vec<u8>)>) -> Option<f64> {
        if !self.mode.is_timeline() {
            return None;
        }
        let dcs = self.dc_nodes.len() as u64;
        let dc_of: BTreeMap<NodeId, usize> = self
            .dc_nodes
            .iter()
            .enumerate()
            .flat_map(|(d, ns)| ns.iter().map(move |n| (n.id(), d)))
            .collect();
        let (mut home, mut seen) = (0u64, 0u64);
        for (keynum, key) in keys {
            let newest = self
                .nodes()
                .filter_map(|n| n.tl_local(&key).ok().flatten())
                .max_by_key(|r| r.ver.precedence());
            if let Some(r) = newest {
                seen += 1;
                if dc_of.get(&r.master.node) == Some(&((keynum % dcs) as usize)) {
                    home += 1;
                }
            }
        }
        Some(if seen == 0 {
            0.0
        } else {
            home as f64 / seen as f64
        })
    }

    async fn read(&self, node: &EventualNode, key: &[u8]) -> Result<bool, ReplicationError> {
        match self.mode {
            Mode::Ind1 | Mode::Ind2 => node
                .get_with_path(key, GetOptions::default())
                .await
                .map(|(_, remote)| remote),
            Mode::LtQqer => node.tl_get(key, ReadMode::Any).await.map(|r| r.remote),
            Mode::LtRec => node.tl_get(key, ReadMode::Latest).await.map(|r| r.remote),
        }
    }

    async fn write(
        &self,
        node: &EventualNode,
        key: &[u8],
        value: Bytes,
    ) -> Result<bool, ReplicationError> {
        if self.mode.is_timeline() {
            node.tl_put(key, Content::Value(value), Expect::Any)
                .await
                .map(|r| r.remote)
        } else {
            node.put(key, value, None, PutOptions::default())
                .await
                .map(|r| r.remote)
        }
    }
}

/// The key a request addresses in the benchmark bucket.
pub fn bucket_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(BUCKET.len() + 1 + key.len());
    k.extend_from_slice(BUCKET.as_bytes());
    k.push(b':');
    k.extend_from_slice(key);
    k
}

fn code(e: &ReplicationError) -> String {
    e.code().to_owned()
}

impl Target for NodeTarget {
    async fn execute(&self, request: Request) -> Result<Outcome, String> {
        if let Some(rtt) = self.client_hop {
            tokio::time::sleep(rtt).await;
        }
        let node = self.coordinator(request.dc, request.client);
        let key = bucket_key(&request.key);
        let remote = match (request.op, request.payload) {
            (Op::Read, _) => self.read(node, &key).await.map_err(|e| code(&e))?,
            (Op::Update | Op::Insert, Payload::Value(v)) => self
                .write(node, &key, Bytes::from(v))
                .await
                .map_err(|e| code(&e))?,
            (Op::ReadModifyWrite, Payload::Value(v)) => {
                let r = self.read(node, &key).await.map_err(|e| code(&e))?;
                let w = self
                    .write(node, &key, Bytes::from(v))
                    .await
                    .map_err(|e| code(&e))?;
                r || w
            }
            (Op::Scan, _) => return Err("unsupported".into()),
            (op, payload) => {
                return Err(format!("bad_request({op:?} with {payload:?})"));
            }
        };
        Ok(Outcome { remote })
    }
}

/// The embedded cluster in real time: nodes with RESP and HTTP listeners on loopback, an
/// emulated WAN between them.
pub struct EmbeddedCluster {
    cluster: Embedded,
    target: NodeTarget,
}

impl EmbeddedCluster {
    /// Starts the cluster, creates the mode's bucket and waits until every node has it.
    pub async fn start(spec: &ClusterSpec) -> Result<EmbeddedCluster, BenchError> {
        spec.validate()?;
        let cfg = EmbeddedConfig {
            dcs: spec.dcs,
            nodes_per_dc: spec.nodes_per_dc,
            wan_latency: spec.wan_rtt / 2,
            jitter: spec.jitter,
            loss: spec.loss,
            intra_dc: LinkConfig::lan(),
            seed: spec.seed,
            q: spec.q,
            n: spec.n,
            buckets: spec.buckets(),
            ..EmbeddedConfig::default()
        };
        let cluster = start_embedded(cfg, Duration::from_secs(60))
            .await
            .map_err(|e| BenchError::Target {
                reason: format!("starting the embedded cluster: {e}"),
            })?;
        let mut dc_nodes = vec![Vec::new(); spec.dcs as usize];
        for (i, m) in cluster.members.iter().enumerate() {
            dc_nodes[m.dc.0 as usize].push(cluster.node(i).clone());
        }
        let target = NodeTarget::new(dc_nodes, spec.mode)?;
        Ok(EmbeddedCluster { cluster, target })
    }

    /// The target sending requests to this cluster.
    pub fn target(&self) -> NodeTarget {
        self.target.clone()
    }

    /// Stops every node.
    pub async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

/// The simulator's cluster in virtual time: the same nodes, on an in-process network behind
/// the WAN emulator, with every delay virtual. Start it inside a current-thread tokio runtime
/// whose clock is paused ([`virtual_runtime`]).
pub struct VirtualCluster {
    cluster: SimCluster,
    target: NodeTarget,
}

/// A current-thread runtime with a paused clock: time advances only when every task waits,
/// so a run of minutes takes as long as its computation.
pub fn virtual_runtime() -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| BenchError::Target {
            reason: format!("building the virtual-time runtime: {e}"),
        })
}

impl VirtualCluster {
    /// Starts the cluster (in-memory disks, no fault), with the mode's bucket. Must run on a
    /// paused-clock runtime.
    pub async fn start(spec: &ClusterSpec) -> Result<VirtualCluster, BenchError> {
        spec.validate()?;
        let lan = LinkConfig::lan();
        let cluster = SimCluster::start(SimConfig {
            seed: spec.seed,
            dcs: spec.dcs,
            nodes_per_dc: spec.nodes_per_dc,
            q: spec.q,
            n: spec.n,
            wan_latency: spec.wan_rtt / 2,
            jitter: spec.jitter,
            lan_latency: lan.rtt / 2,
            lan_jitter: lan.jitter,
            // The study ran Riak in memory; no fsync cost is modelled.
            sync: SyncPolicy::Never,
            buckets: spec.buckets(),
            ..SimConfig::default()
        });
        // Let the failure detectors hear from everyone before the load starts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut dc_nodes = vec![Vec::new(); spec.dcs as usize];
        {
            let live = cluster.live();
            let live = live.read();
            for (id, dc) in cluster.machines() {
                if let Some(n) = live.get(&id) {
                    dc_nodes[dc.0 as usize].push(n.clone());
                }
            }
        }
        // Tokio's timers tick every millisecond, so the LAN round trip costs 1 virtual ms.
        let target = NodeTarget::new(dc_nodes, spec.mode)?.with_client_hop(lan.rtt);
        Ok(VirtualCluster { cluster, target })
    }

    /// The target sending requests to this cluster.
    pub fn target(&self) -> NodeTarget {
        self.target.clone()
    }

    /// Stops every node.
    pub fn shutdown(self) {
        self.cluster.shutdown();
    }
}
