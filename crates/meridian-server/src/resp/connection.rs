//! One client connection: read, parse every complete request, execute, write once.
//!
//! The loop keeps one read buffer and one output buffer for the connection's life. After
//! each read it parses and executes every complete request in the buffer, appending replies
//! to the output buffer, and writes that buffer with one `write_all` when no complete
//! request is left (so a pipeline of N requests costs one read and one write, not N). Only
//! if the output grows past 1 MiB mid-batch is it written early, to bound memory. Requests
//! are answered in order.
//!
//! Single node: each request runs to completion before the next is parsed; its arguments
//! are slices of the read buffer, never copied. The executor is synchronous; the one
//! exception, a `GET` or `BLOB.READ` of a large object stored in chunks (`resp::blob`),
//! leaves a deferred reply in the session, which the loop awaits here before it parses the
//! next request.
//!
//! Cluster mode: a key command waits for a replication round (quorums across nodes, maybe
//! across a WAN), so the key commands of one batch run concurrently, at most
//! `MAX_IN_FLIGHT` at once, polled by the connection's own task. Each owns its request's
//! bytes (split off the read buffer: a reference count, not a copy) and writes its own
//! reply, copied to the output in request order as the oldest finishes. A command first
//! waits for every earlier running command that touches one of its keys, so `SET k 1` then
//! `GET k` sees the SET. Every other command (connection and server commands such as AUTH,
//! HELLO, CLIENT, SELECT, QUIT, which may change the session) and every refused request is
//! a barrier: it waits for everything earlier, then runs alone. A batch's only request runs
//! in place, as on a single node. MULTI, EXEC, DISCARD, WATCH, UNWATCH and every request
//! while a transaction is open are barriers too, so commands before MULTI in a pipeline are
//! answered first and queued commands never run concurrently.
//!
//! Transactions (both modes): the session's `multi` state machine queues commands between
//! MULTI and EXEC; the standalone EXEC runs them atomically over the keyspace, cluster mode
//! hands them to `cluster_txn`. A connection that goes away drops its watched keys. The batch's replies are written once all its commands
//! have finished.
//!
//! Pub/sub and client tracking: the connection waits on its mailbox (`resp::pubsub`) beside
//! the socket and writes the messages that arrive between its commands — on a single node
//! also after each command of a pipeline, so an invalidation a command caused follows its
//! reply; a mailbox closed for falling behind ends the connection, even mid-write.
//!
//! The connection ends on EOF, QUIT, a protocol error (after the error reply and every
//! earlier reply are written), an I/O error, a request that outgrows the query-buffer
//! limit, or shutdown (checked only while waiting for input, so requests already read are
//! answered).

use crate::cluster_backend::ClusterBackend;
use crate::metrics::OpStats;
use crate::resp::conn_io::{self, FLUSH_AT, Io, write};
use crate::resp::context::{ClientInfo, RespContext};
use crate::resp::exec::{self, Flow, Session};
use crate::resp::pubsub;
use crate::resp::request::RequestParser;
use crate::resp::stream::ClientStream;
use bytes::{Buf, BytesMut};
use futures_util::stream::{FuturesOrdered, StreamExt};
use meridian_redis::{Args, Cmd, Reply};
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Initial (and steady-state) size of each buffer, like Redis's `PROTO_IOBUF_LEN`.
const IO_BUF: usize = 16 * 1024;
/// Buffers that grew past this are dropped once empty, so one large request or reply does
/// not pin memory for the rest of the connection.
const SHRINK_ABOVE: usize = 1024 * 1024;
/// The most the read buffer grows ahead of data for one large argument.
const MAX_PREALLOC: usize = 64 * 1024 * 1024;
/// Before `AUTH` (with a `requirepass`): the most the read buffer grows ahead of data. The
/// parser already refuses bulk strings over 16 KiB then (Redis's CVE-2021-32675 limits);
/// this keeps the reservation bounded even if those limits change.
const UNAUTHENTICATED_PREALLOC: usize = 2 * IO_BUF;
/// Before `AUTH`: the most unparsed input a connection may hold (the largest request the
/// parser admits then is 10 arguments of 16 KiB, or a 64 KiB inline line).
const UNAUTHENTICATED_QUERY_BUFFER: usize = 1024 * 1024;
/// Cluster mode: the most key commands one connection runs at once. Several client
/// pipelines' worth (redis-benchmark -P 16, a driver's batch), while one client can ask
/// only so much of the cluster at a time and hold only so many replies.
const MAX_IN_FLIGHT: usize = 64;
/// Cluster mode: the reply buffers of finished commands kept for the next ones, in bytes
/// of capacity; enough for a pipeline of small replies, small beside the I/O buffers.
const SPARE_REPLIES: usize = IO_BUF;

