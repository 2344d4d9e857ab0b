//! The object service: large objects (spec `large-objects.md`) as the S3 and HTTP front ends
//! see them — put, get with ranges, head, delete, list, copy and multipart uploads — over
//! either a single node (its keyspace holds the manifests, its chunk store the chunks) or a
//! cluster node (manifests through the dispatch facade, so with the bucket's consistency;
//! chunks through the replication crate's `blob` protocol).
//!
//! Guarantees:
//! - **Atomic visibility.** An upload stores every chunk (on W replicas) before it writes the
//!   manifest, the commit point: a reader sees the old object or the new one, never a part.
//!   A failed or abandoned upload leaves only unreferenced chunks.
//! - **Integrity.** Every chunk is checked against its xxh3-128 digest when stored and when
//!   read; a download never yields bytes that failed a check (it fails instead). The
//!   object's BLAKE3 and MD5 are computed as it streams in; a client digest (`Content-MD5`,
//!   or one its front end checks, signalled as a body error) that differs leaves no manifest.
//! - **Bounded memory.** Chunks in flight are capped per transfer (`window` for uploads,
//!   `prefetch` for downloads) and per node (`max_inflight_bytes`, by backpressure); every
//!   transfer first passes admission control, which queues before it fails.
//! - Objects of at most `blob_threshold` bytes keep their bytes inline in the manifest.
//!
//! Keys: object `K` of bucket `B` is the key `B:K`. Multipart state lives under
//! `B:\xffmpu/{ID}` (the upload) and `B:\xffmpu/{ID}/NNNNN` (each part, a manifest of its
//! own; `/~NNNNNNNNNN` past part 99 999, for uploads by byte range): no S3 key can start with
//! byte 0xFF (keys are UTF-8), so listings stop before them, and the hash tag keeps an
//! upload's records in one partition.

pub use crate::blob_config::BlobConfig;
use crate::blob_handles::{HandleFault, HandleLimits, HandleTable, Pinned};
use crate::cluster_backend::ClusterBackend;
use crate::keyspace::Keyspace;
use bytes::Bytes;
use futures_util::stream::{FuturesOrdered, FuturesUnordered, Stream, StreamExt};
use meridian_blob::admission::{
    Admission, InflightBytes, InflightPermit, TooManyTransfers, TransferClass, TransferPermit,
};
use meridian_blob::digest::{ParallelHasher, hex, md5};
use meridian_blob::gc::{GcConfig, GcDecision, KeyState, decide};
use meridian_blob::{
    BlobError, ChunkBuffers, ChunkDigest, ChunkId, ChunkRef, ChunkStore, Manifest, ObjectHasher,
    ObjectMeta, Placement, VersionInfo, chunk_digest,
};
use meridian_redis::RedisError;
use meridian_redis::options::SetOptions;
use meridian_replication::ReplicationError;
use meridian_replication::blob::Listed;
use serde::{Deserialize, Serialize};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why an object operation failed. The front ends map each to their protocol's error.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// No object under the key.
    #[error("no such key")]
    NoSuchKey,
    /// No open multipart upload with that id.
    #[error("no such upload")]
    NoSuchUpload,
    /// A completion named a part that is not there or whose ETag differs.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// A completion listed parts out of ascending order.
    #[error("the parts are not in ascending order")]
    InvalidPartOrder,
    /// A part other than the last is smaller than 5 MiB.
    #[error("part {part} is {size} bytes; every part but the last needs 5 MiB")]
    EntityTooSmall {
        /// The part number.
        part: u32,
        /// Its size.
        size: u64,
    },
    /// The object would exceed `blob.max_object`.
    #[error("the object exceeds the largest allowed, {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// The request body failed (the client went away, or its front end refused it: a
    /// signature or checksum that did not match).
    #[error("{0}")]
    Body(String),
    /// The body does not match the digest the client sent.
    #[error("the body does not match its {0}")]
    BadDigest(&'static str),
    /// Admission control refused the transfer.
    #[error(transparent)]
    TooManyTransfers(#[from] TooManyTransfers),
    /// Replication failed (cluster mode).
    #[error(transparent)]
    Replication(#[from] ReplicationError),
    /// The chunk store failed.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The single node's keyspace failed.
    #[error("{0}")]
    Keyspace(String),
    /// What the request asks is not served on this bucket (the message says why and what to
    /// use instead).
    #[error("{0}")]
    Unsupported(String),
}

impl From<RedisError> for ObjectError {
    fn from(e: RedisError) -> Self {
        ObjectError::Keyspace(e.to_string())
    }
}

/// The result of object operations.
pub type ObjResult<T> = Result<T, ObjectError>;

/// A stream of an object's bytes.
pub type ByteStream = Pin<Box<dyn Stream<Item = ObjResult<Bytes>> + Send>>;

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
fn stream_of(id: ChunkId) -> u32 {
    id.version as u32
}

/// Runs a chunk-store call, on the blocking pool when the store touches the disk.
async fn on_store<T: Send + 'static>(
    store: &Arc<dyn ChunkStore>,
    f: impl FnOnce(&dyn ChunkStore) -> meridian_blob::Result<T> + Send + 'static,
) -> ObjResult<T> {
    Ok(meridian_blob::on_store(store, f).await?)
}

impl Backend {
    async fn get_value(&self, key: &[u8]) -> ObjResult<Option<Bytes>> {
        match self {
            Backend::Local { keyspace, .. } => Ok(keyspace.get(key)?),
            Backend::Cluster(c) => Ok(c.dispatch.get(key).await?),
        }
    }

    async fn set_value(&self, key: &[u8], value: Bytes) -> ObjResult<()> {
        match self {
            Backend::Local { keyspace, .. } => {
                keyspace.set(key, value, SetOptions::default())?;
                Ok(())
            }
            Backend::Cluster(c) => Ok(c.dispatch.set(key, value).await?),
        }
    }

    async fn del(&self, key: &[u8]) -> ObjResult<bool> {
        match self {
            Backend::Local { keyspace, .. } => Ok(keyspace.del(&[key])? > 0),
            Backend::Cluster(c) => Ok(c.dispatch.del(key).await?),
        }
    }

    async fn put_chunk(
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
    async fn get_chunk(&self, key: &[u8], c: ChunkRef, stream: u32) -> ObjResult<Bytes> {
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
    async fn list(&self, start: Bytes, end: Bytes, limit: usize) -> ObjResult<(Vec<Listed>, bool)> {
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
fn summary(key: Bytes, value: &Bytes) -> Listed {
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

/// An open multipart upload (stored at its upload key).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UploadRecord {
    key: Bytes,
    meta: ObjectMeta,
    created_us: u64,
}

/// One listed object, key relative to its bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEntry {
    /// The object's key within its bucket.
    pub key: Bytes,
    /// Its size.
    pub size: u64,
    /// Its ETag, quoted.
    pub etag: String,
    /// When it was written (ms since the epoch; 0 when unknown).
    pub modified_ms: u64,
}

/// One uploaded part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartEntry {
    /// The part number.
    pub number: u32,
    /// Its size.
    pub size: u64,
    /// Its ETag (quoted MD5).
    pub etag: String,
    /// When it was uploaded (ms since the epoch).
    pub modified_ms: u64,
}

/// The buckets the S3 endpoint owns: their objects (keys `bucket:…`) are reached only by
/// requests signed with the endpoint's access keys, or by RESP/HTTP clients holding the
/// node's `requirepass` (see [`Objects::check_key_access`]).
///
/// On a single node the S3 endpoint registers its buckets here (`BucketBook` in
/// `s3`: loaded from `DATA_DIR/s3-buckets` at start, kept up to date on create and
/// delete). In cluster mode a bucket is S3-owned when its registered properties say so
/// (`s3 = true`, set by CreateBucket and replicated with the bucket), so every node knows,
/// whether or not it serves S3 itself.
///
/// Cost: a key without `:`, or any key while no bucket is registered on a single node, is
/// one atomic load and a byte scan; otherwise one hash lookup under a read lock.
#[derive(Debug, Default)]
pub struct S3Buckets {
    /// Whether `names` holds anything (the hot path's only read when it does not).
    any: std::sync::atomic::AtomicBool,
    names: parking_lot::RwLock<HashSet<Box<[u8]>>>,
}

impl S3Buckets {
    /// Records that the S3 endpoint owns `bucket`.
    pub fn insert(&self, bucket: &str) {
        let mut names = self.names.write();
        names.insert(bucket.as_bytes().into());
        self.any.store(true, Ordering::Release);
    }

    /// Records that `bucket` is no longer an S3 bucket.
    pub fn remove(&self, bucket: &str) {
        let mut names = self.names.write();
        names.remove(bucket.as_bytes());
        self.any.store(!names.is_empty(), Ordering::Release);
    }

    /// Whether any bucket is S3-owned (one atomic load).
    #[inline]
    fn any(&self, backend: &Backend) -> bool {
        match backend {
            Backend::Cluster(c) => c.node.has_s3_buckets(),
            Backend::Local { .. } => self.any.load(Ordering::Acquire),
        }
    }

    /// The S3 bucket `key` belongs to, if any.
    #[inline]
    fn owner_of(&self, key: &[u8], backend: &Backend) -> Option<String> {
        let cluster = match backend {
            Backend::Cluster(c) => Some(c),
            Backend::Local { .. } if self.any.load(Ordering::Acquire) => None,
            Backend::Local { .. } => return None,
        };
        let colon = key.iter().position(|&b| b == b':')?;
        let bucket = &key[..colon];
        let owned = match cluster {
            Some(c) => c.node.is_s3_bucket(bucket),
            None => self.names.read().contains(bucket),
        };
        owned.then(|| String::from_utf8_lossy(bucket).into_owned())
    }
}

/// A RESP or HTTP request refused because it would reach the objects of an S3 bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum S3KeyRefused {
    /// Its key belongs to this S3 bucket.
    Key {
        /// The S3 bucket.
        bucket: String,
    },
    /// It changes the whole keyspace (FLUSHALL, FLUSHDB) while S3 buckets exist.
    Keyspace,
}

impl std::fmt::Display for S3KeyRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            S3KeyRefused::Key { bucket } => write!(
                f,
                "bucket '{}' is served by the S3 endpoint, which requires its access keys; \
                 set requirepass to reach it over RESP/HTTP",
                bucket.chars().take(64).collect::<String>()
            ),
            S3KeyRefused::Keyspace => write!(
                f,
                "this node has S3 buckets, whose objects only their access keys may delete; \
                 set requirepass to flush the keyspace over RESP/HTTP"
            ),
        }
    }
}

