//! What the HTTP front ends share (the `/kv` API and the cluster, object and S3 routes):
//! the JSON error reply ([`ApiError`]), the router's state ([`HttpState`]), the bearer gate
//! and [`authorize`], percent decoding of keys, and the connection loop every HTTP listener
//! runs ([`serve_app`] under [`ConnLimits`]).
//!
//! It sits below every HTTP module: it imports none of them (nor the node start-up), so the
//! route modules and `wire_error` depend on it and never on the router in
//! `http`.

use crate::metrics::{Frontend, OpStats};
use crate::state::NodeState;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use meridian_redis::RedisError;
use serde_json::json;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

/// An error reply: HTTP status, stable code, human message; some errors add top-level
/// fields to the body and headers (a timeline error's spec fields and current version).
#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    code: Cow<'static, str>,
    message: String,
    /// Added beside `error` in the body.
    fields: serde_json::Map<String, serde_json::Value>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            fields: serde_json::Map::new(),
            headers: Vec::new(),
        }
    }

    /// Adds a top-level field to the body.
    pub(crate) fn with_field(mut self, name: &str, value: serde_json::Value) -> Self {
        self.fields.insert(name.to_owned(), value);
        self
    }

    /// Adds a header to the reply.
    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.fields;
        body.insert(
            "error".into(),
            json!({ "code": self.code, "message": self.message }),
        );
        let mut r = (self.status, axum::Json(body)).into_response();
        r.headers_mut().extend(self.headers);
        r
    }
}

impl From<RedisError> for ApiError {
    fn from(e: RedisError) -> Self {
        let (status, code) = match &e {
            RedisError::Storage(meridian_storage::StorageError::KeyTooLarge { .. }) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "KEY_TOO_LARGE")
            }
            RedisError::ValueTooLarge | RedisError::CollectionTooLarge(_) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "VALUE_TOO_LARGE")
            }
            // Hashes are the only other type: say so, and where to read them.
            RedisError::WrongType => {
                return ApiError::new(
                    StatusCode::CONFLICT,
                    "WRONG_TYPE",
                    "the key holds a hash, not a string value: /kv serves strings; read the \
                     hash over RESP (HGETALL)",
                );
            }
            RedisError::Storage(meridian_storage::StorageError::DiskFull { .. }) => {
                (StatusCode::INSUFFICIENT_STORAGE, "DISK_FULL")
            }
            e if e.is_client_error() => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            RedisError::Corrupt(_) => (StatusCode::INTERNAL_SERVER_ERROR, "CORRUPT_VALUE"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "STORAGE_ERROR"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

pub(crate) struct HttpState {
    pub(crate) node: Arc<NodeState>,
    pub(crate) get: Arc<OpStats>,
    pub(crate) put: Arc<OpStats>,
    pub(crate) delete: Arc<OpStats>,
}

/// Largest body an admin route (`/cluster/members`, `/buckets/{name}`, `/wan`,
/// `/balance/service-model`, `/timeline/force-master`) accepts: a 413 `BODY_TOO_LARGE`
/// beyond it, before anything is buffered when the request declares its length.
pub(crate) const ADMIN_BODY_MAX: usize = 64 * 1024;

/// The limits of an HTTP listener's connections (see `http::serve`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    pub(crate) max_connections: usize,
    /// The whole response a connection over `max_connections` gets before it is closed.
    pub(crate) over_capacity: &'static [u8],
    pub(crate) header_timeout: Duration,
    pub(crate) idle: Duration,
    /// Serve HTTPS with the node's certificate (`http.tls`, `s3.tls`): the handshake must
    /// finish within `header_timeout`, and a connection over capacity is closed unanswered
    /// (a plaintext 503 would mean nothing to a TLS client).
    pub(crate) tls: bool,
}

