//! `meridian bench blob`: large-object transfers through the object service
//! ([`meridian_server::objects::Objects`]) of an in-process cluster ([`cluster`]), and the
//! GridFS study's experiments E1–E7 built from them ([`study`]; spec `large-objects.md`,
//! "Numbers to reproduce").
//!
//! One run ([`run`]):
//! - `clients × threads` tasks each make `transfers_per_thread` transfers one after another
//!   (uploads, or downloads of objects loaded first), all starting at once
//!   ([`StartMode::Synchronized`]) or each thread at a uniformly drawn offset over `T` seconds
//!   ([`StartMode::Staggered`], the study's fix for bursts).
//! - A transfer with `streams` > 1 is an upload by byte ranges (the HTTP API's `Content-Range`
//!   parts) of that many chunk-aligned parts sent at once, or that many range reads at once;
//!   each stream is one transfer for admission control.
//! - Every object's bytes are a pure function of its seed ([`content`]): uploads generate them
//!   as they go, downloads compare each received byte with them, and at the end every
//!   completed object is checked — its manifest's BLAKE3 against the expected one, and (for
//!   uploads) the whole object read back and hashed. The report counts what verified.
//! - A monitor samples the client node's admission control (active, queued), its bytes in
//!   flight every `sample_ms` on a thread of its own, the resident memory every 10 ms, and the
//!   CPU time per second.
//!
//! Failures are counted by kind; admission refusals are `too_many_transfers`, the only kind a
//! run with a full queue should see.

pub mod cluster;
pub mod content;
pub mod random;
pub mod study;
pub mod sys;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use meridian_blob::throttled::DiskStats;
use meridian_net::wan::WanStats;
use meridian_server::objects::{ObjectError, Objects};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::BenchError;
pub use cluster::{
    BUCKET, BlobCluster, ClusterOptions, LinkSpec, PlacementMode, StoreKind, Topology,
};
pub use content::Content;

/// What a transfer does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Upload (PUT, or an upload by byte ranges with streams > 1).
    Put,
    /// Download of an object loaded before the run (GET, or range reads with streams > 1).
    Get,
}

/// When the threads start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartMode {
    /// All at once.
    Synchronized,
    /// Each thread at an offset drawn uniformly from `[0, over_s)` seconds.
    Staggered {
        /// The spread, seconds.
        over_s: f64,
    },
}

/// One benchmark run's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlobBenchConfig {
    /// The cluster.
    pub cluster: ClusterOptions,
    /// Uploads or downloads.
    pub op: Op,
    /// Bytes per object.
    pub object_size: u64,
    /// Streams per object.
    pub streams: u32,
    /// Client machines (a label: every client talks to node 1).
    pub clients: u32,
    /// Threads per client.
    pub threads: u32,
    /// Transfers each thread makes, one after another.
    pub transfers_per_thread: u32,
    /// When threads start.
    pub start: StartMode,
    /// Bytes per body piece a client writes (an HTTP body frame).
    pub piece: usize,
    /// Seed of the objects' bytes and the start offsets.
    pub seed: u64,
    /// Monitor period, ms (admission figures; memory every 10 ms at most).
    pub sample_ms: u64,
}

impl Default for BlobBenchConfig {
    fn default() -> Self {
        BlobBenchConfig {
            cluster: ClusterOptions::default(),
            op: Op::Put,
            object_size: 8 << 20,
            streams: 1,
            clients: 1,
            threads: 4,
            transfers_per_thread: 1,
            start: StartMode::Synchronized,
            piece: 64 << 10,
            seed: 1,
            sample_ms: 1,
        }
    }
}

