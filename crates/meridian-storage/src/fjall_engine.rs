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

use crate::disk::{EngineHealth, SpaceProbe, Statvfs};
use crate::version::{Version, WriteBatch, WriteOp};
use crate::{
    Durability, Engine, EngineStats, GcStats, MAX_KEY_LEN, Result, StorageError, WriteDurability,
    check_key,
};
use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, Slice};
use meridian_core::{SystemClock, Timestamp};
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

mod encoding;
mod full_disk;
mod gc;
mod index_repair;

use encoding::{
    Latest, backend, decode_key, decode_latest, decode_version, entry_key, entry_range,
    entry_value, is_tombstone_value, latest_value, split_entry_key, version_size,
};
use index_repair::IndexRepair;

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
mod tests;
