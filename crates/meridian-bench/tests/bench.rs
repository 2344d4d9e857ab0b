//! The instrument end to end: every consistency mode on the simulated cluster in virtual
//! time (load, warm-up, measurement), checked against what the protocol must produce, and a
//! small design run through the experiment engine on real clusters, resumed and reported.

use std::time::Duration;

use meridian_bench::cell::{CellConfig, CellResult, Clock, WarmupConfig, run_cell};
use meridian_bench::cluster::{ClusterSpec, Mode};
use meridian_bench::executor::ClusterExecutor;
use meridian_bench::experiment::{Design, Event, analyze_design, run_design, write_report};
use meridian_bench::output;
use meridian_bench::runner::{Arrival, RunConfig};
use meridian_bench::stats::{Scope, Summary};
use meridian_bench::workload::CoreWorkload;

fn cell(mode: Mode, locality: f64, seed: u64) -> CellConfig {
    let mut run = RunConfig::new(
        Arrival::Paced {
            threads: 32,
            rate_per_thread: 15.0,
        },
        Duration::from_secs(20),
    );
    run.warmup = Duration::from_secs(2);
    run.seed = seed;
    CellConfig {
        cluster: ClusterSpec {
            mode,
            wan_rtt: Duration::from_millis(200),
            seed,
            ..ClusterSpec::default()
        },
        workload: CoreWorkload {
            record_count: 400,
            read_proportion: 2.0 / 3.0,
            update_proportion: 1.0 / 3.0,
            field_count: 1,
            field_length: 100,
            locality: Some(locality),
            dcs: 2,
            ..CoreWorkload::default()
        },
        run,
        load_threads: 16,
        warmup: WarmupConfig::default(),
        clock: Clock::Virtual,
    }
}

fn run(cfg: &CellConfig) -> CellResult {
    println!("{:?} seed {}", cfg.cluster.mode, cfg.cluster.seed);
    run_cell(cfg, &mut |_| {}, &mut |_| {}).expect("the cell runs")
}

fn summary<'a>(r: &'a CellResult, op: &str, scope: Scope) -> &'a Summary {
    r.run
        .report
        .summaries
        .iter()
        .find(|s| s.op == op && s.scope == scope)
        .unwrap_or_else(|| panic!("no {op} {scope:?} summary"))
}

fn remote_share(r: &CellResult, op: &str) -> f64 {
    let remote = summary(r, op, Scope::Remote).count as f64;
    remote / summary(r, op, Scope::Total).count as f64
}

const RTT_US: u64 = 200_000;

#[test]
fn each_mode_crosses_the_wan_exactly_where_the_protocol_says() {
    // ind1: R=1, W=1 are always answered in the client's DC.
    let ind1 = run(&cell(Mode::Ind1, 0.9, 11));
    assert!(
        ind1.run.report.errors_by_code.is_empty(),
        "{:?}",
        ind1.run.report.errors_by_code
    );
    assert_eq!(remote_share(&ind1, "read"), 0.0);
    assert_eq!(remote_share(&ind1, "update"), 0.0);
    assert!(summary(&ind1, "update", Scope::Total).max_us < RTT_US);

    // ind2: W=2 waits for the other DC for keys with one local replica: about half.
    let ind2 = run(&cell(Mode::Ind2, 0.9, 12));
    let s = remote_share(&ind2, "update");
    assert!((0.35..0.65).contains(&s), "ind2 remote updates {s}");
    assert_eq!(remote_share(&ind2, "read"), 0.0);
    let remote = summary(&ind2, "update", Scope::Remote);
    assert!(
        remote.p50_us >= RTT_US && remote.p50_us < RTT_US + 10_000,
        "{}",
        remote.p50_us
    );

    // lt_rec, locality 0.9, T = 3: after the warm-up, masters sit at home; about 10 % of
    // reads and writes cross (timeline.md §9: 10.2 %).
    let lt_rec = run(&cell(Mode::LtRec, 0.9, 13));
    let home = lt_rec.phases.home_mastered_after_warmup.unwrap();
    assert!(home > 0.9, "home-mastered after warm-up {home}");
    assert!(lt_rec.phases.warmup_passes >= 1);
    for op in ["read", "update"] {
        let s = remote_share(&lt_rec, op);
        assert!((0.05..0.2).contains(&s), "lt_rec remote {op}s {s}");
        assert!(summary(&lt_rec, op, Scope::Remote).p50_us >= RTT_US);
        assert!(summary(&lt_rec, op, Scope::Local).p50_us < RTT_US / 2);
    }

    // lt_qqer reads any replica: never remote; its writes are remote like lt_rec's.
    let lt_qqer = run(&cell(Mode::LtQqer, 0.9, 14));
    assert_eq!(remote_share(&lt_qqer, "read"), 0.0);
    let s = remote_share(&lt_qqer, "update");
    assert!((0.05..0.2).contains(&s), "lt_qqer remote updates {s}");

    // Locality 0.5 leaves masters anywhere: about half of lt_rec's requests cross.
    let half = run(&cell(Mode::LtRec, 0.5, 15));
    let s = remote_share(&half, "read");
    assert!((0.35..0.65).contains(&s), "lt_rec loc 0.5 remote reads {s}");
}

