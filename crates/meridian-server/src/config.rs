//! A node's configuration: read from TOML, overridden by command-line flags, validated once.
//!
//! Unknown keys are errors (a typo must not silently fall back to a default), and every
//! validation error names the setting and what is accepted.

use crate::error::{Error, Result};
use meridian_core::{DcId, NodeId};
use meridian_net::wan::WanConfig;
use meridian_replication::BucketProps;
pub use meridian_replication::ServiceModel;
use meridian_storage::Durability;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// What a cluster node does with a key command sent to a node that is not its slot's master
/// (`resp.misrouted`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Misrouted {
    /// Redis Cluster's answer, `-MOVED <slot> <host>:<port>`, naming the slot's master in the
    /// node's DC's view (`CLUSTER SLOTS`), so cluster clients (which follow it) learn where a
    /// range went after a failover or a return.
    #[default]
    Moved,
    /// Coordinate it here (any node serves any key), for clients that are not cluster-aware
    /// and send every key to one node.
    Serve,
}

impl FromStr for Misrouted {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "moved" => Ok(Misrouted::Moved),
            "serve" => Ok(Misrouted::Serve),
            other => Err(format!("unknown mode '{other}': expected moved or serve")),
        }
    }
}

/// Which storage engine a node runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// In memory: fast, nothing survives a restart.
    #[default]
    Mem,
    /// Durable, on the fjall LSM tree in `data_dir`.
    Fjall,
}

impl FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "mem" | "memory" => Ok(EngineKind::Mem),
            "fjall" => Ok(EngineKind::Fjall),
            other => Err(format!("unknown engine '{other}': expected mem or fjall")),
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Mem => "mem",
            EngineKind::Fjall => "fjall",
        })
    }
}

/// Everything a node needs to start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// The Redis-protocol front end.
    pub resp: RespSection,
    /// The HTTP front end.
    pub http: HttpSection,
    /// The storage engine.
    pub storage: StorageSection,
    /// Cluster mode over TCP: this node's identity, its peers, the ring. Absent: a single
    /// node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterSection>,
    /// `[buckets.NAME]`: bucket properties of a cluster node (the `default` bucket's
    /// `n_val` defaults to `cluster.n`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub buckets: BTreeMap<String, BucketProps>,
    /// `[balance]`: the replica side of read load balancing (the service model and the read
    /// workers) and the hot-key periods of a cluster node.
    #[serde(skip_serializing_if = "BalanceSection::is_default")]
    pub balance: BalanceSection,
    /// `[memory]`: Redis's `maxmemory` and `maxmemory-policy` (standalone nodes).
    #[serde(skip_serializing_if = "MemorySection::is_default")]
    pub memory: MemorySection,
    /// `[s3]`: the S3-compatible endpoint (off unless `listen` is set).
    #[serde(skip_serializing_if = "S3Section::is_default")]
    pub s3: S3Section,
    /// `[blob]`: large objects — chunk size, inline threshold, admission control.
    #[serde(skip_serializing_if = "is_default_blob")]
    pub blob: crate::blob_config::BlobConfig,
    /// `[repart]`: the worker-shard executor of a standalone node and how it repartitions
    /// (off by default).
    #[serde(skip_serializing_if = "is_default_repart")]
    pub repart: crate::repart::RepartConfig,
    /// `[txn]`: transactional buckets on a cluster node; today `[txn.planner]`, the
    /// cross-node placement planner (off by default).
    #[serde(skip_serializing_if = "TxnSection::is_default")]
    pub txn: TxnSection,
}

fn is_default_repart(r: &crate::repart::RepartConfig) -> bool {
    *r == crate::repart::RepartConfig::default()
}

fn is_default_blob(b: &crate::blob_config::BlobConfig) -> bool {
    *b == crate::blob_config::BlobConfig::default()
}

/// `[s3]`: the S3-compatible endpoint. Requests must carry an AWS Signature V4 by one of
/// `keys`, unless `open` says the endpoint serves anyone.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Section {
    /// Address to listen on (`--s3`); absent: no S3 endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// Access keys, each `ACCESS_KEY_ID:SECRET` (`--s3-key`, repeatable).
    pub keys: Vec<String>,
    /// ACL users some access keys act as (`ACCESS_KEY_ID = "user"`, `--s3-user ID=USER`): a
    /// request signed with such a key gets that user's permissions, each object counted as
    /// the key `bucket:key`. Keys not listed keep the endpoint's full access.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, String>,
    /// Serve requests without a valid signature (anyone who can connect reads and writes).
    pub open: bool,
    /// Most S3 connections open at once (more are answered 503 and closed).
    pub max_connections: usize,
    /// How long a connection has to send a request's headers, ms.
    pub header_read_timeout_ms: u64,
    /// A connection whose read or write makes no progress this long is closed, ms.
    pub idle_timeout_ms: u64,
    /// Serve HTTPS, with the node's certificate (`resp.tls-cert-file`), as `http.tls`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
}

impl Default for S3Section {
    fn default() -> Self {
        S3Section {
            listen: None,
            keys: Vec::new(),
            users: BTreeMap::new(),
            open: false,
            max_connections: 1024,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            tls: false,
        }
    }
}

impl S3Section {
    fn is_default(&self) -> bool {
        *self == S3Section::default()
    }

    /// The access keys as (id, secret) pairs; the error names the malformed entry.
    pub fn key_pairs(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(self.keys.len());
        for k in &self.keys {
            let Some((id, secret)) = k.split_once(':') else {
                return Err(Error::Config(format!(
                    "s3.keys (--s3-key): '{}' is not ACCESS_KEY_ID:SECRET",
                    k.chars().take(16).collect::<String>()
                )));
            };
            let id_ok = (3..=128).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !id_ok {
                return Err(Error::Config(format!(
                    "s3.keys (--s3-key): access key id '{id}' must be 3 to 128 letters, digits, \
                     '_' or '-'"
                )));
            }
            if !(8..=128).contains(&secret.len()) || !secret.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(Error::Config(format!(
                    "s3.keys (--s3-key): the secret of '{id}' must be 8 to 128 printable \
                     characters without spaces"
                )));
            }
            out.push((id.to_owned(), secret.to_owned()));
        }
        Ok(out)
    }

    fn validate(&self) -> Result<()> {
        let bad = |msg: &str| Err(Error::Config(msg.into()));
        let pairs = self.key_pairs()?;
        if let Some(id) = self
            .users
            .keys()
            .find(|id| !pairs.iter().any(|(k, _)| k == *id))
        {
            return Err(Error::Config(format!(
                "s3.users (--s3-user): '{id}' is not one of the access keys (s3.keys)"
            )));
        }
        if self.listen.is_some() && self.keys.is_empty() && !self.open {
            return bad(
                "s3.listen (--s3) needs an access key (--s3-key ID:SECRET, or s3.keys) or \
                 s3.open = true (--s3-open) to serve unsigned requests",
            );
        }
        if self.max_connections == 0 {
            return bad("s3.max_connections must be at least 1 (default 1024)");
        }
        if self.header_read_timeout_ms == 0 || self.idle_timeout_ms == 0 {
            return bad("s3.header_read_timeout_ms and s3.idle_timeout_ms must be at least 1");
        }
        Ok(())
    }
}

/// `[memory]`: the memory limit of a node, as Redis's `maxmemory` and `maxmemory-policy`
/// (both also changed at runtime with CONFIG SET). Used memory is the estimate of stored
/// keys, values and per-key overhead (INFO memory `used_memory`): the keyspace's on a
/// standalone node, the replication engine's on a cluster node (every bucket type, hints
/// included; `meridian_replication::memory`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySection {
    /// The limit: a number of bytes, or a string with Redis's units (`"100mb"`, `"1gb"`,
    /// `"500k"`); 0 (the default): no limit.
    pub maxmemory: MemorySize,
    /// What happens over the limit: `noeviction` (the default: commands that may add memory
    /// are refused with `-OOM`), `allkeys-lru`, `allkeys-lfu`, `allkeys-random`,
    /// `volatile-lru`, `volatile-lfu`, `volatile-random` or `volatile-ttl`.
    pub maxmemory_policy: String,
}

