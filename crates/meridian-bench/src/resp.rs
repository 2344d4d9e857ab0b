//! A pipelined RESP client [`crate::runner::Target`]: drives any Redis-protocol server
//! (redis-server, a Meridian node's RESP port) from the load generator.
//!
//! Design: a [`RespTarget`] holds, per DC, `connections` TCP connections (`TCP_NODELAY`) to each
//! of that DC's addresses. Each connection is a classic multiplexer:
//! - a request encodes its command straight into the connection's outgoing buffer and queues
//!   a oneshot sender, both under one short lock (the buffer is the channel to the writer);
//! - one **writer task** takes everything queued since its last write and sends it in one
//!   `write` (coalescing: under load, one syscall carries many requests);
//! - one **reader task** reads with a large buffer, parses every complete reply and hands
//!   them, in order, to the oldest pending senders (RESP replies are FIFO).
//!
//! Guarantees:
//! - **Bounded pipelining:** at most [`RespConfig::pipeline`] requests are in flight per
//!   connection (a semaphore; a permit is returned when the reply arrives or the connection
//!   dies). A request from client `c` uses connection `c % connections` of its address (see
//!   [`RespTarget`] for the full routing rule), so a closed loop with
//!   `threads = connections × pipeline` keeps exactly `pipeline` requests in flight on every
//!   connection, like `redis-benchmark -c connections -P pipeline`.
//! - **Short error codes:** a server error reply `-WRONGTYPE ...` fails the op with its first
//!   word (`WRONGTYPE`, `ERR`, and a Meridian cluster's classes `UNAVAILABLE` — quorum or
//!   master unreachable —, `TRYAGAIN` — overload —, `CONFLICT`), except the server's own
//!   request timer, `-TIMEOUT need=...`, which is [`SERVER_TIMEOUT`] so it is never counted
//!   as this client's deadline; transport failures use [`CONNECTION`],
//!   [`PROTOCOL`] and [`TIMEOUT`]; a read of a missing key is [`NOT_FOUND`] (as in YCSB's
//!   Redis binding, an empty read is not a success); scans are [`UNSUPPORTED`].
//! - **No hang, no panic:** every request finishes within [`RespConfig::timeout`] (plus at
//!   most one watchdog period, a tenth of it clamped to 1–100 ms). A lost connection fails its
//!   pending requests with [`CONNECTION`], a malformed reply with [`PROTOCOL`]. Requests still
//!   unanswered at their deadline fail with [`TIMEOUT`] (a per-connection watchdog checks,
//!   so the hot path arms no timer) and their connection is closed, since replies are FIFO
//!   and everything queued behind them is stuck too: the others pending there fail with
//!   [`CONNECTION`]. The next request reconnects, lazily, waiting out an exponential backoff
//!   ([`MIN_BACKOFF`] to [`MAX_BACKOFF`]) after a failed attempt.
//! - **Bounded memory:** a reply larger than [`MAX_REPLY_BYTES`], or nested deeper than
//!   [`MAX_DEPTH`], is a protocol error, never an allocation.
//! - **Locality:** a RESP server does not say whether an op crossed a DC boundary, so every
//!   success reports `remote = false` and the runner files it under *local*; errors are filed
//!   by the key's home DC as usual.
//!
//! Replies are checked and read where they lie by the workspace's one RESP codec,
//! [`meridian_server::resp::frame`]: [`frame::frame_len`] delimits each reply (RESP2 and RESP3,
//! every type; attributes skipped; streamed `?` lengths refused) within [`MAX_REPLY_BYTES`] and
//! [`MAX_DEPTH`], allocating nothing, and [`frame::peek`] shows its top level to the
//! classifier. Out-of-band frames (pushes) are skipped when matching replies to requests.
//! Commands are written by [`frame::encode_command`] straight into the connection's buffer.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use meridian_server::resp::frame::{self, DecodeLimits, Peek};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, Semaphore, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::BenchError;
use crate::runner::{Outcome, Payload, Request, Target};
use crate::workload::Op;

/// Error code of a request that did not complete within [`RespConfig::timeout`].
pub const TIMEOUT: &str = "TIMEOUT";
/// Error code of a server that answered `-TIMEOUT ...`: its own request timer expired
/// before a quorum answered (distinct from [`TIMEOUT`], this client's deadline).
pub const SERVER_TIMEOUT: &str = "SERVER_TIMEOUT";
/// Error code of a request whose connection could not be opened or was lost.
pub const CONNECTION: &str = "CONNECTION";
/// Error code of a request whose connection received a malformed or unsolicited reply.
pub const PROTOCOL: &str = "PROTOCOL";
/// Error code of an operation the command set cannot express (scans).
pub const UNSUPPORTED: &str = "UNSUPPORTED";
/// Error code of a read whose key does not exist (null or empty reply).
pub const NOT_FOUND: &str = "NOT_FOUND";
/// Error code of a request from a DC that has no address list.
pub const NO_DC: &str = "NO_DC";

/// Largest reply accepted, headers included: 512 MiB, Redis's own `proto-max-bulk-len`.
pub const MAX_REPLY_BYTES: usize = frame::MAX_FRAME_BYTES;
/// Deepest nesting of aggregates accepted in a reply.
pub const MAX_DEPTH: usize = frame::MAX_DEPTH;
/// First delay before retrying a failed connect.
pub const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// Longest delay between two connect attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the reply decoder accepts.
const LIMITS: DecodeLimits = DecodeLimits {
    max_frame: MAX_REPLY_BYTES,
    max_depth: MAX_DEPTH,
};
/// Read buffer growth step.
const READ_CHUNK: usize = 64 * 1024;
/// A writer buffer grown beyond this by a burst is given back after the burst.
const MAX_IDLE_WRITE_BUFFER: usize = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// Which commands the YCSB operations become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CommandSet {
    /// Strings: read → `GET key`; update, insert → `SET key value`; read-modify-write →
    /// `GET key` then `SET key value`; scan → [`UNSUPPORTED`].
    #[default]
    Plain,
    /// Hashes, like YCSB's own Redis binding: read → `HGETALL key`; update, insert →
    /// `HSET key field0 value` (one field holds the whole record: the workload generates a
    /// record as one value of `fieldcount × fieldlength` bytes); read-modify-write →
    /// `HGETALL` then `HSET`; scan → [`UNSUPPORTED`].
    Hash,
    /// Meridian timeline buckets: read → `MERIDIAN.GET key LATEST` when `latest`, else
    /// `MERIDIAN.GET key ANY` (a plain `GET` reads at the master too); writes →
    /// `SET key value`; scan → [`UNSUPPORTED`].
    MeridianTimeline {
        /// Reads ask for the latest version (`LATEST`) rather than any replica's.
        latest: bool,
    },
}

