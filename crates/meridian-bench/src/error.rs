//! The crate's one error type, [`BenchError`]: every variant says what was wrong and what to do.

use thiserror::Error;

/// Why a workload, design or statistics input was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BenchError {
    /// A workload property file or value is malformed or out of range.
    #[error("invalid workload property `{property}`: {reason}")]
    InvalidProperty {
        /// The property's name (`requestdistribution`, `readproportion`, ...).
        property: String,
        /// What is wrong, and what is accepted.
        reason: String,
    },
    /// A factorial design or its results cannot be analysed.
    #[error("invalid design: {reason}")]
    InvalidDesign {
        /// What is wrong.
        reason: String,
    },
    /// A file or directory could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The file or directory.
        path: String,
        /// The operating system's reason, and what to do.
        reason: String,
    },
    /// A target (cluster, server) could not be reached or refused the benchmark's setup.
    #[error("target: {reason}")]
    Target {
        /// What failed, and what to do.
        reason: String,
    },
    /// A plot could not be drawn or written.
    #[error("plot: {reason}")]
    Plot {
        /// What failed.
        reason: String,
    },
    /// A kvpaxos request file is malformed; the error names the line and the field.
    #[error("kvpaxos request file: {0}")]
    Kvpaxos(#[from] crate::kvpaxos::KvpaxosError),
}
