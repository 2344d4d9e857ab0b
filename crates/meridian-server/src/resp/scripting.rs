//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO and SCRIPT on a node, over the
//! node's interpreters ([`crate::scripting::Scripts`]); FUNCTION is `resp::functions`.
//!
//! A script runs as one keyspace transaction: its `redis.call`s go through the same code as
//! a MULTI/EXEC's queued commands, over one overlay, committed as one batch — so no other
//! client sees a script half done, and a script's effects reach the engine together.
//! Which stripes it locks: those of the keys it declares (`numkeys`), or, with `numkeys 0`,
//! the whole keyspace. A script that touches a key it did not declare (as Redis allows on a
//! single node) takes that key's stripe then if no one holds it (never waiting: the holder
//! may wait for a stripe the script holds). Otherwise it is abandoned at that command — its
//! writes discarded, its reply dropped — and run again from its start under every lock, so
//! it stays atomic; one that cannot be rerun (it published messages or keyspace events, or
//! changed a held collection in place, which no discard takes back) gets an error naming
//! the key.
//!
//! Connections take turns at the interpreters (`crate::scripting::Scripts::turn`, before
//! the command runs: [`turn`]), so a script never waits on a lock a thread holds. Inside
//! MULTI a script is queued like any command; EXEC runs it over its own overlay with every
//! stripe locked ([`run_in_exec`]).
//!
//! This module runs the node's commands through a [`RunCommand`] the caller passes (EXEC's
//! `run_queued`), so it does not depend on `resp::exec`.
//!
//! Inside a script, as in Redis: unknown commands, wrong arities, `noscript` commands
//! (MULTI, WATCH, SUBSCRIBE, EVAL…) are refused with Redis's messages; writes are refused in
//! EVAL_RO and in `no-writes` scripts; blocking commands do not block. On a cluster node
//! scripts run through `cluster_scripts` (over their declared keys' group or transaction),
//! with the same checks of their commands ([`admit_call`]); only a script inside MULTI is
//! refused there, with the reason.

