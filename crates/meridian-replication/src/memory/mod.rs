//! `maxmemory` on a cluster node: Redis's memory limit and eviction policies, enforced by
//! every coordinator before it applies a write and by each node's eviction task.
//!
//! **The estimate.** A node's used memory is what its engine stores: the bytes of every
//! stored key and encoded object (eventual objects, timeline records, transactional versions,
//! hints, blob manifests) plus [`KEY_OVERHEAD`] per stored version, as the standalone
//! keyspace counts key + value + overhead. The engine keeps both figures up to date on every
//! write ([`meridian_storage::EngineStats`]), so reading it costs no scan and no write pays
//! for it. A deleted key keeps its tombstone (key + overhead + a small object) until it is
//! reaped.
//!
//! **The report to peers.** Each heartbeat carries one flag, `memory_full`: whether the
//! sender refuses writes ([`Node::memory_full`]). The heartbeat was chosen over the
//! `ReplicaLoad` feedback of read replies because it reaches every member every
//! `heartbeat_interval` whatever the workload (a write-only workload sends no read replies),
//! costs one byte, and needs no new message. A peer's flag is at most one heartbeat old: a
//! node may overshoot its limit by what the cluster writes to it in that time.
//!
//! **Refusals (`noeviction`).** A coordinator answers [`ReplicationError::OutOfMemory`]
//! (Redis's `-OOM command not allowed when used memory > 'maxmemory'.`) before applying a
//! write when it, or any node of the write's preference list, reports itself full
//! ([`Node::write_refused`], called by the dispatch facade for every bucket type's writes).
//! Deletes are always served: they free memory. A node is *full* when it is over its limit
//! under `noeviction`, or more than a quarter over it under an evicting policy (eviction runs
//! in the background and cannot keep up, or nothing is left that the policy may evict) — so
//! memory stays bounded under every policy.
//!
//! **Eviction (every other policy).** A background task ([`Node::eviction`], paced by
//! `eviction_interval`, at most [`EVICTIONS_PER_ROUND`] keys per round) runs while the node is
//! over its limit: it samples [`SAMPLES`] keys among the live objects it stores and
//! coordinates (the first primary of an eventual key, the master of a timeline record), from
//! a cursor that walks its keyspace and wraps around, keeps the best victim by the policy,
//! and deletes it through the key's own coordinated path — an eventual delete with the
//! object's own context (replicated as any delete, so every replica drops it), a timeline
//! tombstone test-and-set on the version it saw through the master — counting
//! `evicted_keys`. Transactional keys are not evicted (a delete there is a transaction; their
//! writes are still refused when full). LRU and LFU rank keys by an in-memory access index
//! ([`limit::AccessIndex`]) updated by the reads and writes this node coordinates while a limit is
//! set under those policies (nothing is written to the engine for it); a key the index does
//! not know ranks as the oldest and least used.

pub(crate) mod limit;

use limit::Access;
pub use limit::refuses_writes;

use crate::ReplicationError;
use crate::bucket::BucketType;
use crate::error::Result;
use crate::eventual::shared;
use crate::kernel::Node;
use crate::timeline::{Content, Expect};
use bytes::Bytes;
use meridian_cluster::dvv::{self, Object};
use meridian_cluster::{Props, bucket_and_key};
use meridian_core::NodeId;
use meridian_core::memory::lfu;
pub use meridian_core::memory::{KEY_OVERHEAD, MaxmemoryPolicy, OOM, SAMPLES};
use rand::Rng;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

/// Most keys one eviction round deletes (the next round goes on).
pub const EVICTIONS_PER_ROUND: usize = 64;

/// Stored objects examined per sample (a page of the cursor's walk); keys the node does not
/// coordinate, tombstones and (for the volatile policies) keys without a TTL are skipped.
const SAMPLE_PAGE: usize = 32;

/// The expiry of the value an eventual object shows (its newest value sibling).
fn shown_expiry(o: &Object) -> Option<u64> {
    o.siblings()
        .iter()
        .filter(|s| matches!(s.content, dvv::Content::Value(_)))
        .max_by_key(|s| (s.meta.ts_us, s.dot))
        .and_then(|s| match &s.content {
            dvv::Content::Value(v) => shared::stored_expiry(v),
            dvv::Content::Tombstone => None,
        })
}

/// A sampled key and how to delete it.
#[derive(Debug)]
enum Victim {
    /// An eventual object: deleted with its own context.
    Eventual { context: Vec<u8> },
    /// A timeline record: tombstoned with a test-and-set on its version.
    Timeline { ver: crate::timeline::Version },
}

/// Where the eviction task's walk stands (eventual objects, then timeline records).
#[derive(Debug, Default)]
struct Cursor {
    eventual: Option<Bytes>,
    timeline: Option<Bytes>,
}

