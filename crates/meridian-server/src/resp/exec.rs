//! What each command does: argument checks with Redis's messages, the keyspace call, and
//! the reply in Redis's type (RESP2 or RESP3).
//!
//! Data commands run through their type's module of the Redis layer
//! ([`meridian_redis::types`], one copy of their semantics, via `Keyspace::execute`);
//! MULTI/EXEC/DISCARD/WATCH/UNWATCH, and every command while a
//! transaction is open, go through the `multi` state machine first. The standalone EXEC runs
//! the queue inside `Keyspace::transaction`: string commands over its overlay, KEYS, SCAN,
//! DBSIZE and FLUSH over the overlay with every stripe held, connection and server commands
//! as usual (none of them takes a stripe lock, which the transaction holds).
//!
//! Order of checks, as in Redis's `processCommand`: unknown command, then arity, then
//! authentication, then the command's own argument errors. A request refused by those
//! checks inside MULTI flags the transaction (EXECABORT); a refused EXEC discards it. Keyspace errors become `-ERR
//! <message>`; errors with their own code (`NOAUTH`, `WRONGPASS`, `NOPROTO`) keep it.

use crate::cluster_backend::ClusterBackend;
use crate::keyspace::blocking::ServedReplies;
use crate::keyspace_events::{self, CommandEvents};
use crate::metrics::OpStats;
use crate::resp::acl;
use crate::resp::acl_command;
use crate::resp::blob::{self, Deferral, Deferred, Shown};
use crate::resp::cluster_cmd;
use crate::resp::cluster_db::{self, Db};
use crate::resp::cluster_exec::Caller;
use crate::resp::cluster_redirect;
pub(crate) use crate::resp::common::{error_reply, flush_args_ok};
use crate::resp::context::{ClientInfo, NOREPLICAS, REDIS_VERSION, RespContext};
use crate::resp::encoding_config;
use crate::resp::functions;
use crate::resp::info;
use crate::resp::multi::{self, MultiState, Queue, Step};
use crate::resp::pubsub;
use crate::resp::scripting;
use crate::resp::tracking;
use bytes::Bytes;
use meridian_redis::Cmd;
use meridian_redis::Reply;
use meridian_redis::value::{glob_match, parse_i64};
use meridian_redis::{Args, OwnedArgs};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Whether the connection goes on after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Keep serving.
    Continue,
    /// Write pending replies, then close.
    Close,
}

/// Per-connection state commands read and change.
#[derive(Debug)]
pub(crate) struct Session {
    /// Whether the client may run commands (from the start when the `default` user is on
    /// and `nopass`).
    pub authed: bool,
    /// The ACL user the connection runs as (`resp::acl`).
    pub(crate) user: acl::SessionUser,
    /// The client's registry entry.
    pub info: Arc<ClientInfo>,
    /// MULTI/EXEC and WATCH state.
    pub(crate) multi: MultiState,
    /// Cluster mode: the commit timestamp of this connection's last transaction on a
    /// transactional bucket (0: none), its session token for read-your-commits. Shared with
    /// the connection's concurrent commands.
    pub(crate) txn_session: Arc<std::sync::atomic::AtomicU64>,
    /// Single node: the reply of the last command when it must read a large object's
    /// chunks (`resp::blob`); the connection awaits it before the next request.
    pub(crate) deferred: Option<Deferred>,
    /// Single node: the wait of a blocking command (BLPOP, ...) that found nothing to pop;
    /// the connection waits on it before the next request.
    pub(crate) blocked: Option<crate::keyspace::blocking::BlockedWait>,
    /// Replies of clients this connection's commands unblocked, delivered once this
    /// connection's own replies are written (`keyspace::blocking`'s order).
    pub(crate) served: ServedReplies,
    /// Failed authentications on this connection (`crate::auth::FailurePolicy`).
    auth_failures: u32,
    /// What the failures since the last write cost: the connection waits this long before
    /// writing the replies (`take_auth_delay`).
    auth_delay: std::time::Duration,
    last_cmd: u8,
    /// Cluster mode: `READONLY` was sent (and no `READWRITE` since), so read-only commands
    /// are served here whatever node masters their slot (`cluster_redirect`).
    pub(crate) readonly: bool,
    /// Cluster mode: the database `SELECT` chose (`cluster_db`).
    pub(crate) db: Db,
    /// The connection's pub/sub subscriptions and mailbox (`resp::pubsub`).
    pub(crate) pubsub: pubsub::Subscribed,
    /// CLIENT TRACKING's state on this connection (`resp::tracking`).
    pub(crate) tracking: tracking::ClientTracking,
    /// CLIENT REPLY's setting.
    reply_mode: ReplyMode,
    /// Whether the running command was CLIENT REPLY (its own reply follows the new mode).
    reply_mode_set: bool,
}

/// CLIENT REPLY's setting: whether a command's reply is sent. Pub/sub confirmations and
/// messages are sent whatever it says, as Redis sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyMode {
    On,
    Off,
    /// The next command's reply is not sent (then `On` again).
    SkipNext,
}

impl ReplyMode {
    /// Whether the reply of a command started under this mode is dropped.
    fn mutes(self) -> bool {
        self != ReplyMode::On
    }
}

impl Session {
    pub fn new(ctx: &RespContext, info: Arc<ClientInfo>) -> Self {
        let pubsub = pubsub::open(ctx);
        let tracking = tracking::ClientTracking::connect(ctx, info.id, &pubsub);
        if let Some(m) = pubsub::mailbox(&pubsub) {
            let id = crate::pubsub::Hub::mailbox_id(m);
            info.mailbox_id.store(id, Ordering::Relaxed);
        }
        Self {
            authed: ctx.users.default_needs_no_auth(),
            user: ctx.users.default_session(),
            info,
            multi: MultiState::default(),
            txn_session: Arc::default(),
            deferred: None,
            blocked: None,
            served: ServedReplies::default(),
            auth_failures: 0,
            auth_delay: std::time::Duration::ZERO,
            last_cmd: 0,
            readonly: false,
            db: Db::default(),
            pubsub,
            tracking,
            reply_mode: ReplyMode::On,
            reply_mode_set: false,
        }
    }

    /// The session a command gets on a worker shard (`resp::sharded`), or a script's
    /// commands: the connection admitted it, so it is authenticated as `user`; no
    /// transaction, no deferred reply yet.
    pub fn on_shard(info: Arc<ClientInfo>, user: acl::SessionUser) -> Self {
        Self {
            authed: true,
            user,
            info,
            multi: MultiState::default(),
            txn_session: Arc::default(),
            deferred: None,
            blocked: None,
            served: ServedReplies::default(),
            auth_failures: 0,
            auth_delay: std::time::Duration::ZERO,
            last_cmd: 0,
            readonly: false,
            db: Db::default(),
            pubsub: None,
            tracking: Default::default(),
            reply_mode: ReplyMode::On,
            reply_mode_set: false,
        }
    }

    /// How long to wait before writing the replies of the batch just run: the delay its
    /// failed authentications earned (`crate::auth`); `None` when there were none.
    pub(crate) fn take_auth_delay(&mut self) -> Option<std::time::Duration> {
        let d = std::mem::take(&mut self.auth_delay);
        (!d.is_zero()).then_some(d)
    }

    /// Records a failed authentication (counted in `/metrics`), and what it costs.
    fn auth_failed(&mut self, ctx: &RespContext) {
        ctx.metrics
            .connections(crate::metrics::Frontend::Resp)
            .auth_failures
            .fetch_add(1, Ordering::Relaxed);
        self.auth_failures = self.auth_failures.saturating_add(1);
        let policy = crate::auth::FailurePolicy::after(self.auth_failures);
        if let Some(d) = policy.delay() {
            self.auth_delay = self.auth_delay.saturating_add(d);
        }
        if policy == crate::auth::FailurePolicy::Close {
            tracing::warn!(
                client = %self.info.addr,
                failures = self.auth_failures,
                "closing RESP client after repeated authentication failures"
            );
        }
    }

    /// Whether failed authentications have used up this connection.
    fn auth_exhausted(&self) -> bool {
        crate::auth::FailurePolicy::after(self.auth_failures) == crate::auth::FailurePolicy::Close
    }

    /// Publishes activity for CLIENT LIST (once per batch, not per command).
    pub fn touch(&self, ctx: &RespContext) {
        self.info
            .last_active_ms
            .store(ctx.elapsed_ms(), Ordering::Relaxed);
        self.info.last_cmd.store(self.last_cmd, Ordering::Relaxed);
    }
}

pub(crate) use meridian_redis::error::{
    CmdError, CmdResult, SYNTAX, arity_error, int_arg, raw, subcommand_arity, unknown_command,
    unknown_subcommand,
};
pub(crate) use meridian_redis::scan::{parse_scan, scan_reply};

/// What `CONFIG GET` answers for a secret that is set (`requirepass`).
pub(crate) const REDACTED: &str = "<redacted>";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

