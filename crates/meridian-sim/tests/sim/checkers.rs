//! Property tests of the history format and the checkers: histories produced by a real
//! `BTreeMap` model pass every checker, mutated ones fail, and the quorum-read checker's fast
//! frontier search agrees with a naive reference on random causal graphs.

use bytes::Bytes;
use meridian_core::DcId;
use meridian_sim::{
    ClientId, Event, FinalState, History, Op, OpId, Outcome, ReplicaStates, Status,
    check_convergence, check_linearizability, check_lost_writes, check_quorum_reads, text,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// One planned operation of a sequential run.
#[derive(Clone, Debug)]
struct Step {
    key: u8,
    /// 0-3 read, 4-6 write, 7 delete, 8-9 cas.
    kind: u8,
    /// 0-6 ok, 7 fail, 8 unknown (timed out), 9 unknown (never completed).
    outcome: u8,
    /// Whether an unknown operation took effect.
    happened: bool,
    /// For a CAS: 0 expect the current value, 1 expect absent, 2 expect an older value.
    expect: u8,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (0u8..3, 0u8..10, 0u8..10, any::<bool>(), 0u8..3).prop_map(
            |(key, kind, outcome, happened, expect)| Step {
                key,
                kind,
                outcome,
                happened,
                expect,
            },
        ),
        1..60,
    )
}

/// A sequential run against a `BTreeMap` register per key: every operation completes before
/// the next starts (unknown ones stay ambiguous), each write's context is the current value.
struct Run {
    history: History,
    model: BTreeMap<Bytes, Bytes>,
    /// Keys whose current value an acknowledged write produced and no delete covered.
    acked_current: BTreeSet<Bytes>,
    reads: Vec<OpId>,
}

fn run(steps: &[Step]) -> Run {
    let mut history = History::new();
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    let mut acked_current = BTreeSet::new();
    let mut written: Vec<Bytes> = Vec::new();
    let mut reads = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let key = Bytes::from(format!("k{}", step.key));
        let current = model.get(&key).cloned();
        let value = Bytes::from(format!("v{i}"));
        let t = 10 * i as u64;
        let (ok, fail) = (step.outcome < 7, step.outcome == 7);
        let applies = ok || (!fail && step.happened);
        let client = ClientId(u32::from(step.key) * 2 + (i as u32 % 2));
        let dc = DcId(i as u32 % 2);
        let (op, outcome, effect) = match step.kind {
            0..=3 => {
                let outcome = if ok {
                    Outcome::read(current.clone())
                } else {
                    Outcome::unknown("timeout")
                };
                (Op::Read, outcome, None)
            }
            4..=7 => {
                let op = if step.kind == 7 {
                    Op::delete(current.clone())
                } else {
                    Op::write(value.clone(), current.clone())
                };
                let effect = applies.then(|| op.written_value().cloned());
                (op, outcome_of(ok, fail, Outcome::done()), effect)
            }
            _ => {
                let expected = match step.expect {
                    0 => current.clone(),
                    1 => None,
                    _ => written.first().cloned(),
                };
                let matches = expected == current;
                let op = Op::cas(expected, value.clone());
                let result = if matches {
                    Outcome::done()
                } else {
                    Outcome::cas_rejected()
                };
                let effect = (applies && matches).then(|| Some(value.clone()));
                (op, outcome_of(ok, fail, result), effect)
            }
        };
        if op.written_value().is_some() {
            written.push(value.clone());
        }
        let id = history.invoke(client, dc, key.clone(), op, t);
        if matches!(outcome, Outcome::Ok(_)) && effect.is_none() && step.kind < 4 {
            reads.push(id);
        }
        if step.outcome != 9 || ok || fail {
            history.complete(id, outcome.clone(), t + 5);
        }
        if step.kind == 7 {
            // Even a failed or unknown delete may have happened: it excuses what it covers.
            acked_current.remove(&key);
        }
        if let Some(new) = effect {
            match new {
                Some(v) => model.insert(key.clone(), v),
                None => model.remove(&key),
            };
            if ok && model.contains_key(&key) {
                acked_current.insert(key.clone());
            } else {
                acked_current.remove(&key);
            }
        }
    }
    Run {
        history,
        model,
        acked_current,
        reads,
    }
}

