//! Snapshot isolation (and serializability) of transaction histories, Elle-style.
//!
//! Input: a [`TxnHistory`] of one workload, **list-append** (`append`, `r` of the whole list)
//! or **rw-register** (`w`, `r` of one value; every written value unique per key). The
//! checker builds Adya's dependency graph over the transactions that committed (or may
//! have: an `info` transaction counts once one of its writes is observed) and searches it
//! for the cycles each model forbids, then reports every anomaly with the transactions
//! involved (`T<id>`, the position in [`TxnHistory::txns`]).
//!
//! **What it detects**
//! - non-cycle anomalies: `internal` (a transaction reads something its own earlier
//!   operations contradict), `G1a` (a value written only by a failed transaction is
//!   read), `G1b` (a value some other transaction later overwrote itself is read),
//!   `garbage-read` (a value nobody wrote), `duplicate-elements` and `incompatible-order`
//!   (list-append reads that are not all prefixes of one list), `lost-update` (two committed
//!   transactions read the same version of a key and both write it);
//! - cycles, found per strongly connected component (Tarjan) and classified by edge kinds:
//!   `G0` (ww only), `G1c` (ww and wr), `G-single` (exactly one rw: read skew),
//!   `G-nonadjacent` (several rw, never two in a row), `G2-item` (any other cycle with rw:
//!   write skew; SI allows it, serializability does not);
//! - with [`Model::StrongSessionSnapshotIsolation`], process-order edges between a process's
//!   committed transactions join the graph, and cycles through them are reported as
//!   `G1c-process`, `G-single-process`, `G-nonadjacent-process` (a transaction that misses
//!   its own process's earlier committed writes);
//! - with commit timestamps (`commit_ts` on every committed writer of a key) and the SI
//!   models: rw-register versions are ordered by commit timestamp; list orders that disagree
//!   with it, update transactions with `commit_ts <= snapshot_ts`, and two committed
//!   writers of one key that were concurrent (`ww-conflict`) are reported; with
//!   `snapshot_ts` too, every read must return exactly the newest committed state with
//!   `commit_ts < snapshot_ts` (`stale-snapshot-read`), Clock-SI's read rule.
//!
//! **What it guarantees.** Every anomaly reported is real given the workload's promises
//! (unique values; for list-append, appends are never lost or reordered once read): every
//! edge is implied by the observations. The verdict is deterministic: same history, same
//! report, anomalies in a fixed order.
//!
//! **Limits.** It is sound, not complete. List-append recovers each key's full version order
//! from the longest read (an append nobody read is only known to come after it).
//! rw-register **without commit timestamps infers only a partial version order** (nil
//! before everything; `v < v'` when a transaction reads `v` then writes `v'`), so anomalies
//! that need the rest of the order go unseen. Only one witness cycle is reported per class
//! and component. Real-time order is not used (strict serializability is not checked), and
//! the G-nonadjacent search may miss cycles whose rw edges only appear adjacent because an
//! intermediate version was never observed. The cycle search runs one breadth-first search
//! per rw edge of a component until a witness is found, so a huge component full of allowed
//! write skews costs O(rw edges x edges); a 5 000-transaction serial history checks in tens
//! of milliseconds.
//!
//! The `adya` crate (0.1.0, a JVM-free Elle) builds without its database features, but it
//! is new, keys are strings, and it knows nothing of Meridian's commit and snapshot
//! timestamps; this checker stands alone, and `adya`/`elle-cli` can cross-check the same
//! JSON lines ([`TxnHistory::save`]).

use super::txn_history::{Mop, ReadValue, Txn, TxnHistory, TxnStatus};
use crate::error::Error;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

mod cycles;
mod direct;
mod edges;

/// Which workload a history comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `append` and `r` of whole lists.
    ListAppend,
    /// `w` and `r` of single values.
    RwRegister,
}

/// The consistency model to judge against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// Snapshot isolation: forbids everything below except `G2-item` (write skew).
    SnapshotIsolation,
    /// SI plus: a transaction sees its own process's earlier committed writes.
    StrongSessionSnapshotIsolation,
    /// Serializability: forbids every cycle, `G2-item` included (the timestamp checks,
    /// which state SI's read rule, are not run).
    Serializable,
}

impl Model {
    /// The name Elle uses.
    pub fn name(self) -> &'static str {
        match self {
            Model::SnapshotIsolation => "snapshot-isolation",
            Model::StrongSessionSnapshotIsolation => "strong-session-snapshot-isolation",
            Model::Serializable => "serializable",
        }
    }
}

