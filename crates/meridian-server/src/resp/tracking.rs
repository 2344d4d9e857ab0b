//! Client tracking on a connection: `CLIENT TRACKING`, `CLIENT CACHING`, `CLIENT GETREDIR`,
//! `CLIENT TRACKINGINFO`, and what a tracking connection's commands add to the node's table
//! ([`crate::tracking`]).
//!
//! After each command a connection with tracking on (default mode) remembers the keys of a
//! read-only command — or, for a script that ran a read-only command, the script's declared
//! keys, as Redis does — unless OPTIN without `CLIENT CACHING yes` or OPTOUT with `CLIENT
//! CACHING no` says otherwise. The CACHING flag holds for the next command, or for the whole
//! transaction when that command is MULTI.
//!
//! Cluster mode and the worker-shard executor refuse `CLIENT TRACKING on` with the reason:
//! there this node does not see every write to the keys it serves (other nodes apply them,
//! or other threads run them without the connection's state), so it could not promise every
//! invalidation, and a cache that silently misses some is worse than none.

use crate::resp::context::RespContext;
use crate::tracking::{Endpoint, MAX_PREFIX_BYTES, MAX_PREFIXES, Request};
use bytes::Bytes;
use meridian_redis::error::{CmdResult, SYNTAX, raw};
use meridian_redis::value::parse_i64;
use meridian_redis::{Args, Cmd, Reply};

/// Why `CLIENT TRACKING on` is refused where invalidations could not all be sent.
pub(crate) const REFUSED: &str = "ERR CLIENT TRACKING is served on a single node without the \
     worker-shard executor only: here other nodes or threads apply writes to the keys this \
     connection reads, so some invalidations would be missed; cache with a TTL instead, or \
     track on a standalone node";

/// A connection's side of tracking (a session's field).
#[derive(Debug, Default)]
pub(crate) struct ClientTracking {
    /// The connection's registration as a message endpoint (`None` for the sessions of
    /// scripts and worker shards, which are no connection).
    endpoint: Option<Endpoint>,
    /// Tracking is on in default mode (reads are remembered).
    remembers: bool,
    /// Tracking is on.
    on: bool,
    optin: bool,
    optout: bool,
    /// `CLIENT CACHING yes|no` was given for the next command (or transaction).
    caching: bool,
}

impl ClientTracking {
    /// Registers the connection `id` (whose messages arrive in its pub/sub mailbox).
    pub(crate) fn connect(
        ctx: &RespContext,
        id: u64,
        subs: &crate::resp::pubsub::Subscribed,
    ) -> Self {
        let endpoint =
            crate::resp::pubsub::mailbox(subs).map(|m| ctx.keyspace.caching.connect(id, m.clone()));
        Self {
            endpoint,
            ..Self::default()
        }
    }

    /// RESET: tracking off.
    pub(crate) fn reset(&mut self, ctx: &RespContext, id: u64) {
        if self.on {
            ctx.keyspace.caching.disable(id);
        }
        *self = Self {
            endpoint: self.endpoint.take(),
            ..Self::default()
        };
    }

    /// QUIT: the connection is no endpoint any more (its tracking ends too).
    pub(crate) fn close(&mut self) {
        self.endpoint = None;
        self.on = false;
        self.remembers = false;
    }

    /// Whether a read by the running command is to be remembered.
    fn wants_reads(&self) -> bool {
        self.remembers && !((self.optin && !self.caching) || (self.optout && self.caching))
    }
}

/// Whether `cmd` is a read whose keys tracking remembers (scripts are handled apart).
pub(crate) fn tracked_read(cmd: Cmd) -> bool {
    let flags = cmd.spec().flags;
    flags.contains(&"readonly") && !flags.contains(&"pubsub") && !cmd.runs_script()
}

