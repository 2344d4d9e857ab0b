//! [`MemEngine`]: the default engine, in memory, concurrent.
//!
//! Keys are spread over a fixed number of shards by hash; each shard sits behind its own
//! reader-writer lock, so point operations on different shards never contend. Within a shard a
//! hash map serves point reads and writes (one hash and one key comparison, whatever the
//! shard's size), and an ordered set of the same keys serves scans, which merge the shards'
//! ordered runs. The ordered set changes only when a key appears or disappears, so overwriting
//! an existing key touches the hash map alone. Size counters live in the shards too, updated
//! under the lock the write holds anyway, so concurrent writers share no counter cache line.
//!
//! A batch, a scan and `clear` lock every shard they touch in shard order, so batches are
//! applied and observed atomically and cannot deadlock with each other.
//!
//! Nothing survives the process: it is the engine for caches, tests and the simulator.

use crate::version::{Version, WriteBatch, WriteOp};
use crate::{Engine, EngineStats, GcStats, Result, check_key};
use bytes::Bytes;
use meridian_core::Timestamp;
use parking_lot::RwLock;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

/// Versions of one key, oldest first. Almost every key has exactly one.
type Chain = SmallVec<[(Timestamp, Option<Bytes>); 1]>;

/// A key as the hash map holds it: keys up to 24 bytes sit inside the map's bucket, so a
/// lookup compares them without chasing a pointer (a cache miss on large keyspaces).
type MapKey = SmallVec<[u8; 24]>;

const SHARDS: usize = 64;

/// One shard: the keys whose hash selects it, indexed twice, and their sizes.
#[derive(Debug, Default)]
struct Shard {
    /// Point lookups.
    map: HashMap<MapKey, Chain, FxBuildHasher>,
    /// The same keys in order, for scans.
    order: BTreeSet<Bytes>,
    /// Keys whose latest version is a value.
    live: i64,
    /// Versions stored.
    versions: i64,
    /// Bytes of keys and values stored.
    bytes: i64,
}

/// The in-memory engine. See the module docs.
#[derive(Debug)]
pub struct MemEngine {
    shards: Box<[RwLock<Shard>]>,
    gc_horizon: AtomicU64,
}

impl Default for MemEngine {
    fn default() -> Self {
        Self::new()
    }
}

impl MemEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            gc_horizon: AtomicU64::new(0),
        }
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        // The shard maps hash the same key with the same function; select the shard from
        // re-mixed bits so the keys of one shard still spread over its map's buckets.
        let h = FxBuildHasher
            .hash_one(key)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 58) as usize % SHARDS
    }

    fn horizon(&self) -> Timestamp {
        Timestamp(self.gc_horizon.load(Ordering::Relaxed))
    }
}

fn version_size(key: &[u8], v: &Option<Bytes>) -> i64 {
    (key.len() + v.as_ref().map_or(0, |b| b.len()) + 8) as i64
}

fn is_live(chain: &Chain) -> bool {
    chain.last().is_some_and(|(_, v)| v.is_some())
}

impl Shard {
    /// Writes one version, pruning versions of the same key below `horizon`.
    fn write_version(&mut self, op: WriteOp, horizon: Timestamp) {
        let (key, ts, value) = match op {
            WriteOp::Put { key, ts, value } => (key, ts, Some(value)),
            WriteOp::Delete { key, ts } => (key, ts, None),
        };
        let added = version_size(&key, &value);
        let Some(chain) = self.map.get_mut(&key[..]) else {
            self.versions += 1;
            self.bytes += added;
            self.live += value.is_some() as i64;
            let mut chain = Chain::new();
            chain.push((ts, value));
            let mut counts = Counts::default();
            let keep = prune(&key, &mut chain, horizon, &mut counts);
            self.apply(counts);
            if keep {
                self.map.insert(MapKey::from_slice(&key), chain);
                self.order.insert(key);
            }
            return;
        };
        let was_live = is_live(chain);
        let (mut dv, mut db) = (0, 0);
        match chain.binary_search_by_key(&ts, |(t, _)| *t) {
            Ok(i) => {
                db += added - version_size(&key, &chain[i].1);
                chain[i].1 = value;
            }
            Err(i) => {
                dv += 1;
                db += added;
                chain.insert(i, (ts, value));
            }
        }
        let dl = is_live(chain) as i64 - was_live as i64;
        let mut counts = Counts::default();
        let keep = prune(&key, chain, horizon, &mut counts);
        self.versions += dv;
        self.bytes += db;
        self.live += dl;
        self.apply(counts);
        if !keep {
            self.map.remove(&key[..]);
            self.order.remove(&key[..]);
        }
    }
}

