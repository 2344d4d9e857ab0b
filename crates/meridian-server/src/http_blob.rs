//! Large objects over the HTTP API (spec `large-objects.md` §4–5): `/b/{bucket}/{key}`,
//! served by the node's object service ([`crate::objects`]) on a single node and in cluster
//! mode alike, in the same key space as the S3 endpoint (object `K` of bucket `B` is the key
//! `B:K`, so an object put through S3 is readable here and the other way round).
//!
//! | request | reply |
//! |---|---|
//! | `PUT /b/{bucket}/{key}`, body = the object | 200 `{"size":N,"etag":"\"…\"","blake3":"hex"}`, `ETag` (the service's S3 ETag, quoted), `Content-Digest: blake3=:…:` |
//! | `GET /b/{bucket}/{key}` | 200 the object, `Content-Length`, `Content-Type`, `ETag`, `Accept-Ranges: bytes`, `Content-Digest: blake3=:…:`; one `Range: bytes=…` → 206 + `Content-Range` (no `Content-Digest`); unsatisfiable → 416 `BAD_RANGE` + `Content-Range: bytes */SIZE`; 404 `NOT_FOUND` |
//! | `HEAD /b/{bucket}/{key}` | the GET's status and headers, no body (no chunk is read) |
//! | `DELETE /b/{bucket}/{key}` | 204, also when there was no such object (idempotent, as S3's DeleteObject: the service does not say whether it existed, and asking first would cost a read) |
//! | `POST /b/{bucket}/{key}?uploads` | 200 `{"upload_id":"…","chunk_size":N}`: opens a resumable upload; its `Content-Type` becomes the object's |
//! | `PUT /b/{bucket}/{key}?upload_id=ID`, `Content-Range: bytes A-B/TOTAL`, body = bytes `A..=B` | 200 `{"offset":A,"size":N,"etag":"\"…\""}` + `ETag`: one part stored (a part sent again replaces it) |
//! | `GET /b/{bucket}/{key}?upload_id=ID[&from=OFFSET][&max_parts=N]` | 200 `{"upload_id","chunk_size","received_prefix":P,"parts":[{"offset","size","etag"}…],"truncated":bool[,"next_from":OFFSET]}` |
//! | `POST /b/{bucket}/{key}?upload_id=ID&size=TOTAL` | completes: the object is committed; the whole PUT's reply |
//! | `DELETE /b/{bucket}/{key}?upload_id=ID` | 204: aborts (the parts are dropped) |
//!
//! - **Upload.** The body streams into the service (Content-Length or chunked); it is never
//!   held whole: the `/kv` body limit does not apply, `blob.max_object` does (413
//!   `OBJECT_TOO_LARGE`). `Content-Type` (at most 256 bytes) is stored and served back
//!   (`application/octet-stream` when absent). An optional `Content-Digest` (RFC 9530) with
//!   `sha-256=:BASE64:` and/or `blake3=:BASE64:` (ours, not IANA-registered) is checked over
//!   the whole body before the manifest is written: a mismatch is 400 `DIGEST_MISMATCH` and
//!   nothing is committed (the old object stays). Other algorithms are ignored; a header that
//!   is not a dictionary of `alg=:base64:` members, or a known algorithm with a value that is
//!   not a 32-byte base64 byte sequence, is 400 `BAD_CONTENT_DIGEST`. A body that ends early
//!   (the client went away) is 400 `INCOMPLETE_BODY`, nothing committed. A PUT with
//!   `Content-Range` but no `?upload_id=` is refused with 400 `CONTENT_RANGE_UNSUPPORTED`
//!   (RFC 9110 §14.5) rather than stored as the whole object.
//! - **Resumable, parallel uploads** (spec §4 "Resumable", "Parallel streams") are the object
//!   service's multipart uploads, their parts named by byte range: `POST ?uploads` opens
//!   one; each `PUT ?upload_id=` carries `Content-Range: bytes A-B/TOTAL` (numeric `TOTAL`,
//!   at most `blob.max_object`, else 413 `OBJECT_TOO_LARGE`) and exactly `B-A+1` bytes. `A`
//!   is a multiple of `chunk_size`, and `B+1` too unless it is `TOTAL` (else 400
//!   `MISALIGNED_RANGE` naming the chunk size); a malformed header, `A > B` or `B ≥ TOTAL`
//!   is 400 `BAD_CONTENT_RANGE`. Parts go on separate connections (the streams), in any
//!   order; one sent again for the same `A` replaces the earlier (the last one wins). A
//!   body of another length is 400 `INCOMPLETE_BODY` (short) or `BODY_LENGTH_MISMATCH`
//!   (long, or a `Content-Length` that differs), and `Content-Digest` is checked over the
//!   part as over a whole PUT: a failed part is not recorded. The part starting at `A` is
//!   part `A / chunk_size + 1` of the upload. `GET ?upload_id=` lists the parts from byte
//!   `from` (default 0) in byte order, at most `max_parts` (1..=10000, default 10000;
//!   `next_from` pages on), and `received_prefix`, the bytes held contiguously from 0:
//!   where a client resumes. `POST ?upload_id=&size=` completes: the parts must cover
//!   `0..size` exactly, contiguous and without overlap (else 400 `INVALID_PARTS` naming the
//!   first gap or overlap, and nothing is committed: the old object stays); the object is
//!   then read back for its digests (its ETag is a single PUT's of the same bytes) and its
//!   manifest written last. An unknown id, or one of another object, is 404
//!   `NO_SUCH_UPLOAD`. Parts and completions pass admission control like other transfers.
//! - **Names.** `{bucket}` and `{key}` are percent-decoded. The bucket follows the admin API's
//!   name rule (1 to 64 of `A-Z a-z 0-9 _ . -`, not starting with `.`: every S3 bucket name
//!   and every cluster bucket name), else 400 `BAD_BUCKET_NAME`; the key is 1 to 1024 bytes
//!   of UTF-8 (as S3 keys are, so no key reaches the multipart records at `B:\xff…`), else
//!   400 `EMPTY_KEY`, `KEY_TOO_LONG`, `BAD_KEY_ENCODING`. The bucket need not exist as an S3
//!   bucket; in cluster mode the object's manifest follows the cluster bucket's settings
//!   (an unregistered bucket uses `default`'s).
//! - **Errors** are the API's JSON errors: `TOO_MANY_TRANSFERS` (503 + `Retry-After`, with
//!   the admission figures), replication errors as [`crate::wire_error`] maps them,
//!   `STORAGE_ERROR` / `CORRUPT_OBJECT` (500). A download that fails after its headers were
//!   sent ends the connection early (a body short of its `Content-Length`). With a
//!   `requirepass`, every request needs `Authorization: Bearer <password>` (401
//!   `UNAUTHORIZED`).
//! - **S3 buckets.** Without a `requirepass`, a bucket the S3 endpoint owns is refused with
//!   403 `S3_BUCKET` (its objects are reached with the S3 access keys, or here once a
//!   password is set); `/kv/{bucket}:{key}` likewise.
//! - Timed in `meridian_ops_total{frontend="http",op="object_get|object_put|object_delete"}`,
//!   uploads by range in `op="object_upload_create|object_upload_part|object_upload_list|
//!   object_upload_complete|object_upload_abort"`.

