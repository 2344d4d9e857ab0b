//! A RESP client's byte stream: plain TCP or TLS over TCP ([`ClientStream`]), so one
//! connection loop serves both listeners.
//!
//! An enum rather than a generic or a boxed trait object: the plaintext path stays a direct
//! call on the `TcpStream` behind one predictable branch (it is what the benchmarks measure),
//! and the connection code is compiled once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A RESP connection's stream.
pub(crate) enum ClientStream {
    /// Accepted on the plaintext listener.
    Plain(TcpStream),
    /// Accepted on the TLS listener, after its handshake (boxed: the session state is
    /// large, and the enum is moved into every connection task).
    Tls(Box<TlsStream<TcpStream>>),
}

impl ClientStream {
    /// Writes what the socket takes now, without waiting. Over TLS nothing is written
    /// (`WouldBlock`): rustls would accept the bytes into its own buffer and leave them there
    /// until the next flush, which an idle connection may never make; the caller writes them
    /// with its next ordinary (flushed) write instead.
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.try_write(buf),
            Self::Tls(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
