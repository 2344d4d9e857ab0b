//! Layouts: which nodes hold each partition (spec §2), how they are first claimed, how they
//! change when membership changes, and what data must move when they do.
//!
//! A [`Layout`] is `{epoch, target_n, topology, replicas}` where `replicas[p]` lists
//! `target_n` distinct nodes in claim order. It carries the [`Topology`] it was computed for,
//! so [`validate`] and [`rebalance`] know every listed node's DC without outside help.
//!
//! Guarantees (checked by [`validate`] on every layout this module builds, and by property
//! tests):
//! - every list has exactly `target_n` distinct member nodes;
//! - **DC rule**: the first `min(D, target_n)` entries of every list are in distinct DCs
//!   (D = number of DCs), so when `target_n ≥ D` every partition has a replica in every DC;
//! - [`claim`] is a pure function of `(set of members, Q, target_n)`: join order, hash-map order
//!   and randomness play no part. Ties are broken by `xxh3_64(u32_le(p) ‖ u32_le(node))`
//!   ([`tie_hash`]), then by node id;
//! - within each DC, per-node load (slots held, any position) differs by at most 1 after
//!   [`claim`] (greedy least-loaded picks of distinct nodes keep the spread ≤ 1) and after
//!   [`rebalance`] (its balancing loop runs until it is);
//! - [`rebalance`] moves only the departed nodes' slots plus the balancing moves. Proved by
//!   property tests from claimed layouts: adding one node to a DC holding `S` slots on `k`
//!   nodes moves at most `⌈S/(k+1)⌉` slots, all to the new node (with equal-sized DCs that
//!   is within the spec's `⌈Q·N/|nodes|⌉ + D`; with unequal DCs the spec's bound does not
//!   hold for any DC-pinned placement: a node joining a 1-node DC must take half its slots);
//!   removing a node with load `L` from a DC of `k` nodes moves at most `L + k` slots when
//!   its DC can refill every slot, else at most `L + |members|`.
//!
//! Choices where the spec is silent:
//! - with `target_n < D` (only buckets with `dc_rule = off` can then exist) the rotating
//!   first loop of the claim stops after `target_n` picks, so the lists are in `target_n`
//!   distinct DCs and the rotation spreads partitions over all DCs;
//! - a fresh [`claim`] has epoch 1;
//! - [`rebalance`] cannot keep the DC rule by same-DC moves when the **set of DCs** changes
//!   (a new DC appears or the last node of one leaves); it then re-claims from scratch
//!   (epoch still bumped), which moves most slots. `target_n` and Q never change in a
//!   rebalance; changing `target_n` is a fresh claim;
//! - a departed node's slot goes to the least-loaded eligible node of its DC (ties by
//!   [`tie_hash`]); if that DC has no eligible node (all its remaining nodes already hold the
//!   partition) it goes, like claim's extra picks, to the least-loaded node of the DC with the
//!   fewest entries in the list, and the list is then reordered (swapping a later entry of a
//!   missing DC forward) so the DC rule still holds. Reordering moves no data;
//! - a balancing move takes a slot from the most-loaded node of the DC (ties: lowest id) and
//!   gives it to the least-loaded one (ties: lowest id), in the partition, among those where
//!   it is possible, with the smallest [`tie_hash`] for the receiver (scatters its partitions
//!   around the ring); the receiver takes the giver's position, so the DC pattern is kept.
//! - a node whose DC changed is treated as departed from its old DC and new in its new DC.

use crate::error::LayoutError;
use crate::ring::Ring;
use crate::topology::Topology;
use meridian_core::{DcId, NodeId, PartitionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use xxhash_rust::xxh3::xxh3_64;

/// The claim tie-break: `xxh3_64(u32_le(p) ‖ u32_le(node))`.
pub fn tie_hash(p: usize, node: NodeId) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&(p as u32).to_le_bytes());
    b[4..].copy_from_slice(&node.0.to_le_bytes());
    xxh3_64(&b)
}

