//! Keyspace iteration and hashes in cluster mode, over RESP on an embedded 2-DC × 2-node
//! cluster: SCAN/KEYS/DBSIZE list each key once per DC (the nodes of a DC answer for
//! disjoint slot ranges that cover every slot), COUNT bounds every reply, and hashes answer
//! as Redis's on eventual buckets (a map CRDT) and timeline buckets (through the master),
//! with WRONGTYPE both ways; FLUSHALL/FLUSHDB asked of one node empty every bucket type on
//! every node.

use super::cluster_mode::{cluster, connect};
use super::*;
use meridian_replication::bucket::BucketProps;
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use std::collections::BTreeMap;

fn error(f: Frame) -> String {
    match f {
        Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn texts(f: Frame) -> Vec<String> {
    let Frame::Array(items) = f else {
        panic!("expected an array, got {f:?}")
    };
    items
        .into_iter()
        .map(|i| match i {
            Frame::Bulk(b) => String::from_utf8(b.to_vec()).unwrap(),
            other => panic!("expected a bulk string, got {other:?}"),
        })
        .collect()
}

/// One SCAN call: the next cursor and the keys.
async fn scan(c: &mut Raw, cursor: &str, opts: &[&str]) -> (String, Vec<String>) {
    let mut args: Vec<&[u8]> = vec![b"SCAN", cursor.as_bytes()];
    args.extend(opts.iter().map(|o| o.as_bytes()));
    let Frame::Array(mut parts) = c.cmd(&args).await else {
        panic!("SCAN answers an array")
    };
    assert_eq!(parts.len(), 2);
    let keys = texts(parts.pop().unwrap());
    let Frame::Bulk(next) = parts.pop().unwrap() else {
        panic!("a cursor")
    };
    (String::from_utf8(next.to_vec()).unwrap(), keys)
}

/// Every key a full SCAN of node connection `c` lists, with `opts`; checks COUNT's bound.
async fn full_scan(c: &mut Raw, count: usize, opts: &[&str]) -> Vec<String> {
    let count_s = count.to_string();
    let mut all_opts = vec!["COUNT", count_s.as_str()];
    all_opts.extend_from_slice(opts);
    let (mut cursor, mut out) = ("0".to_owned(), Vec::new());
    loop {
        let (next, keys) = scan(c, &cursor, &all_opts).await;
        assert!(keys.len() <= count, "{} keys for COUNT {count}", keys.len());
        out.extend(keys);
        if next == "0" {
            return out;
        }
        cursor = next;
    }
}

/// Replication between replicas is asynchronous: tests poll this often, this many times.
const POLLS: usize = 200;
const POLL_EVERY: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_keys_and_dbsize_list_every_key_once_per_dc() {
    let c = cluster().await;
    let mut a = connect(&c, 0).await;
    let mut written: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    for k in &written {
        assert_eq!(
            a.cmd(&[b"SET", k.as_bytes(), b"v"]).await,
            Frame::Simple("OK".into())
        );
    }
    for i in 0..10 {
        let k = format!("h{i}");
        assert_eq!(
            a.cmd(&[b"HSET", k.as_bytes(), b"f", b"v"]).await,
            Frame::Integer(1)
        );
        written.push(k);
    }
    // Deleted and expired keys are not listed.
    a.cmd(&[b"SET", b"gone", b"v"]).await;
    a.cmd(&[b"DEL", b"gone"]).await;
    a.cmd(&[b"SET", b"brief", b"v", b"PX", b"1"]).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    written.sort();

    // Each DC's nodes answer for disjoint slot ranges that cover every slot.
    let by_dc: BTreeMap<_, Vec<usize>> =
        c.members
            .iter()
            .enumerate()
            .fold(BTreeMap::new(), |mut m, (i, member)| {
                m.entry(member.dc).or_insert_with(Vec::new).push(i);
                m
            });
    for nodes in by_dc.values() {
        let mut seen = Vec::new();
        for _ in 0..POLLS {
            seen.clear();
            for &i in nodes {
                let mut n = connect(&c, i).await;
                seen.extend(full_scan(&mut n, 7, &[]).await);
            }
            seen.sort();
            if seen == written {
                break;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        assert_eq!(seen, written, "each key once per DC");
        let (mut keys, mut hashes, mut strings, mut dbsize) = (vec![], vec![], 0, 0);
        for &i in nodes {
            let mut n = connect(&c, i).await;
            keys.extend(texts(n.cmd(&[b"KEYS", b"h*"]).await));
            hashes.extend(full_scan(&mut n, 3, &["TYPE", "hash"]).await);
            strings += full_scan(&mut n, 50, &["MATCH", "k*", "TYPE", "string"])
                .await
                .len();
            let Frame::Integer(size) = n.cmd(&[b"DBSIZE"]).await else {
                panic!("DBSIZE answers an integer")
            };
            dbsize += size;
            assert!(full_scan(&mut n, 10, &["TYPE", "zset"]).await.is_empty());
            // RANDOMKEY draws one of the keys this node lists.
            let Frame::Bulk(k) = n.cmd(&[b"RANDOMKEY"]).await else {
                panic!("RANDOMKEY answers a key")
            };
            let k = String::from_utf8(k.to_vec()).unwrap();
            assert!(written.contains(&k), "RANDOMKEY answered {k}");
        }
        keys.sort();
        hashes.sort();
        let want_h: Vec<String> = (0..10).map(|i| format!("h{i}")).collect();
        assert_eq!(keys, want_h);
        assert_eq!(hashes, want_h);
        assert_eq!(strings, 300);
        assert_eq!(dbsize, 310);
    }
    // Hostile cursors and options get Redis's errors; an unknown cursor restarts.
    assert_eq!(error(a.cmd(&[b"SCAN", b"-1"]).await), "ERR invalid cursor");
    assert_eq!(error(a.cmd(&[b"SCAN", b"x"]).await), "ERR invalid cursor");
    assert_eq!(
        error(a.cmd(&[b"SCAN", b"0", b"COUNT", b"0"]).await),
        "ERR syntax error"
    );
    assert_eq!(
        error(a.cmd(&[b"SCAN", b"0", b"TYPE", b"nope"]).await),
        "ERR unknown type name 'nope'"
    );
    let (_, keys) = scan(&mut a, "12345", &["COUNT", "1000"]).await;
    assert!(!keys.is_empty(), "an unknown cursor restarts the iteration");
    let (_, huge) = scan(&mut a, "0", &["COUNT", "9223372036854775807"]).await;
    assert!(!huge.is_empty());
    c.shutdown().await;
}

/// The DBSIZE of the whole cluster: the sum over one DC's nodes.
async fn cluster_dbsize(c: &Embedded, nodes: &[usize]) -> i64 {
    let mut total = 0;
    for &i in nodes {
        let Frame::Integer(n) = connect(c, i).await.cmd(&[b"DBSIZE"]).await else {
            panic!("DBSIZE answers an integer")
        };
        total += n;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_empties_every_bucket_type_cluster_wide() {
    let c = cluster_with(&[
        ("tl", BucketProps::timeline()),
        ("tx", BucketProps::transactional(Default::default())),
    ])
    .await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    let keys = ["k", "tl:k", "tx:k"];
    for k in keys {
        assert_eq!(
            a.cmd(&[b"SET", k.as_bytes(), b"old"]).await,
            Frame::Simple("OK".into())
        );
    }
    a.cmd(&[b"HSET", b"h", b"f", b"old"]).await;
    a.cmd(&[b"INCRBY", b"n", b"7"]).await;
    let listed = |n| n == 5; // k, tl:k, tx:k, h, n
    for _ in 0..POLLS {
        if listed(cluster_dbsize(&c, &[2, 3]).await) {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert_eq!(cluster_dbsize(&c, &[2, 3]).await, 5);

    // Redis's argument errors; then a flush asked of one node empties every node at once.
    assert_eq!(
        error(b.cmd(&[b"FLUSHALL", b"NOW"]).await),
        "ERR syntax error"
    );
    assert_eq!(
        error(b.cmd(&[b"FLUSHDB", b"SYNC", b"x"]).await),
        "ERR syntax error"
    );
    assert_eq!(
        b.cmd(&[b"FLUSHALL", b"ASYNC"]).await,
        Frame::Simple("OK".into())
    );
    for i in 0..4 {
        let mut n = connect(&c, i).await;
        for k in keys.iter().chain(&["h", "n"]) {
            assert_eq!(
                n.cmd(&[b"EXISTS", k.as_bytes()]).await,
                Frame::Integer(0),
                "node {i} {k}"
            );
        }
    }
    assert_eq!(cluster_dbsize(&c, &[0, 1]).await, 0);
    assert_eq!(cluster_dbsize(&c, &[2, 3]).await, 0);

    // Writes after it are kept; a counter and a hash start over.
    assert_eq!(a.cmd(&[b"INCR", b"n"]).await, Frame::Integer(1));
    assert_eq!(
        a.cmd(&[b"HSET", b"h", b"g", b"new"]).await,
        Frame::Integer(1)
    );
    assert_eq!(texts(a.cmd(&[b"HGETALL", b"h"]).await), ["g", "new"]);
    for k in keys {
        assert_eq!(
            a.cmd(&[b"SET", k.as_bytes(), b"new"]).await,
            Frame::Simple("OK".into())
        );
    }
    assert_eq!(b.cmd(&[b"FLUSHDB"]).await, Frame::Simple("OK".into()));
    assert_eq!(cluster_dbsize(&c, &[0, 1]).await, 0);
    a.cmd(&[b"SET", b"tx:k", b"last"]).await;
    for _ in 0..POLLS {
        if b.cmd(&[b"GET", b"tx:k"]).await == bulk("last") {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert_eq!(b.cmd(&[b"GET", b"tx:k"]).await, bulk("last"));
    assert_eq!(b.cmd(&[b"GET", b"k"]).await, Frame::Null);
    c.shutdown().await;
}

/// Transactional keys live only at their partitions' leaders; the nodes of each DC list
/// them between them, each once, with their types, whichever DC wrote them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_keys_and_dbsize_list_transactional_keys_once_per_dc() {
    let c = cluster_with(&[("tx", BucketProps::transactional(Default::default()))]).await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    let mut strings = Vec::new();
    for i in 0..120 {
        let k = format!("tx:s{i}");
        let con = if i % 2 == 0 { &mut a } else { &mut b };
        let set = con.cmd(&[b"SET", k.as_bytes(), b"v"]).await;
        assert_eq!(set, Frame::Simple("OK".into()));
        strings.push(k);
    }
    let mut hashes = Vec::new();
    for i in 0..15 {
        let k = format!("tx:h{i}");
        let hset = b.cmd(&[b"HSET", k.as_bytes(), b"f", b"v"]).await;
        assert_eq!(hset, Frame::Integer(1));
        hashes.push(k);
    }
    // Deleted and expired keys are not listed; an eventual key is, once.
    a.cmd(&[b"SET", b"tx:gone", b"v"]).await;
    assert_eq!(a.cmd(&[b"DEL", b"tx:gone"]).await, Frame::Integer(1));
    a.cmd(&[b"SET", b"tx:brief", b"v", b"PX", b"1"]).await;
    a.cmd(&[b"SET", b"plain", b"v"]).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut all: Vec<String> = strings.iter().chain(&hashes).cloned().collect();
    all.push("plain".into());
    all.sort();
    hashes.sort();
    for nodes in [[0usize, 1], [2, 3]] {
        let mut seen = Vec::new();
        for _ in 0..POLLS {
            seen.clear();
            for &i in &nodes {
                seen.extend(full_scan(&mut connect(&c, i).await, 7, &[]).await);
            }
            seen.sort();
            if seen == all {
                break;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        assert_eq!(seen, all, "each key once in DC of nodes {nodes:?}");
        let (mut keys, mut typed) = (Vec::new(), Vec::new());
        for &i in &nodes {
            let mut n = connect(&c, i).await;
            keys.extend(texts(n.cmd(&[b"KEYS", b"tx:h*"]).await));
            typed.extend(full_scan(&mut n, 3, &["TYPE", "hash", "MATCH", "tx:*"]).await);
        }
        keys.sort();
        typed.sort();
        assert_eq!(keys, hashes);
        assert_eq!(typed, hashes);
        assert_eq!(cluster_dbsize(&c, &nodes).await, all.len() as i64);
    }
    c.shutdown().await;
}

/// A 2 × 2 cluster with `buckets` beside the default one (eventual unless `buckets` says
/// otherwise).
async fn cluster_with(buckets: &[(&str, BucketProps)]) -> Embedded {
    let buckets = std::iter::once(super::eventual_default())
        .chain(buckets.iter().map(|(n, p)| (n.to_string(), *p)))
        .collect();
    two_by_two(buckets).await
}

/// A 2 × 2 cluster (ideal links, 100 ms heartbeats) with `buckets`, serving any key anywhere.
async fn two_by_two(buckets: BTreeMap<String, BucketProps>) -> Embedded {
    let cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::ZERO,
        intra_dc: meridian_net::wan::LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        buckets,
        ..EmbeddedConfig::default()
    };
    crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

async fn tl_cluster() -> Embedded {
    cluster_with(&[("tl", BucketProps::timeline())]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashes_answer_as_redis_on_eventual_and_timeline_buckets() {
    let c = tl_cluster().await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    for key in ["h", "tl:h"] {
        let k = key.as_bytes();
        assert_eq!(
            a.cmd(&[b"HSET", k, b"b", b"2", b"a", b"1"]).await,
            Frame::Integer(2)
        );
        assert_eq!(
            a.cmd(&[b"HMSET", k, b"c", b"3"]).await,
            Frame::Simple("OK".into())
        );
        assert_eq!(a.cmd(&[b"HSETNX", k, b"a", b"9"]).await, Frame::Integer(0));
        assert_eq!(a.cmd(&[b"HINCRBY", k, b"n", b"5"]).await, Frame::Integer(5));
        for _ in 0..POLLS {
            if b.cmd(&[b"HLEN", k]).await == Frame::Integer(4) {
                break;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        assert_eq!(
            texts(b.cmd(&[b"HGETALL", k]).await),
            ["a", "1", "b", "2", "c", "3", "n", "5"]
        );
        assert_eq!(
            b.cmd(&[b"HMGET", k, b"a", b"zz"]).await,
            Frame::Array(vec![bulk("1"), Frame::Null])
        );
        assert_eq!(b.cmd(&[b"HGET", k, b"c"]).await, bulk("3"));
        assert_eq!(b.cmd(&[b"HEXISTS", k, b"zz"]).await, Frame::Integer(0));
        assert_eq!(b.cmd(&[b"TYPE", k]).await, Frame::Simple("hash".into()));
        assert_eq!(a.cmd(&[b"HDEL", k, b"a", b"zz"]).await, Frame::Integer(1));
        // Hostile arguments: Redis's errors, nothing changed.
        assert_eq!(
            error(a.cmd(&[b"HSET", k, b"x", b"1", b"y"]).await),
            "ERR wrong number of arguments for 'hset' command"
        );
        assert_eq!(
            error(a.cmd(&[b"HINCRBY", k, b"n", b"1.5"]).await),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            error(a.cmd(&[b"HINCRBY", k, b"b", b"9223372036854775807"]).await),
            "ERR increment or decrement would overflow"
        );
        a.cmd(&[b"HSET", k, b"t", b"text"]).await;
        assert_eq!(
            error(a.cmd(&[b"HINCRBY", k, b"t", b"1"]).await),
            "ERR hash value is not an integer"
        );
        // WRONGTYPE both ways; MGET shows a hash as nil; EXPIRE keeps a hash a hash.
        let e = error(a.cmd(&[b"GET", k]).await);
        assert!(e.starts_with("WRONGTYPE"), "{e}");
        let e = error(a.cmd(&[b"APPEND", k, b"x"]).await);
        assert!(
            e.starts_with("WRONGTYPE") || e.contains("not supported"),
            "{e}"
        );
        assert_eq!(a.cmd(&[b"MGET", k]).await, Frame::Array(vec![Frame::Null]));
        assert_eq!(a.cmd(&[b"EXPIRE", k, b"100"]).await, Frame::Integer(1));
        assert_eq!(a.cmd(&[b"HGET", k, b"b"]).await, bulk("2"));
        assert_eq!(a.cmd(&[b"TYPE", k]).await, Frame::Simple("hash".into()));
        let s = format!("{key}-s");
        a.cmd(&[b"SET", s.as_bytes(), b"v"]).await;
        let e = error(a.cmd(&[b"HSET", s.as_bytes(), b"f", b"v"]).await);
        assert!(e.starts_with("WRONGTYPE"), "{e}");
        let e = error(a.cmd(&[b"HGET", s.as_bytes(), b"f"]).await);
        assert!(e.starts_with("WRONGTYPE"), "{e}");
        // HDEL of the last fields deletes the key.
        assert_eq!(
            a.cmd(&[b"HDEL", k, b"b", b"c", b"n", b"t"]).await,
            Frame::Integer(4)
        );
        assert_eq!(a.cmd(&[b"EXISTS", k]).await, Frame::Integer(0));
    }
    // What an eventual bucket cannot make atomic is refused, saying why.
    let e = error(a.cmd(&[b"HINCRBYFLOAT", b"h", b"f", b"1.5"]).await);
    assert!(
        e.starts_with("ERR HINCRBYFLOAT is not supported on eventual buckets"),
        "{e}"
    );
    assert_eq!(
        a.cmd(&[b"HINCRBYFLOAT", b"tl:h", b"f", b"1.5"]).await,
        bulk("1.5")
    );
    c.shutdown().await;
}

/// The DBSIZE of database `db` over one DC's nodes.
async fn db_size(c: &Embedded, nodes: &[usize], db: &str) -> i64 {
    let mut total = 0;
    for &i in nodes {
        let mut con = connect(c, i).await;
        assert_eq!(
            con.cmd(&[b"SELECT", db.as_bytes()]).await,
            Frame::Simple("OK".into())
        );
        let Frame::Integer(n) = con.cmd(&[b"DBSIZE"]).await else {
            panic!("DBSIZE answers an integer")
        };
        total += n;
    }
    total
}

/// `SELECT n` in cluster mode is database n, the bucket `db<n>` (the default bucket's type):
/// its keys are its own on every node of both DCs, listed by the names its clients gave them,
/// transactions run in it, FLUSHDB empties it alone, and MOVE and SWAPDB are refused saying
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbered_databases_are_buckets_of_their_own() {
    // The cluster's own default bucket (timeline), as `meridian up` starts.
    let c = two_by_two(BTreeMap::new()).await;
    let ok = || Frame::Simple("OK".into());
    let (mut a3, mut b3, mut a0) = (
        connect(&c, 0).await,
        connect(&c, 2).await,
        connect(&c, 0).await,
    );
    assert_eq!(a3.cmd(&[b"SELECT", b"3"]).await, ok());
    assert_eq!(b3.cmd(&[b"SELECT", b"3"]).await, ok());
    assert_eq!(a3.cmd(&[b"SET", b"foo", b"three"]).await, ok());
    assert_eq!(a0.cmd(&[b"SET", b"foo", b"zero"]).await, ok());
    assert_eq!(
        b3.cmd(&[b"GET", b"foo"]).await,
        bulk("three"),
        "the other DC"
    );
    assert_eq!(a0.cmd(&[b"GET", b"foo"]).await, bulk("zero"));
    assert_eq!(
        a3.cmd(&[b"GET", b"db3:foo"]).await,
        Frame::Null,
        "no way out of db 3"
    );

    // Listed in their own database only, by the client's names.
    let mut listed = Vec::new();
    for _ in 0..POLLS {
        listed.clear();
        for node in [2, 3] {
            let mut con = connect(&c, node).await;
            assert_eq!(con.cmd(&[b"SELECT", b"3"]).await, ok());
            listed.extend(full_scan(&mut con, 10, &[]).await);
        }
        if listed == ["foo"] {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert_eq!(listed, ["foo"]);
    assert_eq!(db_size(&c, &[0, 1], "3").await, 1);
    assert_eq!(
        db_size(&c, &[0, 1], "0").await,
        1,
        "database 0 holds its own foo only"
    );

    // A transaction in database 3, all or nothing, invisible to database 0.
    assert_eq!(b3.cmd(&[b"MULTI"]).await, ok());
    assert_eq!(
        b3.cmd(&[b"INCR", b"{t}x"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        b3.cmd(&[b"INCR", b"{t}y"]).await,
        Frame::Simple("QUEUED".into())
    );
    let exec = b3.cmd(&[b"EXEC"]).await;
    assert_eq!(
        exec,
        Frame::Array(vec![Frame::Integer(1), Frame::Integer(1)])
    );
    assert_eq!(a0.cmd(&[b"GET", b"{t}x"]).await, Frame::Null);

    // FLUSHDB empties database 3 alone; FLUSHALL every database.
    assert_eq!(a3.cmd(&[b"FLUSHDB"]).await, ok());
    assert_eq!(b3.cmd(&[b"GET", b"foo"]).await, Frame::Null);
    assert_eq!(b3.cmd(&[b"GET", b"{t}x"]).await, Frame::Null);
    assert_eq!(a0.cmd(&[b"GET", b"foo"]).await, bulk("zero"));
    assert_eq!(a3.cmd(&[b"SET", b"bar", b"3"]).await, ok());
    assert_eq!(a0.cmd(&[b"FLUSHDB"]).await, ok());
    assert_eq!(a0.cmd(&[b"GET", b"foo"]).await, Frame::Null);
    assert_eq!(
        a3.cmd(&[b"GET", b"bar"]).await,
        bulk("3"),
        "FLUSHDB of db 0 keeps db 3"
    );
    assert_eq!(a0.cmd(&[b"FLUSHALL"]).await, ok());
    assert_eq!(a3.cmd(&[b"GET", b"bar"]).await, Frame::Null);

    // Refusals, and RESET back to database 0.
    let e = error(a3.cmd(&[b"SELECT", b"16"]).await);
    assert_eq!(e, "ERR DB index is out of range");
    let e = error(a3.cmd(&[b"SELECT", b"x"]).await);
    assert_eq!(e, "ERR value is not an integer or out of range");
    let e = error(a3.cmd(&[b"MOVE", b"foo", b"0"]).await);
    assert!(
        e.starts_with("ERR MOVE is not allowed in cluster mode: "),
        "{e}"
    );
    let e = error(a3.cmd(&[b"SWAPDB", b"0", b"3"]).await);
    assert!(
        e.starts_with("ERR SWAPDB is not allowed in cluster mode: "),
        "{e}"
    );
    assert_eq!(a3.cmd(&[b"SET", b"baz", b"3"]).await, ok());
    assert_eq!(a3.cmd(&[b"RESET"]).await, Frame::Simple("RESET".into()));
    assert_eq!(
        a3.cmd(&[b"GET", b"baz"]).await,
        Frame::Null,
        "RESET selects database 0"
    );
    c.shutdown().await;
}

/// Lists, sets and sorted sets in cluster mode: one-key commands atomic on a timeline bucket
/// from any node, a command over several keys of one slot one atomic group, and what a
/// cluster node refuses says why: blocking pops, SORT's patterns, an eventual bucket's
/// collection writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_on_ordered_buckets_and_what_cluster_mode_refuses() {
    let c = cluster_with(&[("tl", BucketProps::timeline())]).await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    let ok = |f: Frame| assert_eq!(f, Frame::Simple("OK".into()));
    assert_eq!(
        a.cmd(&[b"RPUSH", b"tl:{q}a", b"x", b"y", b"z"]).await,
        Frame::Integer(3)
    );
    // From the other DC, through the master.
    assert_eq!(
        b.cmd(&[b"LPOP", b"tl:{q}a"]).await,
        Frame::bulk(b"x".to_vec())
    );
    assert_eq!(
        b.cmd(&[b"LMOVE", b"tl:{q}a", b"tl:{q}b", b"LEFT", b"RIGHT"])
            .await,
        Frame::bulk(b"y".to_vec())
    );
    assert_eq!(
        texts(a.cmd(&[b"LRANGE", b"tl:{q}b", b"0", b"-1"]).await),
        ["y"]
    );
    assert_eq!(
        a.cmd(&[b"SADD", b"tl:{s}1", b"m", b"n"]).await,
        Frame::Integer(2)
    );
    assert_eq!(
        a.cmd(&[b"SADD", b"tl:{s}2", b"n", b"o"]).await,
        Frame::Integer(2)
    );
    assert_eq!(
        b.cmd(&[b"SINTERSTORE", b"tl:{s}3", b"tl:{s}1", b"tl:{s}2"])
            .await,
        Frame::Integer(1)
    );
    assert_eq!(texts(a.cmd(&[b"SMEMBERS", b"tl:{s}3"]).await), ["n"]);
    assert_eq!(
        a.cmd(&[b"ZADD", b"tl:{z}1", b"1", b"a", b"2", b"b"]).await,
        Frame::Integer(2)
    );
    assert_eq!(
        b.cmd(&[b"ZUNIONSTORE", b"tl:{z}2", b"2", b"tl:{z}1", b"tl:{z}1"])
            .await,
        Frame::Integer(2)
    );
    assert_eq!(
        texts(
            a.cmd(&[b"ZRANGE", b"tl:{z}2", b"0", b"-1", b"WITHSCORES"])
                .await
        ),
        ["a", "2", "b", "4"]
    );
    // LCS reads two keys of one slot at their master, as one group.
    ok(a.cmd(&[b"SET", b"tl:{l}1", b"ohmytext"]).await);
    ok(a.cmd(&[b"SET", b"tl:{l}2", b"mynewtext"]).await);
    assert_eq!(
        b.cmd(&[b"LCS", b"tl:{l}1", b"tl:{l}2"]).await,
        Frame::bulk(b"mytext".to_vec())
    );
    assert_eq!(
        b.cmd(&[b"LCS", b"tl:{l}1", b"tl:{l}1", b"LEN"]).await,
        Frame::Integer(8)
    );
    ok(a.cmd(&[b"RENAME", b"tl:{z}2", b"tl:{z}3"]).await);
    assert_eq!(a.cmd(&[b"ZCARD", b"tl:{z}3"]).await, Frame::Integer(2));
    assert_eq!(a.cmd(&[b"EXISTS", b"tl:{z}2"]).await, Frame::Integer(0));

    // Refusals with their reasons; nothing changed.
    let e = error(a.cmd(&[b"BLPOP", b"tl:{q}a", b"0"]).await);
    assert!(
        e.contains("does not block on a cluster node") && e.contains("LPOP"),
        "{e}"
    );
    let e = error(a.cmd(&[b"SORT", b"tl:{q}a", b"BY", b"w_*"]).await);
    assert!(
        e.contains("BY option of SORT denied in Cluster mode"),
        "{e}"
    );
    // Bitmaps have no CRDT yet: refused on eventual buckets.
    let e = error(a.cmd(&[b"SETBIT", b"ev", b"7", b"1"]).await);
    assert!(e.contains("eventual"), "{e}");
    assert_eq!(a.cmd(&[b"EXISTS", b"ev"]).await, Frame::Integer(0));
    assert_eq!(
        texts(a.cmd(&[b"LRANGE", b"tl:{q}a", b"0", b"-1"]).await),
        ["z"]
    );
}

/// Polls `c` with `args` until it answers `want` (replication is asynchronous); the last
/// answer otherwise.
async fn converged(c: &mut Raw, args: &[&[u8]], want: &Frame) -> Frame {
    let mut last = Frame::Null;
    for _ in 0..POLLS {
        last = c.cmd(args).await;
        if &last == want {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    last
}

/// Sets and sorted sets on an eventual bucket are observed-remove CRDTs
/// (`meridian_replication::eventual::elements`): members added in both DCs at once are all
/// kept, concurrent ZINCRBYs all count, and what needs one order of the key's writes (SPOP,
/// ZPOPMIN) is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_sorted_sets_hlls_and_lists_on_eventual_buckets_merge_concurrent_writes() {
    let c = cluster_with(&[("tl", BucketProps::timeline())]).await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 3).await);
    assert_eq!(
        a.cmd(&[b"SADD", b"s", b"x", b"y", b"z", b"x"]).await,
        Frame::Integer(3)
    );
    assert_eq!(
        converged(&mut b, &[b"SCARD", b"s"], &Frame::Integer(3)).await,
        Frame::Integer(3)
    );
    assert_eq!(
        b.cmd(&[b"SREM", b"s", b"x", b"nope"]).await,
        Frame::Integer(1)
    );
    assert_eq!(
        converged(&mut a, &[b"SMEMBERS", b"s"], &texts_frame(&["y", "z"])).await,
        texts_frame(&["y", "z"])
    );
    assert_eq!(a.cmd(&[b"TYPE", b"s"]).await, Frame::Simple("set".into()));
    assert_eq!(a.cmd(&[b"SISMEMBER", b"s", b"y"]).await, Frame::Integer(1));

    // Both DCs add members to one set at once: none is lost to a last-writer-wins choice.
    let (mut a2, mut b2) = (connect(&c, 1).await, connect(&c, 2).await);
    let side = |mut con: Raw, prefix: &'static str| async move {
        for i in 0..40 {
            let m = format!("{prefix}{i}");
            assert_eq!(
                con.cmd(&[b"SADD", b"both", m.as_bytes()]).await,
                Frame::Integer(1)
            );
            assert!(matches!(
                con.cmd(&[b"ZINCRBY", b"score", b"1", b"m"]).await,
                Frame::Bulk(_)
            ));
            assert!(matches!(
                con.cmd(&[b"PFADD", b"hll", m.as_bytes()]).await,
                Frame::Integer(_)
            ));
            assert!(matches!(
                con.cmd(&[b"RPUSH", b"list", m.as_bytes()]).await,
                Frame::Integer(_)
            ));
        }
        con
    };
    let (ra, rb) = tokio::join!(
        side(connect(&c, 0).await, "a"),
        side(connect(&c, 3).await, "b")
    );
    drop((ra, rb));
    assert_eq!(
        converged(&mut a2, &[b"SCARD", b"both"], &Frame::Integer(80)).await,
        Frame::Integer(80)
    );
    assert_eq!(
        converged(&mut b2, &[b"ZSCORE", b"score", b"m"], &bulk("80")).await,
        bulk("80")
    );

    // The HLL counts what both DCs added: its registers are those of one HLL of them all.
    let all: Vec<String> = (0..40)
        .flat_map(|i| [format!("a{i}"), format!("b{i}")])
        .collect();
    let mut args: Vec<&[u8]> = vec![b"PFADD", b"tl:hll"];
    args.extend(all.iter().map(|m| m.as_bytes()));
    assert_eq!(a.cmd(&args).await, Frame::Integer(1));
    let want = a.cmd(&[b"PFCOUNT", b"tl:hll"]).await;
    assert_eq!(converged(&mut b2, &[b"PFCOUNT", b"hll"], &want).await, want);
    let Frame::Bulk(raw) = a.cmd(&[b"GET", b"hll"]).await else {
        panic!("an HLL is a string")
    };
    assert!(raw.starts_with(b"HYLL"));
    assert_eq!(a.cmd(&[b"PFADD", b"hll", b"a1"]).await, Frame::Integer(0));
    assert_eq!(
        error(a.cmd(&[b"INCR", b"hll"]).await),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(a.cmd(&[b"PFADD", b"empty"]).await, Frame::Integer(1));
    assert_eq!(
        converged(&mut b, &[b"PFCOUNT", b"empty"], &Frame::Integer(0)).await,
        Frame::Integer(0)
    );
    assert_eq!(a.cmd(&[b"EXISTS", b"empty"]).await, Frame::Integer(1));

    // Both DCs' pushes are all kept, each DC's in its own order, and both DCs show one list.
    let want = Frame::Integer(80);
    assert_eq!(converged(&mut b2, &[b"LLEN", b"list"], &want).await, want);
    assert_eq!(converged(&mut a2, &[b"LLEN", b"list"], &want).await, want);
    let range: &[&[u8]] = &[b"LRANGE", b"list", b"0", b"-1"];
    let shown = a2.cmd(range).await;
    assert_eq!(converged(&mut b2, range, &shown).await, shown);
    let order = texts(shown);
    for prefix in ["a", "b"] {
        let mine: Vec<&String> = order.iter().filter(|m| m.starts_with(prefix)).collect();
        let want: Vec<String> = (0..40).map(|i| format!("{prefix}{i}")).collect();
        assert_eq!(mine, want.iter().collect::<Vec<_>>());
    }
    // List commands answer as Redis does.
    assert_eq!(
        a.cmd(&[b"RPUSH", b"l", b"a", b"b", b"c"]).await,
        Frame::Integer(3)
    );
    assert_eq!(
        a.cmd(&[b"LPUSH", b"l", b"x", b"y"]).await,
        Frame::Integer(5)
    );
    assert_eq!(
        a.cmd(&[b"LINSERT", b"l", b"BEFORE", b"b", b"i"]).await,
        Frame::Integer(6)
    );
    assert_eq!(
        a.cmd(&[b"LSET", b"l", b"0", b"Y"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(a.cmd(&[b"LREM", b"l", b"0", b"c"]).await, Frame::Integer(1));
    let want = texts_frame(&["Y", "x", "a", "i", "b"]);
    assert_eq!(
        converged(&mut b, &[b"LRANGE", b"l", b"0", b"-1"], &want).await,
        want
    );
    assert_eq!(
        a.cmd(&[b"LTRIM", b"l", b"1", b"2"]).await,
        Frame::Simple("OK".into())
    );
    let want = texts_frame(&["x", "a"]);
    assert_eq!(
        converged(&mut b, &[b"LRANGE", b"l", b"0", b"-1"], &want).await,
        want
    );
    assert_eq!(
        a.cmd(&[b"LPUSHX", b"nolist", b"v"]).await,
        Frame::Integer(0)
    );
    assert_eq!(a.cmd(&[b"TYPE", b"l"]).await, Frame::Simple("list".into()));
    let e = error(a.cmd(&[b"LPOP", b"l"]).await);
    assert!(e.contains("eventual"), "{e}");
    assert_eq!(
        a.cmd(&[b"LTRIM", b"l", b"5", b"9"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(a.cmd(&[b"EXISTS", b"l"]).await, Frame::Integer(0));

    // Sorted sets answer as Redis does.
    assert_eq!(
        a.cmd(&[b"ZADD", b"z", b"1", b"a", b"2", b"b", b"3", b"c"])
            .await,
        Frame::Integer(3)
    );
    assert_eq!(
        a.cmd(&[b"ZADD", b"z", b"XX", b"CH", b"5", b"a", b"9", b"nope"])
            .await,
        Frame::Integer(1)
    );
    assert_eq!(
        a.cmd(&[b"ZADD", b"z", b"GT", b"1", b"b"]).await,
        Frame::Integer(0)
    );
    assert_eq!(
        a.cmd(&[b"ZADD", b"z", b"INCR", b"2.5", b"c"]).await,
        bulk("5.5")
    );
    let want = texts_frame(&["b", "2", "a", "5", "c", "5.5"]);
    assert_eq!(
        converged(
            &mut b,
            &[b"ZRANGE", b"z", b"0", b"-1", b"WITHSCORES"],
            &want
        )
        .await,
        want
    );
    assert_eq!(
        b.cmd(&[b"ZREMRANGEBYSCORE", b"z", b"5", b"(6"]).await,
        Frame::Integer(2)
    );
    assert_eq!(
        converged(
            &mut a,
            &[b"ZRANGE", b"z", b"0", b"-1"],
            &texts_frame(&["b"])
        )
        .await,
        texts_frame(&["b"])
    );

    // A geo index is a sorted set: GEOADD from both DCs merges as ZADD does.
    assert_eq!(
        a.cmd(&[b"GEOADD", b"geo", b"13.361389", b"38.115556", b"Palermo"])
            .await,
        Frame::Integer(1)
    );
    assert_eq!(
        b.cmd(&[b"GEOADD", b"geo", b"15.087269", b"37.502669", b"Catania"])
            .await,
        Frame::Integer(1)
    );
    let dist: &[&[u8]] = &[b"GEODIST", b"geo", b"Palermo", b"Catania"];
    assert_eq!(
        converged(&mut a, dist, &bulk("166274.1516")).await,
        bulk("166274.1516")
    );

    // What needs one order of the key's writes is refused, saying why; nothing changed.
    let e = error(a.cmd(&[b"SPOP", b"s"]).await);
    assert!(e.contains("eventual") && e.contains("timeline"), "{e}");
    let e = error(a.cmd(&[b"ZPOPMIN", b"z"]).await);
    assert!(e.contains("eventual"), "{e}");
    assert_eq!(a.cmd(&[b"SCARD", b"s"]).await, Frame::Integer(2));

    // WRONGTYPE every way; EXPIRE keeps a set a set; removing the last member deletes it.
    a.cmd(&[b"SET", b"str", b"v"]).await;
    for args in [
        &[&b"SADD"[..], b"str", b"m"][..],
        &[b"ZADD", b"str", b"1", b"m"],
        &[b"ZADD", b"s", b"1", b"m"],
        &[b"SADD", b"score", b"m"],
        &[b"GET", b"s"],
        &[b"INCR", b"s"],
        &[b"HSET", b"s", b"f", b"v"],
        &[b"PFADD", b"s", b"e"],
        &[b"SADD", b"hll", b"e"],
        &[b"LPUSH", b"s", b"e"],
        &[b"SADD", b"list", b"e"],
    ] {
        let e = error(a.cmd(args).await);
        assert!(e.starts_with("WRONGTYPE"), "{args:?}: {e}");
    }
    assert_eq!(a.cmd(&[b"EXPIRE", b"s", b"100"]).await, Frame::Integer(1));
    assert_eq!(a.cmd(&[b"TYPE", b"s"]).await, Frame::Simple("set".into()));
    assert!(matches!(a.cmd(&[b"TTL", b"s"]).await, Frame::Integer(t) if t > 90));
    assert_eq!(a.cmd(&[b"SADD", b"s", b"w"]).await, Frame::Integer(1));
    assert!(matches!(a.cmd(&[b"TTL", b"s"]).await, Frame::Integer(t) if t > 90));
    assert_eq!(
        a.cmd(&[b"SREM", b"s", b"y", b"z", b"w"]).await,
        Frame::Integer(3)
    );
    assert_eq!(a.cmd(&[b"EXISTS", b"s"]).await, Frame::Integer(0));
    c.shutdown().await;
}

fn texts_frame(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|i| bulk(i)).collect())
}
