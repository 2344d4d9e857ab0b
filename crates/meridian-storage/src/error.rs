//! The storage layer's errors.

use std::path::PathBuf;
use thiserror::Error;

/// Result of a storage operation.
pub type Result<T> = std::result::Result<T, StorageError>;

/// Why a storage operation failed.
#[derive(Debug, Error)]
pub enum StorageError {
    /// The key is longer than [`crate::MAX_KEY_LEN`].
    #[error("key is {len} bytes; the largest key accepted is {max} bytes")]
    KeyTooLarge {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The operating system failed an I/O call (disk full, permissions, ...).
    #[error("storage I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The durable engine reported an error.
    #[error("durable engine error: {0}")]
    Backend(String),
    /// Stored data could not be decoded.
    #[error("corrupt data in storage: {0}")]
    Corrupt(String),
    /// The configuration is invalid.
    #[error("invalid storage configuration: {0}")]
    Config(String),
    /// The disk holding the data is full (or below the configured free-space reserve): the
    /// write was refused, and every write is until space returns, when the engine resumes by
    /// itself. Reads are still served. Nothing acknowledged before was lost.
    #[error(
        "no space left on device: {available} bytes free on {path} (reserve {reserve} bytes); \
         writes are refused until space returns"
    )]
    DiskFull {
        /// The data directory.
        path: PathBuf,
        /// Bytes available on its filesystem when last measured.
        available: u64,
        /// The free-space reserve below which writes are refused (0: none).
        reserve: u64,
    },
}

impl StorageError {
    /// Whether this is [`StorageError::DiskFull`].
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StorageError::DiskFull { .. })
    }

    /// A copy of the error (`io::Error` is not `Clone`: its kind and message are kept), for
    /// handing one failure to several waiting callers.
    pub(crate) fn duplicate(&self) -> StorageError {
        match self {
            StorageError::KeyTooLarge { len, max } => StorageError::KeyTooLarge {
                len: *len,
                max: *max,
            },
            StorageError::Io(e) => StorageError::Io(std::io::Error::new(e.kind(), e.to_string())),
            StorageError::Backend(m) => StorageError::Backend(m.clone()),
            StorageError::Corrupt(m) => StorageError::Corrupt(m.clone()),
            StorageError::Config(m) => StorageError::Config(m.clone()),
            StorageError::DiskFull {
                path,
                available,
                reserve,
            } => StorageError::DiskFull {
                path: path.clone(),
                available: *available,
                reserve: *reserve,
            },
        }
    }
}
