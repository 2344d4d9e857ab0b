//! MULTI/EXEC, WATCH and every single-key string command on transactional buckets in cluster
//! mode: each is one snapshot-isolation transaction (Clock-SI or the oracle, as the bucket
//! says) over the replication layer's [`meridian_replication::Transaction`].
//!
//! How an EXEC runs: every key of every queued command (and every watched key) is read at the
//! transaction's snapshot in one round of parallel reads; the commands then run in order with
//! [`meridian_redis::strings::exec_on_view`] over a [`TxnView`] that answers from those reads and
//! buffers writes; the buffered writes commit atomically, across partitions and DCs.
//!
//! Guarantees:
//! - **nothing half-applies**: an EXEC touching a key outside transactional buckets answers
//!   `-EXECABORT`, naming the bucket and its type, and applies nothing;
//! - **WATCH is Redis's optimistic lock**: WATCH fixes the transaction's snapshot and holds
//!   the watched keys at commit against writers; if any watched (or written) key was committed
//!   by someone else after the snapshot, EXEC answers the null array and applies nothing;
//! - **without WATCH, an EXEC always takes effect** as on Redis: a conflict re-runs the
//!   queued commands at a fresh snapshot (they are a pure function of what they read), up to
//!   [`ATTEMPTS`] times;
//! - **single-key commands** (INCR, SET NX/XX/GET/EX, APPEND, EXPIRE, ...) are the same
//!   machinery with one command and no array;
//! - **keys moving between partitions** (spec `repartitioning.md` §6) do not surface as
//!   conflicts: a run refused because a key is moving (`KeyMoving`, `WrongPartition`) is
//!   re-run after a backoff ([`MOVE_BACKOFF_MS`], doubling) — a move takes milliseconds, a
//!   conflict retry at once would spend every attempt inside it — and if the key is still
//!   moving after [`ATTEMPTS`] runs the client gets `-TRYAGAIN` (nothing applied), which
//!   cluster clients retry. With WATCH the snapshot cannot be taken again: EXEC answers the
//!   null array, as for a conflict, and the client's optimistic loop runs again;
//! - **read-your-commits per connection**: the connection's last commit timestamp is the
//!   session token of its next transaction.
//!
//! Keys of any hash slots may be mixed (Redis Cluster refuses `CROSSSLOT`; Meridian commits
//! them atomically).

use crate::cluster_backend::ClusterBackend;
use crate::resp::multi::MultiState;
use crate::resp::txn_view::{ATTEMPTS, Body, TxnView, commands, repl_line};
use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_redis::Args;
use meridian_redis::Cmd;
use meridian_redis::Reply;
use meridian_redis::error::{CmdError, raw};
use meridian_replication::{AtomicGroup, Transaction, TxnOptions};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

/// The first and the largest backoff before re-running a transaction refused because a key
/// was moving, ms: from 1 ms doubling to 64 ms, [`ATTEMPTS`] runs span about 1.7 s — far
/// longer than a move's freeze, far shorter than a client's timeout.
pub(crate) const MOVE_BACKOFF_MS: (u64, u64) = (1, 64);

/// How one run of a transaction ended.
enum Run {
    /// Committed at this timestamp.
    Committed(Timestamp),
    /// Refused with a retryable error (nothing applied): a conflict, or a key moving.
    Retry(meridian_replication::TxnError),
}

/// Whether a retryable refusal came from a key move rather than from a conflict.
fn is_move(e: &meridian_replication::TxnError) -> bool {
    matches!(
        e,
        meridian_replication::TxnError::Aborted(meridian_replication::TxnAbort::KeyMoving(_))
            | meridian_replication::TxnError::WrongPartition { .. }
    )
}

/// The connection's session token (0: none yet).
fn token(session: &AtomicU64) -> Option<Timestamp> {
    Some(session.load(Ordering::Relaxed))
        .filter(|&t| t > 0)
        .map(Timestamp)
}

/// WATCH `keys` (outside MULTI). On transactional buckets it starts the connection's
/// transaction (fixing its snapshot) and holds the keys; a key of another bucket type is
/// refused at EXEC (Redis's WATCH itself never fails).
pub(crate) async fn watch(
    c: &ClusterBackend,
    state: &mut MultiState,
    session: &AtomicU64,
    keys: Vec<Bytes>,
) -> Result<(), Cow<'static, str>> {
    for k in keys {
        if !state.cluster_watched.contains(&k) {
            state.cluster_watched.push(k);
        }
    }
    crate::resp::cluster_group::watch(c, state).await?;
    let txn_keys: Vec<Bytes> = state
        .cluster_watched
        .iter()
        .filter(|k| c.node.is_transactional(k))
        .cloned()
        .collect();
    if txn_keys.is_empty() {
        return Ok(());
    }
    let session = token(session);
    let t = state.cluster_txn.get_or_insert_with(|| {
        c.node.begin(TxnOptions {
            read_only: false,
            session,
        })
    });
    t.watch(&txn_keys)
        .await
        .map_err(|e| Cow::Owned(repl_line(c, e.into())))
}

