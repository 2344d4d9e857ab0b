//! Large objects over the HTTP API (`src/http_blob.rs`, `/b/{bucket}/{key}`) end to end: a
//! whole node (`NodeState::open`, `Listeners::bind`, `node::run`, port 0) or an embedded
//! 2-DC × 2-node cluster, driven by a tiny HTTP/1.1 client written here over `TcpStream`.
//!
//! Covered: round trips of objects around the chunk size and inline threshold (64 KiB) with
//! their `ETag` and `Content-Digest: blake3`; seeded random ranges equal to slices, 416 with
//! `Content-Range: bytes */SIZE`; `Content-Digest` checked before commit (a mismatch leaves
//! the old object), malformed ones refused; a body cut short commits nothing; names and
//! `requirepass`; uploads past the `/kv` body limit; admission control's 503; an object put
//! through the service's S3 key space read here; an object put on one DC read on the
//! other; and resumable uploads by `Content-Range` parts sent in parallel, listed, re-sent,
//! completed (identical to a whole PUT) or refused (gaps, overlaps, misalignment, hostile
//! headers and queries). No test asserts how long anything takes: waits poll, bounded by
//! generous timeouts.

use super::s3_endpoint::{Response, fill, read_response};
use base64::Engine;
use bytes::Bytes;
use meridian_blob::ObjectMeta;
use meridian_blob::digest::{hex, md5};
use meridian_s3::{ChecksumAlgorithm, Checksummer};
use meridian_server::NodeConfig;
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use meridian_server::objects::{BlobConfig, ByteStream};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

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
/// A node under test (its fields through [`super::RunningNode`]).
struct Node(super::RunningNode);

impl std::ops::Deref for Node {
    type Target = super::RunningNode;

    fn deref(&self) -> &super::RunningNode {
        &self.0
    }
}

impl Node {
    async fn start(tweak: impl FnOnce(&mut NodeConfig)) -> Node {
        let mut config = node_config();
        tweak(&mut config);
        Node(super::RunningNode::start(config).await)
    }

    fn client(&self) -> Client {
        Client::new(self.http)
    }

