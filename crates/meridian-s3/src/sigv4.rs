//! AWS Signature Version 4 verification (and signing) for S3.
//!
//! [`verify`] authenticates a request signed either with an
//! `Authorization: AWS4-HMAC-SHA256 …` header or as a presigned URL (`X-Amz-*` query
//! parameters). It rebuilds the canonical request exactly as AWS specifies for S3 (the
//! path is canonicalized byte by byte but neither decoded-and-normalized nor
//! double-encoded; query parameters are decoded, re-encoded with `UriEncode` and sorted
//! by name then value; signed header values are trimmed with inner whitespace runs
//! collapsed), derives the signing key, and compares signatures in constant time.
//!
//! Guarantees: no panics on any input; every input is length-bounded before it is
//! processed; a malformed request never reaches the signature check (it fails with
//! `AuthorizationHeaderMalformed`, `AuthorizationQueryParametersError`,
//! `InvalidArgument` or `InvalidRequest` naming the field); the request time must be
//! within 15 minutes of `now` (`RequestTimeTooSkewed`); presigned URLs last at most
//! 7 days. Verification does not check the body: [`Authenticated::payload`] tells the
//! server what to check as the body streams (see [`crate::chunked`] and
//! [`crate::checksum::ContentSha256Verifier`]).
//!
//! [`sign_request`] and [`presign`] produce signatures with the same canonicalization,
//! for tests and for clients written on top of this crate.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{S3Code, S3Error};
use crate::time::{format_amz_date, parse_amz_date, parse_http_date};
use crate::uri;

type HmacSha256 = Hmac<Sha256>;

/// The only signing algorithm supported.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// Hex SHA-256 of the empty string.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// `x-amz-content-sha256` value for an unsigned payload.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// `x-amz-content-sha256` value for signed aws-chunked bodies.
pub const STREAMING_PAYLOAD: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
/// `x-amz-content-sha256` value for signed aws-chunked bodies with signed trailers.
pub const STREAMING_PAYLOAD_TRAILER: &str = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
/// `x-amz-content-sha256` value for unsigned aws-chunked bodies with trailers.
pub const STREAMING_UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
/// Largest allowed difference between the request time and now, in seconds.
pub const MAX_SKEW_SECS: i64 = 15 * 60;
/// Largest allowed `X-Amz-Expires`, in seconds (7 days).
pub const MAX_PRESIGN_EXPIRES_SECS: u64 = 7 * 24 * 3600;

/// Longest accepted raw path, in bytes.
pub const MAX_PATH_LEN: usize = 8 * 1024;
/// Longest accepted raw query string, in bytes.
pub const MAX_QUERY_LEN: usize = 16 * 1024;
const MAX_QUERY_PARAMS: usize = 256;
const MAX_SIGNED_HEADERS: usize = 64;
const MAX_AUTH_HEADER_LEN: usize = 4 * 1024;
const MAX_SIGNED_HEADER_BYTES: usize = 64 * 1024;

/// One request header: lower-case (or any-case, compared case-insensitively) name and
/// raw value bytes.
pub type Header<'a> = (&'a str, &'a [u8]);

/// An access key and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (`AKIA…`).
    pub access_key: String,
    /// The secret access key.
    pub secret: String,
}

