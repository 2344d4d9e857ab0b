//! Transactional scenarios (spec `transactions.md`): the bank audit, SI and the write-skew
//! positive control, the negative controls (each must be caught), the session controls and
//! the seed sweep of the clock nemesis with crashes. Every run prints its scenario and seed;
//! `meridian sim --scenario NAME --seed S` replays it.

use meridian_sim::AnomalyKind;
use meridian_sim::scenario::{Report, run, scenario, scenarios};

fn run_named(name: &str, seed: u64) -> Report {
    let s = scenario(name).unwrap_or_else(|| panic!("no scenario {name}"));
    println!("scenario {name} seed {seed}");
    let r = run(&s, seed);
    println!("{r}");
    r
}

fn failed_checks(r: &Report) -> Vec<&'static str> {
    r.verdicts
        .iter()
        .filter(|v| !v.passed())
        .map(|v| v.checker)
        .collect()
}

/// The checked transactional scenarios, one seed each: bank audits constant, no negative
/// balance, list-append strong-session SI, write skew passing SI, the counter exact, no
/// prepared mark after healing — for Clock-SI and the oracle, with no faults, the clock
/// nemesis, crashes and partitions.
#[test]
fn txn_scenarios_pass_bank_audit_and_si() {
    let mut failures = Vec::new();
    for s in scenarios() {
        if s.txn.is_none() || !s.ci {
            continue;
        }
        let r = run_named(s.name, 1);
        let txn = r.txn.as_ref().expect("a transactional report");
        assert!(txn.audits.len() > 2, "{}: too few audits", s.name);
        assert!(
            txn.list_append.events.len() > 100,
            "{}: too few list-append transactions",
            s.name
        );
        if !r.passed {
            failures.push(format!("meridian sim --scenario {} --seed 1", s.name));
        }
    }
    assert!(
        failures.is_empty(),
        "failing runs:\n{}",
        failures.join("\n")
    );
}

/// Positive control: write skew happens, is flagged not serializable, and passes SI.
#[test]
fn write_skew_is_not_serializable_but_is_si() {
    let r = run_named("txn-write-skew", 1);
    assert!(r.passed);
    let txn = r.txn.as_ref().unwrap();
    let ser = txn.skew_serializable.as_ref().unwrap();
    assert!(!ser.valid && ser.has(AnomalyKind::G2Item), "{ser:?}");
    assert!(txn.skew_si.as_ref().unwrap().valid);
}

/// Each negative control must be caught, by the checks named.
#[test]
fn negative_controls_are_caught() {
    for (name, must) in [
        ("txn-neg-no-r1", &["txn-si"][..]),
        ("txn-neg-no-r2", &["txn-si"][..]),
        ("txn-neg-no-certify", &["txn-counter", "txn-si"][..]),
        ("txn-neg-early-commit-ts", &["txn-si"][..]),
        ("txn-neg-move-clock", &["txn-bank"][..]),
    ] {
        let r = run_named(name, 1);
        let failed = failed_checks(&r);
        assert!(r.passed, "{name}: the negative control was not caught");
        for m in must {
            assert!(
                failed.contains(m),
                "{name}: {m} did not catch it ({failed:?})"
            );
        }
    }
}

/// Session: Clock-SI with Δ = 300 ms and no session token misses its own commits
/// (G-single-process under strong-session SI); with the token it passes.
#[test]
fn session_token_gives_strong_session_si() {
    let r = run_named("txn-session-delta", 1);
    assert!(r.passed, "the missing session token was not caught");
    let si = r.txn.as_ref().unwrap().si.as_ref().unwrap();
    assert!(si.has(AnomalyKind::GSingleProcess), "{:?}", si.kinds());
    let r = run_named("txn-session-token", 1);
    assert!(r.passed);
}

fn txn_seeds() -> u64 {
    std::env::var("TXN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100)
}

/// The seed sweep of the clock nemesis with crashes: `TXN_SEEDS` seeds (default 100) of
/// `txn-nemesis` (Clock-SI) and as many of `txn-nemesis-tso` (200 runs by default).
#[test]
fn txn_nemesis_seed_sweep() {
    let seeds = txn_seeds();
    let mut failures = Vec::new();
    for name in ["txn-nemesis", "txn-nemesis-tso"] {
        let s = scenario(name).unwrap();
        for seed in 1..=seeds {
            let r = run(&s, seed);
            println!(
                "scenario {name} seed {seed}: {}",
                if r.passed { "PASS" } else { "FAIL" }
            );
            if !r.passed {
                println!("{r}");
                failures.push(format!("meridian sim --scenario {name} --seed {seed}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing runs, replay with:\n{}",
        failures.join("\n")
    );
}

/// Cross-node key moves (spec `repartitioning.md` §6, invariant 9): accounts and list keys
/// move between leaders under the bank, list-append SI and the counter, with steady clocks,
/// the clock nemesis and the oracle; every check passes and keys did move.
#[test]
fn txn_key_moves_keep_bank_audits_and_si() {
    let mut failures = Vec::new();
    for name in ["txn-moves", "txn-moves-clocks", "txn-moves-tso"] {
        for seed in 1..=txn_seeds().min(3) {
            let r = run_named(name, seed);
            let moved = r
                .notes
                .iter()
                .find_map(|n| n.strip_prefix("key moves: "))
                .and_then(|n| n.split(' ').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            assert!(moved >= 20, "{name} seed {seed}: only {moved} keys moved");
            if !r.passed {
                failures.push(format!(
                    "meridian sim --scenario {name} --seed {seed}: {:?}",
                    failed_checks(&r)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failing runs:\n{}",
        failures.join("\n")
    );
}