fn lossy(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Runs one request; returns the metrics handle to charge, whether the reply was an error,
/// and whether to go on. An error reply is counted in INFO's errorstats.
pub(crate) fn execute<'c>(
    ctx: &'c RespContext,
    session: &mut Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> (&'c Arc<OpStats>, bool, Flow) {
    let start = reply.out.len();
    let done = execute_counted(ctx, session, reply, args);
    if let Some(tail) = reply.out.get(start..) {
        ctx.errors.record(tail);
    }
    done
}

fn execute_counted<'c>(
    ctx: &'c RespContext,
    session: &mut Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> (&'c Arc<OpStats>, bool, Flow) {
    // CLIENT REPLY OFF or SKIP silences refusals too.
    let start = reply.out.len();
    let muted_before = session.reply_mode.mutes();
    if session.reply_mode == ReplyMode::SkipNext {
        session.reply_mode = ReplyMode::On;
    }
    let silenced = |reply: &mut Reply, refused| {
        if muted_before {
            reply.out.truncate(start);
        }
        refused
    };
    let cmd = match admit(ctx, session, reply, args) {
        Ok(cmd) => cmd,
        Err(refused) => {
            refused.0.reject();
            return silenced(reply, refused);
        }
    };
    if ctx.keyspace.over_maxmemory() {
        let fits = ctx.keyspace.make_room();
        // Invalidations of the keys evicted to make room come before this command's reply,
        // as in Redis (muted, they wait for the connection loop).
        if !muted_before && ctx.keyspace.caching.active() {
            pubsub::deliver(&mut session.pubsub, reply);
        }
        if let Err(refused) = out_of_memory(ctx, session, reply, cmd, fits) {
            refused.0.reject();
            return silenced(reply, refused);
        }
    }
    if ctx.too_few_replicas()
        && let Err(refused) = no_good_replicas(ctx, session, reply, cmd)
    {
        refused.0.reject();
        return silenced(reply, refused);
    }
    let mut flow = Flow::Continue;
    let notifier = &ctx.keyspace.events;
    let events = CommandEvents::begin(notifier, cmd, args, |k| ctx.keyspace.key_exists(k));
    let caching = ctx.keyspace.caching.begin();
    let queued_or_exec = session.multi.active || multi::is_transaction_command(cmd);
    let result = if queued_or_exec {
        match multi::step(&mut session.multi, reply, cmd, args) {
            Step::Done(r) => r,
            Step::Exec => exec_transaction(ctx, session, reply),
            Step::Watch => {
                let ws = session
                    .multi
                    .watches
                    .get_or_insert_with(|| crate::keyspace::WatchSet::new(ctx.keyspace.clone()));
                for k in args.iter_from(1) {
                    ws.watch(k);
                }
                reply.ok();
                Ok(())
            }
            Step::Run => other(ctx, session, reply, cmd, args, &mut flow),
        }
    } else {
        match cmd {
            Cmd::Get => get(ctx, session, reply, args),
            Cmd::BlobRead => blob_read(ctx, session, reply, args),
            Cmd::BlobOpen | Cmd::BlobPread | Cmd::BlobClose => {
                blob_handle(ctx, session, reply, cmd, args)
            }
            _ => other(ctx, session, reply, cmd, args, &mut flow),
        }
    };
    if let Some(events) = events {
        events.finish(notifier, cmd, args, |k| ctx.keyspace.key_exists(k));
    }
    if ctx.keyspace.has_ready_keys() {
        ctx.keyspace.serve_blocked(&mut session.served);
    }
    if let Some(caching) = caching {
        caching.finish(&ctx.keyspace.caching, session.info.id);
    }
    if !session.multi.active {
        // Not queued, nor MULTI (whose CACHING flag holds for the transaction).
        let id = session.info.id;
        let ran = !queued_or_exec;
        tracking::after_command(ctx, &mut session.tracking, id, cmd, args, ran);
    }
    let error = finish(reply, result);
    let muted = if std::mem::take(&mut session.reply_mode_set) {
        session.reply_mode.mutes()
    } else {
        muted_before
    };
    if muted && !pubsub::always_replied(cmd) {
        reply.out.truncate(start);
    }
    (&ctx.ops[cmd as usize], error, flow)
}

/// Standalone, over `maxmemory`, after making room (evicting under an evicting policy):
/// unless it `fits` now, refuses what Redis's `processCommand` refuses: a command flagged
/// `denyoom`, any command but EXEC, DISCARD, QUIT and RESET inside MULTI (the queue would
/// grow), and an EXEC whose queue holds a `denyoom` command (which aborts the transaction).
/// Reads, DEL, EXPIRE, CONFIG (to raise the limit) still run.
fn out_of_memory<'c>(
    ctx: &'c RespContext,
    session: &mut Session,
    reply: &mut Reply,
    cmd: Cmd,
    fits: bool,
) -> Result<(), Refused<'c>> {
    if fits {
        return Ok(());
    }
    let denyoom = |c: Cmd| c.spec().flags.contains(&"denyoom");
    let refuse = if session.multi.active {
        match cmd {
            Cmd::Exec => session.multi.queued.iter().any(|q| denyoom(q.cmd)),
            Cmd::Discard | Cmd::Quit | Cmd::Reset => false,
            _ => true,
        }
    } else {
        denyoom(cmd)
    };
    if !refuse {
        return Ok(());
    }
    let msg = session
        .multi
        .refused(Some(cmd), crate::memory::OOM.to_string());
    reply.error(&msg);
    Err((&ctx.rejected_ops, true, Flow::Continue))
}

/// With `min-replicas-to-write` unmet: refuses a write command (queued inside MULTI, which
/// then aborts) and an EXEC whose queue holds one, as Redis's `processCommand` does. Scripts
/// are checked when they start and at each write they call (`resp::scripting`).
fn no_good_replicas<'c>(
    ctx: &'c RespContext,
    session: &mut Session,
    reply: &mut Reply,
    cmd: Cmd,
) -> Result<(), Refused<'c>> {
    let writes = |c: Cmd| c.spec().flags.contains(&"write");
    let refuse = match cmd {
        Cmd::Exec if session.multi.active => session.multi.queued.iter().any(|q| writes(q.cmd)),
        _ => writes(cmd),
    };
    if !refuse {
        return Ok(());
    }
    let msg = session.multi.refused(Some(cmd), NOREPLICAS.to_string());
    reply.error(&msg);
    Err((&ctx.rejected_ops, true, Flow::Continue))
}

/// Standalone EXEC: runs the queued commands as one atomic unit over the keyspace (see
/// [`crate::keyspace::Keyspace::transaction`]): the array of their replies (a command's
/// runtime error is an error element; the others still apply), or the null array when a
/// watched key was modified or expired since WATCH. Ends the transaction either way.
fn exec_transaction(ctx: &RespContext, session: &mut Session, reply: &mut Reply) -> CmdResult {
    let queued = std::mem::take(&mut session.multi.queued);
    let watches = session.multi.watches.take();
    session.multi.discard();
    // A script may touch any key: EXEC then locks every stripe, after the interpreters (the
    // order every script run takes them in).
    let scripts = queued.iter().any(|q| q.cmd.runs_script());
    let mut engines = scripts.then(|| ctx.scripts.engine());
    let all = scripts
        || queued
            .iter()
            .any(|q| multi::needs_every_stripe(q.cmd, q.args.get()));
    let keys = queued.iter().flat_map(|q| {
        let args = q.args.get();
        q.cmd.spec().key_positions(&args).map(move |i| args.get(i))
    });
    let watched = watches.as_ref().map_or(&[][..], |w| w.watches());
    let mark = reply.out.len();
    let done = ctx.keyspace.transaction(keys, all, watched, |ov| {
        reply.array(queued.len());
        for q in &queued {
            let item = reply.out.len();
            if let Err(msg) = exec_acl_recheck(ctx, session, q.cmd, q.args.get()) {
                reply.error(&msg);
                ctx.errors.record(&reply.out[item..]);
                continue;
            }
            let r = match engines.as_deref_mut() {
                Some(engines) if q.cmd.runs_script() => {
                    let mut lua = Session::on_shard(session.info.clone(), session.user.clone());
                    let run = &mut script_command(ctx, &mut lua);
                    scripting::run_in_exec(ctx, engines, reply, ov, q.cmd, q.args.get(), run)
                }
                _ => run_queued(ctx, session, reply, ov, q.cmd, q.args.get()),
            };
            let id = session.info.id;
            tracking::after_queued(ctx, &session.tracking, id, q.cmd, q.args.get());
            finish(reply, r);
            // A queued command's error counts in errorstats, as Redis counts it (EXEC's own
            // reply is an array, so `execute` does not see it).
            ctx.errors.record(&reply.out[item..]);
        }
    });
    // Unregisters the watches, now that the stripes are free again.
    drop(watches);
    match done {
        Ok(Some(())) => Ok(()),
        Ok(None) => {
            reply.null_array();
            Ok(())
        }
        Err(e) => {
            reply.out.truncate(mark);
            Err(e.into())
        }
    }
}

/// How a script's `redis.call` runs a command: as EXEC runs a queued one, in the script's
/// own session `lua`.
fn script_command<'a>(ctx: &'a RespContext, lua: &'a mut Session) -> ScriptRunner<'a> {
    ScriptRunner { ctx, lua }
}

/// The commands a script calls on a single node: checked against the caller's ACL user,
/// then run as EXEC runs a queued command, with the script's own session.
struct ScriptRunner<'a> {
    ctx: &'a RespContext,
    lua: &'a mut Session,
}

impl scripting::ScriptCommands for ScriptRunner<'_> {
    fn run(
        &mut self,
        reply: &mut Reply,
        ov: &mut crate::keyspace::Overlay<'_>,
        cmd: Cmd,
        args: Args<'_>,
    ) {
        let (ctx, lua) = (self.ctx, &mut *self.lua);
        let info = &lua.info;
        let client = || client_line(ctx, info).trim_end().to_string();
        let checked = acl_command::check(
            &ctx.users,
            &mut lua.user,
            (cmd, args),
            acl::LogContext::Lua,
            client,
        );
        if let Err(refused) = checked {
            reply.error(&refused.message);
            return;
        }
        if tracking::tracked_read(cmd) {
            crate::tracking::note_script_read();
        }
        let result = run_queued(ctx, lua, reply, ov, cmd, args);
        finish(reply, result);
    }

    fn allowed(&mut self, cmd: Cmd, args: Args<'_>) -> bool {
        self.lua.user.allows(cmd, args)
    }
}

