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

/// An [`ObjectHasher`] whose two digests run on two blocking threads, fed the body's pieces
/// (shared, not copied) as they arrive: MD5 and BLAKE3 cost more CPU than everything else an
/// upload does, and on their own threads they overlap with receiving and storing the body.
/// Worth it for large bodies only (two thread hand-offs per piece).
pub struct ParallelHasher {
    blake3: tokio::sync::mpsc::Sender<bytes::Bytes>,
    md5: Option<tokio::sync::mpsc::Sender<bytes::Bytes>>,
    blake3_done: tokio::task::JoinHandle<[u8; 32]>,
    md5_done: Option<tokio::task::JoinHandle<[u8; 16]>>,
    len: u64,
}

impl ParallelHasher {
    /// Continues `hasher` (what it has seen stays counted) on blocking threads: BLAKE3 on
    /// one, MD5 on another unless `md5` is false (then [`ParallelHasher::finish`] has none).
    pub fn start(hasher: ObjectHasher, md5: bool) -> ParallelHasher {
        let (b3_tx, mut b3_rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(32);
        let ObjectHasher {
            blake3,
            md5: md5_state,
            len,
        } = hasher;
        let blake3_done = tokio::task::spawn_blocking(move || {
            let mut h = blake3;
            while let Some(b) = b3_rx.blocking_recv() {
                h.update(&b);
            }
            *h.finalize().as_bytes()
        });
        let (md5_tx, md5_done) = if md5 {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(32);
            let done = tokio::task::spawn_blocking(move || {
                let mut h = md5_state;
                while let Some(b) = rx.blocking_recv() {
                    h.update(&b);
                }
                h.finalize().into()
            });
            (Some(tx), Some(done))
        } else {
            (None, None)
        };
        ParallelHasher {
            blake3: b3_tx,
            md5: md5_tx,
            blake3_done,
            md5_done,
            len,
        }
    }

    /// Feeds the next bytes (waits while a thread is 32 pieces behind).
    pub async fn update(&mut self, bytes: bytes::Bytes) {
        self.len += bytes.len() as u64;
        if let Some(m) = &self.md5 {
            let _ = m.send(bytes.clone()).await;
        }
        let _ = self.blake3.send(bytes).await;
    }

    /// Bytes seen so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing has been fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// BLAKE3 and (when started with it) MD5 of everything fed; `None` if a hashing
    /// thread died.
    pub async fn finish(self) -> Option<([u8; 32], Option<[u8; 16]>)> {
        drop(self.blake3);
        drop(self.md5);
        let md5 = match self.md5_done {
            Some(h) => Some(h.await.ok()?),
            None => None,
        };
        Some((self.blake3_done.await.ok()?, md5))
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

    #[tokio::test]
    async fn the_parallel_hasher_agrees_with_the_serial_one() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut serial = ObjectHasher::new();
        serial.update(&data);
        let mut first = ObjectHasher::new();
        first.update(&data[..1000]);
        let (b3, m5) = serial.finish();
        for md5 in [true, false] {
            let mut p = ParallelHasher::start(first.clone(), md5);
            for piece in data[1000..].chunks(4096) {
                p.update(bytes::Bytes::copy_from_slice(piece)).await;
            }
            assert_eq!(p.len(), data.len() as u64);
            assert_eq!(p.finish().await, Some((b3, md5.then_some(m5))));
        }
    }
}
