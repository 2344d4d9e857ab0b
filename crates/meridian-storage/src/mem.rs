//! [`MemEngine`]: the default engine, in memory, concurrent.
//!
//! Keys are spread over a fixed number of shards by hash; each shard is an ordered map behind
//! its own reader-writer lock, so point operations on different shards never contend and scans
//! merge the shards' ordered runs. A batch locks every shard it touches, in shard order, so it
//! is applied atomically and cannot deadlock with another batch.
//!
//! Nothing survives the process: it is the engine for caches, tests and the simulator.

use crate::version::{Version, WriteBatch, WriteOp};
use crate::{Engine, EngineStats, GcStats, Result, check_key};
use bytes::Bytes;
use meridian_core::Timestamp;
use parking_lot::RwLock;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Versions of one key, oldest first. Almost every key has exactly one.
type Chain = SmallVec<[(Timestamp, Option<Bytes>); 1]>;
type Shard = BTreeMap<Bytes, Chain>;

const SHARDS: usize = 64;

/// The in-memory engine. See the module docs.
#[derive(Debug)]
pub struct MemEngine {
    shards: Box<[RwLock<Shard>]>,
    gc_horizon: AtomicU64,
    live_keys: AtomicI64,
    versions: AtomicI64,
    bytes: AtomicI64,
}

impl Default for MemEngine {
    fn default() -> Self {
        Self::new()
    }
}

/// Changes to the engine's counters caused by one mutation of a chain.
#[derive(Default)]
struct Delta {
    live: i64,
    versions: i64,
    bytes: i64,
}

impl MemEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| RwLock::new(BTreeMap::new())).collect(),
            gc_horizon: AtomicU64::new(0),
            live_keys: AtomicI64::new(0),
            versions: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
        }
    }

    fn shard_of(&self, key: &[u8]) -> usize {
        let mut h = rustc_hash::FxBuildHasher.build_hasher();
        h.write(key);
        (h.finish() as usize) % SHARDS
    }

    fn apply(&self, d: &Delta) {
        self.live_keys.fetch_add(d.live, Ordering::Relaxed);
        self.versions.fetch_add(d.versions, Ordering::Relaxed);
        self.bytes.fetch_add(d.bytes, Ordering::Relaxed);
    }
}

fn version_size(key: &[u8], v: &Option<Bytes>) -> i64 {
    (key.len() + v.as_ref().map_or(0, |b| b.len()) + 8) as i64
}

fn is_live(chain: &Chain) -> bool {
    chain.last().is_some_and(|(_, v)| v.is_some())
}

/// Writes one version into `shard`, pruning versions below `horizon` of the same key.
fn write_version(shard: &mut Shard, op: WriteOp, horizon: Timestamp, d: &mut Delta) {
    let (key, ts, value) = match op {
        WriteOp::Put { key, ts, value } => (key, ts, Some(value)),
        WriteOp::Delete { key, ts } => (key, ts, None),
    };
    let added = version_size(&key, &value);
    let chain = match shard.get_mut(&key[..]) {
        Some(chain) => chain,
        None => {
            d.versions += 1;
            d.bytes += added;
            d.live += value.is_some() as i64;
            let mut chain = Chain::new();
            chain.push((ts, value));
            if prune(&key, &mut chain, horizon, d) {
                shard.insert(key, chain);
            }
            return;
        }
    };
    let was_live = is_live(chain);
    match chain.binary_search_by_key(&ts, |(t, _)| *t) {
        Ok(i) => {
            d.bytes += added - version_size(&key, &chain[i].1);
            chain[i].1 = value;
        }
        Err(i) => {
            d.versions += 1;
            d.bytes += added;
            chain.insert(i, (ts, value));
        }
    }
    d.live += is_live(chain) as i64 - was_live as i64;
    if !prune(&key, chain, horizon, d) {
        shard.remove(&key[..]);
    }
}

