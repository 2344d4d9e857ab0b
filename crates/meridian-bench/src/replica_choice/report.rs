//! Derived figures of the runs (phase windows, steady-state latency, copies' timing) and the
//! Markdown summary that sets them beside the paper's numbers.

use super::{
    BASELINES, F_SWEEP, HETERO_F, HETERO_LAMBDA, KeyDist, LAMBDA_MAIN, LAMBDAS, LAN_ONE_WAY, NODES,
    PAPER_REQUESTS, PAPER_STRATEGIES, RunResult, SERVICE_US, SLOW_NODE, SWEEP_STRATEGIES,
    StudyResults, dist_name, variant_label,
};
use std::fmt::Write as _;

use meridian_core::NodeId;
use meridian_replication::Strategy;

impl RunResult {
    /// `[start, end)` of phase `p`, s (the last phase ends at the last arrival).
    pub fn phase_window(&self, p: usize) -> (f64, f64) {
        let a = self.phase_starts_s.get(p).copied().unwrap_or(0.0);
        let b = self
            .phase_starts_s
            .get(p + 1)
            .copied()
            .unwrap_or(self.arrivals_end_s);
        (a, b)
    }

    /// Mean latency (s) of the requests issued in `[from, to)` s (1 s bins).
    pub fn issued_mean_s(&self, from: f64, to: f64) -> f64 {
        let lo = from.max(0.0).floor() as usize;
        let hi = (to.max(0.0).ceil() as usize).min(self.bins.len());
        let (mut n, mut sum) = (0u64, 0.0);
        for b in self.bins.get(lo..hi).unwrap_or(&[]) {
            n += b.issued;
            sum += b.mean_ms * b.issued as f64;
        }
        if n == 0 {
            f64::NAN
        } else {
            sum / n as f64 / 1e3
        }
    }

    /// Mean latency (s) of the requests issued in the last tenth of phase `p`: how far the
    /// backlog grew by its end.
    pub fn phase_end_s(&self, p: usize) -> f64 {
        let (a, b) = self.phase_window(p);
        self.issued_mean_s(b - (b - a) / 10.0, b)
    }

    /// Mean latency of phase `p`, s.
    pub fn phase_mean_s(&self, p: usize) -> f64 {
        self.phase_latency
            .get(p)
            .filter(|h| !h.is_empty())
            .map_or(f64::NAN, |h| h.mean() / 1e6)
    }

    /// Smallest and largest 10 s moving average of completions per second, from 10 s to
    /// the last arrival.
    pub fn throughput_range(&self) -> (f64, f64) {
        let end = (self.arrivals_end_s.floor() as usize).min(self.bins.len());
        let c: Vec<f64> = self.bins[..end]
            .iter()
            .map(|b| b.completed as f64)
            .collect();
        if c.len() < 20 {
            return (f64::NAN, f64::NAN);
        }
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for w in c[10..].windows(10) {
            let m = w.iter().sum::<f64>() / 10.0;
            lo = lo.min(m);
            hi = hi.max(m);
        }
        (lo, hi)
    }

    /// Share of the reads the strategies sent to `node`.
    pub fn share_of(&self, node: NodeId) -> f64 {
        let total: u64 = self.chosen.values().sum();
        if total == 0 {
            f64::NAN
        } else {
            self.chosen.get(&node).copied().unwrap_or(0) as f64 / total as f64
        }
    }

    pub(super) fn copy_ms_q(&self, q: f64) -> f64 {
        if self.copy_create_ms.is_empty() {
            return f64::NAN;
        }
        let mut v = self.copy_create_ms.clone();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i] as f64
    }
}

/// The paper's Fig. 3 (mean latency in s, "oui" / "non").
pub const PAPER_FIG3: [(Strategy, f64, f64); 3] = [
    (Strategy::DynamicSnitch, 19.0, 244.0),
    (Strategy::Avr, 0.8, 198.0),
    (Strategy::Naive, 0.2, 192.0),
];

pub(super) fn find(
    runs: &[RunResult],
    s: Strategy,
    copies: bool,
    lambda: f64,
) -> Option<&RunResult> {
    runs.iter().find(|r| {
        r.scenario.strategy == s
            && r.scenario.extra_copies == copies
            && r.scenario.lambda() == Some(lambda)
    })
}

fn f1(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("never".into(), |x| format!("{x:.1}"))
}

pub(super) fn copies_word(c: bool) -> &'static str {
    if c { "copies" } else { "no copies" }
}

