//! [`ClusterExecutor`]: runs a design's runs (spec `experiments.md` §1) as [`cell`]s on
//! Meridian clusters, in virtual or real time.
//!
//! A run's parameters are looked up by name, first among the cell's factors and the
//! design's `fixed` table, then in its `load`, `phases` and `wan` tables, so any of them can
//! be made a factor. The names and defaults (the geo study's fixed parameters, §2):
//!
//! | name | meaning | default |
//! |---|---|---|
//! | `mode` | `ind1`, `ind2`, `lt_qqer`, `lt_rec` | required |
//! | `clock` | `virtual` or `real` | the executor's |
//! | `dcs`, `nodes` (all DCs) or `nodes_per_dc` | cluster shape | 2, 6 |
//! | `n_val`, `ring_q`, `migration_threshold` | replication | 3, 64, 3 |
//! | `wan_rtt_ms`, `jitter_pct`, `loss` | inter-DC link: RTT, jitter in % of the RTT, loss fraction | 100, 0, 0 |
//! | `objects`, `value_bytes`, `rw`, `popularity`, `locality` | workload (`rw` = `"2:1"` reads:updates; `popularity` = a YCSB `requestdistribution`, `pareto` or `zipf`) | 10 000, 500, `"2:1"`, `uniform`, 0.5 |
//! | `generator`, `threads`, `rate_per_thread`, `rate` | arrivals: `paced` (threads × λ), `max` (closed loop), `open` (Poisson at `rate` ops/s) | `paced`, 64, 15 |
//! | `measure_s`, `warmup_s` | measured phase and its excluded start | 60, 5 |
//! | `load_threads`, `warmup_passes`, `warmup_until`, `warmup_threads` | load, and the timeline warm-up (passes at most, stop below this migration fraction, closed-loop threads) | 64, 15, 0.01, 64 |
//!
//! An unknown name among factors or `fixed` is refused (a typo would otherwise be silently
//! ignored); the free-form tables may hold other keys for other runners.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::BenchError;
use crate::cell::{self, CellConfig, Clock, WarmupConfig};
use crate::cluster::{ClusterSpec, Mode};
use crate::experiment::{Design, Executor, Level, RunOutcome, RunSpec};
use crate::runner::{Arrival, Progress, RunConfig};
use crate::workload::CoreWorkload;

/// Every parameter name the executor reads.
pub const PARAMETERS: &[&str] = &[
    "mode",
    "clock",
    "dcs",
    "nodes",
    "nodes_per_dc",
    "n_val",
    "ring_q",
    "migration_threshold",
    "wan_rtt_ms",
    "jitter_pct",
    "loss",
    "objects",
    "value_bytes",
    "rw",
    "popularity",
    "locality",
    "generator",
    "threads",
    "rate_per_thread",
    "rate",
    "measure_s",
    "warmup_s",
    "load_threads",
    "warmup_passes",
    "warmup_until",
    "warmup_threads",
];

/// The longest measurement or warm-up phase a design may ask for (a week).
const MAX_PHASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// A run's parameters, through [`Design::param`].
struct Params<'a> {
    design: &'a Design,
    run: &'a RunSpec,
}

impl Params<'_> {
    fn bad(name: &str, want: &str, got: &dyn std::fmt::Display) -> BenchError {
        BenchError::InvalidDesign {
            reason: format!("parameter `{name}` = {got}: expected {want}"),
        }
    }

    fn get(&self, name: &str) -> Option<Level> {
        self.design.param(self.run, name)
    }

    fn number(&self, name: &str, default: f64) -> Result<f64, BenchError> {
        self.get(name).map_or(Ok(default), |l| {
            l.as_f64().ok_or_else(|| Self::bad(name, "a number", &l))
        })
    }

    /// A duration parameter written as a number of `unit`s (`wan_rtt_ms`: milliseconds,
    /// `measure_s`: seconds): finite, at least 0 and at most `max`; never a panic of
    /// `Duration::from_secs_f64` on NaN, infinity or a huge value.
    fn duration(
        &self,
        name: &str,
        default: f64,
        unit: Duration,
        max: Duration,
    ) -> Result<Duration, BenchError> {
        let v = self.number(name, default)?;
        let want = || {
            format!(
                "a finite number between 0 and {}",
                max.as_secs_f64() / unit.as_secs_f64()
            )
        };
        if !(v.is_finite() && v >= 0.0) {
            return Err(Self::bad(name, &want(), &v));
        }
        match Duration::try_from_secs_f64(v * unit.as_secs_f64()) {
            Ok(d) if d <= max => Ok(d),
            _ => Err(Self::bad(name, &want(), &v)),
        }
    }

    /// A non-negative integer parameter of at most `u32::MAX` (counts of nodes, threads,
    /// objects, bytes, passes: none needs more, and none may be silently truncated).
    fn count(&self, name: &str, default: u32) -> Result<u32, BenchError> {
        let v = self.number(name, f64::from(default))?;
        if v < 0.0 || v.fract() != 0.0 || v > f64::from(u32::MAX) {
            return Err(Self::bad(
                name,
                &format!("an integer in 0..={}", u32::MAX),
                &v,
            ));
        }
        Ok(v as u32)
    }

    fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn text(&self, name: &str) -> Result<Option<String>, BenchError> {
        self.get(name)
            .map(|l| {
                l.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| Self::bad(name, "a string", &l))
            })
            .transpose()
    }
}

