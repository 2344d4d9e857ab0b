//! The TCP transport: nodes in different processes (or machines) exchange length-delimited
//! postcard frames over TCP.
//!
//! Connections: each node opens at most one control connection per peer, lazily on the first
//! message, and up to `bulk_lanes` bulk connections for messages carrying a [`Payload`]
//! (large-object chunks), so a 1 MiB chunk never holds a heartbeat or a quorum read behind it
//! (spec large-objects.md §4, "node to node"). A payload's stream picks its bulk connection. The accepting node opens it with a [`Challenge`]; the connecting node answers with
//! a [`Hello`] naming itself and proving the cluster secret, and the acceptor proves it in turn
//! with a [`Welcome`] ([`crate::auth`]) before the connector sends anything else. Requests and one-way messages
//! go out on it; responses to them come back on the same connection, matched by request id, so
//! any number of requests are in flight at once and complete in any order. A node answers
//! requests on the connection they arrived on.
//!
//! Payloads travel after their frame, never inside it: in-memory bytes with one vectored
//! write of header and payload (no user-space copy), a [`FileSlice`](crate::FileSlice) with `sendfile(2)` (the
//! bytes never enter user space). The receiver reads exactly the announced length into one
//! buffer. The frame's CRC32C covers the message and the payload's length; the payload is
//! covered by its own digest (a chunk's xxh3-128, checked by whoever receives it), which a
//! CRC would duplicate and which `sendfile` could not compute without reading the file.
//!
//! Bulk connections size their socket buffers to twice the bandwidth-delay product
//! (`max(256 KiB, 2 × link_bandwidth × RTT)`, the RTT measured by the handshake), or to
//! `bulk_buffer` when set; the kernel caps both at `net.core.wmem_max`/`rmem_max`.
//!
//! Guarantees:
//! - Bounded memory: each connection has a send queue of `send_queue` frames (full →
//!   [`NetError::Overloaded`]), frames are at most `max_frame` bytes, and a reader stops reading
//!   while the node's inbox is full, so a stalled receiver pushes back to its senders.
//! - Prompt failure: when a connection drops, every request waiting on it fails at once with
//!   [`NetError::Unreachable`]; while a peer is known to be down (a connect failed and the
//!   backoff has not expired) sends fail at once with the connect error, not at the timeout.
//! - Reconnection: the next message after a drop reconnects; failed connects back off
//!   exponentially (`backoff_initial` doubling up to `backoff_max`, each wait jittered to
//!   50–100 % by a ChaCha8 RNG seeded from `seed` and the peer pair).
//! - Isolation: a malformed or oversized frame, a bad handshake, or a frame claiming another
//!   sender closes that connection only (logged with the reason).
//! - Authentication: a connection whose other end does not prove the cluster secret
//!   (`TcpConfig::secret`) within `handshake_timeout` is closed before any message crosses it.
//! - Encryption, with `TcpConfig::tls` (Redis's `tls-cluster yes`): every connection is TLS,
//!   mutually authenticated against the cluster CA ([`crate::tls::PeerTls`]) before the
//!   secret handshake runs inside it; a plaintext or wrong-CA peer fails the TLS handshake
//!   (counted in `handshakes_failed`). File payloads are then read and encrypted instead of
//!   `sendfile`d.
//! - Bounded before authentication: handshake frames are read with a limit of
//!   [`HANDSHAKE_MAX_FRAME`] bytes (a larger length header closes the connection at once, with
//!   nothing reserved for it); only a peer that proved the secret gets `max_frame`. At most
//!   `max_handshakes` accepted connections are in their handshake at once: one more is closed
//!   at once, and counted in [`TcpStats`].
//! - Addresses come from an [`AddressBook`] that can change at runtime; a change applies to
//!   the next connection attempt.
//! - Everything stops when the `shutdown` token is cancelled: the listener, all connections,
//!   and waiting requests (which fail with [`NetError::Closed`]).

use crate::NetError;
use crate::auth::ClusterSecret;
use crate::envelope::{self, Challenge, Envelope, Hello, Kind, Message, Welcome};
use crate::frame::{DEFAULT_MAX_FRAME, FrameCodec};
use crate::payload::{Payload, PayloadData};
use crate::peer_stream::{PeerReader, PeerStream, PeerWriter};
use crate::tls::{PeerTls, TlsServer};
use crate::transport::{BoxFuture, Dispatcher, Inbox, Transport, Wire};
use bytes::{Buf, Bytes, BytesMut};
use meridian_core::NodeId;
use meridian_core::splitmix64;
use parking_lot::{Mutex, RwLock};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::sync::CancellationToken;

