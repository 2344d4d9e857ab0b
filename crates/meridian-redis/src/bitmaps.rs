//! Redis's bitmap commands over a [`View`]: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP,
//! BITFIELD and BITFIELD_RO, reply for reply and error for error Redis 7.0's (`bitops.c`,
//! `tests/unit/bitops.tcl`, `tests/unit/bitfield.tcl`).
//!
//! A bitmap is a string value ([`Kind::String`]); bit 0 is the most significant bit of the
//! first byte. The bit arithmetic is the `bits` submodule's, pure functions over byte slices.
//!
//! **Redis's rules kept**:
//!
//! - a missing key reads as an endless run of zero bits; a key of another type is
//!   `-WRONGTYPE` (BITOP's destination excepted: it is overwritten whatever it holds);
//! - arguments are checked in Redis's order: SETBIT and GETBIT check the offset (and SETBIT
//!   its bit) before the key; BITCOUNT reads the key first (a missing key is 0 whatever the
//!   other arguments, `BITCOUNT key 0` on an existing key is a syntax error), BITPOS checks
//!   its bit argument, then the key, then the range; BITFIELD parses every subcommand before
//!   it reads the key;
//! - a bit offset is a strict 64-bit integer whose byte lies below 512 MB (Redis's default
//!   `proto-max-bulk-len`), else `ERR bit offset is not an integer or out of range`;
//!   BITFIELD's `#N` offsets are `N` times the type's width;
//! - SETBIT and BITFIELD create a missing key as a zero-filled string, grow a short one with
//!   zeros, and keep its TTL; a write that changes nothing (SETBIT of the bit already there,
//!   BITFIELD SET of the value already there, within the string) stores nothing. A BITFIELD
//!   whose writes all FAIL still creates or grows the string, as Redis does;
//! - BITCOUNT and BITPOS clamp their range as Redis does (negative indexes from the end, in
//!   bytes or with `BIT` in bits); BITCOUNT answers 0 at once for two negative indexes with
//!   start after end (before it looks at BYTE|BIT); BITPOS answers -1 for an empty range,
//!   and when it looks for a 0 that is not there answers the first bit past the string
//!   without an explicit end, -1 with one;
//! - BITOP reads missing sources as empty strings and pads shorter ones with zeros, answers
//!   the result's length, stores it without a TTL, and deletes the destination when the
//!   result is empty; `BITOP NOT` takes one source;
//! - BITFIELD's types are `i1`..`i64` and `u1`..`u63`; OVERFLOW WRAP (the default), SAT or
//!   FAIL applies to the SET and INCRBY after it; SET answers the old value, INCRBY the new
//!   one, a FAILed one nil. Overflow is decided by `bitops.c`'s own checks, quirks included:
//!   an unsigned SET of a negative value is the huge unsigned value it casts to, so it
//!   saturates at the maximum; a signed SAT SET of a value less than 2^(w-1) above the most
//!   negative 64-bit integer saturates at the maximum too. A BITFIELD of GETs only is a read
//!   (no store, a missing key stays missing). BITFIELD_RO refuses SET and INCRBY (`ERR
//!   BITFIELD_RO only supports the GET subcommand`) once every subcommand has parsed.
//!
//! **Where it departs**: offsets are also bounded by the view's longest value
//! ([`View::max_value_len`], Redis's `proto-max-bulk-len` here, which Redis lets replicated
//! and AOF clients exceed), with the same error; a BITFIELD write whose field ends past that
//! length (an offset near the limit plus the field's width) is `ERR string exceeds maximum
//! allowed size (proto-max-bulk-len)`, nothing written, where Redis grows the string a few
//! bytes past it. A `#N` offset whose product overflows 64 bits is the offset error (C's
//! overflow is undefined there). A key holding a large object (a manifest, see
//! [`crate::large_object`]) is refused by every command that reads or changes its bits, as
//! GETRANGE and SETRANGE refuse it; BITOP may overwrite one as its destination, as SET does.
//!
//! **Cost**: GETBIT, BITCOUNT, BITPOS and BITFIELD's GETs read the stored bytes in place
//! (no copy); SETBIT and BITFIELD build the new value in one allocation, BITOP its result in
//! one; BITCOUNT and BITPOS go a word at a time. As every write over a [`View`] does, SETBIT
//! and BITFIELD store the whole value again (O(size), where Redis changes bytes in place).

