//! Redis string-command semantics over a small synchronous view of a keyspace: the one copy
//! of what GET, SET (every option), INCR, APPEND, EXPIRE, DEL, MSET, ... mean.
//!
//! A [`View`] answers three questions: what time the command runs at (expiry
//! decisions), what a key's live value is (an expired key reads as absent), and how to store
//! or delete a key. Everything else — NX/XX, KEEPTTL, integer and float parsing, overflow,
//! range clamping, EXPIRE's NX/XX/GT/LT, the replies — is here, once:
//!
//! - the standalone keyspace (`meridian-server`) runs single-key writes over a view of one
//!   locked stripe that writes straight to the engine, reads over a lock-free view, and
//!   multi-key writes and MULTI/EXEC over an overlay that buffers every write into one
//!   atomic `WriteBatch`;
//! - the cluster's dispatch facade runs them over a one-key view of the key's live entry,
//!   inside the bucket type's read-modify-write (a test-and-set at a timeline master, a
//!   one-key transaction).
//!
//! [`exec_on_view`] executes a request's arguments (as queued by MULTI, or as received) and
//! writes the reply in Redis's type; the typed functions ([`set`], [`incr_by`], ...) are what
//! the keyspace's own API calls. The value envelope `[flags][expiry µs BE if flagged][data]`
//! is `meridian_core::envelope`'s ([`crate::view::decode`]), so every path stores values the same way.
//!
//! Every stored value has a Redis type (`Entry::kind`): a command that reads a value's bytes
//! (GET, GETSET, SET ... GET, GETDEL, GETEX, INCR*, APPEND, STRLEN, GETRANGE, SETRANGE)
//! answers `-WRONGTYPE` on a hash, after one byte comparison; MGET shows a hash as nil; SET,
//! SETEX, MSET overwrite whatever the key holds; DEL, EXISTS, TYPE and the TTL commands work
//! on every type (EXPIRE and PERSIST keep the value's kind). Hashes are [`crate::hashes`].
//!
//! A view's `now` must not move during one command (Redis decides expiry at one time per
//! command; a whole EXEC uses one time too).

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, RedisError, Result, arity_error, int_arg, raw};
use crate::large_object;
use crate::options::{
    Deadline, ExpireCondition, GetExExpiry, KeyTtl, SetCondition, SetOptions, SetOutcome, TtlUnit,
};
use crate::reply::Reply;
use crate::value::{format_f64, parse_f64, parse_i64};
use crate::view::{Entry, EntryRef, Kind, View};
use bytes::Bytes;
use meridian_core::Timestamp;

// ----- the commands, typed ---------------------------------------------------------------

/// Refuses `cmd` on a key whose value is a large object's manifest ([`crate::large_object`]); a plain
/// value costs one byte comparison.
#[inline]
fn not_an_object(e: Option<&Entry>, cmd: &'static str) -> Result<()> {
    match e.and_then(|e| large_object::object_size(&e.data)) {
        Some(size) => Err(RedisError::LargeObject { cmd, size }),
        None => Ok(()),
    }
}

fn read<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Entry>> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    Ok(e)
}

/// [`read`] of the type and expiry alone ([`View::header`]).
fn read_header<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<(Kind, Option<u64>)>> {
    let h = v.header(key)?;
    v.count_read(key, h.is_some());
    Ok(h)
}

/// Refuses a value that is not a string (Redis's `checkType`): one byte comparison on the
/// decoded envelope.
#[inline]
fn string(e: Option<Entry>) -> Result<Option<Entry>> {
    match e {
        Some(e) if e.kind != Kind::String => Err(RedisError::WrongType),
        e => Ok(e),
    }
}

/// [`read`] of a string value: WRONGTYPE for another type.
#[inline]
fn read_string<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Entry>> {
    string(read(v, key)?)
}

/// [`View::load`] of a string value: WRONGTYPE for another type.
#[inline]
fn load_string<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Entry>> {
    string(v.load(key)?)
}

