//! The vocabulary of transactions: ids, the per-bucket configuration ([`TxnProps`]), typed
//! aborts ([`Abort`]) and the crate's error ([`TxnError`]).
//!
//! Every abort is retryable and leaves no effect; [`TxnError::is_retryable`] says which
//! errors a client's retry loop should retry.

use meridian_core::{NodeId, PartitionId, Timestamp};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// A transaction's id: the coordinating node and a sequence number that node never reuses
/// (it starts from the node's clock at start-up, in µs, and counts up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxId {
    /// The coordinator.
    pub coord: NodeId,
    /// Unique per coordinator.
    pub seq: u64,
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.coord.0, self.seq)
    }
}

/// Where a transactional bucket's timestamps come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimestampSource {
    /// Clock-SI: each partition leader's physical clock (spec §2).
    #[default]
    ClockSi,
    /// Conventional SI: a central timestamp oracle (spec §4).
    Tso,
}

impl TimestampSource {
    /// The name configurations use (`clock_si`, `tso`).
    pub fn as_str(self) -> &'static str {
        match self {
            TimestampSource::ClockSi => "clock_si",
            TimestampSource::Tso => "tso",
        }
    }
}

/// How a node's clients ask the oracle for timestamps (spec §4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TsoBatching {
    /// One RPC per timestamp.
    #[default]
    Unbatched,
    /// One RPC in flight per node, carrying the count of every waiting caller.
    Batched,
}

/// A transactional bucket's properties (TOML keys of a `[buckets.NAME]` table; every one
/// optional). Other bucket types ignore them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnProps {
    /// `clock_si` (default) or `tso`.
    #[serde(default)]
    pub timestamps: Option<TimestampSource>,
    /// Clock-SI's snapshot age Δ in µs (default 0).
    #[serde(default)]
    pub snapshot_delta_us: Option<u64>,
    /// The TSO client: `unbatched` (default) or `batched`.
    #[serde(default)]
    pub tso_batching: Option<TsoBatching>,
    /// The oracle's capacity in RPCs per second (a token bucket; default unlimited).
    #[serde(default)]
    pub tso_max_rate: Option<u32>,
    /// The DC whose lowest-numbered node runs the oracle (default: the lowest DC).
    #[serde(default)]
    pub tso_dc: Option<u32>,
    /// Backups each partition leader ships its prepare and commit records to before it
    /// votes (default 0, as in the paper). Only 0 is accepted today (see the crate docs).
    #[serde(default)]
    pub txn_backups: Option<u32>,
}

impl TxnProps {
    /// Whether no property is set.
    pub fn is_empty(&self) -> bool {
        *self == TxnProps::default()
    }

    /// Checks the values; the error says which property and why.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(d) = self.snapshot_delta_us
            && d > 60_000_000
        {
            return Err(format!("snapshot_delta_us={d} is above 60 s"));
        }
        if self.tso_max_rate == Some(0) {
            return Err("tso_max_rate must be at least 1 (omit it for no limit)".into());
        }
        if let Some(k) = self.txn_backups
            && k > 0
        {
            return Err(format!(
                "txn_backups={k}: only 0 is supported (leaders do not fail over yet; a crashed leader's partition waits for it to restart and recovers from its own log)"
            ));
        }
        Ok(())
    }

    /// The timestamp source (default Clock-SI).
    pub fn source(&self) -> TimestampSource {
        self.timestamps.unwrap_or_default()
    }
}

/// Why a transaction aborted. Every abort is retryable and the transaction left no effect.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum Abort {
    /// A version of `key` committed after the snapshot (first committer wins).
    #[error("ww_conflict key={}", show(.0))]
    WwConflict(Vec<u8>),
    /// Another transaction holds a prepared write (or watch) on `key`; no-wait certification.
    #[error("prepared_conflict key={}", show(.0))]
    PreparedConflict(Vec<u8>),
    /// A read waited `read_wait_max` for a prepared transaction's outcome.
    #[error("prepared_blocked txid={0}")]
    PreparedBlocked(TxId),
    /// A read or prepare waited `read_wait_max` for the leader's clock to pass the snapshot.
    #[error("clock_wait snap={0}")]
    ClockWait(u64),
    /// A participant did not vote within `prepare_timeout`, or the transaction ran longer
    /// than `max_txn_duration`.
    #[error("timeout {0}")]
    Timeout(String),
    /// The coordinator was lost before it decided (presumed abort).
    #[error("coordinator_lost")]
    CoordinatorLost,
    /// The key's partition is moving to another leader.
    #[error("key_moving key={}", show(.0))]
    KeyMoving(Vec<u8>),
}

