//! A phi-accrual failure detector (Hayashibara et al., as used by Cassandra and Akka).
//!
//! Instead of a yes/no timeout, each peer gets a suspicion level φ that grows the longer its
//! next heartbeat is overdue, measured against the distribution of its own recent
//! inter-arrival times: φ = −log10(P(a heartbeat arrives later than now)). A peer is *up*
//! while φ is below the threshold (default 8: about one wrong verdict in 10⁸ under the fitted
//! distribution). So a peer across a jittery 200 ms WAN link is judged by its own rhythm, not
//! by a timeout tuned for the LAN.
//!
//! Guarantees: pure and deterministic — time comes in as [`Timestamp`] arguments, never from
//! a clock; φ never decreases while no heartbeat arrives; a peer never heard from is not up;
//! a heartbeat makes a peer up again at once; memory per peer is bounded by the window size.
//!
//! **A local stall is not evidence.** When this process itself stops running for a while
//! (starved of CPU, paused, swapped), every peer's heartbeats pile up unread and every peer
//! looks silent the moment it resumes, before the backlog is read; a node that answered then
//! would report all its peers failed (and clients that refresh their slot map from it would
//! move every slot to it). So the owner reports its own heartbeat ticks
//! ([`FailureDetector::local_beat`]), as Cassandra's detector checks for a local pause: a peer
//! is judged no later than shortly after the last local tick, and a late local tick credits
//! every peer with the time this process was not running.

use meridian_core::{NodeId, Timestamp};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Settings of a [`FailureDetector`].
#[derive(Clone, Debug, PartialEq)]
pub struct DetectorConfig {
    /// φ at or above which a peer is suspected down.
    pub threshold: f64,
    /// How many recent inter-arrival intervals each peer's distribution is fitted to.
    pub window: usize,
    /// Floor on the fitted standard deviation, so a perfectly regular peer is not declared
    /// down by the first late heartbeat.
    pub min_std_dev: Duration,
    /// Extra pause tolerated on top of the mean interval (GC pauses, a busy event loop).
    pub acceptable_pause: Duration,
    /// Interval assumed after the first heartbeat, before there is any history.
    pub first_interval: Duration,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            window: 200,
            min_std_dev: Duration::from_millis(100),
            acceptable_pause: Duration::from_millis(0),
            first_interval: Duration::from_secs(1),
        }
    }
}

/// One peer's heartbeat history.
#[derive(Clone, Debug)]
struct History {
    last: Timestamp,
    intervals_us: VecDeque<f64>,
    sum: f64,
    sum_sq: f64,
}

impl History {
    fn push(&mut self, interval_us: f64, window: usize) {
        if self.intervals_us.len() == window
            && let Some(old) = self.intervals_us.pop_front()
        {
            self.sum -= old;
            self.sum_sq -= old * old;
        }
        self.intervals_us.push_back(interval_us);
        self.sum += interval_us;
        self.sum_sq += interval_us * interval_us;
    }

    fn mean_and_std(&self) -> (f64, f64) {
        let n = self.intervals_us.len() as f64;
        let mean = self.sum / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        (mean, var.sqrt())
    }
}

/// Suspicion levels for a set of peers. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct FailureDetector {
    config: DetectorConfig,
    peers: BTreeMap<NodeId, History>,
    /// This process's last heartbeat tick and the period of its ticks, once reported.
    local: Option<(Timestamp, Duration)>,
}

impl FailureDetector {
    /// A detector with no peers.
    pub fn new(config: DetectorConfig) -> Self {
        Self {
            config,
            peers: BTreeMap::new(),
            local: None,
        }
    }

    /// Records this process's own heartbeat tick at `now` (ticks due every `every`). A tick
    /// later than one period after the previous one means this process was not running for
    /// the difference: every peer's silence is shortened by it (never past `now`).
    pub fn local_beat(&mut self, now: Timestamp, every: Duration) {
        if let Some((prev, _)) = self.local {
            let lost = now.duration_since(prev).saturating_sub(every);
            if !lost.is_zero() {
                for h in self.peers.values_mut() {
                    h.last = h.last.saturating_add(lost).min(now);
                }
            }
        }
        self.local = Some((now, every));
    }

