//! Redis string, hash and one-key collection commands on eventual and timeline buckets in
//! cluster mode, beyond the plain GET/SET/DEL/MGET/MSET that `cluster_exec` serves
//! directly: SET with every option, the EXPIRE family, TTL, PERSIST, GETEX, INCR, APPEND, GETSET, GETDEL, SETRANGE,
//! GETRANGE, HSET, HGET, HGETALL, HDEL, HINCRBY, HSCAN, ...
//!
//! Each runs with [`meridian_redis::strings::exec_on_view`] — the one copy of what the commands mean —
//! over a one-key view of the key's live entry (its value and its expiry, stored together in
//! the value's envelope, so a TTL replicates with the value). What makes a write atomic is
//! the bucket type's ([`meridian_replication::Dispatch::update`]):
//!
//! - **timeline**: the master orders every write of a record, so every command is served:
//!   the command runs on the master's record and its write is a test-and-set on that
//!   record's version, retried when another write won. `SET NX/XX/GET`, `INCR`, `APPEND`,
//!   `GETSET`, `GETDEL`, `SETNX` lose no update and answer as Redis does;
//! - **eventual**: replicas accept writes concurrently, so a read-modify-write is not atomic
//!   there. Commands whose result does not depend on a racing write are served — `SET` with
//!   `EX/PX/EXAT/PXAT` (a blind write), `SET ... KEEPTTL`, the EXPIRE family, `PERSIST`,
//!   `GETEX` (the write carries the context its read returned, so it supersedes exactly what
//!   it read), and every read (`TTL`, `PTTL`, `GETRANGE`, ...). `INCR`, `DECR`, `INCRBY` and
//!   `DECRBY` increment the key's PN-counter (`meridian_replication::eventual::counter`):
//!   increments made concurrently in different DCs are merged, none is lost, and the reply
//!   is the counter's value at the replica that coordinated the increment. The others
//!   (`SET NX/XX/GET`, `SETNX`, `GETSET`, `GETDEL`, `APPEND`, `SETRANGE`, `INCRBYFLOAT`,
//!   `MSETNX`, `HINCRBYFLOAT`) are refused with an error that says why and which bucket
//!   type serves them: never a silent last-writer-wins. Hash writes (`HSET`, `HMSET`,
//!   `HSETNX`, `HDEL`, `HINCRBY`) update the key's map CRDT
//!   (`meridian_replication::eventual::map`) at its coordinating replica, merged field by
//!   field with concurrent updates, and answer what that replica holds. Set and sorted-set
//!   member writes (`SADD`, `SREM`, `ZADD`, `ZINCRBY`, `ZREM`, `ZREMRANGEBY*`) run over the
//!   collection read and send what they changed to the key's observed-remove set
//!   (`meridian_replication::eventual::elements`); pops, whose reply names members a racing
//!   pop could take too, are refused. `PFADD` raises the registers it changed in the key's
//!   HLL (`meridian_replication::eventual::registers`), merged by maximum; list writes
//!   that answer a length or OK (pushes, `LINSERT`, `LSET`, `LREM`, `LTRIM`) replace one run
//!   of the key's sequence (`meridian_replication::eventual::sequence`), and the pops and
//!   moves are refused.
//!
//! Reads (`TTL`, `STRLEN`, `GETRANGE`, `HGET`, `HGETALL`, ...) read what a plain GET reads
//! (`read_latest` on a timeline bucket, the bucket's R on an eventual one) and write nothing.

use crate::cluster_backend::ClusterBackend;
use crate::metrics::Metrics;
use crate::resp::common::error_reply;
use crate::wire_error;
use bytes::{Bytes, BytesMut};
use meridian_core::Timestamp;
use meridian_redis::Args;
use meridian_redis::Cmd;
use meridian_redis::RedisError;
use meridian_redis::Reply;
use meridian_redis::error::{CmdError, arity_error, int_arg};
use meridian_redis::options::{SetCondition, SetOptions};
use meridian_redis::{Entry, EntryRef, View};
use meridian_replication::{HashOps, HashReply, Need, Plan};
use std::borrow::Cow;

