//! A chunk store with a disk's speed (spec `large-objects.md`, "Numbers to reproduce": the
//! optional `ThrottledEngine` of the disk-bound experiments): [`ThrottledChunkStore`] wraps any
//! [`ChunkStore`] and makes every chunk read and write take the time a [`DiskModel`] says a
//! disk of that bandwidth and seek time would take.
//!
//! **The model** (one head, first come first served):
//! - An access of `len` bytes occupies the disk for `len / bandwidth` (reads and writes have
//!   their own bandwidths; `None` leaves that direction unthrottled and free).
//! - A **read** also pays seeks:
//!   - while reads of more than one *stream* are in progress (a stream is a chunk version, i.e.
//!     one object or upload), the streams' reads interleave every `segment` bytes (the
//!     kernel's read-ahead): `ceil(len / segment)` seeks;
//!   - otherwise one seek unless the access continues where the head is (same stream, a
//!     position within `sequential_window` after the last one: prefetched chunks may arrive
//!     slightly out of order).
//! - Writes never seek (a write-back cache lays them out sequentially).
//! - Accesses are served in arrival order: each starts when the disk is free and holds it for
//!   its whole cost, so concurrent accesses queue.
//!
//! With [`DiskConfig::disk_2006`] (28 MB/s both ways, 12 ms per seek, 128 KiB segments)
//! one stream reads 1 MiB chunks at 28 MB/s; four streams at once pay 8 seeks a chunk and
//! together get about 7.9 MB/s — the shape of the GridFS study's 28.44 → 7.46 MB/s. The
//! figures are a 2006 disk's (about 8.5 ms average seek plus 4.2 ms of rotation at 7200 rpm),
//! not fitted to the study's result.
//!
//! Guarantees:
//! - Bytes are never changed: every call reaches the inner store; only its timing changes.
//!   [`ChunkStore::file`] answers `None`, so no transport bypasses the throttle with
//!   `sendfile(2)`.
//! - Time comes from a [`ThrottleClock`]: [`RealClock`] sleeps the calling thread (the store
//!   [`blocks`](ChunkStore::blocks), so async callers run it on the blocking pool);
//!   [`VirtualClock`] only advances a counter, so tests check exact durations without waiting.
//! - [`ThrottledChunkStore::set_enabled`] switches the throttle off (loading a benchmark's
//!   objects) and on again; an access in progress keeps the cost it was charged.

use crate::chunk_store::{ChunkId, ChunkStore, VersionInfo};
use crate::digest::ChunkDigest;
use crate::error::Result;
use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The disk a [`DiskModel`] emulates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskConfig {
    /// Read bandwidth, bytes per second (`None`: reads are free, and never seek).
    pub read_bytes_per_sec: Option<u64>,
    /// Write bandwidth, bytes per second (`None`: writes are free).
    pub write_bytes_per_sec: Option<u64>,
    /// The cost of one seek.
    pub seek: Duration,
    /// Bytes a stream reads before the head moves to another stream's data, while several
    /// streams read at once (at least 1).
    pub segment: u64,
    /// How far past the head (in positions, e.g. chunk indexes) a read still counts as
    /// sequential.
    pub sequential_window: u64,
}

impl DiskConfig {
    /// The GridFS study's disk: 28 MB/s reads and writes (bonnie measured 28.11 MB/s), 12 ms
    /// per seek, 128 KiB read-ahead segments, 8 positions of sequential slack.
    pub fn disk_2006() -> DiskConfig {
        DiskConfig {
            read_bytes_per_sec: Some(28_000_000),
            write_bytes_per_sec: Some(28_000_000),
            seek: Duration::from_millis(12),
            segment: 128 << 10,
            sequential_window: 8,
        }
    }

