//! DUMP and RESTORE over a [`View`]: a key's value as Redis's DUMP payload, and a payload
//! back into a key, reply for reply and error for error Redis 7.0's (`cluster.c`'s
//! `dumpCommand`, `restoreCommand`, `verifyDumpPayload`).
//!
//! The payload is Redis's exactly: `[RDB type][value in RDB encoding][RDB version 10, u16
//! LE][CRC-64/Jones, u64 LE]` ([`rdb`]). So a payload DUMPed by Redis 7.0 (or older)
//! RESTOREs here, and a payload DUMPed here RESTOREs in Redis 7.0: the tool that moves keys
//! between Redis servers (`redis-cli --cluster import`, `MIGRATE`-like scripts, RIOT) moves
//! them to and from Meridian.
//!
//! **RESTORE** checks in Redis's order: its options (`REPLACE`, `ABSTTL`, `IDLETIME s`,
//! `FREQ f`, with Redis's errors; IDLETIME and FREQ together are a syntax error), then
//! `BUSYKEY Target key name already exists.` unless REPLACE, then the TTL (an integer,
//! `ERR Invalid TTL value, must be >= 0`), then the footer (`ERR DUMP payload version or
//! checksum are wrong` for a version above 10 or a CRC that does not match), then the value
//! (`ERR Bad data format` for anything damaged, an empty collection, a field or member twice,
//! a NaN score, a module value). A TTL of 0 means no expiry; otherwise it is
//! milliseconds from now, or with ABSTTL a Unix time in milliseconds; a deadline already
//! past creates nothing (and with REPLACE deletes the old key) and answers `+OK`, as in
//! Redis. The value is stored in Meridian's own encoding of its type (a hash as
//! `meridian_core::hash`, a list as `lists::encoding`, a set as `sets`, a sorted set as
//! `zsets`, a stream as `streams`), so every command then reads it as if it had been written here; a value that
//! does not fit the view's [`View::max_value_len`] is refused with that type's "exceeds
//! maximum allowed size" error, and nothing changes. The payload is hostile: every length
//! and count is checked, nothing is allocated beyond what the payload's bytes and the
//! longest value allow, and no input panics.
//!
//! **DUMP** answers a null for an absent key (counting a keyspace miss, as Redis's
//! `lookupKeyRead` does) and otherwise the payload in the simplest encodings Redis 7.0
//! loads (see [`rdb`]).
//!
//! **Where it departs**: `IDLETIME` and `FREQ` are validated and then ignored — Meridian
//! keeps no LRU clock or LFU counter per key (OBJECT IDLETIME/FREQ are not this module's).
//! DUMP writes no LZF-compressed strings and none of Redis's compact encodings (listpacks,
//! intsets), so its payloads are larger than Redis's for the same value but load into
//! the same value. RESTORE checks the compact encodings deeply (as Redis does with
//! `sanitize-dump-payload yes`; Redis 7.0's default checks only their headers and may accept
//! a damaged payload), requires the value to end exactly at the footer and a score written
//! as text to be a number through its last byte (`strtod` would read a prefix). A relative
//! TTL that overflows 64-bit milliseconds answers `ERR invalid expire time in 'restore'
//! command` (Redis 7.0's arithmetic overflows). DUMP of a key holding a large object stored
//! in chunks is refused (the view cannot read chunks); an object held inline is dumped as
//! a string of its bytes.

mod crc64;
mod lzf;
mod packed;
pub mod rdb;
mod stream_rdb;
#[cfg(test)]
mod tests;

use crate::args::Args;
use crate::command::Cmd;
use crate::error::{CmdError, CmdResult, RedisError, SYNTAX, arity_error, int_arg, raw};
use crate::large_object;
use crate::reply::Reply;
use crate::view::{Entry, EntryRef, Kind, View};
use rdb::{LoadError, Save, Value};

/// Redis's reply when the key exists and REPLACE was not given.
pub const BUSYKEY: &str = "BUSYKEY Target key name already exists.";
/// Redis's reply for a payload of a newer RDB version or with a wrong CRC.
pub const BAD_FOOTER: &str = "ERR DUMP payload version or checksum are wrong";
/// Redis's reply for a payload whose value does not load.
pub const BAD_FORMAT: &str = "ERR Bad data format";

/// RESTORE's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Replace an existing key.
    pub replace: bool,
    /// The TTL is a Unix time in milliseconds.
    pub absttl: bool,
    /// IDLETIME's seconds (validated, not kept).
    pub idletime: Option<i64>,
    /// FREQ's counter (validated, not kept).
    pub freq: Option<i64>,
}

/// Executes DUMP or RESTORE over `view`.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(cmd.spec().name));
    }
    match cmd {
        Cmd::Dump => {
            let payload = dump(view, args.get(1))?;
            reply.opt_bulk(payload.as_deref());
        }
        Cmd::Restore => {
            let opts = restore_options(args)?;
            restore(view, args.get(1), args.get(2), args.get(3), opts)?;
            reply.ok();
        }
        _ => {
            return Err(raw(format!(
                "ERR {} is not DUMP or RESTORE",
                cmd.spec().name
            )));
        }
    }
    Ok(())
}

