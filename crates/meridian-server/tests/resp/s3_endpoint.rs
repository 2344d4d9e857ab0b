//! The S3-compatible endpoint (`src/s3.rs`) end to end: a whole node (`NodeState::open`,
//! `Listeners::bind`, `node::run`, port 0) or an embedded cluster, driven by a tiny HTTP/1.1
//! client written here over `TcpStream` (requests by hand; status line, headers and
//! Content-Length or chunked bodies read back), its requests signed with `meridian_s3::sigv4`.
//!
//! Covered: signed round trips of inline and chunked objects with ranges; aws-chunked
//! uploads and bodies that fail their signatures (nothing committed); hostile requests, each
//! answered with S3's XML error while the node keeps serving; the connection cap and the
//! header timeout; admission control (`blob.max_active_transfers`, `blob.max_queued`);
//! `s3.open`; and an embedded cluster serving one object through every node. No test asserts
//! how long anything takes: waits poll, bounded by generous timeouts.

use meridian_blob::digest::{hex, md5};
use meridian_s3::chunked::encode_aws_chunked;
use meridian_s3::sigv4::{self, Credentials, RequestParts, SigningParams};
use meridian_s3::{ChecksumAlgorithm, Checksummer, ChunkSigning};
use meridian_server::NodeConfig;
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use meridian_server::config::S3Section;
use meridian_server::objects::BlobConfig;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ----- helpers ----------------------------------------------------------------------------

/// Only a guard against hangs; no test asserts how long anything takes.
const PATIENCE: Duration = Duration::from_secs(30);

/// The access key every node here accepts.
const AK: &str = "AKIDMERIDIANTEST";
const SK: &str = "meridian-test-secret-0123456789";
const REGION: &str = "us-east-1";

/// The small chunk size (and inline threshold) of the test nodes: objects of a few hundred
/// KiB span several chunks.
const CS: usize = 64 << 10;

fn now_secs() -> i64 {
    use meridian_core::Clock;
    (meridian_core::SystemClock::new().now().0 / 1_000_000) as i64
}

fn sha256_hex(data: &[u8]) -> String {
    let mut h = Checksummer::new(ChecksumAlgorithm::Sha256);
    h.update(data);
    hex(&h.finalize())
}

fn quoted_md5(data: &[u8]) -> String {
    format!("\"{}\"", hex(&md5(data)))
}

fn random_bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// The text of every `<tag>…</tag>` of an XML document, in order.
fn xml_all(body: &[u8], tag: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = &text[..];
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(after[..j].to_owned());
        rest = &after[j + close.len()..];
    }
    out
}

fn xml_one(body: &[u8], tag: &str) -> Option<String> {
    xml_all(body, tag).into_iter().next()
}

/// A response as read off the wire.
#[derive(Debug)]
pub(super) struct Response {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Response {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts a success status.
    #[track_caller]
    pub(super) fn ok(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "{self:?}: {}", self.text());
        self
    }

    /// Asserts an S3 XML error with this status and code.
    #[track_caller]
    fn s3_error(&self, status: u16, code: &str) -> &Self {
        assert_eq!(
            (self.status, xml_one(&self.body, "Code").as_deref()),
            (status, Some(code)),
            "{:?}: {}",
            self.headers,
            self.text()
        );
        assert!(
            self.text().starts_with("<?xml") && self.text().contains("<Error>"),
            "{}",
            self.text()
        );
        assert_eq!(self.header("content-type"), Some("application/xml"));
        self
    }
}

/// Finds `\r\n\r\n`.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

/// Reads more bytes into `buf`; `false` at EOF (or a reset).
pub(super) async fn fill(s: &mut (impl AsyncReadExt + Unpin), buf: &mut Vec<u8>) -> bool {
    let mut tmp = [0u8; 16 << 10];
    match s.read(&mut tmp).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            true
        }
    }
}

/// Reads one response (`head`: the request was a HEAD, so no body follows).
pub(super) async fn read_response(s: &mut (impl AsyncReadExt + Unpin), head: bool) -> Response {
    let mut buf = Vec::new();
    tokio::time::timeout(PATIENCE, read_response_inner(s, &mut buf, head))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no response in time; got {:?}",
                String::from_utf8_lossy(&buf)
            )
        })
}

async fn read_response_inner(
    s: &mut (impl AsyncReadExt + Unpin),
    buf: &mut Vec<u8>,
    head: bool,
) -> Response {
    let end = loop {
        if let Some(e) = head_end(buf) {
            break e;
        }
        assert!(
            fill(s, buf).await,
            "connection closed before a response: {:?}",
            String::from_utf8_lossy(buf)
        );
    };
    let head_text = String::from_utf8(buf[..end].to_vec()).expect("ASCII head");
    let mut lines = head_text.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let status: u16 = status_line[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    let mut rest = buf.split_off(end + 4);
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if head || status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if get("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = rest.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                assert!(fill(s, &mut rest).await, "EOF in a chunk size line");
            };
            let line = String::from_utf8_lossy(&rest[..line_end]).into_owned();
            let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
            rest.drain(..line_end + 2);
            if size == 0 {
                // Trailers (none expected) up to the empty line.
                while !rest.starts_with(b"\r\n") && head_end(&rest).is_none() {
                    assert!(fill(s, &mut rest).await, "EOF in the trailers");
                }
                break;
            }
            while rest.len() < size + 2 {
                assert!(fill(s, &mut rest).await, "EOF in a chunk");
            }
            body.extend_from_slice(&rest[..size]);
            rest.drain(..size + 2);
        }
        body
    } else if let Some(len) = get("content-length") {
        let len: usize = len.parse().unwrap();
        while rest.len() < len {
            assert!(
                fill(s, &mut rest).await,
                "EOF after {} of {len} body bytes",
                rest.len()
            );
        }
        rest.truncate(len);
        rest
    } else {
        while fill(s, &mut rest).await {}
        rest
    };
    Response {
        status,
        headers,
        body,
    }
}

/// Everything the peer sends until it closes (EOF or reset), within `PATIENCE`.
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    tokio::time::timeout(PATIENCE, async { while fill(s, &mut got).await {} })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "connection still open; got {:?}",
                String::from_utf8_lossy(&got)
            )
        });
    got
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

/// How `x-amz-content-sha256` is set.
#[derive(Clone, Debug, Default)]
enum Payload {
    /// The body's SHA-256.
    #[default]
    Sha256,
    /// This value as is (`UNSIGNED-PAYLOAD`, a streaming mode, a wrong hash).
    Literal(String),
}

/// One request to send.
#[derive(Clone, Debug, Default)]
struct Request {
    method: &'static str,
    /// The raw (already percent-encoded) path.
    path: String,
    query: Option<String>,
    /// Extra headers, lower-case names; signed.
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    payload: Payload,
}

impl Request {
    fn new(method: &'static str, path: impl Into<String>) -> Request {
        Request {
            method,
            path: path.into(),
            ..Request::default()
        }
    }

