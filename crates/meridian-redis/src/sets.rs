//! Redis set-command semantics over a [`View`]: the one copy of what SADD, SREM, SMOVE,
//! SISMEMBER, SMISMEMBER, SCARD, SPOP, SRANDMEMBER, SINTER, SINTERCARD, SINTERSTORE, SUNION,
//! SUNIONSTORE, SDIFF, SDIFFSTORE, SMEMBERS and SSCAN mean, reply for reply and error for
//! error Redis 7.0's (`t_set.c`).
//!
//! A set is **one value**. In memory it is a [`Set`] (a [`crate::collection::Collection`]):
//! sorted integers while Redis would hold an intset (at most [`INTSET_MAX_ENTRIES`] members,
//! each a `string2ll` integer), else a dense list of members indexed by a hash table (see
//! `sets/object.rs`). Stored, it is an envelope of kind [`Kind::Set`] whose data is
//!
//! ```text
//! [member count, LEB128] then per member, strictly ascending by bytes:
//!     [member length, LEB128][member bytes]
//! ```
//!
//! (the LEB128 of `meridian_core::hash`). This format is fixed: other modules read sets
//! through [`members`] (the sorted-set module takes sets as ZUNIONSTORE/ZINTERSTORE inputs;
//! DUMP and SORT read them so). Decoding checks every length and the strict order, so
//! damaged bytes are `RedisError::Corrupt`, never a panic, a member twice, or an allocation
//! sized by unchecked bytes.
//!
//! Every command reaches its key's set through [`crate::collection`]: a view that keeps
//! objects (the standalone keyspace) hands over the live [`Set`], changed in place (a set
//! decoded from bytes takes its held shape when the view keeps it, [`Set::settle`]); any
//! other view (a cluster's, a MULTI overlay) holds bytes, decoded into a [`Set`] and
//! re-encoded after a change. A write that changes nothing (SADD of present members, SREM
//! of absent ones, SMOVE of a member the destination has) writes nothing to that key, as
//! Redis signals no modified key.
//!
//! Atomicity is the view's: a multi-key command (SMOVE, SINTER..., the STORE variants) reads
//! and writes every key through the one view it is given, which the backend makes atomic.
//!
//! **Cost** on a held set: SADD/SREM of k members O(k) (amortized: the table doubles and
//! halves), SISMEMBER O(1), SMISMEMBER O(k), SCARD O(1), SPOP and SRANDMEMBER O(1) or
//! O(count); on an integer set a change shifts at most 512 values. SMEMBERS, and
//! SINTER/SUNION/SDIFF replies, sort what they answer (O(n log n), see the order below).
//! SSCAN beyond [`SSCAN_WHOLE`] is O(n) per call (every member's hash is compared with the
//! cursor). SINTER copies the smallest input and filters it by the others, O(n₁ · M);
//! SUNION O(N) over all inputs; SDIFF O(n₁ · M); a STORE variant stores the result as a new
//! set. On a view of bytes every command also decodes the set into sorted slices of the
//! stored value (O(n), no copy of the members) and every change shifts them and re-encodes
//! (O(n); SADD/SREM of many members merge in one pass, O(n + k log k)) — SCARD excepted,
//! which reads the stored count — and the encoded set must fit the view's [`View::max_value_len`] (Redis's
//! `proto-max-bulk-len`), else the write is refused with `ERR set exceeds maximum allowed
//! size (proto-max-bulk-len)` and nothing changes (a STORE variant leaves its destination
//! as it was; SMOVE writes its destination first, so a destination too large refuses the
//! move). A held set is bounded by the server's memory instead.
//!
//! **Redis's rules kept**: a set command on a key of another type answers `-WRONGTYPE`; an
//! empty set does not exist (the last SREM/SPOP/SMOVE deletes the key, a STORE variant with
//! an empty result deletes its destination and replies 0); a write keeps the key's TTL (a
//! STORE variant's destination is replaced whole, without a TTL, as `setKey` does); missing
//! keys are empty sets for SINTER/SUNION/SDIFF and every key's type is checked before any
//! result; SMOVE from a missing source replies 0 without looking at the destination; checks
//! run in Redis's order (SPOP's and SRANDMEMBER's count before the key, SINTERCARD's
//! numkeys and LIMIT before any key, SSCAN's cursor before the key and its options after
//! it). RESP3 types are Redis 7.0's: SMEMBERS, SINTER, SUNION, SDIFF and SPOP with a count
//! answer a set (`~`), SRANDMEMBER with a count an array, SMISMEMBER an array.
//!
//! **Order of replies**: Redis answers an intset (a set of at most `set-max-intset-entries`
//! = 512 members, every one an integer in `string2ll` form) in numeric order and any other
//! set in hash-table order. Here a set Redis would hold as an intset is answered in numeric
//! order too (SMEMBERS `9 10` rather than `10 9`: what redis-cli users and one suite test,
//! `redis-cli.tcl`'s DUMP/RESTORE, see), and every other set in byte order (the stored
//! order) — "unordered" in Redis's contract, which is all `set.tcl` relies on (it `lsort`s).
//! The order depends on the members only, never on the view or the set's history: a Redis
//! set that became a hash table and shrank back to integers keeps hash order in Redis; here
//! it is numeric again (though held as a table, as Redis holds it).
//!
//! **Where it departs**:
//! - SSCAN answers a set of at most [`SSCAN_WHOLE`] members whole, with cursor 0 (as Redis
//!   does for an intset; COUNT is a hint). A larger set is iterated with a real cursor: the
//!   cursor is a position in the space of a fixed 64-bit hash of the members (independent of
//!   the node and of the set's other members), so a member present during the whole
//!   iteration is returned exactly once however the set changes (Redis promises at least
//!   once). Each call but the last looks at at least COUNT members and at least
//!   1/[`scan::ELEMENT_SCAN_PASSES`] of the set (so a full iteration reads the whole set
//!   about that many times at most), and at most [`crate::scan::MAX_SCAN_COUNT`] plus hash
//!   ties; MATCH filters what was looked at, as in Redis. Within a call, members come in
//!   hash order.
//! - SRANDMEMBER with a negative count (repetitions allowed) refuses more than
//!   [`MAX_RANDOM_REPEATS`] elements with `ERR value is out of range` (the same bound as
//!   HRANDFIELD), where Redis would build a reply of any length.
//! - SPOP/SRANDMEMBER draw uniformly with `rand` (a uniform position in the set's dense
//!   list; Redis's dict sampling is only roughly uniform); replies of distinct random
//!   members come in random order.