use super::multi;
use crate::keyspace::Overlay;
use crate::resp::RespContext;
use crate::scripting::{Engines, RunInfo, Turn};
use meridian_lua::Host;
use meridian_lua::shebang::Flags;
use meridian_redis::error::{CmdResult, int_arg, raw};
use meridian_redis::{Args, Cmd, Reply};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// How a command a script calls is run over the script's overlay, its reply written (EXEC's
/// `run_queued` with the script's own session), and whether the script's user may run one
/// (`redis.acl_check_cmd`).
pub(crate) trait ScriptCommands {
    /// Runs `cmd` (checked against the caller's ACL user first) and writes its reply.
    fn run(&mut self, reply: &mut Reply, ov: &mut Overlay<'_>, cmd: Cmd, args: Args<'_>);
    /// Whether the caller's ACL user may run `cmd` with `args`.
    fn allowed(&mut self, cmd: Cmd, args: Args<'_>) -> bool;
}

/// The commands of one script run ([`ScriptCommands`]).
pub(crate) type RunCommand<'r> = dyn ScriptCommands + 'r;

/// Runs EVAL, EVALSHA, FCALL or their `_RO` forms on a single node.
pub(crate) fn call(
    ctx: &RespContext,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
    run: &mut RunCommand<'_>,
) -> CmdResult {
    if ctx.cluster.is_some() {
        // Outside MULTI a cluster node runs scripts itself (`cluster_scripts`).
        return Err(raw(
            "ERR scripts inside MULTI are not served in cluster mode: run the script on its \
             own (it is atomic over its keys), or its commands in the transaction",
        ));
    }
    let mut engines = ctx.scripts.engine();
    let call = Call::prepare(ctx, &mut engines, cmd, args)?;
    let _running = ctx.scripts.begin(call.wrote.clone(), call.info(args));
    let mark = reply.out.len();
    // First under the declared keys' locks (all of them with numkeys 0); a script that
    // touches another key whose stripe is busy, having published and changed nothing that
    // cannot be discarded, is abandoned and run again from its start under every lock.
    let mut all = call.keys.is_empty();
    loop {
        let mut restart = false;
        ctx.keyspace
            .transaction(call.keys.iter_from(0), all, &[], |ov| {
                restart = call.run(ctx, &mut engines, ov, all, run, reply);
            })?;
        if !restart {
            return Ok(());
        }
        reply.out.truncate(mark);
        call.wrote.store(false, Ordering::Release);
        all = true;
    }
}

/// A script queued in MULTI, run by EXEC over its overlay (which holds every stripe: EXEC
/// locks them all when it queues a script) with the interpreters EXEC took.
pub(crate) fn run_in_exec(
    ctx: &RespContext,
    engines: &mut Engines,
    reply: &mut Reply,
    ov: &mut Overlay<'_>,
    cmd: Cmd,
    args: Args<'_>,
    run: &mut RunCommand<'_>,
) -> CmdResult {
    let call = Call::prepare(ctx, engines, cmd, args)?;
    let _running = ctx.scripts.begin(call.wrote.clone(), call.info(args));
    call.run(ctx, engines, ov, true, run, reply);
    Ok(())
}

/// Before a command runs on a connection: its turn at the interpreters if it needs one (a
/// script, SCRIPT and FUNCTION but their KILL and STATS, EXEC of a queue holding a script),
/// else a wait while another connection's script runs; nothing at all (one atomic load) for
/// a command of neither kind on a node running no script. `Err(())` once `-BUSY` was
/// answered.
pub(crate) async fn turn(
    ctx: &RespContext,
    args: Args<'_>,
    in_multi: bool,
    exec_runs_script: bool,
    reply: &mut Reply,
) -> Result<Option<Turn>, ()> {
    let Some(cmd) = Cmd::lookup(args.get(0)) else {
        return Ok(None);
    };
    let keep = match cmd {
        Cmd::Exec => exec_runs_script,
        _ if in_multi => false,
        Cmd::Script | Cmd::Function => !allowed_while_busy(cmd, args),
        c => c.runs_script(),
    };
    if !keep && (!ctx.scripts.is_running() || allowed_while_busy(cmd, args)) {
        return Ok(None);
    }
    let turn = ctx.scripts.turn(keep).await;
    if turn.is_err() {
        reply.error(ctx.scripts.busy_error());
    }
    turn
}

/// What a call runs: a cached script, or a library's function.
pub(crate) enum Target {
    Script(String),
    Function(Vec<u8>),
}

/// One script call, checked and ready to run.
pub(crate) struct Call<'a> {
    target: Target,
    flags: Flags,
    /// The keys it declares (`numkeys`).
    pub(crate) keys: Args<'a>,
    argv: Args<'a>,
    /// EVAL_RO, EVALSHA_RO or FCALL_RO.
    read_only_command: bool,
    /// Set by the host when the script runs a write: it cannot be killed then.
    pub(crate) wrote: Arc<AtomicBool>,
}

