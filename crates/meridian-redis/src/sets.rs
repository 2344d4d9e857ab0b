//! Redis set-command semantics over a [`View`]: the one copy of what SADD, SREM, SMOVE,
//! SISMEMBER, SMISMEMBER, SCARD, SPOP, SRANDMEMBER, SINTER, SINTERCARD, SINTERSTORE, SUNION,
//! SUNIONSTORE, SDIFF, SDIFFSTORE, SMEMBERS and SSCAN mean, reply for reply and error for
//! error Redis 7.0's (`t_set.c`).
//!
//! A set is **one stored value**: an envelope of kind [`Kind::Set`] whose data is
//!
//! ```text
//! [member count, LEB128] then per member, strictly ascending by bytes:
//!     [member length, LEB128][member bytes]
//! ```
//!
//! (the LEB128 of `meridian_core::hash`). This format is fixed: other modules read sets
//! through [`members`] (the sorted-set module takes sets as ZUNIONSTORE/ZINTERSTORE inputs).
//! Decoding never copies (members are slices of the stored value) and checks every length
//! and the strict order, so damaged bytes are `RedisError::Corrupt`, never a panic, a member
//! twice, or an allocation sized by unchecked bytes.
//!
//! Atomicity is the view's: a multi-key command (SMOVE, SINTER..., the STORE variants) reads
//! and writes every key through the one view it is given, which the backend makes atomic.
//!
//! **Cost**: every command decodes the whole set (one `Bytes` handle per member, no copy of
//! the member bytes) and every write re-encodes and rewrites it: O(size of the set) per
//! command. SCARD reads the member count only. Membership tests are binary searches over the
//! decoded, sorted members; SADD/SREM of k members on a set of n is O(n + k log k); SINTER
//! is O(n₁ · M · log n) for the smallest input n₁ over M sets, SUNION/SDIFF O(N log N) over
//! all inputs. The encoded set must fit the view's [`View::max_value_len`] (Redis's
//! `proto-max-bulk-len`), else the write is refused with `ERR set exceeds maximum allowed
//! size (proto-max-bulk-len)` and nothing changes (a STORE variant leaves its destination
//! as it was).
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
//! A Redis set that became a hash table and shrank back to integers keeps hash order in
//! Redis; here it is numeric again.
//!
//! **Where it departs**:
//! - SSCAN answers a set of at most [`SSCAN_WHOLE`] members whole, with cursor 0 (as Redis
//!   does for an intset; COUNT is a hint). A larger set is iterated with a real cursor: the
//!   cursor is a position in the space of a fixed 64-bit hash of the members (independent of
//!   the node and of the set's other members), so a member present during the whole
//!   iteration is returned exactly once however the set changes (Redis promises at least
//!   once). Each call but the last looks at at least COUNT members and at least
//!   1/[`SSCAN_PASSES`] of the set (so a full iteration decodes the set about
//!   `SSCAN_PASSES` times at most), and at most [`crate::scan::MAX_SCAN_COUNT`] plus hash
//!   ties; MATCH filters what was looked at, as in Redis. Within a call, members come in
//!   hash order.
//! - SRANDMEMBER with a negative count (repetitions allowed) refuses more than
//!   [`MAX_RANDOM_REPEATS`] elements with `ERR value is out of range` (the same bound as
//!   HRANDFIELD), where Redis would build a reply of any length.
//! - SPOP/SRANDMEMBER draw uniformly with `rand` (Redis's dict sampling is only roughly
//!   uniform); replies of distinct random members come in random order.

use crate::args::Args;
use crate::command::{Cmd, Group};
use crate::error::{CmdError, CmdResult, RedisError, Result, SYNTAX, arity_error, int_arg, raw};
use crate::reply::Reply;
use crate::scan::{MAX_SCAN_COUNT, parse_cursor};
use crate::value::{glob_match, parse_i64};
use crate::view::{Entry, EntryRef, Kind, View};
use bytes::Bytes;
use meridian_core::leb128;
use rand::Rng;