/// After a command outside MULTI: remembers its keys as the module docs say when it `ran`
/// (EXEC, DISCARD, WATCH did not: EXEC's commands are remembered one by one), and ends a
/// CACHING flag that applied to it — unless it was a CLIENT command (CLIENT CACHING itself,
/// or CLIENT TRACKINGINFO after it), which Redis lets the flag outlive.
pub(crate) fn after_command(
    ctx: &RespContext,
    t: &mut ClientTracking,
    id: u64,
    cmd: Cmd,
    args: Args<'_>,
    ran: bool,
) {
    let script_read = crate::tracking::take_script_read();
    if ran && t.wants_reads() && (tracked_read(cmd) || (cmd.runs_script() && script_read)) {
        remember(ctx, id, cmd, args);
    }
    if cmd != Cmd::Client {
        t.caching = false;
    }
}

/// Inside EXEC, after queued command `cmd` ran: remembers its keys as [`after_command`]
/// would (the transaction's CACHING flag holds for every command in it).
pub(crate) fn after_queued(
    ctx: &RespContext,
    t: &ClientTracking,
    id: u64,
    cmd: Cmd,
    args: Args<'_>,
) {
    let script_read = crate::tracking::take_script_read();
    if t.wants_reads() && (tracked_read(cmd) || (cmd.runs_script() && script_read)) {
        remember(ctx, id, cmd, args);
    }
}

fn remember(ctx: &RespContext, id: u64, cmd: Cmd, args: Args<'_>) {
    let keys = cmd.spec().key_positions(&args).map(|i| args.get(i));
    ctx.keyspace.caching.remember(id, keys);
}

/// CLIENT TRACKING / CACHING / GETREDIR / TRACKINGINFO; `None` for another subcommand.
pub(crate) fn client(
    ctx: &RespContext,
    t: &mut ClientTracking,
    id: u64,
    reply: &mut Reply,
    args: Args<'_>,
) -> Option<CmdResult> {
    let sub = args.get(1);
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let argc = args.len();
    let arity = |ok: bool| meridian_redis::error::subcommand_arity("client", sub, ok);
    Some(if is("TRACKING") {
        arity(argc >= 3).and_then(|()| tracking(ctx, t, id, reply, args))
    } else if is("CACHING") {
        arity(argc == 3).and_then(|()| caching(t, reply, args.get(2)))
    } else if is("GETREDIR") {
        arity(argc == 2).map(|()| {
            let redirect = ctx
                .keyspace
                .caching
                .state(id)
                .map_or(-1, |s| s.redirect as i64);
            reply.int(redirect);
        })
    } else if is("TRACKINGINFO") {
        arity(argc == 2).map(|()| tracking_info(ctx, t, id, reply))
    } else {
        return None;
    })
}

