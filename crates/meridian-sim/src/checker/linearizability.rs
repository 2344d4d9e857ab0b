//! Linearizability of each key as one atomic register with read, write, delete and
//! compare-and-set (for the strong modes).
//!
//! Algorithm: Wing & Gong's search with Lowe's memoization, as in Knossos and Porcupine. The
//! key's invocations and completions form one time-ordered list; the search repeatedly picks
//! a pending operation whose invocation precedes every pending completion, applies it to the
//! register model and, when the model accepts, removes it from the list; it backtracks when
//! it reaches the completion of an operation not yet taken. A visited cache of
//! (taken-operations bitset, register value) prunes repeated configurations. Keys are
//! checked independently (P-compositionality: a history is linearizable iff each key's is).
//!
//! Semantics:
//! - the register starts absent; `delete` makes it absent; a read returns `[]` (absent) or
//!   exactly one value (more siblings are reported as a violation: not a register);
//! - `Ok` operations take effect exactly once between invocation and completion;
//! - `Unknown` (or never completed) operations take effect at any time after invocation, or
//!   never; `Fail` operations never took effect and are dropped;
//! - a CAS acknowledged `done` applied (the register held `expected`); one acknowledged
//!   `cas_rejected` did nothing and saw another value; an unknown one applies or not;
//! - equal timestamps count as concurrent.
//!
//! Guarantee: a `Pass` means a witness order exists for every key; a `Fail` carries a
//! counterexample (the linearizable prefix that got furthest in time, the register's value
//! after it, the operation whose completion it could not meet and why each operation pending
//! then could not go next).
//!
//! Cost and limits: exponential in the worst case (like every exact checker), near-linear
//! for low concurrency; a few hundred operations per key with a handful of concurrent
//! clients take milliseconds. Unknown operations stay pending forever and multiply the
//! search space, so the checker drops those that cannot matter: unknown reads, and unknown
//! writes, deletes and CAS whose resulting value no read or CAS expectation ever observes
//! ("never happened" then explains at least as much as any other placement). That pruning
//! is skipped on keys with a CAS acknowledged as rejected, which an unobserved write could
//! explain. A property test checks the whole checker against brute-force enumeration. A key
//! whose search exceeds [`Config::max_states_per_key`] is reported undecided, not passed.

use super::{Undecided, Verdict};
use crate::error::Error;
use crate::history::{History, Op, OpId, OpResult, Operation, Outcome};
use crate::text;
use meridian_core::Value;
// The visited cache is only probed, never iterated, so its hash order cannot leak out.
#[allow(clippy::disallowed_types)]
use std::collections::HashSet;
use std::collections::{BTreeMap, BTreeSet};

/// Search limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Distinct configurations explored per key before giving up (each costs roughly
    /// `ops / 8 + 48` bytes).
    pub max_states_per_key: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_states_per_key: 1_000_000,
        }
    }
}

/// Checks every key of `history` for linearizability with the default [`Config`].
pub fn check(history: &History) -> Result<Verdict, Error> {
    check_with(history, &Config::default())
}

/// Checks every key of `history` for linearizability.
pub fn check_with(history: &History, config: &Config) -> Result<Verdict, Error> {
    let by_key = history.operations_by_key()?;
    let mut verdict = Verdict::new("linearizability");
    let mut operations = 0;
    for (key, ops) in &by_key {
        operations += ops.len();
        let register = match Register::new(ops) {
            Ok(register) => register,
            Err((ids, explanation)) => {
                verdict.violation(key, ids, explanation);
                continue;
            }
        };
        match register.search(config.max_states_per_key) {
            Search::Linearizable => {}
            Search::Not { prefix, state } => {
                let (ids, explanation) = register.explain(&prefix, state);
                verdict.violation(key, ids, explanation);
            }
            Search::GaveUp => verdict.undecided.push(Undecided {
                key: key.clone(),
                reason: format!(
                    "gave up after {} configurations over {} operations",
                    config.max_states_per_key,
                    register.ops.len()
                ),
            }),
        }
    }
    verdict.checked = format!("{operations} operations on {} keys", by_key.len());
    Ok(verdict)
}

