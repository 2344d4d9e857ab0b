//! A standalone node with the worker-shard executor on (`repart.mode`, spec
//! `repartitioning.md` §1): a batch's key commands run on the shards their keys map to,
//! not on the connection's task.
//!
//! The key commands at the front of the read buffer are placed together, as one batch
//! under one hold of the dispatcher ([`crate::repart::Batch`]), in request order, so
//! dispatch order is request order and the executor's per-key order covers this
//! connection's requests too. Those whose shard nobody runs are run here, after the batch
//! is placed, writing their replies in place; the others come back through a channel, and
//! replies are copied out in request order. Every other request — connection and server
//! commands, keyspace-wide ones (KEYS, SCAN, FLUSHALL, which take the keyspace's locks
//! themselves), MULTI/EXEC/WATCH and everything inside a transaction, the large-object
//! handle commands, refusals — is a barrier: it waits for the connection's running
//! commands, then runs here, as without the executor. At most `MAX_IN_FLIGHT` commands of
//! one connection are unanswered at once, which bounds what one client can put on the
//! shards.
//!
//! A command runs on its shard with a session of its own (authenticated: the connection
//! checked that before dispatching; the connection's protocol version and client entry).
//! A large-object `GET` or `BLOB.READ` leaves its chunk read to the connection, as on a
//! single node: the shard answers with the manifest read, the connection awaits the chunks.

use crate::metrics::OpStats;
use crate::repart::{Executor, Route};
use crate::resp::blob::Deferred;
use crate::resp::conn_io::{self, Io};
use crate::resp::context::RespContext;
use crate::resp::exec::{self, Flow, Session};
use crate::resp::multi;
use crate::resp::request::{ProtocolError, RequestParser};
use bytes::{Buf, Bytes, BytesMut};
use meridian_balance::repart::ShardId;
use meridian_redis::Cmd;
use meridian_redis::Reply;
use meridian_redis::{Args, OwnedArgs};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// The most key commands of one connection unanswered at once.
const MAX_IN_FLIGHT: usize = 64;

/// The most key commands placed as one batch.
const MAX_BATCH: usize = 32;

/// A shard's answer to one command.
struct Done {
    reply: BytesMut,
    /// A large object's chunk read, with the command's metrics and start.
    deferred: Option<(Deferred, Arc<OpStats>, Instant)>,
}

/// The connection's commands on the shards, oldest first, and the buffers a batch reuses.
#[derive(Default)]
pub(super) struct Running {
    queue: VecDeque<Entry>,
    batch: Vec<Gathered>,
    /// The batch's argument ranges, into its bytes.
    ranges: Vec<(usize, usize)>,
    /// Where each of the batch's commands went, and whether it is the last the caller runs
    /// on its shard.
    routes: Vec<(Route, bool)>,
    pending: VecDeque<oneshot::Receiver<Done>>,
    seen: Vec<ShardId>,
}

/// A key command gathered into a batch.
struct Gathered {
    cmd: Cmd,
    /// Its arguments' ranges in [`Running::ranges`].
    args: Range<usize>,
    /// Its bytes in the batch's.
    bytes: Range<usize>,
}

/// A command of the connection not yet answered.
enum Entry {
    /// On a shard's queue.
    Pending(oneshot::Receiver<Done>),
    /// Run here while earlier ones were still queued.
    Ready(Done),
}

/// What ended the gathering of a batch.
enum Next {
    /// It is full; more requests may follow.
    More,
    /// The buffer holds no complete request.
    Incomplete,
    /// A request that runs alone, `len` bytes at the front of the buffer once the batch is
    /// consumed.
    Alone(usize),
    Error(ProtocolError),
}

/// Whether `cmd` runs on a shard: a command with keys and no connection state.
fn on_shard(cmd: Cmd, args: &Args<'_>) -> bool {
    !multi::is_transaction_command(cmd)
        && !matches!(cmd, Cmd::BlobOpen | Cmd::BlobPread | Cmd::BlobClose)
        // A blocking pop waits on the connection's task, which must hold no shard.
        && !cmd.has_flag("blocking")
        && cmd.spec().key_positions(args).next().is_some()
}

/// The command `args` name if it runs on a shard for `session` (whose user may run
/// anything: a restricted user's commands pass the connection's ACL check first).
fn shard_command(session: &mut Session, args: &Args<'_>) -> Option<Cmd> {
    let unrestricted = session.user.current().is_some_and(|u| u.unrestricted());
    Cmd::lookup(args.get(0)).filter(|&c| {
        !session.multi.active
            && session.authed
            && unrestricted
            && c.spec().arity_ok(args.len())
            && on_shard(c, args)
    })
}

