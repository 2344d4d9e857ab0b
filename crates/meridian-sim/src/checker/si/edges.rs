//! The dependency graph's edges (Adya's ww, wr and rw, and process order): recovered per key
//! from list-append reads or rw-register version orders (by commit timestamp when every
//! writer has one), with the ordering and timestamp anomalies met on the way. Every edge is
//! implied by the observations.

use super::{Analysis, AnomalyKind, PROC, RW, Seen, WR, WW};
use crate::checker::txn_history::{Mop, ReadValue, TxnStatus};
use std::collections::{BTreeMap, BTreeSet};

impl<'a> Analysis<'a> {
    /// ww, wr and rw edges for list-append, from each key's longest read.
    pub(super) fn list_edges(&mut self) {
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
    pub(super) fn register_edges(&mut self) {
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
    pub(super) fn timestamps(&mut self) {
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
    pub(super) fn process_edges(&mut self) {
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
}
