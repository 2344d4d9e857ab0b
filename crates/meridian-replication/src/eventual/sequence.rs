//! The list a Redis key is on an eventual bucket: a sequence CRDT whose elements carry dense
//! places (as Logoot's do) inside an observed-remove set, so elements pushed, inserted and
//! removed concurrently at replicas in different DCs all survive in one order every replica
//! agrees on, and a remove takes only the elements it saw.
//!
//! **Places.** Each element has a *place*: a string of 32-bit digits, compared
//! lexicographically (a prefix first), ending in the four digits of the dot `(actor,
//! counter)` of the insert that made it — so no two elements share a place, and two
//! elements inserted concurrently between the same neighbours are ordered by their dots,
//! the same way everywhere. A new element's place is allocated strictly between its
//! neighbours' (`between`): pushes at either end step by a fixed amount at the first digit
//! that has room, so a list grows a digit per 65 536 pushes at one end, and an insert
//! between two neighbours halves the room between them, adding a digit when there is none.
//! The other elements of one command's run extend its first element's place (one digit,
//! their index), so a run is never interleaved with another replica's concurrent run.
//!
//! **State** ([`Sequence`]): a causal clock (per actor, the highest counter seen), the
//! elements by place with their values, the key's expiry (a register of its own) and a
//! generation, as the other CRDTs have.
//!
//! **Merge** (an observed-remove set of places): the clocks' pointwise maximum; an element
//! survives if both sides hold it, or if the other side's clock has not seen its dot. So
//! concurrent pushes to both ends, inserts and removes all merge: nothing is lost but what
//! a replica removed after seeing it. The join is commutative, associative and idempotent.
//!
//! **Writes.** A command (LPUSH, RPUSH, the X forms, LINSERT, LSET, LREM, LTRIM) runs in
//! the Redis layer over the list the front end read ([`crate::Dispatch::sequence_update`]);
//! what it changed is one run of the list replaced: the places of the elements it removed,
//! the places of the run's neighbours and the new elements, in order ([`SequenceOps`]).
//! The key's coordinator removes those elements and allocates places between the
//! neighbours. LPOP, RPOP and the moves are refused by the front end: their reply names
//! elements a racing pop in another DC could take too.
//!
//! **Bounded.** A removed element leaves nothing behind (the clock remembers its dot).
//!
//! **Stored** with flags `0x02` (CRDT) and the list's type bits `0x08`, `0x01` with the
//! expiry: `[flags][expiry µs BE if 0x01][postcard state]`. A damaged state decodes to
//! `None`, never a panic.

use super::shared::{
    Expiring, Expiry, LiveCheck, Stamp, crdt_envelope, join_clocks, lww_sibling, open_crdt,
    sibling_stamp,
};
use super::types::SequenceOps;
use crate::error::ReplicationError;
use bytes::Bytes;
use meridian_cluster::dvv::{Content, Object};
use meridian_core::Timestamp;
use meridian_core::envelope::{Entry, FLAG_CRDT, FLAG_HASH, Kind, TYPE_BITS};
use meridian_core::list_data;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The list's type bits.
const BITS: u8 = 0x08;
/// How far a push at an end steps the first digit with room.
const STEP: u64 = 1 << 16;
/// The room of one digit.
const DIGITS: u64 = 1 << 32;
/// The longest place accepted from a peer (a dot's four digits included).
pub const MAX_PLACE: usize = 256;

/// An element's place (see the module docs).
pub type Place = Vec<u32>;

/// A list's CRDT. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequence {
    generation: Stamp,
    /// Its expiry.
    expiry: Expiry,
    clock: BTreeMap<u64, u64>,
    elems: BTreeMap<Place, Bytes>,
}

/// The dot a place ends with (see [`dot_digits`]).
fn dot_of(place: &[u32]) -> (u64, u64) {
    let d = |i: usize| {
        let at = place.len().wrapping_sub(4 - i);
        u64::from(place.get(at).copied().unwrap_or(0))
    };
    ((d(0) << 32) | d(1), (d(2) << 31) | (d(3) & 0x7fff_ffff))
}

