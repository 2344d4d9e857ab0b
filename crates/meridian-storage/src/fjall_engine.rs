//! [`FjallEngine`]: the durable engine, on the fjall LSM tree.
//!
//! Every version of every key is one entry of a single fjall keyspace:
//!
//! ```text
//! entry key   = enc(user key) ++ big-endian(u64::MAX - ts)
//! entry value = tag (0 = tombstone, 1 = value) ++ value bytes
//! ```
//!
//! `enc` is an order-preserving, prefix-free encoding of the user key (the "memcomparable"
//! group encoding: 16-byte groups, each followed by a marker byte; see `encode_key`). Because
//! it is order-preserving and prefix-free, the LSM's byte order is (user key ascending,
//! timestamp descending): the versions of a key are contiguous, newest first, so a snapshot
//! read `get(key, at)` is one seek to `enc(key) ++ (u64::MAX - at)` and the first entry still
//! inside `enc(key)`. The group encoding (rather than escaping `0x00` bytes) bounds the
//! overhead to 1/16 + 25 bytes, so every key up to [`crate::MAX_KEY_LEN`] fits fjall's 64 KiB
//! key limit, whatever its bytes.
//!
//! What it guarantees, beyond the [`Engine`] contract:
//!
//! - **atomic batches**, also across a crash: a [`WriteBatch`] is one fjall batch (one journal
//!   record), and every read goes through a fjall snapshot, which only ever sees whole batches;
//! - **durability** by [`Durability`]: `Always` fsyncs the journal before a write returns
//!   (concurrent writers share one fsync: group commit); `Everysec` fsyncs from a background
//!   thread once a second when something was written; `Never` hands every write to the OS (it
//!   survives a process crash, not necessarily a power loss). [`Engine::flush`] and `Drop` fsync;
//! - **exact `live_keys`**: counted by a scan at open and kept up to date by the write path,
//!   which looks up each written key's latest version under one writer mutex (writes,
//!   [`Engine::gc`] and [`Engine::clear`] are serialised by it; reads never take it). `versions`
//!   and `bytes` are approximate between opens.
//!
//! ## The latest-version index
//!
//! Finding a key's latest version in the version keyspace takes a range seek, which in an LSM
//! tree opens and positions a cursor in every table that may overlap (no bloom filter helps).
//! That seek dominated the write path, so a second keyspace indexes the latest version of
//! every key:
//!
//! ```text
//! index key   = enc(user key)
//! index value = big-endian(ts) ++ tag (0 = tombstone, 1 = value)
//! ```
//!
//! It is written in the same fjall batch (hence the same journal record) as the versions it
//! describes, so it is exactly as durable and atomic as they are, and the write path reads it
//! with a point lookup (bloom filters, no merge). [`Engine::gc`] removes a key's index entry in
//! the batch that removes the key's last version. At open, the scan that counts the live keys
//! also checks the index against the versions (both are in `enc(user key)` order) and repairs
//! any difference: a database written before the index existed gets it built, and a crash
//! between the two keyspaces' [`Engine::clear`] records is healed.
//!
//! ## Group commit
//!
//! Writers do not each take the writer mutex: a writer validates and encodes its batch, then
//! queues it. If no commit is in progress it becomes the leader, takes every queued batch
//! (its own included), applies them as one fjall batch (one journal record, so each batch
//! stays atomic) under the writer mutex, fsyncs once for `Always`, and hands every follower its
//! result; otherwise it waits for a leader to do that for it. A batch is acknowledged (its
//! `write_batch` returns) only after the fsync that covers it, exactly as before; the queue
//! only lets the writers that arrive during one commit share the next journal write and fsync.
//!
//! Garbage collection is not done inline on writes (the horizon is only recorded): the server
//! runs [`Engine::gc`] periodically, which walks the keyspace in chunks, each under the writer
//! mutex, and deletes the versions no read at or above the horizon can see.
//!
//! ## A full disk
//!
//! Writes are refused with [`StorageError::DiskFull`] (and [`Engine::health`] says why) in two
//! cases, and resume by themselves once the filesystem has room again; reads are served
//! throughout:
//!
//! - **below the reserve**: the free space ([`SpaceProbe`], `statvfs` by default) is under
//!   [`FjallConfig::min_free_bytes`]. Nothing failed: fjall never saw a failed write. The
//!   space is measured by the background thread every [`DISK_TICK`], and by the write path
//!   whenever the bytes written since the last measurement may have used up half the headroom
//!   above the reserve;
//! - **`ENOSPC`** (or `EDQUOT`) from a journal write or fsync. fjall then refuses every later
//!   write ("poisoned", see `fjall::Error::Poisoned`), so before writes resume the engine
//!   reopens the database from its files, under the writer mutex: opening it recovers the
//!   journal (a partial last record is dropped), and the counters and the latest-version
//!   index are checked as at open. Every acknowledged write is in the journal file before it
//!   is acknowledged (fjall hands each batch to the OS), so none is lost. The group that met
//!   `ENOSPC` was answered with an error and is not readable while writes are refused, but
//!   like a write cut by a crash it may be there after the reopen (closing the poisoned
//!   journal writes out what it still buffered, which can complete its record); a write
//!   refused before reaching fjall never is. A fjall failure met in the background (a
//!   memtable flush) surfaces as `Poisoned`, checked every tick; it counts as a full disk if
//!   less than [`LOW_SPACE`] above the reserve is free.
//!
//! Writes resume once [`RESUME_HEADROOM`] more than the reserve is free (so the state does not
//! flap). Any other failure of fjall also refuses writes, with the failure in the error, but
//! the engine does not recover from it by itself: a restart reopens it, as before.

use crate::disk::{Degraded, EngineHealth, SpaceProbe, Statvfs};
use crate::version::{Version, WriteBatch, WriteOp};
use crate::{
    Durability, Engine, EngineStats, GcStats, MAX_KEY_LEN, Result, StorageError, WriteDurability,
    check_key,
};
use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, Slice};
use meridian_core::{Clock, SystemClock, Timestamp};
use parking_lot::{Condvar, MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};
use rustc_hash::FxHashMap;
use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Settings of a [`FjallEngine`].
#[derive(Clone, Debug)]
pub struct FjallConfig {
    /// Directory holding the LSM tree and its journal.
    pub path: PathBuf,
    /// When writes are forced to disk.
    pub durability: Durability,
    /// Writes are refused with [`StorageError::DiskFull`] while fewer bytes than this are free
    /// on the filesystem of `path`, so the disk never fills up under the engine (room is left
    /// for memtable flushes and compactions); 0: only an actual `ENOSPC` refuses writes. See
    /// the module docs, "A full disk".
    pub min_free_bytes: u64,
    /// How the free space is measured; `None`: `statvfs(2)` ([`Statvfs`]). Tests inject a
    /// full disk through [`crate::FaultySpace`].
    pub space: Option<Arc<dyn SpaceProbe>>,
}

impl FjallConfig {
    /// Settings with the default reserve ([`DEFAULT_MIN_FREE_BYTES`]) and `statvfs`.
    pub fn new(path: impl Into<PathBuf>, durability: Durability) -> Self {
        Self {
            path: path.into(),
            durability,
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            space: None,
        }
    }
}