/// Serves `app` on `listener` under `limits`, counting connections as `frontend`'s, until
/// `shutdown`; then drains the open connections. What the HTTP API (`http::serve`) and the S3 endpoint run.
pub(crate) async fn serve_app(
    listener: TcpListener,
    app: Router,
    node: Arc<NodeState>,
    frontend: Frontend,
    limits: ConnLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (header_timeout, idle) = (limits.header_timeout, limits.idle);
    let service = TowerToHyperService::new(app);
    let conns = node.metrics.connections(frontend);
    // Every connection task holds a sender; when all are dropped, every task has ended.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    // Unknown (never on a bound socket): treated as beyond loopback by the gate.
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "HTTP accept failed");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    _ = shutdown.cancelled() => break,
                }
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            conns.rejected.fetch_add(1, Ordering::Relaxed);
            // Never waits: a new socket's send buffer has room. Dropping closes it.
            if !limits.tls {
                let _ = stream.try_write(limits.over_capacity);
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        conns.accepted.fetch_add(1, Ordering::Relaxed);
        conns.open.fetch_add(1, Ordering::Relaxed);
        let counted = CountedStream {
            inner: stream,
            node: node.clone(),
            frontend,
            idle,
            last_progress: tokio::time::Instant::now(),
            timer: Box::pin(tokio::time::sleep(idle)),
            _slot: slot,
        };
        let conn_auth = ConnAuth {
            local,
            peer,
            failures: Arc::default(),
        };
        let inner = service.clone();
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(conn_auth.clone());
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                hyper::service::Service::call(&inner, req)
            });
        let shutdown = shutdown.clone();
        let done = done_tx.clone();
        let acceptor = match (&node.tls, limits.tls) {
            (Some(t), true) => Some(t.https_acceptor()),
            _ => None,
        };
        tokio::spawn(async move {
            match acceptor {
                None => serve_conn(counted, service, header_timeout, &shutdown).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(header_timeout, acceptor.accept(counted));
                    let stream = tokio::select! {
                        r = handshake => r,
                        _ = shutdown.cancelled() => return drop(done),
                    };
                    match stream {
                        Ok(Ok(s)) => serve_conn(s, service, header_timeout, &shutdown).await,
                        Ok(Err(e)) => {
                            tracing::debug!(client = %peer, error = %e, "HTTPS handshake failed")
                        }
                        Err(_) => tracing::debug!(client = %peer, "HTTPS handshake timed out"),
                    }
                }
            }
            drop(done);
        });
    }
    drop(listener);
    drop(done_tx);
    let _ = done_rx.recv().await;
    Ok(())
}

/// Serves HTTP/1.1 on one connection (plain or TLS) until it ends; at shutdown, finishes the
/// request in progress and closes.
async fn serve_conn<I, S>(io: I, service: S, header_timeout: Duration, shutdown: &CancellationToken)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<hyper::body::Incoming> + Send,
    S::Future: Send + 'static,
    S::ResBody: Send + 'static,
    <S::ResBody as hyper::body::Body>::Data: Send,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "HTTP connection ended with an error");
    }
}

/// The key named by the URI: everything after `/kv/`, percent-decoded to raw bytes.
pub(crate) fn key_of(uri: &Uri) -> Result<Bytes, ApiError> {
    let raw = uri.path().strip_prefix("/kv/").unwrap_or_default();
    if raw.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "EMPTY_KEY",
            "the key is empty",
        ));
    }
    crate::percent::decode(raw.as_bytes())
        .map(Bytes::from)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "BAD_KEY_ENCODING",
                "the key has a malformed %-escape: use %XX with two hex digits",
            )
        })
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "this node requires a password: send 'Authorization: Bearer <requirepass>', or \
         'Authorization: Basic <base64 of user:password>' for an ACL user",
    )
}

fn no_permission(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "NOPERM", message)
}

/// The user a request acts as, which the [`gate`] put in its extensions.
#[derive(Clone, Debug)]
pub(crate) struct HttpUser(pub(crate) crate::resp::acl::SessionUser);

/// Checks `cmd` for the request's user (`/txn`'s operations, after the gate's check).
pub(crate) fn permit(
    user: &mut HttpUser,
    cmd: &crate::http_acl::AsCommand,
) -> Result<(), ApiError> {
    cmd.check(&mut user.0).map_err(no_permission)
}

/// What a route needs before its handler runs (see [`gate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// `/health` and `/metrics`: open to probes.
    Open,
    /// The bearer, when the node has a `requirepass`.
    Authed,
    /// An admin change: the bearer, and a password at all unless the listener is loopback.
    Admin,
}

/// What `method path` needs. Admin changes are the non-GET requests to the membership,
/// bucket, WAN, service-model and force-master routes.
pub(crate) fn access_of(method: &axum::http::Method, path: &str) -> Access {
    if path == "/health" || path == "/metrics" {
        return Access::Open;
    }
    let read = method == axum::http::Method::GET || method == axum::http::Method::HEAD;
    let admin_path = path == "/cluster/members"
        || path.starts_with("/cluster/members/")
        || path.starts_with("/buckets/")
        || path == "/wan"
        || path == "/balance/service-model"
        || path == "/timeline/force-master";
    if admin_path && !read {
        Access::Admin
    } else {
        Access::Authed
    }
}

