//! Fuzzes the HTTP API's request handling in process: arbitrary method, path, query, headers
//! and body through the node's whole axum `Router` (`http::router`: routing, the bearer gate,
//! body limits, key paths, JSON bodies, the blob routes), over one in-memory node.
//!
//! Properties: no panic, and no 5xx answer but 501 and 503 (a malformed request is the
//! client's error; the in-memory node has no storage that can fail).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use meridian_fuzz::{FuzzRequest, PASSWORD, with_driver};

#[derive(Debug, Arbitrary)]
struct Input {
    /// Send the right bearer token, so the fuzzer reaches past the gate.
    authorized: bool,
    request: FuzzRequest,
}

fuzz_target!(|input: Input| {
    let mut extra = Vec::new();
    if input.authorized {
        extra.push((
            "authorization".to_string(),
            format!("Bearer {PASSWORD}").into_bytes(),
        ));
    }
    let Some(req) = input.request.build(&extra, input.request.body.clone()) else {
        return;
    };
    let (status, body) = with_driver(meridian_server::http::router, |d| d.send(req));
    assert!(
        !status.is_server_error() || matches!(status.as_u16(), 501 | 503),
        "{status} for {input:?}: {}",
        String::from_utf8_lossy(&body)
    );
});