/// A key for an error message: UTF-8 when it is, else escaped.
fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// The crate's error.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum TxnError {
    /// The transaction aborted (retryable, no effect).
    #[error("txn_aborted {0}")]
    Aborted(Abort),
    /// A read's snapshot is below the garbage-collection watermark.
    #[error("snapshot_too_old snap={snap} watermark={watermark}")]
    SnapshotTooOld {
        /// The snapshot.
        snap: u64,
        /// The oldest snapshot still served.
        watermark: u64,
    },
    /// The buffered writes exceed `txn_max_write_bytes`.
    #[error("txn_too_large bytes={bytes} limit={limit}")]
    TxnTooLarge {
        /// Bytes of keys and values written.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The leader's clock went backward by more than `max_backstep`; it refuses new
    /// transactions until the clock catches up.
    #[error("clock_went_backward by_us={by_us}")]
    ClockWentBackward {
        /// How far back, µs.
        by_us: u64,
    },
    /// The local engine failed, or a record does not decode.
    #[error("txn_storage {0}")]
    Storage(String),
    /// A single-leader commit was sent and no answer came back: it may have committed. Not
    /// retryable blindly (a retried increment could apply twice); read to find out.
    #[error("txn_outcome_unknown {0}")]
    OutcomeUnknown(String),
    /// A request that makes no sense (an unknown transaction, mixed timestamp sources).
    #[error("txn_bad_request {0}")]
    BadRequest(String),
    /// The key moved to another partition (spec `repartitioning.md` §6): the sender's key
    /// directory is older than `dir_epoch`. Retryable once the directory is caught up; a
    /// transaction that already touched the key elsewhere must start again.
    #[error("wrong_partition hint={hint} dir_epoch={dir_epoch}")]
    WrongPartition {
        /// Where the key lives now.
        hint: PartitionId,
        /// The answering leader's directory epoch.
        dir_epoch: u64,
    },
    /// A planning round failed (the partitioner refused the graph).
    #[error("txn_plan {0}")]
    Plan(String),
}

impl TxnError {
    /// Whether a retry loop should run the transaction again (aborts, an old snapshot, a
    /// clock that went backward — it catches up).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TxnError::Aborted(_)
                | TxnError::SnapshotTooOld { .. }
                | TxnError::ClockWentBackward { .. }
                | TxnError::WrongPartition { .. }
        )
    }

    /// The key of a write-write or prepared conflict, if that is why it aborted.
    pub fn conflict_key(&self) -> Option<&[u8]> {
        match self {
            TxnError::Aborted(Abort::WwConflict(k) | Abort::PreparedConflict(k)) => Some(k),
            _ => None,
        }
    }
}

impl From<Abort> for TxnError {
    fn from(a: Abort) -> Self {
        TxnError::Aborted(a)
    }
}

impl From<meridian_storage::StorageError> for TxnError {
    fn from(e: meridian_storage::StorageError) -> Self {
        TxnError::Storage(e.to_string())
    }
}

/// The crate's result.
pub type Result<T, E = TxnError> = std::result::Result<T, E>;

/// A commit's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// The commit timestamp (a read-only transaction: its snapshot).
    pub ts: Timestamp,
}

/// The protocol's limits and timers, per node (defaults from the spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnLimits {
    /// A read (or prepare) waits at most this long on a clock or a prepared transaction.
    pub read_wait_max_us: u64,
    /// A coordinator waits this long for votes (plus two round trips).
    pub prepare_timeout_us: u64,
    /// A participant prepared this long without an outcome asks the coordinator.
    pub prepare_ttl_us: u64,
    /// Transactions older than this abort at commit; the GC watermark trails the clock by it.
    pub max_txn_duration_us: u64,
    /// The clock may step back this far without refusing transactions.
    pub max_backstep_us: u64,
    /// Most bytes of keys and values one transaction may write.
    pub max_write_bytes: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        TxnLimits {
            read_wait_max_us: 5_000_000,
            prepare_timeout_us: 2_000_000,
            prepare_ttl_us: 2_000_000,
            max_txn_duration_us: 5_000_000,
            max_backstep_us: 1_000,
            max_write_bytes: 16 << 20,
        }
    }
}
