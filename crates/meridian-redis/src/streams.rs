//! Redis stream semantics over a [`View`]: the one copy of what XADD, XRANGE, XREVRANGE,
//! XLEN, XDEL, XTRIM, XSETID, XREAD, XREADGROUP, XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM
//! and XINFO mean, reply for reply and error for error Redis 7.0's (`t_stream.c`).
//!
//! **Representation.** In memory a stream is a [`Stream`] ([`object`]): entries in nodes as
//! Redis's radix tree holds listpacks (so approximate trimming keeps what Redis keeps), its
//! metadata, and its consumer groups ([`groups`]). Stored, it is one envelope of kind
//! [`Kind::Stream`] in [`encoding`]'s form. Commands reach it through [`collection`], so a
//! view that keeps objects (the standalone keyspace) changes it in place, and any other
//! view decodes and re-encodes it.
//!
//! **Redis's rules kept**: a stream is a key even when it holds no entry (XADD with
//! `MAXLEN 0`, `XGROUP CREATE ... MKSTREAM`, XDEL of its last entry); an ID never goes
//! back; arguments are checked in `t_stream.c`'s order (XADD's and XTRIM's options before
//! the key, XDEL's and XACK's key before their IDs); `MAXLEN ~`/`MINID ~` trim whole nodes
//! only, `stream-node-max-entries` and `stream-node-max-bytes` deciding where nodes close
//! ([`View::stream_node_limits`]); consumer group read counters and lag follow Redis 7.0.
//!
//! **Blocking reads**: the server does the waiting. [`read`] serves XREAD and XREADGROUP at
//! once when it can; a caller that may block learns it could not
//! ([`ReadOutcome::Nothing`], nothing written) and registers the client with the arguments
//! [`resolve_last_ids`] fixed (`$` made the stream's last ID at that moment); when a write
//! readies the key, [`serve_blocked`] answers the client for that key alone, or tells it to
//! keep waiting, or fails it as Redis does when its group or key is gone. [`exec_on_view`]
//! (MULTI, scripts) never blocks: it answers the null array.
//!
//! **Where it departs**: XINFO STREAM's `radix-tree-nodes` counts nodes, not radix-tree
//! nodes; a node's byte size (for `stream-node-max-bytes`) is estimated, not a listpack's.

pub mod encoding;
pub mod groups;
pub mod id;
mod info;
pub mod object;
mod pending;
mod read;
#[cfg(test)]
mod tests;

pub use id::StreamId;
pub use object::{NodeLimits, Stream, Trim};
pub use read::{
    BlockedServe, ReadOutcome, blocking_timeout, read, resolve_last_ids, serve_blocked, source_keys,
};

use crate::args::Args;
use crate::collection::{self, Collection, Typed};
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::view::{Kind, View};
use bytes::Bytes;
use id::{IdRules, parse_strict, parse_with, range_end, range_start};
use object::{Item, MAX_NODE_BYTES};
use std::any::Any;

