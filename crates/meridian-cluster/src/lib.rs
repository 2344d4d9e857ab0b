//! Meridian's cluster logic, as pure functions: the key ring, DC-aware layouts, preference
//! lists, quorum rules and causal contexts (spec `placement-and-quorums.md`).
//!
//! Nothing here does I/O, reads a clock or draws random numbers, and no result depends on
//! hash-map iteration order: every function is deterministic, so the simulator can replay it
//! and every node computes the same placement from the same inputs.
//!
//! | module | concept |
//! |---|---|
//! | [`ring`] | Redis Cluster hash slots (CRC16, hash tags), Q partitions as slot ranges, `bucket:key` splitting |
//! | [`topology`] | members and their DCs, canonically ordered |
//! | [`layout`] | DC-rule claim, rebalance, validation, handoff diff |
//! | [`mod@preflist`] | primaries and fallbacks for one request, local DC first |
//! | [`quorum`] | parameters, pre-checks, GET/PUT reply tallies |
//! | [`selection`] | replica selection per bucket, and the load replicas report with reads |
//! | [`dvv`] | dotted version vector sets: writes, merges, opaque contexts |
//! | [`failure`] | phi-accrual failure detection from heartbeat arrival times |
//! | [`merkle`] | anti-entropy Merkle trees: incremental segment hashes, diff and exchange |
//! | [`error`] | the crate's error enums |

pub mod dvv;
pub mod error;
pub mod failure;
pub mod layout;
pub mod merkle;
pub mod preflist;
pub mod quorum;
pub mod ring;
pub mod selection;
pub mod topology;

pub use dvv::{
    Clock, Content, Dot, Meta, Object, ReplicaId, Sibling, coordinator_put, descends, dominated,
    lww, merge, merge_with,
};
pub use error::{ContextError, Error, LayoutError, QuorumError, RingError, TopologyError};
pub use failure::{DetectorConfig, FailureDetector};
pub use layout::{Layout, LayoutParts, Transfer, claim, diff, rebalance, validate};
pub use merkle::{
    Exchange, HashReply, HashRequest, KeyHash, KeyHashes, MerkleConfig, MerkleError, MerkleTree,
    SegmentId, diff_keys, diff_segments, item_hash,
};
pub use preflist::{ApEntry, Preflist, Role, preflist};
pub use quorum::{
    AplSummary, DeleteMode, FailKind, GetParams, GetReply, GetTally, Params, Props, PutParams,
    PutTally, Quorum, ReadFanout, precheck_get, precheck_put,
};
pub use ring::{
    DEFAULT_BUCKET, Ring, SLOTS, bucket_and_key, crc16_xmodem, hash_tag, key_hash, slot_of,
};
pub use selection::{ReplicaLoad, ReplicaSelection};
pub use topology::{Member, Topology};