impl Credentials {
    /// Credentials from an access key and secret.
    pub fn new(access_key: impl Into<String>, secret: impl Into<String>) -> Self {
        Credentials {
            access_key: access_key.into(),
            secret: secret.into(),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Where [`verify`] finds the secret of an access key.
pub trait KeyLookup {
    /// The secret of `access_key`, or `None` if the key is unknown.
    fn secret(&self, access_key: &str) -> Option<String>;
}

impl<S: BuildHasher> KeyLookup for HashMap<String, String, S> {
    fn secret(&self, access_key: &str) -> Option<String> {
        self.get(access_key).cloned()
    }
}

impl KeyLookup for Credentials {
    fn secret(&self, access_key: &str) -> Option<String> {
        (self.access_key == access_key).then(|| self.secret.clone())
    }
}

impl<T: KeyLookup + ?Sized> KeyLookup for &T {
    fn secret(&self, access_key: &str) -> Option<String> {
        (**self).secret(access_key)
    }
}

/// The parts of an HTTP request that SigV4 covers.
#[derive(Debug, Clone, Copy)]
pub struct RequestParts<'a> {
    /// The method (`GET`, `PUT`, …), as sent.
    pub method: &'a str,
    /// The path as sent on the wire, still percent-encoded (`/bucket/my%20key`).
    pub raw_path: &'a str,
    /// The query string as sent, without the `?`; `None` if there is none.
    pub raw_query: Option<&'a str>,
    /// All request headers. Names are matched case-insensitively; a repeated header's
    /// values are joined with `,` in order, as SigV4 specifies. Over HTTP/2 the server
    /// must add `host` from the `:authority` pseudo-header.
    pub headers: &'a [Header<'a>],
}

/// How the request body is protected, from `x-amz-content-sha256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadMode {
    /// The body's SHA-256 was signed: the server must hash the body and compare at the
    /// end (`XAmzContentSHA256Mismatch`).
    Sha256([u8; 32]),
    /// `UNSIGNED-PAYLOAD`: the body is not covered by the signature.
    Unsigned,
    /// An `aws-chunked` body: `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` (signed, no trailer),
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER` (signed, trailer) or
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER` (unsigned, trailer).
    Streaming {
        /// Each chunk carries a chained signature.
        signed: bool,
        /// Trailing headers (a checksum, and its signature when `signed`) follow the
        /// last chunk.
        trailer: bool,
    },
}

impl PayloadMode {
    /// Parses an `x-amz-content-sha256` value.
    pub fn parse(value: &str) -> Result<Self, S3Error> {
        match value {
            UNSIGNED_PAYLOAD => Ok(PayloadMode::Unsigned),
            STREAMING_PAYLOAD => Ok(PayloadMode::Streaming {
                signed: true,
                trailer: false,
            }),
            STREAMING_PAYLOAD_TRAILER => Ok(PayloadMode::Streaming {
                signed: true,
                trailer: true,
            }),
            STREAMING_UNSIGNED_TRAILER => Ok(PayloadMode::Streaming {
                signed: false,
                trailer: true,
            }),
            v if v.starts_with("STREAMING-") => Err(S3Error::new(
                S3Code::NotImplemented,
                format!("x-amz-content-sha256 value {v} is not supported"),
            )),
            v => {
                let mut out = [0u8; 32];
                match hex::decode_to_slice(v, &mut out) {
                    Ok(()) => Ok(PayloadMode::Sha256(out)),
                    Err(_) => Err(S3Error::invalid_argument(
                        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER), STREAMING-UNSIGNED-PAYLOAD-TRAILER or a valid sha256 value",
                    )),
                }
            }
        }
    }

    /// `true` for the aws-chunked modes (the body must go through
    /// [`crate::chunked::ChunkedDecoder`]).
    pub fn is_streaming(&self) -> bool {
        matches!(self, PayloadMode::Streaming { .. })
    }
}

/// A successfully authenticated request.
#[derive(Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The access key that signed the request.
    pub access_key: String,
    /// The region of the credential scope.
    pub region: String,
    /// The date of the credential scope, `yyyymmdd`.
    pub date: String,
    /// The request time in SigV4 form, `yyyymmddThhmmssZ` (used in chunk signatures).
    pub timestamp: String,
    /// The request time, Unix epoch seconds.
    pub request_time: i64,
    /// The credential scope, `yyyymmdd/region/s3/aws4_request`.
    pub scope: String,
    /// The derived signing key (secret: never log it).
    pub signing_key: [u8; 32],
    /// The request's signature in lower-case hex: the seed of aws-chunked chunk signatures.
    pub seed_signature: String,
    /// How the body is protected.
    pub payload: PayloadMode,
    /// Whether the request was a presigned URL (query authentication).
    pub presigned: bool,
}

impl fmt::Debug for Authenticated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticated")
            .field("access_key", &self.access_key)
            .field("region", &self.region)
            .field("timestamp", &self.timestamp)
            .field("scope", &self.scope)
            .field("signing_key", &"<redacted>")
            .field("seed_signature", &self.seed_signature)
            .field("payload", &self.payload)
            .field("presigned", &self.presigned)
            .finish()
    }
}

/// Which authentication a request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthKind {
    /// Neither an `Authorization` header nor a presigned URL's parameter (`X-Amz-Algorithm`,
    /// `X-Amz-Signature`, `X-Amz-Credential`, or Signature V2's `AWSAccessKeyId`).
    Anonymous,
    /// An `Authorization` header.
    Header,
    /// A presigned URL (or a query that claims one).
    Presigned,
}

