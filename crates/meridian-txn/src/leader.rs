//! The rules a partition leader applies, as pure functions over its clock and its marks
//! (spec §2 and §4): the strictly monotonic leader clock with the backward-step refusal, the
//! two read-wait rules (R1 clock skew, R2 pending commits), and first-committer-wins
//! certification.
//!
//! The serving code (in `meridian-replication`'s `txn` module) holds each key's mark under
//! the key's stripe lock while it checks, reads and installs, so a prepare can never slip
//! between a read's R2 check and its engine read: that is this design's form of Antidote's
//! two-step prepare stamp, and why a transaction is never `Committing` in a state a reader
//! can observe (a commit installs its versions and clears its marks in one critical section).
//!
//! [`Controls`] switch rules off for the negative controls of the test suite; production code
//! never sets them.

use crate::types::{Abort, Result, TimestampSource, TxId, TxnError};
use meridian_core::Timestamp;

/// A leader's clock: `tick` is the spec's `clock_P()` — `max(last + 1, now)`, strictly
/// increasing — and every timestamp issued or observed raises `last`. A raw clock more than
/// `max_backstep` below the highest raw value seen is refused with `ClockWentBackward`.
#[derive(Debug, Clone)]
pub struct LeaderClock {
    last: u64,
    high_raw: u64,
    max_backstep: u64,
}

impl LeaderClock {
    /// A clock that refuses backward steps larger than `max_backstep_us`.
    pub fn new(max_backstep_us: u64) -> LeaderClock {
        LeaderClock {
            last: 0,
            high_raw: 0,
            max_backstep: max_backstep_us,
        }
    }

    fn check(&mut self, raw: Timestamp) -> Result<()> {
        if raw.0.saturating_add(self.max_backstep) < self.high_raw {
            return Err(TxnError::ClockWentBackward {
                by_us: self.high_raw - raw.0,
            });
        }
        self.high_raw = self.high_raw.max(raw.0);
        Ok(())
    }

    /// Issues a timestamp: greater than every timestamp issued or observed before.
    pub fn tick(&mut self, raw: Timestamp) -> Result<Timestamp> {
        self.check(raw)?;
        self.last = (self.last + 1).max(raw.0);
        Ok(Timestamp(self.last))
    }

    /// The clock's reading without issuing: `max(last, now)`. Every later `tick` is greater.
    pub fn read(&mut self, raw: Timestamp) -> Result<Timestamp> {
        self.check(raw)?;
        self.last = self.last.max(raw.0);
        Ok(Timestamp(self.last))
    }

    /// Makes every later timestamp greater than `ts` (a commit timestamp decided elsewhere,
    /// so this leader's later commits order after it).
    pub fn observe(&mut self, ts: Timestamp) {
        self.last = self.last.max(ts.0);
    }
}

/// A pending transaction's hold on one key at its leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The transaction.
    pub txid: TxId,
    /// Its prepare timestamp at this leader (Clock-SI; under TSO the prepare time is unused).
    pub prepare_ts: Timestamp,
    /// Its snapshot (what TSO's R2 compares).
    pub snap: Timestamp,
    /// A watched key: certified and held against other writers, but nothing is installed,
    /// so readers never wait on it.
    pub watch_only: bool,
}

/// Rules the negative controls switch off (all `false` in production).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Controls {
    /// Skip R1 (reads do not wait for the leader's clock to pass the snapshot).
    pub no_r1: bool,
    /// Skip R2 (reads do not wait for prepared transactions).
    pub no_r2: bool,
    /// Skip certification (every writer commits: lost updates).
    pub no_certify: bool,
    /// A single-partition commit takes its timestamp before it holds its keys, then installs
    /// later (the race the spec's "timestamp after the marks are visible" rule closes).
    pub early_commit_ts: bool,
    /// A key move's destination raises its clock only past the key's last commit (the
    /// spec's `max commit_ts + 1`), not to the source's export timestamp, and the source
    /// keeps serving reads above it (see `moves`).
    pub move_commit_ts_only: bool,
}

/// What a read must do before it reads a key at `snap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadCheck {
    /// Read now.
    Ready,
    /// R1: wait until the leader's clock passes the snapshot.
    WaitClock,
    /// R2: wait until this transaction commits or aborts.
    WaitFor(TxId),
}

/// R1: whether a read at `snap` may proceed at a leader whose clock reads `clock` (Clock-SI
/// only; the oracle's snapshots need no clock wait).
pub fn r1_passed(source: TimestampSource, clock: Timestamp, snap: Timestamp, c: Controls) -> bool {
    c.no_r1 || source == TimestampSource::Tso || clock > snap
}

