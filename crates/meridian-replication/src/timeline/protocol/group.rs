//! Atomic groups on timeline buckets (MULTI/EXEC and WATCH): several records checked and
//! written at once, all or nothing, by the one master they share.
//!
//! **How a group commits** ([`Node::tl_commit_group`]). The caller has read every record with
//! `read_latest` and turned what it read into [`GroupItem`]s: each record's version as the
//! precondition (insert-if-absent for a key without a record) and, for the keys it writes,
//! the new content. Every key must be in one partition.
//! 1. If every record names one master (and an absent key's insert arbiter is that master
//!    too), the whole group goes to it as one [`TimelineMsg::Group`].
//! 2. Otherwise the records are **gathered** first: the group's DC is its first record's
//!    master's DC; each record mastered elsewhere is rewritten unchanged by its master with
//!    the mastership handed to the first up replica of that DC, and each absent key whose
//!    arbiter is elsewhere gets a tombstone record mastered there. Versions change, so the
//!    caller reads again ([`GroupOutcome::Moved`]).
//!
//! **What the master guarantees** ([`Node::tl_master_group`]): under every record's stripe lock
//! at once it checks that it masters each record (or arbitrates each absent one) and that
//! every precondition holds; only then does it issue a record for each written item, with the
//! same rules as a single write ([`master_write`], [`settle_issued`]), and store them all
//! before releasing any lock. A reader at the master (`read_latest`, another group) sees all
//! of a group or none of it. Propagation then carries each record as a single write's.
//!
//! A group is not retried after it was sent: a lost reply is "may have applied", as for any
//! timeline write.
//!
//! [`master_write`]: crate::timeline::master_write

use super::master::settle_issued;
use super::{Placement, TlIssueKind, TlTrace, lossy};
use crate::bucket::BucketType;
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node, RemoteError};
use crate::timeline::messages::GroupItem;
use crate::timeline::{
    Content, Expect, Record, ReplicaRef, TimelineMsg, Version, WriteOp, WriteRefusal, check_expect,
    master_write, new_master_in,
};
use bytes::Bytes;
use meridian_core::{DcId, NodeId};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The most items one group may hold (a peer's larger group is refused).
pub const MAX_GROUP_ITEMS: usize = 4_096;

/// How a group commit ended when nothing failed outright.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupOutcome {
    /// Every item applied; the records issued, `None` for check-only items.
    Applied(Vec<Option<Record>>),
    /// A precondition failed: a record changed since it was read. Nothing applied.
    Conflict,
    /// The records were not all at one master (they were gathered now, or a mastership moved
    /// meanwhile). Nothing of the group applied: read again and retry.
    Moved,
}

impl Node {
    /// Commits `items` (see the module docs); `read[i]` is the record `items[i]`'s key had when
    /// it was read (`None`: absent).
    ///
    /// # Errors
    /// `unsupported` when the keys span partitions or repeat, or `read` does not hold one
    /// record per item; the errors of a timeline write (`master_unavailable`,
    /// `object_too_large`, ...).
    pub async fn tl_commit_group(
        &self,
        items: Vec<GroupItem>,
        read: &[Option<Record>],
    ) -> Result<GroupOutcome> {
        let Some(first) = items.first() else {
            return Ok(GroupOutcome::Applied(Vec::new()));
        };
        let pl = self.tl_check(&first.key)?;
        self.check_group(&items, &pl)?;
        if read.len() != items.len() {
            return Err(ReplicationError::Unsupported {
                command: "an atomic group".into(),
                bucket_type: BucketType::Timeline,
                hint: format!("; {} items but {} records read", items.len(), read.len()),
            });
        }
        let masters: Vec<ReplicaRef> = read
            .iter()
            .map(|r| r.as_ref().map_or(pl.arbiter(), |r| r.master))
            .collect();
        let target = masters[0];
        if masters.iter().all(|m| m.node == target.node) {
            return self.tl_send_group(&pl, target, items, None).await;
        }
        self.tl_gather(&pl, &items, read).await?;
        Ok(GroupOutcome::Moved)
    }

