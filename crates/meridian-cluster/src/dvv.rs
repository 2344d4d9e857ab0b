//! Causal contexts: dotted version vector sets (spec §7).
//!
//! An [`Object`] is a [`Clock`] (every write it has seen, summarised as one counter per
//! [`ReplicaId`]) plus its live [`Sibling`]s, each tagged with the [`Dot`] of the write that
//! made it. Clients get the clock as an opaque context ([`Clock::encode`]) and send it back
//! with their next write.
//!
//! Guarantees:
//! - [`coordinator_put`] supersedes exactly the local siblings the context covers, and
//!   issues a dot `me`-counter strictly greater than any `me`-counter in the local object or
//!   the (accepted) context, so a replica never reuses a dot (as long as its incarnation changes when its
//!   storage is wiped);
//! - [`merge`] is commutative, associative and idempotent, keeps every sibling the other
//!   side's clock does not cover, and never invents one (property tests);
//! - objects are canonical: siblings sorted by dot, no two with the same dot, so equal
//!   states compare equal and encode identically;
//! - [`Clock::decode`] accepts exactly what [`Clock::encode`] produces (canonical order,
//!   minimal varints, no zero counters, no trailing bytes) and reports anything else as a
//!   [`ContextError`]; it never panics and never allocates more than the input's size.
//!
//! ## Client contexts (hostile input)
//!
//! A context comes from a client, so it may claim anything. Joining a claim into an
//! object's clock that no replica has issued yet is not harmless: a clock entry `r ↦ n`
//! says "every write `r` coordinates up to `n` is seen", so a later real write of `r` with
//! a counter `≤ n` would be dropped as covered on every replica — an acknowledged write
//! lost (and a counter near `u64::MAX` wrapped the next dot to 0). [`coordinator_put_above`]
//! therefore takes only what the coordinator can vouch for ([`vouched_context`]):
//! - its **own** entry: the coordinator knows exactly what it has issued for the key (its
//!   copy's clock entry, or the dot floor of a forgotten key), so a higher claim is forged
//!   and is refused ([`ContextError::ClaimsUnissued`]);
//! - **other replicas'** entries: the coordinator cannot know what they have issued, only
//!   what its own copy has seen, which they did issue. Each entry is capped there. A
//!   legitimate context read from a more up-to-date replica (an R=all read merges
//!   replicas) can be ahead of the coordinator's copy; refusing it would fail honest
//!   clients, so it is capped instead: the write still supersedes every sibling the
//!   coordinator holds that the client saw, and a sibling the coordinator has not seen yet
//!   survives as a concurrent sibling (a visible conflict, never a loss). The eventual
//!   coordinator first pulls the key from the other replicas when the context is ahead
//!   ([`vouches_for_others`]), so in the common case nothing is capped.
//!
//! Hence a coordinated object's clock never exceeds what some replica has issued, and the
//! new dot's counter is computed with a checked add ([`ContextError::CountersExhausted`]).
//!
//! Choices: the encoding is a hand-written format (`0x01`, LEB128 count, then per entry
//! LEB128 partition, node, incarnation, counter), no extra dependency; an empty byte string
//! decodes to the empty clock (a blind write). Coordinator time (`Meta::ts_us`) is passed in
//! by the caller, who reads it from its `meridian_core::Clock`. LWW ([`lww`]) keeps
//! `max_by(ts_us, dot)` and the full clock. Siblings are identified by their dot (a dot
//! names one write, so two siblings with the same dot carry the same value).

use crate::error::ContextError;
use bytes::Bytes;
use meridian_core::{NodeId, PartitionId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Who issues dots: one storage incarnation of one node's replica of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ReplicaId {
    /// The partition.
    pub partition: PartitionId,
    /// The node holding the replica.
    pub node: NodeId,
    /// Bumped when the replica's storage is wiped, so old dots are never reissued.
    pub incarnation: u32,
    /// The layout epoch in which the node took the partition back after handing it off
    /// (and deleting its copy) earlier in the same incarnation; 0 otherwise. Like
    /// `incarnation`, it keeps a replica whose storage was emptied from reissuing dots.
    pub epoch: u64,
}

/// One write's identity: the `counter`-th write coordinated by `replica`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Dot {
    /// The coordinating replica.
    pub replica: ReplicaId,
    /// Its write counter, from 1.
    pub counter: u64,
}

