//! The timeline protocol's messages ([`crate::Msg::Timeline`]).
//!
//! | request | reply |
//! |---|---|
//! | [`TimelineMsg::Write`] | [`TimelineMsg::WriteReply`] or [`crate::Msg::Error`] |
//! | [`TimelineMsg::Force`] | [`TimelineMsg::WriteReply`] or [`crate::Msg::Error`] |
//! | [`TimelineMsg::Read`] | [`TimelineMsg::ReadReply`] or [`crate::Msg::Error`] |
//! | [`TimelineMsg::Replicate`] | [`TimelineMsg::Ack`] or [`crate::Msg::Error`] |
//! | [`TimelineMsg::Sync`] | [`TimelineMsg::SyncReply`] or [`crate::Msg::Error`] |
//! | [`TimelineMsg::Group`] | [`TimelineMsg::GroupReply`] or [`crate::Msg::Error`] |
//! | [`TimelineMsg::TakeOver`] | [`TimelineMsg::WriteReply`] or [`crate::Msg::Error`] |
//!
//! One-way: [`TimelineMsg::Reap`].

use super::{Content as TlContent, Expect, Record, ReplicaRef, Version};
use crate::error::ReplicationError;
use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};

/// A message of the timeline protocol. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimelineMsg {
    /// Timeline (§3, §5): a client write for the record's master, or for the partition's
    /// insert arbiter when the coordinator found no record.
    Write {
        /// The write's id: a duplicated request is answered with the first one's result.
        id: WriteId,
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
    /// The answer to [`TimelineMsg::Write`] and [`TimelineMsg::Force`]: the record issued and the
    /// replica that issued it, or why not (`not_master` with a hint, `version_mismatch`, ...).
    WriteReply(Result<(Record, ReplicaRef), ReplicationError>),
    /// Timeline: the receiver's record of `key`; with `latest`, only if the receiver is its
    /// master (or, for an absent record, the insert arbiter), else `not_master`.
    Read {
        /// The client key.
        key: Vec<u8>,
        /// Serve only as master (`read_latest`).
        latest: bool,
        /// The version that names the receiver master, which it should wait for.
        await_ver: Option<Version>,
    },
    /// The answer to [`TimelineMsg::Read`].
    ReadReply(Result<Option<Record>, ReplicationError>),
    /// Timeline propagation (§4): apply each record that is newer than the local one, then
    /// acknowledge.
    Replicate {
        /// `(key, record)`, at most one per key, in key order.
        records: Vec<(Vec<u8>, Record)>,
    },
    /// Timeline catch-up (§8): the sender's versions of its records in `(after, upto]` that
    /// the receiver also replicates; the receiver answers what either side lacks.
    Sync {
        /// `(key, version)` of the sender's records in the range.
        items: Vec<(Vec<u8>, Version)>,
        /// The range's exclusive start (`None`: the first key).
        after: Option<Vec<u8>>,
        /// The range's inclusive end (`None`: the last key).
        upto: Option<Vec<u8>>,
    },
    /// The answer to [`TimelineMsg::Sync`].
    SyncReply {
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
    Force {
        /// The client key.
        key: Vec<u8>,
    },
    /// An atomic group (MULTI/EXEC, WATCH) for the master of every record in it: check every
    /// item's precondition and write every item's content, all or nothing, under all the
    /// records' locks. The receiver must master every record (or arbitrate an absent one).
    Group {
        /// The items, at most one per key, every key in one partition.
        items: Vec<GroupItem>,
        /// The DC of the coordinator that took the client's request.
        origin_dc: DcId,
        /// Hand the mastership of every written record to the first up replica of this DC
        /// (how a coordinator gathers a group's records at one master).
        move_to: Option<DcId>,
    },
    /// The answer to [`TimelineMsg::Group`]: for each item, the record issued (`None` for a
    /// check-only item), or why nothing was applied.
    GroupReply(Result<Vec<Option<Record>>, ReplicationError>),
    /// Automatic failover (buckets with `failover`): the receiver, the successor of the
    /// record's master `from` that the sender's detector marks down, takes the record over
    /// in a new master epoch, unless its master is no longer `from`. Answered with
    /// [`TimelineMsg::WriteReply`].
    TakeOver {
        /// The client key.
        key: Vec<u8>,
        /// The master the sender found down.
        from: NodeId,
    },
    /// The answer to [`TimelineMsg::Replicate`]: applied.
    Ack,
    /// Tombstone GC (§5): the record's master found tombstone `ver` on every primary, past
    /// `tombstone_grace`; forget `key` if its record is still exactly that tombstone. No
    /// reply.
    Reap {
        /// The client key.
        key: Vec<u8>,
        /// The tombstone's version.
        ver: Version,
    },
}

/// The id of one client write: the coordinator, its incarnation and a counter. Every
/// forward and retry of the write carries it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct WriteId {
    /// The coordinator.
    pub node: NodeId,
    /// Its incarnation.
    pub incarnation: u32,
    /// Its counter.
    pub seq: u64,
}

/// One item of a [`TimelineMsg::Group`]: a precondition on a record and, unless the item only
/// checks it (a watched or read key), its new content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupItem {
    /// The client key.
    pub key: Vec<u8>,
    /// What the record must be for the group to apply.
    pub expect: Expect,
    /// The new value or a tombstone; `None`: check only.
    pub content: Option<TlContent>,
}
