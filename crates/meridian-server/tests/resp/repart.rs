//! A standalone node with the worker-shard executor on (`repart.mode`): the same bytes back
//! as without it, request for request (pipelines, transactions, errors, multi-key commands
//! spanning shards, keyspace-wide commands), no increment lost under concurrent clients
//! while maps are swapped, and a client that floods and vanishes leaves it serving.

use super::{PATIENCE, Raw, RunningNode};
use bytes::BytesMut;
use meridian_server::NodeConfig;
use meridian_server::repart::{Mode, NewKeys, PartitionerKind, Workers};
use meridian_server::resp::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(mode: Mode) -> NodeConfig {
    let mut c = NodeConfig::default();
    c.resp.listen = "127.0.0.1:0".parse().unwrap();
    c.http.listen = "127.0.0.1:0".parse().unwrap();
    c.repart.mode = mode;
    c.repart.shards = 4;
    c.repart.window = 500;
    c.repart.partitioner = PartitionerKind::Fennel;
    c.repart.pin = false;
    c
}

async fn connect(node: &RunningNode) -> Raw {
    Raw {
        stream: TcpStream::connect(node.resp).await.unwrap(),
        buf: BytesMut::new(),
    }
}

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8(raw).unwrap()
}

fn request(args: &[&str]) -> Vec<u8> {
    Frame::Array(
        args.iter()
            .map(|a| Frame::bulk(a.as_bytes().to_vec()))
            .collect(),
    )
    .to_bytes(false)
    .to_vec()
}

/// Sends `script` as one pipeline and reads exactly `replies` replies, as raw bytes.
async fn run_script(raw: &mut Raw, script: &[Vec<&str>]) -> Vec<Frame> {
    let mut bytes = Vec::new();
    for r in script {
        bytes.extend(request(r));
    }
    raw.send(&bytes).await;
    let mut out = Vec::new();
    for _ in script {
        out.push(raw.frame().await);
    }
    out
}

/// A script touching every path of `resp::sharded`: single- and multi-key commands, keys on
/// different shards in one command, barriers (PING, KEYS, DBSIZE, SELECT, CLIENT), errors
/// (arity, unknown, WRONGTYPE-free integer errors, syntax), and MULTI/EXEC with WATCH.
fn script() -> Vec<Vec<&'static str>> {
    let mut s: Vec<Vec<&str>> = vec![
        vec!["SET", "a", "1"],
        vec!["GET", "a"],
        vec!["INCR", "a"],
        vec!["INCRBY", "a", "10"],
        vec!["APPEND", "b", "xy"],
        vec!["APPEND", "b", "z"],
        vec!["MSET", "c", "3", "d", "4", "e", "5", "f", "6"],
        vec!["MGET", "a", "b", "c", "d", "e", "f", "nope"],
        vec!["PING"],
        vec!["INCR", "b"],
        vec!["GET"],
        vec!["NOSUCHCMD", "x"],
        vec!["SET", "g", "1", "BOGUS"],
        vec!["DEL", "c", "d", "nope"],
        vec!["EXISTS", "a", "c", "e"],
        vec!["DBSIZE"],
        vec!["RENAME", "e", "e2"],
        vec!["GETSET", "f", "60"],
        vec!["GETDEL", "f"],
        vec!["SETNX", "h", "1"],
        vec!["SETNX", "h", "2"],
        vec!["STRLEN", "b"],
        vec!["WATCH", "a"],
        vec!["MULTI"],
        vec!["INCR", "a"],
        vec!["GET", "e2"],
        vec!["EXEC"],
        vec!["SELECT", "0"],
        vec!["KEYS", "*"],
        vec!["EXPIRE", "h", "1000"],
        vec!["PERSIST", "h"],
        vec!["DECR", "h"],
    ];
    for i in 0..40 {
        // Enough distinct keys to spread over every shard and feed the graph.
        let k: &'static str = Box::leak(format!("k{}", i % 13).into_boxed_str());
        s.push(vec!["INCR", k]);
        if i % 5 == 0 {
            let k2: &'static str = Box::leak(format!("k{}", (i + 7) % 13).into_boxed_str());
            s.push(vec!["MGET", k, k2]);
        }
    }
    s
}