/// GET (WRONGTYPE on a key of another type).
#[inline]
pub fn get<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Bytes>> {
    Ok(read_string(v, key)?.map(|e| e.data))
}

/// MGET's read of one key: a key of another type reads as nil, as Redis's MGET answers.
pub fn get_or_nil<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Bytes>> {
    Ok(read(v, key)?
        .filter(|e| e.kind == Kind::String)
        .map(|e| e.data))
}

/// EXISTS: how many of `keys` exist, counting repeated keys as many times.
pub fn exists<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<u64> {
    let mut n = 0;
    for k in keys {
        n += read_header(v, k)?.is_some() as u64;
    }
    Ok(n)
}

/// TYPE: `"string"`, `"hash"` or `"none"`.
pub fn key_type<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<&'static str> {
    Ok(read_header(v, key)?.map_or("none", |(kind, _)| kind.type_name()))
}

/// STRLEN.
pub fn strlen<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    // A large object's length is the object's, not its manifest's.
    Ok(read_string(v, key)?.map_or(0, |e| {
        large_object::object_size(&e.data).unwrap_or(e.data.len() as u64)
    }))
}

/// GETRANGE with Redis's clamping of negative and out-of-range offsets.
pub fn getrange<V: View + ?Sized>(v: &mut V, key: &[u8], start: i64, end: i64) -> Result<Bytes> {
    let Some(e) = read_string(v, key)? else {
        return Ok(Bytes::new());
    };
    not_an_object(Some(&e), "GETRANGE")?;
    let len = e.data.len() as i64;
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return Ok(Bytes::new());
    }
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end {
        return Ok(Bytes::new());
    }
    Ok(e.data.slice(start as usize..=end as usize))
}

/// TTL/PTTL/EXPIRETIME/PEXPIRETIME: the key's time to live.
pub fn ttl<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<KeyTtl> {
    Ok(match read_header(v, key)? {
        None => KeyTtl::Missing,
        Some((_, None)) => KeyTtl::Persistent,
        Some((_, Some(at))) => {
            let at = Timestamp(at);
            KeyTtl::Expires {
                at,
                remaining: at.duration_since(v.now()),
            }
        }
    })
}

/// Stores `data` with `expiry`, or deletes the key when the expiry is not after now (a
/// deadline already passed: the key is set and gone at once).
pub fn put<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    value: EntryRef<'_>,
    existed: Option<bool>,
) -> Result<()> {
    let expiry = value.expiry;
    match expiry {
        Some(at) if at <= v.now().0 => {
            let existed = match existed {
                Some(e) => e,
                None => v.load(key)?.is_some(),
            };
            if existed {
                v.store(key, None)?;
            }
            Ok(())
        }
        _ => v.store(key, Some(value)),
    }
}

/// SET with its options (NX/XX, GET, EX/PX/EXAT/PXAT, KEEPTTL).
#[inline]
pub fn set<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    value: &[u8],
    opts: SetOptions,
) -> Result<SetOutcome> {
    let now = v.now();
    let deadline = opts.deadline();
    let keep = opts.keep_ttl && deadline.is_none();
    let needs_read = opts.get || opts.condition != SetCondition::Always || keep;
    let current = if needs_read { v.load(key)? } else { None };
    if opts.get {
        v.count_read(key, current.is_some());
        // SET ... GET reads the old value first: WRONGTYPE, nothing written (Redis 7).
        if current.as_ref().is_some_and(|e| e.kind != Kind::String) {
            return Err(RedisError::WrongType);
        }
        not_an_object(current.as_ref(), "GETSET or SET ... GET")?;
    }
    let previous = if opts.get {
        current.as_ref().map(|e| e.data.clone())
    } else {
        None
    };
    let proceed = match opts.condition {
        SetCondition::Always => true,
        SetCondition::IfAbsent => current.is_none(),
        SetCondition::IfPresent => current.is_some(),
    };
    if !proceed {
        return Ok(SetOutcome {
            written: false,
            previous,
        });
    }
    let expiry = match deadline {
        Some(d) => Some(d.resolve(now)),
        None if keep => current.as_ref().and_then(|e| e.expiry),
        None => None,
    };
    let existed = needs_read.then_some(current.is_some());
    put(v, key, EntryRef::string(value, expiry), existed)?;
    Ok(SetOutcome {
        written: true,
        previous,
    })
}

