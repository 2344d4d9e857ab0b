//! The chunks of one upload on their way ([`ChunkPipeline`]): hashed on the digest threads
//! and stored on the replicas at once, at most `window` stores in flight, each chunk's bytes
//! reserved until both are done.

use super::*;

/// The chunks of one body on their way: each is hashed (on the digest threads) and stored
/// (on the replicas) at once, at most `window` stores in flight; its bytes stay reserved until
/// both are done.
pub(super) struct ChunkPipeline {
    backend: Backend,
    key: Bytes,
    version: u128,
    window: usize,
    max_object: u64,
    index: u32,
    chunks: Vec<ChunkRef>,
    hasher: ParallelHasher,
    pending: FuturesUnordered<tokio::task::JoinHandle<ObjResult<()>>>,
}

impl ChunkPipeline {
    pub(super) fn new(
        objects: &Objects,
        key: &Bytes,
        version: u128,
        first_index: u32,
        md5: bool,
    ) -> ChunkPipeline {
        ChunkPipeline {
            backend: objects.backend.clone(),
            key: key.clone(),
            version,
            window: objects.cfg.window.max(1),
            max_object: objects.cfg.max_object,
            index: first_index,
            chunks: Vec::new(),
            hasher: ParallelHasher::start(ObjectHasher::new(), md5),
            pending: FuturesUnordered::new(),
        }
    }

    /// Hashes and stores the next chunk; `permit` holds its bytes until both are done.
    pub(super) async fn push(&mut self, chunk: Bytes, permit: InflightPermit) -> ObjResult<()> {
        let permit = Arc::new(permit);
        self.hasher
            .update_holding(chunk.clone(), Some(permit.clone()))
            .await;
        while self.pending.len() >= self.window {
            if let Some(r) = self.pending.next().await {
                joined(r)?;
            }
        }
        let digest = chunk_digest(&chunk);
        let id = ChunkId {
            version: self.version,
            index: self.index,
        };
        self.chunks.push(ChunkRef {
            version: id.version,
            index: id.index,
            len: chunk.len() as u32,
            digest,
        });
        self.index = self.index.checked_add(1).ok_or(ObjectError::TooLarge {
            max: self.max_object,
        })?;
        let (backend, key) = (self.backend.clone(), self.key.clone());
        // Spawned, so chunks travel while the body is still being read; a task outliving a
        // failed upload only leaves an orphan chunk.
        self.pending.push(tokio::spawn(async move {
            let r = backend.put_chunk(&key, id, digest, chunk).await;
            drop(permit);
            r
        }));
        Ok(())
    }

    /// Waits for every store; returns the chunks and the body's BLAKE3 (and MD5, if asked).
    pub(super) async fn finish(mut self) -> ObjResult<(Vec<ChunkRef>, [u8; 32], Option<[u8; 16]>)> {
        while let Some(r) = self.pending.next().await {
            joined(r)?;
        }
        let (blake3, md5) = self
            .hasher
            .finish()
            .await
            .ok_or_else(|| ObjectError::Body("a digest thread failed".into()))?;
        Ok((self.chunks, blake3, md5))
    }
}

/// The result of a chunk-store task.
pub(super) fn joined(r: Result<ObjResult<()>, tokio::task::JoinError>) -> ObjResult<()> {
    r.map_err(|e| ObjectError::Body(format!("chunk upload task failed: {e}")))?
}

/// What [`Objects::store_body`] stored.
pub(super) struct Stored {
    pub(super) chunks: Vec<ChunkRef>,
    pub(super) inline: Option<Bytes>,
    pub(super) size: u64,
    pub(super) blake3: [u8; 32],
    /// Computed when S3 ETags are MD5s (`blob.md5_etag`) or the client sent one to check.
    pub(super) md5: Option<[u8; 16]>,
}

impl Stored {
    /// The S3 ETag: the quoted MD5, or the quoted BLAKE3 (64 hex digits, never mistaken
    /// for an MD5) when MD5 is off.
    pub(super) fn etag(&self) -> String {
        match &self.md5 {
            Some(m) => md5_etag(m),
            None => format!("\"{}\"", hex(&self.blake3)),
        }
    }

    /// Whether the body matches a client's `Content-MD5`.
    pub(super) fn md5_matches(&self, want: Option<[u8; 16]>) -> bool {
        want.is_none_or(|w| self.md5 == Some(w))
    }
}
