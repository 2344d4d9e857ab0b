//! The transaction protocol's messages (one variant of the node's wire type).

use crate::store::Write;
use crate::types::{TimestampSource, TxId, TxnError};
use bytes::Bytes;
use meridian_core::Timestamp;
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
}
