//! The HTTP API in cluster mode.
//!
//! - `GET /kv/{key}?r=&pr=&notfound_ok=&basic_quorum=&read_fanout=&hedge_ms=&replica_selection=&timeout_ms=` →
//!   200 with the value and `X-Meridian-Context: <hex>` when there is one value; `300 Multiple Choices` with JSON
//!   `{"context": "<hex>", "siblings": ["<base64>", ...]}` for siblings; 404 for notfound.
//! - `PUT /kv/{key}?w=&dw=&pw=&node_confirms=&dc_confirms=&timeout_ms=` (body = value,
//!   optional `X-Meridian-Context` request header; without it the write is blind and adds a
//!   sibling) → 204 with the new context in `X-Meridian-Context`.
//! - `DELETE /kv/{key}?...` with `X-Meridian-Context` → 204 with the tombstone's context;
//!   without the header the node reads the context first (404 if there is no value).
//! - Timeline buckets (`timeline.md` §2, §7):
//!   `GET /kv/{key}?read=any|latest|critical&version=<ver>` (or the spec's
//!   `req_version=any|latest|<ver>`; none: the bucket's default, `any`) → 200 with the value
//!   and `X-Meridian-Version` (`gen.mepoch.seq`, also as a quoted `ETag`) and
//!   `X-Meridian-Master` (`n3@dc1`); 404 when absent or deleted (a tombstone's version in
//!   the header). `PUT` → 204 with the new version; `If-Match: <ver>` makes it a
//!   test-and-set, `If-None-Match: *` an insert-if-absent (412 `VERSION_MISMATCH` /
//!   `ALREADY_EXISTS` with `current` in the body and `X-Meridian-Version`). `DELETE` (a
//!   tombstone write; `If-Match` too) → 204 with the tombstone's version, 404 when there is no
//!   value.
//! - Which of these applies is the dispatch facade's decision
//!   ([`meridian_replication::Dispatch`], one bucket-type read per request): this module
//!   parses the query string and headers into its options (read mode or quorum parameters;
//!   precondition or context and quorum parameters) and formats its results. Quorum
//!   parameters and contexts on timeline buckets, and read modes and preconditions on
//!   eventual ones, are refused by the facade (400 `WRONG_BUCKET_TYPE`), so a test-and-set is
//!   never silently a blind write; a precondition together with a context or quorum
//!   parameters is a 400 `BAD_QUERY` on either type.
//! - `POST /timeline/force-master` with `{"bucket":"b","key":"k","dc":"dc1"}`: forces the
//!   key's mastership to that DC (`tl_force_master`; may lose acknowledged writes, and the
//!   reply says so).
//! - Replication errors: mapped by [`crate::wire_error`] (400, 503 + `Retry-After`, 504, 412,
//!   413, 500 by error class), JSON errors whose `code` is the spec's code in upper case
//!   (`R_VAL_UNSATISFIED`, `TIMEOUT`, ...), with the timeline codes' flat fields (§7).
//! - `GET /cluster`; `POST /cluster/members` (JSON member record: `id`, `name`, `dc` name,
//!   `peer`, optional `resp`/`http`) admits a node; `DELETE /cluster/members/{id}` removes
//!   one; both go through the claimant and answer the new metadata version and layout epoch.
//! - `GET /buckets`, `PUT /buckets/{name}` (JSON `BucketProps`, validated by the claimant and
//!   applied to the whole cluster), `POST /buckets/{name}/truncate` (the bucket's values
//!   written before it are gone on every node, as `FLUSHALL` does to every bucket), `GET /wan`, `PUT /wan` (nodes behind a WAN emulator).
//! - Admin input is checked before anything changes, each refusal a 400 naming the field and
//!   its range: bucket, member and DC names against one alphabet ([`check_name`]:
//!   `[A-Za-z0-9_.-]{1,64}`, not starting with `.`); a join's DC must exist or be a new one
//!   whose name is not another DC's id; WAN link fields against their ranges
//!   (`LinkConfig::check`: `inter_dc.jitter = 1e308: must be a finite number between 0 and
//!   10`); partition rules against the members and DCs. A leave of a non-member is a 404
//!   `NO_SUCH_MEMBER`. Admin bodies are limited to 64 KiB (413 `BODY_TOO_LARGE`, at once when
//!   `Content-Length` says so; see `http::router`).
//! - Read load balancing (`load-balancing.md`): `replica_selection=<strategy>` on a GET
//!   chooses the replica of a read that needs one (eventual: with `r=1&read_fanout=quorum`;
//!   timeline: a `read_any`, alone or with `read=any`). `GET /balance`: this node's service
//!   model, read queue, counters, per-peer view (reads sent, share, outstanding, reported
//!   queue, scores) and the DC's extra-copy map (keys as lossy UTF-8 and hex).
//!   `PUT /balance/service-model` with `{"model":"fixed:30"}` (optionally `"node": <id>`, a
//!   node of the same process, i.e. any node of an embedded cluster) changes a node's
//!   service model at run time; a malformed body is a 400 `BAD_SERVICE_MODEL` naming the
//!   field, a body over 64 KiB a 413 `BODY_TOO_LARGE`.
//!
//! On a single node (no cluster) the cluster routes answer 404 `NOT_CLUSTER`.

