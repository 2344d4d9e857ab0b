//! Replica selection: the strategy names a bucket and a request choose, and the load each
//! replica reports back with a read reply so a strategy can follow it.
//!
//! The strategies themselves live in `meridian-balance` (spec `load-balancing.md`); this
//! crate re-exports the two types its parameters carry: [`ReplicaSelection`] (a quorum
//! parameter like the others: bucket default, per-request override) and [`ReplicaLoad`] (the
//! feedback piggy-backed on every read reply).

pub use meridian_balance::LoadFeedback as ReplicaLoad;
pub use meridian_balance::Strategy as ReplicaSelection;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_snake_case_and_unknown_ones_are_refused() {
        let s: ReplicaSelection = serde_json::from_str("\"local_first\"").unwrap();
        assert_eq!(s, ReplicaSelection::LocalFirst);
        let s: ReplicaSelection = serde_json::from_str("\"dynamic_snitch\"").unwrap();
        assert_eq!(s, ReplicaSelection::DynamicSnitch);
        assert!(serde_json::from_str::<ReplicaSelection>("\"fastest\"").is_err());
        assert_eq!("C3".parse::<ReplicaSelection>(), Ok(ReplicaSelection::C3));
    }
}