#[test]
fn a_virtual_cell_replays_exactly_from_its_seed() {
    let cfg = cell(Mode::LtRec, 0.9, 21);
    let (a, b) = (run(&cfg), run(&cfg));
    assert_eq!(a.run.report, b.run.report, "same seed, same report");
    assert_eq!(a.phases, b.phases);
    assert_eq!(a.counters, b.counters);
    let c = run(&cell(Mode::LtRec, 0.9, 22));
    assert_ne!(a.run.report, c.run.report, "another seed, another run");
}

#[test]
fn a_design_runs_on_clusters_resumes_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let design = Design::parse(
        r#"
        name = "tiny"
        design = { kind = "two_k", replications = 2, order_seed = 3 }
        factors = { mode = ["ind1", "lt_rec"], wan_rtt_ms = [0, 100] }
        fixed = { objects = 100, locality = 0.9, threads = 8, measure_s = 5, warmup_s = 1, warmup_passes = 3, load_threads = 8 }
        "#,
    )
    .unwrap();
    let executor = || ClusterExecutor {
        default_clock: Clock::Virtual,
        host: serde_json::json!({"test": true}),
        on_phase: Box::new(|_| {}),
        progress: Box::new(|_| {}),
    };
    let first = run_design(&design, dir.path(), &mut executor(), &mut |_| {}).unwrap();
    assert!(first.is_complete(), "{:?}", first.failures);
    assert_eq!((first.executed, first.records.len()), (8, 8));
    let mut events = Vec::new();
    let again = run_design(&design, dir.path(), &mut executor(), &mut |e| {
        events.push(matches!(e, Event::Skipped { .. }));
    })
    .unwrap();
    assert_eq!((again.executed, again.skipped), (0, 8));
    assert!(events.iter().all(|&skipped| skipped));
    // The stored records come back (floats through JSON to within rounding: compare the CSV).
    let key = |rs: &[meridian_bench::experiment::RunRecord]| -> Vec<(String, String)> {
        rs.iter()
            .map(|r| (r.run.label(), r.outcome.report.to_csv()))
            .collect()
    };
    assert!(
        key(&again.records) == key(&first.records),
        "resumed records are the stored ones"
    );

    let analysis = analyze_design(&design, &again.records).unwrap();
    let summary = write_report(
        &design,
        &again.records,
        &analysis,
        dir.path(),
        &output::design_plots,
    )
    .unwrap();
    let text = std::fs::read_to_string(summary).unwrap();
    assert!(text.contains("Allocation of variation"), "{text}");
    assert!(text.contains("boxplots"), "plots are linked");
    assert!(text.contains("Accuracy of the mean latencies"), "{text}");
    // The WAN latency explains most of lt_rec's update latency variation with ind1 flat:
    // the interaction and both main effects show up in the allocation.
    let row = analysis
        .allocation
        .iter()
        .find(|r| r.response == "update.total.mean")
        .expect("update mean analysed");
    let wan = row.allocation.fraction("wan_rtt_ms").unwrap();
    assert!(wan > 0.2, "wan_rtt_ms explains {wan}");
    for r in &again.records {
        let p = dir.path().join(r.run.rel_dir()).join("percentiles.csv");
        assert!(
            std::fs::read_to_string(p)
                .unwrap()
                .starts_with("consist,loc,pop,r_w,delay")
        );
        let log = dir.path().join(r.run.rel_dir()).join("histograms.hlog");
        let log = std::fs::read_to_string(log).unwrap();
        assert!(
            log.contains("read.total") && log.contains("update.local"),
            "{log}"
        );
    }
}

mod ycsbt {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use meridian_bench::ycsbt::{
        EconomyConfig, Protocol, RunSpec, ServiceModel, TXN_BUCKET, TxnClient, YcsbtWorkload,
        closed_economy, run_clients,
    };
    use meridian_replication::{BucketProps, EventualNode};
    use meridian_sim::SyncPolicy;
    use meridian_sim::cluster::{SimCluster, SimConfig};
    use rand::SeedableRng;

