//! The in-node repartitioning study's commands (spec `repartitioning.md` §5,
//! `experiments/repartitioning/`):
//! - `meridian bench kvpaxos-gen`: writes a kvpaxos YCSB D or E request file;
//! - `meridian bench replay`: replays a request file through the worker-shard executor;
//! - `meridian bench repart-plot`: the study's tables, shape checks and plots over a
//!   directory of replays;
//! - `meridian bench affinity`: the cross-node planner on hidden affinity groups (spec §6),
//!   in virtual time.
//!
//! The work is `meridian_bench::{kvpaxos, repart, affinity}`.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use meridian_bench::affinity::{self, AffinityConfig};
use meridian_bench::kvpaxos::{self, Workload};
use meridian_bench::repart::{self, ReplayConfig};
use meridian_server::repart::{Mode, PartitionerKind, RepartConfig, UnmappedPolicy};

/// The study's subcommands of `meridian bench`.
#[derive(Subcommand, Debug)]
pub enum RepartCommand {
    /// Replay a kvpaxos request file through the worker-shard executor (population first,
    /// then the stream as fast as the executor accepts it): makespan, 1 s throughput bins
    /// and the executor's repartitioning metrics, as result.json and bins.csv.
    Replay(Box<ReplayArgs>),
    /// Write a kvpaxos YCSB D or E request file (`type,key,arg,` lines), deterministic in
    /// its seed.
    KvpaxosGen(Box<GenArgs>),
    /// Tables, shape checks and plots over `<DIR>/<workload>/<run>/result.json` replays.
    RepartPlot(Box<PlotArgs>),
    /// The cross-node planner on a transactional workload with hidden affinity groups, on
    /// the simulated cluster in virtual time: distributed transactions, 2PC, throughput and
    /// p99 before and after planning, keys moved per round.
    Affinity(Box<AffinityArgs>),
}

/// Arguments of `meridian bench affinity`.
#[derive(Args, Debug)]
pub struct AffinityArgs {
    /// The small variant (6 leaders, 24 groups of 4 keys, 7.5 virtual seconds).
    #[arg(long)]
    quick: bool,
    /// Seed of the cluster, the key names and the clients.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of transactions touching two groups.
    #[arg(long)]
    cross_group: Option<f64>,
    /// Never turn the planner on (the control run).
    #[arg(long)]
    no_planner: bool,
    /// Directory for summary.md, result.json, the CSVs and the plots.
    #[arg(long, default_value = "results/affinity")]
    out: PathBuf,
}

/// Request file formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// kvpaxos' `type,key,arg,` lines (0 READ, 1 WRITE, 2 SCAN, 5 UPDATE).
    Kvpaxos,
}

/// Arguments of `meridian bench replay`.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The request file's format.
    #[arg(long, value_enum, default_value = "kvpaxos")]
    format: Format,
    /// The request file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// single, round_robin, base:Δp, free:Δp or non_stop.
    #[arg(long, value_parser = parse_mode)]
    mode: Mode,
    /// P, worker shards (single runs one).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    shards: u32,
    /// W, the co-access graph's window in requests (0: unwindowed).
    #[arg(long, default_value_t = 0)]
    window: usize,
    /// metis or fennel.
    #[arg(long, default_value = "metis", value_parser = parse_partitioner)]
    partitioner: PartitionerKind,
    /// What a swap does with keys the new partition does not mention: drop (kvpaxos: they
    /// go round-robin at their next access) or keep.
    #[arg(long, default_value = "drop", value_parser = parse_unmapped)]
    unmapped: UnmappedPolicy,
    /// Do not relabel new partitions onto the current shards.
    #[arg(long)]
    no_relabel: bool,
    /// Bytes per value written.
    #[arg(long, default_value_t = repart::DEFAULT_VALUE_SIZE as u64,
          value_parser = clap::value_parser!(u64).range(1..=repart::MAX_VALUE_SIZE as u64))]
    value_size: u64,
    /// Each shard queue's capacity: the dispatcher waits when a queue is full, so it cannot
    /// run more than shards × this ahead of execution.
    #[arg(long, default_value_t = repart::DEFAULT_QUEUE_CAP as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    queue_cap: u64,
    /// n_records: the population writes keys 0..=N first. Default: the file's first insert
    /// key (kvpaxos' generator inserts from n_records); required for files without inserts.
    #[arg(long, value_name = "N")]
    records: Option<u32>,
    /// The partitioner's seed.
    #[arg(long, default_value_t = 1)]
    seed: i32,
    /// Pin shard i's thread to CPU i mod (usable CPUs).
    #[arg(long)]
    pin: bool,
    /// How much nicer (0..=19) the tracker and partitioner threads run than the dispatcher
    /// and the shards; 0 runs them at the same priority.
    #[arg(long, default_value_t = RepartConfig::default().actor_nice, value_name = "N")]
    actor_nice: i32,
    /// The run's name in tables and plots (default from the mode and window: `NS W=1000`).
    #[arg(long)]
    label: Option<String>,
    /// Directory for result.json and bins.csv.
    #[arg(long, default_value = "results/replay")]
    out: PathBuf,
    /// Only the final line.
    #[arg(long)]
    quiet: bool,
}

