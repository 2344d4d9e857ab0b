//! The RESP front end end to end: a server on `127.0.0.1:0` over a `MemEngine`, driven with
//! raw bytes (exact replies, protocol errors, limits) and with the `redis` crate (what real
//! applications use).

use bytes::BytesMut;
use meridian_core::SystemClock;
use meridian_server::keyspace::Keyspace;
use meridian_server::metrics::{Frontend, Metrics};
use meridian_server::resp::{Frame, RespConfig, RespContext, RespLimits, serve};
use meridian_storage::MemEngine;
use redis::Commands;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// An embedded cluster whose nodes coordinate any key where it arrives (`resp.misrouted =
/// "serve"`): the tests that use it drive plain connections to chosen nodes, as clients that
/// are not cluster-aware do. `cluster_slots` tests the default, `-MOVED`.
async fn start_serving(
    mut cfg: meridian_server::cluster::EmbeddedConfig,
    ready: Duration,
) -> meridian_server::Result<meridian_server::cluster::Embedded> {
    cfg.node.resp.misrouted = meridian_server::config::Misrouted::Serve;
    meridian_server::cluster::start_embedded(cfg, ready).await
}

/// A plain HTTP/1.1 request with a JSON body: the status code and the body.
async fn http_put(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "PUT {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

/// Only a guard against hangs; no test asserts how long anything takes.
const PATIENCE: Duration = Duration::from_secs(20);

struct Server {
    addr: SocketAddr,
    ctx: Arc<RespContext>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(config: RespConfig) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let keyspace = Arc::new(Keyspace::new(
            Arc::new(MemEngine::new()),
            Arc::new(SystemClock::new()),
        ));
        let metrics = Arc::new(Metrics::new());
        let ctx = RespContext::new(keyspace, metrics.clone(), config);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve(listener, ctx.clone(), shutdown.clone()));
        Server {
            addr,
            ctx,
            metrics,
            shutdown,
            task,
        }
    }

    async fn default() -> Server {
        Self::start(RespConfig::default()).await
    }

    async fn connect(&self) -> Raw {
        Raw {
            stream: TcpStream::connect(self.addr).await.unwrap(),
            buf: BytesMut::new(),
        }
    }

    fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("server stops")
            .unwrap()
            .unwrap();
    }
}

/// A raw connection: write bytes, read exact replies.
struct Raw {
    stream: TcpStream,
    buf: BytesMut,
}

impl Raw {
    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads until exactly `want` has arrived and checks it.
    async fn expect(&mut self, want: &[u8]) {
        tokio::time::timeout(PATIENCE, async {
            while self.buf.len() < want.len() {
                let n = self.stream.read_buf(&mut self.buf).await.unwrap();
                assert!(n > 0, "EOF after {:?}", String::from_utf8_lossy(&self.buf));
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out; got {:?}", String::from_utf8_lossy(&self.buf)));
        let got = self.buf.split_to(want.len());
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "exact reply"
        );
    }

    async fn roundtrip(&mut self, req: &[u8], want: &[u8]) {
        self.send(req).await;
        self.expect(want).await;
    }

    /// Reads one decoded reply.
    async fn frame(&mut self) -> Frame {
        tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(f) = Frame::parse(&mut self.buf).unwrap() {
                    return f;
                }
                let n = self.stream.read_buf(&mut self.buf).await.unwrap();
                assert!(n > 0, "EOF");
            }
        })
        .await
        .expect("a reply")
    }

    /// Sends a command as a multibulk request and reads its reply.
    async fn cmd(&mut self, args: &[&[u8]]) -> Frame {
        let req = Frame::Array(args.iter().map(|a| Frame::bulk(a.to_vec())).collect());
        self.send(&req.to_bytes(false)).await;
        self.frame().await
    }

    /// Sends the commands as one pipeline and reads every reply, in order.
    async fn roundtrip_frames(&mut self, cmds: &[&[&[u8]]]) -> Vec<Frame> {
        let mut req = Vec::new();
        for args in cmds {
            let f = Frame::Array(args.iter().map(|a| Frame::bulk(a.to_vec())).collect());
            req.extend_from_slice(&f.to_bytes(false));
        }
        self.send(&req).await;
        let mut out = Vec::with_capacity(cmds.len());
        for _ in cmds {
            out.push(self.frame().await);
        }
        out
    }

    /// Asserts the server closes the connection (after any pending bytes, which must be none).
    async fn expect_eof(&mut self) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        })
        .await
        .expect("connection closed");
        assert!(
            self.buf.is_empty(),
            "unexpected bytes before close: {:?}",
            String::from_utf8_lossy(&self.buf)
        );
    }
}

fn bulk(s: &str) -> Frame {
    Frame::bulk(s.as_bytes().to_vec())
}

/// A whole node (`meridian_server::run`) on the loopback listeners its configuration names,
/// for the tests that attack or drive its front ends; [`RunningNode::stop`] ends it.
struct RunningNode {
    resp: SocketAddr,
    http: SocketAddr,
    s3_listener: Option<SocketAddr>,
    state: Arc<meridian_server::NodeState>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<meridian_server::Result<()>>,
}

impl RunningNode {
    async fn start(config: meridian_server::NodeConfig) -> RunningNode {
        config.validate().unwrap();
        let listeners = meridian_server::Listeners::bind(&config).await.unwrap();
        RunningNode::serve(meridian_server::NodeState::open(config).unwrap(), listeners)
    }