use crate::body::{self, BodyCheck};
use crate::http_common::{ApiError, HttpState};
use crate::metrics::Frontend;
use crate::objects::{ObjectError, format_upload_id, parse_upload_id};
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use bytes::Bytes;
use meridian_blob::ObjectMeta;
use meridian_blob::range::{content_range, parse_range};
use meridian_s3::{ChecksumAlgorithm, Checksummer};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// The longest object key, bytes (S3's).
pub const KEY_MAX: usize = 1024;

/// The routes, merged into the router (`http::router`) outside its body limits.
pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route(
            "/b/{*path}",
            get(get_object)
                .put(put_object)
                .delete(delete_object)
                .post(post_object),
        )
        .layer(DefaultBodyLimit::disable())
}

/// Where the body stream leaves the precise error of a body that failed (the service only
/// sees `ObjectError::Body`).
type Slot = body::Slot<BodyFailure>;

fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, code, message)
}

/// The bucket and key named by the URI: `/b/{bucket}/{key}`, both percent-decoded and
/// checked.
fn names(uri: &Uri) -> Result<(String, Bytes), ApiError> {
    let raw = uri.path().strip_prefix("/b/").unwrap_or_default();
    let (raw_bucket, raw_key) = raw.split_once('/').unwrap_or((raw, ""));
    let bucket = crate::percent::decode(raw_bucket.as_bytes())
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            bad(
                "BAD_BUCKET_NAME",
                "bucket has a malformed %-escape or is not UTF-8",
            )
        })?;
    crate::http_cluster::check_name("bucket", &bucket).map_err(|m| bad("BAD_BUCKET_NAME", m))?;
    if raw_key.is_empty() {
        return Err(bad(
            "EMPTY_KEY",
            "key is empty: the path is /b/{bucket}/{key}",
        ));
    }
    let key = crate::percent::decode(raw_key.as_bytes()).ok_or_else(|| {
        bad(
            "BAD_KEY_ENCODING",
            "key has a malformed %-escape: use %XX with two hex digits",
        )
    })?;
    if std::str::from_utf8(&key).is_err() {
        return Err(bad(
            "BAD_KEY_ENCODING",
            "key must be UTF-8 (as S3 keys are)",
        ));
    }
    if key.len() > KEY_MAX {
        return Err(bad(
            "KEY_TOO_LONG",
            format!("key is {} bytes (decoded); at most {KEY_MAX}", key.len()),
        ));
    }
    Ok((bucket, Bytes::from(key)))
}

