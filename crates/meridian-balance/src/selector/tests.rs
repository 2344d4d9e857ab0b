//! Unit and property tests of the [`Balancer`](super::Balancer): candidate ordering per
//! strategy and how sends, replies and failures update the per-peer state.

use super::*;
use proptest::prelude::{TestCaseError, any, prop_assert, prop_assert_eq, prop_oneof, proptest};
use proptest::strategy::Strategy as Gen;

fn ids(v: &[u32]) -> Vec<NodeId> {
    v.iter().map(|&i| NodeId(i)).collect()
}

fn sorted(v: &[NodeId]) -> Vec<NodeId> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn fb(queue: u32, service_us: u32) -> Option<LoadFeedback> {
    Some(LoadFeedback { queue, service_us })
}

#[derive(Debug, Clone)]
enum Op {
    Order(usize, Vec<u32>),
    Admit(Vec<u32>),
    Send(u32),
    Reply(u32, u32, u32, u32),
    Fail(u32),
    Wait(bool),
}

fn cands() -> impl Gen<Value = Vec<u32>> {
    proptest::collection::btree_set(0u32..12, 0..8)
        .prop_map(|s| s.into_iter().collect::<Vec<_>>())
        .prop_shuffle()
}

fn op() -> impl Gen<Value = (u16, Op)> {
    let op = prop_oneof![
        4 => (0..Strategy::ALL.len(), cands()).prop_map(|(s, c)| Op::Order(s, c)),
        1 => cands().prop_map(Op::Admit),
        2 => (0u32..12).prop_map(Op::Send),
        2 => (0u32..12, 0u32..200_000, 0u32..50, 0u32..100_000)
            .prop_map(|(n, rtt, q, s)| Op::Reply(n, rtt, q, s)),
        1 => (0u32..12).prop_map(Op::Fail),
        1 => any::<bool>().prop_map(Op::Wait),
    ];
    (0u16..5_000, op)
}

/// Runs `ops` (time advancing by the first of each pair, in 100 µs steps, so resets
/// and score updates happen) and logs every answer.
fn run(seed: u64, ops: &[(u16, Op)]) -> Result<Vec<String>, TestCaseError> {
    let cfg = BalancerConfig {
        coordinators: 3,
        snitch: SnitchConfig {
            reset_interval_us: 20_000_000,
            ..SnitchConfig::default()
        },
        c3: C3Config {
            backlog_max: 3,
            ..C3Config::default()
        },
        ..BalancerConfig::default()
    };
    let mut b = Balancer::new(cfg, seed);
    let mut now: Micros = 0;
    let mut log = Vec::new();
    for (step, op) in ops {
        now += Micros::from(*step) * 100;
        match op {
            Op::Order(s, c) => {
                let (s, c) = (Strategy::ALL[*s], ids(c));
                let o = b.order(s, &c, now);
                prop_assert_eq!(sorted(&o), sorted(&c), "{} is not a permutation", s);
                if matches!(s, Strategy::LocalFirst | Strategy::Naive | Strategy::Avr) {
                    prop_assert_eq!(&o, &c);
                }
                log.push(format!("{s} {o:?}"));
            }
            Op::Admit(c) => {
                let r = b.c3_admit(&ids(c), now);
                match r {
                    Ok(n) => prop_assert!(c.contains(&n.0)),
                    Err(t) => prop_assert!(t > now),
                }
                log.push(format!("admit {r:?}"));
            }
            Op::Send(n) => b.on_send(NodeId(*n), now),
            Op::Reply(n, rtt, q, s) => b.on_reply(NodeId(*n), Micros::from(*rtt), fb(*q, *s), now),
            Op::Fail(n) => b.on_failure(NodeId(*n), now),
            Op::Wait(begin) => {
                if *begin {
                    log.push(format!("wait {}", b.c3_wait_begin()));
                } else {
                    b.c3_wait_end();
                }
            }
        }
    }
    let peers = b.peers();
    prop_assert!(peers.windows(2).all(|w| w[0].node < w[1].node));
    log.push(format!("{peers:?}"));
    Ok(log)
}

