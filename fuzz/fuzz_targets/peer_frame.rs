//! Fuzzes the peer link's framing (`meridian_net::frame::FrameCodec`): length and CRC32C
//! headers over an arbitrary byte stream that arrives in arbitrary pieces, with a small and
//! the default frame maximum.
//!
//! Properties: the frames decoded do not depend on how the stream is cut into reads; every
//! frame delivered matches its CRC and fits the maximum; `encode_frame`'d bodies (and the
//! codec's own encoder's) decode back to themselves.
#![no_main]

use arbitrary::Arbitrary;
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use meridian_fuzz::pieces;
use meridian_net::frame::{FrameCodec, encode_frame};
use tokio_util::codec::{Decoder, Encoder};

#[derive(Debug, Arbitrary)]
struct Input {
    small_max: bool,
    cuts: Vec<u16>,
    stream: Vec<u8>,
    bodies: Vec<Vec<u8>>,
}

/// Decodes `parts` as consecutive reads: the frames, and whether the stream was refused.
fn decode(max: usize, parts: &[&[u8]]) -> (Vec<BytesMut>, bool) {
    let mut codec = FrameCodec::new(max);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for part in parts {
        buf.extend_from_slice(part);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => {
                    assert!(f.len() <= max);
                    frames.push(f);
                }
                Ok(None) => break,
                Err(_) => return (frames, true),
            }
        }
    }
    (frames, false)
}

fuzz_target!(|input: Input| {
    let max = if input.small_max {
        16
    } else {
        meridian_net::frame::DEFAULT_MAX_FRAME
    };
    let whole = decode(max, &[&input.stream]);
    let split = decode(max, &pieces(&input.stream, &input.cuts));
    assert_eq!(whole, split, "frames depend on the reads");
    // Round trip: the bodies, framed one after another, come back (those within `max`).
    let mut stream = Vec::new();
    let mut codec = FrameCodec::new(max);
    let mut kept = Vec::new();
    for body in &input.bodies {
        let mut dst = BytesMut::new();
        match codec.encode(Bytes::copy_from_slice(body), &mut dst) {
            Ok(()) => {
                assert_eq!(&dst[..], &encode_frame(body)[..]);
                stream.extend_from_slice(&dst);
                kept.push(body.clone());
            }
            Err(_) => assert!(body.len() > max),
        }
    }
    let (frames, refused) = decode(max, &pieces(&stream, &input.cuts));
    assert!(!refused);
    let frames: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
    assert_eq!(frames, kept);
});
