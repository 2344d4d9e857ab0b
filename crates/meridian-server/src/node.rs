//! A running node: one storage engine, served over RESP and HTTP, with its background work.
//!
//! [`run`] takes already-bound listeners and a shutdown token, so tests start nodes on port 0
//! and the binary is a thin wrapper. On shutdown the node stops accepting, lets open requests
//! finish, stops its background tasks, and flushes the engine before returning: with the
//! durable engine every acknowledged write is on disk when [`run`] returns, whatever the
//! fsync policy.

use crate::cluster::ClusterBackend;
use crate::config::{EngineKind, NodeConfig};
use crate::error::{Error, Result};
use crate::keyspace::{Keyspace, KeyspaceConfig};
use crate::metrics::{EngineGauges, Frontend, MemberGauge, Metrics, ReplicationGauges};
use meridian_core::{Clock, SystemClock};
use meridian_storage::{Engine, FjallConfig, FjallEngine, MemEngine};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Samples the replication layer of a cluster-mode node for `/metrics`.
fn replication_gauges(c: &ClusterBackend) -> ReplicationGauges {
    let hints_pending = match c.node.hints_pending() {
        Ok(n) => Some(n as u64),
        Err(e) => {
            warn!(error = %e, "counting pending hints for /metrics");
            None
        }
    };
    ReplicationGauges {
        stats: c.node.stats(),
        hints_pending,
        layout_epoch: c.node.layout().epoch(),
        members: c
            .node
            .meta()
            .members
            .iter()
            .map(|m| MemberGauge {
                name: m.name.clone(),
                dc: m.dc.0,
                up: c.node.is_up(m.id),
            })
            .collect(),
        timeline: c.node.tl_stats(),
        balance: c.node.balance_stats(),
        txn: c.node.txn_stats(),
        txn_moves: c.node.txn_move_stats(),
    }
}

/// Everything the front ends of one node share.
#[derive(Debug)]
pub struct NodeState {
    /// The configuration the node was started with.
    pub config: NodeConfig,
    /// The storage engine.
    pub engine: Arc<dyn Engine>,
    /// Redis string semantics over the engine.
    pub keyspace: Arc<Keyspace>,
    /// Operation and connection metrics.
    pub metrics: Arc<Metrics>,
    /// The node's clock.
    pub clock: Arc<dyn Clock>,
    /// Cluster mode: the front ends serve this replication node instead of `keyspace`.
    pub cluster: Option<Arc<ClusterBackend>>,
    /// Large objects (the S3 endpoint's service), over the keyspace or the cluster.
    pub objects: Arc<crate::objects::Objects>,
    started: Instant,
}

impl NodeState {
    /// Opens the configured engine (creating the data directory if needed) on the system clock.
    pub fn open(config: NodeConfig) -> Result<Arc<Self>> {
        Self::open_with_clock(config, Arc::new(SystemClock::new()))
    }

    /// Like [`NodeState::open`], with an explicit clock.
    pub fn open_with_clock(config: NodeConfig, clock: Arc<dyn Clock>) -> Result<Arc<Self>> {
        config.validate()?;
        let engine = open_engine(&config)?;
        Self::with_engine(config, engine, clock)
    }