use crate::cluster_backend::{ClusterBackend, apply_option};
use crate::http_common::{ApiError, HttpState, not_found};
use crate::metrics::OpStats;
use crate::wire_error;
pub use crate::wire_error::VERSION_HEADER;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use meridian_cluster::Props;
use meridian_core::{DcId, NodeId};
use meridian_net::wan::{Cut, DeliveryMode, LinkConfig, Scope, WanControl};
use meridian_replication::timeline::{Expect, Version};
use meridian_replication::{
    BucketProps, DEFAULT_BUCKET_NAME, DeleteOpts, Deleted, GetResult, MemberRecord, MetaChange,
    Read, ReadMode, ReadOpts, ReplicationError, WriteOpts, Written,
};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// The header carrying a causal context (hex).
pub const CONTEXT_HEADER: &str = "x-meridian-context";

/// The header naming a timeline record's master (`n3@dc1`).
pub const MASTER_HEADER: &str = "x-meridian-master";

/// The HTTP answer to a replication error ([`wire_error`]), counted in
/// `meridian_replication_errors_total{frontend="http",code=...}`.
pub(crate) fn repl(s: &HttpState, c: &ClusterBackend, e: ReplicationError) -> ApiError {
    wire_error::http(c, &s.node.metrics, &e)
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
    hex::encode(b)
}

/// Hex of either case; `None` on an odd length or a non-hex digit.
fn unhex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

/// Standard base64 with padding.
pub fn base64(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The request's quorum parameters from the query string.
fn props_of(uri: &Uri, reads: bool) -> Result<Props, ApiError> {
    let mut props = Props::default();
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = crate::percent::decode(value.as_bytes())
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

/// The read options of a GET's query string: timeline parameters (`read`, `version`,
/// `req_version`) make a read mode, anything else quorum parameters; the facade refuses the
/// kind the key's bucket does not take.
///
/// `replica_selection` goes with either: with `read=any` (or `req_version=any`) it is the
/// `read_any`'s strategy on a timeline bucket (`is_timeline` says whether the key's bucket is
/// one; on another type the read mode is passed on for the facade to refuse).
fn read_opts(uri: &Uri) -> Result<ReadOpts, ApiError> {
    let q = TlQuery::parse(uri)?;
    if q.names_timeline() {
        let mode = q.mode()?;
        match (&q.selection, mode) {
            (None, mode) => Ok(ReadOpts::Mode(mode)),
            // The facade reads it as a `read_any` with that strategy on a timeline bucket,
            // and refuses the read mode on another bucket type.
            (Some(_), ReadMode::Any) => {
                let mut props = Props::default();
                let value = q.selection.as_deref().unwrap_or_default();
                apply_option(&mut props, b"replica_selection", value.as_bytes(), true)
                    .map_err(bad_query)?;
                Ok(ReadOpts::AnyWith(props))
            }
            (Some(_), _) => Err(bad_query(
                "replica_selection goes with read=any (a read_any asks one replica; latest \
                 and critical reads go to the master or check a version)"
                    .into(),
            )),
        }
    } else if q.other.is_empty() && q.selection.is_none() {
        Ok(ReadOpts::Default)
    } else {
        Ok(ReadOpts::Quorum(props_of(uri, true)?))
    }
}

/// What a write's headers and query string ask for: a precondition (`If-Match`,
/// `If-None-Match`: timeline), a context or quorum parameters (eventual), or neither.
enum WriteParams {
    None,
    Eventual(Option<Vec<u8>>, Props),
    Timeline(Expect),
}

fn write_params(uri: &Uri, headers: &HeaderMap) -> Result<WriteParams, ApiError> {
    let expect = precondition_of(headers)?;
    let query = uri.query().filter(|q| !q.is_empty());
    let ctx = context_of(headers)?;
    if expect != Expect::Any {
        if query.is_some() || headers.contains_key(CONTEXT_HEADER) {
            return Err(bad_query(
                "give either a precondition (If-Match / If-None-Match, timeline buckets) or a \
                 context and quorum parameters (eventual buckets), not both"
                    .into(),
            ));
        }
        return Ok(WriteParams::Timeline(expect));
    }
    if query.is_none() && ctx.is_none() {
        return Ok(WriteParams::None);
    }
    Ok(WriteParams::Eventual(ctx, props_of(uri, false)?))
}

pub(crate) async fn get_key(
    s: &HttpState,
    c: &ClusterBackend,
    key: &[u8],
    uri: &Uri,
) -> Result<Response, ApiError> {
    let opts = read_opts(uri)?;
    timed(&s.get, async {
        match c
            .dispatch
            .read(key, opts)
            .await
            .map_err(|e| repl(s, c, e))?
        {
            Read::Eventual(GetResult::NotFound { .. }) => Err(not_found(key)),
            Read::Eventual(GetResult::Found {
                mut values,
                context,
                ..
            }) => {
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
            Read::Timeline(got) => match got.record {
                Some(r) if !r.is_tombstone() => {
                    let value = r.content.value().cloned().unwrap_or_default();
                    let [a, b, m] = record_headers(&r);
                    Ok((
                        [
                            (
                                header::CONTENT_TYPE,
                                HeaderValue::from_static("application/octet-stream"),
                            ),
                            a,
                            b,
                            m,
                        ],
                        value,
                    )
                        .into_response())
                }
                Some(tombstone) => {
                    let (name, value) = version_header(tombstone.ver);
                    Err(not_found(key)
                        .with_field("version", tombstone.ver.to_string().into())
                        .with_header(name, value))
                }
                None => Err(not_found(key)),
            },
            Read::Transactional { value: None, .. } => Err(not_found(key)),
            Read::Transactional {
                value: Some(value),
                ts,
            } => Ok((
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/octet-stream"),
                    ),
                    commit_ts_header(ts.unwrap_or_default()),
                ],
                value,
            )
                .into_response()),
        }
    })
    .await
}

/// The header carrying a transactional write's commit timestamp (µs).
pub(crate) const COMMIT_TS_HEADER: &str = "x-meridian-commit-ts";

fn commit_ts_header(ts: meridian_core::Timestamp) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(COMMIT_TS_HEADER),
        HeaderValue::from(ts.0),
    )
}

