//! Large objects over the HTTP API (`src/http_blob.rs`, `/b/{bucket}/{key}`) end to end: a
//! whole node (`NodeState::open`, `Listeners::bind`, `node::run`, port 0) or an embedded
//! 2-DC × 2-node cluster, driven by a tiny HTTP/1.1 client written here over `TcpStream`.
//!
//! Covered: round trips of objects around the chunk size and inline threshold (64 KiB) with
//! their `ETag` and `Content-Digest: blake3`; seeded random ranges equal to slices, 416 with
//! `Content-Range: bytes */SIZE`; `Content-Digest` checked before commit (a mismatch leaves
//! the old object), malformed ones refused; a body cut short commits nothing; names and
//! `requirepass`; uploads past the `/kv` body limit; admission control's 503; an object put
//! through the service's S3 key space read here; and an object put on one DC read on the
//! other. No test asserts how long anything takes: waits poll, bounded by generous timeouts.

use super::s3_endpoint::{Response, fill, read_response};
use base64::Engine;
use bytes::Bytes;
use meridian_blob::ObjectMeta;
use meridian_blob::digest::{hex, md5};
use meridian_s3::{ChecksumAlgorithm, Checksummer};
use meridian_server::cluster::{Embedded, EmbeddedConfig, start_embedded};
use meridian_server::objects::{BlobConfig, ByteStream};
use meridian_server::{Listeners, NodeConfig, NodeState};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// Only a guard against hangs; no test asserts how long anything takes.
const PATIENCE: Duration = Duration::from_secs(30);

/// The chunk size (and inline threshold) of the test nodes.
const CS: usize = 64 << 10;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn blake3_digest(body: &[u8]) -> String {
    format!("blake3=:{}:", b64(blake3::hash(body).as_bytes()))
}

fn sha256(body: &[u8]) -> Vec<u8> {
    let mut h = Checksummer::new(ChecksumAlgorithm::Sha256);
    h.update(body);
    h.finalize()
}

fn quoted_md5(body: &[u8]) -> String {
    format!("\"{}\"", hex(&md5(body)))
}

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// The API's JSON answers, on the raw client's responses.
trait ApiResponse {
    fn json(&self) -> serde_json::Value;
    fn error(&self, status: u16, code: &str) -> &Self;
}

impl ApiResponse for Response {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: not JSON: {}", self.text()))
    }

    /// Asserts the API's JSON error with this status and code.
    #[track_caller]
    fn error(&self, status: u16, code: &str) -> &Self {
        assert_eq!(self.status, status, "{:?}: {}", self.headers, self.text());
        assert_eq!(self.json()["error"]["code"], code, "{}", self.text());
        self
    }
}

/// Polls `f` until it returns `Some`, within `PATIENCE`.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(v) = f().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never happened: {what}"))
}

/// The HTTP client: one connection per request (`connection: close`), optionally with a
/// bearer token.
#[derive(Clone, Debug)]
struct Client {
    addr: SocketAddr,
    bearer: Option<String>,
}

impl Client {
    fn new(addr: SocketAddr) -> Client {
        Client { addr, bearer: None }
    }

    fn with_bearer(&self, pass: &str) -> Client {
        Client {
            addr: self.addr,
            bearer: Some(pass.to_owned()),
        }
    }

    /// The request's head; a body (even empty) gets its `Content-Length` on a PUT.
    fn head(&self, method: &str, path: &str, headers: &[(&str, &str)], len: usize) -> Vec<u8> {
        let mut h = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
            self.addr
        );
        if let Some(b) = &self.bearer {
            h.push_str(&format!("authorization: Bearer {b}\r\n"));
        }
        for (n, v) in headers {
            h.push_str(&format!("{n}: {v}\r\n"));
        }
        if method == "PUT" || len > 0 {
            h.push_str(&format!("content-length: {len}\r\n"));
        }
        h.push_str("\r\n");
        h.into_bytes()
    }

    /// Sends a request and reads its response. The body is written by another task while
    /// the response is read, so a server that answers before reading it all is seen.
    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let head = self.head(method, path, headers, body.len());
        let body = body.to_vec();
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let writer = tokio::spawn(async move {
            // The server may close early (a refusal): write errors are not the test's concern.
            if w.write_all(&head).await.is_ok() && !body.is_empty() {
                let _ = w.write_all(&body).await;
            }
            w
        });
        let resp = read_response(&mut r, method == "HEAD").await;
        writer.abort();
        resp
    }

    async fn put(&self, path: &str, body: &[u8]) -> Response {
        self.send("PUT", path, &[], body).await
    }

    async fn get(&self, path: &str) -> Response {
        self.send("GET", path, &[], b"").await
    }

    async fn range(&self, path: &str, range: &str) -> Response {
        self.send("GET", path, &[("range", range)], b"").await
    }

    /// Asserts the object reads back whole as `body`, with its ETag and BLAKE3.
    async fn expect_object(&self, path: &str, body: &[u8]) {
        let g = self.get(path).await;
        g.ok(200);
        assert_eq!(g.body.len(), body.len(), "{path}");
        assert!(g.body == body, "{path}: different bytes");
        assert_eq!(g.header("etag"), Some(quoted_md5(body).as_str()), "{path}");
        assert_eq!(
            g.header("content-digest"),
            Some(blake3_digest(body).as_str()),
            "{path}"
        );
    }
}

