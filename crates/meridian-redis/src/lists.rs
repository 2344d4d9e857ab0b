//! Redis list-command semantics over a [`View`]: the one copy of what LPUSH, RPUSH, LPUSHX,
//! RPUSHX, LINSERT, LPOP, RPOP, LLEN, LRANGE, LINDEX, LSET, LREM, LTRIM, LPOS, LMOVE,
//! RPOPLPUSH, LMPOP and the blocking BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP mean, reply for
//! reply and error for error Redis 7.0's (`t_list.c`).
//!
//! A list is **one stored value**: an envelope of kind [`Kind::List`] whose data is
//! [`encoding`]'s `[tag][count u32 LE][element]...`, each element its bytes between two
//! copies of its length (LEB128 in front, reversed LEB128 behind), so either end is reached
//! in O(1) and a walk from either end reads one varint per element. It runs over the same
//! views as the string and hash commands, with the same atomicity (a command's keys, or a
//! whole EXEC, in one view).
//!
//! **Cost** (n elements, b bytes):
//!
//! - LLEN reads the header: O(1);
//! - LINDEX walks from the nearer end: O(min(i, n − i)) varint reads, no element decoded;
//!   LRANGE walks from the nearer end to the range, then replies slices of the stored value
//!   (no copy of an element);
//! - LPUSH/RPUSH build the new value in one allocation: the new elements and one memcpy of the
//!   old elements (O(b) bytes copied, O(pushed) work otherwise); LPOP/RPOP (with a count, and
//!   LMPOP, BLPOP, ...) walk the popped elements and copy the rest once; LMOVE/RPOPLPUSH do
//!   both;
//! - LSET, LINSERT, LTRIM, LREM, LPOS walk what they need and rebuild (when they write) in
//!   one allocation: O(b).
//!
//! So every write copies the list once — a list is bounded, in practice, to what one value
//! may hold: the encoded list must fit the view's [`View::max_value_len`] (Redis's
//! `proto-max-bulk-len`) and hold at most `u32::MAX` elements, else the write is refused with
//! `ERR list exceeds maximum allowed size (proto-max-bulk-len)` and nothing changes.
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
//! (Redis 7.0 negates it, which overflows). A list is bounded by the value limit above, where
//! Redis's quicklist is bounded by memory only. OBJECT ENCODING is not this module's.

pub mod encoding;

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::value::{parse_i64, parse_timeout};
use crate::view::{Entry, EntryRef, Kind, View};
use bytes::Bytes;
use encoding::{Elem, Elems, HEADER, Raw, elem_len, put_elem};

/// Which end of a list: LEFT (the head) or RIGHT (the tail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The head (LPUSH, LPOP, LEFT).
    Left,
    /// The tail (RPUSH, RPOP, RIGHT).
    Right,
}

/// A list as loaded: its stored bytes (checked when walked) and its key's expiry.
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
        Raw::parse(&self.data)
    }

    /// An element's bytes: a slice of the stored value, no copy.
    fn slice(&self, e: Elem) -> Bytes {
        self.data.slice(HEADER + e.start..HEADER + e.end)
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

/// The list at `key` for a write (no hit/miss counted): `None` when the key is absent.
pub fn load<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<List>> {
    v.load(key)?.map(decode).transpose()
}

/// The list at `key` for a read command: counts a hit or a miss (INFO), then checks the type.
fn read<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<List>> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    e.map(decode).transpose()
}

/// Stores an encoded list at `key` with `expiry`, or deletes the key (`None`: no element
/// left).
fn store<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    data: Option<&[u8]>,
    expiry: Option<u64>,
) -> Result<()> {
    v.store(
        key,
        data.map(|data| EntryRef {
            data,
            expiry,
            kind: Kind::List,
        }),
    )
}

fn corrupt(why: &'static str) -> RedisError {
    RedisError::Corrupt(why)
}

/// The next element from `end`; running out before the count is damage.
fn step(it: &mut Elems<'_>, end: End) -> Result<Elem> {
    let e = match end {
        End::Left => it.next(),
        End::Right => it.next_back(),
    };
    e.unwrap_or(Err(corrupt("list: fewer elements than its count")))
}

