//! Key commands in cluster mode: what GET, SET, DEL, ... mean on an eventual or a timeline
//! bucket, the `MERIDIAN.GET` / `MERIDIAN.PUT` / `MERIDIAN.DEL` commands that expose contexts,
//! siblings and per-request quorums, and the timeline commands (`MERIDIAN.SET`,
//! `TL.GETLATEST`, `TL.GETCRIT`, `TL.TAS`) that expose read modes and versions.
//!
//! Eventual buckets:
//! - `GET`: the bucket's defaults; notfound or tombstone-only → nil; one value → it; siblings
//!   → the one with the greatest `(meta.ts_us, dot)` (what LWW would keep).
//! - `SET key value`: reads the key's context with the bucket's R, then writes with it;
//!   options are refused (use `MERIDIAN.PUT`). `DEL`: per key, read the context, delete with
//!   it; replies how many keys had a value. `EXISTS`, `MGET`, `MSET`, `STRLEN`, `TYPE`, `TTL`
//!   (always -1 or -2: eventual buckets have no expiry) go through the same calls.
//! - Commands needing an atomic read-modify-write across replicas (INCR, APPEND, GETDEL,
//!   EXPIRE, SETNX, ...) are refused with a message saying so; SCAN, KEYS, DBSIZE, FLUSHDB
//!   and FLUSHALL are refused (no cluster-wide listing yet).
//!
//! Timeline buckets (`timeline.md` §2; the bucket type decides, per key):
//! - `GET` is the bucket's default read mode, `read_any`; `SET key value` is a `write`
//!   (`NX` makes it insert-if-absent and answers nil over a live record, as Redis does);
//!   `SETNX` likewise; `DEL` reads the master's version and writes a tombstone over it
//!   ([`ClusterBackend::tl_delete`]). `EXISTS`, `MGET`, `MSET`, `STRLEN`, `TYPE`, `TTL` go
//!   through the same calls. Other read-modify-write commands are refused, naming the
//!   versioned commands that do it.
//! - `MERIDIAN.GET key [ANY | LATEST | CRITICAL ver]` and the spec's `TL.GETLATEST key`,
//!   `TL.GETCRIT key ver` reply `[value, version]`: value nil for a tombstone or an absent
//!   record, version nil only when absent (a tombstone has one, so a client can read past
//!   its own delete).
//! - `MERIDIAN.SET key value [IFVERSION ver | IFVERSION NONE | NX]` and `TL.TAS key ver
//!   value` (ver may be `NONE`: insert-if-absent) reply the new version as a bulk string;
//!   `MERIDIAN.DEL key [IFVERSION ver]` replies the tombstone's version (nil when a plain
//!   delete found nothing to delete).
//! - `MERIDIAN.PUT`, contexts and quorum options are refused on timeline buckets
//!   (`wrong_bucket_type`), and read modes, versions and `MERIDIAN.SET` on eventual ones.
//!
//! Errors: replication errors become `-ERR <code> <figures>` (the error's `Display`, e.g.
//! `-ERR r_val_unsatisfied need=2 got=1`), except the codes only timeline operations
//! produce, which take their class's prefix so clients can tell "retry elsewhere/later"
//! and "your version is stale" from a bad request: `-UNAVAILABLE master_unavailable dc=<dc>
//! node=<id> key=<key> <reason>`, `-UNAVAILABLE stale_version_unavailable ...`,
//! `-UNAVAILABLE insert_arbiter_unavailable ...`, `-CONFLICT version_mismatch
//! current=<ver|none>`, `-CONFLICT already_exists current=<ver>`. The eventual codes keep
//! `-ERR` because clients and the README already match on it. A malformed version is
//! `-ERR invalid version ...`. The connection stays open. Each replication error is counted
//! in `meridian_replication_errors_total{frontend="resp",code=...}`.

use crate::cluster::{ClusterBackend, apply_option};
use crate::metrics::{Frontend, Metrics};
use crate::resp::command::Cmd;
use crate::resp::reply::Reply;
use crate::resp::request::Args;
use bytes::Bytes;
use meridian_cluster::{Props, bucket_and_key};
use meridian_replication::timeline::{Content, Expect, Version};
use meridian_replication::{
    GetOptions, GetResult, PutOptions, ReadMode, ReplicationError, TlReadResult,
};
use std::borrow::Cow;

