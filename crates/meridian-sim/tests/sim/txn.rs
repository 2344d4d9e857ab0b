//! Transactional scenarios (spec `transactions.md`): the bank audit, SI and the write-skew
//! positive control, the negative controls (each must be caught), the session controls and
//! the seed sweep of the clock nemesis with crashes. Every run prints its scenario and seed;
//! `meridian sim --scenario NAME --seed S` replays it.

use meridian_sim::scenario::{Report, run, scenario};
use std::time::Duration;

fn run_named(name: &str, seed: u64, duration: Option<Duration>) -> Report {
    let mut s = scenario(name).unwrap_or_else(|| panic!("no scenario {name}"));
    if let Some(d) = duration {
        s.duration = d;
    }
    println!("scenario {name} seed {seed}");
    let r = run(&s, seed);
    println!("{r}");
    r
}

#[test]
fn explore() {
    let name = std::env::var("TXN_SCENARIO").unwrap_or_else(|_| "txn-bank".into());
    let seed = std::env::var("TXN_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let t = std::time::Instant::now();
    let r = run_named(&name, seed, None);
    println!("wall {:?}", t.elapsed());
    assert!(r.passed);
}
