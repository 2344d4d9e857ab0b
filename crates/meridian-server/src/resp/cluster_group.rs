//! MULTI/EXEC and WATCH on timeline buckets in cluster mode: each EXEC is one timeline group
//! ([`meridian_replication::Dispatch::tl_commit_group`]), checked and written all or nothing
//! by the master its records share.
//!
//! How an EXEC runs: every key of every queued command (and every watched key) is read at its
//! master (`read_latest`, in parallel); the commands run in order with
//! [`meridian_redis::types::exec_on_view`] over a [`TxnView`] of those records; then the group
//! goes to the master with every record's version as its precondition and the new contents
//! of the keys written. The master applies it only if no record changed since it was read.
//!
//! Guarantees:
//! - **nothing half-applies**, and a reader at the master (a GET inside MULTI, a `read_latest`)
//!   sees all of an EXEC or none of it;
//! - **WATCH is Redis's optimistic lock**: WATCH reads the version of each watched key at its
//!   master; EXEC answers the null array and applies nothing when a watched key's version is
//!   not the same when EXEC reads it, or changes before the group commits;
//! - **without WATCH, an EXEC always takes effect** as on Redis: a conflict re-runs the queued
//!   commands over fresh reads (they are a pure function of what they read), up to
//!   [`ATTEMPTS`] times, and records mastered at different nodes are first gathered at one;
//! - keys must share one hash slot's partition: Redis Cluster's `CROSSSLOT` otherwise (the
//!   dispatch facade decides, before anything runs).
//!
//! A WATCH whose keys had to be gathered at one master (mastered in different DCs) answers
//! the null array once, as for a change: the gathering rewrote them. The client's WATCH loop
//! runs again and finds them together.

use crate::cluster_backend::ClusterBackend;
use crate::resp::multi::MultiState;
use crate::resp::txn_view::{ATTEMPTS, Body, TxnView, repl_line};
use bytes::{Bytes, BytesMut};
use meridian_redis::Reply;
use meridian_replication::GroupOutcome;
use meridian_replication::timeline::{Content, Expect, GroupItem, Record, Version};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Duration;

/// The first and the largest pause before re-reading a group whose records were gathered
/// or moved, ms: a moved record's new master may still be applying it.
const MOVED_BACKOFF_MS: (u64, u64) = (1, 32);

/// WATCH: remembers the version each newly watched key of a timeline bucket has at its
/// master. The keys are already in `state.cluster_watched`.
pub(crate) async fn watch(
    c: &ClusterBackend,
    state: &mut MultiState,
) -> Result<(), Cow<'static, str>> {
    let new: Vec<Bytes> = state
        .cluster_watched
        .iter()
        .filter(|k| c.node.is_timeline(k))
        .filter(|k| !state.cluster_watch_versions.iter().any(|(w, _)| w == *k))
        .cloned()
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let read = c
        .dispatch
        .tl_group_read(&new)
        .await
        .map_err(|e| Cow::Owned(repl_line(c, e)))?;
    state
        .cluster_watch_versions
        .extend(new.into_iter().zip(read.iter().map(version_of)));
    Ok(())
}

fn version_of(r: &Option<Record>) -> Option<Version> {
    r.as_ref().map(|r| r.ver)
}

/// EXEC of `body` (the queued commands, or a script) over `keys` (sorted, distinct, every
/// watched key included) as one timeline group: the replies of the run that committed,
/// `None` when a watched key changed, or an error line.
pub(crate) async fn exec(
    c: &ClusterBackend,
    watched: &[(Bytes, Option<Version>)],
    keys: &[Bytes],
    body: &mut Body<'_>,
    resp3: bool,
) -> Result<Option<BytesMut>, String> {
    // Watched keys first: when records must be gathered, the first one's master is kept.
    let mut order: Vec<Bytes> = watched.iter().map(|(k, _)| k.clone()).collect();
    let rest: Vec<Bytes> = keys
        .iter()
        .filter(|k| !watched.iter().any(|(w, _)| w == *k))
        .cloned()
        .collect();
    order.extend(rest);
    let mut backoff_ms = MOVED_BACKOFF_MS.0;
    for _ in 0..ATTEMPTS {
        let read = c
            .dispatch
            .tl_group_read(&order)
            .await
            .map_err(|e| repl_line(c, e))?;
        let changed = watched
            .iter()
            .zip(&read)
            .any(|((_, at_watch), now)| *at_watch != version_of(now));
        if changed {
            return Ok(None);
        }
        let (items, out, commit) = run(c, &order, &read, body, resp3);
        if !commit {
            return Ok(Some(out));
        }
        match c
            .dispatch
            .tl_commit_group(items, &read)
            .await
            .map_err(|e| repl_line(c, e))?
        {
            GroupOutcome::Applied(_) => return Ok(Some(out)),
            _ if !watched.is_empty() => return Ok(None),
            GroupOutcome::Conflict => {}
            GroupOutcome::Moved => {
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                backoff_ms = (backoff_ms * 2).min(MOVED_BACKOFF_MS.1);
            }
        }
    }
    Err("CONFLICT the transaction kept conflicting with other writes of its keys; retry it".into())
}

/// Runs `body` over what `read` holds: the group's items (every key's version as the
/// precondition, the new content of each key written), the replies, and whether to commit.
fn run(
    c: &ClusterBackend,
    keys: &[Bytes],
    read: &[Option<Record>],
    body: &mut Body<'_>,
    resp3: bool,
) -> (Vec<GroupItem>, BytesMut, bool) {
    let found = read
        .iter()
        .map(|r| r.as_ref().and_then(|r| r.content.value().cloned()))
        .collect();
    let mut view = TxnView::over(keys, found, c.node.clock_now());
    let mut out = Reply {
        out: BytesMut::new(),
        resp3,
    };
    let commit = body(&mut view, &mut out);
    (items(keys, read, view.into_writes()), out.out, commit)
}

/// One item per key: its version read (insert-if-absent without a record) and, when the
/// commands wrote it, its new content. Deleting a key that has no live record writes nothing.
fn items(
    keys: &[Bytes],
    read: &[Option<Record>],
    mut writes: BTreeMap<Bytes, Option<meridian_redis::Entry>>,
) -> Vec<GroupItem> {
    keys.iter()
        .zip(read)
        .map(|(key, rec)| {
            let content = match writes.remove(key) {
                Some(Some(e)) => Some(Content::Value(e.encode())),
                Some(None) if rec.as_ref().is_some_and(|r| !r.is_tombstone()) => {
                    Some(Content::Tombstone)
                }
                _ => None,
            };
            GroupItem {
                key: key.to_vec(),
                expect: rec
                    .as_ref()
                    .map_or(Expect::Absent, |r| Expect::Version(r.ver)),
                content,
            }
        })
        .collect()
}
