//! The HTTP API in cluster mode.
//!
//! - `GET /kv/{key}?r=&pr=&notfound_ok=&basic_quorum=&read_fanout=&hedge_ms=&timeout_ms=` →
//!   200 with the value and `X-Meridian-Context: <hex>` when there is one value; `300 Multiple Choices` with JSON
//!   `{"context": "<hex>", "siblings": ["<base64>", ...]}` for siblings; 404 for notfound.
//! - `PUT /kv/{key}?w=&dw=&pw=&node_confirms=&dc_confirms=&timeout_ms=` (body = value,
//!   optional `X-Meridian-Context` request header; without it the write is blind and adds a
//!   sibling) → 204 with the new context in `X-Meridian-Context`.
//! - `DELETE /kv/{key}?...` with `X-Meridian-Context` → 204 with the tombstone's context;
//!   without the header the node reads the context first (404 if there is no value).
//! - Replication errors: JSON errors whose `code` is the spec's code in upper case
//!   (`R_VAL_UNSATISFIED`, `TIMEOUT`, ...): 400 for bad parameters, 503 for quorum, overload
//!   and timeout failures, 413 for too large, 500 for storage errors.
//! - `GET /cluster`; `POST /cluster/members` (JSON member record: `id`, `name`, `dc` name,
//!   `peer`, optional `resp`/`http`) admits a node; `DELETE /cluster/members/{id}` removes
//!   one; both go through the claimant and answer the new metadata version and layout epoch.
//! - `GET /buckets`, `PUT /buckets/{name}` (JSON `BucketProps`, validated by the claimant and
//!   applied to the whole cluster), `GET /wan`, `PUT /wan` (nodes behind a WAN emulator).
//!
//! On a single node (no cluster) the cluster routes answer 404 `NOT_CLUSTER`.

use crate::cluster::{ClusterBackend, apply_option};
use crate::http::{ApiError, HttpState, authorize, not_found, percent_decode};
use crate::metrics::{Frontend, OpStats};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use meridian_cluster::Props;
use meridian_core::{DcId, NodeId};
use meridian_net::wan::{Cut, DeliveryMode, LinkConfig, Scope, WanControl};
use meridian_replication::{
    BucketProps, ErrorClass, GetOptions, GetResult, MemberRecord, MetaChange, PutOptions,
    ReplicationError,
};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// The header carrying a causal context (hex).
pub const CONTEXT_HEADER: &str = "x-meridian-context";

impl From<ReplicationError> for ApiError {
    fn from(e: ReplicationError) -> Self {
        let status = match e.class() {
            ErrorClass::BadRequest => StatusCode::BAD_REQUEST,
            ErrorClass::Unavailable | ErrorClass::Overload | ErrorClass::Timeout => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorClass::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorClass::Conflict => StatusCode::PRECONDITION_FAILED,
        };
        ApiError::new(status, e.code().to_ascii_uppercase(), e.to_string())
    }
}

/// The HTTP answer to a replication error, counted in
/// `meridian_replication_errors_total{frontend="http",code=...}`.
fn repl(s: &HttpState, e: ReplicationError) -> ApiError {
    s.node.metrics.replication_error(Frontend::Http, e.code());
    e.into()
}

fn bad_query(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "BAD_QUERY", message)
}

fn not_cluster() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_CLUSTER",
        "this node is not part of a cluster (start one with `meridian up`)",
    )
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Standard base64 with padding.
pub fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// The request's quorum parameters from the query string.
fn props_of(uri: &Uri, reads: bool) -> Result<Props, ApiError> {
    let mut props = Props::default();
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode(value.as_bytes())
            .ok_or_else(|| bad_query(format!("malformed %-escape in '{pair}'")))?;
        apply_option(&mut props, name.as_bytes(), &value, reads).map_err(bad_query)?;
    }
    Ok(props)
}

fn context_of(headers: &HeaderMap) -> Result<Option<Vec<u8>>, ApiError> {
    let Some(v) = headers.get(CONTEXT_HEADER) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_CONTEXT",
            "X-Meridian-Context must be the hex string a previous reply carried",
        )
    };
    let s = v.to_str().map_err(|_| bad())?.trim();
    let bytes = unhex(s).ok_or_else(bad)?;
    Ok((!bytes.is_empty()).then_some(bytes))
}

fn context_header(ctx: &[u8]) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(CONTEXT_HEADER),
        HeaderValue::from_str(&hex(ctx)).expect("hex is a valid header value"),
    )
}

async fn timed<T>(
    stats: &OpStats,
    op: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let start = Instant::now();
    let result = op.await;
    let failed = matches!(&result, Err(e) if e.status.is_server_error());
    stats.observe(start.elapsed(), failed);
    result
}

