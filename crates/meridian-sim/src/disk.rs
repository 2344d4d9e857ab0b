//! A simulated disk: the durable storage of one simulated node, with an fsync policy and crashes
//! that lose un-synced writes.
//!
//! The durable engine (`FjallEngine`) spawns threads and does real I/O, so it stays out of
//! simulation. A [`SimDisk`] stands in for it: [`SimDisk::mount`] gives a [`MountedEngine`], an
//! [`Engine`] with exactly [`MemEngine`]'s semantics, and [`SimDisk::crash`] kills the node the
//! way a machine crash or power loss would under the disk's [`SyncPolicy`].
//!
//! # Model
//!
//! The disk holds three things:
//!
//! - the **live** contents, a [`MemEngine`] the current mount reads and writes: everything
//!   written, synced or not (the node's page cache and memtables);
//! - the **durable** contents: what a crash that loses every un-synced write recovers;
//! - the **journal**: the un-synced entries since the last sync, in write order. A write batch
//!   is one entry holding the *after-images* of the keys it touched (each key's whole version
//!   chain once the batch and its inline pruning applied), a GC pass that removed something is
//!   one entry (its horizon), and `clear` is one entry.
//!
//! [`SimDisk::sync`] (an fsync) applies the journal to the durable contents and empties it.
//! [`SimDisk::crash`] keeps a random prefix of the journal (a journal is replayed in order, so
//! entry `k` survives only if every earlier entry does; each entry is atomic), makes it durable,
//! drops the rest and the live contents, and invalidates the mount. [`SimDisk::mount`] then
//! rebuilds the live contents from the durable ones.
//!
//! # Guarantees
//!
//! - A live mount answers every call as a [`MemEngine`] given the same calls would (the
//!   `mount_behaves_like_mem_engine` property test checks it).
//! - After a crash the recovered contents are exactly the live contents as they were at some
//!   moment between the last sync and the crash: everything up to the last sync, plus the
//!   effects of a prefix of the entries written since. Batches are never torn, reordered or
//!   resurrected out of order. With [`SyncPolicy::Always`] nothing is ever pending, so nothing
//!   is lost.
//! - Once its node crashed, a mount refuses every read and write with
//!   [`StorageError::Backend`] (`"the simulated node crashed: ..."`), so tasks of a dead node
//!   cannot touch the next life's storage. Mounting again, or wiping the disk, also makes the
//!   previous mount stale.
//! - Deterministic: no threads, clock or hash-order dependence; the only randomness is the RNG
//!   handed to [`SimDisk::crash`], drawn from only when un-synced entries exist.
//!
//! # Garbage collection
//!
//! GC is journaled like a write, as `FjallEngine`'s GC deletes are: inline pruning (below the
//! horizon set by [`Engine::set_gc_horizon`]) is part of each batch's after-images, and an
//! [`Engine::gc`] pass is a journal entry that reaches the durable contents only at the next
//! sync, after every batch written before it, and survives a crash only with all of them. So
//! the disk never holds a GC result that skipped ahead of an un-synced batch, and every
//! recovered state is one the live engine was in. The obvious alternative, replaying the
//! batches onto a durable engine that GC also runs on at once, breaks this: with a synced lone
//! tombstone `k@5`, an un-synced `put k@3 = x` and then `gc(20)` (which removes `k` from the
//! live engine), the durable `k` would be gone before the put reached it, and a crash keeping
//! the put would recover `k@3 = x` alone, making reads at 20 see `x`, a value they never saw
//! before the crash.
//!
//! The GC horizon itself lives in memory, as in the real engines: a fresh mount starts at
//! horizon 0.
//!
//! # What a crash models
//!
//! [`SimDisk::crash`] is a machine crash or power loss, the worst case of the policy. A process
//! crash, where the operating system keeps what it was given, is [`SimDisk::mount`] again
//! without a crash: nothing is lost and un-synced entries stay pending. [`SimDisk::wipe`] loses
//! the disk itself (an in-memory node, or a replaced disk).

