//! Identifiers of the things a cluster is made of. Each is a distinct type so a node id can
//! never be passed where a partition id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A node (one store process, or one node of an embedded cluster).
    NodeId,
    "n"
);
id_type!(
    /// A data center: the unit of WAN distance and of replica placement.
    DcId,
    "dc"
);
id_type!(
    /// One of the Q partitions of the key ring.
    PartitionId,
    "p"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_display_with_their_kind() {
        assert_eq!(NodeId(3).to_string(), "n3");
        assert_eq!(DcId(1).to_string(), "dc1");
        assert_eq!(PartitionId(63).to_string(), "p63");
    }
}
