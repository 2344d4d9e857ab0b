//! `[repart]`: how a node's worker-shard executor runs and repartitions (spec
//! `repartitioning.md` §1, §3, §4). Every field is validated once, with an error naming it.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// When (and whether) the key → shard map is recomputed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mode {
    /// No executor: requests run on the connection's task, as without this section.
    Off,
    /// "SW": one shard executes everything.
    Single,
    /// "RR": new keys go to shards round-robin; the map never changes.
    RoundRobin,
    /// Stop the world every `interval` dispatched requests: wait for the tracker, copy the
    /// graph and partition it while dispatch waits, swap.
    Base {
        /// Δp, in dispatched requests.
        interval: u64,
    },
    /// Partition every `interval` tracked requests, asynchronously; swap when ready.
    Free {
        /// Δp, in tracked requests.
        interval: u64,
    },
    /// Continuously: a new partition starts as soon as the previous map was swapped in.
    NonStop,
}

impl Mode {
    /// Whether requests feed the co-access graph.
    pub fn tracks(self) -> bool {
        matches!(self, Mode::Base { .. } | Mode::Free { .. } | Mode::NonStop)
    }

    /// Whether requests go through the executor at all.
    pub fn enabled(self) -> bool {
        self != Mode::Off
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Off => f.write_str("off"),
            Mode::Single => f.write_str("single"),
            Mode::RoundRobin => f.write_str("round_robin"),
            Mode::Base { interval } => write!(f, "base:{interval}"),
            Mode::Free { interval } => write!(f, "free:{interval}"),
            Mode::NonStop => f.write_str("non_stop"),
        }
    }
}

impl FromStr for Mode {
    type Err = String;
    /// `off`, `single`, `round_robin`, `base:Δp`, `free:Δp`, `non_stop`.
    fn from_str(s: &str) -> Result<Self, String> {
        let interval = |v: &str| -> Result<u64, String> {
            match v.parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "repart.mode: interval '{v}' must be a positive number of requests"
                )),
            }
        };
        match s.split_once(':') {
            None => match s {
                "off" => Ok(Mode::Off),
                "single" | "sw" => Ok(Mode::Single),
                "round_robin" | "rr" => Ok(Mode::RoundRobin),
                "non_stop" | "ns" => Ok(Mode::NonStop),
                "base" | "free" => Err(format!(
                    "repart.mode: '{s}' needs its interval, as '{s}:100000'"
                )),
                _ => Err(format!(
                    "repart.mode: unknown mode '{s}': expected off, single, round_robin, base:Δp, free:Δp or non_stop"
                )),
            },
            Some(("base", v)) => Ok(Mode::Base {
                interval: interval(v)?,
            }),
            Some(("free", v)) => Ok(Mode::Free {
                interval: interval(v)?,
            }),
            Some(_) => Err(format!(
                "repart.mode: unknown mode '{s}': expected off, single, round_robin, base:Δp, free:Δp or non_stop"
            )),
        }
    }
}

/// Which partitioner computes new maps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionerKind {
    /// METIS k-way (multilevel), as the study.
    #[default]
    Metis,
    /// Restreamed FENNEL, pure Rust.
    Fennel,
}

impl FromStr for PartitionerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "metis" => Ok(Self::Metis),
            "fennel" => Ok(Self::Fennel),
            _ => Err(format!(
                "repart.partitioner: unknown partitioner '{s}': expected metis or fennel"
            )),
        }
    }
}

/// What a swap does with mapped keys the new partition does not mention (keys not in the
/// graph's window).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnmappedPolicy {
    /// As kvpaxos: they are forgotten and placed as new keys at their next access.
    Drop,
    /// They stay on their current shard.
    #[default]
    Keep,
}

impl FromStr for UnmappedPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop" => Ok(Self::Drop),
            "keep" => Ok(Self::Keep),
            _ => Err(format!(
                "repart.unmapped_policy: unknown policy '{s}': expected drop or keep"
            )),
        }
    }
}

/// Where the dispatcher places a key no partition has placed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NewKeys {
    /// On the shard its id hashes to, recording nothing: a lookup of such a key probes only
    /// the partitioned keys' table, which stays small (the graph's window), so the map costs
    /// no cache miss per request however many keys a node holds. Several new keys of one
    /// request may land on several shards.
    #[default]
    Hash,
    /// As the study: on the next shard in turn, all of one request's new keys on one
    /// shard, and the map remembers each — one more table probe per request, which at 10⁵
    /// keys misses the cache.
    RoundRobin,
}

impl FromStr for NewKeys {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hash" => Ok(Self::Hash),
            "round_robin" => Ok(Self::RoundRobin),
            _ => Err(format!(
                "repart.new_keys: unknown placement '{s}': expected hash or round_robin"
            )),
        }
    }
}

