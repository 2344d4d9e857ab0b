//! One coordinator's view of its peers and the immediate strategies of spec §1: it orders a
//! read's candidates and learns from every send, reply and failure.
//!
//! A [`Balancer`] lives on each node (one per coordinator, shared by all its reads, behind
//! the caller's lock). Its state is per peer: requests in flight from this coordinator, the
//! last [`LoadFeedback`], the dynamic snitch's latency reservoir and scores, C3's EWMAs and
//! rate limiter. [`Balancer::order`] returns a permutation of the candidates (the caller
//! passes only live ones) and is deterministic for a seed and a sequence of calls.
//!
//! Choices the sources leave open:
//! - **Round robin** keys its counter by the sorted candidate set and puts
//!   `sorted[counter % len]` first (the rest rotated after it), so each member leads once
//!   per cycle even if the preference order of the same set changes.
//! - **Ties** of `least_outstanding`, `least_queue` and `power_of_d` are broken by the
//!   seeded RNG (a shuffle before a stable sort); `first_two` and the score sorts of the
//!   snitch and C3 keep the primary order on ties.
//! - **Dynamic snitch reservoir**: Codahale's `ExponentiallyDecayingReservoir` (forward
//!   decay): a sample taken `t` s after the landmark weighs `exp(α·t)` and competes for the
//!   100 slots with priority `weight / u`, `u` uniform in (0, 1]; the median is
//!   `WeightedSnapshot`'s (the smallest value whose preceding weights reach half). The
//!   landmark moves (weights rescaled) once `α·t` passes 64 rather than every hour, which
//!   keeps weights finite and changes no ratio. Samples come from their own RNG stream, so
//!   replies do not shift the strategies' random draws. Scores are recomputed lazily by
//!   [`Balancer::order`] once the update interval has passed, and all samples are cleared
//!   lazily once the reset interval has (on the next reply or order).
//! - **Failures** feed the snitch a penalty sample (Cassandra records an expired callback's
//!   timeout as its latency): at least 1 s and twice the slowest peer's median, so a
//!   peer whose recent requests mostly fail sorts last.
//! - **C3**: EWMAs start at the first feedback (absim); a reply without feedback only
//!   counts for the rate. `nw = rtt − svc` is floored at 0. A peer never heard from scores
//!   0, so it is tried. The cubic's `T` is in milliseconds, as in cassandra-c3 and absim
//!   (the constants assume it). The receive rate is the number of replies in the sliding
//!   window `(now − δ, now]`. A new peer starts with a full bucket and `srate = R0 =` the
//!   bucket capacity (absim), as if its rate had just been raised (`t_inc` = first
//!   contact, so its receive rate is measured for HYST before any decrease) and never
//!   lowered (`t_dec = 0`, so increases take `Smax` steps until the first congestion).

use crate::{Micros, Strategy};
use meridian_core::NodeId;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, VecDeque};

/// What a replica reports with every read reply (piggy-backed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadFeedback {
    /// Reads queued or in service at the replica when it answered.
    pub queue: u32,
    /// How long the replica took to serve this read, in microseconds.
    pub service_us: u32,
}

/// The dynamic snitch's settings (Cassandra 3.x defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SnitchConfig {
    /// How often scores are recomputed (100 ms).
    pub update_interval_us: Micros,
    /// How often the samples are cleared (600 s).
    pub reset_interval_us: Micros,
    /// How much worse the primary order must be before it is abandoned (0.1).
    pub badness: f64,
    /// Reservoir size per peer (100).
    pub reservoir: usize,
    /// The reservoir's decay (0.75).
    pub alpha: f64,
}

impl Default for SnitchConfig {
    fn default() -> Self {
        SnitchConfig {
            update_interval_us: 100_000,
            reset_interval_us: 600_000_000,
            badness: 0.1,
            reservoir: 100,
            alpha: 0.75,
        }
    }
}

