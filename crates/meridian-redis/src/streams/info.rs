//! XINFO STREAM (with FULL), XINFO GROUPS and XINFO CONSUMERS, as Redis 7.0 answers them.

use super::groups::{ConsumerGroup, ENTRIES_READ_UNKNOWN};
use super::id::StreamId;
use super::pending::subcommand_syntax;
use super::{Stream, group_lag, now_ms, read_stream, reply_id, reply_item, reply_items};
use crate::args::Args;
use crate::error::{CmdResult, int_arg, raw};
use crate::reply::Reply;
use crate::view::View;

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Print this help.",
];

pub(super) fn xinfo(v: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let sub = args.get(1);
    let eq = |s: &[u8]| sub.eq_ignore_ascii_case(s);
    let arity_ok = if eq(b"HELP") {
        args.len() == 2
    } else if eq(b"CONSUMERS") {
        args.len() == 4
    } else if eq(b"GROUPS") {
        args.len() == 3
    } else if eq(b"STREAM") {
        args.len() >= 3
    } else {
        return Err(crate::error::unknown_subcommand("xinfo", sub));
    };
    crate::error::subcommand_arity("xinfo", sub, arity_ok)?;
    if eq(b"HELP") {
        reply.help(XINFO_HELP);
        return Ok(());
    }
    let key = args.get(2);
    // STREAM's options are checked after the key, as Redis does.
    let now = now_ms(v);
    let found = read_stream(v, key, |s| {
        if eq(b"CONSUMERS") {
            let group = args.get(3);
            let Some(g) = s.groups.get(group) else {
                return Err(raw(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(group),
                    String::from_utf8_lossy(key)
                )));
            };
            consumers(g, now, reply);
        } else if eq(b"GROUPS") {
            reply.array(s.groups.len());
            for (name, g) in &s.groups {
                reply.map(6);
                reply.bulk(b"name");
                reply.bulk(name);
                reply.bulk(b"consumers");
                reply.int(g.consumers.len() as i64);
                reply.bulk(b"pending");
                reply.int(g.pel.len() as i64);
                reply.bulk(b"last-delivered-id");
                reply_id(reply, g.last_id);
                entries_read_and_lag(s, g, reply);
            }
        } else {
            stream(s, args, reply)?;
        }
        Ok(())
    })?;
    if found.is_none() {
        return Err(raw("ERR no such key"));
    }
    Ok(())
}

fn consumers(g: &ConsumerGroup, now: u64, reply: &mut Reply) {
    reply.array(g.consumers.len());
    for (name, c) in &g.consumers {
        reply.map(3);
        reply.bulk(b"name");
        reply.bulk(name);
        reply.bulk(b"pending");
        reply.int(c.pending.len() as i64);
        reply.bulk(b"idle");
        reply.int(now.saturating_sub(c.seen_time) as i64);
    }
}

/// A group's `entries-read` and `lag` fields.
fn entries_read_and_lag(s: &Stream, g: &ConsumerGroup, reply: &mut Reply) {
    reply.bulk(b"entries-read");
    if g.entries_read == ENTRIES_READ_UNKNOWN {
        reply.null();
    } else {
        reply.int(g.entries_read);
    }
    reply.bulk(b"lag");
    match group_lag(s, g) {
        Some(lag) => reply.int(lag),
        None => reply.null(),
    }
}

/// XINFO STREAM key [FULL [COUNT n]].
fn stream(s: &Stream, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let opts = args.len() - 3;
    let mut full = false;
    let mut count: usize = 10;
    if opts > 0 {
        if (opts != 1 && opts != 3) || !args.get(3).eq_ignore_ascii_case(b"FULL") {
            return Err(subcommand_syntax("xinfo", args.get(1)));
        }
        full = true;
        if opts == 3 {
            if !args.get(4).eq_ignore_ascii_case(b"COUNT") {
                return Err(subcommand_syntax("xinfo", args.get(1)));
            }
            let n = int_arg(args.get(5))?;
            count = if n < 0 {
                10
            } else {
                usize::try_from(n).unwrap_or(usize::MAX)
            };
        }
    }
    reply.map(if full { 9 } else { 10 });
    reply.bulk(b"length");
    reply.int(s.len() as i64);
    reply.bulk(b"radix-tree-keys");
    reply.int(s.node_count() as i64);
    reply.bulk(b"radix-tree-nodes");
    reply.int(s.node_count().max(1) as i64);
    reply.bulk(b"last-generated-id");
    reply_id(reply, s.last_id);
    reply.bulk(b"max-deleted-entry-id");
    reply_id(reply, s.max_deleted);
    reply.bulk(b"entries-added");
    reply.int(s.entries_added as i64);
    reply.bulk(b"recorded-first-entry-id");
    reply_id(reply, s.first_id);
    if !full {
        reply.bulk(b"groups");
        reply.int(s.groups.len() as i64);
        for (name, rev) in [(&b"first-entry"[..], false), (b"last-entry", true)] {
            reply.bulk(name);
            match s.range(StreamId::MIN, StreamId::MAX, 1, rev).first() {
                Some(item) => reply_item(reply, item),
                None => reply.null(),
            }
        }
        return Ok(());
    }
    reply.bulk(b"entries");
    reply_items(reply, &s.range(StreamId::MIN, StreamId::MAX, count, false));
    reply.bulk(b"groups");
    reply.array(s.groups.len());
    let cap = |n: usize| if count == 0 { n } else { n.min(count) };
    for (name, g) in &s.groups {
        reply.map(7);
        reply.bulk(b"name");
        reply.bulk(name);
        reply.bulk(b"last-delivered-id");
        reply_id(reply, g.last_id);
        entries_read_and_lag(s, g, reply);
        reply.bulk(b"pel-count");
        reply.int(g.pel.len() as i64);
        reply.bulk(b"pending");
        reply.array(cap(g.pel.len()));
        for (id, n) in g.pel.iter().take(cap(g.pel.len())) {
            reply.array(4);
            reply_id(reply, *id);
            reply.bulk(&n.consumer);
            reply.int(n.delivery_time as i64);
            reply.int(n.delivery_count as i64);
        }
        reply.bulk(b"consumers");
        reply.array(g.consumers.len());
        for (cname, c) in &g.consumers {
            reply.map(4);
            reply.bulk(b"name");
            reply.bulk(cname);
            reply.bulk(b"seen-time");
            reply.int(c.seen_time as i64);
            reply.bulk(b"pel-count");
            reply.int(c.pending.len() as i64);
            reply.bulk(b"pending");
            reply.array(cap(c.pending.len()));
            for id in c.pending.iter().take(cap(c.pending.len())) {
                let n = g.pel.get(id);
                reply.array(3);
                reply_id(reply, *id);
                reply.int(n.map_or(0, |n| n.delivery_time as i64));
                reply.int(n.map_or(0, |n| n.delivery_count as i64));
            }
        }
    }
    Ok(())
}