/// The default free-space reserve: one memtable (64 MiB), the most a memtable flush writes.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// The name of the fjall keyspace holding every version.
const KEYSPACE: &str = "versions";
/// The name of the fjall keyspace indexing the latest version of every key.
const LATEST_KEYSPACE: &str = "latest";
/// Bytes of a latest-version index value.
const LATEST_LEN: usize = TS_LEN + 1;
/// Most batches one group commit applies at once.
const MAX_GROUP: usize = 256;
/// Bytes of keys the latest-version cache may hold before it is emptied.
const CACHE_BYTES: usize = 32 << 20;
/// Bytes a cache entry is counted for beyond its key.
const CACHE_ENTRY_OVERHEAD: usize = 48;
/// Index repairs the open-time check commits per fjall batch.
const REPAIR_CHUNK: usize = 4096;
/// Bytes of user key per group of the key encoding.
const GROUP: usize = 16;
/// Marker closing a group that is full and followed by more groups.
const MARKER_MORE: u8 = 0xFF;
/// Bytes of the timestamp suffix.
const TS_LEN: usize = 8;
/// Value tag of a tombstone.
const TAG_TOMBSTONE: u8 = 0;
/// Value tag of a value.
const TAG_VALUE: u8 = 1;
/// Entries a [`Engine::gc`] pass examines per hold of the writer mutex.
const GC_CHUNK: usize = 1024;
/// How often the `Everysec` policy fsyncs.
const EVERYSEC: Duration = Duration::from_secs(1);
/// How often the background thread measures the free space (and, while writes are refused
/// for want of it, checks whether they may resume).
pub const DISK_TICK: Duration = Duration::from_millis(250);
/// Bytes above the reserve that must be free before refused writes resume.
pub const RESUME_HEADROOM: u64 = 1 << 20;
/// A `Poisoned` fjall counts as a full disk if less than this above the reserve is free.
pub const LOW_SPACE: u64 = 64 << 20;
/// The write budget between two measurements is the headroom above the reserve divided by
/// this (a journal write is followed by a memtable flush writing the data again).
const BUDGET_DIVISOR: u64 = 2;
/// The least time between two attempts to reopen fjall.
const REOPEN_BACKOFF: Duration = Duration::from_secs(1);
/// Bytes a written entry is charged beyond its key and value, for the write budget.
const ENTRY_OVERHEAD: u64 = 32;

/// Appends the order-preserving, prefix-free encoding of `key` to `out`.
///
/// The key is cut into 16-byte groups; each full group that is followed by more bytes is
/// written as is plus the marker `0xFF`; the last group (possibly empty) is padded with zeros
/// to 16 bytes and followed by `0xFF - padding`. Comparing encodings bytewise compares the keys,
/// and no encoding is a prefix of another.
pub(crate) fn encode_key(key: &[u8], out: &mut Vec<u8>) {
    out.reserve((key.len() / GROUP + 1) * (GROUP + 1) + TS_LEN);
    let mut groups = key.chunks_exact(GROUP);
    for group in &mut groups {
        out.extend_from_slice(group);
        out.push(MARKER_MORE);
    }
    let rest = groups.remainder();
    let pad = GROUP - rest.len();
    out.extend_from_slice(rest);
    out.resize(out.len() + pad, 0);
    out.push(MARKER_MORE - pad as u8);
}

/// Decodes an encoding produced by [`encode_key`] (without the timestamp suffix).
pub(crate) fn decode_key(enc: &[u8]) -> Result<Bytes> {
    let corrupt = || StorageError::Corrupt(format!("bad key encoding ({} bytes)", enc.len()));
    if enc.is_empty() || !enc.len().is_multiple_of(GROUP + 1) {
        return Err(corrupt());
    }
    let mut key = Vec::with_capacity(enc.len() / (GROUP + 1) * GROUP);
    let groups = enc.len() / (GROUP + 1);
    for (i, group) in enc.chunks_exact(GROUP + 1).enumerate() {
        let marker = group[GROUP];
        let last = i + 1 == groups;
        if marker == MARKER_MORE && !last {
            key.extend_from_slice(&group[..GROUP]);
            continue;
        }
        let pad = usize::from(MARKER_MORE - marker);
        if !last || pad == 0 || pad > GROUP {
            return Err(corrupt());
        }
        key.extend_from_slice(&group[..GROUP - pad]);
    }
    Ok(Bytes::from(key))
}

/// The entry key of the version of `key` at `ts`.
fn entry_key(key: &[u8], ts: Timestamp) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(key, &mut out);
    out.extend_from_slice(&(u64::MAX - ts.0).to_be_bytes());
    out
}

/// Splits an entry key into the encoded user key and the version's timestamp.
fn split_entry_key(entry: &[u8]) -> Result<(&[u8], Timestamp)> {
    if entry.len() < GROUP + 1 + TS_LEN {
        return Err(StorageError::Corrupt(format!(
            "entry key of {} bytes is too short",
            entry.len()
        )));
    }
    let (enc, ts) = entry.split_at(entry.len() - TS_LEN);
    let mut be = [0u8; TS_LEN];
    be.copy_from_slice(ts);
    Ok((enc, Timestamp(u64::MAX - u64::from_be_bytes(be))))
}

/// The entry value of a version.
fn entry_value(value: Option<&Bytes>) -> Vec<u8> {
    match value {
        Some(v) => {
            let mut out = Vec::with_capacity(1 + v.len());
            out.push(TAG_VALUE);
            out.extend_from_slice(v);
            out
        }
        None => vec![TAG_TOMBSTONE],
    }
}

/// Decodes an entry value into the version at `ts`.
fn decode_version(ts: Timestamp, value: Slice) -> Result<Version> {
    match value.first() {
        Some(&TAG_VALUE) => Ok(Version {
            ts,
            value: Some(Bytes::from(value).slice(1..)),
        }),
        Some(&TAG_TOMBSTONE) if value.len() == 1 => Ok(Version { ts, value: None }),
        _ => Err(StorageError::Corrupt(format!(
            "bad version value (tag {:?}, {} bytes)",
            value.first(),
            value.len()
        ))),
    }
}

/// Whether an entry value is a tombstone.
fn is_tombstone_value(value: &[u8]) -> bool {
    value.first() == Some(&TAG_TOMBSTONE)
}

/// Approximate bytes one version occupies, for [`EngineStats::bytes`].
fn version_size(key_len: usize, value_len: usize) -> i64 {
    (key_len + value_len + TS_LEN) as i64
}

fn backend(e: fjall::Error) -> StorageError {
    match e {
        fjall::Error::Io(io) => StorageError::Io(io),
        other => StorageError::Backend(other.to_string()),
    }
}