impl Node {
    /// The used-memory estimate in bytes (see the module docs).
    pub fn used_memory(&self) -> u64 {
        let st = self.kernel().store.engine().stats();
        st.bytes
            .saturating_add(st.versions.saturating_mul(KEY_OVERHEAD))
    }

    /// `maxmemory` in bytes (0: no limit).
    pub fn maxmemory(&self) -> u64 {
        self.kernel().memory.maxmemory.load(Ordering::Relaxed)
    }

    /// CONFIG SET maxmemory: the new limit holds for the next write (and the next eviction
    /// round); peers hear of it with the next heartbeat.
    pub fn set_maxmemory(&self, bytes: u64) {
        self.kernel()
            .memory
            .maxmemory
            .store(bytes, Ordering::Relaxed);
        if bytes == 0 {
            self.kernel().memory.access.clear();
        }
    }

    /// `maxmemory-policy`.
    pub fn maxmemory_policy(&self) -> MaxmemoryPolicy {
        MaxmemoryPolicy::from_u8(self.kernel().memory.policy.load(Ordering::Relaxed))
    }

    /// CONFIG SET maxmemory-policy.
    pub fn set_maxmemory_policy(&self, policy: MaxmemoryPolicy) {
        self.kernel()
            .memory
            .policy
            .store(policy as u8, Ordering::Relaxed);
    }

    /// Keys this node evicted for `maxmemory` (INFO `evicted_keys`).
    pub fn evicted_keys(&self) -> u64 {
        self.kernel().memory.evicted.load(Ordering::Relaxed)
    }

    /// Whether used memory is over `maxmemory`.
    pub fn over_maxmemory(&self) -> bool {
        let max = self.maxmemory();
        max != 0 && self.used_memory() > max
    }

    /// Whether this node refuses writes for `maxmemory` (what its heartbeats report).
    pub fn memory_full(&self) -> bool {
        let max = self.maxmemory();
        max != 0 && refuses_writes(self.used_memory(), max, self.maxmemory_policy())
    }

    /// The `maxmemory` check of a write of `key`, before anything is applied: refused when
    /// this node or a node of the key's preference list is full (see the module docs).
    /// One atomic load per check while no node of the cluster has a limit it is near.
    pub fn write_refused(&self, key: &[u8]) -> Result<()> {
        let me = self.id();
        if self.memory_full() {
            return Err(ReplicationError::OutOfMemory { node: me });
        }
        if !self.kernel().memory.any_peer_full.load(Ordering::Relaxed) {
            return Ok(());
        }
        let (bucket, _) = bucket_and_key(key);
        let n_val = self.registry().resolve(bucket, &Props::default()).n_val;
        let (_, apl) = self.preflist_for(key, n_val);
        match apl
            .entries()
            .iter()
            .map(|e| e.node)
            .find(|&n| n != me && self.kernel().memory.peer_full(n))
        {
            Some(node) => Err(ReplicationError::OutOfMemory { node }),
            None => Ok(()),
        }
    }

    /// The peers whose last heartbeat said they refuse writes.
    pub fn peers_memory_full(&self) -> Vec<NodeId> {
        self.kernel()
            .memory
            .full_peers
            .lock()
            .iter()
            .copied()
            .collect()
    }

    /// Records an access of `key` coordinated here, for LRU and LFU (nothing without a limit
    /// or under the other policies).
    pub fn touch_key(&self, key: &[u8]) {
        if self.maxmemory() != 0 && self.maxmemory_policy().tracks_reads() {
            self.kernel()
                .memory
                .access
                .touch(key, self.kernel().clock.now());
        }
    }

