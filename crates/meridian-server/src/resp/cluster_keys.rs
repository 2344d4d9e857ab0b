//! Keyspace iteration in cluster mode: `SCAN`, `KEYS` and `DBSIZE` answer for the slots
//! this node serves, as a Redis Cluster node answers for its own.
//!
//! **Which keys a node lists.** The cluster commands report, for every slot range, one
//! "master" per DC: the range's first live replica in the asking client's DC, or a live
//! replica standing in for it ([`crate::resp::cluster_cmd`]). A node lists the keys of exactly
//! the ranges it is that master of, in its own DC's view, by its own failure detector. A
//! cluster-aware client (redis-py's `scan_iter`, `keys`, `dbsize`) asks every master of its
//! view and merges, so it sees each key once: the ranges of one DC's view are a partition of
//! the slots.
//!
//! **What a node lists** ([`meridian_replication::listing`]) is what its replica holds and
//! shows live — eventual and timeline keys, with their Redis types; a write not yet replicated
//! to this node is listed once it arrives — then the transactional keys of the partitions it
//! serves, asked of each partition leader in turn (their versions live only there). A leader
//! that does not answer fails that call with its error (a retry with the same cursor restarts
//! the iteration, as an unknown cursor does).
//!
//! **SCAN's guarantee** is Redis's: a full iteration returns every key present on this node
//! from its start to its end, exactly once, whatever is written meanwhile. A cursor names a
//! position in the replica's stores (a key, never a slot), kept in a bounded server-side
//! table like the single node's; an unknown cursor restarts the iteration. One call examines
//! at most [`EXAMINE_FACTOR`] × COUNT stored keys (COUNT capped at 100,000, as on a single
//! node), so it may answer fewer than COUNT keys, or none, with a cursor that is not 0, and
//! never more than COUNT.
//!
//! `DBSIZE` and `KEYS` walk the whole listing: O(keys held), where Redis's DBSIZE is O(1).
//!
//! All three list the connection's selected database only ([`crate::resp::cluster_db`]), by
//! the names its clients gave the keys.

use crate::cluster_backend::ClusterBackend;
use crate::metrics::Metrics;
use crate::resp::cluster_cmd::served_partitions;
use crate::resp::cluster_db::{Db, KeysOf};
use crate::wire_error;
use bytes::Bytes;
use meridian_cluster::{SLOTS, slot_of};
use meridian_redis::Args;
use meridian_redis::Cmd;
use meridian_redis::CmdError;
use meridian_redis::Reply;
use meridian_redis::scan::{MAX_SCAN_COUNT, parse_scan, scan_reply};
use meridian_redis::value::glob_match;
use meridian_replication::listing::ListPos;
use std::borrow::Cow;

/// One SCAN call examines at most this many stored keys per key of COUNT.
const EXAMINE_FACTOR: usize = 10;
/// Stored keys examined per page by KEYS and DBSIZE.
const PAGE: usize = 1024;

/// The keys MATCH's `pattern` keeps (all without one).
fn matching(pattern: Option<&[u8]>) -> impl Fn(&[u8]) -> bool + '_ {
    move |key: &[u8]| pattern.is_none_or(|pat| glob_match(pat, key, false))
}

type Outcome = Result<(), Cow<'static, str>>;

fn error(
    c: &ClusterBackend,
    m: &Metrics,
    e: meridian_replication::ReplicationError,
) -> Cow<'static, str> {
    wire_error::resp(c, m, &e)
}