/// The YCSB workloads of the study.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenWorkload {
    /// 95 % reads, 5 % inserts, LATEST.
    D,
    /// 95 % scans of U[2, 8] keys, 5 % inserts, ZIPFIAN.
    E,
}

/// Arguments of `meridian bench kvpaxos-gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// d or e.
    #[arg(long, value_enum)]
    workload: GenWorkload,
    /// n_records (the study: 1000000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(10..))]
    records: u32,
    /// n_operations (the study: 50000000 for D, 5000000 for E).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    ops: u64,
    /// The generator's seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The request file to write.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Arguments of `meridian bench repart-plot`.
#[derive(Args, Debug)]
pub struct PlotArgs {
    /// The directory of replays: `<DIR>/<workload>/<run>/result.json`.
    #[arg(long, value_name = "DIR")]
    results: PathBuf,
    /// Where summary.md and the plots go (default: the results directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s.parse::<Mode>()? {
        Mode::Off => Err(
            "off runs no executor: expected single, round_robin, base:Δp, free:Δp or non_stop"
                .into(),
        ),
        m => Ok(m),
    }
}

fn parse_partitioner(s: &str) -> Result<PartitionerKind, String> {
    s.parse()
}

fn parse_unmapped(s: &str) -> Result<UnmappedPolicy, String> {
    s.parse()
}

/// Runs one of the study's subcommands.
pub fn run(cmd: RepartCommand) -> Result<()> {
    match cmd {
        RepartCommand::Replay(a) => replay(*a),
        RepartCommand::KvpaxosGen(a) => generate(*a),
        RepartCommand::RepartPlot(a) => plot(*a),
        RepartCommand::Affinity(a) => run_affinity(*a),
    }
}

fn config(a: &ReplayArgs, records: u32) -> ReplayConfig {
    let mut c = ReplayConfig::new(a.mode, records);
    c.label = a
        .label
        .clone()
        .unwrap_or_else(|| repart::default_label(a.mode, a.window));
    c.shards = a.shards;
    c.window = a.window;
    c.partitioner = a.partitioner;
    c.unmapped = a.unmapped;
    c.relabel = !a.no_relabel;
    c.value_size = a.value_size as usize;
    c.queue_cap = a.queue_cap as usize;
    c.seed = a.seed;
    c.pin = a.pin;
    c.actor_nice = a.actor_nice;
    c
}

