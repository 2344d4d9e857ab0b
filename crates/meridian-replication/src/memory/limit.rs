//! The `maxmemory` state a node's kernel keeps ([`MemoryLimit`]): the limit and policy, the
//! peers whose heartbeats say they refuse writes, the access index LRU and LFU rank keys by.
//! Plain state with no protocol behind it, so the kernel can hold it without importing the
//! eviction protocol (the parent module).
//!
//! Guarantees: the access index stays within [`ACCESS_SHARDS`] × [`ACCESS_PER_SHARD`] keys;
//! a peer counts as full exactly while its last heartbeat said so.

use bytes::Bytes;
use meridian_core::memory::{MaxmemoryPolicy, lfu};
use meridian_core::{NodeId, Timestamp, splitmix64};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

/// Shards of the access index.
const ACCESS_SHARDS: usize = 64;

/// Most keys the access index remembers per shard; a full shard is cleared (its keys then
/// rank as unknown until they are touched again), so the index stays bounded.
const ACCESS_PER_SHARD: usize = 16 * 1024;

/// A key's access record for LRU and LFU.
#[derive(Debug, Clone, Copy)]
pub(super) struct Access {
    /// Last access, ms of the node's clock.
    pub(super) ms: u64,
    /// Redis's logarithmic LFU counter.
    pub(super) freq: u8,
}

/// The access index: per key coordinated here, its last access and LFU counter. Bounded by
/// [`ACCESS_SHARDS`] × [`ACCESS_PER_SHARD`] entries.
#[derive(Debug)]
pub(crate) struct AccessIndex {
    pub(super) shards: Box<[Mutex<BTreeMap<Bytes, Access>>]>,
}

impl AccessIndex {
    pub(super) fn new() -> AccessIndex {
        AccessIndex {
            shards: (0..ACCESS_SHARDS)
                .map(|_| Mutex::new(BTreeMap::new()))
                .collect(),
        }
    }

    pub(super) fn shard(&self, key: &[u8]) -> &Mutex<BTreeMap<Bytes, Access>> {
        let h = meridian_cluster::key_hash(b"", key) as usize;
        &self.shards[h & (ACCESS_SHARDS - 1)]
    }

    /// Records one access of `key` at `now`.
    pub(super) fn touch(&self, key: &[u8], now: Timestamp) {
        let ms = now.0 / 1000;
        let mut s = self.shard(key).lock();
        if let Some(a) = s.get_mut(key) {
            let f = lfu::decayed(a.freq, ms.saturating_sub(a.ms));
            a.freq = lfu::incremented(f, splitmix64(now.0 ^ key.len() as u64));
            a.ms = ms;
            return;
        }
        if s.len() >= ACCESS_PER_SHARD {
            s.clear();
        }
        s.insert(
            Bytes::copy_from_slice(key),
            Access {
                ms,
                freq: lfu::INIT,
            },
        );
    }

    pub(super) fn get(&self, key: &[u8]) -> Option<Access> {
        self.shard(key).lock().get(key).copied()
    }

    pub(super) fn forget(&self, key: &[u8]) {
        self.shard(key).lock().remove(key);
    }

    pub(super) fn clear(&self) {
        for s in self.shards.iter() {
            s.lock().clear();
        }
    }
}

/// A node's `maxmemory` state (in the kernel).
#[derive(Debug)]
pub(crate) struct MemoryLimit {
    /// The limit in bytes (0: none).
    pub(super) maxmemory: AtomicU64,
    /// The policy, as `MaxmemoryPolicy as u8`.
    pub(super) policy: AtomicU8,
    /// Keys this node evicted.
    pub(super) evicted: AtomicU64,
    /// Peers whose last heartbeat said they refuse writes.
    pub(super) full_peers: Mutex<BTreeSet<NodeId>>,
    /// Whether `full_peers` is not empty (one load on every write of a healthy cluster).
    pub(super) any_peer_full: AtomicBool,
    pub(super) access: AccessIndex,
}

impl MemoryLimit {
    pub(crate) fn new(maxmemory: u64, policy: MaxmemoryPolicy) -> MemoryLimit {
        MemoryLimit {
            maxmemory: AtomicU64::new(maxmemory),
            policy: AtomicU8::new(policy as u8),
            evicted: AtomicU64::new(0),
            full_peers: Mutex::new(BTreeSet::new()),
            any_peer_full: AtomicBool::new(false),
            access: AccessIndex::new(),
        }
    }

    /// Keeps what `peer`'s heartbeat said of its memory.
    pub(crate) fn note_peer(&self, peer: NodeId, full: bool) {
        let mut set = self.full_peers.lock();
        if full {
            set.insert(peer);
        } else {
            set.remove(&peer);
        }
        self.any_peer_full.store(!set.is_empty(), Ordering::Relaxed);
    }

    pub(super) fn peer_full(&self, peer: NodeId) -> bool {
        self.any_peer_full.load(Ordering::Relaxed) && self.full_peers.lock().contains(&peer)
    }
}

/// Whether a node using `used` bytes under limit `max` and `policy` refuses writes: over the
/// limit under `noeviction`, more than a quarter over it otherwise.
pub fn refuses_writes(used: u64, max: u64, policy: MaxmemoryPolicy) -> bool {
    if max == 0 {
        return false;
    }
    let ceiling = match policy {
        MaxmemoryPolicy::NoEviction => max,
        _ => max.saturating_add(max / 4),
    };
    used > ceiling
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noeviction_refuses_over_the_limit_and_evicting_policies_at_a_quarter_over() {
        assert!(!refuses_writes(u64::MAX, 0, MaxmemoryPolicy::NoEviction));
        assert!(!refuses_writes(100, 100, MaxmemoryPolicy::NoEviction));
        assert!(refuses_writes(101, 100, MaxmemoryPolicy::NoEviction));
        assert!(!refuses_writes(125, 100, MaxmemoryPolicy::AllkeysLru));
        assert!(refuses_writes(126, 100, MaxmemoryPolicy::AllkeysLru));
        assert!(!refuses_writes(
            u64::MAX,
            u64::MAX,
            MaxmemoryPolicy::AllkeysLfu
        ));
    }

    #[test]
    fn the_access_index_stays_bounded_and_counts_accesses() {
        let idx = AccessIndex::new();
        for i in 0..(ACCESS_SHARDS * ACCESS_PER_SHARD + 10_000) {
            idx.touch(format!("k{i}").as_bytes(), Timestamp(1_000));
        }
        let total: usize = idx.shards.iter().map(|s| s.lock().len()).sum();
        assert!(total <= ACCESS_SHARDS * ACCESS_PER_SHARD, "{total}");
        idx.touch(b"hot", Timestamp(1_000));
        idx.touch(b"hot", Timestamp(5_000_000));
        let a = idx.get(b"hot").unwrap();
        assert_eq!(a.ms, 5_000);
        assert!(a.freq >= lfu::INIT);
        idx.forget(b"hot");
        assert!(idx.get(b"hot").is_none());
    }
}
