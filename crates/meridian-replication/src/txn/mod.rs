//! Transactional buckets on the node kernel: the serving side of `meridian-txn`'s Clock-SI
//! and timestamp-oracle protocols (spec `transactions.md`).
//!
//! | part | what | file |
//! |---|---|---|
//! | leader | snapshot reads with the R1/R2 waits, single-partition commit, prepare, commit, abort, and the replay of prepared records after a restart | here |
//! | coordinator | [`Transaction`]: the client's handle — snapshot, reads, buffered writes and watches, commit (one step or two-phase with the decision log), and the resend of logged decisions | `coordinator.rs` |
//! | oracle | the timestamp oracle's RPC and the batched/unbatched clients | `oracle.rs` |
//! | listing | the live keys a leader holds, page by page, for SCAN, KEYS and DBSIZE | `listing.rs` |
//! | moves | cross-node key moves (spec `repartitioning.md` §6): the mover, the source's freeze and export, the destination's install, the planner's feed and rounds | `moves.rs` |
//!
//! **Deployment.** A partition's leader is its first replica in claim order
//! ([`Node::txn_leader`]); its committed versions live only there (`txn_backups = 0`, see the
//! `meridian-txn` crate docs). A transaction's coordinator is the node that serves the client.
//! A key's partition is its hash partition unless the key directory (in the cluster metadata)
//! moved it; a leader admits a key only if its own copy of the directory and its table of
//! keys being moved away say it serves it (`KeyMoving` while it moves, `WrongPartition`
//! once it left), checked under the key's stripe together with the read or certification.
//!
//! **Guarantees.**
//! - Every key's mark is read and changed under that key's stripe lock, together with the
//!   engine read or write it guards, so a reader's R2 check and its read are one step, and a
//!   commit installs its versions and clears its marks in one step (no reader sees a
//!   half-installed transaction).
//! - Prepared records are logged before the vote and removed in the batch that installs or
//!   drops the writes; after a restart every prepared transaction's marks are back before the
//!   node serves a message, and the outcome is asked of its coordinator.
//! - Waits are bounded: a read waits at most `read_wait_max` on a clock or a prepared
//!   transaction, then aborts with `ClockWait` or `PreparedBlocked`.
//! - Garbage collection: each install keeps every version at or above the watermark
//!   (`now − max_txn_duration − 1 s`) and the newest one below it; a read below the watermark
//!   is refused with `SnapshotTooOld`, and a transaction older than `max_txn_duration` aborts
//!   at commit — so no snapshot a live transaction reads is ever collected. The watermark is
//!   computed from the local clock rather than gossiped: clocks that disagree by more than the
//!   1 s slack can refuse old snapshots early, never serve wrong ones.

mod coordinator;
mod listing;
mod moves;
mod oracle;

pub use coordinator::{Transaction, TxnOptions};
pub use moves::MoveReport;

use crate::kernel::{Incoming, Node, Protocol};
use bytes::Bytes;
use meridian_core::{NodeId, PartitionId, Timestamp};
use meridian_storage::WriteBatch;
use meridian_txn::leader::{self, ReadCheck};
use meridian_txn::{
    Abort, Controls, Found, LeaderClock, Mark, MoveTable, Outcome, PreparedRecord, TimestampSource,
    TxId, TxnError, TxnLimits, TxnMsg, TxnStore, Write,
};
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

type Result<T, E = TxnError> = std::result::Result<T, E>;

const STRIPES: usize = 256;
/// The GC watermark's slack beyond `max_txn_duration`.
const WATERMARK_SLACK_US: u64 = 1_000_000;

/// One stripe of the leader's marks, and the waiters of its keys.
#[derive(Debug, Default)]
struct Stripe {
    marks: Mutex<FxHashMap<Bytes, Mark>>,
    changed: Notify,
}

/// A transaction prepared at this leader and not yet decided.
#[derive(Debug)]
struct Prepared {
    rec: PreparedRecord,
    since: Instant,
}

