//! One replica's objects: dotted-version-vector [`Object`]s stored over a storage
//! [`Engine`], plus the hint space of hinted handoff (spec §9).
//!
//! Layout in the engine:
//! - a client key is stored under exactly the bytes the client sent (`bucket:rest`); its
//!   value is `OBJECT_FORMAT ‖ postcard(Object)`, written as the key's newest version at the
//!   node clock's `now()`;
//! - a hint (an object this node holds as a *fallback* for a down primary) is stored under
//!   `0xFF 'h' ‖ u32_be(for_node) ‖ key`. Client keys may not start with `0xFF`
//!   ([`is_reserved_key`]; the node API refuses them), so the two spaces never collide, and
//!   hints live in the same engine as the data: on a durable engine they survive restarts.
//!
//! Guarantees:
//! - every read-modify-write of one engine key ([`ObjectStore::merge_apply`],
//!   [`ObjectStore::coordinator_put`], [`ObjectStore::add_hint`],
//!   [`ObjectStore::remove_hint`]) runs under that key's stripe mutex, so concurrent merges
//!   of the same key never lose one another's siblings;
//! - a merge that changes nothing writes nothing (repairs and duplicate replicates are
//!   cheap and idempotent);
//! - each write first raises the engine's GC horizon to `now`, so the engine may prune a
//!   key's older versions inline and a hot key keeps one version (this store never reads
//!   old versions);
//! - [`ObjectStore::remove_hint`] deletes a hint only if it still holds exactly the object
//!   that was delivered, so a write that reached the hint after the delivery started is
//!   kept for the next round;
//! - a key a tombstone reaping forgets ([`ObjectStore::reap_if_unchanged`]) first raises
//!   this node's *dot floors* — per replica id, the highest counter of any object it forgot,
//!   stored under `0xFF 'f' ‖ postcard(replica id)` — and every dot coordinated here goes
//!   above its floor, so a forgotten key never gets a dot other replicas already know;
//! - client-write limits (`siblings_max`) apply only in [`ObjectStore::coordinator_put`],
//!   never on merge, repair or handoff (basho/riak_kv#1156);
//! - every read that serves a client key ([`ObjectStore::get`], merges, coordinated writes)
//!   applies the bucket's truncation mark ([`crate::truncation`]): siblings written at or
//!   before it are dropped, and a merge stores the object without them; the raw scans
//!   ([`ObjectStore::objects_from`]) return objects as stored, for the callers that mirror
//!   storage (anti-entropy trees, handoff), and [`ObjectStore::visible`] applies the mark to
//!   what they return;
//! - with anti-entropy trees attached ([`ObjectStore::attach_trees`]), every write of a
//!   client key is recorded in them while the key's stripe lock is still held, so the trees
//!   follow the engine's order of writes exactly; hints are never recorded.

pub mod format;

pub use format::{
    FLOOR_PREFIX, HINT_PREFIX, OBJECT_FORMAT, RESERVED_PREFIX, decode_object, encode_object,
    encoded_len, is_reserved_key,
};

use crate::anti_entropy::AaeTrees;
use crate::error::{ReplicationError, Result};
use crate::truncation::marks::SharedMarks;
use bytes::Bytes;
use meridian_cluster::dvv::{self, Clock as CausalClock, Content, Meta, Object, ReplicaId};
use meridian_core::{Clock, NodeId, PartitionId, Timestamp};
use meridian_storage::Engine;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Arc, OnceLock};

/// Number of lock stripes (a power of two).
const STRIPES: usize = 256;

/// The engine key of `rid`'s dot floor.
fn floor_key(rid: ReplicaId) -> Bytes {
    let mut k = FLOOR_PREFIX.to_vec();
    k.extend(postcard::to_stdvec(&rid).unwrap_or_default());
    Bytes::from(k)
}

/// The engine key of the hint for `key` held for `for_node`.
pub fn hint_key(for_node: NodeId, key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(HINT_PREFIX.len() + 4 + key.len());
    k.extend_from_slice(&HINT_PREFIX);
    k.extend_from_slice(&for_node.0.to_be_bytes());
    k.extend_from_slice(key);
    Bytes::from(k)
}