/// One queued command inside EXEC, over the transaction's overlay. Nothing here may lock a
/// stripe: the transaction holds them.
fn run_queued(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    ov: &mut crate::keyspace::Overlay<'_>,
    cmd: Cmd,
    args: Args<'_>,
) -> CmdResult {
    match multi::queue_kind(cmd) {
        Queue::Data => {
            if cmd == Cmd::BlobRead {
                blob::read_args(args, ctx.blob_get_max())?;
            }
            let notifier = &ctx.keyspace.events;
            let live = |ov: &mut crate::keyspace::Overlay<'_>, k: &[u8]| {
                meridian_redis::View::header(ov, k).is_ok_and(|h| h.is_some())
            };
            let events = CommandEvents::begin(notifier, cmd, args, |k| live(ov, k));
            ov.set_foreign_reads(matches!(cmd, Cmd::Sort | Cmd::SortRo));
            let result = meridian_redis::types::exec_on_view(cmd, args, ov, reply);
            ov.set_foreign_reads(false);
            if let Some(events) = events {
                events.finish(notifier, cmd, args, |k| live(ov, k));
            }
            result
        }
        Queue::WholeKeyspace => match cmd {
            Cmd::Keys => {
                let pattern = args.get(1);
                let keys = ov.keys((pattern != b"*").then_some(pattern), None)?;
                reply.array(keys.len());
                for k in &keys {
                    reply.bulk(k);
                }
                Ok(())
            }
            Cmd::Scan => {
                let q = parse_scan(args)?;
                let resume = ov.scan_resume(q.cursor);
                // Every remaining key at once: cursor 0 ends the iteration.
                let keys = ov.keys_of_type(q.pattern, resume, q.kind.flatten())?;
                scan_reply(reply, 0, &keys, q.kind != Some(None));
                Ok(())
            }
            Cmd::Dbsize => {
                reply.int(ov.dbsize()? as i64);
                Ok(())
            }
            Cmd::Randomkey => {
                reply.opt_bulk(ov.random_key()?.as_deref());
                Ok(())
            }
            _ => {
                flush_args(args)?;
                ov.flush()?;
                reply.ok();
                Ok(())
            }
        },
        Queue::Unwatch => {
            reply.ok();
            Ok(())
        }
        Queue::Session => {
            let mut flow = Flow::Continue;
            other(ctx, session, reply, cmd, args, &mut flow)
        }
        Queue::Never => Err(raw(format!(
            "ERR {} cannot run inside a transaction",
            cmd.spec().name.to_ascii_uppercase()
        ))),
        // EXEC runs queued scripts itself (`exec_transaction`), and scripts refuse EVAL.
        Queue::Script => Err(raw(format!(
            "ERR {} cannot run here",
            cmd.spec().name.to_ascii_uppercase()
        ))),
        Queue::Outside => Err(raw(format!(
            "ERR {} cannot run inside a transaction: large-object handles are used outside \
             MULTI/EXEC",
            cmd.spec().name.to_ascii_uppercase()
        ))),
    }
}

/// Cluster mode: like [`execute`], but key commands run on the node's replication node,
/// awaited here; see [`crate::resp::cluster_exec`]. The connection uses this for a request
/// that runs alone: a connection or server command (a barrier), or a batch's only request;
/// key commands of a pipeline go through [`run_concurrent`] instead.
pub(crate) async fn execute_cluster<'c>(
    ctx: &'c RespContext,
    cluster: &ClusterBackend,
    session: &mut Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> (&'c Arc<OpStats>, bool, Flow) {
    let cmd = match admit(ctx, session, reply, args) {
        Ok(cmd) => cmd,
        Err(refused) => {
            refused.0.reject();
            return refused;
        }
    };
    // A selected database's keys, from here on (the MOVED check judged the client's).
    let rewritten = session.db.rewrite(cmd, args);
    let args = rewritten.as_ref().map_or(args, OwnedArgs::get);
    let mut flow = Flow::Continue;
    if crate::resp::cluster_txn::is_interactive(&session.multi, cmd) {
        let result = crate::resp::cluster_txn::interactive(
            cluster,
            &mut session.multi,
            &session.txn_session,
            cmd,
            args,
            reply,
        )
        .await;
        return (&ctx.ops[cmd as usize], finish(reply, result), flow);
    }
    if session.multi.active || multi::is_transaction_command(cmd) {
        let result = match multi::step(&mut session.multi, reply, cmd, args) {
            Step::Done(r) => r,
            Step::Exec => {
                crate::resp::cluster_txn::exec(
                    cluster,
                    &mut session.multi,
                    &session.txn_session,
                    reply,
                )
                .await;
                session.multi.discard();
                Ok(())
            }
            Step::Watch => {
                let keys = args.iter_from(1).map(Bytes::copy_from_slice).collect();
                match crate::resp::cluster_txn::watch(
                    cluster,
                    &mut session.multi,
                    &session.txn_session,
                    keys,
                )
                .await
                {
                    Ok(()) => {
                        reply.ok();
                        Ok(())
                    }
                    Err(msg) => Err(raw(msg)),
                }
            }
            Step::Run => other(ctx, session, reply, cmd, args, &mut flow),
        };
        return (&ctx.ops[cmd as usize], finish(reply, result), flow);
    }
    if matches!(cmd, Cmd::Select | Cmd::Move | Cmd::Swapdb) {
        let result = databases(cluster, session, reply, cmd, args).await;
        return (&ctx.ops[cmd as usize], finish(reply, result), flow);
    }
    // Users are replicated with the cluster metadata: a change is proposed and answered
    // once every member seen up follows it (`acl_cluster`).
    if cmd == Cmd::Acl && acl_command::changes_users(args) {
        let result = crate::resp::acl_cluster::command(ctx, cluster, reply, args).await;
        return (&ctx.ops[cmd as usize], finish(reply, result), flow);
    }
    if cmd.runs_script() {
        let txn_session = &session.txn_session;
        let caller = crate::resp::cluster_scripts::ScriptCaller {
            user: session.user.clone(),
            info: session.info.clone(),
            describe: client_line,
        };
        let result =
            crate::resp::cluster_scripts::call(ctx, cluster, txn_session, caller, reply, cmd, args)
                .await;
        return (&ctx.ops[cmd as usize], finish(reply, result), flow);
    }
    let result = match crate::resp::cluster_exec::run(
        cluster,
        &ctx.metrics,
        reply,
        cmd,
        args,
        &Caller {
            txn_session: session.txn_session.clone(),
            db: session.db,
        },
        ctx.objects().map(|o| &**o),
    )
    .await
    {
        Some(Ok(())) => Ok(()),
        Some(Err(msg)) => Err(raw(msg)),
        None => other(ctx, session, reply, cmd, args, &mut flow),
    };
    (&ctx.ops[cmd as usize], finish(reply, result), flow)
}

/// Cluster mode's `SELECT` (a bucket per database, `cluster_db`), `MOVE` and `SWAPDB`.
async fn databases(
    cluster: &ClusterBackend,
    session: &mut Session,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> CmdResult {
    match cmd {
        Cmd::Select => {
            let db = Db::parse(args.get(1)).map_err(raw)?;
            session.db = cluster_db::select(cluster, db).await.map_err(raw)?;
            reply.ok();
            Ok(())
        }
        Cmd::Move => Err(raw(cluster_db::MOVE_REFUSED)),
        _ => Err(raw(cluster_db::SWAPDB_REFUSED)),
    }
}

/// Cluster mode: the command a request names when it is one the connection may run
/// concurrently with others (see [`crate::resp::cluster_exec::handles`]), before any check.
#[inline]
pub(crate) fn concurrent_command(args: Args<'_>) -> Option<Cmd> {
    Cmd::lookup(args.get(0)).filter(|&c| crate::resp::cluster_exec::handles(c))
}

/// Cluster mode: runs a key command that [`admit`] accepted, on the replication node, with
/// its own `reply` (the connection copies it out in request order) and its own metrics:
/// latency from `start` to its completion, not to the completion of the pipeline around it.
pub(crate) async fn run_concurrent(
    ctx: &RespContext,
    cluster: &ClusterBackend,
    cmd: Cmd,
    args: OwnedArgs,
    mut reply: Reply,
    start: Instant,
    caller: Caller,
) -> Reply {
    let rewritten = caller.db.rewrite(cmd, args.get());
    let result = match crate::resp::cluster_exec::run(
        cluster,
        &ctx.metrics,
        &mut reply,
        cmd,
        rewritten.as_ref().unwrap_or(&args).get(),
        &caller,
        ctx.objects().map(|o| &**o),
    )
    .await
    {
        Some(Ok(())) => Ok(()),
        Some(Err(msg)) => Err(raw(msg)),
        // `concurrent_command` only lets through what `cluster_exec::run` handles.
        None => Err(raw(format!(
            "ERR {} cannot run in a pipeline",
            cmd.spec().name.to_ascii_uppercase()
        ))),
    };
    let error = finish(&mut reply, result);
    ctx.ops[cmd as usize].observe(start.elapsed(), error);
    reply
}

/// What a refused request returns: the metrics handle, "was an error", and go on.
pub(crate) type Refused<'c> = (&'c Arc<OpStats>, bool, Flow);

/// The checks every request passes before it runs, in Redis's order: a known command, its
/// arity, authentication. Answers the refusal itself.
pub(crate) fn admit<'c>(
    ctx: &'c RespContext,
    session: &mut Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> Result<Cmd, Refused<'c>> {
    let Some(cmd) = Cmd::lookup(args.get(0)) else {
        if is_http_line(args.get(0)) {
            security_warning(session);
            return Err((&ctx.rejected_ops, true, Flow::Close));
        }
        let msg = session.multi.refused(None, unknown_command(args));
        reply.error(&msg);
        return Err((&ctx.rejected_ops, true, Flow::Continue));
    };
    let spec = cmd.spec();
    if !spec.arity_ok(args.len()) {
        let msg = format!("ERR wrong number of arguments for '{}' command", spec.name);
        reply.error(&session.multi.refused(Some(cmd), msg));
        return Err((&ctx.rejected_ops, true, Flow::Continue));
    }
    if !session.authed && !cmd.no_auth() {
        let msg = session
            .multi
            .refused(Some(cmd), "NOAUTH Authentication required.".into());
        reply.error(&msg);
        return Err((&ctx.rejected_ops, true, Flow::Continue));
    }
    let context = if session.multi.active {
        acl::LogContext::Multi
    } else {
        acl::LogContext::Toplevel
    };
    if let Err(refused) = acl_check(ctx, session, cmd, args, context) {
        reply.error(&session.multi.refused(Some(cmd), refused.message));
        let flow = if session.user.current().is_none() {
            Flow::Close
        } else {
            Flow::Continue
        };
        return Err((&ctx.rejected_ops, true, flow));
    }
    if let Some(msg) = pubsub::refusal(&session.pubsub, reply.resp3, cmd) {
        reply.error(&session.multi.refused(Some(cmd), msg));
        return Err((&ctx.rejected_ops, true, Flow::Continue));
    }
    if let Some(msg) = blob::s3_key_refusal(ctx, cmd, args) {
        reply.error(&session.multi.refused(Some(cmd), msg));
        return Err((&ctx.rejected_ops, true, Flow::Continue));
    }
    let conn = cluster_redirect::ConnectionState {
        in_multi: session.multi.active,
        readonly: session.readonly,
        tls: session.info.tls,
    };
    if let Some(msg) = cluster_redirect::moved(ctx, conn, cmd, args) {
        reply.error(&session.multi.refused(Some(cmd), msg));
        return Err((&ctx.rejected_ops, true, Flow::Continue));
    }
    session.last_cmd = cmd as u8 + 1;
    Ok(cmd)
}

