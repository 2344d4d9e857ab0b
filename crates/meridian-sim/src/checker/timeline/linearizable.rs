//! Linearizability (invariant 3): each key's writes, TAS, deletes and `read_latest` converted
//! into a register over versions and judged by [`crate::checker::linearizability`].

use super::{Issued, KeyIssues, TlHistory, TlOp, TlOperation, TlResult, TlVersion, issues_by_key};
use crate::checker::linearizability;
use crate::checker::{Undecided, Verdict};
use crate::error::Error;
use crate::history::{Event, History, Op, Outcome};
use crate::text;
use meridian_core::Value;
use std::collections::{BTreeMap, BTreeSet};

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