proptest! {
    /// Invariants 1 and 2: every strategy answers a permutation of its input (so never
    /// a node outside it) whatever the history, and the same seed and calls give the
    /// same answers.
    #[test]
    fn orders_are_deterministic_permutations(
        seed: u64,
        ops in proptest::collection::vec(op(), 0..120),
    ) {
        let a = run(seed, &ops)?;
        let b = run(seed, &ops)?;
        prop_assert_eq!(a, b);
    }
}

#[test]
fn seeds_change_random_choices() {
    let c = ids(&[0, 1, 2, 3, 4, 5, 6, 7]);
    let orders = |seed| {
        let mut b = Balancer::new(BalancerConfig::default(), seed);
        (0..10)
            .map(|_| b.order(Strategy::Random, &c, 0))
            .collect::<Vec<_>>()
    };
    assert_eq!(orders(1), orders(1));
    assert_ne!(orders(1), orders(2));
}

#[test]
fn trivial_inputs() {
    let mut b = Balancer::new(BalancerConfig::default(), 0);
    for s in Strategy::ALL {
        assert!(b.order(s, &[], 5).is_empty());
        assert_eq!(b.order(s, &ids(&[4]), 5), ids(&[4]));
    }
    let e = b.c3_admit(&[], 7).unwrap_err();
    assert!(e > 7);
    b.on_reply(NodeId(3), 10, None, 8);
    b.on_failure(NodeId(3), 9);
    assert_eq!(b.peers()[0].outstanding, 0, "saturating");
}

/// Invariant 3: within any prefix of calls on a set, the counts of each member in first
/// position differ by at most one, whatever order the set comes in, and sets are
/// counted apart.
#[test]
fn round_robin_is_even_per_cycle() {
    let mut b = Balancer::new(BalancerConfig::default(), 3);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let sets = [ids(&[5, 1, 9]), ids(&[2, 3, 4, 6, 7]), ids(&[8, 1])];
    let mut firsts: Vec<BTreeMap<NodeId, u32>> = vec![BTreeMap::new(); 3];
    for _ in 0..600 {
        let k = rng.random_range(0..sets.len());
        let mut c = sets[k].clone();
        c.shuffle(&mut rng);
        let o = b.order(Strategy::RoundRobin, &c, 0);
        assert_eq!(sorted(&o), sorted(&c));
        // A rotation of the given order.
        let at = c.iter().position(|&n| n == o[0]).unwrap();
        let mut r = c.clone();
        r.rotate_left(at);
        assert_eq!(o, r);
        *firsts[k].entry(o[0]).or_insert(0) += 1;
        let counts: Vec<u32> = sets[k]
            .iter()
            .map(|n| firsts[k].get(n).copied().unwrap_or(0))
            .collect();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(hi - lo <= 1, "set {k}: {counts:?}");
    }
}

#[test]
fn least_outstanding_and_first_two_follow_outstanding() {
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    let c = ids(&[1, 2, 3]);
    for (n, k) in [(1, 3), (2, 1), (3, 2)] {
        for _ in 0..k {
            b.on_send(NodeId(n), 0);
        }
    }
    assert_eq!(b.order(Strategy::LeastOutstanding, &c, 0), ids(&[2, 3, 1]));
    // first_two looks at n1 (3) and n2 (1) only.
    assert_eq!(b.order(Strategy::FirstTwo, &c, 0), ids(&[2, 1, 3]));
    assert_eq!(
        b.order(Strategy::FirstTwo, &ids(&[3, 1, 2]), 0),
        ids(&[3, 1, 2])
    );
    // Ties: random, so both tied nodes lead sometimes; first_two keeps primary order.
    let mut t = Balancer::new(BalancerConfig::default(), 1);
    let leads: std::collections::BTreeSet<NodeId> = (0..40)
        .map(|_| t.order(Strategy::LeastOutstanding, &c, 0)[0])
        .collect();
    assert_eq!(leads.len(), 3);
    assert_eq!(t.order(Strategy::FirstTwo, &c, 0), c);
}

