//! The `ACL` command and the ACL check of each request, over the node's
//! [`Users`](super::acl::Users).
//!
//! - [`check`]: whether the connection's user may run a request; a refusal is logged (`ACL
//!   LOG`) and answered with Redis's `-NOPERM` text (inside a script, Redis's `The user
//!   executing the script …`).
//! - [`command`]: `ACL CAT|DELUSER|DRYRUN|GENPASS|GETUSER|HELP|LIST|LOAD|LOG|SAVE|SETUSER|
//!   USERS|WHOAMI`, with Redis's replies and errors. Deleting a user (or `ACL LOAD` dropping
//!   it) closes its connections; a change that revokes a channel a connection is subscribed
//!   to closes that connection, as Redis does. In cluster mode `SETUSER`, `DELUSER` and
//!   `LOAD` go through the cluster metadata instead (`resp::acl_cluster`).

use super::acl::{LogContext, SessionUser, Slot, Users};
use super::context::RespContext;
use meridian_redis::acl::{CATEGORIES, Denied, Request, User, universe::Universe};
use meridian_redis::error::{CmdResult, raw};
use meridian_redis::value::parse_i64;
use meridian_redis::{Args, Reply};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// A request the ACL refused: why (`None`: the connection's user was deleted), and the
/// error to answer.
#[derive(Debug)]
pub(crate) struct Refused {
    pub denied: Option<Denied>,
    pub message: String,
}

/// Checks a request against the session's user; on refusal logs it (with `client_info`,
/// CLIENT LIST's line of the connection) and gives Redis's `-NOPERM` text (inside a
/// script, Redis's `The user executing the script …`).
pub(crate) fn check(
    users: &Users,
    user: &mut SessionUser,
    (cmd, args): (meridian_redis::Cmd, Args<'_>),
    context: LogContext,
    client_info: impl FnOnce() -> String,
) -> Result<(), Refused> {
    let Some(current) = user.current() else {
        return Err(Refused {
            denied: None,
            message: "NOPERM the user of this connection was deleted".into(),
        });
    };
    if current.unrestricted() {
        return Ok(());
    }
    // Built only for a restricted user: finding a subcommand's id costs a lookup.
    let request = &Request::new(cmd, args);
    let Err(denied) = current.check(request) else {
        return Ok(());
    };
    let name = current.name().to_vec();
    users.log(
        denied.reason(),
        context,
        denied.object(request),
        &name,
        client_info(),
    );
    let message = match context {
        LogContext::Lua => format!(
            "ERR The user executing the script {}",
            denied.script_reason()
        ),
        _ => denied.error(request),
    };
    Err(Refused {
        denied: Some(denied),
        message,
    })
}

/// Closes every connection authenticated as `name` (a deleted user), or, with `keep`, those
/// subscribed to a channel `keep` no longer allows.
pub(super) fn close_clients(ctx: &RespContext, name: &[u8], keep: Option<&User>) {
    for client in ctx.clients() {
        if *client.user.lock() != name {
            continue;
        }
        let revoked = match keep {
            None => true,
            Some(user) => ctx
                .pubsub
                .subscriptions_of(client.mailbox_id.load(Ordering::Relaxed))
                .into_iter()
                .any(|(kind, channel)| {
                    !user.allows_channel(&channel, kind == crate::pubsub::Kind::Pattern)
                }),
        };
        if revoked {
            client.kill();
        }
    }
}

/// Whether `ACL …` (`args`) changes users in a form the command accepts: cluster mode runs
/// it through `resp::acl_cluster` instead. Other forms run here, which answers their errors.
pub(crate) fn changes_users(args: Args<'_>) -> bool {
    let sub = args.get(1);
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    ((is("SETUSER") || is("DELUSER")) && args.len() >= 3) || (is("LOAD") && args.len() == 2)
}

/// Runs `ACL <subcommand> …`.
pub(crate) fn command(
    ctx: &RespContext,
    user: &SessionUser,
    reply: &mut Reply,
    args: Args<'_>,
) -> CmdResult {
    let sub = args.get(1);
    let argc = args.len();
    let is = |name: &str| sub.eq_ignore_ascii_case(name.as_bytes());
    let full = format!("acl|{}", String::from_utf8_lossy(sub));
    let u = Universe::get();
    let Some(entry) = u.lookup(&full).map(|id| u.entry(id)) else {
        return Err(raw(format!(
            "ERR unknown subcommand '{}'. Try ACL HELP.",
            String::from_utf8_lossy(&sub[..sub.len().min(128)])
        )));
    };
    let spec_ok = if entry.arity >= 0 {
        argc == entry.arity as usize
    } else {
        argc >= entry.arity.unsigned_abs() as usize
    };
    if !spec_ok {
        return Err(raw(format!(
            "ERR wrong number of arguments for '{}' command",
            entry.name
        )));
    }
    // Forms the arity allows but the subcommand does not take.
    let arity = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(raw(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
                String::from_utf8_lossy(sub)
            )))
        }
    };
    // Cluster mode proposes user changes to the claimant (`acl_cluster`, awaited by the
    // connection): never applied to this node alone.
    if ctx.cluster.is_some() && changes_users(args) {
        return Err(raw(format!(
            "ERR ACL {} changes the cluster's users and cannot run here on a cluster node",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        )));
    }
    if is("SETUSER") {
        arity(argc >= 3)?;
        setuser(ctx, reply, args)
    } else if is("DELUSER") {
        arity(argc >= 3)?;
        deluser(ctx, reply, args)
    } else if is("GETUSER") {
        arity(argc == 3)?;
        getuser(ctx, reply, args.get(2));
        Ok(())
    } else if is("LIST") || is("USERS") {
        arity(argc == 2)?;
        list(ctx, reply, is("USERS"));
        Ok(())
    } else if is("WHOAMI") {
        arity(argc == 2)?;
        reply.bulk(user.name());
        Ok(())
    } else if is("CAT") {
        arity(argc <= 3)?;
        cat(reply, (argc == 3).then(|| args.get(2)))
    } else if is("GENPASS") {
        arity(argc <= 3)?;
        genpass(reply, (argc == 3).then(|| args.get(2)))
    } else if is("LOG") {
        arity(argc <= 3)?;
        log_command(ctx, reply, (argc == 3).then(|| args.get(2)))
    } else if is("DRYRUN") {
        arity(argc >= 4)?;
        dryrun(ctx, reply, args)
    } else if is("LOAD") || is("SAVE") {
        arity(argc == 2)?;
        let Some(path) = ctx.users.aclfile.clone() else {
            return Err(raw(NO_ACLFILE));
        };
        if is("LOAD") {
            load(ctx, &path)?;
        } else {
            save(ctx, &path)?;
        }
        reply.ok();
        Ok(())
    } else {
        reply.help(HELP);
        Ok(())
    }
}

