//! Writing a RESP connection's replies: [`write`] (bounded by [`SHUTDOWN_GRACE`] once
//! shutdown starts), the early-flush threshold [`FLUSH_AT`], and [`Io`], where a cluster-mode
//! batch writes early.
//!
//! Below both the connection loop (`connection`) and the cluster-mode batches (`sharded`),
//! importing neither, so the two depend on it and not on each other's internals.

use crate::keyspace::blocking::{BlockedWait, ServedReplies, timeout_reply};
use crate::resp::context::RespContext;
use crate::resp::stream::ClientStream;
use bytes::BytesMut;
use meridian_redis::Reply;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// Output written early when a batch's replies grow past this.
pub(super) const FLUSH_AT: usize = 1024 * 1024;
/// How long a reply write may still take once shutdown has started.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where a cluster-mode batch writes its replies early (past `FLUSH_AT`).
pub(super) struct Io<'a> {
    pub(super) ctx: &'a Arc<RespContext>,
    pub(super) stream: &'a mut ClientStream,
    pub(super) shutdown: &'a CancellationToken,
}

/// Writes the pending replies. A client that stops reading cannot hold shutdown up: once
/// shutdown starts, an unfinished write gets [`SHUTDOWN_GRACE`] more, then fails.
pub(super) async fn write(
    ctx: &RespContext,
    stream: &mut ClientStream,
    reply: &mut Reply,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    // The flush is free on plain TCP; over TLS it sends what rustls still buffers.
    let fut = async {
        stream.write_all(&reply.out).await?;
        stream.flush().await
    };
    tokio::pin!(fut);
    tokio::select! {
        biased;
        r = &mut fut => r?,
        _ = shutdown.cancelled() => match tokio::time::timeout(SHUTDOWN_GRACE, &mut fut).await {
            Ok(r) => r?,
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        },
    }
    ctx.net_output
        .fetch_add(reply.out.len() as u64, Ordering::Relaxed);
    reply.out.clear();
    Ok(())
}

/// Hands the clients this connection's commands unblocked their replies, after writing as
/// much of this connection's own replies as its socket takes now: Redis's order (the writer's
/// reply goes out first), yet a writer that stops reading never holds the served clients up.
/// (Over TLS the writer's reply follows with its next write: see `ClientStream::try_write`.)
pub(super) fn answer_served(
    ctx: &RespContext,
    stream: &ClientStream,
    reply: &mut Reply,
    served: &mut ServedReplies,
) {
    if served.is_empty() {
        return;
    }
    if let Ok(n) = stream.try_write(&reply.out) {
        ctx.net_output.fetch_add(n as u64, Ordering::Relaxed);
        bytes::Buf::advance(&mut reply.out, n);
    }
    served.deliver();
}

/// How much a blocked client may send before the connection stops reading it (Redis keeps
/// reading a blocked client's pipeline too; it runs after the reply).
const BLOCKED_READ_LIMIT: usize = 1024 * 1024;

/// Waits for a blocked command's reply (BLPOP, BZPOPMIN, ...), the earlier replies written
/// first: the reply a serving writer sends, or the timeout reply. Requests the client
/// pipelines meanwhile are read into `buf` and run after. The client closing the connection,
/// or shutdown, unblocks it and ends the wait with an error (the connection closes).
/// Answers whether the command ended with an error reply (a served `-NOGROUP`, say).
pub(super) async fn wait_blocked(
    io: &mut Io<'_>,
    reply: &mut Reply,
    buf: &mut BytesMut,
    wait: BlockedWait,
    served: &mut ServedReplies,
) -> std::io::Result<bool> {
    // Whom this connection's commands unblocked are answered before it waits itself.
    answer_served(io.ctx, io.stream, reply, served);
    if !reply.out.is_empty() {
        write(io.ctx, io.stream, reply, io.shutdown).await?;
    }
    let ks = &io.ctx.keyspace;
    let BlockedWait {
        cmd,
        registration,
        timeout,
    } = wait;
    let id = registration.id;
    let mut rx = registration.rx;
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    let gone = loop {
        tokio::select! {
            served = &mut rx => {
                let Ok(bytes) = served else {
                    return Ok(false);
                };
                // An error a blocked command ends with (XREADGROUP's -NOGROUP when its
                // group is destroyed) counts as the command's error reply.
                io.ctx.errors.record(&bytes);
                reply.out.extend_from_slice(&bytes);
                return Ok(bytes.first() == Some(&b'-'));
            }
            _ = &mut sleep => break false,
            _ = io.shutdown.cancelled() => break true,
            r = io.stream.read_buf(buf), if buf.len() < BLOCKED_READ_LIMIT => match r {
                Ok(0) | Err(_) => break true,
                Ok(n) => {
                    io.ctx.net_input.fetch_add(n as u64, Ordering::Relaxed);
                }
            },
        }
    };
    // Unblocked (timeout, or the client is gone) — unless a writer is serving it right now,
    // whose reply then arrives (or who puts it back, to be removed on the next try).
    loop {
        if ks.blocking.unblock(id) {
            break;
        }
        match tokio::time::timeout(Duration::from_millis(1), &mut rx).await {
            Ok(Ok(bytes)) => {
                io.ctx.errors.record(&bytes);
                reply.out.extend_from_slice(&bytes);
                return if gone {
                    Err(std::io::ErrorKind::ConnectionAborted.into())
                } else {
                    Ok(bytes.first() == Some(&b'-'))
                };
            }
            Ok(Err(_)) => break,
            Err(_) => {}
        }
    }
    if gone {
        return Err(std::io::ErrorKind::ConnectionAborted.into());
    }
    timeout_reply(cmd, reply);
    Ok(false)
}
