//! Key popularity generators (spec `experiments.md` §4 "Key popularity"): each draws a key
//! number in `0..n`, where `n` is the current item count, passed at every draw so that
//! workloads that insert (YCSB D and E) see the key space grow.
//!
//! Guarantees:
//! - every draw lies in `0..n` (`n ≥ 1`; `n == 0` panics, there is no key to draw);
//! - no global randomness and no clock: the caller passes the RNG (normally a seeded
//!   `rand_chacha::ChaCha8Rng`), so the same seed and the same sequence of `n` give the same keys;
//! - the algorithms are YCSB's where YCSB has one (`ZipfianGenerator` after Gray et al.,
//!   `ScrambledZipfianGenerator`, `SkewedLatestGenerator`, `HotspotIntegerGenerator`), so a
//!   workload file means the same popularity here as in YCSB.
//!
//! [`Distribution`] is the serde-facing configuration; [`KeyChooser`] is its runtime state.

use meridian_core::splitmix64;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::BenchError;

/// YCSB's default zipfian constant θ.
pub const DEFAULT_ZIPFIAN_CONSTANT: f64 = 0.99;
/// The Pareto shape that gives the 80/20 rule (`α = log₄ 5 ≈ 1.161`).
pub const DEFAULT_PARETO_ALPHA: f64 = 1.16;
/// YCSB's `ScrambledZipfianGenerator.ITEM_COUNT`: the zipfian is drawn over this many ranks and
/// then hashed into the key space, so popularity does not depend on the item count.
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB's precomputed `zeta(ITEM_COUNT, 0.99)` (`ScrambledZipfianGenerator.ZETAN`): computing
/// it would take 10¹⁰ `powf`s.
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

fn default_theta() -> f64 {
    DEFAULT_ZIPFIAN_CONSTANT
}
fn default_true() -> bool {
    true
}
fn default_hot_data() -> f64 {
    0.2
}
fn default_hot_ops() -> f64 {
    0.8
}
fn default_alpha() -> f64 {
    DEFAULT_PARETO_ALPHA
}

/// A key popularity distribution, as configured (JSON/TOML: `{"kind": "zipfian", "theta": 0.99}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Distribution {
    /// Every key equally likely (the default, as YCSB's `requestdistribution`).
    #[default]
    Uniform,
    /// Zipfian over ranks with constant `theta` (0 < θ < 1); `scrambled` (the default, as in
    /// YCSB's `requestdistribution=zipfian`) spreads the popular ranks over the key space with
    /// FNV-64, otherwise key 0 is the most popular.
    Zipfian {
        /// The zipfian constant θ.
        #[serde(default = "default_theta")]
        theta: f64,
        /// Hash ranks to keys (YCSB's `ScrambledZipfianGenerator`).
        #[serde(default = "default_true")]
        scrambled: bool,
    },
    /// YCSB's `SkewedLatestGenerator`: zipfian over recency, the newest key (`n - 1`) most popular.
    Latest {
        /// The zipfian constant θ.
        #[serde(default = "default_theta")]
        theta: f64,
    },
    /// YCSB's hotspot: a fraction `hot_op_fraction` of draws go to the first
    /// `hot_data_fraction` of the keys, the rest to the others, uniformly within each set.
    Hotspot {
        /// Fraction of the keys that are hot (YCSB `hotspotdatafraction`).
        #[serde(default = "default_hot_data")]
        hot_data_fraction: f64,
        /// Fraction of the draws that go to the hot keys (YCSB `hotspotopnfraction`).
        #[serde(default = "default_hot_ops")]
        hot_op_fraction: f64,
    },
    /// Pareto popularity over ranks (α > 1; α ≈ 1.16 gives 80 % of draws to 20 % of the keys),
    /// ranks mapped to keys by a permutation seeded with `permutation_seed`.
    Pareto {
        /// The shape α.
        #[serde(default = "default_alpha")]
        alpha: f64,
        /// Seed of the rank→key permutation.
        #[serde(default)]
        permutation_seed: u64,
    },
    /// Zipf's law over ranks with exponent `s` ≥ 0 (rank r drawn with probability ∝ r^-s;
    /// `s ≥ 1` is the heavy skew YCSB's zipfian cannot express, e.g. the replica-choice study's
    /// Zipf(2)), ranks mapped to keys by a permutation seeded with `permutation_seed`.
    Zipf {
        /// The exponent s.
        s: f64,
        /// Seed of the rank→key permutation.
        #[serde(default)]
        permutation_seed: u64,
    },
}

