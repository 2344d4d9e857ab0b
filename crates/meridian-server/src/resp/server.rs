//! Accepting RESP clients: [`serve_all`] accepts on the plaintext listener and the TLS one
//! (either may be absent) until the shutdown token is cancelled, refusing clients over
//! `max_clients` with Redis's error, then stops accepting and waits for every connection to
//! finish what it has read and close. Connection gauges (`open`, `accepted`, `rejected`) in
//! [`Metrics`](crate::metrics::Metrics) are kept exact: a connection is counted open from
//! accept until its task ends.
//!
//! A TLS client is counted (against `max_clients` too) from accept, through its handshake:
//! the handshake runs on the connection's own task, bounded by the attached handshake
//! timeout, so a client that connects and sends nothing, or sends something that is not
//! TLS, holds a slot only that long and never the accept loop.

use crate::metrics::Frontend;
use crate::resp::connection;
use crate::resp::context::RespContext;
use crate::resp::stream::ClientStream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Serves RESP clients from `listener` (plaintext) until `shutdown` is cancelled, then waits
/// for every connection to close. Each connection also stops at shutdown, after answering
/// the requests it has already read.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<RespContext>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_all(Some(listener), None, ctx, shutdown).await
}

/// Like [`serve`], on a plaintext listener, a TLS listener (which needs
/// [`RespContext::with_tls`]), or both, sharing `max_clients`.
pub async fn serve_all(
    plain: Option<TcpListener>,
    tls: Option<TcpListener>,
    ctx: Arc<RespContext>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if tls.is_some() && ctx.tls().is_none() {
        return Err(std::io::Error::other(
            "a RESP TLS listener without a certificate (RespContext::with_tls)",
        ));
    }
    let plain_addr = plain.as_ref().map(TcpListener::local_addr).transpose()?;
    let tls_addr = tls.as_ref().map(TcpListener::local_addr).transpose()?;
    ctx.port
        .store(plain_addr.map_or(0, |a| a.port()), Ordering::Relaxed);
    ctx.tls_port
        .store(tls_addr.map_or(0, |a| a.port()), Ordering::Relaxed);
    *ctx.listen.lock() = plain_addr.or(tls_addr);
    let stop = shutdown.child_token();
    tokio::spawn(sample_ops(ctx.clone(), stop.clone()));
    // Every connection task holds a sender; when all are dropped, every task has ended.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    tokio::join!(
        accept_loop(plain, false, &ctx, &shutdown, &done_tx),
        accept_loop(tls, true, &ctx, &shutdown, &done_tx),
    );
    // A script that never ends would hold its connection, and so the drain, forever: it is
    // stopped, its writes discarded, as is any that starts while connections finish.
    ctx.scripts.halt();
    drop(done_tx);
    let _ = done_rx.recv().await;
    stop.cancel();
    Ok(())
}

/// Accepts on `listener` (nothing when absent) until `shutdown`, spawning a task per client.
async fn accept_loop(
    listener: Option<TcpListener>,
    tls: bool,
    ctx: &Arc<RespContext>,
    shutdown: &CancellationToken,
    done_tx: &mpsc::Sender<()>,
) {
    let Some(listener) = listener else {
        return;
    };
    let conns = ctx.metrics.connections(Frontend::Resp);
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
            if tls {
                // Not a TLS record: a TLS client could not read the error. Closed.
                continue;
            }
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
        let ctx = ctx.clone();
        let token = shutdown.child_token();
        tokio::spawn(async move {
            if let Some(stream) = client_stream(&ctx, stream, addr, tls, &token).await {
                let laddr = stream_local_addr(&stream).unwrap_or(addr);
                let info = ctx.register(addr, laddr, stream_fd(&stream), tls);
                let id = info.id;
                connection::run(&ctx, stream, info, token).await;
                ctx.unregister(id);
            }
            ctx.metrics
                .connections(Frontend::Resp)
                .open
                .fetch_sub(1, Ordering::Relaxed);
            drop(done);
        });
    }
}

/// The accepted socket as a client stream: as is on the plaintext listener; after a
/// handshake bounded in time on the TLS one (`None` when it fails, times out, or shutdown
/// comes first: the socket is closed).
async fn client_stream(
    ctx: &RespContext,
    stream: TcpStream,
    addr: SocketAddr,
    tls: bool,
    shutdown: &CancellationToken,
) -> Option<ClientStream> {
    if !tls {
        return Some(ClientStream::Plain(stream));
    }
    let t = ctx.tls()?;
    let handshake = t.server.acceptor().accept(stream);
    let outcome = tokio::select! {
        r = tokio::time::timeout(t.handshake_timeout, handshake) => r,
        _ = shutdown.cancelled() => return None,
    };
    match outcome {
        Ok(Ok(s)) => Some(ClientStream::Tls(Box::new(s))),
        Ok(Err(e)) => {
            tracing::debug!(client = %addr, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(client = %addr, "TLS handshake timed out");
            None
        }
    }
}

fn tcp_of(s: &ClientStream) -> &TcpStream {
    match s {
        ClientStream::Plain(t) => t,
        ClientStream::Tls(t) => t.get_ref().0,
    }
}

fn stream_local_addr(s: &ClientStream) -> Option<SocketAddr> {
    tcp_of(s).local_addr().ok()
}

#[cfg(unix)]
fn stream_fd(s: &ClientStream) -> i32 {
    use std::os::fd::AsRawFd;
    tcp_of(s).as_raw_fd()
}

#[cfg(not(unix))]
fn stream_fd(_: &ClientStream) -> i32 {
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
