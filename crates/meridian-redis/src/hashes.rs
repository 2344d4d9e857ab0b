//! Redis hash-command semantics over a [`View`]: the one copy of what HSET, HSETNX,
//! HMSET, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN, HSTRLEN, HINCRBY, HINCRBYFLOAT, HKEYS,
//! HVALS, HSCAN and HRANDFIELD mean, reply for reply and error for error Redis 7's.
//!
//! A hash is **one stored value**: an envelope of kind [`Kind::Hash`] whose data is
//! [`meridian_core::hash::encode`]'s field list (fields sorted by field). It reuses the
//! string commands' view: [`View::load`] hands out the entry with its kind,
//! [`View::store`] stores an [`EntryRef`] of kind `Hash`. So whatever runs the string
//! commands runs these too, with the same atomicity:
//!
//! - the standalone keyspace runs reads over its lock-free view, writes over a view of the
//!   key's locked stripe, and MULTI/EXEC over its overlay (WATCH sees every hash write as a
//!   modification of the key) — `Keyspace::execute` and the RESP front end;
//! - a cluster front end can run [`exec_on_view`] over a one-key view, as
//!   the dispatch facade runs `strings::exec_on_view`. Such a view must store
//!   [`EntryRef::kind`] with the value.
//!
//! **Cost**: every command decodes the whole hash (no copy of the bytes: fields and values
//! are slices of the stored value, but one map node per field), and every write re-encodes
//! and rewrites it: O(size of the hash) per command, which bounds a hash, in practice, to
//! what one value may hold — the encoded hash must fit the view's
//! [`View::max_value_len`] (Redis's `proto-max-bulk-len`), else the write is refused
//! with `ERR hash exceeds maximum allowed size (proto-max-bulk-len)` and nothing changes.
//! HLEN reads the field count only.
//!
//! **Redis's rules kept**: a hash command on a key of another type answers `-WRONGTYPE`
//! (and a string command on a hash does, in `crate::strings`); an empty hash does not exist
//! (HDEL of the last field deletes the key); a TTL belongs to the whole key and a write keeps
//! it; checks run in Redis's order (HSET's odd arity before the key's type, HINCRBY's
//! increment before it, HSCAN's cursor before the key and its options after it).
//!
//! **Where it departs**: fields are listed in field order (HGETALL, HKEYS, HVALS, HSCAN,
//! HRANDFIELD with a count not below the size), where Redis lists a small hash in insertion
//! order — both are "unordered" in Redis's contract. HSCAN answers the whole hash in one
//! call with cursor 0, as Redis does for every hash of its compact encoding (COUNT is a
//! hint). HRANDFIELD with a negative count (repetitions allowed) refuses more than
//! [`MAX_RANDOM_REPEATS`] elements with `ERR value is out of range`, where Redis would try
//! to build a reply of any length. HINCRBYFLOAT computes in `f64`, as INCRBYFLOAT does here
//! (Redis uses `long double`, which differs only in the last digits of extreme values).

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, RedisError, Result, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::scan::parse_cursor;
use crate::value::{format_f64, glob_match, parse_f64, parse_i64};
use crate::view::{Entry, EntryRef, Kind, View};
use bytes::Bytes;
use meridian_core::hash::Fields;

/// The most elements HRANDFIELD with a negative count answers.
pub use crate::value::MAX_RANDOM_REPEATS;

/// A hash as loaded: its fields (slices of the stored value) and its key's expiry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hash {
    /// Field → value, in field order.
    pub fields: Fields,
    /// The key's absolute expiry (µs since the epoch), if it has one.
    pub expiry: Option<u64>,
}

/// The hash an entry holds: WRONGTYPE for another type, `Corrupt` for data that does not
/// decode.
pub fn decode(e: Entry) -> Result<Hash> {
    if e.kind != Kind::Hash {
        return Err(RedisError::WrongType);
    }
    let fields = meridian_core::hash::decode(&e.data).map_err(|b| RedisError::Corrupt(b.0))?;
    Ok(Hash {
        fields,
        expiry: e.expiry,
    })
}

/// The hash at `key` for a write (no hit/miss counted): `None` when the key is absent.
pub fn load<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Hash>> {
    v.load(key)?.map(decode).transpose()
}

/// The hash at `key` for a read command: counts a hit or a miss (INFO), then checks the type.
fn read<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Hash>> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    e.map(decode).transpose()
}

