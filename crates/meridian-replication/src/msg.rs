//! The node-to-node wire type, in a module of its own so that the kernel and every protocol
//! import it and it imports none of them (only the protocols' message modules, which are plain
//! data): one [`Msg`] variant per protocol, each wrapping that protocol's
//! own message enum, plus the shared [`Msg::Error`] reply and the kernel's own
//! [`KernelMsg`] (heartbeats and cluster-metadata changes through the claimant).
//!
//! | variant | protocol | module |
//! |---|---|---|
//! | [`Msg::Kernel`] | heartbeats, metadata, claimant changes, drained reports | [`crate::kernel`] |
//! | [`Msg::Eventual`] | quorum GET/PUT, forward, replicate, read repair | [`crate::eventual`] |
//! | [`Msg::Timeline`] | master writes, reads, propagation, catch-up | [`crate::timeline`] |
//! | [`Msg::Handoff`] | ownership handoff after a layout change | [`crate::handoff`] |
//! | [`Msg::Aae`] | anti-entropy tree exchange and sync | [`crate::anti_entropy`] |
//! | [`Msg::Txn`] | transactions | [`crate::txn`] |
//! | [`Msg::Balance`] | one-replica reads, deferred reads, the DC root, extra copies | [`crate::balance`] |
//! | [`Msg::Blob`] | large objects' chunks, cluster-wide key listings | [`crate::blob`] |
//! | [`Msg::Error`] | a refused request (any protocol) | here |
//!
//! Kernel requests and their replies: [`KernelMsg::Change`] is answered by
//! [`KernelMsg::ChangeReply`]; [`KernelMsg::Heartbeat`], [`KernelMsg::Meta`] and
//! [`KernelMsg::Drained`] are one-way.
//!
//! Guarantees: every message a node sends or receives is one [`Msg`]; the kernel's own
//! messages are [`KernelMsg`].
//!
//! Encoding: postcard, so the outer variant costs one byte on the wire and a protocol's enum
//! is stored inline (no box, no extra allocation when decoding).

use crate::anti_entropy::messages::AaeMsg;
use crate::balance::messages::BalanceMsg;
use crate::blob::messages::BlobMsg;
use crate::error::ReplicationError;
use crate::eventual::messages::EventualMsg;
use crate::handoff::messages::HandoffMsg;
use crate::membership::{ClusterMeta, MetaChange};
use crate::timeline::messages::TimelineMsg;
use meridian_core::NodeId;
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

/// A message between nodes: which protocol it belongs to, and that protocol's message. The
/// kernel routes each incoming variant to the protocol that owns it (see [`crate::kernel`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Msg {
    /// The kernel's own messages: heartbeats and cluster metadata.
    Kernel(KernelMsg),
    /// The eventual-consistency protocol.
    Eventual(EventualMsg),
    /// The timeline protocol.
    Timeline(TimelineMsg),
    /// Ownership handoff.
    Handoff(HandoffMsg),
    /// Active anti-entropy.
    Aae(AaeMsg),
    /// Transactions (Clock-SI and the oracle baseline).
    Txn(meridian_txn::TxnMsg),
    /// Read load balancing and extra copies of hot keys.
    Balance(BalanceMsg),
    /// Large objects: chunks and listings.
    Blob(BlobMsg),
    /// A refused request (any protocol's).
    Error(RemoteError),
    /// Pub/sub fan-out (last, so the older variants keep their wire tags).
    PubSub(crate::pubsub::PubSubMsg),
}

