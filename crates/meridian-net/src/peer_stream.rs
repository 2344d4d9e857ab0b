//! A peer connection's byte stream: plain TCP, or TLS over TCP when the cluster's peer links
//! are encrypted ([`crate::tcp::TcpConfig::tls`]).
//!
//! The TCP transport reads and writes through these types and never needs to know which it
//! has, except for one thing: a file range goes out with `sendfile(2)` on plain TCP (the bytes
//! never enter user space), but must be read and encrypted under TLS — [`PeerWriter::send_file`]
//! reads it on a blocking thread and writes it through the TLS session. That copy is the
//! measured cost of encrypting bulk lanes (see BENCHMARKS.md).
//!
//! Guarantees: every write of a frame batch is followed by a flush, so nothing a TLS session
//! buffered waits for the next batch; halves of a TLS stream share its session behind a lock
//! (tokio's `split`), so reads and writes proceed concurrently as on plain TCP.

use crate::payload::FileSlice;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_rustls::TlsStream;

/// A whole peer connection, before it is split into its reading and writing halves.
pub(crate) enum PeerStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS (either end's session).
    Tls(Box<TlsStream<TcpStream>>),
}

/// The reading half of a [`PeerStream`].
pub(crate) enum PeerReader {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The writing half of a [`PeerStream`].
pub(crate) enum PeerWriter {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl PeerStream {
    /// The TCP socket underneath (for socket options).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Self::Plain(s) => s,
            Self::Tls(s) => s.get_ref().0,
        }
    }

    /// Splits into halves that can be used from two tasks.
    pub(crate) fn into_split(self) -> (PeerReader, PeerWriter) {
        match self {
            Self::Plain(s) => {
                let (r, w) = s.into_split();
                (PeerReader::Plain(r), PeerWriter::Plain(w))
            }
            Self::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (PeerReader::Tls(r), PeerWriter::Tls(w))
            }
        }
    }
}

impl PeerWriter {
    /// Sends a file range: `sendfile(2)` on plain TCP; on TLS, read on a blocking thread and
    /// written (encrypted) through the session.
    pub(crate) async fn send_file(&mut self, slice: &FileSlice) -> io::Result<()> {
        match self {
            Self::Plain(w) => send_file(w.as_ref(), slice).await,
            Self::Tls(w) => {
                let slice = slice.clone();
                let bytes = tokio::task::spawn_blocking(move || slice.read_blocking())
                    .await
                    .map_err(io::Error::other)??;
                w.write_all(&bytes).await
            }
        }
    }
}

/// Sends a file range to the socket with `sendfile(2)`, waiting for the socket whenever it is
/// full: the bytes go from the page cache to the socket without entering user space.
async fn send_file(sock: &TcpStream, slice: &FileSlice) -> std::io::Result<()> {
    let mut offset = slice.offset();
    let end = offset.saturating_add(slice.len());
    while offset < end {
        sock.writable().await?;
        let count = usize::try_from(end - offset)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        let sent = sock.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(sock, slice.file(), Some(&mut offset), count)
                .map_err(std::io::Error::from)
        });
        match sent {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file is shorter than the range being sent",
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Delegates a poll method to whichever variant `$self` is.
macro_rules! delegate {
    ($self:ident, $method:ident ( $($arg:expr),* )) => {
        match $self.get_mut() {
            Self::Plain(s) => Pin::new(s).$method($($arg),*),
            Self::Tls(s) => Pin::new(s).$method($($arg),*),
        }
    };
}

impl AsyncRead for PeerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, poll_read(cx, buf))
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        delegate!(self, poll_write(cx, b))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, poll_shutdown(cx))
    }
}

impl AsyncRead for PeerReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, poll_read(cx, buf))
    }
}

impl AsyncWrite for PeerWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        delegate!(self, poll_write(cx, b))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, poll_shutdown(cx))
    }
}
