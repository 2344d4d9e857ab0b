//! Cluster mode: the front ends of a node serve an [`EventualNode`] instead of the local
//! [`crate::keyspace::Keyspace`], and [`start_embedded`] runs a whole cluster in one process
//! (what `meridian up` does).
//!
//! - [`ClusterBackend`]: what a node's front ends need in cluster mode — the replication node
//!   (which follows the cluster metadata: layout, members with their addresses, buckets) and,
//!   behind a WAN emulator, its control (for `/wan`).
//! - Key requests go through [`ClusterBackend::dispatch`]
//!   ([`meridian_replication::Dispatch`]), which decides per key which protocol serves them;
//!   their errors reach the wire through [`crate::wire_error`].
//! - [`start_embedded`]: one `MemNetwork` wrapped by a `WanEmulator`, one `MemEngine` +
//!   `EventualNode` per node on the system clock, a layout from `claim`, and one RESP + HTTP
//!   listener pair per node; it returns once every failure detector has heard every peer.
//!   [`Embedded::add_node`] starts one more node and has the cluster admit it (a join).
//! - [`run_tcp`]: one node of a cluster whose nodes are separate processes (`meridian node`
//!   with a `[cluster]` section): the TCP transport to every member's peer address, optionally
//!   wrapped by a WAN emulator of this node's outgoing links. Every process derives the same
//!   first metadata version (`claim` layout, members, buckets) from the same member list;
//!   later versions (joins, leaves, bucket changes) come from the claimant, and each adopted
//!   version updates the transport's address book. A node configured with `join = true`
//!   waits, serving nothing, until a member admits it. It shares the node assembly
//!   (metadata, replication settings, front ends) with [`start_embedded`]. Its engine is the
//!   configured one: on the durable engine the node keeps its objects and hints across
//!   restarts, rebuilds its anti-entropy trees from them, and claims a new incarnation in its
//!   data directory before serving ([`crate::identity`]).
//!
//! Every node's `[balance]` settings ([`crate::config::BalanceSection`]: service model, read
//! workers, hot-key periods) and `[txn.planner]` ([`crate::config::PlannerSection`], the
//! cross-node placement planner, set on every node at start) configure its replication node; [`LocalNodes`] lists the
//! replication nodes of the process (all of an embedded cluster, the node alone with
//! [`run_tcp`]), so `PUT /balance/service-model` with `"node"` reaches another embedded node.
//!
//! Bucket and membership changes go through the claimant and reach every member
//! ([`meridian_replication::membership`]). The WAN emulator is per process: `PUT /wan`
//! changes the links of the process that received it (all nodes of an embedded cluster).

use crate::config::{EngineKind, NodeConfig};
use crate::error::{Error, Result};
use crate::identity;
use crate::node::{self, Listeners};
use crate::state::NodeState;
use meridian_cluster::{Ring, Topology, claim};
use meridian_core::{Clock, DcId, NodeId, SystemClock};
use meridian_net::tcp::{self, AddressBook, TcpConfig};
use meridian_net::wan::{LinkConfig, Placement, WanConfig, WanControl, WanEmulator};
use meridian_net::{Inbox, MemNetwork, Transport};
use meridian_replication::{BucketProps, ClusterMeta, MemberRecord, MetaChange};
use meridian_replication::{Buckets, ClusterShape, EventualNode, Msg};
use meridian_storage::{Engine, MemEngine};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use crate::cluster_backend::{
    ClusterBackend, LocalNodes, MAX_REQUEST_MS, apply_option, parse_flag, parse_quorum,
    parse_strategy, strategy_names,
};

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
    /// Hinted- and ownership-handoff period of every node (`None`: the replication default,
    /// 10 s; a layout change starts a handoff round at once regardless).
    pub handoff: Option<Duration>,
    /// Settings of each node's front ends (listen addresses are overwritten).
    pub node: NodeConfig,
    /// Buckets the cluster starts with (`[buckets.NAME]` of a node's configuration; the
    /// `default` bucket's `n_val` defaults to `n`). Later changes go through
    /// `PUT /buckets/{name}`.
    pub buckets: BTreeMap<String, BucketProps>,
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
            handoff: None,
            node: NodeConfig::default(),
            buckets: BTreeMap::new(),
        }
    }
}

