//! The input of the timeline checkers: record versions and their reigns, the issue and apply
//! logs' entries, and the client history of timeline operations with its pairing of
//! invocations and completions. Parsing only; nothing here judges a run.

use super::show_ver;
use crate::error::Error;
use crate::history::{ClientId, EventLog, LogEvent, Micros, OpId, Step, pair_steps};
use crate::text;
use meridian_core::{DcId, Key, NodeId, Value};
use std::collections::BTreeMap;
use std::fmt;

/// A record version, printed `gen.mepoch.seq` (spec §1) and ordered as replicas merge:
/// `mepoch`, then `gen`, then `seq` (`Version::precedence` in `meridian-replication`). The
/// spec's plain order compares `gen` first; the two agree except across a forced re-master,
/// where the spec's order would let a deposed master's new generation outrank the new
/// master epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlVersion {
    /// The generation: a fresh insert, or a re-insert after a delete, starts one.
    pub r#gen: u64,
    /// The master epoch: raised only by a forced re-master, it fences the old master.
    pub mepoch: u32,
    /// Bumped by every update within a generation.
    pub seq: u64,
}

impl TlVersion {
    /// The version `gen.mepoch.seq`.
    pub const fn new(r#gen: u64, mepoch: u32, seq: u64) -> TlVersion {
        TlVersion { r#gen, mepoch, seq }
    }
}

impl Ord for TlVersion {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.mepoch, self.r#gen, self.seq).cmp(&(other.mepoch, other.r#gen, other.seq))
    }
}

impl PartialOrd for TlVersion {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for TlVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.r#gen, self.mepoch, self.seq)
    }
}

/// A version's reign: `(gen, mepoch)`.
pub(super) type Reign = (u32, u64);

pub(super) fn reign(v: TlVersion) -> Reign {
    (v.mepoch, v.r#gen)
}

pub(super) fn show_reign(r: Reign) -> String {
    format!("{}.{}", r.1, r.0)
}

/// What kind of record a master issued; it decides how mastership and `recent` carry over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IssueKind {
    /// The insert arbiter created an absent record (§5): a new generation, `recent = [origin]`,
    /// the master chosen by the bucket's `initial_master`.
    Insert,
    /// A write, TAS or delete by the record's master (§3), including a re-insert over a
    /// tombstone (a new generation, same master, `recent` carried on).
    Write,
    /// A forced re-master (§7): `mepoch + 1`, the issuer names itself master. Not a client
    /// write: its `origin_dc` is ignored and `recent` carries on unchanged.
    ForceMaster,
}

impl fmt::Display for IssueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IssueKind::Insert => "an insert",
            IssueKind::Write => "a write",
            IssueKind::ForceMaster => "a forced re-master",
        })
    }
}

/// One version a master issued: an entry of the issue log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// The record's key.
    pub key: Key,
    /// The version issued.
    pub ver: TlVersion,
    /// What kind of record it is.
    pub kind: IssueKind,
    /// The record's value; `None` for a tombstone.
    pub content: Option<Value>,
    /// The node that issued it (the master, or the insert arbiter).
    pub by_node: NodeId,
    /// That node's data center.
    pub by_dc: DcId,
    /// The data center of the coordinator the write came from.
    pub origin_dc: DcId,
    /// The master the new record names (differs from `by_node` on a migration).
    pub new_master_node: NodeId,
    /// That master's data center.
    pub new_master_dc: DcId,
    /// When it was issued.
    pub at: Micros,
}

/// One record a replica stored: an entry of the apply log.
///
/// Log the records a replica actually stores (§4's `store(rec)` branch, catch-up and
/// anti-entropy copies included), not every record it receives: a stale record it drops is
/// not an apply, and would read as the replica going back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The record's key.
    pub key: Key,
    /// The replica that stored it.
    pub node: NodeId,
    /// The record's version.
    pub ver: TlVersion,
    /// The record's value; `None` for a tombstone.
    pub content: Option<Value>,
    /// When it was stored.
    pub at: Micros,
}

/// A timeline operation a client asks for on one key (spec §2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlOp {
    /// Any committed version, possibly stale.
    ReadAny,
    /// A version at least `min`.
    ReadCritical {
        /// The version the read must reach.
        min: TlVersion,
    },
    /// The master's current version.
    ReadLatest,
    /// Write `value`.
    Write {
        /// The value written.
        value: Value,
    },
    /// Write `value` iff the current version is `expected` (`None`: insert-if-absent).
    TestAndSet {
        /// The version the record must hold; `None`: the record must be absent (or deleted).
        expected: Option<TlVersion>,
        /// The value written when it applies.
        value: Value,
    },
    /// Write a tombstone.
    Delete,
}