type Outcome = Result<(), Cow<'static, str>>;

/// The reply to a replication error, counted in `m`. See the module docs for the prefixes.
fn repl(c: &ClusterBackend, m: &Metrics, e: ReplicationError) -> Cow<'static, str> {
    m.replication_error(Frontend::Resp, e.code());
    Cow::Owned(resp_error(c, &e))
}

/// The error line (without the `-`) of a replication error.
fn resp_error(c: &ClusterBackend, e: &ReplicationError) -> String {
    use ReplicationError::*;
    match e {
        // The spec's form (§7) leads with the DC and the node, the figures an operator acts
        // on; the DC by its configured name.
        MasterUnavailable {
            key,
            master,
            dc,
            reason,
            maybe_applied,
        } => format!(
            "UNAVAILABLE master_unavailable dc={} node={master} key={key} {reason}{}",
            c.dc_name(*dc),
            if *maybe_applied {
                " (the write may have applied)"
            } else {
                ""
            }
        ),
        StaleVersionUnavailable { .. } | InsertArbiterUnavailable { .. } => {
            format!("UNAVAILABLE {e}")
        }
        VersionMismatch { .. } | AlreadyExists { .. } => format!("CONFLICT {e}"),
        _ => format!("ERR {e}"),
    }
}

fn upper(cmd: Cmd) -> String {
    cmd.spec().name.to_ascii_uppercase()
}

/// Whether cluster mode gives `cmd` its own meaning ([`run`] returns `Some`). These commands
/// touch only their key arguments and never the connection's session, which is what lets a
/// connection run several of them at once; every other command waits for them (a barrier).
/// Exhaustive, so a new command has to be placed on one side.
pub(crate) fn handles(cmd: Cmd) -> bool {
    match cmd {
        Cmd::Get
        | Cmd::Set
        | Cmd::Del
        | Cmd::Unlink
        | Cmd::Exists
        | Cmd::Touch
        | Cmd::Mget
        | Cmd::Mset
        | Cmd::Msetnx
        | Cmd::Incr
        | Cmd::Decr
        | Cmd::Incrby
        | Cmd::Decrby
        | Cmd::Incrbyfloat
        | Cmd::Append
        | Cmd::Strlen
        | Cmd::Getdel
        | Cmd::Getex
        | Cmd::Getset
        | Cmd::Getrange
        | Cmd::Substr
        | Cmd::Setrange
        | Cmd::Setnx
        | Cmd::Setex
        | Cmd::Psetex
        | Cmd::Expire
        | Cmd::Pexpire
        | Cmd::Expireat
        | Cmd::Pexpireat
        | Cmd::Ttl
        | Cmd::Pttl
        | Cmd::Expiretime
        | Cmd::Pexpiretime
        | Cmd::Persist
        | Cmd::Type
        | Cmd::Scan
        | Cmd::Keys
        | Cmd::Dbsize
        | Cmd::Flushdb
        | Cmd::Flushall
        | Cmd::MeridianGet
        | Cmd::MeridianPut
        | Cmd::MeridianDel
        | Cmd::MeridianSet
        | Cmd::TlGetlatest
        | Cmd::TlGetcrit
        | Cmd::TlTas => true,
        Cmd::Ping
        | Cmd::Echo
        | Cmd::Info
        | Cmd::Command
        | Cmd::Config
        | Cmd::Client
        | Cmd::Select
        | Cmd::Hello
        | Cmd::Auth
        | Cmd::Quit
        | Cmd::Reset
        | Cmd::Time
        | Cmd::Role
        | Cmd::Cluster
        | Cmd::Readonly
        | Cmd::Readwrite
        | Cmd::Asking => false,
    }
}

