//! The manifest: what a large object is made of. It is stored as the object's value in its
//! bucket, so reading, replicating, resolving and deleting it follows the bucket's model; the
//! chunks it names are immutable and never conflict.
//!
//! Departure from the spec's manifest **[M]**: chunks are listed one by one with their length
//! and version (`ChunkRef`) rather than as `size / chunk_size` digests of one version, so an
//! object assembled from S3 multipart parts (whose sizes are the client's choice) is a manifest
//! like any other. An object at most `blob_threshold` long keeps its bytes inline and has no
//! chunks, so every object carries the same metadata (ETag, content type, user metadata).
//!
//! Encoding: an 8-byte magic, then postcard. A value that does not start with the magic is a
//! plain value, not a manifest.

use crate::error::{BlobError, Result};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// The first bytes of every encoded manifest.
pub const MAGIC: &[u8; 8] = b"\xffMRDBLB\x01";

/// Where an object's chunks live (`chunk_placement`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// On the manifest key's replicas: the object is one unit on N nodes.
    #[default]
    WithManifest,
    /// Chunk `i` on the replicas of `hash(version, i)`: spreads very large objects.
    Spread,
}

/// The bit of a chunk version saying its chunks are spread: a chunk's placement follows
/// from its version alone, so a reader, the handoff and the GC find it without the
/// manifest.
pub const SPREAD_BIT: u128 = 1 << 127;

impl Placement {
    /// The placement of the chunks of `version`.
    pub fn of_version(version: u128) -> Placement {
        if version & SPREAD_BIT != 0 {
            Placement::Spread
        } else {
            Placement::WithManifest
        }
    }

    /// `version` marked with this placement.
    pub fn mark(self, version: u128) -> u128 {
        match self {
            Placement::WithManifest => version & !SPREAD_BIT,
            Placement::Spread => version | SPREAD_BIT,
        }
    }

    /// The key whose replicas hold chunk `index` of `version` of the object at `key`
    /// (`bucket:key`): the object's key itself, or for a spread chunk a key of the same
    /// bucket that hashes the version and index (so the bucket's N and W still apply).
    pub fn home(key: &[u8], version: u128, index: u32) -> std::borrow::Cow<'_, [u8]> {
        match Placement::of_version(version) {
            Placement::WithManifest => std::borrow::Cow::Borrowed(key),
            Placement::Spread => {
                let bucket = key
                    .iter()
                    .position(|&b| b == b':')
                    .map_or(key, |i| &key[..i]);
                let mut home = Vec::with_capacity(bucket.len() + 30);
                home.extend_from_slice(bucket);
                home.extend_from_slice(b":\xff\xfespread/");
                home.extend_from_slice(&version.to_be_bytes());
                home.extend_from_slice(&index.to_be_bytes());
                std::borrow::Cow::Owned(home)
            }
        }
    }
}

/// One chunk of an object, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// The upload that wrote the chunk (an object version, or a multipart upload).
    pub version: u128,
    /// The chunk's index within that upload.
    pub index: u32,
    /// Its length in bytes (at least 1).
    pub len: u32,
    /// xxh3-128 of its bytes.
    pub digest: [u8; 16],
}

/// What S3 and HTTP clients see besides the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// `Content-Type` given at upload.
    pub content_type: Option<String>,
    /// `x-amz-meta-*` pairs (names lower-cased, without the prefix), in order.
    pub user: Vec<(String, String)>,
    /// The S3 ETag, quoted: MD5 of the body, or of the parts' MD5s with `-N` for multipart.
    pub s3_etag: String,
}

/// A large object version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// This version's id (random; also the version of the chunks it wrote).
    pub version: u128,
    /// The object's length in bytes.
    pub size: u64,
    /// The chunk size the upload used (the last chunk and multipart boundaries may be shorter).
    pub chunk_size: u32,
    /// The chunks in order; their lengths add up to `size`. Empty when `inline` holds the bytes.
    pub chunks: Vec<ChunkRef>,
    /// The bytes of an object no longer than the blob threshold.
    pub inline: Option<Bytes>,
    /// BLAKE3 of the whole object: the native ETag.
    pub digest: [u8; 32],
    /// Where the chunks live.
    pub placement: Placement,
    /// When the version was committed (µs of the committing node's clock).
    pub created_us: u64,
    /// Content type, user metadata, S3 ETag.
    pub meta: ObjectMeta,
}

impl Manifest {
    /// The manifest as stored: the magic, then postcard.
    pub fn encode(&self) -> Bytes {
        let mut out = MAGIC.to_vec();
        // Serializing plain data into a Vec cannot fail.
        let body = postcard::to_stdvec(self).unwrap_or_default();
        out.extend_from_slice(&body);
        Bytes::from(out)
    }

