//! The view the type modules' unit tests run over: a keyspace in a map at a fixed time,
//! what a backend's one-command view does without a backend, counting reads.

use crate::error::Result;
use crate::view::{Entry, EntryRef, View};
use meridian_core::Timestamp;
use std::collections::BTreeMap;

/// A map of keys to entries at time `now`, storing values up to `max` bytes.
pub(crate) struct TestView {
    pub(crate) now: Timestamp,
    pub(crate) map: BTreeMap<Vec<u8>, Entry>,
    pub(crate) max: usize,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
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
        }
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
        Ok(self.map.get(key).filter(|e| !e.is_expired(now)).cloned())
    }
    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
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
}
