//! `FUNCTION`: Redis 7's function libraries, as far as a node without a scripting engine can
//! answer them truthfully.
//!
//! Meridian has no Lua engine yet, so no library can exist: `FUNCTION FLUSH` empties the
//! (empty) set of libraries and answers OK, `LIST` an empty list, `STATS` no running script
//! and no engine, `DELETE` Redis's "Library not found", `KILL` Redis's `NOTBUSY`. `LOAD`,
//! `RESTORE` and `DUMP` are refused with the reason: they would need the engine.

use meridian_redis::error::{CmdError, raw, subcommand_arity, unknown_subcommand};
use meridian_redis::{Args, Reply};

/// Runs `FUNCTION <subcommand> ...`.
pub(crate) fn function(reply: &mut Reply, args: Args<'_>) -> Result<(), CmdError> {
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("FLUSH") {
        subcommand_arity("function", sub, argc <= 3)?;
        if argc == 3 && !matches_any(args.get(2), &["ASYNC", "SYNC"]) {
            return Err(raw("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"));
        }
        reply.ok();
    } else if is("LIST") {
        list_args(args)?;
        reply.array(0);
    } else if is("STATS") {
        subcommand_arity("function", sub, argc == 2)?;
        reply.map(2);
        reply.bulk(b"running_script");
        reply.null();
        reply.bulk(b"engines");
        reply.map(0);
    } else if is("DELETE") {
        subcommand_arity("function", sub, argc == 3)?;
        return Err(raw("ERR Library not found"));
    } else if is("KILL") {
        subcommand_arity("function", sub, argc == 2)?;
        return Err(raw("NOTBUSY No scripts in execution right now."));
    } else if is("LOAD") || is("RESTORE") || is("DUMP") {
        return Err(raw(format!(
            "ERR FUNCTION {} is not supported: Meridian has no scripting engine yet, so no \
             function library can be loaded or moved",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        )));
    } else if is("HELP") {
        reply.help(&[
            "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "FLUSH [ASYNC|SYNC]",
            "    Delete all the libraries (there are none: no scripting engine yet).",
            "LIST [WITHCODE] [LIBRARYNAME <pattern>]",
            "    Return the libraries (none).",
            "STATS",
            "    Return the running script (none) and the engines (none).",
            "HELP",
            "    Print this help.",
        ]);
    } else {
        return Err(unknown_subcommand("function", sub));
    }
    Ok(())
}

/// Checks `FUNCTION LIST [WITHCODE] [LIBRARYNAME pattern]` as Redis does.
fn list_args(args: Args<'_>) -> Result<(), CmdError> {
    let mut i = 2;
    let (mut withcode, mut pattern) = (false, false);
    while i < args.len() {
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"WITHCODE") && !withcode {
            withcode = true;
            i += 1;
        } else if a.eq_ignore_ascii_case(b"LIBRARYNAME") && !pattern {
            if i + 1 >= args.len() {
                return Err(raw("ERR library name argument was not given"));
            }
            pattern = true;
            i += 2;
        } else {
            return Err(raw(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(a)
            )));
        }
    }
    Ok(())
}

fn matches_any(a: &[u8], names: &[&str]) -> bool {
    names.iter().any(|n| a.eq_ignore_ascii_case(n.as_bytes()))
}
