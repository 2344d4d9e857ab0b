//! XREAD and XREADGROUP: their arguments, serving them at once, and serving a client that
//! blocked on them once its key is ready (see the parent module's docs for the split between
//! this module and the server).

use super::groups::ENTRIES_READ_UNKNOWN;
use super::id::{StreamId, parse_strict};
use super::object::Item;
use super::{
    Stream, distance_from_first, modify_stream, no_group, now_ms, range_has_tombstones,
    read_stream, reply_id,
};
use crate::args::{Args, OwnedArgs};
use crate::collection;
use crate::command::Cmd;
use crate::error::{CmdError, SYNTAX, raw};
use crate::reply::Reply;
use crate::view::View;
use bytes::Bytes;

/// How many entries a blocked read without COUNT is served (Redis's
/// `XREAD_BLOCKED_DEFAULT_COUNT`).
const BLOCKED_DEFAULT_COUNT: usize = 1000;

/// The ID a read starts after: a given one, or XREADGROUP's `>` (new entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Id(StreamId),
    New,
}

/// XREAD's or XREADGROUP's parsed arguments.
#[derive(Debug)]
struct ReadArgs<'a> {
    /// `BLOCK` milliseconds (0: for ever), if given.
    block: Option<u64>,
    /// 0: no limit.
    count: usize,
    group: Option<(&'a [u8], &'a [u8])>,
    noack: bool,
    /// Where the keys start.
    streams_at: usize,
    /// How many keys.
    n: usize,
}

