//! Timeline buckets on the embedded cluster (spec `timeline.md`): routing to the master,
//! propagation, the three read modes, test-and-set, inserts through the arbiter, migration,
//! failure behaviour, forced re-master and catch-up.

use super::*;
use meridian_replication::timeline::{Content, Expect, Record, TimelineProps, TlStore, Version};
use meridian_replication::{ReadMode, ReplicationError};

/// A cluster with bucket `tl` of type timeline (`master_timeout_ms` 2 s, T = 3).
async fn timeline_cluster(seed: u64) -> Cluster {
    timeline_cluster_with(seed, |_| {}).await
}

/// [`timeline_cluster`] with every node's configuration changed by `tune`.
async fn timeline_cluster_with(seed: u64, tune: impl Fn(&mut NodeConfig)) -> Cluster {
    let c = Cluster::start_with(seed, |cfg| {
        cfg.handoff_interval = Duration::from_secs(3600);
        tune(cfg);
    })
    .await;
    c.set_bucket(
        "tl",
        BucketProps {
            timeline: TimelineProps {
                master_timeout_ms: 2000,
                ..TimelineProps::default()
            },
            ..BucketProps::timeline()
        },
    )
    .await;
    c
}

fn val(s: &str) -> Content {
    Content::Value(b(s))
}

/// A node of `dc` that is not a replica of `key` (a pure coordinator), if any.
fn coordinator_in(c: &Cluster, key: &[u8], dc: u32) -> Option<NodeId> {
    let prim = c.primaries(key);
    (1..=DCS * PER_DC)
        .map(NodeId)
        .find(|n| dc_of(*n) == DcId(dc) && !prim.contains(n))
}

/// Every primary's record of `key`.
fn records(c: &Cluster, key: &[u8]) -> Vec<Option<Record>> {
    c.primaries(key)
        .into_iter()
        .map(|p| c.node(p).tl_local(key).unwrap())
        .collect()
}

/// Waits (virtual time) until every primary holds the same record of `key`.
async fn converged(c: &Cluster, key: &[u8]) -> Record {
    for _ in 0..600 {
        let rs = records(c, key);
        if rs[0].is_some() && rs.iter().all(|r| r == &rs[0]) {
            return rs[0].clone().unwrap();
        }
        sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "replicas of {:?} did not converge: {:?}",
        String::from_utf8_lossy(key),
        records(c, key)
    );
}

