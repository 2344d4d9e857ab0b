//! One replica's timeline records over a storage [`Engine`].
//!
//! A record of client key `k` is stored under `0xFF 't' ‖ k` (the reserved key space of
//! [`crate::object_store`], so eventual objects, hints and timeline records never collide, and
//! eventual anti-entropy and handoff scans never see timeline records). The value is
//! [`encode_record`]'s format.
//!
//! Guarantees:
//! - every read-modify-write of a key ([`TlStore::apply`], [`TlStore::write_with`]) runs under
//!   that key's stripe mutex, so a master's version assignment and a replica's merge never
//!   interleave with another write of the same key;
//! - [`TlStore::apply`] stores a record only when [`merge`] says so, so a replica never moves
//!   to a lower version, whatever order and how many times records arrive;
//! - each write first raises the engine's GC horizon to `now` (this store never reads old
//!   versions), as the object store does;
//! - every read applies the bucket's truncation mark ([`crate::truncation`]): a record whose
//!   generation began at or before it reads as a tombstone of its version, so merges still
//!   order it and the master's next write re-inserts the key in a newer generation.

use super::{Merge, Record, Version, decode_record_shared, encode_record, merge};
use crate::error::{ReplicationError, Result};
use crate::object_store::RESERVED_PREFIX;
use crate::truncation::marks::SharedMarks;
use bytes::Bytes;
use meridian_core::{Clock, Timestamp};
use meridian_storage::Engine;
use parking_lot::{Mutex, MutexGuard};
use std::ops::Bound;
use std::sync::Arc;

/// The prefix of timeline record keys: `0xFF 't'`.
pub const TIMELINE_PREFIX: [u8; 2] = [RESERVED_PREFIX, b't'];

const STRIPES: usize = 256;

/// The engine key of client key `key`.
pub fn record_key(key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(TIMELINE_PREFIX.len() + key.len());
    k.extend_from_slice(&TIMELINE_PREFIX);
    k.extend_from_slice(key);
    Bytes::from(k)
}

/// A page of records and where the next one starts (`None`: this was the last).
pub type RecordPage = (Vec<(Bytes, Record)>, Option<Bytes>);

/// A replica's timeline records. See the module docs.
#[derive(Debug)]
pub struct TlStore {
    engine: Arc<dyn Engine>,
    clock: Arc<dyn Clock>,
    stripes: Box<[Mutex<()>]>,
    marks: SharedMarks,
}

impl TlStore {
    /// A store over `engine`, stamping engine versions with `clock`.
    pub fn new(engine: Arc<dyn Engine>, clock: Arc<dyn Clock>) -> TlStore {
        TlStore {
            engine,
            clock,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            marks: SharedMarks::default(),
        }
    }

    /// This store, reading through `marks` (the node's truncation marks).
    pub fn with_marks(mut self, marks: SharedMarks) -> TlStore {
        self.marks = marks;
        self
    }

    /// Turns `r` (the record of `key`) into a tombstone of its version if its bucket's
    /// truncation mark hides it; returns whether it did.
    fn hide(&self, key: &[u8], r: &mut Record) -> bool {
        let hidden = !r.is_tombstone()
            && self
                .marks
                .read()
                .mark_for(key)
                .is_some_and(|mark| r.ver.generation <= mark);
        if hidden {
            r.content = super::Content::Tombstone;
        }
        hidden
    }

    fn stripe_of(&self, key: &[u8]) -> usize {
        let h = meridian_cluster::key_hash(b"t", key);
        (h as usize) & (STRIPES - 1)
    }

    fn lock(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        self.stripes[self.stripe_of(key)].lock()
    }

    fn read(&self, key: &[u8]) -> Result<Option<Record>> {
        let mut r = self.read_raw(key)?;
        if let Some(r) = r.as_mut() {
            self.hide(key, r);
        }
        Ok(r)
    }

    fn read_raw(&self, key: &[u8]) -> Result<Option<Record>> {
        let Some(v) = self.engine.get_latest(&record_key(key))? else {
            return Ok(None);
        };
        match v.value {
            Some(bytes) => {
                decode_record_shared(&bytes)
                    .map(Some)
                    .map_err(|e| ReplicationError::Storage {
                        reason: e.to_string(),
                    })
            }
            None => Ok(None),
        }
    }

    fn store(&self, key: &[u8], r: &Record) -> Result<()> {
        let now = self.clock.now();
        self.engine.set_gc_horizon(now);
        self.engine.put(record_key(key), now, encode_record(r))?;
        Ok(())
    }