#[test]
fn least_queue_uses_feedback_then_outstanding() {
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    b.on_reply(NodeId(1), 100, fb(9, 10), 0);
    b.on_reply(NodeId(2), 100, fb(2, 10), 0);
    b.on_reply(NodeId(3), 100, fb(2, 10), 0);
    b.on_send(NodeId(2), 0);
    assert_eq!(
        b.order(Strategy::LeastQueue, &ids(&[1, 2, 3]), 0),
        ids(&[3, 2, 1])
    );
}

#[test]
fn power_of_d_puts_the_less_loaded_sample_first() {
    let cfg = BalancerConfig {
        power_d: 2,
        ..BalancerConfig::default()
    };
    let mut b = Balancer::new(cfg, 5);
    let c = ids(&[1, 2, 3]);
    for _ in 0..5 {
        b.on_send(NodeId(1), 0);
    }
    let mut leads = BTreeMap::new();
    for _ in 0..300 {
        let o = b.order(Strategy::PowerOfD, &c, 0);
        // The rest stays in primary order.
        let rest: Vec<NodeId> = c.iter().copied().filter(|&n| n != o[0]).collect();
        assert_eq!(o[1..], rest[..]);
        *leads.entry(o[0]).or_insert(0) += 1;
    }
    // n1 leads only when sampled with itself, which d = 2 distinct never does.
    assert_eq!(leads.get(&NodeId(1)), None);
    // With d = all, it is least outstanding on the sample; d = 1 is one random choice.
    let mut one = Balancer::new(BalancerConfig { power_d: 1, ..cfg }, 5);
    for _ in 0..5 {
        one.on_send(NodeId(1), 0);
    }
    assert!((0..100).any(|_| one.order(Strategy::PowerOfD, &c, 0)[0] == NodeId(1)));
}

/// Throws `n` balls into `n` bins, each ball to the first of `order(PowerOfD)` over all
/// bins with exact loads (outstanding, never answered); returns the maximum load.
fn balls_into_bins(n: u32, d: usize, seed: u64) -> u32 {
    let cfg = BalancerConfig {
        power_d: d,
        ..BalancerConfig::default()
    };
    let mut b = Balancer::new(cfg, seed);
    let bins: Vec<NodeId> = (0..n).map(NodeId).collect();
    for _ in 0..n {
        let first = b.order(Strategy::PowerOfD, &bins, 0)[0];
        b.on_send(first, 0);
    }
    b.peers().iter().map(|p| p.outstanding).max().unwrap_or(0)
}

/// Invariant 4: with exact loads, two choices keep the maximum load of n balls in n =
/// 10⁴ bins within ln ln n / ln 2 + O(1) (taken as + 3, i.e. 6.2; in practice 3 or
/// 4; measured 3 for both seeds), while one random choice (d = 1) lands near
/// ln n / ln ln n ≈ 4.1 plus lower-order terms (measured 6): at least 2 more.
#[test]
fn power_of_two_choices_bounds_the_maximum_load() {
    let n = 10_000u32;
    let bound = (f64::from(n).ln().ln() / 2f64.ln() + 3.0).floor() as u32;
    assert_eq!(bound, 6);
    for seed in 0..2 {
        let two = balls_into_bins(n, 2, seed);
        let one = balls_into_bins(n, 1, seed);
        assert!(two <= bound, "seed {seed}: max load {two} > {bound}");
        assert!(
            one >= two + 2,
            "seed {seed}: one choice {one}, two choices {two}"
        );
    }
}

// ---- dynamic snitch ----

const MS: Micros = 1_000;

/// Replies every 2 ms during `[from, to)` from each `(node, rtt)`.
fn feed(b: &mut Balancer, from: Micros, to: Micros, rtts: &[(u32, Micros)]) {
    let mut t = from;
    while t < to {
        for &(n, rtt) in rtts {
            b.on_send(NodeId(n), t);
            b.on_reply(NodeId(n), rtt, None, t);
        }
        t += 2 * MS;
    }
}