/// A running embedded cluster. Stop it with [`Embedded::shutdown`].
pub struct Embedded {
    /// Every member with its bound addresses, in id order (node `i` has id `i + 1`; nodes
    /// added with [`Embedded::add_node`] follow).
    pub members: Vec<MemberRecord>,
    /// Each node's shared state, in member order.
    pub states: Vec<Arc<NodeState>>,
    /// The WAN emulator's control.
    pub wan: WanControl,
    emulator: WanEmulator,
    net: MemNetwork<Msg>,
    /// Every node of the cluster (they share one process).
    local: LocalNodes,
    cfg: EmbeddedConfig,
    front_ends: CancellationToken,
    replication: CancellationToken,
    servers: Vec<JoinHandle<Result<()>>>,
    nodes: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded")
            .field("members", &self.members)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
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
        let dc = dc_of(id);
        let name = member_name(dc.0, id.0 - 1 - dc.0 * cfg.nodes_per_dc);
        let (record, l, nc) = bind_member(&cfg, i, id, dc, name).await?;
        members.push(record);
        listeners.push((l, nc));
    }

    let wan = WanEmulator::new(WanConfig {
        seed: cfg.seed,
        intra_dc: cfg.intra_dc.clone(),
        inter_dc: LinkConfig::wan(cfg.wan_latency * 2, cfg.jitter).with_loss(cfg.loss),
        nodes: placements(&members),
        real_time: true,
        bulk_buffer: cfg.node.blob.tcp_buffer,
        ..WanConfig::default()
    })
    .map_err(|e| bad(format!("WAN settings: {e}")))?;
    let meta = first_meta(&members, cfg.q, cfg.n, cfg.buckets.clone(), "--")?;

    let mut embedded = Embedded {
        members: members.clone(),
        states: Vec::new(),
        wan: wan.control(),
        emulator: wan,
        net: MemNetwork::<Msg>::new(),
        local: LocalNodes::default(),
        cfg,
        front_ends: CancellationToken::new(),
        replication: CancellationToken::new(),
        servers: Vec::new(),
        nodes: Vec::new(),
    };
    for (&id, (l, nc)) in ids.iter().zip(listeners) {
        if let Err(e) = embedded.start_node(id, meta.clone(), l, nc) {
            embedded.shutdown().await;
            return Err(e);
        }
    }

    // Ready once every detector has heard every peer.
    if let Err(e) = embedded.wait_all_up(ready_timeout).await {
        embedded.shutdown().await;
        return Err(e);
    }
    Ok(embedded)
}

/// The RESP address a node announces to clients (`CLUSTER SLOTS`, `/cluster`): the bound
/// address, unless it is a wildcard (`0.0.0.0`, `::`), which no client can connect to; then
/// the configured address, else the bound port on the peer address's host, else loopback.
fn announced(
    bound: SocketAddr,
    configured: Option<SocketAddr>,
    peer: Option<SocketAddr>,
) -> SocketAddr {
    if !bound.ip().is_unspecified() {
        return bound;
    }
    if let Some(c) = configured.filter(|c| !c.ip().is_unspecified()) {
        return c;
    }
    let host = peer
        .map(|p| p.ip())
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    SocketAddr::new(host, bound.port())
}

/// Binds the listeners of the `i`-th node of an embedded cluster and makes its record.
async fn bind_member(
    cfg: &EmbeddedConfig,
    i: usize,
    id: NodeId,
    dc: DcId,
    name: String,
) -> Result<(MemberRecord, Listeners, NodeConfig)> {
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
    if nc.s3.listen.is_some() {
        nc.s3.listen = Some(SocketAddr::new(cfg.host, port(3000)));
    }
    // A node with a certificate serves RESP over TLS too, on BASE+4000+i.
    let tls = nc.resp.tls_cert_file.is_some();
    nc.resp.tls_port = 0;
    let mut l = Listeners::bind(&nc).await?;
    if tls {
        let addr = SocketAddr::new(cfg.host, port(4000));
        l.resp_tls = Some(node::bind_one("RESP TLS", addr, "--base-port").await?);
        nc.resp.tls_port = l.tls_addr().map_or(0, |a| a.port());
    }
    if let Some(s3) = &l.s3 {
        nc.s3.listen = s3.local_addr().ok();
    }
    let (resp, http) = l.addrs().map_err(|source| Error::Io {
        what: "reading listener addresses".into(),
        source,
    })?;
    nc.resp.listen = resp;
    nc.http.listen = http;
    let record = MemberRecord {
        id,
        name,
        dc,
        dc_name: format!("dc{}", dc.0),
        peer: None,
        resp: Some(announced(resp, None, None)),
        http: Some(http),
        resp_tls: l.tls_addr().map(|a| announced(a, None, None)),
    };
    Ok((record, l, nc))
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
    /// The cluster metadata it starts from.
    meta: ClusterMeta,
    wan: Option<WanControl>,
    config: NodeConfig,
    listeners: Listeners,
    /// The nodes of this process the new one joins.
    local: LocalNodes,
    /// Its certificate (`resp.tls-*`; with `tls-cluster`, its transport's too).
    tls: Option<Arc<meridian_net::tls::TlsServer>>,
}