impl<'a> Call<'a> {
    /// Redis's checks before a script runs: `numkeys`, the script or function, its flags
    /// against the command and the memory limit.
    pub(crate) fn prepare(
        ctx: &RespContext,
        engines: &mut Engines,
        cmd: Cmd,
        args: Args<'a>,
    ) -> Result<Self, meridian_redis::CmdError> {
        let is_function = matches!(cmd, Cmd::Fcall | Cmd::FcallRo);
        let numkeys = match int_arg(args.get(2)) {
            Err(_) if is_function => return Err(raw("ERR Bad number of keys provided")),
            n => n?,
        };
        if numkeys > args.len() as i64 - 3 {
            return Err(raw(
                "ERR Number of keys can't be greater than number of args",
            ));
        }
        if numkeys < 0 {
            return Err(raw("ERR Number of keys can't be negative"));
        }
        let numkeys = numkeys as usize;
        let (target, flags) = Self::target(engines, cmd, args.get(1))?;
        let read_only_command = matches!(cmd, Cmd::EvalRo | Cmd::EvalshaRo | Cmd::FcallRo);
        if !flags.compat && !flags.no_writes {
            if read_only_command {
                return Err(raw(
                    "ERR Can not execute a script with write flag using *_ro command.",
                ));
            }
            if !flags.allow_oom && ctx.keyspace.over_maxmemory() && !ctx.keyspace.make_room() {
                return Err(raw(
                    "OOM allow-oom flag is not set on the script, can not run it when used \
                     memory > 'maxmemory'",
                ));
            }
            if ctx.too_few_replicas() {
                return Err(raw(crate::resp::context::NOREPLICAS));
            }
        }
        Ok(Self {
            target,
            flags,
            keys: args.skip(3).take(numkeys),
            argv: args.skip(3 + numkeys),
            read_only_command,
            wrote: Arc::default(),
        })
    }

    /// The script (loaded now for EVAL) or function `name` names, and its flags.
    fn target(
        engines: &mut Engines,
        cmd: Cmd,
        name: &[u8],
    ) -> Result<(Target, Flags), meridian_redis::CmdError> {
        match cmd {
            Cmd::Fcall | Cmd::FcallRo => {
                let f = engines
                    .functions
                    .function(name)
                    .ok_or_else(|| raw("ERR Function not found"))?;
                Ok((Target::Function(name.to_vec()), f.flags))
            }
            Cmd::Evalsha | Cmd::EvalshaRo => {
                let script = engines
                    .eval
                    .script(name)
                    .ok_or_else(|| raw("NOSCRIPT No matching script. Please use EVAL."))?;
                let sha = String::from_utf8_lossy(name).into_owned();
                Ok((Target::Script(sha), script.flags))
            }
            _ => {
                let sha = engines.eval.load(name).map_err(|e| raw(e.to_string()))?;
                let flags = engines
                    .eval
                    .script(sha.as_bytes())
                    .map(|s| s.flags)
                    .unwrap_or_default();
                Ok((Target::Script(sha), flags))
            }
        }
    }

    /// Whether its commands may not write (a `_RO` command, a `no-writes` script).
    pub(crate) fn read_only(&self) -> bool {
        self.read_only_command || self.flags.no_writes
    }

    /// Whether it refuses to run in cluster mode (`no-cluster`).
    pub(crate) fn no_cluster(&self) -> bool {
        self.flags.no_cluster
    }

    /// Whether its commands may run over `maxmemory` (`allow-oom`).
    pub(crate) fn allow_oom(&self) -> bool {
        self.flags.allow_oom
    }

    /// Runs the script or function over `host`, writing its reply (inline: a long call hands
    /// its worker off from the interpreters' hook, `crate::scripting`).
    pub(crate) fn run_with(&self, engines: &mut Engines, host: &mut dyn Host, reply: &mut Reply) {
        let (keys, argv) = (self.keys, self.argv);
        match &self.target {
            Target::Script(sha) => engines.eval.run(sha.as_bytes(), keys, argv, host, reply),
            Target::Function(name) => engines
                .functions
                .run_function(name, keys, argv, host, reply),
        };
    }

