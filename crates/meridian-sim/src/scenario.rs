//! Named scenarios and [`run`]: one simulation from a seed — start the cluster in virtual
//! time, run the workload under a fault schedule, heal, let the cluster quiesce, then judge
//! the recorded history and the replicas' final state with the checkers.
//!
//! A run is a pure function of `(scenario, seed)`: it builds its own single-threaded tokio
//! runtime with a paused clock, so timers and emulated network delays advance instantly when
//! every task is idle, and the same seed gives the same history byte for byte.
//!
//! Quiescence: after the workload stops, every fault is undone (links restored, crashed
//! nodes restarted), the cluster runs for [`QUIESCE`] of virtual time (detectors, hinted
//! handoff, read repair) and until any ownership handoff finished, then anti-entropy is driven
//! to a fixpoint: every node exchanges
//! every partition it holds with every other replica, round after round, until a round
//! repairs nothing (at most [`MAX_AAE_ROUNDS`]).
//!
//! **Timeline scenarios** ([`Scenario::timeline`], spec `timeline.md`) run the clients of
//! [`crate::tl_workload`] on a timeline bucket instead, with an observer on every node (restarted
//! ones included) recording the issue and apply logs, and optionally forced re-masters
//! ([`ForceMaster`]). Their quiescence: heal, restart, [`QUIESCE`], then catch-up
//! (`tl_sync_round` on every node against every peer) until a round copies nothing and no
//! node waits for an acknowledgement (at most [`MAX_TL_SYNC_ROUNDS`]). The judges: every
//! checker of [`checker::timeline`] (migration with the bucket's `migration_threshold` and the
//! targets the observer saw), fail-fast (no operation reaches the client's timeout), and
//! convergence (every primary of each key holds the same record, the highest version issued);
//! the run also fails if a node counted a fork or records stayed unacknowledged.

use crate::checker::timeline::{TlFinal, TlFinals};
use crate::checker::{self, ReplicaStates, Verdict};
use crate::cluster::{SimCluster, SimConfig};
use crate::disk::SyncPolicy;
use crate::faults::{self, FaultKinds, ScheduledFault};
use crate::history::{History, Recorder};
use crate::tl_workload::{self, TlLogs, TlRecorder, TlWorkloadConfig};
use crate::txn_workload::{ClockPlan, TxnExpect, TxnOutcome, TxnRun};
use crate::workload::{self, OpCounts, WorkloadConfig};
use meridian_cluster::{Props, Quorum};
use meridian_core::DcId;
use meridian_replication::{BucketProps, ReadMode, TimelineStats};
use parking_lot::Mutex;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Virtual time the cluster runs after healing, before anti-entropy is driven.
pub const QUIESCE: Duration = Duration::from_secs(15);
/// Longest wait for a running ownership handoff to finish at the end of a run.
pub const HANDOFF_WAIT: Duration = Duration::from_secs(120);
/// Most forced anti-entropy rounds at the end of a run.
pub const MAX_AAE_ROUNDS: usize = 4;

/// Which checkers judge a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// No acknowledged write lost (sibling buckets).
    pub lost_writes: bool,
    /// Reads after acknowledged writes see them (buckets with PR + PW > N).
    pub quorum_reads: bool,
    /// All replicas identical after quiescence.
    pub convergence: bool,
}

/// A named simulation setup.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name (`meridian sim --scenario NAME`).
    pub name: &'static str,
    /// What it exercises.
    pub about: &'static str,
    /// The cluster.
    pub cluster: SimConfig,
    /// The clients.
    pub workload: WorkloadConfig,
    /// The faults a generated schedule may contain.
    pub faults: FaultKinds,
    /// Virtual time the workload runs.
    pub duration: Duration,
    /// The checkers that must pass.
    pub checks: Checks,
    /// A negative control: the run is expected to lose acknowledged writes (the verdict is
    /// inverted: losing none is the failure).
    pub expect_lost_writes: bool,
    /// A fault schedule written by hand; when set it replaces the one generated from the
    /// seed and `faults`.
    pub schedule: Option<Vec<ScheduledFault>>,
    /// A timeline run: when set, its clients replace `workload` and the timeline checkers
    /// replace `checks` (see [`TimelineRun`]).
    pub timeline: Option<TimelineRun>,
    /// A transactional run: when set, the clients of [`crate::txn_workload`] replace
    /// `workload` and the transaction checks replace `checks` (see [`TxnRun`]).
    pub txn: Option<TxnRun>,
    /// A run of the eventual buckets' Redis CRDTs: when set, the clients of
    /// [`crate::crdt_workload`] replace `workload` and its checkers replace `checks`.
    pub crdt: Option<crate::crdt_workload::CrdtRun>,
    /// Whether the CI seed sweep runs it (not: benchmarks, negative controls, and scenarios
    /// that still find open bugs).
    pub ci: bool,
}

/// The timeline part of a scenario: clients of a timeline bucket, forced re-masters, and
/// which checkers must pass.
#[derive(Debug, Clone)]
pub struct TimelineRun {
    /// The clients.
    pub workload: TlWorkloadConfig,
    /// Forced re-masters during the run.
    pub force: Vec<ForceMaster>,
    /// Whether the client-side checkers (reads, TAS, linearizability) and "no issued version
    /// lost" must pass. A forced re-master may lose acknowledged writes by design (spec §7),
    /// so after one only the replica-side invariants are asserted (order, forks, single
    /// writer, migration, convergence); the others are still run and reported as notes.
    pub client_checks: bool,
    /// Whether generated lossy faults may duplicate messages; when false their duplication
    /// probability is set to 0 (loss and reordering stay).
    pub wan_duplicates: bool,
}

