//! Client tracking (client-side caching) on a single node, end to end over RESP: RESP2
//! clients redirecting to a subscriber of `__redis__:invalidate`, RESP3 clients getting
//! `invalidate` pushes after the reply of the command that caused them, BCAST prefixes,
//! flushes, a broken redirect, Redis's errors, INFO and CLIENT LIST; and cluster mode's
//! refusal.

use super::*;

/// The RESP2 message a redirect target gets for `keys`.
fn message(keys: &[&str]) -> Vec<u8> {
    let mut out = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n".to_vec();
    out.extend_from_slice(format!("*{}\r\n", keys.len()).as_bytes());
    for k in keys {
        out.extend_from_slice(format!("${}\r\n{k}\r\n", k.len()).as_bytes());
    }
    out
}

/// The RESP3 push a tracking client gets for `keys`.
fn push(keys: &[&str]) -> Vec<u8> {
    let mut out = b">2\r\n$10\r\ninvalidate\r\n".to_vec();
    out.extend_from_slice(format!("*{}\r\n", keys.len()).as_bytes());
    for k in keys {
        out.extend_from_slice(format!("${}\r\n{k}\r\n", k.len()).as_bytes());
    }
    out
}

/// The client id of `c`.
async fn client_id(c: &mut Raw) -> u64 {
    match c.cmd(&[b"CLIENT", b"ID"]).await {
        Frame::Integer(id) => id as u64,
        other => panic!("CLIENT ID answered {other:?}"),
    }
}

