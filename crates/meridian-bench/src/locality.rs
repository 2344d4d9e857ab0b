//! Locality (spec `experiments.md` §4 "Placement", issue 6 point 1): key id `i` has home DC
//! `i mod D`, and a client in DC `d` draws a key homed at `d` with probability `L`, otherwise a
//! key homed in one of the other DCs, chosen uniformly. Within the chosen home set the key is
//! drawn by the popularity generator, over the set's size, then mapped back to a key id.
//!
//! Guarantees:
//! - every key drawn lies in `0..n` and is homed where the draw decided;
//! - with one DC, or `L = 1`, every draw is local; the generator's shape (zipfian, latest,
//!   hotspot, …) holds within each home set;
//! - deterministic given the caller's RNG.

use rand::Rng;

use crate::BenchError;
use crate::generator::{Distribution, KeyChooser};

/// The home DC of key id `key` among `dcs` DCs.
pub fn home_dc(key: u64, dcs: u32) -> u32 {
    (key % u64::from(dcs)) as u32
}

/// How many of the keys `0..n` are homed at `dc`.
pub fn home_set_size(dc: u32, dcs: u32, n: u64) -> u64 {
    let (dc, dcs) = (u64::from(dc), u64::from(dcs));
    if dc >= n { 0 } else { (n - dc).div_ceil(dcs) }
}

/// The `index`-th key homed at `dc` (`index < home_set_size(dc, dcs, n)`).
pub fn home_key(dc: u32, dcs: u32, index: u64) -> u64 {
    u64::from(dc) + index * u64::from(dcs)
}

/// A client's locality-biased key choice.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalityChooser {
    dcs: u32,
    locality: f64,
    /// One generator per home set: their sizes differ, and a shared zipfian would recompute
    /// its `zetan` from scratch every time the size shrank.
    choosers: Vec<KeyChooser>,
}

impl LocalityChooser {
    /// A chooser for `dcs` DCs with locality `locality` (in `[0, 1]`), popularity
    /// `distribution` within each home set.
    pub fn new(dcs: u32, locality: f64, distribution: &Distribution) -> Result<Self, BenchError> {
        if dcs == 0 {
            return Err(BenchError::InvalidProperty {
                property: "dcs".to_owned(),
                reason: "there must be at least one data centre".to_owned(),
            });
        }
        if !(0.0..=1.0).contains(&locality) {
            return Err(BenchError::InvalidProperty {
                property: "locality".to_owned(),
                reason: format!("{locality} is not a probability in [0, 1]"),
            });
        }
        let chooser = KeyChooser::new(distribution)?;
        Ok(LocalityChooser {
            dcs,
            locality,
            choosers: vec![chooser; dcs as usize],
        })
    }

    /// Prepares each DC's chooser for its share of `n` keys ([`KeyChooser::prepare`]).
    pub fn prepare(&mut self, n: u64) {
        for (dc, chooser) in (0..self.dcs).zip(&mut self.choosers) {
            chooser.prepare(home_set_size(dc, self.dcs, n));
        }
    }

    /// Whether `key` is local to a client in `client_dc`.
    pub fn is_local(&self, key: u64, client_dc: u32) -> bool {
        home_dc(key, self.dcs) == client_dc
    }