impl CommandSet {
    /// Appends the read command for `key` to `out`.
    pub fn encode_read(self, out: &mut BytesMut, key: &[u8]) {
        match self {
            CommandSet::Plain => frame::encode_command(out, &[b"GET", key]),
            CommandSet::Hash => frame::encode_command(out, &[b"HGETALL", key]),
            CommandSet::MeridianTimeline { latest } => {
                let mode: &[u8] = if latest { b"LATEST" } else { b"ANY" };
                frame::encode_command(out, &[b"MERIDIAN.GET", key, mode]);
            }
        }
    }

    /// Appends the write command storing `value` under `key` to `out`.
    pub fn encode_write(self, out: &mut BytesMut, key: &[u8], value: &[u8]) {
        match self {
            CommandSet::Plain | CommandSet::MeridianTimeline { .. } => {
                frame::encode_command(out, &[b"SET", key, value]);
            }
            CommandSet::Hash => frame::encode_command(out, &[b"HSET", key, b"field0", value]),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reply classification (the multiplexer's allocation-free view of a frame)
// ---------------------------------------------------------------------------------------------

/// What a request learns from its reply.
#[derive(Debug)]
enum Reply {
    /// Any non-error, non-empty reply.
    Value,
    /// A null, an empty aggregate, or an array whose first element is null (`MERIDIAN.GET`'s
    /// `[nil, nil]`): the key does not exist.
    Miss,
    /// The server's error reply, by its first word.
    Error(String),
    /// The connection failed (one of this module's codes).
    Failed(&'static str),
}

/// The first word of an error message (`ERR` if empty).
fn error_code(message: &[u8]) -> String {
    let word = message.split(|&b| b == b' ').next().unwrap_or_default();
    if word.is_empty() {
        "ERR".to_string()
    } else if word == TIMEOUT.as_bytes() {
        SERVER_TIMEOUT.to_string()
    } else {
        String::from_utf8_lossy(word).into_owned()
    }
}

/// Classifies one complete, checked frame; `None` for out-of-band frames (pushes) that answer
/// no request.
fn classify(frame: &[u8]) -> Option<Reply> {
    Some(match frame::peek(frame) {
        None => Reply::Failed(PROTOCOL),
        Some(Peek::Error(message)) => Reply::Error(error_code(message)),
        Some(Peek::Null) => Reply::Miss,
        Some(Peek::Aggregate { kind: b'>', .. }) => return None,
        Some(Peek::Aggregate { len: 0, .. }) => Reply::Miss,
        Some(Peek::Aggregate {
            kind: b'*', items, ..
        }) if frame::peek(items) == Some(Peek::Null) => Reply::Miss,
        Some(Peek::Aggregate { .. } | Peek::Scalar { .. }) => Reply::Value,
    })
}

// ---------------------------------------------------------------------------------------------
// Connections
// ---------------------------------------------------------------------------------------------

/// How to reach the servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RespConfig {
    /// Per DC, the `host:port` addresses a client of that DC uses (round-robin by client).
    /// A single list serves every DC.
    pub addrs: Vec<Vec<String>>,
    /// Connections per address.
    pub connections: usize,
    /// Most requests in flight per connection (`redis-benchmark -P`).
    pub pipeline: usize,
    /// Longest a request may take, queueing and reconnecting included (enforced to within a
    /// tenth of it, at most 100 ms); also bounds each connect attempt.
    pub timeout: Duration,
    /// Which commands the operations become.
    pub commands: CommandSet,
}

impl RespConfig {
    /// One address for every DC, one connection, no pipelining, a 10 s timeout, plain
    /// `GET`/`SET`.
    pub fn new(addr: impl Into<String>) -> Self {
        RespConfig {
            addrs: vec![vec![addr.into()]],
            connections: 1,
            pipeline: 1,
            timeout: Duration::from_secs(10),
            commands: CommandSet::Plain,
        }
    }
}

/// A [`Target`] speaking RESP to one or more servers; see the module header for guarantees.
///
/// Routing: a request from client `c` in DC `d` uses the address list `d` (list 0 if only one
/// is configured; a DC without a list fails with [`NO_DC`]). With `k = c` for a single list,
/// or `k = c / lists` otherwise (the runner puts client `c` in DC `c mod dcs`, so `k` counts
/// the DC's own clients), the request goes to address `k mod addresses` of the list, on that
/// address's connection `(k / addresses) mod connections`. With one address this is
/// connection `c mod connections`.
#[derive(Debug)]
pub struct RespTarget {
    /// Per address list, its connections: entry `i` is address `i mod addresses`.
    dcs: Vec<Vec<Arc<Conn>>>,
    commands: CommandSet,
    timeout: Duration,
    opened: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Conn {
    /// `host:port` as configured, for messages.
    name: String,
    addrs: Vec<SocketAddr>,
    /// Longest a request may take.
    timeout: Duration,
    permits: Semaphore,
    state: Mutex<State>,
    wake_writer: Notify,
    connecting: tokio::sync::Mutex<Backoff>,
    opened: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct State {
    /// Incremented at each connect; tasks of an older generation stand down.
    generation: u64,
    live: bool,
    /// Encoded commands not yet taken by the writer.
    out: BytesMut,
    /// One entry per command sent or queued, oldest first.
    pending: VecDeque<Pending>,
    tasks: Vec<AbortHandle>,
}

/// A request waiting for its reply.
#[derive(Debug)]
struct Pending {
    tx: oneshot::Sender<Reply>,
    /// When the request times out (the watchdog's business).
    deadline: Instant,
}

#[derive(Debug)]
struct Backoff {
    delay: Duration,
    retry_at: Option<Instant>,
}

impl Conn {
    async fn open(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in &self.addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
    }

    fn install(self: &Arc<Self>, stream: TcpStream) {
        let (rd, wr) = stream.into_split();
        let mut st = self.state.lock();
        st.generation += 1;
        let generation = st.generation;
        st.live = true;
        st.out.clear();
        let reader = tokio::spawn(read_loop(Arc::clone(self), generation, rd));
        let writer = tokio::spawn(write_loop(Arc::clone(self), generation, wr));
        let watchdog = tokio::spawn(watch_loop(Arc::clone(self), generation, self.timeout));
        st.tasks = vec![
            reader.abort_handle(),
            writer.abort_handle(),
            watchdog.abort_handle(),
        ];
        self.opened.fetch_add(1, Ordering::Relaxed);
    }

    /// Closes connection `generation` (if still current) and fails its pending requests with
    /// `code`, or with [`TIMEOUT`] those whose deadline is not after `expired_at`.
    fn kill(&self, generation: u64, code: &'static str, expired_at: Option<Instant>) {
        let (pending, tasks) = {
            let mut st = self.state.lock();
            if st.generation != generation || !st.live {
                return;
            }
            st.live = false;
            st.out.clear();
            (
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.tasks),
            )
        };
        for task in tasks {
            task.abort();
        }
        let n = pending.len();
        for p in pending {
            let code = match expired_at {
                Some(now) if p.deadline <= now => TIMEOUT,
                _ => code,
            };
            // The request may have been abandoned: nobody to tell then.
            let _ = p.tx.send(Reply::Failed(code));
        }
        self.permits.add_permits(n);
    }

    fn shutdown(&self) {
        let generation = self.state.lock().generation;
        self.kill(generation, CONNECTION, None);
    }

    /// Opens a new connection unless one is live, honouring the backoff after failures.
    async fn reconnect(self: &Arc<Self>, deadline: Instant) -> Result<(), &'static str> {
        let mut backoff = tokio::time::timeout_at(deadline, self.connecting.lock())
            .await
            .map_err(|_| TIMEOUT)?;
        if self.state.lock().live {
            return Ok(());
        }
        if let Some(at) = backoff.retry_at
            && Instant::now() < at
        {
            // Fail, but not faster than the backoff: a closed loop must not spin.
            drop(backoff);
            tokio::time::sleep_until(at.min(deadline)).await;
            return Err(CONNECTION);
        }
        let attempt = tokio::time::timeout_at(deadline, self.open()).await;
        if let Ok(Ok(stream)) = attempt {
            self.install(stream);
            backoff.delay = MIN_BACKOFF;
            backoff.retry_at = None;
            return Ok(());
        }
        backoff.retry_at = Some(Instant::now() + backoff.delay);
        backoff.delay = (backoff.delay * 2).min(MAX_BACKOFF);
        match attempt {
            Err(_elapsed) => Err(TIMEOUT),
            _ => Err(CONNECTION),
        }
    }

    /// Queues one command if the connection is live: its generation and whether the writer
    /// must be woken; otherwise gives the sender back.
    fn enqueue(
        &self,
        encode: &impl Fn(&mut BytesMut),
        pending: Pending,
    ) -> Result<(u64, bool), Pending> {
        let mut st = self.state.lock();
        if !st.live {
            return Err(pending);
        }
        let wake = st.out.is_empty();
        encode(&mut st.out);
        st.pending.push_back(pending);
        Ok((st.generation, wake))
    }

    /// Sends one command and waits for its reply: `Ok(true)` if the reply says "no such key".
    async fn call(
        self: &Arc<Self>,
        deadline: Instant,
        encode: impl Fn(&mut BytesMut),
    ) -> Result<bool, String> {
        // Fast path without a timer: a permit is free (a closed loop sized to the pipeline).
        let permit = match self.permits.try_acquire() {
            Ok(permit) => permit,
            Err(_) => match tokio::time::timeout_at(deadline, self.permits.acquire()).await {
                Ok(Ok(permit)) => permit,
                Ok(Err(_closed)) => return Err(CONNECTION.into()),
                Err(_elapsed) => return Err(TIMEOUT.into()),
            },
        };
        let (tx, rx) = oneshot::channel();
        let mut pending = Pending { tx, deadline };
        let wake = loop {
            match self.enqueue(&encode, pending) {
                Ok((_generation, wake)) => break wake,
                Err(back) => {
                    pending = back;
                    self.reconnect(deadline).await.map_err(String::from)?;
                }
            }
        };
        // The permit now belongs to the pending entry: the reader (or `kill`) returns it.
        permit.forget();
        if wake {
            self.wake_writer.notify_one();
        }
        // No timer here: the connection's watchdog fails this request at its deadline.
        match rx.await {
            Ok(Reply::Value) => Ok(false),
            Ok(Reply::Miss) => Ok(true),
            Ok(Reply::Error(code)) => Err(code),
            Ok(Reply::Failed(code)) => Err(code.into()),
            Err(_dropped) => Err(CONNECTION.into()),
        }
    }
}

async fn write_loop(conn: Arc<Conn>, generation: u64, mut wr: OwnedWriteHalf) {
    let mut batch = BytesMut::with_capacity(READ_CHUNK);
    loop {
        conn.wake_writer.notified().await;
        // Tokio runs a task woken by another task next (the LIFO slot): without this yield the
        // writer would send each request alone, right after the first one is queued. Yielding
        // lets every other runnable task (the requests the reader just answered) queue first,
        // so one write carries them all.
        tokio::task::yield_now().await;
        loop {
            {
                let mut st = conn.state.lock();
                if st.generation != generation || !st.live {
                    return;
                }
                if st.out.is_empty() {
                    break;
                }
                std::mem::swap(&mut st.out, &mut batch);
            }
            if wr.write_all(&batch).await.is_err() {
                conn.kill(generation, CONNECTION, None);
                return;
            }
            batch.clear();
            if batch.capacity() > MAX_IDLE_WRITE_BUFFER {
                batch = BytesMut::with_capacity(READ_CHUNK);
            }
        }
    }
}

/// Fails the requests of connection `generation` whose deadline passed, and closes it: replies
/// are FIFO, so everything queued behind a stuck request is stuck as well. One timer per
/// connection instead of one per request; a request fails at most one period late.
async fn watch_loop(conn: Arc<Conn>, generation: u64, timeout: Duration) {
    let period = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let now = Instant::now();
        let expired = {
            let st = conn.state.lock();
            if st.generation != generation || !st.live {
                return;
            }
            st.pending.iter().any(|p| p.deadline <= now)
        };
        if expired {
            conn.kill(generation, CONNECTION, Some(now));
            return;
        }
    }
}

async fn read_loop(conn: Arc<Conn>, generation: u64, mut rd: OwnedReadHalf) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut replies: Vec<Reply> = Vec::with_capacity(64);
    let mut senders: Vec<Pending> = Vec::with_capacity(64);
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        match rd.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                conn.kill(generation, CONNECTION, None);
                return;
            }
            Ok(_) => {}
        }
        let mut pos = 0;
        let malformed = loop {
            // An unfinished reply already over the limit is an error too: memory is bounded.
            match frame::frame_len(&buf[pos..], &LIMITS) {
                Ok(Some(len)) => {
                    replies.extend(classify(&buf[pos..pos + len]));
                    pos += len;
                }
                Ok(None) => break false,
                Err(_) => break true,
            }
        };
        buf.advance(pos);
        if !replies.is_empty() {
            let solicited = {
                let mut st = conn.state.lock();
                if st.generation != generation || !st.live {
                    return;
                }
                let ok = st.pending.len() >= replies.len();
                if ok {
                    senders.extend(st.pending.drain(..replies.len()));
                }
                ok
            };
            if !solicited {
                conn.kill(generation, PROTOCOL, None);
                return;
            }
            let n = senders.len();
            for (p, reply) in senders.drain(..).zip(replies.drain(..)) {
                // The request may have been abandoned: nobody to tell then.
                let _ = p.tx.send(reply);
            }
            conn.permits.add_permits(n);
        }
        if malformed {
            conn.kill(generation, PROTOCOL, None);
            return;
        }
    }
}