    fn query(mut self, q: impl Into<String>) -> Request {
        self.query = Some(q.into());
        self
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Request {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    fn payload(mut self, p: &str) -> Request {
        self.payload = Payload::Literal(p.to_owned());
        self
    }
}

/// How a client authenticates.
#[derive(Clone, Debug)]
enum Auth {
    /// No `Authorization` header at all.
    Anonymous,
    /// Signs with these credentials, its clock `skew_secs` off.
    Sign { creds: Credentials, skew_secs: i64 },
    /// This literal `Authorization` value.
    Raw(String),
}

/// A request about to be written: its head and the signing context of its body.
struct Prepared {
    head: Vec<u8>,
    body: Vec<u8>,
    chunk_signing: Option<ChunkSigning>,
}

/// The S3 client: one connection per request (`connection: close`).
#[derive(Clone, Debug)]
struct Client {
    addr: SocketAddr,
    auth: Auth,
}

impl Client {
    fn signed(addr: SocketAddr) -> Client {
        Client {
            addr,
            auth: Auth::Sign {
                creds: Credentials::new(AK, SK),
                skew_secs: 0,
            },
        }
    }

    fn with_auth(&self, auth: Auth) -> Client {
        Client {
            addr: self.addr,
            auth,
        }
    }

    /// Builds the request's head, signing it unless anonymous.
    fn prepare(&self, req: &Request) -> Prepared {
        let mut headers: Vec<(String, String)> = vec![("host".into(), self.addr.to_string())];
        headers.extend(req.headers.iter().cloned());
        let mut chunk_signing = None;
        match &self.auth {
            Auth::Anonymous => {
                if let Payload::Literal(p) = &req.payload {
                    headers.push(("x-amz-content-sha256".into(), p.clone()));
                }
            }
            Auth::Raw(v) => {
                headers.push(("x-amz-content-sha256".into(), sha256_hex(&req.body)));
                headers.push(("authorization".into(), v.clone()));
            }
            Auth::Sign { creds, skew_secs } => {
                let ts = sigv4::amz_date(now_secs() + skew_secs);
                let payload = match &req.payload {
                    Payload::Sha256 => sha256_hex(&req.body),
                    Payload::Literal(p) => p.clone(),
                };
                headers.push(("x-amz-date".into(), ts.clone()));
                headers.push(("x-amz-content-sha256".into(), payload.clone()));
                headers.sort();
                let mut signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
                signed.dedup();
                let list: Vec<(&str, &[u8])> = headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_bytes()))
                    .collect();
                let parts = RequestParts {
                    method: req.method,
                    raw_path: &req.path,
                    raw_query: req.query.as_deref(),
                    headers: &list,
                };
                let params = SigningParams {
                    credentials: creds,
                    region: REGION,
                    timestamp: &ts,
                };
                let authz = sigv4::sign_request(&parts, &params, &signed, &payload).unwrap();
                let seed = authz.rsplit_once("Signature=").unwrap().1.to_owned();
                chunk_signing = Some(ChunkSigning {
                    signing_key: sigv4::signing_key(&creds.secret, &ts[..8], REGION),
                    timestamp: ts.clone(),
                    scope: format!("{}/{REGION}/s3/aws4_request", &ts[..8]),
                    seed_signature: seed,
                });
                headers.push(("authorization".into(), authz));
            }
        }
        let target = match &req.query {
            Some(q) => format!("{}?{q}", req.path),
            None => req.path.clone(),
        };
        let mut head = format!("{} {target} HTTP/1.1\r\n", req.method);
        for (n, v) in &headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        let len = req.body.len();
        let announced = req.headers.iter().any(|(n, _)| n == "content-length");
        if !announced && (len > 0 || matches!(req.method, "PUT" | "POST")) {
            head.push_str(&format!("content-length: {len}\r\n"));
        }
        head.push_str("connection: close\r\n\r\n");
        Prepared {
            head: head.into_bytes(),
            body: req.body.clone(),
            chunk_signing,
        }
    }

    /// Sends a request on a new connection and reads its response. The body is written by
    /// another task while the response is read, so a server that answers before it has read
    /// the whole body (a refusal) is seen answering.
    async fn send(&self, req: Request) -> Response {
        let p = self.prepare(&req);
        self.send_prepared(p, req.method == "HEAD").await
    }

    async fn send_prepared(&self, p: Prepared, head: bool) -> Response {
        let stream = TcpStream::connect(self.addr).await.unwrap();
        let (mut r, mut w) = stream.into_split();
        let writer = tokio::spawn(async move {
            // The server may close early (a refusal): write errors are not the test's concern.
            if w.write_all(&p.head).await.is_ok() && !p.body.is_empty() {
                let _ = w.write_all(&p.body).await;
            }
            w
        });
        let resp = read_response(&mut r, head).await;
        writer.abort();
        resp
    }

    /// Opens a request and sends its head and the first `sent` body bytes, leaving the rest
    /// (and the connection) open.
    async fn start(&self, req: Request, sent: usize) -> Open {
        let p = self.prepare(&req);
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(&p.head).await.unwrap();
        stream.write_all(&p.body[..sent]).await.unwrap();
        Open {
            stream,
            rest: p.body[sent..].to_vec(),
        }
    }

    /// A presigned GET of `path`, made `age_secs` ago and valid for `expires_secs`.
    fn presigned_get(&self, path: &str, age_secs: i64, expires_secs: u64) -> Request {
        let host = self.addr.to_string();
        let headers: [(&str, &[u8]); 1] = [("host", host.as_bytes())];
        let parts = RequestParts {
            method: "GET",
            raw_path: path,
            raw_query: None,
            headers: &headers,
        };
        let ts = sigv4::amz_date(now_secs() - age_secs);
        let creds = Credentials::new(AK, SK);
        let params = SigningParams {
            credentials: &creds,
            region: REGION,
            timestamp: &ts,
        };
        let query = sigv4::presign(&parts, &params, expires_secs, &["host"]).unwrap();
        Request::new("GET", path).query(query)
    }

    async fn create_bucket(&self, bucket: &str) {
        self.send(Request::new("PUT", format!("/{bucket}")))
            .await
            .ok(200);
    }

    async fn put(&self, bucket: &str, key: &str, body: &[u8]) -> Response {
        self.send(Request::new("PUT", format!("/{bucket}/{key}")).body(body.to_vec()))
            .await
    }

    async fn get(&self, bucket: &str, key: &str) -> Response {
        self.send(Request::new("GET", format!("/{bucket}/{key}")))
            .await
    }

    async fn get_range(&self, bucket: &str, key: &str, range: &str) -> Response {
        self.send(Request::new("GET", format!("/{bucket}/{key}")).header("range", range))
            .await
    }

    /// Asserts the object reads back as `body`.
    async fn expect_object(&self, bucket: &str, key: &str, body: &[u8]) {
        let g = self.get(bucket, key).await;
        g.ok(200);
        assert_eq!(g.body.len(), body.len(), "{bucket}/{key}");
        assert!(g.body == body, "{bucket}/{key}: different bytes");
        assert_eq!(g.header("etag"), Some(quoted_md5(body).as_str()));
    }

    /// A signed ListBuckets works: the endpoint still serves.
    async fn still_serving(&self) {
        let r = Client::signed(self.addr)
            .send(Request::new("GET", "/"))
            .await;
        r.ok(200);
        assert!(r.text().contains("<ListAllMyBucketsResult"), "{}", r.text());
    }
}

/// A request whose body is still being sent.
struct Open {
    stream: TcpStream,
    rest: Vec<u8>,
}

impl Open {
    /// Sends the rest of the body and reads the response.
    async fn finish(mut self) -> Response {
        let rest = std::mem::take(&mut self.rest);
        self.stream.write_all(&rest).await.unwrap();
        read_response(&mut self.stream, false).await
    }

    /// Reads the response without sending more.
    async fn response(mut self) -> Response {
        read_response(&mut self.stream, false).await
    }
}

/// The configuration of a test node: port 0 everywhere, the test key, 64 KiB chunks.
fn node_config() -> NodeConfig {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    config.s3 = S3Section {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        keys: vec![format!("{AK}:{SK}")],
        ..S3Section::default()
    };
    config.blob = BlobConfig {
        chunk_size: CS as u32,
        threshold: CS as u64,
        ..BlobConfig::default()
    };
    config
}

/// A whole node serving S3 on port 0.
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

    /// The S3 listener's address.
    fn s3(&self) -> SocketAddr {
        self.s3_listener.expect("an S3 listener")
    }

    fn client(&self) -> Client {
        Client::signed(self.s3())
    }

    async fn stop(self) {
        self.0.stop().await;
    }
}

