//! The study as a whole: which scenarios each part runs (dynamic, baselines, capacity, f sweep,
//! heterogeneous, sensitivity) and the options that scale it. Every scenario is seeded, so the
//! same options give the same numbers.

use super::{
    Arrivals, BATCH_REQUESTS, CAPACITY_LAMBDAS, DEFAULT_REQUESTS, F_SWEEP, HETERO_F, HETERO_LAMBDA,
    KeyDist, LAMBDA_MAIN, LAMBDAS, PAPER_REQUESTS, RunResult, SERVICE_US, SLOW_FACTOR, SLOW_NODE,
    Scenario, run_blocking,
};
use std::sync::atomic::Ordering;

use meridian_replication::{DeferredClaim, ServiceModel, Strategy};
use parking_lot::Mutex;

use crate::BenchError;

/// How much of the study to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StudyOptions {
    /// Requests of each dynamic-scenario run (the paper: 400 000).
    pub requests: usize,
    /// Requests of each f-sweep batch.
    pub batch_requests: usize,
    /// Requests of each heterogeneous (C3) run.
    pub hetero_requests: usize,
    /// Requests of each capacity run.
    pub capacity_requests: usize,
    /// The seed of every cluster and workload.
    pub seed: u64,
    /// Runs executed at once (each on its own thread and virtual-time runtime).
    pub jobs: usize,
}

impl StudyOptions {
    /// The default, reduced study (see the README: 5× fewer requests per dynamic run).
    pub fn reduced(seed: u64) -> StudyOptions {
        StudyOptions {
            requests: DEFAULT_REQUESTS,
            batch_requests: BATCH_REQUESTS,
            hetero_requests: 40_000,
            capacity_requests: 20_000,
            seed,
            jobs: 2,
        }
    }

    /// The study's sizes (`--full`).
    pub fn full(seed: u64) -> StudyOptions {
        StudyOptions {
            requests: PAPER_REQUESTS,
            hetero_requests: 200_000,
            capacity_requests: 100_000,
            ..StudyOptions::reduced(seed)
        }
    }

    /// A smoke run (`--quick`): 4 000 requests per dynamic run, small batches.
    pub fn quick(seed: u64) -> StudyOptions {
        StudyOptions {
            requests: DEFAULT_REQUESTS / 20,
            batch_requests: BATCH_REQUESTS / 2,
            hetero_requests: 4_000,
            capacity_requests: 4_000,
            ..StudyOptions::reduced(seed)
        }
    }
}

/// The three strategies of the paper, in its order.
pub const PAPER_STRATEGIES: [Strategy; 3] =
    [Strategy::DynamicSnitch, Strategy::Avr, Strategy::Naive];
/// The extra baselines (at [`LAMBDA_MAIN`]).
pub const BASELINES: [Strategy; 4] = [
    Strategy::LeastOutstanding,
    Strategy::PowerOfD,
    Strategy::C3,
    Strategy::RoundRobin,
];
/// The f sweep's strategies.
pub const SWEEP_STRATEGIES: [Strategy; 3] =
    [Strategy::Naive, Strategy::Avr, Strategy::LeastOutstanding];
/// The heterogeneous run's strategies.
pub const HETERO_STRATEGIES: [Strategy; 4] = [
    Strategy::DynamicSnitch,
    Strategy::C3,
    Strategy::LeastOutstanding,
    Strategy::RoundRobin,
];

/// Everything the study measured.
#[derive(Debug, Clone)]
pub struct StudyResults {
    /// The options it ran with.
    pub options: StudyOptions,
    /// The paper's strategies × copies × λ.
    pub dynamic: Vec<RunResult>,
    /// The baselines at [`LAMBDA_MAIN`].
    pub baselines: Vec<RunResult>,
    /// round_robin under uniform load.
    pub capacity: Vec<RunResult>,
    /// The f sweep (batches).
    pub fsweep: Vec<RunResult>,
    /// One slow node (and the same runs without it).
    pub hetero: Vec<RunResult>,
    /// Sensitivity: the paper's strategies at [`LAMBDA_MAIN`] with `exp:30` service.
    pub dynamic_exp: Vec<RunResult>,
    /// Sensitivity: the f sweep with `exp:30` service.
    pub fsweep_exp: Vec<RunResult>,
    /// The deferred strategies at [`LAMBDA_MAIN`] under the study's `cancel` claim rule.
    pub dynamic_cancel: Vec<RunResult>,
    /// The f sweep's deferred strategies under the `cancel` claim rule.
    pub fsweep_cancel: Vec<RunResult>,
}

