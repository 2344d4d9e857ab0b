//! SCAN cursors: small decimal numbers a node hands out, each naming a position to resume
//! an iteration at (a key, or a listing position), kept in a bounded server-side table.
//!
//! Guarantees: a cursor is never 0 (Redis's "iteration complete"); a cursor is used once;
//! the table holds at most `max` positions and 64 MiB of them, forgetting the oldest first.
//! A forgotten or never-issued cursor is unknown, and the iteration restarts from the start
//! (which keeps SCAN's guarantee at the price of repeated keys).

use bytes::Bytes;
use std::collections::BTreeMap;
use std::hash::BuildHasher;

/// Numeric SCAN cursors mapped to the position to resume at.
#[derive(Debug)]
pub struct CursorTable {
    next: u64,
    entries: BTreeMap<u64, Bytes>,
    bytes: usize,
    max: usize,
}

/// Remembered resume keys are bounded by bytes too, whatever their count.
const MAX_CURSOR_BYTES: usize = 64 * 1024 * 1024;

impl CursorTable {
    /// A table of at most `max` cursors.
    pub fn new(max: usize) -> Self {
        // A random start makes a cursor from before a restart unlikely to name a live entry.
        let r = std::collections::hash_map::RandomState::new().hash_one(0u8);
        Self {
            next: (r >> 3) | 1,
            entries: BTreeMap::new(),
            bytes: 0,
            max: max.max(1),
        }
    }

    /// Remembers `key` under a new cursor (never 0), forgetting the oldest beyond the bounds.
    pub fn insert(&mut self, key: Bytes) -> u64 {
        let id = self.next;
        self.next = if self.next >= (1 << 62) {
            1
        } else {
            self.next + 1
        };
        self.bytes += key.len();
        if let Some(old) = self.entries.insert(id, key) {
            self.bytes -= old.len();
        }
        while self.entries.len() > self.max || self.bytes > MAX_CURSOR_BYTES {
            // Ids grow, so the smallest is the oldest (except right after a wrap).
            match self.entries.pop_first() {
                Some((_, k)) => self.bytes -= k.len(),
                None => break,
            }
        }
        id
    }

    /// The position of cursor `id`, forgotten once taken (`None`: unknown or evicted).
    pub fn take(&mut self, id: u64) -> Option<Bytes> {
        let k = self.entries.remove(&id)?;
        self.bytes -= k.len();
        Some(k)
    }

    /// Forgets every cursor.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn cursor_table_is_bounded() {
        let mut t = CursorTable::new(3);
        let ids: Vec<u64> = (0..5).map(|i| t.insert(b(&i.to_string()))).collect();
        assert_eq!(t.entries.len(), 3);
        assert_eq!(t.take(ids[0]), None, "oldest evicted");
        assert_eq!(t.take(ids[4]), Some(b("4")));
        assert_eq!(t.take(ids[4]), None, "used once");
        assert!(ids.iter().all(|&id| id != 0 && id < 1 << 63));
    }
}