/// R2: whether a read at `snap` by `reader` must wait for the key's mark.
///
/// Clock-SI: wait iff the mark's prepare timestamp is below the snapshot (a commit timestamp
/// is at least every prepare timestamp, so a mark at or above the snapshot is invisible
/// whatever happens). TSO: wait iff the writer's snapshot is below the reader's (Percolator:
/// its commit timestamp will be above its snapshot, and may be below ours).
pub fn r2_check(
    source: TimestampSource,
    mark: Option<&Mark>,
    snap: Timestamp,
    reader: Option<TxId>,
    c: Controls,
) -> ReadCheck {
    let Some(m) = mark else {
        return ReadCheck::Ready;
    };
    if c.no_r2 || m.watch_only || Some(m.txid) == reader {
        return ReadCheck::Ready;
    }
    let wait = match source {
        TimestampSource::ClockSi => m.prepare_ts < snap,
        TimestampSource::Tso => m.snap < snap,
    };
    if wait {
        ReadCheck::WaitFor(m.txid)
    } else {
        ReadCheck::Ready
    }
}

/// First committer wins, no wait: `txid` (snapshot `snap`) may write or watch `key` iff no
/// version committed at or after its snapshot and no other transaction holds the key.
pub fn certify(
    key: &[u8],
    mark: Option<&Mark>,
    last_commit: Option<Timestamp>,
    snap: Timestamp,
    txid: TxId,
    c: Controls,
) -> Result<(), Abort> {
    if c.no_certify {
        return Ok(());
    }
    if last_commit.is_some_and(|t| t >= snap) {
        return Err(Abort::WwConflict(key.to_vec()));
    }
    if mark.is_some_and(|m| m.txid != txid) {
        return Err(Abort::PreparedConflict(key.to_vec()));
    }
    Ok(())
}

