//! The counter a Redis `INCR` keeps on an eventual bucket: a PN-counter CRDT per key, as
//! Riak's counters are, so increments made concurrently at replicas in different DCs are
//! merged, never lost to last-writer-wins.
//!
//! **State.** Per actor (the node that coordinated the increments) the total added (`p`)
//! and the total subtracted (`n`), both only growing, plus a base: the integer of the plain
//! value the counter started from (`SET n 10` then `INCR n`), named by `base_id`, a hash of
//! the dot of the sibling it replaced (0 for a key that never had one). The counter's value
//! is `base + Σp − Σn`.
//!
//! **Merge** is per actor maximum when both states share a base, and the state with the
//! greater `base_id` otherwise (a counter restarted over a newer value supersedes the older
//! one). It is commutative, associative and idempotent, so any order of replication, read
//! repair and anti-entropy gives the same value.
//!
//! **Why no increment is lost.** An actor's entry changes only at that actor, under the
//! key's lock in its own store ([`crate::object_store::ObjectStore::coordinator_update`]),
//! from its own last state: a later increment at the same actor always sees the earlier
//! one. Two actors' entries never overwrite each other, and siblings written concurrently
//! are merged by every reader ([`resolve`]).
//!
//! **Stored** in the value envelope with flag `0x02` (and `0x01` when it has an expiry):
//! `[flags][expiry µs BE if 0x01][postcard state]`. Plain envelopes never set `0x02`, so a
//! reader tells them apart by the first byte. The same [`Counter`] also counts a field of a
//! Redis hash ([`super::map`], `HINCRBY`), embedded in the map's state, and the map's stored
//! form is this envelope with `0x04` (hash) added ([`crdt_envelope`], [`open_crdt`]).
//!
//! **What a key shows** ([`resolve`], [`show`]): the type of the sibling last-writer-wins
//! keeps. A counter shows every counter sibling merged, a map every map sibling merged
//! ([`super::map`]), a plain value itself.

use super::shared::{crdt_envelope, dot_id, lww_sibling, open_crdt};
pub use super::types::IncrError;
use super::{elements, map, registers, sequence};
use crate::error::ReplicationError;
use bytes::Bytes;
use meridian_cluster::dvv::{Content, Dot, Object};
use meridian_core::Timestamp;
use meridian_core::envelope::{Entry, FLAG_CRDT, FLAG_HASH, Kind, TYPE_BITS};
use meridian_core::int::parse_i64;
use serde::{Deserialize, Serialize};

/// A PN-counter's state. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// Names the plain value the counter started from (0: none).
    base_id: u64,
    /// That value's integer.
    base: i64,
    /// `(actor, added, subtracted)`, sorted by actor (a node id).
    entries: Vec<(u32, u64, u64)>,
}

impl Counter {
    /// A counter at `base`, with no base id: what a hash field's counter starts from (the
    /// map names the register it continues, [`super::map`]).
    pub(crate) fn starting_at(base: i64) -> Counter {
        Counter {
            base,
            ..Counter::default()
        }
    }

    /// The counter's value (saturating: [`Counter::add`] keeps it in range).
    pub fn value(&self) -> i64 {
        let sum = self.entries.iter().fold(i128::from(self.base), |s, e| {
            s + i128::from(e.1) - i128::from(e.2)
        });
        sum.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Adds `delta` to `actor`'s entry, as Redis's INCRBY: refused when the value would
    /// leave the 64-bit range.
    pub fn add(&mut self, actor: u32, delta: i64) -> Result<i64, IncrError> {
        let next = self.value().checked_add(delta).ok_or(IncrError::Overflow)?;
        let at = match self.entries.binary_search_by_key(&actor, |e| e.0) {
            Ok(i) => i,
            Err(i) => {
                self.entries.insert(i, (actor, 0, 0));
                i
            }
        };
        let e = &mut self.entries[at];
        let grown = if delta >= 0 {
            e.1.checked_add(delta.unsigned_abs()).map(|p| e.1 = p)
        } else {
            e.2.checked_add(delta.unsigned_abs()).map(|n| e.2 = n)
        };
        grown.ok_or(IncrError::Overflow)?;
        Ok(next)
    }

    /// The join of two states (see the module docs).
    pub fn merge(&self, other: &Counter) -> Counter {
        if self.base_id != other.base_id {
            return if self.base_id > other.base_id {
                self.clone()
            } else {
                other.clone()
            };
        }
        // Both lists are sorted by actor: one pass over the two.
        let (a, b) = (&self.entries, &other.entries);
        let (mut i, mut j) = (0, 0);
        let mut entries = Vec::with_capacity(a.len().max(b.len()));
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(x), Some(y)) if x.0 == y.0 => {
                    entries.push((x.0, x.1.max(y.1), x.2.max(y.2)));
                    i += 1;
                    j += 1;
                }
                (Some(x), Some(y)) if x.0 < y.0 => {
                    entries.push(*x);
                    i += 1;
                }
                (Some(x), None) => {
                    entries.push(*x);
                    i += 1;
                }
                (_, Some(y)) => {
                    entries.push(*y);
                    j += 1;
                }
                (None, None) => break,
            }
        }
        Counter {
            base_id: self.base_id,
            // One base_id names one value; the max keeps the join total on damaged states.
            base: self.base.max(other.base),
            entries,
        }
    }

    /// Its stored bytes, with an expiry.
    pub fn encode(&self, expiry: Option<u64>) -> Bytes {
        crdt_envelope(0, expiry, &postcard::to_allocvec(self).unwrap_or_default())
    }

    /// A stored counter and its expiry; `None` when `raw` is no counter (or is damaged).
    pub fn decode(raw: &[u8]) -> Option<(Counter, Option<u64>)> {
        let (expiry, state) = open_crdt(raw, 0)?;
        Some((postcard::from_bytes(state).ok()?, expiry))
    }
}

