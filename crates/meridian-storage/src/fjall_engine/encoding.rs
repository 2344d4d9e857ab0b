//! The on-disk encoding: the order-preserving, prefix-free key encoding, version entries
//! (`enc(key) ++ big-endian(ts)` keys, tagged values) and latest-version index values.
//!
//! Comparing encodings bytewise compares the user keys, and a key's versions sort newest first
//! after its encoding, so key ranges and version scans are plain fjall ranges.

use super::{GROUP, LATEST_LEN, MARKER_MORE, TAG_TOMBSTONE, TAG_VALUE, TS_LEN};
use crate::version::Version;
use crate::{MAX_KEY_LEN, Result, StorageError};
use bytes::Bytes;
use fjall::Slice;
use meridian_core::Timestamp;
use std::ops::Bound;

/// Appends the order-preserving, prefix-free encoding of `key` to `out`.
///
/// The key is cut into 16-byte groups; each full group that is followed by more bytes is
/// written as is plus the marker `0xFF`; the last group (possibly empty) is padded with zeros
/// to 16 bytes and followed by `0xFF - padding`. Comparing encodings bytewise compares the keys,
/// and no encoding is a prefix of another.
pub(crate) fn encode_key(key: &[u8], out: &mut Vec<u8>) {
    out.reserve((key.len() / GROUP + 1) * (GROUP + 1) + TS_LEN);
    let mut groups = key.chunks_exact(GROUP);
    for group in &mut groups {
        out.extend_from_slice(group);
        out.push(MARKER_MORE);
    }
    let rest = groups.remainder();
    let pad = GROUP - rest.len();
    out.extend_from_slice(rest);
    out.resize(out.len() + pad, 0);
    out.push(MARKER_MORE - pad as u8);
}

/// Decodes an encoding produced by [`encode_key`] (without the timestamp suffix).
pub(crate) fn decode_key(enc: &[u8]) -> Result<Bytes> {
    let corrupt = || StorageError::Corrupt(format!("bad key encoding ({} bytes)", enc.len()));
    if enc.is_empty() || !enc.len().is_multiple_of(GROUP + 1) {
        return Err(corrupt());
    }
    let mut key = Vec::with_capacity(enc.len() / (GROUP + 1) * GROUP);
    let groups = enc.len() / (GROUP + 1);
    for (i, group) in enc.chunks_exact(GROUP + 1).enumerate() {
        let marker = group[GROUP];
        let last = i + 1 == groups;
        if marker == MARKER_MORE && !last {
            key.extend_from_slice(&group[..GROUP]);
            continue;
        }
        let pad = usize::from(MARKER_MORE - marker);
        if !last || pad == 0 || pad > GROUP {
            return Err(corrupt());
        }
        key.extend_from_slice(&group[..GROUP - pad]);
    }
    Ok(Bytes::from(key))
}

/// The entry key of the version of `key` at `ts`.
pub(super) fn entry_key(key: &[u8], ts: Timestamp) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(key, &mut out);
    out.extend_from_slice(&(u64::MAX - ts.0).to_be_bytes());
    out
}

/// Splits an entry key into the encoded user key and the version's timestamp.
pub(super) fn split_entry_key(entry: &[u8]) -> Result<(&[u8], Timestamp)> {
    if entry.len() < GROUP + 1 + TS_LEN {
        return Err(StorageError::Corrupt(format!(
            "entry key of {} bytes is too short",
            entry.len()
        )));
    }
    let (enc, ts) = entry.split_at(entry.len() - TS_LEN);
    let mut be = [0u8; TS_LEN];
    be.copy_from_slice(ts);
    Ok((enc, Timestamp(u64::MAX - u64::from_be_bytes(be))))
}

/// The entry value of a version.
pub(super) fn entry_value(value: Option<&Bytes>) -> Vec<u8> {
    match value {
        Some(v) => {
            let mut out = Vec::with_capacity(1 + v.len());
            out.push(TAG_VALUE);
            out.extend_from_slice(v);
            out
        }
        None => vec![TAG_TOMBSTONE],
    }
}

