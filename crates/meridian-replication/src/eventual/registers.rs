//! The HyperLogLog a Redis key is on an eventual bucket: its 16384 registers, merged by
//! maximum — what Redis's own PFMERGE does — so elements PFADDed concurrently at replicas in
//! different DCs are all counted, never lost to a last-writer-wins choice of one whole HLL.
//!
//! **State** ([`Registers`]), per key: the non-zero registers (index, value), ascending; the
//! key's expiry (a register of its own, stamped, as a map's); and a generation (the stamp of
//! the value it started over, so an HLL started after a delete or over another value
//! supersedes the older one). The register list is canonical — the same registers are the
//! same bytes at every replica — so anti-entropy finds merged replicas equal.
//!
//! **Merge** is each register's maximum, the expiry with the greater stamp, and the whole
//! state of the greater generation: commutative, associative and idempotent.
//!
//! **Writes.** PFADD runs in the Redis layer over the HLL the front end read
//! ([`crate::Dispatch::register_update`]); the registers it raised go to the key's
//! coordinator, which raises its own to them under the key's lock. PFADD's reply (whether a
//! register changed) is the front end's, over what it read.
//!
//! **Reads** show Redis's own bytes ([`meridian_core::hll`]): a sparse HLL built by raising
//! the registers in index order (dense past `hll-sparse-max-bytes`), the cache marked stale.
//! So PFCOUNT, GET, DUMP and a client that parses the HLL see an HLL of exactly these
//! registers.
//!
//! **Stored** in the value envelope with flags `0x02` (CRDT) and type bits `0x28`, `0x01`
//! with the expiry: `[flags][expiry µs BE if 0x01][postcard state]`. Plain readers refuse it
//! (`Entry::decode`); a damaged state decodes to `None`, never a panic.

use super::shared::{
    Expiring, Expiry, LiveCheck, Stamp, crdt_envelope, lww_sibling, open_crdt, sibling_stamp,
};
use crate::error::ReplicationError;
use bytes::Bytes;
use meridian_cluster::dvv::{Content, Object};
use meridian_core::Timestamp;
use meridian_core::envelope::{Entry, FLAG_CRDT, FLAG_HASH, Kind, TYPE_BITS};
use meridian_core::hll::{self, Hll, REGISTERS};
use serde::{Deserialize, Serialize};

/// The envelope's type bits of a register CRDT (a value that shows as a string).
const BITS: u8 = 0x28;

/// The largest value a register holds (6 bits).
const REGISTER_MAX: u8 = 63;

/// An HLL's CRDT. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registers {
    /// The stamp of the value it started over (zero: none).
    generation: Stamp,
    /// Its expiry.
    expiry: Expiry,
    /// The non-zero registers, strictly ascending by index.
    regs: Vec<(u16, u8)>,
}

impl Expiring for Registers {
    fn expiry_register(&self) -> &Expiry {
        &self.expiry
    }

    fn expiry_register_mut(&mut self) -> &mut Expiry {
        &mut self.expiry
    }
}

impl Registers {
    fn over(at: Stamp) -> Registers {
        Registers {
            generation: at,
            expiry: Expiry::over(at),
            ..Registers::default()
        }
    }

    /// Raises its registers to `other`'s (each register's maximum); whether any rose.
    fn raise(&mut self, other: &[(u16, u8)]) -> bool {
        let mut out = Vec::with_capacity(self.regs.len().max(other.len()));
        let (mut i, mut j) = (0, 0);
        let mut rose = false;
        while i < self.regs.len() || j < other.len() {
            let (mine, theirs) = (self.regs.get(i), other.get(j));
            let next = match (mine, theirs) {
                (Some(&x), Some(&y)) if x.0 == y.0 => {
                    rose |= y.1 > x.1;
                    (i, j) = (i + 1, j + 1);
                    (x.0, x.1.max(y.1))
                }
                (Some(&x), Some(&y)) if x.0 < y.0 => {
                    i += 1;
                    x
                }
                (Some(&x), None) => {
                    i += 1;
                    x
                }
                (_, Some(&y)) => {
                    rose = true;
                    j += 1;
                    y
                }
                (None, None) => break,
            };
            out.push(next);
        }
        self.regs = out;
        rose
    }

    /// The join of two states (see the module docs).
    pub fn merge(&self, other: &Registers) -> Registers {
        if self.generation != other.generation {
            return if self.generation > other.generation {
                self.clone()
            } else {
                other.clone()
            };
        }
        let mut out = self.clone();
        out.raise(&other.regs);
        out.expiry = self.expiry.merge(&other.expiry);
        out
    }