/// Whether stored bytes are a counter (one byte looked at).
pub fn is_counter(raw: &[u8]) -> bool {
    raw.first()
        .is_some_and(|f| f & (FLAG_CRDT | FLAG_HASH | TYPE_BITS) == FLAG_CRDT)
}

/// A counter shown as Redis shows an integer value: its decimal text.
fn as_entry(c: &Counter, expiry: Option<u64>) -> Entry {
    Entry {
        data: Bytes::from(c.value().to_string()),
        expiry,
        kind: Default::default(),
    }
}

/// The one live entry the Redis view shows for an eventual key's `values` (siblings), of
/// which `latest` is the one last-writer-wins keeps: that sibling, out of its envelope —
/// or, when it is a counter, every counter sibling merged, with its expiry; when it is a map,
/// every map sibling merged into one hash (`None` when it has no field).
pub fn resolve(values: &[Bytes], latest: usize, now: Timestamp) -> Option<Entry> {
    let shown = values.get(latest)?;
    if map::is_map(shown) {
        return map::merge_all(values.iter().map(|v| &v[..]))?.live_entry(now);
    }
    if elements::is_elements(shown) {
        return elements::merge_all(values.iter().map(|v| &v[..]))?.live_entry(now);
    }
    if registers::is_registers(shown) {
        return registers::merge_all(values.iter().map(|v| &v[..]))?.live_entry(now);
    }
    if sequence::is_sequence(shown) {
        return sequence::merge_all(values.iter().map(|v| &v[..]))?.live_entry(now);
    }
    if !is_counter(shown) {
        return Entry::live(Some(shown.clone()), now);
    }
    let (_, expiry) = Counter::decode(shown)?;
    let merged = merge_all(values.iter().map(|v| &v[..]))?;
    let e = as_entry(&merged, expiry);
    (!e.is_expired(now)).then_some(e)
}

/// The merged counter the Redis view shows for `values` when their `latest` is a counter.
pub fn shown_counter(values: &[Bytes], latest: usize) -> Option<Counter> {
    values
        .get(latest)
        .filter(|v| is_counter(v))
        .and_then(|_| merge_all(values.iter().map(|v| &v[..])))
}

/// Every counter among `values` merged (`None`: there is none).
fn merge_all<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Counter> {
    values
        .filter_map(Counter::decode)
        .map(|(c, _)| c)
        .reduce(|a, b| a.merge(&b))
}

