//! Tests of the replica-choice study on tiny scenarios.

use super::*;

/// A tiny version of the scenario: 8 nodes, f = 2, 64 objects, `fixed:30`, one phase.
fn tiny(strategy: Strategy, copies: bool, lambda: f64, requests: usize, dist: KeyDist) -> Scenario {
    let mut sc = Scenario::dynamic(strategy, copies, lambda, requests, 7);
    sc.nodes = 8;
    sc.objects = 64;
    sc.phases = vec![dist];
    sc.drain_cap = Duration::from_secs(600);
    sc
}

#[test]
fn zipf_phases_follow_the_paper_and_permute_their_ranks() {
    let sc = Scenario::dynamic(Strategy::Naive, false, 256.0, 50_000, 3);
    let (reqs, starts) = generate(&sc, &[]);
    assert_eq!(reqs.len(), 50_000);
    let firsts: Vec<usize> = starts.iter().map(|s| s.0).collect();
    assert_eq!(firsts, [0, 10_000, 20_000, 30_000, 40_000]);
    // Zipf(2) over 256 objects: the top object takes 1/H = 60.9 %.
    let tops: Vec<usize> = starts.iter().filter_map(|s| s.1).collect();
    assert_eq!(tops.len(), 2);
    assert_ne!(
        tops[0], tops[1],
        "the permutation is redrawn per Zipf phase"
    );
    let share = |lo: usize, obj: usize| {
        reqs[lo..lo + 10_000]
            .iter()
            .filter(|r| usize::from(r.obj) == obj)
            .count() as f64
            / 10_000.0
    };
    assert!((share(10_000, tops[0]) - 0.609).abs() < 0.02);
    assert!((share(30_000, tops[1]) - 0.609).abs() < 0.02);
    assert!(
        share(0, tops[0]) < 0.02,
        "uniform phases have no hot object"
    );
    // Poisson at 256/s: 50 000 arrivals in ≈ 195 s; coordinators uniform.
    let end = reqs[49_999].at_us as f64 / 1e6;
    assert!((end - 50_000.0 / 256.0).abs() < 5.0, "{end}");
    assert!(reqs.iter().all(|r| r.coord < 32));
    // Same seed, same workload.
    assert_eq!(generate(&sc, &[]).0, reqs);
}

#[test]
fn round_robin_throughput_follows_lambda_and_caps_at_the_service_model() {
    // 8 nodes × 1 worker × 30 ms: ideal 267 req/s.
    let r = run_blocking(&tiny(
        Strategy::RoundRobin,
        false,
        120.0,
        1_200,
        KeyDist::Uniform,
    ))
    .expect("run");
    assert_eq!((r.completed, r.failed, r.unfinished), (1_200, 0, 0));
    let served = r.completions_between(1, r.arrivals_end_s.floor() as usize);
    assert!(
        (served / 120.0 - 1.0).abs() < 0.15,
        "served {served} req/s at λ = 120"
    );
    // One service time plus one LAN round trip, with a little queueing.
    let p50 = r.q_ms(0.5);
    assert!((32.0..45.0).contains(&p50), "p50 {p50} ms");
    // Offered 600 req/s, more than every node can serve: the cluster serves its capacity.
    let r = run_blocking(&tiny(
        Strategy::RoundRobin,
        false,
        600.0,
        3_000,
        KeyDist::Uniform,
    ))
    .expect("run");
    let served = r.completions_between(1, r.arrivals_end_s.floor() as usize);
    let ideal = 8.0 / 0.030;
    assert!(
        served <= ideal * 1.02 && served >= ideal * 0.85,
        "served {served} req/s, ideal {ideal}"
    );
}

#[test]
fn dynamic_snitch_backlog_grows_under_zipf_unless_copies_absorb_it() {
    // Zipf(2) over 64 objects at 160 req/s: the top object needs 98 req/s, its two
    // replicas serve 66.7.
    let z = run_blocking(&tiny(
        Strategy::DynamicSnitch,
        false,
        160.0,
        1_600,
        KeyDist::Zipf(2.0),
    ))
    .expect("run");
    let u = run_blocking(&tiny(
        Strategy::DynamicSnitch,
        false,
        160.0,
        1_600,
        KeyDist::Uniform,
    ))
    .expect("run");
    assert_eq!(z.completed + u.completed, 3_200);
    let (a, b) = z.phase_window(0);
    let start = z.issued_mean_s(a, a + (b - a) / 10.0);
    let end = z.phase_end_s(0);
    // The backlog grows by ≈ 31 req/s for 10 s: ≈ 4.6 s of waiting by the end.
    assert!(
        end > 2.0 && end > 5.0 * start,
        "Zipf: start {start} s, end {end} s"
    );
    assert!(
        u.phase_end_s(0) < 0.2,
        "uniform: end {} s",
        u.phase_end_s(0)
    );
    // With extra copies the root gives the hot object ⌊0.614·8⌋ = 4 more holders within
    // a few periods: 6 × 33.3 req/s > 98, so the backlog drains before the phase ends.
    let c = run_blocking(&tiny(
        Strategy::DynamicSnitch,
        true,
        160.0,
        1_600,
        KeyDist::Zipf(2.0),
    ))
    .expect("run");
    assert_eq!((c.completed, c.failed), (1_600, 0));
    assert!(
        c.extra_reads > 100,
        "{} reads served by copies",
        c.extra_reads
    );
    assert!(
        c.phase_end_s(0) < 0.5 && c.phase_end_s(0) * 4.0 < end,
        "copies: end {} s, without: {end} s",
        c.phase_end_s(0)
    );
    // Same seed, same numbers.
    let again = run_blocking(&tiny(
        Strategy::DynamicSnitch,
        false,
        160.0,
        1_600,
        KeyDist::Zipf(2.0),
    ))
    .expect("run");
    assert_eq!(again.latency, z.latency);
    assert_eq!(again.bins, z.bins);
}
