//! What every CRDT of an eventual key shares (counters, maps, sets and sorted sets, HLLs):
//! the stamps last-writer-wins orders writes by, the envelope a CRDT state is stored in, and
//! the sibling a CRDT write continues. A leaf: it names no CRDT.

use bytes::{BufMut, Bytes, BytesMut};
use meridian_cluster::dvv::{Dot, Object, Sibling};
use meridian_core::Timestamp;
use meridian_core::envelope::{Entry, FLAG_CRDT, FLAG_EXPIRY};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// When a write happened, for last-writer-wins: µs from the coordinating node's clock, then a
/// tie-breaker (the actor's node id; for a generation, the hash of the superseded sibling's
/// dot).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Stamp {
    /// µs since the epoch.
    pub ts: u64,
    /// The tie-breaker.
    pub id: u64,
}

/// The stored bytes of a CRDT state: `[0x02 | kind | 0x01 if an expiry][expiry µs BE]
/// [state]`, `kind` being `0` (a counter) or [`FLAG_HASH`] (a map).
pub fn crdt_envelope(kind: u8, expiry: Option<u64>, state: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(state.len() + 9);
    match expiry {
        Some(at) => {
            b.put_u8(FLAG_CRDT | kind | FLAG_EXPIRY);
            b.put_u64(at);
        }
        None => b.put_u8(FLAG_CRDT | kind),
    }
    b.put_slice(state);
    b.freeze()
}

/// The expiry and state of [`crdt_envelope`]'s bytes of a CRDT of `kind`; `None` when `raw`
/// is another kind of value or damaged.
pub fn open_crdt(raw: &[u8], kind: u8) -> Option<(Option<u64>, &[u8])> {
    let flags = *raw.first()?;
    if flags & !FLAG_EXPIRY != FLAG_CRDT | kind {
        return None;
    }
    if flags & FLAG_EXPIRY != 0 {
        let at: [u8; 8] = raw.get(1..9)?.try_into().ok()?;
        Some((Some(u64::from_be_bytes(at)), raw.get(9..)?))
    } else {
        Some((None, raw.get(1..)?))
    }
}

/// The sibling last-writer-wins keeps in `o`: greatest `(meta.ts_us, dot)`, tombstones
/// included.
pub fn lww_sibling(o: &Object) -> Option<&Sibling> {
    o.siblings().iter().max_by_key(|s| (s.meta.ts_us, s.dot))
}

/// A stable 64-bit name for a dot (FNV-1a over its fields): every replica that sees the same
/// sibling names a counter started over it the same way.
pub fn dot_id(d: &Dot) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for word in [
        u64::from(d.replica.partition.0),
        u64::from(d.replica.node.0),
        u64::from(d.replica.incarnation),
        d.replica.epoch,
        d.counter,
    ] {
        for b in word.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    // 0 is "no base".
    h.max(1)
}

/// The stamp naming sibling `s` (a CRDT started over it): its write time and dot.
pub fn sibling_stamp(s: &Sibling) -> Stamp {
    Stamp {
        ts: s.meta.ts_us,
        id: dot_id(&s.dot),
    }
}

/// Whether the CRDT a sibling's value is (`None`: it is none) shows a live value at the
/// given time, its siblings in the object merged: what a CRDT of one kind asks of the
/// others before it answers `wrong_type`. The counter module's `crdt_live`, which knows every
/// kind, is passed in by the coordinator, so no CRDT module imports the others.
pub type LiveCheck = fn(&[u8], Option<&Object>, Timestamp) -> Option<bool>;

/// A CRDT holding an [`Expiry`]: its expiry is read and set the one way, whatever the type.
pub trait Expiring {
    /// Its expiry register.
    fn expiry_register(&self) -> &Expiry;
    /// Its expiry register, to set.
    fn expiry_register_mut(&mut self) -> &mut Expiry;

    /// The deadline.
    fn expiry(&self) -> Option<u64> {
        self.expiry_register().deadline()
    }

    /// Sets the expiry, stamped `at` (`EXPIRE`, `PERSIST`), above the one it replaces.
    fn set_expiry(&mut self, expiry: Option<u64>, at: Stamp) {
        self.expiry_register_mut().set(expiry, at);
    }
}

/// A CRDT's expiry: a last-writer-wins register of its own, so an `EXPIRE` concurrent with
/// element writes keeps its TTL. Its stamp is part of the state; the deadline travels in the
/// envelope's header (`crdt_envelope`), where the expiry sweep reads it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expiry {
    /// When it was set.
    at: Stamp,
    /// The deadline (µs since the epoch).
    #[serde(skip)]
    deadline: Option<u64>,
}

impl Expiry {
    /// No deadline, stamped `at` (a CRDT started over the value `at` names).
    pub fn over(at: Stamp) -> Expiry {
        Expiry { at, deadline: None }
    }

    /// The deadline.
    pub fn deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// Whether it passed at `now` (Redis: once `now > deadline`).
    pub fn passed(&self, now: Timestamp) -> bool {
        self.deadline.is_some_and(|d| now.0 > d)
    }

    /// Sets the deadline, stamped `at` and above the stamp it replaces (`EXPIRE`, `PERSIST`).
    pub fn set(&mut self, deadline: Option<u64>, at: Stamp) {
        self.deadline = deadline;
        self.at = at.max(Stamp {
            ts: self.at.ts.saturating_add(1),
            id: at.id,
        });
    }

    /// The deadline read from a stored envelope's header, keeping the stamp.
    pub fn with_deadline(self, deadline: Option<u64>) -> Expiry {
        Expiry { deadline, ..self }
    }

    /// The register with the greater stamp.
    pub fn merge(&self, other: &Expiry) -> Expiry {
        if (self.at, self.deadline) >= (other.at, other.deadline) {
            *self
        } else {
            *other
        }
    }
}

/// The pointwise maximum of two causal clocks (per actor, the highest counter seen): the
/// clock of an observed-remove CRDT's join.
pub fn join_clocks(a: &BTreeMap<u64, u64>, b: &BTreeMap<u64, u64>) -> BTreeMap<u64, u64> {
    let mut out = a.clone();
    for (actor, c) in b {
        let mine = out.entry(*actor).or_insert(0);
        *mine = (*mine).max(*c);
    }
    out
}

/// The expiry (µs) of a stored value of an eventual key, if it has one: a CRDT state's from
/// its envelope's header (the state is not decoded), a plain envelope's from its own.
pub fn stored_expiry(raw: &Bytes) -> Option<u64> {
    match raw.first() {
        Some(f) if f & FLAG_CRDT != 0 => {
            let at: [u8; 8] = raw.get(1..9)?.try_into().ok()?;
            (f & FLAG_EXPIRY != 0).then(|| u64::from_be_bytes(at))
        }
        _ => Entry::decode(raw.clone()).ok().and_then(|e| e.expiry),
    }
}
