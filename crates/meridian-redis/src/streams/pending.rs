//! Consumer group administration and pending entries: XGROUP, XACK, XPENDING, XCLAIM and
//! XAUTOCLAIM, as Redis 7.0 answers them.

use super::groups::{ConsumerGroup, ENTRIES_READ_UNKNOWN};
use super::id::{IdRules, StreamId, parse_strict, parse_with, range_end, range_start};
use super::{Stream, modify_stream, no_group, now_ms, read_stream, reply_entry, reply_id};
use crate::args::Args;
use crate::collection;
use crate::error::{
    CmdError, CmdResult, SYNTAX, int_arg, raw, subcommand_arity, unknown_subcommand,
};
use crate::reply::Reply;
use crate::view::View;
use bytes::Bytes;

/// Redis's `addReplySubcommandSyntaxError` for XGROUP and XINFO.
pub(super) fn subcommand_syntax(container: &str, sub: &[u8]) -> CmdError {
    unknown_subcommand(container, sub)
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

// ----- XGROUP ------------------------------------------------------------------------------

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Print this help.",
];

/// XGROUP's subcommands and their arity (Redis 7's `xgroup|...` table).
fn xgroup_arity(sub: &[u8], argc: usize) -> Option<bool> {
    let eq = |s: &[u8]| sub.eq_ignore_ascii_case(s);
    Some(if eq(b"CREATE") || eq(b"SETID") {
        argc >= 5
    } else if eq(b"DESTROY") {
        argc == 4
    } else if eq(b"CREATECONSUMER") || eq(b"DELCONSUMER") {
        argc == 5
    } else if eq(b"HELP") {
        argc == 2
    } else {
        return None;
    })
}

