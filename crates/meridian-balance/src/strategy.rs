//! The replica-selection strategies by name: what a bucket property, a request option or a
//! command line chooses (spec §§1–2).

use serde::{Deserialize, Serialize};

/// A replica-selection strategy. Immediate strategies order the candidates and the read goes
/// to the first (the next on failure); deferred ones ([`Strategy::Naive`], [`Strategy::Avr`])
/// enqueue the read at every candidate and the replicas decide who serves it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The preference list's order: the coordinator's DC first, ring order inside it (the
    /// spec's `primary`).
    #[default]
    LocalFirst,
    /// Uniform, seeded.
    Random,
    /// A rotating counter per coordinator and replica set.
    RoundRobin,
    /// Fewest requests this coordinator has in flight at the replica ("Glouton"); ties random.
    LeastOutstanding,
    /// Shortest queue the replica last reported.
    LeastQueue,
    /// d = 2 candidates sampled uniformly, the one with fewer outstanding requests.
    PowerOfD,
    /// The first two in primary order, the one with fewer outstanding requests.
    FirstTwo,
    /// Cassandra's dynamic snitch (3.x defaults).
    DynamicSnitch,
    /// C3 (NSDI'15): cubic queue-penalised scores, per-replica rate control, backpressure.
    C3,
    /// Deferred: enqueued everywhere, the first free replica claims it.
    Naive,
    /// Deferred: asynchronous peeling against the root's average load.
    Avr,
}

impl Strategy {
    /// Every strategy, in documentation order.
    pub const ALL: [Strategy; 11] = [
        Strategy::LocalFirst,
        Strategy::Random,
        Strategy::RoundRobin,
        Strategy::LeastOutstanding,
        Strategy::LeastQueue,
        Strategy::PowerOfD,
        Strategy::FirstTwo,
        Strategy::DynamicSnitch,
        Strategy::C3,
        Strategy::Naive,
        Strategy::Avr,
    ];

    /// Whether the read is enqueued at every candidate (Naive, AVR).
    pub fn is_deferred(self) -> bool {
        matches!(self, Strategy::Naive | Strategy::Avr)
    }

    /// The strategy's name as configuration spells it.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::LocalFirst => "local_first",
            Strategy::Random => "random",
            Strategy::RoundRobin => "round_robin",
            Strategy::LeastOutstanding => "least_outstanding",
            Strategy::LeastQueue => "least_queue",
            Strategy::PowerOfD => "power_of_d",
            Strategy::FirstTwo => "first_two",
            Strategy::DynamicSnitch => "dynamic_snitch",
            Strategy::C3 => "c3",
            Strategy::Naive => "naive",
            Strategy::Avr => "avr",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Strategy, String> {
        Strategy::ALL
            .into_iter()
            .find(|x| x.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<&str> = Strategy::ALL.iter().map(|x| x.name()).collect();
                format!(
                    "unknown replica_selection `{s}`: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// How a replica about to serve a deferred (Naive or AVR) read makes sure no other candidate
/// serves it too (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferredClaim {
    /// The study's rule: broadcast `Cancel` to the other candidates, then serve. Replicas
    /// that pop the same read at the same instant both serve it (with a fixed service time
    /// they do so in lockstep, halving the capacity of a key's replicas).
    Cancel,
    /// Ask the read's coordinator first, which grants the first claim only: one intra-DC
    /// round trip per read, and never a duplicate service.
    #[default]
    Token,
}

impl DeferredClaim {
    /// The name as configuration spells it.
    pub fn name(self) -> &'static str {
        match self {
            DeferredClaim::Cancel => "cancel",
            DeferredClaim::Token => "token",
        }
    }
}

impl std::fmt::Display for DeferredClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DeferredClaim {
    type Err = String;

    fn from_str(s: &str) -> Result<DeferredClaim, String> {
        [DeferredClaim::Cancel, DeferredClaim::Token]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown deferred claim `{s}`: expected cancel or token"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>(), Ok(s));
        }
        for c in [DeferredClaim::Cancel, DeferredClaim::Token] {
            assert_eq!(c.to_string().to_uppercase().parse::<DeferredClaim>(), Ok(c));
        }
        assert!("fastest".parse::<Strategy>().is_err());
        assert!(
            "".parse::<DeferredClaim>()
                .unwrap_err()
                .contains("cancel or token")
        );
    }
}
