//! Single writer (invariant 7): per key and reign, each version is issued by the master named
//! by the reign's previous record, and new reigns open only through a forced re-master or a
//! new generation. With the apply log, versions a crash erased are judged but take no effect.

use super::{
    Applied, Findings, IssueKind, Issued, Reign, TlVersion, issues_by_key, reign, show_content,
    show_reign,
};
use crate::checker::Verdict;
use crate::history::Micros;
use meridian_core::{Key, NodeId};
use std::collections::{BTreeMap, BTreeSet};

/// Single writer (invariant 7): per key and reign, each version is issued by the master the
/// reign's previous record names; new reigns open only through a forced re-master, a new
/// generation by the record's master, or an insert over a tombstone. Without the apply log
/// every issued version counts (see [`check_single_writer_with`]).
pub fn check_single_writer(issued: &[Issued]) -> Verdict {
    check_single_writer_with(issued, &[])
}

/// The versions of each key that a crash erased: issued by a node that then lost the life in
/// which it issued them (a crash under a lossy fsync policy, or a wipe, logged under a new
/// [`crate::cluster::life_id`]) before any other replica stored them. Nothing outside that
/// life ever held such a version, and after that life's last logged apply nothing acted on it
/// again: a hand-over it carried never reached the new master, which never accepted writes
/// under it, and the old master, restarted from what its disk kept, is again the master of
/// the record it holds (it opens a new generation with its first write, so the erased version
/// is never issued again). Mapped to that time: until then (in the same life) it is in effect.
pub(super) fn erased_versions<'a>(
    issued: &'a [Issued],
    applied: &[Applied],
) -> BTreeMap<(&'a Key, TlVersion), Micros> {
    use crate::cluster::machine_of;
    // Every life each machine ran under, as logged, with the time of its last apply.
    let mut lives: BTreeMap<NodeId, BTreeMap<u32, Micros>> = BTreeMap::new();
    for a in applied {
        let (m, life) = machine_of(a.node);
        let last = lives.entry(m).or_default().entry(life).or_insert(a.at);
        *last = (*last).max(a.at);
    }
    let mut holders: BTreeMap<(&Key, TlVersion), BTreeSet<NodeId>> = BTreeMap::new();
    for a in applied {
        holders.entry((&a.key, a.ver)).or_default().insert(a.node);
    }
    let mut erased = BTreeMap::new();
    for i in issued {
        let Some(h) = holders.get(&(&i.key, i.ver)) else {
            continue;
        };
        // Stored by exactly one life, the issuer's own (its local apply)...
        let mut it = h.iter();
        let (Some(&only), None) = (it.next(), it.next()) else {
            continue;
        };
        let (m, life) = machine_of(only);
        // ...which then ended with a loss: the issuer ran under a later life.
        if m == i.by_node
            && let Some(l) = lives.get(&m)
            && l.range(life + 1..).next().is_some()
        {
            erased.insert((&i.key, i.ver), l[&life]);
        }
    }
    erased
}

/// Whether `v` of `key` was erased by a crash before `at` ([`erased_versions`]).
pub(super) fn erased_before(
    erased: &BTreeMap<(&Key, TlVersion), Micros>,
    key: &Key,
    v: TlVersion,
    at: Micros,
) -> bool {
    erased.get(&(key, v)).is_some_and(|&end| end < at)
}