pub(crate) async fn put_key(
    s: &HttpState,
    c: &ClusterBackend,
    key: &[u8],
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = write_params(uri, headers)?;
    timed(&s.put, async {
        let opts = match &params {
            WriteParams::None => WriteOpts::Default,
            WriteParams::Eventual(ctx, props) => WriteOpts::Eventual {
                context: ctx.as_deref(),
                props: *props,
            },
            WriteParams::Timeline(expect) => WriteOpts::Timeline(*expect),
        };
        match c
            .dispatch
            .write(key, body, opts)
            .await
            .map_err(|e| repl(s, c, e))?
        {
            Written::Eventual(out) => {
                Ok((StatusCode::NO_CONTENT, [context_header(&out.context)]).into_response())
            }
            Written::Timeline(w) => {
                Ok((StatusCode::NO_CONTENT, record_headers(&w.record)).into_response())
            }
            Written::Transactional(ts) => {
                Ok((StatusCode::NO_CONTENT, [commit_ts_header(ts)]).into_response())
            }
        }
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
    let params = write_params(uri, headers)?;
    timed(&s.delete, async {
        let opts = match &params {
            WriteParams::None => DeleteOpts::Plain,
            WriteParams::Eventual(ctx, props) => DeleteOpts::Eventual {
                context: ctx.as_deref(),
                props: *props,
            },
            WriteParams::Timeline(expect) => DeleteOpts::Timeline(*expect),
        };
        match c
            .dispatch
            .delete(key, opts)
            .await
            .map_err(|e| repl(s, c, e))?
        {
            // Nothing to delete: 404, on either bucket type.
            Deleted::Nothing => Err(not_found(key)),
            Deleted::Eventual(out) => {
                Ok((StatusCode::NO_CONTENT, [context_header(&out.context)]).into_response())
            }
            Deleted::Timeline(w) => {
                Ok((StatusCode::NO_CONTENT, record_headers(&w.record)).into_response())
            }
            Deleted::Transactional(ts) => {
                Ok((StatusCode::NO_CONTENT, [commit_ts_header(ts)]).into_response())
            }
        }
    })
    .await
}

// ----- timeline buckets -------------------------------------------------------------------

fn version_header(v: Version) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(VERSION_HEADER),
        HeaderValue::from_str(&v.to_string()).expect("a version is a valid header value"),
    )
}

