//! Resumable execution of a design's runs into `results/<cell>/<rep>/` (spec §1 "a run is
//! restartable", §7 the per-run files).
//!
//! A run is done iff its `result.json` exists, parses, and holds the same [`RunSpec`]; it
//! is written last and atomically (temporary name, then rename), so a crash at any point
//! leaves either a finished run or one that is executed again.

use crate::output::write_file;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Design, RunSpec};
use crate::BenchError;
use crate::stats::{Report, Scope, percentiles_seconds};

/// Runs one run of a design: starts the cluster, drives the load, measures.
pub trait Executor {
    /// Executes `run` of `design` and returns what it measured.
    ///
    /// # Errors
    /// Any [`BenchError`]: the run is recorded as failed and the design continues.
    fn execute(&mut self, design: &Design, run: &RunSpec) -> Result<RunOutcome, BenchError>;
}

/// What one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// Latency statistics of the measurement phase.
    pub report: Report,
    /// Mean throughput over the measurement phase, ops/s.
    pub mean_throughput: f64,
    /// Protocol counters (read repairs, migrations, aborts, ...), by name.
    pub counters: BTreeMap<String, f64>,
    /// The run's settings (commit, build profile, host, emulator parameters, seeds, phase
    /// boundaries, ...), free-form.
    pub settings: serde_json::Value,
    /// Runner kind: `virtual`, `real` or `processes`.
    pub runner: String,
    /// Wall (or virtual) time the run took, seconds, as measured by the executor.
    pub elapsed_s: f64,
    /// The run's HdrHistogram interval log ([`crate::stats::Recorder::interval_log`]),
    /// written beside the record as `histograms.hlog`; not part of `result.json`.
    #[serde(skip)]
    pub histogram_log: Option<Vec<u8>>,
}

/// A finished run: what was run and what it measured (the content of `result.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run.
    pub run: RunSpec,
    /// Its measurements.
    pub outcome: RunOutcome,
}

/// Progress of [`run_design`].
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A run is about to be executed; `index` is its 0-based position in the run order.
    Starting {
        /// The run.
        run: RunSpec,
        /// Position in the run order.
        index: usize,
        /// Number of runs in the design.
        total: usize,
    },
    /// A run was already done: its record was loaded.
    Skipped {
        /// The run.
        run: RunSpec,
    },
    /// A run finished and its files are written.
    Finished {
        /// The run.
        run: RunSpec,
        /// Its `elapsed_s`.
        elapsed_s: f64,
    },
    /// A run failed; `error.txt` holds the error, and the design goes on.
    Failed {
        /// The run.
        run: RunSpec,
        /// The error.
        error: BenchError,
    },
}

/// Options of [`run_design_with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Use the directory even if its `design.toml` describes a different design (its
    /// `design.toml` is replaced; results of runs whose spec changed are redone).
    pub force: bool,
}

/// A run that failed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFailure {
    /// The run.
    pub run: RunSpec,
    /// Why.
    pub error: BenchError,
}

/// The result of [`run_design`].
#[derive(Debug, Clone, PartialEq)]
pub struct DesignRun {
    /// Records of every done run (skipped or executed), by cell index then replication.
    pub records: Vec<RunRecord>,
    /// Runs that failed this time, in run order.
    pub failures: Vec<RunFailure>,
    /// Runs executed successfully this time.
    pub executed: usize,
    /// Runs skipped because they were already done.
    pub skipped: usize,
}

impl DesignRun {
    /// Whether every run of the design is done.
    pub fn is_complete(&self) -> bool {
        self.failures.is_empty()
    }
}

fn io_err(path: &Path, what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Io {
        path: path.display().to_string(),
        reason: format!("{what}: {e}"),
    }
}

fn create_dir(path: &Path) -> Result<(), BenchError> {
    std::fs::create_dir_all(path).map_err(|e| io_err(path, "cannot create the directory", e))
}

/// The records of every finished run of `design` in `dir`, in run order (for a report
/// without running anything).
pub fn load_records(design: &Design, dir: &Path) -> Vec<RunRecord> {
    design
        .runs()
        .iter()
        .filter_map(|run| load_done(&dir.join(run.rel_dir()), run))
        .collect()
}

