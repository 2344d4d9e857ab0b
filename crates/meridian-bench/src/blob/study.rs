//! The GridFS study's experiments E1–E7 (spec `large-objects.md`, "Numbers to reproduce
//! (shapes)") and the BENCHMARKS figures, each a set of [`super::run`]s (E5: random reads,
//! [`super::random`]), written to a results directory with CSV, JSON, plots and a
//! `summary.md` that puts our figures beside the study's. See
//! `experiments/large-objects/README.md` for the setups and why.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meridian_blob::throttled::DiskConfig;
use meridian_server::objects::BlobConfig;
use serde::{Deserialize, Serialize};

use super::random::{self, Budget, RandomReport, Reader};
use super::{
    BlobBenchConfig, BlobReport, ClusterOptions, Content, LinkSpec, Op, PlacementMode, StartMode,
    StoreKind, Topology,
};
use crate::BenchError;
use crate::output::write_file;
use crate::plot::{self, ThroughputSeries, XyAxes, XySeries};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// How long the study runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// A smoke run: fewer levels, smaller objects (a couple of minutes).
    Quick,
    /// The default: every level, runs of a few seconds.
    Default,
    /// Longer runs and the study's full sizes.
    Full,
}

impl Scale {
    /// Target seconds of one measured run.
    fn seconds(self) -> f64 {
        match self {
            Scale::Quick => 1.5,
            Scale::Default => 3.0,
            Scale::Full => 10.0,
        }
    }
}

/// The experiments, by id.
pub const EXPERIMENTS: [&str; 8] = ["e1", "e2", "e3", "e4", "e5", "e6", "e7", "bench"];

/// What to run and where to write it.
#[derive(Debug, Clone)]
pub struct StudyOptions {
    /// The results directory.
    pub out: PathBuf,
    /// How long.
    pub scale: Scale,
    /// The experiments to run (ids of [`EXPERIMENTS`]); empty: all.
    pub only: Vec<String>,
    /// Seed of every run.
    pub seed: u64,
    /// Where file chunk stores and the random-access baseline file go.
    pub tmp: PathBuf,
}

/// A row of the side-by-side table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The experiment.
    pub id: String,
    /// What is compared.
    pub what: String,
    /// The study's figure or shape.
    pub study: String,
    /// Ours.
    pub meridian: String,
    /// Whether the shape matches.
    pub matches: Option<bool>,
}

type Progress<'a> = &'a mut (dyn FnMut(&str) + Send);

struct Ctx<'a> {
    opts: &'a StudyOptions,
    progress: Progress<'a>,
    rows: Vec<Row>,
    sections: Vec<String>,
    written: Vec<PathBuf>,
}

impl Ctx<'_> {
    fn scale(&self) -> Scale {
        self.opts.scale
    }

    fn row(&mut self, id: &str, what: &str, study: &str, meridian: String, matches: Option<bool>) {
        self.rows.push(Row {
            id: id.into(),
            what: what.into(),
            study: study.into(),
            meridian,
            matches,
        });
    }

    async fn run(&mut self, cfg: &BlobBenchConfig, label: &str) -> Result<BlobReport, BenchError> {
        let r = super::run(cfg, label, self.progress).await?;
        (self.progress)(&format!(
            "{label}: {:.2} MB/s, {}/{} completed, {} verified, {} rejected{}",
            r.throughput_mb_s,
            r.completed,
            r.transfers,
            r.verified,
            r.rejected,
            if r.errors.is_empty() {
                String::new()
            } else {
                format!(", errors {:?}", r.errors)
            }
        ));
        Ok(r)
    }

    fn save(&mut self, name: &str, reports: &[BlobReport]) -> Result<(), BenchError> {
        let mut csv = String::from(BlobReport::CSV_HEADER);
        for r in reports {
            csv.push_str(&r.csv_row());
        }
        let p = self.opts.out.join(format!("{name}.csv"));
        write_file(&p, csv.as_bytes())?;
        self.written.push(p);
        let p = self.opts.out.join(format!("{name}.json"));
        let json = serde_json::to_string_pretty(reports).unwrap_or_default();
        write_file(&p, json.as_bytes())?;
        self.written.push(p);
        Ok(())
    }

    fn plot(&mut self, name: &str, axes: XyAxes, series: Vec<XySeries>) -> Result<(), BenchError> {
        let base = self.opts.out.join(name);
        self.written.extend(plot::xy_lines(&base, &axes, &series)?);
        Ok(())
    }

    fn check_verified(&mut self, reports: &[BlobReport]) {
        for r in reports {
            if r.verified != r.completed || !r.errors.is_empty() {
                (self.progress)(&format!(
                    "WARNING {}: {} completed, {} verified, errors {:?} {:?}",
                    r.label, r.completed, r.verified, r.errors, r.verify_failures
                ));
            }
        }
    }
}

/// The object service's settings of a run: MD5 ETags off (the benchmark checks BLAKE3; MD5
/// would cost a core), everything else the defaults but `f`.
fn blob(f: impl FnOnce(&mut BlobConfig)) -> BlobConfig {
    let mut b = BlobConfig {
        md5_etag: false,
        ..BlobConfig::default()
    };
    f(&mut b);
    b
}

/// A disk that only throttles writes (uploads' disk-bound regime).
fn write_disk() -> DiskConfig {
    DiskConfig {
        read_bytes_per_sec: None,
        ..DiskConfig::disk_2006()
    }
}

/// Bytes per object for a run of `transfers` expected to move `rate` MB/s in total for
/// `seconds`, a multiple of `chunk` between `min` and `max`.
fn sized(rate_mb_s: f64, seconds: f64, transfers: u64, chunk: u64, min: u64, max: u64) -> u64 {
    let per = (rate_mb_s * 1e6 * seconds / transfers.max(1) as f64) as u64;
    per.clamp(min, max).div_ceil(chunk) * chunk
}

/// Meridian's socket-buffer rule (spec §6): max(256 KiB, 2 × bandwidth × RTT).
pub fn auto_buffer(link: &LinkSpec) -> usize {
    let bdp = link
        .bandwidth
        .map_or(0.0, |b| b as f64 * link.rtt.as_secs_f64());
    (256 << 10).max((2.0 * bdp) as usize)
}