    /// Hands every record of the group to one master (module docs, step 2).
    async fn tl_gather(
        &self,
        pl: &Placement,
        items: &[GroupItem],
        read: &[Option<Record>],
    ) -> Result<()> {
        let dc = read
            .iter()
            .flatten()
            .map(|r| r.master.dc)
            .next()
            .unwrap_or(self.dc());
        let up = |n: NodeId| self.is_up(n);
        let Some(home) = new_master_in(dc, &pl.replicas, up) else {
            return Err(self.group_unavailable(&items[0].key, dc));
        };
        for (item, rec) in items.iter().zip(read) {
            let (to, expect, content) = match rec {
                Some(r) if r.master.node == home.node => continue,
                Some(r) => (r.master, Expect::Version(r.ver), r.content.clone()),
                None if pl.arbiter().node == home.node => continue,
                None => (pl.arbiter(), Expect::Absent, Content::Tombstone),
            };
            let one = vec![GroupItem {
                key: item.key.clone(),
                expect,
                content: Some(content),
            }];
            // A lost race here only means another round: the caller reads again.
            match self.tl_send_group(pl, to, one, Some(dc)).await {
                Ok(_) | Err(ReplicationError::MasterUnavailable { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn group_unavailable(&self, key: &[u8], dc: DcId) -> ReplicationError {
        ReplicationError::MasterUnavailable {
            key: lossy(key),
            master: self.id(),
            dc,
            reason: "no replica of the group's keys is up in the DC of their master".into(),
            maybe_applied: false,
        }
    }

    /// Refuses a group whose keys repeat or span partitions, or which is too large.
    fn check_group(&self, items: &[GroupItem], pl: &Placement) -> Result<()> {
        let refuse = |why: String| ReplicationError::Unsupported {
            command: "an atomic group".into(),
            bucket_type: BucketType::Timeline,
            hint: format!("; {why}"),
        };
        if items.len() > MAX_GROUP_ITEMS {
            return Err(refuse(format!(
                "it has {} keys, at most {MAX_GROUP_ITEMS}",
                items.len()
            )));
        }
        let mut keys: Vec<&[u8]> = items.iter().map(|i| &i.key[..]).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(refuse("a key appears twice".into()));
        }
        for item in items {
            if self.tl_check(&item.key)?.partition != pl.partition {
                return Err(refuse(format!(
                    "key '{}' is in another partition than '{}'; keep a transaction's keys \
                     under one hash tag",
                    lossy(&item.key),
                    lossy(&items[0].key)
                )));
            }
            if let Some(v) = item.content.as_ref().and_then(Content::value)
                && v.len() > self.kernel().cfg.object_max
            {
                return Err(ReplicationError::ObjectTooLarge {
                    len: v.len(),
                    max: self.kernel().cfg.object_max,
                });
            }
        }
        Ok(())
    }

    /// Sends a group to `to` (or runs it here) and sorts its answer.
    async fn tl_send_group(
        &self,
        pl: &Placement,
        to: ReplicaRef,
        items: Vec<GroupItem>,
        move_to: Option<DcId>,
    ) -> Result<GroupOutcome> {
        let key = items[0].key.clone();
        let r = if to.node == self.id() {
            self.tl_master_group(items, self.dc(), move_to).await
        } else if !self.is_up(to.node) {
            return Err(ReplicationError::MasterUnavailable {
                key: lossy(&key),
                master: to.node,
                dc: to.dc,
                reason: "the failure detector marks it down".into(),
                maybe_applied: false,
            });
        } else {
            let msg = Msg::Timeline(TimelineMsg::Group {
                items,
                origin_dc: self.dc(),
                move_to,
            });
            let timeout = Duration::from_millis(pl.props.master_timeout_ms);
            match self.kernel().transport.request(to.node, msg, timeout).await {
                Ok(Msg::Timeline(TimelineMsg::GroupReply(r))) => r,
                Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
                Ok(other) => Err(ReplicationError::MasterUnavailable {
                    key: lossy(&key),
                    master: to.node,
                    dc: to.dc,
                    reason: format!("unexpected reply {other:?}"),
                    maybe_applied: true,
                }),
                Err(e) => Err(ReplicationError::MasterUnavailable {
                    key: lossy(&key),
                    master: to.node,
                    dc: to.dc,
                    reason: e.to_string(),
                    maybe_applied: true,
                }),
            }
        };
        match r {
            Ok(records) => Ok(GroupOutcome::Applied(records)),
            Err(
                ReplicationError::VersionMismatch { .. } | ReplicationError::AlreadyExists { .. },
            ) => Ok(GroupOutcome::Conflict),
            Err(ReplicationError::NotMaster { .. }) => Ok(GroupOutcome::Moved),
            Err(e) => Err(e),
        }
    }

    /// Serves a [`TimelineMsg::Group`] (module docs): all or nothing, as the master of every
    /// record in it.
    pub(crate) async fn tl_master_group(
        &self,
        items: Vec<GroupItem>,
        origin_dc: DcId,
        move_to: Option<DcId>,
    ) -> Result<Vec<Option<Record>>> {
        let Some(first) = items.first() else {
            return Ok(Vec::new());
        };
        let pl = self.tl_placement(&first.key)?;
        self.check_group(&items, &pl)?;
        self.tl_check_majority(&first.key, &pl)?;
        for item in &items {
            self.tl_confirm(&item.key, &pl).await?;
        }
        let me = self.me();
        let now_us = self.kernel().clock.now().micros();
        let up = |n: NodeId| self.is_up(n);
        let keys: Vec<&[u8]> = items.iter().map(|i| &i.key[..]).collect();
        let fresh: Vec<bool> = {
            let issued = self.tl_state().issued_here.lock();
            keys.iter().map(|k| !issued.contains(*k)).collect()
        };
        let mut kinds = Vec::with_capacity(items.len());
        let decided = self.tl_state().store.write_group(&keys, |current| {
            for (item, cur) in items.iter().zip(current) {
                self.check_group_item(item, cur.as_ref(), &pl, me)?;
            }
            let mut out = Vec::with_capacity(items.len());
            for ((item, cur), &fresh) in items.iter().zip(current).zip(&fresh) {
                let Some(content) = item.content.clone() else {
                    out.push(None);
                    continue;
                };
                let op = WriteOp {
                    content,
                    origin_dc,
                    expect: item.expect,
                };
                let mut r = master_write(cur.as_ref(), op, &pl.props, me, now_us, &pl.replicas, up)
                    .map_err(refusal)?;
                settle_issued(&mut r, cur.as_ref(), origin_dc, &pl, &up, fresh, now_us);
                if let Some(m) = move_to.and_then(|dc| new_master_in(dc, &pl.replicas, up)) {
                    r.master = m;
                }
                kinds.push(if cur.is_none() {
                    TlIssueKind::Insert
                } else {
                    TlIssueKind::Write
                });
                out.push(Some(r));
            }
            Ok::<_, ReplicationError>(out)
        })??;
        self.after_group(&items, &decided, &kinds, &pl, origin_dc)
            .await?;
        Ok(decided)
    }

    /// The checks of one item under the group's locks: this node masters the record (or
    /// arbitrates its insert) and the precondition holds.
    fn check_group_item(
        &self,
        item: &GroupItem,
        cur: Option<&Record>,
        pl: &Placement,
        me: ReplicaRef,
    ) -> Result<()> {
        match cur {
            Some(r) if r.master.node != me.node => {
                return Err(ReplicationError::NotMaster {
                    hint: r.master,
                    await_ver: r.ver,
                });
            }
            None if pl.arbiter().node != me.node => {
                return Err(ReplicationError::NotMaster {
                    hint: pl.arbiter(),
                    await_ver: Version::new(0, 0, 0),
                });
            }
            _ => {}
        }
        check_expect(item.expect, cur).map_err(refusal)
    }

    /// What follows a group's store, as after a single write: traces, propagation, hot-key
    /// copies, and the acks `timeline_w` asks for.
    async fn after_group(
        &self,
        items: &[GroupItem],
        decided: &[Option<Record>],
        kinds: &[TlIssueKind],
        pl: &Placement,
        origin_dc: DcId,
    ) -> Result<()> {
        let me = self.me();
        let written = items
            .iter()
            .zip(decided)
            .filter_map(|(i, r)| Some((i, r.as_ref()?)));
        for ((item, record), &kind) in written.zip(kinds) {
            let key = Bytes::copy_from_slice(&item.key);
            self.mark_confirmed(&key, record);
            if record.master.node != me.node {
                self.tl_state()
                    .counters
                    .migrations
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.trace(TlTrace::Issued {
                key: key.clone(),
                record: record.clone(),
                kind,
                by: me,
                origin_dc,
            });
            self.trace(TlTrace::Applied {
                key: key.clone(),
                node: me.node,
                record: record.clone(),
            });
            self.tl_enqueue(&key, record, pl);
        }
        self.tl_state().applied.notify_waiters();
        for (item, record) in items.iter().zip(decided) {
            let Some(record) = record else { continue };
            let key = Bytes::copy_from_slice(&item.key);
            self.invalidate_if_hot(&key).await;
            if pl.props.timeline_w > 1 {
                self.tl_await_acks(&key, record, pl).await?;
            }
        }
        Ok(())
    }
}

/// A pure-core refusal as the protocol's error.
fn refusal(r: WriteRefusal) -> ReplicationError {
    match r {
        WriteRefusal::NotMaster { hint, await_ver } => {
            ReplicationError::NotMaster { hint, await_ver }
        }
        WriteRefusal::VersionMismatch { current } => ReplicationError::VersionMismatch { current },
        WriteRefusal::AlreadyExists { current } => ReplicationError::AlreadyExists { current },
    }
}
