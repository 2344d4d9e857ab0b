//! A leader's durable state over the node's storage [`Engine`]: committed versions, the
//! write-ahead records of prepared transactions, the coordinator's decision log, and the
//! oracle's persisted bound.
//!
//! Layout (all under the reserved byte `0xFF`, so eventual and timeline scans never see it):
//!
//! | key | value |
//! |---|---|
//! | `0xFF 'x' ‖ len(k) u32 ‖ k` (the head) | `commit_ts u64 ‖ truncated u8 ‖ n u16 ‖ n × older commit_ts u64 (newest first) ‖ (0 \| 1 ‖ value)` |
//! | `0xFF 'v' ‖ len(k) u32 ‖ k ‖ ¬commit_ts u64` (an older version) | `0` (delete) or `1 ‖ value` |
//! | `0xFF 'y' ‖ txid` | a [`PreparedRecord`] (postcard) |
//! | `0xFF 'z' ‖ txid` | a [`Decision`] (postcard) |
//! | `0xFF 'o'` | the oracle's persisted upper bound (u64) |
//! | `0xFF 'm' ‖ k` | a [`KeyMove`]: `k` is being moved away, or left (postcard) |
//!
//! The head holds a key's newest version and the commit timestamps of the older versions it
//! keeps, so every operation is a point lookup, never a scan: certification reads the head's
//! timestamp, a snapshot read at or above the head answers from it (nearly all reads), and an
//! older snapshot picks its version's timestamp from the head and reads that one key.
//! Garbage collection is under this module's control — the engine's own version horizon is
//! shared with protocols that keep only the newest version and advance it to "now", which
//! would drop versions an open snapshot still reads: each install drops the older versions
//! below the watermark but the newest of them, and keeps at most [`MAX_OLDER`] older
//! versions; a key written faster than that within the watermark's window loses its oldest
//! ones, and a snapshot that needed one of those is refused with `SnapshotTooOld` (retryable),
//! never answered wrongly.
//!
//! Guarantees: a commit installs its versions and deletes its prepared record in one atomic
//! [`WriteBatch`]; [`TxnStore::read_at`] returns the newest version committed strictly below
//! the snapshot, or `SnapshotTooOld` if that version was dropped by the [`MAX_OLDER`] cap.

use crate::moves::KeyMove;
use crate::types::{Result, TimestampSource, TxId, TxnError};
use bytes::Bytes;
use meridian_core::{NodeId, Timestamp};
use meridian_storage::{Engine, WriteBatch};
use serde::{Deserialize, Serialize};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const HEAD_PREFIX: [u8; 2] = [0xFF, b'x'];
const VERSION_PREFIX: [u8; 2] = [0xFF, b'v'];
/// The most older versions a head keeps (see the module docs).
pub const MAX_OLDER: usize = 64;
const PREPARED_PREFIX: [u8; 2] = [0xFF, b'y'];
const DECISION_PREFIX: [u8; 2] = [0xFF, b'z'];
const TSO_BOUND_KEY: [u8; 2] = [0xFF, b'o'];
const MOVE_PREFIX: [u8; 2] = [0xFF, b'm'];

/// The versions of one key shipped by a move: `(commit_ts, value)` newest first (`None`:
/// deleted), and whether older ones were dropped by the [`MAX_OLDER`] cap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyVersions {
    /// The versions, newest first.
    pub versions: Vec<(Timestamp, Option<Bytes>)>,
    /// Snapshots below the oldest version are refused (`SnapshotTooOld`), not answered
    /// "absent".
    pub truncated: bool,
}

impl KeyVersions {
    /// The newest commit timestamp shipped.
    pub fn max_commit_ts(&self) -> Option<Timestamp> {
        self.versions.first().map(|(t, _)| *t)
    }
}

/// A buffered write: a value, or `None` for a delete.
pub type Write = (Bytes, Option<Bytes>);

