//! The expiry sweep: values whose Redis TTL has passed are deleted for good, with a tombstone
//! written through their key's own protocol.
//!
//! An expired value is invisible at once (the dispatch facade judges expiry on every read);
//! this sweep is what frees its storage and what makes every replica and every full read
//! agree it is gone. Every `expiry_sweep_interval` the task looks at the next
//! `expiry_sweep_page` keys this replica holds of each kind, from cursors that wrap around:
//!
//! - an **eventual** object whose shown value (the last-writer-wins sibling, or the merged
//!   counter or hash map) has expired is deleted by the key's coordinating replica — the first primary of
//!   its preference list, so one replica acts, not N — with its own clock as the context: the
//!   tombstone supersedes exactly the values it saw, and a newer write it had not seen yet
//!   survives as a sibling, as after any delete;
//! - a **timeline** record whose value has expired is tombstoned by its master, with a
//!   test-and-set on the version it saw, so a write that raced the sweep wins.
//!
//! The same walk frees what a bucket truncation hides ([`crate::truncation`]): an eventual
//! object is rewritten without its hidden siblings, a timeline record as a tombstone of its
//! version (each on its own replica, with no message: every replica applies the same mark).
//!
//! Transactional buckets keep their expired versions until MVCC garbage collection: their
//! reads judge expiry at the snapshot, and a delete would be a transaction of its own.

use crate::PutOptions;
use crate::bucket::BucketType;
use crate::eventual::shared::{self, Expiring};
use crate::eventual::{elements, map, registers, sequence};
use crate::kernel::Node;
use crate::timeline::{Content, Expect};
use bytes::Bytes;
use meridian_cluster::dvv::{self, Object};
use meridian_cluster::{Props, bucket_and_key};
use meridian_core::Timestamp;
use tokio_util::sync::CancellationToken;

/// Whether `raw` is a value (plain or a CRDT) whose expiry is at or before `now`.
fn expired(raw: &Bytes, now: Timestamp) -> bool {
    shared::stored_expiry(raw).is_some_and(|at| now.0 > at)
}

/// Whether the value the Redis view shows for `o` has expired (a map: the merge of its map
/// siblings, whose expiry is the one set last).
fn shown_expired(o: &Object, now: Timestamp) -> bool {
    o.siblings()
        .iter()
        .filter(|s| matches!(s.content, dvv::Content::Value(_)))
        .max_by_key(|s| (s.meta.ts_us, s.dot))
        .is_some_and(|s| match &s.content {
            dvv::Content::Value(v) if map::is_map(v) => map::merge_all(o.values().map(|v| &v[..]))
                .and_then(|m| m.expiry())
                .is_some_and(|at| now.0 > at),
            dvv::Content::Value(v) if elements::is_elements(v) => {
                merged_passed(elements::merge_all(o.values().map(|v| &v[..])), now)
            }
            dvv::Content::Value(v) if registers::is_registers(v) => {
                merged_passed(registers::merge_all(o.values().map(|v| &v[..])), now)
            }
            dvv::Content::Value(v) if sequence::is_sequence(v) => {
                merged_passed(sequence::merge_all(o.values().map(|v| &v[..])), now)
            }
            dvv::Content::Value(v) => expired(v, now),
            dvv::Content::Tombstone => false,
        })
}

/// Whether the merge of a CRDT's siblings has an expiry that passed at `now`.
fn merged_passed(merged: Option<impl Expiring>, now: Timestamp) -> bool {
    merged.and_then(|c| c.expiry()).is_some_and(|at| now.0 > at)
}

