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
//!   which reads each written key's latest version under one writer mutex (writes, [`Engine::gc`]
//!   and [`Engine::clear`] are serialised by it; reads never take it). `versions` and `bytes`
//!   are approximate between opens.
//!
//! Garbage collection is not done inline on writes (the horizon is only recorded): the server
//! runs [`Engine::gc`] periodically, which walks the keyspace in chunks, each under the writer
//! mutex, and deletes the versions no read at or above the horizon can see.

use crate::version::{Version, WriteBatch, WriteOp};
use crate::{
    Durability, Engine, EngineStats, GcStats, MAX_KEY_LEN, Result, StorageError, check_key,
};
use bytes::Bytes;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, Slice, Snapshot};
use meridian_core::Timestamp;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Settings of a [`FjallEngine`].
#[derive(Clone, Debug)]
pub struct FjallConfig {
    /// Directory holding the LSM tree and its journal.
    pub path: PathBuf,
    /// When writes are forced to disk.
    pub durability: Durability,
}

/// The name of the one fjall keyspace holding every version.
const KEYSPACE: &str = "versions";
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

/// The latest version of the key encoded as `enc`, as (timestamp, is a value).
fn latest_of(snap: &Snapshot, ks: &Keyspace, enc: &[u8]) -> Result<Option<(Timestamp, bool)>> {
    let mut hi = enc.to_vec();
    hi.extend_from_slice(&[0xFF; TS_LEN]);
    match snap.range(ks, enc..=&hi[..]).next() {
        None => Ok(None),
        Some(guard) => {
            let (k, v) = guard.into_inner().map_err(backend)?;
            let (_, ts) = split_entry_key(&k)?;
            Ok(Some((ts, !is_tombstone_value(&v))))
        }
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
}

impl SyncState {
    /// Fsyncs the journal unless every batch up to `upto` already is.
    fn sync_upto(&self, db: &Database, upto: u64) -> Result<()> {
        let mut synced = self.synced.lock();
        if *synced >= upto {
            return Ok(());
        }
        // Every batch counted in `committed` has reached the journal file before the count was
        // bumped, so this fsync covers all of them, not just ours.
        let target = self.committed.load(Ordering::Acquire);
        db.persist(PersistMode::SyncAll).map_err(backend)?;
        *synced = target;
        Ok(())
    }

    /// Fsyncs everything committed so far, unless it already is.
    fn sync_all(&self, db: &Database) -> Result<()> {
        self.sync_upto(db, self.committed.load(Ordering::Acquire))
    }

    /// Fsyncs the journal, whatever it holds.
    fn sync_force(&self, db: &Database) -> Result<()> {
        let mut synced = self.synced.lock();
        let target = self.committed.load(Ordering::Acquire);
        db.persist(PersistMode::SyncAll).map_err(backend)?;
        *synced = target;
        Ok(())
    }
}

/// The background thread of the `Everysec` policy.
struct Syncer {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Syncer {
    fn start(db: Database, state: Arc<SyncState>) -> Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("meridian-fsync".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERYSEC) {
                    if let Err(e) = state.sync_all(&db) {
                        tracing::error!(error = %e, "fsync of the fjall journal failed");
                    }
                }
            })?;
        Ok(Self { stop, thread })
    }

    fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the fjall fsync thread panicked");
        }
    }
}

/// The durable engine. See the module docs.
pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
    config: FjallConfig,
    /// Serialises every mutation, so the counters stay exact.
    writer: Mutex<()>,
    sync: Arc<SyncState>,
    syncer: Option<Syncer>,
    /// The highest horizon announced; recorded only, as gc is not done inline.
    gc_horizon: AtomicU64,
    live_keys: AtomicI64,
    versions: AtomicI64,
    bytes: AtomicI64,
}