impl Distribution {
    /// YCSB's `requestdistribution=zipfian`: scrambled, θ = 0.99.
    pub fn ycsb_zipfian() -> Self {
        Distribution::Zipfian {
            theta: DEFAULT_ZIPFIAN_CONSTANT,
            scrambled: true,
        }
    }

    /// Checks the parameters; the error names the offending parameter.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |property: &str, reason: String| {
            Err(BenchError::InvalidProperty {
                property: property.to_owned(),
                reason,
            })
        };
        match *self {
            Distribution::Uniform => Ok(()),
            Distribution::Zipfian { theta, .. } | Distribution::Latest { theta } => {
                // Gray et al.'s closed form (α = 1/(1-θ)) is only defined for 0 < θ < 1.
                if !(theta > 0.0 && theta < 1.0) {
                    return bad(
                        "zipfianconstant",
                        format!(
                            "{theta} is outside (0, 1), where the Gray et al. algorithm is defined"
                        ),
                    );
                }
                Ok(())
            }
            Distribution::Hotspot {
                hot_data_fraction,
                hot_op_fraction,
            } => {
                if !(0.0..=1.0).contains(&hot_data_fraction) {
                    return bad(
                        "hotspotdatafraction",
                        format!("{hot_data_fraction} is not a fraction in [0, 1]"),
                    );
                }
                if !(0.0..=1.0).contains(&hot_op_fraction) {
                    return bad(
                        "hotspotopnfraction",
                        format!("{hot_op_fraction} is not a fraction in [0, 1]"),
                    );
                }
                Ok(())
            }
            Distribution::Pareto { alpha, .. } => {
                // The share of draws of the top fraction p is p^(1-1/α): it needs α > 1.
                if !(alpha > 1.0 && alpha.is_finite()) {
                    return bad(
                        "paretoalpha",
                        format!("{alpha} must be a finite number > 1 (1.16 gives 80/20)"),
                    );
                }
                Ok(())
            }
            Distribution::Zipf { s, .. } => {
                if !(s >= 0.0 && s.is_finite()) {
                    return bad(
                        "zipfexponent",
                        format!("{s} must be a finite number >= 0 (0 is uniform)"),
                    );
                }
                Ok(())
            }
        }
    }
}

/// FNV-1 over the 8 little-endian bytes of `val`, before any sign folding (YCSB and kvpaxos
/// fold it differently).
pub(crate) fn fnv1_64(val: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let mut hash = OFFSET_BASIS;
    let mut v = val;
    for _ in 0..8 {
        hash ^= v & 0xff;
        hash = hash.wrapping_mul(PRIME);
        v >>= 8;
    }
    hash
}

/// YCSB's `Utils.fnvhash64`: FNV-1 over the 8 little-endian bytes of `val`, made non-negative
/// as Java's `Math.abs` does (YCSB's key names and scrambled ranks are defined by it).
pub fn fnv_hash64(val: u64) -> u64 {
    let hash = fnv1_64(val);
    // Java's Math.abs(Long.MIN_VALUE) stays negative; unsigned_abs gives 2^63 there instead,
    // the only value on which we differ, and one that still stays in range after `% n`.
    (hash as i64).unsigned_abs()
}