/// C3's settings (cassandra-c3 defaults; absim uses `delta_us = 10 000`, `hyst_us = 20 000`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct C3Config {
    /// EWMA weight of the newest feedback (0.9).
    pub alpha: f64,
    /// Multiplicative decrease (0.2).
    pub beta: f64,
    /// Cubic growth constant (4e-6).
    pub gamma: f64,
    /// Largest step of an increase, tokens per δ (10).
    pub s_max: f64,
    /// Rate-control interval δ (20 ms).
    pub delta_us: Micros,
    /// Hysteresis after an increase before a decrease (4δ).
    pub hyst_us: Micros,
    /// Token bucket capacity (10).
    pub bucket_capacity: f64,
    /// Reads that may wait for a token before new ones are refused (1024).
    pub backlog_max: usize,
}

impl Default for C3Config {
    fn default() -> Self {
        C3Config {
            alpha: 0.9,
            beta: 0.2,
            gamma: 4e-6,
            s_max: 10.0,
            delta_us: 20_000,
            hyst_us: 80_000,
            bucket_capacity: 10.0,
            backlog_max: 1024,
        }
    }
}

/// A [`Balancer`]'s settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BalancerConfig {
    /// Number of coordinators sending reads (C3's `N_c`).
    pub coordinators: u32,
    /// Candidates sampled by `power_of_d` (2).
    pub power_d: usize,
    /// Dynamic snitch settings.
    pub snitch: SnitchConfig,
    /// C3 settings.
    pub c3: C3Config,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        BalancerConfig {
            coordinators: 1,
            power_d: 2,
            snitch: SnitchConfig::default(),
            c3: C3Config::default(),
        }
    }
}

/// What a coordinator knows of one peer (for metrics and `meridian ctl`).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerView {
    /// The peer.
    pub node: NodeId,
    /// Reads this coordinator has in flight there.
    pub outstanding: u32,
    /// The queue length it last reported.
    pub queue: u32,
    /// C3's service-time EWMA, microseconds.
    pub service_us: f64,
    /// The dynamic snitch's score (0 when unknown).
    pub snitch_score: f64,
    /// C3's score.
    pub c3_score: f64,
    /// C3's sending rate, reads per δ.
    pub c3_rate: f64,
    /// Reads sent there by this coordinator in total.
    pub chosen: u64,
}

/// One coordinator's replica-selection state. See the module docs.
#[derive(Debug)]
pub struct Balancer {
    cfg: BalancerConfig,
    /// Draws of the strategies (shuffles, samples, tie breaks).
    rng: ChaCha8Rng,
    /// Draws of the snitch's reservoirs.
    sample_rng: ChaCha8Rng,
    peers: BTreeMap<NodeId, Peer>,
    /// Round robin's counters, by sorted candidate set.
    rr: BTreeMap<Vec<NodeId>, u64>,
    /// When the snitch last recomputed its scores.
    snitch_updated: Option<Micros>,
    /// When the snitch last cleared its samples (or first saw time).
    snitch_reset: Option<Micros>,
    /// The largest median at the last score update (ms).
    snitch_max_ms: f64,
    /// Reads waiting for a C3 token.
    c3_waiting: usize,
}

/// Round robin forgets its counters when this many replica sets have been seen, so the map
/// stays bounded however the extra copies churn (evenness only restarts).
const RR_SETS_MAX: usize = 1 << 16;

/// The reservoir's landmark moves once `α·t` passes this (`e^64` is far from overflow).
const RESCALE_EXPONENT: f64 = 64.0;

/// A failed read's snitch sample is at least this (ms).
const FAILURE_PENALTY_MS: f64 = 1_000.0;

/// The floor of C3's sending rate, tokens per δ (both cassandra-c3 and absim clamp).
const C3_MIN_RATE: f64 = 0.01;

/// Longest wait for a token `c3_admit` reports (an hour), so a broken setting cannot make a
/// read wait forever.
const C3_MAX_WAIT_US: f64 = 3_600_000_000.0;

#[derive(Debug)]
struct Peer {
    outstanding: u32,
    chosen: u64,
    queue: u32,
    snitch: Reservoir,
    snitch_score: f64,
    c3: C3Peer,
}

impl Peer {
    fn new(now: Micros, c3: &C3Config) -> Peer {
        Peer {
            outstanding: 0,
            chosen: 0,
            queue: 0,
            snitch: Reservoir::new(now),
            snitch_score: 0.0,
            c3: C3Peer::new(now, c3),
        }
    }
}

/// Forward-decay priority sampling (Cormode et al.; Codahale's
/// `ExponentiallyDecayingReservoir`).
#[derive(Debug)]
struct Reservoir {
    landmark: Micros,
    samples: Vec<Sample>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    priority: f64,
    weight: f64,
    value: f64,
}

