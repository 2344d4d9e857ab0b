//! Pub/Sub on a single node, end to end over RESP: Redis 7's exact confirmations and
//! messages in RESP2 and RESP3, patterns, shard channels, PUBSUB, the RESP2 subscribed
//! context, CLIENT REPLY, a subscriber that stops reading (disconnected, memory bounded, the
//! node serving on), and the `redis` crate's pub/sub API.

use super::*;

#[tokio::test]
async fn subscribe_publish_and_unsubscribe_answer_exactly_as_redis() {
    let s = Server::default().await;
    let mut sub = s.connect().await;
    let mut publisher = s.connect().await;
    sub.roundtrip(
        b"SUBSCRIBE a b a\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
          *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n\
          *3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:2\r\n",
    )
    .await;
    sub.roundtrip(
        b"PSUBSCRIBE a*\r\n",
        b"*3\r\n$10\r\npsubscribe\r\n$2\r\na*\r\n:3\r\n",
    )
    .await;
    // A channel subscription first, then each matching pattern; nothing twice.
    publisher
        .roundtrip(b"PUBLISH a hi\r\nPUBLISH zz x\r\n", b":2\r\n:0\r\n")
        .await;
    sub.expect(
        b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n\
          *4\r\n$8\r\npmessage\r\n$2\r\na*\r\n$1\r\na\r\n$2\r\nhi\r\n",
    )
    .await;
    // RESP2's subscribed context: only the pub/sub commands, PING, QUIT and RESET.
    sub.roundtrip(
        b"GET k\r\nPING\r\nPING x\r\n",
        b"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n\
          *2\r\n$4\r\npong\r\n$0\r\n\r\n*2\r\n$4\r\npong\r\n$1\r\nx\r\n",
    )
    .await;
    publisher
        .roundtrip(
            b"PUBSUB NUMSUB a b c\r\nPUBSUB NUMPAT\r\nPUBSUB CHANNELS b*\r\n",
            b"*6\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n:1\r\n$1\r\nc\r\n:0\r\n:1\r\n*1\r\n$1\r\nb\r\n",
        )
        .await;
    let Frame::Bulk(info) = publisher.cmd(&[b"INFO", b"stats"]).await else {
        panic!("INFO answers a bulk string");
    };
    let info = String::from_utf8_lossy(&info);
    for line in [
        "pubsub_channels:2\r\n",
        "pubsub_patterns:1\r\n",
        "pubsubshard_channels:0\r\n",
    ] {
        assert!(info.contains(line), "{line:?} in {info}");
    }
    sub.roundtrip(
        b"UNSUBSCRIBE\r\n",
        b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:2\r\n\
          *3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:1\r\n",
    )
    .await;
    sub.roundtrip(
        b"PUNSUBSCRIBE\r\nPUNSUBSCRIBE\r\nUNSUBSCRIBE nope\r\nPING\r\n",
        b"*3\r\n$12\r\npunsubscribe\r\n$2\r\na*\r\n:0\r\n\
          *3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n\
          *3\r\n$11\r\nunsubscribe\r\n$4\r\nnope\r\n:0\r\n+PONG\r\n",
    )
    .await;
    publisher.roundtrip(b"PUBLISH a hi\r\n", b":0\r\n").await;
    publisher
        .roundtrip(
            b"PUBSUB NOPE\r\nPUBSUB NUMPAT x\r\n",
            b"-ERR unknown subcommand 'NOPE'. Try PUBSUB HELP.\r\n\
              -ERR wrong number of arguments for 'pubsub|numpat' command\r\n",
        )
        .await;
    s.stop().await;
}

