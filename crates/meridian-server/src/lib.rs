//! The Meridian node: a storage engine served over the Redis protocol (RESP) and HTTP.
//!
//! Library first: [`node::Node`] takes its listeners and a shutdown token, so tests run whole
//! nodes on port 0 and the `meridian` binary stays a few lines.

pub mod metrics;
