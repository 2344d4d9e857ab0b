//! WATCH and MULTI/EXEC on the standalone keyspace: per-stripe modification counts of the
//! watched keys, and the transaction that runs a queue over an overlay of every stripe it
//! touches.

use super::*;

// ----- WATCH and transactions ------------------------------------------------------------

/// One WATCHed key: what EXEC compares. Registered in its stripe until dropped with
/// [`Keyspace::unwatch`] (a [`WatchSet`] does that when dropped).
#[derive(Debug)]
pub(crate) struct Watch {
    pub(super) key: Bytes,
    /// The key's modification count when watched.
    pub(super) epoch: u64,
    /// Whether the key was live when watched (so expiring since then is a change).
    pub(super) live: bool,
}

/// A connection's watched keys; unregisters them when dropped (a connection that goes away
/// mid-WATCH leaves nothing behind).
#[derive(Debug)]
pub(crate) struct WatchSet {
    pub(super) ks: Arc<Keyspace>,
    pub(super) watches: Vec<Watch>,
}

impl WatchSet {
    /// An empty set over `ks`.
    pub(crate) fn new(ks: Arc<Keyspace>) -> Self {
        Self {
            ks,
            watches: Vec::new(),
        }
    }

    /// WATCH: registers `key` (a key watched twice is watched once).
    pub(crate) fn watch(&mut self, key: &[u8]) {
        if self.watches.iter().any(|w| w.key == key) {
            return;
        }
        let w = self.ks.watch(key);
        self.watches.push(w);
    }

    /// UNWATCH: forgets every key.
    pub(crate) fn clear(&mut self) {
        for w in self.watches.drain(..) {
            self.ks.unwatch(&w);
        }
    }

    /// The registered watches.
    pub(crate) fn watches(&self) -> &[Watch] {
        &self.watches
    }
}

impl Drop for WatchSet {
    fn drop(&mut self) {
        self.clear();
    }
}

impl Keyspace {
    /// Registers a watch of `key`: later modifications of it (by anyone) are counted in its
    /// stripe until [`Keyspace::unwatch`].
    pub(crate) fn watch(&self, key: &[u8]) -> Watch {
        let mut s = self.lock(key);
        let now = self.clock.now();
        // A value that cannot be decoded exists: treat it as live.
        let live = self
            .stored(key)
            .map_or(true, |e| e.is_some_and(|e| !e.is_expired(now)));
        let slot = s.watched.entry(Bytes::copy_from_slice(key)).or_default();
        slot.watchers += 1;
        Watch {
            key: Bytes::copy_from_slice(key),
            epoch: slot.epoch,
            live,
        }
    }

    /// Drops a watch registered by [`Keyspace::watch`].
    pub(crate) fn unwatch(&self, w: &Watch) {
        let mut s = self.lock(&w.key);
        if let Some(slot) = s.watched.get_mut(&w.key[..]) {
            slot.watchers = slot.watchers.saturating_sub(1);
            if slot.watchers == 0 {
                s.watched.remove(&w.key[..]);
            }
        }
    }

    /// A transaction (MULTI/EXEC): locks the stripes of `keys` and of the watched keys in
    /// ascending order (every stripe with `all`, for FLUSH, KEYS, SCAN, DBSIZE), checks that
    /// no watched key was modified or expired since WATCH — `Ok(None)` if one was, nothing
    /// run — then runs `run` over one [`Overlay`] and writes all its writes as one batch.
    pub(crate) fn transaction<'k, R>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
        all: bool,
        watches: &'k [Watch],
        run: impl FnOnce(&mut Overlay<'_>) -> R,
    ) -> Result<Option<R>> {
        let mut guards = if all {
            self.lock_all()
        } else {
            self.lock_many(keys.chain(watches.iter().map(|w| &w.key[..])))
        };
        let now = self.clock.now();
        for w in watches {
            let s = guards.of(&w.key)?;
            let epoch = s.watched.get(&w.key[..]).map(|slot| slot.epoch);
            if epoch != Some(w.epoch) {
                return Ok(None);
            }
            if w.live {
                let live = self
                    .stored(&w.key)
                    .map_or(true, |e| e.is_some_and(|e| !e.is_expired(now)));
                if !live {
                    return Ok(None);
                }
            }
        }
        let mut ov = Overlay::new(self, guards);
        let r = run(&mut ov);
        ov.commit()?;
        Ok(Some(r))
    }
}
