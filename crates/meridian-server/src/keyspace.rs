//! Redis string semantics over a multi-versioned [`Engine`]: the keyspace both front ends share.
//!
//! [`Keyspace`] turns the engine's versioned puts and tombstones into Redis's string commands
//! (GET, SET with every option, INCR, APPEND, EXPIRE, SCAN, ...). What it guarantees:
//!
//! - **one envelope per value**: every stored value is `[flags][expiry µs, big endian, if the
//!   expiry flag is set][data]`; reads hand out [`Bytes::slice`]s of the stored value, never
//!   copies;
//! - **versions at the clock's time**: every write is a version at [`Clock::now`], and before
//!   each write the engine's GC horizon is moved to `now - retention`
//!   ([`KeyspaceConfig::retention`], zero by default: hot keys keep only their latest version);
//! - **atomic read-modify-write**: every write (SET and its options, DEL, INCR, APPEND,
//!   EXPIRE, ...) runs under one of a fixed array of striped mutexes chosen by key hash, so
//!   writes to one key are serialized and a read-modify-write never loses an update. Multi-key
//!   writes (MSET, MSETNX, DEL) and MULTI/EXEC take their stripes in ascending order and
//!   write one [`WriteBatch`], so they are atomic and cannot deadlock; multi-key reads (MGET,
//!   EXISTS of several keys) take their stripes too, so they never see half of such a
//!   write. Single-key reads (GET, STRLEN, TTL, ...) take no lock;
//! - **one copy of the semantics**: what each data command means is its type's module of the
//!   Redis layer ([`meridian_redis::strings`], [`meridian_redis::hashes`]; a hash is one value
//!   of kind `Hash`), run over a view of one locked stripe (single-key writes, straight to the engine), a
//!   lock-free view (single-key reads), or an `Overlay` of several locked stripes whose
//!   writes become one batch (multi-key commands, EXEC);
//! - **WATCH** (`Keyspace::watch`, `Keyspace::transaction`): each stripe counts the
//!   modifications of its watched keys (every command write, not expiry), and EXEC checks,
//!   under the stripes, that no watched key was modified and none live at WATCH time has
//!   expired or vanished (FLUSHALL), as Redis 7 does. A count, not the key's version
//!   timestamp: with zero retention a deleted key leaves no tombstone, so set-then-delete
//!   would otherwise look unchanged;
//! - **expiry like Redis**: a key is expired once `now > expiry`. A read of an expired key
//!   treats it as absent and deletes it (lazy expiry); [`Keyspace::expire_cycle`] (driven by
//!   [`Keyspace::run_active_expiry`]) deletes expired keys nobody reads, doing bounded work
//!   per call. Every stripe keeps an exact index of its keys with a TTL (rebuilt by a scan
//!   when a keyspace is opened over a non-empty engine), so `expires=` in INFO is exact and
//!   the active expirer never scans keys without a TTL;
//! - **SCAN's guarantee**: a full iteration returns every key present from start to end of
//!   the iteration (possibly some more than once). Cursors are small decimal numbers naming a
//!   resume key kept in a bounded server-side table; a cursor that is unknown (never issued,
//!   already used, or evicted from the table) restarts the iteration from the beginning,
//!   which keeps the guarantee at the price of repeated keys.
//!
//! Errors are the Redis layer's [`RedisError`], whose messages are Redis's (without the `ERR `
//! prefix), so the RESP front end forwards them verbatim and HTTP maps them to status codes.

use crate::memory::{self, MaxmemoryPolicy};
use crate::scan_cursors::CursorTable;
use bytes::Bytes;
use meridian_core::envelope::encode_kind;
use meridian_core::{Clock, Timestamp};
use meridian_redis::RedisError;
use meridian_redis::error::Result;
use meridian_redis::options::{
    Deadline, ExpireCondition, GetExExpiry, KeyTtl, SetOptions, SetOutcome,
};
use meridian_redis::scan::MAX_SCAN_COUNT;
use meridian_redis::strings;
use meridian_redis::value::glob_match;
use meridian_redis::view::decode_version;
use meridian_redis::{Entry, EntryRef, Kind, View};
use meridian_storage::{Engine, Version, WriteBatch};
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::{FxHashMap, FxHasher};
use std::collections::hash_map::Entry as MapEntry;
use std::fmt;
use std::hash::Hasher;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Number of lock stripes (a power of two).
const STRIPES: usize = 1024;
/// Keys examined per active-expiry round.
const ACTIVE_EXPIRE_BUDGET: usize = 2_000;
/// Period of the active expirer (Redis's `hz 10`).
const ACTIVE_EXPIRE_PERIOD: Duration = Duration::from_millis(100);
/// Keys scanned per engine call by KEYS and the index rebuild.
const PAGE: usize = 1_024;

/// Tunables of a [`Keyspace`].
#[derive(Clone, Debug)]
pub struct KeyspaceConfig {
    /// How long old versions stay readable by snapshot reads: before every write the engine's
    /// GC horizon moves to `now - retention`. Zero keeps only each key's latest version.
    pub retention: Duration,
    /// The longest value APPEND, SETRANGE and INCRBYFLOAT may produce (Redis's
    /// `proto-max-bulk-len`, 512 MiB).
    pub max_value_len: usize,
    /// How many SCAN cursors are remembered; the oldest are forgotten first.
    pub max_scan_cursors: usize,
    /// Redis's `maxmemory`: the used-memory estimate ([`Keyspace::used_memory`]) the keyspace
    /// keeps under by [`Keyspace::make_room`]; 0: no limit. Changed at runtime with
    /// [`Keyspace::set_maxmemory`].
    pub maxmemory: u64,
    /// Redis's `maxmemory-policy`: what happens over `maxmemory`.
    pub maxmemory_policy: MaxmemoryPolicy,
}

impl Default for KeyspaceConfig {
    fn default() -> Self {
        Self {
            retention: Duration::ZERO,
            max_value_len: 512 * 1024 * 1024,
            max_scan_cursors: 16 * 1024,
            maxmemory: 0,
            maxmemory_policy: MaxmemoryPolicy::NoEviction,
        }
    }
}

/// Counters for INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyspaceStats {
    /// Live keys in the engine (including expired keys not yet deleted, like Redis).
    pub keys: u64,
    /// Keys with a TTL.
    pub expires: u64,
    /// Keys deleted because they expired (lazily or actively).
    pub expired_keys: u64,
    /// Keys deleted by a `maxmemory` eviction.
    pub evicted_keys: u64,
    /// Reads that found their key.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
}

/// What one [`Keyspace::expire_cycle`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireCycle {
    /// Keys with a TTL looked at.
    pub examined: usize,
    /// Keys deleted because they had expired.
    pub expired: usize,
}

/// One lock stripe: serializes writes to its keys, indexes their TTLs and counts the
/// modifications of its WATCHed keys.
#[derive(Debug, Default)]
struct Stripe {
    /// Keys of this stripe with a TTL, and their expiry (µs).
    ttl: FxHashMap<Bytes, u64>,
    /// Keys of this stripe some connection WATCHes (empty almost always, so a write pays
    /// one branch).
    watched: FxHashMap<Bytes, WatchSlot>,
    /// Every key of this stripe, with its share of the used-memory estimate and what the
    /// eviction policies compare (Redis keeps the same in each object's header).
    meta: FxHashMap<Bytes, KeyMeta>,
    /// The [`UsedSlot`] this stripe's writes add to.
    used_slot: usize,
}

/// What the keyspace records of each key, for `maxmemory`.
#[derive(Clone, Copy, Debug)]
struct KeyMeta {
    /// Key + stored value + [`memory::KEY_OVERHEAD`], as counted in `Keyspace::used`.
    bytes: u32,
    /// Redis's logarithmic LFU counter.
    freq: u8,
    /// Last access (write, or read under an LRU/LFU policy), ms since the epoch.
    access_ms: u64,
}

impl KeyMeta {
    #[inline]
    fn access(&mut self, now: Timestamp) {
        let ms = now.0 / 1000;
        let f = memory::lfu::decayed(self.freq, ms.saturating_sub(self.access_ms));
        self.freq = memory::lfu::incremented(f, splitmix(now.0 ^ self.bytes as u64));
        self.access_ms = ms;
    }
}

/// A well-mixed 64-bit function of `x` (SplitMix64's finalizer).
#[inline]
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A key's share of the used-memory estimate.
#[inline]
fn entry_bytes(key_len: usize, stored_len: usize) -> u64 {
    (key_len + stored_len) as u64 + memory::KEY_OVERHEAD
}

/// A WATCHed key: how many watches hold it, and how many times it was modified since the
/// first of them.
#[derive(Debug, Default)]
struct WatchSlot {
    watchers: u32,
    epoch: u64,
}

impl Stripe {
    /// Records a modification of `key` for its watchers (Redis's `touchWatchedKey`).
    #[inline]
    fn touch(&mut self, key: &[u8]) {
        if !self.watched.is_empty()
            && let Some(w) = self.watched.get_mut(key)
        {
            w.epoch += 1;
        }
    }
}

fn stripe_of(key: &[u8]) -> usize {
    let mut h = FxHasher::default();
    h.write(key);
    (h.finish() as usize) & (STRIPES - 1)
}

/// Redis string commands over an [`Engine`]. See the module docs for the guarantees.
pub struct Keyspace {
    engine: Arc<dyn Engine>,
    clock: Arc<dyn Clock>,
    config: KeyspaceConfig,
    stripes: Box<[Mutex<Stripe>]>,
    expires: AtomicI64,
    expired_keys: AtomicU64,
    /// Hits and misses, spread over cache-line-sized slots by key hash so lock-free readers
    /// on different cores do not fight over one counter.
    reads: Box<[ReadCounter]>,
    expire_cursor: AtomicUsize,
    cursors: Mutex<CursorTable>,
    /// The used-memory estimate: the sum of every key's [`KeyMeta::bytes`], kept in slots on
    /// their own cache lines (by stripe) so writers on different cores do not contend.
    used: Box<[UsedSlot]>,
    /// `maxmemory` (0: no limit).
    maxmemory: AtomicU64,
    /// Whether the per-key records ([`Stripe::meta`]) and `used` are kept: only while a
    /// `maxmemory` limit is set, so a node without one pays nothing per write. Changed with
    /// every stripe locked.
    tracking: std::sync::atomic::AtomicBool,
    /// `maxmemory-policy`, as `MaxmemoryPolicy as u8`.
    policy: AtomicU8,
    evicted_keys: AtomicU64,
    /// Sampling randomness for eviction (a counter fed to [`splitmix`]).
    rng: AtomicU64,
}

/// Number of [`ReadCounter`] slots.
const READ_SLOTS: usize = 16;
/// Number of [`UsedSlot`]s.
const USED_SLOTS: usize = 16;

/// One slot of the used-memory estimate.
#[derive(Debug, Default)]
#[repr(align(128))]
struct UsedSlot(AtomicI64);

#[derive(Debug, Default)]
#[repr(align(128))]
struct ReadCounter {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyspace")
            .field("engine", &self.engine.name())
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Locks several stripes in ascending order; finds the guard of a key's stripe.
struct StripeGuards<'a> {
    ids: Vec<usize>,
    guards: Vec<MutexGuard<'a, Stripe>>,
}

impl StripeGuards<'_> {
    /// The locked stripe of `key`. Callers lock every key they touch first; a key whose
    /// stripe is not held is refused rather than written unserialized.
    fn of(&mut self, key: &[u8]) -> Result<&mut Stripe> {
        match self.ids.binary_search(&stripe_of(key)) {
            Ok(i) => Ok(&mut self.guards[i]),
            Err(_) => Err(RedisError::Corrupt("key outside the locked stripes")),
        }
    }
}

impl Keyspace {
    /// A keyspace over `engine`, reading time from `clock`, with the default
    /// [`KeyspaceConfig`]. Scans the engine once to rebuild the TTL index (instant for an
    /// empty engine; a failing scan is logged and leaves expiry to lazy reads).
    pub fn new(engine: Arc<dyn Engine>, clock: Arc<dyn Clock>) -> Self {
        Self::with_config(engine, clock, KeyspaceConfig::default())
    }

    /// [`Keyspace::new`] with an explicit configuration.
    pub fn with_config(
        engine: Arc<dyn Engine>,
        clock: Arc<dyn Clock>,
        config: KeyspaceConfig,
    ) -> Self {
        let (maxmemory, policy) = (config.maxmemory, config.maxmemory_policy);
        let ks = Self {
            engine,
            clock,
            cursors: Mutex::new(CursorTable::new(config.max_scan_cursors)),
            config,
            stripes: (0..STRIPES)
                .map(|i| {
                    Mutex::new(Stripe {
                        used_slot: i % USED_SLOTS,
                        ..Stripe::default()
                    })
                })
                .collect(),
            expires: AtomicI64::new(0),
            expired_keys: AtomicU64::new(0),
            reads: (0..READ_SLOTS).map(|_| ReadCounter::default()).collect(),
            expire_cursor: AtomicUsize::new(0),
            used: (0..USED_SLOTS).map(|_| UsedSlot::default()).collect(),
            maxmemory: AtomicU64::new(maxmemory),
            tracking: std::sync::atomic::AtomicBool::new(maxmemory > 0),
            policy: AtomicU8::new(policy as u8),
            evicted_keys: AtomicU64::new(0),
            rng: AtomicU64::new(0x6d65_7269_6469_616e),
        };
        if let Err(e) = ks.rebuild_ttl_index() {
            tracing::warn!(error = %e, "could not rebuild the TTL index; expired keys will be \
                deleted when read");
        }
        ks
    }

