//! The emulator's pure model: given the current settings, when (if ever) does a message sent
//! now from `a` to `b` arrive? No I/O and no tasks, so it can be tested and replayed directly.
//!
//! Implements experiments.md §5 literally (`L` = `rtt`, `j` = `jitter`, `B` = bandwidth):
//!
//! ```text
//! sample_delay(): u ~ Normal(0.5, 1/6) resampled until 0 <= u <= 1; return L/2 · (1 + j·u)
//! if partitioned: drop
//! tx_end = max(now, link.free_at) + bytes/B; link.free_at = tx_end        # per-link FIFO
//! d = sample_delay()
//! stream:   if rng < p: d += max(200 ms, 2·L)          # retransmission, never a lost message
//!           if rng < q: link.free_at += bytes/B        # a duplicate costs bandwidth only
//!           deliver_at = max(tx_end + d, conn.last); conn.last = deliver_at
//! datagram: if rng < p: drop
//!           if rng < q: a second copy with its own delay
//!           if rng < o: d = 0 and the message skips the FIFO clamp (jumps the queue)
//!           otherwise deliver_at = max(tx_end + d, conn.last); conn.last = deliver_at
//! ```
//!
//! A *link* is a node-pair override if one exists, else the DC pair; a *connection* is the
//! ordered (sender, receiver) node pair. Each link draws from its own ChaCha8 RNG seeded from
//! `(seed, link id)`, so one link's traffic does not perturb another's randomness. Every message
//! consumes the same four draws (delay, loss, duplicate, reorder) whatever the probabilities.

use super::config::{Cut, DcLink, DeliveryMode, LinkConfig, NodeLink, Placement, WanConfig};
use meridian_core::splitmix64;
use meridian_core::{DcId, NodeId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

/// Minimum retransmission timeout charged for a loss in stream mode.
pub const MIN_RTO: Duration = Duration::from_millis(200);

/// Counters of what the emulator did, for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WanStats {
    /// Messages offered to the emulator.
    pub sent: u64,
    /// Dropped by a partition.
    pub cut: u64,
    /// Dropped as lost (datagram mode).
    pub lost: u64,
    /// Delayed by a retransmission timeout (stream-mode loss).
    pub retransmitted: u64,
    /// Duplicated (stream: extra bandwidth; datagram: a second copy).
    pub duplicated: u64,
    /// Reordered (datagram mode).
    pub reordered: u64,
    /// Refused because the connection had too many messages in flight.
    pub overloaded: u64,
}