/// Where the hints for `for_node` end (the whole hint space's end when `None`).
fn hint_space_end(for_node: Option<NodeId>) -> Bound<Bytes> {
    match for_node.and_then(|n| n.0.checked_add(1)) {
        Some(next) => Bound::Excluded(hint_key(NodeId(next), b"")),
        None => Bound::Excluded(Bytes::from_static(&[RESERVED_PREFIX, b'h' + 1])),
    }
}

fn parse_hint_key(k: &[u8]) -> Option<(NodeId, Bytes)> {
    let rest = k.strip_prefix(&HINT_PREFIX)?;
    let (node, key) = rest.split_at_checked(4)?;
    let node = u32::from_be_bytes(node.try_into().ok()?);
    Some((NodeId(node), Bytes::copy_from_slice(key)))
}

/// One stored hint: an object kept for a primary that was down when it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// The primary the object belongs to.
    pub for_node: NodeId,
    /// The client key.
    pub key: Bytes,
    /// The object to hand off.
    pub object: Object,
}

/// A page of client objects and where the next page starts (`None`: no more).
pub type ObjectPage = (Vec<(Bytes, Object)>, Option<Bytes>);

/// A replica's objects over an engine. See the module docs.
#[derive(Debug)]
pub struct ObjectStore {
    engine: Arc<dyn Engine>,
    clock: Arc<dyn Clock>,
    stripes: Box<[Mutex<()>]>,
    trees: OnceLock<Arc<AaeTrees>>,
    /// Dot floors read so far (see the module docs); absent: not read yet.
    floors: RwLock<BTreeMap<ReplicaId, u64>>,
    /// The buckets' truncation marks (shared with the node, which replaces them).
    marks: SharedMarks,
}

impl ObjectStore {
    /// Whether a write that returned still has to be synced to be on disk (what a durable
    /// `dw` ack waits for).
    pub fn needs_sync(&self) -> bool {
        self.engine.write_durability() == meridian_storage::WriteDurability::OnSync
    }

