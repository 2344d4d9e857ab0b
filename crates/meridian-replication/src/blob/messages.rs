//! The blob protocol's messages ([`BlobMsg`], one variant of [`crate::msg::Msg`]) and the
//! listing entry they carry: plain data, no behaviour, so the wire type can name them without
//! importing the protocol.

use bytes::Bytes;
use meridian_blob::{ChunkDigest, ChunkId};
use meridian_core::PartitionId;
use serde::{Deserialize, Serialize};

/// The blob protocol's messages. A chunk's bytes never travel inside a message: they are the
/// message's out-of-band [`meridian_net::Payload`], sent on a bulk connection (by `sendfile(2)` from a file
/// store over TCP), so chunks never queue control messages behind them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlobMsg {
    /// Store a chunk of `key`'s object, whose bytes are the payload (answered
    /// [`BlobMsg::Stored`]).
    PutChunk {
        /// The object's full key (what the chunk's version is recorded under, for GC).
        key: Bytes,
        /// The chunk.
        id: ChunkId,
        /// Its xxh3-128 digest.
        digest: ChunkDigest,
    },
    /// The chunk is stored.
    Stored,
    /// Send a chunk (answered [`BlobMsg::Chunk`]).
    GetChunk {
        /// The chunk.
        id: ChunkId,
        /// The reader's stream (which bulk connection the answer takes).
        stream: u32,
    },
    /// The answer to `GetChunk`: when `found`, the bytes are the payload; `corrupt` when the
    /// stored copy failed its digest (and was deleted).
    Chunk {
        /// Whether the replica has the chunk (its bytes follow as the payload).
        found: bool,
        /// Whether the stored copy was corrupt.
        corrupt: bool,
    },
    /// Which chunks of `version` the replica holds (answered [`BlobMsg::HasIndexes`]).
    Indexes {
        /// The version.
        version: u128,
    },
    /// The indexes of the chunks of a version a replica holds.
    HasIndexes {
        /// The indexes, ascending.
        indexes: Vec<u32>,
    },
    /// List live keys in `[start, end)` of the given partitions (answered [`BlobMsg::Listed`]).
    List {
        /// The partitions to list.
        partitions: Vec<PartitionId>,
        /// The first key (inclusive).
        start: Bytes,
        /// The end (exclusive; empty: no end).
        end: Bytes,
        /// Most entries.
        limit: u32,
    },
    /// A page of a listing: entries in key order, and whether the page was cut at `limit`.
    Listed {
        /// The entries.
        entries: Vec<Listed>,
        /// Whether more keys may follow the last entry.
        more: bool,
    },
}

/// One key of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    /// The full key.
    pub key: Bytes,
    /// The object's size in bytes.
    pub size: u64,
    /// Its S3 ETag (quoted), if it is a large object's manifest; plain values have none.
    pub s3_etag: Option<String>,
    /// When it was written (µs; 0 when unknown).
    pub modified_us: u64,
}