    /// Serves `state` (a node already opened, e.g. over an engine the test holds) on
    /// `listeners`.
    fn serve(
        state: Arc<meridian_server::NodeState>,
        listeners: meridian_server::Listeners,
    ) -> RunningNode {
        let (resp, http) = listeners.addrs().unwrap();
        let s3_listener = listeners.s3.as_ref().map(|l| l.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(meridian_server::run(
            state.clone(),
            listeners,
            shutdown.clone(),
        ));
        RunningNode {
            resp,
            http,
            s3_listener,
            state,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("node stops")
            .unwrap()
            .unwrap();
    }
}

/// `meridian up --dcs 1 --nodes-per-dc 3` on port 0 with ideal links and 100 ms heartbeats:
/// N = 3, so every node holds every key.
fn one_dc_three_nodes() -> meridian_server::cluster::EmbeddedConfig {
    meridian_server::cluster::EmbeddedConfig {
        dcs: 1,
        nodes_per_dc: 3,
        wan_latency: Duration::ZERO,
        intra_dc: meridian_net::wan::LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        buckets: [eventual_default()].into(),
        ..meridian_server::cluster::EmbeddedConfig::default()
    }
}

/// The `default` bucket as an eventual one (N and quorums by default), for the tests of
/// eventual semantics through bare keys; a cluster's own default is a timeline bucket
/// (`BucketProps::redis_default`).
fn eventual_default() -> (String, meridian_replication::BucketProps) {
    (
        "default".to_owned(),
        meridian_replication::BucketProps::default(),
    )
}

/// Runs blocking `redis` crate code off the runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(PATIENCE, tokio::task::spawn_blocking(f))
        .await
        .expect("finished")
        .unwrap()
}

// ----- raw protocol -----------------------------------------------------------------------

#[tokio::test]
async fn pipelined_commands_in_one_write_get_exact_replies_in_order() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.send(
        b"*1\r\n$4\r\nPING\r\n\
          *3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n\
          *2\r\n$3\r\nget\r\n$1\r\nk\r\n\
          *2\r\n$4\r\nINCR\r\n$1\r\nn\r\n\
          *3\r\n$6\r\nINCRBY\r\n$1\r\nn\r\n$2\r\n41\r\n\
          *2\r\n$4\r\nincr\r\n$1\r\nk\r\n\
          *3\r\n$3\r\nFOO\r\n$1\r\na\r\n$1\r\nb\r\n\
          *1\r\n$3\r\nGET\r\n\
          *3\r\n$3\r\nDEL\r\n$1\r\nk\r\n$7\r\nmissing\r\n\
          *2\r\n$3\r\nGET\r\n$1\r\nk\r\n\
          *2\r\n$4\r\nPING\r\n$2\r\nhi\r\n\
          *2\r\n$4\r\nECHO\r\n$0\r\n\r\n\
          *2\r\n$6\r\nSTRLEN\r\n$1\r\nn\r\n\
          *2\r\n$4\r\nTYPE\r\n$1\r\nn\r\n\
          *2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n\
          *2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n",
    )
    .await;
    c.expect(
        b"+PONG\r\n+OK\r\n$5\r\nhello\r\n:1\r\n:42\r\n\
          -ERR value is not an integer or out of range\r\n\
          -ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n\
          -ERR wrong number of arguments for 'get' command\r\n\
          :1\r\n$-1\r\n$2\r\nhi\r\n$0\r\n\r\n:2\r\n+string\r\n+OK\r\n\
          -ERR DB index is out of range\r\n",
    )
    .await;
    c.roundtrip(
        b"*1\r\n$3\r\nfoo\r\n",
        b"-ERR unknown command 'foo', with args beginning with: \r\n",
    )
    .await;
    let long = "x".repeat(200);
    c.roundtrip(
        format!("nope {long} b\r\n").as_bytes(),
        format!(
            "-ERR unknown command 'nope', with args beginning with: '{}' \r\n",
            &long[..128]
        )
        .as_bytes(),
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn inline_commands_work_like_telnet() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    c.roundtrip(b"set k \"a b\\n\"\r\n", b"+OK\r\n").await;
    c.roundtrip(b"GET k\n", b"$4\r\na b\n\r\n").await;
    // A blank line is no command and gets no reply.
    c.roundtrip(b"\r\n   \r\nEXISTS k k nope\r\n", b":2\r\n")
        .await;
    // Inline and multibulk mixed, split at awkward places.
    for chunk in [
        &b"ECH"[..],
        b"O x\r\n*2\r\n$4\r",
        b"\nECHO\r\n$1",
        b"\r\ny\r\n",
    ] {
        c.send(chunk).await;
        tokio::task::yield_now().await;
    }
    c.expect(b"$1\r\nx\r\n$1\r\ny\r\n").await;
    s.stop().await;
}

#[tokio::test]
async fn protocol_errors_close_only_that_connection() {
    let s = Server::default().await;
    let mut healthy = s.connect().await;
    healthy.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    let cases: [(&[u8], &[u8]); 7] = [
        (
            b"*x\r\n",
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$-3\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$abc\r\n",
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*2\r\n$4\r\nECHO\r\nx\r\n",
            b"-ERR Protocol error: expected '$', got 'x'\r\n",
        ),
        (
            b"GET \"k\r\n",
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
        (
            &[b'a'; 70_000],
            b"-ERR Protocol error: too big inline request\r\n",
        ),
        // Replies to requests before the bad one are sent first.
        (
            b"PING\r\n*1\r\n$4\r\nPING\r\n*1\r\nPING\r\n",
            b"+PONG\r\n+PONG\r\n-ERR Protocol error: expected '$', got 'P'\r\n",
        ),
    ];
    for (input, want) in cases {
        let mut c = s.connect().await;
        c.send(input).await;
        c.expect(want).await;
        c.expect_eof().await;
        healthy.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    }
    s.stop().await;
}

#[tokio::test]
async fn oversized_bulk_is_refused_with_a_small_limit() {
    let s = Server::start(RespConfig {
        limits: RespLimits {
            max_bulk_len: 1024,
            max_multibulk_len: 4,
            ..RespLimits::default()
        },
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    // At the limit, sent a few bytes at a time: fine.
    let value = vec![b'v'; 1024];
    let mut req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1024\r\n".to_vec();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    for chunk in req.chunks(100) {
        c.send(chunk).await;
    }
    c.expect(b"+OK\r\n").await;
    c.roundtrip(b"STRLEN k\r\n", b":1024\r\n").await;
    c.roundtrip(
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1025\r\n",
        b"-ERR Protocol error: invalid bulk length\r\n",
    )
    .await;
    c.expect_eof().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"*5\r\n",
        b"-ERR Protocol error: invalid multibulk length\r\n",
    )
    .await;
    c.expect_eof().await;
    s.stop().await;
}

#[tokio::test]
async fn max_clients_refuses_with_redis_error() {
    let s = Server::start(RespConfig {
        limits: RespLimits {
            max_clients: 2,
            ..RespLimits::default()
        },
        ..RespConfig::default()
    })
    .await;
    let mut a = s.connect().await;
    let mut b = s.connect().await;
    a.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    b.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    let mut c = s.connect().await;
    c.expect(b"-ERR max number of clients reached\r\n").await;
    c.expect_eof().await;
    let conns = s.metrics.connections(Frontend::Resp);
    assert_eq!(conns.rejected.load(Ordering::Relaxed), 1);
    assert_eq!(conns.open.load(Ordering::Relaxed), 2);
    a.roundtrip(b"QUIT\r\n", b"+OK\r\n").await;
    a.expect_eof().await;
    // Once the server has let `a` go, there is room again.
    let mut d = loop {
        let mut d = s.connect().await;
        d.send(b"PING\r\n").await;
        match d.frame().await {
            Frame::Simple(p) if &p[..] == b"PONG" => break d,
            Frame::Error(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            other => panic!("{other:?}"),
        }
    };
    let info = d.cmd(&[b"INFO", b"stats"]).await;
    let Frame::Bulk(text) = info else { panic!() };
    let text = String::from_utf8(text.to_vec()).unwrap();
    assert!(text.contains("\r\nrejected_connections:"), "{text}");
    assert!(!text.contains("rejected_connections:0\r\n"), "{text}");
    s.stop().await;
}

#[tokio::test]
async fn quit_replies_then_closes() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.send(b"PING\r\nQUIT\r\nPING\r\n").await;
    c.expect(b"+PONG\r\n+OK\r\n").await;
    c.expect_eof().await;
    s.stop().await;
}

#[tokio::test]
async fn auth_flow() {
    let s = Server::start(RespConfig {
        requirepass: Some("s3cret".into()),
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    c.roundtrip(b"GET k\r\n", b"-NOAUTH Authentication required.\r\n")
        .await;
    c.roundtrip(
        b"NOSUCH\r\n",
        b"-ERR unknown command 'NOSUCH', with args beginning with: \r\n",
    )
    .await;
    c.roundtrip(
        b"HELLO 3\r\n",
        b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the \
          HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
          select the RESP protocol version at the same time\r\n",
    )
    .await;
    c.roundtrip(
        b"AUTH nope\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    )
    .await;
    c.roundtrip(
        b"AUTH someone s3cret\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    )
    .await;
    c.roundtrip(b"AUTH s3cret\r\n", b"+OK\r\n").await;
    c.roundtrip(b"SET k v\r\nGET k\r\n", b"+OK\r\n$1\r\nv\r\n")
        .await;
    c.roundtrip(
        b"RESET\r\nGET k\r\n",
        b"+RESET\r\n-NOAUTH Authentication required.\r\n",
    )
    .await;
    c.roundtrip(b"AUTH default s3cret\r\n", b"+OK\r\n").await;
    // Before authenticating, big requests are refused outright (Redis's DoS guard).
    let mut d = s.connect().await;
    d.roundtrip(
        b"*11\r\n",
        b"-ERR Protocol error: unauthenticated multibulk length\r\n",
    )
    .await;
    d.expect_eof().await;
    // HELLO with AUTH authenticates and switches protocol in one go.
    let mut e = s.connect().await;
    e.send(b"HELLO 3 AUTH default s3cret SETNAME app\r\n").await;
    assert!(matches!(e.frame().await, Frame::Map(_)));
    e.roundtrip(b"CLIENT GETNAME\r\n", b"$3\r\napp\r\n").await;

    let url = format!("redis://:s3cret@{}/", s.addr);
    let v: String = blocking(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = con.set("x", "1").unwrap();
        con.get("x").unwrap()
    })
    .await;
    assert_eq!(v, "1");
    let url = format!("redis://:wrong@{}/", s.addr);
    let err = blocking(move || redis::Client::open(url).unwrap().get_connection().err())
        .await
        .expect("wrong password refused");
    assert_eq!(err.kind(), redis::ErrorKind::AuthenticationFailed, "{err}");
    s.stop().await;

    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"AUTH pass\r\n",
        b"-ERR AUTH <password> called without any password configured for the default user. \
          Are you sure your configuration is correct?\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn hello_3_switches_to_resp3_replies() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"HELLO 4\r\n", b"-NOPROTO unsupported protocol version\r\n")
        .await;
    c.roundtrip(
        b"HELLO x\r\n",
        b"-ERR Protocol version is not an integer or out of range\r\n",
    )
    .await;
    let hello = c.cmd(&[b"HELLO", b"3"]).await;
    let Frame::Map(pairs) = hello else {
        panic!("{hello:?}")
    };
    assert!(pairs.contains(&(bulk("proto"), Frame::Integer(3))));
    assert!(pairs.contains(&(bulk("server"), bulk("redis"))));
    assert!(pairs.contains(&(bulk("version"), bulk("7.2.0"))));
    c.roundtrip(b"GET missing\r\n", b"_\r\n").await;
    c.roundtrip(b"SET k v\r\nGET k\r\n", b"+OK\r\n$1\r\nv\r\n")
        .await;
    c.roundtrip(
        b"CONFIG GET maxclients\r\n",
        b"%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n",
    )
    .await;
    match c.cmd(&[b"INFO", b"server"]).await {
        Frame::Verbatim { format, text } => {
            assert_eq!(&format, b"txt");
            assert!(text.starts_with(b"# Server\r\n"));
        }
        other => panic!("{other:?}"),
    }
    // Back to RESP2.
    c.send(b"HELLO 2\r\n").await;
    assert!(matches!(c.frame().await, Frame::Array(_)));
    c.roundtrip(b"GET missing\r\n", b"$-1\r\n").await;

    let url = format!("redis://{}/?protocol=resp3", s.addr);
    let (v, missing): (String, Option<String>) = blocking(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = con.set("r3", "yes").unwrap();
        (con.get("r3").unwrap(), con.get("nope").unwrap())
    })
    .await;
    assert_eq!((v.as_str(), missing), ("yes", None));
    s.stop().await;
}

#[tokio::test]
async fn client_setup_commands_redis_tools_send() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    // What redis-benchmark and client libraries send on connect.
    c.roundtrip(b"CONFIG GET save\r\n", b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n")
        .await;
    c.roundtrip(
        b"CONFIG GET appendonly\r\n",
        b"*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n",
    )
    .await;
    c.roundtrip(b"CLIENT SETINFO LIB-NAME redis-py\r\n", b"+OK\r\n")
        .await;
    c.roundtrip(b"CLIENT SETINFO lib-ver 5.0.0\r\n", b"+OK\r\n")
        .await;
    c.roundtrip(b"CLIENT SETNAME worker-1\r\n", b"+OK\r\n")
        .await;
    c.roundtrip(b"CLIENT GETNAME\r\n", b"$8\r\nworker-1\r\n")
        .await;
    c.roundtrip(
        b"CLIENT SETNAME \"a b\"\r\n",
        b"-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
    )
    .await;
    c.roundtrip(
        b"CLIENT FOO\r\n",
        b"-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n",
    )
    .await;
    c.roundtrip(
        b"CLIENT SETNAME\r\n",
        b"-ERR wrong number of arguments for 'client|setname' command\r\n",
    )
    .await;
    let Frame::Integer(id) = c.cmd(&[b"CLIENT", b"ID"]).await else {
        panic!()
    };
    let Frame::Bulk(list) = c.cmd(&[b"CLIENT", b"LIST"]).await else {
        panic!()
    };
    let list = String::from_utf8(list.to_vec()).unwrap();
    assert!(list.contains(&format!("id={id} ")), "{list}");
    assert!(list.contains("name=worker-1 "), "{list}");
    assert!(list.contains("lib-name=redis-py lib-ver=5.0.0\n"), "{list}");
    let Frame::Integer(n) = c.cmd(&[b"COMMAND", b"COUNT"]).await else {
        panic!()
    };
    assert!(n > 40);
    let Frame::Array(info) = c.cmd(&[b"COMMAND", b"INFO", b"get", b"nope"]).await else {
        panic!()
    };
    assert_eq!(info[1], Frame::Null);
    let Frame::Array(get) = &info[0] else {
        panic!()
    };
    assert_eq!(get[0], bulk("get"));
    assert_eq!(get[1], Frame::Integer(2));
    // ACL categories, as Redis lists them (own and implied by the flags, in Redis's order).
    let cats = ["@read", "@string", "@fast"].map(|c| Frame::Simple(c.into()));
    assert_eq!(get[6], Frame::Array(cats.to_vec()));
    c.roundtrip(
        b"COMMAND DOCS get\r\n",
        b"*2\r\n$3\r\nget\r\n*2\r\n$5\r\ngroup\r\n$6\r\nstring\r\n",
    )
    .await;
    c.roundtrip(
        b"COMMAND GETKEYS mset a 1 b 2\r\n",
        b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
    )
    .await;
    let Frame::Array(all) = c.cmd(&[b"COMMAND"]).await else {
        panic!()
    };
    assert_eq!(all.len() as i64, n);
    c.roundtrip(b"CONFIG RESETSTAT\r\n", b"+OK\r\n").await;
    // No RDB snapshots: `save ""` (what tools and Redis's suite send) is what already holds;
    // a schedule, or a setting only the configuration file sets, is refused with the reason.
    c.roundtrip(b"CONFIG SET save \"\"\r\n", b"+OK\r\n").await;
    let Frame::Error(e) = c.cmd(&[b"CONFIG", b"SET", b"save", b"900 1"]).await else {
        panic!()
    };
    assert!(e.starts_with(b"ERR CONFIG SET is not supported"));
    let Frame::Error(e) = c.cmd(&[b"CONFIG", b"SET", b"appendonly", b"yes"]).await else {
        panic!()
    };
    assert!(e.starts_with(b"ERR CONFIG SET is not supported"));
    c.roundtrip(b"ROLE\r\n", b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n")
        .await;
    s.stop().await;
}

#[tokio::test]
async fn info_reports_real_figures() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.send(b"SET a 1\r\nSET b 2 EX 100\r\nGET a\r\nGET nope\r\n")
        .await;
    c.expect(b"+OK\r\n+OK\r\n$1\r\n1\r\n$-1\r\n").await;
    let Frame::Bulk(text) = c.cmd(&[b"INFO"]).await else {
        panic!()
    };
    let text = String::from_utf8(text.to_vec()).unwrap();
    for want in [
        "# Server\r\nredis_version:7.2.0\r\n",
        &format!("\r\ntcp_port:{}\r\n", s.addr.port()),
        &format!("\r\nprocess_id:{}\r\n", std::process::id()),
        "\r\nuptime_in_days:0\r\n",
        "\r\n\r\n# Clients\r\nconnected_clients:1\r\n",
        "\r\nmaxclients:10000\r\n",
        "\r\ntotal_connections_received:1\r\n",
        "\r\nkeyspace_hits:1\r\nkeyspace_misses:1\r\n",
        "\r\nexpired_keys:0\r\n",
        "\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=0\r\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    assert!(text.contains("\r\nrun_id:"));
    assert!(text.contains("\r\ninstantaneous_ops_per_sec:"));
    let processed: u64 = text
        .split("total_commands_processed:")
        .nth(1)
        .and_then(|r| r.split("\r\n").next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(processed, 4);
    assert!(text.lines().all(|l| !l.contains('\n')));
    assert_eq!(
        text.matches('\n').count(),
        text.matches("\r\n").count(),
        "CRLF only"
    );
    // Sections can be picked; an empty keyspace shows only its header.
    c.roundtrip(b"FLUSHALL\r\n", b"+OK\r\n").await;
    c.roundtrip(b"INFO keyspace\r\n", b"$12\r\n# Keyspace\r\n\r\n")
        .await;
    assert_eq!(s.metrics.op(Frontend::Resp, "get").calls(), 2);
    assert_eq!(s.metrics.op(Frontend::Resp, "set").calls(), 2);
    s.stop().await;
}

#[tokio::test]
async fn expiry_commands() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"SET k v PX 100000\r\nPTTL k\r\n", b"+OK\r\n:100000\r\n")
        .await;
    c.roundtrip(b"TTL k\r\nTTL nope\r\n", b":100\r\n:-2\r\n")
        .await;
    c.roundtrip(
        b"PERSIST k\r\nTTL k\r\nPERSIST k\r\n",
        b":1\r\n:-1\r\n:0\r\n",
    )
    .await;
    c.roundtrip(
        b"EXPIRE k 50 XX\r\nEXPIRE k 50 NX\r\nTTL k\r\n",
        b":0\r\n:1\r\n:50\r\n",
    )
    .await;
    c.roundtrip(
        b"EXPIRE k 10 GT\r\nEXPIRE k 10 LT\r\nTTL k\r\n",
        b":0\r\n:1\r\n:10\r\n",
    )
    .await;
    c.roundtrip(
        b"EXPIRE k 10 NX XX\r\n",
        b"-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
    )
    .await;
    c.roundtrip(b"EXPIRE k 10 YY\r\n", b"-ERR Unsupported option YY\r\n")
        .await;
    c.roundtrip(
        b"EXPIRE k 9223372036854775807\r\n",
        b"-ERR invalid expire time in 'expire' command\r\n",
    )
    .await;
    c.roundtrip(
        b"EXPIREAT k 4102444800\r\nEXPIRETIME k\r\nPEXPIRETIME k\r\n",
        b":1\r\n:4102444800\r\n:4102444800000\r\n",
    )
    .await;
    c.roundtrip(b"EXPIRE k -1\r\nEXISTS k\r\n", b":1\r\n:0\r\n")
        .await;
    c.roundtrip(
        b"SET k v EX 0\r\n",
        b"-ERR invalid expire time in 'set' command\r\n",
    )
    .await;
    c.roundtrip(b"SET k v EX 10 PX 10\r\n", b"-ERR syntax error\r\n")
        .await;
    c.roundtrip(
        b"SETEX k -1 v\r\n",
        b"-ERR invalid expire time in 'setex' command\r\n",
    )
    .await;
    c.roundtrip(b"SETEX k 10 v\r\nTTL k\r\n", b"+OK\r\n:10\r\n")
        .await;
    c.roundtrip(b"SET k w KEEPTTL GET\r\nTTL k\r\n", b"$1\r\nv\r\n:10\r\n")
        .await;
    c.roundtrip(b"GETEX k PERSIST\r\nTTL k\r\n", b"$1\r\nw\r\n:-1\r\n")
        .await;
    c.roundtrip(b"GETEX k EX 5\r\nTTL k\r\n", b"$1\r\nw\r\n:5\r\n")
        .await;
    c.roundtrip(b"GETEX k NX\r\n", b"-ERR syntax error\r\n")
        .await;
    c.roundtrip(b"SET k v PXAT 1\r\nEXISTS k\r\n", b"+OK\r\n:0\r\n")
        .await;
    c.roundtrip(
        b"SET k v NX\r\nSET k v NX\r\nSET k w XX GET\r\n",
        b"+OK\r\n$-1\r\n$1\r\nv\r\n",
    )
    .await;
    c.roundtrip(
        b"SETNX k z\r\nGETSET k z\r\nGETDEL k\r\nGETDEL k\r\n",
        b":0\r\n$1\r\nw\r\n$1\r\nz\r\n$-1\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn string_commands() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"APPEND s Hello\r\nAPPEND s \" World\"\r\n",
        b":5\r\n:11\r\n",
    )
    .await;
    c.roundtrip(
        b"GETRANGE s -5 -1\r\nSUBSTR s 0 4\r\n",
        b"$5\r\nWorld\r\n$5\r\nHello\r\n",
    )
    .await;
    c.roundtrip(
        b"SETRANGE s 6 Redis\r\nGET s\r\n",
        b":11\r\n$11\r\nHello Redis\r\n",
    )
    .await;
    c.roundtrip(b"SETRANGE s -1 x\r\n", b"-ERR offset is out of range\r\n")
        .await;
    c.roundtrip(
        b"MSET a 1 b 2\r\nMGET a b c\r\n",
        b"+OK\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$-1\r\n",
    )
    .await;
    c.roundtrip(
        b"MSET a 1 b\r\n",
        b"-ERR wrong number of arguments for 'mset' command\r\n",
    )
    .await;
    c.roundtrip(b"MSETNX a 1 z 2\r\nMSETNX y 1 z 2\r\n", b":0\r\n:1\r\n")
        .await;
    c.roundtrip(
        b"INCRBYFLOAT f 10.5\r\nINCRBYFLOAT f 0.1\r\n",
        b"$4\r\n10.5\r\n$4\r\n10.6\r\n",
    )
    .await;
    c.roundtrip(
        b"INCRBYFLOAT f x\r\n",
        b"-ERR value is not a valid float\r\n",
    )
    .await;
    c.roundtrip(
        b"SET n 9223372036854775807\r\nINCR n\r\n",
        b"+OK\r\n-ERR increment or decrement would overflow\r\n",
    )
    .await;
    c.roundtrip(
        b"DECRBY n -9223372036854775808\r\n",
        b"-ERR decrement would overflow\r\n",
    )
    .await;
    c.roundtrip(b"DECR x\r\nDECRBY x 5\r\n", b":-1\r\n:-6\r\n")
        .await;
    c.roundtrip(b"UNLINK a b nope\r\nDBSIZE\r\n", b":2\r\n:6\r\n")
        .await;
    c.roundtrip(b"KEYS [xy]\r\n", b"*2\r\n$1\r\nx\r\n$1\r\ny\r\n")
        .await;
    c.roundtrip(
        b"SCAN 0 MATCH [xy] COUNT 100\r\n",
        b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\nx\r\n$1\r\ny\r\n",
    )
    .await;
    c.roundtrip(b"SCAN 0 TYPE hash\r\n", b"*2\r\n$1\r\n0\r\n*0\r\n")
        .await;
    c.roundtrip(b"SCAN x\r\n", b"-ERR invalid cursor\r\n").await;
    c.roundtrip(b"SCAN 0 COUNT 0\r\n", b"-ERR syntax error\r\n")
        .await;
    c.roundtrip(
        b"FLUSHDB ASYNC\r\nDBSIZE\r\nFLUSHDB NOW\r\n",
        b"+OK\r\n:0\r\n-ERR syntax error\r\n",
    )
    .await;
    let big = vec![b'k'; 70 * 1024];
    let reply = c.cmd(&[b"SET", &big, b"v"]).await;
    let Frame::Error(e) = reply else {
        panic!("{reply:?}")
    };
    assert!(String::from_utf8_lossy(&e).contains("largest key accepted is 61440 bytes"));
    s.stop().await;
}

// ----- the redis crate ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_set_get_scan_expire_pipeline() {
    let s = Server::default().await;
    let url = s.url();
    blocking(move || {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        let _: () = con.set("greeting", "hello").unwrap();
        let v: String = con.get("greeting").unwrap();
        assert_eq!(v, "hello");
        let missing: Option<String> = con.get("nope").unwrap();
        assert_eq!(missing, None);
        let big = vec![7u8; 3 * 1024 * 1024];
        let _: () = con.set("big", &big).unwrap();
        let back: Vec<u8> = con.get("big").unwrap();
        assert_eq!(back, big);

        let _: () = con.set_ex("temp", "x", 100).unwrap();
        let ttl: i64 = con.ttl("temp").unwrap();
        assert_eq!(ttl, 100);
        let ok: bool = con.expire("temp", 5).unwrap();
        assert!(ok);
        let pttl: i64 = con.pttl("temp").unwrap();
        assert!((4_000..=5_000).contains(&pttl), "{pttl}");

        let (a, b, n): (i64, String, i64) = redis::pipe()
            .set("p1", 1)
            .ignore()
            .incr("p1", 41)
            .set("p2", "two")
            .ignore()
            .get("p2")
            .incr("counter", 1)
            .query(&mut con)
            .unwrap();
        assert_eq!((a, b.as_str(), n), (42, "two", 1));

        let _: () = redis::cmd("FLUSHDB").query(&mut con).unwrap();
        for i in 0..500 {
            let _: () = con.set(format!("key:{i}"), i).unwrap();
        }
        let _: () = con.set("other", 1).unwrap();
        let mut keys: Vec<String> = con.scan_match("key:*").unwrap().collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), 500);
        let all: Vec<String> = con.scan().unwrap().collect();
        assert_eq!(all.len(), 501);
        // COUNT bounds a page, and the pages cover every key once.
        let (mut cursor, mut seen) = (0u64, Vec::new());
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(10)
                .query(&mut con)
                .unwrap();
            assert!(page.len() <= 10, "{}", page.len());
            seen.extend(page);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        seen.sort();
        assert_eq!(seen.len(), 501);
        seen.dedup();
        assert_eq!(seen.len(), 501);
        let n: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        assert_eq!(n, 501);
        let info: redis::InfoDict = redis::cmd("INFO").query(&mut con).unwrap();
        assert_eq!(
            info.get::<String>("redis_version").as_deref(),
            Some("7.2.0")
        );
        assert_eq!(info.get::<u64>("connected_clients"), Some(1));
        let pong: String = redis::cmd("PING").query(&mut con).unwrap();
        assert_eq!(pong, "PONG");
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_is_atomic_under_concurrent_clients() {
    let s = Server::default().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let url = s.url();
        tasks.push(tokio::task::spawn_blocking(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            for _ in 0..500 {
                let _: i64 = con.incr("counter", 1).unwrap();
                let _: u64 = con.append("log", "x").unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(PATIENCE, t).await.unwrap().unwrap();
    }
    let mut c = s.connect().await;
    c.roundtrip(b"GET counter\r\nSTRLEN log\r\n", b"$4\r\n4000\r\n:4000\r\n")
        .await;
    assert_eq!(
        s.metrics.op(Frontend::Resp, "incrby").calls(),
        4000,
        "redis-rs sends INCRBY"
    );
    assert_eq!(
        s.metrics
            .connections(Frontend::Resp)
            .accepted
            .load(Ordering::Relaxed),
        9
    );
    s.stop().await;
}

// ----- lifecycle and robustness -------------------------------------------------------------

#[tokio::test]
async fn shutdown_answers_what_was_read_then_closes_everyone() {
    let s = Server::default().await;
    let mut a = s.connect().await;
    let mut b = s.connect().await;
    a.roundtrip(b"SET k v\r\n", b"+OK\r\n").await;
    b.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n").await;
    let metrics = s.metrics.clone();
    let ctx = s.ctx.clone();
    s.stop().await;
    a.expect_eof().await;
    b.expect_eof().await;
    assert_eq!(
        metrics
            .connections(Frontend::Resp)
            .open
            .load(Ordering::Relaxed),
        0
    );
    assert_eq!(
        ctx.keyspace().get(b"k").unwrap().as_deref(),
        Some(&b"v"[..])
    );
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Random bytes, raw or sprinkled into valid-looking requests, never take the server
        /// down: each garbage connection ends, and a fresh client is still served.
        #[test]
        fn garbage_never_kills_the_server(
            chunks in proptest::collection::vec(
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..300),
                    Just(b"*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n".to_vec()),
                    Just(b"*3\r\n$3\r\nSET\r\n".to_vec()),
                    Just(b"$5\r\n".to_vec()),
                    Just(b"\"unbalanced".to_vec()),
                    Just(b"*-1\r\n*0\r\n\r\n".to_vec()),
                ],
                1..8,
            )
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let s = Server::default().await;
                let mut c = s.connect().await;
                for chunk in &chunks {
                    if c.stream.write_all(chunk).await.is_err() {
                        break;
                    }
                }
                let _ = c.stream.shutdown().await;
                // The server answers what it can and closes when the input ends or breaks.
                tokio::time::timeout(PATIENCE, async {
                    let mut sink = Vec::new();
                    let _ = c.stream.read_to_end(&mut sink).await;
                })
                .await
                .expect("garbage connection ends");
                let mut fresh = s.connect().await;
                fresh.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
                s.stop().await;
            });
        }
    }
}

// ----- cluster mode -----------------------------------------------------------------------

/// Cluster mode end to end: an embedded 2-DC × 2-node cluster (ideal links, real time, port
/// 0), driven over RESP on different nodes. The pipelining tests put an emulated WAN between
/// the DCs, whose delays are never shorter than configured: time bounds derived from them
/// hold on a slow machine, and a loose upper bound still separates overlapped from serial.
pub(crate) mod cluster_mode {
    use super::*;
    use meridian_net::wan::LinkConfig;
    use meridian_server::cluster::{Embedded, EmbeddedConfig};

