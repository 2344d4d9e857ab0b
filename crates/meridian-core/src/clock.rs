//! Time as protocols see it: physical microseconds since the Unix epoch, read from a [`Clock`].
//!
//! Guarantees every clock here gives:
//! - **strictly monotonic**: two reads of the same clock never return the same or a smaller
//!   [`Timestamp`], even if the source stalls or steps backwards (the clock then advances by one
//!   microsecond per read until the source catches up);
//! - **injectable error**: [`SkewedClock`] adds a fixed offset (skew) and a rate error (drift,
//!   in parts per million) to any other clock, which is how Clock-SI tests and the simulator
//!   model loosely synchronized nodes;
//! - **no hidden OS reads**: only [`SystemClock`] touches the operating system's time.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Microseconds since the Unix epoch, as read from some node's [`Clock`].
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The smallest timestamp; reads "as of" it see nothing written by a clock.
    pub const MIN: Timestamp = Timestamp(0);
    /// The largest timestamp; a read "as of" it sees the latest version.
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// Microseconds since the epoch.
    pub fn micros(self) -> u64 {
        self.0
    }

    /// This timestamp moved `d` later, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_micros().min(u64::MAX as u128) as u64),
        )
    }

    /// This timestamp moved `d` earlier, saturating at [`Timestamp::MIN`].
    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_sub(d.as_micros().min(u64::MAX as u128) as u64),
        )
    }

    /// How long after `earlier` this is (zero if it is not later).
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}µs", self.0)
    }
}

/// A node's source of physical time. Implementations must be strictly monotonic.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time; strictly greater than any value this clock returned before.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// Turns a possibly repeating or backwards-stepping source into a strictly increasing one:
/// the building block of every [`Clock`] here, public so clocks over other time sources (tokio's
/// paused time, a simulator) keep the same guarantee without re-deriving it.
#[derive(Debug, Default)]
pub struct StrictlyMonotonic {
    last: AtomicU64,
}

impl StrictlyMonotonic {
    /// The timestamp to return for a source reading of `raw` microseconds: `raw`, or one more
    /// than the last timestamp returned if `raw` is not past it.
    pub fn next(&self, raw: u64) -> Timestamp {
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = raw.max(last.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Timestamp(next),
                Err(actual) => last = actual,
            }
        }
    }
}

/// The operating system's wall clock, made strictly monotonic.
#[derive(Debug, Default)]
pub struct SystemClock {
    mono: StrictlyMonotonic,
}

impl SystemClock {
    /// A clock reading the OS wall clock.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the OS clock
    fn now(&self) -> Timestamp {
        let raw = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        self.mono.next(raw)
    }
}

/// A clock that moves only when told to: for tests and for the simulator's virtual time.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
    mono: StrictlyMonotonic,
}

impl ManualClock {
    /// A manual clock starting at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: AtomicU64::new(start.0),
            mono: StrictlyMonotonic::default(),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(d.as_micros() as u64, Ordering::AcqRel);
    }

    /// Sets the source time. Setting it backwards does not make reads go backwards: they keep
    /// advancing one microsecond per read until the source passes the last value returned.
    pub fn set(&self, t: Timestamp) {
        self.now.store(t.0, Ordering::Release);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        self.mono.next(self.now.load(Ordering::Acquire))
    }
}

/// Another clock seen through a fixed offset (skew) and a rate error (drift).
///
/// Reads are `base + offset + (base - anchor) * drift_ppm / 1e6`, where `anchor` is the base
/// time when the clock was created (or last re-anchored), then made strictly monotonic.
/// Offset and drift can be changed at run time, which models clock jumps.
#[derive(Debug)]
pub struct SkewedClock<C: Clock> {
    base: C,
    error: Mutex<ClockError>,
    mono: StrictlyMonotonic,
}

#[derive(Debug, Clone, Copy)]
struct ClockError {
    anchor: u64,
    offset_us: i64,
    drift_ppm: f64,
}

