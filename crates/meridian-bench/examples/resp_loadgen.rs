//! The RESP load generator, head to head with `redis-benchmark` and go-ycsb
//! (`bench/resp-loadgen.sh` runs all three against one redis-server):
//!
//! ```text
//! cargo run --release -p meridian-bench --example resp_loadgen -- \
//!     --addr 127.0.0.1:6379 --clients 50 --pipeline 16 --seconds 5 --workload set
//! ```
//!
//! `--workload set|get` mirror `redis-benchmark -t set|get -d 3 -r 100000`: 3-byte values on
//! keys drawn uniformly from `--records` (100 000); `get` first loads every key. `a` runs YCSB
//! workload A from the canonical file (after loading its `recordcount` records), with
//! `--commands plain|hash` (`hash` = HSET/HGETALL, like YCSB's Redis bindings).
//! `--clients C --pipeline P` open C connections and run C × P closed-loop client threads, so
//! each connection carries P requests in flight, like `redis-benchmark -c C -P P`.
//!
//! `--workers N` sets tokio worker threads; the default, 1, is a current-thread runtime (like
//! redis-benchmark's single thread): on a small machine shared with the server it avoids
//! cross-thread wake-ups and leaves the other cores to the server, and measured faster than
//! 2 workers on the 2-core bench machine.
//!
//! Prints one JSON line: `{"workload", "clients", "pipeline", "ops_per_s", "p50_us",
//! "p99_us", "errors", ...}` (p50/p99: the worst op type's; per type under `ops`).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use meridian_bench::generator::Distribution;
use meridian_bench::resp::{CommandSet, RespConfig, RespTarget};
use meridian_bench::runner::{self, Arrival, RunConfig};
use meridian_bench::stats::Scope;
use meridian_bench::workload::{CoreWorkload, canonical};

struct Args {
    addr: String,
    clients: usize,
    pipeline: usize,
    seconds: f64,
    warmup: f64,
    workload: String,
    records: Option<u64>,
    value_size: u32,
    commands: CommandSet,
    workers: usize,
}

const USAGE: &str = "usage: resp_loadgen --addr HOST:PORT [--clients C] [--pipeline P] \
    [--seconds S] [--warmup S] [--workload set|get|a] [--records N] [--value-size BYTES] \
    [--commands plain|hash] [--workers N]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: String::new(),
        clients: 50,
        pipeline: 1,
        seconds: 5.0,
        warmup: 1.0,
        workload: "set".into(),
        records: None,
        value_size: 3,
        commands: CommandSet::Plain,
        workers: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let bad = |v: &str| format!("invalid value `{v}` for {flag}\n{USAGE}");
        match flag.as_str() {
            "--addr" => args.addr = value()?,
            "--clients" => {
                let v = value()?;
                args.clients = v.parse().map_err(|_| bad(&v))?;
            }
            "--pipeline" => {
                let v = value()?;
                args.pipeline = v.parse().map_err(|_| bad(&v))?;
            }
            "--seconds" => {
                let v = value()?;
                args.seconds = v.parse().map_err(|_| bad(&v))?;
            }
            "--warmup" => {
                let v = value()?;
                args.warmup = v.parse().map_err(|_| bad(&v))?;
            }
            "--workload" => args.workload = value()?,
            "--records" => {
                let v = value()?;
                args.records = Some(v.parse().map_err(|_| bad(&v))?);
            }
            "--value-size" => {
                let v = value()?;
                args.value_size = v.parse().map_err(|_| bad(&v))?;
            }
            "--commands" => {
                let v = value()?;
                args.commands = match v.as_str() {
                    "plain" => CommandSet::Plain,
                    "hash" => CommandSet::Hash,
                    _ => return Err(bad(&v)),
                };
            }
            "--workers" => {
                let v = value()?;
                args.workers = v.parse().map_err(|_| bad(&v))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    if args.addr.is_empty() {
        return Err(format!("--addr is required\n{USAGE}"));
    }
    if args.clients == 0
        || args.pipeline == 0
        || args.seconds.is_nan()
        || args.seconds <= 0.0
        || args.warmup.is_nan()
        || args.warmup < 0.0
    {
        return Err(format!(
            "clients, pipeline and seconds must be positive\n{USAGE}"
        ));
    }
    Ok(args)
}

fn workload(args: &Args) -> Result<CoreWorkload, String> {
    let simple = |read: f64| CoreWorkload {
        record_count: args.records.unwrap_or(100_000),
        read_proportion: read,
        update_proportion: 1.0 - read,
        field_count: 1,
        field_length: args.value_size,
        request_distribution: Distribution::Uniform,
        ..CoreWorkload::default()
    };
    match args.workload.as_str() {
        "set" => Ok(simple(0.0)),
        "get" => Ok(simple(1.0)),
        letter if letter.len() == 1 => {
            let text = letter
                .chars()
                .next()
                .and_then(canonical::by_letter)
                .ok_or(format!("no canonical workload `{letter}`"))?;
            let mut w = CoreWorkload::parse(text)
                .map_err(|e| e.to_string())?
                .workload;
            if let Some(n) = args.records {
                w.record_count = n;
            }
            Ok(w)
        }
        other => Err(format!("unknown workload `{other}`\n{USAGE}")),
    }
}

/// YCSB's load phase through the runner's: every record once, failures retried, any record
/// still missing an error.
async fn load(target: &Arc<RespTarget>, w: &CoreWorkload, threads: u32) -> Result<(), String> {
    let l = runner::load(Arc::clone(target), w, threads, |_, _| {})
        .await
        .map_err(|e| e.to_string())?;
    if l.failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "loading failed for records, by error code: {:?}",
            l.failed
        ))
    }
}