/// The full key of object `key` in `bucket`.
pub fn object_key(bucket: &str, key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(bucket.len() + 1 + key.len());
    k.extend_from_slice(bucket.as_bytes());
    k.push(b':');
    k.extend_from_slice(key);
    Bytes::from(k)
}

fn upload_key(bucket: &str, upload: u128) -> Bytes {
    let mut k = object_key(bucket, b"").to_vec();
    k.push(0xFF);
    k.extend_from_slice(format!("mpu/{{{upload:032x}}}").as_bytes());
    Bytes::from(k)
}

/// The record of part `part` of an upload. Parts 1..=99 999 (S3's 1..=10 000 among them) are
/// `/NNNNN`; larger numbers (the HTTP API's uploads by byte range number parts by chunk) are
/// `/~NNNNNNNNNN`, which sorts after every 5-digit one (`~` > `9`) and in order among
/// themselves: an upload's records always list in part order.
fn part_key(bucket: &str, upload: u128, part: u32) -> Bytes {
    let mut k = upload_key(bucket, upload).to_vec();
    if part <= 99_999 {
        k.extend_from_slice(format!("/{part:05}").as_bytes());
    } else {
        k.extend_from_slice(format!("/~{part:010}").as_bytes());
    }
    Bytes::from(k)
}

