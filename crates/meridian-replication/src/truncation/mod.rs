//! Bucket truncation: what `FLUSHDB`/`FLUSHALL` mean in cluster mode. A truncation is a
//! *mark* per bucket in the cluster metadata (microseconds, [`ClusterMeta::truncated`]):
//! every value of the bucket written at or before its mark is gone, on every replica, whatever
//! order messages, repairs, hints and anti-entropy arrive in.
//!
//! - **Reads** apply the mark where each protocol loads what it stores: an eventual object
//!   loses its siblings written at or before the mark (their coordinator's `ts_us`; the clock
//!   is kept, so an older copy elsewhere loses them on merge); a timeline record created at or
//!   before it (its version's generation) reads as a tombstone of its version, so the master's
//!   next write is a re-insert in a newer generation; a transactional version committed at or
//!   before it reads as deleted. Nothing written before the flush can come back.
//! - **Writes** stay above every mark: each node's [`FlooredClock`] never reads below the
//!   highest mark it has adopted, so a value written after a node learned of the flush is never
//!   taken for one from before it, whatever the node's clock says.
//! - **The mark** is the highest clock reading of the members that answered
//!   ([`crate::Node::truncate`]), so values written anywhere before the flush began are at or
//!   below it; a member that did not answer (down, partitioned) may hold values stamped by a
//!   clock ahead of the mark: those survive, which is the documented bound.
//! - **Storage** is reclaimed by the expiry sweep, which rewrites what a mark hides (a
//!   value-less object, a tombstone record) page by page; a key stays listed nowhere
//!   meanwhile, since listings read through the marks.
//!
//! A write coordinated by a node that had not adopted the mark yet is concurrent with the flush
//! and may be stamped below it; `truncate` therefore returns only after every reachable member
//! acknowledged the new metadata.

pub mod marks;

pub use marks::{FlooredClock, Marks, SharedMarks};

use crate::error::Result;
use crate::kernel::Node;
use crate::msg::{KernelMsg, Msg};
use futures_util::future::join_all;
use meridian_core::{Clock, NodeId};

impl Node {
    /// Truncates `buckets` (`None`: every registered bucket, which covers every key): what
    /// `FLUSHALL` means in cluster mode. Reads the clock of every member the failure detector
    /// sees up, publishes the highest reading as the mark through the claimant, and returns
    /// once each of them answered that it follows the new metadata or the handoff timeout
    /// passed. A member down meanwhile adopts the document from its peers' heartbeats when it
    /// is back, and serves its old values until then. Returns the mark.
    ///
    /// # Errors
    /// `not_joined`, `claimant_unreachable`, and `membership_refused` for an unknown bucket.
    pub async fn truncate(&self, buckets: Option<Vec<String>>) -> Result<u64> {
        self.check_joined()?;
        let (buckets, peers) = {
            let v = self.kernel().view.read();
            let buckets =
                buckets.unwrap_or_else(|| v.meta.buckets.keys().cloned().collect::<Vec<_>>());
            let peers: Vec<NodeId> = v
                .meta
                .members
                .iter()
                .map(|m| m.id)
                .filter(|&id| id != self.id() && self.is_up(id))
                .collect();
            (buckets, peers)
        };
        let timeout = self.kernel().cfg.handoff_timeout;
        let transport = &self.kernel().transport;
        let readings = join_all(
            peers
                .iter()
                .map(|&p| transport.request(p, Msg::Kernel(KernelMsg::ClockRead), timeout)),
        )
        .await;
        let mut mark = self.kernel().clock.now().0;
        for (peer, r) in peers.iter().zip(readings) {
            match r {
                Ok(Msg::Kernel(KernelMsg::ClockReading(us))) => mark = mark.max(us),
                other => tracing::warn!(node = %self.id(), %peer, reply = ?other,
                    "truncation: no clock reading; values stamped by a clock ahead of the mark survive"),
            }
        }
        let meta = self
            .change(crate::membership::MetaChange::Truncate { buckets, mark })
            .await?;
        for peer in self.sync_members(&meta).await {
            tracing::warn!(node = %self.id(), %peer, "truncation: not acknowledged yet");
        }
        Ok(mark)
    }
}
