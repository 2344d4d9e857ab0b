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

use super::Verdict;
use crate::error::Error;
use crate::history::{Micros, OpId};
use crate::text;
use meridian_core::{Key, NodeId, Value};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

mod client;
mod converged;
mod history;
mod linearizable;
mod migration;
mod order;
mod writer;

pub use client::{check_fail_fast, check_reads, check_tas};
pub use converged::{TlFinal, TlFinals, check_converged};
pub use history::{
    Applied, IssueKind, Issued, TlEvent, TlHistory, TlOp, TlOperation, TlResult, TlVersion,
};
use history::{Reign, reign, show_reign};
pub use linearizable::{check_linearizability, check_linearizability_with};
pub use migration::{
    MigrationTarget, MigrationTargets, check_migration, check_migration_with,
    check_migration_with_applied,
};
pub use order::{check_forks, check_order};
pub use writer::{check_single_writer, check_single_writer_with};
use writer::{erased_before, erased_versions};

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

#[cfg(test)]
mod tests;
