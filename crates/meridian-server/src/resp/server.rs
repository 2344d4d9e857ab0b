//! Accepting RESP clients: [`serve`] and the state every connection shares ([`RespContext`]).
//!
//! [`serve`] accepts until the shutdown token is cancelled, refusing clients over
//! `max_clients` with Redis's error, then stops accepting and waits for every connection to
//! finish what it has read and close. Connection gauges (`open`, `accepted`, `rejected`) in
//! [`Metrics`] are kept exact: a connection is counted open from accept until its task ends.

use crate::cluster_backend::ClusterBackend;
use crate::keyspace::Keyspace;
use crate::metrics::{Frontend, Metrics, OpStats};
use crate::resp::{RespConfig, connection};
use bytes::Bytes;
use meridian_redis::Cmd;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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
    pub created: Instant,
    pub meta: Mutex<ClientMeta>,
    /// 2 or 3.
    pub resp: AtomicU8,
    /// Index of the last command plus one (0: none yet).
    pub last_cmd: AtomicU8,
    /// Milliseconds since the server started, at the last request.
    pub last_active_ms: AtomicU64,
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
    pub(crate) started: Instant,
    pub(crate) run_id: String,
    port: AtomicU16,
    /// The address [`serve`] listens on (CONFIG GET `bind`).
    listen: Mutex<Option<SocketAddr>>,
    next_client_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    ops_per_sec: AtomicU64,
    pub(crate) net_input: AtomicU64,
    pub(crate) net_output: AtomicU64,
}

impl RespContext {
    /// The shared state of a RESP front end serving `keyspace`, recording into `metrics`.
    /// Fetches every per-command metrics handle once, here.
    pub fn new(keyspace: Arc<Keyspace>, metrics: Arc<Metrics>, config: RespConfig) -> Arc<Self> {
        Self::with_cluster(keyspace, metrics, config, None)
    }

    /// Like [`RespContext::new`]; with `cluster`, key commands are served by that replication
    /// node (cluster mode, see [`crate::cluster`]).
    pub fn with_cluster(
        keyspace: Arc<Keyspace>,
        metrics: Arc<Metrics>,
        config: RespConfig,
        cluster: Option<Arc<ClusterBackend>>,
    ) -> Arc<Self> {
        let ops = Cmd::ALL
            .iter()
            .map(|c| metrics.op(Frontend::Resp, c.spec().name))
            .collect();
        let rejected_ops = metrics.op(Frontend::Resp, "rejected");
        let state = std::collections::hash_map::RandomState::new();
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
            started: Instant::now(),
            run_id,
            port: AtomicU16::new(0),
            listen: Mutex::new(None),
            next_client_id: AtomicU64::new(1),
            clients: Mutex::new(BTreeMap::new()),
            ops_per_sec: AtomicU64::new(0),
            net_input: AtomicU64::new(0),
            net_output: AtomicU64::new(0),
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
            .map_or_else(crate::resp::blob::default_get_max, |o| {
                o.config().resp_get_max
            })
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

    fn register(&self, addr: SocketAddr, laddr: SocketAddr, fd: i32) -> Arc<ClientInfo> {
        let info = Arc::new(ClientInfo {
            id: self.next_client_id.fetch_add(1, Ordering::Relaxed),
            addr,
            laddr,
            fd,
            created: Instant::now(),
            meta: Mutex::new(ClientMeta::default()),
            resp: AtomicU8::new(2),
            last_cmd: AtomicU8::new(0),
            last_active_ms: AtomicU64::new(self.elapsed_ms()),
        });
        self.clients.lock().insert(info.id, info.clone());
        info
    }

    fn unregister(&self, id: u64) {
        self.clients.lock().remove(&id);
    }
}

/// Serves RESP clients from `listener` until `shutdown` is cancelled, then waits for every
/// connection to close. Each connection also stops at shutdown, after answering the requests
/// it has already read.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<RespContext>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let laddr = listener.local_addr()?;
    ctx.port.store(laddr.port(), Ordering::Relaxed);
    *ctx.listen.lock() = Some(laddr);
    let stop = shutdown.child_token();
    tokio::spawn(sample_ops(ctx.clone(), stop.clone()));
    let conns = ctx.metrics.connections(Frontend::Resp);
    // Every connection task holds a sender; when all are dropped, every task has ended.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.cancelled() => break,
        };
        let (mut stream, addr) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "RESP accept failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    _ = shutdown.cancelled() => break,
                }
            }
        };
        let done = done_tx.clone();
        if conns.open.load(Ordering::Relaxed) >= ctx.config.limits.max_clients as i64 {
            conns.rejected.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let _ = stream
                    .write_all(b"-ERR max number of clients reached\r\n")
                    .await;
                let _ = stream.shutdown().await;
                drop(done);
            });
            continue;
        }
        let _ = stream.set_nodelay(true);
        conns.open.fetch_add(1, Ordering::Relaxed);
        conns.accepted.fetch_add(1, Ordering::Relaxed);
        let fd = raw_fd(&stream);
        let info = ctx.register(addr, stream.local_addr().unwrap_or(laddr), fd);
        let ctx = ctx.clone();
        let token = shutdown.child_token();
        tokio::spawn(async move {
            let id = info.id;
            connection::run(&ctx, stream, info, token).await;
            ctx.unregister(id);
            ctx.metrics
                .connections(Frontend::Resp)
                .open
                .fetch_sub(1, Ordering::Relaxed);
            drop(done);
        });
    }
    drop(listener);
    drop(done_tx);
    let _ = done_rx.recv().await;
    stop.cancel();
    Ok(())
}

#[cfg(unix)]
fn raw_fd(s: &tokio::net::TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    s.as_raw_fd()
}

#[cfg(not(unix))]
fn raw_fd(_: &tokio::net::TcpStream) -> i32 {
    -1
}

/// Keeps `instantaneous_ops_per_sec` like Redis: the mean rate over the last 16 samples,
/// one every 100 ms.
async fn sample_ops(ctx: Arc<RespContext>, stop: CancellationToken) {
    const SAMPLES: usize = 16;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rates = [0u64; SAMPLES];
    let mut i = 0;
    let mut last = (Instant::now(), ctx.metrics.total_calls(Frontend::Resp));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = (Instant::now(), ctx.metrics.total_calls(Frontend::Resp));
        let dt = now.0.duration_since(last.0).as_secs_f64();
        if dt > 0.0 {
            rates[i % SAMPLES] = ((now.1.saturating_sub(last.1)) as f64 / dt) as u64;
            i += 1;
            let n = i.min(SAMPLES) as u64;
            ctx.ops_per_sec
                .store(rates.iter().sum::<u64>() / n, Ordering::Relaxed);
        }
        last = now;
    }
}
