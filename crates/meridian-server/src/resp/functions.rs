//! `FUNCTION`: Redis 7's function libraries over the node's functions interpreter
//! ([`crate::scripting::Scripts`]): LOAD [REPLACE], LIST [WITHCODE] [LIBRARYNAME pattern],
//! DELETE, FLUSH, DUMP, RESTORE [FLUSH|APPEND|REPLACE], STATS, KILL, HELP, with Redis's
//! replies and errors. FCALL runs them (`resp::scripting`).
//!
//! DUMP's payload is Meridian's own (the libraries' code, a version and a checksum), as opaque
//! to clients as Redis's RDB payload; RESTORE takes what DUMP gave, all or nothing.

use crate::resp::RespContext;
use meridian_lua::{LibraryInfo, RestorePolicy};
use meridian_redis::error::{CmdError, raw, subcommand_arity, unknown_subcommand};
use meridian_redis::value::glob_match;
use meridian_redis::{Args, Reply};

/// Runs `FUNCTION <subcommand> ...`.
pub(crate) fn function(
    ctx: &RespContext,
    reply: &mut Reply,
    args: Args<'_>,
) -> Result<(), CmdError> {
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("KILL") {
        subcommand_arity("function", sub, argc == 2)?;
        ctx.scripts.kill(false).map_err(raw)?;
        reply.ok();
        return Ok(());
    }
    if is("STATS") {
        subcommand_arity("function", sub, argc == 2)?;
        stats(ctx, reply);
        return Ok(());
    }
    if is("HELP") {
        reply.help(HELP);
        return Ok(());
    }
    let mut engines = ctx.scripts.engine();
    let engine = &mut engines.functions;
    if is("LOAD") {
        let (replace, code) = load_args(args)?;
        let name = engine.load_library(code, replace).map_err(raw)?;
        reply.bulk(name.as_bytes());
    } else if is("DELETE") {
        subcommand_arity("function", sub, argc == 3)?;
        if !engine.delete_library(args.get(2)) {
            return Err(raw("ERR Library not found"));
        }
        reply.ok();
    } else if is("FLUSH") {
        if argc > 3 {
            return Err(syntax(sub));
        }
        if argc == 3 && !matches_any(args.get(2), &["ASYNC", "SYNC"]) {
            return Err(raw("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"));
        }
        engine.flush_libraries();
        reply.ok();
    } else if is("LIST") {
        let (withcode, pattern) = list_args(args)?;
        let libs: Vec<&LibraryInfo> = engine
            .libraries()
            .filter(|l| pattern.is_none_or(|p| glob_match(p, l.name.as_bytes(), false)))
            .collect();
        reply.array(libs.len());
        for lib in libs {
            list_entry(reply, lib, withcode);
        }
    } else if is("DUMP") {
        subcommand_arity("function", sub, argc == 2)?;
        reply.bulk(&engine.dump_libraries());
    } else if is("RESTORE") {
        subcommand_arity("function", sub, argc >= 3)?;
        if argc > 4 {
            return Err(syntax(sub));
        }
        let policy = if argc == 4 {
            restore_policy(args.get(3))?
        } else {
            RestorePolicy::Append
        };
        engine.restore_libraries(args.get(2), policy).map_err(raw)?;
        reply.ok();
    } else {
        return Err(unknown_subcommand("function", sub));
    }
    let counts = engine
        .libraries()
        .fold((0, 0), |(l, f), lib| (l + 1, f + lib.functions.len()));
    ctx.scripts.set_library_counts(counts);
    Ok(())
}

/// FUNCTION STATS: the running script or function (while busy too) and the library counts
/// (as of the last change: a running script holds the interpreters).
fn stats(ctx: &RespContext, reply: &mut Reply) {
    reply.map(2);
    reply.bulk(b"running_script");
    match ctx.scripts.running() {
        Some((info, elapsed)) => {
            reply.map(3);
            reply.bulk(b"name");
            reply.bulk(info.name.as_bytes());
            reply.bulk(b"command");
            let parts: Vec<&str> = info.command.split(' ').collect();
            reply.array(parts.len());
            for p in parts {
                reply.bulk(p.as_bytes());
            }
            reply.bulk(b"duration_ms");
            reply.int(elapsed.as_millis().min(i64::MAX as u128) as i64);
        }
        None => reply.null(),
    }
    let (libraries, functions) = ctx.scripts.library_counts();
    reply.bulk(b"engines");
    reply.map(1);
    reply.bulk(b"LUA");
    reply.map(2);
    reply.bulk(b"libraries_count");
    reply.int(libraries as i64);
    reply.bulk(b"functions_count");
    reply.int(functions as i64);
}

