//! Meridian's storage layer: one multi-versioned [`Engine`] trait and its implementations.
//!
//! Every key holds a chain of versions ordered by [`Timestamp`]; a version is either a value or
//! a tombstone. What every engine guarantees (and the conformance suite in
//! `tests/conformance.rs` checks):
//!
//! - **snapshot reads**: [`Engine::get`] at `t` returns the newest version with timestamp `≤ t`,
//!   whatever was written later; tombstones are returned as such, so replication layers can see
//!   deletions;
//! - **idempotent versions**: writing the same key at the same timestamp replaces that version;
//! - **atomic batches**: every operation of a [`WriteBatch`] becomes visible at once, or none does;
//! - **garbage collection keeps snapshots at or above the horizon intact**: [`Engine::gc`]
//!   drops only versions no read at `t ≥ horizon` can see, and a key whose only remaining
//!   version is a tombstone below the horizon disappears;
//! - **ordered scans** by key, as of a timestamp;
//! - **durability** as the engine's [`Durability`] policy says, once a write call returns.
//!
//! An engine may refuse writes for a while (the durable engine, while its disk is full:
//! [`StorageError::DiskFull`]); it says so through [`Engine::health`], and still serves reads.

pub mod disk;
pub mod durability;
pub mod error;
pub mod fjall_engine;
pub mod mem;
pub mod version;

pub use disk::{Degraded, EngineHealth, FaultySpace, SpaceProbe, Statvfs};
pub use durability::Durability;
pub use error::{Result, StorageError};
pub use fjall_engine::{FjallConfig, FjallEngine};
pub use mem::MemEngine;
pub use version::{Version, WriteBatch, WriteOp};

use bytes::Bytes;
use meridian_core::Timestamp;
use std::ops::Bound;

/// The largest key any engine accepts, in bytes. The durable engine's LSM limits keys to
/// 64 KiB including Meridian's version suffix; every engine enforces the same limit so that
/// switching engines never changes which writes succeed.
pub const MAX_KEY_LEN: usize = 60 * 1024;

/// Sizes an engine reports for metrics and `INFO`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Keys whose latest version is a value (not a tombstone).
    pub live_keys: u64,
    /// Versions stored, tombstones included (approximate for LSM engines).
    pub versions: u64,
    /// Bytes of keys and values stored (approximate for LSM engines).
    pub bytes: u64,
}

/// What one [`Engine::gc`] pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Versions dropped (values and tombstones).
    pub versions_removed: u64,
    /// Keys that disappeared entirely.
    pub keys_removed: u64,
}

/// When an engine's write is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteDurability {
    /// Never: the engine has no disk (a replica's durable ack means applied, as `dw = w`).
    Volatile,
    /// When the write returns (fsync before it returns: `Durability::Always`).
    OnReturn,
    /// Only after [`Engine::sync_written`] (`everysec` and `never` fsync later, or never).
    OnSync,
}

