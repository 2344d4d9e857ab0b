//! The set and the sorted set a Redis key is on an eventual bucket: an observed-remove set
//! without tombstones (ORSWOT, as Riak's sets are), so members added and removed
//! concurrently at replicas in different DCs are merged member by member, never lost to a
//! last-writer-wins choice of one whole set. A sorted set is the same set with a score per
//! member.
//!
//! **State** ([`Elements`]), per key:
//! - a **causal clock**: per actor (a coordinating node's id and incarnation, so a wiped node
//!   never reissues a dot) the highest event counter this state has seen;
//! - per live member, its **parts**, at most one per actor, each named by a dot `(actor,
//!   counter)`: the add, score or increment that actor made. A command at its coordinator
//!   makes one new dot, above everything that coordinator saw:
//!   - an add (`SADD`, and `ZADD` of a score) replaces every part of the member with its
//!     own, which holds the score as a last-writer-wins register `(stamp, score)` (stamps as
//!     [`super::map::Stamp`]: the coordinator's µs, then its id);
//!   - an increment (`ZINCRBY`, `ZADD ... INCR`) replaces only its actor's part, adding the
//!     delta to the sum that part carries over the register it continues, so increments
//!     made concurrently at different actors all count;
//!   - the score shown is the newest register among the parts (0 with none) plus the
//!     increments that continue it (or a newer one): a `ZADD` supersedes the increments it
//!     had not seen, as a hash's `HSET` supersedes a field's `HINCRBY`;
//! - the key's **expiry** (a register of its own) and a **generation** (the stamp of the
//!   value the collection started over), as the map has.
//!
//! **Merge** (ORSWOT's join, over parts): the clocks' pointwise maximum; a part survives if
//! both sides hold it, or if the other side's clock has not seen its dot (a dot the other
//! side saw and no longer holds was removed or replaced there); a member with no surviving
//! part is gone. So a remove wins only over the adds it observed and an add concurrent with
//! a remove survives (**add wins**; an increment's part keeps the member, with the
//! increments as its score when the register it continued was removed). The join is commutative, associative and
//! idempotent, and any order of replication, read repair, hinted handoff and anti-entropy
//! gives the same collection.
//!
//! **Removes are observed removes.** A command is run by the front end over the collection
//! it read ([`crate::Dispatch::element_update`]), and what it changed is sent to the key's
//! coordinator as [`ElementOps`]: the members it added or re-scored, the increments, the
//! members it removed, and the clock of what it read. The coordinator drops only the dots
//! of a removed member that clock covers. Adding a member that is already present adds
//! nothing (Redis answers 0 and changes nothing), so a concurrent remove elsewhere takes it.
//!
//! **Bounded.** A removed member leaves nothing behind (the clock remembers its dot); the
//! clock holds one counter per coordinator incarnation that ever wrote the key.
//!
//! **Stored** in the value envelope with flags `0x02` (CRDT) and the kind's type bits
//! (`0x10` set, `0x18` sorted set), `0x01` with the expiry: `[flags][expiry µs BE if 0x01]
//! [postcard state]`. Plain readers refuse it (`Entry::decode`); a damaged state decodes to
//! `None`, never a panic.

use super::shared::{
    Expiring, Expiry, LiveCheck, Stamp, crdt_envelope, join_clocks, lww_sibling, open_crdt,
    sibling_stamp,
};
use super::types::ElementOps;
use crate::error::ReplicationError;
use bytes::Bytes;
use meridian_cluster::dvv::{Content, Object};
use meridian_core::Timestamp;
use meridian_core::collection_data as data;
use meridian_core::envelope::{Entry, FLAG_CRDT, FLAG_HASH, Kind, TYPE_BITS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A causal clock: per actor, the highest counter seen.
type Clock = BTreeMap<u64, u64>;

/// One actor's part of a member. See the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Part {
    /// The counter of the dot that made it.
    dot: u64,
    /// The score an add set (sets, and increments over nothing: none).
    reg: Option<(Stamp, f64)>,
    /// The stamp of the register its increments continue.
    base: Stamp,
    /// The sum of this actor's increments over that register.
    incr: f64,
}

