//! Catch-up by version (spec §8): periodic rounds that compare one page of record versions
//! with one peer and copy the newer record both ways, the tombstone GC they carry, and the
//! expiry sweep's page scan. Convergence after lost queues or crashes rests on these rounds.

use super::newer;
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node};
use crate::timeline::{Record, TimelineMsg, Version};
use bytes::Bytes;
use meridian_core::NodeId;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

impl Node {
    /// The catch-up task: one [`Node::tl_sync_round`] every `tl_sync_interval`.
    pub(crate) async fn tl_catch_up(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.tl_sync_interval;
        if every.is_zero() {
            return;
        }
        // Until a full pass with every peer has completed (after a start, a layout change, or
        // while a peer is away) rounds follow each other at the retry pace: until then this
        // node confirms with its peers before acting as master, which costs a round trip.
        let quick = self.kernel().cfg.tl_retry;
        let mut next = Instant::now() + self.start_offset(quick);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(next) => {}
            }
            if let Err(e) = self.tl_sync_round().await {
                tracing::debug!(node = %self.id(), error = %e, "timeline catch-up round failed");
            }
            next = Instant::now()
                + if self.tl_synced_with_all() {
                    every
                } else {
                    quick
                };
        }
    }

    /// Whether a full catch-up pass with every other member completed under the current
    /// layout epoch.
    pub fn tl_synced_with_all(&self) -> bool {
        let layout = self.layout();
        let s = self.tl_state().synced_with.lock();
        s.0 == layout.epoch()
            && layout
                .topology()
                .members()
                .iter()
                .all(|m| m.id == self.id() || s.1.contains(&m.id))
    }

    /// One catch-up exchange (§8): compares one page of this node's records with the next
    /// peer in turn, and copies the newer record of every differing key both ways. Returns
    /// how many records were copied.
    pub async fn tl_sync_round(&self) -> Result<usize> {
        let peers: Vec<NodeId> = {
            let layout = self.layout();
            layout
                .topology()
                .members()
                .iter()
                .map(|m| m.id)
                .filter(|n| *n != self.id())
                .collect()
        };
        if peers.is_empty() {
            return Ok(0);
        }
        let epoch = self.layout().epoch();
        let (peer, after) = {
            let mut c = self.tl_state().sync_cursor.lock();
            if c.after.is_none() {
                c.pass_ok = true;
            }
            let peer = peers[c.peer % peers.len()];
            if !self.is_up(peer) {
                // Skip a peer that is down without scanning: its pass restarts when it is back.
                c.peer = c.peer.wrapping_add(1);
                c.after = None;
                return Ok(0);
            }
            (peer, c.after.clone())
        };
        let (page, next) =
            self.tl_state()
                .store
                .page(after.as_deref(), None, self.kernel().cfg.tl_sync_page)?;
        // Moves the cursor on, and records a pass that completed without a failure.
        let advance = |ok: bool| {
            let mut c = self.tl_state().sync_cursor.lock();
            c.pass_ok &= ok;
            match &next {
                Some(k) => c.after = Some(k.clone()),
                None => {
                    if c.pass_ok {
                        let mut s = self.tl_state().synced_with.lock();
                        if s.0 != epoch {
                            *s = (epoch, BTreeSet::new());
                        }
                        s.1.insert(peer);
                    }
                    c.peer = c.peer.wrapping_add(1);
                    c.after = None;
                }
            }
        };
        let mut items = Vec::new();
        for (k, r) in &page {
            if self.tl_placement(k).is_ok_and(|pl| pl.holds(peer)) {
                items.push((k.to_vec(), r.ver));
            }
        }
        let msg = Msg::Timeline(TimelineMsg::Sync {
            items,
            after: after.map(|a| a.to_vec()),
            upto: next.as_ref().map(|n| n.to_vec()),
        });
        let timeout = self.kernel().cfg.anti_entropy_timeout;
        let (newer_there, want, complete) =
            match self.kernel().transport.request(peer, msg, timeout).await {
                Ok(Msg::Timeline(TimelineMsg::SyncReply {
                    newer,
                    want,
                    complete,
                })) => (newer, want, complete),
                Ok(other) => {
                    advance(false);
                    return Err(ReplicationError::Storage {
                        reason: format!("unexpected catch-up reply from {peer}: {other:?}"),
                    });
                }
                Err(e) => {
                    advance(false);
                    return Err(ReplicationError::ForwardFailed {
                        node: peer,
                        reason: e.to_string(),
                    });
                }
            };
        for (k, r) in &page {
            if let Err(e) = self.tl_reap(k, r).await {
                tracing::debug!(node = %self.id(), error = %e, "timeline tombstone GC failed");
            }
        }
        let applied = self.tl_apply(newer_there);
        // The pass counts only if this exchange covered the whole range and applied.
        advance(complete && applied.is_ok());
        let mut copied = applied?;
        let mut out = self.tl_state().outbound.lock();
        let q = out.pending.entry(peer).or_default();
        for k in want {
            if let Some(r) = self.tl_state().store.get(&k)? {
                q.offer(&Bytes::from(k), &r);
                copied += 1;
            }
        }
        drop(out);
        self.tl_state().wake.notify_one();
        self.tl_state()
            .counters
            .caught_up
            .fetch_add(copied as u64, Ordering::Relaxed);
        Ok(copied)
    }

    /// One page of this replica's records after `after`, in key order, and where the next
    /// page starts (the expiry sweep's scan, `crate::expiry`).
    pub(crate) fn tl_records_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<crate::timeline::RecordPage> {
        self.tl_state().store.page(after, None, limit)
    }

    /// Stores the record of `key` as a tombstone if a truncation mark hides it (the sweep's
    /// rewrite, `crate::expiry`); returns whether it did.
    pub(crate) fn tl_prune(&self, key: &[u8]) -> Result<bool> {
        self.tl_state().store.prune(key)
    }

    /// Tombstone GC (§5), run by the record's master on each page catch-up visits: a
    /// tombstone it issued, stored here at least `tl_tombstone_grace` ago, that every other
    /// primary holds as it is, is forgotten by every primary. Returns whether it was.
    ///
    /// Kept: tombstones in a master epoch above 0 (after a forced re-master a re-insert's
    /// epoch-0 version would lose to a copy that missed the reap), and every tombstone while
    /// a layout change is under way or a primary does not answer.
    async fn tl_reap(&self, key: &[u8], r: &Record) -> Result<bool> {
        let me = self.id();
        let grace = self.kernel().cfg.tl_tombstone_grace;
        if !r.is_tombstone() || r.master.node != me || r.ver.mepoch != 0 || grace.is_zero() {
            return Ok(false);
        }
        let store = &self.tl_state().store;
        let now = self.kernel().clock.now();
        let old_enough = store
            .stored_at(key)?
            .is_some_and(|at| Duration::from_micros(now.0.saturating_sub(at.0)) >= grace);
        if !old_enough || self.kernel().view.read().meta.previous.is_some() {
            return Ok(false);
        }
        let pl = self.tl_placement(key)?;
        let others: Vec<NodeId> = pl
            .replicas
            .iter()
            .map(|rr| rr.node)
            .filter(|&n| n != me)
            .collect();
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let asks = others.iter().map(|&n| {
            let msg = Msg::Timeline(TimelineMsg::Read {
                key: key.to_vec(),
                latest: false,
                await_ver: None,
            });
            self.kernel().transport.request(n, msg, timeout)
        });
        let everywhere = futures_util::future::join_all(asks).await.into_iter().all(|a| {
            matches!(a, Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(Some(theirs))))) if &theirs == r)
        });
        if !everywhere {
            return Ok(false);
        }
        for &n in &others {
            let msg = Msg::Timeline(TimelineMsg::Reap {
                key: key.to_vec(),
                ver: r.ver,
            });
            let _ = self.kernel().transport.send(n, msg);
        }
        self.tl_reap_local(key, r.ver);
        Ok(true)
    }

    /// Forgets `key` here if its record is still the tombstone of version `ver`.
    pub(super) fn tl_reap_local(&self, key: &[u8], ver: Version) {
        self.count_reap(self.tl_state().store.reap_if_unchanged(key, ver));
    }

    /// Serves a `TlSync` from `from`.
    pub(crate) fn tl_serve_sync(
        &self,
        from: NodeId,
        items: Vec<(Vec<u8>, Version)>,
        after: Option<Vec<u8>>,
        upto: Option<Vec<u8>>,
    ) -> Result<Msg> {
        let theirs: BTreeMap<Vec<u8>, Version> = items.into_iter().collect();
        let mut newer_here = Vec::new();
        let mut complete = true;
        let mut cursor = after.map(Bytes::from);
        loop {
            let (page, next) = self.tl_state().store.page(
                cursor.as_deref(),
                upto.as_deref(),
                self.kernel().cfg.tl_sync_page,
            )?;
            for (k, r) in page {
                if !self.tl_placement(&k).is_ok_and(|pl| pl.holds(from)) {
                    continue;
                }
                match theirs.get(k.as_ref()) {
                    Some(v) if !newer(&r.ver, v) => {}
                    _ => newer_here.push((k.to_vec(), r)),
                }
            }
            match next {
                Some(n) if newer_here.len() < self.kernel().cfg.tl_sync_page * 8 => {
                    cursor = Some(n)
                }
                Some(_) => {
                    complete = false;
                    break;
                }
                None => break,
            }
        }
        // Judged by this node's own copy, whatever its view of placement: a key the sender
        // holds at this node's version is never asked for again.
        let mut want = Vec::new();
        for (k, v) in &theirs {
            if self
                .tl_state()
                .store
                .get(k)?
                .is_none_or(|mine| newer(v, &mine.ver))
            {
                want.push(k.clone());
            }
        }
        Ok(Msg::Timeline(TimelineMsg::SyncReply {
            newer: newer_here,
            want,
            complete,
        }))
    }
}