/// A version vector: for each replica, the highest counter seen (absent = 0).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Clock(BTreeMap<ReplicaId, u64>);

impl Clock {
    /// The empty clock (no writes seen).
    pub fn new() -> Clock {
        Clock::default()
    }

    /// The counter for `r` (0 if absent).
    pub fn get(&self, r: ReplicaId) -> u64 {
        self.0.get(&r).copied().unwrap_or(0)
    }

    /// Whether the write `dot` is summarised by this clock.
    pub fn covers(&self, dot: Dot) -> bool {
        self.get(dot.replica) >= dot.counter
    }

    /// Pointwise max with `other`.
    pub fn join(&mut self, other: &Clock) {
        for (&r, &n) in &other.0 {
            let e = self.0.entry(r).or_insert(0);
            *e = (*e).max(n);
        }
    }

    /// Whether `self ≥ other` pointwise.
    pub fn descends(&self, other: &Clock) -> bool {
        other.0.iter().all(|(&r, &n)| self.get(r) >= n)
    }

    /// Entries, in replica order.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, u64)> + '_ {
        self.0.iter().map(|(&r, &n)| (r, n))
    }

    /// This clock with `r`'s entry set to `n` (removed when 0): builds contexts, including
    /// forged ones for tests and the simulator. A client context is only ever trusted
    /// through [`vouched_context`].
    pub fn with_entry(mut self, r: ReplicaId, n: u64) -> Clock {
        self.0.remove(&r);
        self.set(r, n);
        self
    }

    /// Number of replicas with a non-zero counter.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no write has been seen.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn set(&mut self, r: ReplicaId, n: u64) {
        if n > 0 {
            self.0.insert(r, n);
        }
    }

    /// The opaque client context.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![CONTEXT_VERSION];
        put_varint(&mut out, self.0.len() as u64);
        for (r, &n) in &self.0 {
            put_varint(&mut out, r.partition.0.into());
            put_varint(&mut out, r.node.0.into());
            put_varint(&mut out, r.incarnation.into());
            put_varint(&mut out, r.epoch);
            put_varint(&mut out, n);
        }
        out
    }

    /// Parses a client context; empty input is the empty clock.
    pub fn decode(bytes: &[u8]) -> Result<Clock, ContextError> {
        if bytes.is_empty() {
            return Ok(Clock::new());
        }
        if bytes[0] != CONTEXT_VERSION {
            return Err(ContextError::UnknownVersion(bytes[0]));
        }
        let mut cur = &bytes[1..];
        let count = get_varint(&mut cur)?;
        // Every entry takes at least 5 bytes: refuse counts the input cannot hold.
        if count > (cur.len() / 5) as u64 {
            return Err(ContextError::Truncated);
        }
        let mut map = BTreeMap::new();
        let mut last: Option<ReplicaId> = None;
        for _ in 0..count {
            let r = ReplicaId {
                partition: PartitionId(get_u32(&mut cur)?),
                node: NodeId(get_u32(&mut cur)?),
                incarnation: get_u32(&mut cur)?,
                epoch: get_varint(&mut cur)?,
            };
            let n = get_varint(&mut cur)?;
            if n == 0 || last.is_some_and(|l| l >= r) {
                return Err(ContextError::NotCanonical);
            }
            last = Some(r);
            map.insert(r, n);
        }
        if !cur.is_empty() {
            return Err(ContextError::TrailingBytes(cur.len()));
        }
        Ok(Clock(map))
    }
}

const CONTEXT_VERSION: u8 = 2;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(cur: &mut &[u8]) -> Result<u64, ContextError> {
    let mut v: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = cur.split_first().ok_or(ContextError::Truncated)?;
        *cur = rest;
        if i == 9 && b > 1 {
            return Err(ContextError::VarintOverflow);
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(ContextError::NotCanonical);
            }
            return Ok(v);
        }
    }
    Err(ContextError::VarintOverflow)
}

fn get_u32(cur: &mut &[u8]) -> Result<u32, ContextError> {
    u32::try_from(get_varint(cur)?).map_err(|_| ContextError::VarintOverflow)
}

/// A sibling's payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Content {
    /// A value.
    Value(Bytes),
    /// A delete marker.
    Tombstone,
}

/// Metadata written with a sibling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Meta {
    /// The coordinator's physical time of the write, microseconds (used by LWW).
    pub ts_us: u64,
}

