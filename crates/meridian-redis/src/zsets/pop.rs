//! ZPOPMIN, ZPOPMAX, ZMPOP and the blocking BZPOPMIN, BZPOPMAX, BZMPOP (Redis's
//! `genericZpopCommand`, `blockingGenericZpopCommand`, `zmpopGenericCommand`).
//!
//! The blocking forms never wait here: with data they pop as their non-blocking twin does;
//! with every source key absent they answer Redis's timeout reply, the null array (what Redis
//! answers inside MULTI too). The server waits on [`blocking_source_keys`] and runs them again.

use super::{Member, ZSet, arg, modify_ok, reply_entries};
use crate::args::Args;
use crate::command::Cmd;
use crate::error::{CmdError, Result, SYNTAX, raw};
use crate::reply::Reply;
use crate::value::{parse_i64, parse_timeout};
use crate::view::View;

/// The argument positions of the keys a blocking sorted-set command pops from (BZPOPMIN and
/// BZPOPMAX: every argument between the name and the timeout; BZMPOP: the `numkeys` keys
/// after its `numkeys`, cut to the arguments present, none when `numkeys` is not a positive
/// integer). Empty for any other command.
pub fn blocking_source_keys(cmd: Cmd, args: Args<'_>) -> Vec<usize> {
    match cmd {
        Cmd::Bzpopmin | Cmd::Bzpopmax if args.len() >= 3 => (1..args.len() - 1).collect(),
        Cmd::Bzmpop if args.len() >= 4 => match parse_i64(args.get(2)) {
            Some(n) if n >= 1 => {
                let end = usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .saturating_add(3)
                    .min(args.len());
                (3..end).collect()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// A pop's result: the key popped from and its entries, in pop order.
pub type Popped<'k> = (&'k [u8], Vec<(f64, Member)>);

/// Pops up to `count` entries from the first of `keys` that exists (lowest first, or highest
/// with `max`), deleting it when emptied. Like Redis, only keys up to that one are
/// type-checked: the first existing key of another type is WRONGTYPE. `None` when no key
/// exists; `count` 0 finds the key but pops nothing.
pub fn pop_first<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
    max: bool,
    count: u64,
) -> Result<Option<Popped<'k>>> {
    for key in keys {
        let popped = modify_ok(v, key, |z| {
            let popped = pop_n(z, max, count);
            let changed = !popped.is_empty();
            (popped, changed)
        })?;
        if let Some(popped) = popped {
            return Ok(Some((key, popped)));
        }
    }
    Ok(None)
}

fn pop_n(z: &mut ZSet, max: bool, count: u64) -> Vec<(f64, Member)> {
    let n = usize::try_from(count).unwrap_or(usize::MAX).min(z.len());
    (0..n).filter_map(|_| z.pop(max)).collect()
}

/// A positive count as Redis's `getRangeLongFromObjectOrReply(1, LONG_MAX, msg)` reads it.
fn positive(a: &[u8], msg: &'static str) -> std::result::Result<u64, CmdError> {
    match parse_i64(a) {
        Some(n) if n >= 1 => Ok(n as u64),
        _ => Err(raw(msg)),
    }
}

/// ZMPOP/BZMPOP's `numkeys key... MIN|MAX [COUNT count]` from `numkeys_at`: the keys'
/// positions, whether MAX, and the count.
fn parse_mpop(
    args: Args<'_>,
    numkeys_at: usize,
) -> std::result::Result<(std::ops::Range<usize>, bool, u64), CmdError> {
    let numkeys = positive(args.get(numkeys_at), "ERR numkeys should be greater than 0")?;
    let first = numkeys_at + 1;
    let where_at = match usize::try_from(numkeys)
        .ok()
        .and_then(|n| first.checked_add(n))
    {
        Some(w) if w < args.len() => w,
        _ => return Err(raw(SYNTAX)),
    };
    let w = args.get(where_at);
    let max = if w.eq_ignore_ascii_case(b"MIN") {
        false
    } else if w.eq_ignore_ascii_case(b"MAX") {
        true
    } else {
        return Err(raw(SYNTAX));
    };
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        let more = j + 1 < args.len();
        if count.is_none() && args.get(j).eq_ignore_ascii_case(b"COUNT") && more {
            count = Some(positive(
                args.get(j + 1),
                "ERR count should be greater than 0",
            )?);
            j += 2;
        } else {
            return Err(raw(SYNTAX));
        }
    }
    Ok((first..where_at, max, count.unwrap_or(1)))
}

/// `[key, [[member, score], ...]]` (ZMPOP, BZMPOP in both protocols), or the null array.
fn reply_mpop(reply: &mut Reply, found: Option<Popped<'_>>) {
    let Some((key, items)) = found else {
        reply.null_array();
        return;
    };
    reply.array(2);
    reply.bulk(key);
    reply.array(items.len());
    for (s, m) in &items {
        reply.array(2);
        reply.bulk(m);
        reply.double(*s);
    }
}

/// Runs a pop command (its arity checked by the caller).
pub(super) fn exec(
    cmd: Cmd,
    view: &mut dyn View,
    args: Args<'_>,
    reply: &mut Reply,
) -> std::result::Result<(), CmdError> {
    match cmd {
        Cmd::Zpopmin | Cmd::Zpopmax => {
            let key = arg(args, cmd, 1)?;
            if args.len() > 3 {
                return Err(raw(SYNTAX));
            }
            let count = match args.len() {
                3 => match parse_i64(args.get(2)) {
                    None => return Err(raw("ERR value is not an integer or out of range")),
                    Some(n) if n < 0 => {
                        return Err(raw("ERR value is out of range, must be positive"));
                    }
                    Some(n) => Some(n as u64),
                },
                _ => None,
            };
            let found = pop_first(view, [key], cmd == Cmd::Zpopmax, count.unwrap_or(1))?;
            let items = found.map(|(_, items)| items).unwrap_or_default();
            if count.is_some() {
                // With a count: pairs in RESP3, flat in RESP2.
                reply_entries(reply, &items, true);
            } else {
                // Without: always flat.
                reply.array(items.len() * 2);
                for (s, m) in &items {
                    reply.bulk(m);
                    reply.double(*s);
                }
            }
        }
        Cmd::Zmpop => {
            let (keys, max, count) = parse_mpop(args, 1)?;
            let found = pop_first(view, keys.map(|i| args.get(i)), max, count)?;
            reply_mpop(reply, found);
        }
        Cmd::Bzmpop => {
            let (keys, max, count) = parse_mpop(args, 2)?;
            parse_timeout(args.get(1))?;
            let found = pop_first(view, keys.map(|i| args.get(i)), max, count)?;
            reply_mpop(reply, found);
        }
        Cmd::Bzpopmin | Cmd::Bzpopmax => {
            let last = args.len() - 1;
            parse_timeout(arg(args, cmd, last)?)?;
            let keys = (1..last).map(|i| args.get(i));
            match pop_first(view, keys, cmd == Cmd::Bzpopmax, 1)? {
                Some((key, items)) if !items.is_empty() => {
                    reply.array(1 + 2 * items.len());
                    reply.bulk(key);
                    for (s, m) in &items {
                        reply.bulk(m);
                        reply.double(*s);
                    }
                }
                _ => reply.null_array(),
            }
        }
        _ => return Err(raw(SYNTAX)),
    }
    Ok(())
}
