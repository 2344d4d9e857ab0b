//! End-to-end tests of the `meridian` binary: real processes, real sockets on loopback.
//!
//! Each test starts `meridian node` on port 0 and learns its addresses from the startup log
//! line, so tests never collide on ports and need no fixed sleeps to find the server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_meridian");

/// A running `meridian node` child process.
struct Node {
    child: Child,
    resp: SocketAddr,
    http: SocketAddr,
    log: mpsc::Receiver<String>,
}

impl Node {
    fn start(args: &[&str]) -> Node {
        let mut child = Command::new(BIN)
            .arg("node")
            .args(["--resp", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn meridian");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
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
    (status, body)
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
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
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
