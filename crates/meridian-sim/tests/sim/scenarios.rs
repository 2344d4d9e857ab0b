//! Simulations of the named scenarios: the real cluster in virtual time. Every run prints its
//! scenario and seed; `meridian sim --scenario NAME --seed S` replays it.

use meridian_core::{DcId, NodeId};
use meridian_sim::faults::{Fault, ScheduledFault};
use meridian_sim::scenario::{Scenario, run, scenario, scenarios};
use meridian_sim::{TlOp, TlResult};
use std::time::Duration;

fn history_bytes(s: &Scenario, seed: u64) -> Vec<u8> {
    let r = run(s, seed);
    let mut out = Vec::new();
    r.history.save(&mut out).unwrap();
    out
}

#[test]
fn one_seed_gives_the_same_history_byte_for_byte() {
    let mut s = scenario("chaos").unwrap();
    s.duration = Duration::from_secs(20);
    for seed in [7, 8] {
        println!("scenario chaos seed {seed}");
        let a = history_bytes(&s, seed);
        let b = history_bytes(&s, seed);
        assert!(a.len() > 10_000, "a real history: {} bytes", a.len());
        assert!(a == b, "seed {seed} replayed differently");
    }
    assert_ne!(history_bytes(&s, 7), history_bytes(&s, 8));
}

fn sim_seeds() -> u64 {
    std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
}

