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

/// An [`ObjectHasher`] whose two digests run on the blocking pool, fed the body's pieces
/// (shared, not copied) as they arrive: MD5 and BLAKE3 cost more CPU than everything else an
/// upload does, and off the async threads they overlap with receiving and storing the body.
///
/// Each digest has at most one piece in hashing at a time, as a short blocking job (not a
/// thread held for the whole upload: hundreds of concurrent uploads would exhaust the
/// blocking pool and stall each other); `update` waits for the previous piece's job, so a
/// piece (and what it holds) is released as soon as it is hashed. Worth it for large bodies
/// only (a hand-off per piece).
pub struct ParallelHasher {
    blake3: Job<blake3::Hasher>,
    md5: Option<Job<Md5>>,
    len: u64,
}

/// A digest's state: at rest, or being fed one piece on the blocking pool (`None`: a job
/// panicked).
enum Job<H> {
    Idle(H),
    Busy(tokio::task::JoinHandle<Result<H, tokio::task::JoinError>>),
    Failed,
}

impl<H: Send + 'static> Job<H> {
    /// The state once the piece in hashing (if any) is done.
    async fn settle(&mut self) -> Option<H> {
        match std::mem::replace(self, Job::Failed) {
            Job::Idle(h) => Some(h),
            Job::Busy(j) => j.await.ok().and_then(|r| r.ok()),
            Job::Failed => None,
        }
    }

    /// Starts hashing `bytes` (after the previous piece), keeping `held` until it is done.
    async fn feed(&mut self, bytes: bytes::Bytes, held: Option<Held>, update: fn(&mut H, &[u8])) {
        if let Some(mut h) = self.settle().await {
            *self = Job::Busy(tokio::spawn(crate::blocking::run(move || {
                update(&mut h, &bytes);
                drop(held);
                h
            })));
        }
    }
}

/// Something a piece keeps alive until it is hashed (a reservation of its bytes, so memory
/// waiting to be hashed stays under the node's cap).
pub type Held = std::sync::Arc<dyn Send + Sync>;

impl ParallelHasher {
    /// Continues `hasher` (what it has seen stays counted) on the blocking pool: BLAKE3, and
    /// MD5 unless `md5` is false (then [`ParallelHasher::finish`] has none).
    pub fn start(hasher: ObjectHasher, md5: bool) -> ParallelHasher {
        let ObjectHasher {
            blake3,
            md5: md5_state,
            len,
        } = hasher;
        ParallelHasher {
            blake3: Job::Idle(blake3),
            md5: md5.then_some(Job::Idle(md5_state)),
            len,
        }
    }

    /// Feeds the next bytes (waiting for the previous piece's hashing).
    pub async fn update(&mut self, bytes: bytes::Bytes) {
        self.update_holding(bytes, None).await;
    }

    /// Feeds the next bytes, keeping `held` alive until both digests have hashed them.
    pub async fn update_holding(&mut self, bytes: bytes::Bytes, held: Option<Held>) {
        self.len += bytes.len() as u64;
        if let Some(m) = &mut self.md5 {
            m.feed(bytes.clone(), held.clone(), |h, b| h.update(b))
                .await;
        }
        self.blake3
            .feed(bytes, held, |h, b| {
                h.update(b);
            })
            .await;
    }

    /// Bytes seen so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing has been fed yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// BLAKE3 and (when started with it) MD5 of everything fed; `None` if a hashing job
    /// failed.
    pub async fn finish(mut self) -> Option<([u8; 32], Option<[u8; 16]>)> {
        let md5 = match &mut self.md5 {
            Some(m) => Some(m.settle().await?.finalize().into()),
            None => None,
        };
        let blake3 = self.blake3.settle().await?;
        Some((*blake3.finalize().as_bytes(), md5))
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
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
