//! A standalone node with the worker-shard executor on (`repart.mode`, spec
//! `repartitioning.md` §1): a batch's key commands run on the shards their keys map to,
//! not on the connection's task.
//!
//! Each key command is dispatched as soon as it is parsed, so dispatch order is request
//! order and the executor's per-key order covers this connection's requests too. Its reply
//! comes back through a channel; replies are copied out in request order. Every other
//! request — connection and server commands, keyspace-wide ones (KEYS, SCAN, FLUSHALL,
//! which take the keyspace's locks themselves), MULTI/EXEC/WATCH and everything inside a
//! transaction, the large-object handle commands, refusals — is a barrier: it waits for the
//! connection's running commands, then runs here, as without the executor. At most
//! `MAX_IN_FLIGHT` commands of one connection are queued at once, which bounds what one
//! client can put on the shards.
//!
//! A command runs on its shard with a session of its own (authenticated: the connection
//! checked that before dispatching; the connection's protocol version and client entry).
//! A large-object `GET` or `BLOB.READ` leaves its chunk read to the connection, as on a
//! single node: the shard answers with the manifest read, the connection awaits the chunks.

use crate::metrics::OpStats;
use crate::repart::Claim;
use crate::resp::blob::Deferred;
use crate::resp::command::Cmd;
use crate::resp::connection::{self, Io};
use crate::resp::exec::{self, Flow, Session};
use crate::resp::multi;
use crate::resp::reply::Reply;
use crate::resp::request::RequestParser;
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// The most key commands one connection has on the shards at once.
const MAX_IN_FLIGHT: usize = 64;

/// A shard's answer to one command.
struct Done {
    reply: BytesMut,
    /// A large object's chunk read, with the command's metrics and start.
    deferred: Option<(Deferred, Arc<OpStats>, Instant)>,
}

/// The connection's commands on the shards, oldest first.
#[derive(Default)]
pub(super) struct Running {
    queue: VecDeque<Entry>,
}

/// A command of the connection not yet answered.
enum Entry {
    /// On a shard's queue.
    Pending(oneshot::Receiver<Done>),
    /// Run inline while earlier ones were still queued.
    Ready(Done),
}

/// Whether `cmd` runs on a shard: a command with keys and no connection state.
fn on_shard(cmd: Cmd, argc: usize) -> bool {
    !multi::is_transaction_command(cmd)
        && !matches!(cmd, Cmd::BlobOpen | Cmd::BlobPread | Cmd::BlobClose)
        && cmd.spec().key_positions(argc).next().is_some()
}

/// Runs every complete request at the front of `buf`, consuming them, appending replies to
/// `reply` in request order. Returns whether to close the connection; an error means the
/// client is gone.
pub(super) async fn batch(
    io: &mut Io<'_>,
    executor: &crate::repart::Executor<Bytes>,
    parser: &mut RequestParser,
    buf: &mut BytesMut,
    reply: &mut Reply,
    session: &mut Session,
    running: &mut Running,
) -> std::io::Result<bool> {
    let ctx = io.ctx;
    let close = loop {
        let len = match parser.parse(buf, session.authed) {
            Ok(Some(len)) => len,
            Ok(None) => break false,
            Err(e) => {
                finish_all(io, running, reply).await?;
                reply.error(&format!("ERR {e}"));
                break true;
            }
        };
        let args = parser.args(buf);
        if args.is_empty() {
            buf.advance(len);
            continue;
        }
        let shard_cmd = Cmd::lookup(args.get(0)).filter(|&c| {
            !session.multi.active
                && session.authed
                && c.spec().arity_ok(args.len())
                && on_shard(c, args.len())
        });
        let Some(cmd) = shard_cmd else {
            finish_all(io, running, reply).await?;
            let t0 = Instant::now();
            let (stats, mut error, flow) = exec::execute(ctx, session, reply, args);
            if let Some(deferred) = session.deferred.take() {
                error = exec::answer_deferred(reply, deferred.0.await);
            }
            stats.observe(t0.elapsed(), error);
            buf.advance(len);
            if flow == Flow::Close {
                break true;
            }
            continue;
        };
        while running.queue.len() >= MAX_IN_FLIGHT {
            finish_oldest(io, running, reply).await?;
        }
        let keys = cmd.spec().key_positions(args.len()).map(|i| args.get(i));
        // Synchronous, so the dispatcher or shard held is never held across an await; a
        // large object's chunk read of a command run here is awaited after.
        let direct_deferred = match executor.claim(keys) {
            // Its shard was idle: run it here, as a node without the executor would.
            Claim::Inline(held) => {
                let t0 = Instant::now();
                let direct = running.queue.is_empty();
                let mut slot = Reply {
                    out: BytesMut::new(),
                    resp3: reply.resp3,
                };
                let out = if direct { &mut *reply } else { &mut slot };
                let (stats, error, _) = exec::execute(ctx, session, out, args);
                drop(held);
                buf.advance(len);
                let deferred = match session.deferred.take() {
                    Some(d) => Some((d, stats.clone(), t0)),
                    None => {
                        stats.observe(t0.elapsed(), error);
                        None
                    }
                };
                if direct {
                    deferred
                } else {
                    running.queue.push_back(Entry::Ready(Done {
                        reply: slot.out,
                        deferred,
                    }));
                    None
                }
            }
            Claim::Queue(queue) => {
                let args = parser.owned_args(buf.split_to(len).freeze());
                let (tx, rx) = oneshot::channel();
                let ctx2 = Arc::clone(ctx);
                let info = session.info.clone();
                let resp3 = reply.resp3;
                queue.push(Box::new(move || {
                    let t0 = Instant::now();
                    let mut own = Session::on_shard(info);
                    let mut r = Reply {
                        out: BytesMut::new(),
                        resp3,
                    };
                    let (stats, error, _) = exec::execute(&ctx2, &mut own, &mut r, args.get());
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
                }));
                running.queue.push_back(Entry::Pending(rx));
                None
            }
        };
        if let Some((deferred, stats, t0)) = direct_deferred {
            let error = exec::answer_deferred(reply, deferred.0.await);
            stats.observe(t0.elapsed(), error);
        }
        if reply.out.len() >= connection::FLUSH_AT {
            connection::write(ctx, io.stream, reply, io.shutdown).await?;
        }
    };
    finish_all(io, running, reply).await?;
    Ok(close)
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
    if reply.out.len() >= connection::FLUSH_AT {
        connection::write(io.ctx, io.stream, reply, io.shutdown).await?;
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