/// What a pruning pass dropped (as negative deltas to a shard's counters).
#[derive(Default)]
struct Counts {
    versions: i64,
    bytes: i64,
}

impl Counts {
    fn dropped(&mut self, size: i64) {
        self.versions -= 1;
        self.bytes -= size;
    }
}

impl Shard {
    fn apply(&mut self, c: Counts) {
        self.versions += c.versions;
        self.bytes += c.bytes;
    }
}

/// Drops versions of `chain` no read at or above `horizon` can see. Returns whether the key
/// should stay (false when all that remains is a tombstone below the horizon).
fn prune(key: &[u8], chain: &mut Chain, horizon: Timestamp, c: &mut Counts) -> bool {
    // Index of the newest version at or below the horizon: reads at the horizon see it.
    let visible = chain.partition_point(|(t, _)| *t <= horizon);
    if visible >= 2 {
        for (_, v) in chain.drain(..visible - 1) {
            c.dropped(version_size(key, &v));
        }
    }
    if chain.len() == 1 && chain[0].1.is_none() && chain[0].0 <= horizon {
        c.dropped(version_size(key, &None));
        chain.clear();
        return false;
    }
    true
}

fn visible_at(chain: &Chain, at: Timestamp) -> Option<Version> {
    let i = chain.partition_point(|(t, _)| *t <= at);
    (i > 0).then(|| Version {
        ts: chain[i - 1].0,
        value: chain[i - 1].1.clone(),
    })
}

impl Engine for MemEngine {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn put(&self, key: Bytes, ts: Timestamp, value: Bytes) -> Result<()> {
        check_key(&key)?;
        let horizon = self.horizon();
        self.shards[self.shard_of(&key)]
            .write()
            .write_version(WriteOp::Put { key, ts, value }, horizon);
        Ok(())
    }

    fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        for op in &batch.ops {
            check_key(op.key())?;
        }
        let horizon = self.horizon();
        let mut by_shard: Vec<(usize, WriteOp)> = batch
            .ops
            .into_iter()
            .map(|op| (self.shard_of(op.key()), op))
            .collect();
        // Stable: writes to the same key keep their order, so the later one wins.
        by_shard.sort_by_key(|(s, _)| *s);
        let mut guards = Vec::new();
        for (s, _) in &by_shard {
            if guards.last().is_none_or(|(last, _)| last != s) {
                guards.push((*s, self.shards[*s].write()));
            }
        }
        let mut g = 0;
        for (s, op) in by_shard {
            while guards[g].0 != s {
                g += 1;
            }
            guards[g].1.write_version(op, horizon);
        }
        Ok(())
    }

    fn get(&self, key: &[u8], at: Timestamp) -> Result<Option<Version>> {
        let shard = self.shards[self.shard_of(key)].read();
        Ok(shard.map.get(key).and_then(|chain| visible_at(chain, at)))
    }

    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> Result<Vec<(Bytes, Version)>> {
        // `BTreeSet::range` panics on inverted bounds.
        if limit == 0 || crate::is_empty_range(&start, &end) {
            return Ok(Vec::new());
        }
        // A k-way merge of the shards' ordered runs: the work is `limit` steps of a heap of
        // one head per shard, whatever the shards hold beyond the answer. Every shard is
        // locked before any is read (in shard order, like batches), so a scan sees a batch
        // entirely or not at all.
        let shards: Vec<_> = self.shards.iter().map(|s| s.read()).collect();
        let range = (start.as_ref().map(|b| &b[..]), end.as_ref().map(|b| &b[..]));
        let mut runs: Vec<_> = shards
            .iter()
            .map(|shard| {
                shard
                    .order
                    .range::<[u8], _>(range)
                    .filter_map(move |k| visible_at(&shard.map[&k[..]], at).map(|v| (k, v)))
                    .filter(move |(_, v)| include_tombstones || !v.is_tombstone())
            })
            .collect();
        let mut heads: Vec<_> = runs.iter_mut().map(Iterator::next).collect();
        let mut heap: BinaryHeap<Reverse<(&[u8], usize)>> = heads
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_ref().map(|(k, _)| Reverse((&k[..], i))))
            .collect();
        let mut all = Vec::new();
        while all.len() < limit
            && let Some(Reverse((_, i))) = heap.pop()
        {
            if let Some((k, v)) = heads[i].take() {
                all.push((k.clone(), v));
            }
            heads[i] = runs[i].next();
            if let Some((k, _)) = &heads[i] {
                heap.push(Reverse((&k[..], i)));
            }
        }
        Ok(all)
    }

    fn versions(&self, key: &[u8]) -> Result<Vec<Version>> {
        let shard = self.shards[self.shard_of(key)].read();
        Ok(shard
            .map
            .get(key)
            .map(|chain| {
                chain
                    .iter()
                    .map(|(ts, value)| Version {
                        ts: *ts,
                        value: value.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    fn set_gc_horizon(&self, horizon: Timestamp) {
        // Most calls do not move the horizon by much; skip the write (and the cache-line
        // transfer between cores it costs) when it would not move it at all.
        if horizon.0 > self.gc_horizon.load(Ordering::Relaxed) {
            self.gc_horizon.fetch_max(horizon.0, Ordering::Relaxed);
        }
    }

    fn gc(&self, horizon: Timestamp) -> Result<GcStats> {
        self.set_gc_horizon(horizon);
        let mut stats = GcStats::default();
        for shard in self.shards.iter() {
            let mut shard = shard.write();
            let shard = &mut *shard;
            let mut counts = Counts::default();
            let mut removed = Vec::new();
            shard.map.retain(|key, chain| {
                if chain.len() == 1 && !(chain[0].1.is_none() && chain[0].0 <= horizon) {
                    return true;
                }
                let keep = prune(key, chain, horizon, &mut counts);
                if !keep {
                    removed.push(key.clone());
                }
                keep
            });
            for key in &removed {
                shard.order.remove(&key[..]);
            }
            stats.versions_removed += (-counts.versions) as u64;
            shard.apply(counts);
            stats.keys_removed += removed.len() as u64;
        }
        Ok(stats)
    }

    fn clear(&self) -> Result<()> {
        // Every shard at once (in shard order, like batches), so no batch survives in part.
        let mut shards: Vec<_> = self.shards.iter().map(|s| s.write()).collect();
        for shard in shards.iter_mut() {
            **shard = Shard::default();
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// O(n / shards): a shard weighted by its live keys, then the drawn one of its map's.
    fn random_live_key(&self, draw: u64) -> Result<Option<Bytes>> {
        let counts: Vec<u64> = self
            .shards
            .iter()
            .map(|s| s.read().live.max(0) as u64)
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return Ok(None);
        }
        let mut at = draw % total;
        for (shard, &count) in self.shards.iter().zip(&counts) {
            if at >= count {
                at -= count;
                continue;
            }
            let shard = shard.read();
            let mut live = shard
                .map
                .iter()
                .filter(|(_, chain)| chain.last().is_some_and(|(_, v)| v.is_some()))
                .map(|(k, _)| Bytes::copy_from_slice(k));
            // The shard may have lost keys since it was counted: its last one stands in.
            let mut last = None;
            for (i, k) in live.by_ref().enumerate() {
                if i as u64 == at {
                    return Ok(Some(k));
                }
                last = Some(k);
            }
            if last.is_some() {
                return Ok(last);
            }
        }
        // Every counted key went away meanwhile: any live key left.
        Ok(self
            .scan(Bound::Unbounded, Bound::Unbounded, Timestamp::MAX, 1, false)?
            .pop()
            .map(|(k, _)| k))
    }

    fn stats(&self) -> EngineStats {
        let (mut live, mut versions, mut bytes) = (0, 0, 0);
        for shard in self.shards.iter() {
            let shard = shard.read();
            live += shard.live;
            versions += shard.versions;
            bytes += shard.bytes;
        }
        EngineStats {
            live_keys: live.max(0) as u64,
            versions: versions.max(0) as u64,
            bytes: bytes.max(0) as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn snapshot_reads_see_the_version_of_their_time() {
        let e = MemEngine::new();
        e.put(b("k"), Timestamp(10), b("a")).unwrap();
        e.put(b("k"), Timestamp(20), b("b")).unwrap();
        e.delete(b("k"), Timestamp(30)).unwrap();
        assert_eq!(e.get_value(b"k", Timestamp(9)).unwrap(), None);
        assert_eq!(e.get_value(b"k", Timestamp(15)).unwrap(), Some(b("a")));
        assert_eq!(e.get_value(b"k", Timestamp(25)).unwrap(), Some(b("b")));
        assert!(e.get_latest(b"k").unwrap().unwrap().is_tombstone());
        assert_eq!(e.stats().live_keys, 0);
        assert_eq!(e.stats().versions, 3);
    }

    #[test]
    fn horizon_prunes_inline_on_write() {
        let e = MemEngine::new();
        e.set_gc_horizon(Timestamp(100));
        for t in 1..50 {
            e.put(b("k"), Timestamp(t), b("v")).unwrap();
        }
        assert_eq!(e.versions(b"k").unwrap().len(), 1);
        e.delete(b("k"), Timestamp(60)).unwrap();
        assert!(
            e.versions(b"k").unwrap().is_empty(),
            "a buried tombstone vanishes"
        );
        assert_eq!(e.stats(), EngineStats::default());
    }
}