    /// Sets [`KeyspaceConfig::retention`].
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.config.retention = retention;
        self
    }

    /// Rebuilds the TTL index and the per-key records of the memory accounting from the
    /// engine (once, when the keyspace opens).
    fn rebuild_ttl_index(&self) -> Result<()> {
        if self.engine.stats().live_keys == 0 {
            return Ok(());
        }
        let mut start = Bound::Unbounded;
        loop {
            let page = self
                .engine
                .scan(start, Bound::Unbounded, Timestamp::MAX, PAGE, false)?;
            let full = page.len() == PAGE;
            let last = page.last().map(|(k, _)| k.clone());
            let now = self.clock.now();
            for (key, v) in page {
                let stored = v.value.as_ref().map(|b| b.len());
                let mut s = self.stripes[stripe_of(&key)].lock();
                if let Some(len) = stored {
                    self.account_put(&mut s, &key, entry_bytes(key.len(), len), now);
                }
                if let Ok(Some(Entry {
                    expiry: Some(at), ..
                })) = decode_version(Some(v))
                {
                    self.index(&mut s, &key, Some(at));
                }
            }
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => return Ok(()),
            }
        }
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The current time by the keyspace's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The configuration.
    pub fn config(&self) -> &KeyspaceConfig {
        &self.config
    }

    // ----- internals -------------------------------------------------------------------

    fn load(&self, key: &[u8]) -> Result<Option<Entry>> {
        decode_version(self.engine.get_latest(key)?)
    }

    /// A lock-free read that treats an expired key as absent (and deletes it).
    fn read_live(&self, key: &[u8]) -> Result<Option<Entry>> {
        let Some(e) = self.load(key)? else {
            return Ok(None);
        };
        if e.expiry.is_some() && e.is_expired(self.clock.now()) {
            let mut s = self.lock(key);
            let now = self.clock.now();
            self.load_live_locked(&mut s, key, now)?;
            return Ok(None);
        }
        if self.tracks_reads() {
            self.touch_read(key);
        }
        Ok(Some(e))
    }

    /// Whether the eviction policy needs reads to refresh access times (LRU, LFU).
    #[inline]
    fn tracks_reads(&self) -> bool {
        self.tracking.load(Ordering::Relaxed) && self.maxmemory_policy().tracks_reads()
    }

    /// A lock-free read's access under an LRU/LFU policy: refreshed when the key's stripe is
    /// free, skipped when a writer holds it (reads never wait; the policies are
    /// approximate anyway).
    fn touch_read(&self, key: &[u8]) {
        if let Some(mut s) = self.stripes[stripe_of(key)].try_lock()
            && let Some(m) = s.meta.get_mut(key)
        {
            m.access(self.clock.now());
        }
    }

    fn count_read(&self, key: &[u8], hit: bool) {
        let slot = &self.reads[stripe_of(key) % READ_SLOTS];
        if hit {
            slot.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            slot.misses.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn lock(&self, key: &[u8]) -> MutexGuard<'_, Stripe> {
        self.stripes[stripe_of(key)].lock()
    }

    fn lock_many<K: AsRef<[u8]>>(&self, keys: impl Iterator<Item = K>) -> StripeGuards<'_> {
        let mut ids: Vec<usize> = keys.map(|k| stripe_of(k.as_ref())).collect();
        ids.sort_unstable();
        ids.dedup();
        let guards = ids.iter().map(|&i| self.stripes[i].lock()).collect();
        StripeGuards { ids, guards }
    }

    /// Reads a key under its stripe lock, deleting it if it has expired.
    fn load_live_locked(
        &self,
        s: &mut Stripe,
        key: &[u8],
        now: Timestamp,
    ) -> Result<Option<Entry>> {
        match self.load(key)? {
            Some(e) if e.is_expired(now) => {
                self.expire_locked(s, key, now)?;
                self.expired_keys.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            other => Ok(other),
        }
    }

    fn horizon(&self, now: Timestamp) {
        self.engine
            .set_gc_horizon(now.saturating_sub(self.config.retention));
    }

    fn put_locked(
        &self,
        s: &mut Stripe,
        key: &[u8],
        e: EntryRef<'_>,
        now: Timestamp,
    ) -> Result<()> {
        self.horizon(now);
        let expiry = e.expiry;
        let key = Bytes::copy_from_slice(key);
        let value = encode_kind(e.kind, e.data, expiry);
        let bytes = entry_bytes(key.len(), value.len());
        self.engine.put(key.clone(), now, value)?;
        s.touch(&key);
        self.account_put(s, &key, bytes, now);
        self.index_owned(s, key, expiry);
        Ok(())
    }

    /// Records that `key` now holds `bytes` (its key, stored value and overhead): one map
    /// update in the locked stripe and one atomic add.
    #[inline]
    fn account_put(&self, s: &mut Stripe, key: &Bytes, bytes: u64, now: Timestamp) {
        if self.tracking.load(Ordering::Relaxed) {
            self.record(s, key, bytes, now);
        }
    }

    /// [`Self::account_put`] whether or not tracking is on (while it is being turned on).
    fn record(&self, s: &mut Stripe, key: &Bytes, bytes: u64, now: Timestamp) {
        let bytes = bytes.min(u32::MAX as u64) as u32;
        let delta = match s.meta.get_mut(&key[..]) {
            Some(m) => {
                let old = m.bytes;
                m.bytes = bytes;
                m.access(now);
                bytes as i64 - old as i64
            }
            None => {
                s.meta.insert(
                    key.clone(),
                    KeyMeta {
                        bytes,
                        freq: memory::lfu::INIT,
                        access_ms: now.0 / 1000,
                    },
                );
                bytes as i64
            }
        };
        if delta != 0 {
            self.used[s.used_slot].0.fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Records that `key` is gone (a no-op for a key that was not there).
    #[inline]
    fn account_delete(&self, s: &mut Stripe, key: &[u8]) {
        if !self.tracking.load(Ordering::Relaxed) {
            return;
        }
        if let Some(m) = s.meta.remove(key) {
            self.used[s.used_slot]
                .0
                .fetch_sub(m.bytes as i64, Ordering::Relaxed);
        }
    }

    /// Deletes a key a command removes (its watchers see a modification).
    fn delete_locked(&self, s: &mut Stripe, key: &[u8], now: Timestamp) -> Result<()> {
        self.expire_locked(s, key, now)?;
        s.touch(key);
        Ok(())
    }

    /// Deletes an expired key. Not a modification for WATCH: a key live at WATCH time that
    /// expires fails EXEC anyway, and one already expired then did not change (Redis 7).
    fn expire_locked(&self, s: &mut Stripe, key: &[u8], now: Timestamp) -> Result<()> {
        self.horizon(now);
        self.engine.delete(Bytes::copy_from_slice(key), now)?;
        self.index(s, key, None);
        self.account_delete(s, key);
        Ok(())
    }

    /// Records `key`'s expiry (or its absence) in its stripe's TTL index.
    fn index(&self, s: &mut Stripe, key: &[u8], expiry: Option<u64>) {
        match expiry {
            Some(at) => match s.ttl.get_mut(key) {
                Some(v) => *v = at,
                None => self.index_owned(s, Bytes::copy_from_slice(key), Some(at)),
            },
            None => {
                if !s.ttl.is_empty() && s.ttl.remove(key).is_some() {
                    self.expires.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// [`Keyspace::index`] with an owned key (saves a copy when the caller has one).
    fn index_owned(&self, s: &mut Stripe, key: Bytes, expiry: Option<u64>) {
        match expiry {
            Some(at) => {
                if s.ttl.insert(key, at).is_none() {
                    self.expires.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => self.index(s, &key, None),
        }
    }

    /// A view of one locked stripe at `now` (taken after the lock, so every write of a key
    /// gets a later timestamp than the last).
    fn locked<'a>(&'a self, s: &'a mut Stripe) -> LockedView<'a> {
        LockedView {
            ks: self,
            stripe: s,
            now: self.clock.now(),
        }
    }

    /// Runs a single-key write under its stripe's lock, writing straight to the engine.
    fn with_key<R>(&self, key: &[u8], f: impl FnOnce(&mut LockedView<'_>) -> R) -> R {
        let mut s = self.lock(key);
        f(&mut self.locked(&mut s))
    }

    /// Runs a multi-key write under its keys' stripes as one atomic batch.
    fn with_keys<'k, R>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
        f: impl FnOnce(&mut Overlay<'_>) -> Result<R>,
    ) -> Result<R> {
        let guards = self.lock_many(keys);
        let mut ov = Overlay::new(self, guards);
        let r = f(&mut ov)?;
        ov.commit()?;
        Ok(r)
    }

    // ----- reads -------------------------------------------------------------------------

    /// GET: the value of `key`, or `None` if it does not exist (or has expired).
    #[inline]
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        strings::get(&mut ReadView { ks: self }, key)
    }

    /// MGET: the value of each key, `None` for missing ones and for keys holding another type
    /// (as Redis's MGET answers), read as one unit (under the keys' stripes, so never half of
    /// a multi-key write).
    pub fn mget<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Bytes>>> {
        self.with_keys(keys.iter().map(|k| k.as_ref()), |v| {
            keys.iter()
                .map(|k| strings::get_or_nil(v, k.as_ref()))
                .collect()
        })
    }

    /// EXISTS: how many of `keys` exist, counting repeated keys as many times (one unit,
    /// like MGET).
    pub fn exists<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<u64> {
        self.with_keys(keys.iter().map(|k| k.as_ref()), |v| {
            strings::exists(v, keys.iter().map(|k| k.as_ref()))
        })
    }

    /// TYPE: `"string"` or `"hash"` if the key exists, `"none"` otherwise.
    pub fn key_type(&self, key: &[u8]) -> Result<&'static str> {
        strings::key_type(&mut ReadView { ks: self }, key)
    }

    /// STRLEN: the value's length, 0 for a missing key.
    pub fn strlen(&self, key: &[u8]) -> Result<u64> {
        strings::strlen(&mut ReadView { ks: self }, key)
    }

    /// GETRANGE: the substring between `start` and `end` inclusive, negative offsets counting
    /// from the end (Redis's clamping rules); empty for a missing key.
    pub fn getrange(&self, key: &[u8], start: i64, end: i64) -> Result<Bytes> {
        strings::getrange(&mut ReadView { ks: self }, key, start, end)
    }

    /// TTL/PTTL/EXPIRETIME: the key's time to live.
    pub fn ttl(&self, key: &[u8]) -> Result<KeyTtl> {
        strings::ttl(&mut ReadView { ks: self }, key)
    }

    // ----- writes ------------------------------------------------------------------------

    /// SET with its options (NX/XX, GET, EX/PX/EXAT/PXAT, KEEPTTL).
    #[inline]
    pub fn set(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: SetOptions,
    ) -> Result<SetOutcome> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.with_key(key, |v| strings::set(v, key, value, opts))
    }

    /// MSET: writes every pair atomically, clearing their TTLs. A key given twice ends with
    /// its last value.
    pub fn mset<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<()> {
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect();
        self.with_keys(pairs.iter().map(|p| p.0), |v| strings::mset(v, &pairs))
    }

    /// MSETNX: writes every pair atomically only if none of the keys exists; returns whether
    /// it wrote.
    pub fn msetnx<K: AsRef<[u8]>, V: AsRef<[u8]>>(&self, pairs: &[(K, V)]) -> Result<bool> {
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_ref()))
            .collect();
        self.with_keys(pairs.iter().map(|p| p.0), |v| strings::msetnx(v, &pairs))
    }

    /// DEL/UNLINK: deletes the keys atomically; returns how many existed.
    pub fn del<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<u64> {
        self.with_keys(keys.iter().map(|k| k.as_ref()), |v| {
            strings::del(v, keys.iter().map(|k| k.as_ref()))
        })
    }

    /// GETDEL: returns the value and deletes the key.
    pub fn getdel(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.with_key(key, |v| strings::getdel(v, key))
    }

    /// GETEX: returns the value and changes its TTL.
    pub fn getex(&self, key: &[u8], expiry: GetExExpiry) -> Result<Option<Bytes>> {
        if expiry == GetExExpiry::Unchanged {
            return self.get(key);
        }
        self.with_key(key, |v| strings::getex(v, key, expiry))
    }

    /// INCRBY (INCR, DECR, DECRBY): adds `delta` to the integer value (0 if missing), keeping
    /// the TTL; returns the new value.
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64> {
        self.with_key(key, |v| strings::incr_by(v, key, delta))
    }

    /// DECRBY: [`Keyspace::incr_by`] with `-delta`, refusing the one delta whose negation
    /// overflows, as Redis does.
    pub fn decr_by(&self, key: &[u8], delta: i64) -> Result<i64> {
        self.with_key(key, |v| strings::decr_by(v, key, delta))
    }

    /// INCRBYFLOAT: adds `delta` to the float value (0 if missing), keeping the TTL; returns
    /// the new value as stored (shortest round-trip decimal, never an exponent).
    pub fn incr_by_float(&self, key: &[u8], delta: f64) -> Result<Bytes> {
        self.with_key(key, |v| strings::incr_by_float(v, key, delta))
    }

    /// APPEND: appends to the value (creating it), keeping the TTL; returns the new length.
    pub fn append(&self, key: &[u8], suffix: &[u8]) -> Result<u64> {
        self.with_key(key, |v| strings::append(v, key, suffix))
    }

    /// SETRANGE: overwrites the value from `offset` (zero-padding), keeping the TTL; returns
    /// the new length.
    pub fn setrange(&self, key: &[u8], offset: i64, value: &[u8]) -> Result<u64> {
        if offset < 0 {
            return Err(RedisError::OffsetOutOfRange);
        }
        self.with_key(key, |v| strings::setrange(v, key, offset, value))
    }

    /// EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT: sets the key's deadline under `cond`; a deadline not
    /// after now deletes the key. Returns whether the key existed and the condition held.
    pub fn expire(&self, key: &[u8], deadline: Deadline, cond: ExpireCondition) -> Result<bool> {
        self.with_key(key, |v| strings::expire(v, key, deadline, cond))
    }

    /// PERSIST: removes the key's TTL; returns whether it had one.
    pub fn persist(&self, key: &[u8]) -> Result<bool> {
        self.with_key(key, |v| strings::persist(v, key))
    }

    /// Executes a data command ([`meridian_redis::types::is_data_command`]) from its
    /// arguments with the same locking as the typed calls: reads lock-free, single-key writes
    /// under their stripe, multi-key commands as one batch under all their stripes.
    pub(crate) fn execute(
        &self,
        cmd: meridian_redis::Cmd,
        args: meridian_redis::Args<'_>,
        reply: &mut meridian_redis::Reply,
    ) -> std::result::Result<(), meridian_redis::CmdError> {
        use meridian_redis::types::exec_on_view;
        let spec = cmd.spec();
        // Several keys at once are read or written under all their stripes, as one unit:
        // an MGET never sees half of an MSET or of an EXEC (Redis runs each command alone).
        let several = spec.key_positions(args.len()).nth(1).is_some();
        let readonly = spec.flags.first() == Some(&"readonly");
        if !several && readonly {
            return exec_on_view(cmd, args, &mut ReadView { ks: self }, reply);
        }
        if several {
            let guards = self.lock_many(spec.key_positions(args.len()).map(|i| args.get(i)));
            let mut ov = Overlay::new(self, guards);
            // The reply is written before the batch is: a refused batch (a full disk) takes
            // it back, so only the error is answered.
            let mark = reply.out.len();
            exec_on_view(cmd, args, &mut ov, reply)?;
            return ov.commit().map_err(|e| {
                reply.out.truncate(mark);
                e.into()
            });
        }
        let mut s = self.lock(args.get(1));
        exec_on_view(cmd, args, &mut self.locked(&mut s), reply)
    }

    /// FLUSHDB/FLUSHALL: removes every key.
    pub fn flush(&self) -> Result<()> {
        let mut guards: Vec<_> = self.stripes.iter().map(|s| s.lock()).collect();
        self.engine.clear()?;
        for g in &mut guards {
            g.ttl = FxHashMap::default();
            g.meta = FxHashMap::default();
        }
        self.expires.store(0, Ordering::Relaxed);
        for slot in &*self.used {
            slot.0.store(0, Ordering::Relaxed);
        }
        drop(guards);
        self.cursors.lock().clear();
        Ok(())
    }

    // ----- iteration ---------------------------------------------------------------------

    /// SCAN: up to `count` keys after `cursor` (0 starts), filtered by the glob `pattern`;
    /// returns the next cursor (0 when the iteration is complete) and the keys.
    pub fn scan(
        &self,
        cursor: u64,
        pattern: Option<&[u8]>,
        count: usize,
    ) -> Result<(u64, Vec<Bytes>)> {
        self.scan_type(cursor, pattern, count, None)
    }

    /// SCAN ... TYPE: [`Keyspace::scan`] listing only the keys holding a value of type
    /// `kind` (all of them with `None`). Like Redis, the filter applies after COUNT: a call
    /// may list fewer keys, none, with a cursor to go on.
    pub fn scan_type(
        &self,
        cursor: u64,
        pattern: Option<&[u8]>,
        count: usize,
        kind: Option<Kind>,
    ) -> Result<(u64, Vec<Bytes>)> {
        let count = count.clamp(1, MAX_SCAN_COUNT);
        let resume = if cursor == 0 {
            None
        } else {
            self.cursors.lock().take(cursor)
        };
        let prefix = pattern.map_or(&[][..], literal_prefix);
        let start = match resume {
            Some(k) if prefix.is_empty() || &k[..] >= prefix => Bound::Excluded(k),
            _ if prefix.is_empty() => Bound::Unbounded,
            _ => Bound::Included(Bytes::copy_from_slice(prefix)),
        };
        let end = prefix_end(prefix);
        let rows = self.engine.scan(start, end, Timestamp::MAX, count, false)?;
        let complete = rows.len() < count;
        let last = rows.last().map(|(k, _)| k.clone());
        let keys = self.filter_live(rows, pattern, kind)?;
        let next = match (complete, last) {
            (false, Some(k)) => self.cursors.lock().insert(k),
            _ => 0,
        };
        Ok((next, keys))
    }

    /// KEYS: every key matching the glob `pattern`, in key order.
    pub fn keys(&self, pattern: &[u8]) -> Result<Vec<Bytes>> {
        let prefix = literal_prefix(pattern);
        let mut start = if prefix.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(Bytes::copy_from_slice(prefix))
        };
        let end = prefix_end(prefix);
        let mut out = Vec::new();
        loop {
            let rows = self
                .engine
                .scan(start, end.clone(), Timestamp::MAX, PAGE, false)?;
            let full = rows.len() == PAGE;
            let last = rows.last().map(|(k, _)| k.clone());
            // Like Redis, `*` alone matches every key without running the matcher.
            let all = pattern == b"*";
            out.extend(self.filter_live(rows, (!all).then_some(pattern), None)?);
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => return Ok(out),
            }
        }
    }

    /// Live keys among the first `limit` stored keys in `[start, end)`, in key order, and
    /// the last stored key looked at when the scan stopped at `limit` (where the next page
    /// starts). Expired keys are skipped and deleted as `SCAN` does. The object service's
    /// listings.
    pub fn live_keys_in(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        limit: usize,
    ) -> Result<(Vec<Bytes>, Option<Bytes>)> {
        let limit = limit.max(1);
        let rows = self.engine.scan(start, end, Timestamp::MAX, limit, false)?;
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|(k, _)| k.clone()))
            .flatten();
        Ok((self.filter_live(rows, None, None)?, next))
    }

    /// The live keys of `rows` matching `pattern` and holding a value of type `kind` (any
    /// with `None`; a value that does not decode is listed only without a type filter).
    fn filter_live(
        &self,
        rows: Vec<(Bytes, Version)>,
        pattern: Option<&[u8]>,
        kind: Option<Kind>,
    ) -> Result<Vec<Bytes>> {
        let mut now = None;
        let mut keys = Vec::with_capacity(rows.len());
        for (key, v) in rows {
            let entry = decode_version(Some(v));
            if let Ok(Some(e)) = &entry
                && e.expiry.is_some()
                && e.is_expired(*now.get_or_insert_with(|| self.clock.now()))
            {
                let mut s = self.lock(&key);
                let now = self.clock.now();
                self.load_live_locked(&mut s, &key, now)?;
                continue;
            }
            let typed = kind.is_none_or(|k| matches!(&entry, Ok(Some(e)) if e.kind == k));
            if typed && pattern.is_none_or(|p| glob_match(p, &key, false)) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// DBSIZE: live keys in the engine (expired keys not yet deleted included, like Redis).
    pub fn dbsize(&self) -> u64 {
        self.engine.stats().live_keys
    }

    /// Counters for INFO.
    pub fn stats(&self) -> KeyspaceStats {
        KeyspaceStats {
            keys: self.engine.stats().live_keys,
            expires: self.expires.load(Ordering::Relaxed).max(0) as u64,
            expired_keys: self.expired_keys.load(Ordering::Relaxed),
            evicted_keys: self.evicted_keys.load(Ordering::Relaxed),
            hits: self
                .reads
                .iter()
                .map(|r| r.hits.load(Ordering::Relaxed))
                .sum(),
            misses: self
                .reads
                .iter()
                .map(|r| r.misses.load(Ordering::Relaxed))
                .sum(),
        }
    }

    /// CONFIG RESETSTAT: zeroes the expired/evicted/hit/miss counters.
    pub fn reset_stats(&self) {
        self.expired_keys.store(0, Ordering::Relaxed);
        self.evicted_keys.store(0, Ordering::Relaxed);
        for r in self.reads.iter() {
            r.hits.store(0, Ordering::Relaxed);
            r.misses.store(0, Ordering::Relaxed);
        }
    }

    // ----- maxmemory ---------------------------------------------------------------------

    /// The used-memory estimate, in bytes: for every key, its length, its stored value's
    /// length and [`memory::KEY_OVERHEAD`]. While a `maxmemory` limit is set it is kept up to
    /// date by every write, delete, expiry and eviction (old versions kept for `retention` are
    /// not counted); without one it is read from the engine's own byte count plus the same
    /// overhead per live key (old versions counted), so writes pay nothing for it.
    pub fn used_memory(&self) -> u64 {
        if !self.tracking.load(Ordering::Relaxed) {
            let st = self.engine.stats();
            return st.bytes + st.live_keys * memory::KEY_OVERHEAD;
        }
        let sum: i64 = self
            .used
            .iter()
            .map(|slot| slot.0.load(Ordering::Relaxed))
            .sum();
        sum.max(0) as u64
    }

    /// `maxmemory` in bytes (0: no limit).
    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Ordering::Relaxed)
    }

    /// CONFIG SET maxmemory: takes effect for the next command (which evicts, or is refused,
    /// if used memory is now over it).
    ///
    /// Setting the first limit builds the per-key records from the engine with every stripe
    /// locked (writes wait for one scan of the keyspace); removing the limit drops them.
    pub fn set_maxmemory(&self, bytes: u64) -> Result<()> {
        let want = bytes > 0;
        if want != self.tracking.load(Ordering::Relaxed) {
            let mut guards: Vec<_> = self.stripes.iter().map(|s| s.lock()).collect();
            if want != self.tracking.load(Ordering::Relaxed) {
                for g in &mut guards {
                    g.meta = FxHashMap::default();
                }
                for slot in &*self.used {
                    slot.0.store(0, Ordering::Relaxed);
                }
                if want {
                    self.record_all(&mut guards)?;
                }
                self.tracking.store(want, Ordering::Relaxed);
            }
        }
        self.maxmemory.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Records every stored key (the stripes all locked, by index).
    fn record_all(&self, guards: &mut [MutexGuard<'_, Stripe>]) -> Result<()> {
        let now = self.clock.now();
        let mut start = Bound::Unbounded;
        loop {
            let page = self
                .engine
                .scan(start, Bound::Unbounded, Timestamp::MAX, PAGE, false)?;
            let full = page.len() == PAGE;
            let last = page.last().map(|(k, _)| k.clone());
            for (key, v) in page {
                if let Some(len) = v.value.as_ref().map(|b| b.len()) {
                    let s = &mut guards[stripe_of(&key)];
                    self.record(s, &key, entry_bytes(key.len(), len), now);
                }
            }
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => return Ok(()),
            }
        }
    }

    /// `maxmemory-policy`.
    pub fn maxmemory_policy(&self) -> MaxmemoryPolicy {
        MaxmemoryPolicy::from_u8(self.policy.load(Ordering::Relaxed))
    }

    /// CONFIG SET maxmemory-policy.
    pub fn set_maxmemory_policy(&self, policy: MaxmemoryPolicy) {
        self.policy.store(policy as u8, Ordering::Relaxed);
    }

    /// Whether a limit is set and used memory is over it (two atomic loads).
    #[inline]
    pub fn over_maxmemory(&self) -> bool {
        let max = self.maxmemory();
        max != 0 && self.used_memory() > max
    }

    /// Brings used memory back within `maxmemory` before a command runs, as Redis's
    /// `performEvictions`: under an evicting policy, deletes sampled keys until it fits.
    /// Returns whether it fits; `false` (under `noeviction`, or with nothing left the policy
    /// may evict) means a command that may add memory must be refused with [`memory::OOM`].
    /// At most 1024 keys are evicted per call, as Redis bounds the time one command spends
    /// evicting; the next command goes on.
    pub fn make_room(&self) -> bool {
        if !self.over_maxmemory() {
            return true;
        }
        let policy = self.maxmemory_policy();
        if policy == MaxmemoryPolicy::NoEviction {
            return false;
        }
        for _ in 0..1024 {
            if !self.over_maxmemory() {
                return true;
            }
            if !self.evict_one(policy) {
                return false;
            }
        }
        true
    }

    fn next_rand(&self) -> u64 {
        splitmix(self.rng.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed))
    }

    /// Evicts one key: the best by `policy` of about [`memory::SAMPLES`] keys sampled from
    /// the stripes after a random one (all keys, or only those with a TTL for the volatile
    /// policies). Returns false when there was no candidate.
    fn evict_one(&self, policy: MaxmemoryPolicy) -> bool {
        let volatile = policy.volatile();
        if volatile && self.expires.load(Ordering::Relaxed) <= 0 {
            return false;
        }
        let now_ms = self.clock.now().0 / 1000;
        let first = self.next_rand() as usize;
        let offset = self.next_rand() as usize;
        let mut best: Option<(u64, Bytes)> = None;
        let mut sampled = 0;
        for i in 0..STRIPES {
            if sampled >= memory::SAMPLES {
                break;
            }
            let s = self.stripes[first.wrapping_add(i) & (STRIPES - 1)].lock();
            let len = if volatile { s.ttl.len() } else { s.meta.len() };
            if len == 0 {
                continue;
            }
            let take = (memory::SAMPLES - sampled).min(len);
            sampled += take;
            // Higher is evicted first.
            let score = |m: Option<&KeyMeta>, expiry: u64| -> u64 {
                match policy {
                    MaxmemoryPolicy::AllkeysLru | MaxmemoryPolicy::VolatileLru => {
                        m.map_or(u64::MAX, |m| now_ms.saturating_sub(m.access_ms))
                    }
                    MaxmemoryPolicy::AllkeysLfu | MaxmemoryPolicy::VolatileLfu => {
                        m.map_or(u64::MAX, |m| {
                            let f =
                                memory::lfu::decayed(m.freq, now_ms.saturating_sub(m.access_ms));
                            // Less frequent first; among equals, the least recent.
                            ((255 - f as u64) << 48)
                                | now_ms.saturating_sub(m.access_ms).min((1 << 48) - 1)
                        })
                    }
                    MaxmemoryPolicy::VolatileTtl => u64::MAX - expiry,
                    _ => self.next_rand(),
                }
            };
            let mut consider = |key: &Bytes, score: u64| {
                if best.as_ref().is_none_or(|(b, _)| score > *b) {
                    best = Some((score, key.clone()));
                }
            };
            if volatile {
                for (k, &at) in s.ttl.iter().cycle().skip(offset % len).take(take) {
                    consider(k, score(s.meta.get(&k[..]), at));
                }
            } else {
                for (k, m) in s.meta.iter().cycle().skip(offset % len).take(take) {
                    consider(k, score(Some(m), 0));
                }
            }
        }
        let Some((_, key)) = best else {
            return false;
        };
        let mut s = self.lock(&key);
        if !s.meta.contains_key(&key[..]) {
            // Deleted since it was sampled: memory went down anyway.
            return true;
        }
        let now = self.clock.now();
        match self.expire_locked(&mut s, &key, now) {
            Ok(()) => {
                // An eviction modifies the key for its watchers, as in Redis.
                s.touch(&key);
                self.evicted_keys.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "maxmemory eviction could not delete a key");
                false
            }
        }
    }

    // ----- active expiry -----------------------------------------------------------------

    /// One bounded step of active expiry: walks the stripes' TTL indexes from where the last
    /// call stopped, deleting expired keys, until about `budget` keys with a TTL have been
    /// examined or every stripe has been visited once.
    pub fn expire_cycle(&self, budget: usize) -> ExpireCycle {
        let mut cycle = ExpireCycle::default();
        if self.expires.load(Ordering::Relaxed) <= 0 {
            return cycle;
        }
        for _ in 0..STRIPES {
            if cycle.examined >= budget {
                break;
            }
            let i = self.expire_cursor.fetch_add(1, Ordering::Relaxed) & (STRIPES - 1);
            let mut s = self.stripes[i].lock();
            if s.ttl.is_empty() {
                continue;
            }
            let now = self.clock.now();
            cycle.examined += s.ttl.len();
            let due: Vec<Bytes> = s
                .ttl
                .iter()
                .filter(|&(_, &at)| now.0 > at)
                .map(|(k, _)| k.clone())
                .collect();
            for key in due {
                // The index is exact for writes made through this keyspace; check the stored
                // value anyway so a foreign write is never deleted by mistake.
                match self.load(&key) {
                    Ok(Some(e)) if e.is_expired(now) => match self.expire_locked(&mut s, &key, now)
                    {
                        Ok(()) => {
                            cycle.expired += 1;
                            self.expired_keys.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "active expiry could not delete a key");
                        }
                    },
                    Ok(Some(e)) => self.index(&mut s, &key, e.expiry),
                    Ok(None) | Err(_) => self.index(&mut s, &key, None),
                }
            }
        }
        cycle
    }

    /// The active expirer: every 100 ms, runs [`Keyspace::expire_cycle`] rounds while more
    /// than a quarter of the keys examined had expired (at most 16 rounds per tick, yielding
    /// between them), until `shutdown` is cancelled. Spawn it once per keyspace.
    pub async fn run_active_expiry(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(ACTIVE_EXPIRE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            for _ in 0..16 {
                let c = self.expire_cycle(ACTIVE_EXPIRE_BUDGET);
                if c.expired * 4 <= c.examined {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    }
}

// ----- views for the string commands -----------------------------------------------------

/// Lock-free reads (GET, MGET, EXISTS, ...): an expired key reads as absent and is deleted
/// under its stripe's lock. Writes lock their key's stripe (read-only commands never write).
struct ReadView<'a> {
    ks: &'a Keyspace,
}

impl View for ReadView<'_> {
    #[inline]
    fn now(&self) -> Timestamp {
        self.ks.clock.now()
    }

    #[inline]
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        self.ks.read_live(key)
    }

    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        let mut s = self.ks.lock(key);
        self.ks.locked(&mut s).store(key, value)
    }

    fn max_value_len(&self) -> usize {
        self.ks.config.max_value_len
    }

    #[inline]
    fn count_read(&mut self, key: &[u8], hit: bool) {
        self.ks.count_read(key, hit);
    }
}