impl RespTarget {
    /// Resolves every address, opens every connection and checks each address answers `PING`.
    ///
    /// # Errors
    /// [`BenchError::Target`] naming the address if the configuration is unusable, an address
    /// does not resolve, a connection cannot be opened within the timeout, or the server
    /// refuses `PING` (e.g. `NOAUTH`).
    pub async fn connect(config: RespConfig) -> Result<RespTarget, BenchError> {
        let fail = |reason: String| Err(BenchError::Target { reason });
        if config.addrs.is_empty() || config.addrs.iter().any(Vec::is_empty) {
            return fail("every DC needs at least one `host:port` address".into());
        }
        if config.connections == 0 {
            return fail("connections per address must be at least 1".into());
        }
        if config.pipeline == 0 || config.pipeline > Semaphore::MAX_PERMITS {
            return fail(format!(
                "pipeline depth {} must be in 1..={}",
                config.pipeline,
                Semaphore::MAX_PERMITS
            ));
        }
        if config.timeout.is_zero() {
            return fail("the request timeout must be positive".into());
        }
        let opened = Arc::new(AtomicU64::new(0));
        let mut dcs = Vec::with_capacity(config.addrs.len());
        for (dc, list) in config.addrs.iter().enumerate() {
            let mut resolved = Vec::with_capacity(list.len());
            for name in list {
                let addrs: Vec<SocketAddr> = match tokio::time::timeout(
                    config.timeout,
                    tokio::net::lookup_host(name),
                )
                .await
                {
                    Ok(Ok(addrs)) => addrs.collect(),
                    Ok(Err(e)) => {
                        return fail(format!(
                            "DC {dc}: cannot resolve `{name}` ({e}); give addresses as host:port"
                        ));
                    }
                    Err(_) => {
                        return fail(format!(
                            "DC {dc}: resolving `{name}` took longer than {:?}",
                            config.timeout
                        ));
                    }
                };
                if addrs.is_empty() {
                    return fail(format!("DC {dc}: `{name}` resolves to no address"));
                }
                resolved.push((name.clone(), addrs));
            }
            let mut conns = Vec::with_capacity(resolved.len() * config.connections);
            for _ in 0..config.connections {
                for (name, addrs) in &resolved {
                    conns.push(Arc::new(Conn {
                        name: name.clone(),
                        addrs: addrs.clone(),
                        timeout: config.timeout,
                        permits: Semaphore::new(config.pipeline),
                        state: Mutex::new(State::default()),
                        wake_writer: Notify::new(),
                        connecting: tokio::sync::Mutex::new(Backoff {
                            delay: MIN_BACKOFF,
                            retry_at: None,
                        }),
                        opened: Arc::clone(&opened),
                    }));
                }
            }
            dcs.push(conns);
        }
        // Built first, so that a failure below closes what was opened (`Drop`).
        let target = RespTarget {
            dcs,
            commands: config.commands,
            timeout: config.timeout,
            opened,
        };
        let mut opening = JoinSet::new();
        for (dc, conns) in target.dcs.iter().enumerate() {
            for conn in conns {
                let conn = Arc::clone(conn);
                let timeout = config.timeout;
                opening.spawn(async move {
                    match tokio::time::timeout(timeout, conn.open()).await {
                        Ok(Ok(stream)) => {
                            conn.install(stream);
                            Ok(())
                        }
                        Ok(Err(e)) => Err(format!(
                            "DC {dc}: cannot connect to {} ({e}); is a RESP server \
                             (redis-server, a Meridian node's RESP port) listening there?",
                            conn.name
                        )),
                        Err(_) => Err(format!(
                            "DC {dc}: connecting to {} took longer than {timeout:?}; is the \
                             address reachable?",
                            conn.name
                        )),
                    }
                });
            }
        }
        while let Some(done) = opening.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => return fail(reason),
                Err(e) => return fail(format!("connect task failed: {e}")),
            }
        }
        // The first `addresses` connections of a DC cover each address once.
        for (dc, conns) in target.dcs.iter().enumerate() {
            let addresses = config.addrs[dc].len();
            for conn in &conns[..addresses] {
                let deadline = Instant::now() + config.timeout;
                if let Err(code) = conn
                    .call(deadline, |out| frame::encode_command(out, &[b"PING"]))
                    .await
                {
                    return fail(format!(
                        "DC {dc}: {} did not answer PING ({code}); is it a RESP server, and \
                         does it need no AUTH?",
                        conn.name
                    ));
                }
            }
        }
        Ok(target)
    }

    /// Address lists configured (requests from DC `d ≥ dcs()` fail unless it is 1).
    pub fn dcs(&self) -> usize {
        self.dcs.len()
    }

    /// Connections opened so far, initial ones and reconnections included.
    pub fn connections_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    fn route(&self, request: &Request) -> Option<&Arc<Conn>> {
        let client = request.client as usize;
        let (list, k) = match self.dcs.len() {
            1 => (0, client),
            lists => (request.dc as usize, client / lists),
        };
        let conns = self.dcs.get(list)?;
        conns.get(k % conns.len())
    }
}

