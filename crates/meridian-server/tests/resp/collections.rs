//! Lists, sets and sorted sets on a single node, end to end over RESP: exact replies,
//! blocking pops (served first blocked, first served; timeouts; a client that leaves is
//! never served; a push inside MULTI wakes nobody until EXEC), RENAME/COPY of a collection,
//! the `redis` crate's typed calls, and cluster mode's refusals with their reasons.

use super::*;

#[tokio::test]
async fn list_set_and_sorted_set_commands_answer_as_redis() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"RPUSH l a b c\r\nLPUSH l z\r\nLRANGE l 0 -1\r\nLPOP l 2\r\nLLEN l\r\nTYPE l\r\n",
        b":3\r\n:4\r\n*4\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n\
          *2\r\n$1\r\nz\r\n$1\r\na\r\n:2\r\n+list\r\n",
    )
    .await;
    c.roundtrip(
        b"SADD s b a b\r\nSMEMBERS s\r\nSISMEMBER s a\r\nSCARD s\r\nTYPE s\r\n",
        b":2\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n:1\r\n:2\r\n+set\r\n",
    )
    .await;
    c.roundtrip(
        b"ZADD z 2 b 1 a 1.5 c\r\nZRANGE z 0 -1 WITHSCORES\r\nZSCORE z c\r\nZRANK z b\r\nTYPE z\r\n",
        b":3\r\n*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nc\r\n$3\r\n1.5\r\n$1\r\nb\r\n$1\r\n2\r\n\
          $3\r\n1.5\r\n:2\r\n+zset\r\n",
    )
    .await;
    // WRONGTYPE both ways, and the generic commands move a collection with its type.
    c.roundtrip(
        b"GET l\r\nSADD l x\r\nRENAME l l2\r\nLRANGE l2 0 -1\r\nCOPY s s2\r\nSCARD s2\r\nEXISTS l\r\n",
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n\
          -WRONGTYPE Operation against a key holding the wrong kind of value\r\n\
          +OK\r\n*2\r\n$1\r\nb\r\n$1\r\nc\r\n:1\r\n:2\r\n:0\r\n",
    )
    .await;
    // Multi-key commands are atomic units over their keys.
    c.roundtrip(
        b"SADD t a c\r\nSINTERSTORE d s t\r\nSMEMBERS d\r\nZUNIONSTORE u 2 z d WEIGHTS 1 10\r\n\
          ZRANGE u 0 -1 WITHSCORES\r\n",
        b":2\r\n:1\r\n*1\r\n$1\r\na\r\n:3\r\n\
          *6\r\n$1\r\nc\r\n$3\r\n1.5\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\na\r\n$2\r\n11\r\n",
    )
    .await;
    s.stop().await;
}

/// The reply to BLPOP that a client blocked on `key` receives once it is served.
fn served(key: &str, value: &str) -> Frame {
    Frame::Array(vec![bulk(key), bulk(value)])
}

#[tokio::test]
async fn blocked_clients_are_served_first_blocked_first_served() {
    let s = Server::default().await;
    let (mut first, mut second, mut pusher) =
        (s.connect().await, s.connect().await, s.connect().await);
    first.send(b"BLPOP q 0\r\n").await;
    wait_blocked(&mut pusher, 1).await;
    second.send(b"BLPOP q 0\r\n").await;
    wait_blocked(&mut pusher, 2).await;
    // One push serves one client: the first blocked.
    assert_eq!(
        pusher.cmd(&[b"RPUSH", b"q", b"one"]).await,
        Frame::Integer(1)
    );
    assert_eq!(first.frame().await, served("q", "one"));
    wait_blocked(&mut pusher, 1).await;
    assert_eq!(
        pusher.cmd(&[b"RPUSH", b"q", b"two", b"three"]).await,
        Frame::Integer(2)
    );
    assert_eq!(second.frame().await, served("q", "two"));
    // What nobody waited for stays.
    assert_eq!(
        pusher.cmd(&[b"LRANGE", b"q", b"0", b"-1"]).await,
        Frame::Array(vec![bulk("three")])
    );
    s.stop().await;
}