/// `outcome`, if every number in it is finite: JSON writes NaN as `null`, which would not
/// read back, so such a run would count as never done and be redone forever.
fn finite(outcome: RunOutcome) -> Result<RunOutcome, BenchError> {
    let summaries = outcome
        .report
        .summaries
        .iter()
        .flat_map(|s| [(s.op.as_str(), s.mean_us), (s.op.as_str(), s.stdev_us)]);
    let bad = [
        ("mean_throughput", outcome.mean_throughput),
        ("elapsed_s", outcome.elapsed_s),
    ]
    .into_iter()
    .chain(outcome.counters.iter().map(|(k, v)| (k.as_str(), *v)))
    .chain(summaries)
    .find(|(_, v)| !v.is_finite());
    match bad {
        Some((name, v)) => Err(BenchError::Target {
            reason: format!("the run reported a non-finite `{name}` ({v}); it is not recorded"),
        }),
        None => Ok(outcome),
    }
}

/// Loads a finished run's record, if `result.json` exists, parses and is for `run`.
fn load_done(run_dir: &Path, run: &RunSpec) -> Option<RunRecord> {
    let text = std::fs::read_to_string(run_dir.join("result.json")).ok()?;
    let record: RunRecord = serde_json::from_str(&text).ok()?;
    record.run.is_same_run(run).then_some(record)
}

/// How a results directory relates to a design.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DirState {
    /// No `design.toml` yet.
    New,
    /// Made by this design. Compared by meaning, not text: comments, layout, the name and the
    /// analysed responses do not change what the runs measure.
    Same,
    /// Made by another design.
    Different,
}

fn dir_state(design: &Design, dir: &Path) -> Result<DirState, BenchError> {
    let path = dir.join("design.toml");
    match std::fs::read_to_string(&path) {
        Ok(existing) => Ok(
            if existing == design.text
                || Design::parse(&existing)
                    .is_ok_and(|old| old.fingerprint() == design.fingerprint())
            {
                DirState::Same
            } else {
                DirState::Different
            },
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DirState::New),
        Err(e) => Err(io_err(&path, "cannot read", e)),
    }
}

fn different_design(dir: &Path) -> BenchError {
    BenchError::InvalidDesign {
        reason: format!(
            "results in {} were made by a different design; use another --out or delete it \
             (or pass --force to redo every run there)",
            dir.display()
        ),
    }
}

/// Checks (or writes) `dir/design.toml` so results of different designs never mix; returns
/// whether the runs already there may be kept (false when `force` took over a directory of
/// another design: every run is redone).
fn claim_dir(design: &Design, dir: &Path, force: bool) -> Result<bool, BenchError> {
    create_dir(dir)?;
    let state = dir_state(design, dir)?;
    if state == DirState::Different && !force {
        return Err(different_design(dir));
    }
    let path = dir.join("design.toml");
    if std::fs::read_to_string(&path).ok().as_deref() != Some(design.text.as_str()) {
        write_file(&path, design.text.as_bytes())?;
    }
    Ok(state != DirState::Different)
}

/// Checks that `dir` holds results of `design` (for a report without running anything).
///
/// # Errors
/// [`BenchError::InvalidDesign`] if `dir` has no `design.toml` or one of another design.
pub fn check_results_dir(design: &Design, dir: &Path) -> Result<(), BenchError> {
    match dir_state(design, dir)? {
        DirState::Same => Ok(()),
        DirState::Different => Err(different_design(dir)),
        DirState::New => Err(BenchError::InvalidDesign {
            reason: format!(
                "{} holds no results of this design (no design.toml): check --out",
                dir.display()
            ),
        }),
    }
}

/// [`run_design_with`] with default options (refuse a directory of another design).
///
/// # Errors
/// As [`run_design_with`].
pub fn run_design(
    design: &Design,
    dir: &Path,
    executor: &mut dyn Executor,
    on_event: &mut dyn FnMut(Event),
) -> Result<DesignRun, BenchError> {
    run_design_with(design, dir, executor, on_event, RunOptions::default())
}

