//! Generic key commands over a [`View`] that move or copy a whole value, whatever its type:
//! RENAME, RENAMENX, COPY — reply for reply and error for error Redis 7's.
//!
//! A value moves with its type and its TTL (the envelope carries both). The backend makes
//! the two keys one atomic unit (the standalone keyspace locks both stripes and writes one
//! batch; a cluster writes them as one group), so no reader sees the key in both places or
//! in neither. RENAME of a key onto itself succeeds and changes nothing, as in Redis.
//! `COPY ... DB n` accepts only the current database (0): a standalone node has one.
//! SORT and SORT_RO are routed here too and run by [`crate::sort`].

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::view::{EntryRef, View};

/// Whether this module runs `cmd`.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Keys
}

/// Executes RENAME, RENAMENX or COPY over `view`.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(cmd.spec().name));
    }
    if matches!(cmd, Cmd::Sort | Cmd::SortRo) {
        return crate::sort::exec_on_view(cmd, args, view, reply);
    }
    if matches!(cmd, Cmd::Dump | Cmd::Restore) {
        return crate::dump::exec_on_view(cmd, args, view, reply);
    }
    let (src, dst) = (args.get(1), args.get(2));
    match cmd {
        Cmd::Rename | Cmd::Renamenx => {
            let Some(e) = view.load(src)? else {
                return Err(raw("ERR no such key"));
            };
            if src == dst {
                reply_moved(cmd, reply, cmd == Cmd::Rename);
                return Ok(());
            }
            if cmd == Cmd::Renamenx && view.load(dst)?.is_some() {
                reply.int(0);
                return Ok(());
            }
            store(view, dst, &e)?;
            view.store(src, None)?;
            reply_moved(cmd, reply, true);
        }
        Cmd::Copy => {
            let replace = copy_options(args)?;
            if src == dst {
                return Err(raw("ERR source and destination objects are the same"));
            }
            let Some(e) = view.load(src)? else {
                reply.int(0);
                return Ok(());
            };
            if !replace && view.load(dst)?.is_some() {
                reply.int(0);
                return Ok(());
            }
            store(view, dst, &e)?;
            reply.int(1);
        }
        _ => return Err(raw(format!("ERR {} is not a key command", cmd.spec().name))),
    }
    Ok(())
}

fn store(view: &mut dyn View, key: &[u8], e: &crate::view::Entry) -> crate::error::Result<()> {
    view.store(
        key,
        Some(EntryRef {
            data: &e.data,
            expiry: e.expiry,
            kind: e.kind,
        }),
    )
}

/// RENAME's `+OK`, RENAMENX's `:1` (or `:0` when nothing moved).
fn reply_moved(cmd: Cmd, reply: &mut Reply, moved: bool) {
    if cmd == Cmd::Rename {
        reply.ok();
    } else {
        reply.int(i64::from(moved));
    }
}

/// COPY's options: `REPLACE`, `DB n` (only this database, 0); whether REPLACE was given.
fn copy_options(args: Args<'_>) -> Result<bool, CmdError> {
    let mut replace = false;
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"REPLACE") {
            replace = true;
            i += 1;
        } else if a.eq_ignore_ascii_case(b"DB") && i + 1 < args.len() {
            let db = int_arg(args.get(i + 1))?;
            if db != 0 {
                return Err(raw("ERR DB index is out of range"));
            }
            i += 2;
        } else {
            return Err(raw(SYNTAX));
        }
    }
    Ok(replace)
}