fn tracking(
    ctx: &RespContext,
    t: &mut ClientTracking,
    id: u64,
    reply: &mut Reply,
    args: Args<'_>,
) -> CmdResult {
    let table = &ctx.keyspace.caching;
    let mut req = Request::default();
    let mut prefix_bytes = 0;
    let mut j = 3;
    while j < args.len() {
        let opt = args.get(j);
        let more = j + 1 < args.len();
        let is = |name: &[u8]| opt.eq_ignore_ascii_case(name);
        if is(b"REDIRECT") && more {
            j += 1;
            if req.redirect != 0 {
                return Err(raw(
                    "ERR A client can only redirect to a single other client",
                ));
            }
            let target = parse_i64(args.get(j))
                .ok_or_else(|| raw("ERR value is not an integer or out of range"))?;
            match u64::try_from(target) {
                Ok(target) if target > 0 && table.connected(target) => req.redirect = target,
                _ => return Err(raw("ERR The client ID you want redirect to does not exist")),
            }
        } else if is(b"BCAST") {
            req.bcast = true;
        } else if is(b"OPTIN") {
            req.optin = true;
        } else if is(b"OPTOUT") {
            req.optout = true;
        } else if is(b"NOLOOP") {
            req.noloop = true;
        } else if is(b"PREFIX") && more {
            j += 1;
            // Refused before anything is copied past the bounds.
            prefix_bytes += args.get(j).len();
            if req.prefixes.len() >= MAX_PREFIXES || prefix_bytes > MAX_PREFIX_BYTES {
                return Err(raw(format!(
                    "ERR A client may track at most {MAX_PREFIXES} prefixes of \
                     {MAX_PREFIX_BYTES} bytes in all"
                )));
            }
            req.prefixes.push(Bytes::copy_from_slice(args.get(j)));
        } else {
            return Err(raw(SYNTAX));
        }
        j += 1;
    }
    let mode = args.get(2);
    if mode.eq_ignore_ascii_case(b"ON") {
        if ctx.cluster.is_some() || ctx.executor().is_some() {
            return Err(raw(REFUSED));
        }
        if t.endpoint.is_none() {
            return Err(raw("ERR CLIENT TRACKING needs a client connection"));
        }
        let (bcast, optin, optout) = (req.bcast, req.optin, req.optout);
        table.enable(id, req).map_err(|e| raw(format!("ERR {e}")))?;
        t.on = true;
        t.remembers = !bcast;
        t.optin = optin;
        t.optout = optout;
    } else if mode.eq_ignore_ascii_case(b"OFF") {
        table.disable(id);
        t.on = false;
        t.remembers = false;
        t.optin = false;
        t.optout = false;
        t.caching = false;
    } else {
        return Err(raw(SYNTAX));
    }
    reply.ok();
    Ok(())
}

fn caching(t: &mut ClientTracking, reply: &mut Reply, opt: &[u8]) -> CmdResult {
    if !t.on {
        return Err(raw(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with \
             OPTIN or OPTOUT mode enabled",
        ));
    }
    if opt.eq_ignore_ascii_case(b"YES") {
        if !t.optin {
            return Err(raw(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            ));
        }
    } else if opt.eq_ignore_ascii_case(b"NO") {
        if !t.optout {
            return Err(raw(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            ));
        }
    } else {
        return Err(raw(SYNTAX));
    }
    t.caching = true;
    reply.ok();
    Ok(())
}

fn tracking_info(ctx: &RespContext, t: &ClientTracking, id: u64, reply: &mut Reply) {
    let state = ctx.keyspace.caching.state(id);
    let mut flags: Vec<&[u8]> = Vec::new();
    match &state {
        None => flags.push(b"off"),
        Some(s) => {
            flags.push(b"on");
            if s.bcast {
                flags.push(b"bcast");
            }
            if s.optin {
                flags.push(b"optin");
                if t.caching {
                    flags.push(b"caching-yes");
                }
            }
            if s.optout {
                flags.push(b"optout");
                if t.caching {
                    flags.push(b"caching-no");
                }
            }
            if s.noloop {
                flags.push(b"noloop");
            }
            if s.broken {
                flags.push(b"broken_redirect");
            }
        }
    }
    reply.map(3);
    reply.bulk(b"flags");
    reply.set(flags.len());
    for f in &flags {
        reply.bulk(f);
    }
    reply.bulk(b"redirect");
    reply.int(state.as_ref().map_or(-1, |s| s.redirect as i64));
    reply.bulk(b"prefixes");
    let prefixes = state.map(|s| s.prefixes).unwrap_or_default();
    reply.array(prefixes.len());
    for p in &prefixes {
        reply.bulk(p);
    }
}

/// CLIENT LIST's tracking flags (`t`, `R`, `B`, in Redis's order) and `redir=` value for
/// client `id`.
pub(crate) fn list_fields(ctx: &RespContext, id: u64) -> (String, i64) {
    let Some(s) = ctx.keyspace.caching.state(id) else {
        return (String::new(), -1);
    };
    let mut flags = String::from("t");
    if s.broken {
        flags.push('R');
    }
    if s.bcast {
        flags.push('B');
    }
    (flags, s.redirect as i64)
}