pub(super) const NO_ACLFILE: &str = "ERR This Redis instance is not configured to use an ACL \
    file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG \
    REWRITE (assuming you have a Redis configuration file set) in order to store users in the \
    Redis configuration.";

fn setuser(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let name = args.get(2);
    let mut users = ctx.users.users.write();
    let existing = users.get(name).cloned();
    let user = user_after(ctx, existing.as_deref(), args)?;
    match existing {
        Some(slot) => {
            let old = slot.get();
            slot.replace(user.clone());
            drop(users);
            if !user_keeps_channels(&old, &user) {
                close_clients(ctx, name, Some(&user));
            }
        }
        None => {
            users.insert(name.to_vec(), Slot::new(user));
        }
    }
    reply.ok();
    Ok(())
}

/// The user `ACL SETUSER name rules…` (`args`) makes of `existing` (a new user when
/// `None`), or Redis's error for the name or the first refused rule.
pub(super) fn user_after(
    ctx: &RespContext,
    existing: Option<&Slot>,
    args: Args<'_>,
) -> Result<User, meridian_redis::CmdError> {
    let name = args.get(2);
    if !User::valid_name(name) {
        return Err(raw("ERR Usernames can't contain spaces or null characters"));
    }
    let base = match existing {
        Some(slot) => (*slot.get()).clone(),
        None => User::new(name, ctx.users.all_channels_default),
    };
    base.with_rules(args.iter_from(3))
        .map_err(|e| raw(format!("ERR {e}")))
}

/// Whether `new` allows every channel `old` did (nothing to check on subscribers).
pub(super) fn user_keeps_channels(old: &User, new: &User) -> bool {
    if new.selectors().iter().any(|s| s.all_channels()) {
        return true;
    }
    old.selectors().iter().all(|s| {
        !s.all_channels()
            && s.channels()
                .iter()
                .all(|c| new.selectors().iter().any(|n| n.channels().contains(c)))
    })
}

fn deluser(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    if args.iter_from(2).any(|n| n == b"default") {
        return Err(raw("ERR The 'default' user cannot be removed"));
    }
    let mut deleted = 0;
    for name in args.iter_from(2) {
        let removed = ctx.users.users.write().remove(name);
        if let Some(slot) = removed {
            slot.deleted.store(true, Ordering::Release);
            close_clients(ctx, name, None);
            deleted += 1;
        }
    }
    reply.int(deleted);
    Ok(())
}

