//! The map a Redis hash is on an eventual bucket: a map CRDT with field-level merge, as
//! Riak's maps are, so hash commands made concurrently at replicas in different DCs are
//! merged field by field, never lost to a last-writer-wins choice of one whole hash.
//!
//! **State** ([`Map`]), per key:
//! - per field, a last-writer-wins **register** `(stamp, value or removed)`. A stamp is
//!   `(µs from the coordinating node's clock, actor node id)`, ordered by time then actor; a
//!   new stamp is above every stamp the field had at its coordinator (a write that saw
//!   another supersedes it even when its node's clock is behind). `HSET` writes a value,
//!   `HDEL` a removal (a field tombstone): concurrent writes of one field resolve by stamp,
//!   so a removal wins only if it is newer;
//! - per field, an optional embedded **PN-counter** (`HINCRBY`): [`super::counter::Counter`]
//!   itself, started at the integer of the register it continues and named by that
//!   register's stamp (zero when the field never had one). Increments at different actors
//!   over the same register all count. The field shows the counter while it continues the
//!   field's register; an `HSET` or `HDEL` with a newer stamp supersedes it (the increments
//!   it had not seen are dropped, as a `SET` supersedes a key's counter);
//! - the hash's **expiry**: a register of its own, stamped when it was set (the write that
//!   started the hash, or `EXPIRE`/`PERSIST` through `Dispatch::update`); field writes keep it,
//!   so a concurrent `EXPIRE` and `HSET` keep the `EXPIRE`'s TTL;
//! - a **generation**: the stamp of the value the map started over (zero: the key had none,
//!   so maps started concurrently on an absent key merge). A map started over a newer value
//!   (after an expiry, a delete or a string) supersedes the older map's fields entirely.
//!
//! **Merge** is per field the register with the greater stamp and the counter with the
//! greater stamp (the counters' join when the stamps are equal), the expiry with the greater
//! stamp, and the whole map of the greater generation. It is commutative, associative and
//! idempotent (a join), so any order of replication, read repair and anti-entropy gives the
//! same hash. What a key with several sibling maps shows is their merge ([`merge_all`]).
//!
//! **Reads.** The hash is the fields whose register holds a value or whose counter is live;
//! an empty map (every field removed) reads as absent, as an empty Redis hash does not exist.
//! When siblings of different types coexist (a `SET` concurrent with an `HSET`), the key
//! shows the type of the sibling last-writer-wins keeps, as with counters
//! (`super::counter::resolve`).
//!
//! **Field tombstones are bounded.** When its coordinator writes a map, it drops every field
//! removal older than the map's newest stamp by more than `map_tombstone_horizon` (a node
//! setting, default 24 h), and every counter a newer register superseded. A map therefore
//! holds its live fields plus the fields removed within the horizon before its last write,
//! and one `(actor, p, n)` per node that incremented a live field. The horizon must exceed
//! how long a concurrent write can stay unseen (replication, hinted handoff, anti-entropy):
//! a write older than a dropped removal, arriving after it, would bring its field back.
//!
//! **Stored** in the value envelope with flags `0x02 | 0x04` (CRDT, hash) and `0x01` with
//! the expiry when it has one: `[flags][expiry µs BE if 0x01][postcard state]`
//! (`super::counter::crdt_envelope`). Plain readers refuse it (`Entry::decode`); a damaged
//! state decodes to `None`, never a panic.

use super::counter::{self, Counter, IncrError};
pub use super::shared::Stamp;
use super::shared::{crdt_envelope, lww_sibling, open_crdt, sibling_stamp};
use super::types::{HashOps, HashReply};
use crate::error::ReplicationError;
use bytes::Bytes;
use meridian_cluster::dvv::{Content, Object};
use meridian_core::Timestamp;
use meridian_core::envelope::{Entry, FLAG_CRDT, FLAG_HASH, Kind};
use meridian_core::int::parse_i64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One field's state. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Field {
    /// The last write: its stamp and value (`None`: removed). `None`: never written.
    reg: Option<(Stamp, Option<Bytes>)>,
    /// An increment counter and the stamp of the register it continues.
    counter: Option<(Stamp, Counter)>,
}

