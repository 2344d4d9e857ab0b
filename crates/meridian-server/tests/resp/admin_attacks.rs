//! Hostile requests to the admin HTTP API (issue 18, rows 1 and 7), one test per finding:
//! WAN links that overflowed the emulator's delay arithmetic (`jitter: 1e308` panicked the
//! nodes) or silently stalled it (`jitter: 1e6`), partition rules naming DCs and nodes that
//! do not exist, bucket / member / DC names outside the safe alphabet (`../etc`), a leave of
//! an unknown node, and bodies far over the admin limit — including a `Content-Length` of
//! 100 MiB with a tiny body, which must be refused before the server waits for the rest.
//! Every refusal is the API's JSON error naming the field and its range; after each attack
//! the nodes still serve (a concurrent client keeps reading a key over RESP and HTTP).
//!
//! One embedded 2-DC × 2-node cluster per test (port 0, loopback, ideal links): members
//! 1..=4, DCs 0 (`dc0`) and 1 (`dc1`).

use super::cluster_mode::{cluster, connect};
use super::*;
use meridian_server::cluster::Embedded;
use std::sync::atomic::AtomicBool;

/// A raw HTTP/1.1 request with `Connection: close`: `declared` overrides the
/// `Content-Length` (a lie when it differs from the body), `chunked` sends the body with
/// `Transfer-Encoding: chunked` instead. Returns the status, the response head and body.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    declared: Option<u64>,
    chunked: bool,
) -> (u16, String, String) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {}", declared.unwrap_or(body.len() as u64))
    };
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\
         Content-Type: application/json\r\n{framing}\r\n\r\n"
    )
    .into_bytes();
    if chunked {
        for part in body.chunks(16 * 1024) {
            req.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
            req.extend_from_slice(part);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"0\r\n\r\n");
    } else {
        req.extend_from_slice(body);
    }
    // The server may answer (and close) before it has read the body: write and read at
    // once, and ignore the writer's broken pipe. The writer keeps the connection open (a
    // lying Content-Length is never completed), so only the server's answer ends the read.
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&req).await;
        wr
    });
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    let answered = tokio::time::timeout(PATIENCE, async {
        loop {
            match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => raw.extend_from_slice(&chunk[..n]),
            }
            // A complete response with a Content-Length is enough.
            if let Some(end) = complete(&raw) {
                raw.truncate(end);
                break;
            }
        }
    })
    .await;
    assert!(
        answered.is_ok(),
        "{method} {path}: no answer (the server waited for the body?)"
    );
    writer.abort();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: incomplete response {text:?}"));
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

/// The length of the first complete response in `raw`, when its head gives a length.
fn complete(raw: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(raw).ok()?;
    let (head, _) = text.split_once("\r\n\r\n")?;
    let len: usize = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    })?;
    let total = head.len() + 4 + len;
    (raw.len() >= total).then_some(total)
}

/// Whether a stored name is in the safe alphabet.
fn check_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && !n.starts_with('.')
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

async fn call(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let (status, head, body) = request(addr, method, path, body, None, false).await;
    if status >= 400 {
        assert_json(&head, &body);
    }
    (status, body)
}

/// An error reply is the API's JSON error.
fn assert_json(head: &str, body: &str) {
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "not JSON: {head}\n{body}"
    );
    let v = json(body);
    assert!(
        v["error"]["code"].is_string() && v["error"]["message"].is_string(),
        "{body}"
    );
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Asserts a refusal: `status`, error `code`, and a message containing every `needle`.
fn refused(reply: (u16, String), status: u16, code: &str, needles: &[&str], what: &str) {
    let (s, body) = reply;
    assert_eq!(s, status, "{what}: {body}");
    let e = json(&body);
    assert_eq!(e["error"]["code"], code, "{what}: {body}");
    let m = e["error"]["message"].as_str().unwrap();
    for n in needles {
        assert!(m.contains(n), "{what}: `{m}` lacks `{n}`");
    }
}

