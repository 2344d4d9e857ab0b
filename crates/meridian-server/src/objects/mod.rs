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
//!
//! Here: puts, reads, heads, deletes, copies and listings. Beside it: `backend` (the one place
//! a single node and a cluster differ), `pipeline` (an upload's chunks in flight),
//! `multipart`, `maintenance` (scrub, chunk repair, GC, handles) and `metrics`.

mod backend;
mod maintenance;
mod metrics;
mod multipart;
mod pipeline;

pub use crate::blob_config::BlobConfig;
use crate::blob_handles::{HandleFault, HandleLimits, HandleTable, Pinned};
use crate::cluster_backend::ClusterBackend;
use crate::keyspace::Keyspace;
pub use backend::Backend;
use backend::{on_store, stream_of};
use bytes::Bytes;
use futures_util::stream::{FuturesOrdered, FuturesUnordered, Stream, StreamExt};
pub use maintenance::{GcPass, REPAIR_VERSIONS_PER_PASS, RepairPass, ScrubPass};
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
pub use multipart::UploadPage;
use pipeline::{ChunkPipeline, Stored};
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

/// The first key after `key`.
fn key_after(key: &[u8]) -> Bytes {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    Bytes::from(k)
}