/// The part number of a part record's key (`prefix_len`: the length of its upload key and
/// the `/` after it).
fn part_number(key: &[u8], prefix_len: usize) -> Option<u32> {
    let tail = key.get(prefix_len..)?;
    let digits = tail.strip_prefix(b"~").unwrap_or(tail);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The end (exclusive) of an upload's part records: `/` + 1 after the upload key.
fn parts_end(bucket: &str, upload: u128) -> Bytes {
    let mut k = upload_key(bucket, upload).to_vec();
    k.push(b'/' + 1);
    Bytes::from(k)
}

/// The MD5 in a quoted hex ETag.
fn etag_md5(etag: &str) -> Option<[u8; 16]> {
    let h = etag.trim_matches('"');
    if h.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(h.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Parses an upload id (32 hex digits).
pub fn parse_upload_id(s: &str) -> Option<u128> {
    (s.len() == 32)
        .then(|| u128::from_str_radix(s, 16).ok())
        .flatten()
}

/// Formats an upload id.
pub fn format_upload_id(id: u128) -> String {
    format!("{id:032x}")
}

/// The quoted S3 ETag of a value's MD5.
fn md5_etag(md5: &[u8; 16]) -> String {
    format!("\"{}\"", hex(md5))
}

/// The smallest part S3 accepts, except the last.
pub const MIN_PART_SIZE: u64 = 5 << 20;

/// The object service of one node.
pub struct Objects {
    backend: Backend,
    cfg: BlobConfig,
    admission: Admission,
    inflight: InflightBytes,
    /// Upload buffers, recycled (at most `max_inflight_bytes` of them in use).
    buffers: ChunkBuffers,
    /// `BLOB.OPEN` handles.
    handles: parking_lot::Mutex<HandleTable>,
    /// The last chunk version the previous chunk-repair pass looked at.
    repair_cursor: parking_lot::Mutex<u128>,
    clock: Arc<dyn meridian_core::Clock>,
    ids: parking_lot::Mutex<rand_chacha::ChaCha8Rng>,
    /// Object bytes received (uploads) and sent (downloads), for `/metrics`.
    bytes_in: AtomicU64,
    bytes_out: Arc<AtomicU64>,
    /// Chunk versions deleted by garbage collection.
    gc_deleted: AtomicU64,
    /// The buckets the S3 endpoint owns, which the RESP and HTTP front ends refuse.
    s3_buckets: S3Buckets,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").field("cfg", &self.cfg).finish()
    }
}

/// An object about to be read: its manifest (a plain value is shown as an inline one).
#[derive(Debug, Clone)]
pub struct ObjectHead {
    /// The manifest.
    pub manifest: Arc<Manifest>,
}

impl ObjectHead {
    /// The S3 ETag.
    pub fn etag(&self) -> &str {
        &self.manifest.meta.s3_etag
    }
}

impl Objects {
    /// The service over `backend`; `seed` seeds the version ids it draws.
    pub fn new(
        backend: Backend,
        cfg: BlobConfig,
        clock: Arc<dyn meridian_core::Clock>,
        seed: u64,
    ) -> Objects {
        use rand_chacha::rand_core::SeedableRng;
        Objects {
            admission: Admission::new(cfg.admission()),
            inflight: InflightBytes::new(cfg.max_inflight_bytes),
            repair_cursor: parking_lot::Mutex::new(0),
            handles: parking_lot::Mutex::new(HandleTable::new(HandleLimits {
                max_open: cfg.max_open_handles,
                max_bytes: cfg.max_handle_bytes,
                idle_us: cfg.handle_idle_ms.saturating_mul(1000),
                max_age_us: cfg.version_grace_ms.saturating_mul(1000),
            })),
            buffers: ChunkBuffers::new(
                cfg.chunk_size as usize,
                usize::try_from(cfg.max_inflight_bytes / u64::from(cfg.chunk_size).max(1))
                    .unwrap_or(usize::MAX),
            ),
            backend,
            cfg,
            clock,
            ids: parking_lot::Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(seed)),
            bytes_in: AtomicU64::new(0),
            bytes_out: Arc::new(AtomicU64::new(0)),
            gc_deleted: AtomicU64::new(0),
            s3_buckets: S3Buckets::default(),
        }
    }

    /// The buckets the S3 endpoint owns (see [`S3Buckets`]).
    pub fn s3_buckets(&self) -> &S3Buckets {
        &self.s3_buckets
    }

    /// Whether a RESP or HTTP client without the node's password may touch `key`: not when
    /// `key` (`bucket:rest`) belongs to an S3 bucket, whose objects only requests signed
    /// with its access keys reach. `Err` is the refusal, naming the bucket and the way in
    /// (`password_set`: the node has a `requirepass`, whose holders reach every key, so the
    /// check is skipped).
    #[inline]
    pub fn check_key_access(&self, key: &[u8], password_set: bool) -> Result<(), S3KeyRefused> {
        if password_set {
            return Ok(());
        }
        match self.s3_buckets.owner_of(key, &self.backend) {
            Some(bucket) => Err(S3KeyRefused::Key { bucket }),
            None => Ok(()),
        }
    }

    /// Whether a RESP or HTTP client without the node's password may run a command over the
    /// whole keyspace that changes it (FLUSHALL, FLUSHDB): not while any S3 bucket exists,
    /// whose objects it would delete.
    pub fn check_keyspace_write(&self, password_set: bool) -> Result<(), S3KeyRefused> {
        if password_set || !self.s3_buckets.any(&self.backend) {
            return Ok(());
        }
        Err(S3KeyRefused::Keyspace)
    }

    /// The settings.
    pub fn config(&self) -> &BlobConfig {
        &self.cfg
    }

    /// The admission controller (its figures are metrics).
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Bytes of chunks in flight now.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight.in_use()
    }

    fn new_id(&self) -> u128 {
        use rand::Rng;
        self.ids.lock().random()
    }

    /// A fresh chunk version, marked with the configured placement.
    fn new_version(&self) -> u128 {
        self.cfg.chunk_placement.mark(self.new_id())
    }

    fn now_us(&self) -> u64 {
        self.clock.now().0
    }

    async fn admit(&self) -> ObjResult<TransferPermit> {
        Ok(self.admission.admit(TransferClass::Client).await?)
    }

    /// Streams `body` into chunks of upload `version` stored for `key`, at most `window` in
    /// flight, hashing as it goes. Returns the chunks (empty and the bytes when the body fit
    /// under `inline_max`), the digests, and the size.
    ///
    /// Memory: every buffer is one chunk of its own allocation, reserved under
    /// `max_inflight_bytes` before a byte is copied into it and released once its chunk is
    /// both stored and hashed, so what a node buffers never exceeds what it reserved (a node
    /// at its cap stops reading sockets). The buffers of a body that may still be inline come
    /// out of one reservation made up front: deciding never waits for bytes while holding
    /// some, so uploads cannot deadlock one another at the cap.
    async fn store_body(
        &self,
        key: &Bytes,
        version: u128,
        first_index: u32,
        inline_max: u64,
        md5: bool,
        mut body: ByteStream,
    ) -> ObjResult<Stored> {
        let cs = self.cfg.chunk_size as usize;
        let cs64 = u64::from(self.cfg.chunk_size);
        let mut pool = Some(
            self.inflight
                .reserve(cs64.max(inline_max).div_ceil(cs64) * cs64)
                .await,
        );
        // Chunks filled while the body could still be inline, and the one being filled.
        let mut early: Vec<(Bytes, InflightPermit)> = Vec::new();
        let mut filling: Option<(Vec<u8>, InflightPermit)> = None;
        let mut pipeline: Option<ChunkPipeline> = None;
        let mut size = 0u64;
        while let Some(item) = body.next().await {
            let mut piece = item?;
            size += piece.len() as u64;
            if size > self.cfg.max_object {
                return Err(ObjectError::TooLarge {
                    max: self.cfg.max_object,
                });
            }
            if pipeline.is_none() && size > inline_max {
                let mut p = ChunkPipeline::new(self, key, version, first_index, md5);
                for (chunk, permit) in early.drain(..) {
                    p.push(chunk, permit).await?;
                }
                pipeline = Some(p);
            }
            while !piece.is_empty() {
                let (buf, _) = match &mut filling {
                    Some(f) => f,
                    None => {
                        let permit = match pool.as_mut().and_then(|p| p.split(cs64)) {
                            Some(p) => p,
                            None => self.inflight.reserve(cs64).await,
                        };
                        // A body's first buffer starts small and grows with it (small
                        // bodies stay small); buffers past a quarter chunk are the pool's.
                        let first = pipeline.is_none() && early.is_empty();
                        let buf = if first && piece.len() <= cs / 4 {
                            Vec::with_capacity(piece.len())
                        } else {
                            self.buffers.take()
                        };
                        filling.insert((buf, permit))
                    }
                };
                let take = (cs - buf.len()).min(piece.len());
                if buf.capacity() - buf.len() < take {
                    let want = (buf.len() + take).max(buf.capacity() * 2);
                    if want > cs / 4 {
                        let mut pooled = self.buffers.take();
                        pooled.extend_from_slice(buf);
                        *buf = pooled;
                    } else {
                        buf.reserve_exact(want - buf.len());
                    }
                }
                buf.extend_from_slice(&piece.split_to(take));
                if buf.len() < cs {
                    continue;
                }
                if let Some((buf, permit)) = filling.take() {
                    let chunk = self.buffers.freeze(buf);
                    match &mut pipeline {
                        Some(p) => p.push(chunk, permit).await?,
                        None => early.push((chunk, permit)),
                    }
                }
            }
        }
        self.bytes_in.fetch_add(size, Ordering::Relaxed);
        let last = filling.map(|(buf, permit)| (self.buffers.freeze(buf), permit));
        let Some(mut p) = pipeline else {
            let mut parts: Vec<Bytes> = early.into_iter().map(|(b, _)| b).collect();
            parts.extend(last.map(|(b, _)| b));
            let inline = match parts.len() {
                0 => Bytes::new(),
                1 => parts.swap_remove(0),
                _ => Bytes::from(parts.concat()),
            };
            let mut h = ObjectHasher::new();
            h.update(&inline);
            let (blake3, md5) = h.finish();
            return Ok(Stored {
                chunks: Vec::new(),
                inline: Some(inline),
                size,
                blake3,
                md5: Some(md5),
            });
        };
        if let Some((chunk, permit)) = last.filter(|(b, _)| !b.is_empty()) {
            p.push(chunk, permit).await?;
        }
        drop(pool);
        let (chunks, blake3, md5) = p.finish().await?;
        Ok(Stored {
            chunks,
            inline: None,
            size,
            blake3,
            md5,
        })
    }

    /// PutObject: stores `body` as object `key` of `bucket`; returns the committed manifest.
    /// `content_md5`, when given, must match the body (`BadDigest` otherwise, and nothing is
    /// committed).
    pub async fn put(
        &self,
        bucket: &str,
        key: &[u8],
        body: ByteStream,
        meta: ObjectMeta,
        content_md5: Option<[u8; 16]>,
    ) -> ObjResult<Manifest> {
        let _permit = self.admit().await?;
        let full = object_key(bucket, key);
        let version = self.new_version();
        let started = self.now_us();
        let md5 = self.cfg.md5_etag || content_md5.is_some();
        let stored = self
            .store_body(&full, version, 0, self.cfg.threshold, md5, body)
            .await?;
        // Chunks older than the grace period that a newer write superseded may be collected:
        // an upload that long could commit a manifest naming deleted chunks.
        if self.now_us().saturating_sub(started) > self.cfg.version_grace_ms * 1000 {
            return Err(ObjectError::Body(format!(
                "the upload took longer than blob.version_grace_ms ({} ms); upload large \
                 objects in parts (multipart)",
                self.cfg.version_grace_ms
            )));
        }
        let manifest = self.manifest_of(version, stored, content_md5, meta)?;
        self.backend.set_value(&full, manifest.encode()).await?;
        Ok(manifest)
    }

    /// The manifest of a body stored as chunk version `version`, with `meta` and the body's
    /// ETag, once the body matches the client's `Content-MD5` (`BadDigest` otherwise).
    fn manifest_of(
        &self,
        version: u128,
        stored: Stored,
        content_md5: Option<[u8; 16]>,
        meta: ObjectMeta,
    ) -> ObjResult<Manifest> {
        if !stored.md5_matches(content_md5) {
            return Err(ObjectError::BadDigest("Content-MD5"));
        }
        let s3_etag = stored.etag();
        Ok(Manifest {
            version,
            size: stored.size,
            chunk_size: self.cfg.chunk_size,
            chunks: stored.chunks,
            inline: stored.inline,
            digest: stored.blake3,
            placement: Placement::of_version(version),
            created_us: self.now_us(),
            meta: ObjectMeta { s3_etag, ..meta },
        })
    }

    /// HeadObject: the object's manifest (a plain value written by another front end is
    /// shown as an inline object). `NoSuchKey` when absent.
    pub async fn head(&self, bucket: &str, key: &[u8]) -> ObjResult<ObjectHead> {
        let full = object_key(bucket, key);
        let value = self
            .backend
            .get_value(&full)
            .await?
            .ok_or(ObjectError::NoSuchKey)?;
        let manifest = match Manifest::decode(&value)? {
            Some(m) => m,
            None => {
                let mut h = ObjectHasher::new();
                h.update(&value);
                let (blake3, md5) = h.finish();
                Manifest {
                    version: 0,
                    size: value.len() as u64,
                    chunk_size: self.cfg.chunk_size,
                    chunks: Vec::new(),
                    inline: Some(value),
                    digest: blake3,
                    placement: Placement::WithManifest,
                    created_us: 0,
                    meta: ObjectMeta {
                        s3_etag: md5_etag(&md5),
                        ..ObjectMeta::default()
                    },
                }
            }
        };
        Ok(ObjectHead {
            manifest: Arc::new(manifest),
        })
    }

    /// The bytes `first..=last` of an object read by [`Objects::head`], fetched `prefetch`
    /// chunks ahead, every chunk checked against its digest. Admission is taken before the
    /// first byte and held until the stream ends or is dropped.
    pub async fn read(
        &self,
        bucket: &str,
        key: &[u8],
        head: &ObjectHead,
        first: u64,
        last: u64,
    ) -> ObjResult<ByteStream> {
        let m = head.manifest.clone();
        if let Some(inline) = &m.inline {
            let (a, b) = (first as usize, (last as usize + 1).min(inline.len()));
            let part = if a < b {
                inline.slice(a..b)
            } else {
                Bytes::new()
            };
            return Ok(Box::pin(futures_util::stream::iter([Ok(part)])));
        }
        if m.chunks.is_empty() || first > last || last >= m.size {
            return Ok(Box::pin(futures_util::stream::empty()));
        }
        let permit = self.admit().await?;
        let offsets = m.offsets();
        let (lo, hi) = meridian_blob::range::chunk_span(&offsets, first, last);
        let full = object_key(bucket, key);
        let backend = self.backend.clone();
        let prefetch = self.cfg.prefetch;
        // Each read is a stream of its own, like the client connection it serves: parallel
        // range reads of one object get a window each.
        let stream = self.new_id() as u32;
        let fetch = move |i: usize| {
            let backend = backend.clone();
            let full = full.clone();
            let m = m.clone();
            let offsets_i = (offsets[i], offsets[i + 1]);
            async move {
                let c = m.chunks[i];
                let bytes = backend.get_chunk(&full, c, stream).await?;
                // Trim the first and last chunks to the range.
                let (start, end) = offsets_i;
                let a = first.saturating_sub(start) as usize;
                let b = (last.min(end - 1) - start + 1) as usize;
                Ok::<Bytes, ObjectError>(bytes.slice(a.min(bytes.len())..b.min(bytes.len())))
            }
        };
        let state = (lo, FuturesOrdered::new(), Some(permit));
        let stream = futures_util::stream::unfold(state, move |(mut next, mut q, permit)| {
            let fetch = fetch.clone();
            async move {
                permit.as_ref()?;
                while q.len() < prefetch && next <= hi {
                    q.push_back(fetch(next));
                    next += 1;
                }
                match q.next().await {
                    Some(Ok(b)) => Some((Ok(b), (next, q, permit))),
                    Some(Err(e)) => Some((Err(e), (next, q, None))),
                    None => None,
                }
            }
        });
        let sent = self.bytes_out.clone();
        Ok(Box::pin(stream.inspect(move |r| {
            if let Ok(b) = r {
                sent.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
        })))
    }

    /// DeleteObject (absent keys are fine, as in S3). Its chunks are garbage once no reader
    /// holds them.
    pub async fn delete(&self, bucket: &str, key: &[u8]) -> ObjResult<()> {
        self.backend.del(&object_key(bucket, key)).await?;
        Ok(())
    }

    /// CopyObject: reads `src` and writes it as `dst` with the same metadata (or `meta`).
    pub async fn copy(
        &self,
        src: (&str, &[u8]),
        dst: (&str, &[u8]),
        meta: Option<ObjectMeta>,
    ) -> ObjResult<Manifest> {
        let head = self.head(src.0, src.1).await?;
        let size = head.manifest.size;
        let body = if size == 0 {
            Box::pin(futures_util::stream::empty()) as ByteStream
        } else {
            self.read(src.0, src.1, &head, 0, size - 1).await?
        };
        let meta = meta.unwrap_or_else(|| head.manifest.meta.clone());
        self.put(dst.0, dst.1, body, meta, None).await
    }

    /// ListObjectsV2's scan: objects of `bucket` whose key starts with `prefix` and sorts
    /// after `after`, at most `limit`, and whether more may follow.
    pub async fn list(
        &self,
        bucket: &str,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
    ) -> ObjResult<(Vec<ObjectEntry>, bool)> {
        let base = object_key(bucket, b"");
        let start = match after {
            Some(a) if a >= prefix => {
                let mut k = object_key(bucket, a).to_vec();
                k.push(0);
                Bytes::from(k)
            }
            _ => object_key(bucket, prefix),
        };
        // No S3 key holds byte 0xFF: `prefix ‖ 0xFF` ends the prefix's range, and `bucket:0xFF`
        // (the multipart records) ends the bucket's.
        let mut end = object_key(bucket, prefix).to_vec();
        end.push(0xFF);
        let (entries, more) = self.backend.list(start, Bytes::from(end), limit).await?;
        let entries = entries
            .into_iter()
            .filter_map(|l| {
                let key = l.key.slice(base.len().min(l.key.len())..);
                if key.first() == Some(&0xFF) {
                    return None;
                }
                Some(ObjectEntry {
                    key,
                    size: l.size,
                    etag: l.s3_etag.unwrap_or_else(|| "\"\"".into()),
                    modified_ms: l.modified_us / 1000,
                })
            })
            .collect();
        Ok((entries, more))
    }

    /// Whether `bucket` holds any object or open upload.
    pub async fn bucket_is_empty(&self, bucket: &str) -> ObjResult<bool> {
        let start = object_key(bucket, b"");
        let mut end = start.to_vec();
        end.push(0xFF);
        end.push(0xFF);
        let (entries, _) = self.backend.list(start, Bytes::from(end), 1).await?;
        Ok(entries.is_empty())
    }

    // ----- multipart uploads --------------------------------------------------------------

    /// CreateMultipartUpload: opens an upload of `key`; returns its id.
    pub async fn create_upload(
        &self,
        bucket: &str,
        key: &[u8],
        meta: ObjectMeta,
    ) -> ObjResult<u128> {
        let id = self.new_id();
        let record = UploadRecord {
            key: Bytes::copy_from_slice(key),
            meta,
            created_us: self.now_us(),
        };
        let value = postcard::to_stdvec(&record).unwrap_or_default();
        self.backend
            .set_value(&upload_key(bucket, id), Bytes::from(value))
            .await?;
        Ok(id)
    }

    async fn upload(&self, bucket: &str, key: &[u8], id: u128) -> ObjResult<UploadRecord> {
        let value = self
            .backend
            .get_value(&upload_key(bucket, id))
            .await?
            .ok_or(ObjectError::NoSuchUpload)?;
        let record: UploadRecord =
            postcard::from_bytes(&value).map_err(|_| ObjectError::NoSuchUpload)?;
        if record.key != key {
            return Err(ObjectError::NoSuchUpload);
        }
        Ok(record)
    }

    /// UploadPart: stores part `number` of upload `id`; returns its quoted ETag. S3 numbers
    /// parts 1..=10000 (its front end checks that); the HTTP API's uploads by byte range
    /// number them by chunk ([`Objects::range_part_number`]), up to `u32::MAX`.
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        number: u32,
        body: ByteStream,
        content_md5: Option<[u8; 16]>,
    ) -> ObjResult<String> {
        self.upload(bucket, key, id).await?;
        let _permit = self.admit().await?;
        let full = object_key(bucket, key);
        // Each upload of a part has its own chunk version: a part sent twice never mixes.
        let version = self.new_version();
        let md5 = self.cfg.md5_etag || content_md5.is_some();
        let stored = self.store_body(&full, version, 0, 0, md5, body).await?;
        // A part is never inline (not even an empty one): the object is its parts' chunks.
        let stored = Stored {
            inline: None,
            ..stored
        };
        let part = self.manifest_of(version, stored, content_md5, ObjectMeta::default())?;
        self.backend
            .set_value(&part_key(bucket, id, number), part.encode())
            .await?;
        Ok(part.meta.s3_etag)
    }

    async fn part(&self, bucket: &str, id: u128, number: u32) -> ObjResult<Option<Manifest>> {
        match self
            .backend
            .get_value(&part_key(bucket, id, number))
            .await?
        {
            Some(v) => Ok(Manifest::decode(&v)?),
            None => Ok(None),
        }
    }

    /// ListParts: the parts uploaded so far, by number, after `marker`, at most `limit`;
    /// and whether more follow.
    pub async fn list_parts(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        marker: u32,
        limit: usize,
    ) -> ObjResult<(Vec<PartEntry>, bool)> {
        self.upload(bucket, key, id).await?;
        let Some(first) = marker.checked_add(1) else {
            return Ok((Vec::new(), false));
        };
        let start = part_key(bucket, id, first);
        let (entries, more) = self
            .backend
            .list(start, parts_end(bucket, id), limit)
            .await?;
        let prefix_len = upload_key(bucket, id).len() + 1;
        let parts = entries
            .into_iter()
            .filter_map(|l| {
                let number = part_number(&l.key, prefix_len)?;
                Some(PartEntry {
                    number,
                    size: l.size,
                    etag: l.s3_etag.unwrap_or_default(),
                    modified_ms: l.modified_us / 1000,
                })
            })
            .collect();
        Ok((parts, more))
    }

    /// CompleteMultipartUpload: assembles the listed parts (ascending numbers, ETags as
    /// UploadPart returned them) into the object and commits it; the upload's records are
    /// deleted. The object's BLAKE3 is computed by reading the parts back, which also checks
    /// every chunk once more before the object becomes visible.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        parts: &[(u32, String)],
    ) -> ObjResult<Manifest> {
        let record = self.upload(bucket, key, id).await?;
        if parts.is_empty() {
            return Err(ObjectError::InvalidPart("no parts were listed".into()));
        }
        if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(ObjectError::InvalidPartOrder);
        }
        let _permit = self.admit().await?;
        let mut chunks = Vec::new();
        let mut md5s = Vec::with_capacity(parts.len() * 16);
        let mut size = 0u64;
        for (i, (number, etag)) in parts.iter().enumerate() {
            let part = self.part(bucket, id, *number).await?.ok_or_else(|| {
                ObjectError::InvalidPart(format!("part {number} was not uploaded"))
            })?;
            let want = etag.trim_matches('"');
            if part.meta.s3_etag.trim_matches('"') != want {
                return Err(ObjectError::InvalidPart(format!(
                    "part {number}'s ETag is {}, not {etag}",
                    part.meta.s3_etag
                )));
            }
            if i + 1 < parts.len() && part.size < MIN_PART_SIZE {
                return Err(ObjectError::EntityTooSmall {
                    part: *number,
                    size: part.size,
                });
            }
            // S3's multipart ETag is the MD5 of the parts' MD5s; parts uploaded with
            // `blob.md5_etag` off contribute their BLAKE3 instead (the ETag is then no MD5).
            match etag_md5(&part.meta.s3_etag) {
                Some(m) => md5s.extend_from_slice(&m),
                None => md5s.extend_from_slice(&part.digest),
            }
            size += part.size;
            chunks.extend(part.chunks);
        }
        let etag = format!("\"{}-{}\"", hex(&md5(&md5s)), parts.len());
        self.commit_parts(bucket, key, id, record, (chunks, size), Some(etag))
            .await
    }

    /// Commits upload `id` of `key` as its parts' `chunks` (`size` bytes in all), in order,
    /// and deletes the upload's records: what [`Objects::complete_upload`] and
    /// [`Objects::complete_range_upload`] share once they have checked the parts. Every
    /// chunk is read back (checked against its digest) for the object's BLAKE3, and, when
    /// `etag` is `None`, for the S3 ETag a single PUT of the same bytes gets (their MD5
    /// under `blob.md5_etag`, else their BLAKE3); the manifest is written last, the commit
    /// point.
    async fn commit_parts(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        record: UploadRecord,
        (chunks, size): (Vec<ChunkRef>, u64),
        etag: Option<String>,
    ) -> ObjResult<Manifest> {
        if size > self.cfg.max_object {
            return Err(ObjectError::TooLarge {
                max: self.cfg.max_object,
            });
        }
        let mut manifest = Manifest {
            version: id,
            size,
            chunk_size: self.cfg.chunk_size,
            chunks,
            inline: None,
            digest: [0; 32],
            placement: self.cfg.chunk_placement,
            created_us: self.now_us(),
            meta: record.meta,
        };
        // Read every chunk back (checked against its digest) for the object's digests.
        let full = object_key(bucket, key);
        let md5_wanted = etag.is_none() && self.cfg.md5_etag;
        let mut hasher = ParallelHasher::start(ObjectHasher::new(), md5_wanted);
        let mut q = FuturesOrdered::new();
        let mut next = 0usize;
        loop {
            while q.len() < self.cfg.prefetch
                && let Some(&c) = manifest.chunks.get(next)
            {
                let backend = self.backend.clone();
                let full = full.clone();
                let stream = stream_of(ChunkId {
                    version: c.version,
                    index: c.index,
                });
                q.push_back(async move { backend.get_chunk(&full, c, stream).await });
                next += 1;
            }
            match q.next().await {
                Some(b) => hasher.update(b?).await,
                None => break,
            }
        }
        let (blake3, md5) = hasher
            .finish()
            .await
            .ok_or_else(|| ObjectError::Body("a digest thread failed".into()))?;
        manifest.digest = blake3;
        manifest.meta.s3_etag = match (etag, md5) {
            (Some(etag), _) => etag,
            (None, Some(m)) => md5_etag(&m),
            (None, None) => format!("\"{}\"", hex(&blake3)),
        };
        self.backend.set_value(&full, manifest.encode()).await?;
        self.forget_upload(bucket, id).await;
        Ok(manifest)
    }

    /// The part number of the part of an upload by byte range (the HTTP API's resumable
    /// uploads) that starts at byte `offset`, a multiple of the chunk size: its chunk's index
    /// plus one, so that the part records list in byte order and completion knows each
    /// part's place ([`Objects::range_part_offset`]). `None` past what a part number holds.
    pub fn range_part_number(&self, offset: u64) -> Option<u32> {
        let index = offset / u64::from(self.cfg.chunk_size);
        u32::try_from(index).ok()?.checked_add(1)
    }

    /// The first byte of part `number` of an upload by byte range.
    pub fn range_part_offset(&self, number: u32) -> u64 {
        u64::from(number.saturating_sub(1)) * u64::from(self.cfg.chunk_size)
    }

    /// Completes an upload whose parts were sent by byte range: part `n` holds the bytes
    /// from [`Objects::range_part_offset`]`(n)`, and the parts must cover `0..size` exactly,
    /// contiguous and without overlap, all stored with this node's chunk size (else
    /// `InvalidPart` naming the first gap or overlap, and nothing is committed). Unlike S3's
    /// completion no part size is too small and no ETag list is asked for; the object's
    /// ETag is the one a single PUT of the same bytes gets. Commits as
    /// [`Objects::complete_upload`] does (the manifest last, then the records go).
    pub async fn complete_range_upload(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        size: u64,
    ) -> ObjResult<Manifest> {
        let record = self.upload(bucket, key, id).await?;
        if size == 0 {
            return Err(ObjectError::InvalidPart(
                "size is 0: an upload by ranges has at least one part (PUT an empty object \
                 whole)"
                    .into(),
            ));
        }
        if size > self.cfg.max_object {
            return Err(ObjectError::TooLarge {
                max: self.cfg.max_object,
            });
        }
        let _permit = self.admit().await?;
        let cs = self.cfg.chunk_size;
        let prefix_len = upload_key(bucket, id).len() + 1;
        let mut chunks = Vec::new();
        // The end of the bytes the parts so far cover.
        let mut end = 0u64;
        let mut start = part_key(bucket, id, 1);
        loop {
            let (entries, more) = self
                .backend
                .list(start.clone(), parts_end(bucket, id), 1000)
                .await?;
            for l in &entries {
                let Some(number) = part_number(&l.key, prefix_len) else {
                    continue;
                };
                let offset = self.range_part_offset(number);
                let part = self.part(bucket, id, number).await?.ok_or_else(|| {
                    ObjectError::InvalidPart(format!(
                        "the part at byte {offset} went away while completing (a concurrent \
                         abort?)"
                    ))
                })?;
                if part.chunk_size != cs {
                    return Err(ObjectError::InvalidPart(format!(
                        "the part at byte {offset} was stored with chunk size {}, not this \
                         node's {cs}: send it again",
                        part.chunk_size
                    )));
                }
                if offset > end {
                    return Err(ObjectError::InvalidPart(format!(
                        "gap: no part holds bytes {end}-{} (send them, then complete)",
                        offset - 1
                    )));
                }
                if offset < end {
                    return Err(ObjectError::InvalidPart(format!(
                        "overlap: the part at bytes {offset}-{} overlaps the one before it, \
                         which ends at byte {} (send one part per range)",
                        offset.saturating_add(part.size).saturating_sub(1),
                        end - 1
                    )));
                }
                end = offset.saturating_add(part.size);
                if end > size {
                    return Err(ObjectError::InvalidPart(format!(
                        "the part at bytes {offset}-{} reaches past size {size}",
                        end - 1
                    )));
                }
                chunks.extend(part.chunks);
            }
            match entries.last() {
                Some(last) if more => start = key_after(&last.key),
                _ => break,
            }
        }
        if end < size {
            return Err(ObjectError::InvalidPart(format!(
                "gap: no part holds bytes {end}-{} (send them, then complete)",
                size - 1
            )));
        }
        self.commit_parts(bucket, key, id, record, (chunks, size), None)
            .await
    }

    /// AbortMultipartUpload: deletes the upload and its parts' records; their chunks are
    /// garbage.
    pub async fn abort_upload(&self, bucket: &str, key: &[u8], id: u128) -> ObjResult<()> {
        self.upload(bucket, key, id).await?;
        self.forget_upload(bucket, id).await;
        Ok(())
    }

    async fn forget_upload(&self, bucket: &str, id: u128) {
        let _ = self.backend.del(&upload_key(bucket, id)).await;
        let mut marker = 0u32;
        loop {
            let Some(first) = marker.checked_add(1) else {
                return;
            };
            let start = part_key(bucket, id, first);
            let Ok((entries, more)) = self.backend.list(start, parts_end(bucket, id), 1000).await
            else {
                return;
            };
            let prefix_len = upload_key(bucket, id).len() + 1;
            if let Some(n) = entries
                .iter()
                .filter_map(|l| part_number(&l.key, prefix_len))
                .max()
            {
                marker = n;
            }
            // Part records go FORGET_PARALLEL at a time: one round trip each, one after
            // another, made a 128-part upload's completion wait 128 round trips.
            futures_util::stream::iter(&entries)
                .for_each_concurrent(FORGET_PARALLEL, |l| async move {
                    let _ = self.backend.del(&l.key).await;
                })
                .await;
            if !more || entries.is_empty() {
                return;
            }
        }
    }

    /// ListMultipartUploads' scan: the open uploads of `bucket` whose keys start with
    /// `prefix`, after upload `after`, in ascending upload id (the order their records are
    /// stored in), at most `limit`, within `budget`. Part records are passed over, the rest of an upload's parts skipped with a
    /// new listing once a batch reaches them (an upload may have 10 000).
    pub async fn list_uploads(
        &self,
        bucket: &str,
        prefix: &[u8],
        after: Option<u128>,
        limit: usize,
        budget: &mut ListBudget,
    ) -> ObjResult<UploadPage> {
        let base = object_key(bucket, b"").len();
        let (mut start, end) = uploads_range(bucket);
        if let Some(id) = after {
            start = start.max(parts_end(bucket, id));
        }
        let limit = limit.max(1);
        let mut page = UploadPage::default();
        // The last upload id the scan passed (its records are all behind it).
        let mut passed: Option<u128> = None;
        loop {
            // The budget applies once the page has moved on, so that every page does.
            if passed.is_some() && budget.exhausted() {
                page.next = passed;
                return Ok(page);
            }
            let want = limit
                .saturating_sub(page.uploads.len())
                .saturating_add(1)
                .min(1000);
            let want = budget.call(want);
            let (entries, more) = self.backend.list(start.clone(), end.clone(), want).await?;
            for l in &entries {
                let Some((id, is_upload)) = mpu_record(&l.key, base) else {
                    continue;
                };
                if passed == Some(id) {
                    continue;
                }
                if is_upload {
                    if page.uploads.len() >= limit || (passed.is_some() && budget.exhausted()) {
                        page.next = passed;
                        return Ok(page);
                    }
                    budget.read(1);
                    if let Some(v) = self.backend.get_value(&l.key).await?
                        && let Ok(r) = postcard::from_bytes::<UploadRecord>(&v)
                        && r.key.starts_with(prefix)
                    {
                        page.uploads.push((r.key, id, r.created_us / 1000));
                    }
                }
                // A part whose upload record is gone (an abort half done) is passed too.
                passed = Some(id);
            }
            let Some(last) = entries.last() else {
                return Ok(page);
            };
            if !more {
                return Ok(page);
            }
            start = key_after(&last.key);
            if let Some(id) = passed {
                start = start.max(parts_end(bucket, id));
            }
        }
    }

    /// The keys of `bucket` with an open upload, all of them (garbage collection must keep
    /// every version of those).
    async fn upload_keys(&self, bucket: &str) -> ObjResult<HashSet<Bytes>> {
        let mut keys = HashSet::new();
        let mut after = None;
        let mut budget = ListBudget::UNLIMITED;
        loop {
            let page = self
                .list_uploads(bucket, b"", after, usize::MAX, &mut budget)
                .await?;
            keys.extend(page.uploads.into_iter().map(|(key, _, _)| key));
            match page.next {
                Some(id) => after = Some(id),
                None => return Ok(keys),
            }
        }
    }
}

