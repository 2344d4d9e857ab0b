//! Read load balancing (spec `load-balancing.md`), as pure state machines: no I/O, no
//! threads, time passed in as microseconds, randomness from seeded RNGs, so the simulator
//! replays every choice.
//!
//! | module | what |
//! |---|---|
//! | [`strategy`] | the strategy names a bucket or a request chooses ([`Strategy`]) |
//! | [`selector`] | one coordinator's view of its peers and the immediate strategies ([`Balancer`]): round robin, least outstanding, power of d, dynamic snitch, C3 with its rate control and backlog |
//! | [`queue`] | the replica-side FIFO read queue with the deferred strategies' entries (Naive, AVR) |
//! | [`service`] | the service-time model a replica's read workers follow (`real`, `fixed`, `exp`) |
//! | [`spacesaving`] | SpaceSaving sketches of the most read keys and their mergeable summaries |
//! | [`repart`] | workload-aware repartitioning: the co-access graph, METIS and FENNEL, relabelling |
//! | [`planner`] | the root's extra-copy decisions: popularity, copies wanted, hysteresis, placement |
//!
//! The replication crate drives these from the node: it calls [`Balancer::order`] before a
//! read that needs one replica, feeds it every reply, serves reads through a [`ReadQueue`],
//! ships [`Summary`]s to its DC's root and runs the root's [`CopyPlanner`].

pub mod planner;
pub mod queue;
pub mod repart;
pub mod selector;
pub mod service;
pub mod spacesaving;
pub mod strategy;

pub use planner::{CopyAction, CopyPlanner, PlannerConfig};
pub use queue::{EntryState, QueueEntry, ReadQueue, ReqId};
pub use selector::{Balancer, BalancerConfig, C3Config, LoadFeedback, PeerView, SnitchConfig};
pub use service::ServiceModel;
pub use spacesaving::{Counter, SpaceSaving, Summary};
pub use strategy::{DeferredClaim, Strategy};

/// Microseconds of a node's clock (or of virtual time in the simulator).
pub type Micros = u64;
