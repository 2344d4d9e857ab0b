//! The master's side (spec §3, §5, §7): the write path under the key's lock, reads served as
//! master, the confirmation of a record with the other primaries after a restart or layout
//! change, and the forced re-master.
//!
//! A master issues a version only after it holds the latest record of the key (or confirmed
//! it with every other primary), so no version is issued twice.

use super::{
    Decision, Placement, Target, TlIssueKind, TlTrace, TlWriteResult, WriteMsg, is_behind, lossy,
    newer, remember,
};
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node};
use crate::timeline::{
    Record, ReplicaRef, TimelineMsg, Version, WriteOp, WriteRefusal, force_remaster, master_write,
    new_master_in,
};
use bytes::Bytes;
use meridian_core::{DcId, NodeId};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

impl Node {
    /// The master's (or insert arbiter's) write path (§3, §5).
    pub(crate) async fn tl_master_write(
        &self,
        key: &[u8],
        op: WriteMsg,
        hops: u8,
        await_ver: Option<Version>,
    ) -> Result<(Record, ReplicaRef)> {
        let deadline = Instant::now() + self.kernel().cfg.tl_migrate_wait;
        loop {
            let pl = self.tl_placement(key)?;
            self.tl_check_majority(key, &pl)?;
            self.tl_confirm(key, &pl).await?;
            let applied = self.tl_state().applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            let me = self.me();
            let now_us = self.kernel().clock.now().micros();
            let wop = WriteOp {
                content: op.content.clone(),
                origin_dc: op.origin_dc,
                expect: op.expect,
            };
            let decision = {
                let up = |n: NodeId| self.is_up(n);
                let mut decision = None;
                let fresh = !self.tl_state().issued_here.lock().contains(key);
                let stored = self.tl_state().store.write_with(key, |cur| {
                    // Checked and recorded under the key's lock: a duplicate of this request
                    // waits for the lock, then finds the result.
                    if let Some(done) = self.tl_state().recent_writes.lock().results.get(&op.id) {
                        return Err(Decision::Duplicate(done.clone()));
                    }
                    let d = self.decide(cur, wop, &pl, me, now_us, &up, fresh);
                    match d {
                        Decision::Issued(r, kind, prev) => {
                            decision = Some((kind, prev));
                            self.tl_state()
                                .recent_writes
                                .lock()
                                .insert(op.id, (r.clone(), me));
                            Ok(r)
                        }
                        other => Err(other),
                    }
                });
                let stored = match stored {
                    Ok(s) => s,
                    Err(e) => {
                        self.tl_state().recent_writes.lock().results.remove(&op.id);
                        return Err(e);
                    }
                };
                match stored {
                    Ok(record) => {
                        let (kind, prev) = decision.expect("set with the record");
                        self.trace(TlTrace::Issued {
                            key: Bytes::copy_from_slice(key),
                            record: record.clone(),
                            kind,
                            by: me,
                            origin_dc: op.origin_dc,
                        });
                        self.trace(TlTrace::Applied {
                            key: Bytes::copy_from_slice(key),
                            node: me.node,
                            record: record.clone(),
                        });
                        Decision::Issued(record, kind, prev)
                    }
                    Err(d) => d,
                }
            };
            match decision {
                Decision::Issued(record, _, prev) => {
                    self.mark_confirmed(key, &record);
                    if prev.is_some_and(|p| p.node != record.master.node) {
                        self.tl_state()
                            .counters
                            .migrations
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.tl_state().applied.notify_waiters();
                    let key = Bytes::copy_from_slice(key);
                    self.tl_enqueue(&key, &record, &pl);
                    // Extra copies of a hot key go before the write is acknowledged.
                    self.invalidate_if_hot(&key).await;
                    if pl.props.timeline_w > 1 {
                        self.tl_await_acks(&key, &record, &pl).await?;
                    }
                    return Ok((record, me));
                }
                Decision::Refused(e) => return Err(e),
                Decision::Duplicate(done) => return Ok(done),
                Decision::Elsewhere(hint, ver) => {
                    let behind = is_behind(await_ver, ver);
                    let now = Instant::now();
                    if behind && now < deadline {
                        // The sender knows a newer record (one naming this node master, as
                        // far as it knows): wait for it rather than forward on an old copy.
                        let _ = tokio::time::timeout(deadline - now, applied).await;
                        continue;
                    }
                    if hops == 0 {
                        self.tl_state()
                            .counters
                            .wrong_master_forwards
                            .fetch_add(1, Ordering::Relaxed);
                        let target = if ver.is_none() {
                            Target::Arbiter(hint)
                        } else {
                            Target::Master(hint)
                        };
                        return Box::pin(self.tl_send_write(key, &pl, target, hint, &op, 1, ver))
                            .await;
                    }
                    return Err(ReplicationError::NotMaster {
                        hint,
                        await_ver: ver.unwrap_or(Version::new(0, 0, 0)),
                    });
                }
            }
        }
    }

    /// The decision of the write path on the current record (under the key's lock). `fresh`:
    /// this node has not issued nor been handed the key's record during this run.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        cur: Option<&Record>,
        op: WriteOp,
        pl: &Placement,
        me: ReplicaRef,
        now_us: u64,
        up: &impl Fn(NodeId) -> bool,
        fresh: bool,
    ) -> Decision {
        match cur {
            None if pl.arbiter().node != me.node => return Decision::Elsewhere(pl.arbiter(), None),
            Some(r) if r.master.node != me.node => {
                return Decision::Elsewhere(r.master, Some(r.ver));
            }
            _ => {}
        }
        let origin = op.origin_dc;
        match master_write(cur, op, &pl.props, me, now_us, &pl.replicas, up) {
            Ok(mut r) => {
                settle_issued(&mut r, cur, origin, pl, up, fresh, now_us);
                let kind = if cur.is_none() {
                    TlIssueKind::Insert
                } else {
                    TlIssueKind::Write
                };
                Decision::Issued(r, kind, cur.map(|c| c.master))
            }
            Err(WriteRefusal::NotMaster { hint, await_ver }) => {
                Decision::Elsewhere(hint, Some(await_ver))
            }
            Err(WriteRefusal::VersionMismatch { current }) => {
                Decision::Refused(ReplicationError::VersionMismatch { current })
            }
            Err(WriteRefusal::AlreadyExists { current }) => {
                Decision::Refused(ReplicationError::AlreadyExists { current })
            }
        }
    }

