//! `meridian bench`: one benchmark run of a YCSB workload against the embedded cluster (real
//! time), the simulated cluster (virtual time) or any RESP server; writes the report, the
//! settings and the plots. Also the progress display shared with `experiment` and `demo`.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use meridian_bench::cell::{self, CellConfig, Clock, WarmupConfig};
use meridian_bench::cluster::{ClusterSpec, Mode};
use meridian_bench::output;
use meridian_bench::resp::{CommandSet, RespConfig, RespTarget};
use meridian_bench::runner::{self, Arrival, Progress, RunConfig, RunResult};
use meridian_bench::workload::{CoreWorkload, canonical, parse_properties};

/// Arguments of `meridian bench`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    /// Another benchmark than YCSB's (`blob`: large-object transfers).
    #[command(subcommand)]
    kind: Option<BenchKind>,
    /// A YCSB workload properties file (YCSB's own `workloads/workload[a-f]` are read
    /// unchanged).
    #[arg(short = 'P', long = "workload-file", value_name = "FILE")]
    workload_file: Option<PathBuf>,
    /// One of YCSB's canonical workloads, bundled: a, b, c, d, e or f (default a).
    #[arg(long, value_name = "LETTER", conflicts_with = "workload_file")]
    workload: Option<char>,
    /// Overrides a workload property, as YCSB's `-p` (`-p recordcount=10000`); Meridian adds
    /// `locality` (0..1) and `dcs`.
    #[arg(short = 'p', long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// Where to send requests: `embedded` (this process, real time), `virtual` (the
    /// simulator, virtual time) or `resp://HOST:PORT[,HOST:PORT...]` (any Redis-protocol
    /// server; `;` separates the address lists of successive DCs).
    #[arg(long, default_value = "embedded")]
    target: String,
    /// The consistency mode on the embedded or virtual cluster.
    #[arg(long, default_value = "ind1")]
    mode: String,
    /// Client threads (closed and paced loops), spread round-robin over the DCs.
    #[arg(long, default_value_t = 16)]
    threads: u32,
    /// Paced loop: each thread sleeps Exp(1/λ) before each op (basho_bench's `{rate, λ}`;
    /// the geo study used 15).
    #[arg(long, value_name = "OPS_PER_S", conflicts_with = "open_rate")]
    rate_per_thread: Option<f64>,
    /// Open loop: Poisson arrivals at this total rate, latency from the intended start.
    #[arg(long, value_name = "OPS_PER_S")]
    open_rate: Option<f64>,
    /// Measured seconds (after the warm-up); YCSB's `operationcount`, when set, ends the run
    /// earlier.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds at the start of the run excluded from the results; with YCSB's
    /// `operationcount` set, at most its first 10 % of operations.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Seed of every random choice (workload, emulator, nodes).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cluster targets: data centres.
    #[arg(long, default_value_t = 2)]
    dcs: u32,
    /// Cluster targets: nodes per DC.
    #[arg(long, default_value_t = 3)]
    nodes_per_dc: u32,
    /// Cluster targets: replicas per key.
    #[arg(long, default_value_t = 3)]
    n: u32,
    /// Cluster targets: round-trip time between DCs, ms.
    #[arg(long, default_value_t = 100.0)]
    wan_rtt_ms: f64,
    /// Cluster targets: jitter, % of the RTT at most.
    #[arg(long, default_value_t = 0.0)]
    jitter_pct: f64,
    /// Cluster targets: timeline warm-up passes at most (each writes every record once).
    #[arg(long, default_value_t = 15)]
    warmup_passes: u32,
    /// RESP target: load the records before the run (cluster targets always load).
    #[arg(long)]
    load: bool,
    /// RESP target: connections per address.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// RESP target: requests in flight per connection (`redis-benchmark -P`).
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// RESP target: the commands operations become.
    #[arg(long, value_enum, default_value = "plain")]
    commands: Commands,
    /// Directory for report.json, report.csv, settings.json and the plots.
    #[arg(long, default_value = "results/bench")]
    out: PathBuf,
    /// No progress bar (for logs and scripts).
    #[arg(long)]
    quiet: bool,
}

/// The benchmarks besides YCSB's.
#[derive(clap::Subcommand, Debug)]
enum BenchKind {
    /// Large-object transfers through the object service of an in-process cluster (uploads,
    /// downloads, random reads; admission, memory, WAN and disk models), every object
    /// verified; `--study` runs the GridFS study's experiments E1–E7.
    Blob(Box<crate::bench_blob_cmd::BlobArgs>),
    /// The in-node repartitioning study: `replay`, `kvpaxos-gen`, `repart-plot`.
    #[command(flatten)]
    Repart(crate::bench_repart_cmd::RepartCommand),
}