/// The cell a run describes (see the module header for the parameters).
pub fn cell_config(
    design: &Design,
    run: &RunSpec,
    default_clock: Clock,
) -> Result<CellConfig, BenchError> {
    if let Some(unknown) = run
        .params()
        .into_keys()
        .find(|k| !PARAMETERS.contains(&k.as_str()))
    {
        return Err(BenchError::InvalidDesign {
            reason: format!(
                "unknown parameter `{unknown}`; the cluster executor reads: {}",
                PARAMETERS.join(", ")
            ),
        });
    }
    let p = Params { design, run };
    let mode: Mode = p
        .text("mode")?
        .ok_or_else(|| BenchError::InvalidDesign {
            reason:
                "no `mode`: make it a factor or a fixed parameter (ind1, ind2, lt_qqer, lt_rec)"
                    .into(),
        })?
        .parse()?;
    let clock = match p.text("clock")?.as_deref() {
        None => default_clock,
        Some("virtual") => Clock::Virtual,
        Some("real") => Clock::Real,
        Some(other) => return Err(Params::bad("clock", "`virtual` or `real`", &other)),
    };
    let dcs = p.count("dcs", 2)?;
    let nodes_per_dc = if p.has("nodes") {
        let nodes = p.count("nodes", 6)?;
        if dcs == 0 || !nodes.is_multiple_of(dcs) {
            return Err(Params::bad(
                "nodes",
                &format!("a multiple of dcs = {dcs}"),
                &nodes,
            ));
        }
        nodes / dcs
    } else {
        p.count("nodes_per_dc", 3)?
    };
    let cluster = ClusterSpec {
        dcs,
        nodes_per_dc,
        n: p.count("n_val", 3)?,
        q: p.count("ring_q", 64)?,
        wan_rtt: p.duration(
            "wan_rtt_ms",
            100.0,
            Duration::from_millis(1),
            meridian_net::wan::config::MAX_RTT,
        )?,
        jitter: p.number("jitter_pct", 0.0)? / 100.0,
        loss: p.number("loss", 0.0)?,
        mode,
        migration_threshold: p.count("migration_threshold", 3)?,
        seed: run.seed,
    };

    let (reads, updates) = parse_rw(&p.text("rw")?.unwrap_or_else(|| "2:1".into()))?;
    let mut props = BTreeMap::from([
        (
            "recordcount".to_owned(),
            p.count("objects", 10_000)?.to_string(),
        ),
        ("readproportion".to_owned(), reads.to_string()),
        ("updateproportion".to_owned(), updates.to_string()),
        ("insertproportion".to_owned(), "0".to_owned()),
        ("fieldcount".to_owned(), "1".to_owned()),
        (
            "fieldlength".to_owned(),
            p.count("value_bytes", 500)?.to_string(),
        ),
        (
            "locality".to_owned(),
            p.number("locality", 0.5)?.to_string(),
        ),
        ("dcs".to_owned(), dcs.to_string()),
    ]);
    props.insert(
        "requestdistribution".to_owned(),
        p.text("popularity")?.unwrap_or_else(|| "uniform".into()),
    );
    let workload: CoreWorkload = CoreWorkload::from_properties(&props)?.workload;

    let threads = p.count("threads", 64)?;
    let arrival = match p.text("generator")?.as_deref().unwrap_or("paced") {
        "paced" => Arrival::Paced {
            threads,
            rate_per_thread: p.number("rate_per_thread", 15.0)?,
        },
        "max" => Arrival::Closed { threads },
        "open" => Arrival::Open {
            rate: p.number("rate", 1000.0)?,
        },
        other => {
            return Err(Params::bad("generator", "`paced`, `max` or `open`", &other));
        }
    };
    let mut measured = RunConfig::new(
        arrival,
        p.duration("measure_s", 60.0, Duration::from_secs(1), MAX_PHASE)?,
    );
    measured.warmup = p.duration("warmup_s", 5.0, Duration::from_secs(1), MAX_PHASE)?;
    measured.seed = run.seed;
    Ok(CellConfig {
        cluster,
        workload,
        run: measured,
        load_threads: p.count("load_threads", 64)?,
        warmup: WarmupConfig {
            max_passes: p.count("warmup_passes", 15)?,
            until_migrations: p.number("warmup_until", 0.01)?,
            threads: p.count("warmup_threads", 64)?,
        },
        clock,
    })
}