/// What runs a node's worker shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workers {
    /// One OS thread per shard (pinned with `pin`), as the study: a request crosses threads
    /// twice (to its shard, and its reply back).
    #[default]
    Threads,
    /// One task per shard on the node's own runtime: no thread crossing when a runtime
    /// worker is free, which on a machine with few cores costs far less.
    Tasks,
}

impl FromStr for Workers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "threads" => Ok(Self::Threads),
            "tasks" => Ok(Self::Tasks),
            _ => Err(format!(
                "repart.workers: unknown kind '{s}': expected threads or tasks"
            )),
        }
    }
}

/// The most worker shards a node runs.
pub const MAX_SHARDS: u32 = 256;

/// The largest `repart.max_tracker_lag`: about 550 MB of waiting requests at 8 keys each.
pub const MAX_TRACKER_LAG: u64 = 1 << 22;

/// `[repart]` in a node's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepartConfig {
    /// `off` (the default), `single`, `round_robin`, `base:Δp`, `free:Δp`, `non_stop`.
    #[serde(with = "mode_string")]
    pub mode: Mode,
    /// P, the number of worker shards (8).
    pub shards: u32,
    /// W, the graph's window in requests (0: every request since start).
    pub window: usize,
    /// Each shard's queue capacity in requests (0: unbounded, the connection limits bound
    /// it). A full queue makes the dispatcher wait.
    pub queue_cap: usize,
    /// `metis` or `fennel`.
    pub partitioner: PartitionerKind,
    /// METIS's allowed imbalance in thousandths above 1 (200: 1.2, as kvpaxos).
    pub ufactor: i32,
    /// The partitioner's seed (METIS; FENNEL is deterministic).
    pub seed: i32,
    /// Map new labels onto current shards so the fewest keys move.
    pub relabel: bool,
    /// `drop` or `keep`.
    pub unmapped_policy: UnmappedPolicy,
    /// Where keys no partition placed go: `hash` or `round_robin` (the study's).
    pub new_keys: NewKeys,
    /// `threads` (one per shard) or `tasks` (on the node's runtime).
    pub workers: Workers,
    /// A connection runs a single-shard request itself when its shard is idle (nothing
    /// queued, nothing running), instead of handing it to the shard's worker: the same order
    /// and exclusion, without two thread crossings. Off, every request goes through the
    /// queues (a single dispatching thread, as the study's replay, needs that to run shards
    /// in parallel).
    pub inline: bool,
    /// Pin shard i's thread to CPU i mod (CPUs this process may use).
    pub pin: bool,
    /// How much nicer than the node (0..=19) the tracker's and the partitioner's threads
    /// run: their work is background work, and on a host short of cores it should yield the
    /// CPU to the connections and the shards rather than deschedule a thread that is
    /// dispatching. 0: the node's own priority.
    pub actor_nice: i32,
    /// The most requests handed to the tracker and not yet in its graph. Past it the
    /// dispatcher leaves further requests out of the graph until the tracker catches up, so
    /// a tracker short of CPU costs the graph samples, not unbounded memory (a waiting
    /// request costs 16 bytes per key and 4 more: 5 MB at the default, single-key).
    pub max_tracker_lag: u64,
    /// Swap a new partition in only if it cuts the co-access weight split across shards by
    /// at least this fraction of what the current map splits (on the same graph), or fixes
    /// an imbalance above `max_imbalance`. 0: swap every new partition, as kvpaxos does.
    pub min_gain: f64,
    /// The heaviest shard's share of the window over the mean above which a partition that
    /// balances better is swapped in even without a cut gain.
    pub max_imbalance: f64,
}

impl Default for RepartConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            shards: 8,
            window: 1_000,
            queue_cap: 0,
            partitioner: PartitionerKind::Metis,
            ufactor: 200,
            seed: 1,
            relabel: true,
            unmapped_policy: UnmappedPolicy::Keep,
            new_keys: NewKeys::Hash,
            workers: Workers::Threads,
            inline: true,
            pin: true,
            actor_nice: 10,
            max_tracker_lag: 1 << 18,
            min_gain: 0.05,
            max_imbalance: 1.5,
        }
    }
}