/// The list `base` (none: empty) with `elems` pushed at `end`, LPUSH's order (each element
/// pushed in turn, so the last given ends up at the head), refused above `max` bytes.
fn pushed(base: Option<Raw<'_>>, elems: &[&[u8]], end: End, max: usize) -> Result<Vec<u8>> {
    let (len, body) = base.map_or((0, &[][..]), |r| (r.len(), r.body()));
    let added = elems
        .iter()
        .fold(0usize, |n, e| n.saturating_add(elem_len(e.len())));
    let mut out = encoding::start(
        len.saturating_add(elems.len()),
        body.len().saturating_add(added),
        max,
    )?;
    match end {
        End::Left => {
            for e in elems.iter().rev() {
                put_elem(&mut out, e);
            }
            out.extend_from_slice(body);
        }
        End::Right => {
            out.extend_from_slice(body);
            for e in elems {
                put_elem(&mut out, e);
            }
        }
    }
    Ok(out)
}

/// Takes up to `n` elements from `end` of `list`: them (in pop order) and what is left
/// (`None`: nothing).
fn take(list: &List, end: End, n: usize) -> Result<(Vec<Bytes>, Option<Vec<u8>>)> {
    let raw = list.raw()?;
    let n = n.min(raw.len());
    let mut it = raw.elems();
    let mut popped = Vec::with_capacity(n);
    for _ in 0..n {
        popped.push(list.slice(step(&mut it, end)?));
    }
    let left = raw.len() - n;
    if left == 0 {
        return Ok((popped, None));
    }
    let rest = &raw.body()[it.front()..it.back()];
    let mut out = encoding::start(left, rest.len(), usize::MAX)?;
    out.extend_from_slice(rest);
    Ok((popped, Some(out)))
}

/// Redis's index normalization of an inclusive range over `len` elements: `None` when it is
/// empty.
fn range_of(len: usize, start: i64, stop: i64) -> Option<(usize, usize)> {
    // len < 2^32, so neither sum overflows.
    let len = len as i64;
    let start = if start < 0 { len + start } else { start }.max(0);
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start as usize, stop.min(len - 1) as usize))
}

/// Elements `first..=last` (`last < len`) of `list`, walking from the nearer end.
fn slice_range(list: &List, first: usize, last: usize) -> Result<Vec<Bytes>> {
    let raw = list.raw()?;
    let mut it = raw.elems();
    let n = last - first + 1;
    let after = raw.len() - 1 - last;
    let mut out = Vec::with_capacity(n);
    if first <= after {
        for _ in 0..first {
            step(&mut it, End::Left)?;
        }
        for _ in 0..n {
            out.push(list.slice(step(&mut it, End::Left)?));
        }
    } else {
        for _ in 0..after {
            step(&mut it, End::Right)?;
        }
        for _ in 0..n {
            out.push(list.slice(step(&mut it, End::Right)?));
        }
        out.reverse();
    }
    Ok(out)
}

/// The element at Redis index `index` (negative from the tail), walking from the nearer end.
fn nth(raw: Raw<'_>, index: i64) -> Result<Option<Elem>> {
    let len = raw.len() as i64;
    let i = if index < 0 { len + index } else { index };
    if !(0..len).contains(&i) {
        return Ok(None);
    }
    let i = i as usize;
    let mut it = raw.elems();
    let (end, skip) = if i < raw.len() / 2 {
        (End::Left, i)
    } else {
        (End::Right, raw.len() - 1 - i)
    };
    for _ in 0..skip {
        step(&mut it, end)?;
    }
    step(&mut it, end).map(Some)
}

// ----- the commands, typed ---------------------------------------------------------------

/// LPUSH/RPUSH (`only_existing`: LPUSHX/RPUSHX): pushes `elems` at `end` in turn, keeping the
/// key's TTL; returns the new length (0 when `only_existing` and the key is absent).
pub fn push<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    elems: &[&[u8]],
    end: End,
    only_existing: bool,
) -> Result<u64> {
    let old = load(v, key)?;
    if old.is_none() && only_existing {
        return Ok(0);
    }
    let base = old.as_ref().map(List::raw).transpose()?;
    let len = base.map_or(0, |r| r.len()) + elems.len();
    let data = pushed(base, elems, end, v.max_value_len())?;
    store(v, key, Some(&data), old.and_then(|l| l.expiry))?;
    Ok(len as u64)
}