/// Decodes an entry value into the version at `ts`.
pub(super) fn decode_version(ts: Timestamp, value: Slice) -> Result<Version> {
    match value.first() {
        Some(&TAG_VALUE) => Ok(Version {
            ts,
            value: Some(Bytes::from(value).slice(1..)),
        }),
        Some(&TAG_TOMBSTONE) if value.len() == 1 => Ok(Version { ts, value: None }),
        _ => Err(StorageError::Corrupt(format!(
            "bad version value (tag {:?}, {} bytes)",
            value.first(),
            value.len()
        ))),
    }
}

/// Whether an entry value is a tombstone.
pub(super) fn is_tombstone_value(value: &[u8]) -> bool {
    value.first() == Some(&TAG_TOMBSTONE)
}

/// Approximate bytes one version occupies, for [`EngineStats::bytes`].
pub(super) fn version_size(key_len: usize, value_len: usize) -> i64 {
    (key_len + value_len + TS_LEN) as i64
}

pub(super) fn backend(e: fjall::Error) -> StorageError {
    match e {
        fjall::Error::Io(io) => StorageError::Io(io),
        other => StorageError::Backend(other.to_string()),
    }
}

/// A range of entry keys.
type EntryRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The encoded entry-key range covering the versions of the user keys in `(start, end)`, or
/// `None` if that range is empty.
pub(super) fn entry_range(start: &Bound<Bytes>, end: &Bound<Bytes>) -> Option<EntryRange> {
    // A bound longer than any storable key would not fit fjall's key limit; cut to one byte
    // more than the longest key, it orders the same against every storable key (and never
    // equals one, so whether it is included stops mattering).
    let cut = |b: &Bound<Bytes>| match b {
        Bound::Included(k) if k.len() > MAX_KEY_LEN + 1 => {
            Bound::Included(k.slice(..MAX_KEY_LEN + 1))
        }
        Bound::Excluded(k) if k.len() > MAX_KEY_LEN + 1 => {
            Bound::Excluded(k.slice(..MAX_KEY_LEN + 1))
        }
        other => other.clone(),
    };
    let (start, end) = (&cut(start), &cut(end));
    if crate::is_empty_range(start, end) {
        return None;
    }
    // The versions of `k` lie in [enc(k), enc(k) ++ [0xFF; 8]].
    let first = |k: &Bytes| {
        let mut out = Vec::new();
        encode_key(k, &mut out);
        out
    };
    let last = |k: &Bytes| {
        let mut out = first(k);
        out.extend_from_slice(&[0xFF; TS_LEN]);
        out
    };
    let lo = match start {
        Bound::Included(k) => Bound::Included(first(k)),
        Bound::Excluded(k) => Bound::Excluded(last(k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let hi = match end {
        Bound::Included(k) => Bound::Included(last(k)),
        Bound::Excluded(k) => Bound::Excluded(first(k)),
        Bound::Unbounded => Bound::Unbounded,
    };
    Some((lo, hi))
}

/// A key's latest version, as (timestamp, is a value).
pub(super) type Latest = Option<(Timestamp, bool)>;

/// The latest-version index value of a version at `ts`.
pub(super) fn latest_value(ts: Timestamp, live: bool) -> [u8; LATEST_LEN] {
    let mut out = [0u8; LATEST_LEN];
    out[..TS_LEN].copy_from_slice(&ts.0.to_be_bytes());
    out[TS_LEN] = if live { TAG_VALUE } else { TAG_TOMBSTONE };
    out
}

/// Decodes a latest-version index value.
pub(super) fn decode_latest(value: &[u8]) -> Result<(Timestamp, bool)> {
    match value {
        [ts @ .., tag] if ts.len() == TS_LEN && (*tag == TAG_VALUE || *tag == TAG_TOMBSTONE) => {
            let mut be = [0u8; TS_LEN];
            be.copy_from_slice(ts);
            Ok((Timestamp(u64::from_be_bytes(be)), *tag == TAG_VALUE))
        }
        _ => Err(StorageError::Corrupt(format!(
            "bad latest-version index value ({} bytes)",
            value.len()
        ))),
    }
}