/// What YCSB operations become on a RESP server.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Commands {
    /// GET / SET.
    Plain,
    /// HGETALL / HSET, as YCSB's Redis binding.
    Hash,
    /// Meridian timeline buckets: GET (read_any) and SET.
    Timeline,
    /// Meridian timeline buckets: MERIDIAN.GET key LATEST and SET.
    TimelineLatest,
}

/// A progress display: the phase (load, warm-up passes, the measured run's warm-up, measure)
/// with its own figures, and a bar over the measured run's time with live throughput and p99.
/// With [`Display::log_phases`], each finished phase also leaves a line: above the bar on a
/// terminal, as a plain stderr line otherwise (logs and pipes see the phases too).
pub struct Display {
    bar: ProgressBar,
    /// Log finished phases as lines on a terminal (`Some(false)`) or plainly (`Some(true)`).
    log: Option<bool>,
    phase: Mutex<Phase>,
}

/// The phase on show.
struct Phase {
    prefix: String,
    message: String,
    since: Instant,
    bar: bool,
}

/// The bar of the measured run.
const BAR_TEMPLATE: &str = "{prefix:>18} [{bar:30}] {pos:>4}/{len}s {msg}";
/// A phase without a bar (load, warm-up passes): its elapsed time.
const PHASE_TEMPLATE: &str = "{prefix:>18} {elapsed:>5} {msg}";

impl Display {
    /// A bar of `seconds` (hidden when `quiet` or not on a terminal).
    pub fn new(quiet: bool, seconds: f64) -> Display {
        let bar = ProgressBar::with_draw_target(
            Some(seconds.ceil().max(1.0) as u64),
            if quiet {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr()
            },
        );
        bar.set_style(Self::style(PHASE_TEMPLATE));
        Display {
            bar,
            log: None,
            phase: Mutex::new(Phase {
                prefix: String::new(),
                message: String::new(),
                since: Instant::now(),
                bar: false,
            }),
        }
    }

    /// Also logs each finished phase (unless `quiet`): a line with its last figures and how
    /// long it took, so a long warm-up is never silent, even without a terminal.
    pub fn log_phases(mut self, quiet: bool) -> Display {
        if !quiet {
            self.log = Some(!std::io::stderr().is_terminal());
        }
        self
    }

    fn style(template: &str) -> ProgressStyle {
        ProgressStyle::with_template(template)
            .expect("a valid template")
            .progress_chars("=> ")
    }

    /// Enters phase `prefix` (logging the previous one when it changes) with `message`.
    fn show(&self, prefix: &str, message: String, bar: bool) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if phase.prefix != prefix {
            if let Some(plain) = self.log
                && !phase.prefix.is_empty()
                && !phase.message.is_empty()
            {
                let line = format!(
                    "{}: {} [{:.0} s]",
                    phase.prefix,
                    phase.message,
                    phase.since.elapsed().as_secs_f64()
                );
                if plain {
                    eprintln!("{line}");
                } else {
                    self.bar.println(line);
                }
            }
            phase.prefix = prefix.to_owned();
            phase.since = Instant::now();
            self.bar.set_prefix(prefix.to_owned());
            if !bar {
                self.bar.reset_elapsed();
            }
        }
        if phase.bar != bar {
            phase.bar = bar;
            self.bar
                .set_style(Self::style(if bar { BAR_TEMPLATE } else { PHASE_TEMPLATE }));
        }
        phase.message.clone_from(&message);
        self.bar.set_message(message);
    }

    /// Shows a phase (`load: 2000/10000 records`, `warm-up pass 2/15: ...`) as the prefix and
    /// message.
    pub fn phase(&self, text: &str) {
        let (prefix, msg) = text.split_once(':').unwrap_or((text, ""));
        self.show(prefix.trim(), msg.trim().to_owned(), false);
    }

    /// Shows the live figures of a run.
    pub fn progress(&self, p: &Progress) {
        let figures = format!(
            "{:.0} ops/s  p99 {:.2} ms  errors {}",
            p.throughput,
            p.p99_us as f64 / 1e3,
            p.errors
        );
        let at = p.elapsed.as_secs();
        if p.warming_up {
            self.show(
                "warm-up",
                format!("excluded from the results  {figures}"),
                true,
            );
        } else {
            self.show("measure", figures, true);
        }
        // An experiment's runs have their own lengths: grow the bar rather than overflow it.
        if self.bar.length().is_some_and(|len| at > len) {
            self.bar.set_length(at);
        }
        self.bar.set_position(at);
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// What the machine and build were (spec §7: a run without its settings is not a result).
pub fn host_settings() -> serde_json::Value {
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let first_line = |path: &str, key: &str| {
        std::fs::read_to_string(path).ok().and_then(|t| {
            t.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_owned())
        })
    };
    serde_json::json!({
        "meridian_version": env!("CARGO_PKG_VERSION"),
        "git_commit": git,
        "build_profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": first_line("/proc/cpuinfo", "model name"),
        "memory": first_line("/proc/meminfo", "MemTotal"),
    })
}