#[tokio::test]
async fn resp2_reads_are_invalidated_through_a_redirect_once() {
    let s = Server::default().await;
    let mut redir = s.connect().await;
    let mut reader = s.connect().await;
    let mut writer = s.connect().await;
    let id = client_id(&mut redir).await;
    redir
        .roundtrip(
            b"SUBSCRIBE __redis__:invalidate\r\n",
            b"*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
        )
        .await;
    let on = format!("CLIENT TRACKING on REDIRECT {id}\r\n");
    reader.roundtrip(on.as_bytes(), b"+OK\r\n").await;
    writer.roundtrip(b"MSET a 1 b 2\r\n", b"+OK\r\n").await;
    reader.roundtrip(b"GET a\r\n", b"$1\r\n1\r\n").await;
    // b was not read: no message for it; a is told once, then forgotten.
    writer
        .roundtrip(b"INCR b\r\nINCR a\r\nINCR a\r\n", b":3\r\n:2\r\n:3\r\n")
        .await;
    redir.expect(&message(&["a"])).await;
    // Nothing else was queued: the next bytes are the PING's.
    redir
        .roundtrip(b"PING\r\n", b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")
        .await;
    // The reader itself, in RESP2 with a redirect, gets nothing on its own connection.
    reader.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    let Frame::Bulk(list) = writer.cmd(&[b"CLIENT", b"LIST"]).await else {
        panic!("CLIENT LIST answers a bulk string");
    };
    let list = String::from_utf8_lossy(&list).into_owned();
    assert!(
        list.lines()
            .any(|l| l.contains(" flags=t ") && l.contains(&format!(" redir={id} "))),
        "{list}"
    );
    // A flush tells every tracking client, with a null.
    reader.roundtrip(b"GET a\r\n", b"$1\r\n3\r\n").await;
    writer.roundtrip(b"FLUSHALL\r\n", b"+OK\r\n").await;
    redir
        .expect(b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n")
        .await;
    reader
        .roundtrip(
            b"CLIENT TRACKING off\r\nCLIENT GETREDIR\r\n",
            b"+OK\r\n:-1\r\n",
        )
        .await;
    s.stop().await;
}

#[tokio::test]
async fn resp3_pushes_follow_the_reply_that_caused_them() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let mut writer = s.connect().await;
    let _ = c.cmd(&[b"HELLO", b"3"]).await;
    c.roundtrip(b"CLIENT TRACKING on\r\n", b"+OK\r\n").await;
    // Its own write: the push comes after the write's reply, before the next reply.
    let mut want = b"_\r\n+OK\r\n".to_vec();
    want.extend_from_slice(&push(&["k"]));
    want.extend_from_slice(b"+PONG\r\n");
    c.roundtrip(b"GET k\r\nSET k v\r\nPING\r\n", &want).await;
    // Inside a transaction: after EXEC's reply.
    c.roundtrip(b"HSET h f 1\r\nHGET h f\r\n", b":1\r\n$1\r\n1\r\n")
        .await;
    let mut want = b"+OK\r\n+QUEUED\r\n*1\r\n:1\r\n".to_vec();
    want.extend_from_slice(&push(&["h"]));
    c.roundtrip(b"MULTI\r\nHDEL h f\r\nEXEC\r\n", &want).await;
    // Another client's write reaches it between its commands.
    c.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n").await;
    writer.roundtrip(b"DEL k\r\n", b":1\r\n").await;
    c.expect(&push(&["k"])).await;
    // NOLOOP: its own writes are not reported (and forget the key, as in Redis: j stays).
    c.roundtrip(
        b"CLIENT TRACKING on NOLOOP\r\nGET k\r\nGET j\r\nSET k w\r\nPING\r\n",
        b"+OK\r\n_\r\n_\r\n+OK\r\n+PONG\r\n",
    )
    .await;
    let Frame::Bulk(info) = writer.cmd(&[b"INFO"]).await else {
        panic!("INFO answers a bulk string");
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    for line in ["tracking_clients:1\r\n", "tracking_total_keys:1\r\n"] {
        assert!(info.contains(line), "{line:?} in {info}");
    }
    s.stop().await;
}

#[tokio::test]
async fn optin_optout_and_bcast_change_what_is_tracked() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let mut writer = s.connect().await;
    let _ = c.cmd(&[b"HELLO", b"3"]).await;
    // OPTIN: only the read right after CLIENT CACHING yes (a CLIENT command in between
    // keeps the flag, as in Redis).
    c.roundtrip(
        b"CLIENT TRACKING on OPTIN\r\nGET a\r\nCLIENT CACHING yes\r\nCLIENT ID\r\n\
          GET b\r\nGET c\r\n",
        b"+OK\r\n_\r\n+OK\r\n",
    )
    .await;
    assert!(matches!(c.frame().await, Frame::Integer(_)));
    c.expect(b"_\r\n_\r\n").await;
    writer.roundtrip(b"MSET a 1 b 1 c 1\r\n", b"+OK\r\n").await;
    c.expect(&push(&["b"])).await;
    c.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    // OPTOUT: every read but the one after CLIENT CACHING no.
    c.roundtrip(
        b"CLIENT TRACKING off\r\nCLIENT TRACKING on OPTOUT\r\nCLIENT CACHING no\r\nGET a\r\nGET b\r\n",
        b"+OK\r\n+OK\r\n+OK\r\n$1\r\n1\r\n$1\r\n1\r\n",
    )
    .await;
    writer.roundtrip(b"MSET a 2 b 2\r\n", b"+OK\r\n").await;
    c.expect(&push(&["b"])).await;
    // BCAST with prefixes: one push per prefix for a command's writes; nothing else.
    c.roundtrip(
        b"CLIENT TRACKING off\r\nCLIENT TRACKING on BCAST PREFIX x: PREFIX y:\r\n",
        b"+OK\r\n+OK\r\n",
    )
    .await;
    writer
        .roundtrip(b"MSET x:1 1 z:1 1 x:2 2\r\n", b"+OK\r\n")
        .await;
    c.expect(&push(&["x:1", "x:2"])).await;
    c.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    let Frame::Map(info) = c.cmd(&[b"CLIENT", b"TRACKINGINFO"]).await else {
        panic!("CLIENT TRACKINGINFO answers a map in RESP3");
    };
    assert_eq!(info[0].1, Frame::Set(vec![bulk("on"), bulk("bcast")]));
    assert_eq!(info[2].1, Frame::Array(vec![bulk("x:"), bulk("y:")]));
    s.stop().await;
}

#[tokio::test]
async fn a_gone_redirect_target_is_reported_to_a_resp3_client() {
    let s = Server::default().await;
    let mut target = s.connect().await;
    let mut c = s.connect().await;
    let mut writer = s.connect().await;
    let id = client_id(&mut target).await;
    let _ = c.cmd(&[b"HELLO", b"3"]).await;
    let on = format!("CLIENT TRACKING on REDIRECT {id}\r\nGET k\r\n");
    c.roundtrip(on.as_bytes(), b"+OK\r\n_\r\n").await;
    target.roundtrip(b"QUIT\r\n", b"+OK\r\n").await;
    writer.roundtrip(b"SET k v\r\n", b"+OK\r\n").await;
    let want = format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n");
    c.expect(want.as_bytes()).await;
    let Frame::Map(info) = c.cmd(&[b"CLIENT", b"TRACKINGINFO"]).await else {
        panic!("CLIENT TRACKINGINFO answers a map in RESP3");
    };
    assert_eq!(
        info[0].1,
        Frame::Set(vec![bulk("on"), bulk("broken_redirect")])
    );
    s.stop().await;
}

#[tokio::test]
async fn hostile_or_wrong_tracking_requests_get_redis_errors() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"CLIENT TRACKING on PREFIX a\r\n\
          CLIENT TRACKING on REDIRECT 999999\r\n\
          CLIENT TRACKING on REDIRECT -1\r\n\
          CLIENT TRACKING on REDIRECT x\r\n\
          CLIENT TRACKING on OPTIN OPTOUT\r\n\
          CLIENT TRACKING on BCAST OPTIN\r\n\
          CLIENT TRACKING maybe\r\n\
          CLIENT TRACKING on NOPE\r\n\
          CLIENT CACHING yes\r\n\
          CLIENT TRACKING on BCAST PREFIX ab PREFIX a\r\n\
          CLIENT TRACKING\r\n",
        b"-ERR PREFIX option requires BCAST mode to be enabled\r\n\
          -ERR The client ID you want redirect to does not exist\r\n\
          -ERR The client ID you want redirect to does not exist\r\n\
          -ERR value is not an integer or out of range\r\n\
          -ERR You can't specify both OPTIN mode and OPTOUT mode\r\n\
          -ERR OPTIN and OPTOUT are not compatible with BCAST\r\n\
          -ERR syntax error\r\n\
          -ERR syntax error\r\n\
          -ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n\
          -ERR Prefix 'ab' overlaps with another provided prefix 'a'. Prefixes for a single client must not overlap.\r\n\
          -ERR wrong number of arguments for 'client|tracking' command\r\n",
    )
    .await;
    c.roundtrip(
        b"CLIENT TRACKING on\r\nCLIENT CACHING yes\r\nCLIENT TRACKING on BCAST\r\n",
        b"+OK\r\n-ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.\r\n\
          -ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.\r\n",
    )
    .await;
    // Too many prefixes: refused whole, nothing registered.
    let mut req: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"on", b"BCAST"];
    let names: Vec<String> = (0..2000).map(|i| format!("p{i:05}:")).collect();
    for n in &names {
        req.push(b"PREFIX");
        req.push(n.as_bytes());
    }
    c.roundtrip(b"CLIENT TRACKING off\r\n", b"+OK\r\n").await;
    let Frame::Error(e) = c.cmd(&req).await else {
        panic!("2000 prefixes are refused");
    };
    assert!(String::from_utf8_lossy(&e).contains("at most"), "{e:?}");
    // One huge prefix: refused too.
    let huge = vec![b'p'; 100_000];
    let Frame::Error(e) = c
        .cmd(&[b"CLIENT", b"TRACKING", b"on", b"BCAST", b"PREFIX", &huge])
        .await
    else {
        panic!("a 100 kB prefix is refused");
    };
    assert!(
        String::from_utf8_lossy(&e).contains("bytes in all"),
        "{e:?}"
    );
    c.roundtrip(b"CLIENT GETREDIR\r\n", b":-1\r\n").await;
    s.stop().await;
}