/// A range of entry keys.
type EntryRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The encoded entry-key range covering the versions of the user keys in `(start, end)`, or
/// `None` if that range is empty.
fn entry_range(start: &Bound<Bytes>, end: &Bound<Bytes>) -> Option<EntryRange> {
    // A bound longer than any storable key would not fit fjall's key limit; cut to one byte
    // more than the longest key, it orders the same against every storable key (and never
    // equals one, so whether it is included stops mattering).
    let cut = |b: &Bound<Bytes>| match b {
        Bound::Included(k) if k.len() > MAX_KEY_LEN + 1 => {
            Bound::Included(k.slice(..MAX_KEY_LEN + 1))
        }
        Bound::Excluded(k) if k.len() > MAX_KEY_LEN + 1 => {
            Bound::Excluded(k.slice(..MAX_KEY_LEN + 1))
        }
        other => other.clone(),
    };
    let (start, end) = (&cut(start), &cut(end));
    if crate::is_empty_range(start, end) {
        return None;
    }
    // The versions of `k` lie in [enc(k), enc(k) ++ [0xFF; 8]].
    let first = |k: &Bytes| {
        let mut out = Vec::new();
        encode_key(k, &mut out);
        out
    };
    let last = |k: &Bytes| {
        let mut out = first(k);
        out.extend_from_slice(&[0xFF; TS_LEN]);
        out
    };
    let lo = match start {
        Bound::Included(k) => Bound::Included(first(k)),
        Bound::Excluded(k) => Bound::Excluded(last(k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let hi = match end {
        Bound::Included(k) => Bound::Included(last(k)),
        Bound::Excluded(k) => Bound::Excluded(first(k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    Some((lo, hi))
}

/// A key's latest version, as (timestamp, is a value).
type Latest = Option<(Timestamp, bool)>;

/// The latest-version index value of a version at `ts`.
fn latest_value(ts: Timestamp, live: bool) -> [u8; LATEST_LEN] {
    let mut out = [0u8; LATEST_LEN];
    out[..TS_LEN].copy_from_slice(&ts.0.to_be_bytes());
    out[TS_LEN] = if live { TAG_VALUE } else { TAG_TOMBSTONE };
    out
}

/// Decodes a latest-version index value.
fn decode_latest(value: &[u8]) -> Result<(Timestamp, bool)> {
    match value {
        [ts @ .., tag] if ts.len() == TS_LEN && (*tag == TAG_VALUE || *tag == TAG_TOMBSTONE) => {
            let mut be = [0u8; TS_LEN];
            be.copy_from_slice(ts);
            Ok((Timestamp(u64::from_be_bytes(be)), *tag == TAG_VALUE))
        }
        _ => Err(StorageError::Corrupt(format!(
            "bad latest-version index value ({} bytes)",
            value.len()
        ))),
    }
}

/// A bounded cache of the latest-version index, owned by the writer mutex: every entry is
/// exact (it is updated by every committed write and dropped by gc and clear), so a hit
/// replaces the index lookup. When it outgrows [`CACHE_BYTES`] it is simply emptied.
#[derive(Default)]
struct LatestCache {
    map: FxHashMap<Box<[u8]>, Latest>,
    bytes: usize,
}

impl LatestCache {
    fn get(&self, enc: &[u8]) -> Option<Latest> {
        self.map.get(enc).copied()
    }

    fn set(&mut self, enc: &[u8], latest: Latest) {
        if let Some(slot) = self.map.get_mut(enc) {
            *slot = latest;
            return;
        }
        if self.bytes >= CACHE_BYTES {
            self.clear();
        }
        self.bytes += enc.len() + CACHE_ENTRY_OVERHEAD;
        self.map.insert(enc.into(), latest);
    }

    fn remove(&mut self, enc: &[u8]) {
        self.map.remove(enc);
    }

    fn clear(&mut self) {
        self.map = FxHashMap::default();
        self.bytes = 0;
    }
}

/// One encoded write: (entry key, entry value, timestamp, is a value).
type PreparedEntry = (Vec<u8>, Vec<u8>, Timestamp, bool);

/// A batch validated and encoded by its writer, waiting to be committed.
struct Prepared {
    /// Sorted by entry key (so by user key, newest first), at most one entry per entry key
    /// (the batch's last write of it).
    entries: Vec<PreparedEntry>,
}

impl Prepared {
    fn new(batch: WriteBatch) -> Self {
        let mut entries: Vec<(PreparedEntry, usize)> = batch
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| {
                let value = match op {
                    WriteOp::Put { value, .. } => Some(value),
                    WriteOp::Delete { .. } => None,
                };
                (
                    (
                        entry_key(op.key(), op.ts()),
                        entry_value(value),
                        op.ts(),
                        value.is_some(),
                    ),
                    i,
                )
            })
            .collect();
        // A later write of the same key and timestamp wins: keep only the last one, since one
        // fjall batch must not hold a key twice.
        entries.sort_by(|a, b| a.0.0.cmp(&b.0.0).then(b.1.cmp(&a.1)));
        entries.dedup_by(|later, first| later.0.0 == first.0.0);
        Self {
            entries: entries.into_iter().map(|(entry, _)| entry).collect(),
        }
    }
}

/// The queue of the group commit.
#[derive(Default)]
struct CommitQueue {
    /// Batches waiting for a leader, with their tickets, in arrival order.
    pending: Vec<(u64, Prepared)>,
    /// Whether a leader is committing a group.
    leader: bool,
    /// The ticket of the next batch queued.
    next_ticket: u64,
    /// Results of committed batches whose writers have not picked them up yet.
    results: FxHashMap<u64, Result<()>>,
}

/// A copy of a group commit's result, for each follower of the group.
fn share_result(res: &Result<()>) -> Result<()> {
    match res {
        Ok(()) => Ok(()),
        Err(e) => Err(e.duplicate()),
    }
}

/// Posts the results of a group and ends its leadership, also if the leader panics.
struct LeaderGuard<'a> {
    engine: &'a Inner,
    tickets: Vec<u64>,
    result: Option<Result<()>>,
}

impl Drop for LeaderGuard<'_> {
    fn drop(&mut self) {
        let res = self
            .result
            .take()
            .unwrap_or_else(|| Err(StorageError::Backend("group commit panicked".into())));
        let mut q = self.engine.queue.lock();
        for t in &self.tickets {
            q.results.insert(*t, share_result(&res));
        }
        q.leader = false;
        drop(q);
        self.engine.queue_cv.notify_all();
    }
}

/// Writes handed to fjall, and how far they have been fsynced: the group commit of `Always`
/// and the state of the `Everysec` thread.
#[derive(Debug, Default)]
struct SyncState {
    /// Batches committed to the journal (and handed to the OS) so far.
    committed: AtomicU64,
    /// How many of those are known to be fsynced; held while fsyncing.
    synced: Mutex<u64>,
    /// Fsyncs done (for tests and benchmarks).
    fsyncs: AtomicU64,
}

impl SyncState {
    /// Fsyncs the journal unless every batch up to `upto` already is.
    fn sync_upto(&self, db: &Database, upto: u64) -> fjall::Result<()> {
        let mut synced = self.synced.lock();
        if *synced >= upto {
            return Ok(());
        }
        // Every batch counted in `committed` has reached the journal file before the count was
        // bumped, so this fsync covers all of them, not just ours.
        let target = self.committed.load(Ordering::Acquire);
        db.persist(PersistMode::SyncAll)?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        *synced = target;
        Ok(())
    }

    /// Fsyncs everything committed so far, unless it already is.
    fn sync_all(&self, db: &Database) -> fjall::Result<()> {
        self.sync_upto(db, self.committed.load(Ordering::Acquire))
    }

    /// Fsyncs the journal, whatever it holds.
    fn sync_force(&self, db: &Database) -> fjall::Result<()> {
        let mut synced = self.synced.lock();
        let target = self.committed.load(Ordering::Acquire);
        db.persist(PersistMode::SyncAll)?;
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        *synced = target;
        Ok(())
    }
}

/// The fjall handles. Replaced as a whole when the engine reopens its files after a full disk
/// made fjall refuse every write (see [`Inner::recover`]).
struct Store {
    db: Database,
    ks: Keyspace,
    /// The latest-version index (see the module docs).
    latest: Keyspace,
}

impl Store {
    fn open(path: &Path) -> Result<Self> {
        let db = Database::builder(path).open().map_err(backend)?;
        let ks = db
            .keyspace(KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(backend)?;
        let latest = db
            .keyspace(LATEST_KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(backend)?;
        Ok(Self { db, ks, latest })
    }
}

/// The free-space watch and the refusal of writes (see the module docs, "A full disk").
struct DiskWatch {
    probe: Arc<dyn SpaceProbe>,
    /// Writes are refused while fewer bytes than this are free (0: only on `ENOSPC`).
    reserve: AtomicU64,
    /// Bytes writes may still add before the free space is measured again; goes negative.
    budget: AtomicI64,
    /// Whether writes are refused: `state` is set (read on every write without the lock).
    refusing: AtomicBool,
    state: Mutex<Option<Refusal>>,
    /// The wall clock of [`Degraded::since_us`].
    clock: SystemClock,
}

/// Why writes are refused.
struct Refusal {
    /// A full disk, which the engine recovers from by itself; otherwise `failure` says what
    /// failed, and only a restart reopens the engine.
    disk_full: bool,
    /// What failed, as fjall or the OS said it.
    failure: String,
    /// Bytes free when last measured.
    available: u64,
    /// When writes started being refused (µs since the Unix epoch).
    since_us: u64,
    /// Whether fjall must be reopened from its files before writes resume: a write reached it
    /// and failed, after which fjall refuses every write ("poisoned").
    reopen: bool,
    /// Failures recorded (a resumption only proceeds if none came in the meantime).
    failures: u64,
    /// When the last reopen failed, for the back-off.
    last_attempt: Option<Instant>,
}

/// The engine's shared state: the [`FjallEngine`] handle and its background thread own it.
struct Inner {
    /// `None` only while the files are reopened after a full disk (or if that failed).
    store: RwLock<Option<Store>>,
    config: FjallConfig,
    /// Batches waiting for the group commit, and its state.
    queue: Mutex<CommitQueue>,
    /// Wakes writers waiting in the queue.
    queue_cv: Condvar,
    /// Serialises every mutation, so the counters stay exact; owns the latest-version cache.
    writer: Mutex<LatestCache>,
    sync: SyncState,
    disk: DiskWatch,
    /// The highest horizon announced; recorded only, as gc is not done inline.
    gc_horizon: AtomicU64,
    live_keys: AtomicI64,
    versions: AtomicI64,
    bytes: AtomicI64,
}

/// The background thread: the `Everysec` fsync, the free-space watch and the recovery from a
/// full disk.
struct Background {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Background {
    fn start(inner: Arc<Inner>) -> Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("meridian-fjall".into())
            .spawn(move || {
                let mut last_sync = Instant::now();
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(DISK_TICK) {
                    inner.tick();
                    if inner.config.durability == Durability::Everysec
                        && last_sync.elapsed() >= EVERYSEC
                    {
                        last_sync = Instant::now();
                        inner.sync_everysec();
                    }
                }
            })?;
        Ok(Self { stop, thread })
    }

    fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the fjall background thread panicked");
        }
    }
}

/// The durable engine. See the module docs.
pub struct FjallEngine {
    inner: Arc<Inner>,
    background: Option<Background>,
}

impl fmt::Debug for FjallEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("FjallEngine")
            .field("path", &inner.config.path)
            .field("durability", &inner.config.durability)
            .field("gc_horizon", &inner.gc_horizon.load(Ordering::Relaxed))
            .field("stats", &inner.stats())
            .field("health", &inner.health())
            .finish_non_exhaustive()
    }
}

impl FjallEngine {
    /// Opens (or creates) the engine in `config.path`, recovering what the journal holds and
    /// counting the live keys. Writes are refused at once if the free space is below
    /// `config.min_free_bytes`.
    pub fn open(config: FjallConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.path)?;
        let store = Store::open(&config.path)?;
        let probe: Arc<dyn SpaceProbe> = config.space.clone().unwrap_or_else(|| Arc::new(Statvfs));
        let inner = Arc::new(Inner {
            store: RwLock::new(Some(store)),
            disk: DiskWatch {
                probe,
                reserve: AtomicU64::new(config.min_free_bytes),
                budget: AtomicI64::new(0),
                refusing: AtomicBool::new(false),
                state: Mutex::new(None),
                clock: SystemClock::new(),
            },
            config,
            queue: Mutex::new(CommitQueue::default()),
            queue_cv: Condvar::new(),
            writer: Mutex::new(LatestCache::default()),
            sync: SyncState::default(),
            gc_horizon: AtomicU64::new(0),
            live_keys: AtomicI64::new(0),
            versions: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
        });
        {
            let mut w = inner.writer.lock();
            inner.recount(&mut w)?;
        }
        inner.measure();
        let background = Some(Background::start(inner.clone())?);
        Ok(Self { inner, background })
    }

    /// The settings this engine was opened with (the reserve as opened, see
    /// [`FjallEngine::min_free_bytes`]).
    pub fn config(&self) -> &FjallConfig {
        &self.inner.config
    }

    /// The free-space reserve below which writes are refused.
    pub fn min_free_bytes(&self) -> u64 {
        self.inner.disk.reserve.load(Ordering::Relaxed)
    }

    /// Changes the free-space reserve; takes effect at once (refusing writes, or resuming
    /// them if the space is there).
    pub fn set_min_free_bytes(&self, bytes: u64) {
        self.inner.disk.reserve.store(bytes, Ordering::Relaxed);
        self.inner.tick();
    }

    /// Moves the in-memory table into a disk table and waits until it is written. fjall does
    /// this by itself when the memtable reaches 64 MiB; tests call it to exercise reads that
    /// merge memory and disk. (It relies on a fjall API that is public but `doc(hidden)`.)
    #[doc(hidden)]
    pub fn flush_memtable(&self) -> Result<()> {
        let st = self.inner.store()?;
        st.ks.rotate_memtable_and_wait().map_err(backend)?;
        st.latest.rotate_memtable_and_wait().map_err(backend)
    }
}