impl TlOp {
    /// `read_any`, `read_critical`, `read_latest`, `write`, `test_and_set` or `delete`.
    pub fn kind(&self) -> &'static str {
        match self {
            TlOp::ReadAny => "read_any",
            TlOp::ReadCritical { .. } => "read_critical",
            TlOp::ReadLatest => "read_latest",
            TlOp::Write { .. } => "write",
            TlOp::TestAndSet { .. } => "test_and_set",
            TlOp::Delete => "delete",
        }
    }

    /// Whether it is one of the three reads.
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            TlOp::ReadAny | TlOp::ReadCritical { .. } | TlOp::ReadLatest
        )
    }

    /// The content a write stores when it applies (`Some(None)`: a tombstone); `None` for a
    /// read.
    pub(super) fn content(&self) -> Option<Option<&Value>> {
        match self {
            TlOp::Write { value } | TlOp::TestAndSet { value, .. } => Some(Some(value)),
            TlOp::Delete => Some(None),
            TlOp::ReadAny | TlOp::ReadCritical { .. } | TlOp::ReadLatest => None,
        }
    }
}

impl fmt::Display for TlOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlOp::ReadCritical { min } => write!(f, "read_critical(≥ {min})"),
            TlOp::Write { value } => write!(f, "write {}", text::show(value)),
            TlOp::TestAndSet { expected, value } => {
                write!(
                    f,
                    "test_and_set({}) {}",
                    show_ver(*expected),
                    text::show(value)
                )
            }
            other => f.write_str(other.kind()),
        }
    }
}

/// What a client was told about a [`TlOp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlResult {
    /// A read returned this version and value (`ver: None`: not found; `value: None` with a
    /// version: a tombstone).
    Read {
        /// The version read, if any.
        ver: Option<TlVersion>,
        /// The value read; `None` for a tombstone or not found.
        value: Option<Value>,
    },
    /// A write, TAS or delete took effect as this version.
    Written {
        /// The version the master issued for it.
        ver: TlVersion,
    },
    /// A TAS did not apply: `version_mismatch{current}` or `already_exists` (current `None`:
    /// the record was absent).
    Mismatch {
        /// The current version the master reported.
        current: Option<TlVersion>,
    },
    /// It definitely did not take effect (`master_unavailable`, ...).
    Failed(String),
    /// It may or may not have taken effect (timeout, lost connection, never completed).
    Unknown(String),
}

impl fmt::Display for TlResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlResult::Read {
                ver: Some(v),
                value: Some(x),
            } => write!(f, "returned {v} {}", text::show(x)),
            TlResult::Read {
                ver: Some(v),
                value: None,
            } => write!(f, "returned {v} (tombstone)"),
            TlResult::Read {
                ver: None,
                value: None,
            } => write!(f, "returned not found"),
            TlResult::Read {
                ver: None,
                value: Some(x),
            } => write!(f, "returned {} without a version", text::show(x)),
            TlResult::Written { ver } => write!(f, "acknowledged as {ver}"),
            TlResult::Mismatch { current } => {
                write!(f, "version mismatch, current {}", show_ver(*current))
            }
            TlResult::Failed(reason) => write!(f, "failed: {reason}"),
            TlResult::Unknown(reason) => write!(f, "outcome unknown: {reason}"),
        }
    }
}

/// One line of a [`TlHistory`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlEvent {
    /// A client sends an operation.
    Invoke {
        /// The operation's id.
        op_id: OpId,
        /// The client sending it.
        client: ClientId,
        /// The client's data center.
        dc: DcId,
        /// The key it acts on.
        key: Key,
        /// What it asks for.
        op: TlOp,
        /// When it was sent.
        at: Micros,
    },
    /// The client learns how the operation ended.
    Complete {
        /// The operation's id.
        op_id: OpId,
        /// How it ended.
        result: TlResult,
        /// When the client learned it.
        at: Micros,
    },
}

