//! Read load balancing on the embedded cluster (spec `load-balancing.md`): strategies steer
//! one-replica reads away from a slow replica, deferred reads are served once and their
//! copies cancelled, hot keys get extra copies that serve reads and that a write drops before
//! it is acknowledged, and a new root keeps the copies serving.

use super::*;
use meridian_replication::{ServiceModel, Strategy};

/// A bucket whose reads need one replica (R = 1, `read_fanout = quorum`); writes wait for
/// every replica.
fn one_replica_bucket(extra_copies: bool, strategy: Strategy) -> BucketProps {
    let mut props = BucketProps::default();
    props.props.r = Some(Quorum::Count(1));
    props.props.w = Some(Quorum::All);
    props.props.read_fanout = Some(meridian_cluster::ReadFanout::Quorum);
    props.props.replica_selection = Some(strategy);
    props.extra_copies = Some(extra_copies);
    props
}

fn with_strategy(s: Strategy) -> GetOptions {
    get_opts(|p| p.replica_selection = Some(s))
}

/// Reads sent to `peer` by `coord`'s strategies so far.
fn chosen(c: &Cluster, coord: NodeId, peer: NodeId) -> u64 {
    c.node(coord)
        .balance_stats()
        .peers
        .iter()
        .find(|p| p.node == peer)
        .map_or(0, |p| p.chosen)
}

/// Reads `key` from `coord` `rounds` times, `batch` at once, checking the value.
async fn read_batches(
    c: &Cluster,
    coord: NodeId,
    key: &[u8],
    opts: GetOptions,
    rounds: usize,
    batch: usize,
    want: &Bytes,
) {
    for _ in 0..rounds {
        let reads = (0..batch).map(|_| c.node(coord).get(key, opts));
        for r in futures_util::future::join_all(reads).await {
            let r = r.expect("read");
            assert_eq!(r.latest(), Some(want));
        }
    }
}

/// A key whose home replicas in DC 0 are exactly `homes`.
fn key_homed_at(c: &Cluster, prefix: &str, homes: &[NodeId]) -> Vec<u8> {
    key_where(c, prefix, |p| {
        let mut dc0: Vec<NodeId> = p.iter().copied().filter(|n| n.0 <= PER_DC).collect();
        dc0.sort();
        dc0 == homes
    })
}