fn zeta_from(start: u64, end: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in start..end {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): rank 0 is the most popular, P(rank i) ∝ 1/(i+1)^θ.
#[derive(Debug, Clone, PartialEq)]
pub struct ZipfianGenerator {
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    /// The item count `zetan` was computed for.
    count_for_zeta: u64,
    zetan: f64,
    eta: f64,
}

impl ZipfianGenerator {
    /// A generator with constant `theta` (0 < θ < 1, checked by [`Distribution::validate`]);
    /// `zetan` is computed on the first draw, for that draw's item count.
    pub fn new(theta: f64) -> Self {
        ZipfianGenerator {
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2theta: zeta_from(0, 2, theta, 0.0),
            count_for_zeta: 0,
            zetan: 0.0,
            eta: 0.0,
        }
    }

    /// A generator whose `zeta(count)` is already known (YCSB's precomputed constants).
    pub fn with_zetan(theta: f64, count: u64, zetan: f64) -> Self {
        let mut g = ZipfianGenerator::new(theta);
        g.count_for_zeta = count;
        g.zetan = zetan;
        g.eta = g.eta_for(count);
        g
    }

    fn eta_for(&self, n: u64) -> f64 {
        (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2theta / self.zetan)
    }

    /// The zipfian constant θ.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// Draws a rank in `0..n`.
    ///
    /// When `n` grew since the last draw, `zetan` is extended incrementally (YCSB does the same,
    /// so inserts cost O(new items)); when it shrank, it is recomputed from scratch.
    pub fn next_rank<R: Rng + ?Sized>(&mut self, rng: &mut R, n: u64) -> u64 {
        assert!(n > 0, "cannot draw a key from an empty key space");
        if n != self.count_for_zeta {
            self.zetan = if n > self.count_for_zeta {
                zeta_from(self.count_for_zeta, n, self.theta, self.zetan)
            } else {
                zeta_from(0, n, self.theta, 0.0)
            };
            self.count_for_zeta = n;
            self.eta = self.eta_for(n);
        }
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(n - 1);
        }
        let rank = (n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        // Floating-point rounding can land exactly on n; YCSB would return it, we clamp.
        rank.min(n - 1)
    }
}

/// YCSB's `ScrambledZipfianGenerator`: a zipfian rank, hashed with FNV-64 so that the popular
/// keys are spread over the key space instead of clustered at its start.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrambledZipfian {
    zipfian: ZipfianGenerator,
    /// True when the ranks come from YCSB's fixed 10¹⁰-item space (θ = 0.99).
    fixed_space: bool,
}

impl ScrambledZipfian {
    /// With θ = 0.99, exactly YCSB: ranks over 10¹⁰ items with the precomputed `zetan`, then
    /// `fnv(rank) % n`. Other θ would need `zeta(10¹⁰)`, too slow to compute, so ranks are drawn
    /// over the item count instead (the key popularity is then the same zipfian, scrambled).
    pub fn new(theta: f64) -> Self {
        if theta == DEFAULT_ZIPFIAN_CONSTANT {
            ScrambledZipfian {
                zipfian: ZipfianGenerator::with_zetan(theta, SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN),
                fixed_space: true,
            }
        } else {
            ScrambledZipfian {
                zipfian: ZipfianGenerator::new(theta),
                fixed_space: false,
            }
        }
    }

    /// Draws a key in `0..n`.
    pub fn next_key<R: Rng + ?Sized>(&mut self, rng: &mut R, n: u64) -> u64 {
        assert!(n > 0, "cannot draw a key from an empty key space");
        let space = if self.fixed_space {
            SCRAMBLED_ITEM_COUNT
        } else {
            n
        };
        let rank = self.zipfian.next_rank(rng, space);
        fnv_hash64(rank) % n
    }
}

/// YCSB's `SkewedLatestGenerator`: the newest key (`n - 1`) is the most popular, then the one
/// before it, and so on, zipfian over recency.
#[derive(Debug, Clone, PartialEq)]
pub struct SkewedLatest {
    zipfian: ZipfianGenerator,
}

impl SkewedLatest {
    /// A generator with zipfian constant `theta`.
    pub fn new(theta: f64) -> Self {
        SkewedLatest {
            zipfian: ZipfianGenerator::new(theta),
        }
    }

    /// Draws a key in `0..n`, where `n - 1` is the latest inserted key.
    pub fn next_key<R: Rng + ?Sized>(&mut self, rng: &mut R, n: u64) -> u64 {
        n - 1 - self.zipfian.next_rank(rng, n)
    }
}

/// YCSB's `HotspotIntegerGenerator`: the hot set is the first `hot_data_fraction` of the keys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hotspot {
    hot_data_fraction: f64,
    hot_op_fraction: f64,
}