impl Reservoir {
    fn new(now: Micros) -> Reservoir {
        Reservoir {
            landmark: now,
            samples: Vec::new(),
        }
    }

    fn clear(&mut self, now: Micros) {
        self.samples.clear();
        self.landmark = now;
    }

    fn add(&mut self, value: f64, now: Micros, cfg: &SnitchConfig, rng: &mut ChaCha8Rng) {
        if cfg.reservoir == 0 || !value.is_finite() {
            return;
        }
        let now = now.max(self.landmark);
        let mut exponent = cfg.alpha * secs(now - self.landmark);
        if exponent > RESCALE_EXPONENT {
            let factor = (-exponent).exp();
            for s in &mut self.samples {
                s.weight *= factor;
                s.priority *= factor;
            }
            self.landmark = now;
            exponent = 0.0;
        }
        let weight = exponent.exp();
        // `random` is in [0, 1): flip it so the divisor is never 0.
        let u = 1.0 - rng.random::<f64>();
        let sample = Sample {
            priority: weight / u,
            weight,
            value,
        };
        if self.samples.len() < cfg.reservoir {
            self.samples.push(sample);
            return;
        }
        let lowest = self
            .samples
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.priority.total_cmp(&b.1.priority))
            .map(|(i, s)| (i, s.priority));
        if let Some((i, p)) = lowest
            && sample.priority > p
        {
            self.samples[i] = sample;
        }
    }

    /// `WeightedSnapshot::getMedian`: the largest value whose preceding normalised weights
    /// sum to at most ½ (0 when empty).
    fn median(&self) -> f64 {
        let mut v: Vec<(f64, f64)> = self.samples.iter().map(|s| (s.value, s.weight)).collect();
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let total: f64 = v.iter().map(|s| s.1).sum();
        // Every weight underflowed (samples from long ago): weigh them equally.
        let norm = |w: f64| {
            if total > 0.0 && total.is_finite() {
                w / total
            } else {
                1.0 / v.len() as f64
            }
        };
        let mut below = 0.0;
        let mut median = v[0].0;
        for &(value, weight) in &v {
            if below > 0.5 {
                break;
            }
            median = value;
            below += norm(weight);
        }
        median
    }
}

/// C3's per-peer state: feedback EWMAs and the cubic rate controller with its bucket.
#[derive(Debug)]
struct C3Peer {
    seen: bool,
    queue: f64,
    service_us: f64,
    nw_us: f64,
    /// Sending rate, tokens per δ.
    srate: f64,
    /// The rate at the last decrease (`R0`).
    r0: f64,
    t_dec: Micros,
    t_inc: Micros,
    tokens: f64,
    refilled_at: Micros,
    /// Reply times within the last δ.
    replies: VecDeque<Micros>,
}

impl C3Peer {
    fn new(now: Micros, cfg: &C3Config) -> C3Peer {
        let cap = capacity(cfg);
        C3Peer {
            seen: false,
            queue: 0.0,
            service_us: 0.0,
            nw_us: 0.0,
            srate: cap,
            r0: cap,
            t_dec: 0,
            t_inc: now,
            tokens: cap,
            refilled_at: now,
            replies: VecDeque::new(),
        }
    }

    fn score(&self, outstanding: u32, coordinators: u32) -> f64 {
        let q = 1.0 + f64::from(outstanding) * f64::from(coordinators) + self.queue;
        self.nw_us + q.powi(3) * self.service_us
    }

    fn feedback(&mut self, rtt_us: Micros, fb: LoadFeedback, alpha: f64) {
        let svc = f64::from(fb.service_us);
        let nw = (rtt_us as f64 - svc).max(0.0);
        let q = f64::from(fb.queue);
        if self.seen {
            let ewma = |old: f64, new: f64| alpha * new + (1.0 - alpha) * old;
            self.queue = ewma(self.queue, q);
            self.service_us = ewma(self.service_us, svc);
            self.nw_us = ewma(self.nw_us, nw);
        } else {
            (self.queue, self.service_us, self.nw_us) = (q, svc, nw);
            self.seen = true;
        }
    }

