//! The HTTP API: keys under `/kv/{key}`, plus `/health`, `/metrics` and `/status`.
//!
//! - `GET /kv/{key}` → 200 with the value as `application/octet-stream`, 404, or 409
//!   `WRONG_TYPE` when the key holds a Redis hash (RESP's HSET/HGETALL serve those).
//! - `PUT /kv/{key}` with the value as body (optional `?ttl_ms=N`) → 204.
//! - `DELETE /kv/{key}` → 204 if the key existed, 404 if not.
//! - `GET /health` → 200 `{"status":"ok"}`.
//! - `GET /metrics` → Prometheus text.
//! - `GET /status` → JSON: version, uptime, engine, sizes, connections.
//! - Cluster mode (see `http_cluster`): `/kv` serves the replication node with contexts and
//!   quorum parameters (eventual buckets) or read modes and versions (timeline buckets);
//!   `GET /cluster`, `GET /buckets`, `PUT /buckets/{name}`, `GET|PUT /wan`,
//!   `POST /timeline/force-master`, `GET /balance`, `PUT /balance/service-model`.
//! - Large objects under `/b/{bucket}/{key}` (see `http_blob`): streamed `PUT` with an
//!   optional `Content-Digest`, `GET`/`HEAD` with one `Range`, `DELETE`.
//!
//! Keys are the percent-decoded path after `/kv/`, so any byte string (slashes included) is a
//! key. Every error is JSON `{"error":{"code":"STABLE_CODE","message":"..."}}`; codes never
//! change meaning. When the node has a `requirepass`, every route but `/health` and
//! `/metrics` (open for probes) needs `Authorization: Bearer <password>`, checked in constant
//! time by a gate that runs before any handler, so the body of an unauthenticated request is
//! never read (401 `UNAUTHORIZED`; failures counted in `meridian_auth_failures_total`,
//! repeated ones on a connection slowed, then the connection closed). Admin changes (non-GET
//! requests to `/cluster/members`, `/buckets/{name}`, `/wan`, `/balance/service-model`,
//! `/timeline/force-master`) need a password unless the listener is bound to loopback (403
//! `ADMIN_NEEDS_PASSWORD` otherwise), and each is logged with its source address.

use crate::metrics::{Frontend, OpStats};
use crate::node::NodeState;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use meridian_redis::RedisError;
use meridian_redis::options::SetOptions;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
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
            RedisError::ValueTooLarge | RedisError::HashTooLarge => {
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

/// Builds the router over a node's state.
pub fn router(node: Arc<NodeState>) -> Router {
    let max_body = node.config.http.max_body_len;
    let state = Arc::new(HttpState {
        get: node.metrics.op(Frontend::Http, "get"),
        put: node.metrics.op(Frontend::Http, "put"),
        delete: node.metrics.op(Frontend::Http, "delete"),
        node,
    });
    Router::new()
        .route("/kv/{*key}", get(get_key).put(put_key).delete(delete_key))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/cluster", get(crate::http_cluster::cluster))
        .route(
            "/cluster/members",
            admin(axum::routing::post(crate::http_cluster::join)),
        )
        .route(
            "/cluster/members/{id}",
            admin(axum::routing::delete(crate::http_cluster::leave)),
        )
        .route("/buckets", get(crate::http_cluster::buckets))
        .route(
            "/buckets/{name}",
            admin(axum::routing::put(crate::http_cluster::put_bucket)),
        )
        .route(
            "/buckets/{name}/truncate",
            admin(axum::routing::post(crate::http_cluster::truncate_bucket)),
        )
        .route(
            "/wan",
            admin(get(crate::http_cluster::wan).put(crate::http_cluster::put_wan)),
        )
        .route("/balance", get(crate::http_cluster::balance))
        .route(
            "/balance/service-model",
            admin(axum::routing::put(crate::http_cluster::put_service_model)),
        )
        .route("/txn", axum::routing::post(crate::http_cluster::post_txn))
        .route(
            "/timeline/force-master",
            admin(axum::routing::post(crate::http_cluster::force_master)),
        )
        .fallback(|uri: Uri| async move {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NO_SUCH_ROUTE",
                format!(
                    "no route {}; see /status, /health, /metrics, /kv/{{key}}",
                    uri.path()
                ),
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            max_body,
            refuse_long_bodies,
        ))
        // After the body limits above, which must not apply to object uploads.
        .merge(crate::http_blob::routes())
        .layer(axum::middleware::map_response(json_errors))
        // Outermost: authorizes before any body limit or extractor looks at the body.
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
        .with_state(state)
}

/// Largest body an admin route (`/cluster/members`, `/buckets/{name}`, `/wan`,
/// `/balance/service-model`, `/timeline/force-master`) accepts: a 413 `BODY_TOO_LARGE`
/// beyond it, before anything is buffered when the request declares its length.
pub(crate) const ADMIN_BODY_MAX: usize = 64 * 1024;

/// An admin route: bodies of at most [`ADMIN_BODY_MAX`] bytes, a declared
/// `Content-Length` above it refused before the body is read (axum's [`DefaultBodyLimit`]
/// alone only stops once that much has arrived, and waits for a body that never comes).
fn admin<S: Clone + Send + Sync + 'static>(
    route: axum::routing::MethodRouter<S>,
) -> axum::routing::MethodRouter<S> {
    route
        .layer(DefaultBodyLimit::max(ADMIN_BODY_MAX))
        .layer(axum::middleware::from_fn_with_state(
            ADMIN_BODY_MAX,
            refuse_long_bodies,
        ))
}

