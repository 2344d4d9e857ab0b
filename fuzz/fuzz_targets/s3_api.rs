//! Fuzzes the S3 endpoint's request handling in process: arbitrary method, path, query,
//! headers and body through its axum `Router` (`s3::router`: SigV4 or anonymous access,
//! path-style bucket/key parsing, query sub-resources, routing, object and multipart
//! operations, range and conditional headers, XML bodies, aws-chunked bodies) over one
//! in-memory node. Optionally the driver signs the request with the node's key, as a client
//! would (header SigV4, a plain or an aws-chunked signed body), so the fuzzer gets past
//! authentication into the operations.
//!
//! Properties: no panic, and no 5xx answer but 501 (an operation Meridian does not
//! implement) and 503 (S3's retryable `SlowDown`/`ServiceUnavailable`).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use meridian_core::Clock;
use meridian_fuzz::{ACCESS_KEY, FuzzRequest, Headers, SECRET, with_driver};
use meridian_s3::chunked::{ChunkSigning, encode_aws_chunked};
use meridian_s3::sigv4::{self, STREAMING_PAYLOAD};
use meridian_s3::{Credentials, RequestParts, SigningParams};
use sha2::{Digest, Sha256};
use std::sync::Arc;

fn router(node: Arc<meridian_server::state::NodeState>) -> axum::Router {
    meridian_server::s3::router(node).expect("s3 router")
}

const REGION: &str = "us-east-1";

#[derive(Debug, Arbitrary)]
enum Signing {
    /// Sent as is (anonymous, or whatever the fuzzer put in its headers).
    None,
    /// Header SigV4 over the body's SHA-256.
    Plain,
    /// Header SigV4 with an aws-chunked body, the body cut at these lengths into chunks.
    Chunked(Vec<u8>),
}

#[derive(Debug, Arbitrary)]
struct Input {
    signing: Signing,
    request: FuzzRequest,
}

/// The signed headers and the body to send.
fn sign(input: &Input, now: i64) -> Option<(Headers, Vec<u8>)> {
    let body = &input.request.body;
    let (hash, chunks) = match &input.signing {
        Signing::None => return Some((Vec::new(), body.clone())),
        Signing::Plain => (hex::encode(Sha256::digest(body)), None),
        Signing::Chunked(cuts) => (STREAMING_PAYLOAD.to_string(), Some(cuts)),
    };
    let timestamp = sigv4::amz_date(now);
    let mut headers = vec![
        ("host".to_string(), b"localhost".to_vec()),
        (
            "x-amz-content-sha256".to_string(),
            hash.clone().into_bytes(),
        ),
        ("x-amz-date".to_string(), timestamp.clone().into_bytes()),
    ];
    if chunks.is_some() {
        let len = body.len().to_string().into_bytes();
        headers.push(("x-amz-decoded-content-length".to_string(), len));
    }
    let list: Vec<(&str, &[u8])> = headers.iter().map(|(n, v)| (n.as_str(), &v[..])).collect();
    let path = input.request.path_and_query();
    let (raw_path, raw_query) = match path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path.as_str(), None),
    };
    let parts = RequestParts {
        method: input.request.method.as_str(),
        raw_path,
        raw_query,
        headers: &list,
    };
    let credentials = Credentials::new(ACCESS_KEY, SECRET);
    let params = SigningParams {
        credentials: &credentials,
        region: REGION,
        timestamp: &timestamp,
    };
    let mut names: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    let auth = sigv4::sign_request(&parts, &params, &names, &hash).ok()?;
    let body = match chunks {
        None => body.clone(),
        Some(cuts) => {
            let signing = ChunkSigning {
                signing_key: sigv4::signing_key(SECRET, &timestamp[..8], REGION),
                timestamp: timestamp.clone(),
                scope: format!("{}/{REGION}/s3/aws4_request", &timestamp[..8]),
                seed_signature: auth.rsplit('=').next()?.to_string(),
            };
            let cuts: Vec<u16> = cuts.iter().map(|&c| u16::from(c)).collect();
            let pieces = meridian_fuzz::pieces(body, &cuts);
            encode_aws_chunked(&pieces, Some(&signing), None)
        }
    };
    headers.push(("authorization".to_string(), auth.into_bytes()));
    Some((headers, body))
}

fuzz_target!(|input: Input| {
    let sent = with_driver(router, |d| {
        let now = (d.node.clock.now().0 / 1_000_000) as i64;
        let (extra, body) = sign(&input, now)?;
        Some(d.send(input.request.build(&extra, body)?))
    });
    let Some((status, body)) = sent else {
        return;
    };
    assert!(
        !status.is_server_error() || matches!(status.as_u16(), 501 | 503),
        "{status} for {input:?}: {}",
        String::from_utf8_lossy(&body)
    );
});
