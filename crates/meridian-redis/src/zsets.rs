//! Redis sorted-set-command semantics over a [`View`]: the one copy of what ZADD, ZINCRBY,
//! ZREM, ZREMRANGEBYSCORE/RANK/LEX, ZUNION/ZINTER/ZDIFF (and their STORE forms), ZINTERCARD,
//! ZRANGE (BYSCORE, BYLEX, REV, LIMIT, WITHSCORES), ZRANGESTORE, ZRANGEBYSCORE,
//! ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREVRANGE, ZCOUNT, ZLEXCOUNT, ZCARD, ZSCORE,
//! ZMSCORE, ZRANK, ZREVRANK, ZSCAN, ZPOPMIN, ZPOPMAX, ZMPOP, ZRANDMEMBER, BZPOPMIN, BZPOPMAX
//! and BZMPOP mean, reply for reply and error for error Redis 7.0's.
//!
//! A sorted set is a [`ZSet`] ([`encoding`]): a `(score, member)` tree for ranges, ranks and
//! pops and a `member → score` map for lookups. Its stored form is **one value**, an envelope
//! of kind [`Kind::ZSet`] whose data is [`encoding`]'s entry list sorted by (score, member).
//! Every command reaches the set through [`crate::collection`]'s paths ([`collection::read`],
//! [`collection::store`], and a local `modify` that is `collection::update` recording a write
//! only when the set changed), so it runs over any [`View`] with the view's atomicity.
//!
//! **Cost**: on a view that keeps objects (the standalone keyspace) the set is changed in
//! place, never decoded or encoded: ZADD, ZINCRBY, ZREM, ZSCORE, ZMSCORE (per member), ZCARD,
//! a pop (per member popped) cost O(log n); ZRANK/ZREVRANK O(min(rank, n − rank)); a score
//! range (and a lex range over equal scores) O(log n + offset + answer), a rank range
//! O(min(start, n − stop) + answer); ZSCAN, ZRANDMEMBER and ZUNION/ZINTER/ZDIFF
//! O(n) (their sources are copied before the destination is written). On a view of bytes (a
//! cluster's one-key view, a MULTI overlay) every command but ZCARD (which reads only the
//! count) decodes the set, O(n log n), and a write re-encodes it, O(n); there a write whose
//! encoding exceeds [`View::max_value_len`] is refused with `ERR zset exceeds maximum allowed
//! size (proto-max-bulk-len)` and nothing changes. A write that changes nothing (ZADD of
//! equal scores, ZREM of absent members, an empty pop) writes nothing on either path, as
//! Redis signals no key then.
//!
//! **Redis's rules kept**: a sorted-set command on a key of another type answers
//! `-WRONGTYPE`; a *set* is a valid input of ZUNION/ZINTER/ZDIFF/ZINTERCARD (every member
//! scoring 1, read by [`crate::sets::members`]); an empty sorted set does not exist (the last
//! ZREM/ZPOP/ZREMRANGE deletes the key, a STORE of an empty result deletes the destination); a
//! write keeps the key's TTL, a STORE replaces the destination (and drops its TTL) as Redis's
//! `setKey` does; equal scores order by member bytes; checks run in Redis's order (ZADD's
//! option conflicts and every score before the key's type, range bounds before the key,
//! ZUNION's source types before its options, BZMPOP's numkeys/where/COUNT before its timeout).
//!
//! **Blocking commands** (BZPOPMIN, BZPOPMAX, BZMPOP): the server waits, not this module.
//! [`exec_on_view`] checks every argument, then serves the first source key holding data
//! exactly as Redis replies, or, when every source key is absent, answers what Redis answers
//! on a timeout (the null array) — which is also Redis's reply inside MULTI. The server learns
//! which keys to wait on from [`blocking_source_keys`].
//!
//! **Where it departs**: ZSCAN answers the whole set in one call with cursor 0 (as Redis does
//! for a set of its compact encoding; COUNT is a hint) and formats scores as Redis's compact
//! encoding does (`%.17g`, integers without a fraction) whatever the set's size.
//! ZRANDMEMBER with a negative count (repetitions allowed) refuses more than
//! [`MAX_RANDOM_REPEATS`] elements with `ERR value is out of range`, where Redis builds a
//! reply of any length. Score range bounds are read as C's `strtod` reads them except
//! hexadecimal floats, which are refused. ZUNION's SUM adds in the order of the inputs sorted
//! by size (stably), as Redis does (Redis's `qsort` is not stable: inputs of equal size may
//! add in another order, which changes only the last bit of some sums of three or more).

