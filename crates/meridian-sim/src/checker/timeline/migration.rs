//! The migration rule (invariant 6): replaying each record's `recent`, a client write moves the
//! master exactly when the last `T` writes came from one other DC, and then into that DC (or,
//! told the targets, to exactly the replica the master saw up there).

use super::{
    Applied, Findings, IssueKind, Issued, Reign, TlVersion, erased_before, erased_versions,
    issues_by_key, reign,
};
use crate::checker::Verdict;
use meridian_core::{DcId, Key, NodeId};
use std::collections::BTreeMap;

/// `recent` as (origin, version), newest first.
type Window = Vec<(DcId, TlVersion)>;

fn show_window(window: &Window) -> String {
    if window.is_empty() {
        return "none".to_string();
    }
    let items: Vec<String> = window.iter().map(|(d, v)| format!("{d} ({v})")).collect();
    items.join(", ")
}

/// Migration (invariant 6) with threshold `t` (the bucket's `migration_threshold`): a client
/// write moves the master iff `t > 0` and the origins of the last `t` writes, itself included,
/// are all one DC other than the issuing master's; the new master is then in that DC.
///
/// Interpretation of `recent` (spec §3, §5, §6): it is replayed from the issue log along each
/// reign's chain. It spans master changes (every replica keeps it) and generations: a re-insert
/// over a tombstone is an ordinary master write, which computes `recent` from the record it
/// overwrites. It restarts only at an [`IssueKind::Insert`] of an absent record
/// (`recent = [d]`). A forced re-master is not a client write: it leaves `recent` as it was
/// (the spec does not say; this is the reading that keeps §6's "survives master changes"). A
/// record opening a new reign continues the window of the highest reign before it; a deposed
/// master's fenced record continues its own reign's window.
pub fn check_migration(issued: &[Issued], t: usize) -> Verdict {
    check_migration_with(issued, t, &BTreeMap::new())
}

/// What the issuing master knew about where a write's migration could go, as seen by
/// whoever can see placement and the failure detector (the simulator's observer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationTarget {
    /// The first replica of the key in the write's origin DC that the master believed up, in
    /// claim order (`None`: it believed none up, so no migration could happen).
    FirstUp(Option<NodeId>),
    /// The master was no longer a primary of the key (a layout change took it off the
    /// preference list): it hands the mastership to a primary with this write, whatever the
    /// threshold says (`meridian-replication`'s documented deviation).
    NotAPrimary,
}

/// [`MigrationTarget`]s of writes, keyed by key and issued version.
pub type MigrationTargets = BTreeMap<(Key, TlVersion), MigrationTarget>;

/// [`check_migration`], knowing [`MigrationTargets`]: a due migration that did not happen is
/// excused when the issuing master believed no replica of the origin DC up (the spec's "first
/// up replica of k in d" does not exist), a migration must go to exactly the recorded target,
/// and a write by a master that is no longer a primary may move the mastership to any replica.
/// Writes missing from `targets` are judged as by [`check_migration`].
pub fn check_migration_with(issued: &[Issued], t: usize, targets: &MigrationTargets) -> Verdict {
    check_migration_with_applied(issued, &[], t, targets)
}

