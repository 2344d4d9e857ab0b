//! Tests of the load generator core: arrival processes, recording into per-scope
//! histograms and the run summaries.

use super::*;
use crate::stats::Scope;

/// A fake target: every op takes `latency`; ops on key `slow_key` take `slow`; ops running
/// while the target is stalled (`stall`) finish only after the stall; keys homed outside
/// the client's DC are remote; keys divisible by `fail_every` fail with `FAIL`.
struct Fake {
    latency: Duration,
    slow_key: Option<(u64, Duration)>,
    stall: Option<(Duration, Duration)>,
    fail_every: Option<u64>,
    dcs: u32,
    start: Instant,
    log: Mutex<Vec<(Request, Duration)>>,
}

impl Fake {
    fn new(latency: Duration) -> Self {
        Fake {
            latency,
            slow_key: None,
            stall: None,
            fail_every: None,
            dcs: 1,
            start: Instant::now(),
            log: Mutex::new(Vec::new()),
        }
    }

    fn log(&self) -> Vec<(Request, Duration)> {
        self.log.lock().unwrap().clone()
    }
}

impl Target for Fake {
    async fn execute(&self, request: Request) -> Result<Outcome, String> {
        let began = Instant::now();
        let since = began - self.start;
        let keynum = request.keynum;
        let remote = home_dc(keynum, self.dcs) != request.dc;
        self.log.lock().unwrap().push((request, since));
        let mut done = began + self.latency;
        if let Some((k, slow)) = self.slow_key
            && k == keynum
        {
            done = began + slow;
        }
        if let Some((from, to)) = self.stall
            && since < to
            && since + self.latency > from
        {
            done = self.start + to + self.latency;
        }
        tokio::time::sleep_until(done).await;
        match self.fail_every {
            Some(m) if keynum.is_multiple_of(m) => Err("FAIL".into()),
            _ => Ok(Outcome { remote }),
        }
    }
}

fn workload() -> CoreWorkload {
    CoreWorkload {
        record_count: 1000,
        read_proportion: 2.0 / 3.0,
        update_proportion: 1.0 / 3.0,
        field_count: 1,
        field_length: 16,
        ..CoreWorkload::default()
    }
}

fn total<'a>(report: &'a stats::Report, op: &str) -> &'a stats::Summary {
    report
        .summaries
        .iter()
        .find(|s| s.op == op && s.scope == Scope::Total)
        .unwrap()
}

fn successes(report: &stats::Report) -> u64 {
    report
        .summaries
        .iter()
        .filter(|s| s.scope == Scope::Total)
        .map(|s| s.count)
        .sum()
}

fn all_ops_p99(result: &RunResult, ops: &[&str]) -> u64 {
    ops.iter()
        .map(|op| total(&result.report, op).p99_us)
        .max()
        .unwrap()
}

