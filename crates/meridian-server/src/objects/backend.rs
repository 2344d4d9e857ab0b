//! Where objects live ([`Backend`]): a single node's keyspace and chunk store, or a cluster
//! node's dispatch facade and `blob` protocol. The one place the object service tells the
//! two apart for reads, writes, deletes, chunks and listings; everything above it is
//! written once.

use super::*;

/// Where objects live.
#[derive(Clone)]
pub enum Backend {
    /// A single node: manifests in its keyspace, chunks in its store.
    Local {
        /// The keyspace.
        keyspace: Arc<Keyspace>,
        /// The chunk store.
        chunks: Arc<dyn ChunkStore>,
    },
    /// A cluster node.
    Cluster(Arc<ClusterBackend>),
}

/// The bulk stream a chunk is written on between nodes: one per version, so an upload (or a
/// part of a multipart upload, which has a version of its own) is one stream, like the
/// client connection it came on, and parallel parts are parallel streams. (Reads take a
/// stream per read.)
pub(super) fn stream_of(id: ChunkId) -> u32 {
    id.version as u32
}

/// Runs a chunk-store call, on the blocking pool when the store touches the disk.
pub(super) async fn on_store<T: Send + 'static>(
    store: &Arc<dyn ChunkStore>,
    f: impl FnOnce(&dyn ChunkStore) -> meridian_blob::Result<T> + Send + 'static,
) -> ObjResult<T> {
    Ok(meridian_blob::on_store(store, f).await?)
}

impl Backend {
    pub(super) async fn get_value(&self, key: &[u8]) -> ObjResult<Option<Bytes>> {
        match self {
            Backend::Local { keyspace, .. } => Ok(keyspace.get(key)?),
            Backend::Cluster(c) => Ok(c.dispatch.get(key).await?),
        }
    }

    pub(super) async fn set_value(&self, key: &[u8], value: Bytes) -> ObjResult<()> {
        match self {
            Backend::Local { keyspace, .. } => {
                keyspace.set(key, value, SetOptions::default())?;
                Ok(())
            }
            Backend::Cluster(c) => Ok(c.dispatch.set(key, value).await?),
        }
    }

    pub(super) async fn del(&self, key: &[u8]) -> ObjResult<bool> {
        match self {
            Backend::Local { keyspace, .. } => Ok(keyspace.del(&[key])? > 0),
            Backend::Cluster(c) => Ok(c.dispatch.del(key).await?),
        }
    }

    pub(super) async fn put_chunk(
        &self,
        key: &Bytes,
        id: ChunkId,
        digest: ChunkDigest,
        bytes: Bytes,
    ) -> ObjResult<()> {
        match self {
            Backend::Local { keyspace, chunks } => {
                let info = VersionInfo {
                    key: key.clone(),
                    created_us: keyspace.now().0,
                };
                on_store(chunks, move |s| s.put(id, &bytes, digest, &info)).await
            }
            Backend::Cluster(c) => Ok(c
                .node
                .blob_put_chunk(key, id, digest, bytes, stream_of(id))
                .await?),
        }
    }

    /// Chunk `c` of the object at `key`, read on bulk stream `stream`.
    pub(super) async fn get_chunk(&self, key: &[u8], c: ChunkRef, stream: u32) -> ObjResult<Bytes> {
        let id = ChunkId {
            version: c.version,
            index: c.index,
        };
        match self {
            Backend::Local { chunks, .. } => match on_store(chunks, move |s| s.get(id)).await? {
                Some(b) if chunk_digest(&b) == c.digest => Ok(b),
                Some(_) => Err(BlobError::DigestMismatch {
                    version: c.version,
                    index: c.index,
                }
                .into()),
                None => Err(ObjectError::Replication(
                    ReplicationError::ChunkUnavailable {
                        chunk: format!("{:032x}/{}", c.version, c.index),
                        tried: 1,
                    },
                )),
            },
            Backend::Cluster(cl) => Ok(cl.node.blob_get_chunk(key, id, c.digest, stream).await?),
        }
    }

    /// Live keys in `[start, end)` with their summaries, at most `limit`, and whether more
    /// may follow.
    pub(super) async fn list(
        &self,
        start: Bytes,
        end: Bytes,
        limit: usize,
    ) -> ObjResult<(Vec<Listed>, bool)> {
        match self {
            Backend::Cluster(c) => match c.dispatch.list_objects(&start, &end, limit).await {
                Err(e @ ReplicationError::Unsupported { .. }) => {
                    Err(ObjectError::Unsupported(e.to_string()))
                }
                listed => Ok(listed?),
            },
            Backend::Local { keyspace, .. } => {
                let mut out = Vec::new();
                let mut from = Bound::Included(start);
                loop {
                    let (keys, next) =
                        keyspace.live_keys_in(from, Bound::Excluded(end.clone()), 256)?;
                    for k in keys {
                        let Some(v) = keyspace.get(&k).ok().flatten() else {
                            continue;
                        };
                        out.push(summary(k, &v));
                        if out.len() >= limit {
                            return Ok((out, true));
                        }
                    }
                    match next {
                        Some(n) => from = Bound::Excluded(n),
                        None => return Ok((out, false)),
                    }
                }
            }
        }
    }
}

/// A listing entry for a stored value (single node; the replicas make their own).
pub(super) fn summary(key: Bytes, value: &Bytes) -> Listed {
    match Manifest::decode(value) {
        Ok(Some(m)) => Listed {
            key,
            size: m.size,
            s3_etag: Some(m.meta.s3_etag),
            modified_us: m.created_us,
        },
        _ => Listed {
            key,
            size: value.len() as u64,
            s3_etag: None,
            modified_us: 0,
        },
    }
}
