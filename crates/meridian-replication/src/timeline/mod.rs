//! The **timeline** protocol (spec `timeline.md`; PNUTS' per-record master). Its node side —
//! routing to masters, the master's write path, propagation, catch-up, forced re-master — is
//! [`protocol`], its wire messages [`messages`]; the rest of this module and [`TlStore`] are
//! its pure core and record store.
//!
//! Timeline consistency's pure core: the
//! record state ([`Record`], [`Version`]), the merge rule every replica applies, the master's
//! version assignment, the migration rule and the forced re-master, plus the bucket
//! properties they read ([`TimelineProps`]).
//!
//! No I/O, no clock reads (`now_us` is passed in), no randomness: the protocol built on this
//! module (write path §3, propagation §4, inserts §5, failure handling §7) supplies the inputs
//! and does the locking, logging and messaging.
//!
//! Guarantees (each function states its own in detail):
//! - [`merge`] keeps the record with the larger version, so applying any set of records in
//!   any order, with duplicates, ends at the one with the largest version; it never moves a
//!   replica backwards, and it reports two different records with one version as a
//!   [`Merge::Fork`] instead of choosing silently;
//! - every record [`master_write`] or [`force_remaster`] returns has a version strictly
//!   greater than the current one, whatever `now_us` says (a clock behind the record's
//!   generation included), so a master issues strictly increasing versions;
//! - mastership moves ([`decide_migration`]) iff the last T writes, this one included, all
//!   came from one DC other than the master's, and then to the first up replica of the key in
//!   that DC, in claim order ([`new_master_in`]); the move is part of the written record;
//! - a non-master never writes: [`master_write`] refuses with the master to forward to.
//!
//! Decisions where the spec leaves room:
//! - the spec's `expect: Option<Version>` plus "`NONE` means insert-if-absent" is [`Expect`]:
//!   `Any` (a plain write or delete), `Version(v)` (test-and-set) or `Absent`
//!   (insert-if-absent: refused only over a *live* record; a tombstone counts as absent);
//! - any write over a tombstone starts a new generation, a delete of a deleted record
//!   included, so the version rule does not depend on the new content;
//! - two records with one version are a duplicate only if they are equal in full (content,
//!   master and `recent`); any difference is a fork, since a version is issued exactly once;
//! - a forced re-master restarts `seq` at 1 in the next master epoch and keeps the content and
//!   `recent`;
//! - the migration rule also applies to the insert (it is the record's first write), which
//!   matters only for T = 1;
//! - counter overflows never wrap: a `seq` that would overflow starts a new generation, a
//!   `mepoch` that would overflow stays at `u32::MAX` and moves to the next generation; the generation
//!   itself saturates (it counts microseconds: 584 000 years).

pub mod messages;
pub mod protocol;
mod record;
mod store;

pub use messages::{GroupItem, TimelineMsg};
pub(crate) use protocol::Timeline;
pub use protocol::{
    GroupOutcome, MAX_GROUP_ITEMS, ReadMode, TimelineStats, TlIssueKind, TlObserver, TlReadResult,
    TlTrace, TlWriteResult, WriteId,
};
pub use record::{
    Content, DecodeError, ParseVersionError, RECORD_FORMAT, Record, ReplicaRef, Version,
    decode_record, decode_record_shared, encode_record,
};
pub use store::{RecordPage, TIMELINE_PREFIX, TlStore, record_key};

use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Default `migration_threshold` (T): the master moves after 3 consecutive writes from one
/// foreign DC.
pub const DEFAULT_MIGRATION_THRESHOLD: u32 = 3;

/// The largest `migration_threshold` [`TimelineProps::validate`] accepts: every record
/// carries up to T DC ids.
pub const MAX_MIGRATION_THRESHOLD: u32 = 64;

/// Default `timeline_w`: the master's own write only, as in the study.
pub const DEFAULT_TIMELINE_W: u32 = 1;

/// Default `master_timeout_ms`: how long a request waits for the master before it fails
/// with `master_unavailable`.
pub const DEFAULT_MASTER_TIMEOUT_MS: u64 = 10_000;

/// Who becomes the master of a newly inserted record (§5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InitialMaster {
    /// The insert arbiter itself (the study's behaviour).
    #[default]
    InsertArbiter,
    /// The first up replica of the key in the inserter's DC (the arbiter if there is none).
    InserterDc,
}

/// Where `read_latest` is sent (§9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadLatestFanout {
    /// To the master only.
    #[default]
    Master,
    /// To all N replicas, completing on the first reply from the replica that is master per
    /// its own metadata (the study fork's behaviour).
    All,
}

/// The timeline properties of a bucket (§1), with the spec's defaults. Deserializes from a
/// table with any subset of the keys (`migration_threshold = 5`,
/// `initial_master = "inserter_dc"`, ...); unknown keys are left to the enclosing table to
/// refuse, so this struct can be flattened into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineProps {
    /// T: how many consecutive writes from one foreign DC move the master there; 0 disables
    /// migration. Default 3.
    pub migration_threshold: u32,
    /// Replica acks a write waits for, the master's included. Default 1.
    pub timeline_w: u32,
    /// Who masters a newly inserted record. Default `insert_arbiter`.
    pub initial_master: InitialMaster,
    /// How long a request waits for the master, milliseconds. Default 10 000.
    pub master_timeout_ms: u64,
    /// Where `read_latest` goes. Default `master`.
    pub read_latest_fanout: ReadLatestFanout,
    /// Whether a record whose master the failure detector marks down is taken over by a
    /// successor (the first up replica of the master's DC, else of any DC), and an absent
    /// record's inserts go to the first up replica, while the node deciding sees a majority
    /// of the cluster's members up; a master that sees no majority then refuses writes.
    /// Default false (the spec's behaviour: the operator forces a re-master).
    pub failover: bool,
}

