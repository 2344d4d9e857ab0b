//! [`TokioClock`]: physical time derived from tokio's clock, for embedded clusters, the
//! simulator and tests.
//!
//! Under paused tokio time (`#[tokio::test(start_paused = true)]`) the operating system's
//! clock does not move while timers and WAN delays advance instantly; a node that stamped
//! versions with `SystemClock` would then see time stand still. `TokioClock` reads
//! `start + (tokio::time::Instant::now() − origin)`, so it advances exactly with virtual
//! time (and with real time when tokio's clock is not paused).
//!
//! Guarantee: strictly monotonic, as [`meridian_core::Clock`] requires (equal readings are
//! bumped by one microsecond).

use meridian_core::{Clock, StrictlyMonotonic, Timestamp};
use tokio::time::Instant;

/// A [`Clock`] that follows tokio's (possibly paused) clock. See the module docs.
#[derive(Debug)]
pub struct TokioClock {
    origin: Instant,
    start: Timestamp,
    mono: StrictlyMonotonic,
}

impl TokioClock {
    /// A clock reading `start` now and advancing with tokio's clock. Call it inside a tokio
    /// runtime (it reads tokio's `Instant`).
    pub fn new(start: Timestamp) -> TokioClock {
        TokioClock {
            origin: Instant::now(),
            start,
            mono: StrictlyMonotonic::default(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let raw = self
            .start
            .saturating_add(Instant::now().duration_since(self.origin))
            .micros();
        self.mono.next(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_virtual_time_and_never_repeats() {
        let c = TokioClock::new(Timestamp(1_000_000));
        let a = c.now();
        let b = c.now();
        assert!(b > a);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let d = c.now();
        assert!(d.micros() >= 6_000_000, "{d}");
        assert!(d.micros() < 6_000_100, "{d}");
    }
}
