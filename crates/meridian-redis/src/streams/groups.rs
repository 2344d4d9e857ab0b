//! Consumer groups: [`ConsumerGroup`] (its last delivered ID, its read counter, its pending
//! entries list) and its [`Consumer`]s, with Redis 7.0's rules for who owns a pending entry.
//!
//! Every pending entry is in the group's list (`pel`, with its owner, last delivery time and
//! delivery count) and in its owner's set (`Consumer::pending`); the functions here keep the
//! two in step, so a consumer's pending count is always the number of group entries it owns.

use super::id::StreamId;
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};

thread_local! {
    /// Whether a consumer was created on this thread since [`take_consumer_created`] (an
    /// XREADGROUP or XCLAIM that created one publishes `xgroup-createconsumer`).
    static CONSUMER_CREATED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a consumer was created on this thread since the last call (which clears it).
pub fn take_consumer_created() -> bool {
    CONSUMER_CREATED.replace(false)
}

/// `entries_read` when unknown (Redis's `SCG_INVALID_ENTRIES_READ`).
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

/// A pending (delivered, not acknowledged) entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// Its owner.
    pub consumer: Bytes,
    /// When it was last delivered (ms since the epoch).
    pub delivery_time: u64,
    /// How many times it was delivered.
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    /// When it last read or claimed (ms since the epoch).
    pub seen_time: u64,
    /// The IDs of the entries it owns.
    pub pending: BTreeSet<StreamId>,
}

/// A consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerGroup {
    /// The last ID delivered to the group.
    pub last_id: StreamId,
    /// The logical read counter, or [`ENTRIES_READ_UNKNOWN`].
    pub entries_read: i64,
    /// The pending entries, by ID.
    pub pel: BTreeMap<StreamId, Nack>,
    /// The consumers, by name.
    pub consumers: BTreeMap<Bytes, Consumer>,
}

impl ConsumerGroup {
    /// A group whose last delivered ID is `last_id`.
    pub fn new(last_id: StreamId, entries_read: i64) -> Self {
        Self {
            last_id,
            entries_read,
            ..Self::default()
        }
    }

    /// Heap bytes, approximately, in O(1) (a write recomputes it).
    pub fn memory(&self) -> usize {
        64 + self.pel.len() * 96 + self.consumers.len() * 128
    }

    /// The consumer `name`, created (seen now) if absent; its seen time refreshed.
    pub fn consumer(&mut self, name: &[u8], now_ms: u64) -> &mut Consumer {
        let c = self
            .consumers
            .entry(Bytes::copy_from_slice(name))
            .or_insert_with(|| {
                CONSUMER_CREATED.set(true);
                Consumer::default()
            });
        c.seen_time = now_ms;
        c
    }

    /// Creates the consumer `name` if absent; true if it was created.
    pub fn create_consumer(&mut self, name: &[u8], now_ms: u64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        self.consumers.insert(
            Bytes::copy_from_slice(name),
            Consumer {
                seen_time: now_ms,
                pending: BTreeSet::new(),
            },
        );
        true
    }

    /// Deletes the consumer `name` and its pending entries; answers how many it owned.
    pub fn delete_consumer(&mut self, name: &[u8]) -> usize {
        let Some(c) = self.consumers.remove(name) else {
            return 0;
        };
        for id in &c.pending {
            self.pel.remove(id);
        }
        c.pending.len()
    }

    /// Acknowledges `id`; true if it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        let Some(nack) = self.pel.remove(&id) else {
            return false;
        };
        if let Some(c) = self.consumers.get_mut(&nack.consumer) {
            c.pending.remove(&id);
        }
        true
    }

    /// Gives `id` to `consumer` (which must exist) as delivered now: a new pending entry
    /// with one delivery, or an existing one moved to it with its count reset to one (as
    /// XREADGROUP does after XGROUP SETID re-delivers an entry).
    pub fn deliver(&mut self, id: StreamId, consumer: &Bytes, now_ms: u64) {
        let nack = Nack {
            consumer: consumer.clone(),
            delivery_time: now_ms,
            delivery_count: 1,
        };
        if let Some(old) = self.pel.insert(id, nack)
            && old.consumer != *consumer
            && let Some(c) = self.consumers.get_mut(&old.consumer)
        {
            c.pending.remove(&id);
        }
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pending.insert(id);
        }
    }

    /// Moves the pending entry `id` to `consumer` (which must exist) if another owns it.
    pub fn reassign(&mut self, id: StreamId, consumer: &Bytes) {
        let Some(nack) = self.pel.get_mut(&id) else {
            return;
        };
        if nack.consumer != *consumer {
            let old = std::mem::replace(&mut nack.consumer, consumer.clone());
            if let Some(c) = self.consumers.get_mut(&old) {
                c.pending.remove(&id);
            }
        }
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pending.insert(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pending entry is owned by exactly the consumer its nack names.
    fn consistent(g: &ConsumerGroup) -> bool {
        let owned: usize = g.consumers.values().map(|c| c.pending.len()).sum();
        owned == g.pel.len()
            && g.pel.iter().all(|(id, n)| {
                g.consumers
                    .get(&n.consumer)
                    .is_some_and(|c| c.pending.contains(id))
            })
    }

    #[test]
    fn deliveries_acks_and_reassignments_keep_both_lists_in_step() {
        let mut g = ConsumerGroup::new(StreamId::MIN, 0);
        let (a, b) = (Bytes::from_static(b"a"), Bytes::from_static(b"b"));
        g.consumer(&a, 1);
        g.consumer(&b, 1);
        for ms in 1..=5 {
            g.deliver(StreamId::new(ms, 0), &a, 10);
        }
        g.deliver(StreamId::new(2, 0), &b, 11);
        g.reassign(StreamId::new(3, 0), &b);
        assert!(consistent(&g));
        assert_eq!(g.consumers[&a].pending.len(), 3);
        assert!(g.ack(StreamId::new(2, 0)));
        assert!(!g.ack(StreamId::new(2, 0)));
        assert_eq!(g.delete_consumer(&b), 1);
        assert!(consistent(&g));
        assert_eq!(g.pel.len(), 3);
    }
}
