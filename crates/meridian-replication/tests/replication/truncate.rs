//! Bucket truncation (`FLUSHALL` in cluster mode, `meridian_replication::truncation`): every
//! bucket type forgets what was written before the flush on every node; writes after it
//! survive; anti-entropy, repairs and a replica that was down during the flush bring nothing
//! back, nor does a clock running ahead of the others', and one running behind loses no
//! write made after the flush; the expiry sweep frees the storage.

use super::*;
use meridian_replication::listing::ListPos;
use meridian_replication::{Dispatch, TxnProps};

const KEYS: usize = 12;

/// Eventual (`k`), timeline (`tl:k`) and transactional (`bank:k`) keys.
fn keys() -> Vec<Bytes> {
    (0..KEYS)
        .flat_map(|i| [format!("k{i}"), format!("tl:k{i}"), format!("bank:k{i}")])
        .map(|k| b(&k))
        .collect()
}

async fn flush_cluster(seed: u64) -> Cluster {
    let c = Cluster::start_with(seed, |cfg| {
        cfg.anti_entropy_interval = Duration::from_millis(500);
        cfg.handoff_interval = Duration::from_millis(500);
    })
    .await;
    c.set_bucket("tl", BucketProps::timeline()).await;
    c.set_bucket("bank", BucketProps::transactional(TxnProps::default()))
        .await;
    c
}

/// Writes every key (value `tag`), a counter and a hash through node 1 and lets them reach
/// every replica.
async fn fill(c: &Cluster, tag: &str) {
    let d = Dispatch::new(c.node(NodeId(1)).clone());
    for k in keys() {
        d.set(&k, b(tag)).await.unwrap();
    }
    d.incr_by(b"ctr", 5).await.unwrap();
    d.hash_update(
        b"h",
        meridian_replication::HashOps::Set(vec![(b("f"), b(tag))]),
    )
    .await
    .unwrap();
    sleep(Duration::from_secs(2)).await;
}

/// Every key each node's dispatch reads, and every key each node lists.
async fn seen(c: &Cluster, nodes: impl Iterator<Item = NodeId>) -> (Vec<String>, Vec<String>) {
    let (mut read, mut listed) = (Vec::new(), Vec::new());
    for n in nodes {
        let d = Dispatch::new(c.node(n).clone());
        for k in keys().into_iter().chain([b("ctr"), b("h")]) {
            if d.get_entry(&k).await.unwrap().is_some() {
                read.push(format!("{n}:{}", String::from_utf8_lossy(&k)));
            }
        }
        let mut at = Some(ListPos::start());
        while let Some(pos) = at {
            let (page, next) = c
                .node(n)
                .list_live_keys(pos, 10_000, &[true; 64], |_| true)
                .await
                .unwrap();
            listed.extend(
                page.into_iter()
                    .map(|(k, _)| format!("{n}:{}", String::from_utf8_lossy(&k))),
            );
            at = next;
        }
    }
    (read, listed)
}

fn all() -> impl Iterator<Item = NodeId> {
    (1..=DCS * PER_DC).map(NodeId)
}