    async fn stop(self) {
        self.0.stop().await;
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
    let cluster: Embedded = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
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

// ----- resumable uploads by byte range (`?uploads`, `?upload_id=`) ----------------------

impl Client {
    /// Sends raw request bytes on a connection of its own and reads the response (the
    /// bytes are written by another task, so a server that answers early is seen).
    async fn send_raw(&self, bytes: Vec<u8>) -> Response {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let writer = tokio::spawn(async move {
            let _ = w.write_all(&bytes).await;
            w
        });
        let resp = read_response(&mut r, false).await;
        writer.abort();
        resp
    }

    /// `POST ?uploads`: opens an upload; its id, after checking the announced chunk size.
    async fn open_upload(&self, path: &str, headers: &[(&str, &str)]) -> String {
        let r = self
            .send("POST", &format!("{path}?uploads"), headers, b"")
            .await;
        r.ok(200);
        let j = r.json();
        assert_eq!(j["chunk_size"], CS as u64, "{j}");
        let id = j["upload_id"].as_str().expect("an upload_id").to_owned();
        assert_eq!(id.len(), 32, "{id}");
        id
    }

    /// `PUT ?upload_id=` of `bytes`, the part at `first` of an object of `total` bytes.
    async fn put_part(
        &self,
        path: &str,
        id: &str,
        first: usize,
        bytes: &[u8],
        total: usize,
    ) -> Response {
        let range = format!("bytes {first}-{}/{total}", first + bytes.len() - 1);
        self.send(
            "PUT",
            &format!("{path}?upload_id={id}"),
            &[("content-range", &range)],
            bytes,
        )
        .await
    }

    /// A part with a `Content-Range` as given (any text).
    async fn put_ranged(&self, path: &str, id: &str, range: &str, bytes: &[u8]) -> Response {
        self.send(
            "PUT",
            &format!("{path}?upload_id={id}"),
            &[("content-range", range)],
            bytes,
        )
        .await
    }

    /// `GET ?upload_id=` (with `extra` query parameters): the listing.
    async fn list_upload(&self, path: &str, id: &str, extra: &str) -> serde_json::Value {
        let r = self.get(&format!("{path}?upload_id={id}{extra}")).await;
        r.ok(200);
        r.json()
    }

    /// `POST ?upload_id=&size=`.
    async fn complete(&self, path: &str, id: &str, size: usize) -> Response {
        self.send(
            "POST",
            &format!("{path}?upload_id={id}&size={size}"),
            &[],
            b"",
        )
        .await
    }
}

/// The (offset, size) pairs of a listing, and its `received_prefix`.
fn listed(j: &serde_json::Value) -> (Vec<(u64, u64)>, u64) {
    let parts = j["parts"]
        .as_array()
        .unwrap_or_else(|| panic!("no parts: {j}"))
        .iter()
        .map(|p| (p["offset"].as_u64().unwrap(), p["size"].as_u64().unwrap()))
        .collect();
    (
        parts,
        j["received_prefix"].as_u64().expect("received_prefix"),
    )
}

/// A 5-chunk object uploaded as 4 parts of 1 to 2 chunks (the last one short), sent
/// concurrently and out of order on separate connections: a listing mid-way shows the
/// parts so far and the resume point (`received_prefix`); a part sent again with other
/// bytes replaces the first (the last one wins); a part whose `Content-Digest` is wrong is
/// refused and not recorded, a right one is accepted; the old object stays until the
/// completion, which commits the object byte-identical to the bytes sent, with the BLAKE3,
/// ETag and content type a whole PUT of the same bytes gets; the upload is then gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumable_upload_by_parallel_ranges() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let total = 5 * CS - 1000;
    let body = random_bytes(&mut rng, total);
    let old = random_bytes(&mut rng, 2 * CS + 1);
    let path = "/b/resume/dir%2Fobj";
    c.put(path, &old).await.ok(200);
    let whole = c.put("/b/resume/whole", &body).await;
    whole.ok(200);
    let whole = whole.json();

    let ct = "application/x-parts";
    let id = c.open_upload(path, &[("content-type", ct)]).await;
    // The parts: [0, CS), [CS, 3CS), [3CS, 4CS), [4CS, total).
    let bounds = [0, CS, 3 * CS, 4 * CS, total];
    let part = |i: usize| (bounds[i], &body[bounds[i]..bounds[i + 1]]);

    // First wave, concurrently: parts 2 and 0, and part 3 with wrong bytes (sent again
    // later).
    let wrong = vec![0u8; bounds[3] - bounds[2]];
    let (p2, p0) = (part(2), part(0));
    let wave = futures_util::future::join_all([
        c.put_part(path, &id, p2.0, &wrong, total),
        c.put_part(path, &id, p0.0, p0.1, total),
    ])
    .await;
    for (r, (first, bytes)) in wave.iter().zip([(p2.0, &wrong[..]), (p0.0, p0.1)]) {
        r.ok(200);
        let j = r.json();
        assert_eq!(j["offset"], first as u64, "{j}");
        assert_eq!(j["size"], bytes.len() as u64, "{j}");
        assert_eq!(j["etag"], quoted_md5(bytes), "{j}");
        assert_eq!(r.header("etag"), Some(quoted_md5(bytes).as_str()));
    }
    // Mid-way: the client resumes from the received prefix.
    let j = c.list_upload(path, &id, "").await;
    assert_eq!(j["upload_id"], id.as_str());
    assert_eq!(j["chunk_size"], CS as u64);
    assert_eq!(j["truncated"], false);
    let (parts, prefix) = listed(&j);
    assert_eq!(
        parts,
        vec![(0, CS as u64), (3 * CS as u64, CS as u64)],
        "{j}"
    );
    assert_eq!(prefix, CS as u64, "{j}");
    assert_eq!(j["parts"][0]["etag"], quoted_md5(p0.1));
    // The old object is untouched.
    c.expect_object(path, &old).await;

    // A part with a wrong Content-Digest is refused and not recorded.
    let (p1_first, p1) = part(1);
    let range1 = format!("bytes {p1_first}-{}/{total}", p1_first + p1.len() - 1);
    let wrong_digest = blake3_digest(b"something else");
    let r = c
        .send(
            "PUT",
            &format!("{path}?upload_id={id}"),
            &[
                ("content-range", &range1),
                ("content-digest", &wrong_digest),
            ],
            p1,
        )
        .await;
    r.error(400, "DIGEST_MISMATCH");
    let (parts, _) = listed(&c.list_upload(path, &id, "").await);
    assert_eq!(parts.len(), 2, "{parts:?}");

    // Second wave, concurrently and out of order: the last part, part 1 (with its right
    // digest), and part 2 again with its right bytes.
    let right_digest = format!("sha-256=:{}:", b64(&sha256(p1)));
    let range_of = |(first, bytes): (usize, &[u8])| {
        format!("bytes {first}-{}/{total}", first + bytes.len() - 1)
    };
    let (range3, range2) = (range_of(part(3)), range_of(part(2)));
    let target = format!("{path}?upload_id={id}");
    let wave = futures_util::future::join_all([
        c.send("PUT", &target, &[("content-range", &range3)], part(3).1),
        c.send(
            "PUT",
            &target,
            &[
                ("content-range", &range1),
                ("content-digest", &right_digest),
            ],
            p1,
        ),
        c.send("PUT", &target, &[("content-range", &range2)], part(2).1),
    ])
    .await;
    for r in &wave {
        r.ok(200);
    }
    let j = c.list_upload(path, &id, "").await;
    let (parts, prefix) = listed(&j);
    assert_eq!(prefix, total as u64, "{j}");
    let want: Vec<(u64, u64)> = (0..4)
        .map(|i| (bounds[i] as u64, (bounds[i + 1] - bounds[i]) as u64))
        .collect();
    assert_eq!(parts, want, "{j}");
    // Paged: two parts, then the rest from `next_from`.
    let j = c.list_upload(path, &id, "&max_parts=2").await;
    assert_eq!(j["truncated"], true, "{j}");
    assert_eq!(j["next_from"], 3 * CS as u64, "{j}");
    assert_eq!(listed(&j), (want[..2].to_vec(), total as u64));
    let j = c.list_upload(path, &id, &format!("&from={}", 3 * CS)).await;
    assert_eq!(listed(&j), (want[2..].to_vec(), total as u64));
    assert_eq!(j["truncated"], false, "{j}");
    c.expect_object(path, &old).await;

    let done = c.complete(path, &id, total).await;
    done.ok(200);
    let j = done.json();
    assert_eq!(j["size"], total as u64);
    assert_eq!(j["blake3"], whole["blake3"]);
    assert_eq!(j["blake3"], blake3::hash(&body).to_hex().to_string());
    assert_eq!(j["etag"], whole["etag"]);
    assert_eq!(done.header("etag"), Some(quoted_md5(&body).as_str()));
    assert_eq!(
        done.header("content-digest"),
        Some(blake3_digest(&body).as_str())
    );
    c.expect_object(path, &body).await;
    c.expect_object("/b/resume/dir/obj", &body).await;
    assert_eq!(c.get(path).await.header("content-type"), Some(ct));
    let r = c
        .range(path, &format!("bytes={}-{}", CS - 3, 3 * CS + 2))
        .await;
    r.ok(206);
    assert!(r.body == body[CS - 3..=3 * CS + 2], "a range across parts");

    // The upload is gone.
    c.get(&format!("{path}?upload_id={id}"))
        .await
        .error(404, "NO_SUCH_UPLOAD");
    let (first, bytes) = part(0);
    c.put_part(path, &id, first, bytes, total)
        .await
        .error(404, "NO_SUCH_UPLOAD");
    c.complete(path, &id, total)
        .await
        .error(404, "NO_SUCH_UPLOAD");
    node.stop().await;
}

/// Gaps, overlaps, parts past the size, misaligned ranges, malformed `Content-Range`s,
/// bodies of the wrong length and unknown or foreign upload ids are refused naming what is
/// wrong, and nothing is committed: the old object stays readable throughout. The same
/// upload is then mended (a part sent again) and completes; an abort drops another.
#[tokio::test]
async fn range_uploads_refuse_gaps_overlaps_and_bad_parts() {
    let node = Node::start(|c| c.blob.max_object = 64 * CS as u64).await;
    let c = node.client();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let path = "/b/gaps/k";
    let old = random_bytes(&mut rng, 3 * CS + 7);
    c.put(path, &old).await.ok(200);
    let total = 3 * CS;
    let body = random_bytes(&mut rng, total);
    let id = c.open_upload(path, &[]).await;
    let chunk = |i: usize| &body[i * CS..(i + 1) * CS];

    // Malformed headers.
    for range in [
        "",
        "bytes",
        "bytes 0-65535",
        "bytes 0-65535/*",
        "bytes */196608",
        "bytes=0-65535/196608",
        "bits 0-65535/196608",
        "bytes 0 -65535/196608",
        "bytes -1-65535/196608",
        "bytes +0-65535/196608",
        "bytes 0x0-65535/196608",
        "bytes 0-65535/196608/1",
        "bytes 0-65535/196608, bytes 65536-131071/196608",
        "bytes 70000-65535/196608",
        "bytes 0-196608/196608",
        "bytes 0-65535/0",
        "bytes 0-99999999999999999999999/196608",
        "bytes 0-65535/99999999999999999999999",
        "bytes 0-65535/1966€8",
    ] {
        let r = c.put_ranged(path, &id, range, chunk(0)).await;
        r.error(400, "BAD_CONTENT_RANGE");
        assert!(r.text().contains("Content-Range"), "{range}: {}", r.text());
    }
    // No Content-Range, or two.
    c.send("PUT", &format!("{path}?upload_id={id}"), &[], chunk(0))
        .await
        .error(400, "BAD_CONTENT_RANGE");
    c.send(
        "PUT",
        &format!("{path}?upload_id={id}"),
        &[
            ("content-range", "bytes 0-65535/196608"),
            ("content-range", "bytes 0-65535/196608"),
        ],
        chunk(0),
    )
    .await
    .error(400, "BAD_CONTENT_RANGE");
    // Misaligned: naming the chunk size.
    for (range, len) in [
        ("bytes 1-65536/196608", CS),
        ("bytes 0-99/196608", 100),
        ("bytes 65536-131070/196608", CS - 1),
        ("bytes 100-199/200", 100),
    ] {
        let r = c.put_ranged(path, &id, range, &body[..len]).await;
        r.error(400, "MISALIGNED_RANGE");
        assert!(r.text().contains("65536"), "{range}: {}", r.text());
    }
    // Totals past blob.max_object.
    for range in [
        format!("bytes 0-65535/{}", 64 * CS + 1),
        format!("bytes 0-65535/{}", u64::MAX),
        format!("bytes {}-{}/{}", u64::MAX - 65535, u64::MAX - 1, u64::MAX),
    ] {
        c.put_ranged(path, &id, &range, chunk(0))
            .await
            .error(413, "OBJECT_TOO_LARGE");
    }
    // Bodies of another length than the range: a Content-Length that differs; a chunked
    // body too long or too short; a body cut short.
    let target = format!("{path}?upload_id={id}");
    c.put_ranged(path, &id, "bytes 0-65535/196608", &body[..CS - 1])
        .await
        .error(400, "BODY_LENGTH_MISMATCH");
    c.put_ranged(path, &id, "bytes 0-65535/196608", &body[..CS + 1])
        .await
        .error(400, "BODY_LENGTH_MISMATCH");
    for (len, code) in [(CS + 1, "BODY_LENGTH_MISMATCH"), (10, "INCOMPLETE_BODY")] {
        let mut raw = format!(
            "PUT {target} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\
             content-range: bytes 0-65535/196608\r\ntransfer-encoding: chunked\r\n\r\n\
             {len:x}\r\n"
        )
        .into_bytes();
        raw.extend_from_slice(&body[..len]);
        raw.extend_from_slice(b"\r\n0\r\n\r\n");
        let r = c.send_raw(raw).await;
        r.error(400, code);
        assert!(r.text().contains("65536"), "{}", r.text());
    }
    {
        let head = c.head(
            "PUT",
            &target,
            &[("content-range", "bytes 0-65535/196608")],
            CS,
        );
        let mut s = TcpStream::connect(c.addr).await.unwrap();
        s.write_all(&head).await.unwrap();
        s.write_all(&body[..1000]).await.unwrap();
        s.shutdown().await.unwrap();
        read_response(&mut s, false)
            .await
            .error(400, "INCOMPLETE_BODY");
    }
    // None of it was recorded.
    let (parts, prefix) = listed(&c.list_upload(path, &id, "").await);
    assert_eq!((parts, prefix), (vec![], 0));

    // A gap in the middle, then at the end.
    c.put_part(path, &id, 0, chunk(0), total).await.ok(200);
    c.put_part(path, &id, 2 * CS, chunk(2), total).await.ok(200);
    let r = c.complete(path, &id, total).await;
    r.error(400, "INVALID_PARTS");
    assert!(
        r.text().contains("gap") && r.text().contains("65536-131071"),
        "{}",
        r.text()
    );
    let r = c.complete(path, &id, total + CS).await;
    r.error(400, "INVALID_PARTS");
    assert!(r.text().contains("65536-131071"), "{}", r.text());
    c.expect_object(path, &old).await;
    // An overlap: part 0 sent again as two chunks, over part 1 sent too.
    c.put_part(path, &id, 0, &body[..2 * CS], total)
        .await
        .ok(200);
    c.put_part(path, &id, CS, chunk(1), total).await.ok(200);
    let (parts, prefix) = listed(&c.list_upload(path, &id, "").await);
    let cs = CS as u64;
    assert_eq!(parts, vec![(0, 2 * cs), (cs, cs), (2 * cs, cs)]);
    assert_eq!(prefix, total as u64);
    let r = c.complete(path, &id, total).await;
    r.error(400, "INVALID_PARTS");
    assert!(r.text().contains("overlap"), "{}", r.text());
    c.expect_object(path, &old).await;
    // Mended: part 0 as one chunk again. A size short of the parts, or none, or not a
    // number, is refused.
    c.put_part(path, &id, 0, chunk(0), total).await.ok(200);
    let r = c.complete(path, &id, total - 1).await;
    r.error(400, "INVALID_PARTS");
    assert!(r.text().contains("past size"), "{}", r.text());
    c.complete(path, &id, 0).await.error(400, "INVALID_PARTS");
    for q in [
        "",
        "&size=",
        "&size=-1",
        "&size=1e6",
        "&size=99999999999999999999999",
    ] {
        let r = c
            .send("POST", &format!("{path}?upload_id={id}{q}"), &[], b"")
            .await;
        r.error(400, "BAD_SIZE");
        assert!(r.text().contains("size"), "{q}: {}", r.text());
    }
    c.complete(path, &id, 64 * CS + 1)
        .await
        .error(413, "OBJECT_TOO_LARGE");
    c.expect_object(path, &old).await;

    // Unknown, malformed and foreign ids.
    let other = c.open_upload("/b/gaps/other", &[]).await;
    let foreign_bucket = c.open_upload("/b/gaps2/k", &[]).await;
    for bad_id in [
        "0123456789abcdef0123456789abcdef",
        "zz",
        "",
        &other,
        &foreign_bucket,
    ] {
        let q = format!("{path}?upload_id={bad_id}");
        c.put_part(path, bad_id, 0, chunk(0), total)
            .await
            .error(404, "NO_SUCH_UPLOAD");
        c.get(&q).await.error(404, "NO_SUCH_UPLOAD");
        c.complete(path, bad_id, total)
            .await
            .error(404, "NO_SUCH_UPLOAD");
        c.send("DELETE", &q, &[], b"")
            .await
            .error(404, "NO_SUCH_UPLOAD");
    }
    // Queries that make no sense.
    c.send("POST", &format!("{path}?uploads&upload_id={id}"), &[], b"")
        .await
        .error(400, "BAD_QUERY");
    c.get(&format!("{path}?upload_id={id}&upload_id={id}"))
        .await
        .error(400, "BAD_QUERY");
    for q in ["&max_parts=0", "&max_parts=10001", "&from=x", "&from=%zz"] {
        c.get(&format!("{path}?upload_id={id}{q}"))
            .await
            .error(400, "BAD_QUERY");
    }
    c.send("POST", path, &[], b"")
        .await
        .error(405, "METHOD_NOT_ALLOWED");
    c.send("PUT", path, &[("content-range", "bytes 0-0/1")], b"x")
        .await
        .error(400, "CONTENT_RANGE_UNSUPPORTED");
    c.expect_object(path, &old).await;

    // The mended upload completes; the other one is aborted, its records gone.
    let done = c.complete(path, &id, total).await;
    done.ok(200);
    assert_eq!(
        done.json()["blake3"],
        blake3::hash(&body).to_hex().to_string()
    );
    c.expect_object(path, &body).await;
    c.put_part("/b/gaps2/k", &foreign_bucket, 0, chunk(0), total)
        .await
        .ok(200);
    c.send(
        "DELETE",
        &format!("/b/gaps2/k?upload_id={foreign_bucket}"),
        &[],
        b"",
    )
    .await
    .ok(204);
    c.get(&format!("/b/gaps2/k?upload_id={foreign_bucket}"))
        .await
        .error(404, "NO_SUCH_UPLOAD");
    c.get("/b/gaps2/k").await.error(404, "NOT_FOUND");
    assert!(node.state.objects.bucket_is_empty("gaps2").await.unwrap());
    node.stop().await;
}

/// Part numbers past 99 999 (ranges past 99 999 chunks) are stored, listed in byte order
/// across the record format's two widths, and dropped by an abort; a range past what a
/// part number holds is 413, not a panic.
#[tokio::test]
async fn far_ranges_keep_their_order() {
    let node = Node::start(|c| c.blob.max_object = u64::MAX).await;
    let c = node.client();
    let path = "/b/far/k";
    let id = c.open_upload(path, &[]).await;
    let total = 100_001 * CS + 10;
    let tail = vec![9u8; 10];
    let chunk = vec![1u8; CS];
    for first in [100_001 * CS, 99_999 * CS, 0, 99_998 * CS, 100_000 * CS] {
        let bytes = if first == 100_001 * CS { &tail } else { &chunk };
        c.put_part(path, &id, first, bytes, total).await.ok(200);
    }
    let (parts, prefix) = listed(&c.list_upload(path, &id, "").await);
    let offsets: Vec<u64> = parts.iter().map(|p| p.0).collect();
    let cs = CS as u64;
    assert_eq!(
        offsets,
        vec![0, 99_998 * cs, 99_999 * cs, 100_000 * cs, 100_001 * cs]
    );
    assert_eq!(parts.last(), Some(&(100_001 * cs, 10)));
    assert_eq!(prefix, cs);
    let j = c
        .list_upload(path, &id, &format!("&from={}&max_parts=2", 99_999 * cs - 1))
        .await;
    assert_eq!(
        listed(&j).0,
        vec![(99_999 * cs, cs), (100_000 * cs, cs)],
        "{j}"
    );
    assert_eq!(j["next_from"], 100_001 * cs, "{j}");
    let r = c.complete(path, &id, total).await;
    r.error(400, "INVALID_PARTS");
    assert!(r.text().contains(&format!("{cs}-")), "{}", r.text());
    // Past 2^32 chunks: no part number.
    let first = u64::MAX - (u64::MAX % cs);
    c.put_ranged(
        path,
        &id,
        &format!("bytes {first}-{}/{}", u64::MAX - 1, u64::MAX),
        b"",
    )
    .await
    .error(413, "OBJECT_TOO_LARGE");
    c.send("DELETE", &format!("{path}?upload_id={id}"), &[], b"")
        .await
        .ok(204);
    assert!(node.state.objects.bucket_is_empty("far").await.unwrap());
    node.stop().await;
}

/// Hostile input never panics the server: seeded random `Content-Range`s and query values
/// (huge numbers, ranges past their totals, garbage) are each answered with a client
/// error, and the node goes on serving.
#[tokio::test]
async fn hostile_ranges_and_queries_are_answered() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    let path = "/b/fuzz/k";
    let id = c.open_upload(path, &[]).await;
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let numbers = [
        "0".to_owned(),
        "1".to_owned(),
        "65535".to_owned(),
        "65536".to_owned(),
        "131071".to_owned(),
        u64::MAX.to_string(),
        (u64::MAX - 1).to_string(),
        "18446744073709551616".to_owned(),
        "".to_owned(),
        "-1".to_owned(),
        "*".to_owned(),
    ];
    let pick = |rng: &mut ChaCha8Rng| numbers[rng.random_range(0..numbers.len())].clone();
    for _ in 0..150 {
        let range = match rng.random_range(0..3) {
            0 => {
                let (a, b, t) = (pick(&mut rng), pick(&mut rng), pick(&mut rng));
                format!("bytes {a}-{b}/{t}")
            }
            1 => (0..rng.random_range(0..40))
                .map(|_| b"bytes 0123456789-/*, =;"[rng.random_range(0..23)] as char)
                .collect(),
            _ => format!("bytes 0-{}/{}", pick(&mut rng), pick(&mut rng)),
        };
        let len = rng.random_range(0..3) * 1000;
        let r = c.put_ranged(path, &id, &range, &vec![5u8; len]).await;
        assert!(
            [400, 413].contains(&r.status),
            "{range:?} with {len} bytes: {} {}",
            r.status,
            r.text()
        );
    }
    for _ in 0..60 {
        let name = ["size", "from", "max_parts", "upload_id", "uploads"][rng.random_range(0..5)];
        let value = pick(&mut rng);
        let q = format!("{path}?upload_id={id}&{name}={value}");
        for method in ["GET", "POST"] {
            let r = c.send(method, &q, &[], b"").await;
            assert!(
                (400..500).contains(&r.status) || r.status == 200,
                "{method} {q}: {} {}",
                r.status,
                r.text()
            );
        }
    }
    // The node goes on serving.
    c.put("/b/fuzz/after", b"still here").await.ok(200);
    c.expect_object("/b/fuzz/after", b"still here").await;
    node.stop().await;
}