impl Field {
    /// The register's stamp (zero: never written).
    fn reg_at(&self) -> Stamp {
        self.reg.as_ref().map_or_else(Stamp::default, |r| r.0)
    }

    /// The counter, if it continues the field's register (an HINCRBY after the last write).
    fn live_counter(&self) -> Option<&Counter> {
        let at = self.reg_at();
        self.counter
            .as_ref()
            .filter(|(c, _)| *c >= at)
            .map(|(_, c)| c)
    }

    /// The field's value (`None`: absent or removed).
    fn value(&self) -> Option<Bytes> {
        match self.live_counter() {
            Some(c) => Some(Bytes::from(c.value().to_string())),
            None => self.reg.as_ref().and_then(|r| r.1.clone()),
        }
    }

    fn is_live(&self) -> bool {
        self.live_counter().is_some() || self.reg.as_ref().is_some_and(|r| r.1.is_some())
    }

    /// The newest stamp it holds.
    fn newest(&self) -> Stamp {
        let c = self.counter.as_ref().map_or_else(Stamp::default, |c| c.0);
        self.reg_at().max(c)
    }

    /// The join of two fields' states.
    fn merge(&self, other: &Field) -> Field {
        let reg = match (&self.reg, &other.reg) {
            (Some(a), Some(b)) => Some(a.max(b).clone()),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        let counter = match (&self.counter, &other.counter) {
            (Some((sa, a)), Some((sb, b))) if sa == sb => Some((*sa, a.merge(b))),
            (Some(a), Some(b)) => Some(if a.0 > b.0 { a.clone() } else { b.clone() }),
            (a, b) => a.clone().or_else(|| b.clone()),
        };
        Field { reg, counter }
    }
}

/// A hash's map CRDT. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Map {
    /// The stamp of the value the map started over (zero: none).
    generation: Stamp,
    /// When the expiry was set.
    expiry_at: Stamp,
    /// The expiry (µs since the epoch); stored in the envelope's header.
    #[serde(skip)]
    expiry: Option<u64>,
    /// The fields, removed ones included.
    fields: BTreeMap<Bytes, Field>,
}

impl Map {
    /// An empty map started over the value `at` names.
    fn over(at: Stamp) -> Map {
        Map {
            generation: at,
            expiry_at: at,
            ..Map::default()
        }
    }

    /// The join of two states (see the module docs).
    pub fn merge(&self, other: &Map) -> Map {
        if self.generation != other.generation {
            return if self.generation > other.generation {
                self.clone()
            } else {
                other.clone()
            };
        }
        let (expiry_at, expiry) =
            (self.expiry_at, self.expiry).max((other.expiry_at, other.expiry));
        let mut fields = self.fields.clone();
        for (k, f) in &other.fields {
            let merged = match fields.get(k) {
                Some(mine) => mine.merge(f),
                None => f.clone(),
            };
            fields.insert(k.clone(), merged);
        }
        Map {
            generation: self.generation,
            expiry_at,
            expiry,
            fields,
        }
    }

    /// The live fields and their values, in field order.
    pub fn fields(&self) -> BTreeMap<Bytes, Bytes> {
        self.fields
            .iter()
            .filter_map(|(k, f)| Some((k.clone(), f.value()?)))
            .collect()
    }

    /// The hash's expiry.
    pub fn expiry(&self) -> Option<u64> {
        self.expiry
    }

    /// Sets the hash's expiry, stamped `at` (`EXPIRE`, `PERSIST`).
    pub fn set_expiry(&mut self, expiry: Option<u64>, at: Stamp) {
        self.expiry = expiry;
        self.expiry_at = at.max(Stamp {
            ts: self.expiry_at.ts.saturating_add(1),
            id: at.id,
        });
    }

    /// The hash the Redis view shows at `now`: `None` when it expired or has no field.
    pub fn live_entry(&self, now: Timestamp) -> Option<Entry> {
        if self.expiry.is_some_and(|at| now.0 > at) {
            return None;
        }
        let fields = self.fields();
        if fields.is_empty() {
            return None;
        }
        Some(Entry {
            data: Bytes::from(meridian_core::hash::encode_map(&fields)),
            expiry: self.expiry,
            kind: Kind::Hash,
        })
    }

