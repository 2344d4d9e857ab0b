//! The state every RESP connection of a node shares ([`RespContext`]): configuration,
//! the keyspace or cluster backend, metrics, the client list (`CLIENT LIST`/`KILL`) and
//! the counters `INFO` reports.
//!
//! A leaf of the RESP front end: the executors and the connection loop import it, and it
//! imports none of them, so `server` (which accepts and spawns connections) sits on top.

use crate::cluster_backend::ClusterBackend;
use crate::keyspace::Keyspace;
use crate::metrics::{Frontend, Metrics, OpStats};
use crate::resp::RespConfig;
use bytes::Bytes;
use meridian_redis::Cmd;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, Ordering};
use std::time::Instant;

/// The Redis version the server claims, so clients enable the features it implements.
pub const REDIS_VERSION: &str = "7.2.0";

/// What a client may change about itself (CLIENT SETNAME, CLIENT SETINFO).
#[derive(Debug, Default)]
pub(crate) struct ClientMeta {
    pub name: Option<Bytes>,
    pub lib_name: Option<Bytes>,
    pub lib_ver: Option<Bytes>,
}

/// One connected client, as CLIENT LIST shows it.
#[derive(Debug)]
pub(crate) struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub fd: i32,
    /// Accepted on the TLS listener: topology replies and redirects name TLS ports.
    pub tls: bool,
    pub created: Instant,
    pub meta: Mutex<ClientMeta>,
    /// 2 or 3.
    pub resp: AtomicU8,
    /// Index of the last command plus one (0: none yet).
    pub last_cmd: AtomicU8,
    /// Milliseconds since the server started, at the last request.
    pub last_active_ms: AtomicU64,
    /// The ACL user the connection runs as (CLIENT LIST's `user`; whose connections a
    /// deleted user closes).
    pub user: Mutex<Bytes>,
    /// The connection's pub/sub mailbox (`crate::pubsub::Hub::subscriptions_of`).
    pub mailbox_id: AtomicU64,
    /// Cancels the connection (set when it starts serving): it answers what it has read,
    /// then closes.
    pub kill_token: std::sync::OnceLock<tokio_util::sync::CancellationToken>,
}

impl ClientInfo {
    /// Closes the connection once it has answered what it has read.
    pub(crate) fn kill(&self) {
        if let Some(t) = self.kill_token.get() {
            t.cancel();
        }
    }
}

/// Everything RESP connections share: the keyspace, metrics, configuration and the client
/// registry. Build one with [`RespContext::new`].
#[derive(Debug)]
pub struct RespContext {
    pub(crate) keyspace: Arc<Keyspace>,
    /// Cluster mode: key commands go to this replication node instead of `keyspace`.
    pub(crate) cluster: Option<Arc<ClusterBackend>>,
    /// The node's object service, which reads large objects' chunks for `GET` and
    /// `BLOB.READ` (`resp::blob`); set once by [`RespContext::with_objects`].
    objects: std::sync::OnceLock<Arc<crate::objects::Objects>>,
    /// A standalone node's worker-shard executor (`repart.mode`), set once by
    /// [`RespContext::with_executor`].
    executor: std::sync::OnceLock<Arc<crate::repart::Executor<bytes::Bytes>>>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: RespConfig,
    /// Metrics handle per command, indexed by [`Cmd`].
    pub(crate) ops: Box<[Arc<OpStats>]>,
    /// Metrics handle for unknown commands and requests refused before running.
    pub(crate) rejected_ops: Arc<OpStats>,
    /// INFO commandstats' zero (CONFIG RESETSTAT), over `ops`.
    pub(crate) command_stats: super::command_stats::CommandStats,
    pub(crate) started: Instant,
    pub(crate) run_id: String,
    /// The port and address [`serve`](super::serve) listens on (INFO, CONFIG GET `bind`).
    pub(super) port: AtomicU16,
    pub(super) listen: Mutex<Option<SocketAddr>>,
    /// The TLS listener's port (INFO, CONFIG GET `tls-port`); 0: none.
    pub(super) tls_port: AtomicU16,
    /// The node's certificate and settings, set once by [`RespContext::with_tls`].
    tls: std::sync::OnceLock<RespTls>,
    next_client_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    /// `instantaneous_ops_per_sec`, kept by the server's sampler.
    pub(super) ops_per_sec: AtomicU64,
    pub(crate) net_input: AtomicU64,
    pub(crate) net_output: AtomicU64,
    /// Redis's encoding settings, as CONFIG SET left them (`encoding_config`).
    pub(crate) encodings: super::encoding_config::EncodingSettings,
    /// The node's pub/sub subscriptions.
    pub(crate) pubsub: Arc<crate::pubsub::Hub>,
    /// The node's Lua interpreter and running script (`resp::scripting`).
    pub(crate) scripts: Arc<crate::scripting::Scripts>,
    /// Redis's `min-replicas-to-write` (CONFIG SET, standalone only): above 0, writes are
    /// refused with `-NOREPLICAS`, as on a Redis primary with too few replicas — a standalone
    /// node has none.
    pub(crate) min_replicas_to_write: std::sync::atomic::AtomicU32,
    /// The error replies sent, by code (INFO errorstats).
    pub(crate) errors: super::error_stats::ErrorStats,
    /// The ACL users and log (`resp::acl`).
    pub(crate) users: Arc<super::acl::Users>,
    /// Redis's `protected-mode` (CONFIG SET): with no password for the `default` user,
    /// clients beyond loopback are refused.
    pub(crate) protected_mode: std::sync::atomic::AtomicBool,
}

