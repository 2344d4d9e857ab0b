//! Key commands in cluster mode: what GET, SET, DEL, ... mean on an eventual or a timeline
//! bucket, the `MERIDIAN.GET` / `MERIDIAN.PUT` / `MERIDIAN.DEL` commands that expose contexts,
//! siblings and per-request quorums, and the timeline commands (`MERIDIAN.SET`,
//! `TL.GETLATEST`, `TL.GETCRIT`, `TL.TAS`) that expose read modes and versions.
//!
//! Eventual buckets:
//! - `GET`: the bucket's defaults; notfound or tombstone-only → nil; one value → it; siblings
//!   → the one with the greatest `(meta.ts_us, dot)` (what LWW would keep).
//! - `MERIDIAN.GET key [R n] ... [REPLICA_SELECTION s]`: per-request quorum options; the
//!   strategy `s` (`local_first`, `round_robin`, `least_outstanding`, `c3`, `naive`, ...)
//!   chooses the replica of a read that needs one (`R 1 READ_FANOUT quorum`).
//! - `SET key value`: a blind write that supersedes what the coordinating primary holds.
//!   `DEL`: per key, read the context, delete with it; replies how many keys had a value.
//!   `EXISTS`, `MGET`, `MSET` go through the same calls.
//! - Every other string command (SET's options, the EXPIRE family, TTL, GETRANGE, ...) runs in
//!   `cluster_strings`, which serves what an eventual bucket can honour and refuses, saying
//!   why, what would need an atomic read-modify-write; so do the hash commands. `GET` of a
//!   hash is `WRONGTYPE` and `MGET` shows it as nil, as Redis's.
//! - `SCAN`, `KEYS`, `DBSIZE` list the keys of the slots this node answers for
//!   (`cluster_keys`). `FLUSHDB` and `FLUSHALL [ASYNC|SYNC]` truncate every bucket, of every
//!   type, cluster-wide (`meridian_replication::truncation`): values written before are gone
//!   on every replica, and anti-entropy, repairs and hints cannot bring them back.
//!
//! Timeline buckets (`timeline.md` §2; the bucket type decides, per key):
//! - `GET` reads at the record's master (`read_latest`, as Redis Cluster reads at a slot's
//!   master: a client reads its own writes); `SET key value` is a `write`;
//!   `DEL` reads the master's version and writes a tombstone over it
//!   ([`meridian_replication::Dispatch::delete`]). `EXISTS`, `MGET`, `MSET` go through the
//!   same calls; every other string command runs in `cluster_strings`, as a test-and-set at
//!   the record's master.
//! - `MERIDIAN.GET key [ANY | LATEST | CRITICAL ver]` and the spec's `TL.GETLATEST key`,
//!   `TL.GETCRIT key ver` reply `[value, version]`: value nil for a tombstone or an absent
//!   record, version nil only when absent (a tombstone has one, so a client can read past
//!   its own delete). `MERIDIAN.GET key [ANY] REPLICA_SELECTION s` is a `read_any` whose
//!   replica the strategy `s` chooses (`load-balancing.md`; `LATEST` and `CRITICAL` read
//!   the master or check a version and take no strategy).
//! - `MULTI`/`EXEC` and `WATCH` over keys of one hash slot run as one timeline group at the
//!   records' master (`cluster_group`); `MERIDIAN.GET key ANY` reads a nearby replica.
//! - `MERIDIAN.SET key value [IFVERSION ver | IFVERSION NONE | NX]` and `TL.TAS key ver
//!   value` (ver may be `NONE`: insert-if-absent) reply the new version as a bulk string;
//!   `MERIDIAN.DEL key [IFVERSION ver]` replies the tombstone's version (nil when a plain
//!   delete found nothing to delete).
//! - `MERIDIAN.PUT`, contexts and quorum options are refused on timeline buckets
//!   (`wrong_bucket_type`), and read modes, versions and `MERIDIAN.SET` on eventual ones.
//!
//! Which of these meanings applies is decided by the dispatch facade
//! ([`meridian_replication::Dispatch`]), which reads the key's bucket type once per request:
//! this module only parses arguments into its requests and formats its results, and the
//! refusals that depend on the bucket type (`wrong_bucket_type`, `unsupported`) come from it.
//!
//! Large objects (`resp::blob`): `GET` of a key holding an object's manifest answers the
//! object's bytes up to `blob.resp_get_max` (chunks read through the node's object
//! service), `BLOB.READ key offset len` reads a range, `STRLEN` is the object's size, `MGET`
//! shows a chunked object as nil. On transactional buckets both run over the transaction's
//! snapshot view, which serves plain values and inline objects only.
//!
//! Errors: replication errors are written by [`crate::wire_error`] (`-ERR` for bad requests,
//! `-UNAVAILABLE <code> need=.. got=..`, `-TRYAGAIN overload`, `-TIMEOUT need=.. ok=..`,
//! `-CONFLICT version_mismatch current=<ver|none>`, `-UNAVAILABLE master_unavailable dc=<dc>
//! node=<id> key=<key> <reason>`) and counted in
//! `meridian_replication_errors_total{frontend="resp",code=...}`. A malformed argument is
//! `-ERR syntax error ...` or `-ERR invalid version ...`. The connection stays open.