/// A test node's configuration: port 0 everywhere, 64 KiB chunks and inline threshold.
fn node_config() -> NodeConfig {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    config.blob = BlobConfig {
        chunk_size: CS as u32,
        threshold: CS as u64,
        ..BlobConfig::default()
    };
    config
}

/// A whole node serving HTTP on port 0.
struct Node {
    http: SocketAddr,
    state: Arc<NodeState>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<meridian_server::Result<()>>,
}

impl Node {
    async fn start(tweak: impl FnOnce(&mut NodeConfig)) -> Node {
        let mut config = node_config();
        tweak(&mut config);
        config.validate().unwrap();
        let listeners = Listeners::bind(&config).await.unwrap();
        let http = listeners.http.local_addr().unwrap();
        let state = NodeState::open(config).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(meridian_server::run(
            state.clone(),
            listeners,
            shutdown.clone(),
        ));
        Node {
            http,
            state,
            shutdown,
            task,
        }
    }

    fn client(&self) -> Client {
        Client::new(self.http)
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

/// Objects around the chunk size and inline threshold round-trip byte-equal with their MD5
/// ETag and `Content-Digest: blake3` (also on the PUT's reply, and in its JSON); HEAD has
/// the headers and no body; seeded random ranges are their slices (206, `Content-Range`, no
/// `Content-Digest`); ranges outside the object are 416 `BAD_RANGE` with `bytes */SIZE`; a
/// malformed `Range` is ignored; DELETE is 204 and idempotent.
#[tokio::test]
async fn round_trips_and_ranges_over_several_chunks() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    for (i, size) in [0, 1, CS - 1, CS, CS + 1, 3 * CS + 17, 5 * CS]
        .into_iter()
        .enumerate()
    {
        let body = random_bytes(&mut rng, size);
        let path = format!("/b/rt/dir%2Fobj-{i}");
        let ct = "application/x-test";
        let put = c.send("PUT", &path, &[("content-type", ct)], &body).await;
        put.ok(200);
        assert_eq!(put.header("etag"), Some(quoted_md5(&body).as_str()));
        assert_eq!(
            put.header("content-digest"),
            Some(blake3_digest(&body).as_str())
        );
        let j = put.json();
        assert_eq!(j["size"], size as u64);
        assert_eq!(j["etag"], quoted_md5(&body));
        assert_eq!(j["blake3"], blake3::hash(&body).to_hex().to_string());

        c.expect_object(&path, &body).await;
        let g = c.get(&path).await;
        assert_eq!(g.header("content-type"), Some(ct));
        assert_eq!(g.header("accept-ranges"), Some("bytes"));
        assert_eq!(g.header("content-length"), Some(size.to_string().as_str()));
        // The same object under its decoded name (`/` is just a byte of the key).
        c.expect_object(&format!("/b/rt/dir/obj-{i}"), &body).await;

        let h = c.send("HEAD", &path, &[], b"").await;
        h.ok(200);
        assert!(h.body.is_empty());
        assert_eq!(h.header("content-length"), Some(size.to_string().as_str()));
        assert_eq!(h.header("etag"), Some(quoted_md5(&body).as_str()));
        assert_eq!(
            h.header("content-digest"),
            Some(blake3_digest(&body).as_str())
        );

        if size == 0 {
            let r = c.range(&path, "bytes=0-0").await;
            r.error(416, "BAD_RANGE");
            assert_eq!(r.header("content-range"), Some("bytes */0"));
        } else {
            for _ in 0..12 {
                let a = rng.random_range(0..size);
                let b = rng.random_range(a..size + 10);
                let (range, first, last) = match rng.random_range(0..3) {
                    0 => (format!("bytes={a}-{b}"), a, b.min(size - 1)),
                    1 => (format!("bytes={a}-"), a, size - 1),
                    _ => {
                        let n = rng.random_range(1..size + 5);
                        (format!("bytes=-{n}"), size.saturating_sub(n), size - 1)
                    }
                };
                let r = c.range(&path, &range).await;
                r.ok(206);
                assert!(r.body == body[first..=last], "{range} of {size}");
                assert_eq!(
                    r.header("content-range"),
                    Some(format!("bytes {first}-{last}/{size}").as_str()),
                    "{range}"
                );
                assert_eq!(r.header("content-digest"), None, "{range}");
                assert_eq!(r.header("etag"), Some(quoted_md5(&body).as_str()));
            }
            for bad in [
                format!("bytes={size}-"),
                format!("bytes={}-{}", size + 5, size + 9),
            ] {
                let r = c.range(&path, &bad).await;
                r.error(416, "BAD_RANGE");
                assert_eq!(
                    r.header("content-range"),
                    Some(format!("bytes */{size}").as_str()),
                    "{bad}"
                );
            }
            // Not one well-formed bytes range: ignored, the whole object.
            for ignored in ["bytes=0-1,3-4", "items=0-1", "bytes=5-2"] {
                let r = c.range(&path, ignored).await;
                r.ok(200);
                assert!(r.body == body, "{ignored}");
            }
        }
        c.send("DELETE", &path, &[], b"").await.ok(204);
        c.get(&path).await.error(404, "NOT_FOUND");
        c.send("HEAD", &path, &[], b"").await.ok(404);
        c.send("DELETE", &path, &[], b"").await.ok(204);
    }
    node.stop().await;
}

/// `Content-Digest` is checked over the whole body before the manifest is written: a wrong
/// sha-256 or blake3 is 400 `DIGEST_MISMATCH` and the old object stays; right ones (alone,
/// together, beside unknown algorithms) commit; malformed headers are 400
/// `BAD_CONTENT_DIGEST` naming the header.
#[tokio::test]
async fn content_digests_are_checked_before_commit() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let path = "/b/dig/k";
    let old = random_bytes(&mut rng, 3 * CS + 5);
    c.put(path, &old).await.ok(200);
    for size in [10, 4 * CS + 1] {
        let new = random_bytes(&mut rng, size);
        let mut wrong = sha256(&new);
        wrong[0] ^= 1;
        let wrong_blake3 = *blake3::hash(&old).as_bytes();
        for header in [
            format!("sha-256=:{}:", b64(&wrong)),
            format!("blake3=:{}:", b64(&wrong_blake3)),
            // One right, one wrong: refused.
            format!(
                "sha-256=:{}:, blake3=:{}:",
                b64(&sha256(&new)),
                b64(&wrong_blake3)
            ),
        ] {
            let r = c
                .send("PUT", path, &[("content-digest", &header)], &new)
                .await;
            r.error(400, "DIGEST_MISMATCH");
            assert!(r.text().contains("Content-Digest"), "{}", r.text());
            c.expect_object(path, &old).await;
        }
        for header in [
            "sha-256=:AAAA:".to_owned(),
            "sha-256=abc".to_owned(),
            "blake3".to_owned(),
            format!("SHA-256=:{}:", b64(&sha256(&new))),
            format!("sha-256=:{}:,,", b64(&sha256(&new))),
            "sha-256=:not base64!:".to_owned(),
        ] {
            let r = c
                .send("PUT", path, &[("content-digest", &header)], &new)
                .await;
            r.error(400, "BAD_CONTENT_DIGEST");
            assert!(r.text().contains("Content-Digest"), "{}", r.text());
            c.expect_object(path, &old).await;
        }
    }
    let new = random_bytes(&mut rng, 2 * CS + 3);
    for header in [
        format!("sha-256=:{}:", b64(&sha256(&new))),
        format!("blake3=:{}:", b64(blake3::hash(&new).as_bytes())),
        format!(
            "sha-512=:{}:, blake3=:{}:;x=1, sha-256=:{}:",
            b64(&[0u8; 64]),
            b64(blake3::hash(&new).as_bytes()),
            b64(&sha256(&new))
        ),
        format!("md5=:{}:, unixsum=1", b64(&md5(b"something else"))),
    ] {
        c.send("PUT", path, &[("content-digest", &header)], &new)
            .await
            .ok(200);
        c.expect_object(path, &new).await;
        c.put(path, &old).await.ok(200);
    }
    node.stop().await;
}