#[tokio::test]
async fn a_writer_that_does_not_read_does_not_hold_up_whom_it_served() {
    let s = Server::default().await;
    let (mut waiter, mut pusher, mut other) =
        (s.connect().await, s.connect().await, s.connect().await);
    let big = vec![b'x'; 4 << 20];
    assert_eq!(
        other.cmd(&[b"SET", b"big", &big]).await,
        Frame::Simple("OK".into())
    );
    waiter.send(b"BLPOP q 0\r\n").await;
    wait_blocked(&mut other, 1).await;
    // The pusher's push serves the waiter, then it asks for 32 MiB it never reads: its own
    // replies cannot all be written, yet the waiter is answered (the served client's reply
    // waits for the writer's only as far as the writer's socket takes it).
    let mut pipeline = b"RPUSH q one\r\n".to_vec();
    for _ in 0..8 {
        pipeline.extend_from_slice(b"GET big\r\n");
    }
    pusher.send(&pipeline).await;
    assert_eq!(waiter.frame().await, served("q", "one"));
    drop(pusher);
    s.stop().await;
}

#[tokio::test]
async fn keys_readied_by_one_exec_are_served_in_the_order_they_became_ready() {
    let s = Server::default().await;
    let (mut on_a, mut on_b, mut writer) =
        (s.connect().await, s.connect().await, s.connect().await);
    on_a.send(b"BLMOVE a out LEFT RIGHT 0\r\n").await;
    wait_blocked(&mut writer, 1).await;
    on_b.send(b"BLMOVE b out LEFT RIGHT 0\r\n").await;
    wait_blocked(&mut writer, 2).await;
    // b becomes ready before a, so b's client moves its element into `out` first.
    writer
        .roundtrip(
            b"MULTI\r\nRPUSH b first\r\nRPUSH a second\r\nEXEC\r\n",
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:1\r\n",
        )
        .await;
    assert_eq!(on_b.frame().await, bulk("first"));
    assert_eq!(on_a.frame().await, bulk("second"));
    assert_eq!(
        writer.cmd(&[b"LRANGE", b"out", b"0", b"-1"]).await,
        Frame::Array(vec![bulk("first"), bulk("second")])
    );
    s.stop().await;
}

#[tokio::test]
async fn blocking_pops_time_out_serve_at_once_and_check_arguments() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"BLPOP nothing 0.05\r\n", b"*-1\r\n").await;
    c.roundtrip(b"BLMOVE nothing dst LEFT RIGHT 0.05\r\n", b"$-1\r\n")
        .await;
    c.roundtrip(b"BZPOPMIN nothing 0.05\r\n", b"*-1\r\n").await;
    c.roundtrip(
        b"RPUSH l a\r\nBRPOP nothing l 0\r\nZADD z 1 m\r\nBZPOPMAX z 0\r\n",
        b":1\r\n*2\r\n$1\r\nl\r\n$1\r\na\r\n:1\r\n*3\r\n$1\r\nz\r\n$1\r\nm\r\n$1\r\n1\r\n",
    )
    .await;
    c.roundtrip(
        b"BLPOP k -1\r\nBLPOP k abc\r\nSET str v\r\nBLPOP str 0\r\n",
        b"-ERR timeout is negative\r\n-ERR timeout is not a float or out of range\r\n+OK\r\n\
          -WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
    )
    .await;
    // Inside MULTI a blocking command never blocks: it answers the timeout reply.
    c.roundtrip(
        b"MULTI\r\nBLPOP nothing 0\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n*1\r\n*-1\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn a_push_undone_in_the_same_exec_wakes_nobody_and_a_gone_client_is_never_served() {
    let s = Server::default().await;
    let (mut blocked, mut writer) = (s.connect().await, s.connect().await);
    blocked.send(b"BLPOP q 0\r\n").await;
    wait_blocked(&mut writer, 1).await;
    writer
        .roundtrip(
            b"MULTI\r\nLPUSH q x\r\nDEL q\r\nEXEC\r\n",
            b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n:1\r\n",
        )
        .await;
    wait_blocked(&mut writer, 1).await;
    // The blocked client leaves; a later push is not popped for it.
    drop(blocked);
    wait_blocked(&mut writer, 0).await;
    writer
        .roundtrip(b"RPUSH q kept\r\nLLEN q\r\n", b":1\r\n:1\r\n")
        .await;
    // BLMOVE's push readies its destination for the next blocked client.
    let mut second = s.connect().await;
    second.send(b"BLPOP dst 0\r\n").await;
    wait_blocked(&mut writer, 1).await;
    writer
        .roundtrip(b"LMOVE q dst LEFT RIGHT\r\n", b"$4\r\nkept\r\n")
        .await;
    assert_eq!(second.frame().await, served("dst", "kept"));
    s.stop().await;
}