/// Runs SCAN, KEYS or DBSIZE (the only commands [`handles`] accepts).
pub(crate) async fn run(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    cmd: Cmd,
    args: Args<'_>,
    db: Db,
) -> Outcome {
    match cmd {
        Cmd::Scan => scan(c, m, reply, args, db).await,
        Cmd::Keys => {
            let pattern = Some(args.get(1)).filter(|p| !p.iter().all(|&b| b == b'*'));
            let mut keys = Vec::new();
            walk(c, pattern, db, |k| keys.push(k))
                .await
                .map_err(|e| error(c, m, e))?;
            reply.array(keys.len());
            for k in &keys {
                reply.bulk(k);
            }
            Ok(())
        }
        // A reservoir of one over this node's keys: uniform, O(n) (a cluster node has no
        // index of its keys to draw from).
        Cmd::Randomkey => {
            use rand::{Rng, SeedableRng};
            // An owned generator: the walk awaits, and the thread's own is not `Send`.
            let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
            let (mut seen, mut pick) = (0u64, None);
            walk(c, None, db, |k| {
                seen += 1;
                if rng.random_range(0..seen) == 0 {
                    pick = Some(k);
                }
            })
            .await
            .map_err(|e| error(c, m, e))?;
            reply.opt_bulk(pick.as_deref());
            Ok(())
        }
        Cmd::Dbsize => {
            let mut n = 0i64;
            walk(c, None, db, |_| n += 1)
                .await
                .map_err(|e| error(c, m, e))?;
            reply.int(n);
            Ok(())
        }
        _ => Err(Cow::Owned(format!(
            "ERR unknown command '{}'",
            cmd.spec().name
        ))),
    }
}

/// Which commands [`run`] serves.
pub(crate) fn handles(cmd: Cmd) -> bool {
    matches!(cmd, Cmd::Scan | Cmd::Keys | Cmd::Dbsize | Cmd::Randomkey)
}

/// Visits every key of database `db` this node lists that `pattern` matches, by the name
/// the database's clients gave it.
async fn walk(
    c: &ClusterBackend,
    pattern: Option<&[u8]>,
    db: Db,
    mut visit: impl FnMut(Bytes),
) -> Result<(), meridian_replication::ReplicationError> {
    let keys = db.keys();
    let select = in_database(&keys, pattern);
    walk_selected(c, &served_partitions(c), select, |k| {
        visit(keys.client_bytes(k).unwrap_or_default());
        true
    })
    .await
}

/// The stored keys of a database whose client names `pattern` matches.
fn in_database<'a>(keys: &'a KeysOf, pattern: Option<&'a [u8]>) -> impl Fn(&[u8]) -> bool + 'a {
    let matches = matching(pattern);
    move |stored: &[u8]| keys.client_key(stored).is_some_and(&matches)
}

/// Visits the keys this node lists of the home partitions `served` marks that `select` keeps,
/// until `visit` answers `false`.
async fn walk_selected(
    c: &ClusterBackend,
    served: &[bool],
    select: impl Fn(&[u8]) -> bool,
    mut visit: impl FnMut(Bytes) -> bool,
) -> Result<(), meridian_replication::ReplicationError> {
    let mut pos = Some(ListPos::start());
    while let Some(from) = pos {
        let (keys, next) = c.node.list_live_keys(from, PAGE, served, &select).await?;
        for (key, _) in keys {
            if !visit(key) {
                return Ok(());
            }
        }
        pos = next;
    }
    Ok(())
}

/// Whether `args` is `CLUSTER COUNTKEYSINSLOT` or `CLUSTER GETKEYSINSLOT`, served by
/// [`keys_in_slot`].
pub(crate) fn is_slot_listing(cmd: Cmd, args: Args<'_>) -> bool {
    cmd == Cmd::Cluster
        && args.len() > 1
        && (args.get(1).eq_ignore_ascii_case(b"COUNTKEYSINSLOT")
            || args.get(1).eq_ignore_ascii_case(b"GETKEYSINSLOT"))
}