fn outcome_of(ok: bool, fail: bool, success: Outcome) -> Outcome {
    if ok {
        success
    } else if fail {
        Outcome::fail("no quorum")
    } else {
        Outcome::unknown("timeout")
    }
}

fn final_state(model: &BTreeMap<Bytes, Bytes>) -> FinalState {
    model
        .iter()
        .map(|(k, v)| (k.clone(), vec![v.clone()]))
        .collect()
}

/// The history with `op`'s completion replaced by `outcome`.
fn with_outcome(history: &History, op: OpId, outcome: Outcome) -> History {
    History::from_events(
        history
            .events()
            .iter()
            .map(|event| match event {
                Event::Complete { op_id, at, .. } if *op_id == op => Event::Complete {
                    op_id: op,
                    outcome: outcome.clone(),
                    at: *at,
                },
                other => other.clone(),
            })
            .collect(),
    )
}

proptest! {
    #[test]
    fn text_round_trips(bytes in prop::collection::vec(any::<u8>(), 0..24)) {
        prop_assert_eq!(text::decode(&text::encode(&bytes)).unwrap(), &bytes[..]);
    }

    #[test]
    fn json_lines_round_trip(steps in steps(), key in prop::collection::vec(any::<u8>(), 0..8)) {
        let mut history = run(&steps).history;
        let op = history.invoke(ClientId(9), DcId(1), key.clone(), Op::blind_write(key), 1);
        history.complete(op, Outcome::unknown("odd bytes"), 2);
        let mut saved = Vec::new();
        history.save(&mut saved).unwrap();
        prop_assert_eq!(History::load(&saved[..]).unwrap(), history);
    }

    #[test]
    fn sequential_model_histories_pass_every_checker(steps in steps()) {
        let run = run(&steps);
        let lin = check_linearizability(&run.history).unwrap();
        prop_assert!(lin.passed(), "{}", lin);
        let quorum = check_quorum_reads(&run.history).unwrap();
        prop_assert!(quorum.passed(), "{}", quorum);
        let lost = check_lost_writes(&run.history, &final_state(&run.model)).unwrap();
        prop_assert!(lost.passed(), "{}", lost);
        let replicas: ReplicaStates = run
            .model
            .iter()
            .map(|(k, v)| {
                let per = ["n1", "n2", "n3"].iter().map(|n| (n.to_string(), vec![v.clone()]));
                (k.clone(), per.collect())
            })
            .collect();
        prop_assert!(check_convergence(&replicas).passed());
    }

    #[test]
    fn a_read_of_a_never_written_value_is_caught(steps in steps(), pick in any::<prop::sample::Index>()) {
        let run = run(&steps);
        prop_assume!(!run.reads.is_empty());
        let read = run.reads[pick.index(run.reads.len())];
        let mutated = with_outcome(&run.history, read, Outcome::read(["never-written"]));
        let lin = check_linearizability(&mutated).unwrap();
        prop_assert_eq!(lin.status(), Status::Fail);
        prop_assert!(lin.violations[0].ops.contains(&read), "{}", lin);
        let quorum = check_quorum_reads(&mutated).unwrap();
        prop_assert_eq!(quorum.status(), Status::Fail);
    }

    #[test]
    fn dropping_an_acknowledged_current_value_is_a_lost_write(steps in steps(), pick in any::<prop::sample::Index>()) {
        let run = run(&steps);
        let keys: Vec<&Bytes> = run.acked_current.iter().collect();
        prop_assume!(!keys.is_empty());
        let mut state = final_state(&run.model);
        state.remove(keys[pick.index(keys.len())]);
        let lost = check_lost_writes(&run.history, &state).unwrap();
        prop_assert_eq!(lost.status(), Status::Fail);
    }

    #[test]
    fn quorum_frontier_search_agrees_with_the_naive_definition(graph in causal_graph()) {
        let (history, expected) = graph;
        let verdict = check_quorum_reads(&history).unwrap();
        let flagged: BTreeSet<OpId> = verdict
            .violations
            .iter()
            .filter(|v| v.explanation.starts_with("read misses"))
            .map(|v| v.ops[0])
            .collect();
        prop_assert_eq!(flagged, expected, "{}", verdict);
    }
}