/// Creates a multipart upload and returns its id.
async fn create_upload(c: &Client, bucket: &str, key: &str) -> String {
    let r = c
        .send(Request::new("POST", format!("/{bucket}/{key}")).query("uploads"))
        .await;
    r.ok(200);
    xml_one(&r.body, "UploadId").expect("an UploadId")
}

// ----- round trips ------------------------------------------------------------------------

/// Objects around the chunk size and inline threshold (64 KiB) round-trip byte-equal with
/// their MD5 ETag and BLAKE3; random ranges return exactly their slices; ranges outside the
/// object are 416 InvalidRange.
#[tokio::test]
async fn signed_round_trips_with_ranges_over_several_chunks() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("round-trip").await;
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    for size in [0, 1, CS - 1, CS, CS + 1, 10 * CS + 7] {
        let body = random_bytes(&mut rng, size);
        let key = format!("dir/obj-{size}");
        let put = c.put("round-trip", &key, &body).await;
        put.ok(200);
        let etag = quoted_md5(&body);
        let b3 = blake3::hash(&body).to_hex().to_string();
        assert_eq!(put.header("etag"), Some(etag.as_str()), "size {size}");
        assert_eq!(put.header("x-meridian-blake3"), Some(b3.as_str()));

        // Past the threshold the object is chunked, in ceil(size / CS) chunks.
        let head = node
            .state
            .objects
            .head("round-trip", key.as_bytes())
            .await
            .unwrap();
        let m = &head.manifest;
        assert_eq!(m.size, size as u64);
        if size > CS {
            assert!(m.inline.is_none(), "size {size} is chunked");
            assert_eq!(m.chunks.len(), size.div_ceil(CS), "size {size}");
        } else {
            assert!(m.chunks.is_empty(), "size {size} is inline");
        }

        let get = c.get("round-trip", &key).await;
        get.ok(200);
        assert!(get.body == body, "size {size}: different bytes");
        assert_eq!(get.header("etag"), Some(etag.as_str()));
        assert_eq!(get.header("x-meridian-blake3"), Some(b3.as_str()));
        assert_eq!(
            get.header("content-length"),
            Some(size.to_string().as_str())
        );
        let h = c
            .send(Request::new("HEAD", format!("/round-trip/{key}")))
            .await;
        h.ok(200);
        assert_eq!(h.header("content-length"), Some(size.to_string().as_str()));
        assert_eq!(h.header("etag"), Some(etag.as_str()));

        if size > 0 {
            for _ in 0..12 {
                let a = rng.random_range(0..size);
                // Sometimes past the end: clamped.
                let b = rng.random_range(a..size + CS / 2);
                let last = b.min(size - 1);
                let r = c
                    .get_range("round-trip", &key, &format!("bytes={a}-{b}"))
                    .await;
                r.ok(206);
                assert!(
                    r.body == body[a..=last],
                    "size {size} bytes={a}-{b}: got {} bytes",
                    r.body.len()
                );
                assert_eq!(
                    r.header("content-range"),
                    Some(format!("bytes {a}-{last}/{size}").as_str())
                );
            }
            let n = rng.random_range(1..=size);
            let r = c
                .get_range("round-trip", &key, &format!("bytes=-{n}"))
                .await;
            r.ok(206);
            assert!(r.body == body[size - n..], "suffix {n} of {size}");
            let r = c
                .get_range("round-trip", &key, &format!("bytes={}-", size - 1))
                .await;
            r.ok(206);
            assert_eq!(r.body, body[size - 1..]);
        }
        for bad in [
            format!("bytes={size}-"),
            format!("bytes={}-{}", size + 10, size + 20),
            "bytes=-0".to_owned(),
        ] {
            let r = c.get_range("round-trip", &key, &bad).await;
            assert_eq!(
                r.header("content-range"),
                Some(format!("bytes */{size}").as_str()),
                "a 416 names the object's size (RFC 9110)"
            );
            r.s3_error(416, "InvalidRange");
        }
    }
    // The object service's series in /metrics count what went through it.
    let text = node.state.render_metrics();
    assert!(text.ends_with("# EOF\n"));
    let value = |series: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} missing from /metrics"))
    };
    let total: u64 = [0, 1, CS - 1, CS, CS + 1, 10 * CS + 7]
        .iter()
        .map(|&s| s as u64)
        .sum();
    assert!(value("meridian_blob_bytes_total{dir=\"in\"} ") >= total);
    assert!(value("meridian_blob_bytes_total{dir=\"out\"} ") >= total);
    assert!(value("meridian_blob_admitted_total{class=\"client\"} ") > 0);
    assert_eq!(value("meridian_blob_active{class=\"client\"} "), 0);
    assert!(value("meridian_blob_stored_bytes ") > 0);
    node.stop().await;
}

// ----- body signatures --------------------------------------------------------------------

/// The body of an aws-chunked PUT of `data` (in `CS`-sized chunks) with its signing request.
fn chunked_put(c: &Client, bucket: &str, key: &str, data: &[u8]) -> (Prepared, Vec<u8>) {
    let encoded_len = encode_aws_chunked(
        &data.chunks(CS).collect::<Vec<_>>(),
        Some(&ChunkSigning {
            signing_key: [0; 32],
            timestamp: String::new(),
            scope: String::new(),
            seed_signature: String::new(),
        }),
        None,
    )
    .len();
    let req = Request::new("PUT", format!("/{bucket}/{key}"))
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", data.len().to_string())
        .header("content-length", encoded_len.to_string())
        .payload(sigv4::STREAMING_PAYLOAD);
    // `content-length` is signed here (as SDKs do), so `prepare` does not add another; the
    // body is made afterwards, its chunk signatures chained from the request's.
    let mut p = c.prepare(&req);
    let signing = p.chunk_signing.clone().unwrap();
    let body = encode_aws_chunked(&data.chunks(CS).collect::<Vec<_>>(), Some(&signing), None);
    assert_eq!(body.len(), encoded_len);
    p.body = body.clone();
    (p, body)
}

