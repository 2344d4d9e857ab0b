//! Attacks on the listeners (issue 18, "Hardening"): connection floods and slowloris on the
//! HTTP port, a stalled request body, and cross-protocol scripting (an HTTP request sent to
//! the RESP port). Each HTTP test runs a whole node (`meridian_server::run`, both front ends,
//! port 0) with a small `http.max_connections` and timeouts of about a second; no test
//! asserts how long anything takes, only that it happens within generous bounds.

use super::cluster_mode::{cluster, connect};
use super::*;
use meridian_server::NodeConfig;
use meridian_server::config::HttpSection;

/// Upper bound for a server-side timeout of about a second to close a connection.
const CLOSES_WITHIN: Duration = Duration::from_secs(10);

/// A whole node on port 0.
/// A node under test (its fields through [`super::RunningNode`]).
struct Node(super::RunningNode);

impl std::ops::Deref for Node {
    type Target = super::RunningNode;

    fn deref(&self) -> &super::RunningNode {
        &self.0
    }
}

impl Node {
    async fn start(http: HttpSection) -> Node {
        let mut config = NodeConfig::default();
        config.resp.listen = "127.0.0.1:0".parse().unwrap();
        config.http = HttpSection {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..http
        };
        Node(super::RunningNode::start(config).await)
    }

    async fn resp(&self) -> Raw {
        Raw {
            stream: TcpStream::connect(self.resp).await.unwrap(),
            buf: BytesMut::new(),
        }
    }

    /// One `GET /health` on a fresh connection: the whole response, up to the server's close.
    async fn health(&self) -> String {
        let mut s = TcpStream::connect(self.http).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        String::from_utf8_lossy(&read_to_close(&mut s).await).into_owned()
    }

    fn http_conns(&self) -> &meridian_server::metrics::ConnStats {
        self.state.metrics.connections(Frontend::Http)
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

/// Everything the peer sends until it closes (EOF or reset), within `CLOSES_WITHIN`.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(CLOSES_WITHIN, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "connection still open; got {:?}",
            String::from_utf8_lossy(&got)
        )
    });
    got
}

/// Waits until `cond` holds, polling; panics after `PATIENCE`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(PATIENCE, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never happened: {what}"));
}

/// `http.max_connections`, `http.header_read_timeout_ms`, `http.idle_timeout_ms`.
fn small_http(max_connections: usize, header_ms: u64, idle_ms: u64) -> HttpSection {
    HttpSection {
        max_connections,
        header_read_timeout_ms: header_ms,
        idle_timeout_ms: idle_ms,
        ..HttpSection::default()
    }
}

/// Attack: open more idle HTTP connections than `http.max_connections` allows (20 over a cap
/// of 8), to exhaust the server's descriptors. The 12 over the cap get a 503 and are closed
/// at once; RESP is unaffected meanwhile; the 8 idle ones are closed by the header timeout,
/// after which HTTP serves again.
#[tokio::test]
async fn idle_http_connections_over_the_cap_are_refused_and_resp_still_serves() {
    // A header timeout long enough that all 20 connect before the first 8 are let go.
    let node = Node::start(small_http(8, 2_000, 600_000)).await;
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(node.http).await.unwrap());
    }
    let conns = node.http_conns();
    eventually("12 connections refused", || {
        conns.rejected.load(Ordering::Relaxed) == 12
    })
    .await;
    assert_eq!(conns.open.load(Ordering::Relaxed), 8);
    // Accepted in connect order: the last 12 were over the cap.
    for s in &mut idle[8..] {
        let got = String::from_utf8_lossy(&read_to_close(s).await).into_owned();
        assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
        assert!(got.contains("TOO_MANY_CONNECTIONS"), "{got}");
    }
    // The RESP listener has its own limit: the full HTTP listener does not starve it.
    let mut r = node.resp().await;
    r.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    // The 8 that never send a request head are closed by the header timeout...
    for s in &mut idle[..8] {
        read_to_close(s).await;
    }
    eventually("idle connections released", || {
        conns.open.load(Ordering::Relaxed) == 0
    })
    .await;
    // ...and HTTP serves new clients again.
    let got = node.health().await;
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    r.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    node.stop().await;
}