/// A versioned assignment of `target_n` replicas to every partition.
///
/// Only constructible through [`claim`], [`rebalance`] or [`Layout::from_parts`] (also used
/// by deserialization), all of which validate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "LayoutParts", into = "LayoutParts")]
pub struct Layout {
    epoch: u64,
    target_n: usize,
    topology: Topology,
    replicas: Vec<Vec<NodeId>>,
}

/// The raw fields of a [`Layout`], as serialized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutParts {
    /// Version number, bumped by every rebalance.
    pub epoch: u64,
    /// Replicas per partition.
    pub target_n: usize,
    /// The membership the layout was computed for.
    pub topology: Topology,
    /// `replicas[p]`, one list per partition.
    pub replicas: Vec<Vec<NodeId>>,
}

impl TryFrom<LayoutParts> for Layout {
    type Error = LayoutError;
    fn try_from(p: LayoutParts) -> Result<Layout, LayoutError> {
        Layout::from_parts(p)
    }
}

impl From<Layout> for LayoutParts {
    fn from(l: Layout) -> LayoutParts {
        LayoutParts {
            epoch: l.epoch,
            target_n: l.target_n,
            topology: l.topology,
            replicas: l.replicas,
        }
    }
}

impl Layout {
    /// A layout from raw parts (e.g. a proposal received from a peer), if it [`validate`]s.
    pub fn from_parts(parts: LayoutParts) -> Result<Layout, LayoutError> {
        let l = Layout {
            epoch: parts.epoch,
            target_n: parts.target_n,
            topology: parts.topology,
            replicas: parts.replicas,
        };
        validate(&l)?;
        Ok(l)
    }

    /// The version number.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Replicas per partition (the largest N of any bucket).
    pub fn target_n(&self) -> usize {
        self.target_n
    }

    /// The membership this layout places data on.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The ring (Q = number of replica lists).
    pub fn ring(&self) -> Ring {
        Ring::new(self.replicas.len() as u32).expect("validated layouts have a valid Q")
    }

    /// `replicas[p]` in claim order.
    ///
    /// # Panics
    /// If `p` is not a partition of this layout's ring.
    pub fn replicas(&self, p: PartitionId) -> &[NodeId] {
        &self.replicas[p.0 as usize]
    }

    /// All replica lists, indexed by partition.
    pub fn all_replicas(&self) -> &[Vec<NodeId>] {
        &self.replicas
    }

    /// The deterministic first primary of `p` (`replicas[p][0]`, before any local-first sort).
    pub fn first_primary(&self, p: PartitionId) -> NodeId {
        self.replicas(p)[0]
    }

    /// Slots held by every member (members holding none are listed with 0).
    pub fn loads(&self) -> BTreeMap<NodeId, usize> {
        let mut load: BTreeMap<NodeId, usize> =
            self.topology.members().iter().map(|m| (m.id, 0)).collect();
        for n in self.replicas.iter().flatten() {
            *load.entry(*n).or_default() += 1;
        }
        load
    }
}

/// Checks a layout: valid Q, `target_n ≥ 1`, enough members, every list `target_n` distinct
/// members, DC rule. The first failure found (partitions in order) is returned.
pub fn validate(layout: &Layout) -> Result<(), LayoutError> {
    let q = layout.replicas.len();
    if u32::try_from(q).map_or(true, |q| Ring::new(q).is_err()) {
        return Err(LayoutError::WrongPartitionCount { got: q });
    }
    let n = layout.target_n;
    if n == 0 {
        return Err(LayoutError::ZeroTargetN);
    }
    let topo = &layout.topology;
    if topo.len() < n {
        return Err(LayoutError::NotEnoughNodes {
            have: topo.len(),
            need: n,
        });
    }
    let lead = topo.dc_count().min(n);
    for (p, list) in layout.replicas.iter().enumerate() {
        let partition = PartitionId(p as u32);
        if list.len() != n {
            return Err(LayoutError::WrongReplicaCount {
                partition,
                expected: n,
                got: list.len(),
            });
        }
        let mut seen = BTreeSet::new();
        for &node in list {
            if !topo.contains(node) {
                return Err(LayoutError::UnknownNode { partition, node });
            }
            if !seen.insert(node) {
                return Err(LayoutError::DuplicateReplica { partition, node });
            }
        }
        let lead_dcs: BTreeSet<DcId> = list[..lead].iter().filter_map(|&x| topo.dc_of(x)).collect();
        if lead_dcs.len() != lead {
            return Err(LayoutError::DcRuleViolated { partition });
        }
    }
    Ok(())
}