#[tokio::test(start_paused = true)]
async fn writes_go_through_one_master_and_reach_every_replica_in_order() {
    let c = timeline_cluster(11).await;
    let key = key_where(&c, "tl:k", |p| dc_of(p[0]) == DcId(0));
    let arbiter = c.primaries(&key)[0];
    let via = coordinator_in(&c, &key, 0).unwrap_or(NodeId(1));
    // The insert goes to the arbiter, which becomes the master (initial_master default).
    let w1 = c
        .node(via)
        .tl_put(&key, val("v1"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(w1.record.master.node, arbiter);
    assert_eq!(w1.issued_by.node, arbiter);
    assert_eq!(w1.record.ver.seq, 1);
    // Two more writes from both DCs: one sequence, one master.
    let w2 = c
        .node(NodeId(4))
        .tl_put(&key, val("v2"), Expect::Any)
        .await
        .unwrap();
    let w3 = c
        .node(NodeId(2))
        .tl_put(&key, val("v3"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(
        [w2.record.ver.seq, w3.record.ver.seq],
        [2, 3],
        "the master numbers writes in order"
    );
    assert!(w2.remote, "a write from the other DC crosses the WAN");
    let r = converged(&c, &key).await;
    assert_eq!(r.ver, w3.record.ver);
    assert_eq!(r.content, val("v3"));
    // Read modes from every node.
    for n in 1..=6 {
        let node = c.node(NodeId(n));
        let any = node.tl_get(&key, ReadMode::Any).await.unwrap();
        assert_eq!(any.version(), Some(w3.record.ver));
        let latest = node.tl_get(&key, ReadMode::Latest).await.unwrap();
        assert_eq!(latest.served_by, arbiter);
        assert_eq!(latest.value(), Some(&b("v3")));
        let crit = node
            .tl_get(&key, ReadMode::Critical(w2.record.ver))
            .await
            .unwrap();
        assert!(crit.version().unwrap() >= w2.record.ver);
    }
    // Eventual operations refuse timeline buckets, and the reverse.
    let e = c
        .node(NodeId(1))
        .get(&key, GetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "wrong_bucket_type");
    let e = c
        .node(NodeId(1))
        .tl_get(b"plain:k", ReadMode::Any)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "wrong_bucket_type");
    assert_eq!(c.node(NodeId(1)).stats().read_repairs, 0);
}

#[tokio::test(start_paused = true)]
async fn read_latest_sees_a_write_at_once_while_read_any_may_lag() {
    let c = timeline_cluster(12).await;
    let key = key_where(&c, "tl:lag", |p| dc_of(p[0]) == DcId(0));
    let far = c
        .primaries(&key)
        .into_iter()
        .find(|n| dc_of(*n) == DcId(1))
        .unwrap();
    c.node(NodeId(1))
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    let w = c
        .node(NodeId(1))
        .tl_put(&key, val("b"), Expect::Any)
        .await
        .unwrap();
    // Right after the ack the far replica still has the old version (100 ms away)...
    let any = c.node(far).tl_get(&key, ReadMode::Any).await.unwrap();
    assert!(
        any.version().unwrap() < w.record.ver,
        "read_any served the stale local copy"
    );
    // ...but read_critical(w) and read_latest go to the master and see it, one RTT (100 ms
    // in this cluster) later.
    let t0 = Instant::now();
    let crit = c
        .node(far)
        .tl_get(&key, ReadMode::Critical(w.record.ver))
        .await
        .unwrap();
    assert_eq!(crit.version(), Some(w.record.ver));
    assert!(crit.remote);
    assert!(t0.elapsed() >= Duration::from_millis(100));
    let latest = c.node(far).tl_get(&key, ReadMode::Latest).await.unwrap();
    assert_eq!(latest.value(), Some(&b("b")));
    // Once propagated, read_critical is served locally.
    converged(&c, &key).await;
    let crit = c
        .node(far)
        .tl_get(&key, ReadMode::Critical(w.record.ver))
        .await
        .unwrap();
    assert!(!crit.remote);
    assert_eq!(crit.served_by, far);
}

#[tokio::test(start_paused = true)]
async fn three_writes_from_the_other_dc_move_the_master_there() {
    let c = timeline_cluster(13).await;
    let key = key_where(&c, "tl:mig", |p| dc_of(p[0]) == DcId(0));
    c.node(NodeId(1))
        .tl_put(&key, val("home"), Expect::Any)
        .await
        .unwrap();
    let first_dc1 = c
        .primaries(&key)
        .into_iter()
        .find(|n| dc_of(*n) == DcId(1))
        .unwrap();
    let mut last = None;
    for i in 0..3 {
        let w = c
            .node(NodeId(5))
            .tl_put(&key, val(&format!("away{i}")), Expect::Any)
            .await
            .unwrap();
        assert!(w.remote, "write {i} is served by the dc0 master");
        last = Some(w);
    }
    let last = last.unwrap();
    assert_eq!(
        last.record.master.node, first_dc1,
        "the third write carries the migration"
    );
    let migrations: u64 = c.nodes.iter().map(|n| n.tl_stats().migrations).sum();
    assert_eq!(migrations, 1);
    // The next write from dc1 is local; one from dc0 is now remote, and the hint of a
    // coordinator that still believes the old master costs one forward.
    converged(&c, &key).await;
    let w = c
        .node(NodeId(5))
        .tl_put(&key, val("local"), Expect::Any)
        .await
        .unwrap();
    assert!(!w.remote);
    assert_eq!(w.issued_by.node, first_dc1);
    let w = c
        .node(NodeId(1))
        .tl_put(&key, val("from0"), Expect::Any)
        .await
        .unwrap();
    assert!(w.remote);
    // The new master's first write opened a new generation (it did not issue the record it
    // was handed during this run); the dc0 write follows in it.
    assert!(w.record.ver.generation > last.record.ver.generation);
    assert_eq!(w.record.ver.seq, 2);
}

#[tokio::test(start_paused = true)]
async fn the_new_master_waits_for_the_hand_over_instead_of_bouncing() {
    let c = timeline_cluster(14).await;
    let key = key_where(&c, "tl:hand", |p| dc_of(p[0]) == DcId(0));
    let old = c.primaries(&key)[0];
    c.node(old)
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    // Migrate to dc1, then immediately write from dc0 through a node whose replica still
    // names the old master: the old master forwards with `await`, the new one waits for
    // the migration record instead of refusing.
    for i in 0..3 {
        c.node(NodeId(4))
            .tl_put(&key, val(&format!("m{i}")), Expect::Any)
            .await
            .unwrap();
    }
    let w = c
        .node(old)
        .tl_put(&key, val("after"), Expect::Any)
        .await
        .unwrap();
    assert_ne!(w.issued_by.node, old);
    assert_eq!(dc_of(w.issued_by.node), DcId(1));
    let r = converged(&c, &key).await;
    assert_eq!(r.content, val("after"));
}

#[tokio::test(start_paused = true)]
async fn test_and_set_lets_exactly_one_of_concurrent_writers_win() {
    let c = timeline_cluster(15).await;
    let key = key_where(&c, "tl:tas", |_| true);
    let base = c
        .node(NodeId(1))
        .tl_put(&key, val("0"), Expect::Any)
        .await
        .unwrap();
    let v = base.record.ver;
    let calls = (1..=6).map(|n| {
        let node = c.node(NodeId(n)).clone();
        let key = key.clone();
        async move {
            node.tl_put(&key, val(&format!("by{n}")), Expect::Version(v))
                .await
        }
    });
    let results = futures_util::future::join_all(calls).await;
    let wins: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(wins.len(), 1, "{results:?}");
    let winner = wins[0].record.ver;
    for r in &results {
        if let Err(e) = r {
            assert_eq!(
                e,
                &ReplicationError::VersionMismatch {
                    current: Some(winner)
                }
            );
        }
    }
    // Insert-if-absent over a live record: already_exists.
    let e = c
        .node(NodeId(2))
        .tl_put(&key, val("x"), Expect::Absent)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "already_exists");
    // TAS on an absent key: version_mismatch with no current version.
    let e = c
        .node(NodeId(2))
        .tl_put(b"tl:never", val("x"), Expect::Version(v))
        .await
        .unwrap_err();
    assert_eq!(e, ReplicationError::VersionMismatch { current: None });
}

#[tokio::test(start_paused = true)]
async fn concurrent_inserts_from_both_dcs_make_one_generation() {
    let c = timeline_cluster(16).await;
    let key = key_where(&c, "tl:ins", |_| true);
    let calls = (1..=6).map(|n| {
        let node = c.node(NodeId(n)).clone();
        let key = key.clone();
        async move {
            node.tl_put(&key, val(&format!("i{n}")), Expect::Absent)
                .await
        }
    });
    let results = futures_util::future::join_all(calls).await;
    let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert_eq!(e.code(), "already_exists");
        }
    }
    let r = converged(&c, &key).await;
    assert_eq!(r.ver, ok[0].record.ver);
    // Plain concurrent writes of a fresh key also share one generation.
    let key2 = key_where(&c, "tl:ins2", |_| true);
    let calls = (1..=6).map(|n| {
        let node = c.node(NodeId(n)).clone();
        let key = key2.clone();
        async move { node.tl_put(&key, val(&format!("w{n}")), Expect::Any).await }
    });
    let results = futures_util::future::join_all(calls).await;
    let vers: Vec<Version> = results
        .iter()
        .map(|r| r.as_ref().unwrap().record.ver)
        .collect();
    assert!(
        vers.iter().all(|v| v.generation == vers[0].generation),
        "{vers:?}"
    );
    let mut seqs: Vec<u64> = vers.iter().map(|v| v.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
}

#[tokio::test(start_paused = true)]
async fn deletes_are_writes_and_a_reinsert_starts_a_new_generation() {
    let c = timeline_cluster(17).await;
    let key = key_where(&c, "tl:del", |_| true);
    let w = c
        .node(NodeId(1))
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    let d = c
        .node(NodeId(4))
        .tl_put(&key, Content::Tombstone, Expect::Any)
        .await
        .unwrap();
    assert_eq!(d.record.ver.seq, w.record.ver.seq + 1);
    let got = c
        .node(NodeId(2))
        .tl_get(&key, ReadMode::Latest)
        .await
        .unwrap();
    assert!(got.value().is_none());
    assert_eq!(got.version(), Some(d.record.ver));
    let again = c
        .node(NodeId(5))
        .tl_put(&key, val("b"), Expect::Absent)
        .await
        .unwrap();
    assert!(again.record.ver.generation > w.record.ver.generation);
    assert_eq!(again.record.ver.seq, 1);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_master_fails_writes_and_read_latest_but_not_read_any() {
    let c = timeline_cluster(18).await;
    let key = key_where(&c, "tl:part", |p| dc_of(p[0]) == DcId(0));
    let w = c
        .node(NodeId(1))
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    let far = c
        .primaries(&key)
        .into_iter()
        .find(|n| dc_of(*n) == DcId(1))
        .unwrap();
    c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    // Before the detector notices: the request times out after master_timeout_ms.
    let t0 = Instant::now();
    let e = c
        .node(far)
        .tl_put(&key, val("b"), Expect::Any)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "master_unavailable", "{e}");
    assert!(e.to_string().contains(&format!("dc={}", DcId(0))), "{e}");
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // Once the detector marks the master down, failures are immediate.
    sleep(Duration::from_secs(5)).await;
    let t0 = Instant::now();
    let e = c
        .node(far)
        .tl_get(&key, ReadMode::Latest)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "master_unavailable");
    assert!(t0.elapsed() < Duration::from_millis(50));
    let e = c
        .node(far)
        .tl_get(
            &key,
            ReadMode::Critical(Version {
                seq: w.record.ver.seq + 1,
                ..w.record.ver
            }),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "stale_version_unavailable");
    // read_any and a fresh-enough read_critical keep working.
    let any = c.node(far).tl_get(&key, ReadMode::Any).await.unwrap();
    assert_eq!(any.version(), Some(w.record.ver));
    let crit = c
        .node(far)
        .tl_get(&key, ReadMode::Critical(w.record.ver))
        .await
        .unwrap();
    assert_eq!(crit.version(), Some(w.record.ver));
    // The master's side goes on; after the heal the far replica catches up by itself.
    let w2 = c
        .node(NodeId(1))
        .tl_put(&key, val("c"), Expect::Any)
        .await
        .unwrap();
    c.wan.heal_all();
    let r = converged(&c, &key).await;
    assert_eq!(r.ver, w2.record.ver);
}