    /// A standalone node over `engine` instead of the one `config.storage` names (tests
    /// inject storage faults through it).
    pub fn with_engine(
        config: NodeConfig,
        engine: Arc<dyn Engine>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<Self>> {
        config.validate()?;
        let keyspace = Arc::new(Keyspace::with_config(
            engine.clone(),
            clock.clone(),
            KeyspaceConfig {
                retention: Duration::from_millis(config.storage.version_retention_ms),
                max_value_len: config.resp.max_bulk_len,
                // `validate` above checked both.
                maxmemory: config.memory.maxmemory_bytes()?,
                maxmemory_policy: config.memory.policy()?,
                ..KeyspaceConfig::default()
            },
        ));
        let objects = Arc::new(crate::objects::Objects::new(
            crate::objects::Backend::Local {
                keyspace: keyspace.clone(),
                chunks: open_chunk_store(&config)?,
            },
            config.blob.clone(),
            clock.clone(),
            clock.now().0,
        ));
        Ok(Arc::new(Self {
            config,
            engine,
            keyspace,
            metrics: Arc::new(Metrics::new()),
            clock,
            cluster: None,
            objects,
            started: Instant::now(),
        }))
    }

    /// A node in cluster mode: its front ends serve `cluster` (whose replication node stores
    /// its objects in `engine`, which `/status` and `/metrics` report). The keyspace is an
    /// empty in-memory one only the commands that touch no key (TIME) use; the node runs no
    /// expiry sweep or GC pass of its own.
    pub fn open_cluster(
        config: NodeConfig,
        engine: Arc<dyn Engine>,
        cluster: Arc<ClusterBackend>,
    ) -> Result<Arc<Self>> {
        config.validate()?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let keyspace = Arc::new(Keyspace::new(Arc::new(MemEngine::new()), clock.clone()));
        let objects = Arc::new(crate::objects::Objects::new(
            crate::objects::Backend::Cluster(cluster.clone()),
            config.blob.clone(),
            clock.clone(),
            clock.now().0 ^ u64::from(cluster.node.id().0),
        ));
        Ok(Arc::new(Self {
            config,
            engine,
            keyspace,
            metrics: Arc::new(Metrics::new()),
            clock,
            cluster: Some(cluster),
            objects,
            started: Instant::now(),
        }))
    }

    /// Time since the node started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// The node's metrics in Prometheus text format; in cluster mode with the replication
    /// layer's series too (see [`crate::metrics`]).
    pub fn render_metrics(&self) -> String {
        let s = self.engine.stats();
        let engine = EngineGauges {
            live_keys: s.live_keys,
            versions: s.versions,
            bytes: s.bytes,
            used_memory: self.keyspace.used_memory(),
            maxmemory: self.keyspace.maxmemory(),
            evicted_keys: self.keyspace.stats().evicted_keys,
        };
        let mut out = match &self.cluster {
            None => self.metrics.render(engine),
            Some(c) => self.metrics.render_cluster(engine, &replication_gauges(c)),
        };
        // The object service's series go before the exposition's closing `# EOF`.
        let closed = out.ends_with("# EOF\n");
        if closed {
            out.truncate(out.len() - "# EOF\n".len());
        }
        self.objects.render_metrics(&mut out);
        if closed {
            out.push_str("# EOF\n");
        }
        out
    }

    /// A JSON summary of the node for `GET /status`.
    pub fn status(&self) -> serde_json::Value {
        let s = self.engine.stats();
        let conns = |f| {
            let c = self.metrics.connections(f);
            json!({
                "open": c.open.load(Ordering::Relaxed),
                "accepted": c.accepted.load(Ordering::Relaxed),
                "rejected": c.rejected.load(Ordering::Relaxed),
            })
        };
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": self.uptime().as_secs(),
            "engine": {
                "name": self.engine.name(),
                "fsync": (self.config.storage.engine == EngineKind::Fjall)
                    .then(|| self.config.storage.fsync.to_string()),
                "live_keys": s.live_keys,
                "versions": s.versions,
                "bytes": s.bytes,
            },
            "resp": {
                "listen": self.config.resp.listen.to_string(),
                "connections": conns(Frontend::Resp),
                "commands": self.metrics.total_calls(Frontend::Resp),
            },
            "http": {
                "listen": self.config.http.listen.to_string(),
                "connections": conns(Frontend::Http),
                "requests": self.metrics.total_calls(Frontend::Http),
            },
        })
    }
}

/// Opens where the node keeps large objects' chunks: in memory with the `mem` engine, as
/// files under `DATA_DIR/blobs` with `fjall` (fsynced per chunk with `fsync = always`).
pub fn open_chunk_store(config: &NodeConfig) -> Result<Arc<dyn meridian_blob::ChunkStore>> {
    Ok(match config.storage.engine {
        EngineKind::Mem => Arc::new(meridian_blob::MemChunkStore::new()),
        EngineKind::Fjall => {
            let dir = config.storage.data_dir.join("blobs");
            let always = config.storage.fsync == meridian_storage::Durability::Always;
            Arc::new(
                meridian_blob::FileChunkStore::open(&dir, always).map_err(|e| {
                    Error::Config(format!("cannot open chunk store {}: {e}", dir.display()))
                })?,
            )
        }
    })
}

/// Opens the engine `config.storage` names (creating the data directory if needed).
pub fn open_engine(config: &NodeConfig) -> Result<Arc<dyn Engine>> {
    Ok(match config.storage.engine {
        EngineKind::Mem => Arc::new(MemEngine::new()),
        EngineKind::Fjall => {
            let dir = &config.storage.data_dir;
            std::fs::create_dir_all(dir).map_err(|e| {
                Error::Config(format!(
                    "cannot create data directory {}: {e}; choose another with --data-dir",
                    dir.display()
                ))
            })?;
            Arc::new(FjallEngine::open(FjallConfig {
                min_free_bytes: config.storage.min_free_disk_bytes()?,
                ..FjallConfig::new(dir.clone(), config.storage.fsync)
            })?)
        }
    })
}

/// The sockets a node serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The Redis-protocol listener.
    pub resp: TcpListener,
    /// The HTTP listener.
    pub http: TcpListener,
    /// The S3 listener, when `s3.listen` is set.
    pub s3: Option<TcpListener>,
}

impl Listeners {
    /// Binds both addresses of `config`, with errors that say what to do.
    pub async fn bind(config: &NodeConfig) -> Result<Self> {
        Ok(Self {
            resp: bind_one("RESP", config.resp.listen, "--resp").await?,
            http: bind_one("HTTP", config.http.listen, "--http").await?,
            s3: match config.s3.listen {
                Some(a) => Some(bind_one("S3", a, "--s3").await?),
                None => None,
            },
        })
    }

    /// The bound (RESP, HTTP) addresses; useful after binding port 0.
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr)> {
        Ok((self.resp.local_addr()?, self.http.local_addr()?))
    }
}

