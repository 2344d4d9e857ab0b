//! Redis's `maxmemory` vocabulary, shared by standalone and cluster nodes, with no I/O: the
//! policy enum and its names ([`MaxmemoryPolicy`]), Redis's size syntax ([`parse_size`]),
//! the `-OOM` error text ([`OOM`]), the sampling constant ([`SAMPLES`]), the per-key
//! overhead of the used-memory estimate ([`KEY_OVERHEAD`]) and Redis's logarithmic LFU
//! counter ([`lfu`]).
//!
//! Guarantees: parsing never panics nor wraps (an overflowing size is refused), and every
//! policy round-trips through its name and its `u8` code.

/// Redis's error for a command refused over the limit (without the leading `-`).
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Keys sampled per eviction (Redis's `maxmemory-samples` default).
pub const SAMPLES: usize = 5;

/// Bytes added to each key's key and value lengths in the used-memory estimate: the storage
/// engine's entry (map slot, version header, ordered-index node) and the keyspace's own
/// per-key record.
pub const KEY_OVERHEAD: u64 = 96;

/// What happens when used memory is over `maxmemory` (Redis's `maxmemory-policy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum MaxmemoryPolicy {
    /// Refuse commands that may add memory with [`OOM`].
    #[default]
    NoEviction,
    /// Evict the least recently used key.
    AllkeysLru,
    /// Evict the least frequently used key.
    AllkeysLfu,
    /// Evict a random key.
    AllkeysRandom,
    /// Evict the least recently used key with a TTL.
    VolatileLru,
    /// Evict the least frequently used key with a TTL.
    VolatileLfu,
    /// Evict a random key with a TTL.
    VolatileRandom,
    /// Evict the key with a TTL that expires soonest.
    VolatileTtl,
}

impl MaxmemoryPolicy {
    /// Every policy, in Redis's documentation order.
    pub const ALL: [MaxmemoryPolicy; 8] = [
        MaxmemoryPolicy::VolatileLru,
        MaxmemoryPolicy::AllkeysLru,
        MaxmemoryPolicy::VolatileLfu,
        MaxmemoryPolicy::AllkeysLfu,
        MaxmemoryPolicy::VolatileRandom,
        MaxmemoryPolicy::AllkeysRandom,
        MaxmemoryPolicy::VolatileTtl,
        MaxmemoryPolicy::NoEviction,
    ];

    /// Redis's name (`allkeys-lru`, ...).
    pub fn name(self) -> &'static str {
        match self {
            MaxmemoryPolicy::NoEviction => "noeviction",
            MaxmemoryPolicy::AllkeysLru => "allkeys-lru",
            MaxmemoryPolicy::AllkeysLfu => "allkeys-lfu",
            MaxmemoryPolicy::AllkeysRandom => "allkeys-random",
            MaxmemoryPolicy::VolatileLru => "volatile-lru",
            MaxmemoryPolicy::VolatileLfu => "volatile-lfu",
            MaxmemoryPolicy::VolatileRandom => "volatile-random",
            MaxmemoryPolicy::VolatileTtl => "volatile-ttl",
        }
    }

    /// The policy a name (any case) means.
    pub fn parse(name: &[u8]) -> Option<MaxmemoryPolicy> {
        Self::ALL
            .into_iter()
            .find(|p| name.eq_ignore_ascii_case(p.name().as_bytes()))
    }

    /// Whether only keys with a TTL may be evicted.
    pub fn volatile(self) -> bool {
        matches!(
            self,
            MaxmemoryPolicy::VolatileLru
                | MaxmemoryPolicy::VolatileLfu
                | MaxmemoryPolicy::VolatileRandom
                | MaxmemoryPolicy::VolatileTtl
        )
    }

    /// Whether reads must refresh a key's access time and frequency.
    pub fn tracks_reads(self) -> bool {
        matches!(
            self,
            MaxmemoryPolicy::AllkeysLru
                | MaxmemoryPolicy::AllkeysLfu
                | MaxmemoryPolicy::VolatileLru
                | MaxmemoryPolicy::VolatileLfu
        )
    }

    /// The policy whose `as u8` code is `v` (`noeviction` for an unknown code).
    pub fn from_u8(v: u8) -> MaxmemoryPolicy {
        Self::ALL
            .into_iter()
            .find(|p| *p as u8 == v)
            .unwrap_or_default()
    }
}