/// The API error of a failed object operation; `slot`: what the body stream recorded.
fn object_error(s: &HttpState, e: ObjectError, slot: Option<&Slot>) -> ApiError {
    let internal =
        |code: &'static str, m: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, code, m);
    match e {
        ObjectError::NoSuchKey => {
            ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such object")
        }
        ObjectError::TooLarge { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "OBJECT_TOO_LARGE",
            e.to_string(),
        ),
        ObjectError::Body(m) => match body::recorded(slot) {
            Some(f) => bad(f.code, f.message),
            None => bad("INCOMPLETE_BODY", m),
        },
        ObjectError::BadDigest(_) => bad("DIGEST_MISMATCH", e.to_string()),
        ObjectError::TooManyTransfers(t) => {
            let secs = t.retry_after_ms.div_ceil(1000).max(1);
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "TOO_MANY_TRANSFERS",
                t.to_string(),
            )
            .with_header(header::RETRY_AFTER, HeaderValue::from(secs))
            .with_field("active", t.active.into())
            .with_field("queued", t.queued.into())
            .with_field("limit", t.limit.into())
            .with_field("retry_after_ms", t.retry_after_ms.into())
        }
        ObjectError::Replication(r) => match &s.node.cluster {
            Some(c) => crate::wire_error::http(c, &s.node.metrics, &r),
            None => {
                s.node.metrics.replication_error(Frontend::Http, r.code());
                crate::wire_error::http_error(&r, |dc| dc.to_string())
            }
        },
        ObjectError::Blob(b @ meridian_blob::BlobError::DigestMismatch { .. }) => {
            internal("CORRUPT_OBJECT", b.to_string())
        }
        ObjectError::Blob(b) => internal("STORAGE_ERROR", b.to_string()),
        ObjectError::Keyspace(k) => internal("STORAGE_ERROR", k),
        ObjectError::Unsupported(m) => bad("UNSUPPORTED", m),
        ObjectError::NoSuchUpload => no_such_upload(),
        ObjectError::InvalidPart(m) => bad("INVALID_PARTS", m),
        // S3's completion checks: not reachable from these routes.
        e @ (ObjectError::InvalidPartOrder | ObjectError::EntityTooSmall { .. }) => {
            bad("BAD_REQUEST", e.to_string())
        }
    }
}

/// The bucket and key a request names, once it is authorized (and its key is not an S3
/// bucket's, see [`refuse_s3_key`]).
fn target(s: &HttpState, uri: &Uri) -> Result<(String, Bytes), ApiError> {
    let (bucket, key) = names(uri)?;
    refuse_s3_key(&s.node, &crate::objects::object_key(&bucket, &key))?;
    Ok((bucket, key))
}

/// Refuses `key` when it belongs to an S3 bucket and the node has no `requirepass`: 403
/// `S3_BUCKET`, naming the bucket. The one check `/kv/{key}` and `/b/{bucket}/{key}` pass
/// through (see [`crate::objects::Objects::check_key_access`]).
pub(crate) fn refuse_s3_key(node: &crate::state::NodeState, key: &[u8]) -> Result<(), ApiError> {
    let password_set = node.config.resp.requirepass.is_some();
    node.objects
        .check_key_access(key, password_set)
        .map_err(|refused| ApiError::new(StatusCode::FORBIDDEN, "S3_BUCKET", refused.to_string()))
}

/// Serves a request, timed into `op`'s statistics (server errors count as failures).
async fn timed(
    s: &HttpState,
    op: &'static str,
    serve: impl Future<Output = Result<Response, ApiError>>,
) -> Result<Response, ApiError> {
    let start = Instant::now();
    let r = serve.await;
    let failed = matches!(&r, Err(e) if e.status.is_server_error());
    s.node
        .metrics
        .op(Frontend::Http, op)
        .observe(start.elapsed(), failed);
    r
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    )
}

/// `blake3=:BASE64:`, the `Content-Digest` of an object.
fn blake3_digest(digest: &[u8; 32]) -> String {
    format!(
        "blake3=:{}:",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The digests a `Content-Digest` header asks to check.
#[derive(Debug, Default, PartialEq, Eq)]
struct Wanted {
    sha256: Option<[u8; 32]>,
    blake3: Option<[u8; 32]>,
}

/// Parses `Content-Digest` (RFC 9530: an RFC 8941 dictionary of `algorithm=:base64:`
/// members; parameters are ignored; a later member of the same algorithm wins). Unknown
/// algorithms are skipped; `None` from every header line is no check at all.
fn content_digest(headers: &HeaderMap) -> Result<Wanted, ApiError> {
    let malformed = |why: String| {
        bad(
            "BAD_CONTENT_DIGEST",
            format!(
                "Content-Digest: {why}; expected e.g. 'sha-256=:BASE64:' or \
                 'blake3=:BASE64:' (RFC 9530)"
            ),
        )
    };
    let mut wanted = Wanted::default();
    for value in headers.get_all("content-digest") {
        let text = value.to_str().map_err(|_| malformed("not ASCII".into()))?;
        for member in text.split(',').map(str::trim) {
            if member.is_empty() {
                return Err(malformed("an empty member".into()));
            }
            let (name, rest) = member.split_once('=').unwrap_or((member, ""));
            let name_ok = name
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'*')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.*".contains(&b));
            if !name_ok {
                return Err(malformed(format!("{name:?} is not an algorithm name")));
            }
            // The item, without its parameters.
            let item = rest.split(';').next().unwrap_or_default().trim();
            let slot = match name {
                "sha-256" => &mut wanted.sha256,
                "blake3" => &mut wanted.blake3,
                _ => continue,
            };
            let digest = item
                .strip_prefix(':')
                .and_then(|i| i.strip_suffix(':'))
                .and_then(|i| b64().decode(i).ok())
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
                .ok_or_else(|| {
                    malformed(format!(
                        "{name} must be a 32-byte digest as ':base64:', not {item:?}"
                    ))
                })?;
            *slot = Some(digest);
        }
    }
    Ok(wanted)
}

/// A body that failed: its API error's code and message.
struct BodyFailure {
    code: &'static str,
    message: String,
}

/// What the `/b/` routes do to a request body: pass it on, hashed as it streams when
/// `Content-Digest` asked for it; at the end each asked digest is compared.
struct DigestCheck {
    sha256: Option<([u8; 32], Checksummer)>,
    blake3: Option<([u8; 32], blake3::Hasher)>,
}

impl DigestCheck {
    fn new(wanted: Wanted) -> DigestCheck {
        DigestCheck {
            sha256: wanted
                .sha256
                .map(|w| (w, Checksummer::new(ChecksumAlgorithm::Sha256))),
            blake3: wanted.blake3.map(|w| (w, blake3::Hasher::new())),
        }
    }

    /// The algorithm whose digest the body does not match, if any.
    fn mismatch(&mut self) -> Option<&'static str> {
        if let Some((want, h)) = self.sha256.take()
            && h.finalize()[..] != want[..]
        {
            return Some("sha-256");
        }
        if let Some((want, h)) = self.blake3.take()
            && *h.finalize().as_bytes() != want
        {
            return Some("blake3");
        }
        None
    }
}