/// One live member: its parts, by actor.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Member {
    parts: BTreeMap<u64, Part>,
}

impl Member {
    /// The newest register among the parts.
    fn newest(&self) -> Option<(Stamp, f64)> {
        self.parts
            .values()
            .filter_map(|p| p.reg)
            .max_by(|a, b| (a.0, a.1.to_bits()).cmp(&(b.0, b.1.to_bits())))
    }

    /// The score shown: the newest register plus the increments that continue it. Increments
    /// that sum to NaN (`+inf` at one actor, `-inf` at another) are left out: a score is
    /// never NaN.
    fn score(&self) -> f64 {
        let (at, base) = self.newest().unwrap_or_default();
        let incrs = self.parts.values().filter(|p| p.base >= at);
        let v = base + incrs.map(|p| p.incr).sum::<f64>();
        if v.is_nan() { base } else { v }
    }
}

/// The parts of one member that survive a merge of `a` (from a side that has seen
/// `a_seen`) with `b` (from a side that has seen `b_seen`): see the module docs.
fn join_parts(
    a: Option<&Member>,
    a_seen: &Clock,
    b: Option<&Member>,
    b_seen: &Clock,
) -> BTreeMap<u64, Part> {
    let empty = BTreeMap::new();
    let (pa, pb) = (
        a.map_or(&empty, |m| &m.parts),
        b.map_or(&empty, |m| &m.parts),
    );
    let kept = |mine: &BTreeMap<u64, Part>, theirs: &BTreeMap<u64, Part>, seen: &Clock| {
        mine.iter()
            .filter(|(actor, p)| {
                theirs.get(*actor).is_some_and(|q| q.dot == p.dot)
                    || p.dot > seen.get(*actor).copied().unwrap_or(0)
            })
            .map(|(a, p)| (*a, *p))
            .collect::<Vec<_>>()
    };
    let mut out: BTreeMap<u64, Part> = BTreeMap::new();
    for (actor, p) in kept(pa, pb, b_seen).into_iter().chain(kept(pb, pa, a_seen)) {
        let slot = out.entry(actor).or_insert(p);
        if p.dot > slot.dot {
            *slot = p;
        }
    }
    out
}

/// A set's or sorted set's CRDT. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Elements {
    /// A sorted set (else a set).
    zset: bool,
    /// The stamp of the value it started over (zero: none).
    generation: Stamp,
    /// Its expiry.
    expiry: Expiry,
    clock: Clock,
    members: BTreeMap<Bytes, Member>,
}

impl Expiring for Elements {
    fn expiry_register(&self) -> &Expiry {
        &self.expiry
    }

    fn expiry_register_mut(&mut self) -> &mut Expiry {
        &mut self.expiry
    }
}

impl Elements {
    /// An empty collection of the kind, started over the value `at` names.
    fn over(zset: bool, at: Stamp) -> Elements {
        Elements {
            zset,
            generation: at,
            expiry: Expiry::over(at),
            ..Elements::default()
        }
    }

    /// The kind it shows.
    pub fn kind(&self) -> Kind {
        if self.zset { Kind::ZSet } else { Kind::Set }
    }

    /// The join of two states (see the module docs).
    pub fn merge(&self, other: &Elements) -> Elements {
        if (self.generation, self.zset) != (other.generation, other.zset) {
            return if (self.generation, self.zset) > (other.generation, other.zset) {
                self.clone()
            } else {
                other.clone()
            };
        }
        let clock = join_clocks(&self.clock, &other.clock);
        let mut members = BTreeMap::new();
        let names = self.members.keys().chain(other.members.keys());
        for name in names {
            if members.contains_key(name) {
                continue;
            }
            let (a, b) = (self.members.get(name), other.members.get(name));
            let parts = join_parts(a, &self.clock, b, &other.clock);
            if !parts.is_empty() {
                members.insert(name.clone(), Member { parts });
            }
        }
        Elements {
            zset: self.zset,
            generation: self.generation,
            expiry: self.expiry.merge(&other.expiry),
            clock,
            members,
        }
    }

