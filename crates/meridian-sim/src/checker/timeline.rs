//! Timeline consistency (PNUTS-style per-record master, `specs/timeline.md`): checkers for the
//! spec's invariants, judged on what a simulated run recorded.
//!
//! # Input
//!
//! - The **issue log** ([`Issued`]): every version a master issued, in issue order (the order
//!   of the slice; per key it is the order that counts), with the kind of record
//!   ([`IssueKind`]), its content, the issuing node and DC, the write's origin DC and the
//!   master the new record names.
//! - The **apply log** ([`Applied`]): every record each replica stored, in apply order, with
//!   its content. The master's own local apply belongs there too.
//! - The **client history** ([`TlHistory`]): timeline operations ([`TlOp`]) and what clients
//!   were told ([`TlResult`]). It is separate from [`crate::History`], whose register of
//!   values has no versions; that history and its JSON format are untouched.
//!
//! Times are virtual µs on the simulation's global clock, for all three. Content is the value,
//! or `None` for a tombstone; the record's `master` and `recent` are not part of it.
//!
//! **Reigns.** A version's *reign* is its `(gen, mepoch)`, ordered by `mepoch` first like
//! versions. Normally a key has one live reign,
//! and every reign has one writer: the master named by the reign's last record. After a forced
//! re-master (§7) a deposed master cut off from the cluster may still issue versions in its old
//! reign until it learns of the higher `mepoch`; the spec accepts this (those writes are
//! discarded later and counted as lost). Such versions, issued below the key's highest reign
//! but extending their own reign, are *fenced*: the checkers follow each reign's own chain
//! instead of flagging them, and count them in [`Verdict::checked`].
//!
//! # Checkers (spec invariant number in brackets)
//!
//! - [`check_order`] (1, timeline order): per key, every issued version is greater than every
//!   version issued before it, fenced versions excepted (they must still increase within their
//!   reign); each replica's applied versions strictly increase (re-applying its current
//!   version with equal content is ignored, with other content it is reported), every applied
//!   version was issued, and not applied before it was issued. Together: each replica's
//!   sequence is a subsequence of the key's issued versions in version order, which is the
//!   issue order whenever no deposed master was writing.
//! - [`check_forks`] (2, no forks): no two records of a key (issued or applied, any replicas,
//!   also one replica twice) share a version with different content; no version was issued
//!   twice, by two nodes or by one.
//! - [`check_single_writer`] (7): per key and reign, the issuer of each version is the master
//!   named by the reign's previous record, so the pen changes hands only through a migration
//!   recorded in a replicated write; a new reign above the others is opened only by a forced
//!   re-master (same `gen`, higher `mepoch`, [`IssueKind::ForceMaster`], naming itself), or by
//!   a new generation: a write by the previous record's master ([`IssueKind::Write`]: a
//!   re-insert over a tombstone, or the master's first write after a restart or a hand-over,
//!   which the protocol issues in a new generation) or an insert by the arbiter over a
//!   tombstone ([`IssueKind::Insert`]); a new reign below the highest one is reported. Each version issued once is [`check_forks`]' part.
//!   With the apply log ([`check_single_writer_with`], as [`check_all`] runs it), a version
//!   that a crash erased before any other replica stored it (its issuer's life ended with a
//!   loss, and no other life ever applied it) took no effect: it is still judged, but the
//!   next version is judged against the record before it (a hand-over lost that way never
//!   reached the new master, so the old master, restarted, is master again).
//! - [`check_migration`] (6): replaying each record's `recent` (origin DCs of the last `T`
//!   writes, newest first, `T` the bucket's `migration_threshold`), a client write moves the
//!   master iff `T > 0`, the last `T` origins are all one DC `d` and `d` is not the issuing
//!   master's DC; the new master must then be in `d`. An insert names the arbiter itself or a
//!   replica in the origin DC (`initial_master`).
//! - [`check_reads`] (4, read guarantees): `read_critical(min)` never returns a version below
//!   `min` (nor no version); every read returns a version that was issued, no later than the
//!   read completed, with the content it was issued with; a `read_latest` invoked after a write,
//!   TAS or delete was acknowledged as `v` returns at least `v` (a tombstone's version, or no
//!   version at all, when the highest such `v` is a delete). Every acknowledged write, TAS or
//!   delete returned a version issued during the operation with the operation's content.
//! - [`check_tas`] (5): of the TAS calls expecting one version, at most one succeeds; a
//!   success `w` was issued directly over the expected version (insert-if-absent: over nothing
//!   or a tombstone); a mismatch reports a version other than the expected one (and
//!   insert-if-absent fails only on a live record), that was issued no later than the call
//!   completed, and at least every version acknowledged before the call started; a loser of a
//!   call that won reports the winner's version or a later one, unless it started before the
//!   expected version existed (then it reported an older one). The spec's "with the winner's
//!   ver" is thus relaxed to "≥" because later writes may land before the loser is served.
//! - [`check_converged`] (2, 9; after quiescence): every primary of a key holds the same
//!   record, and it is the highest version issued (in merge precedence), so none was lost.
//! - [`check_fail_fast`] (9, §7): no operation ran until its client gave up.
//! - [`check_migration_with`]: [`check_migration`] told, per write, where a migration could
//!   go ([`MigrationTarget`]: the first up replica of the origin DC as the master saw it, or
//!   that the master was no longer a primary), so it excuses a due migration with no replica
//!   up and checks the new master is exactly that replica.
//! - [`check_linearizability`] (3): per key, the `write`, `test_and_set_write`, `delete` and
//!   `read_latest` operations, converted into a register over *versions* and judged by
//!   [`super::linearizability`] (Wing & Gong / Lowe). The register holds the version of the
//!   live record, or nothing (absent or tombstone): a write acknowledged as `v` writes `"v"`,
//!   a TAS expecting `e` is a CAS from `"e"` (from absent when `e` is a tombstone or `NONE`),
//!   a delete empties it, a `read_latest` returns `"v"` or nothing. Explanations therefore show
//!   versions as register values (`blind write "1.0.3"`) and a mismatch as a rejected CAS.
//!
//! # Limits
//!
//! - The checkers trust the logs for what was issued and applied; they cannot see a record
//!   that was never logged.
//! - Nor what a restarted node's disk kept: a version stored only in its issuer's life that
//!   ended with a loss counts as erased even if that crash happened to keep it (a lossy crash
//!   loses a tail of the unsynced batches, not necessarily the one holding that version).
//! - Fenced versions are allowed anywhere below the key's highest reign: the checkers cannot
//!   tell whether the deposed master really was cut off. A forced re-master deliberately
//!   breaks the client guarantees (acknowledged writes of the old master are lost), so expect
//!   [`check_reads`], [`check_tas`] and [`check_linearizability`] to fail on such runs.
//! - `recent` is replayed from the issue log (see [`check_migration`] for how it carries over
//!   generations, reigns and forced re-masters). The spec's "the new master is the *first up*
//!   replica of k in d" is checked only as "in d": the checker knows neither placement nor the
//!   failure detector.
//! - The linearizability conversion loses the difference between tombstones: a TAS mismatch
//!   that expected a tombstone's version is dropped from the register history (it is still
//!   judged by [`check_tas`]). An operation whose outcome is unknown is matched to an issued
//!   version by its value (none: it never took effect; one: that is its version), so written
//!   values must be unique per key; otherwise the key is reported undecided.
//! - "At least one TAS succeeds" is not a safety property and is not checked.
//!
//! All checkers are pure and deterministic; violations come in key order, then time order.

use super::linearizability;
use super::{Undecided, Verdict};
use crate::error::Error;
use crate::history::{
    ClientId, Event, EventLog, History, LogEvent, Micros, Op, OpId, Outcome, Step, pair_steps,
};
use crate::text;
use meridian_core::{DcId, Key, NodeId, Value};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
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
type Reign = (u32, u64);