impl BodyCheck for DigestCheck {
    type Error = BodyFailure;

    fn take(&mut self, bytes: Bytes, out: &mut VecDeque<Bytes>) -> Result<(), BodyFailure> {
        if let Some((_, h)) = &mut self.sha256 {
            h.update(&bytes);
        }
        if let Some((_, h)) = &mut self.blake3 {
            h.update(&bytes);
        }
        out.push_back(bytes);
        Ok(())
    }

    fn finish(&mut self) -> Result<(), BodyFailure> {
        match self.mismatch() {
            None => Ok(()),
            Some(alg) => Err(BodyFailure {
                code: "DIGEST_MISMATCH",
                message: format!("the body does not match its Content-Digest {alg}"),
            }),
        }
    }

    fn unreadable(&self, e: axum::Error) -> BodyFailure {
        BodyFailure {
            code: "INCOMPLETE_BODY",
            message: format!("reading the body: {e}"),
        }
    }

    fn message(e: &BodyFailure) -> String {
        e.message.clone()
    }
}

fn put_header(h: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

async fn put_object(
    State(s): State<Arc<HttpState>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(&s, &uri)?;
    let query = upload_query(&uri)?;
    if let Some(id) = query.upload_id()? {
        let store = put_part(&s, &bucket, &key, id, &headers, body);
        return timed(&s, "object_upload_part", store).await;
    }
    if headers.contains_key(header::CONTENT_RANGE) {
        // RFC 9110 §14.5: a server that does not apply a partial PUT must refuse it rather
        // than store the part as the whole object.
        return Err(bad(
            "CONTENT_RANGE_UNSUPPORTED",
            "Content-Range on a PUT without ?upload_id= is not supported: send the whole \
             object, or open a resumable upload (POST ?uploads) and send its parts with \
             ?upload_id=",
        ));
    }
    let wanted = content_digest(&headers)?;
    let store = store_object(&s, &bucket, &key, &headers, body, wanted);
    timed(&s, "object_put", store).await
}

/// The metadata a PUT (or the opening of an upload) gives its object: its `Content-Type`.
fn object_meta(headers: &HeaderMap) -> ObjectMeta {
    ObjectMeta {
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .filter(|t| t.len() <= 256)
            .map(str::to_owned),
        ..ObjectMeta::default()
    }
}

async fn store_object(
    s: &HttpState,
    bucket: &str,
    key: &[u8],
    headers: &HeaderMap,
    body: Body,
    wanted: Wanted,
) -> Result<Response, ApiError> {
    let meta = object_meta(headers);
    let slot: Slot = Arc::default();
    let stream = body::request_stream(body, DigestCheck::new(wanted), slot.clone());
    let m = s
        .node
        .objects
        .put(bucket, key, stream, meta, None)
        .await
        .map_err(|e| object_error(s, e, Some(&slot)))?;
    Ok(stored_reply(&m))
}

/// The reply to a committed object (a PUT, or a completed upload): its size, ETag and
/// BLAKE3, also as `ETag` and `Content-Digest`.
fn stored_reply(m: &meridian_blob::Manifest) -> Response {
    let etag = m.meta.s3_etag.clone();
    let mut r = axum::Json(json!({
        "size": m.size,
        "etag": etag,
        "blake3": m.blake3_hex(),
    }))
    .into_response();
    put_header(r.headers_mut(), header::ETAG, &etag);
    put_header(
        r.headers_mut(),
        header::HeaderName::from_static("content-digest"),
        &blake3_digest(&m.digest),
    );
    r
}

async fn get_object(
    State(s): State<Arc<HttpState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(&s, &uri)?;
    let query = upload_query(&uri)?;
    if let Some(id) = query.upload_id()? {
        let list = list_upload(&s, &bucket, &key, id, &query);
        return timed(&s, "object_upload_list", list).await;
    }
    let serve = serve_object(&s, &method, &headers, &bucket, &key);
    timed(&s, "object_get", serve).await
}

async fn serve_object(
    s: &HttpState,
    method: &Method,
    req: &HeaderMap,
    bucket: &str,
    key: &[u8],
) -> Result<Response, ApiError> {
    let objects = &s.node.objects;
    let head = objects
        .head(bucket, key)
        .await
        .map_err(|e| object_error(s, e, None))?;
    let m = head.manifest.clone();
    let size = m.size;
    let mut h = HeaderMap::new();
    put_header(&mut h, header::ETAG, &m.meta.s3_etag);
    put_header(&mut h, header::ACCEPT_RANGES, "bytes");
    put_header(
        &mut h,
        header::CONTENT_TYPE,
        m.meta
            .content_type
            .as_deref()
            .unwrap_or("application/octet-stream"),
    );
    let range = req
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_range);
    let (status, first, last) = match range {
        Some(spec) => match spec.resolve(size) {
            Ok((a, b)) => {
                put_header(&mut h, header::CONTENT_RANGE, &content_range(a, b, size));
                (StatusCode::PARTIAL_CONTENT, a, b)
            }
            Err(u) => {
                let mut e = ApiError::new(
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    "BAD_RANGE",
                    format!("{u}: the range must start before byte {size}"),
                );
                if let Ok(v) = HeaderValue::from_str(&u.content_range()) {
                    e = e.with_header(header::CONTENT_RANGE, v);
                }
                return Err(e);
            }
        },
        None => {
            put_header(
                &mut h,
                header::HeaderName::from_static("content-digest"),
                &blake3_digest(&m.digest),
            );
            (StatusCode::OK, 0, size.saturating_sub(1))
        }
    };
    let len = body::span_len(size, (first, last));
    put_header(&mut h, header::CONTENT_LENGTH, &len.to_string());
    let body = body::object_body(
        objects,
        bucket,
        key,
        &head,
        (first, last),
        *method == Method::HEAD,
    )
    .await
    .map_err(|e| object_error(s, e, None))?;
    let mut r = (status, body).into_response();
    r.headers_mut().extend(h);
    Ok(r)
}