/// Serves one client until it goes away or `shutdown` is cancelled.
pub(crate) async fn run(
    ctx: &Arc<RespContext>,
    mut stream: ClientStream,
    info: Arc<ClientInfo>,
    shutdown: CancellationToken,
) {
    let limits = &ctx.config.limits;
    let mut parser = RequestParser::new(limits);
    let mut buf = BytesMut::with_capacity(IO_BUF);
    let mut reply = Reply::new(IO_BUF);
    // ACL changes close a connection through this token (`ClientInfo::kill`).
    let _ = info.kill_token.set(shutdown.clone());
    let protected = ctx
        .protected_mode
        .load(std::sync::atomic::Ordering::Relaxed);
    if crate::resp::acl::protected_mode_refuses(protected, &ctx.users, info.addr) {
        ctx.metrics
            .connections(crate::metrics::Frontend::Resp)
            .rejected
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = stream
            .write_all(crate::resp::acl::PROTECTED_MODE_DENIED.as_bytes())
            .await;
        let _ = stream.shutdown().await;
        return;
    }
    let mut session = Session::new(ctx, info);
    // Allocates nothing until cluster mode runs a command concurrently.
    let mut in_flight = InFlight::default();
    // Likewise, until a standalone node with the executor on runs a key command.
    let mut sharded = crate::resp::sharded::Running::default();
    // One waiter for the connection's life, rather than one per read.
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    loop {
        let room = read_room(
            parser.needed(),
            buf.len(),
            buf.capacity() - buf.len(),
            session.authed,
        );
        if room > 0 {
            buf.reserve(room);
        }
        let woke = tokio::select! {
            biased;
            r = stream.read_buf(&mut buf) => match r {
                Ok(n) => Woke::Read(n),
                Err(_) => break,
            },
            message = pubsub::next(&mut session.pubsub) => Woke::Message(message),
            _ = &mut cancelled => break,
        };
        let n = match woke {
            Woke::Read(0) => break,
            Woke::Read(n) => n,
            Woke::Message(first) => {
                // A subscriber's messages, written between its commands.
                let keep = pubsub::take(&mut session.pubsub, first, &mut reply);
                if !keep {
                    tracing::warn!(
                        client = %session.info.addr,
                        "closing RESP subscriber that reached the pubsub output buffer limit"
                    );
                }
                if !keep
                    || write_out(ctx, &mut stream, &mut reply, &shutdown, &session.pubsub)
                        .await
                        .is_err()
                {
                    break;
                }
                continue;
            }
        };
        ctx.net_input.fetch_add(n as u64, Ordering::Relaxed);

        let mut close = false;
        match &ctx.cluster {
            None if let Some(executor) = ctx.executor() => {
                let mut io = Io {
                    ctx,
                    stream: &mut stream,
                    shutdown: &shutdown,
                };
                let batch = crate::resp::sharded::batch(
                    &mut io,
                    executor,
                    &mut parser,
                    &mut buf,
                    &mut reply,
                    &mut session,
                    &mut sharded,
                );
                match batch.await {
                    Ok(c) => close = c,
                    Err(_) => return,
                }
            }
            None => {
                let mut pos = 0;
                let mut t0 = Instant::now();
                loop {
                    match parser.parse(&buf[pos..], session.authed) {
                        Ok(Some(len)) => {
                            let args = parser.args(&buf[pos..]);
                            pos += len;
                            if args.is_empty() {
                                continue;
                            }
                            let Ok(turn) = exec::script_turn(ctx, &session, args, &mut reply).await
                            else {
                                ctx.rejected_ops.observe(Instant::now() - t0, true);
                                t0 = Instant::now();
                                continue;
                            };
                            let (stats, mut error, flow) = if turn.is_some() && runs_script(args) {
                                let calls = ScriptCalls {
                                    parser: &mut parser,
                                    buf: &buf,
                                    first: pos - len,
                                };
                                calls
                                    .run(ctx, &mut session, &mut reply, &mut pos, &mut t0)
                                    .unwrap_or_else(|| {
                                        // Unreachable: the first call parsed just before.
                                        reply.error("ERR Protocol error: request lost");
                                        (&ctx.rejected_ops, true, Flow::Close)
                                    })
                            } else {
                                exec::execute(ctx, &mut session, &mut reply, args)
                            };
                            drop(turn);
                            // A large object's chunks are read here, on the connection's
                            // task, before the next request (replies stay in order).
                            if let Some(deferred) = session.deferred.take() {
                                error = exec::answer_deferred(&mut reply, deferred.0.await);
                            }
                            if let Some(wait) = session.blocked.take() {
                                let mut io = Io {
                                    ctx,
                                    stream: &mut stream,
                                    shutdown: &shutdown,
                                };
                                let served = &mut session.served;
                                match conn_io::wait_blocked(
                                    &mut io, &mut reply, &mut buf, wait, served,
                                )
                                .await
                                {
                                    Ok(failed) => error |= failed,
                                    Err(_) => return,
                                }
                            }
                            let t1 = Instant::now();
                            stats.observe(t1 - t0, error);
                            t0 = t1;
                            // Messages (pub/sub, tracking invalidations) come after the
                            // reply of the command that caused them, never inside one.
                            if !pubsub::deliver(&mut session.pubsub, &mut reply) {
                                close = true;
                                break;
                            }
                            if flow == Flow::Close {
                                close = true;
                                break;
                            }
                            if reply.out.len() >= FLUSH_AT {
                                let served = &mut session.served;
                                conn_io::answer_served(ctx, &stream, &mut reply, served);
                                if write(ctx, &mut stream, &mut reply, &shutdown)
                                    .await
                                    .is_err()
                                {
                                    return;
                                }
                                t0 = Instant::now();
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            reply.error(&format!("ERR {e}"));
                            close = true;
                            break;
                        }
                    }
                }
                buf.advance(pos);
            }
            Some(cluster) => {
                let mut io = Io {
                    ctx,
                    stream: &mut stream,
                    shutdown: &shutdown,
                };
                let batch = cluster_batch(
                    &mut io,
                    cluster,
                    &mut parser,
                    &mut buf,
                    &mut reply,
                    &mut session,
                    &mut in_flight,
                );
                match batch.await {
                    Ok(c) => close = c,
                    Err(_) => return,
                }
            }
        }
        if let Some(delay) = session.take_auth_delay() {
            // Repeated AUTH failures: answered late (`crate::auth`), or not at all at shutdown.
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.cancelled() => return,
            }
        }
        if buf.len() > query_buffer_limit(limits.max_query_buffer, session.authed) {
            tracing::warn!(
                client = %session.info.addr,
                "closing RESP client that reached the query buffer limit"
            );
            close = true;
        }
        session.touch(ctx);
        // Clients this connection's commands unblocked are answered after it (Redis's order).
        conn_io::answer_served(ctx, &stream, &mut reply, &mut session.served);
        if !reply.out.is_empty()
            && write_out(ctx, &mut stream, &mut reply, &shutdown, &session.pubsub)
                .await
                .is_err()
        {
            return;
        }
        if close {
            break;
        }
        if buf.is_empty() && buf.capacity() > SHRINK_ABOVE {
            buf = BytesMut::with_capacity(IO_BUF);
        }
        if reply.out.capacity() > SHRINK_ABOVE {
            reply.out = BytesMut::with_capacity(IO_BUF);
        }
    }
    let _ = stream.shutdown().await;
}