/// The most elements SRANDMEMBER with a negative count answers (HRANDFIELD's bound).
pub const MAX_RANDOM_REPEATS: u64 = crate::hashes::MAX_RANDOM_REPEATS;

/// Redis's default `set-max-intset-entries`: a set of at most this many integers is answered
/// in numeric order, as Redis's intset is.
pub const INTSET_MAX_ENTRIES: usize = 512;

/// A set of at most this many members is answered whole by one SSCAN call (cursor 0).
pub const SSCAN_WHOLE: usize = 512;

/// SSCAN over a larger set returns at least 1/`SSCAN_PASSES` of it per call.
pub const SSCAN_PASSES: usize = 32;

/// At most this many member handles are reserved before decoding proves them.
const PREALLOCATED_MEMBERS: usize = 4096;

/// The type named in `CollectionTooLarge`.
const TYPE_NAME: &str = "set";

// ----- the encoding ----------------------------------------------------------------------

fn put_len(out: &mut Vec<u8>, n: usize) {
    leb128::put(out, n as u64);
}

fn len_size(n: usize) -> usize {
    leb128::size(n as u64)
}

fn get_len(data: &[u8], at: &mut usize) -> Result<usize> {
    match leb128::get(data, at) {
        Ok(n) => usize::try_from(n).map_err(|_| RedisError::Corrupt("set length overflows")),
        Err(leb128::Bad::Truncated) => Err(RedisError::Corrupt("truncated set")),
        Err(leb128::Bad::Overflow) => Err(RedisError::Corrupt("set length overflows")),
    }
}

/// The encoding of `members`, which must be strictly ascending by bytes (the data of an
/// envelope of kind [`Kind::Set`]).
pub fn encode<M: AsRef<[u8]>>(members: &[M]) -> Vec<u8> {
    debug_assert!(members.windows(2).all(|w| w[0].as_ref() < w[1].as_ref()));
    let size = len_size(members.len())
        + members
            .iter()
            .map(|m| len_size(m.as_ref().len()) + m.as_ref().len())
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    put_len(&mut out, members.len());
    for m in members {
        put_len(&mut out, m.as_ref().len());
        out.extend_from_slice(m.as_ref());
    }
    out
}

/// Decodes a set's data: its members, strictly ascending, as slices of `data` (no copy).
pub fn decode_data(data: &Bytes) -> Result<Vec<Bytes>> {
    let mut at = 0usize;
    let count = get_len(data, &mut at)?;
    // Every member takes at least its length byte: a count beyond the bytes left is damage.
    // The count is not trusted to size the list either (a damaged count would reserve a
    // handle per byte before the damage shows): the list grows as members decode.
    if count > data.len() - at {
        return Err(RedisError::Corrupt("set count exceeds its data"));
    }
    let mut out: Vec<Bytes> = Vec::with_capacity(count.min(PREALLOCATED_MEMBERS));
    for _ in 0..count {
        let n = get_len(data, &mut at)?;
        let end = at
            .checked_add(n)
            .filter(|&e| e <= data.len())
            .ok_or(RedisError::Corrupt("truncated set"))?;
        let m = data.slice(at..end);
        at = end;
        if out.last().is_some_and(|last| *last >= m) {
            return Err(RedisError::Corrupt("set members out of order"));
        }
        out.push(m);
    }
    if at != data.len() {
        return Err(RedisError::Corrupt("trailing bytes after a set"));
    }
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
    let mut at = 0usize;
    let n = get_len(data, &mut at)?;
    if n > data.len() - at {
        return Err(RedisError::Corrupt("set count exceeds its data"));
    }
    Ok(n)
}

// ----- loading and storing ---------------------------------------------------------------

/// A set as loaded: its members (sorted, slices of the stored value) and its key's expiry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    /// The members, strictly ascending by bytes.
    pub members: Vec<Bytes>,
    /// The key's absolute expiry (µs since the epoch), if it has one.
    pub expiry: Option<u64>,
}

impl Set {
    /// Whether `m` is a member (a binary search).
    pub fn contains(&self, m: &[u8]) -> bool {
        contains(&self.members, m)
    }
}