fn workload(args: &BenchArgs) -> Result<(CoreWorkload, Vec<String>)> {
    let text = match (&args.workload_file, args.workload) {
        (Some(path), _) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the workload file {}", path.display()))?,
        (None, letter) => {
            let letter = letter.unwrap_or('a');
            canonical::by_letter(letter)
                .with_context(|| {
                    format!("no canonical workload `{letter}`: use a, b, c, d, e or f")
                })?
                .to_owned()
        }
    };
    let mut props: BTreeMap<String, String> = parse_properties(&text);
    for kv in &args.properties {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("-p {kv}: expected KEY=VALUE"))?;
        props.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let parsed = CoreWorkload::from_properties(&props)?;
    Ok((parsed.workload, parsed.warnings))
}

/// The longest `--duration`, `--warmup` or `--seconds` accepted (a week).
pub(crate) const MAX_PHASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The value of flag `--{flag}`, a number of `unit`s, as a duration: finite, at least 0, at
/// most `max` — never a panic of `Duration::from_secs_f64` on NaN, infinity or a huge value.
pub(crate) fn duration_arg(
    flag: &str,
    value: f64,
    unit: Duration,
    max: Duration,
) -> Result<Duration> {
    let limit = max.as_secs_f64() / unit.as_secs_f64();
    if !(value.is_finite() && value >= 0.0) {
        bail!("--{flag} = {value}: must be a finite number between 0 and {limit}");
    }
    match Duration::try_from_secs_f64(value * unit.as_secs_f64()) {
        Ok(d) if d <= max => Ok(d),
        _ => bail!("--{flag} = {value}: must be a finite number between 0 and {limit}"),
    }
}

fn run_config(args: &BenchArgs, w: &CoreWorkload) -> Result<RunConfig> {
    if !(args.duration > 0.0 && args.warmup >= 0.0) {
        bail!("--duration must be > 0 and --warmup >= 0 seconds");
    }
    let arrival = match (args.rate_per_thread, args.open_rate) {
        (Some(rate_per_thread), _) => Arrival::Paced {
            threads: args.threads,
            rate_per_thread,
        },
        (None, Some(rate)) => Arrival::Open { rate },
        (None, None) => Arrival::Closed {
            threads: args.threads,
        },
    };
    let second = Duration::from_secs(1);
    let mut cfg = RunConfig::new(
        arrival,
        duration_arg("duration", args.duration, second, MAX_PHASE)?,
    );
    cfg.warmup = duration_arg("warmup", args.warmup, second, MAX_PHASE)?;
    cfg.seed = args.seed;
    cfg.max_ops = (w.operation_count > 0).then_some(w.operation_count);
    Ok(cfg)
}

fn parse_resp(spec: &str) -> Vec<Vec<String>> {
    spec.split(';')
        .map(|dc| {
            dc.split(',')
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect()
        })
        .collect()
}

