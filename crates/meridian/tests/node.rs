//! End-to-end tests of the `meridian` binary: real processes, real sockets on loopback.
//!
//! Each test starts `meridian node` on port 0 and learns its addresses from the startup log
//! line, so tests never collide on ports and need no fixed sleeps to find the server. The
//! `meridian up` tests start a 2-DC × 3-node cluster with `--base-port 0` and read every
//! member's addresses from the table it prints once ready; `up --processes` (one `meridian
//! node --config` process per node over TCP, on 127.0.0.x) is read the same way, plus PIDs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_meridian");

/// A child's output, line by line, through a channel (so a test can wait with a timeout).
fn lines_of(out: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A running `meridian node` child process.
struct Node {
    child: Child,
    resp: SocketAddr,
    http: SocketAddr,
    log: mpsc::Receiver<String>,
}

impl Node {
    /// `meridian node` on OS-chosen loopback ports.
    fn start(args: &[&str]) -> Node {
        let mut all = vec!["--resp", "127.0.0.1:0", "--http", "127.0.0.1:0"];
        all.extend_from_slice(args);
        Node::spawn(&all)
    }

    /// `meridian node ARGS`, once it reports its addresses.
    fn spawn(args: &[&str]) -> Node {
        let mut child = Command::new(BIN)
            .arg("node")
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn meridian");
        let rx = lines_of(child.stderr.take().unwrap());
        let mut seen = Vec::new();
        loop {
            let Ok(line) = rx.recv_timeout(Duration::from_secs(60)) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("node never reported its addresses; log: {seen:?}");
            };
            if line.contains("meridian node serving") {
                let field = |name: &str| -> SocketAddr {
                    let start = line.find(&format!("{name}=")).unwrap() + name.len() + 1;
                    line[start..]
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                return Node {
                    resp: field("resp_addr"),
                    http: field("http_addr"),
                    child,
                    log: rx,
                };
            }
            seen.push(line);
        }
    }

    fn redis(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.resp))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// Sends SIGTERM and waits for a clean exit, returning the rest of the log.
    fn terminate(mut self) -> String {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        let log: Vec<String> = self.log.try_iter().collect();
        assert!(exit.success(), "node exited with {exit}; log: {log:?}");
        log.join("\n")
    }

    fn kill9(mut self) {
        self.child.kill().unwrap(); // SIGKILL on Unix
        self.child.wait().unwrap();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 client: one request per connection. Returns (status, body).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, Vec<u8>) {
    let (status, _, body) = http_with_head(addr, method, path, headers, body);
    (status, body)
}

/// Like [`http`], also returning the response head (lowercased).
fn http_with_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, head.to_ascii_lowercase(), body)
}

/// The value of header `name` (lowercase) in a lowercased response head.
fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let len =
            usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap();
        if len == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + len]);
        b = &b[eol + 2 + len + 2..];
    }
}