impl Default for TimelineProps {
    fn default() -> TimelineProps {
        TimelineProps {
            migration_threshold: DEFAULT_MIGRATION_THRESHOLD,
            timeline_w: DEFAULT_TIMELINE_W,
            initial_master: InitialMaster::InsertArbiter,
            master_timeout_ms: DEFAULT_MASTER_TIMEOUT_MS,
            read_latest_fanout: ReadLatestFanout::Master,
            failover: false,
        }
    }
}

/// Why timeline properties were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid timeline properties: {reason}")]
pub struct InvalidTimelineProps {
    /// What is wrong, naming the property.
    pub reason: String,
}

impl TimelineProps {
    /// T as a length.
    pub fn threshold(&self) -> usize {
        self.migration_threshold as usize
    }

    /// Checks the properties for a bucket with `n_val` replicas:
    /// `migration_threshold ≤ MAX_MIGRATION_THRESHOLD`, `1 ≤ timeline_w ≤ n_val`,
    /// `master_timeout_ms > 0`.
    pub fn validate(&self, n_val: u32) -> Result<(), InvalidTimelineProps> {
        let bad = |reason: String| Err(InvalidTimelineProps { reason });
        if self.migration_threshold > MAX_MIGRATION_THRESHOLD {
            return bad(format!(
                "migration_threshold={} exceeds {MAX_MIGRATION_THRESHOLD}",
                self.migration_threshold
            ));
        }
        if self.timeline_w == 0 {
            return bad("timeline_w must be at least 1".into());
        }
        if self.timeline_w > n_val {
            return bad(format!(
                "timeline_w={} exceeds n_val={n_val}",
                self.timeline_w
            ));
        }
        if self.master_timeout_ms == 0 {
            return bad("master_timeout_ms must be positive".into());
        }
        let max = meridian_cluster::quorum::MAX_PROPERTY_MS;
        if self.master_timeout_ms > max {
            return bad(format!(
                "master_timeout_ms={} exceeds the maximum of {max} ms (30 days)",
                self.master_timeout_ms
            ));
        }
        Ok(())
    }
}

/// What a replica does with an incoming record ([`merge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Store the incoming record: it is newer, or there is no local record.
    Apply,
    /// Drop the incoming record: the local one is newer.
    Stale,
    /// Drop the incoming record: a forced re-master raised the local master epoch above the
    /// incoming one (see [`merge`]).
    Fenced,
    /// Nothing to do: the incoming record equals the local one (a retransmission).
    Duplicate,
    /// Same version, different record: two issuers of one version, which is a bug. Keep the
    /// local record; the caller `debug_assert!`s and counts `timeline_forks_total`.
    Fork,
}

impl Merge {
    /// Whether the incoming record is to be stored ([`Merge::Apply`]).
    pub fn applies(self) -> bool {
        self == Merge::Apply
    }
}

/// The merge rule of every apply, catch-up and anti-entropy exchange (§1, §4): keep the record
/// with the larger version in **precedence order** ([`Version::precedence`]: master epoch,
/// then generation, then sequence).
///
/// - no local record, or `incoming` takes precedence: [`Merge::Apply`];
/// - `incoming` is from a lower master epoch than `local`: [`Merge::Fenced`] (a deposed
///   master's record, or a retransmission of one from before the forced re-master; count and
///   log it);
/// - otherwise `incoming` is older: [`Merge::Stale`];
/// - equal versions and equal records: [`Merge::Duplicate`];
/// - equal versions and records that differ in anything (content, master or `recent`):
///   [`Merge::Fork`] (keep local).
///
/// Precedence differs from the spec's plain `(gen, mepoch, seq)` order only between master
/// epochs: the spec's order lets a master cut off by a forced re-master outrank the new master
/// by deleting and re-inserting (a new generation in its old epoch). Along any history that
/// no forced re-master interrupts the epoch never decreases, so both orders agree.
///
/// Taken as "the record kept", this is a max: commutative and associative over records of
/// distinct versions, idempotent, and never lower than the local record.
pub fn merge(local: Option<&Record>, incoming: &Record) -> Merge {
    let Some(local) = local else {
        return Merge::Apply;
    };
    match incoming.ver.precedence().cmp(&local.ver.precedence()) {
        std::cmp::Ordering::Greater => Merge::Apply,
        std::cmp::Ordering::Less if incoming.ver.mepoch < local.ver.mepoch => Merge::Fenced,
        std::cmp::Ordering::Less => Merge::Stale,
        std::cmp::Ordering::Equal if incoming == local => Merge::Duplicate,
        std::cmp::Ordering::Equal => Merge::Fork,
    }
}

/// The version the master issues for a write over `current` at time `now_us` (§1, §3, §5):
///
/// - no record (an insert, at the arbiter): `(now_us, 0, 1)`;
/// - over a tombstone (a re-insert, or a delete of a deleted record): a new generation
///   `(max(now_us, gen + 1), mepoch, 1)`, so it exceeds the old one even when the clock is
///   behind;
/// - otherwise: `(gen, mepoch, seq + 1)` (a new generation as above if `seq` would overflow).
///
/// The result is greater than `current.ver` for every input except a generation of
/// `u64::MAX`, which a microsecond clock does not reach.
pub fn next_version(current: Option<&Record>, now_us: u64) -> Version {
    let new_generation =
        |old: Version| Version::new(now_us.max(old.generation.saturating_add(1)), old.mepoch, 1);
    match current {
        None => Version::new(now_us, 0, 1),
        Some(r) if r.is_tombstone() => new_generation(r.ver),
        Some(r) => match r.ver.seq.checked_add(1) {
            Some(seq) => Version { seq, ..r.ver },
            None => new_generation(r.ver),
        },
    }
}

