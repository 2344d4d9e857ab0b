//! The crate's errors: one enum per concept, and [`enum@Error`] gathering them.
//!
//! Every variant carries the figures a user needs to act (what was needed, what was there).
//! [`QuorumError`]'s `Display` is exactly the spec's snake_case code followed by its figures
//! (`pr_val_unsatisfied need=2 got=1`), so the server edge can forward it verbatim after the
//! RESP prefix (`-UNAVAILABLE`, `-ERR`, ...).

use meridian_core::{NodeId, PartitionId};
use thiserror::Error;

/// A ring size that the spec (§1) does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RingError {
    /// Q must be a power of two in `64..=4096`.
    #[error("invalid ring size q={q}: must be a power of two in 64..=4096")]
    InvalidQ {
        /// The rejected partition count.
        q: u32,
    },
}

/// A membership list that cannot form a [`crate::Topology`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TopologyError {
    /// The same node id appears twice.
    #[error("duplicate node {node} in topology")]
    DuplicateNode {
        /// The repeated id.
        node: NodeId,
    },
}

/// A layout proposal that breaks a placement invariant (spec §2).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// The first `min(D, target_n)` replicas of `partition` are not in distinct DCs.
    #[error("dc_rule_violated partition={partition}")]
    DcRuleViolated {
        /// The offending partition.
        partition: PartitionId,
    },
    /// A node appears twice in one partition's replica list.
    #[error("duplicate_replica partition={partition} node={node}")]
    DuplicateReplica {
        /// The offending partition.
        partition: PartitionId,
        /// The repeated node.
        node: NodeId,
    },
    /// A replica list names a node that is not a member of the layout's topology.
    #[error("unknown_node partition={partition} node={node}")]
    UnknownNode {
        /// The offending partition.
        partition: PartitionId,
        /// The node that is not a member.
        node: NodeId,
    },
    /// A replica list does not have `target_n` entries.
    #[error("wrong_replica_count partition={partition} expected={expected} got={got}")]
    WrongReplicaCount {
        /// The offending partition.
        partition: PartitionId,
        /// `target_n`.
        expected: usize,
        /// The list's length.
        got: usize,
    },
    /// The number of replica lists is not a valid ring size.
    #[error("wrong_partition_count got={got}")]
    WrongPartitionCount {
        /// The number of replica lists.
        got: usize,
    },
    /// `target_n` is zero.
    #[error("invalid_target_n target_n=0")]
    ZeroTargetN,
    /// Fewer members than `target_n`: some list cannot hold distinct nodes.
    #[error("not_enough_nodes have={have} need={need}")]
    NotEnoughNodes {
        /// Members in the topology.
        have: usize,
        /// `target_n`.
        need: usize,
    },
    /// `rebalance` was asked to change the ring size.
    #[error("ring size cannot change in a rebalance")]
    QChanged,
}

/// Why an eventual-consistency request was refused or failed (spec §§4–6, §11).
///
/// `Display` is the spec's code plus figures; [`QuorumError::code`] is the code alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, serde::Serialize, serde::Deserialize)]
pub enum QuorumError {
    /// A parameter is out of range for the bucket's N.
    #[error("n_val_violation n={n}")]
    NValViolation {
        /// The bucket's N.
        n: u32,
    },
    /// Not enough primaries (up, or replying) for PR.
    #[error("pr_val_unsatisfied need={need} got={got}")]
    PrValUnsatisfied {
        /// PR.
        need: u32,
        /// Primaries up (pre-check) or primary oks (reply).
        got: u32,
    },
    /// Not enough primaries (up, or acking durably) for PW.
    #[error("pw_val_unsatisfied need={need} got={got}")]
    PwValUnsatisfied {
        /// PW.
        need: u32,
        /// Primaries up (pre-check) or primary dw-acks (reply).
        got: u32,
    },
    /// The preference list is shorter than the quorum.
    #[error("insufficient_vnodes need={need} got={have}")]
    InsufficientVnodes {
        /// Entries in the preference list.
        have: u32,
        /// R (GET) or max(W, DW) (PUT).
        need: u32,
    },
    /// Not enough distinct physical nodes.
    #[error("node_confirms_val_unsatisfied need={need} got={got}")]
    NodeConfirmsValUnsatisfied {
        /// `node_confirms`.
        need: u32,
        /// Distinct nodes (in the apl, or among w-acks).
        got: u32,
    },
    /// Not enough distinct DCs (Meridian extension).
    #[error("dc_confirms_val_unsatisfied need={need} got={got}")]
    DcConfirmsValUnsatisfied {
        /// `dc_confirms`.
        need: u32,
        /// Distinct DCs (in the apl, or among w-acks).
        got: u32,
    },
    /// Too few ok replies for R.
    #[error("r_val_unsatisfied need={need} got={got}")]
    RValUnsatisfied {
        /// R.
        need: u32,
        /// ok replies.
        got: u32,
    },
    /// Too few acks for W.
    #[error("w_val_unsatisfied need={need} got={got}")]
    WValUnsatisfied {
        /// W.
        need: u32,
        /// w-acks.
        got: u32,
    },
    /// Too few durable acks for DW.
    #[error("dw_val_unsatisfied need={need} got={got}")]
    DwValUnsatisfied {
        /// Effective DW.
        need: u32,
        /// dw-acks.
        got: u32,
    },
    /// A replica shed the request; retry later.
    #[error("overload")]
    Overload,
    /// The request timer expired before enough replies arrived.
    #[error("timeout need={need} ok={ok} nf={nf} fail={fail}")]
    Timeout {
        /// R (GET) or W (PUT).
        need: u32,
        /// ok replies (GET) or w-acks (PUT).
        ok: u32,
        /// notfound replies not counted as ok (GET; 0 for PUT).
        nf: u32,
        /// failed replies.
        fail: u32,
    },
}