/// A signed aws-chunked upload succeeds; the same with one payload byte flipped fails its
/// chunk signature and leaves the old object; a signed x-amz-content-sha256 that is not the
/// body's is `XAmzContentSHA256Mismatch` and commits nothing.
#[tokio::test]
async fn aws_chunked_bodies_and_signed_hashes_are_checked_before_commit() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("streams").await;
    let mut rng = ChaCha8Rng::seed_from_u64(2);

    let old = random_bytes(&mut rng, 3 * CS + 123);
    let (p, _) = chunked_put(&c, "streams", "obj", &old);
    let r = c.send_prepared(p, false).await;
    r.ok(200);
    assert_eq!(r.header("etag"), Some(quoted_md5(&old).as_str()));
    c.expect_object("streams", "obj", &old).await;

    // One byte of the last data chunk flipped (so the server has read the whole body when it
    // refuses): that chunk's signature no longer matches.
    let new = random_bytes(&mut rng, 2 * CS + 77);
    let (mut p, body) = chunked_put(&c, "streams", "obj", &new);
    let final_chunk = format!("0;chunk-signature={}\r\n\r\n", "0".repeat(64)).len();
    let last_data_byte = body.len() - final_chunk - 2 - 1;
    p.body[last_data_byte] ^= 0x20;
    c.send_prepared(p, false)
        .await
        .s3_error(403, "SignatureDoesNotMatch");
    c.expect_object("streams", "obj", &old).await;

    // A flipped byte in the first chunk: refused as well, whenever the server notices.
    let (mut p, _) = chunked_put(&c, "streams", "obj", &new);
    let first_data_byte = format!("{:x};chunk-signature={}\r\n", CS, "0".repeat(64)).len();
    p.body[first_data_byte] ^= 0x01;
    c.send_prepared(p, false)
        .await
        .s3_error(403, "SignatureDoesNotMatch");
    c.expect_object("streams", "obj", &old).await;

    // Chunks reordered (each still carrying its own signature): the chain breaks.
    let (mut p, body) = chunked_put(&c, "streams", "obj", &new);
    let first_len = format!("{:x};chunk-signature={}\r\n", CS, "0".repeat(64)).len() + CS + 2;
    let (first, second) = (
        body[..first_len].to_vec(),
        body[first_len..2 * first_len].to_vec(),
    );
    p.body[..first_len].copy_from_slice(&second);
    p.body[first_len..2 * first_len].copy_from_slice(&first);
    c.send_prepared(p, false)
        .await
        .s3_error(403, "SignatureDoesNotMatch");
    c.expect_object("streams", "obj", &old).await;

    // x-amz-decoded-content-length that is not the body's decoded length.
    let signing_len = |data: &[u8]| chunked_put(&c, "streams", "obj", data).1.len();
    let req = Request::new("PUT", "/streams/obj")
        .header("content-encoding", "aws-chunked")
        .header("x-amz-decoded-content-length", (new.len() + 1).to_string())
        .header("content-length", signing_len(&new).to_string())
        .payload(sigv4::STREAMING_PAYLOAD);
    let mut p = c.prepare(&req);
    let signing = p.chunk_signing.clone().unwrap();
    p.body = encode_aws_chunked(&new.chunks(CS).collect::<Vec<_>>(), Some(&signing), None);
    c.send_prepared(p, false)
        .await
        .s3_error(400, "IncompleteBody");
    c.expect_object("streams", "obj", &old).await;

    // A well-formed Content-MD5 of other bytes.
    use base64::Engine;
    let other_md5 = base64::engine::general_purpose::STANDARD.encode(md5(b"other"));
    c.send(
        Request::new("PUT", "/streams/obj")
            .header("content-md5", other_md5)
            .body(new.clone()),
    )
    .await
    .s3_error(400, "BadDigest");
    c.expect_object("streams", "obj", &old).await;

    // The signed hash of another body.
    for key in ["obj", "fresh"] {
        c.send(
            Request::new("PUT", format!("/streams/{key}"))
                .body(new.clone())
                .payload(&sha256_hex(b"some other body")),
        )
        .await
        .s3_error(400, "XAmzContentSHA256Mismatch");
    }
    c.expect_object("streams", "obj", &old).await;
    c.get("streams", "fresh").await.s3_error(404, "NoSuchKey");
    node.stop().await;
}

// ----- hostile inputs ---------------------------------------------------------------------

/// Missing, garbage, unknown-key, wrongly signed and skewed requests are refused with S3's
/// codes; a signed request works after each.
#[tokio::test]
async fn authentication_failures_get_s3_errors() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("guarded").await;
    c.put("guarded", "k", b"secret").await.ok(200);
    let cases: [(Auth, u16, &str); 6] = [
        (Auth::Anonymous, 403, "AccessDenied"),
        (
            Auth::Raw("garbage".into()),
            400,
            "AuthorizationHeaderMalformed",
        ),
        (
            Auth::Raw("AWS4-HMAC-SHA256 Credential=x, Nope".into()),
            400,
            "AuthorizationHeaderMalformed",
        ),
        (
            Auth::Sign {
                creds: Credentials::new("AKIDNOBODYKNOWS", SK),
                skew_secs: 0,
            },
            403,
            "InvalidAccessKeyId",
        ),
        (
            Auth::Sign {
                creds: Credentials::new(AK, "not-the-right-secret"),
                skew_secs: 0,
            },
            403,
            "SignatureDoesNotMatch",
        ),
        (
            Auth::Sign {
                creds: Credentials::new(AK, SK),
                skew_secs: -3600,
            },
            403,
            "RequestTimeTooSkewed",
        ),
    ];
    for (auth, status, code) in cases {
        let bad = c.with_auth(auth);
        for req in [
            Request::new("GET", "/guarded/k"),
            Request::new("PUT", "/guarded/k").body(&b"overwritten"[..]),
            Request::new("GET", "/"),
        ] {
            bad.send(req).await.s3_error(status, code);
        }
        c.still_serving().await;
        c.expect_object("guarded", "k", b"secret").await;
    }
    // Presigned URLs: valid, tampered with, expired.
    let anon = c.with_auth(Auth::Anonymous);
    let r = anon.send(c.presigned_get("/guarded/k", 0, 600)).await;
    r.ok(200);
    assert_eq!(r.body, b"secret");
    let mut tampered = c.presigned_get("/guarded/k", 0, 600);
    let q = tampered.query.take().unwrap();
    let (before, sig) = q.rsplit_once("X-Amz-Signature=").unwrap();
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    tampered.query = Some(format!("{before}X-Amz-Signature={flipped}{}", &sig[1..]));
    anon.send(tampered)
        .await
        .s3_error(403, "SignatureDoesNotMatch");
    anon.send(c.presigned_get("/guarded/k", 7200, 60))
        .await
        .s3_error(403, "AccessDenied");
    // Signed for one object, used for another.
    let mut moved = c.presigned_get("/guarded/k", 0, 600);
    moved.path = "/guarded/other".into();
    anon.send(moved)
        .await
        .s3_error(403, "SignatureDoesNotMatch");
    c.still_serving().await;
    node.stop().await;
}

/// Invalid bucket names (path traversal among them), a 2000-byte key, bad part numbers and
/// upload ids, a garbage Range (ignored) and a garbage Content-MD5.
#[tokio::test]
async fn invalid_names_and_arguments_are_refused() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("args").await;
    c.put("args", "k", b"whole object").await.ok(200);
    for path in [
        "/../etc",
        "/%2e%2e/etc/passwd",
        "/UPPER",
        "/a",
        "/UPPER/key",
    ] {
        c.send(Request::new("GET", path))
            .await
            .s3_error(400, "InvalidBucketName");
        c.send(Request::new("PUT", path).body(&b"x"[..]))
            .await
            .s3_error(400, "InvalidBucketName");
    }
    let long = "k".repeat(2000);
    c.put("args", &long, b"x")
        .await
        .s3_error(400, "KeyTooLongError");
    c.get("args", &long).await.s3_error(400, "KeyTooLongError");

    let id = create_upload(&c, "args", "big").await;
    for n in ["0", "10001", "-1", "x"] {
        c.send(
            Request::new("PUT", "/args/big")
                .query(format!("partNumber={n}&uploadId={id}"))
                .body(&b"part"[..]),
        )
        .await
        .s3_error(400, "InvalidArgument");
    }
    for garbage in ["garbage", "%00%01", "AAAA", &"z".repeat(300)] {
        c.send(
            Request::new("PUT", "/args/big")
                .query(format!("partNumber=1&uploadId={garbage}"))
                .body(&b"part"[..]),
        )
        .await
        .s3_error(404, "NoSuchUpload");
        c.send(Request::new("GET", "/args/big").query(format!("uploadId={garbage}")))
            .await
            .s3_error(404, "NoSuchUpload");
    }
    // The real upload still takes a part.
    c.send(
        Request::new("PUT", "/args/big")
            .query(format!("partNumber=1&uploadId={id}"))
            .body(&b"part"[..]),
    )
    .await
    .ok(200);

    for range in [
        "garbage",
        "bytes=5-2",
        "bytes=a-b",
        "items=0-1",
        "bytes=0-1,3-4",
    ] {
        let r = c.get_range("args", "k", range).await;
        r.ok(200);
        assert_eq!(r.body, b"whole object", "{range}");
    }
    for md5 in ["garbage", "AAAA", "!!!"] {
        c.send(
            Request::new("PUT", "/args/md5")
                .header("content-md5", md5)
                .body(&b"data"[..]),
        )
        .await
        .s3_error(400, "InvalidDigest");
    }
    c.get("args", "md5").await.s3_error(404, "NoSuchKey");
    c.put("nowhere", "k", b"x")
        .await
        .s3_error(404, "NoSuchBucket");
    c.send(Request::new("HEAD", "/nowhere")).await.ok(404);
    c.send(Request::new("DELETE", "/args"))
        .await
        .s3_error(409, "BucketNotEmpty");
    c.send(Request::new("GET", "/args").query("versioning"))
        .await
        .s3_error(501, "NotImplemented");
    c.still_serving().await;
    node.stop().await;
}