impl Inner {
    /// The fjall handles, for one operation.
    fn store(&self) -> Result<MappedRwLockReadGuard<'_, Store>> {
        RwLockReadGuard::try_map(self.store.read(), Option::as_ref).map_err(|_| {
            StorageError::Backend(format!(
                "the storage engine at {} is closed: reopening it after a full disk failed; \
                 it is retried while space is free",
                self.config.path.display()
            ))
        })
    }

    /// Recomputes the counters by a full scan, and checks the latest-version index against
    /// the versions, repairing it where it differs. The caller holds the writer mutex.
    fn recount(&self, _writer: &mut LatestCache) -> Result<()> {
        let st = self.store()?;
        let snap = st.db.snapshot();
        let (mut live, mut versions, mut bytes) = (0i64, 0i64, 0i64);
        let mut current: Option<Slice> = None;
        let mut repair = IndexRepair::new(&st, snap.iter(&st.latest));
        for guard in snap.iter(&st.ks) {
            let (k, v) = guard.into_inner().map_err(backend)?;
            let (enc, ts) = split_entry_key(&k)?;
            versions += 1;
            bytes += version_size(enc.len(), v.len().saturating_sub(1));
            let same = current
                .as_ref()
                .is_some_and(|c| &c[..c.len() - TS_LEN] == enc);
            if !same {
                // The first version of a key is its latest.
                let is_live = !is_tombstone_value(&v);
                live += i64::from(is_live);
                repair.key(enc, ts, is_live)?;
                current = Some(k);
            }
        }
        repair.finish()?;
        self.live_keys.store(live, Ordering::Relaxed);
        self.versions.store(versions, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The latest version of the key encoded as `enc`, from the cache or the index. Only exact
    /// under the writer mutex, whose cache `cache` is.
    fn latest_of(&self, st: &Store, cache: &mut LatestCache, enc: &[u8]) -> Result<Latest> {
        if let Some(hit) = cache.get(enc) {
            return Ok(hit);
        }
        let latest = match st.latest.get(enc).map_err(backend)? {
            None => None,
            Some(v) => Some(decode_latest(&v)?),
        };
        cache.set(enc, latest);
        Ok(latest)
    }

    /// Queues `prepared` for the group commit and returns once it is committed (and, under
    /// `Always`, fsynced), leading the commit of a group if no other writer is.
    fn submit(&self, prepared: Prepared) -> Result<()> {
        let mut q = self.queue.lock();
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.pending.push((ticket, prepared));
        loop {
            if let Some(res) = q.results.remove(&ticket) {
                return res;
            }
            if !q.leader {
                // A leader posts its group's results before it steps down, so this batch is
                // still pending: lead its group.
                break;
            }
            self.queue_cv.wait(&mut q);
        }
        q.leader = true;
        let n = q.pending.len().min(MAX_GROUP);
        let group: Vec<(u64, Prepared)> = q.pending.drain(..n).collect();
        drop(q);
        let mut guard = LeaderGuard {
            engine: self,
            tickets: group
                .iter()
                .map(|(t, _)| *t)
                .filter(|t| *t != ticket)
                .collect(),
            result: None,
        };
        let res = self.commit_group(&group);
        guard.result = Some(share_result(&res));
        drop(guard);
        res
    }

    /// Commits a group of batches as one fjall batch, then makes it durable as the policy says.
    fn commit_group(&self, group: &[(u64, Prepared)]) -> Result<()> {
        // Every entry of the group, by entry key; for an entry key written by several batches
        // only the last batch's write is kept (one fjall batch must not hold a key twice).
        let mut entries: Vec<(usize, usize)> = Vec::new();
        if let [(_, single)] = group {
            entries.extend((0..single.entries.len()).map(|i| (0, i)));
        } else {
            for (g, (_, p)) in group.iter().enumerate() {
                entries.extend((0..p.entries.len()).map(|i| (g, i)));
            }
            let key = |&(g, i): &(usize, usize)| &group[g].1.entries[i].0;
            entries.sort_by(|a, b| key(a).cmp(key(b)).then(b.0.cmp(&a.0)));
            entries.dedup_by(|later, first| key(later) == key(first));
        }

        let mut w = self.writer.lock();
        // Writes refused since these batches were admitted (fjall may be poisoned) are not
        // handed to it.
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let st = self.store()?;
        let mut fjall_batch = st.db.batch();
        let (mut live, mut versions, mut bytes) = (0i64, 0i64, 0i64);
        // The keys whose latest version the group changes, for the cache once committed.
        let mut changed: Vec<(&[u8], Latest)> = Vec::new();
        // The key being written and its latest version before the group; the entries of a key
        // are contiguous, newest first.
        let mut current: Option<(&[u8], Latest)> = None;
        for &(g, i) in &entries {
            let (entry, value, ts, put) = &group[g].1.entries[i];
            let enc = &entry[..entry.len() - TS_LEN];
            let before = match current {
                Some((c, before)) if c == enc => before,
                _ => {
                    // The newest write of this key in the group.
                    let before = self.latest_of(&st, &mut w, enc)?;
                    if before.is_none_or(|(t, _)| *ts >= t) {
                        fjall_batch.insert(&st.latest, enc, latest_value(*ts, *put).as_slice());
                        live += i64::from(*put) - i64::from(before.is_some_and(|(_, l)| l));
                        changed.push((enc, Some((*ts, *put))));
                    }
                    current = Some((enc, before));
                    before
                }
            };
            if before.is_none_or(|(t, _)| t != *ts) {
                versions += 1;
            }
            bytes += version_size(enc.len(), value.len() - 1);
            fjall_batch.insert(&st.ks, entry.as_slice(), value.as_slice());
        }
        if let Some(fault) = self.disk.probe.write_fault() {
            // The fault seam: fail as the journal write would have.
            drop(fjall_batch);
            return Err(self.write_failed(fjall::Error::Io(fault)));
        }
        fjall_batch.commit().map_err(|e| self.write_failed(e))?;
        for (enc, latest) in changed {
            w.set(enc, latest);
        }
        self.live_keys.fetch_add(live, Ordering::Relaxed);
        self.versions.fetch_add(versions, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let seq = self
            .sync
            .committed
            .fetch_add(group.len() as u64, Ordering::AcqRel)
            + group.len() as u64;
        drop(w);
        self.after_commit(&st, seq)
    }

    /// Makes a committed write durable as the policy says.
    fn after_commit(&self, st: &Store, seq: u64) -> Result<()> {
        match self.config.durability {
            Durability::Always => self
                .sync
                .sync_upto(&st.db, seq)
                .map_err(|e| self.write_failed(e)),
            Durability::Everysec | Durability::Never => Ok(()),
        }
    }

    /// The `Everysec` fsync of the background thread.
    fn sync_everysec(&self) {
        if self.disk.refusing.load(Ordering::Acquire) {
            return;
        }
        let Ok(st) = self.store() else { return };
        if let Err(e) = self.sync.sync_all(&st.db) {
            let e = self.write_failed(e);
            tracing::error!(error = %e, "fsync of the fjall journal failed");
        }
    }

    /// One chunk of a gc pass: examines about [`GC_CHUNK`] entries from `from` on, under the
    /// writer mutex, deletes what is dead, and returns where the next chunk starts.
    fn gc_chunk(
        &self,
        from: Bound<Vec<u8>>,
        horizon: Timestamp,
        stats: &mut GcStats,
    ) -> Result<Option<Bound<Vec<u8>>>> {
        let mut w = self.writer.lock();
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let st = self.store()?;
        let snap = st.db.snapshot();
        let mut dead = Vec::new();
        // The newest versions of the keys that disappear entirely.
        let mut gone: Vec<Slice> = Vec::new();
        // The versions of the key being examined, newest first.
        let mut group: Vec<GcEntry> = Vec::new();
        let mut next = None;
        let entries = snap.range(&st.ks, (from, Bound::<Vec<u8>>::Unbounded));
        for (seen, guard) in entries.enumerate() {
            let (key, v) = guard.into_inner().map_err(backend)?;
            let (enc, ts) = split_entry_key(&key)?;
            if group.first().is_some_and(|g| g.enc() != enc) {
                collect_dead(&mut group, horizon, &mut dead, &mut gone, stats);
                if seen >= GC_CHUNK {
                    next = Some(Bound::Included(enc.to_vec()));
                    break;
                }
            }
            group.push(GcEntry {
                ts,
                value_len: v.len().saturating_sub(1),
                tombstone: is_tombstone_value(&v),
                key,
            });
        }
        if next.is_none() {
            collect_dead(&mut group, horizon, &mut dead, &mut gone, stats);
        }
        if !dead.is_empty() {
            let mut batch = st.db.batch();
            for enc in gone {
                w.remove(&enc);
                batch.remove(&st.latest, enc);
            }
            let (mut versions, mut bytes) = (0i64, 0i64);
            for entry in dead {
                versions -= 1;
                bytes -= version_size(entry.enc().len(), entry.value_len);
                batch.remove(&st.ks, entry.key);
            }
            batch.commit().map_err(|e| self.write_failed(e))?;
            self.versions.fetch_add(versions, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(next)
    }

    // ---- A full disk ----

    /// Whether a write failed in fjall since it was (re)opened, which then refuses every
    /// write and fsync.
    fn poisoned(&self) -> bool {
        self.disk.refusing.load(Ordering::Acquire)
            && self.disk.state.lock().as_ref().is_some_and(|r| r.reopen)
    }

    /// The error writes are refused with, if they are.
    fn refused(&self) -> Option<StorageError> {
        if !self.disk.refusing.load(Ordering::Acquire) {
            return None;
        }
        self.disk
            .state
            .lock()
            .as_ref()
            .map(|r| self.refusal_error(r))
    }

    fn refusal_error(&self, r: &Refusal) -> StorageError {
        if r.disk_full {
            StorageError::DiskFull {
                path: self.config.path.clone(),
                available: r.available,
                reserve: self.disk.reserve.load(Ordering::Relaxed),
            }
        } else {
            StorageError::Backend(format!(
                "the storage engine failed ({}); writes are refused until the node is restarted",
                r.failure
            ))
        }
    }

    /// Lets a write of about `cost` bytes through, or refuses it: while writes are refused,
    /// or when the free space, measured again once the bytes written since the last
    /// measurement may have used up the headroom, is below the reserve.
    fn admit(&self, cost: u64) -> Result<()> {
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let cost = i64::try_from(cost).unwrap_or(i64::MAX);
        if self.disk.budget.fetch_sub(cost, Ordering::Relaxed) < cost {
            self.measure();
            if let Some(refused) = self.refused() {
                return Err(refused);
            }
        }
        Ok(())
    }

    /// Measures the free space: renews the write budget, refuses writes if the space is below
    /// the reserve, and returns it (`None` if the probe failed).
    fn measure(&self) -> Option<u64> {
        let available = match self.disk.probe.available(&self.config.path) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, path = %self.config.path.display(),
                    "cannot measure the free space of the data directory");
                return None;
            }
        };
        let reserve = self.disk.reserve.load(Ordering::Relaxed);
        let headroom = available.saturating_sub(reserve) / BUDGET_DIVISOR;
        self.disk.budget.store(
            i64::try_from(headroom).unwrap_or(i64::MAX),
            Ordering::Relaxed,
        );
        let mut state = self.disk.state.lock();
        match state.as_mut() {
            Some(r) => r.available = available,
            None if available < reserve => {
                drop(state);
                self.refuse(
                    true,
                    format!("{available} bytes free, below the reserve of {reserve} bytes"),
                    available,
                    false,
                );
            }
            None => {}
        }
        Some(available)
    }

    /// Records a failed write to fjall (which poisons it) and returns the error to answer:
    /// [`StorageError::DiskFull`] if the disk is full.
    fn write_failed(&self, e: fjall::Error) -> StorageError {
        let full = crate::disk::caused_by_full_disk(&e);
        // A failure fjall met in the background (flushing a memtable) surfaces as `Poisoned`:
        // a full disk if space is low.
        let low = |available: u64| {
            available
                < self
                    .disk
                    .reserve
                    .load(Ordering::Relaxed)
                    .saturating_add(LOW_SPACE)
        };
        let available = self.disk.probe.available(&self.config.path).unwrap_or(0);
        let disk_full = full || (matches!(e, fjall::Error::Poisoned) && low(available));
        self.refuse(disk_full, e.to_string(), available, true);
        self.refused().unwrap_or_else(|| backend(e))
    }

    /// Starts refusing writes (or, if they already are, notes the new failure).
    fn refuse(&self, disk_full: bool, failure: String, available: u64, reopen: bool) {
        let mut state = self.disk.state.lock();
        match state.as_mut() {
            Some(r) => {
                r.reopen |= reopen;
                r.failures += 1;
                r.available = available;
            }
            None => {
                let path = self.config.path.display();
                if disk_full {
                    tracing::error!(%path, available, %failure,
                        "the disk is full: writes are refused until space returns");
                } else {
                    tracing::error!(%path, %failure,
                        "the storage engine failed: writes are refused until a restart");
                }
                *state = Some(Refusal {
                    disk_full,
                    failure,
                    available,
                    since_us: self.disk.clock.now().0,
                    reopen,
                    failures: 1,
                    last_attempt: None,
                });
            }
        }
        self.disk.refusing.store(true, Ordering::Release);
    }

    /// The background thread's check, a few times a second (and when the reserve changes):
    /// measures the free space, notices a failure fjall met in the background, and resumes
    /// writes when the disk has room again, reopening fjall first if a write failed.
    fn tick(&self) {
        let Some(available) = self.measure() else {
            return;
        };
        let (reopen, failures) = {
            let state = self.disk.state.lock();
            let Some(r) = state.as_ref() else {
                drop(state);
                // Flushes nothing new; fails if fjall was poisoned in the background.
                if let Ok(st) = self.store()
                    && let Err(e) = st.db.persist(PersistMode::Buffer)
                {
                    drop(st);
                    self.write_failed(e);
                }
                return;
            };
            let reserve = self.disk.reserve.load(Ordering::Relaxed);
            if !r.disk_full
                || available < reserve.saturating_add(RESUME_HEADROOM)
                || r.last_attempt.is_some_and(|t| t.elapsed() < REOPEN_BACKOFF)
            {
                return;
            }
            (r.reopen, r.failures)
        };
        if reopen && let Err(e) = self.recover() {
            tracing::error!(error = %e, path = %self.config.path.display(),
                "reopening the storage engine after a full disk failed; retrying");
            if let Some(r) = self.disk.state.lock().as_mut() {
                r.last_attempt = Some(Instant::now());
            }
            return;
        }
        let mut state = self.disk.state.lock();
        if state.as_ref().is_some_and(|r| r.failures == failures) {
            *state = None;
            self.disk.refusing.store(false, Ordering::Release);
            tracing::info!(path = %self.config.path.display(), available,
                "the disk has room again: writes resume");
        }
    }

    /// Reopens fjall from its files, after a write failed for want of space: opening
    /// recovers the journal (dropping a partial last record), and the counters and the index
    /// are checked again. Writes wait; reads wait only for the open.
    fn recover(&self) -> Result<()> {
        let mut w = self.writer.lock();
        {
            let mut slot = self.store.write();
            drop(slot.take());
            *slot = Some(Store::open(&self.config.path)?);
        }
        w.clear();
        self.recount(&mut w)?;
        // What the journal holds now is fsynced, as after an open.
        let st = self.store()?;
        self.sync.sync_force(&st.db).map_err(backend)?;
        tracing::info!(path = %self.config.path.display(),
            "reopened the storage engine after a full disk");
        Ok(())
    }

    fn health(&self) -> EngineHealth {
        if !self.disk.refusing.load(Ordering::Acquire) {
            return EngineHealth::Ok;
        }
        let state = self.disk.state.lock();
        let Some(r) = state.as_ref() else {
            return EngineHealth::Ok;
        };
        let path = self.config.path.display();
        let reserve = self.disk.reserve.load(Ordering::Relaxed);
        let reason = if r.disk_full {
            let why = if r.reopen {
                "a write failed with no space left on device".to_string()
            } else {
                format!("below the free-space reserve of {reserve} bytes")
            };
            format!(
                "disk full: {} bytes free on {path} ({why}); writes are refused until space \
                 returns",
                r.available
            )
        } else {
            format!(
                "storage engine failed on {path} ({}); writes are refused until the node is \
                 restarted",
                r.failure
            )
        };
        EngineHealth::Degraded(Degraded {
            disk_full: r.disk_full,
            reason,
            since_us: r.since_us,
            recovers: r.disk_full,
        })
    }
}

/// The open-time check of the latest-version index: fed the latest version of every key in
/// key order, it walks the index alongside and repairs what differs.
struct IndexRepair<'a> {
    store: &'a Store,
    index: fjall::Iter,
    /// The index entry not yet compared.
    next: Option<(Slice, Slice)>,
    fixes: fjall::OwnedWriteBatch,
    repaired: u64,
}