/// The headers of a timeline record: its version (also as a strong `ETag`, so generic HTTP
/// clients can send it back in `If-Match`) and its master.
fn record_headers(r: &meridian_replication::timeline::Record) -> [(HeaderName, HeaderValue); 3] {
    let v = r.ver.to_string();
    [
        version_header(r.ver),
        (
            header::ETAG,
            HeaderValue::from_str(&format!("\"{v}\"")).expect("a quoted version is valid"),
        ),
        (
            HeaderName::from_static(MASTER_HEADER),
            HeaderValue::from_str(&r.master.to_string()).expect("n3@dc1 is a valid header"),
        ),
    ]
}

fn bad_version(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "BAD_VERSION", e.to_string())
}

/// A version as a header or parameter gives it: `gen.mepoch.seq`, optionally quoted as an
/// entity tag (`"1.0.3"`, `W/"1.0.3"`).
fn parse_version(text: &str) -> Result<Version, ApiError> {
    let t = text.trim();
    let t = t.strip_prefix("W/").unwrap_or(t);
    let t = t
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(t);
    t.parse::<Version>().map_err(bad_version)
}

/// The timeline parameters of a GET's query string; anything else is kept to refuse.
#[derive(Debug, Default)]
struct TlQuery {
    read: Option<String>,
    version: Option<String>,
    req_version: Option<String>,
    /// `replica_selection` (an eventual read's option, or a timeline `read_any`'s).
    selection: Option<String>,
    /// Other parameters (quorum options), by name.
    other: Vec<String>,
}

impl TlQuery {
    fn parse(uri: &Uri) -> Result<TlQuery, ApiError> {
        let mut q = TlQuery::default();
        for pair in uri.query().unwrap_or_default().split('&') {
            if pair.is_empty() {
                continue;
            }
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = crate::percent::decode(value.as_bytes())
                .and_then(|v| String::from_utf8(v).ok())
                .ok_or_else(|| bad_query(format!("malformed %-escape in '{pair}'")));
            match name.to_ascii_lowercase().as_str() {
                "read" => q.read = Some(decoded?),
                "version" => q.version = Some(decoded?),
                "req_version" => q.req_version = Some(decoded?),
                "replica_selection" => q.selection = Some(decoded?),
                _ => q.other.push(name.to_owned()),
            }
        }
        Ok(q)
    }

    fn names_timeline(&self) -> bool {
        self.read.is_some() || self.version.is_some() || self.req_version.is_some()
    }

    /// The read mode: `req_version=any|latest|<ver>`, or `read=any|latest|critical` with
    /// `version=<ver>` (a version alone means critical); neither is `any`, the default mode
    /// of timeline buckets.
    fn mode(&self) -> Result<ReadMode, ApiError> {
        if let Some(other) = self.other.first() {
            return Err(bad_query(format!(
                "parameter '{other}' does not go with a read mode: timeline reads take \
                 read=any|latest|critical with version=<gen.mepoch.seq>, or \
                 req_version=any|latest|<version> (quorum parameters are for eventual buckets)"
            )));
        }
        if let Some(rv) = &self.req_version {
            if self.read.is_some() || self.version.is_some() {
                return Err(bad_query(
                    "give either req_version or read/version, not both".into(),
                ));
            }
            return Ok(match rv.to_ascii_lowercase().as_str() {
                "any" => ReadMode::Any,
                "latest" => ReadMode::Latest,
                _ => ReadMode::Critical(parse_version(rv)?),
            });
        }
        let read = self.read.as_deref().map(str::to_ascii_lowercase);
        match (read.as_deref(), &self.version) {
            (None | Some("any"), None) => Ok(ReadMode::Any),
            (Some("latest"), None) => Ok(ReadMode::Latest),
            (None | Some("critical"), Some(v)) => Ok(ReadMode::Critical(parse_version(v)?)),
            (Some("critical"), None) => Err(bad_query(
                "read=critical needs version=<gen.mepoch.seq>: the version the read must reach"
                    .into(),
            )),
            (Some("any" | "latest"), Some(_)) => Err(bad_query(
                "version=<ver> goes with read=critical (or alone), not with read=any or latest"
                    .into(),
            )),
            (Some(other), _) => Err(bad_query(format!(
                "invalid read '{other}': expected any, latest or critical"
            ))),
        }
    }
}