impl QuorumError {
    /// The spec's snake_case code, without figures (`"pw_val_unsatisfied"`).
    pub fn code(&self) -> &'static str {
        match self {
            QuorumError::NValViolation { .. } => "n_val_violation",
            QuorumError::PrValUnsatisfied { .. } => "pr_val_unsatisfied",
            QuorumError::PwValUnsatisfied { .. } => "pw_val_unsatisfied",
            QuorumError::InsufficientVnodes { .. } => "insufficient_vnodes",
            QuorumError::NodeConfirmsValUnsatisfied { .. } => "node_confirms_val_unsatisfied",
            QuorumError::DcConfirmsValUnsatisfied { .. } => "dc_confirms_val_unsatisfied",
            QuorumError::RValUnsatisfied { .. } => "r_val_unsatisfied",
            QuorumError::WValUnsatisfied { .. } => "w_val_unsatisfied",
            QuorumError::DwValUnsatisfied { .. } => "dw_val_unsatisfied",
            QuorumError::Overload => "overload",
            QuorumError::Timeout { .. } => "timeout",
        }
    }
}

/// A causal context (client-held opaque bytes) that does not decode, or that claims what
/// its coordinator cannot vouch for (`crate::dvv`, "Client contexts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error, serde::Serialize, serde::Deserialize)]
pub enum ContextError {
    /// The first byte is not a known format version.
    #[error("malformed context: unknown version {0}")]
    UnknownVersion(u8),
    /// The bytes end in the middle of a field.
    #[error("malformed context: truncated")]
    Truncated,
    /// A varint is longer than its type allows.
    #[error("malformed context: varint overflow")]
    VarintOverflow,
    /// Entries are not in strictly increasing replica order (or a counter is zero).
    #[error("malformed context: entries not canonical")]
    NotCanonical,
    /// Bytes remain after the last entry.
    #[error("malformed context: {0} trailing bytes")]
    TrailingBytes(usize),
    /// The context claims a counter for the coordinating replica above any it has issued:
    /// joining it would make the replica's own later writes look already seen.
    #[error("claims counter {claimed} for this coordinator, which has issued at most {issued}")]
    ClaimsUnissued {
        /// The counter the context claims for the coordinator.
        claimed: u64,
        /// The highest counter the coordinator has issued for the key (or forgotten).
        issued: u64,
    },
    /// The coordinator's counter for the key is at `u64::MAX`: no fresh dot is left.
    #[error("leaves no fresh counter for this coordinator (at {at})")]
    CountersExhausted {
        /// The counter reached.
        at: u64,
    },
}

/// Any error of this crate.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// See [`RingError`].
    #[error(transparent)]
    Ring(#[from] RingError),
    /// See [`TopologyError`].
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// See [`LayoutError`].
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// See [`QuorumError`].
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    /// See [`ContextError`].
    #[error(transparent)]
    Context(#[from] ContextError),
    /// See [`crate::merkle::MerkleError`].
    #[error(transparent)]
    Merkle(#[from] crate::merkle::MerkleError),
}