/// Writes the pending replies (and a subscriber's messages); for a subscriber, gives up
/// when its mailbox is closed for falling behind, so a client that stopped reading does not
/// hold the connection (and the messages queued for it) forever.
async fn write_out(
    ctx: &RespContext,
    stream: &mut ClientStream,
    reply: &mut Reply,
    shutdown: &CancellationToken,
    subscriptions: &pubsub::Subscribed,
) -> std::io::Result<()> {
    if !pubsub::receiving(subscriptions) {
        return write(ctx, stream, reply, shutdown).await;
    }
    tokio::select! {
        r = write(ctx, stream, reply, shutdown) => r,
        () = pubsub::closed(subscriptions) => Err(std::io::ErrorKind::ConnectionAborted.into()),
    }
}

/// Whether `args` is a script call (EVAL, EVALSHA, FCALL and their `_RO` forms).
fn runs_script(args: Args<'_>) -> bool {
    Cmd::lookup(args.get(0)).is_some_and(Cmd::runs_script)
}

/// The most script calls of one pipeline run in one turn ([`ScriptCalls::run`]).
const SCRIPT_BATCH: usize = 64;

/// A pipeline's consecutive script calls, from the one at `first` on.
struct ScriptCalls<'a> {
    parser: &'a mut RequestParser,
    buf: &'a [u8],
    first: usize,
}