/// Answers 413 `BODY_TOO_LARGE` at once to a request whose `Content-Length` exceeds `max`,
/// without reading its body (hyper then closes the connection).
async fn refuse_long_bodies(
    State(max): State<usize>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(n) = declared
        && n > max as u64
    {
        return ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "BODY_TOO_LARGE",
            format!(
                "the body is {n} bytes (Content-Length); {} takes at most {max}",
                req.uri().path()
            ),
        )
        .into_response();
    }
    next.run(req).await
}

/// Turns every error reply that is not already the API's JSON error — axum's own rejections
/// (malformed JSON or path, 405, 413 of a chunked body over the limit, 415) — into
/// `{"error":{"code","message"}}` with the same status and headers (`Allow` stays).
async fn json_errors(r: Response) -> Response {
    let status = r.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return r;
    }
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let code = match status {
        StatusCode::BAD_REQUEST => "BAD_REQUEST".into(),
        StatusCode::NOT_FOUND => "NOT_FOUND".into(),
        StatusCode::METHOD_NOT_ALLOWED => "METHOD_NOT_ALLOWED".into(),
        StatusCode::PAYLOAD_TOO_LARGE => "BODY_TOO_LARGE".into(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "UNSUPPORTED_MEDIA_TYPE".into(),
        StatusCode::UNPROCESSABLE_ENTITY => "UNPROCESSABLE".into(),
        s => Cow::Owned(format!("HTTP_{}", s.as_u16())),
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut out = ApiError::new(status, code, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// What a connection over `http.max_connections` gets before it is closed.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
content-type: application/json\r\ncontent-length: 82\r\n\r\n\
{\"error\":{\"code\":\"TOO_MANY_CONNECTIONS\",\"message\":\"http.max_connections reached\"}}";

/// Serves the HTTP API on `listener` until `shutdown` is cancelled, then drains requests:
/// it stops accepting, lets every connection finish its current request, and returns once
/// all are closed.
///
/// Hardening (all per listener, independent of the RESP front end's `max_clients`):
/// - at most `http.max_connections` connections are open at once; one over the cap is
///   answered `503` without waiting and closed at once (counted as rejected), so neither the
///   accept backlog nor the descriptors fill up behind idle clients;
/// - a connection must send a request's complete headers within
///   `http.header_read_timeout_ms` of being accepted or of its previous response (hyper starts
///   that clock whenever it waits for a request head), which closes slowloris connections
///   and bounds how long a keep-alive connection stays idle;
/// - a connection whose pending read or write makes no progress for `http.idle_timeout_ms`
///   is closed (a body trickled in, a client that stops reading its response).
pub async fn serve(
    listener: TcpListener,
    node: Arc<NodeState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let cfg = &node.config.http;
    let limits = ConnLimits {
        max_connections: cfg.max_connections,
        over_capacity: OVER_CAPACITY,
        header_timeout: Duration::from_millis(cfg.header_read_timeout_ms),
        idle: Duration::from_millis(cfg.idle_timeout_ms),
    };
    serve_app(
        listener,
        router(node.clone()),
        node,
        Frontend::Http,
        limits,
        shutdown,
    )
    .await
}

/// The limits of an HTTP listener's connections (see [`serve`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    pub(crate) max_connections: usize,
    /// The whole response a connection over `max_connections` gets before it is closed.
    pub(crate) over_capacity: &'static [u8],
    pub(crate) header_timeout: Duration,
    pub(crate) idle: Duration,
}

/// Serves `app` on `listener` under `limits`, counting connections as `frontend`'s, until
/// `shutdown`; then drains the open connections. What [`serve`] and the S3 endpoint run.
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
            let _ = stream.try_write(limits.over_capacity);
            continue;
        };
        let _ = stream.set_nodelay(true);
        conns.accepted.fetch_add(1, Ordering::Relaxed);
        conns.open.fetch_add(1, Ordering::Relaxed);
        let io = TokioIo::new(CountedStream {
            inner: stream,
            node: node.clone(),
            frontend,
            idle,
            last_progress: tokio::time::Instant::now(),
            timer: Box::pin(tokio::time::sleep(idle)),
            _slot: slot,
        });
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
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(io, service);
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
            drop(done);
        });
    }
    drop(listener);
    drop(done_tx);
    let _ = done_rx.recv().await;
    Ok(())
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
    percent_decode(raw.as_bytes())
        .map(Bytes::from)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "BAD_KEY_ENCODING",
                "the key has a malformed %-escape: use %XX with two hex digits",
            )
        })
}

