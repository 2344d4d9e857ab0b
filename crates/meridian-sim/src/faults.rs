//! Fault schedules: what goes wrong, when, and for how long — generated from a seed or written
//! by hand — and the driver that applies them to a [`SimCluster`] in virtual time.
//!
//! Every fault has a start and a duration; at its end the driver undoes it (heals the
//! partition, restores the link, restarts the crashed node), so a run ends with a healthy
//! cluster that can quiesce. Clock faults are not undone: a jumped clock stays ahead, as a real
//! one would.
//!
//! Generated schedules keep the faults a correct eventual-consistency store must survive
//! without losing acknowledged writes: at most one node is down at a time (so quorum writes
//! always keep a copy on a live node), and at most one disk wipe per run.

use crate::cluster::SimCluster;
use meridian_core::{DcId, NodeId};
use meridian_net::wan::{DeliveryMode, LinkConfig, Scope};
use meridian_replication::MetaChange;
use rand::Rng;
use std::fmt;
use std::time::Duration;

/// One fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The node crashes and restarts after the fault's duration; `wipe`: its disk is lost
    /// too (else it loses only what its fsync policy allows).
    Crash {
        /// The node.
        node: NodeId,
        /// Whether the disk is lost.
        wipe: bool,
    },
    /// Messages from DC `a` to DC `b` are dropped (and back, unless `one_way`).
    PartitionDcs {
        /// One side.
        a: DcId,
        /// The other side.
        b: DcId,
        /// Only `a → b`.
        one_way: bool,
    },
    /// Messages from node `a` to node `b` are dropped (and back, unless `one_way`).
    PartitionNodes {
        /// One side.
        a: NodeId,
        /// The other side.
        b: NodeId,
        /// Only `a → b`.
        one_way: bool,
    },
    /// The node can neither send nor receive.
    Isolate {
        /// The node.
        node: NodeId,
    },
    /// Inter-DC messages are lost, duplicated and reordered (datagram semantics).
    Lossy {
        /// Loss probability.
        loss: f64,
        /// Duplication probability.
        duplicate: f64,
        /// Reordering probability.
        reorder: f64,
    },
    /// The inter-DC latency grows by `extra` (one way).
    LatencySpike {
        /// The extra one-way delay.
        extra: Duration,
    },
    /// Every link to and from the node gets `extra` one-way delay (an overloaded machine).
    SlowNode {
        /// The node.
        node: NodeId,
        /// The extra one-way delay.
        extra: Duration,
    },
    /// The node's clock jumps forward (permanently).
    ClockJump {
        /// The node.
        node: NodeId,
        /// How far.
        forward: Duration,
    },
    /// The node's clock runs behind true time by `behind` (permanently).
    ClockSkew {
        /// The node.
        node: NodeId,
        /// How far behind.
        behind: Duration,
    },
    /// The node leaves the cluster through the admin path (its partitions and data move to
    /// the others) and joins again at the end of the fault (they move back).
    LeaveRejoin {
        /// The node.
        node: NodeId,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Crash { node, wipe } => {
                write!(
                    f,
                    "crash {node}{}",
                    if *wipe { " (disk wiped)" } else { "" }
                )
            }
            Fault::PartitionDcs { a, b, one_way } => write!(
                f,
                "partition dc{} {} dc{}",
                a.0,
                if *one_way { "->" } else { "<->" },
                b.0
            ),
            Fault::PartitionNodes { a, b, one_way } => {
                write!(
                    f,
                    "partition {a} {} {b}",
                    if *one_way { "->" } else { "<->" }
                )
            }
            Fault::Isolate { node } => write!(f, "isolate {node}"),
            Fault::Lossy {
                loss,
                duplicate,
                reorder,
            } => write!(
                f,
                "lossy WAN (loss {loss:.2}, duplicate {duplicate:.2}, reorder {reorder:.2})"
            ),
            Fault::LatencySpike { extra } => write!(f, "WAN latency +{extra:?}"),
            Fault::SlowNode { node, extra } => write!(f, "slow {node} (+{extra:?})"),
            Fault::ClockJump { node, forward } => write!(f, "clock of {node} jumps +{forward:?}"),
            Fault::ClockSkew { node, behind } => write!(f, "clock of {node} {behind:?} behind"),
            Fault::LeaveRejoin { node } => write!(f, "{node} leaves, then rejoins"),
        }
    }
}

