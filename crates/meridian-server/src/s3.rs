//! The S3-compatible endpoint (`meridian node --s3 ADDR`; `meridian up` serves one per node):
//! path-style requests (`/bucket/key`) verified with AWS Signature V4 against the configured
//! access keys, served by the node's object service ([`crate::objects`]).
//!
//! Every request is routed by method, path and query string in one table,
//! [`meridian_s3::route`]:
//!
//! | request | operation |
//! |---|---|
//! | `GET /` | ListBuckets |
//! | `PUT`/`HEAD`/`DELETE /b`, `GET /b?location` | CreateBucket, HeadBucket, DeleteBucket, GetBucketLocation |
//! | `GET /b?list-type=2` | ListObjectsV2 (prefix, delimiter, continuation, start-after) |
//! | `GET /b?uploads`, `POST /b?delete` | ListMultipartUploads (prefix, delimiter, upload-id-marker), DeleteObjects |
//! | `PUT /b/k` | PutObject; CopyObject with `x-amz-copy-source`; UploadPart with `?partNumber&uploadId` |
//! | `GET`/`HEAD /b/k` | GetObject (one `Range`, `If-Match`, `If-None-Match`), HeadObject |
//! | `DELETE /b/k` | DeleteObject; AbortMultipartUpload with `?uploadId` |
//! | `POST /b/k?uploads`, `POST /b/k?uploadId` | CreateMultipartUpload, CompleteMultipartUpload |
//! | `GET /b/k?uploadId` | ListParts |
//! | any method with `?acl`, `?tagging`, `?retention`, `?legal-hold`, `?policy`, `?versioning`, … ([`meridian_s3::UNSERVED_SUBRESOURCES`]) | `501 NotImplemented` naming the sub-resource; nothing changes |
//! | a served sub-resource with another method (`PUT /b?uploads`) | `405 MethodNotAllowed` |
//! | `?versionId=` other than `null` (also in `x-amz-copy-source`) | `400 InvalidArgument` ("Invalid version id specified", as S3 answers on an unversioned bucket) |
//!
//! Guarantees:
//! - every request is authenticated (header or presigned SigV4, any region in the scope)
//!   unless `s3.open`; on an open endpoint only a request carrying no signature at all is
//!   anonymous: one with an `Authorization` header or presigned parameters that fail
//!   verification is refused (`SignatureDoesNotMatch`, `InvalidAccessKeyId`, …). A signed
//!   body (`x-amz-content-sha256`), an aws-chunked body's chunk
//!   signatures, a `Content-MD5` and an `x-amz-checksum-*` value are all checked before the
//!   object is committed: a body that fails any of them leaves no object;
//! - the objects of an S3 bucket are reached only through this endpoint while the node has
//!   no `requirepass`: the RESP and HTTP front ends refuse its keys (`bucket:…`, see
//!   [`crate::objects::S3Buckets`]); a single node registers its buckets there, a cluster
//!   marks them `s3 = true` in their replicated bucket properties;
//! - errors are S3's XML bodies with S3's codes and statuses; `TooManyTransfers` and an
//!   unavailable cluster are `503 SlowDown`/`ServiceUnavailable` with `Retry-After`;
//! - the listener has the HTTP front end's protections (`s3.max_connections`, header and idle
//!   timeouts); bodies stream (an object is never held whole in memory) and bounded XML
//!   bodies are read whole only up to 1 MiB.
//!
//! Buckets: on a cluster, S3 buckets are the cluster's buckets (CreateBucket registers an
//! eventual bucket with the cluster's defaults; its consistency can be changed with
//! `PUT /buckets/{name}` on the admin API); on a single node they are kept in memory, or in
//! `DATA_DIR/s3-buckets` with the durable engine. DeleteBucket refuses a bucket holding
//! objects or open uploads, and `default`. Not served: versioning, ACLs, policies,
//! tagging, lifecycle and every other sub-resource above, ListObjects v1 and
//! virtual-hosted-style addressing (`NotImplemented`, naming it or the alternative).

use crate::body::{self, BodyCheck, Slot};
use crate::http_common::{ConnLimits, serve_app};
use crate::metrics::Frontend;
use crate::objects::{
    ByteStream, LIST_BUDGET, ObjectError, Objects, format_upload_id, parse_upload_id,
};
use crate::resp::acl::SessionUser;
use crate::state::NodeState;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use meridian_blob::ObjectMeta;
use meridian_blob::range::{content_range, parse_range};
use meridian_replication::{ErrorClass, ReplicationError};
use meridian_s3::sigv4::{Authenticated, PayloadMode, RequestParts};
use meridian_s3::{
    ChecksumAlgorithm, ChecksumVerifier, ChunkedConfig, ChunkedDecoder, ContentSha256Verifier,
    Operation, S3Code, S3Error, Target, names, xml,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Largest XML request body read (CompleteMultipartUpload, DeleteObjects, CreateBucket).
const MAX_XML_BODY: usize = 1 << 20;

/// Seconds a client is told to wait after `SlowDown` or `ServiceUnavailable`.
const RETRY_AFTER_SECS: u64 = 1;

/// What a connection over `s3.max_connections` gets before it is closed: S3's `SlowDown`.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
retry-after: 1\r\ncontent-type: application/xml\r\ncontent-length: 157\r\n\r\n\
<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>s3.max_connections \
reached: retry later</Message><RequestId>0</RequestId></Error>";

/// Serves the S3 API on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    node: Arc<NodeState>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let cfg = &node.config.s3;
    let limits = ConnLimits {
        max_connections: cfg.max_connections,
        over_capacity: OVER_CAPACITY,
        header_timeout: Duration::from_millis(cfg.header_read_timeout_ms),
        idle: Duration::from_millis(cfg.idle_timeout_ms),
        tls: cfg.tls,
    };
    let app = router(node.clone()).map_err(std::io::Error::other)?;
    serve_app(listener, app, node, Frontend::S3, limits, shutdown).await
}