/// Executes every run of `design` not yet done in `dir`, in [`Design::runs`] order, writing
/// `dir/design.toml` and, per run, `dir/<cell>/<rep>/{report.csv, percentiles.csv,
/// result.json}`. A failed run leaves `error.txt` (removed once it succeeds) and the design
/// continues; failures are returned in [`DesignRun::failures`].
///
/// # Errors
/// [`BenchError::InvalidDesign`] if `dir` holds results of a different design (unless
/// `options.force`); [`BenchError::Io`] if a directory or file cannot be written.
pub fn run_design_with(
    design: &Design,
    dir: &Path,
    executor: &mut dyn Executor,
    on_event: &mut dyn FnMut(Event),
    options: RunOptions,
) -> Result<DesignRun, BenchError> {
    let keep_done = claim_dir(design, dir, options.force)?;
    let runs = design.runs();
    let total = runs.len();
    let mut records = Vec::with_capacity(total);
    let mut failures = Vec::new();
    let (mut executed, mut skipped) = (0, 0);
    for (index, run) in runs.into_iter().enumerate() {
        let run_dir = dir.join(run.rel_dir());
        if let Some(record) = load_done(&run_dir, &run).filter(|_| keep_done) {
            skipped += 1;
            records.push(record);
            on_event(Event::Skipped { run });
            continue;
        }
        on_event(Event::Starting {
            run: run.clone(),
            index,
            total,
        });
        create_dir(&run_dir)?;
        match executor.execute(design, &run).and_then(finite) {
            Ok(outcome) => {
                let record = RunRecord {
                    run: run.clone(),
                    outcome,
                };
                write_run_files(design, &run_dir, &record)?;
                executed += 1;
                on_event(Event::Finished {
                    run,
                    elapsed_s: record.outcome.elapsed_s,
                });
                records.push(record);
            }
            Err(error) => {
                write_file(
                    &run_dir.join("error.txt"),
                    format!("{}\n{error}\n", run.label()).as_bytes(),
                )?;
                on_event(Event::Failed {
                    run: run.clone(),
                    error: error.clone(),
                });
                failures.push(RunFailure { run, error });
            }
        }
    }
    records.sort_by_key(|r| (r.run.cell.index, r.run.replication));
    Ok(DesignRun {
        records,
        failures,
        executed,
        skipped,
    })
}

