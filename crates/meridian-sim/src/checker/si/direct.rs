//! Anomalies seen without the dependency graph: `internal` (a transaction contradicting its
//! own earlier operations), `G1a`, `G1b`, `garbage-read` and `lost-update`. Each is reported
//! only when the observations imply it.

use super::{Analysis, AnomalyKind, Seen, Workload};
use crate::checker::txn_history::{Mop, ReadValue, Txn, TxnStatus};
use std::collections::BTreeMap;

impl<'a> Analysis<'a> {
    /// Each committed transaction replayed against its own operations.
    pub(super) fn internal(&mut self) {
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
    pub(super) fn reads(&mut self) {
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
    pub(super) fn lost_updates(&mut self) {
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
}
