//! EVAL, EVALSHA, FCALL and their `_RO` forms on a cluster node: a script runs as
//! atomically as its keys' bucket allows, as Redis Cluster runs one at its keys' shard.
//!
//! - **Its keys**: those it declares (`numkeys`), which must share a hash slot (`-MOVED` and
//!   `-CROSSSLOT` as for any multi-key command, before the script starts); a command reaching
//!   for a key it did not declare is refused with the reason (the script only ever read the
//!   declared ones). A script declaring no key runs over none.
//! - **How it runs**: on a timeline bucket (the default) as one timeline group — its keys
//!   read at their master, the script run over them here, its writes committed at the master
//!   only if no key changed since it read them (`cluster_group::exec`); on transactional
//!   buckets as one snapshot-isolation transaction (`cluster_txn::run_to_commit`). Either
//!   way it is atomic and its effects replicate as one write; on a conflict it runs again
//!   over fresh reads, so a script must depend on what it reads only (as Redis 7's effects
//!   replication assumes). Eventual buckets cannot order a script's writes: a script that may
//!   write there is refused with the reason; a read-only one (EVAL_RO, FCALL_RO, `no-writes`)
//!   runs over its keys as GET reads them, on any bucket.
//! - **What it can call**: the data commands of every type over its keys, and `PING`,
//!   `ECHO`, `TIME`; anything else (`PUBLISH`, `KEYS`, `INFO`, ...) is refused with the
//!   reason, since a re-run could not take it back. Redis's checks of a script's commands
//!   (unknown, arity, `noscript`, read-only, memory) are the node's own
//!   (`scripting::admit_call`).
//!
//! Scripts take turns on a node (its interpreters run one at a time), for the whole call:
//! reads and commit included. Scripts and functions are cached per node, as in Redis Cluster: SCRIPT LOAD and FUNCTION
//! LOAD on every node that should serve them (EVALSHA answers `-NOSCRIPT` where it is not).

use crate::cluster_backend::ClusterBackend;
use crate::resp::RespContext;
use crate::resp::scripting::{Call, admit_call};
use crate::resp::txn_view::{Body, TxnView};
use bytes::Bytes;
use meridian_lua::Host;
use meridian_redis::error::{CmdResult, raw};
use meridian_redis::{Args, Cmd, Reply};
use meridian_replication::AtomicGroup;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Runs a script call on a cluster node (see the module docs).
pub(crate) async fn call(
    ctx: &RespContext,
    c: &ClusterBackend,
    session: &AtomicU64,
    caller: ScriptCaller,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> CmdResult {
    let ScriptCaller {
        mut user,
        info,
        describe,
    } = caller;
    // One script at a time on a node, as on a single node: a connection waits its turn
    // (never blocking a worker on the interpreters' lock), `-BUSY` past the threshold.
    let Ok(_turn) = ctx.scripts.turn(true).await else {
        return Err(raw(ctx.scripts.busy_error()));
    };
    let call = {
        let mut engines = ctx.scripts.engine();
        Call::prepare(ctx, &mut engines, cmd, args)?
    };
    if call.no_cluster() {
        return Err(raw(
            "ERR Can not run script on cluster, 'no-cluster' flag is set.",
        ));
    }
    let mut keys: Vec<Bytes> = call.keys.iter_from(0).map(Bytes::copy_from_slice).collect();
    keys.sort();
    keys.dedup();
    let declared = keys.clone();
    let mut body = |view: &mut TxnView, out: &mut Reply| -> bool {
        let mut engines = ctx.scripts.engine();
        call.wrote.store(false, Ordering::Release);
        let _running = ctx.scripts.begin(call.wrote.clone(), call.info(args));
        let mut host = ClusterHost {
            ctx,
            user: &mut user,
            info: &info,
            describe,
            view,
            declared: &declared,
            read_only: call.read_only(),
            allow_oom: call.allow_oom(),
            wrote: &call.wrote,
        };
        call.run_with(&mut engines, &mut host, out);
        !ctx.scripts.is_halted()
    };
    if keys.is_empty() {
        let mut view = TxnView::over(&[], Vec::new(), c.node.clock_now());
        body(&mut view, reply);
        return Ok(());
    }
    let result = match c.dispatch.atomic_group(&keys) {
        Ok(AtomicGroup::Timeline) => {
            crate::resp::cluster_group::exec(c, &[], &keys, &mut body, reply.resp3).await
        }
        Ok(AtomicGroup::Transaction) => {
            crate::resp::cluster_txn::run_to_commit(c, None, session, &keys, &mut body, reply.resp3)
                .await
        }
        // A script that cannot write (EVAL_RO, FCALL_RO, `no-writes`) reads what a GET
        // reads, whatever the bucket: no write to order.
        Err(_) if call.read_only() => read_only(c, &keys, &mut body, reply.resp3).await,
        Err(why) => {
            return Err(raw(format!(
                "ERR {} cannot run atomically over its keys: {why}; scripts run on timeline \
                 buckets (the default) and transactional buckets",
                cmd.spec().name.to_ascii_uppercase()
            )));
        }
    };
    match result {
        Ok(Some(out)) => reply.out.extend_from_slice(&out),
        Ok(None) => reply.error("CONFLICT the script conflicted with other writes; retry it"),
        Err(line) => reply.error(&line),
    }
    Ok(())
}

/// Runs a read-only script over its keys as plain reads show them (an eventual bucket's
/// keys included): one run, nothing to commit.
async fn read_only(
    c: &ClusterBackend,
    keys: &[Bytes],
    body: &mut Body<'_>,
    resp3: bool,
) -> Result<Option<bytes::BytesMut>, String> {
    let mut found = Vec::with_capacity(keys.len());
    for k in keys {
        let e = c
            .dispatch
            .get_entry(k)
            .await
            .map_err(|e| crate::resp::txn_view::repl_line(c, e))?;
        found.push(e.map(|e| e.encode()));
    }
    let mut view = TxnView::over(keys, found, c.node.clock_now());
    let mut out = Reply {
        out: bytes::BytesMut::new(),
        resp3,
    };
    body(&mut view, &mut out);
    Ok(Some(out.out))
}

/// Who runs a script: its commands are checked against the caller's ACL user, and a refusal
/// is logged with `describe`'s CLIENT LIST line of the caller.
pub(crate) struct ScriptCaller {
    pub(crate) user: crate::resp::acl::SessionUser,
    pub(crate) info: std::sync::Arc<crate::resp::context::ClientInfo>,
    pub(crate) describe: fn(&RespContext, &crate::resp::context::ClientInfo) -> String,
}

/// The commands of one script run on a cluster node, over the view of its declared keys.
struct ClusterHost<'a> {
    ctx: &'a RespContext,
    user: &'a mut crate::resp::acl::SessionUser,
    info: &'a crate::resp::context::ClientInfo,
    describe: fn(&RespContext, &crate::resp::context::ClientInfo) -> String,
    view: &'a mut TxnView,
    declared: &'a [Bytes],
    read_only: bool,
    allow_oom: bool,
    wrote: &'a AtomicBool,
}