#[tokio::test(start_paused = true)]
async fn a_forced_re_master_fences_the_cut_off_master() {
    let c = timeline_cluster(19).await;
    let key = key_where(&c, "tl:force", |p| dc_of(p[0]) == DcId(0));
    let old = c.primaries(&key)[0];
    c.node(old)
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    sleep(Duration::from_secs(5)).await;
    // The cut-off master keeps accepting writes in its DC: these will be lost.
    let lost = c
        .node(old)
        .tl_put(&key, val("lost"), Expect::Any)
        .await
        .unwrap();
    let forced = c
        .node(NodeId(5))
        .tl_force_master(&key, DcId(1))
        .await
        .unwrap();
    assert_eq!(dc_of(forced.record.master.node), DcId(1));
    assert_eq!(forced.record.ver.mepoch, 1);
    let w = c
        .node(NodeId(5))
        .tl_put(&key, val("new"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(w.issued_by.node, forced.record.master.node);
    // The old master deletes and re-inserts (a new generation in its old epoch): fenced too.
    c.node(old)
        .tl_put(&key, Content::Tombstone, Expect::Any)
        .await
        .unwrap();
    let reinsert = c
        .node(old)
        .tl_put(&key, val("again"), Expect::Any)
        .await
        .unwrap();
    assert!(
        reinsert.record.ver > w.record.ver,
        "plain version order would let it win"
    );
    c.wan.heal_all();
    let r = converged(&c, &key).await;
    assert_eq!(r.content, val("new"));
    assert!(r.ver.precedence() > lost.record.ver.precedence());
    let fenced: u64 = c.nodes.iter().map(|n| n.tl_stats().fenced).sum();
    assert!(fenced > 0);
    // The old master stepped down: its writes now go to the new one.
    let w = c
        .node(old)
        .tl_put(&key, val("later"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(w.issued_by.node, forced.record.master.node);
    // Forcing to a DC without a replica holding the record is refused with a reason.
    let e = c
        .node(NodeId(1))
        .tl_force_master(b"tl:nothing-here", DcId(1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "force_master_refused");
}

#[tokio::test(start_paused = true)]
async fn a_wiped_replica_catches_up_by_version() {
    let mut c = timeline_cluster(20).await;
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("tl:cu{i}").into_bytes()).collect();
    for (i, k) in keys.iter().enumerate() {
        c.node(NodeId(1 + (i as u32 % 6)))
            .tl_put(k, val(&format!("x{i}")), Expect::Any)
            .await
            .unwrap();
    }
    sleep(Duration::from_secs(1)).await;
    c.restart_wiped(NodeId(5)).await;
    assert!(keys.iter().all(|k| !c.primaries(k).contains(&NodeId(5))
        || c.node(NodeId(5)).tl_local(k).unwrap().is_none()));
    // Catch-up rounds (every 10 s, one page per peer) restore every record it replicates.
    for k in &keys {
        converged(&c, k).await;
    }
    assert!(
        c.node(NodeId(5)).tl_stats().caught_up > 0
            || c.nodes.iter().map(|n| n.tl_stats().caught_up).sum::<u64>() > 0
    );
}

#[tokio::test(start_paused = true)]
async fn a_restarted_master_that_lost_its_tail_never_reissues_a_version() {
    let mut c = timeline_cluster(21).await;
    let key = key_where(&c, "tl:tail", |p| dc_of(p[0]) == DcId(0));
    let master = c.primaries(&key)[0];
    let old = c
        .node(master)
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    let replicated = c
        .node(master)
        .tl_put(&key, val("b"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    // Cut off, the master acknowledges "c", which reaches nobody...
    c.wan.isolate(master);
    let unreplicated = c
        .node(master)
        .tl_put(&key, val("c"), Expect::Any)
        .await
        .unwrap();
    // ...then crashes, and its disk kept only "a" (an un-synced tail lost).
    let disk = Arc::new(FlakyEngine::default());
    TlStore::new(disk.clone(), Arc::new(TokioClock::new(Timestamp(1))))
        .apply(&key, &old.record)
        .unwrap();
    // No catch-up rounds on the restarted node: the confirmation alone must do it.
    c.configs[(master.0 - 1) as usize].tl_sync_interval = Duration::ZERO;
    c.restart_on(master, disk).await;
    c.wan.heal_all();
    c.settle().await;
    assert_eq!(
        c.node(master).tl_local(&key).unwrap().unwrap().ver,
        old.record.ver
    );
    // Its first master action confirms with the peers, so it starts from "b", not "a" (a
    // test-and-set on "b" succeeds); and it opens a new generation, so "c"'s version is
    // never issued again.
    let w = c
        .node(master)
        .tl_put(&key, val("d"), Expect::Version(replicated.record.ver))
        .await
        .unwrap();
    assert_eq!(w.issued_by.node, master);
    assert!(w.record.ver > replicated.record.ver);
    assert!(w.record.ver.generation > unreplicated.record.ver.generation);
    let r = converged(&c, &key).await;
    assert_eq!(r.content, val("d"));
    let forks: u64 = c.nodes.iter().map(|n| n.tl_stats().forks).sum();
    assert_eq!(forks, 0);
}

#[tokio::test(start_paused = true)]
async fn a_wiped_arbiter_confirms_with_its_peers_before_admitting_an_insert() {
    let mut c = timeline_cluster(23).await;
    let key = key_where(&c, "tl:wipe", |p| dc_of(p[0]) == DcId(0));
    let arbiter = c.primaries(&key)[0];
    let other = c.primaries(&key)[1];
    c.node(other)
        .tl_put(&key, val("live"), Expect::Any)
        .await
        .unwrap();
    let live = converged(&c, &key).await;
    // The master (the arbiter) loses its disk; it comes back empty.
    c.configs[(arbiter.0 - 1) as usize].tl_sync_interval = Duration::ZERO;
    c.restart_wiped(arbiter).await;
    c.settle().await;
    assert!(c.node(arbiter).tl_local(&key).unwrap().is_none());
    // Insert-if-absent through it must still see the live record: already_exists.
    let e = c
        .node(arbiter)
        .tl_put(&key, val("dup"), Expect::Absent)
        .await
        .unwrap_err();
    assert_eq!(e, ReplicationError::AlreadyExists { current: live.ver });
    let latest = c.node(other).tl_get(&key, ReadMode::Latest).await.unwrap();
    assert_eq!(latest.value(), Some(&b("live")));
}

#[tokio::test(start_paused = true)]
async fn a_hint_fresher_than_the_new_master_waits_there_instead_of_bouncing() {
    let c = timeline_cluster(22).await;
    // A key mastered in dc0 with a dc1 node that is not one of its replicas.
    let key = (0..10_000)
        .map(|i| format!("tl:fresh{i}").into_bytes())
        .find(|k| dc_of(c.primaries(k)[0]) == DcId(0) && coordinator_in(&c, k, 1).is_some())
        .unwrap();
    let via = coordinator_in(&c, &key, 1).unwrap();
    let old_master = c.primaries(&key)[0];
    let new_master = c
        .primaries(&key)
        .into_iter()
        .find(|n| dc_of(*n) == DcId(1))
        .unwrap();
    c.node(NodeId(1))
        .tl_put(&key, val("home"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    // The old master's records reach the new one late (2 s RTT on that link alone), so the
    // reply naming the new master reaches the coordinator before the hand-over record.
    c.wan
        .set_node_link(
            old_master,
            new_master,
            LinkConfig::wan(Duration::from_secs(2), 0.0),
        )
        .unwrap();
    let mut last = None;
    for i in 0..3 {
        if i == 2 {
            // The write that moves the mastership: the coordinator's own hand-over to the
            // new master is lost too (a cut link), so the new master learns of its
            // mastership only from a later request.
            c.wan.cut(Scope::Node(via), Scope::Node(new_master));
        }
        last = Some(
            c.node(via)
                .tl_put(&key, val(&format!("m{i}")), Expect::Any)
                .await
                .unwrap(),
        );
    }
    let migrated = last.unwrap();
    assert_eq!(migrated.record.master.node, new_master);
    assert!(c.node(new_master).tl_local(&key).unwrap().unwrap().ver < migrated.record.ver);
    c.wan.heal(Scope::Node(via), Scope::Node(new_master));
    // The new master waits for that record instead of forwarding to the old master.
    let w = c
        .node(via)
        .tl_put(&key, val("next"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(w.issued_by.node, new_master);
    assert_eq!(c.node(new_master).tl_stats().wrong_master_forwards, 0);
    assert!(w.record.ver > migrated.record.ver);
}

#[tokio::test(start_paused = true)]
async fn a_duplicated_write_request_is_applied_once() {
    let c = timeline_cluster(24).await;
    let key = key_where(&c, "tl:dup", |p| dc_of(p[0]) == DcId(0));
    let master = c.primaries(&key)[0];
    let via = (1..=DCS * PER_DC)
        .map(NodeId)
        .find(|n| *n != master && dc_of(*n) == DcId(0))
        .unwrap();
    let first = c
        .node(via)
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    // Every message from the coordinator to the master arrives twice (datagram delivery).
    c.wan.set_mode(meridian_net::wan::DeliveryMode::Datagram);
    c.wan
        .set_node_link(
            via,
            master,
            LinkConfig::wan(Duration::from_millis(2), 0.0).with_duplicate(1.0),
        )
        .unwrap();
    let w = c
        .node(via)
        .tl_put(&key, val("b"), Expect::Any)
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    let held = c.node(master).tl_local(&key).unwrap().unwrap();
    assert_eq!(held.ver, w.record.ver, "one version issued for one write");
    assert_eq!(w.record.ver.seq, first.record.ver.seq + 1);
}

#[tokio::test(start_paused = true)]
async fn a_replica_stopped_for_ten_thousand_writes_catches_up_and_never_goes_back() {
    let mut c = timeline_cluster(25).await;
    // Keys mastered in dc0 with a replica on n5 (dc1), which will be down.
    let down = NodeId(5);
    let keys: Vec<Vec<u8>> = (0..10_000)
        .map(|i| format!("tl:long{i}").into_bytes())
        .filter(|k| c.primaries(k).contains(&down) && dc_of(c.primaries(k)[0]) == DcId(0))
        .take(50)
        .collect();
    for k in &keys {
        c.node(NodeId(1))
            .tl_put(k, val("0"), Expect::Any)
            .await
            .unwrap();
    }
    for k in &keys {
        converged(&c, k).await;
    }
    let before: Vec<Version> = keys
        .iter()
        .map(|k| c.node(down).tl_local(k).unwrap().unwrap().ver)
        .collect();
    // n5 stops (its disk survives); 10^4 writes go on without it.
    let disk = c.engines[(down.0 - 1) as usize].clone();
    c.node_stops[(down.0 - 1) as usize].cancel();
    c.net.leave(down);
    let mut last = Vec::new();
    for round in 0..200 {
        last.clear();
        for k in &keys {
            let w = c
                .node(NodeId(2))
                .tl_put(k, val(&format!("{round}")), Expect::Any)
                .await
                .unwrap();
            last.push(w.record.ver);
        }
    }
    // Back with what it had: it resumes from its disk and converges, never going back.
    c.restart_on(down, disk).await;
    for (i, k) in keys.iter().enumerate() {
        let r = converged(&c, k).await;
        assert_eq!(r.ver, last[i]);
        assert!(r.ver > before[i]);
        assert_eq!(r.content, val("199"));
    }
    assert_eq!(c.node(down).tl_stats().forks, 0);
}

/// The dispatch facade reads the bucket type and picks the protocol: the same calls serve
/// an eventual and a timeline key, and what only the other type understands is refused
/// with the facade's `wrong_bucket_type` / `unsupported`, writing nothing.
#[tokio::test(start_paused = true)]
async fn the_dispatch_facade_picks_the_protocol_and_refuses_by_bucket_type() {
    use meridian_cluster::Props;
    use meridian_replication::{
        DeleteOpts, Deleted, Dispatch, ErrorClass, Read, ReadOpts, WriteOpts, Written,
    };
    let c = timeline_cluster(41).await;
    let d = Dispatch::new(c.node(NodeId(1)).clone());
    let (ev, tl) = (&b"plain:k"[..], &b"tl:k"[..]);

    // The Redis view: the same calls on both types.
    for key in [ev, tl] {
        assert_eq!(d.get(key).await.unwrap(), None);
        d.set(key, b("v1")).await.unwrap();
        d.set(key, b("v2")).await.unwrap();
        assert_eq!(d.get(key).await.unwrap(), Some(b("v2")));
        assert!(d.exists(key).await.unwrap());
    }
    assert!(matches!(
        d.read(ev, ReadOpts::Default).await.unwrap(),
        Read::Eventual(_)
    ));
    let Read::Timeline(got) = d.read(tl, ReadOpts::Default).await.unwrap() else {
        panic!("a timeline read")
    };
    let ver = got.version().unwrap();
    // Versions and contexts go to their own protocol.
    let Written::Timeline(w) = d
        .write(tl, b("v3"), WriteOpts::Timeline(Expect::Version(ver)))
        .await
        .unwrap()
    else {
        panic!("a timeline write")
    };
    assert!(w.record.ver > ver);
    assert!(matches!(
        d.write(ev, b("v3"), WriteOpts::Default).await.unwrap(),
        Written::Eventual(_)
    ));
    // A read-modify-write: a test-and-set at the master on timeline, a write with the
    // context it read on eventual.
    let put_if_absent = |old: Option<meridian_replication::Entry>, _| match old {
        Some(_) => (None, false),
        None => (Some(Some(meridian_replication::Entry::new(b("x")))), true),
    };
    assert!(!d.update(tl, put_if_absent).await.unwrap());
    assert!(d.update(b"tl:new", put_if_absent).await.unwrap());
    assert_eq!(d.get(b"tl:new").await.unwrap(), Some(b("x")));
    assert!(!d.update(ev, put_if_absent).await.unwrap());
    let e = d.refuse(ev, "SETNX", ": not atomic");
    assert_eq!(e.code(), "unsupported");
    assert_eq!(
        e.to_string(),
        "SETNX is not supported on eventual buckets: not atomic"
    );

    // Refusals by bucket type, all bad requests.
    let quorum = Props::default();
    let refusals = [
        d.read(ev, ReadOpts::Mode(ReadMode::Latest))
            .await
            .unwrap_err(),
        d.read(tl, ReadOpts::Quorum(quorum)).await.unwrap_err(),
        d.write(ev, b("x"), WriteOpts::Timeline(Expect::Absent))
            .await
            .unwrap_err(),
        d.write(
            tl,
            b("x"),
            WriteOpts::Eventual {
                context: None,
                props: quorum,
            },
        )
        .await
        .unwrap_err(),
        d.delete(ev, DeleteOpts::Timeline(Expect::Version(ver)))
            .await
            .unwrap_err(),
        d.delete(
            tl,
            DeleteOpts::Eventual {
                context: Some(b"00"),
                props: quorum,
            },
        )
        .await
        .unwrap_err(),
    ];
    for (i, e) in refusals.iter().enumerate() {
        assert_eq!(e.code(), "wrong_bucket_type", "{i}: {e}");
        assert_eq!(e.class(), ErrorClass::BadRequest);
        let want = if i % 2 == 0 { "eventual" } else { "timeline" };
        assert!(e.to_string().contains(&format!(" is {want}: ")), "{i}: {e}");
    }
    // Nothing the refusals carried was written.
    assert_eq!(d.get(tl).await.unwrap(), Some(b("v3")));
    assert_eq!(d.get(ev).await.unwrap(), Some(b("v3")));

    // Plain deletes on both: the second finds nothing.
    for key in [ev, tl] {
        assert!(d.del(key).await.unwrap());
        assert!(!d.del(key).await.unwrap(), "{key:?}");
        assert!(matches!(
            d.delete(key, DeleteOpts::Plain).await.unwrap(),
            Deleted::Nothing
        ));
        assert_eq!(d.get(key).await.unwrap(), None);
    }
}

/// Expiry is part of the stored value on both types: an expired value is invisible to every
/// read of the Redis view at once, and to the full reads (it shows as deleted).
#[tokio::test(start_paused = true)]
async fn an_expired_value_is_invisible_at_once_on_both_bucket_types() {
    use meridian_replication::{DeleteOpts, Deleted, Dispatch, Entry, GetResult, Read, ReadOpts};
    let c = timeline_cluster(43).await;
    let d = Dispatch::new(c.node(NodeId(1)).clone());
    for key in [&b"plain:e"[..], b"tl:e"] {
        let now = c.node(NodeId(1)).clock_now().0;
        let soon = Entry {
            data: b("v"),
            expiry: Some(now + 2_000_000),
            kind: Default::default(),
        };
        d.store(key, soon.clone()).await.unwrap();
        // Written on node 1, read through node 4 in the other DC: the expiry travelled.
        let other = Dispatch::new(c.node(NodeId(4)).clone());
        let mut seen = None;
        for _ in 0..50 {
            seen = other.get_entry(key).await.unwrap();
            if seen.is_some() {
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(seen, Some(soon), "{key:?}");
        sleep(Duration::from_secs(3)).await;
        assert_eq!(d.get(key).await.unwrap(), None, "{key:?}");
        assert!(!d.exists(key).await.unwrap());
        match d.read(key, ReadOpts::Default).await.unwrap() {
            Read::Eventual(got) => assert!(matches!(got, GetResult::NotFound { .. })),
            Read::Timeline(got) => {
                assert_eq!(got.value(), None);
                assert!(
                    got.version().is_some(),
                    "an expired record keeps its version"
                );
            }
            Read::Transactional { .. } => panic!("not transactional"),
        }
        // DEL of an expired key deletes nothing, as on Redis.
        assert!(matches!(
            d.delete(key, DeleteOpts::Plain).await.unwrap(),
            Deleted::Nothing
        ));
        // A read-modify-write sees it absent.
        assert!(d.update(key, |old, _| (None, old.is_none())).await.unwrap());
    }
}

/// The expiry sweep deletes expired values for good on both types (a tombstone through the
/// key's protocol), and leaves live ones alone.
#[tokio::test(start_paused = true)]
async fn the_expiry_sweep_tombstones_expired_values_on_both_bucket_types() {
    use meridian_replication::{Dispatch, Entry, GetOptions, GetResult};
    let c = timeline_cluster(46).await;
    let d = Dispatch::new(c.node(NodeId(2)).clone());
    let now = c.node(NodeId(1)).clock_now().0;
    let entry = |secs: u64| Entry {
        data: b("v"),
        expiry: Some(now + secs * 1_000_000),
        kind: Default::default(),
    };
    for key in [&b"plain:gone"[..], b"tl:gone"] {
        d.store(key, entry(1)).await.unwrap();
    }
    for key in [&b"plain:kept"[..], b"tl:kept"] {
        d.store(key, entry(3600)).await.unwrap();
    }
    let raw_eventual = |n: u32, key: &'static [u8]| {
        let node = c.node(NodeId(n)).clone();
        async move {
            node.get(
                key,
                GetOptions {
                    deleted_context: true,
                    ..GetOptions::default()
                },
            )
            .await
            .unwrap()
        }
    };
    // Stored, not yet swept: a raw read still finds the value.
    assert!(matches!(
        raw_eventual(1, b"plain:gone").await,
        GetResult::Found { .. }
    ));
    sleep(Duration::from_secs(5)).await;
    for n in [1, 4] {
        let got = raw_eventual(n, b"plain:gone").await;
        assert!(
            matches!(
                got,
                GetResult::NotFound {
                    deleted_context: Some(_)
                }
            ),
            "node {n}: {got:?}"
        );
        assert!(matches!(
            raw_eventual(n, b"plain:kept").await,
            GetResult::Found { .. }
        ));
        let tl = c.node(NodeId(n));
        let gone = tl.tl_get(b"tl:gone", ReadMode::Latest).await.unwrap();
        assert!(gone.record.unwrap().is_tombstone(), "node {n}");
        let kept = tl.tl_get(b"tl:kept", ReadMode::Latest).await.unwrap();
        assert!(!kept.record.unwrap().is_tombstone(), "node {n}");
    }
}

/// The timeline read-modify-write loses no update: clients on nodes of both DCs increment one
/// key concurrently, and every increment is in the final value.
#[tokio::test(start_paused = true)]
async fn concurrent_timeline_updates_from_two_dcs_lose_nothing() {
    use meridian_replication::{Dispatch, Entry, Read, ReadOpts};
    let c = timeline_cluster(44).await;
    let key = &b"tl:counter"[..];
    let mut tasks = tokio::task::JoinSet::new();
    for node in [1, 2, 4, 5] {
        for _ in 0..4 {
            let d = Dispatch::new(c.node(NodeId(node)).clone());
            tasks.spawn(async move {
                for _ in 0..5 {
                    d.update(key, |old, _| {
                        let n: u64 = old.map_or(0, |e| {
                            std::str::from_utf8(&e.data).unwrap().parse().unwrap()
                        });
                        (Some(Some(Entry::new(Bytes::from((n + 1).to_string())))), ())
                    })
                    .await
                    .unwrap();
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let d = Dispatch::new(c.node(NodeId(6)).clone());
    let Read::Timeline(got) = d.read(key, ReadOpts::Mode(ReadMode::Latest)).await.unwrap() else {
        panic!("a timeline read")
    };
    assert_eq!(got.value(), Some(&b("80")));
}

/// INCR on an eventual bucket keeps a PN-counter: clients on nodes of both DCs increment one
/// key concurrently (each coordinator in its own DC), and once the replicas settle every
/// increment is in the value any node reads.
#[tokio::test(start_paused = true)]
async fn concurrent_counter_increments_from_two_dcs_all_count() {
    use meridian_replication::Dispatch;
    let c = timeline_cluster(45).await;
    let key = &b"plain:counter"[..];
    let mut tasks = tokio::task::JoinSet::new();
    for node in [1, 2, 4, 5] {
        for t in 0..4 {
            let d = Dispatch::new(c.node(NodeId(node)).clone());
            tasks.spawn(async move {
                for i in 0..5 {
                    let delta = if (t + i) % 3 == 0 { -1 } else { 2 };
                    d.incr_by(key, delta).await.unwrap();
                }
            });
        }
    }
    // Per task: i = 0..5 with (t + i) % 3 == 0 subtracting; summed over t = 0..4.
    let want: i64 = (0..4)
        .map(|t| {
            (0..5)
                .map(|i| if (t + i) % 3 == 0 { -1 } else { 2 })
                .sum::<i64>()
        })
        .sum::<i64>()
        * 4;
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    sleep(Duration::from_secs(2)).await;
    for node in 1..=6 {
        let d = Dispatch::new(c.node(NodeId(node)).clone());
        assert_eq!(
            d.get(key).await.unwrap(),
            Some(b(&want.to_string())),
            "node {node}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn tombstones_every_primary_holds_are_reaped_after_the_grace() {
    let c = timeline_cluster_with(31, |cfg| {
        cfg.tl_tombstone_grace = Duration::from_secs(5);
        cfg.tl_sync_interval = Duration::from_secs(1);
    })
    .await;
    let reaped = |c: &Cluster| -> u64 { c.nodes.iter().map(|n| n.stats().tombstones_reaped).sum() };
    let key = key_where(&c, "tl:gc", |_| true);
    let w = c
        .node(NodeId(1))
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    c.node(NodeId(1))
        .tl_put(&key, Content::Tombstone, Expect::Any)
        .await
        .unwrap();
    assert!(converged(&c, &key).await.is_tombstone());
    sleep(Duration::from_secs(2)).await;
    assert!(
        records(&c, &key).iter().all(Option::is_some),
        "kept for the grace"
    );
    sleep(Duration::from_secs(10)).await;
    assert!(
        records(&c, &key).iter().all(Option::is_none),
        "{:?}",
        records(&c, &key)
    );
    assert_eq!(reaped(&c), 3);
    // A re-insert starts a newer generation than the forgotten one.
    let again = c
        .node(NodeId(5))
        .tl_put(&key, val("b"), Expect::Absent)
        .await
        .unwrap();
    assert!(again.record.ver.generation > w.record.ver.generation);
    assert_eq!(converged(&c, &key).await.content, val("b"));

    // A primary that cannot be asked keeps every copy of the tombstone.
    let key = key_where(&c, "tl:gc-cut", |_| true);
    c.node(NodeId(1))
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    c.node(NodeId(1))
        .tl_put(&key, Content::Tombstone, Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    let master = records(&c, &key)[0].as_ref().unwrap().master.node;
    let other = *c.primaries(&key).iter().find(|&&p| p != master).unwrap();
    c.wan.isolate(other);
    sleep(Duration::from_secs(15)).await;
    assert!(records(&c, &key).iter().all(Option::is_some));
    assert_eq!(reaped(&c), 3);
    c.wan.heal_all();
    sleep(Duration::from_secs(15)).await;
    assert!(records(&c, &key).iter().all(Option::is_none));
    assert_eq!(reaped(&c), 6);
}

/// A cluster (no handoff rounds) with a timeline bucket `name` of a 2 s master timeout and
/// `props`' other settings.
async fn cluster_with_timeline(seed: u64, name: &str, props: TimelineProps) -> Cluster {
    let c = Cluster::start_with(seed, |cfg| {
        cfg.handoff_interval = Duration::from_secs(3600);
    })
    .await;
    let timeline = TimelineProps {
        master_timeout_ms: 2000,
        ..props
    };
    c.set_bucket(
        name,
        BucketProps {
            timeline,
            ..BucketProps::timeline()
        },
    )
    .await;
    c
}

/// A cluster whose timeline bucket `tf` fails over by itself.
async fn failover_cluster(seed: u64) -> Cluster {
    let failover = TimelineProps {
        failover: true,
        ..TimelineProps::default()
    };
    cluster_with_timeline(seed, "tf", failover).await
}

#[tokio::test(start_paused = true)]
async fn with_failover_a_dead_masters_records_are_taken_over_within_its_dc() {
    let c = failover_cluster(61).await;
    // Two primaries in DC 0 (the master and its successor), one in DC 1.
    let in_dc0 = |p: &[NodeId]| p.iter().filter(|n| dc_of(**n) == DcId(0)).count();
    let key = key_where(&c, "tf:k", |p| dc_of(p[0]) == DcId(0) && in_dc0(p) == 2);
    let prim = c.primaries(&key);
    let successor = prim[1..]
        .iter()
        .copied()
        .find(|n| dc_of(*n) == DcId(0))
        .unwrap();
    let other = prim[1..].iter().copied().find(|n| *n != successor).unwrap();
    let far = coordinator_in(&c, &key, 1).unwrap_or(other);
    let w = c
        .node(far)
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(w.record.master.node, prim[0]);
    converged(&c, &key).await;
    // The master is cut off from everyone; once the detectors say so, the next write is
    // served by its successor in the same DC, in a new master epoch.
    c.wan.cut_both(Scope::Node(prim[0]), Scope::Any);
    sleep(Duration::from_secs(5)).await;
    let w2 = c
        .node(far)
        .tl_put(&key, val("b"), Expect::Any)
        .await
        .unwrap();
    assert_eq!(w2.record.master.node, successor);
    assert!(
        w2.record.ver.mepoch > w.record.ver.mepoch,
        "{:?}",
        w2.record.ver
    );
    let latest = c.node(other).tl_get(&key, ReadMode::Latest).await.unwrap();
    assert_eq!(latest.value(), Some(&b("b")));
    // The cut-off master sees no majority: it refuses to write, so nothing it says can be
    // fenced away later.
    let e = c
        .node(prim[0])
        .tl_put(&key, val("lost"), Expect::Any)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "master_unavailable", "{e}");
    // An absent key whose arbiter is the dead node is inserted by the next up primary.
    let fresh = key_where(&c, "tf:new", |p| p[0] == prim[0]);
    let ins = c
        .node(far)
        .tl_put(&fresh, val("x"), Expect::Absent)
        .await
        .unwrap();
    assert_ne!(ins.issued_by.node, prim[0]);
    // Healed, the old master learns it was taken over.
    c.wan.heal_all();
    let r = converged(&c, &key).await;
    assert_eq!((r.master.node, r.content), (successor, val("b")));
}

#[tokio::test(start_paused = true)]
async fn without_a_majority_nobody_takes_over() {
    let c = failover_cluster(62).await;
    let key = key_where(&c, "tf:k", |p| dc_of(p[0]) == DcId(0));
    let far = coordinator_in(&c, &key, 1).unwrap();
    c.node(far)
        .tl_put(&key, val("a"), Expect::Any)
        .await
        .unwrap();
    converged(&c, &key).await;
    // Three nodes of six on each side: no side has a majority.
    c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    sleep(Duration::from_secs(5)).await;
    let e = c
        .node(far)
        .tl_put(&key, val("b"), Expect::Any)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "master_unavailable", "{e}");
    let master = c.primaries(&key)[0];
    let e = c
        .node(master)
        .tl_put(&key, val("c"), Expect::Any)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "master_unavailable", "{e}");
    c.wan.heal_all();
    let r = converged(&c, &key).await;
    assert_eq!((r.master.node, r.content), (master, val("a")));
}

#[tokio::test(start_paused = true)]
async fn an_insert_mastered_in_the_writers_dc_is_at_its_master_when_acknowledged() {
    let inserter_dc = TimelineProps {
        initial_master: meridian_replication::timeline::InitialMaster::InserterDc,
        ..TimelineProps::default()
    };
    let c = cluster_with_timeline(71, "ti", inserter_dc).await;
    // The arbiter (first primary) in DC 1, a DC-0 coordinator that is not a replica, and a
    // replica in DC 0 to master the record.
    let key = (0..10_000)
        .map(|i| format!("ti:k{i}").into_bytes())
        .find(|k| {
            let p = c.primaries(k);
            dc_of(p[0]) == DcId(1)
                && p.iter().any(|n| dc_of(*n) == DcId(0))
                && coordinator_in(&c, k, 0).is_some()
        })
        .unwrap();
    let via = coordinator_in(&c, &key, 0).unwrap();
    let arbiter = c.primaries(&key)[0];
    // The arbiter's own queue to DC 0 is slow: 3 s one way to every DC-0 replica.
    for n in (1..=DCS * PER_DC)
        .map(NodeId)
        .filter(|n| dc_of(*n) == DcId(0) && *n != via)
    {
        c.wan
            .set_node_link(arbiter, n, LinkConfig::wan(Duration::from_secs(6), 0.0))
            .unwrap();
    }
    let w = c
        .node(via)
        .tl_put(&key, val("v"), Expect::Absent)
        .await
        .unwrap();
    assert_eq!(w.issued_by.node, arbiter);
    let master = w.record.master.node;
    assert_eq!(dc_of(master), DcId(0), "mastered in the writer's DC");
    assert_eq!(
        c.node(master).tl_local(&key).unwrap(),
        Some(w.record.clone()),
        "the coordinator handed the record to its master before acknowledging"
    );
    // So the writer's next write and read are served at once, in its DC.
    let next = c
        .node(via)
        .tl_put(&key, val("w"), Expect::Version(w.record.ver))
        .await
        .unwrap();
    assert_eq!(next.issued_by.node, master);
    let read = c.node(via).tl_get(&key, ReadMode::Latest).await.unwrap();
    assert_eq!(read.value(), Some(&b("w")));
}