impl Node {
    /// The sweep task (see the module docs).
    pub(crate) async fn expiry_sweep(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.expiry_sweep_interval;
        if every.is_zero() {
            return;
        }
        let mut tick = self.ticker(every, every, every);
        let (mut eventual_after, mut timeline_after) = (None, None);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            eventual_after = self.sweep_eventual(eventual_after).await;
            timeline_after = self.sweep_timeline(timeline_after).await;
        }
    }

    /// One page of eventual objects after `after`; returns where the next page starts.
    async fn sweep_eventual(&self, after: Option<Bytes>) -> Option<Bytes> {
        let page = self.kernel().cfg.expiry_sweep_page;
        let (objects, next) = match self.kernel().store.objects_after(after.as_deref(), page) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(node = %self.id(), error = %e, "expiry sweep: scan failed");
                return None;
            }
        };
        let now = self.kernel().clock.now();
        for (key, mut o) in objects {
            if self.kernel().store.visible(&key, &mut o)
                && let Err(e) = self.kernel().store.prune(&key)
            {
                tracing::debug!(node = %self.id(), error = %e, "truncation sweep: rewrite failed");
            }
            if self.bucket_type(&key) != BucketType::Eventual || !shown_expired(&o, now) {
                continue;
            }
            let (bucket, _) = bucket_and_key(&key);
            let n_val = self.registry().resolve(bucket, &Props::default()).n_val;
            let (_, apl) = self.preflist_for(&key, n_val);
            let coordinator = apl
                .entries()
                .iter()
                .find(|e| e.is_primary())
                .map(|e| e.node);
            if coordinator != Some(self.id()) {
                continue;
            }
            let ctx = o.clock().encode();
            if let Err(e) = self.delete(&key, Some(&ctx), PutOptions::default()).await {
                tracing::debug!(node = %self.id(), error = %e, "expiry sweep: delete failed");
            }
        }
        next
    }

    /// One page of timeline records after `after`; returns where the next page starts.
    async fn sweep_timeline(&self, after: Option<Bytes>) -> Option<Bytes> {
        let page = self.kernel().cfg.expiry_sweep_page;
        let (records, next) = match self.tl_records_after(after.as_deref(), page) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(node = %self.id(), error = %e, "expiry sweep: scan failed");
                return None;
            }
        };
        let now = self.kernel().clock.now();
        for (key, r) in records {
            // What a mark hides reads as a tombstone of a generation at or before it: only
            // those can still hold a value on disk.
            let hidden = r.is_tombstone()
                && (self.kernel().marks.read().mark_for(&key))
                    .is_some_and(|mark| r.ver.generation <= mark);
            if hidden && let Err(e) = self.tl_prune(&key) {
                tracing::debug!(node = %self.id(), error = %e, "truncation sweep: rewrite failed");
            }
            let Content::Value(v) = &r.content else {
                continue;
            };
            if r.master.node != self.id() || !expired(v, now) {
                continue;
            }
            match self
                .tl_put(&key, Content::Tombstone, Expect::Version(r.ver))
                .await
            {
                // A write won the race: the key is live again.
                Ok(_) | Err(crate::ReplicationError::VersionMismatch { .. }) => {}
                Err(e) => {
                    tracing::debug!(node = %self.id(), error = %e, "expiry sweep: delete failed")
                }
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventual::counter;
    use meridian_core::envelope::Entry;

    #[test]
    fn only_a_passed_expiry_is_expired() {
        let now = Timestamp(1_000);
        let at = |expiry| {
            Entry {
                data: Bytes::from("v"),
                expiry,
                kind: Default::default(),
            }
            .encode()
        };
        assert!(expired(&at(Some(999)), now));
        assert!(
            !expired(&at(Some(1_000)), now),
            "Redis: expired once now > expiry"
        );
        assert!(!expired(&at(None), now));
        let c = counter::Counter::default();
        assert!(expired(&c.encode(Some(5)), now));
        assert!(!expired(&c.encode(None), now));
        assert!(!expired(&Bytes::from_static(b"\x07junk"), now));
        let mut m = map::Map::default();
        m.set_expiry(Some(5), map::Stamp::default());
        assert!(expired(&m.encode(), now));
        m.set_expiry(None, map::Stamp::default());
        assert!(!expired(&m.encode(), now));
    }
}
