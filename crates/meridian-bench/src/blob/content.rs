//! The bytes of benchmark objects: a pure function of (seed, offset), so a client generates an
//! object as it uploads it (no copy of it in memory), a reader checks any range it receives
//! without having kept the object, and the expected BLAKE3 is recomputed at the end (spec §8,
//! "every benchmark verifies the digest of every transferred object").
//!
//! Word `i` (bytes `8i..8i+8`, little endian) of object `seed` is `splitmix64(seed + i·γ)`.

use bytes::{Bytes, BytesMut};
use futures_util::stream::StreamExt;
use meridian_core::mix::GOLDEN_GAMMA;
use meridian_core::splitmix64;
use meridian_server::objects::ByteStream;

/// One object's content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Content {
    seed: u64,
    size: u64,
}

impl Content {
    /// The object of `size` bytes drawn from `seed`.
    pub fn new(seed: u64, size: u64) -> Content {
        Content { seed, size }
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn word(&self, i: u64) -> [u8; 8] {
        splitmix64(self.seed.wrapping_add(i.wrapping_mul(GOLDEN_GAMMA))).to_le_bytes()
    }

    /// Writes bytes `offset..offset + out.len()` into `out` (past the end: the generator's
    /// continuation, never checked against an object).
    pub fn fill(&self, offset: u64, out: &mut [u8]) {
        let mut pos = offset;
        let mut o = 0usize;
        // The unaligned head.
        while o < out.len() && !pos.is_multiple_of(8) {
            let w = self.word(pos / 8);
            let from = (pos % 8) as usize;
            let n = (8 - from).min(out.len() - o);
            out[o..o + n].copy_from_slice(&w[from..from + n]);
            o += n;
            pos += n as u64;
        }
        let mut words = out[o..].chunks_exact_mut(8);
        let mut i = pos / 8;
        for w in &mut words {
            w.copy_from_slice(&self.word(i));
            i += 1;
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            let w = self.word(i);
            let n = tail.len();
            tail.copy_from_slice(&w[..n]);
        }
    }

    /// Bytes `offset..offset + len`.
    pub fn bytes(&self, offset: u64, len: usize) -> Bytes {
        let mut b = BytesMut::zeroed(len);
        self.fill(offset, &mut b);
        b.freeze()
    }

    /// Whether `got` equals the object's bytes from `offset` (and stays inside it).
    pub fn matches(&self, offset: u64, got: &[u8]) -> bool {
        if offset + got.len() as u64 > self.size {
            return false;
        }
        let mut buf = vec![0u8; 64 << 10];
        let mut at = 0usize;
        while at < got.len() {
            let n = buf.len().min(got.len() - at);
            self.fill(offset + at as u64, &mut buf[..n]);
            if buf[..n] != got[at..at + n] {
                return false;
            }
            at += n;
        }
        true
    }

    /// The object's BLAKE3.
    pub fn blake3(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < self.size {
            let n = (self.size - at).min(buf.len() as u64) as usize;
            self.fill(at, &mut buf[..n]);
            h.update(&buf[..n]);
            at += n as u64;
        }
        *h.finalize().as_bytes()
    }

    /// Bytes `first..end` as a body stream of `piece`-byte pieces (a client's writes).
    pub fn stream(&self, first: u64, end: u64, piece: usize) -> ByteStream {
        let content = *self;
        let piece = piece.max(1) as u64;
        let end = end.min(self.size);
        Box::pin(
            futures_util::stream::unfold(first, move |at| async move {
                (at < end).then(|| {
                    let n = (end - at).min(piece);
                    (Ok(content.bytes(at, n as usize)), at + n)
                })
            })
            .boxed(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_range_equals_the_same_slice_of_the_whole() {
        let c = Content::new(42, 1000);
        let whole = c.bytes(0, 1000);
        for (a, len) in [
            (0, 1000),
            (1, 7),
            (3, 64),
            (8, 8),
            (13, 987),
            (999, 1),
            (500, 0),
        ] {
            assert_eq!(&c.bytes(a, len)[..], &whole[a as usize..a as usize + len]);
            assert!(c.matches(a, &whole[a as usize..a as usize + len]));
        }
        let mut bad = whole[10..20].to_vec();
        bad[3] ^= 1;
        assert!(!c.matches(10, &bad));
        assert!(!c.matches(995, &whole[0..10]), "past the end");
        assert_ne!(Content::new(43, 1000).bytes(0, 1000), whole, "seeds differ");
    }

    #[test]
    fn the_digest_is_the_blake3_of_the_bytes() {
        let c = Content::new(7, (3 << 20) + 5);
        let whole = c.bytes(0, c.size() as usize);
        assert_eq!(c.blake3(), *blake3::hash(&whole).as_bytes());
    }

    #[tokio::test]
    async fn a_stream_yields_the_range_in_pieces() {
        let c = Content::new(9, 100_000);
        let mut s = c.stream(10, 70_010, 4096);
        let mut got = Vec::new();
        let mut pieces = 0;
        while let Some(p) = s.next().await {
            let p = p.unwrap();
            assert!(p.len() <= 4096);
            got.extend_from_slice(&p);
            pieces += 1;
        }
        assert_eq!(pieces, 70_000usize.div_ceil(4096));
        assert_eq!(got, c.bytes(10, 70_000));
    }
}