/// The least-loaded node of `dc` not in `list` (ties: [`tie_hash`], then id).
fn pick(
    topo: &Topology,
    dc: DcId,
    list: &[NodeId],
    p: usize,
    load: &BTreeMap<NodeId, usize>,
) -> Option<NodeId> {
    topo.nodes_in(dc)
        .iter()
        .copied()
        .filter(|n| !list.contains(n))
        .min_by_key(|&n| (load.get(&n).copied().unwrap_or(0), tie_hash(p, n), n))
}

/// The least-loaded node outside `list`, from the DC with the fewest entries in `list`
/// among DCs that have a candidate (ties: rotation order starting at `dcs[p % D]`).
fn pick_extra(
    topo: &Topology,
    dcs: &[DcId],
    list: &[NodeId],
    p: usize,
    load: &BTreeMap<NodeId, usize>,
) -> Option<NodeId> {
    let d = dcs.len();
    let mut order: Vec<(usize, usize, DcId)> = (0..d)
        .map(|j| {
            let dc = dcs[(p + j) % d];
            let count = list.iter().filter(|&&x| topo.dc_of(x) == Some(dc)).count();
            (count, j, dc)
        })
        .collect();
    order.sort_unstable();
    order
        .into_iter()
        .find_map(|(_, _, dc)| pick(topo, dc, list, p, load))
}

/// The spec's greedy, deterministic, DC-rotating claim of `target_n` replicas per partition.
///
/// Errors: [`LayoutError::ZeroTargetN`], [`LayoutError::NotEnoughNodes`] if there are fewer
/// members than `target_n`.
pub fn claim(topology: &Topology, ring: Ring, target_n: usize) -> Result<Layout, LayoutError> {
    claim_with_epoch(topology, ring, target_n, 1)
}

fn claim_with_epoch(
    topology: &Topology,
    ring: Ring,
    target_n: usize,
    epoch: u64,
) -> Result<Layout, LayoutError> {
    if target_n == 0 {
        return Err(LayoutError::ZeroTargetN);
    }
    if topology.len() < target_n {
        return Err(LayoutError::NotEnoughNodes {
            have: topology.len(),
            need: target_n,
        });
    }
    let dcs: Vec<DcId> = topology.dcs().collect();
    let d = dcs.len();
    let mut load: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut replicas = Vec::with_capacity(ring.q() as usize);
    for p in 0..ring.q() as usize {
        let mut list = Vec::with_capacity(target_n);
        for j in 0..d.min(target_n) {
            let dc = dcs[(p + j) % d];
            let n = pick(topology, dc, &list, p, &load)
                .expect("a DC has members and none of them is in the list yet");
            list.push(n);
            *load.entry(n).or_default() += 1;
        }
        while list.len() < target_n {
            let n =
                pick_extra(topology, &dcs, &list, p, &load).ok_or(LayoutError::NotEnoughNodes {
                    have: topology.len(),
                    need: target_n,
                })?;
            list.push(n);
            *load.entry(n).or_default() += 1;
        }
        replicas.push(list);
    }
    let layout = Layout {
        epoch,
        target_n,
        topology: topology.clone(),
        replicas,
    };
    validate(&layout)?;
    Ok(layout)
}

/// Swaps entries so the first `lead` are in distinct DCs, if the list's DCs allow it; a list
/// already satisfying the rule is left untouched.
fn restore_dc_order(topo: &Topology, list: &mut [NodeId], lead: usize) {
    for j in 0..lead.min(list.len()) {
        let seen: BTreeSet<Option<DcId>> = list[..j].iter().map(|&x| topo.dc_of(x)).collect();
        if !seen.contains(&topo.dc_of(list[j])) {
            continue;
        }
        if let Some(k) = (j + 1..list.len()).find(|&k| !seen.contains(&topo.dc_of(list[k]))) {
            list.swap(j, k);
        }
    }
}