async fn go(target: &Arc<Fake>, w: &CoreWorkload, config: &RunConfig) -> RunResult {
    run(Arc::clone(target), w, config, |_| {}).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn closed_loop_throughput_is_threads_over_latency() {
    let target = Arc::new(Fake::new(Duration::from_millis(10)));
    let config = RunConfig::new(Arrival::Closed { threads: 4 }, Duration::from_secs(10));
    let r = go(&target, &workload(), &config).await;
    // Each thread starts an op every 10 ms in [0, 10 s): exactly 1000 ops per thread.
    assert_eq!(r.ops_started, 4000);
    assert_eq!(successes(&r.report), 4000);
    assert!(
        (r.mean_throughput - 400.0).abs() < 1e-9,
        "{}",
        r.mean_throughput
    );
    // HDR reports the bucket's highest equivalent value: within 0.1 %.
    assert_eq!(total(&r.report, "read").p50_us / 10, 1000);
    assert_eq!(r.ops_dropped + r.ops_abandoned + r.late_starts, 0);
}

#[tokio::test(start_paused = true)]
async fn open_loop_completes_rate_times_duration() {
    let target = Arc::new(Fake::new(Duration::from_millis(10)));
    let config = RunConfig::new(Arrival::Open { rate: 200.0 }, Duration::from_secs(50));
    let r = go(&target, &workload(), &config).await;
    // Poisson count with mean 10 000: σ = 100, allow 4σ.
    let n = successes(&r.report);
    assert!((9_600..=10_400).contains(&n), "{n}");
    assert_eq!(r.ops_started, n);
    // Measured from the intended start: the 10 ms plus at most the timer's 1 ms lag.
    let p99 = total(&r.report, "read").p99_us;
    assert!((10_000..=11_011).contains(&p99), "{p99}");
    assert_eq!(r.late_starts, 0);
    assert!(r.max_start_lag <= LATE_START_THRESHOLD);
}

#[tokio::test(start_paused = true)]
async fn open_loop_shows_a_stall_closed_loop_hides() {
    let stall = Some((Duration::from_secs(5), Duration::from_secs(6)));
    let ops = ["read", "update"];

    let mut fake = Fake::new(Duration::from_millis(10));
    fake.stall = stall;
    let target = Arc::new(fake);
    let open = RunConfig::new(Arrival::Open { rate: 100.0 }, Duration::from_secs(20));
    let r = go(&target, &workload(), &open).await;
    // ~100 of ~2000 ops should have started during the 1 s stall; measured from their
    // intended start they waited up to 1 s, so the p99 is hundreds of milliseconds.
    let p99 = all_ops_p99(&r, &ops);
    assert!(p99 > 500_000, "open-loop p99 {p99} µs hides the stall");

    let mut fake = Fake::new(Duration::from_millis(10));
    fake.stall = stall;
    let target = Arc::new(fake);
    let closed = RunConfig::new(Arrival::Closed { threads: 1 }, Duration::from_secs(20));
    let r = go(&target, &workload(), &closed).await;
    // The closed loop issued one op during the stall: it saw the stall once, then
    // "coordinated" with the target. The p99 shows nothing; only the max does.
    let p99 = all_ops_p99(&r, &ops);
    assert!(p99 <= 10_100, "closed-loop p99 {p99} µs");
    let max = ops
        .iter()
        .map(|op| total(&r.report, op).max_us)
        .max()
        .unwrap();
    assert!(max >= 900_000, "{max}");
}

#[tokio::test(start_paused = true)]
async fn one_slow_key_only_slows_its_own_ops_in_open_loop() {
    let mut fake = Fake::new(Duration::from_millis(10));
    fake.slow_key = Some((7, Duration::from_secs(1)));
    let target = Arc::new(fake);
    let w = CoreWorkload {
        record_count: 10,
        ..workload()
    };
    let config = RunConfig::new(Arrival::Open { rate: 100.0 }, Duration::from_secs(10));
    let r = go(&target, &w, &config).await;
    let slow = target.log().iter().filter(|(q, _)| q.keynum == 7).count() as u64;
    assert!(slow > 50, "{slow}");
    // ~10 % of the ops take 1 s, the rest 10 ms: the median is untouched.
    let read = total(&r.report, "read");
    assert!((10_000..=11_011).contains(&read.p50_us), "{}", read.p50_us);
    assert!(
        (1_000_000..=1_002_000).contains(&read.max_us),
        "{}",
        read.max_us
    );
}

#[tokio::test(start_paused = true)]
async fn paced_loop_mean_inter_arrival_is_one_over_lambda() {
    let target = Arc::new(Fake::new(Duration::ZERO));
    let config = RunConfig::new(
        Arrival::Paced {
            threads: 2,
            rate_per_thread: 15.0,
        },
        Duration::from_secs(200),
    );
    let r = go(&target, &workload(), &config).await;
    let log = target.log();
    for client in 0..2 {
        let starts: Vec<Duration> = log
            .iter()
            .filter(|(q, _)| q.client == client)
            .map(|(_, t)| *t)
            .collect();
        let gaps = starts.len() - 1;
        let mean = (starts[gaps] - starts[0]).as_secs_f64() / gaps as f64;
        // ~3000 gaps of Exp(1/15): the mean's σ is ~1.8 %; allow 8 %.
        assert!((mean * 15.0 - 1.0).abs() < 0.08, "client {client}: {mean}");
    }
    assert_eq!(r.ops_started, log.len() as u64);
}

#[tokio::test(start_paused = true)]
async fn warmup_is_excluded() {
    let target = Arc::new(Fake::new(Duration::from_millis(10)));
    let mut config = RunConfig::new(Arrival::Closed { threads: 1 }, Duration::from_secs(3));
    config.warmup = Duration::from_secs(2);
    let r = go(&target, &workload(), &config).await;
    assert_eq!(r.ops_started, 500);
    assert_eq!(r.report.warmup_excluded, 200);
    assert_eq!(successes(&r.report), 300);
    assert!((r.mean_throughput - 100.0).abs() < 1e-9);
    assert_eq!(r.report.throughput_per_s[..2], [0, 0]);
}

/// A run with a fixed op count faster than its warm-up (the README's `--workload a`
/// against the virtual cluster: 1000 ops inside 5 s) still measures all but the first
/// tenth of its ops, and its figures span the measured ops only.
#[tokio::test(start_paused = true)]
async fn a_fixed_op_count_is_never_swallowed_by_the_warmup() {
    let target = Arc::new(Fake::new(Duration::from_millis(1)));
    let mut config = RunConfig::new(Arrival::Closed { threads: 1 }, Duration::from_secs(30));
    config.warmup = Duration::from_secs(5);
    config.max_ops = Some(1000);
    let mut seen = Vec::new();
    let r = run(Arc::clone(&target), &workload(), &config, |p| {
        seen.push(p.clone())
    })
    .await
    .unwrap();
    // 1000 ops of 1 ms: one second in all, the warm-up's 5 s never reached.
    assert_eq!(r.ops_started, 1000);
    assert_eq!(r.report.warmup_excluded, 100);
    assert_eq!(successes(&r.report), 900);
    // The warm-up ended when op 100 started, at 100 ms.
    assert_eq!(r.warmup_end, Duration::from_millis(100));
    assert_eq!(r.report.warmup_end_us, 100_000);
    assert_eq!(r.measured, Duration::from_millis(900));
    assert!(
        (r.mean_throughput - 1000.0).abs() < 1.0,
        "{}",
        r.mean_throughput
    );
    assert!(seen.iter().all(|p| !p.warming_up), "{seen:?}");

    // A slow run: the time ends the warm-up first, as without a count.
    let target = Arc::new(Fake::new(Duration::from_millis(10)));
    let mut config = RunConfig::new(Arrival::Closed { threads: 1 }, Duration::from_secs(30));
    config.warmup = Duration::from_millis(500);
    config.max_ops = Some(1000);
    let r = go(&target, &workload(), &config).await;
    assert_eq!(r.report.warmup_excluded, 50);
    assert_eq!(successes(&r.report), 950);
    assert_eq!(r.warmup_end, Duration::from_millis(500));
}

fn sequences(log: &[(Request, Duration)]) -> Vec<(u32, u64, Op, u64)> {
    let mut seq: Vec<_> = log
        .iter()
        .map(|(q, _)| (q.client, q.seq, q.op, q.keynum))
        .collect();
    seq.sort_unstable();
    seq
}

#[tokio::test(start_paused = true)]
async fn same_seed_same_ops_and_keys() {
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        for arrival in [
            Arrival::Closed { threads: 3 },
            Arrival::Open { rate: 300.0 },
        ] {
            let target = Arc::new(Fake::new(Duration::from_millis(3)));
            let mut config = RunConfig::new(arrival, Duration::from_secs(2));
            config.seed = seed;
            go(&target, &workload(), &config).await;
            runs.push(sequences(&target.log()));
        }
    }
    assert_eq!(runs[0], runs[2]);
    assert_eq!(runs[1], runs[3]);
    assert_ne!(runs[0], runs[4]);
    assert_ne!(runs[1], runs[5]);
    // Clients draw different sequences from one seed.
    let keys = |c: u32| -> Vec<u64> { runs[0].iter().filter(|s| s.0 == c).map(|s| s.3).collect() };
    assert_ne!(keys(0), keys(1));
}