/// A started node: its front ends' state and the tasks to await on shutdown.
struct Started {
    state: Arc<NodeState>,
    node: JoinHandle<()>,
    server: JoinHandle<Result<()>>,
}

/// The emulator's placement of each member.
fn placements(members: &[MemberRecord]) -> Vec<Placement> {
    members
        .iter()
        .map(|m| Placement {
            node: m.id,
            dc: m.dc,
        })
        .collect()
}

/// The first metadata version of a cluster of `members`: a `claim` layout with `q`
/// partitions and target `n`, and the buckets (the `default` bucket's `n_val` defaults to
/// `n`). `flag` prefixes the setting names in errors (`--` for flags, `cluster.` for a config
/// file).
fn first_meta(
    members: &[MemberRecord],
    q: u32,
    n: u32,
    mut buckets: BTreeMap<String, BucketProps>,
    flag: &str,
) -> Result<ClusterMeta> {
    let bad = |m: String| Error::Config(m);
    let topo = Topology::new(
        members
            .iter()
            .map(|m| meridian_cluster::Member::new(m.id, m.dc)),
    )
    .map_err(|e| bad(format!("topology: {e}")))?;
    let ring = Ring::new(q).map_err(|e| bad(format!("{flag}q {q}: {e}")))?;
    let layout = claim(&topo, ring, n as usize).map_err(|e| {
        bad(format!(
            "placing {} nodes with {flag}n {n}: {e}",
            members.len()
        ))
    })?;
    buckets
        .entry(meridian_replication::DEFAULT_BUCKET_NAME.to_owned())
        .or_insert_with(BucketProps::redis_default)
        .props
        .n_val
        .get_or_insert(n);
    let buckets = Buckets::from_map(ClusterShape::of(&layout), buckets)
        .map_err(|e| bad(format!("buckets: {e}")))?;
    ClusterMeta::new(layout, members.to_vec(), &buckets).map_err(|e| bad(e.to_string()))
}

