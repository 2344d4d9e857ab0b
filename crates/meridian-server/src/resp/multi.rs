//! Redis transactions on a connection: the MULTI / queue / EXEC / DISCARD / WATCH state
//! machine, with Redis 7's exact replies, shared by both modes.
//!
//! - `MULTI` → `+OK`; inside MULTI, every command but EXEC, DISCARD, MULTI, WATCH, QUIT and
//!   RESET is queued (`+QUEUED`), its arguments copied; a request refused before it could be
//!   queued (unknown command, wrong arity) is answered with its error and flags the
//!   transaction, so EXEC answers `-EXECABORT Transaction discarded because of previous
//!   errors.` (a refused EXEC itself answers `-EXECABORT Transaction discarded because of:
//!   <reason>` and discards);
//! - `MULTI` inside MULTI, `WATCH` inside MULTI, `EXEC`/`DISCARD` without MULTI are errors that
//!   do not flag the transaction (as in Redis, they are the commands' own errors);
//! - EXEC, DISCARD and RESET end the transaction and forget the watched keys; UNWATCH outside
//!   MULTI forgets them (inside MULTI it is queued, like any command);
//! - running EXEC is the mode's business: the standalone node runs the queue atomically over
//!   the keyspace (`exec`), cluster mode hands it to `cluster_txn`.

use crate::keyspace::WatchSet;
use bytes::Bytes;
use meridian_redis::Reply;
use meridian_redis::error::{CmdError, raw};
use meridian_redis::{Args, OwnedArgs};
use meridian_redis::{Cmd, Group};

/// A queued command.
#[derive(Debug)]
pub(crate) struct Queued {
    /// The command (known, arity checked).
    pub(crate) cmd: Cmd,
    /// Its arguments, the name included.
    pub(crate) args: OwnedArgs,
}

/// A connection's transaction state.
#[derive(Debug, Default)]
pub(crate) struct MultiState {
    /// Inside MULTI.
    pub(crate) active: bool,
    /// A request was refused while queuing: EXEC answers EXECABORT.
    pub(crate) aborted: bool,
    /// The commands queued since MULTI.
    pub(crate) queued: Vec<Queued>,
    /// Standalone: the WATCHed keys, registered in the keyspace.
    pub(crate) watches: Option<WatchSet>,
    /// Cluster mode: the WATCHed keys, for `cluster_txn`.
    pub(crate) cluster_watched: Vec<Bytes>,
    /// Cluster mode: each WATCHed key of a timeline bucket and the version its master held
    /// at WATCH (`None`: no record), for `cluster_group`.
    pub(crate) cluster_watch_versions:
        Vec<(Bytes, Option<meridian_replication::timeline::Version>)>,
    /// Cluster mode: the transaction WATCH started on transactional buckets (its snapshot
    /// is the WATCH's time; EXEC commits it).
    pub(crate) cluster_txn: Option<meridian_replication::Transaction>,
    /// Cluster mode: the interactive transaction MERIDIAN.BEGIN opened (its reads answer at
    /// once from the snapshot, its writes are buffered until MERIDIAN.COMMIT).
    pub(crate) interactive: Option<meridian_replication::Transaction>,
}

/// What the connection does with a request after [`step`].
#[derive(Debug)]
pub(crate) enum Step {
    /// Handled here (replied, or failed with the error to reply).
    Done(Result<(), CmdError>),
    /// EXEC of a transaction that may run: the mode runs `queued` (then calls
    /// [`MultiState::discard`]).
    Exec,
    /// WATCH outside MULTI: the mode registers the keys (arguments 1..).
    Watch,
    /// Not a transaction matter: run the command as usual.
    Run,
}

impl MultiState {
    /// Ends the transaction (if any) and forgets the watched keys: what EXEC, DISCARD and
    /// RESET leave behind.
    pub(crate) fn discard(&mut self) {
        self.active = false;
        self.aborted = false;
        self.queued.clear();
        self.interactive = None;
        self.unwatch();
    }

    /// Forgets the watched keys.
    pub(crate) fn unwatch(&mut self) {
        if let Some(w) = &mut self.watches {
            w.clear();
        }
        self.cluster_watched.clear();
        self.cluster_watch_versions.clear();
        self.cluster_txn = None;
    }