/// The largest handshake frame read or sent, in bytes: a [`Challenge`], [`Hello`] or
/// [`Welcome`] encodes to under 100 bytes; this leaves room for fields a later version adds.
pub const HANDSHAKE_MAX_FRAME: usize = 4096;

/// The default bound on accepted connections in their handshake at once.
pub const DEFAULT_MAX_HANDSHAKES: usize = 64;

/// Counters of a TCP transport's refusals. Cheap to clone; clones share the counters, so a
/// caller keeps one from its [`TcpConfig`] to read them.
#[derive(Clone, Debug, Default)]
pub struct TcpStats {
    inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    handshakes_busy: AtomicU64,
    handshakes_failed: AtomicU64,
}

impl TcpStats {
    /// Accepted connections closed at once because `max_handshakes` were already in progress.
    pub fn handshakes_busy(&self) -> u64 {
        self.inner.handshakes_busy.load(Ordering::Relaxed)
    }

    /// Accepted connections closed because their handshake failed (no proof of the secret, a
    /// malformed or oversized frame, the deadline passed, or the peer hung up).
    pub fn handshakes_failed(&self) -> u64 {
        self.inner.handshakes_failed.load(Ordering::Relaxed)
    }
}

/// Settings of a TCP transport.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Largest frame sent or accepted, in bytes (default 64 MiB). Must match across nodes.
    pub max_frame: usize,
    /// Frames queued per connection before sends fail with `Overloaded` (default 1024).
    pub send_queue: usize,
    /// Capacity of the node's inbox, in messages (default 1024).
    pub inbox: usize,
    /// How long a connect may take (default 5 s).
    pub connect_timeout: Duration,
    /// How long an accepted connection may take to send its handshake (default 5 s).
    pub handshake_timeout: Duration,
    /// Backoff after the first failed connect (default 50 ms).
    pub backoff_initial: Duration,
    /// Largest backoff between connect attempts (default 5 s).
    pub backoff_max: Duration,
    /// Seed of the backoff jitter.
    pub seed: u64,
    /// The secret both ends of every connection must prove (default: a random one, see
    /// [`ClusterSecret::random`], so a transport nobody configured talks to nobody).
    pub secret: ClusterSecret,
    /// Most accepted connections in their handshake at once (default
    /// [`DEFAULT_MAX_HANDSHAKES`]); more are closed at once.
    pub max_handshakes: usize,
    /// Where the transport counts what it refused (shared with clones of this config).
    pub stats: TcpStats,
    /// Bulk connections per peer for messages with a payload (default 4; 0 sends payloads on
    /// the control connection).
    pub bulk_lanes: u8,
    /// Socket buffer of bulk connections, in bytes; `None` sizes it to twice the
    /// bandwidth-delay product of `link_bandwidth` and the measured RTT.
    pub bulk_buffer: Option<usize>,
    /// The bandwidth of a link between peers, in bytes per second (default 1 Gb/s), for
    /// sizing bulk socket buffers.
    pub link_bandwidth: u64,
    /// Encrypt every connection (`tls-cluster`): the node's certificate, the cluster CA, both
    /// ends authenticated. Must be a [`TlsServer::with_peers`]; `None` (the default): plain TCP.
    pub tls: Option<Arc<TlsServer>>,
}

/// The smallest bulk socket buffer (spec large-objects.md §6).
pub const MIN_BULK_BUFFER: usize = 256 * 1024;

impl TcpConfig {
    /// The socket buffer for a bulk connection whose round trip took `rtt`.
    pub fn bulk_buffer_for(&self, rtt: Duration) -> usize {
        self.bulk_buffer.unwrap_or_else(|| {
            let bdp = (self.link_bandwidth as f64 * rtt.as_secs_f64()) as usize;
            bdp.saturating_mul(2).max(MIN_BULK_BUFFER)
        })
    }
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            max_frame: DEFAULT_MAX_FRAME,
            send_queue: 1024,
            inbox: 1024,
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(5),
            seed: 0,
            secret: ClusterSecret::random(),
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            stats: TcpStats::default(),
            bulk_lanes: 4,
            bulk_buffer: None,
            link_bandwidth: 125_000_000,
            tls: None,
        }
    }
}

