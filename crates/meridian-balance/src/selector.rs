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
mod tests {
    use super::*;
    use proptest::prelude::{
        TestCaseError, any, prop_assert, prop_assert_eq, prop_oneof, proptest,
    };
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
                Op::Reply(n, rtt, q, s) => {
                    b.on_reply(NodeId(*n), Micros::from(*rtt), fb(*q, *s), now)
                }
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
}
