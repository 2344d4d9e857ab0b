//! The Redis-protocol (RESP2 and RESP3) front end: any Redis client works unchanged.
//!
//! - [`frame`]: RESP values and a general incremental decoder/encoder (what clients and
//!   tests use);
//! - [`request`]: the server's incremental request parser (multibulk and inline commands),
//!   zero-copy, with Redis's exact protocol errors and limits;
//! - `exec`: connection and server commands, and the data commands over the shared
//!   [`crate::keyspace::Keyspace`] (their semantics are the Redis layer's, `meridian_redis`:
//!   its command table, reply writer and one module per data type), and the standalone EXEC;
//! - `multi`: the MULTI/EXEC/DISCARD/WATCH state machine of a connection;
//! - `cluster_txn`: MULTI/EXEC and WATCH in cluster mode (transactional buckets);
//! - `cluster_group`: MULTI/EXEC and WATCH on timeline buckets;
//! - `txn_view`: the view and limits both cluster transaction paths share;
//! - `connection`: one client: read, parse every complete request, execute (in cluster mode,
//!   a batch's key commands concurrently), write replies once per batch;
//! - [`server`]: [`serve`] accepts clients until shutdown, then drains them.
//! - `info`: the INFO text.
//! - `pubsub`: SUBSCRIBE, PUBLISH, PUBSUB and the rest over the node's [`crate::pubsub::Hub`];
//!   a subscribed connection's messages are written between its commands.
//! - `tracking`: CLIENT TRACKING/CACHING/GETREDIR/TRACKINGINFO, and the keys a tracking
//!   connection's reads add to the node's [`crate::tracking::Tracking`] table.
//! - `sharded`: a standalone node's key commands on the worker-shard executor
//!   (`repart.mode`), replies in request order.
//! - `cluster_cmd`: the Redis Cluster protocol (`CLUSTER SLOTS`/`SHARDS`/`NODES`/..., each
//!   node describing the cluster from its own DC), `READONLY`, `READWRITE`, `ASKING`.
//! - `blob`: large objects on RESP: `BLOB.READ key offset len`, and `GET`/`STRLEN` of a key
//!   holding an object's manifest (its bytes, its size; never the manifest), the other
//!   string commands refusing it; chunked reads deferred to the connection task on a
//!   single node.
//! - `cluster_exec`: key commands in cluster mode, parsed into requests of the dispatch
//!   facade ([`meridian_replication::Dispatch`]) and formatted back (see the README's
//!   cluster-mode semantics).
//!
//! What the front end guarantees: replies come in request order; a protocol error is
//! answered with Redis's message and closes only that connection; over `max_clients`, a new
//! connection gets `-ERR max number of clients reached` and is closed; on shutdown the server
//! stops accepting, lets every connection finish the requests it has read, and returns once
//! all connections are closed.

pub mod acl;
pub(crate) mod acl_cluster;
mod acl_command;
pub(crate) mod blob;
mod cluster_cmd;
mod cluster_db;
mod cluster_exec;
mod cluster_group;
mod cluster_keys;
mod cluster_redirect;
mod cluster_scripts;
mod cluster_strings;
mod cluster_txn;
mod common;
mod txn_view;

mod command_stats;
mod conn_io;
mod connection;
pub mod context;
mod encoding_config;
mod error_stats;
pub(crate) mod exec;
pub mod frame;
mod functions;
mod info;
pub(crate) mod multi;
mod pubsub;
mod scripting;

pub mod request;
pub mod server;
mod sharded;
mod stream;
mod tls_config;
mod tracking;

pub use acl::AclConfig;
pub use cluster_cmd::redis_node_id;
pub use context::RespContext;
pub use frame::{Frame, FrameError};
pub use request::{ProtocolError, RequestParser};
pub use server::serve;

/// Protocol limits of the RESP front end (Redis's defaults unless noted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespLimits {
    /// Most clients connected at once (Redis `maxclients`, 10000).
    pub max_clients: usize,
    /// Largest bulk string in a request (Redis `proto-max-bulk-len`, 512 MiB).
    pub max_bulk_len: usize,
    /// Most arguments in one request (1 Mi; Redis only bounds it by `INT_MAX`).
    pub max_multibulk_len: usize,
    /// Longest inline command, and longest `*`/`$` header line (Redis's 64 KiB).
    pub max_inline_len: usize,
    /// Most bytes buffered for one connection's unfinished request before the connection is
    /// closed (Redis `client-query-buffer-limit`, 1 GiB).
    pub max_query_buffer: usize,
    /// Most memory each Lua interpreter (EVAL's, FUNCTION's) may hold (512 MiB; Redis has no
    /// such limit).
    pub max_script_memory: usize,
}

impl Default for RespLimits {
    fn default() -> Self {
        Self {
            max_clients: 10_000,
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024,
            max_inline_len: 64 * 1024,
            max_query_buffer: 1024 * 1024 * 1024,
            max_script_memory: 512 * 1024 * 1024,
        }
    }
}

/// Configuration of the RESP front end (`Debug` redacts the password).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RespConfig {
    /// Protocol limits.
    pub limits: RespLimits,
    /// The password of the `default` user; `None` disables authentication.
    pub requirepass: Option<String>,
    /// The fsync policy of the durable engine underneath (`storage.fsync` with `engine =
    /// "fjall"`), for CONFIG GET `appendonly`/`appendfsync` and INFO `aof_enabled`; `None`:
    /// the in-memory engine, which writes nothing to disk.
    pub durability: Option<meridian_storage::Durability>,
    /// Cluster mode: what a key command sent to the wrong node gets (`resp.misrouted`).
    pub misrouted: crate::config::Misrouted,
    /// ACL users (`resp.users`, `resp.aclfile`, `resp.acl_pubsub_default`).
    pub acl: acl::AclConfig,
    /// Redis's `protected-mode`: with no password for the `default` user, refuse clients
    /// beyond loopback.
    pub protected_mode: bool,
}

impl std::fmt::Debug for RespConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespConfig")
            .field("limits", &self.limits)
            .field("requirepass", &crate::config::redacted(&self.requirepass))
            .field("durability", &self.durability)
            .field("misrouted", &self.misrouted)
            .field("acl", &self.acl)
            .field("protected_mode", &self.protected_mode)
            .finish()
    }
}

impl From<&crate::config::RespSection> for RespConfig {
    fn from(r: &crate::config::RespSection) -> Self {
        RespConfig {
            limits: RespLimits {
                max_clients: r.max_clients,
                max_bulk_len: r.max_bulk_len,
                max_multibulk_len: r.max_multibulk_len,
                max_inline_len: r.max_inline_len,
                max_script_memory: r.max_script_memory,
                ..RespLimits::default()
            },
            requirepass: r.requirepass.clone(),
            durability: None,
            misrouted: r.misrouted,
            acl: AclConfig {
                users: r.users.clone(),
                aclfile: r.aclfile.clone(),
                all_channels_default: r.acl_pubsub_default
                    == crate::config::PubsubDefault::Allchannels,
            },
            protected_mode: r.protected_mode,
        }
    }
}