    /// The time peers are judged at: `now`, or, while this process's own next tick is overdue
    /// (it is stalled, or has just resumed and not yet ticked), the time that tick was due.
    fn judged_at(&self, now: Timestamp) -> Timestamp {
        match self.local {
            Some((tick, every)) => now.min(tick.saturating_add(every)),
            None => now,
        }
    }

    /// Records a heartbeat from `peer` received at `now`. A heartbeat older than the last one
    /// (reordered on the network) only confirms the peer is alive and adds no interval.
    ///
    /// A heartbeat that ends a silence long enough to have the peer suspected (an outage, a
    /// restart) starts its history over instead of adding the silence as an interval: one
    /// outage in the window would otherwise teach the detector to wait many times longer
    /// before it suspects the peer again.
    pub fn heartbeat(&mut self, peer: NodeId, now: Timestamp) {
        let window = self.config.window.max(1);
        let suspected = self.peers.contains_key(&peer) && !self.is_up(peer, now);
        match self.peers.get_mut(&peer) {
            Some(h) if now > h.last && !suspected => {
                let interval = now.duration_since(h.last).as_micros() as f64;
                h.push(interval, window);
                h.last = now;
            }
            Some(h) if now <= h.last => {}
            _ => {
                let h = self.seeded(now);
                self.peers.insert(peer, h);
            }
        }
    }

    /// A history with only the assumed interval (and a spread around it), so the next
    /// heartbeat is judged against something sensible.
    fn seeded(&self, now: Timestamp) -> History {
        let first = self.config.first_interval.as_micros() as f64;
        let window = self.config.window.max(1);
        let mut h = History {
            last: now,
            intervals_us: VecDeque::with_capacity(window),
            sum: 0.0,
            sum_sq: 0.0,
        };
        h.push(first - first / 4.0, window);
        h.push(first + first / 4.0, window);
        h
    }

    /// The suspicion level of `peer` at `now`; infinite for a peer never heard from.
    pub fn phi(&self, peer: NodeId, now: Timestamp) -> f64 {
        let Some(h) = self.peers.get(&peer) else {
            return f64::INFINITY;
        };
        let now = self.judged_at(now);
        let (mean, std) = h.mean_and_std();
        let mean = mean + self.config.acceptable_pause.as_micros() as f64;
        let std = std.max(self.config.min_std_dev.as_micros() as f64);
        let elapsed = now.duration_since(h.last).as_micros() as f64;
        phi(elapsed, mean, std)
    }

    /// Whether `peer` is considered up at `now`.
    pub fn is_up(&self, peer: NodeId, now: Timestamp) -> bool {
        let now = self.judged_at(now);
        // The common case without the exp and log: phi grows with the silence and is
        // −log10(½) ≈ 0.30 when the silence equals the expected interval, so a silence no
        // longer than that is up under any threshold above it.
        if let Some(h) = self.peers.get(&peer)
            && self.config.threshold > PHI_AT_MEAN
        {
            let expected = h.sum / h.intervals_us.len() as f64
                + self.config.acceptable_pause.as_micros() as f64;
            if (now.duration_since(h.last).as_micros() as f64) <= expected {
                return true;
            }
        }
        self.phi(peer, now) < self.config.threshold
    }

    /// Forgets `peer` (it left the cluster).
    pub fn remove(&mut self, peer: NodeId) {
        self.peers.remove(&peer);
    }

    /// The peers heard from at least once, in id order.
    pub fn peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.peers.keys().copied()
    }
}

/// phi when the silence equals the expected interval (a little above −log10(½), for margin).
const PHI_AT_MEAN: f64 = 0.31;