pub(crate) async fn get_key(
    s: &HttpState,
    c: &ClusterBackend,
    key: &[u8],
    uri: &Uri,
) -> Result<Response, ApiError> {
    let props = props_of(uri, true)?;
    timed(&s.get, async {
        let opts = GetOptions {
            props,
            ..GetOptions::default()
        };
        match c.node.get(key, opts).await.map_err(|e| repl(s, e))? {
            GetResult::NotFound { .. } => Err(not_found(key)),
            GetResult::Found {
                mut values,
                context,
                ..
            } => {
                let ctx = context_header(&context);
                if values.len() == 1 {
                    let value = values.pop().unwrap_or_default();
                    Ok((
                        [
                            (
                                header::CONTENT_TYPE,
                                HeaderValue::from_static("application/octet-stream"),
                            ),
                            ctx,
                        ],
                        value,
                    )
                        .into_response())
                } else {
                    let body = json!({
                        "context": hex(&context),
                        "siblings": values.iter().map(|v| base64(v)).collect::<Vec<_>>(),
                    });
                    Ok((StatusCode::MULTIPLE_CHOICES, [ctx], axum::Json(body)).into_response())
                }
            }
        }
    })
    .await
}

pub(crate) async fn put_key(
    s: &HttpState,
    c: &ClusterBackend,
    key: &[u8],
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let props = props_of(uri, false)?;
    let ctx = context_of(headers)?;
    timed(&s.put, async {
        let opts = PutOptions {
            props,
            ..PutOptions::default()
        };
        let out = c
            .node
            .put(key, body, ctx.as_deref(), opts)
            .await
            .map_err(|e| repl(s, e))?;
        Ok((StatusCode::NO_CONTENT, [context_header(&out.context)]).into_response())
    })
    .await
}

pub(crate) async fn delete_key(
    s: &HttpState,
    c: &ClusterBackend,
    key: &[u8],
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let props = props_of(uri, false)?;
    let ctx = context_of(headers)?;
    timed(&s.delete, async {
        let ctx = match ctx {
            Some(ctx) => ctx,
            None => match c
                .node
                .get(key, GetOptions::default())
                .await
                .map_err(|e| repl(s, e))?
            {
                GetResult::NotFound { .. } => return Err(not_found(key)),
                found => found.context().to_vec(),
            },
        };
        let opts = PutOptions {
            props,
            ..PutOptions::default()
        };
        let out = c
            .node
            .delete(key, Some(&ctx), opts)
            .await
            .map_err(|e| repl(s, e))?;
        Ok((StatusCode::NO_CONTENT, [context_header(&out.context)]).into_response())
    })
    .await
}

fn backend(s: &HttpState, headers: &HeaderMap) -> Result<Arc<ClusterBackend>, ApiError> {
    authorize(&s.node, headers)?;
    s.node.cluster.clone().ok_or_else(not_cluster)
}

/// `GET /cluster`.
pub(crate) async fn cluster(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    Ok(axum::Json(c.describe()).into_response())
}

/// `GET /buckets`: every bucket this node knows, with its configured properties.
pub(crate) async fn buckets(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    let b = c.node.buckets();
    let map: serde_json::Map<String, serde_json::Value> = b
        .names()
        .filter_map(|n| Some((n.to_owned(), set_properties(b.get(n)?)?)))
        .collect();
    Ok(axum::Json(json!({ "buckets": map, "scope": "cluster" })).into_response())
}

/// A bucket's properties as JSON, without the unset ones (what is configured on it).
fn set_properties(props: &meridian_replication::BucketProps) -> Option<serde_json::Value> {
    let mut v = serde_json::to_value(props).ok()?;
    if let Some(map) = v.as_object_mut() {
        map.retain(|_, value| !value.is_null());
    }
    Some(v)
}

/// `PUT /buckets/{name}` with JSON `BucketProps`: validated by the claimant and published to
/// every member.
pub(crate) async fn put_bucket(
    State(s): State<Arc<HttpState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    let props: BucketProps = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_BUCKET_PROPS",
            format!("{e}; expected JSON bucket properties such as {{\"n_val\":3,\"r\":\"one\"}}"),
        )
    })?;
    c.node
        .set_bucket(&name, props)
        .await
        .map_err(|e| repl(&s, e))?;
    Ok(axum::Json(json!({ "bucket": name, "props": props, "scope": "cluster" })).into_response())
}

/// The body of `POST /cluster/members`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinRequest {
    id: u32,
    name: String,
    dc: String,
    peer: Option<std::net::SocketAddr>,
    resp: Option<std::net::SocketAddr>,
    http: Option<std::net::SocketAddr>,
}

/// The answer to a membership change: what changed and where the cluster is now.
fn changed(meta: &meridian_replication::ClusterMeta) -> Response {
    axum::Json(json!({
        "metadata_version": meta.version,
        "layout_epoch": meta.layout.epoch(),
        "members": meta.layout.topology().members().iter().map(|m| m.id.0).collect::<Vec<_>>(),
        "handoff": if meta.previous.is_some() { "running" } else { "none" },
    }))
    .into_response()
}

