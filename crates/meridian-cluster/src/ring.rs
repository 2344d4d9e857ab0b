//! The key ring (spec §1): a stable 64-bit key hash and its mapping onto Q partitions.
//!
//! Guarantees:
//! - [`key_hash`] is `xxh3_64(u32_le(len(bucket)) ‖ bucket ‖ key)`, byte-for-byte, on every
//!   platform and version (golden values are pinned by tests); `std::hash::Hash` is never used.
//! - A [`Ring`] always has a valid Q: a power of two in `64..=4096`. [`Ring::partition`] takes
//!   the top `log2 Q` bits of the hash, so partitions are contiguous hash ranges in ring order.
//! - [`bucket_and_key`] splits a flat client key `bucket:rest` at its **first** colon; a key
//!   without a colon belongs to the bucket [`DEFAULT_BUCKET`]. (Choice: the bucket part may be
//!   empty, `":k"` is bucket `""`, key `k`; the rest may contain further colons.)

use crate::error::RingError;
use meridian_core::PartitionId;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

/// The bucket of a flat key that has no `bucket:` prefix.
pub const DEFAULT_BUCKET: &[u8] = b"default";

/// The spec's key hash: `xxh3_64(u32_le(len(bucket)) ‖ bucket ‖ key)`.
///
/// The length prefix keeps `("ab", "c")` and `("a", "bc")` apart.
///
/// # Panics
/// If `bucket` is longer than `u32::MAX` bytes (the hash is not defined for it).
pub fn key_hash(bucket: &[u8], key: &[u8]) -> u64 {
    let len = u32::try_from(bucket.len()).expect("bucket name longer than u32::MAX bytes");
    let mut h = Xxh3::new();
    h.update(&len.to_le_bytes());
    h.update(bucket);
    h.update(key);
    h.digest()
}

/// Splits a flat key `bucket:rest` at its first colon; without a colon the whole key is in
/// [`DEFAULT_BUCKET`].
pub fn bucket_and_key(full_key: &[u8]) -> (&[u8], &[u8]) {
    match full_key.iter().position(|&b| b == b':') {
        Some(i) => (&full_key[..i], &full_key[i + 1..]),
        None => (DEFAULT_BUCKET, full_key),
    }
}

/// A ring of Q partitions (Q a power of two in `64..=4096`), fixed at cluster creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct Ring {
    q: u32,
}

impl Ring {
    /// The smallest allowed Q.
    pub const MIN_Q: u32 = 64;
    /// The largest allowed Q.
    pub const MAX_Q: u32 = 4096;
    /// The default Q.
    pub const DEFAULT_Q: u32 = 64;

    /// A ring of `q` partitions, or [`RingError::InvalidQ`].
    pub fn new(q: u32) -> Result<Ring, RingError> {
        if q.is_power_of_two() && (Self::MIN_Q..=Self::MAX_Q).contains(&q) {
            Ok(Ring { q })
        } else {
            Err(RingError::InvalidQ { q })
        }
    }

    /// Q, the number of partitions.
    pub fn q(self) -> u32 {
        self.q
    }

    /// The partition owning hash `h`: `h >> (64 − log2 Q)`.
    pub fn partition(self, h: u64) -> PartitionId {
        PartitionId((h >> (64 - self.q.trailing_zeros())) as u32)
    }

    /// The partition of `key` in `bucket` (hash, then [`Ring::partition`]).
    pub fn partition_of(self, bucket: &[u8], key: &[u8]) -> PartitionId {
        self.partition(key_hash(bucket, key))
    }

    /// The partition `steps` places after `p` in ring order, wrapping at Q.
    pub fn successor(self, p: PartitionId, steps: u32) -> PartitionId {
        PartitionId(p.0.wrapping_add(steps) & (self.q - 1))
    }

    /// All partitions, in ring order.
    pub fn partitions(self) -> impl Iterator<Item = PartitionId> {
        (0..self.q).map(PartitionId)
    }
}

impl Default for Ring {
    fn default() -> Self {
        Ring { q: Self::DEFAULT_Q }
    }
}

impl TryFrom<u32> for Ring {
    type Error = RingError;
    fn try_from(q: u32) -> Result<Ring, RingError> {
        Ring::new(q)
    }
}

impl From<Ring> for u32 {
    fn from(r: Ring) -> u32 {
        r.q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64;

    #[test]
    fn hash_is_the_spec_byte_string() {
        let mut bytes = 3u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"img");
        bytes.extend_from_slice(b"cat.png");
        assert_eq!(key_hash(b"img", b"cat.png"), xxh3_64(&bytes));
        // The length prefix separates bucket and key.
        assert_ne!(key_hash(b"ab", b"c"), key_hash(b"a", b"bc"));
    }

    #[test]
    fn hash_golden_values_are_stable() {
        // Pinned so a dependency or refactor cannot silently move every key.
        // The reference XXH3-64 test vector for empty input, seed 0.
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(key_hash(b"", b""), xxh3_64(&[0, 0, 0, 0]));
        assert_eq!(key_hash(b"default", b"k"), GOLDEN_DEFAULT_K);
    }
    const GOLDEN_DEFAULT_K: u64 = 0xbdb6_3380_492f_6eb4;

    #[test]
    fn q_validation() {
        for ok in [64, 128, 256, 1024, 4096] {
            assert_eq!(Ring::new(ok).unwrap().q(), ok);
        }
        for bad in [0, 1, 32, 63, 65, 96, 100, 8192] {
            assert_eq!(Ring::new(bad), Err(RingError::InvalidQ { q: bad }));
        }
        assert_eq!(Ring::default().q(), 64);
    }

    #[test]
    fn partition_takes_top_bits() {
        let r = Ring::new(64).unwrap();
        assert_eq!(r.partition(0), PartitionId(0));
        assert_eq!(r.partition(u64::MAX), PartitionId(63));
        assert_eq!(r.partition(1 << 58), PartitionId(1));
        assert_eq!(r.partition((1 << 58) - 1), PartitionId(0));
        let r = Ring::new(4096).unwrap();
        assert_eq!(r.partition(u64::MAX), PartitionId(4095));
        assert_eq!(r.partition(1 << 52), PartitionId(1));
    }

    #[test]
    fn successor_wraps() {
        let r = Ring::new(64).unwrap();
        assert_eq!(r.successor(PartitionId(63), 1), PartitionId(0));
        assert_eq!(r.successor(PartitionId(10), 64), PartitionId(10));
        assert_eq!(r.partitions().count(), 64);
    }

    #[test]
    fn bucket_split_at_first_colon() {
        assert_eq!(bucket_and_key(b"img:a:b"), (&b"img"[..], &b"a:b"[..]));
        assert_eq!(bucket_and_key(b"plain"), (DEFAULT_BUCKET, &b"plain"[..]));
        assert_eq!(bucket_and_key(b":k"), (&b""[..], &b"k"[..]));
        assert_eq!(bucket_and_key(b"b:"), (&b"b"[..], &b""[..]));
        assert_eq!(bucket_and_key(b""), (DEFAULT_BUCKET, &b""[..]));
    }

    #[test]
    fn conversion_from_u32_validates() {
        assert_eq!(u32::from(Ring::try_from(256).unwrap()), 256);
        assert!(Ring::try_from(100).is_err());
    }
}
