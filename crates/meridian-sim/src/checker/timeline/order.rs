//! Timeline order (invariant 1) and no forks (invariant 2): per key, issued versions increase
//! in issue order and each replica applies a subsequence of them; no version is issued twice
//! or recorded with two contents.

use super::{Applied, Findings, Issued, TlVersion, applies_by_key, issues_by_key, show_content};
use crate::checker::Verdict;
use crate::history::Micros;
use meridian_core::{Key, Value};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Timeline order (invariant 1): per key, issued versions increase in issue order (fenced
/// versions of a deposed master within their own reign), and each replica's applied versions
/// strictly increase, were issued, and were not applied before being issued.
pub fn check_order(issued: &[Issued], applied: &[Applied]) -> Verdict {
    let mut verdict = Verdict::new("timeline-order");
    let issues = issues_by_key(issued);
    let applies = applies_by_key(applied);
    let keys: BTreeSet<&Key> = issues.keys().chain(applies.keys()).copied().collect();
    let (mut seen, mut logs, mut fenced) = (0usize, 0usize, 0usize);
    for &key in &keys {
        let mut f = Findings::new(key);
        let mut first: BTreeMap<TlVersion, &Issued> = BTreeMap::new();
        // The highest version issued in each master epoch: a deposed master's chain.
        let mut epoch_high: BTreeMap<u32, &Issued> = BTreeMap::new();
        let mut top: Option<&Issued> = None;
        for &r in issues.get(key).map_or(&[][..], Vec::as_slice) {
            if first.contains_key(&r.ver) {
                continue; // issued twice: timeline-forks reports it
            }
            first.insert(r.ver, r);
            let own = epoch_high.get(&r.ver.mepoch).copied();
            match top {
                Some(t) if r.ver < t.ver => {
                    // Below the highest version: only a deposed master extending the chain of
                    // its own (lower) master epoch.
                    let bound = match own {
                        Some(o) if r.ver.mepoch < t.ver.mepoch => o,
                        _ => t,
                    };
                    if r.ver < bound.ver {
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "issued out of order: {} issued {} at {}µs after {} had issued \
                                 {} at {}µs; a master's versions must increase",
                                r.by_node, r.ver, r.at, bound.by_node, bound.ver, bound.at
                            ),
                        );
                    } else {
                        fenced += 1;
                    }
                }
                _ => top = Some(r),
            }
            if own.is_none_or(|o| o.ver < r.ver) {
                epoch_high.insert(r.ver.mepoch, r);
            }
        }
        for (node, list) in applies.get(key).into_iter().flatten() {
            logs += 1;
            let mut high: Option<&Applied> = None;
            for &a in list {
                seen += 1;
                match first.get(&a.ver) {
                    None => f.add(
                        a.at,
                        Vec::new(),
                        format!(
                            "phantom version: replica {node} applied {} at {}µs, which no \
                             master issued",
                            a.ver, a.at
                        ),
                    ),
                    Some(i) if a.at < i.at => f.add(
                        a.at,
                        Vec::new(),
                        format!(
                            "replica {node} applied {} at {}µs, before {} issued it at {}µs",
                            a.ver, a.at, i.by_node, i.at
                        ),
                    ),
                    Some(_) => {}
                }
                match high {
                    Some(h) if a.ver == h.ver => {
                        if a.content != h.content {
                            f.add(
                                a.at,
                                Vec::new(),
                                format!(
                                    "replica {node} re-applied {} at {}µs with {}, having \
                                     applied it at {}µs with {}: a re-applied version must be \
                                     equal (this is a fork)",
                                    a.ver,
                                    a.at,
                                    show_content(a.content.as_ref()),
                                    h.at,
                                    show_content(h.content.as_ref())
                                ),
                            );
                        }
                    }
                    Some(h) if a.ver < h.ver => f.add(
                        a.at,
                        Vec::new(),
                        format!(
                            "replica {node} went back: it applied {} at {}µs after {} at {}µs; \
                             a replica's versions must strictly increase",
                            a.ver, a.at, h.ver, h.at
                        ),
                    ),
                    _ => high = Some(a),
                }
            }
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{seen} applies in {logs} (key, replica) logs on {} keys against {} issued versions \
         ({fenced} by deposed masters)",
        keys.len(),
        issued.len()
    );
    verdict
}