    async fn tiny(protocol: Protocol) -> (SimCluster, Vec<EventualNode>) {
        let c = SimCluster::start(SimConfig {
            dcs: 1,
            nodes_per_dc: 3,
            n: 3,
            sync: SyncPolicy::Never,
            buckets: [(
                TXN_BUCKET.to_owned(),
                BucketProps::transactional(protocol.props(0, Some(64_000))),
            )]
            .into(),
            ..SimConfig::default()
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let nodes = c.live().read().values().cloned().collect();
        (c, nodes)
    }

    #[tokio::test(start_paused = true)]
    async fn ycsbt_transactions_touch_the_partitions_asked_for_and_commit() {
        let (c, nodes) = tiny(Protocol::ClockSi).await;
        let leaders: Vec<_> = nodes.iter().map(EventualNode::id).collect();
        let w = YcsbtWorkload {
            key_count: 10_000,
            ..YcsbtWorkload::default()
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let keys = w
            .transaction(&nodes[0], &leaders[..2], &mut rng)
            .expect("keys");
        assert_eq!(keys.len(), 16, "8 items per partition");
        assert_eq!(keys.iter().collect::<BTreeSet<_>>().len(), 16, "distinct");
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(nodes[0].txn_leader(k).1, leaders[i / 8]);
        }
        for read_only in [true, false] {
            let clients = nodes
                .iter()
                .map(|n| {
                    let mut order = vec![n.id()];
                    order.extend(leaders.iter().copied().filter(|&l| l != n.id()));
                    TxnClient {
                        origin: n.clone(),
                        partitions: order,
                        nearest: false,
                        group: "lan".into(),
                    }
                })
                .collect();
            let spec = RunSpec {
                workload: YcsbtWorkload {
                    read_only,
                    ..w.clone()
                },
                partitions_per_txn: 2,
                warmup: Duration::from_millis(100),
                measure: Duration::from_millis(500),
                client_hop: Duration::from_millis(2),
                service: Some(ServiceModel {
                    per_message_us: 100.0,
                    update_extra_us: 100.0,
                }),
                seed: 3,
            };
            let out = run_clients(clients, &nodes, &spec).await.expect("run");
            assert!(out.commits > 10, "{read_only}: {out:?}");
            assert_eq!(out.all_latency().len(), out.commits);
            if read_only {
                assert_eq!(out.abort_count(), 0, "read-only transactions never abort");
            }
        }
        c.shutdown();
    }

    #[tokio::test(start_paused = true)]
    async fn the_closed_economy_keeps_its_total_under_both_timestamp_sources() {
        for protocol in [Protocol::ClockSi, Protocol::TsoUnbatched] {
            let (c, nodes) = tiny(protocol).await;
            let r = closed_economy(
                &nodes,
                &EconomyConfig {
                    accounts: 10,
                    clients: 6,
                    transfers_per_client: 10,
                    audit_every: 5,
                    ..EconomyConfig::default()
                },
            )
            .await
            .expect("economy");
            assert_eq!(r.counted_total, r.expected_total, "{protocol:?}: {r:?}");
            assert_eq!(r.score, 0.0);
            assert_eq!(r.bad_audits, 0);
            assert_eq!(r.audits, 12);
            assert_eq!(r.committed + r.aborted, 60);
            assert_eq!(r.operations, 60 + 12 + 1);
            assert!(r.committed > 0);
            c.shutdown();
        }
    }
}

/// The cross-node planner study (spec `repartitioning.md` §6): its quick variant in virtual
/// time. The figures are virtual-time counts, not wall-clock.
mod affinity {
    use meridian_bench::affinity::{AffinityConfig, Phase, run};

    /// Planning co-locates the hidden groups: the fraction of distributed transactions (and
    /// of 2PC commits) drops by at least 80 %, keys moved, and throughput went up.
    #[test]
    fn the_planner_cuts_distributed_transactions_on_hidden_affinity_groups() {
        let r = run(&AffinityConfig::quick(7)).unwrap();
        let (b, a) = (
            r.phase(Phase::Before).unwrap(),
            r.phase(Phase::After).unwrap(),
        );
        println!(
            "distributed {:.3} -> {:.3}, 2PC {} -> {}, txn/s {:.0} -> {:.0}, p99 {:.1} -> {:.1} ms, rounds {:?}",
            b.distributed_fraction,
            a.distributed_fraction,
            b.two_phase_commits,
            a.two_phase_commits,
            b.txn_per_s,
            a.txn_per_s,
            b.p99_ms,
            a.p99_ms,
            r.rounds.iter().map(|r| r.keys_moved).collect::<Vec<_>>()
        );
        assert!(b.commits > 100 && a.commits > 100, "{b:?} {a:?}");
        assert!(
            b.distributed_fraction > 0.5,
            "hashing scatters the groups: {b:?}"
        );
        assert!(
            r.distributed_reduction() >= 0.8,
            "distributed {:.3} -> {:.3}",
            b.distributed_fraction,
            a.distributed_fraction
        );
        assert!(
            a.two_phase_fraction <= 0.2 * b.two_phase_fraction,
            "2PC {:.3} -> {:.3}",
            b.two_phase_fraction,
            a.two_phase_fraction
        );
        assert!(r.keys_moved() > 0 && !r.rounds.is_empty());
        assert!(a.txn_per_s > b.txn_per_s, "{b:?} {a:?}");
    }

    /// The control: the same run with the planner never on keeps its transactions
    /// distributed, so the test above cannot pass without the planner.
    #[test]
    fn without_the_planner_transactions_stay_distributed() {
        let mut cfg = AffinityConfig::quick(7);
        cfg.planner = None;
        let r = run(&cfg).unwrap();
        let (b, a) = (
            r.phase(Phase::Before).unwrap(),
            r.phase(Phase::After).unwrap(),
        );
        assert_eq!(r.keys_moved(), 0);
        assert!(r.rounds.is_empty());
        assert!(
            r.distributed_reduction() < 0.2,
            "distributed {:.3} -> {:.3}",
            b.distributed_fraction,
            a.distributed_fraction
        );
    }
}