fn getuser(ctx: &RespContext, reply: &mut Reply, name: &[u8]) {
    let Some(slot) = ctx.users.slot(name) else {
        reply.null();
        return;
    };
    let user = slot.get();
    reply.map(6);
    reply.bulk(b"flags");
    let flags = user.flags();
    reply.set(flags.len());
    for f in flags {
        reply.bulk(f.as_bytes());
    }
    reply.bulk(b"passwords");
    reply.array(user.passwords().len());
    for p in user.passwords() {
        reply.bulk(p.as_bytes());
    }
    let (root, others) = user.selectors().split_first().expect("a root selector");
    describe_selector(reply, root);
    reply.bulk(b"selectors");
    reply.array(others.len());
    for s in others {
        reply.map(3);
        describe_selector(reply, s);
    }
}

fn describe_selector(reply: &mut Reply, s: &meridian_redis::acl::Selector) {
    reply.bulk(b"commands");
    reply.bulk(s.describe_commands().as_bytes());
    reply.bulk(b"keys");
    reply.bulk(&s.describe_keys());
    reply.bulk(b"channels");
    reply.bulk(&s.describe_channels());
}

/// `ACL LIST`'s lines (or, `names_only`, `ACL USERS`), by name.
fn list(ctx: &RespContext, reply: &mut Reply, names_only: bool) {
    let lines = user_lines(ctx, names_only);
    reply.array(lines.len());
    for l in lines {
        reply.bulk(&l);
    }
}

fn user_lines(ctx: &RespContext, names_only: bool) -> Vec<Vec<u8>> {
    let users = ctx.users.users.read();
    users
        .iter()
        .map(|(name, slot)| {
            if names_only {
                name.clone()
            } else {
                [b"user ", &name[..], b" ", &slot.get().describe()].concat()
            }
        })
        .collect()
}

fn cat(reply: &mut Reply, category: Option<&[u8]>) -> CmdResult {
    let Some(name) = category else {
        reply.array(CATEGORIES.len());
        for c in CATEGORIES {
            reply.bulk(c.as_bytes());
        }
        return Ok(());
    };
    let bit = std::str::from_utf8(name)
        .ok()
        .and_then(Universe::category)
        .ok_or_else(|| {
            raw(format!(
                "ERR Unknown category '{}'",
                String::from_utf8_lossy(&name[..name.len().min(128)])
            ))
        })?;
    let names: Vec<&str> = Universe::get()
        .entries()
        .iter()
        .filter(|e| e.categories & bit != 0)
        .map(|e| e.name.as_str())
        .collect();
    reply.array(names.len());
    for n in names {
        reply.bulk(n.as_bytes());
    }
    Ok(())
}

fn genpass(reply: &mut Reply, bits: Option<&[u8]>) -> CmdResult {
    const MAX_BITS: i64 = 4096;
    let bits = match bits {
        None => 256,
        Some(b) => {
            parse_i64(b).ok_or_else(|| raw("ERR value is not an integer or out of range"))?
        }
    };
    if !(1..=MAX_BITS).contains(&bits) {
        return Err(raw(format!(
            "ERR ACL GENPASS argument must be the number of bits for the output password, a \
             positive number up to {MAX_BITS}"
        )));
    }
    let chars = (bits as usize).div_ceil(4);
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    rand::fill(&mut bytes[..]);
    reply.bulk(&hex::encode(bytes).as_bytes()[..chars]);
    Ok(())
}

fn log_command(ctx: &RespContext, reply: &mut Reply, arg: Option<&[u8]>) -> CmdResult {
    let mut count = 10usize;
    if let Some(a) = arg {
        if a.eq_ignore_ascii_case(b"RESET") {
            ctx.users.log.lock().clear();
            reply.ok();
            return Ok(());
        }
        let n = parse_i64(a).ok_or_else(|| raw("ERR value is not an integer or out of range"))?;
        count = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
    }
    let log = ctx.users.log.lock();
    let now = Instant::now();
    let shown = count.min(log.len());
    reply.array(shown);
    for e in log.iter().take(shown) {
        reply.map(7);
        reply.bulk(b"count");
        reply.int(e.count as i64);
        reply.bulk(b"reason");
        reply.bulk(e.reason.as_bytes());
        reply.bulk(b"context");
        reply.bulk(e.context.name().as_bytes());
        reply.bulk(b"object");
        reply.bulk(&e.object);
        reply.bulk(b"username");
        reply.bulk(&e.username);
        reply.bulk(b"age-seconds");
        reply.double(now.duration_since(e.at).as_secs_f64());
        reply.bulk(b"client-info");
        reply.bulk(e.client_info.as_bytes());
    }
    Ok(())
}