use crate::args::Args;
use crate::collection;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::scan::{self, parse_cursor};
use crate::value::{glob_match, parse_i64};
use crate::view::{Entry, Kind, View};
use bytes::Bytes;
use rand::Rng;
use std::ops::Range;

mod object;
pub use object::{Member, Set};

pub use crate::value::MAX_RANDOM_REPEATS;

/// Redis's default `set-max-intset-entries`: a set of at most this many integers is held as
/// sorted integers and answered in numeric order, as Redis's intset is.
pub const INTSET_MAX_ENTRIES: usize = 512;

/// A set of at most this many members is answered whole by one SSCAN call (cursor 0).
pub const SSCAN_WHOLE: usize = 512;

/// At most this many member handles are reserved before decoding proves them.
const PREALLOCATED_MEMBERS: usize = 4096;

// ----- the encoding ----------------------------------------------------------------------

/// The encoding of `members`, which must be strictly ascending by bytes (the data of an
/// envelope of kind [`Kind::Set`]): [`meridian_core::collection_data::encode_set`].
pub use meridian_core::collection_data::encode_set as encode;

/// Walks a set's data, checking every length, the strict order and that nothing trails:
/// `f` gets each member's byte range, ascending (before damage further on shows). The
/// member count.
pub(crate) fn walk(data: &[u8], f: impl FnMut(Range<usize>)) -> Result<usize> {
    meridian_core::collection_data::walk_set(data, f).map_err(|e| RedisError::Corrupt(e.0))
}

/// Decodes a set's data: its members, strictly ascending, as slices of `data` (no copy).
pub fn decode_data(data: &Bytes) -> Result<Vec<Bytes>> {
    // The count is not trusted to size the list (a damaged count would reserve a handle per
    // byte before the damage shows): the list grows as members decode.
    let mut out: Vec<Bytes> = Vec::with_capacity(data_len(data)?.min(PREALLOCATED_MEMBERS));
    walk(data, |r| out.push(data.slice(r)))?;
    Ok(out)
}

