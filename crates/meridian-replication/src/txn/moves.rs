//! Cross-node key moves (spec `repartitioning.md` §6) on the node kernel; the rules are
//! `meridian-txn`'s `moves` and `placement` modules.
//!
//! **The mover** ([`Node::txn_move_keys`], any node; the planner's node in production):
//! 1. publishes `Moving{p → q}` for the batch through the claimant (one metadata version);
//! 2. asks each source leader to freeze, drain and export its keys (`MoveOut`), and each
//!    destination leader to install them and raise its clock (`MoveIn`);
//! 3. publishes `At{q}` for the keys that arrived and gives the others up (`Cancel`, the
//!    sources serve them again), then tells the sources (`MoveDone`): they answer
//!    `WrongPartition` and delete the keys after the grace period.
//!
//! A move between partitions with the same leader ships nothing: only the directory changes.
//!
//! **Clock-SI safety.** The source freezes a key under its stripe (so no prepare slips
//! past), waits until its marks drain, and takes the export timestamp under the stripe from
//! its leader clock (from the oracle for a TSO bucket); it refuses reads at or above it from
//! then on, and the destination raises its clock to it before the key is routed there. See
//! `meridian_txn::moves` for why the spec's `max commit_ts + 1` alone is not enough.
//!
//! **The planner** runs on the claimant once enabled ([`Node::set_txn_planner`] on every
//! node): coordinators queue the key sets of their committed transactions and ship them to
//! the claimant each housekeeping tick (`Trace`); every `plan_interval` the claimant plans
//! and runs the moves.

use super::{Result, Txn};
use crate::kernel::{Msg, Node};
use crate::membership::MetaChange;
use bytes::Bytes;
use futures_util::future::join_all;
use meridian_cluster::bucket_and_key;
use meridian_core::{DcId, NodeId, PartitionId, Timestamp};
use meridian_storage::WriteBatch;
use meridian_txn::moves::{MoveOutcome, export_ready, move_outcome};
use meridian_txn::{
    Abort, DirChange, Exported, PartInfo, Placement, Planner, PlannerConfig, TimestampSource,
    TxnError, TxnMsg,
};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// Transactions a coordinator keeps for the planner before shipping; older ones are dropped.
const OUTBOX_MAX: usize = 100_000;

/// The claimant gives up moves whose `Moving` entries stayed this long while the directory
/// did not change (their mover crashed or lost the claimant): a move's steps time out well
/// before, and a frozen key refuses writes until then.
pub(crate) const STALE_MOVE: Duration = Duration::from_secs(60);

/// The planner's feed and, on the claimant, the planner.
#[derive(Debug, Default)]
pub(crate) struct Planning {
    cfg: Option<PlannerConfig>,
    outbox: Vec<(DcId, Vec<Bytes>)>,
    planner: Option<Planner>,
    running: bool,
    /// The directory epoch at which `Moving` entries were first seen unchanged, and when.
    stale_watch: Option<(u64, Instant)>,
}

impl Planning {
    /// Whether the planner is on (this node feeds it, and plans if it is the claimant).
    pub(crate) fn enabled(&self) -> bool {
        self.cfg.is_some()
    }
}

/// What a batch of moves did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoveReport {
    /// Keys now at their destination.
    pub moved: usize,
    /// Keys whose move was given up (they stay where they were).
    pub cancelled: usize,
}

fn step_failed(to: NodeId, what: &str, e: impl std::fmt::Display) -> TxnError {
    Abort::Timeout(format!("move {what} at {to}: {e}")).into()
}

impl Txn {
    /// Per-key grace before a moved-away key's versions are deleted at its source: reads
    /// that passed their checks just before the move ended are long done by then.
    fn move_grace_us(&self) -> u64 {
        self.limits.max_txn_duration_us + self.limits.read_wait_max_us
    }
}

impl Node {
    /// Turns the cross-node planner on (`Some`) or off on this node: every coordinator must
    /// have it on to feed it; the claimant plans.
    pub fn set_txn_planner(&self, cfg: Option<PlannerConfig>) {
        let mut p = self.txn_state().planning.lock();
        p.cfg = cfg;
        p.planner = None;
        p.outbox.clear();
    }