/// Transaction counters of a node (the spec's metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnStats {
    /// Transactions this node coordinated that committed (read-only ones included).
    pub commits: u64,
    /// Transactions this node coordinated that aborted.
    pub aborts: u64,
    /// Reads that waited for a leader's clock (R1), and their total wait in µs.
    pub r1_waits: u64,
    /// Total R1 wait, µs.
    pub r1_wait_us: u64,
    /// Reads that waited for a prepared transaction (R2).
    pub r2_waits: u64,
    /// Total R2 wait, µs.
    pub r2_wait_us: u64,
    /// Oracle RPCs this node sent.
    pub tso_rpcs: u64,
    /// Timestamps those RPCs carried.
    pub tso_timestamps: u64,
    /// Versions garbage-collected at this leader.
    pub versions_collected: u64,
    /// Transactions this node coordinated that committed through two-phase commit (more
    /// than one participant leader, or any update under the oracle).
    pub two_phase_commits: u64,
}

/// Key-move counters of a node (spec `repartitioning.md` §6): the cross-node planner, the
/// moves it ran, and the refusals coordinators met. Apart from [`TxnStats`] so code that
/// builds or sums those (the benchmarks) is unaffected by this feature's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnMoveStats {
    /// Planning rounds of the cross-node planner run here (the claimant plans).
    pub plan_rounds: u64,
    /// Keys this node moved to another partition (as the mover: the planner's node).
    pub keys_moved: u64,
    /// Key moves this node gave up (a step failed or timed out, or a stale `Moving` entry
    /// was cancelled): the keys stayed where they were.
    pub moves_cancelled: u64,
    /// Reads and commits of transactions coordinated here refused with the retryable
    /// `KeyMoving` (a key frozen for a move, or moved since the transaction first touched it).
    pub key_moving_aborts: u64,
    /// `WrongPartition` answers from leaders to transactions coordinated here: this node's
    /// key directory was older than a move (the read waited for it and went again).
    pub wrong_partition: u64,
    /// Moved keys in this node's copy of the key directory (a gauge).
    pub directory_keys: u64,
    /// The epoch of this node's copy of the key directory (a gauge).
    pub directory_epoch: u64,
    /// Whether the cross-node planner is on here ([`Node::set_txn_planner`]).
    pub planner_enabled: bool,
}

#[derive(Debug, Default)]
struct Counters {
    commits: AtomicU64,
    aborts: AtomicU64,
    r1_waits: AtomicU64,
    r1_wait_us: AtomicU64,
    r2_waits: AtomicU64,
    r2_wait_us: AtomicU64,
    tso_rpcs: AtomicU64,
    tso_timestamps: AtomicU64,
    versions_collected: AtomicU64,
    two_phase_commits: AtomicU64,
    plan_rounds: AtomicU64,
    keys_moved: AtomicU64,
    moves_cancelled: AtomicU64,
    key_moving_aborts: AtomicU64,
    wrong_partition: AtomicU64,
}

/// The transaction protocol's state on one node (leader, coordinator and, on one node, the
/// oracle). See the module docs.
#[derive(Debug)]
pub(crate) struct Txn {
    store: TxnStore,
    clock: Mutex<LeaderClock>,
    stripes: Box<[Stripe]>,
    prepared: Mutex<BTreeMap<TxId, Prepared>>,
    /// Transactions this node coordinates that are collecting votes (`Outcome::Active`).
    active: Mutex<BTreeSet<TxId>>,
    seq: AtomicU64,
    limits: TxnLimits,
    controls: Mutex<Controls>,
    counters: Counters,
    oracle: oracle::Oracle,
    /// Keys this leader is moving away, or moved away recently.
    moves: Mutex<MoveTable>,
    /// The planner's feed and, on the node that plans, its state.
    planning: Mutex<moves::Planning>,
}

impl Txn {
    /// The state over the node's engine, with every prepared transaction of its log marked
    /// again (recovery after a restart).
    pub(crate) fn new(
        engine: Arc<dyn meridian_storage::Engine>,
        now: Timestamp,
        limits: TxnLimits,
    ) -> Txn {
        let store = TxnStore::new(engine, now);
        let t = Txn {
            store,
            clock: Mutex::new(LeaderClock::new(limits.max_backstep_us)),
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            prepared: Mutex::new(BTreeMap::new()),
            active: Mutex::new(BTreeSet::new()),
            seq: AtomicU64::new(now.0),
            limits,
            controls: Mutex::new(Controls::default()),
            counters: Counters::default(),
            oracle: oracle::Oracle::default(),
            moves: Mutex::new(MoveTable::new()),
            planning: Mutex::new(moves::Planning::default()),
        };
        match t.store.key_moves() {
            Ok(states) => *t.moves.lock() = MoveTable::restore(states),
            Err(e) => tracing::error!(error = %e, "key move states not recovered"),
        }
        match t.store.prepared() {
            Ok(recs) => {
                for rec in recs {
                    for (k, watch_only) in rec_keys(&rec) {
                        t.stripe(&k).marks.lock().insert(
                            k,
                            Mark {
                                txid: rec.txid,
                                prepare_ts: rec.prepare_ts,
                                snap: rec.snap,
                                watch_only,
                            },
                        );
                    }
                    t.clock.lock().observe(rec.prepare_ts);
                    t.prepared.lock().insert(
                        rec.txid,
                        Prepared {
                            rec,
                            since: Instant::now(),
                        },
                    );
                }
            }
            Err(e) => tracing::error!(error = %e, "prepared transactions not recovered"),
        }
        t
    }

