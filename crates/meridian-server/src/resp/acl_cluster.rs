//! ACL users in cluster mode: replicated with the cluster metadata, so a user set on one
//! node is enforced on every node (issue 42; real Redis Cluster keeps ACLs per node).
//!
//! - [`command`]: `ACL SETUSER`, `DELUSER` and `LOAD` on a cluster node are validated here
//!   exactly as on a standalone node (same Redis errors), then proposed to the claimant as a
//!   [`MetaChange::Users`] carrying the whole resulting user (only the front end reads
//!   rules). The reply comes once the claimant published the new metadata version and every
//!   member the failure detector sees up confirmed it follows it, so `+OK` means
//!   cluster-wide (a member down meanwhile gets the users from its peers' heartbeats); a
//!   refused or unanswered proposal answers an error saying why, and this node's users are
//!   then unchanged. Every other `ACL` subcommand runs as on a standalone node (`ACL SAVE`
//!   writes this node's ACL file).
//! - [`adopt`]: run for every metadata version a node adopts; when its users differ from
//!   the ones last applied, they replace the node's users, exactly as `ACL LOAD` does (a
//!   deleted user's connections are closed, a changed one applies from their next command,
//!   and a subscriber whose channel was revoked is closed, as `ACL SETUSER` does).
//!
//! Until the first such change the document has no users and each node serves its own
//! configuration (`resp.users`, `resp.aclfile`, `requirepass`); the first change starts
//! from the proposer's users. Users whose names or rules are not UTF-8 cannot be replicated
//! (the document is text on disk) and are refused in cluster mode.
//!
//! Every table comes from a peer, so it is hostile: a table that does not parse whole is
//! logged and ignored (the node keeps its users), never a panic.

use super::acl::{Adopted, Slot, Users};
use super::acl_command::{install, loaded_users, user_after};
use super::context::RespContext;
use crate::cluster_backend::ClusterBackend;
use meridian_redis::acl::User;
use meridian_redis::error::{CmdResult, raw};
use meridian_redis::{Args, CmdError, Reply};
use meridian_replication::{ClusterMeta, MetaChange, UserTable, UsersChange};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Runs `ACL SETUSER|DELUSER|LOAD` (`acl_command::changes_users`) on a cluster node:
/// validated here, applied by the claimant, answered once every member seen up follows it.
pub(crate) async fn command(
    ctx: &RespContext,
    cluster: &ClusterBackend,
    reply: &mut Reply,
    args: Args<'_>,
) -> CmdResult {
    let sub = args.get(1).to_ascii_uppercase();
    let (change, deleted) = if sub == b"SETUSER" {
        (setuser(ctx, args)?, None)
    } else if sub == b"DELUSER" {
        match deluser(ctx, args)? {
            Some((change, n)) => (change, Some(n)),
            // None of the names is a user: Redis answers 0, and there is nothing to propose.
            None => {
                reply.int(0);
                return Ok(());
            }
        }
    } else {
        (load(ctx)?, None)
    };
    // The claimant starts from the proposer's users only while the document has none.
    let replicated = ctx.users.adopted.lock().users.is_some();
    let base = if replicated {
        UserTable::default()
    } else {
        table_of(&ctx.users)?
    };
    let proposed = cluster
        .node
        .change(MetaChange::Users { base, change })
        .await;
    match proposed {
        Ok(meta) => {
            // The node adopted `meta` (or a later one) before `change` returned; applying
            // it here too makes sure the reply follows the local change.
            adopt(ctx, &meta);
            // Every member seen up applies the users before the reply, so a client moving to
            // another node finds them there; one that does not confirm gets them from its
            // peers' heartbeats.
            for peer in cluster.node.sync_members(&meta).await {
                tracing::warn!(%peer, version = meta.version,
                    "ACL change not confirmed by a member yet");
            }
            match deleted {
                Some(n) => reply.int(n),
                None => reply.ok(),
            }
            Ok(())
        }
        Err(e) => Err(not_applied(ctx, cluster, &sub, &e)),
    }
}

/// `ACL SETUSER`: the whole user the rules make of the node's current one.
fn setuser(ctx: &RespContext, args: Args<'_>) -> Result<UsersChange, CmdError> {
    let existing: Option<Arc<Slot>> = ctx.users.slot(args.get(2));
    let user = user_after(ctx, existing.as_deref(), args)?;
    let (name, rules) = text_of(&user)?;
    Ok(UsersChange::Set { name, rules })
}

/// `ACL DELUSER`: the names that are users here (Redis's count), or `None` when none is.
fn deluser(ctx: &RespContext, args: Args<'_>) -> Result<Option<(UsersChange, i64)>, CmdError> {
    if args.iter_from(2).any(|n| n == b"default") {
        return Err(raw("ERR The 'default' user cannot be removed"));
    }
    let mut names = Vec::new();
    for name in args.iter_from(2).filter(|n| ctx.users.exists(n)) {
        let Ok(name) = String::from_utf8(name.to_vec()) else {
            return Err(raw(format!(
                "ERR user '{}' cannot be deleted cluster-wide: {NOT_TEXT}",
                String::from_utf8_lossy(name)
            )));
        };
        names.push(name);
    }
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Ok(None);
    }
    let n = names.len() as i64;
    Ok(Some((UsersChange::Delete { names }, n)))
}

/// `ACL LOAD`: every user of the node's ACL file (the `default` user as configured unless
/// the file has one).
fn load(ctx: &RespContext) -> Result<UsersChange, CmdError> {
    let Some(path) = ctx.users.aclfile.clone() else {
        return Err(raw(super::acl_command::NO_ACLFILE));
    };
    let users = loaded_users(ctx, &path)?;
    let mut table = BTreeMap::new();
    for user in users.values() {
        let (name, rules) = text_of(user)?;
        table.insert(name, rules);
    }
    Ok(UsersChange::Replace(table.into()))
}