    fn refill(&mut self, now: Micros, cfg: &C3Config) {
        if now > self.refilled_at {
            let gained = self.srate * (now - self.refilled_at) as f64 / delta(cfg);
            self.tokens = (self.tokens + gained).min(capacity(cfg));
            self.refilled_at = now;
        }
    }

    fn try_take(&mut self, now: Micros, cfg: &C3Config) -> bool {
        self.refill(now, cfg);
        // A wait computed to the microsecond may leave a hair under one token.
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }

    /// When the bucket next holds a token (after a refill at `now`), at least `now + 1`.
    fn token_at(&self, now: Micros, cfg: &C3Config) -> Micros {
        let wait = ((1.0 - self.tokens) * delta(cfg) / self.srate).ceil();
        let wait = if wait.is_nan() {
            C3_MAX_WAIT_US
        } else {
            wait.clamp(1.0, C3_MAX_WAIT_US)
        };
        now.saturating_add(wait as Micros)
    }

    /// Whether the replica reports a queue (C3's rate limiter binds only then: see
    /// [`C3_CONGESTED`]).
    fn congested(&self) -> bool {
        self.queue >= C3_CONGESTED
    }

    /// Counts a reply and runs the cubic rate control (spec §1 `rate[n]`).
    fn on_reply(&mut self, now: Micros, cfg: &C3Config) {
        self.replies.push_back(now);
        let since = now.saturating_sub(cfg.delta_us);
        while self.replies.front().is_some_and(|&t| t <= since && t < now) {
            self.replies.pop_front();
        }
        let rrate = self.replies.len() as f64;
        // Tokens accrued so far were earned at the old rate.
        self.refill(now, cfg);
        if self.srate < rrate {
            let t_ms = now.saturating_sub(self.t_dec) as f64 / 1_000.0;
            let k = (cfg.beta * self.r0 / cfg.gamma).cbrt();
            let cubic = cfg.gamma * (t_ms - k).powi(3) + self.r0;
            self.srate = cubic.min(self.srate + cfg.s_max).max(C3_MIN_RATE);
            self.t_inc = now;
        } else if self.srate > rrate
            && self.congested()
            && now.saturating_sub(self.t_inc) > cfg.hyst_us
        {
            self.r0 = self.srate;
            self.srate = (cfg.beta * self.srate).max(C3_MIN_RATE);
            self.t_dec = now;
        }
    }
}

/// The queue (EWMA of the reported queue length) from which C3's rate limiter binds **[M]**.
/// Below it the replica keeps up with what it is sent: a limit would only throttle a healthy
/// cluster (the cubic controller tracks the receive rate, which a limit caps, so with fast
/// replicas it never grows past its initial 10 reads per δ — measured: a third of the
/// throughput of `local_first`), and a lower demand than the limit is no reason to lower it.
pub const C3_CONGESTED: f64 = 1.0;

fn capacity(cfg: &C3Config) -> f64 {
    cfg.bucket_capacity.max(1.0)
}

fn delta(cfg: &C3Config) -> f64 {
    cfg.delta_us.max(1) as f64
}

fn secs(us: Micros) -> f64 {
    us as f64 / 1e6
}

impl Balancer {
    /// A balancer with `cfg`, its random choices drawn from `seed`.
    pub fn new(cfg: BalancerConfig, seed: u64) -> Balancer {
        let mut sample_rng = ChaCha8Rng::seed_from_u64(seed);
        sample_rng.set_stream(1);
        Balancer {
            cfg: BalancerConfig {
                coordinators: cfg.coordinators.max(1),
                ..cfg
            },
            rng: ChaCha8Rng::seed_from_u64(seed),
            sample_rng,
            peers: BTreeMap::new(),
            rr: BTreeMap::new(),
            snitch_updated: None,
            snitch_reset: None,
            snitch_max_ms: 1.0,
            c3_waiting: 0,
        }
    }

    /// Changes C3's `N_c` (the cluster's size changed).
    pub fn set_coordinators(&mut self, n: u32) {
        self.cfg.coordinators = n.max(1);
    }

