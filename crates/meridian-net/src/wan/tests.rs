//! End-to-end tests of the emulator over the in-process transport, under paused tokio time.
//!
//! Tokio timers tick in whole milliseconds, so a delivery happens at the first tick at or after
//! its scheduled instant: measured delays are the scheduled ones rounded up to 1 ms. Bounds
//! that are whole milliseconds therefore hold exactly; means carry a bias of at most 1 ms per
//! hop, which the tolerances below include. The exact distribution is checked on the model
//! (`model::tests::delays_fit_the_truncated_normal`).

use super::*;
use crate::{Inbox, MemNetwork, Transport};
use parking_lot::Mutex;
use std::time::Duration;

type Msg = (u64, Vec<u8>);

fn n(i: u32) -> NodeId {
    NodeId(i)
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Two DCs: n1 in dc0, n2 in dc1, `link` between them both ways, ideal links inside DCs.
fn config(link: LinkConfig, mode: DeliveryMode, seed: u64) -> WanConfig {
    WanConfig {
        seed,
        mode,
        intra_dc: LinkConfig::ideal(),
        dc_links: vec![DcLink {
            from: DcId(0),
            to: DcId(1),
            both: true,
            link,
        }],
        nodes: vec![
            Placement {
                node: n(1),
                dc: DcId(0),
            },
            Placement {
                node: n(2),
                dc: DcId(1),
            },
            Placement {
                node: n(3),
                dc: DcId(1),
            },
        ],
        ..WanConfig::default()
    }
}

type Log = Arc<Mutex<Vec<(NodeId, u64, Instant)>>>;

/// Joins nodes 1..=count to a network behind `wan`; every inbox is drained by a task that logs
/// (from, seq, arrival) and echoes requests.
fn cluster(wan: &WanEmulator, count: u32, inbox: usize) -> (Vec<Transport<Msg>>, Log) {
    let net = MemNetwork::<Msg>::with_inbox_capacity(inbox);
    let log: Log = Arc::default();
    let mut ts = Vec::new();
    for i in 1..=count {
        let (t, inbox) = net.join(n(i)).unwrap();
        t.layer(|w| wan.wrap(w));
        spawn_recorder(inbox, log.clone());
        ts.push(t);
    }
    (ts, log)
}

fn spawn_recorder(mut inbox: Inbox<Msg>, log: Log) {
    tokio::spawn(async move {
        while let Some(m) = inbox.recv().await {
            log.lock().push((m.from, m.body.0, Instant::now()));
            if let Some(r) = m.reply {
                let _ = r.respond(m.body);
            }
        }
    });
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Standard deviation of N(0.5, 1/6) truncated to [0, 1] (±3σ): σ·√(1 − 6φ(3)/(2Φ(3)−1)).
const TRUNCATED_SD: f64 = (1.0 / 6.0) * 0.986_58;

#[tokio::test(start_paused = true)]
async fn one_way_delays_match_the_spec() {
    let link = LinkConfig::wan(ms(100), 0.6);
    let wan = WanEmulator::new(config(link.clone(), DeliveryMode::Stream, 1)).unwrap();
    let (ts, log) = cluster(&wan, 2, 1024);
    let mut sent = Vec::new();
    for i in 0..2000u64 {
        sent.push(Instant::now());
        ts[0].send(n(2), (i, vec![])).unwrap();
        // Farther apart than the largest delay: no head-of-line clamping.
        tokio::time::sleep(ms(100)).await;
    }
    tokio::time::sleep(ms(200)).await;
    let log = log.lock();
    assert_eq!(log.len(), 2000);
    let delays: Vec<f64> = log
        .iter()
        .map(|&(_, i, at)| (at - sent[i as usize]).as_secs_f64() * 1e3)
        .collect();
    let (min, max) = delays
        .iter()
        .fold((f64::MAX, 0.0f64), |(a, b), &d| (a.min(d), b.max(d)));
    let (mean, sd) = mean_sd(&delays);
    // L/2 = 50 ms, L/2·(1+j) = 80 ms, mean L/2·(1 + j/2) = 65 ms, sd 50·0.6·σ_u ≈ 4.93 ms.
    assert!(min >= 50.0, "min {min}");
    assert!(max <= 80.0, "max {max}");
    let expected_mean = link.one_way_mean().as_secs_f64() * 1e3;
    assert!(
        (mean - expected_mean - 0.5).abs() < 0.6,
        "mean {mean} vs {expected_mean}"
    );
    let expected_sd = 50.0 * 0.6 * TRUNCATED_SD;
    assert!(
        (sd - expected_sd).abs() < 0.1 * expected_sd,
        "sd {sd} vs {expected_sd}"
    );
    // The distribution fills its range (min and max near the ends, not just the centre).
    assert!(min < 53.0 && max > 77.0, "range {min}..{max}");
}

#[tokio::test(start_paused = true)]
async fn round_trips_match_the_spec() {
    let link = LinkConfig::wan(ms(200), 0.6);
    let wan = WanEmulator::new(config(link, DeliveryMode::Stream, 2)).unwrap();
    let (ts, _log) = cluster(&wan, 2, 1024);
    let mut rtts = Vec::new();
    for i in 0..2000u64 {
        let start = Instant::now();
        let r = ts[0]
            .request(n(2), (i, vec![]), Duration::from_secs(5))
            .await;
        assert_eq!(r.unwrap().0, i);
        rtts.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let (min, max) = rtts
        .iter()
        .fold((f64::MAX, 0.0f64), |(a, b), &d| (a.min(d), b.max(d)));
    let (mean, _) = mean_sd(&rtts);
    // RTT in [L, L(1+j)] = [200, 320] ms, mean L(1 + j/2) = 260 ms (+ ≤ 1 ms tick per hop).
    assert!(min >= 200.0 && max <= 320.0, "range {min}..{max}");
    assert!((mean - 261.0).abs() < 1.5, "mean {mean}");
}

#[tokio::test(start_paused = true)]
async fn datagram_loss_rate_is_within_binomial_tolerance() {
    let p = 0.1;
    let link = LinkConfig::wan(ms(20), 0.0).with_loss(p);
    let wan = WanEmulator::new(config(link, DeliveryMode::Datagram, 3)).unwrap();
    let (ts, log) = cluster(&wan, 2, 4096);
    let count = 4000u64;
    for i in 0..count {
        ts[0].send(n(2), (i, vec![])).unwrap();
    }
    tokio::time::sleep(ms(100)).await;
    let delivered = log.lock().len() as f64;
    let expected = count as f64 * (1.0 - p);
    let sd = (count as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (delivered - expected).abs() < 4.0 * sd,
        "delivered {delivered}, expected {expected} ± {}",
        4.0 * sd
    );
    assert_eq!(wan.control().stats().lost, count - delivered as u64);
}

#[tokio::test(start_paused = true)]
async fn stream_loss_delays_but_delivers_everything_in_order() {
    let link = LinkConfig::wan(ms(50), 0.0).with_loss(0.2);
    let wan = WanEmulator::new(config(link, DeliveryMode::Stream, 4)).unwrap();
    let (ts, log) = cluster(&wan, 2, 4096);
    for i in 0..1000u64 {
        ts[0].send(n(2), (i, vec![])).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seqs: Vec<u64> = log.lock().iter().map(|e| e.1).collect();
    assert_eq!(
        seqs,
        (0..1000).collect::<Vec<_>>(),
        "exactly once, in order"
    );
    let retransmitted = wan.control().stats().retransmitted as f64;
    assert!((retransmitted - 200.0).abs() < 4.0 * (1000.0f64 * 0.2 * 0.8).sqrt());
    // The first retransmission holds back everything behind it (head-of-line blocking):
    // 25 ms one way + max(200 ms, 100 ms).
    let last = log.lock().last().unwrap().2;
    assert!(last - log.lock()[0].2 >= ms(200));
}

#[tokio::test(start_paused = true)]
async fn datagram_duplicates_arrive_twice() {
    let q = 0.2;
    let link = LinkConfig::wan(ms(10), 0.5).with_duplicate(q);
    let wan = WanEmulator::new(config(link, DeliveryMode::Datagram, 5)).unwrap();
    let (ts, log) = cluster(&wan, 2, 8192);
    let count = 2000u64;
    for i in 0..count {
        ts[0].send(n(2), (i, vec![])).unwrap();
    }
    tokio::time::sleep(ms(100)).await;
    let mut seen = vec![0u32; count as usize];
    for e in log.lock().iter() {
        seen[e.1 as usize] += 1;
    }
    assert!(seen.iter().all(|&c| c == 1 || c == 2));
    let dups = seen.iter().filter(|&&c| c == 2).count() as f64;
    let sd = (count as f64 * q * (1.0 - q)).sqrt();
    assert!(
        (dups - count as f64 * q).abs() < 4.0 * sd,
        "{dups} duplicates"
    );
    assert_eq!(wan.control().stats().duplicated, dups as u64);
}

#[tokio::test(start_paused = true)]
async fn jitter_never_reorders_without_reordering() {
    for mode in [DeliveryMode::Stream, DeliveryMode::Datagram] {
        let link = LinkConfig::wan(ms(100), 1.0);
        let wan = WanEmulator::new(config(link, mode, 6)).unwrap();
        let (ts, log) = cluster(&wan, 3, 4096);
        for i in 0..1000u64 {
            ts[0].send(n(2), (i, vec![])).unwrap();
            ts[2].send(n(2), (i, vec![])).unwrap();
            if i % 10 == 0 {
                tokio::time::sleep(ms(1)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        for from in [n(1), n(3)] {
            let seqs: Vec<u64> = log
                .lock()
                .iter()
                .filter(|e| e.0 == from)
                .map(|e| e.1)
                .collect();
            assert_eq!(seqs, (0..1000).collect::<Vec<_>>(), "{mode:?} from {from}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn datagram_reordering_happens_when_enabled() {
    let link = LinkConfig::wan(ms(100), 0.5).with_reorder(0.1);
    let wan = WanEmulator::new(config(link, DeliveryMode::Datagram, 7)).unwrap();
    let (ts, log) = cluster(&wan, 2, 4096);
    for i in 0..1000u64 {
        ts[0].send(n(2), (i, vec![])).unwrap();
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seqs: Vec<u64> = log.lock().iter().map(|e| e.1).collect();
    let mut sorted = seqs.clone();
    sorted.sort();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>(), "each exactly once");
    let inversions = seqs.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 20, "only {inversions} inversions");
    assert!(wan.control().stats().reordered > 50);
}

#[tokio::test(start_paused = true)]
async fn bandwidth_cap_serializes_bytes() {
    let b = 1_000_000u64; // 1 MB/s
    let link = LinkConfig::ideal().with_bandwidth(b);
    let wan = WanEmulator::new(config(link, DeliveryMode::Stream, 8)).unwrap();
    let (ts, log) = cluster(&wan, 2, 1024);
    let start = Instant::now();
    let mut bytes = 0;
    for i in 0..100u64 {
        let body = (i, vec![7u8; 10_000]);
        bytes += envelope::encoded_len(&Envelope::new(crate::Kind::OneWay, n(1), body.clone()));
        ts[0].send(n(2), body).unwrap();
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let log = log.lock();
    assert_eq!(log.len(), 100);
    let took = log.last().unwrap().2 - start;
    let expected = Duration::from_secs_f64(bytes as f64 / b as f64); // ≈ 1.0 s
    assert!(
        took >= expected && took <= expected + ms(1),
        "{took:?} vs {expected:?}"
    );
    // Each message arrives as its own bytes finish, not all at the end.
    let first = log[0].2 - start;
    assert!(first <= expected / 100 + ms(1), "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn partitions_cut_and_heal_one_way_or_both() {
    let link = LinkConfig::wan(ms(10), 0.0);
    let wan = WanEmulator::new(config(link, DeliveryMode::Stream, 9)).unwrap();
    let control = wan.control();
    let (ts, log) = cluster(&wan, 3, 1024);
    let t = Duration::from_secs(1);
    // One way: dc0 → dc1 cut. n1's requests time out; n2's messages still reach n1.
    control.cut(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    let r = ts[0].request(n(2), (1, vec![]), t).await;
    assert_eq!(
        r,
        Err(NetError::Timeout {
            peer: n(2),
            after: t
        })
    );
    ts[1].send(n(1), (2, vec![])).unwrap();
    tokio::time::sleep(ms(10)).await;
    assert_eq!(log.lock().last().map(|e| (e.0, e.1)), Some((n(2), 2)));
    // A request from n2 reaches n1, but n1's answer is cut.
    assert!(ts[1].request(n(1), (3, vec![]), t).await.is_err());
    control.heal(Scope::Dc(DcId(0)), Scope::Dc(DcId(1)));
    assert_eq!(ts[0].request(n(2), (4, vec![]), t).await.unwrap().0, 4);
    // Node-level, both ways: n1 isolated from n3 only.
    control.cut_both(Scope::Node(n(1)), Scope::Node(n(3)));
    assert!(ts[0].request(n(3), (5, vec![]), t).await.is_err());
    assert!(ts[2].request(n(1), (6, vec![]), t).await.is_err());
    assert_eq!(ts[0].request(n(2), (7, vec![]), t).await.unwrap().0, 7);
    control.isolate(n(2));
    assert!(ts[0].request(n(2), (8, vec![]), t).await.is_err());
    control.heal_all();
    assert_eq!(ts[0].request(n(3), (9, vec![]), t).await.unwrap().0, 9);
    assert_eq!(ts[1].request(n(1), (10, vec![]), t).await.unwrap().0, 10);
    assert!(control.stats().cut >= 5);
}

#[tokio::test(start_paused = true)]
async fn links_change_at_runtime() {
    let wan = WanEmulator::new(config(
        LinkConfig::wan(ms(100), 0.0),
        DeliveryMode::Stream,
        10,
    ))
    .unwrap();
    let control = wan.control();
    let (ts, _log) = cluster(&wan, 3, 1024);
    let rtt = |i: usize, to: u32| {
        let t = ts[i].clone();
        async move {
            let start = Instant::now();
            t.request(n(to), (0, vec![]), Duration::from_secs(5))
                .await
                .unwrap();
            start.elapsed()
        }
    };
    assert_eq!(rtt(0, 2).await, ms(100));
    control
        .set_dc_link_both(DcId(0), DcId(1), LinkConfig::wan(ms(300), 0.0))
        .unwrap();
    assert_eq!(rtt(0, 2).await, ms(300));
    control
        .set_node_link(n(1), n(3), LinkConfig::wan(ms(20), 0.0))
        .unwrap();
    control
        .set_node_link(n(3), n(1), LinkConfig::wan(ms(20), 0.0))
        .unwrap();
    assert_eq!(rtt(0, 3).await, ms(20));
    control.clear_node_link(n(1), n(3));
    assert_eq!(
        rtt(0, 3).await,
        ms(160),
        "10 ms back over the DC link and 150 ms forth"
    );
    control.clear_node_link(n(3), n(1));
    control.place(n(3), DcId(0));
    control.set_intra_dc(LinkConfig::wan(ms(2), 0.0)).unwrap();
    assert_eq!(rtt(0, 3).await, ms(2));
    assert!(
        control
            .set_inter_dc(LinkConfig::ideal().with_loss(2.0))
            .is_err()
    );
    let cfg = control.config();
    assert_eq!(cfg.nodes.len(), 3);
    assert_eq!(cfg.dc_links.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn full_link_is_overloaded_and_full_inbox_holds_messages_back() {
    let mut cfg = config(LinkConfig::wan(ms(10), 0.0), DeliveryMode::Stream, 11);
    cfg.max_in_flight = 4;
    let wan = WanEmulator::new(cfg).unwrap();
    let net = MemNetwork::<Msg>::with_inbox_capacity(2);
    let (a, _ia) = net.join(n(1)).unwrap();
    let (_b, mut ib) = net.join(n(2)).unwrap();
    a.layer(|w| wan.wrap(w));
    for i in 0..4 {
        a.send(n(2), (i, vec![])).unwrap();
    }
    assert!(matches!(
        a.send(n(2), (4, vec![])),
        Err(NetError::Overloaded {
            queue: "WAN emulator link",
            capacity: 4,
            ..
        })
    ));
    tokio::time::sleep(ms(50)).await;
    // The inbox holds 2; the other 2 wait in the emulator rather than being dropped.
    assert_eq!(ib.len(), 2);
    a.send(n(2), (4, vec![])).unwrap();
    a.send(n(2), (5, vec![])).unwrap();
    assert!(a.send(n(2), (6, vec![])).is_err());
    let mut got = Vec::new();
    while got.len() < 6 {
        got.push(ib.recv().await.unwrap().body.0);
    }
    assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(wan.control().stats().overloaded, 2);
}

/// Runs a busy mixed scenario and returns its delivery trace (relative times).
async fn scenario(seed: u64) -> Vec<(NodeId, u64, Duration)> {
    let link = LinkConfig::wan(ms(80), 0.6)
        .with_loss(0.05)
        .with_duplicate(0.05)
        .with_reorder(0.05)
        .with_bandwidth(2_000_000);
    let mut cfg = config(link, DeliveryMode::Datagram, seed);
    cfg.intra_dc = LinkConfig::lan();
    let wan = WanEmulator::new(cfg).unwrap();
    let start = Instant::now();
    let (ts, log) = cluster(&wan, 3, 4096);
    let mut set = tokio::task::JoinSet::new();
    for (i, t) in ts.iter().enumerate() {
        let t = t.clone();
        set.spawn(async move {
            for k in 0..200u64 {
                let to = n(1 + ((i as u32 + 1 + (k % 2) as u32) % 3));
                let seq = (i as u64) << 32 | k;
                if k % 3 == 0 {
                    let _ = t.request(to, (seq, vec![0; 300]), ms(500)).await;
                } else {
                    t.send(to, (seq, vec![0; (k as usize * 37) % 2000]))
                        .unwrap();
                    tokio::time::sleep(Duration::from_micros(700)).await;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    tokio::time::sleep(Duration::from_secs(2)).await;
    log.lock()
        .iter()
        .map(|&(f, s, at)| (f, s, at - start))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn same_seed_gives_the_same_delivery_schedule() {
    let a = scenario(42).await;
    let b = scenario(42).await;
    assert!(a.len() > 500, "{} deliveries", a.len());
    assert_eq!(a, b);
    let c = scenario(43).await;
    assert_ne!(a, c, "a different seed gives a different schedule");
}