/// The precondition a write's headers give: `If-Match: <ver>` (test-and-set) or
/// `If-None-Match: *` (insert-if-absent).
fn precondition_of(headers: &HeaderMap) -> Result<Expect, ApiError> {
    let bad = |m: &str| ApiError::new(StatusCode::BAD_REQUEST, "BAD_PRECONDITION", m);
    let text = |name: header::HeaderName| -> Result<Option<&str>, ApiError> {
        headers
            .get(&name)
            .map(|v| v.to_str().map_err(|_| bad("the precondition is not text")))
            .transpose()
    };
    match (text(header::IF_MATCH)?, text(header::IF_NONE_MATCH)?) {
        (None, None) => Ok(Expect::Any),
        (Some(_), Some(_)) => Err(bad("give either If-Match or If-None-Match, not both")),
        (Some(v), None) if v.trim() == "*" => Err(bad(
            "If-Match: * is not supported: give the version a read returned (X-Meridian-Version)",
        )),
        (Some(v), None) => Ok(Expect::Version(parse_version(v)?)),
        (None, Some(v)) if v.trim() == "*" => Ok(Expect::Absent),
        (None, Some(_)) => Err(bad(
            "If-None-Match takes only * (insert if absent); use If-Match for a version",
        )),
    }
}

/// The body of `POST /timeline/force-master`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForceMaster {
    /// The key's bucket; without it `key` is the full key (`bucket:rest`).
    bucket: Option<String>,
    key: String,
    /// A DC name (`dc1`, `east`) or id (`1`).
    dc: serde_json::Value,
}

/// What `POST /timeline/force-master` warns of, in every reply.
const FORCE_WARNING: &str = "a forced re-master may lose acknowledged writes: whatever the old \
                             master had not propagated to the new one is discarded when the \
                             old master returns";

/// The full key of `key` in `bucket` (the inverse of `bucket_and_key`: a key of the default
/// bucket without `:` is its own full key).
fn full_key(bucket: Option<&str>, key: &str) -> String {
    match bucket {
        None => key.to_owned(),
        Some(b) if b == DEFAULT_BUCKET_NAME && !key.contains(':') => key.to_owned(),
        Some(b) => format!("{b}:{key}"),
    }
}

/// `POST /timeline/force-master`: forces the mastership of a timeline key to a DC
/// (`timeline.md` §7). This may lose acknowledged writes; the reply repeats the warning.
pub(crate) async fn force_master(
    State(s): State<Arc<HttpState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "BAD_FORCE_MASTER", m);
    let r: ForceMaster = serde_json::from_slice(&body).map_err(|e| {
        bad(format!(
            "{e}; expected {{\"bucket\": \"b\", \"key\": \"k\", \"dc\": \"dc1\"}}"
        ))
    })?;
    if r.key.is_empty() {
        return Err(bad("key must not be empty".into()));
    }
    if let Some(b) = &r.bucket {
        check_name("bucket", b).map_err(bad)?;
    }
    let dc_text = match &r.dc {
        serde_json::Value::String(t) => t.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        other => return Err(bad(format!("dc must be a DC name or id, not {other}"))),
    };
    let dc = c.resolve_dc(&dc_text).ok_or_else(|| {
        let mut names: Vec<String> = c
            .node
            .meta()
            .members
            .iter()
            .map(|m| m.dc_name.clone())
            .collect();
        names.sort();
        names.dedup();
        bad(format!(
            "no member is in DC '{dc_text}'; the DCs are {}",
            names.join(", ")
        ))
    })?;
    let key = full_key(r.bucket.as_deref(), &r.key);
    let w = c
        .node
        .tl_force_master(key.as_bytes(), dc)
        .await
        .map_err(|e| repl(&s, &c, e))?;
    tracing::warn!(%key, dc = %c.dc_name(dc), version = %w.record.ver, master = %w.record.master,
        "forced re-master (acknowledged writes of the old master may be lost)");
    Ok(axum::Json(json!({
        "key": key,
        "dc": c.dc_name(dc),
        "version": w.record.ver.to_string(),
        "master": {
            "node": w.record.master.node.0,
            "dc": c.dc_name(w.record.master.dc),
        },
        "warning": FORCE_WARNING,
    }))
    .into_response())
}

pub(crate) fn backend(s: &HttpState) -> Result<Arc<ClusterBackend>, ApiError> {
    s.node.cluster.clone().ok_or_else(not_cluster)
}

/// `GET /cluster`.
pub(crate) async fn cluster(State(s): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    Ok(axum::Json(c.describe()).into_response())
}