/// MSET: every pair, clearing TTLs; a key given twice ends with its last value.
pub fn mset<V: View + ?Sized>(v: &mut V, pairs: &[(&[u8], &[u8])]) -> Result<()> {
    for (k, val) in pairs {
        v.store(k, Some(EntryRef::string(val, None)))?;
    }
    Ok(())
}

/// MSETNX: every pair only if none of the keys exists; returns whether it wrote.
pub fn msetnx<V: View + ?Sized>(v: &mut V, pairs: &[(&[u8], &[u8])]) -> Result<bool> {
    for (k, _) in pairs {
        if v.load(k)?.is_some() {
            return Ok(false);
        }
    }
    mset(v, pairs)?;
    Ok(true)
}

/// DEL/UNLINK: returns how many of the keys existed (a key given twice counts once).
pub fn del<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<u64> {
    let mut n = 0;
    for k in keys {
        let exists = match v.load(k) {
            Ok(e) => e.is_some(),
            // A value in a foreign format still exists and can be deleted.
            Err(RedisError::Corrupt(_)) => true,
            Err(e) => return Err(e),
        };
        if exists {
            v.store(k, None)?;
            n += 1;
        }
    }
    Ok(n)
}

/// GETDEL.
pub fn getdel<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Bytes>> {
    let e = read_string(v, key)?;
    not_an_object(e.as_ref(), "GETDEL")?;
    if e.is_some() {
        v.store(key, None)?;
    }
    Ok(e.map(|e| e.data))
}

/// GETEX: the value, with its TTL changed.
pub fn getex<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    expiry: GetExExpiry,
) -> Result<Option<Bytes>> {
    let Some(e) = read_string(v, key)? else {
        return Ok(None);
    };
    not_an_object(Some(&e), "GETEX")?;
    match expiry {
        GetExExpiry::Unchanged => {}
        GetExExpiry::Persist => {
            if e.expiry.is_some() {
                put(v, key, EntryRef::string(&e.data, None), Some(true))?;
            }
        }
        GetExExpiry::At(d) => {
            let at = d.resolve(v.now());
            put(v, key, EntryRef::string(&e.data, Some(at)), Some(true))?;
        }
    }
    Ok(Some(e.data))
}

/// INCRBY (INCR, DECR): adds `delta` to the integer value (0 if missing), keeping the TTL.
pub fn incr_by<V: View + ?Sized>(v: &mut V, key: &[u8], delta: i64) -> Result<i64> {
    let current = load_string(v, key)?;
    not_an_object(current.as_ref(), "INCR/DECR/INCRBY/DECRBY")?;
    let (value, expiry) = match &current {
        Some(e) => (
            parse_i64(&e.data).ok_or(RedisError::NotAnInteger)?,
            e.expiry,
        ),
        None => (0, None),
    };
    let new = value.checked_add(delta).ok_or(RedisError::Overflow)?;
    let mut buf = itoa::Buffer::new();
    v.store(
        key,
        Some(EntryRef::string(buf.format(new).as_bytes(), expiry)),
    )?;
    Ok(new)
}

/// DECRBY: refuses the one delta whose negation overflows, as Redis does.
pub fn decr_by<V: View + ?Sized>(v: &mut V, key: &[u8], delta: i64) -> Result<i64> {
    let neg = delta.checked_neg().ok_or(RedisError::DecrementOverflow)?;
    incr_by(v, key, neg)
}

