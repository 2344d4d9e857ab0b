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
        let mut drained = self.drained_at.lock();
        let start = drained.map_or(now, |d| d.max(now));
        let end = start + self.time_of(bytes);
        // It may go once what is outstanding after it fits the burst; a request bigger than
        // the burst goes when the bucket is empty (at `start`), alone.
        let fits = end.checked_sub(self.time_of(self.burst)).unwrap_or(now);
        let free_at = fits.min(start).max(now);
        *drained = Some(end);
        free_at.saturating_duration_since(now)
    }

    /// Counts `bytes` as sent at `now` if they fit what the bucket holds now, without
    /// waiting; false (nothing counted) if they do not. For traffic that is better dropped
    /// than delayed (read repair, which anti-entropy backs up).
    pub fn try_take(&self, bytes: u64, now: Instant) -> bool {
        if self.rate == 0 {
            return true;
        }
        let mut drained = self.drained_at.lock();
        let start = drained.map_or(now, |d| d.max(now));
        let end = start + self.time_of(bytes);
        if end.saturating_duration_since(now) > self.time_of(self.burst) {
            return false;
        }
        *drained = Some(end);
        true
    }

    /// How long the bucket takes to drain `bytes` at its rate (not 0).
    fn time_of(&self, bytes: u64) -> Duration {
        Duration::from_nanos(
            (u128::from(bytes) * 1_000_000_000 / u128::from(self.rate)).min(u128::from(u64::MAX))
                as u64,
        )
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

    #[test]
    fn try_take_refuses_what_exceeds_the_burst_and_counts_nothing_then() {
        let b = Budget::new(1_000_000, 2_000_000);
        let now = Instant::now();
        assert!(b.try_take(1_500_000, now));
        // 0.5 MB of burst left: 1 MB does not fit, and is not counted.
        assert!(!b.try_take(1_000_000, now));
        assert!(b.try_take(500_000, now));
        assert!(!b.try_take(1, now));
        // Half a second later 0.5 MB has drained.
        let later = now + Duration::from_millis(500);
        assert!(b.try_take(500_000, later));
        assert!(!b.try_take(1_000, later));
        // Unlimited takes anything.
        assert!(Budget::new(0, 1).try_take(u64::MAX, now));
    }

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