/// `GET /buckets`: every bucket this node knows, with its configured properties.
pub(crate) async fn buckets(State(s): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let c = backend(&s)?;
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
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    check_bucket_name(&name)?;
    let mut props: BucketProps = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_BUCKET_PROPS",
            format!("{e}; expected JSON bucket properties such as {{\"n_val\":3,\"r\":\"one\"}}"),
        )
    })?;
    // An S3 bucket stays one (its objects stay behind the S3 keys) unless `s3` is set.
    if props.s3.is_none() && c.node.is_s3_bucket(name.as_bytes()) {
        props.s3 = Some(true);
    }
    c.node
        .set_bucket(&name, props)
        .await
        .map_err(|e| repl(&s, &c, e))?;
    Ok(axum::Json(json!({ "bucket": name, "props": props, "scope": "cluster" })).into_response())
}

/// `POST /buckets/{name}/truncate`: every value of the bucket written before now is gone on
/// every node (`meridian_replication::truncation`; `FLUSHALL` truncates every bucket). Answers
/// the mark (microseconds); an unknown bucket is refused.
pub(crate) async fn truncate_bucket(
    State(s): State<Arc<HttpState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    check_bucket_name(&name)?;
    let mark = c
        .node
        .truncate(Some(vec![name.clone()]))
        .await
        .map_err(|e| repl(&s, &c, e))?;
    Ok(
        axum::Json(json!({ "bucket": name, "truncated_at_us": mark, "scope": "cluster" }))
            .into_response(),
    )
}

/// A bucket name from an admin route's path, checked ([`check_name`]): 400 `BAD_BUCKET_NAME`.
fn check_bucket_name(name: &str) -> Result<(), ApiError> {
    check_name("bucket", name)
        .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "BAD_BUCKET_NAME", m))
}

/// The longest bucket, node or DC name the admin API accepts.
pub(crate) const NAME_MAX: usize = 64;

/// Checks a name the admin API stores and echoes (a bucket, a member's or a DC's name): 1 to
/// [`NAME_MAX`] characters of `A-Z a-z 0-9 _ . -`, not starting with `.` — so no path
/// separators (`../etc`), no `:` (which splits a key into bucket and rest), no spaces or
/// control characters. The error names `field`, the value (escaped, shortened) and the rule.
pub(crate) fn check_name(field: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        return Ok(());
    }
    let shown: String = name.chars().take(NAME_MAX + 1).collect();
    Err(format!(
        "{field} = {shown:?}{}: must be 1 to {NAME_MAX} characters of A-Z a-z 0-9 _ . - \
         not starting with '.'",
        if shown.len() < name.len() { "..." } else { "" }
    ))
}

/// The DC a join names, as the claimant will store it: an existing DC by name or id (`dc1`,
/// `1`), or a new DC — a valid name ([`check_name`]) that does not look like the id of a DC
/// other than the next one (`dc99` in a cluster of `dc0`, `dc1` is refused: the new DC would
/// get id 2, and `dc99` would then name two different DCs).
fn join_dc(meta: &meridian_replication::ClusterMeta, dc: &str) -> Result<String, String> {
    let dc = dc.trim();
    if let Some(m) = meta.members.iter().find(|m| m.dc_name == dc) {
        return Ok(m.dc_name.clone());
    }
    let as_id = dc
        .strip_prefix("dc")
        .unwrap_or(dc)
        .parse::<u32>()
        .ok()
        .filter(|_| !dc.is_empty());
    if let Some(id) = as_id
        && let Some(m) = meta.members.iter().find(|m| m.dc.0 == id)
    {
        return Ok(m.dc_name.clone());
    }
    check_name("dc", dc)?;
    let next = meta.members.iter().map(|m| m.dc.0 + 1).max().unwrap_or(0);
    if let Some(id) = as_id
        && id != next
    {
        let mut names: Vec<&str> = meta.members.iter().map(|m| m.dc_name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        return Err(format!(
            "dc = {dc:?}: no such DC (DCs: {}); a join may open only the next DC (id {next}) or \
             one whose name is not a DC id",
            names.join(", ")
        ));
    }
    Ok(dc.to_owned())
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
    /// Its RESP-over-TLS address, named to clients connected over TLS.
    #[serde(default)]
    resp_tls: Option<std::net::SocketAddr>,
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
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    let r: JoinRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_MEMBER",
            format!(
                "{e}; expected {{\"id\": 7, \"name\": \"dc1-n3\", \"dc\": \"dc1\", \
                 \"peer\": \"127.0.0.9:7000\", \"resp\": ..., \"http\": ..., \"resp_tls\": ...}}"
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
    let bad_member = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "BAD_MEMBER", m);
    check_name("name", &r.name).map_err(bad_member)?;
    if r.resp_tls
        .is_some_and(|a| a.port() == 0 || a.ip().is_unspecified())
    {
        // Clients would be sent to it: it must be an address they can connect to.
        return Err(bad_member(
            "resp_tls must be a connectable address (not port 0 or 0.0.0.0)".into(),
        ));
    }
    let dc_name = join_dc(&c.node.meta(), &r.dc).map_err(bad_member)?;
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
        dc_name,
        peer: r.peer,
        resp: r.resp,
        http: r.http,
        resp_tls: r.resp_tls,
    };
    let meta = c
        .node
        .change(MetaChange::Join(record))
        .await
        .map_err(|e| repl(&s, &c, e))?;
    Ok(changed(&meta))
}