/// Which authentication `parts` carries, without validating it.
pub fn auth_kind(parts: &RequestParts<'_>) -> AuthKind {
    if parts
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("authorization"))
    {
        AuthKind::Header
    } else if [
        "X-Amz-Algorithm",
        "X-Amz-Signature",
        "X-Amz-Credential",
        "AWSAccessKeyId",
    ]
    .iter()
    .any(|p| query_has_param(parts.raw_query, p))
    {
        AuthKind::Presigned
    } else {
        AuthKind::Anonymous
    }
}

fn query_has_param(raw_query: Option<&str>, name: &str) -> bool {
    raw_query.is_some_and(|q| {
        q.split('&')
            .any(|seg| seg.split_once('=').map_or(seg, |(n, _)| n) == name)
    })
}

/// HMAC-SHA256. HMAC accepts keys of any length, so key setup cannot fail; were it to,
/// the all-zero result fails every comparison (fail closed) rather than panicking.
pub(crate) fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().into()
        }
        Err(_) => [0u8; 32],
    }
}

/// Hex SHA-256 of `data`.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// The SigV4 signing key for `secret` on `date` (`yyyymmdd`) in `region`, service `s3`.
pub fn signing_key(secret: &str, date: &str, region: &str) -> [u8; 32] {
    let mut k = Vec::with_capacity(secret.len() + 4);
    k.extend_from_slice(b"AWS4");
    k.extend_from_slice(secret.as_bytes());
    let k_date = hmac_sha256(&k, date.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, b"s3");
    hmac_sha256(&k_service, b"aws4_request")
}

/// Formats Unix epoch seconds as SigV4's `yyyymmddThhmmssZ`.
pub fn amz_date(epoch_secs: i64) -> String {
    format_amz_date(epoch_secs)
}

/// Compares a claimed signature (lower-case hex) with a computed one in constant time.
pub(crate) fn signatures_match(computed: &[u8; 32], claimed: &[u8; 32]) -> bool {
    computed.ct_eq(claimed).into()
}

