//! Redis hash-command semantics over a [`View`]: the one copy of what HSET, HSETNX,
//! HMSET, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN, HSTRLEN, HINCRBY, HINCRBYFLOAT, HKEYS,
//! HVALS, HSCAN and HRANDFIELD mean, reply for reply and error for error Redis 7's.
//!
//! A hash is a [`Hash`] collection ([`crate::collection`]): a view that keeps objects (the
//! standalone keyspace) holds it in memory as a table and the commands change it in place;
//! any other view (a cluster's one-key view, a MULTI overlay, an eventual bucket's map)
//! holds its stored form — [`meridian_core::hash`]'s field list, in field order, in an
//! envelope of kind [`Kind::Hash`] — decoded into the same type and re-encoded after a
//! change. A write that changes nothing (HDEL of absent fields, HSETNX of a present one)
//! writes nothing. Atomicity is the view's.
//!
//! **Cost** on a held hash: HSET/HDEL/HMGET of k fields O(k), HGET/HEXISTS/HSTRLEN/HLEN/
//! HINCRBY O(1), HRANDFIELD O(1) or O(count); HGETALL/HKEYS/HVALS sort what they answer
//! (O(n log n), see the order below); HSCAN beyond [`HSCAN_WHOLE`] fields is O(n) per call.
//! On a view of bytes every command also decodes the hash (O(n), no copy of the fields) and
//! every change re-encodes it (O(n)) — HLEN excepted, which reads the stored count — and the
//! encoded hash must fit the view's [`View::max_value_len`] (Redis's `proto-max-bulk-len`),
//! else the write is refused with `ERR hash exceeds maximum allowed size
//! (proto-max-bulk-len)` and nothing changes. A held hash is bounded by the server's memory.
//!
//! **Redis's rules kept**: a hash command on a key of another type answers `-WRONGTYPE`
//! (and a string command on a hash does, in `crate::strings`); an empty hash does not exist
//! (HDEL of the last field deletes the key); a TTL belongs to the whole key and a write keeps
//! it; checks run in Redis's order (HSET's odd arity before the key's type, HINCRBY's
//! increment before it, HSCAN's cursor before the key and its options after it).
//!
//! **Where it departs**:
//! - **order of replies** (HGETALL, HKEYS, HVALS, HSCAN of a small hash, HRANDFIELD with a
//!   count not below the size): a held hash that has never held more than
//!   [`object::COMPACT_MAX`] fields answers in insertion order, as Redis answers its
//!   listpack; any other hash in field order, where Redis answers a large hash in hash-table
//!   order ("unordered" in Redis's contract). A hash of a view of bytes (a cluster's, a
//!   transaction's copy) answers in field order: its stored form keeps no insertion order.
//! - HSCAN answers a hash of at most [`HSCAN_WHOLE`] fields whole, with cursor 0, as Redis
//!   does for a hash of its compact encoding (COUNT is a hint); a larger one is iterated with
//!   SSCAN's cursor ([`crate::scan::hashed_step`]: a field present during the whole
//!   iteration is returned exactly once).
//! - HRANDFIELD with a negative count (repetitions allowed) refuses more than
//!   [`MAX_RANDOM_REPEATS`] elements with `ERR value is out of range`, where Redis would try
//!   to build a reply of any length.
//! - HINCRBYFLOAT computes in `f64`, as INCRBYFLOAT does here (Redis uses `long double`,
//!   which differs only in the last digits of extreme values).

use crate::args::Args;
use crate::collection;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, RedisError, Result, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::scan::{self, parse_cursor};
use crate::value::{format_f64, glob_match, parse_f64, parse_i64};
use crate::view::{Entry, Kind, View};
use bytes::Bytes;
use meridian_core::hash::Fields;

pub mod object;
pub use object::Hash;

/// The most elements HRANDFIELD with a negative count answers.
pub use crate::value::MAX_RANDOM_REPEATS;

/// A hash of at most this many fields is answered whole by one HSCAN call (cursor 0): Redis's
/// default `hash-max-listpack-entries`, up to which Redis answers whole too.
pub const HSCAN_WHOLE: usize = 128;