/// The study's scenarios, by part.
pub fn study_scenarios(o: &StudyOptions) -> Vec<(&'static str, Scenario)> {
    let mut v = Vec::new();
    for &lambda in &LAMBDAS {
        for s in PAPER_STRATEGIES {
            for copies in [false, true] {
                v.push((
                    "dynamic",
                    Scenario::dynamic(s, copies, lambda, o.requests, o.seed),
                ));
            }
        }
    }
    for s in BASELINES {
        for copies in [false, true] {
            v.push((
                "baselines",
                Scenario::dynamic(s, copies, LAMBDA_MAIN, o.requests, o.seed),
            ));
        }
    }
    for &lambda in &CAPACITY_LAMBDAS {
        let mut sc = Scenario::dynamic(
            Strategy::RoundRobin,
            false,
            lambda,
            o.capacity_requests,
            o.seed,
        );
        sc.phases = vec![KeyDist::Uniform];
        sc.label = format!("round_robin, uniform, λ = {lambda}");
        v.push(("capacity", sc));
    }
    let exp = ServiceModel::Exp {
        mean_us: SERVICE_US,
    };
    for (part, service, claim) in [
        ("fsweep", None, DeferredClaim::Token),
        ("fsweep_exp", Some(exp), DeferredClaim::Token),
        ("fsweep_cancel", None, DeferredClaim::Cancel),
    ] {
        for dist in [KeyDist::Partition, KeyDist::Zipf(1.0)] {
            for &f in &F_SWEEP {
                for s in SWEEP_STRATEGIES {
                    if claim == DeferredClaim::Cancel && !s.is_deferred() {
                        continue;
                    }
                    let mut sc = Scenario::dynamic(s, false, 0.0, o.batch_requests, o.seed);
                    sc.arrivals = Arrivals::Batch { spread_ms: 1_000 };
                    sc.f = f;
                    sc.phases = vec![dist];
                    sc.workload_seed = o.seed ^ 0xba7c;
                    sc.label = format!("{}, f = {f}, {}", s.name(), dist_name(dist));
                    if let Some(m) = service {
                        sc.service = m;
                        sc.label.push_str(", exp:30");
                    }
                    if claim == DeferredClaim::Cancel {
                        sc.claim = claim;
                        sc.label.push_str(", claim = cancel");
                    }
                    v.push((part, sc));
                }
            }
        }
    }
    for s in PAPER_STRATEGIES {
        for copies in [false, true] {
            let mut sc = Scenario::dynamic(s, copies, LAMBDA_MAIN, o.requests, o.seed);
            sc.service = exp;
            sc.label.push_str(", exp:30");
            v.push(("dynamic_exp", sc));
        }
    }
    for s in PAPER_STRATEGIES.into_iter().filter(|s| s.is_deferred()) {
        for copies in [false, true] {
            let mut sc = Scenario::dynamic(s, copies, LAMBDA_MAIN, o.requests, o.seed);
            sc.claim = DeferredClaim::Cancel;
            sc.label.push_str(", claim = cancel");
            v.push(("dynamic_cancel", sc));
        }
    }
    for slow in [true, false] {
        for s in HETERO_STRATEGIES {
            let mut sc = Scenario::dynamic(s, false, HETERO_LAMBDA, o.hetero_requests, o.seed);
            sc.f = HETERO_F;
            sc.phases = vec![KeyDist::Uniform];
            sc.service = ServiceModel::Exp {
                mean_us: SERVICE_US,
            };
            if slow {
                sc.slow = Some((
                    SLOW_NODE,
                    ServiceModel::Exp {
                        mean_us: SERVICE_US * u64::from(SLOW_FACTOR),
                    },
                ));
            }
            sc.label = format!(
                "{}, {}",
                s.name(),
                if slow {
                    "one node 3× slower"
                } else {
                    "all nodes equal"
                }
            );
            v.push(("hetero", sc));
        }
    }
    v
}

pub(super) fn dist_name(d: KeyDist) -> &'static str {
    match d {
        KeyDist::Partition => "adversarial",
        KeyDist::Zipf(_) => "few popular",
        KeyDist::Uniform => "uniform",
    }
}

/// Runs the whole study, `jobs` runs at a time, reporting each finished run through `log`.
pub fn run_study(
    opts: &StudyOptions,
    log: &(dyn Fn(&str) + Sync),
) -> Result<StudyResults, BenchError> {
    let scenarios = study_scenarios(opts);
    let total = scenarios.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<RunResult, BenchError>>>> =
        (0..total).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((part, sc)) = scenarios.get(i) else {
                        break;
                    };
                    let started = std::time::Instant::now();
                    let r = run_blocking(sc);
                    let lambda = sc.lambda().map_or(String::new(), |l| format!(", λ = {l}"));
                    let what = match &r {
                        Ok(r) => format!(
                            "mean {:.3} s, p99 {:.0} ms, {} failed, {} unfinished",
                            r.mean_s(),
                            r.q_ms(0.99),
                            r.failed,
                            r.unfinished
                        ),
                        Err(e) => format!("FAILED: {e}"),
                    };
                    log(&format!(
                        "[{}/{total}] {part}: {}{lambda} ({:.1} s wall): {what}",
                        i + 1,
                        sc.label,
                        started.elapsed().as_secs_f64()
                    ));
                    *slots[i].lock() = Some(r);
                }
            });
        }
    });
    let mut res = StudyResults {
        options: *opts,
        dynamic: Vec::new(),
        baselines: Vec::new(),
        capacity: Vec::new(),
        fsweep: Vec::new(),
        hetero: Vec::new(),
        dynamic_exp: Vec::new(),
        fsweep_exp: Vec::new(),
        dynamic_cancel: Vec::new(),
        fsweep_cancel: Vec::new(),
    };
    for ((part, _), slot) in scenarios.iter().zip(slots) {
        let r = slot.into_inner().unwrap_or_else(|| {
            Err(BenchError::Target {
                reason: "run not executed".into(),
            })
        })?;
        match *part {
            "dynamic" => res.dynamic.push(r),
            "baselines" => res.baselines.push(r),
            "capacity" => res.capacity.push(r),
            "fsweep" => res.fsweep.push(r),
            "dynamic_exp" => res.dynamic_exp.push(r),
            "fsweep_exp" => res.fsweep_exp.push(r),
            "dynamic_cancel" => res.dynamic_cancel.push(r),
            "fsweep_cancel" => res.fsweep_cancel.push(r),
            _ => res.hetero.push(r),
        }
    }
    Ok(res)
}
