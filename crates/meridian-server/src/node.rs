//! A running node: one storage engine, served over RESP and HTTP, with its background work.
//!
//! [`run`] takes already-bound listeners and a shutdown token, so tests start nodes on port 0
//! and the binary is a thin wrapper. On shutdown the node stops accepting, lets open requests
//! finish, stops its background tasks, and flushes the engine before returning: with the
//! durable engine every acknowledged write is on disk when [`run`] returns, whatever the
//! fsync policy.

use crate::config::{EngineKind, NodeConfig};
use crate::error::{Error, Result};
use meridian_core::Clock;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use crate::state::{NodeState, open_chunk_store, open_engine};

/// The sockets a node serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The Redis-protocol listener (plaintext); none with `resp.port = 0`.
    pub resp: Option<TcpListener>,
    /// The RESP-over-TLS listener (`resp.tls-port`), served with the node's certificate.
    pub resp_tls: Option<TcpListener>,
    /// The HTTP listener.
    pub http: TcpListener,
    /// The S3 listener, when `s3.listen` is set.
    pub s3: Option<TcpListener>,
}

impl Listeners {
    /// Binds both addresses of `config`, with errors that say what to do.
    pub async fn bind(config: &NodeConfig) -> Result<Self> {
        Ok(Self {
            resp: match config.resp.plain_listen() {
                Some(a) => Some(bind_one("RESP", a, "--resp").await?),
                None => None,
            },
            resp_tls: match config.resp.tls_listen() {
                Some(a) => Some(bind_one("RESP TLS", a, "--tls-port").await?),
                None => None,
            },
            http: bind_one("HTTP", config.http.listen, "--http").await?,
            s3: match config.s3.listen {
                Some(a) => Some(bind_one("S3", a, "--s3").await?),
                None => None,
            },
        })
    }

    /// The bound (RESP, HTTP) addresses; useful after binding port 0. The RESP one is the
    /// plaintext listener's, or the TLS one's when the plaintext listener is off.
    pub fn addrs(&self) -> std::io::Result<(SocketAddr, SocketAddr)> {
        let resp = match (&self.resp, &self.resp_tls) {
            (Some(l), _) | (None, Some(l)) => l.local_addr()?,
            (None, None) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no RESP listener (resp.port = 0 and no resp.tls-port)",
                ));
            }
        };
        Ok((resp, self.http.local_addr()?))
    }

    /// The RESP-over-TLS listener's address, when there is one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.resp_tls.as_ref().and_then(|l| l.local_addr().ok())
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
        node.users.clone(),
    )
    .with_objects(node.objects.clone());
    // Cluster mode: the users replicated with the cluster metadata replace the configured
    // ones once there are any.
    crate::resp::acl_cluster::follow(&resp_ctx);
    if let Some(e) = &executor {
        resp_ctx = resp_ctx.with_executor(e.clone());
    }
    if let Some(tls) = &node.tls {
        let handshake = Duration::from_millis(node.config.resp.tls_handshake_timeout_ms);
        resp_ctx = resp_ctx.with_tls(tls.clone(), handshake);
    }
    let resp = tokio::spawn(crate::resp::server::serve_all(
        listeners.resp,
        listeners.resp_tls,
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