impl ScriptCalls<'_> {
    /// Runs the calls back to back, the caller holding the interpreters' turn throughout (one
    /// turn taken instead of one per call), as Redis runs a client's
    /// pipelined calls in one go, at most [`SCRIPT_BATCH`] of them so that connections waiting
    /// for the turn get it between batches. Stops before a request that is not a script call, and after
    /// a call that ends the connection, starts MULTI, or leaves a megabyte of replies to
    /// write. Moves `pos` past the last call run and returns its outcome (`None` if the
    /// first did not parse); the earlier calls' are charged here.
    fn run<'c>(
        self,
        ctx: &'c RespContext,
        session: &mut Session,
        reply: &mut Reply,
        pos: &mut usize,
        t0: &mut Instant,
    ) -> Option<(&'c Arc<OpStats>, bool, Flow)> {
        let Self { parser, buf, first } = self;
        let mut at = first;
        let mut calls = 0;
        let mut last: Option<(&Arc<OpStats>, bool, Flow)> = None;
        while let Ok(Some(len)) = parser.parse(&buf[at..], session.authed) {
            let args = parser.args(&buf[at..]);
            if last.is_some() && !runs_script(args) {
                break;
            }
            if let Some((stats, error, _)) = last.take() {
                let now = Instant::now();
                stats.observe(now - *t0, error);
                *t0 = now;
            }
            let done = exec::execute(ctx, session, reply, args);
            at += len;
            calls += 1;
            let go_on = calls < SCRIPT_BATCH
                && done.2 == Flow::Continue
                && reply.out.len() < FLUSH_AT
                && !session.multi.active
                && session.deferred.is_none()
                && session.blocked.is_none();
            last = Some(done);
            if !go_on {
                break;
            }
        }
        *pos = at;
        last
    }
}

/// What woke the connection while it waited for input.
enum Woke {
    /// This many bytes were read (0: the client closed the connection).
    Read(usize),
    /// A message to one of its subscriptions (`resp::pubsub`).
    Message(bytes::Bytes),
}

/// How many bytes to reserve in the read buffer before the next read: room for the whole of
/// a large argument whose header has arrived (`needed` in all, `len` held now), at most
/// [`MAX_PREALLOC`] ahead (only [`UNAUTHENTICATED_PREALLOC`] before authentication), else
/// [`IO_BUF`] when less than a quarter of it is `spare`.
fn read_room(needed: Option<usize>, len: usize, spare: usize, authed: bool) -> usize {
    let cap = if authed {
        MAX_PREALLOC
    } else {
        UNAUTHENTICATED_PREALLOC
    };
    match needed {
        Some(need) if need > len => (need - len).min(cap),
        _ if spare < IO_BUF / 4 => IO_BUF,
        _ => 0,
    }
}

/// The most unparsed input a connection may hold: `max_query_buffer`
/// (`client-query-buffer-limit`), and at most [`UNAUTHENTICATED_QUERY_BUFFER`] before
/// authentication.
fn query_buffer_limit(max_query_buffer: usize, authed: bool) -> usize {
    if authed {
        max_query_buffer
    } else {
        max_query_buffer.min(UNAUTHENTICATED_QUERY_BUFFER)
    }
}