use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_storage::{
    Durability, Engine, EngineStats, GcStats, MemEngine, Result, StorageError, Version, WriteBatch,
};
use parking_lot::RwLock;
use rand::Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

/// When a simulated disk makes writes durable, and so what a crash may lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyncPolicy {
    /// fsync before every write returns: every acknowledged write survives a crash.
    Always,
    /// fsync once a virtual second (the simulator calls [`SimDisk::sync`]): a crash may lose the
    /// writes since the last sync.
    EverySec,
    /// Never fsync on its own: a crash may lose every write since the last explicit
    /// [`Engine::flush`] or [`SimDisk::sync`].
    Never,
}

impl From<Durability> for SyncPolicy {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Always => SyncPolicy::Always,
            Durability::Everysec => SyncPolicy::EverySec,
            Durability::Never => SyncPolicy::Never,
        }
    }
}

/// What one [`SimDisk::crash`] kept and lost of the un-synced write batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Un-synced batches that survived (the oldest ones: a prefix in write order).
    pub kept_batches: u64,
    /// Un-synced batches that were lost (every batch after the kept ones).
    pub lost_batches: u64,
}

/// Counters of a [`SimDisk`], for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Write batches made durable since the disk was created or last wiped.
    pub durable_batches: u64,
    /// Write batches written but not yet synced (what a crash may lose).
    pub pending_batches: u64,
    /// Journal entries not yet synced: the pending batches plus GC passes and clears.
    pub pending_entries: u64,
    /// Crashes so far (wipes do not reset it).
    pub crashes: u64,
    /// Whether a mount is live.
    pub mounted: bool,
}

/// Every key's version chain, oldest first, in key order.
type Contents = BTreeMap<Bytes, Vec<Version>>;

/// One un-synced journal entry.
#[derive(Clone, Debug)]
enum Entry {
    /// A write batch: each touched key's whole chain afterwards (empty: the key is gone).
    Batch(Vec<(Bytes, Vec<Version>)>),
    /// A GC pass at this horizon that removed at least one version.
    Gc(Timestamp),
    /// Every key removed.
    Clear,
}

impl Entry {
    fn is_batch(&self) -> bool {
        matches!(self, Entry::Batch(_))
    }

    fn apply(self, contents: &mut Contents) {
        match self {
            Entry::Batch(images) => {
                for (key, chain) in images {
                    if chain.is_empty() {
                        contents.remove(&key);
                    } else {
                        contents.insert(key, chain);
                    }
                }
            }
            Entry::Gc(horizon) => contents.retain(|_, chain| prune(chain, horizon)),
            Entry::Clear => contents.clear(),
        }
    }
}

/// [`MemEngine`]'s GC of one chain: drops versions no read at or above `horizon` can see.
/// Returns whether the key stays (false when all that remains is a tombstone at or below it).
fn prune(chain: &mut Vec<Version>, horizon: Timestamp) -> bool {
    let visible = chain.partition_point(|v| v.ts <= horizon);
    if visible >= 2 {
        chain.drain(..visible - 1);
    }
    !(chain.len() == 1 && chain[0].is_tombstone() && chain[0].ts <= horizon)
}

/// Every key of `engine` with its whole version chain (tombstones included).
fn snapshot(engine: &MemEngine) -> Contents {
    let keys = engine
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            true,
        )
        .expect("a MemEngine scan cannot fail");
    keys.into_iter()
        .map(|(k, _)| {
            let chain = engine.versions(&k).expect("a MemEngine read cannot fail");
            (k, chain)
        })
        .filter(|(_, chain)| !chain.is_empty())
        .collect()
}

/// A fresh [`MemEngine`] (horizon 0) holding exactly `contents`.
fn build(contents: &Contents) -> MemEngine {
    let engine = MemEngine::new();
    let mut batch = WriteBatch::new();
    for (key, chain) in contents {
        // Newest first: at horizon 0 no insertion prunes an older version already written
        // (the only prunable chain, a lone tombstone at 0, never exists in valid contents).
        for v in chain.iter().rev() {
            match &v.value {
                Some(value) => batch.put(key.clone(), v.ts, value.clone()),
                None => batch.delete(key.clone(), v.ts),
            };
        }
    }
    engine
        .write_batch(batch)
        .expect("every key was accepted by an engine before");
    engine
}