fn reign(v: TlVersion) -> Reign {
    (v.mepoch, v.r#gen)
}

fn show_reign(r: Reign) -> String {
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
    fn content(&self) -> Option<Option<&Value>> {
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

/// Runs every timeline checker, in the order of the module docs' list: order, forks, single
/// writer, migration (with threshold `t`), reads, TAS, linearizability.
pub fn check_all(
    issued: &[Issued],
    applied: &[Applied],
    history: &TlHistory,
    t: usize,
) -> Result<Vec<Verdict>, Error> {
    check_all_with(issued, applied, history, t, &MigrationTargets::new())
}

/// [`check_all`] with [`check_migration_with`]'s knowledge of the migration targets.
pub fn check_all_with(
    issued: &[Issued],
    applied: &[Applied],
    history: &TlHistory,
    t: usize,
    targets: &MigrationTargets,
) -> Result<Vec<Verdict>, Error> {
    Ok(vec![
        check_order(issued, applied),
        check_forks(issued, applied),
        check_single_writer_with(issued, applied),
        check_migration_with_applied(issued, applied, t, targets),
        check_reads(issued, history)?,
        check_tas(issued, history)?,
        check_linearizability(issued, history)?,
    ])
}

fn show_ver(v: Option<TlVersion>) -> String {
    v.map_or_else(|| "<absent>".to_string(), |v| v.to_string())
}

fn show_content(content: Option<&Value>) -> String {
    content.map_or_else(|| "a tombstone".to_string(), |v| text::show(v))
}

fn issues_by_key(issued: &[Issued]) -> BTreeMap<&Key, Vec<&Issued>> {
    let mut by_key: BTreeMap<&Key, Vec<&Issued>> = BTreeMap::new();
    for i in issued {
        by_key.entry(&i.key).or_default().push(i);
    }
    by_key
}

fn applies_by_key(applied: &[Applied]) -> BTreeMap<&Key, BTreeMap<NodeId, Vec<&Applied>>> {
    let mut by_key: BTreeMap<&Key, BTreeMap<NodeId, Vec<&Applied>>> = BTreeMap::new();
    for a in applied {
        by_key
            .entry(&a.key)
            .or_default()
            .entry(a.node)
            .or_default()
            .push(a);
    }
    by_key
}

/// One key's violations, put into the verdict in time order.
struct Findings<'a> {
    key: &'a Key,
    found: Vec<(Micros, Vec<OpId>, String)>,
}

impl<'a> Findings<'a> {
    fn new(key: &'a Key) -> Findings<'a> {
        Findings {
            key,
            found: Vec::new(),
        }
    }

    fn add(&mut self, at: Micros, ops: Vec<OpId>, explanation: String) {
        self.found.push((at, ops, explanation));
    }

    fn report(mut self, verdict: &mut Verdict) {
        self.found.sort_by_key(|f| f.0);
        for (_, ops, explanation) in self.found {
            verdict.violation(self.key, ops, explanation);
        }
    }
}

/// One key's issue log, indexed.
struct KeyIssues<'a> {
    /// The first issue of each version.
    by_ver: BTreeMap<TlVersion, &'a Issued>,
    /// The version each one was issued over: the highest version below it issued before it.
    pred: BTreeMap<TlVersion, Option<TlVersion>>,
}

impl<'a> KeyIssues<'a> {
    fn new(recs: &[&'a Issued]) -> KeyIssues<'a> {
        let (mut by_ver, mut pred, mut seen) = (BTreeMap::new(), BTreeMap::new(), BTreeSet::new());
        for &r in recs {
            if let Entry::Vacant(slot) = by_ver.entry(r.ver) {
                slot.insert(r);
                pred.insert(r.ver, seen.range(..r.ver).next_back().copied());
            }
            seen.insert(r.ver);
        }
        KeyIssues { by_ver, pred }
    }

    fn of<'k>(issues: &'k BTreeMap<&Key, Vec<&'a Issued>>, key: &Key) -> KeyIssues<'a> {
        KeyIssues::new(issues.get(key).map_or(&[][..], Vec::as_slice))
    }

    /// Whether `v` was issued as a live record.
    fn is_live(&self, v: TlVersion) -> bool {
        self.by_ver.get(&v).is_some_and(|i| i.content.is_some())
    }
}

/// An acknowledged write, TAS or delete.
#[derive(Clone, Copy)]
struct AckedWrite<'a> {
    ver: TlVersion,
    tombstone: bool,
    op: &'a TlOperation,
}

/// One key's acknowledged writes, for "reflects every write acknowledged before it started".
struct Acked<'a> {
    /// Completion times, ascending.
    done: Vec<Micros>,
    /// `best[i]`: the highest version among the first `i + 1` completions.
    best: Vec<AckedWrite<'a>>,
}

impl<'a> Acked<'a> {
    fn new(ops: &'a [TlOperation]) -> Acked<'a> {
        let mut list: Vec<(Micros, AckedWrite<'a>)> = ops
            .iter()
            .filter_map(|op| {
                let write = AckedWrite {
                    ver: op.written()?,
                    tombstone: op.op == TlOp::Delete,
                    op,
                };
                Some((op.completed_at?, write))
            })
            .collect();
        list.sort_by_key(|(t, w)| (*t, w.ver));
        let mut best: Vec<AckedWrite<'a>> = Vec::with_capacity(list.len());
        for &(_, w) in &list {
            let top = best.last().copied().filter(|b| b.ver >= w.ver).unwrap_or(w);
            best.push(top);
        }
        Acked {
            done: list.iter().map(|(t, _)| *t).collect(),
            best,
        }
    }

    /// The highest version acknowledged strictly before `t` (equal times are concurrent).
    fn before(&self, t: Micros) -> Option<AckedWrite<'a>> {
        let n = self.done.partition_point(|&d| d < t);
        n.checked_sub(1).map(|i| self.best[i])
    }
}

/// Timeline order (invariant 1): per key, issued versions increase in issue order (fenced
/// versions of a deposed master within their own reign), and each replica's applied versions
/// strictly increase, were issued, and were not applied before being issued.
pub fn check_order(issued: &[Issued], applied: &[Applied]) -> Verdict {
    let mut verdict = Verdict::new("timeline-order");
    let issues = issues_by_key(issued);
    let applies = applies_by_key(applied);
    let keys: BTreeSet<&Key> = issues.keys().chain(applies.keys()).copied().collect();
    let (mut seen, mut logs, mut fenced) = (0usize, 0usize, 0usize);
    for &key in &keys {
        let mut f = Findings::new(key);
        let mut first: BTreeMap<TlVersion, &Issued> = BTreeMap::new();
        // The highest version issued in each master epoch: a deposed master's chain.
        let mut epoch_high: BTreeMap<u32, &Issued> = BTreeMap::new();
        let mut top: Option<&Issued> = None;
        for &r in issues.get(key).map_or(&[][..], Vec::as_slice) {
            if first.contains_key(&r.ver) {
                continue; // issued twice: timeline-forks reports it
            }
            first.insert(r.ver, r);
            let own = epoch_high.get(&r.ver.mepoch).copied();
            match top {
                Some(t) if r.ver < t.ver => {
                    // Below the highest version: only a deposed master extending the chain of
                    // its own (lower) master epoch.
                    let bound = match own {
                        Some(o) if r.ver.mepoch < t.ver.mepoch => o,
                        _ => t,
                    };
                    if r.ver < bound.ver {
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "issued out of order: {} issued {} at {}µs after {} had issued \
                                 {} at {}µs; a master's versions must increase",
                                r.by_node, r.ver, r.at, bound.by_node, bound.ver, bound.at
                            ),
                        );
                    } else {
                        fenced += 1;
                    }
                }
                _ => top = Some(r),
            }
            if own.is_none_or(|o| o.ver < r.ver) {
                epoch_high.insert(r.ver.mepoch, r);
            }
        }
        for (node, list) in applies.get(key).into_iter().flatten() {
            logs += 1;
            let mut high: Option<&Applied> = None;
            for &a in list {
                seen += 1;
                match first.get(&a.ver) {
                    None => f.add(
                        a.at,
                        Vec::new(),
                        format!(
                            "phantom version: replica {node} applied {} at {}µs, which no \
                             master issued",
                            a.ver, a.at
                        ),
                    ),
                    Some(i) if a.at < i.at => f.add(
                        a.at,
                        Vec::new(),
                        format!(
                            "replica {node} applied {} at {}µs, before {} issued it at {}µs",
                            a.ver, a.at, i.by_node, i.at
                        ),
                    ),
                    Some(_) => {}
                }
                match high {
                    Some(h) if a.ver == h.ver => {
                        if a.content != h.content {
                            f.add(
                                a.at,
                                Vec::new(),
                                format!(
                                    "replica {node} re-applied {} at {}µs with {}, having \
                                     applied it at {}µs with {}: a re-applied version must be \
                                     equal (this is a fork)",
                                    a.ver,
                                    a.at,
                                    show_content(a.content.as_ref()),
                                    h.at,
                                    show_content(h.content.as_ref())
                                ),
                            );
                        }
                    }
                    Some(h) if a.ver < h.ver => f.add(
                        a.at,
                        Vec::new(),
                        format!(
                            "replica {node} went back: it applied {} at {}µs after {} at {}µs; \
                             a replica's versions must strictly increase",
                            a.ver, a.at, h.ver, h.at
                        ),
                    ),
                    _ => high = Some(a),
                }
            }
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{seen} applies in {logs} (key, replica) logs on {} keys against {} issued versions \
         ({fenced} by deposed masters)",
        keys.len(),
        issued.len()
    );
    verdict
}

/// A record of some version, for fork explanations.
#[derive(Clone, Copy)]
enum Holder<'a> {
    Master(&'a Issued),
    Replica(&'a Applied),
}

impl<'a> Holder<'a> {
    fn content(self) -> Option<&'a Value> {
        match self {
            Holder::Master(i) => i.content.as_ref(),
            Holder::Replica(a) => a.content.as_ref(),
        }
    }

    fn at(self) -> Micros {
        match self {
            Holder::Master(i) => i.at,
            Holder::Replica(a) => a.at,
        }
    }
}

impl fmt::Display for Holder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Master(i) => write!(f, "master {} (issued at {}µs)", i.by_node, i.at),
            Holder::Replica(a) => write!(f, "{} (applied at {}µs)", a.node, a.at),
        }
    }
}

/// No forks (invariant 2): no two records of a key, issued or applied anywhere, share a version
/// with different content, and no version was issued twice.
pub fn check_forks(issued: &[Issued], applied: &[Applied]) -> Verdict {
    let mut verdict = Verdict::new("timeline-forks");
    let issues = issues_by_key(issued);
    let applies = applies_by_key(applied);
    let keys: BTreeSet<&Key> = issues.keys().chain(applies.keys()).copied().collect();
    let mut versions = 0usize;
    for &key in &keys {
        let mut f = Findings::new(key);
        // Every record of each version, issues first.
        let mut holders: BTreeMap<TlVersion, Vec<Holder>> = BTreeMap::new();
        let mut first: BTreeMap<TlVersion, &Issued> = BTreeMap::new();
        for &r in issues.get(key).map_or(&[][..], Vec::as_slice) {
            match first.entry(r.ver) {
                Entry::Occupied(e) => {
                    let p = *e.get();
                    let how = if p.by_node == r.by_node {
                        format!("twice by {} (at {}µs and {}µs)", r.by_node, p.at, r.at)
                    } else {
                        format!(
                            "by {} ({}) at {}µs and by {} ({}) at {}µs",
                            p.by_node, p.by_dc, p.at, r.by_node, r.by_dc, r.at
                        )
                    };
                    f.add(
                        r.at,
                        Vec::new(),
                        format!(
                            "{} was issued {how}: every version is issued exactly once",
                            r.ver
                        ),
                    );
                }
                Entry::Vacant(e) => {
                    e.insert(r);
                }
            }
            holders.entry(r.ver).or_default().push(Holder::Master(r));
        }
        for list in applies.get(key).into_iter().flatten().map(|(_, list)| list) {
            for &a in list {
                holders.entry(a.ver).or_default().push(Holder::Replica(a));
            }
        }
        versions += holders.len();
        for (ver, hs) in &holders {
            let mut groups: Vec<(Option<&Value>, Vec<String>)> = Vec::new();
            for h in hs {
                match groups.iter_mut().find(|(c, _)| *c == h.content()) {
                    Some((_, names)) => names.push(h.to_string()),
                    None => groups.push((h.content(), vec![h.to_string()])),
                }
            }
            if groups.len() < 2 {
                continue;
            }
            let at = hs
                .iter()
                .filter(|h| h.content() != groups[0].0)
                .map(|h| h.at())
                .min()
                .unwrap_or_default();
            let described: Vec<String> = groups
                .iter()
                .map(|(c, names)| format!("{} had {}", names.join(", "), show_content(*c)))
                .collect();
            f.add(
                at,
                Vec::new(),
                format!(
                    "fork at {ver}: {}; records with equal versions must have equal contents",
                    described.join("; ")
                ),
            );
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{versions} versions in {} issues and {} applies on {} keys",
        issued.len(),
        applied.len(),
        keys.len()
    );
    verdict
}

/// Single writer (invariant 7): per key and reign, each version is issued by the master the
/// reign's previous record names; new reigns open only through a forced re-master, a new
/// generation by the record's master, or an insert over a tombstone. Without the apply log
/// every issued version counts (see [`check_single_writer_with`]).
pub fn check_single_writer(issued: &[Issued]) -> Verdict {
    check_single_writer_with(issued, &[])
}

/// The versions of each key that a crash erased: issued by a node that then lost the life in
/// which it issued them (a crash under a lossy fsync policy, or a wipe, logged under a new
/// [`crate::cluster::life_id`]) before any other replica stored them. Nothing outside that
/// life ever held such a version, and after that life's last logged apply nothing acted on it
/// again: a hand-over it carried never reached the new master, which never accepted writes
/// under it, and the old master, restarted from what its disk kept, is again the master of
/// the record it holds (it opens a new generation with its first write, so the erased version
/// is never issued again). Mapped to that time: until then (in the same life) it is in effect.
fn erased_versions<'a>(
    issued: &'a [Issued],
    applied: &[Applied],
) -> BTreeMap<(&'a Key, TlVersion), Micros> {
    use crate::cluster::machine_of;
    // Every life each machine ran under, as logged, with the time of its last apply.
    let mut lives: BTreeMap<NodeId, BTreeMap<u32, Micros>> = BTreeMap::new();
    for a in applied {
        let (m, life) = machine_of(a.node);
        let last = lives.entry(m).or_default().entry(life).or_insert(a.at);
        *last = (*last).max(a.at);
    }
    let mut holders: BTreeMap<(&Key, TlVersion), BTreeSet<NodeId>> = BTreeMap::new();
    for a in applied {
        holders.entry((&a.key, a.ver)).or_default().insert(a.node);
    }
    let mut erased = BTreeMap::new();
    for i in issued {
        let Some(h) = holders.get(&(&i.key, i.ver)) else {
            continue;
        };
        // Stored by exactly one life, the issuer's own (its local apply)...
        let mut it = h.iter();
        let (Some(&only), None) = (it.next(), it.next()) else {
            continue;
        };
        let (m, life) = machine_of(only);
        // ...which then ended with a loss: the issuer ran under a later life.
        if m == i.by_node
            && let Some(l) = lives.get(&m)
            && l.range(life + 1..).next().is_some()
        {
            erased.insert((&i.key, i.ver), l[&life]);
        }
    }
    erased
}

/// Whether `v` of `key` was erased by a crash before `at` ([`erased_versions`]).
fn erased_before(
    erased: &BTreeMap<(&Key, TlVersion), Micros>,
    key: &Key,
    v: TlVersion,
    at: Micros,
) -> bool {
    erased.get(&(key, v)).is_some_and(|&end| end < at)
}

