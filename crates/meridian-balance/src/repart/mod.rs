//! Workload-aware repartitioning (spec `repartitioning.md` §2–§3), without I/O or threads:
//! the co-access graph over a sliding window of requests, its CSR snapshot, the
//! partitioners (METIS, FENNEL) and the relabelling of a new partition onto the current
//! shards. The worker-shard executor that acts on them lives in `meridian-server::repart`;
//! the cross-node planner in the replication crate.
//!
//! | module | what |
//! |---|---|
//! | [`graph`] | [`CoAccessGraph`]: vertex weight = accesses, edge weight = requests touching both keys, over the last W requests; [`Csr`] snapshots |
//! | [`partition`] | the [`Partitioner`] trait, [`Fennel`], [`Metis`] (feature `metis`), [`relabel`] |

pub mod graph;
pub mod partition;

pub use graph::{CoAccessGraph, Csr, IdHasher};
#[cfg(feature = "metis")]
pub use partition::Metis;
pub use partition::{
    Fennel, GraphRef, Partitioner, by_name, edge_cut, graph_ref, imbalance, moved, relabel,
};

/// A worker shard (or, across nodes, a partition) a key is assigned to.
pub type ShardId = u32;

/// The build hasher of every map keyed by client keys here and in the executor: foldhash,
/// seeded at random per process, because these maps are hashed on every dispatched request
/// and SipHash was a tenth of a profile of the dispatch path.
pub type KeyHasher = foldhash::quality::RandomState;

/// Why a repartitioning step failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RepartError {
    /// The graph does not fit the partitioner's 32-bit indices.
    #[error(
        "graph too large for the partitioner: {vertices} vertices, {edges} directed edges (limit {limit})"
    )]
    GraphTooLarge {
        /// Vertices in the graph.
        vertices: usize,
        /// Directed edges (`adjncy` entries) in the graph.
        edges: usize,
        /// The largest count the partitioner accepts for either.
        limit: usize,
    },
    /// Asked for zero parts.
    #[error("cannot partition into 0 parts")]
    NoParts,
    /// METIS returned an error code.
    #[error("METIS failed: {0}")]
    Metis(String),
    /// The graph is not a well-formed CSR (lengths, offsets, neighbour indices or negative
    /// weights), or a partitioner's parameters are out of range.
    #[error("invalid partitioner input: {0}")]
    InvalidInput(String),
}