/// A kind of anomaly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AnomalyKind {
    /// A read contradicts the transaction's own earlier reads and writes.
    Internal,
    /// A read returns a value no transaction wrote.
    GarbageRead,
    /// A list read holds the same element twice.
    DuplicateElements,
    /// Two list reads of a key are not prefixes of one another.
    IncompatibleOrder,
    /// Aborted read: a value written only by a failed transaction is read.
    G1a,
    /// Intermediate read: a value its writer overwrote itself is read by another.
    G1b,
    /// A cycle of ww edges.
    G0,
    /// A cycle of ww and wr edges (at least one wr).
    G1c,
    /// A cycle with exactly one rw edge (read skew).
    GSingle,
    /// A cycle with two or more rw edges, no two adjacent.
    GNonadjacent,
    /// Any other cycle with rw edges (write skew): SI allows it.
    G2Item,
    /// Two committed transactions read the same version of a key and both write it.
    LostUpdate,
    /// A G1c cycle through process order (strong session).
    G1cProcess,
    /// A G-single cycle through process order (strong session).
    GSingleProcess,
    /// A G-nonadjacent cycle through process order (strong session).
    GNonadjacentProcess,
    /// Timestamps: two committed writers of a key were concurrent (first committer wins).
    WwConflict,
    /// Timestamps: a read is not the newest committed state below the snapshot timestamp.
    StaleSnapshotRead,
    /// Timestamps: an update commits at or below its snapshot, or a list's order disagrees
    /// with its appenders' commit timestamps.
    TimestampOrder,
}

impl AnomalyKind {
    /// The name Elle uses (or ours, for the timestamp checks).
    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::Internal => "internal",
            AnomalyKind::GarbageRead => "garbage-read",
            AnomalyKind::DuplicateElements => "duplicate-elements",
            AnomalyKind::IncompatibleOrder => "incompatible-order",
            AnomalyKind::G1a => "G1a",
            AnomalyKind::G1b => "G1b",
            AnomalyKind::G0 => "G0",
            AnomalyKind::G1c => "G1c",
            AnomalyKind::GSingle => "G-single",
            AnomalyKind::GNonadjacent => "G-nonadjacent",
            AnomalyKind::G2Item => "G2-item",
            AnomalyKind::LostUpdate => "lost-update",
            AnomalyKind::G1cProcess => "G1c-process",
            AnomalyKind::GSingleProcess => "G-single-process",
            AnomalyKind::GNonadjacentProcess => "G-nonadjacent-process",
            AnomalyKind::WwConflict => "ww-conflict",
            AnomalyKind::StaleSnapshotRead => "stale-snapshot-read",
            AnomalyKind::TimestampOrder => "timestamp-order",
        }
    }

    /// Whether `model` forbids it.
    pub fn forbidden_by(self, model: Model) -> bool {
        match self {
            AnomalyKind::G2Item => model == Model::Serializable,
            AnomalyKind::G1cProcess
            | AnomalyKind::GSingleProcess
            | AnomalyKind::GNonadjacentProcess => model == Model::StrongSessionSnapshotIsolation,
            _ => true,
        }
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One anomaly, explained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    /// Its kind.
    pub kind: AnomalyKind,
    /// The transactions involved (ids into [`TxnHistory::txns`]); for a cycle, in cycle order.
    pub txns: Vec<usize>,
    /// The key, when one key explains it.
    pub key: Option<i64>,
    /// What happened, in prose (`T3 -rw(x=1)-> T5 -wr(2)-> T3`).
    pub explanation: String,
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.explanation)
    }
}

/// What [`check`] concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiReport {
    /// The model judged against.
    pub model: Model,
    /// The workload the history was read as.
    pub workload: Workload,
    /// How many transactions (all outcomes).
    pub txns: usize,
    /// Every anomaly found, forbidden by the model or not (G2-item under SI is shown too).
    pub anomalies: Vec<Anomaly>,
    /// Whether no anomaly the model forbids was found.
    pub valid: bool,
}

impl SiReport {
    /// The kinds found, sorted.
    pub fn kinds(&self) -> BTreeSet<AnomalyKind> {
        self.anomalies.iter().map(|a| a.kind).collect()
    }

    /// Whether an anomaly of `kind` was found.
    pub fn has(&self, kind: AnomalyKind) -> bool {
        self.anomalies.iter().any(|a| a.kind == kind)
    }
}

impl fmt::Display for SiReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({} transactions, {:?})",
            self.model.name(),
            if self.valid { "VALID" } else { "INVALID" },
            self.txns,
            self.workload
        )?;
        for (i, a) in self
            .anomalies
            .iter()
            .take(super::SHOWN_VIOLATIONS)
            .enumerate()
        {
            let allowed = if a.kind.forbidden_by(self.model) {
                ""
            } else {
                " (allowed)"
            };
            write!(f, "\n  {}. {a}{allowed}", i + 1)?;
        }
        if self.anomalies.len() > super::SHOWN_VIOLATIONS {
            let more = self.anomalies.len() - super::SHOWN_VIOLATIONS;
            write!(f, "\n  ... and {more} more")?;
        }
        Ok(())
    }
}

