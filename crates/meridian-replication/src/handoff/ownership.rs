//! Membership changes on a running node: adopting cluster metadata, the claimant's side of a
//! change, and **ownership handoff** (spec §9) — after a layout change, every object a node
//! stores but no longer owns is streamed to the key's owners and deleted once they all
//! acknowledged it.
//!
//! ## Guarantees
//!
//! - **No acknowledged write is lost by a layout change.** A node deletes an object it does
//!   not own only after every owner of the key (the first `n_val` replicas of its partition
//!   in the node's current layout) acknowledged a copy, and only if the object is unchanged
//!   since it was sent (a write that arrives meanwhile waits for the next round). A key whose
//!   owner is down stays until that owner is back. A write of a key the node does not own
//!   (a coordinator with an older layout, read repair, a hint whose primary left) marks the
//!   node for another handoff round, so late arrivals are handed off too.
//! - **Reads see data that has not moved yet, and writes reach both layouts.** While the
//!   metadata keeps the previous layout, a GET also asks the key's previous owners that are
//!   not in its preference list, merges their objects into the answer and read-repairs the
//!   new owners with the merge; a PUT also needs a write quorum among the key's previous
//!   owners (joint quorums), so a coordinator whose metadata still has only the previous
//!   layout reads what a coordinator with the new one wrote, and the other way round.
//!   The previous layout is dropped only when every node of both layouts has reported that
//!   it delivered everything it does not own ([`KernelMsg::Drained`]); a node the claimant's
//!   detector calls down is waited for only for a grace period (ten heartbeats plus two
//!   handoff intervals: a node that just became claimant has heard nobody yet).
//! - **No dot is issued twice.** A node that deleted objects of a partition during a handoff
//!   and later owns that partition again coordinates with a replica id carrying the layout
//!   epoch in which it took it back ([`meridian_cluster::ReplicaId::epoch`]), since its
//!   copy of the earlier dots is gone.
//! - Handoff runs in the background task of hinted handoff, at once after a layout change
//!   and then every `handoff_interval` until nothing is left; transfers are batched
//!   ([`HANDOFF_BATCH_KEYS`] keys or [`HANDOFF_BATCH_BYTES`] bytes per message).