/// `DELETE /cluster/members/{id}`: removes a node; its data moves to the new owners.
pub(crate) async fn leave(
    State(s): State<Arc<HttpState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
    let id: u32 = id.parse().map_err(|_| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "BAD_MEMBER",
            format!("'{id}' is not a node id (a positive number)"),
        )
    })?;
    let current = c.node.meta();
    if !current.layout.topology().contains(NodeId(id)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "NO_SUCH_MEMBER",
            format!(
                "node {id} is not a member (members: {})",
                member_ids(&current)
            ),
        ));
    }
    drop(current);
    let meta = c
        .node
        .change(MetaChange::Leave(NodeId(id)))
        .await
        .map_err(|e| repl(&s, &c, e))?;
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
pub(crate) async fn wan(State(s): State<Arc<HttpState>>) -> Result<Response, ApiError> {
    let c = backend(&s)?;
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

/// `current` with the fields of `patch` (a JSON object) replaced, every field checked
/// against its range ([`LinkConfig::check`]); errors name the field as `{path}.{field}`.
fn merge_link(
    path: &str,
    current: &LinkConfig,
    patch: serde_json::Value,
) -> Result<LinkConfig, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "BAD_WAN", m);
    let mut v = serde_json::to_value(current).map_err(|e| bad(format!("{path}: {e}")))?;
    let (Some(obj), serde_json::Value::Object(p)) = (v.as_object_mut(), patch) else {
        return Err(bad(format!(
            "{path} must be a JSON object of link fields (rtt, jitter, loss, duplicate, \
             reorder, bandwidth_bytes_per_sec)"
        )));
    };
    let fields: Vec<String> = p.keys().cloned().collect();
    obj.extend(p);
    let link: LinkConfig = serde_json::from_value(v)
        .map_err(|e| bad(format!("{path} ({}): {e}", fields.join(", "))))?;
    link.check(path).map_err(|e| bad(config_message(e)))?;
    Ok(link)
}

/// The message of a [`meridian_net::NetError::Config`] without its generic prefix.
fn config_message(e: meridian_net::NetError) -> String {
    match e {
        meridian_net::NetError::Config(m) => m,
        other => other.to_string(),
    }
}

