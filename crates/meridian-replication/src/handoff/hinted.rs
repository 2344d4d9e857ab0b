//! Hinted handoff (spec §9): hints a fallback stored for a down primary go back to it once the
//! detector says it is up. Hints are keyed by `(for_node, key)` rather than
//! `(partition, for_node)`; handoff is one transfer at a time per node, in `(for_node, key)`
//! order, at most `handoff_batch` hints per round.

use crate::error::Result;
use crate::eventual::messages::EventualMsg;
use crate::kernel::{Msg, Node};
use meridian_cluster::{Props, bucket_and_key};
use meridian_core::NodeId;
use std::sync::atomic::Ordering;

impl Node {
    /// One hinted-handoff round (normally run every `handoff_interval` by the background
    /// task): each stored hint whose primary is up is sent to it, and deleted after the ack.
    /// A primary that fails a transfer gets no more this round. Returns how many hints were
    /// delivered.
    pub async fn handoff_round(&self) -> Result<usize> {
        let hints = self.kernel().store.hints(self.kernel().cfg.handoff_batch)?;
        let mut delivered = 0;
        let mut failed: Vec<NodeId> = Vec::new();
        for h in hints {
            if !self.layout().topology().contains(h.for_node) {
                // Its primary left the cluster: the hint becomes this node's data, which
                // ownership handoff delivers to the key's current owners.
                self.kernel().store.merge_apply(&h.key, &h.object, true)?;
                self.kernel()
                    .store
                    .remove_hint(h.for_node, &h.key, &h.object)?;
                self.note_if_not_owned(&h.key);
                continue;
            }
            if failed.contains(&h.for_node) || !self.is_up(h.for_node) {
                continue;
            }
            let allow_mult = {
                let (bucket, _) = bucket_and_key(&h.key);
                self.registry()
                    .resolve(bucket, &Props::default())
                    .allow_mult
            };
            let msg = Msg::Eventual(EventualMsg::Replicate {
                key: h.key.to_vec(),
                object: h.object.clone(),
                hint_for: None,
                allow_mult,
            });
            let r = self
                .kernel()
                .transport
                .request(h.for_node, msg, self.kernel().cfg.handoff_timeout)
                .await;
            match r {
                Ok(Msg::Eventual(EventualMsg::Ack { .. })) => {
                    if self
                        .kernel()
                        .store
                        .remove_hint(h.for_node, &h.key, &h.object)?
                    {
                        let bytes = crate::object_store::encode_object(&h.object).len() as u64;
                        let c = &self.kernel().counters;
                        c.hinted_handoffs.fetch_add(1, Ordering::Relaxed);
                        c.handoff_bytes.fetch_add(bytes, Ordering::Relaxed);
                    }
                    delivered += 1;
                }
                other => {
                    tracing::debug!(node = %self.id(), to = %h.for_node, reply = ?other, "hand-off transfer failed");
                    failed.push(h.for_node);
                }
            }
        }
        Ok(delivered)
    }
}