/// Where each peer listens. Cheap to clone; clones share the same map, so the owner can update
/// addresses at runtime (membership changes, a node restarting on a new port).
#[derive(Clone, Debug, Default)]
pub struct AddressBook {
    inner: Arc<RwLock<BTreeMap<NodeId, SocketAddr>>>,
}

impl AddressBook {
    /// A book with these addresses.
    pub fn new(addresses: BTreeMap<NodeId, SocketAddr>) -> Self {
        Self {
            inner: Arc::new(RwLock::new(addresses)),
        }
    }

    /// Sets (or replaces) `node`'s address.
    pub fn set(&self, node: NodeId, addr: SocketAddr) {
        self.inner.write().insert(node, addr);
    }

    /// Forgets `node`'s address.
    pub fn remove(&self, node: NodeId) {
        self.inner.write().remove(&node);
    }

    /// `node`'s address, if known.
    pub fn get(&self, node: NodeId) -> Option<SocketAddr> {
        self.inner.read().get(&node).copied()
    }

    /// A copy of every address.
    pub fn snapshot(&self) -> BTreeMap<NodeId, SocketAddr> {
        self.inner.read().clone()
    }
}

/// Starts a TCP transport for `local`: accepts peers on `listener`, connects to peers found in
/// `book`, and runs until `shutdown` is cancelled (dropping the transport does not stop its
/// tasks; cancelling fails waiting requests with [`NetError::Closed`]). Must be called inside
/// a tokio runtime.
pub fn start<M: Message>(
    local: NodeId,
    listener: TcpListener,
    book: AddressBook,
    config: TcpConfig,
    shutdown: CancellationToken,
) -> (Transport<M>, Inbox<M>) {
    let shared = Arc::new(Shared {
        local,
        handshakes: Arc::new(Semaphore::new(
            config.max_handshakes.clamp(1, Semaphore::MAX_PERMITS),
        )),
        config,
        book,
        shutdown,
        dispatcher: OnceLock::new(),
        peers: Mutex::new(BTreeMap::new()),
        inbound: Mutex::new(BTreeMap::new()),
        next_conn: AtomicU64::new(0),
    });
    let wire: Arc<dyn Wire<M>> = Arc::new(TcpWire {
        shared: shared.clone(),
    });
    let (transport, inbox, dispatcher) = Transport::assemble(local, wire, shared.config.inbox);
    let _ = shared.dispatcher.set(dispatcher.clone());
    let token = shared.shutdown.clone();
    tokio::spawn(async move {
        token.cancelled().await;
        dispatcher.close();
    });
    tokio::spawn(accept_loop(shared, listener));
    (transport, inbox)
}

enum Status {
    Up,
    Down { until: Instant, reason: String },
}

/// A frame body on its way out, and the payload that follows it.
struct Outgoing {
    frame: Bytes,
    payload: Option<Payload>,
}

/// A connection's send queue.
type SendQueue = mpsc::Sender<Outgoing>;

struct Peer {
    tx: SendQueue,
    status: Arc<Mutex<Status>>,
}

struct Shared<M> {
    local: NodeId,
    config: TcpConfig,
    book: AddressBook,
    shutdown: CancellationToken,
    dispatcher: OnceLock<Dispatcher<M>>,
    /// Outbound connections by (peer, lane): lane 0 is the control connection.
    peers: Mutex<BTreeMap<(NodeId, u8), Peer>>,
    /// The latest inbound control connection from each peer: (connection id, its send queue).
    inbound: Mutex<BTreeMap<NodeId, (u64, SendQueue)>>,
    next_conn: AtomicU64,
    /// One permit per accepted connection in its handshake (`max_handshakes`).
    handshakes: Arc<Semaphore>,
}

impl<M> Shared<M> {
    /// What the next connection encrypts with (the configuration in force: a certificate
    /// reload applies to new connections); `None` on plain TCP.
    fn tls(&self) -> Option<PeerTls> {
        self.config.tls.as_ref().and_then(|t| t.peer())
    }
}

struct TcpWire<M> {
    shared: Arc<Shared<M>>,
}

impl<M: Message> TcpWire<M> {
    /// Encodes `env`, and picks the lane it goes on: a bulk lane for a payload (by its
    /// stream), the control connection otherwise.
    fn check(&self, mut env: Envelope<M>) -> Result<(Outgoing, u8), NetError> {
        if self.shared.shutdown.is_cancelled() {
            return Err(NetError::Closed);
        }
        let frame = envelope::encode(&env, self.shared.config.max_frame)?;
        let payload = env.payload.take();
        let lanes = self.shared.config.bulk_lanes;
        let lane = match &payload {
            Some(p) if lanes > 0 => 1 + (p.stream() % u32::from(lanes)) as u8,
            _ => 0,
        };
        Ok((Outgoing { frame, payload }, lane))
    }