/// A memory size in the configuration file: bytes, or text with Redis's units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemorySize {
    /// A number of bytes.
    Bytes(u64),
    /// `"100mb"`, `"1gb"`, ... (see [`crate::memory::parse_size`]).
    Text(String),
}

impl Default for MemorySection {
    fn default() -> Self {
        Self {
            maxmemory: MemorySize::Bytes(0),
            maxmemory_policy: "noeviction".into(),
        }
    }
}

impl MemorySection {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// `maxmemory` in bytes; the error names the field.
    pub fn maxmemory_bytes(&self) -> Result<u64> {
        match &self.maxmemory {
            MemorySize::Bytes(n) => Ok(*n),
            MemorySize::Text(t) => {
                crate::memory::parse_size(t.trim().as_bytes()).ok_or_else(|| {
                    Error::Config(format!(
                        "memory.maxmemory = {t:?} is not a memory size: give bytes or a number \
                     with a unit (b, k, kb, m, mb, g, gb), e.g. \"100mb\""
                    ))
                })
            }
        }
    }

    /// `maxmemory_policy`; the error names the field and the policies.
    pub fn policy(&self) -> Result<crate::memory::MaxmemoryPolicy> {
        use crate::memory::MaxmemoryPolicy;
        MaxmemoryPolicy::parse(self.maxmemory_policy.as_bytes()).ok_or_else(|| {
            let names: Vec<_> = MaxmemoryPolicy::ALL.iter().map(|p| p.name()).collect();
            Error::Config(format!(
                "memory.maxmemory_policy = {:?} is not a policy: expected one of {}",
                self.maxmemory_policy,
                names.join(", ")
            ))
        })
    }
}

/// `[balance]`: read load balancing on a cluster node (spec `load-balancing.md` §0, §4).
/// Every setting is optional; unset ones keep the replication layer's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BalanceSection {
    /// How long a read occupies one of this node's read workers: `real` (the engine's own
    /// time, the default), `fixed:MS` or `exp:MS` (mean). Changeable at run time with
    /// `PUT /balance/service-model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_model: Option<ServiceModel>,
    /// Workers serving the replica-side read queue (default 4; the replica-choice study
    /// uses 1). Between 1 and [`BalanceSection::MAX_READ_WORKERS`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_workers: Option<usize>,
    /// How often the node reports its load to its DC's root, milliseconds (default 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance_tick_ms: Option<u64>,
    /// The root's hot-key decision period P, milliseconds (default 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_period_ms: Option<u64>,
    /// How long an extra copy serves without a lease renewal from its root, milliseconds
    /// (default 1000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_lease_ms: Option<u64>,
    /// Timeout of each step of making an extra copy, milliseconds (default 5000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_timeout_ms: Option<u64>,
    /// How a replica claims a deferred (`naive`, `avr`) read before serving it: `token`
    /// (the default: its coordinator grants the first claim only, never a duplicate) or
    /// `cancel` (the replica-choice study's rule: broadcast a cancel and serve).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deferred_claim: Option<meridian_replication::DeferredClaim>,
}

impl BalanceSection {
    /// Most read workers a node may run.
    pub const MAX_READ_WORKERS: usize = 1024;
    /// Longest period any `*_ms` setting of the section accepts (one hour).
    pub const MAX_PERIOD_MS: u64 = 3_600_000;

    fn is_default(&self) -> bool {
        *self == BalanceSection::default()
    }

    /// Checks the section; messages name the setting (and its flag, where there is one).
    pub fn validate(&self) -> Result<()> {
        if let Some(n) = self.read_workers
            && !(1..=Self::MAX_READ_WORKERS).contains(&n)
        {
            return Err(Error::Config(format!(
                "balance.read_workers (--read-workers) = {n}: must be between 1 and {}",
                Self::MAX_READ_WORKERS
            )));
        }
        for (name, v) in [
            ("balance_tick_ms", self.balance_tick_ms),
            ("hot_period_ms", self.hot_period_ms),
            ("copy_lease_ms", self.copy_lease_ms),
            ("copy_timeout_ms", self.copy_timeout_ms),
        ] {
            if let Some(ms) = v
                && !(1..=Self::MAX_PERIOD_MS).contains(&ms)
            {
                return Err(Error::Config(format!(
                    "balance.{name} = {ms}: must be between 1 and {} milliseconds",
                    Self::MAX_PERIOD_MS
                )));
            }
        }
        Ok(())
    }

    /// Applies the settings given to a replication node's configuration.
    pub fn apply(&self, rc: &mut meridian_replication::NodeConfig) {
        let ms = std::time::Duration::from_millis;
        if let Some(m) = self.service_model {
            rc.service_model = m;
        }
        if let Some(n) = self.read_workers {
            rc.read_workers = n;
        }
        if let Some(v) = self.balance_tick_ms {
            rc.balance_tick = ms(v);
        }
        if let Some(v) = self.hot_period_ms {
            rc.hot_period = ms(v);
        }
        if let Some(v) = self.copy_lease_ms {
            rc.copy_lease = ms(v);
        }
        if let Some(v) = self.copy_timeout_ms {
            rc.copy_timeout = ms(v);
        }
        if let Some(c) = self.deferred_claim {
            rc.deferred_claim = c;
        }
    }
}

/// `[txn]`: settings of a cluster node's transactional buckets that are not bucket
/// properties (those are `[buckets.NAME]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TxnSection {
    /// `[txn.planner]`: the cross-node placement planner.
    #[serde(skip_serializing_if = "PlannerSection::is_default")]
    pub planner: PlannerSection,
}

impl TxnSection {
    fn is_default(&self) -> bool {
        *self == TxnSection::default()
    }
}

/// `[txn.planner]`: the planner that moves transactional keys between partitions so that
/// keys used together by transactions share a partition leader, cutting two-phase commits
/// (spec `repartitioning.md` §6; `meridian_replication`'s `txn::moves`). Off by default. On,
/// every node feeds it the key sets of the transactions it coordinates, and the claimant
/// (the lowest live node id) plans every `plan_interval_ms` and runs the moves; every node
/// of a cluster should have the same settings (a node with the planner off feeds nothing).
/// Defaults are the spec's (`meridian_txn::PlannerConfig::default`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlannerSection {
    /// Whether the planner runs (default false).
    pub enabled: bool,
    /// W: the co-access graph covers the last W transactions (default 10 000; 0: every
    /// transaction since the start, which grows without bound).
    pub window: usize,
    /// How often the claimant plans, milliseconds (default 60 000). Rounds start on the
    /// transaction housekeeping tick (once a second), so the interval is at least a second.
    pub plan_interval_ms: u64,
    /// A round moves nothing unless the cut (plus the geo cost) drops by at least this many
    /// co-accesses (default 16).
    pub min_gain: u64,
    /// At most this many keys move per round (default 1000): one round's moves are one
    /// batch of key-directory changes in the cluster metadata.
    pub max_moves_per_round: usize,
    /// A key moved less than this long ago does not move again, milliseconds (default
    /// 600 000): hysteresis against move thrashing.
    pub min_residence_ms: u64,
    /// The geo variant: the cost, in co-access units per access, of a key whose leader is
    /// outside the DC that accesses it most (default 0: off).
    pub geo_weight: u64,
}

impl Default for PlannerSection {
    fn default() -> Self {
        let d = meridian_replication::PlannerConfig::default();
        PlannerSection {
            enabled: false,
            window: d.window,
            plan_interval_ms: d.plan_interval_us / 1000,
            min_gain: d.min_gain,
            max_moves_per_round: d.max_moves_per_round,
            min_residence_ms: d.min_residence_us / 1000,
            geo_weight: d.geo_weight,
        }
    }
}