/// Runs `cmd` if cluster mode gives it its own meaning; `None` means "run it as usual"
/// (connection and server commands).
pub(crate) async fn run(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> Option<Outcome> {
    let out = match cmd {
        Cmd::Get => get(c, m, reply, args.get(1)).await,
        Cmd::Set => {
            if args.len() != 3 && c.node.is_timeline(args.get(1)) {
                tl_set_with_options(c, m, reply, args).await
            } else if args.len() != 3 {
                Err(Cow::Borrowed(
                    "ERR SET options are not supported on eventual buckets; use MERIDIAN.PUT",
                ))
            } else {
                match c.set(args.get(1), args.get(2).to_vec().into()).await {
                    Ok(()) => {
                        reply.ok();
                        Ok(())
                    }
                    Err(e) => Err(repl(c, m, e)),
                }
            }
        }
        Cmd::Del | Cmd::Unlink => {
            let mut n = 0;
            for k in args.iter_from(1) {
                match c.del(k).await {
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
                match c.get_latest(k).await {
                    Ok(v) => n += i64::from(v.is_some()),
                    Err(e) => return Some(Err(repl(c, m, e))),
                }
            }
            reply.int(n);
            Ok(())
        }
        Cmd::Mget => {
            let mut values = Vec::with_capacity(args.len() - 1);
            for k in args.iter_from(1) {
                match c.get_latest(k).await {
                    Ok(v) => values.push(v),
                    Err(e) => return Some(Err(repl(c, m, e))),
                }
            }
            reply.array(values.len());
            for v in &values {
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
                if let Err(e) = c.set(args.get(i), args.get(i + 1).to_vec().into()).await {
                    return Some(Err(repl(c, m, e)));
                }
            }
            reply.ok();
            Ok(())
        }
        Cmd::Strlen | Cmd::Type | Cmd::Ttl | Cmd::Pttl | Cmd::Expiretime | Cmd::Pexpiretime => {
            let v = match c.get_latest(args.get(1)).await {
                Ok(v) => v,
                Err(e) => return Some(Err(repl(c, m, e))),
            };
            match (cmd, v) {
                (Cmd::Strlen, v) => reply.int(v.map_or(0, |v| v.len() as i64)),
                (Cmd::Type, Some(_)) => reply.simple(b"string"),
                (Cmd::Type, None) => reply.simple(b"none"),
                (_, Some(_)) => reply.int(-1),
                (_, None) => reply.int(-2),
            }
            Ok(())
        }
        Cmd::Setnx if c.node.is_timeline(args.get(1)) => {
            match tl_insert(c, args.get(1), args.get(2)).await {
                Ok(written) => {
                    reply.int(i64::from(written));
                    Ok(())
                }
                Err(e) => Err(repl(c, m, e)),
            }
        }
        Cmd::Incr
        | Cmd::Decr
        | Cmd::Incrby
        | Cmd::Decrby
        | Cmd::Incrbyfloat
        | Cmd::Append
        | Cmd::Setrange
        | Cmd::Getdel
        | Cmd::Getex
        | Cmd::Getset
        | Cmd::Setnx
        | Cmd::Setex
        | Cmd::Psetex
        | Cmd::Msetnx
        | Cmd::Expire
        | Cmd::Pexpire
        | Cmd::Expireat
        | Cmd::Pexpireat
        | Cmd::Persist => Err(Cow::Owned(if c.node.is_timeline(args.get(1)) {
            format!(
                "ERR {} is not supported on timeline buckets; read with MERIDIAN.GET key \
                 LATEST and write with MERIDIAN.SET key value IFVERSION <version> (a \
                 test-and-set) instead",
                upper(cmd)
            )
        } else {
            format!(
                "ERR {} is not supported on eventual buckets (no atomic read-modify-write \
                 across replicas)",
                upper(cmd)
            )
        })),
        Cmd::Getrange | Cmd::Substr => Err(Cow::Owned(format!(
            "ERR {} is not supported on {} buckets; use GET",
            upper(cmd),
            if c.node.is_timeline(args.get(1)) {
                "timeline"
            } else {
                "eventual"
            }
        ))),
        Cmd::Scan | Cmd::Keys | Cmd::Dbsize | Cmd::Flushdb | Cmd::Flushall => {
            Err(Cow::Owned(format!(
                "ERR {} is not supported in cluster mode (keys are spread over the ring and \
                 there is no cluster-wide listing yet)",
                upper(cmd)
            )))
        }
        Cmd::MeridianGet if c.node.is_timeline(args.get(1)) || names_read_mode(args) => {
            match tl_read_mode(args, 2) {
                Ok(mode) => tl_get(c, m, reply, args.get(1), mode).await,
                Err(e) => Err(e),
            }
        }
        Cmd::MeridianGet => meridian_get(c, m, reply, args).await,
        Cmd::MeridianPut if c.node.is_timeline(args.get(1)) => Err(repl(
            c,
            m,
            wrong_type(
                args.get(1),
                "MERIDIAN.PUT takes causal contexts and quorums, which timeline buckets do \
                 not have: use SET key value or MERIDIAN.SET key value [IFVERSION <version>]",
            ),
        )),
        Cmd::MeridianPut => meridian_write(c, m, reply, args, true).await,
        Cmd::MeridianDel if c.node.is_timeline(args.get(1)) => {
            tl_meridian_del(c, m, reply, args).await
        }
        Cmd::MeridianDel => meridian_write(c, m, reply, args, false).await,
        Cmd::MeridianSet => match tl_set_options(args, 3) {
            Ok(expect) => tl_put(c, m, reply, args.get(1), args.get(2), expect).await,
            Err(e) => Err(e),
        },
        Cmd::TlGetlatest => tl_get(c, m, reply, args.get(1), ReadMode::Latest).await,
        Cmd::TlGetcrit => match version_arg(args.get(2)) {
            Ok(v) => tl_get(c, m, reply, args.get(1), ReadMode::Critical(v)).await,
            Err(e) => Err(e),
        },
        Cmd::TlTas => match expect_arg(args.get(2)) {
            Ok(expect) => tl_put(c, m, reply, args.get(1), args.get(3), expect).await,
            Err(e) => Err(e),
        },
        _ => {
            debug_assert!(!handles(cmd), "{cmd:?} is in `handles` but not here");
            return None;
        }
    };
    Some(out)
}

async fn get(c: &ClusterBackend, m: &Metrics, reply: &mut Reply, key: &[u8]) -> Outcome {
    let v = c.get_latest(key).await.map_err(|e| repl(c, m, e))?;
    reply.opt_bulk(v.as_deref());
    Ok(())
}

/// `MERIDIAN.GET key [R n] [PR n] [NOTFOUND_OK 0|1] [BASIC_QUORUM 0|1] [TIMEOUT ms]` →
/// `[context, [values...]]` (nil context and no values for notfound).
async fn meridian_get(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
) -> Outcome {
    let mut props = Props::default();
    options(&mut props, args, 2, true, None)?;
    let got = c
        .node
        .get(
            args.get(1),
            GetOptions {
                props,
                ..GetOptions::default()
            },
        )
        .await
        .map_err(|e| repl(c, m, e))?;
    reply.array(2);
    match &got {
        GetResult::Found {
            values, context, ..
        } => {
            reply.bulk(context);
            reply.array(values.len());
            for v in values {
                reply.bulk(v);
            }
        }
        GetResult::NotFound { .. } => {
            reply.null();
            reply.array(0);
        }
    }
    Ok(())
}

/// `MERIDIAN.PUT key value [CONTEXT ctx] [W n] [DW n] [PW n] [NODE_CONFIRMS n]
/// [DC_CONFIRMS n] [TIMEOUT ms]` and `MERIDIAN.DEL key [CONTEXT ctx] ...` → the new context.
async fn meridian_write(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
    put: bool,
) -> Outcome {
    let first = if put { 3 } else { 2 };
    let mut props = Props::default();
    let mut context: Option<&[u8]> = None;
    options(&mut props, args, first, false, Some(&mut context))?;
    let context = context.filter(|c| !c.is_empty());
    let opts = PutOptions {
        props,
        ..PutOptions::default()
    };
    let key = args.get(1);
    let out = if put {
        c.node
            .put(key, args.get(2).to_vec().into(), context, opts)
            .await
    } else {
        c.node.delete(key, context, opts).await
    }
    .map_err(|e| repl(c, m, e))?;
    reply.bulk(&out.context);
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

// ----- timeline buckets -------------------------------------------------------------------

/// A `wrong_bucket_type` refusal of `key`'s (timeline) bucket, with what to do instead.
fn wrong_type(key: &[u8], hint: &str) -> ReplicationError {
    ReplicationError::WrongBucketType {
        bucket: String::from_utf8_lossy(bucket_and_key(key).0).into_owned(),
        actual: "timeline".into(),
        hint: hint.into(),
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

/// Whether an eventual-bucket `MERIDIAN.GET` names a timeline read mode, so it is refused as
/// `wrong_bucket_type` rather than as an unknown quorum option.
fn names_read_mode(args: Args<'_>) -> bool {
    args.len() > 2
        && [&b"LATEST"[..], b"ANY", b"CRITICAL"]
            .iter()
            .any(|w| args.get(2).eq_ignore_ascii_case(w))
}

/// The read mode of `MERIDIAN.GET key [ANY | LATEST | CRITICAL ver]` (from `args[first..]`);
/// none given is the bucket's default, `ANY`.
fn tl_read_mode(args: Args<'_>, first: usize) -> Result<ReadMode, Cow<'static, str>> {
    const USAGE: &str = "ERR syntax error: MERIDIAN.GET on a timeline bucket takes ANY, LATEST \
                         or CRITICAL <version> (quorum options are for eventual buckets)";
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

/// Writes the `[value, version]` reply of a timeline read.
fn read_reply(reply: &mut Reply, got: &TlReadResult) {
    reply.array(2);
    reply.opt_bulk(got.value().map(|v| &v[..]));
    match got.version() {
        Some(v) => reply.bulk(v.to_string().as_bytes()),
        None => reply.null(),
    }
}

async fn tl_get(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    key: &[u8],
    mode: ReadMode,
) -> Outcome {
    let got = c.node.tl_get(key, mode).await.map_err(|e| repl(c, m, e))?;
    read_reply(reply, &got);
    Ok(())
}

/// A timeline write of `value` under `expect`; replies the new version.
async fn tl_put(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    key: &[u8],
    value: &[u8],
    expect: Expect,
) -> Outcome {
    let content = Content::Value(Bytes::copy_from_slice(value));
    let out = c
        .node
        .tl_put(key, content, expect)
        .await
        .map_err(|e| repl(c, m, e))?;
    reply.bulk(out.record.ver.to_string().as_bytes());
    Ok(())
}

/// Insert-if-absent: whether it wrote (`false`: a live record is there).
async fn tl_insert(c: &ClusterBackend, key: &[u8], value: &[u8]) -> Result<bool, ReplicationError> {
    let content = Content::Value(Bytes::copy_from_slice(value));
    match c.node.tl_put(key, content, Expect::Absent).await {
        Ok(_) => Ok(true),
        Err(ReplicationError::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// `SET key value NX` on a timeline bucket (the only option that has a meaning there).
async fn tl_set_with_options(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
) -> Outcome {
    for o in args.iter_from(3) {
        if !o.eq_ignore_ascii_case(b"NX") {
            return Err(Cow::Owned(format!(
                "ERR SET option '{}' is not supported on timeline buckets (no expiry, no XX, \
                 no GET); use SET key value [NX], or MERIDIAN.SET key value IFVERSION \
                 <version> for a test-and-set",
                String::from_utf8_lossy(o)
            )));
        }
    }
    if tl_insert(c, args.get(1), args.get(2))
        .await
        .map_err(|e| repl(c, m, e))?
    {
        reply.ok();
    } else {
        // Redis's answer to a SET NX that did not set.
        reply.null();
    }
    Ok(())
}

/// `MERIDIAN.DEL key [IFVERSION ver]` on a timeline bucket: the tombstone's version; nil
/// when a plain delete found no value.
async fn tl_meridian_del(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
) -> Outcome {
    let key = args.get(1);
    let written = match args.len() {
        2 => c.tl_delete(key).await,
        4 if args.get(2).eq_ignore_ascii_case(b"IFVERSION") => {
            let v = version_arg(args.get(3))?;
            c.node
                .tl_put(key, Content::Tombstone, Expect::Version(v))
                .await
                .map(Some)
        }
        _ => {
            return Err(Cow::Borrowed(
                "ERR syntax error: MERIDIAN.DEL on a timeline bucket takes only IFVERSION \
                 <version> (contexts and quorum options are for eventual buckets)",
            ));
        }
    }
    .map_err(|e| repl(c, m, e))?;
    match written {
        Some(w) => reply.bulk(w.record.ver.to_string().as_bytes()),
        None => reply.null(),
    }
    Ok(())
}