/// One concurrent version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sibling {
    /// The write that made it.
    pub dot: Dot,
    /// Value or tombstone.
    pub content: Content,
    /// Its metadata.
    pub meta: Meta,
}

/// A key's replicated state: causal history plus live siblings (sorted by dot).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Object {
    clock: Clock,
    siblings: Vec<Sibling>,
}

impl Object {
    /// The causal history (what a GET returns as context).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The live siblings, sorted by dot.
    pub fn siblings(&self) -> &[Sibling] {
        &self.siblings
    }

    /// The live values (tombstones skipped), in dot order.
    pub fn values(&self) -> impl Iterator<Item = &Bytes> {
        self.siblings.iter().filter_map(|s| match &s.content {
            Content::Value(v) => Some(v),
            Content::Tombstone => None,
        })
    }

    /// Whether every sibling is a tombstone (including no sibling at all): GET replies
    /// notfound for such an object.
    pub fn is_tombstone_only(&self) -> bool {
        self.siblings
            .iter()
            .all(|s| s.content == Content::Tombstone)
    }
}

/// A client write at replica `me`: drop the siblings `ctx` covers, issue a fresh dot,
/// add the new sibling (`Content::Tombstone` for a delete). `ctx` is first checked and
/// capped by [`vouched_context`].
pub fn coordinator_put(
    local: Option<Object>,
    ctx: &Clock,
    content: Content,
    meta: Meta,
    me: ReplicaId,
) -> Result<Object, ContextError> {
    coordinator_put_above(local, ctx, content, meta, me, 0)
}

/// [`coordinator_put`] with the new dot's counter also above `floor`: the highest `me`
/// counter of any object this replica has forgotten (a reaped tombstone), whose dots other
/// replicas may still know and must never see issued again.
///
/// Refuses a context that claims more for `me` than `max(local clock[me], floor)`
/// ([`ContextError::ClaimsUnissued`]) and, as defence in depth, a counter that cannot
/// grow ([`ContextError::CountersExhausted`]); never wraps.
pub fn coordinator_put_above(
    local: Option<Object>,
    ctx: &Clock,
    content: Content,
    meta: Meta,
    me: ReplicaId,
    floor: u64,
) -> Result<Object, ContextError> {
    let mut o = local.unwrap_or_default();
    let ctx = vouched_context(ctx, &o.clock, me, floor)?;
    o.siblings.retain(|s| !ctx.covers(s.dot));
    let at = o.clock.get(me).max(floor);
    let n = at
        .checked_add(1)
        .ok_or(ContextError::CountersExhausted { at })?;
    o.clock.join(&ctx);
    o.clock.set(me, n);
    let dot = Dot {
        replica: me,
        counter: n,
    };
    // `n` exceeds every `me`-counter seen, so the new dot sorts after every `me` sibling.
    let at = o.siblings.partition_point(|s| s.dot < dot);
    o.siblings.insert(at, Sibling { dot, content, meta });
    Ok(o)
}

/// What a coordinator `me` takes from a client's context `ctx`, given its own copy's clock
/// `local` and its dot floor `floor` (see the module docs, "Client contexts").
///
/// - For `me`: the claim must not exceed `max(local[me], floor)`, the most `me` has issued
///   for the key; a higher claim is refused with [`ContextError::ClaimsUnissued`].
/// - For every other replica `r`: the entry is capped at `local[r]`, what the coordinator's
///   copy has seen (entries for replicas it has never seen are dropped).
///
/// The result is pointwise `≤` `local` except for `me`'s entry, so it covers a local
/// sibling exactly when `ctx` does (every local sibling's dot is within `local`).
pub fn vouched_context(
    ctx: &Clock,
    local: &Clock,
    me: ReplicaId,
    floor: u64,
) -> Result<Clock, ContextError> {
    let issued = local.get(me).max(floor);
    let claimed = ctx.get(me);
    if claimed > issued {
        return Err(ContextError::ClaimsUnissued { claimed, issued });
    }
    let mut out = Clock::new();
    for (r, n) in ctx.iter() {
        let cap = if r == me { n } else { n.min(local.get(r)) };
        out.set(r, cap);
    }
    Ok(out)
}

