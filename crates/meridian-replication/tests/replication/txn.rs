//! Transactional buckets on the embedded cluster (2 DCs × 3 nodes, 100 ms RTT between DCs,
//! 2 ms inside, virtual time): commits, first-committer-wins, WATCH, read-your-commits, the
//! bank invariant under concurrent transfers and audits (Clock-SI and both oracle clients),
//! the WAN cost of a cross-DC transfer, and recovery after a participant or coordinator crash.

use super::*;
use meridian_core::PartitionId;
use meridian_replication::{
    DirChange, PlannerConfig, ReplicationError, TimestampSource, TsoBatching, TxnError, TxnOptions,
    TxnProps,
};

async fn bank_cluster(seed: u64, txn: TxnProps) -> Cluster {
    let c = Cluster::start(seed, Duration::from_secs(3600)).await;
    c.set_bucket("bank", BucketProps::transactional(txn)).await;
    c
}

fn acct(i: usize) -> Bytes {
    b(&format!("bank:acct{i}"))
}

fn num(v: &Option<Bytes>) -> i64 {
    v.as_ref()
        .map(|v| std::str::from_utf8(v).unwrap().parse().unwrap())
        .unwrap_or(0)
}

/// The leader of `key`.
fn leader(c: &Cluster, key: &[u8]) -> NodeId {
    c.nodes[0].txn_leader(key).1
}

#[tokio::test(start_paused = true)]
async fn a_commit_is_read_everywhere_and_the_snapshot_is_fixed() {
    let c = bank_cluster(1, TxnProps::default()).await;
    let (a, z) = (acct(1), acct(2));
    let mut t = c.nodes[0].begin(TxnOptions::default());
    assert_eq!(t.read(std::slice::from_ref(&a)).await.unwrap(), vec![None]);
    t.write(a.clone(), Some(b("10"))).unwrap();
    t.write(z.clone(), Some(b("20"))).unwrap();
    // A transaction reads its own writes.
    assert_eq!(
        t.read(std::slice::from_ref(&a)).await.unwrap(),
        vec![Some(b("10"))]
    );
    let ts = t.commit().await.unwrap();
    // Another node, in the other DC, with the session token: sees both.
    let mut r = c.nodes[4].begin(TxnOptions {
        read_only: true,
        session: Some(ts),
    });
    assert_eq!(
        r.read(&[a.clone(), z.clone()]).await.unwrap(),
        vec![Some(b("10")), Some(b("20"))]
    );
    assert!(r.snapshot().unwrap() > ts);
    // A snapshot taken before a later commit keeps its view.
    let mut old = c.nodes[1].begin(TxnOptions::default());
    assert_eq!(
        old.read(std::slice::from_ref(&a)).await.unwrap(),
        vec![Some(b("10"))]
    );
    let mut w = c.nodes[2].begin(TxnOptions::default());
    w.write(a.clone(), Some(b("11"))).unwrap();
    w.commit().await.unwrap();
    assert_eq!(
        old.read(std::slice::from_ref(&a)).await.unwrap(),
        vec![Some(b("10"))]
    );
    // ... and cannot write what changed after it: first committer wins.
    old.write(a.clone(), Some(b("12"))).unwrap();
    let e = old.commit().await.unwrap_err();
    assert!(matches!(&e, TxnError::Aborted(_)), "{e:?}");
    assert_eq!(e.conflict_key(), Some(&a[..]));
    assert!(e.is_retryable());
    assert!(c.nodes[0].txn_stats().commits >= 1);
}

#[tokio::test(start_paused = true)]
async fn of_two_overlapping_writers_exactly_one_commits() {
    let c = bank_cluster(2, TxnProps::default()).await;
    let k = acct(7);
    for round in 0..5 {
        let mut t1 = c.nodes[0].begin(TxnOptions::default());
        let mut t2 = c.nodes[4].begin(TxnOptions::default());
        let v1 = t1.read(std::slice::from_ref(&k)).await.unwrap();
        let v2 = t2.read(std::slice::from_ref(&k)).await.unwrap();
        t1.write(k.clone(), Some(b(&(num(&v1[0]) + 1).to_string())))
            .unwrap();
        t2.write(k.clone(), Some(b(&(num(&v2[0]) + 1).to_string())))
            .unwrap();
        let (r1, r2) = tokio::join!(t1.commit(), t2.commit());
        assert_eq!(
            r1.is_ok() as u32 + r2.is_ok() as u32,
            1,
            "round {round}: {r1:?} {r2:?}"
        );
    }
    let mut r = c.nodes[3].begin(TxnOptions::default());
    assert_eq!(num(&r.read(&[k]).await.unwrap()[0]), 5, "no lost update");
}