/// Inline (telnet-style) key commands between multibulk ones: their arguments live in the
/// parser's scratch, not in the read buffer, so they end a batch.
async fn run_inline(raw: &mut Raw) -> Vec<Frame> {
    let mut bytes = request(&["SET", "i", "1"]);
    bytes.extend_from_slice(b"INCR i\r\nINCRBY i 5\r\n");
    bytes.extend(request(&["GET", "i"]));
    bytes.extend_from_slice(b"MGET i a\r\n");
    raw.send(&bytes).await;
    let mut out = Vec::new();
    for _ in 0..5 {
        out.push(raw.frame().await);
    }
    out
}

fn normalise(frames: Vec<Frame>) -> Vec<Frame> {
    // KEYS order is unspecified: compare it as a set.
    frames
        .into_iter()
        .map(|f| match f {
            Frame::Array(mut items)
                if items.iter().all(|i| matches!(i, Frame::Bulk(_))) && items.len() > 7 =>
            {
                items.sort_by_key(|i| format!("{i:?}"));
                Frame::Array(items)
            }
            f => f,
        })
        .collect()
}

// Multi-threaded: `base` on tasks waits synchronously for its tracker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_replies_equal_the_plain_node_reply_for_reply() {
    let plain = RunningNode::start(config(Mode::Off)).await;
    let mut want = Vec::new();
    {
        let mut raw = connect(&plain).await;
        want.push(run_script(&mut raw, &script()).await);
        // The same again one request per write (no pipeline).
        for r in script() {
            want.push(run_script(&mut raw, &[r]).await);
        }
        want.push(run_inline(&mut raw).await);
    }
    plain.stop().await;
    // With one client most requests find their shard idle and run inline; `inline = false`
    // sends every one through the queues.
    use NewKeys::{Hash, RoundRobin};
    for (mode, workers, inline, new_keys) in [
        (Mode::Single, Workers::Threads, false, Hash),
        (Mode::RoundRobin, Workers::Threads, true, Hash),
        (Mode::RoundRobin, Workers::Threads, true, RoundRobin),
        (Mode::RoundRobin, Workers::Threads, false, Hash),
        (Mode::NonStop, Workers::Threads, false, RoundRobin),
        (Mode::Free { interval: 7 }, Workers::Threads, true, Hash),
        (Mode::NonStop, Workers::Tasks, true, Hash),
        (Mode::NonStop, Workers::Tasks, false, RoundRobin),
        (Mode::Base { interval: 11 }, Workers::Tasks, false, Hash),
    ] {
        let mut c = config(mode);
        c.repart.workers = workers;
        c.repart.inline = inline;
        c.repart.new_keys = new_keys;
        let node = RunningNode::start(c).await;
        let mut raw = connect(&node).await;
        let mut got = vec![run_script(&mut raw, &script()).await];
        for r in script() {
            got.push(run_script(&mut raw, &[r]).await);
        }
        got.push(run_inline(&mut raw).await);
        assert_eq!(
            got.into_iter().map(normalise).collect::<Vec<_>>(),
            want.iter().cloned().map(normalise).collect::<Vec<_>>(),
            "mode {mode} {workers:?} inline {inline} new keys {new_keys:?}"
        );
        let metrics = http_get(node.http, "/metrics").await;
        assert!(
            metrics.contains("meridian_repart_dispatched_total"),
            "mode {mode}: the executor ran"
        );
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_increment_is_lost_while_maps_swap() {
    for (workers, inline) in [
        (Workers::Threads, false),
        (Workers::Tasks, true),
        (Workers::Threads, true),
    ] {
        let mut c = config(Mode::NonStop);
        c.repart.workers = workers;
        c.repart.inline = inline;
        c.repart.min_gain = 0.0;
        increments_survive(c).await;
    }
}

async fn increments_survive(config: NodeConfig) {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 40;
    const KEYS: usize = 24;
    let node = RunningNode::start(config).await;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut raw = connect(&node).await;
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // A pipeline of single-key INCRs and multi-key reads over a hidden affinity
                // structure (keys g*4..g*4+4), then a read of this client's own key, which
                // must see this pipeline's writes (per-connection order).
                let g = (round * 7 + c) % (KEYS / 4);
                let mut script: Vec<Vec<String>> = Vec::new();
                for j in 0..4 {
                    script.push(vec!["INCR".into(), format!("n{}", g * 4 + j)]);
                }
                script.push(
                    std::iter::once("MGET".to_string())
                        .chain((0..4).map(|j| format!("n{}", g * 4 + j)))
                        .collect(),
                );
                script.push(vec!["SET".into(), format!("own{c}"), round.to_string()]);
                script.push(vec!["GET".into(), format!("own{c}")]);
                let refs: Vec<Vec<&str>> = script
                    .iter()
                    .map(|r| r.iter().map(String::as_str).collect())
                    .collect();
                let replies = run_script(&mut raw, &refs).await;
                assert_eq!(
                    replies.last(),
                    Some(&Frame::bulk(round.to_string().into_bytes())),
                    "client {c} round {round}"
                );
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(PATIENCE, t).await.unwrap().unwrap();
    }
    let mut raw = connect(&node).await;
    let mut total = 0i64;
    for k in 0..KEYS {
        match raw.cmd(&[b"GET", format!("n{k}").as_bytes()]).await {
            Frame::Bulk(v) => total += std::str::from_utf8(&v).unwrap().parse::<i64>().unwrap(),
            Frame::Null => {}
            f => panic!("{f:?}"),
        }
    }
    assert_eq!(total, (CLIENTS * ROUNDS * 4) as i64, "increments lost");
    // The executor's series are exported.
    let metrics = http_get(node.http, "/metrics").await;
    let dispatched = metrics
        .lines()
        .find_map(|l| l.strip_prefix("meridian_repart_dispatched_total "))
        .expect("meridian_repart_dispatched_total exported");
    assert!(
        dispatched.parse::<f64>().unwrap() >= (CLIENTS * ROUNDS * 7) as f64,
        "{dispatched}"
    );
    assert!(metrics.contains("meridian_repart_swaps_total"), "{metrics}");
    node.stop().await;
}

#[tokio::test]
async fn a_client_that_floods_and_vanishes_leaves_the_node_serving() {
    let node = RunningNode::start(config(Mode::NonStop)).await;
    // Thousands of pipelined commands over many keys, then the connection is dropped
    // without reading a reply.
    for _ in 0..3 {
        let mut s = TcpStream::connect(node.resp).await.unwrap();
        let mut bytes = Vec::new();
        for i in 0..5_000 {
            bytes.extend(request(&[
                "MSET",
                &format!("f{i}"),
                "v",
                &format!("f{}", i / 2),
                "w",
            ]));
        }
        // Half a request at the end: the parser must wait, not run it.
        bytes.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$1\r\nz");
        let _ = s.write_all(&bytes).await;
        let mut some = [0u8; 64];
        let _ = s.read(&mut some).await;
        drop(s);
    }
    let mut raw = connect(&node).await;
    raw.roundtrip(&request(&["SET", "alive", "1"]), b"+OK\r\n")
        .await;
    raw.roundtrip(&request(&["GET", "alive"]), b"$1\r\n1\r\n")
        .await;
    raw.roundtrip(&request(&["EXISTS", "z"]), b":0\r\n").await;
    node.stop().await;
}