/// Parts and completions pass admission control: with one transfer allowed and no queue,
/// each is refused while another upload runs (503 `TOO_MANY_TRANSFERS` + `Retry-After`),
/// and goes through afterwards.
#[tokio::test]
async fn range_uploads_pass_admission_control() {
    let node = Node::start(|c| {
        c.blob.max_active_transfers = 1;
        c.blob.max_queued = 0;
    })
    .await;
    let c = node.client();
    let adm = node.state.objects.admission();
    let path = "/b/adm/parts";
    let id = c.open_upload(path, &[]).await;
    let body = vec![4u8; 2 * CS];
    c.put_part(path, &id, 0, &body[..CS], body.len())
        .await
        .ok(200);
    let mut open = TcpStream::connect(c.addr).await.unwrap();
    open.write_all(&c.head("PUT", "/b/adm/a", &[], body.len()))
        .await
        .unwrap();
    open.write_all(&body[..1000]).await.unwrap();
    eventually("the other upload runs", || async move {
        (adm.stats().active.iter().sum::<usize>() == 1).then_some(())
    })
    .await;
    let r = c.put_part(path, &id, CS, &body[CS..], body.len()).await;
    r.error(503, "TOO_MANY_TRANSFERS");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    let r = c.complete(path, &id, CS).await;
    r.error(503, "TOO_MANY_TRANSFERS");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    open.write_all(&body[1000..]).await.unwrap();
    read_response(&mut open, false).await.ok(200);
    c.put_part(path, &id, CS, &body[CS..], body.len())
        .await
        .ok(200);
    c.complete(path, &id, body.len()).await.ok(200);
    c.expect_object(path, &body).await;
    node.stop().await;
}