/// Strict percent-decoding: `None` when a `%` is not followed by two hex digits (the
/// `percent-encoding` crate alone would pass such a `%` through as a literal).
pub(crate) fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let well_formed = memchr::memchr_iter(b'%', s).all(|i| {
        s.get(i + 1..i + 3)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    well_formed.then(|| percent_encoding::percent_decode(s).collect())
}

/// Whether `headers` carry the bearer this node requires (always, without a `requirepass`);
/// compared in constant time ([`crate::auth::password_matches`]).
fn bearer_ok(node: &NodeState, headers: &HeaderMap) -> bool {
    let Some(pass) = node.config.resp.requirepass.as_deref() else {
        return true;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|given| crate::auth::password_matches(pass.as_bytes(), given))
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "this node requires a password: send 'Authorization: Bearer <requirepass>'",
    )
}

/// The handlers' own check of the bearer (the [`gate`] has already refused, and counted,
/// every request without it before any body was read).
pub(crate) fn authorize(node: &NodeState, headers: &HeaderMap) -> Result<(), ApiError> {
    if bearer_ok(node, headers) {
        Ok(())
    } else {
        Err(unauthorized())
    }
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
async fn gate(
    State(s): State<Arc<HttpState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let access = access_of(req.method(), req.uri().path());
    if access == Access::Open {
        return next.run(req).await;
    }
    let conn = req.extensions().get::<ConnAuth>().cloned();
    if !bearer_ok(&s.node, req.headers()) {
        return refuse_bearer(&s.node, conn.as_ref()).await;
    }
    if access == Access::Authed {
        return next.run(req).await;
    }
    let peer = conn
        .as_ref()
        .map(|c| c.peer.to_string())
        .unwrap_or_default();
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    if s.node.config.resp.requirepass.is_none()
        && !crate::auth::admin_allowed_without_password(conn.map(|c| c.local))
    {
        tracing::warn!(%peer, %method, %path, "admin change refused: no requirepass on a non-loopback listener");
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

/// Runs one key operation, timing it into `stats`.
fn timed<T>(stats: &OpStats, op: impl FnOnce() -> Result<T, ApiError>) -> Result<T, ApiError> {
    let start = Instant::now();
    let result = op();
    let failed = matches!(&result, Err(e) if e.status.is_server_error());
    stats.observe(start.elapsed(), failed);
    result
}

async fn get_key(
    State(s): State<Arc<HttpState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&s.node, &headers)?;
    let key = key_of(&uri)?;
    crate::http_blob::refuse_s3_key(&s.node, &key)?;
    if let Some(c) = &s.node.cluster {
        return crate::http_cluster::get_key(&s, c, &key, &uri).await;
    }
    timed(&s.get, || match s.node.keyspace.get(&key)? {
        Some(value) => {
            Ok(([(header::CONTENT_TYPE, "application/octet-stream")], value).into_response())
        }
        None => Err(not_found(&key)),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutParams {
    ttl_ms: Option<u64>,
}

async fn put_key(
    State(s): State<Arc<HttpState>>,
    uri: Uri,
    headers: HeaderMap,
    params: Result<Query<PutParams>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    authorize(&s.node, &headers)?;
    let key = key_of(&uri)?;
    crate::http_blob::refuse_s3_key(&s.node, &key)?;
    if let Some(c) = &s.node.cluster {
        return crate::http_cluster::put_key(&s, c, &key, &uri, &headers, body).await;
    }
    let Query(params) = params.map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_QUERY",
            format!("{e}; the only parameter is ttl_ms=<milliseconds>"),
        )
    })?;
    if params.ttl_ms == Some(0) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_QUERY",
            "ttl_ms must be at least 1",
        ));
    }
    let options = params.ttl_ms.map_or_else(SetOptions::default, |ms| {
        SetOptions::with_ttl(Duration::from_millis(ms))
    });
    // `maxmemory` holds for every front end: over it, `noeviction` refuses the write (as RESP
    // does with -OOM) and the other policies evict first.
    if !s.node.keyspace.make_room() {
        return Err(ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "OOM",
            crate::memory::OOM,
        ));
    }
    timed(&s.put, || {
        s.node.keyspace.set(key, body, options)?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
}

async fn delete_key(
    State(s): State<Arc<HttpState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&s.node, &headers)?;
    let key = key_of(&uri)?;
    crate::http_blob::refuse_s3_key(&s.node, &key)?;
    if let Some(c) = &s.node.cluster {
        return crate::http_cluster::delete_key(&s, c, &key, &uri, &headers).await;
    }
    timed(&s.delete, || {
        if s.node.keyspace.del(std::slice::from_ref(&key))? > 0 {
            Ok(StatusCode::NO_CONTENT.into_response())
        } else {
            Err(not_found(&key))
        }
    })
}