fn mb(x: f64) -> String {
    format!("{x:.2} MB/s")
}

fn net_name(t: Topology, l: &LinkSpec) -> String {
    match t {
        Topology::Lan => "LAN".into(),
        _ => format!("WAN {} ms", l.rtt.as_millis()),
    }
}

/// Runs the study; returns the files written.
pub async fn run_study(
    opts: &StudyOptions,
    progress: Progress<'_>,
) -> Result<Vec<PathBuf>, BenchError> {
    let want = |id: &str| opts.only.is_empty() || opts.only.iter().any(|o| o == id);
    for o in &opts.only {
        if !EXPERIMENTS.contains(&o.as_str()) {
            return Err(BenchError::InvalidDesign {
                reason: format!("unknown experiment `{o}`: use {}", EXPERIMENTS.join(", ")),
            });
        }
    }
    let started = std::time::Instant::now();
    let mut ctx = Ctx {
        opts,
        progress,
        rows: Vec::new(),
        sections: Vec::new(),
        written: Vec::new(),
    };
    // E4 first: its memory figures are cleanest in a process that has not run anything yet.
    if want("e4") {
        e4(&mut ctx).await?;
    }
    if want("e2") {
        e2(&mut ctx).await?;
    }
    if want("e5") {
        e5(&mut ctx).await?;
    }
    if want("e6") {
        e6(&mut ctx).await?;
    }
    if want("e7") {
        e7(&mut ctx).await?;
    }
    if want("e1") {
        e1(&mut ctx).await?;
    }
    if want("e3") {
        e3(&mut ctx).await?;
    }
    if want("bench") {
        bench(&mut ctx).await?;
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Large objects: the GridFS study's shapes on Meridian (generated)\n\n\
         Scale `{:?}`, seed {}, {:.0} s wall clock. Throughputs in MB/s = 10^6 bytes/s. Every \
         transferred object was verified at the end (BLAKE3 of the manifest and of the bytes \
         read back, or every byte of a download); a run that did not verify is flagged.\n",
        opts.scale,
        opts.seed,
        started.elapsed().as_secs_f64()
    );
    md.push_str(
        "## Side by side\n\n| # | what | study | Meridian | shape |\n|---|---|---|---|---|\n",
    );
    for r in &ctx.rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.id,
            r.what,
            r.study,
            r.meridian,
            match r.matches {
                Some(true) => "✓",
                Some(false) => "✗",
                None => "–",
            }
        );
    }
    for s in &ctx.sections {
        md.push('\n');
        md.push_str(s);
    }
    let p = opts.out.join("summary.md");
    write_file(&p, md.as_bytes())?;
    ctx.written.push(p);
    let p = opts.out.join("rows.json");
    write_file(
        &p,
        serde_json::to_string_pretty(&ctx.rows)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    ctx.written.push(p);
    Ok(ctx.written)
}

// ----- E1: socket buffer ---------------------------------------------------------------------

