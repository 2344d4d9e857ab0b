//! `meridian experiment PLAN.toml`: runs a design file's factorial runs on Meridian clusters
//! (resumable: finished runs are kept), then writes `summary.md` with per-run percentiles,
//! the allocation of variation, CVs, confidence intervals and box plots.
//!
//! `meridian experiment clock-si` runs the built-in Clock-SI study instead
//! (`experiments/clock-si/`, [`meridian_bench::clocksi`]), and `meridian experiment
//! replica-choice` the replica-choice study (`experiments/replica-choice/`,
//! [`meridian_bench::replica_choice`]).

use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{Context, Result};
use clap::Args;
use meridian_bench::cell::Clock;
use meridian_bench::executor::ClusterExecutor;
use meridian_bench::experiment::{
    Design, DesignRun, Event, RunOptions, analyze_design, check_results_dir, load_records,
    run_design_with, write_report,
};
use meridian_bench::output;

use crate::bench_cmd::{Display, host_settings};

/// Arguments of `meridian experiment`.
#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// The design file (TOML: `design`, `factors`, `fixed`, `load`, `phases`, `wan`), or
    /// `clock-si` for the built-in Clock-SI study (`experiments/clock-si/`), or
    /// `replica-choice` for the replica-choice study (`experiments/replica-choice/`).
    plan: PathBuf,
    /// `clock-si`: shorter windows and fewer partition counts; `replica-choice`: a smoke
    /// run (4 000 requests per dynamic run, smaller batches).
    #[arg(long)]
    quick: bool,
    /// `replica-choice` only: the study's sizes (400 000 requests per dynamic run) instead
    /// of the reduced default.
    #[arg(long, conflicts_with = "quick")]
    full: bool,
    /// `replica-choice` only: requests per dynamic run (overrides the default or `--full`).
    #[arg(long)]
    requests: Option<usize>,
    /// `replica-choice` only: runs executed at once, one per thread.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// `clock-si` and `replica-choice`: the seed of the clusters and clients.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Results directory (default `results/<design name>`); runs already there are skipped.
    #[arg(long)]
    out: Option<PathBuf>,
    /// The clock of runs whose design does not set `clock`.
    #[arg(long, default_value = "virtual", value_parser = ["virtual", "real"])]
    clock: String,
    /// Reuse an output directory made by a different design (its runs are redone).
    #[arg(long)]
    force: bool,
    /// Only rewrite the report from the results already in the directory.
    #[arg(long)]
    report_only: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs `meridian experiment`.
pub fn run(args: ExperimentArgs) -> Result<()> {
    if args.plan.as_os_str() == "clock-si" && !args.plan.exists() {
        return run_clock_si(&args);
    }
    if args.plan.as_os_str() == "replica-choice" && !args.plan.exists() {
        return run_replica_choice(&args);
    }
    let design = Design::load(&args.plan)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(design.display_name()));
    let clock = if args.clock == "real" {
        Clock::Real
    } else {
        Clock::Virtual
    };
    let total = design.runs().len();
    let display = Mutex::new(Display::new(args.quiet, 1.0));
    let run = {
        let mut executor = ClusterExecutor {
            default_clock: clock,
            host: host_settings(),
            on_phase: Box::new(|p| display.lock().expect("display").phase(p)),
            progress: Box::new(|p| display.lock().expect("display").progress(p)),
        };
        let mut on_event = |e: Event| {
            let d = display.lock().expect("display");
            match e {
                Event::Starting { run, index, .. } => {
                    d.finish();
                    eprintln!("[{}/{total}] {}", index + 1, run.label());
                }
                Event::Skipped { run } => eprintln!("  done already: {}", run.label()),
                Event::Finished { run, elapsed_s } => {
                    d.finish();
                    eprintln!("  finished {} ({elapsed_s:.1} s measured)", run.label());
                }
                Event::Failed { run, error } => {
                    d.finish();
                    eprintln!("  FAILED {}: {error}", run.label());
                }
            }
        };
        let options = RunOptions { force: args.force };
        if args.report_only {
            check_results_dir(&design, &out)?;
            let records = load_records(&design, &out);
            let skipped = records.len();
            DesignRun {
                records,
                failures: Vec::new(),
                executed: 0,
                skipped,
            }
        } else {
            run_design_with(&design, &out, &mut executor, &mut on_event, options)?
        }
    };
    display.lock().expect("display").finish();
    let analysis = analyze_design(&design, &run.records)?;
    let summary = write_report(
        &design,
        &run.records,
        &analysis,
        &out,
        &output::design_plots,
    )
    .context("writing the report")?;
    println!(
        "{} runs done ({} this time, {} kept), {} failed; report: {}",
        run.records.len(),
        run.executed,
        run.skipped,
        run.failures.len(),
        summary.display()
    );
    if !run.failures.is_empty() {
        anyhow::bail!(
            "{} runs failed (see error.txt in their directories); run the same command again to retry them",
            run.failures.len()
        );
    }
    Ok(())
}

/// Runs the built-in Clock-SI study and writes its results.
fn run_clock_si(args: &ExperimentArgs) -> Result<()> {
    use meridian_bench::clocksi::{StudyOptions, run_study, write_results};
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join("clock-si"));
    let opts = StudyOptions {
        quick: args.quick,
        seed: args.seed,
    };
    let started = std::time::Instant::now();
    let quiet = args.quiet;
    let res = run_study(&opts, &mut |m| {
        if !quiet {
            eprintln!("[{:6.1} s] {m}", started.elapsed().as_secs_f64());
        }
    })?;
    let summary = write_results(&res, &out).context("writing the Clock-SI results")?;
    println!(
        "Clock-SI study done in {:.1} s (wall clock); report: {}",
        started.elapsed().as_secs_f64(),
        summary.display()
    );
    Ok(())
}

/// Runs the built-in replica-choice study and writes its results.
fn run_replica_choice(args: &ExperimentArgs) -> Result<()> {
    use meridian_bench::replica_choice::{StudyOptions, run_study, write_results};
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join("replica-choice"));
    let mut opts = if args.full {
        StudyOptions::full(args.seed)
    } else if args.quick {
        StudyOptions::quick(args.seed)
    } else {
        StudyOptions::reduced(args.seed)
    };
    if let Some(r) = args.requests {
        anyhow::ensure!(
            (5..=10_000_000).contains(&r),
            "--requests = {r}: must be between 5 (one per phase) and 10000000"
        );
        opts.requests = r;
    }
    anyhow::ensure!(
        (1..=64).contains(&args.jobs),
        "--jobs = {}: must be between 1 and 64",
        args.jobs
    );
    opts.jobs = args.jobs;
    let started = std::time::Instant::now();
    let quiet = args.quiet;
    eprintln!(
        "replica-choice study: seed {}, {} requests per dynamic run, {} runs at once",
        opts.seed, opts.requests, opts.jobs
    );
    let res = run_study(&opts, &|m: &str| {
        if !quiet {
            eprintln!("[{:6.1} s] {m}", started.elapsed().as_secs_f64());
        }
    })?;
    let summary = write_results(&res, &out).context("writing the replica-choice results")?;
    println!(
        "replica-choice study done in {:.1} s (wall clock), seed {}; report: {}",
        started.elapsed().as_secs_f64(),
        opts.seed,
        summary.display()
    );
    Ok(())
}
