//! The stored form of a transactional value: `[flags][expiry µs, big endian, if flag 0x01]
//! [data]` — the same envelope the standalone node's keyspace stores — so Redis expiry
//! (EX/PX/EXPIRE/TTL) travels with the value through transactions, and every front end (RESP,
//! HTTP, the dispatch facade) reads the same bytes the same way.

use bytes::{Buf, Bytes};

const FLAG_EXPIRY: u8 = 0x01;

/// A value and its absolute expiry (µs since the epoch; `None`: persistent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub data: Bytes,
    /// When it expires: it is gone once `now > expiry`.
    pub expiry: Option<u64>,
}

impl Entry {
    /// A persistent value.
    pub fn new(data: Bytes) -> Entry {
        Entry { data, expiry: None }
    }

    /// Whether it has expired at `now_us`.
    pub fn is_expired(&self, now_us: u64) -> bool {
        self.expiry.is_some_and(|at| now_us > at)
    }

    /// The stored bytes.
    pub fn encode(&self) -> Bytes {
        let header = if self.expiry.is_some() { 9 } else { 1 };
        let mut v = Vec::with_capacity(self.data.len() + header);
        match self.expiry {
            Some(at) => {
                v.push(FLAG_EXPIRY);
                v.extend_from_slice(&at.to_be_bytes());
            }
            None => v.push(0),
        }
        v.extend_from_slice(&self.data);
        Bytes::from(v)
    }

    /// Decodes stored bytes (no copy of the data); `None` if they are not an envelope.
    pub fn decode(mut raw: Bytes) -> Option<Entry> {
        match raw.first() {
            Some(0) => {
                raw.advance(1);
                Some(Entry {
                    data: raw,
                    expiry: None,
                })
            }
            Some(&FLAG_EXPIRY) if raw.len() >= 9 => {
                let mut at = [0u8; 8];
                at.copy_from_slice(&raw[1..9]);
                raw.advance(9);
                Some(Entry {
                    data: raw,
                    expiry: Some(u64::from_be_bytes(at)),
                })
            }
            _ => None,
        }
    }

    /// The live entry of stored bytes at `now_us`: `None` when absent, expired or corrupt.
    pub fn live(raw: Option<Bytes>, now_us: u64) -> Option<Entry> {
        raw.and_then(Entry::decode)
            .filter(|e| !e.is_expired(now_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_expires() {
        let e = Entry::new(Bytes::from("v"));
        assert_eq!(&e.encode()[..], b"\0v");
        assert_eq!(Entry::decode(e.encode()), Some(e));
        let t = Entry {
            data: Bytes::from("x"),
            expiry: Some(100),
        };
        assert_eq!(Entry::decode(t.encode()), Some(t.clone()));
        assert!(Entry::live(Some(t.encode()), 100).is_some());
        assert!(Entry::live(Some(t.encode()), 101).is_none());
        assert!(Entry::decode(Bytes::from_static(&[7, 1])).is_none());
        assert!(Entry::decode(Bytes::new()).is_none());
    }
}