use crate::cluster_backend::{ClusterBackend, apply_option};
use crate::metrics::Metrics;
use crate::objects::Objects;
use crate::resp::blob;
use crate::resp::cluster_db::{Db, flushdb_buckets};
use crate::wire_error;
use bytes::Bytes;
use meridian_cluster::Props;
use meridian_redis::{Args, Cmd, CmdError, Group, Reply};
use meridian_replication::timeline::{Expect, Version};
use meridian_replication::{
    DeleteOpts, Deleted, GetResult, Read, ReadMode, ReadOpts, ReplicationError, WriteOpts, Written,
};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

type Outcome = Result<(), Cow<'static, str>>;

/// The reply to a replication error, counted in `m` ([`wire_error`]).
fn repl(c: &ClusterBackend, m: &Metrics, e: ReplicationError) -> Cow<'static, str> {
    wire_error::resp(c, m, &e)
}

fn value(v: &[u8]) -> Bytes {
    Bytes::copy_from_slice(v)
}

/// Whether cluster mode gives `cmd` its own meaning ([`run`] returns `Some`). These commands
/// touch only their key arguments and never the connection's session, which is what lets a
/// connection run several of them at once; every other command waits for them (a barrier).
/// Every data type's commands are, and the groups below.
pub(crate) fn handles(cmd: Cmd) -> bool {
    let g = cmd.group();
    g.is_data() || matches!(g, Group::Keyspace | Group::Replication | Group::Handles)
}

/// The first SORT option naming other keys (`BY pattern` but `BY nosort`, `GET pattern` but
/// `GET #`), if any.
fn sort_pattern(args: Args<'_>) -> Option<&'static str> {
    let mut i = 2;
    while i + 1 < args.len() {
        let (opt, value) = (args.get(i), args.get(i + 1));
        if opt.eq_ignore_ascii_case(b"BY") && !value.eq_ignore_ascii_case(b"nosort") {
            return Some("BY");
        }
        if opt.eq_ignore_ascii_case(b"GET") && value != b"#" {
            return Some("GET");
        }
        i += 1;
    }
    None
}

/// The command a client uses instead of blocking `cmd`.
fn non_blocking_form(cmd: Cmd) -> &'static str {
    match cmd {
        Cmd::Blpop => "LPOP",
        Cmd::Brpop => "RPOP",
        Cmd::Blmove => "LMOVE",
        Cmd::Brpoplpush => "RPOPLPUSH",
        Cmd::Blmpop => "LMPOP",
        Cmd::Bzpopmin => "ZPOPMIN",
        Cmd::Bzpopmax => "ZPOPMAX",
        Cmd::Xread => "XREAD without BLOCK",
        Cmd::Xreadgroup => "XREADGROUP without BLOCK",
        _ => "ZMPOP",
    }
}