async fn delete_object(State(s): State<Arc<HttpState>>, uri: Uri) -> Result<Response, ApiError> {
    let (bucket, key) = target(&s, &uri)?;
    let query = upload_query(&uri)?;
    if let Some(id) = query.upload_id()? {
        let abort = async {
            s.node
                .objects
                .abort_upload(&bucket, &key, id)
                .await
                .map_err(|e| object_error(&s, e, None))?;
            Ok(StatusCode::NO_CONTENT.into_response())
        };
        return timed(&s, "object_upload_abort", abort).await;
    }
    let delete = async {
        match s.node.objects.delete(&bucket, &key).await {
            Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
            Err(e) => Err(object_error(&s, e, None)),
        }
    };
    timed(&s, "object_delete", delete).await
}

// ----- resumable uploads by byte range (spec §4 "Resumable", "Parallel streams") ---------

/// The most parts one listing of an upload shows (and how many it shows by default).
const MAX_LISTED_PARTS: u64 = 10_000;

/// The query parameters of the uploads by byte range (others are ignored, as before).
#[derive(Debug, Default, PartialEq, Eq)]
struct UploadQuery {
    /// `?uploads`: open an upload.
    uploads: bool,
    /// `?upload_id=`, decoded.
    upload_id: Option<String>,
    /// `?size=`: the object's length (a completion).
    size: Option<String>,
    /// `?from=`: the first offset to list (a listing).
    from: Option<String>,
    /// `?max_parts=`: the most parts to list (a listing).
    max_parts: Option<String>,
}

impl UploadQuery {
    /// The upload `?upload_id=` names, if given; 404 `NO_SUCH_UPLOAD` when it cannot be one
    /// (ids are 32 hex digits).
    fn upload_id(&self) -> Result<Option<u128>, ApiError> {
        match &self.upload_id {
            None => Ok(None),
            Some(raw) => parse_upload_id(raw).map(Some).ok_or_else(no_such_upload),
        }
    }
}

fn no_such_upload() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NO_SUCH_UPLOAD",
        "upload_id: no such upload of this object (it was completed or aborted, or is \
         another object's; ids come from POST ?uploads)",
    )
}

/// A client's text in an error message: quoted, at most 64 characters of it.
fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(64).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    format!("{out:?}")
}

/// The upload parameters of a `/b/` request's query. Each may be given once.
fn upload_query(uri: &Uri) -> Result<UploadQuery, ApiError> {
    let mut q = UploadQuery::default();
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match name {
            "uploads" => {
                q.uploads = true;
                continue;
            }
            "upload_id" => &mut q.upload_id,
            "size" => &mut q.size,
            "from" => &mut q.from,
            "max_parts" => &mut q.max_parts,
            _ => continue,
        };
        if slot.is_some() {
            return Err(bad("BAD_QUERY", format!("{name} is given more than once")));
        }
        let value = crate::percent::decode(value.as_bytes())
            .and_then(|v| String::from_utf8(v).ok())
            .ok_or_else(|| {
                bad(
                    "BAD_QUERY",
                    format!("{name} has a malformed %-escape or is not UTF-8"),
                )
            })?;
        *slot = Some(value);
    }
    Ok(q)
}

/// Query parameter `name`'s whole number (decimal digits only); `code` names the error.
fn query_number(name: &str, value: &str, code: &'static str) -> Result<u64, ApiError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            code,
            format!("{name} must be a whole number, not {}", shown(value)),
        ));
    }
    value.parse().map_err(|_| {
        bad(
            code,
            format!(
                "{name} {} is too large (at most {})",
                shown(value),
                u64::MAX
            ),
        )
    })
}

/// A part's place in its object: `Content-Range: bytes FIRST-LAST/TOTAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PartRange {
    first: u64,
    last: u64,
    total: u64,
}

impl PartRange {
    /// The part's length (`first <= last` once parsed).
    fn len(&self) -> u64 {
        self.last.saturating_sub(self.first).saturating_add(1)
    }
}