/// The workload of `txns`: list-append if any `append` or list read, rw-register if any
/// `w` or single-value read; an error if both (an empty history reads as list-append).
pub fn infer_workload(txns: &[Txn]) -> Result<Workload, Error> {
    let (mut list, mut reg) = (None, None);
    for t in txns {
        for m in &t.ops {
            match m {
                Mop::Append { .. }
                | Mop::Read {
                    value: Some(ReadValue::List(_)),
                    ..
                } => list = list.or(Some(t)),
                Mop::Write { .. }
                | Mop::Read {
                    value: Some(ReadValue::Register(_)),
                    ..
                } => reg = reg.or(Some(t)),
                Mop::Read { value: None, .. } => {}
            }
        }
    }
    match (list, reg) {
        (Some(a), Some(b)) => Err(Error::TxnHistory {
            index: b.invoke_index,
            reason: format!(
                "mixes list-append (T{}) and rw-register (T{}) operations",
                a.id, b.id
            ),
        }),
        (None, Some(_)) => Ok(Workload::RwRegister),
        _ => Ok(Workload::ListAppend),
    }
}

/// Checks `history` against `model`, inferring the workload (see [`infer_workload`]).
pub fn check(history: &TxnHistory, model: Model) -> Result<SiReport, Error> {
    let txns = history.txns()?;
    let workload = infer_workload(&txns)?;
    check_txns(&txns, workload, model)
}

/// Checks already paired transactions of `workload` against `model`.
///
/// Fails if a value is appended or written twice to one key (values identify versions), or
/// if an operation does not belong to `workload`.
pub fn check_txns(txns: &[Txn], workload: Workload, model: Model) -> Result<SiReport, Error> {
    let mut a = Analysis::new(txns, workload)?;
    a.internal();
    a.reads();
    a.lost_updates();
    match workload {
        Workload::ListAppend => a.list_edges(),
        Workload::RwRegister => a.register_edges(),
    }
    if model != Model::Serializable {
        a.timestamps();
    }
    a.cycles(false);
    if model == Model::StrongSessionSnapshotIsolation {
        a.process_edges();
        a.cycles(true);
    }
    let anomalies = a.anomalies;
    let valid = !anomalies.iter().any(|x| x.kind.forbidden_by(model));
    Ok(SiReport {
        model,
        workload,
        txns: txns.len(),
        anomalies,
        valid,
    })
}

/// A version a read observed: the list (list-append) or the value, `None` = nil.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    List(Vec<i64>),
    Value(Option<i64>),
}

impl Seen {
    /// The value whose write produced this version (`None`: the initial state).
    fn last(&self) -> Option<i64> {
        match self {
            Seen::List(l) => l.last().copied(),
            Seen::Value(v) => *v,
        }
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::List(l) => write!(f, "{l:?}"),
            Seen::Value(Some(v)) => write!(f, "{v}"),
            Seen::Value(None) => write!(f, "nil"),
        }
    }
}

const WW: u8 = 1;
const WR: u8 = 2;
const RW: u8 = 4;
const PROC: u8 = 8;

/// One edge's kinds, with the key that gave each (process edges have none).
#[derive(Clone, Copy, Default)]
struct Edge {
    mask: u8,
    keys: [i64; 3],
}

fn kind_index(kind: u8) -> usize {
    match kind {
        WW => 0,
        WR => 1,
        _ => 2,
    }
}

struct Analysis<'a> {
    txns: &'a [Txn],
    workload: Workload,
    /// (key, value) -> writer, for every outcome.
    writer: BTreeMap<(i64, i64), usize>,
    /// (key, value) written by a transaction that later wrote the key again.
    intermediate: BTreeSet<(i64, i64)>,
    /// Per committed transaction: key -> the version it first read (before writing it).
    ext_reads: Vec<BTreeMap<i64, Seen>>,
    /// Per transaction: key -> its writes to the key, in order.
    writes: Vec<BTreeMap<i64, Vec<i64>>>,
    /// Per transaction: whether its writes certainly or observably happened.
    effective: Vec<bool>,
    adj: Vec<BTreeMap<usize, Edge>>,
    anomalies: Vec<Anomaly>,
}