/// The fields an entry holds: WRONGTYPE for another type, `Corrupt` for data that does not
/// decode. (Readers of a stored value: DUMP, SORT's `BY`/`GET` patterns, OBJECT ENCODING.)
pub fn fields_of(e: Entry) -> Result<Fields> {
    if e.kind != Kind::Hash {
        return Err(RedisError::WrongType);
    }
    meridian_core::hash::decode(&e.data).map_err(|b| RedisError::Corrupt(b.0))
}

/// Stores `fields` as the hash at `key` with `expiry` (replacing what the key held), or
/// deletes the key when there is none (RESTORE).
pub fn store<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    fields: Fields,
    expiry: Option<u64>,
) -> Result<()> {
    collection::store(v, key, Hash::from_fields(fields), expiry)
}

// ----- the commands, typed ---------------------------------------------------------------

/// HSET/HMSET: sets every pair (a field given twice ends with its last value), keeping the
/// key's TTL; returns how many fields were created.
pub fn hset<V: View + ?Sized>(v: &mut V, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64> {
    let created = collection::update(v, key, true, |h: &mut Hash| {
        Ok(pairs.iter().filter(|(f, val)| h.insert(f, val)).count())
    })?;
    Ok(created.unwrap_or(0) as u64)
}

/// HSETNX: sets the field only if it does not exist; returns whether it did.
pub fn hsetnx<V: View + ?Sized>(v: &mut V, key: &[u8], field: &[u8], value: &[u8]) -> Result<bool> {
    let set = collection::modify(v, key, true, |h: &mut Hash| {
        if h.contains(field) {
            return Ok::<_, RedisError>((false, false));
        }
        h.insert(field, value);
        Ok((true, true))
    })?;
    Ok(set.unwrap_or(false))
}

/// HGET.
pub fn hget<V: View + ?Sized>(v: &mut V, key: &[u8], field: &[u8]) -> Result<Option<Bytes>> {
    let value = collection::read(v, key, |h: &Hash| {
        Ok(h.get(field).map(Bytes::copy_from_slice))
    })?;
    Ok(value.flatten())
}

/// HGETALL (HKEYS, HVALS): every field and value, in field order; empty for a missing key.
pub fn hgetall<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
    let all = collection::read(v, key, |h: &Hash| {
        Ok(h.ordered()
            .into_iter()
            .map(|(f, v)| (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v)))
            .collect())
    })?;
    Ok(all.unwrap_or_default())
}

/// HDEL: removes the fields (a field given twice counts once); deletes the key when none is
/// left. Returns how many were removed.
pub fn hdel<'f, V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    fields: impl IntoIterator<Item = &'f [u8]>,
) -> Result<u64> {
    let removed = collection::modify(v, key, false, |h: &mut Hash| {
        let n = fields.into_iter().filter(|f| h.remove(f)).count();
        Ok::<_, RedisError>((n, n > 0))
    })?;
    Ok(removed.unwrap_or(0) as u64)
}

/// HLEN: the number of fields, read without decoding them.
pub fn hlen<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    Ok(collection::len::<Hash, V>(v, key, true)?.unwrap_or(0) as u64)
}

/// HINCRBY: adds `delta` to the field's integer value (0 if missing); returns the new value.
pub fn hincrby<V: View + ?Sized>(v: &mut V, key: &[u8], field: &[u8], delta: i64) -> Result<i64> {
    let new = collection::update(v, key, true, |h: &mut Hash| {
        let old = match h.get(field) {
            Some(val) => parse_i64(val).ok_or(RedisError::HashNotAnInteger)?,
            None => 0,
        };
        let new = old.checked_add(delta).ok_or(RedisError::Overflow)?;
        h.insert(field, itoa::Buffer::new().format(new).as_bytes());
        Ok(new)
    })?;
    new.ok_or(RedisError::Corrupt("a created hash is missing"))
}

