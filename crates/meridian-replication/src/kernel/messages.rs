//! The node-to-node wire protocol of eventual-consistency buckets.
//!
//! Requests (sent with `Transport::request`) and their replies:
//!
//! | request | reply |
//! |---|---|
//! | [`Msg::Get`] | [`Msg::GetReply`] or [`Msg::Error`] |
//! | [`Msg::Replicate`] | [`Msg::Ack`] or [`Msg::Error`] |
//! | [`Msg::Forward`] | [`Msg::ForwardReply`] |
//! | [`Msg::AaeHashes`] | [`Msg::AaeHashReply`] or [`Msg::Error`] |
//! | [`Msg::AaeKeys`] | [`Msg::AaeKeysReply`] or [`Msg::Error`] |
//! | [`Msg::AaeSync`] | [`Msg::AaeSyncReply`] or [`Msg::Error`] |
//! | [`Msg::Handoff`] | [`Msg::Ack`] or [`Msg::Error`] |
//! | [`Msg::Change`] | [`Msg::ChangeReply`] |
//! | [`Msg::TlWrite`] | [`Msg::TlWriteReply`] or [`Msg::Error`] |
//! | [`Msg::TlForce`] | [`Msg::TlWriteReply`] or [`Msg::Error`] |
//! | [`Msg::TlRead`] | [`Msg::TlReadReply`] or [`Msg::Error`] |
//! | [`Msg::TlReplicate`] | [`Msg::Ack`] or [`Msg::Error`] |
//! | [`Msg::TlSync`] | [`Msg::TlSyncReply`] or [`Msg::Error`] |
//!
//! One-way: [`Msg::Heartbeat`], [`Msg::Repair`], [`Msg::Meta`], [`Msg::Drained`].
//!
//! Messages carry whole [`Object`]s (clock plus siblings): a receiver merges, it never
//! trusts a sender's view of what it already holds. Keys are the client's full key
//! (`bucket:rest`). `hint_for` marks traffic for a *fallback*: the receiver keeps the object
//! in its hint space for that primary instead of its own data.

use crate::error::ReplicationError;
use crate::membership::{ClusterMeta, MetaChange};
use crate::node::{PutOptions, PutResult};
use crate::timeline::{Content as TlContent, Expect, Record, ReplicaRef, Version};
use meridian_cluster::{HashReply, HashRequest, KeyHashes, Object, SegmentId};
use meridian_core::{DcId, NodeId, PartitionId};
use serde::{Deserialize, Serialize};

/// Why a replica refused a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteError {
    /// The replica is shedding load (its inbox is backed up); counts as `overload`.
    Overload,
    /// The replica's storage failed.
    Storage(String),
    /// The request was malformed or unexpected.
    BadRequest(String),
}

/// One key of an anti-entropy sync: the sender's object, or `None` if it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AaeItem {
    /// The client key.
    pub key: Vec<u8>,
    /// The sender's object of the key.
    pub object: Option<Object>,
}