    /// The newest stamp in the map.
    fn newest(&self) -> Stamp {
        self.fields
            .values()
            .map(Field::newest)
            .fold(self.generation.max(self.expiry_at), Stamp::max)
    }

    /// A stamp for a write of `field` by `actor` at `now_us`: above every stamp the field
    /// holds, so the write supersedes what its coordinator saw.
    fn next_stamp(&self, field: &[u8], actor: u32, now_us: u64) -> Stamp {
        let floor = self.fields.get(field).map_or(0, |f| f.newest().ts);
        Stamp {
            ts: now_us.max(floor.saturating_add(1)),
            id: u64::from(actor),
        }
    }

    fn is_live(&self, field: &[u8]) -> bool {
        self.fields.get(field).is_some_and(Field::is_live)
    }

    /// Writes `value` (`None`: removes) to `field`, stamped above what it held.
    fn write(&mut self, field: &Bytes, value: Option<Bytes>, actor: u32, now_us: u64) {
        let at = self.next_stamp(field, actor, now_us);
        let f = self.fields.entry(field.clone()).or_default();
        f.reg = Some((at, value));
        // Superseded by the newer register.
        f.counter = None;
    }

    /// Applies `ops` at `actor`; returns whether the state changed and the command's answer.
    pub fn apply(
        &mut self,
        actor: u32,
        ops: &HashOps,
        now_us: u64,
    ) -> Result<(bool, HashReply), IncrError> {
        Ok(match ops {
            HashOps::Set(pairs) => {
                let mut added = 0;
                for (field, value) in pairs {
                    if !self.is_live(field) {
                        added += 1;
                    }
                    self.write(field, Some(value.clone()), actor, now_us);
                }
                (!pairs.is_empty(), HashReply::Added(added))
            }
            HashOps::SetNx { field, value } => {
                if self.is_live(field) {
                    (false, HashReply::Set(false))
                } else {
                    self.write(field, Some(value.clone()), actor, now_us);
                    (true, HashReply::Set(true))
                }
            }
            HashOps::Del(fields) => {
                let mut removed = 0;
                for field in fields {
                    if self.is_live(field) {
                        removed += 1;
                        self.write(field, None, actor, now_us);
                    }
                }
                (removed > 0, HashReply::Removed(removed))
            }
            HashOps::IncrBy { field, delta } => {
                let f = self.fields.entry(field.clone()).or_default();
                let at = f.reg_at();
                let (at, mut next) = match f.counter.as_ref().filter(|(c, _)| *c >= at) {
                    Some((at, c)) => (*at, c.clone()),
                    None => {
                        let base = match f.reg.as_ref().and_then(|r| r.1.as_ref()) {
                            Some(v) => parse_i64(v).ok_or(IncrError::HashNotAnInteger)?,
                            None => 0,
                        };
                        (at, Counter::starting_at(base))
                    }
                };
                let value = next.add(actor, *delta)?;
                f.counter = Some((at, next));
                (true, HashReply::Value(value))
            }
        })
    }

    /// Drops the field removals older than the newest stamp by more than `horizon_us`, and
    /// the counters newer registers superseded (see the module docs).
    pub fn prune(&mut self, horizon_us: u64) {
        let newest = self.newest().ts;
        self.fields.retain(|_, f| {
            if f.counter.as_ref().is_some_and(|(c, _)| *c < f.reg_at()) {
                f.counter = None;
            }
            match (&f.reg, &f.counter) {
                (Some((at, None)), None) => at.ts.saturating_add(horizon_us) >= newest,
                _ => true,
            }
        });
    }

    /// Its stored bytes (flags `0x02 | 0x04`, and its expiry).
    pub fn encode(&self) -> Bytes {
        let state = postcard::to_allocvec(self).unwrap_or_default();
        crdt_envelope(FLAG_HASH, self.expiry, &state)
    }