/// `values` as a full read shows them: plain siblings out of their envelopes, the counter
/// siblings merged into one integer, the map siblings merged into one hash (its
/// [`meridian_core::hash`] data; left out when it has no field), expired ones left out; and
/// the index of the one GET shows when `latest` is live.
pub fn show(values: Vec<Bytes>, latest: usize, now: Timestamp) -> (Vec<Bytes>, Option<usize>) {
    let hash = map::merge_all(values.iter().map(|v| &v[..])).and_then(|m| m.live_entry(now));
    let latest_is_map = values.get(latest).is_some_and(|v| map::is_map(v));
    let collection =
        elements::merge_all(values.iter().map(|v| &v[..])).and_then(|e| e.live_entry(now));
    let latest_is_collection = values.get(latest).is_some_and(|v| elements::is_elements(v));
    let hll = registers::merge_all(values.iter().map(|v| &v[..])).and_then(|r| r.live_entry(now));
    let latest_is_hll = values
        .get(latest)
        .is_some_and(|v| registers::is_registers(v));
    let list = sequence::merge_all(values.iter().map(|v| &v[..])).and_then(|s| s.live_entry(now));
    let latest_is_list = values.get(latest).is_some_and(|v| sequence::is_sequence(v));
    let counter = values
        .iter()
        .find(|v| is_counter(v))
        .and_then(|v| Counter::decode(v))
        .and_then(|(_, expiry)| {
            let c = merge_all(values.iter().map(|v| &v[..]))?;
            Some(as_entry(&c, expiry)).filter(|e| !e.is_expired(now))
        });
    let latest_is_counter = values.get(latest).is_some_and(|v| is_counter(v));
    let mut live = Vec::with_capacity(values.len());
    let mut shown = None;
    for (i, raw) in values.into_iter().enumerate() {
        if is_counter(&raw) || crdt_live(&raw, None, now).is_some() {
            continue;
        }
        if let Some(e) = Entry::live(Some(raw), now) {
            if i == latest {
                shown = Some(live.len());
            }
            live.push(e.data);
        }
    }
    if let Some(c) = counter {
        if latest_is_counter {
            shown = Some(live.len());
        }
        live.push(c.data);
    }
    let merged = [
        (hash, latest_is_map),
        (collection, latest_is_collection),
        (hll, latest_is_hll),
        (list, latest_is_list),
    ];
    for (merged, latest_is_it) in merged {
        if let Some(e) = merged {
            if latest_is_it {
                shown = Some(live.len());
            }
            live.push(e.data);
        }
    }
    (live, shown)
}

/// Whether the CRDT a sibling's value `v` is — a counter, a map, a set or sorted set, an
/// HLL — shows a live value at `now`, its siblings in `local` merged; `None` when `v` is
/// no CRDT. What a CRDT of another kind continuing the key asks before it answers
/// `wrong_type`.
pub(crate) fn crdt_live(v: &[u8], local: Option<&Object>, now: Timestamp) -> Option<bool> {
    let values = || local.into_iter().flat_map(|o| o.values()).map(|v| &v[..]);
    Some(if map::is_map(v) {
        map::merge_all(values()).is_some_and(|m| m.live_entry(now).is_some())
    } else if elements::is_elements(v) {
        elements::merge_all(values()).is_some_and(|e| e.live_entry(now).is_some())
    } else if registers::is_registers(v) {
        registers::merge_all(values()).is_some_and(|r| r.live_entry(now).is_some())
    } else if sequence::is_sequence(v) {
        sequence::merge_all(values()).is_some_and(|s| s.live_entry(now).is_some())
    } else if is_counter(v) {
        Counter::decode(v).is_some_and(|(_, e)| e.is_none_or(|e| now.0 <= e))
    } else {
        return None;
    })
}

/// The content an increment by `delta` at `actor` writes over `local` (this replica's
/// object, read under the key's lock), and the counter's new value. The counter keeps the
/// expiry of the value it continues, as Redis's INCR keeps a TTL.
///
/// # Errors
/// `wrong_type` when the key shows a hash; Redis's increment errors ([`IncrError`]).
pub fn increment(
    local: Option<&Object>,
    actor: u32,
    delta: i64,
    now: Timestamp,
) -> Result<(Content, i64), ReplicationError> {
    let latest = local.and_then(lww_sibling);
    let (mut counter, expiry) = match latest.map(|s| (&s.content, s.dot)) {
        Some((Content::Value(v), dot)) if !is_counter(v) && crdt_live(v, local, now).is_some() => {
            if crdt_live(v, local, now) == Some(true) {
                // An HLL is a string to Redis, not an integer.
                return Err(if registers::is_registers(v) {
                    ReplicationError::Incr(IncrError::NotAnInteger)
                } else {
                    ReplicationError::WrongType
                });
            }
            // An expired or empty hash is no value: start again, over it.
            (fresh(Some(dot)), None)
        }
        Some((Content::Value(v), _)) if is_counter(v) => match Counter::decode(v) {
            Some((_, expiry)) if expiry.is_none_or(|at| now.0 <= at) => {
                let values = local.into_iter().flat_map(|o| o.values()).map(|v| &v[..]);
                (merge_all(values).unwrap_or_default(), expiry)
            }
            // An expired counter: start again, over it.
            _ => (fresh(latest.map(|s| s.dot)), None),
        },
        Some((Content::Value(v), dot)) => match Entry::live(Some(v.clone()), now) {
            Some(e) if e.kind == Kind::Hash => return Err(ReplicationError::WrongType),
            Some(e) => {
                let base =
                    parse_i64(&e.data).ok_or(ReplicationError::Incr(IncrError::NotAnInteger))?;
                let mut c = fresh(Some(dot));
                c.base = base;
                (c, e.expiry)
            }
            None => (fresh(Some(dot)), None),
        },
        Some((Content::Tombstone, dot)) => (fresh(Some(dot)), None),
        None => (Counter::default(), None),
    };
    let value = counter.add(actor, delta).map_err(ReplicationError::Incr)?;
    Ok((Content::Value(counter.encode(expiry)), value))
}

