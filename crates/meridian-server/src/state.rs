//! The state one node's front ends share ([`NodeState`]: configuration, engine, keyspace,
//! metrics, clock, the cluster backend in cluster mode, the object service) and how it is
//! opened from the configuration ([`open_engine`], [`open_chunk_store`]).
//!
//! It sits below every front end (RESP, HTTP, S3) and below the listeners and start-up in
//! `node` (which re-exports it) and `cluster`: it imports none of them, so a
//! front end that needs the node's state does not depend on the code that starts it.

use crate::cluster_backend::ClusterBackend;
use crate::config::{EngineKind, NodeConfig};
use crate::error::{Error, Result};
use crate::keyspace::{Keyspace, KeyspaceConfig};
use crate::metrics::{EngineGauges, Frontend, MemberGauge, Metrics, ReplicationGauges};
use meridian_core::{Clock, SystemClock};
use meridian_storage::{Engine, FjallConfig, FjallEngine, MemEngine};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::warn;

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
    /// The node's TLS certificate and settings (`resp.tls-*`), when one is configured: what
    /// the TLS listeners accept with, and what `CONFIG SET tls-cert-file` reloads.
    pub tls: Option<Arc<meridian_net::tls::TlsServer>>,
    /// The ACL users (`resp.users`, `resp.aclfile`, `requirepass`): who RESP clients, HTTP
    /// requests and S3 access keys mapped to a user act as.
    pub(crate) users: Arc<crate::resp::acl::Users>,
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
        let tls = load_tls(&config)?;
        let users = load_users(&config)?;
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
            tls,
            users,
            started: Instant::now(),
        }))
    }

    /// A node in cluster mode: its front ends serve `cluster` (whose replication node stores
    /// its objects in `engine`, which `/status` and `/metrics` report). The keyspace is an
    /// empty in-memory one only the commands that touch no key (TIME) use; the node runs no
    /// expiry sweep or GC pass of its own.
    /// `tls` is the node's certificate, loaded by [`load_tls`] (its peer links may share it).
    pub(crate) fn open_cluster(
        config: NodeConfig,
        engine: Arc<dyn Engine>,
        cluster: Arc<ClusterBackend>,
        tls: Option<Arc<meridian_net::tls::TlsServer>>,
    ) -> Result<Arc<Self>> {
        config.validate()?;
        let users = load_users(&config)?;
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
            tls,
            users,
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

/// The ACL users the configuration describes: an unreadable ACL file or a bad user line
/// stops the start, with what is wrong, rather than serving with every login refused.
fn load_users(config: &NodeConfig) -> Result<Arc<crate::resp::acl::Users>> {
    let resp = crate::resp::RespConfig::from(&config.resp);
    crate::resp::acl::Users::new(&resp.acl, resp.requirepass.as_deref())
        .map(Arc::new)
        .map_err(|e| Error::Config(format!("resp.users / resp.aclfile: {e}")))
}

/// Loads the node's certificate (`resp.tls-*`), when one is configured, with peer-link TLS
/// when `resp.tls-cluster` is on: a missing or bad file fails start-up, naming it.
pub(crate) fn load_tls(config: &NodeConfig) -> Result<Option<Arc<meridian_net::tls::TlsServer>>> {
    use meridian_net::tls::TlsServer;
    let Some(s) = config.resp.tls_settings()? else {
        return Ok(None);
    };
    let server = match config.resp.tls_cluster {
        true => TlsServer::with_peers(s)?,
        false => TlsServer::new(s)?,
    };
    Ok(Some(Arc::new(server)))
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