/// The keys of a command.
fn keys_of(cmd: Cmd, args: Args<'_>) -> impl Iterator<Item = Bytes> + '_ {
    cmd.spec()
        .key_positions(&args)
        .map(move |i| Bytes::copy_from_slice(args.get(i)))
}

/// Runs `cmds` as one transaction into `out` (each command's reply in order), committing
/// the writes. `Run::Retry`: a refusal the caller reports (WATCH) or retries.
async fn run_once(
    c: &ClusterBackend,
    mut t: Transaction,
    keys: &[Bytes],
    body: &mut Body<'_>,
    out: &mut Reply,
) -> Result<Run, String> {
    let found = t.read(keys).await;
    let found = match found {
        Ok(f) => f,
        Err(e) if e.is_retryable() => return Ok(Run::Retry(e)),
        Err(e) => return Err(repl_line(c, e.into())),
    };
    let mut view = TxnView::over(keys, found, c.node.clock_now());
    if !body(&mut view, out) {
        // Nothing is written: the transaction ends unapplied (dropped, it aborts).
        return Ok(Run::Committed(Timestamp(0)));
    }
    view.write_back(&mut t)
        .map_err(|e| repl_line(c, e.into()))?;
    match t.commit().await {
        Ok(ts) => Ok(Run::Committed(ts)),
        Err(e) if e.is_retryable() => Ok(Run::Retry(e)),
        Err(e) => Err(repl_line(c, e.into())),
    }
}

/// How every key can be written in one atomic group (the dispatch facade decides); the
/// EXECABORT line otherwise.
fn check_keys(c: &ClusterBackend, keys: &[Bytes]) -> Result<AtomicGroup, String> {
    c.dispatch
        .atomic_group(keys)
        .map_err(|why| format!("EXECABORT Transaction discarded: {why}, nothing was applied"))
}

/// [`check_keys`] for one transaction's keys (transactional buckets only).
fn check_txn_keys(c: &ClusterBackend, keys: &[Bytes]) -> Result<(), String> {
    match check_keys(c, keys)? {
        AtomicGroup::Transaction => Ok(()),
        AtomicGroup::Timeline => Err(
            "EXECABORT Transaction discarded: a transaction here needs transactional buckets, \
             nothing was applied"
                .into(),
        ),
    }
}

/// EXEC: the array of the commands' replies, the null array when a watched key changed, or
/// an error line; nothing applies unless everything commits.
pub(crate) async fn exec(
    c: &ClusterBackend,
    state: &mut MultiState,
    session: &AtomicU64,
    reply: &mut Reply,
) {
    let queued = std::mem::take(&mut state.queued);
    // Only data commands run against the snapshot; a connection or server command queued
    // here (PING, INFO, ...) has nothing to run on: refuse before anything applies.
    if let Some(q) = queued
        .iter()
        .find(|q| !meridian_redis::types::is_data_command(q.cmd))
    {
        state.cluster_txn = None;
        reply.error(&format!(
            "EXECABORT Transaction discarded: {} cannot run inside MULTI on a cluster node \
             (transactions there run data commands over the keys they read)",
            q.cmd.spec().name.to_ascii_uppercase()
        ));
        return;
    }
    let cmds: Vec<(Cmd, Args<'_>)> = queued.iter().map(|q| (q.cmd, q.args.get())).collect();
    let mut keys: Vec<Bytes> = cmds.iter().flat_map(|(cmd, a)| keys_of(*cmd, *a)).collect();
    keys.extend(state.cluster_watched.iter().cloned());
    keys.sort();
    keys.dedup();
    let group = match check_keys(c, &keys) {
        Ok(g) => g,
        Err(line) => {
            state.cluster_txn = None;
            reply.error(&line);
            return;
        }
    };
    let result = match group {
        AtomicGroup::Timeline => {
            crate::resp::cluster_group::exec(
                c,
                &state.cluster_watch_versions,
                &keys,
                &mut commands(&cmds),
                reply.resp3,
            )
            .await
        }
        AtomicGroup::Transaction => {
            run_to_commit(
                c,
                state.cluster_txn.take(),
                session,
                &keys,
                &mut commands(&cmds),
                reply.resp3,
            )
            .await
        }
    };
    match result {
        Ok(Some(out)) => {
            reply.array(cmds.len());
            reply.out.extend_from_slice(&out);
        }
        Ok(None) => reply.null_array(),
        Err(line) => reply.error(&line),
    }
}

/// Runs `cmds` until they commit: the replies of the run that committed, or `None` when the
/// transaction WATCH started (`watched`) conflicted — a watched or written key changed after
/// its snapshot (or a key was moving: that snapshot cannot be read again either). Without
/// WATCH a refusal re-runs everything at a fresh snapshot (at most [`ATTEMPTS`] runs; after
/// a backoff when a key was moving); the commit timestamp becomes the connection's session
/// token.
pub(crate) async fn run_to_commit(
    c: &ClusterBackend,
    watched: Option<Transaction>,
    session: &AtomicU64,
    keys: &[Bytes],
    body: &mut Body<'_>,
    resp3: bool,
) -> Result<Option<bytes::BytesMut>, String> {
    let has_watch = watched.is_some();
    let mut next = watched;
    let mut backoff_ms = MOVE_BACKOFF_MS.0;
    let mut last_move = None;
    for attempt in 0..ATTEMPTS {
        let t = next.take().unwrap_or_else(|| {
            c.node.begin(TxnOptions {
                read_only: false,
                session: token(session),
            })
        });
        let mut out = Reply {
            out: bytes::BytesMut::new(),
            resp3,
        };
        match run_once(c, t, keys, body, &mut out).await? {
            Run::Committed(ts) => {
                session.fetch_max(ts.0, Ordering::Relaxed);
                return Ok(Some(out.out));
            }
            Run::Retry(_) if has_watch => return Ok(None),
            Run::Retry(e) if is_move(&e) => {
                last_move = Some(e);
                if attempt + 1 < ATTEMPTS {
                    tokio::time::sleep(std::time::Duration::from_millis(backoff_ms)).await;
                    backoff_ms = (backoff_ms * 2).min(MOVE_BACKOFF_MS.1);
                }
            }
            Run::Retry(_) => last_move = None,
        }
    }
    // Still moving after every attempt: `-TRYAGAIN` (wire_error), which cluster clients retry.
    if let Some(e) = last_move {
        return Err(repl_line(c, e.into()));
    }
    Err("CONFLICT txn_aborted the transaction kept conflicting; retry it".into())
}

/// A single-key (or multi-key) string command on transactional buckets outside MULTI: one
/// transaction, retried on conflicts, its reply written as the command's own.
pub(crate) async fn single(
    c: &ClusterBackend,
    session: &AtomicU64,
    cmd: Cmd,
    args: Args<'_>,
    reply: &mut Reply,
) {
    let mut keys: Vec<Bytes> = keys_of(cmd, args).collect();
    keys.sort();
    keys.dedup();
    if let Err(line) = check_txn_keys(c, &keys) {
        // Not reached for commands the caller routes here by their first key's type, except
        // for a multi-key command mixing bucket types.
        reply.error(&line.replace("EXECABORT Transaction discarded: ", "ERR "));
        return;
    }
    let one = [(cmd, args)];
    match run_to_commit(c, None, session, &keys, &mut commands(&one), reply.resp3).await {
        Ok(Some(out)) => reply.out.extend_from_slice(&out),
        Ok(None) => reply.error("CONFLICT txn_aborted the command conflicted; retry it"),
        Err(line) => reply.error(&line),
    }
}

/// A data command over several keys outside MULTI (SMOVE, LMOVE, SINTERSTORE, ZUNIONSTORE,
/// ...): one atomic group of its keys, as EXEC of that one command would run — a timeline
/// group at the master the keys share, or one transaction on transactional buckets; keys
/// that cannot be written together (an eventual bucket, different slots) get the facade's
/// reason and nothing runs.
pub(crate) async fn multi_key(
    c: &ClusterBackend,
    session: &AtomicU64,
    cmd: Cmd,
    args: Args<'_>,
    reply: &mut Reply,
) {
    let mut keys: Vec<Bytes> = keys_of(cmd, args).collect();
    keys.sort();
    keys.dedup();
    let cmds = [(cmd, args)];
    let result = match check_keys(c, &keys) {
        Ok(AtomicGroup::Timeline) => {
            crate::resp::cluster_group::exec(c, &[], &keys, &mut commands(&cmds), reply.resp3).await
        }
        Ok(AtomicGroup::Transaction) => {
            run_to_commit(c, None, session, &keys, &mut commands(&cmds), reply.resp3).await
        }
        Err(line) => Err(line.replace(
            "EXECABORT Transaction discarded: ",
            &format!(
                "ERR {} over several keys: ",
                cmd.spec().name.to_ascii_uppercase()
            ),
        )),
    };
    match result {
        Ok(Some(out)) => reply.out.extend_from_slice(&out),
        Ok(None) => reply.error("CONFLICT txn_aborted the command conflicted; retry it"),
        Err(line) => reply.error(&line),
    }
}

/// Whether the interactive-transaction path serves `cmd`: its three commands, and every
/// string command while one is open.
pub(crate) fn is_interactive(state: &MultiState, cmd: Cmd) -> bool {
    matches!(
        cmd,
        Cmd::MeridianBegin | Cmd::MeridianCommit | Cmd::MeridianAbort
    ) || (state.interactive.is_some()
        && (meridian_redis::types::is_data_command(cmd) || is_multi_command(cmd)))
}

fn is_multi_command(cmd: Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Multi | Cmd::Exec | Cmd::Discard | Cmd::Watch | Cmd::Unwatch
    )
}

/// Interactive transactions: `MERIDIAN.BEGIN [READONLY]` opens one at a fresh snapshot;
/// string commands then answer at once from the snapshot (and the transaction's own writes),
/// their writes buffered; `MERIDIAN.COMMIT` answers the commit timestamp, or
/// `-CONFLICT txn_aborted ww_conflict key=<key>` (nothing applied); `MERIDIAN.ABORT` drops
/// it. A read that aborts (a leader blocked on a prepared transaction, a snapshot too old)
/// ends the transaction, and says so.
pub(crate) async fn interactive(
    c: &ClusterBackend,
    state: &mut MultiState,
    session: &AtomicU64,
    cmd: Cmd,
    args: Args<'_>,
    reply: &mut Reply,
) -> Result<(), CmdError> {
    let name = || cmd.spec().name.to_ascii_uppercase();
    match cmd {
        Cmd::MeridianBegin => {
            if state.active {
                return Err(raw("ERR MERIDIAN.BEGIN inside MULTI is not allowed"));
            }
            if state.interactive.is_some() {
                return Err(raw(
                    "ERR MERIDIAN.BEGIN inside a transaction: MERIDIAN.COMMIT or MERIDIAN.ABORT it first",
                ));
            }
            let read_only = match args.len() {
                1 => false,
                2 if args.get(1).eq_ignore_ascii_case(b"READONLY") => true,
                _ => return Err(raw("ERR syntax error")),
            };
            state.interactive = Some(c.node.begin(TxnOptions {
                read_only,
                session: token(session),
            }));
            reply.ok();
            Ok(())
        }
        Cmd::MeridianCommit | Cmd::MeridianAbort => {
            if state.active {
                return Err(raw(format!("ERR {} inside MULTI is not allowed", name())));
            }
            let Some(t) = state.interactive.take() else {
                return Err(raw(format!("ERR {} without MERIDIAN.BEGIN", name())));
            };
            if cmd == Cmd::MeridianAbort {
                reply.ok();
                return Ok(());
            }
            match t.commit().await {
                Ok(ts) => {
                    session.fetch_max(ts.0, Ordering::Relaxed);
                    reply.int(i64::try_from(ts.0).unwrap_or(i64::MAX));
                    Ok(())
                }
                Err(e) => Err(raw(repl_line(c, e.into()))),
            }
        }
        _ if is_multi_command(cmd) => Err(raw(format!(
            "ERR {} inside MERIDIAN.BEGIN is not allowed (MERIDIAN.COMMIT or MERIDIAN.ABORT first)",
            name()
        ))),
        _ => {
            let Some(t) = state.interactive.as_mut() else {
                return Err(raw("ERR no transaction is open"));
            };
            let mut keys: Vec<Bytes> = keys_of(cmd, args).collect();
            keys.sort();
            keys.dedup();
            if let Err(line) = check_txn_keys(c, &keys) {
                let line = line.replace("EXECABORT Transaction discarded: ", "ERR ");
                return Err(raw(
                    line.replace(", nothing was applied", "; the transaction stays open")
                ));
            }
            let found = match t.read(&keys).await {
                Ok(f) => f,
                Err(e) => {
                    state.interactive = None;
                    return Err(raw(format!(
                        "{} (the transaction is over; MERIDIAN.BEGIN again)",
                        repl_line(c, e.into())
                    )));
                }
            };
            let mut view = TxnView::over(&keys, found, c.node.clock_now());
            let mut out = Reply {
                out: bytes::BytesMut::new(),
                resp3: reply.resp3,
            };
            meridian_redis::types::exec_on_view(cmd, args, &mut view, &mut out)?;
            view.write_back(t)
                .map_err(|e| raw(repl_line(c, e.into())))?;
            reply.out.extend_from_slice(&out.out);
            Ok(())
        }
    }
}