impl PlannerSection {
    /// Largest window accepted: the graph keeps every transaction of it in memory.
    pub const MAX_WINDOW: usize = 10_000_000;
    /// Shortest planning interval, ms: the housekeeping tick that starts rounds.
    pub const MIN_PLAN_INTERVAL_MS: u64 = 1_000;
    /// Longest planning interval and residence, ms (one week).
    pub const MAX_PERIOD_MS: u64 = 7 * 24 * 3_600_000;
    /// Most moves per round.
    pub const MAX_MOVES_PER_ROUND: usize = 100_000;
    /// Largest `min_gain` and `geo_weight`.
    pub const MAX_WEIGHT: u64 = 1_000_000_000;

    fn is_default(&self) -> bool {
        *self == PlannerSection::default()
    }

    /// Checks the section; messages name the setting (`txn.planner.<name>`) and the range.
    /// Checked whether or not the planner is enabled, so turning it on never reveals an
    /// old mistake.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.window > Self::MAX_WINDOW {
            return bad(format!(
                "txn.planner.window = {}: must be at most {} transactions (0: all since start)",
                self.window,
                Self::MAX_WINDOW
            ));
        }
        if !(Self::MIN_PLAN_INTERVAL_MS..=Self::MAX_PERIOD_MS).contains(&self.plan_interval_ms) {
            return bad(format!(
                "txn.planner.plan_interval_ms = {}: must be between {} and {} milliseconds \
                 (rounds start on a one-second tick)",
                self.plan_interval_ms,
                Self::MIN_PLAN_INTERVAL_MS,
                Self::MAX_PERIOD_MS
            ));
        }
        if !(1..=Self::MAX_WEIGHT).contains(&self.min_gain) {
            return bad(format!(
                "txn.planner.min_gain = {}: must be between 1 and {} co-accesses (0 would move \
                 keys for no gain)",
                self.min_gain,
                Self::MAX_WEIGHT
            ));
        }
        if !(1..=Self::MAX_MOVES_PER_ROUND).contains(&self.max_moves_per_round) {
            return bad(format!(
                "txn.planner.max_moves_per_round = {}: must be between 1 and {}",
                self.max_moves_per_round,
                Self::MAX_MOVES_PER_ROUND
            ));
        }
        if self.min_residence_ms > Self::MAX_PERIOD_MS {
            return bad(format!(
                "txn.planner.min_residence_ms = {}: must be at most {} milliseconds",
                self.min_residence_ms,
                Self::MAX_PERIOD_MS
            ));
        }
        if self.geo_weight > Self::MAX_WEIGHT {
            return bad(format!(
                "txn.planner.geo_weight = {}: must be at most {} (0: off)",
                self.geo_weight,
                Self::MAX_WEIGHT
            ));
        }
        Ok(())
    }

    /// The planner's configuration, or `None` while it is off: what
    /// `Node::set_txn_planner` takes.
    pub fn planner_config(&self) -> Option<meridian_replication::PlannerConfig> {
        self.enabled.then(|| meridian_replication::PlannerConfig {
            window: self.window,
            plan_interval_us: self.plan_interval_ms.saturating_mul(1000),
            min_gain: self.min_gain,
            max_moves_per_round: self.max_moves_per_round,
            min_residence_us: self.min_residence_ms.saturating_mul(1000),
            geo_weight: self.geo_weight,
        })
    }
}

/// `[cluster]`: a node of a cluster whose nodes run in separate processes and talk over TCP.
/// Every node of a cluster is given the same `members`, `q`, `n` and `seed`, so each computes
/// the same layout.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// This node's id: one of `members`.
    pub id: u32,
    /// This node's name; when given, must match its member entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// This node's DC name; when given, must match its member entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dc: Option<String>,
    /// Address the node-to-node listener binds (default: this node's member `peer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_listen: Option<SocketAddr>,
    /// Partitions of the ring (default 64).
    #[serde(default = "default_q")]
    pub q: u32,
    /// The layout's target N, and the default bucket's `n_val` (default 3).
    #[serde(default = "default_n")]
    pub n: u32,
    /// Seed of the node's randomness (default 1).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Heartbeat period, in milliseconds (default 500); the failure detector follows it.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// How often stored hints are offered to their primaries, in milliseconds (default
    /// 10 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_ms: Option<u64>,
    /// How often an anti-entropy exchange runs, in milliseconds (default 30 000; 0 disables
    /// anti-entropy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_entropy_ms: Option<u64>,
    /// Every member of the cluster, this node included.
    pub members: Vec<ClusterMember>,
    /// This node joins a running cluster: `members` lists the cluster's current members and
    /// this node. It serves nothing until an operator admits it (`meridian ctl join`, that
    /// is `POST /cluster/members` on any member); then partitions move to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
    /// Emulate WAN links on this node's outgoing messages (placements come from `members`;
    /// DC ids in `dc_links` are the DC names' positions in sorted order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanConfig>,
    /// The secret every peer link proves at its handshake (16 to 4096 bytes; the same on every
    /// member). Required when `members` names other nodes; a lone node without one gets a
    /// random key, so its peer port admits nobody. Also `--cluster-secret` /
    /// `MERIDIAN_CLUSTER_SECRET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

fn default_q() -> u32 {
    64
}
fn default_n() -> u32 {
    3
}
fn default_seed() -> u64 {
    1
}
fn default_heartbeat_ms() -> u64 {
    500
}

/// `[[cluster.members]]`: one node of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterMember {
    /// Its id (unique, at least 1).
    pub id: u32,
    /// Its name (unique), as `/cluster` shows it.
    pub name: String,
    /// Its DC's name.
    pub dc: String,
    /// Where it accepts node-to-node TCP connections.
    pub peer: SocketAddr,
    /// Its RESP address, for `/cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resp: Option<SocketAddr>,
    /// Its HTTP address, for `/cluster`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<SocketAddr>,
    /// Its RESP-over-TLS address, which `CLUSTER SLOTS`/`NODES` and `-MOVED` name to clients
    /// connected over TLS (this node's own is its `resp.tls-port` listener).
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "resp-tls")]
    pub resp_tls: Option<SocketAddr>,
}

