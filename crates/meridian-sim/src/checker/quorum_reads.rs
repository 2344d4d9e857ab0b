//! Quorum reads see acknowledged writes: with R + W > N on primaries (no sloppy fallbacks),
//! every read quorum meets every write quorum, so once a write or delete is acknowledged,
//! every read that *starts* later reflects it.
//!
//! For each acknowledged read `r` returning the sibling set `S` (empty: not found), on its key:
//! - **read-your-writes / monotonic**: every write acknowledged before `r` was invoked
//!   (completion time strictly less than `r`'s invocation) is *covered*: its value is in `S`,
//!   or a value in `S` supersedes it (transitively, through the recorded `supersedes` sets),
//!   or a delete superseding it (any outcome, since it may have happened) was invoked before
//!   `r` completed. Reads concurrent with the write are unconstrained;
//! - **no stale sibling**: no value in `S` was superseded by a write or delete acknowledged
//!   before `r` was invoked (a merged quorum drops dominated siblings, and a dominated value
//!   can never come back: values are unique);
//! - **no phantom**: every value in `S` was written to this key by a write or CAS invoked no
//!   later than `r` completed.
//!
//! Equal timestamps count as concurrent (the lenient reading). Only the *first* uncovered
//! write is explained per read (with the count of others). Values read but never
//! acknowledged impose nothing on later reads: a quorum read may see a value held by one
//! replica and a later read may legitimately miss it.
//!
//! Cost: reads are processed in start order against the *frontier* of acknowledged writes
//! (those not superseded by a later acknowledged one), and graph walks are cut at the
//! frontier's topological rank, so a read-modify-write workload checks in near-linear time.
//! Limits: apply it only to keys served with R + W > N on primaries; the checker trusts the
//! recorded `supersedes`.

use super::Verdict;
use super::graph::{KeyGraph, check_unique_values};
use crate::error::Error;
use crate::history::History;
use crate::text;

/// Checks that every acknowledged read of `history` reflects every write and delete
/// acknowledged before it started, and returns only values that were written.
pub fn check(history: &History) -> Result<Verdict, Error> {
    let by_key = history.operations_by_key()?;
    check_unique_values(&by_key)?;
    let mut verdict = Verdict::new("quorum-reads");
    let (mut reads_checked, mut acked_writes) = (0usize, 0usize);
    for (key, ops) in &by_key {
        let g = KeyGraph::new(ops);
        let n = g.nodes.len();
        let acked = |node: usize| g.op(node).is_acknowledged();

        // Earliest acknowledgement of an operation superseding each node.
        let mut by_completion: Vec<usize> = (0..n).filter(|&s| acked(s)).collect();
        by_completion.sort_by_key(|&s| (g.op(s).completed_at, s));
        let stale_from = g.first_superseder(by_completion.iter().copied());
        // Earliest invocation of a delete superseding each node.
        let mut deletes: Vec<usize> = (0..n).filter(|&s| g.nodes[s].value.is_none()).collect();
        deletes.sort_by_key(|&s| (g.op(s).invoked_at, s));
        let deleted_from = g.first_superseder(deletes);
        // Acknowledged writes, by completion.
        let writes: Vec<usize> = by_completion
            .iter()
            .copied()
            .filter(|&s| g.nodes[s].value.is_some())
            .collect();
        acked_writes += writes.len();

        let mut reads: Vec<usize> = (0..ops.len())
            .filter(|&i| ops[i].read_values().is_some())
            .collect();
        reads.sort_by_key(|&i| (ops[i].invoked_at, i));
        reads_checked += reads.len();

        let mut walk = Walk::new(&g);
        let mut frontier: Vec<usize> = Vec::new();
        let mut next_write = 0;
        for &ri in &reads {
            let read = &ops[ri];
            let values = read.read_values().unwrap_or_default();
            let completed = read.completed_at.unwrap_or(u64::MAX);
            while next_write < writes.len()
                && g.op(writes[next_write]).completed_at < Some(read.invoked_at)
            {
                walk.add_to_frontier(&mut frontier, writes[next_write]);
                next_write += 1;
            }

            let mut returned = Vec::new();
            for value in values {
                let node = g
                    .node_of(value)
                    .filter(|&v| g.op(v).invoked_at <= completed);
                let Some(v) = node else {
                    let when = match g.node_of(value) {
                        Some(v) => format!(
                            "{} was invoked only at {}µs to write",
                            g.op(v).id,
                            g.op(v).invoked_at
                        ),
                        None => "no write or CAS to this key produces".to_string(),
                    };
                    verdict.violation(
                        key,
                        vec![read.id],
                        format!("phantom read: {read}; {when} {}", text::show(value)),
                    );
                    continue;
                };
                returned.push(v);
                if let Some(s) = stale_from[v]
                    && g.op(s).completed_at < Some(read.invoked_at)
                {
                    verdict.violation(
                        key,
                        vec![read.id, g.op(s).id, g.op(v).id],
                        format!(
                            "stale read: {read}; {} (written by {}) had been superseded by {} \
                             before the read started",
                            text::show(value),
                            g.op(v).id,
                            g.op(s)
                        ),
                    );
                }
            }

            let deleted_in_time =
                |f: usize| deleted_from[f].is_some_and(|d| g.op(d).invoked_at <= completed);
            let uncovered = walk.uncovered(&frontier, &returned, deleted_in_time);
            if let Some(&f) = uncovered.first() {
                let others = match uncovered.len() - 1 {
                    0 => String::new(),
                    k => format!(" ({k} other acknowledged write(s) are missed too)"),
                };
                verdict.violation(
                    key,
                    vec![read.id, g.op(f).id],
                    format!(
                        "read misses an acknowledged write: {read}; it started after {}, yet \
                         returned neither {} nor a value superseding it, and no delete \
                         superseding it was invoked before it completed{others}",
                        g.op(f),
                        text::show(g.nodes[f].value.as_deref().unwrap_or_default()),
                    ),
                );
            }
        }
    }
    verdict.checked = format!(
        "{reads_checked} acknowledged reads against {acked_writes} acknowledged writes on {} keys",
        by_key.len()
    );
    Ok(verdict)
}

