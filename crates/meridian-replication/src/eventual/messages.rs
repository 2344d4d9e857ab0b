//! The eventual protocol's messages ([`crate::Msg::Eventual`]).
//!
//! | request | reply |
//! |---|---|
//! | [`EventualMsg::Get`] | [`EventualMsg::GetReply`] or [`crate::Msg::Error`] |
//! | [`EventualMsg::Replicate`] | [`EventualMsg::Ack`] or [`crate::Msg::Error`] |
//! | [`EventualMsg::Forward`] | [`EventualMsg::ForwardReply`] |
//!
//! | [`EventualMsg::Bury`] | [`EventualMsg::Buried`] or [`crate::Msg::Error`] |
//!
//! One-way: [`EventualMsg::Repair`], [`EventualMsg::Reap`], and a [`EventualMsg::Replicate`]
//! whose reply cannot change the coordinator's answer any more.
//!
//! Messages carry whole [`Object`]s (clock plus siblings): a receiver merges, it never
//! trusts a sender's view of what it already holds. Keys are the client's full key
//! (`bucket:rest`). `hint_for` marks traffic for a *fallback*: the receiver keeps the object
//! in its hint space for that primary instead of its own data.

use super::types::{PutOptions, PutResult};
use crate::error::ReplicationError;
use meridian_cluster::{Object, ReplicaLoad};
use meridian_core::NodeId;
use serde::{Deserialize, Serialize};

/// A message of the eventual protocol. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventualMsg {
    /// Read `key` (from the hint space of `hint_for` when the receiver is a fallback).
    Get {
        /// The client key.
        key: Vec<u8>,
        /// The primary the receiver stands in for, if it is a fallback.
        hint_for: Option<NodeId>,
    },
    /// The answer to [`EventualMsg::Get`]: the stored object, or `None` (notfound), with the
    /// replica's load when it served the read (replica selection's feedback).
    GetReply {
        /// The stored object.
        object: Option<Object>,
        /// The replica's queue length and service time for this read.
        load: ReplicaLoad,
    },
    /// Merge `object` into `key` (a PUT's fan-out, or a hand-off) and acknowledge.
    Replicate {
        /// The client key.
        key: Vec<u8>,
        /// The coordinator's object after its write.
        object: Object,
        /// The primary the receiver stands in for, if it is a fallback (store as a hint).
        hint_for: Option<NodeId>,
        /// Whether the bucket keeps siblings (false: resolve LWW after merging).
        allow_mult: bool,
        /// Whether the coordinator counts this replica's durable (`dw`) ack: the receiver
        /// then acknowledges only once the write is on disk (syncing it if its engine's
        /// policy would leave it in the OS's buffers).
        want_durable: bool,
    },
    /// The answer to [`EventualMsg::Replicate`]: applied, and on disk if `durable`.
    Ack {
        /// Whether the write is on the receiver's disk (always, for an engine without one:
        /// `dw = w`).
        durable: bool,
    },
    /// Read repair (§8): merge `object` into `key`, no reply, no limits.
    Repair {
        /// The client key.
        key: Vec<u8>,
        /// The merged object of the GET.
        object: Object,
        /// The primary the receiver stands in for, if it is a fallback.
        hint_for: Option<NodeId>,
        /// Whether the bucket keeps siblings.
        allow_mult: bool,
    },
    /// Tombstone reaping, first step: merge `object` (the tombstone every primary holds)
    /// into every hint of `key` and into the receiver's own copy, where it holds one (it
    /// creates none), so no older copy it holds can bring the key back once the primaries
    /// forget it; answered by [`EventualMsg::Buried`] once done.
    Bury {
        /// The client key.
        key: Vec<u8>,
        /// The tombstone-only object every primary held.
        object: Object,
    },
    /// The answer to [`EventualMsg::Bury`].
    Buried,
    /// Tombstone reaping, second step (`delete_mode`): forget `key` if its object still
    /// equals `object`, the tombstone a GET found on every primary. No reply.
    Reap {
        /// The client key.
        key: Vec<u8>,
        /// The tombstone-only object every primary held.
        object: Object,
    },
    /// A client write forwarded to a coordinator that holds a replica (§6.1).
    Forward {
        /// The client key.
        key: Vec<u8>,
        /// The value, or `None` for a delete.
        value: Option<Vec<u8>>,
        /// The client's opaque context (empty for a blind write).
        context: Vec<u8>,
        /// The request's overrides; its timeout is the remote coordinator's budget.
        opts: PutOptions,
    },
    /// The answer to [`EventualMsg::Forward`]: the remote coordinator's result.
    ForwardReply(Result<PutResult, ReplicationError>),
}