/// One key's stripe, locked: reads delete expired keys, writes go straight to the engine at
/// the view's time.
struct LockedView<'a> {
    ks: &'a Keyspace,
    stripe: &'a mut Stripe,
    now: Timestamp,
}

impl View for LockedView<'_> {
    #[inline]
    fn now(&self) -> Timestamp {
        self.now
    }

    #[inline]
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        self.ks.load_live_locked(self.stripe, key, self.now)
    }

    #[inline]
    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        match value {
            Some(e) => self.ks.put_locked(self.stripe, key, e, self.now),
            None => self.ks.delete_locked(self.stripe, key, self.now),
        }
    }

    fn max_value_len(&self) -> usize {
        self.ks.config.max_value_len
    }

    #[inline]
    fn count_read(&mut self, key: &[u8], hit: bool) {
        self.ks.count_read(key, hit);
    }
}

/// A buffered write of an [`Overlay`].
#[derive(Debug)]
struct Pending {
    /// The new envelope, or a delete.
    value: Option<Bytes>,
    /// The new expiry, for the TTL index.
    expiry: Option<u64>,
    /// Whether a command wrote it (a modification for WATCH), rather than expiry.
    touched: bool,
    /// Whether it deletes an expired key (counted in `expired_keys`).
    expired: bool,
}