impl Drop for RespTarget {
    fn drop(&mut self) {
        for conn in self.dcs.iter().flatten() {
            conn.shutdown();
        }
    }
}

impl Target for RespTarget {
    async fn execute(&self, request: Request) -> Result<Outcome, String> {
        let deadline = Instant::now() + self.timeout;
        let Some(conn) = self.route(&request) else {
            return Err(NO_DC.into());
        };
        let commands = self.commands;
        let key = request.key.as_slice();
        let value = match &request.payload {
            Payload::Value(v) => v.as_slice(),
            Payload::None | Payload::ScanLength(_) => &[],
        };
        match request.op {
            Op::Read => {
                if conn
                    .call(deadline, |out| commands.encode_read(out, key))
                    .await?
                {
                    return Err(NOT_FOUND.into());
                }
            }
            Op::Update | Op::Insert => {
                conn.call(deadline, |out| commands.encode_write(out, key, value))
                    .await?;
            }
            Op::ReadModifyWrite => {
                // A missing record is not an error here: the write creates it.
                conn.call(deadline, |out| commands.encode_read(out, key))
                    .await?;
                conn.call(deadline, |out| commands.encode_write(out, key, value))
                    .await?;
            }
            Op::Scan => {
                // Yield, so that a closed loop of scans cannot starve the runtime.
                tokio::task::yield_now().await;
                return Err(UNSUPPORTED.into());
            }
        }
        Ok(Outcome { remote: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_server::resp::Frame;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::net::TcpListener;

    // ---- replies and commands, through the shared codec -------------------------------

    /// How the read loop sees `bytes`: each complete reply classified, then whether the rest
    /// is malformed (`Err`) or just unfinished (`Ok`).
    fn read(bytes: &[u8]) -> (Vec<Option<Reply>>, Result<(), ()>) {
        let (mut pos, mut got) = (0, Vec::new());
        loop {
            match frame::frame_len(&bytes[pos..], &LIMITS) {
                Ok(Some(len)) => {
                    got.push(classify(&bytes[pos..pos + len]));
                    pos += len;
                }
                Ok(None) => return (got, Ok(())),
                Err(_) => return (got, Err(())),
            }
        }
    }

    #[test]
    fn classification_drives_the_op_result() {
        let code = |f: &[u8]| match classify(f) {
            Some(Reply::Error(c)) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(code(b"-ERR unknown command 'FOO'\r\n"), "ERR");
        assert_eq!(code(b"-WRONGTYPE Operation against a key\r\n"), "WRONGTYPE");
        assert_eq!(
            code(b"-UNAVAILABLE master_unavailable dc=1\r\n"),
            "UNAVAILABLE"
        );
        assert_eq!(
            code(b"-UNAVAILABLE r_val_unsatisfied need=2 got=1\r\n"),
            "UNAVAILABLE"
        );
        assert_eq!(code(b"-TRYAGAIN overload\r\n"), "TRYAGAIN");
        assert_eq!(
            code(b"-TIMEOUT need=2 ok=1 nf=0 fail=0 missing=n4\r\n"),
            SERVER_TIMEOUT
        );
        assert_eq!(code(b"-\r\n"), "ERR");
        assert_eq!(code(b"!21\r\nSYNTAX invalid syntax\r\n"), "SYNTAX");
        for miss in [
            &b"$-1\r\n"[..],
            b"*-1\r\n",
            b"_\r\n",
            b"*0\r\n",
            b"%0\r\n",
            b"~0\r\n",
            b"*2\r\n$-1\r\n$-1\r\n",
            b"*2\r\n_\r\n_\r\n",
            b"*2\r\n|1\r\n+a\r\n+b\r\n_\r\n:1\r\n",
            b"|1\r\n+ttl\r\n:3600\r\n$-1\r\n",
        ] {
            assert!(matches!(classify(miss), Some(Reply::Miss)), "{miss:?}");
        }
        for value in [
            &b"$0\r\n\r\n"[..],
            b"+OK\r\n",
            b":0\r\n",
            b"#f\r\n",
            b"*2\r\n$1\r\na\r\n:1\r\n",
            b"%1\r\n+a\r\n+b\r\n",
            b"|1\r\n+ttl\r\n:3600\r\n+OK\r\n",
        ] {
            assert!(matches!(classify(value), Some(Reply::Value)), "{value:?}");
        }
        // Pushes answer no request, attributes before them or not.
        assert!(classify(b">1\r\n+x\r\n").is_none());
        assert!(classify(b"|1\r\n+a\r\n+b\r\n>1\r\n+x\r\n").is_none());
    }

    #[test]
    fn malformed_and_oversized_replies_fail_the_connection() {
        // Replies before the bad one still answer their requests.
        for bad in [
            &b"?what\r\n"[..],
            b"+OK\rX",
            b":12a\r\n",
            b"$3\r\nabcX\r\n",
            b"$?\r\n",
            b"*-2\r\n",
            b"_x\r\n",
        ] {
            let (got, rest) = read(&[b"+OK\r\n", bad].concat());
            assert!(matches!(got[..], [Some(Reply::Value)]), "{bad:?}");
            assert_eq!(rest, Err(()), "{bad:?}");
        }
        // Bounded memory: a declared length or count over the limit is refused from its
        // header alone, and so is nesting deeper than MAX_DEPTH.
        let limit = (MAX_REPLY_BYTES + 1).to_string();
        for bad in [
            format!("${limit}\r\n").into_bytes(),
            format!("*{limit}\r\n").into_bytes(),
            format!("%{}\r\n", MAX_REPLY_BYTES / 2).into_bytes(),
            b"*1\r\n".repeat(MAX_DEPTH + 2),
        ] {
            assert!(matches!(read(&bad), (r, Err(())) if r.is_empty()));
        }
        let deepest = [b"*1\r\n".repeat(MAX_DEPTH), b":1\r\n".to_vec()].concat();
        assert!(matches!(read(&deepest), (r, Ok(())) if r.len() == 1));
        // An unfinished reply is just that.
        assert!(matches!(read(b"$5\r\nab"), (r, Ok(())) if r.is_empty()));
    }

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = BytesMut::new();
        let long = vec![b'x'; 1234];
        CommandSet::Hash.encode_write(&mut out, b"k", &long);
        CommandSet::Plain.encode_write(&mut out, b"user1", b"");
        CommandSet::MeridianTimeline { latest: true }.encode_read(&mut out, b"k");
        let mut commands = Vec::new();
        while let Some(frame) = Frame::parse(&mut out).unwrap() {
            commands.push(command_args(frame));
        }
        assert_eq!(
            commands,
            vec![
                vec![b"HSET".to_vec(), b"k".to_vec(), b"field0".to_vec(), long],
                vec![b"SET".to_vec(), b"user1".to_vec(), b"".to_vec()],
                vec![b"MERIDIAN.GET".to_vec(), b"k".to_vec(), b"LATEST".to_vec()],
            ]
        );
    }

    proptest! {
        #[test]
        fn arbitrary_replies_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = read(&data);
            let _ = classify(&data);
        }
    }

    // ---- fake server --------------------------------------------------------------------

    fn command_args(frame: Frame) -> Vec<Vec<u8>> {
        match frame {
            Frame::Array(items) => items
                .into_iter()
                .map(|f| match f {
                    Frame::Bulk(b) => b.to_vec(),
                    other => panic!("not a bulk string: {other:?}"),
                })
                .collect(),
            other => panic!("not a command: {other:?}"),
        }
    }

    enum Act {
        Reply(Vec<u8>),
        /// Close the connection without answering anything buffered.
        Close,
        /// Never answer again on this connection.
        Hang,
    }

    /// The fake's answers, keyed on the key: `miss*` → null, `err:CODE` → `-CODE message`,
    /// `close` closes the connection, `hang` stops answering, `garbage` answers bytes that
    /// are not RESP, `huge` the header of a reply over [`MAX_REPLY_BYTES`], `deep` a reply
    /// nested deeper than [`MAX_DEPTH`]; otherwise `GET` echoes the key, `HGETALL` a one-field hash,
    /// `MERIDIAN.GET` `[key, 1]`, writes `+OK`.
    fn respond(args: &[Vec<u8>]) -> Act {
        let cmd = args[0].as_slice();
        let key = args.get(1).map(Vec::as_slice).unwrap_or_default();
        if cmd == b"PING" {
            return Act::Reply(b"+PONG\r\n".to_vec());
        }
        if let Some(code) = key.strip_prefix(b"err:") {
            return Act::Reply([b"-", code, b" something went wrong\r\n"].concat());
        }
        match key {
            b"close" => return Act::Close,
            b"hang" => return Act::Hang,
            b"garbage" => return Act::Reply(b"?\r\n".to_vec()),
            // Only a header, announcing more than MAX_REPLY_BYTES.
            b"huge" => return Act::Reply(format!("${}\r\n", MAX_REPLY_BYTES + 1).into_bytes()),
            b"deep" => return Act::Reply(b"*1\r\n".repeat(MAX_DEPTH + 2)),
            _ => {}
        }
        let miss = key.starts_with(b"miss");
        let reply = match cmd {
            b"GET" if miss => Frame::Null,
            b"GET" => Frame::bulk(key.to_vec()),
            b"HGETALL" if miss => Frame::Array(vec![]),
            b"HGETALL" => Frame::bulks([b"field0".to_vec(), key.to_vec()]),
            // RESP3's null beside RESP2's, as a mixed reply.
            b"MERIDIAN.GET" if miss => return Act::Reply(b"*2\r\n$-1\r\n_\r\n".to_vec()),
            b"MERIDIAN.GET" => Frame::Array(vec![Frame::bulk(key.to_vec()), Frame::Integer(1)]),
            b"SET" | b"HSET" => Frame::simple("OK"),
            _ => Frame::Error("ERR unknown command".into()),
        };
        Act::Reply(reply.to_bytes(false).to_vec())
    }

    /// (connection number, command) in arrival order.
    type Log = Arc<Mutex<Vec<(usize, Vec<Vec<u8>>)>>>;

    /// An in-process RESP server on 127.0.0.1:0 that answers with [`respond`], holding its
    /// answers until `hold` commands are waiting (so it sees the client's pipelining).
    struct Fake {
        addr: String,
        /// (connection number, command) in arrival order.
        log: Log,
        accepts: Arc<AtomicUsize>,
        /// Most commands received and not yet answered on one connection.
        max_waiting: Arc<AtomicUsize>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn fake(hold: usize) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let log = Arc::new(Mutex::new(Vec::new()));
        let accepts = Arc::new(AtomicUsize::new(0));
        let max_waiting = Arc::new(AtomicUsize::new(0));
        let (l, a, m) = (
            Arc::clone(&log),
            Arc::clone(&accepts),
            Arc::clone(&max_waiting),
        );
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let id = a.fetch_add(1, Ordering::SeqCst);
                let (l, m) = (Arc::clone(&l), Arc::clone(&m));
                conns.spawn(async move {
                    let mut buf = BytesMut::new();
                    let mut waiting = Vec::new();
                    let mut hung = false;
                    loop {
                        match socket.read_buf(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        while let Some(frame) = Frame::parse(&mut buf).unwrap() {
                            let args = command_args(frame);
                            l.lock().push((id, args.clone()));
                            if args[0] == b"PING" && waiting.is_empty() {
                                // The connect-time check is answered at once, whatever `hold`.
                                socket.write_all(b"+PONG\r\n").await.unwrap();
                                continue;
                            }
                            waiting.push(args);
                        }
                        if hung || waiting.len() < hold {
                            continue;
                        }
                        m.fetch_max(waiting.len(), Ordering::SeqCst);
                        let mut out = Vec::new();
                        for args in waiting.drain(..) {
                            match respond(&args) {
                                Act::Reply(r) => out.extend_from_slice(&r),
                                Act::Close => return,
                                Act::Hang => {
                                    hung = true;
                                    break;
                                }
                            }
                        }
                        socket.write_all(&out).await.unwrap();
                    }
                });
            }
        });
        Fake {
            addr,
            log,
            accepts,
            max_waiting,
            task,
        }
    }

