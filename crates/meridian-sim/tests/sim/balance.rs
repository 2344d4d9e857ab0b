//! The extra-copy invariants under faults ([`meridian_sim::balance_run`]): `BALANCE_SEEDS`
//! seeds (default 200), each printed and replayable with
//! `meridian_sim::balance_run::run(seed, ..)`.

use meridian_sim::balance_run::run;
use std::time::Duration;

fn seeds() -> u64 {
    std::env::var("BALANCE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

#[test]
fn extra_copies_never_serve_a_replaced_version_under_faults() {
    let mut failures = Vec::new();
    let mut served_by_copies = 0;
    let n = seeds();
    for seed in 1..=n {
        let r = run(seed, Duration::from_secs(20));
        println!(
            "balance seed {seed}: {}",
            if r.passed() { "PASS" } else { "FAIL" }
        );
        if !r.passed() {
            println!("{r}");
            failures.push(seed);
        }
        assert!(r.reads_ok > 1000, "seed {seed}: the readers ran ({r})");
        assert!(
            r.writes_ok > 0,
            "seed {seed}: some writes were acknowledged ({r})"
        );
        if r.extra_reads > 0 {
            served_by_copies += 1;
        }
    }
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
    // The invariant is only tested if copies existed: in most runs they served reads.
    assert!(
        served_by_copies * 2 > n,
        "extra copies served reads in only {served_by_copies} of {n} runs"
    );
}

/// Replays one seed of the sweep with its report: `BALANCE_SEED=N cargo test -p
/// meridian-sim --test sim replay_balance_seed -- --nocapture`.
#[test]
fn replay_balance_seed() {
    if let Some(seed) = std::env::var("BALANCE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        let r = run(seed, Duration::from_secs(20));
        println!("{r}");
        assert!(r.passed(), "{r}");
    }
}