/// Whether `local` already vouches for all of `ctx`'s entries for replicas other than
/// `me`: when it does not, [`vouched_context`] would cap some entry, and a coordinator may
/// first pull the key from the other replicas so a legitimate context read from a more
/// up-to-date replica keeps its full effect.
pub fn vouches_for_others(ctx: &Clock, local: &Clock, me: ReplicaId) -> bool {
    ctx.iter().all(|(r, n)| r == me || local.get(r) >= n)
}

/// A bucket truncation (FLUSHALL in cluster mode) applied to `o`: drops every sibling written
/// at or before `mark_us` (its coordinator's `ts_us`) and keeps the clock, so the dropped
/// dots stay known and a replica's older copy holding them loses them on [`merge`], as a
/// delete would. Returns whether a sibling was dropped; an object left with none reads as
/// notfound ([`Object::is_tombstone_only`]).
pub fn truncate(o: &mut Object, mark_us: u64) -> bool {
    let before = o.siblings.len();
    o.siblings.retain(|s| s.meta.ts_us > mark_us);
    o.siblings.len() != before
}

/// Joins two replicas' states (apply, read merge, repair, handoff).
pub fn merge(a: &Object, b: &Object) -> Object {
    let mut siblings: Vec<Sibling> = Vec::with_capacity(a.siblings.len() + b.siblings.len());
    let (mut i, mut j) = (0, 0);
    // Both lists are sorted by dot: one merge walk finds the common dots in linear time.
    loop {
        let (x, y) = (a.siblings.get(i), b.siblings.get(j));
        let take_x = match (x, y) {
            (None, None) => break,
            (Some(x), Some(y)) if x.dot == y.dot => {
                siblings.push(x.clone());
                i += 1;
                j += 1;
                continue;
            }
            (Some(x), Some(y)) => x.dot < y.dot,
            (x, _) => x.is_some(),
        };
        if take_x {
            let x = &a.siblings[i];
            if !b.clock.covers(x.dot) {
                siblings.push(x.clone());
            }
            i += 1;
        } else {
            let y = &b.siblings[j];
            if !a.clock.covers(y.dot) {
                siblings.push(y.clone());
            }
            j += 1;
        }
    }
    let mut clock = a.clock.clone();
    clock.join(&b.clock);
    Object { clock, siblings }
}

/// [`merge`] followed by [`lww`] when `allow_mult` is false.
pub fn merge_with(a: &Object, b: &Object, allow_mult: bool) -> Object {
    let m = merge(a, b);
    if allow_mult { m } else { lww(m) }
}

/// Last-writer-wins: keep only the sibling with the greatest `(ts_us, dot)`; keep the clock.
pub fn lww(mut o: Object) -> Object {
    if let Some(best) = o
        .siblings
        .iter()
        .max_by_key(|s| (s.meta.ts_us, s.dot))
        .cloned()
    {
        o.siblings = vec![best];
    }
    o
}

/// Whether `a` has seen everything `b` has (`a.clock ≥ b.clock`).
pub fn descends(a: &Object, b: &Object) -> bool {
    a.clock.descends(&b.clock)
}