/// The node's TLS certificate as the RESP front end uses it.
#[derive(Debug)]
pub(crate) struct RespTls {
    /// The certificate and settings (reloadable).
    pub(crate) server: Arc<meridian_net::tls::TlsServer>,
    /// The most a client's handshake may take (`resp.tls-handshake-timeout-ms`).
    pub(crate) handshake_timeout: std::time::Duration,
}

/// Redis's refusal of a write while `min-replicas-to-write` is not met.
pub(crate) const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

impl RespContext {
    /// Whether writes are refused for want of replicas (`min-replicas-to-write`).
    pub(crate) fn too_few_replicas(&self) -> bool {
        self.min_replicas_to_write.load(Ordering::Relaxed) > 0
    }

    /// The shared state of a RESP front end serving `keyspace`, recording into `metrics`.
    /// Fetches every per-command metrics handle once, here.
    pub fn new(keyspace: Arc<Keyspace>, metrics: Arc<Metrics>, config: RespConfig) -> Arc<Self> {
        let users = super::acl::Users::new(&config.acl, config.requirepass.as_deref())
            .unwrap_or_else(|e| {
                // A node validates its users when it starts (`NodeState`); a context built
                // without one lets nobody in rather than everybody.
                tracing::error!(error = %e, "ACL users refused: every login is refused");
                super::acl::Users::locked()
            });
        Self::with_cluster(keyspace, metrics, config, None, Arc::new(users))
    }

    /// Like [`RespContext::new`]; with `cluster`, key commands are served by that replication
    /// node (cluster mode, see [`crate::cluster`]). `users` are the node's, which its HTTP
    /// and S3 front ends share.
    pub(crate) fn with_cluster(
        keyspace: Arc<Keyspace>,
        metrics: Arc<Metrics>,
        config: RespConfig,
        cluster: Option<Arc<ClusterBackend>>,
        users: Arc<super::acl::Users>,
    ) -> Arc<Self> {
        let ops = Cmd::ALL
            .iter()
            .map(|c| metrics.op(Frontend::Resp, c.spec().name))
            .collect();
        let rejected_ops = metrics.op(Frontend::Resp, "rejected");
        let pubsub = Arc::new(crate::pubsub::Hub::default());
        // Keyspace notifications go to this front end's subscribers, and so do messages
        // published on the cluster's other nodes.
        keyspace.events.attach(pubsub.clone());
        // Client tracking's invalidations go through the same mailboxes.
        keyspace.caching.attach(pubsub.clone());
        if let Some(c) = &cluster {
            let hub = pubsub.clone();
            c.node
                .set_pubsub_sink(Arc::new(move |shard, channel, message| {
                    hub.publish_to(shard, channel, message);
                }));
        }
        let state = std::collections::hash_map::RandomState::new();
        let scripts = Arc::new(
            crate::scripting::Scripts::new(meridian_lua::Config {
                memory_limit: config.limits.max_script_memory,
                redis_version: REDIS_VERSION.into(),
                seed: state.hash_one("lua"),
            })
            .expect("a Lua interpreter for scripts"),
        );
        let protected_mode = std::sync::atomic::AtomicBool::new(config.protected_mode);
        let run_id = (0..3u8)
            .map(|i| format!("{:016x}", state.hash_one(i)))
            .collect::<String>()[..40]
            .to_string();
        Arc::new(Self {
            keyspace,
            cluster,
            objects: std::sync::OnceLock::new(),
            executor: std::sync::OnceLock::new(),
            metrics,
            config,
            ops,
            rejected_ops,
            command_stats: Default::default(),
            started: Instant::now(),
            run_id,
            port: AtomicU16::new(0),
            listen: Mutex::new(None),
            tls_port: AtomicU16::new(0),
            tls: std::sync::OnceLock::new(),
            next_client_id: AtomicU64::new(1),
            clients: Mutex::new(BTreeMap::new()),
            ops_per_sec: AtomicU64::new(0),
            encodings: Default::default(),
            pubsub,
            scripts,
            min_replicas_to_write: Default::default(),
            errors: Default::default(),
            net_input: AtomicU64::new(0),
            net_output: AtomicU64::new(0),
            protected_mode,
            users,
        })
    }