    /// The order in which a read tries `cands` under `strategy` (a permutation of `cands`;
    /// `cands` is in the preference list's order, local first). Deferred strategies and
    /// `local_first` keep it unchanged.
    pub fn order(&mut self, strategy: Strategy, cands: &[NodeId], now: Micros) -> Vec<NodeId> {
        self.snitch_maybe_reset(now);
        let mut v = cands.to_vec();
        if v.len() < 2 && strategy != Strategy::DynamicSnitch {
            return v;
        }
        match strategy {
            Strategy::LocalFirst | Strategy::Naive | Strategy::Avr => {}
            Strategy::Random => v.shuffle(&mut self.rng),
            Strategy::RoundRobin => self.round_robin(&mut v),
            Strategy::LeastOutstanding => {
                v.shuffle(&mut self.rng);
                v.sort_by_key(|n| self.outstanding(*n));
            }
            Strategy::LeastQueue => {
                v.shuffle(&mut self.rng);
                v.sort_by_key(|n| {
                    let queue = self.peers.get(n).map_or(0, |p| p.queue);
                    (queue, self.outstanding(*n))
                });
            }
            Strategy::PowerOfD => self.power_of_d(&mut v),
            Strategy::FirstTwo => {
                if self.outstanding(v[1]) < self.outstanding(v[0]) {
                    v.swap(0, 1);
                }
            }
            Strategy::DynamicSnitch => {
                self.snitch_maybe_update(now);
                self.snitch_order(&mut v);
            }
            Strategy::C3 => {
                let nc = self.cfg.coordinators;
                let score = |n: &NodeId| {
                    self.peers
                        .get(n)
                        .map_or(0.0, |p| p.c3.score(p.outstanding, nc))
                };
                v.sort_by(|a, b| score(a).total_cmp(&score(b)));
            }
        }
        v
    }

    /// C3's rate control: takes a token from the first node of `ordered` that has one and
    /// returns it; else the earliest time one of them will have a token.
    pub fn c3_admit(&mut self, ordered: &[NodeId], now: Micros) -> Result<NodeId, Micros> {
        let cfg = self.cfg.c3;
        let mut earliest = Micros::MAX;
        for &n in ordered {
            let peer = self.peers.entry(n).or_insert_with(|| Peer::new(now, &cfg));
            if peer.c3.try_take(now, &cfg) || !peer.c3.congested() {
                return Ok(n);
            }
            earliest = earliest.min(peer.c3.token_at(now, &cfg));
        }
        if ordered.is_empty() {
            earliest = now.saturating_add(cfg.delta_us.max(1));
        }
        Err(earliest.max(now.saturating_add(1)))
    }

    /// A read starts waiting for a C3 token: false when `backlog_max` reads already wait
    /// (the read must then fail with `overload`).
    pub fn c3_wait_begin(&mut self) -> bool {
        if self.c3_waiting >= self.cfg.c3.backlog_max {
            return false;
        }
        self.c3_waiting += 1;
        true
    }

    /// A read stopped waiting for a C3 token (admitted or abandoned).
    pub fn c3_wait_end(&mut self) {
        self.c3_waiting = self.c3_waiting.saturating_sub(1);
    }

    /// A read was sent to `n`.
    pub fn on_send(&mut self, n: NodeId, now: Micros) {
        let peer = self.peer(n, now);
        peer.outstanding = peer.outstanding.saturating_add(1);
        peer.chosen += 1;
    }

    /// `n` answered a read after `rtt_us`, reporting `fb`.
    pub fn on_reply(&mut self, n: NodeId, rtt_us: Micros, fb: Option<LoadFeedback>, now: Micros) {
        self.snitch_maybe_reset(now);
        let Balancer {
            cfg,
            peers,
            sample_rng,
            ..
        } = self;
        let peer = peers.entry(n).or_insert_with(|| Peer::new(now, &cfg.c3));
        peer.outstanding = peer.outstanding.saturating_sub(1);
        if let Some(fb) = fb {
            peer.queue = fb.queue;
            peer.c3.feedback(rtt_us, fb, cfg.c3.alpha);
        }
        let ms = rtt_us as f64 / 1_000.0;
        peer.snitch.add(ms, now, &cfg.snitch, sample_rng);
        peer.c3.on_reply(now, &cfg.c3);
    }