fn replay(a: ReplayArgs) -> Result<()> {
    let Format::Kvpaxos = a.format;
    let t = Instant::now();
    let f =
        File::open(&a.file).with_context(|| format!("FILE: cannot open {}", a.file.display()))?;
    let requests = kvpaxos::read_requests(BufReader::new(f), 2_000_000_000)
        .with_context(|| format!("FILE: {}", a.file.display()))?;
    let records = match a.records.or_else(|| repart::infer_records(&requests)) {
        Some(n) => n,
        None => bail!(
            "--records: {} has no insert to infer n_records from; give --records",
            a.file.display()
        ),
    };
    if let Some(max) = requests.iter().map(|r| r.keys().end).max()
        && u64::from(max) > u64::from(records) + requests.len() as u64 + 1
    {
        eprintln!(
            "warning: --records {records}: the file touches keys up to {max}, beyond the population and its inserts"
        );
    }
    let c = config(&a, records);
    if !a.quiet {
        eprintln!(
            "replay: {} requests from {} read in {:.1} s; {} {}, population {} keys",
            requests.len(),
            a.file.display(),
            t.elapsed().as_secs_f64(),
            c.label,
            c.mode,
            u64::from(records) + 1
        );
    }
    let r = repart::replay(&c, &requests, &a.file.display().to_string())?;
    let written = repart::write_result(&a.out, &r)?;
    let (peak, dip) = r.peak_and_dip_rps();
    println!(
        "{}: makespan {:.2} s, {:.0} req/s (bins: peak {:.0}, lowest {:.0}), longest dispatch stall {:.1} ms ({} ≥ 10 ms), {} partitions, {} swaps, {} keys moved, {} sync requests; population {:.1} s; executed {}/{}{} -> {}",
        r.label,
        r.makespan_s,
        r.throughput_rps,
        peak,
        dip,
        r.measured_stall_max_us as f64 / 1e3,
        r.measured_stalls_over[1],
        r.stat("partitions"),
        r.stat("swaps"),
        r.stat("keys_moved_total"),
        r.stat("sync_requests"),
        r.population_s,
        r.executed,
        r.requests,
        if r.engine_errors + r.read_misses + r.scan_mismatches > 0 {
            format!(
                " (errors {}, read misses {}, scan mismatches {})",
                r.engine_errors, r.read_misses, r.scan_mismatches
            )
        } else {
            String::new()
        },
        written[0].display()
    );
    Ok(())
}

fn generate(a: GenArgs) -> Result<()> {
    let w = match a.workload {
        GenWorkload::D => Workload::ycsb_d(a.records, a.ops),
        GenWorkload::E => Workload::ycsb_e(a.records, a.ops),
    };
    let gen_ = kvpaxos::generate(&w, a.seed).context("--records/--ops")?;
    if let Some(parent) = a.out.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("--out: cannot create {}", parent.display()))?;
    }
    let f = File::create(&a.out)
        .with_context(|| format!("--out: cannot create {}", a.out.display()))?;
    let n =
        kvpaxos::write_requests(f, gen_).with_context(|| format!("--out: {}", a.out.display()))?;
    println!("{n} requests -> {}", a.out.display());
    Ok(())
}

fn plot(a: PlotArgs) -> Result<()> {
    let out = a.out.unwrap_or_else(|| a.results.clone());
    let md = repart::report(&a.results, &out)?;
    println!("{md}");
    Ok(())
}