/// A PUT announcing more bytes than it sends, then closing its side: 400 `INCOMPLETE_BODY`
/// and no object (the old one stays).
#[tokio::test]
async fn a_body_cut_short_commits_nothing() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.put("/b/cut/k", b"old value").await.ok(200);
    for (key, announced, sent) in [("k", 1000, 10), ("k", 4 * CS, 3 * CS), ("new", 5000, 1)] {
        let head = c.head("PUT", &format!("/b/cut/{key}"), &[], announced);
        let mut s = TcpStream::connect(c.addr).await.unwrap();
        s.write_all(&head).await.unwrap();
        s.write_all(&vec![b'n'; sent]).await.unwrap();
        s.shutdown().await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(PATIENCE, async { while fill(&mut s, &mut got).await {} })
            .await
            .expect("the server closes the connection");
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.starts_with("HTTP/1.1 400 ") && got.contains("INCOMPLETE_BODY"),
            "{key}: {got}"
        );
    }
    c.expect_object("/b/cut/k", b"old value").await;
    c.get("/b/cut/new").await.error(404, "NOT_FOUND");
    node.stop().await;
}

/// With a `requirepass`, every method needs the bearer (401 `UNAUTHORIZED` before anything
/// is stored); bad names are refused naming the field; an upload far above the `/kv` body
/// limit is fine, one above `blob.max_object` is 413.
#[tokio::test]
async fn auth_names_and_limits() {
    let node = Node::start(|c| {
        c.resp.requirepass = Some("s3cret".into());
        c.http.max_body_len = 1024;
        c.blob.max_object = 4 * CS as u64;
    })
    .await;
    let anon = node.client();
    let c = anon.with_bearer("s3cret");
    let body = vec![7u8; 3 * CS];
    anon.put("/b/auth/k", &body)
        .await
        .error(401, "UNAUTHORIZED");
    anon.with_bearer("wrong")
        .put("/b/auth/k", &body)
        .await
        .error(401, "UNAUTHORIZED");
    c.get("/b/auth/k").await.error(404, "NOT_FOUND");
    c.put("/b/auth/k", &body).await.ok(200);
    anon.get("/b/auth/k").await.error(401, "UNAUTHORIZED");
    anon.send("HEAD", "/b/auth/k", &[], b"").await.ok(401);
    anon.send("DELETE", "/b/auth/k", &[], b"")
        .await
        .error(401, "UNAUTHORIZED");
    c.expect_object("/b/auth/k", &body).await;
    // The /kv limit still holds for /kv.
    c.put("/kv/big", &body).await.error(413, "BODY_TOO_LARGE");

    c.put("/b/auth/too-big", &vec![1u8; 4 * CS + 1])
        .await
        .error(413, "OBJECT_TOO_LARGE");
    c.get("/b/auth/too-big").await.error(404, "NOT_FOUND");

    for (path, code) in [
        ("/b/a:b/k", "BAD_BUCKET_NAME"),
        ("/b/..%2Fetc/k", "BAD_BUCKET_NAME"),
        ("/b/.hidden/k", "BAD_BUCKET_NAME"),
        ("/b/auth", "EMPTY_KEY"),
        ("/b/auth/", "EMPTY_KEY"),
        ("/b/auth/%zz", "BAD_KEY_ENCODING"),
        ("/b/auth/%ffmpu", "BAD_KEY_ENCODING"),
    ] {
        let r = c.put(path, b"x").await;
        r.error(400, code);
        let field = if code == "BAD_BUCKET_NAME" {
            "bucket"
        } else {
            "key"
        };
        assert!(r.text().contains(field), "{path}: {}", r.text());
        c.get(path).await.error(400, code);
    }
    let long = "k".repeat(1025);
    c.put(&format!("/b/auth/{long}"), b"x")
        .await
        .error(400, "KEY_TOO_LONG");
    c.put(&format!("/b/auth/{}", &long[1..]), b"x")
        .await
        .ok(200);
    c.send(
        "PUT",
        "/b/auth/k",
        &[("content-range", "bytes 0-0/10")],
        b"x",
    )
    .await
    .error(400, "CONTENT_RANGE_UNSUPPORTED");
    c.expect_object("/b/auth/k", &body).await;
    c.send("POST", "/b/auth/k", &[], b"x")
        .await
        .error(405, "METHOD_NOT_ALLOWED");
    node.stop().await;
}