    /// Records a request refused before it could run (`reason` is its error line): inside
    /// MULTI it flags the transaction; a refused EXEC discards it. Returns the error line to
    /// reply.
    pub(crate) fn refused(&mut self, cmd: Option<Cmd>, reason: String) -> String {
        if cmd == Some(Cmd::Exec) {
            self.discard();
            let reason = reason.strip_prefix("ERR ").unwrap_or(&reason);
            return format!("EXECABORT Transaction discarded because of: {reason}");
        }
        if self.active {
            self.aborted = true;
        }
        reason
    }
}

/// Whether `cmd` needs [`step`] outside MULTI (inside, every command does).
#[inline]
pub(crate) fn is_transaction_command(cmd: Cmd) -> bool {
    matches!(
        cmd,
        Cmd::Multi | Cmd::Exec | Cmd::Discard | Cmd::Watch | Cmd::Unwatch
    )
}

/// Advances the state machine for an admitted request (see the module docs).
pub(crate) fn step(state: &mut MultiState, reply: &mut Reply, cmd: Cmd, args: Args<'_>) -> Step {
    if state.active
        && !matches!(
            cmd,
            Cmd::Exec | Cmd::Discard | Cmd::Multi | Cmd::Watch | Cmd::Quit | Cmd::Reset
        )
    {
        state.queued.push(Queued {
            cmd,
            args: OwnedArgs::copy_of(args),
        });
        reply.simple(b"QUEUED");
        return Step::Done(Ok(()));
    }
    match cmd {
        Cmd::Multi if state.active => Step::Done(Err(raw("ERR MULTI calls can not be nested"))),
        Cmd::Multi => {
            state.active = true;
            reply.ok();
            Step::Done(Ok(()))
        }
        Cmd::Exec if !state.active => Step::Done(Err(raw("ERR EXEC without MULTI"))),
        Cmd::Exec if state.aborted => {
            state.discard();
            Step::Done(Err(raw(
                "EXECABORT Transaction discarded because of previous errors.",
            )))
        }
        Cmd::Exec => Step::Exec,
        Cmd::Discard if !state.active => Step::Done(Err(raw("ERR DISCARD without MULTI"))),
        Cmd::Discard => {
            state.discard();
            reply.ok();
            Step::Done(Ok(()))
        }
        Cmd::Watch if state.active => Step::Done(Err(raw("ERR WATCH inside MULTI is not allowed"))),
        Cmd::Watch => Step::Watch,
        Cmd::Unwatch => {
            state.unwatch();
            reply.ok();
            Step::Done(Ok(()))
        }
        _ => Step::Run,
    }
}

/// How the standalone EXEC runs a queued command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// A data command (any type's, `meridian_redis::types`), over the transaction's overlay.
    Data,
    /// KEYS, SCAN, DBSIZE, FLUSHDB, FLUSHALL: over the overlay, with every stripe locked.
    WholeKeyspace,
    /// UNWATCH: the watched keys were checked already; replies `+OK`.
    Unwatch,
    /// A connection or server command, touching no key: run as usual.
    Session,
    /// Never queued (EXEC, MULTI, DISCARD, WATCH, QUIT, RESET run at once).
    Never,
    /// Refused inside a transaction (large-object handles read chunks asynchronously).
    Outside,
    /// A script or function (EVAL, FCALL, ...): EXEC runs it over its overlay with every
    /// stripe locked (`resp::scripting::run_in_exec`).
    Script,
}

/// Whether a transaction or a script runs `cmd` with every stripe locked: a command over the
/// whole keyspace, or a SORT whose patterns name hash fields (any key's hash, which the
/// keyspace holds in memory under that key's stripe).
pub(crate) fn needs_every_stripe(cmd: Cmd, args: Args<'_>) -> bool {
    queue_kind(cmd) == Queue::WholeKeyspace || meridian_redis::sort::reads_hash_fields(cmd, args)
}