/// [`check_single_writer`], told by the apply log which versions a crash erased before any
/// other replica stored them ([`erased_versions`]). Such a version must still have been issued
/// by the right node, but it does not become its reign's last record: the next version is
/// judged against the record before it. A version some other replica (or a later life of the
/// issuer) stored is never erased, so a hand-over that reached anyone still binds the old
/// master.
pub fn check_single_writer_with(issued: &[Issued], applied: &[Applied]) -> Verdict {
    let mut verdict = Verdict::new("timeline-single-writer");
    let issues = issues_by_key(issued);
    let erased = erased_versions(issued, applied);
    let (mut handovers, mut forced, mut fenced) = (0usize, 0usize, 0usize);
    for (&key, recs) in &issues {
        let mut f = Findings::new(key);
        // The records of each reign in issue order; the last one in effect names the reign's
        // only writer.
        let mut chains: BTreeMap<Reign, Vec<&Issued>> = BTreeMap::new();
        // The last record with which each node handed a reign over to another.
        let mut handed: BTreeMap<(Reign, NodeId), &Issued> = BTreeMap::new();
        for &r in recs {
            let here = reign(r.ver);
            // Versions a crash erased before this issue took no effect from then on.
            for chain in chains.values_mut() {
                while chain
                    .last()
                    .is_some_and(|l| erased_before(&erased, key, l.ver, r.at))
                {
                    chain.pop();
                }
            }
            chains.retain(|_, c| !c.is_empty());
            let reigns: BTreeMap<Reign, &Issued> = chains
                .iter()
                .map(|(&k, c)| (k, *c.last().expect("non-empty")))
                .collect();
            let highest = reigns.last_key_value().map(|(&h, &last)| (h, last));
            if r.kind == IssueKind::ForceMaster && r.new_master_node != r.by_node {
                f.add(
                    r.at,
                    Vec::new(),
                    format!(
                        "{} forced a re-master with {} at {}µs but named {} master: a forced \
                         re-master names the forcing replica",
                        r.by_node, r.ver, r.at, r.new_master_node
                    ),
                );
            }
            match reigns.get(&here).copied() {
                Some(prev) => {
                    if highest.is_some_and(|(h, _)| here < h) {
                        fenced += 1;
                    }
                    if r.kind != IssueKind::Write {
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "{} issued {} at {}µs as {}, but reign {} already existed: an \
                                 insert starts a generation and a forced re-master raises mepoch",
                                r.by_node,
                                r.ver,
                                r.at,
                                r.kind,
                                show_reign(here)
                            ),
                        );
                    }
                    if r.by_node != prev.new_master_node {
                        let why = if let Some(h) = handed.get(&(here, r.by_node)) {
                            format!(
                                "it had handed mastership to {} ({}) with {} at {}µs and the \
                                 master named by {} is {}: the old master kept writing",
                                h.new_master_node,
                                h.new_master_dc,
                                h.ver,
                                h.at,
                                prev.ver,
                                prev.new_master_node
                            )
                        } else {
                            format!(
                                "the master named by {} (issued by {} at {}µs) is {}; no \
                                 migration named {} and mepoch did not change",
                                prev.ver, prev.by_node, prev.at, prev.new_master_node, r.by_node
                            )
                        };
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "two writers: {} issued {} at {}µs, but {why}",
                                r.by_node, r.ver, r.at
                            ),
                        );
                    }
                }
                None => match highest {
                    None => {}
                    // A deposed master's first write in its own, fenced master epoch may open a
                    // new generation (its first write over a record it did not issue during
                    // its current run does): fenced like its other versions.
                    Some((h, _))
                        if here < h
                            && r.kind == IssueKind::Write
                            && reigns.range(..here).next_back().is_some_and(|(k, prev)| {
                                k.0 == here.0 && prev.new_master_node == r.by_node
                            }) =>
                    {
                        fenced += 1;
                    }
                    Some((h, last)) if here < h => f.add(
                        r.at,
                        Vec::new(),
                        format!(
                            "{} issued {} at {}µs in a new reign {} below the current reign {} \
                             ({} by {} at {}µs): new reigns only go up",
                            r.by_node,
                            r.ver,
                            r.at,
                            show_reign(here),
                            show_reign(h),
                            last.ver,
                            last.by_node,
                            last.at
                        ),
                    ),
                    Some((h, _)) if r.kind == IssueKind::ForceMaster && here.0 > h.0 => {
                        // It copies the record its new master held, which need not be the
                        // highest one (a deposed master may have gone on): any generation.
                        forced += 1;
                    }
                    Some((h, last)) if here.1 == h.1 || here.0 > h.0 => {
                        if r.kind == IssueKind::ForceMaster {
                            forced += 1;
                        } else {
                            f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "{} issued {} at {}µs as {}, raising mepoch over {} (issued \
                                     by {} at {}µs): only a forced re-master raises mepoch",
                                    r.by_node, r.ver, r.at, r.kind, last.ver, last.by_node, last.at
                                ),
                            );
                        }
                    }
                    Some((_, last)) => {
                        // A live record's master may open a new generation itself: its first
                        // write over a record it did not issue during its current run does,
                        // so that a crash that lost versions cannot make it issue one twice.
                        let masters_own =
                            r.kind == IssueKind::Write && r.by_node == last.new_master_node;
                        if last.content.is_some() && !masters_own {
                            f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "{} started generation {} with {} at {}µs while the record \
                                     was live ({} by {} at {}µs holds {}): a generation starts \
                                     only after a delete (two inserts admitted?)",
                                    r.by_node,
                                    r.ver.r#gen,
                                    r.ver,
                                    r.at,
                                    last.ver,
                                    last.by_node,
                                    last.at,
                                    show_content(last.content.as_ref())
                                ),
                            );
                        }
                        match r.kind {
                            IssueKind::Write if r.by_node != last.new_master_node => f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "two writers: {} re-inserted with {} at {}µs, but the \
                                     master named by {} (issued by {} at {}µs) is {}",
                                    r.by_node,
                                    r.ver,
                                    r.at,
                                    last.ver,
                                    last.by_node,
                                    last.at,
                                    last.new_master_node
                                ),
                            ),
                            IssueKind::ForceMaster => f.add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "{} forced a re-master with {} at {}µs, changing the \
                                     generation: a forced re-master keeps gen and raises mepoch",
                                    r.by_node, r.ver, r.at
                                ),
                            ),
                            _ => {}
                        }
                    }
                },
            }
            if r.kind == IssueKind::Write && r.new_master_node != r.by_node {
                handovers += 1;
                handed.insert((here, r.by_node), r);
            }
            chains.entry(here).or_default().push(r);
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{} issued versions on {} keys ({handovers} hand-overs, {forced} forced re-masters, \
         {fenced} versions by deposed masters, {} erased by crashes)",
        issued.len(),
        issues.len(),
        erased.len()
    );
    verdict
}
