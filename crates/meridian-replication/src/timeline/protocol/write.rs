//! The coordinator's side of timeline writes (spec §3): route a write, test-and-set or delete
//! to the hinted master (or the insert arbiter), retry once at a `not_master` hint, and report
//! "may have applied" for every failure after the request was sent.

use super::read::MASTER_REDIRECTS;
use super::{Ask, Placement, Target, TlWriteResult, WriteId, WriteMsg, lossy};
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node};
use crate::timeline::{Content, Expect, Record, ReplicaRef, TimelineMsg, Version};
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Node {
    /// A timeline write of `key` (spec §2–§3): `content` (a tombstone deletes) under the
    /// precondition `expect`. Returns the record the master issued.
    ///
    /// # Errors
    /// `version_mismatch` / `already_exists` when the precondition fails;
    /// `master_unavailable` / `insert_arbiter_unavailable` when the master (arbiter) is down
    /// or silent (with "may have applied" when the request was sent); `object_too_large`;
    /// the input errors of [`Node::tl_get`].
    pub async fn tl_put(
        &self,
        key: &[u8],
        content: Content,
        expect: Expect,
    ) -> Result<TlWriteResult> {
        let pl = self.tl_check(key)?;
        if let Some(v) = content.value()
            && v.len() > self.kernel().cfg.object_max
        {
            return Err(ReplicationError::ObjectTooLarge {
                len: v.len(),
                max: self.kernel().cfg.object_max,
            });
        }
        let found = self.master_target(key, &pl).await?;
        let (target, hint_ver) = self.tl_live_target(key, &pl, found).await?;
        let op = WriteMsg {
            id: WriteId {
                node: self.id(),
                incarnation: self.kernel().cfg.incarnation,
                seq: self.tl_state().next_write.fetch_add(1, Ordering::Relaxed),
            },
            content,
            expect,
            origin_dc: self.dc(),
        };
        let mut to = target.replica();
        let mut r = self
            .tl_send_write(key, &pl, target, to, &op, 0, hint_ver)
            .await;
        for _ in 1..MASTER_REDIRECTS {
            let Err(ReplicationError::NotMaster { hint, await_ver }) = r else {
                break;
            };
            to = hint;
            r = self
                .tl_send_write(
                    key,
                    &pl,
                    Target::Master(hint),
                    hint,
                    &op,
                    1,
                    Some(await_ver),
                )
                .await;
        }
        self.forget_master_on_failure(key, &r);
        let (record, issued_by) = match r {
            Err(ReplicationError::NotMaster { hint, .. }) => {
                return Err(ReplicationError::MasterUnavailable {
                    key: lossy(key),
                    master: hint.node,
                    dc: hint.dc,
                    reason: "the mastership is moving: retry".into(),
                    maybe_applied: false,
                });
            }
            r => r?,
        };
        self.tl_hand_to_master(key, &record, issued_by, &pl).await;
        if !pl.holds(self.id()) {
            self.remember_master(key, &record);
        }
        let remote = to.dc != self.dc() || issued_by.dc != self.dc();
        let c = &self.tl_state().counters;
        let n = if remote {
            &c.remote_writes
        } else {
            &c.local_writes
        };
        n.fetch_add(1, Ordering::Relaxed);
        Ok(TlWriteResult {
            record,
            issued_by,
            remote,
        })
    }

    /// Sends a write to `to` (or runs it here) and maps transport failures to
    /// `master_unavailable` / `insert_arbiter_unavailable`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn tl_send_write(
        &self,
        key: &[u8],
        pl: &Placement,
        target: Target,
        to: ReplicaRef,
        op: &WriteMsg,
        hops: u8,
        await_ver: Option<Version>,
    ) -> Result<(Record, ReplicaRef)> {
        if to.node == self.id() {
            return Box::pin(self.tl_master_write(key, op.clone(), hops, await_ver)).await;
        }
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let msg = Msg::Timeline(TimelineMsg::Write {
            id: op.id,
            key: key.to_vec(),
            content: op.content.clone(),
            expect: op.expect,
            origin_dc: op.origin_dc,
            hops,
            await_ver,
        });
        let ask = Ask {
            key,
            pl,
            target,
            to,
            write: true,
        };
        match self.tl_ask(&ask, msg, timeout).await {
            Ok(Msg::Timeline(TimelineMsg::WriteReply(r))) => r,
            Ok(other) => Err(self.unexpected(&ask, &other)),
            Err(e) => Err(e),
        }
    }
}