/// A message between nodes. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// Read `key` (from the hint space of `hint_for` when the receiver is a fallback).
    Get {
        /// The client key.
        key: Vec<u8>,
        /// The primary the receiver stands in for, if it is a fallback.
        hint_for: Option<NodeId>,
    },
    /// The answer to [`Msg::Get`]: the stored object, or `None` (notfound).
    GetReply(Option<Object>),
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
    },
    /// The answer to [`Msg::Replicate`]: applied, and durable if `durable`.
    Ack {
        /// Whether the write is durable under the receiver's engine policy.
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
    /// Liveness signal, sent one-way every heartbeat interval to every member.
    Heartbeat {
        /// The sender.
        from: NodeId,
        /// The version of the sender's cluster metadata (a receiver with a newer one sends
        /// it back in a [`Msg::Meta`]).
        version: u64,
    },
    /// A cluster-metadata document: the receiver adopts it if it is newer than its own.
    Meta(Box<ClusterMeta>),
    /// A cluster-metadata change, sent to the claimant, which applies and publishes it.
    Change(MetaChange),
    /// The answer to [`Msg::Change`]: the new document, or why the change was refused.
    ChangeReply(Result<Box<ClusterMeta>, ReplicationError>),
    /// Ownership handoff: merge these objects (keys the sender no longer owns; a repair
    /// path, no limits) and acknowledge.
    Handoff {
        /// The objects, each `Some`.
        items: Vec<AaeItem>,
    },
    /// Sent to the claimant: the sender holds nothing it does not own under layout `epoch`.
    Drained {
        /// The sender.
        from: NodeId,
        /// The layout epoch.
        epoch: u64,
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
    /// The answer to [`Msg::Forward`]: the remote coordinator's result.
    ForwardReply(Result<PutResult, ReplicationError>),
    /// Anti-entropy (§10), exchange step: node hashes of the receiver's tree of
    /// `partition`.
    AaeHashes {
        /// The partition whose trees are compared.
        partition: PartitionId,
        /// The hashes wanted.
        request: HashRequest,
    },
    /// The answer to [`Msg::AaeHashes`].
    AaeHashReply(HashReply),
    /// Anti-entropy, last exchange step: the `(key, item hash)` lists of `segments`.
    AaeKeys {
        /// The partition whose trees are compared.
        partition: PartitionId,
        /// The differing segments.
        segments: Vec<SegmentId>,
    },
    /// The answer to [`Msg::AaeKeys`], one list per requested segment, in order.
    AaeKeysReply(Vec<KeyHashes>),
    /// Anti-entropy repair: merge each item's object (a repair path: no limits) and answer
    /// the resulting objects.
    AaeSync {
        /// The partition of every key.
        partition: PartitionId,
        /// The sender's objects of the differing keys.
        items: Vec<AaeItem>,
    },
    /// The answer to [`Msg::AaeSync`]: the receiver's objects after merging, same order.
    AaeSyncReply(Vec<AaeItem>),
    /// Timeline (§3, §5): a client write for the record's master, or for the partition's
    /// insert arbiter when the coordinator found no record.
    TlWrite {
        /// The write's id: a duplicated request is answered with the first one's result.
        id: crate::node::WriteId,
        /// The client key.
        key: Vec<u8>,
        /// The value, or a tombstone for a delete.
        content: TlContent,
        /// The precondition (test-and-set, insert-if-absent).
        expect: Expect,
        /// The DC of the coordinator that took the client's request.
        origin_dc: DcId,
        /// 0 from the coordinator; 1 once forwarded (it is never forwarded again).
        hops: u8,
        /// The version that names the receiver master, which it should wait for.
        await_ver: Option<Version>,
    },
    /// The answer to [`Msg::TlWrite`] and [`Msg::TlForce`]: the record issued and the
    /// replica that issued it, or why not (`not_master` with a hint, `version_mismatch`, ...).
    TlWriteReply(Result<(Record, ReplicaRef), ReplicationError>),
    /// Timeline: the receiver's record of `key`; with `latest`, only if the receiver is its
    /// master (or, for an absent record, the insert arbiter), else `not_master`.
    TlRead {
        /// The client key.
        key: Vec<u8>,
        /// Serve only as master (`read_latest`).
        latest: bool,
        /// The version that names the receiver master, which it should wait for.
        await_ver: Option<Version>,
    },
    /// The answer to [`Msg::TlRead`].
    TlReadReply(Result<Option<Record>, ReplicationError>),
    /// Timeline propagation (§4): apply each record that is newer than the local one, then
    /// acknowledge.
    TlReplicate {
        /// `(key, record)`, at most one per key, in key order.
        records: Vec<(Vec<u8>, Record)>,
    },
    /// Timeline catch-up (§8): the sender's versions of its records in `(after, upto]` that
    /// the receiver also replicates; the receiver answers what either side lacks.
    TlSync {
        /// `(key, version)` of the sender's records in the range.
        items: Vec<(Vec<u8>, Version)>,
        /// The range's exclusive start (`None`: the first key).
        after: Option<Vec<u8>>,
        /// The range's inclusive end (`None`: the last key).
        upto: Option<Vec<u8>>,
    },
    /// The answer to [`Msg::TlSync`].
    TlSyncReply {
        /// The receiver's records newer than the sender's, or that the sender lacks.
        newer: Vec<(Vec<u8>, Record)>,
        /// Keys whose sender record is newer, or that the receiver lacks.
        want: Vec<Vec<u8>>,
        /// False when the reply was capped before the end of the range: the sender's pass
        /// is then not complete.
        complete: bool,
    },
    /// Timeline forced re-master (§7): the receiver takes mastership of `key` in a new master
    /// epoch.
    TlForce {
        /// The client key.
        key: Vec<u8>,
    },
    /// A refused request.
    Error(RemoteError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_postcard() {
        let msgs = [
            Msg::Get {
                key: b"b:k".to_vec(),
                hint_for: Some(NodeId(3)),
            },
            Msg::GetReply(None),
            Msg::Ack { durable: true },
            Msg::Heartbeat {
                from: NodeId(1),
                version: 4,
            },
            Msg::Drained {
                from: NodeId(2),
                epoch: 3,
            },
            Msg::Change(MetaChange::Leave(NodeId(3))),
            Msg::ForwardReply(Err(ReplicationError::Quorum(
                meridian_cluster::QuorumError::WValUnsatisfied { need: 2, got: 1 },
            ))),
            Msg::Error(RemoteError::Overload),
            Msg::AaeHashes {
                partition: PartitionId(3),
                request: HashRequest::Children {
                    level: 1,
                    parents: vec![2, 5],
                },
            },
            Msg::AaeHashReply(HashReply {
                level: 0,
                hashes: vec![u128::MAX, 7],
            }),
            Msg::AaeKeys {
                partition: PartitionId(3),
                segments: vec![SegmentId(9)],
            },
            Msg::AaeSyncReply(vec![AaeItem {
                key: b"b:k".to_vec(),
                object: None,
            }]),
        ];
        for m in msgs {
            let bytes = postcard::to_allocvec(&m).unwrap();
            assert_eq!(postcard::from_bytes::<Msg>(&bytes).unwrap(), m);
        }
    }
}
