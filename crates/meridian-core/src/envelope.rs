//! The envelope every Meridian string value is stored in — `[flags][expiry µs, big endian,
//! if flag 0x01][data]` — shared by the single node's keyspace and by every bucket type of a
//! cluster, so Redis expiry (EX/PX/EXPIRE/TTL) travels with a value and every front end reads
//! the same bytes the same way. Decoding never copies the data: it is the stored allocation,
//! advanced past the header.

use crate::Timestamp;
use bytes::{Buf, Bytes};

/// Envelope flag: an 8-byte absolute expiry (µs since the epoch, big endian) follows.
pub const FLAG_EXPIRY: u8 = 0x01;
/// Envelope flag: a CRDT state of an eventual bucket, not a plain envelope.
pub const FLAG_CRDT: u8 = 0x02;
/// Envelope flag: the value is a Redis hash.
pub const FLAG_HASH: u8 = 0x04;
/// Envelope bits naming a collection type other than a hash (never set with [`FLAG_HASH`]):
/// `0x08` a list, `0x10` a set, `0x18` a sorted set, `0x20` a stream; the other values are
/// reserved.
pub const TYPE_BITS: u8 = 0x38;
/// Envelope flag of a *held marker*: the value is a collection the standalone keyspace keeps
/// in memory beside the engine, and the engine stores only its type and expiry
/// (`[flags][expiry if 0x01]`, no data). Never replicated or persisted; [`Entry::decode`]
/// refuses it, so a reader that does not know the keyspace's objects cannot mistake it for
/// an empty value.
pub const FLAG_HELD: u8 = 0x40;

/// The Redis type of a stored value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A string (Redis's `string`, counters included).
    #[default]
    String,
    /// A hash: the data is [`crate::hash::encode`]'s field list.
    Hash,
    /// A list (its encoding is the Redis layer's `lists` module's).
    List,
    /// A set (the Redis layer's `sets` module).
    Set,
    /// A sorted set (the Redis layer's `zsets` module).
    ZSet,
    /// A stream (the Redis layer's `streams` module).
    Stream,
}

impl Kind {
    /// The name Redis's `TYPE` answers.
    pub fn type_name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::Stream => "stream",
        }
    }

    /// Every type, in code order.
    pub const ALL: [Kind; 6] = [
        Kind::String,
        Kind::Hash,
        Kind::List,
        Kind::Set,
        Kind::ZSet,
        Kind::Stream,
    ];

    fn flag(self) -> u8 {
        match self {
            Kind::String => 0,
            Kind::Hash => FLAG_HASH,
            Kind::List => 0x08,
            Kind::Set => 0x10,
            Kind::ZSet => 0x18,
            Kind::Stream => 0x20,
        }
    }

    /// The type named by an envelope's flags, if any.
    fn from_flags(flags: u8) -> Option<Kind> {
        let bits = flags & (FLAG_HASH | TYPE_BITS);
        Kind::ALL.into_iter().find(|k| k.flag() == bits)
    }

    /// A stable number for this type, for messages between nodes ([`Kind::from_code`]).
    pub fn code(self) -> u8 {
        self.flag()
    }

    /// The type [`Kind::code`] gave `code`, if any.
    pub fn from_code(code: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.code() == code)
    }
}

/// A decoded stored value: its data, absolute expiry (µs since the epoch) and Redis type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub data: Bytes,
    /// When it expires, if it does.
    pub expiry: Option<u64>,
    /// Its Redis type.
    pub kind: Kind,
}

/// Stored bytes that are not an envelope: why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadEnvelope(pub &'static str);

impl Entry {
    /// A persistent value.
    pub fn new(data: Bytes) -> Entry {
        Entry {
            data,
            expiry: None,
            kind: Kind::String,
        }
    }

    /// A persistent hash of `data` ([`crate::hash::encode`]'s encoding).
    pub fn hash(data: Bytes) -> Entry {
        Entry {
            data,
            expiry: None,
            kind: Kind::Hash,
        }
    }

    /// Whether the value has expired at `now` (Redis: once `now > expiry`).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expiry.is_some_and(|at| now.0 > at)
    }

    /// The stored bytes.
    pub fn encode(&self) -> Bytes {
        encode_kind(self.kind, &self.data, self.expiry)
    }

    /// Decodes stored bytes in place.
    pub fn decode(mut raw: Bytes) -> Result<Entry, BadEnvelope> {
        let Some(&flags) = raw.first() else {
            return Err(BadEnvelope("empty envelope"));
        };
        if flags & !(FLAG_EXPIRY | FLAG_HASH | TYPE_BITS) != 0 {
            return Err(BadEnvelope("unknown envelope flags"));
        }
        let Some(kind) = Kind::from_flags(flags) else {
            return Err(BadEnvelope("unknown value type"));
        };
        let expiry = if flags & FLAG_EXPIRY != 0 {
            let Some(at) = raw.get(1..9) else {
                return Err(BadEnvelope("truncated expiry"));
            };
            let mut be = [0u8; 8];
            be.copy_from_slice(at);
            raw.advance(9);
            Some(u64::from_be_bytes(be))
        } else {
            raw.advance(1);
            None
        };
        Ok(Entry {
            data: raw,
            expiry,
            kind,
        })
    }

    /// The live entry of stored bytes at `now`: `None` when absent, expired or not an
    /// envelope.
    pub fn live(raw: Option<Bytes>, now: Timestamp) -> Option<Entry> {
        raw.and_then(|r| Entry::decode(r).ok())
            .filter(|e| !e.is_expired(now))
    }
}

