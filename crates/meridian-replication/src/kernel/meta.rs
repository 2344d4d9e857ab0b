//! The kernel's side of cluster metadata: adopting a newer document (and telling the
//! protocols through their adoption hooks), the claimant's side of a change, and pushing the
//! document to peers whose heartbeats show an older version.

use super::{Node, View};
use crate::error::{ReplicationError, Result};
use crate::membership::{ClusterMeta, MetaChange};
use crate::msg::{KernelMsg, Msg};
use meridian_cluster::Layout;
use meridian_core::{NodeId, PartitionId};
use parking_lot::RwLockWriteGuard;
use std::collections::BTreeSet;

impl Node {
    /// Runs `hook` with the current metadata now and with every document adopted later (in
    /// adoption order, before the node acts on it): front ends keep address books and member
    /// tables with it.
    pub fn on_meta(&self, hook: impl Fn(&ClusterMeta) + Send + Sync + 'static) {
        hook(&self.kernel().view.read().meta);
        self.kernel().hooks.0.lock().push(Box::new(hook));
    }

    /// Applies a membership or bucket change to the whole cluster: sent to the claimant
    /// (the lowest node id of the layout), which validates it, publishes the next metadata
    /// version to every member and answers it; this node adopts it before returning.
    ///
    /// # Errors
    /// `membership_refused` (with the reason), `invalid_bucket`, `claimant_unreachable`,
    /// `not_joined`.
    pub async fn change(&self, change: MetaChange) -> Result<ClusterMeta> {
        self.check_joined()?;
        let claimant = self.kernel().view.read().meta.claimant();
        if claimant == self.id() {
            return self.claimant_apply(&change);
        }
        let unreachable = |reason: String| ReplicationError::ClaimantUnreachable {
            node: claimant,
            reason,
        };
        let timeout = self.kernel().cfg.handoff_timeout;
        match self
            .kernel()
            .transport
            .request(claimant, Msg::Kernel(KernelMsg::Change(change)), timeout)
            .await
        {
            Ok(Msg::Kernel(KernelMsg::ChangeReply(Ok(meta)))) => {
                self.adopt((*meta).clone());
                Ok(*meta)
            }
            Ok(Msg::Kernel(KernelMsg::ChangeReply(Err(e)))) => Err(e),
            Ok(other) => Err(unreachable(format!("unexpected reply {other:?}"))),
            Err(e) => Err(unreachable(e.to_string())),
        }
    }

    /// Sends `meta` to every other member the failure detector sees up and waits until each
    /// answered that it follows it or a later version, or the handoff timeout passed: after a
    /// change, every reachable member acts on it (a member down meanwhile adopts it from its
    /// peers' heartbeats when it is back). Returns the members that did not confirm.
    pub async fn sync_members(&self, meta: &ClusterMeta) -> Vec<NodeId> {
        let peers: Vec<NodeId> = meta
            .members
            .iter()
            .map(|m| m.id)
            .filter(|&id| id != self.id() && self.is_up(id))
            .collect();
        let timeout = self.kernel().cfg.handoff_timeout;
        let transport = &self.kernel().transport;
        let acks = futures_util::future::join_all(peers.iter().map(|&p| {
            transport.request(
                p,
                Msg::Kernel(KernelMsg::Sync(Box::new(meta.clone()))),
                timeout,
            )
        }))
        .await;
        peers
            .into_iter()
            .zip(acks)
            .filter(
                |(_, r)| !matches!(r, Ok(Msg::Kernel(KernelMsg::Synced(v))) if *v >= meta.version),
            )
            .map(|(p, _)| p)
            .collect()
    }

