//! Length-delimited framing: every frame on a connection is a big-endian `u32` length, a
//! big-endian `u32` CRC32C of the body, then the body.
//!
//! Guarantees: a frame longer than the configured maximum is rejected with
//! [`NetError::FrameTooLarge`] as soon as its header is read (nothing is buffered for it), and on
//! the sending side before anything is written. The caller closes the connection on any decode
//! error; other connections are unaffected. A frame whose body fails its CRC32C (damaged on
//! the wire past TCP's 16-bit checksum, or by a faulty NIC or middlebox) is dropped and counted
//! ([`FrameCodec::dropped`]); the frames after it are delivered. Nothing is retransmitted at
//! this layer: a dropped request times out and its coordinator asks another replica or counts
//! the replica failed, as for any lost message.

use crate::NetError;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// The default maximum frame size: 64 MiB.
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

/// Size of the header in bytes: the length, then the CRC32C of the body.
pub const HEADER_LEN: usize = 8;

/// CRC32C (Castagnoli), the checksum of every frame's body.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// A `tokio_util` codec for `u32`-length-prefixed frames with a maximum size.
#[derive(Clone, Copy, Debug)]
pub struct FrameCodec {
    max: usize,
    dropped: u64,
}

impl FrameCodec {
    /// A codec accepting frames up to `max` bytes (the maximum is clamped to `u32::MAX`).
    pub fn new(max: usize) -> Self {
        Self {
            max: max.min(u32::MAX as usize),
            dropped: 0,
        }
    }

    /// Frames dropped because their body failed its CRC32C.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The largest frame body this codec accepts, in bytes.
    pub fn max(&self) -> usize {
        self.max
    }
}

/// One frame as it goes on the wire (header and body): for tools and tests that speak to a
/// node without the codec.
pub fn encode_frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&CRC32C.checksum(body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// Whether `body` matches the CRC32C of a frame header.
pub fn body_matches(crc: u32, body: &[u8]) -> bool {
    CRC32C.checksum(body) == crc
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = NetError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, NetError> {
        loop {
            // The length alone decides an oversized frame, before the rest of its header.
            if src.len() < 4 {
                return Ok(None);
            }
            let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]) as usize;
            if len > self.max {
                return Err(NetError::FrameTooLarge { len, max: self.max });
            }
            if src.len() < HEADER_LEN + len {
                // Reserve for the rest of this frame only (bounded by `max`).
                src.reserve(HEADER_LEN + len - src.len());
                return Ok(None);
            }
            let crc = u32::from_be_bytes([src[4], src[5], src[6], src[7]]);
            src.advance(HEADER_LEN);
            let body = src.split_to(len);
            if CRC32C.checksum(&body) == crc {
                return Ok(Some(body));
            }
            self.dropped += 1;
            tracing::warn!(len, "dropped a frame that failed its CRC32C");
        }
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = NetError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), NetError> {
        if item.len() > self.max {
            return Err(NetError::FrameTooLarge {
                len: item.len(),
                max: self.max,
            });
        }
        dst.reserve(HEADER_LEN + item.len());
        dst.put_u32(item.len() as u32);
        dst.put_u32(CRC32C.checksum(&item));
        dst.extend_from_slice(&item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode_all(codec: &mut FrameCodec, frames: &[Vec<u8>]) -> BytesMut {
        let mut buf = BytesMut::new();
        for f in frames {
            codec.encode(Bytes::from(f.clone()), &mut buf).unwrap();
        }
        buf
    }

    #[test]
    fn frames_round_trip_when_fed_byte_by_byte() {
        let mut codec = FrameCodec::new(1024);
        let frames = vec![b"hello".to_vec(), vec![], vec![7; 1024]];
        let wire = encode_all(&mut codec, &frames);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for b in wire.iter() {
            buf.put_u8(*b);
            while let Some(f) = codec.decode(&mut buf).unwrap() {
                out.push(f.to_vec());
            }
        }
        assert_eq!(out, frames);
        assert!(buf.is_empty());
    }

    #[test]
    fn oversized_frame_is_rejected_from_its_header() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::new();
        buf.put_u32(17);
        assert_eq!(
            codec.decode(&mut buf),
            Err(NetError::FrameTooLarge { len: 17, max: 16 })
        );
        let err = codec.encode(Bytes::from(vec![0; 17]), &mut BytesMut::new());
        assert_eq!(err, Err(NetError::FrameTooLarge { len: 17, max: 16 }));
    }

    #[test]
    fn partial_header_and_partial_body_wait_for_more() {
        let mut codec = FrameCodec::default();
        let wire = encode_all(&mut codec, &[b"abc".to_vec()]);
        let mut buf = BytesMut::from(&wire[..2]);
        assert_eq!(codec.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&wire[2..HEADER_LEN + 1]);
        assert_eq!(codec.decode(&mut buf), Ok(None));
        buf.extend_from_slice(&wire[HEADER_LEN + 1..]);
        assert_eq!(codec.decode(&mut buf).unwrap().unwrap().as_ref(), b"abc");
    }

    #[test]
    fn a_frame_damaged_on_the_wire_is_dropped_and_the_next_delivered() {
        let mut codec = FrameCodec::new(1024);
        let frames = vec![b"first".to_vec(), b"damaged".to_vec(), b"third".to_vec()];
        let mut wire = encode_all(&mut codec, &frames);
        // Flip a bit in the second frame's body (header 8 + "first" 5, header 8, body).
        wire[HEADER_LEN + 5 + HEADER_LEN + 2] ^= 0x10;
        let mut out = Vec::new();
        while let Some(f) = codec.decode(&mut wire).unwrap() {
            out.push(f.to_vec());
        }
        assert_eq!(out, vec![b"first".to_vec(), b"third".to_vec()]);
        assert_eq!(codec.dropped(), 1);
        assert!(wire.is_empty());
    }

    proptest! {
        #[test]
        fn any_frames_round_trip(frames in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), 0..300), 0..20), split in 0usize..4000) {
            let mut codec = FrameCodec::new(300);
            let wire = encode_all(&mut codec, &frames);
            let split = split.min(wire.len());
            let mut buf = BytesMut::from(&wire[..split]);
            let mut out = Vec::new();
            while let Some(f) = codec.decode(&mut buf).unwrap() { out.push(f.to_vec()); }
            buf.extend_from_slice(&wire[split..]);
            while let Some(f) = codec.decode(&mut buf).unwrap() { out.push(f.to_vec()); }
            prop_assert_eq!(out, frames);
        }
    }
}