fn run_expecting_failure(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn help_lists_the_settings() {
    let out = Command::new(BIN).args(["node", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--config",
        "--resp",
        "--http",
        "--engine",
        "--data-dir",
        "--fsync",
        "--requirepass",
        "--service-model",
        "--read-workers",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
    let out = Command::new(BIN).args(["up", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--service-model", "--read-workers"] {
        assert!(help.contains(flag), "up --help lacks {flag}:\n{help}");
    }
}

#[test]
fn balance_settings_are_validated_with_the_setting_named() {
    let err = run_expecting_failure(&["node", "--service-model", "fixed:0"]);
    assert!(
        err.contains("--service-model") && err.contains("fixed:MS"),
        "{err}"
    );
    // A single node has no replicas to balance.
    let err = run_expecting_failure(&["node", "--service-model", "fixed:30"]);
    assert!(err.contains("need a [cluster] section"), "{err}");
    let err = run_expecting_failure(&["up", "--read-workers", "0"]);
    assert!(
        err.contains("balance.read_workers (--read-workers) = 0"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, "[balance]\nservice_model = \"slow\"\n").unwrap();
    let err = run_expecting_failure(&["node", "--config", cfg.to_str().unwrap()]);
    assert!(
        err.contains("service_model") && err.contains("slow"),
        "{err}"
    );
    // The study's sizes are bounded before anything is allocated or spawned.
    for (args, want) in [
        (&["--jobs", "0"][..], "--jobs = 0"),
        (&["--jobs", "100000"][..], "--jobs = 100000"),
        (&["--requests", "4"][..], "--requests = 4"),
        (
            &["--requests", "99999999999"][..],
            "--requests = 99999999999",
        ),
    ] {
        let mut a = vec!["experiment", "replica-choice", "--out", "/nonexistent/rc"];
        a.extend_from_slice(args);
        let err = run_expecting_failure(&a);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn bad_settings_are_rejected_with_the_setting_named() {
    let err = run_expecting_failure(&["node", "--engine", "rocks"]);
    assert!(err.contains("mem or fjall"), "{err}");
    let err = run_expecting_failure(&["node", "--fsync", "sometimes"]);
    assert!(err.contains("always, everysec or never"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, "[resp]\nlisten_address = \"127.0.0.1:1\"\n").unwrap();
    let err = run_expecting_failure(&["node", "--config", cfg.to_str().unwrap()]);
    assert!(
        err.contains("listen_address") && err.contains("node.toml"),
        "{err}"
    );
    let err = run_expecting_failure(&["node", "--config", "/nonexistent/node.toml"]);
    assert!(err.contains("cannot read config file"), "{err}");
}

#[test]
fn a_taken_port_is_reported_with_a_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let err = run_expecting_failure(&["node", "--resp", &addr, "--http", "127.0.0.1:0"]);
    assert!(err.contains("choose another address with --resp"), "{err}");
}

#[test]
fn http_api_serves_keys_metrics_and_status() {
    let node = Node::start(&[]);
    let h = node.http;
    assert_eq!(http(h, "GET", "/health", &[], b"").0, 200);
    assert_eq!(http(h, "PUT", "/kv/a%2Fb%00", &[], b"value-1").0, 204);
    assert_eq!(
        http(h, "GET", "/kv/a%2Fb%00", &[], b""),
        (200, b"value-1".to_vec())
    );

    // The same key through RESP: the front ends share one keyspace.
    let mut r = node.redis();
    let v: Vec<u8> = redis::cmd("GET").arg(b"a/b\x00").query(&mut r).unwrap();
    assert_eq!(v, b"value-1");

    let (status, body) = http(h, "GET", "/kv/missing", &[], b"");
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("\"code\":\"NOT_FOUND\""));
    assert_eq!(http(h, "DELETE", "/kv/a%2Fb%00", &[], b"").0, 204);
    assert_eq!(http(h, "DELETE", "/kv/a%2Fb%00", &[], b"").0, 404);
    let (status, body) = http(h, "GET", "/kv/bad%zz", &[], b"");
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("BAD_KEY_ENCODING"));
    let (status, body) = http(h, "PUT", "/kv/k?ttl=5", &[], b"v");
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("BAD_QUERY"));
    assert_eq!(http(h, "GET", "/nope", &[], b"").0, 404);

    assert_eq!(http(h, "PUT", "/kv/ttl?ttl_ms=60000", &[], b"v").0, 204);
    let ttl: i64 = redis::cmd("TTL").arg("ttl").query(&mut r).unwrap();
    assert!((59..=60).contains(&ttl), "ttl {ttl}");

    let (status, metrics) = http(h, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("meridian_ops_total{frontend=\"http\",op=\"put\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("meridian_ops_total{frontend=\"resp\",op=\"get\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("meridian_op_latency_seconds_bucket{frontend=\"http\",op=\"get\""));
    assert!(
        metrics.contains("meridian_connections{frontend=\"resp\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("meridian_engine_keys 1"), "{metrics}");

    let (status, body) = http(h, "GET", "/status", &[], b"");
    assert_eq!(status, 200);
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["engine"]["name"], "mem");
    assert_eq!(status["engine"]["live_keys"], 1);
    node.terminate();
}

#[test]
fn http_requires_the_password_when_one_is_set() {
    let node = Node::start(&["--requirepass", "s3cret"]);
    let h = node.http;
    let (status, body) = http(h, "GET", "/kv/k", &[], b"");
    assert_eq!(status, 401);
    assert!(String::from_utf8_lossy(&body).contains("UNAUTHORIZED"));
    assert_eq!(
        http(h, "GET", "/status", &["Authorization: Bearer wrong"], b"").0,
        401
    );
    assert_eq!(
        http(h, "PUT", "/kv/k", &["Authorization: Bearer s3cret"], b"v").0,
        204
    );
    assert_eq!(
        http(h, "GET", "/health", &[], b"").0,
        200,
        "probes need no password"
    );
    assert_eq!(http(h, "GET", "/metrics", &[], b"").0, 200);
}

#[test]
fn sigterm_drains_and_flushes_so_a_restart_keeps_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = ["--engine", "fjall", "--data-dir", data, "--fsync", "never"];
    let node = Node::start(&args);
    let mut r = node.redis();
    for i in 0..500 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut r)
            .unwrap();
    }
    drop(r);
    let log = node.terminate();
    assert!(log.contains("engine flushed"), "{log}");

    let node = Node::start(&args);
    let mut r = node.redis();
    let n: u64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(n, 500);
    let v: i64 = redis::cmd("GET").arg("k499").query(&mut r).unwrap();
    assert_eq!(v, 499);
}

/// A metric's value from `/metrics` (0 when absent).
fn metric(http_addr: SocketAddr, name: &str) -> f64 {
    let (status, body) = http(http_addr, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// SIGTERM while the repartitioner is inside METIS. METIS's GKlib installs SIGTERM handlers
/// of its own around every call, so a node that took the signal with a handler lost it
/// (the call failed instead) or crashed when it landed in that window — which, with the
/// non-stop pipeline partitioning a large window back to back, is most of the time. The node
/// must drain and exit cleanly, and no partitioning may fail.
#[test]
fn sigterm_while_metis_partitions_still_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        "[repart]\nmode = \"non_stop\"\nshards = 4\nwindow = 200000\n\
         partitioner = \"metis\"\nmin_gain = 0.0\npin = false\n",
    )
    .unwrap();
    let mut node = Node::start(&["--config", config.to_str().unwrap()]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let mut r = node.redis();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut p = redis::pipe();
                for _ in 0..64 {
                    let mut cmd = redis::cmd("MSET");
                    for _ in 0..4 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        cmd.arg(format!("k{}", x % 1_000_000)).arg(1);
                    }
                    p.add_command(cmd).ignore();
                }
                // The node going away ends the load.
                if p.query::<()>(&mut r).is_err() {
                    break;
                }
            }
        })
    };
    // Wait until the graph is large enough that a METIS call takes a while.
    let mut waited = 0;
    while metric(node.http, "meridian_repart_graph_vertices") < 100_000.0
        || metric(node.http, "meridian_repart_partitions_total") < 2.0
    {
        assert!(waited < 600, "the partitioner never ran on a large graph");
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
    }
    assert_eq!(metric(node.http, "meridian_repart_failures_total"), 0.0);
    let status = Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut exit = None;
    for _ in 0..600 {
        if let Some(s) = node.child.try_wait().unwrap() {
            exit = Some(s);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    let log: Vec<String> = node.log.try_iter().collect();
    let exit = exit
        .unwrap_or_else(|| panic!("SIGTERM was lost: still running a minute later; log: {log:?}"));
    assert!(exit.success(), "node exited with {exit}; log: {log:?}");
    assert!(log.iter().any(|l| l.contains("shutting down")), "{log:?}");
    assert!(
        !log.iter()
            .any(|l| l.contains("partition") && l.contains("fail")),
        "a partitioning call failed: {log:?}"
    );
}

/// Writers set keys through RESP on a durable node with `fsync = always`; the node is killed
/// with SIGKILL mid-load. After a restart, every write that was acknowledged must be there.
#[test]
fn sigkill_under_load_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = ["--engine", "fjall", "--data-dir", data, "--fsync", "always"];
    let mut acked: Vec<(String, String)> = Vec::new();
    for round in 0..3 {
        let node = Node::start(&args);
        let (tx, rx) = mpsc::channel();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let tx = tx.clone();
                let addr = node.resp;
                std::thread::spawn(move || {
                    let mut r = redis::Client::open(format!("redis://{addr}/"))
                        .unwrap()
                        .get_connection()
                        .unwrap();
                    for i in 0.. {
                        let (k, v) = (format!("r{round}w{w}k{i}"), format!("v{i}-{round}"));
                        if redis::cmd("SET")
                            .arg(&k)
                            .arg(&v)
                            .query::<()>(&mut r)
                            .is_err()
                        {
                            return; // the node died mid-request: not acknowledged
                        }
                        if tx.send((k, v)).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        // Kill once a few hundred writes are acknowledged: the rest are in flight.
        let mut this_round = Vec::new();
        while this_round.len() < 300 {
            this_round.push(
                rx.recv_timeout(Duration::from_secs(60))
                    .expect("writes stalled"),
            );
        }
        node.kill9();
        for w in writers {
            w.join().unwrap();
        }
        this_round.extend(rx.try_iter());
        acked.extend(this_round);

        let node = Node::start(&args);
        let mut r = node.redis();
        for (k, v) in &acked {
            let got: Option<String> = redis::cmd("GET").arg(k).query(&mut r).unwrap();
            assert_eq!(
                got.as_deref(),
                Some(v.as_str()),
                "acknowledged {k} lost in round {round}"
            );
        }
        node.kill9();
    }
    assert!(Path::new(data).exists());
}

// ----- `meridian up`: an embedded cluster ---------------------------------------------------

/// One row of the table `meridian up` prints.
struct Member {
    name: String,
    dc: u32,
    resp: SocketAddr,
    http: SocketAddr,
    /// The node's S3 endpoint.
    s3: SocketAddr,
    /// With `--processes`: the node's process.
    pid: Option<u32>,
}

/// A running `meridian up` child process (every port chosen by the OS).
struct Up {
    child: Child,
    members: Vec<Member>,
    /// The S3 access key `up` made for the run (id, secret), when none was given.
    s3_key: Option<(String, String)>,
}

impl Up {
    /// `meridian up ARGS` whose nodes coordinate any key where it arrives (`--misrouted
    /// serve`): these tests drive plain clients at chosen nodes.
    fn start(args: &[&str]) -> Up {
        Up::start_with(&[&["--misrouted", "serve"], args].concat())
    }

    /// `meridian up ARGS`, nothing added.
    fn start_with(args: &[&str]) -> Up {
        let mut child = Command::new(BIN)
            .arg("up")
            .args(["--base-port", "0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn meridian up");
        let rx = lines_of(child.stdout.take().unwrap());
        let mut members = Vec::new();
        let mut s3_key = None;
        loop {
            let Ok(line) = rx.recv_timeout(Duration::from_secs(120)) else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the cluster never became ready");
            };
            if line.starts_with("ready") {
                return Up {
                    child,
                    members,
                    s3_key,
                };
            }
            // `S3 access key for this run: ID  secret: SECRET`, before the table.
            if let Some(rest) = line.strip_prefix("S3 access key for this run: ") {
                let f: Vec<&str> = rest.split_whitespace().collect();
                assert_eq!(f.len(), 3, "{line}");
                s3_key = Some((f[0].to_owned(), f[2].to_owned()));
                continue;
            }
            // NAME DC RESP HTTP S3 [PID [RESP-TLS]]
            let f: Vec<&str> = line.split_whitespace().collect();
            if (5..=7).contains(&f.len()) && f[0] != "NAME" && f[0] != "TLS" {
                members.push(Member {
                    name: f[0].to_owned(),
                    dc: f[1].parse().unwrap(),
                    resp: f[2].parse().unwrap(),
                    http: f[3].parse().unwrap(),
                    s3: f[4].parse().unwrap(),
                    pid: f.get(5).map(|p| p.parse().unwrap()),
                });
            }
        }
    }

    fn in_dc(&self, dc: u32) -> &Member {
        self.members.iter().find(|m| m.dc == dc).unwrap()
    }

    fn redis(&self, dc: u32) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.in_dc(dc).resp))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// GET /cluster on a member of `dc`.
    fn cluster(&self, dc: u32) -> serde_json::Value {
        cluster_of(self.in_dc(dc).http)
    }

    /// Waits (bounded; not a timing assertion) until `dc`'s member sees every member up.
    fn wait_all_up(&self, dc: u32) {
        for _ in 0..600 {
            let c = self.cluster(dc);
            if c["members"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["status"] == "up")
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("members never all up: {}", self.cluster(dc));
    }

    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "meridian up exited with {exit}");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET /cluster on the node serving HTTP on `addr`.
fn cluster_of(addr: SocketAddr) -> serde_json::Value {
    let (status, body) = http(addr, "GET", "/cluster", &[], b"");
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

/// `meridian up` with an eventual default bucket, for the tests of eventual semantics through
/// bare keys (`up_default_bucket_gives_redis_cluster_guarantees` runs the timeline default).
const UP_ARGS: &[&str] = &[
    "--dcs",
    "2",
    "--nodes-per-dc",
    "3",
    "--wan-latency",
    "5ms",
    "--default-bucket",
    "eventual",
];

/// `MERIDIAN.GET` → (context, sorted sibling values).
fn meridian_get(c: &mut redis::Connection, key: &str, r: &str) -> (Option<Vec<u8>>, Vec<String>) {
    let (ctx, mut values): (Option<Vec<u8>>, Vec<String>) = redis::cmd("MERIDIAN.GET")
        .arg(key)
        .arg("R")
        .arg(r)
        .query(c)
        .unwrap();
    values.sort();
    (ctx, values)
}

/// SET on `a`, GET on `b` sees it; two blind `MERIDIAN.PUT`s (one per node) become siblings,
/// and a put with their context resolves them to one value.
fn set_here_get_there_and_resolve_siblings(a: &mut redis::Connection, b: &mut redis::Connection) {
    let () = redis::cmd("SET")
        .arg("greeting")
        .arg("hello")
        .query(a)
        .unwrap();
    let got: Option<String> = redis::cmd("GET").arg("greeting").query(b).unwrap();
    assert_eq!(got.as_deref(), Some("hello"));

    let _: Vec<u8> = redis::cmd("MERIDIAN.PUT")
        .arg("cart")
        .arg("apple")
        .query(a)
        .unwrap();
    let _: Vec<u8> = redis::cmd("MERIDIAN.PUT")
        .arg("cart")
        .arg("pear")
        .arg("W")
        .arg("all")
        .query(b)
        .unwrap();
    let (ctx, values) = meridian_get(a, "cart", "all");
    assert_eq!(values, ["apple", "pear"]);
    let _: Vec<u8> = redis::cmd("MERIDIAN.PUT")
        .arg("cart")
        .arg("apple+pear")
        .arg("CONTEXT")
        .arg(ctx.unwrap())
        .arg("W")
        .arg("all")
        .query(b)
        .unwrap();
    assert_eq!(meridian_get(a, "cart", "all").1, ["apple+pear"]);
}

#[test]
fn up_serves_a_two_dc_cluster_over_resp_and_http() {
    let up = Up::start(UP_ARGS);
    assert_eq!(up.members.len(), 6);
    assert_eq!(up.members[0].name, "dc0-n0");
    assert_eq!(up.members[5].name, "dc1-n2");
    let (mut a, mut b) = (up.redis(0), up.redis(1));

    set_here_get_there_and_resolve_siblings(&mut a, &mut b);

    // Every node serves S3; `up` made and printed a key, and unsigned requests are refused.
    let (id, secret) = up.s3_key.clone().expect("up prints the S3 key it made");
    assert!(
        id.starts_with("MRDN") && secret.len() >= 16,
        "{id} {secret}"
    );
    for m in &up.members {
        let (status, body) = http(m.s3, "GET", "/", &[], b"");
        assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("<Code>AccessDenied</Code>"));
    }

    // INCR is a counter on eventual buckets; what an eventual bucket cannot make atomic is
    // refused clearly, and the connection stays usable.
    let n: i64 = redis::cmd("INCR").arg("n").query(&mut a).unwrap();
    assert_eq!(n, 1);
    let err = redis::cmd("APPEND")
        .arg("n")
        .arg("x")
        .query::<i64>(&mut a)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not supported on eventual buckets"),
        "{err}"
    );
    let pong: String = redis::cmd("PING").query(&mut a).unwrap();
    assert_eq!(pong, "PONG");

    // HTTP: the value with its context; /cluster lists 6 members, all up.
    let (status, body) = http(up.in_dc(1).http, "GET", "/kv/greeting", &[], b"");
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]));
    let (h0, h1) = (up.in_dc(0).http, up.in_dc(1).http);
    assert_eq!(http(h0, "PUT", "/kv/h?w=all", &[], b"x").0, 204);
    assert_eq!(http(h1, "PUT", "/kv/h?w=all", &[], b"y").0, 204);
    let (status, head, body) = http_with_head(h0, "GET", "/kv/h?r=all", &[], b"");
    assert_eq!(status, 300, "{}", String::from_utf8_lossy(&body));
    let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut sibs: Vec<&str> = j["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    sibs.sort();
    assert_eq!(sibs, ["eA==", "eQ=="]);
    let ctx = header_of(&head, "x-meridian-context").unwrap();
    assert_eq!(j["context"], ctx.as_str());
    let hdr = format!("X-Meridian-Context: {ctx}");
    assert_eq!(http(h1, "PUT", "/kv/h?w=all", &[&hdr], b"z").0, 204);
    let (status, head, body) = http_with_head(h0, "GET", "/kv/h?r=all", &[], b"");
    assert_eq!((status, body.as_slice()), (200, &b"z"[..]));
    assert!(header_of(&head, "x-meridian-context").is_some());
    assert_eq!(http(h0, "DELETE", "/kv/h", &[], b"").0, 204);
    assert_eq!(http(h0, "GET", "/kv/h?r=all", &[], b"").0, 404);
    let (status, body) = http(h0, "GET", "/kv/h?r=9", &[], b"");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("N_VAL_VIOLATION"));
    let (status, body) = http(h0, "GET", "/kv/h?w=1", &[], b"");
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    // Buckets: listed, set at run time (validated) on this node.
    let (status, body) = http(h0, "PUT", "/buckets/fast", &[], br#"{"r":"one","w":1}"#);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, body) = http(h0, "PUT", "/buckets/bad", &[], br#"{"n_val":9}"#);
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    let (_, body) = http(h0, "GET", "/buckets", &[], b"");
    let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(j["buckets"]["fast"]["r"], "one");
    let (status, body) = http(h0, "GET", "/wan", &[], b"");
    assert_eq!(status, 200);
    let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(j["config"]["inter_dc"]["rtt"], "10ms");
    up.wait_all_up(0);
    let c = up.cluster(0);
    assert_eq!(c["members"].as_array().unwrap().len(), 6);
    assert_eq!(c["layout"]["q"], 64);
    up.terminate();
}