/// INCRBYFLOAT: returns the new value as stored.
pub fn incr_by_float<V: View + ?Sized>(v: &mut V, key: &[u8], delta: f64) -> Result<Bytes> {
    let current = load_string(v, key)?;
    not_an_object(current.as_ref(), "INCRBYFLOAT")?;
    let (value, expiry) = match &current {
        Some(e) => (parse_f64(&e.data).ok_or(RedisError::NotAFloat)?, e.expiry),
        None => (0.0, None),
    };
    let new = value + delta;
    if !new.is_finite() {
        return Err(RedisError::NanOrInfinity);
    }
    let text = Bytes::from(format_f64(new));
    v.store(key, Some(EntryRef::string(&text, expiry)))?;
    Ok(text)
}

/// APPEND: returns the new length.
pub fn append<V: View + ?Sized>(v: &mut V, key: &[u8], suffix: &[u8]) -> Result<u64> {
    let current = load_string(v, key)?;
    not_an_object(current.as_ref(), "APPEND")?;
    let (old, expiry) = match &current {
        Some(e) => (&e.data[..], e.expiry),
        None => (&b""[..], None),
    };
    if old.len() + suffix.len() > v.max_value_len() {
        return Err(RedisError::ValueTooLarge);
    }
    let mut data = Vec::with_capacity(old.len() + suffix.len());
    data.extend_from_slice(old);
    data.extend_from_slice(suffix);
    v.store(key, Some(EntryRef::string(&data, expiry)))?;
    Ok(data.len() as u64)
}

/// SETRANGE: overwrites from `offset`, zero-padding; returns the new length.
pub fn setrange<V: View + ?Sized>(v: &mut V, key: &[u8], offset: i64, value: &[u8]) -> Result<u64> {
    if offset < 0 {
        return Err(RedisError::OffsetOutOfRange);
    }
    let offset = offset as usize;
    let current = load_string(v, key)?;
    not_an_object(current.as_ref(), "SETRANGE")?;
    let old_len = current.as_ref().map_or(0, |e| e.data.len());
    if value.is_empty() {
        return Ok(old_len as u64);
    }
    if offset.saturating_add(value.len()) > v.max_value_len() {
        return Err(RedisError::ValueTooLarge);
    }
    let mut data = current.as_ref().map_or_else(Vec::new, |e| e.data.to_vec());
    if data.len() < offset + value.len() {
        data.resize(offset + value.len(), 0);
    }
    data[offset..offset + value.len()].copy_from_slice(value);
    let expiry = current.and_then(|e| e.expiry);
    v.store(key, Some(EntryRef::string(&data, expiry)))?;
    Ok(data.len() as u64)
}

/// EXPIRE and friends: sets the deadline under `cond`; a deadline not after now deletes the
/// key. Returns whether the key existed and the condition held.
pub fn expire<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    deadline: Deadline,
    cond: ExpireCondition,
) -> Result<bool> {
    let Some((_, expiry)) = v.header(key)? else {
        return Ok(false);
    };
    let at = deadline.resolve(v.now());
    let holds = match expiry {
        None => !cond.xx && !cond.gt,
        Some(cur) => !cond.nx && (!cond.gt || at > cur) && (!cond.lt || at < cur),
    };
    if holds && at <= v.now().0 {
        v.store(key, None)?;
    } else if holds {
        v.retime(key, Some(at))?;
    }
    Ok(holds)
}