/// The members of a set entry, strictly ascending by bytes, as slices of its data (no copy):
/// WRONGTYPE for an entry of another kind, `Corrupt` for data that does not decode. For
/// other modules (ZUNIONSTORE reads sets as inputs).
pub fn members(entry: &Entry) -> Result<Vec<Bytes>> {
    if entry.kind != Kind::Set {
        return Err(RedisError::WrongType);
    }
    decode_data(&entry.data)
}

/// The number of members of a set's data, without decoding them.
pub fn data_len(data: &[u8]) -> Result<usize> {
    let n = meridian_core::collection_data::count(data).map_err(|e| RedisError::Corrupt(e.0))?;
    // Every member takes at least its length byte: a count beyond the bytes is damage.
    if n > data.len() {
        return Err(RedisError::Corrupt("set count exceeds its data"));
    }
    Ok(n)
}

// ----- reaching a key's set --------------------------------------------------------------
//
// Reads go through `collection::read` (which counts a hit or a miss). What follows covers
// what it does not: a write command's look at a key before it changes anything (no hit or
// miss counted, as Redis's lookupKeyWrite), a write that may turn out to change nothing (no
// write then, as Redis signals no modified key), and the multi-key reads' sizes.

/// [`collection::peek`] of the set at `key`.
fn peek<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    f: impl FnOnce(&Set) -> R,
) -> Result<Option<R>> {
    collection::peek::<Set, V, R>(v, key, f)
}

/// The set at `key`, owned (a copy of a held one), without counting a read.
fn owned<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Set>> {
    peek(v, key, Set::clone)
}

/// [`collection::modify`] of the set at `key`: SADD of present members or SREM of absent
/// ones writes nothing, as in Redis.
fn modify<V: View + ?Sized, R>(
    v: &mut V,
    key: &[u8],
    create: bool,
    f: impl FnOnce(&mut Set) -> Result<(R, bool)>,
) -> Result<Option<R>> {
    collection::modify::<Set, V, R, RedisError>(v, key, create, f)
}

/// The size of the set at `key` for a read, counting a hit or a miss: O(1) whatever the view
/// keeps.
fn read_len<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<usize>> {
    collection::len::<Set, V>(v, key, true)
}

/// Stores `members` (any order; a repeat counts once) as the set at `key` with `expiry`, or
/// deletes the key when there is none (an empty set does not exist). A view that keeps
/// objects keeps the set; any other refuses a set longer than its maximum, changing nothing.
pub fn store<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    members: &[Bytes],
    expiry: Option<u64>,
) -> Result<()> {
    collection::store(v, key, Set::from_members(members), expiry)
}

fn write_members(reply: &mut Reply, members: &[Bytes], as_set: bool) {
    if as_set {
        reply.set(members.len());
    } else {
        reply.array(members.len());
    }
    for m in members {
        reply.bulk(m);
    }
}

/// Writes every member of `s` in reply order ([`Set::for_each_ordered`]).
fn write_set(reply: &mut Reply, s: &Set, as_set: bool) {
    if as_set {
        reply.set(s.len());
    } else {
        reply.array(s.len());
    }
    s.for_each_ordered(|m| reply.bulk(m));
}

/// The members of `s` in reply order, copied.
fn ordered(s: &Set) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(s.len());
    s.for_each_ordered(|m| out.push(Bytes::copy_from_slice(m)));
    out
}

// ----- the commands, typed ---------------------------------------------------------------

/// SADD: adds the members (a member given twice counts once), keeping the key's TTL;
/// returns how many were added. O(k) for k members (amortized: a table grows by doubling).
pub fn sadd<V: View + ?Sized>(v: &mut V, key: &[u8], new: &[&[u8]]) -> Result<u64> {
    let added = modify(v, key, true, |s| {
        let added = s.insert_all(new) as u64;
        Ok((added, added > 0))
    })?;
    Ok(added.unwrap_or(0))
}