/// Whether a command flagged blocking would block: always, but XREAD and XREADGROUP only
/// with BLOCK (arguments that do not parse are the command's own error).
fn blocks(cmd: Cmd, args: Args<'_>) -> bool {
    match cmd {
        Cmd::Xread | Cmd::Xreadgroup => {
            matches!(
                meridian_redis::streams::blocking_timeout(cmd, args),
                Ok(Some(_))
            )
        }
        _ => true,
    }
}

/// Whether `cmd` is a data command of a type other than strings and hashes (or LCS) whose
/// keys are not just its first argument: several distinct keys (SMOVE, LMOVE, SINTERSTORE, RENAME,
/// PFMERGE, GEORADIUS ... STORE), keys a `numkeys` counts (ZUNION, LMPOP), or a key elsewhere
/// (BITOP's destination follows the operation). These run as one atomic group of their keys.
fn is_multi_key_collection_command(cmd: Cmd, args: Args<'_>) -> bool {
    // LCS is the one string command over two keys: read at their master as a group.
    if (matches!(cmd.group(), Group::Strings | Group::Hashes) && cmd != Cmd::Lcs)
        || !cmd.group().is_data()
    {
        return false;
    }
    let mut positions = cmd.spec().key_positions(&args);
    let Some(first) = positions.next() else {
        // ZUNION/LMPOP with a numkeys naming none: the module answers the argument's error.
        return false;
    };
    first != 1 || cmd.spec().numkeys_at > 0 || positions.any(|i| args.get(i) != args.get(first))
}

/// What a key command needs of the connection that sent it (kept by a pipelined command
/// that outlives the connection's borrow).
#[derive(Clone)]
pub(crate) struct Caller {
    /// The connection's transaction session token (read-your-commits), shared with it.
    pub txn_session: Arc<AtomicU64>,
    /// The database it selected (its keys are already rewritten into it).
    pub db: Db,
}

