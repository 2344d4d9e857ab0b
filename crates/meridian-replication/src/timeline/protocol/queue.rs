//! A propagation queue to one peer (spec §4): the newest unacknowledged record of each key,
//! oldest key first.
//!
//! Guarantees: a key is queued at most once, with the highest version offered since it was
//! last acknowledged; a newer offer keeps the key's place in line; batches are taken from the
//! front in the order keys first entered, so no key waits behind keys queued after it, and the
//! order never depends on the hash seed (a simulation replays the same batches). Several
//! batches may be in flight: a key is in at most one of them, and a newer record of a key in
//! flight goes in a later batch once that one is answered (a replica keeps the higher version,
//! so batches may arrive in any order). Lookups are hashed (seeded per process, so hostile
//! keys cannot aim at one bucket); every operation is O(log n) or better in the queue's length,
//! plus the in-flight keys a batch skips.

use super::newer;
use crate::timeline::Record;
use bytes::Bytes;
// `records` is only probed, never iterated: the order comes from `order`, so the per-process
// hash seed cannot reach the simulator's replay.
use std::collections::BTreeMap;
#[allow(clippy::disallowed_types)]
use std::collections::HashMap;

#[derive(Debug)]
struct Entry {
    place: u64,
    record: Record,
    in_flight: bool,
}

/// One peer's queue.
#[derive(Debug, Default)]
pub(super) struct KeyQueue {
    /// Each queued key's place in line, record, and whether a batch in flight holds it.
    #[allow(clippy::disallowed_types)]
    records: HashMap<Bytes, Entry, foldhash::quality::RandomState>,
    /// Keys by place in line.
    order: BTreeMap<u64, Bytes>,
    next: u64,
    /// How many queued keys a batch in flight holds.
    in_flight: usize,
}

impl KeyQueue {
    /// Queues `record` for `key` unless a record at least as new is queued already.
    pub(super) fn offer(&mut self, key: &Bytes, record: &Record) {
        match self.records.get_mut(key) {
            Some(e) if !newer(&record.ver, &e.record.ver) => {}
            Some(e) => e.record = record.clone(),
            None => {
                let place = self.next;
                self.next += 1;
                self.order.insert(place, key.clone());
                let record = record.clone();
                let e = Entry {
                    place,
                    record,
                    in_flight: false,
                };
                self.records.insert(key.clone(), e);
            }
        }
    }

    /// The first `n` queued records no batch in flight holds, oldest key first, now marked in
    /// flight (they stay queued until acknowledged).
    pub(super) fn take(&mut self, n: usize) -> Vec<(Bytes, Record)> {
        let mut batch = Vec::new();
        for k in self.order.values() {
            if batch.len() >= n {
                break;
            }
            if let Some(e) = self.records.get_mut(k)
                && !e.in_flight
            {
                e.in_flight = true;
                self.in_flight += 1;
                batch.push((k.clone(), e.record.clone()));
            }
        }
        batch
    }

    /// A batch was answered: `acked` drops each record that is still the queued one; either
    /// way its keys are free for the next batch (a key queued again since, with a newer
    /// record, is sent again).
    pub(super) fn answered(&mut self, batch: &[(Bytes, Record)], acked: bool) {
        for (k, r) in batch {
            let Some(e) = self.records.get_mut(k).filter(|e| e.in_flight) else {
                continue;
            };
            self.in_flight -= 1;
            if acked && e.record.ver == r.ver {
                self.order.remove(&e.place);
                self.records.remove(k);
            } else {
                e.in_flight = false;
            }
        }
    }

    /// Whether a batch could be taken now.
    pub(super) fn has_unsent(&self) -> bool {
        self.records.len() > self.in_flight
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Content, ReplicaRef, Version};
    use meridian_core::{DcId, NodeId};
    use proptest::prelude::*;

    fn rec(seq: u64) -> Record {
        Record {
            content: Content::Value(Bytes::from_static(b"v")),
            ver: Version::new(1, 0, seq),
            master: ReplicaRef {
                node: NodeId(0),
                dc: DcId(0),
            },
            recent: Vec::new(),
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Offer(u8, u64),
        /// Take a batch of this many and keep it in flight.
        Take(u8),
        /// Answer the oldest batch in flight, acknowledged or not.
        Answer(bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u8..12, 0u64..20).prop_map(|(k, v)| Op::Offer(k, v)),
            1 => (0u8..6).prop_map(Op::Take),
            1 => any::<bool>().prop_map(Op::Answer),
        ]
    }

    proptest! {
        /// Against a model: a Vec of (key, newest version, in flight) in order of first entry,
        /// and the batches in flight.
        #[test]
        fn behaves_like_an_ordered_list_of_newest_records(ops in prop::collection::vec(op(), 0..300)) {
            let mut q = KeyQueue::default();
            let mut model: Vec<(u8, u64, bool)> = Vec::new();
            let mut flying: std::collections::VecDeque<Vec<(Bytes, Record)>> = Default::default();
            for o in ops {
                match o {
                    Op::Offer(k, v) => {
                        q.offer(&Bytes::from(vec![k]), &rec(v));
                        match model.iter_mut().find(|m| m.0 == k) {
                            Some(m) => m.1 = m.1.max(v),
                            None => model.push((k, v, false)),
                        }
                    }
                    Op::Take(n) => {
                        let got = q.take(n as usize);
                        let want: Vec<(u8, u64)> = model.iter_mut().filter(|m| !m.2)
                            .take(n as usize).map(|m| { m.2 = true; (m.0, m.1) }).collect();
                        let seen: Vec<(u8, u64)> = got.iter().map(|(k, r)| (k[0], r.ver.seq)).collect();
                        prop_assert_eq!(seen, want);
                        flying.push_back(got);
                    }
                    Op::Answer(acked) => {
                        let Some(batch) = flying.pop_front() else { continue };
                        q.answered(&batch, acked);
                        for (k, r) in &batch {
                            let i = model.iter().position(|m| m.0 == k[0]).unwrap();
                            if acked && model[i].1 == r.ver.seq {
                                model.remove(i);
                            } else {
                                model[i].2 = false;
                            }
                        }
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
                prop_assert_eq!(q.has_unsent(), model.iter().any(|m| !m.2));
            }
        }
    }
}
