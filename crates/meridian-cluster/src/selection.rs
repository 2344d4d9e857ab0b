//! Replica selection: which replicas of a key a read asks first, and the load each replica
//! reports back so that choice can follow it.
//!
//! A [`ReplicaSelection`] is a value per bucket (and per request, like every quorum
//! parameter): [`ReplicaSelection::order`] reorders a read's preference-list entries, and the
//! read asks them in that order (all of them with `read_fanout = all`, the first R with
//! `quorum`). Every read reply carries the replica's [`ReplicaLoad`] — its inbox backlog and
//! the time it took to serve the read — which the coordinator keeps per peer and hands to
//! `order`. Today the only strategy is `local_first` (the preference list's own order: the
//! coordinator's DC first, ring order inside it); the load-balancing strategies of
//! `shared/specs/load-balancing.md` (least outstanding, dynamic snitch, C3, ...) are new
//! variants of this enum fed by the same loads.
//!
//! Pure and deterministic, like the rest of this crate: `order` reads only its arguments.

use crate::preflist::ApEntry;
use meridian_core::NodeId;
use serde::{Deserialize, Serialize};

/// A replica-selection strategy (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaSelection {
    /// The preference list's order: replicas in the coordinator's DC first, ring order
    /// within each DC (spec `placement-and-quorums.md` §3).
    #[default]
    LocalFirst,
}

/// What a replica reports with a read reply: the load a strategy can choose by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLoad {
    /// Messages waiting in the replica's inbox when it served the read (its queue length).
    pub queue: u32,
    /// How long the replica took to serve the read, in microseconds.
    pub service_us: u32,
}

impl ReplicaSelection {
    /// Reorders `entries` (a read's preference list, local first) into the order the read
    /// asks them; `load` gives the last load each peer reported, if any.
    pub fn order(self, entries: &mut [ApEntry], load: impl Fn(NodeId) -> Option<ReplicaLoad>) {
        match self {
            ReplicaSelection::LocalFirst => {
                // The preference list is already local first.
                let _ = (entries, load);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preflist::Role;
    use meridian_core::DcId;

    #[test]
    fn local_first_keeps_the_preference_lists_order_whatever_the_loads() {
        let e = |n: u32, dc: u32| ApEntry {
            node: NodeId(n),
            dc: DcId(dc),
            role: Role::Primary { slot: n as usize },
        };
        let mut entries = vec![e(2, 0), e(1, 0), e(3, 1)];
        let before = entries.clone();
        ReplicaSelection::LocalFirst.order(&mut entries, |n| {
            Some(ReplicaLoad {
                queue: 100 - n.0,
                service_us: 1,
            })
        });
        assert_eq!(entries, before);
    }

    #[test]
    fn names_are_snake_case_and_unknown_ones_are_refused() {
        let s: ReplicaSelection = serde_json::from_str("\"local_first\"").unwrap();
        assert_eq!(s, ReplicaSelection::LocalFirst);
        assert!(serde_json::from_str::<ReplicaSelection>("\"c3\"").is_err());
    }
}