    /// Whether a stored value is a manifest (starts with the magic).
    pub fn is_manifest(value: &[u8]) -> bool {
        value.starts_with(MAGIC)
    }

    /// Decodes a stored value: `Ok(None)` for a plain value, an error for a manifest that does
    /// not decode or whose chunks do not add up to its size.
    pub fn decode(value: &[u8]) -> Result<Option<Manifest>> {
        let Some(body) = value.strip_prefix(MAGIC.as_slice()) else {
            return Ok(None);
        };
        let m: Manifest =
            postcard::from_bytes(body).map_err(|e| BlobError::CorruptManifest(e.to_string()))?;
        m.check()?;
        Ok(Some(m))
    }

    fn check(&self) -> Result<()> {
        let bad = |what: &str| Err(BlobError::CorruptManifest(what.to_string()));
        match &self.inline {
            Some(_) if !self.chunks.is_empty() => return bad("inline bytes and chunks"),
            Some(b) if b.len() as u64 != self.size => return bad("inline length is not the size"),
            _ => {}
        }
        if self.inline.is_none() {
            let total: u64 = self.chunks.iter().map(|c| u64::from(c.len)).sum();
            if total != self.size || self.chunks.iter().any(|c| c.len == 0) {
                return bad("chunk lengths do not add up to the size");
            }
        }
        Ok(())
    }

    /// The byte offset each chunk starts at (one more entry than chunks: the last is `size`).
    pub fn offsets(&self) -> Vec<u64> {
        let mut at = 0u64;
        let mut out = Vec::with_capacity(self.chunks.len() + 1);
        out.push(0);
        for c in &self.chunks {
            at += u64::from(c.len);
            out.push(at);
        }
        out
    }

    /// The versions whose chunks this manifest references (for garbage collection).
    pub fn chunk_versions(&self) -> Vec<u128> {
        let mut v: Vec<u128> = self.chunks.iter().map(|c| c.version).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The native ETag: the BLAKE3 digest in hex.
    pub fn blake3_hex(&self) -> String {
        crate::digest::hex(&self.digest)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_version_carries_its_placement_and_spread_chunks_have_homes_of_their_own() {
        let v = 0x1234_u128 | super::SPREAD_BIT;
        assert_eq!(
            Placement::of_version(Placement::Spread.mark(0x1234)),
            Placement::Spread
        );
        assert_eq!(Placement::WithManifest.mark(v), 0x1234);
        assert_eq!(Placement::of_version(0x1234), Placement::WithManifest);
        let key = b"photos:cat.jpg";
        assert_eq!(
            &*Placement::home(key, 0x1234, 3),
            key,
            "with the manifest: the key"
        );
        let a = Placement::home(key, v, 0);
        let b = Placement::home(key, v, 1);
        assert_ne!(a, b, "each spread chunk has its own home");
        assert!(a.starts_with(b"photos:"), "in the object's bucket: {a:?}");
        // A key without a bucket separator is its own bucket.
        assert!(Placement::home(b"nocolon", v, 0).starts_with(b"nocolon:"));
    }

    use super::*;

    fn sample(chunks: Vec<ChunkRef>, size: u64) -> Manifest {
        Manifest {
            version: 7,
            size,
            chunk_size: 4,
            chunks,
            inline: None,
            digest: [1; 32],
            placement: Placement::WithManifest,
            created_us: 5,
            meta: ObjectMeta::default(),
        }
    }

    fn chunk(version: u128, index: u32, len: u32) -> ChunkRef {
        ChunkRef {
            version,
            index,
            len,
            digest: [index as u8; 16],
        }
    }

    #[test]
    fn round_trips_and_plain_values_are_not_manifests() {
        let m = sample(vec![chunk(7, 0, 4), chunk(7, 1, 3)], 7);
        let enc = m.encode();
        assert!(Manifest::is_manifest(&enc));
        assert_eq!(Manifest::decode(&enc).unwrap(), Some(m.clone()));
        assert_eq!(Manifest::decode(b"hello").unwrap(), None);
        assert_eq!(m.offsets(), vec![0, 4, 7]);
        assert_eq!(m.chunk_versions(), vec![7]);
    }

    #[test]
    fn refuses_inconsistent_manifests() {
        let short = sample(vec![chunk(7, 0, 4)], 9).encode();
        assert!(Manifest::decode(&short).is_err());
        let mut garbage = MAGIC.to_vec();
        garbage.extend_from_slice(&[0xff; 5]);
        assert!(Manifest::decode(&garbage).is_err());
        let mut both = sample(vec![chunk(7, 0, 1)], 1);
        both.inline = Some(Bytes::from_static(b"x"));
        assert!(Manifest::decode(&both.encode()).is_err());
    }
}