    /// The members, in member order, with their scores (sets: 0).
    pub fn members(&self) -> impl Iterator<Item = (&Bytes, f64)> + '_ {
        self.members.iter().map(|(m, s)| (m, s.score()))
    }

    /// The clock, for [`ElementOps::observed`].
    pub fn observed(&self) -> Vec<(u64, u64)> {
        self.clock.iter().map(|(a, c)| (*a, *c)).collect()
    }

    /// The set or sorted set the Redis view shows at `now`: `None` when it expired or has
    /// no member.
    pub fn live_entry(&self, now: Timestamp) -> Option<Entry> {
        if self.expiry.passed(now) || self.members.is_empty() {
            return None;
        }
        let data = if self.zset {
            let mut entries: Vec<(f64, &[u8])> = self.members().map(|(m, s)| (s, &m[..])).collect();
            entries.sort_by(|a, b| data::zset_order(*a, *b));
            data::encode_zset(entries.into_iter())
        } else {
            let names: Vec<&Bytes> = self.members.keys().collect();
            data::encode_set(&names)
        };
        Some(Entry {
            data: Bytes::from(data),
            expiry: self.expiry.deadline(),
            kind: self.kind(),
        })
    }

    /// A new dot counter of `actor`, above everything this state has seen of it.
    fn next_dot(&mut self, actor: u64) -> u64 {
        let c = self.clock.entry(actor).or_insert(0);
        *c = c.saturating_add(1);
        *c
    }

    /// Applies `ops` at `actor` (see the module docs).
    pub fn apply(&mut self, actor: u64, ops: &ElementOps, now_us: u64) {
        let observed: Option<Clock> = ops.observed.as_ref().map(|o| o.iter().copied().collect());
        for name in &ops.removes {
            let Some(m) = self.members.get_mut(name) else {
                continue;
            };
            match &observed {
                Some(seen) => m
                    .parts
                    .retain(|a, p| p.dot > seen.get(a).copied().unwrap_or(0)),
                None => m.parts.clear(),
            }
            if m.parts.is_empty() {
                self.members.remove(name);
            }
        }
        for (name, score) in &ops.puts {
            let floor = self.members.get(name).and_then(Member::newest);
            let at = Stamp {
                ts: now_us.max(floor.map_or(0, |r| r.0.ts.saturating_add(1))),
                id: actor,
            };
            let dot = self.next_dot(actor);
            let part = Part {
                dot,
                reg: score.map(|s| (at, s)),
                base: at,
                incr: 0.0,
            };
            let m = self.members.entry(name.clone()).or_default();
            m.parts = BTreeMap::from([(actor, part)]);
        }
        for (name, delta) in &ops.incrs {
            let dot = self.next_dot(actor);
            let m = self.members.entry(name.clone()).or_default();
            let at = m.newest().map_or_else(Stamp::default, |r| r.0);
            let part = m.parts.entry(actor).or_default();
            if part.base < at {
                // Its increments continued an older register: they are superseded.
                (part.base, part.incr) = (at, 0.0);
            }
            part.dot = dot;
            part.incr += delta;
        }
    }

    /// Its stored bytes (flags `0x02` and the kind's bits, and its expiry).
    pub fn encode(&self) -> Bytes {
        let state = postcard::to_allocvec(self).unwrap_or_default();
        crdt_envelope(type_bits(self.zset), self.expiry.deadline(), &state)
    }

    /// A stored collection; `None` when `raw` is none or is damaged.
    pub fn decode(raw: &[u8]) -> Option<Elements> {
        let zset = raw.first()? & TYPE_BITS == type_bits(true);
        let (expiry, state) = open_crdt(raw, type_bits(zset))?;
        match postcard::take_from_bytes::<Elements>(state) {
            Ok((mut e, [])) if e.zset == zset => {
                e.expiry = e.expiry.with_deadline(expiry);
                Some(e)
            }
            _ => None,
        }
    }
}

