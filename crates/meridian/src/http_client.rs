//! The command line's one HTTP client of a node's API (`meridian ctl`, and `meridian up`
//! waiting for its cluster to come up): hyper's HTTP/1.1 client connection over TCP, or over
//! TLS when given the CA that signed the node's certificate ([`Access::tls`]), one request per
//! connection (`Connection: close`). It authenticates as the node's `default` user
//! (`Authorization: Bearer <password>`) or as a named ACL user (`Authorization: Basic`). No
//! proxies, no redirects.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{ACCEPT, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use meridian_net::tls::TlsConnector;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How long one address may take to accept the connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the request and its whole reply may take once connected.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// How a client reaches and authenticates to a node: the same for every node of a cluster.
#[derive(Clone, Default)]
pub struct Access {
    /// The ACL user to act as (`Authorization: Basic`); `None`: the `default` user.
    pub user: Option<String>,
    /// The user's password (the `default` user's: the node's `requirepass`).
    pub password: Option<String>,
    /// HTTPS, trusting the CA it was made from ([`Access::with_ca`]); `None`: plain HTTP.
    pub tls: Option<TlsConnector>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Access {
    /// HTTPS to nodes whose certificates chain to the CA in `ca_file` (PEM).
    pub fn with_ca(mut self, ca_file: &Path) -> anyhow::Result<Self> {
        let config = meridian_net::tls::client_config(ca_file, None)?;
        self.tls = Some(TlsConnector::from(Arc::new(config)));
        Ok(self)
    }

    /// The `Authorization` header value, if any.
    fn authorization(&self) -> Option<String> {
        use base64::Engine as _;
        let password = self.password.as_deref();
        match (&self.user, password) {
            (Some(user), p) => {
                let pair = format!("{user}:{}", p.unwrap_or_default());
                let token = base64::engine::general_purpose::STANDARD.encode(pair);
                Some(format!("Basic {token}"))
            }
            (None, Some(p)) => Some(format!("Bearer {p}")),
            (None, None) => None,
        }
    }
}

/// A node's HTTP API at `host:port`, reached and authenticated as [`Access`] says.
#[derive(Clone, Debug)]
pub struct Client {
    node: String,
    access: Access,
}

/// A connection, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A reply: its status and its (de-chunked) body.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status code.
    pub status: u16,
    /// The body, whatever its transfer encoding was.
    pub body: Bytes,
}

/// Why a request got no reply.
#[derive(Debug)]
pub enum Error {
    /// No connection: the address does not resolve, or nothing accepted at any of its
    /// addresses. `why` is empty for a refused connection (the usual case: no node there),
    /// else the cause and `"; "`.
    Unreachable {
        /// The node as given (`host:port`).
        node: String,
        /// The cause, ending in `"; "`, or empty.
        why: String,
    },
    /// Connected, but the exchange failed: an I/O error, a malformed reply, a header value
    /// that cannot be sent.
    Exchange(Box<dyn std::error::Error + Send + Sync>),
    /// Connected, but the reply was not complete within [`EXCHANGE_TIMEOUT`].
    TimedOut,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unreachable { node, why } => write!(
                f,
                "cannot reach node at {node}: {why}is it running? (meridian up prints the HTTP \
                 ports)"
            ),
            Error::Exchange(e) => write!(f, "{e}"),
            Error::TimedOut => write!(
                f,
                "no complete reply within {}s",
                EXCHANGE_TIMEOUT.as_secs()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Exchange(e) => e.source(),
            _ => None,
        }
    }
}

impl Client {
    /// The node at `node` (`host:port`).
    pub fn new(node: impl Into<String>, access: Access) -> Self {
        Self {
            node: node.into(),
            access,
        }
    }

