//! A bucket's consistency model ([`BucketType`]), in a module of its own so that errors can
//! name it without importing the bucket registry (which reports its refusals with those
//! errors). Re-exported as `crate::bucket::BucketType`.
//!
//! Guarantees: the serialized names (`eventual`, `timeline`, `transactional`) are the ones
//! configurations and error messages use, and [`BucketType::as_str`] returns the same.

use serde::{Deserialize, Serialize};

/// A bucket's consistency model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketType {
    /// N/R/W quorums, causal contexts, siblings or LWW (spec `placement-and-quorums.md`).
    #[default]
    Eventual,
    /// Per-record master, ordered propagation (spec `timeline.md`).
    Timeline,
    /// Snapshot-isolation transactions, Clock-SI or a timestamp oracle (spec `transactions.md`).
    Transactional,
}

impl BucketType {
    /// The type's name as configurations and error messages write it (`eventual`).
    pub fn as_str(self) -> &'static str {
        match self {
            BucketType::Eventual => "eventual",
            BucketType::Timeline => "timeline",
            BucketType::Transactional => "transactional",
        }
    }
}

impl std::fmt::Display for BucketType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