    /// An embedded 2-DC × 2-node cluster on port 0, no WAN delay, its `default` bucket
    /// eventual (shared with `cluster_slots` and the transaction tests).
    pub(crate) async fn cluster() -> Embedded {
        timeline_cluster(vec![eventual_default()]).await
    }

    /// `meridian up`'s shape on 2 DCs × 2 nodes, no WAN delay: the `default` bucket is the
    /// timeline bucket of `BucketProps::redis_default` unless `buckets` names `default`,
    /// beside `buckets`.
    pub(crate) async fn timeline_cluster(
        buckets: Vec<(String, meridian_replication::BucketProps)>,
    ) -> Embedded {
        let cfg = EmbeddedConfig {
            dcs: 2,
            nodes_per_dc: 2,
            wan_latency: Duration::ZERO,
            intra_dc: LinkConfig::ideal(),
            heartbeat: Duration::from_millis(100),
            buckets: buckets.into_iter().collect(),
            ..EmbeddedConfig::default()
        };
        crate::start_serving(cfg, Duration::from_secs(60))
            .await
            .unwrap()
    }

    /// A raw RESP connection to member `i`.
    pub(crate) async fn connect(c: &Embedded, i: usize) -> Raw {
        Raw {
            stream: TcpStream::connect(c.members[i].resp.unwrap())
                .await
                .unwrap(),
            buf: BytesMut::new(),
        }
    }