/// What a participant logs before it votes: enough to re-install its marks after a crash and
/// to install its writes when the outcome arrives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedRecord {
    /// The transaction.
    pub txid: TxId,
    /// Its snapshot.
    pub snap: Timestamp,
    /// This leader's prepare timestamp.
    pub prepare_ts: Timestamp,
    /// Where the timestamps come from.
    pub source: TimestampSource,
    /// The writes at this leader.
    pub writes: Vec<Write>,
    /// Keys held against writers without writing them (WATCH).
    pub watches: Vec<Bytes>,
}

/// The commit point of a distributed transaction, logged by its coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// The transaction.
    pub txid: TxId,
    /// Its commit timestamp.
    pub commit_ts: Timestamp,
    /// Participants that have not acknowledged the commit yet.
    pub pending: Vec<NodeId>,
}

/// A leader's and coordinator's durable state. See the module docs.
#[derive(Debug)]
pub struct TxnStore {
    engine: Arc<dyn Engine>,
    /// Engine timestamps for this module's own keys: strictly increasing, so a delete always
    /// supersedes the put before it whatever the clock does.
    stamp: AtomicU64,
}

fn head_key(key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(2 + 4 + key.len());
    k.extend_from_slice(&HEAD_PREFIX);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    Bytes::from(k)
}

/// A page of [`TxnStore::heads_after`]: `(key, newest commit, newest value)` rows and the key to
/// resume after.
pub type HeadPage = (Vec<(Bytes, Timestamp, Option<Bytes>)>, Option<Bytes>);

/// The user key of a head's engine key (the inverse of [`head_key`]).
fn user_key_of_head(raw: &Bytes) -> Result<Bytes> {
    let bad = || TxnError::Storage("a transactional head key does not decode".into());
    let len: [u8; 4] = raw
        .get(2..6)
        .ok_or_else(bad)?
        .try_into()
        .map_err(|_| bad())?;
    let len = u32::from_be_bytes(len) as usize;
    if raw.len() != 6 + len {
        return Err(bad());
    }
    Ok(raw.slice(6..))
}

fn version_key(key: &[u8], ts: Timestamp) -> Bytes {
    let mut k = Vec::with_capacity(2 + 4 + key.len() + 8);
    k.extend_from_slice(&VERSION_PREFIX);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&(!ts.0).to_be_bytes());
    Bytes::from(k)
}

/// A decoded head: the newest version, and the older versions kept.
#[derive(Debug, Clone)]
struct Head {
    ts: Timestamp,
    /// Older versions were dropped by the [`MAX_OLDER`] cap (not only below the watermark).
    truncated: bool,
    /// The commit timestamps of the older versions kept, newest first.
    older: Vec<u64>,
    /// The stored value (`0` or `1 ‖ value`).
    stored: Bytes,
}