    /// A committed transaction's keys, for the planner (no-op while it is off).
    pub(crate) fn txn_trace(&self, keys: Vec<Bytes>) {
        let mut p = self.txn_state().planning.lock();
        if p.cfg.is_none() || keys.is_empty() {
            return;
        }
        if p.outbox.len() >= OUTBOX_MAX {
            p.outbox.remove(0);
        }
        let dc = self.dc();
        p.outbox.push((dc, keys));
    }

    /// Transactions shipped by a coordinator: into the planner (on the claimant).
    pub(crate) fn txn_trace_received(&self, txns: Vec<(DcId, Vec<Bytes>)>) {
        let mut p = self.txn_state().planning.lock();
        let Some(cfg) = p.cfg else { return };
        let planner = p.planner.get_or_insert_with(|| Planner::with_fennel(cfg));
        for (dc, keys) in &txns {
            planner.record(keys, *dc);
        }
    }

    /// Settles the keys frozen here whose move ended without this leader being told — a
    /// lost `MoveDone` or `MoveCancel`, or a mover that crashed and whose move the claimant
    /// gave up after [`STALE_MOVE`] — by the directory copy (`move_outcome`): otherwise they
    /// would refuse writes, and keep their versions here, for ever.
    fn txn_settle_untold_moves(&self, now_us: u64) {
        let t = self.txn_state();
        let frozen = t.moves.lock().frozen();
        if frozen.is_empty() {
            return;
        }
        let ended: Vec<(Bytes, u64, MoveOutcome)> = {
            let v = self.kernel().view.read();
            let layout = &v.meta.layout;
            let me = self.id();
            frozen
                .into_iter()
                .filter_map(|(k, epoch)| {
                    let outcome = move_outcome(
                        &v.meta.key_directory,
                        &k,
                        epoch,
                        || layout.ring().partition_of(&k),
                        |p| layout.replicas(p).first() == Some(&me),
                    )?;
                    Some((k, epoch, outcome))
                })
                .collect()
        };
        let grace = t.move_grace_us();
        for (k, epoch, outcome) in ended {
            let r = t.change_move(&k, |m| match outcome {
                MoveOutcome::Cancelled => {
                    m.unfreeze(&k, epoch);
                    Ok(())
                }
                MoveOutcome::Left { dir_epoch } => m.moved(&k, epoch, dir_epoch, now_us, grace),
            });
            match r {
                Ok(()) => {
                    tracing::info!(node = %self.id(), ?outcome, "settled a move from the directory")
                }
                // Settled meanwhile by the mover's own message, or frozen again by a newer move.
                Err(e) => tracing::debug!(node = %self.id(), error = %e, "move already settled"),
            }
        }
    }

