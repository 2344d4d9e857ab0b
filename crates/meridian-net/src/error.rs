//! The crate's one error type, [`NetError`]. Every variant says what went wrong and, where it
//! helps, what to do about it; protocol code maps it to RESP/HTTP errors only at the edge.

use meridian_core::NodeId;
use std::time::Duration;
use thiserror::Error;

/// Everything that can go wrong when talking to another node.
///
/// The type is `Clone` so one failure (a dropped connection, a shutdown) can be handed to every
/// request waiting on it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum NetError {
    /// No response arrived within the request's timeout. The request may or may not have been
    /// executed by the peer.
    #[error(
        "no response from {peer} within {after:?} (the peer is slow, overloaded, partitioned or down)"
    )]
    Timeout {
        /// The peer the request was sent to.
        peer: NodeId,
        /// The timeout that expired.
        after: Duration,
    },
    /// The peer cannot be reached right now (unknown address, connection refused or lost, not
    /// joined to the in-process network). Returned promptly, not at the timeout.
    #[error("{peer} is unreachable: {reason}")]
    Unreachable {
        /// The peer that cannot be reached.
        peer: NodeId,
        /// Why, in words (e.g. the connect error and when the next attempt is due).
        reason: String,
    },
    /// A bounded queue on the way to the peer is full; the message was not accepted. Back off
    /// and retry, or raise the queue's capacity.
    #[error(
        "{queue} towards {peer} is full ({capacity} entries): back off and retry, or raise the capacity"
    )]
    Overloaded {
        /// The peer the message was for.
        peer: NodeId,
        /// Which queue is full (e.g. "TCP send queue", "inbox", "WAN emulator link").
        queue: &'static str,
        /// That queue's capacity.
        capacity: usize,
    },
    /// A frame is larger than the configured maximum. On receipt the connection is closed.
    #[error(
        "frame of {len} bytes exceeds the maximum of {max} bytes (raise `max_frame` on both ends, or send less at once)"
    )]
    FrameTooLarge {
        /// The frame's length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A message could not be encoded or decoded (malformed frame, wrong message type, a
    /// peer running an incompatible version).
    #[error("codec error: {0}")]
    Codec(String),
    /// An I/O error on a connection.
    #[error("I/O error: {0}")]
    Io(String),
    /// A configuration value is invalid.
    #[error("invalid network configuration: {0}")]
    Config(String),
    /// TLS material could not be loaded or used: a certificate, key or CA file that is
    /// missing or not PEM, a key that does not match its certificate, an unknown protocol or
    /// cipher suite name. `what` names the setting (`tls-cert-file /path`), so the message
    /// says what to fix.
    #[error("TLS: {what}: {reason}")]
    Tls {
        /// The setting or file concerned.
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// The local transport has been shut down (or the peer's endpoint went away while the
    /// message was being handled).
    #[error("transport closed")]
    Closed,
}

impl From<std::io::Error> for NetError {
    fn from(e: std::io::Error) -> Self {
        NetError::Io(e.to_string())
    }
}

impl From<postcard::Error> for NetError {
    fn from(e: postcard::Error) -> Self {
        NetError::Codec(e.to_string())
    }
}
