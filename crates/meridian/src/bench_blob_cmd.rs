//! `meridian bench blob`: one large-object benchmark run, a random-access run, or the GridFS
//! study's experiments (`--study`); the work is `meridian_bench::blob`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use meridian_bench::blob::random::{self, Budget};
use meridian_bench::blob::study::{self, Scale, StudyOptions};
use meridian_bench::blob::{
    self, BlobBenchConfig, BlobReport, ClusterOptions, Content, LinkSpec, Op, PlacementMode,
    StartMode, StoreKind, Topology,
};
use meridian_bench::output::write_file;
use meridian_bench::plot::{self, ThroughputSeries};
use meridian_blob::DiskConfig;
use meridian_server::objects::BlobConfig;

/// Arguments of `meridian bench blob`.
#[derive(Args, Debug)]
pub struct BlobArgs {
    /// Run the study's experiments instead of one run: `all`, or ids among e1..e7 and
    /// `bench` (comma-separated); results and `summary.md` go to `--out`.
    #[arg(long, value_name = "IDS")]
    study: Option<String>,
    /// With `--study`: short runs and fewer levels (a smoke test).
    #[arg(long, requires = "study", conflicts_with = "full")]
    quick: bool,
    /// With `--study`: long runs and the study's full sizes.
    #[arg(long, requires = "study")]
    full: bool,
    /// What each transfer does; `random` reads blocks of one object at random offsets
    /// (`--block-size`), beside a `pread` baseline on a plain file.
    #[arg(long, value_enum, default_value = "put")]
    op: OpArg,
    /// Bytes per object (suffixes K, KiB, M, MiB, G, GiB, KB, MB, GB).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    object_size: u64,
    /// Chunk size (4 KiB ..= 8 MiB; the node's configuration allows 64 KiB and up).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    chunk_size: u64,
    /// Streams per object: chunk-aligned byte ranges uploaded (`Content-Range` parts), or
    /// range reads, at once.
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Client machines.
    #[arg(long, default_value_t = 1)]
    clients: u32,
    /// Threads per client (each makes its transfers one after another).
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Transfers per thread.
    #[arg(long, default_value_t = 1)]
    transfers_per_thread: u32,
    /// Admission: transfers running at once per node.
    #[arg(long, default_value_t = 64)]
    max_active: usize,
    /// Admission: transfers waiting before new ones are refused.
    #[arg(long, default_value_t = 1024)]
    max_queued: usize,
    /// Admission: the longest wait in the queue, ms.
    #[arg(long, default_value_t = 30_000)]
    queue_timeout_ms: u64,
    /// Chunk bytes in flight per node.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    max_inflight: u64,
    /// Chunks in flight per upload.
    #[arg(long, default_value_t = 4)]
    window: usize,
    /// Chunks fetched ahead per download.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Spread the threads' starts uniformly over this many seconds (default: all at once).
    #[arg(long, value_name = "SECONDS")]
    stagger: Option<f64>,
    /// Chunk stores.
    #[arg(long, value_enum, default_value = "mem")]
    store: StoreArg,
    /// Where `--store files` and the random-access baseline file go.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    store_dir: PathBuf,
    /// Put the server's chunk store behind a disk model of this many MB/s (reads and
    /// writes; 28 is the study's disk).
    #[arg(long, value_name = "MB_PER_S")]
    disk_mbps: Option<f64>,
    /// Disk model: ms per seek.
    #[arg(long, default_value_t = 12.0)]
    disk_seek_ms: f64,
    /// Disk model: throttle writes only (reads free).
    #[arg(long)]
    disk_writes_only: bool,
    /// Nodes: `local` (one), `lan` (two in one DC) or `wan` (one in each of two DCs).
    #[arg(long, value_enum, default_value = "local")]
    topology: TopologyArg,
    /// Round-trip time of the link between the two nodes, ms.
    #[arg(long, default_value_t = 0.2)]
    rtt_ms: f64,
    /// Bandwidth of the link, Mb/s (0: unlimited).
    #[arg(long, default_value_t = 1000.0)]
    bandwidth_mbit: f64,
    /// `remote`: objects live on node 2 only (N = 1); `both`: on both nodes, W = all.
    #[arg(long, value_enum, default_value = "remote")]
    placement: PlacementArg,
    /// Socket buffer of each bulk stream in the WAN emulator: `none` (no window cap),
    /// `auto` (max(256 KiB, 2 × bandwidth × RTT)) or a size.
    #[arg(long, default_value = "none")]
    socket_buffer: String,
    /// Random access: bytes per read.
    #[arg(long, default_value = "32KiB", value_parser = parse_size)]
    block_size: u64,
    /// Random access: seconds of reading per reader.
    #[arg(long, default_value_t = 3.0)]
    random_secs: f64,
    /// Compute MD5 ETags (S3's; off by default: the benchmark checks BLAKE3).
    #[arg(long)]
    md5: bool,
    /// Seed of the objects' bytes, start offsets and emulator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for the report, CSV, time series and plots.
    #[arg(long, default_value = "results/bench-blob")]
    out: PathBuf,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OpArg {
    Put,
    Get,
    Random,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum StoreArg {
    Mem,
    Files,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum TopologyArg {
    Local,
    Lan,
    Wan,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum PlacementArg {
    Remote,
    Both,
}

/// A byte size: a number with an optional K/M/G (binary) or KB/MB/GB (decimal) suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a size such as 4096, 32KiB, 1MiB or 700KB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        other => {
            return Err(format!(
                "`{s}`: unknown unit `{other}` (use K, KiB, M, MiB, G, GiB, KB, MB, GB)"
            ));
        }
    };
    let v = n * mult;
    if !(v.is_finite() && (0.0..1e18).contains(&v)) {
        return Err(format!("`{s}`: out of range"));
    }
    Ok(v.round() as u64)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Every upload hashes on a blocking thread and a disk-model store sleeps on them.
        .max_blocking_threads(4096)
        // ... and idle ones should not linger into the next run's memory figures.
        .thread_keep_alive(Duration::from_secs(1))
        .build()
        .context("building the tokio runtime")
}

fn link(args: &BlobArgs) -> Result<LinkSpec> {
    let rtt = crate::bench_cmd::duration_arg(
        "rtt-ms",
        args.rtt_ms,
        Duration::from_millis(1),
        meridian_net::wan::config::MAX_RTT,
    )?;
    if !(args.bandwidth_mbit.is_finite() && args.bandwidth_mbit >= 0.0) {
        bail!("--bandwidth-mbit must be a number >= 0");
    }
    let bytes = (args.bandwidth_mbit * 1e6 / 8.0) as u64;
    Ok(LinkSpec {
        rtt,
        bandwidth: (bytes > 0).then_some(bytes.max(meridian_net::wan::config::MIN_BANDWIDTH)),
    })
}

fn cluster(args: &BlobArgs) -> Result<ClusterOptions> {
    let link = link(args)?;
    let bulk_buffer = match args.socket_buffer.as_str() {
        "none" => None,
        "auto" => Some(study::auto_buffer(&link)),
        other => Some(
            usize::try_from(parse_size(other).map_err(anyhow::Error::msg)?)
                .context("--socket-buffer")?
                .max(1),
        ),
    };
    let disk = match args.disk_mbps {
        None => None,
        Some(m) if m.is_finite() && m > 0.0 => {
            let bps = (m * 1e6) as u64;
            Some(DiskConfig {
                read_bytes_per_sec: (!args.disk_writes_only).then_some(bps),
                write_bytes_per_sec: Some(bps),
                seek: crate::bench_cmd::duration_arg(
                    "disk-seek-ms",
                    args.disk_seek_ms,
                    Duration::from_millis(1),
                    Duration::from_secs(10),
                )?,
                ..DiskConfig::disk_2006()
            })
        }
        Some(m) => bail!("--disk-mbps {m}: must be a positive number of MB/s"),
    };
    let chunk_size = u32::try_from(args.chunk_size).context("--chunk-size")?;
    Ok(ClusterOptions {
        topology: match args.topology {
            TopologyArg::Local => Topology::Local,
            TopologyArg::Lan => Topology::Lan,
            TopologyArg::Wan => Topology::Wan,
        },
        link,
        placement: match args.placement {
            PlacementArg::Remote => PlacementMode::Remote,
            PlacementArg::Both => PlacementMode::Both,
        },
        store: match args.store {
            StoreArg::Mem => StoreKind::Mem,
            StoreArg::Files => StoreKind::Files,
        },
        files_dir: args.store_dir.clone(),
        disk,
        blob: BlobConfig {
            chunk_size,
            window: args.window.clamp(1, 1024),
            prefetch: args.prefetch.clamp(1, 1024),
            max_inflight_bytes: args.max_inflight.max(args.chunk_size),
            max_active_transfers: args.max_active.max(1),
            max_queued: args.max_queued,
            queue_timeout_ms: args.queue_timeout_ms,
            md5_etag: args.md5,
            ..BlobConfig::default()
        },
        bulk_buffer,
        seed: args.seed,
    })
}

fn printer(quiet: bool) -> impl FnMut(&str) + Send {
    move |line: &str| {
        if !quiet {
            eprintln!("{line}");
        }
    }
}

/// Runs `meridian bench blob`.
pub fn run(args: BlobArgs) -> Result<()> {
    let rt = runtime()?;
    let mut say = printer(args.quiet);
    if let Some(ids) = &args.study {
        let only: Vec<String> = if ids == "all" {
            Vec::new()
        } else {
            ids.split(',')
                .map(|s| s.trim().to_ascii_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let opts = StudyOptions {
            out: args.out.clone(),
            scale: if args.quick {
                Scale::Quick
            } else if args.full {
                Scale::Full
            } else {
                Scale::Default
            },
            only,
            seed: args.seed,
            tmp: args.store_dir.clone(),
        };
        let written = rt.block_on(study::run_study(&opts, &mut say))?;
        println!(
            "wrote {} files to {} (see summary.md)",
            written.len(),
            args.out.display()
        );
        return Ok(());
    }
    let cluster = cluster(&args)?;
    if args.op == OpArg::Random {
        return run_random(&args, cluster, &rt, &mut say);
    }
    let cfg = BlobBenchConfig {
        cluster,
        op: if args.op == OpArg::Get {
            Op::Get
        } else {
            Op::Put
        },
        object_size: args.object_size,
        streams: args.streams,
        clients: args.clients,
        threads: args.threads,
        transfers_per_thread: args.transfers_per_thread,
        start: match args.stagger {
            Some(s) => StartMode::Staggered { over_s: s },
            None => StartMode::Synchronized,
        },
        seed: args.seed,
        ..BlobBenchConfig::default()
    };
    let report = rt.block_on(blob::run(&cfg, "bench blob", &mut say))?;
    write_report(&args.out, &report)?;
    print_report(&report);
    println!("wrote the report to {}", args.out.display());
    if report.verified != report.completed {
        bail!(
            "{} of {} completed transfers did not verify: {:?}",
            report.completed - report.verified,
            report.completed,
            report.verify_failures
        );
    }
    Ok(())
}

fn write_report(dir: &std::path::Path, r: &BlobReport) -> Result<()> {
    let json = serde_json::json!({
        "host": crate::bench_cmd::host_settings(),
        "report": r,
    });
    write_file(
        &dir.join("report.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    write_file(
        &dir.join("report.csv"),
        format!("{}{}", BlobReport::CSV_HEADER, r.csv_row()).as_bytes(),
    )?;
    let mut ts =
        String::from("second,completions,completed_mb,peak_active,peak_queued,cpu_cores\n");
    let s = &r.series;
    let n = s.completions.len().max(s.peak_active.len());
    for i in 0..n {
        ts.push_str(&format!(
            "{i},{},{:.3},{},{},{:.2}\n",
            s.completions.get(i).copied().unwrap_or(0),
            s.completed_mb.get(i).copied().unwrap_or(0.0),
            s.peak_active.get(i).copied().unwrap_or(0),
            s.peak_queued.get(i).copied().unwrap_or(0),
            s.cpu_cores.get(i).copied().unwrap_or(0.0)
        ));
    }
    write_file(&dir.join("timeseries.csv"), ts.as_bytes())?;
    plot::throughput_over_time(
        &dir.join("completions"),
        "transfers completed per second",
        &[ThroughputSeries {
            label: r.label.clone(),
            per_second: s.completions.clone(),
            measured: None,
        }],
    )?;
    Ok(())
}

fn print_report(r: &BlobReport) {
    let mib = |b: Option<u64>| {
        b.map_or("?".to_owned(), |b| {
            format!("{:.0} MiB", b as f64 / 1048576.0)
        })
    };
    println!(
        "{} {:?} transfers of {} bytes ({} stream(s)): {} completed, {} verified, {} rejected \
         (TooManyTransfers), other errors {:?}",
        r.transfers,
        r.config.op,
        r.config.object_size,
        r.streams_used,
        r.completed,
        r.verified,
        r.rejected,
        r.errors
    );
    println!(
        "  {:.2} MB/s over {:.2} s{}; per transfer {:.2} MB/s; latency ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
        r.throughput_mb_s,
        r.elapsed_s,
        r.link_fraction.map_or(String::new(), |f| format!(
            " ({:.0} % of the link)",
            f * 100.0
        )),
        r.mean_transfer_mb_s,
        r.latency_ms.p50,
        r.latency_ms.p90,
        r.latency_ms.p99,
        r.latency_ms.max
    );
    println!(
        "  peak active {}, peak queued {}, peak in flight {}, RSS {} before, {} peak",
        r.peak_active,
        r.peak_queued,
        mib(Some(r.memory.peak_inflight_bytes)),
        mib(r.memory.rss_before),
        mib(r.memory.rss_peak_sampled.max(r.memory.rss_hwm))
    );
    for (kind, e) in &r.error_examples {
        println!("  {kind}, e.g.: {e}");
    }
}

fn run_random(
    args: &BlobArgs,
    cluster: ClusterOptions,
    rt: &tokio::runtime::Runtime,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<()> {
    if args.block_size == 0 || args.object_size < args.block_size {
        bail!("--block-size must be at least 1 byte and at most --object-size");
    }
    let content = Content::new(meridian_core::splitmix64(args.seed), args.object_size);
    let budget = Budget {
        seconds: args.random_secs.max(0.0),
        max_reads: u64::MAX,
    };
    let blocks = [args.block_size];
    let path = args
        .store_dir
        .join(format!("meridian-random-{}.dat", std::process::id()));
    say("writing the baseline file");
    random::write_file(&path, &content)?;
    let disk = cluster.disk.clone();
    let base = random::pread_reads(&path, &content, &blocks, budget, disk.as_ref(), args.seed);
    let _ = std::fs::remove_file(&path);
    let mut reports = base?;
    say("loading the object");
    let cs = cluster.blob.chunk_size;
    reports.extend(rt.block_on(random::meridian_reads(
        cluster, content, cs, &blocks, budget, args.seed,
    ))?);
    for r in &reports {
        println!(
            "{:?}: {} reads of {} bytes, {:.2} MB/s, p50 {:.3} ms, p99 {:.3} ms, {} verified, {} failed",
            r.reader,
            r.reads,
            r.block,
            r.throughput_mb_s,
            r.latency_ms.p50,
            r.latency_ms.p99,
            r.verified,
            r.failed
        );
    }
    write_file(
        &args.out.join("random.json"),
        serde_json::to_string_pretty(&reports)?.as_bytes(),
    )?;
    if reports.iter().any(|r| r.failed > 0) {
        bail!("some block reads did not match the object's bytes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("32KiB"), Ok(32 << 10));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("700KB"), Ok(700_000));
        assert_eq!(parse_size("1.5MiB"), Ok(3 << 19));
        assert_eq!(parse_size(" 2 GiB "), Ok(2 << 30));
        assert!(parse_size("ten").unwrap_err().contains("expected a size"));
        assert!(
            parse_size("3 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
    }
}