    /// One housekeeping tick: delete moved-away keys past their grace period, ship the
    /// planner's feed, and on the claimant run a planning round when one is due.
    pub(crate) async fn txn_moves_housekeeping(&self) {
        let t = self.txn_state();
        let now_us = self.kernel().clock.now().0;
        self.txn_settle_untold_moves(now_us);
        let due = t.moves.lock().to_delete(now_us);
        for k in due {
            let _g = t.stripe(&k).marks.lock();
            // The key may have come back since (its install runs under this stripe).
            let still_gone = matches!(
                t.moves.lock().get(&k),
                Some(meridian_txn::KeyMove::Gone { deleted: false, .. })
            );
            if !still_gone {
                continue;
            }
            let mut b = WriteBatch::new();
            let r = t
                .store
                .delete_key(&mut b, &k)
                .and_then(|_| t.store.write(b));
            let r = r.and_then(|()| {
                t.change_move(&k, |m| {
                    m.deleted(&k);
                    Ok(())
                })
            });
            if let Err(e) = r {
                tracing::warn!(node = %self.id(), error = %e, "moved key not deleted");
            }
        }
        let (dir_epoch, claimant) = {
            let v = self.kernel().view.read();
            (v.meta.key_directory.epoch(), v.meta.claimant())
        };
        let settled = t.moves.lock().forget_settled(dir_epoch);
        for k in settled {
            if let Err(e) = t.store.log_key_move(&k, None) {
                tracing::warn!(node = %self.id(), error = %e, "settled move not logged");
            }
        }
        let outbox = std::mem::take(&mut t.planning.lock().outbox);
        if !outbox.is_empty() {
            if claimant == self.id() {
                self.txn_trace_received(outbox);
            } else {
                let _ = self
                    .kernel()
                    .transport
                    .send(claimant, TxnMsg::Trace(outbox).into());
            }
        }
        if claimant == self.id() {
            self.txn_cancel_stale_moves().await;
            let start = {
                let mut p = t.planning.lock();
                let ready = !p.running && p.planner.as_ref().is_some_and(|pl| pl.due(now_us));
                if ready {
                    p.running = true;
                }
                ready
            };
            if start {
                let node = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = node.txn_plan_round().await {
                        tracing::warn!(node = %node.id(), error = %e, "planning round failed");
                    }
                    node.txn_state().planning.lock().running = false;
                });
            }
        }
    }

    /// On the claimant: gives up the moves left `Moving` for [`STALE_MOVE`] with no
    /// directory change (their sources serve the keys again).
    async fn txn_cancel_stale_moves(&self) {
        let (epoch, moving, sources) = {
            let v = self.kernel().view.read();
            let dir = &v.meta.key_directory;
            let mut moving = Vec::new();
            let mut sources: BTreeMap<NodeId, Vec<(Bytes, u64)>> = BTreeMap::new();
            for (k, pl) in dir.iter() {
                if let Placement::Moving { from, epoch, .. } = *pl {
                    moving.push(k.clone());
                    if let Some(&l) = v.meta.layout.replicas(from).first() {
                        sources.entry(l).or_default().push((k.clone(), epoch));
                    }
                }
            }
            (dir.epoch(), moving, sources)
        };
        let stale = {
            let mut p = self.txn_state().planning.lock();
            match p.stale_watch {
                _ if moving.is_empty() => {
                    p.stale_watch = None;
                    false
                }
                Some((e, since)) if e == epoch => {
                    let stale = Instant::now().duration_since(since) >= STALE_MOVE;
                    if stale {
                        p.stale_watch = None;
                    }
                    stale
                }
                _ => {
                    p.stale_watch = Some((epoch, Instant::now()));
                    false
                }
            }
        };
        if !stale {
            return;
        }
        tracing::warn!(node = %self.id(), keys = moving.len(), "giving up stale key moves");
        let n = moving.len() as u64;
        if let Err(e) = self
            .change(MetaChange::KeyDirectory(DirChange::Cancel(moving)))
            .await
        {
            tracing::warn!(node = %self.id(), error = %e, "stale key moves not cancelled");
            return;
        }
        self.txn_state()
            .counters
            .moves_cancelled
            .fetch_add(n, Ordering::Relaxed);
        for (src, keys) in sources {
            let _ = self.txn_call(src, TxnMsg::MoveCancel { keys }).await;
        }
    }

    /// Runs one planning round now (the claimant's planner) and the moves it proposes.
    ///
    /// # Errors
    /// The planner's, or the directory change's.
    pub async fn txn_plan_round(&self) -> crate::error::Result<MoveReport> {
        let now_us = self.kernel().clock.now().0;
        let meta = self.meta();
        let layout = &meta.layout;
        let parts: Vec<PartInfo> = layout
            .ring()
            .partitions()
            .filter_map(|p| {
                let leader = *layout.replicas(p).first()?;
                let dc = meta.member(leader)?.dc;
                Some(PartInfo {
                    partition: p,
                    leader,
                    dc,
                })
            })
            .collect();
        let ring = layout.ring();
        let dir = &meta.key_directory;
        let plan = {
            let mut p = self.txn_state().planning.lock();
            let Some(planner) = p.planner.as_mut() else {
                return Ok(MoveReport::default());
            };
            planner.plan(
                now_us,
                &parts,
                |k| dir.partition(k, || ring.partition_of(k)),
                |k| ring.partition_of(k),
            )?
        };
        self.txn_state()
            .counters
            .plan_rounds
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(node = %self.id(), moves = plan.moves.len(), cost_before = plan.cost_before,
            cost_after = plan.cost_after, held = plan.held_by_residence, "transactional placement planned");
        let moves: Vec<(Bytes, PartitionId)> =
            plan.moves.iter().map(|m| (m.key.clone(), m.to)).collect();
        let report = self.txn_move_keys(moves).await;
        if report.is_err()
            && let Some(pl) = self.txn_state().planning.lock().planner.as_mut()
        {
            pl.forget_moves(plan.moves.iter().map(|m| &m.key));
        }
        report
    }

    /// Moves transactional keys to the given partitions (spec §6; module docs). Keys whose
    /// move fails stay where they were.
    ///
    /// # Errors
    /// The directory change's (`membership_refused` naming the key that cannot move,
    /// `claimant_unreachable`).
    pub async fn txn_move_keys(
        &self,
        moves: Vec<(Bytes, PartitionId)>,
    ) -> crate::error::Result<MoveReport> {
        if moves.is_empty() {
            return Ok(MoveReport::default());
        }
        let meta = self
            .change(MetaChange::KeyDirectory(DirChange::Begin(moves.clone())))
            .await?;
        let leader = |p: PartitionId| meta.layout.replicas(p).first().copied();
        // (key, source leader, destination leader, entry epoch, destination partition)
        let mut items = Vec::with_capacity(moves.len());
        for (k, _) in &moves {
            if let Some(&Placement::Moving { from, to, epoch }) = meta.key_directory.get(k)
                && let (Some(src), Some(dst)) = (leader(from), leader(to))
            {
                items.push((k.clone(), src, dst, epoch, to));
            }
        }
        let mut shipped: Vec<Option<Exported>> = vec![None; items.len()];
        let mut arrived = vec![false; items.len()];
        let mut by_src: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (i, it) in items.iter().enumerate() {
            if it.1 == it.2 {
                arrived[i] = true; // same leader: nothing ships
            } else {
                by_src.entry(it.1).or_default().push(i);
            }
        }
        let outs = join_all(by_src.into_iter().map(|(src, idx)| {
            let keys = idx
                .iter()
                .map(|&i| (items[i].0.clone(), items[i].4, items[i].3))
                .collect();
            async move { (idx, self.txn_call(src, TxnMsg::MoveOut { keys }).await) }
        }))
        .await;
        for (idx, r) in outs {
            match r {
                Ok(TxnMsg::MoveOutReply(v)) if v.len() == idx.len() => {
                    for (i, e) in idx.into_iter().zip(v) {
                        match e {
                            Ok(ex) => shipped[i] = Some(ex),
                            Err(e) => {
                                tracing::info!(node = %self.id(), key = ?items[i].0, error = %e, "key not exported")
                            }
                        }
                    }
                }
                other => tracing::warn!(node = %self.id(), reply = ?other.err(), "move-out failed"),
            }
        }
        let mut by_dst: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (i, ex) in shipped.iter().enumerate() {
            if ex.is_some() {
                by_dst.entry(items[i].2).or_default().push(i);
            }
        }
        let ins = join_all(by_dst.into_iter().map(|(dst, idx)| {
            let batch = idx
                .iter()
                .filter_map(|&i| Some((items[i].0.clone(), shipped[i].clone()?)))
                .collect();
            async move {
                (
                    idx,
                    self.txn_call(dst, TxnMsg::MoveIn { items: batch }).await,
                )
            }
        }))
        .await;
        for (idx, r) in ins {
            match r {
                Ok(TxnMsg::Moved(Ok(()))) => idx.into_iter().for_each(|i| arrived[i] = true),
                other => tracing::warn!(node = %self.id(), reply = ?other, "move-in failed"),
            }
        }
        let (ok, failed): (Vec<usize>, Vec<usize>) = (0..items.len()).partition(|&i| arrived[i]);
        // Keys that never reached a leader's answer are given up too.
        let mut cancel: Vec<Bytes> = failed.iter().map(|&i| items[i].0.clone()).collect();
        cancel.extend(
            moves
                .iter()
                .filter(|(k, _)| !items.iter().any(|it| it.0 == *k))
                .map(|(k, _)| k.clone()),
        );
        let mut report = MoveReport {
            moved: 0,
            cancelled: cancel.len(),
        };
        if !cancel.is_empty() {
            self.change(MetaChange::KeyDirectory(DirChange::Cancel(cancel)))
                .await?;
            self.txn_notify_sources(&items, &failed, |keys| TxnMsg::MoveCancel { keys })
                .await;
        }
        if !ok.is_empty() {
            let keys = ok.iter().map(|&i| items[i].0.clone()).collect();
            let meta = self
                .change(MetaChange::KeyDirectory(DirChange::Finish(keys)))
                .await?;
            let dir_epoch = meta.key_directory.epoch();
            self.txn_notify_sources(&items, &ok, |keys| TxnMsg::MoveDone { keys, dir_epoch })
                .await;
            report.moved = ok.len();
        }
        let c = &self.txn_state().counters;
        c.keys_moved
            .fetch_add(report.moved as u64, Ordering::Relaxed);
        c.moves_cancelled
            .fetch_add(report.cancelled as u64, Ordering::Relaxed);
        Ok(report)
    }

    /// Sends `msg` (built from `(key, entry epoch)` pairs) to the source leaders of the keys
    /// `which` of `items` that shipped from another leader.
    async fn txn_notify_sources(
        &self,
        items: &[(Bytes, NodeId, NodeId, u64, PartitionId)],
        which: &[usize],
        msg: impl Fn(Vec<(Bytes, u64)>) -> TxnMsg,
    ) {
        let mut by_src: BTreeMap<NodeId, Vec<(Bytes, u64)>> = BTreeMap::new();
        for &i in which {
            let (k, src, dst, epoch, _) = &items[i];
            if src != dst {
                by_src.entry(*src).or_default().push((k.clone(), *epoch));
            }
        }
        let sends = by_src.into_iter().map(|(src, keys)| {
            let m = msg(keys);
            async move {
                // Three tries; if all are lost, the source settles the key from its
                // directory copy at its next housekeeping tick (`txn_settle_untold_moves`).
                for _ in 0..3 {
                    if matches!(
                        self.txn_call(src, m.clone()).await,
                        Ok(TxnMsg::Moved(Ok(())))
                    ) {
                        return;
                    }
                }
                tracing::warn!(node = %self.id(), %src, "move notification not delivered");
            }
        });
        join_all(sends).await;
    }

    /// A move step at `to` (this node: run here).
    async fn txn_call(&self, to: NodeId, msg: TxnMsg) -> Result<TxnMsg> {
        if to == self.id() {
            return Ok(self.txn_move_step(msg).await);
        }
        let timeout = {
            let l = &self.txn_state().limits;
            Duration::from_micros(l.prepare_ttl_us + 2 * l.read_wait_max_us)
        };
        match self
            .kernel()
            .transport
            .request(to, msg.into(), timeout)
            .await
        {
            Ok(Msg::Txn(m)) => Ok(m),
            Ok(other) => Err(step_failed(
                to,
                "step",
                format!("unexpected reply {other:?}"),
            )),
            Err(e) => Err(step_failed(to, "step", e)),
        }
    }

    /// Serves a move step (source or destination side).
    pub(crate) async fn txn_move_step(&self, msg: TxnMsg) -> TxnMsg {
        let t = self.txn_state();
        match msg {
            TxnMsg::MoveOut { keys } => TxnMsg::MoveOutReply(self.txn_move_out(keys).await),
            TxnMsg::MoveIn { items } => TxnMsg::Moved(self.txn_move_in(items)),
            TxnMsg::MoveDone { keys, dir_epoch } => {
                let now_us = self.kernel().clock.now().0;
                let grace = t.move_grace_us();
                let r = keys.iter().try_for_each(|(k, e)| {
                    t.change_move(k, |m| m.moved(k, *e, dir_epoch, now_us, grace))
                });
                TxnMsg::Moved(r)
            }
            TxnMsg::MoveCancel { keys } => TxnMsg::Moved(keys.iter().try_for_each(|(k, e)| {
                t.change_move(k, |m| {
                    m.unfreeze(k, *e);
                    Ok(())
                })
            })),
            other => TxnMsg::Moved(Err(TxnError::BadRequest(format!(
                "not a move step: {other:?}"
            )))),
        }
    }

    /// Steps 1–2 at the source: freeze every key, then drain and export each.
    async fn txn_move_out(&self, keys: Vec<(Bytes, PartitionId, u64)>) -> Vec<Result<Exported>> {
        let t = self.txn_state();
        let mut out: Vec<Result<()>> = Vec::with_capacity(keys.len());
        for (k, to, epoch) in &keys {
            let _g = t.stripe(k).marks.lock();
            // It must be served here (its Moving entry names this leader as the source).
            let r = self
                .txn_admit(k, Some(Timestamp(0)))
                .and_then(|()| t.change_move(k, |m| m.freeze(k, *to, *epoch)));
            out.push(r);
        }
        let deadline = Instant::now()
            + Duration::from_micros(t.limits.prepare_ttl_us + t.limits.read_wait_max_us);
        let mut res = Vec::with_capacity(keys.len());
        for ((k, _, epoch), frozen) in keys.iter().zip(out) {
            let r = match frozen {
                Ok(()) => self.txn_drain_export(k, *epoch, deadline).await,
                Err(e) => Err(e),
            };
            if r.is_err() {
                let _ = t.change_move(k, |m| {
                    m.unfreeze(k, *epoch);
                    Ok(())
                });
            }
            res.push(r);
        }
        res
    }

    /// Waits until no mark holds `k` (frozen: no new one comes), then exports it.
    async fn txn_drain_export(&self, k: &Bytes, epoch: u64, deadline: Instant) -> Result<Exported> {
        let t = self.txn_state();
        let stripe = t.stripe(k);
        loop {
            let changed = stripe.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let held = {
                let marks = stripe.marks.lock();
                marks
                    .get(k)
                    .map(|m| m.txid)
                    .filter(|_| !export_ready(marks.get(k)))
            };
            let Some(txid) = held else { break };
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(Abort::PreparedBlocked(txid).into());
            }
        }
        // Under the oracle, the export timestamp is the oracle's (taken after the drain):
        // every commit at the destination gets a later one.
        let (bucket, _) = bucket_and_key(k);
        let props = self.registry().props_for(bucket).txn;
        let oracle_ts = match props.source() {
            TimestampSource::Tso => Some(self.oracle_get(&props).await?),
            TimestampSource::ClockSi => None,
        };
        let _g = stripe.marks.lock();
        let ts = match oracle_ts {
            Some(ts) => ts,
            None => self.txn_clock_tick()?,
        };
        let export_ts = t.change_move(k, |m| m.exported(k, epoch, ts))?;
        if t.controls().move_commit_ts_only {
            // Negative control: the source keeps serving reads above the export timestamp.
            t.change_move(k, |m| m.exported(k, epoch, Timestamp::MAX))?;
        }
        let watermark = t.watermark(self.kernel().clock.now());
        Ok(Exported {
            versions: t.store.export_key(k, watermark)?,
            export_ts,
        })
    }

    /// Step 2 at the destination: install each key and raise the clock past what shipped.
    fn txn_move_in(&self, items: Vec<(Bytes, Exported)>) -> Result<()> {
        let t = self.txn_state();
        for (k, ex) in items {
            let marks = t.stripe(&k).marks.lock();
            if marks.contains_key(&k) {
                return Err(TxnError::BadRequest(format!(
                    "a transaction holds {} at its destination",
                    String::from_utf8_lossy(&k)
                )));
            }
            let floor = if t.controls().move_commit_ts_only {
                // Negative control: the spec's rule alone.
                ex.versions.max_commit_ts().unwrap_or_default()
            } else {
                ex.clock_floor()
            };
            t.clock.lock().observe(floor);
            // Forget an earlier move of the key away first: a leftover `Gone` would delete
            // what is installed now once its grace period ends.
            t.change_move(&k, |m| {
                m.arrived(&k);
                Ok(())
            })?;
            let mut b = WriteBatch::new();
            t.store.import_key(&mut b, &k, &ex.versions)?;
            t.store.write(b)?;
        }
        Ok(())
    }
}
