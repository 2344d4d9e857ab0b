//! `meridian sim`: runs the deterministic simulator — one seed (a summary: operations, faults,
//! verdicts) or a sweep of seeds (every failing seed with the command that replays it). A
//! failing run's history is saved as JSON lines; a failing timeline run's issue log, apply log
//! and client history as readable text (`*.timeline.txt`).

use anyhow::{Context, bail};
use clap::Args;
use meridian_sim::faults::FaultKinds;
use meridian_sim::scenario::{Scenario, run, scenario, scenarios};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Flags of `meridian sim`.
#[derive(Args, Debug)]
#[command(after_help = "\
EXAMPLES:
    meridian sim --scenario chaos --seed 42
    meridian sim --scenario partitions --seeds 1..500
    meridian sim --scenario baseline --faults crash,partition --duration 10m
    meridian sim --scenario timeline-chaos --seeds 1..300
    meridian sim --list")]
pub struct SimArgs {
    /// The scenario (see --list).
    #[arg(long, default_value = "chaos")]
    scenario: String,
    /// One seed to run (replays exactly).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// A range of seeds to sweep, `A..B` (B excluded) or `A..=B`.
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    /// Override the scenario's fault kinds: crash, wipe, partition, lossy, slow, clock, all,
    /// none (comma-separated).
    #[arg(long, value_name = "KINDS")]
    faults: Option<String>,
    /// Override the workload's virtual duration (e.g. 30s, 10m).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Where failing runs' histories are written.
    #[arg(long, default_value = "sim-failures")]
    out: PathBuf,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    meridian_net::wan::parse_duration(s)
}

fn parse_seeds(s: &str) -> anyhow::Result<std::ops::Range<u64>> {
    let bad = || format!("--seeds '{s}': expected A..B or A..=B with numbers");
    if let Some((a, b)) = s.split_once("..=") {
        let (a, b): (u64, u64) = (a.parse().with_context(bad)?, b.parse().with_context(bad)?);
        return Ok(a..b + 1);
    }
    let (a, b) = s.split_once("..").with_context(bad)?;
    let (a, b): (u64, u64) = (a.parse().with_context(bad)?, b.parse().with_context(bad)?);
    if a >= b {
        bail!("--seeds '{s}' is empty");
    }
    Ok(a..b)
}

/// Runs `meridian sim`; an error is printed as one plain line and the exit status is 2 (a
/// failing seed exits with 1).
pub fn run_cmd(args: SimArgs) -> anyhow::Result<()> {
    if let Err(e) = execute(args) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
    Ok(())
}

/// Log lines stamped with the simulation's virtual time (seconds since the run started).
struct VirtualTime;

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        thread_local! {
            static ORIGIN: std::cell::Cell<Option<tokio::time::Instant>> = const { std::cell::Cell::new(None) };
        }
        let now = tokio::time::Instant::now();
        let origin = ORIGIN.with(|o| {
            let origin = o.get().unwrap_or(now);
            o.set(Some(origin));
            origin
        });
        write!(w, "t={:9.3}s", now.duration_since(origin).as_secs_f64())
    }
}

fn execute(args: SimArgs) -> anyhow::Result<()> {
    // Off unless asked (RUST_LOG=info shows membership changes, warnings, ...).
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_timer(VirtualTime)
            .with_writer(std::io::stderr)
            .init();
    }
    if args.list {
        for s in scenarios() {
            println!(
                "{:<20} {:>5}s  faults: {:<34} {}{}",
                s.name,
                s.duration.as_secs(),
                s.faults.to_string(),
                s.about,
                if s.ci { "" } else { " [not in the CI sweep]" }
            );
        }
        return Ok(());
    }
    let mut s: Scenario = scenario(&args.scenario).with_context(|| {
        let names: Vec<&str> = scenarios().iter().map(|s| s.name).collect();
        format!(
            "unknown scenario '{}': one of {}",
            args.scenario,
            names.join(", ")
        )
    })?;
    let mut replay_flags = String::new();
    if let Some(f) = &args.faults {
        s.faults = FaultKinds::parse(f).map_err(anyhow::Error::msg)?;
        replay_flags.push_str(&format!(" --faults {}", s.faults));
    }
    if let Some(d) = args.duration {
        s.duration = d;
        replay_flags.push_str(&format!(
            " --duration {}",
            meridian_net::wan::format_duration(d)
        ));
    }
    let seeds = match (&args.seed, &args.seeds) {
        (Some(seed), _) => *seed..*seed + 1,
        (None, Some(r)) => parse_seeds(r)?,
        (None, None) => 1..2,
    };
    let single = seeds.end - seeds.start == 1;
    let started = Instant::now();
    let mut failing = Vec::new();
    let mut simulated = Duration::ZERO;
    for seed in seeds.clone() {
        let t = Instant::now();
        let r = run(&s, seed);
        simulated += r.simulated;
        let wall = t.elapsed();
        if single {
            print!("{r}");
            println!(
                "virtual time {:.1}s (workload {:.0}s) in {:.2}s of wall time: {:.0}x real time",
                r.simulated.as_secs_f64(),
                r.duration.as_secs_f64(),
                wall.as_secs_f64(),
                r.simulated.as_secs_f64() / wall.as_secs_f64().max(1e-9)
            );
        }
        if !r.passed {
            std::fs::create_dir_all(&args.out)
                .with_context(|| format!("creating {}", args.out.display()))?;
            let path = match &r.timeline {
                Some(tl) => {
                    let path = args
                        .out
                        .join(format!("{}-seed-{seed}.timeline.txt", s.name));
                    std::fs::write(&path, tl.dump())
                        .with_context(|| format!("writing {}", path.display()))?;
                    path
                }
                None => {
                    let path = args.out.join(format!("{}-seed-{seed}.jsonl", s.name));
                    r.history
                        .save_to_path(&path)
                        .with_context(|| format!("writing {}", path.display()))?;
                    path
                }
            };
            if !single {
                print!("{r}");
            }
            println!("history saved to {}", path.display());
            failing.push(seed);
        } else if !single {
            println!(
                "seed {seed}: pass ({} ops, {} faults)",
                r.ops.ok + r.ops.failed + r.ops.unknown,
                r.faults.len()
            );
        }
    }
    if !single {
        println!(
            "{} of {} seeds failed; {:.0}s of virtual time in {:.1}s",
            failing.len(),
            seeds.end - seeds.start,
            simulated.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
    }
    for seed in &failing {
        println!(
            "replay: meridian sim --scenario {} --seed {seed}{replay_flags}",
            s.name
        );
    }
    if !failing.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
