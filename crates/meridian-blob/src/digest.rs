//! Digests: xxh3-128 per chunk (checked on every chunk write and read), BLAKE3 of a whole
//! object (the native ETag, and what `Content-Digest` carries), and MD5 of a whole object for
//! the ETag S3 clients compare against.

use md5::{Digest, Md5};

/// xxh3-128 of one chunk, little-endian.
pub type ChunkDigest = [u8; 16];

/// The digest of one chunk's bytes.
pub fn chunk_digest(bytes: &[u8]) -> ChunkDigest {
    xxhash_rust::xxh3::xxh3_128(bytes).to_le_bytes()
}

/// The digests of an object, fed its bytes in order as they stream.
#[derive(Clone, Default)]
pub struct ObjectHasher {
    blake3: blake3::Hasher,
    md5: Md5,
    len: u64,
}

impl ObjectHasher {
    /// A hasher that has seen nothing.
    pub fn new() -> ObjectHasher {
        ObjectHasher::default()
    }

    /// Feeds the next bytes of the object.
    pub fn update(&mut self, bytes: &[u8]) {
        self.blake3.update(bytes);
        self.md5.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// Bytes seen so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing has been fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// BLAKE3 and MD5 of everything fed.
    pub fn finish(self) -> ([u8; 32], [u8; 16]) {
        (
            *self.blake3.finalize().as_bytes(),
            self.md5.finalize().into(),
        )
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The MD5 of some bytes (an S3 part's ETag).
pub fn md5(bytes: &[u8]) -> [u8; 16] {
    Md5::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        let mut h = ObjectHasher::new();
        h.update(b"ab");
        h.update(b"c");
        let (b3, m5) = h.finish();
        assert_eq!(hex(&m5), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(&b3),
            "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"
        );
        assert_eq!(md5(b"abc"), m5);
        assert_ne!(chunk_digest(b"abc"), chunk_digest(b"abd"));
    }
}
