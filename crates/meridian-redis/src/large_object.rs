//! What the string commands do with a key holding a large object: its value is then an
//! object's manifest (objects written through the S3 endpoint, spec `large-objects.md`), and
//! the commands show the object's bytes, never the manifest's (`GET`, `MGET`, `BLOB.READ`,
//! `STRLEN`), or refuse with an error saying what to use instead.
//!
//! Everything here is synchronous over bytes at hand: an object stored in chunks is reported
//! by its size, and the front ends that can read chunks (outside transactions) do so before
//! they reach a view.

use crate::args::Args;
use crate::error::{CmdError, RedisError, int_arg, raw};
use bytes::Bytes;
use meridian_blob::Manifest;

/// The manifest a stored value holds, if it is one. Plain values (the first byte is not
/// `0xFF`) cost one comparison; a value that starts with the magic but does not decode is
/// treated as a plain value.
#[inline]
pub fn manifest(value: &[u8]) -> Option<Manifest> {
    if value.first() != Some(&0xff) {
        return None;
    }
    Manifest::decode(value).ok().flatten()
}

/// The object size of a stored value that is a manifest.
#[inline]
pub fn object_size(value: &[u8]) -> Option<u64> {
    manifest(value).map(|m| m.size)
}

/// The value `GET` and `MGET` show in a synchronous context: the bytes, or `None` for a
/// chunked object (which only the async paths can read).
#[inline]
pub fn shown_now(value: Bytes) -> Result<Bytes, u64> {
    match manifest(&value) {
        None => Ok(value),
        Some(m) if m.chunks.is_empty() => Ok(m.inline.unwrap_or_default()),
        Some(m) => Err(m.size),
    }
}

/// The error of `GET`/`BLOB.READ` reaching a chunked object where only the synchronous
/// view is at hand (inside `MULTI`/`EXEC`, transactional buckets).
pub fn chunked_in_transaction(size: u64) -> CmdError {
    raw(format!(
        "ERR the key holds a large object of {size} bytes stored in chunks, which a \
         transaction cannot read: read it with BLOB.READ key offset len or GET outside \
         MULTI/EXEC and transactional buckets, or through the S3 endpoint"
    ))
}

/// `BLOB.READ`'s `offset` and `len`: non-negative integers, `len` at most `max`.
pub fn read_args(args: Args<'_>, max: u64) -> Result<(u64, u64), CmdError> {
    range_args(args, 2, max, "BLOB.READ")
}

/// The `offset` and `len` arguments at `at` and `at + 1`: non-negative integers, `len` at
/// most `max`.
/// The `offset` and `len` arguments at `at` and `at + 1` of `cmd`.
pub fn range_args(args: Args<'_>, at: usize, max: u64, cmd: &str) -> Result<(u64, u64), CmdError> {
    let offset = int_arg(args.get(at))?;
    let len = int_arg(args.get(at + 1))?;
    if offset < 0 || len < 0 {
        return Err(CmdError::Keyspace(RedisError::NotAnInteger));
    }
    let len = len as u64;
    if len > max {
        return Err(raw(format!(
            "ERR {cmd} len {len} is above blob.resp_get_max ({max}): read the object in \
             smaller pieces"
        )));
    }
    Ok((offset as u64, len))
}

/// The bytes `first..=last` that `offset`/`len` name in an object of `size` bytes, or
/// `None` when that is nothing (`len` 0, or `offset` at or past the end).
#[inline]
pub fn span(size: u64, offset: u64, len: u64) -> Option<(u64, u64)> {
    if len == 0 || offset >= size {
        return None;
    }
    Some((offset, offset.saturating_add(len).min(size) - 1))
}

/// `BLOB.READ` of bytes already at hand.
#[inline]
pub fn slice(bytes: &Bytes, offset: u64, len: u64) -> Bytes {
    match span(bytes.len() as u64, offset, len) {
        Some((a, b)) => bytes.slice(a as usize..=b as usize),
        None => Bytes::new(),
    }
}