/// `meridian up` as it starts answers a key command sent to a node that is not its slot's
/// master with Redis Cluster's `-MOVED` naming that master (which serves it), and does nothing.
#[test]
fn up_redirects_a_misrouted_key_command_to_its_slots_master() {
    let up = Up::start_with(&["--dcs", "1", "--nodes-per-dc", "3", "--wan-latency", "0ms"]);
    let mut a = up.redis(0);
    let (mut served, mut moved) = (0, 0);
    for k in 0..64 {
        let key = format!("k{k}");
        match redis::cmd("SET").arg(&key).arg("v").query::<()>(&mut a) {
            Ok(()) => served += 1,
            Err(e) => {
                assert_eq!(e.kind(), redis::ErrorKind::Moved, "{e}");
                let (addr, slot) = e.redirect_node().unwrap();
                let want: u16 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(&key)
                    .query(&mut a)
                    .unwrap();
                assert_eq!(slot, want);
                assert!(
                    up.members.iter().any(|m| m.resp.to_string() == addr),
                    "{addr}"
                );
                let mut master = redis::Client::open(format!("redis://{addr}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let got: Option<String> = redis::cmd("GET").arg(&key).query(&mut master).unwrap();
                assert_eq!(got, None, "a MOVED write does nothing");
                let () = redis::cmd("SET")
                    .arg(&key)
                    .arg("v")
                    .query(&mut master)
                    .unwrap();
                moved += 1;
            }
        }
    }
    assert!(served > 0 && moved > 0, "{served} served, {moved} moved");
    up.terminate();
}

#[test]
fn up_default_bucket_gives_redis_cluster_guarantees() {
    let up = Up::start(&["--dcs", "2", "--nodes-per-dc", "2", "--wan-latency", "5ms"]);
    let (mut a, mut b) = (up.redis(0), up.redis(1));
    // A write in one DC is read in the other, from the key's master.
    let () = redis::cmd("SET")
        .arg("greeting")
        .arg("hello")
        .query(&mut a)
        .unwrap();
    let got: Option<String> = redis::cmd("GET").arg("greeting").query(&mut b).unwrap();
    assert_eq!(got.as_deref(), Some("hello"));
    // SET NX from both DCs: one holder.
    let mine: Option<String> = redis::cmd("SET")
        .arg("lock")
        .arg("a")
        .arg("NX")
        .arg("PX")
        .arg(60_000)
        .query(&mut a)
        .unwrap();
    let theirs: Option<String> = redis::cmd("SET")
        .arg("lock")
        .arg("b")
        .arg("NX")
        .query(&mut b)
        .unwrap();
    assert_eq!((mine.as_deref(), theirs), (Some("OK"), None));
    // The read-modify-writes an eventual bucket refuses.
    let n: i64 = redis::cmd("APPEND")
        .arg("s")
        .arg("ab")
        .query(&mut a)
        .unwrap();
    let m: i64 = redis::cmd("APPEND")
        .arg("s")
        .arg("c")
        .query(&mut b)
        .unwrap();
    assert_eq!((n, m), (2, 3));
    let f: String = redis::cmd("INCRBYFLOAT")
        .arg("f")
        .arg("1.5")
        .query(&mut b)
        .unwrap();
    assert_eq!(f, "1.5");
    let old: String = redis::cmd("GETSET")
        .arg("s")
        .arg("new")
        .query(&mut a)
        .unwrap();
    assert_eq!(old, "abc");
    // MULTI/EXEC over one slot, and a WATCH loop from each DC.
    let (x, y): (i64, i64) = redis::pipe()
        .atomic()
        .incr("{acct}x", 5)
        .incr("{acct}y", 7)
        .query(&mut a)
        .unwrap();
    assert_eq!((x, y), (5, 7));
    for con in [&mut a, &mut b] {
        let (v,): (i64,) = redis::transaction(con, &["{acct}x"], |con, pipe| {
            let x: i64 = redis::cmd("GET").arg("{acct}x").query(con)?;
            pipe.set("{acct}x", x + 1)
                .ignore()
                .get("{acct}x")
                .query(con)
        })
        .unwrap();
        assert!(v == 6 || v == 7, "{v}");
    }
    let x: i64 = redis::cmd("GET").arg("{acct}x").query(&mut b).unwrap();
    assert_eq!(x, 7);
    up.terminate();
}

#[test]
fn up_partition_then_heal_keeps_both_sides_writes_as_siblings() {
    let up = Up::start(UP_ARGS);
    let (mut a, mut b) = (up.redis(0), up.redis(1));
    let cut = br#"{"cut_both":[[{"dc":0},{"dc":1}]]}"#;
    let (status, body) = http(up.in_dc(0).http, "PUT", "/wan", &[], cut);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    // Both sides accept writes with W 1 (and DW 1: DW is its own requirement, default
    // quorum) while cut off from each other.
    for (c, v) in [(&mut a, "left"), (&mut b, "right")] {
        let _: Vec<u8> = redis::cmd("MERIDIAN.PUT")
            .arg("split")
            .arg(v)
            .arg("W")
            .arg("1")
            .arg("DW")
            .arg("1")
            .arg("TIMEOUT")
            .arg("5000")
            .query(c)
            .unwrap();
    }

    let heal = br#"{"heal_all":true}"#;
    let (status, _) = http(up.in_dc(1).http, "PUT", "/wan", &[], heal);
    assert_eq!(status, 200);
    up.wait_all_up(0);
    // Hinted handoff and read repair converge; R 3 then sees both writes (bounded retries).
    let mut last = Vec::new();
    for _ in 0..600 {
        if let Ok((_, v)) = redis::cmd("MERIDIAN.GET")
            .arg("split")
            .arg("R")
            .arg("3")
            .query::<(Option<Vec<u8>>, Vec<String>)>(&mut a)
        {
            last = v;
            last.sort();
            if last == ["left", "right"] {
                up.terminate();
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("never saw both siblings; last: {last:?}");
}

// ----- `meridian up --processes` and `meridian node` with `[cluster]` ------------------------

/// Whether process `pid` still exists (a zombie counts: nobody reaped it).
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The status `/cluster` on `http` reports for the member named `name`.
fn status_of(http: SocketAddr, name: &str) -> String {
    let c = cluster_of(http);
    let m = c["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {c}"))
        .clone();
    m["status"].as_str().unwrap().to_owned()
}

#[test]
fn up_processes_runs_one_node_per_process_over_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(&[
        "--default-bucket",
        "eventual",
        "--processes",
        "--dcs",
        "2",
        "--nodes-per-dc",
        "2",
        "--wan-latency",
        "5ms",
        "--config-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(up.members.len(), 4);
    peer_links_need_the_runs_secret(&dir.path().join(format!("{}.toml", up.members[0].name)));
    let pids: Vec<u32> = up.members.iter().map(|m| m.pid.unwrap()).collect();
    assert!(pids.iter().all(|&p| alive(p) && p != up.child.id()));
    // Each node has its own loopback address.
    let ips: std::collections::BTreeSet<_> = up.members.iter().map(|m| m.resp.ip()).collect();
    assert_eq!(ips.len(), 4);

    let (mut a, mut b) = (up.redis(0), up.redis(1));
    set_here_get_there_and_resolve_siblings(&mut a, &mut b);

    // /cluster: 4 members, all up, 2 DCs.
    let c = up.cluster(1);
    assert_eq!(c["members"].as_array().unwrap().len(), 4);
    assert_eq!(c["dcs"].as_array().unwrap().len(), 2);
    up.wait_all_up(1);

    // SIGKILL one node of dc1: R=2 reads still succeed, and the others call it down.
    let victim = up.members.iter().rfind(|m| m.dc == 1).unwrap();
    let status = Command::new("kill")
        .args(["-KILL", &victim.pid.unwrap().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let observer = up.members[0].http;
    let mut last = String::new();
    for _ in 0..600 {
        last = status_of(observer, &victim.name);
        if last == "down" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(last, "down", "{} never reported down", victim.name);
    for key in ["greeting", "cart"] {
        let (_, values) = meridian_get(&mut a, key, "2");
        assert_eq!(values.len(), 1, "{key}: {values:?}");
    }

    // SIGTERM to `up` stops every child (and reaps the killed one).
    up.terminate();
    for p in pids {
        assert!(!alive(p), "node process {p} outlived meridian up");
    }
}

#[test]
fn up_processes_tls_encrypts_the_peer_links() {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(&[
        "--default-bucket",
        "eventual",
        "--processes",
        "--tls",
        "--n",
        "2",
        "--dcs",
        "2",
        "--nodes-per-dc",
        "1",
        "--config-dir",
        dir.path().to_str().unwrap(),
    ]);
    let config = dir.path().join(format!("{}.toml", up.members[0].name));
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("tls_cluster = true"), "{text}");
    // Replication crosses the (TLS) peer links.
    assert!(
        text.contains("tls = true"),
        "HTTP and S3 serve HTTPS: {text}"
    );
    let (mut a, mut b) = (up.redis(0), up.redis(1));
    set_here_get_there_and_resolve_siblings(&mut a, &mut b);
    // `meridian ctl` speaks HTTPS with the run's CA, and refuses to guess without it.
    let https = format!("https://{}", up.members[1].http);
    let ca = dir.path().join("ca.crt");
    let ctl = |extra: &[&str]| {
        Command::new(BIN)
            .args(["ctl", "--node", &https])
            .args(extra)
            .args(["cluster", "--json"])
            .env_remove("MERIDIAN_REQUIREPASS")
            .output()
            .unwrap()
    };
    let out = ctl(&["--cacert", ca.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["members"].as_array().unwrap().len(), 2, "{c}");
    let out = ctl(&[]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cacert"));
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-cluster")
        .query(&mut a)
        .unwrap();
    assert_eq!(reply, ["tls-cluster", "yes"]);
    // A plaintext peer hears no challenge: the node waits for a TLS ClientHello, then hangs
    // up at its handshake deadline.
    let peer: SocketAddr = config_value(&text, "peer").parse().unwrap();
    let mut s = TcpStream::connect(peer).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert!(read_peer_frame(&mut s).is_none(), "no plaintext handshake");
    up.terminate();
}

/// The value of `key = "..."` in a node config written by `up --processes`.
fn config_value(text: &str, key: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in {text}"));
    line.split('"').nth(1).unwrap().to_owned()
}

/// One length-prefixed frame from a raw peer connection; `None` once the node hung up.
fn read_peer_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    // Length, CRC32C, body (meridian_net::frame).
    let mut head = [0u8; 8];
    s.read_exact(&mut head).ok()?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    assert!(
        meridian_net::frame::body_matches(crc, &body),
        "a frame failed its CRC32C"
    );
    Some(body)
}

/// A node of `up --processes` (config at `config`) welcomes a peer proving the run's secret,
/// written only to its owner-readable config, and hangs up on one that does not.
fn peer_links_need_the_runs_secret(config: &Path) {
    use meridian_net::ClusterSecret;
    use meridian_net::envelope::{Challenge, Hello, Welcome};
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(config).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(config).unwrap();
    let secret = config_value(&text, "secret");
    assert_eq!(secret.len(), 64, "a fresh 256-bit secret per run");
    let peer: SocketAddr = config_value(&text, "peer").parse().unwrap();
    let attempt = |secret: &ClusterSecret| {
        let mut s = TcpStream::connect(peer).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let challenge = Challenge::decode(&read_peer_frame(&mut s).unwrap()).unwrap();
        let hello = Hello::new(meridian_core::NodeId(2), &challenge, secret).encode();
        s.write_all(&meridian_net::frame::encode_frame(&hello))
            .unwrap();
        read_peer_frame(&mut s).map(|f| Welcome::decode(&f).unwrap())
    };
    assert!(
        attempt(&ClusterSecret::random()).is_none(),
        "a random secret: refused"
    );
    let wrong = ClusterSecret::new(b"not this run's secret").unwrap();
    assert!(attempt(&wrong).is_none(), "another secret: refused");
    let right = ClusterSecret::new(secret.as_bytes()).unwrap();
    assert!(attempt(&right).is_some(), "the run's secret: welcomed");
}

#[test]
fn up_requires_its_password_on_every_front_end() {
    let up = Up::start(&[
        "--dcs",
        "1",
        "--nodes-per-dc",
        "3",
        "--requirepass",
        "s3cret-pass",
    ]);
    for m in &up.members {
        let mut c = redis::Client::open(format!("redis://{}/", m.resp))
            .unwrap()
            .get_connection()
            .unwrap();
        let e = redis::cmd("GET").arg("k").query::<Option<String>>(&mut c);
        assert!(e.unwrap_err().to_string().contains("NOAUTH"), "{}", m.name);
        let mut c = redis::Client::open(format!("redis://:s3cret-pass@{}/", m.resp))
            .unwrap()
            .get_connection()
            .unwrap();
        // A key per node: blind SETs of one key through several coordinators in quick
        // succession may be concurrent, and a GET would then answer their siblings (300).
        let key = format!("k-{}", m.name);
        let _: () = redis::cmd("SET").arg(&key).arg("v").query(&mut c).unwrap();
        let path = format!("/kv/{key}");
        let (status, _) = http(m.http, "GET", &path, &[], b"");
        assert_eq!(status, 401, "{}: HTTP without the password", m.name);
        let (status, body) = http(
            m.http,
            "GET",
            &path,
            &["Authorization: Bearer s3cret-pass"],
            b"",
        );
        assert_eq!((status, body.as_slice()), (200, &b"v"[..]), "{}", m.name);
    }
}

#[test]
fn bad_cluster_settings_are_rejected_with_the_setting_named() {
    let dir = tempfile::tempdir().unwrap();
    let member = |id: u32, port: u16| {
        format!(
            "[[cluster.members]]\nid = {id}\nname = \"n{id}\"\ndc = \"east\"\npeer = \"127.0.0.1:{port}\"\n"
        )
    };
    let cases: [(String, &str); 7] = [
        (
            format!(
                "[cluster]\nid = 1\nn = 1\n{}{}",
                member(1, 9001),
                member(2, 9002)
            ),
            "cluster.secret is not set but cluster.members names other nodes",
        ),
        (
            format!(
                "[cluster]\nid = 1\nn = 1\nsecret = \"too short\"\n{}",
                member(1, 9001)
            ),
            "cluster.secret (--cluster-secret): invalid network configuration: the cluster secret has 9 bytes: it must have between 16 and 4096",
        ),
        (
            format!("[cluster]\nid = 1\npeer_port = 5\n{}", member(1, 9001)),
            "peer_port",
        ),
        (
            format!("[cluster]\nid = 3\n{}{}", member(1, 9001), member(2, 9002)),
            "cluster.id = 3 is not in cluster.members",
        ),
        (
            format!("[cluster]\nid = 1\n{}{}", member(1, 9001), member(1, 9002)),
            "duplicate id 1",
        ),
        (
            format!("[cluster]\nid = 1\n{}{}", member(1, 9001), member(2, 9001)),
            "share the peer address 127.0.0.1:9001",
        ),
        (
            "[buckets.fast]\nr = \"one\"\n".to_owned(),
            "[buckets.*] tables need a [cluster] section",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let cfg = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&cfg, text).unwrap();
        let err = run_expecting_failure(&["node", "--config", cfg.to_str().unwrap()]);
        assert!(
            err.contains(want) && err.contains(&format!("bad{i}.toml")),
            "{text}\nwanted '{want}' in: {err}"
        );
    }
}

/// The peer secret of the clusters these tests write configs for.
const TEST_PEER_SECRET: &str = "the secret of a test cluster";

/// `[resp, http, peer]` addresses for `n` nodes, node `i` on 127.0.0.(`first` + i), on ports
/// the OS reports free (each probe held until all are chosen).
fn node_addresses(first: u8, n: u8) -> Vec<[SocketAddr; 3]> {
    let mut held = Vec::new();
    let addrs = (0..n)
        .map(|i| {
            let ip = std::net::Ipv4Addr::new(127, 0, 0, first + i);
            [(); 3].map(|_| {
                let l = std::net::TcpListener::bind((ip, 0)).unwrap();
                let a = l.local_addr().unwrap();
                held.push(l);
                a
            })
        })
        .collect();
    drop(held);
    addrs
}

/// Three `meridian node --config` processes (dc0: 2 nodes, dc1: 1 node, N = 3) on the durable
/// engine with `fsync = always`, over TCP on 127.0.0.x. Writers put distinct keys with
/// `W 2 DW 2` to the two survivors while the third is SIGKILLed and later restarted with the
/// same config (a new incarnation from its identity file). Every acknowledged write must then
/// be readable from every node, and the restarted node must hold every one itself: the keys
/// written before the kill from its disk, the ones written while it was down through
/// anti-entropy.
#[test]
fn durable_cluster_node_survives_sigkill_with_no_acknowledged_write_lost() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = node_addresses(40, 3);
    let names = ["dc0-n0", "dc0-n1", "dc1-n0"];
    let mut members = String::new();
    for (i, [resp, http, peer]) in addrs.iter().enumerate() {
        let dc = &names[i][..3];
        members.push_str(&format!(
            "[[cluster.members]]\nid = {}\nname = \"{}\"\ndc = \"{dc}\"\npeer = \"{peer}\"\n\
             resp = \"{resp}\"\nhttp = \"{http}\"\n\n",
            i + 1,
            names[i]
        ));
    }
    let configs: Vec<String> = (0..3)
        .map(|i| {
            let [resp, http, _] = addrs[i];
            let data = dir.path().join(format!("data{}", i + 1));
            let text = format!(
                "[resp]\nlisten = \"{resp}\"\nmisrouted = \"serve\"\n[http]\nlisten = \"{http}\"\n\
                 [storage]\nengine = \"fjall\"\ndata_dir = \"{}\"\nfsync = \"always\"\n\
                 [buckets.default]\ntype = \"eventual\"\n\
                 [cluster]\nid = {}\nq = 64\nn = 3\nheartbeat_ms = 100\nhandoff_ms = 200\n\
                 anti_entropy_ms = 20\nsecret = \"{TEST_PEER_SECRET}\"\n\n{members}",
                data.display(),
                i + 1
            );
            let path = dir.path().join(format!("{}.toml", names[i]));
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_owned()
        })
        .collect();
    let start = |i: usize| Node::spawn(&["--config", &configs[i]]);
    let wait_all_up = |nodes: &[&Node]| {
        for n in nodes {
            let mut last = serde_json::Value::Null;
            for _ in 0..600 {
                last = cluster_of(n.http);
                if last["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|m| m["status"] == "up")
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            assert!(
                last["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|m| m["status"] == "up"),
                "members never all up: {last}"
            );
        }
    };
    let identity = |i: usize| -> String {
        std::fs::read_to_string(dir.path().join(format!("data{}/meridian-identity", i + 1)))
            .unwrap()
    };
    let incarnation = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("incarnation = "))
            .unwrap()
            .parse()
            .unwrap()
    };

    let mut nodes: Vec<Option<Node>> = (0..3).map(|i| Some(start(i))).collect();
    wait_all_up(&nodes.iter().flatten().collect::<Vec<_>>());
    let victim = 2; // dc1-n0, alone in its DC
    let first_life = identity(victim);
    assert!(first_life.contains("node_id = 3"), "{first_life}");

    // Writers on the two survivors, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(String, String)>();
    let writers: Vec<_> = [0usize, 1]
        .into_iter()
        .flat_map(|n| [(n, 0), (n, 1)])
        .map(|(n, w)| {
            let (tx, stop) = (tx.clone(), stop.clone());
            let addr = nodes[n].as_ref().unwrap().resp;
            std::thread::spawn(move || {
                let mut r = redis::Client::open(format!("redis://{addr}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (k, v) = (format!("n{n}w{w}k{i}"), format!("v{i}"));
                    i += 1;
                    // An error (e.g. a timeout while the victim is not yet known down) is
                    // not an acknowledgement.
                    if redis::cmd("MERIDIAN.PUT")
                        .arg(&k)
                        .arg(&v)
                        .arg("W")
                        .arg("2")
                        .arg("DW")
                        .arg("2")
                        .query::<Vec<u8>>(&mut r)
                        .is_ok()
                        && tx.send((k, v)).is_err()
                    {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let mut acked: Vec<(String, String)> = Vec::new();
    let collect = |acked: &mut Vec<(String, String)>, n: usize| {
        for _ in 0..n {
            acked.push(
                rx.recv_timeout(Duration::from_secs(60))
                    .expect("writes stalled"),
            );
        }
    };
    collect(&mut acked, 200);
    nodes[victim].take().unwrap().kill9();
    // W 2 is still satisfiable by the two survivors.
    collect(&mut acked, 200);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    acked.extend(rx.try_iter());

    // Restart the victim with the same config: same data, next incarnation.
    nodes[victim] = Some(start(victim));
    let second_life = identity(victim);
    assert!(second_life.contains("node_id = 3"), "{second_life}");
    assert!(
        incarnation(&second_life) > incarnation(&first_life),
        "{first_life} then {second_life}"
    );
    wait_all_up(&nodes.iter().flatten().collect::<Vec<_>>());

    // Anti-entropy brings the restarted node every key (bounded polling on its engine's key
    // count; the exact check follows).
    let restarted = nodes[victim].as_ref().unwrap().http;
    let mut live = 0;
    for _ in 0..600 {
        let (_, body) = http(restarted, "GET", "/status", &[], b"");
        let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
        live = j["engine"]["live_keys"].as_u64().unwrap();
        if live >= acked.len() as u64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        live >= acked.len() as u64,
        "{live} keys < {} acked",
        acked.len()
    );

    // Every acknowledged write, read with R 2 from every node.
    for node in nodes.iter().flatten() {
        let mut r = node.redis();
        for (k, v) in &acked {
            let (_, values) = meridian_get(&mut r, k, "2");
            assert!(values.contains(v), "acknowledged {k}={v} lost: {values:?}");
        }
    }

    // The restarted node holds every one itself: with the others gone, R 1 can only be
    // answered by its own replica.
    for i in [0, 1] {
        nodes[i].take().unwrap().kill9();
    }
    let mut r = nodes[victim].as_ref().unwrap().redis();
    for (k, v) in &acked {
        let (_, values) = meridian_get(&mut r, k, "1");
        assert!(
            values.contains(v),
            "restarted node lacks {k}={v}: {values:?}"
        );
    }
}

// ----- `meridian ctl`: the HTTP admin API from the command line -----------------------------

/// `meridian ctl --node NODE ARGS` → (success, stdout, stderr).
fn ctl(node: SocketAddr, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .arg("ctl")
        .args(["--node", &node.to_string()])
        .args(args)
        .env_remove("MERIDIAN_NODE")
        .env_remove("MERIDIAN_REQUIREPASS")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Like [`ctl`], asserting success; returns stdout.
fn ctl_ok(node: SocketAddr, args: &[&str]) -> String {
    let (ok, out, err) = ctl(node, args);
    assert!(ok, "ctl {args:?} failed: {err}{out}");
    out
}

/// `MERIDIAN.PUT key value W 2 DW 2 TIMEOUT 300`.
fn put_w2(c: &mut redis::Connection, key: &str) -> redis::RedisResult<Vec<u8>> {
    redis::cmd("MERIDIAN.PUT")
        .arg(key)
        .arg("v")
        .arg("W")
        .arg("2")
        .arg("DW")
        .arg("2")
        .arg("TIMEOUT")
        .arg("300")
        .query(c)
}

#[test]
fn ctl_shows_the_cluster_sets_buckets_and_cuts_and_heals_the_wan() {
    let up = Up::start(&[
        "--default-bucket",
        "eventual",
        "--dcs",
        "2",
        "--nodes-per-dc",
        "1",
        "--n",
        "2",
        "--wan-latency",
        "5ms",
    ]);
    let h = up.in_dc(0).http;
    up.wait_all_up(0);

    // The member table: both nodes, up, with their addresses.
    let table = ctl_ok(h, &["cluster"]);
    for m in &up.members {
        let row = table
            .lines()
            .find(|l| l.starts_with(&m.name))
            .unwrap_or_else(|| panic!("{} not in:\n{table}", m.name));
        assert!(row.contains(&m.http.to_string()), "{row}");
        assert!(row.contains(&m.resp.to_string()), "{row}");
        assert!(row.split_whitespace().any(|f| f == "up"), "{row}");
    }
    let json: serde_json::Value = serde_json::from_str(&ctl_ok(h, &["cluster", "--json"])).unwrap();
    assert_eq!(json["members"].as_array().unwrap().len(), 2);

    // Buckets: set, then listed; an invalid change shows the node's error code.
    let out = ctl_ok(h, &["bucket", "set", "default", "r=1"]);
    assert!(out.contains("r=1"), "{out}");
    let list = ctl_ok(h, &["buckets"]);
    let row = list.lines().find(|l| l.starts_with("default")).unwrap();
    assert!(row.contains("r=1") && row.contains("n_val=2"), "{list}");
    let j: serde_json::Value = serde_json::from_str(&ctl_ok(h, &["buckets", "--json"])).unwrap();
    assert_eq!(j["buckets"]["default"]["r"], 1);
    let (ok, _, err) = ctl(h, &["bucket", "set", "default", "n_val=9"]);
    assert!(!ok && err.contains("INVALID_BUCKET"), "{err}");

    // A WAN partition between the DCs: W 2 cannot be met; healed, it can (bounded retries
    // while the failure detectors notice).
    let out = ctl_ok(h, &["wan", "cut", "0", "1"]);
    assert!(
        out.contains("dc0 -> dc1") && out.contains("dc1 -> dc0"),
        "{out}"
    );
    let mut r = up.redis(0);
    assert!(put_w2(&mut r, "ctl-key").is_err(), "W 2 across a cut");
    let out = ctl_ok(h, &["wan", "heal", "--all"]);
    assert!(out.contains("cuts:     none"), "{out}");
    up.wait_all_up(0);
    let mut last = None;
    for _ in 0..600 {
        match put_w2(&mut r, "ctl-key") {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(last.is_none(), "W 2 after healing: {last:?}");

    // Link settings change at run time.
    let out = ctl_ok(h, &["wan", "set", "--latency", "20ms", "--jitter", "10%"]);
    assert!(
        out.contains("rtt 40ms") && out.contains("jitter 10%"),
        "{out}"
    );
    let (ok, _, err) = ctl(h, &["wan", "set", "--loss", "200%"]);
    assert!(!ok && err.contains("BAD_WAN"), "{err}");
    up.terminate();
}

#[test]
fn ctl_timeline_force_master_warns_and_needs_yes() {
    let up = Up::start(&[
        "--default-bucket",
        "eventual",
        "--dcs",
        "2",
        "--nodes-per-dc",
        "1",
        "--n",
        "2",
        "--wan-latency",
        "5ms",
    ]);
    let h = up.in_dc(0).http;
    up.wait_all_up(0);
    let out = ctl_ok(h, &["bucket", "set", "tl", "type=timeline", "n_val=2"]);
    assert!(out.contains("type=timeline"), "{out}");
    // The bucket reaches the other node through the claimant: retry (bounded) until a
    // timeline write is accepted there.
    let mut r1 = up.redis(1);
    let mut version = None;
    for _ in 0..600 {
        match redis::cmd("MERIDIAN.SET")
            .arg("tl:k")
            .arg("v")
            .query::<String>(&mut r1)
        {
            Ok(v) => {
                version = Some(v);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let version = version.expect("a timeline write on the bucket");
    // Both replicas (one per DC) hold it before the mastership moves, so nothing is lost.
    let mut r0 = up.redis(0);
    for _ in 0..600 {
        let (_, v): (Option<String>, Option<String>) = redis::cmd("MERIDIAN.GET")
            .arg("tl:k")
            .arg("ANY")
            .query(&mut r0)
            .unwrap();
        if v.as_deref() == Some(version.as_str()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // Without --yes and without a terminal: the warning, a refusal, nothing changed.
    let args = [
        "timeline",
        "force-master",
        "--bucket",
        "tl",
        "--key",
        "k",
        "--dc",
        "dc0",
    ];
    let (ok, out, err) = ctl(h, &args);
    assert!(!ok, "{out}");
    assert!(err.contains("MAY LOSE ACKNOWLEDGED WRITES"), "{err}");
    assert!(err.contains("--yes"), "{err}");
    let (_, v): (Option<String>, Option<String>) = redis::cmd("MERIDIAN.GET")
        .arg("tl:k")
        .arg("LATEST")
        .query(&mut r0)
        .unwrap();
    assert_eq!(
        v.as_deref(),
        Some(version.as_str()),
        "refused: no new epoch"
    );

    // With --yes: it runs, and says where the master is now.
    let mut yes = args.to_vec();
    yes.push("--yes");
    let (ok, out, err) = ctl(h, &yes);
    assert!(ok, "{err}{out}");
    assert!(err.contains("MAY LOSE ACKNOWLEDGED WRITES"), "{err}");
    assert!(out.starts_with("tl:k: the master is now node"), "{out}");
    assert!(out.contains(" in dc0, version "), "{out}");
    let (value, v): (Option<String>, Option<String>) = redis::cmd("MERIDIAN.GET")
        .arg("tl:k")
        .arg("LATEST")
        .query(&mut r0)
        .unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    let mepoch = |v: &str| v.split('.').nth(1).unwrap().parse::<u32>().unwrap();
    assert_eq!(
        mepoch(&v.unwrap()),
        mepoch(&version) + 1,
        "a new master epoch"
    );
    // A DC with no member is named as such.
    let mut bad = args.to_vec();
    bad[7] = "dc7";
    bad.push("--yes");
    let (ok, _, err) = ctl(h, &bad);
    assert!(!ok && err.contains("BAD_FORCE_MASTER"), "{err}");
    up.terminate();
}

#[test]
fn ctl_reports_an_unreachable_node_clearly() {
    let (ok, _, err) = ctl("127.0.0.1:1".parse().unwrap(), &["status"]);
    assert!(!ok);
    assert!(
        err.contains("cannot reach node at 127.0.0.1:1") && err.contains("meridian up"),
        "{err}"
    );
}

#[test]
fn ctl_talks_to_a_single_node_with_its_password() {
    let node = Node::start(&["--requirepass", "s3cret"]);
    let (ok, _, err) = ctl(node.http, &["status"]);
    assert!(!ok && err.contains("UNAUTHORIZED"), "{err}");
    let status = ctl_ok(node.http, &["--password", "s3cret", "status"]);
    let j: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(j["engine"]["name"], "mem");
    let (ok, _, err) = ctl(node.http, &["--password", "s3cret", "cluster"]);
    assert!(!ok && err.contains("NOT_CLUSTER"), "{err}");
}

// ----- membership changes through the admin API, over TCP ---------------------------------

/// The `/cluster` of `http` once `done` holds for it (bounded polling).
fn wait_cluster(http: SocketAddr, what: &str, done: impl Fn(&serde_json::Value) -> bool) {
    let mut last = serde_json::Value::Null;
    for _ in 0..1200 {
        last = cluster_of(http);
        if done(&last) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} never happened: {last}");
}

fn settled(c: &serde_json::Value, members: usize) -> bool {
    let m = c["members"].as_array().unwrap();
    c["handoff"]["running"] == false && m.len() == members && m.iter().all(|m| m["status"] == "up")
}

#[test]
fn nodes_join_and_leave_a_tcp_cluster_through_the_admin_api_without_losing_writes() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = node_addresses(50, 4);
    let names = ["dc0-n0", "dc0-n1", "dc1-n0", "dc1-n1"];
    let member = |i: usize| {
        let [resp, http, peer] = addrs[i];
        format!(
            "[[cluster.members]]\nid = {}\nname = \"{}\"\ndc = \"{}\"\npeer = \"{peer}\"\n\
             resp = \"{resp}\"\nhttp = \"{http}\"\n\n",
            i + 1,
            names[i],
            &names[i][..3]
        )
    };
    // Nodes 1-3 form the cluster; node 4 is started to join it.
    let config = |i: usize| {
        let [resp, http, _] = addrs[i];
        let (join, members) = if i == 3 {
            ("join = true\n", (0..4).map(member).collect::<String>())
        } else {
            ("", (0..3).map(member).collect::<String>())
        };
        let text = format!(
            "[resp]\nlisten = \"{resp}\"\nmisrouted = \"serve\"\n[http]\nlisten = \"{http}\"\n\
             [buckets.default]\ntype = \"eventual\"\n\
             [cluster]\nid = {}\nq = 64\nn = 3\nheartbeat_ms = 100\nhandoff_ms = 500\n{join}\
             secret = \"{TEST_PEER_SECRET}\"\n\n{members}",
            i + 1
        );
        let path = dir.path().join(format!("{}.toml", names[i]));
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let nodes: Vec<Node> = (0..3)
        .map(|i| Node::spawn(&["--config", &config(i)]))
        .collect();
    wait_cluster(nodes[0].http, "3 members up", |c| settled(c, 3));

    let mut r = nodes[1].redis();
    let mut acked = Vec::new();
    for i in 0..150 {
        let (k, v) = (format!("j{i}"), format!("v{i}"));
        let _: Vec<u8> = redis::cmd("MERIDIAN.PUT")
            .arg(&k)
            .arg(&v)
            .arg("W")
            .arg("2")
            .query(&mut r)
            .unwrap();
        acked.push((k, v));
    }

    // A joining node serves nothing until it is admitted.
    let joiner = Node::spawn(&["--config", &config(3)]);
    let c = cluster_of(joiner.http);
    assert_eq!(
        (c["joined"].clone(), c["metadata_version"].clone()),
        (false.into(), 0.into())
    );
    let err = redis::cmd("GET")
        .arg("j1")
        .query::<Option<Vec<u8>>>(&mut joiner.redis())
        .unwrap_err();
    assert!(err.to_string().contains("not_joined"), "{err}");

    let [resp4, http4, peer4] = addrs[3];
    let out = ctl_ok(
        nodes[2].http,
        &[
            "join",
            "4",
            "--name",
            "dc1-n1",
            "--dc",
            "dc1",
            "--peer",
            &peer4.to_string(),
            "--resp",
            &resp4.to_string(),
            "--http",
            &http4.to_string(),
        ],
    );
    assert!(
        out.contains("node 4 joins") && out.contains("layout epoch 2"),
        "{out}"
    );
    let (ok, _, err) = ctl(nodes[0].http, &["leave", "4"]);
    assert!(
        !ok && err.contains("MEMBERSHIP_REFUSED"),
        "one change at a time: {err}"
    );
    for n in [&nodes[0].http, &joiner.http] {
        wait_cluster(*n, "the join's handoff", |c| settled(c, 4));
    }
    let c = cluster_of(joiner.http);
    let me = c["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == 4)
        .unwrap()
        .clone();
    assert!(me["partitions"]["primary"].as_u64().unwrap() > 0, "{c}");
    // Every write, from the new node, with every replica answering.
    let mut r4 = joiner.redis();
    for (k, v) in &acked {
        let (_, values) = meridian_get(&mut r4, k, "3");
        assert_eq!(values, std::slice::from_ref(v), "{k}");
    }

    // Node 2 leaves: its data moves, then it holds nothing.
    let out = ctl_ok(joiner.http, &["leave", "2"]);
    assert!(out.contains("node 2 leaves"), "{out}");
    wait_cluster(nodes[0].http, "the leave's handoff", |c| {
        c["handoff"]["running"] == false && c["members"].as_array().unwrap().len() == 3
    });
    let (_, body) = http(nodes[1].http, "GET", "/status", &[], b"");
    let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(j["engine"]["live_keys"], 0, "the leaver kept data: {j}");
    let mut r1 = nodes[0].redis();
    for (k, v) in &acked {
        let (_, values) = meridian_get(&mut r1, k, "3");
        assert_eq!(values, std::slice::from_ref(v), "{k}");
    }
    let table = ctl_ok(nodes[0].http, &["cluster"]);
    assert!(
        !table.contains("dc0-n1") && table.contains("dc1-n1"),
        "{table}"
    );
}

// ----- meridian bench / experiment -----

/// Runs `meridian ARGS` to completion and returns its stdout; fails the test on failure.
fn run_ok(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{args:?} failed:\n{stdout}\n{stderr}");
    stdout.to_string()
}

#[test]
fn bench_runs_a_ycsb_workload_in_virtual_time_and_writes_report_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let stdout = run_ok(&[
        "bench",
        "--target",
        "virtual",
        "--mode",
        "lt_rec",
        "--workload",
        "b",
        "-p",
        "recordcount=300",
        "-p",
        "operationcount=0",
        "-p",
        "locality=0.9",
        "--duration",
        "5",
        "--warmup",
        "1",
        "--threads",
        "8",
        "--rate-per-thread",
        "15",
        "--quiet",
        "--out",
        out,
    ]);
    assert!(
        stdout.contains("| read |") && stdout.contains("| update |"),
        "{stdout}"
    );
    for f in [
        "report.json",
        "histograms.hlog",
        "report.csv",
        "settings.json",
        "cdf.png",
        "cdf.svg",
        "boxes.png",
        "throughput.svg",
    ] {
        assert!(
            dir.path().join(f).is_file(),
            "{f} missing; stdout:\n{stdout}"
        );
    }
    let settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("settings.json")).unwrap()).unwrap();
    assert_eq!(settings["clock"], "virtual");
    assert!(
        settings["phases"]["warmup_passes"].as_u64().unwrap() >= 1,
        "{settings}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    assert!(
        report["errors_by_code"].as_object().unwrap().is_empty(),
        "{report}"
    );
}

/// The README's second bench example, as printed (plus `--out`): workload A's 1,000 ops run
/// in well under the 5 s warm-up in virtual time, yet the table has rows with figures, and
/// YCSB's own `workload=site.ycsb.workloads.CoreWorkload` line draws no warning.
#[test]
fn readme_bench_example_with_a_fixed_op_count_prints_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "bench",
        "--workload",
        "a",
        "--target",
        "virtual",
        "--mode",
        "ind2",
        "--wan-rtt-ms",
        "200",
        "--jitter-pct",
        "60",
        "--out",
        dir.path().to_str().unwrap(),
    ];
    let out = Command::new(BIN).args(args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    // Not logged to a terminal: the phases are plain lines.
    assert!(stderr.contains("load: 1000/1000 records"), "{stderr}");
    for op in ["read", "update"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("|  | {op} |")))
            .unwrap_or_else(|| panic!("no {op} row:\n{stdout}"));
        // `|  | read | 3.00 | ...`: a local p50, not `–`.
        let p50 = row.split('|').nth(3).unwrap().trim();
        assert!(p50.parse::<f64>().is_ok(), "{row}");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["warmup_excluded"], 100, "{report}");
}

#[test]
fn bench_drives_a_node_over_resp_like_any_redis_server() {
    let node = Node::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = format!("resp://{}", node.resp);
    let stdout = run_ok(&[
        "bench",
        "--target",
        &target,
        "--workload",
        "a",
        "-p",
        "recordcount=200",
        "--load",
        "--threads",
        "4",
        "--connections",
        "2",
        "--pipeline",
        "2",
        "--warmup",
        "0",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    // Workload A's operationcount (1000) ends the run.
    assert!(stdout.contains("1000 ops started"), "{stdout}");
    assert!(!stdout.contains("errors:"), "{stdout}");
}

#[test]
fn bench_and_experiment_refuse_bad_input_with_what_to_do() {
    let err = run_expecting_failure(&["bench", "--target", "tcp://x"]);
    assert!(err.contains("use embedded, virtual or resp://"), "{err}");
    let err = run_expecting_failure(&["bench", "--workload", "z"]);
    assert!(err.contains("use a, b, c, d, e or f"), "{err}");
    let err = run_expecting_failure(&["bench", "-p", "readproportion=lots"]);
    assert!(err.contains("readproportion"), "{err}");
    let err = run_expecting_failure(&["bench", "--mode", "strong"]);
    assert!(err.contains("ind1, ind2, lt_qqer, lt_rec"), "{err}");
    let err = run_expecting_failure(&["bench", "--target", "resp://127.0.0.1:1", "--quiet"]);
    assert!(err.contains("127.0.0.1:1"), "{err}");
    let err = run_expecting_failure(&["experiment", "/nonexistent/plan.toml"]);
    assert!(err.contains("/nonexistent/plan.toml"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, "design = { kind = \"full_factorial\" }\nfactors = { mode = [\"ind1\"] }\nfixed = { wan_rtt = 100 }\n").unwrap();
    let out = dir.path().join("out");
    let err = run_expecting_failure(&[
        "experiment",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(err.contains("unknown parameter `wan_rtt`"), "{err}");
}

#[test]
fn experiment_runs_a_design_then_resumes_without_redoing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("tiny.toml");
    std::fs::write(
        &plan,
        "design = { kind = \"full_factorial\", replications = 2 }\n\
         factors = { mode = [\"ind2\", \"lt_qqer\"] }\n\
         fixed = { objects = 100, threads = 8, measure_s = 3, warmup_s = 1, warmup_passes = 2 }\n",
    )
    .unwrap();
    let out = dir.path().join("results");
    let args = [
        "experiment",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    let first = run_ok(&args);
    assert!(
        first.contains("4 runs done (4 this time, 0 kept), 0 failed"),
        "{first}"
    );
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("# Experiment `tiny`"), "{summary}");
    assert!(out.join("plots").join("boxplots.png").is_file());
    let again = run_ok(&args);
    assert!(
        again.contains("4 runs done (0 this time, 4 kept)"),
        "{again}"
    );
}

// ----- read load balancing ------------------------------------------------------------------

/// GET /balance on the node serving HTTP on `addr`.
fn balance_of(addr: SocketAddr) -> serde_json::Value {
    let (status, body) = http(addr, "GET", "/balance", &[], b"");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

#[test]
fn up_balance_flags_ctl_balance_and_service_models() {
    let up = Up::start(&[
        "--default-bucket",
        "eventual",
        "--dcs",
        "1",
        "--nodes-per-dc",
        "4",
        "--n",
        "3",
        "--service-model",
        "fixed:2",
        "--read-workers",
        "1",
    ]);
    let h = up.members[0].http;
    up.wait_all_up(0);
    // The flags reached every node.
    for m in &up.members {
        let b = balance_of(m.http);
        assert_eq!(b["service_model"], "fixed:2", "{b}");
        assert_eq!(b["read_workers"], 1, "{b}");
    }
    // Bucket properties from the command line; strategy names in any case.
    let out = ctl_ok(
        h,
        &[
            "bucket",
            "set",
            "default",
            "replica_selection=C3",
            "extra_copies=true",
        ],
    );
    assert!(
        out.contains("replica_selection=c3") && out.contains("extra_copies=true"),
        "{out}"
    );
    assert!(
        !out.contains("=-"),
        "unset properties are not listed: {out}"
    );
    let (ok, _, err) = ctl(
        h,
        &["bucket", "set", "default", "replica_selection=fastest"],
    );
    assert!(
        !ok && err.contains("fastest") && err.contains("dynamic_snitch"),
        "{err}"
    );

    // One hot key read through one replica at a time, until the DC's root (node 1) lists
    // an extra copy of it (bounded; not a timing assertion).
    let mut r = up.redis(0);
    let _: () = redis::cmd("SET").arg("hot").arg("v").query(&mut r).unwrap();
    let mut listed = false;
    for _ in 0..300 {
        for _ in 0..20 {
            let _: redis::Value = redis::cmd("MERIDIAN.GET")
                .arg("hot")
                .arg("R")
                .arg("1")
                .arg("READ_FANOUT")
                .arg("quorum")
                .query(&mut r)
                .unwrap();
        }
        let b = balance_of(h);
        if b["extra_map"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["key"] == "hot")
        {
            listed = true;
            break;
        }
    }
    assert!(listed, "no extra copy of the hot key: {}", balance_of(h));
    let out = ctl_ok(h, &["balance", "--dc"]);
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("hot  "))
        .unwrap_or_else(|| panic!("no hot key row:\n{out}"));
    assert!(row.contains("686f74"), "{row}");
    assert!(
        out.contains("CHOSEN") && out.contains("nodes of dc0:"),
        "{out}"
    );
    for m in &up.members {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(&m.name) && l.contains("fixed:2")),
            "{} missing:\n{out}",
            m.name
        );
    }
    let j: serde_json::Value =
        serde_json::from_str(&ctl_ok(h, &["balance", "--dc", "--json"])).unwrap();
    assert_eq!(j.as_array().unwrap().len(), 4);

    // Another node's service model, through this node (one process: every node is local).
    let out = ctl_ok(h, &["service-model", "fixed:50", "--id", "2"]);
    assert_eq!(
        out.trim(),
        "node 2 (dc0-n1): service model fixed:50 (was fixed:2)"
    );
    assert_eq!(balance_of(up.members[1].http)["service_model"], "fixed:50");
    assert_eq!(balance_of(h)["service_model"], "fixed:2");
    let (ok, _, err) = ctl(h, &["service-model", "fixed:0"]);
    assert!(!ok && err.contains("BAD_SERVICE_MODEL: model:"), "{err}");
    let (ok, _, err) = ctl(h, &["service-model", "real", "--id", "9"]);
    assert!(!ok && err.contains("node: 9 is not a member"), "{err}");
    up.terminate();
}

/// `meridian bench blob`: uploads with two streams and downloads over an emulated WAN, every
/// object verified; admission refusals counted as such; the report on disk.
#[test]
fn bench_blob_verifies_every_object_and_counts_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let report = |out: &Path| -> serde_json::Value {
        let text = std::fs::read_to_string(out.join("report.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["report"].clone()
    };
    for (op, streams) in [("put", "2"), ("get", "3")] {
        let out = dir.path().join(op);
        let o = Command::new(BIN)
            .args(["bench", "blob", "--op", op, "--streams", streams])
            .args(["--object-size", "11MiB", "--chunk-size", "256KiB"])
            .args(["--clients", "2", "--threads", "2", "--topology", "wan"])
            .args(["--rtt-ms", "4", "--bandwidth-mbit", "0"])
            .args(["--placement", "both"])
            .args(["--socket-buffer", "auto", "--quiet", "--store", "files"])
            .arg("--store-dir")
            .arg(dir.path())
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let r = report(&out);
        assert_eq!(r["transfers"], 4, "{r}");
        assert_eq!(r["completed"], 4, "{r}");
        assert_eq!(r["verified"], 4, "{r}");
        assert_eq!(r["streams_used"].as_u64(), Some(streams.parse().unwrap()));
        let csv = std::fs::read_to_string(out.join("report.csv")).unwrap();
        assert_eq!(csv.lines().count(), 2, "{csv}");
        assert!(out.join("timeseries.csv").exists() && out.join("completions.svg").exists());
    }
    // Two may run and none wait: of six simultaneous uploads to a 2 MB/s disk, four are
    // refused, all with TooManyTransfers, and the two admitted verify.
    let out = dir.path().join("refused");
    let o = Command::new(BIN)
        .args(["bench", "blob", "--object-size", "2MiB", "--threads", "6"])
        .args(["--max-active", "2", "--max-queued", "0"])
        .args(["--disk-mbps", "2", "--quiet"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = report(&out);
    assert_eq!(
        (r["completed"].as_u64(), r["verified"].as_u64()),
        (Some(2), Some(2)),
        "{r}"
    );
    assert_eq!(r["rejected"], 4, "{r}");
    assert_eq!(r["errors"], serde_json::json!({}), "{r}");
    // Leftover chunk files are removed with their run.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("meridian-bench-blob")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Issue 42 over TCP: a user set on one node process is enforced by the others (the users
/// ride in the cluster metadata the peers exchange), and deleting it on another removes it
/// everywhere.
#[test]
fn up_processes_enforce_users_set_on_any_node() {
    let dir = tempfile::tempdir().unwrap();
    let up = Up::start(&[
        "--processes",
        "--dcs",
        "1",
        "--nodes-per-dc",
        "3",
        "--config-dir",
        dir.path().to_str().unwrap(),
    ]);
    let connect = |i: usize, auth: &str| {
        redis::Client::open(format!("redis://{auth}{}/", up.members[i].resp))
            .unwrap()
            .get_connection()
    };
    let mut admin = connect(0, "").unwrap();
    let ok: String = redis::cmd("ACL")
        .arg(&["SETUSER", "alice", "on", ">pw", "~app:*", "+get", "+set"])
        .query(&mut admin)
        .unwrap();
    assert_eq!(ok, "OK");
    for i in [1, 2] {
        let mut alice = connect(i, "alice:pw@").unwrap();
        let _: () = redis::cmd("SET")
            .arg("app:1")
            .arg("v")
            .query(&mut alice)
            .unwrap();
        let e = redis::cmd("SET")
            .arg("other")
            .arg("v")
            .query::<()>(&mut alice)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("no permissions to access one of the keys used as arguments"),
            "node {i}: {e}"
        );
    }
    let mut admin1 = connect(1, "").unwrap();
    let deleted: i64 = redis::cmd("ACL")
        .arg(&["DELUSER", "alice"])
        .query(&mut admin1)
        .unwrap();
    assert_eq!(deleted, 1);
    let e = connect(2, "alice:pw@").map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e}");
    up.terminate();
}