    /// Attaches the node's object service (over the same keyspace or cluster), so `GET` and
    /// `BLOB.READ` serve large objects stored in chunks; without one they serve plain values
    /// and inline objects only. Call it before serving; a second call changes nothing.
    pub fn with_objects(self: Arc<Self>, objects: Arc<crate::objects::Objects>) -> Arc<Self> {
        let _ = self.objects.set(objects);
        self
    }

    /// Runs a standalone node's key commands on `executor`'s worker shards (`resp::sharded`).
    /// Call it before serving; a second call changes nothing.
    pub fn with_executor(
        self: Arc<Self>,
        executor: Arc<crate::repart::Executor<bytes::Bytes>>,
    ) -> Arc<Self> {
        let _ = self.executor.set(executor);
        self
    }

    /// Attaches the node's TLS certificate (what the TLS listener accepts with, and what
    /// `CONFIG SET tls-cert-file` reloads) and the bound on a client's handshake. Call it
    /// before serving; a second call changes nothing.
    pub fn with_tls(
        self: Arc<Self>,
        server: Arc<meridian_net::tls::TlsServer>,
        handshake_timeout: std::time::Duration,
    ) -> Arc<Self> {
        let _ = self.tls.set(RespTls {
            server,
            handshake_timeout,
        });
        self
    }

    /// The TLS attachment, when set.
    pub(crate) fn tls(&self) -> Option<&RespTls> {
        self.tls.get()
    }

    /// The worker-shard executor, when attached.
    pub(crate) fn executor(&self) -> Option<&Arc<crate::repart::Executor<bytes::Bytes>>> {
        self.executor.get()
    }

    /// The object service, when attached.
    pub(crate) fn objects(&self) -> Option<&Arc<crate::objects::Objects>> {
        self.objects.get()
    }

    /// `blob.resp_get_max`: the largest large-object reply of `GET` and `BLOB.READ`.
    pub(crate) fn blob_get_max(&self) -> u64 {
        self.objects
            .get()
            .map_or_else(default_get_max, |o| o.config().resp_get_max)
    }

    /// The keyspace served.
    pub fn keyspace(&self) -> &Arc<Keyspace> {
        &self.keyspace
    }

    /// The configuration.
    pub fn config(&self) -> &RespConfig {
        &self.config
    }

    pub(crate) fn port(&self) -> u16 {
        self.port.load(Ordering::Relaxed)
    }

    /// The TLS listener's port; 0 when there is none.
    pub(crate) fn tls_port(&self) -> u16 {
        self.tls_port.load(Ordering::Relaxed)
    }

    /// The address the listener is bound to (`None` before [`serve`] runs).
    pub(crate) fn listen_addr(&self) -> Option<SocketAddr> {
        *self.listen.lock()
    }

    pub(crate) fn ops_per_sec(&self) -> u64 {
        self.ops_per_sec.load(Ordering::Relaxed)
    }

    pub(crate) fn clients(&self) -> Vec<Arc<ClientInfo>> {
        self.clients.lock().values().cloned().collect()
    }

    pub(crate) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(super) fn register(
        &self,
        addr: SocketAddr,
        laddr: SocketAddr,
        fd: i32,
        tls: bool,
    ) -> Arc<ClientInfo> {
        let info = Arc::new(ClientInfo {
            id: self.next_client_id.fetch_add(1, Ordering::Relaxed),
            addr,
            laddr,
            fd,
            tls,
            created: Instant::now(),
            meta: Mutex::new(ClientMeta::default()),
            resp: AtomicU8::new(2),
            last_cmd: AtomicU8::new(0),
            last_active_ms: AtomicU64::new(self.elapsed_ms()),
            user: Mutex::new(super::acl::default_user_name()),
            mailbox_id: AtomicU64::new(0),
            kill_token: std::sync::OnceLock::new(),
        });
        self.clients.lock().insert(info.id, info.clone());
        info
    }

    pub(super) fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
    }
}

/// The largest reply `GET` and `BLOB.READ` give when no object service is attached.
pub(crate) fn default_get_max() -> u64 {
    crate::blob_config::BlobConfig::default().resp_get_max
}