#[test]
fn snitch_moves_a_slow_primary_and_forgets_it_after_reset() {
    let cfg = BalancerConfig::default();
    let mut b = Balancer::new(cfg, 1);
    let c = ids(&[1, 2, 3]);
    // Nothing known: primary order.
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 0), c);
    feed(
        &mut b,
        0,
        1_000 * MS,
        &[(1, 50 * MS), (2, 5 * MS), (3, 6 * MS)],
    );
    // Scores were computed at t = 0 (no samples): still primary until the interval
    // passes.
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 50 * MS), c);
    assert_eq!(
        b.order(Strategy::DynamicSnitch, &c, 1_000 * MS),
        ids(&[2, 3, 1])
    );
    let view = b.peers();
    assert!((view[0].snitch_score - 1.0).abs() < 1e-9);
    assert!((view[1].snitch_score - 0.1).abs() < 1e-9);
    // Samples are cleared 600 s after the first event; the scores follow at the next
    // update, and n1 leads again (and stays, now that it is fast).
    let reset = cfg.snitch.reset_interval_us;
    assert_eq!(
        b.order(Strategy::DynamicSnitch, &c, reset - MS),
        ids(&[2, 3, 1])
    );
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, reset + 100 * MS), c);
    feed(
        &mut b,
        reset + 100 * MS,
        reset + 400 * MS,
        &[(1, 2 * MS), (2, 5 * MS), (3, 6 * MS)],
    );
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, reset + 500 * MS), c);
}

#[test]
fn snitch_keeps_primary_order_within_badness() {
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    let c = ids(&[1, 2]);
    // 5.4 / 5 = 1.08 < 1.1: not bad enough.
    feed(&mut b, 0, 500 * MS, &[(1, 5_400), (2, 5_000)]);
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 500 * MS), c);
    // 6 / 5 = 1.2 > 1.1.
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    feed(&mut b, 0, 500 * MS, &[(1, 6_000), (2, 5_000)]);
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 500 * MS), ids(&[2, 1]));
    // Sub-millisecond medians all score below 1 against the max(1, ·) floor: 0.8 vs
    // 0.3 is still a reordering.
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    feed(&mut b, 0, 500 * MS, &[(1, 800), (2, 300)]);
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 500 * MS), ids(&[2, 1]));
}

#[test]
fn snitch_penalises_failures() {
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    let c = ids(&[1, 2]);
    feed(&mut b, 0, 100 * MS, &[(1, 2 * MS), (2, 3 * MS)]);
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 100 * MS), c);
    for i in 0..200 {
        b.on_send(NodeId(1), 100 * MS + i * MS);
        b.on_failure(NodeId(1), 100 * MS + i * MS);
    }
    assert_eq!(b.order(Strategy::DynamicSnitch, &c, 300 * MS), ids(&[2, 1]));
    assert_eq!(b.peers()[0].outstanding, 0);
}

#[test]
fn reservoir_favours_recent_samples_and_survives_rescaling() {
    let cfg = SnitchConfig::default();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut r = Reservoir::new(0);
    assert_eq!(r.median(), 0.0);
    for i in 0..300 {
        r.add(10.0, i * 3 * MS, &cfg, &mut rng);
    }
    assert_eq!(r.median(), 10.0);
    // 60 samples of 1 ms ten seconds later: weight e^7.5 each, they carry the median
    // even though old ones still hold most of the slots.
    for i in 0..60 {
        r.add(1.0, 10_000 * MS + i * MS, &cfg, &mut rng);
    }
    assert_eq!(r.samples.len(), 100);
    assert_eq!(r.median(), 1.0);
    // Two minutes on, α·t = 90 > 64: the landmark moves, weights stay finite, the newest
    // still win.
    for i in 0..60 {
        r.add(4.0, 120_000 * MS + i * MS, &cfg, &mut rng);
    }
    assert!(r.landmark >= 120_000 * MS);
    assert!(
        r.samples
            .iter()
            .all(|s| s.weight.is_finite() && s.priority.is_finite())
    );
    assert_eq!(r.median(), 4.0);
}

// ---- C3 ----