/// What a command returns: `Err` holds an error line for the caller to write.
type Outcome = Result<(), Cow<'static, str>>;

/// One key's live entry, and what a command stored for it.
struct OneKey<'k> {
    key: &'k [u8],
    now: Timestamp,
    live: Option<Entry>,
    /// `None`: nothing stored; `Some(None)`: deleted.
    stored: Option<Option<Entry>>,
}

impl View for OneKey<'_> {
    fn now(&self) -> Timestamp {
        self.now
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>, RedisError> {
        if key != self.key {
            // The commands served here touch their first argument only.
            return Err(RedisError::Corrupt("a key outside the command's one key"));
        }
        Ok(match &self.stored {
            Some(v) => v.clone(),
            None => self.live.clone(),
        })
    }

    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<(), RedisError> {
        if key != self.key {
            return Err(RedisError::Corrupt("a key outside the command's one key"));
        }
        self.stored = Some(value.map(EntryRef::to_entry));
        Ok(())
    }
}

/// The map-CRDT update an eventual bucket serves for hash write `cmd`, or the argument's
/// error in Redis's words and order (arguments before the key's type); `None` for a command
/// that only reads.
fn hash_ops(cmd: Cmd, args: Args<'_>) -> Option<Result<HashOps, CmdError>> {
    let field = |i: usize| Bytes::copy_from_slice(args.get(i));
    Some(match cmd {
        Cmd::Hset | Cmd::Hmset => {
            if args.len() < 4 || !args.len().is_multiple_of(2) {
                Err(arity_error(cmd.spec().name))
            } else {
                Ok(HashOps::Set(
                    (2..args.len())
                        .step_by(2)
                        .map(|i| (field(i), field(i + 1)))
                        .collect(),
                ))
            }
        }
        Cmd::Hsetnx => Ok(HashOps::SetNx {
            field: field(2),
            value: field(3),
        }),
        Cmd::Hdel => Ok(HashOps::Del((2..args.len()).map(field).collect())),
        Cmd::Hincrby => int_arg(args.get(3)).map(|delta| HashOps::IncrBy {
            field: field(2),
            delta,
        }),
        _ => return None,
    })
}

/// Writes the reply Redis gives to hash write `cmd` whose map answered `r`.
fn hash_reply(reply: &mut Reply, cmd: Cmd, r: HashReply) {
    match (cmd, r) {
        (Cmd::Hmset, _) => reply.ok(),
        (_, HashReply::Added(n) | HashReply::Removed(n)) => {
            reply.int(i64::try_from(n).unwrap_or(i64::MAX))
        }
        (_, HashReply::Value(v)) => reply.int(v),
        (_, HashReply::Set(set)) => reply.int(i64::from(set)),
    }
}

/// SET's options, when `cmd` is a SET whose options parse (a syntax error is SET's own
/// answer, given by the general path).
fn set_options(cmd: Cmd, args: Args<'_>, now: Timestamp) -> Option<SetOptions> {
    (cmd == Cmd::Set)
        .then(|| SetOptions::parse(args.iter_from(3), "set", now).ok())
        .flatten()
}