/// Polls INFO until `n` clients are blocked.
pub(crate) async fn wait_blocked(c: &mut Raw, n: usize) {
    let want = format!("blocked_clients:{n}\r\n");
    for _ in 0..500 {
        let Frame::Bulk(info) = c.cmd(&[b"INFO", b"clients"]).await else {
            panic!("INFO is a bulk string");
        };
        if String::from_utf8_lossy(&info).contains(&want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw {want:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_crate_drives_every_collection_type() {
    let s = Server::default().await;
    let url = s.url();
    blocking(move || {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        let n: usize = con.rpush("jobs", &["a", "b", "c"]).unwrap();
        assert_eq!(n, 3);
        let popped: Option<(String, String)> = con.blpop("jobs", 1.0).unwrap();
        assert_eq!(popped, Some(("jobs".into(), "a".into())));
        let rest: Vec<String> = con.lrange("jobs", 0, -1).unwrap();
        assert_eq!(rest, ["b", "c"]);
        let _: () = con.sadd("tags", &["x", "y", "x"]).unwrap();
        let members: std::collections::BTreeSet<String> = con.smembers("tags").unwrap();
        assert_eq!(members.into_iter().collect::<Vec<_>>(), ["x", "y"]);
        let _: () = con
            .zadd_multiple("board", &[(10, "ann"), (30, "bob"), (20, "cy")])
            .unwrap();
        let top: Vec<(String, f64)> = con.zrevrange_withscores("board", 0, 1).unwrap();
        assert_eq!(top, [("bob".into(), 30.0), ("cy".into(), 20.0)]);
        let incr: f64 = con.zincr("board", "ann", 25).unwrap();
        assert_eq!(incr, 35.0);
        let rank: Option<usize> = con.zrank("board", "ann").unwrap();
        assert_eq!(rank, Some(2));
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn client_unblock_and_object_encoding() {
    let s = Server::default().await;
    let (mut blocked, mut admin) = (s.connect().await, s.connect().await);
    let Frame::Integer(id) = blocked.cmd(&[b"CLIENT", b"ID"]).await else {
        panic!("CLIENT ID is an integer");
    };
    let id = id.to_string();
    blocked.send(b"BLPOP q 0\r\n").await;
    wait_blocked(&mut admin, 1).await;
    assert_eq!(
        admin.cmd(&[b"CLIENT", b"UNBLOCK", id.as_bytes()]).await,
        Frame::Integer(1)
    );
    assert_eq!(blocked.frame().await, Frame::Null);
    blocked.send(b"BZPOPMIN z 0\r\n").await;
    wait_blocked(&mut admin, 1).await;
    assert_eq!(
        admin
            .cmd(&[b"CLIENT", b"UNBLOCK", id.as_bytes(), b"ERROR"])
            .await,
        Frame::Integer(1)
    );
    assert_eq!(
        blocked.frame().await,
        Frame::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
    );
    // Nobody blocked: 0.
    assert_eq!(
        admin.cmd(&[b"CLIENT", b"UNBLOCK", id.as_bytes()]).await,
        Frame::Integer(0)
    );
    admin
        .roundtrip(
            b"SET n 12\r\nSADD s 1 2\r\nSADD t a\r\nRPUSH l x\r\nZADD z 1 m\r\nHSET h f v\r\n",
            b"+OK\r\n:2\r\n:1\r\n:1\r\n:1\r\n:1\r\n",
        )
        .await;
    admin
        .roundtrip(
            b"OBJECT ENCODING n\r\nOBJECT ENCODING s\r\nOBJECT ENCODING t\r\nOBJECT ENCODING l\r\n\
              OBJECT ENCODING z\r\nOBJECT ENCODING h\r\nOBJECT ENCODING nokey\r\n",
            b"$3\r\nint\r\n$6\r\nintset\r\n$9\r\nhashtable\r\n$9\r\nquicklist\r\n\
              $8\r\nlistpack\r\n$8\r\nlistpack\r\n$-1\r\n",
        )
        .await;
    admin
        .roundtrip(
            b"CONFIG SET zset-max-ziplist-entries 0\r\nOBJECT ENCODING z\r\n\
              CONFIG GET zset-max-listpack-entries\r\n",
            b"+OK\r\n$8\r\nskiplist\r\n*2\r\n$25\r\nzset-max-listpack-entries\r\n$1\r\n0\r\n",
        )
        .await;
    s.stop().await;
}