#[tokio::test(start_paused = true)]
async fn a_watched_key_changed_by_another_aborts_the_commit() {
    let c = bank_cluster(3, TxnProps::default()).await;
    let (w, other) = (acct(3), acct(4));
    let mut t = c.nodes[0].begin(TxnOptions::default());
    t.watch(std::slice::from_ref(&w)).await.unwrap();
    let mut u = c.nodes[5].begin(TxnOptions::default());
    u.write(w.clone(), Some(b("1"))).unwrap();
    u.commit().await.unwrap();
    t.write(other.clone(), Some(b("x"))).unwrap();
    let e = t.commit().await.unwrap_err();
    assert_eq!(e.conflict_key(), Some(&w[..]));
    let mut r = c.nodes[1].begin(TxnOptions::default());
    assert_eq!(
        r.read(&[other]).await.unwrap(),
        vec![None],
        "nothing applied"
    );
}

#[tokio::test(start_paused = true)]
async fn transactions_refuse_keys_of_other_bucket_types() {
    let c = bank_cluster(4, TxnProps::default()).await;
    let mut t = c.nodes[0].begin(TxnOptions::default());
    let e = t.write(b("plain"), Some(b("1"))).unwrap_err();
    assert!(e.to_string().contains("not transactional"), "{e}");
    let mut ro = c.nodes[0].begin(TxnOptions {
        read_only: true,
        session: None,
    });
    assert!(ro.write(acct(1), Some(b("1"))).is_err());
    let big = Bytes::from(vec![0u8; 17 << 20]);
    let mut t = c.nodes[0].begin(TxnOptions::default());
    assert!(matches!(
        t.write(acct(1), Some(big)),
        Err(TxnError::TxnTooLarge { .. })
    ));
    let r: ReplicationError = TxnError::TxnTooLarge { bytes: 1, limit: 0 }.into();
    assert_eq!(r.code(), "txn_too_large");
}

/// A cross-DC transfer (two leaders in different DCs, coordinator in one of them) commits in
/// at most two WAN round trips plus 5 ms (Clock-SI, no skew): reads (1 RTT) + prepare (1 RTT).
#[tokio::test(start_paused = true)]
async fn a_transfer_between_dcs_commits_in_two_wan_round_trips() {
    let c = bank_cluster(5, TxnProps::default()).await;
    let dc = |n: NodeId| (n.0 - 1) / 3;
    let keys: Vec<Bytes> = (0..200).map(acct).collect();
    let a = keys
        .iter()
        .find(|k| dc(leader(&c, k)) == 0)
        .unwrap()
        .clone();
    let z = keys
        .iter()
        .find(|k| dc(leader(&c, k)) == 1)
        .unwrap()
        .clone();
    let coord = &c.nodes[(leader(&c, &a).0 - 1) as usize];
    let start = Instant::now();
    let mut t = coord.begin(TxnOptions::default());
    let v = t.read(&[a.clone(), z.clone()]).await.unwrap();
    t.write(a.clone(), Some(b(&(num(&v[0]) - 5).to_string())))
        .unwrap();
    t.write(z.clone(), Some(b(&(num(&v[1]) + 5).to_string())))
        .unwrap();
    t.commit().await.unwrap();
    let took = start.elapsed();
    println!("cross-DC transfer: {took:?}");
    assert!(took <= Duration::from_millis(205), "{took:?}");
}

async fn run_bank(c: &Cluster, seed: u64) {
    run_bank_with(c, seed, None).await;
}

/// A partition led by another node than `key`'s leader now (as `node` sees it), picked
/// with `r`.
fn elsewhere(node: &EventualNode, key: &[u8], r: u64) -> PartitionId {
    let now = node.txn_leader(key).1;
    let layout = node.layout();
    let others: Vec<PartitionId> = layout
        .ring()
        .partitions()
        .filter(|&p| layout.replicas(p).first() != Some(&now))
        .collect();
    others[r as usize % others.len()]
}