/// [`check_single_writer`], told by the apply log which versions a crash erased before any
/// other replica stored them ([`erased_versions`]). Such a version must still have been issued
/// by the right node, but it does not become its reign's last record: the next version is
/// judged against the record before it. A version some other replica (or a later life of the
/// issuer) stored is never erased, so a hand-over that reached anyone still binds the old
/// master.
pub fn check_single_writer_with(issued: &[Issued], applied: &[Applied]) -> Verdict {
    let mut verdict = Verdict::new("timeline-single-writer");
    let issues = issues_by_key(issued);
    let erased = erased_versions(issued, applied);
    let (mut handovers, mut forced, mut fenced) = (0usize, 0usize, 0usize);
    for (&key, recs) in &issues {
        let mut f = Findings::new(key);
        // The records of each reign in issue order; the last one in effect names the reign's
        // only writer.
        let mut chains: BTreeMap<Reign, Vec<&Issued>> = BTreeMap::new();
        // The last record with which each node handed a reign over to another.
        let mut handed: BTreeMap<(Reign, NodeId), &Issued> = BTreeMap::new();
        for &r in recs {
            let here = reign(r.ver);
            // Versions a crash erased before this issue took no effect from then on.
            for chain in chains.values_mut() {
                while chain
                    .last()
                    .is_some_and(|l| erased_before(&erased, key, l.ver, r.at))
                {
                    chain.pop();
                }
            }
            chains.retain(|_, c| !c.is_empty());
            let reigns: BTreeMap<Reign, &Issued> = chains
                .iter()
                .map(|(&k, c)| (k, *c.last().expect("non-empty")))
                .collect();
            let highest = reigns.last_key_value().map(|(&h, &last)| (h, last));
            if r.kind == IssueKind::ForceMaster && r.new_master_node != r.by_node {
                f.add(
                    r.at,
                    Vec::new(),
                    format!(
                        "{} forced a re-master with {} at {}µs but named {} master: a forced \
                         re-master names the forcing replica",
                        r.by_node, r.ver, r.at, r.new_master_node
                    ),
                );
            }
            match reigns.get(&here).copied() {
                Some(prev) => {
                    if highest.is_some_and(|(h, _)| here < h) {
                        fenced += 1;
                    }
                    if r.kind != IssueKind::Write {
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "{} issued {} at {}µs as {}, but reign {} already existed: an \
                                 insert starts a generation and a forced re-master raises mepoch",
                                r.by_node,
                                r.ver,
                                r.at,
                                r.kind,
                                show_reign(here)
                            ),
                        );
                    }
                    if r.by_node != prev.new_master_node {
                        let why = if let Some(h) = handed.get(&(here, r.by_node)) {
                            format!(
                                "it had handed mastership to {} ({}) with {} at {}µs and the \
                                 master named by {} is {}: the old master kept writing",
                                h.new_master_node,
                                h.new_master_dc,
                                h.ver,
                                h.at,
                                prev.ver,
                                prev.new_master_node
                            )
                        } else {
                            format!(
                                "the master named by {} (issued by {} at {}µs) is {}; no \
                                 migration named {} and mepoch did not change",
                                prev.ver, prev.by_node, prev.at, prev.new_master_node, r.by_node
                            )
                        };
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "two writers: {} issued {} at {}µs, but {why}",
                                r.by_node, r.ver, r.at
                            ),
                        );
                    }
                }
                None => match highest {
                    None => {}
                    // A deposed master's first write in its own, fenced master epoch may open a
                    // new generation (its first write over a record it did not issue during
                    // its current run does): fenced like its other versions.
                    Some((h, _))
                        if here < h
                            && r.kind == IssueKind::Write
                            && reigns.range(..here).next_back().is_some_and(|(k, prev)| {
                                k.0 == here.0 && prev.new_master_node == r.by_node
                            }) =>
                    {
                        fenced += 1;
                    }
                    Some((h, last)) if here < h => f.add(
                        r.at,
                        Vec::new(),
                        format!(
                            "{} issued {} at {}µs in a new reign {} below the current reign {} \
                             ({} by {} at {}µs): new reigns only go up",
                            r.by_node,
                            r.ver,
                            r.at,
                            show_reign(here),
                            show_reign(h),
                            last.ver,
                            last.by_node,
                            last.at
                        ),
                    ),
                    Some((h, _)) if r.kind == IssueKind::ForceMaster && here.0 > h.0 => {
                        // It copies the record its new master held, which need not be the
                        // highest one (a deposed master may have gone on): any generation.
                        forced += 1;
                    }
                    Some((h, last)) if here.1 == h.1 || here.0 > h.0 => {
                        if r.kind == IssueKind::ForceMaster {
                            forced += 1;
                        } else {
                            f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "{} issued {} at {}µs as {}, raising mepoch over {} (issued \
                                     by {} at {}µs): only a forced re-master raises mepoch",
                                    r.by_node, r.ver, r.at, r.kind, last.ver, last.by_node, last.at
                                ),
                            );
                        }
                    }
                    Some((_, last)) => {
                        // A live record's master may open a new generation itself: its first
                        // write over a record it did not issue during its current run does,
                        // so that a crash that lost versions cannot make it issue one twice.
                        let masters_own =
                            r.kind == IssueKind::Write && r.by_node == last.new_master_node;
                        if last.content.is_some() && !masters_own {
                            f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "{} started generation {} with {} at {}µs while the record \
                                     was live ({} by {} at {}µs holds {}): a generation starts \
                                     only after a delete (two inserts admitted?)",
                                    r.by_node,
                                    r.ver.r#gen,
                                    r.ver,
                                    r.at,
                                    last.ver,
                                    last.by_node,
                                    last.at,
                                    show_content(last.content.as_ref())
                                ),
                            );
                        }
                        match r.kind {
                            IssueKind::Write if r.by_node != last.new_master_node => f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "two writers: {} re-inserted with {} at {}µs, but the \
                                     master named by {} (issued by {} at {}µs) is {}",
                                    r.by_node,
                                    r.ver,
                                    r.at,
                                    last.ver,
                                    last.by_node,
                                    last.at,
                                    last.new_master_node
                                ),
                            ),
                            IssueKind::ForceMaster => f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "{} forced a re-master with {} at {}µs, changing the \
                                     generation: a forced re-master keeps gen and raises mepoch",
                                    r.by_node, r.ver, r.at
                                ),
                            ),
                            _ => {}
                        }
                    }
                },
            }
            if r.kind == IssueKind::Write && r.new_master_node != r.by_node {
                handovers += 1;
                handed.insert((here, r.by_node), r);
            }
            chains.entry(here).or_default().push(r);
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{} issued versions on {} keys ({handovers} hand-overs, {forced} forced re-masters, \
         {fenced} versions by deposed masters, {} erased by crashes)",
        issued.len(),
        issues.len(),
        erased.len()
    );
    verdict
}

/// `recent` as (origin, version), newest first.
type Window = Vec<(DcId, TlVersion)>;

fn show_window(window: &Window) -> String {
    if window.is_empty() {
        return "none".to_string();
    }
    let items: Vec<String> = window.iter().map(|(d, v)| format!("{d} ({v})")).collect();
    items.join(", ")
}

/// Migration (invariant 6) with threshold `t` (the bucket's `migration_threshold`): a client
/// write moves the master iff `t > 0` and the origins of the last `t` writes, itself included,
/// are all one DC other than the issuing master's; the new master is then in that DC.
///
/// Interpretation of `recent` (spec §3, §5, §6): it is replayed from the issue log along each
/// reign's chain. It spans master changes (every replica keeps it) and generations: a re-insert
/// over a tombstone is an ordinary master write, which computes `recent` from the record it
/// overwrites. It restarts only at an [`IssueKind::Insert`] of an absent record
/// (`recent = [d]`). A forced re-master is not a client write: it leaves `recent` as it was
/// (the spec does not say; this is the reading that keeps §6's "survives master changes"). A
/// record opening a new reign continues the window of the highest reign before it; a deposed
/// master's fenced record continues its own reign's window.
pub fn check_migration(issued: &[Issued], t: usize) -> Verdict {
    check_migration_with(issued, t, &BTreeMap::new())
}

/// What the issuing master knew about where a write's migration could go, as seen by
/// whoever can see placement and the failure detector (the simulator's observer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationTarget {
    /// The first replica of the key in the write's origin DC that the master believed up, in
    /// claim order (`None`: it believed none up, so no migration could happen).
    FirstUp(Option<NodeId>),
    /// The master was no longer a primary of the key (a layout change took it off the
    /// preference list): it hands the mastership to a primary with this write, whatever the
    /// threshold says (`meridian-replication`'s documented deviation).
    NotAPrimary,
}

/// [`MigrationTarget`]s of writes, keyed by key and issued version.
pub type MigrationTargets = BTreeMap<(Key, TlVersion), MigrationTarget>;

/// [`check_migration`], knowing [`MigrationTargets`]: a due migration that did not happen is
/// excused when the issuing master believed no replica of the origin DC up (the spec's "first
/// up replica of k in d" does not exist), a migration must go to exactly the recorded target,
/// and a write by a master that is no longer a primary may move the mastership to any replica.
/// Writes missing from `targets` are judged as by [`check_migration`].
pub fn check_migration_with(issued: &[Issued], t: usize, targets: &MigrationTargets) -> Verdict {
    check_migration_with_applied(issued, &[], t, targets)
}

/// [`check_migration_with`], told by the apply log which versions a crash erased before any
/// other replica stored them (as in [`check_single_writer_with`]): such a version is judged,
/// but its origin does not enter the window of the versions after it (the master that issued
/// it restarted without it, so its next write extends the record before it).
pub fn check_migration_with_applied(
    issued: &[Issued],
    applied: &[Applied],
    t: usize,
    targets: &MigrationTargets,
) -> Verdict {
    let erased = erased_versions(issued, applied);
    let mut verdict = Verdict::new("timeline-migration");
    let issues = issues_by_key(issued);
    let (mut writes, mut migrations, mut excused, mut handovers) = (0usize, 0, 0, 0);
    for (&key, recs) in &issues {
        let mut f = Findings::new(key);
        // Each reign's versions in issue order, with their windows; the last one in effect
        // carries the reign's window.
        let mut chains: BTreeMap<Reign, Vec<(TlVersion, Window)>> = BTreeMap::new();
        // Each issued version's window, and its content, for forced re-masters.
        let mut window_of: Vec<(&Issued, Window)> = Vec::new();
        for &r in recs {
            let here = reign(r.ver);
            // Versions a crash erased before this issue took no effect from then on.
            for chain in chains.values_mut() {
                while chain
                    .last()
                    .is_some_and(|(v, _)| erased_before(&erased, key, *v, r.at))
                {
                    chain.pop();
                }
            }
            chains.retain(|_, c| !c.is_empty());
            window_of.retain(|(i, _)| !erased_before(&erased, key, i.ver, r.at));
            let recent_of: BTreeMap<Reign, Window> = chains
                .iter()
                .map(|(&k, c)| (k, c.last().expect("non-empty").1.clone()))
                .collect();
            // A forced re-master copies the record its new master held: continue that
            // version's window (found by content, unique per write), not the window of the
            // deposed master's later writes, which that replica may never have received.
            let forced_from = (r.kind == IssueKind::ForceMaster)
                .then(|| {
                    window_of
                        .iter()
                        .rev()
                        .find(|(i, _)| {
                            // A value is unique per write; a tombstone is the last record of
                            // its generation, which the forced version keeps.
                            let same = match &r.content {
                                Some(_) => i.content == r.content,
                                None => i.content.is_none() && i.ver.r#gen == r.ver.r#gen,
                            };
                            same && i.ver < r.ver
                        })
                        .map(|(_, w)| w.clone())
                })
                .flatten();
            let before: Window = match r.kind {
                IssueKind::Insert => Vec::new(),
                _ => forced_from
                    .or_else(|| {
                        // Its own reign, else the previous generation of its master epoch (a
                        // deposed master's chain goes on below the forced epoch), else the
                        // highest reign.
                        recent_of
                            .get(&here)
                            .or_else(|| {
                                recent_of
                                    .range(..here)
                                    .next_back()
                                    .filter(|(k, _)| k.0 == here.0)
                                    .map(|(_, w)| w)
                            })
                            .or_else(|| recent_of.last_key_value().map(|(_, w)| w))
                            .cloned()
                    })
                    .unwrap_or_default(),
            };
            let recent: Window = match r.kind {
                IssueKind::ForceMaster => before,
                _ => std::iter::once((r.origin_dc, r.ver))
                    .chain(before)
                    .take(t)
                    .collect(),
            };
            match r.kind {
                IssueKind::Write => {
                    writes += 1;
                    let due = t > 0
                        && recent.len() == t
                        && recent.iter().all(|&(d, _)| d == r.origin_dc)
                        && r.origin_dc != r.by_dc;
                    let moved = r.new_master_node != r.by_node;
                    let window = show_window(&recent);
                    let from = format!("{} ({})", r.by_node, r.by_dc);
                    let to = format!("{} ({})", r.new_master_node, r.new_master_dc);
                    let target = targets.get(&(key.clone(), r.ver)).copied();
                    let first_up = match target {
                        Some(MigrationTarget::FirstUp(n)) => Some(n),
                        _ => None,
                    };
                    match (due, moved) {
                        _ if target == Some(MigrationTarget::NotAPrimary) => handovers += 1,
                        (true, false) if first_up == Some(None) => excused += 1,
                        (true, true) if first_up.is_some_and(|n| n != Some(r.new_master_node)) => f
                            .add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "migration to the wrong replica: {} at {}µs moved the \
                                     master from {from} to {to}, but the first replica of the \
                                     key in {} that {} believed up was {}",
                                    r.ver,
                                    r.at,
                                    r.origin_dc,
                                    r.by_node,
                                    first_up
                                        .flatten()
                                        .map_or("none".to_string(), |n| n.to_string())
                                ),
                            ),
                        (true, false) => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "missed migration: the last {t} writes ({window}, newest first) \
                                 all came from {}, not master {from}'s DC, yet {} at {}µs kept \
                                 the master",
                                r.origin_dc, r.ver, r.at
                            ),
                        ),
                        (false, true) if t == 0 => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "migration while disabled (T = 0): {} at {}µs moved the master \
                                 from {from} to {to}",
                                r.ver, r.at
                            ),
                        ),
                        (false, true) => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "migration without {t} consecutive foreign writes: {} at {}µs \
                                 moved the master from {from} to {to}, but the last writes were \
                                 {window} (newest first); it takes {t} from one DC other than {}",
                                r.ver, r.at, r.by_dc
                            ),
                        ),
                        (true, true) if r.new_master_dc != r.origin_dc => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "migration to the wrong DC: the last {t} writes ({window}) came \
                                 from {}, but {} at {}µs moved the master from {from} to {to}",
                                r.origin_dc, r.ver, r.at
                            ),
                        ),
                        (true, true) => migrations += 1,
                        (false, false) => {}
                    }
                }
                IssueKind::Insert => {
                    if r.new_master_node != r.by_node && r.new_master_dc != r.origin_dc {
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "{} inserted {} at {}µs naming {} ({}) master: an insert's \
                                 master is the arbiter itself (insert_arbiter) or a replica in \
                                 the origin DC {} (inserter_dc)",
                                r.by_node,
                                r.ver,
                                r.at,
                                r.new_master_node,
                                r.new_master_dc,
                                r.origin_dc
                            ),
                        );
                    }
                }
                IssueKind::ForceMaster => {}
            }
            window_of.push((r, recent.clone()));
            chains.entry(here).or_default().push((r.ver, recent));
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{writes} writes on {} keys with T = {t} ({migrations} migrations{})",
        issues.len(),
        [
            (excused, "due with no replica of the origin DC up"),
            (handovers, "by masters no longer primaries")
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!(", {n} {what}"))
        .collect::<String>()
    );
    verdict
}

