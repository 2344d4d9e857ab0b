//! Large objects (spec `large-objects.md`): a value above `blob_threshold` is stored as a
//! [`Manifest`] — an ordinary value of its bucket, so a blob has its bucket's consistency —
//! plus immutable chunks, each checked against its xxh3-128 digest on every write and read.
//!
//! | module | what |
//! |---|---|
//! | [`manifest`] | the manifest, its chunk references and object metadata, and its encoding |
//! | [`digest`] | chunk digests (xxh3-128) and the object's digests (BLAKE3, and MD5 for S3 ETags) |
//! | [`chunk_store`] | where a node keeps chunks: [`MemChunkStore`], [`FileChunkStore`] |
//! | [`range`] | HTTP byte ranges and the chunks a range touches |
//! | [`blocking`] | chunk I/O and digests on a bounded number of threads |
//! | [`buffers`] | recycled chunk-sized buffers for uploads |
//! | [`admission`] | transfer admission: per-class limits, a FIFO queue, then `TooManyTransfers` |
//! | [`gc`] | which stored chunk versions may be deleted |
//! | [`throttled`] | [`ThrottledChunkStore`]: any store at a disk's bandwidth and seek time (benchmarks) |
//!
//! Everything here is storage and rules; moving chunks between nodes is the replication
//! crate's `blob` protocol, and the front ends (S3, HTTP, RESP) drive both through the
//! server's object service.

pub mod admission;
pub mod blocking;
pub mod budget;
pub mod buffers;
pub mod chunk_store;
pub mod digest;
pub mod error;
pub mod gc;
pub mod manifest;
pub mod range;
pub mod throttled;

pub use admission::{
    Admission, AdmissionConfig, AdmissionStats, InflightBytes, InflightPermit, TooManyTransfers,
    TransferClass, TransferPermit,
};
pub use budget::Budget;
pub use buffers::ChunkBuffers;
pub use chunk_store::{ChunkId, ChunkStore, FileChunkStore, MemChunkStore, VersionInfo, on_store};
pub use digest::{ChunkDigest, ObjectHasher, chunk_digest};
pub use error::{BlobError, Result};
pub use gc::{GcConfig, GcDecision, KeyState};
pub use manifest::{ChunkRef, Manifest, ObjectMeta, Placement};
pub use range::{RangeSpec, Unsatisfiable, chunk_slice, chunk_span, content_range, parse_range};
pub use throttled::{DiskConfig, DiskModel, ThrottledChunkStore};
