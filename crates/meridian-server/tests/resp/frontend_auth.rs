//! Attacks on the client front ends before and around authentication (issue 36, items 6
//! and 7): huge RESP headers before `AUTH`, an HTTP body sent without the bearer, guessing
//! the password over and over, reading it back with `CONFIG GET`, and admin changes on a node
//! without a password that listens beyond loopback. No test asserts how long anything
//! takes; waits are bounded by generous timeouts only.

use super::s3_endpoint::read_response;
use super::*;
use meridian_server::NodeConfig;
use meridian_server::auth::MAX_FAILURES;

const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";

fn auth_failures(metrics: &Metrics, frontend: Frontend) -> u64 {
    metrics
        .connections(frontend)
        .auth_failures
        .load(Ordering::Relaxed)
}

async fn with_password() -> Server {
    Server::start(RespConfig {
        requirepass: Some("s3cret".into()),
        ..RespConfig::default()
    })
    .await
}

/// Attack: `*100000` and `$67108864` headers before AUTH, to make the node reserve memory
/// for a request nobody authenticated. Redis's errors (CVE-2021-32675), then the close.
#[tokio::test]
async fn huge_headers_before_auth_get_redis_errors_and_close() {
    let s = with_password().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"*100000\r\n",
        b"-ERR Protocol error: unauthenticated multibulk length\r\n",
    )
    .await;
    c.expect_eof().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"*1\r\n$67108864\r\n",
        b"-ERR Protocol error: unauthenticated bulk length\r\n",
    )
    .await;
    c.expect_eof().await;
    // After AUTH, the normal limits apply on the same kind of connection.
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH s3cret\r\n", b"+OK\r\n").await;
    let big = vec![b'v'; 20_000];
    assert_eq!(c.cmd(&[b"SET", b"k", &big]).await, Frame::simple("OK"));
    s.stop().await;
}

/// Attack: guess the password over one connection, pipelined. Every guess gets Redis's
/// WRONGPASS and is counted; after `MAX_FAILURES` the connection is closed, so the guess
/// pipelined after them never runs (it is the right password: it would answer +OK).
#[tokio::test]
async fn repeated_auth_failures_are_counted_and_close_the_connection() {
    let s = with_password().await;
    let mut c = s.connect().await;
    let mut pipeline = b"AUTH wrong\r\n".repeat(MAX_FAILURES as usize - 1);
    pipeline.extend_from_slice(b"HELLO 3 AUTH default wrong\r\nAUTH s3cret\r\n");
    c.send(&pipeline).await;
    c.expect(&WRONGPASS.repeat(MAX_FAILURES as usize)).await;
    c.expect_eof().await;
    assert_eq!(
        auth_failures(&s.metrics, Frontend::Resp),
        u64::from(MAX_FAILURES)
    );
    // A fresh connection starts over, and the right password still works.
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH nope\r\n", WRONGPASS).await;
    c.roundtrip(b"AUTH s3cret\r\n", b"+OK\r\n").await;
    assert_eq!(
        auth_failures(&s.metrics, Frontend::Resp),
        u64::from(MAX_FAILURES) + 1
    );
    s.stop().await;
}

/// Attack: an authenticated client (or a leaked read-only session) reads the password, which
/// is also the HTTP admin bearer, with CONFIG GET.
#[tokio::test]
async fn config_get_never_returns_the_password() {
    let s = with_password().await;
    let mut c = s.connect().await;
    c.roundtrip(b"AUTH s3cret\r\n", b"+OK\r\n").await;
    for pattern in ["requirepass", "*pass*", "*"] {
        let reply = c.cmd(&[b"CONFIG", b"GET", pattern.as_bytes()]).await;
        let text = format!("{reply:?}");
        assert!(!text.contains("s3cret"), "{pattern}: {text}");
    }
    c.roundtrip(
        b"CONFIG GET requirepass\r\n",
        b"*2\r\n$11\r\nrequirepass\r\n$10\r\n<redacted>\r\n",
    )
    .await;
    s.stop().await;
    // Without a password, the value is empty, as Redis answers.
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"CONFIG GET requirepass\r\n",
        b"*2\r\n$11\r\nrequirepass\r\n$0\r\n\r\n",
    )
    .await;
    s.stop().await;
}