    /// The claimant's side of [`EventualNode::change`]: apply, adopt, publish.
    pub(crate) fn claimant_apply(&self, change: &MetaChange) -> Result<ClusterMeta> {
        let view = self.kernel().view.write();
        if view.meta.version == 0 {
            return Err(ReplicationError::NotJoined { node: self.id() });
        }
        let claimant = view.meta.claimant();
        if claimant != self.id() {
            return Err(ReplicationError::MembershipRefused {
                reason: format!(
                    "{} is not the claimant; send changes to {claimant}",
                    self.id()
                ),
            });
        }
        if matches!(change, MetaChange::Join(_) | MetaChange::Leave(_)) {
            let b = &view.buckets;
            if let Some(name) = b.names().find(|n| {
                b.get(n)
                    .is_some_and(|p| p.bucket_type == crate::bucket::BucketType::Transactional)
            }) {
                return Err(ReplicationError::MembershipRefused {
                    reason: format!(
                        "bucket {name} is transactional: its data lives at each partition's \
                         leader, and a membership change would move leadership without it \
                         (leader handoff is not built yet); the cluster's membership is fixed \
                         while a transactional bucket exists"
                    ),
                });
            }
        }
        let next = view.meta.apply(change, self.id())?;
        let mut recipients: BTreeSet<NodeId> = view.meta.members.iter().map(|m| m.id).collect();
        recipients.extend(next.members.iter().map(|m| m.id));
        tracing::info!(node = %self.id(), version = next.version, epoch = next.layout.epoch(),
            change = ?change, "cluster metadata changed");
        if !self.install(view, next.clone()) {
            return Err(ReplicationError::MembershipRefused {
                reason: "the new metadata does not validate".into(),
            });
        }
        for peer in recipients.into_iter().filter(|&p| p != self.id()) {
            let _ = self
                .kernel()
                .transport
                .send(peer, Msg::Kernel(KernelMsg::Meta(Box::new(next.clone()))));
        }
        Ok(next)
    }

    /// Adopts `meta` if it supersedes the node's document; returns whether it did.
    pub fn adopt(&self, meta: ClusterMeta) -> bool {
        let view = self.kernel().view.write();
        if !meta.supersedes(&view.meta) {
            return false;
        }
        self.install(view, meta)
    }

    /// Replaces the document under the held lock, then (lock released) updates ownership
    /// bookkeeping and anti-entropy trees, runs the hooks and schedules a handoff round.
    fn install(&self, mut view: RwLockWriteGuard<'_, View>, meta: ClusterMeta) -> bool {
        let buckets = match meta.bucket_registry() {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(node = %self.id(), version = meta.version, error = %e,
                    "refusing cluster metadata whose buckets do not validate");
                return false;
            }
        };
        let me = self.id();
        let before = held(&view.meta.layout, me);
        let after = held(&meta.layout, me);
        let layout_changed = view.meta.layout != meta.layout;
        if layout_changed {
            // Before anyone can coordinate with the new layout (the write lock is held).
            self.ownership_regain(&after, meta.layout.epoch());
        }
        self.kernel().has_txn_buckets.store(
            buckets.has_transactional(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.kernel().has_extra_copies.store(
            buckets.has_extra_copies(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.kernel()
            .has_s3_buckets
            .store(buckets.has_s3(), std::sync::atomic::Ordering::Relaxed);
        let marks = crate::truncation::marks::Marks::of(&meta);
        let truncated = *self.kernel().marks.read() != marks;
        if truncated {
            // Before the new document is visible: no write this node coordinates from now on
            // is stamped at or below a mark it knows.
            self.kernel().floored.stay_above(marks.highest());
            *self.kernel().marks.write() = marks;
        }
        view.meta = meta;
        view.buckets = buckets;
        let snapshot = view.meta.clone();
        drop(view);

        if let Some(trees) = self.kernel().store.trees()
            && after != before
        {
            let added = trees.set_held(&after);
            if let Err(e) = self
                .kernel()
                .store
                .record_partitions(&added, self.kernel().cfg.anti_entropy_scan_page)
            {
                tracing::warn!(node = %me, error = %e, "anti-entropy trees of gained partitions incomplete");
            }
        }
        for hook in self.kernel().hooks.0.lock().iter() {
            hook(&snapshot);
        }
        if layout_changed || snapshot.previous.is_some() {
            self.schedule_drain();
        }
        true
    }

    /// A peer's heartbeat said its metadata version: send ours if it is behind.
    pub(crate) fn on_peer_version(&self, peer: NodeId, version: u64) {
        let meta = {
            let v = self.kernel().view.read();
            if v.meta.version <= version || v.meta.version == 0 {
                return;
            }
            v.meta.clone()
        };
        let _ = self
            .kernel()
            .transport
            .send(peer, Msg::Kernel(KernelMsg::Meta(Box::new(meta))));
    }

    /// Refuses client requests until the node has a cluster's metadata.
    pub(crate) fn check_joined(&self) -> Result<()> {
        if self.kernel().view.read().meta.version == 0 {
            return Err(ReplicationError::NotJoined { node: self.id() });
        }
        Ok(())
    }
}

/// The partitions whose replica list names `me`.
pub(crate) fn held(layout: &Layout, me: NodeId) -> BTreeSet<PartitionId> {
    layout
        .ring()
        .partitions()
        .filter(|&p| layout.replicas(p).contains(&me))
        .collect()
}
