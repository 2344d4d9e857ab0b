//! What both cluster transaction paths share — MULTI/EXEC on transactional buckets
//! (`cluster_txn`) and timeline groups (`cluster_group`): the view the queued commands run
//! over, how many runs a transaction without WATCH gets, and a replication error as a line.
//!
//! [`TxnView`] answers each key from what was read for it (an expired value reads as
//! absent) and buffers writes; a command reaching for a key that was not read is a bug in the
//! key positions, reported as `Corrupt`, never silently read as absent.

use crate::cluster_backend::ClusterBackend;
use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_redis::RedisError;
use meridian_redis::{Entry, EntryRef, View};
use meridian_replication::{ReplicationError, Transaction};
use std::collections::BTreeMap;

/// What one run of a transaction or timeline group does over its view: the queued commands
/// (`commands`), or a script. It writes its replies, and answers whether its writes may be
/// committed (a script halted at shutdown may not). It may run several times (a conflict
/// re-runs it over fresh reads), so it must depend on nothing but what it reads.
pub(crate) type Body<'b> = dyn FnMut(&mut TxnView, &mut meridian_redis::Reply) -> bool + Send + 'b;

/// The body that runs `cmds` in order, each error its own reply.
pub(crate) fn commands<'a>(
    cmds: &'a [(meridian_redis::Cmd, meridian_redis::Args<'a>)],
) -> impl FnMut(&mut TxnView, &mut meridian_redis::Reply) -> bool + Send + 'a {
    move |view, out| {
        for (cmd, args) in cmds {
            if let Err(e) = meridian_redis::types::exec_on_view(*cmd, *args, view, out) {
                crate::resp::common::error_reply(out, e);
            }
        }
        true
    }
}

/// How many times a transaction without WATCH runs before its conflict is reported.
pub(crate) const ATTEMPTS: u32 = 32;

/// A transaction's view for the commands: what was read, then its own writes.
pub(crate) struct TxnView {
    now: Timestamp,
    read: BTreeMap<Bytes, Option<Entry>>,
    writes: BTreeMap<Bytes, Option<Entry>>,
}

impl TxnView {
    /// The view over what `keys` read at the snapshot (stored envelopes, expired = absent).
    pub(crate) fn over(keys: &[Bytes], found: Vec<Option<Bytes>>, now: Timestamp) -> TxnView {
        let read = keys
            .iter()
            .cloned()
            .zip(found.into_iter().map(|raw| Entry::live(raw, now)))
            .collect();
        TxnView {
            now,
            read,
            writes: BTreeMap::new(),
        }
    }

    /// The view's writes: each key's new entry (`None`: deleted).
    pub(crate) fn into_writes(self) -> BTreeMap<Bytes, Option<Entry>> {
        self.writes
    }

    /// Buffers the view's writes in the transaction, as stored envelopes.
    pub(crate) fn write_back(
        self,
        t: &mut Transaction,
    ) -> Result<(), meridian_replication::TxnError> {
        for (k, v) in self.writes {
            let v = v.map(|e| e.encode());
            t.write(k, v)?;
        }
        Ok(())
    }
}

impl View for TxnView {
    fn now(&self) -> Timestamp {
        self.now
    }

    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>, RedisError> {
        if let Some(w) = self.writes.get(key) {
            return Ok(w.clone());
        }
        match self.read.get(key) {
            Some(v) => Ok(v.clone()),
            // Every key of the commands was read first; a command reaching for another is a
            // bug in the key positions, not the client's fault.
            None => Err(RedisError::Corrupt("a key outside the transaction's reads")),
        }
    }

    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<(), RedisError> {
        let v = value.map(EntryRef::to_entry);
        self.writes.insert(Bytes::copy_from_slice(key), v);
        Ok(())
    }
}

/// A replication error as the RESP line the edge writes for it.
pub(crate) fn repl_line(c: &ClusterBackend, e: ReplicationError) -> String {
    crate::wire_error::resp_line(&e, |dc| c.dc_name(dc))
}
