//! The TCP transport: nodes in different processes (or machines) exchange length-delimited
//! postcard frames over TCP.
//!
//! Connections: each node opens at most one outbound connection per peer, lazily on the first
//! message. The accepting node opens it with a [`Challenge`]; the connecting node answers with
//! a [`Hello`] naming itself and proving the cluster secret, and the acceptor proves it in turn
//! with a [`Welcome`] ([`crate::auth`]) before the connector sends anything else. Requests and one-way messages
//! go out on it; responses to them come back on the same connection, matched by request id, so
//! any number of requests are in flight at once and complete in any order. A node answers
//! requests on the connection they arrived on.
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
//! - Addresses come from an [`AddressBook`] that can change at runtime; a change applies to
//!   the next connection attempt.
//! - Everything stops when the `shutdown` token is cancelled: the listener, all connections,
//!   and waiting requests (which fail with [`NetError::Closed`]).

use crate::NetError;
use crate::auth::ClusterSecret;
use crate::envelope::{self, Challenge, Envelope, Hello, Kind, Message, Welcome};
use crate::frame::{DEFAULT_MAX_FRAME, FrameCodec};
use crate::transport::{BoxFuture, Dispatcher, Inbox, Transport, Wire};
use bytes::{Bytes, BytesMut};
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
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::{Decoder, Encoder};
use tokio_util::sync::CancellationToken;

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
    /// The secret both ends of every connection must prove (default: open, see
    /// [`ClusterSecret::open`]).
    pub secret: ClusterSecret,
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
            secret: ClusterSecret::open(),
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

struct Peer {
    tx: mpsc::Sender<Bytes>,
    status: Arc<Mutex<Status>>,
}

struct Shared<M> {
    local: NodeId,
    config: TcpConfig,
    book: AddressBook,
    shutdown: CancellationToken,
    dispatcher: OnceLock<Dispatcher<M>>,
    peers: Mutex<BTreeMap<NodeId, Peer>>,
    /// The latest inbound connection from each peer: (connection id, its send queue).
    inbound: Mutex<BTreeMap<NodeId, (u64, mpsc::Sender<Bytes>)>>,
    next_conn: AtomicU64,
}

struct TcpWire<M> {
    shared: Arc<Shared<M>>,
}

impl<M: Message> TcpWire<M> {
    fn check(&self, env: &Envelope<M>) -> Result<Bytes, NetError> {
        if self.shared.shutdown.is_cancelled() {
            return Err(NetError::Closed);
        }
        envelope::encode(env, self.shared.config.max_frame)
    }

    /// The inbound connection to answer `to` on, for a response.
    fn reply_queue(&self, to: NodeId, env: &Envelope<M>) -> Option<mpsc::Sender<Bytes>> {
        if !matches!(env.kind, Kind::Response { .. }) {
            return None;
        }
        let inbound = self.shared.inbound.lock();
        inbound
            .get(&to)
            .map(|(_, tx)| tx.clone())
            .filter(|tx| !tx.is_closed())
    }