    fn stripe_index(key: &[u8]) -> usize {
        let mut h = rustc_hash::FxBuildHasher.build_hasher();
        h.write(key);
        (h.finish() as usize) % STRIPES
    }

    fn stripe(&self, key: &[u8]) -> &Stripe {
        &self.stripes[Self::stripe_index(key)]
    }

    /// Locks the stripes of `keys` in ascending order (no deadlock between multi-key steps).
    fn lock_stripes<'k>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> (Vec<usize>, Vec<MutexGuard<'_, FxHashMap<Bytes, Mark>>>) {
        let mut idx: Vec<usize> = keys.map(Self::stripe_index).collect();
        idx.sort_unstable();
        idx.dedup();
        let guards = idx.iter().map(|&i| self.stripes[i].marks.lock()).collect();
        (idx, guards)
    }

    fn next_txid(&self, me: NodeId) -> TxId {
        TxId {
            coord: me,
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    fn watermark(&self, now: Timestamp) -> Timestamp {
        Timestamp(
            now.0
                .saturating_sub(self.limits.max_txn_duration_us + WATERMARK_SLACK_US),
        )
    }

    /// Changes the move table with `f` and logs `key`'s resulting state.
    fn change_move<R>(&self, key: &[u8], f: impl FnOnce(&mut MoveTable) -> Result<R>) -> Result<R> {
        let mut m = self.moves.lock();
        let r = f(&mut m)?;
        self.store.log_key_move(key, m.get(key))?;
        Ok(r)
    }

    fn controls(&self) -> Controls {
        *self.controls.lock()
    }
}

/// A prepared record's keys: writes, then watches (`true`).
fn rec_keys(rec: &PreparedRecord) -> impl Iterator<Item = (Bytes, bool)> + '_ {
    rec.writes
        .iter()
        .map(|(k, _)| (k.clone(), false))
        .chain(rec.watches.iter().map(|k| (k.clone(), true)))
}

/// Finds `key`'s guard among stripes locked by [`Txn::lock_stripes`].
fn guard_for<'g, 'a>(
    idx: &[usize],
    guards: &'g mut [MutexGuard<'a, FxHashMap<Bytes, Mark>>],
    key: &[u8],
) -> &'g mut FxHashMap<Bytes, Mark> {
    let i = Txn::stripe_index(key);
    let pos = idx.binary_search(&i).unwrap_or(0);
    &mut guards[pos]
}

impl Node {
    /// The partition of `key` for transactions — the key directory's, else its hash
    /// partition — and that partition's leader, its first replica in claim order.
    pub fn txn_leader(&self, key: &[u8]) -> (PartitionId, NodeId) {
        let v = self.kernel().view.read();
        let layout = &v.meta.layout;
        let p = v
            .meta
            .key_directory
            .partition(key, || layout.ring().partition_of(key));
        let leader = layout.replicas(p).first().copied().unwrap_or(self.id());
        (p, leader)
    }

    /// Whether this leader serves `key`: for a read at `Some(snap)`, or for certification
    /// (`None`). Its table of keys moving away first (it knows before its directory copy
    /// does), then its directory copy. Called under the key's stripe.
    fn txn_admit(&self, key: &[u8], read_at: Option<Timestamp>) -> Result<()> {
        {
            let m = self.txn_state().moves.lock();
            match read_at {
                Some(snap) => m.admit_read(key, snap)?,
                None => m.admit_write(key)?,
            }
        }
        let v = self.kernel().view.read();
        let layout = &v.meta.layout;
        let me = self.id();
        let home = || layout.ring().partition_of(key);
        let mine = |p: PartitionId| layout.replicas(p).first() == Some(&me);
        match read_at {
            Some(_) => {
                meridian_txn::moves::directory_admits_read(&v.meta.key_directory, key, home, mine)
            }
            None => {
                meridian_txn::moves::directory_admits_write(&v.meta.key_directory, key, home, mine)
            }
        }
    }