/// SREM: removes the members; deletes the key when none is left. Returns how many were
/// removed.
pub fn srem<V: View + ?Sized>(v: &mut V, key: &[u8], gone: &[&[u8]]) -> Result<u64> {
    let removed = modify(v, key, false, |s| {
        let removed = s.remove_all(gone) as u64;
        Ok((removed, removed > 0))
    })?;
    Ok(removed.unwrap_or(0))
}

/// SMOVE: moves `member` from `src` to `dst`; returns whether it was in `src`. A missing
/// source answers false before the destination's type is looked at (Redis's order). The
/// destination is written first: on a view that stores bytes, a destination that would grow
/// beyond the longest value refuses the move with the source untouched.
pub fn smove<V: View + ?Sized>(v: &mut V, src: &[u8], dst: &[u8], member: &[u8]) -> Result<bool> {
    let Some(in_src) = peek(v, src, |s| s.contains(member))? else {
        return Ok(false);
    };
    let in_dst = peek(v, dst, |s| s.contains(member))?;
    if src == dst || !in_src {
        return Ok(in_src);
    }
    if in_dst != Some(true) {
        modify(v, dst, true, |s| Ok(((), s.insert(member))))?;
    }
    modify(v, src, false, |s| Ok(((), s.remove(member))))?;
    Ok(true)
}

/// SCARD: the number of members, in O(1) (a stored set's count is read without decoding).
pub fn scard<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    Ok(read_len(v, key)?.unwrap_or(0) as u64)
}

/// SMEMBERS: every member, in reply order ([`Set::for_each_ordered`]); empty for a missing
/// key.
pub fn smembers<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Vec<Bytes>> {
    Ok(collection::read(v, key, |s: &Set| Ok(ordered(s)))?.unwrap_or_default())
}

/// SPOP without a count: removes and returns a uniformly random member (`None` for a
/// missing key). O(1) on a held set.
pub fn spop_one<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Bytes>> {
    let popped = modify(v, key, false, |s| {
        if s.is_empty() {
            return Ok((None, false));
        }
        let i = rand::rng().random_range(0..s.len());
        Ok((s.take(i), true))
    })?;
    Ok(popped.flatten())
}

/// SPOP with a count: removes and returns `count` distinct random members, in random order
/// (the whole set in reply order, deleting the key, when `count` is not below its size).
/// O(count) on a held set.
pub fn spop_count<V: View + ?Sized>(v: &mut V, key: &[u8], count: u64) -> Result<Vec<Bytes>> {
    if count == 0 {
        // The key's type is still checked, as Redis does before it looks at the count.
        peek(v, key, |_| ())?;
        return Ok(Vec::new());
    }
    let popped = modify(v, key, false, |s| {
        if count >= s.len() as u64 {
            return Ok((ordered(&std::mem::take(s)), true));
        }
        Ok((s.pop_random(count as usize, &mut rand::rng()), true))
    })?;
    Ok(popped.unwrap_or_default())
}

/// The size of every set of `keys` (0 for a missing key), counting a hit or a miss per key
/// and checking each key's type in order before any result, as Redis does (the first key of
/// another type is the answer).
fn read_sizes<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<Vec<(&'k [u8], usize)>> {
    keys.into_iter()
        .map(|k| Ok((k, read_len(v, k)?.unwrap_or(0))))
        .collect()
}

/// Which set algebra a SINTER/SUNION/SDIFF family command computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOp {
    /// SINTER, SINTERSTORE, SINTERCARD.
    Inter,
    /// SUNION, SUNIONSTORE.
    Union,
    /// SDIFF, SDIFFSTORE.
    Diff,
}

/// The intersection of the sets at `sized`'s keys: the smallest is copied, then filtered by
/// membership in each other (smallest first), O(n₁ · M) for the smallest n₁ of M sets.
fn intersect<V: View + ?Sized>(v: &mut V, mut sized: Vec<(&[u8], usize)>) -> Result<Set> {
    if sized.is_empty() || sized.iter().any(|&(_, n)| n == 0) {
        return Ok(Set::new());
    }
    sized.sort_by_key(|&(_, n)| n);
    let Some(mut acc) = owned(v, sized[0].0)? else {
        return Ok(Set::new());
    };
    for &(k, _) in &sized[1..] {
        if acc.is_empty() {
            break;
        }
        if peek(v, k, |o| acc.retain(|m| o.contains(m)))?.is_none() {
            return Ok(Set::new());
        }
    }
    Ok(acc)
}