pub(crate) async fn bind_one(what: &str, addr: SocketAddr, flag: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|source| {
        let hint = if source.kind() == std::io::ErrorKind::AddrInUse {
            format!(" (is another server running there? choose another address with {flag})")
        } else {
            String::new()
        };
        Error::Io {
            what: format!("binding {what} listener {addr}{hint}"),
            source,
        }
    })
}

/// Serves `node` on `listeners` until `shutdown` is cancelled, then drains and flushes.
pub async fn run(
    node: Arc<NodeState>,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<()> {
    let (resp_addr, http_addr) = listeners.addrs().map_err(|source| Error::Io {
        what: "reading listener addresses".into(),
        source,
    })?;
    info!(
        %resp_addr, %http_addr, engine = node.engine.name(),
        "meridian node serving"
    );
    // Background tasks stop on their own token, after the front ends have drained, so no
    // request races a final flush.
    let background = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(node.objects.clone().run_gc(background.clone()));
    tasks.spawn(node.objects.clone().run_scrub(background.clone()));
    tasks.spawn(node.objects.clone().run_chunk_repair(background.clone()));
    tasks.spawn(node.objects.clone().run_housekeeping(background.clone()));
    if node.cluster.is_none() {
        tasks.spawn(gc_loop(node.clone(), background.clone()));
        tasks.spawn(node.keyspace.clone().run_active_expiry(background.clone()));
    }

    let executor = start_executor(&node)?;
    let mut resp_ctx = crate::resp::RespContext::with_cluster(
        node.keyspace.clone(),
        node.metrics.clone(),
        crate::resp::RespConfig {
            durability: (node.config.storage.engine == EngineKind::Fjall)
                .then_some(node.config.storage.fsync),
            ..(&node.config.resp).into()
        },
        node.cluster.clone(),
    )
    .with_objects(node.objects.clone());
    if let Some(e) = &executor {
        resp_ctx = resp_ctx.with_executor(e.clone());
    }
    let resp = tokio::spawn(crate::resp::serve(
        listeners.resp,
        resp_ctx,
        shutdown.clone(),
    ));
    let http = tokio::spawn(crate::http::serve(
        listeners.http,
        node.clone(),
        shutdown.clone(),
    ));
    let s3 = listeners
        .s3
        .map(|l| tokio::spawn(crate::s3::serve(l, node.clone(), shutdown.clone())));
    let (resp, http) = tokio::join!(resp, http);
    if let Some(s3) = s3 {
        match s3.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(frontend = "S3", error = %e, "front end stopped with an error"),
            Err(e) => warn!(frontend = "S3", error = %e, "front end task failed"),
        }
    }
    background.cancel();
    while tasks.join_next().await.is_some() {}
    if let Some(e) = executor {
        // Every connection has drained: nothing is queued on the shards.
        let _ = tokio::task::spawn_blocking(move || e.shutdown()).await;
    }

    let flushed = node.engine.flush();
    for (name, result) in [("RESP", resp), ("HTTP", http)] {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(frontend = name, error = %e, "front end stopped with an error"),
            Err(e) => warn!(frontend = name, error = %e, "front end task failed"),
        }
    }
    flushed?;
    info!("meridian node stopped; engine flushed");
    Ok(())
}

/// A standalone node's worker-shard executor, when `repart.mode` is on: its shards (threads
/// or tasks, `repart.workers`), plus the tracker and partitioner.
fn start_executor(node: &NodeState) -> Result<Option<Arc<crate::repart::Executor<bytes::Bytes>>>> {
    let cfg = &node.config.repart;
    if !cfg.mode.enabled() || node.cluster.is_some() {
        return Ok(None);
    }
    let runtime = match cfg.workers {
        crate::repart::Workers::Threads => crate::repart::Runtime::Threads { pin: cfg.pin },
        crate::repart::Workers::Tasks => {
            crate::repart::Runtime::ShardTasks(tokio::runtime::Handle::current())
        }
    };
    let e =
        crate::repart::Executor::start(cfg, runtime).map_err(|e| Error::Config(e.to_string()))?;
    node.metrics.attach_repart(e.stats().clone());
    info!(mode = %cfg.mode, shards = e.shards(), "worker-shard executor on");
    Ok(Some(Arc::new(e)))
}

/// Periodically drops versions older than the retention window.
async fn gc_loop(node: Arc<NodeState>, stop: CancellationToken) {
    let period = Duration::from_millis(node.config.storage.gc_interval_ms);
    let retention = Duration::from_millis(node.config.storage.version_retention_ms);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !node.engine.health().is_ok() {
            // Writes are refused (a full disk); a gc pass would write too.
            continue;
        }
        let horizon = node.clock.now().saturating_sub(retention);
        let engine = node.engine.clone();
        match tokio::task::spawn_blocking(move || engine.gc(horizon)).await {
            Ok(Ok(stats)) if stats.versions_removed > 0 => tracing::debug!(?stats, "gc pass"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => warn!(error = %e, "garbage collection failed; will retry"),
            Err(e) => warn!(error = %e, "garbage collection task panicked"),
        }
    }
}