    /// The eviction task (see the module docs).
    pub(crate) async fn eviction(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.eviction_interval;
        if every.is_zero() {
            return;
        }
        let mut tick = self.ticker(every, every, every);
        let mut cursor = Cursor::default();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            self.evict_round(&mut cursor).await;
        }
    }

    /// One round: evicts until within the limit, out of candidates, or
    /// [`EVICTIONS_PER_ROUND`] keys.
    async fn evict_round(&self, cursor: &mut Cursor) {
        let policy = self.maxmemory_policy();
        if policy == MaxmemoryPolicy::NoEviction {
            return;
        }
        for _ in 0..EVICTIONS_PER_ROUND {
            if !self.over_maxmemory() {
                return;
            }
            let Some((key, victim)) = self.sample(policy, cursor) else {
                return;
            };
            match self.evict(&key, victim).await {
                Ok(()) => {
                    self.kernel().memory.access.forget(&key);
                    self.kernel().memory.evicted.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::debug!(node = %self.id(), error = %e, "maxmemory eviction: delete failed");
                    return;
                }
            }
        }
    }

    /// Deletes one victim through its key's coordinated path.
    async fn evict(&self, key: &[u8], victim: Victim) -> Result<()> {
        match victim {
            Victim::Eventual { context } => {
                self.delete(key, Some(&context), crate::PutOptions::default())
                    .await?;
            }
            Victim::Timeline { ver } => {
                match self
                    .tl_put(key, Content::Tombstone, Expect::Version(ver))
                    .await
                {
                    // A write won the race: the key is live again, and not evicted.
                    Ok(_) | Err(ReplicationError::VersionMismatch { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// The best victim by `policy` among about [`SAMPLES`] keys this node coordinates, from
    /// the cursor's walk; `None` when a full page of each kind held no candidate.
    fn sample(&self, policy: MaxmemoryPolicy, cursor: &mut Cursor) -> Option<(Bytes, Victim)> {
        let now_ms = self.kernel().clock.now().0 / 1000;
        let mut best: Option<(u64, Bytes, Victim)> = None;
        let mut consider = |score: u64, key: Bytes, v: Victim| {
            if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                best = Some((score, key, v));
            }
        };
        let mut taken = 0;
        for (key, expiry, victim) in self.sample_eventual(policy, cursor) {
            consider(self.score(policy, &key, expiry, now_ms), key, victim);
            taken += 1;
        }
        if taken < SAMPLES {
            for (key, expiry, victim) in self.sample_timeline(policy, cursor, SAMPLES - taken) {
                consider(self.score(policy, &key, expiry, now_ms), key, victim);
            }
        }
        best.map(|(_, k, v)| (k, v))
    }

    /// Higher is evicted first.
    fn score(&self, policy: MaxmemoryPolicy, key: &[u8], expiry: Option<u64>, now_ms: u64) -> u64 {
        let access = self.kernel().memory.access.get(key);
        let idle = |a: Access| now_ms.saturating_sub(a.ms);
        match policy {
            MaxmemoryPolicy::AllkeysLru | MaxmemoryPolicy::VolatileLru => {
                access.map_or(u64::MAX, idle)
            }
            MaxmemoryPolicy::AllkeysLfu | MaxmemoryPolicy::VolatileLfu => {
                access.map_or(u64::MAX, |a| {
                    let f = lfu::decayed(a.freq, idle(a));
                    // Less frequent first; among equals, the least recent.
                    ((255 - u64::from(f)) << 48) | idle(a).min((1 << 48) - 1)
                })
            }
            MaxmemoryPolicy::VolatileTtl => u64::MAX - expiry.unwrap_or(u64::MAX),
            _ => self.kernel().rng.lock().random::<u64>(),
        }
    }

    /// Up to [`SAMPLES`] live eventual objects this node is the first primary of, from the
    /// cursor's page (which advances, wrapping around).
    fn sample_eventual(
        &self,
        policy: MaxmemoryPolicy,
        cursor: &mut Cursor,
    ) -> Vec<(Bytes, Option<u64>, Victim)> {
        let page = self
            .kernel()
            .store
            .objects_after(cursor.eventual.as_deref(), SAMPLE_PAGE);
        let Ok((objects, next)) = page else {
            cursor.eventual = None;
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut last = None;
        for (key, mut o) in objects {
            last = Some(key.clone());
            self.kernel().store.visible(&key, &mut o);
            if !o.values().any(|_| true) || self.bucket_type(&key) != BucketType::Eventual {
                continue;
            }
            let expiry = shown_expiry(&o);
            if (policy.volatile() && expiry.is_none()) || !self.first_primary(&key) {
                continue;
            }
            let context = o.clock().encode();
            out.push((key, expiry, Victim::Eventual { context }));
            if out.len() == SAMPLES {
                break;
            }
        }
        cursor.eventual = if out.len() == SAMPLES { last } else { next };
        out
    }

    /// Up to `want` live timeline records this node is the master of, from the cursor's page.
    fn sample_timeline(
        &self,
        policy: MaxmemoryPolicy,
        cursor: &mut Cursor,
        want: usize,
    ) -> Vec<(Bytes, Option<u64>, Victim)> {
        let Ok((records, next)) = self.tl_records_after(cursor.timeline.as_deref(), SAMPLE_PAGE)
        else {
            cursor.timeline = None;
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut last = None;
        for (key, r) in records {
            last = Some(key.clone());
            let Content::Value(v) = &r.content else {
                continue;
            };
            let expiry = shared::stored_expiry(v);
            if r.master.node != self.id() || (policy.volatile() && expiry.is_none()) {
                continue;
            }
            out.push((key, expiry, Victim::Timeline { ver: r.ver }));
            if out.len() == want {
                break;
            }
        }
        cursor.timeline = if out.len() == want { last } else { next };
        out
    }

    /// Whether this node is the first primary of `key`'s preference list (the one replica
    /// that evicts it, so N replicas do not each delete it).
    fn first_primary(&self, key: &[u8]) -> bool {
        let (bucket, _) = bucket_and_key(key);
        let n_val = self.registry().resolve(bucket, &Props::default()).n_val;
        let (_, apl) = self.preflist_for(key, n_val);
        apl.entries()
            .iter()
            .find(|e| e.is_primary())
            .is_some_and(|e| e.node == self.id())
    }
}