    /// The inbound connection to answer `to` on, for a response on the control lane (a
    /// response with a payload goes on this node's own bulk connection to `to` when it knows
    /// `to`'s address).
    fn reply_queue(&self, to: NodeId, env: &Envelope<M>) -> Option<SendQueue> {
        if !matches!(env.kind, Kind::Response { .. }) {
            return None;
        }
        if env.payload.is_some()
            && self.shared.config.bulk_lanes > 0
            && self.shared.book.get(to).is_some()
        {
            return None;
        }
        let inbound = self.shared.inbound.lock();
        inbound
            .get(&to)
            .map(|(_, tx)| tx.clone())
            .filter(|tx| !tx.is_closed())
    }

    /// The queue of the outbound connection on `lane`, spawning its task if needed; fails
    /// fast while the peer is known to be down.
    fn outbound(&self, to: NodeId, lane: u8) -> Result<SendQueue, NetError> {
        let mut peers = self.shared.peers.lock();
        if let Some(p) = peers.get(&(to, lane)).filter(|p| !p.tx.is_closed()) {
            if let Status::Down { until, reason } = &*p.status.lock()
                && Instant::now() < *until
            {
                return Err(NetError::Unreachable {
                    peer: to,
                    reason: reason.clone(),
                });
            }
            return Ok(p.tx.clone());
        }
        let (tx, rx) = mpsc::channel(self.shared.config.send_queue.max(1));
        let status = Arc::new(Mutex::new(Status::Up));
        tokio::spawn(peer_task(self.shared.clone(), to, lane, rx, status.clone()));
        peers.insert(
            (to, lane),
            Peer {
                tx: tx.clone(),
                status,
            },
        );
        Ok(tx)
    }

    fn overloaded(&self, to: NodeId, queue: &'static str) -> NetError {
        NetError::Overloaded {
            peer: to,
            queue,
            capacity: self.shared.config.send_queue.max(1),
        }
    }
}

impl<M: Message> Wire<M> for TcpWire<M> {
    fn transmit(&self, to: NodeId, env: Envelope<M>) -> Result<(), NetError> {
        let reply = self.reply_queue(to, &env);
        let (mut out, lane) = self.check(env)?;
        if let Some(tx) = reply {
            match tx.try_send(out) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(self.overloaded(to, "TCP response queue"));
                }
                Err(mpsc::error::TrySendError::Closed(o)) => out = o,
            }
        }
        self.outbound(to, lane)?.try_send(out).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => self.overloaded(to, "TCP send queue"),
            mpsc::error::TrySendError::Closed(_) => NetError::Closed,
        })
    }

    fn transmit_wait(&self, to: NodeId, env: Envelope<M>) -> BoxFuture<'_, Result<(), NetError>> {
        Box::pin(async move {
            let reply = self.reply_queue(to, &env);
            let (mut out, lane) = self.check(env)?;
            if let Some(tx) = reply {
                match tx.send(out).await {
                    Ok(()) => return Ok(()),
                    Err(mpsc::error::SendError(o)) => out = o,
                }
            }
            let tx = self.outbound(to, lane)?;
            tx.send(out).await.map_err(|_| NetError::Closed)
        })
    }
}

/// The wait after the `failures`-th consecutive failed connect.
fn backoff(config: &TcpConfig, failures: u32, rng: &mut ChaCha8Rng) -> Duration {
    let exp = config
        .backoff_initial
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    let capped = exp.min(config.backoff_max);
    capped.mul_f64(rng.random_range(0.5..=1.0))
}

fn drain(rx: &mut mpsc::Receiver<Outgoing>) {
    while rx.try_recv().is_ok() {}
}