/// Cluster mode: the connection's bookkeeping of its running key commands (none between
/// batches), kept for its allocations.
#[derive(Default)]
struct InFlight {
    /// Commands dispatched so far; a command's sequence number is the count before it.
    dispatched: u64,
    /// Commands finished so far: they finish in sequence order.
    finished: u64,
    /// Hash of a key → the last dispatched running command touching it. A hash collision
    /// only makes a command wait needlessly.
    owner: FxHashMap<u64, u64>,
    /// `(sequence, key hash)` of every key of every running command, oldest first, to clear
    /// `owner` as they finish.
    keys: VecDeque<(u64, u64)>,
    /// The key hashes of the command being dispatched.
    scratch: Vec<u64>,
    /// Reply buffers of finished commands, and their total capacity.
    spare: Vec<BytesMut>,
    spare_bytes: usize,
}

impl InFlight {
    fn reply_buffer(&mut self) -> BytesMut {
        match self.spare.pop() {
            Some(b) => {
                self.spare_bytes -= b.capacity();
                b
            }
            None => BytesMut::new(),
        }
    }

    fn recycle(&mut self, mut b: BytesMut) {
        if self.spare_bytes + b.capacity() <= SPARE_REPLIES {
            b.clear();
            self.spare_bytes += b.capacity();
            self.spare.push(b);
        }
    }
}

/// Cluster mode: runs every complete request at the front of `buf`, consuming them, and
/// appends their replies to `reply` in request order (see the module docs). Returns whether
/// to close the connection; an error means the client is gone.
async fn cluster_batch(
    io: &mut Io<'_>,
    cluster: &ClusterBackend,
    parser: &mut RequestParser,
    buf: &mut BytesMut,
    reply: &mut Reply,
    session: &mut Session,
    st: &mut InFlight,
) -> std::io::Result<bool> {
    let ctx = io.ctx;
    let mut running = FuturesOrdered::new();
    let close = loop {
        let len = match parser.parse(buf, session.authed) {
            Ok(Some(len)) => len,
            Ok(None) => break false,
            Err(e) => {
                finish_all(io, &mut running, st, reply).await?;
                reply.error(&format!("ERR {e}"));
                break true;
            }
        };
        let args = parser.args(buf);
        if args.is_empty() {
            buf.advance(len);
            continue;
        }
        // Nothing to overlap with: skip the copies and bookkeeping of concurrent execution.
        let alone = running.is_empty() && len == buf.len();
        // Inside MULTI every command is queued or ends the transaction: in order, alone.
        if alone
            || session.multi.active
            || session.multi.interactive.is_some()
            || exec::concurrent_command(args).is_none()
        {
            finish_all(io, &mut running, st, reply).await?;
            let t0 = Instant::now();
            let (stats, error, flow) =
                exec::execute_cluster(ctx, cluster, session, reply, args).await;
            stats.observe(t0.elapsed(), error);
            buf.advance(len);
            if flow == Flow::Close {
                break true;
            }
        } else {
            let mut slot = Reply {
                out: st.reply_buffer(),
                resp3: reply.resp3,
            };
            let t0 = Instant::now();
            let cmd = match exec::admit(ctx, session, &mut slot, args) {
                Ok(cmd) => cmd,
                Err((stats, error, flow)) => {
                    stats.observe(t0.elapsed(), error);
                    finish_all(io, &mut running, st, reply).await?;
                    reply.out.extend_from_slice(&slot.out);
                    st.recycle(slot.out);
                    buf.advance(len);
                    if flow == Flow::Close {
                        break true;
                    }
                    continue;
                }
            };
            st.scratch.clear();
            st.scratch.extend(
                cmd.spec()
                    .key_positions(&args)
                    .map(|i| FxBuildHasher.hash_one(args.get(i))),
            );
            let args = parser.owned_args(buf.split_to(len).freeze());
            let caller = || crate::resp::cluster_exec::Caller {
                txn_session: session.txn_session.clone(),
                db: session.db,
            };
            let run = |args, slot| {
                Box::pin(exec::run_concurrent(
                    ctx,
                    cluster,
                    cmd,
                    args,
                    slot,
                    Instant::now(),
                    caller(),
                ))
            };
            let command = if running.is_empty() {
                // Most commands on a local replica finish without waiting (a read from the
                // local copy, a write whose reply the local apply decides): poll once here
                // and answer at once, skipping the ordered set and its bookkeeping. Nothing
                // runs before it, so request order and per-key order are kept.
                let mut command = run(args, slot);
                let first = std::future::poll_fn(|cx| Poll::Ready(command.as_mut().poll(cx))).await;
                if let Poll::Ready(done) = first {
                    reply.out.extend_from_slice(&done.out);
                    st.recycle(done.out);
                    if reply.out.len() >= FLUSH_AT {
                        write(ctx, io.stream, reply, io.shutdown).await?;
                    }
                    continue;
                }
                command
            } else {
                let last_on_same_key = st.scratch.iter().filter_map(|h| st.owner.get(h)).max();
                if let Some(&last) = last_on_same_key {
                    while st.finished <= last {
                        finish_oldest(io, &mut running, st, reply).await?;
                    }
                }
                while running.len() >= MAX_IN_FLIGHT {
                    finish_oldest(io, &mut running, st, reply).await?;
                }
                run(args, slot)
            };
            let seq = st.dispatched;
            st.dispatched += 1;
            for &h in &st.scratch {
                st.owner.insert(h, seq);
                st.keys.push_back((seq, h));
            }
            running.push_back(command);
        }
        if reply.out.len() >= FLUSH_AT {
            write(ctx, io.stream, reply, io.shutdown).await?;
        }
    };
    finish_all(io, &mut running, st, reply).await?;
    Ok(close)
}