/// Stores `fields` as the hash at `key` with `expiry`, or deletes the key when no field is
/// left (an empty hash does not exist). Refuses a hash longer than the view's maximum.
pub fn store<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    fields: &Fields,
    expiry: Option<u64>,
) -> Result<()> {
    if fields.is_empty() {
        return v.store(key, None);
    }
    let data = meridian_core::hash::encode_map(fields);
    if data.len() > v.max_value_len() {
        return Err(RedisError::HashTooLarge);
    }
    v.store(
        key,
        Some(EntryRef {
            data: &data,
            expiry,
            kind: Kind::Hash,
        }),
    )
}

// ----- the commands, typed ---------------------------------------------------------------

/// HSET/HMSET: sets every pair (a field given twice ends with its last value), keeping the
/// key's TTL; returns how many fields were created.
pub fn hset<V: View + ?Sized>(v: &mut V, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Result<u64> {
    let Hash { mut fields, expiry } = load(v, key)?.unwrap_or_default();
    let mut created = 0;
    for (f, val) in pairs {
        let old = fields.insert(Bytes::copy_from_slice(f), Bytes::copy_from_slice(val));
        created += old.is_none() as u64;
    }
    store(v, key, &fields, expiry)?;
    Ok(created)
}

/// HSETNX: sets the field only if it does not exist; returns whether it did.
pub fn hsetnx<V: View + ?Sized>(v: &mut V, key: &[u8], field: &[u8], value: &[u8]) -> Result<bool> {
    let Hash { mut fields, expiry } = load(v, key)?.unwrap_or_default();
    if fields.contains_key(field) {
        return Ok(false);
    }
    fields.insert(Bytes::copy_from_slice(field), Bytes::copy_from_slice(value));
    store(v, key, &fields, expiry)?;
    Ok(true)
}

/// HGET.
pub fn hget<V: View + ?Sized>(v: &mut V, key: &[u8], field: &[u8]) -> Result<Option<Bytes>> {
    Ok(read(v, key)?.and_then(|h| h.fields.get(field).cloned()))
}

/// HGETALL (HKEYS, HVALS): every field and value, in field order; empty for a missing key.
pub fn hgetall<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Fields> {
    Ok(read(v, key)?.map(|h| h.fields).unwrap_or_default())
}

/// HDEL: removes the fields (a field given twice counts once); deletes the key when none is
/// left. Returns how many were removed.
pub fn hdel<'f, V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    fields: impl IntoIterator<Item = &'f [u8]>,
) -> Result<u64> {
    let Some(mut h) = load(v, key)? else {
        return Ok(0);
    };
    let mut removed = 0;
    for f in fields {
        removed += h.fields.remove(f).is_some() as u64;
    }
    if removed > 0 {
        store(v, key, &h.fields, h.expiry)?;
    }
    Ok(removed)
}

/// HLEN: the number of fields, read without decoding them.
pub fn hlen<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    match e {
        None => Ok(0),
        Some(e) if e.kind != Kind::Hash => Err(RedisError::WrongType),
        Some(e) => meridian_core::hash::len(&e.data)
            .map(|n| n as u64)
            .map_err(|b| RedisError::Corrupt(b.0)),
    }
}