    /// The HLL the Redis view shows at `now` (`None`: expired): Redis's bytes of these
    /// registers (see the module docs).
    pub fn live_entry(&self, now: Timestamp) -> Option<Entry> {
        if self.expiry.passed(now) {
            return None;
        }
        let mut h = Hll::new_sparse();
        for &(i, v) in &self.regs {
            // A new HLL covers every register: raising one cannot fail.
            let _ = h.raise(usize::from(i), v);
        }
        h.invalidate_cache();
        Some(Entry {
            data: Bytes::copy_from_slice(h.bytes()),
            expiry: self.expiry.deadline(),
            kind: Kind::String,
        })
    }

    /// Its stored bytes (flags `0x02 | 0x28`, and its expiry).
    pub fn encode(&self) -> Bytes {
        let state = postcard::to_allocvec(self).unwrap_or_default();
        crdt_envelope(BITS, self.expiry.deadline(), &state)
    }

    /// A stored HLL; `None` when `raw` is none or is damaged (registers out of order or of
    /// range included).
    pub fn decode(raw: &[u8]) -> Option<Registers> {
        let (expiry, state) = open_crdt(raw, BITS)?;
        match postcard::take_from_bytes::<Registers>(state) {
            Ok((mut r, [])) if well_formed(&r.regs) => {
                r.expiry = r.expiry.with_deadline(expiry);
                Some(r)
            }
            _ => None,
        }
    }
}

/// Whether registers are strictly ascending, in range and non-zero.
fn well_formed(regs: &[(u16, u8)]) -> bool {
    regs.windows(2).all(|w| w[0].0 < w[1].0)
        && regs
            .iter()
            .all(|&(i, v)| usize::from(i) < REGISTERS && (1..=REGISTER_MAX).contains(&v))
}

/// Whether stored bytes are an HLL's CRDT (one byte looked at).
pub fn is_registers(raw: &[u8]) -> bool {
    raw.first()
        .is_some_and(|f| f & (FLAG_CRDT | FLAG_HASH | TYPE_BITS) == FLAG_CRDT | BITS)
}

/// Every HLL among `values` merged (`None`: there is none that decodes).
pub fn merge_all<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Registers> {
    values
        .filter(|v| is_registers(v))
        .filter_map(Registers::decode)
        .reduce(|a, b| a.merge(&b))
}

/// The non-zero registers of Redis HLL bytes `v`, ascending; `None` when `v` is no valid HLL.
pub fn registers_of(v: &[u8]) -> Option<Vec<(u16, u8)>> {
    hll::encoding(v).ok()?;
    let mut max = [0u8; REGISTERS];
    hll::merge_into(&mut max, v).ok()?;
    Some(
        max.iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .filter_map(|(i, v)| Some((u16::try_from(i).ok()?, *v)))
            .collect(),
    )
}

/// The registers of `after` above those of `before` (a PFADD's raise), or `None` when
/// `after` is no HLL.
pub fn raised(before: Option<&Entry>, after: &Entry) -> Option<Vec<(u16, u8)>> {
    let new = registers_of(&after.data)?;
    let old = before
        .and_then(|e| registers_of(&e.data))
        .unwrap_or_default();
    let mut old = old.into_iter().peekable();
    Some(
        new.into_iter()
            .filter(|&(i, v)| {
                while old.next_if(|o| o.0 < i).is_some() {}
                old.peek().is_none_or(|o| o.0 != i || o.1 < v)
            })
            .collect(),
    )
}

/// The HLL a PFADD continues in `local` (this replica's object, read under the key's lock)
/// at `now`, and whether the key already showed one: the merged HLLs; a plain HLL string's
/// registers; a new HLL over an expired, deleted or absent value.
///
/// # Errors
/// `wrong_type` when the key shows another value (Redis: not a valid HyperLogLog).
fn continued(
    local: Option<&Object>,
    now: Timestamp,
    live: LiveCheck,
) -> Result<(Registers, bool), ReplicationError> {
    let Some(latest) = local.and_then(lww_sibling) else {
        return Ok((Registers::default(), false));
    };
    let at = sibling_stamp(latest);
    let Content::Value(v) = &latest.content else {
        return Ok((Registers::over(at), false));
    };
    if is_registers(v) {
        let values = local.into_iter().flat_map(|o| o.values()).map(|v| &v[..]);
        return Ok(match merge_all(values) {
            Some(r) if !r.expiry.passed(now) => (r, true),
            _ => (Registers::over(at), false),
        });
    }
    let live_other = match live(v, local, now) {
        Some(live) => live,
        None => match Entry::live(Some(v.clone()), now) {
            Some(e) => match registers_of(&e.data).filter(|_| e.kind == Kind::String) {
                Some(regs) => {
                    let mut r = Registers::over(at);
                    (r.expiry, r.regs) = (r.expiry.with_deadline(e.expiry), regs);
                    return Ok((r, true));
                }
                None => true,
            },
            None => false,
        },
    };
    if live_other {
        return Err(ReplicationError::WrongType);
    }
    Ok((Registers::over(at), false))
}