/// The envelope's type bits of a set or sorted set.
fn type_bits(zset: bool) -> u8 {
    // The kinds' bits, as `meridian_core::envelope` names them.
    if zset { 0x18 } else { 0x10 }
}

/// Whether stored bytes are a set's or sorted set's CRDT (one byte looked at).
pub fn is_elements(raw: &[u8]) -> bool {
    raw.first().is_some_and(|f| {
        f & (FLAG_CRDT | FLAG_HASH) == FLAG_CRDT
            && matches!(f & TYPE_BITS, b if b == type_bits(false) || b == type_bits(true))
    })
}

/// Every collection among `values` merged (`None`: there is none that decodes).
pub fn merge_all<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Elements> {
    values
        .filter(|v| is_elements(v))
        .filter_map(Elements::decode)
        .reduce(|a, b| a.merge(&b))
}

/// The collection `ops` continue in `local` (this replica's object, read under the key's
/// lock) at `now`: the merged collections when the key shows one of `ops`' kind; a plain
/// set or sorted set made a collection (every member one dot of an actor named by the
/// value's dot, so every replica builds the same); an empty collection over an expired,
/// deleted or empty value, or over nothing.
///
/// # Errors
/// `wrong_type` when the key shows another type.
fn continued(
    local: Option<&Object>,
    zset: bool,
    now: Timestamp,
    live: LiveCheck,
) -> Result<Elements, ReplicationError> {
    let Some(latest) = local.and_then(lww_sibling) else {
        return Ok(Elements::over(zset, Stamp::default()));
    };
    let at = sibling_stamp(latest);
    let Content::Value(v) = &latest.content else {
        return Ok(Elements::over(zset, at));
    };
    if is_elements(v) {
        let values = local.into_iter().flat_map(|o| o.values()).map(|v| &v[..]);
        if let Some(e) = merge_all(values).filter(|e| e.live_entry(now).is_some()) {
            if e.zset == zset {
                return Ok(e);
            }
            return Err(ReplicationError::WrongType);
        }
        return Ok(Elements::over(zset, at));
    }
    let live_other = match live(v, local, now) {
        Some(live) => live,
        None => match Entry::live(Some(v.clone()), now) {
            Some(e) if e.kind == Kind::Set && !zset => return Ok(from_plain(&e, at, false)),
            Some(e) if e.kind == Kind::ZSet && zset => return Ok(from_plain(&e, at, true)),
            Some(_) => true,
            None => false,
        },
    };
    if live_other {
        return Err(ReplicationError::WrongType);
    }
    Ok(Elements::over(zset, at))
}

/// A collection of a plain value's members (a damaged value is replaced, as one that does
/// not decode reads absent).
fn from_plain(e: &Entry, at: Stamp, zset: bool) -> Elements {
    let mut out = Elements::over(zset, at);
    out.expiry = out.expiry.with_deadline(e.expiry);
    let actor = at.id;
    out.clock.insert(actor, 1);
    let members: Vec<(Bytes, Option<f64>)> = if zset {
        data::decode_zset(&e.data)
            .unwrap_or_default()
            .into_iter()
            .map(|(s, m)| (m, Some(s)))
            .collect()
    } else {
        data::decode_set(&e.data)
            .unwrap_or_default()
            .into_iter()
            .map(|m| (m, None))
            .collect()
    };
    for (name, score) in members {
        let part = Part {
            dot: 1,
            reg: score.map(|s| (at, s)),
            base: at,
            incr: 0.0,
        };
        let parts = BTreeMap::from([(actor, part)]);
        out.members.insert(name, Member { parts });
    }
    out
}