#[tokio::test(start_paused = true)]
async fn errors_are_counted_by_code() {
    let mut fake = Fake::new(Duration::from_millis(10));
    fake.fail_every = Some(10);
    let target = Arc::new(fake);
    let config = RunConfig::new(Arrival::Closed { threads: 2 }, Duration::from_secs(5));
    let r = go(&target, &workload(), &config).await;
    let failed = target
        .log()
        .iter()
        .filter(|(q, _)| q.keynum.is_multiple_of(10))
        .count() as u64;
    assert!(failed > 0);
    assert_eq!(r.report.errors_by_code.get("FAIL"), Some(&failed));
    assert_eq!(successes(&r.report) + failed, r.ops_started);
}

#[tokio::test(start_paused = true)]
async fn locality_drives_remote_share() {
    let mut fake = Fake::new(Duration::from_millis(10));
    fake.dcs = 2;
    let target = Arc::new(fake);
    let w = CoreWorkload {
        locality: Some(0.9),
        dcs: 2,
        ..workload()
    };
    let config = RunConfig::new(Arrival::Closed { threads: 4 }, Duration::from_secs(20));
    let r = go(&target, &w, &config).await;
    let count = |scope| -> u64 {
        r.report
            .summaries
            .iter()
            .filter(|s| s.scope == scope)
            .map(|s| s.count)
            .sum()
    };
    let share = count(Scope::Remote) as f64 / count(Scope::Total) as f64;
    assert!((share - 0.1).abs() < 0.015, "{share}");
    // Clients are spread over both DCs.
    let log = target.log();
    assert!(log.iter().any(|(q, _)| q.dc == 0) && log.iter().any(|(q, _)| q.dc == 1));
}

