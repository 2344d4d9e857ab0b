//! The views the Redis layer's commands run over (`meridian_redis::View`): a lock-free
//! read view, a view of one locked stripe that writes straight to the engine, and an
//! overlay of several locked stripes whose writes become one atomic batch.

use super::*;
use meridian_redis::collection::Collection;
use meridian_redis::view::retime_stored;

// ----- views for the string commands -----------------------------------------------------

/// Lock-free reads (GET, MGET, EXISTS, ...): an expired key reads as absent and is deleted
/// under its stripe's lock. Writes lock their key's stripe (read-only commands never write).
pub(super) struct ReadView<'a> {
    pub(super) ks: &'a Keyspace,
}

impl View for ReadView<'_> {
    #[inline]
    fn now(&self) -> Timestamp {
        self.ks.clock.now()
    }

    #[inline]
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        self.ks.read_live(key)
    }

    fn header(&mut self, key: &[u8]) -> Result<Option<(Kind, Option<u64>)>> {
        match self.ks.stored(key)? {
            // Expired: `load` deletes it.
            Some(st) if st.is_expired(self.ks.clock.now()) => {
                Ok(self.load(key)?.map(|e| (e.kind, e.expiry)))
            }
            st => Ok(st.map(|st| (st.kind(), st.expiry()))),
        }
    }

    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        let mut s = self.ks.lock(key);
        self.ks.locked(&mut s).store(key, value)
    }

    fn max_value_len(&self) -> usize {
        self.ks.config.max_value_len
    }

    fn stream_node_limits(&self) -> meridian_redis::streams::NodeLimits {
        self.ks.stream_node_limits()
    }

    #[inline]
    fn count_read(&mut self, key: &[u8], hit: bool) {
        self.ks.count_read(key, hit);
    }
}

/// One key's stripe, locked: reads delete expired keys, writes go straight to the engine at
/// the view's time.
pub(super) struct LockedView<'a> {
    pub(super) ks: &'a Keyspace,
    pub(super) stripe: &'a mut Stripe,
    pub(super) now: Timestamp,
}

impl View for LockedView<'_> {
    #[inline]
    fn now(&self) -> Timestamp {
        self.now
    }

    #[inline]
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        self.ks.load_live_locked(self.stripe, key, self.now)
    }

    #[inline]
    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        match value {
            Some(e) => {
                self.ks.put_locked(self.stripe, key, e, self.now)?;
                self.ks.blocking.touched(key);
                Ok(())
            }
            None => self.ks.delete_locked(self.stripe, key, self.now),
        }
    }

    fn max_value_len(&self) -> usize {
        self.ks.config.max_value_len
    }

    fn stream_node_limits(&self) -> meridian_redis::streams::NodeLimits {
        self.ks.stream_node_limits()
    }

    #[inline]
    fn count_read(&mut self, key: &[u8], hit: bool) {
        self.ks.count_read(key, hit);
    }

    fn header(&mut self, key: &[u8]) -> Result<Option<(Kind, Option<u64>)>> {
        self.ks.header_locked(self.stripe, key, self.now)
    }

    fn retime(&mut self, key: &[u8], expiry: Option<u64>) -> Result<()> {
        if self.ks.retime_held(self.stripe, key, expiry, self.now)? {
            return Ok(());
        }
        retime_stored(self, key, expiry)
    }

    #[inline]
    fn object_mut(&mut self, key: &[u8]) -> Result<Option<(&mut dyn Collection, Option<u64>)>> {
        if !self.ks.hold_objects {
            return Ok(None);
        }
        self.ks.held_mut(self.stripe, key, self.now)
    }

    #[inline]
    fn object_changed(&mut self, key: &[u8]) -> Result<()> {
        self.ks.held_changed(self.stripe, key, self.now)
    }

    fn store_object(
        &mut self,
        key: &[u8],
        obj: Box<dyn Collection>,
        expiry: Option<u64>,
    ) -> Result<Option<Box<dyn Collection>>> {
        if !self.ks.hold_objects {
            return Ok(Some(obj));
        }
        self.ks.hold(self.stripe, key, obj, expiry, self.now)?;
        Ok(None)
    }
}

