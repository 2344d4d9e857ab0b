//! The default bucket of a cluster (a timeline bucket: `BucketProps::redis_default`) through
//! the RESP front end of an embedded 2-DC × 2-node cluster (port 0), clients on nodes of both
//! DCs: EXEC answers as Redis does and
//! applies all or nothing, WATCH makes EXEC answer nil when a watched key changed, keys
//! mastered in different DCs are gathered at one master, WATCH retry loops lose no increment,
//! a reader never sees half of an EXEC, and a SET NX lock never has two holders.

use super::cluster_mode::connect;
use super::*;
use bytes::Bytes;
use meridian_replication::BucketProps;
use meridian_server::cluster::Embedded;

/// A cluster as `meridian up` makes it: its `default` bucket is the timeline bucket of
/// `BucketProps::redis_default`, whose records start mastered in the DC that inserts them (so
/// two keys of one slot can have masters in different DCs). Bucket `ev` is eventual.
async fn tl_cluster() -> Embedded {
    super::cluster_mode::timeline_cluster(vec![("ev".to_owned(), BucketProps::default())]).await
}

fn ok() -> Frame {
    Frame::Simple(Bytes::from_static(b"OK"))
}

fn number(f: &Frame) -> i64 {
    match f {
        Frame::Bulk(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
        Frame::Null => 0,
        other => panic!("expected a number, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_watch_answer_as_redis_and_apply_all_or_nothing() {
    let c = tl_cluster().await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    a.roundtrip(
        b"MULTI\r\nSET {t}a 1\r\nINCRBY {t}b 5\r\nAPPEND {t}a x\r\nGET {t}a\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*4\r\n+OK\r\n:5\r\n:2\r\n$2\r\n1x\r\n",
    )
    .await;
    // Read from the other DC: the master's values.
    assert_eq!(b.cmd(&[b"GET", b"{t}a"]).await, bulk("1x"));
    assert_eq!(b.cmd(&[b"GET", b"{t}b"]).await, bulk("5"));
    // A command's own error is its reply; the others apply (Redis runs every queued one).
    a.roundtrip(
        b"MULTI\r\nINCR {t}a\r\nINCR {t}b\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n-ERR value is not an integer or out of range\r\n:6\r\n",
    )
    .await;
    // WATCH: a change by another client (the other DC) makes EXEC answer nil, nothing applied.
    assert_eq!(a.cmd(&[b"WATCH", b"{t}b"]).await, ok());
    assert_eq!(b.cmd(&[b"SET", b"{t}b", b"100"]).await, ok());
    a.cmd(&[b"MULTI"]).await;
    a.cmd(&[b"SET", b"{t}c", b"never"]).await;
    assert_eq!(a.cmd(&[b"EXEC"]).await, Frame::Null);
    assert_eq!(b.cmd(&[b"EXISTS", b"{t}c"]).await, Frame::Integer(0));
    // Unchanged: EXEC runs; WATCH is forgotten after it.
    a.cmd(&[b"WATCH", b"{t}b"]).await;
    a.cmd(&[b"MULTI"]).await;
    a.cmd(&[b"INCR", b"{t}b"]).await;
    assert_eq!(
        a.cmd(&[b"EXEC"]).await,
        Frame::Array(vec![Frame::Integer(101)])
    );
    // Keys of two slots, and a key of another bucket type: refused, nothing applied.
    let e = match a
        .roundtrip_frames(&[
            &[b"MULTI"],
            &[b"SET", b"{t}a", b"no"],
            &[b"SET", b"{u}a", b"no"],
            &[b"EXEC"],
        ])
        .await
        .pop()
    {
        Some(Frame::Error(e)) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    };
    assert!(e.starts_with("EXECABORT") && e.contains("CROSSSLOT"), "{e}");
    let e = match a
        .roundtrip_frames(&[
            &[b"MULTI"],
            &[b"SET", b"{t}a", b"no"],
            &[b"SET", b"ev:{t}plain", b"no"],
            &[b"EXEC"],
        ])
        .await
        .pop()
    {
        Some(Frame::Error(e)) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    };
    assert!(
        e.contains("of type eventual") && e.contains("timeline"),
        "{e}"
    );
    assert_eq!(a.cmd(&[b"GET", b"{t}a"]).await, bulk("1x"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_mastered_in_different_dcs_are_gathered_at_one_master() {
    let c = tl_cluster().await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    // Inserted from each DC: each record starts mastered in its inserter's DC.
    assert_eq!(a.cmd(&[b"SET", b"{g}x", b"1"]).await, ok());
    assert_eq!(b.cmd(&[b"SET", b"{g}y", b"1"]).await, ok());
    let master = |key: &[u8]| {
        c.node(0)
            .tl_local(key)
            .unwrap()
            .map(|r| r.master.node)
            .expect("a record")
    };
    let before = (master(b"{g}x"), master(b"{g}y"));
    assert_ne!(before.0, before.1, "the test needs two masters");
    let reply = a
        .roundtrip_frames(&[
            &[b"MULTI"],
            &[b"INCR", b"{g}x"],
            &[b"INCR", b"{g}y"],
            &[b"EXEC"],
        ])
        .await
        .pop();
    assert_eq!(
        reply,
        Some(Frame::Array(vec![Frame::Integer(2), Frame::Integer(2)]))
    );
    assert_eq!(b.cmd(&[b"GET", b"{g}x"]).await, bulk("2"));
    assert_eq!(b.cmd(&[b"GET", b"{g}y"]).await, bulk("2"));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_in_both_dcs_lose_nothing_and_see_no_half_exec() {
    const LOOPS: i64 = 12;
    let c = tl_cluster().await;
    let mut tasks = Vec::new();
    // WATCH retry loops from a node of each DC over one counter.
    for i in [0, 3] {
        let mut con = connect(&c, i).await;
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < LOOPS {
                con.cmd(&[b"WATCH", b"{w}n"]).await;
                let next = (number(&con.cmd(&[b"GET", b"{w}n"]).await) + 1).to_string();
                con.cmd(&[b"MULTI"]).await;
                con.cmd(&[b"SET", b"{w}n", next.as_bytes()]).await;
                if let Frame::Array(_) = con.cmd(&[b"EXEC"]).await {
                    done += 1;
                }
            }
        }));
    }
    // Transfers between two keys of one slot from both DCs, without WATCH.
    for i in [1, 2] {
        let mut con = connect(&c, i).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..LOOPS {
                let r = con
                    .roundtrip_frames(&[
                        &[b"MULTI"],
                        &[b"INCR", b"{w}a"],
                        &[b"INCR", b"{w}b"],
                        &[b"EXEC"],
                    ])
                    .await
                    .pop();
                assert!(matches!(r, Some(Frame::Array(_))), "{r:?}");
            }
        }));
    }
    // A reader in each DC: both keys of every EXEC, or neither.
    let mut readers = Vec::new();
    for i in [0, 3] {
        let mut con = connect(&c, i).await;
        readers.push(tokio::spawn(async move {
            for _ in 0..40 {
                let r = con
                    .roundtrip_frames(&[
                        &[b"MULTI"],
                        &[b"GET", b"{w}a"],
                        &[b"GET", b"{w}b"],
                        &[b"EXEC"],
                    ])
                    .await
                    .pop();
                let Some(Frame::Array(v)) = r else {
                    panic!("expected the two values, got {r:?}")
                };
                assert_eq!(number(&v[0]), number(&v[1]), "a reader saw half of an EXEC");
            }
        }));
    }
    for t in tasks.into_iter().chain(readers) {
        tokio::time::timeout(PATIENCE * 3, t)
            .await
            .expect("the clients finish")
            .unwrap();
    }
    let mut a = connect(&c, 2).await;
    assert_eq!(
        a.cmd(&[b"GET", b"{w}n"]).await,
        bulk(&(2 * LOOPS).to_string())
    );
    assert_eq!(
        a.cmd(&[b"GET", b"{w}a"]).await,
        bulk(&(2 * LOOPS).to_string())
    );
    assert_eq!(
        a.cmd(&[b"GET", b"{w}b"]).await,
        bulk(&(2 * LOOPS).to_string())
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_nx_lock_never_has_two_holders() {
    let c = tl_cluster().await;
    let mut cons = Vec::new();
    for i in 0..4 {
        cons.push(connect(&c, i).await);
    }
    for round in 0..8 {
        let mut tries = Vec::new();
        for (i, mut con) in cons.drain(..).enumerate() {
            tries.push(tokio::spawn(async move {
                let me = format!("{round}-{i}");
                let got = con
                    .cmd(&[b"SET", b"lock", me.as_bytes(), b"NX", b"PX", b"60000"])
                    .await;
                (con, me, got == ok())
            }));
        }
        let mut holders = Vec::new();
        for t in tries {
            let (con, me, held) = t.await.unwrap();
            if held {
                holders.push(me);
            }
            cons.push(con);
        }
        assert_eq!(holders.len(), 1, "round {round}: holders {holders:?}");
        assert_eq!(cons[3].cmd(&[b"GET", b"lock"]).await, bulk(&holders[0]));
        assert_eq!(cons[0].cmd(&[b"DEL", b"lock"]).await, Frame::Integer(1));
    }
    c.shutdown().await;
}