/// Owns one outbound connection to a peer (its control connection, or bulk lane `lane`):
/// connects on demand, writes queued frames, and on any failure fails the peer's waiting
/// requests and drops what was queued.
async fn peer_task<M: Message>(
    shared: Arc<Shared<M>>,
    peer: NodeId,
    lane: u8,
    mut rx: mpsc::Receiver<Outgoing>,
    status: Arc<Mutex<Status>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(
        shared.config.seed
            ^ splitmix64((u64::from(shared.local.0) << 32) | u64::from(peer.0))
            ^ u64::from(lane),
    ));
    let mut failures = 0u32;
    let fail = |reason: String| {
        if let Some(d) = shared.dispatcher.get() {
            d.fail_peer(peer, NetError::Unreachable { peer, reason });
        }
    };
    loop {
        let first = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        // A frame that slipped in while the peer was marked down.
        let down = match &*status.lock() {
            Status::Down { until, reason } if Instant::now() < *until => Some(reason.clone()),
            _ => None,
        };
        if let Some(reason) = down {
            drain(&mut rx);
            fail(reason);
            continue;
        }
        match connect(&shared, peer, lane).await {
            Err(reason) => {
                if shared.shutdown.is_cancelled() {
                    return;
                }
                failures += 1;
                let wait = backoff(&shared.config, failures, &mut rng);
                let reason = format!("{reason}; next attempt in {} ms", wait.as_millis());
                tracing::debug!(local = %shared.local, %peer, %reason, "connect failed");
                *status.lock() = Status::Down {
                    until: Instant::now() + wait,
                    reason: reason.clone(),
                };
                drain(&mut rx);
                fail(reason);
            }
            Ok((stream, rest)) => {
                failures = 0;
                *status.lock() = Status::Up;
                let reason = run_outbound(&shared, peer, stream, rest, first, &mut rx).await;
                tracing::debug!(local = %shared.local, %peer, %reason, "connection closed");
                if shared.shutdown.is_cancelled() {
                    // The shutdown watcher fails waiting requests with `Closed`.
                    if let Some(d) = shared.dispatcher.get() {
                        d.close();
                    }
                    return;
                }
                drain(&mut rx);
                fail(format!("connection lost: {reason}"));
            }
        }
    }
}

async fn connect<M: Message>(
    shared: &Shared<M>,
    peer: NodeId,
    lane: u8,
) -> Result<(PeerStream, BytesMut), String> {
    let addr = shared
        .book
        .get(peer)
        .ok_or_else(|| "no address for it in the address book".to_string())?;
    let attempt = tokio::time::timeout(shared.config.connect_timeout, TcpStream::connect(addr));
    let stream = tokio::select! {
        () = shared.shutdown.cancelled() => return Err("shutting down".into()),
        r = attempt => r
            .map_err(|_| format!("connect to {addr} timed out"))?
            .map_err(|e| format!("connect to {addr} failed: {e}"))?,
    };
    let _ = stream.set_nodelay(true);
    let handshake = tokio::time::timeout(shared.config.handshake_timeout, async {
        let stream = start_tls(shared.tls(), stream, addr).await?;
        connector_handshake(shared, peer, lane, stream).await
    });
    tokio::select! {
        () = shared.shutdown.cancelled() => Err("shutting down".into()),
        r = handshake => r.unwrap_or_else(|_| Err(format!("no handshake from {addr} in time"))),
    }
}

/// The connecting end's TLS handshake, when peer links are encrypted.
async fn start_tls(
    tls: Option<PeerTls>,
    stream: TcpStream,
    addr: SocketAddr,
) -> Result<PeerStream, String> {
    let Some(tls) = tls else {
        return Ok(PeerStream::Plain(stream));
    };
    match tls
        .connector
        .connect(PeerTls::server_name(addr), stream)
        .await
    {
        Ok(s) => Ok(PeerStream::Tls(Box::new(s.into()))),
        Err(e) => Err(format!(
            "TLS handshake with {addr} failed: {e} (does it use tls-cluster with the same CA?)"
        )),
    }
}

/// The accepting end's TLS handshake, when peer links are encrypted.
async fn accept_tls(tls: Option<PeerTls>, stream: TcpStream) -> Result<PeerStream, String> {
    let Some(tls) = tls else {
        return Ok(PeerStream::Plain(stream));
    };
    match tls.acceptor.accept(stream).await {
        Ok(s) => Ok(PeerStream::Tls(Box::new(s.into()))),
        Err(e) => Err(format!("TLS handshake failed: {e}")),
    }
}

/// Sizes a bulk connection's socket buffers to what its measured round trip needs.
fn size_bulk_buffers(config: &TcpConfig, stream: &TcpStream, lane: u8, rtt: Duration) {
    if lane == 0 {
        return;
    }
    let size = config.bulk_buffer_for(rtt);
    let sock = socket2::SockRef::from(stream);
    let _ = sock.set_send_buffer_size(size);
    let _ = sock.set_recv_buffer_size(size);
    tracing::debug!(
        lane,
        rtt_us = rtt.as_micros() as u64,
        size,
        "bulk connection buffers"
    );
}