/// The ACL check of a request on this connection (`resp::acl`), logged in the context the
/// connection is in.
pub(crate) fn acl_check(
    ctx: &RespContext,
    session: &mut Session,
    cmd: Cmd,
    args: Args<'_>,
    context: acl::LogContext,
) -> Result<(), acl_command::Refused> {
    let info = &session.info;
    let client = || client_line(ctx, info).trim_end().to_string();
    acl_command::check(&ctx.users, &mut session.user, (cmd, args), context, client)
}

/// The ACL check EXEC repeats on each queued command (the user may have changed since it
/// was queued), with Redis's error naming why it is no longer allowed.
fn exec_acl_recheck(
    ctx: &RespContext,
    session: &mut Session,
    cmd: Cmd,
    args: Args<'_>,
) -> Result<(), String> {
    acl_check(ctx, session, cmd, args, acl::LogContext::Multi).map_err(|refused| {
        use meridian_redis::acl::Denied;
        let reason = match refused.denied {
            None | Some(Denied::Command) => "no permission to execute the command or subcommand",
            Some(Denied::Key(_)) => "no permission to touch the specified keys",
            Some(Denied::Channel(_)) => {
                "no permission to access one of the channels used as arguments"
            }
        };
        format!(
            "NOPERM ACLs rules changed between the moment the transaction was accumulated \
             and the EXEC call. This command is no longer allowed for the following reason: \
             {reason}"
        )
    })
}

/// The turn at the node's interpreters `args` needs before it runs on this connection
/// (`resp::scripting::turn`); `Err(())` once `-BUSY` was answered instead. Reads the
/// session before it waits, so the future holds no reference to it.
pub(crate) fn script_turn<'a>(
    ctx: &'a RespContext,
    session: &Session,
    args: Args<'a>,
    reply: &'a mut Reply,
) -> impl Future<Output = Result<Option<crate::scripting::Turn>, ()>> + 'a {
    let multi = &session.multi;
    let exec_runs_script = multi.active
        && args.get(0).eq_ignore_ascii_case(b"EXEC")
        && multi.queued.iter().any(|q| q.cmd.runs_script());
    scripting::turn(ctx, args, multi.active, exec_runs_script, reply)
}

/// Whether a command name is the start of an HTTP request line or header sent to the RESP
/// port (cross-protocol scripting: a browser made to POST to Redis): `POST` or `Host:`, any
/// case, as Redis checks. Such a request closes the connection without a reply, before
/// authentication, so nothing else the client sent runs.
fn is_http_line(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:")
}

/// Logs Redis's warning about an HTTP request on the RESP port, at most once a minute per
/// process (as Redis does), so an attack cannot flood the log.
fn security_warning(session: &Session) {
    static LAST: parking_lot::Mutex<Option<Instant>> = parking_lot::Mutex::new(None);
    let now = Instant::now();
    let mut last = LAST.lock();
    if last.is_some_and(|t| now.duration_since(t) < std::time::Duration::from_secs(60)) {
        return;
    }
    *last = Some(now);
    tracing::warn!(
        client = %session.info.addr,
        "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: \
         commands to Redis. This is likely due to an attacker attempting to use Cross \
         Protocol Scripting to compromise your Redis instance. Connection aborted."
    );
}

/// Writes a command's error, if any; returns whether there was one.
fn finish(reply: &mut Reply, result: CmdResult) -> bool {
    match result {
        Ok(()) => false,
        Err(e) => {
            error_reply(reply, e);
            true
        }
    }
}

#[inline]
fn get(ctx: &RespContext, session: &mut Session, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let v = ctx.keyspace.get(args.get(1))?;
    match v {
        // A large object's manifest starts with 0xFF: one comparison for every other value.
        Some(v) if v.first() == Some(&0xff) => large_get(ctx, session, reply, args.get(1), v),
        v => {
            reply.opt_bulk(v.as_deref());
            Ok(())
        }
    }
}

/// GET of a value starting with 0xFF: a large object's bytes, up to `blob.resp_get_max`
/// (chunks read by a deferred reply), or the value itself when it is no manifest.
#[cold]
fn large_get(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    key: &[u8],
    value: Bytes,
) -> CmdResult {
    let Some(m) = blob::manifest(&value) else {
        reply.bulk(&value);
        return Ok(());
    };
    let max = ctx.blob_get_max();
    if m.size > max {
        return Err(raw(blob::too_large(m.size, max)));
    }
    if m.chunks.is_empty() || m.size == 0 {
        reply.bulk(m.inline.as_deref().unwrap_or_default());
        return Ok(());
    }
    let last = m.size - 1;
    defer(ctx, session, key, Arc::new(m), 0, last)
}

