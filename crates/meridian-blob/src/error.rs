//! The crate's one error type.

use thiserror::Error;

/// What can go wrong with chunks and manifests.
#[derive(Debug, Error)]
pub enum BlobError {
    /// A chunk's bytes do not match the digest it was stored or referenced with.
    #[error("chunk {version:032x}/{index} failed its digest check")]
    DigestMismatch {
        /// The chunk's version.
        version: u128,
        /// The chunk's index.
        index: u32,
    },
    /// A stored manifest could not be decoded.
    #[error("corrupt manifest: {0}")]
    CorruptManifest(String),
    /// The chunk store's disk failed.
    #[error("chunk store I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// The crate's result.
pub type Result<T> = std::result::Result<T, BlobError>;