/// PERSIST: returns whether the key had a TTL.
pub fn persist<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<bool> {
    match v.header(key)? {
        Some((_, Some(_))) => {
            v.retime(key, None)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

// ----- the commands, from their arguments ------------------------------------------------

/// Whether `cmd` is a string command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Strings
}

/// Executes a string command ([`handles`]) whose arity was checked, against `view`, writing
/// its reply; an error is returned for the caller to write. Callers route every data command
/// through [`crate::types::exec_on_view`].
pub fn exec_on_view(
    cmd: Cmd,
    args: Args<'_>,
    view: &mut dyn View,
    reply: &mut Reply,
) -> crate::error::CmdResult {
    let key = || args.get(1);
    match cmd {
        // A large object shows its bytes when the view holds them (inline); a chunked one
        // needs the object service, which the async paths read before they get here.
        Cmd::Get => match get(view, key())?.map(large_object::shown_now) {
            None => reply.null(),
            Some(Ok(b)) => reply.bulk(&b),
            Some(Err(size)) => return Err(large_object::chunked_in_transaction(size)),
        },
        Cmd::BlobRead => {
            use crate::large_object as blob;
            // The caller applies `blob.resp_get_max`; a view only serves bytes it holds.
            let (offset, len) = blob::read_args(args, u64::MAX)?;
            match get(view, key())?.map(blob::shown_now) {
                None => reply.null(),
                Some(Ok(b)) => reply.bulk(&blob::slice(&b, offset, len)),
                Some(Err(size)) if blob::span(size, offset, len).is_none() => reply.bulk(b""),
                Some(Err(size)) => return Err(blob::chunked_in_transaction(size)),
            }
        }
        Cmd::Set => {
            let opts = if args.len() == 3 {
                SetOptions::default()
            } else {
                SetOptions::parse(args.iter_from(3), "set", view.now())?
            };
            let out = set(view, key(), args.get(2), opts)?;
            if opts.get {
                reply.opt_bulk(out.previous.as_deref());
            } else if out.written {
                reply.ok();
            } else {
                reply.null();
            }
        }
        Cmd::Del | Cmd::Unlink => reply.int(del(view, args.iter_from(1))? as i64),
        Cmd::Exists | Cmd::Touch => reply.int(exists(view, args.iter_from(1))? as i64),
        Cmd::Mget => {
            reply.array(args.len() - 1);
            for k in args.iter_from(1) {
                // A chunked large object is nil, as Redis's MGET shows another type.
                // So is a key of another type (a hash).
                let v = get_or_nil(view, k)?.and_then(|v| large_object::shown_now(v).ok());
                reply.opt_bulk(v.as_deref());
            }
        }
        Cmd::Mset | Cmd::Msetnx => {
            if args.len().is_multiple_of(2) {
                return Err(arity_error(cmd.spec().name));
            }
            let pairs: Vec<(&[u8], &[u8])> = (1..args.len())
                .step_by(2)
                .map(|i| (args.get(i), args.get(i + 1)))
                .collect();
            if cmd == Cmd::Mset {
                mset(view, &pairs)?;
                reply.ok();
            } else {
                reply.int(msetnx(view, &pairs)? as i64);
            }
        }
        Cmd::Incr => reply.int(incr_by(view, key(), 1)?),
        Cmd::Decr => reply.int(incr_by(view, key(), -1)?),
        Cmd::Incrby => reply.int(incr_by(view, key(), int_arg(args.get(2))?)?),
        Cmd::Decrby => reply.int(decr_by(view, key(), int_arg(args.get(2))?)?),
        Cmd::Incrbyfloat => {
            // Redis checks the key's type before it parses the increment.
            let delta = match parse_f64(args.get(2)) {
                Some(d) => d,
                None => {
                    load_string(view, key())?;
                    return Err(RedisError::NotAFloat.into());
                }
            };
            reply.bulk(&incr_by_float(view, key(), delta)?);
        }
        Cmd::Append => reply.int(append(view, key(), args.get(2))? as i64),
        Cmd::Strlen => reply.int(strlen(view, key())? as i64),
        Cmd::Getdel => reply.opt_bulk(getdel(view, key())?.as_deref()),
        Cmd::Getex => {
            // Redis's order: the options' syntax, then the key (nil when missing, WRONGTYPE),
            // then the expire time's value.
            let (persist, ttl) = parse_getex(args)?;
            let expiry = match ttl {
                Some((unit, value)) => {
                    if load_string(view, key())?.is_none() {
                        view.count_read(key(), false);
                        reply.null();
                        return Ok(());
                    }
                    GetExExpiry::At(Deadline::At(unit.deadline(value, "getex", view.now())?))
                }
                None if persist => GetExExpiry::Persist,
                None => GetExExpiry::Unchanged,
            };
            reply.opt_bulk(getex(view, key(), expiry)?.as_deref());
        }
        Cmd::Getset => {
            let opts = SetOptions {
                get: true,
                ..SetOptions::default()
            };
            reply.opt_bulk(set(view, key(), args.get(2), opts)?.previous.as_deref());
        }
        Cmd::Lcs => crate::lcs::exec_on_view(args, view, reply)?,
        Cmd::Getrange | Cmd::Substr => {
            let (start, end) = (int_arg(args.get(2))?, int_arg(args.get(3))?);
            reply.bulk(&getrange(view, key(), start, end)?);
        }
        Cmd::Setrange => {
            let offset = int_arg(args.get(2))?;
            reply.int(setrange(view, key(), offset, args.get(3))? as i64);
        }
        Cmd::Setnx => {
            let opts = SetOptions {
                condition: SetCondition::IfAbsent,
                ..SetOptions::default()
            };
            reply.int(set(view, key(), args.get(2), opts)?.written as i64);
        }
        Cmd::Setex | Cmd::Psetex => {
            let (unit, name) = if cmd == Cmd::Setex {
                (TtlUnit::Ex, "setex")
            } else {
                (TtlUnit::Px, "psetex")
            };
            let opts = SetOptions {
                expire_at: Some(unit.deadline(args.get(2), name, view.now())?),
                ..SetOptions::default()
            };
            set(view, key(), args.get(3), opts)?;
            reply.ok();
        }
        Cmd::Expire | Cmd::Pexpire | Cmd::Expireat | Cmd::Pexpireat => {
            let cond = ExpireCondition::parse(args.iter_from(3))?;
            let deadline = expire_deadline(cmd, args.get(2), view.now())?;
            reply.int(expire(view, key(), deadline, cond)? as i64);
        }
        Cmd::Ttl | Cmd::Pttl | Cmd::Expiretime | Cmd::Pexpiretime => {
            let v = match ttl(view, key())? {
                KeyTtl::Missing => -2,
                KeyTtl::Persistent => -1,
                KeyTtl::Expires { at, remaining } => {
                    let ms = remaining.as_micros().div_ceil(1000) as i64;
                    match cmd {
                        Cmd::Ttl => (ms + 500) / 1000,
                        Cmd::Pttl => ms,
                        Cmd::Expiretime => (at.0 / 1_000_000) as i64,
                        _ => (at.0 / 1000) as i64,
                    }
                }
            };
            reply.int(v);
        }
        Cmd::Persist => reply.int(persist(view, key())? as i64),
        Cmd::Type => reply.simple(key_type(view, key())?.as_bytes()),
        other => {
            return Err(raw(format!(
                "ERR {} is not a string command",
                other.spec().name.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}

/// The absolute deadline of EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT, with Redis's overflow checks
/// (`expireGenericCommand`). Negative and past times are allowed: they delete the key.
fn expire_deadline(
    cmd: Cmd,
    value: &[u8],
    now: Timestamp,
) -> std::result::Result<Deadline, CmdError> {
    let name = cmd.spec().name;
    let invalid = || raw(format!("ERR invalid expire time in '{name}' command"));
    let v = int_arg(value)?;
    let seconds = matches!(cmd, Cmd::Expire | Cmd::Expireat);
    let relative = matches!(cmd, Cmd::Expire | Cmd::Pexpire);
    let ms = if seconds {
        v.checked_mul(1000).ok_or_else(invalid)?
    } else {
        v
    };
    let now_ms = (now.0 / 1000) as i64;
    let when_ms = if relative {
        ms.checked_add(now_ms).ok_or_else(invalid)?
    } else {
        ms
    };
    if when_ms <= 0 {
        return Ok(Deadline::At(Timestamp::MIN));
    }
    // Relative deadlines keep the clock's sub-millisecond part.
    let sub_ms = if relative { now.0 % 1000 } else { 0 };
    Ok(Deadline::At(Timestamp(
        (when_ms as u64).saturating_mul(1000).saturating_add(sub_ms),
    )))
}

/// GETEX's options, syntax only: PERSIST, or EX/PX/EXAT/PXAT and its (unparsed) value
/// (Redis's rules: one of them).
type GetExArgs<'a> = (bool, Option<(TtlUnit, &'a [u8])>);

fn parse_getex(args: Args<'_>) -> std::result::Result<GetExArgs<'_>, CmdError> {
    let mut ttl: Option<(TtlUnit, &[u8])> = None;
    let mut persist = false;
    let mut i = 2;
    while i < args.len() {
        let opt = args.get(i);
        if opt.eq_ignore_ascii_case(b"PERSIST") && ttl.is_none() {
            persist = true;
        } else if let Some(unit) = TtlUnit::from_option(opt)
            && !persist
            && ttl.is_none_or(|(u, _)| u == unit)
            && i + 1 < args.len()
        {
            i += 1;
            ttl = Some((unit, args.get(i)));
        } else {
            return Err(raw("ERR syntax error"));
        }
        i += 1;
    }
    Ok((persist, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_view::TestView as MapView;

    fn run(v: &mut MapView, line: &str) -> Vec<u8> {
        let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let owned = crate::OwnedArgs::from_slices(parts.iter().copied());
        let args = owned.get();
        let cmd = Cmd::lookup(parts[0]).unwrap();
        let mut reply = Reply::new(64);
        if let Err(e) = exec_on_view(cmd, args, v, &mut reply) {
            reply.command_error(e);
        }
        reply.out.to_vec()
    }

    #[test]
    fn commands_over_a_plain_map() {
        let mut v = MapView::new();
        v.max = 8;
        assert_eq!(run(&mut v, "SET a 1"), b"+OK\r\n");
        assert_eq!(run(&mut v, "SET a 2 NX"), b"$-1\r\n");
        assert_eq!(run(&mut v, "INCRBY a 41"), b":42\r\n");
        assert_eq!(run(&mut v, "APPEND a xyz"), b":5\r\n");
        assert_eq!(
            run(&mut v, "INCR a"),
            b"-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(
            run(&mut v, "APPEND a 12345"),
            b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n",
            "the view's limit is honoured"
        );
        assert_eq!(run(&mut v, "EXPIRE a 10"), b":1\r\n");
        assert_eq!(run(&mut v, "TTL a"), b":10\r\n");
        assert_eq!(run(&mut v, "EXPIRE a 5 GT"), b":0\r\n");
        assert_eq!(run(&mut v, "SET a v KEEPTTL"), b"+OK\r\n");
        assert_eq!(run(&mut v, "PTTL a"), b":10000\r\n");
        assert_eq!(run(&mut v, "PERSIST a"), b":1\r\n");
        assert_eq!(run(&mut v, "TTL a"), b":-1\r\n");
        assert_eq!(run(&mut v, "MSET b 1 c 2"), b"+OK\r\n");
        assert_eq!(run(&mut v, "MSETNX c 3 d 4"), b":0\r\n");
        assert_eq!(
            run(&mut v, "MGET a b nope"),
            b"*3\r\n$1\r\nv\r\n$1\r\n1\r\n$-1\r\n"
        );
        assert_eq!(run(&mut v, "DEL a a nope"), b":1\r\n");
        assert_eq!(run(&mut v, "EXPIRE b -1"), b":1\r\n");
        assert_eq!(run(&mut v, "EXISTS b c c"), b":2\r\n");
        assert_eq!(
            run(&mut v, "SETEX e 0 v"),
            b"-ERR invalid expire time in 'setex' command\r\n"
        );
        assert_eq!(
            run(&mut v, "GETEX c PERSIST EX 1"),
            b"-ERR syntax error\r\n"
        );
        assert_eq!(run(&mut v, "GETDEL c"), b"$1\r\n2\r\n");
        assert_eq!(run(&mut v, "TYPE c"), b"+none\r\n");
        assert_eq!(
            run(&mut v, "PING"),
            b"-ERR PING is not a string command\r\n"
        );
    }
}