impl<'a> IndexRepair<'a> {
    fn new(store: &'a Store, index: fjall::Iter) -> Self {
        Self {
            store,
            index,
            next: None,
            fixes: store.db.batch(),
            repaired: 0,
        }
    }

    /// The index entry not yet compared, if any.
    fn peek(&mut self) -> Result<Option<&(Slice, Slice)>> {
        if self.next.is_none()
            && let Some(guard) = self.index.next()
        {
            self.next = Some(guard.into_inner().map_err(backend)?);
        }
        Ok(self.next.as_ref())
    }

    fn fix(&mut self, f: impl FnOnce(&mut fjall::OwnedWriteBatch, &Keyspace)) -> Result<()> {
        f(&mut self.fixes, &self.store.latest);
        self.repaired += 1;
        if self.fixes.len() >= REPAIR_CHUNK {
            let full = std::mem::replace(&mut self.fixes, self.store.db.batch());
            full.commit().map_err(backend)?;
        }
        Ok(())
    }

    /// The key encoded as `enc`, whose latest version is at `ts`, is a value if `live`.
    fn key(&mut self, enc: &[u8], ts: Timestamp, live: bool) -> Result<()> {
        // Index entries of keys without versions go.
        while let Some((k, _)) = self.peek()?
            && &k[..] < enc
        {
            let k = k.clone();
            self.next = None;
            self.fix(|b, ks| b.remove(ks, k))?;
        }
        let want = latest_value(ts, live);
        let matches = match self.peek()? {
            Some((k, v)) if &k[..] == enc => {
                let ok = v[..] == want[..];
                self.next = None;
                ok
            }
            _ => false,
        };
        if !matches {
            self.fix(|b, ks| b.insert(ks, enc, want.as_slice()))?;
        }
        Ok(())
    }