/// A record of some version, for fork explanations.
#[derive(Clone, Copy)]
enum Holder<'a> {
    Master(&'a Issued),
    Replica(&'a Applied),
}

impl<'a> Holder<'a> {
    fn content(self) -> Option<&'a Value> {
        match self {
            Holder::Master(i) => i.content.as_ref(),
            Holder::Replica(a) => a.content.as_ref(),
        }
    }

    fn at(self) -> Micros {
        match self {
            Holder::Master(i) => i.at,
            Holder::Replica(a) => a.at,
        }
    }
}

impl fmt::Display for Holder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Master(i) => write!(f, "master {} (issued at {}µs)", i.by_node, i.at),
            Holder::Replica(a) => write!(f, "{} (applied at {}µs)", a.node, a.at),
        }
    }
}

/// No forks (invariant 2): no two records of a key, issued or applied anywhere, share a version
/// with different content, and no version was issued twice.
pub fn check_forks(issued: &[Issued], applied: &[Applied]) -> Verdict {
    let mut verdict = Verdict::new("timeline-forks");
    let issues = issues_by_key(issued);
    let applies = applies_by_key(applied);
    let keys: BTreeSet<&Key> = issues.keys().chain(applies.keys()).copied().collect();
    let mut versions = 0usize;
    for &key in &keys {
        let mut f = Findings::new(key);
        // Every record of each version, issues first.
        let mut holders: BTreeMap<TlVersion, Vec<Holder>> = BTreeMap::new();
        let mut first: BTreeMap<TlVersion, &Issued> = BTreeMap::new();
        for &r in issues.get(key).map_or(&[][..], Vec::as_slice) {
            match first.entry(r.ver) {
                Entry::Occupied(e) => {
                    let p = *e.get();
                    let how = if p.by_node == r.by_node {
                        format!("twice by {} (at {}µs and {}µs)", r.by_node, p.at, r.at)
                    } else {
                        format!(
                            "by {} ({}) at {}µs and by {} ({}) at {}µs",
                            p.by_node, p.by_dc, p.at, r.by_node, r.by_dc, r.at
                        )
                    };
                    f.add(
                        r.at,
                        Vec::new(),
                        format!(
                            "{} was issued {how}: every version is issued exactly once",
                            r.ver
                        ),
                    );
                }
                Entry::Vacant(e) => {
                    e.insert(r);
                }
            }
            holders.entry(r.ver).or_default().push(Holder::Master(r));
        }
        for list in applies.get(key).into_iter().flatten().map(|(_, list)| list) {
            for &a in list {
                holders.entry(a.ver).or_default().push(Holder::Replica(a));
            }
        }
        versions += holders.len();
        for (ver, hs) in &holders {
            let mut groups: Vec<(Option<&Value>, Vec<String>)> = Vec::new();
            for h in hs {
                match groups.iter_mut().find(|(c, _)| *c == h.content()) {
                    Some((_, names)) => names.push(h.to_string()),
                    None => groups.push((h.content(), vec![h.to_string()])),
                }
            }
            if groups.len() < 2 {
                continue;
            }
            let at = hs
                .iter()
                .filter(|h| h.content() != groups[0].0)
                .map(|h| h.at())
                .min()
                .unwrap_or_default();
            let described: Vec<String> = groups
                .iter()
                .map(|(c, names)| format!("{} had {}", names.join(", "), show_content(*c)))
                .collect();
            f.add(
                at,
                Vec::new(),
                format!(
                    "fork at {ver}: {}; records with equal versions must have equal contents",
                    described.join("; ")
                ),
            );
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{versions} versions in {} issues and {} applies on {} keys",
        issued.len(),
        applied.len(),
        keys.len()
    );
    verdict
}
