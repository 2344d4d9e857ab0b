//! Meridian's replication protocols:
//! - **eventual consistency** with N/R/W quorums, dotted-version-vector causal contexts
//!   (siblings or last-writer-wins), read repair and sloppy quorums with hinted handoff and
//!   Merkle active anti-entropy (spec `placement-and-quorums.md` §§3–10);
//! - **timeline consistency** (spec `timeline.md`, PNUTS): a per-record master, ordered
//!   propagation, read-any / read-critical / read-latest, test-and-set and master migration.
//!
//! One node type, [`EventualNode`], serves both; a bucket's [`bucket::BucketType`] decides
//! which operations its keys take, and [`Dispatch`] is where client requests meet that
//! decision. Transactional buckets are not built yet.
//!
//! | module | concept |
//! |---|---|
//! | [`anti_entropy`] | per-partition Merkle trees over a replica's objects (§10) |
//! | [`bucket`] | bucket types and properties (TOML-loadable), the validated registry |
//! | [`dispatch`] | [`Dispatch`], the facade front ends call: reads the bucket type once per request and hands the request to its protocol; bucket-type refusals |
//! | [`object_store`] | one replica's objects and hints over a storage engine |
//! | [`membership`] | the versioned cluster metadata (layout, members, buckets) and its changes |
//! | [`messages`] | the node-to-node wire protocol |
//! | [`node`] | [`EventualNode`]: GET/PUT coordinators, replica side, repair, handoff; timeline routing, propagation, catch-up |
//! | [`timeline`] | timeline's pure core (record, version, merge, master write, migration) and record store |
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
pub mod bucket;
pub mod dispatch;
pub mod error;
pub mod membership;
pub mod messages;
pub mod node;
pub mod object_store;
pub mod timeline;
pub mod tokio_clock;

pub use anti_entropy::{AaeError, AaeTrees};
pub use bucket::{BucketProps, BucketType, Buckets, ClusterShape, DEFAULT_BUCKET_NAME};
pub use dispatch::{DeleteOpts, Deleted, Dispatch, Read, ReadOpts, WriteOpts, Written};
pub use error::{ErrorClass, Missing, ReplicationError, Result};
pub use membership::{ClusterMeta, MemberRecord, MetaChange, WireBucket};
pub use messages::{AaeItem, Msg, RemoteError};
pub use node::{
    EventualNode, GetOptions, GetResult, NodeConfig, NodeStats, PutOptions, PutResult, ReadMode,
    TimelineStats, TlIssueKind, TlObserver, TlReadResult, TlTrace, TlWriteResult,
};
pub use object_store::{Hint, ObjectStore, is_reserved_key};
pub use tokio_clock::TokioClock;