/// What `cmd` (a SET with options `set`) needs of its key's bucket: the Redis layer's
/// semantics, classified for the dispatch facade, which decides how the bucket serves it.
fn need(cmd: Cmd, args: Args<'_>, set: Option<SetOptions>) -> Need {
    match cmd {
        Cmd::Msetnx => Need::AtomicGroup,
        Cmd::Setnx
        | Cmd::Getset
        | Cmd::Getdel
        | Cmd::Append
        | Cmd::Setrange
        | Cmd::Incrbyfloat
        | Cmd::Hincrbyfloat => Need::Ordered,
        // SET's NX, XX and GET decide on the value read.
        Cmd::Set if set.is_some_and(|o| o.get || o.condition != SetCondition::Always) => {
            Need::Ordered
        }
        Cmd::Set if set.is_some_and(|o| !o.keep_ttl) => Need::Blind,
        Cmd::Setex | Cmd::Psetex | Cmd::Mset => Need::Blind,
        Cmd::Incr | Cmd::Decr | Cmd::Incrby | Cmd::Decrby => Need::Counter,
        Cmd::Hset | Cmd::Hmset | Cmd::Hsetnx | Cmd::Hdel | Cmd::Hincrby => Need::MapUpdate,
        // Member writes whose reply is the members' own: an observed-remove set. (SPOP,
        // ZPOPMIN and the like answer which members they took, which needs one order.)
        Cmd::Sadd
        | Cmd::Srem
        | Cmd::Zrem
        | Cmd::Zremrangebyscore
        | Cmd::Zremrangebyrank
        | Cmd::Zremrangebylex => Need::ElementUpdate(false),
        Cmd::Zincrby => Need::ElementUpdate(true),
        // A geo index is a sorted set whose scores are geohashes.
        Cmd::Geoadd => Need::ElementUpdate(false),
        Cmd::Zadd => Need::ElementUpdate(zadd_increments(args)),
        Cmd::Pfadd => Need::RegisterMax,
        // List writes that answer a length or OK: a sequence. (The pops and moves answer
        // which elements they took, which needs one order.)
        Cmd::Lpush
        | Cmd::Rpush
        | Cmd::Lpushx
        | Cmd::Rpushx
        | Cmd::Linsert
        | Cmd::Lset
        | Cmd::Lrem
        | Cmd::Ltrim => Need::SequenceUpdate,
        // PFCOUNT of one key only reads (its cache write is an optimisation).
        Cmd::Pfcount if args.len() == 2 => Need::Read,
        // Expiry changes (and SET ... KEEPTTL): a race cannot change their outcome.
        Cmd::Set
        | Cmd::Expire
        | Cmd::Pexpire
        | Cmd::Expireat
        | Cmd::Pexpireat
        | Cmd::Persist
        | Cmd::Getex => Need::Reconcilable,
        c if c.has_flag("readonly") => Need::Read,
        // Any other write — a new type's, until it has a CRDT — needs its key's writes
        // ordered: served by timeline and transactional buckets, refused by eventual ones.
        _ => Need::Ordered,
    }
}