impl fmt::Debug for FjallEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FjallEngine")
            .field("path", &self.config.path)
            .field("durability", &self.config.durability)
            .field("gc_horizon", &self.gc_horizon.load(Ordering::Relaxed))
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl FjallEngine {
    /// Opens (or creates) the engine in `config.path`, recovering what the journal holds and
    /// counting the live keys.
    pub fn open(config: FjallConfig) -> Result<Self> {
        std::fs::create_dir_all(&config.path)?;
        let db = Database::builder(&config.path).open().map_err(backend)?;
        let ks = db
            .keyspace(KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(backend)?;
        let sync = Arc::new(SyncState::default());
        let syncer = match config.durability {
            Durability::Everysec => Some(Syncer::start(db.clone(), sync.clone())?),
            Durability::Always | Durability::Never => None,
        };
        let engine = Self {
            db,
            ks,
            config,
            writer: Mutex::new(()),
            sync,
            syncer,
            gc_horizon: AtomicU64::new(0),
            live_keys: AtomicI64::new(0),
            versions: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
        };
        engine.recount()?;
        Ok(engine)
    }

    /// The settings this engine was opened with.
    pub fn config(&self) -> &FjallConfig {
        &self.config
    }

    /// Moves the in-memory table into a disk table and waits until it is written. fjall does
    /// this by itself when the memtable reaches 64 MiB; tests call it to exercise reads that
    /// merge memory and disk. (It relies on a fjall API that is public but `doc(hidden)`.)
    #[doc(hidden)]
    pub fn flush_memtable(&self) -> Result<()> {
        self.ks.rotate_memtable_and_wait().map_err(backend)
    }

    /// Recomputes the counters by a full scan.
    fn recount(&self) -> Result<()> {
        let _w = self.writer.lock();
        let snap = self.db.snapshot();
        let (mut live, mut versions, mut bytes) = (0i64, 0i64, 0i64);
        let mut current: Option<Slice> = None;
        for guard in snap.iter(&self.ks) {
            let (k, v) = guard.into_inner().map_err(backend)?;
            let (enc, _) = split_entry_key(&k)?;
            versions += 1;
            bytes += version_size(enc.len(), v.len().saturating_sub(1));
            let same = current
                .as_ref()
                .is_some_and(|c| &c[..c.len() - TS_LEN] == enc);
            if !same {
                live += i64::from(!is_tombstone_value(&v));
                current = Some(k);
            }
        }
        self.live_keys.store(live, Ordering::Relaxed);
        self.versions.store(versions, Ordering::Relaxed);
        self.bytes.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Makes a committed write durable as the policy says.
    fn after_commit(&self, seq: u64) -> Result<()> {
        match self.config.durability {
            Durability::Always => self.sync.sync_upto(&self.db, seq),
            Durability::Everysec | Durability::Never => Ok(()),
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
        let _w = self.writer.lock();
        let snap = self.db.snapshot();
        let mut dead = Vec::new();
        // The versions of the key being examined, newest first.
        let mut group: Vec<GcEntry> = Vec::new();
        let mut next = None;
        let entries = snap.range(&self.ks, (from, Bound::<Vec<u8>>::Unbounded));
        for (seen, guard) in entries.enumerate() {
            let (key, v) = guard.into_inner().map_err(backend)?;
            let (enc, ts) = split_entry_key(&key)?;
            if group.first().is_some_and(|g| g.enc() != enc) {
                collect_dead(&mut group, horizon, &mut dead, stats);
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
            collect_dead(&mut group, horizon, &mut dead, stats);
        }
        if !dead.is_empty() {
            let mut batch = self.db.batch();
            let (mut versions, mut bytes) = (0i64, 0i64);
            for entry in dead {
                versions -= 1;
                bytes -= version_size(entry.enc().len(), entry.value_len);
                batch.remove(&self.ks, entry.key);
            }
            batch.commit().map_err(backend)?;
            self.versions.fetch_add(versions, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(next)
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
/// can see into `dead`, and empties `group`.
fn collect_dead(
    group: &mut Vec<GcEntry>,
    horizon: Timestamp,
    dead: &mut Vec<GcEntry>,
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
    }
    let before = dead.len();
    dead.extend(group.drain(..).skip(from));
    stats.versions_removed += (dead.len() - before) as u64;
}

impl Drop for FjallEngine {
    fn drop(&mut self) {
        if let Some(syncer) = self.syncer.take() {
            syncer.stop();
        }
        if let Err(e) = self.sync.sync_force(&self.db) {
            tracing::error!(error = %e, path = %self.config.path.display(),
                "final fsync of the fjall journal failed");
        }
    }
}

impl Engine for FjallEngine {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        for op in &batch.ops {
            check_key(op.key())?;
        }
        if batch.is_empty() {
            return Ok(());
        }
        // Encode outside the mutex. A later write of the same key and timestamp wins: keep
        // only the last one, since one fjall batch must not hold a key twice.
        let mut entries: Vec<(Vec<u8>, usize)> = batch
            .ops
            .iter()
            .enumerate()
            .map(|(i, op)| (entry_key(op.key(), op.ts()), i))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        entries.dedup_by(|later, first| later.0 == first.0);

        let w = self.writer.lock();
        let snap = self.db.snapshot();
        // Per key: its latest version before the batch, and after it.
        type Latest = Option<(Timestamp, bool)>;
        let mut latest: HashMap<&[u8], (Latest, Latest)> = HashMap::new();
        let (mut versions, mut bytes) = (0i64, 0i64);
        let mut fjall_batch = self.db.batch();
        // `entries` is in (key, newest ts first) order, so the first entry of a key is its
        // newest write in this batch.
        for (entry, i) in &entries {
            let op = &batch.ops[*i];
            let enc = &entry[..entry.len() - TS_LEN];
            let put = matches!(op, WriteOp::Put { .. });
            let slot = match latest.entry(enc) {
                Entry::Occupied(slot) => slot.into_mut(),
                Entry::Vacant(slot) => {
                    let before = latest_of(&snap, &self.ks, enc)?;
                    slot.insert((before, before))
                }
            };
            let (before, after) = slot;
            if after.is_none_or(|(t, _)| op.ts() >= t) {
                *after = Some((op.ts(), put));
            }
            if before.is_none_or(|(t, _)| t != op.ts()) {
                versions += 1;
            }
            let value = match op {
                WriteOp::Put { value, .. } => Some(value),
                WriteOp::Delete { .. } => None,
            };
            bytes += version_size(enc.len(), value.map_or(0, Bytes::len));
            fjall_batch.insert(&self.ks, entry.as_slice(), entry_value(value));
        }
        drop(snap);
        fjall_batch.commit().map_err(backend)?;
        let live: i64 = latest
            .values()
            .map(|(before, after)| {
                i64::from(after.is_some_and(|(_, l)| l)) - i64::from(before.is_some_and(|(_, l)| l))
            })
            .sum();
        self.live_keys.fetch_add(live, Ordering::Relaxed);
        self.versions.fetch_add(versions, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let seq = self.sync.committed.fetch_add(1, Ordering::AcqRel) + 1;
        drop(w);
        self.after_commit(seq)
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
        let snap = self.db.snapshot();
        let Some(guard) = snap.range(&self.ks, lo..=hi).next() else {
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
        let snap = self.db.snapshot();
        // The entry key of the first version seen of the current user key, and whether the
        // version visible at `at` was found already.
        let mut current: Option<Slice> = None;
        let mut found = false;
        for guard in snap.range(&self.ks, range) {
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
        let snap = self.db.snapshot();
        let mut out = Vec::new();
        for guard in snap.range(&self.ks, lo..=hi) {
            let (k, v) = guard.into_inner().map_err(backend)?;
            let (_, ts) = split_entry_key(&k)?;
            out.push(decode_version(ts, v)?);
        }
        out.reverse();
        Ok(out)
    }

    fn set_gc_horizon(&self, horizon: Timestamp) {
        self.gc_horizon.fetch_max(horizon.0, Ordering::Relaxed);
    }

    fn gc(&self, horizon: Timestamp) -> Result<GcStats> {
        self.set_gc_horizon(horizon);
        let mut stats = GcStats::default();
        let mut from = Bound::Unbounded;
        while let Some(next) = self.gc_chunk(from, horizon, &mut stats)? {
            from = next;
        }
        Ok(stats)
    }

    fn clear(&self) -> Result<()> {
        let w = self.writer.lock();
        self.ks.clear().map_err(backend)?;
        self.live_keys.store(0, Ordering::Relaxed);
        self.versions.store(0, Ordering::Relaxed);
        self.bytes.store(0, Ordering::Relaxed);
        let seq = self.sync.committed.fetch_add(1, Ordering::AcqRel) + 1;
        drop(w);
        self.after_commit(seq)
    }

    fn flush(&self) -> Result<()> {
        // Forced: also covers writes the counter does not know of (gc deletions).
        self.sync.sync_force(&self.db)
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            live_keys: self.live_keys.load(Ordering::Relaxed).max(0) as u64,
            versions: self.versions.load(Ordering::Relaxed).max(0) as u64,
            bytes: self.bytes.load(Ordering::Relaxed).max(0) as u64,
        }
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
        let e = FjallEngine::open(FjallConfig {
            path: dir.path().join("db"),
            durability,
        })
        .unwrap();
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
                        let before = e.sync.committed.load(Ordering::Acquire);
                        e.put(Bytes::from(vec![t]), Timestamp(i), Bytes::new())
                            .unwrap();
                        // This write's sequence number is above `before`, and is covered.
                        assert!(*e.sync.synced.lock() > before);
                    }
                });
            }
        });
        assert_eq!(*e.sync.synced.lock(), 200);
    }

    #[test]
    fn never_leaves_fsync_to_flush() {
        let (_dir, e) = engine(Durability::Never);
        e.put(Bytes::from_static(b"k"), Timestamp(1), Bytes::new())
            .unwrap();
        assert_eq!(*e.sync.synced.lock(), 0);
        e.flush().unwrap();
        assert_eq!(*e.sync.synced.lock(), 1);
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