    /// Removes the index entries after the last key, and commits the repairs.
    fn finish(mut self) -> Result<()> {
        while let Some((k, _)) = self.peek()? {
            let k = k.clone();
            self.next = None;
            self.fix(|b, ks| b.remove(ks, k))?;
        }
        if !self.fixes.is_empty() {
            self.fixes.commit().map_err(backend)?;
        }
        if self.repaired > 0 {
            tracing::info!(entries = self.repaired, "repaired the latest-version index");
        }
        Ok(())
    }
}

/// One version met by a gc pass.
struct GcEntry {
    /// The entry key.
    key: Slice,
    ts: Timestamp,
    value_len: usize,
    tombstone: bool,
}

impl GcEntry {
    /// The encoded user key.
    fn enc(&self) -> &[u8] {
        &self.key[..self.key.len() - TS_LEN]
    }
}

/// Moves the versions of `group` (one key's, newest first) that no read at or above `horizon`
/// can see into `dead` (and the key's encoding into `gone` if none remains), and empties
/// `group`.
fn collect_dead(
    group: &mut Vec<GcEntry>,
    horizon: Timestamp,
    dead: &mut Vec<GcEntry>,
    gone: &mut Vec<Slice>,
    stats: &mut GcStats,
) {
    // The newest version at or below the horizon is what reads at the horizon see; every
    // older one is invisible to reads at or above it.
    let Some(visible) = group.iter().position(|g| g.ts <= horizon) else {
        group.clear();
        return;
    };
    let mut from = visible + 1;
    if visible == 0 && group[0].tombstone {
        // All that remains is a tombstone at or below the horizon: the key goes.
        from = 0;
        stats.keys_removed += 1;
        let key = &group[0].key;
        gone.push(key.slice(..key.len() - TS_LEN));
    }
    let before = dead.len();
    dead.extend(group.drain(..).skip(from));
    stats.versions_removed += (dead.len() - before) as u64;
}

impl Drop for FjallEngine {
    fn drop(&mut self) {
        if let Some(background) = self.background.take() {
            background.stop();
        }
        if self.inner.poisoned() {
            // A poisoned fjall refuses the fsync; its journal fsyncs itself as it closes.
            return;
        }
        let res = match self.inner.store() {
            Ok(st) => self.inner.sync.sync_force(&st.db).map_err(backend),
            Err(e) => Err(e),
        };
        if let Err(e) = res {
            tracing::error!(error = %e, path = %self.inner.config.path.display(),
                "final fsync of the fjall journal failed");
        }
    }
}

impl Inner {
    fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        for op in &batch.ops {
            check_key(op.key())?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        let cost = batch
            .ops
            .iter()
            .map(|op| {
                let value = match op {
                    WriteOp::Put { value, .. } => value.len(),
                    WriteOp::Delete { .. } => 0,
                };
                (op.key().len() + value) as u64 + ENTRY_OVERHEAD
            })
            .sum();
        self.admit(cost)?;
        // Encode outside every lock, then hand over to the group commit.
        self.submit(Prepared::new(batch))
    }

