//! The HTTP API: keys under `/kv/{key}`, plus `/health`, `/metrics` and `/status`.
//!
//! - `GET /kv/{key}` → 200 with the value as `application/octet-stream`, or 404.
//! - `PUT /kv/{key}` with the value as body (optional `?ttl_ms=N`) → 204.
//! - `DELETE /kv/{key}` → 204 if the key existed, 404 if not.
//! - `GET /health` → 200 `{"status":"ok"}`.
//! - `GET /metrics` → Prometheus text.
//! - `GET /status` → JSON: version, uptime, engine, sizes, connections.
//! - Cluster mode (see `http_cluster`): `/kv` serves the replication node with contexts and
//!   quorum parameters (eventual buckets) or read modes and versions (timeline buckets);
//!   `GET /cluster`, `GET /buckets`, `PUT /buckets/{name}`, `GET|PUT /wan`,
//!   `POST /timeline/force-master`, `GET /balance`, `PUT /balance/service-model`.
//!
//! Keys are the percent-decoded path after `/kv/`, so any byte string (slashes included) is a
//! key. Every error is JSON `{"error":{"code":"STABLE_CODE","message":"..."}}`; codes never
//! change meaning. When the node has a `requirepass`, `/kv` and `/status` need
//! `Authorization: Bearer <password>`; `/health` and `/metrics` stay open for probes.

use crate::keyspace::{KeyspaceError, SetOptions};
use crate::metrics::{Frontend, OpStats};
use crate::node::NodeState;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
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

impl From<KeyspaceError> for ApiError {
    fn from(e: KeyspaceError) -> Self {
        let (status, code) = match &e {
            KeyspaceError::Storage(meridian_storage::StorageError::KeyTooLarge { .. }) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "KEY_TOO_LARGE")
            }
            KeyspaceError::ValueTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "VALUE_TOO_LARGE"),
            e if e.is_client_error() => (StatusCode::BAD_REQUEST, "BAD_REQUEST"),
            KeyspaceError::Corrupt(_) => (StatusCode::INTERNAL_SERVER_ERROR, "CORRUPT_VALUE"),
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
            axum::routing::post(crate::http_cluster::join),
        )
        .route(
            "/cluster/members/{id}",
            axum::routing::delete(crate::http_cluster::leave),
        )
        .route("/buckets", get(crate::http_cluster::buckets))
        .route(
            "/buckets/{name}",
            axum::routing::put(crate::http_cluster::put_bucket),
        )
        .route(
            "/wan",
            get(crate::http_cluster::wan).put(crate::http_cluster::put_wan),
        )
        .route("/balance", get(crate::http_cluster::balance))
        .route(
            "/balance/service-model",
            axum::routing::put(crate::http_cluster::put_service_model)
                .layer(DefaultBodyLimit::max(crate::http_cluster::BALANCE_BODY_MAX)),
        )
        .route("/txn", axum::routing::post(crate::http_cluster::post_txn))
        .route(
            "/timeline/force-master",
            axum::routing::post(crate::http_cluster::force_master),
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
        .with_state(state)
}

/// Serves the HTTP API on `listener` until `shutdown` is cancelled, then drains requests.
pub async fn serve(
    listener: TcpListener,
    node: Arc<NodeState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = CountingListener {
        inner: listener,
        node: node.clone(),
    };
    axum::serve(listener, router(node))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
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

pub(crate) fn percent_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

pub(crate) fn authorize(node: &NodeState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(pass) = node.config.resp.requirepass.as_deref() else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(pass) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "this node requires a password: send 'Authorization: Bearer <requirepass>'",
        ))
    }
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

async fn health() -> impl IntoResponse {
    axum::Json(json!({ "status": "ok" }))
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

/// A TCP listener that counts HTTP connections into the node's metrics.
struct CountingListener {
    inner: TcpListener,
    node: Arc<NodeState>,
}

impl axum::serve::Listener for CountingListener {
    type Io = CountedStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let _ = stream.set_nodelay(true);
        let conns = self.node.metrics.connections(Frontend::Http);
        conns.accepted.fetch_add(1, Ordering::Relaxed);
        conns.open.fetch_add(1, Ordering::Relaxed);
        (
            CountedStream {
                inner: stream,
                node: self.node.clone(),
            },
            addr,
        )
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that leaves the open-connections gauge when dropped.
struct CountedStream {
    inner: TcpStream,
    node: Arc<NodeState>,
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        let conns = self.node.metrics.connections(Frontend::Http);
        conns.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
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
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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
    }
}
