//! SpaceSaving (Metwally et al., ICDT 2005): the most frequent keys of a stream in `K`
//! counters, with `count − err ≤ true ≤ count` for every monitored key and every key of
//! frequency above `N/K` monitored; and the mergeable-summary rule a DC's root uses to
//! combine its coordinators' sketches (spec §4).
//!
//! The sketch keeps its counters in a vector with a hash index and finds the minimum by a
//! linear scan on eviction (spec: fine at K ≤ 256); only new keys of a full sketch pay for
//! it. Ties for eviction go to the counter that entered the sketch first, so a run is
//! reproducible whatever the hash seed.
//!
//! A merged summary keeps the per-key bounds, and keeps every key of frequency above
//! `N/K` when the parts' capacities are at least the merged capacity (the coordinators and
//! the root use the same K). Its [`Summary::error_bound`] covers absent keys when the merge
//! is full, which it is whenever one of those parts was.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// One monitored key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// The key.
    pub key: Vec<u8>,
    /// Its count (an overestimate by at most `err`).
    pub count: u64,
    /// The overestimation bound.
    pub err: u64,
}

/// A sketch's content: what a coordinator ships to its root every period.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Monitored keys, highest count first.
    pub counters: Vec<Counter>,
    /// Items observed (N).
    pub total: u64,
    /// The sketch's capacity K.
    pub capacity: usize,
}

impl Summary {
    /// The merge of `parts` (a key missing from a full part gets that part's minimum count
    /// added to both its count and its error), keeping the top `capacity`.
    pub fn merge(parts: &[Summary], capacity: usize) -> Summary {
        // What a key absent from each part may have had there: nothing if the part
        // monitored every key it saw, else up to its minimum count.
        let floors: Vec<u64> = parts.iter().map(Summary::error_bound).collect();
        let floor_sum: u64 = floors.iter().sum();
        let mut merged: BTreeMap<&[u8], (u64, u64)> = BTreeMap::new();
        for (part, &floor) in parts.iter().zip(&floors) {
            for c in &part.counters {
                let e = merged.entry(&c.key).or_insert((floor_sum, floor_sum));
                // The floor was counted for every part; this part has the key itself.
                e.0 = e.0 - floor + c.count;
                e.1 = e.1 - floor + c.err;
            }
        }
        let mut counters: Vec<Counter> = merged
            .into_iter()
            .map(|(key, (count, err))| Counter {
                key: key.to_vec(),
                count,
                err,
            })
            .collect();
        sort_counters(&mut counters);
        counters.truncate(capacity);
        Summary {
            counters,
            total: parts.iter().map(|p| p.total).sum(),
            capacity,
        }
    }

    /// The largest overestimate of any key's count: the minimum count when full, else 0.
    pub fn error_bound(&self) -> u64 {
        if self.counters.len() >= self.capacity {
            self.counters.iter().map(|c| c.count).min().unwrap_or(0)
        } else {
            0
        }
    }
}

/// Highest count first, then by key, so summaries compare and ship deterministically.
fn sort_counters(counters: &mut [Counter]) {
    counters.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
}

#[derive(Debug, Clone)]
struct Slot {
    key: Vec<u8>,
    count: u64,
    err: u64,
    /// When the key entered the sketch (an observation number): older loses eviction ties.
    since: u64,
}

/// A SpaceSaving sketch of capacity K.
#[derive(Debug, Clone)]
pub struct SpaceSaving {
    capacity: usize,
    slots: Vec<Slot>,
    index: HashMap<Vec<u8>, usize>,
    total: u64,
}

