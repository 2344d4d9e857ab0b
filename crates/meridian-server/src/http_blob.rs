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
//!   `Content-Range` (the spec's parallel part streams, not served yet) is refused with 400
//!   `CONTENT_RANGE_UNSUPPORTED` (RFC 9110 §14.5) rather than stored as the whole object.
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
//! - Timed in `meridian_ops_total{frontend="http",op="object_get|object_put|object_delete"}`.

use crate::body::{self, BodyCheck};
use crate::http::{ApiError, HttpState, authorize, percent_decode};
use crate::metrics::Frontend;
use crate::objects::ObjectError;
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

/// The routes, merged into [`crate::http::router`] outside its body limits.
pub(crate) fn routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route(
            "/b/{*path}",
            get(get_object).put(put_object).delete(delete_object),
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
    let bucket = percent_decode(raw_bucket.as_bytes())
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
    let key = percent_decode(raw_key.as_bytes()).ok_or_else(|| {
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
        // Multipart errors: not reachable from these routes.
        e @ (ObjectError::NoSuchUpload
        | ObjectError::InvalidPart(_)
        | ObjectError::InvalidPartOrder
        | ObjectError::EntityTooSmall { .. }) => bad("BAD_REQUEST", e.to_string()),
    }
}

/// The bucket and key a request names, once it is authorized.
fn target(s: &HttpState, uri: &Uri, headers: &HeaderMap) -> Result<(String, Bytes), ApiError> {
    authorize(&s.node, headers)?;
    names(uri)
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
    let (bucket, key) = target(&s, &uri, &headers)?;
    if headers.contains_key(header::CONTENT_RANGE) {
        // RFC 9110 §14.5: a server that does not apply partial PUTs must refuse them rather
        // than store the part as the whole object.
        return Err(bad(
            "CONTENT_RANGE_UNSUPPORTED",
            "Content-Range on a PUT (a partial upload) is not supported: send the whole \
             object, or upload parts with S3 multipart",
        ));
    }
    let wanted = content_digest(&headers)?;
    let store = store_object(&s, &bucket, &key, &headers, body, wanted);
    timed(&s, "object_put", store).await
}

async fn store_object(
    s: &HttpState,
    bucket: &str,
    key: &[u8],
    headers: &HeaderMap,
    body: Body,
    wanted: Wanted,
) -> Result<Response, ApiError> {
    let meta = ObjectMeta {
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .filter(|t| t.len() <= 256)
            .map(str::to_owned),
        ..ObjectMeta::default()
    };
    let slot: Slot = Arc::default();
    let stream = body::request_stream(body, DigestCheck::new(wanted), slot.clone());
    let m = s
        .node
        .objects
        .put(bucket, key, stream, meta, None)
        .await
        .map_err(|e| object_error(s, e, Some(&slot)))?;
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
    Ok(r)
}

async fn get_object(
    State(s): State<Arc<HttpState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(&s, &uri, &headers)?;
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

async fn delete_object(
    State(s): State<Arc<HttpState>>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (bucket, key) = target(&s, &uri, &headers)?;
    let delete = async {
        match s.node.objects.delete(&bucket, &key).await {
            Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
            Err(e) => Err(object_error(&s, e, None)),
        }
    };
    timed(&s, "object_delete", delete).await
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
