//! Redis HyperLogLog-command semantics over a [`View`]: PFADD, PFCOUNT and PFMERGE, reply
//! for reply and error for error Redis 7.0's, over Redis's own representation.
//!
//! An HLL is a **string value** ([`Kind::String`]) holding exactly the bytes Redis would hold
//! ([`format`]: the `HYLL` header with its cached cardinality, the sparse opcodes or the
//! 16384 dense 6-bit registers, MurmurHash64A with Redis's seed): a value GET from Redis
//! and SET here is read as Redis reads it, a value GET from here can be PFADDed by Redis, and
//! the same elements added in the same order give the same bytes and the same estimates
//! (Redis 7's improved estimator). A sparse HLL turns dense past Redis's default
//! `hll-sparse-max-bytes` (3000), which is not configurable here.
//!
//! **Redis's rules kept**: a key of another type answers `-WRONGTYPE Operation against a
//! key ...`; a string that is not an HLL (short, wrong magic, unknown encoding, a dense
//! value of the wrong length) answers `-WRONGTYPE Key is not a valid HyperLogLog string
//! value.`; an HLL whose sparse opcodes do not cover 16384 registers answers `-INVALIDOBJ
//! Corrupted HLL object detected` when a command walks them (so, as in Redis, PFCOUNT of one
//! key with a valid cached cardinality answers the cache without walking). PFADD answers 1
//! when it created the key or changed a register; PFMERGE merges the destination's own
//! registers with the sources', creates it even with no source, makes it dense if any input
//! is dense, and answers OK. Writes keep the key's TTL; PFCOUNT and PFMERGE's sources count
//! keyspace hits and misses (Redis's `lookupKeyRead`), PFADD does not. Every stored value is
//! treated as hostile: no panic, no allocation sized by what the value claims.
//!
//! PFCOUNT of one key whose cached cardinality is stale writes the refreshed cache back, as
//! Redis does: a backend must run PFCOUNT over a view that holds the key's lock (the
//! standalone keyspace does, though PFCOUNT is read-only in the table); a backend whose
//! reads write nothing (a cluster read) simply drops that write.
//!
//! **Where it departs**: PFADD on a corrupted HLL that fails part-way stores nothing (Redis keeps the registers
//! changed before the failure in memory). A damaged sparse value whose last XZERO opcode
//! is cut short is changed byte for byte as Redis changes it within one command, but Redis
//! also remembers, in memory, the byte its split leaves past the end for the next command;
//! a stored value here reads 0 there (see [`format::Hll`]). A key's value may not exceed
//! the view's [`View::max_value_len`] (a dense HLL is 12304 bytes).

pub use meridian_core::hll as format;

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, RedisError, arity_error, raw};
use crate::reply::Reply;
use crate::view::{Entry, EntryRef, Kind, View};
use format::{Bad, Hll, REGISTERS};

/// Redis's reply to a string that is not an HLL (a `WRONGTYPE` line with its own text).
pub const NOT_AN_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
/// Redis's reply to an HLL whose registers cannot be read.
pub const CORRUPT_HLL: &str = "INVALIDOBJ Corrupted HLL object detected";

type CmdResult<T = ()> = std::result::Result<T, CmdError>;

/// The error line of a value that is not a usable HLL.
fn bad(b: Bad) -> CmdError {
    raw(match b {
        Bad::NotHll => NOT_AN_HLL,
        Bad::Corrupt => CORRUPT_HLL,
    })
}

/// Redis's `isHLLObjectOrReply`: the entry is a string whose header is an HLL's.
fn hll(e: Entry) -> CmdResult<Entry> {
    if e.kind != Kind::String {
        return Err(RedisError::WrongType.into());
    }
    format::encoding(&e.data).map_err(bad)?;
    Ok(e)
}

/// The HLL at `key` for a read (`lookupKeyRead`: counts a hit or a miss).
fn read(v: &mut dyn View, key: &[u8]) -> CmdResult<Option<Entry>> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    e.map(hll).transpose()
}

/// Stores the HLL `data` at `key` with `expiry`.
fn store(v: &mut dyn View, key: &[u8], data: &[u8], expiry: Option<u64>) -> CmdResult {
    if data.len() > v.max_value_len() {
        return Err(RedisError::ValueTooLarge.into());
    }
    v.store(key, Some(EntryRef::string(data, expiry)))?;
    Ok(())
}

// ----- the commands, typed ---------------------------------------------------------------