async fn e1(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let scale = ctx.scale();
    let buffers: [(u64, &str); 4] = [
        (4 * KIB, "4 KiB"),
        (128 * KIB, "128 KiB"),
        (700_000, "700 KB"),
        (2 * MIB, "2 MiB"),
    ];
    let mut nets = vec![
        (Topology::Lan, LinkSpec::lan()),
        (Topology::Wan, LinkSpec::wan(Duration::from_millis(10))),
    ];
    if scale != Scale::Quick {
        nets.push((Topology::Wan, LinkSpec::wan(Duration::from_millis(100))));
    }
    let concurrency: Vec<(u32, u32)> = if scale == Scale::Quick {
        vec![(1, 1), (6, 8)]
    } else {
        vec![(1, 1), (6, 1), (6, 8)]
    };
    let disk = write_disk();
    let disk_mb = disk.write_bytes_per_sec.unwrap_or(0) as f64 / 1e6;
    let chunk = 64 * KIB;
    let mut reports = Vec::new();
    let mut table = String::from(
        "## E1: socket buffer\n\nUploads client → server (N = 1 on the server), 64 KiB chunks, 64 in \
         flight per transfer, the server's disk 28 MB/s (writes). MB/s aggregate:\n\n| network | \
         clients × threads |",
    );
    for (_, b) in &buffers {
        let _ = write!(table, " {b} |");
    }
    table.push_str("\n|---|---|---|---|---|---|\n");
    for (topology, link) in &nets {
        for &(clients, threads) in &concurrency {
            let _ = write!(
                table,
                "| {} | {clients} × {threads} |",
                net_name(*topology, link)
            );
            for &(buffer, bname) in &buffers {
                let transfers = u64::from(clients * threads);
                let per_stream = (buffer as f64 / link.rtt.as_secs_f64() / 1e6)
                    .min(link.bandwidth.unwrap_or(u64::MAX) as f64 / 1e6);
                let app = 64.0 * chunk as f64 / link.rtt.as_secs_f64() / 1e6;
                let rate = (per_stream.min(app) * transfers as f64).min(disk_mb);
                let size = sized(rate, scale.seconds(), transfers, chunk, 2 * chunk, 64 * MIB);
                let cfg = BlobBenchConfig {
                    cluster: ClusterOptions {
                        topology: *topology,
                        link: link.clone(),
                        placement: PlacementMode::Remote,
                        store: StoreKind::Mem,
                        files_dir: ctx.opts.tmp.clone(),
                        disk: Some(disk.clone()),
                        blob: blob(|b| {
                            b.chunk_size = chunk as u32;
                            b.window = 64;
                            b.prefetch = 64;
                            b.threshold = 0;
                        }),
                        bulk_buffer: Some(buffer as usize),
                        seed: ctx.opts.seed,
                    },
                    op: Op::Put,
                    object_size: size,
                    clients,
                    threads,
                    seed: ctx.opts.seed,
                    ..BlobBenchConfig::default()
                };
                let label = format!(
                    "e1 {} {clients}x{threads} buffer {bname}",
                    net_name(*topology, link)
                );
                let r = ctx.run(&cfg, &label).await?;
                let _ = write!(table, " {:.2} |", r.throughput_mb_s);
                reports.push(r);
            }
            table.push('\n');
        }
    }
    ctx.check_verified(&reports);
    ctx.save("e1_socket_buffer", &reports)?;
    // Plot: per network and concurrency, MB/s against the buffer (log2 KiB).
    let mut series = Vec::new();
    let mut i = 0;
    for (topology, link) in &nets {
        for &(c, t) in &concurrency {
            let points = buffers
                .iter()
                .enumerate()
                .map(|(j, (b, _))| {
                    (
                        (*b as f64 / 1024.0).log2(),
                        reports[i * buffers.len() + j].throughput_mb_s,
                    )
                })
                .collect();
            series.push(XySeries {
                label: format!("{} {c}×{t}", net_name(*topology, link)),
                points,
            });
            i += 1;
        }
    }
    ctx.plot(
        "e1_socket_buffer",
        XyAxes {
            title: "E1: socket buffer (uploads, disk 28 MB/s)".into(),
            x_desc: "log2(buffer / KiB)".into(),
            y_desc: "MB/s".into(),
            log_y: true,
            markers: Vec::new(),
        },
        series,
    )?;
    // Rows: 1×1 small vs large buffer on the LAN and the slowest WAN; the highest concurrency.
    let find = |net: &str, c: (u32, u32), b: &str| {
        reports
            .iter()
            .find(|r| r.label == format!("e1 {net} {}x{} buffer {b}", c.0, c.1))
            .map_or(0.0, |r| r.throughput_mb_s)
    };
    let wan = nets
        .last()
        .map(|(t, l)| net_name(*t, l))
        .unwrap_or_default();
    let hi = *concurrency.last().unwrap_or(&(1, 1));
    let (lan_s, lan_l) = (find("LAN", (1, 1), "4 KiB"), find("LAN", (1, 1), "2 MiB"));
    let (wan_s, wan_l) = (find(&wan, (1, 1), "4 KiB"), find(&wan, (1, 1), "2 MiB"));
    let (hi_s, hi_l) = (find("LAN", hi, "4 KiB"), find("LAN", hi, "2 MiB"));
    let lan_ratio = lan_s / lan_l.max(1e-9);
    let wan_ratio = wan_s / wan_l.max(1e-9);
    let hi_ratio = hi_s / hi_l.max(1e-9);
    ctx.row(
        "E1",
        "1×1, 4 KiB vs 2 MiB buffer",
        "4 KB cripples 1×1, even on the LAN, much more on the WAN",
        format!(
            "LAN {} vs {} ({:.0} %); {wan} {} vs {} ({:.1} %)",
            mb(lan_s),
            mb(lan_l),
            lan_ratio * 100.0,
            mb(wan_s),
            mb(wan_l),
            wan_ratio * 100.0
        ),
        Some(lan_ratio < 0.9 && wan_ratio < lan_ratio),
    );
    ctx.row(
        "E1",
        &format!("LAN {}×{}, 4 KiB vs 2 MiB buffer", hi.0, hi.1),
        "hardly matters at high concurrency (disk-bound)",
        format!("{} vs {} ({:.0} %)", mb(hi_s), mb(hi_l), hi_ratio * 100.0),
        Some(hi_ratio > 0.8),
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- E2: chunk size ------------------------------------------------------------------------

async fn e2(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let scale = ctx.scale();
    let chunks: [u64; 6] = [16 * KIB, 32 * KIB, 64 * KIB, 128 * KIB, 512 * KIB, MIB];
    let mut nets = vec![(Topology::Wan, LinkSpec::wan(Duration::from_millis(100)))];
    if scale == Scale::Full {
        nets.push((Topology::Lan, LinkSpec::lan()));
    }
    let concurrency = [(1u32, 1u32), (6, 8)];
    let disk = write_disk();
    let disk_mb = disk.write_bytes_per_sec.unwrap_or(0) as f64 / 1e6;
    let mut reports = Vec::new();
    let mut table = String::from(
        "## E2: chunk size (the study's block size per remote call)\n\nUploads client → server \
         (N = 1 on the server), 4 chunks in flight per transfer (`blob.window`), the server's \
         disk 28 MB/s (writes), no socket-buffer cap. MB/s aggregate:\n\n| network | clients × \
         threads | 16 KiB | 32 KiB | 64 KiB | 128 KiB | 512 KiB | 1 MiB |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (topology, link) in &nets {
        for &(clients, threads) in &concurrency {
            let _ = write!(
                table,
                "| {} | {clients} × {threads} |",
                net_name(*topology, link)
            );
            for &cs in &chunks {
                let transfers = u64::from(clients * threads);
                let window = 4.0 * cs as f64 / link.rtt.as_secs_f64() / 1e6;
                let rate = (window * transfers as f64).min(disk_mb);
                let size = sized(rate, scale.seconds(), transfers, cs, 2 * MIB, 256 * MIB);
                let cfg = BlobBenchConfig {
                    cluster: ClusterOptions {
                        topology: *topology,
                        link: link.clone(),
                        placement: PlacementMode::Remote,
                        store: StoreKind::Mem,
                        files_dir: ctx.opts.tmp.clone(),
                        disk: Some(disk.clone()),
                        blob: blob(|b| b.chunk_size = cs as u32),
                        bulk_buffer: None,
                        seed: ctx.opts.seed,
                    },
                    op: Op::Put,
                    object_size: size,
                    clients,
                    threads,
                    seed: ctx.opts.seed,
                    ..BlobBenchConfig::default()
                };
                let label = format!(
                    "e2 {} {clients}x{threads} chunk {} KiB",
                    net_name(*topology, link),
                    cs / KIB
                );
                let r = ctx.run(&cfg, &label).await?;
                let _ = write!(table, " {:.2} |", r.throughput_mb_s);
                reports.push(r);
            }
            table.push('\n');
        }
    }
    ctx.check_verified(&reports);
    ctx.save("e2_chunk_size", &reports)?;
    let mut series = Vec::new();
    for (i, group) in reports.chunks(chunks.len()).enumerate() {
        let (topology, link) = &nets[i / concurrency.len()];
        let (c, t) = concurrency[i % concurrency.len()];
        series.push(XySeries {
            label: format!("{} {c}×{t}", net_name(*topology, link)),
            points: group
                .iter()
                .map(|r| {
                    (
                        (f64::from(r.config.cluster.blob.chunk_size) / 1024.0).log2(),
                        r.throughput_mb_s,
                    )
                })
                .collect(),
        });
    }
    ctx.plot(
        "e2_chunk_size",
        XyAxes {
            title: "E2: chunk size (uploads over the WAN, disk 28 MB/s)".into(),
            x_desc: "log2(chunk / KiB)".into(),
            y_desc: "MB/s".into(),
            log_y: true,
            markers: Vec::new(),
        },
        series,
    )?;
    let one = &reports[..chunks.len()];
    let many = &reports[chunks.len()..2 * chunks.len()];
    let best_one = one.iter().map(|r| r.throughput_mb_s).fold(0.0, f64::max);
    let increasing = one
        .windows(2)
        .all(|w| w[1].throughput_mb_s >= w[0].throughput_mb_s * 0.9);
    let many_best = many.iter().map(|r| r.throughput_mb_s).fold(0.0, f64::max);
    ctx.row(
        "E2",
        "1×1 over the WAN, 16 KiB → 1 MiB chunks",
        "bigger is better up to 1 MB, which reached the disk limit",
        format!(
            "{} → {} (best {})",
            mb(one[0].throughput_mb_s),
            mb(one[chunks.len() - 1].throughput_mb_s),
            mb(best_one)
        ),
        Some(increasing && one[chunks.len() - 1].throughput_mb_s > 3.0 * one[0].throughput_mb_s),
    );
    ctx.row(
        "E2",
        "6×8 over the WAN, 32 KiB vs the best chunk size",
        "32 KB is already good with many concurrent transfers",
        format!(
            "{} vs {} ({:.0} %)",
            mb(many[1].throughput_mb_s),
            mb(many_best),
            many[1].throughput_mb_s / many_best.max(1e-9) * 100.0
        ),
        Some(many[1].throughput_mb_s >= 0.8 * many_best),
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- E3: streams per object ----------------------------------------------------------------

async fn e3(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let scale = ctx.scale();
    let streams = [1u32, 2, 4, 8];
    let nets = [
        (Topology::Lan, LinkSpec::lan()),
        (Topology::Wan, LinkSpec::wan(Duration::from_millis(100))),
    ];
    let buffer = 700_000usize;
    let size = match scale {
        Scale::Quick => 40 * MIB,
        Scale::Default => 64 * MIB,
        Scale::Full => 256 * MIB,
    };
    let mut reports = Vec::new();
    let mut table = format!(
        "## E3: streams per object\n\nOne {} MiB object, 1 × 1; a socket buffer of 700 KB per \
         bulk stream; uploads send one chunk-aligned byte range per stream (the HTTP API's \
         `Content-Range` parts) and are stored on both nodes (W = all, \
         so the completion reads local copies), downloads are range reads of an object stored \
         only on the server. No disk model. MB/s:\n\n| network | op | 1 | 2 | 4 | 8 |\n\
         |---|---|---|---|---|---|\n",
        size / MIB
    );
    for (topology, link) in &nets {
        for op in [Op::Put, Op::Get] {
            let _ = write!(table, "| {} | {op:?} |", net_name(*topology, link));
            for &s in &streams {
                let cfg = BlobBenchConfig {
                    cluster: ClusterOptions {
                        topology: *topology,
                        link: link.clone(),
                        placement: if op == Op::Put {
                            PlacementMode::Both
                        } else {
                            PlacementMode::Remote
                        },
                        store: StoreKind::Mem,
                        files_dir: ctx.opts.tmp.clone(),
                        disk: None,
                        blob: blob(|_| {}),
                        bulk_buffer: Some(buffer),
                        seed: ctx.opts.seed,
                    },
                    op,
                    object_size: size,
                    streams: s,
                    clients: 1,
                    threads: 1,
                    seed: ctx.opts.seed,
                    ..BlobBenchConfig::default()
                };
                let label = format!("e3 {} {op:?} streams {s}", net_name(*topology, link));
                let r = ctx.run(&cfg, &label).await?;
                let _ = write!(table, " {:.2} |", r.throughput_mb_s);
                reports.push(r);
            }
            table.push('\n');
        }
    }
    ctx.check_verified(&reports);
    ctx.save("e3_streams", &reports)?;
    let series = reports
        .chunks(streams.len())
        .map(|g| XySeries {
            label: format!(
                "{} {:?}",
                net_name(g[0].config.cluster.topology, &g[0].config.cluster.link),
                g[0].config.op
            ),
            points: g
                .iter()
                .map(|r| (f64::from(r.config.streams), r.throughput_mb_s))
                .collect(),
        })
        .collect();
    ctx.plot(
        "e3_streams",
        XyAxes {
            title: "E3: streams per object (700 KB socket buffer)".into(),
            x_desc: "streams".into(),
            y_desc: "MB/s".into(),
            log_y: false,
            markers: Vec::new(),
        },
        series,
    )?;
    let gain =
        |g: &[BlobReport]| g[streams.len() - 1].throughput_mb_s / g[0].throughput_mb_s.max(1e-9);
    let lan_put = gain(&reports[0..4]);
    let lan_get = gain(&reports[4..8]);
    let wan_put = gain(&reports[8..12]);
    let wan_get = gain(&reports[12..16]);
    ctx.row(
        "E3",
        "8 streams vs 1, LAN (put / get)",
        "no significant difference on the LAN",
        format!("×{lan_put:.2} / ×{lan_get:.2}"),
        Some(lan_put < 1.5 && lan_get < 1.5),
    );
    ctx.row(
        "E3",
        "8 streams vs 1, WAN 100 ms, upload (a byte range per stream)",
        "expected to help on high-latency links (untested there)",
        format!("×{wan_put:.2}"),
        Some(wan_put > 2.0),
    );
    ctx.row(
        "E3",
        "8 streams vs 1, WAN 100 ms, download (range reads)",
        "expected to help on high-latency links (untested there)",
        format!("×{wan_get:.2}"),
        Some(wan_get > 2.0),
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- E4: concurrent transfers --------------------------------------------------------------

async fn e4(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let scale = ctx.scale();
    let size = match scale {
        Scale::Full => 8 * MIB,
        _ => 2 * MIB,
    };
    let cluster = |queue: usize| ClusterOptions {
        topology: Topology::Local,
        link: LinkSpec::lan(),
        placement: PlacementMode::Remote,
        store: StoreKind::Files,
        files_dir: ctx.opts.tmp.clone(),
        disk: None,
        blob: blob(|b| {
            b.max_active_transfers = 480;
            b.max_queued = queue;
            b.queue_timeout_ms = 120_000;
        }),
        bulk_buffer: None,
        seed: ctx.opts.seed,
    };
    let mut reports = Vec::new();
    // 768 first (see `run_study`), then the others; the table is in level order.
    for threads in [128u32, 1, 8, 16, 32] {
        let cfg = BlobBenchConfig {
            cluster: cluster(1024),
            op: Op::Put,
            object_size: size,
            clients: 6,
            threads,
            seed: ctx.opts.seed,
            ..BlobBenchConfig::default()
        };
        let r = ctx.run(&cfg, &format!("e4 6x{threads} queue 1024")).await?;
        reports.push(r);
    }
    let cfg = BlobBenchConfig {
        cluster: cluster(0),
        op: Op::Put,
        object_size: size,
        clients: 6,
        threads: 128,
        seed: ctx.opts.seed,
        ..BlobBenchConfig::default()
    };
    let r0 = ctx.run(&cfg, "e4 6x128 queue 0").await?;
    reports.push(r0.clone());
    let big = reports[0].clone();
    reports[..5].sort_by_key(|r| r.config.threads);
    ctx.check_verified(&reports);
    ctx.save("e4_concurrency", &reports)?;
    let mib =
        |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.0} MiB", b as f64 / MIB as f64));
    let mut table = format!(
        "## E4: concurrent transfers\n\nUploads of {} MiB objects to one node (file chunk store), \
         limits 480 active and a queue of 1024 (queue timeout 120 s), every thread starting at \
         once. Memory: the process's resident set (`VmRSS` sampled every 10 ms, and `VmHWM` reset \
         at the start); the bound to compare with is max_inflight_bytes + 64 MiB = {} MiB.\n\n\
         | clients × threads | transfers | completed | verified | rejected | other errors | peak \
         active | peak queued | MB/s | p50 / p99 ms | RSS before | RSS peak | peak in flight |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        size / MIB,
        (BlobConfig::default().max_inflight_bytes + 64 * MIB) / MIB
    );
    for r in &reports {
        let _ = writeln!(
            table,
            "| {} × {} (queue {}) | {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.0} / {:.0} | {} | {} | {} |",
            r.config.clients,
            r.config.threads,
            r.config.cluster.blob.max_queued,
            r.transfers,
            r.completed,
            r.verified,
            r.rejected,
            r.errors.values().sum::<u64>(),
            r.peak_active,
            r.peak_queued,
            r.throughput_mb_s,
            r.latency_ms.p50,
            r.latency_ms.p99,
            mib(r.memory.rss_before),
            mib(r.memory.rss_peak_sampled.max(r.memory.rss_hwm)),
            mib(Some(r.memory.peak_inflight_bytes)),
        );
    }
    ctx.row(
        "E4",
        "6 × 128 = 768 uploads, 480 active, queue 1024",
        "all 768 complete and validate; 480 at once, the rest queued",
        format!(
            "{}/{} completed, {} verified; peak {} active, {} queued",
            big.completed, big.transfers, big.verified, big.peak_active, big.peak_queued
        ),
        Some(big.all_verified() && big.peak_active <= 480),
    );
    ctx.row(
        "E4",
        "768 uploads, queue 0",
        "failures only TooManyTransfers (JacORB: TRANSIENT)",
        format!(
            "{} completed and verified {}, {} TooManyTransfers, {} other",
            r0.completed,
            r0.verified,
            r0.rejected,
            r0.errors.values().sum::<u64>()
        ),
        Some(r0.errors.is_empty() && r0.verified == r0.completed && r0.rejected > 0),
    );
    let bound = BlobConfig::default().max_inflight_bytes + 64 * MIB;
    let peak = big
        .memory
        .rss_peak_sampled
        .max(big.memory.rss_hwm)
        .unwrap_or(0);
    let growth = peak.saturating_sub(big.memory.rss_before.unwrap_or(0));
    ctx.row(
        "E4",
        "peak RSS, 768 concurrent uploads",
        "[M] ≤ max_inflight_bytes + 64 MiB",
        format!(
            "{} peak ({} above the start) vs {} MiB",
            mib(Some(peak)),
            mib(Some(growth)),
            bound / MIB
        ),
        Some(peak <= bound),
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- E5: random access ---------------------------------------------------------------------

async fn e5(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let scale = ctx.scale();
    let size = match scale {
        Scale::Quick => 128 * MIB,
        _ => 1 << 30,
    };
    let blocks = [32 * KIB, 512 * KIB];
    let (mem_budget, disk_budget) = match scale {
        Scale::Quick => (
            Budget {
                seconds: 1.0,
                max_reads: 20_000,
            },
            Budget {
                seconds: 2.0,
                max_reads: 2_000,
            },
        ),
        Scale::Default => (
            Budget {
                seconds: 2.0,
                max_reads: 50_000,
            },
            Budget {
                seconds: 4.0,
                max_reads: 5_000,
            },
        ),
        Scale::Full => (
            Budget {
                seconds: 10.0,
                max_reads: 500_000,
            },
            Budget {
                seconds: 20.0,
                max_reads: 50_000,
            },
        ),
    };
    let seed = ctx.opts.seed;
    let content = Content::new(meridian_core::splitmix64(seed ^ 0xe5), size);
    let disk = DiskConfig::disk_2006();
    let mut reports: Vec<RandomReport> = Vec::new();
    (ctx.progress)(&format!("e5: writing the {} MiB baseline file", size / MIB));
    let path = ctx
        .opts
        .tmp
        .join(format!("meridian-e5-{}.dat", std::process::id()));
    {
        let (p, c) = (path.clone(), content);
        tokio::task::spawn_blocking(move || random::write_file(&p, &c))
            .await
            .map_err(|e| BenchError::Target {
                reason: e.to_string(),
            })??;
    }
    let r = async {
        for model in [false, true] {
            let (p, c, d, b) = (
                path.clone(),
                content,
                model.then(|| disk.clone()),
                if model { disk_budget } else { mem_budget },
            );
            (ctx.progress)(&format!("e5: pread baseline, disk model {model}"));
            let base = tokio::task::spawn_blocking(move || {
                random::pread_reads(&p, &c, &blocks, b, d.as_ref(), seed)
            })
            .await
            .map_err(|e| BenchError::Target {
                reason: e.to_string(),
            })??;
            reports.extend(base);
        }
        for cs in [MIB as u32, 64 * KIB as u32] {
            for model in [false, true] {
                (ctx.progress)(&format!(
                    "e5: Meridian, {} KiB chunks, disk model {model}",
                    cs / 1024
                ));
                let opts = ClusterOptions {
                    topology: Topology::Local,
                    store: StoreKind::Mem,
                    files_dir: ctx.opts.tmp.clone(),
                    disk: model.then(|| disk.clone()),
                    blob: blob(|_| {}),
                    seed,
                    ..ClusterOptions::default()
                };
                let rs = random::meridian_reads(
                    opts,
                    content,
                    cs,
                    &blocks,
                    if model { disk_budget } else { mem_budget },
                    seed,
                )
                .await?;
                reports.extend(rs);
            }
        }
        Ok::<_, BenchError>(())
    }
    .await;
    let _ = std::fs::remove_file(&path);
    r?;
    // Files.
    let mut csv = String::from(
        "reader,chunk_size,block,disk_model,reads,verified,failed,seconds,throughput_mb_s,p50_ms,p99_ms,seeks\n",
    );
    for r in &reports {
        let _ = writeln!(
            csv,
            "{:?},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{}",
            r.reader,
            r.chunk_size.map_or(String::new(), |c| c.to_string()),
            r.block,
            r.disk_model,
            r.reads,
            r.verified,
            r.failed,
            r.seconds,
            r.throughput_mb_s,
            r.latency_ms.p50,
            r.latency_ms.p99,
            r.disk
                .as_ref()
                .map_or(String::new(), |d| d.seeks.to_string())
        );
    }
    let p = ctx.opts.out.join("e5_random_access.csv");
    write_file(&p, csv.as_bytes())?;
    ctx.written.push(p);
    let p = ctx.opts.out.join("e5_random_access.json");
    write_file(
        &p,
        serde_json::to_string_pretty(&reports)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    ctx.written.push(p);
    let find = |reader: Reader, cs: Option<u32>, block: u64, model: bool| {
        reports
            .iter()
            .find(|r| {
                r.reader == reader
                    && r.chunk_size == cs
                    && r.block == block
                    && r.disk_model == model
            })
            .map_or(0.0, |r| r.throughput_mb_s)
    };
    let name = |reader: Reader, cs: Option<u32>| match (reader, cs) {
        (Reader::Pread, _) => "pread (baseline)".to_owned(),
        (Reader::Meridian, Some(c)) => format!("Meridian, {} KiB chunks", c / 1024),
        (Reader::Meridian, None) => "Meridian".to_owned(),
    };
    let mut table = format!(
        "## E5: random access\n\nRandom block-aligned reads of a {} MiB object, one at a time: \
         through the object service (one pinned version, a range read per block) and with \
         `pread(2)` on a plain file of the same bytes. Two regimes: **memory** (the chunk store \
         in RAM, the file in the page cache) and **disk model** (both behind the same model: \
         28 MB/s, 12 ms per seek; Meridian reads whole chunks). MB/s:\n\n| reader | regime | \
         32 KiB | 512 KiB | 512/32 | vs pread (32 / 512) |\n|---|---|---|---|---|---|\n",
        size / MIB
    );
    let readers = [
        (Reader::Pread, None),
        (Reader::Meridian, Some(MIB as u32)),
        (Reader::Meridian, Some(64 * KIB as u32)),
    ];
    let mut series = Vec::new();
    for model in [false, true] {
        for &(reader, cs) in &readers {
            let a = find(reader, cs, blocks[0], model);
            let b = find(reader, cs, blocks[1], model);
            let pa = find(Reader::Pread, None, blocks[0], model);
            let pb = find(Reader::Pread, None, blocks[1], model);
            let _ = writeln!(
                table,
                "| {} | {} | {a:.2} | {b:.2} | ×{:.1} | {:.0} % / {:.0} % |",
                name(reader, cs),
                if model { "disk model" } else { "memory" },
                b / a.max(1e-9),
                a / pa.max(1e-9) * 100.0,
                b / pb.max(1e-9) * 100.0
            );
            if model {
                series.push(XySeries {
                    label: name(reader, cs),
                    points: vec![(32.0, a), (512.0, b)],
                });
            }
        }
    }
    ctx.plot(
        "e5_random_access",
        XyAxes {
            title: "E5: random reads behind the disk model".into(),
            x_desc: "block KiB".into(),
            y_desc: "MB/s".into(),
            log_y: true,
            markers: Vec::new(),
        },
        series,
    )?;
    let verified: u64 = reports.iter().map(|r| r.verified).sum();
    let failed: u64 = reports.iter().map(|r| r.failed).sum();
    let _ = writeln!(table, "\n{verified} block reads verified, {failed} failed.");
    let (p32, p512) = (
        find(Reader::Pread, None, blocks[0], true),
        find(Reader::Pread, None, blocks[1], true),
    );
    let (m32, m512) = (
        find(Reader::Meridian, Some(64 * KIB as u32), blocks[0], true),
        find(Reader::Meridian, Some(64 * KIB as u32), blocks[1], true),
    );
    let (d32, d512) = (
        find(Reader::Meridian, Some(MIB as u32), blocks[0], true),
        find(Reader::Meridian, Some(MIB as u32), blocks[1], true),
    );
    ctx.row(
        "E5",
        "32 → 512 KiB blocks, disk model (pread / Meridian 64 KiB chunks / Meridian 1 MiB chunks)",
        "≈ 6×: GridFS 2.43 → 15.14, NFS 3.14 → 20.33",
        format!(
            "{p32:.2} → {p512:.2} (×{:.1}) / {m32:.2} → {m512:.2} (×{:.1}) / {d32:.2} → {d512:.2} (×{:.1})",
            p512 / p32.max(1e-9),
            m512 / m32.max(1e-9),
            d512 / d32.max(1e-9)
        ),
        Some((4.0..10.0).contains(&(m512 / m32.max(1e-9)))),
    );
    ctx.row(
        "E5",
        "Meridian (64 KiB chunks) vs the baseline, disk model, 32 / 512 KiB",
        "GridFS ≈ 25 % slower than NFS (77 % / 74 %)",
        format!(
            "{:.0} % / {:.0} %",
            m32 / p32.max(1e-9) * 100.0,
            m512 / p512.max(1e-9) * 100.0
        ),
        Some(m32 >= 0.75 * p32 && m512 >= 0.75 * p512),
    );
    let (c32, c512) = (
        find(Reader::Meridian, Some(MIB as u32), blocks[0], false),
        find(Reader::Meridian, Some(MIB as u32), blocks[1], false),
    );
    let (q32, q512) = (
        find(Reader::Pread, None, blocks[0], false),
        find(Reader::Pread, None, blocks[1], false),
    );
    ctx.row(
        "E5",
        "memory regime (1 MiB chunks vs pread from the page cache), 32 / 512 KiB",
        "(not measured by the study)",
        format!("{c32:.0} vs {q32:.0} / {c512:.0} vs {q512:.0} MB/s"),
        None,
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- E6: parallel reads, disk-bound --------------------------------------------------------

async fn e6(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let size = match ctx.scale() {
        Scale::Quick => 8 * MIB,
        Scale::Default => 32 * MIB,
        Scale::Full => 128 * MIB,
    };
    let cluster = ClusterOptions {
        topology: Topology::Local,
        store: StoreKind::Mem,
        files_dir: ctx.opts.tmp.clone(),
        disk: Some(DiskConfig::disk_2006()),
        blob: blob(|_| {}),
        seed: ctx.opts.seed,
        ..ClusterOptions::default()
    };
    let seq = BlobBenchConfig {
        cluster: cluster.clone(),
        op: Op::Get,
        object_size: size,
        clients: 1,
        threads: 1,
        transfers_per_thread: 4,
        seed: ctx.opts.seed,
        ..BlobBenchConfig::default()
    };
    let par = BlobBenchConfig {
        threads: 4,
        transfers_per_thread: 1,
        ..seq.clone()
    };
    let a = ctx.run(&seq, "e6 4 objects one after another").await?;
    let b = ctx.run(&par, "e6 4 objects at once").await?;
    let reports = vec![a.clone(), b.clone()];
    ctx.check_verified(&reports);
    ctx.save("e6_parallel_reads", &reports)?;
    let seeks = |r: &BlobReport| r.disk.as_ref().map_or(0, |d| d.seeks);
    let table = format!(
        "## E6: parallel reads, disk-bound\n\nDownloads of 4 objects of {} MiB from one node whose \
         store is behind the disk model (28 MB/s, 12 ms per seek, 128 KiB read-ahead segments): \
         one after another, then all at once.\n\n| | MB/s aggregate | seeks | p50 ms |\n|---|---|---|---|\n\
         | sequential | {:.2} | {} | {:.0} |\n| 4 at once | {:.2} | {} | {:.0} |\n",
        size / MIB,
        a.throughput_mb_s,
        seeks(&a),
        a.latency_ms.p50,
        b.throughput_mb_s,
        seeks(&b),
        b.latency_ms.p50
    );
    ctx.row(
        "E6",
        "4 files read one after another vs at once (aggregate)",
        "28.44 → 7.46 MB/s (×0.26)",
        format!(
            "{} → {} (×{:.2})",
            mb(a.throughput_mb_s),
            mb(b.throughput_mb_s),
            b.throughput_mb_s / a.throughput_mb_s.max(1e-9)
        ),
        Some(b.throughput_mb_s < 0.5 * a.throughput_mb_s),
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- E7: staggered vs synchronized starts --------------------------------------------------

async fn e7(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let (threads, over) = match ctx.scale() {
        Scale::Quick => (8u32, 10.0),
        Scale::Default => (16, 30.0),
        Scale::Full => (32, 60.0),
    };
    let size = 4 * MIB;
    let cluster = ClusterOptions {
        topology: Topology::Local,
        store: StoreKind::Mem,
        files_dir: ctx.opts.tmp.clone(),
        disk: Some(write_disk()),
        // 16 chunks an object, 4 in flight: the disk's FIFO serves the transfers in turn, as
        // TCP connections share a link, rather than one whole object after another.
        blob: blob(|b| {
            b.chunk_size = 256 << 10;
            b.max_active_transfers = 480;
            b.max_queued = 1024;
        }),
        seed: ctx.opts.seed,
        ..ClusterOptions::default()
    };
    let sync = BlobBenchConfig {
        cluster,
        op: Op::Put,
        object_size: size,
        clients: 6,
        threads,
        seed: ctx.opts.seed,
        ..BlobBenchConfig::default()
    };
    let stag = BlobBenchConfig {
        start: StartMode::Staggered { over_s: over },
        ..sync.clone()
    };
    let a = ctx.run(&sync, "e7 synchronized").await?;
    let b = ctx
        .run(&stag, &format!("e7 staggered over {over} s"))
        .await?;
    let reports = vec![a.clone(), b.clone()];
    ctx.check_verified(&reports);
    ctx.save("e7_starts", &reports)?;
    // The time series, side by side.
    let mut csv = String::from("run,second,completions,completed_mb,peak_active,cpu_cores\n");
    for r in &reports {
        let s = &r.series;
        let n = s.completions.len().max(s.peak_active.len());
        for i in 0..n {
            let _ = writeln!(
                csv,
                "{},{i},{},{:.2},{},{:.2}",
                r.label,
                s.completions.get(i).copied().unwrap_or(0),
                s.completed_mb.get(i).copied().unwrap_or(0.0),
                s.peak_active.get(i).copied().unwrap_or(0),
                s.cpu_cores.get(i).copied().unwrap_or(0.0)
            );
        }
    }
    let p = ctx.opts.out.join("e7_timeseries.csv");
    write_file(&p, csv.as_bytes())?;
    ctx.written.push(p);
    let base = ctx.opts.out.join("e7_completions");
    ctx.written.extend(plot::throughput_over_time(
        &base,
        "E7: transfers completed per second",
        &[
            ThroughputSeries {
                label: "synchronized".into(),
                per_second: a.series.completions.clone(),
                measured: None,
            },
            ThroughputSeries {
                label: format!("staggered over {over} s"),
                per_second: b.series.completions.clone(),
                measured: None,
            },
        ],
    )?);
    let base = ctx.opts.out.join("e7_active");
    ctx.written.extend(plot::throughput_over_time(
        &base,
        "E7: transfers running (peak per second)",
        &[
            ThroughputSeries {
                label: "synchronized".into(),
                per_second: a.series.peak_active.clone(),
                measured: None,
            },
            ThroughputSeries {
                label: format!("staggered over {over} s"),
                per_second: b.series.peak_active.clone(),
                measured: None,
            },
        ],
    )?);
    let spike = |r: &BlobReport| {
        let max = r.series.completions.iter().copied().max().unwrap_or(0) as f64;
        // The busiest second against the run's mean rate.
        let mean = r.completed as f64 / r.elapsed_s.max(1.0);
        (max, max / mean.max(1e-9))
    };
    let (am, ar) = spike(&a);
    let (bm, br) = spike(&b);
    let table = format!(
        "## E7: synchronized vs staggered starts\n\n6 × {threads} uploads of 4 MiB (256 KiB chunks) \
         to one node whose disk writes 28 MB/s; all at once, or each thread at a uniform offset over {over} s. \
         Per-second series in `e7_timeseries.csv`, plotted in `e7_completions` and `e7_active`.\n\n\
         | start | completed | elapsed s | most completions in one second | ÷ the run's mean per second \
         | peak running |\n|---|---|---|---|---|---|\n| synchronized | {} | {:.1} | {am:.0} | {ar:.1} | \
         {} |\n| staggered | {} | {:.1} | {bm:.0} | {br:.1} | {} |\n",
        a.completed, a.elapsed_s, a.peak_active, b.completed, b.elapsed_s, b.peak_active
    );
    ctx.row(
        "E7",
        "most completions in one second (÷ mean)",
        "synchronized: a load spike as transfers end; staggered: none",
        format!("synchronized {am:.0} (×{ar:.1}); staggered {bm:.0} (×{br:.1})"),
        Some(ar > 2.0 * br),
    );
    ctx.sections.push(table);
    Ok(())
}

// ----- BENCHMARKS.md figures -----------------------------------------------------------------

async fn bench(ctx: &mut Ctx<'_>) -> Result<(), BenchError> {
    let size = match ctx.scale() {
        Scale::Quick => 64 * MIB,
        _ => 256 * MIB,
    };
    let link = LinkSpec {
        rtt: Duration::from_millis(40),
        bandwidth: Some(12_500_000),
    };
    let buffer = auto_buffer(&link);
    let mut reports = Vec::new();
    for (streams, placement) in [
        (4u32, PlacementMode::Both),
        (1, PlacementMode::Both),
        (1, PlacementMode::Remote),
    ] {
        let cfg = BlobBenchConfig {
            cluster: ClusterOptions {
                topology: Topology::Wan,
                link: link.clone(),
                placement,
                store: StoreKind::Mem,
                files_dir: ctx.opts.tmp.clone(),
                disk: None,
                blob: blob(|_| {}),
                bulk_buffer: Some(buffer),
                seed: ctx.opts.seed,
            },
            op: Op::Put,
            object_size: size,
            streams,
            clients: 1,
            threads: 1,
            seed: ctx.opts.seed,
            ..BlobBenchConfig::default()
        };
        let label = format!(
            "bench {} MiB upload, {streams} stream(s), {placement:?}",
            size / MIB
        );
        reports.push(ctx.run(&cfg, &label).await?);
    }
    ctx.check_verified(&reports);
    ctx.save("bench_link", &reports)?;
    let mut table = format!(
        "## BENCHMARKS: one upload over a 100 Mb/s, 40 ms RTT link\n\n2 DCs × 1 node, 20 ms one \
         way, 12.5 MB/s, socket buffer {} KiB (max(256 KiB, 2 × BDP)); the object is stored on \
         both nodes with W = all (`Both`) or only on the remote one (`Remote`).\n\n| upload | \
         MB/s | of the link | elapsed s | verified |\n|---|---|---|---|---|\n",
        buffer / 1024
    );
    for r in &reports {
        let _ = writeln!(
            table,
            "| {} | {:.2} | {:.0} % | {:.1} | {}/{} |",
            r.label,
            r.throughput_mb_s,
            r.link_fraction.unwrap_or(0.0) * 100.0,
            r.elapsed_s,
            r.verified,
            r.transfers
        );
    }
    let f = reports[0].link_fraction.unwrap_or(0.0);
    ctx.row(
        "bench",
        &format!("{} MiB upload, 4 streams, 100 Mb/s, 40 ms RTT", size / MIB),
        "[M] ≥ 80 % of the link",
        format!(
            "{:.2} MB/s = {:.0} % of 12.5 MB/s",
            reports[0].throughput_mb_s,
            f * 100.0
        ),
        Some(f >= 0.8),
    );
    ctx.sections.push(table);
    Ok(())
}

/// The default results directory of the study.
pub fn default_out() -> &'static Path {
    Path::new("experiments/large-objects/results")
}