/// With one transfer allowed and no queue, an upload while another is open is refused at
/// once: 503 `TOO_MANY_TRANSFERS` with `Retry-After`; the open one then completes.
#[tokio::test]
async fn admission_control_refuses_with_retry_after() {
    let node = Node::start(|c| {
        c.blob.max_active_transfers = 1;
        c.blob.max_queued = 0;
    })
    .await;
    let c = node.client();
    let adm = node.state.objects.admission();
    let body = vec![3u8; 3 * CS];
    let mut open = TcpStream::connect(c.addr).await.unwrap();
    open.write_all(&c.head("PUT", "/b/adm/a", &[], body.len()))
        .await
        .unwrap();
    open.write_all(&body[..1000]).await.unwrap();
    eventually("the first upload runs", || async move {
        (adm.stats().active.iter().sum::<usize>() == 1).then_some(())
    })
    .await;
    let r = c.put("/b/adm/b", b"small").await;
    r.error(503, "TOO_MANY_TRANSFERS");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert_eq!(r.json()["limit"], 1);
    open.write_all(&body[1000..]).await.unwrap();
    read_response(&mut open, false).await.ok(200);
    c.expect_object("/b/adm/a", &body).await;
    c.get("/b/adm/b").await.error(404, "NOT_FOUND");
    node.stop().await;
}