/// A multi-versioned, ordered key-value store. See the crate docs for the guarantees.
pub trait Engine: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for logs and `INFO` (`"mem"`, `"fjall"`).
    fn name(&self) -> &'static str;

    /// Writes `value` as the version of `key` at `ts` (replacing a version at exactly `ts`).
    fn put(&self, key: Bytes, ts: Timestamp, value: Bytes) -> Result<()> {
        self.write_batch(WriteBatch::single(WriteOp::Put { key, ts, value }))
    }

    /// Writes a tombstone as the version of `key` at `ts`.
    fn delete(&self, key: Bytes, ts: Timestamp) -> Result<()> {
        self.write_batch(WriteBatch::single(WriteOp::Delete { key, ts }))
    }

    /// Applies every operation of `batch` atomically.
    fn write_batch(&self, batch: WriteBatch) -> Result<()>;

    /// The newest version of `key` with timestamp `≤ at` (a tombstone included), if any.
    fn get(&self, key: &[u8], at: Timestamp) -> Result<Option<Version>>;

    /// The value of `key` as of `at`, or `None` if absent or deleted.
    fn get_value(&self, key: &[u8], at: Timestamp) -> Result<Option<Bytes>> {
        Ok(self.get(key, at)?.and_then(|v| v.value))
    }

    /// The newest version of `key`, whatever its timestamp.
    fn get_latest(&self, key: &[u8]) -> Result<Option<Version>> {
        self.get(key, Timestamp::MAX)
    }

    /// Up to `limit` keys in `(start, end)` order with their newest version `≤ at`.
    /// Keys whose visible version is a tombstone are skipped when `include_tombstones` is false
    /// (and then do not count towards `limit`).
    fn scan(
        &self,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: Timestamp,
        limit: usize,
        include_tombstones: bool,
    ) -> Result<Vec<(Bytes, Version)>>;

    /// Every stored version of `key`, oldest first (for replication, debugging and tests).
    fn versions(&self, key: &[u8]) -> Result<Vec<Version>>;

    /// Tells the engine that no read below `horizon` will come again, so it may prune older
    /// versions of keys it is writing anyway. Monotonic: a lower horizon than before is ignored.
    fn set_gc_horizon(&self, horizon: Timestamp);

    /// Drops every version no read at `t ≥ horizon` can see (see the crate docs).
    fn gc(&self, horizon: Timestamp) -> Result<GcStats>;

    /// Removes every key and version.
    fn clear(&self) -> Result<()>;

    /// Makes everything written so far durable, whatever the policy (used on shutdown).
    fn flush(&self) -> Result<()>;

    /// When a write that returned is on disk: what a replica's durable (`dw`) ack waits
    /// for. Engines without a disk are [`WriteDurability::Volatile`].
    fn write_durability(&self) -> WriteDurability {
        WriteDurability::Volatile
    }

    /// Makes every write that has returned so far durable, sharing one fsync with
    /// concurrent callers, and returns once it is (a no-op unless
    /// [`Engine::write_durability`] is [`WriteDurability::OnSync`]).
    fn sync_written(&self) -> Result<()> {
        Ok(())
    }

    /// Current sizes.
    fn stats(&self) -> EngineStats;

    /// A key whose newest version is a value, chosen by `draw` (the caller's random number):
    /// over the draws `0..n` for `n` such keys, each key exactly once, so a uniform draw is a
    /// uniform key (RANDOMKEY). `None` when there is none. By default a walk in key order to
    /// the drawn position, O(n); an engine may do better.
    fn random_live_key(&self, draw: u64) -> Result<Option<Bytes>> {
        const PAGE: usize = 1_024;
        let n = self.stats().live_keys;
        if n == 0 {
            return Ok(None);
        }
        let mut skip = draw % n;
        let mut start = Bound::Unbounded;
        loop {
            let rows = self.scan(start, Bound::Unbounded, Timestamp::MAX, PAGE, false)?;
            let Some((last, _)) = rows.last() else {
                return Ok(None);
            };
            if let Some((key, _)) = usize::try_from(skip).ok().and_then(|i| rows.get(i)) {
                return Ok(Some(key.clone()));
            }
            if rows.len() < PAGE {
                // Keys went away since the count: the last one stands in.
                return Ok(Some(last.clone()));
            }
            skip -= rows.len() as u64;
            start = Bound::Excluded(last.clone());
        }
    }

    /// Whether writes are served, and if not why (see [`EngineHealth`]). Engines that never
    /// refuse writes keep the default.
    fn health(&self) -> EngineHealth {
        EngineHealth::Ok
    }
}

/// Whether the key range `(start, end)` is empty because its bounds are inverted (or meet
/// with an excluded bound). Engines answer such scans with nothing instead of panicking.
pub(crate) fn is_empty_range(start: &Bound<Bytes>, end: &Bound<Bytes>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
            s >= e
        }
        _ => false,
    }
}

/// Checks a key against [`MAX_KEY_LEN`].
pub fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(StorageError::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}
