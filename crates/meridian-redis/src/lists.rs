//! Redis list-command semantics over a [`View`]: the one copy of what LPUSH, RPUSH, LPUSHX,
//! RPUSHX, LINSERT, LPOP, RPOP, LLEN, LRANGE, LINDEX, LSET, LREM, LTRIM, LPOS, LMOVE,
//! RPOPLPUSH, LMPOP and the blocking BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP mean, reply for
//! reply and error for error Redis 7.0's (`t_list.c`).
//!
//! **Representation.** In memory a list is a [`Quicklist`]: a deque of chunks of a few KiB,
//! each holding elements in [`encoding`]'s element format with its element count, as Redis's
//! quicklist holds listpacks. Stored (DUMP, a MULTI overlay, a cluster's one-key view, SORT),
//! it is one envelope of kind [`Kind::List`] whose data is [`encoding`]'s
//! `[tag][count u32 LE][element]...`: the chunks' bytes concatenated behind a header. Every
//! command reaches its list through [`collection::read`] / [`collection::update`]
//! ([`collection`]): a view that keeps objects (the standalone keyspace) hands over the live
//! [`Quicklist`], changed in place; any other view holds bytes, which are decoded into one
//! (O(n), checking every element) and encoded back after a write.
//!
//! **Cost** on a view that keeps objects (n elements; c ≈ 800 small elements per chunk):
//!
//! - LLEN: O(1);
//! - LPUSH/RPUSH/LPUSHX/RPUSHX: O(1) amortized per element (a head push shifts the bytes of
//!   the first chunk only); LPOP/RPOP (with a count, and LMPOP, BLPOP, ...): O(1) per popped
//!   element; LMOVE/RPOPLPUSH: O(1);
//! - LINDEX, LSET: O(n / c + c), walking the chunk counts from the nearer end; LRANGE: the
//!   same to reach the range, then O(range);
//! - LTRIM: O(removed / c + c); LINSERT, LREM, LPOS: O(n), as Redis's.
//!
//! A write command whose outcome depends on the list (LSET's index, LINSERT's pivot, LREM's
//! matches, a pop of count 0, LMOVE's source) looks first, without counting a read, so that
//! a write that changes nothing records no write. On a view that holds bytes every command
//! costs O(b) (b bytes) besides: the decode, and for a write the encode.
//!
//! A list holds at most `u32::MAX` elements (its stored count), and on a view that holds bytes
//! its encoding must fit the view's [`View::max_value_len`] (Redis's `proto-max-bulk-len`);
//! beyond either, a write is refused with `ERR list exceeds maximum allowed size
//! (proto-max-bulk-len)` and nothing changes.
//!
//! **Redis's rules kept**: a list command on a key of another type answers `-WRONGTYPE`; an
//! empty list does not exist (popping, trimming or removing the last element deletes the
//! key); a TTL belongs to the whole key and a write keeps it; checks run in Redis's order
//! (LRANGE's and LTRIM's indexes before the key, LINDEX's and LSET's after it, LPOS's options
//! before the key, LMPOP's numkeys, direction and COUNT before the keys, a blocking command's
//! timeout where `t_list.c` reads it).
//!
//! **Blocking commands**: the server does the waiting. [`exec_on_view`] validates a blocking
//! command's arguments, serves it when a source key holds data (BLPOP/BRPOP `[key, element]`,
//! BLMOVE/BRPOPLPUSH the element, BLMPOP `[key, [elements]]`), and when every source key is
//! absent answers what Redis answers on a timeout (a null array for BLPOP/BRPOP/BLMPOP, a null
//! bulk for BLMOVE/BRPOPLPUSH) — which is also what Redis answers inside MULTI.
//! [`blocking_source_keys`] tells the server which keys to wait on.
//!
//! **Where it departs**: LPOS with `RANK -9223372036854775808` is refused with Redis 7.2's
//! `value is out of range, value must between -9223372036854775807 and 9223372036854775807`
//! (Redis 7.0 negates it, which overflows). A list is bounded by the limits above, where
//! Redis's quicklist is bounded by memory only. OBJECT ENCODING is not this module's.