#[tokio::test]
async fn a_tracking_client_that_stops_reading_is_disconnected_and_the_node_serves_on() {
    let s = Server::default().await;
    let mut writer = s.connect().await;
    writer
        .roundtrip(
            b"CONFIG SET client-output-buffer-limit \"pubsub 256kb 0 0\"\r\n",
            b"+OK\r\n",
        )
        .await;
    let mut c = s.connect().await;
    let _ = c.cmd(&[b"HELLO", b"3"]).await;
    c.roundtrip(b"CLIENT TRACKING on BCAST\r\n", b"+OK\r\n")
        .await;
    // 64 MiB of invalidated key names, far past the socket buffers and the limit; the
    // tracking client reads none of them.
    let mut gone = false;
    for i in 0..4096 {
        let key = format!("{i:016384}");
        writer
            .roundtrip(
                format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len()).as_bytes(),
                b"+OK\r\n",
            )
            .await;
        if i % 64 == 63 {
            let Frame::Bulk(info) = writer.cmd(&[b"INFO", b"clients"]).await else {
                panic!("INFO answers a bulk string");
            };
            if String::from_utf8_lossy(&info).contains("tracking_clients:0\r\n") {
                gone = true;
                break;
            }
        }
    }
    assert!(gone, "the tracking client was never disconnected");
    let mut received = 0usize;
    tokio::time::timeout(PATIENCE, async {
        loop {
            c.buf.clear();
            match c.stream.read_buf(&mut c.buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received += n,
            }
        }
    })
    .await
    .expect("the tracking client's connection is closed");
    assert!(received < 32 << 20, "{received} bytes reached the client");
    writer.roundtrip(b"PING\r\n", b"+PONG\r\n").await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_refuses_tracking_and_says_why() {
    let cluster = crate::cluster_mode::cluster().await;
    let mut c = crate::cluster_mode::connect(&cluster, 0).await;
    let Frame::Error(e) = c.cmd(&[b"CLIENT", b"TRACKING", b"on"]).await else {
        panic!("a cluster node refuses CLIENT TRACKING on");
    };
    let e = String::from_utf8_lossy(&e);
    assert!(e.contains("single node") && e.contains("TTL"), "{e}");
    assert_eq!(
        c.cmd(&[b"CLIENT", b"GETREDIR"]).await,
        Frame::Integer(-1),
        "nothing half-enabled"
    );
    cluster.shutdown().await;
}