/// Several keys' stripes, locked, at one time: reads see the engine plus this overlay's own
/// earlier writes; writes are buffered and [`Overlay::commit`] writes them as one atomic
/// [`WriteBatch`]. What MSET, MSETNX, DEL and a whole MULTI/EXEC run over, so no reader or
/// writer can observe part of them.
pub(crate) struct Overlay<'a> {
    ks: &'a Keyspace,
    guards: StripeGuards<'a>,
    now: Timestamp,
    pending: FxHashMap<Bytes, Pending>,
    /// Whether a FLUSHDB/FLUSHALL ran: SCAN cursors are forgotten at commit.
    flushed: bool,
}

impl<'a> Overlay<'a> {
    /// Takes the time after the locks, so the batch's versions are newer than any earlier
    /// write of its keys.
    fn new(ks: &'a Keyspace, guards: StripeGuards<'a>) -> Self {
        Self {
            ks,
            guards,
            now: ks.clock.now(),
            pending: FxHashMap::default(),
            flushed: false,
        }
    }

    /// Writes every buffered write as one batch at the overlay's time, then updates the TTL
    /// index and the watchers of the keys commands modified.
    fn commit(mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for (k, p) in &self.pending {
            match &p.value {
                Some(v) => {
                    batch.put(k.clone(), self.now, v.clone());
                }
                None => {
                    batch.delete(k.clone(), self.now);
                }
            }
        }
        self.ks.horizon(self.now);
        self.ks.engine.write_batch(batch)?;
        let mut expired = 0;
        for (k, p) in self.pending.drain() {
            let s = self.guards.of(&k)?;
            if p.touched {
                s.touch(&k);
            }
            expired += p.expired as u64;
            match &p.value {
                Some(v) => self
                    .ks
                    .account_put(s, &k, entry_bytes(k.len(), v.len()), self.now),
                None => self.ks.account_delete(s, &k),
            }
            self.ks.index_owned(s, k, p.expiry);
        }
        self.ks.expired_keys.fetch_add(expired, Ordering::Relaxed);
        if self.flushed {
            self.ks.cursors.lock().clear();
        }
        Ok(())
    }

    /// FLUSHDB/FLUSHALL inside the overlay: deletes every key (the overlay must hold every
    /// stripe). Not a modification for WATCH, as in Redis 7: a watched key that existed is
    /// gone, which fails EXEC by itself; one that did not exist did not change.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.guards.ids.len() != STRIPES {
            return Err(RedisError::Corrupt("flush without every stripe locked"));
        }
        for p in self.pending.values_mut() {
            p.value = None;
            p.expiry = None;
        }
        let mut start = Bound::Unbounded;
        loop {
            let page = self
                .ks
                .engine
                .scan(start, Bound::Unbounded, Timestamp::MAX, PAGE, false)?;
            let full = page.len() == PAGE;
            let last = page.last().map(|(k, _)| k.clone());
            for (k, _) in page {
                self.pending.entry(k).or_insert(Pending {
                    value: None,
                    expiry: None,
                    touched: false,
                    expired: false,
                });
            }
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => break,
            }
        }
        self.flushed = true;
        Ok(())
    }

    /// KEYS (and SCAN, from after `after`) as this overlay sees the keyspace: live engine keys
    /// and the overlay's own writes, in key order, matching the glob `pattern`.
    pub(crate) fn keys(
        &mut self,
        pattern: Option<&[u8]>,
        after: Option<Bytes>,
    ) -> Result<Vec<Bytes>> {
        self.keys_of_type(pattern, after, None)
    }

    /// [`Overlay::keys`] of the keys holding a value of type `kind` (SCAN ... TYPE).
    pub(crate) fn keys_of_type(
        &mut self,
        pattern: Option<&[u8]>,
        after: Option<Bytes>,
        kind: Option<Kind>,
    ) -> Result<Vec<Bytes>> {
        let mut out = Vec::new();
        let prefix = pattern.map_or(&[][..], literal_prefix);
        let mut start = match after {
            Some(k) if prefix.is_empty() || &k[..] >= prefix => Bound::Excluded(k),
            _ if prefix.is_empty() => Bound::Unbounded,
            _ => Bound::Included(Bytes::copy_from_slice(prefix)),
        };
        let end = prefix_end(prefix);
        let lower = start.clone();
        loop {
            let rows = self
                .ks
                .engine
                .scan(start, end.clone(), Timestamp::MAX, PAGE, false)?;
            let full = rows.len() == PAGE;
            let last = rows.last().map(|(k, _)| k.clone());
            for (k, v) in rows {
                if self.pending.contains_key(&k) {
                    continue;
                }
                let live = match decode_version(Some(v)) {
                    Ok(Some(e)) => !e.is_expired(self.now) && kind.is_none_or(|k| e.kind == k),
                    _ => kind.is_none(),
                };
                if live && pattern.is_none_or(|p| glob_match(p, &k, false)) {
                    out.push(k);
                }
            }
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => break,
            }
        }
        let in_range = |k: &Bytes| {
            (match &lower {
                Bound::Excluded(l) => k > l,
                Bound::Included(l) => k >= l,
                Bound::Unbounded => true,
            }) && (match &end {
                Bound::Excluded(e) => k < e,
                _ => true,
            })
        };
        out.extend(
            self.pending
                .iter()
                .filter(|(k, p)| {
                    p.value.as_ref().is_some_and(|v| {
                        kind.is_none_or(|want| {
                            meridian_redis::view::decode(v.clone()).is_ok_and(|e| e.kind == want)
                        })
                    }) && in_range(k)
                        && pattern.is_none_or(|pat| glob_match(pat, k, false))
                })
                .map(|(k, _)| k.clone()),
        );
        out.sort_unstable();
        Ok(out)
    }

    /// DBSIZE as this overlay sees the keyspace.
    pub(crate) fn dbsize(&mut self) -> Result<u64> {
        let mut n = self.ks.engine.stats().live_keys as i64;
        for (k, p) in &self.pending {
            let before = self.ks.load(k).map(|e| e.is_some()).unwrap_or(true);
            n += p.value.is_some() as i64 - before as i64;
        }
        Ok(n.max(0) as u64)
    }

    /// Takes a SCAN cursor's resume key (see [`Keyspace::scan`]).
    pub(crate) fn scan_resume(&self, cursor: u64) -> Option<Bytes> {
        (cursor != 0)
            .then(|| self.ks.cursors.lock().take(cursor))
            .flatten()
    }
}

