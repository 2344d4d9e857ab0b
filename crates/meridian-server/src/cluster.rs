//! Cluster mode: the front ends of a node serve an [`EventualNode`] instead of the local
//! [`crate::keyspace::Keyspace`], and [`start_embedded`] runs a whole cluster in one process
//! (what `meridian up` does).
//!
//! - [`ClusterBackend`]: what a node's front ends need in cluster mode — the replication node,
//!   the shared layout, every member's name and addresses (for `GET /cluster`) and, in an
//!   embedded cluster, the WAN emulator's control (for `/wan`).
//! - The Redis-compatible view of an eventual bucket ([`ClusterBackend::get_latest`],
//!   [`ClusterBackend::set`], [`ClusterBackend::del`]): a GET shows the sibling with the
//!   greatest `(meta.ts_us, dot)` (the one last-writer-wins would keep), a SET first reads the
//!   key's context with the bucket's R so it supersedes what it read, a DEL reads the context
//!   and deletes with it.
//! - [`start_embedded`]: one `MemNetwork` wrapped by a `WanEmulator`, one `MemEngine` +
//!   `EventualNode` per node on the system clock, a layout from `claim`, and one RESP + HTTP
//!   listener pair per node; it returns once every failure detector has heard every peer.
//! - [`run_tcp`]: one node of a cluster whose nodes are separate processes (`meridian node`
//!   with a `[cluster]` section): the TCP transport to every member's peer address, optionally
//!   wrapped by a WAN emulator of this node's outgoing links. Every process derives the same
//!   layout with `claim` from the same member list. It shares the node assembly (layout and
//!   buckets, replication settings, front ends) with [`start_embedded`]. Its engine is the
//!   configured one: on the durable engine the node keeps its objects and hints across
//!   restarts, rebuilds its anti-entropy trees from them, and claims a new incarnation in its
//!   data directory before serving ([`crate::identity`]).
//!
//! Bucket changes (`PUT /buckets/{name}`) apply to the node that received them only: there is
//! no cluster metadata service yet.

use crate::config::{EngineKind, NodeConfig};
use crate::error::{Error, Result};
use crate::identity;
use crate::node::{self, Listeners, NodeState};
use bytes::Bytes;
use meridian_cluster::{Layout, Props, Quorum, Ring, Topology, claim};
use meridian_core::{Clock, DcId, NodeId, SystemClock};
use meridian_net::tcp::{self, AddressBook, TcpConfig};
use meridian_net::wan::{LinkConfig, Placement, WanConfig, WanControl, WanEmulator};
use meridian_net::{Inbox, MemNetwork, Transport};
use meridian_replication::BucketProps;
use meridian_replication::{
    Buckets, ClusterShape, EventualNode, GetOptions, GetResult, Msg, PutOptions, ReplicationError,
};
use meridian_storage::{Engine, MemEngine};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One member of the cluster as `GET /cluster` shows it.
#[derive(Debug, Clone)]
pub struct MemberInfo {
    /// The node's id.
    pub id: NodeId,
    /// Its name (`dc0-n0`).
    pub name: String,
    /// Its DC.
    pub dc: DcId,
    /// Its RESP address, when known.
    pub resp: Option<SocketAddr>,
    /// Its HTTP address, when known.
    pub http: Option<SocketAddr>,
}

/// What a node's front ends serve in cluster mode. See the module docs.
#[derive(Debug, Clone)]
pub struct ClusterBackend {
    /// The replication node the front ends call.
    pub node: EventualNode,
    /// The layout shared with the node.
    pub layout: Arc<RwLock<Layout>>,
    /// Every member, in id order.
    pub members: Vec<MemberInfo>,
    /// The WAN emulator's control, when the node runs in an embedded cluster.
    pub wan: Option<WanControl>,
}

impl ClusterBackend {
    /// The value a plain GET shows: the sibling with the greatest `(meta.ts_us, dot)`, or
    /// `None` for notfound (tombstones included).
    pub async fn get_latest(
        &self,
        key: &[u8],
    ) -> std::result::Result<Option<Bytes>, ReplicationError> {
        let got = self.node.get(key, GetOptions::default()).await?;
        Ok(got.latest().cloned())
    }