    fn get(&self, key: &[u8], at: Timestamp) -> Result<Option<Version>> {
        if key.len() > MAX_KEY_LEN {
            // Never stored, and too long for a fjall key.
            return Ok(None);
        }
        let lo = entry_key(key, at);
        let mut hi = lo.clone();
        let n = hi.len();
        hi[n - TS_LEN..].fill(0xFF);
        let st = self.store()?;
        let snap = st.db.snapshot();
        let Some(guard) = snap.range(&st.ks, lo..=hi).next() else {
            return Ok(None);
        };
        let (k, v) = guard.into_inner().map_err(backend)?;
        let (_, ts) = split_entry_key(&k)?;
        decode_version(ts, v).map(Some)
    }

    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> Result<Vec<(Bytes, Version)>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let Some(range) = entry_range(&start, &end) else {
            return Ok(out);
        };
        let st = self.store()?;
        let snap = st.db.snapshot();
        // The entry key of the first version seen of the current user key, and whether the
        // version visible at `at` was found already.
        let mut current: Option<Slice> = None;
        let mut found = false;
        for guard in snap.range(&st.ks, range) {
            let (k, v) = guard.into_inner().map_err(backend)?;
            let (enc, ts) = split_entry_key(&k)?;
            let same = current
                .as_ref()
                .is_some_and(|c| &c[..c.len() - TS_LEN] == enc);
            if !same {
                found = false;
                current = Some(k.clone());
            }
            if found || ts > at {
                continue;
            }
            found = true;
            let version = decode_version(ts, v)?;
            if version.is_tombstone() && !include_tombstones {
                continue;
            }
            out.push((decode_key(enc)?, version));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn versions(&self, key: &[u8]) -> Result<Vec<Version>> {
        if key.len() > MAX_KEY_LEN {
            return Ok(Vec::new());
        }
        let lo = entry_key(key, Timestamp::MAX);
        let mut hi = lo.clone();
        let n = hi.len();
        hi[n - TS_LEN..].fill(0xFF);
        let st = self.store()?;
        let snap = st.db.snapshot();
        let mut out = Vec::new();
        for guard in snap.range(&st.ks, lo..=hi) {
            let (k, v) = guard.into_inner().map_err(backend)?;
            let (_, ts) = split_entry_key(&k)?;
            out.push(decode_version(ts, v)?);
        }
        out.reverse();
        Ok(out)
    }

    fn gc(&self, horizon: Timestamp) -> Result<GcStats> {
        self.gc_horizon.fetch_max(horizon.0, Ordering::Relaxed);
        let mut stats = GcStats::default();
        let mut from = Bound::Unbounded;
        while let Some(next) = self.gc_chunk(from, horizon, &mut stats)? {
            from = next;
        }
        Ok(stats)
    }

    fn clear(&self) -> Result<()> {
        let mut w = self.writer.lock();
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let st = self.store()?;
        w.clear();
        // Not one journal record: a crash between the two leaves index entries without
        // versions, which the check at open removes.
        st.ks.clear().map_err(|e| self.write_failed(e))?;
        st.latest.clear().map_err(|e| self.write_failed(e))?;
        self.live_keys.store(0, Ordering::Relaxed);
        self.versions.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        let seq = self.sync.committed.fetch_add(1, Ordering::AcqRel) + 1;
        drop(w);
        self.after_commit(&st, seq)
    }

    fn flush(&self) -> Result<()> {
        // Refused only when fjall was poisoned (it refuses fsyncs too); below the reserve,
        // fsyncing what was acknowledged is still right.
        if self.poisoned()
            && let Some(refused) = self.refused()
        {
            return Err(refused);
        }
        // Forced: also covers writes the counter does not know of (gc deletions).
        let st = self.store()?;
        self.sync
            .sync_force(&st.db)
            .map_err(|e| self.write_failed(e))
    }

    fn sync_written(&self) -> Result<()> {
        if self.config.durability == Durability::Always {
            return Ok(());
        }
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let st = self.store()?;
        self.sync.sync_all(&st.db).map_err(|e| self.write_failed(e))
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            live_keys: self.live_keys.load(Ordering::Relaxed).max(0) as u64,
            versions: self.versions.load(Ordering::Relaxed).max(0) as u64,
            bytes: self.bytes.load(Ordering::Relaxed).max(0) as u64,
        }
    }
}