    /// Serves a `TlRead`: the local record; with `latest`, only as its master (or as the
    /// arbiter of an absent record), waiting up to `migrate_wait` for `await_ver`.
    pub(crate) async fn tl_serve_read(
        &self,
        key: &[u8],
        latest: bool,
        await_ver: Option<Version>,
    ) -> Result<Option<Record>> {
        if !latest {
            return self.tl_state().store.get(key);
        }
        let deadline = Instant::now() + self.kernel().cfg.tl_migrate_wait;
        loop {
            let pl = self.tl_placement(key)?;
            self.tl_check_majority(key, &pl)?;
            self.tl_confirm(key, &pl).await?;
            let applied = self.tl_state().applied.notified();
            tokio::pin!(applied);
            applied.as_mut().enable();
            let cur = self.tl_state().store.get(key)?;
            let (hint, have) = match &cur {
                Some(r) if r.master.node == self.id() => return Ok(cur),
                None if pl.arbiter().node == self.id() => return Ok(None),
                Some(r) => (r.master, Some(r.ver)),
                None => (pl.arbiter(), None),
            };
            let behind = is_behind(await_ver, have);
            let now = Instant::now();
            if behind && now < deadline {
                let _ = tokio::time::timeout(deadline - now, applied).await;
                continue;
            }
            return Err(ReplicationError::NotMaster {
                hint,
                await_ver: have.unwrap_or(Version::new(0, 0, 0)),
            });
        }
    }

