//! Anti-entropy's messages ([`crate::Msg::Aae`]), the exchange of spec §10.
//!
//! | request | reply |
//! |---|---|
//! | [`AaeMsg::Hashes`] | [`AaeMsg::HashReply`] or [`crate::Msg::Error`] |
//! | [`AaeMsg::Keys`] | [`AaeMsg::KeysReply`] or [`crate::Msg::Error`] |
//! | [`AaeMsg::Sync`] | [`AaeMsg::SyncReply`] or [`crate::Msg::Error`] |

use meridian_cluster::{HashReply, HashRequest, KeyHashes, Object, SegmentId};
use meridian_core::PartitionId;
use serde::{Deserialize, Serialize};

/// One key of an anti-entropy sync (or an ownership handoff): the sender's object, or `None`
/// if it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AaeItem {
    /// The client key.
    pub key: Vec<u8>,
    /// The sender's object of the key.
    pub object: Option<Object>,
}

/// A message of the anti-entropy exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AaeMsg {
    /// Anti-entropy (§10), exchange step: node hashes of the receiver's tree of
    /// `partition`.
    Hashes {
        /// The partition whose trees are compared.
        partition: PartitionId,
        /// The hashes wanted.
        request: HashRequest,
    },
    /// The answer to [`AaeMsg::Hashes`].
    HashReply(HashReply),
    /// Anti-entropy, last exchange step: the `(key, item hash)` lists of `segments`.
    Keys {
        /// The partition whose trees are compared.
        partition: PartitionId,
        /// The differing segments.
        segments: Vec<SegmentId>,
    },
    /// The answer to [`AaeMsg::Keys`], one list per requested segment, in order.
    KeysReply(Vec<KeyHashes>),
    /// Anti-entropy repair: merge each item's object (a repair path: no limits) and answer
    /// the resulting objects.
    Sync {
        /// The partition of every key.
        partition: PartitionId,
        /// The sender's objects of the differing keys.
        items: Vec<AaeItem>,
    },
    /// The answer to [`AaeMsg::Sync`]: the receiver's objects after merging, same order.
    SyncReply(Vec<AaeItem>),
}