/// Read guarantees (invariant 4): reads return issued versions with their contents,
/// `read_critical(min)` at least `min`, `read_latest` at least every version acknowledged
/// before it started; acknowledged writes were issued, with their content, while they ran.
pub fn check_reads(issued: &[Issued], history: &TlHistory) -> Result<Verdict, Error> {
    let by_key = history.operations_by_key()?;
    let issues = issues_by_key(issued);
    let mut verdict = Verdict::new("timeline-reads");
    let (mut reads, mut critical, mut latest, mut acks) = (0usize, 0usize, 0usize, 0usize);
    for (key, ops) in &by_key {
        let mut f = Findings::new(key);
        let index = KeyIssues::of(&issues, key);
        let acked = Acked::new(ops);
        for op in ops {
            let (Some(w), Some(content)) = (op.written(), op.op.content()) else {
                continue;
            };
            acks += 1;
            let done = op.completed_at.unwrap_or(Micros::MAX);
            let Some(i) = index.by_ver.get(&w) else {
                f.add(
                    done,
                    vec![op.id],
                    format!("phantom acknowledgement: {op}, but no master issued {w}"),
                );
                continue;
            };
            if i.content.as_ref() != content {
                f.add(
                    done,
                    vec![op.id],
                    format!(
                        "wrong content: {op}, but {} issued {w} with {}",
                        i.by_node,
                        show_content(i.content.as_ref())
                    ),
                );
            }
            if i.at < op.invoked_at || i.at > done {
                f.add(
                    done,
                    vec![op.id],
                    format!(
                        "{op}, but {} issued {w} at {}µs, outside the operation",
                        i.by_node, i.at
                    ),
                );
            }
        }
        for op in ops {
            let Some((ver, value)) = op.read() else {
                continue;
            };
            reads += 1;
            let done = op.completed_at.unwrap_or(Micros::MAX);
            match ver {
                None if value.is_some() => f.add(
                    done,
                    vec![op.id],
                    format!("malformed read: {op} returned a value without a version"),
                ),
                None => {}
                Some(v) => match index.by_ver.get(&v) {
                    None => f.add(
                        done,
                        vec![op.id],
                        format!("phantom read: {op}, but no master issued {v}"),
                    ),
                    Some(i) => {
                        if i.content.as_ref() != value {
                            f.add(
                                done,
                                vec![op.id],
                                format!(
                                    "wrong content: {op}, but {v} was issued with {}",
                                    show_content(i.content.as_ref())
                                ),
                            );
                        }
                        if i.at > done {
                            f.add(
                                done,
                                vec![op.id],
                                format!(
                                    "read from the future: {op}, but {v} was issued only at \
                                     {}µs",
                                    i.at
                                ),
                            );
                        }
                    }
                },
            }
            match &op.op {
                TlOp::ReadCritical { min } => {
                    critical += 1;
                    if ver.is_none_or(|v| v < *min) {
                        f.add(
                            done,
                            vec![op.id],
                            format!(
                                "stale read_critical: {op}, below the required {min} (never \
                                 allowed)"
                            ),
                        );
                    }
                }
                TlOp::ReadLatest => {
                    latest += 1;
                    if let Some(need) = acked.before(op.invoked_at) {
                        let ok = ver.map_or(need.tombstone, |v| v >= need.ver);
                        if !ok {
                            f.add(
                                done,
                                vec![op.id, need.op.id],
                                format!(
                                    "stale read_latest: {op}, but {} had been acknowledged \
                                     before the read started",
                                    need.op
                                ),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{reads} reads ({critical} read_critical, {latest} read_latest) and {acks} acknowledged \
         writes on {} keys",
        by_key.len()
    );
    Ok(verdict)
}

/// Test-and-set (invariant 5): per key and expected version at most one TAS succeeds, on
/// exactly that version; mismatches report a real, current-enough version, and losers of a
/// winning call the winner's version or a later one.
pub fn check_tas(issued: &[Issued], history: &TlHistory) -> Result<Verdict, Error> {
    let by_key = history.operations_by_key()?;
    let issues = issues_by_key(issued);
    let mut verdict = Verdict::new("timeline-tas");
    let (mut calls, mut succeeded, mut mismatched) = (0usize, 0usize, 0usize);
    for (key, ops) in &by_key {
        let mut f = Findings::new(key);
        let index = KeyIssues::of(&issues, key);
        let acked = Acked::new(ops);
        let tas: Vec<(&TlOperation, Option<TlVersion>)> = ops
            .iter()
            .filter_map(|op| match op.op {
                TlOp::TestAndSet { expected, .. } => Some((op, expected)),
                _ => None,
            })
            .collect();
        calls += tas.len();
        let mut winners: BTreeMap<TlVersion, Vec<(&TlOperation, TlVersion)>> = BTreeMap::new();
        for &(op, expected) in &tas {
            if let (Some(e), Some(w)) = (expected, op.written()) {
                winners.entry(e).or_default().push((op, w));
            }
        }
        for (e, ws) in &winners {
            if ws.len() < 2 {
                continue;
            }
            let list: Vec<String> = ws.iter().map(|(op, _)| op.to_string()).collect();
            let at = ws
                .iter()
                .filter_map(|(op, _)| op.completed_at)
                .max()
                .unwrap_or_default();
            f.add(
                at,
                ws.iter().map(|(op, _)| op.id).collect(),
                format!(
                    "{} test_and_set calls expecting {e} succeeded: {}; at most one may",
                    ws.len(),
                    list.join("; ")
                ),
            );
        }
        for &(op, expected) in &tas {
            let done = op.completed_at.unwrap_or(Micros::MAX);
            match op.result {
                TlResult::Written { ver: w } => {
                    succeeded += 1;
                    let Some(&pred) = index.pred.get(&w) else {
                        continue; // never issued: timeline-reads reports it
                    };
                    match expected {
                        Some(e) if pred != Some(e) => f.add(
                            done,
                            vec![op.id],
                            format!(
                                "{op}, but {w} was issued over {}: it did not apply on the \
                                 expected {e}",
                                show_ver(pred)
                            ),
                        ),
                        None if pred.is_some_and(|p| index.is_live(p)) => f.add(
                            done,
                            vec![op.id],
                            format!(
                                "{op}: an insert-if-absent, but {w} was issued over the live {}",
                                show_ver(pred)
                            ),
                        ),
                        _ => {}
                    }
                }
                TlResult::Mismatch { current } => {
                    mismatched += 1;
                    let contradiction = match (expected, current) {
                        (Some(e), Some(c)) => c == e,
                        (None, None) => true,
                        (None, Some(c)) => index.by_ver.contains_key(&c) && !index.is_live(c),
                        (Some(_), None) => false,
                    };
                    if contradiction {
                        f.add(
                            done,
                            vec![op.id],
                            format!(
                                "{op}: a mismatch must name another version than the expected \
                                 one, and an insert-if-absent fails only on a live record"
                            ),
                        );
                    }
                    if let Some(c) = current {
                        match index.by_ver.get(&c) {
                            None => {
                                f.add(done, vec![op.id], format!("{op}, but no master issued {c}"))
                            }
                            Some(i) if i.at > done => f.add(
                                done,
                                vec![op.id],
                                format!("{op}, but {c} was issued only at {}µs", i.at),
                            ),
                            Some(_) => {}
                        }
                    }
                    if let Some(need) = acked.before(op.invoked_at) {
                        let ok = current.map_or(need.tombstone, |c| c >= need.ver);
                        if !ok {
                            f.add(
                                done,
                                vec![op.id, need.op.id],
                                format!(
                                    "stale mismatch: {op}, but {} had been acknowledged before \
                                     it started",
                                    need.op
                                ),
                            );
                        }
                    }
                    let winner = expected.and_then(|e| Some((e, *winners.get(&e)?.first()?)));
                    if let Some((e, (winner, w))) = winner {
                        let before_e = index.by_ver.get(&e).is_some_and(|i| op.invoked_at < i.at);
                        let ok = current.is_some_and(|c| c >= w)
                            || (before_e && current.is_none_or(|c| c < e));
                        if !ok {
                            f.add(
                                done,
                                vec![op.id, winner.id],
                                format!(
                                    "{op} lost to {winner}, so it must report {w} or later (or \
                                     an older version if it started before {e} was issued)"
                                ),
                            );
                        }
                    }
                }
                _ => {}
            }
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{calls} test_and_set calls on {} keys ({succeeded} succeeded, {mismatched} mismatched)",
        by_key.len()
    );
    Ok(verdict)
}

/// The register value standing for a live record of version `v`.
fn reg_value(v: TlVersion) -> Value {
    Value::from(v.to_string())
}

/// One key's write, TAS, delete and read_latest operations as operations on a register of
/// versions (see the module docs), or why the key cannot be converted.
fn register_ops<'a>(
    ops: &'a [TlOperation],
    index: &KeyIssues,
) -> Result<Vec<(&'a TlOperation, Op, Outcome)>, String> {
    let claimed: BTreeSet<TlVersion> = ops.iter().filter_map(TlOperation::written).collect();
    let mut writers: BTreeMap<&Value, usize> = BTreeMap::new();
    for op in ops {
        if let TlOp::Write { value } | TlOp::TestAndSet { value, .. } = &op.op {
            *writers.entry(value).or_default() += 1;
        }
    }
    // Versions not issued count as live (they never match the register anyway).
    let expect = |e: Option<TlVersion>| {
        e.filter(|&e| index.by_ver.get(&e).is_none_or(|i| i.content.is_some()))
            .map(reg_value)
    };
    let mut out = Vec::new();
    for op in ops {
        let outcome = match &op.result {
            TlResult::Failed(_) => continue, // never happened
            TlResult::Unknown(why) => Outcome::unknown(why.clone()),
            _ => Outcome::done(),
        };
        let (reg_op, outcome) = match (&op.op, &op.result) {
            (TlOp::ReadLatest, TlResult::Read { ver, value }) => {
                let held = ver.filter(|_| value.is_some()).map(reg_value);
                (Op::Read, Outcome::read(held))
            }
            (TlOp::ReadAny | TlOp::ReadCritical { .. } | TlOp::ReadLatest, _) => continue,
            (TlOp::Delete, _) => (Op::delete(Vec::<Value>::new()), outcome),
            (TlOp::Write { .. }, TlResult::Written { ver }) => {
                (Op::blind_write(reg_value(*ver)), outcome)
            }
            (TlOp::TestAndSet { expected, .. }, TlResult::Written { ver }) => {
                (Op::cas(expect(*expected), reg_value(*ver)), outcome)
            }
            (TlOp::TestAndSet { expected, .. }, TlResult::Mismatch { .. }) => {
                if expected.is_some() && expect(*expected).is_none() {
                    continue; // expected a tombstone: the register cannot tell tombstones apart
                }
                let op = Op::cas(expect(*expected), Value::from_static(b"(rejected)"));
                (op, Outcome::cas_rejected())
            }
            (TlOp::Write { value } | TlOp::TestAndSet { value, .. }, _) => {
                // Outcome unknown (other results are ill-typed, rejected by
                // TlHistory::operations): the issue log says whether, and as which version, it
                // happened.
                let others = writers.get(value).copied().unwrap_or_default() - 1;
                if others > 0 {
                    return Err(format!(
                        "{} has an unknown outcome and writes {}, like {others} other \
                         operation(s); unknown outcomes are matched to issued versions by value, \
                         so written values must be unique per key",
                        op.id,
                        text::show(value)
                    ));
                }
                let found: Vec<TlVersion> = index
                    .by_ver
                    .values()
                    .filter(|i| i.content.as_ref() == Some(value) && !claimed.contains(&i.ver))
                    .map(|i| i.ver)
                    .collect();
                let v = match found[..] {
                    [] => continue, // never issued: it never took effect
                    [v] => v,
                    _ => {
                        let vs: Vec<String> = found.iter().map(TlVersion::to_string).collect();
                        return Err(format!(
                            "{} has an unknown outcome and its value {} was issued as {}: \
                             cannot tell which one it was",
                            op.id,
                            text::show(value),
                            vs.join(", ")
                        ));
                    }
                };
                match &op.op {
                    TlOp::TestAndSet { expected, .. } => {
                        (Op::cas(expect(*expected), reg_value(v)), outcome)
                    }
                    _ => (Op::blind_write(reg_value(v)), outcome),
                }
            }
        };
        out.push((op, reg_op, outcome));
    }
    Ok(out)
}

/// Linearizability (invariant 3) of each key's `write`, `test_and_set_write`, `delete` and
/// `read_latest` operations, as a register of versions, with the default search limits.
pub fn check_linearizability(issued: &[Issued], history: &TlHistory) -> Result<Verdict, Error> {
    check_linearizability_with(issued, history, &linearizability::Config::default())
}

/// [`check_linearizability`] with explicit search limits.
pub fn check_linearizability_with(
    issued: &[Issued],
    history: &TlHistory,
    config: &linearizability::Config,
) -> Result<Verdict, Error> {
    let by_key = history.operations_by_key()?;
    let issues = issues_by_key(issued);
    let mut register = History::new();
    let mut undecided = Vec::new();
    for (key, ops) in &by_key {
        let index = KeyIssues::of(&issues, key);
        match register_ops(ops, &index) {
            Ok(converted) => {
                for (op, reg_op, outcome) in converted {
                    register.push(Event::Invoke {
                        op_id: op.id,
                        client: op.client,
                        dc: op.dc,
                        key: key.clone(),
                        op: reg_op,
                        at: op.invoked_at,
                    });
                    if let Some(at) = op.completed_at {
                        register.complete(op.id, outcome, at);
                    }
                }
            }
            Err(reason) => undecided.push(Undecided {
                key: key.clone(),
                reason,
            }),
        }
    }
    let mut verdict = linearizability::check_with(&register, config)?;
    verdict.checker = "timeline-linearizability";
    verdict.checked = format!(
        "write, test_and_set, delete and read_latest: {}",
        verdict.checked
    );
    verdict.undecided.extend(undecided);
    verdict.undecided.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(verdict)
}

/// Failing fast (spec §7, invariant 9): every operation ended before `limit` µs had passed
/// since its invocation. An unreachable master makes requests fail with
/// `master_unavailable` after `master_timeout_ms` (plus the coordinator's one retry); they must
/// not hang until the client gives up. Operations the history ended before are not judged.
pub fn check_fail_fast(history: &TlHistory, limit: Micros) -> Result<Verdict, Error> {
    let mut verdict = Verdict::new("timeline-fail-fast");
    let mut judged = 0usize;
    let mut slowest: Micros = 0;
    for (key, ops) in history.operations_by_key()? {
        let mut f = Findings::new(&key);
        for op in &ops {
            let Some(done) = op.completed_at else {
                continue;
            };
            judged += 1;
            let took = done.saturating_sub(op.invoked_at);
            slowest = slowest.max(took);
            if took >= limit {
                f.add(
                    done,
                    vec![op.id],
                    format!("{op} took {took}µs, at least the {limit}µs limit: it hung"),
                );
            }
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!("{judged} operations, the slowest took {slowest}µs");
    Ok(verdict)
}

/// A primary's record of a key after quiescence, as [`check_converged`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlFinal {
    /// The record's version.
    pub ver: TlVersion,
    /// The record's value; `None` for a tombstone.
    pub content: Option<Value>,
    /// The master the record names.
    pub master: NodeId,
}

/// The final records of each key's primaries (`None`: that primary holds no record).
pub type TlFinals = BTreeMap<Key, BTreeMap<NodeId, Option<TlFinal>>>;

/// The order replicas merge by: `(mepoch, gen, seq)` (`Version::precedence` in
/// `meridian-replication`). It differs from [`TlVersion`]'s order only across a forced
/// re-master, whose higher `mepoch` outranks a deposed master's later generations.
fn precedence(v: TlVersion) -> (u32, u64, u64) {
    (v.mepoch, v.r#gen, v.seq)
}

/// Convergence after heal and quiescence (invariants 2 and 9, "after the heal, all replicas
/// converge to the master's record"): every primary of each key holds the same record
/// (version, content and master), or none holds one; and, with `no_loss`, that record is the
/// key's highest issued version in merge precedence, with the content it was issued with, so
/// no version a master issued was lost (a deposed master's fenced versions rank below the
/// forced re-master's epoch, so they do not count).
pub fn check_converged(issued: &[Issued], finals: &TlFinals, no_loss: bool) -> Verdict {
    let mut verdict = Verdict::new("timeline-convergence");
    let issues = issues_by_key(issued);
    let mut records = 0usize;
    let keys: BTreeSet<&Key> = issues.keys().copied().chain(finals.keys()).collect();
    for key in keys {
        let by_node = finals.get(key);
        let held: Vec<(NodeId, &Option<TlFinal>)> = by_node
            .into_iter()
            .flatten()
            .map(|(n, r)| (*n, r))
            .collect();
        records += held.len();
        let show = |r: &Option<TlFinal>| match r {
            Some(r) => format!(
                "{} {} (master {})",
                r.ver,
                show_content(r.content.as_ref()),
                r.master
            ),
            None => "no record".to_string(),
        };
        if held.windows(2).any(|w| w[0].1 != w[1].1) {
            let list: Vec<String> = held
                .iter()
                .map(|(n, r)| format!("{n} holds {}", show(r)))
                .collect();
            verdict.violation(
                key,
                Vec::new(),
                format!("replicas diverge after quiescence: {}", list.join("; ")),
            );
            continue;
        }
        if !no_loss {
            continue;
        }
        let top = issues
            .get(key)
            .and_then(|l| l.iter().max_by_key(|i| (precedence(i.ver), i.at)).copied());
        let Some(top) = top else { continue };
        let Some((_, first)) = held.first() else {
            continue;
        };
        let agrees = first
            .as_ref()
            .is_some_and(|r| r.ver == top.ver && r.content == top.content);
        if !agrees {
            verdict.violation(
                key,
                Vec::new(),
                format!(
                    "lost version: every primary holds {}, but {} issued {} with {} at {}µs, \
                     the highest version of the key",
                    show(first),
                    top.by_node,
                    top.ver,
                    show_content(top.content.as_ref()),
                    top.at
                ),
            );
        }
    }
    verdict.checked = format!(
        "{records} final records of {} keys{}",
        finals.len(),
        if no_loss {
            " against the highest issued versions"
        } else {
            ""
        }
    );
    verdict
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    const fn v(g: u64, m: u32, s: u64) -> TlVersion {
        TlVersion::new(g, m, s)
    }

    fn content(c: Option<&str>) -> Option<Value> {
        c.map(|c| Value::from(c.to_string()))
    }

    /// Hand-made issue and apply logs of key `k`.
    #[derive(Default)]
    struct Trace {
        issued: Vec<Issued>,
        applied: Vec<Applied>,
    }

    impl Trace {
        /// Master `by` = (node, dc) issues `ver` for a write from DC `origin`, staying master.
        fn issue(
            &mut self,
            ver: TlVersion,
            by: (u32, u32),
            origin: u32,
            c: Option<&str>,
            at: u64,
        ) -> &mut Issued {
            self.issued.push(Issued {
                key: Key::from("k"),
                ver,
                kind: IssueKind::Write,
                content: content(c),
                by_node: NodeId(by.0),
                by_dc: DcId(by.1),
                origin_dc: DcId(origin),
                new_master_node: NodeId(by.0),
                new_master_dc: DcId(by.1),
                at,
            });
            self.issued.last_mut().unwrap()
        }

        fn apply(&mut self, node: u32, ver: TlVersion, c: Option<&str>, at: u64) {
            self.applied.push(Applied {
                key: Key::from("k"),
                node: NodeId(node),
                ver,
                content: content(c),
                at,
            });
        }
    }

    /// Names `to` = (node, dc) as the new master.
    fn hand_to(i: &mut Issued, to: (u32, u32)) -> &mut Issued {
        i.new_master_node = NodeId(to.0);
        i.new_master_dc = DcId(to.1);
        i
    }

    /// Master n1 in dc0; replicas n1, n2 (dc0) and n3 (dc1). n2 skips 1.0.2, n3 lags and
    /// receives 1.0.2 twice.
    fn base() -> Trace {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20);
        t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30);
        t.apply(1, v(1, 0, 1), Some("a"), 10);
        t.apply(1, v(1, 0, 2), Some("b"), 20);
        t.apply(1, v(1, 0, 3), Some("c"), 30);
        t.apply(2, v(1, 0, 1), Some("a"), 15);
        t.apply(2, v(1, 0, 3), Some("c"), 40);
        t.apply(3, v(1, 0, 2), Some("b"), 50);
        t.apply(3, v(1, 0, 2), Some("b"), 55);
        t
    }

    fn fails(verdict: &Verdict, needle: &str) {
        assert_eq!(verdict.status(), Status::Fail, "{verdict}");
        assert!(
            verdict
                .violations
                .iter()
                .any(|x| x.explanation.contains(needle)),
            "no violation mentions {needle:?}: {verdict}"
        );
    }

    fn trace_verdicts(t: &Trace, threshold: usize) -> Vec<Verdict> {
        vec![
            check_order(&t.issued, &t.applied),
            check_forks(&t.issued, &t.applied),
            check_single_writer(&t.issued),
            check_migration(&t.issued, threshold),
        ]
    }

    #[test]
    fn versions_order_by_epoch_then_generation_and_print_dotted() {
        assert!(v(1, 0, 9) < v(1, 1, 0));
        assert!(v(1, 7, 9) < v(2, 7, 1));
        // A higher master epoch outranks a later generation of a lower one.
        assert!(v(2, 0, 1) < v(1, 1, 1));
        assert_eq!(v(1_700, 2, 15).to_string(), "1700.2.15");
    }

    #[test]
    fn lagging_replicas_that_skip_versions_and_equal_reapplies_pass() {
        let t = base();
        for verdict in trace_verdicts(&t, 3) {
            assert!(verdict.passed(), "{verdict}");
        }
        let order = check_order(&t.issued, &t.applied);
        assert!(
            order
                .checked
                .starts_with("7 applies in 3 (key, replica) logs")
        );
    }

    #[test]
    fn a_replica_applying_out_of_order_fails() {
        let mut t = base();
        t.apply(2, v(1, 0, 2), Some("b"), 60);
        let verdict = check_order(&t.issued, &t.applied);
        fails(
            &verdict,
            "replica n2 went back: it applied 1.0.2 at 60µs after 1.0.3",
        );
        assert_eq!(verdict.violations.len(), 1);
        // A re-applied duplicate of an older version is going back too.
        let mut t = base();
        t.apply(3, v(1, 0, 3), Some("c"), 60);
        t.apply(3, v(1, 0, 2), Some("b"), 70);
        fails(&check_order(&t.issued, &t.applied), "replica n3 went back");
    }

    #[test]
    fn phantom_early_and_unequal_reapplies_fail() {
        let mut t = base();
        t.apply(3, v(1, 0, 9), Some("z"), 60);
        fails(
            &check_order(&t.issued, &t.applied),
            "phantom version: replica n3 applied 1.0.9",
        );

        let mut t = base();
        t.apply(3, v(1, 0, 3), Some("c"), 25);
        fails(
            &check_order(&t.issued, &t.applied),
            "before n1 issued it at 30µs",
        );

        let mut t = base();
        t.apply(3, v(1, 0, 2), Some("B"), 56);
        let order = check_order(&t.issued, &t.applied);
        fails(&order, "re-applied 1.0.2 at 56µs with \"B\"");
        fails(&check_forks(&t.issued, &t.applied), "fork at 1.0.2");
    }

    #[test]
    fn a_master_issuing_a_lower_version_fails() {
        let mut t = base();
        t.issue(v(1, 0, 2), (1, 0), 0, Some("d"), 40); // seq not bumped: issued twice
        t.issue(v(1, 0, 1), (1, 0), 0, Some("e"), 50).ver = v(1, 0, 0);
        let order = check_order(&t.issued, &t.applied);
        fails(
            &order,
            "issued out of order: n1 issued 1.0.0 at 50µs after n1 had issued 1.0.3",
        );
        assert_eq!(
            order.violations.len(),
            1,
            "the duplicate is timeline-forks' job"
        );
        let forks = check_forks(&t.issued, &t.applied);
        fails(&forks, "1.0.2 was issued twice by n1 (at 20µs and 40µs)");
        fails(
            &forks,
            "fork at 1.0.2: master n1 (issued at 20µs), n1 (applied at 20µs)",
        );
    }

    #[test]
    fn a_fork_between_replicas_fails() {
        let mut t = base();
        t.apply(2, v(1, 0, 4), Some("x"), 60);
        t.apply(3, v(1, 0, 4), Some("y"), 61);
        let verdict = check_forks(&t.issued, &t.applied);
        fails(
            &verdict,
            "fork at 1.0.4: n2 (applied at 60µs) had \"x\"; n3 (applied at 61µs) had \"y\"",
        );
        // A replica disagreeing with what the master issued is a fork too.
        let mut t = base();
        t.apply(2, v(1, 0, 2), None, 60);
        fails(&check_forks(&t.issued, &t.applied), "had a tombstone");
    }

    #[test]
    fn a_version_issued_by_two_nodes_fails() {
        let mut t = base();
        t.issue(v(1, 0, 3), (2, 0), 0, Some("c"), 35);
        let forks = check_forks(&t.issued, &t.applied);
        fails(
            &forks,
            "1.0.3 was issued by n1 (dc0) at 30µs and by n2 (dc0) at 35µs",
        );
        assert_eq!(
            forks.violations.len(),
            1,
            "same content: no fork, only the double issue"
        );
    }

    #[test]
    fn two_writers_without_migration_fail() {
        let mut t = base();
        t.issue(v(1, 0, 4), (2, 0), 0, Some("d"), 40);
        let verdict = check_single_writer(&t.issued);
        fails(
            &verdict,
            "two writers: n2 issued 1.0.4 at 40µs, but the master named by 1.0.3 (issued by n1 \
             at 30µs) is n1",
        );
    }

    /// T = 3, master n1 in dc0: three writes from dc1 move it to n3 in dc1, which continues.
    fn migrating() -> Trace {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 20);
        t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30);
        hand_to(t.issue(v(1, 0, 4), (1, 0), 1, Some("d"), 40), (3, 1));
        t.issue(v(1, 0, 5), (3, 1), 1, Some("e"), 50);
        t
    }

    #[test]
    fn migration_exactly_at_t_hands_over_the_pen() {
        let t = migrating();
        for verdict in trace_verdicts(&t, 3) {
            assert!(verdict.passed(), "{verdict}");
        }
        let migration = check_migration(&t.issued, 3);
        assert_eq!(
            migration.checked,
            "4 writes on 1 keys with T = 3 (1 migrations)"
        );
        let writer = check_single_writer(&t.issued);
        assert!(writer.checked.contains("1 hand-overs"), "{writer}");
        // With T = 4 the same move comes one write early.
        fails(
            &check_migration(&t.issued, 4),
            "migration without 4 consecutive foreign writes: 1.0.4 at 40µs moved the master \
             from n1 (dc0) to n3 (dc1), but the last writes were dc1 (1.0.4), dc1 (1.0.3), dc1 \
             (1.0.2), dc0 (1.0.1)",
        );
    }

    #[test]
    fn the_old_master_writing_after_handing_over_fails() {
        let mut t = migrating();
        t.issue(v(1, 0, 6), (1, 0), 0, Some("f"), 60);
        fails(
            &check_single_writer(&t.issued),
            "two writers: n1 issued 1.0.6 at 60µs, but it had handed mastership to n3 (dc1) with \
             1.0.4 at 40µs and the master named by 1.0.5 is n3: the old master kept writing",
        );
    }

    #[test]
    fn a_migration_without_t_foreign_writes_fails() {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 20);
        hand_to(t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30), (3, 1));
        let verdict = check_migration(&t.issued, 3);
        fails(&verdict, "migration without 3 consecutive foreign writes");
        fails(
            &verdict,
            "the last writes were dc1 (1.0.3), dc1 (1.0.2), dc0 (1.0.1)",
        );
        assert!(
            check_single_writer(&t.issued).passed(),
            "the hand-over itself is recorded"
        );
        fails(
            &check_migration(&t.issued, 0),
            "migration while disabled (T = 0)",
        );
    }

    #[test]
    fn a_missed_or_misdirected_migration_fails() {
        let mut t = migrating();
        hand_to(&mut t.issued[3], (1, 0));
        t.issued[4].by_node = NodeId(1);
        t.issued[4].by_dc = DcId(0);
        t.issued[4].new_master_node = NodeId(1);
        t.issued[4].new_master_dc = DcId(0);
        let verdict = check_migration(&t.issued, 3);
        fails(
            &verdict,
            "missed migration: the last 3 writes (dc1 (1.0.4), dc1 (1.0.3), dc1 (1.0.2), newest \
             first) all came from dc1, not master n1 (dc0)'s DC, yet 1.0.4 at 40µs kept the \
             master",
        );
        assert_eq!(
            verdict.violations.len(),
            2,
            "1.0.5 is due as well: {verdict}"
        );

        let mut t = migrating();
        hand_to(&mut t.issued[3], (5, 2));
        fails(&check_migration(&t.issued, 3), "migration to the wrong DC");
    }

    #[test]
    fn the_window_spans_masters_and_generations_but_restarts_at_an_insert() {
        // After moving to dc1, three dc0 writes move the master back: the window spans masters.
        let mut t = migrating();
        t.issue(v(1, 0, 6), (3, 1), 0, Some("f"), 60);
        t.issue(v(1, 0, 7), (3, 1), 0, None, 70); // a delete counts as a write
        // A re-insert over the tombstone is a write of the same master: the third dc0 write.
        hand_to(t.issue(v(2, 0, 1), (3, 1), 0, Some("g"), 80), (2, 0));
        for verdict in trace_verdicts(&t, 3) {
            assert!(verdict.passed(), "{verdict}");
        }
        // Had the tombstone been collected, the arbiter's insert restarts the window.
        let mut t2 = migrating();
        t2.issue(v(1, 0, 6), (3, 1), 0, Some("f"), 60);
        t2.issue(v(1, 0, 7), (3, 1), 0, None, 70);
        t2.issue(v(2, 0, 1), (1, 0), 0, Some("g"), 80).kind = IssueKind::Insert;
        t2.issue(v(2, 0, 2), (1, 0), 1, Some("h"), 90);
        for verdict in trace_verdicts(&t2, 3) {
            assert!(verdict.passed(), "{verdict}");
        }
        hand_to(&mut t2.issued[8], (3, 1));
        fails(&check_migration(&t2.issued, 3), "migration without 3");
    }

    #[test]
    fn an_insert_names_the_arbiter_or_an_origin_dc_replica() {
        let mut t = Trace::default();
        hand_to(t.issue(v(1, 0, 1), (1, 0), 1, Some("a"), 10), (3, 1)).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (3, 1), 1, Some("b"), 20);
        for verdict in trace_verdicts(&t, 3) {
            assert!(verdict.passed(), "{verdict}");
        }
        hand_to(&mut t.issued[0], (5, 2));
        fails(
            &check_migration(&t.issued, 3),
            "inserted 1.0.1 at 10µs naming n5 (dc2)",
        );
    }

    /// n1 (dc0) masters k and hands it to n3 (dc1) with 1.0.4; `n3_got_it`: n3 stored it.
    /// n1 then crashes losing its unsynced writes (its next life logs as n10001), and writes
    /// again in a new generation over 1.0.3, the record its disk kept.
    fn lost_hand_over(n3_got_it: bool) -> Trace {
        let mut t = base();
        hand_to(t.issue(v(1, 0, 4), (1, 0), 1, Some("d"), 40), (3, 1));
        t.apply(1, v(1, 0, 4), Some("d"), 40);
        if n3_got_it {
            t.apply(3, v(1, 0, 4), Some("d"), 45);
        }
        t.issue(v(2, 0, 1), (1, 0), 0, Some("e"), 60);
        t.apply(10_001, v(2, 0, 1), Some("e"), 60);
        t
    }

    #[test]
    fn a_hand_over_a_crash_erased_everywhere_does_not_bind_the_old_master() {
        // Regression (timeline-fsync seed 20, 20 s): the issue log alone shows n1 writing
        // after it handed the record over.
        let t = lost_hand_over(false);
        fails(
            &check_single_writer(&t.issued),
            "two writers: n1 re-inserted with 2.0.1",
        );
        // The apply log shows nobody else ever held 1.0.4, and n1 lost the life that did.
        let writer = check_single_writer_with(&t.issued, &t.applied);
        assert!(writer.passed(), "{writer}");
        assert!(writer.checked.contains("1 erased by crashes"), "{writer}");
        for verdict in [
            check_order(&t.issued, &t.applied),
            check_forks(&t.issued, &t.applied),
        ] {
            assert!(verdict.passed(), "{verdict}");
        }
        // Nor does an erased write count in the migration window: n1's dc1 write 1.0.4 (from
        // the lost life) and its next dc1 write 2.0.1 follow 1.0.3 from dc1, yet only two of
        // the surviving last three came from dc1, so 2.0.1 rightly kept the master.
        let mut t = lost_hand_over(false);
        t.issued[3].new_master_node = NodeId(1);
        t.issued[3].new_master_dc = DcId(0);
        t.issued[4].origin_dc = DcId(1);
        fails(&check_migration(&t.issued, 3), "missed migration");
        let migration = check_migration_with_applied(&t.issued, &t.applied, 3, &BTreeMap::new());
        assert!(migration.passed(), "{migration}");
        // A hand-over the new master stored binds the old master, crash or not.
        let t = lost_hand_over(true);
        fails(
            &check_single_writer_with(&t.issued, &t.applied),
            "two writers: n1 re-inserted with 2.0.1",
        );
        // So does one the old master's life still holds (it never lost a life).
        let mut t = lost_hand_over(false);
        t.applied.last_mut().unwrap().node = NodeId(1);
        fails(
            &check_single_writer_with(&t.issued, &t.applied),
            "two writers: n1 re-inserted with 2.0.1",
        );
    }

    #[test]
    fn a_second_generation_over_a_live_record_fails() {
        let mut t = base();
        t.issue(v(2, 0, 1), (2, 0), 0, Some("x"), 40).kind = IssueKind::Insert;
        fails(
            &check_single_writer(&t.issued),
            "n2 started generation 2 with 2.0.1 at 40µs while the record was live",
        );
        // After a delete the arbiter may start one, from any node.
        let mut t = base();
        t.issue(v(1, 0, 4), (1, 0), 0, None, 40);
        t.issue(v(2, 0, 1), (2, 0), 0, Some("x"), 50).kind = IssueKind::Insert;
        assert!(check_single_writer(&t.issued).passed());
        // But a re-insert written by another node than the tombstone's master is a second writer.
        t.issued[4].kind = IssueKind::Write;
        fails(
            &check_single_writer(&t.issued),
            "two writers: n2 re-inserted with 2.0.1",
        );
    }

    /// n1 (dc0) masters k; n3 (dc1) is forced master while n1, cut off, still writes 1.0.3.
    fn forced() -> Trace {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20);
        t.issue(v(1, 1, 1), (3, 1), 1, Some("b"), 30).kind = IssueKind::ForceMaster;
        t.issue(v(1, 0, 3), (1, 0), 0, Some("lost"), 35);
        t.issue(v(1, 1, 2), (3, 1), 1, Some("c"), 40);
        for (node, at) in [(1, 0), (2, 5)] {
            t.apply(node, v(1, 0, 1), Some("a"), 10 + at);
            t.apply(node, v(1, 0, 2), Some("b"), 20 + at);
            t.apply(node, v(1, 0, 3), Some("lost"), 35 + at);
            t.apply(node, v(1, 1, 1), Some("b"), 60 + at);
            t.apply(node, v(1, 1, 2), Some("c"), 70 + at);
        }
        t.apply(3, v(1, 0, 2), Some("b"), 25);
        t.apply(3, v(1, 1, 1), Some("b"), 30);
        t.apply(3, v(1, 1, 2), Some("c"), 40);
        t
    }

    #[test]
    fn a_deposed_masters_writes_are_fenced_not_reordered() {
        let t = forced();
        for verdict in trace_verdicts(&t, 3) {
            assert!(verdict.passed(), "{verdict}");
        }
        let writer = check_single_writer(&t.issued);
        assert!(
            writer
                .checked
                .contains("1 forced re-masters, 1 versions by deposed masters"),
            "{writer}"
        );
        // The deposed master must still increase within its reign, and only it may write there.
        let mut t2 = forced();
        t2.issued[3].ver = v(1, 0, 0);
        fails(
            &check_order(&t2.issued, &t2.applied),
            "issued out of order: n1 issued 1.0.0 at 35µs after n1 had issued 1.0.2 at 20µs",
        );
        let mut t3 = forced();
        t3.issued[3].by_node = NodeId(2);
        fails(
            &check_single_writer(&t3.issued),
            "two writers: n2 issued 1.0.3",
        );
    }

    #[test]
    fn only_a_forced_re_master_raises_mepoch() {
        let mut t = forced();
        t.issued[2].kind = IssueKind::Write;
        fails(
            &check_single_writer(&t.issued),
            "n3 issued 1.1.1 at 30µs as a write, raising mepoch over 1.0.2",
        );
        let mut t = forced();
        hand_to(&mut t.issued[2], (1, 0));
        fails(&check_single_writer(&t.issued), "named n1 master");
        // A new reign below the current one by a node that never mastered that epoch is no
        // deposed master.
        let mut t = forced();
        t.issued[3].ver = v(2, 0, 1);
        t.issued[3].by_node = NodeId(2);
        fails(
            &check_single_writer(&t.issued),
            "in a new reign 2.0 below the current reign 1.1",
        );
        // The deposed master itself may open a new generation in its fenced epoch (its first
        // write after a restart or a hand-over does): fenced, not a violation.
        let mut t = forced();
        t.issued[3].ver = v(2, 0, 1);
        let verdict = check_single_writer(&t.issued);
        assert!(verdict.passed(), "{verdict}");
    }

    #[test]
    fn a_forced_re_master_continues_the_window_of_the_record_it_copied() {
        // n1 (dc0) masters k. Cut off, it takes two more writes from dc0 (1.0.3, 1.0.4) that
        // n3 (dc1) never receives; n3 is forced master from its copy 1.0.2 (recent [0, 1]),
        // and the next write from dc0 makes [0, 0, 1]: no migration is due. Continuing the
        // deposed master's window [0, 0, 0] would wrongly call it a missed migration.
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 1, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20);
        t.issue(v(1, 0, 3), (1, 0), 0, Some("c"), 30);
        t.issue(v(1, 0, 4), (1, 0), 0, Some("d"), 35);
        t.issue(v(1, 1, 1), (3, 1), 1, Some("b"), 40).kind = IssueKind::ForceMaster;
        t.issue(v(1, 1, 2), (3, 1), 0, Some("e"), 50);
        let verdict = check_migration(&t.issued, 3);
        assert!(verdict.passed(), "{verdict}");
        // One more write from dc0 completes three in a row: now the master must move.
        t.issue(v(1, 1, 3), (3, 1), 0, Some("f"), 60);
        fails(&check_migration(&t.issued, 3), "missed migration");
    }

    #[test]
    fn migration_targets_excuse_a_migration_to_no_one_and_pin_the_replica() {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 1, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 20);
        t.issue(v(1, 0, 3), (1, 0), 1, Some("c"), 30);
        fails(&check_migration(&t.issued, 3), "missed migration");
        // n1 believed no replica of dc1 up: the migration had nowhere to go.
        let mut targets = MigrationTargets::new();
        targets.insert((Key::from("k"), v(1, 0, 3)), MigrationTarget::FirstUp(None));
        let verdict = check_migration_with(&t.issued, 3, &targets);
        assert!(verdict.passed(), "{verdict}");
        assert!(
            verdict.checked.contains("1 due with no replica"),
            "{verdict}"
        );
        // A migration must go to the first up replica of the origin DC.
        hand_to(&mut t.issued[2], (4, 1));
        let first_up = |n| MigrationTarget::FirstUp(Some(NodeId(n)));
        targets.insert((Key::from("k"), v(1, 0, 3)), first_up(3));
        fails(
            &check_migration_with(&t.issued, 3, &targets),
            "migration to the wrong replica: 1.0.3 at 30µs moved the master from n1 (dc0) to \
             n4 (dc1), but the first replica of the key in dc1 that n1 believed up was n3",
        );
        targets.insert((Key::from("k"), v(1, 0, 3)), first_up(4));
        assert!(check_migration_with(&t.issued, 3, &targets).passed());
        // A master a layout change took off the key's preference list hands over at once.
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        hand_to(t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 20), (2, 0));
        fails(&check_migration(&t.issued, 3), "migration without 3");
        let targets =
            MigrationTargets::from([((Key::from("k"), v(1, 0, 2)), MigrationTarget::NotAPrimary)]);
        let verdict = check_migration_with(&t.issued, 3, &targets);
        assert!(verdict.passed(), "{verdict}");
        assert!(verdict.checked.contains("1 by masters no longer primaries"));
    }

    /// A primary's final record: version, content, master.
    type Held<'a> = Option<(TlVersion, Option<&'a str>, u32)>;

    fn finals(list: &[(u32, Held<'_>)]) -> TlFinals {
        let per = list
            .iter()
            .map(|(n, r)| {
                let r = r.map(|(ver, c, m)| TlFinal {
                    ver,
                    content: content(c),
                    master: NodeId(m),
                });
                (NodeId(*n), r)
            })
            .collect();
        BTreeMap::from([(Key::from("k"), per)])
    }

    #[test]
    fn convergence_needs_equal_records_holding_the_highest_version() {
        let t = base();
        let top = Some((v(1, 0, 3), Some("c"), 1));
        let ok = finals(&[(1, top), (2, top), (3, top)]);
        let verdict = check_converged(&t.issued, &ok, true);
        assert!(verdict.passed(), "{verdict}");
        let lagging = finals(&[(1, top), (2, top), (3, Some((v(1, 0, 2), Some("b"), 1)))]);
        fails(
            &check_converged(&t.issued, &lagging, true),
            "replicas diverge after quiescence: n1 holds 1.0.3 \"c\" (master n1)",
        );
        let missing = finals(&[(1, top), (2, top), (3, None)]);
        fails(
            &check_converged(&t.issued, &missing, false),
            "n3 holds no record",
        );
        // Equal, but below what a master issued: a lost version (unless not asserted).
        let old = Some((v(1, 0, 2), Some("b"), 1));
        let lost = finals(&[(1, old), (2, old), (3, old)]);
        fails(
            &check_converged(&t.issued, &lost, true),
            "lost version: every primary holds 1.0.2 \"b\" (master n1), but n1 issued 1.0.3",
        );
        assert!(check_converged(&t.issued, &lost, false).passed());
        // A deposed master's fenced versions rank below the forced epoch.
        let f = forced();
        let top = Some((v(1, 1, 2), Some("c"), 3));
        let ok = finals(&[(1, top), (2, top), (3, top)]);
        let verdict = check_converged(&f.issued, &ok, true);
        assert!(verdict.passed(), "{verdict}");
    }

    /// Hand-made client operations on key `k`.
    #[derive(Default)]
    struct Ops {
        h: TlHistory,
    }

    impl Ops {
        fn op(&mut self, client: u32, op: TlOp, t: (u64, u64), result: TlResult) -> OpId {
            let id = self
                .h
                .invoke(ClientId(client), DcId(client % 2), "k", op, t.0);
            self.h.complete(id, result, t.1);
            id
        }

        fn write(&mut self, client: u32, value: &str, t: (u64, u64), ver: TlVersion) -> OpId {
            let op = TlOp::Write {
                value: Value::from(value.to_string()),
            };
            self.op(client, op, t, TlResult::Written { ver })
        }

        fn tas(
            &mut self,
            client: u32,
            expected: Option<TlVersion>,
            value: &str,
            t: (u64, u64),
            result: TlResult,
        ) -> OpId {
            let value = Value::from(value.to_string());
            self.op(client, TlOp::TestAndSet { expected, value }, t, result)
        }

        fn read(
            &mut self,
            client: u32,
            op: TlOp,
            t: (u64, u64),
            ver: Option<TlVersion>,
            value: Option<&str>,
        ) -> OpId {
            let value = content(value);
            self.op(client, op, t, TlResult::Read { ver, value })
        }
    }

    const CRIT: fn(TlVersion) -> TlOp = |min| TlOp::ReadCritical { min };

    /// 1.0.1 "a" issued at 10, 1.0.2 "b" at 30, a tombstone 1.0.3 at 50; the two writes and the
    /// delete acknowledged; reads that the spec allows.
    fn reads() -> (Trace, Ops) {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 30);
        t.issue(v(1, 0, 3), (1, 0), 0, None, 50);
        let mut o = Ops::default();
        o.write(1, "a", (5, 12), v(1, 0, 1));
        o.write(1, "b", (25, 32), v(1, 0, 2));
        o.op(
            1,
            TlOp::Delete,
            (45, 52),
            TlResult::Written { ver: v(1, 0, 3) },
        );
        o.read(2, TlOp::ReadLatest, (28, 31), Some(v(1, 0, 1)), Some("a")); // concurrent
        o.read(2, TlOp::ReadAny, (40, 41), Some(v(1, 0, 1)), Some("a")); // stale is fine
        o.read(3, CRIT(v(1, 0, 1)), (33, 34), Some(v(1, 0, 2)), Some("b"));
        o.read(3, TlOp::ReadLatest, (60, 61), Some(v(1, 0, 3)), None);
        o.read(3, TlOp::ReadLatest, (62, 63), None, None); // a tombstone as not found
        o.read(2, TlOp::ReadAny, (0, 1), None, None);
        (t, o)
    }

    #[test]
    fn allowed_reads_pass() {
        let (t, o) = reads();
        let verdict = check_reads(&t.issued, &o.h).unwrap();
        assert!(verdict.passed(), "{verdict}");
        assert_eq!(
            verdict.checked,
            "6 reads (1 read_critical, 3 read_latest) and 3 acknowledged writes on 1 keys"
        );
        assert!(check_linearizability(&t.issued, &o.h).unwrap().passed());
    }

    #[test]
    fn a_stale_read_critical_fails() {
        let (t, mut o) = reads();
        let r = o.read(4, CRIT(v(1, 0, 2)), (40, 45), Some(v(1, 0, 1)), Some("a"));
        let verdict = check_reads(&t.issued, &o.h).unwrap();
        fails(
            &verdict,
            "stale read_critical: op9 (c4 in dc0: read_critical(≥ 1.0.2)",
        );
        assert_eq!(verdict.violations[0].ops, vec![r]);
        let (t, mut o) = reads();
        o.read(4, CRIT(v(1, 0, 2)), (40, 45), None, None);
        fails(
            &check_reads(&t.issued, &o.h).unwrap(),
            "returned not found), below",
        );
    }

    #[test]
    fn a_read_latest_missing_an_acknowledged_write_fails() {
        let (t, mut o) = reads();
        let r = o.read(4, TlOp::ReadLatest, (35, 38), Some(v(1, 0, 1)), Some("a"));
        let verdict = check_reads(&t.issued, &o.h).unwrap();
        fails(
            &verdict,
            "stale read_latest: op9 (c4 in dc0: read_latest, invoked at 35µs, completed at 38µs, \
             returned 1.0.1 \"a\"), but op1 (c1 in dc1: write \"b\", invoked at 25µs, completed \
             at 32µs, acknowledged as 1.0.2) had been acknowledged",
        );
        assert_eq!(verdict.violations[0].ops, vec![r, OpId(1)]);
        fails(
            &check_linearizability(&t.issued, &o.h).unwrap(),
            "not linearizable",
        );
        // Not found is no answer after a live write.
        let (t, mut o) = reads();
        o.read(4, TlOp::ReadLatest, (35, 38), None, None);
        fails(&check_reads(&t.issued, &o.h).unwrap(), "stale read_latest");
    }

    #[test]
    fn reads_of_unissued_or_altered_versions_fail() {
        let (t, mut o) = reads();
        o.read(4, TlOp::ReadAny, (40, 41), Some(v(1, 0, 9)), Some("z"));
        o.read(4, TlOp::ReadAny, (42, 43), Some(v(1, 0, 2)), Some("x"));
        o.read(4, TlOp::ReadAny, (20, 21), Some(v(1, 0, 2)), Some("b"));
        let verdict = check_reads(&t.issued, &o.h).unwrap();
        fails(&verdict, "phantom read: op9");
        fails(&verdict, "wrong content: op10");
        fails(&verdict, "read from the future: op11");
        assert_eq!(verdict.violations.len(), 3, "{verdict}");
    }

    #[test]
    fn acknowledged_writes_must_have_been_issued_while_they_ran() {
        let (t, mut o) = reads();
        o.write(4, "q", (70, 80), v(1, 0, 4));
        o.write(4, "b", (70, 80), v(1, 0, 2));
        let verdict = check_reads(&t.issued, &o.h).unwrap();
        fails(&verdict, "phantom acknowledgement: op9");
        fails(&verdict, "issued 1.0.2 at 30µs, outside the operation");
    }

    /// 1.0.1 "a" (10), then TAS calls on 1.0.1: op1 wins with 1.0.2 "b" (30), op2 loses seeing
    /// 1.0.2, op3 ran before 1.0.1 existed.
    fn tas() -> (Trace, Ops) {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 10).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 1, Some("b"), 30);
        let mut o = Ops::default();
        o.write(1, "a", (5, 12), v(1, 0, 1));
        let won = TlResult::Written { ver: v(1, 0, 2) };
        o.tas(2, Some(v(1, 0, 1)), "b", (20, 40), won);
        let lost = TlResult::Mismatch {
            current: Some(v(1, 0, 2)),
        };
        o.tas(3, Some(v(1, 0, 1)), "x", (22, 42), lost);
        o.tas(
            4,
            Some(v(1, 0, 1)),
            "y",
            (6, 9),
            TlResult::Mismatch { current: None },
        );
        (t, o)
    }

    #[test]
    fn one_winner_and_losers_seeing_it_pass() {
        let (t, o) = tas();
        let verdict = check_tas(&t.issued, &o.h).unwrap();
        assert!(verdict.passed(), "{verdict}");
        assert_eq!(
            verdict.checked,
            "3 test_and_set calls on 1 keys (1 succeeded, 2 mismatched)"
        );
        assert!(check_reads(&t.issued, &o.h).unwrap().passed());
        assert!(check_linearizability(&t.issued, &o.h).unwrap().passed());
    }

    #[test]
    fn two_successful_tas_on_one_expected_version_fail() {
        let (mut t, mut o) = tas();
        t.issue(v(1, 0, 3), (1, 0), 0, Some("z"), 35);
        let second = o.tas(
            5,
            Some(v(1, 0, 1)),
            "z",
            (21, 41),
            TlResult::Written { ver: v(1, 0, 3) },
        );
        let verdict = check_tas(&t.issued, &o.h).unwrap();
        fails(&verdict, "2 test_and_set calls expecting 1.0.1 succeeded");
        fails(
            &verdict,
            "but 1.0.3 was issued over 1.0.2: it did not apply on the expected 1.0.1",
        );
        assert_eq!(verdict.violations[0].ops, vec![OpId(1), second]);
        fails(
            &check_linearizability(&t.issued, &o.h).unwrap(),
            "cas applied, so it needs \"1.0.1\"",
        );
    }

    #[test]
    fn a_loser_reporting_less_than_the_winner_fails() {
        let (t, mut o) = tas();
        // Started after 1.0.1 was issued, yet saw nothing newer than... nothing.
        o.tas(
            5,
            Some(v(1, 0, 1)),
            "w",
            (15, 45),
            TlResult::Mismatch { current: None },
        );
        let verdict = check_tas(&t.issued, &o.h).unwrap();
        fails(&verdict, "op4 (c5 in dc1: test_and_set(1.0.1) \"w\"");
        fails(&verdict, "lost to op1");
        fails(&verdict, "stale mismatch");
        // A mismatch naming the expected version contradicts itself.
        let (t, mut o) = tas();
        let own = TlResult::Mismatch {
            current: Some(v(1, 0, 1)),
        };
        o.tas(5, Some(v(1, 0, 1)), "w", (15, 45), own);
        fails(
            &check_tas(&t.issued, &o.h).unwrap(),
            "must name another version",
        );
        // So does insert-if-absent rejected on an absent record.
        let (t, mut o) = tas();
        o.tas(5, None, "w", (50, 55), TlResult::Mismatch { current: None });
        fails(
            &check_tas(&t.issued, &o.h).unwrap(),
            "fails only on a live record",
        );
    }

    #[test]
    fn a_write_tas_read_latest_history_is_linearizable() {
        let mut t = Trace::default();
        t.issue(v(1, 0, 1), (1, 0), 0, Some("a"), 5).kind = IssueKind::Insert;
        t.issue(v(1, 0, 2), (1, 0), 0, Some("b"), 30);
        t.issue(v(1, 0, 3), (1, 0), 0, Some("c"), 55);
        t.issue(v(1, 0, 4), (1, 0), 0, None, 75);
        t.issue(v(2, 0, 1), (1, 0), 0, Some("e"), 97);
        t.issue(v(2, 0, 2), (1, 0), 0, Some("x"), 125);
        let mut o = Ops::default();
        o.write(1, "a", (0, 10), v(1, 0, 1));
        o.write(1, "b", (20, 40), v(1, 0, 2));
        o.read(2, TlOp::ReadLatest, (25, 28), Some(v(1, 0, 1)), Some("a"));
        o.read(3, TlOp::ReadLatest, (32, 35), Some(v(1, 0, 2)), Some("b"));
        o.tas(
            1,
            Some(v(1, 0, 2)),
            "c",
            (50, 60),
            TlResult::Written { ver: v(1, 0, 3) },
        );
        let lost = TlResult::Mismatch {
            current: Some(v(1, 0, 3)),
        };
        o.tas(2, Some(v(1, 0, 2)), "d", (52, 62), lost);
        o.op(
            1,
            TlOp::Delete,
            (70, 80),
            TlResult::Written { ver: v(1, 0, 4) },
        );
        o.read(2, TlOp::ReadLatest, (85, 90), Some(v(1, 0, 4)), None);
        o.tas(
            3,
            None,
            "e",
            (95, 100),
            TlResult::Written { ver: v(2, 0, 1) },
        );
        o.read(2, TlOp::ReadLatest, (105, 110), Some(v(2, 0, 1)), Some("e"));
        // Timed out, but the issue log shows it happened as 2.0.2.
        let unknown = TlOp::Write {
            value: Value::from("x"),
        };
        o.op(1, unknown, (120, 130), TlResult::Unknown("timeout".into()));
        o.read(3, TlOp::ReadLatest, (140, 150), Some(v(2, 0, 2)), Some("x"));
        // Failed for sure, and never issued.
        let failed = TlOp::Write {
            value: Value::from("y"),
        };
        o.op(
            2,
            failed,
            (150, 160),
            TlResult::Failed("master_unavailable".into()),
        );
        let verdict = check_linearizability(&t.issued, &o.h).unwrap();
        assert!(verdict.passed(), "{verdict}");
        assert_eq!(
            verdict.checked,
            "write, test_and_set, delete and read_latest: 12 operations on 1 keys"
        );
        for verdict in check_all(&t.issued, &t.applied, &o.h, 3).unwrap() {
            assert!(verdict.passed(), "{verdict}");
        }

        // Without the issue of 2.0.2, the unknown write never happened: reading it is wrong.
        t.issued.pop();
        let verdict = check_linearizability(&t.issued, &o.h).unwrap();
        fails(&verdict, "read \"2.0.2\"");
        assert_eq!(verdict.checker, "timeline-linearizability");
    }

    #[test]
    fn unknown_writes_of_repeated_values_are_undecided() {
        let (t, mut o) = tas();
        let again = TlOp::Write {
            value: Value::from("b"),
        };
        o.op(5, again, (50, 60), TlResult::Unknown("timeout".into()));
        let verdict = check_linearizability(&t.issued, &o.h).unwrap();
        assert_eq!(verdict.status(), Status::Undecided, "{verdict}");
        assert!(
            verdict.undecided[0]
                .reason
                .contains("op4 has an unknown outcome and writes \"b\", like 1 other"),
            "{verdict}"
        );
    }

    #[test]
    fn tl_history_pairs_operations_and_rejects_malformed_ones() {
        let mut h = TlHistory::new();
        let r = h.invoke(ClientId(1), DcId(0), "k", TlOp::ReadLatest, 10);
        h.invoke(ClientId(2), DcId(1), "j", TlOp::Delete, 11);
        h.complete(
            r,
            TlResult::Read {
                ver: Some(v(1, 0, 1)),
                value: content(Some("a")),
            },
            20,
        );
        let ops = h.operations().unwrap();
        assert_eq!(
            ops[0].to_string(),
            "op0 (c1 in dc0: read_latest, invoked at 10µs, completed at 20µs, returned 1.0.1 \"a\")"
        );
        assert_eq!(ops[1].result, TlResult::Unknown("never completed".into()));
        let by_key = h.operations_by_key().unwrap();
        assert_eq!(
            by_key.keys().map(|k| &k[..]).collect::<Vec<_>>(),
            [b"j", b"k"]
        );

        let mut h = TlHistory::new();
        let w = h.invoke(ClientId(1), DcId(0), "k", TlOp::ReadAny, 10);
        h.complete(w, TlResult::Written { ver: v(1, 0, 1) }, 12);
        let err = h.operations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "op0: a read_any cannot return acknowledged as 1.0.1"
        );

        let mut h = TlHistory::new();
        let w = h.invoke(ClientId(1), DcId(0), "k", TlOp::Delete, 10);
        h.complete(w, TlResult::Mismatch { current: None }, 12);
        assert!(matches!(h.operations(), Err(Error::ResultMismatch { .. })));

        let mut h = TlHistory::new();
        let w = h.invoke(ClientId(1), DcId(0), "k", TlOp::Delete, 10);
        h.complete(w, TlResult::Failed("master_unavailable".into()), 9);
        assert!(matches!(
            h.operations(),
            Err(Error::CompletedBeforeInvoked { .. })
        ));
        assert!(check_reads(&[], &h).is_err());
    }
}