/// One write or delete of [`causal_graph`].
struct Update {
    /// `None` for a delete.
    value: Option<Bytes>,
    /// The updates it supersedes directly.
    sup: Vec<usize>,
    invoked: u64,
    completed: u64,
    acked: bool,
}

/// A random single-key history with arbitrary (acyclic) supersession, overlapping times and
/// mixed outcomes, plus the reads a naive reference says miss an acknowledged write.
fn causal_graph() -> impl Strategy<Value = (History, BTreeSet<OpId>)> {
    let update = (0u64..200, 1u64..60, 0u8..10, any::<u64>(), any::<bool>());
    let read = (0u64..260, 1u64..30, any::<u64>());
    (
        prop::collection::vec(update, 1..25),
        prop::collection::vec(read, 0..25),
    )
        .prop_map(|(updates, reads)| {
            let mut h = History::new();
            let mut nodes: Vec<Update> = Vec::new();
            for (i, &(at, len, outcome, mask, is_delete)) in updates.iter().enumerate() {
                let sup: Vec<usize> = (0..i).filter(|j| mask >> (j % 64) & 1 == 1).collect();
                let sup_values: Vec<Bytes> =
                    sup.iter().filter_map(|&j| nodes[j].value.clone()).collect();
                let is_delete = is_delete && i % 3 == 0;
                let value = (!is_delete).then(|| Bytes::from(format!("w{i}")));
                let op = match &value {
                    Some(v) => Op::write(v.clone(), sup_values),
                    None => Op::delete(sup_values),
                };
                let id = h.invoke(ClientId(i as u32), DcId(0), "k", op, at);
                let acked = outcome < 7;
                let result = match outcome {
                    0..=6 => Outcome::done(),
                    7 => Outcome::fail("no quorum"),
                    _ => Outcome::unknown("timeout"),
                };
                h.complete(id, result, at + len);
                let sup = sup
                    .into_iter()
                    .filter(|&j| nodes[j].value.is_some())
                    .collect();
                nodes.push(Update {
                    value,
                    sup,
                    invoked: at,
                    completed: at + len,
                    acked,
                });
            }
            let reaches = |from: usize, to: usize| {
                let mut stack = vec![from];
                let mut seen = vec![false; nodes.len()];
                while let Some(n) = stack.pop() {
                    if n == to {
                        return true;
                    }
                    if !std::mem::replace(&mut seen[n], true) {
                        stack.extend(nodes[n].sup.iter().copied());
                    }
                }
                false
            };
            let mut missing = BTreeSet::new();
            for (i, &(at, len, mask)) in reads.iter().enumerate() {
                let done = at + len;
                let returned: Vec<usize> = (0..nodes.len())
                    .filter(|&n| mask >> (n % 64) & 1 == 1 && nodes[n].value.is_some())
                    .collect();
                let values: Vec<Bytes> = returned
                    .iter()
                    .filter_map(|&n| nodes[n].value.clone())
                    .collect();
                let id = h.invoke(ClientId(100 + i as u32), DcId(1), "k", Op::Read, at);
                h.complete(id, Outcome::read(values), done);
                // Phantom values (written later) do not count as returned.
                let returned: Vec<usize> = returned
                    .into_iter()
                    .filter(|&n| nodes[n].invoked <= done)
                    .collect();
                let misses = (0..nodes.len()).any(|w| {
                    let write = &nodes[w];
                    write.value.is_some()
                        && write.acked
                        && write.completed < at
                        && !returned.iter().any(|&v| reaches(v, w))
                        && !(0..nodes.len()).any(|d| {
                            nodes[d].value.is_none() && nodes[d].invoked <= done && reaches(d, w)
                        })
                });
                if misses {
                    missing.insert(id);
                }
            }
            (h, missing)
        })
}

/// One operation of [`small_concurrent`]: kind (0 read, 1 write, 2 delete, 3 cas), interval,
/// outcome (0-5 ok, 6 fail, 7 unknown), a value choice and whether a CAS applied.
type Small = (u8, u64, u64, u8, u8, bool);

/// Up to 7 heavily overlapping operations on one key with random results (about half of
/// them linearizable).
fn small_concurrent() -> impl Strategy<Value = Vec<Small>> {
    prop::collection::vec(
        (0u8..4, 0u64..30, 0u64..12, 0u8..8, 0u8..8, any::<bool>()),
        1..8,
    )
}