/// A forced re-master (spec §7): at `at` (from the workload's start), through an up node of
/// DC `dc`, every key whose record there names a master outside `dc` is forced to `dc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForceMaster {
    /// When.
    pub at: Duration,
    /// The DC that takes the mastership.
    pub dc: DcId,
}

fn strict_bucket() -> BucketProps {
    // R + W > N on primaries: reads and writes need two primaries, no sloppy quorum.
    BucketProps {
        props: Props {
            r: Some(Quorum::Count(2)),
            w: Some(Quorum::Count(2)),
            pr: Some(Quorum::Count(2)),
            pw: Some(Quorum::Count(2)),
            ..Props::default()
        },
        ..BucketProps::default()
    }
}

fn lww_w1_bucket() -> BucketProps {
    BucketProps {
        props: Props {
            allow_mult: Some(false),
            w: Some(Quorum::One),
            dw: Some(Quorum::One),
            r: Some(Quorum::One),
            ..Props::default()
        },
        ..BucketProps::default()
    }
}

/// The timeline bucket of the timeline scenarios: the spec's defaults, but masters time out
/// after 2 s (not 10 s) so that runs of 20 to 60 s see requests fail and recover.
fn timeline_bucket() -> BucketProps {
    let mut b = BucketProps::timeline();
    b.timeline.master_timeout_ms = 2_000;
    b
}

/// The cluster of the timeline scenarios: the default shape with bucket `tl`.
fn with_timeline(sync: SyncPolicy) -> SimConfig {
    let mut c = SimConfig {
        sync,
        ..SimConfig::default()
    };
    c.buckets.insert("tl".into(), timeline_bucket());
    c
}

/// The default timeline run: [`TlWorkloadConfig::default`], no forced re-master, every
/// checker asserted.
fn tl_run() -> TimelineRun {
    TimelineRun {
        workload: TlWorkloadConfig::default(),
        force: Vec::new(),
        client_checks: true,
        wan_duplicates: true,
    }
}

/// Every named scenario.
pub fn scenarios() -> Vec<Scenario> {
    let with_buckets = || {
        let mut c = SimConfig::default();
        c.buckets.insert("strict".into(), strict_bucket());
        c.buckets.insert("lww".into(), lww_w1_bucket());
        c
    };
    let strict = WorkloadConfig {
        bucket: "strict".into(),
        ..WorkloadConfig::default()
    };
    let all_checks = Checks {
        lost_writes: true,
        quorum_reads: true,
        convergence: true,
    };
    let no_quorum = Checks {
        quorum_reads: false,
        ..all_checks
    };
    vec![
        Scenario {
            name: "baseline",
            about: "2 DCs x 3 nodes, 100 ms WAN, no faults, PR=PW=2 bucket",
            cluster: with_buckets(),
            workload: strict.clone(),
            faults: FaultKinds::NONE,
            duration: Duration::from_secs(30),
            checks: all_checks,
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: true,
        },
        Scenario {
            name: "partitions",
            about: "DC partitions (one way too), isolated nodes, lossy/duplicating/reordering \
                    WAN, latency spikes and slow nodes; PR=PW=2 bucket",
            cluster: with_buckets(),
            workload: strict.clone(),
            faults: FaultKinds::parse("partition,lossy,slow").expect("valid kinds"),
            duration: Duration::from_secs(60),
            checks: all_checks,
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: true,
        },
        Scenario {
            name: "crashes",
            about: "node crashes and restarts (fsync always), clock jumps and skew; PR=PW=2 \
                    bucket",
            cluster: with_buckets(),
            workload: strict.clone(),
            faults: FaultKinds::parse("crash,clock").expect("valid kinds"),
            duration: Duration::from_secs(60),
            checks: all_checks,
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: true,
        },
        Scenario {
            name: "membership",
            about: "nodes leave and rejoin under load (ownership handoff both ways), with \
                    crashes; PR=PW=2 bucket",
            cluster: with_buckets(),
            workload: strict.clone(),
            faults: FaultKinds::parse("membership,crash").expect("valid kinds"),
            duration: Duration::from_secs(60),
            checks: all_checks,
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: true,
        },
        Scenario {
            name: "chaos",
            about: "every fault kind (one disk wipe at most, fsync everysec) on the default \
                    sloppy-quorum bucket",
            cluster: SimConfig {
                sync: SyncPolicy::EverySec,
                ..with_buckets()
            },
            workload: WorkloadConfig::default(),
            faults: FaultKinds::ALL,
            duration: Duration::from_secs(60),
            checks: no_quorum,
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: true,
        },
        Scenario {
            name: "forged-contexts",
            about: "for the first 8 s clients also send forged and mutated contexts \
                    (random bytes, counters raised to u64::MAX, entries moved to other nodes) \
                    under DC partitions; no write started after its key's last forgery is \
                    lost; PR=PW=2 bucket",
            cluster: with_buckets(),
            workload: WorkloadConfig {
                forged_contexts: 0.2,
                // Then honest writes only (22 s; 12 s in CI's 20-second runs), each judged
                // for loss.
                forged_until: Duration::from_secs(8),
                ..strict.clone()
            },
            faults: FaultKinds::parse("partition").expect("valid kinds"),
            duration: Duration::from_secs(30),
            // A forged write supersedes what its capped context covers at the coordinator,
            // which the client cannot know: lost writes are judged on the writes started
            // after their key's last forgery (`checker::forged`), and the quorum-read
            // checker (exact `supersedes` sets) is off.
            checks: Checks {
                lost_writes: true,
                quorum_reads: false,
                convergence: true,
            },
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: true,
        },
        Scenario {
            name: "lww-partition",
            about: "negative control: last-writer-wins with W=1 under DC partitions must lose \
                    acknowledged writes",
            cluster: with_buckets(),
            workload: WorkloadConfig {
                bucket: "lww".into(),
                // Read-modify-writes only: every lost write is one a causal store would keep.
                reads: 0.2,
                blind_writes: 0.0,
                deletes: 0.0,
                ..WorkloadConfig::default()
            },
            faults: FaultKinds::parse("partition").expect("valid kinds"),
            duration: Duration::from_secs(60),
            checks: Checks {
                lost_writes: true,
                quorum_reads: false,
                convergence: true,
            },
            expect_lost_writes: true,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: false,
        },
        Scenario {
            name: "perf",
            about: "2 DCs x 4 nodes, 100 ms WAN, 1000 ops/s (20 clients at 50 ops/s), no faults: \
                    the simulation-speed benchmark",
            cluster: SimConfig {
                nodes_per_dc: 4,
                ..with_buckets()
            },
            workload: WorkloadConfig {
                clients_per_dc: 10,
                rate: 50.0,
                keys: 10_000,
                ..WorkloadConfig::default()
            },
            faults: FaultKinds::NONE,
            duration: Duration::from_secs(600),
            checks: no_quorum,
            expect_lost_writes: false,
            schedule: None,
            timeline: None,
            txn: None,
            crdt: None,
            ci: false,
        },
    ]
    .into_iter()
    .chain(timeline_scenarios())
    .chain(txn_scenarios())
    .chain([crdt_scenario()])
    .collect()
}

