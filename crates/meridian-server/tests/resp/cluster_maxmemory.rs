//! `maxmemory` on cluster nodes (issue 36 item 8), over RESP on embedded clusters: CONFIG
//! SET/GET with Redis's names, values and errors; `noeviction` answers Redis's `-OOM` once a
//! replica of the key is full — its own or a peer's, heard through heartbeats — and still
//! serves GET and DEL; `allkeys-lru` evicts through coordinated deletes, after which every
//! replica holds the same keys.

use super::cluster_mode::connect;
use super::*;
use meridian_server::cluster::Embedded;
use meridian_server::config::{MemorySection, MemorySize};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Replication and heartbeats are asynchronous: tests poll this often, this many times.
const POLLS: usize = 400;
const POLL_EVERY: Duration = Duration::from_millis(50);

/// An embedded 1-DC × 3-node cluster (N = 3: every node holds every key), each node with
/// `maxmemory` bytes under `policy`.
async fn cluster(maxmemory: u64, policy: &str) -> Embedded {
    let mut cfg = one_dc_three_nodes();
    cfg.node.memory = MemorySection {
        maxmemory: MemorySize::Bytes(maxmemory),
        maxmemory_policy: policy.into(),
    };
    crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap()
}

async fn config_get(c: &mut Raw, name: &str) -> String {
    match c.cmd(&[b"CONFIG", b"GET", name.as_bytes()]).await {
        Frame::Array(kv) => match &kv[..] {
            [Frame::Bulk(_), Frame::Bulk(v)] => String::from_utf8(v.to_vec()).unwrap(),
            other => panic!("CONFIG GET {name}: {other:?}"),
        },
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

async fn info_field(c: &mut Raw, section: &str, name: &str) -> String {
    let Frame::Bulk(text) = c.cmd(&[b"INFO", section.as_bytes()]).await else {
        panic!("INFO {section}")
    };
    let text = String::from_utf8(text.to_vec()).unwrap();
    text.split("\r\n")
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{name} not in {text}"))
        .to_string()
}

fn is_oom(f: &Frame) -> bool {
    matches!(f, Frame::Error(e) if &e[..] == OOM.as_bytes())
}

fn value(n: usize) -> Vec<u8> {
    vec![b'x'; n]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_config_set_maxmemory_is_accepted_with_redis_replies() {
    let c = cluster(0, "noeviction").await;
    let mut a = connect(&c, 0).await;
    assert_eq!(
        a.cmd(&[b"CONFIG", b"SET", b"maxmemory", b"100mb"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(config_get(&mut a, "maxmemory").await, "104857600");
    assert_eq!(c.node(0).maxmemory(), 100 << 20);
    assert_eq!(
        a.cmd(&[
            b"CONFIG",
            b"SET",
            b"maxmemory",
            b"1gb",
            b"maxmemory-policy",
            b"ALLKEYS-LFU"
        ])
        .await,
        Frame::Simple("OK".into())
    );
    assert_eq!(config_get(&mut a, "maxmemory-policy").await, "allkeys-lfu");
    assert_eq!(
        info_field(&mut a, "memory", "maxmemory").await,
        "1073741824"
    );
    assert_eq!(
        info_field(&mut a, "memory", "maxmemory_human").await,
        "1.00G"
    );
    assert_eq!(
        info_field(&mut a, "memory", "maxmemory_policy").await,
        "allkeys-lfu"
    );
    assert_eq!(info_field(&mut a, "stats", "evicted_keys").await, "0");
    // Redis's errors; nothing applied when one pair is wrong.
    let bad = [
        (
            &[
                &b"maxmemory-policy"[..],
                b"noeviction",
                b"maxmemory",
                b"12qb",
            ][..],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must \
             be a memory value",
        ),
        (
            &[&b"maxmemory-policy"[..], b"allkeys-fifo"][..],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - \
             argument(s) must be one of the following: volatile-lru, allkeys-lru, \
             volatile-lfu, allkeys-lfu, volatile-random, allkeys-random, volatile-ttl, \
             noeviction",
        ),
        (
            &[&b"maxmemory"[..], b"-1"][..],
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must \
             be a memory value",
        ),
    ];
    for (pairs, want) in bad {
        let mut args: Vec<&[u8]> = vec![b"CONFIG", b"SET"];
        args.extend_from_slice(pairs);
        assert_eq!(a.cmd(&args).await, Frame::Error(want.into()), "{pairs:?}");
    }
    assert_eq!(config_get(&mut a, "maxmemory").await, "1073741824");
    assert_eq!(c.node(0).maxmemory_policy().name(), "allkeys-lfu");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_noeviction_answers_oom_once_full_and_still_serves_get_and_del() {
    let c = cluster(64 * 1024, "noeviction").await;
    let (mut a, mut b) = (connect(&c, 0).await, connect(&c, 1).await);
    let mut written = Vec::new();
    let mut refused = false;
    for i in 0..2000 {
        let k = format!("k{i}");
        let r = a.cmd(&[b"SET", k.as_bytes(), &value(1024)]).await;
        if is_oom(&r) {
            refused = true;
            break;
        }
        assert_eq!(r, Frame::Simple("OK".into()), "SET {k}");
        written.push(k);
    }
    assert!(refused, "no -OOM after {} writes of 1 KiB", written.len());
    assert!(written.len() > 10, "{} writes", written.len());
    assert!(c.node(0).used_memory() > 64 * 1024);
    // Well below what is stored, so the DEL below cannot bring a node back under it.
    for i in 0..3 {
        let mut n = connect(&c, i).await;
        assert_eq!(
            n.cmd(&[b"CONFIG", b"SET", b"maxmemory", b"16kb"]).await,
            Frame::Simple("OK".into())
        );
    }
    // Every write command is refused, through any coordinator; reads and deletes are served.
    assert!(is_oom(&b.cmd(&[b"SET", b"another", b"v"]).await));
    assert!(is_oom(
        &a.cmd(&[b"SET", b"another", b"v", b"EX", b"100"]).await
    ));
    assert!(is_oom(&a.cmd(&[b"MSET", b"m1", b"v", b"m2", b"v"]).await));
    assert!(is_oom(&a.cmd(&[b"INCR", b"counter"]).await));
    assert!(is_oom(&a.cmd(&[b"HSET", b"h", b"f", b"v"]).await));
    // HDEL frees memory: served over the limit, as in Redis.
    assert_eq!(a.cmd(&[b"HDEL", b"h", b"f"]).await, Frame::Integer(0));
    assert_eq!(
        b.cmd(&[b"GET", written[1].as_bytes()]).await,
        Frame::Bulk(value(1024).into())
    );
    assert_eq!(
        a.cmd(&[b"DEL", written[2].as_bytes()]).await,
        Frame::Integer(1)
    );
    assert_eq!(a.cmd(&[b"GET", written[2].as_bytes()]).await, Frame::Null);
    // Node 0 alone without a limit still refuses: nodes 1 and 2, replicas of every key,
    // report themselves full in their heartbeats.
    assert_eq!(
        a.cmd(&[b"CONFIG", b"SET", b"maxmemory", b"0"]).await,
        Frame::Simple("OK".into())
    );
    // Their reports come with their next heartbeats (node 0 was refusing for itself).
    let mut refused_for_peers = false;
    for _ in 0..POLLS {
        if c.node(0).peers_memory_full().len() == 2 {
            refused_for_peers = true;
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert!(refused_for_peers, "{:?}", c.node(0).peers_memory_full());
    let r = a.cmd(&[b"SET", b"another", b"v"]).await;
    assert!(is_oom(&r), "{r:?}");
    assert!(is_oom(&a.cmd(&[b"INCR", b"counter"]).await));
    // Once every node has room, writes are served again (after the next heartbeats).
    for i in [1, 2] {
        let mut n = connect(&c, i).await;
        assert_eq!(
            n.cmd(&[b"CONFIG", b"SET", b"maxmemory", b"0"]).await,
            Frame::Simple("OK".into())
        );
    }
    let mut served = false;
    for _ in 0..POLLS {
        let r = a.cmd(&[b"SET", b"another", b"v"]).await;
        if r == Frame::Simple("OK".into()) {
            served = true;
            break;
        }
        assert!(is_oom(&r), "{r:?}");
        tokio::time::sleep(POLL_EVERY).await;
    }
    assert!(served, "writes still refused once every node has room");
    c.shutdown().await;
}

/// The keys node `i` stores with a value (not a tombstone), among `keys`.
fn live_keys(c: &Embedded, i: usize, keys: &[String]) -> Vec<String> {
    keys.iter()
        .filter(|k| {
            c.node(i)
                .store()
                .get(k.as_bytes())
                .unwrap()
                .is_some_and(|o| o.values().next().is_some())
        })
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_allkeys_lru_evicts_and_every_replica_keeps_the_same_keys() {
    let max = 128 * 1024;
    let c = cluster(max, "allkeys-lru").await;
    let mut a = connect(&c, 0).await;
    let keys: Vec<String> = (0..400).map(|i| format!("k{i}")).collect();
    for k in &keys {
        // Eviction runs in the background: a write that outpaces it gets -OOM (the hard
        // ceiling a quarter over the limit) and goes again.
        let mut done = false;
        for _ in 0..POLLS {
            let r = a.cmd(&[b"SET", k.as_bytes(), &value(1024)]).await;
            if r == Frame::Simple("OK".into()) {
                done = true;
                break;
            }
            assert!(is_oom(&r), "SET {k}: {r:?}");
            tokio::time::sleep(POLL_EVERY).await;
        }
        assert!(done, "SET {k} refused for good");
    }
    // Every node comes back within its limit, and the replicas agree on which keys are left.
    let mut agreed = None;
    for _ in 0..POLLS {
        let within = (0..3).all(|i| c.node(i).used_memory() <= max);
        let sets: Vec<_> = (0..3).map(|i| live_keys(&c, i, &keys)).collect();
        if within && sets[0] == sets[1] && sets[1] == sets[2] {
            agreed = Some(sets[0].clone());
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    let left = agreed.expect("replicas did not come to hold the same keys within the limit");
    assert!(
        !left.is_empty() && left.len() < keys.len(),
        "{} left",
        left.len()
    );
    let evicted: u64 = (0..3).map(|i| c.node(i).evicted_keys()).sum();
    assert!(
        evicted as usize >= keys.len() - left.len(),
        "{evicted} evicted"
    );
    assert_eq!(
        info_field(&mut a, "stats", "evicted_keys").await,
        c.node(0).evicted_keys().to_string()
    );
    // What is left reads as written; what was evicted reads as absent.
    let kept = &left[left.len() - 1];
    assert_eq!(
        a.cmd(&[b"GET", kept.as_bytes()]).await,
        Frame::Bulk(value(1024).into())
    );
    let gone = keys.iter().find(|k| !left.contains(k)).unwrap();
    assert_eq!(a.cmd(&[b"GET", gone.as_bytes()]).await, Frame::Null);
    c.shutdown().await;
}