/// The layout for a new membership, derived from `old` with few moves (spec §2 rebalance):
/// departed nodes' slots are refilled in their DC, then each DC is balanced to ±1; the epoch
/// is bumped. If the set of DCs changed, re-claims from scratch (see the module header).
///
/// Errors: [`LayoutError::NotEnoughNodes`] if `new` has fewer members than `target_n`.
pub fn rebalance(old: &Layout, new: &Topology) -> Result<Layout, LayoutError> {
    let target_n = old.target_n;
    let epoch = old.epoch + 1;
    if new.len() < target_n {
        return Err(LayoutError::NotEnoughNodes {
            have: new.len(),
            need: target_n,
        });
    }
    if !old.topology.dcs().eq(new.dcs()) {
        tracing::info!(
            epoch,
            "set of DCs changed: layout re-claimed from scratch (most partitions move)"
        );
        return claim_with_epoch(new, old.ring(), target_n, epoch);
    }
    let dcs: Vec<DcId> = new.dcs().collect();
    let lead = dcs.len().min(target_n);
    let stays = |n: NodeId| new.dc_of(n).is_some() && new.dc_of(n) == old.topology.dc_of(n);
    let mut load: BTreeMap<NodeId, usize> = new.members().iter().map(|m| (m.id, 0)).collect();
    for &n in old.replicas.iter().flatten() {
        if stays(n) {
            *load.entry(n).or_default() += 1;
        }
    }
    let mut replicas = old.replicas.clone();
    for (p, list) in replicas.iter_mut().enumerate() {
        let mut changed = false;
        for i in 0..list.len() {
            let gone = list[i];
            if stays(gone) {
                continue;
            }
            let dc = old
                .topology
                .dc_of(gone)
                .expect("old layouts only list members");
            let n = match pick(new, dc, list, p, &load) {
                Some(n) => n,
                None => {
                    let others: Vec<NodeId> = list.iter().copied().filter(|&x| stays(x)).collect();
                    let mut n = pick_extra(new, &dcs, &others, p, &load);
                    // `others` omits entries still to be replaced; never pick one of those.
                    if n.is_some_and(|n| list.contains(&n)) {
                        n = new
                            .members()
                            .iter()
                            .map(|m| m.id)
                            .filter(|x| !list.contains(x))
                            .min_by_key(|&x| (load[&x], tie_hash(p, x), x));
                    }
                    n.ok_or(LayoutError::NotEnoughNodes {
                        have: new.len(),
                        need: target_n,
                    })?
                }
            };
            list[i] = n;
            *load.entry(n).or_default() += 1;
            changed = true;
        }
        if changed {
            restore_dc_order(new, list, lead);
        }
    }
    for &dc in &dcs {
        let nodes = new.nodes_in(dc);
        // DCs are never empty, so max and min exist.
        while let (Some(&give), Some(&take)) = (
            nodes
                .iter()
                .max_by_key(|&&n| (load[&n], std::cmp::Reverse(n))),
            nodes.iter().min_by_key(|&&n| (load[&n], n)),
        ) {
            if load[&give] <= load[&take] + 1 {
                break;
            }
            // `give` holds more partitions than `take`, so some list has `give` but not `take`.
            let p = (0..replicas.len())
                .filter(|&p| replicas[p].contains(&give) && !replicas[p].contains(&take))
                .min_by_key(|&p| (tie_hash(p, take), p))
                .expect("a more-loaded node holds a partition the less-loaded one does not");
            let pos = replicas[p].iter().position(|&x| x == give).expect("found");
            replicas[p][pos] = take;
            *load.get_mut(&give).expect("member") -= 1;
            *load.get_mut(&take).expect("member") += 1;
        }
    }
    let layout = Layout {
        epoch,
        target_n,
        topology: new.clone(),
        replicas,
    };
    validate(&layout)?;
    Ok(layout)
}

/// One node gaining one partition in a layout change (input to ownership handoff, §9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// The partition.
    pub partition: PartitionId,
    /// The node that gains it.
    pub to: NodeId,
    /// The old replica whose place `to` takes (`None` if the list grew).
    pub replaces: Option<NodeId>,
    /// Old replicas of the partition that are still members, to stream from: `replaces`
    /// first if it is still a member, then the others in old claim order.
    pub sources: Vec<NodeId>,
}