    fn request(op: Op, key: &str, client: u32, dc: u32) -> Request {
        Request {
            op,
            keynum: 0,
            key: key.as_bytes().to_vec(),
            payload: match op {
                Op::Read => Payload::None,
                Op::Scan => Payload::ScanLength(10),
                _ => Payload::Value(b"value".to_vec()),
            },
            dc,
            client,
            seq: 0,
        }
    }

    fn config(addr: &str, connections: usize, pipeline: usize) -> RespConfig {
        RespConfig {
            connections,
            pipeline,
            timeout: Duration::from_secs(5),
            ..RespConfig::new(addr)
        }
    }

    async fn target(config: RespConfig) -> Arc<RespTarget> {
        Arc::new(RespTarget::connect(config).await.unwrap())
    }

    /// The commands the fake received, PINGs left out.
    fn sent(fake: &Fake) -> Vec<Vec<String>> {
        fake.log
            .lock()
            .iter()
            .filter(|(_, c)| c[0] != b"PING")
            .map(|(_, c)| {
                c.iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .collect()
    }

    #[tokio::test]
    async fn operations_become_the_command_sets_commands() {
        let server = fake(1).await;
        let cases: [(CommandSet, Op, &str, &[&[&str]]); 8] = [
            (CommandSet::Plain, Op::Read, "k", &[&["GET", "k"]]),
            (
                CommandSet::Plain,
                Op::Update,
                "k",
                &[&["SET", "k", "value"]],
            ),
            (
                CommandSet::Plain,
                Op::Insert,
                "k",
                &[&["SET", "k", "value"]],
            ),
            (
                CommandSet::Plain,
                Op::ReadModifyWrite,
                "miss",
                &[&["GET", "miss"], &["SET", "miss", "value"]],
            ),
            (CommandSet::Hash, Op::Read, "k", &[&["HGETALL", "k"]]),
            (
                CommandSet::Hash,
                Op::Update,
                "k",
                &[&["HSET", "k", "field0", "value"]],
            ),
            (
                CommandSet::MeridianTimeline { latest: true },
                Op::Read,
                "k",
                &[&["MERIDIAN.GET", "k", "LATEST"]],
            ),
            (
                CommandSet::MeridianTimeline { latest: false },
                Op::Read,
                "k",
                &[&["MERIDIAN.GET", "k", "ANY"]],
            ),
        ];
        for (commands, op, key, expected) in cases {
            let t = target(RespConfig {
                commands,
                ..config(&server.addr, 1, 1)
            })
            .await;
            server.log.lock().clear();
            assert_eq!(
                t.execute(request(op, key, 0, 0)).await,
                Ok(Outcome { remote: false })
            );
            let expected: Vec<Vec<String>> = expected
                .iter()
                .map(|c| c.iter().map(|s| s.to_string()).collect())
                .collect();
            assert_eq!(sent(&server), expected, "{commands:?} {op:?}");
        }
        // Scans are refused without a word to the server.
        let t = target(config(&server.addr, 1, 1)).await;
        server.log.lock().clear();
        assert_eq!(
            t.execute(request(Op::Scan, "k", 0, 0)).await,
            Err(UNSUPPORTED.into())
        );
        assert!(sent(&server).is_empty());
    }

    #[tokio::test]
    async fn missing_keys_and_error_replies_map_to_codes() {
        let server = fake(1).await;
        for commands in [
            CommandSet::Plain,
            CommandSet::Hash,
            CommandSet::MeridianTimeline { latest: true },
        ] {
            let t = target(RespConfig {
                commands,
                ..config(&server.addr, 1, 1)
            })
            .await;
            let read = |key: &str| t.execute(request(Op::Read, key, 0, 0));
            assert_eq!(read("miss").await, Err(NOT_FOUND.into()), "{commands:?}");
            assert_eq!(read("k").await, Ok(Outcome { remote: false }));
            assert_eq!(read("err:WRONGTYPE").await, Err("WRONGTYPE".into()));
            assert_eq!(read("err:UNAVAILABLE").await, Err("UNAVAILABLE".into()));
            assert_eq!(
                t.execute(request(Op::Update, "err:ERR", 0, 0)).await,
                Err("ERR".into())
            );
        }
    }

    #[tokio::test]
    async fn the_server_sees_exactly_pipeline_requests_in_flight() {
        let (pipeline, rounds) = (8, 5);
        let server = fake(pipeline).await;
        let t = target(config(&server.addr, 1, pipeline)).await;
        let mut ops = JoinSet::new();
        for i in 0..pipeline * rounds {
            let t = Arc::clone(&t);
            // Every client lands on the single connection.
            ops.spawn(async move {
                t.execute(request(Op::Update, &format!("k{i}"), i as u32, 0))
                    .await
            });
        }
        while let Some(r) = ops.join_next().await {
            assert_eq!(r.unwrap(), Ok(Outcome { remote: false }));
        }
        // The server answers only once `pipeline` commands wait: had the client sent fewer
        // the ops would have timed out; had it sent more, the maximum would show it.
        assert_eq!(server.max_waiting.load(Ordering::SeqCst), pipeline);
        assert_eq!(sent(&server).len(), pipeline * rounds);
        assert_eq!(t.connections_opened(), 1);
    }

    #[tokio::test]
    async fn replies_are_matched_in_order() {
        let pipeline = 16;
        let server = fake(pipeline).await;
        let t = target(config(&server.addr, 1, pipeline)).await;
        let mut ops = JoinSet::new();
        for i in 0..pipeline * 8 {
            let t = Arc::clone(&t);
            ops.spawn(async move {
                // Each reply is an error naming its own request.
                let key = format!("err:K{i}");
                (i, t.execute(request(Op::Read, &key, i as u32, 0)).await)
            });
        }
        while let Some(r) = ops.join_next().await {
            let (i, result) = r.unwrap();
            assert_eq!(result, Err(format!("K{i}")));
        }
    }

    #[tokio::test]
    async fn clients_are_routed_by_dc_and_index() {
        let (a, b2) = (fake(1).await, fake(1).await);
        // Two connections to one address: client c on connection c mod 2.
        let t = target(config(&a.addr, 2, 1)).await;
        a.log.lock().clear();
        for c in 0..6 {
            t.execute(request(Op::Update, &format!("c{c}"), c, 0))
                .await
                .unwrap();
        }
        let conn_of: Vec<usize> = a.log.lock().iter().map(|(id, _)| *id).collect();
        assert_eq!(conn_of.len(), 6);
        for c in 0..6 {
            assert_eq!(conn_of[c], conn_of[c % 2], "client {c}");
        }
        assert_ne!(conn_of[0], conn_of[1]);
        // One list per DC: DC d's clients only talk to DC d's server.
        let t = target(RespConfig {
            addrs: vec![vec![a.addr.clone()], vec![b2.addr.clone()]],
            ..config(&a.addr, 1, 1)
        })
        .await;
        assert_eq!(t.dcs(), 2);
        a.log.lock().clear();
        b2.log.lock().clear();
        t.execute(request(Op::Update, "in-dc0", 0, 0))
            .await
            .unwrap();
        t.execute(request(Op::Update, "in-dc1", 1, 1))
            .await
            .unwrap();
        assert_eq!(sent(&a), vec![vec!["SET", "in-dc0", "value"]]);
        assert_eq!(sent(&b2), vec![vec!["SET", "in-dc1", "value"]]);
        assert_eq!(
            t.execute(request(Op::Read, "k", 2, 2)).await,
            Err(NO_DC.into())
        );
    }

    #[tokio::test]
    async fn a_lost_connection_fails_its_requests_and_reconnects() {
        let pipeline = 4;
        let server = fake(pipeline).await;
        let t = target(config(&server.addr, 1, pipeline)).await;
        let mut ops = JoinSet::new();
        for (i, key) in ["a", "b", "close", "c"].into_iter().enumerate() {
            let t = Arc::clone(&t);
            ops.spawn(async move { t.execute(request(Op::Read, key, i as u32, 0)).await });
        }
        // The server closes with all four waiting: every one of them fails.
        while let Some(r) = ops.join_next().await {
            assert_eq!(r.unwrap(), Err(CONNECTION.into()));
        }
        // The next requests reconnect (the fake holds answers until 4 wait: send 4).
        let mut ops = JoinSet::new();
        for i in 0..4 {
            let t = Arc::clone(&t);
            ops.spawn(async move { t.execute(request(Op::Read, "k", i, 0)).await });
        }
        while let Some(r) = ops.join_next().await {
            assert_eq!(r.unwrap(), Ok(Outcome { remote: false }));
        }
        assert_eq!(server.accepts.load(Ordering::SeqCst), 2);
        assert_eq!(t.connections_opened(), 2);
    }

    #[tokio::test]
    async fn a_malformed_reply_is_a_protocol_error_then_reconnects() {
        let server = fake(1).await;
        let t = target(config(&server.addr, 1, 1)).await;
        // Not RESP; a header announcing an oversized reply (refused before its bytes come);
        // nesting past the limit.
        for (i, key) in ["garbage", "huge", "deep"].into_iter().enumerate() {
            assert_eq!(
                t.execute(request(Op::Read, key, 0, 0)).await,
                Err(PROTOCOL.into()),
                "{key}"
            );
            assert_eq!(
                t.execute(request(Op::Read, "k", 0, 0)).await,
                Ok(Outcome { remote: false })
            );
            assert_eq!(t.connections_opened(), 2 + i as u64);
        }
    }

    #[tokio::test]
    async fn a_silent_server_times_out_and_the_connection_is_replaced() {
        let server = fake(1).await;
        let t = target(RespConfig {
            timeout: Duration::from_millis(200),
            ..config(&server.addr, 1, 4)
        })
        .await;
        let began = std::time::Instant::now();
        assert_eq!(
            t.execute(request(Op::Read, "hang", 0, 0)).await,
            Err(TIMEOUT.into())
        );
        let took = began.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert_eq!(
            t.execute(request(Op::Read, "k", 0, 0)).await,
            Ok(Outcome { remote: false })
        );
        assert_eq!(server.accepts.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn unreachable_servers_are_reported_by_address() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        match RespTarget::connect(config(&addr, 1, 1)).await {
            Err(BenchError::Target { reason }) => {
                assert!(
                    reason.contains(&addr) && reason.contains("RESP server"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            RespConfig {
                connections: 0,
                ..config(&addr, 1, 1)
            },
            RespConfig {
                pipeline: 0,
                ..config(&addr, 1, 1)
            },
            RespConfig {
                addrs: vec![vec![]],
                ..config(&addr, 1, 1)
            },
            RespConfig {
                timeout: Duration::ZERO,
                ..config(&addr, 1, 1)
            },
            config("no-port-here", 1, 1),
        ] {
            assert!(matches!(
                RespTarget::connect(bad).await,
                Err(BenchError::Target { .. })
            ));
        }
    }

    #[tokio::test]
    async fn reconnecting_to_a_dead_server_backs_off() {
        let server = fake(1).await;
        let t = target(RespConfig {
            timeout: Duration::from_secs(1),
            ..config(&server.addr, 1, 1)
        })
        .await;
        drop(server);
        // The connection dies (the fake's tasks are aborted); later attempts are refused.
        let began = std::time::Instant::now();
        let mut codes = Vec::new();
        while began.elapsed() < Duration::from_millis(150) {
            codes.push(t.execute(request(Op::Read, "k", 0, 0)).await.unwrap_err());
        }
        assert!(codes.iter().all(|c| c == CONNECTION), "{codes:?}");
        // Backoff 10, 20, 40, 80 ms...: a handful of attempts, not a spin.
        assert!(codes.len() < 20, "{} attempts in 150 ms", codes.len());
    }

    #[tokio::test]
    async fn the_runner_drives_it_end_to_end() {
        use crate::runner::{Arrival, RunConfig, run};
        use crate::workload::CoreWorkload;
        let server = fake(1).await;
        let t = target(config(&server.addr, 2, 4)).await;
        let workload = CoreWorkload {
            record_count: 100,
            read_proportion: 0.5,
            update_proportion: 0.5,
            field_count: 1,
            field_length: 8,
            ..CoreWorkload::default()
        };
        let run_config = RunConfig::new(Arrival::Closed { threads: 8 }, Duration::from_millis(300));
        let r = run(Arc::clone(&t), &workload, &run_config, |_| {})
            .await
            .unwrap();
        assert!(r.ops_started > 100, "{}", r.ops_started);
        assert!(
            r.report.errors_by_code.is_empty(),
            "{:?}",
            r.report.errors_by_code
        );
        assert!(server.max_waiting.load(Ordering::SeqCst) <= 4);
        assert_eq!(t.connections_opened(), 2);
    }

    // ---- a real redis-server, when installed ---------------------------------------------

    struct Child(std::process::Child);

    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[tokio::test]
    async fn against_redis_server() {
        let bin = "/usr/bin/redis-server";
        if !std::path::Path::new(bin).exists() {
            println!(
                "skipped: {bin} is not installed (bash scripts/ensure-redis-tools.sh --server)"
            );
            return;
        }
        // Below the ephemeral range (32768+), where client sockets could take the port.
        let port = 20_000 + std::process::id() % 10_000;
        let _server = Child(
            std::process::Command::new(bin)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let addr = format!("127.0.0.1:{port}");
        let mut t = None;
        for _ in 0..100 {
            if let Ok(connected) = RespTarget::connect(config(&addr, 2, 16)).await {
                t = Some(Arc::new(connected));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let t = t.expect("redis-server did not come up within 5 s");
        let ok = Ok(Outcome { remote: false });
        let key = format!("resp-test-{}", std::process::id());
        assert_eq!(
            t.execute(request(Op::Read, &key, 0, 0)).await,
            Err(NOT_FOUND.into())
        );
        assert_eq!(t.execute(request(Op::Insert, &key, 0, 0)).await, ok);
        assert_eq!(t.execute(request(Op::Read, &key, 1, 0)).await, ok);
        assert_eq!(
            t.execute(request(Op::ReadModifyWrite, &key, 2, 0)).await,
            ok
        );
        let hash = Arc::new(
            RespTarget::connect(RespConfig {
                commands: CommandSet::Hash,
                ..config(&addr, 1, 1)
            })
            .await
            .unwrap(),
        );
        // A hash op on a string key: Redis's own error code comes through.
        assert_eq!(
            hash.execute(request(Op::Read, &key, 0, 0)).await,
            Err("WRONGTYPE".into())
        );
        let hkey = format!("{key}-hash");
        assert_eq!(hash.execute(request(Op::Update, &hkey, 0, 0)).await, ok);
        assert_eq!(hash.execute(request(Op::Read, &hkey, 0, 0)).await, ok);
        // A pipelined burst: every op answered, in order, on two connections.
        let mut ops = JoinSet::new();
        for i in 0..2000u32 {
            let t = Arc::clone(&t);
            let key = format!("{key}-{}", i % 50);
            ops.spawn(async move { t.execute(request(Op::Update, &key, i, 0)).await });
        }
        while let Some(r) = ops.join_next().await {
            assert_eq!(r.unwrap(), ok);
        }
        assert_eq!(t.connections_opened(), 2);
    }
}