/// The endpoint's request handling over `node`, without a listener: what [`serve`] runs,
/// public for in-process drivers (the `s3_api` fuzz target), not an API.
#[doc(hidden)]
pub fn router(node: Arc<NodeState>) -> Result<Router, String> {
    let state = Arc::new(S3State::new(node)?);
    Ok(Router::new().fallback(handle).with_state(state))
}

/// The endpoint's state.
struct S3State {
    node: Arc<NodeState>,
    keys: HashMap<String, String>,
    /// The ACL user each mapped access key acts as (`s3.users`).
    key_users: HashMap<String, String>,
    open: bool,
    buckets: BucketBook,
    requests: AtomicU64,
}

impl S3State {
    fn new(node: Arc<NodeState>) -> Result<S3State, String> {
        let keys = node
            .config
            .s3
            .key_pairs()
            .map_err(|e| e.to_string())?
            .into_iter()
            .collect();
        let buckets = BucketBook::open(&node)?;
        let key_users: HashMap<String, String> = node.config.s3.users.clone().into_iter().collect();
        if let Some((id, user)) = key_users
            .iter()
            .find(|(_, u)| !node.users.exists(u.as_bytes()))
        {
            return Err(format!(
                "s3.users: access key '{id}' maps to user '{user}', which is not an ACL user \
                 (resp.users / resp.aclfile)"
            ));
        }
        Ok(S3State {
            key_users,
            open: node.config.s3.open,
            node,
            keys,
            buckets,
            requests: AtomicU64::new(0),
        })
    }

    fn objects(&self) -> &Objects {
        &self.node.objects
    }
}

/// Which S3 buckets exist.
enum BucketBook {
    /// A single node: names and creation times, persisted to a file with a durable engine.
    Local {
        names: Mutex<BTreeMap<String, u64>>,
        file: Option<PathBuf>,
    },
    /// A cluster: its bucket registry.
    Cluster,
}