/// The disk's state, behind one lock shared by the disk handles and the mounts.
struct DiskState {
    policy: SyncPolicy,
    /// What the live mount sees (empty while unmounted).
    live: MemEngine,
    /// The id of the live mount, if any.
    mount: Option<u64>,
    /// Mounts handed out so far; ids are never reused, even across wipes.
    mounts: u64,
    durable: Contents,
    /// Under [`SyncPolicy::Always`] nothing is journaled: the live engine holds the durable
    /// contents (newer than `durable`) while this is set.
    live_is_durable: bool,
    journal: Vec<Entry>,
    durable_batches: u64,
    pending_batches: u64,
    crashes: u64,
}

impl DiskState {
    fn new(policy: SyncPolicy) -> Self {
        Self {
            policy,
            live: MemEngine::new(),
            mount: None,
            mounts: 0,
            durable: Contents::new(),
            live_is_durable: false,
            journal: Vec::new(),
            durable_batches: 0,
            pending_batches: 0,
            crashes: 0,
        }
    }

    /// Refuses calls of any mount but the live one.
    fn check(&self, id: u64) -> Result<()> {
        if self.mount == Some(id) {
            return Ok(());
        }
        Err(StorageError::Backend(format!(
            "the simulated node crashed: mount #{id} of this disk is stale (the disk crashed, was \
             wiped or was mounted again since), so it refuses every read and write"
        )))
    }

    /// Journals an entry the live contents already reflect (durable at once under `Always`).
    fn record(&mut self, entry: Entry) {
        let batch = u64::from(entry.is_batch());
        if self.policy == SyncPolicy::Always {
            // The live contents are the durable ones: captured by `settle` when needed.
            self.durable_batches += batch;
            self.live_is_durable = true;
        } else {
            self.journal.push(entry);
            self.pending_batches += batch;
        }
    }

    /// Under [`SyncPolicy::Always`], copies the live contents (which are all durable) into
    /// `durable` before the live engine is dropped or rebuilt.
    fn settle(&mut self) {
        if self.live_is_durable {
            self.durable = snapshot(&self.live);
            self.live_is_durable = false;
        }
    }

    fn sync(&mut self) {
        for entry in self.journal.drain(..) {
            entry.apply(&mut self.durable);
        }
        self.durable_batches += self.pending_batches;
        self.pending_batches = 0;
    }
}

/// The durable storage of one simulated node, kept across its crashes. Cheap to clone: clones
/// share the disk. See the module docs for the model.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<RwLock<DiskState>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDisk")
            .field("policy", &self.policy())
            .field("stats", &self.stats())
            .finish()
    }
}

impl SimDisk {
    /// An empty, unmounted disk with this sync policy.
    pub fn new(policy: SyncPolicy) -> SimDisk {
        SimDisk {
            state: Arc::new(RwLock::new(DiskState::new(policy))),
        }
    }

    /// The disk's sync policy.
    pub fn policy(&self) -> SyncPolicy {
        self.state.read().policy
    }

    /// Starts a new life of the node's storage: an engine over everything on the disk (after a
    /// crash, what survived it; otherwise everything written, synced or not, as after a process
    /// restart). Any previous mount becomes stale. The new mount's GC horizon is 0.
    pub fn mount(&self) -> Arc<MountedEngine> {
        let mut guard = self.state.write();
        let s = &mut *guard;
        s.settle();
        let mut contents = s.durable.clone();
        for entry in s.journal.iter().cloned() {
            entry.apply(&mut contents);
        }
        s.live = build(&contents);
        s.mounts += 1;
        s.mount = Some(s.mounts);
        Arc::new(MountedEngine {
            state: Arc::clone(&self.state),
            id: s.mounts,
        })
    }

    /// Makes every write so far durable (an fsync), whatever the policy.
    pub fn sync(&self) {
        self.state.write().sync();
    }

