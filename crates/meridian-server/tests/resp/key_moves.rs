//! Transactional keys moving between partitions (spec `repartitioning.md` §6) under RESP
//! clients of an embedded 2-DC × 2-node cluster (port 0):
//! - clients on every node keep incrementing keys while they move back and forth between
//!   partition leaders: no client sees an error, no increment is lost or doubled, and
//!   `/metrics` counts the moves (`meridian_txn_keys_moved_total`, the directory gauges);
//! - over a 50 ms WAN, where a move keeps its key frozen for round trips, a client on the
//!   source leader's node is re-run with backoff instead of answered an error;
//! - an interactive transaction that read a key before it moved and writes it after is
//!   refused with `-TRYAGAIN key_moving key=…` — a retryable refusal, never `-MOVED` or a
//!   conflict — and counted in `meridian_txn_key_moving_aborts_total`;
//! - `[txn.planner]` in the node configuration reaches every node
//!   (`meridian_txn_planner_enabled 1`), and with transactions over scattered groups of keys
//!   the claimant plans rounds and moves keys while those transactions go on, all committing.

use super::cluster_mode::connect;
use super::cluster_txn::http;
use super::*;
use bytes::Bytes;
use meridian_core::{NodeId, PartitionId};
use meridian_net::wan::LinkConfig;
use meridian_replication::{BucketProps, EventualNode, TxnProps};
use meridian_server::cluster::{Embedded, EmbeddedConfig};
use meridian_server::config::{NodeConfig, PlannerSection};
use std::collections::BTreeMap;