/// The connector's half of the handshake: answers the acceptor's challenge and checks its
/// proof. Returns the stream and the bytes read past the handshake.
async fn connector_handshake<M: Message>(
    shared: &Shared<M>,
    peer: NodeId,
    lane: u8,
    mut stream: PeerStream,
) -> Result<(PeerStream, BytesMut), String> {
    let mut codec = FrameCodec::new(HANDSHAKE_MAX_FRAME);
    let mut buf = BytesMut::new();
    let frame = read_frame(&mut stream, &mut codec, &mut buf).await?;
    let challenge = Challenge::decode(&frame).map_err(|e| e.to_string())?;
    let hello = Hello::new(shared.local, &challenge, &shared.config.secret).on_lane(lane);
    let sent = Instant::now();
    write_frame(&mut stream, &mut codec, hello.encode()).await?;
    let frame = read_frame(&mut stream, &mut codec, &mut buf)
        .await
        .map_err(|e| format!("{e}: {peer} refused our handshake (another cluster secret?)"))?;
    let welcome = Welcome::decode(&frame).map_err(|e| e.to_string())?;
    if !welcome.verify(peer, &challenge, &hello, &shared.config.secret) {
        tracing::warn!(local = %shared.local, %peer, "the peer did not prove the cluster secret");
        return Err(format!(
            "{peer} did not prove the cluster secret (is it configured with the same one?)"
        ));
    }
    size_bulk_buffers(&shared.config, stream.tcp(), lane, sent.elapsed());
    Ok((stream, buf))
}