impl Hotspot {
    /// A hotspot generator (fractions checked by [`Distribution::validate`]).
    pub fn new(hot_data_fraction: f64, hot_op_fraction: f64) -> Self {
        Hotspot {
            hot_data_fraction,
            hot_op_fraction,
        }
    }

    /// Draws a key in `0..n`.
    pub fn next_key<R: Rng + ?Sized>(&self, rng: &mut R, n: u64) -> u64 {
        assert!(n > 0, "cannot draw a key from an empty key space");
        let hot = ((n as f64 * self.hot_data_fraction) as u64).min(n);
        let cold = n - hot;
        let go_hot = rng.random::<f64>() < self.hot_op_fraction;
        // An empty side cannot be drawn from: send the draw to the other, as YCSB's intervals
        // of length 0 would otherwise divide by zero.
        if (go_hot && hot > 0) || cold == 0 {
            rng.random_range(0..hot)
        } else {
            hot + rng.random_range(0..cold)
        }
    }
}

/// A seeded bijection of `0..n` onto itself for any `n`, in O(1) memory: a 4-round Feistel
/// network over the next even power of two, cycle-walked until the value lands below `n`
/// (a permutation restricted by cycle walking stays a permutation; fewer than 4 steps expected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutation {
    seed: u64,
}

impl Permutation {
    /// The permutation for `seed`.
    pub fn new(seed: u64) -> Self {
        Permutation { seed }
    }

    /// The image of `x` (`x < n`) under this seed's permutation of `0..n`.
    pub fn apply(&self, x: u64, n: u64) -> u64 {
        assert!(x < n, "{x} is outside 0..{n}");
        if n <= 1 {
            return x;
        }
        let mut bits = 64 - (n - 1).leading_zeros();
        bits += bits % 2;
        let half = bits / 2;
        let mask = if half == 32 {
            u64::from(u32::MAX)
        } else {
            (1u64 << half) - 1
        };
        let mut v = x;
        loop {
            let (mut left, mut right) = (v >> half, v & mask);
            for round in 0..4u64 {
                let f = splitmix64(right ^ self.seed.rotate_left(16 * round as u32) ^ round) & mask;
                (left, right) = (right, left ^ f);
            }
            v = (left << half) | right;
            if v < n {
                return v;
            }
        }
    }
}

/// Pareto popularity over ranks: rank position `x = r/n` has density ∝ x^(-1/α), so the top
/// fraction p of the ranks gets p^(1-1/α) of the draws (80 % for p = 0.2, α = 1.16); drawn in
/// O(1) by inverting that share, `x = u^(α/(α-1))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pareto {
    exponent: f64,
    permutation: Permutation,
}

impl Pareto {
    /// A generator with shape `alpha` (> 1, checked by [`Distribution::validate`]).
    pub fn new(alpha: f64, permutation_seed: u64) -> Self {
        Pareto {
            exponent: alpha / (alpha - 1.0),
            permutation: Permutation::new(permutation_seed),
        }
    }

    /// Draws a rank in `0..n` (0 the most popular).
    pub fn next_rank<R: Rng + ?Sized>(&self, rng: &mut R, n: u64) -> u64 {
        assert!(n > 0, "cannot draw a key from an empty key space");
        let u: f64 = rng.random();
        ((u.powf(self.exponent) * n as f64) as u64).min(n - 1)
    }

    /// Draws a key in `0..n`: a rank, through the seeded permutation.
    pub fn next_key<R: Rng + ?Sized>(&self, rng: &mut R, n: u64) -> u64 {
        let rank = self.next_rank(rng, n);
        self.permutation.apply(rank, n)
    }
}

/// Zipf's law over ranks (`P(rank r) ∝ (r+1)^-s`, rank 0 the most popular), by rejection
/// sampling (`rand_distr::Zipf`, O(1) expected per draw for every `s`), through a seeded
/// rank→key permutation. The sampler is rebuilt when the key count changes.
#[derive(Debug, Clone, PartialEq)]
pub struct ZipfLaw {
    s: f64,
    permutation: Permutation,
    sampler: Option<(u64, rand_distr::Zipf<f64>)>,
}