/// Decodes a 64-character lower-case hex signature.
pub(crate) fn parse_signature(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

// ---------------------------------------------------------------------------------------
// Canonical request.

fn canonical_uri(raw_path: &str) -> Result<String, S3Error> {
    if raw_path.len() > MAX_PATH_LEN {
        return Err(S3Error::new(
            S3Code::KeyTooLongError,
            "request path is too long",
        ));
    }
    if raw_path.is_empty() {
        return Ok("/".to_owned());
    }
    if !raw_path.starts_with('/') {
        return Err(S3Error::invalid_request("request path must start with '/'"));
    }
    uri::canonicalize_encoded_path(raw_path)
        .ok_or_else(|| S3Error::invalid_argument("request path has a malformed percent-escape"))
}

/// Decoded (name, value) pairs of a raw query, in order; empty segments are skipped.
/// A decoded query parameter: (name, value) bytes.
type RawParam = (Vec<u8>, Vec<u8>);

fn decode_query(raw_query: Option<&str>) -> Result<Vec<RawParam>, S3Error> {
    let Some(q) = raw_query else {
        return Ok(Vec::new());
    };
    if q.len() > MAX_QUERY_LEN {
        return Err(S3Error::invalid_argument("query string is too long"));
    }
    let mut out = Vec::new();
    for seg in q.split('&').filter(|s| !s.is_empty()) {
        if out.len() == MAX_QUERY_PARAMS {
            return Err(S3Error::invalid_argument("too many query parameters"));
        }
        let (n, v) = seg.split_once('=').unwrap_or((seg, ""));
        let name = uri::decode(n.as_bytes()).ok_or_else(|| {
            S3Error::invalid_argument("query parameter name has a malformed percent-escape")
        })?;
        let value = uri::decode(v.as_bytes()).ok_or_else(|| {
            S3Error::invalid_argument(format!(
                "query parameter {} has a malformed percent-escape",
                String::from_utf8_lossy(&name)
            ))
        })?;
        out.push((name, value));
    }
    Ok(out)
}

fn canonical_query(raw_query: Option<&str>, skip_signature: bool) -> Result<String, S3Error> {
    let mut pairs: Vec<(String, String)> = decode_query(raw_query)?
        .into_iter()
        .filter(|(n, _)| !(skip_signature && n == b"X-Amz-Signature"))
        .map(|(n, v)| (uri::encode(&n, false), uri::encode(&v, false)))
        .collect();
    pairs.sort();
    let mut out = String::new();
    for (i, (n, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(n);
        out.push('=');
        out.push_str(v);
    }
    Ok(out)
}

/// Appends a header value with leading/trailing whitespace removed and inner runs of
/// spaces and tabs collapsed to one space.
fn push_trimmed(out: &mut Vec<u8>, v: &[u8]) {
    let mut pending_space = false;
    let mut started = false;
    for &b in v {
        if b == b' ' || b == b'\t' {
            pending_space = started;
        } else {
            if pending_space {
                out.push(b' ');
                pending_space = false;
            }
            out.push(b);
            started = true;
        }
    }
}

/// Validates a `SignedHeaders` list: non-empty, lower-case tokens, strictly ascending,
/// at most 64, including `host`.
fn parse_signed_headers(s: &str, err: fn(String) -> S3Error) -> Result<Vec<&str>, S3Error> {
    let mut out: Vec<&str> = Vec::new();
    for name in s.split(';') {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Err(err(format!(
                "SignedHeaders has an invalid header name {name:?}"
            )));
        }
        if out.last().is_some_and(|prev| *prev >= name) {
            return Err(err(
                "SignedHeaders must be sorted and without duplicates".to_owned()
            ));
        }
        if out.len() == MAX_SIGNED_HEADERS {
            return Err(err("SignedHeaders lists too many headers".to_owned()));
        }
        out.push(name);
    }
    if !out.contains(&"host") {
        return Err(err("SignedHeaders must include host".to_owned()));
    }
    Ok(out)
}

fn canonical_headers(
    headers: &[Header<'_>],
    signed: &[&str],
    err: fn(String) -> S3Error,
) -> Result<Vec<u8>, S3Error> {
    let mut out = Vec::with_capacity(256);
    for name in signed {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        let mut found = false;
        for (_, v) in headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)) {
            if found {
                out.push(b',');
            }
            push_trimmed(&mut out, v);
            found = true;
        }
        if !found {
            return Err(err(format!(
                "signed header {name} is not present in the request"
            )));
        }
        out.push(b'\n');
        if out.len() > MAX_SIGNED_HEADER_BYTES {
            return Err(err("signed headers are too large".to_owned()));
        }
    }
    Ok(out)
}

/// Builds the canonical request.
fn canonical_request(
    parts: &RequestParts<'_>,
    signed: &[&str],
    payload_hash: &str,
    presigned: bool,
    err: fn(String) -> S3Error,
) -> Result<Vec<u8>, S3Error> {
    if parts.method.is_empty() || !parts.method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(S3Error::invalid_request("invalid HTTP method"));
    }
    let uri = canonical_uri(parts.raw_path)?;
    let query = canonical_query(parts.raw_query, presigned)?;
    let headers = canonical_headers(parts.headers, signed, err)?;
    let mut out = Vec::with_capacity(uri.len() + query.len() + headers.len() + 256);
    out.extend_from_slice(parts.method.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(uri.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(query.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&headers);
    out.push(b'\n');
    out.extend_from_slice(signed.join(";").as_bytes());
    out.push(b'\n');
    out.extend_from_slice(payload_hash.as_bytes());
    Ok(out)
}

fn string_to_sign(timestamp: &str, scope: &str, canonical_request: &[u8]) -> String {
    format!(
        "{ALGORITHM}\n{timestamp}\n{scope}\n{}",
        sha256_hex(canonical_request)
    )
}

// ---------------------------------------------------------------------------------------
// Credential scope.

struct Scope<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
}

fn parse_credential<'s>(s: &'s str, err: fn(String) -> S3Error) -> Result<Scope<'s>, S3Error> {
    let mut it = s.split('/');
    let (Some(ak), Some(date), Some(region), Some(service), Some(term), None) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) else {
        return Err(err(format!(
            "Credential must be <access-key>/<yyyymmdd>/<region>/s3/aws4_request, got {s:?}"
        )));
    };
    if ak.is_empty()
        || ak.len() > 128
        || !ak
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.+=@".contains(&b))
    {
        return Err(err("Credential has an invalid access key id".to_owned()));
    }
    if crate::time::parse_yyyymmdd(date).is_none() {
        return Err(err(format!("Credential has an invalid date {date:?}")));
    }
    if region.is_empty()
        || region.len() > 64
        || !region
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(err(format!("Credential has an invalid region {region:?}")));
    }
    if service != "s3" {
        return Err(err(format!(
            "Credential should be scoped to correct service: 's3', not {service:?}"
        )));
    }
    if term != "aws4_request" {
        return Err(err(
            "Credential should be scoped with a valid terminator: 'aws4_request'".to_owned(),
        ));
    }
    Ok(Scope {
        access_key: ak,
        date,
        region,
    })
}