#[test]
fn c3_scores_follow_the_formula() {
    let cfg = BalancerConfig {
        coordinators: 3,
        ..BalancerConfig::default()
    };
    let mut b = Balancer::new(cfg, 1);
    b.on_send(NodeId(1), 0);
    b.on_reply(NodeId(1), 1_500, fb(2, 1_000), 10);
    let p = &b.peers()[0];
    // nw = 500, q = 2, svc = 1000, os = 0: 500 + 3³·1000.
    assert_eq!((p.service_us, p.c3_score), (1_000.0, 27_500.0));
    b.on_send(NodeId(1), 20);
    b.on_send(NodeId(1), 20);
    b.on_reply(NodeId(1), 2_000, fb(12, 1_500), 30);
    // EWMA α = 0.9: q = 11, svc = 1450, nw = 0.9·500 + 0.1·500 = 500; os = 1:
    // 500 + (1 + 3 + 11)³·1450.
    let p = &b.peers()[0];
    assert!((p.service_us - 1_450.0).abs() < 1e-9);
    assert!((p.c3_score - (500.0 + 15f64.powi(3) * 1_450.0)).abs() < 1e-6);
    // A faster peer sorts first; an unknown one scores 0 and is tried first.
    b.on_reply(NodeId(2), 1_200, fb(0, 1_000), 40);
    assert_eq!(b.order(Strategy::C3, &ids(&[1, 2]), 50), ids(&[2, 1]));
    assert_eq!(b.order(Strategy::C3, &ids(&[1, 2, 3]), 50), ids(&[3, 2, 1]));
}

#[test]
fn c3_admit_spends_tokens_and_reports_when_the_next_comes() {
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    let c = ids(&[1, 2]);
    let t0 = 1_000_000;
    // Both replicas report queues, so the rate limiter binds.
    for n in [1, 2] {
        b.on_send(NodeId(n), 0);
        b.on_reply(NodeId(n), 100, fb(4, 50), 0);
    }
    // A full bucket of 10 on each peer, the first preferred.
    for _ in 0..10 {
        assert_eq!(b.c3_admit(&c, t0), Ok(NodeId(1)));
    }
    for _ in 0..10 {
        assert_eq!(b.c3_admit(&c, t0), Ok(NodeId(2)));
    }
    // 10 tokens per 20 ms: the next one in 2 ms.
    assert_eq!(b.c3_admit(&c, t0), Err(t0 + 2_000));
    assert_eq!(b.c3_admit(&c, t0 + 1_999), Err(t0 + 2_000));
    assert_eq!(b.c3_admit(&c, t0 + 2_000), Ok(NodeId(1)));
    assert_eq!(b.c3_admit(&c, t0 + 2_000), Ok(NodeId(2)));
    // Admission is not a send: the caller calls on_send (once each, above).
    assert!(
        b.peers()
            .iter()
            .all(|p| p.outstanding == 0 && p.chosen == 1)
    );
}

#[test]
fn c3_backlog_is_bounded() {
    let cfg = BalancerConfig {
        c3: C3Config {
            backlog_max: 2,
            ..C3Config::default()
        },
        ..BalancerConfig::default()
    };
    let mut b = Balancer::new(cfg, 1);
    assert!(b.c3_wait_begin());
    assert!(b.c3_wait_begin());
    assert!(!b.c3_wait_begin());
    b.c3_wait_end();
    assert!(b.c3_wait_begin());
    b.c3_wait_end();
    b.c3_wait_end();
    b.c3_wait_end();
    assert!(b.c3_wait_begin() && b.c3_wait_begin() && !b.c3_wait_begin());
}

#[test]
fn c3_admits_past_an_empty_bucket_and_keeps_its_rate_while_the_replica_reports_no_queue() {
    let mut b = Balancer::new(BalancerConfig::default(), 1);
    let c = ids(&[1]);
    b.on_send(NodeId(1), 0);
    b.on_reply(NodeId(1), 100, fb(0, 50), 0);
    for _ in 0..100 {
        assert_eq!(b.c3_admit(&c, 1_000), Ok(NodeId(1)));
    }
    let cfg = C3Config::default();
    let mut p = C3Peer::new(1_000_000, &cfg);
    let before = p.srate;
    for i in 0..20 {
        p.on_reply(1_000_000 + i * cfg.delta_us, &cfg);
    }
    assert!(
        p.srate >= before,
        "no decrease without a queue: {}",
        p.srate
    );
}

