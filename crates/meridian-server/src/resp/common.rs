//! What the standalone executor (`exec`) and the cluster-mode executors (`cluster_exec`,
//! `cluster_strings`, `cluster_txn`) share: how a command error becomes a reply
//! ([`error_reply`]) and FLUSHDB/FLUSHALL's argument check ([`flush_args_ok`]).
//!
//! A leaf of the RESP front end: it imports none of the executors, so the cluster executors
//! depend on it instead of on `exec` (which dispatches to them and re-exports both).

use meridian_redis::error::CmdError;
use meridian_redis::{Args, Reply};

pub(crate) fn error_reply(reply: &mut Reply, e: CmdError) {
    reply.command_error(e);
}

/// Whether FLUSHDB/FLUSHALL's arguments are none, `ASYNC` or `SYNC` (cluster mode checks the
/// same).
pub(crate) fn flush_args_ok(args: Args<'_>) -> bool {
    match args.len() {
        1 => true,
        2 => {
            args.get(1).eq_ignore_ascii_case(b"ASYNC") || args.get(1).eq_ignore_ascii_case(b"SYNC")
        }
        _ => false,
    }
}