    /// Forgets `key` if its record is still the tombstone of version `ver`; returns whether
    /// it did.
    pub fn reap_if_unchanged(&self, key: &[u8], ver: Version) -> Result<bool> {
        let _g = self.lock(key);
        match self.read(key)? {
            Some(r) if r.is_tombstone() && r.ver == ver => {}
            _ => return Ok(false),
        }
        let now = self.clock.now();
        self.engine.set_gc_horizon(now);
        self.engine.delete(record_key(key), now)?;
        Ok(true)
    }

    /// Stores the record of `key` as a tombstone if its bucket's truncation mark hides it (the
    /// sweep that frees a flushed bucket's storage); returns whether it did.
    pub fn prune(&self, key: &[u8]) -> Result<bool> {
        let _g = self.lock(key);
        let Some(mut r) = self.read_raw(key)? else {
            return Ok(false);
        };
        if !self.hide(key, &mut r) {
            return Ok(false);
        }
        self.store(key, &r)?;
        Ok(true)
    }

    /// When this replica stored its current record of `key` (its clock's time).
    pub fn stored_at(&self, key: &[u8]) -> Result<Option<Timestamp>> {
        Ok(self.engine.get_latest(&record_key(key))?.map(|v| v.ts))
    }

    /// The record of client key `key`, if this replica holds one.
    pub fn get(&self, key: &[u8]) -> Result<Option<Record>> {
        self.read(key)
    }

    /// Merges `incoming` into `key` (replication, catch-up): stores it iff [`merge`] says
    /// [`Merge::Apply`], and returns the verdict.
    pub fn apply(&self, key: &[u8], incoming: &Record) -> Result<Merge> {
        let _g = self.lock(key);
        let local = self.read(key)?;
        let m = merge(local.as_ref(), incoming);
        if m.applies() {
            self.store(key, incoming)?;
        }
        Ok(m)
    }