#[tokio::test]
async fn resp3_subscriptions_are_pushes_and_other_commands_still_run() {
    let s = Server::default().await;
    let mut sub = s.connect().await;
    let mut publisher = s.connect().await;
    let _ = sub.cmd(&[b"HELLO", b"3"]).await;
    sub.roundtrip(
        b"SSUBSCRIBE shard\r\nSUBSCRIBE c\r\n",
        b">3\r\n$10\r\nssubscribe\r\n$5\r\nshard\r\n:1\r\n\
          >3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n",
    )
    .await;
    sub.roundtrip(b"SET k v\r\nGET k\r\n", b"+OK\r\n$1\r\nv\r\n")
        .await;
    // Shard channels are a namespace of their own.
    publisher
        .roundtrip(
            b"PUBLISH shard x\r\nSPUBLISH shard y\r\nPUBSUB SHARDNUMSUB shard\r\nPUBSUB SHARDCHANNELS\r\n",
            b":0\r\n:1\r\n*2\r\n$5\r\nshard\r\n:1\r\n*1\r\n$5\r\nshard\r\n",
        )
        .await;
    sub.expect(b">3\r\n$8\r\nsmessage\r\n$5\r\nshard\r\n$1\r\ny\r\n")
        .await;
    sub.roundtrip(
        b"SUNSUBSCRIBE\r\n",
        b">3\r\n$12\r\nsunsubscribe\r\n$5\r\nshard\r\n:0\r\n",
    )
    .await;
    // RESET ends every subscription.
    sub.roundtrip(b"RESET\r\n", b"+RESET\r\n").await;
    publisher.roundtrip(b"PUBLISH c x\r\n", b":0\r\n").await;
    s.stop().await;
}

