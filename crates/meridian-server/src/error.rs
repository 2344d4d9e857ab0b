//! The server crate's errors. Front ends map them to RESP or HTTP replies at the edge.

use thiserror::Error;

/// Result of a server-level operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Why starting or running a node failed.
#[derive(Debug, Error)]
pub enum Error {
    /// The configuration is invalid; the message names the setting.
    #[error("configuration error: {0}")]
    Config(String),
    /// The storage engine failed.
    #[error(transparent)]
    Storage(#[from] meridian_storage::StorageError),
    /// TLS material could not be loaded (the message names the setting and file).
    #[error(transparent)]
    Tls(#[from] meridian_net::NetError),
    /// A listener could not be bound or served.
    #[error("network error on {what}: {source}")]
    Io {
        /// What was being done (e.g. "binding RESP listener 127.0.0.1:6379").
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl Error {
    /// The message without the "configuration error:" prefix, for wrapping.
    pub fn detail(&self) -> String {
        match self {
            Error::Config(m) => m.clone(),
            other => other.to_string(),
        }
    }
}