/// The node's users as the document holds them.
fn table_of(users: &Users) -> Result<UserTable, CmdError> {
    let mut table = BTreeMap::new();
    for slot in users.users.read().values() {
        let (name, rules) = text_of(&slot.get())?;
        table.insert(name, rules);
    }
    Ok(table.into())
}

const NOT_TEXT: &str =
    "cluster nodes keep user names and rules (key and channel patterns) as UTF-8 text";

/// A user's name and rules as text, or why it cannot be replicated.
fn text_of(user: &User) -> Result<(String, String), CmdError> {
    let name = String::from_utf8(user.name().to_vec());
    let rules = String::from_utf8(user.describe());
    match (name, rules) {
        (Ok(name), Ok(rules)) => Ok((name, rules)),
        _ => Err(raw(format!(
            "ERR user '{}' cannot be replicated to the cluster: {NOT_TEXT}",
            String::from_utf8_lossy(user.name())
        ))),
    }
}

/// The error line of a proposal that failed: Redis's code, then what happened and why.
fn not_applied(
    ctx: &RespContext,
    cluster: &ClusterBackend,
    sub: &[u8],
    e: &meridian_replication::ReplicationError,
) -> CmdError {
    let line = crate::wire_error::resp(cluster, &ctx.metrics, e);
    let (code, why) = line.split_once(' ').unwrap_or(("ERR", &line));
    let what = if e.code() == "claimant_unreachable" {
        "may not have been applied (the cluster's claimant did not answer; ACL LIST shows \
         the users once it does)"
    } else {
        "was not applied: no node's users changed"
    };
    raw(format!(
        "{code} ACL {} {what}: {why}",
        String::from_utf8_lossy(sub)
    ))
}

/// Applies the users of `meta` (see the module docs) when they differ from the ones last
/// applied; an older document than the last one, or one without users, changes nothing.
pub(crate) fn adopt(ctx: &RespContext, meta: &ClusterMeta) {
    let Some(table) = &meta.acl else {
        return;
    };
    let at = (meta.version, meta.author.0);
    // Held while installing, so two adoptions racing apply in document order.
    let mut adopted = ctx.users.adopted.lock();
    if at < adopted.at || adopted.users.as_ref() == Some(table) {
        return;
    }
    match users_of(&ctx.users, table) {
        Ok(users) => install(ctx, users, true),
        Err(e) => tracing::warn!(version = meta.version, error = %e,
            "the cluster's ACL users do not parse here: keeping this node's users"),
    }
    // Recorded even when refused: the same table would be refused again.
    *adopted = Adopted {
        at,
        users: Some(table.clone()),
    };
}

/// Parses a replicated table into users, whole or not at all.
fn users_of(users: &Users, table: &UserTable) -> Result<BTreeMap<Vec<u8>, User>, String> {
    let mut out = BTreeMap::new();
    for (name, rules) in table.users() {
        if !User::valid_name(name.as_bytes()) {
            return Err(format!("invalid user name '{name}'"));
        }
        let fresh = User::new(name.as_bytes(), users.all_channels_default);
        let user = fresh
            .with_rules(rules.split(' ').map(str::as_bytes))
            .map_err(|e| format!("user '{name}': {e}"))?;
        out.insert(name.as_bytes().to_vec(), user);
    }
    if !out.contains_key(b"default".as_slice()) {
        return Err("no 'default' user".into());
    }
    Ok(out)
}

/// Registers [`adopt`] with `ctx`'s replication node, so every document it adopts from now
/// on (and the current one) sets its users. Holds `ctx` weakly: the node outlives it.
pub(crate) fn follow(ctx: &Arc<RespContext>) {
    let Some(cluster) = &ctx.cluster else {
        return;
    };
    let weak = Arc::downgrade(ctx);
    cluster.node.on_meta(move |meta| {
        if let Some(ctx) = weak.upgrade() {
            adopt(&ctx, meta);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::acl::AclConfig;

    fn table(pairs: &[(&str, &str)]) -> UserTable {
        pairs
            .iter()
            .map(|(n, r)| (n.to_string(), r.to_string()))
            .collect::<BTreeMap<_, _>>()
            .into()
    }

    #[test]
    fn a_table_reads_back_the_users_it_was_made_of() {
        let users = Users::new(
            &AclConfig {
                users: vec!["user app on >p ~app:* &jobs -@all +get (+set ~w:*)".into()],
                ..AclConfig::default()
            },
            Some("rootpass"),
        )
        .unwrap();
        let made = table_of(&users).unwrap();
        let read = users_of(&users, &made).unwrap();
        for (name, slot) in users.users.read().iter() {
            assert_eq!(read.get(name), Some(&*slot.get()), "{name:?}");
        }
        assert!(!format!("{:?}", made.users()).contains(">p"), "hashes only");
    }

    /// Attack: a table from a hostile (or newer) peer that does not parse whole is refused,
    /// so the node keeps its users.
    #[test]
    fn a_table_that_does_not_parse_whole_is_refused() {
        let users = Users::new(&AclConfig::default(), None).unwrap();
        for bad in [
            table(&[("default", "on nopass +@all"), ("a", "on +nosuchcommand")]),
            table(&[("a", "on")]),
            table(&[("default", "on"), ("a b", "on")]),
            table(&[("default", "on (+get")]),
            table(&[("default", "on #zz")]),
        ] {
            assert!(users_of(&users, &bad).is_err(), "{bad:?}");
        }
    }
}