    /// Checks the settings; the error names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        for (name, v) in [
            ("read_bytes_per_sec", self.read_bytes_per_sec),
            ("write_bytes_per_sec", self.write_bytes_per_sec),
        ] {
            if v == Some(0) {
                return Err(format!(
                    "disk.{name} must be positive (or unset: unlimited)"
                ));
            }
        }
        if self.segment == 0 {
            return Err("disk.segment must be at least 1 byte".into());
        }
        Ok(())
    }

    /// The time `len` bytes take at `bytes_per_sec`.
    fn transfer(len: u64, bytes_per_sec: u64) -> Duration {
        Duration::from_nanos(
            u64::try_from(u128::from(len) * 1_000_000_000 / u128::from(bytes_per_sec.max(1)))
                .unwrap_or(u64::MAX),
        )
    }
}

/// A read or a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A read (may seek).
    Read,
    /// A write (never seeks).
    Write,
}

/// What a [`DiskModel`] has charged so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskStats {
    /// Reads charged.
    pub reads: u64,
    /// Writes charged.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Seeks charged.
    pub seeks: u64,
    /// Time the disk was busy, µs.
    pub busy_us: u64,
    /// The most streams seen reading at once.
    pub max_streams: u64,
}

impl DiskStats {
    /// What was charged between `earlier` and these figures (the peak streams: these).
    pub fn since(&self, earlier: &DiskStats) -> DiskStats {
        DiskStats {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            seeks: self.seeks.saturating_sub(earlier.seeks),
            busy_us: self.busy_us.saturating_sub(earlier.busy_us),
            max_streams: self.max_streams,
        }
    }
}

#[derive(Debug, Default)]
struct DiskState {
    /// When the disk finishes what it was given (since the clock's origin).
    free_at: Duration,
    /// The stream and position of the last read.
    head: Option<(u128, u64)>,
    /// Reads in progress, by stream.
    active: HashMap<u128, u32>,
    stats: DiskStats,
}

/// One disk head shared by every access charged to it (see the module docs). Pure: it
/// computes when an access ends; the caller waits.
#[derive(Debug)]
pub struct DiskModel {
    cfg: DiskConfig,
    state: Mutex<DiskState>,
}