/// The bounded sweep CI runs: `SIM_SEEDS` seeds (default 50) of each checked scenario, with
/// the workload shortened to 20 s of virtual time. The long sweep is
/// `meridian sim --seeds 1..500 --scenario NAME`.
#[test]
fn seed_sweep_finds_no_violation() {
    let seeds = sim_seeds();
    let mut failures = Vec::new();
    // The timeline scenarios sweep in their own test, on the other core.
    for mut s in scenarios() {
        if !s.ci || s.timeline.is_some() {
            continue;
        }
        s.duration = s.duration.min(Duration::from_secs(20));
        for seed in 1..=seeds {
            let r = run(&s, seed);
            if !r.passed {
                println!("{r}");
                failures.push(format!("meridian sim --scenario {} --seed {seed}", s.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing runs, replay with:\n{}",
        failures.join("\n")
    );
}

/// Seeds that found real bugs, kept as regressions (each failed before its fix):
/// - membership 20: reads at a coordinator whose metadata still had the previous layout
///   missed writes placed with the new one (fixed by joint write quorums during a handoff);
/// - membership 2: a node that rejoined became claimant with a detector that had heard
///   nobody, and ended the handoff at once (fixed by the down-node grace period);
/// - membership 15: a handoff round deleted keys of a partition the node had been given back
///   meanwhile, which then reissued dots and lost a write (fixed by deleting under the
///   metadata lock and re-checking ownership).
#[test]
fn seeds_that_found_bugs_pass() {
    let s = scenario("membership").unwrap();
    for seed in [2, 15, 20, 41, 98] {
        let r = run(&s, seed);
        assert!(
            r.passed,
            "replay: meridian sim --scenario membership --seed {seed}\n{r}"
        );
    }
}

#[test]
fn lww_under_partitions_loses_acknowledged_writes_and_the_checker_sees_it() {
    // The negative control: the same checker that passes the sibling buckets must catch
    // last-writer-wins dropping acknowledged writes.
    let mut s = scenario("lww-partition").unwrap();
    s.duration = Duration::from_secs(20);
    for seed in 1..=3 {
        let r = run(&s, seed);
        println!("{r}");
        let lost = r
            .verdicts
            .iter()
            .find(|v| v.checker == "lost-writes")
            .unwrap();
        assert!(
            !lost.violations.is_empty(),
            "seed {seed}: LWW lost nothing?"
        );
        assert!(r.passed);
    }
}

#[test]
fn a_hand_written_schedule_runs_as_written() {
    // Crash a node, partition the DCs, then make a node leave and rejoin: at fixed times.
    let secs = Duration::from_secs;
    let mut s = scenario("baseline").unwrap();
    s.duration = secs(30);
    s.schedule = Some(vec![
        ScheduledFault {
            at: secs(2),
            duration: secs(4),
            fault: Fault::Crash {
                node: NodeId(2),
                wipe: false,
            },
        },
        ScheduledFault {
            at: secs(8),
            duration: secs(5),
            fault: Fault::PartitionDcs {
                a: DcId(0),
                b: DcId(1),
                one_way: false,
            },
        },
        ScheduledFault {
            at: secs(16),
            duration: secs(6),
            fault: Fault::LeaveRejoin { node: NodeId(5) },
        },
    ]);
    let r = run(&s, 3);
    println!("{r}");
    assert!(r.passed, "{r}");
    assert_eq!(r.faults.len(), 3);
    assert!(
        r.faults[0].starts_with("t=2.0s for 4.0s: n2 crashed"),
        "{:?}",
        r.faults
    );
    assert!(
        r.faults[1].contains("partition dc0 <-> dc1"),
        "{:?}",
        r.faults
    );
    assert!(
        r.faults[2].contains("n5 leaves, then rejoins"),
        "{:?}",
        r.faults
    );
    // The partition made some strict (PR = PW = 2) requests fail rather than lie.
    assert!(r.ops.failed + r.ops.unknown > 0, "{r}");
}

/// The timeline part of the CI sweep: `SIM_SEEDS` seeds (default 50) of each timeline scenario
/// the sweep runs, the workload shortened to 20 s. Every checker of
/// `meridian_sim::checker::timeline` judges each run, plus convergence after catch-up.
#[test]
fn timeline_seed_sweep_finds_no_violation() {
    let seeds = sim_seeds();
    let mut failures = Vec::new();
    let mut ran = 0;
    for mut s in scenarios() {
        if !s.ci || s.timeline.is_none() {
            continue;
        }
        s.duration = s.duration.min(Duration::from_secs(20));
        ran += 1;
        for seed in 1..=seeds {
            let r = run(&s, seed);
            if !r.passed {
                println!("{r}");
                failures.push(format!("meridian sim --scenario {} --seed {seed}", s.name));
            }
        }
    }
    assert!(ran >= 5, "only {ran} timeline scenarios in the sweep");
    assert!(
        failures.is_empty(),
        "failing runs, replay with:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_timeline_run_replays_byte_for_byte() {
    let mut s = scenario("timeline-chaos").unwrap();
    s.duration = Duration::from_secs(20);
    let dump = |seed| run(&s, seed).timeline.unwrap().dump();
    println!("scenario timeline-chaos seed 5");
    let a = dump(5);
    assert!(a.len() > 100_000, "a real run: {} bytes", a.len());
    assert!(a == dump(5), "seed 5 replayed differently");
    assert_ne!(a, dump(6));
}

#[test]
fn the_timeline_workload_exercises_every_operation_and_migrates_masters() {
    let s = scenario("timeline").unwrap();
    let r = run(&s, 1);
    assert!(r.passed, "{r}");
    let tl = r.timeline.as_ref().unwrap();
    let ops = tl.history.operations().unwrap();
    for kind in [
        "read_any",
        "read_critical",
        "read_latest",
        "write",
        "test_and_set",
        "delete",
    ] {
        let n = ops.iter().filter(|o| o.op.kind() == kind).count();
        assert!(n > 50, "only {n} {kind} operations");
    }
    let inserts = ops
        .iter()
        .filter(|o| matches!(o.op, TlOp::TestAndSet { expected: None, .. }))
        .count();
    assert!(inserts > 50, "only {inserts} insert-if-absent operations");
    let mismatches = ops
        .iter()
        .filter(|o| matches!(o.result, TlResult::Mismatch { .. }))
        .count();
    assert!(mismatches > 50, "only {mismatches} TAS mismatches");
    let stats = r.tl_stats.as_ref().unwrap();
    assert!(stats.migrations > 5, "{r}");
    // 90 % locality: after migration most writes are served in the writer's DC.
    let remote = stats.remote_writes as f64 / (stats.local_writes + stats.remote_writes) as f64;
    assert!(remote < 0.2, "{remote:.2} of the writes were remote\n{r}");
}

#[test]
fn a_forced_re_master_deposes_the_old_master_and_the_client_checks_notice() {
    // A negative control too: the client checks (not asserted in this scenario) must catch
    // the acknowledged writes a forced re-master throws away.
    let s = scenario("timeline-force").unwrap();
    let r = run(&s, 1);
    println!("{r}");
    assert!(r.passed, "{r}");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("forced the mastership of 1")),
        "{r}"
    );
    let writer = r
        .verdicts
        .iter()
        .find(|v| v.checker == "timeline-single-writer")
        .unwrap();
    assert!(
        !writer.checked.contains(" 0 versions by deposed masters"),
        "{r}"
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("timeline-linearizability not asserted") && n.contains("Fail")),
        "{r}"
    );
}

/// Seeds that find open bugs of the timeline protocol (`meridian-replication`), kept as
/// regressions: each fails until its bug is fixed; then move it to the CI sweep (turn on
/// `wan_duplicates` / `trust_failures` in the timeline scenarios).
///
/// `timeline-strict` seed 2: a duplicated write request is applied twice. The lossy WAN
/// (datagram mode, duplicate 0.10) delivered client c6's `write "c6-203"` to master n3 twice:
/// n3 issued `…0.4` and `…0.5` for the one operation, both at 23.028 s; the client was told
/// `…0.4`, and a later TAS saw `…0.5` (not linearizable). The master write path has no
/// request identity, so it is not idempotent (replication and catch-up are).
#[test]
#[ignore = "open bug: a duplicated timeline write request is applied twice"]
fn open_bug_a_duplicated_write_request_is_applied_twice() {
    let r = run(&scenario("timeline-strict").unwrap(), 2);
    assert!(
        r.passed,
        "replay: meridian sim --scenario timeline-strict --seed 2\n{r}"
    );
}

/// `timeline-strict` seed 8: a write is reported surely not applied although it was. Client
/// c4 (dc1) wrote `"c4-369"` to k12's master n2 (dc0); n2 issued and stored `…0.1` at
/// 39.196 s (n3 and n5 applied it) and crashed at 39.2 s before replying. The coordinator's
/// pending request failed with `NetError::Unreachable` ("the node left"), which
/// `tl_send_write` maps to `master_unavailable` with `maybe_applied = false` (only
/// `NetError::Timeout` counts as "may have applied"). The same happens when the node the
/// request went to forwarded it (hops = 1) and then crashed (`timeline-crashes` seed 19 with
/// `trust_failures`: issued by n1 96 ms after the client was told it failed).
#[test]
#[ignore = "open bug: a request to a master that crashes after receiving it is reported not applied"]
fn open_bug_a_write_to_a_crashing_master_is_reported_not_applied() {
    let r = run(&scenario("timeline-strict").unwrap(), 8);
    assert!(
        r.passed,
        "replay: meridian sim --scenario timeline-strict --seed 8\n{r}"
    );
}

/// `timeline-fsync` seed 1 (fsync once a second, the server's default durability): a master
/// that crashes loses the records it issued since the last sync and issues their versions
/// again. n1 issued k0's `…0.27` with `"c1-482"` at 52.5 s (acknowledged; n2 applied it),
/// crashed at 52.6 s losing 4 unsynced batches, restarted and issued `…0.27` again with
/// `"c3-530"` at 57.6 s: a fork (n2 refuses it, `timeline_forks_total`), an acknowledged
/// write lost, and n1 going back. In other seeds an insert arbiter that lost an insert starts
/// a second generation while the record is live elsewhere. 47 of seeds 1..=50 fail.
#[test]
#[ignore = "open bug: a timeline master that loses unsynced records reissues their versions"]
fn open_bug_a_master_losing_unsynced_records_reissues_versions() {
    let r = run(&scenario("timeline-fsync").unwrap(), 1);
    assert!(
        r.passed,
        "replay: meridian sim --scenario timeline-fsync --seed 1\n{r}"
    );
}

/// `timeline-force` seed 1: the deposed masters issued 194 versions after the forced
/// re-master, all discarded at the heal, but `timeline_fenced_total` stays 0: `merge` counts
/// a record as fenced only when the plain order ranks it higher (a deposed master's new
/// generation), and drops the common case (same generation, lower `mepoch`) as merely stale.
/// Spec §7 / invariant 10: the discarded writes are logged and counted.
#[test]
#[ignore = "open bug: a deposed master's discarded writes are not counted"]
fn open_bug_a_deposed_masters_discarded_writes_are_not_counted() {
    let r = run(&scenario("timeline-force").unwrap(), 1);
    let fenced = r.tl_stats.as_ref().unwrap().fenced;
    assert!(
        fenced > 0,
        "replay: meridian sim --scenario timeline-force --seed 1\n{r}"
    );
}