pub use meridian_core::list_data as encoding;

pub mod quicklist;

use crate::args::Args;
use crate::collection;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::value::{parse_i64, parse_timeout};
use crate::view::{Entry, Kind, View};
use bytes::Bytes;
use encoding::{Elem, Raw};
use quicklist::MAX_LEN;
pub use quicklist::Quicklist;

/// [`encoding::start`], refusing a list past `max` bytes or `u32::MAX` elements with
/// Redis's too-large error.
pub fn start_list(count: usize, body_len: usize, max: usize) -> Result<Vec<u8>> {
    encoding::start(count, body_len, max).map_err(|_| RedisError::CollectionTooLarge("list"))
}

/// Which end of a list: LEFT (the head) or RIGHT (the tail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The head (LPUSH, LPOP, LEFT).
    Left,
    /// The tail (RPUSH, RPOP, RIGHT).
    Right,
}

/// A list as stored: its bytes (checked when walked) and its key's expiry. What SORT reads
/// from a view's bytes; commands work on a [`Quicklist`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct List {
    /// The encoded list ([`encoding`]).
    pub data: Bytes,
    /// The key's absolute expiry (µs since the epoch), if it has one.
    pub expiry: Option<u64>,
}

impl List {
    /// The list's header, checked.
    pub fn raw(&self) -> Result<Raw<'_>> {
        Ok(Raw::parse(&self.data)?)
    }
}

/// The list an entry holds: WRONGTYPE for another type.
pub fn decode(e: Entry) -> Result<List> {
    if e.kind != Kind::List {
        return Err(RedisError::WrongType);
    }
    Ok(List {
        data: e.data,
        expiry: e.expiry,
    })
}

fn corrupt(why: &'static str) -> RedisError {
    RedisError::Corrupt(why)
}

/// [`collection::peek`] of the list at `key`.
fn peek<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    f: impl FnOnce(&Quicklist) -> R,
) -> Result<Option<R>> {
    collection::peek::<Quicklist, V, R>(v, key, f)
}

/// The length of the list at `key`, not counted as a read, reading only the header of
/// stored bytes.
fn peek_len<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<usize>> {
    collection::len::<Quicklist, V>(v, key, false)
}

/// Refuses a list of `len` elements growing by `more` past [`MAX_LEN`].
fn check_growth(len: usize, more: usize) -> Result<()> {
    if len.saturating_add(more) > MAX_LEN {
        return Err(RedisError::CollectionTooLarge("list"));
    }
    Ok(())
}

/// Redis's index normalization of an inclusive range over `len` elements: `None` when it is
/// empty.
fn range_of(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    // len <= u32::MAX, so neither sum overflows.
    let len = len as i64;
    let start = if start < 0 { len + start } else { start }.max(0);
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}

/// The position of Redis index `index` (negative from the tail) among `len` elements.
fn index_of(len: usize, index: i64) -> Option<usize> {
    // len <= u32::MAX, so the sum does not overflow.
    let len = len as i64;
    let i = if index < 0 { len + index } else { index };
    (0..len).contains(&i).then_some(i as usize)
}

// ----- the commands, typed ---------------------------------------------------------------

/// LPUSH/RPUSH (`only_existing`: LPUSHX/RPUSHX): pushes `elems` at `end` in turn (so LPUSH
/// leaves the last given at the head), keeping the key's TTL; returns the new length (0 when
/// `only_existing` and the key is absent).
pub fn push<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    elems: &[&[u8]],
    end: End,
    only_existing: bool,
) -> Result<u64> {
    let len = collection::update::<Quicklist, V, _>(v, key, !only_existing, |l| {
        check_growth(l.len(), elems.len())?;
        for e in elems {
            l.push(end, e);
        }
        Ok(l.len())
    })?;
    Ok(len.unwrap_or(0) as u64)
}