fn status(r: &RunResult) -> String {
    let mut s = format!("{}", r.completed);
    if r.failed > 0 {
        let _ = write!(s, " (**{} failed**)", r.failed);
    }
    if r.unfinished > 0 {
        let _ = write!(s, " (**{} unfinished**)", r.unfinished);
    }
    s
}

/// The f sweep's table: completion time per distribution × strategy × f.
fn fsweep_table(
    s: &mut String,
    fsweep: &[RunResult],
    strategies: &[Strategy],
    batch_requests: usize,
) {
    let _ = writeln!(
        s,
        "| distribution | strategy | {} | T(2) / T(16) | duplicates at f = {} |\n|---|---|{}---:|---|",
        F_SWEEP.map(|f| format!("f = {f}")).join(" | "),
        F_SWEEP.map(|f| f.to_string()).join(" / "),
        "---:|".repeat(F_SWEEP.len())
    );
    for dist in [KeyDist::Partition, KeyDist::Zipf(1.0)] {
        for &st in strategies {
            let runs: Vec<&RunResult> = F_SWEEP
                .iter()
                .filter_map(|&f| {
                    fsweep.iter().find(|r| {
                        r.scenario.f == f
                            && r.scenario.strategy == st
                            && r.scenario.phases.first() == Some(&dist)
                    })
                })
                .collect();
            let t: Vec<f64> = runs.iter().map(|r| r.makespan_s).collect();
            let cells: Vec<String> = runs
                .iter()
                .map(|r| {
                    let mut c = f1(r.makespan_s);
                    if r.failed + r.unfinished > 0 {
                        let _ = write!(c, " (**{} lost**)", r.failed + r.unfinished);
                    }
                    c
                })
                .collect();
            let dups: Vec<String> = runs
                .iter()
                .map(|r| r.duplicate_services.to_string())
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                dist_name(dist),
                st.name(),
                cells.join(" | "),
                match (t.first(), t.last()) {
                    (Some(a), Some(b)) if *b > 0.0 => format!("{:.1}", a / b),
                    _ => "–".into(),
                },
                dups.join(" / ")
            );
        }
    }
    let adv_ideal: Vec<String> = F_SWEEP
        .iter()
        .map(|&f| f1(batch_requests as f64 * SERVICE_US as f64 / 1e6 / f64::from(f)))
        .collect();
    let _ = writeln!(
        s,
        "| adversarial | ideal (R·30 ms / f) | {} | 8.0 | |",
        adv_ideal.join(" | ")
    );
}