/// RESTORE's options, from argument 4 on, in Redis's order of checks.
pub fn restore_options(args: Args<'_>) -> Result<RestoreOptions, CmdError> {
    let mut o = RestoreOptions::default();
    let mut i = 4;
    while i < args.len() {
        let a = args.get(i);
        let more = i + 1 < args.len();
        if a.eq_ignore_ascii_case(b"REPLACE") {
            o.replace = true;
        } else if a.eq_ignore_ascii_case(b"ABSTTL") {
            o.absttl = true;
        } else if a.eq_ignore_ascii_case(b"IDLETIME") && more && o.freq.is_none() {
            let v = int_arg(args.get(i + 1))?;
            if v < 0 {
                return Err(raw("ERR Invalid IDLETIME value, must be >= 0"));
            }
            o.idletime = Some(v);
            i += 1;
        } else if a.eq_ignore_ascii_case(b"FREQ") && more && o.idletime.is_none() {
            let v = int_arg(args.get(i + 1))?;
            if !(0..=255).contains(&v) {
                return Err(raw("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            o.freq = Some(v);
            i += 1;
        } else {
            return Err(raw(SYNTAX));
        }
        i += 1;
    }
    Ok(o)
}

/// DUMP: the payload of `key`'s value, `None` when the key is absent (a read: counts a
/// keyspace hit or miss).
pub fn dump<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    e.map(|e| payload_of(&e)).transpose()
}

/// The DUMP payload of an entry.
pub fn payload_of(e: &Entry) -> Result<Vec<u8>, CmdError> {
    Ok(match e.kind {
        Kind::String => match large_object::shown_now(e.data.clone()) {
            Ok(bytes) => rdb::save(Save::String(&bytes)),
            Err(size) => return Err(RedisError::LargeObject { cmd: "DUMP", size }.into()),
        },
        Kind::Hash => {
            let fields = crate::hashes::fields_of(e.clone())?;
            rdb::save(Save::Hash(&fields))
        }
        Kind::List => {
            let elems = crate::lists::encoding::decode(&e.data).map_err(RedisError::from)?;
            rdb::save(Save::List(&elems))
        }
        Kind::Set => rdb::save(Save::Set(&crate::sets::members(e)?)),
        Kind::ZSet => rdb::save(Save::ZSet(&crate::zsets::decode(e)?)),
        Kind::Stream => {
            let s = <crate::streams::Stream as crate::collection::Typed>::decode(&e.data)?;
            rdb::save(Save::Stream(&s))
        }
    })
}

/// RESTORE `key ttl payload` with `opts`: checks in Redis's order (see the module docs),
/// then stores the value, or (a deadline already past) only deletes the old key under
/// REPLACE.
pub fn restore<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    ttl: &[u8],
    payload: &[u8],
    opts: RestoreOptions,
) -> CmdResult {
    let exists = v.load(key)?.is_some();
    if exists && !opts.replace {
        return Err(raw(BUSYKEY));
    }
    let ttl = int_arg(ttl)?;
    if ttl < 0 {
        return Err(raw("ERR Invalid TTL value, must be >= 0"));
    }
    let body = rdb::verify(payload).ok_or_else(|| raw(BAD_FOOTER))?;
    let value = match rdb::load(body, v.max_value_len()) {
        Ok(value) => value,
        Err(LoadError::Bad) => return Err(raw(BAD_FORMAT)),
        Err(LoadError::TooLarge) => {
            return Err(too_large(rdb::kind_of(body).unwrap_or(Kind::String)).into());
        }
    };
    let now = v.now().0;
    let expiry = match ttl {
        0 => None,
        _ => {
            let now_ms = (now / 1000) as i64;
            let at_ms = if opts.absttl {
                ttl
            } else {
                ttl.checked_add(now_ms)
                    .ok_or(RedisError::InvalidExpireTime("restore"))?
            };
            if at_ms <= now_ms {
                // Already expired: nothing is created; REPLACE still deletes the old key.
                if exists {
                    v.store(key, None)?;
                }
                return Ok(());
            }
            let us = (at_ms as u64).saturating_mul(1000);
            // A relative TTL keeps the clock's sub-millisecond part, as SET PX does.
            Some(if opts.absttl {
                us
            } else {
                us.saturating_add(now % 1000)
            })
        }
    };
    store(v, key, value, expiry)?;
    Ok(())
}

fn too_large(kind: Kind) -> RedisError {
    match kind {
        Kind::String => RedisError::ValueTooLarge,
        Kind::Hash => RedisError::CollectionTooLarge("hash"),
        Kind::List => RedisError::CollectionTooLarge("list"),
        Kind::Set => RedisError::CollectionTooLarge("set"),
        Kind::ZSet => RedisError::CollectionTooLarge("zset"),
        Kind::Stream => RedisError::CollectionTooLarge("stream"),
    }
}

/// Stores a loaded value in Meridian's encoding of its type, refusing (nothing written) one
/// longer than the view's longest value.
fn store<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    value: Value,
    expiry: Option<u64>,
) -> crate::error::Result<()> {
    match value {
        Value::String(s) => {
            if s.len() > v.max_value_len() {
                return Err(RedisError::ValueTooLarge);
            }
            v.store(key, Some(EntryRef::string(&s, expiry)))
        }
        Value::Hash(fields) => crate::hashes::store(v, key, fields, expiry),
        Value::List(elems) => {
            use crate::lists::encoding::{elem_len, put_elem, start};
            let body = elems
                .iter()
                .map(|e| elem_len(e.len()))
                .fold(0usize, usize::saturating_add);
            let mut data = start(elems.len(), body, v.max_value_len())?;
            for e in &elems {
                put_elem(&mut data, e);
            }
            v.store(
                key,
                Some(EntryRef {
                    data: &data,
                    expiry,
                    kind: Kind::List,
                }),
            )
        }
        Value::Set(members) => crate::sets::store(v, key, &members, expiry),
        Value::ZSet(z) => crate::collection::store(v, key, z, expiry),
        Value::Stream(s) => crate::collection::store(v, key, s, expiry),
    }
}