    /// A plain SET: reads the key's context (a tombstone's included) with the bucket's R,
    /// then writes `value` with it, so the write supersedes everything the read saw.
    pub async fn set(&self, key: &[u8], value: Bytes) -> std::result::Result<(), ReplicationError> {
        let read = GetOptions {
            deleted_context: true,
            ..GetOptions::default()
        };
        let ctx = self.node.get(key, read).await?.context();
        self.node
            .put(key, value, Some(&ctx), PutOptions::default())
            .await?;
        Ok(())
    }

    /// A plain DEL of one key: reads its context, deletes with it. Returns whether the key
    /// had a value.
    pub async fn del(&self, key: &[u8]) -> std::result::Result<bool, ReplicationError> {
        match self.node.get(key, GetOptions::default()).await? {
            GetResult::NotFound { .. } => Ok(false),
            found @ GetResult::Found { .. } => {
                let ctx = found.context();
                self.node
                    .delete(key, Some(&ctx), PutOptions::default())
                    .await?;
                Ok(true)
            }
        }
    }

    /// `GET /cluster`: members with this node's failure-detector verdict, DCs, layout epoch,
    /// Q, and per-node partition ownership.
    pub fn describe(&self) -> serde_json::Value {
        let layout = self.layout.read();
        let mut primary: BTreeMap<NodeId, usize> = BTreeMap::new();
        let mut secondary: BTreeMap<NodeId, usize> = BTreeMap::new();
        for replicas in layout.all_replicas() {
            for (i, n) in replicas.iter().enumerate() {
                *if i == 0 {
                    primary.entry(*n).or_default()
                } else {
                    secondary.entry(*n).or_default()
                } += 1;
            }
        }
        let members: Vec<_> = self
            .members
            .iter()
            .map(|m| {
                serde_json::json!({
                    "id": m.id.0,
                    "name": m.name,
                    "dc": m.dc.0,
                    "resp": m.resp.map(|a| a.to_string()),
                    "http": m.http.map(|a| a.to_string()),
                    "status": if self.node.is_up(m.id) { "up" } else { "down" },
                    "self": m.id == self.node.id(),
                    "partitions": {
                        "primary": primary.get(&m.id).copied().unwrap_or(0),
                        "secondary": secondary.get(&m.id).copied().unwrap_or(0),
                    },
                })
            })
            .collect();
        let dcs: Vec<_> = layout
            .topology()
            .dcs()
            .map(|d| {
                serde_json::json!({
                    "id": d.0,
                    "nodes": layout.topology().nodes_in(d).iter().map(|n| n.0).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "node": self.node.id().0,
            "members": members,
            "dcs": dcs,
            "layout": {
                "epoch": layout.epoch(),
                "q": layout.ring().q(),
                "target_n": layout.target_n(),
            },
        })
    }
}

/// Parses a quorum value: `one`, `quorum`, `all` (any case) or a number.
pub fn parse_quorum(v: &[u8]) -> Option<Quorum> {
    if v.eq_ignore_ascii_case(b"one") {
        Some(Quorum::One)
    } else if v.eq_ignore_ascii_case(b"quorum") {
        Some(Quorum::Quorum)
    } else if v.eq_ignore_ascii_case(b"all") {
        Some(Quorum::All)
    } else {
        std::str::from_utf8(v).ok()?.parse().ok().map(Quorum::Count)
    }
}

/// Parses a flag: `1`/`0`, `true`/`false`, `yes`/`no` (any case).
pub fn parse_flag(v: &[u8]) -> Option<bool> {
    if v == b"1" || v.eq_ignore_ascii_case(b"true") || v.eq_ignore_ascii_case(b"yes") {
        Some(true)
    } else if v == b"0" || v.eq_ignore_ascii_case(b"false") || v.eq_ignore_ascii_case(b"no") {
        Some(false)
    } else {
        None
    }
}

/// Applies one request option (`r`, `pr`, `w`, `dw`, `pw`, `node_confirms`, `dc_confirms`,
/// `notfound_ok`, `basic_quorum`, `timeout`/`timeout_ms`; names in any case) to `props`.
/// `reads` selects which names are valid: GET options or PUT/DELETE options.
pub fn apply_option(
    props: &mut Props,
    name: &[u8],
    value: &[u8],
    reads: bool,
) -> std::result::Result<(), String> {
    let lname = String::from_utf8_lossy(name).to_ascii_lowercase();
    let quorum = || {
        parse_quorum(value).ok_or_else(|| {
            format!(
                "invalid value '{}' for {lname}: expected one, quorum, all or a number",
                String::from_utf8_lossy(value)
            )
        })
    };
    let flag = || {
        parse_flag(value).ok_or_else(|| {
            format!(
                "invalid value '{}' for {lname}: expected 1 or 0",
                String::from_utf8_lossy(value)
            )
        })
    };
    match (lname.as_str(), reads) {
        ("r", true) => props.r = Some(quorum()?),
        ("pr", true) => props.pr = Some(quorum()?),
        ("notfound_ok", true) => props.notfound_ok = Some(flag()?),
        ("basic_quorum", true) => props.basic_quorum = Some(flag()?),
        ("w", false) => props.w = Some(quorum()?),
        ("dw", false) => props.dw = Some(quorum()?),
        ("pw", false) => props.pw = Some(quorum()?),
        ("node_confirms", false) => props.node_confirms = Some(quorum()?),
        ("dc_confirms", false) => props.dc_confirms = Some(quorum()?),
        ("timeout" | "timeout_ms", _) => {
            let ms = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&ms| ms > 0)
                .ok_or_else(|| {
                    format!(
                        "invalid timeout '{}': expected a positive number of milliseconds",
                        String::from_utf8_lossy(value)
                    )
                })?;
            props.timeout_ms = Some(ms);
        }
        _ => {
            return Err(format!(
                "unknown option '{}'; valid: {}",
                String::from_utf8_lossy(name),
                if reads {
                    "R, PR, NOTFOUND_OK, BASIC_QUORUM, TIMEOUT"
                } else {
                    "W, DW, PW, NODE_CONFIRMS, DC_CONFIRMS, TIMEOUT"
                }
            ));
        }
    }
    Ok(())
}

/// Settings of an embedded cluster (`meridian up`).
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// Number of DCs.
    pub dcs: u32,
    /// Nodes in each DC.
    pub nodes_per_dc: u32,
    /// One-way latency between DCs (the emulator's `rtt` is twice this).
    pub wan_latency: Duration,
    /// Maximum extra delay as a fraction of the minimum (0.6 = 60 %).
    pub jitter: f64,
    /// Loss probability of inter-DC messages (stream mode: retransmitted late).
    pub loss: f64,
    /// The link between nodes of one DC.
    pub intra_dc: LinkConfig,
    /// Node `i` serves RESP on `base_port + i` and HTTP on `base_port + 1000 + i`; 0 lets the
    /// OS choose every port.
    pub base_port: u16,
    /// The address every listener binds.
    pub host: IpAddr,
    /// Seed of the WAN emulator and the nodes' RNGs.
    pub seed: u64,
    /// Partitions of the ring.
    pub q: u32,
    /// The layout's target N (and the default bucket's `n_val`).
    pub n: u32,
    /// Heartbeat period of every node.
    pub heartbeat: Duration,
    /// Settings of each node's front ends (listen addresses are overwritten).
    pub node: NodeConfig,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            dcs: 2,
            nodes_per_dc: 3,
            wan_latency: Duration::from_millis(100),
            jitter: 0.0,
            loss: 0.0,
            intra_dc: LinkConfig::lan(),
            base_port: 0,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            seed: 1,
            q: 64,
            n: 3,
            heartbeat: Duration::from_millis(500),
            node: NodeConfig::default(),
        }
    }
}