    /// This node's transaction counters.
    pub fn txn_stats(&self) -> TxnStats {
        let c = &self.txn_state().counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TxnStats {
            commits: l(&c.commits),
            aborts: l(&c.aborts),
            r1_waits: l(&c.r1_waits),
            r1_wait_us: l(&c.r1_wait_us),
            r2_waits: l(&c.r2_waits),
            r2_wait_us: l(&c.r2_wait_us),
            tso_rpcs: l(&c.tso_rpcs),
            tso_timestamps: l(&c.tso_timestamps),
            versions_collected: l(&c.versions_collected),
            two_phase_commits: l(&c.two_phase_commits),
        }
    }

    /// This node's key-move counters and its copy of the key directory.
    pub fn txn_move_stats(&self) -> TxnMoveStats {
        let c = &self.txn_state().counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (directory_keys, directory_epoch) = {
            let v = self.kernel().view.read();
            let dir = &v.meta.key_directory;
            (dir.len() as u64, dir.epoch())
        };
        TxnMoveStats {
            plan_rounds: l(&c.plan_rounds),
            keys_moved: l(&c.keys_moved),
            moves_cancelled: l(&c.moves_cancelled),
            key_moving_aborts: l(&c.key_moving_aborts),
            wrong_partition: l(&c.wrong_partition),
            directory_keys,
            directory_epoch,
            planner_enabled: self.txn_state().planning.lock().enabled(),
        }
    }

    /// Switches protocol rules off, for the negative controls of the test suite only: a node
    /// with any control set does not provide snapshot isolation.
    #[doc(hidden)]
    pub fn set_txn_controls(&self, c: Controls) {
        *self.txn_state().controls.lock() = c;
    }

    /// A version read at this leader as its bucket's truncation mark shows it: committed at
    /// or before the mark, it reads as deleted (module [`crate::truncation`]).
    fn txn_visible(
        &self,
        key: &[u8],
        found: Option<(Timestamp, Option<Bytes>)>,
    ) -> Option<(Timestamp, Option<Bytes>)> {
        match (found, self.kernel().marks.read().mark_for(key)) {
            (Some((ts, Some(_))), Some(mark)) if ts.0 <= mark => Some((ts, None)),
            (found, _) => found,
        }
    }

    /// The leader's clock reading, refusing a clock that went backward.
    fn txn_clock_read(&self) -> Result<Timestamp> {
        let raw = self.kernel().clock.now();
        self.txn_state().clock.lock().read(raw)
    }

    fn txn_clock_tick(&self) -> Result<Timestamp> {
        let raw = self.kernel().clock.now();
        self.txn_state().clock.lock().tick(raw)
    }

    /// R1: waits until this leader's clock passes `snap` (Clock-SI), at most until `deadline`.
    async fn wait_clock_past(&self, snap: Timestamp, deadline: Instant) -> Result<()> {
        let t = self.txn_state();
        let mut waited = None;
        loop {
            let now = self.txn_clock_read()?;
            if leader::r1_passed(TimestampSource::ClockSi, now, snap, t.controls()) {
                if let Some(start) = waited {
                    let us = Instant::now().duration_since(start).as_micros() as u64;
                    t.counters.r1_waits.fetch_add(1, Ordering::Relaxed);
                    t.counters.r1_wait_us.fetch_add(us, Ordering::Relaxed);
                }
                return Ok(());
            }
            waited.get_or_insert_with(Instant::now);
            if Instant::now() >= deadline {
                return Err(Abort::ClockWait(snap.0).into());
            }
            // The clock may drift: sleep the distance, then look again.
            let gap = Duration::from_micros(snap.0 - now.0 + 1);
            tokio::time::sleep_until((Instant::now() + gap).min(deadline)).await;
        }
    }