/// SINTER/SUNION/SDIFF over `keys`: the result as a set (every key read and type-checked
/// first). SUNION is O(N) over all inputs; SDIFF O(n₁ · M) for the first set n₁.
pub fn combine<'k, V: View + ?Sized>(
    v: &mut V,
    op: SetOp,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<Set> {
    let sized = read_sizes(v, keys)?;
    match op {
        SetOp::Inter => intersect(v, sized),
        SetOp::Union => {
            let mut acc = Set::new();
            for &(k, n) in &sized {
                if n > 0 {
                    peek(v, k, |s| {
                        for m in s.iter() {
                            m.with(|b| acc.insert(b));
                        }
                    })?;
                }
            }
            Ok(acc)
        }
        SetOp::Diff => {
            let Some(&(first, _)) = sized.first() else {
                return Ok(Set::new());
            };
            let mut acc = owned(v, first)?.unwrap_or_default();
            for &(k, n) in &sized[1..] {
                if acc.is_empty() {
                    break;
                }
                if n > 0 {
                    peek(v, k, |o| acc.retain(|m| !o.contains(m)))?;
                }
            }
            Ok(acc)
        }
    }
}

/// SINTERSTORE/SUNIONSTORE/SDIFFSTORE: stores the result at `dst` (replacing whatever it
/// held, without a TTL), or deletes `dst` when the result is empty; returns its size.
pub fn combine_store<'k, V: View + ?Sized>(
    v: &mut V,
    op: SetOp,
    dst: &[u8],
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<u64> {
    let result = combine(v, op, keys)?;
    let n = result.len() as u64;
    collection::store(v, dst, result, None)?;
    Ok(n)
}

/// SINTERCARD: the size of the intersection, counting no further than `limit` (0: no
/// limit).
pub fn sintercard<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
    limit: usize,
) -> Result<u64> {
    let sized = read_sizes(v, keys)?;
    let n = intersect(v, sized)?.len();
    Ok(if limit == 0 { n } else { n.min(limit) } as u64)
}

// ----- the commands, from their arguments ------------------------------------------------

/// Whether [`exec_on_view`] executes `cmd`: every set command.
pub fn handles(cmd: Cmd) -> bool {
    cmd.group() == Group::Sets
}

/// Argument `i`, or the command's arity error (never a panic, whoever checked the arity).
fn arg<'a>(args: Args<'a>, cmd: Cmd, i: usize) -> std::result::Result<&'a [u8], CmdError> {
    if i < args.len() {
        Ok(args.get(i))
    } else {
        Err(arity_error(cmd.spec().name))
    }
}