/// Drops versions of `chain` no read at or above `horizon` can see. Returns whether the key
/// should stay (false when all that remains is a tombstone below the horizon).
fn prune(key: &[u8], chain: &mut Chain, horizon: Timestamp, d: &mut Delta) -> bool {
    // Index of the newest version at or below the horizon: reads at the horizon see it.
    let visible = chain.partition_point(|(t, _)| *t <= horizon);
    if visible >= 2 {
        for (_, v) in chain.drain(..visible - 1) {
            d.versions -= 1;
            d.bytes -= version_size(key, &v);
        }
    }
    if chain.len() == 1 && chain[0].1.is_none() && chain[0].0 <= horizon {
        d.versions -= 1;
        d.bytes -= version_size(key, &None);
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
        let horizon = Timestamp(self.gc_horizon.load(Ordering::Relaxed));
        let mut d = Delta::default();
        let shard = self.shard_of(&key);
        write_version(
            &mut self.shards[shard].write(),
            WriteOp::Put { key, ts, value },
            horizon,
            &mut d,
        );
        self.apply(&d);
        Ok(())
    }

    fn write_batch(&self, batch: WriteBatch) -> Result<()> {
        for op in &batch.ops {
            check_key(op.key())?;
        }
        let horizon = Timestamp(self.gc_horizon.load(Ordering::Relaxed));
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
        let mut d = Delta::default();
        let mut g = 0;
        for (s, op) in by_shard {
            while guards[g].0 != s {
                g += 1;
            }
            write_version(&mut guards[g].1, op, horizon, &mut d);
        }
        drop(guards);
        self.apply(&d);
        Ok(())
    }

    fn get(&self, key: &[u8], at: Timestamp) -> Result<Option<Version>> {
        let shard = self.shards[self.shard_of(key)].read();
        Ok(shard.get(key).and_then(|chain| visible_at(chain, at)))
    }

    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> Result<Vec<(Bytes, Version)>> {
        // `BTreeMap::range` panics on inverted bounds.
        if limit == 0 || crate::is_empty_range(&start, &end) {
            return Ok(Vec::new());
        }
        // Each shard contributes its first `limit` matches; the merged first `limit` of those
        // are the answer, since every shard's run is already ordered. Every shard is locked
        // before any is read (in shard order, like batches), so a scan sees a batch entirely
        // or not at all.
        let shards: Vec<_> = self.shards.iter().map(|s| s.read()).collect();
        let mut all = Vec::new();
        for shard in &shards {
            let matches = shard
                .range::<[u8], _>((start.as_ref().map(|b| &b[..]), end.as_ref().map(|b| &b[..])))
                .filter_map(|(k, chain)| visible_at(chain, at).map(|v| (k, v)))
                .filter(|(_, v)| include_tombstones || !v.is_tombstone())
                .take(limit)
                .map(|(k, v)| (k.clone(), v));
            all.extend(matches);
        }
        drop(shards);
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all.truncate(limit);
        Ok(all)
    }

    fn versions(&self, key: &[u8]) -> Result<Vec<Version>> {
        let shard = self.shards[self.shard_of(key)].read();
        Ok(shard
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
        self.gc_horizon.fetch_max(horizon.0, Ordering::Relaxed);
    }

    fn gc(&self, horizon: Timestamp) -> Result<GcStats> {
        self.set_gc_horizon(horizon);
        let mut stats = GcStats::default();
        for shard in self.shards.iter() {
            let mut d = Delta::default();
            let mut shard = shard.write();
            let before = shard.len();
            shard.retain(|key, chain| {
                if chain.len() == 1 && !(chain[0].1.is_none() && chain[0].0 <= horizon) {
                    return true;
                }
                prune(key, chain, horizon, &mut d)
            });
            stats.keys_removed += (before - shard.len()) as u64;
            stats.versions_removed += (-d.versions) as u64;
            drop(shard);
            self.apply(&d);
        }
        Ok(stats)
    }

    fn clear(&self) -> Result<()> {
        // Every shard at once (in shard order, like batches), so no batch survives in part.
        let mut shards: Vec<_> = self.shards.iter().map(|s| s.write()).collect();
        let mut d = Delta::default();
        for shard in shards.iter_mut() {
            for (key, chain) in shard.iter() {
                d.live -= is_live(chain) as i64;
                for (_, v) in chain {
                    d.versions -= 1;
                    d.bytes -= version_size(key, v);
                }
            }
            shard.clear();
        }
        drop(shards);
        self.apply(&d);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
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
