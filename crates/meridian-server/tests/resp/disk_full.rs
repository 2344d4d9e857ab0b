//! A full disk (issue 18, row 5) on a whole node: writes answer `-MISCONF` on RESP and 507 on
//! HTTP while it lasts, reads are served, `/health` is 503 with the reason and INFO says
//! `aof_last_write_status:err` and why; when space returns the node resumes by itself, with
//! no restart. The fault comes through the storage seam (`FaultySpace`: `ENOSPC` on the
//! journal write, 0 bytes free) or the `storage.min_free_disk` reserve; the real disk is never
//! filled.

use super::*;
use meridian_server::NodeConfig;
use meridian_server::config::EngineKind;
use meridian_storage::{Durability, Engine, FaultySpace, FjallConfig, FjallEngine};
use std::time::Instant;

/// One HTTP/1.1 request with `Connection: close`: the status and the body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    s.write_all(&req).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut raw))
        .await
        .expect("reply")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

async fn info_persistence(c: &mut Raw) -> String {
    let Frame::Bulk(text) = c.cmd(&[b"INFO", b"persistence"]).await else {
        panic!("INFO persistence")
    };
    String::from_utf8(text.to_vec()).unwrap()
}

/// The value of an INFO field, if present.
fn field(text: &str, name: &str) -> Option<String> {
    text.split("\r\n")
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::to_string)
}