/// `BLOB.READ key offset len` on a single node (outside MULTI).
fn blob_read(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> CmdResult {
    let (offset, len) = blob::read_args(args, ctx.blob_get_max())?;
    let Some(v) = ctx.keyspace.get(args.get(1))? else {
        reply.null();
        return Ok(());
    };
    read_shown(
        ctx,
        session,
        reply,
        args.get(1),
        blob::shown(v),
        offset,
        len,
    )
}

/// `len` bytes from `offset` of `shown`, what `key` holds (or a handle on it pinned): at once,
/// or deferred when they are in chunks.
fn read_shown(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    key: &[u8],
    shown: Shown,
    offset: u64,
    len: u64,
) -> CmdResult {
    match shown {
        Shown::Bytes(b) => reply.bulk(&blob::slice(&b, offset, len)),
        Shown::Chunked(m) => match blob::span(m.size, offset, len) {
            None => reply.bulk(b""),
            Some((first, last)) => defer(ctx, session, key, m, first, last)?,
        },
    }
    Ok(())
}

/// `BLOB.OPEN`, `BLOB.PREAD`, `BLOB.CLOSE` on a single node (outside MULTI): the handle
/// table is the object service's; a chunked read is deferred like `BLOB.READ`'s.
fn blob_handle(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> CmdResult {
    let objects = ctx.objects().ok_or_else(|| {
        raw("ERR large-object handles need the object service, which this server does not run")
    })?;
    let key = args.get(1);
    match cmd {
        Cmd::BlobOpen => match ctx.keyspace.get(key)? {
            None => reply.null(),
            Some(v) => {
                let pinned = blob::shown(v);
                let size = pinned.size();
                let id = objects
                    .open_handle(key, pinned)
                    .map_err(|f| blob::handle_error(f, 0, objects.config()))?;
                blob::opened(reply, id, size);
            }
        },
        Cmd::BlobPread => {
            let (id, offset, len) = blob::pread_args(args, ctx.blob_get_max())?;
            let pinned = objects
                .handle(key, id)
                .map_err(|f| blob::handle_error(f, id, objects.config()))?;
            return read_shown(ctx, session, reply, key, pinned, offset, len);
        }
        _ => {
            let id = blob::close_args(args)?;
            reply.int(i64::from(objects.close_handle(key, id)));
        }
    }
    Ok(())
}

/// Leaves the read of `first..=last` of the chunked object at `key` to the connection task
/// (the executor is synchronous; the chunk store is read on the async path).
fn defer(
    ctx: &RespContext,
    session: &mut Session,
    key: &[u8],
    m: Arc<meridian_blob::Manifest>,
    first: u64,
    last: u64,
) -> CmdResult {
    let objects = ctx
        .objects()
        .cloned()
        .ok_or_else(|| CmdError::Raw(blob::no_service(m.size)))?;
    let key = Bytes::copy_from_slice(key);
    session.deferred = Some(Deferred(Box::pin(async move {
        blob::read_chunked(&objects, &key, m, first, last, |e| {
            Cow::Owned(format!("ERR {e}"))
        })
        .await
    })));
    Ok(())
}

/// Writes the outcome of a [`Deferred`] reply; returns whether it was an error.
pub(crate) fn answer_deferred(reply: &mut Reply, outcome: Deferral) -> bool {
    match outcome {
        Ok(bytes) => {
            reply.bulk(&bytes);
            false
        }
        Err(msg) => {
            reply.error(&msg);
            true
        }
    }
}

fn other(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
    flow: &mut Flow,
) -> CmdResult {
    let ks = &ctx.keyspace;
    let key = || args.get(1);
    match cmd {
        Cmd::Scan => scan(ctx, reply, args)?,
        Cmd::Subscribe
        | Cmd::Unsubscribe
        | Cmd::Psubscribe
        | Cmd::Punsubscribe
        | Cmd::Ssubscribe
        | Cmd::Sunsubscribe
        | Cmd::Publish
        | Cmd::Spublish
        | Cmd::Pubsub => pubsub::command(ctx, &mut session.pubsub, reply, cmd, args)?,
        Cmd::Keys => {
            let keys = ks.keys(key())?;
            reply.array(keys.len());
            for k in &keys {
                reply.bulk(k);
            }
        }
        Cmd::Dbsize => reply.int(ks.dbsize() as i64),
        Cmd::Randomkey => reply.opt_bulk(ks.random_key()?.as_deref()),
        Cmd::Flushdb | Cmd::Flushall => {
            flush_args(args)?;
            ks.flush()?;
            reply.ok();
        }
        Cmd::Ping if pubsub::in_subscribed_mode(&session.pubsub, reply.resp3) => match args.len() {
            1 | 2 => pubsub::ping(reply, (args.len() == 2).then(|| args.get(1))),
            _ => return Err(arity_error("ping")),
        },
        Cmd::Ping => match args.len() {
            1 => reply.simple(b"PONG"),
            2 => reply.bulk(args.get(1)),
            _ => return Err(arity_error("ping")),
        },
        Cmd::Echo => reply.bulk(args.get(1)),
        Cmd::Info => {
            let text = info::render(ctx, args.iter_from(1));
            reply.verbatim(b"txt", text.as_bytes());
        }
        Cmd::Command => meridian_redis::command_info::command(reply, args)?,
        Cmd::Config => config(ctx, session, reply, args)?,
        Cmd::Function => functions::function(ctx, reply, args)?,
        Cmd::Script => scripting::script(ctx, reply, args)?,
        c if c.runs_script() => {
            let mut lua = Session::on_shard(session.info.clone(), session.user.clone());
            scripting::call(ctx, reply, cmd, args, &mut script_command(ctx, &mut lua))?
        }
        Cmd::Memory => memory_command(ctx, reply, args)?,
        Cmd::Object => object_command(ctx, reply, args)?,
        Cmd::Client => client(ctx, session, reply, args)?,
        Cmd::Acl => acl_command::command(ctx, &session.user, reply, args)?,
        // A single node has one database, as Redis with `databases 1`; cluster mode serves
        // these in `databases` (a bucket per database).
        Cmd::Select => {
            if int_arg(args.get(1))? != 0 {
                return Err(raw(cluster_db::OUT_OF_RANGE));
            }
            reply.ok();
        }
        Cmd::Move => {
            let db = int_arg(args.get(2))?;
            return Err(raw(if db == 0 {
                "ERR source and destination objects are the same"
            } else {
                cluster_db::OUT_OF_RANGE
            }));
        }
        Cmd::Swapdb => {
            let first = int_arg(args.get(1)).map_err(|_| raw("ERR invalid first DB index"))?;
            let second = int_arg(args.get(2)).map_err(|_| raw("ERR invalid second DB index"))?;
            if first != 0 || second != 0 {
                return Err(raw(cluster_db::OUT_OF_RANGE));
            }
            reply.ok();
        }
        Cmd::Hello | Cmd::Auth => {
            let result = if cmd == Cmd::Hello {
                hello(ctx, session, reply, args)
            } else {
                auth(ctx, session, reply, args)
            };
            if session.auth_exhausted() {
                *flow = Flow::Close;
            }
            pubsub::protocol_changed(&session.pubsub, reply.resp3);
            result?
        }
        Cmd::Quit => {
            reply.ok();
            *flow = Flow::Close;
            // Gone for client tracking from now on: a client redirecting here learns it
            // with its next invalidation, even before the socket is closed.
            session.tracking.close();
        }
        Cmd::Reset => {
            reply.resp3 = false;
            session.info.resp.store(2, Ordering::Relaxed);
            *session.info.meta.lock() = Default::default();
            session.authed = ctx.users.default_needs_no_auth();
            set_user(session, ctx.users.default_session());
            session.multi.discard();
            session.db = Db::default();
            session.readonly = false;
            pubsub::reset(&mut session.pubsub);
            pubsub::protocol_changed(&session.pubsub, false);
            session.tracking.reset(ctx, session.info.id);
            reply.simple(b"RESET");
        }
        Cmd::Time => {
            let now = ks.now().0;
            let mut a = itoa::Buffer::new();
            let mut b = itoa::Buffer::new();
            reply.array(2);
            reply.bulk(a.format(now / 1_000_000).as_bytes());
            reply.bulk(b.format(now % 1_000_000).as_bytes());
        }
        Cmd::Role => {
            reply.array(3);
            reply.bulk(b"master");
            reply.int(0);
            reply.array(0);
        }
        Cmd::Cluster => cluster_cmd::cluster(ctx, reply, args, session.info.tls).map_err(raw)?,
        Cmd::Readonly | Cmd::Readwrite | Cmd::Asking => {
            cluster_cmd::connection_mode(ctx, reply, cmd).map_err(raw)?;
            match cmd {
                Cmd::Readonly => session.readonly = true,
                Cmd::Readwrite => session.readonly = false,
                _ => {}
            }
        }
        Cmd::Multi | Cmd::Exec | Cmd::Discard | Cmd::Watch | Cmd::Unwatch => {
            // The transaction state machine (`multi::step`) answers these before `other`.
            return Err(raw(format!(
                "ERR {} is handled by the transaction state machine",
                cmd.spec().name.to_ascii_uppercase()
            )));
        }
        Cmd::MeridianGet
        | Cmd::MeridianPut
        | Cmd::MeridianDel
        | Cmd::MeridianSet
        | Cmd::TlGetlatest
        | Cmd::TlGetcrit
        | Cmd::TlTas
        | Cmd::MeridianBegin
        | Cmd::MeridianCommit
        | Cmd::MeridianAbort => {
            return Err(raw(format!(
                "ERR {} needs cluster mode (start a cluster with `meridian up`; on a single node \
                 MULTI/EXEC with WATCH is atomic)",
                cmd.spec().name.to_ascii_uppercase()
            )));
        }
        _ if cmd.has_flag("blocking") => blocking_command(ctx, session, reply, cmd, args)?,
        // Every other command is a data command: one copy of its semantics, in its type's
        // module of the Redis layer (`meridian_redis::types`), which refuses anything else.
        _ => ks.execute(cmd, args, reply)?,
    }
    Ok(())
}

/// `OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ key`, `OBJECT HELP` (a node's keyspace).
fn object_command(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    use meridian_redis::error::{subcommand_arity, unknown_subcommand};
    let sub = args.get(1);
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("HELP") {
        subcommand_arity("object", sub, args.len() == 2)?;
        reply.help(&[
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation Redis would use for <key>.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with <key> (1).",
            "HELP",
            "    Print this help.",
        ]);
        return Ok(());
    }
    if !(is("ENCODING") || is("REFCOUNT") || is("IDLETIME") || is("FREQ")) {
        return Err(unknown_subcommand("object", sub));
    }
    subcommand_arity("object", sub, args.len() == 3)?;
    if ctx.cluster.is_some() {
        return Err(raw(
            "ERR OBJECT is not supported on a cluster node yet (TYPE and TTL are)",
        ));
    }
    let Some(entry) = ctx.keyspace.entry(args.get(2))? else {
        reply.null();
        return Ok(());
    };
    if is("ENCODING") {
        reply.bulk(ctx.encodings.encoding_name(&entry)?.as_bytes());
    } else if is("REFCOUNT") {
        // No value is shared between keys here.
        reply.int(1);
    } else {
        return Err(raw(format!(
            "ERR OBJECT {} is not supported: Meridian keeps per-key access times only for \
             maxmemory eviction, and does not report them",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        )));
    }
    Ok(())
}

/// `MEMORY USAGE key [SAMPLES n]` (the key's share of the used-memory estimate), `MEMORY
/// PURGE` (nothing to purge: OK), `MEMORY HELP`.
fn memory_command(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    use meridian_redis::error::{subcommand_arity, unknown_subcommand};
    let sub = args.get(1);
    if sub.eq_ignore_ascii_case(b"USAGE") {
        subcommand_arity("memory", sub, args.len() == 3 || args.len() == 5)?;
        if args.len() == 5 {
            if !args.get(3).eq_ignore_ascii_case(b"SAMPLES") {
                return Err(raw(meridian_redis::error::SYNTAX));
            }
            int_arg(args.get(4))?;
        }
        if ctx.cluster.is_some() {
            return Err(raw(
                "ERR MEMORY USAGE is not supported on a cluster node yet (INFO memory gives the \
                 node's total)",
            ));
        }
        match ctx.keyspace.memory_usage(args.get(2))? {
            Some(n) => reply.int(n as i64),
            None => reply.null(),
        }
    } else if sub.eq_ignore_ascii_case(b"PURGE") {
        subcommand_arity("memory", sub, args.len() == 2)?;
        reply.ok();
    } else if sub.eq_ignore_ascii_case(b"HELP") {
        reply.help(&[
            "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value (the keyspace's estimate).",
            "PURGE",
            "    Nothing to purge (no allocator arenas to release).",
            "HELP",
            "    Print this help.",
        ]);
    } else {
        return Err(unknown_subcommand("memory", sub));
    }
    Ok(())
}

/// A blocking command (BLPOP, BLMOVE, BZPOPMIN, ...) outside MULTI: its arguments checked
/// as its type's module checks them, then run at once if a source key exists, else the
/// client blocks (`keyspace::blocking`) and the connection waits.
fn blocking_command(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
) -> CmdResult {
    use crate::keyspace::blocking::{BlockedWait, BlockingOutcome, source_keys};
    if cmd.group() == meridian_redis::Group::Streams {
        // XREAD and XREADGROUP block only with BLOCK.
        let Some(timeout) = meridian_redis::streams::blocking_timeout(cmd, args)? else {
            return ctx.keyspace.execute(cmd, args, reply);
        };
        let outcome = ctx
            .keyspace
            .execute_stream_read(cmd, args, reply, session.info.id)?;
        if let BlockingOutcome::Blocked(registration) = outcome {
            session.blocked = Some(BlockedWait {
                cmd,
                registration,
                timeout: timeout.map(std::time::Duration::from_millis),
            });
        }
        return Ok(());
    }
    // The module checks every argument before it looks at a key: run over no keys at all,
    // it answers an argument's error, or the timeout reply (thrown away).
    let mut scratch = Reply::new(16);
    meridian_redis::types::exec_on_view(cmd, args, &mut NoKeys(ctx.keyspace.now()), &mut scratch)?;
    let timeout_at = if matches!(cmd, Cmd::Blmpop | Cmd::Bzmpop) {
        1
    } else {
        args.len() - 1
    };
    let timeout = meridian_redis::value::parse_timeout(args.get(timeout_at))?;
    let source = source_keys(cmd, args);
    match ctx
        .keyspace
        .execute_blocking(cmd, args, reply, &source, session.info.id)?
    {
        BlockingOutcome::Ran => {}
        BlockingOutcome::Blocked(registration) => {
            session.blocked = Some(BlockedWait {
                cmd,
                registration,
                timeout: timeout.map(std::time::Duration::from_millis),
            });
        }
    }
    Ok(())
}

/// A view in which no key exists (argument checks of a blocking command).
struct NoKeys(meridian_core::Timestamp);

impl meridian_redis::View for NoKeys {
    fn now(&self) -> meridian_core::Timestamp {
        self.0
    }
    fn load(&mut self, _key: &[u8]) -> meridian_redis::Result<Option<meridian_redis::Entry>> {
        Ok(None)
    }
    fn store(
        &mut self,
        _key: &[u8],
        _value: Option<meridian_redis::EntryRef<'_>>,
    ) -> meridian_redis::Result<()> {
        Ok(())
    }
}

fn scan(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let q = parse_scan(args)?;
    let (next, keys) = ctx
        .keyspace
        .scan_type(q.cursor, q.pattern, q.count, q.kind.flatten())?;
    scan_reply(reply, next, &keys, q.kind != Some(None));
    Ok(())
}

/// FLUSHDB/FLUSHALL's optional ASYNC or SYNC.
fn flush_args(args: Args<'_>) -> CmdResult {
    if flush_args_ok(args) {
        Ok(())
    } else {
        Err(raw(SYNTAX))
    }
}

/// `AUTH [user] password`.
fn auth(ctx: &RespContext, session: &mut Session, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    match args.len() {
        2 => {
            if ctx.users.default_is_nopass() {
                return Err(raw(
                    "ERR AUTH <password> called without any password configured for \
                     the default user. Are you sure your configuration is correct?",
                ));
            }
            authenticate(ctx, session, b"default", args.get(1))?;
        }
        3 => authenticate(ctx, session, args.get(1), args.get(2))?,
        _ => return Err(raw(SYNTAX)),
    }
    reply.ok();
    Ok(())
}

/// Checks `user`/`pass` (`AUTH`, `HELLO … AUTH`); a failure is counted, and repeated ones
/// on one connection are slowed, then close it (`crate::auth::FailurePolicy`). The error
/// stays Redis's `WRONGPASS`.
fn authenticate(ctx: &RespContext, session: &mut Session, user: &[u8], pass: &[u8]) -> CmdResult {
    let Some(authenticated) = ctx.users.authenticate(user, pass) else {
        session.auth_failed(ctx);
        let context = if session.multi.active {
            acl::LogContext::Multi
        } else {
            acl::LogContext::Toplevel
        };
        let client = client_line(ctx, &session.info).trim_end().to_string();
        ctx.users
            .log("auth", context, b"AUTH".to_vec(), user, client);
        return Err(raw(WRONGPASS));
    };
    set_user(session, authenticated);
    session.authed = true;
    Ok(())
}

/// Makes the connection run as `user` (AUTH, HELLO AUTH, RESET).
fn set_user(session: &mut Session, user: acl::SessionUser) {
    *session.info.user.lock() = bytes::Bytes::copy_from_slice(user.name());
    session.user = user;
}

fn hello(ctx: &RespContext, session: &mut Session, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let mut version = None;
    let mut i = 1;
    if args.len() >= 2 {
        let v = parse_i64(args.get(1))
            .ok_or_else(|| raw("ERR Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&v) {
            return Err(raw("NOPROTO unsupported protocol version"));
        }
        version = Some(v);
        i = 2;
    }
    let mut auth = None;
    let mut setname = None;
    while i < args.len() {
        let opt = args.get(i);
        let more = args.len() - i - 1;
        if opt.eq_ignore_ascii_case(b"AUTH") && more >= 2 {
            auth = Some((args.get(i + 1), args.get(i + 2)));
            i += 3;
        } else if opt.eq_ignore_ascii_case(b"SETNAME") && more >= 1 {
            setname = Some(args.get(i + 1));
            i += 2;
        } else {
            return Err(raw(format!(
                "ERR Syntax error in HELLO option '{}'",
                lossy(opt)
            )));
        }
    }
    if let Some((user, pass)) = auth {
        authenticate(ctx, session, user, pass)?;
    }
    if !session.authed {
        return Err(raw(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        ));
    }
    if let Some(name) = setname {
        set_client_name(session, name)?;
    }
    if let Some(v) = version {
        reply.resp3 = v == 3;
        session.info.resp.store(v as u8, Ordering::Relaxed);
    }
    reply.map(7);
    reply.bulk(b"server");
    reply.bulk(b"redis");
    reply.bulk(b"version");
    reply.bulk(REDIS_VERSION.as_bytes());
    reply.bulk(b"proto");
    reply.int(if reply.resp3 { 3 } else { 2 });
    reply.bulk(b"id");
    reply.int(session.info.id as i64);
    reply.bulk(b"mode");
    reply.bulk(b"standalone");
    reply.bulk(b"role");
    reply.bulk(b"master");
    reply.bulk(b"modules");
    reply.array(0);
    Ok(())
}

/// Names may not contain spaces, newlines or special characters (Redis: `!`..=`~` only).
fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

fn set_client_name(session: &Session, name: &[u8]) -> CmdResult {
    if !valid_name(name) {
        return Err(raw(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    session.info.meta.lock().name = (!name.is_empty()).then(|| Bytes::copy_from_slice(name));
    Ok(())
}

fn client(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> CmdResult {
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let id = session.info.id;
    if let Some(done) = tracking::client(ctx, &mut session.tracking, id, reply, args) {
        return done;
    }
    if is("ID") {
        subcommand_arity("client", sub, argc == 2)?;
        reply.int(session.info.id as i64);
    } else if is("UNBLOCK") {
        subcommand_arity("client", sub, argc == 3 || argc == 4)?;
        let id = u64::try_from(int_arg(args.get(2))?).unwrap_or(0);
        let error = match (argc == 4).then(|| args.get(3)) {
            None => false,
            Some(a) if a.eq_ignore_ascii_case(b"TIMEOUT") => false,
            Some(a) if a.eq_ignore_ascii_case(b"ERROR") => true,
            Some(_) => {
                return Err(raw("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"));
            }
        };
        reply.int(i64::from(ctx.keyspace.blocking.unblock_client(id, error)));
    } else if is("SETNAME") {
        subcommand_arity("client", sub, argc == 3)?;
        set_client_name(session, args.get(2))?;
        reply.ok();
    } else if is("GETNAME") {
        subcommand_arity("client", sub, argc == 2)?;
        let name = session.info.meta.lock().name.clone();
        reply.opt_bulk(name.as_deref());
    } else if is("SETINFO") {
        subcommand_arity("client", sub, argc == 4)?;
        let (attr, value) = (args.get(2), args.get(3));
        let lib_name = attr.eq_ignore_ascii_case(b"LIB-NAME");
        if !lib_name && !attr.eq_ignore_ascii_case(b"LIB-VER") {
            return Err(raw(format!("ERR Unrecognized option '{}'", lossy(attr))));
        }
        if !valid_name(value) {
            return Err(raw(format!(
                "ERR {} cannot contain spaces, newlines or special characters.",
                if lib_name { "lib-name" } else { "lib-ver" }
            )));
        }
        let v = (!value.is_empty()).then(|| Bytes::copy_from_slice(value));
        let mut meta = session.info.meta.lock();
        if lib_name {
            meta.lib_name = v;
        } else {
            meta.lib_ver = v;
        }
        drop(meta);
        reply.ok();
    } else if is("INFO") {
        subcommand_arity("client", sub, argc == 2)?;
        let line = client_line(ctx, &session.info);
        reply.verbatim(b"txt", line.as_bytes());
    } else if is("LIST") {
        let mut ids: Option<Vec<u64>> = None;
        let mut normal = true;
        let mut i = 2;
        while i < argc {
            if args.get(i).eq_ignore_ascii_case(b"TYPE") && i + 1 < argc {
                let t = args.get(i + 1);
                if !(t.eq_ignore_ascii_case(b"normal")
                    || t.eq_ignore_ascii_case(b"master")
                    || t.eq_ignore_ascii_case(b"replica")
                    || t.eq_ignore_ascii_case(b"pubsub"))
                {
                    return Err(raw(format!("ERR Unknown client type '{}'", lossy(t))));
                }
                normal = t.eq_ignore_ascii_case(b"normal");
                i += 2;
            } else if args.get(i).eq_ignore_ascii_case(b"ID") && i + 1 < argc {
                let mut list = Vec::new();
                i += 1;
                while i < argc {
                    let id = parse_i64(args.get(i))
                        .filter(|&id| id > 0)
                        .ok_or_else(|| raw("ERR Invalid client ID"))?;
                    list.push(id as u64);
                    i += 1;
                }
                ids = Some(list);
            } else {
                return Err(raw(SYNTAX));
            }
        }
        let mut text = String::new();
        if normal {
            for c in ctx.clients() {
                if ids.as_ref().is_none_or(|ids| ids.contains(&c.id)) {
                    text.push_str(&client_line(ctx, &c));
                }
            }
        }
        reply.verbatim(b"txt", text.as_bytes());
    } else if is("KILL") {
        subcommand_arity("client", sub, argc >= 3)?;
        client_kill(ctx, session, reply, args)?;
    } else if is("REPLY") {
        subcommand_arity("client", sub, argc == 3)?;
        client_reply(ctx, session, reply, args.get(2))?;
    } else if is("NO-EVICT") || is("NO-TOUCH") {
        subcommand_arity("client", sub, argc == 3)?;
        let v = args.get(2);
        if !(v.eq_ignore_ascii_case(b"ON") || v.eq_ignore_ascii_case(b"OFF")) {
            return Err(raw(SYNTAX));
        }
        reply.ok();
    } else if is("HELP") {
        reply.help(&[
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "    Unblock the specified blocked client.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are:",
            "    * ADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made from the specified address",
            "    * LADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made to specified local address",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Kill connections by type.",
            "    * USER <username>",
            "      Kill connections authenticated by <username>.",
            "    * SKIPME (YES|NO)",
            "      Skip killing current connection (default: yes).",
            "    * ID <client-id>",
            "      Kill connections by client id.",
            "LIST [TYPE <normal|master|replica|pubsub>] [ID <id> [<id> ...]]",
            "    Return information about client connections.",
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "SETINFO <LIB-NAME|LIB-VER> <value>",
            "    Set client meta attr.",
            "NO-EVICT (ON|OFF)",
            "NO-TOUCH (ON|OFF)",
            "    Accepted and ignored.",
            "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
            "         [OPTIN] [OPTOUT] [NOLOOP]",
            "    Control server assisted client side caching.",
            "CACHING (YES|NO)",
            "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
            "GETREDIR",
            "    Return the client ID we are redirecting to when tracking is enabled.",
            "TRACKINGINFO",
            "    Report tracking status for the current connection.",
            "HELP",
            "    Print this help.",
        ]);
    } else {
        return Err(unknown_subcommand("client", sub));
    }
    Ok(())
}

/// `CLIENT KILL ip:port` (Redis's old form: OK, or an error when no client matches) and
/// `CLIENT KILL <filter> <value> …` (the number killed). A killed connection answers what it
/// has read, then closes; the caller's own, when it matches and `SKIPME no`, after this
/// reply.
fn client_kill(
    ctx: &RespContext,
    session: &Session,
    reply: &mut Reply,
    args: Args<'_>,
) -> CmdResult {
    #[derive(Default)]
    struct Filter<'a> {
        id: Option<u64>,
        addr: Option<&'a [u8]>,
        laddr: Option<&'a [u8]>,
        user: Option<&'a [u8]>,
        pubsub: Option<bool>,
        skip_me: bool,
    }
    let old_form = args.len() == 3;
    let mut f = Filter {
        skip_me: !old_form,
        ..Filter::default()
    };
    if old_form {
        f.addr = Some(args.get(2));
    } else {
        if !args.len().is_multiple_of(2) {
            return Err(raw(SYNTAX));
        }
        for i in (2..args.len()).step_by(2) {
            let (opt, v) = (args.get(i), args.get(i + 1));
            let is = |name: &str| opt.eq_ignore_ascii_case(name.as_bytes());
            if is("ID") {
                let id = parse_i64(v)
                    .filter(|id| *id > 0)
                    .ok_or_else(|| raw("ERR client-id should be greater than 0"))?;
                f.id = Some(id as u64);
            } else if is("TYPE") {
                let t = v.to_ascii_lowercase();
                f.pubsub = Some(match t.as_slice() {
                    b"normal" => false,
                    b"pubsub" => true,
                    // No client of a Meridian node is a Redis master or replica link.
                    b"master" | b"replica" | b"slave" => {
                        reply.int(0);
                        return Ok(());
                    }
                    _ => return Err(raw(format!("ERR Unknown client type '{}'", lossy(v)))),
                });
            } else if is("ADDR") {
                f.addr = Some(v);
            } else if is("LADDR") {
                f.laddr = Some(v);
            } else if is("USER") {
                if !ctx.users.exists(v) {
                    return Err(raw(format!("ERR No such user '{}'", lossy(v))));
                }
                f.user = Some(v);
            } else if is("SKIPME") {
                f.skip_me = match v.to_ascii_lowercase().as_slice() {
                    b"yes" => true,
                    b"no" => false,
                    _ => return Err(raw(SYNTAX)),
                };
            } else {
                return Err(raw(SYNTAX));
            }
        }
    }
    let mut killed = 0;
    for c in ctx.clients() {
        let matches = f.id.is_none_or(|id| c.id == id)
            && f.addr.is_none_or(|a| c.addr.to_string().as_bytes() == a)
            && f.laddr.is_none_or(|a| c.laddr.to_string().as_bytes() == a)
            && f.user.is_none_or(|u| c.user.lock().as_ref() == u)
            && f.pubsub.is_none_or(|p| {
                let subscribed = !ctx
                    .pubsub
                    .subscriptions_of(c.mailbox_id.load(Ordering::Relaxed))
                    .is_empty();
                subscribed == p
            })
            && !(f.skip_me && c.id == session.info.id);
        if matches {
            c.kill();
            killed += 1;
        }
    }
    if old_form {
        if killed == 0 {
            return Err(raw("ERR No such client"));
        }
        reply.ok();
    } else {
        reply.int(killed);
    }
    Ok(())
}

/// CONFIG SET `notify-keyspace-events`: Redis's flag letters. Events are published only
/// where every key command runs through [`execute`] on this node's keyspace, so cluster mode
/// and the worker-shard executor accept only the empty set rather than publish some events.
fn notify_flags(ctx: &RespContext, value: &[u8]) -> Result<u16, &'static str> {
    let flags = keyspace_events::parse(value)
        .ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?;
    if flags != 0 && (ctx.cluster.is_some() || ctx.executor().is_some()) {
        return Err(
            "keyspace notifications are published on a single node without the worker-shard executor only",
        );
    }
    Ok(flags)
}

/// CLIENT REPLY ON|OFF|SKIP: ON answers `+OK`; OFF and SKIP answer nothing (see
/// [`ReplyMode`]). Only a single node's connection loop runs every command through
/// [`execute`], so cluster mode and the worker-shard executor refuse OFF and SKIP rather
/// than silence only some replies.
fn client_reply(
    ctx: &RespContext,
    session: &mut Session,
    reply: &mut Reply,
    mode: &[u8],
) -> CmdResult {
    let on = mode.eq_ignore_ascii_case(b"ON");
    if !on && !mode.eq_ignore_ascii_case(b"OFF") && !mode.eq_ignore_ascii_case(b"SKIP") {
        return Err(raw(SYNTAX));
    }
    if !on && (ctx.cluster.is_some() || ctx.executor().is_some()) {
        return Err(raw(
            "ERR CLIENT REPLY OFF and SKIP are served on a single node without the worker-shard \
             executor only; read and discard the replies instead",
        ));
    }
    session.reply_mode = if on {
        reply.ok();
        ReplyMode::On
    } else if mode.eq_ignore_ascii_case(b"OFF") || session.reply_mode == ReplyMode::Off {
        // SKIP under OFF changes nothing, as in Redis.
        ReplyMode::Off
    } else {
        ReplyMode::SkipNext
    };
    session.reply_mode_set = true;
    Ok(())
}

pub(crate) fn client_line(ctx: &RespContext, c: &ClientInfo) -> String {
    let meta = c.meta.lock();
    let s = |b: &Option<Bytes>| b.as_deref().map(lossy).unwrap_or_default().into_owned();
    let now_ms = ctx.elapsed_ms();
    let last_cmd = match c.last_cmd.load(Ordering::Relaxed) {
        0 => "NULL",
        i => Cmd::ALL[i as usize - 1].spec().name,
    };
    let (mut flags, redir) = tracking::list_fields(ctx, c.id);
    if flags.is_empty() {
        flags.push('N');
    }
    format!(
        "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db=0 sub=0 psub=0 \
         ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 \
         omem=0 tot-mem=0 events=r cmd={} user={} redir={} resp={} lib-name={} \
         lib-ver={}\n",
        c.id,
        c.addr,
        c.laddr,
        c.fd,
        s(&meta.name),
        c.created.elapsed().as_secs(),
        now_ms.saturating_sub(c.last_active_ms.load(Ordering::Relaxed)) / 1000,
        flags,
        last_cmd,
        lossy(&c.user.lock()),
        redir,
        c.resp.load(Ordering::Relaxed),
        s(&meta.lib_name),
        s(&meta.lib_ver),
    )
}

/// CONFIG GET's parameters: the Redis parameters Meridian has, each with the value the node
/// runs with. A parameter Meridian does not have is not listed, so CONFIG GET answers it as
/// Redis answers an unknown parameter: with nothing (an empty map).
fn config_params(ctx: &RespContext) -> Vec<(&'static str, String)> {
    use meridian_storage::Durability;
    let l = &ctx.config.limits;
    // The durable engine journals every write before acknowledging it (an append-only log
    // in Redis's terms), fsynced as `storage.fsync` says; the in-memory engine writes
    // nothing to disk, so nothing is ever fsynced either.
    let (appendonly, appendfsync) = match ctx.config.durability {
        None => ("no", "no"),
        Some(Durability::Always) => ("yes", "always"),
        Some(Durability::Everysec) => ("yes", "everysec"),
        Some(Durability::Never) => ("yes", "no"),
    };
    let (max, policy) = memory_limit(ctx);
    let bind = ctx
        .listen_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let mut params = vec![
        ("appendfsync", appendfsync.into()),
        ("appendonly", appendonly.into()),
        ("bind", bind),
        (
            "busy-reply-threshold",
            ctx.scripts.busy_after_ms().to_string(),
        ),
        ("lua-time-limit", ctx.scripts.busy_after_ms().to_string()),
        (
            "client-output-buffer-limit",
            pubsub::output_limit_config(&ctx.pubsub),
        ),
        ("client-query-buffer-limit", l.max_query_buffer.to_string()),
        (
            "cluster-enabled",
            if ctx.cluster.is_some() { "yes" } else { "no" }.into(),
        ),
        // One database, db0 (SELECT 0 only).
        ("databases", "1".into()),
        // The active expirer runs every 100 ms.
        ("hz", "10".into()),
        (
            "acllog-max-len",
            ctx.users.log_max_len.load(Ordering::Relaxed).to_string(),
        ),
        (
            "acl-pubsub-default",
            if ctx.config.acl.all_channels_default {
                "allchannels"
            } else {
                "resetchannels"
            }
            .into(),
        ),
        (
            "aclfile",
            ctx.config
                .acl
                .aclfile
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        ),
        ("maxclients", l.max_clients.to_string()),
        ("maxmemory", max.to_string()),
        ("maxmemory-policy", policy.name().into()),
        ("maxmemory-samples", crate::memory::SAMPLES.to_string()),
        (
            "min-replicas-to-write",
            ctx.min_replicas_to_write
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "min-slaves-to-write",
            ctx.min_replicas_to_write
                .load(Ordering::Relaxed)
                .to_string(),
        ),
        (
            "notify-keyspace-events",
            keyspace_events::format(ctx.keyspace.events.flags()),
        ),
        ("port", ctx.port().to_string()),
        (
            "tracking-table-max-keys",
            ctx.keyspace.caching.max_keys().to_string(),
        ),
        (
            "protected-mode",
            if ctx.protected_mode.load(Ordering::Relaxed) {
                "yes"
            } else {
                "no"
            }
            .into(),
        ),
        ("proto-max-bulk-len", l.max_bulk_len.to_string()),
        // Never the password (it is also the HTTP admin bearer): a placeholder when set,
        // empty (as Redis) when not.
        (
            "requirepass",
            if ctx.config.requirepass.is_some() {
                REDACTED.into()
            } else {
                String::new()
            },
        ),
        // Client sockets get no SO_KEEPALIVE.
        ("tcp-keepalive", "0".into()),
        // Idle clients are never closed.
        ("timeout", "0".into()),
    ]
    .into_iter()
    .chain(ctx.encodings.params())
    .chain(super::tls_config::params(ctx))
    .collect::<Vec<_>>();
    // CONFIG GET lists them by name.
    params.sort_unstable_by_key(|(name, _)| *name);
    params
}

/// The node's `maxmemory` and `maxmemory-policy`: its keyspace's when standalone, its
/// replication node's in cluster mode.
pub(crate) fn memory_limit(ctx: &RespContext) -> (u64, crate::memory::MaxmemoryPolicy) {
    match &ctx.cluster {
        Some(c) => (c.node.maxmemory(), c.node.maxmemory_policy()),
        None => (ctx.keyspace.maxmemory(), ctx.keyspace.maxmemory_policy()),
    }
}

fn config(ctx: &RespContext, session: &Session, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("GET") {
        subcommand_arity("config", sub, argc >= 3)?;
        let params = config_params(ctx);
        let matched: Vec<_> = params
            .iter()
            .filter(|(name, _)| {
                args.iter_from(2)
                    .any(|p| glob_match(p, name.as_bytes(), true))
            })
            .collect();
        reply.map(matched.len());
        for (name, value) in matched {
            reply.bulk(name.as_bytes());
            reply.bulk(value.as_bytes());
        }
    } else if is("SET") {
        subcommand_arity("config", sub, argc >= 4 && argc.is_multiple_of(2))?;
        config_set(ctx, args)?;
        // An admin change: logged with who made it and what it set (no setting it takes is
        // secret).
        let changes: Vec<_> = args.iter_from(2).map(lossy).collect();
        tracing::info!(client = %session.info.addr, settings = ?changes, "CONFIG SET");
        reply.ok();
    } else if is("RESETSTAT") {
        subcommand_arity("config", sub, argc == 2)?;
        ctx.keyspace.reset_stats();
        ctx.errors.reset();
        ctx.command_stats.reset(&ctx.ops);
        reply.ok();
    } else if is("REWRITE") {
        subcommand_arity("config", sub, argc == 2)?;
        return Err(raw("ERR The server is running without a config file"));
    } else if is("HELP") {
        reply.help(
            &[
                "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET <pattern>",
                "    Return parameters matching the glob-like <pattern> and their values.",
                "SET <directive> <value> [<directive> <value> ...]",
                "    Set maxmemory, maxmemory-policy and the encoding settings (the others are set in the configuration file).",
                "RESETSTAT",
                "    Reset statistics reported by the INFO command.",
                "HELP",
                "    Print this help.",
            ],
        );
    } else {
        return Err(unknown_subcommand("config", sub));
    }
    Ok(())
}

/// CONFIG SET: `maxmemory` (bytes, or with Redis's units: `100mb`, `1gb`) and
/// `maxmemory-policy` change at runtime, on a standalone or a cluster node; every pair is checked before
/// any is applied, as in Redis 7. Other parameters are set in the configuration file.
fn config_set(ctx: &RespContext, args: Args<'_>) -> CmdResult {
    use crate::memory::{MaxmemoryPolicy, parse_size};
    let failed = |name: &[u8], why: &str| {
        raw(format!(
            "ERR CONFIG SET failed (possibly related to argument '{}') - {why}",
            lossy(name)
        ))
    };
    let mut maxmemory = None;
    let mut policy = None;
    let mut encodings = Vec::new();
    let mut output_limit = None;
    let mut notify = None;
    let mut busy_ms = None;
    let mut min_replicas = None;
    let mut tracking_max_keys = None;
    let mut acllog_max_len = None;
    let mut protected = None;
    let mut tls = None;
    let mut i = 2;
    while i + 1 < args.len() {
        let (name, value) = (args.get(i), args.get(i + 1));
        i += 2;
        if super::tls_config::handles(name) {
            super::tls_config::stage(ctx, &mut tls, name, value)
                .map_err(|why| failed(name, &why))?;
            continue;
        }
        if encoding_config::handles(name) {
            let checked = ctx
                .encodings
                .check(name, value, &|why: &str| failed(name, why))?;
            encodings.push(checked);
            continue;
        }
        if name.eq_ignore_ascii_case(b"notify-keyspace-events") {
            notify = Some(notify_flags(ctx, value).map_err(|why| failed(name, why))?);
            continue;
        }
        if name.eq_ignore_ascii_case(b"client-output-buffer-limit") {
            let limit =
                pubsub::parse_output_limit(&ctx.pubsub, value).map_err(|why| failed(name, &why))?;
            output_limit = Some(limit);
            continue;
        }
        if name.eq_ignore_ascii_case(b"tracking-table-max-keys") {
            let n = meridian_redis::value::parse_i64(value)
                .filter(|n| *n >= 0)
                .ok_or_else(|| failed(name, "argument couldn't be parsed into an integer"))?;
            tracking_max_keys = Some(usize::try_from(n).unwrap_or(usize::MAX));
            continue;
        }
        if name.eq_ignore_ascii_case(b"protected-mode") {
            protected = Some(match value.to_ascii_lowercase().as_slice() {
                b"yes" => true,
                b"no" => false,
                _ => return Err(failed(name, "argument must be 'yes' or 'no'")),
            });
            continue;
        }
        if name.eq_ignore_ascii_case(b"acllog-max-len") {
            let n = meridian_redis::value::parse_i64(value)
                .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
                .ok_or_else(|| failed(name, "argument couldn't be parsed into an integer"))?;
            acllog_max_len = Some(n as usize);
            continue;
        }
        if name.eq_ignore_ascii_case(b"busy-reply-threshold")
            || name.eq_ignore_ascii_case(b"lua-time-limit")
        {
            let ms = meridian_redis::value::parse_i64(value)
                .filter(|ms| *ms >= 0)
                .ok_or_else(|| failed(name, "argument couldn't be parsed into an integer"))?;
            busy_ms = Some(ms as u64);
            continue;
        }
        if name.eq_ignore_ascii_case(b"min-replicas-to-write")
            || name.eq_ignore_ascii_case(b"min-slaves-to-write")
        {
            if ctx.cluster.is_some() {
                return Err(failed(
                    name,
                    "a cluster node's writes are acknowledged as its bucket's consistency \
                     says (README: consistency), not by Redis replicas",
                ));
            }
            let n = meridian_redis::value::parse_i64(value)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n <= i32::MAX as u32)
                .ok_or_else(|| failed(name, "argument couldn't be parsed into an integer"))?;
            min_replicas = Some(n);
            continue;
        }
        let is_max = name.eq_ignore_ascii_case(b"maxmemory");
        if !is_max && !name.eq_ignore_ascii_case(b"maxmemory-policy") {
            return Err(raw(format!(
                "ERR CONFIG SET is not supported by Meridian for '{}': only maxmemory, \
                 maxmemory-policy, client-output-buffer-limit, notify-keyspace-events, \
                 busy-reply-threshold, min-replicas-to-write, tracking-table-max-keys, \
                 acllog-max-len, protected-mode, the tls-* files and Redis's encoding \
                 settings \
                 change at runtime; set the others in the node's configuration file and \
                 restart it",
                lossy(name)
            )));
        }
        if (is_max && maxmemory.is_some()) || (!is_max && policy.is_some()) {
            return Err(failed(name, "duplicate parameter"));
        }
        if is_max {
            let bytes =
                parse_size(value).ok_or_else(|| failed(name, "argument must be a memory value"))?;
            maxmemory = Some(bytes);
        } else {
            let p = MaxmemoryPolicy::parse(value).ok_or_else(|| {
                let names: Vec<_> = MaxmemoryPolicy::ALL.iter().map(|p| p.name()).collect();
                failed(
                    name,
                    &format!(
                        "argument(s) must be one of the following: {}",
                        names.join(", ")
                    ),
                )
            })?;
            policy = Some(p);
        }
    }
    // Rereading the certificate files is the one change that can still fail: first, so a
    // bad file leaves every setting as it was.
    if let Some(settings) = tls {
        super::tls_config::apply(ctx, settings).map_err(|why| {
            failed(
                b"tls-cert-file",
                &format!("Unable to update TLS configuration: {why}"),
            )
        })?;
    }
    for checked in encodings {
        ctx.encodings.apply(checked);
    }
    ctx.keyspace
        .set_stream_node_limits(ctx.encodings.stream_node_limits());
    if let Some(limit) = output_limit {
        ctx.pubsub.set_limit(limit);
    }
    if let Some(flags) = notify {
        ctx.keyspace.events.set_flags(flags);
    }
    if let Some(ms) = busy_ms {
        ctx.scripts.set_busy_after_ms(ms);
    }
    if let Some(n) = min_replicas {
        ctx.min_replicas_to_write.store(n, Ordering::Relaxed);
    }
    if let Some(n) = tracking_max_keys {
        ctx.keyspace.caching.set_max_keys(n);
    }
    if let Some(n) = acllog_max_len {
        ctx.users.set_log_max_len(n);
    }
    if let Some(on) = protected {
        ctx.protected_mode.store(on, Ordering::Relaxed);
    }
    if let Some(c) = &ctx.cluster {
        // A cluster node's limit is its replication node's (`meridian_replication::memory`);
        // its eviction task brings it back within a lower limit.
        if let Some(p) = policy {
            c.node.set_maxmemory_policy(p);
        }
        if let Some(bytes) = maxmemory {
            c.node.set_maxmemory(bytes);
        }
        return Ok(());
    }
    if let Some(p) = policy {
        ctx.keyspace.set_maxmemory_policy(p);
    }
    if let Some(bytes) = maxmemory {
        ctx.keyspace.set_maxmemory(bytes)?;
        // Like Redis, a lower limit evicts at once (the next write would anyway).
        ctx.keyspace.make_room();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Keyspace;
    use crate::metrics::Metrics;
    use crate::resp::RespConfig;
    use meridian_core::SystemClock;
    use meridian_storage::{Durability, MemEngine};

    fn ctx(durability: Option<Durability>) -> Arc<RespContext> {
        let ks = Arc::new(Keyspace::new(
            Arc::new(MemEngine::new()),
            Arc::new(SystemClock::new()),
        ));
        RespContext::new(
            ks,
            Arc::new(Metrics::new()),
            RespConfig {
                durability,
                ..RespConfig::default()
            },
        )
    }

    fn param(ctx: &RespContext, name: &str) -> Option<String> {
        config_params(ctx)
            .into_iter()
            .find_map(|(n, v)| (n == name).then_some(v))
    }

    #[test]
    fn config_params_follow_the_engine_and_its_fsync_policy() {
        for (durability, appendonly, appendfsync) in [
            (None, "no", "no"),
            (Some(Durability::Always), "yes", "always"),
            (Some(Durability::Everysec), "yes", "everysec"),
            (Some(Durability::Never), "yes", "no"),
        ] {
            let ctx = ctx(durability);
            assert_eq!(param(&ctx, "appendonly").unwrap(), appendonly);
            assert_eq!(param(&ctx, "appendfsync").unwrap(), appendfsync);
        }
        let ctx = ctx(None);
        // Before `serve` binds, there is no address to report (and no made-up one).
        assert_eq!(param(&ctx, "bind").unwrap(), "");
        assert_eq!(param(&ctx, "port").unwrap(), "0");
        // Parameters Meridian does not have are not listed (CONFIG GET answers nothing).
        assert_eq!(param(&ctx, "io-threads"), None);
        ctx.keyspace
            .set_maxmemory_policy(crate::memory::MaxmemoryPolicy::VolatileTtl);
        ctx.keyspace.set_maxmemory(1234).unwrap();
        assert_eq!(param(&ctx, "maxmemory").unwrap(), "1234");
        assert_eq!(param(&ctx, "maxmemory-policy").unwrap(), "volatile-ttl");
        let mut names: Vec<_> = config_params(&ctx).into_iter().map(|(n, _)| n).collect();
        let sorted = names.clone();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names, sorted, "sorted, no duplicates");
    }
}