// ---------------------------------------------------------------------------------------
// Verification.

struct ParsedAuth<'a> {
    credential: Scope<'a>,
    signed_headers: Vec<&'a str>,
    signature: [u8; 32],
}

fn parse_authorization(value: &[u8]) -> Result<ParsedAuth<'_>, S3Error> {
    if value.len() > MAX_AUTH_HEADER_LEN {
        return Err(S3Error::malformed_auth("Authorization header is too long"));
    }
    let v = std::str::from_utf8(value)
        .map_err(|_| S3Error::malformed_auth("Authorization header is not valid UTF-8"))?
        .trim();
    let Some(rest) = v.strip_prefix(ALGORITHM) else {
        if v.starts_with("AWS ") {
            return Err(S3Error::invalid_request(
                "Signature Version 2 is not supported; use AWS4-HMAC-SHA256",
            ));
        }
        return Err(S3Error::malformed_auth(
            "Authorization header must start with AWS4-HMAC-SHA256",
        ));
    };
    if !rest.starts_with([' ', '\t']) {
        return Err(S3Error::malformed_auth(
            "Authorization header must start with AWS4-HMAC-SHA256",
        ));
    }
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for comp in rest.split(',') {
        let comp = comp.trim();
        let (k, val) = comp.split_once('=').ok_or_else(|| {
            S3Error::malformed_auth(format!("Authorization component {comp:?} is not key=value"))
        })?;
        let slot = match k {
            "Credential" => &mut cred,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut sig,
            _ => {
                return Err(S3Error::malformed_auth(format!(
                    "Authorization header has an unknown component {k:?}"
                )));
            }
        };
        if slot.replace(val).is_some() {
            return Err(S3Error::malformed_auth(format!(
                "Authorization header repeats {k}"
            )));
        }
    }
    let cred =
        cred.ok_or_else(|| S3Error::malformed_auth("Authorization header lacks Credential"))?;
    let signed = signed
        .ok_or_else(|| S3Error::malformed_auth("Authorization header lacks SignedHeaders"))?;
    let sig = sig.ok_or_else(|| S3Error::malformed_auth("Authorization header lacks Signature"))?;
    Ok(ParsedAuth {
        credential: parse_credential(cred, S3Error::malformed_auth)?,
        signed_headers: parse_signed_headers(signed, S3Error::malformed_auth)?,
        signature: parse_signature(sig).ok_or_else(|| {
            S3Error::malformed_auth("Signature must be 64 lower-case hex characters")
        })?,
    })
}

/// The single value of header `name`; an error if it is repeated.
pub(crate) fn single_header<'a>(
    headers: &'a [Header<'a>],
    name: &str,
) -> Result<Option<&'a [u8]>, S3Error> {
    let mut found = None;
    for (n, v) in headers {
        if n.eq_ignore_ascii_case(name) {
            if found.is_some() {
                return Err(S3Error::invalid_argument(format!(
                    "header {name} is repeated"
                )));
            }
            found = Some(*v);
        }
    }
    Ok(found)
}

