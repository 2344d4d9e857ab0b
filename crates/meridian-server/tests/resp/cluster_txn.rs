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