impl ClusterSection {
    /// Each DC name's id: its position among the sorted distinct names.
    pub fn dc_ids(&self) -> BTreeMap<&str, DcId> {
        let names: BTreeSet<&str> = self.members.iter().map(|m| m.dc.as_str()).collect();
        names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, DcId(i as u32)))
            .collect()
    }

    /// This node's member entry (validation guarantees there is one).
    pub fn me(&self) -> Option<&ClusterMember> {
        self.members.iter().find(|m| m.id == self.id)
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        NodeId(self.id)
    }

    /// Checks the section; messages name the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.members.is_empty() {
            return bad("cluster.members is empty: list every node, this one included".into());
        }
        let mut ids = BTreeSet::new();
        let mut names = BTreeSet::new();
        let mut peers = BTreeMap::new();
        for m in &self.members {
            if m.id == 0 {
                return bad(format!(
                    "cluster.members: member '{}' has id 0; ids start at 1",
                    m.name
                ));
            }
            if !ids.insert(m.id) {
                return bad(format!("cluster.members: duplicate id {}", m.id));
            }
            if m.name.is_empty() || !names.insert(m.name.as_str()) {
                return bad(format!(
                    "cluster.members: member {} has an empty or duplicate name '{}'",
                    m.id, m.name
                ));
            }
            if m.dc.is_empty() {
                return bad(format!("cluster.members: member {} has an empty dc", m.id));
            }
            if m.peer.port() == 0 {
                return bad(format!(
                    "cluster.members: member {} has peer port 0; give its real address",
                    m.id
                ));
            }
            if m.resp_tls.is_some_and(|a| a.port() == 0) {
                return bad(format!(
                    "cluster.members: member {} has resp_tls port 0; give its TLS port or \
                     leave resp_tls out",
                    m.id
                ));
            }
            if let Some(other) = peers.insert(m.peer, m.id) {
                return bad(format!(
                    "cluster.members: members {other} and {} share the peer address {}",
                    m.id, m.peer
                ));
            }
        }
        let Some(me) = self.me() else {
            return bad(format!(
                "cluster.id = {} is not in cluster.members (ids: {})",
                self.id,
                ids.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        if let Some(name) = &self.name
            && *name != me.name
        {
            return bad(format!(
                "cluster.name = '{name}' but member {} is named '{}'",
                self.id, me.name
            ));
        }
        if let Some(dc) = &self.dc
            && *dc != me.dc
        {
            return bad(format!(
                "cluster.dc = '{dc}' but member {} is in dc '{}'",
                self.id, me.dc
            ));
        }
        if self.q == 0 {
            return bad("cluster.q must be at least 1".into());
        }
        if self.n == 0 || self.n as usize > self.members.len() {
            return bad(format!(
                "cluster.n = {} must be between 1 and the number of members ({})",
                self.n,
                self.members.len()
            ));
        }
        if self.heartbeat_ms == 0 {
            return bad("cluster.heartbeat_ms must be at least 1".into());
        }
        if self.handoff_ms == Some(0) {
            return bad("cluster.handoff_ms must be at least 1".into());
        }
        if let Some(w) = &self.wan {
            w.validate()
                .map_err(|e| Error::Config(format!("cluster.wan: {e}")))?;
        }
        self.peer_secret()?;
        Ok(())
    }

    /// The key peer links are authenticated with. Without `secret`, a cluster of one node
    /// gets a random key (its peer port then admits nobody), and a cluster naming other
    /// members is refused: there is no well-known key anyone could connect with.
    pub fn peer_secret(&self) -> Result<meridian_net::ClusterSecret> {
        match &self.secret {
            None if self.members.iter().any(|m| m.id != self.id) => Err(Error::Config(
                "cluster.secret is not set but cluster.members names other nodes: peer links \
                 must prove a shared secret. Make one (e.g. `openssl rand -hex 32`) and give \
                 the same one to every member as cluster.secret, --cluster-secret or \
                 MERIDIAN_CLUSTER_SECRET"
                    .into(),
            )),
            None => Ok(meridian_net::ClusterSecret::random()),
            Some(s) => meridian_net::ClusterSecret::new(s.as_bytes())
                .map_err(|e| Error::Config(format!("cluster.secret (--cluster-secret): {e}"))),
        }
    }
}

/// `[resp]`: the Redis-protocol front end.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RespSection {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Password clients must give with AUTH (none: no authentication); also the HTTP API's
    /// bearer (`Authorization: Bearer <requirepass>`), which admin routes need on a listener
    /// beyond loopback. Never shown: `CONFIG GET requirepass` answers `<redacted>` when it is
    /// set (empty when not, as Redis), and `Debug` prints `<redacted>`.
    pub requirepass: Option<String>,
    /// Most clients connected at once; more are refused with an error.
    pub max_clients: usize,
    /// Largest bulk string accepted, in bytes (Redis's `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments in one command.
    pub max_multibulk_len: usize,
    /// Longest inline (telnet-style) command, in bytes.
    pub max_inline_len: usize,
    /// Most memory the node's Lua interpreters may hold each, in bytes: a script that builds
    /// more fails with `not enough memory`.
    pub max_script_memory: usize,
    /// Cluster mode: `"moved"` (Redis Cluster's `-MOVED` for a key command whose keys share a
    /// slot this node is not the master of in its DC's view) or `"serve"` (coordinate every
    /// key here, for clients that are not cluster-aware).
    pub misrouted: Misrouted,
    /// ACL users, one `user <name> <rules…>` line each, as Redis's `user` directives
    /// (`"user alice on >secret ~app:* +@read"`). The `default` user is Redis's (every
    /// command, key and channel; `requirepass` its password) unless a line redefines it.
    pub users: Vec<String>,
    /// An ACL file of such lines (Redis's `aclfile`): loaded at start and by `ACL LOAD`,
    /// written by `ACL SAVE`. Not together with `users`.
    pub aclfile: Option<std::path::PathBuf>,
    /// Redis's `acl-pubsub-default`: whether a new user may use every Pub/Sub channel
    /// (`"allchannels"`) or none until allowed (`"resetchannels"`, Redis 7's default).
    #[serde(alias = "acl-pubsub-default")]
    pub acl_pubsub_default: PubsubDefault,
    /// Redis's `protected-mode` (on by default): while the `default` user has no password,
    /// clients connecting from beyond loopback are refused with Redis's `-DENIED` message.
    #[serde(alias = "protected-mode")]
    pub protected_mode: bool,
    /// Redis's `port`: when set, the plaintext listener's port (in place of `listen`'s);
    /// `0` turns the plaintext listener off, so the node serves RESP over TLS only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Redis's `tls-port`: the RESP-over-TLS listener's port, on `listen`'s address; `0`
    /// (the default): none.
    #[serde(alias = "tls-port")]
    pub tls_port: u16,
    /// Redis's `tls-cert-file`: the certificate chain (PEM) the TLS listeners present (RESP,
    /// and HTTP/S3 when `http.tls`/`s3.tls`). `CONFIG SET` rereads it.
    #[serde(alias = "tls-cert-file", skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// Redis's `tls-key-file`: that certificate's private key (PEM).
    #[serde(alias = "tls-key-file", skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// Redis's `tls-ca-cert-file`: the CA (PEM) client certificates must chain to.
    #[serde(alias = "tls-ca-cert-file", skip_serializing_if = "Option::is_none")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Redis's `tls-auth-clients`: `yes` (the default, as Redis: clients must present a
    /// certificate signed by the CA), `no`, or `optional` (checked when given).
    #[serde(alias = "tls-auth-clients")]
    pub tls_auth_clients: String,
    /// Redis's `tls-protocols`: `"TLSv1.2 TLSv1.3"` (the default when empty), or one of them.
    #[serde(alias = "tls-protocols")]
    pub tls_protocols: String,
    /// Redis's `tls-ciphersuites`: colon-separated TLS 1.3 suite names; empty: all three.
    #[serde(alias = "tls-ciphersuites")]
    pub tls_ciphersuites: String,
    /// The most a TLS client may take to finish its handshake, in milliseconds, before its
    /// connection (and its `max_clients` slot) is dropped: a client that connects and sends
    /// nothing holds a slot no longer than this.
    #[serde(alias = "tls-handshake-timeout-ms")]
    pub tls_handshake_timeout_ms: u64,
    /// Redis's `tls-cluster`: encrypt the links between cluster nodes too, with this node's
    /// certificate (`tls-cert-file`), both ends authenticated against `tls-ca-cert-file` (the
    /// cluster CA). Every member must agree: a TLS node and a plaintext one cannot talk.
    #[serde(alias = "tls-cluster")]
    pub tls_cluster: bool,
}

impl RespSection {
    /// The plaintext RESP listener's address: none with `port = 0`.
    pub fn plain_listen(&self) -> Option<SocketAddr> {
        match self.port {
            Some(0) => None,
            Some(p) => Some(SocketAddr::new(self.listen.ip(), p)),
            None => Some(self.listen),
        }
    }

    /// The RESP-over-TLS listener's address: none without a `tls_port`.
    pub fn tls_listen(&self) -> Option<SocketAddr> {
        (self.tls_port != 0).then(|| SocketAddr::new(self.listen.ip(), self.tls_port))
    }

    /// The TLS settings, when a certificate is configured (whether or not a TLS listener
    /// uses it); an error names the setting that is wrong.
    pub fn tls_settings(&self) -> Result<Option<meridian_net::tls::TlsSettings>> {
        let auth_clients = meridian_net::tls::ClientAuth::parse(&self.tls_auth_clients)
            .map_err(|e| Error::Config(format!("resp.{e}")))?;
        let (cert, key) = match (&self.tls_cert_file, &self.tls_key_file) {
            (None, None) => return Ok(None),
            (Some(c), Some(k)) => (c.clone(), k.clone()),
            _ => {
                return Err(Error::Config(
                    "resp.tls-cert-file and resp.tls-key-file go together: set both".into(),
                ));
            }
        };
        Ok(Some(meridian_net::tls::TlsSettings {
            cert_file: cert,
            key_file: key,
            ca_cert_file: self.tls_ca_cert_file.clone(),
            auth_clients,
            protocols: self.tls_protocols.clone(),
            ciphersuites: self.tls_ciphersuites.clone(),
        }))
    }
}