#[tokio::test]
async fn client_reply_off_and_skip_silence_replies_but_not_subscriptions() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let mut publisher = s.connect().await;
    c.send(b"CLIENT REPLY OFF\r\nSET a 1\r\nNOPE\r\nSUBSCRIBE ch\r\n")
        .await;
    c.expect(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")
        .await;
    publisher.roundtrip(b"PUBLISH ch m\r\n", b":1\r\n").await;
    c.expect(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n")
        .await;
    c.roundtrip(
        b"UNSUBSCRIBE\r\nCLIENT REPLY ON\r\nGET a\r\n",
        b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n+OK\r\n$1\r\n1\r\n",
    )
    .await;
    c.roundtrip(
        b"CLIENT REPLY SKIP\r\nNOPE\r\nGET a\r\nCLIENT REPLY MAYBE\r\n",
        b"$1\r\n1\r\n-ERR syntax error\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn client_output_buffer_limit_is_reported_and_set_for_the_pubsub_class_only() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"CONFIG GET client-output-buffer-limit\r\n",
        b"*2\r\n$26\r\nclient-output-buffer-limit\r\n\
          $67\r\nnormal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60\r\n",
    )
    .await;
    c.roundtrip(
        b"CONFIG SET client-output-buffer-limit \"normal 0 0 0 pubsub 1mb 512kb 10\"\r\n\
          CONFIG GET client-output-buffer-limit\r\n",
        b"+OK\r\n*2\r\n$26\r\nclient-output-buffer-limit\r\n\
          $65\r\nnormal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 10\r\n",
    )
    .await;
    let Frame::Error(e) = c
        .cmd(&[
            b"CONFIG",
            b"SET",
            b"client-output-buffer-limit",
            b"normal 1mb 0 0",
        ])
        .await
    else {
        panic!("a normal-class limit is refused");
    };
    assert!(
        String::from_utf8_lossy(&e).contains("only the pubsub class"),
        "{e:?}"
    );
    let Frame::Error(_) = c
        .cmd(&[
            b"CONFIG",
            b"SET",
            b"client-output-buffer-limit",
            b"pubsub 1mb 0",
        ])
        .await
    else {
        panic!("three values are refused");
    };
    s.stop().await;
}

/// A subscriber that never reads while a publisher floods its channel: the node disconnects
/// it once its queue passes the pubsub limit, so memory stays bounded, and keeps serving.
#[tokio::test]
async fn a_subscriber_that_stops_reading_is_disconnected_and_the_node_serves_on() {
    let s = Server::default().await;
    let mut publisher = s.connect().await;
    publisher
        .roundtrip(
            b"CONFIG SET client-output-buffer-limit \"pubsub 256kb 0 0\"\r\n",
            b"+OK\r\n",
        )
        .await;
    let mut sub = s.connect().await;
    sub.roundtrip(
        b"SUBSCRIBE flood\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$5\r\nflood\r\n:1\r\n",
    )
    .await;
    // 64 MiB published, far past the socket buffers and the limit; the subscriber reads none.
    let payload = vec![b'x'; 64 * 1024];
    let mut disconnected = false;
    for _ in 0..1024 {
        let Frame::Integer(n) = publisher.cmd(&[b"PUBLISH", b"flood", &payload]).await else {
            panic!("PUBLISH answers an integer");
        };
        if n == 0 {
            disconnected = true;
            break;
        }
    }
    assert!(disconnected, "the subscriber was never disconnected");
    // What reached the subscriber's socket is bounded by the socket buffers, not the flood.
    let mut received = 0usize;
    tokio::time::timeout(PATIENCE, async {
        loop {
            sub.buf.clear();
            match sub.stream.read_buf(&mut sub.buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received += n,
            }
        }
    })
    .await
    .expect("the subscriber's connection is closed");
    assert!(
        received < 32 << 20,
        "{received} bytes reached the subscriber"
    );
    publisher
        .roundtrip(
            b"PUBSUB NUMSUB flood\r\nPING\r\n",
            b"*2\r\n$5\r\nflood\r\n:0\r\n+PONG\r\n",
        )
        .await;
    s.stop().await;
}

#[tokio::test]
async fn a_closed_connection_leaves_no_subscription() {
    let s = Server::default().await;
    let mut sub = s.connect().await;
    let _ = sub.cmd(&[b"PSUBSCRIBE", b"p*"]).await;
    let _ = sub.cmd(&[b"SUBSCRIBE", b"c"]).await;
    drop(sub);
    let mut c = s.connect().await;
    let mut left = (1, 1);
    for _ in 0..200 {
        let Frame::Integer(pats) = c.cmd(&[b"PUBSUB", b"NUMPAT"]).await else {
            panic!("NUMPAT answers an integer");
        };
        let Frame::Integer(subs) = c.cmd(&[b"PUBLISH", b"c", b"x"]).await else {
            panic!("PUBLISH answers an integer");
        };
        left = (pats, subs);
        if left == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(left, (0, 0), "patterns and subscribers left behind");
    s.stop().await;
}

/// The `redis` crate's pub/sub API (what applications use) against a node.
#[tokio::test]
async fn the_redis_crate_subscribes_and_receives() {
    let s = Server::default().await;
    let url = s.url();
    blocking(move || {
        let client = redis::Client::open(url).unwrap();
        let mut sub_conn = client.get_connection().unwrap();
        let mut publisher = client.get_connection().unwrap();
        let mut sub = sub_conn.as_pubsub();
        sub.subscribe("orders").unwrap();
        sub.psubscribe("events.*").unwrap();
        let n: i64 = publisher.publish("orders", "o-1").unwrap();
        assert_eq!(n, 1);
        let n: i64 = publisher.publish("events.login", "u-7").unwrap();
        assert_eq!(n, 1);
        let m = sub.get_message().unwrap();
        assert_eq!(m.get_channel_name(), "orders");
        assert_eq!(m.get_payload::<String>().unwrap(), "o-1");
        let m = sub.get_message().unwrap();
        assert_eq!(m.get_pattern::<String>().unwrap(), "events.*");
        assert_eq!(m.get_channel_name(), "events.login");
        assert_eq!(m.get_payload::<String>().unwrap(), "u-7");
        sub.unsubscribe("orders").unwrap();
        sub.punsubscribe("events.*").unwrap();
    })
    .await;
    s.stop().await;
}

/// Reads `n` pub/sub messages and returns each as `channel message` (pmessage's pattern
/// left out).
async fn events(sub: &mut Raw, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let Frame::Array(parts) = sub.frame().await else {
            panic!("a message");
        };
        let text: Vec<String> = parts
            .iter()
            .map(|p| match p {
                Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        out.push(text[2..].join(" "));
    }
    out
}

#[tokio::test]
async fn keyspace_notifications_name_redis_events_per_command() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"CONFIG SET notify-keyspace-events KEA\r\nCONFIG GET notify-keyspace-events\r\n",
        b"+OK\r\n*2\r\n$22\r\nnotify-keyspace-events\r\n$3\r\nAKE\r\n",
    )
    .await;
    c.roundtrip(b"CONFIG SET notify-keyspace-events Elshg$n\r\n", b"+OK\r\n")
        .await;
    let mut sub = s.connect().await;
    let _ = sub.cmd(&[b"PSUBSCRIBE", b"__key*"]).await;
    // A command that changes nothing publishes nothing: SREM of an absent member.
    c.roundtrip(
        b"SET k v\r\nSET k w\r\nLPUSH l a\r\nRPOP l\r\nSADD s a\r\nSREM s x\r\nHMSET h f 1\r\nEXPIRE k 100\r\nDEL k nope\r\n",
        b"+OK\r\n+OK\r\n:1\r\n$1\r\na\r\n:1\r\n:0\r\n+OK\r\n:1\r\n:1\r\n",
    )
    .await;
    assert_eq!(
        events(&mut sub, 12).await,
        [
            "__keyevent@0__:new k",
            "__keyevent@0__:set k",
            "__keyevent@0__:set k",
            "__keyevent@0__:new l",
            "__keyevent@0__:lpush l",
            "__keyevent@0__:rpop l",
            // The list's last element went: the key with it.
            "__keyevent@0__:del l",
            "__keyevent@0__:new s",
            "__keyevent@0__:sadd s",
            "__keyevent@0__:new h",
            "__keyevent@0__:hset h",
            "__keyevent@0__:expire k",
        ]
    );
    assert_eq!(events(&mut sub, 1).await, ["__keyevent@0__:del k"]);
    // Inside MULTI/EXEC each queued command publishes its own events.
    c.roundtrip(
        b"CONFIG SET notify-keyspace-events Kx$\r\nMULTI\r\nINCR n\r\nPSETEX gone 1 x\r\nEXEC\r\n",
        b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n+OK\r\n",
    )
    .await;
    assert_eq!(
        events(&mut sub, 2).await,
        ["__keyspace@0__:n incrby", "__keyspace@0__:gone set"]
    );
    // This server runs no active expirer: the DEL finds the key expired.
    tokio::time::sleep(Duration::from_millis(20)).await;
    c.roundtrip(b"DEL gone\r\n", b":0\r\n").await;
    assert_eq!(events(&mut sub, 1).await, ["__keyspace@0__:gone expired"]);
    c.roundtrip(
        b"CONFIG SET notify-keyspace-events Kq\r\n",
        b"-ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class character. Use 'Ag$lshzxeKEtmdn'.\r\n",
    )
    .await;
    s.stop().await;
}

/// Cluster mode: a message published on one node reaches the subscribers of every node of
/// both DCs (across the emulated WAN), once each, in the order one connection published;
/// PUBLISH counts the publishing node's own subscribers, as Redis Cluster's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_publish_reaches_every_node_of_every_dc_in_order() {
    let cfg = meridian_server::cluster::EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::from_millis(5),
        intra_dc: meridian_net::wan::LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        ..Default::default()
    };
    let c = meridian_server::cluster::start_embedded(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let addrs: Vec<SocketAddr> = c.members.iter().map(|m| m.resp.unwrap()).collect();
    let mut subs = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let mut s = Raw {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: BytesMut::new(),
        };
        // Half by channel, half by pattern.
        if i % 2 == 0 {
            s.roundtrip(
                b"SUBSCRIBE news\r\n",
                b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n",
            )
            .await;
        } else {
            s.roundtrip(
                b"PSUBSCRIBE ne*\r\n",
                b"*3\r\n$10\r\npsubscribe\r\n$3\r\nne*\r\n:1\r\n",
            )
            .await;
        }
        subs.push(s);
    }
    let mut publisher = Raw {
        stream: TcpStream::connect(addrs[0]).await.unwrap(),
        buf: BytesMut::new(),
    };
    let mut batch = Vec::new();
    for n in 0..50 {
        batch.extend_from_slice(format!("PUBLISH news m{n}\r\n").as_bytes());
    }
    publisher.send(&batch).await;
    for _ in 0..50 {
        assert_eq!(
            publisher.frame().await,
            Frame::Integer(1),
            "node 0's own subscriber"
        );
    }
    for (i, s) in subs.iter_mut().enumerate() {
        for n in 0..50 {
            let Frame::Array(parts) = s.frame().await else {
                panic!("a message");
            };
            assert_eq!(
                parts.last(),
                Some(&bulk(&format!("m{n}"))),
                "node {i}, message {n}"
            );
        }
    }
    // Nothing twice.
    publisher
        .roundtrip(b"PUBLISH news last\r\n", b":1\r\n")
        .await;
    for s in &mut subs {
        let Frame::Array(parts) = s.frame().await else {
            panic!("a message");
        };
        assert_eq!(parts.last(), Some(&bulk("last")));
    }
    c.shutdown().await;
}

