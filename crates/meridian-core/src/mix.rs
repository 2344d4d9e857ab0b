//! splitmix64 (Steele, Lea & Flood, 2014): the one integer mixer the workspace derives seeds,
//! permutations and test data from. Pure and stable across platforms and releases, so
//! anything derived from it replays.

/// The splitmix64 increment, the golden ratio in 64-bit fixed point.
pub const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's step: the mix of `x + GOLDEN_GAMMA`. A counter fed through it gives the
/// splitmix64 sequence; a single call hashes one word well.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of the reference splitmix64 generator seeded with 0.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(GOLDEN_GAMMA), 0x6E78_9E6A_A1B9_65F4);
    }
}