/// The bank of [`run_bank`]; with `mover`, that node moves random accounts to other leaders
/// every 20 ms while the transfers and audits run. Returns the keys moved.
async fn run_bank_with(c: &Cluster, seed: u64, mover: Option<usize>) -> usize {
    const ACCOUNTS: usize = 24;
    let mut t = c.nodes[0].begin(TxnOptions::default());
    for i in 0..ACCOUNTS {
        t.write(acct(i), Some(b("100"))).unwrap();
    }
    t.commit().await.unwrap();
    let mut tasks = Vec::new();
    for w in 0..6u64 {
        let node = c.nodes[w as usize].clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = seed.wrapping_mul(31).wrapping_add(w);
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let (mut ok, mut aborted) = (0, 0);
            for _ in 0..25 {
                let from = acct(next() as usize % ACCOUNTS);
                let to = acct(next() as usize % ACCOUNTS);
                if from == to {
                    continue;
                }
                let amount = (next() % 30) as i64;
                let mut t = node.begin(TxnOptions::default());
                let v = match t.read(&[from.clone(), to.clone()]).await {
                    Err(e) if !e.is_retryable() => panic!("{e:?}"),
                    Ok(v) => v,
                    Err(_) => {
                        aborted += 1;
                        continue;
                    }
                };
                let (f, tv) = (num(&v[0]), num(&v[1]));
                if f < amount {
                    continue;
                }
                t.write(from, Some(b(&(f - amount).to_string()))).unwrap();
                t.write(to, Some(b(&(tv + amount).to_string()))).unwrap();
                match t.commit().await {
                    Ok(_) => ok += 1,
                    Err(e) => {
                        assert!(e.is_retryable(), "{e:?}");
                        aborted += 1
                    }
                }
            }
            (ok, aborted)
        }));
    }
    let moving = mover.map(|m| {
        let node = c.nodes[m].clone();
        tokio::spawn(async move {
            let mut moved = 0;
            for round in 0..40u64 {
                let mut keys: Vec<(Bytes, PartitionId)> = (0..3u64)
                    .map(|j| {
                        let k = acct(((seed + round * 7 + j * 5) as usize) % ACCOUNTS);
                        let to = elsewhere(&node, &k, seed ^ (round * 31 + j));
                        (k, to)
                    })
                    .collect();
                keys.sort();
                keys.dedup_by(|a, b| a.0 == b.0);
                match node.txn_move_keys(keys).await {
                    Ok(r) => moved += r.moved,
                    Err(e) => panic!("a move batch failed: {e}"),
                }
                sleep(Duration::from_millis(20)).await;
            }
            moved
        })
    });
    let auditor = c.nodes[3].clone();
    let audits = tokio::spawn(async move {
        let keys: Vec<Bytes> = (0..ACCOUNTS).map(acct).collect();
        let mut n = 0;
        for _ in 0..20 {
            let mut t = auditor.begin(TxnOptions {
                read_only: true,
                session: None,
            });
            let r = t.read(&keys).await;
            if let Err(e) = &r {
                assert!(e.is_retryable(), "{e:?}");
            }
            if let Ok(v) = r {
                let total: i64 = v.iter().map(num).sum();
                assert_eq!(
                    total,
                    100 * ACCOUNTS as i64,
                    "an audit saw money appear or vanish"
                );
                assert!(v.iter().all(|b| num(b) >= 0));
                n += 1;
            }
            sleep(Duration::from_millis(20)).await;
        }
        n
    });
    let mut committed = 0;
    for t in tasks {
        committed += t.await.unwrap().0;
    }
    let audited = audits.await.unwrap();
    let moved = match moving {
        Some(m) => m.await.unwrap(),
        None => 0,
    };
    println!("bank: {committed} transfers committed, {audited} audits, {moved} keys moved");
    assert!(committed > 20, "the bank made progress");
    // Audits read every account: with keys moving, some meet a move and abort (retryably).
    assert!(
        audited >= if mover.is_some() { 5 } else { 15 },
        "{audited} audits"
    );
    let keys: Vec<Bytes> = (0..ACCOUNTS).map(acct).collect();
    let total: i64 = c.nodes[2]
        .retry_txn(TxnOptions::default(), 20, |mut t| {
            let keys = keys.clone();
            async move {
                let v = t.read(&keys).await?;
                Ok((t, v.iter().map(num).sum::<i64>()))
            }
        })
        .await
        .unwrap()
        .0;
    assert_eq!(total, 100 * ACCOUNTS as i64);
    moved
}