/// A running embedded cluster. Stop it with [`Embedded::shutdown`].
#[derive(Debug)]
pub struct Embedded {
    /// Every member with its bound addresses, in id order (node `i` has id `i + 1`).
    pub members: Vec<MemberInfo>,
    /// Each node's shared state, in member order.
    pub states: Vec<Arc<NodeState>>,
    /// The WAN emulator's control.
    pub wan: WanControl,
    /// The shared layout.
    pub layout: Arc<RwLock<Layout>>,
    front_ends: CancellationToken,
    replication: CancellationToken,
    servers: Vec<JoinHandle<Result<()>>>,
    nodes: Vec<JoinHandle<()>>,
}

/// The name of node `index` of DC `dc` (`dc0-n0`).
pub fn member_name(dc: u32, index: u32) -> String {
    format!("dc{dc}-n{index}")
}

/// Starts an embedded cluster (see the module docs) and returns once every listener is bound
/// and every node's failure detector considers every peer up (at most `ready_timeout`).
pub async fn start_embedded(cfg: EmbeddedConfig, ready_timeout: Duration) -> Result<Embedded> {
    let bad = |m: String| Error::Config(m);
    if cfg.dcs == 0 || cfg.nodes_per_dc == 0 {
        return Err(bad("--dcs and --nodes-per-dc must be at least 1".into()));
    }
    let total = cfg.dcs * cfg.nodes_per_dc;
    if cfg.base_port != 0 && u32::from(cfg.base_port) + 1000 + total > 65_535 {
        return Err(bad(format!(
            "--base-port {} leaves no room for {total} nodes (HTTP ports are base+1000+i)",
            cfg.base_port
        )));
    }
    let ids: Vec<NodeId> = (1..=total).map(NodeId).collect();
    let dc_of = |id: NodeId| DcId((id.0 - 1) / cfg.nodes_per_dc);

    // Listeners first, so the member table carries real addresses.
    let mut listeners = Vec::new();
    let mut members = Vec::new();
    for (i, &id) in ids.iter().enumerate() {
        let port = |off: u32| {
            if cfg.base_port == 0 {
                0
            } else {
                (u32::from(cfg.base_port) + off + i as u32) as u16
            }
        };
        let mut nc = cfg.node.clone();
        nc.resp.listen = SocketAddr::new(cfg.host, port(0));
        nc.http.listen = SocketAddr::new(cfg.host, port(1000));
        let l = Listeners::bind(&nc).await?;
        let (resp, http) = l.addrs().map_err(|source| Error::Io {
            what: "reading listener addresses".into(),
            source,
        })?;
        nc.resp.listen = resp;
        nc.http.listen = http;
        let dc = dc_of(id);
        members.push(MemberInfo {
            id,
            name: member_name(dc.0, id.0 - 1 - dc.0 * cfg.nodes_per_dc),
            dc,
            resp: Some(resp),
            http: Some(http),
        });
        listeners.push((l, nc));
    }

    let placement: Vec<(NodeId, DcId)> = ids.iter().map(|&n| (n, dc_of(n))).collect();
    let wan = WanEmulator::new(WanConfig {
        seed: cfg.seed,
        intra_dc: cfg.intra_dc.clone(),
        inter_dc: LinkConfig::wan(cfg.wan_latency * 2, cfg.jitter).with_loss(cfg.loss),
        nodes: placements(&placement),
        real_time: true,
        ..WanConfig::default()
    })
    .map_err(|e| bad(format!("WAN settings: {e}")))?;
    let shared = Shared::new(&placement, cfg.q, cfg.n, BTreeMap::new(), "--")?;
    let layout = shared.layout.clone();

    let net = MemNetwork::<Msg>::new();
    let replication = CancellationToken::new();
    let front_ends = CancellationToken::new();
    let mut nodes = Vec::new();
    let mut states = Vec::new();
    let mut servers = Vec::new();
    for (&id, (l, nc)) in ids.iter().zip(listeners) {
        let (t, inbox) = net
            .join(id)
            .map_err(|e| bad(format!("joining the network: {e}")))?;
        t.layer(|w| wan.wrap(w));
        let started = shared.start_member(
            id,
            Member {
                transport: t,
                inbox,
                heartbeat: cfg.heartbeat,
                handoff: None,
                anti_entropy: None,
                seed: cfg.seed,
                engine: Arc::new(MemEngine::new()),
                incarnation: 0,
                members: members.clone(),
                wan: Some(wan.control()),
                config: nc,
                listeners: l,
            },
            &replication,
            &front_ends,
        )?;
        nodes.push(started.node);
        servers.push(started.server);
        states.push(started.state);
    }
    let embedded = Embedded {
        members,
        states,
        wan: wan.control(),
        layout,
        front_ends,
        replication,
        servers,
        nodes,
    };

    // Ready once every detector has heard every peer.
    let deadline = tokio::time::Instant::now() + ready_timeout;
    loop {
        let all_up = embedded.states.iter().all(|s| {
            let c = s.cluster.as_ref().expect("cluster state");
            ids.iter().all(|&p| c.node.is_up(p))
        });
        if all_up {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            embedded.shutdown().await;
            return Err(Error::Config(format!(
                "the cluster's failure detectors did not see every peer within {ready_timeout:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(embedded)
}

/// What every node of a cluster shares: the layout (from `claim`) and the bucket registry.
struct Shared {
    layout: Arc<RwLock<Layout>>,
    buckets: Buckets,
}

/// One node to start: its transport and what its front ends serve.
struct Member {
    transport: Transport<Msg>,
    inbox: Inbox<Msg>,
    heartbeat: Duration,
    /// Hinted-handoff period (`None`: the replication default).
    handoff: Option<Duration>,
    /// Anti-entropy period (`None`: the replication default; zero disables it).
    anti_entropy: Option<Duration>,
    seed: u64,
    /// Where the node stores its objects and hints.
    engine: Arc<dyn Engine>,
    incarnation: u32,
    members: Vec<MemberInfo>,
    wan: Option<WanControl>,
    config: NodeConfig,
    listeners: Listeners,
}

/// A started node: its front ends' state and the tasks to await on shutdown.
struct Started {
    state: Arc<NodeState>,
    node: JoinHandle<()>,
    server: JoinHandle<Result<()>>,
}

/// The emulator's placement of each node.
fn placements(placement: &[(NodeId, DcId)]) -> Vec<Placement> {
    placement
        .iter()
        .map(|&(node, dc)| Placement { node, dc })
        .collect()
}

impl Shared {
    /// The layout of `placement` with `q` partitions and target `n`, and the buckets (the
    /// `default` bucket's `n_val` defaults to `n`). `flag` prefixes the setting names in
    /// errors (`--` for flags, `cluster.` for a config file).
    fn new(
        placement: &[(NodeId, DcId)],
        q: u32,
        n: u32,
        mut buckets: BTreeMap<String, BucketProps>,
        flag: &str,
    ) -> Result<Shared> {
        let bad = |m: String| Error::Config(m);
        let topo = Topology::new(
            placement
                .iter()
                .map(|&(n, dc)| meridian_cluster::Member::new(n, dc)),
        )
        .map_err(|e| bad(format!("topology: {e}")))?;
        let ring = Ring::new(q).map_err(|e| bad(format!("{flag}q {q}: {e}")))?;
        let layout = claim(&topo, ring, n as usize).map_err(|e| {
            bad(format!(
                "placing {} nodes with {flag}n {n}: {e}",
                placement.len()
            ))
        })?;
        let layout = Arc::new(RwLock::new(layout));
        buckets
            .entry(meridian_replication::DEFAULT_BUCKET_NAME.to_owned())
            .or_default()
            .props
            .n_val
            .get_or_insert(n);
        let buckets = Buckets::from_map(ClusterShape::of(&layout.read()), buckets)
            .map_err(|e| bad(format!("buckets: {e}")))?;
        Ok(Shared { layout, buckets })
    }

    /// Starts `m`'s replication node (stopped by `replication`) on `m.engine` and the system
    /// clock, and its front ends (stopped by `front_ends`) in cluster mode.
    fn start_member(
        &self,
        id: NodeId,
        m: Member,
        replication: &CancellationToken,
        front_ends: &CancellationToken,
    ) -> Result<Started> {
        let mut rc = meridian_replication::NodeConfig::new(id);
        rc.incarnation = m.incarnation;
        rc.heartbeat_interval = m.heartbeat;
        rc.detector.first_interval = m.heartbeat;
        rc.detector.min_std_dev = m.heartbeat / 2;
        // A busy machine pauses heartbeats; do not call a peer down for that.
        rc.detector.acceptable_pause = m.heartbeat * 2;
        rc.seed = m.seed ^ u64::from(id.0);
        if let Some(d) = m.handoff {
            rc.handoff_interval = d;
        }
        if let Some(d) = m.anti_entropy {
            rc.anti_entropy_interval = d;
        }
        let engine = m.engine;
        let node = EventualNode::new(
            rc,
            engine.clone(),
            Arc::new(SystemClock::new()),
            m.transport,
            self.layout.clone(),
            self.buckets.clone(),
        );
        let handle = node.spawn(m.inbox, replication.clone());
        let backend = Arc::new(ClusterBackend {
            node,
            layout: self.layout.clone(),
            members: m.members,
            wan: m.wan,
        });
        let state = NodeState::open_cluster(m.config, engine, backend)?;
        let server = tokio::spawn(node::run(state.clone(), m.listeners, front_ends.clone()));
        Ok(Started {
            state,
            node: handle,
            server,
        })
    }
}

/// Runs one node of a TCP cluster (`meridian node` with a `[cluster]` section) until
/// `shutdown` is cancelled: binds the peer listener, starts the TCP transport with every
/// member's peer address (wrapped by a WAN emulator of this node's outgoing links with
/// `[cluster.wan]`), the replication node and the front ends on `listeners`. On shutdown
/// the front ends drain first, then the replication node and the transport stop.
pub async fn run_tcp(
    config: NodeConfig,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<()> {
    config.validate()?;
    let bad = |m: String| Error::Config(m);
    let c = config
        .cluster
        .clone()
        .ok_or_else(|| bad("run_tcp needs a [cluster] section".into()))?;
    let id = c.node_id();
    let me = c
        .me()
        .cloned()
        .ok_or_else(|| bad("cluster.id is not a member".into()))?;
    let dcs = c.dc_ids();
    let mut sorted = c.members.clone();
    sorted.sort_by_key(|m| m.id);
    let placement: Vec<(NodeId, DcId)> = sorted
        .iter()
        .map(|m| (NodeId(m.id), dcs[m.dc.as_str()]))
        .collect();
    let peer_addr = c.peer_listen.unwrap_or(me.peer);
    let peer = node::bind_one("peer", peer_addr, "cluster.peer_listen").await?;
    let (resp, http) = listeners.addrs().map_err(|source| Error::Io {
        what: "reading listener addresses".into(),
        source,
    })?;
    let members: Vec<MemberInfo> = sorted
        .iter()
        .map(|m| MemberInfo {
            id: NodeId(m.id),
            name: m.name.clone(),
            dc: dcs[m.dc.as_str()],
            resp: if m.id == c.id { Some(resp) } else { m.resp },
            http: if m.id == c.id { Some(http) } else { m.http },
        })
        .collect();
    let shared = Shared::new(&placement, c.q, c.n, config.buckets.clone(), "cluster.")?;

    let replication = CancellationToken::new();
    let book = AddressBook::new(sorted.iter().map(|m| (NodeId(m.id), m.peer)).collect());
    let tcp_config = TcpConfig {
        seed: c.seed ^ u64::from(c.id),
        ..TcpConfig::default()
    };
    let (transport, inbox) = tcp::start::<Msg>(id, peer, book, tcp_config, replication.clone());
    let wan = match &c.wan {
        Some(w) => {
            let emulator = WanEmulator::new(WanConfig {
                nodes: placements(&placement),
                // A process always runs on the real clock.
                real_time: true,
                ..w.clone()
            })
            .map_err(|e| bad(format!("cluster.wan: {e}")))?;
            transport.layer(|w| emulator.wrap(w));
            Some(emulator.control())
        }
        None => None,
    };
    // Every start is a new incarnation, so the node never reissues a dot of an earlier run:
    // an in-memory node starts empty and takes the seconds since the epoch; a durable node
    // keeps its objects and claims the next incarnation in its data directory's identity
    // file, durably, before it serves anything (see `crate::identity`).
    let now_secs = SystemClock::new().now().micros() / 1_000_000;
    let engine = node::open_engine(&config)?;
    let incarnation = match config.storage.engine {
        EngineKind::Mem => now_secs as u32,
        EngineKind::Fjall => {
            let has_data = engine.stats().live_keys > 0;
            identity::claim(&config.storage.data_dir, id, has_data, now_secs)?.incarnation
        }
    };
    tracing::info!(node = %id, %peer_addr, incarnation, engine = engine.name(),
        members = sorted.len(), "cluster node starting");
    let started = shared.start_member(
        id,
        Member {
            transport,
            inbox,
            heartbeat: Duration::from_millis(c.heartbeat_ms),
            handoff: c.handoff_ms.map(Duration::from_millis),
            anti_entropy: c.anti_entropy_ms.map(Duration::from_millis),
            seed: c.seed,
            engine,
            incarnation,
            members,
            wan,
            config,
            listeners,
        },
        &replication,
        &shutdown,
    )?;
    let served = started.server.await;
    replication.cancel();
    let _ = started.node.await;
    match served {
        Ok(r) => r,
        Err(e) => Err(Error::Config(format!("the node's front ends failed: {e}"))),
    }
}

impl Embedded {
    /// Stops the front ends (draining connections), then the replication nodes.
    pub async fn shutdown(self) {
        self.front_ends.cancel();
        for s in self.servers {
            match s.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "node stopped with an error"),
                Err(e) => tracing::warn!(error = %e, "node task failed"),
            }
        }
        self.replication.cancel();
        for n in self.nodes {
            let _ = n.await;
        }
    }
}