/// A whole node with its HTTP API on `http`, and maybe a password.
async fn start_node(http: &str, requirepass: Option<&str>) -> (RunningNode, SocketAddr) {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = http.parse().unwrap();
    config.resp.requirepass = requirepass.map(Into::into);
    let node = RunningNode::start(config).await;
    // A wildcard listener is reached through loopback.
    let http = SocketAddr::from(([127, 0, 0, 1], node.http.port()));
    (node, http)
}

/// Attack: `PUT /kv` (and `POST /txn`) announcing a large body, without the bearer, to make
/// the node buffer it before it checks the password. The 401 arrives while the client has
/// sent only the head and 1 KiB of the body: the body was never waited for.
#[tokio::test]
async fn unauthenticated_bodies_are_refused_before_they_are_read() {
    let (node, http) = start_node("127.0.0.1:0", Some("s3cret")).await;
    for (method, path) in [("PUT", "/kv/k"), ("POST", "/txn")] {
        let mut s = TcpStream::connect(http).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
            16 << 20
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&[b'x'; 1024]).await.unwrap();
        // The other 16 MiB are never sent: a server that reads the body first never answers.
        let r = read_response(&mut s, false).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text());
        assert!(r.text().contains("UNAUTHORIZED"), "{}", r.text());
    }
    assert_eq!(auth_failures(&node.state.metrics, Frontend::Http), 2);
    node.stop().await;
}