/// `resp.acl_pubsub_default`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PubsubDefault {
    /// New users reach no channel until allowed.
    #[default]
    Resetchannels,
    /// New users reach every channel.
    Allchannels,
}

impl Default for RespSection {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 6379)),
            requirepass: None,
            max_clients: 10_000,
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024,
            max_inline_len: 64 * 1024,
            max_script_memory: 512 * 1024 * 1024,
            misrouted: Misrouted::Moved,
            users: Vec::new(),
            aclfile: None,
            acl_pubsub_default: PubsubDefault::Resetchannels,
            protected_mode: true,
            port: None,
            tls_port: 0,
            tls_cert_file: None,
            tls_key_file: None,
            tls_ca_cert_file: None,
            tls_auth_clients: "yes".into(),
            tls_protocols: String::new(),
            tls_ciphersuites: String::new(),
            tls_handshake_timeout_ms: 10_000,
            tls_cluster: false,
        }
    }
}

/// `[http]`: the HTTP front end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Largest request body accepted by `PUT /kv/{key}`, in bytes.
    pub max_body_len: usize,
    /// Most HTTP connections open at once; more are answered 503 and closed at once. Separate
    /// from `resp.max_clients`, so one front end's load never takes the other's slots.
    pub max_connections: usize,
    /// How long a connection has to send a request's complete headers, in milliseconds,
    /// counted from accept or from the end of its previous response: so it also closes
    /// keep-alive connections idle that long (slowloris, idle descriptors).
    pub header_read_timeout_ms: u64,
    /// A connection whose pending read or write makes no progress for this long, in
    /// milliseconds, is closed (a body sent a byte at a time, a client that stops reading).
    pub idle_timeout_ms: u64,
    /// Serve HTTPS instead of HTTP, with the node's certificate (`resp.tls-cert-file` and
    /// `resp.tls-key-file`; no client certificate is asked for). The TLS handshake counts
    /// against `header_read_timeout_ms`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub tls: bool,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8379)),
            max_body_len: 64 * 1024 * 1024,
            max_connections: 1024,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            tls: false,
        }
    }
}

/// `[storage]`: the engine and its durability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSection {
    /// Which engine.
    pub engine: EngineKind,
    /// Where the durable engine keeps its files.
    pub data_dir: PathBuf,
    /// When the durable engine forces writes to disk.
    pub fsync: Durability,
    /// How long old versions are kept for snapshot reads, in milliseconds (0: latest only).
    pub version_retention_ms: u64,
    /// How often old versions are garbage-collected, in milliseconds.
    pub gc_interval_ms: u64,
    /// The durable engine's free-space reserve: while less is free on the data directory's
    /// filesystem, writes are refused (`-MISCONF` on RESP, 507 on HTTP, `/health` degraded)
    /// and resume by themselves once there is room; bytes, or text with Redis's units
    /// (`"64mb"`, the default; 0: refuse writes only when the disk is actually full).
    pub min_free_disk: MemorySize,
}

impl Default for StorageSection {
    fn default() -> Self {
        Self {
            engine: EngineKind::Mem,
            data_dir: PathBuf::from("meridian-data"),
            fsync: Durability::Everysec,
            version_retention_ms: 0,
            gc_interval_ms: 10_000,
            min_free_disk: MemorySize::Bytes(
                meridian_storage::fjall_engine::DEFAULT_MIN_FREE_BYTES,
            ),
        }
    }
}

impl StorageSection {
    /// `min_free_disk` in bytes; the error names the field.
    pub fn min_free_disk_bytes(&self) -> Result<u64> {
        match &self.min_free_disk {
            MemorySize::Bytes(n) => Ok(*n),
            MemorySize::Text(t) => crate::memory::parse_size(t.trim().as_bytes()).ok_or_else(|| {
                Error::Config(format!(
                    "storage.min_free_disk = {t:?} is not a size: give bytes or a number with a \
                     unit (b, k, kb, m, mb, g, gb), e.g. \"64mb\""
                ))
            }),
        }
    }
}

impl NodeConfig {
    /// Parses TOML text, then validates.
    pub fn from_toml(text: &str) -> Result<Self> {
        let config: NodeConfig =
            toml::from_str(text).map_err(|e| Error::Config(format!("invalid TOML: {e}")))?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration as TOML text ([`NodeConfig::from_toml`] reads it back).
    pub fn to_toml(&self) -> Result<String> {
        toml::to_string(self).map_err(|e| Error::Config(format!("cannot write TOML: {e}")))
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        Self::from_toml(&text)
            .map_err(|e| Error::Config(format!("{}: {}", path.display(), e.detail())))
    }

    /// The TLS settings: a listener that serves TLS needs the certificate, and the plaintext
    /// RESP listener may be off only when a TLS one is on.
    fn validate_tls(&self) -> Result<()> {
        let bad = |msg: &str| Err(Error::Config(msg.into()));
        let settings = self.resp.tls_settings()?;
        let wants_tls =
            self.resp.tls_port != 0 || self.http.tls || self.s3.tls || self.resp.tls_cluster;
        if wants_tls && settings.is_none() {
            return bad(
                "TLS is on (resp.tls-port, resp.tls-cluster, http.tls or s3.tls) but \
                 resp.tls-cert-file and resp.tls-key-file are not set",
            );
        }
        if self.resp.tls_cluster && self.resp.tls_ca_cert_file.is_none() {
            return bad(
                "resp.tls-cluster needs resp.tls-ca-cert-file: the cluster CA every peer's \
                 certificate must chain to",
            );
        }
        if self.resp.plain_listen().is_none() && self.resp.tls_listen().is_none() {
            return bad("resp.port = 0 turns the plaintext listener off: set resp.tls-port too");
        }
        if self.resp.tls_handshake_timeout_ms == 0 {
            return bad("resp.tls-handshake-timeout-ms must be at least 1 (default 10000)");
        }
        Ok(())
    }

    /// Checks the settings hang together; the message says which one is wrong and why.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::Config(msg));
        if self.resp.max_clients == 0 {
            return bad("resp.max_clients must be at least 1".into());
        }
        if self.resp.max_bulk_len < 1024 {
            return bad(format!(
                "resp.max_bulk_len = {} is too small: at least 1024 bytes",
                self.resp.max_bulk_len
            ));
        }
        if self.resp.max_multibulk_len < 2 {
            return bad("resp.max_multibulk_len must be at least 2".into());
        }
        if self.resp.max_inline_len < 64 {
            return bad("resp.max_inline_len must be at least 64 bytes".into());
        }
        if self.resp.max_script_memory < 1024 * 1024 {
            return bad("resp.max_script_memory must be at least 1 MiB".into());
        }
        if self.resp.requirepass.as_deref() == Some("") {
            return bad("resp.requirepass is empty: remove it to disable AUTH".into());
        }
        self.validate_tls()?;
        if self.http.listen == self.resp.listen && self.resp.listen.port() != 0 {
            return bad(format!(
                "resp.listen and http.listen are both {}: give them different ports",
                self.resp.listen
            ));
        }
        if self.http.max_connections == 0 {
            return bad("http.max_connections must be at least 1 (default 1024)".into());
        }
        if self.http.header_read_timeout_ms == 0 {
            return bad("http.header_read_timeout_ms must be at least 1 (default 10000)".into());
        }
        if self.http.idle_timeout_ms == 0 {
            return bad("http.idle_timeout_ms must be at least 1 (default 60000)".into());
        }
        if self.storage.gc_interval_ms == 0 {
            return bad("storage.gc_interval_ms must be at least 1".into());
        }
        self.storage.min_free_disk_bytes()?;
        if self.storage.engine == EngineKind::Fjall && self.storage.data_dir.as_os_str().is_empty()
        {
            return bad("storage.data_dir is required with engine = \"fjall\"".into());
        }
        self.balance.validate()?;
        self.txn.planner.validate()?;
        self.s3.validate()?;
        self.blob.validate().map_err(Error::Config)?;
        self.repart.validate().map_err(Error::Config)?;
        if self.repart.mode.enabled() && self.cluster.is_some() {
            return bad(format!(
                "repart.mode = {} applies to standalone nodes: a cluster-mode node serves key \
                 commands through its replication protocols; remove it from [repart]",
                self.repart.mode
            ));
        }
        // Both modes enforce it: a standalone node over its keyspace, a cluster node over
        // its replication engine (`meridian_replication::memory`).
        self.memory.maxmemory_bytes()?;
        self.memory.policy()?;
        match &self.cluster {
            Some(c) => c.validate()?,
            None if !self.buckets.is_empty() => {
                return bad("[buckets.*] tables need a [cluster] section".into());
            }
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(NodeConfig::from_toml("").unwrap(), NodeConfig::default());
    }

    #[test]
    fn a_full_file_parses() {
        let c = NodeConfig::from_toml(
            r#"
            [resp]
            listen = "127.0.0.1:7000"
            requirepass = "s3cret"
            max_clients = 10
            [http]
            listen = "127.0.0.1:7001"
            [storage]
            engine = "fjall"
            data_dir = "/tmp/x"
            fsync = "always"
            "#,
        )
        .unwrap();
        assert_eq!(c.resp.listen.port(), 7000);
        assert_eq!(c.resp.requirepass.as_deref(), Some("s3cret"));
        assert_eq!(c.storage.engine, EngineKind::Fjall);
        assert_eq!(c.storage.fsync, Durability::Always);
    }

    #[test]
    fn typos_and_bad_values_are_named() {
        let e = NodeConfig::from_toml("[resp]\nlisten_addr = \"x\"").unwrap_err();
        assert!(e.to_string().contains("listen_addr"), "{e}");
        let e = NodeConfig::from_toml("[storage]\nfsync = \"sometimes\"").unwrap_err();
        assert!(e.to_string().contains("sometimes"), "{e}");
        let e = NodeConfig::from_toml("[resp]\nmax_clients = 0").unwrap_err();
        assert!(e.to_string().contains("max_clients"), "{e}");
        let e = NodeConfig::from_toml("[memory]\nmaxmemory = \"12qb\"").unwrap_err();
        assert!(e.to_string().contains("memory.maxmemory"), "{e}");
        let e = NodeConfig::from_toml("[memory]\nmaxmemory_policy = \"lru\"").unwrap_err();
        assert!(e.to_string().contains("memory.maxmemory_policy"), "{e}");
        assert!(e.to_string().contains("allkeys-lru"), "{e}");
        for field in [
            "max_connections",
            "header_read_timeout_ms",
            "idle_timeout_ms",
        ] {
            let e = NodeConfig::from_toml(&format!("[http]\n{field} = 0")).unwrap_err();
            assert!(e.to_string().contains(&format!("http.{field}")), "{e}");
        }
        let e = NodeConfig::from_toml(
            "[resp]\nlisten = \"127.0.0.1:9\"\n[http]\nlisten = \"127.0.0.1:9\"",
        )
        .unwrap_err();
        assert!(e.to_string().contains("different ports"), "{e}");
    }

    /// The `[cluster]` example of the README.
    fn readme_cluster_example() -> String {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("### Cluster configuration").unwrap()..];
        let start = section.find("```toml\n").unwrap() + 8;
        section[start..start + section[start..].find("```").unwrap()].to_owned()
    }