/// LPOP/RPOP with a count: up to `n` elements from `end`, in pop order (deleting the key
/// when none is left); `None` when the key is absent. A count of 0 pops nothing (and writes
/// nothing).
pub fn pop<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    end: End,
    n: usize,
) -> Result<Option<Vec<Bytes>>> {
    if n == 0 {
        return peek(v, key, |_| Vec::new());
    }
    collection::update::<Quicklist, V, _>(v, key, false, |l| {
        let n = n.min(l.len());
        let mut popped = Vec::with_capacity(n);
        while popped.len() < n {
            match l.pop(end) {
                Some(e) => popped.push(e),
                None => break,
            }
        }
        Ok(popped)
    })
}

/// LMPOP (and BLPOP, BRPOP, BLMPOP when data is there): pops up to `n` elements from `end`
/// of the first of `keys` that exists; its index and the elements, or `None` when none
/// exists. A key of another type before it answers WRONGTYPE.
pub fn mpop<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
    end: End,
    n: usize,
) -> Result<Option<(usize, Vec<Bytes>)>> {
    for (i, key) in keys.into_iter().enumerate() {
        if let Some(popped) = pop(v, key, end, n)? {
            return Ok(Some((i, popped)));
        }
    }
    Ok(None)
}

/// LLEN: the length (0 for a missing key).
pub fn llen<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    let len = collection::len::<Quicklist, V>(v, key, true)?;
    Ok(len.unwrap_or(0) as u64)
}

/// LRANGE: elements `start..=stop` (Redis's indexes); empty for a missing key.
pub fn lrange<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    start: i64,
    stop: i64,
) -> Result<Vec<Bytes>> {
    let copy = |elems: Vec<&[u8]>| elems.into_iter().map(Bytes::copy_from_slice).collect();
    let got = read_walk(
        v,
        key,
        |l| Ok(copy(range_elems(l, start, stop)?)),
        |raw| Ok(copy(stored_range(raw, start, stop)?)),
    )?;
    Ok(got.unwrap_or_default())
}

/// A read that needs a few elements (LRANGE, LINDEX): `held` over the object a view keeps,
/// else `stored` over the stored bytes, walking them only as far as it needs (a list is not
/// decoded for it). Counts a hit or a miss.
fn read_walk<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    held: impl FnOnce(&Quicklist) -> Result<R>,
    stored: impl FnOnce(Raw<'_>) -> Result<R>,
) -> Result<Option<R>> {
    match collection::held::<Quicklist, V>(v, key) {
        Ok(Some((l, _))) => {
            let r = held(l);
            v.count_read(key, true);
            return r.map(Some);
        }
        Err(e) => {
            v.count_read(key, true);
            return Err(e);
        }
        Ok(None) => {}
    }
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    match e {
        None => Ok(None),
        Some(e) if e.kind != Kind::List => Err(RedisError::WrongType),
        Some(e) => stored(Raw::parse(&e.data)?).map(Some),
    }
}

/// [`range_elems`] of stored bytes: walks from the nearer end to the range.
fn stored_range(raw: Raw<'_>, start: i64, stop: i64) -> Result<Vec<&[u8]>> {
    let Some((first, last)) = range_of(raw.len(), start, stop) else {
        return Ok(Vec::new());
    };
    let body = raw.body();
    let slice = |e: Elem| body.get(e.start..e.end).unwrap_or_default();
    let n = last - first + 1;
    let elems: Vec<&[u8]> = if first <= raw.len() - 1 - last {
        let mut it = raw.elems().skip(first).take(n);
        it.try_fold(Vec::with_capacity(n), |mut out, e| {
            out.push(slice(e?));
            Ok::<_, RedisError>(out)
        })?
    } else {
        let mut it = raw.elems().rev().skip(raw.len() - 1 - last).take(n);
        let mut out = it.try_fold(Vec::with_capacity(n), |mut out, e| {
            out.push(slice(e?));
            Ok::<_, RedisError>(out)
        })?;
        out.reverse();
        out
    };
    if elems.len() != n {
        return Err(corrupt("list: fewer elements than its count"));
    }
    Ok(elems)
}