/// Runs `cmd` if cluster mode gives it its own meaning; `None` means "run it as usual"
/// (connection and server commands).
pub(crate) async fn run(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
    caller: &Caller,
    objects: Option<&Objects>,
) -> Option<Outcome> {
    let (txn_session, db) = (&*caller.txn_session, caller.db);
    // Transactional buckets serve every string command, each as one transaction.
    if meridian_redis::types::is_data_command(cmd)
        && args.len() > 1
        && c.node.is_transactional(args.get(1))
    {
        if cmd == Cmd::BlobRead
            && let Err(e) = blob::read_args(args, get_max(objects))
        {
            return Some(Err(e.into_line()));
        }
        crate::resp::cluster_txn::single(c, txn_session, cmd, args, reply).await;
        return Some(Ok(()));
    }
    let d = &c.dispatch;
    let out = match cmd {
        Cmd::Get => match d.get(args.get(1)).await {
            // A large object's manifest starts with 0xFF: one comparison for other values;
            // its (cold, boxed) read keeps this future small.
            Ok(Some(v)) if v.first() == Some(&0xff) => {
                Box::pin(large_get(c, m, reply, objects, args.get(1), v)).await
            }
            Ok(v) => {
                reply.opt_bulk(v.as_deref());
                Ok(())
            }
            Err(e) => Err(repl(c, m, e)),
        },
        Cmd::BlobRead => Box::pin(blob_read(c, m, reply, objects, args)).await,
        Cmd::BlobOpen | Cmd::BlobPread | Cmd::BlobClose => {
            Box::pin(blob_handle(c, m, reply, objects, cmd, args)).await
        }
        Cmd::Set if args.len() == 3 => match d.set(args.get(1), value(args.get(2))).await {
            Ok(()) => {
                reply.ok();
                Ok(())
            }
            Err(e) => Err(repl(c, m, e)),
        },
        Cmd::Del | Cmd::Unlink => {
            let mut n = 0;
            for k in args.iter_from(1) {
                match d.del(k).await {
                    Ok(existed) => n += i64::from(existed),
                    Err(e) => return Some(Err(repl(c, m, e))),
                }
            }
            reply.int(n);
            Ok(())
        }
        Cmd::Exists | Cmd::Touch => {
            let mut n = 0;
            for k in args.iter_from(1) {
                match d.exists(k).await {
                    Ok(found) => n += i64::from(found),
                    Err(e) => return Some(Err(repl(c, m, e))),
                }
            }
            reply.int(n);
            Ok(())
        }
        Cmd::Mget => {
            let mut values = Vec::with_capacity(args.len() - 1);
            for k in args.iter_from(1) {
                match d.get(k).await {
                    Ok(v) => values.push(v),
                    // Redis's MGET shows a key of another type as nil.
                    Err(ReplicationError::WrongType) => values.push(None),
                    Err(e) => return Some(Err(repl(c, m, e))),
                }
            }
            reply.array(values.len());
            for v in values {
                // A chunked large object is nil, as Redis's MGET shows another type.
                let v = v.and_then(|v| blob::shown_now(v).ok());
                reply.opt_bulk(v.as_deref());
            }
            Ok(())
        }
        Cmd::Mset => {
            if args.len().is_multiple_of(2) {
                return Some(Err(Cow::Borrowed(
                    "ERR wrong number of arguments for 'mset' command",
                )));
            }
            for i in (1..args.len()).step_by(2) {
                if let Err(e) = d.set(args.get(i), value(args.get(i + 1))).await {
                    return Some(Err(repl(c, m, e)));
                }
            }
            reply.ok();
            Ok(())
        }
        // A blocking command would wait for another client's write; cluster nodes do not
        // block yet, and answering the timeout at once would be a silent difference.
        _ if cmd.has_flag("blocking") && blocks(cmd, args) => Err(Cow::Owned(format!(
            "ERR {} does not block on a cluster node yet: use {} (it answers at once), or a \
             standalone node for blocking pops",
            cmd.spec().name.to_ascii_uppercase(),
            non_blocking_form(cmd)
        ))),
        // Redis Cluster's refusal: a pattern may name keys of any slot.
        _ if matches!(cmd, Cmd::Sort | Cmd::SortRo) && sort_pattern(args).is_some() => {
            Err(Cow::Owned(format!(
                "ERR {} option of SORT denied in Cluster mode when keys formed by the pattern \
                 may be in different slots.",
                sort_pattern(args).unwrap_or("BY")
            )))
        }
        // A collection command over several keys: one atomic group of its keys.
        _ if is_multi_key_collection_command(cmd, args) => {
            crate::resp::cluster_txn::multi_key(c, txn_session, cmd, args, reply).await;
            Ok(())
        }
        // Every other string command: over the key's live entry, as atomic as its bucket
        // type allows (`cluster_strings`).
        _ if meridian_redis::types::is_data_command(cmd) => {
            Box::pin(crate::resp::cluster_strings::run(c, m, reply, cmd, args)).await
        }
        _ if crate::resp::cluster_keys::is_slot_listing(cmd, args) => {
            Box::pin(crate::resp::cluster_keys::keys_in_slot(c, m, reply, args)).await
        }
        _ if crate::resp::cluster_keys::handles(cmd) => {
            Box::pin(crate::resp::cluster_keys::run(c, m, reply, cmd, args, db)).await
        }
        // A truncation (`meridian_replication::truncation`) of every bucket (FLUSHALL) or of
        // the selected database's (FLUSHDB, `cluster_db`), cluster-wide, whichever node is
        // asked, so a cluster client asking every master truncates once per master, harmlessly.
        Cmd::Flushdb | Cmd::Flushall if !crate::resp::common::flush_args_ok(args) => {
            Err(Cow::Borrowed("ERR syntax error"))
        }
        Cmd::Flushdb | Cmd::Flushall => match c
            .node
            .truncate((cmd == Cmd::Flushdb).then(|| flushdb_buckets(c, db)))
            .await
        {
            Ok(_) => {
                reply.ok();
                Ok(())
            }
            Err(e) => Err(repl(c, m, e)),
        },
        Cmd::MeridianGet => match read_opts(args) {
            Ok(opts) => read(c, m, reply, args.get(1), opts).await,
            Err(e) => Err(e),
        },
        Cmd::MeridianPut => match eventual_opts(args, 3) {
            Ok((context, props)) => {
                write(c, m, reply, args, WriteOpts::Eventual { context, props }).await
            }
            Err(e) => Err(e),
        },
        Cmd::MeridianDel => match delete_opts(args) {
            Ok(opts) => delete(c, m, reply, args.get(1), opts).await,
            Err(e) => Err(e),
        },
        Cmd::MeridianSet => match tl_set_options(args, 3) {
            Ok(expect) => write(c, m, reply, args, WriteOpts::Timeline(expect)).await,
            Err(e) => Err(e),
        },
        Cmd::TlGetlatest => read(c, m, reply, args.get(1), ReadOpts::Mode(ReadMode::Latest)).await,
        Cmd::TlGetcrit => match version_arg(args.get(2)) {
            Ok(v) => {
                read(
                    c,
                    m,
                    reply,
                    args.get(1),
                    ReadOpts::Mode(ReadMode::Critical(v)),
                )
                .await
            }
            Err(e) => Err(e),
        },
        Cmd::TlTas => match expect_arg(args.get(2)) {
            Ok(expect) => {
                let value = value(args.get(3));
                match c
                    .dispatch
                    .write(args.get(1), value, WriteOpts::Timeline(expect))
                    .await
                {
                    Ok(w) => {
                        written(reply, &w);
                        Ok(())
                    }
                    Err(e) => Err(repl(c, m, e)),
                }
            }
            Err(e) => Err(e),
        },
        _ => {
            debug_assert!(!handles(cmd), "{cmd:?} is in `handles` but not here");
            return None;
        }
    };
    Some(out)
}