impl BlobBenchConfig {
    /// Checks the settings; the error names the setting.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |reason: String| Err(BenchError::InvalidDesign { reason });
        if self.object_size == 0 {
            return bad("--object-size must be at least 1 byte".into());
        }
        if self.streams == 0 || self.clients == 0 || self.threads == 0 {
            return bad("--streams, --clients and --threads must be at least 1".into());
        }
        if self.transfers_per_thread == 0 {
            return bad("--transfers-per-thread must be at least 1".into());
        }
        let cs = self.cluster.blob.chunk_size;
        if !(4096..=(8 << 20)).contains(&cs) {
            return bad(format!("--chunk-size must be 4 KiB ..= 8 MiB, not {cs}"));
        }
        if let StartMode::Staggered { over_s } = self.start
            && !(over_s.is_finite() && (0.0..=86_400.0).contains(&over_s))
        {
            return bad(format!("--stagger {over_s}: must be 0..=86400 seconds"));
        }
        if self.cluster.topology == Topology::Local && self.cluster.link.bandwidth.is_some() {
            // Harmless, but the report's link fraction would mean nothing.
        }
        Ok(())
    }

    /// The total number of transfers.
    pub fn transfers(&self) -> u64 {
        u64::from(self.clients) * u64::from(self.threads) * u64::from(self.transfers_per_thread)
    }

    /// The bytes of each stream's part (a whole number of chunks) and the number of streams
    /// that gives (fewer than asked when the object has fewer chunks).
    pub fn parts(&self) -> (u64, u32) {
        let cs = u64::from(self.cluster.blob.chunk_size);
        let size = self.object_size;
        if self.streams <= 1 {
            return (size, 1);
        }
        let part = (size.div_ceil(u64::from(self.streams)).div_ceil(cs) * cs).max(cs);
        (part, size.div_ceil(part) as u32)
    }
}

/// Latency percentiles of the transfers, milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |us: u64| us as f64 / 1e3;
        Percentiles {
            count: h.len(),
            mean: h.mean() / 1e3,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// Per-second figures of a run, from its start (bucket `i` covers `[i s, (i+1) s)`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Transfers completed.
    pub completions: Vec<u64>,
    /// Bytes of the transfers completed, MB (10^6).
    pub completed_mb: Vec<f64>,
    /// The most transfers admitted and running at once.
    pub peak_active: Vec<u64>,
    /// The most transfers waiting in the admission queue.
    pub peak_queued: Vec<u64>,
    /// CPU used by the process, cores (user + system seconds per second).
    pub cpu_cores: Vec<f64>,
}

/// Memory figures, bytes (`None` where `/proc` is not available).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Resident memory when the run started.
    pub rss_before: Option<u64>,
    /// The largest resident memory sampled during the run.
    pub rss_peak_sampled: Option<u64>,
    /// The kernel's high-water mark at the end (reset at the start when `hwm_reset`).
    pub rss_hwm: Option<u64>,
    /// Whether the high-water mark was reset at the start.
    pub hwm_reset: bool,
    /// The most chunk bytes in flight on the client's node (its `max_inflight_bytes` cap).
    pub peak_inflight_bytes: u64,
    /// The cap.
    pub max_inflight_bytes: u64,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlobReport {
    /// The run's label (experiment level).
    pub label: String,
    /// Its settings.
    pub config: BlobBenchConfig,
    /// Streams per object actually used (at most one per chunk).
    pub streams_used: u32,
    /// Transfers attempted.
    pub transfers: u64,
    /// Transfers completed.
    pub completed: u64,
    /// Transfers refused by admission control (`TooManyTransfers`).
    pub rejected: u64,
    /// Other failures, by kind.
    pub errors: BTreeMap<String, u64>,
    /// The first failure message of each kind (refusals included), for diagnosis.
    pub error_examples: BTreeMap<String, String>,
    /// Completed transfers whose object verified (digest and bytes).
    pub verified: u64,
    /// Completed transfers that did not verify, with why.
    pub verify_failures: Vec<String>,
    /// Bytes of the completed transfers.
    pub bytes: u64,
    /// From the first start to the last completion, seconds.
    pub elapsed_s: f64,
    /// Aggregate throughput, MB/s (10^6 bytes).
    pub throughput_mb_s: f64,
    /// The throughput as a fraction of the emulated link's bandwidth (two-node topologies).
    pub link_fraction: Option<f64>,
    /// Mean of each completed transfer's own throughput, MB/s.
    pub mean_transfer_mb_s: f64,
    /// Transfer latency (admission wait included), ms.
    pub latency_ms: Percentiles,
    /// The most transfers running at once on the client's node.
    pub peak_active: u64,
    /// The most transfers queued at once on the client's node.
    pub peak_queued: u64,
    /// Memory.
    pub memory: Memory,
    /// Per-second series.
    pub series: Series,
    /// The server's disk model, if any.
    pub disk: Option<DiskStats>,
    /// The WAN emulator's counters.
    pub wan: WanStats,
}