impl<C: Clock> SkewedClock<C> {
    /// Wraps `base` with an offset in microseconds (may be negative) and a drift in ppm.
    pub fn new(base: C, offset_us: i64, drift_ppm: f64) -> Self {
        let anchor = base.now().0;
        Self {
            base,
            error: Mutex::new(ClockError {
                anchor,
                offset_us,
                drift_ppm,
            }),
            mono: StrictlyMonotonic::default(),
        }
    }

    /// Changes the offset; a positive change is a forward clock jump.
    pub fn set_offset(&self, offset_us: i64) {
        self.error.lock().offset_us = offset_us;
    }

    /// Changes the drift, re-anchoring so time accumulated so far is kept.
    pub fn set_drift(&self, drift_ppm: f64) {
        let base = self.base.now().0;
        let mut e = self.error.lock();
        let accumulated = Self::drift_error(*e, base);
        e.offset_us = e.offset_us.saturating_add(accumulated);
        e.anchor = base;
        e.drift_ppm = drift_ppm;
    }

    fn drift_error(e: ClockError, base: u64) -> i64 {
        (base.saturating_sub(e.anchor) as f64 * e.drift_ppm / 1e6) as i64
    }
}

impl<C: Clock> Clock for SkewedClock<C> {
    fn now(&self) -> Timestamp {
        let base = self.base.now().0;
        let e = *self.error.lock();
        let raw = (base as i64)
            .saturating_add(e.offset_us)
            .saturating_add(Self::drift_error(e, base))
            .max(0) as u64;
        self.mono.next(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_strictly_monotonic() {
        let c = SystemClock::new();
        let mut last = c.now();
        for _ in 0..10_000 {
            let t = c.now();
            assert!(t > last, "{t} after {last}");
            last = t;
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told_and_never_repeats() {
        let c = ManualClock::new(Timestamp(1_000));
        assert_eq!(c.now(), Timestamp(1_000));
        assert_eq!(c.now(), Timestamp(1_001), "a stalled source still advances");
        c.advance(Duration::from_millis(1));
        assert_eq!(c.now(), Timestamp(2_000));
        c.set(Timestamp(10));
        assert_eq!(c.now(), Timestamp(2_001), "a backwards step never shows");
    }

    /// Every read of a manual clock advances it by at least a microsecond, so exact figures
    /// drift by a few microseconds per read; compare within that.
    fn assert_near(got: Timestamp, want: u64) {
        assert!(got.0.abs_diff(want) <= 3, "got {got}, want about {want}µs");
    }

    #[test]
    fn skew_offsets_and_drift_accumulates() {
        let base = Arc::new(ManualClock::new(Timestamp(1_000_000)));
        let c = SkewedClock::new(base.clone(), -500, 100.0);
        assert_near(c.now(), 999_500);
        base.advance(Duration::from_secs(10));
        // 10 s at +100 ppm gains 1 ms.
        assert_near(c.now(), 11_000_000 - 500 + 1_000);
        c.set_drift(0.0);
        base.advance(Duration::from_secs(10));
        // The drift gained so far is kept when the drift changes; no more is gained.
        assert_near(c.now(), 21_000_000 - 500 + 1_000);
    }

    #[test]
    fn a_forward_jump_then_back_never_goes_backwards() {
        let base = Arc::new(ManualClock::new(Timestamp(1_000)));
        let c = SkewedClock::new(base.clone(), 0, 0.0);
        let before = c.now();
        c.set_offset(1_000_000);
        let jumped = c.now();
        assert!(jumped.0 >= before.0 + 1_000_000);
        c.set_offset(0);
        assert!(c.now() > jumped);
    }

    #[test]
    fn timestamp_arithmetic_saturates() {
        assert_eq!(
            Timestamp::MAX.saturating_add(Duration::from_secs(1)),
            Timestamp::MAX
        );
        assert_eq!(
            Timestamp(5).saturating_sub(Duration::from_secs(1)),
            Timestamp::MIN
        );
        assert_eq!(
            Timestamp(3_000).duration_since(Timestamp(1_000)),
            Duration::from_millis(2)
        );
    }
}
