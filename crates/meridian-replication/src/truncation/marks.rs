//! Truncation marks as data: the marks a node follows ([`Marks`], shared as [`SharedMarks`]) and
//! the clock that stays above them ([`FlooredClock`]). The kernel and the stores hold these;
//! the protocol that sets marks is the parent module.
//!
//! Guarantees: a key's mark is its bucket's, or the `default` bucket's when its bucket is not
//! registered; a [`FlooredClock`] never reads at or below a mark it was told to stay above, and
//! never backwards.

use crate::bucket::DEFAULT_BUCKET_NAME;
use crate::membership::ClusterMeta;
use meridian_cluster::bucket_and_key;
use meridian_core::{Clock, StrictlyMonotonic, Timestamp};
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
