//! The view the type modules' unit tests run over: a keyspace in a map at a fixed time,
//! what a backend's one-command view does without a backend, counting reads. With
//! `hold_objects` it keeps collections as objects, as the standalone keyspace does (bytes
//! read through `load` are then the object's encoding), so a module's tests can run both
//! paths of `crate::collection`.

use crate::collection::Collection;
use crate::error::Result;
use crate::view::{Entry, EntryRef, View};
use bytes::Bytes;
use meridian_core::Timestamp;
use std::collections::BTreeMap;

/// A collection kept in memory, with its key's expiry.
type Held = (Box<dyn Collection>, Option<u64>);

/// A map of keys to entries at time `now`, storing values up to `max` bytes.
pub(crate) struct TestView {
    pub(crate) now: Timestamp,
    pub(crate) map: BTreeMap<Vec<u8>, Entry>,
    pub(crate) max: usize,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    /// Calls of `store`.
    pub(crate) stores: u64,
    /// Whether collections stored through `store_object` are kept as objects.
    pub(crate) hold_objects: bool,
    objects: BTreeMap<Vec<u8>, Held>,
}

impl TestView {
    /// An empty view at 10 s after the epoch, storing values up to 1 MiB.
    pub(crate) fn new() -> Self {
        Self {
            now: Timestamp(10_000_000),
            map: BTreeMap::new(),
            max: 1 << 20,
            hits: 0,
            misses: 0,
            stores: 0,
            hold_objects: false,
            objects: BTreeMap::new(),
        }
    }

    /// An empty view at `now`.
    pub(crate) fn at(now: Timestamp) -> Self {
        Self { now, ..Self::new() }
    }

    /// A view that keeps collections as objects.
    pub(crate) fn holding() -> Self {
        Self {
            hold_objects: true,
            ..Self::new()
        }
    }

    /// How many keys are kept as objects.
    pub(crate) fn held_count(&self) -> usize {
        self.objects.len()
    }

    /// Reads counted, hits and misses.
    pub(crate) fn reads(&self) -> u64 {
        self.hits + self.misses
    }
}

impl View for TestView {
    fn now(&self) -> Timestamp {
        self.now
    }
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        let now = self.now;
        if let Some((obj, expiry)) = self.objects.get(key) {
            let e = Entry {
                data: Bytes::from(obj.encode()),
                expiry: *expiry,
                kind: obj.kind(),
            };
            return Ok((!e.is_expired(now)).then_some(e));
        }
        Ok(self.map.get(key).filter(|e| !e.is_expired(now)).cloned())
    }
    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        self.stores += 1;
        self.objects.remove(key);
        // What every view may assume of a command's writes.
        if let Some(e) = &value {
            assert!(
                e.expiry.is_none_or(|at| at > self.now.0),
                "stored an expired value"
            );
            assert!(
                e.data.len() <= self.max,
                "a value longer than the view's limit"
            );
        }
        match value {
            Some(e) => {
                self.map.insert(key.to_vec(), e.to_entry());
            }
            None => {
                self.map.remove(key);
            }
        }
        Ok(())
    }
    fn max_value_len(&self) -> usize {
        self.max
    }
    fn count_read(&mut self, _key: &[u8], hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }
    fn object_mut(&mut self, key: &[u8]) -> Result<Option<(&mut dyn Collection, Option<u64>)>> {
        let now = self.now;
        Ok(match self.objects.get_mut(key) {
            Some((obj, expiry)) if !expiry.is_some_and(|at| now.0 > at) => {
                Some((obj.as_mut(), *expiry))
            }
            _ => None,
        })
    }
    fn object_changed(&mut self, key: &[u8]) -> Result<()> {
        if self.objects.get(key).is_some_and(|(obj, _)| obj.is_empty()) {
            self.objects.remove(key);
        }
        Ok(())
    }
    fn store_object(
        &mut self,
        key: &[u8],
        mut obj: Box<dyn Collection>,
        expiry: Option<u64>,
    ) -> Result<Option<Box<dyn Collection>>> {
        if !self.hold_objects {
            return Ok(Some(obj));
        }
        obj.settle();
        self.map.remove(key);
        self.objects.insert(key.to_vec(), (obj, expiry));
        Ok(None)
    }
}
