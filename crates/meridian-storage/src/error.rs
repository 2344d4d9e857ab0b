//! The storage layer's errors.

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
}