impl BlobReport {
    /// The report's headline as one CSV row ([`BlobReport::CSV_HEADER`]).
    pub fn csv_row(&self) -> String {
        let mib =
            |b: Option<u64>| b.map_or(String::new(), |b| format!("{:.1}", b as f64 / 1048576.0));
        let c = &self.config;
        format!(
            "{},{:?},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.2},{},{:.2},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{:.1}\n",
            self.label,
            c.op,
            c.cluster.topology.as_str(),
            c.object_size,
            c.cluster.blob.chunk_size,
            self.streams_used,
            c.clients,
            c.threads,
            self.transfers,
            self.completed,
            self.rejected,
            self.errors.values().sum::<u64>(),
            self.verified,
            self.elapsed_s,
            self.throughput_mb_s,
            self.link_fraction
                .map_or(String::new(), |f| format!("{f:.3}")),
            self.mean_transfer_mb_s,
            self.latency_ms.p50,
            self.latency_ms.p90,
            self.latency_ms.p99,
            self.latency_ms.max,
            self.peak_active,
            self.peak_queued,
            mib(self.memory.rss_before),
            mib(self.memory.rss_peak_sampled.max(self.memory.rss_hwm)),
            mib(Some(self.memory.peak_inflight_bytes)),
            self.series.completions.iter().copied().max().unwrap_or(0) as f64,
        )
    }

    /// The columns of [`BlobReport::csv_row`].
    pub const CSV_HEADER: &'static str = "label,op,topology,object_size,chunk_size,streams,clients,threads,transfers,completed,rejected,other_errors,verified,elapsed_s,throughput_mb_s,link_fraction,mean_transfer_mb_s,p50_ms,p90_ms,p99_ms,max_ms,peak_active,peak_queued,rss_before_mib,rss_peak_mib,peak_inflight_mib,max_completions_per_s\n";

    /// Whether every transfer completed and verified.
    pub fn all_verified(&self) -> bool {
        self.completed == self.transfers && self.verified == self.completed
    }
}

/// One transfer's outcome.
struct Done {
    start: Instant,
    end: Instant,
    bytes: u64,
    result: Result<Option<String>, ObjectError>,
    object: usize,
}

/// A short, stable name for a failure.
pub fn error_kind(e: &ObjectError) -> String {
    match e {
        ObjectError::TooManyTransfers(_) => "too_many_transfers".into(),
        ObjectError::NoSuchKey => "no_such_key".into(),
        ObjectError::NoSuchUpload => "no_such_upload".into(),
        ObjectError::Replication(r) => format!("replication_{}", r.code()),
        ObjectError::Blob(_) => "chunk_store".into(),
        ObjectError::Body(_) => "body".into(),
        ObjectError::BadDigest(_) => "bad_digest".into(),
        ObjectError::TooLarge { .. } => "too_large".into(),
        _ => "other".into(),
    }
}

/// An object of the run.
#[derive(Debug, Clone)]
struct Object {
    key: Bytes,
    content: Content,
}

fn objects_of(cfg: &BlobBenchConfig, cluster: &BlobCluster) -> Vec<Object> {
    let mut out = Vec::new();
    for c in 0..cfg.clients {
        for t in 0..cfg.threads {
            for k in 0..cfg.transfers_per_thread {
                let i = out.len() as u64;
                let name = format!("obj-c{c}-t{t}-{k}");
                out.push(Object {
                    key: Bytes::from(cluster.key_for(&name)),
                    content: Content::new(
                        meridian_core::splitmix64(cfg.seed.wrapping_mul(0x1000_0001) ^ i),
                        cfg.object_size,
                    ),
                });
            }
        }
    }
    out
}