fn error_text(f: Frame) -> String {
    match f {
        Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A node on a fjall engine the test holds the fault switch of.
async fn node_over(engine: Arc<dyn Engine>, dir: &std::path::Path) -> RunningNode {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    config.storage.engine = EngineKind::Fjall;
    config.storage.fsync = Durability::Always;
    config.storage.data_dir = dir.to_path_buf();
    let listeners = meridian_server::Listeners::bind(&config).await.unwrap();
    let state = meridian_server::NodeState::with_engine(
        config,
        engine,
        Arc::new(meridian_core::SystemClock::new()),
    )
    .unwrap();
    RunningNode::serve(state, listeners)
}

async fn connect(addr: SocketAddr) -> Raw {
    Raw {
        stream: TcpStream::connect(addr).await.unwrap(),
        buf: BytesMut::new(),
    }
}

#[tokio::test]
async fn a_full_disk_refuses_writes_says_why_and_recovers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let space = Arc::new(FaultySpace::new());
    // No reserve: the filesystem's own ENOSPC (through the seam) is what refuses the write.
    let engine = FjallEngine::open(FjallConfig {
        min_free_bytes: 0,
        space: Some(space.clone()),
        ..FjallConfig::new(dir.path().join("db"), Durability::Always)
    })
    .unwrap();
    let node = node_over(Arc::new(engine), dir.path()).await;
    let mut c = connect(node.resp).await;
    c.roundtrip(b"SET a 1\r\n", b"+OK\r\n").await;
    assert_eq!(
        http(node.http, "GET", "/health", b"").await,
        (200, r#"{"status":"ok"}"#.to_string())
    );
    let info = info_persistence(&mut c).await;
    assert_eq!(field(&info, "aof_last_write_status").as_deref(), Some("ok"));
    assert_eq!(
        field(&info, "meridian_storage_status").as_deref(),
        Some("ok")
    );
    assert_eq!(field(&info, "meridian_storage_error"), None);

    // The disk fills up.
    space.set_full(true);
    let e = error_text(c.cmd(&[b"SET", b"b", b"2"]).await);
    let want = format!(
        "MISCONF Errors writing to the disk: no space left on device: 0 bytes free on {} \
         (reserve 0 bytes); writes are refused until space returns",
        dir.path().join("db").display()
    );
    assert_eq!(e, want);
    // Every write is refused the same way, a batch too; reads are served.
    let e = error_text(c.cmd(&[b"MSET", b"x", b"1", b"y", b"2"]).await);
    assert!(e.starts_with("MISCONF Errors writing to the disk"), "{e}");
    let e = error_text(c.cmd(&[b"DEL", b"a"]).await);
    assert!(e.starts_with("MISCONF "), "{e}");
    assert_eq!(c.cmd(&[b"GET", b"a"]).await, bulk("1"));
    assert_eq!(c.cmd(&[b"GET", b"b"]).await, Frame::Null);
    let (status, body) = http(node.http, "GET", "/kv/a", b"").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(node.http, "PUT", "/kv/c", b"3").await;
    assert_eq!(status, 507, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["error"]["code"], "DISK_FULL");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("no space left on device: 0 bytes free on "),
        "{body}"
    );
    // /health says the node is degraded, and why.
    let (status, body) = http(node.http, "GET", "/health", b"").await;
    assert_eq!(status, 503, "{body}");
    let j: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["status"], "degraded");
    assert_eq!(j["storage"]["disk_full"], true);
    assert_eq!(j["storage"]["writes"], "refused");
    assert_eq!(j["storage"]["reads"], "served");
    assert_eq!(j["storage"]["recovers_by_itself"], true);
    assert!(j["storage"]["since_unix_ms"].as_u64().unwrap() > 0);
    let reason = j["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("disk full: 0 bytes free on "),
        "{reason}"
    );
    assert!(
        reason.ends_with("writes are refused until space returns"),
        "{reason}"
    );
    // So does INFO, in the fields Redis clients parse and in Meridian's own.
    let info = info_persistence(&mut c).await;
    assert_eq!(
        field(&info, "aof_last_write_status").as_deref(),
        Some("err")
    );
    assert_eq!(
        field(&info, "meridian_storage_status").as_deref(),
        Some("degraded")
    );
    assert_eq!(
        field(&info, "meridian_storage_disk_full").as_deref(),
        Some("1")
    );
    assert_eq!(
        field(&info, "meridian_storage_error").as_deref(),
        Some(reason)
    );

    // Space returns: the node resumes by itself.
    space.set_full(false);
    let start = Instant::now();
    loop {
        let (status, _) = http(node.http, "GET", "/health", b"").await;
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "still degraded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.roundtrip(b"SET b 2\r\n", b"+OK\r\n").await;
    assert_eq!(c.cmd(&[b"GET", b"a"]).await, bulk("1"));
    assert_eq!(c.cmd(&[b"GET", b"b"]).await, bulk("2"));
    let (status, body) = http(node.http, "PUT", "/kv/c", b"3").await;
    assert!(status == 200 || status == 204, "{status} {body}");
    let info = info_persistence(&mut c).await;
    assert_eq!(field(&info, "aof_last_write_status").as_deref(), Some("ok"));
    assert_eq!(
        field(&info, "meridian_storage_status").as_deref(),
        Some("ok")
    );
    node.stop().await;
}

/// `storage.min_free_disk` from the configuration file: a reserve larger than the disk
/// refuses writes from the start (before the disk is full), with the reason in `/health`.
#[tokio::test]
async fn the_free_space_reserve_of_the_config_file_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig::from_toml(
        "[storage]\nengine = \"fjall\"\nmin_free_disk = 9223372036854775807\n\
         [resp]\nlisten = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    config.storage.data_dir = dir.path().to_path_buf();
    let node = RunningNode::start(config).await;
    let mut c = connect(node.resp).await;
    let e = error_text(c.cmd(&[b"SET", b"a", b"1"]).await);
    assert!(
        e.starts_with("MISCONF Errors writing to the disk: no space left on device: "),
        "{e}"
    );
    assert!(e.contains("(reserve 9223372036854775807 bytes)"), "{e}");
    assert_eq!(c.cmd(&[b"GET", b"a"]).await, Frame::Null);
    let (status, body) = http(node.http, "GET", "/health", b"").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("below the free-space reserve of 9223372036854775807 bytes"),
        "{body}"
    );
    node.stop().await;

    let e = NodeConfig::from_toml("[storage]\nmin_free_disk = \"lots\"").unwrap_err();
    assert!(e.to_string().contains("storage.min_free_disk"), "{e}");
    let c = NodeConfig::from_toml("[storage]\nmin_free_disk = \"1gb\"").unwrap();
    assert_eq!(c.storage.min_free_disk_bytes().unwrap(), 1 << 30);
}