#[test]
fn c3_rate_grows_cubically_and_backs_off_after_hysteresis() {
    let cfg = C3Config::default();
    let mut p = C3Peer::new(1_000_000, &cfg);
    p.queue = 3.0; // a congested replica: the limiter binds
    // 15 replies within 1 ms: each one above the rate lifts it by at most Smax.
    for i in 0..15 {
        p.on_reply(1_000_000 + i, &cfg);
    }
    assert_eq!(
        p.srate, 20.0,
        "10 → 20 in one Smax step, then the rate is above 15"
    );
    // Replies at 1 per δ from then on: the rate exceeds them, but only once HYST
    // (80 ms) has passed since the last increase does it fall, to β·srate.
    let t_inc = p.t_inc;
    let mut t = t_inc;
    while t <= t_inc + cfg.hyst_us {
        t += cfg.delta_us;
        p.on_reply(t, &cfg);
    }
    assert!((p.srate - 4.0).abs() < 1e-9, "{}", p.srate);
    assert_eq!((p.r0, p.t_dec), (20.0, t));
    // Just after the decrease the cubic restarts from (1 − β)·R0 = 16, capped at
    // srate + Smax = 14.
    p.replies.extend([t, t, t, t, t]);
    p.on_reply(t + 1, &cfg);
    assert!((p.srate - 14.0).abs() < 1e-9, "{}", p.srate);
    p.replies.extend([t; 15]);
    p.on_reply(t + 2, &cfg);
    assert!((p.srate - 16.0).abs() < 0.01, "{}", p.srate);
}

// ---- C3 in a discrete-event run ----

/// What a [`c3_sim`] run observed.
struct C3Run {
    /// Every send: when, to which server.
    sends: Vec<(Micros, usize)>,
    /// Coordinator 0's sending rate to server 0, every millisecond of the sampled span.
    rates: Vec<f64>,
    /// Reads refused because the backlog was full.
    refused: u64,
}