/// A register value: 0 is absent, `i > 0` is `values[i - 1]`.
type State = u32;

/// What one operation does to the register.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Needs the register to hold this.
    Read(State),
    /// Sets the register (a delete sets 0).
    Set(State),
    /// Needs `expected`, sets `new`.
    CasApplied { expected: State, new: State },
    /// Needs anything but `expected`, changes nothing.
    CasRejected { expected: State },
    /// Applies if the register holds `expected` (otherwise it is as if it never happened).
    CasMaybe { expected: State, new: State },
}

impl Step {
    /// The register after this step from `state`, or `None` if the step cannot happen there.
    fn apply(self, state: State) -> Option<State> {
        match self {
            Step::Read(v) => (state == v).then_some(state),
            Step::Set(v) => Some(v),
            Step::CasApplied { expected, new } | Step::CasMaybe { expected, new } => {
                (state == expected).then_some(new)
            }
            Step::CasRejected { expected } => (state != expected).then_some(state),
        }
    }
}

/// One operation kept for the search.
struct LinOp<'a> {
    op: &'a Operation,
    call: u64,
    /// Completion time; `None` for an operation that may never have happened.
    ret: Option<u64>,
    step: Step,
}

/// One key's operations as register steps.
struct Register<'a> {
    ops: Vec<LinOp<'a>>,
    values: Vec<&'a Value>,
}

enum Search {
    Linearizable,
    /// The linearizable prefix that got furthest (indices into `ops`) and the value after it.
    Not {
        prefix: Vec<usize>,
        state: State,
    },
    GaveUp,
}

impl<'a> Register<'a> {
    /// The key's operations as steps, or a violation no order can fix (a multi-value read).
    fn new(key_ops: &'a [Operation]) -> Result<Register<'a>, (Vec<OpId>, String)> {
        let mut ids: BTreeMap<&'a [u8], State> = BTreeMap::new();
        let mut values: Vec<&'a Value> = Vec::new();
        let mut intern = |v: Option<&'a Value>| -> State {
            let Some(v) = v else { return 0 };
            *ids.entry(&v[..]).or_insert_with(|| {
                values.push(v);
                values.len() as State
            })
        };
        // Values some read or CAS expectation observes, and whether any CAS was rejected.
        let mut observed: BTreeSet<State> = BTreeSet::new();
        let mut any_rejected = false;
        for op in key_ops {
            match (&op.op, &op.outcome) {
                (_, Outcome::Fail(_)) => {}
                (Op::Read, Outcome::Ok(OpResult::Read(vs))) => {
                    if vs.len() > 1 {
                        return Err((
                            vec![op.id],
                            format!(
                                "not a register: {op} returned {} siblings, a register holds \
                                 one value",
                                vs.len()
                            ),
                        ));
                    }
                    observed.insert(intern(vs.first()));
                }
                (Op::Cas { expected, .. }, outcome) => {
                    observed.insert(intern(expected.as_ref()));
                    any_rejected |= *outcome == Outcome::Ok(OpResult::CasRejected);
                }
                _ => {}
            }
        }
        let mut ops = Vec::new();
        for op in key_ops {
            let maybe = match &op.outcome {
                Outcome::Fail(_) => continue,
                Outcome::Ok(_) => false,
                Outcome::Unknown(_) => true,
            };
            let step = match (&op.op, &op.outcome) {
                (Op::Read, Outcome::Ok(OpResult::Read(vs))) => Step::Read(intern(vs.first())),
                (Op::Read, _) => continue,
                (Op::Write { value, .. }, _) => Step::Set(intern(Some(value))),
                (Op::Delete { .. }, _) => Step::Set(0),
                (Op::Cas { expected, new }, outcome) => {
                    let (expected, new) = (intern(expected.as_ref()), intern(Some(new)));
                    match outcome {
                        Outcome::Ok(OpResult::CasRejected) => Step::CasRejected { expected },
                        Outcome::Ok(_) => Step::CasApplied { expected, new },
                        _ => Step::CasMaybe { expected, new },
                    }
                }
            };
            if maybe && !any_rejected {
                let result = match step {
                    Step::Set(v) | Step::CasMaybe { new: v, .. } => v,
                    Step::Read(_) | Step::CasApplied { .. } | Step::CasRejected { .. } => 0,
                };
                if !observed.contains(&result) {
                    // Taking effect would only ever be overwritten unseen: "never" is as good.
                    continue;
                }
            }
            ops.push(LinOp {
                op,
                call: op.invoked_at,
                ret: if maybe { None } else { op.completed_at },
                step,
            });
        }
        Ok(Register { ops, values })
    }