fn contains(sorted: &[Bytes], m: &[u8]) -> bool {
    sorted.binary_search_by(|x| x[..].cmp(m)).is_ok()
}

fn decode(e: Entry) -> Result<Set> {
    let members = members(&e)?;
    Ok(Set {
        members,
        expiry: e.expiry,
    })
}

/// The set at `key` for a write (no hit/miss counted): `None` when the key is absent.
pub fn load<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Set>> {
    v.load(key)?.map(decode).transpose()
}

/// The set at `key` for a read command: counts a hit or a miss (INFO), then checks the type.
fn read<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Set>> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    e.map(decode).transpose()
}

/// The encoding of `members` if it fits the view's longest value, else the "too large"
/// error (checked before anything is stored, so a refused write changes nothing).
fn encode_checked<V: View + ?Sized>(v: &V, members: &[Bytes]) -> Result<Vec<u8>> {
    let data = encode(members);
    if data.len() > v.max_value_len() {
        return Err(RedisError::CollectionTooLarge(TYPE_NAME));
    }
    Ok(data)
}

/// Stores already-encoded set data at `key`, or deletes the key when `data` is `None`.
fn put<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    data: Option<&[u8]>,
    expiry: Option<u64>,
) -> Result<()> {
    v.store(
        key,
        data.map(|data| EntryRef {
            data,
            expiry,
            kind: Kind::Set,
        }),
    )
}

/// Stores `members` (strictly ascending) as the set at `key` with `expiry`, or deletes the
/// key when there is none (an empty set does not exist). Refuses a set longer than the
/// view's maximum, changing nothing.
pub fn store<V: View + ?Sized>(
    v: &mut V,
    key: &[u8],
    members: &[Bytes],
    expiry: Option<u64>,
) -> Result<()> {
    if members.is_empty() {
        return v.store(key, None);
    }
    let data = encode_checked(v, members)?;
    put(v, key, Some(&data), expiry)
}

// ----- set algebra on sorted member lists --------------------------------------------------

/// `new` (any order, repeats allowed) merged into `set` (strictly ascending): the union,
/// strictly ascending, and how many were added.
fn merge_in(set: Vec<Bytes>, new: &[&[u8]]) -> (Vec<Bytes>, usize) {
    let mut new: Vec<&[u8]> = new.to_vec();
    new.sort_unstable();
    new.dedup();
    let mut out = Vec::with_capacity(set.len() + new.len());
    let mut added = 0;
    let mut old = set.into_iter().peekable();
    for n in new {
        while let Some(o) = old.next_if(|o| &o[..] < n) {
            out.push(o);
        }
        if old.peek().is_some_and(|o| &o[..] == n) {
            continue;
        }
        out.push(Bytes::copy_from_slice(n));
        added += 1;
    }
    out.extend(old);
    (out, added)
}

/// `set` without the members of `gone`: how many were removed.
fn remove_all(set: &mut Vec<Bytes>, gone: &[&[u8]]) -> usize {
    let mut gone: Vec<&[u8]> = gone.to_vec();
    gone.sort_unstable();
    gone.dedup();
    let before = set.len();
    set.retain(|m| gone.binary_search(&&m[..]).is_err());
    before - set.len()
}

/// The intersection of `sets` (each strictly ascending), strictly ascending; stops after
/// `limit` members (0: no limit).
fn intersect(mut sets: Vec<Vec<Bytes>>, limit: usize) -> Vec<Bytes> {
    if sets.iter().any(Vec::is_empty) {
        return Vec::new();
    }
    sets.sort_by_key(Vec::len);
    let mut iter = sets.into_iter();
    let Some(smallest) = iter.next() else {
        return Vec::new();
    };
    let others: Vec<Vec<Bytes>> = iter.collect();
    let mut out = Vec::new();
    for m in smallest {
        if others.iter().all(|o| contains(o, &m)) {
            out.push(m);
            if limit != 0 && out.len() >= limit {
                break;
            }
        }
    }
    out
}