/// `"2:1"` → shares (2/3, 1/3) of reads and updates.
pub fn parse_rw(rw: &str) -> Result<(f64, f64), BenchError> {
    let bad = || Params::bad("rw", "`reads:updates`, e.g. \"2:1\"", &rw);
    let (r, w) = rw.split_once(':').ok_or_else(bad)?;
    let r: f64 = r.trim().parse().map_err(|_| bad())?;
    let w: f64 = w.trim().parse().map_err(|_| bad())?;
    if !(r >= 0.0 && w >= 0.0 && r + w > 0.0 && (r + w).is_finite()) {
        return Err(bad());
    }
    Ok((r / (r + w), w / (r + w)))
}

/// Runs each design run as a cell; `on_phase` and `progress` see every cell's phases and
/// live figures (for a progress bar).
pub struct ClusterExecutor<'a> {
    /// The clock of runs that do not set `clock`.
    pub default_clock: Clock,
    /// Settings added to every run's (host, commit, build profile, ...).
    pub host: serde_json::Value,
    /// Called with each phase's description.
    pub on_phase: Box<dyn FnMut(&str) + Send + 'a>,
    /// Called with the measured run's live figures.
    pub progress: Box<dyn FnMut(&Progress) + Send + 'a>,
}

impl Executor for ClusterExecutor<'_> {
    fn execute(&mut self, design: &Design, run: &RunSpec) -> Result<RunOutcome, BenchError> {
        let cfg = cell_config(design, run, self.default_clock)?;
        let wall = std::time::Instant::now();
        let r = cell::run_cell(&cfg, &mut *self.on_phase, &mut *self.progress)?;
        let settings = serde_json::json!({
            "host": self.host,
            "clock": cfg.clock.as_str(),
            "cluster": cfg.cluster,
            "workload": format!("{:?}", cfg.workload),
            "arrival": format!("{:?}", cfg.run.arrival),
            "measure_s": cfg.run.duration.as_secs_f64(),
            "warmup_cut_s": cfg.run.warmup.as_secs_f64(),
            "seeds": { "run": run.seed, "workload": cfg.run.seed, "emulator": cfg.cluster.seed },
            "phases": r.phases,
            "ops_started": r.run.ops_started,
            "ops_dropped": r.run.ops_dropped,
            "late_starts": r.run.late_starts,
            "wall_s": wall.elapsed().as_secs_f64(),
        });
        Ok(RunOutcome {
            histogram_log: Some(r.run.recorder.interval_log(r.run.measured)?),
            report: r.run.report,
            mean_throughput: r.run.mean_throughput,
            counters: r.counters,
            settings,
            runner: cfg.clock.as_str().to_owned(),
            elapsed_s: r.run.elapsed.as_secs_f64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn design(text: &str) -> Design {
        Design::parse(text).unwrap()
    }

    #[test]
    fn parameters_come_from_factors_fixed_and_tables() {
        let d = design(
            r#"
            design = { kind = "full_factorial", replications = 1, order_seed = 3 }
            factors = { mode = ["ind2", "lt_rec"], wan_rtt_ms = [0, 200] }
            fixed = { nodes = 8, objects = 1000, rw = "10:1", locality = 0.9, popularity = "zipfian" }
            load = { generator = "max", threads = 12 }
            phases = { measure_s = 30 }
            wan = { jitter_pct = 60 }
            "#,
        );
        let run = &d.runs()[0];
        let c = cell_config(&d, run, Clock::Virtual).unwrap();
        assert_eq!(
            c.cluster.mode.as_str(),
            run.params()["mode"].as_str().unwrap()
        );
        assert_eq!((c.cluster.dcs, c.cluster.nodes_per_dc), (2, 4));
        assert_eq!(c.cluster.jitter, 0.6);
        assert_eq!(c.workload.record_count, 1000);
        assert!((c.workload.read_proportion - 10.0 / 11.0).abs() < 1e-12);
        assert_eq!(c.workload.locality, Some(0.9));
        assert_eq!(c.run.arrival, Arrival::Closed { threads: 12 });
        assert_eq!(c.run.duration, Duration::from_secs(30));
        assert_eq!(c.run.seed, run.seed);
        assert_eq!(c.clock, Clock::Virtual);
        assert_eq!(c.workload.field_length, 500);
    }

    #[test]
    fn bad_parameters_are_refused_with_their_name() {
        let err = |fixed: &str| {
            let d = design(&format!(
                "design = {{ kind = \"full_factorial\" }}\nfactors = {{ mode = [\"ind1\"] }}\nfixed = {{ {fixed} }}"
            ));
            cell_config(&d, &d.runs()[0], Clock::Virtual)
                .unwrap_err()
                .to_string()
        };
        assert!(err("wan_rtt = 100").contains("unknown parameter `wan_rtt`"));
        assert!(err("rw = \"2-1\"").contains("`rw`"));
        assert!(err("nodes = 7").contains("multiple of dcs"));
        assert!(err("generator = \"fast\"").contains("`generator`"));
        assert!(err("clock = \"wall\"").contains("`clock`"));
        assert!(err("objects = \"many\"").contains("`objects`"));
        assert!(err("popularity = \"gaussian\"").contains("requestdistribution"));
        // Durations that used to panic in `Duration::from_secs_f64` (1e308) or were silently
        // clamped (negative) are refused, naming the parameter and its range.
        for (fixed, name) in [
            ("wan_rtt_ms = 1e308", "wan_rtt_ms"),
            ("wan_rtt_ms = 60001", "wan_rtt_ms"),
            ("wan_rtt_ms = -1", "wan_rtt_ms"),
            ("measure_s = 1e300", "measure_s"),
            ("warmup_s = -1", "warmup_s"),
        ] {
            let e = err(fixed);
            assert!(
                e.contains(&format!("parameter `{name}`"))
                    && e.contains("expected a finite number between 0 and"),
                "{fixed}: {e}"
            );
        }
        // NaN and infinities, wherever a design may put them, never panic.
        for (section, param, v) in [
            ("fixed", "wan_rtt_ms", "nan"),
            ("wan", "wan_rtt_ms", "nan"),
            ("wan", "wan_rtt_ms", "inf"),
            ("phases", "measure_s", "inf"),
            ("phases", "warmup_s", "-inf"),
            ("phases", "warmup_s", "nan"),
        ] {
            let text = format!(
                "design = {{ kind = \"full_factorial\" }}\nfactors = {{ mode = [\"ind1\"] }}\n{section} = {{ {param} = {v} }}"
            );
            // `fixed` refuses them at parse time; the other sections skip non-finite values
            // (`Level::from_toml`), so the default applies.
            if let Ok(d) = Design::parse(&text) {
                let c = cell_config(&d, &d.runs()[0], Clock::Virtual).expect(&text);
                assert!(
                    c.run.duration <= MAX_PHASE && c.cluster.wan_rtt <= Duration::from_secs(60)
                );
            }
        }
        let d = design("design = { kind = \"full_factorial\" }\nfactors = { locality = [0.5] }");
        assert!(
            cell_config(&d, &d.runs()[0], Clock::Virtual)
                .unwrap_err()
                .to_string()
                .contains("no `mode`")
        );
    }

    #[test]
    fn rw_ratios_become_shares() {
        assert_eq!(parse_rw("2:1").unwrap(), (2.0 / 3.0, 1.0 / 3.0));
        assert_eq!(parse_rw("1:0").unwrap(), (1.0, 0.0));
        assert!(parse_rw("0:0").is_err());
        assert!(parse_rw("a:1").is_err());
    }
}
