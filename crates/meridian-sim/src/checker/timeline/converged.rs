//! Convergence after quiescence (invariants 2 and 9): every primary holds the same record of
//! a key, and it is the highest version issued, so none was lost.

use super::{Issued, TlVersion, issues_by_key, show_content};
use crate::checker::Verdict;
use meridian_core::{Key, NodeId, Value};
use std::collections::{BTreeMap, BTreeSet};

/// A primary's record of a key after quiescence, as [`check_converged`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlFinal {
    /// The record's version.
    pub ver: TlVersion,
    /// The record's value; `None` for a tombstone.
    pub content: Option<Value>,
    /// The master the record names.
    pub master: NodeId,
}

/// The final records of each key's primaries (`None`: that primary holds no record).
pub type TlFinals = BTreeMap<Key, BTreeMap<NodeId, Option<TlFinal>>>;

/// The order replicas merge by: `(mepoch, gen, seq)` (`Version::precedence` in
/// `meridian-replication`). It differs from [`TlVersion`]'s order only across a forced
/// re-master, whose higher `mepoch` outranks a deposed master's later generations.
fn precedence(v: TlVersion) -> (u32, u64, u64) {
    (v.mepoch, v.r#gen, v.seq)
}

/// Convergence after heal and quiescence (invariants 2 and 9, "after the heal, all replicas
/// converge to the master's record"): every primary of each key holds the same record
/// (version, content and master), or none holds one; and, with `no_loss`, that record is the
/// key's highest issued version in merge precedence, with the content it was issued with, so
/// no version a master issued was lost (a deposed master's fenced versions rank below the
/// forced re-master's epoch, so they do not count).
pub fn check_converged(issued: &[Issued], finals: &TlFinals, no_loss: bool) -> Verdict {
    let mut verdict = Verdict::new("timeline-convergence");
    let issues = issues_by_key(issued);
    let mut records = 0usize;
    let keys: BTreeSet<&Key> = issues.keys().copied().chain(finals.keys()).collect();
    for key in keys {
        let by_node = finals.get(key);
        let held: Vec<(NodeId, &Option<TlFinal>)> = by_node
            .into_iter()
            .flatten()
            .map(|(n, r)| (*n, r))
            .collect();
        records += held.len();
        let show = |r: &Option<TlFinal>| match r {
            Some(r) => format!(
                "{} {} (master {})",
                r.ver,
                show_content(r.content.as_ref()),
                r.master
            ),
            None => "no record".to_string(),
        };
        if held.windows(2).any(|w| w[0].1 != w[1].1) {
            let list: Vec<String> = held
                .iter()
                .map(|(n, r)| format!("{n} holds {}", show(r)))
                .collect();
            verdict.violation(
                key,
                Vec::new(),
                format!("replicas diverge after quiescence: {}", list.join("; ")),
            );
            continue;
        }
        if !no_loss {
            continue;
        }
        let top = issues
            .get(key)
            .and_then(|l| l.iter().max_by_key(|i| (precedence(i.ver), i.at)).copied());
        let Some(top) = top else { continue };
        let Some((_, first)) = held.first() else {
            continue;
        };
        let agrees = first
            .as_ref()
            .is_some_and(|r| r.ver == top.ver && r.content == top.content);
        if !agrees {
            verdict.violation(
                key,
                Vec::new(),
                format!(
                    "lost version: every primary holds {}, but {} issued {} with {} at {}µs, \
                     the highest version of the key",
                    show(first),
                    top.by_node,
                    top.ver,
                    show_content(top.content.as_ref()),
                    top.at
                ),
            );
        }
    }
    verdict.checked = format!(
        "{records} final records of {} keys{}",
        finals.len(),
        if no_loss {
            " against the highest issued versions"
        } else {
            ""
        }
    );
    verdict
}