/// Uploads `o`: one PUT, or an upload by byte ranges (the HTTP API's `Content-Range` parts,
/// spec §4 "parallel streams") of `streams` chunk-aligned parts of `part` bytes sent at once,
/// then completed.
async fn put_object(
    objects: &Arc<Objects>,
    o: &Object,
    streams: u32,
    part: u64,
    piece: usize,
) -> Result<Option<String>, ObjectError> {
    let size = o.content.size();
    let meta = meridian_blob::ObjectMeta::default();
    if streams <= 1 {
        objects
            .put(BUCKET, &o.key, o.content.stream(0, size, piece), meta, None)
            .await?;
        return Ok(None);
    }
    let id = objects.create_upload(BUCKET, &o.key, meta).await?;
    let mut tasks = Vec::new();
    for i in 0..streams {
        let (objects, key, content) = (objects.clone(), o.key.clone(), o.content);
        let a = u64::from(i) * part;
        let b = (a + part).min(size);
        let number = objects
            .range_part_number(a)
            .ok_or_else(|| ObjectError::Body(format!("no part number for byte {a}")))?;
        tasks.push(tokio::spawn(async move {
            objects
                .upload_part(BUCKET, &key, id, number, content.stream(a, b, piece), None)
                .await
        }));
    }
    let mut failed = None;
    for t in tasks {
        match t.await {
            Ok(Ok(_etag)) => {}
            Ok(Err(e)) => failed = failed.or(Some(e)),
            Err(e) => failed = failed.or(Some(ObjectError::Body(format!("part task failed: {e}")))),
        }
    }
    if let Some(e) = failed {
        let _ = objects.abort_upload(BUCKET, &o.key, id).await;
        return Err(e);
    }
    objects
        .complete_range_upload(BUCKET, &o.key, id, size)
        .await?;
    Ok(None)
}

/// Downloads `o` with `streams` range reads of `part` bytes at once, comparing every byte
/// with the object's; returns why it did not match, if it did not.
async fn get_object(
    objects: &Arc<Objects>,
    o: &Object,
    streams: u32,
    part: u64,
) -> Result<Option<String>, ObjectError> {
    let head = objects.head(BUCKET, &o.key).await?;
    let size = o.content.size();
    if head.manifest.size != size {
        return Ok(Some(format!(
            "size {} instead of {size}",
            head.manifest.size
        )));
    }
    let mut tasks = Vec::new();
    for i in 0..streams {
        let (objects, key, content, head) =
            (objects.clone(), o.key.clone(), o.content, head.clone());
        let a = u64::from(i) * part;
        let b = (a + part).min(size);
        tasks.push(tokio::spawn(async move {
            let mut s = objects.read(BUCKET, &key, &head, a, b - 1).await?;
            let mut at = a;
            let mut bad = None;
            while let Some(piece) = s.next().await {
                let piece = piece?;
                if bad.is_none() && !content.matches(at, &piece) {
                    bad = Some(format!("bytes differ in {at}..{}", at + piece.len() as u64));
                }
                at += piece.len() as u64;
            }
            if bad.is_none() && at != b {
                bad = Some(format!("range {a}..{b} ended at {at}"));
            }
            Ok::<_, ObjectError>(bad)
        }));
    }
    let mut bad = None;
    for t in tasks {
        match t.await {
            Ok(Ok(b)) => bad = bad.or(b),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(ObjectError::Body(format!("range task failed: {e}"))),
        }
    }
    Ok(bad)
}

/// Reads `o` back whole and checks its manifest's digest and its bytes' BLAKE3 against the
/// expected one.
async fn verify_object(objects: &Arc<Objects>, o: &Object, expected: [u8; 32]) -> Option<String> {
    let head = match objects.head(BUCKET, &o.key).await {
        Ok(h) => h,
        Err(e) => return Some(format!("head: {e}")),
    };
    if head.manifest.digest != expected {
        return Some("the manifest's BLAKE3 differs".into());
    }
    let size = head.manifest.size;
    if size != o.content.size() {
        return Some(format!("size {size} instead of {}", o.content.size()));
    }
    let mut s = match objects.read(BUCKET, &o.key, &head, 0, size - 1).await {
        Ok(s) => s,
        Err(e) => return Some(format!("read: {e}")),
    };
    let mut h = blake3::Hasher::new();
    let mut n = 0u64;
    while let Some(piece) = s.next().await {
        match piece {
            Ok(p) => {
                n += p.len() as u64;
                h.update(&p);
            }
            Err(e) => return Some(format!("read: {e}")),
        }
    }
    if n != size || *h.finalize().as_bytes() != expected {
        return Some("the bytes read back differ".into());
    }
    None
}