    /// The outbound connection's queue, spawning its task if needed; fails fast while the
    /// peer is known to be down.
    fn outbound(&self, to: NodeId) -> Result<mpsc::Sender<Bytes>, NetError> {
        let mut peers = self.shared.peers.lock();
        if let Some(p) = peers.get(&to).filter(|p| !p.tx.is_closed()) {
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
        tokio::spawn(peer_task(self.shared.clone(), to, rx, status.clone()));
        peers.insert(
            to,
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
        let mut frame = self.check(&env)?;
        if let Some(tx) = self.reply_queue(to, &env) {
            match tx.try_send(frame) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(self.overloaded(to, "TCP response queue"));
                }
                Err(mpsc::error::TrySendError::Closed(f)) => frame = f,
            }
        }
        self.outbound(to)?.try_send(frame).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => self.overloaded(to, "TCP send queue"),
            mpsc::error::TrySendError::Closed(_) => NetError::Closed,
        })
    }

    fn transmit_wait(&self, to: NodeId, env: Envelope<M>) -> BoxFuture<'_, Result<(), NetError>> {
        Box::pin(async move {
            let mut frame = self.check(&env)?;
            if let Some(tx) = self.reply_queue(to, &env) {
                match tx.send(frame).await {
                    Ok(()) => return Ok(()),
                    Err(mpsc::error::SendError(f)) => frame = f,
                }
            }
            let tx = self.outbound(to)?;
            tx.send(frame).await.map_err(|_| NetError::Closed)
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

fn drain(rx: &mut mpsc::Receiver<Bytes>) {
    while rx.try_recv().is_ok() {}
}

/// Owns one peer's outbound connection: connects on demand, writes queued frames, and on any
/// failure fails the peer's waiting requests and drops what was queued.
async fn peer_task<M: Message>(
    shared: Arc<Shared<M>>,
    peer: NodeId,
    mut rx: mpsc::Receiver<Bytes>,
    status: Arc<Mutex<Status>>,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(
        shared.config.seed ^ splitmix64((u64::from(shared.local.0) << 32) | u64::from(peer.0)),
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
        match connect(&shared, peer).await {
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
) -> Result<(TcpStream, BytesMut), String> {
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
    let handshake = tokio::time::timeout(
        shared.config.handshake_timeout,
        connector_handshake(shared, peer, stream),
    );
    tokio::select! {
        () = shared.shutdown.cancelled() => Err("shutting down".into()),
        r = handshake => r.unwrap_or_else(|_| Err(format!("no handshake from {addr} in time"))),
    }
}

/// The connector's half of the handshake: answers the acceptor's challenge and checks its
/// proof. Returns the stream and the bytes read past the handshake.
async fn connector_handshake<M: Message>(
    shared: &Shared<M>,
    peer: NodeId,
    mut stream: TcpStream,
) -> Result<(TcpStream, BytesMut), String> {
    let mut codec = FrameCodec::new(shared.config.max_frame);
    let mut buf = BytesMut::new();
    let frame = read_frame(&mut stream, &mut codec, &mut buf).await?;
    let challenge = Challenge::decode(&frame).map_err(|e| e.to_string())?;
    let hello = Hello::new(shared.local, &challenge, &shared.config.secret);
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
        .map_err(|e| format!("write failed: {e}"))
}

/// Batches queued frames into one buffer, up to about 256 KiB.
fn fill(codec: &mut FrameCodec, buf: &mut BytesMut, first: Bytes, rx: &mut mpsc::Receiver<Bytes>) {
    // Frames were size-checked when queued, so encoding cannot fail.
    let _ = codec.encode(first, buf);
    while buf.len() < 256 * 1024 {
        match rx.try_recv() {
            Ok(f) => {
                let _ = codec.encode(f, buf);
            }
            Err(_) => break,
        }
    }
}

/// Runs an established outbound connection until it fails; returns why it ended.
async fn run_outbound<M: Message>(
    shared: &Arc<Shared<M>>,
    peer: NodeId,
    stream: TcpStream,
    rest: BytesMut,
    first: Bytes,
    rx: &mut mpsc::Receiver<Bytes>,
) -> String {
    let (rd, mut wr) = stream.into_split();
    let mut reader = tokio::spawn(read_loop(shared.clone(), rd, peer, rest));
    let mut codec = FrameCodec::new(shared.config.max_frame);
    let mut buf = BytesMut::new();
    let mut next = Some(first);
    let reason = loop {
        if let Some(frame) = next.take() {
            fill(&mut codec, &mut buf, frame, rx);
            tokio::select! {
                r = wr.write_all(&buf) => if let Err(e) = r {
                    break format!("write failed: {e}");
                },
                () = shared.shutdown.cancelled() => break "shutting down".into(),
                r = &mut reader => break r.unwrap_or_else(|e| e.to_string()),
            }
            buf.clear();
            continue;
        }
        tokio::select! {
            () = shared.shutdown.cancelled() => break "shutting down".into(),
            r = &mut reader => break r.unwrap_or_else(|e| e.to_string()),
            m = rx.recv() => match m {
                Some(f) => next = Some(f),
                None => break "transport dropped".into(),
            },
        }
    };
    reader.abort();
    reason
}

/// Reads frames from `peer` and hands them to the node, waiting while its inbox is full.
/// Returns why it stopped; any decode error ends this connection only.
async fn read_loop<M: Message>(
    shared: Arc<Shared<M>>,
    mut rd: OwnedReadHalf,
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
                let env: Envelope<M> = match envelope::decode(&frame) {
                    Ok(env) => env,
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
            Ok((stream, addr)) => {
                tokio::spawn(inbound(shared.clone(), stream, addr));
            }
            Err(e) => {
                // E.g. out of file descriptors: wait a little instead of spinning.
                tracing::warn!(local = %shared.local, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The acceptor's half of the handshake: challenges the connector, checks its proof and
/// proves the secret in turn. Returns the connecting node.
async fn acceptor_handshake<M: Message>(
    shared: &Shared<M>,
    rd: &mut OwnedReadHalf,
    wr: &mut OwnedWriteHalf,
    buf: &mut BytesMut,
) -> Result<NodeId, String> {
    let mut codec = FrameCodec::new(shared.config.max_frame);
    let challenge = Challenge::new();
    write_frame(wr, &mut codec, challenge.encode()).await?;
    let frame = read_frame(rd, &mut codec, buf).await?;
    let hello = Hello::decode(&frame).map_err(|e| e.to_string())?;
    if !hello.verify(&challenge, &shared.config.secret) {
        return Err(format!("{} did not prove the cluster secret", hello.node));
    }
    let welcome = Welcome::new(shared.local, &challenge, &hello, &shared.config.secret);
    write_frame(wr, &mut codec, welcome.encode()).await?;
    Ok(hello.node)
}

/// Serves one accepted connection: handshake, then requests in, responses out.
async fn inbound<M: Message>(shared: Arc<Shared<M>>, stream: TcpStream, addr: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::new();
    let hello = tokio::select! {
        () = shared.shutdown.cancelled() => return,
        r = tokio::time::timeout(
            shared.config.handshake_timeout,
            acceptor_handshake(&shared, &mut rd, &mut wr, &mut buf),
        ) => r.unwrap_or_else(|_| Err("no handshake in time".into())),
    };
    let peer = match hello {
        Ok(node) => node,
        Err(reason) => {
            tracing::warn!(local = %shared.local, %addr, %reason, "rejecting connection");
            return;
        }
    };
    let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel(shared.config.send_queue.max(1));
    shared.inbound.lock().insert(peer, (id, tx));
    let writer = tokio::spawn(write_loop(shared.clone(), wr, rx));
    let reason = read_loop(shared.clone(), rd, peer, buf).await;
    tracing::debug!(local = %shared.local, %peer, %reason, "inbound connection closed");
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
    mut wr: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Bytes>,
) {
    let mut codec = FrameCodec::new(shared.config.max_frame);
    let mut buf = BytesMut::new();
    loop {
        let frame = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            m = rx.recv() => match m {
                Some(f) => f,
                None => return,
            },
        };
        fill(&mut codec, &mut buf, frame, &mut rx);
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            r = wr.write_all(&buf) => if r.is_err() {
                return;
            },
        }
        buf.clear();
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
