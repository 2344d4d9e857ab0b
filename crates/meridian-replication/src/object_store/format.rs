//! How a replica lays out its engine: the stored encoding of an [`Object`]
//! (`OBJECT_FORMAT ‖ postcard(Object)`) and the reserved key spaces (hints, dot floors) that
//! client keys may not enter. Plain functions over bytes, so anti-entropy's tree builder can
//! read stored objects without importing the store that attaches its trees.
//!
//! Guarantees: [`decode_object`] reads back exactly what [`encode_object`] wrote, and refuses
//! (never misreads) bytes of another format; [`encoded_len`] is the length [`encode_object`]
//! produces; every internal key starts with [`RESERVED_PREFIX`] and [`is_reserved_key`] says
//! so of a client key.

use crate::error::{ReplicationError, Result};
use bytes::Bytes;
use meridian_cluster::dvv::Object;

/// The first byte of a stored object's encoding.
pub const OBJECT_FORMAT: u8 = 1;

/// The first byte of every internal key space; client keys may not start with it.
pub const RESERVED_PREFIX: u8 = 0xFF;

/// The prefix of hint keys: `0xFF 'h'`.
pub const HINT_PREFIX: [u8; 2] = [RESERVED_PREFIX, b'h'];

/// The prefix of dot-floor keys: `0xFF 'f'`.
pub const FLOOR_PREFIX: [u8; 2] = [RESERVED_PREFIX, b'f'];

/// Whether a client key falls in the reserved internal key space.
pub fn is_reserved_key(key: &[u8]) -> bool {
    key.first() == Some(&RESERVED_PREFIX)
}

/// Encodes an object for storage: a format byte, then postcard.
pub fn encode_object(o: &Object) -> Bytes {
    // Sized up front: growing the buffer as postcard writes a 500-byte value took seven
    // reallocations and copies per write.
    let size = postcard::experimental::serialized_size(o).expect("objects always serialize");
    let mut out = Vec::with_capacity(1 + size);
    out.push(OBJECT_FORMAT);
    let out = postcard::to_extend(o, out).expect("objects always serialize");
    Bytes::from(out)
}

/// How many bytes [`encode_object`] makes of `o`, without encoding it.
pub fn encoded_len(o: &Object) -> usize {
    1 + postcard::experimental::serialized_size(o).expect("objects always serialize")
}

/// Decodes what [`encode_object`] produced.
pub fn decode_object(bytes: &[u8]) -> Result<Object> {
    match bytes.split_first() {
        Some((&OBJECT_FORMAT, rest)) => {
            postcard::from_bytes(rest).map_err(|e| ReplicationError::Storage {
                reason: format!("stored object does not decode: {e}"),
            })
        }
        Some((v, _)) => Err(ReplicationError::Storage {
            reason: format!("stored object has unknown format {v}"),
        }),
        None => Err(ReplicationError::Storage {
            reason: "stored object is empty".into(),
        }),
    }
}