    fn error(f: Frame) -> String {
        match f {
            Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// `[context, [values...]]` of a MERIDIAN.GET reply, values sorted.
    fn siblings(f: Frame) -> (Frame, Vec<Frame>) {
        let Frame::Array(mut parts) = f else {
            panic!("expected an array, got {f:?}")
        };
        assert_eq!(parts.len(), 2);
        let Frame::Array(mut values) = parts.pop().unwrap() else {
            panic!("values must be an array")
        };
        values.sort_by_key(|v| format!("{v:?}"));
        (parts.pop().unwrap(), values)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_commands_read_and_write_across_dcs() {
        let c = cluster().await;
        let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
        assert_eq!(
            a.cmd(&[b"SET", b"k", b"v1"]).await,
            Frame::Simple("OK".into())
        );
        assert_eq!(b.cmd(&[b"GET", b"k"]).await, bulk("v1"));
        // A SET reads the context first, so it supersedes: still one value.
        assert_eq!(
            b.cmd(&[b"SET", b"k", b"v2"]).await,
            Frame::Simple("OK".into())
        );
        let (_, values) = siblings(a.cmd(&[b"MERIDIAN.GET", b"k", b"R", b"all"]).await);
        assert_eq!(values, vec![bulk("v2")]);
        assert_eq!(
            a.cmd(&[b"MSET", b"m1", b"x", b"m2", b"y"]).await,
            Frame::Simple("OK".into())
        );
        assert_eq!(
            b.cmd(&[b"MGET", b"m1", b"nope", b"m2"]).await,
            Frame::Array(vec![bulk("x"), Frame::Null, bulk("y")])
        );
        assert_eq!(
            b.cmd(&[b"EXISTS", b"m1", b"m2", b"nope"]).await,
            Frame::Integer(2)
        );
        assert_eq!(
            a.cmd(&[b"DEL", b"m1", b"nope", b"k"]).await,
            Frame::Integer(2)
        );
        assert_eq!(b.cmd(&[b"GET", b"k"]).await, Frame::Null);
        assert_eq!(
            b.cmd(&[b"TYPE", b"m2"]).await,
            Frame::Simple("string".into())
        );
        // Pipelined commands keep their order.
        a.send(b"SET p1 a\r\nGET p1\r\nPING\r\n").await;
        a.expect(b"+OK\r\n$1\r\na\r\n+PONG\r\n").await;
        c.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn contexts_siblings_and_refusals() {
        let c = cluster().await;
        let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 2).await);
        // Two blind puts: two siblings, and a plain GET shows one of them.
        let Frame::Bulk(_) = a.cmd(&[b"MERIDIAN.PUT", b"s", b"one"]).await else {
            panic!("a context")
        };
        let Frame::Bulk(_) = b.cmd(&[b"MERIDIAN.PUT", b"s", b"two", b"W", b"all"]).await else {
            panic!("a context")
        };
        let (ctx, values) = siblings(a.cmd(&[b"MERIDIAN.GET", b"s", b"R", b"all"]).await);
        assert_eq!(values, vec![bulk("one"), bulk("two")]);
        let shown = a.cmd(&[b"GET", b"s"]).await;
        assert!(values.contains(&shown), "{shown:?}");
        // A put with the merged context resolves them.
        let Frame::Bulk(ctx) = ctx else {
            panic!("context")
        };
        let Frame::Bulk(_) = b
            .cmd(&[
                b"MERIDIAN.PUT",
                b"s",
                b"merged",
                b"CONTEXT",
                &ctx,
                b"W",
                b"all",
            ])
            .await
        else {
            panic!("a context")
        };
        let (_, values) = siblings(b.cmd(&[b"MERIDIAN.GET", b"s", b"R", b"3"]).await);
        assert_eq!(values, vec![bulk("merged")]);
        // Notfound: nil context, no values.
        assert_eq!(
            a.cmd(&[b"MERIDIAN.GET", b"absent"]).await,
            Frame::Array(vec![Frame::Null, Frame::Array(vec![])])
        );
        // Refusals are errors, never dropped connections.
        let e = error(a.cmd(&[b"INCRBYFLOAT", b"n", b"1.5"]).await);
        assert!(
            e.starts_with("ERR INCRBYFLOAT is not supported on eventual buckets: "),
            "{e}"
        );
        // INCR keeps a PN-counter: increments through both DCs add up.
        assert_eq!(a.cmd(&[b"INCR", b"n"]).await, Frame::Integer(1));
        assert_eq!(b.cmd(&[b"INCRBY", b"n", b"10"]).await, Frame::Integer(11));
        // A counter command replies the counter at its DC's coordinating replica, which may
        // not hold the other DC's increment yet (a busy host delays it): wait until it does
        // (INCRBY 0 reads it without writing).
        for _ in 0..200 {
            if a.cmd(&[b"INCRBY", b"n", b"0"]).await == Frame::Integer(11) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(a.cmd(&[b"DECR", b"n"]).await, Frame::Integer(10));
        for _ in 0..200 {
            if b.cmd(&[b"GET", b"n"]).await == bulk("10") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(b.cmd(&[b"GET", b"n"]).await, bulk("10"));
        let e = error(a.cmd(&[b"DECRBY", b"n", b"-9223372036854775808"]).await);
        assert_eq!(e, "ERR decrement would overflow");
        let e = error(a.cmd(&[b"INCRBY", b"n", b"9223372036854775807"]).await);
        assert_eq!(e, "ERR increment or decrement would overflow");
        assert_eq!(
            a.cmd(&[b"SET", b"text", b"abc"]).await,
            Frame::Simple("OK".into())
        );
        let e = error(a.cmd(&[b"INCR", b"text"]).await);
        assert_eq!(e, "ERR value is not an integer or out of range");
        // Hostile arguments get Redis's errors and change nothing.
        let e = error(a.cmd(&[b"INCRBY", b"n", b"1e3"]).await);
        assert_eq!(e, "ERR value is not an integer or out of range");
        let e = error(a.cmd(&[b"SET", b"n", b"1", b"EX", b"-5"]).await);
        assert_eq!(e, "ERR invalid expire time in 'set' command");
        let e = error(
            a.cmd(&[b"SET", b"n", b"1", b"PX", b"99999999999999999999"])
                .await,
        );
        assert_eq!(e, "ERR value is not an integer or out of range");
        let e = error(a.cmd(&[b"EXPIRE", b"n", b"9223372036854775807"]).await);
        assert_eq!(e, "ERR invalid expire time in 'expire' command");
        assert_eq!(b.cmd(&[b"GET", b"n"]).await, bulk("10"));
        let e = error(a.cmd(&[b"SET", b"k", b"v", b"NX"]).await);
        assert!(
            e.starts_with("ERR SET ... NX is not supported on eventual buckets: ")
                && e.contains("use a timeline bucket"),
            "{e}"
        );
        // Expiry is served: a TTL travels with the value to the other DC's replicas.
        assert_eq!(
            a.cmd(&[b"SET", b"ttl", b"v", b"EX", b"100"]).await,
            Frame::Simple("OK".into())
        );
        let Frame::Integer(ttl) = b.cmd(&[b"TTL", b"ttl"]).await else {
            panic!("an integer TTL")
        };
        assert!((1..=100).contains(&ttl), "{ttl}");
        assert_eq!(a.cmd(&[b"PERSIST", b"ttl"]).await, Frame::Integer(1));
        assert_eq!(a.cmd(&[b"TTL", b"ttl"]).await, Frame::Integer(-1));
        assert_eq!(a.cmd(&[b"PEXPIRE", b"ttl", b"0"]).await, Frame::Integer(1));
        assert_eq!(a.cmd(&[b"GET", b"ttl"]).await, Frame::Null);
        assert_eq!(a.cmd(&[b"TTL", b"ttl"]).await, Frame::Integer(-2));
        // Databases 0 to 15 (`cluster_keys::numbered_databases_...`), never a silent switch.
        assert_eq!(a.cmd(&[b"SELECT", b"0"]).await, Frame::Simple("OK".into()));
        let e = error(a.cmd(&[b"SELECT", b"16"]).await);
        assert_eq!(e, "ERR DB index is out of range");
        let e = error(a.cmd(&[b"MERIDIAN.GET", b"s", b"R", b"9"]).await);
        assert!(e.starts_with("ERR n_val_violation"), "{e}");
        let e = error(a.cmd(&[b"MERIDIAN.GET", b"s", b"W", b"1"]).await);
        assert!(e.contains("unknown option"), "{e}");
        assert_eq!(a.cmd(&[b"PING"]).await, Frame::Simple("PONG".into()));
        c.shutdown().await;
    }

    /// A plain HTTP/1.1 GET with `Connection: close`: the status code and the body.
    async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8(raw).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, body.to_owned())
    }

    /// The value of the sample named exactly `series` (name and labels) in `text`.
    fn sample(text: &str, series: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
            .parse()
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metrics_export_the_replication_layer() {
        let c = cluster().await;
        let mut a = connect(&c, 0).await;
        // With 4 nodes and n = 3 some of these keys have no replica on node 0, whose writes
        // it forwards to a primary (the layout and the hashing are deterministic).
        for i in 0..32 {
            let k = format!("key{i}");
            assert_eq!(
                a.cmd(&[b"SET", k.as_bytes(), b"v"]).await,
                Frame::Simple("OK".into())
            );
            assert_eq!(a.cmd(&[b"GET", k.as_bytes()]).await, bulk("v"));
        }
        let e = error(a.cmd(&[b"MERIDIAN.GET", b"key0", b"R", b"4"]).await);
        assert!(e.starts_with("ERR n_val_violation"), "{e}");
        let http = c.members[0].http.unwrap();
        let (status, body) = http_get(http, "/kv/key0?r=4").await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("N_VAL_VIOLATION"), "{body}");

        let (status, text) = http_get(http, "/metrics").await;
        assert_eq!(status, 200);
        assert!(text.ends_with("# EOF\n"), "{text}");
        for metric in [
            "meridian_read_repairs_total",
            "meridian_hinted_handoffs_total",
            "meridian_handoff_bytes_total",
            "meridian_forwarded_writes_total",
            "meridian_anti_entropy_exchanges_total",
            "meridian_anti_entropy_keys_repaired_total",
            "meridian_replication_errors_total",
        ] {
            assert!(
                text.contains(&format!("# TYPE {metric} counter\n")),
                "{metric}:\n{text}"
            );
        }
        for metric in [
            "meridian_hints_pending",
            "meridian_cluster_members",
            "meridian_cluster_member_up",
            "meridian_layout_epoch",
        ] {
            assert!(
                text.contains(&format!("# TYPE {metric} gauge\n")),
                "{metric}:\n{text}"
            );
        }
        assert!(
            sample(&text, "meridian_forwarded_writes_total") > 0,
            "{text}"
        );
        // Every replica took every write, so reads need no repair: these only have to parse.
        let _ = sample(&text, "meridian_read_repairs_total");
        let _ = sample(&text, "meridian_hints_pending");
        let _ = sample(&text, "meridian_layout_epoch");
        assert_eq!(
            sample(
                &text,
                "meridian_replication_errors_total{frontend=\"resp\",code=\"n_val_violation\"}"
            ),
            1
        );
        assert_eq!(
            sample(
                &text,
                "meridian_replication_errors_total{frontend=\"http\",code=\"n_val_violation\"}"
            ),
            1
        );
        assert_eq!(sample(&text, "meridian_cluster_members{status=\"up\"}"), 4);
        assert_eq!(
            sample(&text, "meridian_cluster_members{status=\"down\"}"),
            0
        );
        assert_eq!(
            sample(
                &text,
                "meridian_cluster_member_up{node=\"dc1-n1\",dc=\"1\"}"
            ),
            1
        );
        // The same text straight from the node's state.
        assert!(
            c.states[0]
                .render_metrics()
                .contains("meridian_forwarded_writes_total")
        );
        c.shutdown().await;
    }

    /// The multibulk encoding of one request.
    fn request(args: &[&[u8]]) -> Vec<u8> {
        Frame::Array(args.iter().map(|a| Frame::bulk(a.to_vec())).collect())
            .to_bytes(false)
            .to_vec()
    }

    /// The value of `series` in node `i`'s metrics.
    fn node_sample(c: &Embedded, i: usize, series: &str) -> u64 {
        sample(&c.states[i].render_metrics(), series)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_key_commands_answer_in_order_with_errors_in_their_slots() {
        let c = cluster().await;
        let mut a = connect(&c, 0).await;
        let ops = |op: &str| format!("meridian_ops_total{{frontend=\"resp\",op=\"{op}\"}}");
        let errors =
            |op: &str| format!("meridian_op_errors_total{{frontend=\"resp\",op=\"{op}\"}}");
        let (sets, gets) = (
            node_sample(&c, 0, &ops("set")),
            node_sample(&c, 0, &ops("get")),
        );
        let mut batch = Vec::new();
        for i in 0..200 {
            batch.extend(request(&[
                b"SET",
                format!("key{i}").as_bytes(),
                format!("value{i}").as_bytes(),
            ]));
        }
        // Failures of every kind between them: a refusal and a replication error (run
        // concurrently), an arity error, an unknown command and a PING (barriers).
        batch.extend(request(&[b"APPEND", b"key0", b"x"]));
        batch.extend(request(&[b"MERIDIAN.GET", b"key1", b"R", b"9"]));
        batch.extend(request(&[b"GET"]));
        batch.extend(request(&[b"NOSUCH", b"x"]));
        batch.extend(request(&[b"PING"]));
        for i in 0..200 {
            batch.extend(request(&[b"GET", format!("key{i}").as_bytes()]));
        }
        a.send(&batch).await;
        for i in 0..200 {
            assert_eq!(a.frame().await, Frame::Simple("OK".into()), "SET key{i}");
        }
        let e = error(a.frame().await);
        assert!(e.contains("APPEND is not supported"), "{e}");
        let e = error(a.frame().await);
        assert!(e.starts_with("ERR n_val_violation"), "{e}");
        let e = error(a.frame().await);
        assert!(e.contains("wrong number of arguments for 'get'"), "{e}");
        let e = error(a.frame().await);
        assert!(e.contains("unknown command 'NOSUCH'"), "{e}");
        assert_eq!(a.frame().await, Frame::Simple("PONG".into()));
        for i in 0..200 {
            assert_eq!(a.frame().await, bulk(&format!("value{i}")), "GET key{i}");
        }
        // Every command was counted once, under its own name.
        assert_eq!(node_sample(&c, 0, &ops("set")), sets + 200);
        assert_eq!(node_sample(&c, 0, &ops("get")), gets + 200);
        assert_eq!(node_sample(&c, 0, &errors("append")), 1);
        assert_eq!(node_sample(&c, 0, &errors("meridian.get")), 1);
        // The connection is still in step.
        assert_eq!(a.cmd(&[b"GET", b"key7"]).await, bulk("value7"));
        c.shutdown().await;
    }

    /// One-way latency between the DCs of [`wan_cluster`].
    const WAN: Duration = Duration::from_millis(50);

    /// 2 DCs × 2 nodes, `WAN` apart: with N = 3 every key has a replica in each DC, so a
    /// request that needs every replica waits at least one round trip (2 × `WAN`).
    async fn wan_cluster() -> Embedded {
        let cfg = EmbeddedConfig {
            dcs: 2,
            nodes_per_dc: 2,
            wan_latency: WAN,
            intra_dc: LinkConfig::ideal(),
            heartbeat: Duration::from_millis(100),
            buckets: [eventual_default()].into(),
            ..EmbeddedConfig::default()
        };
        crate::start_serving(cfg, Duration::from_secs(60))
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_commands_on_one_key_keep_their_order() {
        let c = wan_cluster().await;
        // Plain SET and GET read every replica and SET writes every replica: a GET running
        // beside the SET before it would finish its reads before the SET's write starts,
        // and answer nil.
        for m in &c.members {
            let (status, body) = http_put(
                m.http.unwrap(),
                "/buckets/default",
                r#"{"type":"eventual","r":"all","w":"all"}"#,
            )
            .await;
            assert_eq!(status, 200, "{body}");
        }
        let mut a = connect(&c, 0).await;
        let mut batch = Vec::new();
        for req in [
            &[&b"SET"[..], b"k", b"a"][..],
            &[b"GET", b"k"],
            &[b"SET", b"k", b"b"],
            &[b"GET", b"k"],
            &[b"MSET", b"j", b"c", b"k", b"d"],
            &[b"MGET", b"k", b"j"],
            &[b"DEL", b"j"],
            &[b"EXISTS", b"j", b"k"],
        ] {
            batch.extend(request(req));
        }
        a.send(&batch).await;
        assert_eq!(a.frame().await, Frame::Simple("OK".into()));
        assert_eq!(a.frame().await, bulk("a"));
        assert_eq!(a.frame().await, Frame::Simple("OK".into()));
        assert_eq!(a.frame().await, bulk("b"));
        assert_eq!(a.frame().await, Frame::Simple("OK".into()));
        assert_eq!(a.frame().await, Frame::Array(vec![bulk("d"), bulk("c")]));
        assert_eq!(a.frame().await, Frame::Integer(1));
        assert_eq!(a.frame().await, Frame::Integer(1));
        c.shutdown().await;
    }

    /// Sends `n` pipelined writes that each wait for every replica, in one write; returns
    /// how long all the replies took.
    async fn pipelined_remote_writes(a: &mut Raw, prefix: &str, n: usize) -> Duration {
        let mut batch = Vec::new();
        for i in 0..n {
            let key = format!("{prefix}{i}");
            batch.extend(request(&[
                b"MERIDIAN.PUT",
                key.as_bytes(),
                b"v",
                b"W",
                b"all",
            ]));
        }
        let t0 = std::time::Instant::now();
        a.send(&batch).await;
        for i in 0..n {
            let reply = a.frame().await;
            assert!(matches!(reply, Frame::Bulk(_)), "write {i}: {reply:?}");
        }
        t0.elapsed()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_writes_overlap_their_round_trips() {
        let c = wan_cluster().await;
        let mut a = connect(&c, 0).await;
        let round_trip = 2 * WAN;
        // One after another these cannot take less than 20 round trips (the emulator never
        // delivers early), so anything below that proves they overlapped; overlapped they
        // take about one or two, so a busy machine has a 10x margin.
        let took = pipelined_remote_writes(&mut a, "overlap", 20).await;
        assert!(took < 20 * round_trip, "20 pipelined writes took {took:?}");
        // Each write's latency counts from its own start: every one waited a round trip, so
        // none is in the histogram's buckets below it.
        let put = "frontend=\"resp\",op=\"meridian.put\"";
        assert_eq!(
            node_sample(&c, 0, &format!("meridian_ops_total{{{put}}}")),
            20
        );
        assert_eq!(
            node_sample(
                &c,
                0,
                &format!("meridian_op_latency_seconds_bucket{{{put},le=\"0.05\"}}")
            ),
            0
        );
        c.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_runs_a_bounded_number_of_commands_at_once() {
        let c = wan_cluster().await;
        let mut a = connect(&c, 0).await;
        // At most 64 run at once, and a command starts only when the oldest has finished:
        // 4 × 64 + 1 writes take at least 5 waves of a round trip each. Unbounded, they
        // would all overlap in one or two.
        let took = pipelined_remote_writes(&mut a, "bound", 4 * 64 + 1).await;
        assert!(
            took >= 5 * 2 * WAN - Duration::from_millis(20),
            "4 × 64 + 1 pipelined writes took only {took:?}"
        );
        c.shutdown().await;
    }

    #[tokio::test]
    async fn single_node_refuses_meridian_commands() {
        let s = Server::default().await;
        let mut c = s.connect().await;
        let e = error(c.cmd(&[b"MERIDIAN.GET", b"k"]).await);
        assert!(e.contains("needs cluster mode"), "{e}");
        for req in [
            &[&b"MERIDIAN.SET"[..], b"k", b"v"][..],
            &[b"TL.GETLATEST", b"k"],
            &[b"TL.GETCRIT", b"k", b"1.0.1"],
            &[b"TL.TAS", b"k", b"1.0.1", b"v"],
        ] {
            let e = error(c.cmd(req).await);
            assert!(e.contains("needs cluster mode"), "{req:?}: {e}");
        }
        s.stop().await;
    }

    /// Timeline buckets (`timeline.md`) over RESP, HTTP and `/metrics`, on the 2-DC × 2-node
    /// cluster with a timeline bucket `tl` configured at start.
    mod timeline {
        use super::*;
        use meridian_core::DcId;
        use meridian_net::wan::Scope;
        use meridian_replication::timeline::Version;
        use meridian_replication::{BucketProps, ReadMode};

        /// How long a timeline request waits for an unreachable master: short, so the
        /// partition test does not wait the default 10 s per request.
        const MASTER_TIMEOUT_MS: u64 = 1000;

        async fn tl_cluster() -> Embedded {
            let mut tl = BucketProps::timeline();
            tl.timeline.master_timeout_ms = MASTER_TIMEOUT_MS;
            let cfg = EmbeddedConfig {
                dcs: 2,
                nodes_per_dc: 2,
                wan_latency: Duration::ZERO,
                intra_dc: LinkConfig::ideal(),
                heartbeat: Duration::from_millis(100),
                buckets: [("tl".to_owned(), tl), eventual_default()].into(),
                ..EmbeddedConfig::default()
            };
            crate::start_serving(cfg, Duration::from_secs(60))
                .await
                .unwrap()
        }

        fn text(f: &Frame) -> Option<String> {
            match f {
                Frame::Bulk(b) => Some(String::from_utf8(b.to_vec()).unwrap()),
                Frame::Null => None,
                other => panic!("expected a bulk string or nil, got {other:?}"),
            }
        }

        /// `[value, version]` of a timeline read.
        fn read(f: Frame) -> (Option<String>, Option<Version>) {
            let Frame::Array(parts) = f else {
                panic!("expected [value, version], got {f:?}")
            };
            assert_eq!(parts.len(), 2, "{parts:?}");
            (
                text(&parts[0]),
                text(&parts[1]).map(|v| v.parse().expect("a version")),
            )
        }

        /// The version a timeline write replied.
        fn written(f: Frame) -> Version {
            text(&f)
                .unwrap_or_else(|| panic!("expected a version, got nil"))
                .parse()
                .unwrap()
        }

        fn newer(a: Version, b: Version) -> bool {
            a.precedence() > b.precedence()
        }

        /// Waits (bounded; not a timing assertion) until all N = 3 replicas of `key` hold
        /// version `ver`, so reads anywhere are deterministic.
        async fn wait_replicated(c: &Embedded, key: &[u8], ver: Version) {
            tokio::time::timeout(PATIENCE, async {
                loop {
                    let holding = (0..c.members.len())
                        .filter(|&i| {
                            c.node(i)
                                .tl_local(key)
                                .unwrap()
                                .is_some_and(|r| r.ver == ver)
                        })
                        .count();
                    if holding == 3 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{ver} never reached every replica"));
        }

        /// One HTTP/1.1 request with `Connection: close`: status, lowercased headers, body.
        async fn http(
            addr: SocketAddr,
            method: &str,
            path: &str,
            headers: &[(&str, &str)],
            body: &[u8],
        ) -> (u16, Vec<(String, String)>, Vec<u8>) {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let mut req = format!(
                "{method} {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\
                 Content-Length: {}\r\n",
                body.len()
            );
            for (k, v) in headers {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
            req.push_str("\r\n");
            let mut bytes = req.into_bytes();
            bytes.extend_from_slice(body);
            stream.write_all(&bytes).await.unwrap();
            let mut raw = Vec::new();
            tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
                .await
                .expect("a reply")
                .unwrap();
            let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let head = String::from_utf8(raw[..split].to_vec()).unwrap();
            let mut lines = head.split("\r\n");
            let status = lines
                .next()
                .unwrap()
                .split(' ')
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            (status, headers, raw[split + 4..].to_vec())
        }

        fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        }

        fn version_of(headers: &[(String, String)]) -> Version {
            header(headers, "x-meridian-version")
                .unwrap_or_else(|| panic!("no x-meridian-version in {headers:?}"))
                .parse()
                .unwrap()
        }

        fn json(body: &[u8]) -> serde_json::Value {
            serde_json::from_slice(body)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn resp_round_trip_with_versions_read_modes_and_test_and_set() {
            let c = tl_cluster().await;
            // a in DC 0, b in DC 1.
            let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
            assert_eq!(
                a.cmd(&[b"SET", b"tl:k", b"v1"]).await,
                Frame::Simple("OK".into())
            );
            // The master's version reflects the acknowledged write, from either DC.
            let (value, v1) = read(b.cmd(&[b"MERIDIAN.GET", b"tl:k", b"LATEST"]).await);
            assert_eq!(value.as_deref(), Some("v1"));
            let v1 = v1.expect("a live record has a version");
            assert_eq!(
                read(a.cmd(&[b"TL.GETLATEST", b"tl:k"]).await),
                (Some("v1".into()), Some(v1))
            );

            // Test-and-set: the expected version wins once; the stale one gets the current.
            let v1s = v1.to_string();
            let v2 = written(
                b.cmd(&[
                    b"MERIDIAN.SET",
                    b"tl:k",
                    b"v2",
                    b"IFVERSION",
                    v1s.as_bytes(),
                ])
                .await,
            );
            assert!(newer(v2, v1), "{v2} after {v1}");
            let e = error(
                a.cmd(&[
                    b"MERIDIAN.SET",
                    b"tl:k",
                    b"v3",
                    b"ifversion",
                    v1s.as_bytes(),
                ])
                .await,
            );
            assert_eq!(e, format!("CONFLICT version_mismatch current={v2}"));
            let e = error(a.cmd(&[b"TL.TAS", b"tl:k", v1s.as_bytes(), b"v3"]).await);
            assert_eq!(e, format!("CONFLICT version_mismatch current={v2}"));

            // read_critical(v2) answers v2 or newer from both DCs (here exactly v2).
            let v2s = v2.to_string();
            for conn in [&mut a, &mut b] {
                assert_eq!(
                    read(
                        conn.cmd(&[b"MERIDIAN.GET", b"tl:k", b"CRITICAL", v2s.as_bytes()])
                            .await
                    ),
                    (Some("v2".into()), Some(v2))
                );
                assert_eq!(
                    read(conn.cmd(&[b"TL.GETCRIT", b"tl:k", v2s.as_bytes()]).await),
                    (Some("v2".into()), Some(v2))
                );
            }
            let v3 = written(a.cmd(&[b"TL.TAS", b"tl:k", v2s.as_bytes(), b"v3"]).await);
            assert!(newer(v3, v2), "{v3} after {v2}");
            // A version the master never issued cannot be reached.
            let future = Version::new(v3.generation, v3.mepoch, v3.seq + 100).to_string();
            let e = error(b.cmd(&[b"TL.GETCRIT", b"tl:k", future.as_bytes()]).await);
            assert!(
                e.starts_with(&format!(
                    "UNAVAILABLE stale_version_unavailable required={future}"
                )),
                "{e}"
            );

            // Plain GET is read_any: possibly stale, so wait for v3 to reach every replica;
            // then both DCs read it locally.
            wait_replicated(&c, b"tl:k", v3).await;
            for conn in [&mut a, &mut b] {
                assert_eq!(conn.cmd(&[b"GET", b"tl:k"]).await, bulk("v3"));
                assert_eq!(
                    read(conn.cmd(&[b"MERIDIAN.GET", b"tl:k", b"ANY"]).await),
                    (Some("v3".into()), Some(v3))
                );
                assert_eq!(
                    read(conn.cmd(&[b"MERIDIAN.GET", b"tl:k"]).await),
                    (Some("v3".into()), Some(v3))
                );
            }
            assert_eq!(
                a.cmd(&[b"MGET", b"tl:k", b"tl:absent"]).await,
                Frame::Array(vec![bulk("v3"), Frame::Null])
            );
            assert_eq!(
                a.cmd(&[b"EXISTS", b"tl:k", b"tl:absent"]).await,
                Frame::Integer(1)
            );

            // Insert-if-absent: refused over a live record, in each command's own way.
            assert_eq!(a.cmd(&[b"SET", b"tl:k", b"x", b"NX"]).await, Frame::Null);
            assert_eq!(a.cmd(&[b"SETNX", b"tl:k", b"x"]).await, Frame::Integer(0));
            for req in [
                &[&b"MERIDIAN.SET"[..], b"tl:k", b"x", b"NX"][..],
                &[b"MERIDIAN.SET", b"tl:k", b"x", b"IFVERSION", b"NONE"],
                &[b"TL.TAS", b"tl:k", b"none", b"x"],
            ] {
                let e = error(b.cmd(req).await);
                assert_eq!(
                    e,
                    format!("CONFLICT already_exists current={v3}"),
                    "{req:?}"
                );
            }
            assert_eq!(
                read(a.cmd(&[b"TL.GETLATEST", b"tl:k"]).await),
                (Some("v3".into()), Some(v3)),
                "refused inserts change nothing"
            );
            assert_eq!(
                a.cmd(&[b"SET", b"tl:new", b"n", b"nx"]).await,
                Frame::Simple("OK".into())
            );
            assert_eq!(
                a.cmd(&[b"SETNX", b"tl:new2", b"n"]).await,
                Frame::Integer(1)
            );
            let n = written(b.cmd(&[b"TL.TAS", b"tl:new3", b"NONE", b"n"]).await);
            assert_eq!(
                read(b.cmd(&[b"TL.GETLATEST", b"tl:new3"]).await),
                (Some("n".into()), Some(n))
            );

            // DEL writes a tombstone, which has a version; deleting nothing writes nothing.
            assert_eq!(
                a.cmd(&[b"DEL", b"tl:k", b"tl:absent"]).await,
                Frame::Integer(1)
            );
            let (value, tomb) = read(b.cmd(&[b"TL.GETLATEST", b"tl:k"]).await);
            assert_eq!(value, None);
            let tomb = tomb.expect("a tombstone keeps a version");
            assert!(newer(tomb, v3), "{tomb} after {v3}");
            assert_eq!(a.cmd(&[b"DEL", b"tl:k"]).await, Frame::Integer(0));
            assert_eq!(a.cmd(&[b"MERIDIAN.DEL", b"tl:k"]).await, Frame::Null);
            assert_eq!(
                read(a.cmd(&[b"MERIDIAN.GET", b"tl:absent", b"LATEST"]).await),
                (None, None)
            );
            assert!(c.node(0).tl_local(b"tl:absent").unwrap().is_none());
            // A versioned delete.
            let e = error(
                a.cmd(&[b"MERIDIAN.DEL", b"tl:new3", b"IFVERSION", v1s.as_bytes()])
                    .await,
            );
            assert!(e.starts_with("CONFLICT version_mismatch current="), "{e}");
            let ns = n.to_string();
            let gone = written(
                a.cmd(&[b"MERIDIAN.DEL", b"tl:new3", b"IFVERSION", ns.as_bytes()])
                    .await,
            );
            assert_eq!(
                read(b.cmd(&[b"TL.GETLATEST", b"tl:new3"]).await),
                (None, Some(gone))
            );

            // Pipelined commands on one key keep their order (each waits for the one before).
            let mut batch = Vec::new();
            for req in [
                &[&b"SET"[..], b"tl:p", b"a"][..],
                &[b"MERIDIAN.GET", b"tl:p", b"LATEST"],
                &[b"MERIDIAN.SET", b"tl:p", b"b"],
                &[b"TL.GETLATEST", b"tl:p"],
                &[b"DEL", b"tl:p"],
                &[b"TL.GETLATEST", b"tl:p"],
                &[b"PING"],
            ] {
                batch.extend(request(req));
            }
            a.send(&batch).await;
            assert_eq!(a.frame().await, Frame::Simple("OK".into()));
            let (value, pa) = read(a.frame().await);
            assert_eq!(value.as_deref(), Some("a"));
            let pb = written(a.frame().await);
            assert!(newer(pb, pa.unwrap()));
            assert_eq!(read(a.frame().await), (Some("b".into()), Some(pb)));
            assert_eq!(a.frame().await, Frame::Integer(1));
            let (value, pdel) = read(a.frame().await);
            assert!(value.is_none() && newer(pdel.unwrap(), pb));
            assert_eq!(a.frame().await, Frame::Simple("PONG".into()));
            c.shutdown().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn wrong_bucket_types_and_malformed_versions_are_clear_errors() {
            let c = tl_cluster().await;
            let mut a = connect(&c, 0).await;
            assert_eq!(
                a.cmd(&[b"SET", b"tl:k", b"v"]).await,
                Frame::Simple("OK".into())
            );
            // Timeline commands on the (eventual) default bucket.
            for req in [
                &[&b"MERIDIAN.SET"[..], b"k", b"v"][..],
                &[b"MERIDIAN.SET", b"k", b"v", b"IFVERSION", b"1.0.1"],
                &[b"TL.GETLATEST", b"k"],
                &[b"TL.GETCRIT", b"k", b"1.0.1"],
                &[b"TL.TAS", b"k", b"1.0.1", b"v"],
                &[b"MERIDIAN.GET", b"k", b"LATEST"],
                &[b"MERIDIAN.GET", b"k", b"critical", b"1.0.1"],
            ] {
                let e = error(a.cmd(req).await);
                assert!(
                    e.starts_with("ERR wrong_bucket_type bucket=default is eventual"),
                    "{req:?}: {e}"
                );
            }
            // Eventual-only requests on the timeline bucket: a context or quorum option is
            // as much a wrong bucket type as a read mode on an eventual bucket.
            for req in [
                &[&b"MERIDIAN.PUT"[..], b"tl:k", b"v"][..],
                &[b"MERIDIAN.GET", b"tl:k", b"R", b"2"],
                &[b"MERIDIAN.DEL", b"tl:k", b"CONTEXT", b"00"],
            ] {
                let e = error(a.cmd(req).await);
                assert!(
                    e.starts_with("ERR wrong_bucket_type bucket=tl is timeline"),
                    "{req:?}: {e}"
                );
            }
            let e = error(a.cmd(&[b"MERIDIAN.PUT", b"tl:k", b"v"]).await);
            assert!(e.contains("MERIDIAN.SET"), "{e}");
            for req in [
                &[&b"MERIDIAN.GET"[..], b"tl:k", b"CRITICAL"][..],
                &[b"MERIDIAN.GET", b"tl:k", b"LATEST", b"ANY"],
                &[b"MERIDIAN.SET", b"tl:k", b"v", b"IFVERSION"],
                &[b"MERIDIAN.SET", b"tl:k", b"v", b"W", b"2"],
            ] {
                let e = error(a.cmd(req).await);
                assert!(e.starts_with("ERR syntax error"), "{req:?}: {e}");
            }
            // Every string command is served, its write a test-and-set at the master.
            assert_eq!(
                a.cmd(&[b"SET", b"tl:x", b"v", b"EX", b"10", b"GET"]).await,
                Frame::Null
            );
            let Frame::Integer(ttl) = a.cmd(&[b"TTL", b"tl:x"]).await else {
                panic!("an integer TTL")
            };
            assert!((1..=10).contains(&ttl), "{ttl}");
            assert_eq!(a.cmd(&[b"SET", b"tl:x", b"w", b"NX"]).await, Frame::Null);
            assert_eq!(a.cmd(&[b"INCR", b"tl:n"]).await, Frame::Integer(1));
            assert_eq!(
                a.cmd(&[b"INCRBY", b"tl:n", b"41"]).await,
                Frame::Integer(42)
            );
            let e = error(a.cmd(&[b"INCR", b"tl:x"]).await);
            assert_eq!(e, "ERR value is not an integer or out of range");
            let e = error(a.cmd(&[b"MSETNX", b"tl:y", b"1"]).await);
            assert!(
                e.starts_with("ERR MSETNX is not supported on timeline buckets: "),
                "{e}"
            );
            assert_eq!(a.cmd(&[b"GETDEL", b"tl:n"]).await, bulk("42"));
            assert_eq!(a.cmd(&[b"EXISTS", b"tl:n"]).await, Frame::Integer(0));
            // Malformed versions name the text and the expected form.
            for (req, want) in [
                (
                    &[&b"MERIDIAN.SET"[..], b"tl:k", b"v", b"IFVERSION", b"1.2"][..],
                    "ERR invalid version `1.2`: expected gen.mepoch.seq",
                ),
                (
                    &[b"TL.GETCRIT", b"tl:k", b"x.0.1"],
                    "ERR invalid version `x.0.1`: gen is not a decimal number",
                ),
                (
                    &[b"MERIDIAN.GET", b"tl:k", b"CRITICAL", b"1.99999999999.1"],
                    "ERR invalid version `1.99999999999.1`: mepoch exceeds",
                ),
                (
                    &[b"TL.TAS", b"tl:k", b"-1.0.1", b"v"],
                    "ERR invalid version `-1.0.1`: gen is not a decimal number",
                ),
            ] {
                let e = error(a.cmd(req).await);
                assert!(e.starts_with(want), "{req:?}: {e}");
            }
            // Nothing was written by the refused requests.
            let (value, _) = read(a.cmd(&[b"TL.GETLATEST", b"tl:k"]).await);
            assert_eq!(value.as_deref(), Some("v"));
            assert_eq!(a.cmd(&[b"PING"]).await, Frame::Simple("PONG".into()));

            // HTTP: the same refusals, as 400s with stable codes.
            let h = c.members[0].http.unwrap();
            for (method, path, headers, code) in [
                ("GET", "/kv/k?read=latest", &[][..], "WRONG_BUCKET_TYPE"),
                ("GET", "/kv/k?req_version=1.0.1", &[], "WRONG_BUCKET_TYPE"),
                (
                    "PUT",
                    "/kv/k",
                    &[("If-Match", "1.0.1")],
                    "WRONG_BUCKET_TYPE",
                ),
                (
                    "PUT",
                    "/kv/tl:k",
                    &[("X-Meridian-Context", "00")],
                    "WRONG_BUCKET_TYPE",
                ),
                (
                    "GET",
                    "/kv/tl:k?read=critical&version=abc",
                    &[],
                    "BAD_VERSION",
                ),
                ("GET", "/kv/tl:k?req_version=1.0", &[], "BAD_VERSION"),
                ("GET", "/kv/tl:k?read=critical", &[], "BAD_QUERY"),
                ("GET", "/kv/tl:k?r=2", &[], "WRONG_BUCKET_TYPE"),
                ("PUT", "/kv/tl:k?w=2", &[], "WRONG_BUCKET_TYPE"),
                ("GET", "/kv/tl:k?read=latest&r=2", &[], "BAD_QUERY"),
                ("PUT", "/kv/tl:k?w=2", &[("If-Match", "1.0.1")], "BAD_QUERY"),
                ("PUT", "/kv/tl:k", &[("If-Match", "abc")], "BAD_VERSION"),
                ("PUT", "/kv/tl:k", &[("If-Match", "*")], "BAD_PRECONDITION"),
                (
                    "DELETE",
                    "/kv/tl:k",
                    &[("If-None-Match", "1.0.1")],
                    "BAD_PRECONDITION",
                ),
            ] {
                let (status, _, body) = http(h, method, path, headers, b"x").await;
                assert_eq!(
                    status,
                    400,
                    "{method} {path}: {}",
                    String::from_utf8_lossy(&body)
                );
                assert_eq!(json(&body)["error"]["code"], code, "{method} {path}");
            }
            let (status, _, body) = http(h, "GET", "/kv/tl:k?read=latest", &[], b"").await;
            assert_eq!(status, 200);
            assert_eq!(body, b"v", "the refused writes changed nothing");

            // Each wrong_bucket_type answer was counted once, by front end.
            let count = |frontend: &str| {
                node_sample(
                    &c,
                    0,
                    &format!(
                        "meridian_replication_errors_total{{frontend=\"{frontend}\",\
                         code=\"wrong_bucket_type\"}}"
                    ),
                )
            };
            assert_eq!(count("resp"), 11);
            assert_eq!(count("http"), 6);
            c.shutdown().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn http_round_trip_with_preconditions_and_read_modes() {
            let c = tl_cluster().await;
            let (h, h2) = (c.members[0].http.unwrap(), c.members[3].http.unwrap());
            // Insert-if-absent, then refused with the current version.
            let (status, hd, _) =
                http(h, "PUT", "/kv/tl:h", &[("If-None-Match", "*")], b"one").await;
            assert_eq!(status, 204);
            let v1 = version_of(&hd);
            assert_eq!(header(&hd, "etag"), Some(format!("\"{v1}\"").as_str()));
            let (status, hd, body) =
                http(h2, "PUT", "/kv/tl:h", &[("If-None-Match", "*")], b"two").await;
            assert_eq!(status, 412);
            assert_eq!(version_of(&hd), v1);
            let j = json(&body);
            assert_eq!(j["error"]["code"], "ALREADY_EXISTS");
            assert_eq!(j["code"], "already_exists");
            assert_eq!(j["current"], v1.to_string());

            // read=latest from the other DC: the value, its version and its master.
            let (status, hd, body) = http(h2, "GET", "/kv/tl:h?read=latest", &[], b"").await;
            assert_eq!(status, 200);
            assert_eq!(body, b"one");
            assert_eq!(version_of(&hd), v1);
            let master = header(&hd, "x-meridian-master").expect("the master");
            assert!(
                master.starts_with('n') && master.contains("@dc"),
                "{master}"
            );

            // If-Match: a test-and-set; a stale version is 412 with the current one.
            let v1s = v1.to_string();
            let (status, hd, _) = http(h, "PUT", "/kv/tl:h", &[("If-Match", &v1s)], b"two").await;
            assert_eq!(status, 204);
            let v2 = version_of(&hd);
            assert!(newer(v2, v1));
            let (status, hd, body) =
                http(h2, "PUT", "/kv/tl:h", &[("If-Match", &v1s)], b"lost").await;
            assert_eq!(status, 412);
            assert_eq!(version_of(&hd), v2);
            let j = json(&body);
            assert_eq!(j["error"]["code"], "VERSION_MISMATCH");
            assert_eq!(j["current"], v2.to_string());
            // The ETag form of the version works too.
            let etag = format!("\"{v2}\"");
            let (status, hd, _) =
                http(h2, "PUT", "/kv/tl:h", &[("If-Match", &etag)], b"three").await;
            assert_eq!(status, 204);
            let v3 = version_of(&hd);
            assert!(newer(v3, v2));

            // Every read mode, in both spellings.
            let v3s = v3.to_string();
            for (addr, path) in [
                (h, "/kv/tl:h?req_version=latest".to_owned()),
                (h2, format!("/kv/tl:h?read=critical&version={v3s}")),
                (h, format!("/kv/tl:h?req_version={v3s}")),
                (h2, format!("/kv/tl:h?version={v3s}")),
            ] {
                let (status, hd, body) = http(addr, "GET", &path, &[], b"").await;
                assert_eq!(status, 200, "{path}");
                assert_eq!(
                    (body.as_slice(), version_of(&hd)),
                    (&b"three"[..], v3),
                    "{path}"
                );
            }
            wait_replicated(&c, b"tl:h", v3).await;
            for (addr, path) in [
                (h, "/kv/tl:h"),
                (h2, "/kv/tl:h?read=any"),
                (h2, "/kv/tl:h?req_version=any"),
            ] {
                let (status, hd, body) = http(addr, "GET", path, &[], b"").await;
                assert_eq!(status, 200, "{path}");
                assert_eq!(
                    (body.as_slice(), version_of(&hd)),
                    (&b"three"[..], v3),
                    "{path}"
                );
            }

            // DELETE: a tombstone write with its own version; If-Match guards it too.
            let (status, _, body) = http(h, "DELETE", "/kv/tl:h", &[("If-Match", &v1s)], b"").await;
            assert_eq!(status, 412, "{}", String::from_utf8_lossy(&body));
            let (status, hd, _) = http(h, "DELETE", "/kv/tl:h", &[], b"").await;
            assert_eq!(status, 204);
            let tomb = version_of(&hd);
            assert!(newer(tomb, v3));
            let (status, hd, body) = http(h2, "GET", "/kv/tl:h?read=latest", &[], b"").await;
            assert_eq!(status, 404);
            assert_eq!(version_of(&hd), tomb);
            assert_eq!(json(&body)["version"], tomb.to_string());
            let (status, _, _) = http(h, "DELETE", "/kv/tl:h", &[], b"").await;
            assert_eq!(status, 404, "nothing left to delete");
            // A tombstone counts as absent for an insert, which starts a new generation.
            let (status, hd, _) =
                http(h2, "PUT", "/kv/tl:h", &[("If-None-Match", "*")], b"again").await;
            assert_eq!(status, 204);
            let again = version_of(&hd);
            assert!(again.generation > tomb.generation, "{again} after {tomb}");
            c.shutdown().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn metrics_export_the_timeline_counters() {
            let c = tl_cluster().await;
            let mut a = connect(&c, 0).await;
            for i in 0..5 {
                let k = format!("tl:m{i}");
                assert_eq!(
                    a.cmd(&[b"SET", k.as_bytes(), b"v"]).await,
                    Frame::Simple("OK".into())
                );
                let (value, _) = read(a.cmd(&[b"TL.GETLATEST", k.as_bytes()]).await);
                assert_eq!(value.as_deref(), Some("v"));
            }
            let (status, text) = http_get(c.members[0].http.unwrap(), "/metrics").await;
            assert_eq!(status, 200);
            for metric in [
                "meridian_timeline_wrong_master_total",
                "meridian_timeline_master_migrations_total",
                "meridian_timeline_forks_total",
                "meridian_timeline_fenced_total",
                "meridian_timeline_caught_up_total",
                "meridian_timeline_remote_ops_total",
                "meridian_timeline_local_ops_total",
            ] {
                assert!(
                    text.contains(&format!("# TYPE {metric} counter\n")),
                    "{metric}:\n{text}"
                );
            }
            assert!(
                text.contains("# TYPE meridian_timeline_replication_lag_records gauge\n"),
                "{text}"
            );
            // Node 0 coordinated exactly 5 writes and 5 reads, each local or remote.
            let ops = |op: &str| {
                sample(
                    &text,
                    &format!("meridian_timeline_local_ops_total{{op=\"{op}\"}}"),
                ) + sample(
                    &text,
                    &format!("meridian_timeline_remote_ops_total{{op=\"{op}\"}}"),
                )
            };
            assert_eq!(ops("write"), 5);
            assert_eq!(ops("read"), 5);
            assert_eq!(sample(&text, "meridian_timeline_forks_total"), 0);
            assert_eq!(sample(&text, "meridian_timeline_fenced_total"), 0);
            // The lag gauge has a series per DC (values depend on propagation timing).
            for dc in 0..2 {
                let _ = sample(
                    &text,
                    &format!("meridian_timeline_replication_lag_records{{dc=\"{dc}\"}}"),
                );
            }
            c.shutdown().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn force_master_over_http_moves_the_mastership() {
            let c = tl_cluster().await;
            let h = c.members[0].http.unwrap();
            let mut a = connect(&c, 0).await;
            let v1 = written(a.cmd(&[b"MERIDIAN.SET", b"tl:fm", b"kept"]).await);
            let before = c
                .node(0)
                .tl_get(b"tl:fm", ReadMode::Latest)
                .await
                .unwrap()
                .record
                .unwrap();
            assert_eq!(before.ver, v1);
            // Move it to the other DC, once every replica holds the record (so the new
            // master loses nothing and the test is deterministic).
            let target = 1 - before.master.dc.0;
            wait_replicated(&c, b"tl:fm", v1).await;
            let body = format!(r#"{{"bucket":"tl","key":"fm","dc":"dc{target}"}}"#);
            let (status, _, reply) =
                http(h, "POST", "/timeline/force-master", &[], body.as_bytes()).await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
            let j = json(&reply);
            assert_eq!(j["key"], "tl:fm");
            assert_eq!(j["master"]["dc"], format!("dc{target}"));
            assert!(
                j["warning"]
                    .as_str()
                    .unwrap()
                    .contains("lose acknowledged writes"),
                "{j}"
            );
            let forced: Version = j["version"].as_str().unwrap().parse().unwrap();
            assert_eq!(forced.mepoch, v1.mepoch + 1, "a new master epoch");
            assert!(newer(forced, v1));
            wait_replicated(&c, b"tl:fm", forced).await;
            for i in 0..c.members.len() {
                if let Some(r) = c.node(i).tl_local(b"tl:fm").unwrap() {
                    assert_eq!(r.master.dc, DcId(target), "node {i} follows the new master");
                }
            }
            // The value survived; writes go on in the new epoch.
            let mut b = connect(&c, 3).await;
            assert_eq!(
                read(b.cmd(&[b"TL.GETLATEST", b"tl:fm"]).await),
                (Some("kept".into()), Some(forced))
            );
            let v2 = written(b.cmd(&[b"MERIDIAN.SET", b"tl:fm", b"after"]).await);
            assert!(newer(v2, forced) && v2.mepoch == forced.mepoch, "{v2}");
            // The DC may also be given by its id, and the key as a full key (no `bucket`).
            let (status, _, reply) = http(
                h,
                "POST",
                "/timeline/force-master",
                &[],
                format!(r#"{{"key":"tl:fm","dc":{target}}}"#).as_bytes(),
            )
            .await;
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
            // Refusals.
            for (body, code) in [
                (
                    r#"{"bucket":"tl","key":"fm","dc":"dc9"}"#,
                    "BAD_FORCE_MASTER",
                ),
                (r#"{"bucket":"tl","key":"fm"}"#, "BAD_FORCE_MASTER"),
                (r#"{"key":"plain","dc":"dc0"}"#, "WRONG_BUCKET_TYPE"),
                (
                    r#"{"bucket":"tl","key":"never-written","dc":"dc0"}"#,
                    "FORCE_MASTER_REFUSED",
                ),
            ] {
                let (status, _, reply) =
                    http(h, "POST", "/timeline/force-master", &[], body.as_bytes()).await;
                assert_eq!(status, 400, "{body}: {}", String::from_utf8_lossy(&reply));
                assert_eq!(json(&reply)["error"]["code"], code, "{body}");
            }
            c.shutdown().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn an_unreachable_master_fails_writes_clearly_while_read_any_works() {
            let c = tl_cluster().await;
            let mut b = connect(&c, 2).await;
            // A key whose master is in DC 1 (inserted from DC 1; the insert arbiter, which
            // becomes the master, is in either DC depending on the key).
            let mut found = None;
            for i in 0..64 {
                let key = format!("tl:mu{i}");
                let v = written(b.cmd(&[b"MERIDIAN.SET", key.as_bytes(), b"before"]).await);
                let r = c
                    .node(2)
                    .tl_get(key.as_bytes(), ReadMode::Latest)
                    .await
                    .unwrap()
                    .record
                    .unwrap();
                if r.master.dc == DcId(1) {
                    found = Some((key, v, r.master.node));
                    break;
                }
            }
            let (key, v1, master) = found.expect("some key is mastered in DC 1");
            wait_replicated(&c, key.as_bytes(), v1).await;

            c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
            let mut a = connect(&c, 0).await;
            let e = error(a.cmd(&[b"SET", key.as_bytes(), b"during"]).await);
            assert!(
                e.starts_with(&format!(
                    "UNAVAILABLE master_unavailable dc=dc1 node={master} key={key}"
                )),
                "{e}"
            );
            let e = error(a.cmd(&[b"MERIDIAN.GET", key.as_bytes(), b"LATEST"]).await);
            assert!(
                e.starts_with("UNAVAILABLE master_unavailable dc=dc1"),
                "{e}"
            );
            let (status, _, body) = http(
                c.members[0].http.unwrap(),
                "PUT",
                &format!("/kv/{key}"),
                &[],
                b"during",
            )
            .await;
            assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
            let j = json(&body);
            assert_eq!(j["code"], "master_unavailable");
            assert_eq!(j["key"], key);
            assert_eq!(j["master"], master.to_string());
            assert_eq!(j["dc"], "dc1");
            assert_eq!(j["error"]["code"], "MASTER_UNAVAILABLE");
            // A plain GET reads at the master, as on Redis Cluster: unavailable too.
            let e = error(a.cmd(&[b"GET", key.as_bytes()]).await);
            assert!(e.starts_with("UNAVAILABLE master_unavailable"), "{e}");
            // read_any and a satisfiable read_critical still work in the cut-off DC.
            assert_eq!(
                read(a.cmd(&[b"MERIDIAN.GET", key.as_bytes(), b"ANY"]).await),
                (Some("before".into()), Some(v1))
            );
            let v1s = v1.to_string();
            assert_eq!(
                read(
                    a.cmd(&[b"TL.GETCRIT", key.as_bytes(), v1s.as_bytes()])
                        .await
                ),
                (Some("before".into()), Some(v1))
            );
            // Healed, writes from DC 0 reach the master again (bounded retries while the
            // failure detectors notice).
            c.wan.heal_all();
            let v2 = tokio::time::timeout(PATIENCE, async {
                loop {
                    match a.cmd(&[b"MERIDIAN.SET", key.as_bytes(), b"after"]).await {
                        f @ Frame::Bulk(_) => return written(f),
                        Frame::Error(e) => assert!(e.starts_with(b"UNAVAILABLE"), "{e:?}"),
                        other => panic!("{other:?}"),
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .expect("writes work again after the heal");
            assert!(newer(v2, v1));
            assert_eq!(
                read(a.cmd(&[b"TL.GETLATEST", key.as_bytes()]).await),
                (Some("after".into()), Some(v2))
            );
            c.shutdown().await;
        }
    }
}

#[path = "resp/cluster_slots.rs"]
mod cluster_slots;

#[path = "resp/cluster_txn.rs"]
mod cluster_txn;

#[path = "resp/timeline_groups.rs"]
mod timeline_groups;

#[path = "resp/key_moves.rs"]
mod key_moves;

#[path = "resp/transactions.rs"]
mod transactions;

#[path = "resp/balance.rs"]
mod balance;

#[path = "resp/listener_attacks.rs"]
mod listener_attacks;

#[path = "resp/admin_attacks.rs"]
mod admin_attacks;

#[path = "resp/memory.rs"]
mod memory;

#[path = "resp/objects.rs"]
mod objects;

#[path = "resp/s3_endpoint.rs"]
mod s3_endpoint;

#[path = "resp/blob_resp.rs"]
mod blob_resp;

#[path = "resp/http_blob.rs"]
mod http_blob;

#[path = "resp/blob_handoff.rs"]
mod blob_handoff;

#[path = "resp/disk_full.rs"]
mod disk_full;

#[path = "resp/repart.rs"]
mod repart;

#[path = "resp/hashes.rs"]
mod hashes;

#[path = "resp/cluster_keys.rs"]
mod cluster_keys;

#[path = "resp/cluster_maxmemory.rs"]
mod cluster_maxmemory;

#[path = "resp/cluster_tls.rs"]
mod cluster_tls;
#[path = "resp/context_attacks.rs"]
mod context_attacks;
#[path = "resp/frontend_auth.rs"]
mod frontend_auth;
#[path = "resp/tls.rs"]
mod tls;

#[path = "resp/collections.rs"]
mod collections;

#[path = "resp/pubsub.rs"]
mod pubsub;

#[path = "resp/tracking.rs"]
mod tracking;

#[path = "resp/scripting.rs"]
mod scripting;

#[path = "resp/streams.rs"]
mod streams;

#[path = "resp/acl.rs"]
mod acl;