/// LPOP/RPOP with a count: up to `n` elements from `end`, in pop order (deleting the key
/// when none is left); `None` when the key is absent. A count of 0 pops nothing.
pub fn pop<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    end: End,
    n: usize,
) -> Result<Option<Vec<Bytes>>> {
    let Some(list) = load(v, key)? else {
        return Ok(None);
    };
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    let (popped, rest) = take(&list, end, n)?;
    store(v, key, rest.as_deref(), list.expiry)?;
    Ok(Some(popped))
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

/// LLEN: the length, read from the header.
pub fn llen<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    match read(v, key)? {
        None => Ok(0),
        Some(l) => Ok(l.raw()?.len() as u64),
    }
}

/// LRANGE: elements `start..=stop` (Redis's indexes); empty for a missing key.
pub fn lrange<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    start: i64,
    stop: i64,
) -> Result<Vec<Bytes>> {
    let Some(list) = read(v, key)? else {
        return Ok(Vec::new());
    };
    match range_of(list.raw()?.len(), start, stop) {
        None => Ok(Vec::new()),
        Some((first, last)) => slice_range(&list, first, last),
    }
}

/// LINDEX of a loaded list: the element at `index`, if there is one.
pub fn lindex(list: &List, index: i64) -> Result<Option<Bytes>> {
    Ok(nth(list.raw()?, index)?.map(|e| list.slice(e)))
}

/// LSET of a loaded list at `key`: replaces the element at `index`; `false` when the index is
/// out of range (nothing changed).
pub fn lset<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    list: &List,
    index: i64,
    elem: &[u8],
) -> Result<bool> {
    let raw = list.raw()?;
    let Some(at) = nth(raw, index)? else {
        return Ok(false);
    };
    let body = raw.body();
    let kept = body.len() - (at.enc_end - at.enc_start);
    let mut out = encoding::start(
        raw.len(),
        kept.saturating_add(elem_len(elem.len())),
        v.max_value_len(),
    )?;
    out.extend_from_slice(&body[..at.enc_start]);
    put_elem(&mut out, elem);
    out.extend_from_slice(&body[at.enc_end..]);
    store(v, key, Some(&out), list.expiry)?;
    Ok(true)
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
    let Some(list) = load(v, key)? else {
        return Ok(0);
    };
    let raw = list.raw()?;
    let body = raw.body();
    let mut found = None;
    for e in raw.elems() {
        let e = e?;
        if &body[e.start..e.end] == pivot {
            found = Some(e);
            break;
        }
    }
    let Some(e) = found else {
        return Ok(-1);
    };
    let at = if before { e.enc_start } else { e.enc_end };
    let len = raw.len() + 1;
    let mut out = encoding::start(
        len,
        body.len().saturating_add(elem_len(elem.len())),
        v.max_value_len(),
    )?;
    out.extend_from_slice(&body[..at]);
    put_elem(&mut out, elem);
    out.extend_from_slice(&body[at..]);
    store(v, key, Some(&out), list.expiry)?;
    Ok(len as i64)
}

/// LREM: removes the first `count` elements equal to `elem` (from the tail when `count` is
/// negative, all of them when 0); returns how many were removed.
pub fn lrem<V: View + ?Sized>(v: &mut V, key: &[u8], count: i64, elem: &[u8]) -> Result<u64> {
    let Some(list) = load(v, key)? else {
        return Ok(0);
    };
    let raw = list.raw()?;
    let body = raw.body();
    let end = if count < 0 { End::Right } else { End::Left };
    let limit = count.unsigned_abs();
    let mut it = raw.elems();
    let mut gone: Vec<(usize, usize)> = Vec::new();
    while it.left() > 0 && (limit == 0 || (gone.len() as u64) < limit) {
        let e = step(&mut it, end)?;
        if &body[e.start..e.end] == elem {
            gone.push((e.enc_start, e.enc_end));
        }
    }
    if gone.is_empty() {
        return Ok(0);
    }
    let removed = gone.len();
    if removed == raw.len() {
        store(v, key, None, list.expiry)?;
        return Ok(removed as u64);
    }
    if end == End::Right {
        gone.reverse();
    }
    let dropped: usize = gone.iter().map(|(s, e)| e - s).sum();
    let mut out = encoding::start(raw.len() - removed, body.len() - dropped, usize::MAX)?;
    let mut at = 0;
    for (s, e) in gone {
        out.extend_from_slice(&body[at..s]);
        at = e;
    }
    out.extend_from_slice(&body[at..]);
    store(v, key, Some(&out), list.expiry)?;
    Ok(removed as u64)
}