/// −log10 of the probability that a heartbeat comes later than `elapsed`, for normally
/// distributed intervals, using the logistic approximation of the normal CDF (as Akka does),
/// which is accurate to about 1e-4 and never returns NaN.
fn phi(elapsed: f64, mean: f64, std: f64) -> f64 {
    let y = (elapsed - mean) / std;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    let p_later = if elapsed > mean {
        e / (1.0 + e)
    } else {
        1.0 - 1.0 / (1.0 + e)
    };
    if p_later <= 0.0 {
        f64::INFINITY
    } else {
        -p_later.log10()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: NodeId = NodeId(7);

    fn at_ms(ms: u64) -> Timestamp {
        Timestamp(ms * 1_000)
    }

    /// A detector that has seen heartbeats every `every_ms` up to `until_ms`.
    fn regular(every_ms: u64, until_ms: u64) -> FailureDetector {
        let mut d = FailureDetector::new(DetectorConfig::default());
        let mut t = 0;
        while t <= until_ms {
            d.heartbeat(PEER, at_ms(t));
            t += every_ms;
        }
        d
    }

    #[test]
    fn a_peer_never_heard_from_is_not_up() {
        let d = FailureDetector::new(DetectorConfig::default());
        assert!(!d.is_up(PEER, at_ms(0)));
        assert_eq!(d.phi(PEER, at_ms(0)), f64::INFINITY);
    }

    #[test]
    fn regular_heartbeats_keep_a_peer_up_and_silence_brings_it_down() {
        let d = regular(1_000, 60_000);
        assert!(
            d.is_up(PEER, at_ms(60_500)),
            "half an interval late is fine"
        );
        assert!(d.is_up(PEER, at_ms(61_200)));
        assert!(
            !d.is_up(PEER, at_ms(66_000)),
            "five missed heartbeats is down"
        );
    }

    #[test]
    fn phi_never_decreases_during_silence() {
        let d = regular(500, 30_000);
        let mut last = 0.0;
        for ms in (30_000..40_000).step_by(50) {
            let p = d.phi(PEER, at_ms(ms));
            assert!(p >= last, "phi fell from {last} to {p} at {ms} ms");
            last = p;
        }
        assert!(last.is_infinite() || last > 8.0);
    }

    #[test]
    fn the_fast_path_agrees_with_phi() {
        let d = regular(500, 30_000);
        let strict = FailureDetector {
            config: DetectorConfig {
                threshold: 0.2,
                ..DetectorConfig::default()
            },
            ..d.clone()
        };
        for ms in (30_000..36_000).step_by(10) {
            let now = at_ms(ms);
            assert_eq!(
                d.is_up(PEER, now),
                d.phi(PEER, now) < d.config.threshold,
                "{ms}"
            );
            assert_eq!(strict.is_up(PEER, now), strict.phi(PEER, now) < 0.2, "{ms}");
        }
    }

    #[test]
    fn a_heartbeat_brings_a_suspected_peer_back_at_once() {
        let mut d = regular(1_000, 10_000);
        assert!(!d.is_up(PEER, at_ms(30_000)));
        d.heartbeat(PEER, at_ms(30_000));
        assert!(d.is_up(PEER, at_ms(30_001)));
    }

    #[test]
    fn a_jittery_peer_is_judged_by_its_own_rhythm() {
        // Heartbeats every 1 s ± 400 ms (as across a jittery WAN): a gap of 2.2 s is within its
        // normal behaviour; for a metronome-regular peer with the same mean it is not.
        let mut jittery = FailureDetector::new(DetectorConfig {
            min_std_dev: Duration::from_millis(10),
            ..DetectorConfig::default()
        });
        let mut steady = jittery.clone();
        let mut t = 0;
        for i in 0..200u64 {
            jittery.heartbeat(PEER, at_ms(t + if i % 2 == 0 { 0 } else { 800 }));
            steady.heartbeat(PEER, at_ms(t));
            t += 1_000;
        }
        let last_j = at_ms(t - 1_000 + 800);
        let last_s = at_ms(t - 1_000);
        let gap = Duration::from_millis(2_200);
        assert!(jittery.is_up(PEER, last_j.saturating_add(gap)));
        assert!(!steady.is_up(PEER, last_s.saturating_add(gap)));
    }

    #[test]
    fn an_outage_does_not_teach_the_detector_to_wait_longer() {
        let mut d = regular(100, 10_000);
        let down_after = |d: &FailureDetector, from_ms: u64| {
            (from_ms..from_ms + 60_000)
                .step_by(10)
                .find(|&t| !d.is_up(PEER, at_ms(t)))
                .map(|t| t - from_ms)
                .expect("suspected within a minute")
        };
        let before = down_after(&d, 10_000);
        // Thirty seconds of silence (a crash), then the peer is back on its old rhythm.
        for t in (40_000..=50_000).step_by(100) {
            d.heartbeat(PEER, at_ms(t));
        }
        assert!(d.is_up(PEER, at_ms(50_000)));
        let after = down_after(&d, 50_000);
        assert!(
            after <= before + 200,
            "suspected after {after} ms, {before} ms before"
        );
    }

    #[test]
    fn reordered_old_heartbeats_add_no_interval() {
        let mut d = regular(1_000, 10_000);
        let before = d.phi(PEER, at_ms(10_800));
        d.heartbeat(PEER, at_ms(9_500));
        assert_eq!(d.phi(PEER, at_ms(10_800)), before);
    }

    #[test]
    fn the_window_bounds_memory_and_forgets_old_rhythms() {
        let mut d = FailureDetector::new(DetectorConfig {
            window: 20,
            ..DetectorConfig::default()
        });
        let mut t = 0;
        for _ in 0..100 {
            d.heartbeat(PEER, at_ms(t));
            t += 10_000; // a slow rhythm...
        }
        for _ in 0..40 {
            d.heartbeat(PEER, at_ms(t));
            t += 100; // ...then a fast one, which alone now defines "late".
        }
        assert_eq!(d.peers[&PEER].intervals_us.len(), 20);
        assert!(!d.is_up(PEER, at_ms(t + 3_000)));
        d.remove(PEER);
        assert_eq!(d.peers().count(), 0);
    }

    /// `regular(1_000, until_ms)` with this process's own ticks every second alongside.
    fn regular_with_local_ticks(until_ms: u64) -> FailureDetector {
        let mut d = FailureDetector::new(DetectorConfig::default());
        for t in (0..=until_ms).step_by(1_000) {
            d.local_beat(at_ms(t), Duration::from_secs(1));
            d.heartbeat(PEER, at_ms(t));
        }
        d
    }

    #[test]
    fn a_local_stall_does_not_condemn_peers_before_or_after_the_late_tick() {
        let mut d = regular_with_local_ticks(60_000);
        // This process stops for 10 s: the peer's heartbeats wait unread.
        let resumed = at_ms(70_000);
        assert!(d.is_up(PEER, resumed), "before our own late tick");
        d.local_beat(resumed, Duration::from_secs(1));
        assert!(d.is_up(PEER, resumed), "after our own late tick");
        assert!(d.is_up(PEER, at_ms(70_500)));
        // The backlog is read; the rhythm goes on.
        d.heartbeat(PEER, at_ms(70_600));
        assert!(d.is_up(PEER, at_ms(71_000)));
    }

    #[test]
    fn a_peer_that_dies_is_still_suspected_while_this_process_ticks() {
        let mut d = regular_with_local_ticks(60_000);
        for t in (61_000..=66_000).step_by(1_000) {
            d.local_beat(at_ms(t), Duration::from_secs(1));
        }
        assert!(
            !d.is_up(PEER, at_ms(66_000)),
            "five missed heartbeats is down"
        );
        // Without our ticks the verdict does not move past the time our next tick was due...
        let mut frozen = regular_with_local_ticks(60_000);
        assert!(frozen.is_up(PEER, at_ms(66_000)));
        // ...and our 6 s late tick credits the peer with the 5 s we were not running.
        frozen.local_beat(at_ms(66_000), Duration::from_secs(1));
        assert!(frozen.is_up(PEER, at_ms(66_000)));
        for t in (67_000..=70_000).step_by(1_000) {
            frozen.local_beat(at_ms(t), Duration::from_secs(1));
        }
        assert!(
            !frozen.is_up(PEER, at_ms(70_000)),
            "silent for 5 s we ran through"
        );
    }
}
