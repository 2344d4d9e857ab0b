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

pub use crate::http_common::ApiError;
use crate::http_common::{
    ADMIN_BODY_MAX, ConnLimits, HttpState, gate, key_of, not_found, serve_app,
};
use crate::metrics::{Frontend, OpStats};
use crate::state::NodeState;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use meridian_redis::options::SetOptions;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

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
        .route("/balance", get(crate::http_balance::balance))
        .route(
            "/balance/service-model",
            admin(axum::routing::put(crate::http_balance::put_service_model)),
        )
        .route("/txn", axum::routing::post(crate::http_txn::post_txn))
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
        tls: cfg.tls,
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

/// Runs one key operation, timing it into `stats`.
fn timed<T>(stats: &OpStats, op: impl FnOnce() -> Result<T, ApiError>) -> Result<T, ApiError> {
    let start = Instant::now();
    let result = op();
    let failed = matches!(&result, Err(e) if e.status.is_server_error());
    stats.observe(start.elapsed(), failed);
    result
}

async fn get_key(State(s): State<Arc<HttpState>>, uri: Uri) -> Result<Response, ApiError> {
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

async fn status(State(s): State<Arc<HttpState>>) -> Result<impl IntoResponse, ApiError> {
    Ok(axum::Json(s.node.status()))
}
#[cfg(test)]
mod tests {
    use super::*;

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