/// Per connection, what the [`gate`] needs: the address of the listener the connection came
/// in on, the peer's, and the connection's failed authentications so far.
#[derive(Clone, Debug)]
pub(crate) struct ConnAuth {
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) failures: Arc<std::sync::atomic::AtomicU32>,
}

/// Every request of the API passes here first, before any extractor reads its body: a
/// request without the bearer (when the node has a `requirepass`) is answered 401 and its
/// body never read; failures are counted (`meridian_auth_failures_total{frontend="http"}`)
/// and, repeated on one connection, answered late, then with `connection: close`
/// ([`crate::auth::FailurePolicy`]). Admin changes need a password unless the listener is
/// loopback (403 otherwise), and each is logged with its source and outcome.
pub(crate) async fn gate(
    State(s): State<Arc<HttpState>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let access = access_of(req.method(), req.uri().path());
    if access == Access::Open {
        return next.run(req).await;
    }
    let conn = req.extensions().get::<ConnAuth>().cloned();
    let Some(mut user) = crate::http_acl::authenticate(&s.node.users, req.headers()) else {
        return refuse_bearer(&s.node, conn.as_ref()).await;
    };
    let admin = access == Access::Admin;
    if let Some(cmd) = crate::http_acl::http_request(req.method(), req.uri().path(), admin)
        && let Err(message) = cmd.check(&mut user)
    {
        return no_permission(message).into_response();
    }
    let nopass = crate::http_acl::without_password(&mut user);
    req.extensions_mut().insert(HttpUser(user));
    if !admin {
        return next.run(req).await;
    }
    let peer = conn
        .as_ref()
        .map(|c| c.peer.to_string())
        .unwrap_or_default();
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    if nopass && !crate::auth::admin_allowed_without_password(conn.map(|c| c.local)) {
        tracing::warn!(%peer, %method, %path, "admin change refused: no password on a non-loopback listener");
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "ADMIN_NEEDS_PASSWORD",
            "admin routes need a password on a listener beyond loopback: set resp.requirepass \
             (--requirepass) and send 'Authorization: Bearer <requirepass>'",
        )
        .into_response();
    }
    let response = next.run(req).await;
    tracing::info!(%peer, %method, %path, status = response.status().as_u16(), "admin change");
    response
}

/// The 401 of a request without the right bearer, counted, delayed and closing the
/// connection as its connection's failures so far call for.
async fn refuse_bearer(node: &NodeState, conn: Option<&ConnAuth>) -> Response {
    node.metrics
        .connections(Frontend::Http)
        .auth_failures
        .fetch_add(1, Ordering::Relaxed);
    let failures = conn.map_or(1, |c| {
        c.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    });
    let policy = crate::auth::FailurePolicy::after(failures);
    if let Some(delay) = policy.delay() {
        tokio::time::sleep(delay).await;
    }
    let mut r = unauthorized().into_response();
    if policy == crate::auth::FailurePolicy::Close {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

pub(crate) fn not_found(key: &[u8]) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("no key '{}'", String::from_utf8_lossy(key)),
    )
}

/// A connection that leaves the open-connections gauge and frees its slot under
/// `http.max_connections` when dropped, and fails a read or write that has been pending
/// with no progress of either for `idle`.
struct CountedStream {
    inner: TcpStream,
    node: Arc<NodeState>,
    frontend: Frontend,
    idle: Duration,
    /// When a read or write last moved bytes (or saw EOF).
    last_progress: tokio::time::Instant,
    /// Armed at `last_progress + idle` while an operation is pending.
    timer: Pin<Box<tokio::time::Sleep>>,
    _slot: OwnedSemaphorePermit,
}

impl CountedStream {
    /// Records the outcome of a read or write: progress resets the idle clock; pending
    /// becomes a `TimedOut` error once nothing has progressed for `idle`.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if poll.is_ready() {
            self.last_progress = tokio::time::Instant::now();
            return poll;
        }
        let deadline = self.last_progress + self.idle;
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        match self.timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "HTTP connection made no progress for http.idle_timeout_ms",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        let conns = self.node.metrics.connections(self.frontend);
        conns.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        self.watch(cx, poll)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