/// Attack: slowloris, a request head sent one byte every 100 ms so it never completes. The
/// header timeout (1 s) closes it even though bytes keep arriving; the node keeps serving.
#[tokio::test]
async fn slowloris_http_connection_is_closed_by_the_header_timeout() {
    let node = Node::start(small_http(4, 1_000, 600_000)).await;
    let mut s = TcpStream::connect(node.http).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nx-slow: ")
        .await
        .unwrap();
    let closed = tokio::time::timeout(CLOSES_WITHIN, async {
        let mut buf = [0u8; 1024];
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                r = s.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return,
                    // hyper may answer the timeout (408) before closing.
                    Ok(_) => {}
                },
                _ = tick.tick() => {
                    if s.write_all(b"a").await.is_err() {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a slowloris connection was never closed");
    eventually("slowloris connection released", || {
        node.http_conns().open.load(Ordering::Relaxed) == 0
    })
    .await;
    let got = node.health().await;
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    node.stop().await;
}

/// Attack: a complete head announcing a body that never comes (the slow-POST variant, past
/// the header timeout). The idle timeout (1 s without progress) closes it.
#[tokio::test]
async fn stalled_http_body_is_closed_by_the_idle_timeout() {
    let node = Node::start(small_http(4, 600_000, 1_000)).await;
    let mut s = TcpStream::connect(node.http).await.unwrap();
    s.write_all(b"PUT /kv/k HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nabc")
        .await
        .unwrap();
    read_to_close(&mut s).await;
    eventually("stalled connection released", || {
        node.http_conns().open.load(Ordering::Relaxed) == 0
    })
    .await;
    let got = node.health().await;
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    node.stop().await;
}

/// Attack: cross-protocol scripting, an HTTP request (as a browser would send it) whose body
/// holds a Redis command, sent to the RESP port. Like Redis, the `POST` line closes the
/// connection without a reply, so the `SET` in the body never runs.
#[tokio::test]
async fn http_request_on_the_resp_port_closes_without_running_anything() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\n\r\nSET k v\r\n")
        .await;
    c.expect_eof().await;
    // A `Host:` line alone (any case, inline or multibulk) is refused the same way.
    let mut c = s.connect().await;
    c.send(b"hOsT: x\r\nSET k v\r\n").await;
    c.expect_eof().await;
    let mut c = s.connect().await;
    c.send(b"*2\r\n$4\r\npost\r\n$1\r\n/\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
        .await;
    c.expect_eof().await;
    // Requests before it in the same pipeline are answered; nothing after it runs.
    let mut c = s.connect().await;
    c.send(b"SET a 1\r\nPOST / HTTP/1.1\r\nSET k v\r\n").await;
    c.expect(b"+OK\r\n").await;
    c.expect_eof().await;
    // The server keeps serving, and `k` was never set.
    let mut d = s.connect().await;
    assert_eq!(d.cmd(&[b"GET", b"k"]).await, Frame::Null);
    assert_eq!(d.cmd(&[b"GET", b"a"]).await, bulk("1"));
    d.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    s.stop().await;
}

/// Cross-protocol scripting against a password-protected server: the connection is closed
/// before authentication is even checked (no `NOAUTH` reply to read).
#[tokio::test]
async fn http_request_on_the_resp_port_closes_before_auth() {
    let s = Server::start(RespConfig {
        requirepass: Some("pw".into()),
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    c.send(b"POST / HTTP/1.1\r\nHost: x\r\n\r\nAUTH pw\r\nSET k v\r\n")
        .await;
    c.expect_eof().await;
    let mut d = s.connect().await;
    d.roundtrip(b"AUTH pw\r\n", b"+OK\r\n").await;
    assert_eq!(d.cmd(&[b"GET", b"k"]).await, Frame::Null);
    s.stop().await;
}

/// The same refusal in cluster mode, where a pipeline's key commands run concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_request_on_the_resp_port_closes_in_cluster_mode() {
    let c = cluster().await;
    let mut a = connect(&c, 0).await;
    a.send(b"SET a 1\r\nPOST / HTTP/1.1\r\nHost: x\r\n\r\nSET k v\r\n")
        .await;
    a.expect(b"+OK\r\n").await;
    a.expect_eof().await;
    let mut b = connect(&c, 1).await;
    assert_eq!(b.cmd(&[b"GET", b"k"]).await, Frame::Null);
    assert_eq!(b.cmd(&[b"GET", b"a"]).await, bulk("1"));
    b.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    c.shutdown().await;
}