/// A buffered write of an [`Overlay`].
#[derive(Debug)]
pub(super) struct Pending {
    /// The new envelope, or a delete.
    pub(super) value: Option<Bytes>,
    /// The new expiry, for the TTL index.
    pub(super) expiry: Option<u64>,
    /// Whether a command wrote it (a modification for WATCH), rather than expiry.
    pub(super) touched: bool,
    /// Whether it deletes an expired key (counted in `expired_keys`).
    pub(super) expired: bool,
    /// Whether `value` is the held marker of a collection the overlay put in its stripe
    /// (kept at commit; any other write drops the key's held collection).
    pub(super) held: bool,
}

/// Several keys' stripes, locked, at one time: reads see the engine plus this overlay's own
/// earlier writes; writes are buffered and [`Overlay::commit`] writes them as one atomic
/// [`WriteBatch`]. What MSET, MSETNX, DEL and a whole MULTI/EXEC run over, so no reader or
/// writer can observe part of them.
pub(crate) struct Overlay<'a> {
    pub(super) ks: &'a Keyspace,
    pub(super) guards: StripeGuards<'a>,
    pub(super) now: Timestamp,
    pub(super) pending: FxHashMap<Bytes, Pending>,
    /// Whether a FLUSHDB/FLUSHALL ran: SCAN cursors are forgotten at commit.
    pub(super) flushed: bool,
    /// Whether keys outside the locked stripes may be read (lock-free, as a GET reads):
    /// SORT's BY and GET patterns name keys no key position does.
    pub(super) foreign_reads: bool,
    /// Whether a command changed a held collection in place (or held a new one): such a
    /// change is not in `pending`, so [`Overlay::discard`] cannot take it back.
    pub(super) held_changed: bool,
}

impl<'a> Overlay<'a> {
    /// Takes the time after the locks, so the batch's versions are newer than any earlier
    /// write of its keys.
    pub(super) fn new(ks: &'a Keyspace, guards: StripeGuards<'a>) -> Self {
        Self {
            ks,
            guards,
            now: ks.clock.now(),
            pending: FxHashMap::default(),
            flushed: false,
            foreign_reads: false,
            held_changed: false,
        }
    }

    /// Whether every write so far can be discarded ([`Overlay::discard`]): no held
    /// collection was changed in place.
    pub(crate) fn discardable(&self) -> bool {
        !self.held_changed
    }

    /// Locks `key`'s stripe too if no one holds it now (never waiting: a thread that holds it
    /// may be waiting for a stripe this overlay holds); true once the overlay holds it.
    pub(crate) fn try_hold(&mut self, key: &[u8]) -> bool {
        self.try_hold_stripe(super::stripe_of(key))
    }

    /// [`Overlay::try_hold`] of every stripe (a command over the whole keyspace).
    pub(crate) fn try_hold_all(&mut self) -> bool {
        (0..super::STRIPES).all(|id| self.try_hold_stripe(id))
    }

    fn try_hold_stripe(&mut self, id: usize) -> bool {
        let Err(at) = self.guards.ids.binary_search(&id) else {
            return true;
        };
        let Some(guard) = self.ks.stripes[id].try_lock() else {
            return false;
        };
        self.guards.ids.insert(at, id);
        self.guards.guards.insert(at, guard);
        true
    }

    /// Forgets every write buffered so far: the commit then writes nothing (a script
    /// restarted with more locks).
    pub(crate) fn discard(&mut self) {
        self.pending.clear();
        self.flushed = false;
    }

    /// Lets the next command read keys outside the locked stripes (SORT's BY and GET
    /// patterns), or stops it.
    pub(crate) fn set_foreign_reads(&mut self, on: bool) {
        self.foreign_reads = on;
    }

