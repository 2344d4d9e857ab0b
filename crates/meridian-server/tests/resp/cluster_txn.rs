//! Transactional buckets through the RESP front end of an embedded 2-DC × 2-node cluster
//! (port 0): every single-key string command is atomic (concurrent INCRs from both DCs lose
//! nothing; SET NX/XX/GET/EX, APPEND, GETDEL, EXPIRE/TTL answer as Redis does), MULTI/EXEC
//! commits keys of any slots atomically, WATCH makes EXEC answer nil when a watched key
//! changed, the usual WATCH retry loop is exact, and an EXEC touching another bucket type is
//! refused with EXECABORT and applies nothing.

use super::cluster_mode::{cluster, connect};
use super::*;
use bytes::Bytes;
use meridian_replication::{BucketProps, TxnProps};
use meridian_server::cluster::Embedded;

async fn txn_cluster() -> Embedded {
    let c = cluster().await;
    let node = &c.states[0].cluster.as_ref().unwrap().node;
    node.set_bucket("bank", BucketProps::transactional(TxnProps::default()))
        .await
        .unwrap();
    // Every member adopts the bucket before the test talks to it.
    for _ in 0..200 {
        if c.states.iter().all(|s| {
            s.cluster
                .as_ref()
                .unwrap()
                .node
                .buckets()
                .get("bank")
                .is_some()
        }) {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the bucket did not reach every member");
}

fn ok() -> Frame {
    Frame::Simple(Bytes::from_static(b"OK"))
}

fn queued() -> Frame {
    Frame::Simple(Bytes::from_static(b"QUEUED"))
}

fn int(f: &Frame) -> i64 {
    match f {
        Frame::Integer(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn err(f: &Frame) -> String {
    match f {
        Frame::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn single_key_commands_are_atomic_and_answer_as_redis() {
    let c = txn_cluster().await;
    let mut a = connect(&c, 0).await;
    let mut z = connect(&c, 3).await;
    assert_eq!(a.cmd(&[b"SET", b"bank:s", b"v"]).await, ok());
    assert_eq!(a.cmd(&[b"SET", b"bank:s", b"w", b"NX"]).await, Frame::Null);
    assert_eq!(
        z.cmd(&[b"SET", b"bank:s", b"x", b"XX", b"GET"]).await,
        bulk("v")
    );
    assert_eq!(z.cmd(&[b"GET", b"bank:s"]).await, bulk("x"));
    assert_eq!(
        a.cmd(&[b"APPEND", b"bank:s", b"yz"]).await,
        Frame::Integer(3)
    );
    assert_eq!(a.cmd(&[b"GETDEL", b"bank:s"]).await, bulk("xyz"));
    assert_eq!(a.cmd(&[b"EXISTS", b"bank:s"]).await, Frame::Integer(0));
    assert_eq!(a.cmd(&[b"SET", b"bank:t", b"1", b"EX", b"100"]).await, ok());
    let ttl = int(&z.cmd(&[b"TTL", b"bank:t"]).await);
    assert!((99..=100).contains(&ttl), "{ttl}");
    assert_eq!(a.cmd(&[b"PERSIST", b"bank:t"]).await, Frame::Integer(1));
    assert_eq!(a.cmd(&[b"TTL", b"bank:t"]).await, Frame::Integer(-1));
    assert_eq!(a.cmd(&[b"INCR", b"bank:t"]).await, Frame::Integer(2));
    assert_eq!(a.cmd(&[b"SET", b"bank:w", b"abc"]).await, ok());
    assert_eq!(
        err(&a.cmd(&[b"INCR", b"bank:w"]).await),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err(&a.cmd(&[b"SET", b"bank:w", b"1", b"EX", b"0"]).await),
        "ERR invalid expire time in 'set' command"
    );
    // Concurrent increments from both DCs lose nothing.
    let mut tasks = Vec::new();
    for i in [0, 1, 2, 3] {
        let mut con = connect(&c, i).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let f = con.cmd(&[b"INCRBY", b"bank:counter", b"2"]).await;
                assert!(matches!(f, Frame::Integer(_)), "{f:?}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(a.cmd(&[b"GET", b"bank:counter"]).await, bulk("200"));
    c.shutdown().await;
}

#[tokio::test]
async fn multi_exec_commits_keys_of_any_slots_atomically() {
    let c = txn_cluster().await;
    let mut a = connect(&c, 1).await;
    assert_eq!(a.cmd(&[b"MULTI"]).await, ok());
    assert_eq!(a.cmd(&[b"SET", b"bank:x", b"1"]).await, queued());
    assert_eq!(a.cmd(&[b"INCRBY", b"bank:y", b"5"]).await, queued());
    assert_eq!(a.cmd(&[b"GET", b"bank:x"]).await, queued());
    assert_eq!(
        a.cmd(&[b"EXEC"]).await,
        Frame::Array(vec![ok(), Frame::Integer(5), bulk("1")])
    );
    // A runtime error is one element of the array; the rest applies (no rollback in Redis).
    assert_eq!(a.cmd(&[b"MULTI"]).await, ok());
    a.cmd(&[b"SET", b"bank:z", b"notanumber"]).await;
    a.cmd(&[b"INCR", b"bank:z"]).await;
    a.cmd(&[b"INCR", b"bank:y"]).await;
    let Frame::Array(out) = a.cmd(&[b"EXEC"]).await else {
        panic!("EXEC answers an array")
    };
    assert_eq!(out[0], ok());
    assert_eq!(err(&out[1]), "ERR value is not an integer or out of range");
    assert_eq!(out[2], Frame::Integer(6));
    // A key of an eventual bucket: EXECABORT naming the type, nothing applied.
    assert_eq!(a.cmd(&[b"MULTI"]).await, ok());
    a.cmd(&[b"SET", b"bank:x", b"changed"]).await;
    a.cmd(&[b"SET", b"plain", b"1"]).await;
    let e = err(&a.cmd(&[b"EXEC"]).await);
    assert!(e.starts_with("EXECABORT"), "{e}");
    assert!(e.contains("eventual"), "{e}");
    assert_eq!(a.cmd(&[b"GET", b"bank:x"]).await, bulk("1"));
    c.shutdown().await;
}

#[tokio::test]
async fn watch_aborts_exec_when_a_watched_key_changed() {
    let c = txn_cluster().await;
    let mut a = connect(&c, 0).await;
    let mut b = connect(&c, 2).await;
    a.cmd(&[b"SET", b"bank:w", b"1"]).await;
    assert_eq!(a.cmd(&[b"WATCH", b"bank:w"]).await, ok());
    assert_eq!(b.cmd(&[b"SET", b"bank:w", b"2"]).await, ok());
    a.cmd(&[b"MULTI"]).await;
    a.cmd(&[b"SET", b"bank:other", b"x"]).await;
    assert_eq!(a.cmd(&[b"EXEC"]).await, Frame::Null);
    assert_eq!(a.cmd(&[b"EXISTS", b"bank:other"]).await, Frame::Integer(0));
    // Unchanged: EXEC runs. And WATCH is forgotten after EXEC.
    a.cmd(&[b"WATCH", b"bank:w"]).await;
    a.cmd(&[b"MULTI"]).await;
    a.cmd(&[b"SET", b"bank:other", b"y"]).await;
    assert_eq!(a.cmd(&[b"EXEC"]).await, Frame::Array(vec![ok()]));
    // The optimistic retry loop from both DCs: exact.
    let mut tasks = Vec::new();
    for i in [0, 3] {
        let mut con = connect(&c, i).await;
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < 10 {
                con.cmd(&[b"WATCH", b"bank:n"]).await;
                let v = match con.cmd(&[b"GET", b"bank:n"]).await {
                    Frame::Bulk(b) => std::str::from_utf8(&b).unwrap().parse::<i64>().unwrap(),
                    _ => 0,
                };
                con.cmd(&[b"MULTI"]).await;
                let next = (v + 1).to_string();
                con.cmd(&[b"SET", b"bank:n", next.as_bytes()]).await;
                if let Frame::Array(_) = con.cmd(&[b"EXEC"]).await {
                    done += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(a.cmd(&[b"GET", b"bank:n"]).await, bulk("20"));
    c.shutdown().await;
}

#[tokio::test]
async fn interactive_transactions_read_at_once_and_commit_or_conflict() {
    let c = txn_cluster().await;
    let mut a = connect(&c, 0).await;
    let mut b = connect(&c, 3).await;
    a.cmd(&[b"SET", b"bank:i", b"10"]).await;
    assert_eq!(a.cmd(&[b"MERIDIAN.BEGIN"]).await, ok());
    // Reads answer at once; writes are buffered but visible to the transaction.
    assert_eq!(a.cmd(&[b"GET", b"bank:i"]).await, bulk("10"));
    assert_eq!(
        a.cmd(&[b"INCRBY", b"bank:i", b"5"]).await,
        Frame::Integer(15)
    );
    assert_eq!(a.cmd(&[b"SET", b"bank:j", b"x"]).await, ok());
    assert_eq!(
        b.cmd(&[b"GET", b"bank:i"]).await,
        bulk("10"),
        "not visible before commit"
    );
    assert!(err(&a.cmd(&[b"MULTI"]).await).contains("inside MERIDIAN.BEGIN"));
    assert!(err(&a.cmd(&[b"GET", b"plain"]).await).contains("transactional"));
    let ts = int(&a.cmd(&[b"MERIDIAN.COMMIT"]).await);
    assert!(ts > 0);
    assert_eq!(
        b.cmd(&[b"MGET", b"bank:i", b"bank:j"]).await,
        Frame::Array(vec![bulk("15"), bulk("x")])
    );
    // A conflict names the key; nothing applies.
    a.cmd(&[b"MERIDIAN.BEGIN"]).await;
    a.cmd(&[b"GET", b"bank:i"]).await;
    b.cmd(&[b"SET", b"bank:i", b"99"]).await;
    a.cmd(&[b"SET", b"bank:i", b"16"]).await;
    a.cmd(&[b"SET", b"bank:k", b"y"]).await;
    let e = err(&a.cmd(&[b"MERIDIAN.COMMIT"]).await);
    assert!(
        e.starts_with("CONFLICT txn_aborted ww_conflict key=bank:i"),
        "{e}"
    );
    assert_eq!(b.cmd(&[b"EXISTS", b"bank:k"]).await, Frame::Integer(0));
    // READONLY refuses writes; ABORT drops; the commands outside a transaction are errors.
    a.cmd(&[b"MERIDIAN.BEGIN", b"READONLY"]).await;
    assert!(err(&a.cmd(&[b"SET", b"bank:k", b"1"]).await).contains("read-only"));
    assert_eq!(a.cmd(&[b"MERIDIAN.ABORT"]).await, ok());
    assert_eq!(
        err(&a.cmd(&[b"MERIDIAN.COMMIT"]).await),
        "ERR MERIDIAN.COMMIT without MERIDIAN.BEGIN"
    );
    assert_eq!(
        err(&a.cmd(&[b"MERIDIAN.BEGIN", b"NOPE"]).await),
        "ERR syntax error"
    );
    c.shutdown().await;
}

/// One HTTP/1.1 request with `Connection: close`: status and body.
pub(crate) async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("a reply")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

#[tokio::test]
async fn http_txn_runs_a_list_of_operations_as_one_transaction() {
    let c = txn_cluster().await;
    let addr = c.members[1].http.unwrap();
    let (status, body) = http(
        addr,
        "POST",
        "/txn",
        r#"{"ops":[{"op":"set","key":"bank:h1","value":"a"},{"op":"get","key":"bank:h1"},{"op":"set","key":"bank:h2","value":"b"},{"op":"del","key":"bank:h3"}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["results"][0]["value"], "a");
    assert!(v["committed_ts"].as_u64().unwrap() > 0);
    // The same values through RESP and /kv (one envelope for every front end).
    let mut a = connect(&c, 2).await;
    assert_eq!(a.cmd(&[b"GET", b"bank:h2"]).await, bulk("b"));
    let (status, body) = http(addr, "GET", "/kv/bank:h1", "").await;
    assert_eq!((status, body.as_str()), (200, "a"));
    // Hostile or wrong requests: each names the field.
    for (req, want) in [
        (r#"{"ops":[{"op":"get"}]}"#, "BAD_TXN"),
        (r#"{"ops":[{"op":"get","key":""}]}"#, "ops[0].key"),
        (
            r#"{"ops":[{"op":"set","key":"plain","value":"x"}]}"#,
            "not transactional",
        ),
        (r#"{"ops":[],"session":"x"}"#, "BAD_TXN"),
        ("not json", "BAD_TXN"),
    ] {
        let (status, body) = http(addr, "POST", "/txn", req).await;
        assert_eq!(status, 400, "{req}: {body}");
        assert!(body.contains(want), "{req}: {body}");
    }
    let many = format!(
        r#"{{"ops":[{}]}}"#,
        vec![r#"{"op":"get","key":"bank:x"}"#; 10_001].join(",")
    );
    let (status, body) = http(addr, "POST", "/txn", &many).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("at most 10000"), "{body}");
    c.shutdown().await;
}

#[tokio::test]
async fn exec_refuses_commands_with_nothing_to_run_on() {
    let c = txn_cluster().await;
    let mut a = connect(&c, 0).await;
    a.cmd(&[b"MULTI"]).await;
    a.cmd(&[b"SET", b"bank:p", b"1"]).await;
    a.cmd(&[b"PING"]).await;
    let e = err(&a.cmd(&[b"EXEC"]).await);
    assert!(e.starts_with("EXECABORT") && e.contains("PING"), "{e}");
    assert_eq!(a.cmd(&[b"EXISTS", b"bank:p"]).await, Frame::Integer(0));
    c.shutdown().await;
}
