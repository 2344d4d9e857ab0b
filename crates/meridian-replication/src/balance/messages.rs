//! The read load-balancing protocol's messages ([`crate::balance`]).
//!
//! | message | from → to | answer |
//! |---|---|---|
//! | [`BalanceMsg::Read`] | coordinator → replica or extra-copy holder | [`BalanceMsg::ReadReply`] |
//! | [`BalanceMsg::Cancel`] | replica → the other candidates of a deferred read | one-way |
//! | [`BalanceMsg::Claim`] | replica about to serve a deferred read → its coordinator (`deferred_claim = token`) | [`BalanceMsg::Claimed`] |
//! | [`BalanceMsg::Load`] | every node → its DC's root, every `balance_tick` (with the copies it holds: a new root re-makes them) | [`BalanceMsg::LoadReply`] |
//! | [`BalanceMsg::Sketch`] | coordinator → root, every `hot_period` | one-way |
//! | [`BalanceMsg::GetMap`] | node → root (its epoch is stale) | [`BalanceMsg::Map`] |
//! | [`BalanceMsg::Announce`] | root → the key's home replicas, before a copy is made | [`BalanceMsg::Done`] |
//! | [`BalanceMsg::MakeCopy`] | root → a home replica | [`BalanceMsg::Done`] |
//! | [`BalanceMsg::StoreCopy`] | home replica → the copy's holder | [`BalanceMsg::Done`] |
//! | [`BalanceMsg::Invalidate`] | home replica applying a write → root | [`BalanceMsg::Done`] |
//! | [`BalanceMsg::DropCopy`] | root (or a replica whose root is silent) → holders | [`BalanceMsg::Done`] |

use crate::timeline::Record;
use meridian_balance::{LoadFeedback, ReqId, Strategy, Summary};
use meridian_cluster::dvv::Object;
use meridian_core::NodeId;
use serde::{Deserialize, Serialize};

/// Which store a read is served from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadKind {
    /// An eventual bucket's object (from the hint space of `hint_for` on a fallback).
    Eventual {
        /// The primary a fallback holds the key for.
        hint_for: Option<NodeId>,
    },
    /// A timeline bucket's record.
    Timeline,
}

/// What one replica answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadAnswer {
    /// An eventual object (or notfound).
    Object(Option<Object>),
    /// A timeline record (or none).
    Record(Option<Record>),
    /// The extra copy asked for is not (or no longer) here: ask a home replica.
    Miss,
    /// The deferred read was served by another candidate.
    Cancelled,
    /// The replica could not read (storage error).
    Failed(String),
}

/// A copy's content as it travels and is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CopyPayload {
    /// An eventual object.
    Object(Object),
    /// A timeline record.
    Record(Record),
}

/// The extra-copy map of a DC, as its root publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraMap {
    /// The root that issued it.
    pub root: NodeId,
    /// Bumped at every change by that root.
    pub epoch: u64,
    /// Keys with extra copies, and their holders.
    pub copies: Vec<(Vec<u8>, Vec<NodeId>)>,
}

/// The balance protocol's messages. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BalanceMsg {
    /// Serve one read of `key`.
    Read {
        /// The read's id (deferred reads are cancelled by it).
        id: ReqId,
        /// The key.
        key: Vec<u8>,
        /// Its store.
        kind: ReadKind,
        /// The other candidates of a deferred read (empty for an immediate one).
        others: Vec<NodeId>,
        /// The strategy that sent it (deferred ones enqueue it as pending).
        strategy: Strategy,
        /// Whether the read asks for an extra copy (not the home replica's own data).
        extra: bool,
    },
    /// The answer to [`BalanceMsg::Read`], with the replica's load.
    ReadReply {
        /// The read's result.
        answer: ReadAnswer,
        /// The replica's load feedback.
        load: LoadFeedback,
    },
    /// A deferred read is being served elsewhere: drop it if not started.
    Cancel {
        /// The read.
        id: ReqId,
    },
    /// May this replica serve deferred read `id`? (Asked of its coordinator.)
    Claim {
        /// The read.
        id: ReqId,
    },
    /// The coordinator's answer: only the first claim of a read is granted.
    Claimed {
        /// Whether the asking replica serves the read.
        granted: bool,
    },
    /// A node's load report to its DC's root.
    Load {
        /// Reads queued or in service (AVR's load).
        load: u64,
        /// The keys this node holds extra copies of (a new root adopts them).
        copies: Vec<Vec<u8>>,
    },
    /// The root's answer: the DC's average load and its map's epoch.
    LoadReply {
        /// Average load of the DC's live nodes, in thousandths.
        avg_milli: u64,
        /// The root.
        root: NodeId,
        /// Its map's epoch.
        epoch: u64,
        /// Whether the root took over less than two periods ago (it may not know every
        /// copy yet, so every write must invalidate through it).
        warming: bool,
    },
    /// A coordinator's SpaceSaving summary for the last period.
    Sketch(Summary),
    /// Asks the root for its extra-copy map.
    GetMap,
    /// The root's extra-copy map.
    Map(ExtraMap),
    /// The key will get extra copies: its writes must invalidate them from now on.
    Announce {
        /// The key.
        key: Vec<u8>,
    },
    /// Make an extra copy of `key` on `to` (sent to a home replica).
    MakeCopy {
        /// The key.
        key: Vec<u8>,
        /// The holder.
        to: NodeId,
        /// The key's invalidation generation at the root when it decided.
        generation: u64,
    },
    /// Keep this copy (sent to the holder).
    StoreCopy {
        /// The key.
        key: Vec<u8>,
        /// The generation it was made under (older than a drop's: refused).
        generation: u64,
        /// The root it was made for (the one that renews its lease).
        root: NodeId,
        /// The copy.
        payload: CopyPayload,
        /// xxh3-64 of the payload's encoding, checked before it is kept.
        digest: u64,
    },
    /// A home replica is applying a write of `key`: drop its copies before it acknowledges.
    Invalidate {
        /// The key.
        key: Vec<u8>,
    },
    /// Drop the copy of `key` and refuse copies of generations below `generation`.
    DropCopy {
        /// The key.
        key: Vec<u8>,
        /// The generation from which copies are valid again.
        generation: u64,
    },
    /// Success, or why not.
    Done(Result<(), String>),
}