    /// Wing & Gong / Lowe search over the entry list.
    fn search(&self, budget: usize) -> Search {
        let n = self.ops.len();
        // Entries: (time, 0 = call / 1 = return, op); calls first at equal times.
        let mut entries: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
        for (i, op) in self.ops.iter().enumerate() {
            entries.push((op.call, 0, i));
            if let Some(ret) = op.ret {
                entries.push((ret, 1, i));
            }
        }
        entries.sort_unstable();
        let m = entries.len();
        let (head, tail) = (m, m + 1);
        // A doubly linked list head, 0, 1, ..., m - 1, tail that entries leave and rejoin.
        let (mut next, mut prev) = (vec![tail; m + 2], vec![head; m + 2]);
        let order: Vec<usize> = std::iter::once(head)
            .chain(0..m)
            .chain(std::iter::once(tail))
            .collect();
        for pair in order.windows(2) {
            next[pair[0]] = pair[1];
            prev[pair[1]] = pair[0];
        }
        let mut ret_entry: Vec<Option<usize>> = vec![None; n];
        for (e, &(_, kind, op)) in entries.iter().enumerate() {
            if kind == 1 {
                ret_entry[op] = Some(e);
            }
        }
        let remove = |next: &mut [usize], prev: &mut [usize], e: usize| {
            next[prev[e]] = next[e];
            prev[next[e]] = prev[e];
        };
        let restore = |next: &mut [usize], prev: &mut [usize], e: usize| {
            next[prev[e]] = e;
            prev[next[e]] = e;
        };

        let mut taken = vec![0u64; n.div_ceil(64)];
        let mut state: State = 0;
        let acknowledged = self.ops.iter().filter(|op| op.ret.is_some()).count();
        let mut remaining = acknowledged;
        let mut stack: Vec<(usize, State)> = Vec::new(); // (call entry, state before)
        #[allow(clippy::disallowed_types)]
        let mut cache: HashSet<(Box<[u64]>, State)> = HashSet::new();
        // The stuck prefix that got furthest: (deadline it could not meet, acknowledged
        // operations taken), then the prefix and the register after it.
        let mut best: ((u64, usize), Vec<usize>, State) = ((0, 0), Vec::new(), 0);
        let mut stuck_once = false;
        let mut e = next[head];
        loop {
            if remaining == 0 {
                return Search::Linearizable;
            }
            if e != tail && entries[e].1 == 0 {
                let op = entries[e].2;
                if let Some(after) = self.ops[op].step.apply(state) {
                    taken[op / 64] |= 1 << (op % 64);
                    if cache.insert((taken.clone().into_boxed_slice(), after)) {
                        if cache.len() > budget {
                            return Search::GaveUp;
                        }
                        stack.push((e, state));
                        state = after;
                        remaining -= usize::from(self.ops[op].ret.is_some());
                        remove(&mut next, &mut prev, e);
                        if let Some(r) = ret_entry[op] {
                            remove(&mut next, &mut prev, r);
                        }
                        e = next[head];
                        continue;
                    }
                    taken[op / 64] &= !(1 << (op % 64));
                }
                e = next[e];
            } else {
                // A completion of an operation not taken yet: this prefix is stuck. Remember
                // the one that got furthest in time (the most telling counterexample), then
                // undo the last choice.
                let progress = (
                    entries.get(e).map_or(u64::MAX, |x| x.0),
                    acknowledged - remaining,
                );
                if !stuck_once || progress > best.0 {
                    let prefix = stack.iter().map(|&(c, _)| entries[c].2).collect();
                    best = (progress, prefix, state);
                    stuck_once = true;
                }
                let Some((call, before)) = stack.pop() else {
                    return Search::Not {
                        prefix: best.1,
                        state: best.2,
                    };
                };
                let op = entries[call].2;
                taken[op / 64] &= !(1 << (op % 64));
                state = before;
                remaining += usize::from(self.ops[op].ret.is_some());
                if let Some(r) = ret_entry[op] {
                    restore(&mut next, &mut prev, r);
                }
                restore(&mut next, &mut prev, call);
                e = next[call];
            }
        }
    }