/// The eventual buckets' Redis CRDTs (sets, lists, sorted-set counters, HLLs) under
/// partitions, a lossy WAN, slow nodes and crashes (fsync always), judged by
/// [`crate::crdt_workload`]'s checkers.
fn crdt_scenario() -> Scenario {
    Scenario {
        name: "crdt-types",
        about: "SADD/SREM, pushes, ZINCRBY and PFADD on the default eventual bucket from both \
                DCs under partitions, loss, slow nodes and crashes (fsync always)",
        cluster: SimConfig {
            sync: SyncPolicy::Always,
            ..SimConfig::default()
        },
        workload: WorkloadConfig::default(),
        faults: FaultKinds::parse("partition,lossy,slow,crash").expect("valid kinds"),
        duration: Duration::from_secs(30),
        checks: Checks {
            lost_writes: false,
            quorum_reads: false,
            convergence: false,
        },
        expect_lost_writes: false,
        schedule: None,
        timeline: None,
        txn: None,
        crdt: Some(crate::crdt_workload::CrdtRun::default()),
        ci: true,
    }
}

/// A timeline scenario on [`with_timeline`]'s cluster.
fn timeline_scenario(
    name: &'static str,
    about: &'static str,
    sync: SyncPolicy,
    faults: &str,
    duration_s: u64,
    run: TimelineRun,
) -> Scenario {
    Scenario {
        name,
        about,
        cluster: with_timeline(sync),
        workload: WorkloadConfig::default(),
        faults: FaultKinds::parse(faults).expect("valid kinds"),
        duration: Duration::from_secs(duration_s),
        checks: Checks {
            lost_writes: false,
            quorum_reads: false,
            convergence: false,
        },
        expect_lost_writes: false,
        schedule: None,
        timeline: Some(run),
        txn: None,
        crdt: None,
        ci: true,
    }
}

/// A transactional scenario (spec `transactions.md`): the default 2 DC x 3 node cluster with
/// the [`TxnRun`]'s buckets, fsync always, the `faults` kinds for `duration_s` of workload.
fn txn_scenario(
    name: &'static str,
    about: &'static str,
    faults: &str,
    duration_s: u64,
    run: TxnRun,
) -> Scenario {
    let mut cluster = SimConfig {
        sync: SyncPolicy::Always,
        ..SimConfig::default()
    };
    cluster.buckets.extend(run.buckets());
    Scenario {
        name,
        about,
        cluster,
        workload: WorkloadConfig::default(),
        faults: FaultKinds::parse(faults).expect("valid kinds"),
        duration: Duration::from_secs(duration_s),
        checks: Checks {
            lost_writes: false,
            quorum_reads: false,
            convergence: false,
        },
        expect_lost_writes: false,
        schedule: None,
        timeline: None,
        ci: run.expect == TxnExpect::Pass,
        txn: Some(run),
        crdt: None,
    }
}