impl RepartConfig {
    /// Checks every field; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(format!(
                "repart.shards: {} is out of range: expected 1..={MAX_SHARDS}",
                self.shards
            ));
        }
        if !(1..=10_000).contains(&self.ufactor) {
            return Err(format!(
                "repart.ufactor: {} is out of range: expected 1..=10000 (thousandths of imbalance)",
                self.ufactor
            ));
        }
        if !(0..=19).contains(&self.actor_nice) {
            return Err(format!(
                "repart.actor_nice: {} is out of range: expected 0..=19",
                self.actor_nice
            ));
        }
        if !(1..=MAX_TRACKER_LAG).contains(&self.max_tracker_lag) {
            return Err(format!(
                "repart.max_tracker_lag: {} is out of range: expected 1..={MAX_TRACKER_LAG} requests",
                self.max_tracker_lag
            ));
        }
        if !(0.0..=1.0).contains(&self.min_gain) {
            return Err(format!(
                "repart.min_gain: {} is out of range: expected a fraction in 0..=1",
                self.min_gain
            ));
        }
        if !(self.max_imbalance >= 1.0 && self.max_imbalance.is_finite()) {
            return Err(format!(
                "repart.max_imbalance: {} is out of range: expected at least 1.0",
                self.max_imbalance
            ));
        }
        Ok(())
    }

    /// The number of shards the mode runs.
    pub fn shard_count(&self) -> u32 {
        if self.mode == Mode::Single {
            1
        } else {
            self.shards
        }
    }
}

mod mode_string {
    use super::Mode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &Mode, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(m)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_back() {
        for s in [
            "off",
            "single",
            "round_robin",
            "base:100000",
            "free:1000",
            "non_stop",
        ] {
            let m: Mode = s.parse().unwrap();
            assert_eq!(m.to_string(), s);
        }
        assert_eq!("rr".parse::<Mode>().unwrap(), Mode::RoundRobin);
        for bad in [
            "base",
            "base:0",
            "base:-1",
            "free:x",
            "stop",
            "non_stop:3",
            "",
        ] {
            let e = bad.parse::<Mode>().unwrap_err();
            assert!(e.starts_with("repart.mode"), "{bad}: {e}");
        }
    }

    #[test]
    fn validation_names_the_field() {
        let c = RepartConfig {
            shards: 0,
            ..RepartConfig::default()
        };
        assert!(c.validate().unwrap_err().starts_with("repart.shards"));
        let c = RepartConfig {
            shards: MAX_SHARDS + 1,
            ..RepartConfig::default()
        };
        assert!(c.validate().unwrap_err().starts_with("repart.shards"));
        let c = RepartConfig {
            ufactor: 0,
            ..RepartConfig::default()
        };
        assert!(c.validate().unwrap_err().starts_with("repart.ufactor"));
        for nice in [-1, 20, i32::MIN] {
            let c = RepartConfig {
                actor_nice: nice,
                ..RepartConfig::default()
            };
            assert!(c.validate().unwrap_err().starts_with("repart.actor_nice"));
        }
        for lag in [0, MAX_TRACKER_LAG + 1, u64::MAX] {
            let c = RepartConfig {
                max_tracker_lag: lag,
                ..RepartConfig::default()
            };
            assert!(
                c.validate()
                    .unwrap_err()
                    .starts_with("repart.max_tracker_lag")
            );
        }
        for (gain, imb, field) in [
            (-0.1, 1.5, "repart.min_gain"),
            (f64::NAN, 1.5, "repart.min_gain"),
            (0.1, 0.5, "repart.max_imbalance"),
            (0.1, f64::INFINITY, "repart.max_imbalance"),
        ] {
            let c = RepartConfig {
                min_gain: gain,
                max_imbalance: imb,
                ..RepartConfig::default()
            };
            assert!(c.validate().unwrap_err().starts_with(field), "{gain} {imb}");
        }
        assert!(RepartConfig::default().validate().is_ok());
    }

    #[test]
    fn toml_round_trip() {
        let c: RepartConfig =
            toml::from_str("mode = \"free:5000\"\nshards = 4\npartitioner = \"fennel\"").unwrap();
        assert_eq!(c.mode, Mode::Free { interval: 5000 });
        assert_eq!(c.shards, 4);
        assert_eq!(c.partitioner, PartitionerKind::Fennel);
        assert!(toml::from_str::<RepartConfig>("mode = \"bogus\"").is_err());
        assert!(toml::from_str::<RepartConfig>("shardz = 3").is_err());
        let c: RepartConfig = toml::from_str("new_keys = \"round_robin\"").unwrap();
        assert_eq!(c.new_keys, NewKeys::RoundRobin);
        assert_eq!(RepartConfig::default().new_keys, NewKeys::Hash);
        let e = toml::from_str::<RepartConfig>("new_keys = \"random\"").unwrap_err();
        assert!(e.to_string().contains("new_keys"), "{e}");
        let e = "random".parse::<NewKeys>().unwrap_err();
        assert!(e.starts_with("repart.new_keys"), "{e}");
        assert_eq!("hash".parse::<NewKeys>(), Ok(NewKeys::Hash));
    }
}