/// HINCRBY: adds `delta` to the field's integer value (0 if missing); returns the new value.
pub fn hincrby<V: View + ?Sized>(v: &mut V, key: &[u8], field: &[u8], delta: i64) -> Result<i64> {
    let Hash { mut fields, expiry } = load(v, key)?.unwrap_or_default();
    let old = match fields.get(field) {
        Some(val) => parse_i64(val).ok_or(RedisError::HashNotAnInteger)?,
        None => 0,
    };
    let new = old.checked_add(delta).ok_or(RedisError::Overflow)?;
    let mut buf = itoa::Buffer::new();
    fields.insert(
        Bytes::copy_from_slice(field),
        Bytes::copy_from_slice(buf.format(new).as_bytes()),
    );
    store(v, key, &fields, expiry)?;
    Ok(new)
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
    let Hash { mut fields, expiry } = load(v, key)?.unwrap_or_default();
    let old = match fields.get(field) {
        Some(val) => parse_f64(val).ok_or(RedisError::HashNotAFloat)?,
        None => 0.0,
    };
    let new = old + delta;
    if !new.is_finite() {
        return Err(RedisError::NanOrInfinity);
    }
    let text = Bytes::from(format_f64(new));
    fields.insert(Bytes::copy_from_slice(field), text.clone());
    store(v, key, &fields, expiry)?;
    Ok(text)
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
        Cmd::Hget => reply.opt_bulk(hget(view, key, arg(args, cmd, 2)?)?.as_deref()),
        Cmd::Hmget => {
            let h = read(view, key)?;
            reply.array(args.len() - 2);
            for f in args.iter_from(2) {
                reply.opt_bulk(h.as_ref().and_then(|h| h.fields.get(f)).map(|v| &v[..]));
            }
        }
        Cmd::Hgetall => {
            let fields = hgetall(view, key)?;
            reply.map(fields.len());
            for (f, v) in &fields {
                reply.bulk(f);
                reply.bulk(v);
            }
        }
        Cmd::Hkeys | Cmd::Hvals => {
            let fields = hgetall(view, key)?;
            reply.array(fields.len());
            for (f, v) in &fields {
                reply.bulk(if cmd == Cmd::Hkeys { f } else { v });
            }
        }
        Cmd::Hdel => reply.int(hdel(view, key, args.iter_from(2))? as i64),
        Cmd::Hexists => {
            let field = arg(args, cmd, 2)?;
            let h = read(view, key)?;
            reply.int(h.is_some_and(|h| h.fields.contains_key(field)) as i64);
        }
        Cmd::Hlen => reply.int(hlen(view, key)? as i64),
        Cmd::Hstrlen => {
            let v = hget(view, key, arg(args, cmd, 2)?)?;
            reply.int(v.map_or(0, |v| v.len()) as i64);
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

/// `HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]`: the cursor is checked first,
/// then the key (a missing key answers the empty scan whatever the options), then the
/// options, as Redis's `scanGenericCommand` does. The whole hash is answered at once (cursor
/// 0), as Redis does for a hash of its compact encoding. NOVALUES is Redis 7.4's.
fn hscan(
    view: &mut dyn View,
    args: Args<'_>,
    reply: &mut Reply,
) -> std::result::Result<(), CmdError> {
    let cmd = Cmd::Hscan;
    let key = arg(args, cmd, 1)?;
    parse_cursor(arg(args, cmd, 2)?)?;
    let Some(h) = read(view, key)? else {
        reply.array(2);
        reply.bulk(b"0");
        reply.array(0);
        return Ok(());
    };
    let mut pattern: Option<&[u8]> = None;
    let mut no_values = false;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        let has_value = i + 1 < args.len();
        if opt.eq_ignore_ascii_case(b"COUNT") && has_value {
            if int_arg(args.get(i + 1))? < 1 {
                return Err(raw("ERR syntax error"));
            }
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"MATCH") && has_value {
            let p = args.get(i + 1);
            pattern = (p != b"*").then_some(p);
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"NOVALUES") {
            no_values = true;
            i += 1;
        } else {
            return Err(raw("ERR syntax error"));
        }
    }
    let listed: Vec<(&Bytes, &Bytes)> = h
        .fields
        .iter()
        .filter(|(f, _)| pattern.is_none_or(|p| glob_match(p, f, false)))
        .collect();
    reply.array(2);
    reply.bulk(b"0");
    reply.array(listed.len() * if no_values { 1 } else { 2 });
    for (f, v) in listed {
        reply.bulk(f);
        if !no_values {
            reply.bulk(v);
        }
    }
    Ok(())
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
        match read(view, key)? {
            Some(h) if !h.fields.is_empty() => {
                let i = rand::rng().random_range(0..h.fields.len());
                reply.opt_bulk(h.fields.keys().nth(i).map(|f| &f[..]));
            }
            _ => reply.null(),
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
    let Some(h) = read(view, key)? else {
        // Redis answers the empty array in both protocols here.
        reply.out.extend_from_slice(b"*0\r\n");
        return Ok(());
    };
    let entries: Vec<(&Bytes, &Bytes)> = h.fields.iter().collect();
    let n = entries.len();
    let picked =
        crate::value::random_indexes(n, count).ok_or_else(|| raw("ERR value is out of range"))?;
    if with_values && reply.resp3 {
        reply.array(picked.len());
    } else {
        reply.array(picked.len() * if with_values { 2 } else { 1 });
    }
    for i in picked {
        let Some((f, v)) = entries.get(i) else {
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
    Ok(())
}

#[cfg(test)]
mod tests;