impl Collection for Stream {
    fn kind(&self) -> Kind {
        Kind::Stream
    }
    fn encode(&self) -> Vec<u8> {
        encoding::encode(self)
    }
    /// A stream exists with no entry: never deleted for being empty.
    fn is_empty(&self) -> bool {
        false
    }
    fn len(&self) -> usize {
        usize::try_from(Stream::len(self)).unwrap_or(usize::MAX)
    }
    fn memory(&self) -> usize {
        Stream::memory(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Typed for Stream {
    const NAME: &'static str = "stream";
    const KIND: Kind = Kind::Stream;
    fn decode(data: &Bytes) -> Result<Self> {
        encoding::decode(data).map_err(RedisError::Corrupt)
    }
    fn stored_len(data: &Bytes) -> Result<usize> {
        encoding::stored_len(data).map_err(RedisError::Corrupt)
    }
}

/// Whether `cmd` is a stream command (this module runs it).
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Streams
}

/// The view's time in milliseconds (IDs, delivery and seen times).
fn now_ms(v: &dyn View) -> u64 {
    v.now().0 / 1000
}

/// Runs the read `f` over the stream at `key` (`None` when absent).
fn read_stream<R>(
    v: &mut dyn View,
    key: &[u8],
    f: impl FnOnce(&Stream) -> std::result::Result<R, CmdError>,
) -> std::result::Result<Option<R>, CmdError> {
    let mut out = None;
    collection::read::<Stream, dyn View, ()>(v, key, |s| {
        out = Some(f(s));
        Ok(())
    })?;
    out.transpose()
}

/// Runs the write `f` over the stream at `key` (created empty if absent and `create`); `f`
/// answers its result and whether it changed the stream.
fn modify_stream<R>(
    v: &mut dyn View,
    key: &[u8],
    create: bool,
    f: impl FnOnce(&mut Stream) -> std::result::Result<(R, bool), CmdError>,
) -> std::result::Result<Option<R>, CmdError> {
    collection::modify::<Stream, dyn View, R, CmdError>(v, key, create, f)
}

/// The `NOGROUP` error of a command naming a missing key or group.
fn no_group(key: &[u8], group: &[u8], suffix: &str) -> CmdError {
    raw(format!(
        "NOGROUP No such key '{}' or consumer group '{}'{suffix}",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// An ID as a bulk string.
fn reply_id(reply: &mut Reply, id: StreamId) {
    reply.bulk(id.to_string().as_bytes());
}

/// An entry: `[id, [field, value, ...]]`.
fn reply_entry(reply: &mut Reply, id: StreamId, fields: &[Bytes]) {
    reply.array(2);
    reply_id(reply, id);
    reply.array(fields.len());
    for f in fields {
        reply.bulk(f);
    }
}

fn reply_item(reply: &mut Reply, item: &Item) {
    reply_entry(reply, item.id, &item.fields);
}

/// A list of entries.
fn reply_items(reply: &mut Reply, items: &[&Item]) {
    reply.array(items.len());
    for i in items {
        reply_item(reply, i);
    }
}

/// Executes a stream command whose arity the table checks, writing its reply.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(cmd.spec().name));
    }
    match cmd {
        Cmd::Xadd => xadd(view, args, reply),
        Cmd::Xrange => xrange(view, args, false, reply),
        Cmd::Xrevrange => xrange(view, args, true, reply),
        Cmd::Xlen => {
            let n = collection::len::<Stream, dyn View>(view, args.get(1), true)?;
            reply.int(n.unwrap_or(0) as i64);
            Ok(())
        }
        Cmd::Xdel => xdel(view, args, reply),
        Cmd::Xtrim => xtrim(view, args, reply),
        Cmd::Xsetid => xsetid(view, args, reply),
        Cmd::Xread | Cmd::Xreadgroup => {
            if read(cmd, args, view, reply)? == ReadOutcome::Nothing {
                reply.null_array();
            }
            Ok(())
        }
        Cmd::Xgroup => pending::xgroup(view, args, reply),
        Cmd::Xack => pending::xack(view, args, reply),
        Cmd::Xpending => pending::xpending(view, args, reply),
        Cmd::Xclaim => pending::xclaim(view, args, reply),
        Cmd::Xautoclaim => pending::xautoclaim(view, args, reply),
        Cmd::Xinfo => info::xinfo(view, args, reply),
        _ => Err(raw(format!(
            "ERR {} is not a stream command",
            cmd.spec().name.to_ascii_uppercase()
        ))),
    }
}

// ----- XADD and XTRIM ----------------------------------------------------------------------

/// XADD's and XTRIM's parsed options.
#[derive(Debug, Default)]
struct AddTrimArgs {
    rule: Option<Trim>,
    approx: bool,
    /// 0: no limit.
    limit: u64,
    no_mkstream: bool,
    /// XADD's explicit ID and whether its sequence was given.
    id: Option<(StreamId, bool)>,
    /// Where XADD's ID argument is.
    id_pos: usize,
}

/// Parses XADD's (`xadd`) or XTRIM's options as `streamParseAddOrTrimArgsOrReply`.
fn parse_add_trim(
    args: Args<'_>,
    xadd: bool,
    limits: NodeLimits,
) -> std::result::Result<AddTrimArgs, CmdError> {
    let mut a = AddTrimArgs::default();
    let mut limit_given = false;
    let argc = args.len();
    let mut i = 2;
    while i < argc {
        let more = argc - 1 - i;
        let opt = args.get(i);
        if xadd && opt == b"*" {
            break;
        } else if (opt.eq_ignore_ascii_case(b"MAXLEN") || opt.eq_ignore_ascii_case(b"MINID"))
            && more > 0
        {
            if a.rule.is_some() {
                return Err(raw(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            a.approx = false;
            let next = args.get(i + 1);
            if more >= 2 && (next == b"~" || next == b"=") {
                a.approx = next == b"~";
                i += 1;
            }
            let value = args.get(i + 1);
            a.rule = Some(if opt.eq_ignore_ascii_case(b"MAXLEN") {
                let n = int_arg(value)?;
                if n < 0 {
                    return Err(raw("ERR The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(parse_strict(value)?)
            });
            i += 1;
        } else if opt.eq_ignore_ascii_case(b"LIMIT") && more > 0 {
            let n = int_arg(args.get(i + 1))?;
            if n < 0 {
                return Err(raw("ERR The LIMIT argument must be >= 0."));
            }
            a.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && opt.eq_ignore_ascii_case(b"NOMKSTREAM") {
            a.no_mkstream = true;
        } else if xadd {
            let rules = IdRules {
                seq_star: true,
                ..IdRules::STRICT
            };
            a.id = Some(parse_with(opt, rules)?);
            break;
        } else {
            return Err(raw(SYNTAX));
        }
        i += 1;
    }
    a.id_pos = i;
    if a.limit != 0 && a.rule.is_none() {
        return Err(raw(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if !xadd && a.rule.is_none() {
        return Err(raw(
            "ERR syntax error, XTRIM must be called with a trimming strategy",
        ));
    }
    if limit_given {
        if !a.approx {
            return Err(raw(
                "ERR syntax error, LIMIT cannot be used without the special ~ option",
            ));
        }
    } else if a.approx {
        // At most 100 nodes' worth of work, as Redis bounds it.
        let n = limits.entries.saturating_mul(100);
        a.limit = if n == 0 { 10_000 } else { n.min(1_000_000) };
    } else {
        a.limit = 0;
    }
    Ok(a)
}

fn xadd(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let limits = v.stream_node_limits();
    let a = parse_add_trim(args, true, limits)?;
    let field_pos = a.id_pos + 1;
    let pairs = args.len().saturating_sub(field_pos);
    if args.len() < field_pos || pairs < 2 || pairs % 2 == 1 {
        return Err(arity_error("xadd"));
    }
    if let Some((id, true)) = a.id
        && id.is_zero()
    {
        return Err(raw("ERR The ID specified in XADD must be greater than 0-0"));
    }
    let total: u64 = args.iter_from(field_pos).map(|f| f.len() as u64).sum();
    let now = now_ms(v);
    let added = modify_stream(v, args.get(1), !a.no_mkstream, |s| {
        if s.last_id == StreamId::MAX {
            return Err(raw(
                "ERR The stream has exhausted the last possible ID, unable to add more items",
            ));
        }
        let id = next_id(s.last_id, a.id, now).ok_or_else(|| {
            raw("ERR The ID specified in XADD is equal or smaller than the target stream top item")
        })?;
        if total > MAX_NODE_BYTES {
            return Err(raw("ERR Elements are too large to be stored"));
        }
        let fields = args
            .iter_from(field_pos)
            .map(Bytes::copy_from_slice)
            .collect();
        s.append(id, fields, limits);
        if let Some(rule) = a.rule {
            s.trim(rule, a.approx, a.limit);
        }
        Ok((id, true))
    })?;
    match added {
        Some(id) => reply_id(reply, id),
        None => reply.null(),
    }
    Ok(())
}

/// The ID XADD adds after `last`: the given one (its sequence generated for `<ms>-*`), or
/// one from the clock. `None` when it would not be greater than `last`.
fn next_id(last: StreamId, given: Option<(StreamId, bool)>, now_ms: u64) -> Option<StreamId> {
    let id = match given {
        Some((id, true)) => id,
        Some((id, false)) if id.ms == last.ms => StreamId::new(id.ms, last.seq.checked_add(1)?),
        Some((id, false)) => id,
        None if now_ms > last.ms => StreamId::new(now_ms, 0),
        None => last.next()?,
    };
    (id > last).then_some(id)
}

fn xtrim(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let a = parse_add_trim(args, false, v.stream_node_limits())?;
    let Some(rule) = a.rule else {
        return Err(raw(SYNTAX));
    };
    let deleted = modify_stream(v, args.get(1), false, |s| {
        let n = s.trim(rule, a.approx, a.limit);
        Ok((n, n > 0))
    })?;
    reply.int(deleted.unwrap_or(0) as i64);
    Ok(())
}

// ----- XRANGE, XDEL, XSETID ----------------------------------------------------------------

fn xrange(v: &mut dyn View, args: Args<'_>, rev: bool, reply: &mut Reply) -> CmdResult {
    let (start_arg, end_arg) = if rev {
        (args.get(3), args.get(2))
    } else {
        (args.get(2), args.get(3))
    };
    let start = range_start(start_arg)?;
    let end = range_end(end_arg)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if args.get(j).eq_ignore_ascii_case(b"COUNT") && j + 1 < args.len() {
            count = int_arg(args.get(j + 1))?.max(0);
            j += 2;
        } else {
            return Err(raw(SYNTAX));
        }
    }
    let found = read_stream(v, args.get(1), |s| {
        if count == 0 {
            reply.null_array();
        } else {
            let n = usize::try_from(count.max(0)).unwrap_or(usize::MAX);
            reply_items(reply, &s.range(start, end, n, rev));
        }
        Ok(())
    })?;
    if found.is_none() {
        reply.array(0);
    }
    Ok(())
}

fn xdel(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let key = args.get(1);
    // The key first (an absent key answers 0 whatever the IDs), then every ID before any
    // deletion, so a bad ID deletes nothing.
    if collection::peek::<Stream, dyn View, ()>(v, key, |_| ())?.is_none() {
        reply.int(0);
        return Ok(());
    }
    let ids = args
        .iter_from(2)
        .map(parse_strict)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let deleted = modify_stream(v, key, false, |s| {
        let n = ids.iter().filter(|&&id| s.delete(id)).count();
        Ok((n, n > 0))
    })?;
    reply.int(deleted.unwrap_or(0) as i64);
    Ok(())
}

fn xsetid(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let id = parse_strict(args.get(2))?;
    let mut entries_added: Option<u64> = None;
    let mut max_deleted = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args.get(i);
        if opt.eq_ignore_ascii_case(b"ENTRIESADDED") && more > 0 {
            let n = int_arg(args.get(i + 1))?;
            if n < 0 {
                return Err(raw("ERR entries_added must be positive"));
            }
            entries_added = Some(n as u64);
        } else if opt.eq_ignore_ascii_case(b"MAXDELETEDID") && more > 0 {
            max_deleted = parse_strict(args.get(i + 1))?;
            if id < max_deleted {
                return Err(raw(
                    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
        } else {
            return Err(raw(SYNTAX));
        }
        i += 2;
    }
    let done = modify_stream(v, args.get(1), false, |s| {
        if !s.is_empty() {
            if s.last_live().is_some_and(|top| id < top) {
                return Err(raw(
                    "ERR The ID specified in XSETID is smaller than the target stream top item",
                ));
            }
            if entries_added.is_some_and(|n| s.len() > n) {
                return Err(raw(
                    "ERR The entries_added specified in XSETID is smaller than the target stream length",
                ));
            }
        }
        s.last_id = id;
        if let Some(n) = entries_added {
            s.entries_added = n;
        }
        if !max_deleted.is_zero() {
            s.max_deleted = max_deleted;
        }
        Ok(((), true))
    })?;
    if done.is_none() {
        return Err(raw("ERR no such key"));
    }
    reply.ok();
    Ok(())
}

// ----- consumer group counters (XINFO, XREADGROUP) ------------------------------------------

/// Whether `start..=end` (whole stream ends when `None`) may hold a deleted entry, as
/// Redis's `streamRangeHasTombstones` decides from the largest deleted ID.
fn range_has_tombstones(s: &Stream, start: StreamId, end: Option<StreamId>) -> bool {
    if s.is_empty() || s.max_deleted.is_zero() || s.first_id > s.max_deleted {
        return false;
    }
    start <= s.max_deleted && s.max_deleted <= end.unwrap_or(StreamId::MAX)
}

/// The logical read counter of `id` (entries from the first ever to `id`), when it can be
/// known: Redis's `streamEstimateDistanceFromFirstEverEntry`; `None` otherwise.
pub(crate) fn distance_from_first(s: &Stream, id: StreamId) -> Option<u64> {
    if s.entries_added == 0 {
        return Some(0);
    }
    if s.is_empty() && id <= s.last_id {
        return Some(s.entries_added);
    }
    match id.cmp(&s.last_id) {
        std::cmp::Ordering::Equal => return Some(s.entries_added),
        std::cmp::Ordering::Greater => return None,
        std::cmp::Ordering::Less => {}
    }
    if s.max_deleted.is_zero() || s.max_deleted < s.first_id {
        match id.cmp(&s.first_id) {
            std::cmp::Ordering::Less => return Some(s.entries_added - s.len()),
            std::cmp::Ordering::Equal => return Some(s.entries_added - s.len() + 1),
            std::cmp::Ordering::Greater => {}
        }
    }
    None
}

/// A group's lag (entries not yet delivered), when it can be known.
fn group_lag(s: &Stream, g: &groups::ConsumerGroup) -> Option<i64> {
    if s.entries_added == 0 {
        return Some(0);
    }
    if g.entries_read != groups::ENTRIES_READ_UNKNOWN && !range_has_tombstones(s, g.last_id, None) {
        return Some(s.entries_added as i64 - g.entries_read);
    }
    distance_from_first(s, g.last_id).map(|read| s.entries_added as i64 - read as i64)
}
