//! The simulator's integration tests, one binary: the checkers on generated histories, whole
//! simulated runs of the named scenarios, and the determinism lints.

mod balance;
mod checkers;
mod lint;
mod scenarios;
mod txn;
