//! `maxmemory` and `maxmemory-policy`, as in Redis, for a standalone node.
//!
//! The keyspace (`keyspace::Keyspace`) keeps an estimate of the memory its keys use (key +
//! stored value + a fixed per-key overhead, [`KEY_OVERHEAD`]), updated on every write,
//! delete, expiry and eviction; before a command runs, the RESP front end asks it to make
//! room (`Keyspace::make_room`). Over the limit, `noeviction` refuses the
//! commands that may add memory with Redis's [`OOM`] error (reads and deletes still run); the
//! other policies evict keys, chosen like Redis does: the best of a few sampled keys
//! ([`SAMPLES`], Redis's `maxmemory-samples` default), not an exact global order.
//!
//! The wire-free vocabulary (policy enum, size parsing, LFU counter) lives in
//! [`meridian_core::memory`], which cluster nodes (`meridian-replication`) share; it is
//! re-exported here.

pub use meridian_core::memory::*;