pub(super) fn xgroup(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let sub = args.get(1);
    let Some(arity_ok) = xgroup_arity(sub, args.len()) else {
        return Err(unknown_subcommand("xgroup", sub));
    };
    subcommand_arity("xgroup", sub, arity_ok)?;
    let eq = |s: &[u8]| sub.eq_ignore_ascii_case(s);
    if eq(b"HELP") {
        reply.help(XGROUP_HELP);
        return Ok(());
    }
    let (key, group) = (args.get(2), args.get(3));
    let create = eq(b"CREATE");
    let setid = eq(b"SETID");
    let mut mkstream = false;
    let mut entries_read = ENTRIES_READ_UNKNOWN;
    let mut i = 5;
    while i < args.len() {
        let a = args.get(i);
        if create && a.eq_ignore_ascii_case(b"MKSTREAM") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && a.eq_ignore_ascii_case(b"ENTRIESREAD") && i + 1 < args.len()
        {
            entries_read = int_arg(args.get(i + 1))?;
            if entries_read < 0 && entries_read != ENTRIES_READ_UNKNOWN {
                return Err(raw("ERR value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(subcommand_syntax("xgroup", sub));
        }
    }
    let found = collection::peek::<Stream, dyn View, _>(v, key, |s| s.groups.contains_key(group))?;
    if !mkstream {
        let Some(has_group) = found else {
            return Err(raw(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            ));
        };
        if !has_group && !create && !eq(b"DESTROY") {
            return Err(raw(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                lossy(group),
                lossy(key)
            )));
        }
    }
    let now = now_ms(v);
    if create {
        if args.len() > 8 {
            return Err(subcommand_syntax("xgroup", sub));
        }
        let id_arg = args.get(4);
        let given = if id_arg == b"$" {
            None
        } else {
            Some(parse_strict(id_arg)?)
        };
        let created = modify_stream(v, key, true, |s| {
            if s.groups.contains_key(group) {
                // A stream MKSTREAM created is kept even so: Redis created it first.
                return Ok((false, found.is_none()));
            }
            let id = given.unwrap_or(s.last_id);
            s.groups.insert(
                Bytes::copy_from_slice(group),
                ConsumerGroup::new(id, entries_read),
            );
            Ok((true, true))
        })?;
        if created != Some(true) {
            return Err(raw("BUSYGROUP Consumer Group name already exists"));
        }
        reply.ok();
    } else if setid {
        if args.len() != 5 && args.len() != 7 {
            return Err(subcommand_syntax("xgroup", sub));
        }
        let id_arg = args.get(4);
        let given = if id_arg == b"$" {
            None
        } else {
            Some(parse_with(id_arg, IdRules::range(0))?.0)
        };
        modify_stream(v, key, false, |s| {
            let last = s.last_id;
            if let Some(g) = s.groups.get_mut(group) {
                g.last_id = given.unwrap_or(last);
                g.entries_read = entries_read;
            }
            Ok(((), true))
        })?;
        reply.ok();
    } else if eq(b"DESTROY") {
        let destroyed = modify_stream(v, key, false, |s| {
            let gone = s.groups.remove(group).is_some();
            Ok((gone, gone))
        })?;
        reply.int(i64::from(destroyed == Some(true)));
    } else if eq(b"CREATECONSUMER") {
        let created = modify_stream(v, key, false, |s| {
            let c = s
                .groups
                .get_mut(group)
                .is_some_and(|g| g.create_consumer(args.get(4), now));
            Ok((c, c))
        })?;
        reply.int(i64::from(created == Some(true)));
    } else {
        let pending = modify_stream(v, key, false, |s| {
            let Some(g) = s.groups.get_mut(group) else {
                return Ok((0, false));
            };
            let existed = g.consumers.contains_key(args.get(4));
            Ok((g.delete_consumer(args.get(4)), existed))
        })?;
        reply.int(pending.unwrap_or(0) as i64);
    }
    Ok(())
}

// ----- XACK, XPENDING ----------------------------------------------------------------------

pub(super) fn xack(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let (key, group) = (args.get(1), args.get(2));
    let has_group =
        collection::peek::<Stream, dyn View, _>(v, key, |s| s.groups.contains_key(group))?;
    if has_group != Some(true) {
        reply.int(0);
        return Ok(());
    }
    // Every ID before any acknowledgement: all or nothing.
    let ids = args
        .iter_from(3)
        .map(parse_strict)
        .collect::<Result<Vec<_>, _>>()?;
    let acked = modify_stream(v, key, false, |s| {
        let Some(g) = s.groups.get_mut(group) else {
            return Ok((0, false));
        };
        let n = ids.iter().filter(|&&id| g.ack(id)).count();
        Ok((n, n > 0))
    })?;
    reply.int(acked.unwrap_or(0) as i64);
    Ok(())
}

pub(super) fn xpending(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let argc = args.len();
    let (key, group) = (args.get(1), args.get(2));
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(raw(SYNTAX));
    }
    let mut range = None;
    if argc >= 6 {
        let mut at = 3;
        let mut min_idle = 0i64;
        if args.get(3).eq_ignore_ascii_case(b"IDLE") {
            min_idle = int_arg(args.get(4))?;
            if argc < 8 {
                return Err(raw(SYNTAX));
            }
            at += 2;
        }
        let count = int_arg(args.get(at + 2))?.max(0);
        let start = range_start(args.get(at))?;
        let end = range_end(args.get(at + 1))?;
        let consumer = (at + 3 < argc).then(|| args.get(at + 3));
        range = Some((start, end, count as u64, consumer, min_idle));
    }
    let now = now_ms(v);
    let done = read_stream(v, key, |s| {
        let Some(g) = s.groups.get(group) else {
            return Ok(false);
        };
        match range {
            None => pending_summary(g, reply),
            Some((start, end, count, consumer, min_idle)) => {
                let pel: Vec<StreamId> = match consumer {
                    Some(c) => match g.consumers.get(c) {
                        Some(c) => c.pending.range(start..=end.max(start)).copied().collect(),
                        None => Vec::new(),
                    },
                    None => g
                        .pel
                        .range(start..=end.max(start))
                        .map(|(k, _)| *k)
                        .collect(),
                };
                let mut rows = Vec::new();
                for id in pel {
                    if rows.len() as u64 >= count || id > end {
                        break;
                    }
                    let Some(n) = g.pel.get(&id) else { continue };
                    let idle = now.saturating_sub(n.delivery_time);
                    if min_idle > 0 && (idle as i64) < min_idle {
                        continue;
                    }
                    rows.push((id, n.consumer.clone(), idle, n.delivery_count));
                }
                reply.array(rows.len());
                for (id, c, idle, count) in rows {
                    reply.array(4);
                    reply_id(reply, id);
                    reply.bulk(&c);
                    reply.int(idle as i64);
                    reply.int(count as i64);
                }
            }
        }
        Ok(true)
    })?;
    if done != Some(true) {
        return Err(no_group(key, group, ""));
    }
    Ok(())
}

/// XPENDING's summary: the count, the smallest and largest pending IDs, and each consumer
/// owning any with its count.
fn pending_summary(g: &ConsumerGroup, reply: &mut Reply) {
    reply.array(4);
    reply.int(g.pel.len() as i64);
    let (Some((first, _)), Some((last, _))) = (g.pel.first_key_value(), g.pel.last_key_value())
    else {
        reply.null();
        reply.null();
        reply.null_array();
        return;
    };
    reply_id(reply, *first);
    reply_id(reply, *last);
    let owners: Vec<_> = g
        .consumers
        .iter()
        .filter(|(_, c)| !c.pending.is_empty())
        .collect();
    reply.array(owners.len());
    for (name, c) in owners {
        reply.array(2);
        reply.bulk(name);
        reply.bulk(c.pending.len().to_string().as_bytes());
    }
}

// ----- XCLAIM, XAUTOCLAIM ------------------------------------------------------------------

/// XCLAIM's options.
struct ClaimOptions {
    force: bool,
    justid: bool,
    /// The delivery time to set (ms), from IDLE or TIME; `None`: now.
    delivery_time: Option<i64>,
    retry_count: Option<i64>,
    last_id: StreamId,
}

fn claim_options(args: Args<'_>, from: usize, now: u64) -> Result<ClaimOptions, CmdError> {
    let mut o = ClaimOptions {
        force: false,
        justid: false,
        delivery_time: None,
        retry_count: None,
        last_id: StreamId::MIN,
    };
    let int_or = |a: &[u8], what: &str| {
        crate::value::parse_i64(a)
            .ok_or_else(|| raw(format!("ERR Invalid {what} option argument for XCLAIM")))
    };
    let mut j = from;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if opt.eq_ignore_ascii_case(b"FORCE") {
            o.force = true;
        } else if opt.eq_ignore_ascii_case(b"JUSTID") {
            o.justid = true;
        } else if opt.eq_ignore_ascii_case(b"IDLE") && more > 0 {
            j += 1;
            let idle = int_or(args.get(j), "IDLE")?;
            o.delivery_time = Some((now as i64).saturating_sub(idle));
        } else if opt.eq_ignore_ascii_case(b"TIME") && more > 0 {
            j += 1;
            o.delivery_time = Some(int_or(args.get(j), "TIME")?);
        } else if opt.eq_ignore_ascii_case(b"RETRYCOUNT") && more > 0 {
            j += 1;
            o.retry_count = Some(int_or(args.get(j), "RETRYCOUNT")?);
        } else if opt.eq_ignore_ascii_case(b"LASTID") && more > 0 {
            j += 1;
            o.last_id = parse_strict(args.get(j))?;
        } else {
            return Err(raw(format!(
                "ERR Unrecognized XCLAIM option '{}'",
                lossy(opt)
            )));
        }
        j += 1;
    }
    Ok(o)
}