mod bits;
#[cfg(test)]
mod tests;

use self::bits::Overflow;
use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, int_arg, raw, until_nul};
use crate::large_object;
use crate::reply::Reply;
use crate::value::parse_i64;
use crate::view::{Entry, EntryRef, Kind, View};
use bytes::Bytes;

/// An offset that is not an integer, is negative, or lies past the longest bitmap.
const OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";
/// SETBIT's value other than 0 or 1.
const BIT_ERR: &str = "ERR bit is not an integer or out of range";
/// BITPOS's bit other than 0 or 1.
const BIT_ARG_ERR: &str = "ERR The bit argument must be 1 or 0.";
/// A BITFIELD type other than `i1`..`i64`, `u1`..`u63`.
const TYPE_ERR: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
/// BITFIELD's OVERFLOW other than WRAP, SAT, FAIL.
const OVERFLOW_ERR: &str = "ERR Invalid OVERFLOW type specified";
/// BITOP NOT of other than one source.
const NOT_ERR: &str = "ERR BITOP NOT must be called with a single source key.";
/// BITFIELD_RO with SET or INCRBY.
const RO_ERR: &str = "ERR BITFIELD_RO only supports the GET subcommand";

/// The longest bitmap an offset may address, in bytes: Redis's default
/// `proto-max-bulk-len` (bit offsets up to 2^32 - 1).
const MAX_BITMAP_BYTES: u64 = 512 * 1024 * 1024;

/// Whether `cmd` is a bitmap command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Bitmaps
}