#[tokio::test(start_paused = true)]
async fn in_flight_cap_drops_and_counts() {
    let target = Arc::new(Fake::new(Duration::from_secs(1)));
    let mut config = RunConfig::new(Arrival::Open { rate: 100.0 }, Duration::from_secs(10));
    config.max_in_flight = 10;
    let r = go(&target, &workload(), &config).await;
    // At most 10 ops per second get through; the other ~90 % are dropped, and said so.
    assert!(r.ops_started <= 110, "{}", r.ops_started);
    assert!(r.ops_dropped > 700, "{}", r.ops_dropped);
    assert_eq!(r.report.errors_by_code.get(DROPPED), Some(&r.ops_dropped));
    assert_eq!(successes(&r.report), r.ops_started);
}

#[tokio::test(start_paused = true)]
async fn hung_ops_are_abandoned_after_the_drain() {
    let mut fake = Fake::new(Duration::from_millis(10));
    fake.slow_key = Some((0, Duration::from_secs(3600)));
    let target = Arc::new(fake);
    let w = CoreWorkload {
        record_count: 2,
        ..workload()
    };
    let mut config = RunConfig::new(Arrival::Closed { threads: 1 }, Duration::from_secs(5));
    config.drain_timeout = Duration::from_secs(1);
    let r = go(&target, &w, &config).await;
    assert_eq!(r.ops_abandoned, 1);
    assert_eq!(r.report.errors_by_code.get(ABANDONED), Some(&1));
    assert_eq!(r.elapsed, Duration::from_secs(6));
}

#[tokio::test(start_paused = true)]
async fn progress_reports_each_second() {
    let target = Arc::new(Fake::new(Duration::from_millis(10)));
    let mut config = RunConfig::new(Arrival::Closed { threads: 2 }, Duration::from_secs(5));
    config.warmup = Duration::from_secs(2);
    let mut seen = Vec::new();
    run(Arc::clone(&target), &workload(), &config, |p| {
        seen.push(p.clone())
    })
    .await
    .unwrap();
    // Ticks at 1 s, 2 s, … 7 s (the last one may race the end of the run).
    assert!((6..=7).contains(&seen.len()), "{}", seen.len());
    assert!(seen[0].warming_up && !seen[2].warming_up);
    for (i, p) in seen[..6].iter().enumerate() {
        assert_eq!(p.elapsed, Duration::from_secs(i as u64 + 1));
        assert!((p.throughput - 200.0).abs() <= 2.0, "{p:?}");
        // 10 ms in a 2-significant-digit histogram.
        assert_eq!(p.p99_us / 1000, 10, "{p:?}");
    }
    assert!(seen[5].completed >= 1190, "{:?}", seen[5]);
}

#[tokio::test(start_paused = true)]
async fn invalid_configs_are_refused() {
    let target = Arc::new(Fake::new(Duration::from_millis(10)));
    let d = Duration::from_secs(1);
    for (arrival, w) in [
        (Arrival::Closed { threads: 0 }, workload()),
        (Arrival::Open { rate: 0.0 }, workload()),
        // Rates whose exponential gaps (mean 1/rate) overflowed `Duration` and panicked.
        (Arrival::Open { rate: 1e-300 }, workload()),
        (
            Arrival::Paced {
                threads: 1,
                rate_per_thread: 1e-300,
            },
            workload(),
        ),
        (
            Arrival::Paced {
                threads: 1,
                rate_per_thread: f64::NAN,
            },
            workload(),
        ),
        (
            Arrival::Closed { threads: 1 },
            CoreWorkload {
                record_count: 0,
                ..workload()
            },
        ),
    ] {
        let config = RunConfig::new(arrival, d);
        assert!(run(Arc::clone(&target), &w, &config, |_| {}).await.is_err());
    }
    assert!(target.log().is_empty());
}