    /// The node dies: the live mount becomes stale and the live contents are lost; of the
    /// un-synced journal, a prefix chosen with `rng` survives (and is durable from now on) and
    /// the rest is lost. Deterministic given the RNG's state; draws from it only when something
    /// is pending. Call [`SimDisk::mount`] to restart the node.
    pub fn crash(&self, rng: &mut impl Rng) -> CrashReport {
        let mut guard = self.state.write();
        let s = &mut *guard;
        s.crashes += 1;
        s.mount = None;
        s.settle();
        s.live = MemEngine::new();
        let cut = if s.journal.is_empty() {
            0
        } else {
            rng.random_range(0..=s.journal.len())
        };
        let lost = s.journal.split_off(cut);
        let lost_batches = lost.iter().filter(|e| e.is_batch()).count() as u64;
        let kept_batches = s.pending_batches - lost_batches;
        s.pending_batches = kept_batches;
        // Recovery replays the surviving journal: from now on it is durable.
        s.sync();
        CrashReport {
            kept_batches,
            lost_batches,
        }
    }

    /// The disk is lost entirely: it becomes empty and unmounted, and the live mount stale.
    pub fn wipe(&self) {
        let mut s = self.state.write();
        let (policy, mounts, crashes) = (s.policy, s.mounts, s.crashes);
        *s = DiskState {
            mounts,
            crashes,
            ..DiskState::new(policy)
        };
    }

    /// Durable and pending batch counts, crashes, and whether a mount is live.
    pub fn stats(&self) -> DiskStats {
        let s = self.state.read();
        DiskStats {
            durable_batches: s.durable_batches,
            pending_batches: s.pending_batches,
            pending_entries: s.journal.len() as u64,
            crashes: s.crashes,
            mounted: s.mount.is_some(),
        }
    }
}

/// One life of a [`SimDisk`]'s storage: an [`Engine`] with [`MemEngine`]'s semantics that
/// journals its writes on the disk, until the disk crashes, is wiped or is mounted again.
/// From then on every read and write fails; [`Engine::set_gc_horizon`] does nothing and
/// [`Engine::stats`] reports zeros.
pub struct MountedEngine {
    state: Arc<RwLock<DiskState>>,
    id: u64,
}

impl fmt::Debug for MountedEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MountedEngine")
            .field("mount", &self.id)
            .finish_non_exhaustive()
    }
}