    /// Serves snapshot reads of keys this node leads (spec §2 `on P, Read`).
    pub(crate) async fn txn_leader_read(
        &self,
        txid: Option<TxId>,
        snap: Timestamp,
        source: TimestampSource,
        keys: &[Bytes],
    ) -> Result<Vec<Found>> {
        let t = self.txn_state();
        let now = self.kernel().clock.now();
        let watermark = t.watermark(now);
        if snap < watermark {
            return Err(TxnError::SnapshotTooOld {
                snap: snap.0,
                watermark: watermark.0,
            });
        }
        let deadline = Instant::now() + Duration::from_micros(t.limits.read_wait_max_us);
        if source == TimestampSource::ClockSi {
            self.wait_clock_past(snap, deadline).await?;
        }
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let stripe = t.stripe(key);
            let mut waited: Option<Instant> = None;
            loop {
                let changed = stripe.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let blocker = {
                    let marks = stripe.marks.lock();
                    match leader::r2_check(source, marks.get(key), snap, txid, t.controls()) {
                        ReadCheck::Ready => {
                            self.txn_admit(key, Some(snap))?;
                            let found = t.store.read_at(key, snap)?;
                            out.push(self.txn_visible(key, found));
                            None
                        }
                        ReadCheck::WaitFor(other) => Some(other),
                        ReadCheck::WaitClock => None,
                    }
                };
                let Some(other) = blocker else {
                    if let Some(start) = waited {
                        let us = Instant::now().duration_since(start).as_micros() as u64;
                        t.counters.r2_waits.fetch_add(1, Ordering::Relaxed);
                        t.counters.r2_wait_us.fetch_add(us, Ordering::Relaxed);
                    }
                    break;
                };
                waited.get_or_insert_with(Instant::now);
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return Err(Abort::PreparedBlocked(other).into());
                }
            }
        }
        Ok(out)
    }

    /// Certifies `writes` and `watches` under the locked stripes.
    fn certify_locked(
        &self,
        idx: &[usize],
        guards: &mut [MutexGuard<'_, FxHashMap<Bytes, Mark>>],
        txid: TxId,
        snap: Timestamp,
        writes: &[Write],
        watches: &[Bytes],
    ) -> Result<()> {
        let t = self.txn_state();
        let c = t.controls();
        for key in writes.iter().map(|(k, _)| k).chain(watches.iter()) {
            // Before certification: a refused key leaves nothing behind.
            self.txn_admit(key, None)?;
            let marks = guard_for(idx, guards, key);
            leader::certify(
                key,
                marks.get(key),
                t.store.last_commit(key)?,
                snap,
                txid,
                c,
            )?;
        }
        Ok(())
    }

    /// Adds `writes` at `ts` (and the collection of versions below the watermark) to `batch`.
    fn install_into(&self, batch: &mut WriteBatch, writes: &[Write], ts: Timestamp) -> Result<()> {
        let t = self.txn_state();
        let watermark = t.watermark(self.kernel().clock.now());
        let mut collected = 0;
        for (k, v) in writes {
            collected += t.store.install(batch, k, ts, v.as_ref(), watermark)?;
        }
        t.counters
            .versions_collected
            .fetch_add(collected as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Clock-SI with one participant (spec §2 `CommitLocal`): certify, timestamp, install.
    pub(crate) async fn txn_commit_local(
        &self,
        txid: TxId,
        snap: Timestamp,
        writes: Vec<Write>,
        watches: Vec<Bytes>,
    ) -> Result<Timestamp> {
        let t = self.txn_state();
        let deadline = Instant::now() + Duration::from_micros(t.limits.read_wait_max_us);
        // The commit timestamp must exceed the snapshot.
        self.wait_clock_past(snap, deadline).await?;
        let keys = || {
            writes
                .iter()
                .map(|(k, _)| &k[..])
                .chain(watches.iter().map(|k| &k[..]))
        };
        if t.controls().early_commit_ts {
            // Negative control: the timestamp is taken before the keys are held, and the
            // versions appear later, after readers above it may have read.
            let ts = self.txn_clock_tick()?;
            tokio::time::sleep(Duration::from_millis(1)).await;
            let (idx, mut guards) = t.lock_stripes(keys());
            self.certify_locked(&idx, &mut guards, txid, snap, &writes, &watches)?;
            let mut batch = WriteBatch::new();
            self.install_into(&mut batch, &writes, ts)?;
            t.store.write(batch)?;
            return Ok(ts);
        }
        let (idx, mut guards) = t.lock_stripes(keys());
        self.certify_locked(&idx, &mut guards, txid, snap, &writes, &watches)?;
        let ts = self.txn_clock_tick()?;
        let mut batch = WriteBatch::new();
        self.install_into(&mut batch, &writes, ts)?;
        t.store.write(batch)?;
        Ok(ts)
    }

    /// Two-phase commit, phase one at this leader: certify, hold the keys, log, vote.
    pub(crate) async fn txn_prepare(
        &self,
        txid: TxId,
        snap: Timestamp,
        source: TimestampSource,
        writes: Vec<Write>,
        watches: Vec<Bytes>,
    ) -> Result<Timestamp> {
        let t = self.txn_state();
        if source == TimestampSource::ClockSi {
            let deadline = Instant::now() + Duration::from_micros(t.limits.read_wait_max_us);
            self.wait_clock_past(snap, deadline).await?;
        }
        if t.prepared.lock().contains_key(&txid) {
            // Coordinators send one prepare per participant: a second one is refused.
            return Err(TxnError::BadRequest(format!("{txid} is already prepared")));
        }
        let keys = writes
            .iter()
            .map(|(k, _)| &k[..])
            .chain(watches.iter().map(|k| &k[..]));
        let (idx, mut guards) = t.lock_stripes(keys);
        self.certify_locked(&idx, &mut guards, txid, snap, &writes, &watches)?;
        let prepare_ts = self.txn_clock_tick()?;
        let rec = PreparedRecord {
            txid,
            snap,
            prepare_ts,
            source,
            writes,
            watches,
        };
        // Logged before the marks are visible and before the vote; the stripes are still held.
        t.store.log_prepared(&rec)?;
        for (k, watch_only) in rec_keys(&rec) {
            let m = guard_for(&idx, &mut guards, &k);
            m.insert(
                k,
                Mark {
                    txid,
                    prepare_ts,
                    snap,
                    watch_only,
                },
            );
        }
        drop(guards);
        t.prepared.lock().insert(
            txid,
            Prepared {
                rec,
                since: Instant::now(),
            },
        );
        Ok(prepare_ts)
    }

    /// Applies an outcome at this leader: install at `ts` (`Some`) or drop (`None`); clears
    /// the marks and wakes their readers. Idempotent: an unknown transaction is a no-op.
    pub(crate) fn txn_finish(&self, txid: TxId, outcome: Option<Timestamp>) -> Result<()> {
        let t = self.txn_state();
        let Some(p) = t.prepared.lock().remove(&txid) else {
            return Ok(());
        };
        let rec = p.rec;
        let keys: Vec<(Bytes, bool)> = rec_keys(&rec).collect();
        let (idx, mut guards) = t.lock_stripes(keys.iter().map(|(k, _)| &k[..]));
        let mut batch = WriteBatch::new();
        if let Some(ts) = outcome {
            self.install_into(&mut batch, &rec.writes, ts)?;
            t.clock.lock().observe(ts);
        }
        t.store.forget_prepared(&mut batch, txid);
        if let Err(e) = t.store.write(batch) {
            // Keep the transaction prepared: the outcome is asked for again later.
            drop(guards);
            t.prepared.lock().insert(
                txid,
                Prepared {
                    rec,
                    since: Instant::now(),
                },
            );
            return Err(e);
        }
        for (k, _) in &keys {
            let m = guard_for(&idx, &mut guards, k);
            if m.get(k).is_some_and(|m| m.txid == txid) {
                m.remove(k);
            }
        }
        drop(guards);
        for &i in &idx {
            t.stripes[i].changed.notify_waiters();
        }
        Ok(())
    }

    /// What this coordinator knows of `txid` (presumed abort).
    fn txn_outcome(&self, txid: TxId) -> Outcome {
        let t = self.txn_state();
        if t.active.lock().contains(&txid) {
            return Outcome::Active;
        }
        match t.store.decision(txid) {
            Ok(Some(d)) => Outcome::Committed(d.commit_ts),
            Ok(None) => Outcome::Aborted,
            // Unknown is not abort: ask again later.
            Err(_) => Outcome::Active,
        }
    }

    /// The participant's side of recovery: every transaction prepared here longer than
    /// `prepare_ttl` asks its coordinator for the outcome; the coordinator's side: logged
    /// decisions are re-sent until every participant acknowledged. Runs until `shutdown`.
    pub(crate) async fn txn_recovery(self, shutdown: CancellationToken) {
        let ttl = Duration::from_micros(self.txn_state().limits.prepare_ttl_us);
        match self.txn_state().store.decisions() {
            Ok(ds) => {
                for d in ds {
                    let node = self.clone();
                    tokio::spawn(async move { node.txn_send_commits(d).await });
                }
            }
            Err(e) => tracing::error!(node = %self.id(), error = %e, "decision log not replayed"),
        }
        let mut tick = self.ticker(ttl / 2, ttl / 2, ttl / 2);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            self.txn_moves_housekeeping().await;
            let stale: Vec<TxId> = {
                let now = Instant::now();
                self.txn_state()
                    .prepared
                    .lock()
                    .iter()
                    .filter(|(_, p)| now.duration_since(p.since) >= ttl)
                    .map(|(id, _)| *id)
                    .collect()
            };
            for txid in stale {
                let outcome = if txid.coord == self.id() {
                    Some(self.txn_outcome(txid))
                } else {
                    match self
                        .kernel()
                        .transport
                        .request(txid.coord, TxnMsg::QueryOutcome { txid }.into(), ttl)
                        .await
                    {
                        Ok(crate::kernel::Msg::Txn(TxnMsg::Outcome(o))) => Some(o),
                        // Unreachable coordinator: stay prepared (2PC blocks).
                        _ => None,
                    }
                };
                let r = match outcome {
                    Some(Outcome::Committed(ts)) => self.txn_finish(txid, Some(ts)),
                    Some(Outcome::Aborted) => self.txn_finish(txid, None),
                    Some(Outcome::Active) | None => Ok(()),
                };
                if let Err(e) = r {
                    tracing::warn!(node = %self.id(), %txid, error = %e, "outcome not applied");
                }
            }
        }
    }
}

impl Node {
    /// The transaction protocol's state (registered with the kernel when the node is built).
    pub(crate) fn txn_state(&self) -> &Txn {
        self.protocol::<Txn>()
    }
}

impl Protocol for Txn {
    type Msg = TxnMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: TxnMsg) {
        match msg {
            TxnMsg::Read {
                txid,
                snap,
                source,
                keys,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.txn_leader_read(txid, snap, source, &keys).await;
                    req.answer(TxnMsg::ReadReply(r));
                });
            }
            TxnMsg::CommitLocal {
                txid,
                snap,
                writes,
                watches,
            } => {
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.txn_commit_local(txid, snap, writes, watches).await;
                    req.answer(TxnMsg::Committed(r));
                });
            }
            TxnMsg::Prepare {
                txid,
                snap,
                source,
                writes,
                watches,
            } => {
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.txn_prepare(txid, snap, source, writes, watches).await;
                    req.answer(TxnMsg::Vote(r));
                });
            }
            TxnMsg::Commit { txid, ts } => match node.txn_finish(txid, Some(ts)) {
                Ok(()) => req.answer(TxnMsg::Ack),
                Err(e) => req.answer(crate::kernel::RemoteError::Storage(e.to_string())),
            },
            TxnMsg::Abort { txid } => match node.txn_finish(txid, None) {
                Ok(()) => req.answer(TxnMsg::Ack),
                Err(e) => req.answer(crate::kernel::RemoteError::Storage(e.to_string())),
            },
            TxnMsg::QueryOutcome { txid } => req.answer(TxnMsg::Outcome(node.txn_outcome(txid))),
            TxnMsg::TsoGet { count, max_rate } => {
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.oracle_serve(count, max_rate).await;
                    req.answer(TxnMsg::TsoRange(r));
                });
            }
            m @ (TxnMsg::MoveOut { .. }
            | TxnMsg::MoveIn { .. }
            | TxnMsg::MoveDone { .. }
            | TxnMsg::MoveCancel { .. }) => {
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.txn_move_step(m).await;
                    req.answer(r);
                });
            }
            TxnMsg::Trace(txns) => node.txn_trace_received(txns),
            TxnMsg::ListKeys {
                after,
                budget,
                partitions,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                // A page of the store is read off the serving task, as a snapshot read is.
                let node = node.clone();
                tokio::spawn(async move {
                    let r = node.txn_list_held(after.as_deref(), budget, &partitions);
                    req.answer(TxnMsg::KeysPage(r));
                });
            }
            other @ (TxnMsg::ReadReply(_)
            | TxnMsg::KeysPage(_)
            | TxnMsg::Committed(_)
            | TxnMsg::Vote(_)
            | TxnMsg::Ack
            | TxnMsg::Outcome(_)
            | TxnMsg::TsoRange(_)
            | TxnMsg::MoveOutReply(_)
            | TxnMsg::Moved(_)) => req.unexpected(node, &other),
        }
    }
}