pub mod encoding;
mod pop;
pub mod ranges;
mod setops;

use crate::args::Args;
use crate::collection;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::scan::parse_cursor;
use crate::value::{format_double, glob_match, parse_f64};
use crate::view::{Entry, Kind, View};
pub use encoding::{Member, Score, ZSet};
pub use pop::{Popped, blocking_source_keys, pop_first};
use ranges::{RangeBy, RangeSpec, parse_lex_range, parse_score_range, select};

/// The most elements ZRANDMEMBER with a negative count answers.
pub use crate::value::MAX_RANDOM_REPEATS;

/// Redis's error when an increment leaves a score NaN (`+inf` plus `-inf`).
const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";

type CmdResult = std::result::Result<(), CmdError>;

// ----- loading and storing ---------------------------------------------------------------

/// The sorted set an entry holds: WRONGTYPE for another type, `Corrupt` for bytes that do not
/// decode.
pub fn decode(e: &Entry) -> Result<ZSet> {
    if e.kind != Kind::ZSet {
        return Err(RedisError::WrongType);
    }
    ZSet::decode(&e.data).map_err(RedisError::Corrupt)
}

/// The sorted set at `key` and its key's expiry, decoded from the view's bytes, for a write
/// (no hit/miss counted).
pub fn load<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<(ZSet, Option<u64>)>> {
    collection::load::<ZSet, V>(v, key)
}

/// Stores a copy of `z` at `key` with `expiry`, or deletes the key when `z` is empty. On a
/// view that keeps bytes, refuses (nothing written) an encoding longer than the view's
/// maximum. (The commands here store what they own with [`collection::store`].)
pub fn store<V: View + ?Sized>(v: &mut V, key: &[u8], z: &ZSet, expiry: Option<u64>) -> Result<()> {
    if z.is_empty() {
        return v.store(key, None);
    }
    collection::store(v, key, z.clone(), expiry)
}

/// [`collection::modify`] of the sorted set at `key`.
fn modify<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    create: bool,
    f: impl FnOnce(&mut ZSet) -> std::result::Result<(R, bool), ZaddError>,
) -> std::result::Result<Option<R>, ZaddError> {
    collection::modify::<ZSet, V, R, ZaddError>(v, key, create, f)
}

/// [`modify`] for a write that cannot fail once its arguments are checked.
fn modify_ok<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    f: impl FnOnce(&mut ZSet) -> (R, bool),
) -> Result<Option<R>> {
    modify(v, key, false, |z| Ok(f(z))).map_err(|e| match e {
        ZaddError::Redis(e) => e,
        // `f` cannot fail.
        ZaddError::Nan => RedisError::Corrupt("unexpected NaN score"),
    })
}

/// Runs the read `f` over the sorted set at `key` (`None` when absent), counting a hit or a
/// miss: the held object itself, or the set decoded from the view's bytes.
fn read<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    f: impl FnOnce(&ZSet) -> R,
) -> Result<Option<R>> {
    collection::read::<ZSet, V, R>(v, key, |z| Ok(f(z)))
}

// ----- the commands, typed ---------------------------------------------------------------

/// ZADD's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZaddFlags {
    /// Only add new members.
    pub nx: bool,
    /// Only update existing members.
    pub xx: bool,
    /// Only update when the new score is greater.
    pub gt: bool,
    /// Only update when the new score is lower.
    pub lt: bool,
    /// Add the score to the current one (ZINCRBY).
    pub incr: bool,
}

/// What ZADD did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ZaddOutcome {
    /// Members created.
    pub added: u64,
    /// Members whose score changed.
    pub updated: u64,
    /// Pairs not skipped by NX/XX/GT/LT.
    pub processed: u64,
    /// The last processed pair's resulting score (INCR's reply).
    pub score: f64,
}

