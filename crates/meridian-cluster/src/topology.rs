//! Cluster membership as placement sees it: which nodes exist and which DC each is in.
//!
//! Guarantees: a [`Topology`] has no duplicate node ids; [`Topology::members`] is sorted by
//! node id and [`Topology::dcs`] by DC id, whatever order the members were given in, so every
//! computation over a topology (claim, rebalance, preference lists) is independent of join
//! order. Every listed DC has at least one member.

use crate::error::TopologyError;
use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cluster member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The node's id, unique in the cluster.
    pub id: NodeId,
    /// The data center the node runs in.
    pub dc: DcId,
}

impl Member {
    /// A member `id` in `dc`.
    pub fn new(id: NodeId, dc: DcId) -> Member {
        Member { id, dc }
    }
}

/// A validated, canonically ordered set of members.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Member>", into = "Vec<Member>")]
pub struct Topology {
    members: Vec<Member>,
    by_node: BTreeMap<NodeId, DcId>,
    by_dc: BTreeMap<DcId, Vec<NodeId>>,
}

impl Topology {
    /// A topology of `members` (any order), or [`TopologyError::DuplicateNode`].
    pub fn new(members: impl IntoIterator<Item = Member>) -> Result<Topology, TopologyError> {
        let mut by_node = BTreeMap::new();
        for m in members {
            if by_node.insert(m.id, m.dc).is_some() {
                return Err(TopologyError::DuplicateNode { node: m.id });
            }
        }
        let mut by_dc: BTreeMap<DcId, Vec<NodeId>> = BTreeMap::new();
        for (&id, &dc) in &by_node {
            by_dc.entry(dc).or_default().push(id);
        }
        let members = by_node.iter().map(|(&id, &dc)| Member { id, dc }).collect();
        Ok(Topology {
            members,
            by_node,
            by_dc,
        })
    }

    /// All members, sorted by node id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The DCs that have at least one member, sorted by id.
    pub fn dcs(&self) -> impl ExactSizeIterator<Item = DcId> + '_ {
        self.by_dc.keys().copied()
    }

    /// D, the number of DCs.
    pub fn dc_count(&self) -> usize {
        self.by_dc.len()
    }

    /// The members of `dc`, sorted by node id (empty if the DC has none).
    pub fn nodes_in(&self, dc: DcId) -> &[NodeId] {
        self.by_dc.get(&dc).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The DC of `node`, if it is a member.
    pub fn dc_of(&self, node: NodeId) -> Option<DcId> {
        self.by_node.get(&node).copied()
    }

    /// Whether `node` is a member.
    pub fn contains(&self, node: NodeId) -> bool {
        self.by_node.contains_key(&node)
    }
}

impl TryFrom<Vec<Member>> for Topology {
    type Error = TopologyError;
    fn try_from(members: Vec<Member>) -> Result<Topology, TopologyError> {
        Topology::new(members)
    }
}

impl From<Topology> for Vec<Member> {
    fn from(t: Topology) -> Vec<Member> {
        t.members
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u32, dc: u32) -> Member {
        Member::new(NodeId(id), DcId(dc))
    }

    #[test]
    fn canonical_order_regardless_of_input_order() {
        let a = Topology::new([m(5, 2), m(1, 1), m(3, 2), m(2, 0)]).unwrap();
        let b = Topology::new([m(2, 0), m(3, 2), m(5, 2), m(1, 1)]).unwrap();
        assert_eq!(a, b);
        let ids: Vec<u32> = a.members().iter().map(|m| m.id.0).collect();
        assert_eq!(ids, [1, 2, 3, 5]);
        let dcs: Vec<u32> = a.dcs().map(|d| d.0).collect();
        assert_eq!(dcs, [0, 1, 2]);
        assert_eq!(a.nodes_in(DcId(2)), &[NodeId(3), NodeId(5)]);
        assert_eq!(a.nodes_in(DcId(9)), &[] as &[NodeId]);
        assert_eq!(a.dc_of(NodeId(5)), Some(DcId(2)));
        assert_eq!(a.dc_of(NodeId(4)), None);
        assert_eq!((a.len(), a.dc_count()), (4, 3));
    }

    #[test]
    fn duplicate_node_rejected() {
        assert_eq!(
            Topology::new([m(1, 0), m(1, 1)]),
            Err(TopologyError::DuplicateNode { node: NodeId(1) })
        );
    }

    #[test]
    fn empty_topology() {
        let t = Topology::default();
        assert!(t.is_empty());
        assert_eq!(t.dc_count(), 0);
        assert_eq!(t, Topology::new([]).unwrap());
    }
}
