//! Ordered reliable propagation (spec §4): the per-peer queues compacted per key, the sender
//! task with up to `PROPAGATION_WINDOW` batches in flight per peer, exponential retransmit backoff, and the apply of
//! received records. A replica may skip versions, never reorder them: apply keeps the higher
//! version.

use super::{Outbound, Placement, TlTrace, lossy};
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node};
use crate::timeline::{Merge, Record, ReplicaRef, TimelineMsg};
use bytes::Bytes;
use meridian_core::NodeId;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Batches in flight to one peer at once: over a 200 ms WAN round trip one batch of 256 moves
/// ~1,300 records a second, less than one master issues; eight keep up with a loaded master
/// while bounding what a slow peer holds in flight.
const PROPAGATION_WINDOW: usize = 8;

/// The longest a write's acknowledgement waits for its hand-over to a master in the DC: a
/// peer of the DC answers in milliseconds, and one that does not is left to the queue.
const HAND_OVER_WAIT: Duration = Duration::from_millis(500);

impl Node {
    /// Queues `record` for every other primary of the key.
    pub(super) fn tl_enqueue(&self, key: &Bytes, record: &Record, pl: &Placement) {
        let me = self.id();
        {
            let mut out = self.tl_state().outbound.lock();
            for peer in pl.replicas.iter().filter(|r| r.node != me) {
                out.pending.entry(peer.node).or_default().offer(key, record);
            }
        }
        self.tl_state().wake.notify_one();
    }

    /// Hands a record issued by one node and mastered by another (an insert mastered in the
    /// inserter's DC, a write that moved the mastership) to its master before the write is
    /// acknowledged. The issuer's queue delivers it too, but a WAN round trip or more later
    /// (behind whatever else is queued for that peer), and until then the master would answer
    /// the writer's next request with "the mastership is moving". Applied here when this node
    /// holds the key; sent when the master is another node of this DC. A failure only leaves
    /// the delivery to the queue.
    pub(super) async fn tl_hand_to_master(
        &self,
        key: &[u8],
        record: &Record,
        issued_by: ReplicaRef,
        pl: &Placement,
    ) {
        let master = record.master;
        if master.node == issued_by.node {
            return;
        }
        if pl.holds(self.id())
            && let Err(e) = self.tl_apply(vec![(key.to_vec(), record.clone())])
        {
            tracing::debug!(node = %self.id(), error = %e, "timeline hand-over: local apply failed");
        }
        if master.node == self.id() || master.dc != self.dc() || !self.is_up(master.node) {
            return;
        }
        let msg = Msg::Timeline(TimelineMsg::Replicate {
            records: vec![(key.to_vec(), record.clone())],
        });
        let timeout = Duration::from_millis(pl.props.master_timeout_ms).min(HAND_OVER_WAIT);
        match self
            .kernel()
            .transport
            .request(master.node, msg, timeout)
            .await
        {
            Ok(Msg::Timeline(TimelineMsg::Ack)) => {}
            other => {
                tracing::debug!(node = %self.id(), to = %master.node, reply = ?other.map(|_| ()), "timeline hand-over not acknowledged; the queue delivers it");
            }
        }
    }

    /// Waits for `timeline_w − 1` peers to acknowledge `record` (sent directly, besides the
    /// queue that keeps retrying).
    pub(super) async fn tl_await_acks(
        &self,
        key: &Bytes,
        record: &Record,
        pl: &Placement,
    ) -> Result<()> {
        let need = pl.props.timeline_w as usize - 1;
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut calls = futures_util::stream::FuturesUnordered::new();
        for peer in pl.replicas.iter().filter(|r| r.node != self.id()) {
            let t = self.kernel().transport.clone();
            let msg = Msg::Timeline(TimelineMsg::Replicate {
                records: vec![(key.to_vec(), record.clone())],
            });
            let node = peer.node;
            calls.push(async move { (node, t.request(node, msg, timeout).await) });
        }
        let mut acks = 0;
        let mut missing: Vec<NodeId> = pl
            .replicas
            .iter()
            .map(|r| r.node)
            .filter(|n| *n != self.id())
            .collect();
        use futures_util::StreamExt;
        while let Some((node, r)) = calls.next().await {
            if matches!(r, Ok(Msg::Timeline(TimelineMsg::Ack))) {
                acks += 1;
                missing.retain(|n| *n != node);
                if acks >= need {
                    return Ok(());
                }
            }
        }
        Err(ReplicationError::Timeout {
            need: pl.props.timeline_w,
            ok: acks as u32 + 1,
            nf: 0,
            fail: 0,
            missing: crate::error::Missing(missing),
        })
    }