/// HINCRBYFLOAT: adds `delta` (finite) to the field's float value (0 if missing); returns the
/// new value as stored.
pub fn hincrbyfloat<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    field: &[u8],
    delta: f64,
) -> Result<Bytes> {
    if !delta.is_finite() {
        return Err(RedisError::NanOrInfinityArgument);
    }
    let text = collection::update(v, key, true, |h: &mut Hash| {
        let old = match h.get(field) {
            Some(val) => parse_f64(val).ok_or(RedisError::HashNotAFloat)?,
            None => 0.0,
        };
        let new = old + delta;
        if !new.is_finite() {
            return Err(RedisError::NanOrInfinity);
        }
        let text = Bytes::from(format_f64(new));
        h.insert(field, &text);
        Ok(text)
    })?;
    text.ok_or(RedisError::Corrupt("a created hash is missing"))
}

// ----- the commands, from their arguments ------------------------------------------------

/// Whether [`exec_on_view`] executes `cmd`: every hash command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Hashes
}

/// Argument `i`, or the command's arity error (never a panic, whoever checked the arity).
fn arg<'a>(args: Args<'a>, cmd: Cmd, i: usize) -> std::result::Result<&'a [u8], CmdError> {
    if i < args.len() {
        Ok(args.get(i))
    } else {
        Err(arity_error(cmd.spec().name))
    }
}