    /// A stored map; `None` when `raw` is no map or is damaged.
    pub fn decode(raw: &[u8]) -> Option<Map> {
        let (expiry, state) = open_crdt(raw, FLAG_HASH)?;
        match postcard::take_from_bytes::<Map>(state) {
            Ok((mut m, [])) => {
                m.expiry = expiry;
                Some(m)
            }
            _ => None,
        }
    }
}

/// Whether stored bytes are a map (one byte looked at).
pub fn is_map(raw: &[u8]) -> bool {
    raw.first()
        .is_some_and(|f| f & (FLAG_CRDT | FLAG_HASH) == FLAG_CRDT | FLAG_HASH)
}

/// Every map among `values` merged (`None`: there is none that decodes).
pub fn merge_all<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Map> {
    values
        .filter(|v| is_map(v))
        .filter_map(Map::decode)
        .reduce(|a, b| a.merge(&b))
}

/// The map a hash command continues in `local` (this replica's object, read under the key's
/// lock) at `now`: the merged maps when the key shows a hash map; a map of a plain hash's
/// fields (every replica that saw the same plain hash builds the same map); an empty map
/// over an expired, deleted or empty value, or over nothing.
///
/// # Errors
/// `wrong_type` when the key shows a string (plain or counter).
pub fn continued(local: Option<&Object>, now: Timestamp) -> Result<Map, ReplicationError> {
    let Some(latest) = local.and_then(lww_sibling) else {
        return Ok(Map::default());
    };
    let at = sibling_stamp(latest);
    let Content::Value(v) = &latest.content else {
        return Ok(Map::over(at));
    };
    if is_map(v) {
        let values = local.into_iter().flat_map(|o| o.values()).map(|v| &v[..]);
        return Ok(match merge_all(values) {
            Some(m) if m.expiry.is_none_or(|e| now.0 <= e) => m,
            // Expired: a new hash, over it.
            _ => Map::over(at),
        });
    }
    if !counter::is_counter(v) && counter::crdt_live(v, local, now).is_some() {
        return match counter::crdt_live(v, local, now) {
            Some(true) => Err(ReplicationError::WrongType),
            _ => Ok(Map::over(at)),
        };
    }
    if counter::is_counter(v) {
        return match Counter::decode(v) {
            Some((_, expiry)) if expiry.is_none_or(|e| now.0 <= e) => {
                Err(ReplicationError::WrongType)
            }
            _ => Ok(Map::over(at)),
        };
    }
    match Entry::live(Some(v.clone()), now) {
        Some(e) if e.kind == Kind::Hash => {
            let mut m = Map::over(at);
            m.expiry = e.expiry;
            // A damaged plain hash is replaced, as a value that does not decode reads absent.
            for (k, v) in meridian_core::hash::decode(&e.data).unwrap_or_default() {
                let field = Field {
                    reg: Some((at, Some(v))),
                    counter: None,
                };
                m.fields.insert(k, field);
            }
            Ok(m)
        }
        Some(_) => Err(ReplicationError::WrongType),
        None => Ok(Map::over(at)),
    }
}

