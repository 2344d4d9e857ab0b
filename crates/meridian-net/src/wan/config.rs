//! The WAN emulator's settings: per-link parameters ([`LinkConfig`]), the whole emulator
//! ([`WanConfig`]), partitions ([`Cut`], [`Scope`]), and how durations are written.
//!
//! All types deserialize from TOML/JSON with every field optional (defaults below) and unknown
//! fields rejected. **Durations** are either a string with a unit — `"100ms"`, `"167us"`
//! (or `"167µs"`), `"1.5s"`, `"250ns"`, `"2m"` — or a bare integer, meaning **milliseconds**.
//! They serialize as a string with a unit, so a resolved config can be written into a run's
//! report and read back.

use crate::NetError;
use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How a link treats loss, duplication and reordering (spec: experiments.md §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// TCP-like (the default): reliable and in order per connection. A "lost" message is
    /// delivered late, after a retransmission timeout of `max(200 ms, 2·rtt)`; a duplicate costs
    /// bandwidth only; `reorder` is ignored; a message never overtakes an earlier one on the same
    /// connection (head-of-line blocking).
    #[default]
    Stream,
    /// UDP-like: a lost message is dropped; a duplicate is delivered twice, each copy with its
    /// own delay; a reordered message gets zero propagation delay and jumps the queue. Messages
    /// not reordered keep FIFO order.
    Datagram,
}

/// Parameters of one directed link (spec: experiments.md §5).
///
/// One-way delay of a message = `rtt/2 · (1 + jitter·u)` with `u` drawn from a normal
/// distribution of mean 0.5 and standard deviation 1/6, truncated to [0, 1] (by resampling).
/// So one-way delays lie in `[rtt/2, rtt/2·(1+jitter)]` with mean `rtt/2·(1 + jitter/2)`, and a
/// round trip over two such links lies in `[rtt, rtt·(1+jitter)]` with mean
/// `rtt·(1 + jitter/2)` — "latency is the minimum, jitter the maximum extra".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// `L`: the round-trip time this link contributes half of (its one-way minimum is `L/2`).
    #[serde(with = "duration_serde")]
    pub rtt: Duration,
    /// `j`: the maximum extra delay as a fraction of the minimum (0.6 = 60 %).
    pub jitter: f64,
    /// `p`: probability a message is lost (stream mode: retransmitted late; datagram: dropped).
    pub loss: f64,
    /// `q`: probability a message is duplicated.
    #[serde(alias = "dup")]
    pub duplicate: f64,
    /// `o`: probability a message is reordered (datagram mode only).
    pub reorder: f64,
    /// `B`: the link's capacity in bytes per second; `None` means unlimited. Each message
    /// occupies the link for `encoded bytes / B` (a per-link FIFO serialization queue).
    pub bandwidth_bytes_per_sec: Option<u64>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self::ideal()
    }
}

impl LinkConfig {
    /// A perfect link: no delay, no loss, unlimited bandwidth.
    pub fn ideal() -> Self {
        Self {
            rtt: Duration::ZERO,
            jitter: 0.0,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            bandwidth_bytes_per_sec: None,
        }
    }

    /// The spec's intra-DC default: RTT 167 µs, jitter 90 µs absolute (RTT in [167, 257] µs),
    /// 1 Gb/s.
    pub fn lan() -> Self {
        Self::ideal()
            .with_rtt(Duration::from_micros(167))
            .with_jitter_abs(Duration::from_micros(90))
            .with_bandwidth(125_000_000)
    }

    /// A link with round trip `rtt` and relative `jitter`, otherwise perfect.
    pub fn wan(rtt: Duration, jitter: f64) -> Self {
        Self {
            rtt,
            jitter,
            ..Self::ideal()
        }
    }

    /// Sets the round-trip time.
    pub fn with_rtt(mut self, rtt: Duration) -> Self {
        self.rtt = rtt;
        self
    }