impl<'a> ReadArgs<'a> {
    fn key(&self, args: Args<'a>, i: usize) -> &'a [u8] {
        args.get(self.streams_at + i)
    }
    fn id_arg(&self, args: Args<'a>, i: usize) -> &'a [u8] {
        args.get(self.streams_at + self.n + i)
    }
}

/// The longest `BLOCK`, ms: Redis refuses one whose deadline (now + timeout, in ms since
/// the epoch) overflows 64 bits; this keeps 2^45 ms (a thousand years) of room for the clock.
const MAX_BLOCK_MS: i64 = i64::MAX - (1 << 45);

/// A `BLOCK` timeout in milliseconds, as Redis's `getTimeoutFromObjectOrReply` reads one.
fn parse_block(a: &[u8]) -> Result<u64, CmdError> {
    let ms = crate::value::parse_i64(a)
        .ok_or_else(|| raw("ERR timeout is not an integer or out of range"))?;
    if ms < 0 {
        return Err(raw("ERR timeout is negative"));
    }
    if ms > MAX_BLOCK_MS {
        return Err(raw("ERR timeout is out of range"));
    }
    Ok(ms as u64)
}

fn parse(cmd: Cmd, args: Args<'_>) -> Result<ReadArgs<'_>, CmdError> {
    let xreadgroup = cmd == Cmd::Xreadgroup;
    let mut r = ReadArgs {
        block: None,
        count: 0,
        group: None,
        noack: false,
        streams_at: 0,
        n: 0,
    };
    let argc = args.len();
    let mut i = 1;
    while i < argc {
        let more = argc - i - 1;
        let o = args.get(i);
        if o.eq_ignore_ascii_case(b"BLOCK") && more > 0 {
            i += 1;
            r.block = Some(parse_block(args.get(i))?);
        } else if o.eq_ignore_ascii_case(b"COUNT") && more > 0 {
            i += 1;
            let c = crate::error::int_arg(args.get(i))?.max(0);
            r.count = usize::try_from(c).unwrap_or(usize::MAX);
        } else if o.eq_ignore_ascii_case(b"STREAMS") && more > 0 {
            r.streams_at = i + 1;
            let left = argc - r.streams_at;
            if !left.is_multiple_of(2) {
                return Err(raw(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            r.n = left / 2;
            break;
        } else if o.eq_ignore_ascii_case(b"GROUP") && more >= 2 {
            if !xreadgroup {
                return Err(raw(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((args.get(i + 1), args.get(i + 2)));
            i += 2;
        } else if o.eq_ignore_ascii_case(b"NOACK") {
            if !xreadgroup {
                return Err(raw(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(raw(SYNTAX));
        }
        i += 1;
    }
    if r.streams_at == 0 {
        return Err(raw(SYNTAX));
    }
    if xreadgroup && r.group.is_none() {
        return Err(raw("ERR Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

/// The `BLOCK` of an XREAD or XREADGROUP: `None` without one (the command never blocks),
/// else the milliseconds to wait (`Some(None)`: for ever). The arguments' errors first.
pub fn blocking_timeout(cmd: Cmd, args: Args<'_>) -> Result<Option<Option<u64>>, CmdError> {
    let r = parse(cmd, args)?;
    Ok(r.block.map(|ms| (ms > 0).then_some(ms)))
}

/// The argument positions of the keys an XREAD or XREADGROUP reads (none if its arguments
/// do not parse).
pub fn source_keys(cmd: Cmd, args: Args<'_>) -> Vec<usize> {
    match parse(cmd, args) {
        Ok(r) => (r.streams_at..r.streams_at + r.n).collect(),
        Err(_) => Vec::new(),
    }
}

/// The arguments with every `$` ID made the stream's last ID now (0-0 for an absent key),
/// as Redis fixes them when a client blocks; other arguments unchanged.
pub fn resolve_last_ids(cmd: Cmd, args: Args<'_>, v: &mut dyn View) -> Result<OwnedArgs, CmdError> {
    let r = parse(cmd, args)?;
    let mut parts: Vec<Vec<u8>> = args.iter_from(0).map(<[u8]>::to_vec).collect();
    for i in 0..r.n {
        if r.id_arg(args, i) == b"$" {
            let last = collection::peek::<Stream, dyn View, _>(v, r.key(args, i), |s| s.last_id)
                .ok()
                .flatten()
                .unwrap_or_default();
            parts[r.streams_at + r.n + i] = last.to_bytes();
        }
    }
    Ok(OwnedArgs::from_slices(parts.iter().map(Vec::as_slice)))
}

/// What [`read`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Its reply is written.
    Served,
    /// No stream had anything to serve; nothing is written (the caller answers the null
    /// array, or blocks the client).
    Nothing,
}

/// Resolves each key's ID: `$`, `>` and group existence, in Redis's order.
fn resolve_ids(
    cmd: Cmd,
    args: Args<'_>,
    r: &ReadArgs<'_>,
    v: &mut dyn View,
) -> Result<Vec<After>, CmdError> {
    let mut ids = Vec::with_capacity(r.n);
    for i in 0..r.n {
        let key = r.key(args, i);
        let found = collection::peek::<Stream, dyn View, _>(v, key, |s| {
            (
                s.last_id,
                r.group.is_some_and(|(g, _)| s.groups.contains_key(g)),
            )
        })?;
        if let Some((group, _)) = r.group
            && !found.is_some_and(|(_, has_group)| has_group)
        {
            return Err(no_group(key, group, " in XREADGROUP with GROUP option"));
        }
        let arg = r.id_arg(args, i);
        let id = if arg == b"$" {
            if cmd == Cmd::Xreadgroup {
                return Err(raw(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ));
            }
            After::Id(found.map(|(last, _)| last).unwrap_or_default())
        } else if arg == b">" {
            if cmd != Cmd::Xreadgroup {
                return Err(raw(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            After::New
        } else {
            After::Id(parse_strict(arg)?)
        };
        ids.push(id);
    }
    Ok(ids)
}

/// Serves an XREAD or XREADGROUP (parsed and checked in Redis's order) from every stream
/// that has something for it; [`ReadOutcome::Nothing`] when none has (nothing written).
pub fn read(
    cmd: Cmd,
    args: Args<'_>,
    v: &mut dyn View,
    reply: &mut Reply,
) -> Result<ReadOutcome, CmdError> {
    let r = parse(cmd, args)?;
    let ids = resolve_ids(cmd, args, &r, v)?;
    let mut body = Reply::new(256);
    body.resp3 = reply.resp3;
    let mut served = 0;
    for (i, after) in ids.into_iter().enumerate() {
        let key = r.key(args, i);
        if serve_key(v, key, &r, after, r.count, &mut body)? {
            served += 1;
        }
    }
    if served == 0 {
        return Ok(ReadOutcome::Nothing);
    }
    if reply.resp3 {
        reply.map(served);
    } else {
        reply.array(served);
    }
    reply.out.extend_from_slice(&body.out);
    Ok(ReadOutcome::Served)
}

/// Serves one key of a read into `out` (`[key, entries]`, the pair's array header in RESP2
/// only) if it has something for it; answers whether it did.
fn serve_key(
    v: &mut dyn View,
    key: &[u8],
    r: &ReadArgs<'_>,
    after: After,
    count: usize,
    out: &mut Reply,
) -> Result<bool, CmdError> {
    let now = now_ms(v);
    let head = |out: &mut Reply| {
        if !out.resp3 {
            out.array(2);
        }
        out.bulk(key);
    };
    let Some((group, consumer)) = r.group else {
        let After::Id(gt) = after else {
            return Ok(false);
        };
        let served = read_stream(v, key, |s| {
            if s.last_live().is_none_or(|max| max <= gt) {
                return Ok(false);
            }
            head(out);
            let start = gt.next().unwrap_or(StreamId::MAX);
            super::reply_items(out, &s.range(start, StreamId::MAX, count, false));
            Ok(true)
        })?;
        return Ok(served.unwrap_or(false));
    };
    let served = modify_stream(v, key, false, |s| {
        let serve = match after {
            After::Id(_) => true,
            After::New => {
                let last = s.groups.get(group).map(|g| g.last_id).unwrap_or_default();
                s.last_live().is_some_and(|max| max > last)
            }
        };
        if !serve {
            return Ok((false, false));
        }
        head(out);
        match after {
            After::Id(gt) => serve_history(s, group, consumer, gt, count, now, out),
            After::New => serve_new(s, group, consumer, r.noack, count, now, out),
        }
        Ok((true, true))
    })?;
    Ok(served.unwrap_or(false))
}

/// A consumer's own pending entries after `gt` (its history), each delivered again; an entry
/// deleted since is `[id, nil]`.
fn serve_history(
    s: &mut Stream,
    group: &[u8],
    consumer: &[u8],
    gt: StreamId,
    count: usize,
    now: u64,
    out: &mut Reply,
) {
    let start = match gt.next() {
        Some(id) => id,
        None => {
            out.array(0);
            return;
        }
    };
    let Some(g) = s.groups.get_mut(group) else {
        out.array(0);
        return;
    };
    let ids: Vec<StreamId> = g
        .consumer(consumer, now)
        .pending
        .range(start..)
        .take(if count == 0 { usize::MAX } else { count })
        .copied()
        .collect();
    let items: Vec<(StreamId, Option<Vec<Bytes>>)> = ids
        .into_iter()
        .map(|id| (id, s.get(id).map(|e| e.fields.clone())))
        .collect();
    let Some(g) = s.groups.get_mut(group) else {
        out.array(0);
        return;
    };
    out.array(items.len());
    for (id, fields) in items {
        out.array(2);
        reply_id(out, id);
        match fields {
            Some(fields) => {
                out.array(fields.len());
                for f in &fields {
                    out.bulk(f);
                }
                if let Some(n) = g.pel.get_mut(&id) {
                    n.delivery_time = now;
                    n.delivery_count = n.delivery_count.saturating_add(1);
                }
            }
            None => out.null_array(),
        }
    }
}

/// New entries after the group's last delivered ID, given to `consumer` (unless `noack`),
/// the group's last ID and read counter moved past them.
fn serve_new(
    s: &mut Stream,
    group: &[u8],
    consumer: &[u8],
    noack: bool,
    count: usize,
    now: u64,
    out: &mut Reply,
) {
    let Some(last) = s.groups.get(group).map(|g| g.last_id) else {
        out.array(0);
        return;
    };
    let start = last.next().unwrap_or(StreamId::MAX);
    let items: Vec<(StreamId, Vec<Bytes>)> = s
        .range(start, StreamId::MAX, count, false)
        .into_iter()
        .map(|e: &Item| (e.id, e.fields.clone()))
        .collect();
    // The read counter as Redis moves it, entry by entry.
    let mut entries_read = s.groups.get(group).map_or(0, |g| g.entries_read);
    let mut last_id = last;
    for (id, _) in &items {
        if *id > last_id {
            if entries_read != ENTRIES_READ_UNKNOWN && !range_has_tombstones(s, *id, None) {
                entries_read += 1;
            } else if s.entries_added != 0 {
                entries_read =
                    distance_from_first(s, *id).map_or(ENTRIES_READ_UNKNOWN, |d| d as i64);
            }
            last_id = *id;
        }
    }
    let Some(g) = s.groups.get_mut(group) else {
        out.array(0);
        return;
    };
    g.entries_read = entries_read;
    g.last_id = last_id;
    let name = Bytes::copy_from_slice(consumer);
    g.consumer(consumer, now);
    out.array(items.len());
    for (id, fields) in &items {
        out.array(2);
        reply_id(out, *id);
        out.array(fields.len());
        for f in fields {
            out.bulk(f);
        }
        if !noack {
            g.deliver(*id, &name, now);
        }
    }
}

/// What [`serve_blocked`] decided for a blocked client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedServe {
    /// Its reply is written: it is done.
    Served,
    /// Nothing for it yet: it keeps waiting (nothing written).
    Wait,
}

/// Serves a client blocked by `args` (its IDs fixed by [`resolve_last_ids`]) now that `key`
/// is ready: `[[key, entries]]` for the entries after its ID (after its group's last ID for
/// `>`), at most its COUNT (1000 without one). An XREADGROUP fails as Redis fails it when
/// its key is gone (`-UNBLOCKED`) or its group is (`-NOGROUP`).
pub fn serve_blocked(
    cmd: Cmd,
    args: Args<'_>,
    key: &[u8],
    v: &mut dyn View,
    reply: &mut Reply,
) -> Result<BlockedServe, CmdError> {
    let r = parse(cmd, args)?;
    let Some(i) = (0..r.n).find(|&i| r.key(args, i) == key) else {
        return Ok(BlockedServe::Wait);
    };
    let state = match collection::peek::<Stream, dyn View, _>(v, key, |s| {
        (
            s.last_id,
            r.group.map(|(g, _)| s.groups.get(g).map(|g| g.last_id)),
        )
    }) {
        Ok(found) => found,
        Err(crate::error::RedisError::WrongType) => None,
        Err(e) => return Err(e.into()),
    };
    let Some((last_id, group_last)) = state else {
        if r.group.is_some() {
            return Err(raw("UNBLOCKED the stream key no longer exists"));
        }
        return Ok(BlockedServe::Wait);
    };
    let after = match group_last {
        None => match parse_strict(r.id_arg(args, i)) {
            Ok(id) => After::Id(id),
            Err(_) => return Ok(BlockedServe::Wait),
        },
        Some(None) => {
            return Err(raw(
                "NOGROUP the consumer group this client was blocked on no longer exists",
            ));
        }
        Some(Some(_)) => After::New,
    };
    let gt = match (after, group_last) {
        (After::Id(id), _) => id,
        (After::New, Some(Some(last))) => last,
        _ => StreamId::MAX,
    };
    if last_id <= gt {
        return Ok(BlockedServe::Wait);
    }
    let count = if r.count == 0 {
        BLOCKED_DEFAULT_COUNT
    } else {
        r.count
    };
    let mut body = Reply::new(256);
    body.resp3 = reply.resp3;
    if !serve_key(v, key, &r, after, count, &mut body)? {
        // Redis answers the key with no entry when only deleted ones are newer.
        if !body.resp3 {
            body.array(2);
        }
        body.bulk(key);
        body.array(0);
    }
    if reply.resp3 {
        reply.map(1);
    } else {
        reply.array(1);
    }
    reply.out.extend_from_slice(&body.out);
    Ok(BlockedServe::Served)
}