/// The elements of `l` in Redis's range `start..=stop`.
fn range_elems(l: &Quicklist, start: i64, stop: i64) -> Result<Vec<&[u8]>> {
    let Some((first, last)) = range_of(l.len(), start, stop) else {
        return Ok(Vec::new());
    };
    let n = last - first + 1;
    let elems: Vec<&[u8]> = l.range(first, n).collect();
    if elems.len() != n {
        return Err(corrupt("list: fewer elements than its count"));
    }
    Ok(elems)
}

/// LSET: replaces the element at `index` with `elem`; `None` when the key is absent,
/// `Some(false)` (nothing changed) when the index is out of range.
pub fn lset<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    index: i64,
    elem: &[u8],
) -> Result<Option<bool>> {
    let Some(len) = peek_len(v, key)? else {
        return Ok(None);
    };
    set_at(v, key, len, index, elem).map(Some)
}

/// LSET's write once the key is known to hold `len` elements.
fn set_at<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    len: usize,
    index: i64,
    elem: &[u8],
) -> Result<bool> {
    let Some(i) = index_of(len, index) else {
        return Ok(false);
    };
    let set = collection::update::<Quicklist, V, _>(v, key, false, |l| Ok(l.set(i, elem)))?;
    Ok(set == Some(true))
}

/// LINSERT: inserts `elem` before (or after) the first element equal to `pivot`; the new
/// length, -1 when there is no such element, 0 when the key is absent.
pub fn linsert<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    before: bool,
    pivot: &[u8],
    elem: &[u8],
) -> Result<i64> {
    let Some(found) = peek(v, key, |l| l.position(pivot))? else {
        return Ok(0);
    };
    let Some(p) = found else {
        return Ok(-1);
    };
    let at = if before { p } else { p + 1 };
    let len = collection::update::<Quicklist, V, _>(v, key, false, |l| {
        check_growth(l.len(), 1)?;
        if !l.insert(at, elem) {
            return Err(corrupt("list: fewer elements than its count"));
        }
        Ok(l.len())
    })?;
    Ok(len.unwrap_or(0) as i64)
}

/// The indexes (ascending) LREM removes: the first `count` elements equal to `elem` (from
/// the tail when `count` is negative, all of them when 0).
fn rem_indexes(l: &Quicklist, count: i64, elem: &[u8]) -> Vec<usize> {
    let limit = match count {
        0 => usize::MAX,
        c => usize::try_from(c.unsigned_abs()).unwrap_or(usize::MAX),
    };
    let hit = |(_, e): &(usize, &[u8])| *e == elem;
    if count >= 0 {
        l.iter()
            .enumerate()
            .filter(hit)
            .map(|(i, _)| i)
            .take(limit)
            .collect()
    } else {
        let last = l.len().saturating_sub(1);
        let mut found: Vec<usize> = l
            .iter()
            .rev()
            .enumerate()
            .filter(hit)
            .map(|(j, _)| last - j)
            .take(limit)
            .collect();
        found.reverse();
        found
    }
}

/// LREM: removes the first `count` elements equal to `elem` (from the tail when `count` is
/// negative, all of them when 0); returns how many were removed.
pub fn lrem<V: View + ?Sized>(v: &mut V, key: &[u8], count: i64, elem: &[u8]) -> Result<u64> {
    let Some(gone) = peek(v, key, |l| rem_indexes(l, count, elem))? else {
        return Ok(0);
    };
    if gone.is_empty() {
        return Ok(0);
    }
    collection::update::<Quicklist, V, _>(v, key, false, |l| {
        l.remove_indexes(&gone);
        Ok(())
    })?;
    Ok(gone.len() as u64)
}