/// Whether `b` is strictly older than `by` (`by` descends from `b` and the clocks differ):
/// read repair sends the merged object to such replicas.
pub fn dominated(b: &Object, by: &Object) -> bool {
    descends(by, b) && by.clock != b.clock
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn rid(node: u32) -> ReplicaId {
        ReplicaId {
            partition: PartitionId(7),
            node: NodeId(node),
            incarnation: 0,
            epoch: 0,
        }
    }

    fn val(s: &str) -> Content {
        Content::Value(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn vals(o: &Object) -> Vec<&[u8]> {
        o.values().map(|b| b.as_ref()).collect()
    }

    fn put(local: Option<Object>, ctx: &Clock, v: &str, node: u32, ts: u64) -> Object {
        coordinator_put(local, ctx, val(v), Meta { ts_us: ts }, rid(node)).unwrap()
    }

    #[test]
    fn blind_writes_make_siblings_and_a_merged_context_collapses_them() {
        let empty = Clock::new();
        let a = put(None, &empty, "x", 1, 10);
        let a2 = put(Some(a.clone()), &empty, "y", 1, 11);
        assert_eq!(vals(&a2), [b"x", b"y"]);
        // Another blind writer at another replica.
        let b = put(None, &empty, "z", 2, 12);
        let m = merge(&a2, &b);
        assert_eq!(vals(&m), [&b"x"[..], &b"y"[..], &b"z"[..]]);
        // A write carrying the merged context supersedes all three.
        let c = put(Some(m.clone()), &m.clock.clone(), "w", 1, 13);
        assert_eq!(vals(&c), [b"w"]);
        assert_eq!(vals(&merge(&c, &b)), [b"w"]);
        assert!(dominated(&b, &c) && !dominated(&c, &b) && !dominated(&c, &c));
        assert!(descends(&c, &c));
    }

    #[test]
    fn a_truncated_object_drops_old_siblings_and_wins_merges_against_its_old_copy() {
        let a = put(None, &Clock::new(), "old", 1, 10);
        let both = merge(&a, &put(None, &Clock::new(), "new", 2, 30));
        let mut t = both.clone();
        assert!(truncate(&mut t, 20));
        assert_eq!(vals(&t), [b"new"]);
        assert!(!truncate(&mut t, 20), "nothing left to drop");
        // A replica that still holds the old sibling loses it on merge, either way round.
        assert_eq!(vals(&merge(&t, &both)), [b"new"]);
        assert_eq!(vals(&merge(&both, &t)), [b"new"]);
        let mut all = both;
        assert!(truncate(&mut all, 30));
        assert!(all.is_tombstone_only() && all.clock().get(rid(1)) == 1);
        assert!(vals(&merge(&a, &all)).is_empty());
    }

    #[test]
    fn put_supersedes_only_what_the_context_covers() {
        let a = put(None, &Clock::new(), "x", 1, 1);
        let ctx = a.clock.clone();
        let a2 = put(Some(a), &Clock::new(), "y", 1, 2); // concurrent, unseen by the client
        let a3 = put(Some(a2), &ctx, "x2", 1, 3);
        assert_eq!(vals(&a3), [&b"y"[..], &b"x2"[..]]);
        // The dot counter never goes back; a context ahead of what this replica issued is
        // refused, and one within the dot floor (a forgotten key) is accepted.
        let far = put(Some(a3.clone()), &a3.clock, "q", 1, 4);
        assert_eq!(far.siblings().last().unwrap().dot.counter, 4);
        let refused = coordinator_put(None, &far.clock, val("r"), Meta { ts_us: 5 }, rid(1));
        assert_eq!(
            refused,
            Err(ContextError::ClaimsUnissued {
                claimed: 4,
                issued: 0
            })
        );
        let m = Meta { ts_us: 5 };
        let fresh = coordinator_put_above(None, &far.clock, val("r"), m, rid(1), 4).unwrap();
        assert_eq!(fresh.siblings()[0].dot.counter, 5);
    }

    fn forged(entries: &[(u32, u64)]) -> Clock {
        let mut c = Clock::new();
        for &(node, n) in entries {
            c.set(rid(node), n);
        }
        c
    }

    #[test]
    fn a_context_claiming_u64_max_for_the_coordinator_is_refused_not_wrapped() {
        // The issue's attack: PUT, then PUT with the context's own counter set to u64::MAX.
        let a = put(None, &Clock::new(), "v1", 0, 1);
        let evil = forged(&[(0, u64::MAX)]);
        let r = coordinator_put(
            Some(a.clone()),
            &evil,
            val("evil"),
            Meta { ts_us: 2 },
            rid(0),
        );
        assert_eq!(
            r,
            Err(ContextError::ClaimsUnissued {
                claimed: u64::MAX,
                issued: 1
            })
        );
        assert!(r.unwrap_err().to_string().contains("claims counter"));
    }

    #[test]
    fn a_counter_at_u64_max_is_refused_rather_than_wrapped() {
        let m = Meta { ts_us: 1 };
        let at_max = coordinator_put_above(None, &Clock::new(), val("x"), m, rid(0), u64::MAX);
        assert_eq!(
            at_max,
            Err(ContextError::CountersExhausted { at: u64::MAX })
        );
    }

    #[test]
    fn a_context_claiming_other_replicas_future_writes_cannot_hide_them() {
        // Replica 1 wrote once; a client claims it has seen replica 1 up to u64::MAX and an
        // unknown replica 9 as well, and writes at replica 0.
        let one = put(None, &Clock::new(), "one", 1, 1);
        let evil = forged(&[(1, u64::MAX), (9, 77)]);
        let w = put(Some(one.clone()), &evil, "evil", 0, 2);
        assert_eq!(
            w.clock.get(rid(1)),
            1,
            "capped at what the coordinator has seen"
        );
        assert_eq!(w.clock.get(rid(9)), 0, "a replica it never saw is dropped");
        assert_eq!(
            vals(&w),
            [b"evil"],
            "what the coordinator held is still superseded"
        );
        // Replica 1's next write survives every merge with the forged write's object.
        let later = put(Some(one), &Clock::new(), "later", 1, 3);
        let (ab, ba) = (merge(&w, &later), merge(&later, &w));
        assert_eq!(ab, ba);
        assert!(vals(&ab).contains(&&b"later"[..]));
    }

    #[test]
    fn delete_is_a_tombstone_put_and_lww_keeps_one() {
        let a = put(None, &Clock::new(), "x", 1, 5);
        let d = coordinator_put(
            Some(a.clone()),
            &a.clock,
            Content::Tombstone,
            Meta { ts_us: 6 },
            rid(1),
        )
        .unwrap();
        assert!(d.is_tombstone_only() && !a.is_tombstone_only());
        assert!(Object::default().is_tombstone_only());
        // LWW: concurrent writes, the later timestamp wins and the other is lost.
        let b = put(None, &Clock::new(), "late", 2, 9);
        let m = merge_with(&a, &b, false);
        assert_eq!(vals(&m), [b"late"]);
        assert_eq!(m.clock().len(), 2, "LWW keeps the clock");
        // Equal timestamps: the greater dot wins.
        let c = put(None, &Clock::new(), "tie", 3, 9);
        assert_eq!(vals(&merge_with(&b, &c, false)), [b"tie"]);
        assert_eq!(vals(&merge_with(&b, &c, true)).len(), 2);
    }

    #[test]
    fn context_encoding_round_trips_and_rejects_malformed_input() {
        let mut c = Clock::new();
        c.set(rid(1), 3);
        c.set(rid(300), u64::MAX);
        c.set(
            ReplicaId {
                partition: PartitionId(4095),
                node: NodeId(u32::MAX),
                incarnation: 2,
                epoch: 7,
            },
            1,
        );
        let e = c.encode();
        assert_eq!(Clock::decode(&e), Ok(c.clone()));
        assert_eq!(Clock::decode(&[]), Ok(Clock::new()));
        assert_eq!(Clock::new().encode(), [2, 0]);
        assert_eq!(Clock::decode(&[1, 0]), Err(ContextError::UnknownVersion(1)));
        for cut in 1..e.len() {
            assert!(Clock::decode(&e[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = e.clone();
        long.push(0);
        assert_eq!(Clock::decode(&long), Err(ContextError::TrailingBytes(1)));
        // Entries out of order.
        assert_eq!(
            Clock::decode(&[2, 2, 0, 2, 0, 0, 1, 0, 1, 0, 0, 1]),
            Err(ContextError::NotCanonical)
        );
        // Zero counter.
        assert_eq!(
            Clock::decode(&[2, 1, 0, 1, 0, 0, 0]),
            Err(ContextError::NotCanonical)
        );
        // Overlong varint (0 as 0x80 0x00).
        assert_eq!(
            Clock::decode(&[2, 1, 0x80, 0, 1, 0, 0, 1]),
            Err(ContextError::NotCanonical)
        );
        // u32 field too large.
        assert_eq!(
            Clock::decode(&[2, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 1, 0, 0, 1]),
            Err(ContextError::VarintOverflow)
        );
        // A huge count is refused before allocating.
        assert_eq!(
            Clock::decode(&[2, 0xff, 0xff, 0xff, 0x0f]),
            Err(ContextError::Truncated)
        );
    }

    // ---- property tests over random histories ----

    /// (kind, replica a, replica b, timestamp); kinds: 0 blind put at a, 1 put at a with b's
    /// context (read-modify-write), 2 merge b into a.
    fn history() -> impl Strategy<Value = Vec<(u8, usize, usize)>> {
        prop::collection::vec((0u8..3, 0usize..3, 0usize..3), 0..25)
    }

    /// Runs a history on 3 replicas; returns every object produced and every dot issued.
    fn run(ops: &[(u8, usize, usize)]) -> (Vec<Object>, Vec<Object>, Vec<Dot>) {
        let mut reps: Vec<Option<Object>> = vec![None; 3];
        let mut pool = vec![Object::default()];
        let mut dots = Vec::new();
        for (t, &(kind, a, b)) in ops.iter().enumerate() {
            let o = match kind {
                0 | 1 => {
                    let ctx = if kind == 1 {
                        reps[b]
                            .as_ref()
                            .map(|o| o.clock.clone())
                            .unwrap_or_default()
                    } else {
                        Clock::new()
                    };
                    let o = put(reps[a].take(), &ctx, &format!("v{t}"), a as u32, t as u64);
                    let new = o.siblings.iter().max_by_key(|s| s.meta.ts_us).unwrap();
                    dots.push(new.dot);
                    o
                }
                _ => merge(
                    &reps[a].clone().unwrap_or_default(),
                    &reps[b].clone().unwrap_or_default(),
                ),
            };
            pool.push(o.clone());
            reps[a] = Some(o);
        }
        let reps = reps.into_iter().map(Option::unwrap_or_default).collect();
        (pool, reps, dots)
    }

    /// A client context: a replica's real one, that one with an entry raised (possibly to
    /// `u64::MAX`, possibly naming a replica that never wrote), or arbitrary bytes.
    #[derive(Debug, Clone)]
    enum HostileCtx {
        Real(usize),
        Raised(usize, u32, u64),
        Bytes(Vec<u8>),
    }

    fn hostile_ctx() -> impl Strategy<Value = HostileCtx> {
        let counter = prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), 1u64..40];
        prop_oneof![
            (0usize..3).prop_map(HostileCtx::Real),
            (0usize..3, 0u32..5, counter).prop_map(|(b, r, n)| HostileCtx::Raised(b, r, n)),
            prop::collection::vec(any::<u8>(), 0..24).prop_map(HostileCtx::Bytes),
        ]
    }

    /// (write at replica a with a context | merge b into a).
    fn hostile_history() -> impl Strategy<Value = Vec<(Option<HostileCtx>, usize, usize)>> {
        prop::collection::vec(
            (
                prop::option::weighted(0.7, hostile_ctx()),
                0usize..3,
                0usize..3,
            ),
            0..30,
        )
    }

    type HostileRun = (Vec<Object>, Vec<(usize, Dot)>, Vec<(usize, Clock)>);

    /// Runs a hostile history; returns the replicas, each acknowledged write's (step, dot)
    /// and each accepted write's (step, client context).
    fn run_hostile(ops: &[(Option<HostileCtx>, usize, usize)]) -> HostileRun {
        let mut reps: Vec<Object> = vec![Object::default(); 3];
        let (mut acked, mut contexts) = (Vec::new(), Vec::new());
        for (t, (ctx, a, b)) in ops.iter().enumerate() {
            let Some(ctx) = ctx else {
                reps[*a] = merge(&reps[*a], &reps[*b]);
                continue;
            };
            let ctx = match ctx {
                HostileCtx::Real(b) => reps[*b].clock.clone(),
                HostileCtx::Raised(b, r, n) => {
                    let mut c = reps[*b].clock.clone();
                    c.set(rid(*r), *n);
                    c
                }
                HostileCtx::Bytes(bytes) => match Clock::decode(bytes) {
                    Ok(c) => c,
                    Err(_) => continue,
                },
            };
            let m = Meta { ts_us: t as u64 };
            let v = val(&format!("v{t}"));
            let Ok(o) = coordinator_put(Some(reps[*a].clone()), &ctx, v, m, rid(*a as u32)) else {
                continue;
            };
            let dot = o.siblings.iter().max_by_key(|s| s.meta.ts_us).unwrap().dot;
            // No object anywhere may already cover a dot being issued.
            assert!(
                reps.iter().all(|r| !r.clock.covers(dot)),
                "{dot:?} pre-covered"
            );
            acked.push((t, dot));
            contexts.push((t, ctx));
            reps[*a] = o;
        }
        (reps, acked, contexts)
    }

    fn pick(pool: &[Object], i: prop::sample::Index) -> &Object {
        &pool[i.index(pool.len())]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn merge_is_a_semilattice(
            ops in history(),
            i in any::<prop::sample::Index>(),
            j in any::<prop::sample::Index>(),
            k in any::<prop::sample::Index>(),
        ) {
            let (pool, _, _) = run(&ops);
            let (a, b, c) = (pick(&pool, i), pick(&pool, j), pick(&pool, k));
            prop_assert_eq!(merge(a, b), merge(b, a));
            prop_assert_eq!(merge(&merge(a, b), c), merge(a, &merge(b, c)));
            prop_assert_eq!(&merge(a, a), a);
        }

        #[test]
        fn merge_keeps_what_the_other_side_has_not_seen(
            ops in history(),
            i in any::<prop::sample::Index>(),
            j in any::<prop::sample::Index>(),
        ) {
            let (pool, _, _) = run(&ops);
            let (a, b) = (pick(&pool, i), pick(&pool, j));
            let m = merge(a, b);
            for x in &a.siblings {
                if !b.clock.covers(x.dot) {
                    prop_assert!(m.siblings.contains(x));
                }
            }
            for x in &b.siblings {
                if !a.clock.covers(x.dot) {
                    prop_assert!(m.siblings.contains(x));
                }
            }
            for x in &m.siblings {
                prop_assert!(a.siblings.contains(x) || b.siblings.contains(x));
                prop_assert!(m.clock.covers(x.dot));
            }
            prop_assert!(descends(&m, a) && descends(&m, b));
            prop_assert!(m.siblings.windows(2).all(|w| w[0].dot < w[1].dot));
        }

        #[test]
        fn dots_are_never_reused(ops in history()) {
            let (_, _, dots) = run(&ops);
            let distinct: BTreeSet<Dot> = dots.iter().copied().collect();
            prop_assert_eq!(distinct.len(), dots.len());
        }

        #[test]
        fn a_put_with_a_gets_context_supersedes_exactly_what_it_returned(
            ops in history(),
            at in 0usize..3,
        ) {
            let (_, reps, _) = run(&ops);
            // A GET from all replicas: merge them. The coordinator has pulled the key from
            // the others before writing (as the eventual coordinator does when a context is
            // ahead of its copy), so it vouches for the whole context.
            let got = reps.iter().fold(Object::default(), |m, o| merge(&m, o));
            let local = merge(&reps[at], &got);
            let w = put(Some(local.clone()), &got.clock, "new", at as u32, 1_000);
            // Collapses to one value everywhere once merged.
            prop_assert_eq!(vals(&w), [b"new"]);
            let everywhere = reps.iter().fold(w.clone(), |m, o| merge(&m, o));
            prop_assert_eq!(vals(&everywhere), [b"new"]);
            // With a partial GET (one replica), what it returned goes and the rest stays.
            let partial = &reps[(at + 1) % 3];
            let w2 = put(Some(local.clone()), &partial.clock, "new", at as u32, 1_000);
            for s in &local.siblings {
                let returned = partial.clock.covers(s.dot);
                prop_assert_eq!(w2.siblings.contains(s), !returned);
            }
        }

        #[test]
        fn two_writers_with_one_context_make_two_siblings(ops in history()) {
            let (_, reps, _) = run(&ops);
            let m = reps.iter().fold(Object::default(), |m, o| merge(&m, o));
            let a = put(Some(m.clone()), &m.clock, "a", 0, 2_000);
            let b = put(Some(m.clone()), &m.clock, "b", 1, 2_001);
            let both = merge(&a, &b);
            prop_assert_eq!(vals(&both), [&b"a"[..], &b"b"[..]]);
        }

        #[test]
        fn contexts_round_trip(ops in history(), i in any::<prop::sample::Index>()) {
            let (pool, _, _) = run(&ops);
            let c = &pick(&pool, i).clock;
            prop_assert_eq!(&Clock::decode(&c.encode()).unwrap(), c);
        }

        #[test]
        fn hostile_contexts_never_lose_an_acknowledged_write(ops in hostile_history()) {
            let (reps, acked, superseded_after) = run_hostile(&ops);
            // Anti-entropy: merge everything everywhere; replicas converge.
            let all = reps.iter().fold(Object::default(), |m, o| merge(&m, o));
            for r in &reps {
                prop_assert_eq!(&merge(r, &all), &all);
            }
            // Every acknowledged write is still there, unless a later write's client context
            // covered it (the client saw it and replaced it).
            for (t, dot) in acked {
                let kept = all.siblings.iter().any(|s| s.dot == dot);
                let replaced = superseded_after.iter().any(|(t2, c)| *t2 > t && c.covers(dot));
                prop_assert!(kept || replaced, "write {dot:?} of step {t} lost");
            }
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            if let (Ok(c), false) = (Clock::decode(&bytes), bytes.is_empty()) {
                prop_assert_eq!(c.encode(), bytes.clone());
            }
        }
    }
}