    fn show_state(&self, state: State) -> String {
        match state {
            0 => "nothing (absent)".to_string(),
            v => text::show(self.values[v as usize - 1]),
        }
    }

    /// One line for `op` in a linearization: id, operation, result.
    fn short(&self, i: usize) -> String {
        let op = self.ops[i].op;
        let result = match &op.outcome {
            Outcome::Ok(OpResult::Read(vs)) => format!(" -> {}", text::show_set(vs)),
            Outcome::Ok(OpResult::CasRejected) => " (rejected)".to_string(),
            Outcome::Ok(OpResult::Done) => String::new(),
            _ => " (outcome unknown, taken as applied)".to_string(),
        };
        format!("{} {}{result}", op.id, op.op)
    }

    /// The counterexample: what the furthest stuck prefix leaves, which completion cannot be met,
    /// and why each candidate cannot go next.
    fn explain(&self, prefix: &[usize], state: State) -> (Vec<OpId>, String) {
        let mut in_prefix = vec![false; self.ops.len()];
        for &i in prefix {
            in_prefix[i] = true;
        }
        let blocker = (0..self.ops.len())
            .filter(|&i| !in_prefix[i])
            .filter_map(|i| self.ops[i].ret.map(|r| (r, i)))
            .min()
            .map(|(_, i)| i);
        let Some(blocker) = blocker else {
            // Unreachable: a failed search leaves an acknowledged operation out.
            return (Vec::new(), "no linearization exists".to_string());
        };
        let deadline = self.ops[blocker].ret.unwrap_or(u64::MAX);
        let mut candidates: Vec<usize> = (0..self.ops.len())
            .filter(|&i| !in_prefix[i] && self.ops[i].call <= deadline)
            .collect();
        candidates.sort_by_key(|&i| (self.ops[i].call, i));

        const SHOWN: usize = 8;
        let shown_prefix = if prefix.is_empty() {
            "no operation can be linearized first".to_string()
        } else {
            let skip = prefix.len().saturating_sub(SHOWN);
            let mut items: Vec<String> = prefix[skip..].iter().map(|&i| self.short(i)).collect();
            if skip > 0 {
                items.insert(0, format!("... {skip} earlier"));
            }
            format!(
                "the linearizable prefix that gets furthest takes {} of {} operations ({})",
                prefix.len(),
                self.ops.len(),
                items.join(", ")
            )
        };
        let reasons: Vec<String> = candidates
            .iter()
            .take(SHOWN)
            .map(|&i| {
                let held = self.show_state(state);
                let id = self.ops[i].op.id;
                match self.ops[i].step {
                    _ if self.ops[i].step.apply(state).is_some() => {
                        format!(
                            "{} could go next, but every order starting so fails",
                            self.short(i)
                        )
                    }
                    Step::Read(v) => format!(
                        "{id} read {} but the register holds {held}",
                        self.show_state(v)
                    ),
                    Step::CasApplied { expected, .. } => format!(
                        "{id} cas applied, so it needs {} but the register holds {held}",
                        self.show_state(expected)
                    ),
                    Step::CasRejected { .. } => format!(
                        "{id} cas was rejected, so it needs anything but {held}, which the \
                         register holds"
                    ),
                    Step::Set(_) | Step::CasMaybe { .. } => format!("{id} cannot apply"),
                }
            })
            .collect();
        let more = match candidates.len().saturating_sub(SHOWN) {
            0 => String::new(),
            k => format!("; and {k} more"),
        };
        let mut ids = vec![self.ops[blocker].op.id];
        ids.extend(
            candidates
                .iter()
                .map(|&i| self.ops[i].op.id)
                .filter(|&id| id != self.ops[blocker].op.id),
        );
        let explanation = format!(
            "not linearizable: {shown_prefix}, after which the register holds {}; {} must take \
             effect by {deadline}µs, but none of the operations pending then can go next: {}{more}",
            self.show_state(state),
            self.ops[blocker].op,
            reasons.join("; ")
        );
        (ids, explanation)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::super::testkit::Script;
    use super::*;

    fn lin(s: &Script) -> Verdict {
        check(&s.h).unwrap()
    }

    fn cas(s: &mut Script, c: u32, expected: Option<&str>, new: &str, t: (u64, u64), ok: bool) {
        let outcome = if ok {
            Outcome::done()
        } else {
            Outcome::cas_rejected()
        };
        let op = Op::cas(expected.map(str::to_string), new.to_string());
        s.op(c, "k", op, t, outcome);
    }

    #[test]
    fn sequential_register_passes() {
        let mut s = Script::new();
        s.read(1, "k", &[], (0, 5));
        s.write(1, "k", "v1", &[], (10, 20));
        s.read(2, "k", &["v1"], (30, 40));
        s.delete(1, "k", &[], (50, 60));
        s.read(2, "k", &[], (70, 80));
        cas(&mut s, 1, None, "v2", (90, 100), true);
        cas(&mut s, 2, Some("v1"), "v3", (110, 120), false);
        s.read(2, "k", &["v2"], (130, 140));
        let v = lin(&s);
        assert!(v.passed(), "{v}");
        assert_eq!(v.checked, "8 operations on 1 keys");
    }

    #[test]
    fn concurrent_overlapping_operations_pass() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 100));
        s.write(2, "k", "v2", &[], (0, 100));
        // While both writes run, reads may see either order...
        s.read(3, "k", &[], (5, 8));
        s.read(3, "k", &["v1"], (10, 20));
        s.read(4, "k", &["v2"], (30, 40));
        // ... and afterwards the last one sticks.
        s.read(3, "k", &["v2"], (110, 120));
        let v = lin(&s);
        assert!(v.passed(), "{v}");
    }

    #[test]
    fn a_read_of_an_old_value_after_a_later_write_completed_fails() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        let w2 = s.write(1, "k", "v2", &[], (20, 30));
        let r = s.read(2, "k", &["v1"], (40, 50));
        let v = lin(&s);
        assert_eq!(v.status(), Status::Fail, "{v}");
        let why = &v.violations[0];
        assert_eq!(why.ops, vec![r]);
        assert!(why.explanation.contains("takes 2 of 3 operations"), "{why}");
        assert!(why.explanation.contains("op1 blind write \"v2\""), "{why}");
        assert!(
            why.explanation.contains("must take effect by 50µs"),
            "{why}"
        );
        assert!(
            why.explanation
                .contains("op2 read \"v1\" but the register holds \"v2\""),
            "{why}"
        );
        let _ = w2;
    }

    #[test]
    fn reading_a_value_before_its_write_was_invoked_fails() {
        let mut s = Script::new();
        s.read(1, "k", &["v1"], (0, 10));
        s.write(2, "k", "v1", &[], (20, 30));
        let v = lin(&s);
        assert_eq!(v.status(), Status::Fail, "{v}");
        assert!(
            v.violations[0]
                .explanation
                .contains("no operation can be linearized first")
        );
    }

    #[test]
    fn new_then_old_inversion_fails() {
        // A read sees the new value while the write runs, a later read sees the old one.
        let mut s = Script::new();
        s.write(1, "k", "v0", &[], (0, 5));
        s.write(1, "k", "v1", &[], (10, 100));
        s.read(2, "k", &["v1"], (20, 30));
        s.read(3, "k", &["v0"], (40, 50));
        assert_eq!(lin(&s).status(), Status::Fail);
    }

    #[test]
    fn concurrent_writes_read_in_two_orders_after_both_completed_fails() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 100));
        s.write(2, "k", "v2", &[], (0, 100));
        s.read(3, "k", &["v1"], (110, 120));
        s.read(4, "k", &["v2"], (130, 140));
        assert_eq!(lin(&s).status(), Status::Fail);
    }

    #[test]
    fn a_cas_that_succeeds_twice_on_the_same_expectation_fails() {
        let mut s = Script::new();
        s.write(1, "k", "v0", &[], (0, 10));
        cas(&mut s, 2, Some("v0"), "v1", (20, 40), true);
        cas(&mut s, 3, Some("v0"), "v2", (25, 35), true);
        let v = lin(&s);
        assert_eq!(v.status(), Status::Fail, "{v}");
        assert!(
            v.violations[0]
                .explanation
                .contains("cas applied, so it needs \"v0\""),
            "{v}"
        );
    }

    #[test]
    fn cas_rejections_must_be_explained() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        cas(&mut s, 2, Some("v1"), "v2", (20, 30), false);
        let v = lin(&s);
        assert_eq!(v.status(), Status::Fail, "{v}");
        assert!(
            v.violations[0].explanation.contains("cas was rejected"),
            "{v}"
        );

        // A concurrent write explains it.
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write(3, "k", "v3", &[], (15, 40));
        cas(&mut s, 2, Some("v1"), "v2", (20, 30), false);
        s.read(2, "k", &["v3"], (50, 60));
        assert!(lin(&s).passed());

        // So can an unknown write nobody read (it must not be pruned).
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(3, "k", "v3", &[], (15, 16));
        cas(&mut s, 2, Some("v1"), "v2", (20, 30), false);
        assert!(lin(&s).passed());
    }

    #[test]
    fn unknown_outcomes_may_take_effect_late_or_never() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(2, "k", "v2", &[], (20, 30));
        s.read(3, "k", &["v1"], (40, 50)); // not yet
        s.read(3, "k", &["v2"], (1_000, 1_010)); // took effect long after the timeout
        assert!(lin(&s).passed());

        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(2, "k", "v2", &[], (20, 30));
        s.pending(4, "k", Op::delete(Vec::<Value>::new()), 25);
        s.read(3, "k", &["v1"], (40, 50)); // never
        assert!(lin(&s).passed());

        // Once seen, it happened: the old value cannot come back.
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(2, "k", "v2", &[], (20, 30));
        s.read(3, "k", &["v2"], (40, 50));
        s.read(3, "k", &["v1"], (60, 70));
        assert_eq!(lin(&s).status(), Status::Fail);

        // An unknown CAS applies only from its expectation.
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        let op = Op::cas(Some("v0"), "v2");
        s.op(2, "k", op, (20, 30), Outcome::unknown("timeout"));
        s.read(3, "k", &["v2"], (40, 50));
        assert_eq!(lin(&s).status(), Status::Fail);
    }

    #[test]
    fn failed_operations_never_happened() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.op(
            2,
            "k",
            Op::blind_write("v2"),
            (20, 30),
            Outcome::fail("no quorum"),
        );
        s.read(3, "k", &["v2"], (40, 50));
        assert_eq!(lin(&s).status(), Status::Fail);
    }

    #[test]
    fn siblings_are_not_a_register() {
        let mut s = Script::new();
        s.write(1, "k", "a", &[], (0, 10));
        s.write(2, "k", "b", &[], (0, 10));
        let r = s.read(3, "k", &["a", "b"], (20, 30));
        let v = lin(&s);
        assert_eq!(v.violations[0].ops, vec![r]);
        assert!(
            v.violations[0].explanation.contains("not a register"),
            "{v}"
        );
    }

    #[test]
    fn keys_are_checked_independently() {
        let mut s = Script::new();
        s.write(1, "a", "x", &[], (0, 10));
        s.read(2, "b", &[], (20, 30));
        s.write(1, "b", "y", &[], (40, 50));
        s.read(2, "a", &["x"], (60, 70));
        assert!(lin(&s).passed());
        s.read(2, "b", &["x"], (80, 90));
        let v = lin(&s);
        assert_eq!(v.violations.len(), 1);
        assert_eq!(&v.violations[0].key[..], b"b");
    }

    #[test]
    fn a_tiny_budget_is_undecided_not_passed() {
        let mut s = Script::new();
        for i in 0..6u64 {
            s.write(i as u32, "k", &format!("v{i}"), &[], (0, 100));
        }
        s.read(9, "k", &["v5"], (200, 210));
        let v = check_with(
            &s.h,
            &Config {
                max_states_per_key: 3,
            },
        )
        .unwrap();
        assert_eq!(v.status(), Status::Undecided, "{v}");
        assert!(
            v.to_string().contains("gave up after 3 configurations"),
            "{v}"
        );
    }

    /// A deterministic pseudo-random stream (no RNG dependency in unit tests).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// `clients` clients each run `per_client` overlapping operations on one register; each
    /// takes effect at a random instant inside its interval (so the history is linearizable).
    fn concurrent_history(seed: u64, clients: u32, per_client: usize, unknown: bool) -> Script {
        let mut rng = Lcg(seed);
        let mut s = Script::new();
        // (effect time, client, op kind, interval, op number)
        type Planned = (u64, u32, u64, (u64, u64), u64);
        let mut planned: Vec<Planned> = Vec::new();
        let mut id = 0;
        for c in 0..clients {
            let mut t = rng.below(50);
            for _ in 0..per_client {
                let len = 5 + rng.below(60);
                let effect = t + rng.below(len + 1);
                planned.push((effect, c, rng.below(10), (t, t + len), id));
                id += 1;
                t += len + 1 + rng.below(20);
            }
        }
        planned.sort();
        let mut state: Option<String> = None;
        for (_, c, kind, t, id) in planned {
            match kind {
                0..=4 => {
                    let got: Vec<&str> = state.iter().map(|v| &v[..]).collect();
                    s.read(c, "k", &got, t);
                }
                5 if unknown => {
                    let v = format!("v{id}");
                    if rng.below(2) == 0 {
                        state = Some(v.clone()); // happened
                    }
                    s.write_unknown(c, "k", &v, &[], t);
                }
                5..=8 => {
                    let v = format!("v{id}");
                    s.write(c, "k", &v, &[], t);
                    state = Some(v);
                }
                _ => {
                    s.delete(c, "k", &[], t);
                    state = None;
                }
            }
        }
        s
    }

    #[test]
    fn hundreds_of_concurrent_operations_per_key_check_fast() {
        for seed in 0..5 {
            let s = concurrent_history(seed, 6, 80, false);
            let v = lin(&s);
            assert!(v.passed(), "seed {seed}: {v}");
            let s = concurrent_history(seed, 5, 60, true);
            let v = lin(&s);
            assert!(v.passed(), "seed {seed} with unknowns: {v}");
        }
    }

    #[test]
    fn a_never_written_value_in_a_big_history_fails() {
        let mut s = concurrent_history(7, 6, 80, false);
        s.read(99, "k", &["never-written"], (100_000, 100_010));
        assert_eq!(lin(&s).status(), Status::Fail);
    }
}