/// A counter at zero started over the sibling with `dot`.
fn fresh(dot: Option<Dot>) -> Counter {
    Counter {
        base_id: dot.as_ref().map_or(0, dot_id),
        ..Counter::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use meridian_cluster::dvv::{Clock, Meta, ReplicaId};
    use meridian_core::{NodeId, PartitionId};
    use proptest::prelude::*;

    fn counter(base_id: u64, base: i64, entries: &[(u32, u64, u64)]) -> Counter {
        Counter {
            base_id,
            base,
            entries: entries.to_vec(),
        }
    }

    #[test]
    fn adds_per_actor_and_refuses_overflow() {
        let mut c = Counter::default();
        assert_eq!(c.add(1, 5), Ok(5));
        assert_eq!(c.add(2, -7), Ok(-2));
        assert_eq!(c.add(1, 1), Ok(-1));
        assert_eq!(c.entries, vec![(1, 6, 0), (2, 0, 7)]);
        let mut big = counter(0, i64::MAX - 1, &[]);
        assert_eq!(big.add(1, 1), Ok(i64::MAX));
        assert_eq!(big.add(1, 1), Err(IncrError::Overflow));
        assert_eq!(big.value(), i64::MAX, "a refused increment changes nothing");
        let mut low = counter(0, i64::MIN, &[]);
        assert_eq!(low.add(3, -1), Err(IncrError::Overflow));
    }

    #[test]
    fn round_trips_with_and_without_expiry_and_rejects_plain_values() {
        let c = counter(9, -3, &[(1, 2, 0), (4, 0, 1)]);
        assert_eq!(Counter::decode(&c.encode(None)), Some((c.clone(), None)));
        assert_eq!(
            Counter::decode(&c.encode(Some(77))),
            Some((c.clone(), Some(77)))
        );
        assert!(is_counter(&c.encode(None)));
        let plain = Entry::new(Bytes::from("5")).encode();
        assert!(!is_counter(&plain));
        assert_eq!(Counter::decode(&plain), None);
        assert_eq!(
            Counter::decode(&[FLAG_CRDT | meridian_core::envelope::FLAG_EXPIRY, 0, 0]),
            None
        );
        // Sets, sorted sets and HLLs are CRDTs of their own type bits: never counters.
        for bits in [0x08, 0x10, 0x18, 0x28] {
            assert!(!is_counter(&[FLAG_CRDT | bits]), "{bits:#x}");
        }
        assert!(
            elements::is_elements(&[FLAG_CRDT | 0x10])
                && registers::is_registers(&[FLAG_CRDT | 0x28])
        );
        assert_eq!(Counter::decode(&[0x06]), None);
        assert!(
            Entry::decode(c.encode(None)).is_err(),
            "plain readers never mistake a counter for a string"
        );
    }

    fn arb_counter() -> impl Strategy<Value = Counter> {
        (
            0u64..3,
            -5i64..5,
            proptest::collection::btree_map(0u32..5, (0u64..9, 0u64..9), 0..4),
        )
            .prop_map(|(base_id, base, m)| Counter {
                base_id,
                // A base_id names one value.
                base: if base_id == 0 { 0 } else { base },
                entries: m.into_iter().map(|(a, (p, n))| (a, p, n)).collect(),
            })
    }

    proptest! {
        /// The merge is a join: commutative, associative, idempotent.
        #[test]
        fn merge_is_a_join(a in arb_counter(), b in arb_counter(), c in arb_counter()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
            prop_assert_eq!(a.merge(&a), a.clone());
        }

        /// Increments at different actors from a shared state all survive the merge.
        #[test]
        fn concurrent_increments_at_different_actors_all_count(
            start in arb_counter(),
            deltas in proptest::collection::vec((0u32..5, -9i64..9), 1..12),
        ) {
            let mut replicas: Vec<Counter> = (0..5).map(|_| start.clone()).collect();
            let mut want = start.value();
            for (actor, d) in &deltas {
                replicas[*actor as usize].add(*actor, *d).unwrap();
                want += d;
            }
            let merged = replicas.iter().fold(start.clone(), |m, r| m.merge(r));
            prop_assert_eq!(merged.value(), want);
        }
    }

    pub(crate) fn rid(node: u32) -> ReplicaId {
        ReplicaId {
            partition: PartitionId(0),
            node: NodeId(node),
            incarnation: 0,
            epoch: 0,
        }
    }

    /// An object holding `contents`, each written by its own replica at its own time.
    pub(crate) fn object(contents: Vec<(Content, u64)>) -> Object {
        contents
            .into_iter()
            .enumerate()
            .fold(Object::default(), |o, (i, (content, ts_us))| {
                let other = meridian_cluster::dvv::coordinator_put_above(
                    None,
                    &Clock::default(),
                    content,
                    Meta { ts_us },
                    rid(i as u32 + 1),
                    0,
                )
                .unwrap();
                meridian_cluster::dvv::merge(&o, &other)
            })
    }

    fn value(o: &Object, now: Timestamp) -> Option<Entry> {
        let values: Vec<Bytes> = o.values().cloned().collect();
        let latest = values.len().checked_sub(1)?;
        resolve(&values, latest, now)
    }

    #[test]
    fn increments_continue_an_integer_a_counter_or_nothing_and_refuse_text() {
        let now = Timestamp(1_000);
        let plain = |s: &str| Content::Value(Entry::new(Bytes::from(s.to_owned())).encode());
        // Nothing: starts at 0.
        let (c, v) = increment(None, 1, 3, now).unwrap();
        assert_eq!(v, 3);
        // Over an integer: continues it.
        let o = object(vec![(plain("10"), 5)]);
        assert_eq!(increment(Some(&o), 1, 1, now).unwrap().1, 11);
        // Over text: Redis's error.
        let o = object(vec![(plain("ten"), 5)]);
        assert_eq!(
            increment(Some(&o), 1, 1, now),
            Err(ReplicationError::Incr(IncrError::NotAnInteger))
        );
        let o = object(vec![(plain(" 1"), 5)]);
        assert_eq!(
            increment(Some(&o), 1, 1, now),
            Err(ReplicationError::Incr(IncrError::NotAnInteger))
        );
        // Over two concurrent counters (siblings): both merged, then incremented.
        let Content::Value(a) = c else { panic!() };
        let (b, _) = increment(None, 2, 4, now).unwrap();
        let Content::Value(b) = b else { panic!() };
        let o = object(vec![(Content::Value(a), 6), (Content::Value(b), 7)]);
        assert_eq!(value(&o, now).unwrap().data, Bytes::from("7"));
        assert_eq!(increment(Some(&o), 1, 1, now).unwrap().1, 8);
        // A tombstone newer than the counter: starts again from 0.
        let o = object(vec![(plain("5"), 5), (Content::Tombstone, 9)]);
        assert_eq!(increment(Some(&o), 1, 2, now).unwrap().1, 2);
    }

    #[test]
    fn a_counter_keeps_the_ttl_it_continues_and_expires_with_it() {
        let with_ttl = Entry {
            data: Bytes::from("41"),
            expiry: Some(2_000),
            kind: Default::default(),
        };
        let o = object(vec![(Content::Value(with_ttl.encode()), 5)]);
        let (c, v) = increment(Some(&o), 1, 1, Timestamp(1_000)).unwrap();
        assert_eq!(v, 42);
        let Content::Value(raw) = c else { panic!() };
        assert_eq!(Counter::decode(&raw).unwrap().1, Some(2_000));
        let o = object(vec![(Content::Value(raw), 6)]);
        assert_eq!(value(&o, Timestamp(1_500)).unwrap().data, Bytes::from("42"));
        assert_eq!(value(&o, Timestamp(2_001)), None);
        // Incremented after it expired: a new counter, without the old TTL.
        assert_eq!(increment(Some(&o), 1, 1, Timestamp(3_000)).unwrap().1, 1);
    }

    #[test]
    fn a_full_read_shows_plain_siblings_and_one_merged_counter() {
        let now = Timestamp(1_000);
        let a = counter(0, 0, &[(1, 2, 0)]).encode(None);
        let b = counter(0, 0, &[(2, 3, 0)]).encode(None);
        let p = Entry::new(Bytes::from("x")).encode();
        let (shown, latest) = show(vec![a.clone(), p.clone(), b.clone()], 2, now);
        assert_eq!(shown, vec![Bytes::from("x"), Bytes::from("5")]);
        assert_eq!(latest, Some(1));
        let (_, latest) = show(vec![a, p, b], 1, now);
        assert_eq!(latest, Some(0));
    }
}
