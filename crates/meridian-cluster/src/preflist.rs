//! Preference lists (spec §3): which nodes serve a request for one partition, given who is up.
//!
//! Guarantees of [`preflist`]:
//! - the up primaries (`replicas[p][..N]`) are in it with their slot; each down primary is
//!   replaced by at most one **fallback**, found by walking the following partitions' replica
//!   lists (`replicas[p+1]`, `replicas[p+2]`, … flattened, wrapping) and taking the first up
//!   node not already in the list that is in the failed slot's DC, else the first up node
//!   not already in the list from any DC; down primaries are handled in slot order;
//! - no node appears twice; a fallback is never a primary of `p`;
//! - entries in the coordinator's DC come first; within each group, order is the order of
//!   construction (up primaries in claim order, then fallbacks in slot order). This is a
//!   stable sort, so the result is deterministic;
//! - while at least one node of every DC is up and `N ≥ D`, the list spans every DC;
//! - it can be shorter than N (tiny cluster, or every node down).
//!
//! Choices where the spec is silent: the walk covers `replicas[p+1]` … `replicas[p+Q]`,
//! the last being `p`'s own list, so its entries beyond N (if `target_n > N`) are the
//! last-resort candidates; an `n` larger than `target_n` is clamped to `target_n` (bucket
//! validation should refuse such an N; the quorum pre-checks then see the smaller list).

use crate::layout::Layout;
use meridian_core::{DcId, NodeId, PartitionId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Why a node is in a preference list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// One of the partition's N primaries, at claim-order `slot`.
    Primary {
        /// Index in `replicas[p]`.
        slot: usize,
    },
    /// Stands in for the down primary `for_node` at `for_slot` (writes become hints, §9).
    Fallback {
        /// The slot of the down primary.
        for_slot: usize,
        /// The down primary.
        for_node: NodeId,
    },
}

/// One entry of a preference list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ApEntry {
    /// The node to send to.
    pub node: NodeId,
    /// Its DC.
    pub dc: DcId,
    /// Primary or fallback.
    pub role: Role,
}

impl ApEntry {
    /// Whether the entry is a primary.
    pub fn is_primary(&self) -> bool {
        matches!(self.role, Role::Primary { .. })
    }
}

/// The active preference list of one partition for one coordinator DC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preflist {
    partition: PartitionId,
    n: usize,
    first_primary: NodeId,
    entries: Vec<ApEntry>,
}

impl Preflist {
    /// The partition.
    pub fn partition(&self) -> PartitionId {
        self.partition
    }

    /// The N used (the requested N clamped to the layout's `target_n`).
    pub fn n(&self) -> usize {
        self.n
    }

    /// `replicas[p][0]` in ring order, up or not: the partition's deterministic first
    /// primary (the timeline insert arbiter).
    pub fn first_primary(&self) -> NodeId {
        self.first_primary
    }

    /// The entries, local DC first.
    pub fn entries(&self) -> &[ApEntry] {
        &self.entries
    }

    /// Reorders the entries in place (replica selection: the order a read asks them in; the
    /// set of entries, and so every count over them, is unchanged).
    pub fn reorder(&mut self, f: impl FnOnce(&mut [ApEntry])) {
        f(&mut self.entries);
    }

    /// The nodes, in list order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.entries.iter().map(|e| e.node)
    }

    /// |apl|.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no node can serve the partition.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The number of primaries in the list (the up primaries).
    pub fn primaries(&self) -> usize {
        self.entries.iter().filter(|e| e.is_primary()).count()
    }

    /// The number of distinct nodes in the list.
    pub fn distinct_nodes(&self) -> usize {
        self.nodes().collect::<BTreeSet<_>>().len()
    }

    /// The number of distinct DCs in the list.
    pub fn distinct_dcs(&self) -> usize {
        self.entries
            .iter()
            .map(|e| e.dc)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// The entry for `node`, if it is in the list.
    pub fn get(&self, node: NodeId) -> Option<&ApEntry> {
        self.entries.iter().find(|e| e.node == node)
    }
}