#[tokio::test(start_paused = true)]
async fn a_flush_hides_every_bucket_type_everywhere_and_later_writes_survive() {
    let c = flush_cluster(71).await;
    fill(&c, "old").await;
    let (read, _) = seen(&c, all()).await;
    assert_eq!(read.len(), (3 * KEYS + 2) * 6, "every node reads every key");

    // Flushed from the other DC: back once every node follows the mark.
    let mark = c.node(NodeId(4)).truncate(None).await.unwrap();
    let (read, listed) = seen(&c, all()).await;
    assert!(read.is_empty(), "read after the flush: {read:?}");
    assert!(listed.is_empty(), "listed after the flush: {listed:?}");

    // Writes after the flush are newer than the mark on every node, and CRDTs restart.
    let d = Dispatch::new(c.node(NodeId(2)).clone());
    assert_eq!(
        d.incr_by(b"ctr", 1).await.unwrap(),
        1,
        "the counter restarts"
    );
    d.set(b"k0", b("new")).await.unwrap();
    d.set(b"tl:k0", b("new")).await.unwrap();
    d.set(b"bank:k0", b("new")).await.unwrap();
    // Anti-entropy, repairs and sweeps run for a while: nothing old comes back.
    sleep(Duration::from_secs(5)).await;
    for n in all() {
        let d = Dispatch::new(c.node(n).clone());
        for k in ["k0", "tl:k0", "bank:k0"] {
            assert_eq!(
                d.get(k.as_bytes()).await.unwrap(),
                Some(b("new")),
                "{n} {k}"
            );
        }
        assert_eq!(d.incr_by(b"ctr", 0).await.unwrap(), 1, "{n}");
    }
    let (read, listed) = seen(&c, all()).await;
    let mut read: Vec<&str> = read.iter().map(|k| k.split_once(':').unwrap().1).collect();
    read.sort();
    read.dedup();
    assert_eq!(read, ["bank:k0", "ctr", "k0", "tl:k0"]);
    // A replica lists what it holds; every node lists the transactional key from its leader
    // (asked for every partition here).
    assert_eq!(
        listed.len(),
        3 * 3 + 6,
        "k0, tl:k0, ctr at N = 3 replicas each, bank:k0 at every node: {listed:?}"
    );
    let bank = listed.iter().filter(|k| k.ends_with(":bank:k0")).count();
    assert_eq!(bank, 6, "{listed:?}");

    // The sweep rewrote every stored object: no sibling from before the mark is left.
    for n in all() {
        let (objects, _) = c.node(n).store().objects_after(None, 10_000).unwrap();
        for (k, o) in objects {
            assert!(
                o.siblings().iter().all(|s| s.meta.ts_us > mark),
                "{n} still stores an old sibling of {k:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_down_during_the_flush_brings_nothing_back() {
    let mut c = flush_cluster(72).await;
    fill(&c, "old").await;
    let down = NodeId(2);
    let i = (down.0 - 1) as usize;
    c.node_stops[i].cancel();
    c.net.leave(down);
    let disk = c.engines[i].clone();
    sleep(Duration::from_secs(1)).await;

    c.node(NodeId(5)).truncate(None).await.unwrap();
    let d = Dispatch::new(c.node(NodeId(1)).clone());
    d.set(b"k1", b("after")).await.unwrap();
    d.set(b"tl:k1", b("after")).await.unwrap();

    // Back on its old disk and its first metadata, which knows no flush: it holds every old
    // value, and learns the mark from its peers' heartbeats.
    c.restart_on(down, disk).await;
    sleep(Duration::from_secs(6)).await;
    let (read, listed) = seen(&c, all()).await;
    let mut keys: Vec<&str> = read.iter().map(|k| k.split_once(':').unwrap().1).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys, ["k1", "tl:k1"], "read: {read:?}");
    assert!(
        listed.iter().all(|k| k.ends_with(":k1")),
        "listed: {listed:?}"
    );
    for n in all() {
        let d = Dispatch::new(c.node(n).clone());
        assert_eq!(d.get(b"k1").await.unwrap(), Some(b("after")), "{n}");
        assert_eq!(d.get(b"tl:k1").await.unwrap(), Some(b("after")), "{n}");
    }
}

#[tokio::test(start_paused = true)]
async fn skewed_clocks_keep_no_old_value_and_lose_no_new_one() {
    let c = flush_cluster(73).await;
    let (ahead, behind) = (NodeId(3), NodeId(5));
    let first_is = |n: NodeId, prefix: &str| key_where(&c, prefix, |p| p[0] == n);
    let (old_ahead, new_behind) = (first_is(ahead, "ahead"), first_is(behind, "behind"));
    // Coordinated by the node whose clock runs 3 s ahead: stamped in the others' future.
    c.skew(ahead, 3_000_000);
    c.skew(behind, -3_000_000);
    sleep(Duration::from_secs(1)).await;
    let d = Dispatch::new(c.node(ahead).clone());
    d.set(&old_ahead, b("old")).await.unwrap();
    d.set(&new_behind, b("old")).await.unwrap();
    sleep(Duration::from_secs(1)).await;

    // Asked of a node with a true clock: the mark still covers the value stamped ahead.
    let true_time = c.node(NodeId(1)).clock_now().0;
    let mark = c.node(NodeId(1)).truncate(None).await.unwrap();
    assert!(
        mark > true_time + 2_000_000,
        "the mark is the ahead clock's reading"
    );
    // Written after the flush through the node whose clock is behind the mark: kept.
    let d = Dispatch::new(c.node(behind).clone());
    d.set(&new_behind, b("new")).await.unwrap();
    sleep(Duration::from_secs(3)).await;
    for n in all() {
        let d = Dispatch::new(c.node(n).clone());
        assert_eq!(d.get(&old_ahead).await.unwrap(), None, "{n}");
        assert_eq!(d.get(&new_behind).await.unwrap(), Some(b("new")), "{n}");
    }
}
