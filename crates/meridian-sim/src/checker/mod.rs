//! Checkers: judge a recorded [`History`](crate::history::History) (and the cluster's final
//! state) against a consistency property, and explain what they find.
//!
//! | module | property | input |
//! |---|---|---|
//! | [`forged`] | the part of a history with forged contexts that [`lost_writes`] can judge: every write started after its key's last forgery ended | history + [`FinalState`] |
//! | [`lost_writes`] | no acknowledged write is lost (eventual, after heal + quiescence) | history + [`FinalState`] |
//! | [`quorum_reads`] | with R+W>N on primaries, a read that starts after a write is acknowledged sees it or a causal successor | history |
//! | [`convergence`] | every replica of a key holds the same sibling set | [`ReplicaStates`] |
//! | [`linearizability`] | each key behaves as one atomic register (read/write/delete/cas) | history |
//! | [`si`] | transaction histories (Elle list-append / rw-register): snapshot isolation, strong-session SI or serializability (G0, G1a/b/c, G-single, G-nonadjacent, lost update, G2-item); bank audits | [`txn_history::TxnHistory`] |
//! | [`timeline`] | timeline buckets: per-key order, no forks, single writer, migration rule, read and TAS guarantees, linearizable write/TAS/read_latest | issue + apply logs, timeline history |
//!
//! Every checker returns a [`Verdict`]: pass, fail with [`Violation`]s (key, op ids, times and
//! values in prose), or undecided (a search budget ran out). An `Err` means the input itself
//! is unusable (see [`crate::Error`]). Checkers are pure and deterministic: the same input
//! gives the same verdict, with violations in key order then time order.

pub mod convergence;
pub mod forged;
mod graph;
pub mod linearizability;
pub mod lost_writes;
pub mod quorum_reads;
pub mod si;
pub mod timeline;
pub mod txn_history;

use crate::text;
use meridian_core::{Key, Value};
use std::collections::BTreeMap;
use std::fmt;

use crate::history::OpId;

/// The sibling set of each key after heal and quiescence (absent key: not found).
pub type FinalState = BTreeMap<Key, Vec<Value>>;

/// The sibling set each replica (by name) holds for each key after quiescence.
pub type ReplicaStates = BTreeMap<Key, BTreeMap<String, Vec<Value>>>;

/// The union of every replica's siblings per key (sorted, without duplicates): the
/// [`FinalState`] to give [`lost_writes::check`] once [`convergence::check`] has run.
pub fn merge_replicas(replicas: &ReplicaStates) -> FinalState {
    replicas
        .iter()
        .map(|(key, by_replica)| {
            let mut values: Vec<Value> = by_replica.values().flatten().cloned().collect();
            values.sort();
            values.dedup();
            (key.clone(), values)
        })
        .collect()
}

/// How many violations a [`Verdict`]'s `Display` spells out.
pub const SHOWN_VIOLATIONS: usize = 10;

/// One broken promise, explained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The key it happened on.
    pub key: Key,
    /// The operations involved, most relevant first.
    pub ops: Vec<OpId>,
    /// What went wrong, in prose with op ids, times (µs) and values.
    pub explanation: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {}: {}", text::show(&self.key), self.explanation)
    }
}

/// A key a checker could not decide, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecided {
    /// The key.
    pub key: Key,
    /// Why no verdict was reached.
    pub reason: String,
}

/// The three possible verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// No violation, every key decided.
    Pass,
    /// At least one violation.
    Fail,
    /// No violation found, but some key was not decided.
    Undecided,
}

/// What a checker concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The checker's name (`lost-writes`, `quorum-reads`, `convergence`, `linearizability`).
    pub checker: &'static str,
    /// What was examined, e.g. `120 acknowledged writes on 8 keys`.
    pub checked: String,
    /// Every violation found, in key order then time order.
    pub violations: Vec<Violation>,
    /// Keys the checker gave up on.
    pub undecided: Vec<Undecided>,
}

impl Verdict {
    pub(crate) fn new(checker: &'static str) -> Verdict {
        Verdict {
            checker,
            checked: String::new(),
            violations: Vec::new(),
            undecided: Vec::new(),
        }
    }

    pub(crate) fn violation(&mut self, key: &Key, ops: Vec<OpId>, explanation: String) {
        self.violations.push(Violation {
            key: key.clone(),
            ops,
            explanation,
        });
    }

    /// Pass, fail or undecided.
    pub fn status(&self) -> Status {
        if !self.violations.is_empty() {
            Status::Fail
        } else if !self.undecided.is_empty() {
            Status::Undecided
        } else {
            Status::Pass
        }
    }