    #[test]
    fn the_readme_encrypted_cluster_example_parses() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme
            .find("### An encrypted cluster with named users")
            .unwrap()..];
        let start = section.find("```toml\n").unwrap() + 8;
        let text = &section[start..start + section[start..].find("```").unwrap()];
        let c = NodeConfig::from_toml(text).unwrap();
        c.validate().unwrap();
        assert!(c.resp.tls_cluster && c.http.tls && c.s3.tls);
        assert_eq!(c.resp.plain_listen(), None);
        assert_eq!(c.s3.users["AKIDAPP"], "app");
        let acl = crate::resp::RespConfig::from(&c.resp).acl;
        let users = crate::resp::acl::Users::new(&acl, None).unwrap();
        assert!(users.authenticate(b"app", b"apppass").is_some());
        assert!(!users.default_needs_no_auth(), "default is off");
    }

    #[test]
    fn the_readme_repart_example_parses() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("### Worker shards and repartitioning").unwrap()..];
        let start = section.find("```toml\n").unwrap() + 8;
        let text = &section[start..start + section[start..].find("```").unwrap()];
        let c = NodeConfig::from_toml(text).unwrap();
        c.validate().unwrap();
        assert_eq!(c.repart.mode, crate::repart::Mode::NonStop);
        assert_eq!(c.repart.window, 1000);
        assert_eq!(c.repart.actor_nice, 10);
        assert_eq!(c.repart.max_tracker_lag, 1 << 18);
    }

    #[test]
    fn repart_is_refused_on_a_cluster_node_and_validated_alone() {
        let text = format!(
            "{}\n[repart]\nmode = \"non_stop\"\n",
            readme_cluster_example()
        );
        let e = NodeConfig::from_toml(&text)
            .and_then(|c| c.validate())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("repart.mode = non_stop applies to standalone"),
            "{e}"
        );
        let mut c = NodeConfig::default();
        c.repart.mode = crate::repart::Mode::NonStop;
        c.repart.shards = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("repart.shards")
        );
        let e = NodeConfig::from_toml("[repart]\nmode = \"base\"\n").unwrap_err();
        assert!(e.to_string().contains("repart.mode"), "{e}");
    }

    #[test]
    fn the_readme_transactional_bucket_example_parses() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("### Transactional buckets").unwrap()..];
        let start = section.find("```toml\n").unwrap() + 8;
        let text = &section[start..start + section[start..].find("```").unwrap()];
        // A bucket table goes beside a [cluster] section.
        let c = NodeConfig::from_toml(&format!("{}\n{text}", readme_cluster_example())).unwrap();
        let bank = &c.buckets["bank"];
        assert_eq!(
            bank.bucket_type,
            meridian_replication::BucketType::Transactional
        );
        assert_eq!(
            bank.txn.source(),
            meridian_replication::TimestampSource::ClockSi
        );
        assert_eq!(bank.txn.txn_backups, Some(0));
    }

    #[test]
    fn the_readme_planner_example_parses_and_applies() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("### Moving transactional keys").unwrap()..];
        let start = section.find("```toml\n").unwrap() + 8;
        let text = &section[start..start + section[start..].find("```").unwrap()];
        let c = NodeConfig::from_toml(&format!("{}\n{text}", readme_cluster_example())).unwrap();
        let p = &c.txn.planner;
        assert!(p.enabled);
        assert_eq!(
            p.planner_config(),
            Some(meridian_replication::PlannerConfig {
                window: 10_000,
                plan_interval_us: 60_000_000,
                min_gain: 16,
                max_moves_per_round: 1000,
                min_residence_us: 600_000_000,
                geo_weight: 0,
            })
        );
        // The example spells out the defaults, enabled aside.
        assert_eq!(
            *p,
            PlannerSection {
                enabled: true,
                ..PlannerSection::default()
            }
        );
        assert_eq!(NodeConfig::from_toml(&c.to_toml().unwrap()).unwrap(), c);
    }

    #[test]
    fn the_planner_is_off_by_default_and_every_range_is_checked_by_name() {
        let c = NodeConfig::default();
        assert!(!c.txn.planner.enabled);
        assert_eq!(c.txn.planner.planner_config(), None);
        assert!(!c.to_toml().unwrap().contains("txn"), "default left out");
        let c = NodeConfig::from_toml(
            "[txn.planner]\nenabled = true\nplan_interval_ms = 2000\nmin_residence_ms = 0\n\
             geo_weight = 4\nwindow = 500\n",
        )
        .unwrap();
        let cfg = c.txn.planner.planner_config().unwrap();
        assert_eq!(cfg.plan_interval_us, 2_000_000);
        assert_eq!(cfg.min_residence_us, 0);
        assert_eq!((cfg.geo_weight, cfg.window), (4, 500));
        assert_eq!(cfg.max_moves_per_round, 1000, "unset: the default");
        let err = |line: &str| {
            NodeConfig::from_toml(&format!("[txn.planner]\n{line}\n"))
                .unwrap_err()
                .to_string()
        };
        for (line, name) in [
            ("window = 10000001", "txn.planner.window"),
            ("plan_interval_ms = 999", "txn.planner.plan_interval_ms"),
            (
                "plan_interval_ms = 604800001",
                "txn.planner.plan_interval_ms",
            ),
            ("min_gain = 0", "txn.planner.min_gain"),
            ("max_moves_per_round = 0", "txn.planner.max_moves_per_round"),
            (
                "max_moves_per_round = 100001",
                "txn.planner.max_moves_per_round",
            ),
            (
                "min_residence_ms = 604800001",
                "txn.planner.min_residence_ms",
            ),
            ("geo_weight = 1000000001", "txn.planner.geo_weight"),
            ("min_gain = -1", "min_gain"),
            ("enabled = \"yes\"", "enabled"),
            ("interval_ms = 5", "interval_ms"),
        ] {
            let e = err(line);
            assert!(e.contains(name), "{line}: {e}");
        }
        // Checked while off too, so switching it on never reveals an old mistake.
        let e = err("enabled = false\nmin_gain = 0");
        assert!(e.contains("txn.planner.min_gain"), "{e}");
        let e = NodeConfig::from_toml("[txn]\nplanner = 1\n").unwrap_err();
        assert!(e.to_string().contains("planner"), "{e}");
    }

    #[test]
    fn the_readme_balance_example_parses() {
        let readme = include_str!("../../../README.md");
        let section = &readme[readme.find("### Read load balancing").unwrap()..];
        let start = section.find("```toml\n").unwrap() + 8;
        let text = &section[start..start + section[start..].find("```").unwrap()];
        let c = NodeConfig::from_toml(&format!("{}\n{text}", readme_cluster_example())).unwrap();
        assert_eq!(
            c.buckets["catalog"].props.replica_selection,
            Some(meridian_replication::Strategy::C3)
        );
        assert_eq!(c.buckets["catalog"].extra_copies, Some(true));
        assert_eq!(
            c.balance.service_model,
            Some(ServiceModel::Fixed { us: 30_000 })
        );
        assert_eq!(c.balance.read_workers, Some(1));
        assert_eq!(c.balance.copy_timeout_ms, Some(5000));
    }

    #[test]
    fn the_readme_cluster_example_parses_and_round_trips() {
        let c = NodeConfig::from_toml(&readme_cluster_example()).unwrap();
        let cl = c.cluster.as_ref().unwrap();
        assert_eq!((cl.id, cl.members.len(), cl.q, cl.n), (1, 4, 64, 3));
        let dcs = cl.dc_ids();
        assert_eq!((dcs["east"], dcs["west"]), (DcId(0), DcId(1)));
        assert_eq!(c.buckets["sessions"].props.n_val, Some(2));
        let wan = cl.wan.as_ref().unwrap();
        assert_eq!(wan.inter_dc.rtt, std::time::Duration::from_millis(100));
        assert_eq!(NodeConfig::from_toml(&c.to_toml().unwrap()).unwrap(), c);
        // No [cluster]: a single node, unchanged.
        assert_eq!(NodeConfig::default().cluster, None);
    }

    #[test]
    fn a_cluster_naming_other_members_needs_a_peer_secret() {
        let ex = readme_cluster_example();
        let secret_line = ex.lines().find(|l| l.starts_with("secret = ")).unwrap();
        let e = NodeConfig::from_toml(&ex.replace(secret_line, ""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cluster.secret is not set but cluster.members names other nodes"),
            "{e}"
        );
        assert!(e.contains("openssl rand -hex 32"), "how to make one: {e}");
        // A lone member without a secret starts, with a random key nobody else holds.
        let mut c = NodeConfig::from_toml(&ex).unwrap().cluster.unwrap();
        c.members.retain(|m| m.id == c.id);
        c.n = 1;
        c.secret = None;
        c.validate().unwrap();
        assert_ne!(c.peer_secret().unwrap(), c.peer_secret().unwrap());
    }

    #[test]
    fn bad_cluster_sections_are_named() {
        let ex = readme_cluster_example();
        let err = |text: &str| NodeConfig::from_toml(text).unwrap_err().to_string();
        let e = err(&ex.replace("heartbeat_ms = 500", "heartbeat = 500"));
        assert!(e.contains("heartbeat"), "{e}");
        let e = err(&ex.replace("id = 1  ", "id = 9  "));
        assert!(
            e.contains("cluster.id = 9 is not in cluster.members"),
            "{e}"
        );
        let e = err(&ex.replace("id = 4", "id = 3"));
        assert!(e.contains("duplicate id 3"), "{e}");
        let e = err(&ex.replace("10.0.2.2:7946", "10.0.2.1:7946"));
        assert!(e.contains("share the peer address 10.0.2.1:7946"), "{e}");
        let e = err(&ex.replace("n = 3 ", "n = 5 "));
        assert!(e.contains("cluster.n = 5"), "{e}");
        let e = err(&ex.replace("dc = \"east\"                   #", "dc = \"west\" #"));
        assert!(e.contains("cluster.dc = 'west'"), "{e}");
        let e = err(&ex.replace("handoff_ms = 10000", "handoff_ms = 0"));
        assert!(e.contains("cluster.handoff_ms"), "{e}");
        // Durable cluster nodes are allowed.
        let c = NodeConfig::from_toml(&ex.replace(
            "[resp]",
            "[storage]\nengine = \"fjall\"\ndata_dir = \"/tmp/d\"\n[resp]",
        ))
        .unwrap();
        assert_eq!(c.storage.engine, EngineKind::Fjall);
        let e = err("[buckets.x]\nr = \"one\"\n");
        assert!(e.contains("need a [cluster] section"), "{e}");
    }

    #[test]
    fn blob_settings_parse_and_every_range_is_checked_by_name() {
        let c = NodeConfig::from_toml(
            "[blob]\nchunk_size = 262144\nmax_open_handles = 10\nchunk_placement = \"spread\"\n",
        )
        .unwrap();
        assert_eq!(c.blob.chunk_size, 256 << 10);
        assert_eq!(c.blob.max_open_handles, 10);
        let err = |line: &str| {
            NodeConfig::from_toml(&format!("[blob]\n{line}\n"))
                .unwrap_err()
                .to_string()
        };
        for (line, name) in [
            ("chunk_size = 1024", "blob.chunk_size"),
            ("threshold = 99999999", "blob.threshold"),
            ("window = 0", "blob.window"),
            ("prefetch = 65", "blob.prefetch"),
            ("max_inflight_bytes = 10", "blob.max_inflight_bytes"),
            ("max_object = 0", "blob.max_object"),
            ("version_grace_ms = 0", "blob.version_grace_ms"),
            (
                "chunk_repair_interval_ms = 0",
                "blob.chunk_repair_interval_ms",
            ),
            ("scrub_interval_ms = 0", "blob.scrub_interval_ms"),
            ("scrub_bytes_per_sec = 0", "blob.scrub_bytes_per_sec"),
            ("tcp_buffer = 1", "blob.tcp_buffer"),
            ("link_bandwidth = 0", "blob.link_bandwidth"),
            ("max_open_handles = 0", "blob.max_open_handles"),
            ("max_handle_bytes = 1", "blob.max_handle_bytes"),
            ("handle_idle_ms = 0", "blob.handle_idle_ms"),
            ("bulk_lanes = 65", "blob.bulk_lanes"),
            ("chunk_size = -1", "chunk_size"),
            ("nope = 1", "nope"),
        ] {
            let e = err(line);
            assert!(e.contains(name), "{line}: {e}");
        }
    }

    #[test]
    fn balance_settings_parse_validate_and_apply() {
        let ex = readme_cluster_example();
        let c = NodeConfig::from_toml(&format!(
            "{ex}\n[balance]\nservice_model = \"fixed:30\"\nread_workers = 1\n\
             hot_period_ms = 500\ndeferred_claim = \"cancel\"\n\n[buckets.hot]\nreplica_selection = \"c3\"\n\
             extra_copies = true\n"
        ))
        .unwrap();
        assert_eq!(
            c.balance.service_model,
            Some(ServiceModel::Fixed { us: 30_000 })
        );
        assert_eq!(c.balance.read_workers, Some(1));
        let hot = &c.buckets["hot"];
        assert_eq!(
            hot.props.replica_selection,
            Some(meridian_replication::Strategy::C3)
        );
        assert_eq!(hot.extra_copies, Some(true));
        // Round trip through TOML.
        assert_eq!(NodeConfig::from_toml(&c.to_toml().unwrap()).unwrap(), c);
        // Applied to the replication node's configuration; unset ones keep its defaults.
        let mut rc = meridian_replication::NodeConfig::new(NodeId(1));
        c.balance.apply(&mut rc);
        assert_eq!(rc.service_model, ServiceModel::Fixed { us: 30_000 });
        assert_eq!(rc.read_workers, 1);
        assert_eq!(rc.hot_period, std::time::Duration::from_millis(500));
        assert_eq!(rc.copy_lease, std::time::Duration::from_secs(1));
        assert_eq!(
            rc.deferred_claim,
            meridian_replication::DeferredClaim::Cancel
        );
        // A config without [balance] writes none.
        assert!(!NodeConfig::default().to_toml().unwrap().contains("balance"));

        let err = |text: &str| NodeConfig::from_toml(text).unwrap_err().to_string();
        for (text, want) in [
            ("[balance]\nread_workers = 0", "balance.read_workers"),
            ("[balance]\nread_workers = 100000", "balance.read_workers"),
            ("[balance]\nread_workers = -1", "read_workers"),
            (
                "[balance]\nservice_model = \"fixed:0\"",
                "invalid service_model `fixed:0`",
            ),
            (
                "[balance]\nservice_model = \"fast\"",
                "invalid service_model `fast`",
            ),
            ("[balance]\nservice_model = \"exp:1e9\"", "service_model"),
            ("[balance]\nservice_model = 30", "service_model"),
            ("[balance]\nhot_period_ms = 0", "balance.hot_period_ms"),
            (
                "[balance]\ncopy_lease_ms = 99999999999",
                "balance.copy_lease_ms",
            ),
            ("[balance]\nworkers = 2", "workers"),
            ("[balance]\ndeferred_claim = \"first\"", "deferred_claim"),
        ] {
            let e = err(text);
            assert!(e.contains(want), "{text}: {e}");
        }
        let e = err(&format!(
            "{ex}\n[buckets.hot]\nreplica_selection = \"fastest\"\n"
        ));
        assert!(e.contains("fastest") && e.contains("dynamic_snitch"), "{e}");
        let e = err(&format!("{ex}\n[buckets.hot]\nextra_copies = \"yes\"\n"));
        assert!(e.contains("extra_copies") || e.contains("boolean"), "{e}");
    }

    #[test]
    fn engine_and_fsync_parse_from_flags() {
        assert_eq!("FJALL".parse::<EngineKind>().unwrap(), EngineKind::Fjall);
        assert!(
            "rocks"
                .parse::<EngineKind>()
                .unwrap_err()
                .contains("mem or fjall")
        );
        assert_eq!("never".parse::<Durability>().unwrap(), Durability::Never);
    }

    #[test]
    fn memory_section_takes_bytes_or_units_and_a_policy() {
        let c = NodeConfig::from_toml("").unwrap();
        assert_eq!(c.memory.maxmemory_bytes().unwrap(), 0);
        assert_eq!(c.memory.policy().unwrap().name(), "noeviction");
        assert!(
            !c.to_toml().unwrap().contains("[memory]"),
            "default left out"
        );
        let c = NodeConfig::from_toml(
            "[memory]\nmaxmemory = \"100mb\"\nmaxmemory_policy = \"allkeys-lru\"",
        )
        .unwrap();
        assert_eq!(c.memory.maxmemory_bytes().unwrap(), 100 << 20);
        assert_eq!(c.memory.policy().unwrap().name(), "allkeys-lru");
        assert_eq!(NodeConfig::from_toml(&c.to_toml().unwrap()).unwrap(), c);
        let c = NodeConfig::from_toml("[memory]\nmaxmemory = 1048576").unwrap();
        assert_eq!(c.memory.maxmemory_bytes().unwrap(), 1 << 20);
        let e = NodeConfig::from_toml("[memory]\nmaxmemory = -1").unwrap_err();
        assert!(e.to_string().contains("maxmemory"), "{e}");
    }
}