    /// Writes every buffered write as one batch at the overlay's time, then updates the TTL
    /// index and the watchers of the keys commands modified.
    pub(super) fn commit(mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut batch = WriteBatch::new();
        for (k, p) in &self.pending {
            match &p.value {
                Some(v) => {
                    batch.put(k.clone(), self.now, v.clone());
                }
                None => {
                    batch.delete(k.clone(), self.now);
                }
            }
        }
        self.ks.horizon(self.now);
        self.ks.engine.write_batch(batch)?;
        let mut expired = 0;
        for (k, p) in self.pending.drain() {
            if p.expired {
                self.ks
                    .events
                    .notify(crate::keyspace_events::EXPIRED, "expired", &k);
                self.ks.caching.modified(&k);
            }
            let s = self.guards.of(&k)?;
            if p.touched {
                s.touch(&k);
            }
            expired += p.expired as u64;
            if !p.held {
                self.ks.drop_held(s, &k);
            }
            match &p.value {
                Some(v) => {
                    let len = self.ks.held_memory(s, &k).unwrap_or(v.len());
                    self.ks
                        .account_put(s, &k, entry_bytes(k.len(), len), self.now)
                }
                None => self.ks.account_delete(s, &k),
            }
            self.ks.index_owned(s, k, p.expiry);
        }
        self.ks.expired_keys.fetch_add(expired, Ordering::Relaxed);
        if self.flushed {
            self.ks.cursors.lock().clear();
        }
        Ok(())
    }

    /// FLUSHDB/FLUSHALL inside the overlay: deletes every key (the overlay must hold every
    /// stripe). Not a modification for WATCH, as in Redis 7: a watched key that existed is
    /// gone, which fails EXEC by itself; one that did not exist did not change.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.guards.ids.len() != STRIPES {
            return Err(RedisError::Corrupt("flush without every stripe locked"));
        }
        // Told before the commit: a failed commit then costs clients their caches, never a
        // stale entry.
        self.ks.caching.flushed();
        for p in self.pending.values_mut() {
            p.value = None;
            p.expiry = None;
            p.held = false;
        }
        let mut start = Bound::Unbounded;
        loop {
            let page = self
                .ks
                .engine
                .scan(start, Bound::Unbounded, Timestamp::MAX, PAGE, false)?;
            let full = page.len() == PAGE;
            let last = page.last().map(|(k, _)| k.clone());
            for (k, _) in page {
                self.pending.entry(k).or_insert(Pending {
                    value: None,
                    expiry: None,
                    touched: false,
                    expired: false,
                    held: false,
                });
            }
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => break,
            }
        }
        self.flushed = true;
        Ok(())
    }

    /// KEYS (and SCAN, from after `after`) as this overlay sees the keyspace: live engine keys
    /// and the overlay's own writes, in key order, matching the glob `pattern`.
    pub(crate) fn keys(
        &mut self,
        pattern: Option<&[u8]>,
        after: Option<Bytes>,
    ) -> Result<Vec<Bytes>> {
        self.keys_of_type(pattern, after, None)
    }

    /// [`Overlay::keys`] of the keys holding a value of type `kind` (SCAN ... TYPE).
    pub(crate) fn keys_of_type(
        &mut self,
        pattern: Option<&[u8]>,
        after: Option<Bytes>,
        kind: Option<Kind>,
    ) -> Result<Vec<Bytes>> {
        let mut out = Vec::new();
        let prefix = pattern.map_or(&[][..], literal_prefix);
        let mut start = match after {
            Some(k) if prefix.is_empty() || &k[..] >= prefix => Bound::Excluded(k),
            _ if prefix.is_empty() => Bound::Unbounded,
            _ => Bound::Included(Bytes::copy_from_slice(prefix)),
        };
        let end = prefix_end(prefix);
        let lower = start.clone();
        loop {
            let rows = self
                .ks
                .engine
                .scan(start, end.clone(), Timestamp::MAX, PAGE, false)?;
            let full = rows.len() == PAGE;
            let last = rows.last().map(|(k, _)| k.clone());
            for (k, v) in rows {
                if self.pending.contains_key(&k) {
                    continue;
                }
                let live = match v.value.as_ref().and_then(held::header) {
                    Some((k, expiry)) => {
                        expiry.is_none_or(|at| self.now.0 <= at) && kind.is_none_or(|w| w == k)
                    }
                    None => kind.is_none(),
                };
                if live && pattern.is_none_or(|p| glob_match(p, &k, false)) {
                    out.push(k);
                }
            }
            match (full, last) {
                (true, Some(k)) => start = Bound::Excluded(k),
                _ => break,
            }
        }
        let in_range = |k: &Bytes| {
            (match &lower {
                Bound::Excluded(l) => k > l,
                Bound::Included(l) => k >= l,
                Bound::Unbounded => true,
            }) && (match &end {
                Bound::Excluded(e) => k < e,
                _ => true,
            })
        };
        out.extend(
            self.pending
                .iter()
                .filter(|(k, p)| {
                    p.value.as_ref().is_some_and(|v| {
                        kind.is_none_or(|want| held::header(v).is_some_and(|(k, _)| k == want))
                    }) && in_range(k)
                        && pattern.is_none_or(|pat| glob_match(pat, k, false))
                })
                .map(|(k, _)| k.clone()),
        );
        out.sort_unstable();
        Ok(out)
    }

    /// DBSIZE as this overlay sees the keyspace.
    pub(crate) fn dbsize(&mut self) -> Result<u64> {
        let mut n = self.ks.engine.stats().live_keys as i64;
        for (k, p) in &self.pending {
            let before = self.ks.stored(k).map(|e| e.is_some()).unwrap_or(true);
            n += p.value.is_some() as i64 - before as i64;
        }
        Ok(n.max(0) as u64)
    }

    /// RANDOMKEY inside a transaction: a live key drawn uniformly, this overlay's writes
    /// included — O(n), listing every key (a transaction's RANDOMKEY is rare; the keyspace's
    /// own is O(n / shards)).
    pub(crate) fn random_key(&mut self) -> Result<Option<Bytes>> {
        use rand::Rng;
        let keys = self.keys_of_type(None, None, None)?;
        if keys.is_empty() {
            return Ok(None);
        }
        Ok(keys.get(rand::rng().random_range(0..keys.len())).cloned())
    }

    /// Takes a SCAN cursor's resume key (see [`Keyspace::scan`]).
    pub(crate) fn scan_resume(&self, cursor: u64) -> Option<Bytes> {
        (cursor != 0)
            .then(|| self.ks.cursors.lock().take(cursor))
            .flatten()
    }
}