/// What one listing request may ask of the backend before it answers with what it has,
/// truncated, and a continuation token to go on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListBudget {
    /// Backend listing calls.
    pub calls: usize,
    /// Records read: entries the calls ask for, and values read besides.
    pub records: usize,
}

/// The budget of one S3 listing request (a ListObjectsV2 or ListMultipartUploads page). On a
/// cluster every backend listing call is a scatter-gather to a replica of every partition, so
/// without a bound one page could cost a call for each common prefix it returns (1000, when
/// every prefix holds more keys than a call reads) or read every part record of every upload
/// (10 000 a upload). A plain page takes one call of at most 1001 records; 8 calls still fill
/// a page of common prefixes holding hundreds of keys each, while the worst page costs a few
/// times a plain one. A page cut short is truncated with a continuation token, as S3 may do
/// (clients go on from it).
pub const LIST_BUDGET: ListBudget = ListBudget {
    calls: 8,
    records: 10_000,
};

impl ListBudget {
    /// No bound (background work that must see everything).
    pub const UNLIMITED: ListBudget = ListBudget {
        calls: usize::MAX,
        records: usize::MAX,
    };

    /// Whether it is spent.
    pub fn exhausted(&self) -> bool {
        self.calls == 0 || self.records == 0
    }

    /// Spends a listing call that wants `want` records; how many it may ask for (at least
    /// one, so that a call always moves on).
    pub fn call(&mut self, want: usize) -> usize {
        let n = want.min(self.records).max(1);
        self.calls = self.calls.saturating_sub(1);
        self.records = self.records.saturating_sub(n);
        n
    }

