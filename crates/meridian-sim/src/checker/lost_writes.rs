//! No acknowledged write is lost (eventual consistency, sibling mode), judged on the final
//! state after heal, anti-entropy and quiescence.
//!
//! For each key, with the final sibling set `F` (absent key: empty) and the key's
//! supersession graph (see the `graph` module: `s` supersedes `u` when `u`'s value is in
//! `s`'s causal context, transitively), the checker reports:
//! - **lost write**: a write acknowledged `Ok` whose value is not in `F` and that is not
//!   superseded by a write whose value is in `F`, nor by any delete. Writes and deletes of any
//!   outcome may sit on the chain: an `Unknown` or `Fail` operation may have happened (a write
//!   that missed its quorum may still have reached a replica), and one whose value survives
//!   certainly did;
//! - **resurrected value**: a value in `F` that something certainly applied superseded: an
//!   acknowledged write or delete, or a write whose value is also in `F` (after a delete
//!   acknowledged with a context covering `v`, or a write over `v` that survives, `v` must be
//!   gone for good; this catches tombstones reaped too early and merges that keep dominated
//!   siblings);
//! - **phantom value**: a value in `F` that no write or CAS of this key produced.
//!
//! Writes without an `Ok` need not survive. The history's written values must be unique
//! ([`crate::Error::DuplicateValue`] otherwise), since writes are identified by value.
//!
//! Limits: the checker trusts `supersedes` as recorded by the workload; a delete whose outcome
//! is unknown excuses the absence of every write it supersedes (it may have happened); under
//! last-writer-wins (no siblings) concurrent acknowledged writes are legitimately dropped, so
//! run it on sibling buckets only.

use super::graph::{KeyGraph, check_unique_values};
use super::{FinalState, Verdict};
use crate::error::Error;
use crate::history::History;
use crate::text;
use meridian_core::{Key, Value};
use std::collections::BTreeSet;

