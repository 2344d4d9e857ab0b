//! WAN budgets (spec large-objects.md §7): token buckets that pace background chunk traffic
//! (handoff, read repair, scrub repair) crossing a WAN link, so it never takes the link
//! from clients. A client transfer never waits on one.
//!
//! Guarantees: over any interval `t`, a bucket lets through at most `rate × t + burst`
//! bytes; a request larger than the burst is let through alone once the bucket is full (so
//! no chunk waits forever), and waiters are served in the order they asked (one mutex, one
//! virtual "next free" instant).

use parking_lot::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// One token bucket: `rate` bytes per second, holding at most `burst` bytes.
#[derive(Debug)]
pub struct Budget {
    rate: u64,
    burst: u64,
    /// When the bytes granted so far will have drained at `rate` (the bucket is full again).
    drained_at: Mutex<Option<Instant>>,
}

impl Budget {
    /// A bucket of `rate` bytes/s (0: unlimited) and `burst` bytes.
    pub fn new(rate: u64, burst: u64) -> Self {
        Self {
            rate,
            burst: burst.max(1),
            drained_at: Mutex::new(None),
        }
    }

    /// How long a sender of `bytes` at `now` must wait before sending; the bytes are counted
    /// as sent at the end of that wait.
    pub fn reserve(&self, bytes: u64, now: Instant) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        let per = |b: u64| {
            Duration::from_nanos(
                (b as u128 * 1_000_000_000 / self.rate as u128).min(u64::MAX as u128) as u64,
            )
        };
        let mut drained = self.drained_at.lock();
        let start = drained.map_or(now, |d| d.max(now));
        let end = start + per(bytes);
        // It may go once what is outstanding after it fits the burst; a request bigger than
        // the burst goes when the bucket is empty (at `start`), alone.
        let fits = end.checked_sub(per(self.burst)).unwrap_or(now);
        let free_at = fits.min(start).max(now);
        *drained = Some(end);
        free_at.saturating_duration_since(now)
    }

    /// Waits until `bytes` may go.
    pub async fn take(&self, bytes: u64) {
        let wait = self.reserve(bytes, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_budget_holds_the_long_run_rate_after_its_burst() {
        // 1 MB/s, burst 2 MB: 10 chunks of 1 MB sent back to back.
        let b = Budget::new(1_000_000, 2_000_000);
        let start = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..10 {
            let now = Instant::now();
            let w = b.reserve(1_000_000, now);
            waits.push(w);
            tokio::time::sleep(w).await;
        }
        let took = start.elapsed();
        // The first two go at once (the burst); then one per second.
        assert_eq!(&waits[..2], &[Duration::ZERO, Duration::ZERO]);
        assert!(waits[2] > Duration::ZERO);
        assert_eq!(
            took,
            Duration::from_secs(8),
            "10 MB at 1 MB/s less a 2 MB burst"
        );
        // An idle bucket fills up again: a burst goes at once.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(b.reserve(2_000_000, Instant::now()), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_rate_is_unlimited_and_a_huge_request_still_goes() {
        assert_eq!(
            Budget::new(0, 1).reserve(u64::MAX, Instant::now()),
            Duration::ZERO
        );
        let b = Budget::new(1_000, 10);
        assert_eq!(
            b.reserve(1_000_000, Instant::now()),
            Duration::ZERO,
            "alone, at once"
        );
        assert!(
            b.reserve(1, Instant::now()) > Duration::from_secs(900),
            "then it drains"
        );
    }
}