fn min_idle_arg(a: &[u8], cmd: &str) -> Result<u64, CmdError> {
    let n = crate::value::parse_i64(a)
        .ok_or_else(|| raw(format!("ERR Invalid min-idle-time argument for {cmd}")))?;
    Ok(n.max(0) as u64)
}

/// Whether `key` holds a stream with `group`: `NOGROUP` otherwise (WRONGTYPE first).
fn require_group(v: &mut dyn View, key: &[u8], group: &[u8]) -> CmdResult {
    let has = collection::peek::<Stream, dyn View, _>(v, key, |s| s.groups.contains_key(group))?;
    if has != Some(true) {
        return Err(no_group(key, group, ""));
    }
    Ok(())
}

pub(super) fn xclaim(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    require_group(v, key, group)?;
    let min_idle = min_idle_arg(args.get(4), "XCLAIM")?;
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match parse_strict(args.get(j)) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = now_ms(v);
    let o = claim_options(args, j, now)?;
    let delivery_time = match o.delivery_time {
        Some(t) if t >= 0 && t as u64 <= now => t as u64,
        _ => now,
    };
    let name = Bytes::copy_from_slice(consumer);
    let mut body = Reply::new(128);
    body.resp3 = reply.resp3;
    let claimed = modify_stream(v, key, false, |s| {
        // Each entry's fields (None: not in the stream) before the group is borrowed.
        let entries: Vec<Option<Vec<Bytes>>> = ids
            .iter()
            .map(|&id| s.get(id).map(|e| e.fields.clone()))
            .collect();
        let Some(g) = s.groups.get_mut(group) else {
            return Ok((0, false));
        };
        let mut changed = false;
        if o.last_id > g.last_id {
            g.last_id = o.last_id;
            changed = true;
        }
        let mut claimed = 0usize;
        for (&id, fields) in ids.iter().zip(entries) {
            let Some(fields) = fields else {
                changed |= g.ack(id);
                continue;
            };
            let fresh = !g.pel.contains_key(&id);
            if fresh && !o.force {
                continue;
            }
            if !fresh && min_idle > 0 && now.saturating_sub(g.pel[&id].delivery_time) < min_idle {
                continue;
            }
            g.consumer(&name, now);
            if fresh {
                g.deliver(id, &name, delivery_time);
            } else {
                g.reassign(id, &name);
            }
            if let Some(n) = g.pel.get_mut(&id) {
                n.delivery_time = delivery_time;
                match o.retry_count {
                    Some(c) if c >= 0 => n.delivery_count = c as u64,
                    _ if !o.justid => n.delivery_count = n.delivery_count.saturating_add(1),
                    _ => {}
                }
            }
            if o.justid {
                reply_id(&mut body, id);
            } else {
                reply_entry(&mut body, id, &fields);
            }
            claimed += 1;
            changed = true;
        }
        Ok((claimed, changed))
    })?;
    reply.array(claimed.unwrap_or(0));
    reply.out.extend_from_slice(&body.out);
    Ok(())
}