/// `blob.resp_get_max` of the node (the default without an object service).
fn get_max(objects: Option<&Objects>) -> u64 {
    objects.map_or_else(crate::resp::context::default_get_max, |o| {
        o.config().resp_get_max
    })
}

/// `GET` of a value starting with 0xFF: a large object's bytes up to `blob.resp_get_max`,
/// or the value itself when it is no manifest.
async fn large_get(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    objects: Option<&Objects>,
    key: &[u8],
    value: Bytes,
) -> Outcome {
    let Some(man) = blob::manifest(&value) else {
        reply.bulk(&value);
        return Ok(());
    };
    let max = get_max(objects);
    if man.size > max {
        return Err(Cow::Owned(blob::too_large(man.size, max)));
    }
    if man.chunks.is_empty() || man.size == 0 {
        reply.bulk(man.inline.as_deref().unwrap_or_default());
        return Ok(());
    }
    let last = man.size - 1;
    let bytes = read_chunks(c, m, objects, key, std::sync::Arc::new(man), 0, last).await?;
    reply.bulk(&bytes);
    Ok(())
}

/// `BLOB.READ key offset len`.
async fn blob_read(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    objects: Option<&Objects>,
    args: Args<'_>,
) -> Outcome {
    let (offset, len) = blob::read_args(args, get_max(objects)).map_err(CmdError::into_line)?;
    let Some(v) = c
        .dispatch
        .get(args.get(1))
        .await
        .map_err(|e| repl(c, m, e))?
    else {
        reply.null();
        return Ok(());
    };
    read_shown(
        c,
        m,
        reply,
        objects,
        args.get(1),
        blob::shown(v),
        offset,
        len,
    )
    .await
}

/// `len` bytes from `offset` of `shown`, what `key` holds (or a handle on it pinned).
#[allow(clippy::too_many_arguments)]
async fn read_shown(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    objects: Option<&Objects>,
    key: &[u8],
    shown: blob::Shown,
    offset: u64,
    len: u64,
) -> Outcome {
    match shown {
        blob::Shown::Bytes(b) => reply.bulk(&blob::slice(&b, offset, len)),
        blob::Shown::Chunked(man) => match blob::span(man.size, offset, len) {
            None => reply.bulk(b""),
            Some((first, last)) => {
                let bytes = read_chunks(c, m, objects, key, man, first, last).await?;
                reply.bulk(&bytes);
            }
        },
    }
    Ok(())
}