/// Redis's error for a subcommand given too many arguments.
fn syntax(sub: &[u8]) -> CmdError {
    raw(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
        String::from_utf8_lossy(sub)
    ))
}

/// `FUNCTION LOAD [REPLACE] code`.
fn load_args(args: Args<'_>) -> Result<(bool, &[u8]), CmdError> {
    let mut replace = false;
    let mut i = 2;
    while i + 1 < args.len() {
        let a = args.get(i);
        if !a.eq_ignore_ascii_case(b"REPLACE") {
            return Err(raw(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(a)
            )));
        }
        replace = true;
        i += 1;
    }
    if i >= args.len() {
        return Err(raw("ERR Function code is missing"));
    }
    Ok((replace, args.get(i)))
}

fn restore_policy(a: &[u8]) -> Result<RestorePolicy, CmdError> {
    match a.to_ascii_uppercase().as_slice() {
        b"FLUSH" => Ok(RestorePolicy::Flush),
        b"APPEND" => Ok(RestorePolicy::Append),
        b"REPLACE" => Ok(RestorePolicy::Replace),
        _ => Err(raw(
            "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
        )),
    }
}

/// One library of FUNCTION LIST, as Redis 7 lists it.
fn list_entry(reply: &mut Reply, lib: &LibraryInfo, withcode: bool) {
    reply.map(if withcode { 4 } else { 3 });
    reply.bulk(b"library_name");
    reply.bulk(lib.name.as_bytes());
    reply.bulk(b"engine");
    reply.bulk(b"LUA");
    reply.bulk(b"functions");
    reply.array(lib.functions.len());
    for f in lib.functions.values() {
        reply.map(3);
        reply.bulk(b"name");
        reply.bulk(f.name.as_bytes());
        reply.bulk(b"description");
        reply.opt_bulk(f.description.as_deref().map(str::as_bytes));
        reply.bulk(b"flags");
        let flags = flag_names(&f.flags);
        reply.set(flags.len());
        for name in flags {
            reply.bulk(name.as_bytes());
        }
    }
    if withcode {
        reply.bulk(b"library_code");
        reply.bulk(&lib.code);
    }
}

fn flag_names(f: &meridian_lua::shebang::Flags) -> Vec<&'static str> {
    [
        (f.no_writes, "no-writes"),
        (f.allow_oom, "allow-oom"),
        (f.allow_stale, "allow-stale"),
        (f.no_cluster, "no-cluster"),
        (f.allow_cross_slot, "allow-cross-slot-keys"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect()
}

/// `FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern]`, as Redis checks it.
fn list_args(args: Args<'_>) -> Result<(bool, Option<&[u8]>), CmdError> {
    let mut i = 2;
    let (mut withcode, mut pattern) = (false, None);
    while i < args.len() {
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"WITHCODE") && !withcode {
            withcode = true;
            i += 1;
        } else if a.eq_ignore_ascii_case(b"LIBRARYNAME") && pattern.is_none() {
            if i + 1 >= args.len() {
                return Err(raw("ERR library name argument was not given"));
            }
            pattern = Some(args.get(i + 1));
            i += 2;
        } else {
            return Err(raw(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(a)
            )));
        }
    }
    Ok((withcode, pattern))
}

fn matches_any(a: &[u8], names: &[&str]) -> bool {
    names.iter().any(|n| a.eq_ignore_ascii_case(n.as_bytes()))
}

const HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously delete the libraries.",
    "    * SYNC: Synchronously delete the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old libraries with the new libraries (notice that even on this option there is a chance of failure in case of functions name collision with another library).",
    "HELP",
    "    Print this help.",
];
