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
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

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

    /// Each committed transaction replayed against its own operations.
    fn internal(&mut self) {
        let mut found = Vec::new();
        for t in self.txns {
            if t.status != TxnStatus::Committed {
                continue;
            }
            // key -> (known state, or own writes since the start when nothing was read)
            let mut state: BTreeMap<i64, (bool, Vec<i64>)> = BTreeMap::new();
            let mut reg: BTreeMap<i64, Option<i64>> = BTreeMap::new();
            for m in &t.ops {
                match m {
                    Mop::Append { key, value } => {
                        state.entry(*key).or_default().1.push(*value);
                    }
                    Mop::Write { key, value } => {
                        reg.insert(*key, Some(*value));
                    }
                    Mop::Read {
                        key,
                        value: Some(ReadValue::Register(v)),
                    } => check_reg(&mut reg, *key, Some(*v), t, &mut found),
                    Mop::Read { key, value: None } if self.workload == Workload::RwRegister => {
                        check_reg(&mut reg, *key, None, t, &mut found)
                    }
                    Mop::Read { key, value } => {
                        let read: &[i64] = match value {
                            Some(ReadValue::List(l)) => l,
                            _ => &[],
                        };
                        let (known, expect) = state.entry(*key).or_default();
                        let ok = if *known {
                            read == &expect[..]
                        } else {
                            read.ends_with(expect)
                        };
                        if !ok {
                            let what = if *known {
                                format!("{expect:?}")
                            } else {
                                format!("a list ending in {expect:?}")
                            };
                            found.push((
                                t.id,
                                *key,
                                format!("T{} reads key {key} = {read:?}, expected {what}", t.id),
                            ));
                        }
                        *known = true;
                        *expect = read.to_vec();
                    }
                }
            }
        }
        for (t, key, text) in found {
            self.report(AnomalyKind::Internal, vec![t], Some(key), text);
        }

        fn check_reg(
            reg: &mut BTreeMap<i64, Option<i64>>,
            key: i64,
            read: Option<i64>,
            t: &Txn,
            found: &mut Vec<(usize, i64, String)>,
        ) {
            if let Some(&expect) = reg.get(&key)
                && expect != read
            {
                let show = |v: Option<i64>| v.map_or("nil".to_string(), |v| v.to_string());
                found.push((
                    t.id,
                    key,
                    format!(
                        "T{} reads key {key} = {}, expected {}",
                        t.id,
                        show(read),
                        show(expect)
                    ),
                ));
            }
            reg.insert(key, read);
        }
    }

    /// G1a, G1b, garbage reads and duplicate elements, per external read.
    fn reads(&mut self) {
        let mut found = Vec::new();
        for (r, reads) in self.ext_reads.iter().enumerate() {
            for (&key, seen) in reads {
                let values: Vec<i64> = match seen {
                    Seen::List(l) => {
                        let mut sorted = l.clone();
                        sorted.sort_unstable();
                        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                            found.push((
                                AnomalyKind::DuplicateElements,
                                vec![r],
                                key,
                                format!("T{r} reads key {key} = {l:?}, which holds {} twice", w[0]),
                            ));
                        }
                        l.clone()
                    }
                    Seen::Value(v) => v.iter().copied().collect(),
                };
                for &v in &values {
                    match self.writer.get(&(key, v)) {
                        None => found.push((
                            AnomalyKind::GarbageRead,
                            vec![r],
                            key,
                            format!("T{r} reads {v} from key {key}, which no transaction wrote"),
                        )),
                        Some(&w) if self.txns[w].status == TxnStatus::Aborted => found.push((
                            AnomalyKind::G1a,
                            vec![r, w],
                            key,
                            format!("T{r} reads {v} from key {key}, written by T{w}, which failed"),
                        )),
                        Some(_) => {}
                    }
                }
                if let Some(v) = seen.last()
                    && self.intermediate.contains(&(key, v))
                    && let Some(&w) = self.writer.get(&(key, v))
                    && w != r
                {
                    found.push((
                        AnomalyKind::G1b,
                        vec![r, w],
                        key,
                        format!(
                            "T{r} reads key {key} = {seen}, an intermediate version: T{w} wrote \
                             {v} and then wrote key {key} again"
                        ),
                    ));
                }
            }
        }
        for (kind, txns, key, text) in found {
            self.report(kind, txns, Some(key), text);
        }
    }

    /// Two committed transactions that read the same version of a key and both write it.
    fn lost_updates(&mut self) {
        let mut by_version: BTreeMap<(i64, &Seen), Vec<usize>> = BTreeMap::new();
        for (t, reads) in self.ext_reads.iter().enumerate() {
            for (&key, seen) in reads {
                if self.writes[t].contains_key(&key) {
                    by_version.entry((key, seen)).or_default().push(t);
                }
            }
        }
        let mut found = Vec::new();
        for ((key, seen), ts) in by_version {
            if ts.len() > 1 {
                let names: Vec<String> = ts.iter().map(|t| format!("T{t}")).collect();
                found.push((
                    ts,
                    key,
                    format!(
                        "{} all read key {key} = {seen} and all wrote it, and all committed",
                        names.join(", ")
                    ),
                ));
            }
        }
        for (ts, key, text) in found {
            self.report(AnomalyKind::LostUpdate, ts, Some(key), text);
        }
    }

    /// ww, wr and rw edges for list-append, from each key's longest read.
    fn list_edges(&mut self) {
        let mut keys: BTreeMap<i64, Vec<(usize, &[i64])>> = BTreeMap::new();
        for t in self.txns {
            if t.status != TxnStatus::Committed {
                continue;
            }
            for m in &t.ops {
                if let Mop::Read { key, value } = m {
                    let l: &[i64] = match value {
                        Some(ReadValue::List(l)) => l,
                        _ => &[],
                    };
                    keys.entry(*key).or_default().push((t.id, l));
                }
            }
        }
        for t in 0..self.txns.len() {
            for &key in self.writes[t].keys() {
                keys.entry(key).or_default();
            }
        }
        let mut edges = Vec::new();
        let mut found = Vec::new();
        for (&key, reads) in &keys {
            let (long_t, longest) = reads.iter().fold((usize::MAX, &[][..]), |best, &(t, l)| {
                if l.len() > best.1.len() { (t, l) } else { best }
            });
            let mut order: Vec<i64> = Vec::new();
            for &v in longest {
                if !order.contains(&v) {
                    order.push(v);
                }
            }
            let pos: BTreeMap<i64, usize> =
                order.iter().enumerate().map(|(i, &v)| (v, i)).collect();
            let mut compatible: BTreeSet<usize> = BTreeSet::new();
            for &(t, l) in reads {
                if longest.starts_with(l) {
                    compatible.insert(t);
                } else {
                    found.push((
                        AnomalyKind::IncompatibleOrder,
                        vec![t, long_t],
                        key,
                        format!(
                            "T{t} reads key {key} = {l:?}, which is not a prefix of T{long_t}'s \
                             read {longest:?}"
                        ),
                    ));
                }
            }
            let writer_of = |v: i64| self.writer.get(&(key, v)).copied();
            for pair in order.windows(2) {
                if let (Some(a), Some(b)) = (writer_of(pair[0]), writer_of(pair[1])) {
                    edges.push((a, b, WW));
                }
            }
            // Committed appends nobody read come after everything read.
            let unread: Vec<usize> = (0..self.txns.len())
                .filter(|&t| self.txns[t].status == TxnStatus::Committed)
                .filter(|&t| {
                    self.writes[t]
                        .get(&key)
                        .is_some_and(|vs| vs.iter().any(|v| !pos.contains_key(v)))
                })
                .collect();
            if let Some(last) = order.last().and_then(|&v| writer_of(v)) {
                for &u in &unread {
                    edges.push((last, u, WW));
                }
            }
            for (r, reads) in self.ext_reads.iter().enumerate() {
                let Some(Seen::List(l)) = reads.get(&key) else {
                    continue;
                };
                if let Some(w) = l.last().and_then(|&v| writer_of(v)) {
                    edges.push((w, r, WR));
                }
                if !compatible.contains(&r) {
                    continue;
                }
                let n = l.iter().filter(|v| pos.contains_key(v)).count();
                match order.get(n) {
                    Some(&next) => {
                        if let Some(w) = writer_of(next) {
                            edges.push((r, w, RW));
                        }
                    }
                    None => {
                        for &u in &unread {
                            edges.push((r, u, RW));
                        }
                    }
                }
            }
            // Commit timestamps must agree with the order.
            let ts: Vec<Option<(u64, usize)>> = order
                .iter()
                .map(|&v| {
                    let w = writer_of(v)?;
                    Some((self.txns[w].commit_ts?, w))
                })
                .collect();
            for pair in ts.windows(2) {
                if let [Some((ta, a)), Some((tb, b))] = pair
                    && ta > tb
                {
                    found.push((
                        AnomalyKind::TimestampOrder,
                        vec![*a, *b],
                        key,
                        format!(
                            "key {key}'s list puts T{a}'s append (commit_ts {ta}) before \
                             T{b}'s (commit_ts {tb})"
                        ),
                    ));
                }
            }
            for (a, b, kind) in edges.drain(..) {
                self.edge(a, b, kind, key);
            }
        }
        for (kind, txns, key, text) in found {
            self.report(kind, txns, Some(key), text);
        }
    }

    /// The committed final writes of `key`, ordered by commit timestamp, if every committed
    /// writer of the key has one.
    fn ts_order(&self, key: i64) -> Option<Vec<(u64, usize, i64)>> {
        let mut order = Vec::new();
        for t in self.txns {
            if t.status != TxnStatus::Committed {
                continue;
            }
            if let Some(&v) = self.writes[t.id].get(&key).and_then(|vs| vs.last()) {
                order.push((t.commit_ts?, t.id, v));
            }
        }
        order.sort_unstable();
        Some(order)
    }

    /// ww, wr and rw edges for rw-register: the commit-timestamp order where every writer
    /// has one, else the order inferred from reads and writes.
    fn register_edges(&mut self) {
        let mut keys: BTreeSet<i64> = BTreeSet::new();
        for t in 0..self.txns.len() {
            keys.extend(self.writes[t].keys());
            keys.extend(self.ext_reads[t].keys());
        }
        let mut edges = Vec::new();
        for &key in &keys {
            let writer_of = |v: Option<i64>| v.and_then(|v| self.writer.get(&(key, v)).copied());
            let final_writers: Vec<usize> = (0..self.txns.len())
                .filter(|&t| self.writes[t].contains_key(&key))
                .collect();
            let readers: Vec<(usize, Option<i64>)> = (0..self.txns.len())
                .filter_map(|r| match self.ext_reads[r].get(&key) {
                    Some(Seen::Value(v)) => Some((r, *v)),
                    _ => None,
                })
                .collect();
            for &(r, v) in &readers {
                if let Some(w) = writer_of(v) {
                    edges.push((w, r, WR));
                }
            }
            if let Some(order) = self.ts_order(key) {
                for pair in order.windows(2) {
                    edges.push((pair[0].1, pair[1].1, WW));
                }
                for &(r, v) in &readers {
                    let next = match v {
                        None => order.first(),
                        Some(v) => order
                            .iter()
                            .position(|&(_, _, w)| w == v)
                            .and_then(|i| order.get(i + 1)),
                    };
                    if let Some(&(_, w, _)) = next {
                        edges.push((r, w, RW));
                    }
                }
            } else {
                // nil precedes every version; a read of v then a write of v' gives v < v'.
                let mut by_value: BTreeMap<Option<i64>, Vec<usize>> = BTreeMap::new();
                for &(r, v) in &readers {
                    by_value.entry(v).or_default().push(r);
                }
                for &(r, v) in &readers {
                    match v {
                        None => {
                            for &w in &final_writers {
                                if self.txns[w].status == TxnStatus::Committed {
                                    edges.push((r, w, RW));
                                }
                            }
                        }
                        Some(v) => {
                            for &t in by_value.get(&Some(v)).into_iter().flatten() {
                                if self.writes[t].contains_key(&key) {
                                    edges.push((r, t, RW));
                                }
                            }
                        }
                    }
                    if self.writes[r].contains_key(&key)
                        && let Some(w) = writer_of(v)
                    {
                        edges.push((w, r, WW));
                    }
                }
            }
            for (a, b, kind) in edges.drain(..) {
                self.edge(a, b, kind, key);
            }
        }
    }

    /// The timestamp checks: update transactions commit above their snapshot, concurrent
    /// writers of a key do not both commit, reads return the newest state below the snapshot.
    fn timestamps(&mut self) {
        let mut found = Vec::new();
        for t in self.txns {
            if t.status == TxnStatus::Committed
                && t.writes()
                && let (Some(c), Some(s)) = (t.commit_ts, t.snapshot_ts)
                && c <= s
            {
                found.push((
                    AnomalyKind::TimestampOrder,
                    vec![t.id],
                    None,
                    format!(
                        "T{} writes but commits at {c}, not above its snapshot {s}",
                        t.id
                    ),
                ));
            }
        }
        let mut keys: BTreeSet<i64> = BTreeSet::new();
        for t in 0..self.txns.len() {
            keys.extend(self.writes[t].keys());
            keys.extend(self.ext_reads[t].keys());
        }
        for &key in &keys {
            let Some(order) = self.ts_order(key) else {
                continue;
            };
            // Sorted by commit: the writers committing at or after b's snapshot and no later
            // than b are the ones b may have raced with.
            for (j, &(cb, b, _)) in order.iter().enumerate() {
                let Some(sb) = self.txns[b].snapshot_ts else {
                    continue;
                };
                for &(ca, a, _) in order[..j].iter().rev().take_while(|&&(ca, _, _)| ca >= sb) {
                    let Some(sa) = self.txns[a].snapshot_ts else {
                        continue;
                    };
                    if cb >= sa {
                        found.push((
                            AnomalyKind::WwConflict,
                            vec![a, b],
                            Some(key),
                            format!(
                                "T{a} (snapshot {sa}, commit {ca}) and T{b} (snapshot {sb}, \
                                 commit {cb}) both write key {key} and both commit, concurrently"
                            ),
                        ));
                    }
                }
            }
            for r in 0..self.txns.len() {
                let (Some(seen), Some(snap)) =
                    (self.ext_reads[r].get(&key), self.txns[r].snapshot_ts)
                else {
                    continue;
                };
                let visible = &order[..order.partition_point(|&(c, _, _)| c < snap)];
                let expected = match seen {
                    Seen::Value(_) => Seen::Value(visible.last().map(|&(_, _, v)| v)),
                    Seen::List(_) => Seen::List(
                        visible
                            .iter()
                            .flat_map(|&(_, w, _)| self.writes[w][&key].iter().copied())
                            .collect(),
                    ),
                };
                // A value from a writer without a timestamp cannot be judged.
                let observed: Vec<i64> = match seen {
                    Seen::List(l) => l.clone(),
                    Seen::Value(v) => v.iter().copied().collect(),
                };
                let judged = observed.iter().all(|&v| {
                    self.writer
                        .get(&(key, v))
                        .is_some_and(|&w| self.txns[w].status == TxnStatus::Committed)
                });
                if judged && *seen != expected {
                    let mut txns = vec![r];
                    txns.extend(
                        seen.last()
                            .and_then(|v| self.writer.get(&(key, v)).copied()),
                    );
                    txns.extend(visible.last().map(|&(_, w, _)| w));
                    txns.dedup();
                    found.push((
                        AnomalyKind::StaleSnapshotRead,
                        txns,
                        Some(key),
                        format!(
                            "T{r} (snapshot {snap}) reads key {key} = {seen}, but the newest \
                             committed state below its snapshot is {expected}"
                        ),
                    ));
                }
            }
        }
        for (kind, txns, key, text) in found {
            self.report(kind, txns, key, text);
        }
    }

    /// Process order: each committed transaction before its process's next committed one.
    fn process_edges(&mut self) {
        let mut last: BTreeMap<u64, usize> = BTreeMap::new();
        for t in self.txns {
            if t.status != TxnStatus::Committed {
                continue;
            }
            if let Some(prev) = last.insert(t.process, t.id) {
                self.edge(prev, t.id, PROC, 0);
            }
        }
    }

    /// Searches the graph for cycles; with `process`, only for cycles through process edges.
    fn cycles(&mut self, process: bool) {
        let dep = if process { WW | WR | PROC } else { WW | WR };
        let require = if process { PROC } else { 0 };
        let mut found: Vec<(AnomalyKind, Vec<(usize, u8)>)> = Vec::new();
        if !process {
            for comp in sccs(&self.adj, WW) {
                if let Some(c) = self.cycle_through(&comp, WW, WW, WW, 0) {
                    found.push((AnomalyKind::G0, c));
                }
            }
        }
        for comp in sccs(&self.adj, dep) {
            let first = if process { PROC } else { WR };
            if let Some(c) = self.cycle_through(&comp, first, dep, dep, require) {
                let kind = if process {
                    AnomalyKind::G1cProcess
                } else {
                    AnomalyKind::G1c
                };
                found.push((kind, c));
            }
        }
        for comp in sccs(&self.adj, dep | RW) {
            if let Some(c) = self.cycle_through(&comp, RW, dep, dep, require) {
                let kind = if process {
                    AnomalyKind::GSingleProcess
                } else {
                    AnomalyKind::GSingle
                };
                found.push((kind, c));
            } else if let Some(c) = self.nonadjacent(&comp, dep, require) {
                let kind = if process {
                    AnomalyKind::GNonadjacentProcess
                } else {
                    AnomalyKind::GNonadjacent
                };
                found.push((kind, c));
            } else if !process
                && let Some(c) = self.cycle_through(&comp, RW, dep | RW, dep | RW, 0)
                && !found
                    .iter()
                    .any(|(_, f)| f.iter().any(|&(t, _)| comp.contains(&t)))
            {
                found.push((AnomalyKind::G2Item, c));
            }
        }
        for (kind, cycle) in found {
            let text = self.show_cycle(&cycle);
            let txns = cycle.iter().map(|&(t, _)| t).collect();
            self.report(kind, txns, None, text);
        }
    }

    /// A shortest cycle inside `comp` that starts with an edge of kind `first` and continues
    /// through edges in `rest`, taking at least one edge of kind `require` (if not 0).
    /// Edges are labelled with the first kind of `label` they carry, in WW, WR, PROC, RW
    /// order. Returns (node, kind of the edge leaving it).
    fn cycle_through(
        &self,
        comp: &[usize],
        first: u8,
        rest: u8,
        label: u8,
        require: u8,
    ) -> Option<Vec<(usize, u8)>> {
        let inside: BTreeSet<usize> = comp.iter().copied().collect();
        for &a in comp {
            for (&b, e) in &self.adj[a] {
                if e.mask & first == 0 || !inside.contains(&b) {
                    continue;
                }
                let got = first & require != 0;
                if let Some(path) = self.bfs(&inside, b, a, rest, label, require, got) {
                    let mut cycle = vec![(a, first)];
                    cycle.extend(path);
                    return Some(cycle);
                }
            }
        }
        None
    }

    /// Shortest path `from` -> `to` over edges in `mask` within `inside`, taking an edge of
    /// kind `require` unless `got`. Returns (node, kind of the edge leaving it) per step.
    #[allow(clippy::too_many_arguments)]
    fn bfs(
        &self,
        inside: &BTreeSet<usize>,
        from: usize,
        to: usize,
        mask: u8,
        label: u8,
        require: u8,
        got: bool,
    ) -> Option<Vec<(usize, u8)>> {
        let start = (from, got || require == 0);
        let mut prev: BTreeMap<(usize, bool), ((usize, bool), u8)> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        let mut seen = BTreeSet::from([start]);
        while let Some(s) = queue.pop_front() {
            if s == (to, true) {
                let mut path = Vec::new();
                let mut cur = s;
                while cur != start {
                    let (p, kind) = prev[&cur];
                    path.push((p.0, kind));
                    cur = p;
                }
                path.reverse();
                return Some(path);
            }
            for (&b, e) in &self.adj[s.0] {
                if !inside.contains(&b) || e.mask & mask == 0 {
                    continue;
                }
                // Prefer the required kind when it is still missing.
                let kinds: Vec<u8> = [require, WW, WR, PROC, RW]
                    .into_iter()
                    .filter(|&k| {
                        k != 0 && e.mask & mask & k != 0 && (k & label != 0 || k == require)
                    })
                    .collect();
                let Some(&kind) = kinds
                    .iter()
                    .find(|&&k| !s.1 && k == require)
                    .or(kinds.first())
                else {
                    continue;
                };
                let next = (b, s.1 || kind == require);
                if seen.insert(next) {
                    prev.insert(next, (s, kind));
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// A closed walk in `comp` with rw edges, never two in a row (each rw followed by a
    /// `dep` edge), taking a `require` edge if not 0.
    fn nonadjacent(&self, comp: &[usize], dep: u8, require: u8) -> Option<Vec<(usize, u8)>> {
        let inside: BTreeSet<usize> = comp.iter().copied().collect();
        // States (node, after_rw, got_required).
        type State = (usize, bool, bool);
        for &a in comp {
            for (&b, e) in &self.adj[a] {
                if e.mask & RW == 0 || !inside.contains(&b) {
                    continue;
                }
                let start: State = (b, true, require == 0);
                let goal: State = (a, false, true);
                let mut prev: BTreeMap<State, (State, u8)> = BTreeMap::new();
                let mut seen = BTreeSet::from([start]);
                let mut queue = VecDeque::from([start]);
                while let Some(s) = queue.pop_front() {
                    if s == goal {
                        let mut path = Vec::new();
                        let mut cur = s;
                        while cur != start {
                            let (p, kind) = prev[&cur];
                            path.push((p.0, kind));
                            cur = p;
                        }
                        path.reverse();
                        let mut cycle = vec![(a, RW)];
                        cycle.extend(path);
                        return Some(cycle);
                    }
                    for (&c, e) in &self.adj[s.0] {
                        if !inside.contains(&c) {
                            continue;
                        }
                        for kind in [require, WW, WR, PROC, RW] {
                            if kind == 0 || e.mask & kind == 0 {
                                continue;
                            }
                            if kind == RW && s.1 {
                                continue;
                            }
                            if kind != RW && dep & kind == 0 {
                                continue;
                            }
                            let next = (c, kind == RW, s.2 || kind == require);
                            if seen.insert(next) {
                                prev.insert(next, (s, kind));
                                queue.push_back(next);
                            }
                        }
                    }
                }
            }
        }
        None
    }

    fn show_cycle(&self, cycle: &[(usize, u8)]) -> String {
        let mut out = String::new();
        for (i, &(t, kind)) in cycle.iter().enumerate() {
            let next = cycle[(i + 1) % cycle.len()].0;
            let label = match kind {
                WW => "ww",
                WR => "wr",
                RW => "rw",
                _ => "process",
            };
            let key = self.adj[t]
                .get(&next)
                .filter(|_| kind != PROC)
                .map(|e| format!("(key {})", e.keys[kind_index(kind)]))
                .unwrap_or_default();
            out.push_str(&format!("T{t} -{label}{key}-> "));
        }
        if let Some(&(t, _)) = cycle.first() {
            out.push_str(&format!("T{t}"));
        }
        out
    }
}

/// Tarjan's strongly connected components over edges whose kinds meet `mask`, keeping those
/// with more than one node; each sorted, in order of their smallest node.
fn sccs(adj: &[BTreeMap<usize, Edge>], mask: u8) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, successors, position in them)
        let succ = |v: usize| -> Vec<usize> {
            adj[v]
                .iter()
                .filter(|(_, e)| e.mask & mask != 0)
                .map(|(&w, _)| w)
                .collect()
        };
        let mut call: Vec<(usize, Vec<usize>, usize)> = vec![(root, succ(root), 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(frame) = call.last_mut() {
            let v = frame.0;
            if let Some(&w) = frame.1.get(frame.2) {
                frame.2 += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, succ(w), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(parent) = call.last() {
                low[parent.0] = low[parent.0].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort_unstable();
                    out.push(comp);
                }
            }
        }
    }
    out.sort();
    out
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
mod tests {
    use super::*;
    use crate::checker::txn_history::EventType;
    use proptest::prelude::*;

    /// One transaction of a hand-made history: process, completed micro-ops, outcome and
    /// optional (snapshot_ts, commit_ts).
    type Spec = (u64, Vec<Mop>, EventType, Option<(u64, u64)>);

    fn history(specs: &[Spec]) -> TxnHistory {
        let mut h = TxnHistory::new();
        for (i, (p, ops, kind, ts)) in specs.iter().enumerate() {
            let t = 10 * i as u64;
            h.invoke(*p, ops, t);
            let e = h.record(*kind, *p, ops.clone(), t + 5);
            if let Some((s, c)) = ts {
                e.snapshot_ts = Some(*s);
                e.commit_ts = Some(*c);
            }
        }
        h
    }

    fn ok(p: u64, ops: Vec<Mop>) -> Spec {
        (p, ops, EventType::Ok, None)
    }

    fn check_all(specs: &[Spec]) -> [SiReport; 3] {
        let h = history(specs);
        [
            Model::SnapshotIsolation,
            Model::StrongSessionSnapshotIsolation,
            Model::Serializable,
        ]
        .map(|m| check(&h, m).unwrap())
    }

    fn si(specs: &[Spec]) -> SiReport {
        check(&history(specs), Model::SnapshotIsolation).unwrap()
    }

    fn r(k: i64, v: &[i64]) -> Mop {
        Mop::read_list(k, v)
    }

    fn rr(k: i64, v: Option<i64>) -> Mop {
        Mop::read_register(k, v)
    }

    #[test]
    fn valid_list_append_history_passes_every_model() {
        let reports = check_all(&[
            ok(0, vec![Mop::append(1, 1)]),
            ok(1, vec![r(1, &[1]), Mop::append(1, 2), r(1, &[1, 2])]),
            ok(2, vec![r(1, &[1, 2]), r(2, &[])]),
            (3, vec![Mop::append(2, 9)], EventType::Fail, None),
            ok(0, vec![Mop::append(2, 3), r(2, &[3])]),
        ]);
        for rep in &reports {
            assert!(rep.valid && rep.anomalies.is_empty(), "{rep}");
            assert_eq!(rep.workload, Workload::ListAppend);
        }
    }

    #[test]
    fn valid_register_history_passes_every_model() {
        let reports = check_all(&[
            ok(0, vec![rr(1, None), Mop::write(1, 1)]),
            ok(1, vec![rr(1, Some(1)), Mop::write(1, 2), rr(1, Some(2))]),
            ok(2, vec![rr(1, Some(2)), rr(2, None)]),
        ]);
        for rep in &reports {
            assert!(rep.valid && rep.anomalies.is_empty(), "{rep}");
            assert_eq!(rep.workload, Workload::RwRegister);
        }
    }

    #[test]
    fn internal_inconsistency_is_caught() {
        let rep = si(&[ok(0, vec![Mop::append(1, 1), r(1, &[])])]);
        assert!(!rep.valid && rep.has(AnomalyKind::Internal), "{rep}");
        let rep = si(&[
            ok(0, vec![Mop::write(1, 1), rr(1, Some(2))]),
            ok(1, vec![Mop::write(1, 2)]),
        ]);
        assert!(rep.has(AnomalyKind::Internal), "{rep}");
        assert_eq!(rep.anomalies[0].txns, vec![0]);
    }

    #[test]
    fn g0_write_cycle_is_caught() {
        let rep = si(&[
            ok(0, vec![Mop::append(1, 1), Mop::append(2, 2)]),
            ok(1, vec![Mop::append(1, 3), Mop::append(2, 4)]),
            ok(2, vec![r(1, &[1, 3]), r(2, &[4, 2])]),
        ]);
        assert!(!rep.valid && rep.has(AnomalyKind::G0), "{rep}");
        let g0 = rep
            .anomalies
            .iter()
            .find(|a| a.kind == AnomalyKind::G0)
            .unwrap();
        assert_eq!(g0.txns, vec![0, 1]);
        assert!(
            g0.explanation
                .contains("T0 -ww(key 1)-> T1 -ww(key 2)-> T0"),
            "{g0}"
        );
    }

    #[test]
    fn g1a_aborted_read_is_caught() {
        let rep = si(&[
            (0, vec![Mop::append(1, 1)], EventType::Fail, None),
            ok(1, vec![r(1, &[1])]),
        ]);
        assert!(!rep.valid && rep.has(AnomalyKind::G1a), "{rep}");
        assert_eq!(rep.anomalies[0].txns, vec![1, 0]);
    }

    #[test]
    fn g1b_intermediate_read_is_caught() {
        let rep = si(&[
            ok(0, vec![Mop::write(1, 1), Mop::write(1, 2)]),
            ok(1, vec![rr(1, Some(1))]),
        ]);
        assert!(!rep.valid && rep.has(AnomalyKind::G1b), "{rep}");
        let rep = si(&[
            ok(0, vec![Mop::append(1, 1), Mop::append(1, 2)]),
            ok(1, vec![r(1, &[1])]),
        ]);
        assert!(rep.has(AnomalyKind::G1b), "{rep}");
    }

    #[test]
    fn g1c_circular_information_flow_is_caught() {
        let rep = si(&[
            ok(0, vec![Mop::append(1, 1), r(2, &[2])]),
            ok(1, vec![Mop::append(2, 2), r(1, &[1])]),
        ]);
        assert!(!rep.valid && rep.has(AnomalyKind::G1c), "{rep}");
        assert!(!rep.has(AnomalyKind::G0));
    }

    #[test]
    fn read_skew_is_g_single() {
        // T1 sees T0's y but not T0's x.
        let rep = si(&[
            ok(0, vec![Mop::write(1, 1), Mop::write(2, 1)]),
            ok(1, vec![rr(1, None), rr(2, Some(1))]),
        ]);
        assert!(!rep.valid && rep.has(AnomalyKind::GSingle), "{rep}");
        let a = rep
            .anomalies
            .iter()
            .find(|a| a.kind == AnomalyKind::GSingle)
            .unwrap();
        assert!(a.explanation.contains("-rw(key 1)->"), "{a}");
        assert!(a.explanation.contains("-wr(key 2)->"), "{a}");
    }

    #[test]
    fn g_nonadjacent_is_caught() {
        let rep = check_all(&[
            ok(0, vec![rr(1, None), rr(4, Some(1))]),
            ok(1, vec![Mop::write(1, 1), Mop::write(2, 1)]),
            ok(2, vec![rr(2, Some(1)), rr(3, None)]),
            ok(3, vec![Mop::write(3, 1), Mop::write(4, 1)]),
        ]);
        for rep in &rep {
            assert!(!rep.valid && rep.has(AnomalyKind::GNonadjacent), "{rep}");
            assert!(!rep.has(AnomalyKind::GSingle), "{rep}");
        }
    }

    #[test]
    fn lost_update_is_caught() {
        let rep = si(&[
            ok(0, vec![rr(1, None), Mop::write(1, 1)]),
            ok(1, vec![rr(1, None), Mop::write(1, 2)]),
        ]);
        assert!(!rep.valid && rep.has(AnomalyKind::LostUpdate), "{rep}");
        let lu = rep
            .anomalies
            .iter()
            .find(|a| a.kind == AnomalyKind::LostUpdate)
            .unwrap();
        assert_eq!((lu.txns.clone(), lu.key), (vec![0, 1], Some(1)));
        let rep = si(&[
            ok(0, vec![r(1, &[]), Mop::append(1, 1)]),
            ok(1, vec![r(1, &[]), Mop::append(1, 2)]),
            ok(2, vec![r(1, &[1, 2])]),
        ]);
        assert!(rep.has(AnomalyKind::LostUpdate), "{rep}");
    }

    #[test]
    fn write_skew_is_si_but_not_serializable() {
        for specs in [
            vec![
                ok(0, vec![rr(1, None), rr(2, None), Mop::write(1, 1)]),
                ok(1, vec![rr(1, None), rr(2, None), Mop::write(2, 1)]),
            ],
            vec![
                ok(0, vec![r(1, &[]), r(2, &[]), Mop::append(1, 1)]),
                ok(1, vec![r(1, &[]), r(2, &[]), Mop::append(2, 1)]),
            ],
        ] {
            let [si, session, ser] = check_all(&specs);
            assert!(si.valid, "{si}");
            assert!(session.valid, "{session}");
            assert!(!ser.valid, "{ser}");
            assert_eq!(ser.kinds(), BTreeSet::from([AnomalyKind::G2Item]), "{ser}");
            assert!(si.has(AnomalyKind::G2Item), "reported but allowed: {si}");
            assert!(si.to_string().contains("(allowed)"), "{si}");
        }
    }

    #[test]
    fn strong_session_needs_own_writes() {
        let specs = [ok(0, vec![Mop::write(1, 1)]), ok(0, vec![rr(1, None)])];
        let [si, session, _] = check_all(&specs);
        assert!(si.valid, "{si}");
        assert!(
            !session.valid && session.has(AnomalyKind::GSingleProcess),
            "{session}"
        );
        // Another process may miss it.
        let [_, session, _] = check_all(&[ok(0, vec![Mop::write(1, 1)]), ok(1, vec![rr(1, None)])]);
        assert!(session.valid, "{session}");
    }

    #[test]
    fn incompatible_list_orders_are_reported() {
        let rep = si(&[
            ok(0, vec![Mop::append(1, 1)]),
            ok(1, vec![Mop::append(1, 2)]),
            ok(2, vec![r(1, &[1, 2])]),
            ok(3, vec![r(1, &[2, 1])]),
            ok(4, vec![r(1, &[1, 1])]),
        ]);
        assert!(
            !rep.valid && rep.has(AnomalyKind::IncompatibleOrder),
            "{rep}"
        );
        assert!(rep.has(AnomalyKind::DuplicateElements), "{rep}");
    }

    #[test]
    fn garbage_reads_and_bad_inputs() {
        let rep = si(&[ok(0, vec![rr(1, Some(7))])]);
        assert!(rep.has(AnomalyKind::GarbageRead), "{rep}");
        let dup = history(&[ok(0, vec![Mop::write(1, 1)]), ok(1, vec![Mop::write(1, 1)])]);
        assert!(matches!(
            check(&dup, Model::SnapshotIsolation),
            Err(Error::TxnHistory { .. })
        ));
        let mixed = history(&[
            ok(0, vec![Mop::write(1, 1)]),
            ok(1, vec![Mop::append(2, 1)]),
        ]);
        assert!(check(&mixed, Model::SnapshotIsolation).is_err());
    }

    #[test]
    fn timestamps_order_versions_and_check_snapshot_reads() {
        let ts = |p, ops, s, c| (p, ops, EventType::Ok, Some((s, c)));
        // Clock-SI-correct history.
        let good = [
            ts(0, vec![rr(1, None), Mop::write(1, 1)], 1, 5),
            ts(1, vec![rr(1, Some(1)), Mop::write(1, 2)], 6, 8),
            ts(2, vec![rr(1, Some(1))], 7, 7),
            ts(3, vec![rr(1, Some(2))], 9, 9),
        ];
        assert!(si(&good).anomalies.is_empty(), "{}", si(&good));
        // T1 reads nil although T0 committed below its snapshot.
        let stale = [
            ts(0, vec![Mop::write(1, 1)], 1, 5),
            ts(1, vec![rr(1, None)], 9, 9),
        ];
        let rep = si(&stale);
        assert!(
            !rep.valid && rep.has(AnomalyKind::StaleSnapshotRead),
            "{rep}"
        );
        assert!(check(&history(&stale), Model::Serializable).unwrap().valid);
        // Two concurrent blind writers both commit; one commits below its snapshot.
        let rep = si(&[
            ts(0, vec![Mop::write(1, 1)], 1, 5),
            ts(1, vec![Mop::write(1, 2)], 3, 3),
        ]);
        assert!(rep.has(AnomalyKind::WwConflict), "{rep}");
        assert!(rep.has(AnomalyKind::TimestampOrder), "{rep}");
        // A list whose order disagrees with commit timestamps.
        let rep = si(&[
            ts(0, vec![Mop::append(1, 1)], 1, 9),
            ts(1, vec![Mop::append(1, 2)], 10, 12),
            ok(2, vec![r(1, &[2, 1])]),
        ]);
        assert!(rep.has(AnomalyKind::TimestampOrder), "{rep}");
    }

    #[test]
    fn jsonl_round_trip_keeps_the_verdict() {
        let h = history(&[
            ok(0, vec![Mop::write(1, 1), Mop::write(2, 1)]),
            ok(1, vec![rr(1, None), rr(2, Some(1))]),
            (2, vec![Mop::write(1, 5)], EventType::Info, None),
        ]);
        let text = h.to_jsonl();
        let back = TxnHistory::from_jsonl(&text).unwrap();
        assert_eq!(back, h);
        assert_eq!(
            check(&back, Model::SnapshotIsolation).unwrap(),
            check(&h, Model::SnapshotIsolation).unwrap()
        );
    }

    #[test]
    fn bank_audits() {
        let audit = |b: &[i64]| {
            b.iter()
                .copied()
                .enumerate()
                .collect::<BTreeMap<usize, i64>>()
        };
        let good = [audit(&[100, 100]), audit(&[50, 150]), audit(&[0, 200])];
        assert_eq!(check_bank_audits(&good, Some(200)), Ok(()));
        assert_eq!(check_bank_audits(&good, None), Ok(()));
        let bad = [audit(&[100, 100]), audit(&[50, 100]), audit(&[-1, 201])];
        assert_eq!(check_bank_audits(&bad, None).unwrap_err().audit, 1);
        let negative = [audit(&[100, 100]), audit(&[-1, 201])];
        let err = check_bank_audits(&negative, None).unwrap_err();
        assert_eq!(err.audit, 1);
        assert!(err.reason.contains("negative"), "{}", err.reason);
    }

    /// A random transaction: (is list-append, micro-op choices (kind, key)).
    fn txn_strategy() -> impl Strategy<Value = Vec<(bool, i64)>> {
        prop::collection::vec((any::<bool>(), 0i64..4), 1..5)
    }

    /// Runs `txns` one at a time over a map, as processes `i % 3`, every 5th one aborted,
    /// with Clock-SI-style timestamps if `stamps`.
    fn serial(list: bool, txns: &[Vec<(bool, i64)>], stamps: bool) -> TxnHistory {
        let mut lists: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut regs: BTreeMap<i64, i64> = BTreeMap::new();
        let mut h = TxnHistory::new();
        let mut next = 0i64;
        let mut clock = 0u64;
        for (i, txn) in txns.iter().enumerate() {
            let abort = i % 5 == 4;
            let (mut l2, mut r2) = (lists.clone(), regs.clone());
            let mut ops = Vec::new();
            for &(write, key) in txn {
                next += 1;
                ops.push(match (list, write) {
                    (true, true) => {
                        l2.entry(key).or_default().push(next);
                        Mop::append(key, next)
                    }
                    (true, false) => r(key, l2.get(&key).map_or(&[][..], Vec::as_slice)),
                    (false, true) => {
                        r2.insert(key, next);
                        Mop::write(key, next)
                    }
                    (false, false) => rr(key, r2.get(&key).copied()),
                });
            }
            let p = (i % 3) as u64;
            h.invoke(p, &ops, clock);
            if abort {
                h.record(
                    EventType::Fail,
                    p,
                    ops.iter().map(Mop::as_invoked).collect(),
                    clock,
                );
                continue;
            }
            (lists, regs) = (l2, r2);
            let snap = clock + 1;
            let writes = ops.iter().any(|m| !matches!(m, Mop::Read { .. }));
            clock += 2;
            let e = h.record(EventType::Ok, p, ops, clock);
            if stamps {
                e.snapshot_ts = Some(snap);
                e.commit_ts = Some(if writes { snap + 1 } else { snap });
            }
        }
        h
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn serial_histories_are_valid(
            list in any::<bool>(),
            stamps in any::<bool>(),
            txns in prop::collection::vec(txn_strategy(), 0..25),
        ) {
            let h = serial(list, &txns, stamps);
            for model in [
                Model::SnapshotIsolation,
                Model::StrongSessionSnapshotIsolation,
                Model::Serializable,
            ] {
                let rep = check(&h, model).unwrap();
                prop_assert!(rep.valid && rep.anomalies.is_empty(), "{}\n{}", rep, h.to_jsonl());
            }
        }
    }
}