#[tokio::test(start_paused = true)]
async fn operationcount_stops_the_run_after_that_many_ops() {
    let fake = Arc::new(Fake::new(Duration::from_millis(1)));
    let mut config = RunConfig::new(Arrival::Closed { threads: 4 }, Duration::from_secs(60));
    config.max_ops = Some(500);
    let r = go(&fake, &workload(), &config).await;
    assert_eq!(r.ops_started, 500);
    assert_eq!(fake.log().len(), 500);
    assert_eq!(successes(&r.report), 500);
    // 4 threads × 1 ms per op: 125 ms, not the 60 s duration; throughput over that span.
    assert!(r.elapsed < Duration::from_secs(1), "{:?}", r.elapsed);
    assert!(r.mean_throughput > 1000.0, "{}", r.mean_throughput);

    let mut open = RunConfig::new(Arrival::Open { rate: 1000.0 }, Duration::from_secs(60));
    open.max_ops = Some(300);
    let r = go(
        &Arc::new(Fake::new(Duration::from_millis(1))),
        &workload(),
        &open,
    )
    .await;
    assert_eq!(r.ops_started, 300);
}

#[tokio::test(start_paused = true)]
async fn load_inserts_every_record_once_from_its_home_dc() {
    let mut fake = Fake::new(Duration::from_millis(2));
    fake.dcs = 2;
    fake.fail_every = Some(97);
    let fake = Arc::new(fake);
    let mut w = workload();
    w.dcs = 2;
    let mut ticks = 0;
    let r = load(Arc::clone(&fake), &w, 2, |done, total| {
        assert!(done <= total);
        ticks += 1;
    })
    .await
    .unwrap();
    let log = fake.log();
    let mut keys: Vec<u64> = log.iter().map(|(q, _)| q.keynum).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(
        keys,
        (0..1000).collect::<Vec<_>>(),
        "every record, none else"
    );
    assert!(
        log.iter()
            .all(|(q, _)| q.op == Op::Insert && q.dc == home_dc(q.keynum, 2))
    );
    // Keys 0, 97, ... always fail: tried LOAD_ATTEMPTS times, then counted.
    let failing = (0..1000u64).filter(|k| k % 97 == 0).count() as u64;
    assert_eq!(r.failed.get("FAIL"), Some(&failing));
    assert_eq!(r.inserted, 1000 - failing);
    assert_eq!(
        log.len() as u64,
        1000 - failing + failing * u64::from(LOAD_ATTEMPTS)
    );
    assert!(ticks >= 1, "progress was reported");
    assert!(load(fake, &w, 0, |_, _| {}).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn inserted_keys_become_readable_once_acknowledged() {
    let fake = Arc::new(Fake::new(Duration::from_millis(1)));
    let mut w = workload();
    w.record_count = 100;
    w.read_proportion = 0.5;
    w.update_proportion = 0.0;
    w.insert_proportion = 0.5;
    w.request_distribution = crate::generator::Distribution::Latest { theta: 0.99 };
    let config = RunConfig::new(Arrival::Closed { threads: 4 }, Duration::from_secs(2));
    let r = go(&fake, &w, &config).await;
    let log = fake.log();
    let mut inserts: Vec<u64> = log
        .iter()
        .filter(|(q, _)| q.op == Op::Insert)
        .map(|(q, _)| q.keynum)
        .collect();
    inserts.sort_unstable();
    // Inserts take consecutive new key numbers, each once.
    assert_eq!(
        inserts,
        (100..100 + inserts.len() as u64).collect::<Vec<_>>()
    );
    // `latest` reads follow the inserts: most reads are of inserted keys.
    let reads: Vec<u64> = log
        .iter()
        .filter(|(q, _)| q.op == Op::Read)
        .map(|(q, _)| q.keynum)
        .collect();
    let of_inserted = reads.iter().filter(|&&k| k >= 100).count();
    assert!(
        of_inserted * 2 > reads.len(),
        "{of_inserted} of {}",
        reads.len()
    );
    // No read ever draws a key not yet acknowledged: every read key was inserted first.
    let max_inserted = *inserts.last().unwrap();
    assert!(reads.iter().all(|&k| k <= max_inserted));
    assert!(r.ops_started > 1000);
}

#[test]
fn the_acknowledged_limit_waits_for_the_keys_below_it() {
    let k = KeySpace::new(10);
    let (a, b, c) = (k.next_insert(), k.next_insert(), k.next_insert());
    assert_eq!((a, b, c), (10, 11, 12));
    k.acknowledge(11);
    k.acknowledge(12);
    assert_eq!(k.limit(), 10, "11 and 12 wait for 10");
    k.acknowledge(10);
    assert_eq!(k.limit(), 13);
}
