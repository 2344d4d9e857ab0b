//! The envelope every Meridian string value is stored in — `[flags][expiry µs, big endian,
//! if flag 0x01][data]` — shared by the single node's keyspace and by every bucket type of a
//! cluster, so Redis expiry (EX/PX/EXPIRE/TTL) travels with a value and every front end reads
//! the same bytes the same way. Decoding never copies the data: it is the stored allocation,
//! advanced past the header.

use crate::Timestamp;
use bytes::{Buf, Bytes};

const FLAG_EXPIRY: u8 = 0x01;

/// A decoded stored value: its data and absolute expiry (µs since the epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub data: Bytes,
    /// When it expires, if it does.
    pub expiry: Option<u64>,
}

/// Stored bytes that are not an envelope: why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadEnvelope(pub &'static str);

impl Entry {
    /// A persistent value.
    pub fn new(data: Bytes) -> Entry {
        Entry { data, expiry: None }
    }

    /// Whether the value has expired at `now` (Redis: once `now > expiry`).
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expiry.is_some_and(|at| now.0 > at)
    }

    /// The stored bytes.
    pub fn encode(&self) -> Bytes {
        encode(&self.data, self.expiry)
    }

    /// Decodes stored bytes in place.
    pub fn decode(mut raw: Bytes) -> Result<Entry, BadEnvelope> {
        match raw.first() {
            Some(0) => {
                raw.advance(1);
                Ok(Entry {
                    data: raw,
                    expiry: None,
                })
            }
            Some(&FLAG_EXPIRY) if raw.len() >= 9 => {
                let mut at = [0u8; 8];
                at.copy_from_slice(&raw[1..9]);
                raw.advance(9);
                Ok(Entry {
                    data: raw,
                    expiry: Some(u64::from_be_bytes(at)),
                })
            }
            Some(_) => Err(BadEnvelope("unknown envelope flags")),
            None => Err(BadEnvelope("empty envelope")),
        }
    }

    /// The live entry of stored bytes at `now`: `None` when absent, expired or not an
    /// envelope.
    pub fn live(raw: Option<Bytes>, now: Timestamp) -> Option<Entry> {
        raw.and_then(|r| Entry::decode(r).ok())
            .filter(|e| !e.is_expired(now))
    }
}

/// Encodes a value and its expiry.
pub fn encode(data: &[u8], expiry: Option<u64>) -> Bytes {
    // Exactly the needed capacity: `Bytes::from` a full Vec keeps the one allocation, while
    // spare capacity would make it allocate a second, shared header.
    let header = if expiry.is_some() { 9 } else { 1 };
    let mut v = Vec::with_capacity(data.len() + header);
    match expiry {
        Some(at) => {
            v.push(FLAG_EXPIRY);
            v.extend_from_slice(&at.to_be_bytes());
        }
        None => v.push(0),
    }
    v.extend_from_slice(data);
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_expires() {
        let e = Entry::new(Bytes::from("v"));
        assert_eq!(&e.encode()[..], b"\0v");
        assert_eq!(Entry::decode(e.encode()), Ok(e));
        let t = Entry {
            data: Bytes::from("x"),
            expiry: Some(100),
        };
        assert_eq!(&t.encode()[..9], &[1, 0, 0, 0, 0, 0, 0, 0, 100]);
        assert_eq!(Entry::decode(t.encode()), Ok(t.clone()));
        assert!(Entry::live(Some(t.encode()), Timestamp(100)).is_some());
        assert!(Entry::live(Some(t.encode()), Timestamp(101)).is_none());
        assert!(Entry::decode(Bytes::from_static(&[7, 1])).is_err());
        assert!(Entry::decode(Bytes::from_static(&[1, 0])).is_err());
        assert!(Entry::decode(Bytes::new()).is_err());
    }
}