/// Runs `meridian bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.kind {
        Some(BenchKind::Blob(blob)) => return crate::bench_blob_cmd::run(*blob),
        Some(BenchKind::Repart(cmd)) => return crate::bench_repart_cmd::run(cmd),
        None => {}
    }
    let (mut w, warnings) = workload(&args)?;
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    let run_cfg = run_config(&args, &w)?;
    let display = Display::new(args.quiet, args.warmup + args.duration).log_phases(args.quiet);
    let (result, settings, title) = if let Some(addrs) = args.target.strip_prefix("resp://") {
        let addrs = parse_resp(addrs);
        if addrs.iter().any(Vec::is_empty) {
            bail!("--target resp://HOST:PORT[,HOST:PORT][;HOST:PORT...]: an address list is empty");
        }
        w.dcs = addrs.len() as u32;
        let config = RespConfig {
            addrs,
            connections: args.connections.max(1),
            pipeline: args.pipeline.max(1),
            commands: match args.commands {
                Commands::Plain => CommandSet::Plain,
                Commands::Hash => CommandSet::Hash,
                Commands::Timeline => CommandSet::MeridianTimeline { latest: false },
                Commands::TimelineLatest => CommandSet::MeridianTimeline { latest: true },
            },
            ..RespConfig::new("")
        };
        let result = run_resp(&args, &w, &run_cfg, config.clone(), &display)?;
        let settings = serde_json::json!({
            "host": host_settings(),
            "target": args.target,
            "connections": config.connections,
            "pipeline": config.pipeline,
            "commands": format!("{:?}", config.commands),
            "workload": format!("{w:?}"),
            "arrival": format!("{:?}", run_cfg.arrival),
            "seed": args.seed,
        });
        (result, settings, format!("RESP {}", args.target))
    } else {
        let clock = match args.target.as_str() {
            "embedded" => Clock::Real,
            "virtual" => Clock::Virtual,
            other => bail!("unknown --target `{other}`: use embedded, virtual or resp://HOST:PORT"),
        };
        let mode: Mode = args.mode.parse()?;
        w.dcs = args.dcs;
        let cfg = CellConfig {
            cluster: ClusterSpec {
                dcs: args.dcs,
                nodes_per_dc: args.nodes_per_dc,
                n: args.n,
                wan_rtt: duration_arg(
                    "wan-rtt-ms",
                    args.wan_rtt_ms,
                    Duration::from_millis(1),
                    meridian_net::wan::config::MAX_RTT,
                )?,
                jitter: args.jitter_pct / 100.0,
                mode,
                seed: args.seed,
                ..ClusterSpec::default()
            },
            workload: w.clone(),
            run: run_cfg.clone(),
            load_threads: args.threads.max(16),
            warmup: WarmupConfig {
                max_passes: args.warmup_passes,
                ..WarmupConfig::default()
            },
            clock,
        };
        let r = cell::run_cell(&cfg, &mut |p| display.phase(p), &mut |p| {
            display.progress(p)
        })?;
        let settings = serde_json::json!({
            "host": host_settings(),
            "target": args.target,
            "clock": clock.as_str(),
            "cluster": cfg.cluster,
            "workload": format!("{w:?}"),
            "arrival": format!("{:?}", run_cfg.arrival),
            "seed": args.seed,
            "phases": r.phases,
            "counters": r.counters,
        });
        (
            r.run,
            settings,
            format!("{mode} on the {} cluster", args.target),
        )
    };
    display.finish();
    let written = output::write_run(&args.out, &title, &result, &settings)?;
    print_result(&title, &result);
    println!("wrote {} files to {}", written.len(), args.out.display());
    Ok(())
}

fn run_resp(
    args: &BenchArgs,
    w: &CoreWorkload,
    run_cfg: &RunConfig,
    config: RespConfig,
    display: &Display,
) -> Result<RunResult> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the tokio runtime")?;
    rt.block_on(async {
        let target = Arc::new(RespTarget::connect(config).await?);
        if args.load {
            display.phase(&format!("load: 0/{} records", w.record_count));
            let l = runner::load(
                Arc::clone(&target),
                w,
                args.threads.max(1),
                |done, total| {
                    display.phase(&format!("load: {done}/{total} records"));
                },
            )
            .await?;
            display.phase(&format!("load: {}/{} records", l.inserted, w.record_count));
            if !l.failed.is_empty() {
                bail!("loading failed for {:?} records (by error code)", l.failed);
            }
        }
        display.phase(&runner::warmup_phase(run_cfg));
        Ok(runner::run(target, w, run_cfg, |p| display.progress(p)).await?)
    })
}

/// Prints a run's headline figures.
pub fn print_result(title: &str, r: &RunResult) {
    println!("{title}");
    println!(
        "  {:.0} ops/s over the measured phase; {} ops started, {} dropped, {} abandoned",
        r.mean_throughput, r.ops_started, r.ops_dropped, r.ops_abandoned
    );
    if !r.report.errors_by_code.is_empty() {
        println!("  errors: {:?}", r.report.errors_by_code);
    }
    print!("{}", output::comparison_table(&[(String::new(), r)]));
}
