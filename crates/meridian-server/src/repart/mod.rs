//! The worker-shard executor and its repartitioning pipelines (spec `repartitioning.md`
//! §1, §4): requests run on P worker shards chosen by a key → shard map, and a co-access
//! graph of recent requests (`meridian_balance::repart`) periodically re-partitions that map
//! so that keys used together run on one shard.
//!
//! | module | what |
//! |---|---|
//! | [`config`] | `repart.*`: the mode (`single`, `round_robin`, `base`, `free`, `non_stop`), shards, window, partitioner, policies |
//! | [`map`] | the dispatcher's key → shard map: an immutable base installed by each swap plus an overlay of keys first seen since |
//! | [`executor`] | the shards (FIFO queues, barriers), the dispatcher, the runtime they run on (pinned threads, or tasks in simulation) |
//! | [`pipeline`] | the tracker and partitioner actors, the non-stop / base / free triggers, the metrics |
//!
//! Guarantees, whatever the mode and however many maps are swapped in:
//! - **per-key order**: requests touching a key execute in dispatch order (a swap pushes a
//!   barrier through every shard, so nothing dispatched under the new map runs before
//!   everything dispatched under the old one has finished);
//! - **quiesced multi-key requests**: a request whose keys live on several shards runs on the
//!   lowest of them once all of them have drained earlier work, while the others wait;
//! - **dispatch never waits for a partitioner** in `non_stop` and `free` mode: the graph is
//!   copied and partitioned by other actors; a swap costs the dispatcher O(keys first seen
//!   since the previous swap), and the old map is freed elsewhere.
//!
//! Shards own execution, not data: the storage engine is shared, so moving a key between
//! shards moves no bytes.

pub mod config;
pub mod executor;
pub mod map;
pub mod pipeline;

pub use config::{
    MAX_TRACKER_LAG, Mode, NewKeys, PartitionerKind, RepartConfig, UnmappedPolicy, Workers,
};
pub use executor::{Batch, Executor, Held, Op, Placed, Route, Runtime, StartError};
pub use map::Key;
pub use pipeline::{RepartSnapshot, RepartStats, STALL_OVER_US};