/// Reads one frame from `rd`, keeping what follows it in `buf`.
async fn read_frame(
    rd: &mut (impl AsyncReadExt + Unpin),
    codec: &mut FrameCodec,
    buf: &mut BytesMut,
) -> Result<Bytes, String> {
    loop {
        if let Some(frame) = codec.decode(buf).map_err(|e| e.to_string())? {
            return Ok(frame.freeze());
        }
        match rd.read_buf(buf).await {
            Ok(0) => return Err("closed during the handshake".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}

/// Writes one frame to `wr`.
async fn write_frame(
    wr: &mut (impl AsyncWriteExt + Unpin),
    codec: &mut FrameCodec,
    frame: Bytes,
) -> Result<(), String> {
    let mut out = BytesMut::new();
    codec.encode(frame, &mut out).map_err(|e| e.to_string())?;
    wr.write_all(&out)
        .await
        .map_err(|e| format!("write failed: {e}"))?;
    wr.flush().await.map_err(|e| format!("write failed: {e}"))
}

/// How many bytes of frames without payloads are batched into one write.
const BATCH: usize = 256 * 1024;

/// Writes `first` and whatever else is already queued: frames without payloads batched into
/// one buffer (up to about [`BATCH`] bytes), a payload right after its frame header, with no
/// copy of its bytes.
async fn write_queued(
    wr: &mut PeerWriter,
    codec: &mut FrameCodec,
    buf: &mut BytesMut,
    first: Outgoing,
    rx: &mut mpsc::Receiver<Outgoing>,
) -> std::io::Result<()> {
    let mut next = Some(first);
    while let Some(Outgoing { frame, payload }) = next.take() {
        // Frames were size-checked when queued, so encoding cannot fail.
        let _ = codec.encode(frame, buf);
        if let Some(p) = payload {
            write_payload(wr, buf.split().freeze(), &p).await?;
        }
        if buf.len() < BATCH {
            next = rx.try_recv().ok();
        }
    }
    if !buf.is_empty() {
        wr.write_all(buf).await?;
        buf.clear();
    }
    // A TLS session may hold the last record back until flushed; plain TCP ignores it.
    wr.flush().await
}

/// Writes `head` (frame headers and bodies) and then `payload`: one vectored write for
/// in-memory bytes, `sendfile(2)` for a file range.
async fn write_payload(wr: &mut PeerWriter, head: Bytes, payload: &Payload) -> std::io::Result<()> {
    match payload.data() {
        PayloadData::Bytes(b) => {
            let mut chain = head.chain(b.clone());
            wr.write_all_buf(&mut chain).await
        }
        PayloadData::File(f) => {
            wr.write_all(&head).await?;
            wr.send_file(f).await
        }
    }
}

/// Runs an established outbound connection until it fails; returns why it ended.
async fn run_outbound<M: Message>(
    shared: &Arc<Shared<M>>,
    peer: NodeId,
    stream: PeerStream,
    rest: BytesMut,
    first: Outgoing,
    rx: &mut mpsc::Receiver<Outgoing>,
) -> String {
    let (rd, mut wr) = stream.into_split();
    let mut reader = tokio::spawn(read_loop(shared.clone(), rd, peer, rest));
    let mut codec = FrameCodec::new(shared.config.max_frame);
    let mut buf = BytesMut::new();
    let mut next = Some(first);
    let reason = loop {
        if let Some(out) = next.take() {
            tokio::select! {
                r = write_queued(&mut wr, &mut codec, &mut buf, out, rx) => if let Err(e) = r {
                    break format!("write failed: {e}");
                },
                () = shared.shutdown.cancelled() => break "shutting down".into(),
                r = &mut reader => break r.unwrap_or_else(|e| e.to_string()),
            }
            continue;
        }
        tokio::select! {
            () = shared.shutdown.cancelled() => break "shutting down".into(),
            r = &mut reader => break r.unwrap_or_else(|e| e.to_string()),
            m = rx.recv() => match m {
                Some(o) => next = Some(o),
                None => break "transport dropped".into(),
            },
        }
    };
    reader.abort();
    reason
}

/// Reads frames (and the payloads after them) from `peer` and hands them to the node, waiting
/// while its inbox is full. Returns why it stopped; any decode error ends this connection
/// only.
async fn read_loop<M: Message>(
    shared: Arc<Shared<M>>,
    mut rd: PeerReader,
    peer: NodeId,
    mut buf: BytesMut,
) -> String {
    let Some(dispatcher) = shared.dispatcher.get().cloned() else {
        return "transport not started".into();
    };
    let mut codec = FrameCodec::new(shared.config.max_frame);
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => {
                let (mut env, payload): (Envelope<M>, usize) = match envelope::decode(&frame) {
                    Ok(decoded) => decoded,
                    Err(e) => {
                        tracing::warn!(local = %shared.local, %peer, error = %e, "closing connection");
                        return format!("malformed frame: {e}");
                    }
                };
                if env.from != peer {
                    tracing::warn!(local = %shared.local, %peer, claimed = %env.from, "closing connection: sender mismatch");
                    return format!(
                        "frame claims to come from {} on {peer}'s connection",
                        env.from
                    );
                }
                if payload > codec.max() {
                    tracing::warn!(local = %shared.local, %peer, payload, "closing connection: oversized payload");
                    return format!("a payload of {payload} bytes exceeds {}", codec.max());
                }
                if payload > 0 {
                    buf.reserve(payload.saturating_sub(buf.len()));
                    while buf.len() < payload {
                        let n = tokio::select! {
                            () = shared.shutdown.cancelled() => return "shutting down".into(),
                            n = rd.read_buf(&mut buf) => n,
                        };
                        match n {
                            Ok(0) => return "closed by the peer inside a payload".into(),
                            Ok(_) => {}
                            Err(e) => return format!("read failed: {e}"),
                        }
                    }
                    env.payload = Some(Payload::bytes(buf.split_to(payload).freeze()));
                }
                tokio::select! {
                    () = shared.shutdown.cancelled() => return "shutting down".into(),
                    r = dispatcher.deliver_wait(env) => if r.is_err() {
                        return "local transport closed".into();
                    },
                }
            }
            Ok(None) => {
                let n = tokio::select! {
                    () = shared.shutdown.cancelled() => return "shutting down".into(),
                    n = rd.read_buf(&mut buf) => n,
                };
                match n {
                    Ok(0) => return "closed by the peer".into(),
                    Ok(_) => {}
                    Err(e) => return format!("read failed: {e}"),
                }
            }
            Err(e) => {
                tracing::warn!(local = %shared.local, %peer, error = %e, "closing connection");
                return e.to_string();
            }
        }
    }
}

async fn accept_loop<M: Message>(shared: Arc<Shared<M>>, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, addr)) => match shared.handshakes.clone().try_acquire_owned() {
                Ok(permit) => {
                    tokio::spawn(inbound(shared.clone(), stream, addr, permit));
                }
                Err(_) => {
                    // Dropping the stream closes it: nothing was read or reserved for it.
                    let busy = &shared.config.stats.inner.handshakes_busy;
                    let total = busy.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(local = %shared.local, %addr, total, "too many handshakes at once: closing connection");
                }
            },
            Err(e) => {
                // E.g. out of file descriptors: wait a little instead of spinning.
                tracing::warn!(local = %shared.local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The acceptor's half of the handshake: challenges the connector, checks its proof and
/// proves the secret in turn. Returns the connector's hello and the round trip it took.
async fn acceptor_handshake<M: Message>(
    shared: &Shared<M>,
    stream: &mut PeerStream,
    buf: &mut BytesMut,
) -> Result<(Hello, Duration), String> {
    let mut codec = FrameCodec::new(HANDSHAKE_MAX_FRAME);
    let challenge = Challenge::new();
    write_frame(stream, &mut codec, challenge.encode()).await?;
    let sent = Instant::now();
    let frame = read_frame(stream, &mut codec, buf).await?;
    let rtt = sent.elapsed();
    let hello = Hello::decode(&frame).map_err(|e| e.to_string())?;
    if !hello.verify(&challenge, &shared.config.secret) {
        return Err(format!("{} did not prove the cluster secret", hello.node));
    }
    let welcome = Welcome::new(shared.local, &challenge, &hello, &shared.config.secret);
    write_frame(stream, &mut codec, welcome.encode()).await?;
    Ok((hello, rtt))
}

/// Serves one accepted connection: handshake (holding `permit`, one of `max_handshakes`),
/// then requests in, responses out.
async fn inbound<M: Message>(
    shared: Arc<Shared<M>>,
    stream: TcpStream,
    addr: SocketAddr,
    permit: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::new();
    let handshake = async {
        let mut stream = accept_tls(shared.tls(), stream).await?;
        let hello = acceptor_handshake(&shared, &mut stream, &mut buf).await?;
        Ok::<_, String>((stream, hello))
    };
    let hello = tokio::select! {
        () = shared.shutdown.cancelled() => return,
        r = tokio::time::timeout(shared.config.handshake_timeout, handshake) =>
            r.unwrap_or_else(|_| Err("no handshake in time".into())),
    };
    drop(permit);
    let (stream, peer, lane) = match hello {
        Ok((stream, (hello, rtt))) => {
            size_bulk_buffers(&shared.config, stream.tcp(), hello.lane, rtt);
            (stream, hello.node, hello.lane)
        }
        Err(reason) => {
            shared
                .config
                .stats
                .inner
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(local = %shared.local, %addr, %reason, "rejecting connection");
            return;
        }
    };
    let (rd, wr) = stream.into_split();
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel(shared.config.send_queue.max(1));
    if lane == 0 {
        shared.inbound.lock().insert(peer, (id, tx));
    }
    let writer = tokio::spawn(write_loop(shared.clone(), wr, rx));
    let reason = read_loop(shared.clone(), rd, peer, buf).await;
    tracing::debug!(local = %shared.local, %peer, lane, %reason, "inbound connection closed");
    {
        let mut inbound = shared.inbound.lock();
        if inbound.get(&peer).is_some_and(|(i, _)| *i == id) {
            inbound.remove(&peer);
        }
    }
    writer.abort();
}

/// Writes an inbound connection's responses.
async fn write_loop<M: Message>(
    shared: Arc<Shared<M>>,
    mut wr: PeerWriter,
    mut rx: mpsc::Receiver<Outgoing>,
) {
    let mut codec = FrameCodec::new(shared.config.max_frame);
    let mut buf = BytesMut::new();
    loop {
        let out = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            m = rx.recv() => match m {
                Some(o) => o,
                None => return,
            },
        };
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            r = write_queued(&mut wr, &mut codec, &mut buf, out, &mut rx) => if r.is_err() {
                return;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_seeded_jitter() {
        let config = TcpConfig {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            ..TcpConfig::default()
        };
        let run = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (1..=8)
                .map(|f| backoff(&config, f, &mut rng))
                .collect::<Vec<_>>()
        };
        let waits = run(1);
        for (i, w) in waits.iter().enumerate() {
            let full = (Duration::from_millis(100) * (1 << i)).min(Duration::from_secs(1));
            assert!(*w >= full / 2 && *w <= full, "attempt {}: {w:?}", i + 1);
        }
        assert_eq!(waits, run(1), "same seed, same waits");
        assert_ne!(waits, run(2));
    }
}