#[tokio::test(start_paused = true)]
async fn the_bank_keeps_its_total_under_clock_si() {
    run_bank(&bank_cluster(6, TxnProps::default()).await, 6).await;
}

#[tokio::test(start_paused = true)]
async fn the_bank_keeps_its_total_under_an_unbatched_oracle() {
    let props = TxnProps {
        timestamps: Some(TimestampSource::Tso),
        tso_max_rate: Some(64_000),
        ..TxnProps::default()
    };
    let c = bank_cluster(7, props).await;
    run_bank(&c, 7).await;
    let rpcs: u64 = c.nodes.iter().map(|n| n.txn_stats().tso_rpcs).sum();
    let stamps: u64 = c.nodes.iter().map(|n| n.txn_stats().tso_timestamps).sum();
    assert_eq!(rpcs, stamps, "unbatched: one timestamp per RPC");
}

#[tokio::test(start_paused = true)]
async fn the_bank_keeps_its_total_under_a_batched_oracle() {
    let props = TxnProps {
        timestamps: Some(TimestampSource::Tso),
        tso_batching: Some(TsoBatching::Batched),
        ..TxnProps::default()
    };
    run_bank(&bank_cluster(8, props).await, 8).await;
}

/// A participant crashes while prepared; after it restarts over its disk its marks are back
/// (a reader waits rather than missing the write), and it learns the outcome from the
/// coordinator.
#[tokio::test(start_paused = true)]
async fn a_participant_recovers_its_prepared_transactions_after_a_crash() {
    let mut c = bank_cluster(9, TxnProps::default()).await;
    let keys: Vec<Bytes> = (0..200).map(acct).collect();
    let a = keys
        .iter()
        .find(|k| leader(&c, k) == NodeId(1))
        .unwrap()
        .clone();
    let z = keys
        .iter()
        .find(|k| leader(&c, k) == NodeId(2))
        .unwrap()
        .clone();
    // NodeId(2) crashes right after it voted: delay the commit to it by cutting the link.
    c.wan
        .cut_both(Scope::Node(NodeId(1)), Scope::Node(NodeId(2)));
    let mut t = c.nodes[0].begin(TxnOptions::default());
    t.write(a.clone(), Some(b("1"))).unwrap();
    t.write(z.clone(), Some(b("2"))).unwrap();
    // The prepare to n2 cannot arrive: the transaction aborts, and nothing is visible.
    assert!(t.commit().await.is_err());
    c.wan.heal_all();
    let mut r = c.nodes[3].begin(TxnOptions::default());
    assert_eq!(
        r.read(&[a.clone(), z.clone()]).await.unwrap(),
        vec![None, None]
    );
    // Now a transaction that commits, then n2 restarts over its disk before anything else.
    let mut t = c.nodes[0].begin(TxnOptions::default());
    t.write(a.clone(), Some(b("3"))).unwrap();
    t.write(z.clone(), Some(b("4"))).unwrap();
    let ts = t.commit().await.unwrap();
    let disk = c.engines[1].clone();
    c.restart_on(NodeId(2), disk).await;
    c.settle().await;
    let mut r = c.nodes[4].begin(TxnOptions {
        read_only: true,
        session: Some(ts),
    });
    assert_eq!(
        r.read(&[a, z]).await.unwrap(),
        vec![Some(b("3")), Some(b("4"))]
    );
}