    /// Whether the property held on everything examined.
    pub fn passed(&self) -> bool {
        self.status() == Status::Pass
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.checker)?;
        match self.status() {
            Status::Pass => write!(f, "PASS")?,
            Status::Fail => write!(f, "FAIL, {} violation(s)", self.violations.len())?,
            Status::Undecided => write!(f, "UNDECIDED on {} key(s)", self.undecided.len())?,
        }
        write!(f, " (checked {})", self.checked)?;
        for (i, v) in self.violations.iter().take(SHOWN_VIOLATIONS).enumerate() {
            write!(f, "\n  {}. {v}", i + 1)?;
        }
        if self.violations.len() > SHOWN_VIOLATIONS {
            write!(
                f,
                "\n  ... and {} more",
                self.violations.len() - SHOWN_VIOLATIONS
            )?;
        }
        for u in &self.undecided {
            write!(f, "\n  undecided: key {}: {}", text::show(&u.key), u.reason)?;
        }
        Ok(())
    }
}

/// Hand-made histories for the checkers' unit tests.
#[cfg(test)]
pub(crate) mod testkit {
    use crate::history::{ClientId, History, Op, OpId, Outcome};
    use meridian_core::DcId;

    /// A history written operation by operation, each with its invocation and completion.
    #[derive(Default)]
    pub(crate) struct Script {
        pub(crate) h: History,
    }

    impl Script {
        pub(crate) fn new() -> Script {
            Script::default()
        }

        /// Any operation, invoked at `t.0` and completed at `t.1` with `outcome`.
        pub(crate) fn op(
            &mut self,
            client: u32,
            key: &str,
            op: Op,
            t: (u64, u64),
            outcome: Outcome,
        ) -> OpId {
            let id = self
                .h
                .invoke(ClientId(client), DcId(client % 2), key.to_string(), op, t.0);
            self.h.complete(id, outcome, t.1);
            id
        }

        /// An operation that never completes.
        pub(crate) fn pending(&mut self, client: u32, key: &str, op: Op, at: u64) -> OpId {
            self.h
                .invoke(ClientId(client), DcId(client % 2), key.to_string(), op, at)
        }

        /// An acknowledged write.
        pub(crate) fn write(
            &mut self,
            client: u32,
            key: &str,
            value: &str,
            supersedes: &[&str],
            t: (u64, u64),
        ) -> OpId {
            let op = Op::write(value.to_string(), supersedes.iter().map(|v| v.to_string()));
            self.op(client, key, op, t, Outcome::done())
        }

        /// A write whose outcome is unknown (timed out at `t.1`).
        pub(crate) fn write_unknown(
            &mut self,
            client: u32,
            key: &str,
            value: &str,
            supersedes: &[&str],
            t: (u64, u64),
        ) -> OpId {
            let op = Op::write(value.to_string(), supersedes.iter().map(|v| v.to_string()));
            self.op(client, key, op, t, Outcome::unknown("timeout"))
        }

        /// An acknowledged delete.
        pub(crate) fn delete(
            &mut self,
            client: u32,
            key: &str,
            supersedes: &[&str],
            t: (u64, u64),
        ) -> OpId {
            let op = Op::delete(supersedes.iter().map(|v| v.to_string()));
            self.op(client, key, op, t, Outcome::done())
        }

        /// An acknowledged read returning `values`.
        pub(crate) fn read(
            &mut self,
            client: u32,
            key: &str,
            values: &[&str],
            t: (u64, u64),
        ) -> OpId {
            let outcome = Outcome::read(values.iter().map(|v| v.to_string()));
            self.op(client, key, Op::Read, t, outcome)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn verdict_display_and_status() {
        let mut v = Verdict::new("demo");
        v.checked = "3 things".into();
        assert_eq!(v.status(), Status::Pass);
        assert_eq!(v.to_string(), "demo: PASS (checked 3 things)");
        for i in 0..12 {
            v.violation(&Bytes::from("k"), vec![OpId(i)], format!("problem {i}"));
        }
        assert_eq!(v.status(), Status::Fail);
        let shown = v.to_string();
        assert!(shown.starts_with(
            "demo: FAIL, 12 violation(s) (checked 3 things)\n  1. key \"k\": problem 0"
        ));
        assert!(shown.ends_with("... and 2 more"), "{shown}");
        let mut u = Verdict::new("demo");
        u.undecided.push(Undecided {
            key: Bytes::from("k"),
            reason: "budget".into(),
        });
        assert_eq!(u.status(), Status::Undecided);
        assert!(!u.passed());
    }

    #[test]
    fn merge_replicas_is_a_sorted_union() {
        let mut states = ReplicaStates::new();
        let per = states.entry(Bytes::from("k")).or_default();
        per.insert("n1".into(), vec![Bytes::from("b"), Bytes::from("a")]);
        per.insert("n2".into(), vec![Bytes::from("a"), Bytes::from("c")]);
        let merged = merge_replicas(&states);
        assert_eq!(
            merged[&Bytes::from("k")],
            vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("c")]
        );
    }
}