/// The `recent` list after a write from `origin_dc`: `take(t, [origin_dc] ++ recent)`,
/// newest first. Empty when `t` is 0.
pub fn push_recent(recent: &[DcId], origin_dc: DcId, t: usize) -> Vec<DcId> {
    std::iter::once(origin_dc)
        .chain(recent.iter().copied())
        .take(t)
        .collect()
}

/// The migration rule (§3, §6, the study's `update_master`), given `recent` *after*
/// [`push_recent`] recorded this write: true iff `t > 0`, `recent` holds `t` entries, all of
/// them `origin_dc`, and `origin_dc` is not `master_dc`.
pub fn decide_migration(
    recent_after_push: &[DcId],
    t: usize,
    master_dc: DcId,
    origin_dc: DcId,
) -> bool {
    t > 0
        && recent_after_push.len() == t
        && recent_after_push.iter().all(|&d| d == origin_dc)
        && origin_dc != master_dc
}

/// The replica that takes over mastership in `dc`: the first replica of the key in that DC
/// that `up` says is up, in claim order (`replicas_in_claim_order` is the key's N primaries).
/// `None` if the key has no up replica there.
pub fn new_master_in(
    dc: DcId,
    replicas_in_claim_order: &[ReplicaRef],
    up: impl Fn(NodeId) -> bool,
) -> Option<ReplicaRef> {
    replicas_in_claim_order
        .iter()
        .find(|r| r.dc == dc && up(r.node))
        .copied()
}

/// A write's precondition: the spec's `expect` (§2), with insert-if-absent spelled out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expect {
    /// No precondition: `write` and `delete`.
    #[default]
    Any,
    /// Test-and-set: apply iff the current version is exactly this one (refused over an
    /// absent record).
    Version(Version),
    /// Insert-if-absent (the spec's `v = NONE`): apply iff there is no record or it is a
    /// tombstone.
    Absent,
}

/// One write as the master receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOp {
    /// The new value, or [`Content::Tombstone`] for a delete.
    pub content: Content,
    /// The DC of the coordinator that took the client's request (`d` in §3).
    pub origin_dc: DcId,
    /// The precondition.
    pub expect: Expect,
}

/// Why [`master_write`] did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// This replica is not the record's master (§3 `NotMaster`): forward to `hint`, which
    /// should wait until it has applied `await_ver` (the version that names it master).
    NotMaster {
        /// The master per this replica's record.
        hint: ReplicaRef,
        /// This replica's version of the record.
        await_ver: Version,
    },
    /// Test-and-set found another version (`version_mismatch{current}`); `None`: there is no
    /// record.
    VersionMismatch {
        /// The record's current version.
        current: Option<Version>,
    },
    /// Insert-if-absent found a live record (`already_exists`).
    AlreadyExists {
        /// The live record's version.
        current: Version,
    },
}

impl WriteRefusal {
    /// The spec's code: `not_master`, `version_mismatch` or `already_exists`.
    pub fn code(&self) -> &'static str {
        match self {
            WriteRefusal::NotMaster { .. } => "not_master",
            WriteRefusal::VersionMismatch { .. } => "version_mismatch",
            WriteRefusal::AlreadyExists { .. } => "already_exists",
        }
    }
}

impl fmt::Display for WriteRefusal {
    /// `not_master hint=n3@dc1 await=1700000000000000.0.5`,
    /// `version_mismatch current=1700000000000000.0.5` (or `current=none`),
    /// `already_exists current=1700000000000000.0.5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteRefusal::NotMaster { hint, await_ver } => {
                write!(f, "not_master hint={hint} await={await_ver}")
            }
            WriteRefusal::VersionMismatch { current: Some(v) } => {
                write!(f, "version_mismatch current={v}")
            }
            WriteRefusal::VersionMismatch { current: None } => {
                write!(f, "version_mismatch current=none")
            }
            WriteRefusal::AlreadyExists { current } => {
                write!(f, "already_exists current={current}")
            }
        }
    }
}

impl std::error::Error for WriteRefusal {}

/// The master's (or, for an absent record, the insert arbiter's) decision on a write (§3,
/// §5): the record to apply, log and replicate, or a refusal. The caller holds the key's lock
/// from reading `current` to applying the result.
///
/// - `current` is `Some` and its master is not `me` (compared by node): `NotMaster` with the
///   record's master and version, before any other check;
/// - the precondition fails: `VersionMismatch` (test-and-set) or `AlreadyExists`
///   (insert-if-absent over a live record);
/// - otherwise the new record: `op.content`, [`next_version`] at `now_us`,
///   [`push_recent`] of `op.origin_dc`, and the same master, unless [`decide_migration`]
///   fires and [`new_master_in`] finds an up replica in the origin DC (then that one; with no
///   up replica there, the master stays).
///
/// `current = None` means the record is absent and `me` is the insert arbiter: the new record
/// gets version `(now_us, 0, 1)`, `recent = [origin_dc]` and the master `props.initial_master`
/// names (`inserter_dc`: the first up replica in the origin DC, else `me`); the migration rule
/// then applies as to any write (it fires only for T = 1).
///
/// A migration happened iff `current` is `Some` and the result's master differs from
/// `current.master` (the caller counts `master_migrations_total`).
pub fn master_write(
    current: Option<&Record>,
    op: WriteOp,
    props: &TimelineProps,
    me: ReplicaRef,
    now_us: u64,
    replicas_in_claim_order: &[ReplicaRef],
    up: impl Fn(NodeId) -> bool,
) -> Result<Record, WriteRefusal> {
    if let Some(r) = current
        && r.master.node != me.node
    {
        return Err(WriteRefusal::NotMaster {
            hint: r.master,
            await_ver: r.ver,
        });
    }
    check_expect(op.expect, current)?;
    let t = props.threshold();
    let d = op.origin_dc;
    let (master, recent) = match current {
        Some(r) => (r.master, push_recent(&r.recent, d, t)),
        None => {
            let master = match props.initial_master {
                InitialMaster::InsertArbiter => me,
                InitialMaster::InserterDc => {
                    new_master_in(d, replicas_in_claim_order, &up).unwrap_or(me)
                }
            };
            (master, push_recent(&[], d, t))
        }
    };
    let master = if decide_migration(&recent, t, master.dc, d) {
        new_master_in(d, replicas_in_claim_order, &up).unwrap_or(master)
    } else {
        master
    };
    Ok(Record {
        content: op.content,
        ver: next_version(current, now_us),
        master,
        recent,
    })
}