impl View for Overlay<'_> {
    fn now(&self) -> Timestamp {
        self.now
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        if let Some(p) = self.pending.get(key) {
            return match &p.value {
                Some(v) => meridian_redis::view::decode(v.clone()).map(Some),
                None => Ok(None),
            };
        }
        // Fails for a key outside the locked stripes before reading it.
        self.guards.of(key)?;
        match self.ks.load(key)? {
            Some(e) if e.is_expired(self.now) => {
                self.pending.insert(
                    Bytes::copy_from_slice(key),
                    Pending {
                        value: None,
                        expiry: None,
                        touched: false,
                        expired: true,
                    },
                );
                Ok(None)
            }
            Some(e) => {
                if self.ks.tracks_reads()
                    && let Some(m) = self.guards.of(key)?.meta.get_mut(key)
                {
                    m.access(self.now);
                }
                Ok(Some(e))
            }
            None => Ok(None),
        }
    }

    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        self.guards.of(key)?;
        let p = Pending {
            value: value.map(|e| encode_kind(e.kind, e.data, e.expiry)),
            expiry: value.and_then(|e| e.expiry),
            touched: true,
            expired: false,
        };
        match self.pending.entry(Bytes::copy_from_slice(key)) {
            MapEntry::Occupied(mut o) => {
                // A key that expired, then was written: still counted as expired.
                let expired = o.get().expired;
                *o.get_mut() = Pending { expired, ..p };
            }
            MapEntry::Vacant(v) => {
                v.insert(p);
            }
        }
        Ok(())
    }

    fn max_value_len(&self) -> usize {
        self.ks.config.max_value_len
    }

    fn count_read(&mut self, key: &[u8], hit: bool) {
        self.ks.count_read(key, hit);
    }
}

// ----- WATCH and transactions ------------------------------------------------------------

/// One WATCHed key: what EXEC compares. Registered in its stripe until dropped with
/// [`Keyspace::unwatch`] (a [`WatchSet`] does that when dropped).
#[derive(Debug)]
pub(crate) struct Watch {
    key: Bytes,
    /// The key's modification count when watched.
    epoch: u64,
    /// Whether the key was live when watched (so expiring since then is a change).
    live: bool,
}

/// A connection's watched keys; unregisters them when dropped (a connection that goes away
/// mid-WATCH leaves nothing behind).
#[derive(Debug)]
pub(crate) struct WatchSet {
    ks: Arc<Keyspace>,
    watches: Vec<Watch>,
}

impl WatchSet {
    /// An empty set over `ks`.
    pub(crate) fn new(ks: Arc<Keyspace>) -> Self {
        Self {
            ks,
            watches: Vec::new(),
        }
    }

    /// WATCH: registers `key` (a key watched twice is watched once).
    pub(crate) fn watch(&mut self, key: &[u8]) {
        if self.watches.iter().any(|w| w.key == key) {
            return;
        }
        let w = self.ks.watch(key);
        self.watches.push(w);
    }

    /// UNWATCH: forgets every key.
    pub(crate) fn clear(&mut self) {
        for w in self.watches.drain(..) {
            self.ks.unwatch(&w);
        }
    }

    /// The registered watches.
    pub(crate) fn watches(&self) -> &[Watch] {
        &self.watches
    }
}

impl Drop for WatchSet {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Keyspace {
    /// Registers a watch of `key`: later modifications of it (by anyone) are counted in its
    /// stripe until [`Keyspace::unwatch`].
    pub(crate) fn watch(&self, key: &[u8]) -> Watch {
        let mut s = self.lock(key);
        let now = self.clock.now();
        // A value that cannot be decoded exists: treat it as live.
        let live = self
            .load(key)
            .map_or(true, |e| e.is_some_and(|e| !e.is_expired(now)));
        let slot = s.watched.entry(Bytes::copy_from_slice(key)).or_default();
        slot.watchers += 1;
        Watch {
            key: Bytes::copy_from_slice(key),
            epoch: slot.epoch,
            live,
        }
    }

    /// Drops a watch registered by [`Keyspace::watch`].
    pub(crate) fn unwatch(&self, w: &Watch) {
        let mut s = self.lock(&w.key);
        if let Some(slot) = s.watched.get_mut(&w.key[..]) {
            slot.watchers = slot.watchers.saturating_sub(1);
            if slot.watchers == 0 {
                s.watched.remove(&w.key[..]);
            }
        }
    }

    /// A transaction (MULTI/EXEC): locks the stripes of `keys` and of the watched keys in
    /// ascending order (every stripe with `all`, for FLUSH, KEYS, SCAN, DBSIZE), checks that
    /// no watched key was modified or expired since WATCH — `Ok(None)` if one was, nothing
    /// run — then runs `run` over one [`Overlay`] and writes all its writes as one batch.
    pub(crate) fn transaction<'k, R>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
        all: bool,
        watches: &'k [Watch],
        run: impl FnOnce(&mut Overlay<'_>) -> R,
    ) -> Result<Option<R>> {
        let mut guards = if all {
            StripeGuards {
                ids: (0..STRIPES).collect(),
                guards: self.stripes.iter().map(|s| s.lock()).collect(),
            }
        } else {
            self.lock_many(keys.chain(watches.iter().map(|w| &w.key[..])))
        };
        let now = self.clock.now();
        for w in watches {
            let s = guards.of(&w.key)?;
            let epoch = s.watched.get(&w.key[..]).map(|slot| slot.epoch);
            if epoch != Some(w.epoch) {
                return Ok(None);
            }
            if w.live {
                let live = self
                    .load(&w.key)
                    .map_or(true, |e| e.is_some_and(|e| !e.is_expired(now)));
                if !live {
                    return Ok(None);
                }
            }
        }
        let mut ov = Overlay::new(self, guards);
        let r = run(&mut ov);
        ov.commit()?;
        Ok(Some(r))
    }
}

/// The literal bytes a glob pattern's matches must start with.
fn literal_prefix(pattern: &[u8]) -> &[u8] {
    let n = pattern
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(pattern.len());
    &pattern[..n]
}

/// The exclusive upper bound of keys starting with `prefix` (unbounded for an empty prefix or
/// one of only `0xff` bytes).
fn prefix_end(prefix: &[u8]) -> Bound<Bytes> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Bound::Excluded(Bytes::from(end));
        }
    }
    Bound::Unbounded
}