/// `POST /cluster/members`: admits a node (started with `join = true`) to the cluster.
pub(crate) async fn join(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    let r: JoinRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_MEMBER",
            format!(
                "{e}; expected {{\"id\": 7, \"name\": \"dc1-n3\", \"dc\": \"dc1\", \
                 \"peer\": \"127.0.0.9:7000\", \"resp\": ..., \"http\": ...}}"
            ),
        )
    })?;
    if r.id == 0 || r.name.is_empty() || r.dc.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_MEMBER",
            "id must be at least 1, name and dc must not be empty",
        ));
    }
    if r.peer.is_none() && c.node.meta().members.iter().any(|m| m.peer.is_some()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_MEMBER",
            "peer is required: the other members reach this cluster's nodes over TCP",
        ));
    }
    let record = MemberRecord {
        id: NodeId(r.id),
        name: r.name,
        // The claimant assigns the DC id from the name.
        dc: DcId(0),
        dc_name: r.dc,
        peer: r.peer,
        resp: r.resp,
        http: r.http,
    };
    let meta = c
        .node
        .change(MetaChange::Join(record))
        .await
        .map_err(|e| repl(&s, e))?;
    Ok(changed(&meta))
}

/// `DELETE /cluster/members/{id}`: removes a node; its data moves to the new owners.
pub(crate) async fn leave(
    State(s): State<Arc<HttpState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    let id: u32 = id.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_MEMBER",
            format!("'{id}' is not a node id (a positive number)"),
        )
    })?;
    let meta = c
        .node
        .change(MetaChange::Leave(NodeId(id)))
        .await
        .map_err(|e| repl(&s, e))?;
    Ok(changed(&meta))
}

fn wan_of(c: &ClusterBackend) -> Result<&WanControl, ApiError> {
    c.wan.as_ref().ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NO_WAN_EMULATOR",
            "this node does not run behind a WAN emulator",
        )
    })
}

fn wan_state(w: &WanControl) -> serde_json::Value {
    json!({ "config": w.config(), "stats": w.stats() })
}

/// `GET /wan`: the emulator's settings (links, partitions) and counters.
pub(crate) async fn wan(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    Ok(axum::Json(wan_state(wan_of(&c)?)).into_response())
}

/// A change to the WAN emulator. Link objects are merged into the current link (only the
/// fields given change).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct WanUpdate {
    inter_dc: Option<serde_json::Value>,
    intra_dc: Option<serde_json::Value>,
    mode: Option<DeliveryMode>,
    heal_all: bool,
    heal: Vec<Cut>,
    heal_both: Vec<(Scope, Scope)>,
    cut: Vec<Cut>,
    cut_both: Vec<(Scope, Scope)>,
}

fn merge_link(current: &LinkConfig, patch: serde_json::Value) -> Result<LinkConfig, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "BAD_WAN", m);
    let mut v = serde_json::to_value(current).map_err(|e| bad(e.to_string()))?;
    let (Some(obj), serde_json::Value::Object(p)) = (v.as_object_mut(), patch) else {
        return Err(bad("a link must be a JSON object".into()));
    };
    obj.extend(p);
    serde_json::from_value(v).map_err(|e| bad(format!("link: {e}")))
}

/// `PUT /wan`: changes links and partitions at run time; replies the new state.
pub(crate) async fn put_wan(
    State(s): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s, &headers)?;
    let w = wan_of(&c)?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "BAD_WAN", m);
    let u: WanUpdate = serde_json::from_slice(&body).map_err(|e| {
        bad(format!(
            "{e}; fields: inter_dc, intra_dc (link objects: rtt, jitter, loss, ...), mode, \
             cut, cut_both, heal, heal_both, heal_all"
        ))
    })?;
    let cfg = w.config();
    let inter = u
        .inter_dc
        .map(|p| merge_link(&cfg.inter_dc, p))
        .transpose()?;
    let intra = u
        .intra_dc
        .map(|p| merge_link(&cfg.intra_dc, p))
        .transpose()?;
    if let Some(l) = inter {
        w.set_inter_dc(l).map_err(|e| bad(e.to_string()))?;
    }
    if let Some(l) = intra {
        w.set_intra_dc(l).map_err(|e| bad(e.to_string()))?;
    }
    if let Some(m) = u.mode {
        w.set_mode(m);
    }
    if u.heal_all {
        w.heal_all();
    }
    for h in u.heal {
        w.heal(h.from, h.to);
    }
    for (a, b) in u.heal_both {
        w.heal_both(a, b);
    }
    for k in u.cut {
        w.cut(k.from, k.to);
    }
    for (a, b) in u.cut_both {
        w.cut_both(a, b);
    }
    Ok(axum::Json(wan_state(w)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(hex(b"\x00\xffa"), "00ff61");
        assert_eq!(unhex("00ff61").unwrap(), b"\x00\xffa");
        assert!(unhex("0").is_none() && unhex("zz").is_none());
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
