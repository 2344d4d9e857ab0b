//! Automatic failover of timeline masters, for buckets with `failover = true` (the spec's §7
//! forced re-master, decided by the failure detector instead of an operator).
//!
//! **When.** A coordinator about to ask a record's master that its detector marks down, while
//! it sees a majority of the cluster's members up, asks the record's **successor** to take it
//! over ([`TimelineMsg::TakeOver`]): the first up replica of the dead master's DC in claim
//! order, else the first up replica of any DC — one rule, so coordinators that agree on who
//! is up pick the same node, and a second request finds the work done.
//!
//! **How.** The successor checks again (the master is down as it sees it, it sees a majority),
//! pulls every reachable primary's copy and keeps the newest, then writes the record in the
//! next master epoch naming itself ([`force_remaster`]): every later record of the old master
//! loses every merge. An absent record needs no takeover: with `failover` the insert arbiter
//! is the first *up* primary.
//!
//! **Guarantees and limits.**
//! - A master (and an arbiter) of a `failover` bucket that does not see a majority of the
//!   members up refuses writes and `read_latest` (`master_unavailable`), so in a partition
//!   only the majority side takes over and writes; with no majority anywhere (an even split)
//!   nobody does, as before.
//! - What the old master acknowledged and had not propagated to any reachable primary is lost
//!   (as with Redis Cluster's asynchronous replicas); `timeline_w = 2` keeps each write on a
//!   second replica before the ack.
//! - Detectors that disagree can, for a moment, let two nodes act: two successors, or the
//!   first primary and the next as arbiters while the first returns. Versions never repeat
//!   (each takes a new master epoch or generation), and the record with the higher precedence
//!   wins the merge; the loser's write is lost, not merged.

use super::{Placement, TlIssueKind, TlTrace, lossy};
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node};
use crate::timeline::{Record, ReplicaRef, TimelineMsg, force_remaster};
use bytes::Bytes;
use meridian_core::NodeId;

/// What a takeover found under the record's lock.
enum Found {
    /// The record's master is not the dead one any more: nothing to do.
    Moved(Record),
    /// No record here.
    Absent,
}

impl Node {
    /// Whether this node sees a majority of the cluster's members up (itself included).
    pub(crate) fn sees_majority(&self) -> bool {
        let layout = self.layout();
        let members = layout.topology().members();
        let up = self.count_up(members.iter().map(|m| m.id));
        up * 2 > members.len()
    }

    /// The `master_unavailable` a master of a `failover` bucket answers when it sees no
    /// majority of the members; `Ok` otherwise (and always on other buckets).
    pub(super) fn tl_check_majority(&self, key: &[u8], pl: &Placement) -> Result<()> {
        if !pl.props.failover || self.sees_majority() {
            return Ok(());
        }
        Err(ReplicationError::MasterUnavailable {
            key: lossy(key),
            master: self.id(),
            dc: self.dc(),
            reason: "this master sees no majority of the cluster's members up, so the other \
                     side may have taken its records over"
                .into(),
            maybe_applied: false,
        })
    }

    /// The replica that takes over from `dead`: the first up replica of its DC in claim
    /// order, else the first up replica.
    fn successor(&self, pl: &Placement, dead: ReplicaRef) -> Option<ReplicaRef> {
        let alive: Vec<ReplicaRef> = pl
            .replicas
            .iter()
            .filter(|r| r.node != dead.node && self.is_up(r.node))
            .copied()
            .collect();
        alive
            .iter()
            .find(|r| r.dc == dead.dc)
            .or(alive.first())
            .copied()
    }