/// Checks that every acknowledged write of `history` survives in `final_state`, or was
/// superseded by a surviving write or a delete; that no superseded value survives; and that
/// no surviving value was never written.
pub fn check(history: &History, final_state: &FinalState) -> Result<Verdict, Error> {
    let by_key = history.operations_by_key()?;
    check_unique_values(&by_key)?;
    let mut verdict = Verdict::new("lost-writes");
    let keys: BTreeSet<&Key> = by_key.keys().chain(final_state.keys()).collect();
    let mut acked_writes = 0usize;
    for &key in &keys {
        let ops = by_key.get(key).map_or(&[][..], Vec::as_slice);
        let mut present: Vec<&Value> = final_state.get(key).into_iter().flatten().collect();
        present.sort();
        present.dedup();
        let g = KeyGraph::new(ops);
        let shown_final = text::show_set(present.iter().copied());

        let mut present_nodes = Vec::new();
        for &value in &present {
            match g.node_of(value) {
                Some(n) => present_nodes.push(n),
                None => verdict.violation(
                    key,
                    Vec::new(),
                    format!(
                        "phantom value: the final state {shown_final} holds {}, which no write \
                         or CAS to this key produced",
                        text::show(value)
                    ),
                ),
            }
        }

        let deletes = (0..g.nodes.len()).filter(|&n| g.nodes[n].value.is_none());
        let mut explained = vec![false; g.nodes.len()];
        g.mark_down(present_nodes.iter().copied().chain(deletes), &mut explained);

        let mut acked: Vec<usize> = (0..g.nodes.len())
            .filter(|&n| g.op(n).is_acknowledged())
            .collect();
        acked.sort_by_key(|&n| (g.op(n).completed_at, n));
        let mut above = None; // direct superseders, computed for the first violation
        for &n in &acked {
            if g.nodes[n].value.is_none() {
                continue;
            }
            acked_writes += 1;
            if explained[n] {
                continue;
            }
            let over = &above.get_or_insert_with(|| g.above())[n];
            let why = if over.is_empty() {
                "nothing supersedes it".to_string()
            } else {
                let ids: Vec<String> = over.iter().map(|&s| g.op(s).id.to_string()).collect();
                format!(
                    "it is superseded only by {}, and no chain from there reaches a surviving \
                     value or a delete",
                    ids.join(", ")
                )
            };
            let mut ids = vec![g.op(n).id];
            ids.extend(over.iter().map(|&s| g.op(s).id));
            verdict.violation(
                key,
                ids,
                format!(
                    "lost write: {} is missing from the final state {shown_final}; {why}",
                    g.op(n)
                ),
            );
        }

        // Superseders that certainly took effect: acknowledged ones, then surviving ones.
        let first = g.first_superseder(acked.iter().chain(&present_nodes).copied());
        for &p in &present_nodes {
            let Some(s) = first[p] else { continue };
            let certain = if g.op(s).is_acknowledged() {
                "was acknowledged"
            } else {
                "survives too"
            };
            verdict.violation(
                key,
                vec![g.op(p).id, g.op(s).id],
                format!(
                    "resurrected value: the final state {shown_final} holds {} (written by {}), \
                     but {} superseded it and {certain}",
                    text::show(g.nodes[p].value.as_deref().unwrap_or_default()),
                    g.op(p).id,
                    g.op(s)
                ),
            );
        }
    }
    verdict.checked = format!(
        "{acked_writes} acknowledged writes on {} keys against the final state of {} keys",
        by_key.len(),
        final_state.len()
    );
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::Script;
    use super::*;
    use crate::history::{Op, Outcome};
    use bytes::Bytes;

    fn state(entries: &[(&'static str, &[&'static str])]) -> FinalState {
        entries
            .iter()
            .map(|(k, vs)| {
                (
                    Bytes::from(*k),
                    vs.iter().map(|v| Bytes::from(*v)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn surviving_and_superseded_writes_pass() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write(2, "k", "v2", &[], (5, 15)); // concurrent sibling
        s.read(1, "k", &["v1", "v2"], (20, 30));
        s.write(1, "k", "v3", &["v1", "v2"], (40, 50));
        s.write(2, "k", "v4", &["v3"], (60, 70));
        s.write(3, "j", "j1", &[], (0, 10));
        let v = check(&s.h, &state(&[("k", &["v4"]), ("j", &["j1"])])).unwrap();
        assert!(v.passed(), "{v}");
        assert!(
            v.checked.starts_with("5 acknowledged writes on 2 keys"),
            "{v}"
        );
    }

    #[test]
    fn a_lost_write_fails_with_its_op_and_times() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        let lost = s.write(2, "k", "v2", &[], (5, 15));
        let v = check(&s.h, &state(&[("k", &["v1"])])).unwrap();
        assert!(!v.passed());
        assert_eq!(v.violations.len(), 1, "{v}");
        assert_eq!(v.violations[0].ops, vec![lost]);
        let text = v.to_string();
        assert!(
            text.contains("lost write: op1 (c2 in dc0: blind write"),
            "{text}"
        );
        assert!(text.contains("\"v2\""), "{text}");
        assert!(text.contains("invoked at 5µs, completed at 15µs"), "{text}");
        assert!(text.contains("final state {\"v1\"}"), "{text}");
        assert!(text.contains("nothing supersedes it"), "{text}");
    }

    #[test]
    fn a_key_missing_entirely_loses_its_writes() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        let v = check(&s.h, &FinalState::new()).unwrap();
        assert_eq!(v.violations.len(), 1, "{v}");
    }

    #[test]
    fn supersession_is_transitive_through_unknown_writes() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(2, "k", "v2", &["v1"], (20, 1_000)); // timed out, but happened
        s.write(3, "k", "v3", &["v2"], (30, 40));
        let v = check(&s.h, &state(&[("k", &["v3"])])).unwrap();
        assert!(v.passed(), "{v}");
    }

    #[test]
    fn a_chain_to_a_lost_value_is_still_lost() {
        let mut s = Script::new();
        let w1 = s.write(1, "k", "v1", &[], (0, 10));
        let w2 = s.write(1, "k", "v2", &["v1"], (20, 30));
        let v = check(&s.h, &FinalState::new()).unwrap();
        assert_eq!(v.violations.len(), 2, "{v}");
        assert_eq!(v.violations[0].ops, vec![w1, w2]);
        assert!(
            v.violations[0]
                .explanation
                .contains("superseded only by op1"),
            "{v}"
        );
        assert_eq!(v.violations[1].ops, vec![w2]);
    }

    #[test]
    fn deletes_explain_absence_only_of_what_they_cover() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write(1, "k", "v2", &["v1"], (20, 30));
        s.delete(2, "k", &["v2"], (40, 50));
        s.write(3, "k", "v3", &[], (60, 70)); // blind write after the delete survives
        let v = check(&s.h, &state(&[("k", &["v3"])])).unwrap();
        assert!(v.passed(), "{v}");

        // A tombstone-only final state is fine when every acknowledged write was deleted...
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.delete(2, "k", &["v1"], (40, 50));
        assert!(check(&s.h, &FinalState::new()).unwrap().passed());
        // ... but not when a concurrent write escaped the delete's context.
        let escaped = s.write(3, "k", "v2", &[], (45, 55));
        let v = check(&s.h, &FinalState::new()).unwrap();
        assert_eq!(v.violations.len(), 1, "{v}");
        assert_eq!(v.violations[0].ops, vec![escaped]);
    }

    #[test]
    fn unacknowledged_writes_need_not_survive_and_unknown_deletes_may_have_happened() {
        let mut s = Script::new();
        s.write_unknown(1, "k", "v1", &[], (0, 10));
        s.op(
            2,
            "k",
            Op::blind_write("v2"),
            (0, 10),
            Outcome::fail("quorum"),
        );
        s.write(3, "k", "v3", &[], (0, 10));
        s.op(
            3,
            "k",
            Op::delete(["v3"]),
            (20, 30),
            Outcome::unknown("timeout"),
        );
        let v = check(&s.h, &FinalState::new()).unwrap();
        assert!(v.passed(), "{v}");
    }

    #[test]
    fn resurrected_and_phantom_values_fail() {
        let mut s = Script::new();
        let w1 = s.write(1, "k", "v1", &[], (0, 10));
        let d = s.delete(1, "k", &["v1"], (20, 30));
        let v = check(&s.h, &state(&[("k", &["v1"])])).unwrap();
        assert_eq!(v.violations.len(), 1, "{v}");
        assert_eq!(v.violations[0].ops, vec![w1, d]);
        assert!(
            v.violations[0].explanation.contains("resurrected value"),
            "{v}"
        );

        // A dominated sibling kept next to the value that supersedes it.
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(2, "k", "v2", &["v1"], (20, 30));
        let v = check(&s.h, &state(&[("k", &["v1", "v2"])])).unwrap();
        assert_eq!(v.violations.len(), 1, "{v}");
        assert!(v.violations[0].explanation.contains("survives too"), "{v}");

        let v = check(&History::new(), &state(&[("k", &["ghost"])])).unwrap();
        assert_eq!(v.violations.len(), 1, "{v}");
        assert!(v.violations[0].explanation.contains("phantom value"), "{v}");
    }

    #[test]
    fn duplicate_written_values_are_an_error() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write(2, "j", "v1", &[], (0, 10));
        let err = check(&s.h, &FinalState::new()).unwrap_err();
        assert!(matches!(err, Error::DuplicateValue { .. }), "{err}");
    }
}