/// Reachability walks over one key's graph, cut below a topological rank.
struct Walk<'g, 'a> {
    g: &'g KeyGraph<'a>,
    /// Topological ranks (all zero, i.e. no cut, if the graph has a cycle).
    rank: Vec<usize>,
    /// `seen[n] == stamp` iff `n` was reached by the current walk.
    seen: Vec<u32>,
    stamp: u32,
    stack: Vec<usize>,
}

impl<'g, 'a> Walk<'g, 'a> {
    fn new(g: &'g KeyGraph<'a>) -> Walk<'g, 'a> {
        let n = g.nodes.len();
        Walk {
            g,
            rank: g.topo_ranks().unwrap_or_else(|| vec![0; n]),
            seen: vec![0; n],
            stamp: 0,
            stack: Vec::new(),
        }
    }

    /// Marks `roots` and everything they supersede, skipping nodes ranked below `floor`
    /// (which cannot reach a node ranked at or above it).
    fn walk(&mut self, roots: impl IntoIterator<Item = usize>, floor: usize) {
        self.stamp += 1;
        self.stack.extend(roots);
        while let Some(n) = self.stack.pop() {
            if self.rank[n] < floor || self.seen[n] == self.stamp {
                continue;
            }
            self.seen[n] = self.stamp;
            self.stack.extend(self.g.nodes[n].sup.iter().copied());
        }
    }

    fn reached(&self, n: usize) -> bool {
        self.seen[n] == self.stamp
    }

    /// Adds `w` to the frontier (the maximal acknowledged writes) unless a frontier write
    /// already supersedes it, dropping the frontier writes it supersedes.
    fn add_to_frontier(&mut self, frontier: &mut Vec<usize>, w: usize) {
        self.walk(frontier.iter().copied(), self.rank[w]);
        if self.reached(w) {
            return;
        }
        let Some(floor) = frontier.iter().map(|&f| self.rank[f]).min() else {
            frontier.push(w);
            return;
        };
        self.walk(self.g.nodes[w].sup.clone(), floor);
        frontier.retain(|&f| !self.reached(f));
        frontier.push(w);
    }

    /// The frontier writes that `returned` does not cover and no timely delete covers, in
    /// acknowledgement order.
    fn uncovered(
        &mut self,
        frontier: &[usize],
        returned: &[usize],
        deleted_in_time: impl Fn(usize) -> bool,
    ) -> Vec<usize> {
        let open: Vec<usize> = frontier
            .iter()
            .copied()
            .filter(|&f| !deleted_in_time(f))
            .collect();
        let Some(floor) = open.iter().map(|&f| self.rank[f]).min() else {
            return Vec::new();
        };
        self.walk(returned.iter().copied(), floor);
        let mut missed: Vec<usize> = open.into_iter().filter(|&f| !self.reached(f)).collect();
        missed.sort_by_key(|&f| (self.g.op(f).completed_at, f));
        missed
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::Script;
    use super::*;
    use crate::history::{Op, Outcome};

    #[test]
    fn reads_after_acks_that_see_them_or_successors_pass() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.read(2, "k", &["v1"], (11, 20));
        s.write(2, "k", "v2", &["v1"], (21, 30));
        s.read(3, "k", &["v2"], (31, 40));
        // Concurrent with a write: may or may not see it.
        s.write(1, "k", "v3", &["v2"], (50, 60));
        s.read(3, "k", &["v2"], (55, 65));
        s.read(4, "k", &["v3"], (52, 58));
        // Siblings: a read after both sees both (or a successor).
        s.write(1, "k", "v4", &["v3"], (70, 80));
        s.write(2, "k", "v5", &["v3"], (70, 80));
        s.read(3, "k", &["v4", "v5"], (81, 90));
        s.write(3, "k", "v6", &["v4", "v5"], (91, 100));
        s.read(1, "k", &["v6"], (101, 110));
        // Equal times are concurrent.
        s.write(1, "k", "v7", &["v6"], (120, 130));
        s.read(2, "k", &["v6"], (130, 140));
        let v = check(&s.h).unwrap();
        assert!(v.passed(), "{v}");
        assert!(
            v.checked.starts_with("7 acknowledged reads against 7"),
            "{v}"
        );
    }