/// A fault at a virtual time, for a while.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledFault {
    /// When it starts, from the start of the workload.
    pub at: Duration,
    /// How long it lasts (ignored by clock faults).
    pub duration: Duration,
    /// What happens.
    pub fault: Fault,
}

/// The kinds of faults a generated schedule may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultKinds {
    /// Node crashes (disk kept per fsync policy).
    pub crash: bool,
    /// One disk wipe per run at most.
    pub wipe: bool,
    /// DC and node-pair partitions (both ways and one way) and isolated nodes.
    pub partition: bool,
    /// Loss, duplication and reordering on the WAN.
    pub lossy: bool,
    /// Latency spikes and slow nodes.
    pub slow: bool,
    /// Clock jumps and skew.
    pub clock: bool,
    /// A node leaves and rejoins (ownership handoff both ways).
    pub membership: bool,
}

impl FaultKinds {
    /// No faults.
    pub const NONE: FaultKinds = FaultKinds {
        crash: false,
        wipe: false,
        partition: false,
        lossy: false,
        slow: false,
        clock: false,
        membership: false,
    };

    /// Every kind.
    pub const ALL: FaultKinds = FaultKinds {
        crash: true,
        wipe: true,
        partition: true,
        lossy: true,
        slow: true,
        clock: true,
        membership: true,
    };

    /// Parses `crash,wipe,partition,lossy,slow,clock`, `all` or `none`.
    pub fn parse(s: &str) -> Result<FaultKinds, String> {
        let mut k = FaultKinds::NONE;
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "all" => k = FaultKinds::ALL,
                "none" => k = FaultKinds::NONE,
                "crash" => k.crash = true,
                "wipe" => k.wipe = true,
                "partition" => k.partition = true,
                "lossy" => k.lossy = true,
                "slow" => k.slow = true,
                "clock" => k.clock = true,
                "membership" => k.membership = true,
                other => {
                    return Err(format!(
                        "unknown fault kind '{other}': expected crash, wipe, partition, lossy, \
                         slow, clock, membership, all or none"
                    ));
                }
            }
        }
        Ok(k)
    }

    fn any(&self) -> bool {
        *self != FaultKinds::NONE
    }
}