/// PFADD: adds `elements` to the HLL at `key` (created when absent); whether the key was
/// created or a register changed. Nothing is stored when nothing changed.
pub fn pfadd<'e>(
    v: &mut dyn View,
    key: &[u8],
    elements: impl IntoIterator<Item = &'e [u8]>,
) -> CmdResult<bool> {
    let (mut h, expiry, mut updated) = match v.load(key)? {
        None => (Hll::new_sparse(), None, true),
        Some(e) => {
            let e = hll(e)?;
            (Hll::from_value(&e.data), e.expiry, false)
        }
    };
    for el in elements {
        let (index, rank) = format::register_and_rank(el);
        updated |= h.raise(index, rank).map_err(bad)?;
    }
    if updated {
        h.invalidate_cache();
        store(v, key, h.bytes(), expiry)?;
    }
    Ok(updated)
}

/// What PFCOUNT of one key does with a stale cached cardinality it recomputed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheWrite {
    /// Leaves the value as it is (safe over any view; what [`exec_on_view`] does).
    Skip,
    /// Writes the estimate back as the valid cache, as Redis does: only over a view where
    /// the load and the store are one atomic step (a locked key).
    Store,
}

/// PFCOUNT: the estimated cardinality of the HLL at `keys[0]`, or of the union of the HLLs
/// at `keys` when there are several (missing keys are empty HLLs). Answered as Redis's
/// `long long`.
pub fn pfcount(v: &mut dyn View, keys: &[&[u8]], cache: CacheWrite) -> CmdResult<i64> {
    if let [key] = keys {
        let Some(e) = read(v, key)? else {
            return Ok(0);
        };
        if let Some(card) = format::cached_card(&e.data) {
            return Ok(card as i64);
        }
        let card = format::estimate(&format::histogram(&e.data).map_err(bad)?);
        if cache == CacheWrite::Store {
            let mut data = e.data.to_vec();
            format::set_cached_card(&mut data, card);
            store(v, key, &data, e.expiry)?;
        }
        return Ok(card as i64);
    }
    let mut max = [0u8; REGISTERS];
    for key in keys {
        if let Some(e) = read(v, key)? {
            format::merge_into(&mut max, &e.data).map_err(bad)?;
        }
    }
    Ok(format::estimate(&format::raw_histogram(&max)) as i64)
}

/// PFMERGE: merges the HLLs at `dest` and `sources` into `dest` (created when absent,
/// keeping its TTL when present), dense if any of them is.
pub fn pfmerge(v: &mut dyn View, dest: &[u8], sources: &[&[u8]]) -> CmdResult {
    let mut max = [0u8; REGISTERS];
    let mut dense = false;
    let mut dest_entry = None;
    for (i, key) in std::iter::once(&dest).chain(sources).enumerate() {
        let Some(e) = read(v, key)? else {
            continue;
        };
        dense |= format::encoding(&e.data) == Ok(format::Encoding::Dense);
        format::merge_into(&mut max, &e.data).map_err(bad)?;
        if i == 0 {
            dest_entry = Some(e);
        }
    }
    let (mut h, expiry) = match dest_entry {
        Some(e) => (Hll::from_value(&e.data), e.expiry),
        None => (Hll::new_sparse(), None),
    };
    if dense {
        h.make_dense().map_err(bad)?;
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 {
            // The destination was walked whole by the merge: raising cannot fail (Redis
            // ignores the result too).
            let _ = h.raise(i, m);
        }
    }
    h.invalidate_cache();
    store(v, dest, h.bytes(), expiry)
}

// ----- the commands, from arguments -------------------------------------------------------

/// Whether this module runs `cmd`.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::HyperLogLog
}

/// Executes a HyperLogLog command over `view`, writing its reply.
pub fn exec_on_view(
    cmd: Cmd,
    args: Args<'_>,
    view: &mut dyn View,
    reply: &mut Reply,
) -> crate::error::CmdResult {
    if !cmd.spec().arity_ok(args.len()) || args.len() < 2 {
        return Err(arity_error(cmd.spec().name));
    }
    let key = args.get(1);
    match cmd {
        Cmd::Pfadd => reply.int(pfadd(view, key, args.iter_from(2))? as i64),
        Cmd::Pfcount => {
            let keys: Vec<&[u8]> = args.iter_from(1).collect();
            reply.int(pfcount(view, &keys, CacheWrite::Store)?);
        }
        Cmd::Pfmerge => {
            let sources: Vec<&[u8]> = args.iter_from(2).collect();
            pfmerge(view, key, &sources)?;
            reply.ok();
        }
        other => {
            return Err(raw(format!(
                "ERR {} is not a HyperLogLog command",
                other.spec().name.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