/// CompleteMultipartUpload with malformed XML, and with a body over the 1 MiB XML limit.
#[tokio::test]
async fn bad_multipart_completions_are_refused() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("mpu").await;
    let id = create_upload(&c, "mpu", "obj").await;
    for xml in [
        &b"<not xml"[..],
        b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>",
        b"\xff\xfe garbage",
    ] {
        c.send(
            Request::new("POST", "/mpu/obj")
                .query(format!("uploadId={id}"))
                .body(xml),
        )
        .await
        .s3_error(400, "MalformedXML");
    }
    // 2 MiB of well-formed parts: refused for its size.
    let mut big = String::from("<CompleteMultipartUpload>");
    while big.len() < 2 << 20 {
        big.push_str("<Part><PartNumber>1</PartNumber><ETag>\"0123\"</ETag></Part>");
    }
    big.push_str("</CompleteMultipartUpload>");
    c.send(
        Request::new("POST", "/mpu/obj")
            .query(format!("uploadId={id}"))
            .body(big.into_bytes()),
    )
    .await
    .s3_error(400, "MaxMessageLengthExceeded");
    c.get("mpu", "obj").await.s3_error(404, "NoSuchKey");
    // The upload is still open.
    let r = c.send(Request::new("GET", "/mpu").query("uploads")).await;
    r.ok(200);
    assert_eq!(xml_all(&r.body, "UploadId"), vec![id]);
    c.still_serving().await;
    node.stop().await;
}

/// A PUT announcing more bytes than it sends, then closing its side: no object is committed
/// (the old one stays).
#[tokio::test]
async fn a_body_cut_short_commits_nothing() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("cut").await;
    c.put("cut", "k", b"old value").await.ok(200);
    for (key, announced, sent) in [("k", 1000, 10), ("k", 4 * CS, 3 * CS), ("new", 5000, 1)] {
        let body = vec![b'n'; announced];
        let mut req = Request::new("PUT", format!("/cut/{key}")).body(body);
        req.payload = Payload::Literal(sigv4::UNSIGNED_PAYLOAD.into());
        let mut open = c.start(req, sent).await;
        open.stream.shutdown().await.unwrap();
        // The server answers IncompleteBody and closes the connection.
        let got = read_to_close(&mut open.stream).await;
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.starts_with("HTTP/1.1 400 ") && got.contains("<Code>IncompleteBody</Code>"),
            "{key}: {got}"
        );
    }
    c.expect_object("cut", "k", b"old value").await;
    c.get("cut", "new").await.s3_error(404, "NoSuchKey");
    node.stop().await;
}

/// Headers that never finish: the connection is closed after `s3.header_read_timeout_ms`.
#[tokio::test]
async fn headers_that_never_finish_are_cut_off() {
    let node = Node::start(|c| c.s3.header_read_timeout_ms = 300).await;
    for partial in [
        &b""[..],
        b"GET / HTTP/1.1\r\n",
        b"PUT /b/k HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nx-slow: ",
    ] {
        let mut s = TcpStream::connect(node.s3()).await.unwrap();
        s.write_all(partial).await.unwrap();
        let got = read_to_close(&mut s).await;
        let got = String::from_utf8_lossy(&got);
        assert!(
            got.is_empty() || got.starts_with("HTTP/1.1 408"),
            "{partial:?}: {got}"
        );
    }
    node.client().still_serving().await;
    node.stop().await;
}

/// More connections than `s3.max_connections`: the extra one gets a 503 and is closed; the
/// ones admitted finish normally, and then there is room again.
#[tokio::test]
async fn connections_over_the_cap_get_503() {
    let node = Node::start(|c| c.s3.max_connections = 2).await;
    let c = node.client();
    c.create_bucket("cap").await;
    let conns = node
        .state
        .metrics
        .connections(meridian_server::metrics::Frontend::S3);
    let open = || conns.open.load(std::sync::atomic::Ordering::Relaxed);
    // The CreateBucket connection has been let go: both slots are free.
    eventually("no S3 connection open", || async move {
        (open() == 0).then_some(())
    })
    .await;
    // Two uploads hold both connections (their headers are complete: no header timeout).
    let mut held = Vec::new();
    for i in 0..2 {
        let body = vec![i as u8; 10_000];
        held.push(
            c.start(Request::new("PUT", format!("/cap/k{i}")).body(body), 100)
                .await,
        );
    }
    eventually("two S3 connections open", || async move {
        (open() == 2).then_some(())
    })
    .await;
    let mut extra = TcpStream::connect(node.s3()).await.unwrap();
    let got = read_to_close(&mut extra).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    assert!(got.contains("connection: close"), "{got}");
    assert!(
        got.contains("<Code>SlowDown</Code>"),
        "an S3 error, not the HTTP API's: {got}"
    );
    for h in held {
        h.finish().await.ok(200);
    }
    // Room again once the server has let them go.
    eventually("no S3 connection open", || async move {
        (open() == 0).then_some(())
    })
    .await;
    for i in 0..2u8 {
        c.expect_object("cap", &format!("k{i}"), &[i; 10_000]).await;
    }
    node.stop().await;
}

// ----- admission control ------------------------------------------------------------------

/// With `blob.max_active_transfers = 2` and `blob.max_queued = 1`: two open uploads run, a
/// third waits, a fourth is refused with `503 SlowDown`, `Retry-After` and the
/// `too_many_transfers` text; once the first two finish a new upload succeeds.
#[tokio::test]
async fn admission_control_queues_then_refuses_uploads() {
    let node = Node::start(|c| {
        c.blob.max_active_transfers = 2;
        c.blob.max_queued = 1;
        c.blob.queue_timeout_ms = 2_000;
    })
    .await;
    let c = node.client();
    c.create_bucket("adm").await;
    let adm = node.state.objects.admission();
    let total = |f: fn(&meridian_blob::admission::AdmissionStats) -> [usize; 3]| {
        f(&adm.stats()).iter().sum::<usize>()
    };
    let upload = |i: u8| {
        Request::new("PUT", format!("/adm/k{i}"))
            .body(vec![i; 3 * CS])
            .payload(sigv4::UNSIGNED_PAYLOAD)
    };
    let a = c.start(upload(1), 1000).await;
    let b = c.start(upload(2), 1000).await;
    eventually("two uploads run", || async move {
        (total(|s| s.active) == 2).then_some(())
    })
    .await;
    let waiting = c.start(upload(3), 1000).await;
    eventually("a third waits", || async move {
        (total(|s| s.queued) == 1).then_some(())
    })
    .await;
    assert_eq!(total(|s| s.active), 2);

    // The fourth: refused at once (queue full) or, if the third has given up meanwhile, after
    // its own wait; either way a SlowDown.
    let mut small = upload(4);
    small.body.truncate(10);
    let refused = c.send(small).await;
    refused.s3_error(503, "SlowDown");
    assert_eq!(refused.header("retry-after"), Some("1"), "{refused:?}");
    assert!(
        refused.text().contains("too_many_transfers"),
        "{}",
        refused.text()
    );
    // The waiting one gives up after queue_timeout_ms: SlowDown as well.
    let gave_up = waiting.response().await;
    gave_up.s3_error(503, "SlowDown");
    assert!(gave_up.header("retry-after").is_some());
    assert!(
        gave_up.text().contains("too_many_transfers"),
        "{}",
        gave_up.text()
    );
    assert_eq!(total(|s| s.active), 2, "the first two still run");

    a.finish().await.ok(200);
    b.finish().await.ok(200);
    c.expect_object("adm", "k1", &[1; 3 * CS]).await;
    c.expect_object("adm", "k2", &[2; 3 * CS]).await;
    eventually("no transfer active", || async move {
        (total(|s| s.active) == 0).then_some(())
    })
    .await;
    c.send(upload(5)).await.ok(200);
    c.expect_object("adm", "k5", &[5; 3 * CS]).await;
    for k in ["k3", "k4"] {
        c.get("adm", k).await.s3_error(404, "NoSuchKey");
    }
    node.stop().await;
}