#[cfg(test)]
mod hash_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::ManualClock;
    use meridian_redis::options::SetCondition;
    use meridian_storage::MemEngine;

    const START: Timestamp = Timestamp(1_700_000_000_000_000);

    fn setup() -> (Keyspace, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(START));
        let ks = Keyspace::new(Arc::new(MemEngine::new()), clock.clone());
        (ks, clock)
    }

    fn opts(args: &[&str], ks: &Keyspace) -> Result<SetOptions> {
        SetOptions::parse(args.iter().map(|a| a.as_bytes()), "set", ks.now())
    }

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn values_are_enveloped_and_read_zero_copy() {
        let (ks, _) = setup();
        ks.set(b"k", b"hello", SetOptions::default()).unwrap();
        let raw = ks
            .engine()
            .get_value(b"k", Timestamp::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(&raw[..], b"\0hello");
        let v = ks.get(b"k").unwrap().unwrap();
        assert_eq!(v, b("hello"));
        ks.set(b"t", b"x", SetOptions::with_ttl(Duration::from_secs(1)))
            .unwrap();
        let raw = ks
            .engine()
            .get_value(b"t", Timestamp::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(raw.len(), 10);
        assert_eq!(raw[0], 0x01, "the expiry flag");
    }

    /// Whether a transaction with `watches` would run now (nothing queued).
    fn exec_runs(ks: &Keyspace, ws: &WatchSet) -> bool {
        ks.transaction(std::iter::empty(), false, ws.watches(), |_| ())
            .unwrap()
            .is_some()
    }

    fn watching(ks: &Arc<Keyspace>, key: &[u8]) -> WatchSet {
        let mut ws = WatchSet::new(ks.clone());
        ws.watch(key);
        ws
    }

    #[test]
    fn watch_detects_every_modification_and_nothing_else() {
        let clock = Arc::new(ManualClock::new(START));
        let ks = Arc::new(Keyspace::new(Arc::new(MemEngine::new()), clock.clone()));
        let o = SetOptions::default();
        // Shadowed sets stay alive to the end of the block, then unregister.
        {
            // Untouched: runs.
            let ws = watching(&ks, b"w");
            assert!(exec_runs(&ks, &ws));
            // Written by anyone.
            let ws = watching(&ks, b"w");
            ks.set(b"w", b"1", o).unwrap();
            assert!(!exec_runs(&ks, &ws));
            // Deleted, then absent again with no tombstone left (retention zero): still a change.
            ks.del(&[b"w"]).unwrap();
            let ws = watching(&ks, b"w");
            ks.set(b"w", b"1", o).unwrap();
            ks.del(&[b"w"]).unwrap();
            assert!(
                ks.engine().get_latest(b"w").unwrap().is_none(),
                "no tombstone left"
            );
            assert!(!exec_runs(&ks, &ws));
            // A write that changes nothing is no modification (SET NX over a live key).
            ks.set(b"w", b"1", o).unwrap();
            let ws = watching(&ks, b"w");
            let nx = SetOptions {
                condition: SetCondition::IfAbsent,
                ..o
            };
            assert!(!ks.set(b"w", b"2", nx).unwrap().written);
            assert!(exec_runs(&ks, &ws));
            // Another key of the same stripe is not this key.
            let twin = (0..100_000)
                .map(|i| format!("t{i}"))
                .find(|k| stripe_of(k.as_bytes()) == stripe_of(b"w"))
                .unwrap();
            ks.set(twin.as_bytes(), b"x", o).unwrap();
            assert!(exec_runs(&ks, &ws));
            // Expiring between WATCH and EXEC is a change, deleted or not yet.
            ks.set(b"e", b"1", SetOptions::with_ttl(Duration::from_millis(5)))
                .unwrap();
            let ws = watching(&ks, b"e");
            clock.advance(Duration::from_millis(10));
            assert!(!exec_runs(&ks, &ws));
            // Already expired at WATCH: its deletion by the active expirer is not a change.
            ks.set(b"x", b"1", SetOptions::with_ttl(Duration::from_millis(5)))
                .unwrap();
            clock.advance(Duration::from_millis(10));
            let ws = watching(&ks, b"x");
            while ks.expire_cycle(usize::MAX).expired > 0 {}
            assert!(exec_runs(&ks, &ws));
            // FLUSHALL changes the watched keys that existed, not the absent ones.
            ks.set(b"w", b"1", o).unwrap();
            let (live, absent) = (watching(&ks, b"w"), watching(&ks, b"nope"));
            ks.flush().unwrap();
            assert!(!exec_runs(&ks, &live));
            assert!(exec_runs(&ks, &absent));
        }
        // Dropped watch sets leave no registration behind.
        assert!(ks.stripes.iter().all(|s| s.lock().watched.is_empty()));
    }

    #[test]
    fn transaction_overlay_reads_its_writes_and_commits_one_batch() {
        let (ks, _) = setup();
        ks.set(b"a", b"old", SetOptions::default()).unwrap();
        let keys: [&[u8]; 3] = [b"a", b"b", b"n"];
        let out = ks
            .transaction(keys.into_iter(), false, &[], |ov| {
                strings::set(ov, b"a", b"new", SetOptions::default()).unwrap();
                strings::set(ov, b"b", b"x", SetOptions::default()).unwrap();
                assert_eq!(strings::get(ov, b"a").unwrap(), Some(b("new")));
                assert_eq!(strings::incr_by(ov, b"n", 5).unwrap(), 5);
                assert_eq!(strings::incr_by(ov, b"n", 1).unwrap(), 6);
                assert_eq!(strings::del(ov, [&b"b"[..], b"b"]).unwrap(), 1);
                // Nothing reached the engine yet.
                assert_eq!(
                    ks.engine()
                        .get_value(b"a", Timestamp::MAX)
                        .unwrap()
                        .unwrap()[1..],
                    b"old"[..]
                );
                assert!(ks.engine().get_latest(b"n").unwrap().is_none());
                // A key outside the locked stripes is refused, not written unserialized.
                let outside = (0..100_000)
                    .map(|i| format!("o{i}"))
                    .find(|k| !keys.iter().any(|l| stripe_of(l) == stripe_of(k.as_bytes())))
                    .unwrap();
                assert!(strings::get(ov, outside.as_bytes()).is_err());
                ov.dbsize().unwrap()
            })
            .unwrap();
        assert_eq!(out, Some(2), "a and n");
        assert_eq!(ks.get(b"a").unwrap(), Some(b("new")));
        assert_eq!(ks.get(b"n").unwrap(), Some(b("6")));
        assert_eq!(ks.get(b"b").unwrap(), None);
        let ts = |k: &[u8]| ks.engine().get_latest(k).unwrap().unwrap().ts;
        assert_eq!(ts(b"a"), ts(b"n"), "one batch at one time");
    }

    /// What the used-memory estimate should be: every live key's length, its stored value's
    /// length and the overhead, by a full scan of the engine (what the keyspace must not do).
    fn scanned_memory(ks: &Keyspace) -> u64 {
        ks.engine()
            .scan(
                Bound::Unbounded,
                Bound::Unbounded,
                Timestamp::MAX,
                1 << 20,
                false,
            )
            .unwrap()
            .iter()
            .map(|(k, v)| entry_bytes(k.len(), v.value.as_ref().unwrap().len()))
            .sum()
    }

    #[test]
    fn used_memory_is_kept_incrementally_and_matches_a_scan() {
        let (ks, clock) = setup();
        // Exact accounting runs while a limit is set.
        ks.set_maxmemory(u64::MAX).unwrap();
        assert_eq!(ks.used_memory(), 0);
        // Grows with value sizes.
        ks.set(b"k", vec![b'x'; 10], SetOptions::default()).unwrap();
        let small = ks.used_memory();
        assert_eq!(small, entry_bytes(1, 11));
        ks.set(b"k", vec![b'x'; 1010], SetOptions::default())
            .unwrap();
        assert_eq!(ks.used_memory(), small + 1000);
        ks.set(b"k", b"", SetOptions::default()).unwrap();
        assert_eq!(ks.used_memory(), small - 10);
        // A model run over every write path: single-key writes, overlays (MSET, DEL,
        // transactions), TTLs, lazy and active expiry.
        let mut x: u64 = 7;
        let mut rand = |n: u64| {
            x = splitmix(x);
            x % n
        };
        for step in 0..3_000 {
            let key = format!("key{}", rand(40));
            let k = key.as_bytes();
            let len = rand(300) as usize;
            match rand(12) {
                0..=2 => {
                    ks.set(k, vec![b'v'; len], SetOptions::default()).unwrap();
                }
                3 => {
                    let ttl = Duration::from_millis(1 + rand(50));
                    ks.set(k, vec![b't'; len], SetOptions::with_ttl(ttl))
                        .unwrap();
                }
                4 => {
                    ks.append(k, &vec![b'a'; len]).unwrap();
                }
                5 => {
                    let _ = ks.incr_by(k, 1);
                }
                6 => {
                    ks.del(&[k, &b"key1"[..]]).unwrap();
                }
                7 => {
                    let other = format!("key{}", rand(40));
                    ks.mset(&[(k, &b"m"[..]), (other.as_bytes(), &vec![b'n'; len][..])])
                        .unwrap();
                }
                8 => {
                    ks.getdel(k).unwrap();
                }
                9 => {
                    let _ = ks.expire(
                        k,
                        Deadline::After(Duration::from_millis(rand(20))),
                        ExpireCondition::default(),
                    );
                }
                10 => {
                    clock.advance(Duration::from_millis(rand(30)));
                    ks.get(k).unwrap();
                    ks.expire_cycle(usize::MAX);
                }
                _ => {
                    let keys: [&[u8]; 2] = [k, b"key2"];
                    ks.transaction(keys.into_iter(), false, &[], |ov| {
                        strings::set(ov, k, &vec![b'e'; len], SetOptions::default()).unwrap();
                        strings::del(ov, [&b"key2"[..]]).unwrap();
                    })
                    .unwrap();
                }
            }
            assert_eq!(ks.used_memory(), scanned_memory(&ks), "after step {step}");
        }
        // Deleting everything returns to the baseline, key by key or all at once.
        let keys = ks.keys(b"*").unwrap();
        ks.set(b"one-more", b"x", SetOptions::default()).unwrap();
        ks.del(&keys).unwrap();
        assert_eq!(ks.used_memory(), entry_bytes(8, 2));
        ks.flush().unwrap();
        assert_eq!(ks.used_memory(), 0);
        ks.set(b"t", b"x", SetOptions::with_ttl(Duration::from_millis(5)))
            .unwrap();
        clock.advance(Duration::from_millis(10));
        ks.expire_cycle(usize::MAX);
        assert_eq!(ks.used_memory(), 0, "active expiry releases it");
    }

    #[test]
    fn used_memory_is_rebuilt_when_a_keyspace_opens_over_data() {
        let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
        let clock = Arc::new(ManualClock::new(START));
        let limited = || KeyspaceConfig {
            maxmemory: u64::MAX,
            ..KeyspaceConfig::default()
        };
        let ks = Keyspace::with_config(engine.clone(), clock.clone(), limited());
        ks.set(b"a", b"12345", SetOptions::default()).unwrap();
        ks.set(b"b", b"x", SetOptions::with_ttl(Duration::from_secs(9)))
            .unwrap();
        let used = ks.used_memory();
        drop(ks);
        let again = Keyspace::with_config(engine.clone(), clock.clone(), limited());
        assert_eq!(again.used_memory(), used);
        drop(again);
        // Without a limit nothing is recorded per key: the figure is the engine's; setting a
        // limit builds the records from the engine, removing it drops them.
        let open = Keyspace::new(engine, clock);
        assert!(
            open.used_memory() >= used,
            "the engine's count has the same parts"
        );
        open.set_maxmemory(u64::MAX).unwrap();
        assert_eq!(open.used_memory(), used);
        open.set_maxmemory(0).unwrap();
        open.set(b"c", b"v", SetOptions::default()).unwrap();
        open.set_maxmemory(u64::MAX).unwrap();
        assert_eq!(open.used_memory(), used + entry_bytes(1, 2));
        open.del(&[b"a", b"b", b"c"]).unwrap();
        assert_eq!(open.used_memory(), 0);
    }

    /// A keyspace under `policy` with a limit too high to matter yet (records are kept).
    fn limited(policy: MaxmemoryPolicy) -> (Keyspace, Arc<ManualClock>) {
        let (ks, clock) = setup();
        ks.set_maxmemory_policy(policy);
        ks.set_maxmemory(u64::MAX).unwrap();
        (ks, clock)
    }

    #[test]
    fn noeviction_refuses_over_the_limit_until_keys_are_deleted() {
        let (ks, _) = limited(MaxmemoryPolicy::NoEviction);
        assert!(ks.make_room(), "no limit");
        for i in 0..10 {
            ks.set(format!("k{i}"), vec![b'v'; 100], SetOptions::default())
                .unwrap();
        }
        ks.set_maxmemory(ks.used_memory()).unwrap();
        assert!(
            !ks.over_maxmemory() && ks.make_room(),
            "at the limit is not over it"
        );
        ks.set(b"k10", b"v", SetOptions::default()).unwrap();
        assert!(ks.over_maxmemory());
        assert!(!ks.make_room(), "noeviction evicts nothing");
        assert_eq!(ks.dbsize(), 11);
        assert_eq!(ks.stats().evicted_keys, 0);
        ks.del(&[b"k0"]).unwrap();
        assert!(ks.make_room());
        ks.set_maxmemory(0).unwrap();
        assert!(!ks.over_maxmemory());
    }

    #[test]
    fn allkeys_lru_evicts_the_least_recently_used_and_keeps_under_the_limit() {
        let (ks, clock) = limited(MaxmemoryPolicy::AllkeysLru);
        for k in ["a", "b", "c", "d", "e"] {
            ks.set(k, vec![b'v'; 50], SetOptions::default()).unwrap();
            clock.advance(Duration::from_secs(1));
        }
        // Reads count as uses: a and b are now the most recent; c the least.
        ks.get(b"a").unwrap();
        clock.advance(Duration::from_secs(1));
        assert_eq!(ks.mget(&[b"b", b"d"]).unwrap().len(), 2);
        ks.set_maxmemory(ks.used_memory() - 1).unwrap();
        assert!(ks.make_room());
        // Five keys, five samples: every key is compared, so the choice is exact.
        assert_eq!(ks.get(b"c").unwrap(), None, "the least recently used");
        assert_eq!(ks.dbsize(), 4);
        assert_eq!(ks.stats().evicted_keys, 1);
        assert!(ks.used_memory() <= ks.maxmemory());
        // Under a steady stream of writes, every command starts within the limit.
        let max = 20_000;
        ks.set_maxmemory(max).unwrap();
        for i in 0..2_000 {
            assert!(ks.make_room());
            assert!(ks.used_memory() <= max);
            ks.set(format!("w{i}"), vec![b'w'; 100], SetOptions::default())
                .unwrap();
            assert_eq!(ks.used_memory(), scanned_memory(&ks));
        }
        assert!(ks.stats().evicted_keys > 1_500);
        assert!(ks.get(b"w1999").unwrap().is_some(), "the newest survives");
    }

    #[test]
    fn allkeys_lfu_keeps_the_frequently_read_key() {
        let (ks, clock) = limited(MaxmemoryPolicy::AllkeysLfu);
        for k in ["hot", "c1", "c2", "c3"] {
            ks.set(k, b"v", SetOptions::default()).unwrap();
        }
        for _ in 0..50 {
            ks.get(b"hot").unwrap();
            clock.advance(Duration::from_millis(1));
        }
        for _ in 0..3 {
            ks.set_maxmemory(ks.used_memory() - 1).unwrap();
            assert!(ks.make_room());
        }
        assert_eq!(ks.dbsize(), 1);
        assert!(ks.get(b"hot").unwrap().is_some());
    }

    #[test]
    fn volatile_policies_evict_only_keys_with_a_ttl() {
        for policy in [
            MaxmemoryPolicy::VolatileTtl,
            MaxmemoryPolicy::VolatileLru,
            MaxmemoryPolicy::VolatileLfu,
            MaxmemoryPolicy::VolatileRandom,
        ] {
            let (ks, _) = limited(policy);
            for i in 0..5 {
                ks.set(format!("p{i}"), b"persistent", SetOptions::default())
                    .unwrap();
            }
            for (k, secs) in [("v100", 100), ("v10", 10), ("v50", 50)] {
                ks.set(
                    k,
                    b"volatile",
                    SetOptions::with_ttl(Duration::from_secs(secs)),
                )
                .unwrap();
            }
            ks.set_maxmemory(ks.used_memory() - 1).unwrap();
            assert!(ks.make_room(), "{policy}");
            assert_eq!(ks.dbsize(), 7, "{policy}");
            if policy == MaxmemoryPolicy::VolatileTtl {
                assert_eq!(ks.get(b"v10").unwrap(), None, "the soonest to expire");
            }
            // A limit only the persistent keys exceed: every volatile key goes, then OOM.
            ks.set_maxmemory(1).unwrap();
            assert!(!ks.make_room(), "{policy}");
            assert_eq!(ks.stats().expires, 0, "{policy}");
            assert_eq!(
                ks.dbsize(),
                5,
                "{policy}: persistent keys are never evicted"
            );
            assert_eq!(ks.stats().evicted_keys, 3, "{policy}");
        }
    }

    #[test]
    fn allkeys_random_evicts_until_it_fits() {
        let (ks, _) = limited(MaxmemoryPolicy::AllkeysRandom);
        for i in 0..100 {
            ks.set(format!("k{i}"), vec![b'v'; 100], SetOptions::default())
                .unwrap();
        }
        let half = ks.used_memory() / 2;
        ks.set_maxmemory(half).unwrap();
        assert!(ks.make_room());
        assert!(ks.used_memory() <= half);
        assert!((49..=51).contains(&ks.dbsize()), "{}", ks.dbsize());
        ks.set_maxmemory(1).unwrap();
        assert!(ks.make_room(), "fits once everything is evicted");
        assert_eq!(ks.dbsize(), 0);
        assert_eq!(ks.used_memory(), 0);
    }

    #[test]
    fn only_the_latest_version_is_kept_by_default() {
        let (ks, _) = setup();
        for i in 0..10 {
            ks.set(b"k", i.to_string(), SetOptions::default()).unwrap();
        }
        assert_eq!(ks.engine().versions(b"k").unwrap().len(), 1);
        assert_eq!(ks.del(&[b"k"]).unwrap(), 1);
        assert!(
            ks.engine().versions(b"k").unwrap().is_empty(),
            "tombstone pruned too"
        );
    }

    #[test]
    fn retention_keeps_recent_versions_for_snapshots() {
        let clock = Arc::new(ManualClock::new(START));
        let ks = Keyspace::new(Arc::new(MemEngine::new()), clock.clone())
            .with_retention(Duration::from_secs(10));
        ks.set(b"k", b"a", SetOptions::default()).unwrap();
        clock.advance(Duration::from_secs(1));
        ks.set(b"k", b"b", SetOptions::default()).unwrap();
        assert_eq!(ks.engine().versions(b"k").unwrap().len(), 2);
        clock.advance(Duration::from_secs(20));
        ks.set(b"k", b"c", SetOptions::default()).unwrap();
        // The version visible at the horizon (b) stays; older ones go.
        let v = ks.engine().versions(b"k").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].value.as_deref(), Some(&b"\0b"[..]));
    }

    #[test]
    fn expiry_at_exact_times() {
        let (ks, clock) = setup();
        ks.set(b"k", b"v", opts(&["EX", "10"], &ks).unwrap())
            .unwrap();
        match ks.ttl(b"k").unwrap() {
            KeyTtl::Expires { remaining, .. } => {
                assert!(remaining <= Duration::from_secs(10));
                assert!(remaining > Duration::from_millis(9_999));
            }
            other => panic!("{other:?}"),
        }
        clock.advance(Duration::from_millis(9_999));
        assert_eq!(ks.get(b"k").unwrap(), Some(b("v")));
        assert_eq!(ks.stats().expires, 1);
        clock.advance(Duration::from_millis(2));
        assert_eq!(ks.get(b"k").unwrap(), None, "expired after 10 s");
        let st = ks.stats();
        assert_eq!(
            (st.expired_keys, st.expires, st.keys),
            (1, 0, 0),
            "deleted lazily"
        );
        assert_eq!(
            (st.hits, st.misses),
            (2, 1),
            "TTL counts as a read, as in Redis"
        );
        assert_eq!(ks.ttl(b"k").unwrap(), KeyTtl::Missing);
    }

    #[test]
    fn absolute_expiry_in_the_past_deletes() {
        let (ks, _) = setup();
        ks.set(b"k", b"v", SetOptions::default()).unwrap();
        let past = (START.0 / 1000 - 1).to_string();
        ks.set(b"k", b"w", opts(&["PXAT", &past], &ks).unwrap())
            .unwrap();
        assert_eq!(ks.get(b"k").unwrap(), None);
        assert_eq!(ks.dbsize(), 0);
        ks.set(b"k", b"v", SetOptions::default()).unwrap();
        assert!(
            ks.expire(
                b"k",
                Deadline::At(Timestamp::MIN),
                ExpireCondition::default()
            )
            .unwrap()
        );
        assert_eq!(ks.dbsize(), 0);
        assert!(
            !ks.expire(
                b"k",
                Deadline::After(Duration::from_secs(1)),
                ExpireCondition::default()
            )
            .unwrap()
        );
    }

    #[test]
    fn active_expiry_deletes_unread_keys_with_bounded_work() {
        let (ks, clock) = setup();
        for i in 0..100 {
            let ttl = if i % 2 == 0 { 1 } else { 100 };
            ks.set(
                format!("k{i}"),
                b"v",
                SetOptions::with_ttl(Duration::from_secs(ttl)),
            )
            .unwrap();
        }
        for i in 0..50 {
            ks.set(format!("p{i}"), b"v", SetOptions::default())
                .unwrap();
        }
        assert_eq!(ks.stats().expires, 100);
        assert_eq!(
            ks.expire_cycle(1000),
            ExpireCycle {
                examined: 100,
                expired: 0
            }
        );
        clock.advance(Duration::from_secs(2));
        let small = ks.expire_cycle(10);
        assert!(
            small.examined >= 10 && small.examined < 100,
            "bounded: {small:?}"
        );
        let mut expired = small.expired;
        while expired < 50 {
            expired += ks.expire_cycle(10).expired;
        }
        assert_eq!(expired, 50);
        let st = ks.stats();
        assert_eq!((st.keys, st.expires, st.expired_keys), (100, 50, 50));
    }

    #[tokio::test(start_paused = true)]
    async fn active_expirer_task_runs_until_shutdown() {
        let (ks, clock) = setup();
        let ks = Arc::new(ks);
        ks.set(b"k", b"v", SetOptions::with_ttl(Duration::from_millis(500)))
            .unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(ks.clone().run_active_expiry(stop.clone()));
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(ks.dbsize(), 0);
        assert_eq!(ks.stats().expired_keys, 1);
        stop.cancel();
        task.await.unwrap();
    }

    #[test]
    fn ttl_index_is_rebuilt_on_open() {
        let clock = Arc::new(ManualClock::new(START));
        let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
        let ks = Keyspace::new(engine.clone(), clock.clone());
        for i in 0..3000 {
            let o = if i % 3 == 0 {
                SetOptions::with_ttl(Duration::from_secs(5))
            } else {
                SetOptions::default()
            };
            ks.set(format!("k{i:05}"), b"v", o).unwrap();
        }
        drop(ks);
        let ks = Keyspace::new(engine, clock.clone());
        assert_eq!(ks.stats().expires, 1000);
        clock.advance(Duration::from_secs(6));
        let mut n = 0;
        for _ in 0..10 {
            n += ks.expire_cycle(usize::MAX).expired;
        }
        assert_eq!(n, 1000);
    }

    #[test]
    fn incr_like_redis() {
        let (ks, _) = setup();
        assert_eq!(ks.incr_by(b"n", 1).unwrap(), 1);
        assert_eq!(ks.incr_by(b"n", -11).unwrap(), -10);
        assert_eq!(ks.get(b"n").unwrap(), Some(b("-10")));
        ks.set(b"n", i64::MAX.to_string(), SetOptions::default())
            .unwrap();
        assert!(matches!(ks.incr_by(b"n", 1), Err(RedisError::Overflow)));
        assert_eq!(
            ks.incr_by(b"n", 1).unwrap_err().to_string(),
            "increment or decrement would overflow"
        );
        assert!(matches!(
            ks.decr_by(b"n", i64::MIN),
            Err(RedisError::DecrementOverflow)
        ));
        for bad in [
            "",
            " 1",
            "1 ",
            "+1",
            "01",
            "-0",
            "1.0",
            "abc",
            "99999999999999999999",
        ] {
            ks.set(b"s", bad, SetOptions::default()).unwrap();
            let e = ks.incr_by(b"s", 1).unwrap_err();
            assert_eq!(
                e.to_string(),
                "value is not an integer or out of range",
                "{bad:?}"
            );
        }
        ks.set(b"m", i64::MIN.to_string(), SetOptions::default())
            .unwrap();
        assert!(matches!(ks.incr_by(b"m", -1), Err(RedisError::Overflow)));
        assert_eq!(ks.incr_by(b"m", 1).unwrap(), i64::MIN + 1);
    }

    #[test]
    fn incr_and_append_keep_the_ttl_set_clears_it() {
        let (ks, _) = setup();
        ks.set(b"n", b"1", SetOptions::with_ttl(Duration::from_secs(50)))
            .unwrap();
        ks.incr_by(b"n", 1).unwrap();
        ks.append(b"n", b"0").unwrap();
        assert_eq!(ks.get(b"n").unwrap(), Some(b("20")));
        assert!(matches!(ks.ttl(b"n").unwrap(), KeyTtl::Expires { .. }));
        ks.set(b"n", b"x", opts(&["KEEPTTL"], &ks).unwrap())
            .unwrap();
        assert!(matches!(ks.ttl(b"n").unwrap(), KeyTtl::Expires { .. }));
        ks.set(b"n", b"x", SetOptions::default()).unwrap();
        assert_eq!(ks.ttl(b"n").unwrap(), KeyTtl::Persistent);
        assert_eq!(ks.stats().expires, 0);
    }

    #[test]
    fn incr_by_float() {
        let (ks, _) = setup();
        assert_eq!(ks.incr_by_float(b"f", 10.5).unwrap(), b("10.5"));
        assert_eq!(ks.incr_by_float(b"f", 0.1).unwrap(), b("10.6"));
        assert_eq!(ks.incr_by_float(b"f", -10.6).unwrap(), b("0"));
        assert_eq!(ks.incr_by_float(b"f", 5e3).unwrap(), b("5000"));
        assert!(matches!(
            ks.incr_by_float(b"f", f64::INFINITY),
            Err(RedisError::NanOrInfinity)
        ));
        ks.set(b"s", b"abc", SetOptions::default()).unwrap();
        assert!(matches!(
            ks.incr_by_float(b"s", 1.0),
            Err(RedisError::NotAFloat)
        ));
    }

    #[test]
    fn set_option_combinations() {
        let (ks, _) = setup();
        let err = |args: &[&str]| opts(args, &ks).unwrap_err().to_string();
        assert_eq!(err(&["NX", "XX"]), "syntax error");
        assert_eq!(err(&["EX", "1", "PX", "1"]), "syntax error");
        assert_eq!(err(&["EX", "1", "KEEPTTL"]), "syntax error");
        assert_eq!(err(&["KEEPTTL", "EXAT", "1"]), "syntax error");
        assert_eq!(err(&["EX"]), "syntax error");
        assert_eq!(err(&["FOO"]), "syntax error");
        assert_eq!(err(&["EX", "0"]), "invalid expire time in 'set' command");
        assert_eq!(err(&["PX", "-5"]), "invalid expire time in 'set' command");
        assert_eq!(
            err(&["EX", "9223372036854776"]),
            "invalid expire time in 'set' command"
        );
        assert_eq!(
            err(&["PX", "9223372036854775807"]),
            "invalid expire time in 'set' command"
        );
        assert_eq!(
            err(&["EX", "ten"]),
            "value is not an integer or out of range"
        );
        assert!(
            opts(&["nx", "get", "ex", "5", "EX", "6"], &ks).is_ok(),
            "same option twice"
        );

        // NX / XX / GET.
        let nx = opts(&["NX"], &ks).unwrap();
        assert!(ks.set(b"k", b"1", nx).unwrap().written);
        assert!(!ks.set(b"k", b"2", nx).unwrap().written);
        let xx_get = opts(&["XX", "GET"], &ks).unwrap();
        let out = ks.set(b"k", b"3", xx_get).unwrap();
        assert_eq!(
            out,
            SetOutcome {
                written: true,
                previous: Some(b("1"))
            }
        );
        let out = ks.set(b"missing", b"3", xx_get).unwrap();
        assert_eq!(
            out,
            SetOutcome {
                written: false,
                previous: None
            }
        );
        assert_eq!(ks.get(b"missing").unwrap(), None);
        let nx_get = opts(&["NX", "GET"], &ks).unwrap();
        let out = ks.set(b"k", b"4", nx_get).unwrap();
        assert_eq!(
            out,
            SetOutcome {
                written: false,
                previous: Some(b("3"))
            }
        );
        // PX then KEEPTTL on an expired key: the key is new, without a TTL.
        let (ks, clock) = setup();
        ks.set(b"t", b"v", opts(&["PX", "100"], &ks).unwrap())
            .unwrap();
        clock.advance(Duration::from_millis(200));
        ks.set(b"t", b"w", opts(&["KEEPTTL"], &ks).unwrap())
            .unwrap();
        assert_eq!(ks.ttl(b"t").unwrap(), KeyTtl::Persistent);
        assert_eq!(ks.stats().expired_keys, 1);
    }

    #[test]
    fn expire_conditions() {
        let (ks, _) = setup();
        let c = |args: &[&str]| ExpireCondition::parse(args.iter().map(|a| a.as_bytes()));
        assert_eq!(
            c(&["NX", "GT"]).unwrap_err().to_string(),
            "NX and XX, GT or LT options at the same time are not compatible"
        );
        assert_eq!(
            c(&["GT", "lt"]).unwrap_err().to_string(),
            "GT and LT options at the same time are not compatible"
        );
        assert_eq!(c(&["XY"]).unwrap_err().to_string(), "Unsupported option XY");
        let after = |s| Deadline::After(Duration::from_secs(s));
        ks.set(b"k", b"v", SetOptions::default()).unwrap();
        assert!(!ks.expire(b"k", after(10), c(&["XX"]).unwrap()).unwrap());
        assert!(
            !ks.expire(b"k", after(10), c(&["GT"]).unwrap()).unwrap(),
            "none is infinite"
        );
        assert!(ks.expire(b"k", after(10), c(&["LT"]).unwrap()).unwrap());
        assert!(!ks.expire(b"k", after(20), c(&["NX"]).unwrap()).unwrap());
        assert!(!ks.expire(b"k", after(20), c(&["LT"]).unwrap()).unwrap());
        assert!(
            ks.expire(b"k", after(20), c(&["XX", "GT"]).unwrap())
                .unwrap()
        );
        assert!(ks.persist(b"k").unwrap());
        assert!(!ks.persist(b"k").unwrap());
        assert_eq!(ks.stats().expires, 0);
    }

    #[test]
    fn multi_key_operations() {
        let (ks, _) = setup();
        ks.mset(&[("a", "1"), ("b", "2"), ("a", "3")]).unwrap();
        assert_eq!(
            ks.mget(&["a", "b", "c"]).unwrap(),
            vec![Some(b("3")), Some(b("2")), None]
        );
        assert!(!ks.msetnx(&[("c", "1"), ("a", "1")]).unwrap());
        assert_eq!(ks.get(b"c").unwrap(), None);
        assert!(ks.msetnx(&[("c", "1"), ("d", "1")]).unwrap());
        assert_eq!(ks.exists(&["a", "a", "x"]).unwrap(), 2);
        assert_eq!(ks.del(&["a", "a", "x", "b"]).unwrap(), 2);
        assert_eq!(ks.dbsize(), 2);
        assert_eq!(ks.getdel(b"c").unwrap(), Some(b("1")));
        assert_eq!(ks.getdel(b"c").unwrap(), None);
    }

    #[test]
    fn ranges() {
        let (ks, _) = setup();
        ks.set(b"s", b"Hello World", SetOptions::default()).unwrap();
        let r = |s, e| ks.getrange(b"s", s, e).unwrap();
        assert_eq!(r(0, 4), b("Hello"));
        assert_eq!(r(-5, -1), b("World"));
        assert_eq!(r(5, 2), b(""));
        assert_eq!(r(-1, -5), b(""));
        assert_eq!(r(0, 100), b("Hello World"));
        assert_eq!(ks.getrange(b"none", 0, 1).unwrap(), b(""));
        assert_eq!(ks.setrange(b"s", 6, b"Redis").unwrap(), 11);
        assert_eq!(ks.get(b"s").unwrap(), Some(b("Hello Redis")));
        assert_eq!(ks.setrange(b"z", 3, b"x").unwrap(), 4);
        assert_eq!(ks.get(b"z").unwrap(), Some(b("\0\0\0x")));
        assert_eq!(ks.setrange(b"e", 3, b"").unwrap(), 0);
        assert_eq!(ks.get(b"e").unwrap(), None);
        assert!(matches!(
            ks.setrange(b"z", -1, b"x"),
            Err(RedisError::OffsetOutOfRange)
        ));
        let small = Keyspace::with_config(
            Arc::new(MemEngine::new()),
            Arc::new(ManualClock::new(START)),
            KeyspaceConfig {
                max_value_len: 8,
                ..KeyspaceConfig::default()
            },
        );
        small.append(b"a", b"12345678").unwrap();
        assert!(matches!(
            small.append(b"a", b"9"),
            Err(RedisError::ValueTooLarge)
        ));
        assert!(matches!(
            small.setrange(b"a", 8, b"9"),
            Err(RedisError::ValueTooLarge)
        ));
    }

    #[test]
    fn getex_changes_ttl() {
        let (ks, clock) = setup();
        ks.set(b"k", b"v", SetOptions::default()).unwrap();
        let at = ks.now().saturating_add(Duration::from_secs(5));
        assert_eq!(
            ks.getex(b"k", GetExExpiry::At(Deadline::At(at))).unwrap(),
            Some(b("v"))
        );
        assert!(matches!(ks.ttl(b"k").unwrap(), KeyTtl::Expires { .. }));
        assert_eq!(ks.getex(b"k", GetExExpiry::Persist).unwrap(), Some(b("v")));
        assert_eq!(ks.ttl(b"k").unwrap(), KeyTtl::Persistent);
        assert_eq!(
            ks.getex(b"k", GetExExpiry::At(Deadline::At(Timestamp(1))))
                .unwrap(),
            Some(b("v"))
        );
        assert_eq!(ks.get(b"k").unwrap(), None);
        clock.advance(Duration::from_secs(1));
    }

    #[test]
    fn storage_errors_come_through() {
        let (ks, _) = setup();
        let key = vec![b'k'; meridian_storage::MAX_KEY_LEN + 1];
        let e = ks.set(&key, b"v", SetOptions::default()).unwrap_err();
        assert!(e.is_client_error());
        assert!(e.to_string().contains("largest key accepted"), "{e}");
        ks.engine()
            .put(b("foreign"), ks.now(), b("\x07raw"))
            .unwrap();
        assert!(matches!(ks.get(b"foreign"), Err(RedisError::Corrupt(_))));
        assert_eq!(
            ks.del(&["foreign"]).unwrap(),
            1,
            "foreign values can still be deleted"
        );
    }

    #[test]
    fn scan_returns_every_key_and_respects_match() {
        let (ks, _) = setup();
        let mut all = std::collections::BTreeSet::new();
        for i in 0..250 {
            let k = format!("{}:{i}", if i % 5 == 0 { "user" } else { "item" });
            ks.set(&k, b"v", SetOptions::default()).unwrap();
            all.insert(b(&k));
        }
        let collect = |pattern: Option<&[u8]>, count| {
            let mut seen = std::collections::BTreeSet::new();
            let mut cursor = 0;
            let mut calls = 0;
            loop {
                let (next, keys) = ks.scan(cursor, pattern, count).unwrap();
                seen.extend(keys);
                calls += 1;
                if next == 0 {
                    return (seen, calls);
                }
                cursor = next;
            }
        };
        let (seen, calls) = collect(None, 10);
        assert_eq!(seen, all);
        assert!(calls >= 25);
        let (users, calls) = collect(Some(b"user:*"), 10);
        assert_eq!(users.len(), 50);
        assert!(
            calls <= 6,
            "the literal prefix narrows the scan: {calls} calls"
        );
        let (twos, _) = collect(Some(b"*:2?"), 7);
        assert_eq!(twos.len(), 10, "{twos:?}");
        // An unknown cursor restarts from the beginning.
        let (_, first) = ks.scan(0, None, 5).unwrap();
        let (_, again) = ks.scan(123, None, 5).unwrap();
        assert_eq!(first, again);
        assert_eq!(ks.keys(b"user:1*").unwrap().len(), 22, "10, 15, 100..=195");
        assert_eq!(ks.keys(b"*").unwrap().len(), 250);
        ks.flush().unwrap();
        assert_eq!(ks.dbsize(), 0);
        assert!(ks.keys(b"*").unwrap().is_empty());
    }

    #[test]
    fn scan_skips_and_deletes_expired_keys() {
        let (ks, clock) = setup();
        ks.set(b"a", b"v", SetOptions::with_ttl(Duration::from_secs(1)))
            .unwrap();
        ks.set(b"b", b"v", SetOptions::default()).unwrap();
        clock.advance(Duration::from_secs(2));
        assert_eq!(ks.scan(0, None, 10).unwrap(), (0, vec![b("b")]));
        assert_eq!(ks.stats().expired_keys, 1);
        assert_eq!(ks.dbsize(), 1);
    }

    #[test]
    fn literal_prefixes() {
        assert_eq!(literal_prefix(b"user:*"), b"user:");
        assert_eq!(literal_prefix(b"u?"), b"u");
        assert_eq!(literal_prefix(b"plain"), b"plain");
        assert_eq!(prefix_end(b"a\xff"), Bound::Excluded(b("b")));
        assert_eq!(prefix_end(b"\xff"), Bound::Unbounded);
        assert_eq!(prefix_end(b""), Bound::Unbounded);
    }

    #[test]
    fn concurrent_incr_loses_nothing() {
        let (ks, _) = setup();
        let ks = Arc::new(ks);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ks = ks.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        ks.incr_by(b"n", 1).unwrap();
                        ks.append(b"s", b"x").unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(ks.get(b"n").unwrap(), Some(b("4000")));
        assert_eq!(ks.strlen(b"s").unwrap(), 4000);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        /// Model time is in whole milliseconds; advances are even and TTLs odd, so the few
        /// microseconds a manual clock gains per read can never decide an expiry.
        #[derive(Clone, Debug)]
        enum Op {
            Set(u8, &'static str, Option<u64>),
            SetNx(u8, &'static str),
            SetKeepTtl(u8, &'static str),
            Get(u8),
            Del(u8),
            Incr(u8, i64),
            Append(u8, &'static str),
            Expire(u8, u64),
            Persist(u8),
            Ttl(u8),
            Advance(u64),
            ActiveExpire,
            Scan,
        }

        const VALUES: [&str; 7] = ["0", "1", "-7", "abc", "9223372036854775806", "", "07"];

        fn op() -> impl Strategy<Value = Op> {
            let key = 0u8..4;
            let val = proptest::sample::select(&VALUES[..]);
            let ttl = (0u64..20).prop_map(|t| 2 * t + 1);
            prop_oneof![
                (key.clone(), val.clone(), proptest::option::of(ttl.clone()))
                    .prop_map(|(k, v, t)| Op::Set(k, v, t)),
                (key.clone(), val.clone()).prop_map(|(k, v)| Op::SetNx(k, v)),
                (key.clone(), val.clone()).prop_map(|(k, v)| Op::SetKeepTtl(k, v)),
                key.clone().prop_map(Op::Get),
                key.clone().prop_map(Op::Del),
                (
                    key.clone(),
                    prop_oneof![Just(1i64), Just(-3), Just(i64::MAX)]
                )
                    .prop_map(|(k, d)| Op::Incr(k, d)),
                (key.clone(), val).prop_map(|(k, v)| Op::Append(k, v)),
                (key.clone(), ttl).prop_map(|(k, t)| Op::Expire(k, t)),
                key.clone().prop_map(Op::Persist),
                key.prop_map(Op::Ttl),
                (1u64..15).prop_map(|t| Op::Advance(2 * t)),
                Just(Op::ActiveExpire),
                Just(Op::Scan),
            ]
        }

        /// Value and expiry (model ms) of each live key.
        #[derive(Default)]
        struct Model {
            now: u64,
            map: BTreeMap<u8, (Vec<u8>, Option<u64>)>,
        }

        impl Model {
            fn live(&mut self, k: u8) -> Option<&mut (Vec<u8>, Option<u64>)> {
                let now = self.now;
                if self
                    .map
                    .get(&k)
                    .is_some_and(|(_, e)| e.is_some_and(|e| now > e))
                {
                    self.map.remove(&k);
                }
                self.map.get_mut(&k)
            }

            fn purge(&mut self) {
                let now = self.now;
                self.map.retain(|_, (_, e)| !e.is_some_and(|e| now > e));
            }
        }

        fn key(k: u8) -> Vec<u8> {
            vec![b'k', b'0' + k]
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
            #[test]
            fn keyspace_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..120)) {
                run_model(ops)?;
            }
        }

        fn run_model(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
            let clock = Arc::new(ManualClock::new(START));
            let ks = Keyspace::new(Arc::new(MemEngine::new()), clock.clone());
            let mut m = Model::default();
            let at_ms = |t: u64| START.0 + t * 1000;
            for op in ops {
                match op {
                    Op::Set(k, v, ttl) => {
                        let o = SetOptions {
                            ttl: ttl.map(Duration::from_millis),
                            ..SetOptions::default()
                        };
                        ks.set(key(k), v, o).unwrap();
                        m.map
                            .insert(k, (v.as_bytes().to_vec(), ttl.map(|t| m.now + t)));
                    }
                    Op::SetNx(k, v) => {
                        let o = SetOptions {
                            condition: SetCondition::IfAbsent,
                            ..SetOptions::default()
                        };
                        let written = ks.set(key(k), v, o).unwrap().written;
                        let absent = m.live(k).is_none();
                        prop_assert_eq!(written, absent);
                        if absent {
                            m.map.insert(k, (v.as_bytes().to_vec(), None));
                        }
                    }
                    Op::SetKeepTtl(k, v) => {
                        let o = SetOptions {
                            keep_ttl: true,
                            ..SetOptions::default()
                        };
                        ks.set(key(k), v, o).unwrap();
                        let ttl = m.live(k).and_then(|e| e.1);
                        m.map.insert(k, (v.as_bytes().to_vec(), ttl));
                    }
                    Op::Get(k) => {
                        let got = ks.get(&key(k)).unwrap().map(|b| b.to_vec());
                        prop_assert_eq!(got, m.live(k).map(|e| e.0.clone()));
                    }
                    Op::Del(k) => {
                        let n = ks.del(&[key(k)]).unwrap();
                        let existed = m.live(k).is_some();
                        m.map.remove(&k);
                        prop_assert_eq!(n, existed as u64);
                    }
                    Op::Incr(k, d) => {
                        let got = ks.incr_by(&key(k), d);
                        let cur = m.live(k).map(|e| e.0.clone());
                        let parsed = match &cur {
                            None => Some(0),
                            Some(v) => std::str::from_utf8(v)
                                .ok()
                                .and_then(|s| s.parse::<i64>().ok())
                                .filter(|n| n.to_string().as_bytes() == &v[..]),
                        };
                        match parsed {
                            None => prop_assert!(matches!(got, Err(RedisError::NotAnInteger))),
                            Some(n) => match n.checked_add(d) {
                                None => prop_assert!(matches!(got, Err(RedisError::Overflow))),
                                Some(new) => {
                                    prop_assert_eq!(got.unwrap(), new);
                                    let ttl = m.live(k).and_then(|e| e.1);
                                    m.map.insert(k, (new.to_string().into_bytes(), ttl));
                                }
                            },
                        }
                    }
                    Op::Append(k, v) => {
                        let n = ks.append(&key(k), v.as_bytes()).unwrap();
                        let e = match m.live(k) {
                            Some(e) => e,
                            None => m.map.entry(k).or_insert((Vec::new(), None)),
                        };
                        e.0.extend_from_slice(v.as_bytes());
                        prop_assert_eq!(n, e.0.len() as u64);
                    }
                    Op::Expire(k, t) => {
                        let d = Deadline::After(Duration::from_millis(t));
                        let ok = ks.expire(&key(k), d, ExpireCondition::default()).unwrap();
                        let now = m.now;
                        match m.live(k) {
                            Some(e) => {
                                prop_assert!(ok);
                                e.1 = Some(now + t);
                            }
                            None => prop_assert!(!ok),
                        }
                    }
                    Op::Persist(k) => {
                        let ok = ks.persist(&key(k)).unwrap();
                        let had = m.live(k).map(|e| e.1.take().is_some()).unwrap_or(false);
                        prop_assert_eq!(ok, had);
                    }
                    Op::Ttl(k) => {
                        let now = m.now;
                        match (ks.ttl(&key(k)).unwrap(), m.live(k)) {
                            (KeyTtl::Missing, None) => {}
                            (KeyTtl::Persistent, Some((_, None))) => {}
                            (KeyTtl::Expires { remaining, .. }, Some((_, Some(e)))) => {
                                let want = (*e - now) as u128 * 1000;
                                let got = remaining.as_micros();
                                prop_assert!(got.abs_diff(want) < 1000, "{got} vs {want}");
                            }
                            (got, want) => prop_assert!(false, "ttl {got:?} vs model {want:?}"),
                        }
                    }
                    Op::Advance(t) => {
                        m.now += t;
                        clock.set(Timestamp(at_ms(m.now)));
                    }
                    Op::ActiveExpire => {
                        while ks.expire_cycle(usize::MAX).expired > 0 {}
                        m.purge();
                        prop_assert_eq!(ks.dbsize(), m.map.len() as u64);
                        let with_ttl = m.map.values().filter(|e| e.1.is_some()).count();
                        prop_assert_eq!(ks.stats().expires, with_ttl as u64);
                    }
                    Op::Scan => {
                        let (next, keys) = ks.scan(0, None, 100).unwrap();
                        prop_assert_eq!(next, 0);
                        m.purge();
                        let want: Vec<Vec<u8>> = m.map.keys().map(|&k| key(k)).collect();
                        let got: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
                        prop_assert_eq!(got, want);
                    }
                }
            }
            Ok(())
        }
    }
}
