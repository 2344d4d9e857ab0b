//! What clients were told (invariants 4, 5 and 9): read guarantees, test-and-set outcomes and
//! failing fast, judged on the client history against the issue log.

use super::{
    Acked, Findings, Issued, KeyIssues, TlHistory, TlOp, TlOperation, TlResult, TlVersion,
    issues_by_key, show_content, show_ver,
};
use crate::checker::Verdict;
use crate::error::Error;
use crate::history::Micros;
use std::collections::BTreeMap;

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
