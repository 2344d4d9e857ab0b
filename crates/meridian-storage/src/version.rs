//! One version of a key, and batches of writes.

use bytes::Bytes;
use meridian_core::Timestamp;

/// One version of a key: a value, or a tombstone (`value == None`) recording a deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// When the version was written, by the writer's clock.
    pub ts: Timestamp,
    /// The value, or `None` for a tombstone.
    pub value: Option<Bytes>,
}

impl Version {
    /// Whether this version records a deletion.
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

/// One write of a [`WriteBatch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOp {
    /// Write `value` as the version of `key` at `ts`.
    Put {
        /// The key.
        key: Bytes,
        /// The version's timestamp.
        ts: Timestamp,
        /// The value.
        value: Bytes,
    },
    /// Write a tombstone as the version of `key` at `ts`.
    Delete {
        /// The key.
        key: Bytes,
        /// The tombstone's timestamp.
        ts: Timestamp,
    },
}

impl WriteOp {
    /// The key this operation writes.
    pub fn key(&self) -> &Bytes {
        match self {
            WriteOp::Put { key, .. } | WriteOp::Delete { key, .. } => key,
        }
    }

    /// The timestamp of the version this operation writes.
    pub fn ts(&self) -> Timestamp {
        match self {
            WriteOp::Put { ts, .. } | WriteOp::Delete { ts, .. } => *ts,
        }
    }

    /// The version this operation writes.
    pub fn version(&self) -> Version {
        match self {
            WriteOp::Put { ts, value, .. } => Version {
                ts: *ts,
                value: Some(value.clone()),
            },
            WriteOp::Delete { ts, .. } => Version {
                ts: *ts,
                value: None,
            },
        }
    }
}

/// Writes applied atomically by [`crate::Engine::write_batch`], in order (a later write to the
/// same key and timestamp wins).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// The writes.
    pub ops: Vec<WriteOp>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// A batch of one write.
    pub fn single(op: WriteOp) -> Self {
        Self { ops: vec![op] }
    }

    /// Adds a put.
    pub fn put(&mut self, key: Bytes, ts: Timestamp, value: Bytes) -> &mut Self {
        self.ops.push(WriteOp::Put { key, ts, value });
        self
    }

    /// Adds a tombstone.
    pub fn delete(&mut self, key: Bytes, ts: Timestamp) -> &mut Self {
        self.ops.push(WriteOp::Delete { key, ts });
        self
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are no writes.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}