/// A part's `Content-Range` (RFC 9110 §14.4, with its complete length): exactly one header.
fn part_range(headers: &HeaderMap) -> Result<PartRange, ApiError> {
    let malformed = |m: String| bad("BAD_CONTENT_RANGE", format!("Content-Range: {m}"));
    let mut all = headers.get_all(header::CONTENT_RANGE).iter();
    let value = match (all.next(), all.next()) {
        (Some(v), None) => v,
        (None, _) => {
            return Err(malformed(
                "a part needs 'Content-Range: bytes FIRST-LAST/TOTAL'".into(),
            ));
        }
        (Some(_), Some(_)) => return Err(malformed("given more than once".into())),
    };
    let text = value.to_str().map_err(|_| malformed("not ASCII".into()))?;
    parse_part_range(text).map_err(malformed)
}

/// Parses `bytes FIRST-LAST/TOTAL` (decimal; `TOTAL` known, not `*`): `FIRST <= LAST <
/// TOTAL`.
fn parse_part_range(text: &str) -> Result<PartRange, String> {
    let malformed = || {
        format!(
            "expected 'bytes FIRST-LAST/TOTAL' in decimal (TOTAL known, not '*'), not {}",
            shown(text)
        )
    };
    let (unit, spec) = text.trim().split_once(' ').ok_or_else(malformed)?;
    if !unit.eq_ignore_ascii_case("bytes") {
        return Err(malformed());
    }
    let (range, total) = spec.split_once('/').ok_or_else(malformed)?;
    let (first, last) = range.split_once('-').ok_or_else(malformed)?;
    let number = |field: &str, s: &str| -> Result<u64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed());
        }
        s.parse()
            .map_err(|_| format!("{field} {} is too large", shown(s)))
    };
    let r = PartRange {
        first: number("FIRST", first)?,
        last: number("LAST", last)?,
        total: number("TOTAL", total)?,
    };
    if r.first > r.last {
        return Err(format!("FIRST {} is after LAST {}", r.first, r.last));
    }
    if r.last >= r.total {
        return Err(format!(
            "LAST {} is not below TOTAL {} (bytes are numbered from 0)",
            r.last, r.total
        ));
    }
    Ok(r)
}

/// Checks a part against the upload's limits: `TOTAL` at most `max_object` (413), and the
/// part aligned to `chunk_size`: `FIRST` a multiple of it, `LAST + 1` too unless it is
/// `TOTAL` (so every part's chunks are whole chunks of the object).
fn check_part_range(r: PartRange, chunk_size: u64, max_object: u64) -> Result<(), ApiError> {
    if r.total > max_object {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "OBJECT_TOO_LARGE",
            format!(
                "Content-Range: TOTAL {} exceeds the largest object, {max_object} bytes \
                 (blob.max_object)",
                r.total
            ),
        ));
    }
    let misaligned = |m: String| {
        bad(
            "MISALIGNED_RANGE",
            format!(
                "Content-Range: {m}; parts are aligned to the chunk size {chunk_size} (the \
                 chunk_size POST ?uploads answered)"
            ),
        )
    };
    if r.first.checked_rem(chunk_size) != Some(0) {
        return Err(misaligned(format!(
            "FIRST {} is not a multiple of the chunk size {chunk_size}",
            r.first
        )));
    }
    // LAST < TOTAL, so LAST + 1 does not overflow.
    let end = r.last.saturating_add(1);
    if end != r.total && end.checked_rem(chunk_size) != Some(0) {
        return Err(misaligned(format!(
            "LAST + 1 = {end} is neither a multiple of the chunk size {chunk_size} nor TOTAL {}",
            r.total
        )));
    }
    Ok(())
}

/// What a part's body must be: exactly the bytes its `Content-Range` names (`want`), and
/// what its `Content-Digest` says.
struct PartCheck {
    digest: DigestCheck,
    want: u64,
    got: u64,
}

impl BodyCheck for PartCheck {
    type Error = BodyFailure;

    fn take(&mut self, bytes: Bytes, out: &mut VecDeque<Bytes>) -> Result<(), BodyFailure> {
        self.got = self.got.saturating_add(bytes.len() as u64);
        if self.got > self.want {
            return Err(BodyFailure {
                code: "BODY_LENGTH_MISMATCH",
                message: format!(
                    "the body holds more than the {} bytes its Content-Range names",
                    self.want
                ),
            });
        }
        self.digest.take(bytes, out)
    }

    fn finish(&mut self) -> Result<(), BodyFailure> {
        if self.got < self.want {
            return Err(BodyFailure {
                code: "INCOMPLETE_BODY",
                message: format!(
                    "the body ended after {} of the {} bytes its Content-Range names",
                    self.got, self.want
                ),
            });
        }
        self.digest.finish()
    }

    fn unreadable(&self, e: axum::Error) -> BodyFailure {
        self.digest.unreadable(e)
    }

    fn message(e: &BodyFailure) -> String {
        DigestCheck::message(e)
    }
}