// ----- s3.open ----------------------------------------------------------------------------

/// `s3.open = true` serves unsigned requests; without it and without keys the configuration
/// is refused, naming `--s3-key`.
#[tokio::test]
async fn open_endpoint_serves_unsigned_requests() {
    let node = Node::start(|c| {
        c.s3.keys.clear();
        c.s3.open = true;
    })
    .await;
    let anon = node.client().with_auth(Auth::Anonymous);
    anon.create_bucket("public").await;
    let body: Vec<u8> = (0..3 * CS + 5).map(|i| (i % 251) as u8).collect();
    anon.put("public", "obj", &body).await.ok(200);
    anon.expect_object("public", "obj", &body).await;
    let r = anon
        .send(Request::new("GET", "/public").query("list-type=2"))
        .await;
    r.ok(200);
    assert_eq!(xml_all(&r.body, "Key"), vec!["obj".to_owned()]);
    anon.send(Request::new("DELETE", "/public/obj"))
        .await
        .ok(204);
    anon.get("public", "obj").await.s3_error(404, "NoSuchKey");
    node.stop().await;

    let mut config = node_config();
    config.s3.keys.clear();
    config.s3.open = false;
    let e = config.validate().unwrap_err().to_string();
    assert!(e.contains("--s3-key"), "{e}");
}

// ----- cluster ----------------------------------------------------------------------------

/// A 2-DC × 2-node embedded cluster, each node serving S3 on port 0.
async fn s3_cluster() -> Embedded {
    let mut node = node_config();
    node.s3.listen = Some("127.0.0.1:0".parse().unwrap());
    let cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        base_port: 0,
        wan_latency: Duration::ZERO,
        intra_dc: meridian_net::wan::LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        node,
        ..EmbeddedConfig::default()
    };
    crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

fn cluster_client(c: &Embedded, i: usize) -> Client {
    Client::signed(c.states[i].config.s3.listen.expect("an S3 address"))
}

/// An object put through node 0 reads back byte-equal through node 3 and lists through
/// node 2; an emptied bucket is dropped, after which HeadBucket is 404 on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_nodes_serve_one_namespace() {
    let cluster = s3_cluster().await;
    let clients: Vec<Client> = (0..4).map(|i| cluster_client(&cluster, i)).collect();
    let n = &clients;
    n[0].create_bucket("shared").await;
    for (i, c) in n.iter().enumerate() {
        eventually(&format!("node {i} knows the bucket"), || async move {
            (c.send(Request::new("HEAD", "/shared")).await.status == 200).then_some(())
        })
        .await;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let body = random_bytes(&mut rng, 5 * CS + 3);
    let put = n[0].put("shared", "dir/obj", &body).await;
    put.ok(200);
    assert_eq!(put.header("etag"), Some(quoted_md5(&body).as_str()));
    let got = eventually("node 3 reads the object", || async move {
        let g = n[3].get("shared", "dir/obj").await;
        (g.status == 200).then_some(g)
    })
    .await;
    assert!(got.body == body, "node 3: different bytes");
    // Every node knows the bucket is S3's: its keys are refused over RESP without a password.
    for (i, m) in cluster.members.iter().enumerate() {
        let resp = m.resp.expect("a RESP address");
        let line = resp_line(resp, &["GET", "shared:dir/obj"]).await;
        assert!(
            line.starts_with("-NOPERM bucket 'shared'"),
            "node {i}: {line}"
        );
    }
    assert_eq!(got.header("etag"), Some(quoted_md5(&body).as_str()));
    let b3 = blake3::hash(&body).to_hex().to_string();
    assert_eq!(got.header("x-meridian-blake3"), Some(b3.as_str()));
    let r = n[3]
        .get_range("shared", "dir/obj", &format!("bytes={}-{}", CS - 5, 3 * CS))
        .await;
    r.ok(206);
    assert!(r.body == body[CS - 5..=3 * CS], "a range across chunks");
    eventually("node 2 lists the object", || async move {
        let r = n[2]
            .send(Request::new("GET", "/shared").query("list-type=2&prefix=dir%2F"))
            .await;
        (r.status == 200 && xml_all(&r.body, "Key") == ["dir/obj"]).then_some(())
    })
    .await;

    // Not empty: refused.
    n[1].send(Request::new("DELETE", "/shared"))
        .await
        .s3_error(409, "BucketNotEmpty");
    n[0].send(Request::new("DELETE", "/shared/dir/obj"))
        .await
        .ok(204);
    eventually("the emptied bucket is dropped", || async move {
        let r = n[1].send(Request::new("DELETE", "/shared")).await;
        match r.status {
            204 => Some(()),
            409 => None,
            _ => panic!("{r:?}: {}", r.text()),
        }
    })
    .await;
    for (i, c) in n.iter().enumerate() {
        eventually(
            &format!("node {i} no longer has the bucket"),
            || async move {
                (c.send(Request::new("HEAD", "/shared")).await.status == 404).then_some(())
            },
        )
        .await;
        c.get("shared", "dir/obj")
            .await
            .s3_error(404, "NoSuchBucket");
    }
    cluster.shutdown().await;
}

// ----- listings cut short by their budget ---------------------------------------------------

/// Stores a one-byte object straight through the node's object service (no request each).
async fn put_direct(node: &Node, bucket: &str, key: &str) {
    let body: meridian_server::objects::ByteStream = Box::pin(futures_util::stream::iter([Ok(
        bytes::Bytes::from_static(b"v"),
    )]));
    node.state
        .objects
        .put(bucket, key.as_bytes(), body, Default::default(), None)
        .await
        .unwrap();
}

/// Pages through a delimited ListObjectsV2 of `bucket` with `max-keys`: every key and common
/// prefix in the order the pages give them, and how many pages were truncated short of
/// `max-keys`.
async fn list_all_pages(c: &Client, bucket: &str, max_keys: usize) -> (Vec<String>, usize) {
    let mut items = Vec::new();
    let mut short = 0;
    let mut token: Option<String> = None;
    for _ in 0..1000 {
        let mut q = format!("list-type=2&delimiter=%2F&max-keys={max_keys}");
        if let Some(t) = &token {
            q.push_str(&format!("&continuation-token={t}"));
        }
        let r = c
            .send(Request::new("GET", format!("/{bucket}")).query(q))
            .await;
        r.ok(200);
        let mut page = xml_all(&r.body, "Key");
        page.extend(xml_all(&r.body, "CommonPrefixes").iter().map(|p| {
            p.trim_start_matches("<Prefix>")
                .trim_end_matches("</Prefix>")
                .to_owned()
        }));
        page.sort();
        assert!(page.len() <= max_keys, "{}", r.text());
        assert_eq!(
            xml_one(&r.body, "KeyCount"),
            Some(page.len().to_string()),
            "{}",
            r.text()
        );
        items.extend(page.iter().cloned());
        if xml_one(&r.body, "IsTruncated").as_deref() != Some("true") {
            assert_eq!(xml_one(&r.body, "NextContinuationToken"), None);
            return (items, short);
        }
        // Every page moves on, cut short or not.
        assert!(!page.is_empty(), "an empty truncated page: {}", r.text());
        if page.len() < max_keys {
            short += 1;
        }
        token = Some(xml_one(&r.body, "NextContinuationToken").expect("a continuation token"));
    }
    panic!("the listing never ended");
}