    /// Syncs every write that returned so far to disk (off the async threads: an fsync
    /// blocks); whether they are on disk.
    pub async fn sync_written(&self) -> bool {
        let engine = self.engine.clone();
        match tokio::task::spawn_blocking(move || engine.sync_written()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "syncing writes for a durable ack failed");
                false
            }
            Err(_) => false,
        }
    }

    /// A store over `engine`, stamping versions with `clock`.
    pub fn new(engine: Arc<dyn Engine>, clock: Arc<dyn Clock>) -> ObjectStore {
        ObjectStore {
            engine,
            clock,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            trees: OnceLock::new(),
            floors: RwLock::new(BTreeMap::new()),
            marks: SharedMarks::default(),
        }
    }

    /// This store, reading through `marks` (the node's truncation marks).
    pub fn with_marks(mut self, marks: SharedMarks) -> ObjectStore {
        self.marks = marks;
        self
    }

    /// Applies the truncation mark of `key`'s bucket to `o` (its stored object): drops the
    /// siblings the mark hides; returns whether it dropped any.
    pub fn visible(&self, key: &[u8], o: &mut Object) -> bool {
        match self.marks.read().mark_for(key) {
            Some(mark) => dvv::truncate(o, mark),
            None => false,
        }
    }

    /// Attaches anti-entropy trees: from now on every write of a client key is recorded in
    /// them. The trees must describe the engine's current contents (see
    /// [`AaeTrees::build`]). Returns false (and changes nothing) if trees were already
    /// attached.
    pub fn attach_trees(&self, trees: Arc<AaeTrees>) -> bool {
        self.trees.set(trees).is_ok()
    }

    /// The attached anti-entropy trees, if any.
    pub fn trees(&self) -> Option<&Arc<AaeTrees>> {
        self.trees.get()
    }

    /// The underlying engine.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    fn lock(&self, engine_key: &[u8]) -> MutexGuard<'_, ()> {
        let h = meridian_cluster::key_hash(b"", engine_key);
        self.stripes[(h as usize) & (STRIPES - 1)].lock()
    }

    fn read(&self, engine_key: &[u8]) -> Result<Option<Object>> {
        match self.engine.get_latest(engine_key)? {
            Some(v) => match v.value {
                Some(bytes) => decode_object(&bytes).map(Some),
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// Writes `o` under `engine_key`; the caller holds the key's stripe lock.
    fn write(&self, engine_key: Bytes, o: &Object) -> Result<()> {
        let now = self.clock.now();
        self.engine.set_gc_horizon(now);
        if let Some(t) = self.trees.get() {
            let recorded = engine_key.clone();
            self.engine.put(engine_key, now, encode_object(o))?;
            t.record(&recorded, Some(o));
        } else {
            self.engine.put(engine_key, now, encode_object(o))?;
        }
        Ok(())
    }

    /// The object stored for client key `key`, if any, as its bucket's truncation mark
    /// shows it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Object>> {
        let mut o = self.read(key)?;
        if let Some(o) = o.as_mut() {
            self.visible(key, o);
        }
        Ok(o)
    }

    /// Rewrites the object of `key` without the siblings its bucket's truncation mark hides
    /// (the sweep that frees a flushed bucket's storage); returns whether it did.
    pub fn prune(&self, key: &[u8]) -> Result<bool> {
        let _g = self.lock(key);
        let Some(mut o) = self.read(key)? else {
            return Ok(false);
        };
        if !self.visible(key, &mut o) {
            return Ok(false);
        }
        self.write(Bytes::copy_from_slice(key), &o)?;
        Ok(true)
    }

    /// Merges `incoming` into the stored object of `key` (replica apply, read repair,
    /// handoff), resolving LWW when `allow_mult` is false; returns the merged object.
    pub fn merge_apply(&self, key: &[u8], incoming: &Object, allow_mult: bool) -> Result<Object> {
        self.merge_into(Bytes::copy_from_slice(key), key, incoming, allow_mult)
    }

    /// Merges `incoming` into what `engine_key` (client key `key`, or one of its hints) holds,
    /// as `key`'s truncation mark shows both, and stores the result if it differs from what
    /// was stored.
    fn merge_into(
        &self,
        engine_key: Bytes,
        key: &[u8],
        incoming: &Object,
        allow_mult: bool,
    ) -> Result<Object> {
        let _g = self.lock(&engine_key);
        let local = self.read(&engine_key)?;
        let mut merged = match &local {
            Some(l) => dvv::merge_with(l, incoming, allow_mult),
            None if allow_mult => incoming.clone(),
            None => dvv::lww(incoming.clone()),
        };
        // After the merge: the kept clock makes the hidden siblings lose against either side.
        self.visible(key, &mut merged);
        if local.as_ref() != Some(&merged) {
            self.write(engine_key, &merged)?;
        }
        Ok(merged)
    }

    /// A client write coordinated here: [`dvv::coordinator_put`] on the stored object with
    /// the client's context `ctx`, stamped with this node's clock, LWW-resolved when
    /// `allow_mult` is false. Refused with `too_many_siblings` (and not applied) when the
    /// result would have more than `siblings_max` siblings.
    pub fn coordinator_put(
        &self,
        key: &[u8],
        ctx: &CausalClock,
        content: Content,
        me: ReplicaId,
        allow_mult: bool,
        siblings_max: usize,
    ) -> Result<Object> {
        self.coordinate(
            Bytes::copy_from_slice(key),
            Some(ctx),
            |_| Ok((Some(content), ())),
            me,
            allow_mult,
            siblings_max,
        )
        .map(|(o, ())| o.unwrap_or_default())
    }

    /// A client write coordinated here that supersedes everything this replica holds for
    /// `key`: [`Self::coordinator_put`] with the stored object's own clock as the context,
    /// read under the key's stripe lock (what a Redis `SET` means, without a quorum read
    /// first: Riak's coordinating vnode does the same with its local object). Values this
    /// replica has not seen yet stay as siblings, exactly as if a read had missed them.
    pub fn coordinator_overwrite(
        &self,
        key: &[u8],
        content: Content,
        me: ReplicaId,
        allow_mult: bool,
        siblings_max: usize,
    ) -> Result<Object> {
        self.coordinate(
            Bytes::copy_from_slice(key),
            None,
            |_| Ok((Some(content), ())),
            me,
            allow_mult,
            siblings_max,
        )
        .map(|(o, ())| o.unwrap_or_default())
    }

    /// [`Self::coordinator_overwrite`] of content computed from what this replica holds,
    /// under the key's stripe lock: `make` gets the stored object (if any) and returns the
    /// content to write (`None`: nothing to write) and a result, or refuses (nothing is
    /// written). Returns the object written (`None` when nothing was) and the result. A CRDT's
    /// update (`eventual::counter`, `eventual::map`) is made this way, so an actor's updates
    /// are serialized over its own last state.
    pub fn coordinator_update<T>(
        &self,
        key: &[u8],
        make: impl FnOnce(Option<&Object>) -> Result<(Option<Content>, T)>,
        me: ReplicaId,
        allow_mult: bool,
        siblings_max: usize,
    ) -> Result<(Option<Object>, T)> {
        self.coordinate(
            Bytes::copy_from_slice(key),
            None,
            make,
            me,
            allow_mult,
            siblings_max,
        )
    }

    /// `ctx: None` takes the stored object's clock as the context. `make` returning no
    /// content writes nothing (and returns no object).
    fn coordinate<T>(
        &self,
        engine_key: Bytes,
        ctx: Option<&CausalClock>,
        make: impl FnOnce(Option<&Object>) -> Result<(Option<Content>, T)>,
        me: ReplicaId,
        allow_mult: bool,
        siblings_max: usize,
    ) -> Result<(Option<Object>, T)> {
        let _g = self.lock(&engine_key);
        let local = self.get(&engine_key)?;
        let (content, out) = make(local.as_ref())?;
        let Some(content) = content else {
            return Ok((None, out));
        };
        let meta = Meta {
            ts_us: self.clock.now().micros(),
        };
        let own;
        let ctx = match ctx {
            Some(c) => c,
            None => {
                own = local
                    .as_ref()
                    .map(|o| o.clock().clone())
                    .unwrap_or_default();
                &own
            }
        };
        let floor = self.dot_floor(me)?;
        let mut o = dvv::coordinator_put_above(local, ctx, content, meta, me, floor)
            .map_err(ReplicationError::ContextRefused)?;
        if !allow_mult {
            o = dvv::lww(o);
        }
        let n = o.siblings().len();
        if n > siblings_max {
            return Err(ReplicationError::TooManySiblings {
                n,
                max: siblings_max,
            });
        }
        self.write(engine_key, &o)?;
        Ok((Some(o), out))
    }

    /// One page of client objects as stored (truncation marks not applied: see
    /// [`Self::visible`]): up to `limit` keys after `after` (`None`: from the start), in key
    /// order, hints and other reserved keys excluded, undecodable objects skipped with a
    /// warning. Also returns where the next page starts (`None`: this was the
    /// last).
    pub fn objects_after(&self, after: Option<&[u8]>, limit: usize) -> Result<ObjectPage> {
        let start = match after {
            Some(k) => Bound::Excluded(Bytes::copy_from_slice(k)),
            None => Bound::Unbounded,
        };
        self.objects_from(start, limit)
    }

    /// [`ObjectStore::objects_after`] from any start bound.
    pub fn objects_from(&self, start: Bound<Bytes>, limit: usize) -> Result<ObjectPage> {
        let limit = limit.max(1);
        let end = Bound::Excluded(Bytes::from_static(&[RESERVED_PREFIX]));
        let rows = self.engine.scan(start, end, Timestamp::MAX, limit, false)?;
        let next = if rows.len() == limit {
            rows.last().map(|(k, _)| k.clone())
        } else {
            None
        };
        let mut out = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            if let Some(bytes) = v.value {
                match decode_object(&bytes) {
                    Ok(o) => out.push((k, o)),
                    Err(e) => {
                        tracing::warn!(key = ?k, error = %e, "skipping an undecodable object")
                    }
                }
            }
        }
        Ok((out, next))
    }

    /// Deletes client key `key` if its object still equals `delivered` (ownership handoff:
    /// a write that arrived after the transfer started is kept for the next round); returns
    /// whether it was deleted.
    pub fn remove_if_unchanged(&self, key: &[u8], delivered: &Object) -> Result<bool> {
        let _g = self.lock(key);
        if self.read(key)?.as_ref() != Some(delivered) {
            return Ok(false);
        }
        self.forget(key)?;
        Ok(true)
    }

    /// Deletes client key `key` and its anti-entropy entry. The caller holds its stripe.
    fn forget(&self, key: &[u8]) -> Result<()> {
        let now = self.clock.now();
        self.engine.set_gc_horizon(now);
        self.engine.delete(Bytes::copy_from_slice(key), now)?;
        if let Some(t) = self.trees.get() {
            t.record(key, None);
        }
        Ok(())
    }

    /// Tombstone reaping: deletes client key `key` if it still holds exactly `tombstone`,
    /// after raising the dot floors of `node`'s replica ids in its clock (so no dot it
    /// covers is issued again); returns whether it was deleted.
    pub fn reap_if_unchanged(&self, key: &[u8], tombstone: &Object, node: NodeId) -> Result<bool> {
        let _g = self.lock(key);
        if self.get(key)?.as_ref() != Some(tombstone) {
            return Ok(false);
        }
        for (rid, counter) in tombstone.clock().iter().filter(|(r, _)| r.node == node) {
            if counter > self.dot_floor(rid)? {
                // Durable before the key goes: a crash in between leaves a higher floor.
                self.engine.put(
                    floor_key(rid),
                    self.clock.now(),
                    Bytes::copy_from_slice(&counter.to_be_bytes()),
                )?;
                self.floors.write().insert(rid, counter);
            }
        }
        self.forget(key)?;
        Ok(true)
    }

    /// The dot floor of `rid`: the highest of its counters in any object this store forgot.
    fn dot_floor(&self, rid: ReplicaId) -> Result<u64> {
        if let Some(&f) = self.floors.read().get(&rid) {
            return Ok(f);
        }
        let stored = match self.engine.get_latest(&floor_key(rid))? {
            Some(v) => v
                .value
                .and_then(|b| <[u8; 8]>::try_from(&b[..]).ok())
                .map(u64::from_be_bytes)
                .unwrap_or(0),
            None => 0,
        };
        self.floors.write().insert(rid, stored);
        Ok(stored)
    }

    /// Records in the attached trees every stored object of `partitions` (after
    /// [`AaeTrees::set_held`] added their empty trees), reading the engine in pages of
    /// `page` keys. Each key is re-read under its stripe lock, so a write racing the scan is
    /// recorded in order. Returns the number of keys recorded.
    pub fn record_partitions(
        &self,
        partitions: &BTreeSet<PartitionId>,
        page: usize,
    ) -> Result<usize> {
        let Some(trees) = self.trees.get() else {
            return Ok(0);
        };
        let mut recorded = 0;
        let mut after: Option<Bytes> = None;
        loop {
            let (rows, next) = self.objects_after(after.as_deref(), page)?;
            for (k, _) in &rows {
                if partitions.contains(&trees.partition_of(k)) {
                    let _g = self.lock(k);
                    trees.record(k, self.read(k)?.as_ref());
                    recorded += 1;
                }
            }
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        Ok(recorded)
    }

    /// Merges `incoming` into the hint of `key` held for `for_node`; returns the hint.
    pub fn add_hint(
        &self,
        for_node: NodeId,
        key: &[u8],
        incoming: &Object,
        allow_mult: bool,
    ) -> Result<Object> {
        self.merge_into(hint_key(for_node, key), key, incoming, allow_mult)
    }

    /// The hint of `key` held for `for_node`, if any.
    pub fn get_hint(&self, for_node: NodeId, key: &[u8]) -> Result<Option<Object>> {
        self.read(&hint_key(for_node, key))
    }

    /// Deletes the hint of `key` for `for_node` if it still equals `delivered`; returns
    /// whether it was deleted.
    pub fn remove_hint(&self, for_node: NodeId, key: &[u8], delivered: &Object) -> Result<bool> {
        let hk = hint_key(for_node, key);
        let _g = self.lock(&hk);
        if self.read(&hk)?.as_ref() != Some(delivered) {
            return Ok(false);
        }
        let now = self.clock.now();
        self.engine.set_gc_horizon(now);
        self.engine.delete(hk, now)?;
        Ok(true)
    }

    /// Up to `limit` stored hints, ordered by `(for_node, key)`.
    pub fn hints(&self, limit: usize) -> Result<Vec<Hint>> {
        let start = Bound::Included(Bytes::copy_from_slice(&HINT_PREFIX));
        self.scan_hints(start, hint_space_end(None), limit)
    }

    /// Up to `limit` hints held for `for_node`, in key order, starting after client key
    /// `after` (from the first when `None`).
    pub fn hints_for(
        &self,
        for_node: NodeId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Hint>> {
        let start = match after {
            Some(k) => Bound::Excluded(hint_key(for_node, k)),
            None => Bound::Included(hint_key(for_node, b"")),
        };
        self.scan_hints(start, hint_space_end(Some(for_node)), limit)
    }

    /// The nodes this node holds hints for, ascending: one engine seek per node, however
    /// many hints each has.
    pub fn hint_targets(&self) -> Result<Vec<NodeId>> {
        let mut out = Vec::new();
        let mut start = Bound::Included(Bytes::copy_from_slice(&HINT_PREFIX));
        loop {
            let rows = self
                .engine
                .scan(start, hint_space_end(None), Timestamp::MAX, 1, false)?;
            let Some((node, _)) = rows.first().and_then(|(k, _)| parse_hint_key(k)) else {
                return Ok(out);
            };
            out.push(node);
            match node.0.checked_add(1) {
                Some(next) => start = Bound::Included(hint_key(NodeId(next), b"")),
                None => return Ok(out),
            }
        }
    }

    fn scan_hints(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        limit: usize,
    ) -> Result<Vec<Hint>> {
        let rows = self.engine.scan(start, end, Timestamp::MAX, limit, false)?;
        let mut out = Vec::with_capacity(rows.len());
        for (k, v) in rows {
            let (Some((for_node, key)), Some(bytes)) = (parse_hint_key(&k), v.value) else {
                continue;
            };
            out.push(Hint {
                for_node,
                key,
                object: decode_object(&bytes)?,
            });
        }
        Ok(out)
    }

    /// How many hints are stored (the spec's `hints_pending`).
    pub fn hints_pending(&self) -> Result<usize> {
        Ok(self.hints(usize::MAX)?.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::{ManualClock, PartitionId};
    use meridian_storage::MemEngine;

    fn store() -> ObjectStore {
        ObjectStore::new(
            Arc::new(MemEngine::new()),
            Arc::new(ManualClock::new(Timestamp(1_000))),
        )
    }

    fn me(node: u32) -> ReplicaId {
        ReplicaId {
            partition: PartitionId(3),
            node: NodeId(node),
            incarnation: 0,
            epoch: 0,
        }
    }

    fn val(s: &'static str) -> Content {
        Content::Value(Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn overwrite_supersedes_everything_held_here() {
        let s = store();
        // Two concurrent blind writes from different coordinators: two siblings.
        s.coordinator_put(b"k", &CausalClock::new(), val("a"), me(1), true, 100)
            .unwrap();
        s.coordinator_put(b"k", &CausalClock::new(), val("b"), me(2), true, 100)
            .unwrap();
        assert_eq!(s.get(b"k").unwrap().unwrap().siblings().len(), 2);
        let o = s
            .coordinator_overwrite(b"k", val("c"), me(1), true, 100)
            .unwrap();
        assert_eq!(o.values().collect::<Vec<_>>(), [&Bytes::from_static(b"c")]);
        assert_eq!(s.get(b"k").unwrap().unwrap(), o);
        // On an absent key it is a plain first write.
        let o = s
            .coordinator_overwrite(b"new", val("x"), me(1), true, 100)
            .unwrap();
        assert_eq!(o.siblings().len(), 1);
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let s = store();
        let o = s
            .coordinator_put(b"b:k", &CausalClock::new(), val("v"), me(1), true, 100)
            .unwrap();
        assert_eq!(decode_object(&encode_object(&o)).unwrap(), o);
        assert_eq!(s.get(b"b:k").unwrap(), Some(o));
        assert!(decode_object(&[]).is_err());
        assert!(decode_object(&[9, 1, 2]).is_err());
        assert!(decode_object(&[OBJECT_FORMAT, 0xff, 0xff]).is_err());
    }

    #[test]
    fn blind_writes_make_siblings_and_a_context_collapses_them() {
        let s = store();
        let empty = CausalClock::new();
        s.coordinator_put(b"k", &empty, val("a"), me(1), true, 100)
            .unwrap();
        let o = s
            .coordinator_put(b"k", &empty, val("b"), me(1), true, 100)
            .unwrap();
        assert_eq!(o.values().count(), 2);
        let o = s
            .coordinator_put(b"k", o.clock(), val("c"), me(1), true, 100)
            .unwrap();
        assert_eq!(o.values().cloned().collect::<Vec<_>>(), ["c"]);
        // The sibling limit refuses a client write and leaves the object alone.
        let e = s
            .coordinator_put(b"k", &empty, val("d"), me(1), true, 1)
            .unwrap_err();
        assert_eq!(e.code(), "too_many_siblings");
        assert_eq!(s.get(b"k").unwrap().unwrap(), o);
    }

    #[test]
    fn merge_apply_is_idempotent_and_lww_keeps_one() {
        let s = store();
        let other = store();
        let a = s
            .coordinator_put(b"k", &CausalClock::new(), val("a"), me(1), true, 100)
            .unwrap();
        let b = other
            .coordinator_put(b"k", &CausalClock::new(), val("b"), me(2), true, 100)
            .unwrap();
        let m = s.merge_apply(b"k", &b, true).unwrap();
        assert_eq!(m.values().count(), 2);
        let versions = s.engine().versions(b"k").unwrap().len();
        assert_eq!(s.merge_apply(b"k", &b, true).unwrap(), m);
        assert_eq!(s.merge_apply(b"k", &a, true).unwrap(), m);
        assert_eq!(s.engine().versions(b"k").unwrap().len(), versions);
        let l = other.merge_apply(b"k", &a, false).unwrap();
        assert_eq!(l.values().count(), 1);
    }

    #[test]
    fn hints_are_listed_and_removed_only_if_unchanged() {
        let s = store();
        let o1 = s
            .coordinator_put(b"x:1", &CausalClock::new(), val("a"), me(1), true, 100)
            .unwrap();
        let o2 = s
            .coordinator_put(b"x:2", &CausalClock::new(), val("b"), me(1), true, 100)
            .unwrap();
        s.add_hint(NodeId(7), b"x:1", &o1, true).unwrap();
        s.add_hint(NodeId(2), b"x:2", &o2, true).unwrap();
        let hints = s.hints(10).unwrap();
        assert_eq!(
            hints
                .iter()
                .map(|h| (h.for_node, h.key.clone()))
                .collect::<Vec<_>>(),
            [
                (NodeId(2), Bytes::from_static(b"x:2")),
                (NodeId(7), Bytes::from_static(b"x:1"))
            ]
        );
        // A hint is not a client object.
        assert_eq!(s.get_hint(NodeId(7), b"x:1").unwrap(), Some(o1.clone()));
        assert!(is_reserved_key(&hint_key(NodeId(7), b"x:1")));
        // Changed since delivery: kept.
        let newer = s
            .coordinator_put(b"x:1", o1.clock(), val("c"), me(1), true, 100)
            .unwrap();
        s.add_hint(NodeId(7), b"x:1", &newer, true).unwrap();
        assert!(!s.remove_hint(NodeId(7), b"x:1", &o1).unwrap());
        assert!(s.remove_hint(NodeId(7), b"x:1", &newer).unwrap());
        assert_eq!(s.hints_pending().unwrap(), 1);
        assert!(s.get_hint(NodeId(7), b"x:1").unwrap().is_none());
    }
}
