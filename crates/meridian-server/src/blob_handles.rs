//! Large-object handles (spec `large-objects.md` §5 "Handles"): `BLOB.OPEN key` pins the
//! version a key holds now, and `BLOB.PREAD key handle offset len` reads that version however
//! the key changes afterwards, until `BLOB.CLOSE` or the handle expires.
//!
//! Guarantees:
//! - **A handle reads one version.** A chunked object is pinned by its manifest (the chunks
//!   are immutable); a plain value or an inline object by its bytes.
//! - **Its chunks outlive it.** Garbage collection deletes a replaced version's chunks no
//!   sooner than `blob.version_grace_ms` after the replacement, and the version was live when
//!   the handle opened; so a handle lives at most `version_grace_ms` from `BLOB.OPEN`, after
//!   which it answers an error saying to open it again. No node's GC needs to know handles.
//! - **Bounded.** At most `blob.max_open_handles` per node and at most
//!   `blob.max_handle_bytes` pinned (bytes of pinned values plus manifests; handles of one
//!   version share its manifest), beyond which `BLOB.OPEN` fails with
//!   `HandleLimit` (the object service's `ObjectError::HandleLimit`); a handle unused for
//!   `blob.handle_idle_ms` closes.
//! - **Scoped to its key.** A handle is found only with the key it was opened on, and only on
//!   the node that opened it (in cluster mode, the node the key's slot routes to).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use meridian_blob::Manifest;

/// What a handle reads.
#[derive(Debug, Clone)]
pub enum Pinned {
    /// A plain value, or an inline object's bytes.
    Bytes(Bytes),
    /// An object in chunks.
    Chunked(Arc<Manifest>),
}

impl Pinned {
    /// The size of what it reads.
    pub fn size(&self) -> u64 {
        match self {
            Pinned::Bytes(b) => b.len() as u64,
            Pinned::Chunked(m) => m.size,
        }
    }

    /// Memory it holds: the bytes, or the manifest (its chunk list).
    fn cost(&self) -> u64 {
        match self {
            Pinned::Bytes(b) => b.len() as u64,
            Pinned::Chunked(m) => 64 + 40 * m.chunks.len() as u64,
        }
    }
}

/// The limits (from `[blob]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleLimits {
    /// Handles open at once.
    pub max_open: usize,
    /// Bytes pinned at once.
    pub max_bytes: u64,
    /// A handle unused this long closes, µs.
    pub idle_us: u64,
    /// A handle lives at most this long, µs (the GC's `version_grace`).
    pub max_age_us: u64,
}

/// Why a handle could not be opened or used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleFault {
    /// Too many handles, or too many bytes pinned.
    Limit {
        /// Handles open.
        open: usize,
        /// Bytes pinned.
        pinned: u64,
    },
    /// No such handle for this key (never opened here, closed, or idle too long).
    Unknown,
    /// Older than `max_age`: its version's chunks may be collected.
    Expired,
}

#[derive(Debug)]
struct Open {
    key: Bytes,
    /// The version the handle reads: handles of one version share its [`Pinned`].
    version: u128,
    opened_us: u64,
    used_us: u64,
}

#[derive(Debug)]
struct Shared {
    pinned: Pinned,
    handles: usize,
}

/// The open handles of one node.
#[derive(Debug)]
pub struct HandleTable {
    limits: HandleLimits,
    open: HashMap<u64, Open>,
    /// Pinned versions by (key, version): a manifest is held once however many handles read it.
    shared: HashMap<(Bytes, u128), Shared>,
    pinned_bytes: u64,
}

impl HandleTable {
    /// An empty table with these limits.
    pub fn new(limits: HandleLimits) -> HandleTable {
        HandleTable {
            limits,
            open: HashMap::new(),
            shared: HashMap::new(),
            pinned_bytes: 0,
        }
    }

    /// Opens handle `id` (unused, nonzero: the caller draws it) on `key`'s `pinned` value of
    /// `version` (0 for a plain value, which then is not shared) at `now_us`.
    pub fn open(
        &mut self,
        id: u64,
        key: Bytes,
        version: u128,
        pinned: Pinned,
        now_us: u64,
    ) -> Result<(), HandleFault> {
        self.expire(now_us);
        let share = (key.clone(), version);
        let added = match self.shared.get(&share) {
            Some(_) if version != 0 => 0,
            _ => pinned.cost(),
        };
        if self.open.len() >= self.limits.max_open
            || self.pinned_bytes.saturating_add(added) > self.limits.max_bytes
        {
            return Err(HandleFault::Limit {
                open: self.open.len(),
                pinned: self.pinned_bytes,
            });
        }
        // A plain value has no version to share: each handle keeps its own copy's key.
        let share_key = if version == 0 {
            (key.clone(), u128::from(id))
        } else {
            share
        };
        self.shared
            .entry(share_key.clone())
            .or_insert(Shared { pinned, handles: 0 })
            .handles += 1;
        self.pinned_bytes += added;
        self.open.insert(
            id,
            Open {
                key,
                version: share_key.1,
                opened_us: now_us,
                used_us: now_us,
            },
        );
        Ok(())
    }

    /// What handle `id` of `key` reads, as of `now_us` (which counts as a use).
    pub fn get(&mut self, key: &[u8], id: u64, now_us: u64) -> Result<Pinned, HandleFault> {
        let Some(h) = self.open.get_mut(&id).filter(|h| h.key == key) else {
            return Err(HandleFault::Unknown);
        };
        if now_us.saturating_sub(h.used_us) > self.limits.idle_us {
            self.close(key, id);
            return Err(HandleFault::Unknown);
        }
        if now_us.saturating_sub(h.opened_us) > self.limits.max_age_us {
            self.close(key, id);
            return Err(HandleFault::Expired);
        }
        h.used_us = now_us;
        let share = (h.key.clone(), h.version);
        self.shared
            .get(&share)
            .map(|s| s.pinned.clone())
            .ok_or(HandleFault::Unknown)
    }