/// The cluster of `cluster_mode::cluster` with node settings `node`, and a transactional
/// bucket `bank` every member knows.
async fn bank_cluster(node: NodeConfig) -> Embedded {
    let cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::ZERO,
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        node,
        ..EmbeddedConfig::default()
    };
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    c.node(0)
        .set_bucket("bank", BucketProps::transactional(TxnProps::default()))
        .await
        .unwrap();
    for _ in 0..200 {
        if (0..c.members.len()).all(|i| c.node(i).buckets().get("bank").is_some()) {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the bucket did not reach every member");
}

/// A key `{prefix}N` whose transaction leader is node `leader` now.
fn key_led_by(node: &EventualNode, prefix: &str, leader: NodeId) -> Bytes {
    (0..10_000)
        .map(|i| Bytes::from(format!("{prefix}{i}")))
        .find(|k| node.txn_leader(k).1 == leader)
        .expect("some key hashes to every leader")
}

/// A partition whose leader is not `key`'s current leader (the leaders differ, so the move
/// ships the key's versions rather than only changing the directory).
fn elsewhere(node: &EventualNode, key: &[u8], turn: usize) -> PartitionId {
    let (_, leader) = node.txn_leader(key);
    let layout = node.layout();
    let others: Vec<PartitionId> = layout
        .ring()
        .partitions()
        .filter(|&p| layout.replicas(p).first().is_some_and(|&l| l != leader))
        .collect();
    others[turn % others.len()]
}

/// `name value` lines of a node's `/metrics` (label-less series only).
async fn metrics(c: &Embedded, i: usize) -> BTreeMap<String, f64> {
    let (status, body) = http(c.members[i].http.unwrap(), "GET", "/metrics", "").await;
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, v) = l.split_once(' ')?;
            Some((name.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// Sum of a series over every node.
async fn total(c: &Embedded, name: &str) -> f64 {
    let mut sum = 0.0;
    for i in 0..c.members.len() {
        sum += metrics(c, i).await.get(name).copied().unwrap_or_else(|| {
            panic!("node {i} has no {name}");
        });
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_clients_keep_working_while_keys_move() {
    let c = bank_cluster(NodeConfig::default()).await;
    let keys: Vec<Bytes> = (0..6).map(|i| Bytes::from(format!("bank:mv{i}"))).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..c.members.len() {
        let mut con = connect(&c, i).await;
        let (keys, stop) = (keys.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            // Increments acknowledged per key, and every error reply seen.
            let mut done = vec![0i64; keys.len()];
            let mut errors = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let k = (n + i) % keys.len();
                n += 1;
                match con.cmd(&[b"INCR", &keys[k]]).await {
                    Frame::Integer(_) => done[k] += 1,
                    other => errors.push(format!("{other:?}")),
                }
                // A read as well: reads above a frozen key's export timestamp are refused too.
                match con.cmd(&[b"GET", &keys[(k + 1) % keys.len()]]).await {
                    Frame::Bulk(_) | Frame::Null => {}
                    other => errors.push(format!("{other:?}")),
                }
            }
            (done, errors)
        }));
    }
    // Every key moves to another leader's partition three times, while the clients run.
    let mover = c.node(0).clone();
    let mut moved = 0;
    for round in 0..3 {
        let moves: Vec<(Bytes, PartitionId)> = keys
            .iter()
            .enumerate()
            .map(|(j, k)| (k.clone(), elsewhere(&mover, k, round + j)))
            .collect();
        let report = mover.txn_move_keys(moves).await.unwrap();
        assert_eq!(report.cancelled, 0, "{report:?}");
        moved += report.moved;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(moved, 3 * keys.len());
    stop.store(true, Ordering::Relaxed);
    let mut want = vec![0i64; keys.len()];
    for t in clients {
        let (done, errors) = t.await.unwrap();
        assert!(errors.is_empty(), "client-visible errors: {errors:?}");
        for (w, d) in want.iter_mut().zip(done) {
            *w += d;
        }
    }
    // Every acknowledged increment is there, exactly once, read from any node.
    let mut con = connect(&c, 3).await;
    for (k, w) in keys.iter().zip(&want) {
        assert!(*w > 0, "the clients ran during the moves");
        assert_eq!(con.cmd(&[b"GET", k]).await, bulk(&w.to_string()), "{k:?}");
    }
    // The keys live where the directory says, on every node.
    for k in &keys {
        let p = c.node(0).txn_leader(k).0;
        assert!((0..4).all(|i| c.node(i).txn_leader(k).0 == p), "{k:?}");
    }
    let m = metrics(&c, 0).await;
    assert_eq!(m["meridian_txn_keys_moved_total"], moved as f64);
    assert_eq!(m["meridian_txn_moves_cancelled_total"], 0.0);
    assert_eq!(m["meridian_txn_plan_rounds_total"], 0.0, "no planner here");
    assert_eq!(m["meridian_txn_planner_enabled"], 0.0);
    assert!(m["meridian_txn_directory_epoch"] > 0.0, "{m:?}");
    // Moved keys stay in the directory unless a move brought them back to their hash
    // partition; the gauge is each node's copy.
    let dir = c.node(0).meta().key_directory.len() as f64;
    assert_eq!(m["meridian_txn_directory_keys"], dir);
    assert!(total(&c, "meridian_txn_commits_total").await > 0.0);
    eprintln!(
        "increments {}, key_moving refusals retried {}",
        want.iter().sum::<i64>(),
        total(&c, "meridian_txn_key_moving_aborts_total").await
    );
    c.shutdown().await;
}

/// Over a 50 ms WAN a move keeps its key frozen for several round trips, while a client on
/// the source leader's node is refused within microseconds each time: without the front
/// end's backoff its 32 runs would all fall inside the freeze and it would get an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_the_source_leader_rides_out_a_move_over_the_wan() {
    let cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::from_millis(50),
        intra_dc: LinkConfig::ideal(),
        heartbeat: Duration::from_millis(100),
        ..EmbeddedConfig::default()
    };
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    c.node(0)
        .set_bucket("bank", BucketProps::transactional(TxnProps::default()))
        .await
        .unwrap();
    while !(0..4).all(|i| c.node(i).buckets().get("bank").is_some()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A key led by node 1 (DC 0), moved by node 3 (DC 1) to a partition led in DC 1.
    let k = key_led_by(c.node(0), "bank:w", NodeId(1));
    let to = {
        let layout = c.node(0).layout();
        layout
            .ring()
            .partitions()
            .find(|&p| layout.replicas(p).first() == Some(&NodeId(3)))
            .unwrap()
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut con = connect(&c, 0).await;
    let client = {
        let (k, stop) = (k.clone(), stop.clone());
        tokio::spawn(async move {
            let mut done = 0i64;
            while !stop.load(Ordering::Relaxed) {
                match con.cmd(&[b"INCR", &k]).await {
                    Frame::Integer(_) => done += 1,
                    other => panic!("client-visible error while the key moved: {other:?}"),
                }
            }
            (done, con)
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = c
        .node(2)
        .txn_move_keys(vec![(k.clone(), to)])
        .await
        .unwrap();
    assert_eq!(report.moved, 1, "{report:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let (done, mut con) = client.await.unwrap();
    assert_eq!(con.cmd(&[b"GET", &k]).await, bulk(&done.to_string()));
    assert_eq!(c.node(0).txn_leader(&k).1, NodeId(3));
    // The client met the freeze (and was re-run, not answered an error).
    assert!(metrics(&c, 0).await["meridian_txn_key_moving_aborts_total"] > 0.0);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spanning_a_move_gets_tryagain_and_is_counted() {
    let c = bank_cluster(NodeConfig::default()).await;
    let mut a = connect(&c, 1).await;
    assert_eq!(
        a.cmd(&[b"SET", b"bank:hop", b"1"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        a.cmd(&[b"MERIDIAN.BEGIN"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(a.cmd(&[b"GET", b"bank:hop"]).await, bulk("1"));
    // The key moves after the transaction read it at its old partition.
    let k = Bytes::from_static(b"bank:hop");
    let to = elsewhere(c.node(0), &k, 0);
    let report = c.node(0).txn_move_keys(vec![(k, to)]).await.unwrap();
    assert_eq!(report.moved, 1);
    // Its next command touches the key again: the transaction may not use it at two
    // partitions, so it ends with a retryable refusal.
    let Frame::Error(e) = a.cmd(&[b"SET", b"bank:hop", b"2"]).await else {
        panic!("the write must be refused")
    };
    let e = String::from_utf8_lossy(&e).into_owned();
    assert!(
        e.starts_with("TRYAGAIN key_moving key=bank:hop"),
        "a retryable refusal: {e}"
    );
    assert!(e.contains("MERIDIAN.BEGIN again"), "{e}");
    // Nothing applied; the same request run again commits at the key's new leader.
    assert_eq!(a.cmd(&[b"GET", b"bank:hop"]).await, bulk("1"));
    assert_eq!(a.cmd(&[b"INCR", b"bank:hop"]).await, Frame::Integer(2));
    let m = metrics(&c, 1).await;
    assert_eq!(m["meridian_txn_key_moving_aborts_total"], 1.0, "{m:?}");
    assert_eq!(m["meridian_txn_wrong_partition_total"], 0.0);
    assert_eq!(
        c.node(1).txn_leader(b"bank:hop").0,
        to,
        "routed by the directory"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planner_setting_reaches_every_node_and_moves_keys_used_together() {
    let mut node = NodeConfig::default();
    node.txn.planner = PlannerSection {
        enabled: true,
        plan_interval_ms: 1000,
        min_gain: 1,
        ..PlannerSection::default()
    };
    let c = bank_cluster(node).await;
    for i in 0..c.members.len() {
        assert_eq!(metrics(&c, i).await["meridian_txn_planner_enabled"], 1.0);
    }
    // Groups of four keys that hashing scatters over the leaders, each group always used
    // together in one MULTI/EXEC: the planner's reason to move them.
    let group = |g: usize| -> Vec<Vec<u8>> {
        (0..4)
            .map(|j| format!("bank:g{g}-{j}").into_bytes())
            .collect()
    };
    let leaders = |g: usize| -> usize {
        let ls: std::collections::BTreeSet<NodeId> =
            group(g).iter().map(|k| c.node(0).txn_leader(k).1).collect();
        ls.len()
    };
    let scattered = (0..8).filter(|&g| leaders(g) > 1).count();
    assert!(scattered > 0, "hashing scatters some group");
    let mut cons = Vec::new();
    for i in 0..c.members.len() {
        cons.push(connect(&c, i).await);
    }
    // Until a round moved keys (the claimant plans once a second), then 100 transactions
    // more over keys that moved. Bounded: the planner must act within 3000 transactions.
    let mut per_group = [0i64; 8];
    let mut more: Option<u32> = None;
    for n in 0..3000usize {
        if more == Some(0) {
            break;
        }
        let g = n % 8;
        let con = &mut cons[n % 4];
        assert_eq!(con.cmd(&[b"MULTI"]).await, Frame::Simple("OK".into()));
        for k in group(g) {
            assert_eq!(
                con.cmd(&[b"INCR", &k]).await,
                Frame::Simple("QUEUED".into())
            );
        }
        match con.cmd(&[b"EXEC"]).await {
            Frame::Array(r) => assert_eq!(r.len(), 4),
            other => panic!("EXEC failed while keys move: {other:?}"),
        }
        per_group[g] += 1;
        if more.is_none() && n % 50 == 49 && total(&c, "meridian_txn_keys_moved_total").await > 0.0
        {
            more = Some(100);
        }
        more = more.map(|m| m.saturating_sub(1));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let commits: i64 = per_group.iter().sum();
    assert!(
        more.is_some(),
        "the planner moved nothing in {commits} transactions"
    );
    assert!(total(&c, "meridian_txn_plan_rounds_total").await >= 1.0);
    assert!(metrics(&c, 2).await["meridian_txn_directory_keys"] > 0.0);
    // Every transaction committed exactly once: each key counts its group's transactions.
    let mut con = connect(&c, 0).await;
    for (g, want) in per_group.iter().enumerate() {
        for k in group(g) {
            assert_eq!(
                con.cmd(&[b"GET", &k]).await,
                bulk(&want.to_string()),
                "group {g}"
            );
        }
    }
    c.shutdown().await;
}