/// Whether `expect` holds over `current`: `version_mismatch` when a test-and-set finds another
/// version (or no record), `already_exists` when an insert-if-absent finds a live record.
pub fn check_expect(expect: Expect, current: Option<&Record>) -> Result<(), WriteRefusal> {
    match (expect, current) {
        (Expect::Any, _) => Ok(()),
        (Expect::Version(v), Some(r)) if v == r.ver => Ok(()),
        (Expect::Version(_), current) => Err(WriteRefusal::VersionMismatch {
            current: current.map(|r| r.ver),
        }),
        (Expect::Absent, Some(r)) if !r.is_tombstone() => {
            Err(WriteRefusal::AlreadyExists { current: r.ver })
        }
        (Expect::Absent, _) => Ok(()),
    }
}

/// The record a forced re-master writes (§7): `current`'s content and `recent`, `new_master`
/// as master, and version `(gen, mepoch + 1, 1)`: a fresh `seq` in the next master epoch.
/// It is greater than every version of `current`'s generation and master epoch, so it
/// supersedes whatever the old master issued, and that master's later writes in the old
/// epoch lose to it (they are fenced). Should `mepoch` be `u32::MAX`, the version is
/// `(gen + 1, u32::MAX, 1)` instead, which supersedes them too.
///
/// The caller picks `current` as the highest version among the reachable replicas of the new
/// master's DC (§7); reusing an older one could issue a version twice.
pub fn force_remaster(current: &Record, new_master: ReplicaRef) -> Record {
    let old = current.ver;
    let ver = match old.mepoch.checked_add(1) {
        Some(mepoch) => Version::new(old.generation, mepoch, 1),
        None => Version::new(old.generation.saturating_add(1), u32::MAX, 1),
    };
    Record {
        content: current.content.clone(),
        ver,
        master: new_master,
        recent: current.recent.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::record::tests::any_record;
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    fn rr(node: u32, dc: u32) -> ReplicaRef {
        ReplicaRef {
            node: NodeId(node),
            dc: DcId(dc),
        }
    }

    fn val(s: &'static str) -> Content {
        Content::Value(Bytes::from_static(s.as_bytes()))
    }

    fn rec(content: Content, ver: Version, master: ReplicaRef, recent: &[u32]) -> Record {
        Record {
            content,
            ver,
            master,
            recent: recent.iter().copied().map(DcId).collect(),
        }
    }

    fn write(content: Content, dc: u32, expect: Expect) -> WriteOp {
        WriteOp {
            content,
            origin_dc: DcId(dc),
            expect,
        }
    }

    /// Three DCs, two replicas each, in a claim order that interleaves them.
    fn replicas() -> Vec<ReplicaRef> {
        vec![rr(0, 0), rr(1, 1), rr(2, 2), rr(3, 0), rr(4, 1), rr(5, 2)]
    }

    fn all_up(_: NodeId) -> bool {
        true
    }

    const V: fn(u64, u32, u64) -> Version = Version::new;

    #[test]
    fn merge_keeps_the_larger_version_and_flags_forks() {
        let a = rec(val("a"), V(5, 0, 2), rr(0, 0), &[0]);
        let newer = rec(val("b"), V(5, 0, 3), rr(0, 0), &[0, 0]);
        assert_eq!(merge(None, &a), Merge::Apply);
        assert_eq!(merge(Some(&a), &newer), Merge::Apply);
        assert_eq!(merge(Some(&newer), &a), Merge::Stale);
        assert_eq!(merge(Some(&a), &a.clone()), Merge::Duplicate);
        let forked = Record {
            content: val("other"),
            ..a.clone()
        };
        assert_eq!(merge(Some(&a), &forked), Merge::Fork);
        let other_master = Record {
            master: rr(1, 1),
            ..a.clone()
        };
        assert_eq!(merge(Some(&a), &other_master), Merge::Fork);
        assert!(Merge::Apply.applies());
        assert!(!Merge::Fork.applies() && !Merge::Stale.applies() && !Merge::Duplicate.applies());
    }

    #[test]
    fn next_version_within_and_across_generations() {
        assert_eq!(next_version(None, 1_000), V(1_000, 0, 1));
        let live = rec(val("a"), V(1_000, 2, 7), rr(0, 0), &[]);
        assert_eq!(next_version(Some(&live), 5), V(1_000, 2, 8));
        assert_eq!(next_version(Some(&live), 9_999), V(1_000, 2, 8));
        let dead = Record {
            content: Content::Tombstone,
            ..live.clone()
        };
        // Clock ahead: the generation is the clock's.
        assert_eq!(next_version(Some(&dead), 9_999), V(9_999, 2, 1));
        // Clock behind (or equal): the generation still grows.
        assert_eq!(next_version(Some(&dead), 5), V(1_001, 2, 1));
        assert_eq!(next_version(Some(&dead), 1_000), V(1_001, 2, 1));
        // seq overflow opens a new generation rather than wrapping.
        let full = rec(val("a"), V(1_000, 2, u64::MAX), rr(0, 0), &[]);
        assert_eq!(next_version(Some(&full), 5), V(1_001, 2, 1));
    }

    #[test]
    fn recent_keeps_the_last_t_origins_newest_first() {
        let d = |v: &[u32]| v.iter().copied().map(DcId).collect::<Vec<_>>();
        assert_eq!(push_recent(&d(&[1, 2, 0]), DcId(2), 3), d(&[2, 1, 2]));
        assert_eq!(push_recent(&d(&[1]), DcId(2), 3), d(&[2, 1]));
        assert_eq!(push_recent(&d(&[1, 2, 0]), DcId(2), 0), d(&[]));
        assert_eq!(push_recent(&d(&[1, 2, 0, 0, 0]), DcId(2), 2), d(&[2, 1]));
    }

    #[test]
    fn migration_rule() {
        let d = |v: &[u32]| v.iter().copied().map(DcId).collect::<Vec<_>>();
        assert!(decide_migration(&d(&[1, 1, 1]), 3, DcId(0), DcId(1)));
        assert!(
            !decide_migration(&d(&[1, 1, 1]), 3, DcId(1), DcId(1)),
            "home DC"
        );
        assert!(
            !decide_migration(&d(&[1, 1, 0]), 3, DcId(0), DcId(1)),
            "mixed"
        );
        assert!(
            !decide_migration(&d(&[1, 1]), 3, DcId(0), DcId(1)),
            "too few"
        );
        assert!(
            !decide_migration(&d(&[]), 0, DcId(0), DcId(1)),
            "T = 0 disables"
        );
        assert!(decide_migration(&d(&[1]), 1, DcId(0), DcId(1)));
    }

    #[test]
    fn new_master_is_the_first_up_replica_in_the_dc() {
        let reps = replicas();
        assert_eq!(new_master_in(DcId(1), &reps, all_up), Some(rr(1, 1)));
        assert_eq!(
            new_master_in(DcId(1), &reps, |n| n != NodeId(1)),
            Some(rr(4, 1))
        );
        assert_eq!(new_master_in(DcId(1), &reps, |n| n.0 % 3 != 1), None);
        assert_eq!(new_master_in(DcId(7), &reps, all_up), None);
    }

    #[test]
    fn master_migrates_after_t_foreign_writes() {
        let props = TimelineProps::default();
        let reps = replicas();
        let mut r = master_write(
            None,
            write(val("v0"), 0, Expect::Any),
            &props,
            rr(0, 0),
            10,
            &reps,
            all_up,
        )
        .unwrap();
        assert_eq!((r.ver, r.master), (V(10, 0, 1), rr(0, 0)));
        for (i, want_master) in [rr(0, 0), rr(0, 0), rr(4, 1)].into_iter().enumerate() {
            let me = r.master;
            // Node 1 is down: the first up replica in DC 1 is node 4.
            r = master_write(
                Some(&r),
                write(val("v"), 1, Expect::Any),
                &props,
                me,
                20,
                &reps,
                |n| n != NodeId(1),
            )
            .unwrap();
            assert_eq!(r.master, want_master, "after foreign write {}", i + 1);
            assert_eq!(r.ver, V(10, 0, 2 + i as u64));
        }
        assert_eq!(r.recent, vec![DcId(1); 3]);
        // The old master now refuses and points at the new one.
        let refused = master_write(
            Some(&r),
            write(val("x"), 1, Expect::Any),
            &props,
            rr(0, 0),
            30,
            &reps,
            all_up,
        )
        .unwrap_err();
        assert_eq!(
            refused,
            WriteRefusal::NotMaster {
                hint: rr(4, 1),
                await_ver: V(10, 0, 4)
            }
        );
        assert_eq!(refused.to_string(), "not_master hint=n4@dc1 await=10.0.4");
        // No up replica in the origin DC: the master stays.
        let mut s = r.clone();
        for _ in 0..3 {
            s = master_write(
                Some(&s),
                write(val("w"), 2, Expect::Any),
                &props,
                rr(4, 1),
                40,
                &reps,
                |n| n.0 % 3 != 2,
            )
            .unwrap();
        }
        assert_eq!(s.master, rr(4, 1));
    }

    #[test]
    fn t_zero_never_migrates_and_t_one_follows_every_writer() {
        let reps = replicas();
        let off = TimelineProps {
            migration_threshold: 0,
            ..TimelineProps::default()
        };
        let mut r = master_write(
            None,
            write(val("a"), 1, Expect::Any),
            &off,
            rr(0, 0),
            1,
            &reps,
            all_up,
        )
        .unwrap();
        for _ in 0..5 {
            r = master_write(
                Some(&r),
                write(val("a"), 1, Expect::Any),
                &off,
                rr(0, 0),
                1,
                &reps,
                all_up,
            )
            .unwrap();
        }
        assert_eq!((r.master, r.recent.len()), (rr(0, 0), 0));
        let one = TimelineProps {
            migration_threshold: 1,
            ..TimelineProps::default()
        };
        // Even the insert moves the master to the inserter's DC.
        let r = master_write(
            None,
            write(val("a"), 2, Expect::Any),
            &one,
            rr(0, 0),
            1,
            &reps,
            all_up,
        )
        .unwrap();
        assert_eq!(r.master, rr(2, 2));
        let r = master_write(
            Some(&r),
            write(val("a"), 1, Expect::Any),
            &one,
            rr(2, 2),
            1,
            &reps,
            all_up,
        )
        .unwrap();
        assert_eq!(r.master, rr(1, 1));
    }

    #[test]
    fn insert_master_follows_the_policy() {
        let reps = replicas();
        let arbiter = rr(0, 0);
        let insert = write(val("a"), 2, Expect::Absent);
        let r = master_write(
            None,
            insert.clone(),
            &TimelineProps::default(),
            arbiter,
            77,
            &reps,
            all_up,
        )
        .unwrap();
        assert_eq!(r, rec(val("a"), V(77, 0, 1), arbiter, &[2]));
        let dc = TimelineProps {
            initial_master: InitialMaster::InserterDc,
            ..TimelineProps::default()
        };
        let r = master_write(None, insert.clone(), &dc, arbiter, 77, &reps, |n| {
            n != NodeId(2)
        })
        .unwrap();
        assert_eq!(r.master, rr(5, 2));
        let r = master_write(None, insert, &dc, arbiter, 77, &reps, |n| n.0 % 3 != 2).unwrap();
        assert_eq!(r.master, arbiter, "no up replica in the inserter's DC");
    }

    #[test]
    fn test_and_set_and_insert_if_absent() {
        let props = TimelineProps::default();
        let reps = replicas();
        let me = rr(0, 0);
        let mw = |cur: Option<&Record>, op| master_write(cur, op, &props, me, 100, &reps, all_up);
        // TAS on an absent record.
        let e = mw(None, write(val("a"), 0, Expect::Version(V(1, 0, 1)))).unwrap_err();
        assert_eq!(e, WriteRefusal::VersionMismatch { current: None });
        assert_eq!(e.to_string(), "version_mismatch current=none");
        let r = mw(None, write(val("a"), 0, Expect::Absent)).unwrap();
        // Insert-if-absent over a live record.
        let e = mw(Some(&r), write(val("b"), 0, Expect::Absent)).unwrap_err();
        assert_eq!(e, WriteRefusal::AlreadyExists { current: r.ver });
        assert_eq!(e.to_string(), "already_exists current=100.0.1");
        assert_eq!(e.code(), "already_exists");
        // Concurrent TAS with one expected version: the first wins, the rest see its version.
        let won = mw(Some(&r), write(val("b"), 0, Expect::Version(r.ver))).unwrap();
        let e = mw(Some(&won), write(val("c"), 0, Expect::Version(r.ver))).unwrap_err();
        assert_eq!(
            e,
            WriteRefusal::VersionMismatch {
                current: Some(won.ver)
            }
        );
        assert_eq!(e.to_string(), "version_mismatch current=100.0.2");
        // Insert-if-absent over a tombstone re-inserts in a new generation.
        let dead = mw(Some(&won), write(Content::Tombstone, 0, Expect::Any)).unwrap();
        assert_eq!(dead.ver, V(100, 0, 3));
        let again = mw(Some(&dead), write(val("d"), 0, Expect::Absent)).unwrap();
        assert_eq!(again.ver, V(101, 0, 1));
        // The master check comes first: a non-master does not judge the precondition.
        let e = master_write(
            Some(&again),
            write(val("e"), 0, Expect::Absent),
            &props,
            rr(3, 0),
            1,
            &reps,
            all_up,
        )
        .unwrap_err();
        assert_eq!(e.code(), "not_master");
    }

    #[test]
    fn forced_remaster_fences_the_old_master() {
        let props = TimelineProps::default();
        let reps = replicas();
        let r = rec(val("a"), V(50, 0, 9), rr(0, 0), &[0, 1]);
        let forced = force_remaster(&r, rr(1, 1));
        assert_eq!(forced, rec(val("a"), V(50, 1, 1), rr(1, 1), &[0, 1]));
        // The old master, cut off, keeps writing in epoch 0: every such version loses.
        let mut old = r.clone();
        for _ in 0..5 {
            old = master_write(
                Some(&old),
                write(val("lost"), 0, Expect::Any),
                &props,
                rr(0, 0),
                60,
                &reps,
                all_up,
            )
            .unwrap();
            assert_eq!(merge(Some(&forced), &old), Merge::Fenced);
            assert_eq!(merge(Some(&old), &forced), Merge::Apply);
        }
        // Deleting and re-inserting starts a new generation, still in epoch 0: fenced too,
        // though plain version order would rank it above the forced record.
        let deleted = master_write(
            Some(&old),
            write(Content::Tombstone, 0, Expect::Any),
            &props,
            rr(0, 0),
            70,
            &reps,
            all_up,
        )
        .unwrap();
        let reinserted = master_write(
            Some(&deleted),
            write(val("back"), 0, Expect::Any),
            &props,
            rr(0, 0),
            80,
            &reps,
            all_up,
        )
        .unwrap();
        assert!(reinserted.ver > forced.ver);
        assert_eq!(merge(Some(&forced), &reinserted), Merge::Fenced);
        assert_eq!(merge(Some(&reinserted), &forced), Merge::Apply);
        // The new master writes on in epoch 1.
        let next = master_write(
            Some(&forced),
            write(val("b"), 1, Expect::Any),
            &props,
            rr(1, 1),
            60,
            &reps,
            all_up,
        )
        .unwrap();
        assert_eq!(next.ver, V(50, 1, 2));
        // Epoch overflow moves to the next generation.
        let worn = rec(val("a"), V(50, u32::MAX, 9), rr(0, 0), &[]);
        assert_eq!(force_remaster(&worn, rr(1, 1)).ver, V(51, u32::MAX, 1));
    }

    #[test]
    fn props_defaults_serde_and_validation() {
        let p = TimelineProps::default();
        assert_eq!(
            (p.migration_threshold, p.timeline_w, p.master_timeout_ms),
            (3, 1, 10_000)
        );
        assert_eq!(p.initial_master, InitialMaster::InsertArbiter);
        assert_eq!(p.read_latest_fanout, ReadLatestFanout::Master);
        assert_eq!(p.validate(3), Ok(()));
        let parsed: TimelineProps = toml::from_str(
            "migration_threshold = 5\ninitial_master = \"inserter_dc\"\nread_latest_fanout = \"all\"",
        )
        .unwrap();
        assert_eq!(
            parsed,
            TimelineProps {
                migration_threshold: 5,
                initial_master: InitialMaster::InserterDc,
                read_latest_fanout: ReadLatestFanout::All,
                ..TimelineProps::default()
            }
        );
        let text = toml::to_string(&parsed).unwrap();
        assert!(text.contains("initial_master = \"inserter_dc\""), "{text}");
        assert_eq!(toml::from_str::<TimelineProps>(&text).unwrap(), parsed);
        assert!(toml::from_str::<TimelineProps>("initial_master = \"nearest\"").is_err());
        let bad = |p: TimelineProps| p.validate(3).unwrap_err().to_string();
        assert!(
            bad(TimelineProps { timeline_w: 0, ..p }).contains("timeline_w must be at least 1")
        );
        assert!(bad(TimelineProps { timeline_w: 4, ..p }).contains("timeline_w=4 exceeds n_val=3"));
        assert!(
            bad(TimelineProps {
                master_timeout_ms: 0,
                ..p
            })
            .contains("master_timeout_ms")
        );
        assert!(
            bad(TimelineProps {
                master_timeout_ms: u64::MAX,
                ..p
            })
            .contains("exceeds the maximum")
        );
        assert!(
            bad(TimelineProps {
                migration_threshold: 65,
                ..p
            })
            .contains("migration_threshold=65")
        );
        assert_eq!(
            TimelineProps {
                migration_threshold: 0,
                ..p
            }
            .validate(3),
            Ok(())
        );
    }

    // ---- properties ----

    /// A record from a small version space, so equal versions (duplicates, forks) are common.
    fn small_record() -> impl Strategy<Value = Record> {
        (any_record(), 0u64..3, 0u32..2, 1u64..4).prop_map(|(mut r, g, m, s)| {
            r.ver = V(g, m, s);
            r
        })
    }

    /// The record a replica holds after merging `incoming` into `local`.
    fn kept(local: &Record, incoming: &Record) -> Record {
        if merge(Some(local), incoming).applies() {
            incoming.clone()
        } else {
            local.clone()
        }
    }

    /// Records with pairwise distinct versions, in random order.
    fn distinct_records() -> impl Strategy<Value = Vec<Record>> {
        prop::collection::vec(small_record(), 1..8)
            .prop_map(|mut v| {
                v.sort_by_key(|r| r.ver);
                v.dedup_by_key(|r| r.ver);
                v
            })
            .prop_shuffle()
    }

    /// One step of a master-write sequence.
    #[derive(Debug, Clone)]
    enum Step {
        /// A write from a DC: value, delete, test-and-set (right or wrong version) or
        /// insert-if-absent, at a clock moved by `dt` (possibly backwards), with the nodes
        /// of `up_mask` up.
        Write {
            dc: u32,
            kind: u8,
            dt: i64,
            up_mask: u8,
        },
        /// A forced re-master to replica `to` (index into the claim order).
        Remaster { to: usize },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            12 => (0u32..3, 0u8..8, -2_000i64..2_000, any::<u8>())
                .prop_map(|(dc, kind, dt, up_mask)| Step::Write { dc, kind, dt, up_mask }),
            1 => (0usize..6).prop_map(|to| Step::Remaster { to }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn merge_is_a_max(a in small_record(), b in small_record(), c in small_record()) {
            // Idempotent.
            prop_assert_eq!(merge(Some(&a), &a), Merge::Duplicate);
            prop_assert_eq!(kept(&a, &a), a.clone());
            // Never backwards, and the kept version is the max.
            let ab = kept(&a, &b);
            prop_assert_eq!(ab.ver.precedence(), a.ver.precedence().max(b.ver.precedence()));
            prop_assert!(ab.ver.precedence() >= a.ver.precedence());
            // Forks exactly when versions tie and records differ; the local one stays.
            prop_assert_eq!(merge(Some(&a), &b) == Merge::Fork, a.ver == b.ver && a != b);
            if a.ver == b.ver {
                prop_assert_eq!(&ab, &a);
            }
            // Commutative and associative over distinct versions.
            if a.ver != b.ver {
                prop_assert_eq!(&ab, &kept(&b, &a));
            }
            if a.ver != b.ver && b.ver != c.ver && a.ver != c.ver {
                prop_assert_eq!(kept(&ab, &c), kept(&a, &kept(&b, &c)));
            }
        }

        #[test]
        fn any_delivery_order_with_duplicates_converges_to_the_max(
            recs in distinct_records(),
            dups in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut delivered = recs.clone();
            for i in dups {
                delivered.push(i.get(&recs).clone());
            }
            let mut local: Option<Record> = None;
            for r in &delivered {
                let m = merge(local.as_ref(), r);
                prop_assert_ne!(m, Merge::Fork);
                if let Some(l) = &local {
                    prop_assert_eq!(m.applies(), r.ver.precedence() > l.ver.precedence());
                }
                if m.applies() {
                    local = Some(r.clone());
                }
            }
            let max = recs.iter().max_by_key(|r| r.ver.precedence()).unwrap();
            prop_assert_eq!(local.as_ref(), Some(max));
        }

        #[test]
        fn next_version_always_grows(r in any_record(), now in any::<u64>()) {
            prop_assume!(r.ver.generation < u64::MAX);
            let v = next_version(Some(&r), now);
            prop_assert!(v > r.ver);
            if r.is_tombstone() {
                // A re-insert opens a generation beyond the old one, clock behind or not.
                prop_assert_eq!(v.generation, now.max(r.ver.generation + 1));
                prop_assert_eq!((v.mepoch, v.seq), (r.ver.mepoch, 1));
            }
            let f = force_remaster(&r, r.master);
            prop_assert!(f.ver > r.ver);
            prop_assert_eq!(f.ver.seq, 1);
        }

        #[test]
        fn new_master_is_the_first_up_replica_of_the_dc(
            reps in prop::collection::vec((0u32..8, 0u32..3), 0..8),
            up_mask in any::<u8>(),
            dc in 0u32..3,
        ) {
            let reps: Vec<ReplicaRef> = reps.into_iter().map(|(n, d)| rr(n, d)).collect();
            let up = |n: NodeId| up_mask & (1 << n.0) != 0;
            let mut expected = None;
            for r in &reps {
                if r.dc == DcId(dc) && up(r.node) {
                    expected = Some(*r);
                    break;
                }
            }
            prop_assert_eq!(new_master_in(DcId(dc), &reps, up), expected);
        }

        #[test]
        fn master_write_sequences(
            t in 0usize..5,
            policy in prop_oneof![Just(InitialMaster::InsertArbiter), Just(InitialMaster::InserterDc)],
            reps in Just(replicas()).prop_shuffle(),
            first_dc in 0u32..3,
            steps in prop::collection::vec(step(), 1..60),
        ) {
            let props = TimelineProps {
                migration_threshold: t as u32,
                initial_master: policy,
                ..TimelineProps::default()
            };
            let arbiter = reps[0];
            let first_up = |dc: u32, mask: u8| {
                reps.iter().copied().find(|r| r.dc == DcId(dc) && mask & (1 << r.node.0) != 0)
            };
            // Reference model: every write's origin, and who should be master.
            let mut origins = vec![DcId(first_dc)];
            let mut ref_master = match policy {
                InitialMaster::InsertArbiter => arbiter,
                InitialMaster::InserterDc => first_up(first_dc, 0xff).unwrap(),
            };
            if t == 1 && ref_master.dc != DcId(first_dc) {
                ref_master = first_up(first_dc, 0xff).unwrap();
            }
            let mut now: u64 = 1_000_000;
            let mut r = master_write(
                None,
                write(val("v0"), first_dc, Expect::Any),
                &props,
                arbiter,
                now,
                &reps,
                all_up,
            )
            .unwrap();
            prop_assert_eq!(r.master, ref_master);
            for s in steps {
                let before = r.clone();
                match s {
                    Step::Remaster { to } => {
                        r = force_remaster(&r, reps[to]);
                        ref_master = reps[to];
                    }
                    Step::Write { dc, kind, dt, up_mask } => {
                        now = now.saturating_add_signed(dt);
                        let up = |n: NodeId| up_mask & (1 << n.0) != 0;
                        let (content, expect) = match kind {
                            0 => (Content::Tombstone, Expect::Any),
                            1 => (val("tas"), Expect::Version(r.ver)),
                            2 => (val("tas"), Expect::Version(V(r.ver.generation, r.ver.mepoch, r.ver.seq + 1))),
                            3 => (val("ins"), Expect::Absent),
                            _ => (val("w"), Expect::Any),
                        };
                        let op = write(content, dc, expect);
                        // A non-master refuses and points at the master.
                        let other = reps.iter().copied().find(|x| x.node != r.master.node).unwrap();
                        prop_assert_eq!(
                            master_write(Some(&r), op.clone(), &props, other, now, &reps, up),
                            Err(WriteRefusal::NotMaster { hint: r.master, await_ver: r.ver })
                        );
                        let res = master_write(Some(&r), op, &props, r.master, now, &reps, up);
                        match (kind, res) {
                            (2, res) => {
                                prop_assert_eq!(res, Err(WriteRefusal::VersionMismatch { current: Some(r.ver) }));
                                continue;
                            }
                            (3, Err(e)) => {
                                prop_assert!(!r.is_tombstone());
                                prop_assert_eq!(e, WriteRefusal::AlreadyExists { current: r.ver });
                                continue;
                            }
                            (_, res) => {
                                prop_assert!(kind != 3 || r.is_tombstone());
                                r = res.unwrap();
                            }
                        }
                        origins.push(DcId(dc));
                        let last_t = &origins[origins.len().saturating_sub(t)..];
                        if t > 0
                            && last_t.len() == t
                            && last_t.iter().all(|&x| x == DcId(dc))
                            && DcId(dc) != ref_master.dc
                            && let Some(m) = first_up(dc, up_mask)
                        {
                            ref_master = m;
                        }
                        // Same generation unless the write re-inserted over a tombstone.
                        if before.is_tombstone() {
                            prop_assert!(r.ver.generation > before.ver.generation);
                            prop_assert_eq!(r.ver.seq, 1);
                        } else {
                            prop_assert_eq!(r.ver, V(before.ver.generation, before.ver.mepoch, before.ver.seq + 1));
                        }
                    }
                }
                prop_assert!(r.ver > before.ver, "{} then {}", before.ver, r.ver);
                prop_assert_eq!(merge(Some(&before), &r), Merge::Apply);
                prop_assert_eq!(r.master, ref_master);
                let newest_first: Vec<DcId> = origins.iter().rev().take(t).copied().collect();
                prop_assert_eq!(&r.recent, &newest_first);
            }
        }

        #[test]
        fn migration_decision_matches_history(
            t in 0usize..5,
            history in prop::collection::vec(0u32..3, 0..10),
            master_dc in 0u32..3,
        ) {
            // Build `recent` by pushing the history one write at a time.
            let mut recent = Vec::new();
            for &d in &history {
                recent = push_recent(&recent, DcId(d), t);
            }
            prop_assert!(recent.len() <= t);
            if let Some(&origin) = history.last() {
                let tail = &history[history.len().saturating_sub(t)..];
                let expected = t > 0
                    && tail.len() == t
                    && tail.iter().all(|&d| d == origin)
                    && origin != master_dc;
                prop_assert_eq!(
                    decide_migration(&recent, t, DcId(master_dc), DcId(origin)),
                    expected
                );
            }
        }
    }
}