fn header_str<'a>(headers: &'a [Header<'a>], name: &str) -> Result<Option<&'a str>, S3Error> {
    match single_header(headers, name)? {
        None => Ok(None),
        Some(v) => std::str::from_utf8(v)
            .map(|s| Some(s.trim()))
            .map_err(|_| S3Error::invalid_argument(format!("header {name} is not valid UTF-8"))),
    }
}

/// Verifies the SigV4 signature of a request at time `now_epoch_secs`.
///
/// Errors: `AccessDenied` (anonymous, expired or not-yet-valid presigned URL),
/// `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AuthorizationHeaderMalformed`,
/// `AuthorizationQueryParametersError`, `RequestTimeTooSkewed`, `InvalidArgument`,
/// `InvalidRequest`, `NotImplemented` (unsupported streaming mode).
pub fn verify<K: KeyLookup + ?Sized>(
    parts: &RequestParts<'_>,
    keys: &K,
    now_epoch_secs: i64,
) -> Result<Authenticated, S3Error> {
    let header = single_header(parts.headers, "authorization")?;
    let presigned = query_has_param(parts.raw_query, "X-Amz-Algorithm");
    match (header, presigned) {
        (Some(_), true) => Err(S3Error::invalid_argument(
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the Authorization header should be specified",
        )),
        (Some(h), false) => verify_header(parts, h, keys, now_epoch_secs),
        (None, true) => verify_presigned(parts, keys, now_epoch_secs),
        (None, false) if query_has_param(parts.raw_query, "AWSAccessKeyId") => {
            Err(S3Error::access_denied(SIGV2_REFUSED))
        }
        (None, false) => Err(S3Error::access_denied("anonymous requests are not allowed")),
    }
}

/// The refusal of a Signature Version 2 request (`Authorization: AWS id:sig`, or a presigned
/// URL with `AWSAccessKeyId`): what boto3 presigns with by default in us-east-1.
const SIGV2_REFUSED: &str = "Signature Version 2 is not supported: sign with AWS Signature \
                             Version 4 (boto3: Config(signature_version='s3v4'))";

fn verify_header<K: KeyLookup + ?Sized>(
    parts: &RequestParts<'_>,
    auth: &[u8],
    keys: &K,
    now: i64,
) -> Result<Authenticated, S3Error> {
    if auth.starts_with(b"AWS ") {
        return Err(S3Error::new(S3Code::InvalidRequest, SIGV2_REFUSED));
    }
    let a = parse_authorization(auth)?;
    // The request time: x-amz-date if present, else Date; it must be signed.
    let (timestamp, request_time) = if let Some(d) = header_str(parts.headers, "x-amz-date")? {
        if !a.signed_headers.contains(&"x-amz-date") {
            return Err(S3Error::malformed_auth(
                "x-amz-date must be a signed header",
            ));
        }
        let t = parse_amz_date(d).ok_or_else(|| {
            S3Error::access_denied("x-amz-date must be in the form yyyymmddThhmmssZ")
        })?;
        (d.to_owned(), t)
    } else if let Some(d) = header_str(parts.headers, "date")? {
        if !a.signed_headers.contains(&"date") {
            return Err(S3Error::malformed_auth("date must be a signed header"));
        }
        let t = parse_http_date(d)
            .ok_or_else(|| S3Error::access_denied("Date header is not a valid HTTP date"))?;
        (format_amz_date(t), t)
    } else {
        return Err(S3Error::access_denied(
            "AWS authentication requires a valid Date or x-amz-date header",
        ));
    };
    if timestamp.get(..8) != Some(a.credential.date) {
        return Err(S3Error::malformed_auth(format!(
            "credential date {} does not match the request date {timestamp}",
            a.credential.date
        )));
    }
    let payload_hash = header_str(parts.headers, "x-amz-content-sha256")?.ok_or_else(|| {
        S3Error::invalid_request("Missing required header for this request: x-amz-content-sha256")
    })?;
    let payload = PayloadMode::parse(payload_hash)?;
    let secret = keys
        .secret(a.credential.access_key)
        .ok_or_else(|| S3Error::from_code(S3Code::InvalidAccessKeyId))?;
    if (request_time - now).abs() > MAX_SKEW_SECS {
        return Err(S3Error::new(
            S3Code::RequestTimeTooSkewed,
            format!("request time {timestamp} is more than 15 minutes from the server time"),
        ));
    }
    let creq = canonical_request(
        parts,
        &a.signed_headers,
        payload_hash,
        false,
        S3Error::malformed_auth,
    )?;
    finish(
        a.credential,
        &secret,
        timestamp,
        request_time,
        &creq,
        &a.signature,
        payload,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
fn finish(
    cred: Scope<'_>,
    secret: &str,
    timestamp: String,
    request_time: i64,
    creq: &[u8],
    claimed: &[u8; 32],
    payload: PayloadMode,
    presigned: bool,
) -> Result<Authenticated, S3Error> {
    let scope = format!("{}/{}/s3/aws4_request", cred.date, cred.region);
    let sts = string_to_sign(&timestamp, &scope, creq);
    let key = signing_key(secret, cred.date, cred.region);
    let computed = hmac_sha256(&key, sts.as_bytes());
    if !signatures_match(&computed, claimed) {
        return Err(S3Error::new(
            S3Code::SignatureDoesNotMatch,
            format!(
                "The request signature we calculated does not match the signature you provided. Check your key and signing method. StringToSign: {sts:?}"
            ),
        ));
    }
    Ok(Authenticated {
        access_key: cred.access_key.to_owned(),
        region: cred.region.to_owned(),
        date: cred.date.to_owned(),
        timestamp,
        request_time,
        scope,
        signing_key: key,
        seed_signature: hex::encode(computed),
        payload,
        presigned,
    })
}

fn verify_presigned<K: KeyLookup + ?Sized>(
    parts: &RequestParts<'_>,
    keys: &K,
    now: i64,
) -> Result<Authenticated, S3Error> {
    let pairs = decode_query(parts.raw_query)?;
    let mut params: [Option<String>; 7] = Default::default();
    const NAMES: [&str; 7] = [
        "X-Amz-Algorithm",
        "X-Amz-Credential",
        "X-Amz-Date",
        "X-Amz-Expires",
        "X-Amz-SignedHeaders",
        "X-Amz-Signature",
        "X-Amz-Content-Sha256",
    ];
    for (n, v) in &pairs {
        let known = NAMES
            .iter()
            .zip(params.iter_mut())
            .find(|(k, _)| k.as_bytes() == n.as_slice());
        if let Some((name, slot)) = known {
            let v = String::from_utf8(v.clone())
                .map_err(|_| S3Error::query_auth(format!("{name} is not valid UTF-8")))?;
            if slot.replace(v).is_some() {
                return Err(S3Error::query_auth(format!("{name} is repeated")));
            }
        }
    }
    let [alg, cred, date, expires, signed, sig, content] = params;
    let missing = |name: &str| {
        S3Error::query_auth(format!(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters; {name} is missing"
        ))
    };
    let alg = alg.ok_or_else(|| missing("X-Amz-Algorithm"))?;
    if alg != ALGORITHM {
        return Err(S3Error::query_auth(
            "X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"",
        ));
    }
    let cred = cred.ok_or_else(|| missing("X-Amz-Credential"))?;
    let date = date.ok_or_else(|| missing("X-Amz-Date"))?;
    let expires = expires.ok_or_else(|| missing("X-Amz-Expires"))?;
    let signed = signed.ok_or_else(|| missing("X-Amz-SignedHeaders"))?;
    let sig = sig.ok_or_else(|| missing("X-Amz-Signature"))?;
    let credential = parse_credential(&cred, S3Error::query_auth)?;
    let signed_headers = parse_signed_headers(&signed, S3Error::query_auth)?;
    let claimed = parse_signature(&sig).ok_or_else(|| {
        S3Error::query_auth("X-Amz-Signature must be 64 lower-case hex characters")
    })?;
    let request_time = parse_amz_date(&date).ok_or_else(|| {
        S3Error::query_auth(
            "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"",
        )
    })?;
    let expires_secs: u64 = if expires.is_empty()
        || expires.len() > 7
        || !expires.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(S3Error::query_auth("X-Amz-Expires should be a number"));
    } else {
        expires
            .parse()
            .map_err(|_| S3Error::query_auth("X-Amz-Expires should be a number"))?
    };
    if expires_secs == 0 {
        return Err(S3Error::query_auth(
            "X-Amz-Expires must be non-negative and non-zero",
        ));
    }
    if expires_secs > MAX_PRESIGN_EXPIRES_SECS {
        return Err(S3Error::query_auth(
            "X-Amz-Expires must be less than a week (in seconds) that is 604800",
        ));
    }
    if date.get(..8) != Some(credential.date) {
        return Err(S3Error::query_auth(format!(
            "credential date {} does not match X-Amz-Date {date}",
            credential.date
        )));
    }
    let payload_hash = content.unwrap_or_else(|| UNSIGNED_PAYLOAD.to_owned());
    let payload = PayloadMode::parse(&payload_hash)?;
    if payload.is_streaming() {
        return Err(S3Error::invalid_request(
            "presigned requests cannot use aws-chunked payloads",
        ));
    }
    let secret = keys
        .secret(credential.access_key)
        .ok_or_else(|| S3Error::from_code(S3Code::InvalidAccessKeyId))?;
    if request_time - now > MAX_SKEW_SECS {
        return Err(S3Error::access_denied("Request is not valid yet"));
    }
    // expires_secs <= 604800, so the sum cannot overflow for any parsed date.
    if now > request_time + expires_secs as i64 {
        return Err(S3Error::access_denied("Request has expired"));
    }
    let creq = canonical_request(
        parts,
        &signed_headers,
        &payload_hash,
        true,
        S3Error::query_auth,
    )?;
    finish(
        credential,
        &secret,
        date,
        request_time,
        &creq,
        &claimed,
        payload,
        true,
    )
}

// ---------------------------------------------------------------------------------------
// Signing.

/// What a signer needs besides the request.
#[derive(Debug, Clone, Copy)]
pub struct SigningParams<'a> {
    /// The credentials to sign with.
    pub credentials: &'a Credentials,
    /// The region of the credential scope.
    pub region: &'a str,
    /// The request time, `yyyymmddThhmmssZ` (see [`amz_date`]).
    pub timestamp: &'a str,
}

fn sign_common(
    parts: &RequestParts<'_>,
    params: &SigningParams<'_>,
    signed_headers: &[&str],
    payload_hash: &str,
    presigned: bool,
) -> Result<(String, String), S3Error> {
    let joined = signed_headers.join(";");
    let signed = parse_signed_headers(&joined, S3Error::invalid_argument)?;
    let date = params
        .timestamp
        .get(..8)
        .filter(|_| parse_amz_date(params.timestamp).is_some())
        .ok_or_else(|| S3Error::invalid_argument("timestamp must be yyyymmddThhmmssZ"))?;
    let scope = format!("{date}/{}/s3/aws4_request", params.region);
    let creq = canonical_request(
        parts,
        &signed,
        payload_hash,
        presigned,
        S3Error::invalid_argument,
    )?;
    let sts = string_to_sign(params.timestamp, &scope, &creq);
    let key = signing_key(&params.credentials.secret, date, params.region);
    Ok((scope, hex::encode(hmac_sha256(&key, sts.as_bytes()))))
}

/// Signs a request; returns the `Authorization` header value.
///
/// `parts.headers` must already hold every header in `signed_headers` (including
/// `host`, `x-amz-date` set to `params.timestamp` and `x-amz-content-sha256` set to
/// `payload_hash`); `signed_headers` are lower-case and sorted.
pub fn sign_request(
    parts: &RequestParts<'_>,
    params: &SigningParams<'_>,
    signed_headers: &[&str],
    payload_hash: &str,
) -> Result<String, S3Error> {
    let (scope, sig) = sign_common(parts, params, signed_headers, payload_hash, false)?;
    Ok(format!(
        "{ALGORITHM} Credential={}/{scope}, SignedHeaders={}, Signature={sig}",
        params.credentials.access_key,
        signed_headers.join(";")
    ))
}

/// Presigns a request valid for `expires_secs`; returns the complete raw query string
/// to send (`parts.raw_query` followed by the `X-Amz-*` parameters and the signature).
/// The payload is `UNSIGNED-PAYLOAD`.
pub fn presign(
    parts: &RequestParts<'_>,
    params: &SigningParams<'_>,
    expires_secs: u64,
    signed_headers: &[&str],
) -> Result<String, S3Error> {
    let date = params.timestamp.get(..8).unwrap_or_default();
    let cred = format!(
        "{}/{date}/{}/s3/aws4_request",
        params.credentials.access_key, params.region
    );
    let mut query = String::new();
    if let Some(q) = parts.raw_query.filter(|q| !q.is_empty()) {
        query.push_str(q);
        query.push('&');
    }
    query.push_str("X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=");
    query.push_str(&uri::encode(cred.as_bytes(), false));
    query.push_str("&X-Amz-Date=");
    query.push_str(&uri::encode(params.timestamp.as_bytes(), false));
    query.push_str(&format!(
        "&X-Amz-Expires={expires_secs}&X-Amz-SignedHeaders="
    ));
    query.push_str(&uri::encode(signed_headers.join(";").as_bytes(), false));
    let with = RequestParts {
        raw_query: Some(&query),
        ..*parts
    };
    let (_, sig) = sign_common(&with, params, signed_headers, UNSIGNED_PAYLOAD, true)?;
    query.push_str("&X-Amz-Signature=");
    query.push_str(&sig);
    Ok(query)
}

#[cfg(test)]
mod tests;
