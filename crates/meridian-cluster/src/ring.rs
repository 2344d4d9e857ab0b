//! The key ring (spec §1): Redis Cluster's hash slots and their mapping onto Q partitions.
//!
//! Guarantees:
//! - A key's **slot** ([`slot_of`]) is Redis Cluster's `crc16_xmodem(tag(name)) mod 16384`,
//!   where `name` is the full client key (`bucket:rest`, or the bare key of the default
//!   bucket: the exact bytes a RESP client sends) and `tag` is Redis's hash-tag rule
//!   ([`hash_tag`]). So cluster-aware Redis clients compute the same slot as the server, and
//!   keys sharing a hash tag share a partition. Golden values from Redis's documentation are
//!   pinned by tests; `std::hash::Hash` is never used.
//! - A [`Ring`] always has a valid Q: a power of two in `64..=4096`.
//!   [`Ring::partition_of_slot`] takes the top `log2 Q` of the slot's 14 bits, so each
//!   partition is one contiguous slot range ([`Ring::slot_range`]), which `CLUSTER SLOTS`
//!   reports.
//! - [`key_hash`] (xxh3) is **not** placement: it only spreads keys over Merkle segments and
//!   lock stripes, where any stable hash does.
//! - [`bucket_and_key`] splits a flat client key `bucket:rest` at its **first** colon; a key
//!   without a colon belongs to the bucket [`DEFAULT_BUCKET`]. (Choice: the bucket part may be
//!   empty, `":k"` is bucket `""`, key `k`; the rest may contain further colons.)

use crate::error::RingError;
use meridian_core::PartitionId;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

/// The bucket of a flat key that has no `bucket:` prefix.
pub const DEFAULT_BUCKET: &[u8] = b"default";

/// A stable 64-bit key hash, `xxh3_64(u32_le(len(bucket)) ‖ bucket ‖ key)`, for what is not
/// placement (Merkle segments, lock stripes); placement uses [`slot_of`].
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

/// The number of hash slots (Redis Cluster's).
pub const SLOTS: u16 = 16384;

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0, no reflection), as Redis Cluster's
/// `crc16`: the `crc` crate's table-driven implementation of that catalogued algorithm.
pub fn crc16_xmodem(bytes: &[u8]) -> u16 {
    CRC16.checksum(bytes)
}

/// The byte table is built at compile time (`Crc::new` is `const`).
static CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// Redis Cluster's hash tag: the bytes between the first `{` and the next `}` when that is
/// non-empty, else the whole key (`foo{}{bar}` is hashed whole, `foo{{bar}}zap` as `{bar`).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The hash slot of a full client key: `crc16_xmodem(hash_tag(key)) mod 16384` (Redis's
/// `CLUSTER KEYSLOT`).
pub fn slot_of(key: &[u8]) -> u16 {
    crc16_xmodem(hash_tag(key)) & (SLOTS - 1)
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

    /// How many slot bits a partition's slot range spans: `14 − log2 Q`.
    fn shift(self) -> u32 {
        SLOTS.trailing_zeros() - self.q.trailing_zeros()
    }

    /// The partition owning `slot`: `slot >> (14 − log2 Q)` (slots past 16383 wrap).
    pub fn partition_of_slot(self, slot: u16) -> PartitionId {
        PartitionId(u32::from(slot & (SLOTS - 1)) >> self.shift())
    }

    /// The partition of a full client key (`bucket:rest`, or a bare key of the default
    /// bucket): [`slot_of`], then [`Ring::partition_of_slot`].
    pub fn partition_of(self, full_key: &[u8]) -> PartitionId {
        self.partition_of_slot(slot_of(full_key))
    }

    /// The first and last slot of partition `p` (inclusive; `p` taken modulo Q).
    pub fn slot_range(self, p: PartitionId) -> (u16, u16) {
        let first = (p.0 & (self.q - 1)) << self.shift();
        let last = first + (1 << self.shift()) - 1;
        (first as u16, last as u16)
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
        // Pinned so a dependency or refactor cannot silently move Merkle segments.
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
    fn slots_match_redis_cluster() {
        // From Redis's documentation (CLUSTER KEYSLOT and the cluster specification).
        assert_eq!(crc16_xmodem(b"123456789"), 0x31c3);
        assert_eq!(slot_of(b"somekey"), 11058);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{foo}"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b"hello"), 866);
        assert_eq!(slot_of(b""), 0);
        assert_eq!(
            slot_of(b"{user1000}.following"),
            slot_of(b"{user1000}.followers")
        );
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        // An empty tag hashes the whole key; only the first `{` counts.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"img:{u1}.a"), b"u1");
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        // The full client key is hashed, bucket prefix included.
        assert_ne!(slot_of(b"img:cat.png"), slot_of(b"cat.png"));
        assert_eq!(slot_of(b"img:{cat}.png"), slot_of(b"cat"));
    }

    #[test]
    fn partitions_are_contiguous_slot_ranges() {
        for q in [64, 256, 4096] {
            let r = Ring::new(q).unwrap();
            let mut next = 0u32;
            for p in r.partitions() {
                let (first, last) = r.slot_range(p);
                assert_eq!(u32::from(first), next);
                assert_eq!(r.partition_of_slot(first), p);
                assert_eq!(r.partition_of_slot(last), p);
                next = u32::from(last) + 1;
            }
            assert_eq!(next, u32::from(SLOTS));
        }
        let r = Ring::new(64).unwrap();
        assert_eq!(r.slot_range(PartitionId(0)), (0, 255));
        assert_eq!(r.slot_range(PartitionId(63)), (16128, 16383));
        assert_eq!(r.partition_of(b"somekey"), PartitionId(11058 >> 8));
        assert_eq!(r.partition_of(b"foo"), PartitionId(12182 >> 8));
        assert_eq!(
            Ring::new(4096).unwrap().partition_of_slot(5),
            PartitionId(1)
        );
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