/// What the monitor saw.
#[derive(Default)]
struct Watch {
    peak_active: u64,
    peak_queued: u64,
    peak_inflight: u64,
    peak_rss: Option<u64>,
    active_per_s: Vec<u64>,
    queued_per_s: Vec<u64>,
    cpu_per_s: Vec<f64>,
}

fn bump(v: &mut Vec<u64>, i: usize, x: u64) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] = v[i].max(x);
}

/// Samples on its own thread (the runtime's workers may all be busy hashing) until `stop`.
fn monitor(
    objects: Arc<Objects>,
    t0: std::time::Instant,
    every: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Watch {
    let mut w = Watch::default();
    let mut cpu_at = (0usize, sys::cpu_seconds());
    let mut rss_at = std::time::Instant::now();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(every);
        let st = objects.admission().stats();
        let active: u64 = st.active.iter().map(|&a| a as u64).sum();
        let queued: u64 = st.queued.iter().map(|&a| a as u64).sum();
        w.peak_active = w.peak_active.max(active);
        w.peak_queued = w.peak_queued.max(queued);
        w.peak_inflight = w.peak_inflight.max(objects.inflight_bytes());
        let now = std::time::Instant::now();
        // /proc reads cost more than the admission figures: every 10 ms at most.
        if now >= rss_at {
            if let Some(r) = sys::rss() {
                w.peak_rss = Some(w.peak_rss.unwrap_or(0).max(r));
            }
            rss_at = now + Duration::from_millis(10);
        }
        if now >= t0 {
            let sec = (now - t0).as_secs() as usize;
            bump(&mut w.active_per_s, sec, active);
            bump(&mut w.queued_per_s, sec, queued);
            if sec > cpu_at.0 {
                let cpu = sys::cpu_seconds();
                if let (Some(a), Some(b)) = (cpu_at.1, cpu) {
                    let per = (b - a) / (sec - cpu_at.0) as f64;
                    while w.cpu_per_s.len() < sec {
                        w.cpu_per_s.push(per);
                    }
                }
                cpu_at = (sec, cpu);
            }
        }
    }
    w
}

/// Stores `objs` (uploads, `parallel` at once) with the link ideal and the disk model off.
async fn load(
    cluster: &BlobCluster,
    objs: &[Object],
    piece: usize,
    parallel: usize,
) -> Result<(), BenchError> {
    cluster.set_link_ideal(true)?;
    cluster.set_throttle(false);
    let objects = cluster.client().clone();
    let mut stream = futures_util::stream::iter(objs.iter().cloned().map(|o| {
        let objects = objects.clone();
        async move {
            let r = put_object(&objects, &o, 1, o.content.size(), piece).await;
            r.map_err(|e| format!("loading {}: {e}", String::from_utf8_lossy(&o.key)))
        }
    }))
    .buffer_unordered(parallel.max(1));
    while let Some(r) = stream.next().await {
        r.map_err(|reason| BenchError::Target { reason })?;
    }
    cluster.set_throttle(true);
    cluster.set_link_ideal(false)
}

