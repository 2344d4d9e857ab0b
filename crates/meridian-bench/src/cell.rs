//! One benchmark cell on a Meridian cluster (spec `experiments.md` §1–§4): start the cluster
//! ([`Clock::Real`]: the embedded cluster; [`Clock::Virtual`]: the simulator's), **load**
//! every record from its home DC, **warm up** timeline buckets so masters migrate toward
//! their writers, then **measure** the workload, and stop the cluster.
//!
//! Guarantees:
//! - The phases are sequential and their boundaries are reported ([`CellResult::phases`]),
//!   so a result says what it measured.
//! - The warm-up follows `timeline.md` §9: update-only traffic with the cell's locality, in
//!   passes of `recordcount` writes, until the migrations of a pass fall below
//!   [`WarmupConfig::until_migrations`] of its writes or `max_passes` passes (5·T by
//!   default) have run. Eventual modes have nothing to warm.
//! - A load that leaves records missing fails the cell ([`BenchError::Target`]) instead of
//!   measuring reads of keys that were never written.
//! - Virtual-time cells run on their own paused-clock runtime: the same code, seeds and
//!   cluster as a real-time cell, with every delay simulated.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::cluster::{ClusterSpec, EmbeddedCluster, NodeTarget, VirtualCluster, virtual_runtime};
use crate::runner::{self, Arrival, LoadResult, Progress, RunConfig, RunResult};
use crate::workload::CoreWorkload;

/// Which clock a cell runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// The embedded cluster in real time.
    Real,
    /// The simulator's cluster in virtual time.
    Virtual,
}

impl Clock {
    /// `real` or `virtual`.
    pub fn as_str(self) -> &'static str {
        match self {
            Clock::Real => "real",
            Clock::Virtual => "virtual",
        }
    }
}

/// The timeline warm-up (`timeline.md` §9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmupConfig {
    /// Most passes (each writes `recordcount` updates); 0 skips the warm-up.
    pub max_passes: u32,
    /// Stop once a pass's migrations are below this fraction of its writes.
    pub until_migrations: f64,
    /// Client threads (closed loop, as fast as possible).
    pub threads: u32,
}

impl Default for WarmupConfig {
    /// 5·T = 15 passes at most, until migrations < 1 %, 64 threads.
    fn default() -> Self {
        WarmupConfig {
            max_passes: 15,
            until_migrations: 0.01,
            threads: 64,
        }
    }
}

/// Everything one cell needs.
#[derive(Debug, Clone, PartialEq)]
pub struct CellConfig {
    /// The cluster and mode.
    pub cluster: ClusterSpec,
    /// The workload (its `dcs` must equal the cluster's; `locality` sets the client bias).
    pub workload: CoreWorkload,
    /// The measured run (arrival, duration, warm-up cut, seed, ...).
    pub run: RunConfig,
    /// Threads of the load phase.
    pub load_threads: u32,
    /// The timeline warm-up.
    pub warmup: WarmupConfig,
    /// Real or virtual time.
    pub clock: Clock,
}

/// Phase boundaries and what each phase did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Records inserted by the load phase.
    pub loaded: u64,
    /// Duration of the load phase (s).
    pub load_s: f64,
    /// Warm-up passes run.
    pub warmup_passes: u32,
    /// Migrations in each warm-up pass, as a fraction of its writes.
    pub warmup_migration_rates: Vec<f64>,
    /// Duration of the warm-up (s).
    pub warmup_s: f64,
    /// Fraction of keys mastered in their home DC after the load (timeline modes).
    pub home_mastered_after_load: Option<f64>,
    /// Fraction of keys mastered in their home DC after the warm-up (timeline modes).
    pub home_mastered_after_warmup: Option<f64>,
    /// Duration of the measured run, its own warm-up cut included (s).
    pub measure_s: f64,
}

/// What a cell produced.
#[derive(Debug, Clone, PartialEq)]
pub struct CellResult {
    /// The measured run.
    pub run: RunResult,
    /// Phase boundaries.
    pub phases: Phases,
    /// Protocol counters of every node during the measured run (migrations, read repairs,
    /// ...).
    pub counters: BTreeMap<String, f64>,
}

/// Runs one cell on its own runtime (blocking): a paused current-thread runtime for
/// [`Clock::Virtual`], a multi-thread runtime for [`Clock::Real`].
///
/// `progress` receives the measured run's live figures and, as a [`Progress`] with
/// `warming_up` set, nothing else: load and warm-up report through `on_phase`.
pub fn run_cell(
    cfg: &CellConfig,
    on_phase: &mut (dyn FnMut(&str) + Send),
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<CellResult, BenchError> {
    validate(cfg)?;
    match cfg.clock {
        Clock::Virtual => virtual_runtime()?.block_on(async {
            let cluster = VirtualCluster::start(&cfg.cluster).await?;
            let r = run_phases(cluster.target(), cfg, on_phase, progress).await;
            cluster.shutdown();
            r
        }),
        Clock::Real => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| BenchError::Target {
                    reason: format!("building the tokio runtime: {e}"),
                })?;
            rt.block_on(async {
                let cluster = EmbeddedCluster::start(&cfg.cluster).await?;
                let r = run_phases(cluster.target(), cfg, on_phase, progress).await;
                cluster.shutdown().await;
                r
            })
        }
    }
}