impl fmt::Display for FaultKinds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (self.crash, "crash"),
            (self.wipe, "wipe"),
            (self.partition, "partition"),
            (self.lossy, "lossy"),
            (self.slow, "slow"),
            (self.clock, "clock"),
            (self.membership, "membership"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// Generates a schedule over `duration`: faults one after another (each 2–15 % of the run,
/// with gaps), so at most one is active at a time. `machines` lists `(node, dc)`.
pub fn generate(
    rng: &mut impl Rng,
    kinds: FaultKinds,
    machines: &[(NodeId, DcId)],
    duration: Duration,
) -> Vec<ScheduledFault> {
    let mut out = Vec::new();
    if !kinds.any() || machines.is_empty() {
        return out;
    }
    let dcs = machines.iter().map(|m| m.1.0).max().unwrap_or(0) + 1;
    let mut wiped = false;
    let mut t = duration.mul_f64(rng.random_range(0.02..0.10));
    while t < duration.mul_f64(0.9) {
        // Every fault ends before the workload does, so the run heals while clients watch.
        let len = duration
            .mul_f64(rng.random_range(0.02..0.15))
            .min(duration.mul_f64(0.95).saturating_sub(t));
        let node = machines[rng.random_range(0..machines.len())].0;
        let mut options: Vec<Fault> = Vec::new();
        if kinds.crash {
            options.push(Fault::Crash { node, wipe: false });
        }
        if kinds.wipe && !wiped {
            options.push(Fault::Crash { node, wipe: true });
        }
        if kinds.partition {
            if dcs > 1 {
                let a = rng.random_range(0..dcs);
                let b = (a + rng.random_range(1..dcs)) % dcs;
                options.push(Fault::PartitionDcs {
                    a: DcId(a),
                    b: DcId(b),
                    one_way: rng.random_bool(0.3),
                });
            }
            options.push(Fault::Isolate { node });
            let other = machines[rng.random_range(0..machines.len())].0;
            if other != node {
                options.push(Fault::PartitionNodes {
                    a: node,
                    b: other,
                    one_way: rng.random_bool(0.3),
                });
            }
        }
        if kinds.lossy {
            options.push(Fault::Lossy {
                loss: rng.random_range(0.01..0.2),
                duplicate: rng.random_range(0.0..0.1),
                reorder: rng.random_range(0.0..0.2),
            });
        }
        if kinds.slow {
            options.push(Fault::LatencySpike {
                extra: Duration::from_millis(rng.random_range(50..500)),
            });
            options.push(Fault::SlowNode {
                node,
                extra: Duration::from_millis(rng.random_range(20..300)),
            });
        }
        if kinds.clock {
            options.push(Fault::ClockJump {
                node,
                forward: Duration::from_millis(rng.random_range(100..60_000)),
            });
            options.push(Fault::ClockSkew {
                node,
                behind: Duration::from_millis(rng.random_range(10..5_000)),
            });
        }
        if kinds.membership {
            options.push(Fault::LeaveRejoin { node });
        }
        let fault = options.swap_remove(rng.random_range(0..options.len()));
        if matches!(fault, Fault::Crash { wipe: true, .. }) {
            wiped = true;
        }
        out.push(ScheduledFault {
            at: t,
            duration: len,
            fault,
        });
        t += len + duration.mul_f64(rng.random_range(0.02..0.10));
    }
    out
}

/// Starts `f` on `c`; returns a line for the run's log.
pub async fn apply(c: &mut SimCluster, f: &Fault) -> String {
    let wan = c.wan().clone();
    let inter = wan.config().inter_dc;
    match f {
        Fault::Crash { node, wipe } => return c.crash(*node, *wipe),
        Fault::PartitionDcs { a, b, one_way } => {
            if *one_way {
                wan.cut(Scope::Dc(*a), Scope::Dc(*b));
            } else {
                wan.cut_both(Scope::Dc(*a), Scope::Dc(*b));
            }
        }
        Fault::PartitionNodes { a, b, one_way } => {
            if *one_way {
                wan.cut(Scope::Node(*a), Scope::Node(*b));
            } else {
                wan.cut_both(Scope::Node(*a), Scope::Node(*b));
            }
        }
        Fault::Isolate { node } => wan.isolate(*node),
        Fault::Lossy {
            loss,
            duplicate,
            reorder,
        } => {
            wan.set_mode(DeliveryMode::Datagram);
            let link = inter
                .with_loss(*loss)
                .with_duplicate(*duplicate)
                .with_reorder(*reorder);
            wan.set_inter_dc(link).expect("valid link");
        }
        Fault::LatencySpike { extra } => {
            wan.set_inter_dc(inter.clone().with_rtt(inter.rtt + *extra * 2))
                .expect("valid link");
        }
        Fault::SlowNode { node, extra } => {
            for (other, dc) in c.machines() {
                if other == *node {
                    continue;
                }
                let base = if Some(dc) == c.machines().iter().find(|m| m.0 == *node).map(|m| m.1) {
                    wan.config().intra_dc
                } else {
                    inter.clone()
                };
                let slow = base.clone().with_rtt(base.rtt + *extra * 2);
                wan.set_node_link(*node, other, slow.clone())
                    .expect("valid link");
                wan.set_node_link(other, *node, slow).expect("valid link");
            }
        }
        Fault::ClockJump { node, forward } => {
            c.set_clock_offset(*node, forward.as_micros() as i64);
        }
        Fault::ClockSkew { node, behind } => {
            c.set_clock_offset(*node, -(behind.as_micros() as i64));
        }
        Fault::LeaveRejoin { node } => {
            // One attempt: a leave refused (a handoff still running) is itself an outcome.
            return match c.change_membership(MetaChange::Leave(*node), 1).await {
                Ok(()) => format!("{f}"),
                Err(e) => format!("{f}: leave refused ({e})"),
            };
        }
    }
    format!("{f}")
}

/// Ends `f` on `c` (clock faults stay); `baseline` is the inter-DC link before any fault.
pub async fn undo(c: &mut SimCluster, f: &Fault, baseline: &LinkConfig) {
    let wan = c.wan().clone();
    match f {
        Fault::Crash { node, .. } => c.restart(*node),
        Fault::PartitionDcs { a, b, one_way } => {
            if *one_way {
                wan.heal(Scope::Dc(*a), Scope::Dc(*b));
            } else {
                wan.heal_both(Scope::Dc(*a), Scope::Dc(*b));
            }
        }
        Fault::PartitionNodes { a, b, one_way } => {
            if *one_way {
                wan.heal(Scope::Node(*a), Scope::Node(*b));
            } else {
                wan.heal_both(Scope::Node(*a), Scope::Node(*b));
            }
        }
        Fault::Isolate { .. } => wan.heal_all(),
        Fault::Lossy { .. } => {
            wan.set_mode(DeliveryMode::Stream);
            wan.set_inter_dc(baseline.clone()).expect("valid link");
        }
        Fault::LatencySpike { .. } => {
            wan.set_inter_dc(baseline.clone()).expect("valid link");
        }
        Fault::SlowNode { node, .. } => {
            for (other, _) in c.machines() {
                wan.clear_node_link(*node, other);
                wan.clear_node_link(other, *node);
            }
        }
        Fault::ClockJump { .. } | Fault::ClockSkew { .. } => {}
        Fault::LeaveRejoin { node } => {
            if let Err(e) = c.rejoin(*node).await {
                tracing::warn!(%node, error = %e, "simulated rejoin refused");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn machines() -> Vec<(NodeId, DcId)> {
        (1..=6).map(|i| (NodeId(i), DcId((i - 1) / 3))).collect()
    }

    #[test]
    fn schedules_are_seeded_sequential_and_wipe_at_most_once() {
        let d = Duration::from_secs(600);
        for seed in 0..200 {
            let a = generate(
                &mut ChaCha8Rng::seed_from_u64(seed),
                FaultKinds::ALL,
                &machines(),
                d,
            );
            let b = generate(
                &mut ChaCha8Rng::seed_from_u64(seed),
                FaultKinds::ALL,
                &machines(),
                d,
            );
            assert_eq!(a, b);
            assert!(!a.is_empty());
            for w in a.windows(2) {
                assert!(w[0].at + w[0].duration < w[1].at, "overlap: {w:?}");
            }
            assert!(a.iter().all(|f| f.at + f.duration <= d));
            let wipes = a
                .iter()
                .filter(|f| matches!(f.fault, Fault::Crash { wipe: true, .. }))
                .count();
            assert!(wipes <= 1);
        }
        let none = generate(
            &mut ChaCha8Rng::seed_from_u64(1),
            FaultKinds::NONE,
            &machines(),
            d,
        );
        assert!(none.is_empty());
    }

    #[test]
    fn kinds_parse_and_print() {
        assert_eq!(FaultKinds::parse("all").unwrap(), FaultKinds::ALL);
        let k = FaultKinds::parse("crash, partition").unwrap();
        assert!(k.crash && k.partition && !k.wipe);
        assert_eq!(k.to_string(), "crash,partition");
        assert!(
            FaultKinds::parse("meteor")
                .unwrap_err()
                .contains("unknown fault kind")
        );
        // Only the requested kinds appear.
        let only = generate(
            &mut ChaCha8Rng::seed_from_u64(3),
            FaultKinds::parse("clock").unwrap(),
            &machines(),
            Duration::from_secs(60),
        );
        assert!(
            only.iter()
                .all(|f| matches!(f.fault, Fault::ClockJump { .. } | Fault::ClockSkew { .. }))
        );
    }
}