/// Attack: guess the bearer over one keep-alive connection. Each guess is a 401 and is
/// counted; the `MAX_FAILURES`-th is answered with `connection: close` and the connection
/// ends.
#[tokio::test]
async fn repeated_bearer_failures_are_counted_and_close_the_connection() {
    let (node, http) = start_node("127.0.0.1:0", Some("s3cret")).await;
    let mut s = TcpStream::connect(http).await.unwrap();
    let guess = b"GET /kv/k HTTP/1.1\r\nhost: x\r\nauthorization: Bearer s3creT\r\n\r\n";
    for i in 1..=MAX_FAILURES {
        s.write_all(guess).await.unwrap();
        let r = read_response(&mut s, false).await;
        assert_eq!(r.status, 401, "guess {i}: {}", r.text());
        let closing = r.header("connection") == Some("close");
        assert_eq!(closing, i == MAX_FAILURES, "guess {i}: {:?}", r.headers);
    }
    let mut rest = Vec::new();
    let eof = tokio::time::timeout(PATIENCE, s.read_to_end(&mut rest)).await;
    assert!(matches!(eof, Ok(Ok(0)) | Ok(Err(_))), "{eof:?} {rest:?}");
    assert_eq!(
        auth_failures(&node.state.metrics, Frontend::Http),
        u64::from(MAX_FAILURES)
    );
    let (status, metrics) = request(http, "GET", "/metrics", None).await;
    assert_eq!(status, 200);
    let line = format!("meridian_auth_failures_total{{frontend=\"http\"}} {MAX_FAILURES}\n");
    assert!(metrics.contains(&line), "{metrics}");
    // The right bearer is still served on a new connection.
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(b"GET /kv/k HTTP/1.1\r\nhost: x\r\nauthorization: Bearer s3cret\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut s, false).await.status, 404);
    node.stop().await;
}

/// One request on a fresh connection: the status and the body.
async fn request(
    http: SocketAddr,
    method: &str,
    path: &str,
    bearer: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect(http).await.unwrap();
    let auth = bearer.map_or(String::new(), |b| format!("authorization: Bearer {b}\r\n"));
    let body = "{}";
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\n{auth}content-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let r = read_response(&mut s, false).await;
    (r.status, r.text())
}

const ADMIN: [(&str, &str); 6] = [
    ("PUT", "/wan"),
    ("POST", "/cluster/members"),
    ("DELETE", "/cluster/members/3"),
    ("PUT", "/buckets/b"),
    ("POST", "/buckets/b/truncate"),
    ("POST", "/timeline/force-master"),
];

/// Attack: a node without a password listening on every interface (`0.0.0.0`) takes admin
/// changes from anyone: they are refused with 403 naming `requirepass`. The same node still
/// serves `/kv` and `/health`.
#[tokio::test]
async fn admin_routes_beyond_loopback_need_a_password() {
    let (node, http) = start_node("0.0.0.0:0", None).await;
    for (method, path) in ADMIN {
        let (status, body) = request(http, method, path, None).await;
        assert_eq!(status, 403, "{method} {path}: {body}");
        assert!(body.contains("ADMIN_NEEDS_PASSWORD"), "{body}");
        assert!(body.contains("requirepass"), "{body}");
    }
    assert_eq!(request(http, "GET", "/health", None).await.0, 200);
    assert_eq!(request(http, "GET", "/kv/missing", None).await.0, 404);
    node.stop().await;

    // With a password, the bearer opens them (this single node then says it is no cluster).
    let (node, http) = start_node("0.0.0.0:0", Some("s3cret")).await;
    for (method, path) in ADMIN {
        assert_eq!(
            request(http, method, path, None).await.0,
            401,
            "{method} {path}"
        );
        let (status, body) = request(http, method, path, Some("s3cret")).await;
        assert!(
            status != 401 && status != 403,
            "{method} {path}: {status} {body}"
        );
    }
    node.stop().await;

    // On loopback without a password they stay open, as local tools rely on.
    let (node, http) = start_node("127.0.0.1:0", None).await;
    for (method, path) in ADMIN {
        let (status, body) = request(http, method, path, None).await;
        assert!(
            status != 401 && status != 403,
            "{method} {path}: {status} {body}"
        );
    }
    node.stop().await;
}

/// One request with `authorization: {auth}` (none when empty): the status and the body.
async fn request_as(http: SocketAddr, method: &str, path: &str, auth: &str) -> (u16, String) {
    let mut s = TcpStream::connect(http).await.unwrap();
    let auth = if auth.is_empty() {
        String::new()
    } else {
        format!("authorization: {auth}\r\n")
    };
    let req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\n{auth}content-length: 1\r\n\r\nv");
    s.write_all(req.as_bytes()).await.unwrap();
    let r = read_response(&mut s, false).await;
    (r.status, r.text())
}

fn basic(user: &str, pass: &str) -> String {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
    format!("Basic {token}")
}

/// The HTTP API checks the node's ACL users as RESP does: `Basic` credentials name a user,
/// each route counts as a Redis command (`/kv` as GET/SET/DEL of its key, admin changes as
/// CONFIG SET, other reads as INFO), refusals are 403 with Redis's NOPERM text, and an `ACL
/// SETUSER` over RESP applies to the next HTTP request.
#[tokio::test]
async fn http_requests_act_as_acl_users() {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    config.resp.requirepass = Some("s3cret".into());
    config.resp.users = vec!["user app on >apppass ~app:* +@read +@write".into()];
    let node = RunningNode::start(config).await;
    let http = node.http;
    let app = basic("app", "apppass");
    assert_eq!(request_as(http, "PUT", "/kv/app:1", &app).await.0, 204);
    assert_eq!(request_as(http, "GET", "/kv/app:1", &app).await.0, 200);
    let (status, body) = request_as(http, "GET", "/kv/other", &app).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("NOPERM this user has no permissions to access one of the keys"),
        "{body}"
    );
    let (status, body) = request_as(http, "PUT", "/wan", &app).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("'config|set' command"), "{body}");
    let (status, body) = request_as(http, "GET", "/status", &app).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("'info' command"), "{body}");
    // Wrong passwords and unknown users are 401, counted like a wrong bearer.
    assert_eq!(
        request_as(http, "GET", "/kv/app:1", &basic("app", "nope"))
            .await
            .0,
        401
    );
    assert_eq!(
        request_as(http, "GET", "/kv/app:1", &basic("ghost", "x"))
            .await
            .0,
        401
    );
    assert_eq!(request_as(http, "GET", "/kv/app:1", "").await.0, 401);
    // The default user, by bearer or by name, keeps every permission.
    assert_eq!(
        request_as(http, "GET", "/kv/other", "Bearer s3cret")
            .await
            .0,
        404
    );
    let default = basic("default", "s3cret");
    assert_eq!(request_as(http, "GET", "/status", &default).await.0, 200);
    // One registry: widen the user over RESP, and HTTP follows at once.
    let mut c = TcpStream::connect(node.resp).await.unwrap();
    c.write_all(b"AUTH s3cret\r\nACL SETUSER app ~*\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 10 {
        let mut buf = [0u8; 64];
        let n = c.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed after {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"+OK\r\n+OK\r\n");
    assert_eq!(request_as(http, "GET", "/kv/other", &app).await.0, 404);
    node.stop().await;
}
