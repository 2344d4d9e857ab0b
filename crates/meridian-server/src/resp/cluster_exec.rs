//! Key commands in cluster mode: what GET, SET, DEL, ... mean on an eventual bucket, and the
//! `MERIDIAN.GET` / `MERIDIAN.PUT` / `MERIDIAN.DEL` commands that expose contexts, siblings
//! and per-request quorums.
//!
//! - `GET`: the bucket's defaults; notfound or tombstone-only → nil; one value → it; siblings
//!   → the one with the greatest `(meta.ts_us, dot)` (what LWW would keep).
//! - `SET key value`: reads the key's context with the bucket's R, then writes with it;
//!   options are refused (use `MERIDIAN.PUT`). `DEL`: per key, read the context, delete with
//!   it; replies how many keys had a value. `EXISTS`, `MGET`, `MSET`, `STRLEN`, `TYPE`, `TTL`
//!   (always -1 or -2: eventual buckets have no expiry) go through the same calls.
//! - Commands needing an atomic read-modify-write across replicas (INCR, APPEND, GETDEL,
//!   EXPIRE, SETNX, ...) are refused with a message saying so; SCAN, KEYS, DBSIZE, FLUSHDB
//!   and FLUSHALL are refused (no cluster-wide listing yet).
//! - Replication errors become `-ERR <code> <figures>` (the error's `Display`, e.g.
//!   `-ERR r_val_unsatisfied need=2 got=1`); the connection stays open. Each one is counted
//!   in `meridian_replication_errors_total{frontend="resp",code=...}`.

use crate::cluster::{ClusterBackend, apply_option};
use crate::metrics::{Frontend, Metrics};
use crate::resp::command::Cmd;
use crate::resp::reply::Reply;
use crate::resp::request::Args;
use meridian_cluster::Props;
use meridian_replication::{GetOptions, GetResult, PutOptions, ReplicationError};
use std::borrow::Cow;

type Outcome = Result<(), Cow<'static, str>>;

/// The reply to a replication error, counted in `m`.
fn repl(m: &Metrics, e: ReplicationError) -> Cow<'static, str> {
    m.replication_error(Frontend::Resp, e.code());
    Cow::Owned(format!("ERR {e}"))
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
        | Cmd::MeridianDel => true,
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
        | Cmd::Role => false,
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
            if args.len() != 3 {
                Err(Cow::Borrowed(
                    "ERR SET options are not supported on eventual buckets; use MERIDIAN.PUT",
                ))
            } else {
                match c.set(args.get(1), args.get(2).to_vec().into()).await {
                    Ok(()) => {
                        reply.ok();
                        Ok(())
                    }
                    Err(e) => Err(repl(m, e)),
                }
            }
        }
        Cmd::Del | Cmd::Unlink => {
            let mut n = 0;
            for k in args.iter_from(1) {
                match c.del(k).await {
                    Ok(existed) => n += i64::from(existed),
                    Err(e) => return Some(Err(repl(m, e))),
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
                    Err(e) => return Some(Err(repl(m, e))),
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
                    Err(e) => return Some(Err(repl(m, e))),
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
                    return Some(Err(repl(m, e)));
                }
            }
            reply.ok();
            Ok(())
        }
        Cmd::Strlen | Cmd::Type | Cmd::Ttl | Cmd::Pttl | Cmd::Expiretime | Cmd::Pexpiretime => {
            let v = match c.get_latest(args.get(1)).await {
                Ok(v) => v,
                Err(e) => return Some(Err(repl(m, e))),
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
        | Cmd::Persist => Err(Cow::Owned(format!(
            "ERR {} is not supported on eventual buckets (no atomic read-modify-write across \
             replicas)",
            upper(cmd)
        ))),
        Cmd::Getrange | Cmd::Substr => Err(Cow::Owned(format!(
            "ERR {} is not supported on eventual buckets; use GET",
            upper(cmd)
        ))),
        Cmd::Scan | Cmd::Keys | Cmd::Dbsize | Cmd::Flushdb | Cmd::Flushall => {
            Err(Cow::Owned(format!(
                "ERR {} is not supported in cluster mode (keys are spread over the ring and \
                 there is no cluster-wide listing yet)",
                upper(cmd)
            )))
        }
        Cmd::MeridianGet => meridian_get(c, m, reply, args).await,
        Cmd::MeridianPut => meridian_write(c, m, reply, args, true).await,
        Cmd::MeridianDel => meridian_write(c, m, reply, args, false).await,
        _ => {
            debug_assert!(!handles(cmd), "{cmd:?} is in `handles` but not here");
            return None;
        }
    };
    Some(out)
}

async fn get(c: &ClusterBackend, m: &Metrics, reply: &mut Reply, key: &[u8]) -> Outcome {
    let v = c.get_latest(key).await.map_err(|e| repl(m, e))?;
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
        .map_err(|e| repl(m, e))?;
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
    .map_err(|e| repl(m, e))?;
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