async fn main_async(args: Args) -> Result<String, String> {
    let w = workload(&args)?;
    let threads = u32::try_from(args.clients * args.pipeline)
        .map_err(|_| "clients × pipeline is too large".to_string())?;
    let target = Arc::new(
        RespTarget::connect(RespConfig {
            connections: args.clients,
            pipeline: args.pipeline,
            timeout: Duration::from_secs(10),
            commands: args.commands,
            ..RespConfig::new(args.addr.clone())
        })
        .await
        .map_err(|e| e.to_string())?,
    );
    if w.read_proportion > 0.0 || w.read_modify_write_proportion > 0.0 {
        load(&target, &w, threads).await?;
    }
    let mut config = RunConfig::new(
        Arrival::Closed { threads },
        Duration::from_secs_f64(args.seconds),
    );
    config.warmup = Duration::from_secs_f64(args.warmup);
    let r = runner::run(Arc::clone(&target), &w, &config, |_| {})
        .await
        .map_err(|e| e.to_string())?;
    // Latencies per op type; the headline p50/p99 are the worst op type's.
    let totals: Vec<_> = r
        .report
        .summaries
        .iter()
        .filter(|s| s.scope == Scope::Total)
        .collect();
    let p50 = totals.iter().map(|s| s.p50_us).max().unwrap_or(0);
    let p99 = totals.iter().map(|s| s.p99_us).max().unwrap_or(0);
    let errors: u64 = r.report.errors_by_code.values().sum();
    let per_op: Vec<String> = totals
        .iter()
        .map(|s| {
            format!(
                "\"{}\":{{\"count\":{},\"p50_us\":{},\"p99_us\":{}}}",
                s.op, s.count, s.p50_us, s.p99_us
            )
        })
        .collect();
    Ok(format!(
        "{{\"workload\":\"{}\",\"clients\":{},\"pipeline\":{},\"threads\":{},\"seconds\":{},\
         \"ops_per_s\":{:.0},\"p50_us\":{},\"p99_us\":{},\"errors\":{},\"errors_by_code\":{},\
         \"connections_opened\":{},\"ops\":{{{}}}}}",
        args.workload,
        args.clients,
        args.pipeline,
        threads,
        args.seconds,
        r.mean_throughput,
        p50,
        p99,
        errors,
        serde_json::to_string(&r.report.errors_by_code).map_err(|e| e.to_string())?,
        target.connections_opened(),
        per_op.join(","),
    ))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut builder = if args.workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(args.workers);
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(args)) {
        Ok(line) => {
            // A closed pipe (the reader went away) is not worth a panic.
            match writeln!(std::io::stdout(), "{line}") {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Err(e) => {
            eprintln!("resp_loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}