/// The register state a value choice names: 0 absent, else `w{choice - 1}` (maybe never
/// written, when no such write exists).
fn chosen(choice: u8, n: usize) -> Option<Bytes> {
    let i = usize::from(choice) % (n + 1);
    (i > 0).then(|| Bytes::from(format!("w{}", i - 1)))
}

fn small_history(ops: &[Small]) -> History {
    let mut h = History::new();
    for (i, &(kind, at, len, outcome, choice, applied)) in ops.iter().enumerate() {
        let mine = Bytes::from(format!("w{i}"));
        let pick = chosen(choice, ops.len());
        let (op, ok) = match kind {
            0 => (Op::Read, Outcome::read(pick)),
            1 => (Op::blind_write(mine), Outcome::done()),
            2 => (Op::delete(Vec::<Bytes>::new()), Outcome::done()),
            _ => {
                let ok = if applied {
                    Outcome::done()
                } else {
                    Outcome::cas_rejected()
                };
                (Op::cas(pick, mine), ok)
            }
        };
        let id = h.invoke(ClientId(i as u32), DcId(0), "k", op, at);
        let outcome = match outcome {
            0..=5 => ok,
            6 => Outcome::fail("refused"),
            _ => Outcome::unknown("timeout"),
        };
        h.complete(id, outcome, at + len);
    }
    h
}

/// Brute force: some subset of the unknown operations plus every acknowledged one, in some
/// order respecting real time (`a` before `b` when `a` completed before `b` was invoked),
/// replays correctly on a register.
fn brute_force_linearizable(ops: &[Small]) -> bool {
    let n = ops.len();
    let is_ok = |i: usize| ops[i].3 <= 5;
    let is_unknown = |i: usize| ops[i].3 == 7;
    let candidates: Vec<usize> = (0..n).filter(|&i| is_ok(i) || is_unknown(i)).collect();
    let unknown: Vec<usize> = candidates
        .iter()
        .copied()
        .filter(|&i| is_unknown(i))
        .collect();
    (0u32..1 << unknown.len()).any(|mask| {
        let chosen_ops: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| is_ok(i) || mask >> unknown.iter().position(|&u| u == i).unwrap() & 1 == 1)
            .collect();
        permutations_ok(
            ops,
            &chosen_ops,
            &mut Vec::new(),
            &mut vec![false; chosen_ops.len()],
        )
    })
}

fn permutations_ok(
    ops: &[Small],
    set: &[usize],
    order: &mut Vec<usize>,
    used: &mut [bool],
) -> bool {
    if order.len() == set.len() {
        return replay(ops, order);
    }
    for j in 0..set.len() {
        if used[j] {
            continue;
        }
        let b = set[j];
        // Every unused acknowledged `a` that completed before `b` was invoked must come first.
        let blocked = (0..set.len()).any(|k| {
            let a = set[k];
            !used[k] && k != j && ops[a].3 <= 5 && ops[a].1 + ops[a].2 < ops[b].1
        });
        if blocked {
            continue;
        }
        used[j] = true;
        order.push(b);
        if permutations_ok(ops, set, order, used) {
            return true;
        }
        order.pop();
        used[j] = false;
    }
    false
}

fn replay(ops: &[Small], order: &[usize]) -> bool {
    let mut state: Option<Bytes> = None;
    for &i in order {
        let (kind, _, _, outcome, choice, applied) = ops[i];
        let mine = Bytes::from(format!("w{i}"));
        let pick = chosen(choice, ops.len());
        match kind {
            0 if pick != state => return false,
            0 => {}
            1 => state = Some(mine),
            2 => state = None,
            _ if outcome == 7 && pick == state => state = Some(mine),
            _ if outcome == 7 => {} // an unknown CAS that found another value did nothing
            _ if applied != (pick == state) => return false,
            _ if applied => state = Some(mine),
            _ => {}
        }
    }
    true
}

proptest! {
    #[test]
    fn linearizability_agrees_with_brute_force(ops in small_concurrent()) {
        let verdict = check_linearizability(&small_history(&ops)).unwrap();
        prop_assert_eq!(verdict.passed(), brute_force_linearizable(&ops), "{}", verdict);
    }
}
