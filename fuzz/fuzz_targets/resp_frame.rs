//! Fuzzes the RESP2/RESP3 value decoder (`resp::frame`: `frame_len`, `Frame::parse_with`,
//! `peek`) that reads replies from other nodes and scripts, with default and tiny limits.
//!
//! Properties: `frame_len` and `parse_with` agree on the value's length and never claim more
//! than the input; a shorter prefix of a value is never a complete value; `peek` answers on
//! every accepted value; encoding a parsed value and parsing it back is stable (RESP3 bytes
//! identical, RESP2 still parses).
#![no_main]

use arbitrary::Arbitrary;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use meridian_server::resp::Frame;
use meridian_server::resp::frame::{DecodeLimits, frame_len, peek};

#[derive(Debug, Arbitrary)]
struct Input {
    tiny_limits: bool,
    cuts: Vec<u16>,
    data: Vec<u8>,
}

fn limits(tiny: bool) -> DecodeLimits {
    if tiny {
        DecodeLimits {
            max_frame: 64,
            max_depth: 3,
        }
    } else {
        DecodeLimits::DEFAULT
    }
}

/// Encodes `f`, parses it back, and checks the round trip.
fn round_trip(f: &Frame) {
    let resp3 = f.to_bytes(true);
    let mut buf = BytesMut::from(&resp3[..]);
    let back = Frame::parse(&mut buf)
        .expect("own RESP3 encoding parses")
        .expect("own RESP3 encoding is complete");
    assert!(buf.is_empty(), "RESP3 re-parse left bytes");
    assert_eq!(back.to_bytes(true), resp3, "RESP3 encoding not stable");
    let mut buf = BytesMut::from(&f.to_bytes(false)[..]);
    assert!(
        matches!(Frame::parse(&mut buf), Ok(Some(_))),
        "own RESP2 encoding parses"
    );
}

fuzz_target!(|input: Input| {
    let limits = limits(input.tiny_limits);
    let data = &input.data[..];
    let len = frame_len(data, &limits);
    let mut buf = BytesMut::from(data);
    let parsed = Frame::parse_with(&mut buf, &limits);
    match (&len, &parsed) {
        (Ok(Some(n)), Ok(Some(f))) => {
            assert!(*n <= data.len());
            assert_eq!(
                buf.len(),
                data.len() - n,
                "parse consumed other than frame_len"
            );
            assert!(peek(data).is_some(), "peek refused an accepted value");
            for &c in &input.cuts {
                let cut = usize::from(c) % *n;
                assert!(!matches!(frame_len(&data[..cut], &limits), Ok(Some(_))));
            }
            round_trip(f);
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => assert_eq!(buf.len(), data.len()),
        _ => panic!("frame_len {len:?} but parse_with {parsed:?}"),
    }
});