/// The four digits of a dot: the actor's two, then the counter's in 31-bit halves, the last
/// with its top bit set, so a place never ends in a zero digit (there would be no room
/// below it for an element inserted before it).
fn dot_digits(actor: u64, counter: u64) -> [u32; 4] {
    [
        (actor >> 32) as u32,
        actor as u32,
        (counter >> 31) as u32,
        (counter as u32 & 0x7fff_ffff) | 0x8000_0000,
    ]
}

/// Digits strictly between places `lo` and `hi` (`None`: the list's ends), never a prefix of
/// `hi`, so any suffix keeps them below it (see the module docs).
fn between(lo: Option<&[u32]>, hi: Option<&[u32]>) -> Place {
    let mut out = Vec::new();
    // Whether `out` still equals `lo`'s (`hi`'s) first digits.
    let (mut on_lo, mut on_hi) = (lo.is_some(), hi.is_some());
    for i in 0..=MAX_PLACE {
        let at = |p: Option<&[u32]>| p.and_then(|p| p.get(i)).map(|&d| i64::from(d));
        // Below: `lo`'s digit while on it (nothing once it ended); above: `hi`'s while on it.
        let low = if on_lo { at(lo).unwrap_or(-1) } else { -1 };
        let high = if on_hi {
            at(hi).unwrap_or(DIGITS as i64)
        } else {
            DIGITS as i64
        };
        if high - low >= 2 {
            let half = ((high - low) / 2) as u64;
            let digit = match (low >= 0, on_hi) {
                // Both sides bound this digit: halfway.
                (true, true) => low + half as i64,
                // Appending: step up.
                (true, false) => low + half.min(STEP) as i64,
                // Prepending: step down.
                (false, true) => high - half.min(STEP) as i64,
                // The first element.
                (false, false) => (DIGITS / 2) as i64,
            };
            out.push(digit as u32);
            return out;
        }
        let digit = low.max(0);
        on_lo = on_lo && at(lo) == Some(digit);
        on_hi = on_hi && at(hi) == Some(digit);
        out.push(digit as u32);
    }
    out
}

impl Expiring for Sequence {
    fn expiry_register(&self) -> &Expiry {
        &self.expiry
    }

    fn expiry_register_mut(&mut self) -> &mut Expiry {
        &mut self.expiry
    }
}

impl Sequence {
    fn over(at: Stamp) -> Sequence {
        Sequence {
            generation: at,
            expiry: Expiry::over(at),
            ..Sequence::default()
        }
    }

    /// The join of two states (see the module docs).
    pub fn merge(&self, other: &Sequence) -> Sequence {
        if self.generation != other.generation {
            return if self.generation > other.generation {
                self.clone()
            } else {
                other.clone()
            };
        }
        let clock = join_clocks(&self.clock, &other.clock);
        let unseen = |place: &Place, seen: &BTreeMap<u64, u64>| {
            let (actor, counter) = dot_of(place);
            counter > seen.get(&actor).copied().unwrap_or(0)
        };
        let mut elems = BTreeMap::new();
        for (place, v) in &self.elems {
            if other.elems.contains_key(place) || unseen(place, &other.clock) {
                elems.insert(place.clone(), v.clone());
            }
        }
        for (place, v) in &other.elems {
            if !self.elems.contains_key(place) && unseen(place, &self.clock) {
                elems.insert(place.clone(), v.clone());
            }
        }
        Sequence {
            generation: self.generation,
            expiry: self.expiry.merge(&other.expiry),
            clock,
            elems,
        }
    }

    /// The places of the elements, in list order (what [`SequenceOps`] name).
    pub fn places(&self) -> Vec<Place> {
        self.elems.keys().cloned().collect()
    }

