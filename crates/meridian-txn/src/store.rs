//! A leader's durable state over the node's storage [`Engine`]: committed versions, the
//! write-ahead records of prepared transactions, the coordinator's decision log, and the
//! oracle's persisted bound.
//!
//! Layout (all under the reserved byte `0xFF`, so eventual and timeline scans never see it):
//!
//! | key | value |
//! |---|---|
//! | `0xFF 'x' ‖ len(k) u32 ‖ k ‖ ¬commit_ts u64` | `0` (delete) or `1 ‖ value` |
//! | `0xFF 'y' ‖ txid` | a [`PreparedRecord`] (postcard) |
//! | `0xFF 'z' ‖ txid` | a [`Decision`] (postcard) |
//! | `0xFF 'o'` | the oracle's persisted upper bound (u64) |
//!
//! Each committed version is its own engine key, newest first (the timestamp is stored
//! inverted), so a snapshot read is one bounded scan and garbage collection is under this
//! module's control: the engine's own version horizon is shared with protocols that keep only
//! the newest version and advance it to "now", which would drop versions an open snapshot
//! still reads.
//!
//! Guarantees: a commit installs its versions and deletes its prepared record in one atomic
//! [`WriteBatch`]; [`TxnStore::read_at`] returns the newest version committed strictly below
//! the snapshot; [`TxnStore::collect_below`] keeps every version at or above the watermark
//! and the newest one below it.

use crate::types::{Result, TimestampSource, TxId, TxnError};
use bytes::Bytes;
use meridian_core::{NodeId, Timestamp};
use meridian_storage::{Engine, WriteBatch};
use serde::{Deserialize, Serialize};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const VERSION_PREFIX: [u8; 2] = [0xFF, b'x'];
const PREPARED_PREFIX: [u8; 2] = [0xFF, b'y'];
const DECISION_PREFIX: [u8; 2] = [0xFF, b'z'];
const TSO_BOUND_KEY: [u8; 2] = [0xFF, b'o'];
/// Versions of one key looked at per garbage-collection pass.
const GC_SCAN: usize = 64;

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

fn version_key(key: &[u8], ts: Timestamp) -> Bytes {
    let mut k = Vec::with_capacity(2 + 4 + key.len() + 8);
    k.extend_from_slice(&VERSION_PREFIX);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&(!ts.0).to_be_bytes());
    Bytes::from(k)
}

fn version_ts(engine_key: &[u8]) -> Option<Timestamp> {
    let tail: [u8; 8] = engine_key
        .get(engine_key.len().checked_sub(8)?..)?
        .try_into()
        .ok()?;
    Some(Timestamp(!u64::from_be_bytes(tail)))
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

    /// The newest version of `key` committed strictly below `snap`: its commit timestamp and
    /// value (`None`: deleted), or `None` if there is none.
    pub fn read_at(
        &self,
        key: &[u8],
        snap: Timestamp,
    ) -> Result<Option<(Timestamp, Option<Bytes>)>> {
        if snap.0 == 0 {
            return Ok(None);
        }
        let start = Bound::Included(version_key(key, Timestamp(snap.0 - 1)));
        let end = Bound::Included(version_key(key, Timestamp(0)));
        let found = self.engine.scan(start, end, Timestamp::MAX, 1, false)?;
        match found.into_iter().next() {
            None => Ok(None),
            Some((k, v)) => {
                let ts = version_ts(&k)
                    .ok_or_else(|| TxnError::Storage("a version key does not decode".into()))?;
                let stored = v.value.unwrap_or_default();
                Ok(Some((ts, decode_value(&stored)?)))
            }
        }
    }

    /// The newest commit timestamp of `key` (what certification compares), if any.
    pub fn last_commit(&self, key: &[u8]) -> Result<Option<Timestamp>> {
        Ok(self.read_at(key, Timestamp::MAX)?.map(|(ts, _)| ts))
    }

    /// Adds the version of `key` at `ts` to `batch`.
    pub fn install(
        &self,
        batch: &mut WriteBatch,
        key: &[u8],
        ts: Timestamp,
        value: Option<&Bytes>,
    ) {
        batch.put(version_key(key, ts), self.next_stamp(), encode_value(value));
    }

    /// Adds to `batch` the deletion of every version of `key` older than the newest one below
    /// `watermark` (no snapshot at or above the watermark can read them). Returns how many.
    pub fn collect_below(
        &self,
        batch: &mut WriteBatch,
        key: &[u8],
        watermark: Timestamp,
    ) -> Result<usize> {
        let start = Bound::Included(version_key(key, Timestamp(u64::MAX)));
        let end = Bound::Included(version_key(key, Timestamp(0)));
        let versions = self
            .engine
            .scan(start, end, Timestamp::MAX, GC_SCAN, false)?;
        let mut below = versions
            .into_iter()
            .filter(|(k, _)| version_ts(k).is_some_and(|t| t < watermark));
        // The newest below the watermark stays: a snapshot at the watermark reads it.
        below.next();
        let mut n = 0;
        for (k, _) in below {
            batch.delete(k, self.next_stamp());
            n += 1;
        }
        Ok(n)
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

    fn put(s: &TxnStore, k: &[u8], ts: u64, v: Option<&str>) {
        let mut b = WriteBatch::new();
        let v = v.map(|v| Bytes::copy_from_slice(v.as_bytes()));
        s.install(&mut b, k, Timestamp(ts), v.as_ref());
        s.write(b).unwrap();
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
        let mut b = WriteBatch::new();
        assert_eq!(s.collect_below(&mut b, b"k", Timestamp(35)).unwrap(), 2);
        s.write(b).unwrap();
        assert_eq!(
            s.read_at(b"k", Timestamp(35)).unwrap().unwrap().0,
            Timestamp(30)
        );
        assert_eq!(
            s.read_at(b"k", Timestamp(30)).unwrap(),
            None,
            "10 and 20 are gone"
        );
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
}