/// The transactional scenarios: the bank, list-append (SI with session tokens), write-skew
/// and counter workloads under no faults, the clock nemesis, crashes and partitions, for
/// Clock-SI and the oracle; the negative controls (each must be caught); the session
/// controls.
fn txn_scenarios() -> Vec<Scenario> {
    use meridian_replication::{TimestampSource as Ts, TsoBatching, TxnControls};
    let clock_si = || TxnRun::new(Ts::ClockSi);
    let tso = || TxnRun::new(Ts::Tso);
    let nemesis = |mut r: TxnRun| {
        r.clocks = ClockPlan::Nemesis;
        r
    };
    let tso_unbatched = || {
        let mut r = tso();
        r.props.tso_batching = Some(TsoBatching::Unbatched);
        r
    };
    let negative = |controls: TxnControls, clocks: ClockPlan| {
        let mut r = clock_si();
        r.controls = controls;
        r.clocks = clocks;
        r.expect = TxnExpect::Caught;
        r
    };
    let moving = |mut r: TxnRun| {
        r.workload.movers = 1;
        r
    };
    let mut skew = clock_si();
    skew.require_write_skew = true;
    skew.workload.skew_clients = 4;
    skew.workload.skew_pairs = 1;
    let session = |token: bool| {
        let mut r = clock_si();
        r.props.snapshot_delta_us = Some(300_000);
        r.session = token;
        r.expect = if token {
            TxnExpect::Pass
        } else {
            TxnExpect::Caught
        };
        r
    };
    vec![
        txn_scenario(
            "txn-bank",
            "transactional bank (audits of every account), list-append SI with session              tokens, write skew and a counter on Clock-SI; no faults",
            "none",
            30,
            clock_si(),
        ),
        txn_scenario(
            "txn-bank-tso",
            "txn-bank on the timestamp oracle (batched client)",
            "none",
            30,
            tso(),
        ),
        txn_scenario(
            "txn-write-skew",
            "positive control: four write-skew clients per DC on one key pair must produce              write skew (flagged not serializable) that passes SI; Clock-SI, no faults",
            "none",
            20,
            skew,
        ),
        txn_scenario(
            "txn-clocks",
            "Clock-SI under the clock nemesis: offsets up to ±500 ms, drift up to ±100 ppm,              forward jumps, backward steps and strobing",
            "none",
            30,
            nemesis(clock_si()),
        ),
        txn_scenario(
            "txn-clocks-tso",
            "the oracle (unbatched client) under the clock nemesis",
            "none",
            30,
            nemesis(tso_unbatched()),
        ),
        txn_scenario(
            "txn-crashes",
            "Clock-SI: coordinators and participants crash and restart (fsync always)",
            "crash",
            30,
            clock_si(),
        ),
        txn_scenario(
            "txn-crashes-tso",
            "the oracle (batched): coordinators, participants and the oracle crash and              restart (fsync always)",
            "crash",
            30,
            tso(),
        ),
        txn_scenario(
            "txn-partitions",
            "Clock-SI under DC and node partitions (one way too) and isolated nodes",
            "partition",
            30,
            clock_si(),
        ),
        txn_scenario(
            "txn-partitions-tso",
            "the oracle (batched) under DC and node partitions and isolated nodes",
            "partition",
            30,
            tso(),
        ),
        txn_scenario(
            "txn-nemesis",
            "Clock-SI under the clock nemesis and crashes (fsync always): the seed sweep",
            "crash",
            20,
            nemesis(clock_si()),
        ),
        txn_scenario(
            "txn-nemesis-tso",
            "the oracle (batched) under the clock nemesis and crashes (fsync always)",
            "crash",
            20,
            nemesis(tso()),
        ),
        txn_scenario(
            "txn-neg-no-r1",
            "negative control: R1 off with clocks at ±50 ms must be caught",
            "none",
            20,
            negative(
                TxnControls {
                    no_r1: true,
                    ..TxnControls::default()
                },
                ClockPlan::Alternating { skew_us: 50_000 },
            ),
        ),
        txn_scenario(
            "txn-neg-no-r2",
            "negative control: R2 off while 2PC is held open by the 100 ms one-way WAN              between prepare and commit must be caught",
            "none",
            20,
            negative(
                TxnControls {
                    no_r2: true,
                    ..TxnControls::default()
                },
                ClockPlan::Default,
            ),
        ),
        txn_scenario(
            "txn-neg-no-certify",
            "negative control: certification off must lose updates (the counter burst,              list-append, the bank)",
            "none",
            20,
            negative(
                TxnControls {
                    no_certify: true,
                    ..TxnControls::default()
                },
                ClockPlan::Default,
            ),
        ),
        txn_scenario(
            "txn-neg-early-commit-ts",
            "negative control: single-partition commits taking their timestamp before the              keys are held must be caught",
            "none",
            20,
            negative(
                TxnControls {
                    early_commit_ts: true,
                    ..TxnControls::default()
                },
                ClockPlan::Default,
            ),
        ),
        txn_scenario(
            "txn-neg-move-clock",
            "negative control: key moves whose destination applies only the spec's              max commit_ts + 1 clock rule, clocks at ±200 ms, must be caught",
            "none",
            30,
            {
                let mut r = negative(
                    TxnControls {
                        move_commit_ts_only: true,
                        ..TxnControls::default()
                    },
                    ClockPlan::Alternating { skew_us: 200_000 },
                );
                r.workload.movers = 2;
                r.workload.move_every = Duration::from_millis(50);
                r
            },
        ),
        txn_scenario(
            "txn-session-delta",
            "session control: Clock-SI with snapshots 300 ms old and no session token must              fail strong-session SI (a client misses its own commits)",
            "none",
            20,
            session(false),
        ),
        txn_scenario(
            "txn-moves",
            "cross-node key moves (repartitioning §6): a mover moves accounts and list keys              between leaders every 200 ms under the bank, list-append SI and the counter;              Clock-SI, no faults",
            "none",
            30,
            moving(clock_si()),
        ),
        txn_scenario(
            "txn-moves-clocks",
            "txn-moves under the clock nemesis: the move's clock rule against skew, drift,              jumps and strobing",
            "none",
            30,
            moving(nemesis(clock_si())),
        ),
        txn_scenario(
            "txn-moves-tso",
            "txn-moves on the timestamp oracle (batched client)",
            "none",
            30,
            moving(tso()),
        ),
        txn_scenario(
            "txn-session-token",
            "session control: Clock-SI with snapshots 300 ms old and the session token passes              strong-session SI",
            "none",
            20,
            session(true),
        ),
    ]
}

