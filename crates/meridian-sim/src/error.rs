//! The crate's error enum: a history that cannot be read, or cannot be checked.
//!
//! A checker *finding a violation* is not an error (it is a failing
//! [`Verdict`](crate::checker::Verdict)); an [`enum@Error`] means the input itself is unusable:
//! the file is not JSON-lines, the events do not pair up into operations, or the workload broke
//! a promise the checkers rely on (unique written values). Every variant names the line or the
//! operation at fault.

use crate::history::OpId;
use thiserror::Error;

/// Why a history could not be loaded, saved or checked.
#[derive(Debug, Error)]
pub enum Error {
    /// Reading or writing the history failed.
    #[error("history I/O failed: {0}")]
    Io(#[from] std::io::Error),
    /// A line of a JSON-lines history is not a valid event.
    #[error("history line {line}: {source}")]
    Json {
        /// The 1-based line number.
        line: usize,
        /// What serde_json found wrong.
        source: serde_json::Error,
    },
    /// Two invocations carry the same operation id.
    #[error("{op} is invoked twice")]
    DuplicateInvoke {
        /// The repeated id.
        op: OpId,
    },
    /// A completion names an operation that was never invoked.
    #[error("{op} completes but was never invoked")]
    CompleteWithoutInvoke {
        /// The unknown id.
        op: OpId,
    },
    /// An operation completes twice.
    #[error("{op} completes twice")]
    DuplicateComplete {
        /// The operation.
        op: OpId,
    },
    /// An operation completes before it was invoked.
    #[error("{op} completes at {completed_at}µs, before its invocation at {invoked_at}µs")]
    CompletedBeforeInvoked {
        /// The operation.
        op: OpId,
        /// Its invocation time.
        invoked_at: u64,
        /// Its (earlier) completion time.
        completed_at: u64,
    },
    /// An acknowledged result that does not fit the operation (a read acknowledged as `done`,
    /// a write returning values).
    #[error("{op}: a {op_kind} cannot return {result}")]
    ResultMismatch {
        /// The operation.
        op: OpId,
        /// `read`, `write`, `delete` or `cas`.
        op_kind: &'static str,
        /// The result it returned.
        result: String,
    },
    /// Two operations write the same value; the eventual-consistency checkers identify a write
    /// by its value, so the workload must make written values unique.
    #[error("value {value} is written by both {first} and {second}; written values must be unique")]
    DuplicateValue {
        /// The value, as text (see [`crate::text`]).
        value: String,
        /// The first writer.
        first: OpId,
        /// The second writer.
        second: OpId,
    },
    /// A transaction history (see [`crate::checker::txn_history`]) whose events do not pair
    /// up into transactions, or that breaks a promise the SI checker relies on (unique
    /// appended or written values per key, one workload).
    #[error("transaction history, event {index}: {reason}")]
    TxnHistory {
        /// The `index` of the event at fault (its position if the file carries none).
        index: u64,
        /// What is wrong.
        reason: String,
    },
}