/// The kernel's messages: liveness and cluster metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelMsg {
    /// Liveness signal, sent one-way every heartbeat interval to every member.
    Heartbeat {
        /// The sender.
        from: NodeId,
        /// The version of the sender's cluster metadata (a receiver with a newer one sends
        /// it back in a [`KernelMsg::Meta`]).
        version: u64,
        /// Whether the sender refuses writes for `maxmemory` (over its limit under
        /// `noeviction`, or too far over it for eviction to keep up): coordinators refuse
        /// the writes that would store on it with `-OOM` (module [`crate::memory`]).
        memory_full: bool,
    },
    /// A cluster-metadata document: the receiver adopts it if it is newer than its own.
    Meta(Box<ClusterMeta>),
    /// A cluster-metadata change, sent to the claimant, which applies and publishes it.
    Change(MetaChange),
    /// The answer to [`KernelMsg::Change`]: the new document, or why the change was refused.
    ChangeReply(Result<Box<ClusterMeta>, ReplicationError>),
    /// Sent to the claimant: the sender holds nothing it does not own under layout `epoch`.
    Drained {
        /// The sender.
        from: NodeId,
        /// The layout epoch.
        epoch: u64,
    },
    /// Asks for the receiver's clock reading (a truncation's mark goes above every member's).
    ClockRead,
    /// The answer to [`KernelMsg::ClockRead`]: microseconds.
    ClockReading(u64),
    /// A metadata document the sender waits on: the receiver adopts it if newer and answers
    /// [`KernelMsg::Synced`] with the version it then follows.
    Sync(Box<ClusterMeta>),
    /// The answer to [`KernelMsg::Sync`].
    Synced(u64),
}

macro_rules! wrap {
    ($($variant:ident($inner:ty)),*) => {$(
        impl From<$inner> for Msg {
            fn from(m: $inner) -> Msg {
                Msg::$variant(m)
            }
        }
    )*};
}
wrap!(
    Kernel(KernelMsg),
    Eventual(EventualMsg),
    Timeline(TimelineMsg),
    Handoff(HandoffMsg),
    Aae(AaeMsg),
    Txn(meridian_txn::TxnMsg),
    Balance(BalanceMsg),
    Blob(BlobMsg),
    Error(RemoteError)
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anti_entropy::messages::AaeItem;
    use meridian_cluster::{HashReply, HashRequest, SegmentId};
    use meridian_core::PartitionId;

    #[test]
    fn messages_round_trip_through_postcard() {
        let msgs = [
            Msg::Eventual(EventualMsg::Get {
                key: b"b:k".to_vec(),
                hint_for: Some(NodeId(3)),
            }),
            Msg::Eventual(EventualMsg::GetReply {
                object: None,
                load: meridian_cluster::ReplicaLoad {
                    queue: 3,
                    service_us: 12,
                },
            }),
            Msg::Eventual(EventualMsg::Ack { durable: true }),
            Msg::Kernel(KernelMsg::Heartbeat {
                from: NodeId(1),
                version: 4,
                memory_full: true,
            }),
            Msg::Kernel(KernelMsg::Drained {
                from: NodeId(2),
                epoch: 3,
            }),
            Msg::Kernel(KernelMsg::Change(MetaChange::Leave(NodeId(3)))),
            Msg::Kernel(KernelMsg::Change(MetaChange::Truncate {
                buckets: vec!["default".into()],
                mark: 17,
            })),
            Msg::Kernel(KernelMsg::ClockReading(5)),
            Msg::Kernel(KernelMsg::Synced(9)),
            Msg::Eventual(EventualMsg::ForwardReply(Err(ReplicationError::Quorum(
                meridian_cluster::QuorumError::WValUnsatisfied { need: 2, got: 1 },
            )))),
            Msg::Error(RemoteError::Overload),
            Msg::Balance(BalanceMsg::Read {
                id: meridian_balance::ReqId {
                    coord: NodeId(2),
                    seq: 9,
                },
                key: b"b:k".to_vec(),
                kind: crate::balance::messages::ReadKind::Eventual { hint_for: None },
                others: vec![NodeId(3)],
                strategy: meridian_balance::Strategy::Avr,
                extra: false,
            }),
            Msg::Aae(AaeMsg::Hashes {
                partition: PartitionId(3),
                request: HashRequest::Children {
                    level: 1,
                    parents: vec![2, 5],
                },
            }),
            Msg::Aae(AaeMsg::HashReply(HashReply {
                level: 0,
                hashes: vec![u128::MAX, 7],
            })),
            Msg::Aae(AaeMsg::Keys {
                partition: PartitionId(3),
                segments: vec![SegmentId(9)],
            }),
            Msg::Aae(AaeMsg::SyncReply(vec![AaeItem {
                key: b"b:k".to_vec(),
                object: None,
            }])),
        ];
        for m in msgs {
            let bytes = postcard::to_allocvec(&m).unwrap();
            assert_eq!(postcard::from_bytes::<Msg>(&bytes).unwrap(), m);
        }
    }
}