impl std::fmt::Display for MaxmemoryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a memory size like Redis's `memtoll`: digits with an optional unit, any case:
/// `b`, `k` (1000), `kb` (1024), `m` (10⁶), `mb` (2²⁰), `g` (10⁹), `gb` (2³⁰). `None` for
/// anything else or an overflow.
pub fn parse_size(s: &[u8]) -> Option<u64> {
    let split = s
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let mul: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"" | b"b" => 1,
        b"k" => 1000,
        b"kb" => 1024,
        b"m" => 1000 * 1000,
        b"mb" => 1024 * 1024,
        b"g" => 1000 * 1000 * 1000,
        b"gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    std::str::from_utf8(digits)
        .ok()?
        .parse::<u64>()
        .ok()?
        .checked_mul(mul)
}

/// Redis's `bytesToHuman`: `512B`, `1.50K`, `2.00M`, ...
pub fn human(n: u64) -> String {
    let units = [
        (1u64 << 40, "T"),
        (1 << 30, "G"),
        (1 << 20, "M"),
        (1 << 10, "K"),
    ];
    for (size, unit) in units {
        if n >= size {
            return format!("{:.2}{unit}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

/// Redis's LFU counter: logarithmic increments (`lfu-log-factor` 10) from 5 for a new key,
/// decremented by one per minute without access (`lfu-decay-time` 1).
pub mod lfu {
    /// A new key's counter (Redis's `LFU_INIT_VAL`).
    pub const INIT: u8 = 5;
    const LOG_FACTOR: u64 = 10;

    /// The counter after `idle_ms` without access.
    pub fn decayed(counter: u8, idle_ms: u64) -> u8 {
        let minutes = idle_ms / 60_000;
        counter.saturating_sub(minutes.min(255) as u8)
    }

    /// One access: increments with probability `1 / ((counter - INIT) * 10 + 1)`; `rand` is
    /// a uniformly distributed 64-bit number.
    pub fn incremented(counter: u8, rand: u64) -> u8 {
        if counter == u8::MAX {
            return counter;
        }
        let base = counter.saturating_sub(INIT) as u64;
        // rand / 2^64 < 1 / (base * factor + 1)
        let limit = u64::MAX / (base * LOG_FACTOR + 1);
        if rand <= limit { counter + 1 } else { counter }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_redis_memtoll() {
        assert_eq!(parse_size(b"0"), Some(0));
        assert_eq!(parse_size(b"12345"), Some(12345));
        assert_eq!(parse_size(b"100b"), Some(100));
        assert_eq!(parse_size(b"1k"), Some(1000));
        assert_eq!(parse_size(b"1KB"), Some(1024));
        assert_eq!(parse_size(b"100mb"), Some(100 << 20));
        assert_eq!(parse_size(b"2m"), Some(2_000_000));
        assert_eq!(parse_size(b"1gb"), Some(1 << 30));
        assert_eq!(parse_size(b"1Gb"), Some(1 << 30));
        assert_eq!(parse_size(b"3g"), Some(3_000_000_000));
        for bad in [
            &b""[..],
            b"mb",
            b"-1",
            b"1.5mb",
            b"10tb",
            b"1 mb",
            b"99999999999999999999gb",
        ] {
            assert_eq!(parse_size(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn policy_names_round_trip() {
        for p in MaxmemoryPolicy::ALL {
            assert_eq!(MaxmemoryPolicy::parse(p.name().as_bytes()), Some(p));
            assert_eq!(
                MaxmemoryPolicy::parse(p.name().to_uppercase().as_bytes()),
                Some(p)
            );
            assert_eq!(MaxmemoryPolicy::from_u8(p as u8), p);
        }
        assert_eq!(MaxmemoryPolicy::parse(b"allkeys-fifo"), None);
        assert_eq!(MaxmemoryPolicy::default().name(), "noeviction");
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(100 << 20), "100.00M");
        assert_eq!(human(1 << 30), "1.00G");
    }

    #[test]
    fn lfu_counter_grows_logarithmically_and_decays() {
        assert_eq!(
            lfu::incremented(lfu::INIT, u64::MAX),
            lfu::INIT + 1,
            "p = 1 at INIT"
        );
        assert_eq!(lfu::incremented(255, 0), 255);
        assert_eq!(lfu::incremented(20, u64::MAX / 2), 20, "p = 1/151 at 20");
        assert_eq!(lfu::incremented(20, 0), 21);
        assert_eq!(lfu::decayed(10, 59_999), 10);
        assert_eq!(lfu::decayed(10, 3 * 60_000), 7);
        assert_eq!(lfu::decayed(3, 3_600_000), 0);
    }
}