    /// Before asking `master`: if it is down and the bucket fails over, has its successor
    /// take the record over, and returns the record naming the new master (`None`: ask
    /// `master` as usual, and fail as usual).
    pub(super) async fn tl_fail_over(
        &self,
        key: &[u8],
        pl: &Placement,
        master: ReplicaRef,
    ) -> Result<Option<Record>> {
        if !pl.props.failover || self.is_up(master.node) || !self.sees_majority() {
            return Ok(None);
        }
        let Some(to) = self.successor(pl, master) else {
            return Ok(None);
        };
        let (record, _) = if to.node == self.id() {
            self.tl_serve_take_over(key, master.node).await?
        } else {
            let msg = TimelineMsg::TakeOver {
                key: key.to_vec(),
                from: master.node,
            };
            let timeout = std::time::Duration::from_millis(pl.props.master_timeout_ms);
            self.ask_mastership(key, to.node, msg, timeout)
                .await
                .map_err(|e| ReplicationError::MasterUnavailable {
                    key: lossy(key),
                    master: to.node,
                    dc: to.dc,
                    reason: format!("taking over from {} failed: {e}", master.node),
                    maybe_applied: false,
                })??
        };
        self.remember_master(key, &record);
        Ok(Some(record))
    }

    /// Serves a [`TimelineMsg::TakeOver`]: takes the record of `key` over from `from` (see the
    /// module docs), or answers the record as it is when its master is no longer `from`.
    pub(crate) async fn tl_serve_take_over(
        &self,
        key: &[u8],
        from: NodeId,
    ) -> Result<(Record, ReplicaRef)> {
        let pl = self.tl_placement(key)?;
        let refuse = |reason: String| ReplicationError::ForceMasterRefused {
            key: lossy(key),
            reason,
        };
        if !pl.props.failover {
            return Err(refuse(
                "the bucket does not fail over (failover = false)".into(),
            ));
        }
        if from == self.id() || self.is_up(from) {
            return Err(refuse(format!("{from} is up as {} sees it", self.id())));
        }
        if !self.sees_majority() {
            return Err(refuse(format!(
                "{} sees no majority of the members up",
                self.id()
            )));
        }
        self.tl_pull_newest(key, &pl, from).await?;
        let me = self.me();
        let forced = self.tl_state().store.write_with(key, |cur| match cur {
            Some(c) if c.master.node != from => Err(Found::Moved(c.clone())),
            Some(c) => Ok(force_remaster(c, me)),
            None => Err(Found::Absent),
        })?;
        match forced {
            Ok(r) => {
                tracing::warn!(node = %me.node, key = %lossy(key), ver = %r.ver, dead = %from, "took over a record whose master is down");
                self.after_force(key, &r, &pl);
                Ok((r, me))
            }
            Err(Found::Moved(r)) => Ok((r.clone(), r.master)),
            Err(Found::Absent) => Err(refuse(format!("{} holds no record of it", me.node))),
        }
    }

    /// Applies the newest copy of `key` that any reachable primary but `skip` holds.
    async fn tl_pull_newest(&self, key: &[u8], pl: &Placement, skip: NodeId) -> Result<()> {
        let timeout = self.kernel().cfg.tl_confirm_timeout;
        let asks = pl
            .replicas
            .iter()
            .filter(|r| r.node != self.id() && r.node != skip && self.is_up(r.node))
            .map(|r| {
                let msg = Msg::Timeline(TimelineMsg::Read {
                    key: key.to_vec(),
                    latest: false,
                    await_ver: None,
                });
                self.kernel().transport.request(r.node, msg, timeout)
            });
        let copies: Vec<(Vec<u8>, Record)> = futures_util::future::join_all(asks)
            .await
            .into_iter()
            .filter_map(|r| match r {
                Ok(Msg::Timeline(TimelineMsg::ReadReply(Ok(Some(rec))))) => {
                    Some((key.to_vec(), rec))
                }
                _ => None,
            })
            .collect();
        if !copies.is_empty() {
            self.tl_apply(copies)?;
        }
        Ok(())
    }

    /// What follows a forced re-master's store: traces, waiters, propagation.
    pub(super) fn after_force(&self, key: &[u8], r: &Record, pl: &Placement) {
        let me = self.me();
        self.mark_confirmed(key, r);
        let k = Bytes::copy_from_slice(key);
        self.trace(TlTrace::Issued {
            key: k.clone(),
            record: r.clone(),
            kind: TlIssueKind::ForceMaster,
            by: me,
            origin_dc: me.dc,
        });
        self.trace(TlTrace::Applied {
            key: k.clone(),
            node: me.node,
            record: r.clone(),
        });
        self.tl_state().applied.notify_waiters();
        self.tl_enqueue(&k, r, pl);
    }
}