/// The transfers turning `old` into `new`: for each partition (in order), each node in the
/// new list but not the old one, in new claim order. Reordering within a list is not a
/// transfer. Partitions beyond the smaller ring are ignored (Q never changes in a rebalance).
pub fn diff(old: &Layout, new: &Layout) -> Vec<Transfer> {
    let mut out = Vec::new();
    for (p, (o, n)) in old.replicas.iter().zip(&new.replicas).enumerate() {
        let mut lost: Vec<(usize, NodeId)> = o
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, x)| !n.contains(x))
            .collect();
        for (i, &to) in n.iter().enumerate() {
            if o.contains(&to) {
                continue;
            }
            let k = lost
                .iter()
                .position(|&(j, _)| j == i)
                .or(if lost.is_empty() { None } else { Some(0) });
            let replaces = k.map(|k| lost.remove(k).1);
            let mut sources: Vec<NodeId> = replaces
                .into_iter()
                .filter(|&r| new.topology.contains(r))
                .collect();
            sources.extend(
                o.iter()
                    .copied()
                    .filter(|&x| Some(x) != replaces && new.topology.contains(x)),
            );
            out.push(Transfer {
                partition: PartitionId(p as u32),
                to,
                replaces,
                sources,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Member;
    use proptest::prelude::*;

    fn topo(spec: &[(u32, u32)]) -> Topology {
        Topology::new(spec.iter().map(|&(n, d)| Member::new(NodeId(n), DcId(d)))).unwrap()
    }

    /// Nodes numbered from 0, `sizes[d]` of them in DC d.
    fn topo_sizes(sizes: &[usize]) -> Topology {
        let mut v = Vec::new();
        let mut id = 0;
        for (d, &s) in sizes.iter().enumerate() {
            for _ in 0..s {
                v.push(Member::new(NodeId(id), DcId(d as u32)));
                id += 1;
            }
        }
        Topology::new(v).unwrap()
    }

    fn q(n: u32) -> Ring {
        Ring::new(n).unwrap()
    }

    /// max − min load among the nodes of each DC.
    fn spreads(l: &Layout) -> BTreeMap<DcId, usize> {
        let load = l.loads();
        l.topology()
            .dcs()
            .map(|dc| {
                let ls: Vec<usize> = l.topology().nodes_in(dc).iter().map(|n| load[n]).collect();
                (dc, ls.iter().max().unwrap() - ls.iter().min().unwrap())
            })
            .collect()
    }

    #[test]
    fn two_dcs_n3_alternate_two_plus_one() {
        let t = topo_sizes(&[4, 4]);
        let l = claim(&t, q(64), 3).unwrap();
        for (p, list) in l.all_replicas().iter().enumerate() {
            let dcs: Vec<u32> = list.iter().map(|&n| t.dc_of(n).unwrap().0).collect();
            // Rotation: DC p%2 leads; the third replica goes to the DC with fewer (tie:
            // rotation order, i.e. the leading DC).
            let lead = (p % 2) as u32;
            assert_eq!(dcs, [lead, 1 - lead, lead], "partition {p}");
        }
        assert_eq!(l.epoch(), 1);
        assert!(spreads(&l).values().all(|&s| s <= 1));
    }

    #[test]
    fn claim_errors() {
        let t = topo_sizes(&[1, 1]);
        assert_eq!(
            claim(&t, q(64), 3),
            Err(LayoutError::NotEnoughNodes { have: 2, need: 3 })
        );
        assert_eq!(claim(&t, q(64), 0), Err(LayoutError::ZeroTargetN));
        assert!(claim(&Topology::default(), q(64), 1).is_err());
    }

    #[test]
    fn more_dcs_than_n_uses_distinct_dcs_and_rotates() {
        let t = topo_sizes(&[1, 1, 1, 1]);
        let l = claim(&t, q(64), 2).unwrap();
        for (p, list) in l.all_replicas().iter().enumerate() {
            let dcs: Vec<u32> = list.iter().map(|&n| t.dc_of(n).unwrap().0).collect();
            assert_eq!(dcs, [(p % 4) as u32, ((p + 1) % 4) as u32]);
        }
    }

    fn bad(replicas: Vec<Vec<NodeId>>, t: &Topology, n: usize) -> Result<Layout, LayoutError> {
        Layout::from_parts(LayoutParts {
            epoch: 1,
            target_n: n,
            topology: t.clone(),
            replicas,
        })
    }

    #[test]
    fn validate_reports_each_violation() {
        let t = topo(&[(0, 0), (1, 0), (2, 1)]);
        let good = claim(&t, q(64), 2).unwrap();
        let mut r = good.all_replicas().to_vec();
        assert!(bad(r.clone(), &t, 2).is_ok());
        r[5] = vec![NodeId(0), NodeId(1)];
        assert_eq!(
            bad(r.clone(), &t, 2),
            Err(LayoutError::DcRuleViolated {
                partition: PartitionId(5)
            })
        );
        r[5] = vec![NodeId(2), NodeId(2)];
        assert_eq!(
            bad(r.clone(), &t, 2),
            Err(LayoutError::DuplicateReplica {
                partition: PartitionId(5),
                node: NodeId(2)
            })
        );
        r[5] = vec![NodeId(2), NodeId(9)];
        assert_eq!(
            bad(r.clone(), &t, 2),
            Err(LayoutError::UnknownNode {
                partition: PartitionId(5),
                node: NodeId(9)
            })
        );
        r[5] = vec![NodeId(2)];
        assert_eq!(
            bad(r.clone(), &t, 2),
            Err(LayoutError::WrongReplicaCount {
                partition: PartitionId(5),
                expected: 2,
                got: 1
            })
        );
        r.truncate(63);
        assert_eq!(
            bad(r, &t, 2),
            Err(LayoutError::WrongPartitionCount { got: 63 })
        );
        assert_eq!(
            bad(good.all_replicas().to_vec(), &t, 4),
            Err(LayoutError::NotEnoughNodes { have: 3, need: 4 })
        );
        // The DC rule is on the first D entries only: [dc0, dc1, dc0] is fine with N=3.
        let l3 = claim(&t, q(64), 3).unwrap();
        assert!(validate(&l3).is_ok());
    }

    #[test]
    fn rebalance_same_topology_moves_nothing_and_bumps_epoch() {
        let t = topo_sizes(&[3, 2]);
        let l = claim(&t, q(64), 3).unwrap();
        let r = rebalance(&l, &t).unwrap();
        assert_eq!(r.epoch(), 2);
        assert_eq!(r.all_replicas(), l.all_replicas());
        assert!(diff(&l, &r).is_empty());
    }

    #[test]
    fn rebalance_refills_departed_slots_in_the_same_dc() {
        let t = topo_sizes(&[3, 3]);
        let l = claim(&t, q(64), 3).unwrap();
        let t2 = topo(&[(0, 0), (1, 0), (3, 1), (4, 1), (5, 1)]); // node 2 (dc0) left
        let r = rebalance(&l, &t2).unwrap();
        let d = diff(&l, &r);
        let departed_load = l.loads()[&NodeId(2)];
        assert_eq!(
            d.iter().filter(|x| x.replaces == Some(NodeId(2))).count(),
            departed_load
        );
        for x in &d {
            assert_eq!(t2.dc_of(x.to), Some(DcId(0)), "{x:?}");
            assert!(!x.sources.contains(&NodeId(2)));
            assert!(!x.sources.is_empty());
        }
        assert!(spreads(&r).values().all(|&s| s <= 1));
    }

    #[test]
    fn rebalance_when_a_dc_runs_short_keeps_the_dc_rule() {
        // dc0 has 2 nodes and N=3 with 2 DCs puts 2 replicas in dc0 in half the partitions.
        let t = topo_sizes(&[2, 3]);
        let l = claim(&t, q(64), 3).unwrap();
        let t2 = topo(&[(0, 0), (2, 1), (3, 1), (4, 1)]);
        let r = rebalance(&l, &t2).unwrap();
        validate(&r).unwrap();
        assert!(r.all_replicas().iter().all(|l| l.contains(&NodeId(0))));
    }

    #[test]
    fn rebalance_reclaims_when_dc_set_changes() {
        let t = topo_sizes(&[2, 2]);
        let l = claim(&t, q(64), 3).unwrap();
        let t3 = topo_sizes(&[2, 2, 1]);
        let r = rebalance(&l, &t3).unwrap();
        assert_eq!(r.epoch(), 2);
        let fresh = claim(&t3, q(64), 3).unwrap();
        assert_eq!(r.all_replicas(), fresh.all_replicas());
        assert_eq!(
            rebalance(&l, &topo_sizes(&[1, 1])),
            Err(LayoutError::NotEnoughNodes { have: 2, need: 3 })
        );
    }

    #[test]
    fn diff_pairs_by_position_and_lists_sources() {
        let t = topo(&[(0, 0), (1, 0), (2, 1), (3, 1)]);
        let mut a = claim(&t, q(64), 2).unwrap();
        let mut b = a.clone();
        a.replicas[0] = vec![NodeId(0), NodeId(2)];
        b.replicas[0] = vec![NodeId(1), NodeId(3)];
        b.replicas[1] = b.replicas[1].iter().rev().copied().collect();
        let d = diff(&a, &b);
        assert_eq!(
            d,
            vec![
                Transfer {
                    partition: PartitionId(0),
                    to: NodeId(1),
                    replaces: Some(NodeId(0)),
                    sources: vec![NodeId(0), NodeId(2)],
                },
                Transfer {
                    partition: PartitionId(0),
                    to: NodeId(3),
                    replaces: Some(NodeId(2)),
                    sources: vec![NodeId(2), NodeId(0)],
                },
            ]
        );
    }

    #[test]
    fn serde_validates() {
        let t = topo_sizes(&[2, 2]);
        let l = claim(&t, q(64), 2).unwrap();
        let parts: LayoutParts = l.clone().into();
        assert_eq!(Layout::try_from(parts.clone()).unwrap(), l);
        let mut broken = parts;
        broken.replicas[0] = vec![NodeId(0), NodeId(1)];
        assert!(Layout::try_from(broken).is_err());
    }

    #[test]
    fn spec_move_bound_cannot_hold_with_unequal_dcs() {
        // 1 node in dc0, 8 in dc1, N=3: the dc0 node holds all 64 partitions. A second dc0
        // node must take 32 of them to balance dc0 to ±1, above ⌈64·3/10⌉ + 2 = 22.
        let t = topo_sizes(&[1, 8]);
        let old = claim(&t, q(64), 3).unwrap();
        let mut members = t.members().to_vec();
        members.push(Member::new(NodeId(100), DcId(0)));
        let new = rebalance(&old, &Topology::new(members).unwrap()).unwrap();
        assert_eq!(diff(&old, &new).len(), 32);
        assert_eq!(new.loads()[&NodeId(100)], 32);
    }

    // ---- property tests ----

    /// (DC sizes, Q, N) with N ≤ total nodes.
    fn cluster() -> impl Strategy<Value = (Vec<usize>, Ring, usize)> {
        (
            prop::collection::vec(1usize..=8, 1..=4),
            prop::sample::select(vec![64u32, 256]),
            1usize..=5,
        )
            .prop_map(|(sizes, qq, n)| {
                let total: usize = sizes.iter().sum();
                (sizes, q(qq), n.min(total))
            })
    }

    fn check_invariants(l: &Layout) {
        validate(l).unwrap();
        let t = l.topology();
        let d = t.dc_count();
        for list in l.all_replicas() {
            let distinct: BTreeSet<NodeId> = list.iter().copied().collect();
            assert_eq!(distinct.len(), l.target_n());
            let dcs: BTreeSet<DcId> = list.iter().map(|&n| t.dc_of(n).unwrap()).collect();
            if d <= l.target_n() {
                assert_eq!(dcs.len(), d, "every DC holds a replica when D ≤ N");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn claim_invariants((sizes, ring, n) in cluster()) {
            let l = claim(&topo_sizes(&sizes), ring, n).unwrap();
            check_invariants(&l);
            // Per-DC load spread is at most 1.
            for (dc, s) in spreads(&l) {
                prop_assert!(s <= 1, "dc {dc} spread {s}");
            }
        }

        #[test]
        fn claim_is_deterministic_regardless_of_join_order(
            (sizes, ring, n) in cluster(),
            seed in any::<u64>(),
        ) {
            let t = topo_sizes(&sizes);
            let mut members = t.members().to_vec();
            // Deterministic shuffle from the seed.
            let mut s = seed | 1;
            for i in (1..members.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                members.swap(i, (s % (i as u64 + 1)) as usize);
            }
            let shuffled = Topology::new(members).unwrap();
            prop_assert_eq!(claim(&t, ring, n).unwrap(), claim(&shuffled, ring, n).unwrap());
        }

        #[test]
        fn adding_a_node_moves_few_slots(
            (sizes, ring, n) in cluster(),
            dc_pick in any::<prop::sample::Index>(),
        ) {
            let t = topo_sizes(&sizes);
            let old = claim(&t, ring, n).unwrap();
            let dc = DcId(dc_pick.index(sizes.len()) as u32);
            let mut members = t.members().to_vec();
            let new_id = NodeId(1000);
            members.push(Member::new(new_id, dc));
            let t2 = Topology::new(members).unwrap();
            let new = rebalance(&old, &t2).unwrap();
            check_invariants(&new);
            prop_assert_eq!(new.epoch(), old.epoch() + 1);
            for (dc, s) in spreads(&new) {
                prop_assert!(s <= 1, "dc {dc} spread {s}");
            }
            let moves = diff(&old, &new);
            // Every move goes to the new node, from a node of its DC.
            for m in &moves {
                prop_assert_eq!(m.to, new_id);
                prop_assert_eq!(t.dc_of(m.replaces.unwrap()), Some(dc));
            }
            let loads = old.loads();
            let s: usize = t.nodes_in(dc).iter().map(|x| loads[x]).sum();
            let k = t.nodes_in(dc).len();
            prop_assert!(moves.len() <= s.div_ceil(k + 1), "moves {} S {s} k {k}", moves.len());
            // The spec's bound ⌈Q·N/|nodes|⌉ + D holds when DCs have equal sizes.
            if sizes.iter().all(|&x| x == sizes[0]) {
                let bound = (ring.q() as usize * n).div_ceil(t2.len()) + sizes.len();
                prop_assert!(moves.len() <= bound, "moves {} > spec bound {bound}", moves.len());
            }
        }

        #[test]
        fn removing_a_node_moves_few_slots(
            (sizes, ring, n) in cluster(),
            pick_node in any::<prop::sample::Index>(),
        ) {
            let t = topo_sizes(&sizes);
            prop_assume!(t.len() > n);
            let old = claim(&t, ring, n).unwrap();
            let gone = t.members()[pick_node.index(t.len())];
            let t2 = Topology::new(t.members().iter().copied().filter(|m| m.id != gone.id))
                .unwrap();
            let new = rebalance(&old, &t2).unwrap();
            check_invariants(&new);
            for (dc, s) in spreads(&new) {
                prop_assert!(s <= 1, "dc {dc} spread {s}");
            }
            if t2.dc_count() == t.dc_count() {
                let moves = diff(&old, &new).len();
                let gone_load = old.loads()[&gone.id];
                let k = t.nodes_in(gone.dc).len();
                prop_assert!(moves >= gone_load);
                // Can the departed node's DC refill every slot itself? Only if it keeps more
                // nodes than it ever has entries in one list.
                let most_in_one_list = old
                    .all_replicas()
                    .iter()
                    .map(|l| l.iter().filter(|&&x| t.dc_of(x) == Some(gone.dc)).count())
                    .max()
                    .unwrap();
                let bound = if k > most_in_one_list {
                    gone_load + k
                } else {
                    // Some slots land in other DCs, which then rebalance too.
                    gone_load + t.len()
                };
                prop_assert!(
                    moves <= bound,
                    "moves {moves} departed load {gone_load} dc size {k} bound {bound}"
                );
            }
        }
    }
}
