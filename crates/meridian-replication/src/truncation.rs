//! Bucket truncation: what `FLUSHDB`/`FLUSHALL` mean in cluster mode. A truncation is a
//! *mark* per bucket in the cluster metadata (microseconds, [`ClusterMeta::truncated`]):
//! every value of the bucket written at or before its mark is gone, on every replica, whatever
//! order messages, repairs, hints and anti-entropy arrive in.
//!
//! - **Reads** apply the mark where each protocol loads what it stores: an eventual object
//!   loses its siblings written at or before the mark (their coordinator's `ts_us`; the clock
//!   is kept, so an older copy elsewhere loses them on merge); a timeline record created at or
//!   before it (its version's generation) reads as a tombstone of its version, so the master's
//!   next write is a re-insert in a newer generation; a transactional version committed at or
//!   before it reads as deleted. Nothing written before the flush can come back.
//! - **Writes** stay above every mark: each node's [`FlooredClock`] never reads below the
//!   highest mark it has adopted, so a value written after a node learned of the flush is never
//!   taken for one from before it, whatever the node's clock says.
//! - **The mark** is the highest clock reading of the members that answered
//!   ([`crate::Node::truncate`]), so values written anywhere before the flush began are at or
//!   below it; a member that did not answer (down, partitioned) may hold values stamped by a
//!   clock ahead of the mark: those survive, which is the documented bound.
//! - **Storage** is reclaimed by the expiry sweep, which rewrites what a mark hides (a
//!   value-less object, a tombstone record) page by page; a key stays listed nowhere
//!   meanwhile, since listings read through the marks.
//!
//! A write coordinated by a node that had not adopted the mark yet is concurrent with the flush
//! and may be stamped below it; `truncate` therefore returns only after every reachable member
//! acknowledged the new metadata.

use crate::bucket::DEFAULT_BUCKET_NAME;
use crate::error::Result;
use crate::kernel::Node;
use crate::membership::ClusterMeta;
use crate::msg::{KernelMsg, Msg};
use futures_util::future::join_all;
use meridian_cluster::bucket_and_key;
use meridian_core::{Clock, NodeId, StrictlyMonotonic, Timestamp};
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The truncation marks a node follows, by bucket, with the registered bucket names (a key of
/// an unregistered bucket takes the `default` bucket's mark, as it takes its properties).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    by_bucket: BTreeMap<String, u64>,
    registered: BTreeSet<String>,
}

impl Marks {
    /// The marks of `meta`.
    pub fn of(meta: &ClusterMeta) -> Marks {
        Marks {
            by_bucket: meta.truncated.clone(),
            registered: meta.buckets.keys().cloned().collect(),
        }
    }

    /// Whether no bucket was ever truncated (every lookup is then `None`).
    pub fn is_empty(&self) -> bool {
        self.by_bucket.is_empty()
    }

    /// The mark of the bucket of client key `key` (`bucket:rest`), in microseconds: values
    /// written at or before it are gone. A dropped bucket's keys keep its own mark as well as
    /// the default bucket's, so a flush is never undone by dropping the bucket.
    pub fn mark_for(&self, key: &[u8]) -> Option<u64> {
        if self.by_bucket.is_empty() {
            return None;
        }
        let (bucket, _) = bucket_and_key(key);
        let name = std::str::from_utf8(bucket).ok();
        let own = name.and_then(|n| self.by_bucket.get(n)).copied();
        let registered = name.is_some_and(|n| self.registered.contains(n));
        let default = if registered {
            None
        } else {
            self.by_bucket.get(DEFAULT_BUCKET_NAME).copied()
        };
        own.max(default)
    }

    /// The highest mark (what a node's writes must stay above).
    pub fn highest(&self) -> u64 {
        self.by_bucket.values().copied().max().unwrap_or(0)
    }
}

/// A node's marks, shared by its stores (replaced whole when metadata is adopted).
pub type SharedMarks = Arc<RwLock<Marks>>;

/// A node's clock, never below a floor: the node raises the floor above every truncation mark
/// it adopts (see the module docs). Strictly monotonic, as every [`Clock`].
#[derive(Debug)]
pub struct FlooredClock {
    inner: Arc<dyn Clock>,
    floor: AtomicU64,
    mono: StrictlyMonotonic,
}

impl FlooredClock {
    /// `inner`, with no floor yet.
    pub fn new(inner: Arc<dyn Clock>) -> FlooredClock {
        FlooredClock {
            inner,
            floor: AtomicU64::new(0),
            mono: StrictlyMonotonic::default(),
        }
    }