/// `CLUSTER COUNTKEYSINSLOT slot` and `CLUSTER GETKEYSINSLOT slot count`, as a Redis Cluster
/// node answers them: over the keys this node lists (see the module docs), so a node that is
/// not the master of the slot's range in its DC's view counts 0 and returns none. Both walk
/// the node's listing: O(keys held), where Redis keeps a per-slot index.
pub(crate) async fn keys_in_slot(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
) -> Outcome {
    let sub = args.get(1);
    let count_only = sub.eq_ignore_ascii_case(b"COUNTKEYSINSLOT");
    crate::resp::cluster_cmd::arity(sub, args.len() == if count_only { 3 } else { 4 })
        .map_err(Cow::Owned)?;
    let int = |a: &[u8]| {
        std::str::from_utf8(a)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or(Cow::Borrowed("ERR value is not an integer or out of range"))
    };
    let slot = int(args.get(2))?;
    let max = if count_only {
        i64::MAX
    } else {
        int(args.get(3))?
    };
    let slot = match u16::try_from(slot).ok().filter(|&s| s < SLOTS) {
        Some(s) if max >= 0 => s,
        _ if count_only => return Err(Cow::Borrowed("ERR Invalid slot")),
        _ => return Err(Cow::Borrowed("ERR Invalid slot or number of keys")),
    };
    // Only the slot's partition, and only if this node answers for it.
    let p = c.node.meta().layout.ring().partition_of_slot(slot).0 as usize;
    let mut served = served_partitions(c);
    let mine = served.get(p).copied().unwrap_or(false);
    served
        .iter_mut()
        .enumerate()
        .for_each(|(i, s)| *s &= i == p);
    let mut keys = Vec::new();
    let mut n = 0i64;
    if mine && max > 0 {
        // Database 0's keys: a numbered database's are stored, and so hashed, under its
        // bucket's name (`cluster_db`).
        let db0 = Db::default().keys();
        let in_slot = |k: &[u8]| slot_of(k) == slot && db0.client_key(k).is_some();
        walk_selected(c, &served, in_slot, |k| {
            n += 1;
            if !count_only {
                keys.push(k);
            }
            n < max
        })
        .await
        .map_err(|e| error(c, m, e))?;
    }
    if count_only {
        reply.int(n);
    } else {
        reply.array(keys.len());
        for k in &keys {
            reply.bulk(k);
        }
    }
    Ok(())
}

async fn scan(
    c: &ClusterBackend,
    m: &Metrics,
    reply: &mut Reply,
    args: Args<'_>,
    db: Db,
) -> Outcome {
    let q = parse_scan(args).map_err(CmdError::into_line)?;
    let mut pos = if q.cursor == 0 {
        Some(ListPos::start())
    } else {
        // An unknown cursor restarts the iteration (see the module docs).
        Some(
            c.scan_cursors
                .lock()
                .take(q.cursor)
                .and_then(|raw| ListPos::decode(&raw))
                .unwrap_or_else(ListPos::start),
        )
    };
    let served = served_partitions(c);
    let in_db = db.keys();
    let select = in_database(&in_db, q.pattern);
    // As on a single node: one call never does more than a bounded amount of work.
    let count = q.count.min(MAX_SCAN_COUNT);
    let budget = count * EXAMINE_FACTOR;
    let mut examined = 0usize;
    let mut keys = Vec::new();
    while let Some(from) = pos.take() {
        // Never more keys than COUNT: a page examines at most the keys still wanted.
        let page = (count - keys.len()).min(budget - examined).max(1);
        let (found, next) = c
            .node
            .list_live_keys(from, page, &served, &select)
            .await
            .map_err(|e| error(c, m, e))?;
        examined += page;
        keys.extend(
            found
                .into_iter()
                .filter(|(_, k)| q.kind.flatten().is_none_or(|want| *k == want))
                .filter_map(|(key, _)| in_db.client_bytes(key)),
        );
        pos = next;
        if keys.len() >= count || examined >= budget {
            break;
        }
    }
    let next = match pos {
        Some(p) => c.scan_cursors.lock().insert(p.encode()),
        None => 0,
    };
    scan_reply(reply, next, &keys, q.kind != Some(None));
    Ok(())
}