pub(crate) fn not_found(key: &[u8]) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        format!("no key '{}'", String::from_utf8_lossy(key)),
    )
}

/// `200 {"status":"ok"}`, or `503 {"status":"degraded","reason":…,"storage":{…}}` while the
/// storage engine refuses writes (a full disk: it recovers by itself when space returns;
/// reads are still served).
async fn health(State(s): State<Arc<HttpState>>) -> Response {
    match s.node.engine.health() {
        meridian_storage::EngineHealth::Ok => axum::Json(json!({ "status": "ok" })).into_response(),
        meridian_storage::EngineHealth::Degraded(d) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({
                "status": "degraded",
                "reason": d.reason,
                "storage": {
                    "status": "degraded",
                    "disk_full": d.disk_full,
                    "writes": "refused",
                    "reads": "served",
                    "recovers_by_itself": d.recovers,
                    "since_unix_ms": d.since_us / 1000,
                    "reason": d.reason,
                },
            })),
        )
            .into_response(),
    }
}

async fn metrics(State(s): State<Arc<HttpState>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.node.render_metrics(),
    )
}

async fn status(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    authorize(&s.node, &headers)?;
    Ok(axum::Json(s.node.status()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_yields_raw_bytes() {
        assert_eq!(percent_decode(b"a%2Fb%00%ff").unwrap(), b"a/b\x00\xff");
        assert_eq!(percent_decode(b"plain").unwrap(), b"plain");
        assert!(percent_decode(b"bad%2").is_none());
        assert!(percent_decode(b"bad%zz").is_none());
        // from_str_radix, which decoded these before, took a sign: `%+f` was 0x0f.
        assert!(percent_decode(b"bad%+f").is_none());
    }

    #[test]
    fn over_capacity_reply_is_well_formed() {
        let text = std::str::from_utf8(OVER_CAPACITY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(
            head.ends_with(&format!("\r\ncontent-length: {}", body.len())),
            "{head}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "TOO_MANY_CONNECTIONS");
    }
}
