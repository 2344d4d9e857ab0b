//! Garbage collection of versions no read at or above the horizon can see, one bounded chunk
//! at a time under the writer mutex; a key whose only remaining version is a tombstone at or
//! below the horizon is removed with its index entry.

use super::{GC_CHUNK, Inner, TS_LEN, backend, is_tombstone_value, split_entry_key, version_size};
use crate::{GcStats, Result};
use fjall::{Readable, Slice};
use meridian_core::Timestamp;
use std::ops::Bound;
use std::sync::atomic::Ordering;

impl Inner {
    /// One chunk of a gc pass: examines about [`GC_CHUNK`] entries from `from` on, under the
    /// writer mutex, deletes what is dead, and returns where the next chunk starts.
    pub(super) fn gc_chunk(
        &self,
        from: Bound<Vec<u8>>,
        horizon: Timestamp,
        stats: &mut GcStats,
    ) -> Result<Option<Bound<Vec<u8>>>> {
        let mut w = self.writer.lock();
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let st = self.store()?;
        let snap = st.db.snapshot();
        let mut dead = Vec::new();
        // The newest versions of the keys that disappear entirely.
        let mut gone: Vec<Slice> = Vec::new();
        // The versions of the key being examined, newest first.
        let mut group: Vec<GcEntry> = Vec::new();
        let mut next = None;
        let entries = snap.range(&st.ks, (from, Bound::<Vec<u8>>::Unbounded));
        for (seen, guard) in entries.enumerate() {
            let (key, v) = guard.into_inner().map_err(backend)?;
            let (enc, ts) = split_entry_key(&key)?;
            if group.first().is_some_and(|g| g.enc() != enc) {
                collect_dead(&mut group, horizon, &mut dead, &mut gone, stats);
                if seen >= GC_CHUNK {
                    next = Some(Bound::Included(enc.to_vec()));
                    break;
                }
            }
            group.push(GcEntry {
                ts,
                value_len: v.len().saturating_sub(1),
                tombstone: is_tombstone_value(&v),
                key,
            });
        }
        if next.is_none() {
            collect_dead(&mut group, horizon, &mut dead, &mut gone, stats);
        }
        if !dead.is_empty() {
            let mut batch = st.db.batch();
            for enc in gone {
                w.remove(&enc);
                batch.remove(&st.latest, enc);
            }
            let (mut versions, mut bytes) = (0i64, 0i64);
            for entry in dead {
                versions -= 1;
                bytes -= version_size(entry.enc().len(), entry.value_len);
                batch.remove(&st.ks, entry.key);
            }
            batch.commit().map_err(|e| self.write_failed(e))?;
            self.versions.fetch_add(versions, Ordering::Relaxed);
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(next)
    }
}

/// One version met by a gc pass.
struct GcEntry {
    /// The entry key.
    key: Slice,
    ts: Timestamp,
    value_len: usize,
    tombstone: bool,
}

impl GcEntry {
    /// The encoded user key.
    fn enc(&self) -> &[u8] {
        &self.key[..self.key.len() - TS_LEN]
    }
}

/// Moves the versions of `group` (one key's, newest first) that no read at or above `horizon`
/// can see into `dead` (and the key's encoding into `gone` if none remains), and empties
/// `group`.
fn collect_dead(
    group: &mut Vec<GcEntry>,
    horizon: Timestamp,
    dead: &mut Vec<GcEntry>,
    gone: &mut Vec<Slice>,
    stats: &mut GcStats,
) {
    // The newest version at or below the horizon is what reads at the horizon see; every
    // older one is invisible to reads at or above it.
    let Some(visible) = group.iter().position(|g| g.ts <= horizon) else {
        group.clear();
        return;
    };
    let mut from = visible + 1;
    if visible == 0 && group[0].tombstone {
        // All that remains is a tombstone at or below the horizon: the key goes.
        from = 0;
        stats.keys_removed += 1;
        let key = &group[0].key;
        gone.push(key.slice(..key.len() - TS_LEN));
    }
    let before = dead.len();
    dead.extend(group.drain(..).skip(from));
    stats.versions_removed += (dead.len() - before) as u64;
}