/// A delimited listing whose common prefixes each hold more keys than a backend listing call
/// reads costs a call a prefix, so its pages end on the listing budget (truncated short of
/// `max-keys`, with a continuation token) instead of making a call for every prefix. Paging on
/// returns every common prefix and every object exactly once, in order: also past keys under
/// a prefix that go on with U+10FFFF (they sort after the marker a prefix's token ends with).
#[tokio::test]
async fn delimited_listings_stop_on_their_budget_and_page_on_through_every_prefix_once() {
    use meridian_server::objects::LIST_BUDGET;
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("many").await;
    // More keys a prefix than the largest call a page of `per_page` makes.
    let per_page = LIST_BUDGET.calls * 2;
    let prefixes = LIST_BUDGET.calls * 3 + 5;
    let mut expected = Vec::new();
    for i in 0..prefixes {
        let cp = format!("dir{i:03}/");
        for j in 0..per_page {
            put_direct(&node, "many", &format!("{cp}k{j:03}")).await;
        }
        put_direct(&node, "many", &format!("{cp}\u{10FFFF}x")).await;
        put_direct(&node, "many", &format!("{cp}\u{10FFFF}\u{10FFFF}")).await;
        expected.push(cp);
        if i % 7 == 3 {
            // An object between two prefixes (`-` sorts before `/`).
            let key = format!("dir{i:03}-top");
            put_direct(&node, "many", &key).await;
            expected.push(key);
        }
    }
    for key in ["a-top", "z-top"] {
        put_direct(&node, "many", key).await;
        expected.push(key.to_owned());
    }
    expected.sort();

    // Pages that the budget ends.
    let (items, short) = list_all_pages(&c, "many", per_page).await;
    assert_eq!(items, expected);
    assert!(
        short >= 2,
        "the budget ended only {short} pages: it is not what these pages ran into"
    );
    // Pages that `max-keys` ends, and one that takes the whole listing.
    let (items, _) = list_all_pages(&c, "many", 3).await;
    assert_eq!(items, expected);
    let (items, _) = list_all_pages(&c, "many", 1000).await;
    assert_eq!(items, expected);
    node.stop().await;
}

/// ListMultipartUploads pages with `max-uploads`, `NextKeyMarker` and `NextUploadIdMarker`:
/// going on from the markers returns every open upload exactly once; a marker that is no
/// upload id is `InvalidArgument`.
#[tokio::test]
async fn multipart_upload_listings_page_on_with_their_markers() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("mpus").await;
    let mut expected = Vec::new();
    for i in 0..7 {
        let key = format!("obj{i}");
        let id = create_upload(&c, "mpus", &key).await;
        c.send(
            Request::new("PUT", format!("/mpus/{key}"))
                .query(format!("partNumber=1&uploadId={id}"))
                .body(b"part".to_vec()),
        )
        .await
        .ok(200);
        expected.push((id, key));
    }
    expected.sort();
    let mut seen = Vec::new();
    let mut markers: Option<(String, String)> = None;
    for _ in 0..100 {
        let mut q = "uploads&max-uploads=3".to_owned();
        if let Some((k, u)) = &markers {
            q.push_str(&format!("&key-marker={k}&upload-id-marker={u}"));
        }
        let r = c.send(Request::new("GET", "/mpus").query(q)).await;
        r.ok(200);
        let ids = xml_all(&r.body, "UploadId");
        let keys = xml_all(&r.body, "Key");
        assert!(ids.len() <= 3 && ids.len() == keys.len(), "{}", r.text());
        seen.extend(ids.iter().cloned().zip(keys.iter().cloned()));
        if xml_one(&r.body, "IsTruncated").as_deref() != Some("true") {
            break;
        }
        let next = (
            xml_one(&r.body, "NextKeyMarker").expect("NextKeyMarker"),
            xml_one(&r.body, "NextUploadIdMarker").expect("NextUploadIdMarker"),
        );
        assert_eq!(Some(&next.1), ids.last(), "{}", r.text());
        assert_eq!(Some(&next.0), keys.last(), "{}", r.text());
        markers = Some(next);
    }
    assert_eq!(seen, expected);
    c.send(Request::new("GET", "/mpus").query("uploads&upload-id-marker=nope"))
        .await
        .s3_error(400, "InvalidArgument");
    node.stop().await;
}

// ----- issue 36: sub-resources, bypasses, bad signatures ----------------------------------

/// Sends one RESP command on a new connection and returns its reply's first line (enough
/// for a status, an error or a bulk string's length).
async fn resp_line(addr: SocketAddr, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut req = bytes::BytesMut::new();
    meridian_server::resp::frame::encode_command(&mut req, &args);
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&req).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        while !buf.windows(2).any(|w| w == b"\r\n") {
            assert!(fill(&mut s, &mut buf).await, "no RESP reply");
        }
    })
    .await
    .expect("a RESP reply in time");
    let end = buf.windows(2).position(|w| w == b"\r\n").unwrap();
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Every sub-resource S3 defines that Meridian does not serve, sent with every method to a
/// bucket and to an object (a body for PUT and POST), is 501 NotImplemented naming it, and
/// after each the object still holds its bytes and the bucket still exists; a `versionId`
/// other than `null` is refused on every method the same way. (Before the routing table,
/// `PUT ?acl` replaced the object, `DELETE ?tagging` deleted it and `DELETE
/// ?publicAccessBlock` deleted the emptied bucket.)
#[tokio::test]
async fn sub_resources_never_touch_objects_or_buckets() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("keep").await;
    c.create_bucket("empty").await;
    let body = b"the object's bytes".to_vec();
    c.put("keep", "obj", &body).await.ok(200);
    let xml = b"<Tagging><TagSet><Tag><Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>";
    for sub in meridian_s3::UNSERVED_SUBRESOURCES {
        for path in ["/keep/obj", "/keep", "/empty"] {
            for method in ["GET", "PUT", "DELETE", "POST", "HEAD"] {
                let mut req = Request::new(method, path).query(sub.to_string());
                if matches!(method, "PUT" | "POST") {
                    req = req.body(&xml[..]);
                }
                let r = c.send(req).await;
                if method == "HEAD" {
                    assert_eq!(r.status, 501, "{method} {path}?{sub}");
                } else {
                    r.s3_error(501, "NotImplemented");
                    let named = format!("sub-resource &apos;{sub}&apos;");
                    assert!(r.text().contains(&named), "{}", r.text());
                }
                c.expect_object("keep", "obj", &body).await;
                c.send(Request::new("HEAD", "/empty")).await.ok(200);
            }
        }
    }
    for method in ["GET", "PUT", "DELETE", "HEAD"] {
        let req = Request::new(method, "/keep/obj")
            .query("versionId=3HL4kqtJlcpXroDTDmJ")
            .body(if method == "PUT" {
                &b"new"[..]
            } else {
                &b""[..]
            });
        let r = c.send(req).await;
        assert_eq!(r.status, 400, "{method} ?versionId: {}", r.text());
        c.expect_object("keep", "obj", &body).await;
    }
    // The null version is the object; unknown parameters that are not sub-resources work.
    let r = c
        .send(
            Request::new("GET", "/keep/obj")
                .query("versionId=null&response-content-type=text%2Fplain&x-id=GetObject"),
        )
        .await;
    r.ok(200);
    assert_eq!(r.body, body);
    c.still_serving().await;
    node.stop().await;
}

