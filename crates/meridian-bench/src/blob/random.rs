//! Random access (experiment E5): reads of `block` bytes at random block-aligned offsets of
//! one large object, one after another, through the object service (a pinned version, as a
//! `BLOB.OPEN` handle gives, then one range read per block) — and the same offsets read with
//! `pread(2)` from a plain file holding the same bytes, the local baseline that stands in for
//! the study's NFS.
//!
//! Both sides can run behind the same [`DiskModel`] settings (a seek per random access, the
//! disk's bandwidth): the object service through a [`meridian_blob::ThrottledChunkStore`]
//! (which reads whole chunks), the baseline by charging the model for each `pread` of one
//! block. Without a model both read memory (the chunk store, the page cache).
//!
//! Every block read is compared with the object's bytes (outside the timed part).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use meridian_blob::throttled::{
    Access, DiskConfig, DiskModel, DiskStats, RealClock, ThrottleClock,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{BUCKET, BlobCluster, ClusterOptions, Content, Object, Percentiles, Topology, load};
use crate::BenchError;

/// What is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reader {
    /// The object service.
    Meridian,
    /// `pread(2)` on a plain file.
    Pread,
}

/// One cell of random reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RandomReport {
    /// Who read.
    pub reader: Reader,
    /// Block size, bytes.
    pub block: u64,
    /// The object's chunk size (Meridian), bytes.
    pub chunk_size: Option<u32>,
    /// The object's size, bytes.
    pub object_size: u64,
    /// Whether a disk model timed the reads.
    pub disk_model: bool,
    /// Reads made.
    pub reads: u64,
    /// Reads whose bytes matched the object's.
    pub verified: u64,
    /// Reads that failed or did not match.
    pub failed: u64,
    /// Seconds spent reading (verification excluded).
    pub seconds: f64,
    /// Bytes read per second, MB/s (10^6).
    pub throughput_mb_s: f64,
    /// Per-read latency, ms.
    pub latency_ms: Percentiles,
    /// The disk model's counters for this cell.
    pub disk: Option<DiskStats>,
}

/// How long and how much each cell reads.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Seconds of reading per cell, at most.
    pub seconds: f64,
    /// Reads per cell, at most.
    pub max_reads: u64,
}

/// The offsets of a cell: block-aligned, uniform over the object, the same for every reader
/// given the seed.
fn offsets(seed: u64, size: u64, block: u64) -> impl Iterator<Item = u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ block);
    let blocks = (size / block).max(1);
    std::iter::repeat_with(move || rng.random_range(0..blocks) * block)
}

/// The reads of one reader at one block size, as they go.
struct Tally {
    h: Histogram<u64>,
    reads: u64,
    verified: u64,
    failed: u64,
    spent: Duration,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            h: Histogram::<u64>::new(3).expect("3 significant figures"),
            reads: 0,
            verified: 0,
            failed: 0,
            spent: Duration::ZERO,
        }
    }

    /// Whether `budget` is spent.
    fn done(&self, budget: Budget) -> bool {
        self.reads >= budget.max_reads || self.spent.as_secs_f64() >= budget.seconds
    }

    /// One read that took `took`, whose bytes were right if `ok`.
    fn record(&mut self, took: Duration, ok: bool) {
        self.spent += took;
        self.reads += 1;
        let _ = self.h.record(took.as_micros().max(1) as u64);
        if ok {
            self.verified += 1;
        } else {
            self.failed += 1;
        }
    }

    /// The report of these reads of `block` bytes by `reader`.
    fn report(
        self,
        reader: Reader,
        block: u64,
        chunk_size: Option<u32>,
        content: &Content,
        disk: (bool, Option<DiskStats>),
    ) -> RandomReport {
        let seconds = self.spent.as_secs_f64();
        RandomReport {
            reader,
            block,
            chunk_size,
            object_size: content.size(),
            disk_model: disk.0,
            reads: self.reads,
            verified: self.verified,
            failed: self.failed,
            seconds,
            throughput_mb_s: (self.reads * block) as f64 / seconds.max(1e-9) / 1e6,
            latency_ms: Percentiles::of(&self.h),
            disk: disk.1,
        }
    }
}