    /// Spends `n` records read outside listing calls.
    pub fn read(&mut self, n: usize) {
        self.records = self.records.saturating_sub(n);
    }
}

/// One page of a bucket's open multipart uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadPage {
    /// (key, upload id, initiated ms), by upload id.
    pub uploads: Vec<(Bytes, u128, u64)>,
    /// When more may follow (the page is truncated): the upload id to go on after.
    pub next: Option<u128>,
}

/// The range of `bucket`'s multipart records: `bucket:0xFF` up to `bucket:0xFF 0xFF`.
fn uploads_range(bucket: &str) -> (Bytes, Bytes) {
    let mut start = object_key(bucket, b"").to_vec();
    start.push(0xFF);
    let mut end = start.clone();
    end.push(0xFF);
    (Bytes::from(start), Bytes::from(end))
}

/// The upload id a multipart record names (`base`: the length of its bucket's key prefix),
/// and whether it is the upload's own record (`…mpu/{ID}`), not a part's (`…mpu/{ID}/N`).
fn mpu_record(key: &[u8], base: usize) -> Option<(u128, bool)> {
    let rest = key.get(base..)?.strip_prefix(b"\xffmpu/{")?;
    let id = parse_upload_id(std::str::from_utf8(rest.get(..32)?).ok()?)?;
    match rest.get(32..)? {
        b"}" => Some((id, true)),
        tail => tail.starts_with(b"}/").then_some((id, false)),
    }
}