/// Transactional data lives at partition leaders and leadership does not move with its data
/// yet: membership changes are refused while a transactional bucket exists, saying why.
#[tokio::test(start_paused = true)]
async fn membership_changes_are_refused_while_a_transactional_bucket_exists() {
    let c = bank_cluster(10, TxnProps::default()).await;
    let e = c.nodes[0]
        .change(MetaChange::Leave(NodeId(6)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "membership_refused");
    assert!(
        e.to_string().contains("bucket bank is transactional"),
        "{e}"
    );
}

/// `Node::retry_txn`: concurrent read-modify-write transactions from both DCs, each retried
/// on conflicts with backoff, lose no increment.
#[tokio::test(start_paused = true)]
async fn retried_transactions_lose_no_increment() {
    let c = bank_cluster(11, TxnProps::default()).await;
    let k = acct(42);
    let mut tasks = Vec::new();
    for n in [0usize, 2, 3, 5] {
        let node = c.nodes[n].clone();
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                node.retry_txn(TxnOptions::default(), 100, |mut t| {
                    let k = k.clone();
                    async move {
                        let v = t.read(std::slice::from_ref(&k)).await?;
                        let next = num(&v[0]) + 1;
                        t.write(k, Some(b(&next.to_string())))?;
                        Ok((t, next))
                    }
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut r = c.nodes[1].begin(TxnOptions::default());
    assert_eq!(num(&r.read(&[k]).await.unwrap()[0]), 40);
}

/// Keys led by node 1 (DC 0) and by a node of DC 1, for the 2PC crash tests.
fn split_keys(c: &Cluster) -> (Bytes, Bytes, NodeId) {
    let keys: Vec<Bytes> = (0..400).map(acct).collect();
    let a = keys
        .iter()
        .find(|k| leader(c, k) == NodeId(1))
        .unwrap()
        .clone();
    let z = keys.iter().find(|k| leader(c, k).0 > 3).unwrap().clone();
    let l = leader(c, &z);
    (a, z, l)
}

/// The coordinator crashes after its decision, before the remote participant got `Commit`:
/// the restarted coordinator replays its decision log and the participant commits; the
/// client, who was told "committed", reads both writes.
#[tokio::test(start_paused = true)]
async fn a_coordinator_crash_after_the_decision_still_commits_everywhere() {
    let mut c = bank_cluster(12, TxnProps::default()).await;
    let (a, z, l) = split_keys(&c);
    let coord = c.nodes[0].clone();
    let (a2, z2) = (a.clone(), z.clone());
    let client = tokio::spawn(async move {
        let mut t = coord.begin(TxnOptions::default());
        t.write(a2, Some(b("1"))).unwrap();
        t.write(z2, Some(b("2"))).unwrap();
        t.commit().await
    });
    // 50 ms one way between the DCs: the prepare reaches the participant at 50 ms, its vote
    // returns at 100 ms, and the commit that follows the decision is cut off.
    sleep(Duration::from_millis(75)).await;
    c.wan.cut(Scope::Node(NodeId(1)), Scope::Node(l));
    let ts = client
        .await
        .unwrap()
        .expect("the decision was logged: committed");
    let disk = c.engines[0].clone();
    c.restart_on(NodeId(1), disk).await;
    c.wan.heal(Scope::Node(NodeId(1)), Scope::Node(l));
    // The restarted coordinator re-sends its decision at once: the participant commits well
    // before its own outcome query (after prepare_ttl, 2 s) would have.
    let mut r = c.nodes[4].begin(TxnOptions {
        read_only: true,
        session: Some(ts),
    });
    let keys = [a, z];
    let read = tokio::time::timeout(Duration::from_millis(500), r.read(&keys));
    assert_eq!(
        read.await
            .expect("committed by the replayed decision")
            .unwrap(),
        vec![Some(b("1")), Some(b("2"))]
    );
}

/// The coordinator crashes while collecting votes (no decision): presumed abort. Both
/// participants — the remote one and the coordinator's own, replayed from its log — learn
/// "aborted" by asking, release their keys, and nothing is visible.
#[tokio::test(start_paused = true)]
async fn a_coordinator_crash_before_the_decision_aborts_everywhere() {
    let mut c = bank_cluster(13, TxnProps::default()).await;
    let (a, z, l) = split_keys(&c);
    let coord = c.nodes[0].clone();
    let (a2, z2) = (a.clone(), z.clone());
    let _client = tokio::spawn(async move {
        let mut t = coord.begin(TxnOptions::default());
        t.write(a2, Some(b("1"))).unwrap();
        t.write(z2, Some(b("2"))).unwrap();
        t.commit().await
    });
    // The participant's vote is cut off before it is sent (the prepare, on its way, still
    // arrives at 50 ms); the coordinator crashes while it waits.
    sleep(Duration::from_millis(25)).await;
    c.wan.cut(Scope::Node(l), Scope::Node(NodeId(1)));
    sleep(Duration::from_millis(50)).await;
    let disk = c.engines[0].clone();
    c.restart_on(NodeId(1), disk).await;
    c.wan.heal(Scope::Node(l), Scope::Node(NodeId(1)));
    // prepare_ttl (2 s) later both participants ask and abort.
    sleep(Duration::from_secs(5)).await;
    let mut r = c.nodes[4].begin(TxnOptions::default());
    assert_eq!(
        r.read(&[a.clone(), z.clone()]).await.unwrap(),
        vec![None, None]
    );
    // No mark is left: a new transaction writes both keys at once.
    let mut w = c.nodes[2].begin(TxnOptions::default());
    w.write(a, Some(b("x"))).unwrap();
    w.write(z, Some(b("y"))).unwrap();
    w.commit().await.unwrap();
}

/// A single-leader commit whose answer is lost is not reported as an abort (an abort has no
/// effect; this one applied): the client is told the outcome is unknown.
#[tokio::test(start_paused = true)]
async fn a_lost_commit_answer_is_an_unknown_outcome_not_an_abort() {
    let c = bank_cluster(14, TxnProps::default()).await;
    let (_, z, l) = split_keys(&c);
    c.wan.cut(Scope::Node(l), Scope::Node(NodeId(1)));
    let mut t = c.nodes[0].begin(TxnOptions::default());
    t.write(z.clone(), Some(b("7"))).unwrap();
    let e = t.commit().await.unwrap_err();
    assert!(matches!(e, TxnError::OutcomeUnknown(_)), "{e:?}");
    assert!(!e.is_retryable());
    c.wan.heal_all();
    let mut r = c.nodes[4].begin(TxnOptions::default());
    assert_eq!(
        r.read(&[z]).await.unwrap(),
        vec![Some(b("7"))],
        "it did commit"
    );
}

/// Keys move between leaders while transfers and audits run (spec `repartitioning.md` §6,
/// invariant 9): the total holds in every audit snapshot, and every abort a move causes is
/// retryable.
#[tokio::test(start_paused = true)]
async fn the_bank_keeps_its_total_while_keys_move_between_leaders() {
    let c = bank_cluster(15, TxnProps::default()).await;
    let moved = run_bank_with(&c, 15, Some(1)).await;
    assert!(moved >= 40, "{moved} keys moved");
    assert!(!c.nodes[0].meta().key_directory.is_empty());
    // Every node's directory copy caught up, and sends each key to one leader.
    sleep(Duration::from_secs(2)).await;
    for i in 0..24 {
        let k = acct(i);
        let l: BTreeSet<NodeId> = c.nodes.iter().map(|n| n.txn_leader(&k).1).collect();
        assert_eq!(l.len(), 1, "{k:?} has leaders {l:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_bank_keeps_its_total_while_keys_move_under_an_oracle() {
    let props = TxnProps {
        timestamps: Some(TimestampSource::Tso),
        tso_batching: Some(TsoBatching::Batched),
        ..TxnProps::default()
    };
    let c = bank_cluster(16, props).await;
    assert!(run_bank_with(&c, 16, Some(4)).await >= 40);
}

/// A transaction that read a key at one partition never writes it at another: the move in
/// between aborts it (retryable, no effect); a snapshot older than the move reads the same
/// version at the new leader; the old leader sends stale coordinators on.
#[tokio::test(start_paused = true)]
async fn a_transaction_never_touches_a_key_at_two_partitions() {
    let c = bank_cluster(17, TxnProps::default()).await;
    let (k, other) = (acct(1), acct(2));
    let mut t = c.nodes[0].begin(TxnOptions::default());
    t.write(k.clone(), Some(b("10"))).unwrap();
    t.write(other.clone(), Some(b("0"))).unwrap();
    t.commit().await.unwrap();
    let (p, old) = c.nodes[0].txn_leader(&k);
    // A reader fixes its snapshot and reads k before the move; a writer reads k.
    let mut reader = c.nodes[5].begin(TxnOptions::default());
    assert_eq!(
        reader.read(std::slice::from_ref(&other)).await.unwrap(),
        vec![Some(b("0"))]
    );
    let mut writer = c.nodes[2].begin(TxnOptions::default());
    assert_eq!(
        writer.read(std::slice::from_ref(&k)).await.unwrap(),
        vec![Some(b("10"))]
    );
    let to = elsewhere(&c.nodes[4], &k, 3);
    let r = c.nodes[4]
        .txn_move_keys(vec![(k.clone(), to)])
        .await
        .unwrap();
    assert_eq!(r.moved, 1);
    sleep(Duration::from_millis(300)).await;
    let (p2, new) = c.nodes[2].txn_leader(&k);
    assert_eq!(p2, to);
    assert_ne!(new, old);
    assert_ne!(p2, p);
    // The writer read k at p: writing it at the new partition aborts, retryably, leaving
    // nothing.
    writer.write(k.clone(), Some(b("11"))).unwrap();
    let e = writer.commit().await.unwrap_err();
    assert!(matches!(&e, TxnError::Aborted(_)), "{e:?}");
    assert!(e.to_string().contains("key_moving"), "{e}");
    assert!(e.is_retryable());
    // The old snapshot reads the same version at the new leader.
    assert_eq!(
        reader.read(std::slice::from_ref(&k)).await.unwrap(),
        vec![Some(b("10"))]
    );
    // Retried, the increment applies once, at the new leader.
    let (v, _) = c.nodes[2]
        .retry_txn(TxnOptions::default(), 10, |mut t| {
            let k = k.clone();
            async move {
                let v = num(&t.read(std::slice::from_ref(&k)).await?[0]) + 1;
                t.write(k, Some(b(&v.to_string())))?;
                Ok((t, v))
            }
        })
        .await
        .unwrap();
    assert_eq!(v, 11);
    // Moved back home: the directory forgets the key, and the value travelled along.
    let r = c.nodes[0]
        .txn_move_keys(vec![(k.clone(), p)])
        .await
        .unwrap();
    assert_eq!(r.moved, 1);
    assert!(c.nodes[0].meta().key_directory.is_empty());
    let mut r = c.nodes[3].begin(TxnOptions::default());
    assert_eq!(r.read(&[k]).await.unwrap(), vec![Some(b("11"))]);
}

/// The planner on the claimant (spec §6): transactions over hidden affinity groups of four
/// accounts, which hashing scatters over the six leaders, end up mostly on one leader each,
/// while the bank's total holds in every audit.
#[tokio::test(start_paused = true)]
async fn the_planner_colocates_affinity_groups_while_the_bank_keeps_its_total() {
    const GROUPS: usize = 12;
    let c = bank_cluster(18, TxnProps::default()).await;
    let key = |g: usize, j: usize| acct(g * 4 + j);
    let all: Vec<Bytes> = (0..GROUPS * 4).map(acct).collect();
    let mut t = c.nodes[0].begin(TxnOptions::default());
    for k in &all {
        t.write(k.clone(), Some(b("100"))).unwrap();
    }
    t.commit().await.unwrap();
    let colocated = |c: &Cluster| {
        (0..GROUPS)
            .filter(|&g| {
                let ls: BTreeSet<NodeId> = (0..4).map(|j| leader(c, &key(g, j))).collect();
                ls.len() == 1
            })
            .count()
    };
    let before = colocated(&c);
    let cfg = PlannerConfig {
        plan_interval_us: 5_000_000,
        window: 2_000,
        min_gain: 8,
        ..PlannerConfig::default()
    };
    for n in &c.nodes {
        n.set_txn_planner(Some(cfg));
    }
    let stop = Instant::now() + Duration::from_secs(25);
    let mut tasks = Vec::new();
    for w in 0..6u64 {
        let node = c.nodes[w as usize].clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (w + 1);
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut ok = 0;
            while Instant::now() < stop {
                let g = next() as usize % GROUPS;
                let (from, to) = (next() as usize % 4, next() as usize % 4);
                let keys: Vec<Bytes> = (0..4).map(|j| acct(g * 4 + j)).collect();
                let r = node
                    .retry_txn(TxnOptions::default(), 10, |mut t| {
                        let keys = keys.clone();
                        async move {
                            let v = t.read(&keys).await?;
                            if from != to && num(&v[from]) >= 5 {
                                t.write(
                                    keys[from].clone(),
                                    Some(b(&(num(&v[from]) - 5).to_string())),
                                )?;
                                t.write(keys[to].clone(), Some(b(&(num(&v[to]) + 5).to_string())))?;
                            }
                            Ok((t, ()))
                        }
                    })
                    .await;
                match r {
                    Ok(_) => ok += 1,
                    Err(e) => assert!(e.is_retryable(), "{e:?}"),
                }
                sleep(Duration::from_millis(10)).await;
            }
            ok
        }));
    }
    let auditor = c.nodes[4].clone();
    let audit_keys = all.clone();
    let audits = tokio::spawn(async move {
        let mut n = 0;
        while Instant::now() < stop {
            let mut t = auditor.begin(TxnOptions {
                read_only: true,
                session: None,
            });
            match t.read(&audit_keys).await {
                Ok(v) => {
                    let total: i64 = v.iter().map(num).sum();
                    assert_eq!(
                        total,
                        100 * audit_keys.len() as i64,
                        "an audit saw money appear or vanish"
                    );
                    n += 1;
                }
                Err(e) => assert!(e.is_retryable(), "{e:?}"),
            }
            sleep(Duration::from_millis(500)).await;
        }
        n
    });
    let mut committed = 0;
    for t in tasks {
        committed += t.await.unwrap();
    }
    let audited = audits.await.unwrap();
    sleep(Duration::from_secs(1)).await;
    let after = colocated(&c);
    let moved = c.nodes[0].meta().key_directory.len();
    println!(
        "planner: {committed} transactions, {audited} audits, {moved} keys in the directory, \
         groups on one leader {before}/{GROUPS} -> {after}/{GROUPS}"
    );
    assert!(audited >= 10);
    assert!(moved > 0, "the planner moved keys");
    assert!(
        after >= GROUPS * 3 / 4,
        "{before} -> {after} of {GROUPS} groups co-located"
    );
}

/// A mover that dies after `Moving` was published leaves its keys refusing writes
/// (retryably); the claimant gives the move up after a minute without directory change, and
/// the key is written at its old leader again.
#[tokio::test(start_paused = true)]
async fn the_claimant_gives_up_a_move_whose_mover_died() {
    let c = bank_cluster(19, TxnProps::default()).await;
    let k = acct(3);
    let write = |n: usize, v: &str| {
        let node = c.nodes[n].clone();
        let (k, v) = (k.clone(), b(v));
        async move {
            let mut t = node.begin(TxnOptions::default());
            t.write(k, Some(v))?;
            t.commit().await
        }
    };
    write(2, "1").await.unwrap();
    let (p, _) = c.nodes[0].txn_leader(&k);
    let to = elsewhere(&c.nodes[0], &k, 1);
    // The mover's first step only: the directory says Moving, nothing else happens.
    c.nodes[5]
        .change(MetaChange::KeyDirectory(DirChange::Begin(vec![(
            k.clone(),
            to,
        )])))
        .await
        .unwrap();
    sleep(Duration::from_millis(300)).await;
    let e = write(2, "2").await.unwrap_err();
    assert!(e.to_string().contains("key_moving"), "{e}");
    assert!(e.is_retryable());
    sleep(Duration::from_secs(70)).await;
    assert!(c.nodes[0].meta().key_directory.is_empty());
    assert_eq!(c.nodes[4].txn_leader(&k).0, p);
    write(2, "3").await.unwrap();
    let mut r = c.nodes[4].begin(TxnOptions::default());
    assert_eq!(r.read(&[k]).await.unwrap(), vec![Some(b("3"))]);
}

/// The phases a full listing from node 1 goes through: the first byte of each position.
async fn listing_phases(c: &Cluster) -> Vec<u8> {
    use meridian_replication::listing::ListPos;
    let mut phases = Vec::new();
    let mut at = Some(ListPos::start());
    while let Some(pos) = at {
        phases.push(pos.encode()[0]);
        let (_, next) = c
            .node(NodeId(1))
            .list_live_keys(pos, 1000, &[true; 64], |_| true)
            .await
            .unwrap();
        at = next;
    }
    phases.dedup();
    phases
}

#[tokio::test(start_paused = true)]
async fn a_listing_asks_the_leaders_only_while_a_bucket_is_transactional() {
    let c = Cluster::start(44, Duration::from_secs(3600)).await;
    // Eventual objects, then timeline records; no round trip to any leader.
    assert_eq!(listing_phases(&c).await, b"et");
    c.set_bucket("bank", BucketProps::transactional(TxnProps::default()))
        .await;
    let phases = listing_phases(&c).await;
    assert_eq!(&phases[..2], b"et");
    assert!(
        phases[2..].iter().all(|&p| p == b'x') && phases.len() > 2,
        "{phases:?}"
    );
}