    /// From now on, every reading is above `mark`.
    pub fn stay_above(&self, mark: u64) {
        self.floor
            .fetch_max(mark.saturating_add(1), Ordering::AcqRel);
    }
}

impl Clock for FlooredClock {
    fn now(&self) -> Timestamp {
        let raw = self.inner.now().0;
        self.mono.next(raw.max(self.floor.load(Ordering::Acquire)))
    }
}

impl Node {
    /// Truncates `buckets` (`None`: every registered bucket, which covers every key): what
    /// `FLUSHALL` means in cluster mode. Reads the clock of every member the failure detector
    /// sees up, publishes the highest reading as the mark through the claimant, and returns
    /// once each of them answered that it follows the new metadata or the handoff timeout
    /// passed. A member down meanwhile adopts the document from its peers' heartbeats when it
    /// is back, and serves its old values until then. Returns the mark.
    ///
    /// # Errors
    /// `not_joined`, `claimant_unreachable`, and `membership_refused` for an unknown bucket.
    pub async fn truncate(&self, buckets: Option<Vec<String>>) -> Result<u64> {
        self.check_joined()?;
        let (buckets, peers) = {
            let v = self.kernel().view.read();
            let buckets =
                buckets.unwrap_or_else(|| v.meta.buckets.keys().cloned().collect::<Vec<_>>());
            let peers: Vec<NodeId> = v
                .meta
                .members
                .iter()
                .map(|m| m.id)
                .filter(|&id| id != self.id() && self.is_up(id))
                .collect();
            (buckets, peers)
        };
        let timeout = self.kernel().cfg.handoff_timeout;
        let transport = &self.kernel().transport;
        let readings = join_all(
            peers
                .iter()
                .map(|&p| transport.request(p, Msg::Kernel(KernelMsg::ClockRead), timeout)),
        )
        .await;
        let mut mark = self.kernel().clock.now().0;
        for (peer, r) in peers.iter().zip(readings) {
            match r {
                Ok(Msg::Kernel(KernelMsg::ClockReading(us))) => mark = mark.max(us),
                other => tracing::warn!(node = %self.id(), %peer, reply = ?other,
                    "truncation: no clock reading; values stamped by a clock ahead of the mark survive"),
            }
        }
        let meta = self
            .change(crate::membership::MetaChange::Truncate { buckets, mark })
            .await?;
        let version = meta.version;
        let acks = join_all(peers.iter().map(|&p| {
            transport.request(
                p,
                Msg::Kernel(KernelMsg::Sync(Box::new(meta.clone()))),
                timeout,
            )
        }))
        .await;
        for (peer, r) in peers.iter().zip(acks) {
            if !matches!(r, Ok(Msg::Kernel(KernelMsg::Synced(v))) if v >= version) {
                tracing::warn!(node = %self.id(), %peer, "truncation: not acknowledged yet");
            }
        }
        Ok(mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::ManualClock;

    #[test]
    fn a_key_takes_its_bucket_s_mark_or_the_default_s_when_unregistered() {
        let mut m = Marks::default();
        assert_eq!(m.mark_for(b"any:k"), None);
        m.registered = ["default", "tl"].map(String::from).into();
        m.by_bucket.insert("tl".into(), 50);
        assert_eq!(m.mark_for(b"tl:k"), Some(50));
        assert_eq!(m.mark_for(b"other:k"), None);
        m.by_bucket.insert("default".into(), 70);
        assert_eq!(m.mark_for(b"other:k"), Some(70));
        assert_eq!(m.mark_for(b"nocolon"), Some(70));
        assert_eq!(
            m.mark_for(b"tl:k"),
            Some(50),
            "a registered bucket has its own"
        );
        // A dropped bucket keeps its own mark beside the default's.
        m.by_bucket.insert("gone".into(), 90);
        assert_eq!(m.mark_for(b"gone:k"), Some(90));
        assert_eq!(m.mark_for(&[0xff, b':', 1]), Some(70), "non-UTF-8 names");
        assert_eq!(m.highest(), 90);
    }

    #[test]
    fn a_floored_clock_reads_above_the_floor_and_never_backwards() {
        let inner = Arc::new(ManualClock::new(Timestamp(100)));
        let c = FlooredClock::new(inner.clone());
        let a = c.now();
        assert!(a.0 >= 100);
        c.stay_above(1_000);
        let b = c.now();
        assert!(b.0 > 1_000 && b > a);
        c.stay_above(10); // lower floors change nothing
        let d = c.now();
        assert!(d > b);
        inner.advance(std::time::Duration::from_micros(4_900));
        assert!(
            c.now().0 >= 5_000,
            "the source takes over once past the floor"
        );
    }
}