/// How `Debug` shows a secret: whether it is set, never its value.
pub(crate) fn redacted(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| "<redacted>")
}

impl std::fmt::Debug for RespSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespSection")
            .field("listen", &self.listen)
            .field("requirepass", &redacted(&self.requirepass))
            .field("max_clients", &self.max_clients)
            .field("max_bulk_len", &self.max_bulk_len)
            .field("max_multibulk_len", &self.max_multibulk_len)
            .field("max_inline_len", &self.max_inline_len)
            .field("max_script_memory", &self.max_script_memory)
            .field("misrouted", &self.misrouted)
            // User lines may hold `>password` rules: only their number is shown.
            .field("users", &self.users.len())
            .field("aclfile", &self.aclfile)
            .field("acl_pubsub_default", &self.acl_pubsub_default)
            .field("protected_mode", &self.protected_mode)
            .field("port", &self.port)
            .field("tls_port", &self.tls_port)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .field("tls_ca_cert_file", &self.tls_ca_cert_file)
            .field("tls_auth_clients", &self.tls_auth_clients)
            .field("tls_protocols", &self.tls_protocols)
            .field("tls_ciphersuites", &self.tls_ciphersuites)
            .field("tls_handshake_timeout_ms", &self.tls_handshake_timeout_ms)
            .field("tls_cluster", &self.tls_cluster)
            .finish()
    }
}