/// LTRIM: keeps elements `start..=stop` (Redis's indexes), deleting the key when that is
/// none of them.
pub fn ltrim<V: View + ?Sized>(v: &mut V, key: &[u8], start: i64, stop: i64) -> Result<()> {
    collection::update::<Quicklist, V, _>(v, key, false, |l| {
        match range_of(l.len(), start, stop) {
            None => *l = Quicklist::default(),
            Some((first, last)) => l.trim(first, last),
        }
        Ok(())
    })?;
    Ok(())
}

/// LPOS's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LposOptions {
    /// RANK: the first match reported (negative: counted from the tail); never 0 or
    /// `i64::MIN`.
    pub rank: i64,
    /// COUNT: `None` when not given (one index or null), `Some(0)` for every match.
    pub count: Option<u64>,
    /// MAXLEN: how many elements to compare at most (0: all).
    pub maxlen: u64,
}

/// LPOS: the indexes of the elements equal to `elem`, as the options select; `None` when
/// the key is absent.
pub fn lpos<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    elem: &[u8],
    o: LposOptions,
) -> Result<Option<Vec<u64>>> {
    collection::read::<Quicklist, V, _>(v, key, |l| {
        let len = l.len() as u64;
        let rank = o.rank.unsigned_abs();
        let want = match o.count {
            None => 1,
            Some(0) => u64::MAX,
            Some(c) => c,
        };
        let limit = match o.maxlen {
            0 => usize::MAX,
            m => usize::try_from(m).unwrap_or(usize::MAX),
        };
        let scan: Box<dyn Iterator<Item = &[u8]>> = if o.rank < 0 {
            Box::new(l.iter().rev())
        } else {
            Box::new(l.iter())
        };
        let mut matches = 0u64;
        let mut found = Vec::new();
        for (index, e) in scan.take(limit).enumerate() {
            if e != elem {
                continue;
            }
            matches += 1;
            if matches < rank {
                continue;
            }
            let index = index as u64;
            found.push(if o.rank < 0 { len - index - 1 } else { index });
            if found.len() as u64 >= want {
                break;
            }
        }
        Ok(found)
    })
}

/// LMOVE (RPOPLPUSH): pops an element from `from` of `src` and pushes it at `to` of `dst`
/// (the same key rotates it, in one change); the element, or `None` when `src` is absent. A
/// `dst` of another type, or one that would grow too large, changes nothing: the element is
/// read from `src`, pushed onto `dst`, and only then popped from `src`.
pub fn lmove<V: View + ?Sized>(
    v: &mut V,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Bytes>> {
    if src == dst {
        let moved = collection::update::<Quicklist, V, _>(v, src, false, |l| {
            let e = l
                .pop(from)
                .ok_or(corrupt("list: fewer elements than its count"))?;
            l.push(to, &e);
            Ok(e)
        })?;
        return Ok(moved);
    }
    let Some(elem) = peek(v, src, |l| l.peek(from).map(Bytes::copy_from_slice))? else {
        return Ok(None);
    };
    let elem = elem.ok_or(corrupt("list: fewer elements than its count"))?;
    collection::update::<Quicklist, V, _>(v, dst, true, |l| {
        check_growth(l.len(), 1)?;
        l.push(to, &elem);
        Ok(())
    })?;
    collection::update::<Quicklist, V, _>(v, src, false, |l| Ok(l.pop(from)))?;
    Ok(Some(elem))
}

// ----- the commands, from their arguments ------------------------------------------------

/// Whether [`exec_on_view`] executes `cmd`: every list command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Lists
}

