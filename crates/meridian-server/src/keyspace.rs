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

use crate::keyspace_events;
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
use meridian_redis::{Entry, EntryRef, Group, Kind, View};
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

/// RANDOMKEY draws at most this many keys (deleting each expired one it meets).
const RANDOM_KEY_DRAWS: usize = 1_000;

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
    /// Whether lists, sets and sorted sets are held in memory as objects changed in place
    /// (`held`); only on the in-memory engine with zero retention, whatever this says.
    pub hold_collections: bool,
}

impl Default for KeyspaceConfig {
    fn default() -> Self {
        Self {
            retention: Duration::ZERO,
            max_value_len: 512 * 1024 * 1024,
            max_scan_cursors: 16 * 1024,
            maxmemory: 0,
            maxmemory_policy: MaxmemoryPolicy::NoEviction,
            hold_collections: true,
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
    /// The collections of this stripe held in memory (`held`), by key.
    objects: FxHashMap<Bytes, held::Held>,
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
        keyspace_events::record(key);
        crate::tracking::record(key);
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
    /// Clients blocked on keys (BLPOP, BZPOPMIN, ...).
    pub(crate) blocking: blocking::Blocking,
    /// Whether lists, sets and sorted sets are held in memory as objects (`held`): on the
    /// in-memory engine with zero retention.
    hold_objects: bool,
    /// The memory of every held collection (part of [`Keyspace::used_memory`]).
    held_bytes: AtomicI64,
    /// Keyspace notifications (`notify-keyspace-events`).
    pub(crate) events: keyspace_events::Notifier,
    /// Where streams' nodes close (`stream-node-max-entries`, `stream-node-max-bytes`).
    stream_limits: [AtomicU64; 2],
    /// Client-side caching: who read which key, told when it changes (`crate::tracking`).
    pub(crate) caching: Arc<crate::tracking::Tracking>,
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
        let hold_objects =
            config.hold_collections && engine.name() == "mem" && config.retention.is_zero();
        let ks = Self {
            hold_objects,
            held_bytes: AtomicI64::new(0),
            events: Default::default(),
            stream_limits: {
                let d = meridian_redis::streams::NodeLimits::default();
                [AtomicU64::new(d.entries), AtomicU64::new(d.bytes)]
            },
            caching: Default::default(),
            engine,
            clock,
            cursors: Mutex::new(CursorTable::new(config.max_scan_cursors)),
            blocking: Default::default(),
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
        // Past versions are read: collections must be stored, version by version.
        self.hold_objects &= retention.is_zero();
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
                let Some(raw) = v.value else { continue };
                let mut s = self.stripes[stripe_of(&key)].lock();
                self.account_put(&mut s, &key, entry_bytes(key.len(), raw.len()), now);
                if let Some((_, Some(at))) = held::header(&raw) {
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

    /// The live entry of `key` (OBJECT), read as GET reads it.
    pub fn entry(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.read_live(key)
    }

    /// MEMORY USAGE: the bytes `key` accounts for in the used-memory estimate (key, stored
    /// value, per-key overhead), or `None` when it does not exist.
    pub fn memory_usage(&self, key: &[u8]) -> Result<Option<u64>> {
        let header = |e: &Entry| if e.expiry.is_some() { 9 } else { 1 };
        if let Some(Stored::Held { .. }) = self.stored(key)? {
            let s = self.lock(key);
            if let Some(m) = self.held_memory(&s, key) {
                return Ok(Some(entry_bytes(key.len(), m)));
            }
        }
        Ok(self
            .read_live(key)?
            .map(|e| entry_bytes(key.len(), e.data.len() + header(&e))))
    }

    // ----- internals -------------------------------------------------------------------

    /// A lock-free read that treats an expired key as absent (and deletes it). A held
    /// collection is read under its stripe's lock.
    fn read_live(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.read_live_or_held(key, true)
    }

    /// [`Keyspace::read_live`] for a reader that holds other stripes' locks (SORT's BY and
    /// GET patterns): it may not wait for another stripe, so a held collection reads as
    /// absent — what those patterns make of any collection.
    fn read_foreign(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.read_live_or_held(key, false)
    }

    fn read_live_or_held(&self, key: &[u8], held: bool) -> Result<Option<Entry>> {
        let e = match self.stored(key)? {
            None => return Ok(None),
            Some(Stored::Held { .. }) if !held => return Ok(None),
            Some(Stored::Held { .. }) => {
                let mut s = self.lock(key);
                let now = self.clock.now();
                return self.load_live_locked(&mut s, key, now);
            }
            Some(Stored::Plain(e)) => e,
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

    /// Every stripe, locked in ascending order (as [`Keyspace::lock_many`] takes them).
    fn lock_all(&self) -> StripeGuards<'_> {
        StripeGuards {
            ids: (0..STRIPES).collect(),
            guards: self.stripes.iter().map(|s| s.lock()).collect(),
        }
    }

    /// Reads a key under its stripe lock, deleting it if it has expired.
    fn load_live_locked(
        &self,
        s: &mut Stripe,
        key: &[u8],
        now: Timestamp,
    ) -> Result<Option<Entry>> {
        match self.stored(key)? {
            Some(st) if st.is_expired(now) => {
                self.expire_locked(s, key, now)?;
                self.count_expired(key);
                Ok(None)
            }
            Some(Stored::Held { .. }) => self.materialize(s, key).map(Some),
            Some(Stored::Plain(e)) => Ok(Some(e)),
            None => Ok(None),
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
        self.drop_held(s, key);
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
        self.blocking.touched(key);
        Ok(())
    }

    /// Counts an expired key and publishes its `expired` event.
    fn count_expired(&self, key: &[u8]) {
        self.expired_keys.fetch_add(1, Ordering::Relaxed);
        self.events.notify(keyspace_events::EXPIRED, "expired", key);
        self.caching.modified(key);
    }

    /// Deletes an expired key. Not a modification for WATCH: a key live at WATCH time that
    /// expires fails EXEC anyway, and one already expired then did not change (Redis 7).
    fn expire_locked(&self, s: &mut Stripe, key: &[u8], now: Timestamp) -> Result<()> {
        self.horizon(now);
        self.engine.delete(Bytes::copy_from_slice(key), now)?;
        self.drop_held(s, key);
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

    /// Whether `key` exists (is live) now, read without its stripe's lock.
    pub(crate) fn key_exists(&self, key: &[u8]) -> bool {
        ReadView { ks: self }.header(key).is_ok_and(|h| h.is_some())
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
        let several = spec.key_positions(&args).nth(1).is_some();
        // PFCOUNT writes its refreshed cache back: under the key's lock, not lock-free.
        let readonly =
            spec.flags.first() == Some(&"readonly") && cmd != meridian_redis::Cmd::Pfcount;
        // A collection's reads run over its held object, under its stripe's lock.
        let collection = self.hold_objects
            && matches!(
                cmd.group(),
                Group::Hashes
                    | Group::Lists
                    | Group::Sets
                    | Group::SortedSets
                    | Group::Geo
                    | Group::Streams
            );
        // A hash field a pattern names may be held by any stripe: SORT (and SORT_RO) then holds them all.
        if self.hold_objects && meridian_redis::sort::reads_hash_fields(cmd, args) {
            return self.execute_locked(self.lock_all(), cmd, args, reply);
        }
        if !several && readonly && !collection {
            return exec_on_view(cmd, args, &mut ReadView { ks: self }, reply);
        }
        // SORT reads the keys its BY and GET patterns name besides its own: an overlay of its
        // key (and STORE's destination) that reads other keys as GET does.
        if several || cmd == meridian_redis::Cmd::Sort {
            let guards = self.lock_many(spec.key_positions(&args).map(|i| args.get(i)));
            return self.execute_locked(guards, cmd, args, reply);
        }
        // The key's stripe: not always argument 1 (BLMPOP's and ZMPOP's numkeys come first);
        // a command whose arguments name no key refuses them before touching any.
        let key = spec.key_positions(&args).next().unwrap_or(1);
        let mut s = self.lock(args.get(key));
        exec_on_view(cmd, args, &mut self.locked(&mut s), reply)
    }

    /// Runs a data command over an overlay of the stripes `guards` holds (all of its keys'),
    /// its writes one batch.
    fn execute_locked(
        &self,
        guards: StripeGuards<'_>,
        cmd: meridian_redis::Cmd,
        args: meridian_redis::Args<'_>,
        reply: &mut meridian_redis::Reply,
    ) -> std::result::Result<(), meridian_redis::CmdError> {
        let mut ov = Overlay::new(self, guards);
        ov.foreign_reads = cmd == meridian_redis::Cmd::Sort;
        // The reply is written before the batch is: a refused batch (a full disk) takes it
        // back, so only the error is answered.
        let mark = reply.out.len();
        meridian_redis::types::exec_on_view(cmd, args, &mut ov, reply)?;
        ov.commit().map_err(|e| {
            reply.out.truncate(mark);
            e.into()
        })
    }

    /// Where streams' nodes close, as CONFIG SET last set it.
    pub(crate) fn stream_node_limits(&self) -> meridian_redis::streams::NodeLimits {
        meridian_redis::streams::NodeLimits {
            entries: self.stream_limits[0].load(Ordering::Relaxed),
            bytes: self.stream_limits[1].load(Ordering::Relaxed),
        }
    }

    /// Sets where streams' nodes close (CONFIG SET `stream-node-max-*`).
    pub(crate) fn set_stream_node_limits(&self, limits: meridian_redis::streams::NodeLimits) {
        self.stream_limits[0].store(limits.entries, Ordering::Relaxed);
        self.stream_limits[1].store(limits.bytes, Ordering::Relaxed);
    }

    /// FLUSHDB/FLUSHALL: removes every key.
    pub fn flush(&self) -> Result<()> {
        let mut guards: Vec<_> = self.stripes.iter().map(|s| s.lock()).collect();
        self.engine.clear()?;
        for g in &mut guards {
            g.ttl = FxHashMap::default();
            g.meta = FxHashMap::default();
            g.objects = FxHashMap::default();
        }
        self.expires.store(0, Ordering::Relaxed);
        self.held_bytes.store(0, Ordering::Relaxed);
        for slot in &*self.used {
            slot.0.store(0, Ordering::Relaxed);
        }
        drop(guards);
        self.cursors.lock().clear();
        self.blocking.touch_all();
        self.caching.flushed();
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
            let header = v.value.as_ref().and_then(held::header);
            if let Some((_, Some(at))) = header
                && now.get_or_insert_with(|| self.clock.now()).0 > at
            {
                let mut s = self.lock(&key);
                let now = self.clock.now();
                self.load_live_locked(&mut s, &key, now)?;
                continue;
            }
            let typed = kind.is_none_or(|k| matches!(header, Some((kind, _)) if kind == k));
            if typed && pattern.is_none_or(|p| glob_match(p, &key, false)) {
                keys.push(key);
            }
        }
        Ok(keys)
    }

    /// RANDOMKEY: a live key drawn uniformly, or `None` when there is none. A drawn key that
    /// has expired is deleted, as Redis deletes it, and another is drawn — at most
    /// [`RANDOM_KEY_DRAWS`] times, so one call's work is bounded (then `None`: a keyspace
    /// whose draws all met expired keys answers as an empty one).
    pub fn random_key(&self) -> Result<Option<Bytes>> {
        use rand::Rng;
        for _ in 0..RANDOM_KEY_DRAWS {
            let Some(key) = self.engine.random_live_key(rand::rng().random())? else {
                return Ok(None);
            };
            match self.stored(&key)? {
                Some(st) if st.is_expired(self.clock.now()) => {
                    let mut s = self.lock(&key);
                    let now = self.clock.now();
                    self.load_live_locked(&mut s, &key, now)?;
                }
                Some(_) => return Ok(Some(key)),
                None => {}
            }
        }
        Ok(None)
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
            let held = self.held_bytes.load(Ordering::Relaxed).max(0) as u64;
            return st.bytes + st.live_keys * memory::KEY_OVERHEAD + held;
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
                    let len = self.held_memory(s, &key).unwrap_or(len);
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
                self.events
                    .notify(keyspace_events::EVICTED, "evicted", &key);
                self.caching.modified(&key);
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
                match self.stored(&key) {
                    Ok(Some(e)) if e.is_expired(now) => match self.expire_locked(&mut s, &key, now)
                    {
                        Ok(()) => {
                            cycle.expired += 1;
                            self.count_expired(&key);
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "active expiry could not delete a key");
                        }
                    },
                    Ok(Some(e)) => self.index(&mut s, &key, e.expiry()),
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

pub(crate) mod blocking;
mod held;
use held::Stored;
mod views;
mod watch;

pub(crate) use views::Overlay;
use views::{LockedView, ReadView};
pub(crate) use watch::WatchSet;

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
mod tests;

#[cfg(test)]
mod held_tests;
