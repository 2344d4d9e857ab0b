//! Meridian's shared vocabulary, with no I/O: keys and values, node / DC / partition ids,
//! timestamps, and the [`Clock`] every protocol reads time from.
//!
//! Everything above this crate takes time from a [`Clock`] and never from the operating
//! system directly, so a simulator can run the same code in virtual time and tests can
//! inject clock skew and drift.

pub mod clock;
pub mod collection_data;
pub mod envelope;
pub mod hash;
pub mod hll;
pub mod ids;
pub mod int;
pub mod leb128;
pub mod list_data;
pub mod memory;
pub mod mix;

pub use clock::{Clock, ManualClock, SkewedClock, StrictlyMonotonic, SystemClock, Timestamp};
pub use ids::{DcId, NodeId, PartitionId};
pub use mix::splitmix64;

/// A key: an arbitrary byte string, cheap to clone.
pub type Key = bytes::Bytes;

/// A value: an arbitrary byte string, cheap to clone.
pub type Value = bytes::Bytes;