/// Encodes the held marker ([`FLAG_HELD`]) of a collection of type `kind`.
pub fn encode_held(kind: Kind, expiry: Option<u64>) -> Bytes {
    let mut v = encode_kind(kind, &[], expiry).to_vec();
    v[0] |= FLAG_HELD;
    Bytes::from(v)
}

/// The type and expiry of a held marker; `None` when `raw` is not one (or is damaged).
pub fn decode_held(raw: &[u8]) -> Option<(Kind, Option<u64>)> {
    let (&flags, rest) = raw.split_first()?;
    if flags & FLAG_HELD == 0 || flags & !(FLAG_HELD | FLAG_EXPIRY | FLAG_HASH | TYPE_BITS) != 0 {
        return None;
    }
    let kind = Kind::from_flags(flags)?;
    let expiry = match (flags & FLAG_EXPIRY != 0, rest) {
        (true, [a, b, c, d, e, f, g, h]) => {
            Some(u64::from_be_bytes([*a, *b, *c, *d, *e, *f, *g, *h]))
        }
        (false, []) => None,
        _ => return None,
    };
    Some((kind, expiry))
}

/// Encodes a string value and its expiry.
pub fn encode(data: &[u8], expiry: Option<u64>) -> Bytes {
    encode_kind(Kind::String, data, expiry)
}

/// Encodes a value of type `kind` and its expiry.
pub fn encode_kind(kind: Kind, data: &[u8], expiry: Option<u64>) -> Bytes {
    // Exactly the needed capacity: `Bytes::from` a full Vec keeps the one allocation, while
    // spare capacity would make it allocate a second, shared header.
    let header = if expiry.is_some() { 9 } else { 1 };
    let mut v = Vec::with_capacity(data.len() + header);
    match expiry {
        Some(at) => {
            v.push(FLAG_EXPIRY | kind.flag());
            v.extend_from_slice(&at.to_be_bytes());
        }
        None => v.push(kind.flag()),
    }
    v.extend_from_slice(data);
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_codes_round_trip_and_unknown_codes_are_refused() {
        for k in [Kind::String, Kind::Hash] {
            assert_eq!(Kind::from_code(k.code()), Some(k));
        }
        assert_ne!(Kind::String.code(), Kind::Hash.code());
        assert_eq!(Kind::from_code(0xEE), None);
    }

    #[test]
    fn held_markers_round_trip_and_are_no_envelope() {
        for kind in Kind::ALL {
            for expiry in [None, Some(0), Some(u64::MAX)] {
                let m = encode_held(kind, expiry);
                assert_eq!(decode_held(&m), Some((kind, expiry)));
                assert!(Entry::decode(m.clone()).is_err());
            }
        }
        // A plain envelope, a truncated expiry or trailing bytes are no marker.
        assert_eq!(decode_held(&encode_kind(Kind::List, b"", None)), None);
        assert_eq!(decode_held(&[FLAG_HELD | FLAG_EXPIRY, 1, 2]), None);
        assert_eq!(decode_held(&[FLAG_HELD | 0x08, 0]), None);
        assert_eq!(decode_held(&[]), None);
    }

    #[test]
    fn round_trips_and_expires() {
        let e = Entry::new(Bytes::from("v"));
        assert_eq!(&e.encode()[..], b"\0v");
        assert_eq!(Entry::decode(e.encode()), Ok(e));
        let t = Entry {
            data: Bytes::from("x"),
            expiry: Some(100),
            kind: Kind::String,
        };
        assert_eq!(&t.encode()[..9], &[1, 0, 0, 0, 0, 0, 0, 0, 100]);
        assert_eq!(Entry::decode(t.encode()), Ok(t.clone()));
        assert!(Entry::live(Some(t.encode()), Timestamp(100)).is_some());
        assert!(Entry::live(Some(t.encode()), Timestamp(101)).is_none());
        assert!(Entry::decode(Bytes::from_static(&[7, 1])).is_err());
        assert!(Entry::decode(Bytes::from_static(&[1, 0])).is_err());
        assert!(Entry::decode(Bytes::new()).is_err());
        // A CRDT state is not a plain envelope.
        assert!(Entry::decode(Bytes::from_static(&[FLAG_CRDT, 1])).is_err());
    }

    #[test]
    fn a_hash_keeps_its_kind_with_and_without_expiry() {
        let h = Entry::hash(Bytes::from("fields"));
        assert_eq!(h.encode()[0], FLAG_HASH);
        assert_eq!(Entry::decode(h.encode()), Ok(h.clone()));
        let t = Entry {
            expiry: Some(7),
            ..h
        };
        assert_eq!(t.encode()[0], FLAG_HASH | FLAG_EXPIRY);
        assert_eq!(Entry::decode(t.encode()), Ok(t));
        assert_eq!(Kind::Hash.type_name(), "hash");
    }

    #[test]
    fn every_type_round_trips_and_unknown_type_bits_are_refused() {
        for kind in Kind::ALL {
            for expiry in [None, Some(9)] {
                let e = Entry {
                    data: Bytes::from("d"),
                    expiry,
                    kind,
                };
                assert_eq!(Entry::decode(e.encode()), Ok(e));
            }
        }
        // The hash bit with a collection type, and the reserved type values.
        for flags in [FLAG_HASH | 0x08, 0x28, 0x30, 0x38] {
            assert!(
                Entry::decode(Bytes::from(vec![flags, 1])).is_err(),
                "{flags:#x}"
            );
        }
    }
}