    /// Runs `decide` on the current record of `key` under the key's lock and stores the
    /// record it returns (the master's write path). `decide`'s error is passed through and
    /// nothing is stored.
    pub fn write_with<E>(
        &self,
        key: &[u8],
        decide: impl FnOnce(Option<&Record>) -> std::result::Result<Record, E>,
    ) -> Result<std::result::Result<Record, E>> {
        let _g = self.lock(key);
        let current = self.read(key)?;
        match decide(current.as_ref()) {
            Ok(r) => {
                self.store(key, &r)?;
                Ok(Ok(r))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// [`TlStore::write_with`] for several distinct keys at once: `decide` sees every key's
    /// current record under all their stripes' locks (taken in stripe order, so two groups
    /// never deadlock) and returns, for each key, the record to store or `None` to leave it.
    /// Nothing is stored unless `decide` returns `Ok`, so a group applies all or nothing.
    pub fn write_group<E>(
        &self,
        keys: &[&[u8]],
        decide: impl FnOnce(&[Option<Record>]) -> std::result::Result<Vec<Option<Record>>, E>,
    ) -> Result<std::result::Result<Vec<Option<Record>>, E>> {
        let mut stripes: Vec<usize> = keys.iter().map(|k| self.stripe_of(k)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _guards: Vec<MutexGuard<'_, ()>> =
            stripes.iter().map(|&i| self.stripes[i].lock()).collect();
        let current = keys
            .iter()
            .map(|k| self.read(k))
            .collect::<Result<Vec<_>>>()?;
        match decide(&current) {
            Ok(records) => {
                for (key, r) in keys.iter().zip(&records) {
                    if let Some(r) = r {
                        self.store(key, r)?;
                    }
                }
                Ok(Ok(records))
            }
            Err(e) => Ok(Err(e)),
        }
    }

    /// Up to `limit` records with client keys after `after` (`None`: from the start) and at
    /// most `upto` (`None`: to the end), in key order; undecodable records are skipped with a
    /// warning. Also returns the next page's `after` when the page is full.
    pub fn page(
        &self,
        after: Option<&[u8]>,
        upto: Option<&[u8]>,
        limit: usize,
    ) -> Result<RecordPage> {
        let limit = limit.max(1);
        let start = match after {
            Some(k) => Bound::Excluded(record_key(k)),
            None => Bound::Included(Bytes::from_static(&TIMELINE_PREFIX)),
        };
        let end = match upto {
            Some(k) => Bound::Included(record_key(k)),
            None => Bound::Excluded(Bytes::from_static(&[RESERVED_PREFIX, b't' + 1])),
        };
        let rows = self.engine.scan(start, end, Timestamp::MAX, limit, false)?;
        let full = rows.len() == limit;
        let mut out = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let key = k.slice(TIMELINE_PREFIX.len()..);
            if let Some(bytes) = v.value {
                match decode_record_shared(&bytes) {
                    Ok(mut r) => {
                        self.hide(&key, &mut r);
                        out.push((key, r))
                    }
                    Err(e) => {
                        tracing::warn!(key = ?key, error = %e, "skipping an undecodable timeline record")
                    }
                }
            }
        }
        let next = if full {
            out.last().map(|(k, _)| k.clone())
        } else {
            None
        };
        Ok((out, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Content, ReplicaRef, Version};
    use meridian_core::{DcId, ManualClock, NodeId};
    use meridian_storage::MemEngine;

    fn rec(v: &str, ver: Version) -> Record {
        Record {
            content: Content::Value(Bytes::from(v.to_owned())),
            ver,
            master: ReplicaRef {
                node: NodeId(1),
                dc: DcId(0),
            },
            recent: vec![DcId(0)],
        }
    }

    fn store() -> TlStore {
        TlStore::new(
            Arc::new(MemEngine::new()),
            Arc::new(ManualClock::new(Timestamp(1))),
        )
    }

    #[test]
    fn apply_keeps_the_newer_record_and_pages_in_key_order() {
        let s = store();
        assert_eq!(
            s.apply(b"b:1", &rec("a", Version::new(5, 0, 2))).unwrap(),
            Merge::Apply
        );
        assert_eq!(
            s.apply(b"b:1", &rec("x", Version::new(5, 0, 1))).unwrap(),
            Merge::Stale
        );
        assert_eq!(
            s.apply(b"b:1", &rec("a", Version::new(5, 0, 2))).unwrap(),
            Merge::Duplicate
        );
        assert_eq!(s.get(b"b:1").unwrap().unwrap().ver, Version::new(5, 0, 2));
        for k in [b"b:3", b"b:2", b"b:4"] {
            s.apply(k, &rec("v", Version::new(1, 0, 1))).unwrap();
        }
        let (page, next) = s.page(None, None, 2).unwrap();
        let keys: Vec<_> = page.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            keys,
            [Bytes::from_static(b"b:1"), Bytes::from_static(b"b:2")]
        );
        let (page, next) = s.page(next.as_deref(), Some(b"b:3"), 10).unwrap();
        assert_eq!(page.len(), 1, "upto is inclusive");
        assert!(next.is_none());
    }

    #[test]
    fn write_group_stores_all_or_nothing() {
        let s = store();
        let keys: [&[u8]; 3] = [b"b:x", b"b:y", b"b:z"];
        let r: std::result::Result<_, &str> = s
            .write_group(&keys, |cur| {
                assert!(cur.iter().all(Option::is_none));
                Err("refused")
            })
            .unwrap();
        assert_eq!(r, Err("refused"));
        assert!(keys.iter().all(|k| s.get(k).unwrap().is_none()));
        let v = Version::new(1, 0, 1);
        s.write_group(&keys, |_| {
            Ok::<_, ()>(vec![Some(rec("x", v)), None, Some(rec("z", v))])
        })
        .unwrap()
        .unwrap();
        assert_eq!(s.get(b"b:x").unwrap(), Some(rec("x", v)));
        assert!(s.get(b"b:y").unwrap().is_none());
        // The next group sees what the last one stored, and many keys sharing stripes lock once.
        let many: Vec<Vec<u8>> = (0..1000).map(|i| format!("b:{i}").into_bytes()).collect();
        let refs: Vec<&[u8]> = many.iter().map(|k| &k[..]).collect();
        s.write_group(&refs, |cur| Ok::<_, ()>(vec![None; cur.len()]))
            .unwrap()
            .unwrap();
        s.write_group(&keys, |cur| {
            assert_eq!(cur[2], Some(rec("z", v)));
            Ok::<_, ()>(vec![None; 3])
        })
        .unwrap()
        .unwrap();
    }

    #[test]
    fn write_with_stores_only_what_decide_returns() {
        let s = store();
        let r: std::result::Result<Record, &str> = s
            .write_with(b"b:k", |cur| {
                assert!(cur.is_none());
                Err("refused")
            })
            .unwrap();
        assert_eq!(r, Err("refused"));
        assert!(s.get(b"b:k").unwrap().is_none());
        let r = s
            .write_with(b"b:k", |_| Ok::<_, ()>(rec("v", Version::new(1, 0, 1))))
            .unwrap()
            .unwrap();
        assert_eq!(s.get(b"b:k").unwrap(), Some(r));
        // Eventual objects' scans stop below the reserved prefix, so they never see records.
        assert!(crate::object_store::is_reserved_key(&record_key(b"b:k")));
    }
}