impl DiskModel {
    /// A disk with `cfg` (validate it first; a zero segment counts as 1 byte).
    pub fn new(cfg: DiskConfig) -> DiskModel {
        DiskModel {
            cfg,
            state: Mutex::new(DiskState::default()),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DiskConfig {
        &self.cfg
    }

    /// What has been charged so far.
    pub fn stats(&self) -> DiskStats {
        self.state.lock().stats.clone()
    }

    /// Whether accesses of `access`'s direction cost anything.
    pub fn throttles(&self, access: Access) -> bool {
        match access {
            Access::Read => self.cfg.read_bytes_per_sec.is_some(),
            Access::Write => self.cfg.write_bytes_per_sec.is_some(),
        }
    }

    /// Registers a read of `stream` in progress (reads of several streams at once seek); the
    /// guard unregisters it when dropped.
    pub fn reading(self: &Arc<Self>, stream: u128) -> ReadGuard {
        let mut s = self.state.lock();
        *s.active.entry(stream).or_insert(0) += 1;
        let streams = s.active.len() as u64;
        s.stats.max_streams = s.stats.max_streams.max(streams);
        ReadGuard {
            disk: self.clone(),
            stream,
        }
    }

    /// Charges an access of `len` bytes of `stream` at `position` arriving at `now` (both on
    /// the caller's clock); returns when it ends. A read should be registered with
    /// [`DiskModel::reading`] for its whole duration, so that concurrent reads see it.
    pub fn charge(
        &self,
        now: Duration,
        stream: u128,
        position: u64,
        len: u64,
        access: Access,
    ) -> Duration {
        let mut s = self.state.lock();
        let (bandwidth, seeks) = match access {
            Access::Write => (self.cfg.write_bytes_per_sec, 0),
            Access::Read => {
                let others = s.active.keys().any(|&k| k != stream);
                let sequential = s.head.is_some_and(|(hs, hp)| {
                    hs == stream
                        && position > hp.saturating_sub(self.cfg.sequential_window)
                        && position <= hp.saturating_add(self.cfg.sequential_window)
                });
                let seeks = if others {
                    len.div_ceil(self.cfg.segment.max(1)).max(1)
                } else if sequential {
                    0
                } else {
                    1
                };
                s.head = Some((stream, position));
                (self.cfg.read_bytes_per_sec, seeks)
            }
        };
        let Some(bandwidth) = bandwidth else {
            return now;
        };
        let cost = DiskConfig::transfer(len, bandwidth)
            + self
                .cfg
                .seek
                .saturating_mul(u32::try_from(seeks).unwrap_or(u32::MAX));
        let start = s.free_at.max(now);
        let end = start + cost;
        s.free_at = end;
        let st = &mut s.stats;
        match access {
            Access::Read => {
                st.reads += 1;
                st.bytes_read += len;
            }
            Access::Write => {
                st.writes += 1;
                st.bytes_written += len;
            }
        }
        st.seeks += seeks;
        st.busy_us += cost.as_micros() as u64;
        end
    }
}

/// A read in progress on a [`DiskModel`] (see [`DiskModel::reading`]).
#[derive(Debug)]
pub struct ReadGuard {
    disk: Arc<DiskModel>,
    stream: u128,
}

impl Drop for ReadGuard {
    fn drop(&mut self) {
        let mut s = self.disk.state.lock();
        if let Some(n) = s.active.get_mut(&self.stream) {
            *n -= 1;
            if *n == 0 {
                s.active.remove(&self.stream);
            }
        }
    }
}

/// Where a throttled store's time comes from.
pub trait ThrottleClock: Send + Sync + 'static {
    /// Time since the clock's origin.
    fn now(&self) -> Duration;
    /// Waits (blocking the thread, or advancing virtual time) until `at`.
    fn sleep_until(&self, at: Duration);
}

/// The machine's monotonic clock; waiting sleeps the calling thread.
#[derive(Debug, Clone, Copy)]
pub struct RealClock {
    origin: std::time::Instant,
}

impl RealClock {
    /// A clock whose origin is now.
    pub fn new() -> RealClock {
        RealClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl ThrottleClock for RealClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn sleep_until(&self, at: Duration) {
        let now = self.now();
        if at > now {
            std::thread::sleep(at - now);
        }
    }
}

/// A clock that never waits: sleeping moves it forward (tests).
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: Mutex<Duration>,
}

impl VirtualClock {
    /// A clock at zero.
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    /// Moves the clock forward by `d` (time passing between calls).
    pub fn advance(&self, d: Duration) {
        *self.now.lock() += d;
    }
}

impl ThrottleClock for VirtualClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }

    fn sleep_until(&self, at: Duration) {
        let mut now = self.now.lock();
        *now = (*now).max(at);
    }
}

/// A [`ChunkStore`] as slow as a disk (see the module docs).
pub struct ThrottledChunkStore {
    inner: Arc<dyn ChunkStore>,
    disk: Arc<DiskModel>,
    clock: Arc<dyn ThrottleClock>,
    enabled: AtomicBool,
}

impl std::fmt::Debug for ThrottledChunkStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrottledChunkStore")
            .field("disk", &self.disk)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl ThrottledChunkStore {
    /// `inner` behind `disk` (which other stores or callers may share: one head), timed by
    /// `clock`. Starts enabled.
    pub fn new(
        inner: Arc<dyn ChunkStore>,
        disk: Arc<DiskModel>,
        clock: Arc<dyn ThrottleClock>,
    ) -> ThrottledChunkStore {
        ThrottledChunkStore {
            inner,
            disk,
            clock,
            enabled: AtomicBool::new(true),
        }
    }

    /// `inner` behind a disk of its own with `cfg`, on the real clock.
    pub fn real(inner: Arc<dyn ChunkStore>, cfg: DiskConfig) -> ThrottledChunkStore {
        Self::new(
            inner,
            Arc::new(DiskModel::new(cfg)),
            Arc::new(RealClock::new()),
        )
    }

    /// The disk model (its statistics).
    pub fn disk(&self) -> &Arc<DiskModel> {
        &self.disk
    }

    /// Turns the throttle on or off (off: calls go straight to the inner store).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Whether the throttle is on.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    fn wait(&self, stream: u128, position: u64, len: u64, access: Access) {
        let end = self
            .disk
            .charge(self.clock.now(), stream, position, len, access);
        self.clock.sleep_until(end);
    }
}