fn dryrun(ctx: &RespContext, reply: &mut Reply, args: Args<'_>) -> CmdResult {
    let name = args.get(2);
    let Some(slot) = ctx.users.slot(name) else {
        return Err(raw(format!(
            "ERR User '{}' not found",
            String::from_utf8_lossy(name)
        )));
    };
    let inner = args.skip(3);
    let Some(cmd) = meridian_redis::Cmd::lookup(inner.get(0)) else {
        return Err(raw(format!(
            "ERR Command '{}' not found",
            String::from_utf8_lossy(inner.get(0))
        )));
    };
    let request = Request::new(cmd, inner);
    if !cmd.spec().arity_ok(inner.len()) {
        return Err(raw(format!(
            "ERR wrong number of arguments for '{}' command",
            request.name()
        )));
    }
    match slot.get().check(&request) {
        Ok(()) => reply.ok(),
        Err(d) => {
            let what = match d {
                Denied::Command => format!("run the '{}' command", request.name()),
                Denied::Key(at) => format!(
                    "access the '{}' key",
                    String::from_utf8_lossy(inner.get(at))
                ),
                Denied::Channel(at) => format!(
                    "access the '{}' channel",
                    String::from_utf8_lossy(inner.get(at))
                ),
            };
            reply.bulk(format!("This user has no permissions to {what}").as_bytes());
        }
    }
    Ok(())
}

/// `ACL LOAD`: replaces every user; a file without `user default` leaves the `default` user
/// as configured (Redis would make it `nopass`, opening a node `requirepass` protects).
/// Closes the connections of users the file no longer has.
fn load(ctx: &RespContext, path: &PathBuf) -> CmdResult {
    install(ctx, loaded_users(ctx, path)?, false);
    Ok(())
}

/// The users `ACL LOAD` gives: the file's, the `default` user as configured unless the file
/// has one; or Redis's error saying where the file is wrong.
pub(super) fn loaded_users(
    ctx: &RespContext,
    path: &PathBuf,
) -> Result<BTreeMap<Vec<u8>, User>, meridian_redis::CmdError> {
    let mut parsed = ctx.users.read_file(path).map_err(|e| {
        raw(format!(
            "ERR {e} WARNING: ACL errors detected, no change to the previously active ACL \
             rules was performed"
        ))
    })?;
    parsed
        .entry(b"default".to_vec())
        .or_insert_with(|| ctx.users.configured_default.clone());
    Ok(parsed)
}

/// Makes the node's users exactly `users` (which has `default`): a changed user applies to
/// its connections from their next command, a user no longer there is deleted and its
/// connections closed, and, with `revoke_channels`, a connection subscribed to a channel its
/// changed user no longer allows is closed (what `ACL SETUSER` does).
pub(super) fn install(ctx: &RespContext, users: BTreeMap<Vec<u8>, User>, revoke_channels: bool) {
    let mut dropped = Vec::new();
    let mut narrowed = Vec::new();
    {
        let mut registry = ctx.users.users.write();
        for (name, slot) in registry.iter() {
            let Some(user) = users.get(name) else {
                slot.deleted.store(true, Ordering::Release);
                dropped.push(name.clone());
                continue;
            };
            let old = slot.get();
            if *old != *user {
                if revoke_channels && !user_keeps_channels(&old, user) {
                    narrowed.push((name.clone(), user.clone()));
                }
                slot.replace(user.clone());
            }
        }
        registry.retain(|name, _| !dropped.contains(name));
        for (name, user) in users {
            registry.entry(name).or_insert_with(|| Slot::new(user));
        }
    }
    for name in dropped {
        close_clients(ctx, &name, None);
    }
    for (name, user) in narrowed {
        close_clients(ctx, &name, Some(&user));
    }
}

/// `ACL SAVE`: every user's `ACL LIST` line, written to a temporary file renamed over the
/// ACL file.
fn save(ctx: &RespContext, path: &PathBuf) -> CmdResult {
    let mut text = Vec::new();
    for line in user_lines(ctx, false) {
        text.extend_from_slice(&line);
        text.push(b'\n');
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let written = std::fs::write(&tmp, &text)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(path = %path.display(), error = %e, "ACL SAVE failed");
        raw(
            "ERR There was an error trying to save the ACLs. Please check the server logs for \
             more information",
        )
    })
}

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Print this help.",
];