impl Engine for MountedEngine {
    fn name(&self) -> &'static str {
        "sim-disk"
    }

    fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        let mut s = self.state.write();
        s.check(self.id)?;
        if batch.is_empty() {
            return Ok(());
        }
        if s.policy == SyncPolicy::Always {
            s.live.write_batch(batch)?;
            s.record(Entry::Batch(Vec::new()));
            return Ok(());
        }
        let mut keys: Vec<Bytes> = batch.ops.iter().map(|op| op.key().clone()).collect();
        s.live.write_batch(batch)?;
        keys.sort_unstable();
        keys.dedup();
        let images = keys
            .into_iter()
            .map(|key| {
                let chain = s.live.versions(&key)?;
                Ok((key, chain))
            })
            .collect::<Result<Vec<_>>>()?;
        s.record(Entry::Batch(images));
        Ok(())
    }

    fn get(&self, key: &[u8], at: Timestamp) -> Result<Option<Version>> {
        let s = self.state.read();
        s.check(self.id)?;
        s.live.get(key, at)
    }

    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> Result<Vec<(Bytes, Version)>> {
        let s = self.state.read();
        s.check(self.id)?;
        s.live.scan(start, end, at, limit, include_tombstones)
    }

    fn versions(&self, key: &[u8]) -> Result<Vec<Version>> {
        let s = self.state.read();
        s.check(self.id)?;
        s.live.versions(key)
    }

    fn set_gc_horizon(&self, horizon: Timestamp) {
        let s = self.state.read();
        if s.check(self.id).is_ok() {
            s.live.set_gc_horizon(horizon);
        }
    }

    fn gc(&self, horizon: Timestamp) -> Result<GcStats> {
        let mut s = self.state.write();
        s.check(self.id)?;
        let stats = s.live.gc(horizon)?;
        // A pass that removed nothing would remove nothing from the same contents on disk.
        if stats.versions_removed > 0 {
            s.record(Entry::Gc(horizon));
        }
        Ok(stats)
    }

    fn clear(&self) -> Result<()> {
        let mut s = self.state.write();
        s.check(self.id)?;
        s.live.clear()?;
        s.record(Entry::Clear);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut s = self.state.write();
        s.check(self.id)?;
        s.sync();
        Ok(())
    }

    fn stats(&self) -> EngineStats {
        let s = self.state.read();
        if s.check(self.id).is_ok() {
            s.live.stats()
        } else {
            EngineStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    /// Every key with its whole chain, in key order.
    fn contents(e: &dyn Engine) -> Vec<(Bytes, Vec<Version>)> {
        e.scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            true,
        )
        .unwrap()
        .into_iter()
        .map(|(k, _)| {
            let chain = e.versions(&k).unwrap();
            (k, chain)
        })
        .collect()
    }

    /// A fresh `MemEngine` holding `contents`, built with plain puts and deletes.
    fn model_of(contents: &[(Bytes, Vec<Version>)]) -> MemEngine {
        let m = MemEngine::new();
        for (k, chain) in contents {
            for v in chain.iter().rev() {
                match &v.value {
                    Some(value) => m.put(k.clone(), v.ts, value.clone()).unwrap(),
                    None => m.delete(k.clone(), v.ts).unwrap(),
                }
            }
        }
        m
    }

    fn assert_stale(e: &MountedEngine) {
        let err = e.get(b"k", Timestamp::MAX).unwrap_err().to_string();
        assert!(err.contains("the simulated node crashed"), "{err}");
        let err = e.put(b("k"), Timestamp(1), b("v")).unwrap_err().to_string();
        assert!(err.contains("the simulated node crashed"), "{err}");
        assert!(
            e.scan(Bound::Unbounded, Bound::Unbounded, Timestamp::MAX, 10, true)
                .is_err()
        );
        assert!(e.versions(b"k").is_err());
        assert!(e.gc(Timestamp(1)).is_err());
        assert!(e.clear().is_err());
        assert!(e.flush().is_err());
        assert_eq!(e.stats(), EngineStats::default());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Put(u8, u64, u8),
        Delete(u8, u64),
        Batch(Vec<(u8, u64, Option<u8>)>),
        Get(u8, u64),
        Scan((u8, u8), (u8, u8), u64, usize, bool),
        Versions(u8),
        Horizon(u64),
        Gc(u64),
        Clear,
        Flush,
        Sync,
        Crash(u64),
        Remount,
    }

    fn key(i: u8) -> Bytes {
        Bytes::from(format!("k{i}"))
    }

    fn bound((kind, k): (u8, u8)) -> Bound<Bytes> {
        match kind {
            0 => Bound::Unbounded,
            1 => Bound::Included(key(k)),
            _ => Bound::Excluded(key(k)),
        }
    }

    fn policy() -> impl Strategy<Value = SyncPolicy> {
        prop_oneof![
            Just(SyncPolicy::Always),
            Just(SyncPolicy::EverySec),
            Just(SyncPolicy::Never),
        ]
    }

    /// Engine operations and syncs; with `lives`, also crashes and remounts.
    fn ops(lives: bool) -> impl Strategy<Value = Vec<Op>> {
        let k = 0u8..6;
        let ts = 0u64..30;
        let bnd = (0u8..3, 0u8..6);
        let engine = prop_oneof![
            6 => (k.clone(), ts.clone(), any::<u8>()).prop_map(|(k, t, v)| Op::Put(k, t, v)),
            3 => (k.clone(), ts.clone()).prop_map(|(k, t)| Op::Delete(k, t)),
            3 => prop::collection::vec(
                (k.clone(), ts.clone(), prop::option::of(any::<u8>())),
                1..5
            )
            .prop_map(Op::Batch),
            3 => (k.clone(), 0u64..32).prop_map(|(k, t)| Op::Get(k, t)),
            2 => (bnd.clone(), bnd, 0u64..32, 0usize..8, any::<bool>())
                .prop_map(|(s, e, t, l, tomb)| Op::Scan(s, e, t, l, tomb)),
            2 => k.prop_map(Op::Versions),
            1 => ts.clone().prop_map(Op::Horizon),
            1 => ts.prop_map(Op::Gc),
            1 => Just(Op::Clear),
            1 => Just(Op::Flush),
            2 => Just(Op::Sync),
        ];
        if lives {
            let life = prop_oneof![
                20 => engine,
                2 => any::<u64>().prop_map(Op::Crash),
                1 => Just(Op::Remount),
            ];
            prop::collection::vec(life.boxed(), 0..60).boxed()
        } else {
            prop::collection::vec(engine.boxed(), 0..60).boxed()
        }
    }

    /// Runs one engine operation on the mount and the model and compares the answers.
    /// Returns whether it was a write batch, or `None` if it did not write.
    fn step(op: &Op, e: &MountedEngine, m: &MemEngine, disk: &SimDisk) -> Option<bool> {
        match op {
            Op::Put(k, t, v) => {
                let v = Bytes::from(vec![*v]);
                e.put(key(*k), Timestamp(*t), v.clone()).unwrap();
                m.put(key(*k), Timestamp(*t), v).unwrap();
                Some(true)
            }
            Op::Delete(k, t) => {
                e.delete(key(*k), Timestamp(*t)).unwrap();
                m.delete(key(*k), Timestamp(*t)).unwrap();
                Some(true)
            }
            Op::Batch(writes) => {
                let mut batch = WriteBatch::new();
                for (k, t, v) in writes {
                    match v {
                        Some(v) => batch.put(key(*k), Timestamp(*t), Bytes::from(vec![*v])),
                        None => batch.delete(key(*k), Timestamp(*t)),
                    };
                }
                e.write_batch(batch.clone()).unwrap();
                m.write_batch(batch).unwrap();
                Some(true)
            }
            Op::Get(k, t) => {
                let at = Timestamp(*t);
                assert_eq!(e.get(&key(*k), at).unwrap(), m.get(&key(*k), at).unwrap());
                None
            }
            Op::Scan(s, end, t, limit, tomb) => {
                let at = Timestamp(*t);
                assert_eq!(
                    e.scan(bound(*s), bound(*end), at, *limit, *tomb).unwrap(),
                    m.scan(bound(*s), bound(*end), at, *limit, *tomb).unwrap()
                );
                None
            }
            Op::Versions(k) => {
                assert_eq!(e.versions(&key(*k)).unwrap(), m.versions(&key(*k)).unwrap());
                None
            }
            Op::Horizon(h) => {
                e.set_gc_horizon(Timestamp(*h));
                m.set_gc_horizon(Timestamp(*h));
                None
            }
            Op::Gc(h) => {
                assert_eq!(e.gc(Timestamp(*h)).unwrap(), m.gc(Timestamp(*h)).unwrap());
                Some(false)
            }
            Op::Clear => {
                e.clear().unwrap();
                m.clear().unwrap();
                Some(false)
            }
            Op::Flush => {
                e.flush().unwrap();
                None
            }
            Op::Sync => {
                disk.sync();
                None
            }
            Op::Crash(_) | Op::Remount => unreachable!("handled by the caller"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn mount_behaves_like_mem_engine(policy in policy(), ops in ops(false)) {
            let disk = SimDisk::new(policy);
            let e = disk.mount();
            let m = MemEngine::new();
            for op in &ops {
                step(op, &e, &m, &disk);
                prop_assert_eq!(e.stats(), m.stats());
            }
            prop_assert_eq!(contents(&*e), contents(&m));
        }

        #[test]
        fn crash_keeps_everything_synced_and_a_prefix_of_the_rest(
            policy in policy(),
            ops in ops(true),
        ) {
            let disk = SimDisk::new(policy);
            let mut e = disk.mount();
            let mut m = MemEngine::new();
            // The live contents after the last sync and after each write since, with the
            // number of batches written since the sync at that point.
            let mut candidates = vec![(0u64, contents(&m))];
            for op in &ops {
                match op {
                    Op::Crash(seed) => {
                        let before = disk.stats();
                        let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(*seed));
                        let since_sync = candidates.last().unwrap().0;
                        let written = report.kept_batches + report.lost_batches;
                        prop_assert_eq!(before.pending_batches, written);
                        if policy != SyncPolicy::Always {
                            prop_assert_eq!(written, since_sync);
                        }
                        assert_stale(&e);
                        e = disk.mount();
                        let recovered = contents(&*e);
                        if policy == SyncPolicy::Always {
                            prop_assert_eq!(report.lost_batches, 0);
                            prop_assert_eq!(&recovered, &contents(&m));
                        } else {
                            prop_assert!(
                                candidates
                                    .iter()
                                    .any(|(n, c)| *n == report.kept_batches && *c == recovered),
                                "recovered {:?} is not the state after the last sync plus {} \
                                 batches; candidates {:?}",
                                recovered, report.kept_batches, candidates
                            );
                        }
                        m = model_of(&recovered);
                        prop_assert_eq!(e.stats(), m.stats());
                        prop_assert_eq!(disk.stats().pending_batches, 0);
                        candidates = vec![(0, recovered)];
                    }
                    Op::Remount => {
                        let old = e;
                        e = disk.mount();
                        assert_stale(&old);
                        let now = contents(&*e);
                        prop_assert_eq!(&now, &contents(&m));
                        // A restarted engine forgot its horizon.
                        m = model_of(&now);
                    }
                    Op::Sync | Op::Flush => {
                        step(op, &e, &m, &disk);
                        candidates = vec![(0, contents(&m))];
                    }
                    op => {
                        if let Some(batch) = step(op, &e, &m, &disk) {
                            let n = candidates.last().unwrap().0 + u64::from(batch);
                            candidates.push((n, contents(&m)));
                        }
                    }
                }
                let pending = match policy {
                    SyncPolicy::Always => 0,
                    _ => candidates.last().unwrap().0,
                };
                prop_assert_eq!(disk.stats().pending_batches, pending);
            }
        }
    }

    #[test]
    fn always_keeps_every_acknowledged_write() {
        let disk = SimDisk::new(SyncPolicy::Always);
        let e = disk.mount();
        for t in 1..=20 {
            e.put(b("k"), Timestamp(t), Bytes::from(t.to_string()))
                .unwrap();
        }
        e.delete(b("gone"), Timestamp(3)).unwrap();
        let before = contents(&*e);
        let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(7));
        assert_eq!(
            report,
            CrashReport {
                kept_batches: 0,
                lost_batches: 0
            }
        );
        assert_eq!(contents(&*disk.mount()), before);
        assert_eq!(disk.stats().durable_batches, 21);
    }

    #[test]
    fn crash_keeps_synced_writes_and_a_prefix_of_the_rest() {
        for policy in [SyncPolicy::EverySec, SyncPolicy::Never] {
            let mut lost_some = false;
            let mut kept_some = false;
            for seed in 0..40 {
                let disk = SimDisk::new(policy);
                let e = disk.mount();
                for i in 0..3u64 {
                    e.put(b(&format!("synced{i}")), Timestamp(i), b("v"))
                        .unwrap();
                }
                if seed % 2 == 0 {
                    disk.sync();
                } else {
                    e.flush().unwrap();
                }
                for i in 0..5u64 {
                    let mut batch = WriteBatch::new();
                    batch.put(b(&format!("a{i}")), Timestamp(10 + i), b("v"));
                    batch.put(b(&format!("b{i}")), Timestamp(10 + i), b("v"));
                    e.write_batch(batch).unwrap();
                }
                assert_eq!(disk.stats().pending_batches, 5);
                assert_eq!(disk.stats().durable_batches, 3);
                let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
                assert_eq!(report.kept_batches + report.lost_batches, 5);
                lost_some |= report.lost_batches > 0;
                kept_some |= report.kept_batches > 0;
                let e = disk.mount();
                for i in 0..3u64 {
                    assert!(
                        e.get_value(format!("synced{i}").as_bytes(), Timestamp::MAX)
                            .unwrap()
                            .is_some()
                    );
                }
                for i in 0..5u64 {
                    let kept = i < report.kept_batches;
                    for k in [format!("a{i}"), format!("b{i}")] {
                        assert_eq!(
                            e.get_latest(k.as_bytes()).unwrap().is_some(),
                            kept,
                            "{policy:?} seed {seed}: batch {i} of {report:?}"
                        );
                    }
                }
            }
            assert!(
                lost_some && kept_some,
                "{policy:?}: the prefix should vary with the seed"
            );
        }
    }

    #[test]
    fn crash_is_deterministic_given_the_rng() {
        let run = |seed| {
            let disk = SimDisk::new(SyncPolicy::Never);
            let e = disk.mount();
            for t in 0..30 {
                e.put(b(&format!("k{}", t % 7)), Timestamp(t), b("v"))
                    .unwrap();
            }
            let report = disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            (report, contents(&*disk.mount()))
        };
        assert_eq!(run(1), run(1));
        assert_eq!(run(99), run(99));
    }

    #[test]
    fn gc_reaches_the_disk_only_after_the_batches_before_it() {
        for seed in 0..30 {
            let disk = SimDisk::new(SyncPolicy::EverySec);
            let e = disk.mount();
            e.delete(b("k"), Timestamp(5)).unwrap();
            disk.sync();
            e.put(b("k"), Timestamp(3), b("x")).unwrap();
            e.gc(Timestamp(20)).unwrap();
            assert!(e.versions(b"k").unwrap().is_empty());
            disk.crash(&mut ChaCha8Rng::seed_from_u64(seed));
            let e = disk.mount();
            // Reads at 20 never saw the value under the tombstone: no crash may resurrect it.
            assert_eq!(
                e.get_value(b"k", Timestamp(20)).unwrap(),
                None,
                "seed {seed}"
            );
        }
    }

    #[test]
    fn a_stale_mount_refuses_reads_and_writes() {
        let disk = SimDisk::new(SyncPolicy::EverySec);
        let first = disk.mount();
        first.put(b("k"), Timestamp(1), b("one")).unwrap();
        disk.sync();
        disk.crash(&mut ChaCha8Rng::seed_from_u64(0));
        assert!(!disk.stats().mounted);
        assert_stale(&first);
        first.set_gc_horizon(Timestamp(100));

        let second = disk.mount();
        assert_eq!(
            second.get_value(b"k", Timestamp::MAX).unwrap(),
            Some(b("one"))
        );
        second.put(b("k"), Timestamp(2), b("two")).unwrap();
        assert_eq!(second.versions(b"k").unwrap().len(), 2, "horizon is fresh");

        // A process restart (mount without crash) keeps un-synced writes but ends the old life.
        let third = disk.mount();
        assert_stale(&second);
        assert_stale(&first);
        assert_eq!(
            third.get_value(b"k", Timestamp::MAX).unwrap(),
            Some(b("two"))
        );
        assert_eq!(disk.stats().pending_batches, 1);
    }

    #[test]
    fn wipe_empties_the_disk() {
        let disk = SimDisk::new(SyncPolicy::Always);
        let e = disk.mount();
        e.put(b("k"), Timestamp(1), b("v")).unwrap();
        disk.wipe();
        assert_stale(&e);
        assert_eq!(
            disk.stats(),
            DiskStats {
                crashes: 0,
                mounted: false,
                ..DiskStats::default()
            }
        );
        let e = disk.mount();
        assert!(contents(&*e).is_empty());
        assert_eq!(e.stats(), EngineStats::default());
    }

    #[test]
    fn policies_follow_the_server_durability_setting() {
        assert_eq!(SyncPolicy::from(Durability::Always), SyncPolicy::Always);
        assert_eq!(SyncPolicy::from(Durability::Everysec), SyncPolicy::EverySec);
        assert_eq!(SyncPolicy::from(Durability::Never), SyncPolicy::Never);
    }
}
