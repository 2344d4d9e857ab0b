//! The Meridian node: a storage engine served over the Redis protocol (RESP) and HTTP.
//!
//! Library first: [`node::run`] takes its listeners and a shutdown token, so tests run whole
//! nodes on port 0 and the `meridian` binary stays a few lines.

pub mod auth;
pub mod blob_config;
pub mod blob_handles;
mod body;
pub mod cluster;
pub mod cluster_backend;
pub mod config;
pub mod error;
pub mod fd_limit;
pub mod http;
mod http_acl;
mod http_balance;
mod http_blob;
mod http_cluster;
mod http_common;
mod http_txn;
pub mod identity;
pub mod keyspace;
pub mod keyspace_events;
pub mod memory;
pub mod metrics;
pub mod node;
pub mod objects;
mod percent;
pub mod pubsub;
pub mod repart;
pub mod resp;
pub mod s3;
pub mod scan_cursors;
pub mod scripting;
pub mod state;
pub mod tracking;
pub mod wire_error;

pub use config::{EngineKind, NodeConfig};
pub use error::{Error, Result};
pub use node::{Listeners, NodeState, run};