/// Executes a set command (one [`handles`] accepts) against `view`, writing its reply in
/// Redis's type (RESP2 or RESP3, as `reply` is set); an error is returned for the caller to
/// write. Multi-key commands read and write all their keys through `view`. Arity is checked
/// again here (Redis's errors), so a caller that did not check gets an error, never a panic.
pub fn exec_on_view(cmd: Cmd, args: Args<'_>, view: &mut dyn View, reply: &mut Reply) -> CmdResult {
    let name = cmd.spec().name;
    if !cmd.spec().arity_ok(args.len()) || args.len() < 2 {
        return Err(arity_error(name));
    }
    let key = args.get(1);
    match cmd {
        Cmd::Sadd => {
            let new: Vec<&[u8]> = args.iter_from(2).collect();
            reply.int(sadd(view, key, &new)? as i64);
        }
        Cmd::Srem => {
            let gone: Vec<&[u8]> = args.iter_from(2).collect();
            reply.int(srem(view, key, &gone)? as i64);
        }
        Cmd::Smove => {
            let (dst, member) = (arg(args, cmd, 2)?, arg(args, cmd, 3)?);
            reply.int(smove(view, key, dst, member)? as i64);
        }
        Cmd::Sismember => {
            let member = arg(args, cmd, 2)?;
            let found = collection::read(view, key, |s: &Set| Ok(s.contains(member)))?;
            reply.int(found.unwrap_or(false) as i64);
        }
        Cmd::Smismember => {
            let found = collection::read(view, key, |s: &Set| {
                Ok(args.iter_from(2).map(|m| s.contains(m)).collect::<Vec<_>>())
            })?;
            reply.array(args.len() - 2);
            for i in 0..args.len() - 2 {
                reply.int(found.as_ref().is_some_and(|f| f.get(i) == Some(&true)) as i64);
            }
        }
        Cmd::Scard => reply.int(scard(view, key)? as i64),
        Cmd::Smembers => {
            let written = collection::read(view, key, |s: &Set| {
                write_set(reply, s, true);
                Ok(())
            })?;
            if written.is_none() {
                reply.set(0);
            }
        }
        Cmd::Spop => spop(view, args, reply)?,
        Cmd::Srandmember => srandmember(view, args, reply)?,
        Cmd::Sinter | Cmd::Sunion | Cmd::Sdiff => {
            let result = combine(view, op_of(cmd), args.iter_from(1))?;
            write_set(reply, &result, true);
        }
        Cmd::Sinterstore | Cmd::Sunionstore | Cmd::Sdiffstore => {
            reply.int(combine_store(view, op_of(cmd), key, args.iter_from(2))? as i64);
        }
        Cmd::Sintercard => {
            let (keys, limit) = parse_sintercard(args)?;
            reply.int(sintercard(view, keys, limit)? as i64);
        }
        Cmd::Sscan => sscan(view, args, reply)?,
        other => {
            return Err(raw(format!(
                "ERR {} is not a set command",
                other.spec().name.to_ascii_uppercase()
            )));
        }
    }
    Ok(())
}

