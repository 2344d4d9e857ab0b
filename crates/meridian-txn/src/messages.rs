//! The transaction protocol's messages (one variant of the node's wire type).

use crate::moves::Exported;
use crate::store::Write;
use crate::types::{TimestampSource, TxId, TxnError};
use bytes::Bytes;
use meridian_core::{DcId, PartitionId, Timestamp};
use serde::{Deserialize, Serialize};

/// A version a read found: its commit timestamp and value (`None`: deleted).
pub type Found = Option<(Timestamp, Option<Bytes>)>;

/// What the coordinator knows of a transaction a participant asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Committed at this timestamp.
    Committed(Timestamp),
    /// Aborted, or never decided (presumed abort).
    Aborted,
    /// Still collecting votes: wait.
    Active,
}

/// A page of a leader's live keys: each with its Redis type's code, and the key to resume
/// after (`None`: no more).
pub type KeysPage = (Vec<(Bytes, u8)>, Option<Bytes>);

/// The protocol's messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnMsg {
    /// Snapshot reads at a leader (R1 and R2 apply); answered by [`TxnMsg::ReadReply`].
    Read {
        /// The reading transaction (its own marks never block it).
        txid: Option<TxId>,
        /// The snapshot.
        snap: Timestamp,
        /// The bucket's timestamp source (which R2 rule).
        source: TimestampSource,
        /// The keys, all led by the receiver.
        keys: Vec<Bytes>,
    },
    /// The versions read, in the request's key order.
    ReadReply(Result<Vec<Found>, TxnError>),
    /// Clock-SI with one participant: certify and commit in one step.
    CommitLocal {
        /// The transaction.
        txid: TxId,
        /// Its snapshot.
        snap: Timestamp,
        /// Its writes.
        writes: Vec<Write>,
        /// Its watched keys.
        watches: Vec<Bytes>,
    },
    /// The commit timestamp, or why it aborted.
    Committed(Result<Timestamp, TxnError>),
    /// Two-phase commit, phase one: certify, hold the keys, log, vote.
    Prepare {
        /// The transaction.
        txid: TxId,
        /// Its snapshot.
        snap: Timestamp,
        /// The bucket's timestamp source.
        source: TimestampSource,
        /// The writes at the receiver.
        writes: Vec<Write>,
        /// The watched keys at the receiver.
        watches: Vec<Bytes>,
    },
    /// A vote: the prepare timestamp, or why not.
    Vote(Result<Timestamp, TxnError>),
    /// Phase two: install at `ts`; answered by [`TxnMsg::Ack`].
    Commit {
        /// The transaction.
        txid: TxId,
        /// Its commit timestamp.
        ts: Timestamp,
    },
    /// Phase two: release the keys (one-way or answered by [`TxnMsg::Ack`]).
    Abort {
        /// The transaction.
        txid: TxId,
    },
    /// An outcome was applied.
    Ack,
    /// A participant prepared too long asks the coordinator.
    QueryOutcome {
        /// The transaction.
        txid: TxId,
    },
    /// The coordinator's answer.
    Outcome(Outcome),
    /// A request for `count` timestamps from the oracle.
    TsoGet {
        /// How many (the batched client's waiting callers).
        count: u32,
        /// The bucket's `tso_max_rate` (the oracle's capacity, RPCs per second).
        max_rate: Option<u32>,
    },
    /// A range `first .. first + count`.
    TsoRange(Result<(u64, u32), TxnError>),
    /// A move's steps 1–2 at the source leader (spec `repartitioning.md` §6): freeze each
    /// key for the `Moving` entry of the given epoch towards the given partition, wait for
    /// its marks to drain, export it. Answered by [`TxnMsg::MoveOutReply`].
    MoveOut {
        /// `(key, destination, entry epoch)`.
        keys: Vec<(Bytes, PartitionId, u64)>,
    },
    /// Per key of a [`TxnMsg::MoveOut`], in order: what shipped, or why not.
    MoveOutReply(Vec<Result<Exported, TxnError>>),
    /// Step 2 at the destination leader: install each key's versions and raise the clock.
    /// Answered by [`TxnMsg::Moved`].
    MoveIn {
        /// `(key, what shipped)`.
        items: Vec<(Bytes, Exported)>,
    },
    /// Step 3 at the source leader: the keys live at their destinations since directory
    /// epoch `dir_epoch`; delete them after the grace period. Answered by [`TxnMsg::Moved`].
    MoveDone {
        /// `(key, the Moving entry's epoch)`.
        keys: Vec<(Bytes, u64)>,
        /// The directory epoch of the `At` entries.
        dir_epoch: u64,
    },
    /// A given-up move at the source leader: serve the keys again. Answered by
    /// [`TxnMsg::Moved`].
    MoveCancel {
        /// `(key, the Moving entry's epoch)`.
        keys: Vec<(Bytes, u64)>,
    },
    /// A move step's answer.
    Moved(Result<(), TxnError>),
    /// A coordinator's recent transactions for the planner: each one's DC and keys
    /// (one-way, to the node running the planner).
    Trace(Vec<(DcId, Vec<Bytes>)>),
    /// One page of the live keys a leader holds (what SCAN, KEYS and DBSIZE list): those after
    /// `after` in its store's order whose home partition's bit is set in `partitions` (bit
    /// `p % 8` of byte `p / 8`), examining at most `budget` stored keys. Answered by
    /// [`TxnMsg::KeysPage`].
    ListKeys {
        /// The key to resume after (`None`: from the first).
        after: Option<Bytes>,
        /// Stored keys to examine at most (the leader caps it).
        budget: u32,
        /// The home partitions wanted, as a bitmap.
        partitions: Vec<u8>,
    },
    /// The live keys found, each with its Redis type's code (`Kind::code`), and the key to
    /// resume after (`None`: the leader has no more).
    KeysPage(Result<KeysPage, TxnError>),
}