use super::messages::HandoffMsg;
use crate::anti_entropy::messages::AaeItem;
use crate::error::Result;
use crate::eventual::messages::EventualMsg;
use crate::kernel::Node;
use crate::kernel::{KernelMsg, Msg, RemoteError};
use crate::membership::MetaChange;
use crate::object_store::encode_object;
use bytes::Bytes;
use meridian_cluster::{Object, Preflist, Props, bucket_and_key};
use meridian_core::{NodeId, PartitionId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// Most keys per handoff message.
pub const HANDOFF_BATCH_KEYS: usize = 256;
/// Encoded bytes per handoff message above which a batch is sent early.
pub const HANDOFF_BATCH_BYTES: usize = 4 << 20;
/// Keys read per engine page while looking for objects to hand off.
const SCAN_PAGE: usize = 1024;

/// Ownership bookkeeping of one node.
#[derive(Debug, Default)]
pub(crate) struct Ownership {
    /// Partitions whose objects this incarnation deleted after handing them off.
    deleted_from: BTreeSet<PartitionId>,
    /// Partitions owned again after such deletes: the layout epoch naming their replica.
    regained: BTreeMap<PartitionId, u64>,
    /// Claimant only: the layout epoch being drained, the nodes that reported done, and
    /// when this node started waiting for them.
    drained: Drained,
}

/// The claimant's tally of a running handoff.
#[derive(Debug)]
struct Drained {
    epoch: u64,
    done: BTreeSet<NodeId>,
    since: Instant,
}

impl Default for Drained {
    fn default() -> Self {
        Drained {
            epoch: 0,
            done: BTreeSet::new(),
            since: Instant::now(),
        }
    }
}

impl Drained {
    /// The tally of `epoch`, starting it if this is a new one.
    fn of(&mut self, epoch: u64) -> &mut Drained {
        if self.epoch != epoch {
            *self = Drained {
                epoch,
                done: BTreeSet::new(),
                since: Instant::now(),
            };
        }
        self
    }
}

/// GETs sent to a key's previous owners during a handoff; see [`PreviousReads::collect`].
pub(crate) struct PreviousReads {
    rx: Option<mpsc::UnboundedReceiver<Option<Object>>>,
    expected: usize,
}

impl PreviousReads {
    /// Whether no previous owner is being asked.
    pub(crate) fn is_empty(&self) -> bool {
        self.expected == 0
    }

    /// The objects the previous owners answered by `deadline` (failures and notfounds are
    /// left out: they only add what the preference list may lack).
    pub(crate) async fn collect(&mut self, deadline: Instant) -> Vec<Object> {
        let mut out = Vec::new();
        let Some(rx) = self.rx.as_mut() else {
            return out;
        };
        for _ in 0..self.expected {
            let next = tokio::select! {
                biased;
                _ = sleep_until(deadline) => None,
                r = rx.recv() => r,
            };
            match next {
                Some(Some(o)) => out.push(o),
                Some(None) => {}
                None => break,
            }
        }
        out
    }
}

impl Node {
    /// Adoption hook of a layout change (called under the metadata write lock): partitions
    /// this incarnation emptied and owns again under `after` get a replica id carrying `epoch`.
    pub(crate) fn ownership_regain(&self, after: &BTreeSet<PartitionId>, epoch: u64) {
        let mut o = self.handoff_state().ownership.lock();
        let regained: Vec<PartitionId> = o
            .deleted_from
            .iter()
            .copied()
            .filter(|p| after.contains(p))
            .collect();
        for p in regained {
            o.deleted_from.remove(&p);
            o.regained.insert(p, epoch);
        }
    }

    /// Adoption hook of a layout change or a running handoff: schedules a handoff round now.
    pub(crate) fn schedule_drain(&self) {
        self.handoff_state()
            .drain_needed
            .store(true, Ordering::SeqCst);
        self.handoff_state()
            .chunks_pending
            .store(true, Ordering::SeqCst);
        self.handoff_state().drain_wake.notify_one();
    }

    /// The `epoch` of this node's replica id for partition `p` (see the module docs).
    pub(crate) fn replica_epoch(&self, p: PartitionId) -> u64 {
        self.handoff_state()
            .ownership
            .lock()
            .regained
            .get(&p)
            .copied()
            .unwrap_or(0)
    }

    /// Marks the node for a handoff round if it does not own `key`.
    pub(crate) fn note_if_not_owned(&self, key: &[u8]) {
        let p = self.layout().ring().partition_of(key);
        if !self.holds(self.id(), p, key) {
            self.handoff_state()
                .drain_needed
                .store(true, Ordering::SeqCst);
        }
    }

    /// The first `n_val` replicas of partition `p` in the previous layout, while a handoff
    /// runs (else none).
    pub(crate) fn previous_replicas(&self, p: PartitionId, n_val: u32) -> Vec<NodeId> {
        let v = self.kernel().view.read();
        match &v.meta.previous {
            Some(prev) => prev
                .replicas(p)
                .iter()
                .take(n_val as usize)
                .copied()
                .collect(),
            None => Vec::new(),
        }
    }

    /// Starts GETs of `key` at its previous owners that are not in `apl` (none when no
    /// handoff is running).
    pub(crate) fn previous_owners(
        &self,
        key: &[u8],
        p: PartitionId,
        n_val: u32,
        apl: &Preflist,
        deadline: Instant,
    ) -> PreviousReads {
        let owners: Vec<NodeId> = self
            .previous_replicas(p, n_val)
            .into_iter()
            .filter(|&n| apl.get(n).is_none())
            .collect();
        if owners.is_empty() {
            return PreviousReads {
                rx: None,
                expected: 0,
            };
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let mut expected = 0;
        for owner in owners {
            if owner == self.id() {
                let _ = tx.send(self.kernel().store.get(key).ok().flatten());
                expected += 1;
            } else if self.is_up(owner) {
                let (t, tx, key) = (self.kernel().transport.clone(), tx.clone(), key.to_vec());
                tokio::spawn(async move {
                    let timeout = deadline.saturating_duration_since(Instant::now());
                    let msg = Msg::Eventual(EventualMsg::Get {
                        key,
                        hint_for: None,
                    });
                    let o = match t.request(owner, msg, timeout).await {
                        Ok(Msg::Eventual(EventualMsg::GetReply { object, .. })) => object,
                        _ => None,
                    };
                    let _ = tx.send(o);
                });
                expected += 1;
            }
        }
        PreviousReads {
            rx: Some(rx),
            expected,
        }
    }

    /// A peer's handoff batch: merge each object (a repair path) and acknowledge.
    pub(crate) fn accept_handoff(&self, items: Vec<AaeItem>) -> Msg {
        for AaeItem { key, object } in items {
            let Some(o) = object else { continue };
            if crate::is_reserved_key(&key) {
                continue;
            }
            let (allow_mult, _) = self.bucket_params(&key);
            if let Err(e) = self.apply(&key, &o, None, allow_mult) {
                return Msg::Error(RemoteError::Storage(e.to_string()));
            }
        }
        Msg::Handoff(HandoffMsg::Ack)
    }

    /// One ownership-handoff round (normally run by the background task after each layout
    /// change and every `handoff_interval`): if the node may hold objects it does not own,
    /// scan them out, send each to its owners and delete it once all acknowledged; then, if
    /// every one was delivered while a handoff is running, tell the claimant (objects changed
    /// by writes that arrived meanwhile are deleted in later rounds: under joint quorums
    /// those writes reached the new owners too). Returns the number of objects handed off
    /// (and deleted).
    pub async fn ownership_round(&self) -> Result<usize> {
        let (version, epoch, running, claimant) = {
            let v = self.kernel().view.read();
            let m = &v.meta;
            (
                m.version,
                m.layout.epoch(),
                m.previous.is_some(),
                m.claimant(),
            )
        };
        if version == 0 {
            return Ok(0);
        }
        let mut handed = 0;
        let mut complete = true;
        // Set again by writes of keys not owned here, and by objects not yet deleted.
        if self
            .handoff_state()
            .drain_needed
            .swap(false, Ordering::SeqCst)
        {
            let mut after: Option<Bytes> = None;
            loop {
                let (rows, next) = self
                    .kernel()
                    .store
                    .objects_after(after.as_deref(), SCAN_PAGE)?;
                let me = self.id();
                let orphans: Vec<(Bytes, Object)> = rows
                    .into_iter()
                    .filter(|(k, _)| {
                        let p = self.layout().ring().partition_of(k);
                        !self.holds(me, p, k)
                    })
                    .collect();
                if !orphans.is_empty() {
                    let (n, all) = self.hand_off(orphans).await?;
                    handed += n;
                    complete &= all;
                }
                match next {
                    Some(k) => after = Some(k),
                    None => break,
                }
            }
            if !complete {
                self.handoff_state()
                    .drain_needed
                    .store(true, Ordering::SeqCst);
            }
        }
        if complete && running {
            if claimant == self.id() {
                self.on_drained(self.id(), epoch);
            } else {
                let _ = self.kernel().transport.send(
                    claimant,
                    Msg::Kernel(KernelMsg::Drained {
                        from: self.id(),
                        epoch,
                    }),
                );
            }
        }
        if running && claimant == self.id() {
            self.maybe_complete_handoff(epoch);
        }
        Ok(handed)
    }

    /// Sends `orphans` to their owners; deletes each one every owner acknowledged (if it did
    /// not change meanwhile). Returns how many were deleted and whether every one was
    /// delivered to all its owners.
    async fn hand_off(&self, orphans: Vec<(Bytes, Object)>) -> Result<(usize, bool)> {
        let me = self.id();
        // Owners of each key (never this node: it does not own them).
        let owners: Vec<Vec<NodeId>> = orphans
            .iter()
            .map(|(k, _)| {
                let (_, n_val) = self.bucket_params(k);
                let l = self.layout();
                let p = l.ring().partition_of(k);
                l.replicas(p)
                    .iter()
                    .take(n_val as usize)
                    .copied()
                    .filter(|&n| n != me)
                    .collect()
            })
            .collect();
        let mut targets: BTreeSet<NodeId> = owners.iter().flatten().copied().collect();
        targets.retain(|&n| self.is_up(n));
        // Per key, the owners that acknowledged it.
        let mut acked: Vec<BTreeSet<NodeId>> = vec![BTreeSet::new(); orphans.len()];
        for &target in &targets {
            let mine: Vec<usize> = (0..orphans.len())
                .filter(|&i| owners[i].contains(&target))
                .collect();
            let mut start = 0;
            while start < mine.len() {
                let mut bytes = 0;
                let mut end = start;
                while end < mine.len() && end - start < HANDOFF_BATCH_KEYS {
                    bytes += encode_object(&orphans[mine[end]].1).len();
                    end += 1;
                    if bytes >= HANDOFF_BATCH_BYTES {
                        break;
                    }
                }
                let items = mine[start..end]
                    .iter()
                    .map(|&i| AaeItem {
                        key: orphans[i].0.to_vec(),
                        object: Some(orphans[i].1.clone()),
                    })
                    .collect();
                let r = self
                    .kernel()
                    .transport
                    .request(
                        target,
                        Msg::Handoff(HandoffMsg::Objects { items }),
                        self.kernel().cfg.handoff_timeout,
                    )
                    .await;
                match r {
                    Ok(Msg::Handoff(HandoffMsg::Ack)) => {
                        for &i in &mine[start..end] {
                            acked[i].insert(target);
                        }
                        let c = &self.kernel().counters;
                        c.handoff_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                    }
                    other => {
                        tracing::debug!(node = %me, to = %target, reply = ?other, "ownership handoff transfer failed");
                        break;
                    }
                }
                start = end;
            }
        }
        let mut deleted = 0;
        let mut delivered = true;
        // Deletes happen under the metadata read lock: a layout installed while the
        // transfers ran may have given a key back to this node (then it must stay), and
        // `deleted_from` must be updated before the next layout is installed, or a regained
        // partition would keep its old replica id and reissue dots.
        let view = self.kernel().view.read();
        for (i, (k, o)) in orphans.iter().enumerate() {
            if owners[i].is_empty() || owners[i].iter().any(|n| !acked[i].contains(n)) {
                delivered = false;
                continue;
            }
            let (b, _) = bucket_and_key(k);
            let p = view.meta.layout.ring().partition_of(k);
            let n_val = view.buckets.resolve(b, &Props::default()).n_val as usize;
            if view
                .meta
                .layout
                .replicas(p)
                .iter()
                .take(n_val)
                .any(|&n| n == me)
            {
                continue;
            }
            if self.kernel().store.remove_if_unchanged(k, o)? {
                self.handoff_state().ownership.lock().deleted_from.insert(p);
                deleted += 1;
            } else {
                // Changed since it was sent: by a write that (with joint quorums) also
                // reached the new owners. Delete it in a later round.
                self.handoff_state()
                    .drain_needed
                    .store(true, Ordering::SeqCst);
            }
        }
        drop(view);
        self.kernel()
            .counters
            .ownership_handoffs
            .fetch_add(deleted as u64, Ordering::Relaxed);
        Ok((deleted, delivered))
    }

    /// Claimant: `peer` reports it holds nothing it does not own under layout `epoch`.
    pub(crate) fn on_drained(&self, peer: NodeId, epoch: u64) {
        self.handoff_state()
            .ownership
            .lock()
            .drained
            .of(epoch)
            .done
            .insert(peer);
        self.maybe_complete_handoff(epoch);
    }

    /// How long the claimant waits for a node its detector calls down before ending a
    /// handoff without it: a node that just became claimant (a rejoin) has heard nobody yet.
    fn down_grace(&self) -> std::time::Duration {
        self.kernel().cfg.heartbeat_interval * 10 + self.kernel().cfg.handoff_interval * 2
    }

    /// Claimant: publishes [`MetaChange::HandoffComplete`] once every node of the old and the
    /// new layout has reported done — or, after [`Self::down_grace`], every one the detector
    /// says is up (a dead node's leftovers are handed off whenever it returns).
    fn maybe_complete_handoff(&self, epoch: u64) {
        let required: BTreeSet<NodeId> = {
            let v = self.kernel().view.read();
            let m = &v.meta;
            let Some(prev) = &m.previous else { return };
            if m.claimant() != self.id() || m.layout.epoch() != epoch {
                return;
            }
            let all = m.layout.topology().members().iter();
            all.chain(prev.topology().members()).map(|x| x.id).collect()
        };
        let pending: Vec<NodeId> = {
            let mut o = self.handoff_state().ownership.lock();
            let d = o.drained.of(epoch);
            let waited = Instant::now().duration_since(d.since) >= self.down_grace();
            let done = d.done.clone();
            drop(o);
            required
                .into_iter()
                .filter(|n| !done.contains(n))
                .filter(|&n| n == self.id() || !waited || self.is_up(n))
                .collect()
        };
        if pending.is_empty() {
            match self.claimant_apply(&MetaChange::HandoffComplete { epoch }) {
                Ok(m) => {
                    tracing::info!(node = %self.id(), epoch, version = m.version, "ownership handoff complete")
                }
                Err(e) => {
                    tracing::debug!(node = %self.id(), error = %e, "handoff completion refused")
                }
            }
        }
    }

    /// The nodes the claimant still waits for before it ends the running handoff (empty when
    /// none runs or this node is not the claimant).
    pub fn handoff_pending(&self) -> Vec<NodeId> {
        let v = self.kernel().view.read();
        let m = &v.meta;
        let Some(prev) = &m.previous else {
            return Vec::new();
        };
        let epoch = m.layout.epoch();
        let o = self.handoff_state().ownership.lock();
        let done = (o.drained.epoch == epoch).then_some(&o.drained.done);
        let all = m.layout.topology().members().iter();
        all.chain(prev.topology().members())
            .map(|x| x.id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|n| !done.is_some_and(|d| d.contains(n)))
            .collect()
    }
}
