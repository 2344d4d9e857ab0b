//! Eventual-consistency buckets on the embedded cluster.

use super::*;

// ----- scenarios -----

#[tokio::test(start_paused = true)]
async fn write_then_read_from_each_dc() {
    let c = Cluster::start(11, Duration::from_secs(10)).await;
    for (i, writer) in [NodeId(1), NodeId(4)].into_iter().enumerate() {
        let key = format!("default:user{i}").into_bytes();
        let v = b(&format!("v{i}"));
        c.node(writer)
            .put(&key, v.clone(), None, PutOptions::default())
            .await
            .unwrap();
        for reader in [NodeId(1), NodeId(2), NodeId(4), NodeId(6)] {
            let g = c
                .node(reader)
                .get(&key, GetOptions::default())
                .await
                .unwrap();
            assert_eq!(g.values(), std::slice::from_ref(&v), "read from {reader}");
        }
    }
    // R + W > N with explicit W=2, R=2: an acknowledged write is always read back.
    for i in 0..20 {
        let key = format!("rw:{i}").into_bytes();
        let (w, r) = (NodeId(1 + i % 6), NodeId(1 + (i * 5 + 3) % 6));
        let wo = put_opts(|p| p.w = Some(Quorum::Count(2)));
        c.node(w).put(&key, b("x"), None, wo).await.unwrap();
        let ro = get_opts(|p| p.r = Some(Quorum::Count(2)));
        let g = c.node(r).get(&key, ro).await.unwrap();
        assert!(g.values().contains(&b("x")), "{key:?} via {w} then {r}");
    }
    // Never-written keys are notfound.
    assert_eq!(
        c.node(NodeId(3))
            .get(b"default:nobody", GetOptions::default())
            .await
            .unwrap(),
        GetResult::NotFound {
            deleted_context: None
        }
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_blind_writes_make_siblings_and_a_context_collapses_them() {
    let c = Cluster::start(12, Duration::from_secs(10)).await;
    let key = b"cart:alice";
    let wo = PutOptions::default();
    let (a, bb) = tokio::join!(
        c.node(NodeId(1)).put(key, b("apple"), None, wo.clone()),
        c.node(NodeId(5)).put(key, b("banana"), None, wo.clone()),
    );
    a.unwrap();
    bb.unwrap();
    let all = get_opts(|p| p.r = Some(Quorum::All));
    let g = c.node(NodeId(2)).get(key, all).await.unwrap();
    assert_eq!(set(g.values()), set(&[b("apple"), b("banana")]));
    // A write carrying the merged context supersedes both.
    c.node(NodeId(6))
        .put(key, b("apple+banana"), Some(&g.context()), wo.clone())
        .await
        .unwrap();
    let g = c.node(NodeId(3)).get(key, all).await.unwrap();
    assert_eq!(g.values(), [b("apple+banana")]);
    // Let the read repair and remaining replicates land: every primary holds the same.
    sleep(Duration::from_secs(1)).await;
    for s in c.stored(key) {
        assert_eq!(s, set(&[b("apple+banana")]));
    }

    // The same race in an LWW bucket leaves one value.
    c.set_bucket(
        "lww",
        BucketProps {
            props: Props {
                allow_mult: Some(false),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let key = b"lww:alice";
    let (a, bb) = tokio::join!(
        c.node(NodeId(1)).put(key, b("apple"), None, wo.clone()),
        c.node(NodeId(5)).put(key, b("banana"), None, wo.clone()),
    );
    a.unwrap();
    bb.unwrap();
    let g = c.node(NodeId(2)).get(key, all).await.unwrap();
    assert_eq!(g.values().len(), 1, "{g:?}");
    sleep(Duration::from_secs(1)).await;
    let stored = c.stored(key);
    assert!(
        stored.iter().all(|s| s == &stored[0] && s.len() == 1),
        "{stored:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn dc_partition_accepts_w1_on_both_sides_and_read_repair_converges() {
    // Hand-off is effectively off, so convergence below is read repair's doing.
    let c = Cluster::start(13, Duration::from_secs(3600)).await;
    let key = b"default:doc";
    c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    c.settle().await;
    let w1 = put_opts(|p| {
        p.w = Some(Quorum::One);
        p.dw = Some(Quorum::One);
    });
    c.node(NodeId(1))
        .put(key, b("left"), None, w1.clone())
        .await
        .unwrap();
    c.node(NodeId(4))
        .put(key, b("right"), None, w1.clone())
        .await
        .unwrap();
    // W=1 answers after the coordinator's own write; let the replicates land.
    sleep(Duration::from_millis(100)).await;
    // Each side reads only its own value.
    let one = get_opts(|p| p.r = Some(Quorum::One));
    let g = c.node(NodeId(2)).get(key, one).await.unwrap();
    assert_eq!(g.values(), [b("left")]);
    let g = c.node(NodeId(5)).get(key, one).await.unwrap();
    assert_eq!(g.values(), [b("right")]);

    c.wan.heal_all();
    c.settle().await;
    let all = get_opts(|p| p.r = Some(Quorum::All));
    let g = c.node(NodeId(1)).get(key, all).await.unwrap();
    assert_eq!(set(g.values()), set(&[b("left"), b("right")]));
    sleep(Duration::from_secs(1)).await;
    let want = set(&[b("left"), b("right")]);
    assert_eq!(c.stored(key), vec![want.clone(), want.clone(), want]);
    let objs: Vec<_> = c
        .primaries(key)
        .into_iter()
        .map(|p| c.node(p).store().get(key).unwrap())
        .collect();
    assert!(objs.iter().all(|o| o == &objs[0]), "replicas differ");
    assert!(c.node(NodeId(1)).stats().read_repairs > 0);
}

#[tokio::test(start_paused = true)]
async fn unavailable_replicas_give_the_spec_errors_with_figures() {
    let c = Cluster::start(14, Duration::from_secs(10)).await;

    // One node cut off from everyone sees an apl of one: insufficient_vnodes.
    c.wan.isolate(NodeId(1));
    c.settle().await;
    let e = c
        .node(NodeId(1))
        .get(b"default:k", GetOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "insufficient_vnodes need=2 got=1");
    let e = c
        .node(NodeId(1))
        .put(b"default:k", b("v"), None, PutOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "insufficient_vnodes need=2 got=1");

    // Node 1 is down for everyone else: PR/PW = N on its keys fail at the pre-check.
    let key = key_where(&c, "default:p", |p| p.contains(&NodeId(1)));
    let coord = NodeId(if c.primaries(&key).contains(&NodeId(4)) {
        4
    } else {
        5
    });
    let e = c
        .node(coord)
        .get(&key, get_opts(|p| p.pr = Some(Quorum::All)))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "pr_val_unsatisfied need=3 got=2");
    let e = c
        .node(coord)
        .put(&key, b("v"), None, put_opts(|p| p.pw = Some(Quorum::All)))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "pw_val_unsatisfied need=3 got=2");
    // ... while the sloppy quorum still serves defaults through a fallback.
    c.node(coord)
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    c.wan.heal_all();
    c.settle().await;

    // Two primaries with failing disks answer errors: r/w/dw_val_unsatisfied.
    let key = key_where(&c, "default:q", |_| true);
    let prim = c.primaries(&key);
    c.node(prim[0])
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    sleep(Duration::from_millis(500)).await;
    for &p in &prim[1..] {
        c.engine(p).broken.store(true, Ordering::Relaxed);
    }
    let coord = c.node(prim[0]);
    let e = coord.get(&key, GetOptions::default()).await.unwrap_err();
    assert_eq!(e.to_string(), "r_val_unsatisfied need=2 got=1");
    let e = coord
        .put(&key, b("w"), None, PutOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "dw_val_unsatisfied need=2 got=1");
    let dw1 = put_opts(|p| p.dw = Some(Quorum::One));
    let e = coord.put(&key, b("w"), None, dw1).await.unwrap_err();
    assert_eq!(e.to_string(), "w_val_unsatisfied need=2 got=1");
    // R=1 / W=1 still succeed on the healthy replica.
    let one = get_opts(|p| p.r = Some(Quorum::One));
    assert!(
        coord
            .get(&key, one)
            .await
            .unwrap()
            .values()
            .contains(&b("v"))
    );
    // A replica's failure is never the coordinator's: node_confirms needs distinct nodes.
    let nc = put_opts(|p| {
        p.w = Some(Quorum::One);
        p.dw = Some(Quorum::One);
        p.node_confirms = Some(Quorum::Count(2));
    });
    let e = coord.put(&key, b("w"), None, nc).await.unwrap_err();
    assert_eq!(e.to_string(), "node_confirms_val_unsatisfied need=2 got=1");
    for &p in &prim[1..] {
        c.engine(p).broken.store(false, Ordering::Relaxed);
    }
}

#[tokio::test(start_paused = true)]
async fn requests_to_a_cut_off_replica_set_time_out_naming_the_missing() {
    let c = Cluster::start(15, Duration::from_secs(10)).await;
    // A key whose primaries include node 1 and something in DC 1.
    let key = key_where(&c, "default:t", |p| p.contains(&NodeId(1)));
    let remote: Vec<NodeId> = c
        .primaries(&key)
        .into_iter()
        .filter(|&n| dc_of(n) == DcId(1))
        .collect();
    assert!(!remote.is_empty());
    // Cut the DCs apart and ask at once, before the detectors notice (once they do, the
    // sloppy quorum would use fallbacks in DC 0 instead).
    c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    let start = Instant::now();
    let n1 = c.node(NodeId(1));
    let get = async {
        let r = n1
            .get(
                &key,
                get_opts(|p| {
                    p.r = Some(Quorum::All);
                    p.timeout_ms = Some(500);
                }),
            )
            .await;
        (r, start.elapsed())
    };
    let put = async {
        let r = n1
            .put(
                &key,
                b("v"),
                None,
                put_opts(|p| {
                    p.w = Some(Quorum::All);
                    p.timeout_ms = Some(500);
                }),
            )
            .await;
        (r, start.elapsed())
    };
    let ((g, g_took), (p, p_took)) = tokio::join!(get, put);
    let names: Vec<String> = remote.iter().map(|n| n.to_string()).collect();
    let e = g.unwrap_err();
    assert!(g_took <= Duration::from_millis(500), "{g_took:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "timeout need=3 ok={} nf=0 fail=0 missing={}",
            3 - remote.len(),
            names.join(",")
        )
    );
    let e = p.unwrap_err();
    assert!(p_took <= Duration::from_millis(500), "{p_took:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "timeout need=3 ok={} nf=0 fail=0 missing={}",
            3 - remote.len(),
            names.join(",")
        )
    );
}

#[tokio::test(start_paused = true)]
async fn hinted_handoff_delivers_to_a_returning_primary() {
    let c = Cluster::start(16, Duration::from_secs(1)).await;
    // A key with a DC-0 primary other than node 1, which we take down.
    let key = key_where(&c, "default:h", |p| {
        p.iter().any(|&n| n != NodeId(1) && dc_of(n) == DcId(0))
    });
    let down = c
        .primaries(&key)
        .into_iter()
        .find(|&n| n != NodeId(1) && dc_of(n) == DcId(0))
        .unwrap();
    c.wan.isolate(down);
    c.settle().await;
    let (_, apl) = c.node(NodeId(1)).preflist_for(&key, 3);
    let fallback = apl
        .entries()
        .iter()
        .find(|e| matches!(e.role, Role::Fallback { for_node, .. } if for_node == down))
        .expect("a fallback stands in for the down primary")
        .node;
    c.node(NodeId(1))
        .put(&key, b("hinted"), None, PutOptions::default())
        .await
        .unwrap();
    sleep(Duration::from_millis(500)).await;
    let hint = c.node(fallback).store().get_hint(down, &key).unwrap();
    assert!(hint.is_some_and(|h| h.values().any(|v| v == "hinted")));
    assert!(c.node(fallback).store().get(&key).unwrap().is_none());
    assert!(c.node(down).store().get(&key).unwrap().is_none());

    c.wan.heal_all();
    // Detectors see it back within a heartbeat or two, then the next round hands off.
    sleep(Duration::from_secs(3)).await;
    let o = c
        .node(down)
        .store()
        .get(&key)
        .unwrap()
        .expect("primary holds it");
    assert_eq!(o.values().cloned().collect::<Vec<_>>(), [b("hinted")]);
    for n in &c.nodes {
        assert_eq!(n.hints_pending().unwrap(), 0, "hints left on {}", n.id());
    }
    assert!(c.node(fallback).stats().hinted_handoffs >= 1);
}

#[tokio::test(start_paused = true)]
async fn hinted_handoff_streams_batches_past_a_down_primary_and_across_a_restart() {
    // Hand-off rounds are run by hand below.
    let mut c =
        Cluster::start_with(21, |cfg| cfg.handoff_interval = Duration::from_secs(3600)).await;
    let (holder, down, up) = (NodeId(4), NodeId(2), NodeId(5));
    // One object to hand off, cloned under many keys.
    c.node(NodeId(1))
        .put(b"default:seed", b("hinted"), None, PutOptions::default())
        .await
        .unwrap();
    let object = c
        .node(c.primaries(b"default:seed")[0])
        .store()
        .get(b"default:seed")
        .unwrap()
        .unwrap();
    // 12,000 hints for a down primary sort before 300 for an up one (same DC as the
    // holder): the first 10,000 hints in the store are all for the down one.
    let store = c.node(holder).store();
    for i in 0..12_000 {
        let key = format!("default:d{i}");
        store.add_hint(down, key.as_bytes(), &object, true).unwrap();
    }
    let up_keys: Vec<Vec<u8>> = (0..)
        .map(|i| format!("default:u{i}").into_bytes())
        .filter(|k| c.primaries(k).contains(&up))
        .take(300)
        .collect();
    for k in &up_keys {
        store.add_hint(up, k, &object, true).unwrap();
    }
    c.wan.isolate(down);
    c.settle().await;

    let started = Instant::now();
    let delivered = c.node(holder).handoff_round().await.unwrap();
    let took = started.elapsed();
    assert_eq!(delivered, 300);
    for k in &up_keys {
        assert_eq!(c.node(up).store().get(k).unwrap().as_ref(), Some(&object));
    }
    assert!(store.hints_for(up, None, 10).unwrap().is_empty());
    // Two batched messages over a 2 ms link, not 300 round trips (virtual time).
    assert!(took < Duration::from_millis(100), "{took:?}");

    // The holder crashes with its hints on disk and comes back; its rounds deliver them.
    let engine = c.engines[(holder.0 - 1) as usize].clone();
    c.restart_on(holder, engine).await;
    c.wan.heal_all();
    c.settle().await;
    assert_eq!(c.node(holder).hints_pending().unwrap(), 12_000);
    assert_eq!(c.node(holder).handoff_round().await.unwrap(), 10_000);
    assert_eq!(c.node(holder).handoff_round().await.unwrap(), 2_000);
    assert_eq!(c.node(holder).hints_pending().unwrap(), 0);
    assert!(
        c.node(down)
            .store()
            .get(b"default:d11999")
            .unwrap()
            .is_some()
    );
    assert_eq!(c.node(holder).stats().hinted_handoffs, 12_000);
}

#[tokio::test(start_paused = true)]
async fn a_durable_ack_waits_for_the_replicas_sync() {
    let c = Cluster::start(25, Duration::from_secs(3600)).await;
    for e in &c.engines {
        e.lazy_disk.store(true, Ordering::Relaxed);
    }
    let syncs = |c: &Cluster| -> Vec<u64> {
        c.engines
            .iter()
            .map(|e| e.syncs.load(Ordering::Relaxed))
            .collect()
    };
    let key = key_where(&c, "default:dw", |p| p[0] == NodeId(1));
    let ps = c.primaries(&key);
    // DW = 3: every primary syncs (the coordinator too) before the write is acknowledged.
    let all = put_opts(|p| p.dw = Some(Quorum::All));
    c.node(NodeId(1))
        .put(&key, b("a"), None, all)
        .await
        .unwrap();
    let after = syncs(&c);
    for p in &ps {
        assert!(
            after[(p.0 - 1) as usize] >= 1,
            "{p} did not sync: {after:?}"
        );
    }
    // DW = 0 (and W = 1): nobody syncs for it.
    let none = put_opts(|p| {
        p.w = Some(Quorum::One);
        p.dw = Some(Quorum::Count(0));
    });
    c.node(NodeId(1))
        .put(&key, b("b"), None, none)
        .await
        .unwrap();
    sleep(Duration::from_millis(500)).await;
    assert_eq!(syncs(&c), after);
    // Two replicas whose fsync fails: W = 3 is met, DW = 2 is not; DW = 1 (ours) is.
    for p in &ps[1..] {
        c.engine(*p).sync_broken.store(true, Ordering::Relaxed);
    }
    let w3 = |dw| {
        put_opts(move |p| {
            p.w = Some(Quorum::All);
            p.dw = Some(Quorum::Count(dw));
        })
    };
    let e = c
        .node(NodeId(1))
        .put(&key, b("c"), None, w3(2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "dw_val_unsatisfied", "{e}");
    c.node(NodeId(1))
        .put(&key, b("d"), None, w3(1))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn cross_dc_read_repair_draws_from_the_wan_budget_and_defers_the_rest() {
    // 20 kB/s of background traffic per remote DC; hand-off and anti-entropy off.
    let c = Cluster::start_with(22, |cfg| {
        cfg.handoff_interval = Duration::from_secs(3600);
        cfg.repair_wan_bytes_per_sec = 20_000;
    })
    .await;
    let stale = NodeId(4);
    let keys: Vec<Vec<u8>> = (0..)
        .map(|i| format!("default:rr{i}").into_bytes())
        .filter(|k| c.primaries(k).contains(&stale) && c.primaries(k).contains(&NodeId(1)))
        .take(60)
        .collect();
    c.wan.isolate(stale);
    c.settle().await;
    let value = Bytes::from(vec![b'x'; 1000]);
    for k in &keys {
        c.node(NodeId(1))
            .put(k, value.clone(), None, PutOptions::default())
            .await
            .unwrap();
    }
    c.wan.heal_all();
    c.settle().await;
    // All at once: each read waits a WAN round trip, in which the budget would refill.
    let all = get_opts(|p| p.r = Some(Quorum::All));
    let reads = keys.iter().map(|k| c.node(NodeId(1)).get(k, all));
    for r in futures_util::future::join_all(reads).await {
        r.unwrap();
    }
    sleep(Duration::from_millis(500)).await;
    let s = c.node(NodeId(1)).stats();
    let repaired = keys
        .iter()
        .filter(|k| c.node(stale).store().get(k).unwrap().is_some())
        .count();
    // About 20 kB of 60 kB of repairs fit the budget; the rest is left to anti-entropy.
    println!("repaired {repaired}, deferred {}", s.read_repairs_deferred);
    assert!((5..=40).contains(&repaired), "{repaired}");
    assert_eq!(s.read_repairs_deferred as usize, keys.len() - repaired);
}

#[tokio::test(start_paused = true)]
async fn notfound_ok_decides_whether_a_missed_replica_answers_notfound() {
    // Spec invariant 9. Hand-off is off so node 1 stays behind until a read repairs it.
    let c = Cluster::start(17, Duration::from_secs(3600)).await;
    let key = key_where(&c, "default:nf", |p| p.contains(&NodeId(1)));
    c.wan.isolate(NodeId(1));
    c.settle().await;
    let writer = NodeId(if c.primaries(&key).contains(&NodeId(4)) {
        4
    } else {
        5
    });
    c.node(writer)
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    c.wan.heal_all();
    c.settle().await;
    // Node 1 answers its own read first: with notfound_ok it is an ok notfound.
    let r1 = |ok: bool| {
        get_opts(move |p| {
            p.r = Some(Quorum::One);
            p.notfound_ok = Some(ok);
        })
    };
    let g = c.node(NodeId(1)).get(&key, r1(true)).await.unwrap();
    assert_eq!(
        g,
        GetResult::NotFound {
            deleted_context: None
        }
    );
    // That read still collected every reply and repaired node 1 ...
    sleep(Duration::from_millis(500)).await;
    assert!(c.node(NodeId(1)).store().get(&key).unwrap().is_some());
    // ... so check the other setting on a fresh key that node 1 also missed.
    let key2 = key_where(&c, "default:nf2-", |p| p.contains(&NodeId(1)));
    c.wan.isolate(NodeId(1));
    c.settle().await;
    c.node(writer)
        .put(&key2, b("w"), None, PutOptions::default())
        .await
        .unwrap();
    c.wan.heal_all();
    c.settle().await;
    let g = c.node(NodeId(1)).get(&key2, r1(false)).await.unwrap();
    assert_eq!(g.values(), [b("w")]);
}

// ----- active anti-entropy (spec §10) -----

/// Anti-entropy interval of the tests below: each node holds 32 partitions with 2 peers
/// each, so one round-robin cycle takes 64 intervals (32 s virtual).
const AAE_EVERY: Duration = Duration::from_millis(500);
/// Two full cycles plus the start-up jitter.
const AAE_WAIT: Duration = Duration::from_secs(70);

/// Writes `n` keys with W=1 on each side of a DC partition (values "left" / "right", and an
/// LWW bucket "lww"), heals, and returns the keys. Nothing reads them.
async fn diverge_without_reads(c: &Cluster, n: usize) -> Vec<Vec<u8>> {
    c.set_bucket(
        "lww",
        BucketProps {
            props: Props {
                allow_mult: Some(false),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    c.wan.cut_both(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    c.settle().await;
    let w1 = put_opts(|p| {
        p.w = Some(Quorum::One);
        p.dw = Some(Quorum::One);
    });
    let mut keys = Vec::new();
    for i in 0..n {
        let bucket = if i % 4 == 0 { "lww" } else { "default" };
        let key = format!("{bucket}:aae{i}").into_bytes();
        c.node(NodeId(1 + (i as u32 % 3)))
            .put(&key, b("left"), None, w1.clone())
            .await
            .unwrap();
        c.node(NodeId(4 + (i as u32 % 3)))
            .put(&key, b("right"), None, w1.clone())
            .await
            .unwrap();
        keys.push(key);
    }
    sleep(Duration::from_millis(500)).await;
    c.wan.heal_all();
    c.settle().await;
    keys
}

#[tokio::test(start_paused = true)]
async fn anti_entropy_converges_divergent_replicas_without_reads() {
    // Hand-off is effectively off (hints stay on the fallbacks) and nothing is read, so
    // only anti-entropy can converge the primaries.
    let c = Cluster::start_aae(21, Duration::from_secs(3600), AAE_EVERY, 1000).await;
    let keys = diverge_without_reads(&c, 24).await;
    // Just after the heal the DCs disagree.
    assert!(
        keys.iter().any(|k| {
            let o = c.objects(k);
            o.iter().any(|x| x != &o[0])
        }),
        "the partition should have left divergent replicas"
    );
    sleep(AAE_WAIT).await;
    for k in &keys {
        let objs = c.objects(k);
        assert!(objs.iter().all(|o| o == &objs[0]), "{k:?}: {objs:?}");
        let vals: BTreeSet<Bytes> = objs[0].as_ref().unwrap().values().cloned().collect();
        if k.starts_with(b"lww:") {
            assert_eq!(vals.len(), 1, "{k:?}");
        } else {
            assert_eq!(vals, set(&[b("left"), b("right")]), "{k:?}");
        }
    }
    let stats: Vec<_> = c.nodes.iter().map(EventualNode::stats).collect();
    assert_eq!(stats.iter().map(|s| s.read_repairs).sum::<u64>(), 0);
    assert!(stats.iter().map(|s| s.aae_keys_repaired).sum::<u64>() >= keys.len() as u64);
    assert!(stats.iter().all(|s| s.aae_exchanges > 0), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn anti_entropy_across_dcs_keeps_to_the_wan_budget() {
    // 20 kB/s of background traffic per remote DC; exchanges run by hand.
    for (rate, paced) in [(20_000, true), (0, false)] {
        let mut c = Cluster::start_with(24, |cfg| {
            cfg.handoff_interval = Duration::from_secs(3600);
            cfg.anti_entropy_interval = Duration::from_secs(3600);
            cfg.repair_wan_bytes_per_sec = rate;
        })
        .await;
        let ring = c.nodes[0].layout().ring();
        let key0 = key_where(&c, "default:ae", |p| {
            p.contains(&NodeId(1)) && p.contains(&NodeId(4))
        });
        let partition = ring.partition_of(&key0);
        let keys: Vec<Vec<u8>> = (0..)
            .map(|i| format!("default:ae{i}").into_bytes())
            .filter(|k| ring.partition_of(k) == partition)
            .take(30)
            .collect();
        for k in &keys {
            c.node(NodeId(1))
                .put(
                    k,
                    Bytes::from(vec![b'v'; 2000]),
                    None,
                    PutOptions::default(),
                )
                .await
                .unwrap();
        }
        sleep(Duration::from_secs(1)).await;
        c.restart_wiped(NodeId(4)).await;
        c.settle().await;
        let started = Instant::now();
        let synced = c
            .node(NodeId(1))
            .anti_entropy_with(partition, NodeId(4))
            .await
            .unwrap();
        let took = started.elapsed();
        assert_eq!(synced, keys.len());
        for k in &keys {
            assert!(c.node(NodeId(4)).store().get(k).unwrap().is_some());
        }
        // ~62 kB of objects went to the other DC: past the 20 kB burst, at 20 kB/s
        // (virtual time), against a few round trips unpaced.
        println!("rate {rate}: {synced} keys in {took:?}");
        if paced {
            assert!(took >= Duration::from_secs(2), "{took:?}");
        } else {
            assert!(took < Duration::from_secs(1), "{took:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn without_anti_entropy_the_divergence_persists() {
    let c = Cluster::start_aae(22, Duration::from_secs(3600), Duration::ZERO, 1000).await;
    let keys = diverge_without_reads(&c, 24).await;
    sleep(AAE_WAIT).await;
    let diverged = keys
        .iter()
        .filter(|k| {
            let o = c.objects(k);
            o.iter().any(|x| x != &o[0])
        })
        .count();
    assert_eq!(diverged, keys.len());
    assert!(c.nodes.iter().all(|n| n.stats().aae_exchanges == 0));
}

#[tokio::test(start_paused = true)]
async fn a_wiped_replica_gets_everything_back() {
    // At most 2 keys per exchange: the repair takes several rounds.
    let mut c = Cluster::start_aae(23, Duration::from_secs(3600), AAE_EVERY, 2).await;
    let mut keys = Vec::new();
    for i in 0..120u32 {
        let key = format!("default:w{i}").into_bytes();
        c.node(NodeId(1 + i % 6))
            .put(&key, b(&format!("v{i}")), None, PutOptions::default())
            .await
            .unwrap();
        keys.push(key);
    }
    // A delete is data too: its tombstone must come back.
    let g = c
        .node(NodeId(1))
        .get(&keys[0], GetOptions::default())
        .await
        .unwrap();
    c.node(NodeId(1))
        .delete(&keys[0], Some(&g.context()), PutOptions::default())
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    let wiped = NodeId(2);
    let mine: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| c.primaries(k).contains(&wiped))
        .collect();
    assert!(mine.len() > 30, "{}", mine.len());
    for k in &mine {
        let o = c.objects(k);
        assert!(o.iter().all(|x| x.is_some() && x == &o[0]), "{k:?}");
    }

    c.restart_wiped(wiped).await;
    assert!(
        mine.iter()
            .all(|k| c.node(wiped).store().get(k).unwrap().is_none())
    );
    sleep(AAE_WAIT).await;
    for k in &mine {
        let o = c.objects(k);
        assert!(o.iter().all(|x| x.is_some() && x == &o[0]), "{k:?}: {o:?}");
    }
    assert!(c.node(NodeId(1)).stats().read_repairs == 0);
}

// ----- membership changes and ownership handoff -----

/// Reads every key with R = all (every owner must answer with the value) and checks it.
async fn assert_all_readable(c: &Cluster, keys: &[(Vec<u8>, Bytes)], via: NodeId) {
    for (k, v) in keys {
        let got = c
            .node(via)
            .get(k, get_opts(|p| p.r = Some(Quorum::All)))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(k)));
        assert_eq!(
            got.values(),
            std::slice::from_ref(v),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_joining_node_receives_its_partitions_and_no_acknowledged_write_is_lost() {
    let mut c = Cluster::start(31, Duration::from_secs(1)).await;
    let mut written = Vec::new();
    for i in 0..300u32 {
        let key = format!("default:j{i}").into_bytes();
        let v = b(&format!("v{i}"));
        c.node(NodeId(1 + i % 6))
            .put(&key, v.clone(), None, PutOptions::default())
            .await
            .unwrap();
        written.push((key, v));
    }
    let before = c.nodes[0].layout().clone();

    let meta = c.join(NodeId(7), DcId(1)).await;
    assert_eq!(meta.layout.epoch(), before.epoch() + 1);
    assert!(meta.previous.is_some(), "the handoff runs");
    let moved = meridian_cluster::diff(&before, &meta.layout);
    assert!(
        !moved.is_empty() && moved.iter().all(|t| t.to == NodeId(7)),
        "{moved:?}"
    );

    // While data moves, reads find every acknowledged write (previous owners are asked
    // too) and writes keep succeeding.
    for (i, (k, v)) in written.iter().enumerate().step_by(7) {
        let via = NodeId(1 + (i as u32) % 7);
        let got = c.node(via).get(k, GetOptions::default()).await.unwrap();
        assert_eq!(
            got.values(),
            std::slice::from_ref(v),
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    for i in 0..60u32 {
        let key = format!("default:during{i}").into_bytes();
        let v = b(&format!("d{i}"));
        c.node(NodeId(1 + i % 7))
            .put(&key, v.clone(), None, PutOptions::default())
            .await
            .unwrap();
        written.push((key, v));
    }

    c.wait_handoff().await;
    let layout = c.nodes[0].layout().clone();
    assert!(layout.loads()[&NodeId(7)] > 0);
    for id in 1..=7 {
        assert_eq!(
            c.not_owned(NodeId(id)),
            Vec::<Bytes>::new(),
            "n{id} keeps keys it lost"
        );
        assert_eq!(c.node(NodeId(id)).meta().layout, layout, "n{id} layout");
    }
    let handed: u64 = c.nodes.iter().map(|n| n.stats().ownership_handoffs).sum();
    assert!(handed > 0);
    // Node 7 holds every key of its partitions, and all replicas answer for every key.
    assert_all_readable(&c, &written, NodeId(7)).await;
    assert_all_readable(&c, &written, NodeId(2)).await;
}

#[tokio::test(start_paused = true)]
async fn a_leaving_node_hands_everything_off_and_can_rejoin_without_reissuing_dots() {
    let mut c = Cluster::start(32, Duration::from_secs(1)).await;
    let _ = c.join(NodeId(7), DcId(1)).await;
    c.wait_handoff().await;
    let mut written = Vec::new();
    for i in 0..200u32 {
        let key = format!("default:l{i}").into_bytes();
        let v = b(&format!("v{i}"));
        c.node(NodeId(1 + i % 7))
            .put(&key, v.clone(), None, PutOptions::default())
            .await
            .unwrap();
        written.push((key, v));
    }
    let owned_by_7: Vec<(Vec<u8>, Bytes)> = written
        .iter()
        .filter(|(k, _)| c.primaries(k).contains(&NodeId(7)))
        .cloned()
        .collect();
    assert!(owned_by_7.len() > 20, "{}", owned_by_7.len());

    // The leave goes through a non-claimant node.
    let left = c
        .node(NodeId(5))
        .change(MetaChange::Leave(NodeId(7)))
        .await
        .unwrap();
    assert!(!left.layout.topology().contains(NodeId(7)));
    let err = c
        .node(NodeId(5))
        .change(MetaChange::Leave(NodeId(6)))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        "membership_refused",
        "one change at a time: {err}"
    );
    c.wait_handoff().await;
    assert!(c.nodes[0].meta().member(NodeId(7)).is_none());
    let (left_over, _) = c
        .node(NodeId(7))
        .store()
        .objects_after(None, usize::MAX)
        .unwrap();
    assert!(
        left_over.is_empty(),
        "{} objects left on the leaver",
        left_over.len()
    );
    assert_all_readable(&c, &written, NodeId(1)).await;

    // Back in, same process and incarnation: partitions it emptied come back with a new
    // replica id.
    let mut rec = record(NodeId(7));
    (rec.dc, rec.dc_name) = (DcId(1), "dc1".into());
    let meta = c.nodes[0].change(MetaChange::Join(rec)).await.unwrap();
    c.wait_handoff().await;
    let epoch = meta.layout.epoch();
    let (k, v) = written
        .iter()
        .find(|(k, _)| c.primaries(k)[0] == NodeId(7) && owned_by_7.iter().any(|(o, _)| o == k))
        .expect("node 7 leads one of its old partitions again")
        .clone();
    let got = c
        .node(NodeId(7))
        .get(&k, GetOptions::default())
        .await
        .unwrap();
    assert_eq!(got.values(), [v]);
    c.node(NodeId(7))
        .put(
            &k,
            b("after-rejoin"),
            Some(&got.context()),
            PutOptions::default(),
        )
        .await
        .unwrap();
    let o = c.node(NodeId(7)).store().get(&k).unwrap().unwrap();
    let dots: Vec<_> = o.siblings().iter().map(|s| s.dot.replica).collect();
    assert_eq!(dots.len(), 1);
    assert_eq!((dots[0].node, dots[0].epoch), (NodeId(7), epoch));
    let got = c
        .node(NodeId(2))
        .get(&k, get_opts(|p| p.r = Some(Quorum::All)))
        .await
        .unwrap();
    assert_eq!(got.values(), [b("after-rejoin")]);
}

#[tokio::test(start_paused = true)]
async fn bucket_changes_reach_every_node_and_bad_changes_are_refused() {
    let c = Cluster::start(33, Duration::from_secs(1)).await;
    let lww = BucketProps {
        props: Props {
            allow_mult: Some(false),
            ..Default::default()
        },
        ..Default::default()
    };
    // Through a node that is not the claimant.
    c.node(NodeId(5)).set_bucket("cfg", lww).await.unwrap();
    sleep(Duration::from_secs(1)).await;
    for n in &c.nodes {
        assert_eq!(n.buckets().get("cfg"), Some(&lww), "{}", n.id());
    }
    let bad = BucketProps {
        props: Props {
            n_val: Some(9),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = c.node(NodeId(4)).set_bucket("bad", bad).await.unwrap_err();
    assert_eq!(e.code(), "invalid_bucket");
    let e = c
        .node(NodeId(4))
        .change(MetaChange::Leave(NodeId(42)))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not a member"), "{e}");
    // The claimant unreachable: a clear error naming it.
    c.wan.isolate(NodeId(1));
    let e = c.node(NodeId(4)).set_bucket("x", lww).await.unwrap_err();
    assert_eq!(e.code(), "claimant_unreachable", "{e}");
}

#[tokio::test(start_paused = true)]
async fn quorum_fanout_asks_r_replicas_and_hedges_after_hedge_ms() {
    let c = Cluster::start(34, Duration::from_secs(3600)).await;
    // Two DC-0 primaries (1 and another), one in DC 1.
    let key = key_where(&c, "default:hedge", |p| {
        p.contains(&NodeId(1)) && p.iter().filter(|&&n| dc_of(n) == DcId(0)).count() == 2
    });
    c.node(NodeId(1))
        .put(&key, b("v"), None, put_opts(|p| p.w = Some(Quorum::All)))
        .await
        .unwrap();
    let quorum = |hedge_ms: u64| {
        get_opts(move |p| {
            p.r = Some(Quorum::Count(2));
            p.read_fanout = Some(meridian_cluster::ReadFanout::Quorum);
            p.hedge_ms = Some(hedge_ms);
        })
    };
    // Both local primaries answer: a LAN round trip, no WAN.
    let t = Instant::now();
    let got = c.node(NodeId(1)).get(&key, quorum(50)).await.unwrap();
    assert_eq!(got.values(), [b("v")]);
    assert!(t.elapsed() < Duration::from_millis(20), "{:?}", t.elapsed());

    // The other local primary goes silent (not yet known down): the remote replica is asked
    // after hedge_ms and answers one WAN round trip (100 ms) later.
    let other = c
        .primaries(&key)
        .into_iter()
        .find(|&n| n != NodeId(1) && dc_of(n) == DcId(0))
        .unwrap();
    c.wan.isolate(other);
    for (hedge, low, high) in [(50, 150, 200), (400, 500, 560)] {
        let t = Instant::now();
        let got = c.node(NodeId(1)).get(&key, quorum(hedge)).await.unwrap();
        assert_eq!(got.values(), [b("v")]);
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(low) && took < Duration::from_millis(high),
            "hedge {hedge} ms: took {took:?}"
        );
    }
    // `all` does not wait for a hedge: the remote reply completes R at once.
    let t = Instant::now();
    let all = get_opts(|p| p.r = Some(Quorum::Count(2)));
    c.node(NodeId(1)).get(&key, all).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(120),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn the_critical_path_says_whether_a_request_crossed_dcs() {
    let c = Cluster::start(12, Duration::from_secs(10)).await;
    let in_dc = |ps: &[NodeId], dc: u32| ps.iter().filter(|&&n| dc_of(n) == DcId(dc)).count();
    // Two replicas in DC 0 and one in DC 1 (the study's 2+1 split).
    let key = key_where(&c, "default:path", |ps| {
        in_dc(ps, 0) == 2 && in_dc(ps, 1) == 1
    });
    let dc0 = *c
        .primaries(&key)
        .iter()
        .find(|&&n| dc_of(n) == DcId(0))
        .unwrap();
    let dc1 = *c
        .primaries(&key)
        .iter()
        .find(|&&n| dc_of(n) == DcId(1))
        .unwrap();
    // dw = 1 as in the study (§9): the durable quorum would otherwise wait for a second ack.
    let w = |n| {
        put_opts(move |p| {
            p.w = Some(Quorum::Count(n));
            p.dw = Some(Quorum::Count(1));
        })
    };
    let r = |n| get_opts(move |p| p.r = Some(Quorum::Count(n)));

    // W=1 and W=2 from DC 0 are answered inside DC 0; W=3 waits for DC 1.
    for (n, remote) in [(1, false), (2, false), (3, true)] {
        let put = c.node(dc0).put(&key, b("v"), None, w(n)).await.unwrap();
        assert_eq!(put.remote, remote, "W={n} coordinated in DC 0");
        let (_, path) = c.node(dc0).get_with_path(&key, r(n)).await.unwrap();
        assert_eq!(path, remote, "R={n} coordinated in DC 0");
    }
    // From DC 1, W=1 and R=1 stay local; W=2 and R=2 need DC 0.
    for (n, remote) in [(1, false), (2, true)] {
        let put = c.node(dc1).put(&key, b("v"), None, w(n)).await.unwrap();
        assert_eq!(put.remote, remote, "W={n} coordinated in DC 1");
        let (_, path) = c.node(dc1).get_with_path(&key, r(n)).await.unwrap();
        assert_eq!(path, remote, "R={n} coordinated in DC 1");
    }
    // A write sent to a DC-1 node that is not a replica is forwarded within DC 1, or crosses.
    let non_replica = (1..=6)
        .map(NodeId)
        .find(|n| dc_of(*n) == DcId(1) && !c.primaries(&key).contains(n))
        .unwrap();
    let put = c
        .node(non_replica)
        .put(&key, b("v"), None, w(1))
        .await
        .unwrap();
    assert!(
        !put.remote,
        "forwarded to the DC-1 replica, acknowledged there"
    );
}

#[tokio::test(start_paused = true)]
async fn read_replies_carry_each_replicas_load_back_to_the_coordinator() {
    let c = Cluster::start(12, Duration::from_secs(10)).await;
    let key = b"default:loaded".to_vec();
    let me = NodeId(1);
    c.node(me)
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    let (_, apl) = c.node(me).preflist_for(&key, 3);
    let peers: Vec<NodeId> = apl.nodes().filter(|&n| n != me).collect();
    assert!(!peers.is_empty());
    for &p in &peers {
        assert_eq!(c.node(me).replica_load(p), None, "{p}: nothing heard yet");
    }
    // `read_fanout = all` (the default) asks every replica; each reply brings its load.
    let all = get_opts(|p| p.r = Some(Quorum::Count(3)));
    c.node(me).get(&key, all).await.unwrap();
    for &p in &peers {
        let load = c.node(me).replica_load(p).expect("a reply's load is kept");
        assert!(
            load.queue < 1024,
            "{p}: a queue length, not garbage: {load:?}"
        );
    }
    // Other coordinators heard nothing.
    assert_eq!(c.node(peers[0]).replica_load(me), None);
}

/// Tombstone reaping (`delete_mode`): a tombstone a GET found on every primary, with nothing
/// to repair, is forgotten by every primary after the delay; a write after the GET keeps the
/// key; `keep` keeps tombstones; a GET that did not hear every primary reaps nothing.
#[tokio::test(start_paused = true)]
async fn tombstones_every_primary_holds_are_reaped_as_delete_mode_says() {
    let c = Cluster::start(83, Duration::from_secs(60)).await;
    let mut keep = BucketProps::default();
    keep.props.delete_mode = Some(meridian_cluster::DeleteMode::Keep);
    c.set_bucket("keep", keep).await;
    let all = get_opts(|p| p.r = Some(Quorum::All));
    let reaped = |c: &Cluster| -> u64 { c.nodes.iter().map(|n| n.stats().tombstones_reaped).sum() };
    let on_disk = |c: &Cluster, key: &[u8]| -> usize {
        c.primaries(key)
            .into_iter()
            .filter(|&p| c.node(p).store().get(key).unwrap().is_some())
            .count()
    };
    let delete = |key: Vec<u8>| {
        let node = c.node(NodeId(1)).clone();
        async move {
            let g = node.get(&key, GetOptions::default()).await.unwrap();
            node.delete(&key, Some(&g.context()), PutOptions::default())
                .await
                .unwrap();
            sleep(Duration::from_millis(500)).await;
        }
    };

    // Default (3000 ms): every primary forgets the key once the delay has passed.
    let key = b"default:reaped".to_vec();
    c.node(NodeId(1))
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    delete(key.clone()).await;
    assert_eq!(on_disk(&c, &key), 3, "tombstones on every primary");
    let g = c.node(NodeId(2)).get(&key, all).await.unwrap();
    assert!(matches!(g, GetResult::NotFound { .. }));
    sleep(Duration::from_millis(2000)).await;
    assert_eq!(on_disk(&c, &key), 3, "not before the delay");
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(on_disk(&c, &key), 0, "reaped everywhere");
    assert_eq!(reaped(&c), 3);
    let g = c.node(NodeId(4)).get(&key, all).await.unwrap();
    assert!(matches!(g, GetResult::NotFound { .. }));

    // A write between the GET and the reaping keeps the key.
    let key = b"default:rewritten".to_vec();
    c.node(NodeId(1))
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    delete(key.clone()).await;
    c.node(NodeId(2)).get(&key, all).await.unwrap();
    c.node(NodeId(3))
        .put(&key, b("again"), None, PutOptions::default())
        .await
        .unwrap();
    sleep(Duration::from_millis(4000)).await;
    let g = c.node(NodeId(5)).get(&key, all).await.unwrap();
    assert_eq!(g.values(), vec![b("again")]);
    assert_eq!(reaped(&c), 3);

    // `keep`: tombstones stay.
    let key = b"keep:k".to_vec();
    c.node(NodeId(1))
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    delete(key.clone()).await;
    c.node(NodeId(2)).get(&key, all).await.unwrap();
    sleep(Duration::from_millis(4000)).await;
    assert_eq!(on_disk(&c, &key), 3);

    // A primary cut off: the GET hears two primaries and reaps nothing.
    let key = key_where(&c, "default:cut", |p| !p.contains(&NodeId(1)));
    let prim = c.primaries(&key);
    c.node(NodeId(1))
        .put(&key, b("v"), None, PutOptions::default())
        .await
        .unwrap();
    delete(key.clone()).await;
    c.wan.cut_both(Scope::Node(prim[2]), Scope::Any);
    sleep(Duration::from_millis(1000)).await;
    let quorum = GetOptions::default();
    c.node(prim[0]).get(&key, quorum).await.unwrap();
    sleep(Duration::from_millis(4000)).await;
    assert_eq!(on_disk(&c, &key), 3);
    assert_eq!(reaped(&c), 3);
    c.wan.heal_all();
}

/// Reaping must not let an older copy bring a key back: a fallback's hint of a value the
/// delete superseded is buried under the tombstone before the primaries forget the key, so
/// delivering it afterwards delivers the tombstone.
#[tokio::test(start_paused = true)]
async fn a_hint_older_than_the_delete_does_not_bring_a_reaped_key_back() {
    let c = Cluster::start(84, Duration::from_secs(3600)).await;
    let key = key_where(&c, "default:ghost", |p| p[0] == NodeId(1));
    let prim = c.primaries(&key);
    let down = prim[2];
    let all = get_opts(|p| p.r = Some(Quorum::All));
    c.node(NodeId(1))
        .put(&key, b("v1"), None, PutOptions::default())
        .await
        .unwrap();
    // A write while one primary is down leaves a hint on a fallback.
    c.wan.isolate(down);
    c.settle().await;
    let g = c
        .node(NodeId(1))
        .get(&key, GetOptions::default())
        .await
        .unwrap();
    c.node(NodeId(1))
        .put(&key, b("v2"), Some(&g.context()), PutOptions::default())
        .await
        .unwrap();
    let holder = c
        .nodes
        .iter()
        .find(|n| n.store().get_hint(down, &key).unwrap().is_some())
        .expect("a fallback holds a hint")
        .id();
    c.wan.heal_all();
    c.settle().await;
    // Every primary gets v2 by read repair, then the delete; the hint stays.
    let g = c.node(NodeId(1)).get(&key, all).await.unwrap();
    sleep(Duration::from_millis(500)).await;
    c.node(NodeId(1))
        .delete(&key, Some(&g.context()), PutOptions::default())
        .await
        .unwrap();
    sleep(Duration::from_millis(500)).await;
    let g = c.node(NodeId(2)).get(&key, all).await.unwrap();
    assert!(matches!(g, GetResult::NotFound { .. }));
    sleep(Duration::from_secs(4)).await;
    for &p in &prim {
        assert!(c.node(p).store().get(&key).unwrap().is_none(), "{p} reaped");
    }
    // The hint was buried: handing it off now delivers the tombstone, not v2.
    let hint = c
        .node(holder)
        .store()
        .get_hint(down, &key)
        .unwrap()
        .unwrap();
    assert!(hint.is_tombstone_only(), "{hint:?}");
    c.node(holder).handoff_round().await.unwrap();
    let g = c.node(NodeId(2)).get(&key, all).await.unwrap();
    assert!(matches!(g, GetResult::NotFound { .. }), "{g:?}");
}