/// Runs every complete request at the front of `buf`, consuming them, appending replies to
/// `reply` in request order. Returns whether to close the connection; an error means the
/// client is gone.
pub(super) async fn batch(
    io: &mut Io<'_>,
    executor: &Executor<Bytes>,
    parser: &mut RequestParser,
    buf: &mut BytesMut,
    reply: &mut Reply,
    session: &mut Session,
    running: &mut Running,
) -> std::io::Result<bool> {
    let ctx = io.ctx;
    let close = loop {
        // Gather the key commands at the front of the buffer.
        running.batch.clear();
        running.ranges.clear();
        let mut off = 0;
        let mut next = Next::More;
        while running.batch.len() < MAX_BATCH {
            let len = match parser.parse(&buf[off..], session.authed) {
                Ok(Some(len)) => len,
                Ok(None) => {
                    next = Next::Incomplete;
                    break;
                }
                Err(e) => {
                    next = Next::Error(e);
                    break;
                }
            };
            let args = parser.args(&buf[off..]);
            if args.is_empty() {
                off += len;
                continue;
            }
            match shard_command(session, &args) {
                // An inline request's arguments are in the parser's scratch, which the next
                // parse overwrites: it runs alone.
                Some(cmd) if parser.args_in_input() => {
                    let start = running.ranges.len();
                    let shifted = args.ranges().iter().map(|&(s, e)| (s + off, e + off));
                    running.ranges.extend(shifted);
                    running.batch.push(Gathered {
                        cmd,
                        args: start..running.ranges.len(),
                        bytes: off..off + len,
                    });
                    off += len;
                }
                _ => {
                    next = Next::Alone(len);
                    break;
                }
            }
        }
        let gathered = buf.split_to(off).freeze();
        if !running.batch.is_empty() {
            run_batch(io, executor, session, reply, running, &gathered).await?;
        }
        let len = match next {
            Next::More => continue,
            Next::Incomplete => break false,
            Next::Error(e) => {
                finish_all(io, running, reply).await?;
                reply.error(&format!("ERR {e}"));
                break true;
            }
            Next::Alone(len) => len,
        };
        let args = parser.args(buf);
        if let Some(cmd) = shard_command(session, &args) {
            let owned = parser.owned_args(buf.split_to(len).freeze());
            let (bytes, ranges) = owned.parts();
            running.ranges.clear();
            running.ranges.extend_from_slice(ranges);
            running.batch.clear();
            running.batch.push(Gathered {
                cmd,
                args: 0..ranges.len(),
                bytes: 0..bytes.len(),
            });
            run_batch(io, executor, session, reply, running, bytes).await?;
            continue;
        }
        finish_all(io, running, reply).await?;
        let t0 = Instant::now();
        let Ok(turn) = exec::script_turn(ctx, session, args, reply).await else {
            buf.advance(len);
            ctx.rejected_ops.observe(t0.elapsed(), true);
            continue;
        };
        let (stats, mut error, flow) = exec::execute(ctx, session, reply, args);
        drop(turn);
        if let Some(deferred) = session.deferred.take() {
            error = exec::answer_deferred(reply, deferred.0.await);
        }
        buf.advance(len);
        if let Some(wait) = session.blocked.take() {
            conn_io::wait_blocked(io, reply, buf, wait, &mut session.served).await?;
        }
        stats.observe(t0.elapsed(), error);
        if flow == Flow::Close {
            break true;
        }
    };
    finish_all(io, running, reply).await?;
    Ok(close)
}

/// Places the gathered commands, whose bytes are `bytes`, as one batch, then runs those
/// whose shard this connection holds, in request order, releasing each shard after its
/// last one. Nothing is awaited while a shard or the dispatcher is held.
async fn run_batch(
    io: &mut Io<'_>,
    executor: &Executor<Bytes>,
    session: &mut Session,
    reply: &mut Reply,
    running: &mut Running,
    bytes: &Bytes,
) -> std::io::Result<()> {
    let ctx = io.ctx;
    while !running.queue.is_empty() && running.queue.len() + running.batch.len() > MAX_IN_FLIGHT {
        finish_oldest(io, running, reply).await?;
    }
    place_and_run(ctx, executor, session, reply, running, bytes);
    if reply.out.len() >= conn_io::FLUSH_AT {
        conn_io::write(ctx, io.stream, reply, io.shutdown).await?;
    }
    Ok(())
}