#[tokio::test(start_paused = true)]
async fn load_aware_strategies_steer_reads_away_from_a_slow_replica() {
    let c = Cluster::start(151, Duration::from_secs(10)).await;
    c.set_bucket("lb", one_replica_bucket(false, Strategy::LocalFirst))
        .await;
    let (slow, fast, coord) = (NodeId(1), NodeId(2), NodeId(3));
    let key = key_homed_at(&c, "lb:k", &[slow, fast]);
    c.node(coord)
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    c.node(slow)
        .set_service_model(ServiceModel::Fixed { us: 40_000 });
    c.node(fast)
        .set_service_model(ServiceModel::Fixed { us: 4_000 });

    let mut shares = Vec::new();
    for s in [
        Strategy::LeastOutstanding,
        Strategy::C3,
        Strategy::DynamicSnitch,
        Strategy::PowerOfD,
    ] {
        let (s0, f0) = (chosen(&c, coord, slow), chosen(&c, coord, fast));
        read_batches(&c, coord, &key, with_strategy(s), 20, 16, &b("v")).await;
        let (ds, df) = (chosen(&c, coord, slow) - s0, chosen(&c, coord, fast) - f0);
        assert!(
            ds + df >= 320,
            "{s}: every read asked one replica ({ds} + {df})"
        );
        let share = ds as f64 / (ds + df) as f64;
        println!(
            "{s}: slow replica got {ds} of {} reads ({share:.2})",
            ds + df
        );
        shares.push((s, share));
    }
    let share = |s: Strategy| shares.iter().find(|x| x.0 == s).unwrap().1;
    // The slow replica serves 10× slower: a load-aware strategy sends it well under half.
    for s in [
        Strategy::LeastOutstanding,
        Strategy::C3,
        Strategy::DynamicSnitch,
        Strategy::PowerOfD,
    ] {
        assert!(
            share(s) < 0.3,
            "{s} sent {:.2} of reads to the slow replica",
            share(s)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn deferred_reads_are_served_by_one_replica_and_cancelled_at_the_other() {
    let c = Cluster::start(152, Duration::from_secs(10)).await;
    c.set_bucket("lb", one_replica_bucket(false, Strategy::LocalFirst))
        .await;
    let (a, bb, coord) = (NodeId(1), NodeId(2), NodeId(3));
    let key = key_homed_at(&c, "lb:d", &[a, bb]);
    c.node(coord)
        .put(&key, b("d"), None, PutOptions::default())
        .await
        .unwrap();
    // The same fixed service time: the two queues pop the same reads at the same instants,
    // so every cancel arrives after the other replica popped the read. The claim token
    // (the default `deferred_claim`) still lets only one of them serve it.
    for n in [a, bb] {
        c.node(n)
            .set_service_model(ServiceModel::Fixed { us: 10_000 });
    }
    for s in [Strategy::Naive, Strategy::Avr] {
        let cancelled0 = c.node(a).balance_stats().cancelled + c.node(bb).balance_stats().cancelled;
        let dup0 = c.node(coord).balance_stats().duplicate_services;
        let (a0, b0) = (chosen(&c, coord, a), chosen(&c, coord, bb));
        read_batches(&c, coord, &key, with_strategy(s), 10, 20, &b("d")).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Enqueued at both candidates every time.
        assert_eq!(chosen(&c, coord, a) - a0, 200, "{s}");
        assert_eq!(chosen(&c, coord, bb) - b0, 200, "{s}");
        let cancelled =
            c.node(a).balance_stats().cancelled + c.node(bb).balance_stats().cancelled - cancelled0;
        let dup = c.node(coord).balance_stats().duplicate_services - dup0;
        println!("{s}: {cancelled} of 200 second copies cancelled or denied, {dup} duplicates");
        assert_eq!(dup, 0, "{s}: a deferred read was served twice");
        assert_eq!(cancelled, 200, "{s}: every read's other copy is dropped");
    }
}

/// Reads `key` from every DC-0 node for `secs` virtual seconds (10 reads per node every
/// 100 ms), checking the value.
async fn hammer(c: &Cluster, key: &[u8], secs: u64, want: &Bytes) {
    for _ in 0..secs * 10 {
        let reads = (1..=PER_DC)
            .flat_map(|n| (0..10).map(move |_| c.node(NodeId(n)).get(key, GetOptions::default())));
        for r in futures_util::future::join_all(reads).await {
            assert_eq!(r.expect("read").latest(), Some(want));
        }
        sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_hot_key_gets_an_extra_copy_that_serves_reads_and_a_write_drops_it_first() {
    hot_key_copy_lifecycle(Strategy::RoundRobin).await;
}

/// Naive reads are enqueued at the copy too; when the copy that claims one is gone (dropped
/// by a write before the coordinator's map says so) the read falls back to a home replica.
#[tokio::test(start_paused = true)]
async fn deferred_reads_of_a_hot_key_fall_back_to_a_home_replica_when_the_copy_is_gone() {
    hot_key_copy_lifecycle(Strategy::Naive).await;
}

async fn hot_key_copy_lifecycle(strategy: Strategy) {
    let c = Cluster::start(153, Duration::from_secs(10)).await;
    c.set_bucket("hot", one_replica_bucket(true, strategy))
        .await;
    let holder = NodeId(3);
    let key = key_homed_at(&c, "hot:k", &[NodeId(1), NodeId(2)]);
    c.node(NodeId(1))
        .put(&key, b("v1"), None, PutOptions::default())
        .await
        .unwrap();
    hammer(&c, &key, 5, &b("v1")).await;
    // The only DC-0 node that is not a home replica holds the one extra copy (n − f = 1).
    assert_eq!(c.node(holder).extra_keys(), vec![key.clone()]);
    let map = c.node(NodeId(2)).extra_map();
    assert_eq!(map.root, NodeId(1), "the DC's lowest id is its root");
    assert_eq!(map.copies, vec![(key.clone(), vec![holder])]);
    let served = c.node(holder).balance_stats().extra_reads;
    assert!(served > 0, "{strategy} sends reads to the copy");
    assert!(!c.node(NodeId(1)).balance_stats().copy_create_ms.is_empty());

    // A write with W = all is acknowledged only after the copy is gone: every read after it
    // sees the new value, from any coordinator. Reads queued at the holder when the write
    // drops its copy miss it and go on to a home replica (slow home replicas: the holder
    // claims the deferred reads first, and its queue still holds reads when the drop comes).
    for n in [NodeId(1), NodeId(2)] {
        c.node(n)
            .set_service_model(ServiceModel::Fixed { us: 100_000 });
    }
    c.node(holder)
        .set_service_model(ServiceModel::Fixed { us: 10_000 });
    let misses = c.node(holder).balance_stats().extra_misses;
    let ctx = c
        .node(NodeId(2))
        .get(&key, GetOptions::default())
        .await
        .unwrap()
        .context();
    let (cr, kr) = (&c, &key);
    let racing = (1..=PER_DC)
        .flat_map(|n| (0..10).map(move |_| cr.node(NodeId(n)).get(kr, GetOptions::default())));
    let racing = futures_util::future::join_all(racing);
    let write = async {
        sleep(Duration::from_millis(3)).await;
        c.node(NodeId(2))
            .put(&key, b("v2"), Some(&ctx), PutOptions::default())
            .await
            .unwrap();
        assert!(
            c.node(holder).extra_keys().is_empty(),
            "dropped before the ack"
        );
    };
    let (reads, ()) = tokio::join!(racing, write);
    for r in reads {
        let v = r.expect("a read racing the write").latest().cloned();
        assert!(v == Some(b("v1")) || v == Some(b("v2")), "{v:?}");
    }
    hammer(&c, &key, 5, &b("v2")).await;
    let missed = c.node(holder).balance_stats().extra_misses - misses;
    println!("{strategy}: {missed} reads missed the dropped copy and fell back");
    assert!(missed > 0, "{strategy}: the fallback was exercised");
    // Still hot: the root makes a new copy, of the new version.
    assert_eq!(c.node(holder).extra_keys(), vec![key.clone()]);
    assert!(c.node(holder).balance_stats().extra_reads > served);
}

#[tokio::test(start_paused = true)]
async fn when_the_root_dies_the_next_lowest_id_takes_over_and_the_copies_keep_serving() {
    let c = Cluster::start(154, Duration::from_secs(10)).await;
    c.set_bucket("hot", one_replica_bucket(true, Strategy::RoundRobin))
        .await;
    let holder = NodeId(3);
    let key = key_homed_at(&c, "hot:r", &[NodeId(1), NodeId(2)]);
    c.node(NodeId(2))
        .put(&key, b("r"), None, PutOptions::default())
        .await
        .unwrap();
    hammer(&c, &key, 5, &b("r")).await;
    assert_eq!(c.node(holder).extra_keys(), vec![key.clone()]);

    // The root (n1, also a home replica) stops.
    c.node_stops[0].cancel();
    c.net.leave(NodeId(1));
    let started = Instant::now();
    let mut took_over = None;
    for _ in 0..40 {
        let reads = [NodeId(2), holder]
            .into_iter()
            .flat_map(|n| (0..10).map(move |_| n))
            .map(|n| c.node(n).get(&key, GetOptions::default()));
        for r in futures_util::future::join_all(reads).await {
            assert_eq!(r.expect("read").latest(), Some(&b("r")));
        }
        if took_over.is_none() && c.node(holder).extra_map().root == NodeId(2) {
            took_over = Some(started.elapsed());
        }
        sleep(Duration::from_millis(100)).await;
    }
    let took_over = took_over.expect("n2 took over as root");
    println!("root failover seen by the holder after {took_over:?}");
    // The detector's verdict plus two periods (P = 1 s).
    assert!(took_over < Duration::from_secs(4), "{took_over:?}");
    // The new root re-made the copy its holder reported (from the surviving home replica).
    let mut remade = false;
    for _ in 0..20 {
        if c.node(NodeId(2)).extra_map().copies == vec![(key.clone(), vec![holder])] {
            remade = true;
            break;
        }
        hammer_from(&c, &[NodeId(2)], &key, &b("r")).await;
    }
    assert!(remade, "{:?}", c.node(NodeId(2)).extra_map());
    let before = c.node(holder).balance_stats().extra_reads;
    hammer_from(&c, &[NodeId(2), holder], &key, &b("r")).await;
    assert!(
        c.node(holder).balance_stats().extra_reads > before,
        "still serving"
    );
}

async fn hammer_from(c: &Cluster, from: &[NodeId], key: &[u8], want: &Bytes) {
    for _ in 0..3 {
        let reads = from
            .iter()
            .flat_map(|&n| (0..10).map(move |_| n))
            .map(|n| c.node(n).get(key, GetOptions::default()));
        for r in futures_util::future::join_all(reads).await {
            assert_eq!(r.expect("read").latest(), Some(want));
        }
        sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn extra_copies_are_refused_on_transactional_buckets() {
    let c = Cluster::start(155, Duration::from_secs(10)).await;
    let mut props = BucketProps::transactional(Default::default());
    props.extra_copies = Some(true);
    let e = c.nodes[0].set_bucket("t", props).await.unwrap_err();
    assert!(e.to_string().contains("extra_copies"), "{e}");
}