/// LTRIM: keeps elements `start..=stop` (Redis's indexes), deleting the key when that is
/// none of them.
pub fn ltrim<V: View + ?Sized>(v: &mut V, key: &[u8], start: i64, stop: i64) -> Result<()> {
    let Some(list) = load(v, key)? else {
        return Ok(());
    };
    let raw = list.raw()?;
    let Some((first, last)) = range_of(raw.len(), start, stop) else {
        return store(v, key, None, list.expiry);
    };
    let mut it = raw.elems();
    for _ in 0..first {
        step(&mut it, End::Left)?;
    }
    for _ in last + 1..raw.len() {
        step(&mut it, End::Right)?;
    }
    let kept = &raw.body()[it.front()..it.back()];
    let mut out = encoding::start(last - first + 1, kept.len(), usize::MAX)?;
    out.extend_from_slice(kept);
    store(v, key, Some(&out), list.expiry)
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
    let Some(list) = read(v, key)? else {
        return Ok(None);
    };
    let raw = list.raw()?;
    let body = raw.body();
    let len = raw.len() as u64;
    let (end, rank) = if o.rank < 0 {
        (End::Right, o.rank.unsigned_abs())
    } else {
        (End::Left, o.rank as u64)
    };
    let want = match o.count {
        None => 1,
        Some(0) => u64::MAX,
        Some(c) => c,
    };
    let mut it = raw.elems();
    let (mut index, mut matches) = (0u64, 0u64);
    let mut found = Vec::new();
    while it.left() > 0 && (o.maxlen == 0 || index < o.maxlen) {
        let e = step(&mut it, end)?;
        if &body[e.start..e.end] == elem {
            matches += 1;
            if matches >= rank {
                found.push(if end == End::Left {
                    index
                } else {
                    len - index - 1
                });
                if found.len() as u64 >= want {
                    break;
                }
            }
        }
        index += 1;
    }
    Ok(Some(found))
}

/// LMOVE (RPOPLPUSH): pops an element from `from` of `src` and pushes it at `to` of `dst`
/// (the same key rotates it); the element, or `None` when `src` is absent. A `dst` of
/// another type, or one that would grow too large, changes nothing.
pub fn lmove<V: View + ?Sized>(
    v: &mut V,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Bytes>> {
    let Some(s) = load(v, src)? else {
        return Ok(None);
    };
    let same = src == dst;
    let d = if same { None } else { load(v, dst)? };
    let (mut popped, rest) = take(&s, from, 1)?;
    let elem = popped
        .pop()
        .ok_or(corrupt("list: fewer elements than its count"))?;
    let max = v.max_value_len();
    if same {
        let base = rest.as_deref().map(Raw::parse).transpose()?;
        let data = pushed(base, &[&elem], to, max)?;
        store(v, src, Some(&data), s.expiry)?;
    } else {
        let base = d.as_ref().map(List::raw).transpose()?;
        let data = pushed(base, &[&elem], to, max)?;
        store(v, src, rest.as_deref(), s.expiry)?;
        store(v, dst, Some(&data), d.and_then(|d| d.expiry))?;
    }
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

fn bulks(reply: &mut Reply, elems: &[Bytes]) {
    reply.array(elems.len());
    for e in elems {
        reply.bulk(e);
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
            bulks(reply, &lrange(view, key, start, stop)?);
        }
        Cmd::Lindex => {
            // The key before the index, as Redis does.
            let Some(list) = read(view, key)? else {
                reply.null();
                return Ok(());
            };
            let index = int_arg(arg(args, cmd, 2)?)?;
            reply.opt_bulk(lindex(&list, index)?.as_deref());
        }
        Cmd::Lset => {
            let Some(list) = load(view, key)? else {
                return Err(raw("ERR no such key"));
            };
            let index = int_arg(arg(args, cmd, 2)?)?;
            if !lset(view, key, &list, index, arg(args, cmd, 3)?)? {
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