/// The first key after `key`.
fn key_after(key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    Bytes::from(k)
}

impl Objects {
    /// The object service's series in Prometheus text (spec §7 metrics): transfers active,
    /// queued, admitted and refused by class, time spent queued, bytes in flight, object bytes
    /// in and out, chunk bytes stored, chunk versions collected.
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let a = self.admission.stats();
        let classes = meridian_blob::admission::TransferClass::ALL;
        let mut family = |name: &str, kind: &str, help: &str, values: &[u64]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (c, v) in classes.iter().zip(values) {
                let _ = writeln!(out, "{name}{{class=\"{}\"}} {v}", c.as_str());
            }
        };
        let usize_to = |v: [usize; 3]| v.map(|x| x as u64);
        family(
            "meridian_blob_active",
            "gauge",
            "Transfers running, by class.",
            &usize_to(a.active),
        );
        family(
            "meridian_blob_queued",
            "gauge",
            "Transfers waiting for a slot, by class.",
            &usize_to(a.queued),
        );
        family(
            "meridian_blob_admitted_total",
            "counter",
            "Transfers admitted, by class.",
            &a.admitted_total,
        );
        family(
            "meridian_blob_rejected_total",
            "counter",
            "Transfers refused with TooManyTransfers, by class.",
            &a.rejected_total,
        );
        let scalar = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        scalar(
            out,
            "meridian_blob_queue_wait_us_total",
            "counter",
            "Time transfers spent queued, microseconds.",
            a.queue_wait_us_total,
        );
        scalar(
            out,
            "meridian_blob_inflight_bytes",
            "gauge",
            "Chunk bytes in flight.",
            self.inflight.in_use(),
        );
        let _ = writeln!(
            out,
            "# HELP meridian_blob_bytes_total Object bytes received and sent.\n\
             # TYPE meridian_blob_bytes_total counter\n\
             meridian_blob_bytes_total{{dir=\"in\"}} {}\n\
             meridian_blob_bytes_total{{dir=\"out\"}} {}",
            self.bytes_in.load(Ordering::Relaxed),
            self.bytes_out.load(Ordering::Relaxed)
        );
        scalar(
            out,
            "meridian_blob_stored_bytes",
            "gauge",
            "Chunk bytes this node stores.",
            self.chunk_store().stored_bytes(),
        );
        scalar(
            out,
            "meridian_blob_gc_deleted_total",
            "counter",
            "Chunk versions deleted by garbage collection.",
            self.gc_deleted.load(Ordering::Relaxed),
        );
    }
}

