//! The timestamp oracle of the conventional-SI baseline (spec §4), as pure state: strictly
//! increasing timestamps in ranges, an upper bound persisted ahead of what is served, and a
//! token-bucket capacity.
//!
//! Timestamps share the µs space of Clock-SI's (the physical part is the oracle's clock in
//! µs; the logical part is the increment past the last timestamp served), so both sources
//! stamp versions in one engine and one garbage-collection watermark applies to both. The
//! spec's `physical_ms << 18 | logical` encoding would put TSO versions 262× above every
//! clock-stamped one. The oracle serves up to 10⁶ timestamps per second of its clock before it
//! runs ahead of it (Percolator's batched oracle reports 2 × 10⁶/s; the paper's 64 000/s).
//!
//! Guarantees: every granted range lies above every range granted before, also across a
//! restart from the persisted bound ([`TsoServer::recover`]); a range is only granted once
//! the bound covering it is persisted ([`Grant::persist`] must be written first).

/// How far ahead of what it served the oracle persists its bound (spec: 3 s).
pub const BOUND_AHEAD_US: u64 = 3_000_000;

/// A granted range, and the bound to persist (durably) before answering, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The first timestamp; the range is `first .. first + count`.
    pub first: u64,
    /// How many.
    pub count: u32,
    /// A new bound that must be durable before the range is handed out.
    pub persist: Option<u64>,
}

/// The oracle's state. See the module docs.
#[derive(Debug, Clone)]
pub struct TsoServer {
    last: u64,
    bound: u64,
    /// Token bucket: the earliest µs at which the next RPC may be served (`None`: no limit).
    interval_us: Option<f64>,
    next_free_us: f64,
}

impl TsoServer {
    /// An oracle restarting after `persisted_bound` (0 for a fresh one): it never serves a
    /// timestamp at or below it. `max_rate`: RPCs per second, `None` for no limit.
    pub fn recover(persisted_bound: u64, max_rate: Option<u32>) -> TsoServer {
        TsoServer {
            last: persisted_bound,
            bound: persisted_bound,
            interval_us: max_rate.filter(|&r| r > 0).map(|r| 1e6 / f64::from(r)),
            next_free_us: 0.0,
        }
    }

    /// Changes the capacity (a bucket's `tso_max_rate` was edited).
    pub fn set_max_rate(&mut self, max_rate: Option<u32>) {
        self.interval_us = max_rate.filter(|&r| r > 0).map(|r| 1e6 / f64::from(r));
    }

    /// When an RPC arriving at `now_us` is served (the token bucket, one token per RPC whatever
    /// its count, serving RPCs in arrival order): `now_us` without a limit.
    pub fn admit(&mut self, now_us: u64) -> u64 {
        let Some(iv) = self.interval_us else {
            return now_us;
        };
        let at = self.next_free_us.max(now_us as f64);
        self.next_free_us = at + iv;
        at.ceil() as u64
    }

    /// Grants `count` (at least 1) timestamps at `now_us`.
    pub fn grant(&mut self, now_us: u64, count: u32) -> Grant {
        let count = count.max(1);
        let first = (self.last + 1).max(now_us);
        self.last = first + u64::from(count) - 1;
        let persist = if self.last >= self.bound {
            self.bound = self.last + BOUND_AHEAD_US;
            Some(self.bound)
        } else {
            None
        };
        Grant {
            first,
            count,
            persist,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_increase_and_the_bound_runs_ahead() {
        let mut t = TsoServer::recover(0, None);
        let a = t.grant(1_000, 1);
        assert_eq!((a.first, a.count), (1_000, 1));
        assert_eq!(a.persist, Some(1_000 + BOUND_AHEAD_US));
        let b = t.grant(900, 5);
        assert_eq!(
            b.first, 1_001,
            "never below what was served, whatever the clock"
        );
        assert_eq!(b.persist, None, "inside the persisted bound");
        let c = t.grant(5_000_000, 1);
        assert!(c.persist.is_some());
    }

    #[test]
    fn a_restart_starts_above_the_persisted_bound() {
        let mut t = TsoServer::recover(0, None);
        let g = t.grant(10, 100);
        let bound = g.persist.unwrap();
        let mut after = TsoServer::recover(bound, None);
        assert!(after.grant(0, 1).first > bound);
    }

    #[test]
    fn the_token_bucket_spaces_rpcs() {
        let mut t = TsoServer::recover(0, Some(1_000)); // one RPC per ms
        assert_eq!(t.admit(0), 0);
        assert_eq!(t.admit(0), 1_000);
        assert_eq!(t.admit(0), 2_000);
        assert_eq!(t.admit(10_000), 10_000, "an idle oracle serves at once");
        let mut free = TsoServer::recover(0, None);
        assert_eq!(free.admit(7), 7);
    }

    proptest::proptest! {
        #[test]
        fn grants_never_overlap(reqs in proptest::collection::vec((0u64..10_000_000, 1u32..100), 1..100)) {
            let mut t = TsoServer::recover(0, None);
            let mut next = 0;
            for (now, n) in reqs {
                let g = t.grant(now, n);
                proptest::prop_assert!(g.first >= next);
                next = g.first + u64::from(g.count);
            }
        }
    }
}