impl Engine for FjallEngine {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        self.inner.write_batch(batch)
    }

    fn get(&self, key: &[u8], at: Timestamp) -> Result<Option<Version>> {
        self.inner.get(key, at)
    }

    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> Result<Vec<(Bytes, Version)>> {
        self.inner.scan(start, end, at, limit, include_tombstones)
    }

    fn versions(&self, key: &[u8]) -> Result<Vec<Version>> {
        self.inner.versions(key)
    }

    fn set_gc_horizon(&self, horizon: Timestamp) {
        self.inner
            .gc_horizon
            .fetch_max(horizon.0, Ordering::Relaxed);
    }

    fn gc(&self, horizon: Timestamp) -> Result<GcStats> {
        self.inner.gc(horizon)
    }

    fn clear(&self) -> Result<()> {
        self.inner.clear()
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    fn write_durability(&self) -> WriteDurability {
        match self.inner.config.durability {
            Durability::Always => WriteDurability::OnReturn,
            Durability::Everysec | Durability::Never => WriteDurability::OnSync,
        }
    }

    fn sync_written(&self) -> Result<()> {
        self.inner.sync_written()
    }

    fn stats(&self) -> EngineStats {
        self.inner.stats()
    }

    fn health(&self) -> EngineHealth {
        self.inner.health()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(k: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_key(k, &mut out);
        out
    }

    #[test]
    fn encoding_round_trips_edge_keys() {
        for len in [0, 1, 15, 16, 17, 31, 32, 33] {
            for byte in [0x00, 0x01, 0xFE, 0xFF] {
                let key = vec![byte; len];
                let e = enc(&key);
                assert_eq!(e.len() % (GROUP + 1), 0);
                assert_eq!(&decode_key(&e).unwrap()[..], &key[..]);
            }
        }
    }

    #[test]
    fn the_longest_key_fits_fjall() {
        let key = vec![0u8; crate::MAX_KEY_LEN];
        assert!(entry_key(&key, Timestamp(1)).len() <= usize::from(u16::MAX));
    }

    #[test]
    fn corrupt_encodings_are_rejected() {
        assert!(decode_key(&[]).is_err());
        assert!(decode_key(&[0; 5]).is_err());
        let mut e = enc(b"abc");
        *e.last_mut().unwrap() = MARKER_MORE;
        assert!(decode_key(&e).is_err());
    }

    fn engine(durability: Durability) -> (tempfile::TempDir, FjallEngine) {
        let dir = tempfile::tempdir().unwrap();
        let e = FjallEngine::open(FjallConfig::new(dir.path().join("db"), durability)).unwrap();
        (dir, e)
    }

    #[test]
    fn always_has_fsynced_every_write_when_it_returns() {
        let (_dir, e) = engine(Durability::Always);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let e = &e;
                s.spawn(move || {
                    for i in 0..50u64 {
                        let before = e.inner.sync.committed.load(Ordering::Acquire);
                        e.put(Bytes::from(vec![t]), Timestamp(i), Bytes::new())
                            .unwrap();
                        // This write's sequence number is above `before`, and is covered.
                        assert!(*e.inner.sync.synced.lock() > before);
                    }
                });
            }
        });
        assert_eq!(*e.inner.sync.synced.lock(), 200);
    }

    #[test]
    fn never_leaves_fsync_to_flush() {
        let (_dir, e) = engine(Durability::Never);
        e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
            .unwrap();
        assert_eq!(*e.inner.sync.synced.lock(), 0);
        e.flush().unwrap();
        assert_eq!(*e.inner.sync.synced.lock(), 1);
    }

    #[test]
    fn sync_written_fsyncs_what_returned_once_and_only_when_the_policy_has_not() {
        let fsyncs = |e: &FjallEngine| e.inner.sync.fsyncs.load(Ordering::Relaxed);
        for durability in [Durability::Everysec, Durability::Never] {
            let (_dir, e) = engine(durability);
            assert_eq!(e.write_durability(), WriteDurability::OnSync);
            e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
                .unwrap();
            let before = fsyncs(&e);
            e.sync_written().unwrap();
            assert_eq!(*e.inner.sync.synced.lock(), 1);
            assert!(fsyncs(&e) > before);
            // Nothing new since: no second fsync.
            let after = fsyncs(&e);
            e.sync_written().unwrap();
            assert_eq!(fsyncs(&e), after);
        }
        let (_dir, e) = engine(Durability::Always);
        assert_eq!(e.write_durability(), WriteDurability::OnReturn);
        e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
            .unwrap();
        let after = fsyncs(&e);
        e.sync_written().unwrap();
        assert_eq!(fsyncs(&e), after);
    }

    /// The live keys as of now, counted by a scan.
    fn scanned_live(e: &FjallEngine) -> u64 {
        e.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            false,
        )
        .unwrap()
        .len() as u64
    }

    /// The latest-version index, as (user key, ts, is a value).
    fn index_of(e: &FjallEngine) -> Vec<(Bytes, u64, bool)> {
        e.inner
            .store()
            .unwrap()
            .latest
            .iter()
            .map(|g| {
                let (k, v) = g.into_inner().unwrap();
                let (ts, live) = decode_latest(&v).unwrap();
                (decode_key(&k).unwrap(), ts.0, live)
            })
            .collect()
    }

    fn bs(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn the_index_is_repaired_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let config = FjallConfig::new(dir.path().join("db"), Durability::Never);
        let expected = {
            let e = FjallEngine::open(config.clone()).unwrap();
            e.put(bs("a"), Timestamp(1), bs("1")).unwrap();
            e.put(bs("a"), Timestamp(3), bs("3")).unwrap();
            e.put(bs("b"), Timestamp(2), bs("2")).unwrap();
            e.delete(bs("b"), Timestamp(4)).unwrap();
            e.put(bs("c"), Timestamp(5), bs("5")).unwrap();
            e.put(bs("d"), Timestamp(6), bs("6")).unwrap();
            let expected = index_of(&e);
            assert_eq!(
                expected,
                vec![
                    (bs("a"), 3, true),
                    (bs("b"), 4, false),
                    (bs("c"), 5, true),
                    (bs("d"), 6, true)
                ]
            );
            // Damage the index: a missing entry, a wrong one, one without versions.
            let st = e.inner.store().unwrap();
            st.latest.remove(enc(b"a")).unwrap();
            st.latest
                .insert(enc(b"c"), latest_value(Timestamp(1), false).as_slice())
                .unwrap();
            st.latest
                .insert(enc(b"zz"), latest_value(Timestamp(9), true).as_slice())
                .unwrap();
            drop(st);
            expected
        };
        let e = FjallEngine::open(config.clone()).unwrap();
        assert_eq!(index_of(&e), expected);
        assert_eq!(e.stats().live_keys, 3);
        // A database without the index (as written before it existed) gets it built.
        e.inner.store().unwrap().latest.clear().unwrap();
        drop(e);
        let e = FjallEngine::open(config).unwrap();
        assert_eq!(index_of(&e), expected);
        e.delete(bs("a"), Timestamp(7)).unwrap();
        e.put(bs("b"), Timestamp(7), bs("7")).unwrap();
        assert_eq!(e.stats().live_keys, 3);
        assert_eq!(scanned_live(&e), 3);
    }

    #[test]
    fn gc_removes_the_index_entry_of_a_key_it_removes() {
        let (_dir, e) = engine(Durability::Never);
        e.put(bs("k"), Timestamp(1), bs("v")).unwrap();
        e.delete(bs("k"), Timestamp(2)).unwrap();
        e.put(bs("j"), Timestamp(1), bs("v")).unwrap();
        e.put(bs("j"), Timestamp(2), bs("w")).unwrap();
        let stats = e.gc(Timestamp(3)).unwrap();
        assert_eq!(stats.keys_removed, 1);
        assert_eq!(index_of(&e), vec![(bs("j"), 2, true)]);
        assert_eq!(e.stats().live_keys, 1);
        e.put(bs("k"), Timestamp(4), bs("again")).unwrap();
        assert_eq!(e.stats().live_keys, 2);
        // Older than the latest version: not the latest, and not live.
        e.delete(bs("j"), Timestamp(1)).unwrap();
        assert_eq!(e.stats().live_keys, 2);
        e.clear().unwrap();
        assert!(index_of(&e).is_empty());
        e.put(bs("k"), Timestamp(5), bs("v")).unwrap();
        assert_eq!(e.stats().live_keys, 1);
    }

    #[test]
    fn many_writers_keep_live_keys_exact_through_group_commit() {
        let (dir, e) = engine(Durability::Always);
        std::thread::scope(|s| {
            for t in 0..16u64 {
                let e = &e;
                s.spawn(move || {
                    for i in 0..60u64 {
                        let key = bs(&format!("k{}", (t * 7 + i) % 40));
                        let ts = Timestamp(1 + (i * 16 + t) % 97);
                        if (i + t).is_multiple_of(3) {
                            e.delete(key, ts).unwrap();
                        } else {
                            let mut batch = WriteBatch::new();
                            batch.put(key.clone(), ts, bs("v"));
                            batch.put(bs(&format!("k{}", (t + i) % 40)), ts, bs("w"));
                            batch.delete(key, ts);
                            batch.put(bs(&format!("k{}", (t + i) % 40)), ts, bs("x"));
                            e.write_batch(batch).unwrap();
                        }
                    }
                });
            }
        });
        assert_eq!(e.stats().live_keys, scanned_live(&e));
        let index = index_of(&e);
        for (k, ts, live) in &index {
            let v = e.get_latest(k).unwrap().unwrap();
            assert_eq!((v.ts.0, v.value.is_some()), (*ts, *live));
        }
        // Every write was acknowledged after an fsync covering it, in fewer fsyncs than writes.
        assert_eq!(*e.inner.sync.synced.lock(), 16 * 60);
        assert!(e.inner.sync.fsyncs.load(Ordering::Relaxed) <= 16 * 60);
        let live = e.stats().live_keys;
        let config = e.config().clone();
        drop(e);
        let e = FjallEngine::open(config).unwrap();
        assert_eq!(e.stats().live_keys, live);
        assert_eq!(index_of(&e), index);
        drop(dir);
    }

    /// A storage-level benchmark of concurrent durable writers:
    /// `cargo test --release -p meridian-storage --lib -- --ignored --nocapture bench_`.
    #[test]
    #[ignore = "benchmark"]
    fn bench_concurrent_writers() {
        for durability in [Durability::Always, Durability::Everysec] {
            for threads in [1u64, 2, 8, 32] {
                let (_dir, e) = engine(durability);
                let per_thread = match durability {
                    Durability::Always => 4000 / threads,
                    _ => 100_000 / threads,
                };
                let value = Bytes::from(vec![7u8; 500]);
                let start = std::time::Instant::now();
                std::thread::scope(|s| {
                    for t in 0..threads {
                        let (e, value) = (&e, value.clone());
                        s.spawn(move || {
                            for i in 0..per_thread {
                                let key =
                                    bs(&format!("key:{:012}", (i * 7919 + t * 104_729) % 100_000));
                                e.put(key, Timestamp(i * threads + t + 1), value.clone())
                                    .unwrap();
                            }
                        });
                    }
                });
                let elapsed = start.elapsed().as_secs_f64();
                let writes = per_thread * threads;
                let fsyncs = e.inner.sync.fsyncs.load(Ordering::Relaxed);
                println!(
                    "{durability:>8} {threads:>2} writers: {:>8.0} writes/s, {:.2} writes per fsync",
                    writes as f64 / elapsed,
                    writes as f64 / fsyncs.max(1) as f64
                );
            }
        }
    }

    proptest! {
        #[test]
        fn encoding_preserves_order_and_is_prefix_free(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 0..40),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 0..40),
            ta in any::<u64>(),
            tb in any::<u64>(),
        ) {
            let (ea, eb) = (enc(&a), enc(&b));
            prop_assert_eq!(a.cmp(&b), ea.cmp(&eb));
            if a != b {
                prop_assert!(!eb.starts_with(&ea) && !ea.starts_with(&eb));
            }
            let (ka, kb) = (entry_key(&a, Timestamp(ta)), entry_key(&b, Timestamp(tb)));
            let expected = a.cmp(&b).then(tb.cmp(&ta));
            prop_assert_eq!(ka.cmp(&kb), expected);
            prop_assert_eq!(&decode_key(&ea).unwrap()[..], &a[..]);
        }
    }
}