/// A pure discrete-event run in virtual µs: `coords` coordinators, each with its own
/// [`Balancer`] and a Poisson stream of `per_coord` reads/s over every server (the
/// preference order rotating with the read, so every server is primary as often);
/// one FIFO worker per server taking `service[s]` µs per read; one-way network delays
/// of 100–200 µs. C3 orders, `c3_admit` gates, reads without a token wait in the
/// coordinator's FIFO backlog until the earliest token time or a reply.
fn c3_sim(
    cfg: C3Config,
    coords: usize,
    service: &[Micros],
    per_coord: f64,
    until: Micros,
    sample_from: Micros,
) -> C3Run {
    #[derive(Debug, Clone, Copy)]
    enum Ev {
        Arrive(usize),
        Retry(usize),
        AtServer {
            c: usize,
            s: usize,
            sent: Micros,
        },
        Done(usize),
        Reply {
            c: usize,
            s: usize,
            sent: Micros,
            fb: LoadFeedback,
        },
        Sample,
    }
    struct Coord {
        b: Balancer,
        backlog: VecDeque<Vec<NodeId>>,
        retry_at: Option<Micros>,
        next_primary: usize,
    }
    let n = service.len();
    let bcfg = BalancerConfig {
        coordinators: coords as u32,
        c3: cfg,
        ..BalancerConfig::default()
    };
    let mut cs: Vec<Coord> = (0..coords)
        .map(|c| Coord {
            b: Balancer::new(bcfg, c as u64),
            backlog: VecDeque::new(),
            retry_at: None,
            next_primary: c,
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    let mut queues: Vec<VecDeque<(usize, Micros)>> = vec![VecDeque::new(); n];
    let mut busy: Vec<Option<(usize, Micros)>> = vec![None; n];
    let mut events: BTreeMap<(Micros, u64), Ev> = BTreeMap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BTreeMap<(Micros, u64), Ev>, t: Micros, ev: Ev| {
        seq += 1;
        events.insert((t, seq), ev);
    };
    for c in 0..coords {
        push(&mut events, 0, Ev::Arrive(c));
    }
    push(&mut events, sample_from, Ev::Sample);
    let mut run = C3Run {
        sends: Vec::new(),
        rates: Vec::new(),
        refused: 0,
    };
    let gap = |rng: &mut ChaCha8Rng, rate: f64| {
        ((-(1.0 - rng.random::<f64>()).ln() / rate) * 1e6) as Micros + 1
    };
    let hop = |rng: &mut ChaCha8Rng| 100 + rng.random_range(0..100);

    while let Some(((now, _), ev)) = events.pop_first() {
        if now > until {
            break;
        }
        let mut dispatch_at = None;
        match ev {
            Ev::Arrive(c) => {
                let co = &mut cs[c];
                let p = co.next_primary % n;
                co.next_primary += 1;
                let cands: Vec<NodeId> = (0..n).map(|i| NodeId(((p + i) % n) as u32)).collect();
                if co.b.c3_wait_begin() {
                    co.backlog.push_back(cands);
                } else {
                    run.refused += 1;
                }
                let t = now + gap(&mut rng, per_coord);
                push(&mut events, t, Ev::Arrive(c));
                dispatch_at = Some(c);
            }
            Ev::Retry(c) => {
                if cs[c].retry_at == Some(now) {
                    cs[c].retry_at = None;
                }
                dispatch_at = Some(c);
            }
            Ev::AtServer { c, s, sent } => {
                queues[s].push_back((c, sent));
            }
            Ev::Done(s) => {
                if let Some((c, sent)) = busy[s].take() {
                    let fb = LoadFeedback {
                        queue: queues[s].len() as u32,
                        service_us: service[s] as u32,
                    };
                    let t = now + hop(&mut rng);
                    push(&mut events, t, Ev::Reply { c, s, sent, fb });
                }
            }
            Ev::Reply { c, s, sent, fb } => {
                cs[c]
                    .b
                    .on_reply(NodeId(s as u32), now - sent, Some(fb), now);
                dispatch_at = Some(c);
            }
            Ev::Sample => {
                let rate = cs[0]
                    .b
                    .peers()
                    .iter()
                    .find(|p| p.node == NodeId(0))
                    .map_or(0.0, |p| p.c3_rate);
                run.rates.push(rate);
                push(&mut events, now + 1_000, Ev::Sample);
            }
        }
        if let Some(c) = dispatch_at {
            let co = &mut cs[c];
            while let Some(cands) = co.backlog.front() {
                let ordered = co.b.order(Strategy::C3, cands, now);
                match co.b.c3_admit(&ordered, now) {
                    Ok(node) => {
                        co.backlog.pop_front();
                        co.b.c3_wait_end();
                        co.b.on_send(node, now);
                        let s = node.0 as usize;
                        run.sends.push((now, s));
                        let t = now + hop(&mut rng);
                        push(&mut events, t, Ev::AtServer { c, s, sent: now });
                    }
                    Err(t) => {
                        assert!(t > now);
                        if co.retry_at.is_none_or(|r| r > t) {
                            co.retry_at = Some(t);
                            push(&mut events, t, Ev::Retry(c));
                        }
                        break;
                    }
                }
            }
        }
        for s in 0..n {
            if busy[s].is_none()
                && let Some(job) = queues[s].pop_front()
            {
                busy[s] = Some(job);
                push(&mut events, now + service[s], Ev::Done(s));
            }
        }
    }
    run
}

fn share(sends: &[(Micros, usize)], server: usize, from: Micros, to: Micros) -> f64 {
    let window: Vec<usize> = sends
        .iter()
        .filter(|(t, _)| (from..to).contains(t))
        .map(|x| x.1)
        .collect();
    window.iter().filter(|&&s| s == server).count() as f64 / window.len().max(1) as f64
}

/// Invariant 8, first half: f = 3 replicas, server 0 ten times slower (10 ms against
/// 1 ms), 3 coordinators sending 350 reads/s each (1 050/s: a third is 3.5× what the
/// slow server can do). Within 1 s of virtual time C3 sends it less than 1/f of the
/// traffic, and keeps it there. Measured with these seeds: 14 % of the first 100 ms
/// window (before feedback has come back), then 0–5 % of every 100 ms window (its
/// capacity is 9.5 % of the offered load).
#[test]
fn c3_steers_traffic_away_from_a_slow_replica() {
    let run = c3_sim(
        C3Config::default(),
        3,
        &[10_000, 1_000, 1_000],
        350.0,
        3_000_000,
        3_000_000,
    );
    assert_eq!(run.refused, 0);
    let early = share(&run.sends, 0, 500_000, 1_000_000);
    let late = share(&run.sends, 0, 1_000_000, 3_000_000);
    for w in 1..30 {
        let s = share(&run.sends, 0, w * 100_000, (w + 1) * 100_000);
        assert!(s < 1.0 / 3.0, "slow share in 100 ms window {w}: {s}");
    }
    assert!(early < 1.0 / 3.0, "slow share in [0.5 s, 1 s): {early}");
    assert!(late < 1.0 / 3.0, "slow share in [1 s, 3 s): {late}");
    // Everything sent got through: the fast replicas were not starved of tokens.
    assert!(run.sends.len() as f64 > 0.95 * 3.0 * 350.0 * 3.0);
}

/// Coordinator 0's rate to server 0 over the sampled span, relative to `mu` (tokens
/// per δ the server can serve): (mean, p5, p95, min, max, share of samples within
/// ±20 %).
fn rate_band(rates: &[f64], mu: f64) -> (f64, f64, f64, f64, f64, f64) {
    let mut r: Vec<f64> = rates.iter().map(|x| x / mu).collect();
    r.sort_by(f64::total_cmp);
    let q = |p: f64| r[((r.len() - 1) as f64 * p) as usize];
    let mean = r.iter().sum::<f64>() / r.len() as f64;
    let within = r.iter().filter(|x| (0.8..=1.2).contains(*x)).count() as f64 / r.len() as f64;
    (mean, q(0.05), q(0.95), r[0], r[r.len() - 1], within)
}

/// Invariant 8, second half: one coordinator with twice the demand one steady server
/// can take (1 ms reads, so μ = δ / 1 ms tokens per δ), the rate sampled every ms over
/// [5 s, 10 s).
///
/// Measured (this seed): with cassandra-c3's δ = 20 ms, HYST = 4δ the rate averages
/// 1.016 μ, p5 0.89 μ, p95 1.05 μ, max 1.05 μ, and is within ±20 % of μ 98.9 % of the
/// time; with absim's δ = 10 ms, HYST = 2δ: 1.047 μ, p5 0.92 μ, p95 1.10 μ, max 1.10 μ,
/// 99.0 %. The other ≈ 1 % are the spec's multiplicative decrease itself: it sets the
/// rate to β·srate (0.21–0.22 μ, the minimum seen), and the next reply (≈ 1 ms later)
/// lifts it back to min(0.8·R0, β·R0 + Smax). So the ±20 % holds for the settled
/// rate and 95 % of the time, not at every instant: that is asserted, with margin.
#[test]
fn c3_rate_settles_near_the_service_rate() {
    for cfg in [
        C3Config::default(),
        C3Config {
            delta_us: 10_000,
            hyst_us: 20_000,
            ..C3Config::default()
        },
    ] {
        let run = c3_sim(cfg, 1, &[1_000], 2_000.0, 10_000_000, 5_000_000);
        let mu = cfg.delta_us as f64 / 1_000.0;
        let (mean, p5, p95, min, max, within) = rate_band(&run.rates, mu);
        let seen = format!(
            "mean {mean:.3} p5 {p5:.3} p95 {p95:.3} min {min:.3} max {max:.3} within {within:.3}"
        );
        assert!((0.9..=1.1).contains(&mean), "{seen}");
        assert!(p5 >= 0.8 && p95 <= 1.2, "{seen}");
        assert!(within >= 0.95, "{seen}");
        assert!(min >= 0.9 * cfg.beta && max <= 1.25, "{seen}");
        // The server is kept busy: sends over the span are within 10 % of capacity.
        let sent = run.sends.iter().filter(|x| x.0 >= 5_000_000).count() as f64;
        assert!((sent / 5_000.0 - 1.0).abs() < 0.1, "{sent} sends in 5 s");
    }
}