/// A client reading key `k` over RESP (node 2) and HTTP (node 1) in a loop until stopped;
/// returns how many reads succeeded, and panics on the first failure.
struct Watcher {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl Watcher {
    async fn start(c: &Embedded) -> Watcher {
        let mut a = connect(c, 1).await;
        assert_eq!(
            a.cmd(&[b"SET", b"k", b"v"]).await,
            Frame::Simple("OK".into())
        );
        let h = c.members[0].http.unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut reads = 0;
            while !flag.load(Ordering::Relaxed) {
                assert_eq!(a.cmd(&[b"GET", b"k"]).await, Frame::Bulk("v".into()));
                let (status, body) = call(h, "GET", "/kv/k", b"").await;
                assert_eq!((status, body.as_str()), (200, "v"));
                reads += 2;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            reads
        });
        Watcher { stop, task }
    }

    /// Stops the client; asserts it kept reading and every node still answers `/health`.
    async fn finish(self, c: &Embedded) {
        self.stop.store(true, Ordering::Relaxed);
        let reads = tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the watcher stops")
            .expect("every concurrent read succeeded");
        assert!(reads > 0);
        for m in &c.members {
            let (status, body) = call(m.http.unwrap(), "GET", "/health", b"").await;
            assert_eq!(status, 200, "{}: {body}", m.name);
        }
    }
}