    /// Sends `method path` with an optional JSON body and returns the reply, whatever its
    /// status.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        json_body: Option<String>,
    ) -> Result<Reply, Error> {
        let stream = self.connect().await?;
        match tokio::time::timeout(
            EXCHANGE_TIMEOUT,
            self.exchange(stream, method, path, json_body),
        )
        .await
        {
            Ok(reply) => reply,
            Err(_) => Err(Error::TimedOut),
        }
    }

    /// [`Client::send`] for callers without a runtime (`meridian ctl`): runs it on a
    /// current-thread runtime of its own.
    pub fn send_blocking(
        &self,
        method: &str,
        path: &str,
        json_body: Option<String>,
    ) -> Result<Reply, Error> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Exchange(e.into()))?
            .block_on(self.send(method, path, json_body))
    }

    /// Connects to the node, then makes the TLS handshake when the access is HTTPS (the
    /// certificate must name the host as given).
    async fn connect(&self) -> Result<Box<dyn Io>, Error> {
        let tcp = self.connect_tcp().await?;
        let Some(tls) = &self.access.tls else {
            return Ok(Box::new(tcp));
        };
        let host = self
            .node
            .rsplit_once(':')
            .map_or(self.node.as_str(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = rustls_pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| Error::Exchange(format!("'{host}' is no TLS server name: {e}").into()))?;
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tls.connect(name, tcp))
            .await
            .map_err(|_| Error::TimedOut)?
            .map_err(|e| {
                Error::Exchange(format!("TLS handshake with {}: {e}", self.node).into())
            })?;
        Ok(Box::new(stream))
    }

    /// Connects to the first of the node's addresses that accepts within
    /// [`CONNECT_TIMEOUT`].
    async fn connect_tcp(&self) -> Result<TcpStream, Error> {
        let unreachable = |why: String| Error::Unreachable {
            node: self.node.clone(),
            why,
        };
        let addrs = tokio::net::lookup_host(self.node.as_str())
            .await
            .map_err(|e| unreachable(format!("{e}; ")))?;
        let mut last = None;
        for a in addrs {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
                Ok(Ok(s)) => return Ok(s),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(ErrorKind::TimedOut.into()),
            }
        }
        Err(unreachable(match last {
            Some(e) if e.kind() == ErrorKind::ConnectionRefused => String::new(),
            Some(e) => format!("{e}; "),
            None => "no address; ".into(),
        }))
    }

    async fn exchange(
        &self,
        stream: Box<dyn Io>,
        method: &str,
        path: &str,
        json_body: Option<String>,
    ) -> Result<Reply, Error> {
        let exchange = |e: Box<dyn std::error::Error + Send + Sync>| Error::Exchange(e);
        let body = json_body.unwrap_or_default();
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).map_err(|e| exchange(e.into()))?)
            .uri(path)
            .header(HOST, &self.node)
            .header(CONNECTION, "close")
            .header(ACCEPT, "application/json")
            .header(CONTENT_LENGTH, body.len());
        if !body.is_empty() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        if let Some(auth) = self.access.authorization() {
            req = req.header(AUTHORIZATION, auth);
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| exchange(e.into()))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| exchange(e.into()))?;
        // The connection's own task ends with the reply (`Connection: close`), or when this
        // exchange is dropped (a caller's timeout), which closes the socket; its error, if
        // any, is the one the request sees too.
        let _conn = AbortOnDrop(tokio::spawn(conn).abort_handle());
        let reply = sender
            .send_request(req)
            .await
            .map_err(|e| exchange(e.into()))?;
        let status = reply.status().as_u16();
        let body = reply
            .into_body()
            .collect()
            .await
            .map_err(|e| exchange(e.into()))?
            .to_bytes();
        Ok(Reply { status, body })
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A one-shot server answering `reply`; yields the request it read.
    async fn serve_once(reply: &'static [u8]) -> (String, tokio::task::JoinHandle<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 4096];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                req.extend_from_slice(&buf[..n]);
            }
            let head_end = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            let text = String::from_utf8_lossy(&req).to_ascii_lowercase();
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            while req.len() < head_end + len {
                let n = s.read(&mut buf).await.unwrap();
                req.extend_from_slice(&buf[..n]);
            }
            s.write_all(reply).await.unwrap();
            String::from_utf8(req).unwrap()
        });
        (addr, task)
    }

    #[tokio::test]
    async fn chunked_replies_are_decoded_and_the_bearer_sent() {
        let (addr, server) = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n3\r\n\":1\r\n1\r\n}\r\n0\r\n\r\n",
        )
        .await;
        let c = Client::new(
            addr,
            Access {
                password: Some("pw".into()),
                ..Access::default()
            },
        );
        let r = c
            .send("POST", "/x", Some("{\"k\":1}".into()))
            .await
            .unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"{\"a\":1}"[..]));
        let req = server.await.unwrap();
        assert!(req.starts_with("POST /x HTTP/1.1\r\n"), "{req}");
        let lower = req.to_ascii_lowercase();
        for h in [
            "authorization: bearer pw\r\n",
            "content-type: application/json\r\n",
            "content-length: 7\r\n",
            "connection: close\r\n",
        ] {
            assert!(lower.contains(h), "{h} in {req}");
        }
        assert!(req.ends_with("\r\n\r\n{\"k\":1}"), "{req}");
    }

    #[tokio::test]
    async fn errors_keep_their_status_and_refusals_read_plainly() {
        let (addr, _server) =
            serve_once(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno").await;
        let r = Client::new(addr, Access::default())
            .send("GET", "/y", None)
            .await
            .unwrap();
        assert_eq!((r.status, &r.body[..]), (404, &b"no"[..]));

        // A port nothing listens on: refused, so no cause before the hint.
        let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = free.local_addr().unwrap().to_string();
        drop(free);
        let e = Client::new(addr.clone(), Access::default())
            .send("GET", "/", None)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot reach node at {addr}: is it running? (meridian up prints the HTTP ports)"
            )
        );
    }
}