    /// Closes handle `id` of `key`; whether it was open.
    pub fn close(&mut self, key: &[u8], id: u64) -> bool {
        if self.open.get(&id).is_none_or(|h| h.key != key) {
            return false;
        }
        let Some(h) = self.open.remove(&id) else {
            return false;
        };
        let share = (h.key, h.version);
        if let Some(s) = self.shared.get_mut(&share) {
            s.handles -= 1;
            if s.handles == 0 {
                let cost = s.pinned.cost();
                self.shared.remove(&share);
                self.pinned_bytes = self.pinned_bytes.saturating_sub(cost);
            }
        }
        true
    }

    /// Closes the handles idle or older than the limits allow at `now_us`; returns how many.
    pub fn expire(&mut self, now_us: u64) -> usize {
        let HandleLimits {
            idle_us,
            max_age_us,
            ..
        } = self.limits;
        let stale: Vec<(Bytes, u64)> = self
            .open
            .iter()
            .filter(|(_, h)| {
                now_us.saturating_sub(h.used_us) > idle_us
                    || now_us.saturating_sub(h.opened_us) > max_age_us
            })
            .map(|(id, h)| (h.key.clone(), *id))
            .collect();
        for (key, id) in &stale {
            self.close(key, *id);
        }
        stale.len()
    }

    /// Whether `id` is taken.
    pub fn contains(&self, id: u64) -> bool {
        self.open.contains_key(&id)
    }

    /// Handles open now.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no handle is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Bytes pinned now.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned_bytes
    }

    /// The limits.
    pub fn limits(&self) -> HandleLimits {
        self.limits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HandleLimits = HandleLimits {
        max_open: 3,
        max_bytes: 100,
        idle_us: 60,
        max_age_us: 600,
    };

    fn bytes(n: usize) -> Pinned {
        Pinned::Bytes(Bytes::from(vec![7u8; n]))
    }

    #[test]
    fn a_handle_reads_what_it_pinned_with_its_own_key_only() {
        let mut t = HandleTable::new(LIMITS);
        t.open(1, Bytes::from_static(b"k"), 0, bytes(10), 0)
            .unwrap();
        assert_eq!(t.get(b"k", 1, 5).unwrap().size(), 10);
        assert_eq!(t.get(b"other", 1, 5).unwrap_err(), HandleFault::Unknown);
        assert_eq!(t.get(b"k", 2, 5).unwrap_err(), HandleFault::Unknown);
        assert!(!t.close(b"other", 1));
        assert!(t.close(b"k", 1));
        assert!(!t.close(b"k", 1));
        assert_eq!((t.len(), t.pinned_bytes()), (0, 0));
    }

    #[test]
    fn limits_on_handles_and_pinned_bytes_refuse_and_free_on_close() {
        let mut t = HandleTable::new(LIMITS);
        t.open(1, Bytes::from_static(b"a"), 0, bytes(60), 0)
            .unwrap();
        assert_eq!(
            t.open(2, Bytes::from_static(b"b"), 0, bytes(50), 0),
            Err(HandleFault::Limit {
                open: 1,
                pinned: 60
            })
        );
        t.open(2, Bytes::from_static(b"b"), 0, bytes(40), 0)
            .unwrap();
        t.open(3, Bytes::from_static(b"c"), 0, bytes(0), 0).unwrap();
        assert!(matches!(
            t.open(4, Bytes::from_static(b"d"), 0, bytes(0), 0),
            Err(HandleFault::Limit { open: 3, .. })
        ));
        t.close(b"a", 1);
        t.open(4, Bytes::from_static(b"d"), 0, bytes(50), 0)
            .unwrap();
        assert_eq!(t.pinned_bytes(), 90);
    }

    #[test]
    fn handles_of_one_version_share_its_pin() {
        let mut t = HandleTable::new(LIMITS);
        let key = Bytes::from_static(b"k");
        t.open(1, key.clone(), 9, bytes(80), 0).unwrap();
        t.open(2, key.clone(), 9, bytes(80), 0).unwrap();
        assert_eq!(t.pinned_bytes(), 80);
        t.close(b"k", 1);
        assert_eq!(t.pinned_bytes(), 80);
        assert_eq!(t.get(b"k", 2, 1).unwrap().size(), 80);
        t.close(b"k", 2);
        assert_eq!(t.pinned_bytes(), 0);
    }

    #[test]
    fn idle_handles_close_and_old_ones_expire() {
        let mut t = HandleTable::new(LIMITS);
        let key = Bytes::from_static(b"k");
        t.open(1, key.clone(), 0, bytes(1), 0).unwrap();
        t.open(2, key.clone(), 0, bytes(1), 0).unwrap();
        // Handle 1 is used every 50 µs; handle 2 never.
        for now in (50..=550).step_by(50) {
            t.get(b"k", 1, now).unwrap();
        }
        assert_eq!(t.get(b"k", 2, 550).unwrap_err(), HandleFault::Unknown);
        assert_eq!(t.get(b"k", 1, 601).unwrap_err(), HandleFault::Expired);
        assert!(t.is_empty());
        t.open(3, key, 0, bytes(1), 1000).unwrap();
        assert_eq!(t.expire(1061), 1);
        assert_eq!((t.len(), t.pinned_bytes()), (0, 0));
    }
}