impl SpaceSaving {
    /// An empty sketch of `capacity` counters (at least 1).
    pub fn new(capacity: usize) -> SpaceSaving {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            slots: Vec::with_capacity(capacity),
            index: HashMap::with_capacity(capacity),
            total: 0,
        }
    }

    /// Counts one occurrence of `key`.
    pub fn observe(&mut self, key: &[u8]) {
        let now = self.total;
        self.total += 1;
        if let Some(&i) = self.index.get(key) {
            self.slots[i].count += 1;
            return;
        }
        if self.slots.len() < self.capacity {
            self.index.insert(key.to_vec(), self.slots.len());
            self.slots.push(Slot {
                key: key.to_vec(),
                count: 1,
                err: 0,
                since: now,
            });
            return;
        }
        let Some(victim) = (0..self.slots.len()).min_by_key(|&i| {
            let s = &self.slots[i];
            (s.count, s.since)
        }) else {
            return;
        };
        let slot = &mut self.slots[victim];
        self.index.remove(&slot.key);
        let min = slot.count;
        *slot = Slot {
            key: key.to_vec(),
            count: min + 1,
            err: min,
            since: now,
        };
        self.index.insert(key.to_vec(), victim);
    }

    /// Items observed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The current content.
    pub fn summary(&self) -> Summary {
        let mut counters: Vec<Counter> = self
            .slots
            .iter()
            .map(|s| Counter {
                key: s.key.clone(),
                count: s.count,
                err: s.err,
            })
            .collect();
        sort_counters(&mut counters);
        Summary {
            counters,
            total: self.total,
            capacity: self.capacity,
        }
    }

    /// The current content, and the sketch emptied (one period's worth).
    pub fn take(&mut self) -> Summary {
        let s = self.summary();
        self.clear();
        s
    }

    /// Changes the capacity (the DC's size changed); the sketch is emptied.
    pub fn resize(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        self.clear();
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.index.clear();
        self.total = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(stream: &[u8]) -> BTreeMap<Vec<u8>, u64> {
        let mut m = BTreeMap::new();
        for &k in stream {
            *m.entry(vec![k]).or_insert(0) += 1;
        }
        m
    }

    fn sketch(stream: &[u8], k: usize) -> SpaceSaving {
        let mut s = SpaceSaving::new(k);
        for &x in stream {
            s.observe(&[x]);
        }
        s
    }

    /// The SpaceSaving guarantees of `s` against the exact counts of its stream.
    fn check_bounds(s: &Summary, truth: &BTreeMap<Vec<u8>, u64>) -> Result<(), TestCaseError> {
        let n: u64 = truth.values().sum();
        prop_assert_eq!(s.total, n);
        prop_assert!(s.counters.len() <= s.capacity);
        let bound = s.error_bound();
        for c in &s.counters {
            let t = truth.get(&c.key).copied().unwrap_or(0);
            prop_assert!(c.count - c.err <= t && t <= c.count, "{:?} true {}", c, t);
        }
        for (key, &t) in truth {
            let monitored = s.counters.iter().any(|c| &c.key == key);
            if t * s.capacity as u64 > n {
                prop_assert!(monitored, "key {:?} with {} of {} missing", key, t, n);
            }
            if !monitored {
                prop_assert!(
                    t <= bound,
                    "absent key {:?} has {} > bound {}",
                    key,
                    t,
                    bound
                );
            }
        }
        prop_assert!(bound * s.capacity as u64 <= n || s.counters.len() < s.capacity);
        let sorted = s
            .counters
            .windows(2)
            .all(|w| w[0].count > w[1].count || (w[0].count == w[1].count && w[0].key < w[1].key));
        prop_assert!(sorted);
        Ok(())
    }

    /// A skewed stream over a small alphabet: small letters are frequent.
    fn stream() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        proptest::collection::vec((0u8..40, 0u8..40).prop_map(|(a, b)| a.min(b)), 0..600)
    }

    proptest! {
        #[test]
        fn bounds_hold_on_random_streams(s in stream(), k in 1usize..24) {
            check_bounds(&sketch(&s, k).summary(), &exact(&s))?;
        }

        #[test]
        fn merged_summaries_keep_the_bounds(
            parts in proptest::collection::vec((stream(), 1usize..16), 2..=4),
            extra in 0usize..4,
        ) {
            // The root uses the coordinators' K: test that (guarantees on heavy hitters
            // need merged capacity ≤ each part's) and per-key bounds with a smaller one.
            let k = parts.iter().map(|p| p.1).min().unwrap_or(1);
            let sums: Vec<Summary> = parts.iter().map(|(s, k)| sketch(s, *k).summary()).collect();
            let all: Vec<u8> = parts.iter().flat_map(|p| p.0.clone()).collect();
            let truth = exact(&all);
            check_bounds(&Summary::merge(&sums, k), &truth)?;
            let smaller = Summary::merge(&sums, k.saturating_sub(extra).max(1));
            check_bounds(&smaller, &truth)?;
        }
    }

    #[test]
    fn counts_exactly_below_capacity() {
        let s = sketch(b"abcabca", 3).summary();
        assert_eq!(s.total, 7);
        assert_eq!(s.error_bound(), 2);
        let got: Vec<(u8, u64, u64)> = s
            .counters
            .iter()
            .map(|c| (c.key[0], c.count, c.err))
            .collect();
        assert_eq!(got, vec![(b'a', 3, 0), (b'b', 2, 0), (b'c', 2, 0)]);
        assert_eq!(sketch(b"ab", 3).summary().error_bound(), 0);
    }

    #[test]
    fn eviction_takes_the_oldest_of_the_smallest() {
        // a, b, c all count 1; `d` evicts `a` (entered first), then `e` evicts `b`.
        let s = sketch(b"abcde", 3).summary();
        let keys: Vec<(u8, u64, u64)> = s
            .counters
            .iter()
            .map(|c| (c.key[0], c.count, c.err))
            .collect();
        assert_eq!(keys, vec![(b'd', 2, 1), (b'e', 2, 1), (b'c', 1, 0)]);
    }

    #[test]
    fn take_empties_and_resize_clears() {
        let mut s = sketch(b"aab", 4);
        let first = s.take();
        assert_eq!(first.total, 3);
        assert_eq!(s.total(), 0);
        assert!(s.summary().counters.is_empty());
        s.observe(b"x");
        s.resize(0);
        assert_eq!(
            s.summary(),
            Summary {
                counters: vec![],
                total: 0,
                capacity: 1
            }
        );
    }

    #[test]
    fn merge_adds_the_minimum_of_full_parts_only() {
        let full = Summary {
            counters: vec![
                Counter {
                    key: b"a".to_vec(),
                    count: 5,
                    err: 0,
                },
                Counter {
                    key: b"b".to_vec(),
                    count: 3,
                    err: 1,
                },
            ],
            total: 8,
            capacity: 2,
        };
        let partial = Summary {
            counters: vec![Counter {
                key: b"c".to_vec(),
                count: 4,
                err: 0,
            }],
            total: 4,
            capacity: 2,
        };
        let m = Summary::merge(&[full, partial], 3);
        assert_eq!(m.total, 12);
        assert_eq!(m.capacity, 3);
        let got: Vec<(&[u8], u64, u64)> = m
            .counters
            .iter()
            .map(|c| (c.key.as_slice(), c.count, c.err))
            .collect();
        // `c` is missing from the full part: + its minimum 3 to count and err; `a`, `b` are
        // missing from the part that is not full: + 0.
        assert_eq!(
            got,
            vec![(&b"c"[..], 7, 3), (&b"a"[..], 5, 0), (&b"b"[..], 3, 1)]
        );
        assert_eq!(m.error_bound(), 3);
        assert_eq!(
            Summary::merge(&[], 4),
            Summary {
                counters: vec![],
                total: 0,
                capacity: 4
            }
        );
    }
}