/// The timeline scenarios (spec `timeline.md`, "Invariants and tests"). Generated lossy
/// faults duplicate messages (datagram-style) and write errors claiming "not applied" are
/// trusted, so the client checkers would see a write applied twice or reported wrongly.
fn timeline_scenarios() -> Vec<Scenario> {
    let mut force = timeline_scenario(
        "timeline-force",
        "the DCs partition, dc1 forces the mastership of the keys mastered in dc0 while \
         dc0's deposed masters keep writing; replica invariants only",
        SyncPolicy::Always,
        "none",
        20,
        TimelineRun {
            workload: TlWorkloadConfig::default(),
            force: vec![ForceMaster {
                at: Duration::from_secs(7),
                dc: DcId(1),
            }],
            client_checks: false,
            wan_duplicates: false,
        },
    );
    force.schedule = Some(vec![ScheduledFault {
        at: Duration::from_secs(4),
        duration: Duration::from_secs(10),
        fault: faults::Fault::PartitionDcs {
            a: DcId(0),
            b: DcId(1),
            one_way: false,
        },
    }]);
    let fsync = timeline_scenario(
        "timeline-fsync",
        "timeline-crashes with fsync once a second: a crashed master loses what it issued \
         since the last sync (acknowledged writes included, by that policy), yet never issues \
         a version twice; replica invariants only",
        SyncPolicy::EverySec,
        "crash",
        60,
        TimelineRun {
            client_checks: false,
            ..tl_run()
        },
    );
    vec![
        timeline_scenario(
            "timeline",
            "timeline bucket (per-record master, T = 3), 90 % write locality, every operation \
             kind, no faults",
            SyncPolicy::Always,
            "none",
            30,
            tl_run(),
        ),
        timeline_scenario(
            "timeline-partitions",
            "timeline bucket under DC and node partitions (one way too), isolated masters, a \
             lossy reordering WAN, latency spikes and slow nodes",
            SyncPolicy::Always,
            "partition,lossy,slow",
            60,
            tl_run(),
        ),
        timeline_scenario(
            "timeline-crashes",
            "timeline bucket: masters and replicas crash and restart (fsync always), clock \
             jumps and skew",
            SyncPolicy::Always,
            "crash,clock",
            60,
            tl_run(),
        ),
        timeline_scenario(
            "timeline-chaos",
            "timeline bucket: crashes (fsync always), partitions, loss, duplication, \
             reordering, latency spikes, slow nodes, clock faults",
            SyncPolicy::Always,
            "crash,partition,lossy,slow,clock",
            60,
            tl_run(),
        ),
        timeline_scenario(
            "timeline-membership",
            "timeline-chaos plus a node leaving and rejoining under load (ownership handoff of \
             the eventual data; timeline records follow by catch-up and confirmation)",
            SyncPolicy::Always,
            "crash,partition,lossy,slow,clock,membership",
            60,
            tl_run(),
        ),
        force,
        fsync,
    ]
}

/// The scenario called `name`.
pub fn scenario(name: &str) -> Option<Scenario> {
    scenarios().into_iter().find(|s| s.name == name)
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The seed.
    pub seed: u64,
    /// Virtual time the workload ran.
    pub duration: Duration,
    /// Operation outcomes.
    pub ops: OpCounts,
    /// The faults injected, in order, with their virtual start times.
    pub faults: Vec<String>,
    /// The checkers' verdicts.
    pub verdicts: Vec<Verdict>,
    /// Whether the run met its expectation (every check passed; for a negative control,
    /// lost writes were found and the other checks passed).
    pub passed: bool,
    /// The recorded history.
    pub history: History,
    /// Messages the WAN emulator carried.
    pub messages: u64,
    /// Virtual time simulated in total (settle + workload + quiescence).
    pub simulated: Duration,
    /// A timeline run's logs (issue log, apply log, client history).
    pub timeline: Option<TlLogs>,
    /// A timeline run's counters at the end, summed over the nodes' current lives.
    pub tl_stats: Option<TimelineStats>,
    /// Informational lines: counters, checks not asserted, quiescence.
    pub notes: Vec<String>,
    /// A transactional run's histories, audits and reports.
    pub txn: Option<Box<TxnOutcome>>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scenario {} seed {}: {} ({} ok, {} failed, {} unknown ops in {:?} of virtual time; \
             {} messages; {} faults)",
            self.scenario,
            self.seed,
            if self.passed { "PASS" } else { "FAIL" },
            self.ops.ok,
            self.ops.failed,
            self.ops.unknown,
            self.duration,
            self.messages,
            self.faults.len()
        )?;
        for fault in &self.faults {
            writeln!(f, "  fault: {fault}")?;
        }
        for v in &self.verdicts {
            writeln!(f, "  {v}")?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}

/// Runs `scenario` with `seed` (see the module docs).
pub fn run(scenario: &Scenario, seed: u64) -> Report {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(run_in_runtime(scenario, seed))
}

