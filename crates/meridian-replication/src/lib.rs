//! Meridian's replication protocols:
//! - **eventual consistency** with N/R/W quorums, dotted-version-vector causal contexts
//!   (siblings or last-writer-wins), read repair and sloppy quorums with hinted handoff and
//!   Merkle active anti-entropy (spec `placement-and-quorums.md` §§3–10);
//! - **timeline consistency** (spec `timeline.md`, PNUTS): a per-record master, ordered
//!   propagation, read-any / read-critical / read-latest, test-and-set and master migration.
//!
//! One node type, [`Node`] (historically [`EventualNode`]), serves both; a bucket's
//! [`bucket::BucketType`] decides which operations its keys take, and [`Dispatch`] is where
//! client requests meet that decision. Transactional buckets run the `txn` module (Clock-SI or a
//! timestamp oracle), whose protocol core is the `meridian-txn` crate.
//!
//! A node is a **kernel** plus one module per **protocol**; each protocol has its own message
//! enum (one variant of [`Msg`], module [`msg`]) and state, which the kernel holds as a value
//! without naming its type; [`node`] builds the kernel and the protocols and routes incoming
//! messages to them through [`kernel::Protocol`] (see [`kernel`] for how a new protocol plugs
//! in).
//!
//! | module | concept |
//! |---|---|
//! | [`kernel`] | [`Node`] (= [`EventualNode`]): identity, metadata view and claimant, failure detector and heartbeats, transport and the serving task, RNG, clock, counters, the protocols' states as registered values |
//! | [`node`] | the wiring: builds a node's kernel and protocols, routes messages, spawns the tasks |
//! | [`msg`] | the wire type [`Msg`]: one variant per protocol's message enum |
//! | [`eventual`] | protocol: quorum GET/PUT/DELETE coordinators, forwarding, replica side, read repair; [`eventual::types`] |
//! | [`timeline`] | protocol: routing to masters, propagation, catch-up, re-master ([`timeline::protocol`]) over its pure core and record store |
//! | [`handoff`] | protocols: hinted handoff ([`handoff::hinted`]) and ownership handoff after a layout change ([`handoff::ownership`]) |
//! | [`anti_entropy`] | protocol: per-partition Merkle trees over a replica's objects and their exchange (§10) |
//! | [`bucket`] | bucket types and properties (TOML-loadable), the validated registry |
//! | [`dispatch`] | [`Dispatch`], the facade front ends call: reads the bucket type once per request and hands the request to its protocol; bucket-type refusals |
//! | [`object_store`] | one replica's objects and hints over a storage engine |
//! | [`membership`] | the versioned cluster metadata document (layout, members, buckets) and its changes |
//! | [`tokio_clock`] | a `Clock` following tokio's (possibly paused) time |
//! | [`error`] | [`ReplicationError`], the spec's error codes with their figures |
//!
//! The placement, quorum-tally and DVV logic itself is pure and lives in
//! `meridian-cluster`; this crate wires it to storage, the network and time.
//!
//! ```no_run
//! # async fn demo(net: meridian_net::MemNetwork<meridian_replication::Msg>,
//! #               layout: meridian_cluster::Layout,
//! #               members: Vec<meridian_replication::MemberRecord>)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use meridian_replication::{Buckets, ClusterMeta, ClusterShape, EventualNode, NodeConfig};
//! use meridian_replication::{GetOptions, PutOptions, TokioClock};
//! use meridian_core::{NodeId, Timestamp};
//! use std::sync::Arc;
//!
//! let (transport, inbox) = net.join(NodeId(1))?;
//! let buckets = Buckets::new(ClusterShape::of(&layout))?;
//! let node = EventualNode::new(
//!     NodeConfig::new(NodeId(1)),
//!     Arc::new(meridian_storage::MemEngine::new()),
//!     Arc::new(TokioClock::new(Timestamp(0))),
//!     transport,
//!     ClusterMeta::new(layout, members, &buckets)?,
//! );
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! node.spawn(inbox, shutdown.clone());
//! node.put(b"users:42", "alice".into(), None, PutOptions::default()).await?;
//! let got = node.get(b"users:42", GetOptions::default()).await?;
//! node.put(b"users:42", "bob".into(), Some(&got.context()), PutOptions::default()).await?;
//! # Ok(()) }
//! ```

pub mod anti_entropy;
pub mod balance;
pub mod blob;
pub mod bucket;
pub mod bucket_type;
pub mod dispatch;
pub mod error;
pub mod eventual;
pub mod expiry;
pub mod handoff;
pub mod kernel;
pub mod listing;
pub mod membership;
pub mod memory;
pub mod msg;
pub mod node;
pub mod object_store;
pub mod pubsub;
pub mod timeline;
pub mod tokio_clock;
pub mod truncation;
pub mod txn;
pub mod users;

pub use anti_entropy::messages::{AaeItem, AaeMsg};
pub use anti_entropy::{AaeError, AaeTrees};
pub use balance::{BalanceMsg, BalanceStats, ExtraMap};
pub use bucket::{BucketProps, BucketType, Buckets, ClusterShape, DEFAULT_BUCKET_NAME};
pub use dispatch::{
    AtomicGroup, DeleteOpts, Deleted, Dispatch, Need, Plan, Read, ReadOpts, WriteOpts, Written,
};
pub use error::{ErrorClass, Missing, ReplicationError, Result};
pub use eventual::{
    CrdtOp, CrdtReply, ElementOps, EventualMsg, GetOptions, GetResult, HashOps, HashReply,
    PutOptions, PutResult, SequenceOps,
};
pub use handoff::HandoffMsg;
pub use kernel::{
    EventualNode, KernelMsg, Msg, Node, NodeConfig, NodeStats, Protocol, RemoteError,
};
pub use membership::{ClusterMeta, MemberRecord, MetaChange, WireBucket};
pub use meridian_balance::{DeferredClaim, PeerView, ServiceModel, Strategy};
/// A Redis-view value: its data and expiry, as stored in every bucket type.
pub use meridian_core::envelope::Entry;
pub use meridian_txn::{
    Abort as TxnAbort, Controls as TxnControls, DirChange, Entry as TxnEntry, KeyDirectory,
    PlannerConfig, TimestampSource, TsoBatching, TxnError, TxnProps,
};
pub use object_store::{Hint, ObjectStore, is_reserved_key};
pub use timeline::{
    GroupOutcome, ReadMode, TimelineMsg, TimelineStats, TlIssueKind, TlObserver, TlReadResult,
    TlTrace, TlWriteResult,
};
pub use tokio_clock::TokioClock;
pub use txn::{MoveReport, Transaction, TxnMoveStats, TxnOptions, TxnStats};
pub use users::{UserTable, UsersChange};