impl ChunkStore for ThrottledChunkStore {
    fn put(
        &self,
        id: ChunkId,
        bytes: &[u8],
        digest: ChunkDigest,
        info: &VersionInfo,
    ) -> Result<()> {
        if self.enabled() && self.disk.throttles(Access::Write) {
            self.wait(
                id.version,
                u64::from(id.index),
                bytes.len() as u64,
                Access::Write,
            );
        }
        self.inner.put(id, bytes, digest, info)
    }

    fn get(&self, id: ChunkId) -> Result<Option<Bytes>> {
        if !(self.enabled() && self.disk.throttles(Access::Read)) {
            return self.inner.get(id);
        }
        let _reading = self.disk.reading(id.version);
        let got = self.inner.get(id);
        let len = match &got {
            Ok(Some(b)) => b.len() as u64,
            _ => 0,
        };
        self.wait(id.version, u64::from(id.index), len, Access::Read);
        got
    }

    fn indexes(&self, version: u128) -> Result<Vec<u32>> {
        self.inner.indexes(version)
    }

    fn versions(&self) -> Result<Vec<(u128, VersionInfo)>> {
        self.inner.versions()
    }

    fn remove(&self, id: ChunkId) -> Result<bool> {
        self.inner.remove(id)
    }

    fn delete_version(&self, version: u128) -> Result<u64> {
        self.inner.delete_version(version)
    }

    fn flip_bit(&self, id: ChunkId, bit: usize) -> Result<bool> {
        self.inner.flip_bit(id, bit)
    }

    fn file(&self, _id: ChunkId) -> Option<(PathBuf, u64)> {
        None
    }

    fn stored_bytes(&self) -> u64 {
        self.inner.stored_bytes()
    }