fn run_affinity(a: AffinityArgs) -> Result<()> {
    let mut c = if a.quick {
        AffinityConfig::quick(a.seed)
    } else {
        AffinityConfig::full(a.seed)
    };
    if let Some(x) = a.cross_group {
        c.cross_group = x;
    }
    if a.no_planner {
        c.planner = None;
    }
    c.validate().context("--cross-group")?;
    eprintln!(
        "affinity: seed {}, {} leaders, {} groups of {} keys, {} clients, {:.1} virtual s",
        c.seed,
        c.leaders,
        c.groups,
        c.group_size,
        c.clients,
        (c.warmup_ms + c.before_ms + c.planning_ms + c.after_ms) as f64 / 1e3
    );
    let t = Instant::now();
    let r = affinity::run(&c)?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("--out: cannot create {}", a.out.display()))?;
    let summary = affinity::write_results(&r, &a.out)?;
    println!("{}", affinity::summary_markdown(&r));
    eprintln!(
        "{:.1} s of computation -> {}",
        t.elapsed().as_secs_f64(),
        summary.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        cmd: RepartCommand,
    }

    fn parse(args: &[&str]) -> Result<RepartCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.cmd)
    }

    #[test]
    fn replay_flags_parse() {
        let RepartCommand::Replay(a) = parse(&[
            "replay",
            "--format",
            "kvpaxos",
            "req.txt",
            "--mode",
            "base:100000",
            "--window",
            "1000",
            "--partitioner",
            "fennel",
            "--unmapped",
            "keep",
            "--records",
            "1000",
        ])
        .unwrap() else {
            panic!("replay")
        };
        assert_eq!(a.mode, Mode::Base { interval: 100_000 });
        assert_eq!(a.shards, 8);
        assert_eq!(a.value_size, 4096);
        let c = config(&a, 1000);
        assert_eq!(c.label, "Base Δp=100000 W=1000");
        assert_eq!(c.partitioner, PartitionerKind::Fennel);
        assert_eq!(c.unmapped, UnmappedPolicy::Keep);
        assert!(c.validate().is_ok());
        let RepartCommand::Replay(a) = parse(&["replay", "f", "--mode", "ns"]).unwrap() else {
            panic!("replay")
        };
        assert_eq!(a.mode, Mode::NonStop);
        assert_eq!(a.unmapped, UnmappedPolicy::Drop);
    }

    #[test]
    fn bad_flags_are_refused_naming_the_flag() {
        for (args, flag) in [
            (&["replay", "f", "--mode", "base"][..], "--mode"),
            (&["replay", "f", "--mode", "off"], "--mode"),
            (&["replay", "f", "--mode", "fast"], "--mode"),
            (&["replay", "f", "--mode", "free:0"], "--mode"),
            (
                &["replay", "f", "--mode", "ns", "--shards", "0"],
                "--shards",
            ),
            (
                &["replay", "f", "--mode", "ns", "--partitioner", "kl"],
                "--partitioner",
            ),
            (
                &["replay", "f", "--mode", "ns", "--unmapped", "lose"],
                "--unmapped",
            ),
            (
                &["replay", "f", "--mode", "ns", "--value-size", "0"],
                "--value-size",
            ),
            (
                &["replay", "f", "--mode", "ns", "--queue-cap", "0"],
                "--queue-cap",
            ),
            (&["replay", "f", "--mode", "ns", "--window=-1"], "--window"),
            (
                &["replay", "f", "--mode", "ns", "--format", "csv"],
                "--format",
            ),
            (&["replay", "f"], "--mode"),
            (
                &[
                    "kvpaxos-gen",
                    "--workload",
                    "f",
                    "--records",
                    "10",
                    "--ops",
                    "1",
                    "--out",
                    "x",
                ],
                "--workload",
            ),
            (
                &[
                    "kvpaxos-gen",
                    "--workload",
                    "d",
                    "--records",
                    "1",
                    "--ops",
                    "1",
                    "--out",
                    "x",
                ],
                "--records",
            ),
            (
                &[
                    "kvpaxos-gen",
                    "--workload",
                    "d",
                    "--records",
                    "100",
                    "--ops",
                    "0",
                    "--out",
                    "x",
                ],
                "--ops",
            ),
        ] {
            let e = parse(args).unwrap_err().to_string();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
    }

    #[test]
    fn generate_then_replay_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("e.txt");
        let f = file.to_str().unwrap();
        let RepartCommand::KvpaxosGen(g) = parse(&[
            "kvpaxos-gen",
            "--workload",
            "e",
            "--records",
            "500",
            "--ops",
            "2000",
            "--seed",
            "3",
            "--out",
            f,
        ])
        .unwrap() else {
            panic!("gen")
        };
        generate(*g).unwrap();
        let out = dir.path().join("runs").join("e").join("rr");
        let RepartCommand::Replay(a) = parse(&[
            "replay",
            f,
            "--mode",
            "round_robin",
            "--value-size",
            "32",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap() else {
            panic!("replay")
        };
        replay(*a).unwrap();
        let text = std::fs::read_to_string(out.join("result.json")).unwrap();
        let r: repart::ReplayResult = serde_json::from_str(&text).unwrap();
        assert_eq!(r.records, 500);
        assert_eq!(r.executed, 2000);
        assert_eq!(r.scan_mismatches, 0);
        let RepartCommand::Replay(a) =
            parse(&["replay", "/nonexistent/file", "--mode", "rr"]).unwrap()
        else {
            panic!("replay")
        };
        assert!(format!("{:#}", replay(*a).unwrap_err()).contains("FILE"));
    }
}