/// Starts the scenario's cluster for `seed`, lets every detector hear every peer, and draws
/// the fault schedule (unless the scenario has one written by hand).
pub(crate) async fn start_cluster(
    scenario: &Scenario,
    seed: u64,
) -> (SimCluster, Vec<ScheduledFault>) {
    let mut cfg = scenario.cluster.clone();
    cfg.seed = seed;
    let cluster = SimCluster::start(cfg);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xfa17);
    let schedule = match &scenario.schedule {
        Some(by_hand) => by_hand.clone(),
        None => faults::generate(
            &mut rng,
            scenario.faults,
            &cluster.machines(),
            scenario.duration,
        ),
    };
    (cluster, schedule)
}

async fn run_in_runtime(scenario: &Scenario, seed: u64) -> Report {
    if let Some(tl) = &scenario.timeline {
        return run_timeline(scenario, tl, seed).await;
    }
    if let Some(tx) = &scenario.txn {
        return crate::txn_workload::run(scenario, tx, seed).await;
    }
    if let Some(crdt) = &scenario.crdt {
        return crate::crdt_workload::run(scenario, crdt, seed).await;
    }
    let start = Instant::now();
    let (mut cluster, schedule) = start_cluster(scenario, seed).await;
    let recorder = Recorder::new();
    let origin = Instant::now();
    let until = CancellationToken::new();
    workload::spawn_clients(
        &scenario.workload,
        seed,
        &cluster.machines(),
        cluster.live(),
        recorder.clone(),
        origin,
        until.clone(),
    );
    let baseline_link = cluster.wan().config().inter_dc;
    let log = faults_until(
        &mut cluster,
        &schedule,
        origin,
        scenario.duration,
        &baseline_link,
    )
    .await;
    until.cancel();
    // Operations already started end by their timeout (a write's read plus the write).
    tokio::time::sleep(scenario.workload.timeout * 2 + Duration::from_secs(1)).await;

    // Heal everything, restart the crashed, quiesce, then drive anti-entropy to a fixpoint.
    let wan = heal(&mut cluster, baseline_link).await;
    force_anti_entropy(&cluster).await;

    let keys = scenario.workload.all_keys();
    let n_val = scenario.cluster.n as usize;
    let replicas: ReplicaStates = cluster.replica_values(&keys, n_val);
    let history = recorder.snapshot();
    let ops = workload::count(&history);
    let mut verdicts = Vec::new();
    let c = scenario.checks;
    if c.lost_writes {
        let final_state = checker::merge_replicas(&replicas);
        let verdict = if scenario.workload.forged_contexts > 0.0 {
            let (honest, state) =
                checker::forged::after_forgeries(&history, &final_state, workload::is_forged_value)
                    .expect("well-formed history");
            checker::lost_writes::check(&honest, &state)
        } else {
            checker::lost_writes::check(&history, &final_state)
        };
        verdicts.push(verdict.expect("well-formed history"));
    }
    if c.quorum_reads {
        verdicts.push(checker::quorum_reads::check(&history).expect("well-formed history"));
    }
    if c.convergence {
        verdicts.push(checker::convergence::check(&replicas));
    }
    let passed = verdicts.iter().all(|v| {
        if scenario.expect_lost_writes && v.checker == "lost-writes" {
            !v.violations.is_empty()
        } else {
            v.passed()
        }
    });
    let messages = wan.stats().sent;
    cluster.shutdown();
    Report {
        scenario: scenario.name.to_owned(),
        seed,
        duration: scenario.duration,
        ops,
        faults: log,
        verdicts,
        passed,
        history,
        messages,
        simulated: Instant::now().duration_since(start),
        timeline: None,
        tl_stats: None,
        notes: Vec::new(),
        txn: None,
    }
}

/// Undoes every fault (links restored, partitions healed, crashed nodes restarted, nodes that
/// left rejoined), then lets the cluster run [`QUIESCE`] and waits for any ownership handoff.
pub(crate) async fn heal(
    cluster: &mut SimCluster,
    baseline_link: meridian_net::wan::LinkConfig,
) -> meridian_net::wan::WanControl {
    let wan = cluster.wan().clone();
    wan.heal_all();
    wan.set_mode(meridian_net::wan::DeliveryMode::Stream);
    wan.set_inter_dc(baseline_link)
        .expect("the original link is valid");
    for (a, _) in cluster.machines() {
        for (b, _) in cluster.machines() {
            wan.clear_node_link(a, b);
        }
    }
    cluster.restart_all();
    cluster.rejoin_all().await;
    tokio::time::sleep(QUIESCE).await;
    wait_handoff(cluster).await;
    wan
}

/// Applies and undoes each scheduled fault at its virtual time.
/// Applies the schedule's faults (each undone after its duration) until `origin + duration`,
/// and returns their log. The workload ends on time even if a fault's undo (a rejoin waiting
/// for a handoff) is still retrying; the heal after the run finishes the job.
pub(crate) async fn faults_until(
    cluster: &mut SimCluster,
    schedule: &[ScheduledFault],
    origin: Instant,
    duration: Duration,
    baseline: &meridian_net::wan::LinkConfig,
) -> Vec<String> {
    let mut log = Vec::new();
    let end = origin + duration;
    tokio::select! {
        biased;
        _ = drive_faults(cluster, schedule, origin, baseline, &mut log) => {
            tokio::time::sleep_until(end).await;
        }
        _ = tokio::time::sleep_until(end) => {}
    }
    log
}