    #[test]
    fn a_stale_read_after_an_ack_fails() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        let w2 = s.write(1, "k", "v2", &["v1"], (20, 30));
        let r = s.read(2, "k", &["v1"], (40, 50));
        let v = check(&s.h).unwrap();
        assert_eq!(v.violations.len(), 2, "{v}");
        // The returned value was superseded by an acknowledged write...
        assert!(v.violations[0].explanation.starts_with("stale read"), "{v}");
        // ... and the acknowledged write itself is missed.
        assert_eq!(v.violations[1].ops, vec![r, w2]);
        let text = v.violations[1].to_string();
        assert!(text.contains("read misses an acknowledged write"), "{text}");
        assert!(text.contains("started after op1"), "{text}");
        assert!(text.contains("completed at 30µs"), "{text}");
        assert!(
            text.contains("returned {\"v1\"}); it started after op1"),
            "{text}"
        );
    }

    #[test]
    fn a_read_that_misses_a_blind_write_fails_and_notfound_too() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write(2, "k", "v2", &[], (0, 10));
        s.read(3, "k", &["v2"], (20, 30));
        let r = s.read(3, "k", &[], (40, 50));
        let v = check(&s.h).unwrap();
        assert_eq!(v.violations.len(), 2, "{v}");
        assert!(
            v.violations[1]
                .explanation
                .contains("1 other acknowledged write(s)")
        );
        assert_eq!(v.violations[1].ops[0], r);
    }

    #[test]
    fn deletes_cover_and_acked_deletes_forbid_the_old_value() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.op(
            2,
            "k",
            Op::delete(["v1"]),
            (20, 1_000),
            Outcome::unknown("timeout"),
        );
        s.read(3, "k", &[], (30, 40)); // the delete may have happened
        s.read(3, "k", &["v1"], (50, 60)); // or not
        let v = check(&s.h).unwrap();
        assert!(v.passed(), "{v}");

        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        let d = s.delete(2, "k", &["v1"], (20, 30));
        s.read(3, "k", &[], (40, 50));
        let r = s.read(3, "k", &["v1"], (60, 70));
        let v = check(&s.h).unwrap();
        assert_eq!(v.violations.len(), 1, "{v}");
        assert_eq!(v.violations[0].ops[..2], [r, d]);
        assert!(v.violations[0].explanation.starts_with("stale read"), "{v}");
    }

    #[test]
    fn unknown_writes_constrain_nothing_but_may_cover() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.write_unknown(2, "k", "v2", &["v1"], (20, 30));
        s.read(3, "k", &["v1"], (40, 50));
        s.read(3, "k", &["v2"], (60, 70));
        s.read(3, "k", &["v1"], (80, 90)); // v2 was never acknowledged: no constraint
        let v = check(&s.h).unwrap();
        assert!(v.passed(), "{v}");
    }

    #[test]
    fn phantom_reads_fail() {
        let mut s = Script::new();
        s.read(1, "k", &["ghost"], (0, 10));
        s.read(1, "k", &["v1"], (20, 30)); // before v1's write was invoked
        s.write(2, "k", "v1", &[], (40, 50));
        let v = check(&s.h).unwrap();
        assert_eq!(v.violations.len(), 2, "{v}");
        assert!(
            v.violations[0]
                .explanation
                .contains("no write or CAS to this key produces \"ghost\""),
            "{v}"
        );
        assert!(
            v.violations[1]
                .explanation
                .contains("op2 was invoked only at 40µs to write \"v1\""),
            "{v}"
        );
    }

    #[test]
    fn keys_are_independent() {
        let mut s = Script::new();
        s.write(1, "k", "v1", &[], (0, 10));
        s.read(2, "j", &[], (20, 30));
        assert!(check(&s.h).unwrap().passed());
    }

    #[test]
    fn long_read_modify_write_chains_are_fast() {
        let mut s = Script::new();
        let names: Vec<String> = (0..20_000).map(|i| format!("v{i}")).collect();
        let mut t = 0;
        for i in 0..names.len() {
            let sup: Vec<&str> = names[i.saturating_sub(1)..i]
                .iter()
                .map(|v| &v[..])
                .collect();
            s.write(1, "k", &names[i], &sup, (t, t + 5));
            s.read(2, "k", &[&names[i]], (t + 6, t + 8));
            t += 10;
        }
        let v = check(&s.h).unwrap();
        assert!(v.passed(), "{v}");
    }
}