    /// What FUNCTION STATS shows of this call.
    pub(crate) fn info(&self, args: Args<'_>) -> RunInfo {
        RunInfo {
            eval: matches!(self.target, Target::Script(_)),
            name: match &self.target {
                Target::Script(sha) => sha.clone(),
                Target::Function(name) => String::from_utf8_lossy(name).into_owned(),
            },
            command: args
                .iter_from(0)
                .map(String::from_utf8_lossy)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// Runs the call over `ov` (`all`: holding every stripe), writing its reply. Returns
    /// whether it must run again under every lock (its writes then discarded, as they are
    /// when the node halts it).
    fn run(
        &self,
        ctx: &RespContext,
        engines: &mut Engines,
        ov: &mut Overlay<'_>,
        all: bool,
        run: &mut RunCommand<'_>,
        reply: &mut Reply,
    ) -> bool {
        let mut host = OverlayHost {
            ctx,
            run,
            ov,
            read_only: self.read_only(),
            allow_oom: self.allow_oom(),
            all,
            wrote: &self.wrote,
            published_before: crate::pubsub::published_here(),
            restart: false,
        };
        self.run_with(engines, &mut host, reply);
        let restart = host.restart;
        if restart || ctx.scripts.is_halted() {
            host.ov.discard();
        }
        restart
    }
}

/// SCRIPT HELP, FLUSH, EXISTS, LOAD, KILL.
pub(crate) fn script(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    if is("HELP") && argc == 2 {
        reply.help(HELP);
    } else if is("FLUSH") && argc <= 3 {
        if argc == 3
            && !matches!(
                args.get(2).to_ascii_uppercase().as_slice(),
                b"SYNC" | b"ASYNC"
            )
        {
            return Err(raw("ERR SCRIPT FLUSH only support SYNC|ASYNC option"));
        }
        ctx.scripts
            .engine()
            .eval
            .flush()
            .map_err(|e| raw(e.to_string()))?;
        reply.ok();
    } else if is("EXISTS") && argc >= 3 {
        let engine = ctx.scripts.engine();
        reply.array(argc - 2);
        for sha in args.iter_from(2) {
            reply.int(i64::from(engine.eval.exists(sha)));
        }
    } else if is("LOAD") && argc == 3 {
        let sha = ctx
            .scripts
            .engine()
            .eval
            .load(args.get(2))
            .map_err(|e| raw(e.to_string()))?;
        reply.bulk(sha.as_bytes());
    } else if is("KILL") && argc == 2 {
        ctx.scripts.kill(true).map_err(raw)?;
        reply.ok();
    } else {
        return Err(raw(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(sub)
        )));
    }
    Ok(())
}

const HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

/// Whether a command may run while a script is busy: those Redis flags `allow_busy`, and
/// SCRIPT KILL, FUNCTION KILL and FUNCTION STATS.
fn allowed_while_busy(cmd: Cmd, args: Args<'_>) -> bool {
    if matches!(cmd, Cmd::Script | Cmd::Function) {
        let sub = args.get(1);
        return args.len() == 2
            && (sub.eq_ignore_ascii_case(b"KILL")
                || (cmd == Cmd::Function && sub.eq_ignore_ascii_case(b"STATS")));
    }
    cmd.spec().flags.contains(&"allow_busy")
}

/// The commands of one script run, over its transaction's overlay.
struct OverlayHost<'a, 'o, 'k> {
    ctx: &'a RespContext,
    run: &'a mut RunCommand<'o>,
    ov: &'a mut Overlay<'k>,
    read_only: bool,
    allow_oom: bool,
    /// Whether every stripe is locked.
    all: bool,
    wrote: &'a AtomicBool,
    /// This thread's publish count when the run started (`crate::pubsub::published_here`).
    published_before: u64,
    /// Set when the script touched a key outside its locks before publishing anything: the
    /// run is abandoned, its writes discarded, and the script run again under every lock.
    restart: bool,
}

impl Host for OverlayHost<'_, '_, '_> {
    fn acl_check(&mut self, args: Args<'_>) -> Option<bool> {
        let cmd = Cmd::lookup(args.get(0))?;
        Some(self.run.allowed(cmd, args))
    }

    fn call(&mut self, args: Args<'_>, reply: &mut Reply) {
        match self.admit(args) {
            Ok(cmd) => self.run.run(reply, self.ov, cmd, args),
            Err(msg) => reply.error(&msg),
        }
    }
}

