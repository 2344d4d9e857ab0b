//! Collections the keyspace holds in memory: hashes, lists, sets and sorted sets kept as typed
//! objects ([`meridian_redis::collection`]) in their key's stripe, changed in place by the
//! commands that own them, so a push, an add or a pop costs O(1) or O(log n) instead of
//! rewriting the whole collection in the engine.
//!
//! What it guarantees:
//! - **the engine still knows every key**: a held key's engine value is a *held marker*
//!   (`meridian_core::envelope::FLAG_HELD`: its type and expiry, no data), so SCAN, KEYS,
//!   DBSIZE, TYPE filters, the TTL index and the active expirer see it as any key. The object
//!   lives in the stripe's `objects` map, read and changed only under the stripe's lock; the
//!   marker and the object are written together, under that lock.
//! - **one stored form for every other reader**: a read of a held key's bytes (DUMP, RENAME,
//!   COPY, SORT, OBJECT...) materializes the object's encoding, kept until the object next
//!   changes, so an unchanged collection is encoded once; TYPE, EXISTS and TTL read the
//!   marker alone (`View::header`), and EXPIRE and PERSIST rewrite only the marker and the
//!   object's expiry (`View::retime`). A write of bytes to a held key (SET over it, RENAME
//!   onto it, a MULTI that stored it as bytes) drops the object.
//! - **writes are writes**: a change in place counts for WATCH, readies the key for blocked
//!   clients, and updates the memory estimate; a collection left empty is deleted.
//! - **only where nothing else needs the bytes**: objects are held on the in-memory engine
//!   with zero retention. A durable engine (which must persist every write) or snapshot reads
//!   at past times (which need every version) keep collections as stored bytes.

use super::*;
use meridian_core::envelope::{decode_held, encode_held};
use meridian_redis::collection::Collection;

/// A collection held in a stripe.
pub(super) struct Held {
    pub(super) obj: Box<dyn Collection>,
    /// The key's expiry (also in the engine's marker).
    pub(super) expiry: Option<u64>,
    /// The encoding last materialized, until the object changes.
    encoded: Option<Bytes>,
    /// The memory last accounted for it.
    memory: usize,
}

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("kind", &self.obj.kind())
            .field("expiry", &self.expiry)
            .field("memory", &self.memory)
            .finish_non_exhaustive()
    }
}

impl Held {
    fn is_expired(&self, now: Timestamp) -> bool {
        self.expiry.is_some_and(|at| now.0 > at)
    }

    /// The collection and its expiry, for a command that may change it: the encoding last
    /// materialized is forgotten, as it may no longer be the collection's.
    pub(super) fn open(&mut self) -> (&mut dyn Collection, Option<u64>) {
        self.encoded = None;
        (self.obj.as_mut(), self.expiry)
    }
}

/// What the engine stores at a key: a plain envelope, or the marker of a held collection.
#[derive(Debug)]
pub(super) enum Stored {
    Plain(Entry),
    Held { kind: Kind, expiry: Option<u64> },
}

impl Stored {
    /// Decodes an engine version: `None` for no version or a tombstone.
    pub(super) fn decode(v: Option<Version>) -> Result<Option<Stored>> {
        if let Some(Version {
            value: Some(raw), ..
        }) = &v
            && let Some((kind, expiry)) = decode_held(raw)
        {
            return Ok(Some(Stored::Held { kind, expiry }));
        }
        Ok(decode_version(v)?.map(Stored::Plain))
    }

    pub(super) fn expiry(&self) -> Option<u64> {
        match self {
            Stored::Plain(e) => e.expiry,
            Stored::Held { expiry, .. } => *expiry,
        }
    }

    pub(super) fn kind(&self) -> Kind {
        match self {
            Stored::Plain(e) => e.kind,
            Stored::Held { kind, .. } => *kind,
        }
    }

    pub(super) fn is_expired(&self, now: Timestamp) -> bool {
        self.expiry().is_some_and(|at| now.0 > at)
    }
}

/// The type and expiry of stored bytes (an envelope or a held marker), for listings.
pub(super) fn header(raw: &Bytes) -> Option<(Kind, Option<u64>)> {
    decode_held(raw).or_else(|| {
        meridian_redis::view::decode(raw.clone())
            .ok()
            .map(|e| (e.kind, e.expiry))
    })
}

impl Keyspace {
    /// What the engine stores at `key` (lock-free).
    pub(super) fn stored(&self, key: &[u8]) -> Result<Option<Stored>> {
        Stored::decode(self.engine.get_latest(key)?)
    }

    /// The stored form of the collection `s` holds at `key`.
    pub(super) fn materialize(&self, s: &mut Stripe, key: &[u8]) -> Result<Entry> {
        let Some(h) = s.objects.get_mut(key) else {
            return Err(RedisError::Corrupt("held marker without its collection"));
        };
        let data = h
            .encoded
            .get_or_insert_with(|| Bytes::from(h.obj.encode()))
            .clone();
        Ok(Entry {
            data,
            expiry: h.expiry,
            kind: h.obj.kind(),
        })
    }