/// [`check_migration_with`], told by the apply log which versions a crash erased before any
/// other replica stored them (as in [`check_single_writer_with`]): such a version is judged,
/// but its origin does not enter the window of the versions after it (the master that issued
/// it restarted without it, so its next write extends the record before it).
///
/// [`check_single_writer_with`]: super::check_single_writer_with
pub fn check_migration_with_applied(
    issued: &[Issued],
    applied: &[Applied],
    t: usize,
    targets: &MigrationTargets,
) -> Verdict {
    let erased = erased_versions(issued, applied);
    let mut verdict = Verdict::new("timeline-migration");
    let issues = issues_by_key(issued);
    let (mut writes, mut migrations, mut excused, mut handovers) = (0usize, 0, 0, 0);
    for (&key, recs) in &issues {
        let mut f = Findings::new(key);
        // Each reign's versions in issue order, with their windows; the last one in effect
        // carries the reign's window.
        let mut chains: BTreeMap<Reign, Vec<(TlVersion, Window)>> = BTreeMap::new();
        // Each issued version's window, and its content, for forced re-masters.
        let mut window_of: Vec<(&Issued, Window)> = Vec::new();
        for &r in recs {
            let here = reign(r.ver);
            // Versions a crash erased before this issue took no effect from then on.
            for chain in chains.values_mut() {
                while chain
                    .last()
                    .is_some_and(|(v, _)| erased_before(&erased, key, *v, r.at))
                {
                    chain.pop();
                }
            }
            chains.retain(|_, c| !c.is_empty());
            window_of.retain(|(i, _)| !erased_before(&erased, key, i.ver, r.at));
            let recent_of: BTreeMap<Reign, Window> = chains
                .iter()
                .map(|(&k, c)| (k, c.last().expect("non-empty").1.clone()))
                .collect();
            // A forced re-master copies the record its new master held: continue that
            // version's window (found by content, unique per write), not the window of the
            // deposed master's later writes, which that replica may never have received.
            let forced_from = (r.kind == IssueKind::ForceMaster)
                .then(|| {
                    window_of
                        .iter()
                        .rev()
                        .find(|(i, _)| {
                            // A value is unique per write; a tombstone is the last record of
                            // its generation, which the forced version keeps.
                            let same = match &r.content {
                                Some(_) => i.content == r.content,
                                None => i.content.is_none() && i.ver.r#gen == r.ver.r#gen,
                            };
                            same && i.ver < r.ver
                        })
                        .map(|(_, w)| w.clone())
                })
                .flatten();
            let before: Window = match r.kind {
                IssueKind::Insert => Vec::new(),
                _ => forced_from
                    .or_else(|| {
                        // Its own reign, else the previous generation of its master epoch (a
                        // deposed master's chain goes on below the forced epoch), else the
                        // highest reign.
                        recent_of
                            .get(&here)
                            .or_else(|| {
                                recent_of
                                    .range(..here)
                                    .next_back()
                                    .filter(|(k, _)| k.0 == here.0)
                                    .map(|(_, w)| w)
                            })
                            .or_else(|| recent_of.last_key_value().map(|(_, w)| w))
                            .cloned()
                    })
                    .unwrap_or_default(),
            };
            let recent: Window = match r.kind {
                IssueKind::ForceMaster => before,
                _ => std::iter::once((r.origin_dc, r.ver))
                    .chain(before)
                    .take(t)
                    .collect(),
            };
            match r.kind {
                IssueKind::Write => {
                    writes += 1;
                    let due = t > 0
                        && recent.len() == t
                        && recent.iter().all(|&(d, _)| d == r.origin_dc)
                        && r.origin_dc != r.by_dc;
                    let moved = r.new_master_node != r.by_node;
                    let window = show_window(&recent);
                    let from = format!("{} ({})", r.by_node, r.by_dc);
                    let to = format!("{} ({})", r.new_master_node, r.new_master_dc);
                    let target = targets.get(&(key.clone(), r.ver)).copied();
                    let first_up = match target {
                        Some(MigrationTarget::FirstUp(n)) => Some(n),
                        _ => None,
                    };
                    match (due, moved) {
                        _ if target == Some(MigrationTarget::NotAPrimary) => handovers += 1,
                        (true, false) if first_up == Some(None) => excused += 1,
                        (true, true) if first_up.is_some_and(|n| n != Some(r.new_master_node)) => f
                            .add(
                                r.at,
                                Vec::new(),
                                format!(
                                    "migration to the wrong replica: {} at {}µs moved the \
                                     master from {from} to {to}, but the first replica of the \
                                     key in {} that {} believed up was {}",
                                    r.ver,
                                    r.at,
                                    r.origin_dc,
                                    r.by_node,
                                    first_up
                                        .flatten()
                                        .map_or("none".to_string(), |n| n.to_string())
                                ),
                            ),
                        (true, false) => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "missed migration: the last {t} writes ({window}, newest first) \
                                 all came from {}, not master {from}'s DC, yet {} at {}µs kept \
                                 the master",
                                r.origin_dc, r.ver, r.at
                            ),
                        ),
                        (false, true) if t == 0 => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "migration while disabled (T = 0): {} at {}µs moved the master \
                                 from {from} to {to}",
                                r.ver, r.at
                            ),
                        ),
                        (false, true) => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "migration without {t} consecutive foreign writes: {} at {}µs \
                                 moved the master from {from} to {to}, but the last writes were \
                                 {window} (newest first); it takes {t} from one DC other than {}",
                                r.ver, r.at, r.by_dc
                            ),
                        ),
                        (true, true) if r.new_master_dc != r.origin_dc => f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "migration to the wrong DC: the last {t} writes ({window}) came \
                                 from {}, but {} at {}µs moved the master from {from} to {to}",
                                r.origin_dc, r.ver, r.at
                            ),
                        ),
                        (true, true) => migrations += 1,
                        (false, false) => {}
                    }
                }
                IssueKind::Insert => {
                    if r.new_master_node != r.by_node && r.new_master_dc != r.origin_dc {
                        f.add(
                            r.at,
                            Vec::new(),
                            format!(
                                "{} inserted {} at {}µs naming {} ({}) master: an insert's \
                                 master is the arbiter itself (insert_arbiter) or a replica in \
                                 the origin DC {} (inserter_dc)",
                                r.by_node,
                                r.ver,
                                r.at,
                                r.new_master_node,
                                r.new_master_dc,
                                r.origin_dc
                            ),
                        );
                    }
                }
                IssueKind::ForceMaster => {}
            }
            window_of.push((r, recent.clone()));
            chains.entry(here).or_default().push((r.ver, recent));
        }
        f.report(&mut verdict);
    }
    verdict.checked = format!(
        "{writes} writes on {} keys with T = {t} ({migrations} migrations{})",
        issues.len(),
        [
            (excused, "due with no replica of the origin DC up"),
            (handovers, "by masters no longer primaries")
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!(", {n} {what}"))
        .collect::<String>()
    );
    verdict
}