/// Executes a hash command (one [`handles`] accepts) against `view`, writing its reply in
/// Redis's type (RESP2 or RESP3, as `reply` is set); an error is returned for the caller to
/// write (as its own reply, or as an element of EXEC's array). Every command touches only
/// its key, `args[1]`, so a one-key view serves any of them. Arity is checked again here
/// (Redis's errors), so a caller that did not check gets an error, never a panic.
pub fn exec_on_view(
    cmd: Cmd,
    args: Args<'_>,
    view: &mut dyn View,
    reply: &mut Reply,
) -> std::result::Result<(), CmdError> {
    let name = cmd.spec().name;
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(name));
    }
    let key = arg(args, cmd, 1)?;
    match cmd {
        Cmd::Hset | Cmd::Hmset => {
            // Checked before the key's type, as Redis does.
            if !args.len().is_multiple_of(2) {
                return Err(arity_error(name));
            }
            let pairs: Vec<(&[u8], &[u8])> = (2..args.len())
                .step_by(2)
                .map(|i| (args.get(i), args.get(i + 1)))
                .collect();
            let created = hset(view, key, &pairs)?;
            if cmd == Cmd::Hset {
                reply.int(created as i64);
            } else {
                reply.ok();
            }
        }
        Cmd::Hsetnx => {
            let (field, value) = (arg(args, cmd, 2)?, arg(args, cmd, 3)?);
            reply.int(hsetnx(view, key, field, value)? as i64);
        }
        Cmd::Hget => {
            let field = arg(args, cmd, 2)?;
            let found = collection::read(view, key, |h: &Hash| {
                reply.opt_bulk(h.get(field));
                Ok(())
            })?;
            if found.is_none() {
                reply.null();
            }
        }
        Cmd::Hmget => {
            let found = collection::read(view, key, |h: &Hash| {
                reply.array(args.len() - 2);
                for f in args.iter_from(2) {
                    reply.opt_bulk(h.get(f));
                }
                Ok(())
            })?;
            if found.is_none() {
                reply.array(args.len() - 2);
                for _ in 2..args.len() {
                    reply.null();
                }
            }
        }
        Cmd::Hgetall | Cmd::Hkeys | Cmd::Hvals => {
            let found = collection::read(view, key, |h: &Hash| {
                write_fields(reply, cmd, &h.ordered());
                Ok(())
            })?;
            if found.is_none() {
                write_fields(reply, cmd, &[]);
            }
        }
        Cmd::Hdel => reply.int(hdel(view, key, args.iter_from(2))? as i64),
        Cmd::Hexists => {
            let field = arg(args, cmd, 2)?;
            let found = collection::read(view, key, |h: &Hash| Ok(h.contains(field)))?;
            reply.int(found.unwrap_or(false) as i64);
        }
        Cmd::Hlen => reply.int(hlen(view, key)? as i64),
        Cmd::Hstrlen => {
            let field = arg(args, cmd, 2)?;
            let len = collection::read(view, key, |h: &Hash| {
                Ok(h.get(field).map_or(0, <[u8]>::len))
            })?;
            reply.int(len.unwrap_or(0) as i64);
        }
        Cmd::Hincrby => {
            // The increment is parsed before the key is looked at (Redis's order).
            let delta = int_arg(arg(args, cmd, 3)?)?;
            reply.int(hincrby(view, key, arg(args, cmd, 2)?, delta)?);
        }
        Cmd::Hincrbyfloat => {
            let delta = parse_f64(arg(args, cmd, 3)?).ok_or(RedisError::NotAFloat)?;
            reply.bulk(&hincrbyfloat(view, key, arg(args, cmd, 2)?, delta)?);
        }
        Cmd::Hscan => hscan(view, args, reply)?,
        Cmd::Hrandfield => hrandfield(view, args, reply)?,
        other => {
            return Err(raw(format!(
                "ERR {} is not a hash command",
                other.spec().name.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}

/// HGETALL's map of fields and values, or HKEYS' or HVALS' array.
fn write_fields(reply: &mut Reply, cmd: Cmd, fields: &[(&[u8], &[u8])]) {
    if cmd == Cmd::Hgetall {
        reply.map(fields.len());
    } else {
        reply.array(fields.len());
    }
    for (f, v) in fields {
        match cmd {
            Cmd::Hgetall => {
                reply.bulk(f);
                reply.bulk(v);
            }
            Cmd::Hkeys => reply.bulk(f),
            _ => reply.bulk(v),
        }
    }
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`: the cursor is checked first,
/// then the key (a missing key answers the empty scan whatever the options), then the
/// options, as Redis's `scanGenericCommand` does. See the module docs for the cursor.
/// NOVALUES is Redis 7.4's.
fn hscan(
    view: &mut dyn View,
    args: Args<'_>,
    reply: &mut Reply,
) -> std::result::Result<(), CmdError> {
    let cmd = Cmd::Hscan;
    let key = arg(args, cmd, 1)?;
    let cursor = parse_cursor(arg(args, cmd, 2)?)?;
    // The options are checked after the key, so their verdict waits.
    let opts = hscan_options(args);
    let step = collection::read(view, key, |h: &Hash| {
        Ok(opts.as_ref().ok().map(|o| scan_step(h, cursor, o.count)))
    })?;
    let Some(step) = step else {
        reply.array(2);
        reply.bulk(b"0");
        reply.array(0);
        return Ok(());
    };
    let opts = opts?;
    let (listed, next) = step.ok_or_else(|| raw("ERR syntax error"))?;
    let listed: Vec<&(Bytes, Bytes)> = listed
        .iter()
        .filter(|(f, _)| opts.pattern.is_none_or(|p| glob_match(p, f, false)))
        .collect();
    reply.array(2);
    reply.bulk(itoa::Buffer::new().format(next).as_bytes());
    reply.array(listed.len() * if opts.no_values { 1 } else { 2 });
    for (f, v) in listed {
        reply.bulk(f);
        if !opts.no_values {
            reply.bulk(v);
        }
    }
    Ok(())
}

/// HSCAN's options.
struct HscanOptions<'a> {
    /// MATCH's pattern (`None` for none or `*`).
    pattern: Option<&'a [u8]>,
    /// COUNT (10 by default).
    count: usize,
    no_values: bool,
}

fn hscan_options(args: Args<'_>) -> std::result::Result<HscanOptions<'_>, CmdError> {
    let mut o = HscanOptions {
        pattern: None,
        count: 10,
        no_values: false,
    };
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        let has_value = i + 1 < args.len();
        if opt.eq_ignore_ascii_case(b"COUNT") && has_value {
            let c = int_arg(args.get(i + 1))?;
            if c < 1 {
                return Err(raw("ERR syntax error"));
            }
            o.count = usize::try_from(c).unwrap_or(usize::MAX);
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"MATCH") && has_value {
            let p = args.get(i + 1);
            o.pattern = (p != b"*").then_some(p);
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"NOVALUES") {
            o.no_values = true;
            i += 1;
        } else {
            return Err(raw("ERR syntax error"));
        }
    }
    Ok(o)
}

/// One HSCAN step over `h` from `cursor`: the fields and values to list (copied) and the
/// next cursor. A hash of at most [`HSCAN_WHOLE`] fields is answered whole, in field order.
fn scan_step(h: &Hash, cursor: u64, count: usize) -> (Vec<(Bytes, Bytes)>, u64) {
    let copy = |(f, v): (&[u8], &[u8])| (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v));
    let n = h.len();
    if n <= HSCAN_WHOLE {
        return (h.ordered().into_iter().map(copy).collect(), 0);
    }
    let hashes = h.iter().map(|(f, _)| scan::element_hash(f));
    let (picked, next) = scan::hashed_step(hashes, n, cursor, count);
    let listed = h.indexed(|at| picked.iter().filter_map(|&i| at(i).map(copy)).collect());
    (listed, next)
}

/// `HRANDFIELD key [count [WITHVALUES]]` (Redis's `hrandfieldCommand`): a random field, or
/// `count` distinct ones (the whole hash when `count` is not below its size), or `-count`
/// with repetitions.
fn hrandfield(
    view: &mut dyn View,
    args: Args<'_>,
    reply: &mut Reply,
) -> std::result::Result<(), CmdError> {
    use rand::Rng;
    let cmd = Cmd::Hrandfield;
    let key = arg(args, cmd, 1)?;
    if args.len() == 2 {
        let found = collection::read(view, key, |h: &Hash| {
            let i = rand::rng().random_range(0..h.len().max(1));
            h.indexed(|at| reply.opt_bulk(at(i).map(|(f, _)| f)));
            Ok(())
        })?;
        if found.is_none() {
            reply.null();
        }
        return Ok(());
    }
    let count = int_arg(args.get(2))?;
    if count == i64::MIN {
        return Err(raw(
            "ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ));
    }
    let with_values = match args.len() {
        3 => false,
        4 if args.get(3).eq_ignore_ascii_case(b"WITHVALUES") => {
            if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
                return Err(raw("ERR value is out of range"));
            }
            true
        }
        _ => return Err(raw("ERR syntax error")),
    };
    // `Some(false)`: a repeat count beyond the bound, refused (nothing written).
    let answered = collection::read(view, key, |h: &Hash| {
        if count > 0 && count as u64 >= h.len() as u64 {
            // The whole hash, in field order (the positions of `ordered`).
            let all = h.ordered();
            write_picked(reply, with_values, 0..all.len(), |i| all.get(i).copied());
            return Ok(true);
        }
        let Some(picked) = crate::value::random_indexes(h.len(), count) else {
            return Ok(false);
        };
        h.indexed(|at| write_picked(reply, with_values, picked.into_iter(), at));
        Ok(true)
    })?;
    match answered {
        // Redis answers the empty array in both protocols here.
        None => reply.out.extend_from_slice(b"*0\r\n"),
        Some(false) => return Err(raw("ERR value is out of range")),
        Some(true) => {}
    }
    Ok(())
}

/// HRANDFIELD's reply of the entries at `picked`: fields, or field-value pairs (flat in
/// RESP2, pairs in RESP3).
fn write_picked<'h>(
    reply: &mut Reply,
    with_values: bool,
    picked: impl ExactSizeIterator<Item = usize>,
    at: impl Fn(usize) -> Option<(&'h [u8], &'h [u8])>,
) {
    let n = picked.len();
    if with_values && reply.resp3 {
        reply.array(n);
    } else {
        reply.array(n * if with_values { 2 } else { 1 });
    }
    for i in picked {
        let Some((f, v)) = at(i) else {
            continue;
        };
        if with_values && reply.resp3 {
            reply.array(2);
        }
        reply.bulk(f);
        if with_values {
            reply.bulk(v);
        }
    }
}

#[cfg(test)]
mod tests;