    /// Sets the jitter as a fraction of the RTT.
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets the jitter as an absolute maximum extra round-trip time (converted to a fraction
    /// of the current RTT; zero when the RTT is zero).
    pub fn with_jitter_abs(mut self, extra: Duration) -> Self {
        self.jitter = if self.rtt.is_zero() {
            0.0
        } else {
            extra.as_secs_f64() / self.rtt.as_secs_f64()
        };
        self
    }

    /// Sets the loss probability.
    pub fn with_loss(mut self, p: f64) -> Self {
        self.loss = p;
        self
    }

    /// Sets the duplication probability.
    pub fn with_duplicate(mut self, q: f64) -> Self {
        self.duplicate = q;
        self
    }

    /// Sets the reordering probability.
    pub fn with_reorder(mut self, o: f64) -> Self {
        self.reorder = o;
        self
    }

    /// Caps the bandwidth, in bytes per second.
    pub fn with_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.bandwidth_bytes_per_sec = Some(bytes_per_sec);
        self
    }

    /// The smallest one-way propagation delay: `rtt/2`.
    pub fn one_way_min(&self) -> Duration {
        self.rtt / 2
    }

    /// The largest one-way propagation delay: `rtt/2 · (1 + jitter)`.
    pub fn one_way_max(&self) -> Duration {
        self.one_way_min().mul_f64(1.0 + self.jitter)
    }

    /// The mean one-way propagation delay: `rtt/2 · (1 + jitter/2)`.
    pub fn one_way_mean(&self) -> Duration {
        self.one_way_min().mul_f64(1.0 + self.jitter / 2.0)
    }

    /// How long `bytes` occupy this link (zero without a bandwidth cap).
    pub fn serialization(&self, bytes: usize) -> Duration {
        match self.bandwidth_bytes_per_sec {
            Some(b) if b > 0 => {
                let nanos = bytes as u128 * 1_000_000_000 / b as u128;
                Duration::from_nanos(nanos.min(u64::MAX as u128) as u64)
            }
            _ => Duration::ZERO,
        }
    }

    /// Checks every field against its accepted range (see [`LinkConfig::check`]); errors
    /// name the field as `link.<field>`.
    pub fn validate(&self) -> Result<(), NetError> {
        self.check("link")
    }

    /// Checks every field against its accepted range, naming a refused one `{path}.{field}`
    /// with its value and the range, e.g. `inter_dc.jitter = 1e308: must be a finite number
    /// between 0 and 10`:
    ///
    /// - `rtt` at most [`MAX_RTT`] (60 s);
    /// - `jitter` a finite number in `[0, MAX_JITTER]` (10: a one-way delay of at most 11 × the
    ///   minimum; larger values overflow delay arithmetic or silently stall every message);
    /// - `loss`, `duplicate`, `reorder` finite probabilities in `[0, 1]`;
    /// - `bandwidth_bytes_per_sec`, when set, at least [`MIN_BANDWIDTH`] (1000 B/s).
    ///
    /// A config that passes never makes the emulator's delay arithmetic overflow (the
    /// largest one-way delay plus a retransmission is below 20 minutes).
    pub fn check(&self, path: &str) -> Result<(), NetError> {
        let bad = |field: &str, value: &dyn std::fmt::Display, range: &str| {
            NetError::Config(format!("{path}.{field} = {value}: must be {range}"))
        };
        if self.rtt > MAX_RTT {
            return Err(bad(
                "rtt",
                &format_duration(self.rtt),
                "a duration between 0 and 60s",
            ));
        }
        if !(self.jitter.is_finite() && (0.0..=MAX_JITTER).contains(&self.jitter)) {
            return Err(bad(
                "jitter",
                &number(self.jitter),
                "a finite number between 0 and 10 (a fraction of the minimum delay: 0.6 = 60 %)",
            ));
        }
        for (name, p) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ] {
            if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                return Err(bad(name, &number(p), "a probability between 0 and 1"));
            }
        }
        if let Some(b) = self.bandwidth_bytes_per_sec
            && b < MIN_BANDWIDTH
        {
            return Err(bad(
                "bandwidth_bytes_per_sec",
                &b,
                "at least 1000 bytes/s (leave it unset for an unlimited link)",
            ));
        }
        Ok(())
    }
}