impl<'a> Analysis<'a> {
    fn new(txns: &'a [Txn], workload: Workload) -> Result<Analysis<'a>, Error> {
        let n = txns.len();
        let mut writer = BTreeMap::new();
        let mut intermediate = BTreeSet::new();
        let mut writes: Vec<BTreeMap<i64, Vec<i64>>> = vec![BTreeMap::new(); n];
        let mut ext_reads: Vec<BTreeMap<i64, Seen>> = vec![BTreeMap::new(); n];
        for t in txns {
            let bad = |reason: String| Error::TxnHistory {
                index: t.invoke_index,
                reason: format!("T{}: {reason}", t.id),
            };
            for m in &t.ops {
                let (key, value) = match (m, workload) {
                    (Mop::Append { key, value }, Workload::ListAppend)
                    | (Mop::Write { key, value }, Workload::RwRegister) => (*key, *value),
                    (Mop::Read { key, value }, _) => {
                        if t.status != TxnStatus::Committed {
                            continue;
                        }
                        let seen = match (value, workload) {
                            (None, Workload::ListAppend) => Seen::List(Vec::new()),
                            (Some(ReadValue::List(l)), Workload::ListAppend) => {
                                Seen::List(l.clone())
                            }
                            (None, Workload::RwRegister) => Seen::Value(None),
                            (Some(ReadValue::Register(v)), Workload::RwRegister) => {
                                Seen::Value(Some(*v))
                            }
                            _ => {
                                return Err(bad(format!("a read of key {key} of the wrong shape")));
                            }
                        };
                        if !writes[t.id].contains_key(key) {
                            ext_reads[t.id].entry(*key).or_insert(seen);
                        }
                        continue;
                    }
                    _ => return Err(bad(format!("{m:?} is not a {workload:?} operation"))),
                };
                if let Some(first) = writer.insert((key, value), t.id) {
                    return Err(bad(format!(
                        "value {value} is written to key {key} by both T{first} and T{}; \
                         values must be unique per key",
                        t.id
                    )));
                }
                let own = writes[t.id].entry(key).or_default();
                if let Some(&prev) = own.last() {
                    intermediate.insert((key, prev));
                }
                own.push(value);
            }
        }
        let mut effective: Vec<bool> = txns
            .iter()
            .map(|t| t.status == TxnStatus::Committed)
            .collect();
        for reads in &ext_reads {
            for (&key, seen) in reads {
                let observed: Vec<i64> = match seen {
                    Seen::List(l) => l.clone(),
                    Seen::Value(v) => v.iter().copied().collect(),
                };
                for v in observed {
                    if let Some(&w) = writer.get(&(key, v))
                        && txns[w].status == TxnStatus::Unknown
                    {
                        effective[w] = true;
                    }
                }
            }
        }
        Ok(Analysis {
            txns,
            workload,
            writer,
            intermediate,
            ext_reads,
            writes,
            effective,
            adj: vec![BTreeMap::new(); n],
            anomalies: Vec::new(),
        })
    }

    fn report(&mut self, kind: AnomalyKind, txns: Vec<usize>, key: Option<i64>, text: String) {
        self.anomalies.push(Anomaly {
            kind,
            txns,
            key,
            explanation: text,
        });
    }

    fn edge(&mut self, from: usize, to: usize, kind: u8, key: i64) {
        if from == to || !self.effective[from] || !self.effective[to] {
            return;
        }
        let e = self.adj[from].entry(to).or_default();
        if e.mask & kind == 0 {
            e.mask |= kind;
            if kind != PROC {
                e.keys[kind_index(kind)] = key;
            }
        }
    }
}

/// The first audit that breaks the closed economy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BankViolation {
    /// Its position in the audits given.
    pub audit: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// Checks bank audits (each one snapshot read of every account: account -> balance): the
/// total is `expected_total` (or, if `None`, the first audit's total) in every audit and no
/// balance is negative. Returns the first bad audit.
pub fn check_bank_audits<K: Ord + fmt::Debug>(
    audits: &[BTreeMap<K, i64>],
    expected_total: Option<i64>,
) -> Result<(), BankViolation> {
    let mut expected = expected_total.map(i128::from);
    for (i, audit) in audits.iter().enumerate() {
        if let Some((account, balance)) = audit.iter().find(|(_, b)| **b < 0) {
            return Err(BankViolation {
                audit: i,
                reason: format!("account {account:?} has a negative balance {balance}"),
            });
        }
        let total: i128 = audit.values().map(|&b| i128::from(b)).sum();
        match expected {
            None => expected = Some(total),
            Some(e) if e != total => {
                return Err(BankViolation {
                    audit: i,
                    reason: format!(
                        "the total over {} accounts is {total}, expected {e}",
                        audit.len()
                    ),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