/// The content raising `local`'s HLL to `regs` writes (`None`: nothing changed).
///
/// # Errors
/// `wrong_type` over another value; `invalid_context` for registers out of order or range
/// (a hostile peer's).
pub fn update(
    local: Option<&Object>,
    regs: &[(u16, u8)],
    now: Timestamp,
    live: LiveCheck,
) -> Result<Option<Content>, ReplicationError> {
    if !well_formed(regs) {
        return Err(ReplicationError::InvalidContext {
            reason: "HLL registers out of order or out of range".into(),
        });
    }
    let (mut state, existed) = continued(local, now, live)?;
    if !state.raise(regs) && existed {
        return Ok(None);
    }
    Ok(Some(Content::Value(state.encode())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn regs_strategy() -> impl Strategy<Value = Vec<(u16, u8)>> {
        proptest::collection::btree_map(0u16..16384, 1u8..=63, 0..50)
            .prop_map(|m| m.into_iter().collect())
    }

    #[test]
    fn shows_redis_bytes_of_its_registers() {
        let mut r = Registers::default();
        assert!(r.raise(&[(3, 5), (16383, 1)]));
        assert!(!r.raise(&[(3, 2)]));
        let e = r.live_entry(Timestamp(0)).unwrap();
        assert_eq!(e.kind, Kind::String);
        assert_eq!(registers_of(&e.data), Some(vec![(3, 5), (16383, 1)]));
        assert_eq!(Registers::decode(&r.encode()), Some(r.clone()));
        assert!(is_registers(&r.encode()));
        assert!(!super::super::elements::is_elements(&r.encode()));
    }

    #[test]
    fn raised_names_only_what_rose() {
        let entry = |regs: &[(u16, u8)]| {
            let mut r = Registers::default();
            r.raise(regs);
            r.live_entry(Timestamp(0)).unwrap()
        };
        let before = entry(&[(1, 2), (5, 5)]);
        let after = entry(&[(1, 2), (5, 6), (9, 1)]);
        assert_eq!(raised(Some(&before), &after), Some(vec![(5, 6), (9, 1)]));
        assert_eq!(raised(None, &before), Some(vec![(1, 2), (5, 5)]));
        assert_eq!(raised(None, &Entry::new(Bytes::from_static(b"nope"))), None);
    }

    #[test]
    fn hostile_registers_are_refused() {
        for bad in [
            &[(5u16, 1u8), (5, 2)][..],
            &[(16384, 1)],
            &[(1, 64)],
            &[(1, 0)],
        ] {
            assert!(
                update(None, bad, Timestamp(0), |_, _, _| None).is_err(),
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn merge_is_a_join(a in regs_strategy(), b in regs_strategy(), c in regs_strategy()) {
            let st = |regs: &Vec<(u16, u8)>| {
                let mut r = Registers::default();
                r.raise(regs);
                r
            };
            let (a, b, c) = (st(&a), st(&b), st(&c));
            prop_assert_eq!(a.merge(&b), b.merge(&a));
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
            prop_assert_eq!(a.merge(&a), a.clone());
            // The same as Redis's PFMERGE of the two.
            let mut max = [0u8; REGISTERS];
            for s in [&a, &b] {
                hll::merge_into(&mut max, &s.live_entry(Timestamp(0)).unwrap().data).unwrap();
            }
            let merged = registers_of(&a.merge(&b).live_entry(Timestamp(0)).unwrap().data).unwrap();
            let want: Vec<(u16, u8)> = max.iter().enumerate().filter(|(_, v)| **v != 0).map(|(i, v)| (i as u16, *v)).collect();
            prop_assert_eq!(merged, want);
        }

        #[test]
        fn damaged_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..80)) {
            let mut raw = raw;
            if let Some(f) = raw.first_mut() {
                *f = FLAG_CRDT | BITS;
            }
            let _ = Registers::decode(&raw).map(|r| r.live_entry(Timestamp(0)));
        }
    }
}