impl BucketBook {
    fn open(node: &NodeState) -> Result<BucketBook, String> {
        if node.cluster.is_some() {
            return Ok(BucketBook::Cluster);
        }
        let file = (node.config.storage.engine == crate::config::EngineKind::Fjall)
            .then(|| node.config.storage.data_dir.join("s3-buckets"));
        let mut names = BTreeMap::new();
        if let Some(f) = &file {
            match std::fs::read_to_string(f) {
                Ok(text) => {
                    for line in text.lines() {
                        if let Some((name, ms)) = line.split_once(' ')
                            && names::validate_bucket_name(name).is_ok()
                        {
                            names.insert(name.to_owned(), ms.parse().unwrap_or(0));
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("reading {}: {e}", f.display())),
            }
        }
        for name in names.keys() {
            node.objects.s3_buckets().insert(name);
        }
        Ok(BucketBook::Local {
            names: Mutex::new(names),
            file,
        })
    }

    fn exists(&self, node: &NodeState, name: &str) -> bool {
        match self {
            BucketBook::Local { names, .. } => names.lock().contains_key(name),
            BucketBook::Cluster => node
                .cluster
                .as_ref()
                .is_some_and(|c| c.node.buckets().get(name).is_some()),
        }
    }

    fn list(&self, node: &NodeState) -> Vec<xml::BucketInfo> {
        match self {
            BucketBook::Local { names, .. } => names
                .lock()
                .iter()
                .map(|(n, ms)| xml::BucketInfo {
                    name: n.clone(),
                    creation_date_ms: *ms,
                })
                .collect(),
            BucketBook::Cluster => node
                .cluster
                .as_ref()
                .map(|c| {
                    c.node
                        .buckets()
                        .names()
                        .filter(|n| names::validate_bucket_name(n).is_ok())
                        .map(|n| xml::BucketInfo {
                            name: n.to_owned(),
                            creation_date_ms: 0,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// Changes a single node's bucket list, and saves it when it has a file.
    fn edit(
        names: &Mutex<BTreeMap<String, u64>>,
        file: &Option<PathBuf>,
        change: impl FnOnce(&mut BTreeMap<String, u64>),
    ) -> Result<(), S3Error> {
        let mut names = names.lock();
        change(&mut names);
        let Some(f) = file else { return Ok(()) };
        let text: String = names.iter().map(|(n, ms)| format!("{n} {ms}\n")).collect();
        let tmp = f.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, f))
            .map_err(|e| internal(format!("saving the bucket list: {e}")))
    }

    /// The cluster whose registry holds the buckets.
    fn cluster(node: &NodeState) -> Result<&crate::cluster_backend::ClusterBackend, S3Error> {
        node.cluster
            .as_deref()
            .ok_or_else(|| internal("no cluster"))
    }

    async fn create(&self, node: &NodeState, name: &str) -> Result<(), S3Error> {
        if self.exists(node, name) {
            return Err(S3Error::new(
                S3Code::BucketAlreadyOwnedByYou,
                "Your previous request to create the named bucket succeeded and you already own it.",
            ));
        }
        match self {
            BucketBook::Local { names, file } => {
                // Guarded before it exists: no RESP/HTTP write lands in it in between.
                node.objects.s3_buckets().insert(name);
                BucketBook::edit(names, file, |n| {
                    n.insert(name.to_owned(), node.clock.now().0 / 1000);
                })
            }
            BucketBook::Cluster => BucketBook::cluster(node)?
                .node
                .set_bucket(
                    name,
                    meridian_replication::BucketProps {
                        s3: Some(true),
                        ..meridian_replication::BucketProps::default()
                    },
                )
                .await
                .map_err(|e| replication_error(&e)),
        }
    }

    async fn delete(&self, node: &NodeState, name: &str) -> Result<(), S3Error> {
        match self {
            BucketBook::Local { names, file } => {
                BucketBook::edit(names, file, |n| {
                    n.remove(name);
                })?;
                node.objects.s3_buckets().remove(name);
                Ok(())
            }
            BucketBook::Cluster => BucketBook::cluster(node)?
                .node
                .drop_bucket(name)
                .await
                .map_err(|e| replication_error(&e)),
        }
    }
}

fn internal(msg: impl Into<String>) -> S3Error {
    S3Error::new(S3Code::InternalError, msg)
}

fn invalid(code: S3Code, msg: impl Into<String>) -> S3Error {
    S3Error::new(code, msg)
}

/// A parsed request, borrowed by every operation.
struct Req {
    method: Method,
    path: names::S3Path,
    query: Vec<(String, String)>,
    raw_query: Option<String>,
    headers: Vec<(String, Vec<u8>)>,
    auth: Option<Authenticated>,
    /// The ACL user the signing key acts as (`s3.users`); `None`: the endpoint's full access.
    user: Option<SessionUser>,
}

impl Req {
    /// Whether the request's user (if its key has one) may run `cmd`.
    fn permit(&self, cmd: &crate::http_acl::AsCommand) -> Result<(), S3Error> {
        match &self.user {
            None => Ok(()),
            Some(u) => cmd.check(&mut u.clone()).map_err(access_denied),
        }
    }

    fn q(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    fn header_list(&self) -> Vec<(&str, &[u8])> {
        self.headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect()
    }
}

async fn handle(State(s): State<Arc<S3State>>, request: Request<Body>) -> Response {
    let id = s.requests.fetch_add(1, Ordering::Relaxed);
    let request_id = format!("{:016X}", id ^ 0x4d52_444e_0000_0000);
    let head = request.method() == Method::HEAD;
    let resource = request.uri().path().to_owned();
    let mut response = match serve_request(&s, request).await {
        Ok(r) => r,
        Err(e) => error_response(e.with_resource(resource), &request_id, head),
    };
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert("x-amz-request-id", v);
    }
    response
}

fn error_response(e: S3Error, request_id: &str, head: bool) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry = matches!(e.code, S3Code::SlowDown | S3Code::ServiceUnavailable);
    let body = if head {
        Body::empty()
    } else {
        Body::from(xml::error_xml(&e, request_id))
    };
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if retry {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    r
}

/// Authenticates, parses and runs one request.
async fn serve_request(s: &S3State, request: Request<Body>) -> Result<Response, S3Error> {
    let (parts, body) = request.into_parts();
    let raw_path = parts.uri.path().to_owned();
    let raw_query = parts.uri.query().map(str::to_owned);
    let mut headers: Vec<(String, Vec<u8>)> = Vec::with_capacity(parts.headers.len());
    for (n, v) in &parts.headers {
        headers.push((n.as_str().to_owned(), v.as_bytes().to_vec()));
    }
    let auth = {
        let list: Vec<(&str, &[u8])> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        let rp = RequestParts {
            method: parts.method.as_str(),
            raw_path: &raw_path,
            raw_query: raw_query.as_deref(),
            headers: &list,
        };
        let now = (s.node.clock.now().0 / 1_000_000) as i64;
        anonymous_or_verified(s.open, &rp, &s.keys, now).inspect_err(|_| {
            s.node
                .metrics
                .connections(Frontend::S3)
                .auth_failures
                .fetch_add(1, Ordering::Relaxed);
        })?
    };
    let path = names::parse_path_style(&raw_path)?;
    let query = names::parse_query(raw_query.as_deref())?;
    let user = s3_user(s, auth.as_ref())?;
    let req = Req {
        method: parts.method,
        path,
        query,
        raw_query,
        headers,
        auth,
        user,
    };
    let op = meridian_s3::route(
        req.method.as_str(),
        Target::of(&req.path),
        &req.query,
        req.header("x-amz-copy-source").is_some(),
    )?;
    req.permit(&crate::http_acl::s3_request(op, &req.path))?;
    let path = req.path.clone();
    match path {
        names::S3Path::Root => Ok(list_buckets(s)),
        names::S3Path::Bucket(bucket) => bucket_op(s, &req, op, &bucket, body).await,
        names::S3Path::Object { bucket, key } => {
            if !s.buckets.exists(&s.node, &bucket) {
                return Err(no_such_bucket(&bucket));
            }
            object_op(s, &req, op, &bucket, &key, body).await
        }
    }
}

/// The request's authentication: `None` (anonymous) only when the endpoint is `s3.open` and
/// the request carries no signature at all; a signature that fails verification is refused
/// with its error (`SignatureDoesNotMatch`, `InvalidAccessKeyId`, …) even on an open endpoint,
/// never served as anonymous.
fn anonymous_or_verified(
    open: bool,
    rp: &RequestParts<'_>,
    keys: &HashMap<String, String>,
    now: i64,
) -> Result<Option<Authenticated>, S3Error> {
    if open && meridian_s3::auth_kind(rp) == meridian_s3::AuthKind::Anonymous {
        return Ok(None);
    }
    meridian_s3::sigv4::verify(rp, keys, now).map(Some)
}

/// The ACL user a verified request acts as: its key's in `s3.users`, if any. A user deleted
/// since the endpoint started refuses the key.
fn s3_user(s: &S3State, auth: Option<&Authenticated>) -> Result<Option<SessionUser>, S3Error> {
    let Some(name) = auth.and_then(|a| s.key_users.get(&a.access_key)) else {
        return Ok(None);
    };
    s.node
        .users
        .session_of(name.as_bytes())
        .map(Some)
        .ok_or_else(|| access_denied(format!("the ACL user '{name}' of this access key is gone")))
}

fn access_denied(message: String) -> S3Error {
    invalid(S3Code::AccessDenied, message)
}

fn method_not_allowed() -> S3Error {
    invalid(
        S3Code::MethodNotAllowed,
        "The specified method is not allowed against this resource.",
    )
}

fn no_such_bucket(bucket: &str) -> S3Error {
    invalid(
        S3Code::NoSuchBucket,
        format!("The specified bucket {bucket} does not exist"),
    )
}

fn xml_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    r
}

fn owner() -> xml::Owner {
    xml::Owner {
        id: "meridian".into(),
        display_name: "meridian".into(),
    }
}

fn list_buckets(s: &S3State) -> Response {
    xml_response(
        StatusCode::OK,
        xml::list_all_my_buckets(&owner(), &s.buckets.list(&s.node)),
    )
}

/// Reads a small body whole (XML requests), refusing more than [`MAX_XML_BODY`].
async fn small_body(body: Body) -> Result<Bytes, S3Error> {
    axum::body::to_bytes(body, MAX_XML_BODY).await.map_err(|_| {
        invalid(
            S3Code::MaxMessageLengthExceeded,
            format!("the request body exceeds {MAX_XML_BODY} bytes or was cut short"),
        )
    })
}

async fn bucket_op(
    s: &S3State,
    req: &Req,
    op: Operation,
    bucket: &str,
    body: Body,
) -> Result<Response, S3Error> {
    if op == Operation::CreateBucket {
        let config = small_body(body).await?;
        xml::parse_create_bucket_configuration(&config)?;
        s.buckets.create(&s.node, bucket).await?;
        let mut r = StatusCode::OK.into_response();
        if let Ok(v) = HeaderValue::from_str(&format!("/{bucket}")) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return Ok(r);
    }
    if !s.buckets.exists(&s.node, bucket) {
        return Err(no_such_bucket(bucket));
    }
    match op {
        Operation::HeadBucket => Ok(StatusCode::OK.into_response()),
        Operation::DeleteBucket => {
            if !s
                .objects()
                .bucket_is_empty(bucket)
                .await
                .map_err(|e| object_error(e, None))?
            {
                return Err(invalid(
                    S3Code::BucketNotEmpty,
                    "The bucket you tried to delete is not empty",
                ));
            }
            s.buckets.delete(&s.node, bucket).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Operation::DeleteObjects => delete_objects(s, req, bucket, body).await,
        Operation::GetBucketLocation => {
            Ok(xml_response(StatusCode::OK, xml::location_constraint(None)))
        }
        Operation::ListMultipartUploads => list_uploads(s, req, bucket).await,
        Operation::ListObjectsV2 => list_objects_v2(s, req, bucket).await,
        Operation::ListObjectsV1 => Err(invalid(
            S3Code::NotImplemented,
            "ListObjects (v1) is not supported: use ListObjectsV2 (list-type=2; boto3 \
             list_objects_v2, aws s3 ls, aws s3api list-objects-v2)",
        )),
        _ => Err(method_not_allowed()),
    }
}

async fn list_objects_v2(s: &S3State, req: &Req, bucket: &str) -> Result<Response, S3Error> {
    let p = names::parse_list_objects_v2(req.raw_query.as_deref())?;
    let page = scan_objects_v2(s, &p, bucket).await?;
    let result = xml::ListObjectsV2Result {
        name: bucket.to_owned(),
        prefix: p.prefix.clone(),
        delimiter: p.delimiter.clone(),
        max_keys: p.max_keys,
        is_truncated: page.truncated,
        continuation_token: p.continuation_token.clone(),
        next_continuation_token: page
            .truncated
            .then(|| {
                page.last_token
                    .map(|k| names::continuation_token_encode(&k))
            })
            .flatten(),
        start_after: p.start_after.clone(),
        contents: page.contents,
        common_prefixes: page.prefixes,
        encoding_url: p.encoding_url,
    };
    Ok(xml_response(StatusCode::OK, result.to_xml()))
}

/// One page of a ListObjectsV2 listing.
#[derive(Default)]
struct ObjectsPage {
    contents: Vec<xml::ObjectInfo>,
    prefixes: Vec<String>,
    /// Whether more may follow.
    truncated: bool,
    /// What the continuation token names: the last key or common prefix listed.
    last_token: Option<String>,
}

/// The page of keys and common prefixes a ListObjectsV2 request asks for: `max-keys` of
/// them, or as many as [`LIST_BUDGET`] finds (the page is then truncated, its token going on
/// from there, as when `max-keys` ends it).
async fn scan_objects_v2(
    s: &S3State,
    p: &names::ListObjectsV2Params,
    bucket: &str,
) -> Result<ObjectsPage, S3Error> {
    let max = p.max_keys as usize;
    let mut page = ObjectsPage::default();
    if max == 0 {
        return Ok(page);
    }
    let mut budget = LIST_BUDGET;
    let mut after: Option<Vec<u8>> = resume_point(p);
    // The common prefix last rolled up: the keys under it that follow are passed over.
    let mut rolled: Option<String> = None;
    'scan: loop {
        // Spent: the page ends here, truncated, once it has a token that moves on (keys that
        // are not UTF-8, and so have none, are passed over whatever it costs).
        if budget.exhausted() && page.last_token.is_some() {
            page.truncated = true;
            break;
        }
        // One more than the page still takes, to tell whether anything follows it.
        let listed = page.contents.len() + page.prefixes.len();
        let want = budget.call((max.saturating_sub(listed) + 1).min(1001));
        let (entries, more) = s
            .objects()
            .list(bucket, p.prefix.as_bytes(), after.as_deref(), want)
            .await
            .map_err(|e| object_error(e, None))?;
        for e in entries {
            if rolled
                .as_ref()
                .is_some_and(|cp| e.key.starts_with(cp.as_bytes()))
            {
                continue;
            }
            let Ok(key) = String::from_utf8(e.key.to_vec()) else {
                // A key written through another front end that is not UTF-8: S3 cannot name it.
                after = Some(e.key.to_vec());
                continue;
            };
            if page.contents.len() + page.prefixes.len() >= max {
                page.truncated = true;
                break 'scan;
            }
            if let Some(d) = &p.delimiter
                && let Some(pos) = key
                    .get(p.prefix.len()..)
                    .and_then(|rest| rest.find(d.as_str()))
            {
                let cp = key[..p.prefix.len() + pos + d.len()].to_owned();
                // Everything under this prefix sorts before `cp ‖ 0xFF`: list from there.
                after = Some(past_prefix(&cp));
                page.last_token = Some(format!("{cp}{PREFIX_MARK}"));
                page.prefixes.push(cp.clone());
                rolled = Some(cp);
                continue;
            }
            after = Some(key.as_bytes().to_vec());
            page.last_token = Some(key.clone());
            page.contents.push(xml::ObjectInfo {
                key,
                last_modified_ms: e.modified_ms,
                etag: e.etag,
                size: e.size,
                owner: p.fetch_owner.then(owner),
            });
        }
        if !more {
            break;
        }
    }
    Ok(page)
}

/// What a continuation token ends with when it names a common prefix (`cp` + this). The next
/// page starts at `cp ‖ 0xFF`, which a token (UTF-8) cannot hold; [`resume_point`] turns the
/// token back into it.
const PREFIX_MARK: char = '\u{10FFFF}';

/// The key after which keys under common prefix `cp` end: `cp ‖ 0xFF` (no UTF-8 key holds
/// byte 0xFF).
fn past_prefix(cp: &str) -> Vec<u8> {
    let mut k = cp.as_bytes().to_vec();
    k.push(0xFF);
    k
}

/// Where a ListObjectsV2 request resumes: after the later of its continuation point and
/// `start-after`; a continuation token naming a common prefix resumes after every key under
/// it (keys under it that themselves go on with U+10FFFF sort after the token's own bytes, and
/// would otherwise return the prefix again).
fn resume_point(p: &names::ListObjectsV2Params) -> Option<Vec<u8>> {
    let continued = p.continue_after.as_deref().map(|token| {
        let rolled = token.strip_suffix(PREFIX_MARK).filter(|cp| {
            // A common prefix of this listing: the prefix, then up to the first delimiter.
            let rest = cp.strip_prefix(p.prefix.as_str()).unwrap_or_default();
            p.delimiter
                .as_deref()
                .is_some_and(|d| rest.find(d).map(|pos| pos + d.len()) == Some(rest.len()))
        });
        match rolled {
            Some(cp) => past_prefix(cp),
            None => token.as_bytes().to_vec(),
        }
    });
    let start_after = p.start_after.as_ref().map(|a| a.as_bytes().to_vec());
    continued.max(start_after)
}

/// ListMultipartUploads: a page of the bucket's open uploads (`max-uploads`, at most 1000)
/// whose keys start with `prefix`, those going on to a `delimiter` rolled into common
/// prefixes. Pages follow upload ids, the order uploads are stored in: `upload-id-marker`
/// (with `key-marker`, which is only echoed) resumes after an upload, and a truncated page
/// names the next markers.
async fn list_uploads(s: &S3State, req: &Req, bucket: &str) -> Result<Response, S3Error> {
    let max = query_u32(req, "max-uploads", 1000)?.min(1000);
    let upload_id_marker = req.q("upload-id-marker").unwrap_or_default();
    let after = match upload_id_marker {
        "" => None,
        m => Some(parse_upload_id(m).ok_or_else(|| {
            invalid(
                S3Code::InvalidArgument,
                "upload-id-marker must be an upload id as ListMultipartUploads returned it",
            )
        })?),
    };
    let key_marker = req.q("key-marker").unwrap_or_default();
    let prefix = req.q("prefix").unwrap_or_default();
    if prefix.len() > 1024 {
        return Err(invalid(
            S3Code::KeyTooLongError,
            "prefix is longer than 1024 bytes",
        ));
    }
    let delimiter = req.q("delimiter").filter(|d| !d.is_empty());
    if delimiter.is_some_and(|d| d.len() > 1024) {
        return Err(invalid(S3Code::InvalidArgument, "delimiter is too long"));
    }
    let mut budget = LIST_BUDGET;
    let page = s
        .objects()
        .list_uploads(
            bucket,
            prefix.as_bytes(),
            after,
            max.max(1) as usize,
            &mut budget,
        )
        .await
        .map_err(|e| object_error(e, None))?;
    let key_of = |key: &[u8]| String::from_utf8_lossy(key).into_owned();
    // With a delimiter, uploads whose keys go on past the prefix to a delimiter are shown as
    // that common prefix instead (each once per page: pages follow upload ids, not keys).
    let mut common_prefixes = std::collections::BTreeSet::new();
    let mut uploads = Vec::new();
    for (key, id, ms) in &page.uploads {
        let key = key_of(key);
        if let Some(d) = delimiter
            && let Some(pos) = key.get(prefix.len()..).and_then(|rest| rest.find(d))
        {
            common_prefixes.insert(key[..prefix.len() + pos + d.len()].to_owned());
            continue;
        }
        uploads.push(xml::UploadInfo {
            key,
            upload_id: format_upload_id(*id),
            initiated_ms: *ms,
        });
    }
    let next_key = page
        .uploads
        .last()
        .map_or_else(|| key_marker.to_owned(), |(key, _, _)| key_of(key));
    let result = xml::ListMultipartUploadsResult {
        bucket: bucket.to_owned(),
        key_marker: key_marker.to_owned(),
        upload_id_marker: upload_id_marker.to_owned(),
        next_key_marker: page.next.map(|_| next_key),
        next_upload_id_marker: page.next.map(format_upload_id),
        prefix: prefix.to_owned(),
        delimiter: delimiter.map(str::to_owned),
        max_uploads: max,
        is_truncated: page.next.is_some(),
        uploads,
        common_prefixes: common_prefixes.into_iter().collect(),
    };
    Ok(xml_response(StatusCode::OK, result.to_xml()))
}

async fn delete_objects(
    s: &S3State,
    req: &Req,
    bucket: &str,
    body: Body,
) -> Result<Response, S3Error> {
    let body = small_body(body).await?;
    let request = xml::parse_delete(&body)?;
    let mut outcomes = Vec::with_capacity(request.objects.len());
    for o in request.objects {
        let allowed = req.permit(&crate::http_acl::AsCommand::on_object(
            "DEL",
            bucket,
            o.key.as_bytes(),
        ));
        let deleted = match allowed {
            Ok(()) => s
                .objects()
                .delete(bucket, o.key.as_bytes())
                .await
                .map_err(|e| object_error(e, None)),
            Err(e) => Err(e),
        };
        outcomes.push(match deleted {
            Ok(()) => xml::DeleteOutcome::Deleted {
                key: o.key,
                version_id: o.version_id,
            },
            Err(e) => xml::DeleteOutcome::Error {
                key: o.key,
                version_id: o.version_id,
                code: e.code,
                message: e.message,
            },
        });
    }
    Ok(xml_response(
        StatusCode::OK,
        xml::delete_result(&outcomes, request.quiet),
    ))
}

async fn object_op(
    s: &S3State,
    req: &Req,
    op: Operation,
    bucket: &str,
    key: &str,
    body: Body,
) -> Result<Response, S3Error> {
    let objects = s.objects();
    let slot = Slot::default();
    let err = |e: ObjectError| object_error(e, Some(&slot));
    let kb = key.as_bytes();
    match op {
        Operation::ListParts => list_parts(s, req, bucket, key).await,
        Operation::GetObject | Operation::HeadObject => get_object(s, req, bucket, key).await,
        Operation::UploadPartCopy => Err(invalid(
            S3Code::NotImplemented,
            "UploadPartCopy is not supported: copy with CopyObject, or upload the part",
        )),
        Operation::UploadPart => {
            let id = upload_id(req)?;
            let number = names::parse_part_number(req.q("partNumber").unwrap_or(""))?;
            let md5 = content_md5(req)?;
            let stream = body_stream(req, body, slot.clone())?;
            let etag = objects
                .upload_part(bucket, kb, id, number, stream, md5)
                .await
                .map_err(err)?;
            Ok(etag_response(StatusCode::OK, &etag))
        }
        Operation::CopyObject => {
            let src = names::parse_copy_source(
                req.header("x-amz-copy-source")
                    .unwrap_or_default()
                    .as_bytes(),
            )?;
            if src.version_id.as_deref().is_some_and(|v| v != "null") {
                return Err(invalid(
                    S3Code::InvalidArgument,
                    "Invalid version id specified: the versionId of x-amz-copy-source must be \
                     'null' (Meridian's buckets are not versioned)",
                ));
            }
            if !s.buckets.exists(&s.node, &src.bucket) {
                return Err(no_such_bucket(&src.bucket));
            }
            req.permit(&crate::http_acl::AsCommand::on_object(
                "GET",
                &src.bucket,
                src.key.as_bytes(),
            ))?;
            let replace = req
                .header("x-amz-metadata-directive")
                .is_some_and(|d| d.eq_ignore_ascii_case("REPLACE"));
            let meta = if replace {
                Some(object_meta(req)?)
            } else {
                None
            };
            let m = objects
                .copy((&src.bucket, src.key.as_bytes()), (bucket, kb), meta)
                .await
                .map_err(err)?;
            Ok(xml_response(
                StatusCode::OK,
                xml::copy_object_result(&m.meta.s3_etag, m.created_us / 1000),
            ))
        }
        Operation::PutObject => {
            let meta = object_meta(req)?;
            let md5 = content_md5(req)?;
            let stream = body_stream(req, body, slot.clone())?;
            let m = objects
                .put(bucket, kb, stream, meta, md5)
                .await
                .map_err(err)?;
            let mut r = etag_response(StatusCode::OK, &m.meta.s3_etag);
            if let Ok(v) = HeaderValue::from_str(&m.blake3_hex()) {
                r.headers_mut().insert("x-meridian-blake3", v);
            }
            Ok(r)
        }
        Operation::AbortMultipartUpload => {
            let id = upload_id(req)?;
            objects.abort_upload(bucket, kb, id).await.map_err(err)?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Operation::DeleteObject => {
            objects.delete(bucket, kb).await.map_err(err)?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Operation::CreateMultipartUpload => {
            let meta = object_meta(req)?;
            let id = objects.create_upload(bucket, kb, meta).await.map_err(err)?;
            Ok(xml_response(
                StatusCode::OK,
                xml::initiate_multipart_upload(bucket, key, &format_upload_id(id)),
            ))
        }
        Operation::CompleteMultipartUpload => {
            let id = upload_id(req)?;
            let body = small_body(body).await?;
            let parts: Vec<(u32, String)> = xml::parse_complete_multipart_upload(&body)?
                .into_iter()
                .map(|p| (p.part_number, p.etag))
                .collect();
            let m = objects
                .complete_upload(bucket, kb, id, &parts)
                .await
                .map_err(err)?;
            let location = format!("/{bucket}/{}", xml::url_encode_key(key));
            Ok(xml_response(
                StatusCode::OK,
                xml::complete_multipart_upload(&location, bucket, key, &m.meta.s3_etag),
            ))
        }
        _ => Err(method_not_allowed()),
    }
}

/// Query parameter `name` as a whole number, `default` when it is absent or empty.
fn query_u32(req: &Req, name: &str, default: u32) -> Result<u32, S3Error> {
    match req.q(name) {
        Some(v) if !v.is_empty() => v.parse().map_err(|_| {
            invalid(
                S3Code::InvalidArgument,
                format!("{name} must be an integer"),
            )
        }),
        _ => Ok(default),
    }
}

fn upload_id(req: &Req) -> Result<u128, S3Error> {
    let raw = names::parse_upload_id(req.q("uploadId").unwrap_or(""))?;
    parse_upload_id(raw).ok_or_else(|| {
        invalid(
            S3Code::NoSuchUpload,
            "The specified multipart upload does not exist.",
        )
    })
}

fn etag_response(status: StatusCode, etag: &str) -> Response {
    let mut r = status.into_response();
    if let Ok(v) = HeaderValue::from_str(etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

/// Content type and `x-amz-meta-*` of an upload.
fn object_meta(req: &Req) -> Result<ObjectMeta, S3Error> {
    let user = names::collect_user_metadata(&req.header_list())?;
    let content_type = req
        .header("content-type")
        .filter(|t| t.len() <= 256)
        .map(str::to_owned);
    Ok(ObjectMeta {
        content_type,
        user,
        s3_etag: String::new(),
    })
}

fn content_md5(req: &Req) -> Result<Option<[u8; 16]>, S3Error> {
    use base64::Engine;
    let Some(v) = req.header("content-md5") else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.trim())
        .ok()
        .and_then(|b| <[u8; 16]>::try_from(b).ok());
    bytes.map(Some).ok_or_else(|| {
        invalid(
            S3Code::InvalidDigest,
            "The Content-MD5 you specified was invalid.",
        )
    })
}

/// The request body as the object's bytes: aws-chunked decoded (chunk signatures checked),
/// and at the end the signed SHA-256, the `x-amz-checksum-*` header and the chunked
/// trailers verified. A failure is recorded in `slot` (the precise S3 error) and ends the
/// stream with an error, so nothing is committed.
fn body_stream(req: &Req, body: Body, slot: Slot<S3Error>) -> Result<ByteStream, S3Error> {
    let headers = req.header_list();
    let mode = match &req.auth {
        Some(a) => a.payload,
        None => match req.header("x-amz-content-sha256") {
            Some(v) => PayloadMode::parse(v)?,
            None => PayloadMode::Unsigned,
        },
    };
    let decoder = if mode.is_streaming() {
        let cfg = match &req.auth {
            Some(a) => ChunkedConfig::for_request(a, &headers)?,
            None => {
                let PayloadMode::Streaming { trailer, .. } = mode else {
                    return Err(internal("streaming mode expected"));
                };
                ChunkedConfig {
                    signing: None,
                    trailer,
                    trailer_checksum: match req.header("x-amz-trailer") {
                        Some(v) => Some(ChecksumAlgorithm::from_trailer_header(v.as_bytes())?),
                        None => None,
                    },
                    ..ChunkedConfig::default()
                }
            }
        };
        Some(ChunkedDecoder::new(cfg))
    } else {
        None
    };
    let sha = match mode {
        PayloadMode::Sha256(h) => Some(ContentSha256Verifier::new(h)),
        _ => None,
    };
    let checksum = if mode.is_streaming() {
        None
    } else {
        ChecksumVerifier::from_headers(&headers)?
    };
    let check = S3BodyCheck {
        decoder,
        sha,
        checksum,
    };
    Ok(body::request_stream(body, check, slot))
}

/// What the S3 endpoint does to a request body: aws-chunked decoding, and the signed SHA-256
/// and `x-amz-checksum-*` checks.
struct S3BodyCheck {
    decoder: Option<ChunkedDecoder>,
    sha: Option<ContentSha256Verifier>,
    checksum: Option<ChecksumVerifier>,
}

impl BodyCheck for S3BodyCheck {
    type Error = S3Error;

    fn take(&mut self, bytes: Bytes, ready: &mut VecDeque<Bytes>) -> Result<(), S3Error> {
        let mut out = Vec::new();
        match &mut self.decoder {
            Some(d) => d.push(bytes, &mut out)?,
            None => out.push(bytes),
        }
        for b in out {
            if let Some(s) = &mut self.sha {
                s.update(&b);
            }
            if let Some(c) = &mut self.checksum {
                c.update(&b);
            }
            ready.push_back(b);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), S3Error> {
        if let Some(d) = self.decoder.take() {
            d.finish()?;
        }
        if let Some(s) = self.sha.take() {
            s.finish()?;
        }
        if let Some(c) = self.checksum.take() {
            c.finish()?;
        }
        Ok(())
    }

    fn unreadable(&self, e: axum::Error) -> S3Error {
        invalid(S3Code::IncompleteBody, format!("reading the body: {e}"))
    }

    fn message(e: &S3Error) -> String {
        e.message.clone()
    }
}

async fn get_object(s: &S3State, req: &Req, bucket: &str, key: &str) -> Result<Response, S3Error> {
    let objects = s.objects();
    let head = objects
        .head(bucket, key.as_bytes())
        .await
        .map_err(|e| object_error(e, None))?;
    let m = head.manifest.clone();
    let etag = m.meta.s3_etag.clone();
    let matches = |list: &str| {
        list.split(',')
            .map(str::trim)
            .any(|t| t == "*" || xml::trim_etag(t) == xml::trim_etag(&etag))
    };
    if let Some(im) = req.header("if-match")
        && !matches(im)
    {
        return Err(invalid(
            S3Code::PreconditionFailed,
            "At least one of the pre-conditions you specified did not hold",
        ));
    }
    let mut headers = HeaderMap::new();
    let put = |h: &mut HeaderMap, name: &'static str, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(name, v);
        }
    };
    put(&mut headers, "etag", &etag);
    put(
        &mut headers,
        "last-modified",
        &xml::http_date(m.created_us / 1_000_000),
    );
    put(&mut headers, "accept-ranges", "bytes");
    put(&mut headers, "x-meridian-blake3", &m.blake3_hex());
    put(
        &mut headers,
        "content-type",
        m.meta
            .content_type
            .as_deref()
            .unwrap_or("binary/octet-stream"),
    );
    for (k, v) in &m.meta.user {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(format!("x-amz-meta-{k}").as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.insert(n, v);
        }
    }
    if let Some(inm) = req.header("if-none-match")
        && matches(inm)
    {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        r.headers_mut().extend(headers);
        return Ok(r);
    }
    let size = m.size;
    let range = req.header("range").and_then(parse_range);
    let (status, first, last) = match range {
        Some(spec) => match spec.resolve(size) {
            Ok((a, b)) => {
                put(&mut headers, "content-range", &content_range(a, b, size));
                (StatusCode::PARTIAL_CONTENT, a, b)
            }
            Err(u) => {
                let e = invalid(
                    S3Code::InvalidRange,
                    "The requested range is not satisfiable",
                );
                let mut r = error_response(e, "", false);
                put(r.headers_mut(), "content-range", &u.content_range());
                return Ok(r);
            }
        },
        None => (StatusCode::OK, 0, size.saturating_sub(1)),
    };
    let len = body::span_len(size, (first, last));
    put(&mut headers, "content-length", &len.to_string());
    let headers_only = req.method == Method::HEAD;
    let body = body::object_body(
        objects,
        bucket,
        key.as_bytes(),
        &head,
        (first, last),
        headers_only,
    )
    .await
    .map_err(|e| object_error(e, None))?;
    let mut r = (status, body).into_response();
    r.headers_mut().extend(headers);
    Ok(r)
}

async fn list_parts(s: &S3State, req: &Req, bucket: &str, key: &str) -> Result<Response, S3Error> {
    let id = upload_id(req)?;
    let marker = query_u32(req, "part-number-marker", 0)?;
    let max = query_u32(req, "max-parts", 1000)?.min(1000);
    let (parts, more) = s
        .objects()
        .list_parts(bucket, key.as_bytes(), id, marker, max.max(1) as usize)
        .await
        .map_err(|e| object_error(e, None))?;
    let result = xml::ListPartsResult {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        upload_id: format_upload_id(id),
        part_number_marker: marker,
        next_part_number_marker: parts.last().map(|p| p.number),
        max_parts: max,
        is_truncated: more,
        parts: parts
            .into_iter()
            .map(|p| xml::PartInfo {
                part_number: p.number,
                last_modified_ms: p.modified_ms,
                etag: p.etag,
                size: p.size,
            })
            .collect(),
        owner: Some(owner()),
    };
    Ok(xml_response(StatusCode::OK, result.to_xml()))
}

/// The S3 error of a failed object operation (`slot`: what the body stream recorded).
fn object_error(e: ObjectError, slot: Option<&Slot<S3Error>>) -> S3Error {
    match e {
        ObjectError::NoSuchKey => invalid(S3Code::NoSuchKey, "The specified key does not exist."),
        ObjectError::NoSuchUpload => invalid(
            S3Code::NoSuchUpload,
            "The specified multipart upload does not exist. The upload ID may be invalid, or \
             the upload may have been aborted or completed.",
        ),
        ObjectError::InvalidPart(m) => invalid(S3Code::InvalidPart, m),
        ObjectError::InvalidPartOrder => invalid(
            S3Code::InvalidPartOrder,
            "The list of parts was not in ascending order.",
        ),
        ObjectError::EntityTooSmall { .. } => invalid(S3Code::EntityTooSmall, e.to_string()),
        ObjectError::TooLarge { .. } => invalid(S3Code::EntityTooLarge, e.to_string()),
        ObjectError::Body(m) => {
            body::recorded(slot).unwrap_or_else(|| invalid(S3Code::IncompleteBody, m))
        }
        ObjectError::BadDigest(_) => invalid(
            S3Code::BadDigest,
            "The Content-MD5 you specified did not match what we received.",
        ),
        ObjectError::TooManyTransfers(t) => invalid(S3Code::SlowDown, t.to_string()),
        ObjectError::Replication(r) => replication_error(&r),
        ObjectError::Blob(b) => internal(b.to_string()),
        ObjectError::Keyspace(k) => internal(k),
        ObjectError::Unsupported(m) => invalid(S3Code::NotImplemented, m),
    }
}

fn replication_error(e: &ReplicationError) -> S3Error {
    let code = match e.class() {
        ErrorClass::Overload => S3Code::SlowDown,
        // A full disk resumes by itself: clients that back off and retry get through.
        ErrorClass::Unavailable
        | ErrorClass::Timeout
        | ErrorClass::DiskFull
        | ErrorClass::Moving => S3Code::ServiceUnavailable,
        ErrorClass::BadRequest | ErrorClass::Conflict => S3Code::InvalidRequest,
        ErrorClass::TooLarge => S3Code::EntityTooLarge,
        ErrorClass::Internal => S3Code::InternalError,
    };
    S3Error::new(code, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_over_capacity_response_is_well_formed() {
        let text = std::str::from_utf8(OVER_CAPACITY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, body.len());
        assert!(body.contains("<Code>SlowDown</Code>"));
    }
}