/// Part records a finished or aborted upload deletes at once.
const FORGET_PARALLEL: usize = 16;

/// The chunk versions one chunk-repair pass looks at.
pub const REPAIR_VERSIONS_PER_PASS: usize = 256;

/// What one chunk-repair pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairPass {
    /// Chunk versions looked at.
    pub versions: u64,
    /// Of those, how many a live manifest references.
    pub live: u64,
    /// Chunks sent to replicas that lacked them.
    pub sent: u64,
}

/// What one scrub pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrubPass {
    /// Chunks looked at.
    pub chunks: u64,
    /// Bytes read back and verified.
    pub bytes: u64,
    /// Copies that failed their digest (deleted).
    pub corrupt: u64,
    /// Of those, how many were fetched again from healthy replicas.
    pub repaired: u64,
}

/// What one garbage-collection pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcPass {
    /// Versions of chunks looked at.
    pub versions: u64,
    /// Versions deleted.
    pub deleted: u64,
    /// Bytes freed.
    pub bytes_freed: u64,
}

impl Objects {
    fn chunk_store(&self) -> Arc<dyn ChunkStore> {
        match &self.backend {
            Backend::Local { chunks, .. } => chunks.clone(),
            Backend::Cluster(c) => c.node.chunk_store(),
        }
    }

    /// The manifests a key holds now (every sibling), as garbage collection sees them.
    async fn key_state(&self, key: &[u8]) -> KeyState {
        match self.manifests_of(key).await {
            Some(manifests) => KeyState::from_manifests(&manifests),
            None => KeyState::Unknown,
        }
    }

    /// The manifests a key holds now (every sibling); `None` when the read fails or a value
    /// does not decode (garbage collection then keeps everything of the key).
    async fn manifests_of(&self, key: &[u8]) -> Option<Vec<Manifest>> {
        let values: Vec<Bytes> = match &self.backend {
            Backend::Local { keyspace, .. } => keyspace.get(key).ok()?.into_iter().collect(),
            Backend::Cluster(c) => {
                use meridian_replication::dispatch::{Read, ReadOpts};
                match c.dispatch.read(key, ReadOpts::Default).await.ok()? {
                    Read::Eventual(meridian_replication::GetResult::Found { values, .. }) => values,
                    Read::Eventual(meridian_replication::GetResult::NotFound { .. }) => Vec::new(),
                    Read::Timeline(r) => r.value().cloned().into_iter().collect(),
                    Read::Transactional { value, .. } => value.into_iter().collect(),
                }
            }
        };
        let mut manifests = Vec::with_capacity(values.len());
        for v in &values {
            if let Some(m) = Manifest::decode(v).ok()? {
                manifests.push(m);
            }
        }
        Some(manifests)
    }

    /// One scrub pass (spec §8): every chunk this node stores is read back and checked
    /// against its digest, at most `blob.scrub_bytes_per_sec`. A corrupt copy is deleted and,
    /// in a cluster, read again through the replicas, whose read repair stores a good copy
    /// here (the digest comes from the key's manifest; a chunk no manifest names yet — an
    /// open upload's — is only deleted, and its upload will fail its completion's check).
    pub async fn scrub(&self) -> ObjResult<ScrubPass> {
        let store = self.chunk_store();
        let versions = on_store(&store, |s| s.versions()).await?;
        let rate = self.cfg.scrub_bytes_per_sec.max(1);
        let started = tokio::time::Instant::now();
        let mut pass = ScrubPass::default();
        for (version, info) in versions {
            let indexes = on_store(&store, move |s| s.indexes(version)).await?;
            for index in indexes {
                let id = ChunkId { version, index };
                pass.chunks += 1;
                match on_store(&store, move |s| s.get(id)).await {
                    Ok(Some(b)) => pass.bytes += b.len() as u64,
                    Ok(None) => {}
                    Err(ObjectError::Blob(BlobError::DigestMismatch { .. })) => {
                        pass.corrupt += 1;
                        tracing::warn!(chunk = ?id, "scrub: a stored chunk failed its digest");
                        on_store(&store, move |s| s.remove(id)).await?;
                        if self.refetch_chunk(&info.key, id).await {
                            pass.repaired += 1;
                        }
                    }
                    Err(e) => return Err(e),
                }
                // Paced: never ahead of `rate` bytes per second since the pass started.
                let due =
                    std::time::Duration::from_micros(pass.bytes.saturating_mul(1_000_000) / rate);
                let elapsed = started.elapsed();
                if due > elapsed {
                    tokio::time::sleep(due - elapsed).await;
                }
            }
        }
        Ok(pass)
    }

    /// One chunk-repair pass (spec §9, anti-entropy on the chunk path), in cluster mode: the
    /// next [`REPAIR_VERSIONS_PER_PASS`] chunk versions this node stores (in version order,
    /// from where the last pass stopped, wrapping around), and for each one its key's live
    /// manifests reference, every other replica of its chunks' home keys is sent the chunks
    /// it lacks (`EventualNode::repair_chunk_version`). Versions no manifest references —
    /// replaced, deleted, or never committed — are left to garbage collection, so a pass
    /// never brings back chunks a replica has collected.
    pub async fn repair_chunks(&self) -> ObjResult<RepairPass> {
        let Backend::Cluster(c) = &self.backend else {
            return Ok(RepairPass::default());
        };
        let store = self.chunk_store();
        let mut versions = on_store(&store, |s| s.versions()).await?;
        versions.sort_unstable_by_key(|(v, _)| *v);
        let after = *self.repair_cursor.lock();
        let start = versions.partition_point(|(v, _)| *v <= after);
        let round: Vec<(u128, VersionInfo)> = versions[start..]
            .iter()
            .chain(&versions[..start])
            .take(REPAIR_VERSIONS_PER_PASS)
            .cloned()
            .collect();
        let mut pass = RepairPass::default();
        for (version, info) in round {
            *self.repair_cursor.lock() = version;
            pass.versions += 1;
            let Some(manifests) = self.manifests_of(&info.key).await else {
                continue;
            };
            if !manifests
                .iter()
                .any(|m| m.chunks.iter().any(|r| r.version == version))
            {
                continue;
            }
            pass.live += 1;
            pass.sent += c.node.repair_chunk_version(&info.key, version).await? as u64;
        }
        Ok(pass)
    }