impl ZipfLaw {
    /// A generator with exponent `s` (≥ 0, checked by [`Distribution::validate`]).
    pub fn new(s: f64, permutation_seed: u64) -> Self {
        ZipfLaw {
            s,
            permutation: Permutation::new(permutation_seed),
            sampler: None,
        }
    }

    /// Draws a rank in `0..n` (0 the most popular).
    pub fn next_rank<R: Rng + ?Sized>(&mut self, rng: &mut R, n: u64) -> u64 {
        assert!(n > 0, "cannot draw a key from an empty key space");
        let s = self.s;
        let zipf = match &self.sampler {
            Some((m, z)) if *m == n => z,
            _ => {
                let z = rand_distr::Zipf::new(n as f64, s)
                    .expect("n >= 1 and a finite s >= 0, checked by Distribution::validate");
                &self.sampler.insert((n, z)).1
            }
        };
        // The sampler yields 1..=n as a float.
        ((rand_distr::Distribution::sample(zipf, rng) as u64).clamp(1, n)) - 1
    }

    /// Draws a key in `0..n`: a rank, through the seeded permutation.
    pub fn next_key<R: Rng + ?Sized>(&mut self, rng: &mut R, n: u64) -> u64 {
        let rank = self.next_rank(rng, n);
        self.permutation.apply(rank, n)
    }
}

/// The runtime state of a [`Distribution`]: draws key numbers in `0..n`.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyChooser {
    /// Uniform over `0..n`.
    Uniform,
    /// Zipfian, rank 0 (key 0) most popular.
    Zipfian(ZipfianGenerator),
    /// YCSB's scrambled zipfian.
    ScrambledZipfian(ScrambledZipfian),
    /// YCSB's skewed latest.
    Latest(SkewedLatest),
    /// YCSB's hotspot.
    Hotspot(Hotspot),
    /// Pareto over permuted ranks.
    Pareto(Pareto),
    /// Zipf's law over permuted ranks.
    Zipf(ZipfLaw),
}

impl KeyChooser {
    /// Builds the chooser for `distribution`, after validating its parameters.
    pub fn new(distribution: &Distribution) -> Result<Self, BenchError> {
        distribution.validate()?;
        Ok(match *distribution {
            Distribution::Uniform => KeyChooser::Uniform,
            Distribution::Zipfian {
                theta,
                scrambled: true,
            } => KeyChooser::ScrambledZipfian(ScrambledZipfian::new(theta)),
            Distribution::Zipfian {
                theta,
                scrambled: false,
            } => KeyChooser::Zipfian(ZipfianGenerator::new(theta)),
            Distribution::Latest { theta } => KeyChooser::Latest(SkewedLatest::new(theta)),
            Distribution::Hotspot {
                hot_data_fraction,
                hot_op_fraction,
            } => KeyChooser::Hotspot(Hotspot::new(hot_data_fraction, hot_op_fraction)),
            Distribution::Pareto {
                alpha,
                permutation_seed,
            } => KeyChooser::Pareto(Pareto::new(alpha, permutation_seed)),
            Distribution::Zipf {
                s,
                permutation_seed,
            } => KeyChooser::Zipf(ZipfLaw::new(s, permutation_seed)),
        })
    }

    /// Computes what the first draw over `n` keys would (zipfian constants, the Zipf
    /// sampler), with a throwaway RNG: a prepared chooser can be cloned into every client, and
    /// its draws are those of an unprepared one.
    pub fn prepare(&mut self, n: u64) {
        if n > 0 {
            let mut scratch = rand_chacha::ChaCha8Rng::seed_from_u64(0);
            self.next_key(&mut scratch, n);
        }
    }