/// `PUT ?upload_id=`: stores one part, the bytes its `Content-Range` names, as part
/// `FIRST / chunk_size + 1` of the upload (replacing one sent before).
async fn put_part(
    s: &HttpState,
    bucket: &str,
    key: &[u8],
    id: u128,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let objects = &s.node.objects;
    let cfg = objects.config();
    let chunk_size = u64::from(cfg.chunk_size);
    let range = part_range(headers)?;
    check_part_range(range, chunk_size, cfg.max_object)?;
    let number = objects.range_part_number(range.first).ok_or_else(|| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "OBJECT_TOO_LARGE",
            format!(
                "Content-Range: FIRST {} is past what an upload by parts holds ({} parts of \
                 {chunk_size} bytes)",
                range.first,
                u32::MAX
            ),
        )
    })?;
    let len = range.len();
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = announced
        && n != len
    {
        return Err(bad(
            "BODY_LENGTH_MISMATCH",
            format!("Content-Length {n} differs from the {len} bytes Content-Range names"),
        ));
    }
    let wanted = content_digest(headers)?;
    let slot: Slot = Arc::default();
    let check = PartCheck {
        digest: DigestCheck::new(wanted),
        want: len,
        got: 0,
    };
    let stream = body::request_stream(body, check, slot.clone());
    let etag = objects
        .upload_part(bucket, key, id, number, stream, None)
        .await
        .map_err(|e| object_error(s, e, Some(&slot)))?;
    let mut r = axum::Json(json!({
        "offset": range.first,
        "size": len,
        "etag": etag,
    }))
    .into_response();
    put_header(r.headers_mut(), header::ETAG, &etag);
    Ok(r)
}

/// `GET ?upload_id=`: the parts received, in byte order from `?from=` (default 0), at most
/// `?max_parts=`, and `received_prefix`: the bytes the parts hold from 0 without a gap,
/// over all of them (the scan stops at the first gap once the page is full).
async fn list_upload(
    s: &HttpState,
    bucket: &str,
    key: &[u8],
    id: u128,
    query: &UploadQuery,
) -> Result<Response, ApiError> {
    let objects = &s.node.objects;
    let chunk_size = u64::from(objects.config().chunk_size);
    let from = match &query.from {
        Some(v) => query_number("from", v, "BAD_QUERY")?,
        None => 0,
    };
    let max = match &query.max_parts {
        Some(v) => {
            let n = query_number("max_parts", v, "BAD_QUERY")?;
            if !(1..=MAX_LISTED_PARTS).contains(&n) {
                return Err(bad(
                    "BAD_QUERY",
                    format!("max_parts must be 1..={MAX_LISTED_PARTS}, not {n}"),
                ));
            }
            n
        }
        None => MAX_LISTED_PARTS,
    };
    // The part number just before the first part at or after `from`.
    let skip_to = u32::try_from(from.div_ceil(chunk_size)).unwrap_or(u32::MAX);
    let mut parts = Vec::new();
    let mut next_from = None;
    let mut prefix = 0u64;
    let mut contiguous = true;
    let mut marker = 0u32;
    loop {
        let (page, more) = objects
            .list_parts(bucket, key, id, marker, 1000)
            .await
            .map_err(|e| object_error(s, e, None))?;
        for p in &page {
            let offset = objects.range_part_offset(p.number);
            if contiguous {
                if offset <= prefix {
                    prefix = prefix.max(offset.saturating_add(p.size));
                } else {
                    contiguous = false;
                }
            }
            if offset >= from {
                if (parts.len() as u64) < max {
                    parts.push(json!({
                        "offset": offset,
                        "size": p.size,
                        "etag": p.etag,
                    }));
                } else if next_from.is_none() {
                    next_from = Some(offset);
                }
            }
        }
        let Some(last) = page.last() else {
            break;
        };
        marker = last.number;
        if !more || (next_from.is_some() && !contiguous) {
            break;
        }
        if !contiguous {
            // The prefix is known: go on from `from`.
            marker = marker.max(skip_to);
        }
    }
    let mut reply = serde_json::Map::new();
    reply.insert("upload_id".into(), format_upload_id(id).into());
    reply.insert("chunk_size".into(), chunk_size.into());
    reply.insert("received_prefix".into(), prefix.into());
    reply.insert("parts".into(), parts.into());
    reply.insert("truncated".into(), next_from.is_some().into());
    if let Some(n) = next_from {
        reply.insert("next_from".into(), n.into());
    }
    Ok(axum::Json(reply).into_response())
}