    /// A read sent to `n` failed or timed out.
    pub fn on_failure(&mut self, n: NodeId, now: Micros) {
        self.snitch_maybe_reset(now);
        let penalty = (2.0 * self.snitch_max_ms).max(FAILURE_PENALTY_MS);
        let Balancer {
            cfg,
            peers,
            sample_rng,
            ..
        } = self;
        let peer = peers.entry(n).or_insert_with(|| Peer::new(now, &cfg.c3));
        peer.outstanding = peer.outstanding.saturating_sub(1);
        peer.snitch.add(penalty, now, &cfg.snitch, sample_rng);
    }

    /// Every peer this balancer has heard of, by id.
    pub fn peers(&self) -> Vec<PeerView> {
        self.peers
            .iter()
            .map(|(&node, p)| PeerView {
                node,
                outstanding: p.outstanding,
                queue: p.queue,
                service_us: p.c3.service_us,
                snitch_score: p.snitch_score,
                c3_score: p.c3.score(p.outstanding, self.cfg.coordinators),
                c3_rate: p.c3.srate,
                chosen: p.chosen,
            })
            .collect()
    }

    fn peer(&mut self, n: NodeId, now: Micros) -> &mut Peer {
        let cfg = &self.cfg.c3;
        self.peers.entry(n).or_insert_with(|| Peer::new(now, cfg))
    }

    fn outstanding(&self, n: NodeId) -> u32 {
        self.peers.get(&n).map_or(0, |p| p.outstanding)
    }

    fn round_robin(&mut self, v: &mut [NodeId]) {
        let mut set = v.to_vec();
        set.sort();
        if self.rr.len() >= RR_SETS_MAX && !self.rr.contains_key(&set) {
            self.rr.clear();
        }
        let counter = self.rr.get(&set).copied().unwrap_or(0);
        let lead = set[(counter % set.len() as u64) as usize];
        self.rr.insert(set, counter.wrapping_add(1));
        if let Some(at) = v.iter().position(|&n| n == lead) {
            v.rotate_left(at);
        }
    }

    fn power_of_d(&mut self, v: &mut [NodeId]) {
        let d = self.cfg.power_d.clamp(1, v.len());
        let sampled = rand::seq::index::sample(&mut self.rng, v.len(), d).into_vec();
        let best = sampled
            .iter()
            .map(|&i| self.outstanding(v[i]))
            .min()
            .unwrap_or(0);
        let mut ties: Vec<usize> = sampled
            .into_iter()
            .filter(|&i| self.outstanding(v[i]) == best)
            .collect();
        ties.sort_unstable();
        let winner = match ties.len() {
            0 => 0,
            1 => ties[0],
            k => ties[self.rng.random_range(0..k)],
        };
        // The winner first, the others (sampled or not) in primary order.
        v[..=winner].rotate_right(1);
    }

    fn snitch_maybe_reset(&mut self, now: Micros) {
        let last = *self.snitch_reset.get_or_insert(now);
        if now.saturating_sub(last) >= self.cfg.snitch.reset_interval_us.max(1) {
            for p in self.peers.values_mut() {
                p.snitch.clear(now);
            }
            self.snitch_reset = Some(now);
        }
    }

    fn snitch_maybe_update(&mut self, now: Micros) {
        let due = self
            .snitch_updated
            .is_none_or(|t| now.saturating_sub(t) >= self.cfg.snitch.update_interval_us);
        if !due {
            return;
        }
        self.snitch_updated = Some(now);
        let medians: Vec<f64> = self.peers.values().map(|p| p.snitch.median()).collect();
        let max = medians.iter().copied().fold(1.0, f64::max);
        self.snitch_max_ms = max;
        for (p, m) in self.peers.values_mut().zip(medians) {
            p.snitch_score = m / max;
        }
    }

    /// The spec's `order(cands)`: the primary order unless one of its positions scores
    /// worse than the same position of the sorted order by more than the badness factor.
    fn snitch_order(&self, v: &mut Vec<NodeId>) {
        let score = |n: &NodeId| self.peers.get(n).map_or(0.0, |p| p.snitch_score);
        let mut sorted = v.clone();
        sorted.sort_by(|a, b| score(a).total_cmp(&score(b)));
        let bad = 1.0 + self.cfg.snitch.badness;
        if v.iter()
            .zip(&sorted)
            .any(|(b, s)| score(b) > score(s) * bad)
        {
            *v = sorted;
        }
    }
}

#[cfg(test)]
mod tests;