/// One request naming very many channels, and a DEL of very many keys with notifications on:
/// each name costs O(1) (a quadratic scan would hold the connection for minutes here).
#[tokio::test]
async fn a_hundred_thousand_subscriptions_and_deleted_keys_cost_linear_work() {
    const N: usize = 100_000;
    let s = Server::default().await;
    let mut c = s.connect().await;
    let mut sub_args: Vec<Vec<u8>> = vec![b"SUBSCRIBE".to_vec()];
    sub_args.extend((0..N).map(|i| format!("c{i}").into_bytes()));
    let refs: Vec<&[u8]> = sub_args.iter().map(Vec::as_slice).collect();
    let req = Frame::Array(refs.iter().map(|a| Frame::bulk(a.to_vec())).collect());
    c.send(&req.to_bytes(false)).await;
    for i in 0..N {
        let Frame::Array(parts) = c.frame().await else {
            panic!("a confirmation");
        };
        assert_eq!(parts[2], Frame::Integer(i as i64 + 1));
    }
    let mut other = s.connect().await;
    other
        .roundtrip(b"PUBLISH c99999 x\r\nMSET a 1 b 2\r\n", b":1\r\n+OK\r\n")
        .await;
    let mut del_args: Vec<Vec<u8>> = vec![b"DEL".to_vec()];
    del_args.extend((0..N).map(|i| format!("k{i}").into_bytes()));
    del_args.push(b"a".to_vec());
    let refs: Vec<&[u8]> = del_args.iter().map(Vec::as_slice).collect();
    let _ = other
        .cmd(&[b"CONFIG", b"SET", b"notify-keyspace-events", b"Eg"])
        .await;
    assert_eq!(other.cmd(&refs).await, Frame::Integer(1));
    let Frame::Array(parts) = c.frame().await else {
        panic!("the message");
    };
    assert_eq!(parts.last(), Some(&bulk("x")));
    c.send(b"UNSUBSCRIBE\r\n").await;
    for i in 0..N {
        let Frame::Array(parts) = c.frame().await else {
            panic!("a confirmation");
        };
        assert_eq!(parts[2], Frame::Integer((N - i - 1) as i64));
    }
    s.stop().await;
}