/// The content a hash command `ops` at `actor` writes over `local` (this replica's object,
/// read under the key's lock), or `None` when it changes nothing (`HDEL` of absent fields,
/// `HSETNX` of a present one), and the command's answer. Removals older than the map's
/// newest write by more than `horizon_us` are dropped.
///
/// # Errors
/// `wrong_type` over a string; `HINCRBY`'s errors (a field that is no integer, overflow).
pub fn update(
    local: Option<&Object>,
    actor: u32,
    ops: &HashOps,
    now: Timestamp,
    horizon_us: u64,
) -> Result<(Option<Content>, HashReply), ReplicationError> {
    let mut map = continued(local, now)?;
    let (changed, reply) = map
        .apply(actor, ops, now.0)
        .map_err(ReplicationError::Incr)?;
    if !changed {
        return Ok((None, reply));
    }
    map.prune(horizon_us);
    Ok((Some(Content::Value(map.encode())), reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eventual::counter::tests::object;
    use proptest::prelude::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_owned())
    }

    fn set(pairs: &[(&str, &str)]) -> HashOps {
        HashOps::Set(pairs.iter().map(|(f, v)| (b(f), b(v))).collect())
    }

    fn incr(field: &str, delta: i64) -> HashOps {
        HashOps::IncrBy {
            field: b(field),
            delta,
        }
    }

    fn shown(m: &Map) -> Vec<(String, String)> {
        m.fields()
            .into_iter()
            .map(|(k, v)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn commands_answer_as_redis_does() {
        let mut m = Map::default();
        assert_eq!(
            m.apply(1, &set(&[("a", "1"), ("b", "2"), ("a", "3")]), 10),
            Ok((true, HashReply::Added(2)))
        );
        assert_eq!(shown(&m), pairs(&[("a", "3"), ("b", "2")]));
        assert_eq!(
            m.apply(1, &set(&[("a", "4")]), 11),
            Ok((true, HashReply::Added(0)))
        );
        let nx = |f: &str| HashOps::SetNx {
            field: b(f),
            value: b("nx"),
        };
        assert_eq!(m.apply(1, &nx("a"), 12), Ok((false, HashReply::Set(false))));
        assert_eq!(m.apply(1, &nx("c"), 12), Ok((true, HashReply::Set(true))));
        assert_eq!(
            m.apply(1, &incr("b", 5), 13),
            Ok((true, HashReply::Value(7)))
        );
        assert_eq!(
            m.apply(1, &incr("n", -2), 13),
            Ok((true, HashReply::Value(-2)))
        );
        assert_eq!(
            m.apply(1, &incr("a", 1), 13),
            Ok((true, HashReply::Value(5)))
        );
        assert_eq!(
            m.apply(1, &incr("c", 1), 13),
            Err(IncrError::HashNotAnInteger)
        );
        let del = HashOps::Del(vec![b("a"), b("zz"), b("a")]);
        assert_eq!(m.apply(1, &del, 14), Ok((true, HashReply::Removed(1))));
        let del = HashOps::Del(vec![b("zz")]);
        assert_eq!(m.apply(1, &del, 14), Ok((false, HashReply::Removed(0))));
        assert_eq!(shown(&m), pairs(&[("b", "7"), ("c", "nx"), ("n", "-2")]));
        // HSET over a counted field supersedes its counter.
        m.apply(1, &set(&[("b", "x")]), 15).unwrap();
        assert_eq!(m.fields()[&b("b")], b("x"));
        let mut big = Map::default();
        big.apply(1, &incr("f", i64::MAX), 1).unwrap();
        assert_eq!(big.apply(2, &incr("f", 1), 1), Err(IncrError::Overflow));
    }

    #[test]
    fn concurrent_hsets_of_different_fields_at_different_actors_all_survive() {
        let start = Map::default();
        let (mut x, mut y) = (start.clone(), start.clone());
        x.apply(1, &set(&[("a", "1")]), 100).unwrap();
        y.apply(2, &set(&[("b", "2")]), 50).unwrap();
        assert_eq!(shown(&x.merge(&y)), pairs(&[("a", "1"), ("b", "2")]));
        // The same field: the greater (ts, actor) wins, whichever merges first.
        x.apply(1, &set(&[("c", "x")]), 200).unwrap();
        y.apply(2, &set(&[("c", "y")]), 200).unwrap();
        assert_eq!(x.merge(&y).fields()[&b("c")], b("y"));
        assert_eq!(y.merge(&x).fields()[&b("c")], b("y"));
    }

    #[test]
    fn hdel_against_a_concurrent_hset_resolves_by_timestamp() {
        let mut base = Map::default();
        base.apply(1, &set(&[("f", "old")]), 10).unwrap();
        let del = HashOps::Del(vec![b("f")]);
        // The removal is newer: removed.
        let (mut x, mut y) = (base.clone(), base.clone());
        x.apply(1, &del, 30).unwrap();
        y.apply(2, &set(&[("f", "new")]), 20).unwrap();
        assert_eq!(x.merge(&y).fields().get(&b("f")), None);
        assert_eq!(x.merge(&y).live_entry(Timestamp(0)), None, "empty: absent");
        // The write is newer: it stays.
        let (mut x, mut y) = (base.clone(), base.clone());
        x.apply(1, &del, 20).unwrap();
        y.apply(2, &set(&[("f", "new")]), 30).unwrap();
        assert_eq!(x.merge(&y).fields()[&b("f")], b("new"));
    }

    #[test]
    fn concurrent_hincrbys_all_count_over_nothing_and_over_a_value() {
        // Over an absent field: every actor's counter continues the same (zero) register.
        let (mut x, mut y) = (Map::default(), Map::default());
        x.apply(1, &incr("n", 3), 100).unwrap();
        y.apply(2, &incr("n", 4), 200).unwrap();
        x.apply(1, &incr("n", -1), 300).unwrap();
        assert_eq!(x.merge(&y).fields()[&b("n")], b("6"));
        // Over an integer both saw.
        let mut base = Map::default();
        base.apply(3, &set(&[("n", "10")]), 50).unwrap();
        let (mut x, mut y) = (base.clone(), base.clone());
        x.apply(1, &incr("n", 1), 100).unwrap();
        y.apply(2, &incr("n", 2), 100).unwrap();
        let m = x.merge(&y);
        assert_eq!(m.fields()[&b("n")], b("13"));
        // Continued at the merge: the count goes on from 13.
        let mut z = m.clone();
        assert_eq!(
            z.apply(2, &incr("n", 1), 400),
            Ok((true, HashReply::Value(14)))
        );
        assert_eq!(z.merge(&x).fields()[&b("n")], b("14"));
    }

    #[test]
    fn the_expiry_with_the_newest_stamp_wins_and_field_writes_keep_it() {
        let mut base = Map::default();
        base.apply(1, &set(&[("a", "1")]), 10).unwrap();
        let (mut x, mut y) = (base.clone(), base.clone());
        x.set_expiry(Some(5_000), Stamp { ts: 20, id: 1 });
        y.apply(2, &set(&[("b", "2")]), 30).unwrap();
        let m = x.merge(&y);
        assert_eq!(m.expiry(), Some(5_000));
        assert_eq!(m.live_entry(Timestamp(5_000)).unwrap().expiry, Some(5_000));
        assert_eq!(m.live_entry(Timestamp(5_001)), None);
        assert_eq!(m.live_entry(Timestamp(1)).unwrap().kind, Kind::Hash);
        let round = Map::decode(&m.encode()).unwrap();
        assert_eq!(round, m);
    }

    #[test]
    fn removals_older_than_the_horizon_are_dropped() {
        let mut m = Map::default();
        m.apply(1, &set(&[("a", "1"), ("b", "2")]), 10).unwrap();
        m.apply(1, &HashOps::Del(vec![b("a")]), 20).unwrap();
        m.prune(1_000);
        assert_eq!(m.fields.len(), 2, "within the horizon: kept");
        m.apply(1, &set(&[("b", "3")]), 2_000).unwrap();
        m.prune(1_000);
        assert_eq!(m.fields.len(), 1);
        assert_eq!(shown(&m), pairs(&[("b", "3")]));
    }

    #[test]
    fn damaged_bytes_decode_to_none_and_plain_readers_refuse_maps() {
        let mut m = Map::default();
        m.apply(1, &set(&[("a", "1")]), 10).unwrap();
        m.apply(1, &incr("n", 2), 10).unwrap();
        m.set_expiry(Some(99), Stamp { ts: 11, id: 1 });
        let raw = m.encode();
        assert_eq!(raw[0], FLAG_CRDT | FLAG_HASH | 0x01);
        assert!(is_map(&raw) && !counter::is_counter(&raw));
        assert!(Entry::decode(raw.clone()).is_err());
        assert_eq!(Counter::decode(&raw), None);
        assert_eq!(Map::decode(&raw), Some(m));
        for cut in 0..raw.len() {
            assert_eq!(Map::decode(&raw[..cut]), None, "{cut}");
        }
        let mut trailing = raw.to_vec();
        trailing.push(0);
        assert_eq!(Map::decode(&trailing), None);
        assert_eq!(Map::decode(&Counter::default().encode(None)), None);
        assert_eq!(
            Map::decode(&[FLAG_CRDT | FLAG_HASH, 0xff, 0xff, 0xff]),
            None
        );
    }

    proptest! {
        /// Arbitrary bytes after a map's flags never panic.
        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut raw = vec![FLAG_CRDT | FLAG_HASH];
            raw.extend(tail);
            let _ = Map::decode(&raw);
        }
    }

    fn arb_stamp() -> impl Strategy<Value = Stamp> {
        (0u64..4, 0u64..3).prop_map(|(ts, id)| Stamp { ts, id })
    }

    fn arb_field() -> impl Strategy<Value = Field> {
        let reg = proptest::option::of((arb_stamp(), proptest::option::of("[xy]")));
        let counter = proptest::option::of((
            arb_stamp(),
            -3i64..3,
            proptest::collection::btree_map(0u32..3, (0u64..5, 0u64..5), 0..3),
        ));
        (reg, counter).prop_map(|(reg, counter)| Field {
            reg: reg.map(|(at, v)| (at, v.map(Bytes::from))),
            counter: counter.map(|(at, base, entries)| {
                let mut c = Counter::starting_at(base);
                for (actor, (p, n)) in entries {
                    c.add(actor, p as i64).unwrap();
                    c.add(actor, -(n as i64)).unwrap();
                }
                (at, c)
            }),
        })
    }

    fn arb_map() -> impl Strategy<Value = Map> {
        (
            0u64..2,
            arb_stamp(),
            proptest::option::of(0u64..3),
            proptest::collection::btree_map("[abc]", arb_field(), 0..4),
        )
            .prop_map(|(g, expiry_at, expiry, fields)| Map {
                generation: Stamp { ts: g, id: 0 },
                expiry_at,
                expiry,
                fields: fields
                    .into_iter()
                    .map(|(k, f)| (Bytes::from(k), f))
                    .collect(),
            })
    }

    proptest! {
        /// The merge is a join: commutative, associative, idempotent.
        #[test]
        fn merge_is_a_join(a in arb_map(), b in arb_map(), c in arb_map()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
            prop_assert_eq!(a.merge(&a), a.clone());
            // And it survives the stored form.
            let ab = a.merge(&b);
            prop_assert_eq!(Map::decode(&ab.encode()), Some(ab));
        }

        /// Commands at different actors from one shared state: every field written at one
        /// actor only survives, and every increment of a shared field counts.
        #[test]
        fn concurrent_commands_at_different_actors_all_survive(
            start in arb_map(),
            ops in proptest::collection::vec((0u32..3, -5i64..5), 1..12),
        ) {
            let mut start = start;
            // A shared integer field every actor increments.
            start.fields.remove(&b("n"));
            let mut replicas: Vec<Map> = (0..3).map(|_| start.clone()).collect();
            let mut want = 0;
            for (i, (actor, d)) in ops.iter().enumerate() {
                let r = &mut replicas[*actor as usize];
                r.apply(*actor, &incr("n", *d), 100 + i as u64).unwrap();
                let own = format!("own{actor}-{i}");
                r.apply(*actor, &set(&[(own.as_str(), "v")]), 100 + i as u64).unwrap();
                want += d;
            }
            let merged = replicas.iter().fold(start.clone(), |m, r| m.merge(r));
            let fields = merged.fields();
            prop_assert_eq!(fields.get(&b("n")), Some(&Bytes::from(want.to_string())));
            for (i, (actor, _)) in ops.iter().enumerate() {
                let own = b(&format!("own{actor}-{i}"));
                prop_assert!(fields.contains_key(&own));
            }
        }
    }

    fn shows(o: &Object, now: Timestamp) -> Option<Entry> {
        let values: Vec<Bytes> = o.values().cloned().collect();
        let latest = o
            .siblings()
            .iter()
            .filter(|s| matches!(s.content, Content::Value(_)))
            .enumerate()
            .max_by_key(|(_, s)| (s.meta.ts_us, s.dot))?
            .0;
        counter::resolve(&values, latest, now)
    }

    #[test]
    fn key_level_updates_merge_siblings_and_refuse_strings() {
        let now = Timestamp(1_000);
        let h = 1 << 40;
        let content = |local: Option<&Object>, actor, ops: &HashOps| {
            update(local, actor, ops, now, h).unwrap().0.unwrap()
        };
        let a = content(None, 1, &set(&[("a", "1")]));
        let b2 = content(None, 2, &set(&[("b", "2")]));
        let o = object(vec![(a, 5), (b2, 6)]);
        let e = shows(&o, now).unwrap();
        assert_eq!(e.kind, Kind::Hash);
        let fields = meridian_core::hash::decode(&e.data).unwrap();
        assert_eq!(fields.len(), 2);
        // A full read shows one merged hash.
        let (all, latest) = counter::show(o.values().cloned().collect(), 1, now);
        assert_eq!((all, latest), (vec![e.data.clone()], Some(0)));
        // A command over both siblings continues their merge.
        let (c, reply) = update(Some(&o), 1, &set(&[("a", "9"), ("c", "3")]), now, h).unwrap();
        assert_eq!(reply, HashReply::Added(1));
        let Some(Content::Value(raw)) = c else {
            panic!()
        };
        assert_eq!(Map::decode(&raw).unwrap().fields().len(), 3);
        // Nothing to do: nothing written.
        let (c, reply) = update(Some(&o), 1, &HashOps::Del(vec![b("zz")]), now, h).unwrap();
        assert_eq!((c, reply), (None, HashReply::Removed(0)));
        // WRONGTYPE over a string and over a counter, both ways.
        let plain = Content::Value(Entry::new(b("s")).encode());
        let o = object(vec![(plain, 5)]);
        assert_eq!(
            update(Some(&o), 1, &set(&[("a", "1")]), now, h),
            Err(ReplicationError::WrongType)
        );
        let (c, _) = counter::increment(None, 1, 1, now).unwrap();
        let o = object(vec![(c, 5)]);
        assert_eq!(
            update(Some(&o), 1, &incr("a", 1), now, h),
            Err(ReplicationError::WrongType)
        );
        let m = content(None, 1, &set(&[("a", "1")]));
        let o = object(vec![(m, 5)]);
        assert_eq!(
            counter::increment(Some(&o), 1, 1, now),
            Err(ReplicationError::WrongType)
        );
        // A plain hash is continued field by field.
        let plain = Entry::hash(Bytes::from(meridian_core::hash::encode_map(
            &[(b("p"), b("1"))].into_iter().collect(),
        )));
        let o = object(vec![(Content::Value(plain.encode()), 5)]);
        assert_eq!(
            counter::increment(Some(&o), 1, 1, now),
            Err(ReplicationError::WrongType)
        );
        let (c, reply) = update(Some(&o), 1, &incr("p", 4), now, h).unwrap();
        assert_eq!(reply, HashReply::Value(5));
        let Some(Content::Value(raw)) = c else {
            panic!()
        };
        assert_eq!(Map::decode(&raw).unwrap().fields()[&b("p")], b("5"));
    }

    #[test]
    fn an_expired_hash_starts_again_and_its_old_fields_lose() {
        let h = 1 << 40;
        let mut m = Map::default();
        m.apply(1, &set(&[("old", "1")]), 10).unwrap();
        m.set_expiry(Some(100), Stamp { ts: 11, id: 1 });
        let o = object(vec![(Content::Value(m.encode()), 20)]);
        assert!(shows(&o, Timestamp(100)).is_some());
        assert_eq!(shows(&o, Timestamp(101)), None);
        let (c, reply) = update(Some(&o), 1, &set(&[("new", "2")]), Timestamp(200), h).unwrap();
        assert_eq!(reply, HashReply::Added(1));
        let Some(Content::Value(raw)) = c else {
            panic!()
        };
        let fresh = Map::decode(&raw).unwrap();
        assert_eq!(fresh.expiry(), None);
        // A concurrent sibling of the expired hash does not bring its fields back.
        assert_eq!(shown(&fresh.merge(&m)), pairs(&[("new", "2")]));
    }
}