impl std::fmt::Debug for S3Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Access key ids are not secret; what follows their `:` is.
        let ids: Vec<&str> = self
            .keys
            .iter()
            .map(|k| k.split_once(':').map_or("<malformed>", |(id, _)| id))
            .collect();
        f.debug_struct("S3Section")
            .field("listen", &self.listen)
            .field("keys (ids; secrets redacted)", &ids)
            .field("users", &self.users)
            .field("open", &self.open)
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout_ms", &self.header_read_timeout_ms)
            .field("idle_timeout_ms", &self.idle_timeout_ms)
            .field("tls", &self.tls)
            .finish()
    }
}

impl std::fmt::Debug for ClusterSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSection")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("dc", &self.dc)
            .field("peer_listen", &self.peer_listen)
            .field("q", &self.q)
            .field("n", &self.n)
            .field("seed", &self.seed)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("handoff_ms", &self.handoff_ms)
            .field("anti_entropy_ms", &self.anti_entropy_ms)
            .field("members", &self.members)
            .field("join", &self.join)
            .field("wan", &self.wan)
            .field("secret", &redacted(&self.secret))
            .finish()
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    /// Attack: a log line or panic message printing the configuration with `{:?}`.
    #[test]
    fn debug_never_prints_a_secret() {
        let mut c = NodeConfig::default();
        c.resp.requirepass = Some("hunter2-resp".into());
        c.s3.keys = vec!["AKIDEXAMPLE:hunter2-s3-secret".into()];
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
        assert!(text.contains("AKIDEXAMPLE"), "{text}");
        let cluster: ClusterSection =
            toml::from_str("id = 1\nsecret = \"hunter2-cluster-secret\"\nmembers = []\n").unwrap();
        let text = format!("{cluster:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
}