impl Head {
    fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(11 + 8 * self.older.len() + self.stored.len());
        v.extend_from_slice(&self.ts.0.to_be_bytes());
        v.push(u8::from(self.truncated));
        v.extend_from_slice(&(self.older.len() as u16).to_be_bytes());
        for t in &self.older {
            v.extend_from_slice(&t.to_be_bytes());
        }
        v.extend_from_slice(&self.stored);
        Bytes::from(v)
    }

    fn decode(raw: Bytes) -> Result<Head> {
        let bad = || TxnError::Storage("a transactional head does not decode".into());
        let u64_at = |at: usize| -> Result<u64> {
            let b: [u8; 8] = raw
                .get(at..at + 8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?;
            Ok(u64::from_be_bytes(b))
        };
        let ts = u64_at(0)?;
        let truncated = *raw.get(8).ok_or_else(bad)? != 0;
        let n = u16::from_be_bytes(
            raw.get(9..11)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        let older = (0..usize::from(n))
            .map(|i| u64_at(11 + 8 * i))
            .collect::<Result<Vec<u64>>>()?;
        let at = 11 + 8 * usize::from(n);
        if raw.len() <= at {
            return Err(bad());
        }
        Ok(Head {
            ts: Timestamp(ts),
            truncated,
            older,
            stored: raw.slice(at..),
        })
    }
}

fn txid_key(prefix: [u8; 2], txid: TxId) -> Bytes {
    let mut k = Vec::with_capacity(14);
    k.extend_from_slice(&prefix);
    k.extend_from_slice(&txid.coord.0.to_be_bytes());
    k.extend_from_slice(&txid.seq.to_be_bytes());
    Bytes::from(k)
}

fn encode_value(v: Option<&Bytes>) -> Bytes {
    match v {
        None => Bytes::from_static(&[0]),
        Some(v) => {
            let mut b = Vec::with_capacity(1 + v.len());
            b.push(1);
            b.extend_from_slice(v);
            Bytes::from(b)
        }
    }
}

fn decode_value(stored: &Bytes) -> Result<Option<Bytes>> {
    match stored.first() {
        Some(0) => Ok(None),
        Some(1) => Ok(Some(stored.slice(1..))),
        _ => Err(TxnError::Storage(
            "a transactional version does not decode".into(),
        )),
    }
}

fn prefix_end(prefix: &[u8]) -> Bound<Bytes> {
    let mut end = prefix.to_vec();
    // Prefixes here never end in 0xFF.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    Bound::Excluded(Bytes::from(end))
}

impl TxnStore {
    /// The store over `engine`; engine timestamps start at `now`.
    pub fn new(engine: Arc<dyn Engine>, now: Timestamp) -> TxnStore {
        TxnStore {
            engine,
            stamp: AtomicU64::new(now.0),
        }
    }

    /// The engine underneath.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    fn next_stamp(&self) -> Timestamp {
        Timestamp(self.stamp.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        match self.engine.get_value(&head_key(key), Timestamp::MAX)? {
            None => Ok(None),
            Some(raw) => Head::decode(raw).map(Some),
        }
    }

    /// The newest version of `key` committed strictly below `snap`: its commit timestamp and
    /// value (`None`: deleted), or `None` if there is none.
    ///
    /// # Errors
    /// `SnapshotTooOld` when that version was dropped by the [`MAX_OLDER`] cap.
    pub fn read_at(
        &self,
        key: &[u8],
        snap: Timestamp,
    ) -> Result<Option<(Timestamp, Option<Bytes>)>> {
        let Some(head) = self.head(key)? else {
            return Ok(None);
        };
        if head.ts < snap {
            return Ok(Some((head.ts, decode_value(&head.stored)?)));
        }
        let Some(&t) = head.older.iter().find(|&&t| t < snap.0) else {
            if head.truncated {
                return Err(TxnError::SnapshotTooOld {
                    snap: snap.0,
                    watermark: head.older.last().copied().unwrap_or(head.ts.0),
                });
            }
            return Ok(None);
        };
        let stored = self
            .engine
            .get_value(&version_key(key, Timestamp(t)), Timestamp::MAX)?
            .ok_or_else(|| TxnError::Storage("a version the head names is missing".into()))?;
        Ok(Some((Timestamp(t), decode_value(&stored)?)))
    }

    /// One page of the keys this store holds, in the store's order (by key length, then
    /// bytes), after the key `after` (from the first when `None`), at most `limit`: each with
    /// its newest version's commit timestamp and value (`None`: deleted). The second element is
    /// the key to resume after, `None` when no key is left.
    pub fn heads_after(&self, after: Option<&[u8]>, limit: usize) -> Result<HeadPage> {
        let start = match after {
            Some(k) => Bound::Excluded(head_key(k)),
            None => Bound::Included(Bytes::from_static(&HEAD_PREFIX)),
        };
        let limit = limit.max(1);
        let rows = self.engine.scan(
            start,
            prefix_end(&HEAD_PREFIX),
            Timestamp::MAX,
            limit,
            false,
        )?;
        let full = rows.len() == limit;
        let mut out = Vec::with_capacity(rows.len());
        for (raw_key, version) in rows {
            let key = user_key_of_head(&raw_key)?;
            let Some(raw) = version.value else { continue };
            let head = Head::decode(raw)?;
            out.push((key, head.ts, decode_value(&head.stored)?));
        }
        let next = if full {
            out.last().map(|(k, _, _)| k.clone())
        } else {
            None
        };
        Ok((out, next))
    }

    /// The newest commit timestamp of `key` (what certification compares), if any.
    pub fn last_commit(&self, key: &[u8]) -> Result<Option<Timestamp>> {
        Ok(self.head(key)?.map(|h| h.ts))
    }

    /// Adds the version of `key` at `ts` (newer than every version of the key) to `batch`,
    /// with the deletion of the older versions below `watermark` but the newest of them (no
    /// snapshot at or above the watermark reads those), and of any beyond [`MAX_OLDER`].
    /// Returns how many it deletes. The caller holds the key (its stripe) until the batch is
    /// written.
    pub fn install(
        &self,
        batch: &mut WriteBatch,
        key: &[u8],
        ts: Timestamp,
        value: Option<&Bytes>,
        watermark: Timestamp,
    ) -> Result<usize> {
        let mut head = Head {
            ts,
            truncated: false,
            older: Vec::new(),
            stored: encode_value(value),
        };
        let Some(prev) = self.head(key)? else {
            batch.put(head_key(key), self.next_stamp(), head.encode());
            return Ok(0);
        };
        // The previous head becomes the newest older version.
        batch.put(
            version_key(key, prev.ts),
            self.next_stamp(),
            prev.stored.clone(),
        );
        head.truncated = prev.truncated;
        head.older = Vec::with_capacity(prev.older.len() + 1);
        head.older.push(prev.ts.0);
        head.older.extend_from_slice(&prev.older);
        let mut dropped = 0;
        // Below the watermark only the newest older version can still be read.
        if let Some(first_below) = head.older.iter().position(|&t| t < watermark.0) {
            for &t in &head.older[first_below + 1..] {
                batch.delete(version_key(key, Timestamp(t)), self.next_stamp());
                dropped += 1;
            }
            head.older.truncate(first_below + 1);
        }
        if head.older.len() > MAX_OLDER {
            for &t in &head.older[MAX_OLDER..] {
                batch.delete(version_key(key, Timestamp(t)), self.next_stamp());
                dropped += 1;
            }
            head.older.truncate(MAX_OLDER);
            head.truncated = true;
        }
        batch.put(head_key(key), self.next_stamp(), head.encode());
        Ok(dropped)
    }

    /// Every version of `key` a snapshot at or above `watermark` can read — those at or
    /// above it and the newest one below it — newest first, with whether older ones were
    /// dropped by the [`MAX_OLDER`] cap (a move's export, spec `repartitioning.md` §6 step 2).
    pub fn export_key(&self, key: &[u8], watermark: Timestamp) -> Result<KeyVersions> {
        let Some(head) = self.head(key)? else {
            return Ok(KeyVersions::default());
        };
        let mut versions = vec![(head.ts, decode_value(&head.stored)?)];
        let mut below = head.ts < watermark;
        for &t in &head.older {
            if below {
                break;
            }
            below = t < watermark.0;
            let stored = self
                .engine
                .get_value(&version_key(key, Timestamp(t)), Timestamp::MAX)?
                .ok_or_else(|| TxnError::Storage("a version the head names is missing".into()))?;
            versions.push((Timestamp(t), decode_value(&stored)?));
        }
        // Versions left behind are below the watermark: the receiver refuses the snapshots
        // that would need them (`SnapshotTooOld`) rather than answering "absent".
        let left_some = versions.len() < 1 + head.older.len();
        Ok(KeyVersions {
            versions,
            truncated: head.truncated || left_some,
        })
    }

    /// Adds to `batch` the replacement of whatever this store holds of `key` by `kv` (a
    /// move's install): afterwards [`TxnStore::read_at`] answers every snapshot exactly as
    /// the exporting store did. An empty `kv` leaves the key absent.
    ///
    /// # Errors
    /// `BadRequest` when the versions are not strictly newest first.
    pub fn import_key(&self, batch: &mut WriteBatch, key: &[u8], kv: &KeyVersions) -> Result<()> {
        if kv.versions.windows(2).any(|w| w[0].0 <= w[1].0) || kv.versions.len() > MAX_OLDER + 1 {
            return Err(TxnError::BadRequest(
                "imported versions are not strictly newest first within the cap".into(),
            ));
        }
        self.delete_key(batch, key)?;
        let Some(((ts, v), older)) = kv.versions.split_first() else {
            return Ok(());
        };
        for (t, ov) in older {
            batch.put(
                version_key(key, *t),
                self.next_stamp(),
                encode_value(ov.as_ref()),
            );
        }
        let head = Head {
            ts: *ts,
            truncated: kv.truncated,
            older: older.iter().map(|(t, _)| t.0).collect(),
            stored: encode_value(v.as_ref()),
        };
        batch.put(head_key(key), self.next_stamp(), head.encode());
        Ok(())
    }

    /// Adds the removal of every version of `key` to `batch` (a moved key's source, after
    /// the grace period). Returns how many versions it removes.
    pub fn delete_key(&self, batch: &mut WriteBatch, key: &[u8]) -> Result<usize> {
        let Some(head) = self.head(key)? else {
            return Ok(0);
        };
        for &t in &head.older {
            batch.delete(version_key(key, Timestamp(t)), self.next_stamp());
        }
        batch.delete(head_key(key), self.next_stamp());
        Ok(1 + head.older.len())
    }

    /// Logs `key`'s move state (`None`: none any more).
    pub fn log_key_move(&self, key: &[u8], state: Option<&KeyMove>) -> Result<()> {
        let mut k = Vec::with_capacity(2 + key.len());
        k.extend_from_slice(&MOVE_PREFIX);
        k.extend_from_slice(key);
        match state {
            Some(m) => {
                let v = postcard::to_stdvec(&(Bytes::copy_from_slice(key), *m))
                    .map_err(|e| TxnError::Storage(e.to_string()))?;
                self.engine
                    .put(Bytes::from(k), self.next_stamp(), Bytes::from(v))?;
            }
            None => self.engine.delete(Bytes::from(k), self.next_stamp())?,
        }
        Ok(())
    }

    /// Every logged move state (recovery after a restart).
    pub fn key_moves(&self) -> Result<Vec<(Bytes, KeyMove)>> {
        self.scan_records(MOVE_PREFIX)
    }

    /// Logs a prepared transaction (before its vote).
    pub fn log_prepared(&self, rec: &PreparedRecord) -> Result<()> {
        let v = postcard::to_stdvec(rec).map_err(|e| TxnError::Storage(e.to_string()))?;
        self.engine.put(
            txid_key(PREPARED_PREFIX, rec.txid),
            self.next_stamp(),
            Bytes::from(v),
        )?;
        Ok(())
    }

    /// Adds the removal of `txid`'s prepared record to `batch` (with its outcome).
    pub fn forget_prepared(&self, batch: &mut WriteBatch, txid: TxId) {
        batch.delete(txid_key(PREPARED_PREFIX, txid), self.next_stamp());
    }

    /// Every prepared record (recovery after a restart).
    pub fn prepared(&self) -> Result<Vec<PreparedRecord>> {
        self.scan_records(PREPARED_PREFIX)
    }

    /// Logs (or updates) a decision: the commit point.
    pub fn log_decision(&self, d: &Decision) -> Result<()> {
        let v = postcard::to_stdvec(d).map_err(|e| TxnError::Storage(e.to_string()))?;
        self.engine.put(
            txid_key(DECISION_PREFIX, d.txid),
            self.next_stamp(),
            Bytes::from(v),
        )?;
        Ok(())
    }

    /// The decision on `txid`, if this coordinator logged one that is not fully acknowledged.
    pub fn decision(&self, txid: TxId) -> Result<Option<Decision>> {
        match self
            .engine
            .get_value(&txid_key(DECISION_PREFIX, txid), Timestamp::MAX)?
        {
            None => Ok(None),
            Some(v) => postcard::from_bytes(&v)
                .map(Some)
                .map_err(|e| TxnError::Storage(e.to_string())),
        }
    }

    /// Drops a decision every participant acknowledged.
    pub fn forget_decision(&self, txid: TxId) -> Result<()> {
        self.engine
            .delete(txid_key(DECISION_PREFIX, txid), self.next_stamp())?;
        Ok(())
    }

    /// Every logged decision (recovery after a restart).
    pub fn decisions(&self) -> Result<Vec<Decision>> {
        self.scan_records(DECISION_PREFIX)
    }

    fn scan_records<T: serde::de::DeserializeOwned>(&self, prefix: [u8; 2]) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut start = Bound::Included(Bytes::copy_from_slice(&prefix));
        loop {
            let page = self
                .engine
                .scan(start, prefix_end(&prefix), Timestamp::MAX, 256, false)?;
            let Some((last, _)) = page.last() else { break };
            start = Bound::Excluded(last.clone());
            let full = page.len() == 256;
            for (_, v) in page {
                if let Some(v) = v.value {
                    out.push(
                        postcard::from_bytes(&v).map_err(|e| TxnError::Storage(e.to_string()))?,
                    );
                }
            }
            if !full {
                break;
            }
        }
        Ok(out)
    }

    /// The oracle's persisted bound (0 if never persisted).
    pub fn tso_bound(&self) -> Result<u64> {
        Ok(
            match self.engine.get_value(&TSO_BOUND_KEY, Timestamp::MAX)? {
                Some(v) if v.len() == 8 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&v);
                    u64::from_be_bytes(b)
                }
                _ => 0,
            },
        )
    }

    /// Persists the oracle's bound and makes it durable before returning.
    pub fn persist_tso_bound(&self, bound: u64) -> Result<()> {
        self.engine.put(
            Bytes::from_static(&TSO_BOUND_KEY),
            self.next_stamp(),
            Bytes::copy_from_slice(&bound.to_be_bytes()),
        )?;
        self.engine.flush()?;
        Ok(())
    }

    /// Applies `batch` atomically.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if !batch.is_empty() {
            self.engine.write_batch(batch)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_storage::MemEngine;

    fn store() -> TxnStore {
        TxnStore::new(Arc::new(MemEngine::new()), Timestamp(1))
    }

    fn put_below(s: &TxnStore, k: &[u8], ts: u64, v: Option<&str>, watermark: u64) -> usize {
        let mut b = WriteBatch::new();
        let v = v.map(|v| Bytes::copy_from_slice(v.as_bytes()));
        let n = s
            .install(&mut b, k, Timestamp(ts), v.as_ref(), Timestamp(watermark))
            .unwrap();
        s.write(b).unwrap();
        n
    }

    fn put(s: &TxnStore, k: &[u8], ts: u64, v: Option<&str>) {
        put_below(s, k, ts, v, 0);
    }

    /// The listing against a model: every key once, in pages of any size, with its newest
    /// version, whatever else the store holds (versions, prepared records, moves).
    #[test]
    fn heads_list_every_key_once_with_its_newest_version() {
        let s = store();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..57u64 {
            let key = format!("k{}", i * 7 % 57).repeat(1 + (i % 3) as usize);
            put(&s, key.as_bytes(), 10 + i, Some("old"));
            let newest = (i % 4 != 0).then(|| format!("v{i}"));
            put(&s, key.as_bytes(), 100 + i, newest.as_deref());
            model.insert(key, (100 + i, newest));
        }
        s.log_decision(&Decision {
            txid: TxId {
                coord: meridian_core::NodeId(1),
                seq: 1,
            },
            commit_ts: Timestamp(5),
            pending: vec![],
        })
        .unwrap();
        for page in [1, 2, 10, 56, 57, 58, 1000] {
            let mut got = std::collections::BTreeMap::new();
            let mut after: Option<Bytes> = None;
            loop {
                let (rows, next) = s.heads_after(after.as_deref(), page).unwrap();
                assert!(rows.len() <= page);
                for (k, ts, v) in rows {
                    let k = String::from_utf8(k.to_vec()).unwrap();
                    let v = v.map(|v| String::from_utf8(v.to_vec()).unwrap());
                    assert!(got.insert(k, (ts.0, v)).is_none(), "listed twice");
                }
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            assert_eq!(got, model, "pages of {page}");
        }
        // A deleted key is forgotten by the listing.
        let mut b = WriteBatch::new();
        let gone = model.keys().next().unwrap().clone();
        s.delete_key(&mut b, gone.as_bytes()).unwrap();
        s.write(b).unwrap();
        let (rows, _) = s.heads_after(None, 1000).unwrap();
        assert_eq!(rows.len(), model.len() - 1);
        assert!(rows.iter().all(|(k, _, _)| k.as_ref() != gone.as_bytes()));
    }

    #[test]
    fn snapshot_reads_see_the_newest_version_strictly_below() {
        let s = store();
        put(&s, b"k", 10, Some("a"));
        put(&s, b"k", 20, None);
        put(&s, b"k", 30, Some("c"));
        put(&s, b"kk", 5, Some("other key"));
        let at = |snap| s.read_at(b"k", Timestamp(snap)).unwrap();
        assert_eq!(at(10), None);
        assert_eq!(at(11), Some((Timestamp(10), Some(Bytes::from("a")))));
        assert_eq!(at(21), Some((Timestamp(20), None)));
        assert_eq!(at(u64::MAX), Some((Timestamp(30), Some(Bytes::from("c")))));
        assert_eq!(s.last_commit(b"k").unwrap(), Some(Timestamp(30)));
        assert_eq!(s.last_commit(b"nope").unwrap(), None);
        assert_eq!(
            s.read_at(b"kk", Timestamp(6)).unwrap().unwrap().0,
            Timestamp(5)
        );
    }

    #[test]
    fn collection_keeps_the_newest_version_below_the_watermark() {
        let s = store();
        for ts in [10, 20, 30, 40] {
            put(&s, b"k", ts, Some("v"));
        }
        // Versions 10, 20, 30 are older than the head 40; at watermark 35, 10 and 20 go.
        assert_eq!(put_below(&s, b"k", 50, Some("w"), 35), 2);
        let at = |t| s.read_at(b"k", Timestamp(t)).unwrap().map(|(ts, _)| ts.0);
        assert_eq!(at(35), Some(30));
        assert_eq!(at(45), Some(40));
        assert_eq!(at(30), None, "10 and 20 are gone");
        assert_eq!(s.last_commit(b"k").unwrap(), Some(Timestamp(50)));
        // Nothing more to collect until another version falls below the watermark.
        assert_eq!(put_below(&s, b"k", 60, Some("x"), 35), 0);
        assert_eq!(
            put_below(&s, b"k", 70, Some("y"), 55),
            2,
            "30 and 40 go, 50 stays"
        );
        assert_eq!(at(55), Some(50));
        assert_eq!(at(71), Some(70));
    }

    #[test]
    fn a_key_written_past_the_cap_refuses_the_snapshots_it_can_no_longer_serve() {
        let s = store();
        for ts in 1..=100u64 {
            put(&s, b"hot", ts * 10, Some(&ts.to_string()));
        }
        // The head (1000) and the 64 newest older versions (360..=990) remain.
        let at = |t| s.read_at(b"hot", Timestamp(t));
        assert_eq!(at(1001).unwrap().unwrap().0, Timestamp(1000));
        assert_eq!(at(365).unwrap().unwrap().0, Timestamp(360));
        assert!(matches!(at(355), Err(TxnError::SnapshotTooOld { .. })));
        assert!(matches!(at(5), Err(TxnError::SnapshotTooOld { .. })));
        // Below the watermark the cap is not needed: those versions were never readable.
        let c = store();
        for ts in 1..=100u64 {
            put_below(&c, b"k", ts * 10, Some("v"), ts * 10 - 5);
        }
        assert_eq!(
            c.read_at(b"k", Timestamp(996)).unwrap().unwrap().0,
            Timestamp(990)
        );
        assert_eq!(c.read_at(b"k", Timestamp(5)).unwrap(), None);
    }

    #[test]
    fn move_states_round_trip() {
        let s = store();
        let m = KeyMove::Frozen {
            to: meridian_core::PartitionId(4),
            epoch: 7,
            export_ts: Some(Timestamp(99)),
        };
        s.log_key_move(b"a", Some(&m)).unwrap();
        s.log_key_move(b"b\xff", Some(&m)).unwrap();
        assert_eq!(
            s.key_moves().unwrap(),
            vec![(Bytes::from("a"), m), (Bytes::from_static(b"b\xff"), m)]
        );
        s.log_key_move(b"a", None).unwrap();
        assert_eq!(s.key_moves().unwrap().len(), 1);
    }

    #[test]
    fn records_round_trip() {
        let s = store();
        let txid = TxId {
            coord: NodeId(3),
            seq: 7,
        };
        let rec = PreparedRecord {
            txid,
            snap: Timestamp(5),
            prepare_ts: Timestamp(6),
            source: TimestampSource::ClockSi,
            writes: vec![
                (Bytes::from("a"), Some(Bytes::from("1"))),
                (Bytes::from("b"), None),
            ],
            watches: vec![Bytes::from("w")],
        };
        s.log_prepared(&rec).unwrap();
        assert_eq!(s.prepared().unwrap(), vec![rec]);
        let mut b = WriteBatch::new();
        s.forget_prepared(&mut b, txid);
        s.write(b).unwrap();
        assert!(s.prepared().unwrap().is_empty());
        let d = Decision {
            txid,
            commit_ts: Timestamp(9),
            pending: vec![NodeId(1)],
        };
        s.log_decision(&d).unwrap();
        assert_eq!(s.decision(txid).unwrap(), Some(d.clone()));
        assert_eq!(s.decisions().unwrap(), vec![d]);
        s.forget_decision(txid).unwrap();
        assert_eq!(s.decision(txid).unwrap(), None);
        assert_eq!(s.tso_bound().unwrap(), 0);
        s.persist_tso_bound(123).unwrap();
        assert_eq!(s.tso_bound().unwrap(), 123);
    }

    proptest::proptest! {
        /// Against a model keeping every version: reads at or above the watermark always see
        /// what the model sees, whatever collection removed.
        #[test]
        fn reads_above_the_watermark_match_a_model(
            ops in proptest::collection::vec((0u8..3, 1u64..20, 0u64..30), 1..120)
        ) {
            let s = store();
            let mut model: std::collections::BTreeMap<(u8, u64), Option<String>> = Default::default();
            let (mut now, mut watermark) = (0u64, 0u64);
            for (key, step, back) in ops {
                now += step;
                watermark = watermark.max(now.saturating_sub(back));
                let k = [b'k', key];
                let v = (now % 3 != 0).then(|| now.to_string());
                put_below(&s, &k, now, v.as_deref(), watermark);
                model.insert((key, now), v);
                for probe in 0u8..3 {
                    for snap in [watermark, watermark + 1, (watermark + now) / 2, now, now + 1] {
                        if snap < watermark { continue; }
                        let want = model
                            .range((probe, 0)..(probe, snap))
                            .next_back()
                            .map(|(&(_, t), v)| (t, v.clone()));
                        let got = s
                            .read_at(&[b'k', probe], Timestamp(snap))
                            .unwrap()
                            .map(|(t, v)| (t.0, v.map(|b| String::from_utf8(b.to_vec()).unwrap())));
                        proptest::prop_assert_eq!(got, want, "key {} snap {}", probe, snap);
                    }
                }
            }
        }
    }
}