    /// The list the Redis view shows at `now` (`None`: expired or empty).
    pub fn live_entry(&self, now: Timestamp) -> Option<Entry> {
        if self.expiry.passed(now) {
            return None;
        }
        let data = list_data::encode(self.elems.values().map(|v| &v[..]))?;
        Some(Entry {
            data: Bytes::from(data),
            expiry: self.expiry.deadline(),
            kind: Kind::List,
        })
    }

    /// Applies `ops` at `actor` (see the module docs).
    pub fn apply(&mut self, actor: u64, ops: &SequenceOps) {
        for place in &ops.removes {
            self.elems.remove(place);
        }
        // The run's first element goes between its neighbours; the others extend its place,
        // so they stay together whatever another replica inserts there concurrently.
        let mut first: Option<Place> = None;
        for (k, v) in ops.values.iter().enumerate() {
            let c = self.clock.entry(actor).or_insert(0);
            *c = c.saturating_add(1);
            let mut place = match &first {
                None => between(ops.after.as_deref(), ops.before.as_deref()),
                Some(f) => {
                    let mut p = f.clone();
                    p.push(u32::try_from(k).unwrap_or(u32::MAX));
                    p
                }
            };
            place.extend_from_slice(&dot_digits(actor, *c));
            first.get_or_insert_with(|| place.clone());
            self.elems.insert(place, v.clone());
        }
    }

    /// Its stored bytes (flags `0x02 | 0x08`, and its expiry).
    pub fn encode(&self) -> Bytes {
        let state = postcard::to_allocvec(self).unwrap_or_default();
        crdt_envelope(BITS, self.expiry.deadline(), &state)
    }

    /// A stored list; `None` when `raw` is none or is damaged.
    pub fn decode(raw: &[u8]) -> Option<Sequence> {
        let (expiry, state) = open_crdt(raw, BITS)?;
        match postcard::take_from_bytes::<Sequence>(state) {
            Ok((mut s, [])) => {
                s.expiry = s.expiry.with_deadline(expiry);
                Some(s)
            }
            _ => None,
        }
    }
}

/// Whether stored bytes are a list's CRDT (one byte looked at).
pub fn is_sequence(raw: &[u8]) -> bool {
    raw.first()
        .is_some_and(|f| f & (FLAG_CRDT | FLAG_HASH | TYPE_BITS) == FLAG_CRDT | BITS)
}

/// Every list among `values` merged (`None`: there is none that decodes).
pub fn merge_all<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Sequence> {
    values
        .filter(|v| is_sequence(v))
        .filter_map(Sequence::decode)
        .reduce(|a, b| a.merge(&b))
}

/// The places a plain list of `n` elements is given (by index alone, with actor 0, so the
/// front end that read it and the coordinator that converts it agree).
pub fn plain_places(n: usize) -> Vec<Place> {
    (0..n as u64)
        .map(|i| {
            let digit = ((i + 1).saturating_mul(STEP)).min(DIGITS - 1) as u32;
            let mut p = vec![digit];
            p.extend_from_slice(&dot_digits(0, i + 1));
            p
        })
        .collect()
}

/// A CRDT of a plain list (see [`plain_places`]).
fn from_plain(e: &Entry, at: Stamp) -> Sequence {
    let mut s = Sequence::over(at);
    s.expiry = s.expiry.with_deadline(e.expiry);
    let values = list_data::decode(&e.data).unwrap_or_default();
    s.clock.insert(0, values.len() as u64);
    for (place, v) in plain_places(values.len()).into_iter().zip(values) {
        s.elems.insert(place, Bytes::copy_from_slice(v));
    }
    s
}