impl Host for ClusterHost<'_> {
    fn acl_check(&mut self, args: Args<'_>) -> Option<bool> {
        let cmd = Cmd::lookup(args.get(0))?;
        Some(self.user.allows(cmd, args))
    }

    fn call(&mut self, args: Args<'_>, reply: &mut Reply) {
        if let Err(msg) = self.run(args, reply) {
            reply.error(&msg);
        }
    }
}

impl ClusterHost<'_> {
    fn run(&mut self, args: Args<'_>, reply: &mut Reply) -> Result<(), String> {
        let (cmd, writes) = admit_call(self.ctx, args, self.read_only, self.allow_oom)?;
        let (ctx, info) = (self.ctx, self.info);
        let describe = self.describe;
        let client = || describe(ctx, info).trim_end().to_string();
        let context = crate::resp::acl::LogContext::Lua;
        crate::resp::acl_command::check(&ctx.users, self.user, (cmd, args), context, client)
            .map_err(|refused| refused.message)?;
        match cmd {
            Cmd::Ping if args.len() == 1 => reply.simple(b"PONG"),
            Cmd::Ping | Cmd::Echo => reply.bulk(args.get(1)),
            Cmd::Time => {
                let us = self.view_now();
                reply.array(2);
                reply.bulk((us / 1_000_000).to_string().as_bytes());
                reply.bulk((us % 1_000_000).to_string().as_bytes());
            }
            _ if meridian_redis::types::is_data_command(cmd) => {
                for i in cmd.spec().key_positions(&args) {
                    let key = args.get(i);
                    if self.declared.binary_search_by(|k| k[..].cmp(key)).is_err() {
                        return Err(format!(
                            "ERR Script attempted to access key '{}' that it did not declare: \
                             in cluster mode a script reaches only the keys it passes in KEYS \
                             (numkeys), which must share a hash slot",
                            String::from_utf8_lossy(key)
                        ));
                    }
                }
                if writes {
                    self.wrote.store(true, Ordering::Release);
                }
                if let Err(e) = meridian_redis::types::exec_on_view(cmd, args, self.view, reply) {
                    reply.command_error(e);
                }
            }
            _ => {
                return Err(format!(
                    "ERR {} is not served inside a script on a cluster node: a script runs \
                     over its declared keys and may run again on a conflict, which this \
                     command could not take back",
                    cmd.spec().name.to_ascii_uppercase()
                ));
            }
        }
        Ok(())
    }

    /// The view's time, µs since the epoch (TIME inside the script).
    fn view_now(&self) -> u64 {
        use meridian_redis::View;
        self.view.now().0
    }
}
