//! Accepting RESP clients: [`serve`] accepts until the shutdown token is cancelled, refusing
//! clients over `max_clients` with Redis's error, then stops accepting and waits for every
//! connection to finish what it has read and close. Connection gauges (`open`, `accepted`,
//! `rejected`) in [`Metrics`](crate::metrics::Metrics) are kept exact: a connection is counted
//! open from accept until its task ends.

use crate::metrics::Frontend;
use crate::resp::connection;
use crate::resp::context::RespContext;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Serves RESP clients from `listener` until `shutdown` is cancelled, then waits for every
/// connection to close. Each connection also stops at shutdown, after answering the requests
/// it has already read.
pub async fn serve(
    listener: TcpListener,
    ctx: Arc<RespContext>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let laddr = listener.local_addr()?;
    ctx.port.store(laddr.port(), Ordering::Relaxed);
    *ctx.listen.lock() = Some(laddr);
    let stop = shutdown.child_token();
    tokio::spawn(sample_ops(ctx.clone(), stop.clone()));
    let conns = ctx.metrics.connections(Frontend::Resp);
    // Every connection task holds a sender; when all are dropped, every task has ended.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
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
        let fd = raw_fd(&stream);
        let info = ctx.register(addr, stream.local_addr().unwrap_or(laddr), fd);
        let ctx = ctx.clone();
        let token = shutdown.child_token();
        tokio::spawn(async move {
            let id = info.id;
            connection::run(&ctx, stream, info, token).await;
            ctx.unregister(id);
            ctx.metrics
                .connections(Frontend::Resp)
                .open
                .fetch_sub(1, Ordering::Relaxed);
            drop(done);
        });
    }
    drop(listener);
    // A script that never ends would hold its connection, and so the drain, forever: it is
    // stopped, its writes discarded, as is any that starts while connections finish.
    ctx.scripts.halt();
    drop(done_tx);
    let _ = done_rx.recv().await;
    stop.cancel();
    Ok(())
}

#[cfg(unix)]
fn raw_fd(s: &tokio::net::TcpStream) -> i32 {
    use std::os::fd::AsRawFd;
    s.as_raw_fd()
}

#[cfg(not(unix))]
fn raw_fd(_: &tokio::net::TcpStream) -> i32 {
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