/// Writes the object's bytes to `path` (the baseline's file).
pub fn write_file(path: &Path, content: &Content) -> Result<(), BenchError> {
    use std::io::Write;
    let io = |e: std::io::Error| BenchError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < content.size() {
        let n = (content.size() - at).min(buf.len() as u64) as usize;
        content.fill(at, &mut buf[..n]);
        f.write_all(&buf[..n]).map_err(io)?;
        at += n as u64;
    }
    f.flush().map_err(io)
}

/// Random reads of every block size in `blocks` with `pread(2)` on `path` (which holds
/// `content`), each timed by a fresh disk model when `disk` is set. Blocking.
pub fn pread_reads(
    path: &Path,
    content: &Content,
    blocks: &[u64],
    budget: Budget,
    disk: Option<&DiskConfig>,
    seed: u64,
) -> Result<Vec<RandomReport>, BenchError> {
    let file = std::fs::File::open(path).map_err(|e| BenchError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let mut out = Vec::new();
    for &block in blocks {
        let model = disk.map(|d| Arc::new(DiskModel::new(d.clone())));
        let clock = RealClock::new();
        let mut t = Tally::new();
        let mut buf = vec![0u8; block as usize];
        for off in offsets(seed, content.size(), block) {
            if t.done(budget) {
                break;
            }
            let started = std::time::Instant::now();
            let r = match &model {
                Some(m) => {
                    let _reading = m.reading(0);
                    let end = m.charge(clock.now(), 0, off / block, block, Access::Read);
                    let r = file.read_exact_at(&mut buf, off);
                    clock.sleep_until(end);
                    r
                }
                None => file.read_exact_at(&mut buf, off),
            };
            t.record(started.elapsed(), r.is_ok() && content.matches(off, &buf));
        }
        let stats = model.map(|m| m.stats());
        out.push(t.report(Reader::Pread, block, None, content, (disk.is_some(), stats)));
    }
    Ok(out)
}

/// Loads `content` as one object of chunk size `chunk_size` on a one-node cluster (its store
/// behind `disk` when set) and reads blocks of every size in `blocks` at random, one at a
/// time, through the object service.
pub async fn meridian_reads(
    mut opts: ClusterOptions,
    content: Content,
    chunk_size: u32,
    blocks: &[u64],
    budget: Budget,
    seed: u64,
) -> Result<Vec<RandomReport>, BenchError> {
    opts.topology = Topology::Local;
    opts.blob.chunk_size = chunk_size;
    let disk_model = opts.disk.is_some();
    let cluster = BlobCluster::start(opts).await?;
    let r = async {
        let o = Object {
            key: bytes::Bytes::from(cluster.key_for("random-access")),
            content,
        };
        load(&cluster, std::slice::from_ref(&o), 256 << 10, 1).await?;
        let objects = cluster.client().clone();
        let head = objects
            .head(BUCKET, &o.key)
            .await
            .map_err(|e| BenchError::Target {
                reason: format!("head of the random-access object: {e}"),
            })?;
        let mut out = Vec::new();
        for &block in blocks {
            let before = cluster.disk_stats();
            let mut t = Tally::new();
            for off in offsets(seed, content.size(), block) {
                if t.done(budget) {
                    break;
                }
                let last = (off + block).min(content.size()) - 1;
                let started = tokio::time::Instant::now();
                let mut got = BytesMut::with_capacity(block as usize);
                let r = async {
                    let mut s = objects.read(BUCKET, &o.key, &head, off, last).await?;
                    while let Some(piece) = s.next().await {
                        got.extend_from_slice(&piece?);
                    }
                    Ok::<_, meridian_server::objects::ObjectError>(())
                }
                .await;
                let ok =
                    r.is_ok() && got.len() as u64 == last + 1 - off && content.matches(off, &got);
                t.record(started.elapsed(), ok);
            }
            let disk = match (before, cluster.disk_stats()) {
                (Some(a), Some(b)) => Some(b.since(&a)),
                _ => None,
            };
            out.push(t.report(
                Reader::Meridian,
                block,
                Some(chunk_size),
                &content,
                (disk_model, disk),
            ));
        }
        Ok(out)
    }
    .await;
    cluster.shutdown().await;
    r
}