/// `BLOB.OPEN`, `BLOB.PREAD`, `BLOB.CLOSE`: handles live on the node the key routes to.
async fn blob_handle(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    objects: Option<&Objects>,
    cmd: Cmd,
    args: Args<'_>,
) -> Outcome {
    let Some(objects) = objects else {
        return Err(Cow::Borrowed(
            "ERR large-object handles need the object service, which this server does not run",
        ));
    };
    let key = args.get(1);
    match cmd {
        Cmd::BlobOpen => {
            if c.node.is_transactional(key) {
                return Err(Cow::Borrowed(
                    "ERR BLOB.OPEN is not served on transactional buckets, whose reads run in \
                     transactions: read with BLOB.READ or GET",
                ));
            }
            let Some(v) = c.dispatch.get(key).await.map_err(|e| repl(c, m, e))? else {
                reply.null();
                return Ok(());
            };
            let pinned = blob::shown(v);
            let size = pinned.size();
            let id = objects
                .open_handle(key, pinned)
                .map_err(|f| blob::handle_error(f, 0, objects.config()).into_line())?;
            blob::opened(reply, id, size);
            Ok(())
        }
        Cmd::BlobPread => {
            let (id, offset, len) =
                blob::pread_args(args, get_max(Some(objects))).map_err(CmdError::into_line)?;
            let pinned = objects
                .handle(key, id)
                .map_err(|f| blob::handle_error(f, id, objects.config()).into_line())?;
            read_shown(c, m, reply, Some(objects), key, pinned, offset, len).await
        }
        _ => {
            let id = blob::close_args(args).map_err(CmdError::into_line)?;
            reply.int(i64::from(objects.close_handle(key, id)));
            Ok(())
        }
    }
}

/// Bytes `first..=last` of the chunked object at `key`, through the object service.
async fn read_chunks(
    c: &ClusterBackend,
    m: &Metrics,
    objects: Option<&Objects>,
    key: &[u8],
    man: std::sync::Arc<meridian_blob::Manifest>,
    first: u64,
    last: u64,
) -> Result<Bytes, Cow<'static, str>> {
    let Some(objects) = objects else {
        return Err(blob::no_service(man.size));
    };
    blob::read_chunked(objects, key, man, first, last, |e| repl(c, m, e)).await
}

/// `MERIDIAN.GET`, `TL.GETLATEST`, `TL.GETCRIT`: eventual → `[context, [values...]]` (nil
/// context and no values for notfound); timeline → `[value, version]` (value nil for a
/// tombstone or an absent record, version nil only when absent: a tombstone has one, so a
/// client can read past its own delete).
async fn read(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    key: &[u8],
    opts: ReadOpts,
) -> Outcome {
    let got = c
        .dispatch
        .read(key, opts)
        .await
        .map_err(|e| repl(c, m, e))?;
    reply.array(2);
    match &got {
        Read::Eventual(GetResult::Found {
            values, context, ..
        }) => {
            reply.bulk(context);
            reply.array(values.len());
            for v in values {
                reply.bulk(v);
            }
        }
        Read::Eventual(GetResult::NotFound { .. }) => {
            reply.null();
            reply.array(0);
        }
        Read::Timeline(got) => {
            reply.opt_bulk(got.value().map(|v| &v[..]));
            match got.version() {
                Some(v) => reply.bulk(v.to_string().as_bytes()),
                None => reply.null(),
            }
        }
        Read::Transactional { value, ts } => {
            reply.opt_bulk(value.as_deref());
            match ts {
                Some(ts) => reply.bulk(ts.0.to_string().as_bytes()),
                None => reply.null(),
            }
        }
    }
    Ok(())
}

/// `MERIDIAN.PUT` (the new context) and `MERIDIAN.SET` (the new version).
async fn write(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
    opts: WriteOpts<'_>,
) -> Outcome {
    let w = c
        .dispatch
        .write(args.get(1), value(args.get(2)), opts)
        .await
        .map_err(|e| repl(c, m, e))?;
    written(reply, &w);
    Ok(())
}