/// A timeline invocation paired with its completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlOperation {
    /// The operation's id.
    pub id: OpId,
    /// The client that sent it.
    pub client: ClientId,
    /// The client's data center.
    pub dc: DcId,
    /// The key it acts on.
    pub key: Key,
    /// What was asked.
    pub op: TlOp,
    /// When it was sent.
    pub invoked_at: Micros,
    /// When the client learned the result; `None` if the history ended first.
    pub completed_at: Option<Micros>,
    /// How it ended; [`TlResult::Unknown`] if it never completed.
    pub result: TlResult,
}

impl TlOperation {
    /// The version an acknowledged write, TAS or delete took effect as.
    pub fn written(&self) -> Option<TlVersion> {
        match self.result {
            TlResult::Written { ver } => Some(ver),
            _ => None,
        }
    }

    /// What an acknowledged read returned: its version and value.
    pub fn read(&self) -> Option<(Option<TlVersion>, Option<&Value>)> {
        match &self.result {
            TlResult::Read { ver, value } => Some((*ver, value.as_ref())),
            _ => None,
        }
    }
}

impl fmt::Display for TlOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} in {}: {}, invoked at {}µs, ",
            self.id, self.client, self.dc, self.op, self.invoked_at
        )?;
        match self.completed_at {
            Some(at) => write!(f, "completed at {at}µs, {})", self.result),
            None => write!(f, "never completed)"),
        }
    }
}

/// A recorded history of timeline operations: the events in the order they were appended.
pub type TlHistory = EventLog<TlEvent>;

impl LogEvent for TlEvent {
    fn invoked(&self) -> Option<OpId> {
        match self {
            TlEvent::Invoke { op_id, .. } => Some(*op_id),
            TlEvent::Complete { .. } => None,
        }
    }
}

impl TlHistory {
    /// Records the invocation of `op` and returns its fresh id (ids increase from 0).
    pub fn invoke(
        &mut self,
        client: ClientId,
        dc: DcId,
        key: impl Into<Key>,
        op: TlOp,
        at: Micros,
    ) -> OpId {
        let op_id = self.fresh_id();
        self.push(TlEvent::Invoke {
            op_id,
            client,
            dc,
            key: key.into(),
            op,
            at,
        });
        op_id
    }

    /// Records the completion of `op_id`.
    pub fn complete(&mut self, op_id: OpId, result: TlResult, at: Micros) {
        self.push(TlEvent::Complete { op_id, result, at });
    }

    /// The operations, in invocation order, each paired with its completion.
    ///
    /// Errors (the [`crate::History`] ones): an id invoked twice, a completion without
    /// invocation, a second completion, a completion earlier than its invocation, or a result
    /// that does not fit the operation (reads return [`TlResult::Read`], writes and deletes
    /// [`TlResult::Written`], TAS that or [`TlResult::Mismatch`]).
    pub fn operations(&self) -> Result<Vec<TlOperation>, Error> {
        let steps = self.events().iter().map(|e| match e {
            TlEvent::Invoke {
                op_id,
                client,
                dc,
                key,
                op,
                at,
            } => Step::Invoke {
                op_id: *op_id,
                client: *client,
                dc: *dc,
                key,
                op,
                at: *at,
            },
            TlEvent::Complete { op_id, result, at } => Step::Complete {
                op_id: *op_id,
                result,
                at: *at,
            },
        });
        let fits = |op: &TlOp, result: &TlResult| {
            let fits = match result {
                TlResult::Read { .. } => op.is_read(),
                TlResult::Written { .. } => !op.is_read(),
                TlResult::Mismatch { .. } => matches!(op, TlOp::TestAndSet { .. }),
                TlResult::Failed(_) | TlResult::Unknown(_) => true,
            };
            fits.then_some(())
                .ok_or_else(|| (op.kind(), result.to_string()))
        };
        let paired = pair_steps(steps, TlResult::Unknown("never completed".into()), fits)?;
        Ok(paired
            .into_iter()
            .map(|p| TlOperation {
                id: p.id,
                client: p.client,
                dc: p.dc,
                key: p.key,
                op: p.op,
                invoked_at: p.invoked_at,
                completed_at: p.completed_at,
                result: p.result,
            })
            .collect())
    }

    /// [`TlHistory::operations`] grouped by key, keys in byte order, each key's operations in
    /// invocation order.
    pub fn operations_by_key(&self) -> Result<BTreeMap<Key, Vec<TlOperation>>, Error> {
        let mut by_key: BTreeMap<Key, Vec<TlOperation>> = BTreeMap::new();
        for op in self.operations()? {
            by_key.entry(op.key.clone()).or_default().push(op);
        }
        Ok(by_key)
    }
}