    /// Draws a key number in `0..n` (`n ≥ 1`).
    pub fn next_key<R: Rng + ?Sized>(&mut self, rng: &mut R, n: u64) -> u64 {
        assert!(n > 0, "cannot draw a key from an empty key space");
        match self {
            KeyChooser::Uniform => rng.random_range(0..n),
            KeyChooser::Zipfian(g) => g.next_rank(rng, n),
            KeyChooser::ScrambledZipfian(g) => g.next_key(rng, n),
            KeyChooser::Latest(g) => g.next_key(rng, n),
            KeyChooser::Hotspot(g) => g.next_key(rng, n),
            KeyChooser::Pareto(g) => g.next_key(rng, n),
            KeyChooser::Zipf(g) => g.next_key(rng, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn all_distributions() -> Vec<Distribution> {
        vec![
            Distribution::Uniform,
            Distribution::ycsb_zipfian(),
            Distribution::Zipfian {
                theta: 0.99,
                scrambled: false,
            },
            Distribution::Zipfian {
                theta: 0.5,
                scrambled: true,
            },
            Distribution::Latest { theta: 0.99 },
            Distribution::Hotspot {
                hot_data_fraction: 0.2,
                hot_op_fraction: 0.8,
            },
            Distribution::Pareto {
                alpha: 1.16,
                permutation_seed: 3,
            },
            Distribution::Zipf {
                s: 2.0,
                permutation_seed: 5,
            },
        ]
    }

    fn counts(d: &Distribution, n: u64, draws: usize, seed: u64) -> Vec<u64> {
        let mut chooser = KeyChooser::new(d).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            c[chooser.next_key(&mut rng, n) as usize] += 1;
        }
        c
    }

    /// Share of the draws that went to the `top` most drawn keys.
    fn top_share(mut c: Vec<u64>, top: usize) -> f64 {
        let total: u64 = c.iter().sum();
        c.sort_unstable_by(|a, b| b.cmp(a));
        c[..top].iter().sum::<u64>() as f64 / total as f64
    }

    #[test]
    fn zipfian_top_ranks_get_expected_share() {
        let theta = 0.99;
        let n = 1000;
        let zetan = zeta_from(0, n, theta, 0.0);
        let expected_top10 = zeta_from(0, 10, theta, 0.0) / zetan;
        let c = counts(
            &Distribution::Zipfian {
                theta,
                scrambled: false,
            },
            n,
            200_000,
            1,
        );
        let top10 = c[..10].iter().sum::<u64>() as f64 / 200_000.0;
        assert!(
            (top10 - expected_top10).abs() < 0.02,
            "top10 {top10} vs {expected_top10}"
        );
        // Rank 0 is the most popular, with P = 1/zetan.
        let p0 = c[0] as f64 / 200_000.0;
        assert!(
            (p0 - 1.0 / zetan).abs() < 0.01,
            "p0 {p0} vs {}",
            1.0 / zetan
        );
        assert!(c[0] > c[1] && c[1] > c[5] && c[5] > c[100]);
    }

    #[test]
    fn scrambled_zipfian_is_skewed_but_spread() {
        let c = counts(&Distribution::ycsb_zipfian(), 1000, 200_000, 2);
        // Skewed: the 10 hottest keys take at least what the 10 top ranks of YCSB's 10¹⁰-rank
        // zipfian take (≈ 11 %, hash collisions only add), far more than the uniform 1 %.
        let top10 = top_share(c.clone(), 10);
        let expected = zeta_from(0, 10, 0.99, 0.0) / SCRAMBLED_ZETAN;
        assert!(
            top10 > 0.9 * expected && top10 < 0.2,
            "top10 share {top10} vs {expected}"
        );
        // Scrambled: key 0 is not systematically the hottest, and the hot keys are spread.
        let mut order: Vec<usize> = (0..1000).collect();
        order.sort_by_key(|&k| std::cmp::Reverse(c[k]));
        assert!(
            order[..10].iter().any(|&k| k >= 100),
            "hot keys {:?}",
            &order[..10]
        );
    }

    #[test]
    fn zipfian_grows_incrementally_like_from_scratch() {
        let mut grown = ZipfianGenerator::new(0.99);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        grown.next_rank(&mut rng, 100);
        grown.next_rank(&mut rng, 1000);
        let scratch = zeta_from(0, 1000, 0.99, 0.0);
        assert!((grown.zetan - scratch).abs() < 1e-9);
        // Shrinking recomputes.
        grown.next_rank(&mut rng, 10);
        assert!((grown.zetan - zeta_from(0, 10, 0.99, 0.0)).abs() < 1e-12);
    }

    #[test]
    fn scrambled_zetan_constant_is_plausible() {
        // zeta(10¹⁰) = zeta(10⁷) + the tail, which the integral of x^-0.99 over [10⁷, 10¹⁰]
        // approximates to well under 0.01: 100 · (10^0.1 − 10^0.07).
        let z7 = zeta_from(0, 10_000_000, 0.99, 0.0);
        let tail = 100.0 * (10f64.powf(0.1) - 10f64.powf(0.07));
        assert!((z7 + tail - SCRAMBLED_ZETAN).abs() < 0.01, "{z7} + {tail}");
    }

    #[test]
    fn latest_prefers_newest() {
        let n = 1000;
        let c = counts(&Distribution::Latest { theta: 0.99 }, n, 100_000, 4);
        assert!(c[999] > c[998] && c[998] > c[990] && c[990] > c[500]);
        let newest10 = c[990..].iter().sum::<u64>() as f64 / 100_000.0;
        let expected = zeta_from(0, 10, 0.99, 0.0) / zeta_from(0, n, 0.99, 0.0);
        assert!((newest10 - expected).abs() < 0.02);
    }

    #[test]
    fn uniform_chi_square() {
        let n = 100;
        let draws = 100_000;
        let c = counts(&Distribution::Uniform, n, draws, 6);
        let e = draws as f64 / n as f64;
        let chi2: f64 = c.iter().map(|&o| (o as f64 - e).powi(2) / e).sum();
        // 99 degrees of freedom: mean 99, sd ≈ 14; 180 is far in the tail.
        assert!(chi2 < 180.0, "chi2 {chi2}");
    }

    #[test]
    fn pareto_is_80_20() {
        let n = 1000;
        let c = counts(
            &Distribution::Pareto {
                alpha: 1.16,
                permutation_seed: 9,
            },
            n,
            200_000,
            7,
        );
        let top20 = top_share(c.clone(), 200);
        assert!((top20 - 0.80).abs() < 0.03, "top 20 % share {top20}");
        // The permutation spreads the popular ranks: the hottest key is not key 0 for this seed
        // and the first 200 keys are not the hot set.
        let first200 = c[..200].iter().sum::<u64>() as f64 / 200_000.0;
        assert!(first200 < 0.6, "first 200 keys share {first200}");
    }

    #[test]
    fn hotspot_fractions() {
        let n = 1000;
        let c = counts(
            &Distribution::Hotspot {
                hot_data_fraction: 0.1,
                hot_op_fraction: 0.7,
            },
            n,
            100_000,
            8,
        );
        let hot = c[..100].iter().sum::<u64>() as f64 / 100_000.0;
        assert!((hot - 0.7).abs() < 0.01, "hot share {hot}");
    }

    #[test]
    fn hotspot_degenerate_sets() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        for (data, ops) in [(0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (1.0, 1.0)] {
            let h = Hotspot::new(data, ops);
            for n in 1..20 {
                for _ in 0..20 {
                    assert!(h.next_key(&mut rng, n) < n);
                }
            }
        }
    }

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 7, 64, 100, 1000, 4097] {
            let p = Permutation::new(n * 31);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x, n);
                assert!(!seen[y as usize], "{y} twice for n = {n}");
                seen[y as usize] = true;
            }
        }
        assert_ne!(
            (0..10)
                .map(|x| Permutation::new(1).apply(x, 1000))
                .collect::<Vec<_>>(),
            (0..10)
                .map(|x| Permutation::new(2).apply(x, 1000))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn invalid_parameters_are_refused() {
        for d in [
            Distribution::Zipfian {
                theta: 1.0,
                scrambled: true,
            },
            Distribution::Latest { theta: 0.0 },
            Distribution::Hotspot {
                hot_data_fraction: 1.5,
                hot_op_fraction: 0.5,
            },
            Distribution::Pareto {
                alpha: 1.0,
                permutation_seed: 0,
            },
        ] {
            assert!(matches!(
                KeyChooser::new(&d),
                Err(BenchError::InvalidProperty { .. })
            ));
        }
    }

    #[test]
    fn serde_round_trip_with_defaults() {
        let d: Distribution = serde_json::from_str(r#"{"kind":"zipfian"}"#).unwrap();
        assert_eq!(d, Distribution::ycsb_zipfian());
        let d: Distribution = serde_json::from_str(r#"{"kind":"pareto"}"#).unwrap();
        assert_eq!(
            d,
            Distribution::Pareto {
                alpha: 1.16,
                permutation_seed: 0
            }
        );
        for d in all_distributions() {
            let s = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_json::from_str::<Distribution>(&s).unwrap(), d);
        }
        assert!(serde_json::from_str::<Distribution>(r#"{"kind":"gaussian"}"#).is_err());
    }

    #[test]
    fn fnv_matches_ycsb() {
        // FNV-1 of eight zero bytes, as YCSB's loop computes it.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for _ in 0..8 {
            h = h.wrapping_mul(1_099_511_628_211);
        }
        assert_eq!(fnv_hash64(0), (h as i64).unsigned_abs());
        assert_ne!(fnv_hash64(1), fnv_hash64(2));
    }

    proptest! {
        #[test]
        fn every_draw_in_range(which in 0usize..7, n in 1u64..5000, seed: u64) {
            let mut chooser = KeyChooser::new(&all_distributions()[which]).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for i in 0..50 {
                // The key space also grows and shrinks between draws.
                let m = if i % 2 == 0 { n } else { n + i };
                prop_assert!(chooser.next_key(&mut rng, m) < m);
            }
        }

        #[test]
        fn deterministic_by_seed(which in 0usize..7, n in 1u64..5000, seed: u64) {
            let draw = || {
                let mut chooser = KeyChooser::new(&all_distributions()[which]).unwrap();
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                (0..30).map(|_| chooser.next_key(&mut rng, n)).collect::<Vec<_>>()
            };
            prop_assert_eq!(draw(), draw());
        }

        #[test]
        fn permutation_in_range(x in 0u64..1_000_000, extra in 0u64..1_000_000, seed: u64) {
            let n = x + 1 + extra;
            prop_assert!(Permutation::new(seed).apply(x, n) < n);
        }
    }

    #[test]
    fn zipf_two_gives_the_top_rank_its_share_through_the_permutation() {
        // P(rank 0) = 1 / H(n, 2); H(1000, 2) = 1.64393...
        let d = Distribution::Zipf {
            s: 2.0,
            permutation_seed: 9,
        };
        let c = counts(&d, 1000, 200_000, 4);
        let (top_key, top) = c.iter().enumerate().max_by_key(|(_, v)| **v).unwrap();
        let share = *top as f64 / 200_000.0;
        assert!((share - 1.0 / 1.643_934).abs() < 0.005, "top share {share}");
        assert_eq!(top_key as u64, Permutation::new(9).apply(0, 1000));
        // Rank 1 gets a quarter of rank 0.
        let second = c.iter().filter(|&&v| v != *top).max().unwrap();
        let ratio = *second as f64 / *top as f64;
        assert!((ratio - 0.25).abs() < 0.02, "rank 1 / rank 0 = {ratio}");
        // s = 0 is uniform; a negative or infinite exponent is refused by name.
        let flat = counts(
            &Distribution::Zipf {
                s: 0.0,
                permutation_seed: 1,
            },
            10,
            100_000,
            5,
        );
        assert!(
            flat.iter().all(|&v| (9_000..11_000).contains(&v)),
            "{flat:?}"
        );
        for s in [-1.0, f64::INFINITY, f64::NAN] {
            let err = Distribution::Zipf {
                s,
                permutation_seed: 0,
            }
            .validate()
            .unwrap_err();
            assert!(err.to_string().contains("zipfexponent"), "{err}");
        }
    }

    #[test]
    fn a_prepared_chooser_draws_what_an_unprepared_one_does() {
        for d in all_distributions() {
            let mut fresh = KeyChooser::new(&d).unwrap();
            let mut prepared = KeyChooser::new(&d).unwrap();
            prepared.prepare(10_000);
            let (mut a, mut b) = (ChaCha8Rng::seed_from_u64(3), ChaCha8Rng::seed_from_u64(3));
            for _ in 0..1000 {
                assert_eq!(
                    fresh.next_key(&mut a, 10_000),
                    prepared.next_key(&mut b, 10_000),
                    "{d:?}"
                );
            }
        }
    }
}