/// The reply to a write: the new context (eventual), version (timeline) or commit timestamp
/// (transactional).
fn written(reply: &mut Reply, w: &Written) {
    match w {
        Written::Eventual(out) => reply.bulk(&out.context),
        Written::Timeline(out) => reply.bulk(out.record.ver.to_string().as_bytes()),
        Written::Transactional(ts) => reply.bulk(ts.0.to_string().as_bytes()),
    }
}

/// `MERIDIAN.DEL`: the tombstone's context (eventual) or version (timeline); nil when a
/// plain delete found no value.
async fn delete(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    key: &[u8],
    opts: DeleteOpts<'_>,
) -> Outcome {
    match c
        .dispatch
        .delete(key, opts)
        .await
        .map_err(|e| repl(c, m, e))?
    {
        Deleted::Nothing => reply.null(),
        Deleted::Eventual(out) => reply.bulk(&out.context),
        Deleted::Timeline(out) => reply.bulk(out.record.ver.to_string().as_bytes()),
        Deleted::Transactional(ts) => reply.bulk(ts.0.to_string().as_bytes()),
    }
    Ok(())
}

/// Parses `NAME value` pairs from `args[first..]` into `props` (and `CONTEXT` into
/// `context` when given).
fn options<'a>(
    props: &mut Props,
    args: Args<'a>,
    first: usize,
    reads: bool,
    mut context: Option<&mut Option<&'a [u8]>>,
) -> Outcome {
    if !(args.len() - first).is_multiple_of(2) {
        return Err(Cow::Borrowed(
            "ERR syntax error: options come in NAME value pairs",
        ));
    }
    for i in (first..args.len()).step_by(2) {
        let (name, value) = (args.get(i), args.get(i + 1));
        if name.eq_ignore_ascii_case(b"CONTEXT")
            && let Some(ctx) = context.as_deref_mut()
        {
            *ctx = Some(value);
            continue;
        }
        apply_option(props, name, value, reads).map_err(|m| Cow::Owned(format!("ERR {m}")))?;
    }
    Ok(())
}

// ----- argument parsing ---------------------------------------------------------------------

/// The options of `MERIDIAN.GET key [ANY [REPLICA_SELECTION s] | LATEST | CRITICAL ver]` (a
/// timeline read mode) or `MERIDIAN.GET key [R n] [PR n] ... [REPLICA_SELECTION s]` (quorum
/// options; `REPLICA_SELECTION` alone is a `read_any` option on a timeline bucket too); the
/// facade refuses the kind the key's bucket does not take. `is_timeline` says whether the
/// key's bucket is a timeline bucket (asked only for `ANY REPLICA_SELECTION s`).
fn read_opts(args: Args<'_>) -> Result<ReadOpts, Cow<'static, str>> {
    if args.len() == 2 {
        Ok(ReadOpts::Default)
    } else if args.len() == 5
        && args.get(2).eq_ignore_ascii_case(b"ANY")
        && args.get(3).eq_ignore_ascii_case(b"REPLICA_SELECTION")
    {
        let mut props = Props::default();
        options(&mut props, args, 3, true, None)?;
        // The facade reads it as a `read_any` with that strategy on a timeline bucket; on
        // another bucket type `ANY` is a read mode it refuses (`wrong_bucket_type`).
        Ok(ReadOpts::AnyWith(props))
    } else if names_read_mode(args) {
        tl_read_mode(args, 2).map(ReadOpts::Mode)
    } else {
        let mut props = Props::default();
        options(&mut props, args, 2, true, None)?;
        Ok(ReadOpts::Quorum(props))
    }
}

/// The `[CONTEXT ctx] [W n] [DW n] [PW n] [NODE_CONFIRMS n] [DC_CONFIRMS n] [TIMEOUT ms]`
/// options of `MERIDIAN.PUT` / `MERIDIAN.DEL` from `args[first..]` (an empty context is none).
fn eventual_opts(
    args: Args<'_>,
    first: usize,
) -> Result<(Option<&[u8]>, Props), Cow<'static, str>> {
    let mut props = Props::default();
    let mut context: Option<&[u8]> = None;
    options(&mut props, args, first, false, Some(&mut context))?;
    Ok((context.filter(|c| !c.is_empty()), props))
}