    fn blocks(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk_store::{FileChunkStore, MemChunkStore};
    use crate::digest::chunk_digest;
    use crate::error::BlobError;

    const MIB: u64 = 1 << 20;

    fn info() -> VersionInfo {
        VersionInfo {
            key: Bytes::from_static(b"b:k"),
            created_us: 1,
        }
    }

    fn id(version: u128, index: u32) -> ChunkId {
        ChunkId { version, index }
    }

    fn ms(x: f64) -> Duration {
        Duration::from_secs_f64(x / 1e3)
    }

    /// The 2006 disk's cost of `len` bytes, without seeks.
    fn transfer(len: u64) -> Duration {
        DiskConfig::transfer(len, 28_000_000)
    }

    fn store(inner: Arc<dyn ChunkStore>) -> (ThrottledChunkStore, Arc<VirtualClock>) {
        let clock = Arc::new(VirtualClock::new());
        let s = ThrottledChunkStore::new(
            inner,
            Arc::new(DiskModel::new(DiskConfig::disk_2006())),
            clock.clone(),
        );
        (s, clock)
    }

    fn fill(s: &dyn ChunkStore, version: u128, chunks: u32, len: usize) {
        for i in 0..chunks {
            let data = vec![(i as u8) ^ (version as u8); len];
            s.put(id(version, i), &data, chunk_digest(&data), &info())
                .unwrap();
        }
    }

    #[test]
    fn the_transfer_time_is_exact() {
        assert_eq!(transfer(28_000_000), Duration::from_secs(1));
        assert_eq!(transfer(MIB), Duration::from_nanos(37_449_142));
        assert_eq!(
            DiskConfig::transfer(10, 3),
            Duration::from_nanos(3_333_333_333)
        );
    }

    #[test]
    fn a_sequential_reader_gets_the_bandwidth_and_one_seek() {
        let (s, clock) = store(Arc::new(MemChunkStore::new()));
        s.set_enabled(false);
        fill(&s, 7, 10, MIB as usize);
        assert_eq!(
            clock.now(),
            Duration::ZERO,
            "loading with the throttle off is free"
        );
        s.set_enabled(true);
        for i in 0..10 {
            let got = s.get(id(7, i)).unwrap().unwrap();
            assert_eq!(got.len() as u64, MIB);
            assert_eq!(got[0], (i as u8) ^ 7);
        }
        // One seek to reach the object, then 10 MiB at 28 MB/s.
        assert_eq!(clock.now(), ms(12.0) + transfer(MIB) * 10);
        let st = s.disk().stats();
        assert_eq!((st.reads, st.seeks, st.bytes_read), (10, 1, 10 * MIB));
        // A read far from the head (9) seeks again; reads a little ahead of it, or just
        // behind it (prefetched chunks arriving out of order), do not.
        let before = clock.now();
        s.get(id(7, 0)).unwrap().unwrap();
        assert_eq!(clock.now() - before, ms(12.0) + transfer(MIB));
        let before = clock.now();
        s.get(id(7, 2)).unwrap().unwrap();
        s.get(id(7, 1)).unwrap().unwrap();
        assert_eq!(clock.now() - before, transfer(MIB) * 2);
        // Another stream's data is a seek away.
        fill(&s, 8, 1, 10);
        let before = clock.now();
        s.get(id(8, 0)).unwrap().unwrap();
        assert_eq!(clock.now() - before, ms(12.0) + transfer(10));
    }

    #[test]
    fn concurrent_streams_seek_every_segment_and_the_aggregate_falls() {
        // Four streams reading at once: each 1 MiB read pays 8 seeks (128 KiB segments), and
        // the reads queue behind each other on the one head.
        let disk = Arc::new(DiskModel::new(DiskConfig::disk_2006()));
        let guards: Vec<ReadGuard> = (1..=4u128).map(|v| disk.reading(v)).collect();
        let mut end = Duration::ZERO;
        for round in 0..4u64 {
            for v in 1..=4u128 {
                end = disk.charge(Duration::ZERO, v, round, MIB, Access::Read);
            }
        }
        let per_read = transfer(MIB) + ms(12.0) * 8;
        assert_eq!(end, per_read * 16);
        let aggregate = 16.0 * MIB as f64 / end.as_secs_f64() / 1e6;
        assert!(
            (7.0..8.5).contains(&aggregate),
            "aggregate {aggregate} MB/s"
        );
        assert_eq!(disk.stats().max_streams, 4);
        drop(guards);
        // Alone again: the same 16 reads of one stream cost one seek.
        let disk = Arc::new(DiskModel::new(DiskConfig::disk_2006()));
        let _g = disk.reading(1);
        let mut end = Duration::ZERO;
        for i in 0..16 {
            end = disk.charge(Duration::ZERO, 1, i, MIB, Access::Read);
        }
        assert_eq!(end, ms(12.0) + transfer(MIB) * 16);
        let alone = 16.0 * MIB as f64 / end.as_secs_f64() / 1e6;
        assert!(
            alone > 27.0 && alone / aggregate > 3.0,
            "{alone} vs {aggregate}"
        );
    }

    #[test]
    fn a_finished_stream_stops_causing_seeks() {
        let disk = Arc::new(DiskModel::new(DiskConfig::disk_2006()));
        let a = disk.reading(1);
        let b = disk.reading(2);
        let t1 = disk.charge(Duration::ZERO, 1, 0, 256 << 10, Access::Read);
        assert_eq!(t1, transfer(256 << 10) + ms(24.0));
        drop(b);
        // Stream 2 is gone and stream 1 continues where it was: no seek.
        let t2 = disk.charge(t1, 1, 1, 256 << 10, Access::Read);
        assert_eq!(t2 - t1, transfer(256 << 10));
        drop(a);
        assert!(disk.state.lock().active.is_empty());
    }

    #[test]
    fn writes_pay_bandwidth_only_and_queue_on_the_head() {
        let (s, clock) = store(Arc::new(MemChunkStore::new()));
        fill(&s, 1, 2, MIB as usize);
        fill(&s, 2, 2, MIB as usize);
        assert_eq!(clock.now(), transfer(MIB) * 4);
        let st = s.disk().stats();
        assert_eq!((st.writes, st.seeks, st.bytes_written), (4, 0, 4 * MIB));
        // An access arriving while the disk is busy waits for it; one arriving later starts
        // when it arrives.
        let disk = DiskModel::new(DiskConfig::disk_2006());
        let e1 = disk.charge(Duration::ZERO, 1, 0, MIB, Access::Write);
        let e2 = disk.charge(Duration::ZERO, 2, 0, MIB, Access::Write);
        assert_eq!(e2, e1 * 2);
        let later = e2 + Duration::from_secs(1);
        assert_eq!(
            disk.charge(later, 3, 0, MIB, Access::Write),
            later + transfer(MIB)
        );
    }

    #[test]
    fn an_unthrottled_direction_is_free() {
        let cfg = DiskConfig {
            write_bytes_per_sec: None,
            ..DiskConfig::disk_2006()
        };
        let clock = Arc::new(VirtualClock::new());
        let s = ThrottledChunkStore::new(
            Arc::new(MemChunkStore::new()),
            Arc::new(DiskModel::new(cfg)),
            clock.clone(),
        );
        fill(&s, 1, 3, 1000);
        assert_eq!(clock.now(), Duration::ZERO);
        s.get(id(1, 0)).unwrap().unwrap();
        assert_eq!(clock.now(), ms(12.0) + transfer(1000));
        assert!(
            DiskConfig {
                read_bytes_per_sec: Some(0),
                ..DiskConfig::disk_2006()
            }
            .validate()
            .unwrap_err()
            .contains("read_bytes_per_sec")
        );
        assert!(DiskConfig::disk_2006().validate().is_ok());
    }

    #[test]
    fn the_wrapper_changes_timing_never_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn ChunkStore> = Arc::new(FileChunkStore::open(dir.path(), false).unwrap());
        let (s, clock) = store(inner.clone());
        let data = b"chunk bytes".to_vec();
        assert!(matches!(
            s.put(id(5, 0), &data, chunk_digest(b"other"), &info()),
            Err(BlobError::DigestMismatch { .. })
        ));
        s.put(id(5, 0), &data, chunk_digest(&data), &info())
            .unwrap();
        assert_eq!(s.get(id(5, 0)).unwrap().as_deref(), Some(&data[..]));
        assert_eq!(s.get(id(5, 1)).unwrap(), None);
        assert_eq!(s.indexes(5).unwrap(), vec![0]);
        assert_eq!(s.versions().unwrap(), vec![(5, info())]);
        assert_eq!(s.stored_bytes(), data.len() as u64);
        assert!(inner.file(id(5, 0)).is_some());
        assert_eq!(s.file(id(5, 0)), None, "no sendfile around the throttle");
        assert!(s.blocks());
        assert!(s.flip_bit(id(5, 0), 3).unwrap());
        assert!(matches!(
            s.get(id(5, 0)),
            Err(BlobError::DigestMismatch { .. })
        ));
        assert!(s.remove(id(5, 0)).unwrap());
        assert_eq!(s.delete_version(5).unwrap(), 0);
        assert!(clock.now() > Duration::ZERO);
        assert!(s.disk().state.lock().active.is_empty(), "reads unregister");
    }
}