/// Executes a bitmap command whose arity was checked, over `view`, writing its reply; an
/// error is returned for the caller to write (nothing is written to `reply` then).
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    match cmd {
        Cmd::Setbit => {
            let offset = bit_offset(args.get(2), None, max_bytes(view))?;
            let on = match parse_i64(args.get(3)) {
                Some(0) => false,
                Some(1) => true,
                _ => return Err(raw(BIT_ERR)),
            };
            reply.int(i64::from(setbit(view, args.get(1), offset, on)?));
        }
        Cmd::Getbit => {
            let offset = bit_offset(args.get(2), None, max_bytes(view))?;
            let set =
                read(view, args.get(1), "GETBIT")?.is_some_and(|e| bits::get_bit(&e.data, offset));
            reply.int(i64::from(set));
        }
        Cmd::Bitcount => bitcount(args, view, reply)?,
        Cmd::Bitpos => bitpos(args, view, reply)?,
        Cmd::Bitop => bitop(args, view, reply)?,
        Cmd::Bitfield | Cmd::BitfieldRo => bitfield(cmd, args, view, reply)?,
        other => {
            return Err(raw(format!(
                "ERR {} is not a bitmap command",
                other.spec().name.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}

// ----- reading keys and arguments ------------------------------------------------------

/// A key's value as a bitmap command `cmd` may use it: WRONGTYPE for another type, the
/// large-object refusal for a manifest.
#[inline]
fn bitmap(e: Option<Entry>, cmd: &'static str) -> Result<Option<Entry>> {
    match e {
        Some(e) if e.kind != Kind::String => Err(RedisError::WrongType),
        Some(e) => match large_object::object_size(&e.data) {
            Some(size) => Err(RedisError::LargeObject { cmd, size }),
            None => Ok(Some(e)),
        },
        None => Ok(None),
    }
}

/// A read command's lookup (Redis's `lookupKeyRead`: counted as a hit or a miss).
#[inline]
fn read(view: &mut dyn View, key: &[u8], cmd: &'static str) -> Result<Option<Entry>> {
    let e = view.load(key)?;
    view.count_read(key, e.is_some());
    bitmap(e, cmd)
}

/// A write command's lookup (`lookupKeyWrite`: not counted).
#[inline]
fn load(view: &mut dyn View, key: &[u8], cmd: &'static str) -> Result<Option<Entry>> {
    bitmap(view.load(key)?, cmd)
}

/// The longest bitmap an offset may address in `view`, in bytes.
#[inline]
fn max_bytes(view: &dyn View) -> u64 {
    MAX_BITMAP_BYTES.min(view.max_value_len() as u64)
}

/// A bit offset (`getBitOffsetFromArgument`): a strict integer, or with `width` (BITFIELD)
/// `#N` for `N * width`; its byte must lie below `max_bytes`.
fn bit_offset(a: &[u8], width: Option<u32>, max_bytes: u64) -> std::result::Result<u64, CmdError> {
    let err = || raw(OFFSET_ERR);
    let (digits, times) = match (a.first(), width) {
        (Some(b'#'), Some(w)) => (&a[1..], i64::from(w)),
        _ => (a, 1),
    };
    let offset = parse_i64(digits)
        .and_then(|n| n.checked_mul(times))
        .ok_or_else(err)?;
    if offset < 0 || (offset as u64 >> 3) >= max_bytes {
        return Err(err());
    }
    Ok(offset as u64)
}

/// C's `strcasecmp(arg, word) == 0`: case-insensitive, up to the argument's first NUL.
#[inline]
fn word_is(arg: &[u8], word: &str) -> bool {
    until_nul(arg).eq_ignore_ascii_case(word.as_bytes())
}

/// BITCOUNT's and BITPOS's `BYTE|BIT`: whether the range is in bits.
fn unit_is_bit(a: &[u8]) -> std::result::Result<bool, CmdError> {
    if word_is(a, "bit") {
        Ok(true)
    } else if word_is(a, "byte") {
        Ok(false)
    } else {
        Err(raw(SYNTAX))
    }
}

/// A range of a `len`-byte string after Redis's clamping, as inclusive bit positions;
/// `None` when it is empty.
fn clamp(start: i64, end: i64, len: u64, in_bits: bool) -> Option<(u64, u64)> {
    let total = (if in_bits { len * 8 } else { len }) as i64;
    // `total + x` for a negative `x` cannot overflow: `total` is not negative.
    let start = if start < 0 { total + start } else { start }.max(0);
    let mut end = if end < 0 { total + end } else { end }.max(0);
    if end >= total {
        end = total - 1;
    }
    if start > end {
        return None;
    }
    let (s, e) = (start as u64, end as u64);
    Some(if in_bits { (s, e) } else { (s * 8, e * 8 + 7) })
}

/// The whole of a `len`-byte string as inclusive bit positions (`None` when empty).
#[inline]
fn whole(len: u64) -> Option<(u64, u64)> {
    (len > 0).then(|| (0, len * 8 - 1))
}

// ----- the commands ----------------------------------------------------------------------

/// SETBIT: sets or clears the bit at `offset` (whose byte the caller checked lies below
/// [`max_bytes`]), creating or growing the string with zeros, keeping its TTL; returns the
/// bit's previous value.
fn setbit(view: &mut dyn View, key: &[u8], offset: u64, on: bool) -> Result<bool> {
    let current = load(view, key, "SETBIT")?;
    let byte = (offset >> 3) as usize;
    let mask = 0x80u8 >> (offset & 7);
    let (old, expiry) = match &current {
        Some(e) => (&e.data[..], e.expiry),
        None => (&[][..], None),
    };
    let was = old.get(byte).is_some_and(|b| b & mask != 0);
    if current.is_some() && byte < old.len() && was == on {
        return Ok(was);
    }
    // One allocation: the old bytes, the zeros after them, the bit.
    let len = old.len().max(byte + 1);
    let mut data = Vec::with_capacity(len);
    data.extend_from_slice(old);
    data.resize(len, 0);
    if on {
        data[byte] |= mask;
    } else {
        data[byte] &= !mask;
    }
    view.store(key, Some(EntryRef::string(&data, expiry)))?;
    Ok(was)
}

/// BITCOUNT key [start end [BYTE|BIT]]
fn bitcount(args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let Some(e) = read(view, args.get(1), "BITCOUNT")? else {
        reply.int(0);
        return Ok(());
    };
    let data: &[u8] = &e.data;
    let len = data.len() as u64;
    let range = match args.len() {
        2 => whole(len),
        4 | 5 => {
            let start = int_arg(args.get(2))?;
            let end = int_arg(args.get(3))?;
            if start < 0 && end < 0 && start > end {
                reply.int(0);
                return Ok(());
            }
            let in_bits = args.len() == 5 && unit_is_bit(args.get(4))?;
            clamp(start, end, len, in_bits)
        }
        _ => return Err(raw(SYNTAX)),
    };
    let n = range.map_or(0, |(first, last)| bits::count_range(data, first, last));
    reply.int(n as i64);
    Ok(())
}

/// BITPOS key bit [start [end [BYTE|BIT]]]
fn bitpos(args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let bit = match int_arg(args.get(2))? {
        0 => false,
        1 => true,
        _ => return Err(raw(BIT_ARG_ERR)),
    };
    let Some(e) = read(view, args.get(1), "BITPOS")? else {
        // An endless run of zeros.
        reply.int(if bit { -1 } else { 0 });
        return Ok(());
    };
    let data: &[u8] = &e.data;
    let len = data.len() as u64;
    let n = args.len();
    let (range, end_given) = match n {
        3 => (whole(len), false),
        4..=6 => {
            let start = int_arg(args.get(3))?;
            let in_bits = n == 6 && unit_is_bit(args.get(5))?;
            let end = if n >= 5 {
                int_arg(args.get(4))?
            } else {
                len as i64 - 1
            };
            (clamp(start, end, len, in_bits), n >= 5)
        }
        _ => return Err(raw(SYNTAX)),
    };
    let pos = match range {
        None => -1,
        Some((first, last)) => match bits::first_bit(data, first, last, bit) {
            Some(p) => p as i64,
            // Without an end, the string is taken as followed by zeros.
            None if !bit && !end_given => last as i64 + 1,
            None => -1,
        },
    };
    reply.int(pos);
    Ok(())
}

/// BITOP's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]
fn bitop(args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let name = args.get(1);
    let op = if word_is(name, "and") {
        BitOp::And
    } else if word_is(name, "or") {
        BitOp::Or
    } else if word_is(name, "xor") {
        BitOp::Xor
    } else if word_is(name, "not") {
        BitOp::Not
    } else {
        return Err(raw(SYNTAX));
    };
    if op == BitOp::Not && args.len() != 4 {
        return Err(raw(NOT_ERR));
    }
    let dest = args.get(2);
    // Every source is read (and type-checked, in order) before anything is written.
    let mut sources: Vec<Bytes> = Vec::with_capacity(args.len() - 3);
    for key in args.iter_from(3) {
        sources.push(read(view, key, "BITOP")?.map_or_else(Bytes::new, |e| e.data));
    }
    let max = sources.iter().map(Bytes::len).max().unwrap_or(0);
    if max == 0 {
        let exists = match view.load(dest) {
            Ok(e) => e.is_some(),
            // A value in a foreign format still exists and is replaced.
            Err(RedisError::Corrupt(_)) => true,
            Err(e) => return Err(e.into()),
        };
        if exists {
            view.store(dest, None)?;
        }
        reply.int(0);
        return Ok(());
    }
    if max > view.max_value_len() {
        return Err(RedisError::ValueTooLarge.into());
    }
    let mut out = Vec::with_capacity(max);
    out.extend_from_slice(&sources[0]);
    out.resize(max, 0);
    match op {
        BitOp::Not => out.iter_mut().for_each(|b| *b = !*b),
        BitOp::And => {
            let min = sources.iter().map(Bytes::len).min().unwrap_or(0);
            for s in &sources[1..] {
                out.iter_mut().zip(&s[..min]).for_each(|(o, b)| *o &= b);
            }
            out[min..].fill(0);
        }
        BitOp::Or => {
            for s in &sources[1..] {
                out.iter_mut().zip(s.iter()).for_each(|(o, b)| *o |= b);
            }
        }
        BitOp::Xor => {
            for s in &sources[1..] {
                out.iter_mut().zip(s.iter()).for_each(|(o, b)| *o ^= b);
            }
        }
    }
    view.store(dest, Some(EntryRef::string(&out, None)))?;
    reply.int(max as i64);
    Ok(())
}

/// One BITFIELD subcommand.
#[derive(Clone, Copy, Debug)]
enum FieldOp {
    Get,
    /// SET's value.
    Set(i64),
    /// INCRBY's increment.
    Incrby(i64),
}

/// One BITFIELD subcommand with its field and the OVERFLOW mode in force.
#[derive(Clone, Copy, Debug)]
struct Field {
    op: FieldOp,
    signed: bool,
    /// The width: 1..=64 signed, 1..=63 unsigned.
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

impl Field {
    /// A GET of the field (zeros past the end of `data`).
    #[inline]
    fn get(&self, data: &[u8]) -> i64 {
        if self.signed {
            bits::get_signed_field(data, self.offset, self.bits)
        } else {
            // At most 63 bits: fits.
            bits::get_field(data, self.offset, self.bits) as i64
        }
    }

    /// Runs a SET or INCRBY on `data` (which holds the field): its reply (nil when it
    /// FAILed) and whether it changed the field.
    fn write(&self, data: &mut [u8]) -> (Option<i64>, bool) {
        let (offset, width, ow) = (self.offset, self.bits, self.overflow);
        if self.signed {
            let old = bits::get_signed_field(data, offset, width);
            let (new, reply) = match self.op {
                FieldOp::Set(v) => match bits::signed_overflow(v, 0, width, ow) {
                    Ok(()) => (Some(v), old),
                    Err(limit) => (limit, old),
                },
                FieldOp::Incrby(incr) => match bits::signed_overflow(old, incr, width, ow) {
                    Ok(()) => (Some(old.wrapping_add(incr)), old.wrapping_add(incr)),
                    Err(limit) => (limit, limit.unwrap_or(0)),
                },
                FieldOp::Get => return (Some(old), false),
            };
            match new {
                Some(new) => {
                    bits::set_field(data, offset, width, new as u64);
                    (Some(reply), new != old)
                }
                None => (None, false),
            }
        } else {
            let old = bits::get_field(data, offset, width);
            let (new, reply) = match self.op {
                // C assigns the signed value to an unsigned one: -1 is 2^64 - 1.
                FieldOp::Set(v) => match bits::unsigned_overflow(v as u64, 0, width, ow) {
                    Ok(()) => (Some(v as u64), old),
                    Err(limit) => (limit, old),
                },
                FieldOp::Incrby(incr) => match bits::unsigned_overflow(old, incr, width, ow) {
                    Ok(()) => (
                        Some(old.wrapping_add(incr as u64)),
                        old.wrapping_add(incr as u64),
                    ),
                    Err(limit) => (limit, limit.unwrap_or(0)),
                },
                FieldOp::Get => return (Some(old as i64), false),
            };
            match new {
                Some(new) => {
                    bits::set_field(data, offset, width, new);
                    (Some(reply as i64), new != old)
                }
                None => (None, false),
            }
        }
    }
}

/// BITFIELD's type argument (`getBitfieldTypeFromArgument`): whether signed, and the width.
fn field_type(a: &[u8]) -> std::result::Result<(bool, u32), CmdError> {
    let err = || raw(TYPE_ERR);
    let signed = match a.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err()),
    };
    let width = parse_i64(until_nul(&a[1..])).ok_or_else(err)?;
    if width < 1 || width > if signed { 64 } else { 63 } {
        return Err(err());
    }
    Ok((signed, width as u32))
}

/// BITFIELD's subcommands, parsed left to right as `bitfieldGeneric` does.
fn parse_fields(args: Args<'_>, max_bytes: u64) -> std::result::Result<Vec<Field>, CmdError> {
    let n = args.len();
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < n {
        let left = n - j - 1;
        let sub = args.get(j);
        let takes_value = if word_is(sub, "get") && left >= 2 {
            false
        } else if (word_is(sub, "set") || word_is(sub, "incrby")) && left >= 3 {
            true
        } else if word_is(sub, "overflow") && left >= 1 {
            let mode = args.get(j + 1);
            overflow = if word_is(mode, "wrap") {
                Overflow::Wrap
            } else if word_is(mode, "sat") {
                Overflow::Sat
            } else if word_is(mode, "fail") {
                Overflow::Fail
            } else {
                return Err(raw(OVERFLOW_ERR));
            };
            j += 2;
            continue;
        } else {
            return Err(raw(SYNTAX));
        };
        let (signed, width) = field_type(args.get(j + 1))?;
        let offset = bit_offset(args.get(j + 2), Some(width), max_bytes)?;
        let op = if !takes_value {
            FieldOp::Get
        } else {
            let v = int_arg(args.get(j + 3))?;
            if word_is(sub, "set") {
                FieldOp::Set(v)
            } else {
                FieldOp::Incrby(v)
            }
        };
        fields.push(Field {
            op,
            signed,
            bits: width,
            offset,
            overflow,
        });
        j += if takes_value { 4 } else { 3 };
    }
    Ok(fields)
}

/// BITFIELD key [GET type offset | [OVERFLOW WRAP|SAT|FAIL] SET type offset value |
/// [OVERFLOW ...] INCRBY type offset increment ...], and BITFIELD_RO (GETs only).
fn bitfield(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let fields = parse_fields(args, max_bytes(view))?;
    let key = args.get(1);
    let name = if cmd == Cmd::BitfieldRo {
        "BITFIELD_RO"
    } else {
        "BITFIELD"
    };
    // The last bit a SET or INCRBY reaches.
    let highest = fields
        .iter()
        .filter(|f| !matches!(f.op, FieldOp::Get))
        .map(|f| f.offset + u64::from(f.bits) - 1)
        .max();
    let Some(highest) = highest else {
        // GETs only: a read.
        let e = read(view, key, name)?;
        let data = e.as_ref().map_or(&[][..], |e| &e.data[..]);
        reply.array(fields.len());
        for f in &fields {
            reply.int(f.get(data));
        }
        return Ok(());
    };
    if cmd == Cmd::BitfieldRo {
        return Err(raw(RO_ERR));
    }
    let current = load(view, key, name)?;
    let (old, expiry) = match &current {
        Some(e) => (&e.data[..], e.expiry),
        None => (&[][..], None),
    };
    let len = old.len().max((highest >> 3) as usize + 1);
    if len > old.len() && len > view.max_value_len() {
        return Err(RedisError::ValueTooLarge.into());
    }
    // One allocation: the old bytes and the zeros the writes reach.
    let mut data = Vec::with_capacity(len);
    data.extend_from_slice(old);
    data.resize(len, 0);
    // Created or grown counts as a change even when every write FAILs, as in Redis.
    let mut changed = current.is_none() || len != old.len();
    let mut replies = Vec::with_capacity(fields.len());
    for f in &fields {
        match f.op {
            FieldOp::Get => replies.push(Some(f.get(&data))),
            _ => {
                let (r, c) = f.write(&mut data);
                replies.push(r);
                changed |= c;
            }
        }
    }
    if changed {
        view.store(key, Some(EntryRef::string(&data, expiry)))?;
    }
    // The reply only once the store succeeded.
    reply.array(replies.len());
    for r in replies {
        match r {
            Some(v) => reply.int(v),
            None => reply.null(),
        }
    }
    Ok(())
}