/// The preference list of partition `p` for a bucket with `n` replicas, as seen by a
/// coordinator in `local_dc`, with `up` answering the failure detector's verdict.
///
/// # Panics
/// If `p` is not a partition of the layout's ring.
pub fn preflist(
    layout: &Layout,
    p: PartitionId,
    n: usize,
    local_dc: DcId,
    up: impl Fn(NodeId) -> bool,
) -> Preflist {
    let topo = layout.topology();
    let dc = |node: NodeId| topo.dc_of(node).expect("layouts only list members");
    let list = layout.replicas(p);
    let n = n.min(list.len());
    let prim = &list[..n];
    let mut apl: Vec<ApEntry> = prim
        .iter()
        .enumerate()
        .filter(|&(_, &node)| up(node))
        .map(|(slot, &node)| ApEntry {
            node,
            dc: dc(node),
            role: Role::Primary { slot },
        })
        .collect();
    let all = layout.all_replicas();
    let q = all.len();
    let walk = || (1..=q).flat_map(|k| all[(p.0 as usize + k) % q].iter().copied());
    for (slot, &failed) in prim.iter().enumerate() {
        if up(failed) {
            continue;
        }
        let failed_dc = dc(failed);
        let free = |node: &NodeId| up(*node) && !apl.iter().any(|e| e.node == *node);
        let found = walk()
            .find(|node| dc(*node) == failed_dc && free(node))
            .or_else(|| walk().find(free));
        if let Some(node) = found {
            apl.push(ApEntry {
                node,
                dc: dc(node),
                role: Role::Fallback {
                    for_slot: slot,
                    for_node: failed,
                },
            });
        }
    }
    apl.sort_by_key(|e| e.dc != local_dc);
    Preflist {
        partition: p,
        n,
        first_primary: list[0],
        entries: apl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{LayoutParts, claim};
    use crate::ring::Ring;
    use crate::topology::{Member, Topology};
    use proptest::prelude::*;

    fn m(id: u32, dc: u32) -> Member {
        Member::new(NodeId(id), DcId(dc))
    }

    /// A hand-written layout: partition p gets `lists[p % lists.len()]`.
    fn layout(members: &[Member], lists: &[&[u32]]) -> Layout {
        let t = Topology::new(members.iter().copied()).unwrap();
        let replicas = (0..64)
            .map(|p| lists[p % lists.len()].iter().map(|&x| NodeId(x)).collect())
            .collect();
        Layout::from_parts(LayoutParts {
            epoch: 1,
            target_n: lists[0].len(),
            topology: t,
            replicas,
        })
        .unwrap()
    }

    fn nodes(p: &Preflist) -> Vec<u32> {
        p.nodes().map(|n| n.0).collect()
    }

    fn members_2dc() -> Vec<Member> {
        vec![m(0, 0), m(1, 0), m(2, 0), m(10, 1), m(11, 1), m(12, 1)]
    }

    #[test]
    fn all_up_gives_primaries_local_first_in_ring_order() {
        let l = layout(&members_2dc(), &[&[0, 10, 1], &[11, 2, 12]]);
        let a = preflist(&l, PartitionId(0), 3, DcId(0), |_| true);
        assert_eq!(nodes(&a), [0, 1, 10]);
        assert_eq!(a.entries()[1].role, Role::Primary { slot: 2 });
        let b = preflist(&l, PartitionId(0), 3, DcId(1), |_| true);
        assert_eq!(nodes(&b), [10, 0, 1]);
        assert_eq!(b.first_primary(), NodeId(0));
        assert_eq!((b.primaries(), b.distinct_dcs()), (3, 2));
        // N smaller than target_n takes the claim-order prefix.
        let c = preflist(&l, PartitionId(0), 2, DcId(1), |_| true);
        assert_eq!(nodes(&c), [10, 0]);
    }

    #[test]
    fn fallback_prefers_the_failed_slots_dc_along_the_walk() {
        // p=0: [0, 10, 1]; p=1: [11, 2, 12]. Node 10 (dc1) down: the walk meets 11 (dc1) first.
        let l = layout(&members_2dc(), &[&[0, 10, 1], &[11, 2, 12]]);
        let a = preflist(&l, PartitionId(0), 3, DcId(0), |n| n != NodeId(10));
        assert_eq!(nodes(&a), [0, 1, 11]);
        assert_eq!(
            a.get(NodeId(11)).unwrap().role,
            Role::Fallback {
                for_slot: 1,
                for_node: NodeId(10)
            }
        );
        // Node 0 (dc0) down: the walk meets 11 (dc1) first but 2 (dc0) is preferred.
        let b = preflist(&l, PartitionId(0), 3, DcId(0), |n| n != NodeId(0));
        assert_eq!(nodes(&b), [1, 2, 10]);
        // Flipping the preference input: with 2 also down, dc0 has no free up node left
        // (1 is already a primary), so the first up node of the walk (11, dc1) stands in.
        let c = preflist(&l, PartitionId(0), 3, DcId(0), |n| {
            n != NodeId(0) && n != NodeId(2)
        });
        assert_eq!(nodes(&c), [1, 10, 11]);
    }

    #[test]
    fn fallbacks_follow_slot_order_and_never_repeat() {
        let l = layout(&members_2dc(), &[&[0, 10, 1], &[11, 2, 12]]);
        // Both dc1 and one dc0 primary down: slot 0 (node 0, dc0) gets 2, slot 1 (dc1) gets 11.
        let a = preflist(&l, PartitionId(0), 3, DcId(1), |n| {
            n != NodeId(0) && n != NodeId(10)
        });
        assert_eq!(nodes(&a), [11, 1, 2]);
        assert_eq!(
            a.get(NodeId(2)).unwrap().role,
            Role::Fallback {
                for_slot: 0,
                for_node: NodeId(0)
            }
        );
        assert_eq!(a.primaries(), 1);
    }

    #[test]
    fn walk_starts_after_p_and_wraps() {
        // Partition 63 walks to partition 0 first (63 is odd: list [11, 2, 12]).
        let l = layout(&members_2dc(), &[&[0, 10, 1], &[11, 2, 12]]);
        let a = preflist(&l, PartitionId(63), 3, DcId(0), |n| n != NodeId(11));
        // Fallback for dc1 slot 0: walk p=0 → [0, 10, 1]: 10 is the first dc1 node.
        assert_eq!(nodes(&a), [2, 12, 10]);
    }

    #[test]
    fn tiny_clusters_give_short_lists() {
        let l = layout(&[m(0, 0), m(1, 0)], &[&[0, 1]]);
        let a = preflist(&l, PartitionId(3), 2, DcId(0), |n| n == NodeId(1));
        assert_eq!(nodes(&a), [1]);
        let none = preflist(&l, PartitionId(3), 2, DcId(0), |_| false);
        assert!(none.is_empty());
        assert_eq!(none.first_primary(), NodeId(0));
        // A single-node cluster.
        let one = layout(&[m(7, 3)], &[&[7]]);
        assert_eq!(
            nodes(&preflist(&one, PartitionId(0), 3, DcId(0), |_| true)),
            [7]
        );
    }

    #[test]
    fn extra_replicas_beyond_n_serve_as_last_resort() {
        // target_n 3, bucket N 2: node 1 is p's third replica and not a primary.
        let l = layout(&[m(0, 0), m(1, 0), m(10, 1)], &[&[0, 10, 1]]);
        let a = preflist(&l, PartitionId(0), 2, DcId(0), |n| n != NodeId(0));
        assert_eq!(nodes(&a), [1, 10]);
        assert!(!a.get(NodeId(1)).unwrap().is_primary());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn apl_invariants(
            sizes in prop::collection::vec(1usize..=5, 1..=3),
            n in 1usize..=5,
            down_mask in any::<u64>(),
            p in 0u32..64,
            local in 0u32..3,
        ) {
            let mut ms = Vec::new();
            for (d, &s) in sizes.iter().enumerate() {
                for i in 0..s {
                    ms.push(m((d * 10 + i) as u32, d as u32));
                }
            }
            let t = Topology::new(ms.clone()).unwrap();
            let n = n.min(t.len());
            let l = claim(&t, Ring::new(64).unwrap(), n).unwrap();
            let up = |x: NodeId| {
                let i = ms.iter().position(|m| m.id == x).unwrap();
                down_mask >> i & 1 == 0
            };
            let local = DcId(local);
            let a = preflist(&l, PartitionId(p), n, local, up);
            let prim = &l.replicas(PartitionId(p))[..n];
            // No duplicates; only up nodes.
            prop_assert_eq!(a.distinct_nodes(), a.len());
            prop_assert!(a.nodes().all(up));
            prop_assert!(a.len() <= n);
            // Fallbacks are never primaries of p; every up primary is in.
            for e in a.entries() {
                match e.role {
                    Role::Primary { slot } => prop_assert_eq!(prim[slot], e.node),
                    Role::Fallback { for_slot, for_node } => {
                        prop_assert!(!prim.contains(&e.node));
                        prop_assert_eq!(prim[for_slot], for_node);
                        prop_assert!(!up(for_node));
                    }
                }
            }
            prop_assert_eq!(a.primaries(), prim.iter().filter(|&&x| up(x)).count());
            // Local first.
            let first_remote = a.entries().iter().position(|e| e.dc != local).unwrap_or(a.len());
            prop_assert!(a.entries()[first_remote..].iter().all(|e| e.dc != local));
            // A down primary gets a fallback whenever enough up nodes exist.
            let up_count = ms.iter().filter(|m| up(m.id)).count();
            prop_assert_eq!(a.len(), n.min(up_count));
            // While one node per DC is up and N ≥ D, the apl spans all DCs.
            let dcs_up = t.dcs().all(|d| t.nodes_in(d).iter().any(|&x| up(x)));
            if dcs_up && n >= t.dc_count() {
                prop_assert_eq!(a.distinct_dcs(), t.dc_count());
            }
        }
    }
}