/// The markdown report, side by side with the paper.
pub fn summary_markdown(res: &StudyResults) -> String {
    let o = &res.options;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Replica-choice study on Meridian (generated)\n\nSeed {}; {} requests per dynamic run (the paper: {PAPER_REQUESTS}), phases of {} requests; \
         batches of {} requests in the f sweep; {} requests per heterogeneous run; {} per capacity run. \
         Cluster: 1 DC × {NODES} nodes, `fixed:30` service, 1 read worker per node, LAN {} ms one way, q = 64. Latencies from the intended arrival. \
         The paper's columns quote its text (Fig. 1 and 2 are images whose numbers are not in the text).\n",
        o.seed,
        o.requests,
        o.requests / 5,
        o.batch_requests,
        o.hetero_requests,
        o.capacity_requests,
        LAN_ONE_WAY.as_millis()
    );

    // Fig. 3.
    let _ = writeln!(
        s,
        "## Fig. 3: mean latency (s), with and without extra copies\n\n| algorithm | paper \"oui\" | paper \"non\" | paper non/oui | ours, λ = {LAMBDA_MAIN}: copies | no copies | ours non/oui |\n|---|---:|---:|---:|---:|---:|---:|"
    );
    for (st, oui, non) in PAPER_FIG3 {
        let y = find(&res.dynamic, st, true, LAMBDA_MAIN).map_or(f64::NAN, RunResult::mean_s);
        let n = find(&res.dynamic, st, false, LAMBDA_MAIN).map_or(f64::NAN, RunResult::mean_s);
        let _ = writeln!(
            s,
            "| {} | {oui} | {non} | {:.0}× | {} | {} | {}× |",
            variant_label(st, true).trim_end_matches(", copies"),
            non / oui,
            f1(y),
            f1(n),
            f1(n / y)
        );
    }
    let _ = writeln!(
        s,
        "\n### Mean latency (s) at every λ\n\n| strategy | copies | {} |\n|---|---|{}",
        LAMBDAS.map(|l| format!("λ = {l}")).join(" | "),
        "---:|".repeat(LAMBDAS.len())
    );
    for st in PAPER_STRATEGIES {
        for copies in [false, true] {
            let cells: Vec<String> = LAMBDAS
                .iter()
                .map(|&l| find(&res.dynamic, st, copies, l).map_or("–".into(), |r| f1(r.mean_s())))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                st.name(),
                copies_word(copies),
                cells.join(" | ")
            );
        }
    }

    // Fig. 1: saturation.
    let _ = writeln!(
        s,
        "\n## Fig. 1: latency over time — does the backlog grow in the Zipf phases?\n\nPer phase (U, Z, U, Z, U): mean latency (s) of the phase's requests; \"Z end\": mean latency of the requests issued in the last tenth of each Zipf phase (a backlog that grows without bound shows as Z end ≫ 0.03 s). \
         The paper: Cassandra saturates from 128 req/s; Naive and AVR behave very well at 256. \"failed\": GETs that returned an error (a deferred read whose claiming replica no longer held its extra copy, see the README); they are left out of the latencies.\n\n| strategy | copies | λ | completed | U1 | Z1 | Z1 end | U2 | Z2 | Z2 end | U3 | p50 ms | p99 ms | p99.9 ms | max s | drain after last arrival, s |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for &l in &LAMBDAS {
        for st in PAPER_STRATEGIES {
            for copies in [false, true] {
                let Some(r) = find(&res.dynamic, st, copies, l) else {
                    continue;
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {l} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    st.name(),
                    copies_word(copies),
                    status(r),
                    f1(r.phase_mean_s(0)),
                    f1(r.phase_mean_s(1)),
                    f1(r.phase_end_s(1)),
                    f1(r.phase_mean_s(2)),
                    f1(r.phase_mean_s(3)),
                    f1(r.phase_end_s(3)),
                    f1(r.phase_mean_s(4)),
                    f1(r.q_ms(0.5)),
                    f1(r.q_ms(0.99)),
                    f1(r.q_ms(0.999)),
                    f1(r.q_ms(1.0) / 1e3),
                    f1((r.makespan_s - r.arrivals_end_s).max(0.0)),
                );
            }
        }
    }

    // Fig. 2: throughput.
    let _ = writeln!(
        s,
        "\n## Fig. 2: throughput at λ = {LAMBDA_MAIN}\n\nCompletions per second, 10 s moving average from 10 s to the last arrival: smallest and largest, as a fraction of λ (1.00 = throughput ≈ λ). The paper: \"extremely stable\" for Naive and AVR, not for Cassandra.\n\n| strategy | copies | min / λ | max / λ | mean until the last completion (req/s) |\n|---|---|---:|---:|---:|"
    );
    for st in PAPER_STRATEGIES.iter().chain(BASELINES.iter()) {
        for copies in [false, true] {
            let runs = if PAPER_STRATEGIES.contains(st) {
                &res.dynamic
            } else {
                &res.baselines
            };
            let Some(r) = find(runs, *st, copies, LAMBDA_MAIN) else {
                continue;
            };
            let (lo, hi) = r.throughput_range();
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} | {:.2} | {:.0} |",
                st.name(),
                copies_word(copies),
                lo / LAMBDA_MAIN,
                hi / LAMBDA_MAIN,
                r.throughput()
            );
        }
    }

    // Copies.
    let _ = writeln!(
        s,
        "\n## Extra copies: from a phase change to usable copies\n\nFor each Zipf phase, its most popular object (60.9 % of its requests): seconds from the phase's first request until one coordinator's map listed a copy, until all {NODES} did, the most copies listed (the spec's want = ⌊0.609·32⌋ = 19), and seconds until 90 % of that. `copy_create_ms`: the root's decision-to-usable times (objects here are 100 B, so this is protocol time only; a 10 MB object adds ≈ 84 ms at 1 Gb/s). The paper: copies created \"in a few seconds\"; the issue's target: usable within 5 s.\n\n| strategy | λ | phase | first usable s | everywhere s | peak copies | 90 % of peak s | copy_create_ms p50 / p99 / max | reads served by copies | reads that missed a copy |\n|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
    );
    for r in res.dynamic.iter().chain(res.baselines.iter()) {
        if !r.scenario.extra_copies {
            continue;
        }
        for c in &r.copies {
            let _ = writeln!(
                s,
                "| {} | {} | Z{} | {} | {} | {} | {} | {} / {} / {} | {} | {} |",
                r.scenario.strategy.name(),
                r.scenario.lambda().unwrap_or(0.0),
                c.phase / 2 + 1,
                opt_s(c.first_s),
                opt_s(c.all_s),
                c.peak,
                opt_s(c.peak90_s),
                f1(r.copy_ms_q(0.5)),
                f1(r.copy_ms_q(0.99)),
                f1(r.copy_ms_q(1.0)),
                r.extra_reads,
                r.extra_misses
            );
        }
    }

    // Duplicates.
    let _ = writeln!(
        s,
        "\n## Deferred decision: duplicate services\n\nExtra services of deferred reads (counted by the coordinators: a read served by k replicas counts k − 1) and reads dropped by a `Cancel` (at the replicas), as a share of the requests.\n\n| strategy | copies | λ | duplicates | share | cancelled |\n|---|---|---:|---:|---:|---:|"
    );
    for r in &res.dynamic {
        if !r.scenario.strategy.is_deferred() {
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} % | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            r.scenario.lambda().unwrap_or(0.0),
            r.duplicate_services,
            100.0 * r.duplicate_services as f64 / r.scenario.requests as f64,
            r.cancelled
        );
    }

    // Baselines.
    let _ = writeln!(
        s,
        "\n## Baselines at λ = {LAMBDA_MAIN}\n\n| strategy | copies | completed | mean s | Z1 end s | Z2 end s | p50 ms | p99 ms | p99.9 ms | C3 overloads |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in res.baselines.iter().chain(
        res.dynamic
            .iter()
            .filter(|r| r.scenario.lambda() == Some(LAMBDA_MAIN)),
    ) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            status(r),
            f1(r.mean_s()),
            f1(r.phase_end_s(1)),
            f1(r.phase_end_s(3)),
            f1(r.q_ms(0.5)),
            f1(r.q_ms(0.99)),
            f1(r.q_ms(0.999)),
            r.c3_overloads
        );
    }

    // Capacity.
    let ideal = f64::from(NODES) * 1e6 / SERVICE_US as f64;
    let _ = writeln!(
        s,
        "\n## Capacity: round_robin, uniform keys\n\nIdeal: {NODES} nodes / 30 ms = {ideal:.0} req/s. \"Served while arriving\": mean completions per second from 2 s to the last arrival. With 256 objects on a q = 64 ring the busiest node holds more key-replicas than the average, so it saturates before the cluster does (see the README).\n\n| λ | completed | served while arriving (req/s) | served / λ | served / ideal | mean latency s | p99 ms | drain after last arrival, s |\n|---:|---|---:|---:|---:|---:|---:|---:|"
    );
    for r in &res.capacity {
        let l = r.scenario.lambda().unwrap_or(0.0);
        let served = r.completions_between(2, r.arrivals_end_s.floor() as usize);
        let _ = writeln!(
            s,
            "| {l} | {} | {served:.0} | {:.2} | {:.2} | {} | {} | {} |",
            status(r),
            served / l,
            served / ideal,
            f1(r.mean_s()),
            f1(r.q_ms(0.99)),
            f1((r.makespan_s - r.arrivals_end_s).max(0.0))
        );
    }

    // f sweep.
    let _ = writeln!(
        s,
        "\n## f sweep: completion time of a batch of {} requests (s)\n\nAll requests submitted within the first second from uniformly chosen coordinators; no extra copies. Adversarial: only the objects of the ring partition holding the most objects (all their f replicas are the same f nodes), ideal R·30 ms / f. Few popular: Zipf(s = 1) over the 256 objects (the top object gets 16 % of the requests), ideal R·30 ms / 32 = {:.1} s. \
         The paper: on adversarial inputs the completion time is divided by ≈ f; on \"few popular\" inputs it grows from f = 8, f = 4 already balances well (duplicated services).\n",
        o.batch_requests,
        o.batch_requests as f64 * SERVICE_US as f64 / 1e6 / f64::from(NODES)
    );
    fsweep_table(&mut s, &res.fsweep, &SWEEP_STRATEGIES, o.batch_requests);
    // Heterogeneous.
    let _ = writeln!(
        s,
        "\n## C3 against the dynamic snitch, one node 3× slower\n\n1 DC × {NODES} nodes, f = {HETERO_F} (C3's RF), `exp:30` service and node {} at `exp:90`, uniform keys, open loop at λ = {HETERO_LAMBDA} req/s (≈ 48 % of the healthy capacity). The NSDI'15 claim: C3 improves p99.9 up to 3× over the dynamic snitch, with better mean, median and throughput.\n\n| strategy | cluster | completed | mean ms | p50 ms | p99 ms | p99.9 ms | throughput (req/s) | share of reads sent to node {} |\n|---|---|---|---:|---:|---:|---:|---:|---:|",
        SLOW_NODE.0, SLOW_NODE.0
    );
    for r in &res.hetero {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} % |",
            r.scenario.strategy.name(),
            if r.scenario.slow.is_some() {
                "one node 3× slower"
            } else {
                "all equal"
            },
            status(r),
            f1(r.mean_s() * 1e3),
            f1(r.q_ms(0.5)),
            f1(r.q_ms(0.99)),
            f1(r.q_ms(0.999)),
            r.throughput(),
            100.0 * r.share_of(SLOW_NODE)
        );
    }
    let pick = |st: Strategy| {
        res.hetero
            .iter()
            .find(|r| r.scenario.strategy == st && r.scenario.slow.is_some())
    };
    if let (Some(d), Some(c)) = (pick(Strategy::DynamicSnitch), pick(Strategy::C3)) {
        let _ = writeln!(
            s,
            "\nWith the slow node, dynamic_snitch / c3: p99.9 {:.2}×, p99 {:.2}×, mean {:.2}×, p50 {:.2}× (> 1: C3 better).",
            d.q_ms(0.999) / c.q_ms(0.999),
            d.q_ms(0.99) / c.q_ms(0.99),
            d.mean_s() / c.mean_s(),
            d.q_ms(0.5) / c.q_ms(0.5)
        );
    }

    // Sensitivity to the service-time distribution.
    let _ = writeln!(
        s,
        "\n## Sensitivity: exponential service times (`exp:30`) instead of `fixed:30`\n\nThe same runs with service times drawn from an exponential of mean 30 ms (as in C3's and absim's evaluations). With a fixed service time, replicas that received the same deferred reads at the same instant pop them in lockstep (see the README); random service times break the lockstep.\n\n| strategy | copies | λ | completed | mean s | Z1 end s | Z2 end s | p50 ms | p99 ms | p99.9 ms | duplicates | `fixed:30` mean s | `fixed:30` duplicates |\n|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &res.dynamic_exp {
        let fixed = find(
            &res.dynamic,
            r.scenario.strategy,
            r.scenario.extra_copies,
            LAMBDA_MAIN,
        );
        let _ = writeln!(
            s,
            "| {} | {} | {LAMBDA_MAIN} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            status(r),
            f1(r.mean_s()),
            f1(r.phase_end_s(1)),
            f1(r.phase_end_s(3)),
            f1(r.q_ms(0.5)),
            f1(r.q_ms(0.99)),
            f1(r.q_ms(0.999)),
            r.duplicate_services,
            fixed.map_or("–".into(), |f| f1(f.mean_s())),
            fixed.map_or("–".into(), |f| f.duplicate_services.to_string()),
        );
    }
    let _ = writeln!(s, "\n### f sweep with `exp:30`\n");
    fsweep_table(&mut s, &res.fsweep_exp, &SWEEP_STRATEGIES, o.batch_requests);

    // The study's claim rule against Meridian's claim tokens.
    let _ = writeln!(
        s,
        "\n## Claiming a deferred read: the study's `cancel` rule against `token`\n\nEvery run above uses Meridian's default `deferred_claim = token` (the replica asks the read's coordinator before serving; the first claim only is granted). Here the deferred strategies run under the study's rule: broadcast `Cancel`, then serve. `fixed:30`, λ = {LAMBDA_MAIN}.\n\n| strategy | copies | `cancel`: completed | mean s | Z1 end s | Z2 end s | p99 ms | duplicates | `token`: mean s | p99 ms | duplicates |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &res.dynamic_cancel {
        let token = find(
            &res.dynamic,
            r.scenario.strategy,
            r.scenario.extra_copies,
            LAMBDA_MAIN,
        );
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.strategy.name(),
            copies_word(r.scenario.extra_copies),
            status(r),
            f1(r.mean_s()),
            f1(r.phase_end_s(1)),
            f1(r.phase_end_s(3)),
            f1(r.q_ms(0.99)),
            r.duplicate_services,
            token.map_or("–".into(), |t| f1(t.mean_s())),
            token.map_or("–".into(), |t| f1(t.q_ms(0.99))),
            token.map_or("–".into(), |t| t.duplicate_services.to_string()),
        );
    }
    let _ = writeln!(s, "\n### f sweep under `cancel`\n");
    let deferred: Vec<Strategy> = SWEEP_STRATEGIES
        .into_iter()
        .filter(|s| s.is_deferred())
        .collect();
    fsweep_table(&mut s, &res.fsweep_cancel, &deferred, o.batch_requests);
    s
}