    /// Draws a key in `0..n` for a client in `client_dc` (`client_dc < dcs`, and `n ≥ dcs` so
    /// that every DC homes at least one key).
    pub fn next_key<R: Rng + ?Sized>(&mut self, rng: &mut R, client_dc: u32, n: u64) -> u64 {
        assert!(
            client_dc < self.dcs,
            "client DC {client_dc} is outside 0..{}",
            self.dcs
        );
        assert!(
            n >= u64::from(self.dcs),
            "{n} keys cannot give each of {} DCs a home key",
            self.dcs
        );
        // One DC, or the draw comes out local: stay home. Otherwise pick one of the D - 1 other
        // DCs uniformly, by drawing an offset in 1..D from the client's DC.
        let target = if self.dcs == 1 || rng.random::<f64>() < self.locality {
            client_dc
        } else {
            let offset = rng.random_range(1..self.dcs);
            (client_dc + offset) % self.dcs
        };
        let size = home_set_size(target, self.dcs, n);
        let index = self.choosers[target as usize].next_key(rng, size);
        home_key(target, self.dcs, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn ninety_percent_local_with_two_dcs() {
        let mut c = LocalityChooser::new(2, 0.9, &Distribution::Uniform).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for client_dc in 0..2 {
            let local = (0..100_000)
                .filter(|_| {
                    let k = c.next_key(&mut rng, client_dc, 128_000);
                    assert!(k < 128_000);
                    c.is_local(k, client_dc)
                })
                .count();
            let share = local as f64 / 100_000.0;
            assert!((share - 0.9).abs() < 0.005, "DC {client_dc}: {share}");
        }
    }

    #[test]
    fn remote_draws_spread_over_the_other_dcs() {
        let mut c = LocalityChooser::new(4, 0.25, &Distribution::Uniform).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut per_dc = [0u32; 4];
        for _ in 0..40_000 {
            per_dc[home_dc(c.next_key(&mut rng, 1, 1001), 4) as usize] += 1;
        }
        // Local 25 %, each of the three others 25 %.
        for (dc, &count) in per_dc.iter().enumerate() {
            let share = f64::from(count) / 40_000.0;
            assert!((share - 0.25).abs() < 0.015, "DC {dc}: {share}");
        }
    }

    #[test]
    fn popularity_holds_within_the_home_set() {
        // Unscrambled zipfian: rank 0 of DC 1's home set is key 1, the hottest of that set.
        let d = Distribution::Zipfian {
            theta: 0.99,
            scrambled: false,
        };
        let mut c = LocalityChooser::new(2, 1.0, &d).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..20_000 {
            *counts.entry(c.next_key(&mut rng, 1, 1000)).or_insert(0u32) += 1;
        }
        assert!(counts.keys().all(|k| k % 2 == 1));
        let hottest = counts.iter().max_by_key(|&(_, &v)| v).map(|(&k, _)| k);
        assert_eq!(hottest, Some(1));
    }

    #[test]
    fn home_sets_partition_the_keys() {
        for dcs in 1..5u32 {
            for n in u64::from(dcs)..40 {
                let total: u64 = (0..dcs).map(|dc| home_set_size(dc, dcs, n)).sum();
                assert_eq!(total, n);
                for dc in 0..dcs {
                    let size = home_set_size(dc, dcs, n);
                    assert!(home_key(dc, dcs, size - 1) < n);
                    assert!(home_key(dc, dcs, size) >= n);
                }
            }
        }
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(LocalityChooser::new(0, 0.5, &Distribution::Uniform).is_err());
        assert!(LocalityChooser::new(2, 1.5, &Distribution::Uniform).is_err());
        assert!(LocalityChooser::new(2, 0.5, &Distribution::Latest { theta: 2.0 }).is_err());
    }

    proptest! {
        #[test]
        fn every_key_valid_and_deterministic(
            dcs in 1u32..6, extra in 0u64..500, locality in 0.0f64..=1.0,
            which in 0usize..5, seed: u64,
        ) {
            let d = [
                Distribution::Uniform,
                Distribution::ycsb_zipfian(),
                Distribution::Latest { theta: 0.99 },
                Distribution::Hotspot { hot_data_fraction: 0.2, hot_op_fraction: 0.8 },
                Distribution::Pareto { alpha: 1.16, permutation_seed: seed },
            ][which].clone();
            let n = u64::from(dcs) + extra;
            let draw = || {
                let mut c = LocalityChooser::new(dcs, locality, &d).unwrap();
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                (0..40).map(|i| c.next_key(&mut rng, i % dcs, n)).collect::<Vec<_>>()
            };
            let keys = draw();
            prop_assert!(keys.iter().all(|&k| k < n));
            prop_assert_eq!(keys, draw());
        }
    }
}