/// Starts `m`'s replication node (stopped by `replication`) on `m.engine` and the system
/// clock, and its front ends (stopped by `front_ends`) in cluster mode.
fn start_member(
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
    m.config.balance.apply(&mut rc);
    rc.repair_wan_bytes_per_sec = m.config.blob.repair_wan_bytes_per_sec;
    rc.maxmemory = m.config.memory.maxmemory_bytes()?;
    rc.maxmemory_policy = m.config.memory.policy()?;
    let engine = m.engine;
    let node = EventualNode::new(
        rc,
        engine.clone(),
        Arc::new(SystemClock::new()),
        m.transport,
        m.meta,
    );
    if let Some(w) = &m.wan {
        // New members are placed in their DC before anything is sent to them.
        let w = w.clone();
        node.on_meta(move |meta| {
            for r in &meta.members {
                w.place(r.id, r.dc);
            }
        });
    }
    node.set_chunk_store(node::open_chunk_store(&m.config)?);
    // Every node feeds the planner the transactions it coordinates; the claimant plans.
    node.set_txn_planner(m.config.txn.planner.planner_config());
    let handle = node.spawn(m.inbox, replication.clone());
    let backend = Arc::new(ClusterBackend::in_process(node, m.wan, m.local));
    let state = NodeState::open_cluster(m.config, engine, backend, m.tls)?;
    let server = tokio::spawn(node::run(state.clone(), m.listeners, front_ends.clone()));
    Ok(Started {
        state,
        node: handle,
        server,
    })
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
    let peer_addr = c.peer_listen.unwrap_or(me.peer);
    let peer = node::bind_one("peer", peer_addr, "cluster.peer_listen").await?;
    let (resp, http) = listeners.addrs().map_err(|source| Error::Io {
        what: "reading listener addresses".into(),
        source,
    })?;
    let tls = listeners.tls_addr();
    let mut records: Vec<MemberRecord> = c
        .members
        .iter()
        .map(|m| MemberRecord {
            id: NodeId(m.id),
            name: m.name.clone(),
            dc: dcs[m.dc.as_str()],
            dc_name: m.dc.clone(),
            peer: Some(m.peer),
            resp: if m.id == c.id {
                Some(announced(resp, m.resp, Some(m.peer)))
            } else {
                m.resp
            },
            http: if m.id == c.id { Some(http) } else { m.http },
            resp_tls: if m.id == c.id {
                tls.map(|a| announced(a, m.resp_tls, Some(m.peer)))
            } else {
                m.resp_tls
            },
        })
        .collect();
    records.sort_by_key(|m| m.id);
    let meta = if c.join {
        // What the configuration says of the cluster this node joins; replaced by the
        // members' metadata once an operator admits it.
        let others: Vec<MemberRecord> = records.iter().filter(|r| r.id != id).cloned().collect();
        let mut m =
            first_meta(&others, c.q, c.n, config.buckets.clone(), "cluster.").map_err(|e| {
                bad(format!(
                    "a joining node's cluster.members must list the cluster's current members: {e}"
                ))
            })?;
        m.version = 0;
        m.members = records.clone();
        m
    } else {
        first_meta(&records, c.q, c.n, config.buckets.clone(), "cluster.")?
    };

    let replication = CancellationToken::new();
    let book = AddressBook::new(
        records
            .iter()
            .filter_map(|m| Some((m.id, m.peer?)))
            .collect(),
    );
    let secret = c.peer_secret()?;
    // One certificate for the front ends and the peer links, so a reload renews both.
    let tls = crate::state::load_tls(&config)?;
    let tcp_config = TcpConfig {
        seed: c.seed ^ u64::from(c.id),
        secret,
        bulk_lanes: config.blob.bulk_lanes,
        bulk_buffer: config.blob.tcp_buffer,
        link_bandwidth: config.blob.link_bandwidth,
        tls: tls.clone().filter(|_| config.resp.tls_cluster),
        ..TcpConfig::default()
    };
    let (transport, inbox) =
        tcp::start::<Msg>(id, peer, book.clone(), tcp_config, replication.clone());
    let wan = match &c.wan {
        Some(w) => {
            let emulator = WanEmulator::new(WanConfig {
                nodes: placements(&records),
                // A process always runs on the real clock.
                real_time: true,
                bulk_buffer: w.bulk_buffer.or(config.blob.tcp_buffer),
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
    let durable = config.storage.engine == EngineKind::Fjall;
    let data_dir = config.storage.data_dir.clone();
    let incarnation = if durable {
        let has_data = engine.stats().live_keys > 0;
        identity::claim(&data_dir, id, has_data, now_secs)?.incarnation
    } else {
        now_secs as u32
    };
    // A durable node resumes from the metadata it last adopted, when that is newer than what
    // its configuration says (a join or leave happened since the cluster was configured).
    let mut meta = meta;
    if durable
        && let Some(mut saved) = identity::load_meta(&data_dir)?
        && saved.supersedes(&meta)
    {
        if saved.member(id).is_none() {
            // It left the cluster: it keeps running outside it until admitted again.
            saved
                .members
                .extend(records.iter().find(|r| r.id == id).cloned());
        }
        tracing::info!(node = %id, version = saved.version, epoch = saved.layout.epoch(),
            "resuming from the cluster metadata saved in the data directory");
        meta = saved;
    }
    tracing::info!(node = %id, %peer_addr, incarnation, engine = engine.name(),
        members = records.len(), joining = c.join, "cluster node starting");
    let started = start_member(
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
            meta,
            wan,
            config,
            listeners,
            local: LocalNodes::default(),
            tls,
        },
        &replication,
        &shutdown,
    )?;
    let node = &started.state.cluster.as_ref().expect("cluster state").node;
    // Peers that join later are reachable once their metadata arrives.
    node.on_meta(move |m| {
        for r in &m.members {
            if let Some(p) = r.peer {
                book.set(r.id, p);
            }
        }
    });
    if durable {
        node.on_meta(move |m| {
            if let Err(e) = identity::save_meta(&data_dir, m) {
                tracing::warn!(error = %e, "could not save the cluster metadata");
            }
        });
    }
    let served = started.server.await;
    replication.cancel();
    let _ = started.node.await;
    match served {
        Ok(r) => r,
        Err(e) => Err(Error::Config(format!("the node's front ends failed: {e}"))),
    }
}

impl Embedded {
    /// Starts node `id` of this cluster from `meta` on its bound listeners.
    fn start_node(
        &mut self,
        id: NodeId,
        meta: ClusterMeta,
        listeners: Listeners,
        config: NodeConfig,
    ) -> Result<()> {
        let (t, inbox) = self
            .net
            .join(id)
            .map_err(|e| Error::Config(format!("joining the network: {e}")))?;
        t.layer(|w| self.emulator.wrap(w));
        // In-process peers exchange no bytes: the certificate serves the front ends only.
        let tls = crate::state::load_tls(&config)?;
        let started = start_member(
            id,
            Member {
                transport: t,
                inbox,
                heartbeat: self.cfg.heartbeat,
                handoff: self.cfg.handoff,
                anti_entropy: None,
                seed: self.cfg.seed,
                engine: Arc::new(MemEngine::new()),
                incarnation: 0,
                meta,
                wan: Some(self.emulator.control()),
                config,
                listeners,
                tls,
                local: self.local.clone(),
            },
            &self.replication,
            &self.front_ends,
        )?;
        self.nodes.push(started.node);
        self.servers.push(started.server);
        self.states.push(started.state);
        Ok(())
    }

    /// Waits until every node's detector considers every member up.
    async fn wait_all_up(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let all_up = self.states.iter().all(|s| {
                let c = s.cluster.as_ref().expect("cluster state");
                self.members.iter().all(|m| c.node.is_up(m.id))
            });
            if all_up {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Config(format!(
                    "the cluster's failure detectors did not see every peer within {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The replication node of member `i` (in [`Embedded::members`] order).
    pub fn node(&self, i: usize) -> &EventualNode {
        &self.states[i].cluster.as_ref().expect("cluster state").node
    }

    /// Starts one more node in DC `dc_name` (a new name creates a DC) and has the cluster
    /// admit it: a join through the claimant, after which partitions move to it and the
    /// other nodes hand their data off. Returns its record once every detector sees it.
    pub async fn add_node(
        &mut self,
        dc_name: &str,
        ready_timeout: Duration,
    ) -> Result<MemberRecord> {
        let i = self.members.len();
        let id = NodeId(self.members.iter().map(|m| m.id.0).max().unwrap_or(0) + 1);
        let current = self.node(0).meta();
        let dc = current
            .members
            .iter()
            .find(|m| m.dc_name == dc_name)
            .map(|m| m.dc)
            .unwrap_or_else(|| {
                DcId(
                    current
                        .members
                        .iter()
                        .map(|m| m.dc.0 + 1)
                        .max()
                        .unwrap_or(0),
                )
            });
        let in_dc = current.members.iter().filter(|m| m.dc == dc).count() as u32;
        let (record, l, nc) = bind_member(&self.cfg, i, id, dc, member_name(dc.0, in_dc)).await?;
        let mut record = record;
        record.dc_name = dc_name.to_owned();
        self.wan.place(id, dc);
        let mut joining = current;
        joining.version = 0;
        joining.members.push(record.clone());
        self.start_node(id, joining, l, nc)?;
        self.members.push(record.clone());
        self.node(0)
            .change(MetaChange::Join(record.clone()))
            .await
            .map_err(|e| Error::Config(format!("join refused: {e}")))?;
        self.wait_all_up(ready_timeout).await?;
        Ok(record)
    }

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

#[cfg(test)]
mod tests {
    use super::{MAX_REQUEST_MS, announced, apply_option};
    use meridian_cluster::Props;
    use std::net::SocketAddr;

    #[test]
    fn huge_timeout_and_hedge_options_are_refused_naming_the_option() {
        let mut p = Props::default();
        let huge = u64::MAX.to_string();
        for (name, reads) in [("TIMEOUT", true), ("timeout_ms", false), ("HEDGE_MS", true)] {
            let e = apply_option(&mut p, name.as_bytes(), huge.as_bytes(), reads).unwrap_err();
            assert!(
                e.starts_with(&format!("invalid {}", name.to_ascii_lowercase())),
                "{e}"
            );
            let over = (MAX_REQUEST_MS + 1).to_string();
            assert!(apply_option(&mut p, name.as_bytes(), over.as_bytes(), reads).is_err());
            let max = MAX_REQUEST_MS.to_string();
            apply_option(&mut p, name.as_bytes(), max.as_bytes(), reads).unwrap();
        }
        assert_eq!(p.timeout_ms, Some(MAX_REQUEST_MS));
        assert_eq!(p.hedge_ms, Some(MAX_REQUEST_MS));
    }

    #[test]
    fn a_wildcard_listener_announces_a_connectable_address() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            announced(a("10.0.0.5:7000"), None, None),
            a("10.0.0.5:7000")
        );
        assert_eq!(
            announced(a("0.0.0.0:7000"), Some(a("10.0.0.5:7000")), None),
            a("10.0.0.5:7000")
        );
        assert_eq!(
            announced(a("0.0.0.0:7000"), None, Some(a("10.0.0.6:9000"))),
            a("10.0.0.6:7000")
        );
        assert_eq!(
            announced(a("0.0.0.0:7000"), None, None),
            a("127.0.0.1:7000")
        );
    }
}