/// A number as a person writes it: `0.6`, `3`, `1e308`, `1e6`, `NaN`, `inf`.
fn number(x: f64) -> String {
    if x.is_finite() && x != 0.0 && !(1e-4..1e6).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// The largest round-trip time a link accepts.
pub const MAX_RTT: Duration = Duration::from_secs(60);

/// The largest relative jitter a link accepts (one-way delays up to 11 × the minimum).
pub const MAX_JITTER: f64 = 10.0;

/// The smallest bandwidth cap a link accepts, in bytes per second.
pub const MIN_BANDWIDTH: u64 = 1000;

/// A DC-to-DC link's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DcLink {
    /// Sending DC.
    pub from: DcId,
    /// Receiving DC.
    pub to: DcId,
    /// Also apply to the reverse direction.
    #[serde(default)]
    pub both: bool,
    /// The parameters.
    pub link: LinkConfig,
}

/// A node-to-node override of the DC link between their DCs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLink {
    /// Sending node.
    pub from: NodeId,
    /// Receiving node.
    pub to: NodeId,
    /// Also apply to the reverse direction.
    #[serde(default)]
    pub both: bool,
    /// The parameters.
    pub link: LinkConfig,
}

/// Which DC a node is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The node.
    pub node: NodeId,
    /// Its DC.
    pub dc: DcId,
}

/// One side of a partition rule. In TOML: `"any"`, `{ dc = 1 }` or `{ node = 7 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Every node.
    Any,
    /// Every node of a DC.
    Dc(DcId),
    /// One node.
    Node(NodeId),
}

impl Scope {
    /// Whether a node (in DC `dc`, if placed) is covered by this scope.
    pub fn covers(&self, node: NodeId, dc: Option<DcId>) -> bool {
        match *self {
            Scope::Any => true,
            Scope::Dc(d) => dc == Some(d),
            Scope::Node(n) => n == node,
        }
    }
}

/// A one-way partition: messages from `from` to `to` are dropped. Cut both directions for a
/// symmetric partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    /// Senders affected.
    pub from: Scope,
    /// Receivers affected.
    pub to: Scope,
}

/// The WAN emulator's whole configuration.
///
/// The link for a message from `a` to `b` is, first match wins: a node-pair override
/// (`node_links`), the DC pair's link (`dc_links`), `intra_dc` if both are in the same DC,
/// `inter_dc` if they are in different DCs; a node with no placement talks over an ideal link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WanConfig {
    /// Seed of the emulator's randomness (each link's ChaCha8 RNG is derived from it and the
    /// link's id).
    pub seed: u64,
    /// Stream (TCP-like, default) or datagram semantics.
    pub mode: DeliveryMode,
    /// Link between two nodes of the same DC (default: [`LinkConfig::lan`]).
    pub intra_dc: LinkConfig,
    /// Link between DCs not listed in `dc_links` (default: ideal).
    pub inter_dc: LinkConfig,
    /// DC-pair links.
    pub dc_links: Vec<DcLink>,
    /// Node-pair overrides.
    pub node_links: Vec<NodeLink>,
    /// Which DC each node is in.
    pub nodes: Vec<Placement>,
    /// Partitions in force at start.
    pub cuts: Vec<Cut>,
    /// Messages in flight per (sender, receiver) connection before `send` fails with
    /// `Overloaded` (default 65 536).
    pub max_in_flight: usize,
    /// The emulator runs on the real clock (not tokio's paused time). Tokio's timers fire at
    /// the first 1 ms tick at or after their deadline, which would add up to 1 ms to every
    /// emulated hop; with this set, each message is handed over at the tick *nearest* its due
    /// time instead (error within ±½ ms, zero on average), and a message due within half a
    /// tick goes at once. Leave it off under paused time, where timers are exact (default).
    pub real_time: bool,
    /// The socket buffer of a bulk connection, in bytes: a message carrying a payload (a
    /// large-object chunk) travels at most at `buffer / RTT` on its stream, as TCP's window
    /// allows, besides the link's bandwidth (spec large-objects.md §6). `None` (default):
    /// no window cap.
    pub bulk_buffer: Option<usize>,
}

impl Default for WanConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            mode: DeliveryMode::Stream,
            intra_dc: LinkConfig::lan(),
            inter_dc: LinkConfig::ideal(),
            dc_links: Vec::new(),
            node_links: Vec::new(),
            nodes: Vec::new(),
            cuts: Vec::new(),
            max_in_flight: 65_536,
            real_time: false,
            bulk_buffer: None,
        }
    }
}