/// The options of `MERIDIAN.DEL key`: none (a plain delete), `IFVERSION ver` (a timeline
/// test-and-set) or the eventual options.
fn delete_opts(args: Args<'_>) -> Result<DeleteOpts<'_>, Cow<'static, str>> {
    match args.len() {
        2 => Ok(DeleteOpts::Plain),
        4 if args.get(2).eq_ignore_ascii_case(b"IFVERSION") => Ok(DeleteOpts::Timeline(
            Expect::Version(version_arg(args.get(3))?),
        )),
        _ => {
            let (context, props) = eventual_opts(args, 2)?;
            Ok(DeleteOpts::Eventual { context, props })
        }
    }
}

/// A version argument (`gen.mepoch.seq`).
fn version_arg(a: &[u8]) -> Result<Version, Cow<'static, str>> {
    std::str::from_utf8(a)
        .map_err(|_| {
            Cow::Borrowed(
                "ERR invalid version: not UTF-8 text; expected gen.mepoch.seq, three decimal \
                 numbers such as 1700000000000000.0.5",
            )
        })?
        .parse::<Version>()
        .map_err(|e| Cow::Owned(format!("ERR {e}")))
}

/// A test-and-set precondition: a version, or `NONE` (the spec's insert-if-absent).
fn expect_arg(a: &[u8]) -> Result<Expect, Cow<'static, str>> {
    if a.eq_ignore_ascii_case(b"NONE") {
        Ok(Expect::Absent)
    } else {
        version_arg(a).map(Expect::Version)
    }
}

/// Whether a `MERIDIAN.GET` names a timeline read mode (on an eventual bucket the facade
/// refuses it as `wrong_bucket_type` rather than as an unknown quorum option).
fn names_read_mode(args: Args<'_>) -> bool {
    args.len() > 2
        && [&b"LATEST"[..], b"ANY", b"CRITICAL"]
            .iter()
            .any(|w| args.get(2).eq_ignore_ascii_case(w))
}

/// The read mode of `MERIDIAN.GET key [ANY | LATEST | CRITICAL ver]` (from `args[first..]`);
/// none given is the bucket's default, `ANY`.
fn tl_read_mode(args: Args<'_>, first: usize) -> Result<ReadMode, Cow<'static, str>> {
    const USAGE: &str = "ERR syntax error: MERIDIAN.GET takes ANY [REPLICA_SELECTION \
                         <strategy>], LATEST or CRITICAL <version> (timeline buckets) or quorum \
                         options in NAME value pairs (eventual buckets)";
    let word = |i: usize, w: &[u8]| args.get(i).eq_ignore_ascii_case(w);
    match args.len() - first {
        0 => Ok(ReadMode::Any),
        1 if word(first, b"ANY") => Ok(ReadMode::Any),
        1 if word(first, b"LATEST") => Ok(ReadMode::Latest),
        2 if word(first, b"CRITICAL") => version_arg(args.get(first + 1)).map(ReadMode::Critical),
        _ => Err(Cow::Borrowed(USAGE)),
    }
}

/// The precondition of `MERIDIAN.SET key value [IFVERSION ver | IFVERSION NONE | NX]`.
fn tl_set_options(args: Args<'_>, first: usize) -> Result<Expect, Cow<'static, str>> {
    const USAGE: &str = "ERR syntax error: MERIDIAN.SET key value [IFVERSION <version> | \
                         IFVERSION NONE | NX]";
    let word = |i: usize, w: &[u8]| args.get(i).eq_ignore_ascii_case(w);
    match args.len() - first {
        0 => Ok(Expect::Any),
        1 if word(first, b"NX") => Ok(Expect::Absent),
        2 if word(first, b"IFVERSION") => expect_arg(args.get(first + 1)),
        _ => Err(Cow::Borrowed(USAGE)),
    }
}
