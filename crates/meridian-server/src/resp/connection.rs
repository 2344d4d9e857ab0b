//! One client connection: read, parse every complete request, execute, write once.
//!
//! The loop keeps one read buffer and one output buffer for the connection's life. After
//! each read it parses and executes every complete request in the buffer, appending replies
//! to the output buffer, and writes that buffer with one `write_all` when no complete
//! request is left (so a pipeline of N requests costs one read and one write, not N). Only
//! if the output grows past 1 MiB mid-batch is it written early, to bound memory. Arguments
//! are slices of the read buffer, never copied. Requests are answered in order.
//!
//! The connection ends on EOF, QUIT, a protocol error (after the error reply and every
//! earlier reply are written), an I/O error, a request that outgrows the query-buffer
//! limit, or shutdown (checked only while waiting for input, so requests already read are
//! answered).

use crate::resp::exec::{self, Flow, Session};
use crate::resp::reply::Reply;
use crate::resp::request::RequestParser;
use crate::resp::server::{ClientInfo, RespContext};
use bytes::{Buf, BytesMut};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Initial (and steady-state) size of each buffer, like Redis's `PROTO_IOBUF_LEN`.
const IO_BUF: usize = 16 * 1024;
/// Output written early when a batch's replies grow past this.
const FLUSH_AT: usize = 1024 * 1024;
/// Buffers that grew past this are dropped once empty, so one large request or reply does
/// not pin memory for the rest of the connection.
const SHRINK_ABOVE: usize = 1024 * 1024;
/// How long a reply write may still take once shutdown has started.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// The most the read buffer grows ahead of data for one large argument.
const MAX_PREALLOC: usize = 64 * 1024 * 1024;

/// Serves one client until it goes away or `shutdown` is cancelled.
pub(crate) async fn run(
    ctx: &Arc<RespContext>,
    mut stream: TcpStream,
    info: Arc<ClientInfo>,
    shutdown: CancellationToken,
) {
    let limits = &ctx.config.limits;
    let mut parser = RequestParser::new(limits);
    let mut buf = BytesMut::with_capacity(IO_BUF);
    let mut reply = Reply::new(IO_BUF);
    let mut session = Session::new(ctx, info);
    // One waiter for the connection's life, rather than one per read.
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    loop {
        if let Some(need) = parser.needed()
            && need > buf.len()
        {
            buf.reserve((need - buf.len()).min(MAX_PREALLOC));
        } else if buf.capacity() - buf.len() < IO_BUF / 4 {
            buf.reserve(IO_BUF);
        }
        let n = tokio::select! {
            biased;
            r = stream.read_buf(&mut buf) => match r {
                Ok(n) => n,
                Err(_) => break,
            },
            _ = &mut cancelled => break,
        };
        if n == 0 {
            break;
        }
        ctx.net_input.fetch_add(n as u64, Ordering::Relaxed);

        let mut pos = 0;
        let mut close = false;
        let mut t0 = Instant::now();
        loop {
            match parser.parse(&buf[pos..], session.authed) {
                Ok(Some(len)) => {
                    let args = parser.args(&buf[pos..]);
                    pos += len;
                    if args.is_empty() {
                        continue;
                    }
                    let (stats, error, flow) = match &ctx.cluster {
                        None => exec::execute(ctx, &mut session, &mut reply, args),
                        Some(cluster) => {
                            exec::execute_cluster(ctx, cluster, &mut session, &mut reply, args)
                                .await
                        }
                    };
                    let t1 = Instant::now();
                    stats.observe(t1 - t0, error);
                    t0 = t1;
                    if flow == Flow::Close {
                        close = true;
                        break;
                    }
                    if reply.out.len() >= FLUSH_AT {
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
        if buf.len() > limits.max_query_buffer {
            tracing::warn!(
                client = %session.info.addr,
                "closing RESP client that reached the query buffer limit"
            );
            close = true;
        }
        session.touch(ctx);
        if !reply.out.is_empty()
            && write(ctx, &mut stream, &mut reply, &shutdown)
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

/// Writes the pending replies. A client that stops reading cannot hold shutdown up: once
/// shutdown starts, an unfinished write gets [`SHUTDOWN_GRACE`] more, then fails.
async fn write(
    ctx: &RespContext,
    stream: &mut TcpStream,
    reply: &mut Reply,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let fut = stream.write_all(&reply.out);
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