impl WanConfig {
    /// Checks every link (errors name the field: `inter_dc.jitter`, `dc_links[2].link.loss`)
    /// and the in-flight bound.
    pub fn validate(&self) -> Result<(), NetError> {
        self.intra_dc.check("intra_dc")?;
        self.inter_dc.check("inter_dc")?;
        for (i, l) in self.dc_links.iter().enumerate() {
            l.link.check(&format!("dc_links[{i}].link"))?;
        }
        for (i, l) in self.node_links.iter().enumerate() {
            l.link.check(&format!("node_links[{i}].link"))?;
        }
        if self.max_in_flight == 0 {
            return Err(NetError::Config("max_in_flight must be at least 1".into()));
        }
        Ok(())
    }
}

/// Parses a duration: a number with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`), e.g. `"100ms"`,
/// `"1.5s"`, `"167us"`; a bare number means milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (write e.g. \"100ms\", \"1.5s\")"))?;
    let scale = match unit.trim() {
        "" | "ms" => 1e-3,
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "s" => 1.0,
        "m" | "min" => 60.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in duration `{text}` (use ns, us, ms, s or m)"
            ));
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 1e12 {
        return Err(format!("duration `{text}` is out of range"));
    }
    // Round to whole nanoseconds so "0.3ms" is exactly 300 µs.
    Ok(Duration::from_nanos((secs * 1e9).round() as u64))
}

/// Formats a duration the way [`parse_duration`] reads it, in the largest exact unit.
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        "0ms".into()
    } else if nanos.is_multiple_of(1_000_000_000) {
        format!("{}s", nanos / 1_000_000_000)
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!("{}us", nanos / 1_000)
    } else {
        format!("{nanos}ns")
    }
}