/// `POST ?uploads` opens an upload; `POST ?upload_id=&size=` completes one.
async fn post_object(
    State(s): State<Arc<HttpState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(&s, &uri)?;
    let query = upload_query(&uri)?;
    match (query.uploads, query.upload_id()?) {
        (true, Some(_)) => Err(bad(
            "BAD_QUERY",
            "uploads and upload_id together: POST ?uploads opens an upload, POST \
             ?upload_id=ID&size=TOTAL completes one",
        )),
        (true, None) => {
            let create = async {
                let objects = &s.node.objects;
                let id = objects
                    .create_upload(&bucket, &key, object_meta(&headers))
                    .await
                    .map_err(|e| object_error(&s, e, None))?;
                Ok(axum::Json(json!({
                    "upload_id": format_upload_id(id),
                    "chunk_size": objects.config().chunk_size,
                }))
                .into_response())
            };
            timed(&s, "object_upload_create", create).await
        }
        (false, Some(id)) => {
            let complete = async {
                let size = match &query.size {
                    Some(v) => query_number("size", v, "BAD_SIZE")?,
                    None => {
                        return Err(bad(
                            "BAD_SIZE",
                            "size: completing an upload needs ?size=TOTAL, the object's \
                             length in bytes",
                        ));
                    }
                };
                let m = s
                    .node
                    .objects
                    .complete_range_upload(&bucket, &key, id, size)
                    .await
                    .map_err(|e| object_error(&s, e, None))?;
                Ok(stored_reply(&m))
            };
            timed(&s, "object_upload_complete", complete).await
        }
        (false, None) => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
            "POST /b/{bucket}/{key} needs ?uploads (open a resumable upload) or \
             ?upload_id=ID&size=TOTAL (complete one)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(value: &str) -> Result<Wanted, ApiError> {
        let mut h = HeaderMap::new();
        h.insert("content-digest", HeaderValue::from_str(value).unwrap());
        content_digest(&h)
    }

    #[test]
    fn content_digest_parses_known_algorithms_and_skips_others() {
        let a = [7u8; 32];
        let b = [9u8; 32];
        let enc = |d: &[u8]| base64::engine::general_purpose::STANDARD.encode(d);
        let w = digest_of(&format!(
            "sha-512=:{}:, sha-256=:{}:;p=1, blake3=:{}:",
            enc(&[1u8; 64]),
            enc(&a),
            enc(&b)
        ))
        .unwrap();
        assert_eq!(
            w,
            Wanted {
                sha256: Some(a),
                blake3: Some(b)
            }
        );
        assert_eq!(digest_of("md5=whatever").unwrap(), Wanted::default());
        for bad in [
            "sha-256=:AAAA:",
            "sha-256=abc",
            "blake3",
            "Sha-256=:AAAA:",
            ",",
            "sha-256=:!!!:",
        ] {
            let e = digest_of(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn part_ranges_are_parsed_strictly() {
        let r = parse_part_range("bytes 65536-131071/200000").unwrap();
        assert_eq!(
            r,
            PartRange {
                first: 65536,
                last: 131071,
                total: 200000
            }
        );
        assert_eq!(r.len(), 65536);
        assert_eq!(parse_part_range(" BYTES 0-0/1 ").unwrap().len(), 1);
        let max = u64::MAX;
        assert!(parse_part_range(&format!("bytes 0-{}/{max}", max - 1)).is_ok());
        for bad in [
            "",
            "bytes",
            "bytes 0-1",
            "bytes 0-1/*",
            "bytes */10",
            "bytes=0-1/10",
            "bytes 0 -1/10",
            "bytes -0-1/10",
            "bytes +0-1/10",
            "bytes 0-1/10/",
            "bytes 2-1/10",
            "bytes 0-10/10",
            "bytes 0-0/0",
            "bytes 0-18446744073709551616/1",
            "items 0-1/10",
        ] {
            assert!(parse_part_range(bad).is_err(), "{bad:?}");
        }
        let long = format!("bytes 0-1/{}", "9".repeat(10_000));
        assert!(parse_part_range(&long).unwrap_err().len() < 200);
    }

    #[test]
    fn part_ranges_are_aligned_to_chunks() {
        let r = |first, last, total| PartRange { first, last, total };
        let cs = 65536;
        let check = |p| check_part_range(p, cs, 1 << 30);
        assert!(check(r(0, cs - 1, 10 * cs)).is_ok());
        assert!(check(r(cs, 3 * cs - 1, 10 * cs)).is_ok());
        assert!(check(r(cs, 3 * cs + 4, 3 * cs + 5)).is_ok());
        assert!(check(r(0, 0, 1)).is_ok());
        for bad in [
            r(1, cs, 10 * cs),
            r(0, cs - 2, 10 * cs),
            r(cs, cs + 5, cs + 7),
        ] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad:?}");
            assert!(format!("{e:?}").contains("65536"), "{bad:?}: {e:?}");
        }
        let e = check(r(0, cs - 1, (1 << 30) + 1)).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn upload_queries_are_parsed() {
        let q = |s: &str| upload_query(&s.parse::<Uri>().unwrap());
        let id = "0123456789abcdef0123456789ABCDEF";
        let got = q(&format!("/b/x/k?uploads&upload_id={id}&size=5&other=1&")).unwrap();
        assert!(got.uploads);
        assert_eq!(got.size.as_deref(), Some("5"));
        assert!(got.upload_id().unwrap().is_some());
        assert_eq!(q("/b/x/k").unwrap(), UploadQuery::default());
        assert_eq!(
            q("/b/x/k?upload_id=xyz")
                .unwrap()
                .upload_id()
                .unwrap_err()
                .status,
            StatusCode::NOT_FOUND
        );
        assert!(q("/b/x/k?size=1&size=2").is_err());
        assert!(q("/b/x/k?from=%zz").is_err());
        assert!(query_number("size", "12", "BAD_SIZE").is_ok());
        for bad in ["", "-1", "1.5", " 1", "18446744073709551616"] {
            assert!(query_number("size", bad, "BAD_SIZE").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_are_decoded_and_checked() {
        let n = |p: &str| names(&p.parse::<Uri>().unwrap());
        let (b, k) = n("/b/bkt/dir/a%20b").unwrap();
        assert_eq!((b.as_str(), &k[..]), ("bkt", &b"dir/a b"[..]));
        for bad in [
            "/b/bkt",
            "/b/bkt/",
            "/b/../k",
            "/b/a:b/k",
            "/b/bkt/%ff",
            "/b/bkt/%zz",
            "/b//k",
        ] {
            assert_eq!(n(bad).unwrap_err().status, StatusCode::BAD_REQUEST, "{bad}");
        }
        assert!(n(&format!("/b/bkt/{}", "k".repeat(KEY_MAX))).is_ok());
        assert!(n(&format!("/b/bkt/{}", "k".repeat(KEY_MAX + 1))).is_err());
    }
}