/// How a transaction queues `cmd`, by its [`Group`].
pub(crate) fn queue_kind(cmd: Cmd) -> Queue {
    if cmd.runs_script() {
        return Queue::Script;
    }
    match cmd.group() {
        Group::Keyspace => Queue::WholeKeyspace,
        Group::Transaction if cmd == Cmd::Unwatch => Queue::Unwatch,
        Group::Transaction => Queue::Never,
        Group::Connection if matches!(cmd, Cmd::Quit | Cmd::Reset) => Queue::Never,
        Group::Connection | Group::Replication | Group::Interactive => Queue::Session,
        Group::Handles => Queue::Outside,
        // Every data type's commands (the test below checks `Group::is_data`).
        _ => Queue::Data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_of(line: &str) -> OwnedArgs {
        let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let mut base = Vec::new();
        let mut ranges = Vec::new();
        for p in &parts {
            ranges.push((base.len(), base.len() + p.len()));
            base.extend_from_slice(p);
        }
        OwnedArgs::copy_of(Args::from_parts(&base, &ranges))
    }

    /// Feeds `line` to the state machine: the step and the reply bytes.
    fn feed(st: &mut MultiState, line: &str) -> (String, String) {
        let a = args_of(line);
        let cmd = Cmd::lookup(a.get().get(0)).unwrap();
        let mut reply = Reply::new(64);
        let step = match step(st, &mut reply, cmd, a.get()) {
            Step::Done(Ok(())) => "done".to_string(),
            Step::Done(Err(e)) => {
                crate::resp::common::error_reply(&mut reply, e);
                "error".to_string()
            }
            other => format!("{other:?}"),
        };
        (step, String::from_utf8_lossy(&reply.out).into_owned())
    }

    #[test]
    fn queue_state_machine() {
        let mut st = MultiState::default();
        let d = |s: &str| ("done".to_string(), s.to_string());
        let e = |s: &str| ("error".to_string(), format!("-{s}\r\n"));
        assert_eq!(feed(&mut st, "EXEC"), e("ERR EXEC without MULTI"));
        assert_eq!(feed(&mut st, "DISCARD"), e("ERR DISCARD without MULTI"));
        assert_eq!(feed(&mut st, "WATCH k").0, "Watch");
        assert_eq!(feed(&mut st, "UNWATCH"), d("+OK\r\n"));
        assert_eq!(feed(&mut st, "MULTI"), d("+OK\r\n"));
        assert_eq!(
            feed(&mut st, "MULTI"),
            e("ERR MULTI calls can not be nested")
        );
        assert_eq!(
            feed(&mut st, "WATCH k"),
            e("ERR WATCH inside MULTI is not allowed")
        );
        assert_eq!(feed(&mut st, "SET a 1"), d("+QUEUED\r\n"));
        assert_eq!(feed(&mut st, "UNWATCH"), d("+QUEUED\r\n"));
        assert_eq!(feed(&mut st, "PING"), d("+QUEUED\r\n"));
        assert_eq!(feed(&mut st, "QUIT").0, "Run", "QUIT runs at once");
        assert_eq!(st.queued.len(), 3);
        assert!(!st.aborted, "the commands' own errors do not flag");
        assert_eq!(feed(&mut st, "EXEC").0, "Exec");
        st.discard();
        assert!(!st.active && st.queued.is_empty());
        assert_eq!(feed(&mut st, "MULTI"), d("+OK\r\n"));
        assert_eq!(feed(&mut st, "DISCARD"), d("+OK\r\n"));
        assert!(!st.active);
    }

    #[test]
    fn refusals_flag_and_exec_aborts() {
        let mut st = MultiState::default();
        assert_eq!(
            st.refused(None, "ERR unknown command 'x'".into()),
            "ERR unknown command 'x'"
        );
        assert!(!st.aborted, "outside MULTI nothing is flagged");
        feed(&mut st, "MULTI");
        feed(&mut st, "SET a 1");
        st.refused(Some(Cmd::Get), "ERR wrong number of arguments".into());
        assert!(st.aborted);
        assert_eq!(
            feed(&mut st, "EXEC"),
            (
                "error".to_string(),
                "-EXECABORT Transaction discarded because of previous errors.\r\n".to_string()
            )
        );
        assert!(!st.active && st.queued.is_empty() && !st.aborted);
        feed(&mut st, "MULTI");
        assert_eq!(
            st.refused(
                Some(Cmd::Exec),
                "ERR wrong number of arguments for 'exec' command".into()
            ),
            "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' \
             command"
        );
        assert!(!st.active, "a refused EXEC discards");
    }

    #[test]
    fn every_command_has_a_queue_kind() {
        for &c in Cmd::ALL {
            let k = queue_kind(c);
            assert_eq!(
                k == Queue::Data,
                meridian_redis::types::is_data_command(c),
                "{c:?}"
            );
            assert_eq!(
                k == Queue::Never,
                matches!(
                    c,
                    Cmd::Multi | Cmd::Exec | Cmd::Discard | Cmd::Watch | Cmd::Quit | Cmd::Reset
                ),
                "{c:?}"
            );
        }
    }
}
