//! Writing a RESP connection's replies: [`write`] (bounded by [`SHUTDOWN_GRACE`] once
//! shutdown starts), the early-flush threshold [`FLUSH_AT`], and [`Io`], where a cluster-mode
//! batch writes early.
//!
//! Below both the connection loop (`connection`) and the cluster-mode batches (`sharded`),
//! importing neither, so the two depend on it and not on each other's internals.

use crate::resp::context::RespContext;
use meridian_redis::Reply;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Output written early when a batch's replies grow past this.
pub(super) const FLUSH_AT: usize = 1024 * 1024;
/// How long a reply write may still take once shutdown has started.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where a cluster-mode batch writes its replies early (past `FLUSH_AT`).
pub(super) struct Io<'a> {
    pub(super) ctx: &'a Arc<RespContext>,
    pub(super) stream: &'a mut TcpStream,
    pub(super) shutdown: &'a CancellationToken,
}

/// Writes the pending replies. A client that stops reading cannot hold shutdown up: once
/// shutdown starts, an unfinished write gets [`SHUTDOWN_GRACE`] more, then fails.
pub(super) async fn write(
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