/// ZADD/ZINCRBY: applies every pair under `flags` (Redis's `zsetAdd`), keeping the key's TTL;
/// stores only when a member was added or changed. An increment leaving a score NaN fails
/// with [`ZaddError::Nan`] and stores nothing.
pub fn zadd<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    flags: ZaddFlags,
    pairs: &[(f64, &[u8])],
) -> std::result::Result<ZaddOutcome, ZaddError> {
    let done = modify(v, key, !flags.xx, |z| {
        // Every pair is decided (and a NaN refused) before the set changes: all or nothing.
        let (out, writes) = zadd_plan(z, flags, pairs)?;
        let changed = out.added + out.updated > 0;
        for (member, score) in writes {
            z.insert(member, score);
        }
        Ok((out, changed))
    })?;
    Ok(done.unwrap_or_default())
}

/// ZADD's outcome and the scores it sets, in order.
type ZaddPlan<'p> = (ZaddOutcome, Vec<(&'p [u8], Score)>);

/// What ZADD does to `z` (Redis's `zsetAdd` per pair), without changing it: its outcome and
/// the scores to set, in order. A pair naming a member an earlier pair set sees that score.
fn zadd_plan<'p>(
    z: &ZSet,
    flags: ZaddFlags,
    pairs: &[(f64, &'p [u8])],
) -> std::result::Result<ZaddPlan<'p>, ZaddError> {
    let mut out = ZaddOutcome::default();
    let mut writes: Vec<(&[u8], Score)> = Vec::new();
    // The scores set by earlier pairs (few: ZADD's pairs), over the set's.
    let mut pending: std::collections::BTreeMap<&[u8], f64> = std::collections::BTreeMap::new();
    for &(score, member) in pairs {
        let cur = match pending.get(member) {
            Some(s) => Some(*s),
            None => z.score(member),
        };
        let new = match cur {
            Some(_) if flags.nx => continue,
            Some(cur) => {
                let new = if flags.incr { score + cur } else { score };
                if new.is_nan() {
                    return Err(ZaddError::Nan);
                }
                if (flags.lt && new >= cur) || (flags.gt && new <= cur) {
                    continue;
                }
                out.processed += 1;
                out.score = new;
                // An equal score (`-0` for `0` included) leaves the entry as it is.
                if new == cur {
                    continue;
                }
                out.updated += 1;
                new
            }
            None if flags.xx => continue,
            None => {
                out.added += 1;
                out.processed += 1;
                out.score = score;
                score
            }
        };
        let s = Score::new(new).ok_or(ZaddError::Nan)?;
        pending.insert(member, new);
        writes.push((member, s));
    }
    Ok((out, writes))
}

/// Why [`zadd`] failed.
#[derive(Debug)]
pub enum ZaddError {
    /// An increment made a score NaN (nothing stored).
    Nan,
    /// The key's type, its bytes, the size limit or the backend.
    Redis(RedisError),
}

impl From<RedisError> for ZaddError {
    fn from(e: RedisError) -> Self {
        ZaddError::Redis(e)
    }
}

impl From<ZaddError> for CmdError {
    fn from(e: ZaddError) -> Self {
        match e {
            ZaddError::Nan => raw(NAN_SCORE),
            ZaddError::Redis(e) => e.into(),
        }
    }
}

/// ZREM: removes the members (one given twice counts once); deletes the key when none is
/// left. Returns how many were removed.
pub fn zrem<'m, V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    members: impl IntoIterator<Item = &'m [u8]>,
) -> Result<u64> {
    let removed = modify_ok(v, key, |z| {
        let mut removed = 0;
        for m in members {
            removed += z.remove(m).is_some() as u64;
        }
        (removed, removed > 0)
    })?;
    Ok(removed.unwrap_or(0))
}

/// ZRANGE and friends: the entries `spec` selects (empty for a missing key).
pub fn zrange<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    spec: &RangeSpec,
) -> Result<Vec<(f64, Member)>> {
    Ok(read(v, key, |z| select(z, spec))?.unwrap_or_default())
}

/// ZCOUNT and ZLEXCOUNT: how many entries `spec` selects, counting without copying them.
pub fn zcount<V: View + ?Sized>(v: &mut V, key: &[u8], spec: &RangeSpec) -> Result<u64> {
    Ok(read(v, key, |z| ranges::count(z, spec))?.unwrap_or(0))
}