/// A distributed commit's timestamp: the largest prepare timestamp (the paper's rule).
/// `None` for no votes.
pub fn commit_ts(prepare_ts: impl IntoIterator<Item = Timestamp>) -> Option<Timestamp> {
    prepare_ts.into_iter().max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_core::NodeId;

    const SI: TimestampSource = TimestampSource::ClockSi;
    const OFF: Controls = Controls {
        no_r1: false,
        no_r2: false,
        no_certify: false,
        early_commit_ts: false,
        move_commit_ts_only: false,
    };

    fn tx(n: u64) -> TxId {
        TxId {
            coord: NodeId(1),
            seq: n,
        }
    }

    fn mark(prepare: u64, snap: u64) -> Mark {
        Mark {
            txid: tx(9),
            prepare_ts: Timestamp(prepare),
            snap: Timestamp(snap),
            watch_only: false,
        }
    }

    #[test]
    fn r1_blocks_until_the_clock_passes_the_snapshot() {
        let mut c = LeaderClock::new(1_000);
        let snap = Timestamp(1_000);
        for raw in [10, 500, 999, 1_000] {
            let now = c.read(Timestamp(raw)).unwrap();
            assert!(!r1_passed(SI, now, snap, OFF), "raw {raw}");
        }
        let now = c.read(Timestamp(1_001)).unwrap();
        assert!(r1_passed(SI, now, snap, OFF));
        // Once passed, every timestamp this leader issues is above the snapshot.
        assert!(c.tick(Timestamp(900)).unwrap() > snap);
        // The oracle's snapshots never wait on a clock; the control switches R1 off.
        assert!(r1_passed(TimestampSource::Tso, Timestamp(0), snap, OFF));
        let no_r1 = Controls { no_r1: true, ..OFF };
        assert!(r1_passed(SI, Timestamp(0), snap, no_r1));
    }

    #[test]
    fn r2_waits_iff_the_prepare_is_below_the_snapshot() {
        let snap = Timestamp(100);
        assert_eq!(r2_check(SI, None, snap, None, OFF), ReadCheck::Ready);
        assert_eq!(
            r2_check(SI, Some(&mark(99, 50)), snap, None, OFF),
            ReadCheck::WaitFor(tx(9))
        );
        for p in [100, 101, 5_000] {
            assert_eq!(
                r2_check(SI, Some(&mark(p, 50)), snap, None, OFF),
                ReadCheck::Ready,
                "prepare_ts {p} >= snap never waits"
            );
        }
        // A transaction reads through its own marks; watched keys install nothing.
        assert_eq!(
            r2_check(SI, Some(&mark(1, 1)), snap, Some(tx(9)), OFF),
            ReadCheck::Ready
        );
        let w = Mark {
            watch_only: true,
            ..mark(1, 1)
        };
        assert_eq!(r2_check(SI, Some(&w), snap, None, OFF), ReadCheck::Ready);
        // TSO compares snapshots (Percolator).
        let tso = TimestampSource::Tso;
        assert_eq!(
            r2_check(tso, Some(&mark(500, 99)), snap, None, OFF),
            ReadCheck::WaitFor(tx(9))
        );
        assert_eq!(
            r2_check(tso, Some(&mark(1, 100)), snap, None, OFF),
            ReadCheck::Ready
        );
        let no_r2 = Controls { no_r2: true, ..OFF };
        assert_eq!(
            r2_check(SI, Some(&mark(1, 1)), snap, None, no_r2),
            ReadCheck::Ready
        );
    }

    #[test]
    fn commit_ts_is_the_largest_prepare_and_above_the_snapshot() {
        // Prepares happen after R1-style waits, so each prepare timestamp is above the snapshot.
        let snap = Timestamp(1_000);
        let mut clocks = [
            LeaderClock::new(1_000),
            LeaderClock::new(1_000),
            LeaderClock::new(1_000),
        ];
        let raws = [1_001, 1_700, 1_050];
        let prepared: Vec<Timestamp> = clocks
            .iter_mut()
            .zip(raws)
            .map(|(c, r)| c.tick(Timestamp(r)).unwrap())
            .collect();
        let c = commit_ts(prepared.iter().copied()).unwrap();
        assert_eq!(c, Timestamp(1_700));
        assert!(prepared.iter().all(|&p| p <= c));
        assert!(c > snap);
        assert_eq!(commit_ts(std::iter::empty()), None);
    }

    #[test]
    fn a_prepare_after_a_read_gets_a_later_timestamp() {
        // The race the two-step stamp closes: a reader passed R1 and R2 at `snap`; a prepare
        // that arrives afterwards must not become visible to it. Its timestamp is above the
        // reader's snapshot because the reader's R1 raised the clock past `snap`.
        let mut c = LeaderClock::new(1_000);
        let snap = Timestamp(2_000);
        let now = c.read(Timestamp(2_001)).unwrap();
        assert!(r1_passed(SI, now, snap, OFF));
        assert_eq!(r2_check(SI, None, snap, None, OFF), ReadCheck::Ready);
        // The raw clock steps back a little (within max_backstep) before the prepare.
        let p = c.tick(Timestamp(1_500)).unwrap();
        assert!(
            p > snap,
            "prepare {p:?} must be invisible to the earlier read"
        );
        assert_eq!(
            r2_check(SI, Some(&mark(p.0, 0)), snap, None, OFF),
            ReadCheck::Ready
        );
    }

    #[test]
    fn certification_first_committer_wins_and_does_not_wait() {
        let snap = Timestamp(100);
        assert!(certify(b"k", None, None, snap, tx(1), OFF).is_ok());
        assert!(certify(b"k", None, Some(Timestamp(99)), snap, tx(1), OFF).is_ok());
        assert_eq!(
            certify(b"k", None, Some(Timestamp(100)), snap, tx(1), OFF),
            Err(Abort::WwConflict(b"k".to_vec()))
        );
        // Two overlapping writers: the first holds the key, the second aborts at once.
        let held = mark(150, 100);
        assert_eq!(
            certify(b"k", Some(&held), None, snap, tx(1), OFF),
            Err(Abort::PreparedConflict(b"k".to_vec()))
        );
        assert!(certify(b"k", Some(&held), None, snap, tx(9), OFF).is_ok());
        let off = Controls {
            no_certify: true,
            ..OFF
        };
        assert!(certify(b"k", Some(&held), Some(Timestamp(500)), snap, tx(1), off).is_ok());
    }

    #[test]
    fn a_backward_step_is_refused_until_the_clock_catches_up() {
        let mut c = LeaderClock::new(1_000);
        assert_eq!(c.tick(Timestamp(10_000)).unwrap(), Timestamp(10_000));
        // Within max_backstep: fine, and still strictly increasing.
        assert_eq!(c.tick(Timestamp(9_500)).unwrap(), Timestamp(10_001));
        assert_eq!(
            c.tick(Timestamp(8_000)),
            Err(TxnError::ClockWentBackward { by_us: 2_000 })
        );
        assert!(c.read(Timestamp(8_999)).is_err());
        assert!(c.tick(Timestamp(9_000)).is_ok());
        assert!(c.tick(Timestamp(20_000)).unwrap() == Timestamp(20_000));
    }

    proptest::proptest! {
        #[test]
        fn ticks_strictly_increase(raws in proptest::collection::vec(0u64..1_000_000, 1..200)) {
            let mut c = LeaderClock::new(u64::MAX / 2);
            let mut last = Timestamp(0);
            for r in raws {
                let t = c.tick(Timestamp(r)).unwrap();
                proptest::prop_assert!(t > last);
                last = t;
            }
        }
    }
}
