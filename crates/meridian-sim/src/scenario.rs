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

use crate::checker::{self, ReplicaStates, Verdict};
use crate::cluster::{SimCluster, SimConfig};
use crate::disk::SyncPolicy;
use crate::faults::{self, FaultKinds, ScheduledFault};
use crate::history::{History, Recorder};
use crate::workload::{self, OpCounts, WorkloadConfig};
use meridian_cluster::{Props, Quorum};
use meridian_replication::BucketProps;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;
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
        },
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

async fn run_in_runtime(scenario: &Scenario, seed: u64) -> Report {
    let start = Instant::now();
    let mut cfg = scenario.cluster.clone();
    cfg.seed = seed;
    let mut cluster = SimCluster::start(cfg);
    // Let every detector hear every peer.
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
    let mut log = Vec::new();
    // The workload ends on time even if a fault's undo (a rejoin waiting for a handoff) is
    // still retrying; the heal below finishes the job.
    let end = origin + scenario.duration;
    tokio::select! {
        biased;
        _ = drive_faults(&mut cluster, &schedule, origin, &baseline_link, &mut log) => {
            tokio::time::sleep_until(end).await;
        }
        _ = tokio::time::sleep_until(end) => {}
    }
    until.cancel();
    // Operations already started end by their timeout (a write's read plus the write).
    tokio::time::sleep(scenario.workload.timeout * 2 + Duration::from_secs(1)).await;

    // Heal everything, restart the crashed, quiesce, then drive anti-entropy to a fixpoint.
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
    wait_handoff(&cluster).await;
    force_anti_entropy(&cluster).await;

    let keys = scenario.workload.all_keys();
    let n_val = scenario.cluster.n as usize;
    let replicas: ReplicaStates = cluster.replica_values(&keys, n_val);
    let history = recorder.snapshot();
    let ops = workload::count(&history);
    let mut verdicts = Vec::new();
    let c = scenario.checks;
    if c.lost_writes {
        verdicts.push(
            checker::lost_writes::check(&history, &checker::merge_replicas(&replicas))
                .expect("well-formed history"),
        );
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
    }
}

/// Applies and undoes each scheduled fault at its virtual time.
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
async fn force_anti_entropy(cluster: &SimCluster) {
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