/// The content `ops` at `actor` write over `local` (this replica's object, read under the
/// key's lock), or `None` when they change nothing.
///
/// `live` says whether another CRDT shows a live value.
///
/// # Errors
/// `wrong_type` when the key shows another type.
pub fn update(
    local: Option<&Object>,
    actor: u64,
    ops: &ElementOps,
    now: Timestamp,
    live: LiveCheck,
) -> Result<Option<Content>, ReplicationError> {
    let scores = ops.puts.iter().filter_map(|p| p.1);
    let mut scores = scores.chain(ops.incrs.iter().map(|i| i.1));
    let set_scored = !ops.zset && (ops.puts.iter().any(|p| p.1.is_some()) || !ops.incrs.is_empty());
    if set_scored || scores.any(f64::is_nan) {
        return Err(ReplicationError::InvalidContext {
            reason: "a collection change scores a set member, or gives a NaN score".into(),
        });
    }
    let mut state = continued(local, ops.zset, now, live)?;
    let before = state.clone();
    state.apply(actor, ops, now.0);
    if state == before {
        return Ok(None);
    }
    Ok(Some(Content::Value(state.encode())))
}

/// The members of a set or sorted set entry, with their scores (sets: `None`).
fn entry_members(e: &Entry) -> Result<BTreeMap<Bytes, Option<f64>>, ReplicationError> {
    let damaged = |_| ReplicationError::Storage {
        reason: "a stored collection does not decode".into(),
    };
    Ok(match e.kind {
        Kind::Set => data::decode_set(&e.data)
            .map_err(damaged)?
            .into_iter()
            .map(|m| (m, None))
            .collect(),
        Kind::ZSet => data::decode_zset(&e.data)
            .map_err(damaged)?
            .into_iter()
            .map(|(s, m)| (m, Some(s)))
            .collect(),
        _ => return Err(ReplicationError::WrongType),
    })
}

/// What a command changed, from the collection it read (`before`) to what it stored
/// (`after`, `None`: it deleted the key), as the ops its coordinator applies. A changed score
/// is an increment when `increments` (`ZINCRBY`, `ZADD ... INCR`), else a new register value.
///
/// # Errors
/// `wrong_type` when either side is no set or sorted set, or they differ in kind.
pub fn diff(
    before: Option<&Entry>,
    after: Option<&Entry>,
    increments: bool,
    observed: Option<Vec<(u64, u64)>>,
) -> Result<ElementOps, ReplicationError> {
    let zset = match (before, after) {
        (Some(b), Some(a)) if b.kind != a.kind => return Err(ReplicationError::WrongType),
        (Some(e), _) | (None, Some(e)) => e.kind == Kind::ZSet,
        (None, None) => return Ok(ElementOps::default()),
    };
    let old = before.map(entry_members).transpose()?.unwrap_or_default();
    let new = after.map(entry_members).transpose()?.unwrap_or_default();
    let mut ops = ElementOps {
        zset,
        observed,
        ..ElementOps::default()
    };
    for (name, score) in &new {
        match (old.get(name), score) {
            (None, _) if increments => ops.incrs.push((name.clone(), score.unwrap_or(0.0))),
            (None, _) => ops.puts.push((name.clone(), *score)),
            (Some(Some(was)), Some(now)) if was.to_bits() != now.to_bits() => {
                if increments {
                    ops.incrs.push((name.clone(), now - was));
                } else {
                    ops.puts.push((name.clone(), Some(*now)));
                }
            }
            _ => {}
        }
    }
    ops.removes = old
        .keys()
        .filter(|m| !new.contains_key(*m))
        .cloned()
        .collect();
    Ok(ops)
}

#[cfg(test)]
mod tests;