    /// Applies replicated or caught-up records (the replica side of §4 and §8).
    pub(crate) fn tl_apply(&self, records: Vec<(Vec<u8>, Record)>) -> Result<usize> {
        let mut stored = 0;
        for (key, rec) in records {
            let m = self.tl_state().store.apply(&key, &rec)?;
            let c = &self.tl_state().counters;
            match m {
                Merge::Apply => {
                    stored += 1;
                    self.trace(TlTrace::Applied {
                        key: Bytes::from(key),
                        node: self.id(),
                        record: rec,
                    });
                }
                Merge::Fork => {
                    c.forks.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(node = %self.id(), key = %lossy(&key), ver = %rec.ver, "timeline fork: two records with one version (a bug)");
                }
                Merge::Fenced => {
                    c.fenced.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(node = %self.id(), key = %lossy(&key), ver = %rec.ver, "discarded a record of a deposed master (forced re-master)");
                }
                Merge::Stale | Merge::Duplicate => {}
            }
        }
        if stored > 0 {
            self.tl_state().applied.notify_waiters();
        }
        Ok(stored)
    }

    /// The propagation task: sends each peer's queued records, up to `PROPAGATION_WINDOW` batches in flight per peer.
    pub(crate) async fn tl_streams(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.kernel().cfg.tl_retry);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = self.tl_state().wake.notified() => {}
                _ = tick.tick() => {}
            }
            self.tl_pump();
        }
    }

    fn tl_pump(&self) {
        let now = Instant::now();
        let batch_max = self.kernel().cfg.tl_batch.max(1);
        let mut starts = Vec::new();
        {
            let mut out = self.tl_state().outbound.lock();
            let Outbound {
                pending,
                inflight,
                backoff,
            } = &mut *out;
            pending.retain(|_, q| !q.is_empty());
            for (peer, q) in pending.iter_mut() {
                if backoff.get(peer).is_some_and(|(at, _)| *at > now) {
                    continue;
                }
                let flying = inflight.entry(*peer).or_default();
                while *flying < PROPAGATION_WINDOW && q.has_unsent() {
                    *flying += 1;
                    starts.push((*peer, q.take(batch_max)));
                }
            }
        }
        for (peer, batch) in starts {
            let node = self.clone();
            tokio::spawn(async move { node.tl_send_batch(peer, batch).await });
        }
    }

    async fn tl_send_batch(self, peer: NodeId, batch: Vec<(Bytes, Record)>) {
        let msg = Msg::Timeline(TimelineMsg::Replicate {
            records: batch.iter().map(|(k, r)| (k.to_vec(), r.clone())).collect(),
        });
        let r = self
            .kernel()
            .transport
            .request(peer, msg, self.kernel().cfg.handoff_timeout)
            .await;
        let acked = matches!(r, Ok(Msg::Timeline(TimelineMsg::Ack)));
        let mut out = self.tl_state().outbound.lock();
        if let Some(n) = out.inflight.get_mut(&peer) {
            *n = n.saturating_sub(1);
        }
        if let Some(q) = out.pending.get_mut(&peer) {
            q.answered(&batch, acked);
        }
        if acked {
            out.backoff.remove(&peer);
            drop(out);
            self.tl_state().wake.notify_one();
        } else {
            let cfg = &self.kernel().cfg;
            let delay = match out.backoff.get(&peer) {
                Some((_, d)) => (*d * 2).min(cfg.tl_retry_max),
                None => cfg.tl_retry,
            };
            out.backoff.insert(peer, (Instant::now() + delay, delay));
        }
    }
}