/// What happens to one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Never delivered (partition, or datagram loss).
    Drop,
    /// Delivered at `at`, and a second copy at `copy` if duplicated (datagram mode).
    Deliver {
        /// When the message arrives.
        at: Instant,
        /// When its duplicate arrives, if any.
        copy: Option<Instant>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum LinkKey {
    Dc(DcId, DcId),
    Node(NodeId, NodeId),
}

struct LinkState {
    free_at: Option<Instant>,
    rng: ChaCha8Rng,
}

/// The emulator's state: settings, per-link queues and RNGs, per-connection FIFO clocks.
pub struct Model {
    seed: u64,
    mode: DeliveryMode,
    intra_dc: LinkConfig,
    inter_dc: LinkConfig,
    dc_links: BTreeMap<(DcId, DcId), LinkConfig>,
    node_links: BTreeMap<(NodeId, NodeId), LinkConfig>,
    placement: BTreeMap<NodeId, DcId>,
    cuts: BTreeSet<Cut>,
    max_in_flight: usize,
    real_time: bool,
    bulk_buffer: Option<usize>,
    links: BTreeMap<LinkKey, LinkState>,
    conns: BTreeMap<(NodeId, NodeId), Instant>,
    /// When each bulk stream (sender, receiver, stream) is free to send again.
    streams: BTreeMap<(NodeId, NodeId, u32), Instant>,
    stats: WanStats,
    ideal: LinkConfig,
}

fn link_seed(seed: u64, key: LinkKey) -> u64 {
    let (tag, a, b) = match key {
        LinkKey::Dc(a, b) => (1u64, a.0, b.0),
        LinkKey::Node(a, b) => (2u64, a.0, b.0),
    };
    splitmix64(splitmix64(seed ^ splitmix64(tag)) ^ ((u64::from(a) << 32) | u64::from(b)))
}

/// Draws `u` from Normal(0.5, 1/6) truncated to [0, 1] by resampling.
fn sample_u(rng: &mut ChaCha8Rng) -> f64 {
    let normal = Normal::new(0.5, 1.0 / 6.0).expect("valid normal");
    loop {
        let u: f64 = normal.sample(rng);
        if (0.0..=1.0).contains(&u) {
            return u;
        }
    }
}

impl Model {
    /// A model from a (validated) configuration.
    pub fn new(config: &WanConfig) -> Self {
        let mut m = Self {
            seed: config.seed,
            mode: config.mode,
            intra_dc: config.intra_dc.clone(),
            inter_dc: config.inter_dc.clone(),
            dc_links: BTreeMap::new(),
            node_links: BTreeMap::new(),
            placement: config.nodes.iter().map(|p| (p.node, p.dc)).collect(),
            cuts: config.cuts.iter().copied().collect(),
            max_in_flight: config.max_in_flight,
            real_time: config.real_time,
            bulk_buffer: config.bulk_buffer,
            links: BTreeMap::new(),
            conns: BTreeMap::new(),
            streams: BTreeMap::new(),
            stats: WanStats::default(),
            ideal: LinkConfig::ideal(),
        };
        for l in &config.dc_links {
            m.set_dc_link(l.from, l.to, l.link.clone());
            if l.both {
                m.set_dc_link(l.to, l.from, l.link.clone());
            }
        }
        for l in &config.node_links {
            m.set_node_link(l.from, l.to, Some(l.link.clone()));
            if l.both {
                m.set_node_link(l.to, l.from, Some(l.link.clone()));
            }
        }
        m
    }

    /// The current settings as a configuration (every link listed one-way).
    pub fn config(&self) -> WanConfig {
        WanConfig {
            seed: self.seed,
            mode: self.mode,
            intra_dc: self.intra_dc.clone(),
            inter_dc: self.inter_dc.clone(),
            dc_links: self
                .dc_links
                .iter()
                .map(|(&(from, to), link)| DcLink {
                    from,
                    to,
                    both: false,
                    link: link.clone(),
                })
                .collect(),
            node_links: self
                .node_links
                .iter()
                .map(|(&(from, to), link)| NodeLink {
                    from,
                    to,
                    both: false,
                    link: link.clone(),
                })
                .collect(),
            nodes: self
                .placement
                .iter()
                .map(|(&node, &dc)| Placement { node, dc })
                .collect(),
            cuts: self.cuts.iter().copied().collect(),
            max_in_flight: self.max_in_flight,
            real_time: self.real_time,
            bulk_buffer: self.bulk_buffer,
        }
    }

    /// Sets the socket buffer of bulk connections (see [`WanConfig::bulk_buffer`]).
    pub fn set_bulk_buffer(&mut self, buffer: Option<usize>) {
        self.bulk_buffer = buffer;
    }

    /// Whether deliveries are rounded to the nearest timer tick (see [`WanConfig::real_time`]).
    pub fn real_time(&self) -> bool {
        self.real_time
    }

    /// Messages allowed in flight per connection.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// Sets the delivery mode.
    pub fn set_mode(&mut self, mode: DeliveryMode) {
        self.mode = mode;
    }

    /// Sets the directed DC link `from → to`.
    pub fn set_dc_link(&mut self, from: DcId, to: DcId, link: LinkConfig) {
        self.dc_links.insert((from, to), link);
    }

    /// Sets (or with `None` removes) the override for `from → to`.
    pub fn set_node_link(&mut self, from: NodeId, to: NodeId, link: Option<LinkConfig>) {
        match link {
            Some(l) => self.node_links.insert((from, to), l),
            None => self.node_links.remove(&(from, to)),
        };
    }

    /// Sets the default intra-DC link.
    pub fn set_intra_dc(&mut self, link: LinkConfig) {
        self.intra_dc = link;
    }

    /// Sets the default inter-DC link.
    pub fn set_inter_dc(&mut self, link: LinkConfig) {
        self.inter_dc = link;
    }

    /// Places `node` in `dc`.
    pub fn place(&mut self, node: NodeId, dc: DcId) {
        self.placement.insert(node, dc);
    }

    /// Adds a partition rule; returns whether it was new.
    pub fn cut(&mut self, cut: Cut) -> bool {
        self.cuts.insert(cut)
    }

    /// Removes a partition rule; returns whether it existed.
    pub fn heal(&mut self, cut: Cut) -> bool {
        self.cuts.remove(&cut)
    }

    /// Removes every partition rule.
    pub fn heal_all(&mut self) {
        self.cuts.clear();
    }

    /// Whether messages from `from` to `to` are currently dropped by a partition.
    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        let (df, dt) = (
            self.placement.get(&from).copied(),
            self.placement.get(&to).copied(),
        );
        self.cuts
            .iter()
            .any(|c| c.from.covers(from, df) && c.to.covers(to, dt))
    }

    /// Counters so far.
    pub fn stats(&self) -> WanStats {
        self.stats.clone()
    }

    /// Counts a message refused for lack of in-flight room.
    pub fn count_overloaded(&mut self) {
        self.stats.overloaded += 1;
    }

    fn resolve(&self, from: NodeId, to: NodeId) -> (LinkKey, &LinkConfig) {
        if let Some(l) = self.node_links.get(&(from, to)) {
            return (LinkKey::Node(from, to), l);
        }
        match (self.placement.get(&from), self.placement.get(&to)) {
            (Some(&a), Some(&b)) => {
                let link = self.dc_links.get(&(a, b)).unwrap_or(if a == b {
                    &self.intra_dc
                } else {
                    &self.inter_dc
                });
                (LinkKey::Dc(a, b), link)
            }
            _ => (LinkKey::Node(from, to), &self.ideal),
        }
    }

    /// Decides the fate of a message of `bytes()` encoded bytes sent at `now` from `from` to
    /// `to`, updating link and connection state. `bytes` is only called under a bandwidth or
    /// window cap. `stream` names the bulk stream of a message carrying a payload: it then
    /// also waits for its stream's window (`bulk_buffer / RTT`), so one stream cannot fill a
    /// long fat link but several can.
    pub fn plan(
        &mut self,
        from: NodeId,
        to: NodeId,
        bytes: impl FnOnce() -> usize,
        stream: Option<u32>,
        now: Instant,
    ) -> Plan {
        self.stats.sent += 1;
        if self.is_cut(from, to) {
            self.stats.cut += 1;
            return Plan::Drop;
        }
        let (key, link) = self.resolve(from, to);
        let link = link.clone();
        let seed = self.seed;
        let state = self.links.entry(key).or_insert_with(|| LinkState {
            free_at: None,
            rng: ChaCha8Rng::seed_from_u64(link_seed(seed, key)),
        });
        let window = match (stream, self.bulk_buffer) {
            (Some(s), Some(buffer)) if buffer > 0 && !link.rtt.is_zero() => Some((s, buffer)),
            _ => None,
        };
        let size = if link.bandwidth_bytes_per_sec.is_some() || window.is_some() {
            bytes()
        } else {
            0
        };
        let ser = link.serialization(size);
        let mut tx_end = state.free_at.map_or(now, |f| f.max(now)) + ser;
        state.free_at = Some(tx_end);
        if let Some((s, buffer)) = window {
            // One window of `buffer` bytes per round trip: `size` bytes take size/buffer RTTs.
            let nanos = size as u128 * link.rtt.as_nanos() / buffer as u128;
            let paced = Duration::from_nanos(nanos.min(u64::MAX as u128) as u64);
            let free = self.streams.entry((from, to, s)).or_insert(now);
            let stream_end = (*free).max(now) + paced;
            *free = stream_end;
            tx_end = tx_end.max(stream_end);
        }
        let base = link.one_way_min();
        let mut d = base.mul_f64(1.0 + link.jitter * sample_u(&mut state.rng));
        let lost = state.rng.random::<f64>() < link.loss;
        let dup = state.rng.random::<f64>() < link.duplicate;
        let reorder = state.rng.random::<f64>() < link.reorder;
        let last = self.conns.entry((from, to)).or_insert(now);
        match self.mode {
            DeliveryMode::Stream => {
                if lost {
                    d += MIN_RTO.max(link.rtt * 2);
                    self.stats.retransmitted += 1;
                }
                if dup {
                    state.free_at = Some(tx_end + ser);
                    self.stats.duplicated += 1;
                }
                let at = (tx_end + d).max(*last);
                *last = at;
                Plan::Deliver { at, copy: None }
            }
            DeliveryMode::Datagram => {
                if lost {
                    self.stats.lost += 1;
                    return Plan::Drop;
                }
                let at = if reorder {
                    self.stats.reordered += 1;
                    tx_end
                } else {
                    let at = (tx_end + d).max(*last);
                    *last = at;
                    at
                };
                let copy = dup.then(|| {
                    self.stats.duplicated += 1;
                    let d2 = base.mul_f64(1.0 + link.jitter * sample_u(&mut state.rng));
                    let at2 = (tx_end + d2).max(*last);
                    *last = at2;
                    at2
                });
                Plan::Deliver { at, copy }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wan::config::Scope;

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    fn two_dcs(link: LinkConfig, mode: DeliveryMode) -> Model {
        Model::new(&WanConfig {
            seed: 7,
            mode,
            inter_dc: link,
            nodes: vec![
                Placement {
                    node: n(1),
                    dc: DcId(0),
                },
                Placement {
                    node: n(2),
                    dc: DcId(1),
                },
            ],
            ..WanConfig::default()
        })
    }

    fn at(plan: Plan) -> Instant {
        match plan {
            Plan::Deliver { at, .. } => at,
            Plan::Drop => panic!("dropped"),
        }
    }

    /// Kolmogorov–Smirnov: sampled one-way delays fit the truncated normal on
    /// [L/2, L/2·(1+j)] (spec self-test: p > 0.01).
    #[test]
    fn delays_fit_the_truncated_normal() {
        let link = LinkConfig::wan(Duration::from_millis(100), 0.6);
        let mut m = two_dcs(link.clone(), DeliveryMode::Datagram);
        let t0 = Instant::now();
        // Sent far apart so the FIFO clamp never applies.
        let mut us: Vec<f64> = (0..4000u64)
            .map(|i| {
                let now = t0 + Duration::from_secs(i);
                let d = at(m.plan(n(1), n(2), || 0, None, now)) - now;
                (d.as_secs_f64() / link.one_way_min().as_secs_f64() - 1.0) / link.jitter
            })
            .collect();
        us.sort_by(f64::total_cmp);
        // CDF of N(0.5, 1/6) truncated to [0, 1].
        let phi = |x: f64| 0.5 * (1.0 + erf((x - 0.5) * 6.0 / std::f64::consts::SQRT_2));
        let (lo, hi) = (phi(0.0), phi(1.0));
        let cdf = |x: f64| (phi(x) - lo) / (hi - lo);
        let n = us.len() as f64;
        let d = us
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let c = cdf(x);
                (c - i as f64 / n).abs().max(((i + 1) as f64 / n - c).abs())
            })
            .fold(0.0, f64::max);
        let critical = 1.628 / n.sqrt(); // alpha = 0.01
        assert!(d < critical, "KS statistic {d} >= {critical}");
        assert!(us[0] >= 0.0 && *us.last().unwrap() <= 1.0);
    }

    /// Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
    fn erf(x: f64) -> f64 {
        let s = x.signum();
        let x = x.abs();
        let t = 1.0 / (1.0 + 0.327_591_1 * x);
        let y = 1.0
            - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736)
                * t
                + 0.254_829_592)
                * t
                * (-x * x).exp();
        s * y
    }

    #[test]
    fn stream_loss_is_a_retransmission_delay_not_a_drop() {
        let link = LinkConfig::wan(Duration::from_millis(300), 0.0).with_loss(1.0);
        let mut m = two_dcs(link, DeliveryMode::Stream);
        let now = Instant::now();
        // 150 ms one way + max(200 ms, 600 ms).
        assert_eq!(
            at(m.plan(n(1), n(2), || 0, None, now)) - now,
            Duration::from_millis(750)
        );
        assert_eq!(m.stats().retransmitted, 1);
    }

    #[test]
    fn a_bulk_stream_is_window_limited_and_streams_add_up() {
        // 100 ms RTT, 100 MB/s link, 1 MB buffer: one stream moves 10 MB/s (a window per
        // round trip); the link would allow ten times that.
        let link = LinkConfig::wan(Duration::from_millis(100), 0.0).with_bandwidth(100_000_000);
        let mut m = two_dcs(link, DeliveryMode::Stream);
        m.set_bulk_buffer(Some(1_000_000));
        let now = Instant::now();
        let one_way = Duration::from_millis(50);
        // 1 MB on stream 0: 10 ms on the link, but 100 ms of window.
        assert_eq!(
            at(m.plan(n(1), n(2), || 1_000_000, Some(0), now)) - now,
            Duration::from_millis(100) + one_way
        );
        // The next MB on the same stream waits for its window: another 100 ms.
        assert_eq!(
            at(m.plan(n(1), n(2), || 1_000_000, Some(0), now)) - now,
            Duration::from_millis(200) + one_way
        );
        // Another stream has its own window; it only shares the link (free after 20 ms).
        assert_eq!(
            at(m.plan(n(1), n(2), || 1_000_000, Some(1), now)) - now,
            Duration::from_millis(200) + one_way,
            "FIFO per connection keeps order"
        );
        let later = now + Duration::from_secs(10);
        assert_eq!(
            at(m.plan(n(1), n(2), || 1_000_000, Some(7), later)) - later,
            Duration::from_millis(100) + one_way
        );
        // A control message (no stream) pays only the link.
        let later = later + Duration::from_secs(10);
        assert_eq!(
            at(m.plan(n(1), n(2), || 1_000_000, None, later)) - later,
            Duration::from_millis(10) + one_way
        );
        // Without a buffer setting there is no window.
        m.set_bulk_buffer(None);
        let later = later + Duration::from_secs(10);
        assert_eq!(
            at(m.plan(n(1), n(2), || 1_000_000, Some(0), later)) - later,
            Duration::from_millis(10) + one_way
        );
    }

    #[test]
    fn stream_duplicate_costs_bandwidth_only() {
        let link = LinkConfig::ideal().with_bandwidth(1000).with_duplicate(1.0);
        let mut m = two_dcs(link, DeliveryMode::Stream);
        let now = Instant::now();
        assert_eq!(
            at(m.plan(n(1), n(2), || 100, None, now)) - now,
            Duration::from_millis(100)
        );
        // The duplicate occupied the link for another 100 ms.
        assert_eq!(
            at(m.plan(n(1), n(2), || 100, None, now)) - now,
            Duration::from_millis(300)
        );
    }

    #[test]
    fn datagram_duplicate_has_its_own_delay_and_reorder_jumps_the_queue() {
        let link = LinkConfig::wan(Duration::from_millis(100), 1.0).with_duplicate(1.0);
        let mut m = two_dcs(link, DeliveryMode::Datagram);
        let now = Instant::now();
        let Plan::Deliver {
            at,
            copy: Some(copy),
        } = m.plan(n(1), n(2), || 0, None, now)
        else {
            panic!("expected a copy")
        };
        assert!(copy >= at);
        let mut m = two_dcs(
            LinkConfig::wan(Duration::from_millis(100), 0.0).with_reorder(1.0),
            DeliveryMode::Datagram,
        );
        assert_eq!(
            m.plan(n(1), n(2), || 0, None, now),
            Plan::Deliver {
                at: now,
                copy: None
            }
        );
    }

    #[test]
    fn partitions_match_by_scope_and_direction() {
        let mut m = two_dcs(LinkConfig::ideal(), DeliveryMode::Stream);
        m.cut(Cut {
            from: Scope::Dc(DcId(0)),
            to: Scope::Any,
        });
        assert!(m.is_cut(n(1), n(2)));
        assert!(!m.is_cut(n(2), n(1)), "one-way");
        assert!(m.is_cut(n(1), n(9)), "any covers unplaced nodes");
        m.heal_all();
        m.cut(Cut {
            from: Scope::Node(n(2)),
            to: Scope::Node(n(1)),
        });
        assert!(m.is_cut(n(2), n(1)) && !m.is_cut(n(1), n(2)));
        assert_eq!(m.plan(n(2), n(1), || 0, None, Instant::now()), Plan::Drop);
        assert_eq!(m.stats().cut, 1);
    }

    #[test]
    fn node_override_beats_dc_link_and_unplaced_nodes_get_an_ideal_link() {
        let mut m = two_dcs(
            LinkConfig::wan(Duration::from_millis(100), 0.0),
            DeliveryMode::Stream,
        );
        let now = Instant::now();
        m.set_node_link(
            n(1),
            n(2),
            Some(LinkConfig::wan(Duration::from_millis(10), 0.0)),
        );
        assert_eq!(
            at(m.plan(n(1), n(2), || 0, None, now)) - now,
            Duration::from_millis(5)
        );
        assert_eq!(
            at(m.plan(n(2), n(1), || 0, None, now)) - now,
            Duration::from_millis(50)
        );
        assert_eq!(
            at(m.plan(n(1), n(3), || 0, None, now)) - now,
            Duration::ZERO
        );
        m.set_node_link(n(1), n(2), None);
        let later = now + Duration::from_secs(1);
        assert_eq!(
            at(m.plan(n(1), n(2), || 0, None, later)) - later,
            Duration::from_millis(50)
        );
    }
}