/// The argument positions of the keys a blocking list command pops from, which the server
/// waits on when [`exec_on_view`] found them all absent: every key of BLPOP/BRPOP (all
/// arguments but the name and the timeout), the source of BLMOVE/BRPOPLPUSH, the `numkeys`
/// keys of BLMPOP (cut to the arguments there are; none when `numkeys` is not a positive
/// integer). Empty for any other command.
pub fn blocking_source_keys(cmd: Cmd, args: Args<'_>) -> Vec<usize> {
    let n = args.len();
    match cmd {
        Cmd::Blpop | Cmd::Brpop => (1..n.saturating_sub(1)).collect(),
        Cmd::Blmove | Cmd::Brpoplpush if n > 1 => vec![1],
        Cmd::Blmpop if n > 2 => match parse_i64(args.get(2)).filter(|&k| k >= 1) {
            Some(k) => (3..n.min(3usize.saturating_add(k as usize))).collect(),
            None => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Argument `i`, or the command's arity error (never a panic, whoever checked the arity).
fn arg<'a>(args: Args<'a>, cmd: Cmd, i: usize) -> std::result::Result<&'a [u8], CmdError> {
    if i < args.len() {
        Ok(args.get(i))
    } else {
        Err(arity_error(cmd.spec().name))
    }
}

/// LEFT or RIGHT (any case), else a syntax error.
fn parse_end(a: &[u8]) -> std::result::Result<End, CmdError> {
    if a.eq_ignore_ascii_case(b"LEFT") {
        Ok(End::Left)
    } else if a.eq_ignore_ascii_case(b"RIGHT") {
        Ok(End::Right)
    } else {
        Err(raw(SYNTAX))
    }
}

/// A non-negative count in Redis's `getPositiveLongFromObjectOrReply` (anything else,
/// an unparsable one included, answers `msg`).
fn count_arg(a: &[u8], min: i64, msg: &'static str) -> std::result::Result<u64, CmdError> {
    parse_i64(a)
        .filter(|&c| c >= min)
        .map(|c| c as u64)
        .ok_or_else(|| raw(msg))
}

/// `usize` of a count already bounded by `u64` (saturating on narrow targets).
fn usize_of(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// LMPOP/BLMPOP's `numkeys key... LEFT|RIGHT [COUNT count]` from `numkeys_at`, checked in
/// Redis's order: the key positions, the end and the count (1 by default).
fn parse_mpop(
    cmd: Cmd,
    args: Args<'_>,
    numkeys_at: usize,
) -> std::result::Result<(std::ops::Range<usize>, End, usize), CmdError> {
    let numkeys = count_arg(
        arg(args, cmd, numkeys_at)?,
        1,
        "ERR numkeys should be greater than 0",
    )?;
    let where_at = (numkeys_at as u64)
        .checked_add(numkeys)
        .and_then(|w| w.checked_add(1))
        .filter(|&w| w < args.len() as u64)
        .ok_or_else(|| raw(SYNTAX))? as usize;
    let end = parse_end(args.get(where_at))?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        let more = j + 1 < args.len();
        if count.is_none() && more && args.get(j).eq_ignore_ascii_case(b"COUNT") {
            j += 1;
            count = Some(count_arg(
                args.get(j),
                1,
                "ERR count should be greater than 0",
            )?);
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    Ok((numkeys_at + 1..where_at, end, usize_of(count.unwrap_or(1))))
}

/// LPOS's options from argument 3 on, checked as Redis parses them (each error at once).
fn parse_lpos(args: Args<'_>) -> std::result::Result<LposOptions, CmdError> {
    let mut o = LposOptions {
        rank: 1,
        count: None,
        maxlen: 0,
    };
    let mut j = 3;
    while j < args.len() {
        let opt = args.get(j);
        let more = j + 1 < args.len();
        if more && opt.eq_ignore_ascii_case(b"RANK") {
            j += 1;
            o.rank = int_arg(args.get(j))?;
            if o.rank == 0 {
                return Err(raw(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                ));
            }
            if o.rank == i64::MIN {
                return Err(raw(
                    "ERR value is out of range, value must between -9223372036854775807 and \
                     9223372036854775807",
                ));
            }
        } else if more && opt.eq_ignore_ascii_case(b"COUNT") {
            j += 1;
            o.count = Some(count_arg(args.get(j), 0, "ERR COUNT can't be negative")?);
        } else if more && opt.eq_ignore_ascii_case(b"MAXLEN") {
            j += 1;
            o.maxlen = count_arg(args.get(j), 0, "ERR MAXLEN can't be negative")?;
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

fn bulks(reply: &mut Reply, elems: &[impl AsRef<[u8]>]) {
    reply.array(elems.len());
    for e in elems {
        reply.bulk(e.as_ref());
    }
}

/// Executes a list command (one [`handles`] accepts) against `view`, writing its reply in
/// Redis's type (RESP2 or RESP3, as `reply` is set); an error is returned for the caller to
/// write (as its own reply, or as an element of EXEC's array), and then nothing of a reply
/// was written. Arity is checked again here (Redis's errors), so a caller that did not check
/// gets an error, never a panic. A blocking command never waits here: see the module docs.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(cmd.spec().name));
    }
    let mark = reply.out.len();
    let r = exec(cmd, args, view, reply);
    if r.is_err() {
        reply.out.truncate(mark);
    }
    r
}

fn exec(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let key = arg(args, cmd, 1)?;
    match cmd {
        Cmd::Lpush | Cmd::Rpush | Cmd::Lpushx | Cmd::Rpushx => {
            let elems: Vec<&[u8]> = args.iter_from(2).collect();
            let end = if matches!(cmd, Cmd::Lpush | Cmd::Lpushx) {
                End::Left
            } else {
                End::Right
            };
            let only_existing = matches!(cmd, Cmd::Lpushx | Cmd::Rpushx);
            reply.int(push(view, key, &elems, end, only_existing)? as i64);
        }
        Cmd::Lpop | Cmd::Rpop => {
            if args.len() > 3 {
                return Err(arity_error(cmd.spec().name));
            }
            let end = if cmd == Cmd::Lpop {
                End::Left
            } else {
                End::Right
            };
            let count = match args.len() {
                3 => Some(count_arg(
                    args.get(2),
                    0,
                    "ERR value is out of range, must be positive",
                )?),
                _ => None,
            };
            match (pop(view, key, end, count.map_or(1, usize_of))?, count) {
                (None, None) => reply.null(),
                (None, Some(_)) => reply.null_array(),
                (Some(popped), None) => {
                    let e = popped
                        .first()
                        .ok_or(corrupt("list: fewer elements than its count"))?;
                    reply.bulk(e);
                }
                (Some(popped), Some(_)) => bulks(reply, &popped),
            }
        }
        Cmd::Llen => reply.int(llen(view, key)? as i64),
        Cmd::Lrange => {
            let start = int_arg(arg(args, cmd, 2)?)?;
            let stop = int_arg(arg(args, cmd, 3)?)?;
            // Replied from the list as it is, no copy of an element.
            let written = collection::read::<Quicklist, _, _>(view, key, |l| {
                bulks(reply, &range_elems(l, start, stop)?);
                Ok(())
            })?;
            if written.is_none() {
                reply.array(0);
            }
        }
        Cmd::Lindex => {
            // The key before the index, as Redis does.
            let index = arg(args, cmd, 2)?;
            let index = || parse_i64(index).ok_or(RedisError::NotAnInteger);
            let found = read_walk(
                view,
                key,
                |l| {
                    Ok(index_of(l.len(), index()?)
                        .and_then(|i| l.get(i))
                        .map(Bytes::copy_from_slice))
                },
                |raw| {
                    Ok(match index_of(raw.len(), index()?) {
                        None => None,
                        Some(i) => stored_range(raw, i as i64, i as i64)?
                            .pop()
                            .map(Bytes::copy_from_slice),
                    })
                },
            )?;
            reply.opt_bulk(found.flatten().as_deref());
        }
        Cmd::Lset => {
            // The key, then the index, then its range, as Redis checks them.
            let Some(len) = peek_len(view, key)? else {
                return Err(raw("ERR no such key"));
            };
            let index = int_arg(arg(args, cmd, 2)?)?;
            if !set_at(view, key, len, index, arg(args, cmd, 3)?)? {
                return Err(raw("ERR index out of range"));
            }
            reply.ok();
        }
        Cmd::Lrem => {
            let count = int_arg(arg(args, cmd, 2)?)?;
            reply.int(lrem(view, key, count, arg(args, cmd, 3)?)? as i64);
        }
        Cmd::Ltrim => {
            let start = int_arg(arg(args, cmd, 2)?)?;
            let stop = int_arg(arg(args, cmd, 3)?)?;
            ltrim(view, key, start, stop)?;
            reply.ok();
        }
        Cmd::Linsert => {
            let place = arg(args, cmd, 2)?;
            let before = if place.eq_ignore_ascii_case(b"BEFORE") {
                true
            } else if place.eq_ignore_ascii_case(b"AFTER") {
                false
            } else {
                return Err(raw(SYNTAX));
            };
            let (pivot, elem) = (arg(args, cmd, 3)?, arg(args, cmd, 4)?);
            reply.int(linsert(view, key, before, pivot, elem)?);
        }
        Cmd::Lpos => {
            let elem = arg(args, cmd, 2)?;
            let o = parse_lpos(args)?;
            match (lpos(view, key, elem, o)?, o.count) {
                (None, None) => reply.null(),
                (None, Some(_)) => reply.array(0),
                (Some(found), None) => match found.first() {
                    Some(&i) => reply.int(i as i64),
                    None => reply.null(),
                },
                (Some(found), Some(_)) => {
                    reply.array(found.len());
                    for i in found {
                        reply.int(i as i64);
                    }
                }
            }
        }
        Cmd::Lmove | Cmd::Blmove => {
            let from = parse_end(arg(args, cmd, 3)?)?;
            let to = parse_end(arg(args, cmd, 4)?)?;
            if cmd == Cmd::Blmove {
                parse_timeout(arg(args, cmd, 5)?)?;
            }
            let dst = arg(args, cmd, 2)?;
            reply.opt_bulk(lmove(view, key, dst, from, to)?.as_deref());
        }
        Cmd::Rpoplpush | Cmd::Brpoplpush => {
            if cmd == Cmd::Brpoplpush {
                parse_timeout(arg(args, cmd, 3)?)?;
            }
            let dst = arg(args, cmd, 2)?;
            reply.opt_bulk(lmove(view, key, dst, End::Right, End::Left)?.as_deref());
        }
        Cmd::Blpop | Cmd::Brpop => {
            let last = args.len() - 1;
            parse_timeout(args.get(last))?;
            let end = if cmd == Cmd::Blpop {
                End::Left
            } else {
                End::Right
            };
            let keys = (1..last).map(|i| args.get(i));
            match mpop(view, keys, end, 1)? {
                None => reply.null_array(),
                Some((i, popped)) => {
                    let e = popped
                        .first()
                        .ok_or(corrupt("list: fewer elements than its count"))?;
                    reply.array(2);
                    reply.bulk(args.get(1 + i));
                    reply.bulk(e);
                }
            }
        }
        Cmd::Lmpop | Cmd::Blmpop => {
            let numkeys_at = if cmd == Cmd::Lmpop { 1 } else { 2 };
            let (keys, end, count) = parse_mpop(cmd, args, numkeys_at)?;
            if cmd == Cmd::Blmpop {
                parse_timeout(args.get(1))?;
            }
            let first = keys.start;
            match mpop(view, keys.map(|i| args.get(i)), end, count)? {
                None => reply.null_array(),
                Some((i, popped)) => {
                    reply.array(2);
                    reply.bulk(args.get(first + i));
                    bulks(reply, &popped);
                }
            }
        }
        other => {
            return Err(raw(format!(
                "ERR {} is not a list command",
                other.spec().name.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