    /// Sends a mastership request (`Force`, `TakeOver`) about `key` to `to`: its answer (an
    /// unexpected reply is `force_master_refused`), or the transport's error.
    pub(super) async fn ask_mastership(
        &self,
        key: &[u8],
        to: NodeId,
        msg: TimelineMsg,
        timeout: Duration,
    ) -> std::result::Result<Result<(Record, ReplicaRef)>, String> {
        match self
            .kernel()
            .transport
            .request(to, Msg::Timeline(msg), timeout)
            .await
        {
            Ok(Msg::Timeline(TimelineMsg::WriteReply(r))) => Ok(r),
            Ok(other) => Ok(Err(ReplicationError::ForceMasterRefused {
                key: lossy(key),
                reason: format!("unexpected reply from {to}: {other:?}"),
            })),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Notes that this node issued the latest record of a key it masters.
    pub(super) fn mark_confirmed(&self, key: &[u8], record: &Record) {
        if record.master.node != self.id() {
            return;
        }
        remember(&self.tl_state().issued_here, key);
    }

    /// Whether this node holds every record its peers held, for the partition of `pl`, as
    /// of a full catch-up pass with each other primary since it started.
    fn partition_synced(&self, pl: &Placement) -> bool {
        let epoch = self.layout().epoch();
        let s = self.tl_state().synced_with.lock();
        s.0 == epoch
            && pl
                .replicas
                .iter()
                .all(|r| r.node == self.id() || s.1.contains(&r.node))
    }

    /// Before this node acts as master (or insert arbiter) of a key whose latest record it may
    /// not hold, it asks the other primaries for their copies and applies any newer one. That
    /// is the case for a record naming it master that it read from disk after a start (a crash
    /// may have taken the tail its peers hold), and for an absent record on a node that was
    /// wiped, or that gained the partition in a layout change, before it completed a catch-up
    /// pass with every other primary. All primaries are asked, whatever the detector says
    /// (right after a start it has heard nobody); one that does not answer within
    /// `tl_confirm_timeout` is skipped, which is the residual risk: a record held only by a
    /// replica unreachable right now.
    pub(super) async fn tl_confirm(&self, key: &[u8], pl: &Placement) -> Result<()> {
        let me = self.id();
        if self.tl_confirmed(key) {
            return Ok(());
        }
        let local = self.tl_state().store.get(key)?;
        if local.as_ref().is_some_and(|r| r.master.node != me) || self.partition_synced(pl) {
            return Ok(());
        }
        let timeout = self.kernel().cfg.tl_confirm_timeout;
        let mut calls = futures_util::stream::FuturesUnordered::new();
        for peer in pl.replicas.iter().filter(|r| r.node != me) {
            let t = self.kernel().transport.clone();
            let msg = Msg::Timeline(TimelineMsg::Read {
                key: key.to_vec(),
                latest: false,
                await_ver: None,
            });
            let node = peer.node;
            calls.push(async move { t.request(node, msg, timeout).await });
        }
        let mut copies = Vec::new();
        use futures_util::StreamExt;
        while let Some(r) = calls.next().await {
            if let Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(Some(rec))))) = r {
                copies.push((key.to_vec(), rec));
            }
        }
        if !copies.is_empty() {
            self.tl_apply(copies)?;
        }
        remember(&self.tl_state().peer_checked, key);
        Ok(())
    }

    /// Whether [`Node::tl_confirm`] has nothing to do for `key`: this node issued its
    /// current version, or already checked its peers' copies.
    pub(super) fn tl_confirmed(&self, key: &[u8]) -> bool {
        self.tl_state().issued_here.lock().contains(key)
            || self.tl_state().peer_checked.lock().contains(key)
    }

    /// Serves a `TlForce`: takes the mastership of `key` in the next master epoch.
    pub(crate) fn tl_serve_force(&self, key: &[u8]) -> Result<(Record, ReplicaRef)> {
        let pl = self.tl_placement(key)?;
        let me = self.me();
        let r = self.tl_state().store.write_with(key, |cur| match cur {
            Some(c) => Ok(force_remaster(c, me)),
            None => Err(ReplicationError::ForceMasterRefused {
                key: lossy(key),
                reason: format!("{} holds no record of it", me.node),
            }),
        })??;
        tracing::warn!(node = %me.node, key = %lossy(key), ver = %r.ver, "forced re-master: this node is the master now");
        self.after_force(key, &r, &pl);
        Ok((r, me))
    }

    /// Forces the mastership of `key` to DC `dc` (spec §7): the reachable replica there with
    /// the highest version writes the record in the next master epoch. **This may lose
    /// acknowledged writes**: whatever the old master issued and did not propagate to that
    /// replica is discarded when it arrives.
    ///
    /// # Errors
    /// `force_master_refused` when no replica in `dc` is reachable or holds the record.
    pub async fn tl_force_master(&self, key: &[u8], dc: DcId) -> Result<TlWriteResult> {
        let pl = self.tl_check(key)?;
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut best: Option<(ReplicaRef, Version)> = None;
        let mut tried = Vec::new();
        for r in pl.replicas.iter().filter(|r| r.dc == dc) {
            let rec = if r.node == self.id() {
                self.tl_state().store.get(key).ok().flatten()
            } else {
                let msg = Msg::Timeline(TimelineMsg::Read {
                    key: key.to_vec(),
                    latest: false,
                    await_ver: None,
                });
                match self.kernel().transport.request(r.node, msg, timeout).await {
                    Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(rec)))) => rec,
                    _ => None,
                }
            };
            tried.push(r.node.to_string());
            if let Some(rec) = rec
                && best.is_none_or(|(_, v)| newer(&rec.ver, &v))
            {
                best = Some((*r, rec.ver));
            }
        }
        let Some((to, _)) = best else {
            return Err(ReplicationError::ForceMasterRefused {
                key: lossy(key),
                reason: if tried.is_empty() {
                    format!("the key has no replica in {dc}")
                } else {
                    format!(
                        "no reachable replica in {dc} ({}) holds the record",
                        tried.join(",")
                    )
                },
            });
        };
        let (record, issued_by) = if to.node == self.id() {
            self.tl_serve_force(key)?
        } else {
            let msg = TimelineMsg::Force { key: key.to_vec() };
            self.ask_mastership(key, to.node, msg, timeout)
                .await
                .map_err(|e| ReplicationError::ForceMasterRefused {
                    key: lossy(key),
                    reason: format!("{} did not answer: {e}", to.node),
                })??
        };
        self.remember_master(key, &record);
        Ok(TlWriteResult {
            remote: issued_by.dc != self.dc(),
            record,
            issued_by,
        })
    }
}

/// What every record a master issues goes through after [`master_write`]: a master that a
/// layout change left without a replica of the key hands the mastership to a primary with
/// this write; and this node's first write over a record it did not issue during this run
/// (`fresh`) opens a new generation — an earlier run of this node may have issued (and a crash
/// under a lossy fsync policy lost) versions after the one it holds, and a version must never
/// be issued twice. A record it was handed by a migration is no exception: a retransmission
/// can hand it over again after a restart.
pub(super) fn settle_issued(
    r: &mut Record,
    cur: Option<&Record>,
    origin: DcId,
    pl: &Placement,
    up: &impl Fn(NodeId) -> bool,
    fresh: bool,
    now_us: u64,
) {
    if !pl.holds(r.master.node)
        && let Some(m) = new_master_in(origin, &pl.replicas, up)
            .or_else(|| pl.replicas.iter().find(|x| up(x.node)).copied())
    {
        r.master = m;
    }
    if fresh
        && let Some(c) = cur
        && r.ver.generation == c.ver.generation
        && r.ver.mepoch == c.ver.mepoch
    {
        r.ver = Version::new(
            now_us.max(c.ver.generation.saturating_add(1)),
            c.ver.mepoch,
            1,
        );
    }
}