    /// Forgets the collection `s` holds at `key`, if any (its engine value is being
    /// replaced or deleted).
    pub(super) fn drop_held(&self, s: &mut Stripe, key: &[u8]) {
        if !s.objects.is_empty()
            && let Some(h) = s.objects.remove(key)
        {
            self.held_bytes
                .fetch_sub(h.memory as i64, Ordering::Relaxed);
        }
    }

    /// The live collection `s` holds at `key`, deleting it first if it has expired.
    pub(super) fn held_mut<'s>(
        &self,
        s: &'s mut Stripe,
        key: &[u8],
        now: Timestamp,
    ) -> Result<Option<(&'s mut dyn Collection, Option<u64>)>> {
        if !s.objects.get(key).is_some_and(|h| h.is_expired(now)) {
            return Ok(s.objects.get_mut(key).map(Held::open));
        }
        self.expire_locked(s, key, now)?;
        self.count_expired(key);
        Ok(None)
    }

    /// Keeps `obj` as `key`'s value with `expiry`: writes its marker to the engine and
    /// records the write (WATCH, TTL index, memory).
    pub(super) fn hold(
        &self,
        s: &mut Stripe,
        key: &[u8],
        obj: Box<dyn Collection>,
        expiry: Option<u64>,
        now: Timestamp,
    ) -> Result<()> {
        self.horizon(now);
        let kind = obj.kind();
        let key = Bytes::copy_from_slice(key);
        self.engine
            .put(key.clone(), now, encode_held(kind, expiry))?;
        let memory = self.put_held(s, &key, obj, expiry);
        s.touch(&key);
        self.account_put(s, &key, entry_bytes(key.len(), memory), now);
        self.index_owned(s, key.clone(), expiry);
        self.blocking.touched(&key);
        Ok(())
    }

    /// Puts `obj` in `s` as `key`'s collection, replacing the one it held (the caller writes
    /// the marker); returns its memory.
    pub(super) fn put_held(
        &self,
        s: &mut Stripe,
        key: &[u8],
        mut obj: Box<dyn Collection>,
        expiry: Option<u64>,
    ) -> usize {
        self.drop_held(s, key);
        obj.settle();
        let memory = obj.memory();
        self.held_bytes.fetch_add(memory as i64, Ordering::Relaxed);
        let held = Held {
            obj,
            expiry,
            encoded: None,
            memory,
        };
        s.objects.insert(Bytes::copy_from_slice(key), held);
        memory
    }

    /// Records a change in place of the collection `s` holds at `key`: deletes the key if
    /// it is now empty, else counts the write for WATCH, the memory estimate and blocked
    /// clients.
    pub(super) fn held_changed(&self, s: &mut Stripe, key: &[u8], now: Timestamp) -> Result<()> {
        let Some(h) = s.objects.get_mut(key) else {
            return Ok(());
        };
        if h.obj.is_empty() {
            return self.delete_locked(s, key, now);
        }
        h.encoded = None;
        let (old, memory) = (h.memory, h.obj.memory());
        h.memory = memory;
        self.held_bytes
            .fetch_add(memory as i64 - old as i64, Ordering::Relaxed);
        s.touch(key);
        if self.tracking.load(Ordering::Relaxed) {
            self.record(
                s,
                &Bytes::copy_from_slice(key),
                entry_bytes(key.len(), memory),
                now,
            );
        }
        self.blocking.touched(key);
        Ok(())
    }

    /// EXPIRE or PERSIST of a held `key`: the marker and the object take the new expiry,
    /// the object is kept. Returns whether `s` holds `key`.
    pub(super) fn retime_held(
        &self,
        s: &mut Stripe,
        key: &[u8],
        expiry: Option<u64>,
        now: Timestamp,
    ) -> Result<bool> {
        let Some(h) = s.objects.get_mut(key) else {
            return Ok(false);
        };
        h.expiry = expiry;
        let marker = encode_held(h.obj.kind(), expiry);
        self.horizon(now);
        self.engine.put(Bytes::copy_from_slice(key), now, marker)?;
        s.touch(key);
        self.index(s, key, expiry);
        Ok(true)
    }

    /// The type and expiry of `key`'s live value, deleting it first if it has expired.
    pub(super) fn header_locked(
        &self,
        s: &mut Stripe,
        key: &[u8],
        now: Timestamp,
    ) -> Result<Option<(Kind, Option<u64>)>> {
        match self.stored(key)? {
            Some(st) if st.is_expired(now) => {
                self.expire_locked(s, key, now)?;
                self.count_expired(key);
                Ok(None)
            }
            Some(st) => Ok(Some((st.kind(), st.expiry()))),
            None => Ok(None),
        }
    }

    /// The memory `s` holds for `key`'s collection, if it holds one (MEMORY USAGE).
    pub(super) fn held_memory(&self, s: &Stripe, key: &[u8]) -> Option<usize> {
        s.objects.get(key).map(|h| h.obj.memory())
    }
}