/// Without a `requirepass`, the keys of an S3 bucket are refused over RESP (`NOPERM`,
/// naming the bucket) and HTTP (`/kv` and `/b`: 403 `S3_BUCKET`), reads and writes alike,
/// while other keys and KEYS listings work; the object is unchanged. With a `requirepass`,
/// a client that holds it reaches the object.
#[tokio::test]
async fn s3_objects_are_out_of_reach_of_resp_and_http_without_a_password() {
    let node = Node::start(|_| {}).await;
    let c = node.client();
    c.create_bucket("photos").await;
    c.put("photos", "cat.jpg", b"meow").await.ok(200);
    for args in [
        &["GET", "photos:cat.jpg"][..],
        &["SET", "photos:cat.jpg", "overwritten"],
        &["DEL", "photos:cat.jpg"],
        &["MGET", "plain", "photos:cat.jpg"],
        &["BLOB.READ", "photos:cat.jpg", "0", "4"],
        &["APPEND", "photos:cat.jpg", "more"],
    ] {
        let line = resp_line(node.resp, args).await;
        assert!(
            line.starts_with("-NOPERM bucket 'photos' is served by the S3 endpoint")
                && line.contains("requirepass"),
            "{args:?}: {line}"
        );
    }
    // A flush of the whole keyspace would delete the bucket's objects too.
    for args in [&["FLUSHALL"][..], &["FLUSHDB"], &["FLUSHALL", "ASYNC"]] {
        let line = resp_line(node.resp, args).await;
        assert!(
            line.starts_with("-NOPERM this node has S3 buckets"),
            "{args:?}: {line}"
        );
    }
    assert_eq!(resp_line(node.resp, &["SET", "other:k", "v"]).await, "+OK");
    assert_eq!(resp_line(node.resp, &["SET", "plain", "v"]).await, "+OK");
    assert!(resp_line(node.resp, &["KEYS", "*"]).await.starts_with('*'));
    let http = c.with_auth(Auth::Anonymous);
    let http = Client {
        addr: node.http,
        ..http
    };
    for req in [
        Request::new("GET", "/kv/photos:cat.jpg"),
        Request::new("PUT", "/kv/photos:cat.jpg").body(&b"x"[..]),
        Request::new("DELETE", "/kv/photos%3Acat.jpg"),
        Request::new("GET", "/b/photos/cat.jpg"),
        Request::new("HEAD", "/b/photos/cat.jpg"),
        Request::new("PUT", "/b/photos/cat.jpg").body(&b"x"[..]),
        Request::new("DELETE", "/b/photos/cat.jpg"),
        Request::new("POST", "/b/photos/new").query("uploads"),
    ] {
        let what = format!("{} {}", req.method, req.path);
        let head = req.method == "HEAD";
        let r = http.send(req).await;
        assert_eq!(r.status, 403, "{what}: {}", r.text());
        if !head {
            assert!(
                r.text().contains("S3_BUCKET") && r.text().contains("'photos'"),
                "{}",
                r.text()
            );
        }
    }
    http.send(Request::new("GET", "/kv/other:k")).await.ok(200);
    c.expect_object("photos", "cat.jpg", b"meow").await;
    node.stop().await;

    // With a password its holders reach the object (and others are refused by AUTH).
    let node = Node::start(|cfg| cfg.resp.requirepass = Some("pw".into())).await;
    let c = node.client();
    c.create_bucket("photos").await;
    c.put("photos", "cat.jpg", b"meow").await.ok(200);
    let mut s = TcpStream::connect(node.resp).await.unwrap();
    s.write_all(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*2\r\n$3\r\nGET\r\n$14\r\nphotos:cat.jpg\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let want = b"+OK\r\n$4\r\nmeow\r\n";
    tokio::time::timeout(PATIENCE, async {
        while buf.len() < want.len() && fill(&mut s, &mut buf).await {}
    })
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&buf), String::from_utf8_lossy(want));
    node.stop().await;
}

/// On an `s3.open` endpoint with keys, an unsigned request is anonymous, but one whose
/// signature fails (a wrong secret, an unknown key, a tampered presigned URL) is refused as
/// S3 refuses it, and writes nothing.
#[tokio::test]
async fn an_open_endpoint_refuses_bad_signatures() {
    let node = Node::start(|cfg| cfg.s3.open = true).await;
    let c = node.client();
    c.create_bucket("open").await;
    c.put("open", "k", b"signed").await.ok(200);
    let wrong_secret = c.with_auth(Auth::Sign {
        creds: Credentials::new(AK, "not-the-right-secret"),
        skew_secs: 0,
    });
    let unknown_key = c.with_auth(Auth::Sign {
        creds: Credentials::new("AKIDNOBODYKNOWS", SK),
        skew_secs: 0,
    });
    for (bad, code) in [
        (&wrong_secret, "SignatureDoesNotMatch"),
        (&unknown_key, "InvalidAccessKeyId"),
    ] {
        bad.put("open", "k", b"forged").await.s3_error(403, code);
        bad.put("open", "new", b"forged").await.s3_error(403, code);
        bad.send(Request::new("DELETE", "/open/k"))
            .await
            .s3_error(403, code);
    }
    let anon = c.with_auth(Auth::Anonymous);
    let mut tampered = c.presigned_get("/open/k", 0, 600);
    let q = tampered.query.take().unwrap();
    let (before, sig) = q.rsplit_once("X-Amz-Signature=").unwrap();
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    tampered.query = Some(format!("{before}X-Amz-Signature={flipped}{}", &sig[1..]));
    anon.send(tampered)
        .await
        .s3_error(403, "SignatureDoesNotMatch");
    anon.get("open", "new").await.s3_error(404, "NoSuchKey");
    c.expect_object("open", "k", b"signed").await;
    // Every refused signature is counted with the other front ends' AUTH failures.
    let text = node.state.render_metrics();
    let failures = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("meridian_auth_failures_total{frontend=\"s3\"} ")?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("the s3 series in /metrics");
    assert!(failures >= 2, "{failures} S3 auth failures counted");
    // Unsigned is anonymous, as before.
    anon.put("open", "anon", b"hi").await.ok(200);
    anon.expect_object("open", "anon", b"hi").await;
    node.stop().await;
}

// ----- access keys as ACL users -------------------------------------------------------------

const READER_AK: &str = "AKIDREADER";
const READER_SK: &str = "reader-secret-0123456789";

/// A key mapped to an ACL user (`s3.users`) gets that user's permissions, objects counted as
/// `bucket:key`: the reader reads `photos` only, writes nothing, creates no bucket; refusals
/// are `AccessDenied` with Redis's NOPERM text. The unmapped key keeps full access.
#[tokio::test]
async fn access_keys_mapped_to_users_get_their_permissions() {
    let node = Node::start(|c| {
        c.s3.keys.push(format!("{READER_AK}:{READER_SK}"));
        c.s3.users.insert(READER_AK.into(), "reader".into());
        c.resp.users = vec!["user reader on >pw ~photos:* +@read".into()];
    })
    .await;
    let admin = node.client();
    admin.create_bucket("photos").await;
    admin.create_bucket("private").await;
    admin.put("photos", "a.jpg", b"cat").await.ok(200);
    admin.put("private", "b.txt", b"secret").await.ok(200);
    let reader = Client {
        addr: node.s3(),
        auth: Auth::Sign {
            creds: Credentials::new(READER_AK, READER_SK),
            skew_secs: 0,
        },
    };
    let r = reader.get("photos", "a.jpg").await;
    r.ok(200);
    assert_eq!(r.body, b"cat");
    let denied = reader.get("private", "b.txt").await;
    denied.s3_error(403, "AccessDenied");
    assert!(
        denied
            .text()
            .contains("NOPERM this user has no permissions to access one of the keys"),
        "{}",
        denied.text()
    );
    reader
        .put("photos", "new.jpg", b"dog")
        .await
        .s3_error(403, "AccessDenied");
    reader
        .send(Request::new("DELETE", "/photos/a.jpg"))
        .await
        .s3_error(403, "AccessDenied");
    let create = reader.send(Request::new("PUT", "/reader-bucket")).await;
    create.s3_error(403, "AccessDenied");
    assert!(create.text().contains("config|set"), "{}", create.text());
    // Listing is SCAN, which +@read allows.
    reader
        .send(Request::new("GET", "/photos").query("list-type=2"))
        .await
        .ok(200);
    // The object is still there, and the admin key still writes anywhere.
    admin.get("photos", "a.jpg").await.ok(200);
    admin.put("private", "c.txt", b"x").await.ok(200);
    node.stop().await;
}