fn write_run_files(design: &Design, run_dir: &Path, record: &RunRecord) -> Result<(), BenchError> {
    write_file(
        &run_dir.join("report.csv"),
        record.outcome.report.to_csv().as_bytes(),
    )?;
    write_file(
        &run_dir.join("percentiles.csv"),
        percentiles_csv(design, record).as_bytes(),
    )?;
    if let Some(log) = &record.outcome.histogram_log {
        write_file(&run_dir.join("histograms.hlog"), log)?;
    }
    let json = serde_json::to_string_pretty(record).map_err(|e| {
        io_err(
            &run_dir.join("result.json"),
            "cannot serialize the run record (non-finite number?)",
            e,
        )
    })?;
    // Last: its presence marks the run as done.
    write_file(&run_dir.join("result.json"), json.as_bytes())?;
    let error = run_dir.join("error.txt");
    if error.exists() {
        std::fs::remove_file(&error).map_err(|e| io_err(&error, "cannot remove", e))?;
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The geo study's `percentiles.csv` for one run: header
/// `consist,loc,pop,r_w,delay,delay_var,loss,dupl,corrupt,reorder,op,p1,…,p99,p99_9`, then
/// one row per op (total scope), latencies in seconds.
///
/// Columns come from the run's parameters: mode→consist, locality→loc, popularity→pop,
/// rw→r_w, wan_rtt_ms→delay, jitter_pct→delay_var, loss, dup→dupl, reorder; `loss`, `dup`
/// and `reorder` fall back to the design's `wan` table. Missing text columns are empty,
/// missing network columns 0; `corrupt` is always 0 (the emulator does not corrupt).
pub fn percentiles_csv(design: &Design, record: &RunRecord) -> String {
    let param = |key: &str| design.param(&record.run, key);
    // Unknown settings stay empty rather than guessed; the emulator faults the study varied
    // and Meridian does not (loss aside) are 0 unless set.
    let text = |key: &str| {
        param(key)
            .map(|l| csv_field(&l.to_string()))
            .unwrap_or_default()
    };
    let number =
        |key: &str| param(key).map_or_else(|| "0".to_string(), |l| csv_field(&l.to_string()));
    let mut out = String::from("consist,loc,pop,r_w,delay,delay_var,loss,dupl,corrupt,reorder,op");
    for p in 1..=99 {
        let _ = write!(out, ",p{p}");
    }
    out.push_str(",p99_9\n");
    let prefix = [
        text("mode"),
        text("locality"),
        text("popularity"),
        text("rw"),
        text("wan_rtt_ms"),
        text("jitter_pct"),
        number("loss"),
        number("dup"),
        "0".to_string(),
        number("reorder"),
    ]
    .join(",");
    for s in record
        .outcome
        .report
        .summaries
        .iter()
        .filter(|s| s.scope == Scope::Total)
    {
        let _ = write!(out, "{prefix},{}", csv_field(&s.op));
        for v in percentiles_seconds(s) {
            let _ = write!(out, ",{v}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use std::path::PathBuf;

    use super::*;
    use crate::experiment::tests::GEO;
    use crate::stats::{Locality, Recorder};

    fn run_dir(dir: &Path, run: &RunSpec) -> PathBuf {
        dir.join(run.rel_dir())
    }

    /// A report whose read latencies are `base_us` (local) and `base_us + remote_us`
    /// (remote), half each, and updates twice as slow.
    pub(crate) fn fake_report(base_us: u64, remote_us: u64) -> Report {
        let mut r = Recorder::new(Duration::ZERO);
        for i in 0..100u64 {
            let (loc, extra) = if i % 2 == 0 {
                (Locality::Local, 0)
            } else {
                (Locality::Remote, remote_us)
            };
            let lat = Duration::from_micros(base_us + extra + i);
            r.record("read", loc, Duration::ZERO, lat);
            r.record("update", loc, Duration::ZERO, lat * 2);
        }
        r.record_error("update", Locality::Remote, Duration::ZERO, "TIMEOUT");
        r.report()
    }

    /// Counts calls; fails the runs whose label is in `fail`.
    pub(crate) struct Fake {
        pub calls: usize,
        pub fail: Vec<String>,
    }

    impl Executor for Fake {
        fn execute(&mut self, _design: &Design, run: &RunSpec) -> Result<RunOutcome, BenchError> {
            self.calls += 1;
            if self.fail.contains(&run.label()) {
                return Err(BenchError::Target {
                    reason: "cluster did not start".into(),
                });
            }
            let base = 1000 + 100 * run.cell.index as u64 + run.replication as u64;
            Ok(RunOutcome {
                histogram_log: None,
                report: fake_report(base, 50_000),
                mean_throughput: 500.0 + run.cell.index as f64,
                counters: BTreeMap::from([("migrations".to_string(), 3.0)]),
                settings: serde_json::json!({ "seed": run.seed }),
                runner: "virtual".into(),
                elapsed_s: 1.5,
            })
        }
    }

    const SMALL: &str = "name = \"small\"\ndesign = { kind = \"full_factorial\", replications = 2, order_seed = 3 }\nfactors = { mode = [\"ind1\", \"lt_rec\"], wan_rtt_ms = [0, 100, 200] }\nfixed = { rw = \"2:1\", locality = 0.9 }\nwan = { loss = 0.01 }\n";

    #[test]
    fn resumable_execution() {
        let dir = tempfile::tempdir().unwrap();
        let design = Design::parse(SMALL).unwrap();
        let runs = design.runs();
        let failing = runs[3].clone();
        let mut exec = Fake {
            calls: 0,
            fail: vec![failing.label()],
        };
        let mut events = Vec::new();
        let out = run_design(&design, dir.path(), &mut exec, &mut |e| events.push(e)).unwrap();
        assert_eq!(exec.calls, 12);
        assert_eq!((out.executed, out.skipped, out.failures.len()), (11, 0, 1));
        assert!(!out.is_complete());
        assert_eq!(out.records.len(), 11);
        assert_eq!(out.failures[0].run, failing);
        assert!(matches!(
            &events[0],
            Event::Starting {
                index: 0,
                total: 12,
                ..
            }
        ));
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::Failed { run, .. } if *run == failing))
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::Finished { .. }))
                .count(),
            11
        );
        let fdir = run_dir(dir.path(), &failing);
        assert!(fdir.join("error.txt").exists());
        assert!(!fdir.join("result.json").exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("design.toml")).unwrap(),
            SMALL
        );

        // A half-written temporary file, and a truncated result, count as not done.
        let victim = &runs[5];
        let vdir = run_dir(dir.path(), victim);
        std::fs::write(vdir.join(".result.json.tmp"), "{\"run\": {").unwrap();
        let full = std::fs::read_to_string(vdir.join("result.json")).unwrap();
        std::fs::write(vdir.join("result.json"), &full[..full.len() / 2]).unwrap();

        // Second pass: only the failed run and the damaged one are executed.
        exec.fail.clear();
        exec.calls = 0;
        let mut events = Vec::new();
        let out = run_design(&design, dir.path(), &mut exec, &mut |e| events.push(e)).unwrap();
        assert_eq!(exec.calls, 2);
        assert_eq!((out.executed, out.skipped, out.failures.len()), (2, 10, 0));
        assert!(out.is_complete());
        assert_eq!(out.records.len(), 12);
        assert!(!fdir.join("error.txt").exists());
        assert!(fdir.join("result.json").exists());
        let keys: Vec<(usize, usize)> = out
            .records
            .iter()
            .map(|r| (r.run.cell.index, r.run.replication))
            .collect();
        let expected: Vec<(usize, usize)> =
            (0..6).flat_map(|c| (0..2).map(move |r| (c, r))).collect();
        assert_eq!(keys, expected);

        // Third pass: nothing to do, identical records.
        exec.calls = 0;
        let again = run_design(&design, dir.path(), &mut exec, &mut |_| {}).unwrap();
        assert_eq!(exec.calls, 0);
        assert_eq!(again.skipped, 12);
        let key = |recs: &[RunRecord]| -> Vec<(usize, usize, u64, f64)> {
            recs.iter()
                .map(|r| {
                    (
                        r.run.cell.index,
                        r.run.replication,
                        r.run.seed,
                        r.outcome.mean_throughput,
                    )
                })
                .collect()
        };
        assert_eq!(key(&again.records), key(&out.records));

        // Files of one run.
        let r0 = &out.records[0];
        let d0 = run_dir(dir.path(), &r0.run);
        assert_eq!(d0, dir.path().join("mode=ind1_wan_rtt_ms=0").join("0"));
        assert_eq!(
            std::fs::read_to_string(d0.join("report.csv")).unwrap(),
            r0.outcome.report.to_csv()
        );
        let pct = std::fs::read_to_string(d0.join("percentiles.csv")).unwrap();
        let lines: Vec<&str> = pct.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with(
            "consist,loc,pop,r_w,delay,delay_var,loss,dupl,corrupt,reorder,op,p1,p2,"
        ));
        assert!(lines[0].ends_with(",p99,p99_9"));
        assert_eq!(lines[0].split(',').count(), 11 + 100);
        assert!(
            lines[1].starts_with("ind1,0.9,,2:1,0,,0.01,0,0,0,read,"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].starts_with("ind1,0.9,,2:1,0,,0.01,0,0,0,update,"),
            "{}",
            lines[2]
        );
        assert_eq!(lines[1].split(',').count(), 111);
        // p1 of read = 1000 µs (the smallest local sample) in seconds.
        assert_eq!(lines[1].split(',').nth(11), Some("0.001"));
    }

    #[test]
    fn a_different_design_is_refused_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let design = Design::parse(SMALL).unwrap();
        let mut exec = Fake {
            calls: 0,
            fail: vec![],
        };
        run_design(&design, dir.path(), &mut exec, &mut |_| {}).unwrap();

        // Comments, formatting, the name and the responses do not matter.
        let reformatted = Design::parse(&format!(
            "# a comment\n{}responses = [\"throughput\"]\n",
            SMALL.replace("name = \"small\"", "name = \"renamed\"")
        ))
        .unwrap();
        exec.calls = 0;
        run_design(&reformatted, dir.path(), &mut exec, &mut |_| {}).unwrap();
        assert_eq!(exec.calls, 0);

        let other = Design::parse(&SMALL.replace("order_seed = 3", "order_seed = 4")).unwrap();
        let err = run_design(&other, dir.path(), &mut exec, &mut |_| {}).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("were made by a different design; use another --out or delete it"),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        assert_eq!(exec.calls, 0);

        // Forced: every run's seed changed, so every run is redone.
        let out = run_design_with(
            &other,
            dir.path(),
            &mut exec,
            &mut |_| {},
            RunOptions { force: true },
        )
        .unwrap();
        assert_eq!((exec.calls, out.skipped), (12, 0));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("design.toml")).unwrap(),
            other.text
        );
        check_results_dir(&other, dir.path()).unwrap();
        assert!(check_results_dir(&design, dir.path()).is_err());
        let empty = tempfile::tempdir().unwrap();
        let err = check_results_dir(&design, empty.path()).unwrap_err();
        assert!(err.to_string().contains("no design.toml"), "{err}");
    }

    #[test]
    fn forcing_a_design_whose_runs_keep_their_seeds_still_redoes_them() {
        // Only a free-form table changes: cells, seeds and `fixed` are the same, so each old
        // record looks like a finished run of the new design; forcing must redo them anyway.
        let dir = tempfile::tempdir().unwrap();
        let design = Design::parse(SMALL).unwrap();
        let mut exec = Fake {
            calls: 0,
            fail: vec![],
        };
        run_design(&design, dir.path(), &mut exec, &mut |_| {}).unwrap();
        let other = Design::parse(&format!("{SMALL}phases = {{ measure_s = 99 }}\n")).unwrap();
        assert!(run_design(&other, dir.path(), &mut exec, &mut |_| {}).is_err());
        exec.calls = 0;
        let options = RunOptions { force: true };
        let out = run_design_with(&other, dir.path(), &mut exec, &mut |_| {}, options).unwrap();
        assert_eq!((exec.calls, out.skipped), (12, 0));
        // Resuming the forced design now keeps its runs.
        exec.calls = 0;
        let again = run_design(&other, dir.path(), &mut exec, &mut |_| {}).unwrap();
        assert_eq!((exec.calls, again.skipped), (0, 12));
    }

    #[test]
    fn geo_percentiles_columns() {
        let design = Design::parse(GEO).unwrap();
        let run = design.runs()[0].clone();
        let record = RunRecord {
            outcome: RunOutcome {
                histogram_log: None,
                report: fake_report(2000, 0),
                mean_throughput: 1.0,
                counters: BTreeMap::new(),
                settings: serde_json::Value::Null,
                runner: "real".into(),
                elapsed_s: 0.0,
            },
            run: run.clone(),
        };
        let csv = percentiles_csv(&design, &record);
        let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        let cell = &run.cell;
        assert_eq!(row[0], cell.level("mode").unwrap().to_string());
        assert_eq!(row[1], cell.level("locality").unwrap().to_string());
        assert_eq!(row[2], "uniform");
        assert_eq!(row[3], "2:1");
        assert_eq!(row[4], cell.level("wan_rtt_ms").unwrap().to_string());
        assert_eq!(row[5], cell.level("jitter_pct").unwrap().to_string());
        assert_eq!(&row[6..10], ["0.0", "0.0", "0", "0.0"]);
        assert_eq!(row[10], "read");
    }

    #[test]
    fn a_run_with_a_non_finite_figure_fails_instead_of_being_written() {
        let mut outcome = RunOutcome {
            histogram_log: None,
            report: fake_report(1000, 0),
            mean_throughput: 10.0,
            counters: BTreeMap::from([("migrations".to_owned(), 1.0)]),
            settings: serde_json::Value::Null,
            runner: "virtual".into(),
            elapsed_s: 1.0,
        };
        assert!(finite(outcome.clone()).is_ok());
        outcome.counters.insert("bad".into(), f64::NAN);
        let err = finite(outcome).unwrap_err().to_string();
        assert!(err.contains("`bad`"), "{err}");
    }
}