/// An object stored through the service as the S3 endpoint stores it (bucket `bkt`, key
/// `dir/key`) is served at `/b/bkt/dir/key` with its content type, and the other way round.
#[tokio::test]
async fn objects_of_the_s3_key_space_are_served() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    let body = random_bytes(&mut ChaCha8Rng::seed_from_u64(3), 2 * CS + 9);
    let pieces: Vec<Result<Bytes, _>> = body
        .chunks(10_000)
        .map(|p| Ok(Bytes::copy_from_slice(p)))
        .collect();
    let stream: ByteStream = Box::pin(futures_util::stream::iter(pieces));
    let meta = ObjectMeta {
        content_type: Some("text/plain".into()),
        ..ObjectMeta::default()
    };
    let m = node
        .state
        .objects
        .put("bkt", b"dir/key", stream, meta, None)
        .await
        .unwrap();
    c.expect_object("/b/bkt/dir/key", &body).await;
    let g = c.get("/b/bkt/dir/key").await;
    assert_eq!(g.header("etag"), Some(m.meta.s3_etag.as_str()));
    assert_eq!(g.header("content-type"), Some("text/plain"));
    c.put("/b/bkt/other", b"via http").await.ok(200);
    let head = node.state.objects.head("bkt", b"other").await.unwrap();
    assert_eq!(head.manifest.size, 8);
    assert_eq!(head.etag(), quoted_md5(b"via http"));
    node.stop().await;
}

/// In an embedded 2-DC × 2-node cluster, an object PUT through one node's HTTP API reads
/// back (whole and by range) through a node of the other DC, and its DELETE is seen there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_serve_one_object_namespace() {
    let cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        base_port: 0,
        wan_latency: Duration::ZERO,
        intra_dc: meridian_net::wan::LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        node: node_config(),
        ..EmbeddedConfig::default()
    };
    let cluster: Embedded = start_embedded(cfg, Duration::from_secs(60)).await.unwrap();
    let first = &cluster.members[0];
    let other = cluster
        .members
        .iter()
        .find(|m| m.dc != first.dc)
        .expect("a node in the other DC");
    let a = Client::new(first.http.expect("an HTTP address"));
    let b = Client::new(other.http.expect("an HTTP address"));
    let body = random_bytes(&mut ChaCha8Rng::seed_from_u64(11), 5 * CS + 3);
    let put = a
        .send(
            "PUT",
            "/b/shared/dir/obj",
            &[(
                "content-digest",
                &format!("sha-256=:{}:", b64(&sha256(&body))),
            )],
            &body,
        )
        .await;
    put.ok(200);
    assert_eq!(
        put.header("content-digest"),
        Some(blake3_digest(&body).as_str())
    );
    let b = &b;
    eventually("the other DC reads the object", || async move {
        (b.get("/b/shared/dir/obj").await.status == 200).then_some(())
    })
    .await;
    b.expect_object("/b/shared/dir/obj", &body).await;
    let r = b
        .range("/b/shared/dir/obj", &format!("bytes={}-{}", CS - 5, 3 * CS))
        .await;
    r.ok(206);
    assert!(r.body == body[CS - 5..=3 * CS], "a range across chunks");
    a.send("DELETE", "/b/shared/dir/obj", &[], b"")
        .await
        .ok(204);
    eventually("the other DC sees the delete", || async move {
        (b.get("/b/shared/dir/obj").await.status == 404).then_some(())
    })
    .await;
    cluster.shutdown().await;
}