/// Checks that every scope of `PUT /wan`'s partition lists names a DC or a node of the
/// cluster (`cut[0].from.dc = 99: no such DC (DCs: 0, 1)`).
fn check_scopes(
    meta: &meridian_replication::ClusterMeta,
    scopes: &[(String, Scope)],
) -> Result<(), String> {
    for (path, scope) in scopes {
        match *scope {
            Scope::Any => {}
            Scope::Dc(d) => {
                if !meta.members.iter().any(|m| m.dc == d) {
                    let mut dcs: Vec<u32> = meta.members.iter().map(|m| m.dc.0).collect();
                    dcs.sort_unstable();
                    dcs.dedup();
                    let dcs: Vec<String> = dcs.iter().map(u32::to_string).collect();
                    return Err(format!(
                        "{path}.dc = {}: no such DC (DC ids: {})",
                        d.0,
                        dcs.join(", ")
                    ));
                }
            }
            Scope::Node(n) => {
                if !meta.members.iter().any(|m| m.id == n) {
                    return Err(format!(
                        "{path}.node = {}: not a member (members: {})",
                        n.0,
                        member_ids(meta)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The members' ids, comma-separated (for error messages).
fn member_ids(meta: &meridian_replication::ClusterMeta) -> String {
    meta.members
        .iter()
        .map(|m| m.id.0.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `PUT /wan`: changes links and partitions at run time; replies the new state.
pub(crate) async fn put_wan(
    State(s): State<Arc<HttpState>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let c = backend(&s)?;
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
        .map(|p| merge_link("inter_dc", &cfg.inter_dc, p))
        .transpose()?;
    let intra = u
        .intra_dc
        .map(|p| merge_link("intra_dc", &cfg.intra_dc, p))
        .transpose()?;
    // Every partition rule names a DC or node of the cluster (a typo would cut nothing, or
    // a later member, silently). Checked before anything changes: a refused update changes
    // nothing.
    let mut scopes: Vec<(String, Scope)> = Vec::new();
    for (name, list) in [("cut", &u.cut), ("heal", &u.heal)] {
        for (i, k) in list.iter().enumerate() {
            scopes.push((format!("{name}[{i}].from"), k.from));
            scopes.push((format!("{name}[{i}].to"), k.to));
        }
    }
    for (name, list) in [("cut_both", &u.cut_both), ("heal_both", &u.heal_both)] {
        for (i, (x, y)) in list.iter().enumerate() {
            scopes.push((format!("{name}[{i}][0]"), *x));
            scopes.push((format!("{name}[{i}][1]"), *y));
        }
    }
    check_scopes(&c.node.meta(), &scopes).map_err(bad)?;
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
    fn full_keys_invert_bucket_and_key() {
        assert_eq!(full_key(Some("tl"), "k"), "tl:k");
        assert_eq!(full_key(Some("default"), "k"), "k");
        assert_eq!(full_key(Some("default"), "a:b"), "default:a:b");
        assert_eq!(full_key(None, "tl:k"), "tl:k");
        for (b, k) in [
            ("tl", "k"),
            ("default", "k"),
            ("default", "a:b"),
            ("x", "y:z"),
        ] {
            let full = full_key(Some(b), k);
            assert_eq!(
                meridian_cluster::bucket_and_key(full.as_bytes()),
                (b.as_bytes(), k.as_bytes())
            );
        }
    }

    #[test]
    fn versions_parse_bare_or_as_entity_tags() {
        let v = Version::new(17, 1, 3);
        for text in ["17.1.3", "\"17.1.3\"", " W/\"17.1.3\" "] {
            assert_eq!(parse_version(text).unwrap(), v, "{text}");
        }
        for text in ["17.1", "a.b.c", "\"17.1.3", "-1.0.0"] {
            let e = parse_version(text).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{text}");
        }
    }

    #[test]
    fn read_modes_from_the_query() {
        let mode = |q: &str| {
            let uri: Uri = format!("/kv/k?{q}").parse().unwrap();
            TlQuery::parse(&uri).unwrap().mode()
        };
        let v = Version::new(5, 0, 2);
        assert_eq!(mode("").unwrap(), ReadMode::Any);
        assert_eq!(mode("read=ANY").unwrap(), ReadMode::Any);
        assert_eq!(mode("read=latest").unwrap(), ReadMode::Latest);
        assert_eq!(
            mode("read=critical&version=5.0.2").unwrap(),
            ReadMode::Critical(v)
        );
        assert_eq!(mode("version=5.0.2").unwrap(), ReadMode::Critical(v));
        assert_eq!(mode("req_version=latest").unwrap(), ReadMode::Latest);
        assert_eq!(mode("req_version=any").unwrap(), ReadMode::Any);
        assert_eq!(mode("req_version=5.0.2").unwrap(), ReadMode::Critical(v));
        for bad in [
            "read=critical",
            "read=latest&version=5.0.2",
            "read=newest",
            "req_version=latest&read=any",
            "read=critical&version=5.0",
            "r=2",
        ] {
            assert_eq!(
                mode(bad).unwrap_err().status,
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
    }

    #[test]
    fn names_are_checked_against_one_alphabet() {
        for ok in [
            "default",
            "tl",
            "users_v2",
            "a.b-c",
            "dc1",
            "X",
            &"n".repeat(NAME_MAX),
        ] {
            assert_eq!(check_name("bucket", ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "../etc",
            ".hidden",
            "a/b",
            "a:b",
            "a b",
            "tab\there",
            "nul\0",
            "é",
            &"n".repeat(NAME_MAX + 1),
        ] {
            let e = check_name("bucket", bad).unwrap_err();
            assert!(e.starts_with("bucket = \""), "{e}");
            assert!(
                e.ends_with(
                    "must be 1 to 64 characters of A-Z a-z 0-9 _ . - not starting with '.'"
                ),
                "{e}"
            );
        }
        let e = check_name("bucket", "../etc").unwrap_err();
        assert!(e.starts_with("bucket = \"../etc\": must be"), "{e}");
        // A huge name is shown shortened, control characters escaped.
        let e = check_name("name", &format!("\n{}", "x".repeat(10_000))).unwrap_err();
        assert!(
            e.len() < 300 && e.contains("\\n") && e.contains("..."),
            "{e}"
        );
    }

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