fn validate(cfg: &CellConfig) -> Result<(), BenchError> {
    if cfg.workload.dcs != cfg.cluster.dcs {
        return Err(BenchError::InvalidDesign {
            reason: format!(
                "the workload homes keys in {} DCs but the cluster has {}; set them equal",
                cfg.workload.dcs, cfg.cluster.dcs
            ),
        });
    }
    if cfg.workload.scan_proportion > 0.0 {
        return Err(BenchError::InvalidDesign {
            reason: "Meridian's key-value modes serve no scans: set scanproportion=0".into(),
        });
    }
    if cfg.load_threads == 0 || cfg.warmup.threads == 0 {
        return Err(BenchError::InvalidDesign {
            reason: "load and warm-up need at least one thread each".into(),
        });
    }
    Ok(())
}

/// Load, warm-up and measurement against a started cluster.
pub async fn run_phases(
    target: NodeTarget,
    cfg: &CellConfig,
    on_phase: &mut (dyn FnMut(&str) + Send),
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<CellResult, BenchError> {
    let target = Arc::new(target);
    let w = &cfg.workload;
    let keys =
        || (0..w.record_count).map(|k| (k, crate::cluster::bucket_key(w.key_name(k).as_bytes())));

    on_phase(&format!("load: 0/{} records", w.record_count));
    let LoadResult {
        inserted,
        failed,
        elapsed: load_elapsed,
    } = runner::load(Arc::clone(&target), w, cfg.load_threads, |done, total| {
        on_phase(&format!("load: {done}/{total} records"));
    })
    .await?;
    on_phase(&format!("load: {inserted}/{} records", w.record_count));
    if !failed.is_empty() {
        return Err(BenchError::Target {
            reason: format!(
                "the load phase could not insert {} of {} records (errors by code: {failed:?}); \
                 the cluster is unhealthy or overloaded, so the cell was not measured",
                failed.values().sum::<u64>(),
                w.record_count
            ),
        });
    }
    // Let the last inserts replicate before masters are counted.
    tokio::time::sleep(cfg.cluster.wan_rtt + Duration::from_millis(500)).await;
    let home_after_load = target.home_mastered(keys());

    let warm_start = tokio::time::Instant::now();
    let mut rates = Vec::new();
    if cfg.cluster.mode.is_timeline() {
        let mut updates = w.clone();
        updates.read_proportion = 0.0;
        updates.update_proportion = 1.0;
        updates.insert_proportion = 0.0;
        updates.read_modify_write_proportion = 0.0;
        let max = cfg.warmup.max_passes;
        for pass in 0..max {
            let before = target.counters().get("migrations").copied().unwrap_or(0.0);
            let name = format!("warm-up pass {}/{max}", pass + 1);
            on_phase(&format!("{name}: 0/{} updates", w.record_count));
            let mut pass_cfg = RunConfig::new(
                Arrival::Closed {
                    threads: cfg.warmup.threads,
                },
                Duration::from_secs(3600),
            );
            pass_cfg.seed = cfg.run.seed ^ (0x5741_524d_0000_0000 | u64::from(pass));
            pass_cfg.max_ops = Some(w.record_count);
            let r = runner::run(Arc::clone(&target), &updates, &pass_cfg, |p| {
                on_phase(&format!(
                    "{name}: {}/{} updates",
                    p.completed + p.errors,
                    w.record_count
                ));
            })
            .await?;
            let after = target.counters().get("migrations").copied().unwrap_or(0.0);
            let writes = r.ops_started.max(1) as f64;
            let rate = (after - before) / writes;
            rates.push(rate);
            on_phase(&format!(
                "{name}: {:.2} % of updates migrated a master (the passes end below {} %)",
                rate * 100.0,
                cfg.warmup.until_migrations * 100.0
            ));
            if rate < cfg.warmup.until_migrations {
                break;
            }
        }
    }
    let warmup_s = warm_start.elapsed().as_secs_f64();
    let home_after_warmup = target.home_mastered(keys());

    on_phase(&runner::warmup_phase(&cfg.run));
    let before = target.counters();
    let run = runner::run(Arc::clone(&target), w, &cfg.run, |p| progress(p)).await?;
    let mut counters = target.counters();
    for (k, v) in &mut counters {
        *v -= before.get(k).copied().unwrap_or(0.0);
    }
    Ok(CellResult {
        phases: Phases {
            loaded: inserted,
            load_s: load_elapsed.as_secs_f64(),
            warmup_passes: rates.len() as u32,
            warmup_migration_rates: rates,
            warmup_s,
            home_mastered_after_load: home_after_load,
            home_mastered_after_warmup: home_after_warmup,
            measure_s: run.elapsed.as_secs_f64(),
        },
        run,
        counters,
    })
}