/// ZREMRANGEBYSCORE/RANK/LEX: removes what `spec` selects; returns how many.
pub fn zremrange<V: View + ?Sized>(v: &mut V, key: &[u8], spec: &RangeSpec) -> Result<u64> {
    let gone = modify_ok(v, key, |z| {
        let gone = select(z, spec);
        for (_, m) in &gone {
            z.remove(m);
        }
        (gone.len() as u64, !gone.is_empty())
    })?;
    Ok(gone.unwrap_or(0))
}

/// ZCARD: the member count — a held set's length, or the count read from the bytes without
/// decoding the members.
pub fn zcard<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    Ok(collection::len::<ZSet, V>(v, key, true)?.unwrap_or(0) as u64)
}

/// ZSCORE.
pub fn zscore<V: View + ?Sized>(v: &mut V, key: &[u8], member: &[u8]) -> Result<Option<f64>> {
    Ok(read(v, key, |z| z.score(member))?.flatten())
}

/// ZRANK/ZREVRANK: the member's 0-based rank.
pub fn zrank<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    member: &[u8],
    rev: bool,
) -> Result<Option<u64>> {
    Ok(read(v, key, |z| {
        let r = z.rank(member)?;
        Some(if rev { z.len() - 1 - r } else { r } as u64)
    })?
    .flatten())
}

// ----- replies ---------------------------------------------------------------------------

/// Writes entries as Redis 7.0 does: members only, or with scores — a flat array in RESP2,
/// an array of `[member, score]` pairs in RESP3 (ZRANGE, ZUNION, ZRANDMEMBER, ZPOPMIN with a
/// count...).
pub(crate) fn reply_entries<M: AsRef<[u8]>>(
    reply: &mut Reply,
    items: &[(f64, M)],
    with_scores: bool,
) {
    let nested = with_scores && reply.resp3;
    reply.array(items.len() * if with_scores && !nested { 2 } else { 1 });
    for (s, m) in items {
        if nested {
            reply.array(2);
        }
        reply.bulk(m.as_ref());
        if with_scores {
            reply.double(*s);
        }
    }
}

// ----- the commands, from their arguments ------------------------------------------------

/// Whether [`exec_on_view`] executes `cmd`: every sorted-set command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::SortedSets
}

/// Argument `i`, or the command's arity error (never a panic, whoever checked the arity).
fn arg<'a>(args: Args<'a>, cmd: Cmd, i: usize) -> std::result::Result<&'a [u8], CmdError> {
    if i < args.len() {
        Ok(args.get(i))
    } else {
        Err(arity_error(cmd.spec().name))
    }
}