impl OverlayHost<'_, '_, '_> {
    /// Redis's checks of a command a script calls ([`admit_call`]), then Meridian's: its
    /// keys within what the script locked.
    fn admit(&mut self, args: Args<'_>) -> Result<Cmd, String> {
        let (cmd, writes) = admit_call(self.ctx, args, self.read_only, self.allow_oom)?;
        if let Err(msg) = self.within_locks(cmd, args) {
            // Run again from the start under every lock, unless that cannot be undone.
            if crate::pubsub::published_here() == self.published_before && self.ov.discardable() {
                self.restart = true;
                self.ctx.scripts.abandon_run();
            }
            return Err(msg);
        }
        if writes {
            self.wrote.store(true, Ordering::Release);
        }
        Ok(cmd)
    }

    /// Whether the command's keys are within the script's locks, taking a key's stripe
    /// (or, for a command over the whole keyspace, every stripe) when no one holds it; an
    /// error naming what the script could not lock otherwise.
    fn within_locks(&mut self, cmd: Cmd, args: Args<'_>) -> Result<(), String> {
        if self.all {
            return Ok(());
        }
        if multi::needs_every_stripe(cmd, args) {
            if self.ov.try_hold_all() {
                self.all = true;
                return Ok(());
            }
            return Err(format!(
                "ERR {} in a script that declared keys, while other clients held some, after \
                 the script published messages or wrote: run it with numkeys 0 to lock the \
                 whole keyspace",
                cmd.spec().name.to_ascii_uppercase()
            ));
        }
        for i in cmd.spec().key_positions(&args) {
            let key = args.get(i);
            if !self.ov.try_hold(key) {
                return Err(format!(
                    "ERR Script attempted to access key '{}' that it did not declare while \
                     another client held it, after the script published messages or wrote: \
                     pass every key a script touches in KEYS (numkeys), or run it with \
                     numkeys 0",
                    String::from_utf8_lossy(key)
                ));
            }
        }
        Ok(())
    }
}

/// Redis's checks of a command a script calls, in Redis's order, on a node or a cluster
/// node: a known command, its arity, not `noscript`, no BLOCK, no write from a read-only
/// script, enough replicas and memory for a write. Answers the command and whether it
/// writes, or the error to reply.
pub(crate) fn admit_call(
    ctx: &RespContext,
    args: Args<'_>,
    read_only: bool,
    allow_oom: bool,
) -> Result<(Cmd, bool), String> {
    let Some(cmd) = Cmd::lookup(args.get(0)) else {
        return Err("ERR Unknown Redis command called from script".into());
    };
    let spec = cmd.spec();
    if !spec.arity_ok(args.len()) {
        return Err("ERR Wrong number of args calling Redis command from script".into());
    }
    // CLUSTER RESET is `noscript` in Redis (a flag of the subcommand).
    let cluster_reset =
        cmd == Cmd::Cluster && args.len() > 1 && args.get(1).eq_ignore_ascii_case(b"RESET");
    if spec.flags.contains(&"noscript") || cluster_reset {
        return Err("ERR This Redis command is not allowed from script".into());
    }
    // A script cannot wait for another client's write (Redis's check inside XREAD).
    if matches!(cmd, Cmd::Xread | Cmd::Xreadgroup)
        && matches!(
            meridian_redis::streams::blocking_timeout(cmd, args),
            Ok(Some(_))
        )
    {
        return Err(format!(
            "ERR {} command is not allowed with BLOCK option from scripts",
            String::from_utf8_lossy(args.get(0))
        ));
    }
    let writes = spec.flags.contains(&"write") || spec.flags.contains(&"may_replicate");
    if writes && read_only {
        return Err("ERR Write commands are not allowed from read-only scripts.".into());
    }
    if spec.flags.contains(&"write") && ctx.too_few_replicas() {
        return Err(crate::resp::context::NOREPLICAS.into());
    }
    if spec.flags.contains(&"denyoom") && !allow_oom && ctx.keyspace.over_maxmemory() {
        return Err(crate::memory::OOM.to_string());
    }
    Ok((cmd, writes))
}