/// Whether a ZADD's options (the words before its first score) include INCR.
fn zadd_increments(args: Args<'_>) -> bool {
    const OPTIONS: [&[u8]; 6] = [b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"];
    args.iter_from(2)
        .take_while(|a| OPTIONS.iter().any(|o| a.eq_ignore_ascii_case(o)))
        .any(|a| a.eq_ignore_ascii_case(b"INCR"))
}

/// The name a client would write, for errors.
fn upper(cmd: Cmd, args: Args<'_>) -> String {
    let name = cmd.spec().name.to_ascii_uppercase();
    if cmd == Cmd::Set {
        // Name the option that needs the atomic read.
        for o in args.iter_from(3) {
            for w in ["NX", "XX", "GET"] {
                if o.eq_ignore_ascii_case(w.as_bytes()) {
                    return format!("SET ... {w}");
                }
            }
        }
    }
    name
}

/// The increment of `INCR`, `DECR`, `INCRBY`, `DECRBY` (`None`: another command), or the
/// argument's error.
fn counter_delta(cmd: Cmd, args: Args<'_>) -> Option<Result<i64, CmdError>> {
    Some(match cmd {
        Cmd::Incr => Ok(1),
        Cmd::Decr => Ok(-1),
        Cmd::Incrby => int_arg(args.get(2)),
        Cmd::Decrby => int_arg(args.get(2)).and_then(|n| {
            n.checked_neg()
                .ok_or(CmdError::Keyspace(RedisError::DecrementOverflow))
        }),
        _ => return None,
    })
}

/// A `SET key value` whose options only set an expiry in the future: a blind write of the
/// value with its expiry, no read first. `None`: the options need the general path.
fn blind_set(args: Args<'_>, o: SetOptions, now: Timestamp) -> Option<Entry> {
    if o.get || o.condition != SetCondition::Always || o.keep_ttl {
        return None;
    }
    let expiry = o.deadline().map(|d| d.resolve(now));
    // An expiry not after now makes the key vanish: the general path deletes it.
    if expiry.is_some_and(|at| at <= now.0) {
        return None;
    }
    Some(Entry {
        data: Bytes::copy_from_slice(args.get(2)),
        expiry,
        kind: Default::default(),
    })
}

/// Runs a string command (one `meridian_redis::strings::handles` accepts, checked for arity) on the
/// eventual or timeline bucket of its key. See the module docs.
pub(crate) async fn run(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> Outcome {
    let d = &c.dispatch;
    let key = args.get(1);
    let now = c.node.clock_now();
    let set = set_options(cmd, args, now);
    let plan = d
        .plan(key, need(cmd, args, set), &upper(cmd, args))
        .map_err(|e| wire_error::resp(c, m, &e))?;
    match plan {
        Plan::Counter => {
            let delta = counter_delta(cmd, args).unwrap_or(Ok(0));
            let value = d
                .incr_by(key, delta.map_err(CmdError::into_line)?)
                .await
                .map_err(|e| wire_error::resp(c, m, &e))?;
            reply.int(value);
            return Ok(());
        }
        Plan::Map => {
            let Some(ops) = hash_ops(cmd, args) else {
                return Err(format!("ERR {} is not a hash write", upper(cmd, args)).into());
            };
            let r = d
                .hash_update(key, ops.map_err(CmdError::into_line)?)
                .await
                .map_err(|e| wire_error::resp(c, m, &e))?;
            hash_reply(reply, cmd, r);
            return Ok(());
        }
        Plan::Store
        | Plan::Read
        | Plan::Update
        | Plan::Elements(_)
        | Plan::Registers
        | Plan::Sequence => {}
    }
    if let Some(entry) = set.and_then(|o| blind_set(args, o, now)) {
        d.store(key, entry)
            .await
            .map_err(|e| wire_error::resp(c, m, &e))?;
        reply.ok();
        return Ok(());
    }
    let resp3 = reply.resp3;
    // Runs the command over `live` into a reply of its own: a timeline update may run it
    // several times, and only the run whose write took effect is answered.
    let run_once = |live: Option<Entry>, now: Timestamp| {
        let mut view = OneKey {
            key,
            now,
            live,
            stored: None,
        };
        let mut out = Reply::new(64);
        out.resp3 = resp3;
        match meridian_redis::types::exec_on_view(cmd, args, &mut view, &mut out) {
            Ok(()) => (view.stored, Ok(out.out)),
            Err(e) => (None, Err(e)),
        }
    };
    let answered: Result<BytesMut, CmdError> = if plan == Plan::Read {
        let live = d
            .get_entry(key)
            .await
            .map_err(|e| wire_error::resp(c, m, &e))?;
        run_once(live, now).1
    } else if let Plan::Elements(increments) = plan {
        d.element_update(key, increments, run_once)
            .await
            .map_err(|e| wire_error::resp(c, m, &e))?
    } else if plan == Plan::Registers {
        d.register_update(key, run_once)
            .await
            .map_err(|e| wire_error::resp(c, m, &e))?
    } else if plan == Plan::Sequence {
        d.sequence_update(key, run_once)
            .await
            .map_err(|e| wire_error::resp(c, m, &e))?
    } else {
        d.update(key, run_once)
            .await
            .map_err(|e| wire_error::resp(c, m, &e))?
    };
    match answered {
        Ok(out) => reply.out.extend_from_slice(&out),
        Err(e) => error_reply(reply, e),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` over the arguments `parts`.
    fn with_args<T>(parts: &[&str], f: impl FnOnce(Args<'_>) -> T) -> T {
        let (mut base, mut ranges) = (Vec::new(), Vec::new());
        for p in parts {
            ranges.push((base.len(), base.len() + p.len()));
            base.extend_from_slice(p.as_bytes());
        }
        f(Args::from_parts(&base, &ranges))
    }

    #[test]
    fn commands_are_classified_by_what_a_race_would_change() {
        let now = Timestamp(1_000_000);
        let need_of = |parts: &[&str]| {
            let cmd = Cmd::lookup(parts[0].as_bytes()).unwrap();
            with_args(parts, |a| need(cmd, a, set_options(cmd, a, now)))
        };
        // What an eventual bucket refuses (the facade's `plan`).
        for parts in [
            &["SET", "k", "v", "NX"][..],
            &["SET", "k", "v", "EX", "10", "XX"],
            &["SET", "k", "v", "GET"],
            &["SETNX", "k", "v"],
            &["GETSET", "k", "v"],
            &["GETDEL", "k"],
            &["APPEND", "k", "v"],
            &["SETRANGE", "k", "1", "v"],
            &["INCRBYFLOAT", "k", "1.5"],
        ] {
            assert_eq!(need_of(parts), Need::Ordered, "{parts:?}");
        }
        assert_eq!(need_of(&["MSETNX", "k", "v"]), Need::AtomicGroup);
        for (parts, want) in [
            (&["SET", "k", "v", "EX", "10"][..], Need::Blind),
            (&["SET", "k", "v", "KEEPTTL"], Need::Reconcilable),
            (&["SET", "k", "v", "BOGUS"], Need::Reconcilable),
            (&["EXPIRE", "k", "10", "GT"], Need::Reconcilable),
            (&["PERSIST", "k"], Need::Reconcilable),
            (&["GETEX", "k", "PX", "5"], Need::Reconcilable),
            (&["TTL", "k"], Need::Read),
            (&["GETRANGE", "k", "0", "-1"], Need::Read),
            (&["INCR", "k"], Need::Counter),
            (&["DECRBY", "k", "2"], Need::Counter),
            (&["HSET", "k", "f", "v"], Need::MapUpdate),
            (&["SADD", "k", "m"], Need::ElementUpdate(false)),
            (&["ZADD", "k", "1", "m"], Need::ElementUpdate(false)),
            (
                &["ZADD", "k", "xx", "incr", "1", "m"],
                Need::ElementUpdate(true),
            ),
            (&["ZADD", "k", "1", "incr"], Need::ElementUpdate(false)),
            (&["ZINCRBY", "k", "1", "m"], Need::ElementUpdate(true)),
            (
                &["ZREMRANGEBYRANK", "k", "0", "1"],
                Need::ElementUpdate(false),
            ),
            (&["SPOP", "k"], Need::Ordered),
            (&["PFADD", "k", "a"], Need::RegisterMax),
            (&["PFCOUNT", "k"], Need::Read),
            (&["RPUSH", "k", "a"], Need::SequenceUpdate),
            (&["LTRIM", "k", "0", "1"], Need::SequenceUpdate),
            (&["LPOP", "k"], Need::Ordered),
            (&["ZPOPMIN", "k"], Need::Ordered),
            (
                &["GEOADD", "k", "13.36", "38.11", "p"],
                Need::ElementUpdate(false),
            ),
        ] {
            assert_eq!(need_of(parts), want, "{parts:?}");
        }
    }

    #[test]
    fn only_a_future_expiry_alone_is_a_blind_set() {
        let now = Timestamp(1_000_000);
        let blind = |parts: &[&str]| {
            with_args(parts, |a| {
                set_options(Cmd::Set, a, now).and_then(|o| blind_set(a, o, now))
            })
        };
        assert_eq!(
            blind(&["SET", "k", "v", "PX", "5"]),
            Some(Entry {
                data: Bytes::from("v"),
                expiry: Some(1_005_000),
                kind: Default::default(),
            })
        );
        assert_eq!(blind(&["SET", "k", "v"]).unwrap().expiry, None);
        assert_eq!(blind(&["SET", "k", "v", "PXAT", "1"]), None);
        assert_eq!(blind(&["SET", "k", "v", "KEEPTTL"]), None);
        assert_eq!(blind(&["SET", "k", "v", "EX", "1", "NX"]), None);
        assert_eq!(blind(&["SET", "k", "v", "EX", "nope"]), None);
    }
}