/// The list `ops` continue in `local` (this replica's object, read under the key's lock) at
/// `now`, and whether the key showed one.
///
/// # Errors
/// `wrong_type` when the key shows another type.
fn continued(
    local: Option<&Object>,
    now: Timestamp,
    live: LiveCheck,
) -> Result<Sequence, ReplicationError> {
    let Some(latest) = local.and_then(lww_sibling) else {
        return Ok(Sequence::default());
    };
    let at = sibling_stamp(latest);
    let Content::Value(v) = &latest.content else {
        return Ok(Sequence::over(at));
    };
    if is_sequence(v) {
        let values = local.into_iter().flat_map(|o| o.values()).map(|v| &v[..]);
        return Ok(match merge_all(values) {
            Some(s) if s.live_entry(now).is_some() => s,
            _ => Sequence::over(at),
        });
    }
    let live_other = match live(v, local, now) {
        Some(live) => live,
        None => match Entry::live(Some(v.clone()), now) {
            Some(e) if e.kind == Kind::List => return Ok(from_plain(&e, at)),
            Some(_) => true,
            None => false,
        },
    };
    if live_other {
        return Err(ReplicationError::WrongType);
    }
    Ok(Sequence::over(at))
}

/// Whether ops from a peer are well formed: places short enough, the neighbours in order.
fn well_formed(ops: &SequenceOps) -> bool {
    let places = ops.removes.iter().chain(&ops.after).chain(&ops.before);
    let short = places
        .clone()
        .all(|p| p.len() > 4 && p.len() <= MAX_PLACE && p.last().is_some_and(|&d| d != 0));
    let ordered = match (&ops.after, &ops.before) {
        (Some(a), Some(b)) => a < b,
        _ => true,
    };
    short && ordered
}

/// The content `ops` at `actor` write over `local`, or `None` when they change nothing.
///
/// # Errors
/// `wrong_type` over another type; `invalid_context` for a peer's malformed places.
pub fn update(
    local: Option<&Object>,
    actor: u64,
    ops: &SequenceOps,
    now: Timestamp,
    live: LiveCheck,
) -> Result<Option<Content>, ReplicationError> {
    if !well_formed(ops) {
        return Err(ReplicationError::InvalidContext {
            reason: "list places out of order or of a bad length".into(),
        });
    }
    let mut state = continued(local, now, live)?;
    let before = state.clone();
    state.apply(actor, ops);
    if state == before {
        return Ok(None);
    }
    if state.places().iter().any(|p| p.len() > MAX_PLACE) {
        return Err(ReplicationError::InvalidContext {
            reason: "list places grew too deep; rewrite the list".into(),
        });
    }
    Ok(Some(Content::Value(state.encode())))
}

/// What a command changed in a list: from the elements it read (`before`, at `places`) to
/// what it stored (`after`, `None`: deleted), as one run replaced (see the module docs).
///
/// # Errors
/// `wrong_type` when either side is no list.
pub fn diff(
    before: Option<&Entry>,
    places: &[Place],
    after: Option<&Entry>,
) -> Result<SequenceOps, ReplicationError> {
    let values = |e: Option<&Entry>| -> Result<Vec<Bytes>, ReplicationError> {
        match e {
            None => Ok(Vec::new()),
            Some(e) if e.kind != Kind::List => Err(ReplicationError::WrongType),
            Some(e) => Ok(list_data::decode(&e.data)
                .map_err(|_| ReplicationError::Storage {
                    reason: "a stored list does not decode".into(),
                })?
                .into_iter()
                .map(Bytes::copy_from_slice)
                .collect()),
        }
    };
    let (old, new) = (values(before)?, values(after)?);
    if old.len() != places.len() {
        return Err(ReplicationError::Storage {
            reason: "a list's places do not match its elements".into(),
        });
    }
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let room = old.len().min(new.len()) - prefix;
    let suffix = old
        .iter()
        .rev()
        .zip(new.iter().rev())
        .take(room)
        .take_while(|(a, b)| a == b)
        .count();
    let old_end = old.len() - suffix;
    Ok(SequenceOps {
        removes: places[prefix..old_end].to_vec(),
        after: prefix.checked_sub(1).map(|i| places[i].clone()),
        before: places.get(old_end).cloned(),
        values: new[prefix..new.len() - suffix].to_vec(),
    })
}

#[cfg(test)]
mod tests;