/// [`run_batch`]'s synchronous part, so no shard and not the dispatcher is ever held
/// across an await.
fn place_and_run(
    ctx: &Arc<RespContext>,
    executor: &Executor<Bytes>,
    session: &mut Session,
    reply: &mut Reply,
    running: &mut Running,
    bytes: &Bytes,
) {
    let Running {
        queue,
        batch: gathered,
        ranges,
        routes,
        pending,
        seen,
    } = running;
    routes.clear();
    pending.clear();
    let mut batch = executor.batch();
    for g in gathered.iter() {
        let args = Args::from_parts(bytes, &ranges[g.args.clone()]);
        let keys = g.cmd.spec().key_positions(&args).map(|i| args.get(i));
        let route = batch.place(keys, || {
            let (tx, rx) = oneshot::channel();
            pending.push_back(rx);
            let start = g.bytes.start;
            let owned = OwnedArgs::from_parts(
                bytes.slice(g.bytes.clone()),
                args.ranges()
                    .iter()
                    .map(|&(s, e)| (s - start, e - start))
                    .collect(),
            );
            on_shard_op(ctx, session, reply.resp3, owned, tx)
        });
        routes.push((route, false));
    }
    // Each shard is released after the last command this connection runs on it.
    seen.clear();
    for (route, last) in routes.iter_mut().rev() {
        if let Route::Inline(s) = *route
            && !seen.contains(&s)
        {
            seen.push(s);
            *last = true;
        }
    }
    let mut held = batch.finish();
    for (g, &(route, last)) in gathered.iter().zip(routes.iter()) {
        let Route::Inline(shard) = route else {
            if let Some(rx) = pending.pop_front() {
                queue.push_back(Entry::Pending(rx));
            }
            continue;
        };
        let args = Args::from_parts(bytes, &ranges[g.args.clone()]);
        let t0 = Instant::now();
        // Straight into the reply when nothing before it is unanswered.
        let direct = queue.is_empty();
        let mut slot = Reply {
            out: BytesMut::new(),
            resp3: reply.resp3,
        };
        let out = if direct { &mut *reply } else { &mut slot };
        let (stats, error, _) = exec::execute(ctx, session, out, args);
        if last {
            held.release(shard);
        }
        match session.deferred.take() {
            // Its chunk read is awaited once the shards are released, in order.
            Some(d) => queue.push_back(Entry::Ready(Done {
                reply: slot.out,
                deferred: Some((d, stats.clone(), t0)),
            })),
            None => {
                stats.observe(t0.elapsed(), error);
                if !direct {
                    queue.push_back(Entry::Ready(Done {
                        reply: slot.out,
                        deferred: None,
                    }));
                }
            }
        }
    }
}

/// The operation a queued command runs on its shard: with a session of its own, answering
/// through `tx`.
fn on_shard_op(
    ctx: &Arc<RespContext>,
    session: &Session,
    resp3: bool,
    args: OwnedArgs,
    tx: oneshot::Sender<Done>,
) -> crate::repart::Op {
    let ctx = Arc::clone(ctx);
    let info = session.info.clone();
    let user = session.user.clone();
    Box::new(move || {
        let t0 = Instant::now();
        let mut own = Session::on_shard(info, user);
        let mut r = Reply {
            out: BytesMut::new(),
            resp3,
        };
        let (stats, error, _) = exec::execute(&ctx, &mut own, &mut r, args.get());
        let deferred = match own.deferred.take() {
            Some(d) => Some((d, stats.clone(), t0)),
            None => {
                stats.observe(t0.elapsed(), error);
                None
            }
        };
        let _ = tx.send(Done {
            reply: r.out,
            deferred,
        });
    })
}

async fn finish_oldest(
    io: &mut Io<'_>,
    running: &mut Running,
    reply: &mut Reply,
) -> std::io::Result<()> {
    let done = match running.queue.pop_front() {
        None => return Ok(()),
        Some(Entry::Ready(done)) => Ok(done),
        Some(Entry::Pending(rx)) => rx.await,
    };
    match done {
        Ok(done) => {
            reply.out.extend_from_slice(&done.reply);
            if let Some((deferred, stats, t0)) = done.deferred {
                let error = exec::answer_deferred(reply, deferred.0.await);
                stats.observe(t0.elapsed(), error);
            }
        }
        // The executor stopped (shutdown) before running it.
        Err(_) => reply.error("ERR server is shutting down"),
    }
    if reply.out.len() >= conn_io::FLUSH_AT {
        conn_io::write(io.ctx, io.stream, reply, io.shutdown).await?;
    }
    Ok(())
}

async fn finish_all(
    io: &mut Io<'_>,
    running: &mut Running,
    reply: &mut Reply,
) -> std::io::Result<()> {
    while !running.queue.is_empty() {
        finish_oldest(io, running, reply).await?;
    }
    Ok(())
}