/// Executes a sorted-set command (one [`handles`] accepts) against `view`, writing its reply
/// in Redis's type (RESP2 or RESP3, as `reply` is set); an error is returned for the caller to
/// write. Arity is checked again here, so a caller that did not check gets Redis's error,
/// never a panic. A command touches the keys Redis's key specs name for it.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let name = cmd.spec().name;
    if !cmd.spec().arity_ok(args.len()) {
        return Err(arity_error(name));
    }
    match cmd {
        Cmd::Zadd => zadd_cmd(view, args, false, reply),
        Cmd::Zincrby => zadd_cmd(view, args, true, reply),
        Cmd::Zrem => {
            let key = arg(args, cmd, 1)?;
            reply.int(zrem(view, key, args.iter_from(2))? as i64);
            Ok(())
        }
        Cmd::Zremrangebyscore | Cmd::Zremrangebyrank | Cmd::Zremrangebylex => {
            let (key, a, b) = (arg(args, cmd, 1)?, arg(args, cmd, 2)?, arg(args, cmd, 3)?);
            let by = match cmd {
                Cmd::Zremrangebyrank => RangeBy::Rank(int_arg(a)?, int_arg(b)?),
                Cmd::Zremrangebyscore => RangeBy::Score(parse_score_range(a, b)?),
                _ => RangeBy::Lex(parse_lex_range(a, b)?),
            };
            let spec = RangeSpec {
                by,
                rev: false,
                offset: 0,
                limit: -1,
            };
            reply.int(zremrange(view, key, &spec)? as i64);
            Ok(())
        }
        Cmd::Zunionstore
        | Cmd::Zinterstore
        | Cmd::Zdiffstore
        | Cmd::Zunion
        | Cmd::Zinter
        | Cmd::Zdiff
        | Cmd::Zintercard => setops::exec(cmd, view, args, reply),
        Cmd::Zrange
        | Cmd::Zrangestore
        | Cmd::Zrangebyscore
        | Cmd::Zrevrangebyscore
        | Cmd::Zrangebylex
        | Cmd::Zrevrangebylex
        | Cmd::Zrevrange => zrange_cmd(cmd, view, args, reply),
        Cmd::Zcount | Cmd::Zlexcount => {
            let (key, a, b) = (arg(args, cmd, 1)?, arg(args, cmd, 2)?, arg(args, cmd, 3)?);
            let by = if cmd == Cmd::Zcount {
                RangeBy::Score(parse_score_range(a, b)?)
            } else {
                RangeBy::Lex(parse_lex_range(a, b)?)
            };
            let spec = RangeSpec {
                by,
                rev: false,
                offset: 0,
                limit: -1,
            };
            reply.int(i64::try_from(zcount(view, key, &spec)?).unwrap_or(i64::MAX));
            Ok(())
        }
        Cmd::Zcard => {
            let n = zcard(view, arg(args, cmd, 1)?)?;
            reply.int(i64::try_from(n).unwrap_or(i64::MAX));
            Ok(())
        }
        Cmd::Zscore => {
            let (key, member) = (arg(args, cmd, 1)?, arg(args, cmd, 2)?);
            match zscore(view, key, member)? {
                Some(s) => reply.double(s),
                None => reply.null(),
            }
            Ok(())
        }
        Cmd::Zmscore => {
            let scores = read(view, arg(args, cmd, 1)?, |z| {
                args.iter_from(2).map(|m| z.score(m)).collect::<Vec<_>>()
            })?;
            reply.array(args.len() - 2);
            for i in 0..args.len() - 2 {
                match scores.as_ref().and_then(|s| s.get(i).copied().flatten()) {
                    Some(s) => reply.double(s),
                    None => reply.null(),
                }
            }
            Ok(())
        }
        Cmd::Zrank | Cmd::Zrevrank => {
            let (key, member) = (arg(args, cmd, 1)?, arg(args, cmd, 2)?);
            match zrank(view, key, member, cmd == Cmd::Zrevrank)? {
                Some(r) => reply.int(r as i64),
                None => reply.null(),
            }
            Ok(())
        }
        Cmd::Zscan => zscan(view, args, reply),
        Cmd::Zrandmember => zrandmember(view, args, reply),
        Cmd::Zpopmin | Cmd::Zpopmax | Cmd::Zmpop | Cmd::Bzpopmin | Cmd::Bzpopmax | Cmd::Bzmpop => {
            pop::exec(cmd, view, args, reply)
        }
        other => Err(raw(format!(
            "ERR {} is not a sorted set command",
            other.spec().name.to_ascii_uppercase()
        ))),
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]` and
/// `ZINCRBY key increment member` (Redis parses ZINCRBY's arguments as ZADD's, INCR set).
fn zadd_cmd(view: &mut dyn View, args: Args<'_>, zincrby: bool, reply: &mut Reply) -> CmdResult {
    let key = args.get(1);
    let mut flags = ZaddFlags {
        incr: zincrby,
        ..ZaddFlags::default()
    };
    let mut ch = false;
    let mut i = 2;
    while i < args.len() {
        let o = args.get(i);
        if o.eq_ignore_ascii_case(b"NX") {
            flags.nx = true;
        } else if o.eq_ignore_ascii_case(b"XX") {
            flags.xx = true;
        } else if o.eq_ignore_ascii_case(b"CH") {
            ch = true;
        } else if o.eq_ignore_ascii_case(b"INCR") {
            flags.incr = true;
        } else if o.eq_ignore_ascii_case(b"GT") {
            flags.gt = true;
        } else if o.eq_ignore_ascii_case(b"LT") {
            flags.lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let rest = args.len() - i;
    if rest == 0 || !rest.is_multiple_of(2) {
        return Err(raw(SYNTAX));
    }
    if flags.nx && flags.xx {
        return Err(raw(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
        return Err(raw(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if flags.incr && rest > 2 {
        return Err(raw(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    // Every score parses before the key is looked at: all or nothing.
    let mut pairs = Vec::with_capacity(rest / 2);
    for j in (i..args.len()).step_by(2) {
        let score = parse_f64(args.get(j)).ok_or(RedisError::NotAFloat)?;
        pairs.push((score, args.get(j + 1)));
    }
    let out = zadd(view, key, flags, &pairs)?;
    if flags.incr {
        if out.processed > 0 {
            reply.double(out.score);
        } else {
            reply.null();
        }
    } else {
        reply.int(
            (if ch {
                out.added + out.updated
            } else {
                out.added
            }) as i64,
        );
    }
    Ok(())
}

/// The ZRANGE family (Redis's `zrangeGenericCommand`): options in any order, then their
/// conflicts, then the range, then the key.
fn zrange_cmd(cmd: Cmd, view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let store = cmd == Cmd::Zrangestore;
    let src_at = if store { 2 } else { 1 };
    // (by score / lex / rank fixed by the command, direction fixed)
    let (mut kind, mut rev): (Option<u8>, Option<bool>) = match cmd {
        Cmd::Zrangebyscore => (Some(b's'), Some(false)),
        Cmd::Zrevrangebyscore => (Some(b's'), Some(true)),
        Cmd::Zrangebylex => (Some(b'l'), Some(false)),
        Cmd::Zrevrangebylex => (Some(b'l'), Some(true)),
        Cmd::Zrevrange => (Some(b'r'), Some(true)),
        _ => (None, None),
    };
    let key = arg(args, cmd, src_at)?;
    let (min_arg, max_arg) = (arg(args, cmd, src_at + 1)?, arg(args, cmd, src_at + 2)?);
    let mut with_scores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = src_at + 3;
    while j < args.len() {
        let o = args.get(j);
        let left = args.len() - j - 1;
        if !store && o.eq_ignore_ascii_case(b"WITHSCORES") {
            with_scores = true;
        } else if o.eq_ignore_ascii_case(b"LIMIT") && left >= 2 {
            offset = int_arg(args.get(j + 1))?;
            limit = int_arg(args.get(j + 2))?;
            j += 2;
        } else if rev.is_none() && o.eq_ignore_ascii_case(b"REV") {
            rev = Some(true);
        } else if kind.is_none() && o.eq_ignore_ascii_case(b"BYLEX") {
            kind = Some(b'l');
        } else if kind.is_none() && o.eq_ignore_ascii_case(b"BYSCORE") {
            kind = Some(b's');
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    let kind = kind.unwrap_or(b'r');
    if limit != -1 && kind == b'r' {
        return Err(raw(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && kind == b'l' {
        return Err(raw(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let (mut lo, mut hi) = (min_arg, max_arg);
    if rev && kind != b'r' {
        // The range is given as max, min.
        std::mem::swap(&mut lo, &mut hi);
    }
    let by = match kind {
        b'r' => RangeBy::Rank(int_arg(lo)?, int_arg(hi)?),
        b's' => RangeBy::Score(parse_score_range(lo, hi)?),
        _ => RangeBy::Lex(parse_lex_range(lo, hi)?),
    };
    let spec = RangeSpec {
        by,
        rev,
        offset,
        limit,
    };
    if store {
        let dst = args.get(1);
        let items = zrange(view, key, &spec)?;
        let mut z = ZSet::default();
        for (s, m) in items {
            if let Some(s) = Score::new(s) {
                z.insert(&m, s);
            }
        }
        let n = z.len();
        store_result(view, dst, z)?;
        reply.int(n as i64);
        return Ok(());
    }
    let items = zrange(view, key, &spec)?;
    reply_entries(reply, &items, with_scores);
    Ok(())
}

/// A STORE command's result: replaces `dst` (no TTL, whatever it held), or deletes it when
/// `z` is empty. A view that keeps objects keeps `z` itself.
pub(crate) fn store_result(view: &mut dyn View, dst: &[u8], z: ZSet) -> Result<()> {
    if z.is_empty() {
        // Only a key that exists is deleted (a missing one stays missing); a held object
        // exists without being encoded to find out.
        let exists = view.object_mut(dst)?.is_some() || view.load(dst)?.is_some();
        if exists {
            view.store(dst, None)?;
        }
        return Ok(());
    }
    collection::store(view, dst, z, None)
}

/// `ZSCAN key cursor [MATCH pattern] [COUNT count]`: the cursor first, then the key (a
/// missing key answers the empty scan whatever the options), then the options, as Redis's
/// `scanGenericCommand`. The whole set is answered at once (cursor 0).
fn zscan(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let cmd = Cmd::Zscan;
    let key = arg(args, cmd, 1)?;
    parse_cursor(arg(args, cmd, 2)?)?;
    // The options are checked only when the key exists (a missing key answers the empty
    // scan whatever they are), after its type.
    let opts = zscan_options(args);
    let listed = read(view, key, |z| {
        let Ok(pattern) = &opts else {
            return Vec::new();
        };
        z.iter()
            .filter(|(_, m)| pattern.is_none_or(|p| glob_match(p, m, false)))
            .map(|(s, m)| (s, m.clone()))
            .collect::<Vec<_>>()
    })?;
    let Some(listed) = listed else {
        reply.array(2);
        reply.bulk(b"0");
        reply.array(0);
        return Ok(());
    };
    opts?;
    reply.array(2);
    reply.bulk(b"0");
    reply.array(listed.len() * 2);
    for (s, m) in listed {
        reply.bulk(&m);
        reply.bulk(format_double(s).as_bytes());
    }
    Ok(())
}

/// ZSCAN's `[MATCH pattern] [COUNT count]`: the pattern (`None`: every member).
fn zscan_options(args: Args<'_>) -> std::result::Result<Option<&[u8]>, CmdError> {
    let mut pattern: Option<&[u8]> = None;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        if i + 1 >= args.len() {
            return Err(raw(SYNTAX));
        }
        if opt.eq_ignore_ascii_case(b"COUNT") {
            if int_arg(args.get(i + 1))? < 1 {
                return Err(raw(SYNTAX));
            }
        } else if opt.eq_ignore_ascii_case(b"MATCH") {
            let p = args.get(i + 1);
            pattern = (p != b"*").then_some(p);
        } else {
            return Err(raw(SYNTAX));
        }
        i += 2;
    }
    Ok(pattern)
}

/// `ZRANDMEMBER key [count [WITHSCORES]]` (Redis's `zrandmemberCommand`): a random member, or
/// `count` distinct ones (the whole set, in order, when `count` is not below its size), or
/// `-count` with repetitions.
fn zrandmember(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    use rand::Rng;
    let cmd = Cmd::Zrandmember;
    let key = arg(args, cmd, 1)?;
    if args.len() == 2 {
        let picked = read(view, key, |z| {
            let n = z.len();
            if n == 0 {
                return None;
            }
            let i = rand::rng().random_range(0..n);
            // Walked from the nearer end.
            let m = if i < n / 2 {
                z.iter().nth(i)
            } else {
                z.iter().rev().nth(n - 1 - i)
            };
            m.map(|(_, m)| m.clone())
        })?;
        reply.opt_bulk(picked.flatten().as_deref());
        return Ok(());
    }
    let count = int_arg(args.get(2))?;
    if count == i64::MIN {
        return Err(raw(
            "ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ));
    }
    let with_scores = match args.len() {
        3 => false,
        4 if args.get(3).eq_ignore_ascii_case(b"WITHSCORES") => {
            if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
                return Err(raw("ERR value is out of range"));
            }
            true
        }
        _ => return Err(raw(SYNTAX)),
    };
    let items = read(view, key, |z| random_entries(z, count))?;
    let Some(items) = items else {
        // Redis answers the empty array in both protocols here.
        reply.array(0);
        return Ok(());
    };
    reply_entries(reply, &items?, with_scores);
    Ok(())
}

/// ZRANDMEMBER's `count` entries of `z` (see [`zrandmember`]).
fn random_entries(z: &ZSet, count: i64) -> std::result::Result<Vec<(f64, Member)>, CmdError> {
    let entries: Vec<(f64, &Member)> = if count == 0 {
        Vec::new()
    } else {
        z.iter().collect()
    };
    let n = entries.len();
    let picked =
        crate::value::random_indexes(n, count).ok_or_else(|| raw("ERR value is out of range"))?;
    Ok(picked
        .into_iter()
        .filter_map(|i| entries.get(i).map(|(s, m)| (*s, (*m).clone())))
        .collect())
}

#[cfg(test)]
mod tests;