/// Runs one benchmark (see the module docs) on a fresh cluster; `progress` hears about its
/// phases.
pub async fn run(
    cfg: &BlobBenchConfig,
    label: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<BlobReport, BenchError> {
    cfg.validate()?;
    progress(&format!("{label}: starting the cluster"));
    let cluster = BlobCluster::start(cfg.cluster.clone()).await?;
    let r = run_on(&cluster, cfg, label, progress).await;
    cluster.shutdown().await;
    r
}

async fn run_on(
    cluster: &BlobCluster,
    cfg: &BlobBenchConfig,
    label: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<BlobReport, BenchError> {
    let objs = Arc::new(objects_of(cfg, cluster));
    let (part, streams) = cfg.parts();
    if cfg.op == Op::Get {
        progress(&format!("{label}: loading {} objects", objs.len()));
        load(cluster, &objs, cfg.piece, 4).await?;
    }
    let objects = cluster.client().clone();
    let hwm_reset = sys::reset_peak();
    let rss_before = sys::rss();
    let t0 = Instant::now() + Duration::from_millis(20);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let (objects, stop) = (objects.clone(), stop.clone());
        let every = Duration::from_millis(cfg.sample_ms.max(1));
        let t0 = t0.into_std();
        std::thread::spawn(move || monitor(objects, t0, every, stop))
    };
    progress(&format!(
        "{label}: {} transfers ({} × {} threads × {}) of {} bytes, {} stream(s)",
        objs.len(),
        cfg.clients,
        cfg.threads,
        cfg.transfers_per_thread,
        cfg.object_size,
        streams
    ));
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x57a6_6e12);
    let done: Arc<Mutex<Vec<Done>>> = Arc::new(Mutex::new(Vec::with_capacity(objs.len())));
    let mut threads = Vec::new();
    let per = cfg.transfers_per_thread as usize;
    for t in 0..(cfg.clients * cfg.threads) as usize {
        let offset = match cfg.start {
            StartMode::Synchronized => Duration::ZERO,
            StartMode::Staggered { over_s } if over_s > 0.0 => {
                Duration::from_secs_f64(rng.random_range(0.0..over_s))
            }
            StartMode::Staggered { .. } => Duration::ZERO,
        };
        let (objects, objs, done, op, piece) = (
            objects.clone(),
            objs.clone(),
            done.clone(),
            cfg.op,
            cfg.piece,
        );
        threads.push(tokio::spawn(async move {
            tokio::time::sleep_until(t0 + offset).await;
            for i in t * per..(t + 1) * per {
                let o = &objs[i];
                let start = Instant::now();
                let result = match op {
                    Op::Put => put_object(&objects, o, streams, part, piece).await,
                    Op::Get => get_object(&objects, o, streams, part).await,
                };
                let end = Instant::now();
                done.lock().push(Done {
                    start,
                    end,
                    bytes: o.content.size(),
                    result,
                    object: i,
                });
            }
        }));
    }
    for t in threads {
        t.await.map_err(|e| BenchError::Target {
            reason: format!("a client thread failed: {e}"),
        })?;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let w = watch.join().unwrap_or_default();
    let rss_hwm = sys::peak_rss();
    let done = std::mem::take(&mut *done.lock());

    // Figures.
    let mut hist = Histogram::<u64>::new(3).expect("3 significant figures");
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut examples: BTreeMap<String, String> = BTreeMap::new();
    let (mut completed, mut rejected, mut bytes) = (0u64, 0u64, 0u64);
    let mut series = Series::default();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut per_transfer = 0.0;
    let mut ok_objects = Vec::new();
    let mut verify_failures = Vec::new();
    for d in &done {
        match &d.result {
            Ok(bad) => {
                completed += 1;
                bytes += d.bytes;
                let lat = d.end - d.start;
                let _ = hist.record(lat.as_micros().max(1) as u64);
                per_transfer += d.bytes as f64 / lat.as_secs_f64().max(1e-9) / 1e6;
                first = Some(first.map_or(d.start, |f| f.min(d.start)));
                last = Some(last.map_or(d.end, |l| l.max(d.end)));
                let sec = d.end.saturating_duration_since(t0).as_secs() as usize;
                bump(&mut series.completions, sec, 0);
                series.completions[sec] += 1;
                if series.completed_mb.len() <= sec {
                    series.completed_mb.resize(sec + 1, 0.0);
                }
                series.completed_mb[sec] += d.bytes as f64 / 1e6;
                match bad {
                    None => ok_objects.push(d.object),
                    Some(why) => verify_failures.push(format!(
                        "{}: {why}",
                        String::from_utf8_lossy(&objs[d.object].key)
                    )),
                }
            }
            Err(e) => {
                let kind = error_kind(e);
                examples
                    .entry(kind.clone())
                    .or_insert_with(|| e.to_string());
                if kind == "too_many_transfers" {
                    rejected += 1;
                } else {
                    *errors.entry(kind).or_default() += 1;
                }
            }
        }
    }
    let elapsed = match (first, last) {
        (Some(f), Some(l)) => (l - f).as_secs_f64(),
        _ => 0.0,
    };
    let throughput = if elapsed > 0.0 {
        bytes as f64 / elapsed / 1e6
    } else {
        0.0
    };
    series.peak_active = w.active_per_s.clone();
    series.peak_queued = w.queued_per_s.clone();
    series.cpu_cores = w.cpu_per_s.clone();
    let link_fraction = match (cfg.cluster.topology, cfg.cluster.link.bandwidth) {
        (Topology::Local, _) | (_, None) => None,
        (_, Some(b)) => Some(throughput * 1e6 / b as f64),
    };
    let disk = cluster.disk_stats();
    let wan = cluster.wan_stats();

    // Verification, unmeasured: the link ideal, the disk model off.
    progress(&format!("{label}: verifying {} objects", ok_objects.len()));
    cluster.set_link_ideal(true)?;
    cluster.set_throttle(false);
    let mut verified = 0u64;
    let mut checks = futures_util::stream::iter(ok_objects.into_iter().map(|i| {
        let (objects, o, op) = (objects.clone(), objs[i].clone(), cfg.op);
        async move {
            let content = o.content;
            let expected = tokio::task::spawn_blocking(move || content.blake3())
                .await
                .unwrap_or([0; 32]);
            let why = match op {
                Op::Put => verify_object(&objects, &o, expected).await,
                Op::Get => match objects.head(BUCKET, &o.key).await {
                    Ok(h) if h.manifest.digest == expected => None,
                    Ok(_) => Some("the manifest's BLAKE3 differs".to_owned()),
                    Err(e) => Some(format!("head: {e}")),
                },
            };
            (o.key, why)
        }
    }))
    .buffer_unordered(4);
    while let Some((key, why)) = checks.next().await {
        match why {
            None => verified += 1,
            Some(w) => verify_failures.push(format!("{}: {w}", String::from_utf8_lossy(&key))),
        }
    }
    drop(checks);
    verify_failures.truncate(20);
    Ok(BlobReport {
        label: label.to_owned(),
        config: cfg.clone(),
        streams_used: streams,
        transfers: objs.len() as u64,
        completed,
        rejected,
        errors,
        error_examples: examples,
        verified,
        verify_failures,
        bytes,
        elapsed_s: elapsed,
        throughput_mb_s: throughput,
        link_fraction,
        mean_transfer_mb_s: if completed > 0 {
            per_transfer / completed as f64
        } else {
            0.0
        },
        latency_ms: Percentiles::of(&hist),
        peak_active: w.peak_active,
        peak_queued: w.peak_queued,
        memory: Memory {
            rss_before,
            rss_peak_sampled: w.peak_rss,
            rss_hwm,
            hwm_reset,
            peak_inflight_bytes: w.peak_inflight,
            max_inflight_bytes: cfg.cluster.blob.max_inflight_bytes,
        },
        series,
        disk,
        wan,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_blob::throttled::DiskConfig;
    use meridian_server::objects::BlobConfig;

    fn small(f: impl FnOnce(&mut BlobBenchConfig)) -> BlobBenchConfig {
        let mut c = BlobBenchConfig {
            cluster: ClusterOptions {
                blob: BlobConfig {
                    chunk_size: 256 << 10,
                    md5_etag: false,
                    ..BlobConfig::default()
                },
                ..ClusterOptions::default()
            },
            object_size: (1 << 20) + 12_345,
            clients: 2,
            threads: 3,
            ..BlobBenchConfig::default()
        };
        f(&mut c);
        c
    }

    async fn run_quiet(cfg: &BlobBenchConfig) -> BlobReport {
        run(cfg, "test", &mut |_: &str| {}).await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_upload_completes_and_verifies() {
        let r = run_quiet(&small(|_| {})).await;
        assert_eq!((r.transfers, r.completed, r.verified), (6, 6, 6), "{r:?}");
        assert_eq!(r.rejected, 0);
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.bytes, 6 * ((1 << 20) + 12_345));
        assert!(r.throughput_mb_s > 0.0 && r.latency_ms.count == 6);
        // Sampled every ms: transfers this short may all fall between two samples.
        assert!(r.peak_active <= 6);
        assert_eq!(r.series.completions.iter().sum::<u64>(), 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parallel_streams_over_a_link_verify_both_ways() {
        for (op, placement) in [
            (Op::Put, PlacementMode::Both),
            (Op::Get, PlacementMode::Remote),
        ] {
            let cfg = small(|c| {
                c.op = op;
                c.object_size = (11 << 20) + 3;
                c.streams = 2;
                c.clients = 1;
                c.threads = 2;
                c.cluster.topology = Topology::Wan;
                c.cluster.placement = placement;
                c.cluster.link = LinkSpec {
                    rtt: Duration::from_millis(4),
                    bandwidth: None,
                };
            });
            let r = run_quiet(&cfg).await;
            assert_eq!(r.streams_used, 2, "{op:?}");
            assert_eq!((r.completed, r.verified), (2, 2), "{op:?}: {r:?}");
            assert!(r.wan.sent > 0, "the chunks crossed the emulated link");
            assert!(r.link_fraction.is_none(), "no bandwidth, no fraction");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_refuses_only_with_too_many_transfers() {
        // Two run at once, none may wait: of 8 simultaneous uploads 6 are refused. The disk
        // model (1 MB/s writes) keeps the two admitted running while the others arrive.
        let cfg = small(|c| {
            c.clients = 1;
            c.threads = 8;
            c.cluster.blob.max_active_transfers = 2;
            c.cluster.blob.max_queued = 0;
            c.cluster.disk = Some(DiskConfig {
                write_bytes_per_sec: Some(1_000_000),
                read_bytes_per_sec: None,
                ..DiskConfig::disk_2006()
            });
        });
        let r = run_quiet(&cfg).await;
        assert_eq!((r.completed, r.verified, r.rejected), (2, 2, 6), "{r:?}");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.peak_active, 2);
        assert_eq!(r.peak_queued, 0);
        assert!(r.disk.unwrap().bytes_written >= 2 * cfg.object_size);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verification_tells_the_right_bytes_from_others() {
        let cluster = BlobCluster::start(small(|_| {}).cluster).await.unwrap();
        let objects = cluster.client().clone();
        let o = Object {
            key: Bytes::from_static(b"k"),
            content: Content::new(1, 3 << 20),
        };
        put_object(&objects, &o, 1, o.content.size(), 4096)
            .await
            .unwrap();
        assert_eq!(verify_object(&objects, &o, o.content.blake3()).await, None);
        let other = Content::new(2, 3 << 20);
        let why = verify_object(&objects, &o, other.blake3()).await.unwrap();
        assert!(why.contains("BLAKE3"), "{why}");
        // A download compares every byte with the expected object.
        let wrong = Object {
            content: other,
            ..o.clone()
        };
        let bad = get_object(&objects, &wrong, 2, 3 << 19).await.unwrap();
        assert!(bad.unwrap().contains("bytes differ"));
        assert_eq!(get_object(&objects, &o, 2, 3 << 19).await.unwrap(), None);
        cluster.shutdown().await;
    }

    #[test]
    fn parts_are_chunk_aligned_and_uploads_keep_s3_minimum() {
        let c = small(|c| {
            c.object_size = 64 << 20;
            c.streams = 4;
        });
        assert_eq!(c.parts(), (16 << 20, 4));
        let c = small(|c| {
            c.object_size = (12 << 20) + 1;
            c.streams = 8;
        });
        // 1.5 MiB and a bit per stream rounds up to 7 chunks of 256 KiB: 7 such parts hold
        // the object.
        assert_eq!(c.parts(), (7 << 18, 7));
        let c = small(|c| {
            c.object_size = 3 << 18;
            c.streams = 8;
        });
        // Three chunks: three streams of one chunk each.
        assert_eq!(c.parts(), (1 << 18, 3));
        assert!(small(|c| c.streams = 0).validate().is_err());
        assert!(small(|c| c.object_size = 0).validate().is_err());
    }
}