/// Row 1: `PUT /wan` with out-of-range link fields. `jitter: 1e308` used to panic every node
/// (`Duration::mul_f64` overflow); `1e6` was accepted and stalled every WAN message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_wan_refuses_out_of_range_links() {
    let c = cluster().await;
    let h = c.members[0].http.unwrap();
    let watcher = Watcher::start(&c).await;
    let before = json(&call(h, "GET", "/wan", b"").await.1)["config"].clone();
    let range = |f: &str| match f {
        "jitter" => "must be a finite number between 0 and 10",
        "rtt" => "must be a duration between 0 and 60s",
        "bandwidth_bytes_per_sec" => "must be at least 1000 bytes/s",
        _ => "must be a probability between 0 and 1",
    };
    for (body, field, shown) in [
        (
            r#"{"inter_dc":{"jitter":1e308}}"#,
            "inter_dc.jitter",
            "1e308",
        ),
        (r#"{"inter_dc":{"jitter":1e6}}"#, "inter_dc.jitter", "1e6"),
        (r#"{"inter_dc":{"jitter":10.5}}"#, "inter_dc.jitter", "10.5"),
        (r#"{"inter_dc":{"jitter":-1}}"#, "inter_dc.jitter", "-1"),
        (
            r#"{"intra_dc":{"jitter":1e308}}"#,
            "intra_dc.jitter",
            "1e308",
        ),
        (r#"{"inter_dc":{"rtt":"61s"}}"#, "inter_dc.rtt", "61s"),
        (
            r#"{"inter_dc":{"rtt":18446744073709551615}}"#,
            "inter_dc.rtt",
            "",
        ),
        (r#"{"inter_dc":{"rtt":"1000000m"}}"#, "inter_dc.rtt", ""),
        (r#"{"inter_dc":{"loss":2}}"#, "inter_dc.loss", "2"),
        (r#"{"inter_dc":{"loss":-0.5}}"#, "inter_dc.loss", "-0.5"),
        (
            r#"{"intra_dc":{"duplicate":1.5}}"#,
            "intra_dc.duplicate",
            "1.5",
        ),
        (r#"{"inter_dc":{"reorder":7}}"#, "inter_dc.reorder", "7"),
        (
            r#"{"inter_dc":{"bandwidth_bytes_per_sec":0}}"#,
            "inter_dc.bandwidth_bytes_per_sec",
            "0",
        ),
        (
            r#"{"inter_dc":{"bandwidth_bytes_per_sec":999}}"#,
            "inter_dc.bandwidth_bytes_per_sec",
            "999",
        ),
    ] {
        let f = field.split('.').nth(1).unwrap();
        let want = format!("{field} = {shown}");
        refused(
            call(h, "PUT", "/wan", body.as_bytes()).await,
            400,
            "BAD_WAN",
            &[&want, range(f)],
            body,
        );
    }
    // Malformed values name the link; a value JSON cannot hold is a JSON error.
    for (body, needle) in [
        (r#"{"inter_dc":{"jitter":"lots"}}"#, "inter_dc (jitter)"),
        (r#"{"inter_dc":{"rtt":-5}}"#, "inter_dc (rtt)"),
        (r#"{"inter_dc":{"rtt":"5 parsecs"}}"#, "inter_dc (rtt)"),
        (r#"{"inter_dc":{"warp":1}}"#, "unknown field `warp`"),
        (r#"{"inter_dc":7}"#, "inter_dc must be a JSON object"),
        (r#"{"inter_dc":{"jitter":1e400}}"#, "number out of range"),
        (r#"{"inter_dc":{"jitter":NaN}}"#, "expected value"),
    ] {
        refused(
            call(h, "PUT", "/wan", body.as_bytes()).await,
            400,
            "BAD_WAN",
            &[needle],
            body,
        );
    }
    // Nothing changed; a sane update still applies, and the emulator still delivers.
    let after = json(&call(h, "GET", "/wan", b"").await.1)["config"].clone();
    assert_eq!(after, before);
    let (status, body) = call(
        h,
        "PUT",
        "/wan",
        br#"{"inter_dc":{"jitter":10,"rtt":"2ms"}}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["config"]["inter_dc"]["jitter"], 10.0);
    let (status, body) = call(h, "PUT", "/wan", br#"{"inter_dc":{"jitter":0,"rtt":0}}"#).await;
    assert_eq!(status, 200, "{body}");
    watcher.finish(&c).await;
    c.shutdown().await;
}

/// Row 7: partition rules naming a DC (`99`) or node (`123456`) that does not exist were
/// accepted (and cut nothing, or a later member).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_wan_refuses_cuts_of_unknown_dcs_and_nodes() {
    let c = cluster().await;
    let h = c.members[0].http.unwrap();
    let watcher = Watcher::start(&c).await;
    for (body, needle) in [
        (
            r#"{"cut":[{"from":{"dc":99},"to":"any"}]}"#,
            "cut[0].from.dc = 99: no such DC (DC ids: 0, 1)",
        ),
        (
            r#"{"cut":[{"from":"any","to":{"node":123456}}]}"#,
            "cut[0].to.node = 123456: not a member (members: 1, 2, 3, 4)",
        ),
        (
            r#"{"cut_both":[[{"dc":0},{"dc":2}]]}"#,
            "cut_both[0][1].dc = 2: no such DC",
        ),
        (
            r#"{"heal":[{"from":{"node":0},"to":"any"}]}"#,
            "heal[0].from.node = 0: not a member",
        ),
        (
            r#"{"heal_both":[[{"node":1},{"node":5}]]}"#,
            "heal_both[0][1].node = 5",
        ),
        (
            r#"{"cut":[{"from":{"dc":0},"to":{"dc":1}}],"heal":[{"from":{"dc":4294967295},"to":"any"}]}"#,
            "heal[0].from.dc = 4294967295",
        ),
        (
            r#"{"cut":[{"from":{"dc":-1},"to":"any"}]}"#,
            "invalid value",
        ),
    ] {
        refused(
            call(h, "PUT", "/wan", body.as_bytes()).await,
            400,
            "BAD_WAN",
            &[needle],
            body,
        );
    }
    // A refused update changed nothing (the valid cut beside the bad heal included).
    let state = json(&call(h, "GET", "/wan", b"").await.1);
    assert_eq!(state["config"]["cuts"], serde_json::json!([]), "{state}");
    // Known scopes still work.
    let (status, body) = call(
        h,
        "PUT",
        "/wan",
        br#"{"cut":[{"from":{"node":4},"to":{"dc":1}}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(h, "PUT", "/wan", br#"{"heal_all":true}"#).await;
    assert_eq!(status, 200, "{body}");
    watcher.finish(&c).await;
    c.shutdown().await;
}

/// Row 7: bucket, member and DC names outside `[A-Za-z0-9_.-]{1,64}` (or starting with `.`)
/// were accepted and stored cluster-wide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_names_are_checked() {
    let c = cluster().await;
    let h = c.members[0].http.unwrap();
    let watcher = Watcher::start(&c).await;
    let rule = "must be 1 to 64 characters of A-Z a-z 0-9 _ . - not starting with '.'";
    let long = "b".repeat(65);
    for (path, shown) in [
        ("/buckets/..%2Fetc".to_owned(), "\"../etc\""),
        ("/buckets/.hidden".to_owned(), "\".hidden\""),
        ("/buckets/a%3Ab".to_owned(), "\"a:b\""),
        ("/buckets/a%20b".to_owned(), "\"a b\""),
        ("/buckets/a%0Ab".to_owned(), "\"a\\nb\""),
        (format!("/buckets/{long}"), "\"bbbbbbbbbb"),
    ] {
        let want = format!("bucket = {shown}");
        refused(
            call(h, "PUT", &path, br#"{"n_val":3}"#).await,
            400,
            "BAD_BUCKET_NAME",
            &[&want, rule],
            &path,
        );
    }
    // A name that is not UTF-8 is axum's path rejection, as JSON.
    let (status, body) = call(h, "PUT", "/buckets/%FF", br#"{"n_val":3}"#).await;
    assert_eq!(status, 400, "{body}");
    let buckets = json(&call(h, "GET", "/buckets", b"").await.1);
    let names: Vec<&String> = buckets["buckets"].as_object().unwrap().keys().collect();
    assert!(
        names.iter().all(|n| check_name_ok(n)),
        "no bad name was stored: {names:?}"
    );
    // A valid name still works.
    let (status, body) = call(h, "PUT", "/buckets/users_v2.a-b", b"{}").await;
    assert_eq!(status, 200, "{body}");

    // Truncation: a bad or unknown name changes nothing; a known bucket is emptied.
    let (status, body) = call(h, "POST", "/buckets/a%20b/truncate", b"").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("BAD_BUCKET_NAME"), "{body}");
    let (status, body) = call(h, "POST", "/buckets/nope/truncate", b"").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no bucket named nope"), "{body}");
    let (status, body) = call(h, "PUT", "/kv/users_v2.a-b:k", b"v").await;
    assert!(status < 300, "{body}");
    let (status, body) = call(h, "POST", "/buckets/users_v2.a-b/truncate", b"").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        json(&body)["truncated_at_us"].as_u64().unwrap() > 0,
        "{body}"
    );
    let (status, body) = call(h, "GET", "/kv/users_v2.a-b:k", b"").await;
    assert_eq!(status, 404, "{body}");

    // Joins: a member name or DC outside the alphabet, a DC that looks like the id of a DC
    // that is neither an existing one nor the next one.
    let join =
        |name: &str, dc: &str| serde_json::json!({ "id": 9, "name": name, "dc": dc }).to_string();
    for (body, needle) in [
        (join("../x", "dc0"), "name = \"../x\": must be 1 to 64"),
        (join("n9", "../etc"), "dc = \"../etc\": must be 1 to 64"),
        (join("n9", ".dc"), "dc = \".dc\""),
        (
            join("n9", "dc99"),
            "dc = \"dc99\": no such DC (DCs: dc0, dc1)",
        ),
        (join("n9", "99"), "dc = \"99\": no such DC"),
        (join(&"n".repeat(100), "dc0"), "name = \"nnnn"),
        (
            r#"{"id":0,"name":"n9","dc":"dc0"}"#.to_owned(),
            "id must be at least 1",
        ),
        (
            r#"{"id":4294967296,"name":"n9","dc":"dc0"}"#.to_owned(),
            "invalid value",
        ),
        // A TLS address clients would be redirected to must be one they can connect to.
        (
            r#"{"id":9,"name":"n9","dc":"dc0","resp_tls":"127.0.0.1:0"}"#.to_owned(),
            "resp_tls must be a connectable address",
        ),
        (
            r#"{"id":9,"name":"n9","dc":"dc0","resp_tls":"0.0.0.0:6380"}"#.to_owned(),
            "resp_tls must be a connectable address",
        ),
        (
            r#"{"id":9,"name":"n9","dc":"dc0","resp_tls":"not an address"}"#.to_owned(),
            "invalid socket address",
        ),
    ] {
        refused(
            call(h, "POST", "/cluster/members", body.as_bytes()).await,
            400,
            "BAD_MEMBER",
            &[needle],
            &body,
        );
    }
    // Force-master: the bucket is checked the same way.
    refused(
        call(
            h,
            "POST",
            "/timeline/force-master",
            br#"{"bucket":"../etc","key":"k","dc":"dc0"}"#,
        )
        .await,
        400,
        "BAD_FORCE_MASTER",
        &["bucket = \"../etc\"", rule],
        "force-master",
    );
    refused(
        call(
            h,
            "POST",
            "/timeline/force-master",
            br#"{"bucket":"tl","key":"k","dc":99}"#,
        )
        .await,
        400,
        "BAD_FORCE_MASTER",
        &["no member is in DC '99'"],
        "force-master dc 99",
    );
    let meta = json(&call(h, "GET", "/cluster", b"").await.1);
    assert_eq!(
        meta["members"].as_array().map(Vec::len),
        Some(4),
        "no member was added: {meta}"
    );
    watcher.finish(&c).await;
    c.shutdown().await;
}

/// Row 7: a leave of a node that is not a member was a 400 `MEMBERSHIP_REFUSED` from the
/// claimant; it is a 404 naming the members. Ids that are not ids are 400s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_an_unknown_node_is_a_404() {
    let c = cluster().await;
    let h = c.members[0].http.unwrap();
    let watcher = Watcher::start(&c).await;
    refused(
        call(h, "DELETE", "/cluster/members/123456", b"").await,
        404,
        "NO_SUCH_MEMBER",
        &["node 123456 is not a member (members: 1, 2, 3, 4)"],
        "leave 123456",
    );
    for id in ["abc", "-1", "99999999999", "1.5", "%00"] {
        refused(
            call(h, "DELETE", &format!("/cluster/members/{id}"), b"").await,
            400,
            "BAD_MEMBER",
            &["is not a node id"],
            id,
        );
    }
    let meta = json(&call(h, "GET", "/cluster", b"").await.1);
    assert_eq!(meta["members"].as_array().map(Vec::len), Some(4), "{meta}");
    watcher.finish(&c).await;
    c.shutdown().await;
}

/// Row 7: admin bodies were buffered up to the 64 MiB value limit and refused as text; a
/// `Content-Length` of 100 MiB with a 2-byte body left the server waiting. Now: 413 JSON at
/// once above 64 KiB (declared or streamed), and axum's own rejections are JSON too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_bodies_are_small_and_every_rejection_is_json() {
    let c = cluster().await;
    let h = c.members[0].http.unwrap();
    let watcher = Watcher::start(&c).await;
    let hundred_mib = 100 << 20;
    for (method, path) in [
        ("PUT", "/wan"),
        ("POST", "/cluster/members"),
        ("DELETE", "/cluster/members/4"),
        ("PUT", "/buckets/x"),
        ("POST", "/timeline/force-master"),
        ("PUT", "/balance/service-model"),
        // Data routes keep their own (larger) limit, also checked before reading.
        ("PUT", "/kv/k"),
        ("POST", "/txn"),
    ] {
        let (status, head, body) = request(h, method, path, b"{}", Some(hundred_mib), false).await;
        assert_json(&head, &body);
        refused(
            (status, body),
            413,
            "BODY_TOO_LARGE",
            &["the body is 104857600 bytes (Content-Length)"],
            path,
        );
    }
    // A real body just over 64 KiB: refused by its declared length.
    let big = format!(
        r#"{{"inter_dc":{{"jitter":0.1}},"x":"{}"}}"#,
        "x".repeat(64 * 1024)
    );
    refused(
        call(h, "PUT", "/wan", big.as_bytes()).await,
        413,
        "BODY_TOO_LARGE",
        &["takes at most 65536"],
        "64 KiB",
    );
    // The same body chunked (no length declared): refused once the limit is crossed.
    let (status, head, body) = request(h, "PUT", "/buckets/x", big.as_bytes(), None, true).await;
    assert_json(&head, &body);
    assert_eq!(status, 413, "{body}");
    assert_eq!(json(&body)["error"]["code"], "BODY_TOO_LARGE");
    // axum's rejections, as the API's JSON errors.
    let (status, head, body) = request(h, "POST", "/wan", b"{}", None, false).await;
    assert_json(&head, &body);
    assert_eq!(status, 405, "{body}");
    assert_eq!(json(&body)["error"]["code"], "METHOD_NOT_ALLOWED");
    assert!(head.to_ascii_lowercase().contains("allow:"), "{head}");
    refused(
        call(h, "PUT", "/wan", b"{\"inter_dc\":").await,
        400,
        "BAD_WAN",
        &["EOF"],
        "truncated JSON",
    );
    // Nothing changed.
    let state = json(&call(h, "GET", "/wan", b"").await.1);
    assert_eq!(state["config"]["inter_dc"]["jitter"], 0.0, "{state}");
    watcher.finish(&c).await;
    c.shutdown().await;
}