async fn drive_faults(
    cluster: &mut SimCluster,
    schedule: &[ScheduledFault],
    origin: Instant,
    baseline: &meridian_net::wan::LinkConfig,
    log: &mut Vec<String>,
) {
    for f in schedule {
        tokio::time::sleep_until(origin + f.at).await;
        let what = faults::apply(cluster, &f.fault).await;
        log.push(format!(
            "t={:.1}s for {:.1}s: {what}",
            f.at.as_secs_f64(),
            f.duration.as_secs_f64()
        ));
        tokio::time::sleep_until(origin + f.at + f.duration).await;
        faults::undo(cluster, &f.fault, baseline).await;
    }
}

/// Waits (at most [`HANDOFF_WAIT`]) until no node reports an ownership handoff running and
/// all follow the same metadata version.
async fn wait_handoff(cluster: &SimCluster) {
    let deadline = Instant::now() + HANDOFF_WAIT;
    while Instant::now() < deadline {
        let metas: Vec<_> = cluster.live().read().values().map(|n| n.meta()).collect();
        if metas
            .iter()
            .all(|m| m.previous.is_none() && m.version == metas[0].version)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tracing::warn!("ownership handoff still running when the run ended");
}

/// Every live node exchanges every held partition with every other replica, until a round
/// repairs nothing.
pub(crate) async fn force_anti_entropy(cluster: &SimCluster) {
    for _ in 0..MAX_AAE_ROUNDS {
        let nodes: BTreeMap<_, _> = cluster.live().read().clone();
        let mut repaired = 0;
        for (id, node) in &nodes {
            let pairs: Vec<_> = {
                let l = node.layout();
                l.ring()
                    .partitions()
                    .filter(|&p| l.replicas(p).contains(id))
                    .flat_map(|p| {
                        l.replicas(p)
                            .iter()
                            .filter(|&&r| r != *id)
                            .map(move |&r| (p, r))
                            .collect::<Vec<_>>()
                    })
                    .collect()
            };
            for (p, peer) in pairs {
                if nodes.contains_key(&peer) {
                    repaired += node.anti_entropy_with(p, peer).await.unwrap_or(0);
                }
            }
        }
        if repaired == 0 {
            break;
        }
    }
}

/// Most catch-up rounds at the end of a timeline run (each: every node exchanges with every
/// peer, then one virtual second for the streams to deliver).
pub const MAX_TL_SYNC_ROUNDS: usize = 30;

/// Drives catch-up to a fixpoint: rounds of [`meridian_replication::EventualNode::tl_sync_round`]
/// on every live node against every peer, until a round copies nothing and no node has a
/// record waiting for a peer's acknowledgement. Returns the rounds run and the records still
/// waiting (0 when it converged).
async fn settle_timeline(cluster: &SimCluster) -> (usize, usize) {
    let mut pending = 0;
    for round in 1..=MAX_TL_SYNC_ROUNDS {
        let nodes: BTreeMap<_, _> = cluster.live().read().clone();
        let peers = cluster.machines().len().saturating_sub(1).max(1);
        let mut copied = 0;
        for node in nodes.values() {
            // One call compares one page with one peer; the page covers every key here, so
            // twice round the peers is one full exchange even from a mid-page cursor.
            for _ in 0..2 * peers {
                copied += node.tl_sync_round().await.unwrap_or(0);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        pending = nodes.values().map(|n| n.tl_pending()).sum();
        if copied == 0 && pending == 0 {
            return (round, 0);
        }
    }
    (MAX_TL_SYNC_ROUNDS, pending)
}

/// Runs the forced re-masters of `force` at their times (see [`ForceMaster`]); each appends a
/// line to `notes`.
fn spawn_forced_remasters(
    force: &[ForceMaster],
    cluster: &SimCluster,
    keys: &[bytes::Bytes],
    origin: Instant,
    notes: Arc<Mutex<Vec<String>>>,
) {
    for f in force.iter().copied() {
        let live = cluster.live();
        let in_dc: Vec<_> = cluster
            .machines()
            .into_iter()
            .filter(|m| m.1 == f.dc)
            .map(|m| m.0)
            .collect();
        let keys = keys.to_vec();
        let notes = notes.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(origin + f.at).await;
            let node = {
                let live = live.read();
                in_dc.iter().find_map(|id| live.get(id).cloned())
            };
            let Some(node) = node else {
                notes.lock().push(format!(
                    "t={:.1}s: no up node in {} to force the mastership from",
                    f.at.as_secs_f64(),
                    f.dc
                ));
                return;
            };
            let (mut forced, mut refused) = (Vec::new(), 0);
            for key in keys {
                let Ok(r) = node.tl_get(&key, ReadMode::Any).await else {
                    continue;
                };
                if r.record.is_some_and(|rec| rec.master.dc != f.dc) {
                    match node.tl_force_master(&key, f.dc).await {
                        Ok(w) => forced.push(format!(
                            "{} ({} at {})",
                            crate::text::show(&key),
                            w.record.ver,
                            w.issued_by.node
                        )),
                        Err(_) => refused += 1,
                    }
                }
            }
            notes.lock().push(format!(
                "t={:.1}s: forced the mastership of {} key(s) to {} through {} ({refused} \
                 refused): {}",
                f.at.as_secs_f64(),
                forced.len(),
                f.dc,
                node.id(),
                forced.join(", ")
            ));
        });
    }
}

/// [`run`] for a scenario with a [`TimelineRun`]: the timeline clients under the fault
/// schedule (and forced re-masters), then heal, restart, quiesce, catch-up to a fixpoint, and
/// the timeline checkers on the issue log, apply log, client history and final records.
async fn run_timeline(scenario: &Scenario, tl: &TimelineRun, seed: u64) -> Report {
    let start = Instant::now();
    let (mut cluster, schedule) = start_cluster(scenario, seed).await;
    let props = scenario
        .cluster
        .buckets
        .get(&tl.workload.bucket)
        .cloned()
        .unwrap_or_else(BucketProps::timeline);
    let t = props.timeline.threshold();
    let n_val = props.props.n_val.unwrap_or(scenario.cluster.n) as usize;
    let schedule: Vec<ScheduledFault> = schedule
        .into_iter()
        .map(|mut f| {
            if let faults::Fault::Lossy { duplicate, .. } = &mut f.fault
                && !tl.wan_duplicates
            {
                *duplicate = 0.0;
            }
            f
        })
        .collect();
    let origin = Instant::now();
    let rec = TlRecorder::new(origin);
    cluster.set_timeline_observer(rec.observer_with(cluster.live(), n_val));
    let until = CancellationToken::new();
    tl_workload::spawn_clients(
        &tl.workload,
        seed,
        &cluster.machines(),
        cluster.live(),
        cluster.crash_counts(),
        rec.clone(),
        until.clone(),
    );
    let keys = tl.workload.all_keys();
    let notes = Arc::new(Mutex::new(Vec::new()));
    spawn_forced_remasters(&tl.force, &cluster, &keys, origin, notes.clone());
    let baseline_link = cluster.wan().config().inter_dc;
    let log = faults_until(
        &mut cluster,
        &schedule,
        origin,
        scenario.duration,
        &baseline_link,
    )
    .await;
    until.cancel();
    tokio::time::sleep(tl.workload.timeout + Duration::from_secs(1)).await;

    let wan = heal(&mut cluster, baseline_link).await;
    let (rounds, pending) = settle_timeline(&cluster).await;

    let finals: TlFinals = cluster
        .timeline_records(&keys, n_val)
        .into_iter()
        .map(|(k, per)| {
            let per = per
                .into_iter()
                .map(|(n, r)| {
                    let r = r.map(|r| TlFinal {
                        ver: tl_workload::tl_version(r.ver),
                        content: r.content.value().cloned(),
                        master: r.master.node,
                    });
                    (n, r)
                })
                .collect();
            (k, per)
        })
        .collect();
    let stats: Vec<TimelineStats> = cluster
        .live()
        .read()
        .values()
        .map(|n| n.tl_stats())
        .collect();
    let sum = |f: fn(&TimelineStats) -> u64| stats.iter().map(f).sum::<u64>();
    let mut total = TimelineStats {
        wrong_master_forwards: sum(|s| s.wrong_master_forwards),
        migrations: sum(|s| s.migrations),
        forks: sum(|s| s.forks),
        fenced: sum(|s| s.fenced),
        local_reads: sum(|s| s.local_reads),
        remote_reads: sum(|s| s.remote_reads),
        local_writes: sum(|s| s.local_writes),
        remote_writes: sum(|s| s.remote_writes),
        caught_up: sum(|s| s.caught_up),
        ..TimelineStats::default()
    };
    for s in &stats {
        for (dc, lag) in &s.lag_by_dc {
            *total.lag_by_dc.entry(*dc).or_insert(0) += lag;
        }
    }
    let forks = total.forks;
    let logs = rec.snapshot();

    let mut verdicts = Vec::new();
    let mut notes = std::mem::take(&mut *notes.lock());
    for v in checker::timeline::check_all_with(
        &logs.issued,
        &logs.applied,
        &logs.history,
        t,
        &logs.migration_targets,
    )
    .expect("well-formed timeline history")
    {
        let client_side = matches!(
            v.checker,
            "timeline-reads" | "timeline-tas" | "timeline-linearizability"
        );
        if client_side && !tl.client_checks {
            notes.push(format!(
                "{} not asserted (forced re-masters may lose acknowledged writes): {:?}, {} \
                 violation(s)",
                v.checker,
                v.status(),
                v.violations.len()
            ));
        } else {
            verdicts.push(v);
        }
    }
    verdicts.push(
        checker::timeline::check_fail_fast(&logs.history, tl.workload.timeout.as_micros() as u64)
            .expect("well-formed timeline history"),
    );
    verdicts.push(checker::timeline::check_converged(
        &logs.issued,
        &finals,
        tl.client_checks,
    ));
    notes.push(format!(
        "counters at the end (nodes' current lives): {} migrations, {} wrong-master forwards, \
         {} fenced, {} caught up, {forks} forks; writes {} local / {} remote, reads {} local \
         / {} remote",
        total.migrations,
        total.wrong_master_forwards,
        total.fenced,
        total.caught_up,
        total.local_writes,
        total.remote_writes,
        total.local_reads,
        total.remote_reads,
    ));
    notes.push(format!(
        "quiescence: {rounds} catch-up round(s), {pending} record(s) still unacknowledged; \
         {} issued, {} applied",
        logs.issued.len(),
        logs.applied.len()
    ));
    let passed = verdicts.iter().all(Verdict::passed) && forks == 0 && pending == 0;
    let messages = wan.stats().sent;
    cluster.shutdown();
    Report {
        scenario: scenario.name.to_owned(),
        seed,
        duration: scenario.duration,
        ops: tl_workload::count(&logs.history),
        faults: log,
        verdicts,
        passed,
        history: History::new(),
        messages,
        simulated: Instant::now().duration_since(start),
        timeline: Some(logs),
        tl_stats: Some(total),
        notes,
        txn: None,
    }
}