impl View for Overlay<'_> {
    fn now(&self) -> Timestamp {
        self.now
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>> {
        if let Some(p) = self.pending.get(key) {
            return match &p.value {
                Some(_) if p.held => self.ks.materialize(self.guards.of(key)?, key).map(Some),
                Some(v) => meridian_redis::view::decode(v.clone()).map(Some),
                None => Ok(None),
            };
        }
        // Fails for a key outside the locked stripes before reading it.
        if let Err(e) = self.guards.of(key) {
            return if self.foreign_reads {
                self.ks.read_foreign(key)
            } else {
                Err(e)
            };
        }
        match self.ks.stored(key)? {
            Some(st) if st.is_expired(self.now) => {
                self.pending_expired(key);
                Ok(None)
            }
            Some(st) => {
                let s = self.guards.of(key)?;
                if self.ks.tracks_reads()
                    && let Some(m) = s.meta.get_mut(key)
                {
                    m.access(self.now);
                }
                match st {
                    Stored::Plain(e) => Ok(Some(e)),
                    Stored::Held { .. } => self.ks.materialize(s, key).map(Some),
                }
            }
            None => Ok(None),
        }
    }

    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()> {
        self.guards.of(key)?;
        // Served after the whole command (or EXEC) is done: if a later write of the same
        // batch deletes the key, the serve finds it empty.
        self.ks.blocking.touched(key);
        self.pend(
            key,
            Pending {
                value: value.map(|e| encode_kind(e.kind, e.data, e.expiry)),
                expiry: value.and_then(|e| e.expiry),
                touched: true,
                expired: false,
                held: false,
            },
        );
        Ok(())
    }

    fn max_value_len(&self) -> usize {
        self.ks.config.max_value_len
    }

    fn stream_node_limits(&self) -> meridian_redis::streams::NodeLimits {
        self.ks.stream_node_limits()
    }

    fn count_read(&mut self, key: &[u8], hit: bool) {
        self.ks.count_read(key, hit);
    }

    /// The collection the key's stripe holds, changed in place: the overlay holds the
    /// stripe, so nobody sees it before the overlay is done. A key this overlay wrote as
    /// bytes is not held (`load` has those bytes).
    fn object_mut(&mut self, key: &[u8]) -> Result<Option<(&mut dyn Collection, Option<u64>)>> {
        if !self.ks.hold_objects || self.pending.get(key).is_some_and(|p| !p.held) {
            return Ok(None);
        }
        let now = self.now;
        let s = self.guards.of(key)?;
        let expired = match s.objects.get(key) {
            None => return Ok(None),
            Some(h) => h.expiry.is_some_and(|at| now.0 > at),
        };
        if expired {
            self.pending_expired(key);
            return Ok(None);
        }
        let s = self.guards.of(key)?;
        Ok(s.objects.get_mut(key).map(|h| h.open()))
    }

    fn header(&mut self, key: &[u8]) -> Result<Option<(Kind, Option<u64>)>> {
        if self.pending.contains_key(key) || self.guards.of(key).is_err() {
            return Ok(self.load(key)?.map(|e| (e.kind, e.expiry)));
        }
        match self.ks.stored(key)? {
            Some(st) if st.is_expired(self.now) => {
                self.pending_expired(key);
                Ok(None)
            }
            Some(st) => {
                if self.ks.tracks_reads()
                    && let Some(m) = self.guards.of(key)?.meta.get_mut(key)
                {
                    m.access(self.now);
                }
                Ok(Some((st.kind(), st.expiry())))
            }
            None => Ok(None),
        }
    }

    fn retime(&mut self, key: &[u8], expiry: Option<u64>) -> Result<()> {
        if self.object_mut(key)?.is_none() {
            return retime_stored(self, key, expiry);
        }
        // Held: the object takes the expiry; the marker goes with the batch.
        let s = self.guards.of(key)?;
        let Some(h) = s.objects.get_mut(key) else {
            return Ok(());
        };
        h.expiry = expiry;
        let marker = meridian_core::envelope::encode_held(h.obj.kind(), expiry);
        self.pend(
            key,
            Pending {
                value: Some(marker),
                expiry,
                touched: true,
                expired: false,
                held: true,
            },
        );
        Ok(())
    }

    fn object_changed(&mut self, key: &[u8]) -> Result<()> {
        self.held_changed = true;
        let now = self.now;
        let s = self.guards.of(key)?;
        let empty = s.objects.get(key).is_some_and(|h| h.obj.is_empty());
        if !empty {
            return self.ks.held_changed(s, key, now);
        }
        // The key goes with the batch; its object is dropped at commit.
        self.pend(
            key,
            Pending {
                value: None,
                expiry: None,
                touched: true,
                expired: false,
                held: false,
            },
        );
        Ok(())
    }

    fn store_object(
        &mut self,
        key: &[u8],
        obj: Box<dyn Collection>,
        expiry: Option<u64>,
    ) -> Result<Option<Box<dyn Collection>>> {
        if !self.ks.hold_objects {
            return Ok(Some(obj));
        }
        let kind = obj.kind();
        let s = self.guards.of(key)?;
        self.held_changed = true;
        self.ks.put_held(s, key, obj, expiry);
        self.ks.blocking.touched(key);
        self.pend(
            key,
            Pending {
                value: Some(meridian_core::envelope::encode_held(kind, expiry)),
                expiry,
                touched: true,
                expired: false,
                held: true,
            },
        );
        Ok(None)
    }
}

impl Overlay<'_> {
    /// Buffers `p` as `key`'s write, replacing an earlier one (a key that expired, then was
    /// written, still counts as expired).
    fn pend(&mut self, key: &[u8], p: Pending) {
        if p.touched {
            crate::keyspace_events::record(key);
            crate::tracking::record(key);
        }
        match self.pending.entry(Bytes::copy_from_slice(key)) {
            MapEntry::Occupied(mut o) => {
                let expired = o.get().expired;
                *o.get_mut() = Pending { expired, ..p };
            }
            MapEntry::Vacant(v) => {
                v.insert(p);
            }
        }
    }

    /// Buffers the deletion of `key`, found expired.
    fn pending_expired(&mut self, key: &[u8]) {
        self.pending.insert(
            Bytes::copy_from_slice(key),
            Pending {
                value: None,
                expiry: None,
                touched: false,
                expired: true,
                held: false,
            },
        );
    }
}