mod duration_serde {
    use super::{format_duration, parse_duration};
    use serde::{Deserializer, Serializer, de};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration: a string like \"100ms\" or an integer of milliseconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse_duration(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Ok(Duration::from_millis(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                u64::try_from(v)
                    .map(Duration::from_millis)
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_format() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("100ms"), Ok(ms(100)));
        assert_eq!(parse_duration("100"), Ok(ms(100)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("167us"), Ok(Duration::from_micros(167)));
        assert_eq!(parse_duration("167µs"), Ok(Duration::from_micros(167)));
        assert_eq!(parse_duration("0.3ms"), Ok(Duration::from_micros(300)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        for d in [
            ms(0),
            ms(100),
            Duration::from_micros(167),
            Duration::from_nanos(5),
            ms(3000),
        ] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }

    #[test]
    fn config_loads_from_toml_and_round_trips() {
        let text = r#"
            seed = 42
            mode = "datagram"
            intra_dc = { rtt = "167us", jitter = 0.54, bandwidth_bytes_per_sec = 125000000 }
            dc_links = [
              { from = 0, to = 1, both = true, link = { rtt = 200, jitter = 0.6, dup = 0.01 } },
            ]
            node_links = [ { from = 1, to = 2, link = { rtt = "1s" } } ]
            nodes = [ { node = 1, dc = 0 }, { node = 2, dc = 1 } ]
            cuts = [ { from = { dc = 0 }, to = "any" }, { from = { node = 2 }, to = { node = 1 } } ]
        "#;
        let c: WanConfig = toml::from_str(text).unwrap();
        assert_eq!(c.seed, 42);
        assert_eq!(c.mode, DeliveryMode::Datagram);
        assert_eq!(c.dc_links[0].link.rtt, Duration::from_millis(200));
        assert_eq!(c.dc_links[0].link.duplicate, 0.01);
        assert!(c.dc_links[0].both);
        assert_eq!(c.node_links[0].link.rtt, Duration::from_secs(1));
        assert_eq!(
            c.nodes[1],
            Placement {
                node: NodeId(2),
                dc: DcId(1)
            }
        );
        assert_eq!(
            c.cuts[0],
            Cut {
                from: Scope::Dc(DcId(0)),
                to: Scope::Any
            }
        );
        assert_eq!(c.max_in_flight, 65_536, "defaults fill the rest");
        c.validate().unwrap();
        let back: WanConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(
            toml::from_str::<WanConfig>("sede = 1").is_err(),
            "typos are rejected"
        );
    }

    #[test]
    fn invalid_links_are_explained() {
        let err = LinkConfig::ideal().with_loss(1.5).validate().unwrap_err();
        assert!(
            err.to_string()
                .contains("link.loss = 1.5: must be a probability between 0 and 1"),
            "{err}"
        );
        assert!(LinkConfig::ideal().with_jitter(-0.1).validate().is_err());
        assert!(LinkConfig::ideal().with_bandwidth(0).validate().is_err());
    }

    /// Every field's range, at its edges and beyond, including values that used to panic in
    /// `Duration::mul_f64` (1e308) or silently stall every message (1e6).
    #[test]
    fn every_link_field_is_bounded() {
        let ok = |l: LinkConfig| l.check("inter_dc").map_err(|e| e.to_string());
        let refused = |l: LinkConfig, needle: &str| {
            let e = ok(l).expect_err(needle);
            assert!(e.contains(needle), "{e} lacks {needle}");
        };
        let wan = || LinkConfig::wan(Duration::from_millis(100), 0.0);
        ok(wan().with_jitter(MAX_JITTER)).unwrap();
        ok(wan().with_rtt(MAX_RTT)).unwrap();
        ok(wan().with_loss(1.0).with_duplicate(0.0).with_reorder(1.0)).unwrap();
        ok(wan().with_bandwidth(MIN_BANDWIDTH)).unwrap();
        ok(LinkConfig::lan()).unwrap();
        refused(
            wan().with_jitter(1e308),
            "inter_dc.jitter = 1e308: must be a finite number between 0 and 10",
        );
        refused(wan().with_jitter(1e6), "inter_dc.jitter = 1e6:");
        refused(wan().with_jitter(10.000001), "inter_dc.jitter");
        refused(wan().with_jitter(f64::NAN), "inter_dc.jitter = NaN");
        refused(wan().with_jitter(f64::INFINITY), "inter_dc.jitter = inf");
        refused(wan().with_jitter(-0.1), "inter_dc.jitter = -0.1");
        refused(
            wan().with_rtt(MAX_RTT + Duration::from_nanos(1)),
            "inter_dc.rtt = 60000000001ns: must be a duration between 0 and 60s",
        );
        refused(wan().with_loss(f64::NAN), "inter_dc.loss = NaN");
        refused(wan().with_loss(-0.0001), "inter_dc.loss");
        refused(wan().with_duplicate(2.0), "inter_dc.duplicate = 2");
        refused(wan().with_reorder(f64::INFINITY), "inter_dc.reorder = inf");
        refused(
            wan().with_bandwidth(999),
            "inter_dc.bandwidth_bytes_per_sec = 999: must be at least 1000",
        );
        // The worst accepted link keeps its delay arithmetic finite.
        let worst = wan().with_rtt(MAX_RTT).with_jitter(MAX_JITTER);
        assert_eq!(worst.one_way_max(), Duration::from_secs(330));
    }

    #[test]
    fn whole_configs_name_the_link() {
        let mut c = WanConfig::default();
        c.dc_links.push(DcLink {
            from: DcId(0),
            to: DcId(1),
            both: true,
            link: LinkConfig::ideal().with_jitter(1e6),
        });
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("dc_links[0].link.jitter = 1e6"), "{e}");
        let c = WanConfig {
            intra_dc: LinkConfig::ideal().with_loss(3.0),
            ..WanConfig::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("intra_dc.loss = 3"), "{e}");
    }

    #[test]
    fn delay_bounds_follow_the_spec() {
        let l = LinkConfig::wan(Duration::from_millis(100), 0.6);
        assert_eq!(l.one_way_min(), Duration::from_millis(50));
        assert_eq!(l.one_way_max(), Duration::from_millis(80));
        assert_eq!(l.one_way_mean(), Duration::from_millis(65));
        let lan = LinkConfig::lan();
        assert_eq!(lan.one_way_max().as_micros(), 128); // (167 + 90) / 2 µs, rounded down
        let capped = LinkConfig::ideal().with_bandwidth(1000);
        assert_eq!(capped.serialization(500), Duration::from_millis(500));
    }
}