/// Waits for the oldest running command and appends its reply (written early past
/// `FLUSH_AT`).
async fn finish_oldest<F: Future<Output = Reply>>(
    io: &mut Io<'_>,
    running: &mut FuturesOrdered<F>,
    st: &mut InFlight,
    reply: &mut Reply,
) -> std::io::Result<()> {
    let Some(done) = running.next().await else {
        return Ok(());
    };
    reply.out.extend_from_slice(&done.out);
    st.recycle(done.out);
    let seq = st.finished;
    st.finished += 1;
    while let Some(&(s, h)) = st.keys.front()
        && s == seq
    {
        st.keys.pop_front();
        if st.owner.get(&h) == Some(&seq) {
            st.owner.remove(&h);
        }
    }
    if reply.out.len() >= FLUSH_AT {
        write(io.ctx, io.stream, reply, io.shutdown).await?;
    }
    Ok(())
}

/// Waits for every running command, appending their replies in order.
async fn finish_all<F: Future<Output = Reply>>(
    io: &mut Io<'_>,
    running: &mut FuturesOrdered<F>,
    st: &mut InFlight,
    reply: &mut Reply,
) -> std::io::Result<()> {
    while !running.is_empty() {
        finish_oldest(io, running, st, reply).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::RespLimits;
    use crate::resp::request::ProtocolError;

    /// Attack: `$67108864` before AUTH. The parser refuses it with Redis's error, and the
    /// read buffer never grows past a few KiB ahead of data before authentication.
    #[test]
    fn nothing_large_is_reserved_before_authentication() {
        let mut parser = RequestParser::new(&RespLimits::default());
        assert_eq!(
            parser.parse(b"*1\r\n$67108864\r\n", false),
            Err(ProtocolError::UnauthenticatedBulkLength)
        );
        let mut parser = RequestParser::new(&RespLimits::default());
        assert_eq!(
            parser.parse(b"*100000\r\n", false),
            Err(ProtocolError::UnauthenticatedMultibulkLength)
        );
        // Even a header the parser admitted could not reserve more than the cap.
        let huge = Some(64 * 1024 * 1024 + 16);
        assert!(read_room(huge, 16, IO_BUF, false) <= UNAUTHENTICATED_PREALLOC);
        assert_eq!(read_room(huge, 16, IO_BUF, true), MAX_PREALLOC);
        // An authenticated client's large argument still gets its room at once.
        let mut parser = RequestParser::new(&RespLimits::default());
        assert_eq!(parser.parse(b"*1\r\n$100000\r\n", true), Ok(None));
        let need = parser.needed();
        assert_eq!(need, Some(13 + 100_000 + 2));
        assert_eq!(read_room(need, 13, 0, true), 100_000 + 2);
    }

    #[test]
    fn the_query_buffer_is_small_before_authentication() {
        let limit = RespLimits::default().max_query_buffer;
        assert_eq!(
            query_buffer_limit(limit, false),
            UNAUTHENTICATED_QUERY_BUFFER
        );
        assert_eq!(query_buffer_limit(limit, true), limit);
        assert_eq!(query_buffer_limit(1000, false), 1000);
    }
}