    /// Runs [`Objects::repair_chunks`] every `blob.chunk_repair_interval_ms` until `stop`.
    pub async fn run_chunk_repair(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = self.cfg.chunk_repair_interval_ms;
        every(
            period,
            stop,
            "chunk repair pass",
            || self.repair_chunks(),
            |p| {
                if p.sent > 0 {
                    tracing::info!(chunks = p.sent, "chunk repair sent missing chunks");
                }
            },
        )
        .await;
    }

    /// Reads chunk `id` of `key`'s object through its replicas (so the read's repair puts a
    /// good copy back on this node); whether it was found.
    async fn refetch_chunk(&self, key: &Bytes, id: ChunkId) -> bool {
        let Backend::Cluster(c) = &self.backend else {
            return false;
        };
        let Some(manifests) = self.manifests_of(key).await else {
            return false;
        };
        let Some(chunk) = manifests
            .iter()
            .flat_map(|m| m.chunks.iter())
            .find(|c| c.version == id.version && c.index == id.index)
        else {
            return false;
        };
        c.node
            .blob_get_chunk(key, id, chunk.digest, 0)
            .await
            .is_ok()
    }

    /// Every second until `stop`: frees upload buffers that went unused for a second, and
    /// closes handles idle or old past their limits.
    pub async fn run_housekeeping(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {
                    self.buffers.trim();
                    let now = self.now_us();
                    self.handles.lock().expire(now);
                }
            }
        }
    }

    /// `BLOB.OPEN`: a new handle on `pinned`, what `key` (the RESP key) holds now.
    pub fn open_handle(&self, key: &[u8], pinned: Pinned) -> Result<u64, HandleFault> {
        let version = match &pinned {
            Pinned::Chunked(m) => m.version,
            Pinned::Bytes(_) => 0,
        };
        let now = self.now_us();
        let mut table = self.handles.lock();
        // Ids are drawn at random (63 bits: a RESP integer), so one client cannot walk
        // another's handles by counting.
        let id = loop {
            let id = (self.new_id() as u64) & (i64::MAX as u64);
            if id != 0 && !table.contains(id) {
                break id;
            }
        };
        table.open(id, Bytes::copy_from_slice(key), version, pinned, now)?;
        Ok(id)
    }

    /// What handle `id` of `key` reads (a use: it stays open another `handle_idle_ms`).
    pub fn handle(&self, key: &[u8], id: u64) -> Result<Pinned, HandleFault> {
        let now = self.now_us();
        self.handles.lock().get(key, id, now)
    }

    /// `BLOB.CLOSE`: whether handle `id` of `key` was open.
    pub fn close_handle(&self, key: &[u8], id: u64) -> bool {
        self.handles.lock().close(key, id)
    }

    /// Handles open now and bytes they pin.
    pub fn handle_usage(&self) -> (usize, u64) {
        let t = self.handles.lock();
        (t.len(), t.pinned_bytes())
    }

    /// Runs [`Objects::scrub`] every `blob.scrub_interval_ms` until `stop`.
    pub async fn run_scrub(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = self.cfg.scrub_interval_ms;
        every(
            period,
            stop,
            "scrub pass",
            || self.scrub(),
            |p| {
                tracing::info!(
                    chunks = p.chunks,
                    corrupt = p.corrupt,
                    repaired = p.repaired,
                    "scrub pass done"
                );
            },
        )
        .await;
    }

    /// One pass of chunk garbage collection on this node: every stored version old enough
    /// to be garbage is checked against its key's manifests (and the key's open multipart
    /// uploads, which keep all its unreferenced versions), and deleted when the rules of
    /// `meridian_blob::gc` say so.
    pub async fn collect_garbage(&self) -> ObjResult<GcPass> {
        let store = self.chunk_store();
        let versions = on_store(&store, |s| s.versions()).await?;
        let cfg = GcConfig {
            version_grace_us: self.cfg.version_grace_ms * 1000,
            orphan_ttl_us: self.cfg.orphan_ttl_ms * 1000,
        };
        let now = self.now_us();
        let mut pass = GcPass::default();
        // The keys with open uploads, by bucket: listed once a pass, when a bucket's first
        // deletion is due (`None`: the listing failed, and the bucket's versions are kept).
        // Every version was stored before the listing (`versions` was read first), so an
        // upload a version belongs to was created before it too.
        let mut uploads: HashMap<Bytes, Option<HashSet<Bytes>>> = HashMap::new();
        for (version, info) in versions {
            pass.versions += 1;
            if now.saturating_sub(info.created_us) < cfg.version_grace_us {
                continue;
            }
            let state = self.key_state(&info.key).await;
            // An open upload keeps the version, so the uploads are only read for a deletion.
            if decide(&cfg, version, info.created_us, &state, false, now) != GcDecision::Delete {
                continue;
            }
            let (bucket, key) = meridian_cluster::bucket_and_key(&info.key);
            // No upload is ever opened in a bucket whose name is not UTF-8.
            let upload_open = match std::str::from_utf8(bucket) {
                Err(_) => false,
                Ok(name) => {
                    let open = match uploads.entry(Bytes::copy_from_slice(bucket)) {
                        Entry::Occupied(o) => o.into_mut(),
                        Entry::Vacant(v) => v.insert(self.upload_keys(name).await.ok()),
                    };
                    open.as_ref().is_none_or(|keys| keys.contains(key))
                }
            };
            if !upload_open {
                pass.bytes_freed += on_store(&store, move |s| s.delete_version(version)).await?;
                pass.deleted += 1;
                self.gc_deleted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(pass)
    }

    /// Runs [`Objects::collect_garbage`] every `blob.gc_interval_ms` until `stop`.
    pub async fn run_gc(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = self.cfg.gc_interval_ms;
        every(
            period,
            stop,
            "chunk garbage collection",
            || self.collect_garbage(),
            |p| {
                if p.deleted > 0 {
                    tracing::info!(
                        deleted = p.deleted,
                        bytes = p.bytes_freed,
                        "chunk garbage collected"
                    );
                }
            },
        )
        .await;
    }
}

/// Runs `pass` every `period_ms` until `stop`, the first time one period after the start (a
/// pass that overruns delays the next rather than bunching them); `done` reports a pass that
/// succeeded, a failure is logged as `what` and retried at the next tick. `stop` also ends a
/// pass under way: a pass deletes only what it has found garbage or corrupt, one item at a
/// time, so a pass cut short leaves nothing half done (the next one goes on).
async fn every<T, F: Future<Output = ObjResult<T>>>(
    period_ms: u64,
    stop: tokio_util::sync::CancellationToken,
    what: &'static str,
    mut pass: impl FnMut() -> F,
    mut done: impl FnMut(T),
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(period_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => tokio::select! {
                _ = stop.cancelled() => return,
                r = pass() => r,
            },
        };
        match outcome {
            Ok(p) => done(p),
            Err(e) => tracing::warn!(error = %e, "{what} failed; will retry"),
        }
    }
}

/// The chunks of one body on their way: each is hashed (on the digest threads) and stored
/// (on the replicas) at once, at most `window` stores in flight; its bytes stay reserved until
/// both are done.
struct ChunkPipeline {
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
    fn new(
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
    async fn push(&mut self, chunk: Bytes, permit: InflightPermit) -> ObjResult<()> {
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
    async fn finish(mut self) -> ObjResult<(Vec<ChunkRef>, [u8; 32], Option<[u8; 16]>)> {
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
fn joined(r: Result<ObjResult<()>, tokio::task::JoinError>) -> ObjResult<()> {
    r.map_err(|e| ObjectError::Body(format!("chunk upload task failed: {e}")))?
}

/// What [`Objects::store_body`] stored.
struct Stored {
    chunks: Vec<ChunkRef>,
    inline: Option<Bytes>,
    size: u64,
    blake3: [u8; 32],
    /// Computed when S3 ETags are MD5s (`blob.md5_etag`) or the client sent one to check.
    md5: Option<[u8; 16]>,
}

impl Stored {
    /// The S3 ETag: the quoted MD5, or the quoted BLAKE3 (64 hex digits, never mistaken
    /// for an MD5) when MD5 is off.
    fn etag(&self) -> String {
        match &self.md5 {
            Some(m) => md5_etag(m),
            None => format!("\"{}\"", hex(&self.blake3)),
        }
    }

    /// Whether the body matches a client's `Content-MD5`.
    fn md5_matches(&self, want: Option<[u8; 16]>) -> bool {
        want.is_none_or(|w| self.md5 == Some(w))
    }
}