/// The union of `sets`, strictly ascending.
fn unite(sets: Vec<Vec<Bytes>>) -> Vec<Bytes> {
    let mut all: Vec<Bytes> = sets.into_iter().flatten().collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The members of the first set in none of the others, strictly ascending.
fn subtract(sets: Vec<Vec<Bytes>>) -> Vec<Bytes> {
    let mut iter = sets.into_iter();
    let Some(mut first) = iter.next() else {
        return Vec::new();
    };
    for other in iter {
        if first.is_empty() {
            break;
        }
        first.retain(|m| !contains(&other, m));
    }
    first
}

/// Puts `members` in the order Redis answers them: numeric for a set Redis holds as an
/// intset (at most [`INTSET_MAX_ENTRIES`] members, each a `string2ll` integer), else as is.
fn reply_order(members: &mut [Bytes]) {
    if members.len() > INTSET_MAX_ENTRIES {
        return;
    }
    let mut keyed = Vec::with_capacity(members.len());
    for m in members.iter() {
        match parse_i64(m) {
            Some(i) => keyed.push(i),
            None => return,
        }
    }
    let mut pairs: Vec<(i64, Bytes)> = keyed.into_iter().zip(members.iter().cloned()).collect();
    pairs.sort_unstable_by_key(|p| p.0);
    for (slot, (_, m)) in members.iter_mut().zip(pairs) {
        *slot = m;
    }
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

/// `count` distinct random indexes below `n` (`count < n`), in random order.
fn distinct_indexes(n: usize, count: usize) -> Vec<usize> {
    let mut rng = rand::rng();
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..count {
        let j = rng.random_range(i..n);
        idx.swap(i, j);
    }
    idx.truncate(count);
    idx
}

// ----- the commands, typed ---------------------------------------------------------------

/// SADD: adds the members (a member given twice counts once), keeping the key's TTL;
/// returns how many were added.
pub fn sadd<V: View + ?Sized>(v: &mut V, key: &[u8], new: &[&[u8]]) -> Result<u64> {
    let Set { members, expiry } = load(v, key)?.unwrap_or_default();
    let (members, added) = merge_in(members, new);
    if added > 0 {
        store(v, key, &members, expiry)?;
    }
    Ok(added as u64)
}

/// SREM: removes the members; deletes the key when none is left. Returns how many were
/// removed.
pub fn srem<V: View + ?Sized>(v: &mut V, key: &[u8], gone: &[&[u8]]) -> Result<u64> {
    let Some(Set {
        mut members,
        expiry,
    }) = load(v, key)?
    else {
        return Ok(0);
    };
    let removed = remove_all(&mut members, gone);
    if removed > 0 {
        store(v, key, &members, expiry)?;
    }
    Ok(removed as u64)
}

/// SMOVE: moves `member` from `src` to `dst`; returns whether it was in `src`. A missing
/// source answers false before the destination's type is looked at (Redis's order).
pub fn smove<V: View + ?Sized>(v: &mut V, src: &[u8], dst: &[u8], member: &[u8]) -> Result<bool> {
    let Some(src_entry) = v.load(src)? else {
        return Ok(false);
    };
    let dst_entry = v.load(dst)?;
    let mut from = decode(src_entry)?;
    let to = dst_entry.map(decode).transpose()?;
    if src == dst {
        return Ok(from.contains(member));
    }
    if remove_all(&mut from.members, &[member]) == 0 {
        return Ok(false);
    }
    let Set {
        members: to_members,
        expiry: to_expiry,
    } = to.unwrap_or_default();
    let (to_members, added) = merge_in(to_members, &[member]);
    // Both values are encoded (and the destination's size checked) before either is stored.
    let to_data = if added > 0 {
        Some(encode_checked(v, &to_members)?)
    } else {
        None
    };
    store(v, src, &from.members, from.expiry)?;
    if let Some(data) = to_data {
        put(v, dst, Some(&data), to_expiry)?;
    }
    Ok(true)
}

/// SCARD: the number of members, read without decoding them.
pub fn scard<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<u64> {
    let e = v.load(key)?;
    v.count_read(key, e.is_some());
    match e {
        None => Ok(0),
        Some(e) if e.kind != Kind::Set => Err(RedisError::WrongType),
        Some(e) => data_len(&e.data).map(|n| n as u64),
    }
}

/// SMEMBERS: every member, strictly ascending by bytes; empty for a missing key.
pub fn smembers<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Vec<Bytes>> {
    Ok(read(v, key)?.map(|s| s.members).unwrap_or_default())
}

/// SPOP without a count: removes and returns a random member (`None` for a missing key).
pub fn spop_one<V: View + ?Sized>(v: &mut V, key: &[u8]) -> Result<Option<Bytes>> {
    let Some(Set {
        mut members,
        expiry,
    }) = load(v, key)?
    else {
        return Ok(None);
    };
    if members.is_empty() {
        return Ok(None);
    }
    let i = rand::rng().random_range(0..members.len());
    let m = members.remove(i);
    store(v, key, &members, expiry)?;
    Ok(Some(m))
}

/// SPOP with a count: removes and returns `count` distinct random members (the whole set,
/// deleting the key, when `count` is not below its size).
pub fn spop_count<V: View + ?Sized>(v: &mut V, key: &[u8], count: u64) -> Result<Vec<Bytes>> {
    let Some(Set { members, expiry }) = load(v, key)? else {
        return Ok(Vec::new());
    };
    if count == 0 {
        return Ok(Vec::new());
    }
    if count >= members.len() as u64 {
        v.store(key, None)?;
        let mut all = members;
        reply_order(&mut all);
        return Ok(all);
    }
    let picked = distinct_indexes(members.len(), count as usize);
    let mut taken = vec![false; members.len()];
    for &i in &picked {
        taken[i] = true;
    }
    let popped: Vec<Bytes> = picked.iter().map(|&i| members[i].clone()).collect();
    let left: Vec<Bytes> = members
        .into_iter()
        .zip(taken)
        .filter_map(|(m, t)| (!t).then_some(m))
        .collect();
    store(v, key, &left, expiry)?;
    Ok(popped)
}

/// Reads every key of `keys` as a set (a missing key is empty), checking every key's type
/// before any result, as Redis does; counts a hit or miss per key.
fn read_all<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<Vec<Vec<Bytes>>> {
    keys.into_iter()
        .map(|k| Ok(read(v, k)?.map(|s| s.members).unwrap_or_default()))
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

/// SINTER/SUNION/SDIFF over `keys`: the result, strictly ascending by bytes.
pub fn combine<'k, V: View + ?Sized>(
    v: &mut V,
    op: SetOp,
    keys: impl IntoIterator<Item = &'k [u8]>,
) -> Result<Vec<Bytes>> {
    let sets = read_all(v, keys)?;
    Ok(match op {
        SetOp::Inter => intersect(sets, 0),
        SetOp::Union => unite(sets),
        SetOp::Diff => subtract(sets),
    })
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
    store(v, dst, &result, None)?;
    Ok(result.len() as u64)
}

/// SINTERCARD: the size of the intersection, counting no further than `limit` (0: no
/// limit).
pub fn sintercard<'k, V: View + ?Sized>(
    v: &mut V,
    keys: impl IntoIterator<Item = &'k [u8]>,
    limit: usize,
) -> Result<u64> {
    let sets = read_all(v, keys)?;
    Ok(intersect(sets, limit).len() as u64)
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
            let s = read(view, key)?;
            reply.int(s.is_some_and(|s| s.contains(member)) as i64);
        }
        Cmd::Smismember => {
            let s = read(view, key)?;
            reply.array(args.len() - 2);
            for m in args.iter_from(2) {
                reply.int(s.as_ref().is_some_and(|s| s.contains(m)) as i64);
            }
        }
        Cmd::Scard => reply.int(scard(view, key)? as i64),
        Cmd::Smembers => {
            let mut all = smembers(view, key)?;
            reply_order(&mut all);
            write_members(reply, &all, true);
        }
        Cmd::Spop => spop(view, args, reply)?,
        Cmd::Srandmember => srandmember(view, args, reply)?,
        Cmd::Sinter | Cmd::Sunion | Cmd::Sdiff => {
            let mut result = combine(view, op_of(cmd), args.iter_from(1))?;
            reply_order(&mut result);
            write_members(reply, &result, true);
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

/// `SRANDMEMBER key [count]` (Redis's `srandmemberCommand`): a random member, or `count`
/// distinct ones (the whole set when `count` is not below its size), or `-count` with
/// repetitions (at most [`MAX_RANDOM_REPEATS`]).
fn srandmember(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let key = args.get(1);
    if args.len() == 2 {
        match read(view, key)? {
            Some(s) if !s.members.is_empty() => {
                let i = rand::rng().random_range(0..s.members.len());
                reply.bulk(&s.members[i]);
            }
            _ => reply.null(),
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
    let Some(Set { mut members, .. }) = read(view, key)? else {
        // The empty array, in both protocols.
        reply.array(0);
        return Ok(());
    };
    let n = members.len();
    if count == 0 || n == 0 {
        reply.array(0);
    } else if count < 0 {
        let times = count.unsigned_abs();
        if times > MAX_RANDOM_REPEATS {
            return Err(raw("ERR value is out of range"));
        }
        let mut rng = rand::rng();
        reply.array(times as usize);
        for _ in 0..times {
            reply.bulk(&members[rng.random_range(0..n)]);
        }
    } else if count as u64 >= n as u64 {
        reply_order(&mut members);
        write_members(reply, &members, false);
    } else {
        let picked = distinct_indexes(n, count as usize);
        reply.array(picked.len());
        for i in picked {
            reply.bulk(&members[i]);
        }
    }
    Ok(())
}

/// A fixed 64-bit hash of a member (FNV-1a, then a 64-bit finalizer to spread it): SSCAN's
/// cursor space. Fixed so a cursor means the same on every node and after a restart.
fn scan_hash(m: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in m {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// One SSCAN step over `members` from `cursor`: the members to list and the next cursor.
/// See the module docs for the cursor.
fn scan_step(members: Vec<Bytes>, cursor: u64, count: usize) -> (Vec<Bytes>, u64) {
    let n = members.len();
    if n <= SSCAN_WHOLE {
        let mut all = members;
        reply_order(&mut all);
        return (all, 0);
    }
    let batch = count
        .max(n.div_ceil(SSCAN_PASSES))
        .clamp(1, MAX_SCAN_COUNT.max(1));
    let mut cands: Vec<(u64, Bytes)> = members
        .into_iter()
        .map(|m| (scan_hash(&m), m))
        .filter(|(h, _)| *h >= cursor)
        .collect();
    let next = if cands.len() > batch {
        cands.select_nth_unstable_by(batch - 1, |a, b| a.0.cmp(&b.0));
        let bound = cands[batch - 1].0;
        // Members tied with the last one taken go with it: the next call starts after it.
        let mut keep = batch;
        for i in batch..cands.len() {
            if cands[i].0 == bound {
                cands.swap(keep, i);
                keep += 1;
            }
        }
        cands.truncate(keep);
        bound.checked_add(1).unwrap_or(0)
    } else {
        0
    };
    cands.sort_unstable();
    (cands.into_iter().map(|(_, m)| m).collect(), next)
}

/// `SSCAN key cursor [MATCH pattern] [COUNT count]`: the cursor is checked first, then the
/// key (a missing key answers the empty scan whatever the options), then the options, as
/// Redis's `scanGenericCommand` does.
fn sscan(view: &mut dyn View, args: Args<'_>, reply: &mut Reply) -> CmdResult {
    let cmd = Cmd::Sscan;
    let key = args.get(1);
    let cursor = parse_cursor(arg(args, cmd, 2)?)?;
    let Some(s) = read(view, key)? else {
        reply.array(2);
        reply.bulk(b"0");
        reply.array(0);
        return Ok(());
    };
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
    let (listed, next) = scan_step(s.members, cursor, count);
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

#[cfg(test)]
mod tests;