pub(super) fn xautoclaim(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let min_idle = min_idle_arg(args.get(4), "XAUTOCLAIM")?;
    let start = range_start(args.get(5))?;
    let mut count: u64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if opt.eq_ignore_ascii_case(b"COUNT") && more > 0 {
            let max = (i64::MAX / 16) as u64;
            count = crate::value::parse_i64(args.get(j + 1))
                .filter(|&n| n >= 1 && n as u64 <= max)
                .ok_or_else(|| raw("ERR COUNT must be > 0"))? as u64;
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"JUSTID") {
            justid = true;
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    require_group(v, key, group)?;
    let now = now_ms(v);
    let name = Bytes::copy_from_slice(consumer);
    let mut claimed_body = Reply::new(128);
    claimed_body.resp3 = reply.resp3;
    let outcome = modify_stream(v, key, false, |s| {
        let attempts = count.saturating_mul(10);
        let candidates: Vec<(StreamId, Option<Vec<Bytes>>)> = match s.groups.get(group) {
            Some(g) => g
                .pel
                .range(start..)
                .map(|(k, _)| *k)
                .take(usize::try_from(attempts.saturating_add(1)).unwrap_or(usize::MAX))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|id| (id, s.get(id).map(|e| e.fields.clone())))
                .collect(),
            None => Vec::new(),
        };
        let Some(g) = s.groups.get_mut(group) else {
            return Ok(((StreamId::MIN, 0usize, Vec::new()), false));
        };
        let (mut left, mut tries) = (count, attempts);
        let (mut claimed, mut deleted) = (0usize, Vec::new());
        let mut next = 0;
        while tries > 0 && left > 0 && next < candidates.len() {
            tries -= 1;
            let (id, fields) = &candidates[next];
            let id = *id;
            next += 1;
            let Some(fields) = fields else {
                g.ack(id);
                deleted.push(id);
                left -= 1;
                continue;
            };
            if min_idle > 0 && now.saturating_sub(g.pel[&id].delivery_time) < min_idle {
                continue;
            }
            g.consumer(&name, now);
            g.reassign(id, &name);
            if let Some(n) = g.pel.get_mut(&id) {
                n.delivery_time = now;
                if !justid {
                    n.delivery_count = n.delivery_count.saturating_add(1);
                }
            }
            if justid {
                reply_id(&mut claimed_body, id);
            } else {
                reply_entry(&mut claimed_body, id, fields);
            }
            claimed += 1;
            left -= 1;
        }
        let cursor = candidates.get(next).map_or(StreamId::MIN, |(id, _)| *id);
        let changed = claimed > 0 || !deleted.is_empty();
        Ok(((cursor, claimed, deleted), changed))
    })?;
    let (cursor, claimed, deleted) = outcome.unwrap_or((StreamId::MIN, 0, Vec::new()));
    reply.array(3);
    reply_id(reply, cursor);
    reply.array(claimed);
    reply.out.extend_from_slice(&claimed_body.out);
    reply.array(deleted.len());
    for id in deleted {
        reply_id(reply, id);
    }
    Ok(())
}