fn op_of(cmd: Cmd) -> SetOp {
    match cmd {
        Cmd::Sunion | Cmd::Sunionstore => SetOp::Union,
        Cmd::Sdiff | Cmd::Sdiffstore => SetOp::Diff,
        _ => SetOp::Inter,
    }
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`, with `t_set.c`'s messages: the keys
/// and the limit (0: none).
fn parse_sintercard(args: Args<'_>) -> std::result::Result<(Vec<&[u8]>, usize), CmdError> {
    let numkeys = parse_i64(args.get(1))
        .filter(|&n| n >= 1)
        .ok_or_else(|| raw("ERR numkeys should be greater than 0"))?;
    let available = args.len() - 2;
    if numkeys as u64 > available as u64 {
        return Err(raw(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let numkeys = numkeys as usize;
    let mut limit = 0usize;
    let mut i = 2 + numkeys;
    while i < args.len() {
        if args.get(i).eq_ignore_ascii_case(b"LIMIT") && i + 1 < args.len() {
            let l = parse_i64(args.get(i + 1))
                .filter(|&l| l >= 0)
                .ok_or_else(|| raw("ERR LIMIT can't be negative"))?;
            limit = usize::try_from(l).unwrap_or(usize::MAX);
            i += 2;
        } else {
            return Err(raw(SYNTAX));
        }
    }
    Ok((args.iter_from(2).take(numkeys).collect(), limit))
}

/// `SPOP key [count]`: one random member (null for a missing key), or a set of `count`
/// (the count checked before the key, with Redis's message).
fn spop(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let key = args.get(1);
    match args.len() {
        2 => {
            let m = spop_one(view, key)?;
            reply.opt_bulk(m.as_deref());
        }
        3 => {
            let count = parse_i64(args.get(2))
                .filter(|&c| c >= 0)
                .ok_or_else(|| raw("ERR value is out of range, must be positive"))?;
            let popped = spop_count(view, key, count as u64)?;
            write_members(reply, &popped, true);
        }
        _ => return Err(raw(SYNTAX)),
    }
    Ok(())
}

/// `SRANDMEMBER key [count]` (Redis's `srandmemberCommand`): a uniformly random member, or
/// `count` distinct ones (the whole set when `count` is not below its size), or `-count`
/// with repetitions (at most [`MAX_RANDOM_REPEATS`]). O(count) on a held set.
fn srandmember(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let key = args.get(1);
    if args.len() == 2 {
        let found = collection::read(view, key, |s: &Set| {
            if s.is_empty() {
                return Ok(false);
            }
            let i = rand::rng().random_range(0..s.len());
            Ok(s.get(i).map(|m| m.with(|b| reply.bulk(b))).is_some())
        })?;
        if found != Some(true) {
            reply.null();
        }
        return Ok(());
    }
    if args.len() > 3 {
        return Err(raw(SYNTAX));
    }
    let count = int_arg(args.get(2))?;
    if count == i64::MIN {
        return Err(raw(
            "ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807",
        ));
    }
    // `Some(false)`: a repeat count beyond the bound, refused (nothing written).
    let answered = collection::read(view, key, |s: &Set| {
        let n = s.len();
        if count > 0 && count as u64 >= n as u64 {
            // The whole set, in its reply order.
            write_set(reply, s, false);
            return Ok(true);
        }
        let Some(picked) = crate::value::random_indexes(n, count) else {
            return Ok(false);
        };
        reply.array(picked.len());
        for i in picked {
            if let Some(m) = s.get(i) {
                m.with(|b| reply.bulk(b));
            }
        }
        Ok(true)
    })?;
    match answered {
        // The empty array, in both protocols.
        None => reply.array(0),
        Some(false) => return Err(raw("ERR value is out of range")),
        Some(true) => {}
    }
    Ok(())
}

/// One SSCAN step over `s` from `cursor`: the members to list and the next cursor. See the
/// module docs for the cursor; a set of at most [`SSCAN_WHOLE`] members is answered whole.
fn scan_step(s: &Set, cursor: u64, count: usize) -> (Vec<Bytes>, u64) {
    let n = s.len();
    if n <= SSCAN_WHOLE {
        return (ordered(s), 0);
    }
    let hashes = s.iter().map(|m| m.with(scan::element_hash));
    let (picked, next) = scan::hashed_step(hashes, n, cursor, count);
    let listed = picked
        .into_iter()
        .filter_map(|i| s.get(i).map(Member::to_bytes))
        .collect();
    (listed, next)
}

/// `SSCAN key cursor [MATCH pattern] [COUNT count]`: the cursor is checked first, then the
/// key (a missing key answers the empty scan whatever the options), then the options, as
/// Redis's `scanGenericCommand` does.
fn sscan(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let cmd = Cmd::Sscan;
    let key = args.get(1);
    let cursor = parse_cursor(arg(args, cmd, 2)?)?;
    // The options are checked after the key (a missing key answers the empty scan whatever
    // they are), so their verdict waits.
    let opts = sscan_options(args);
    let step = collection::read(view, key, |s: &Set| {
        Ok(opts
            .as_ref()
            .ok()
            .map(|&(_, count)| scan_step(s, cursor, count)))
    })?;
    let Some(step) = step else {
        reply.array(2);
        reply.bulk(b"0");
        reply.array(0);
        return Ok(());
    };
    let (pattern, _) = opts?;
    let Some((listed, next)) = step else {
        return Err(raw(SYNTAX));
    };
    let listed: Vec<Bytes> = listed
        .into_iter()
        .filter(|m| pattern.is_none_or(|p| glob_match(p, m, false)))
        .collect();
    let mut buf = itoa::Buffer::new();
    reply.array(2);
    reply.bulk(buf.format(next).as_bytes());
    write_members(reply, &listed, false);
    Ok(())
}

/// SSCAN's `MATCH pattern` (`None` for none or `*`) and `COUNT count` (10 by default).
fn sscan_options(args: Args<'_>) -> std::result::Result<(Option<&[u8]>, usize), CmdError> {
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        let has_value = i + 1 < args.len();
        if opt.eq_ignore_ascii_case(b"COUNT") && has_value {
            let c = int_arg(args.get(i + 1))?;
            if c < 1 {
                return Err(raw(SYNTAX));
            }
            count = usize::try_from(c).unwrap_or(usize::MAX);
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"MATCH") && has_value {
            let p = args.get(i + 1);
            pattern = (p != b"*").then_some(p);
            i += 2;
        } else {
            return Err(raw(SYNTAX));
        }
    }
    Ok((pattern, count))
}

#[cfg(test)]
mod tests;
