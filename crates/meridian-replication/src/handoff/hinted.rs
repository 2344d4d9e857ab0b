//! Hinted handoff (spec §9): hints a fallback stored for a down primary go back to it once
//! the detector says it is up.
//!
//! Hints are keyed by `(for_node, key)`. Each round finds the primaries that have hints (one
//! engine seek per primary) and streams each up primary's hints to it, in key order, in
//! batched [`HandoffMsg::Objects`] messages (at most [`BATCH_HINTS`] hints or
//! [`BATCH_BYTES`] bytes each) — at most `handoff_concurrency` primaries at once, at most
//! `handoff_batch` hints per primary per round, paced by the WAN budget when the primary is
//! in another DC.
//!
//! Guarantees: a hint is deleted only after its primary acknowledged a batch holding it, and
//! only if it did not change meanwhile (a later write to the hint is kept for the next
//! round); hints for a down primary never hold back those of an up one; hints kept in a
//! durable engine survive a restart and are delivered by the restarted node's rounds.

use crate::anti_entropy::messages::AaeItem;
use crate::error::Result;
use crate::handoff::messages::HandoffMsg;
use crate::kernel::{Msg, Node};
use crate::object_store::{Hint, encoded_len};
use futures_util::StreamExt;
use meridian_core::NodeId;
use std::sync::atomic::Ordering;

/// Most hints in one hand-off message.
pub const BATCH_HINTS: usize = 256;
/// A hand-off message stops taking hints once they reach this many encoded bytes (a single
/// larger hint goes alone).
pub const BATCH_BYTES: usize = 1 << 20;

impl Node {
    /// One hinted-handoff round (normally run every `handoff_interval` by the background
    /// task): the hints of every up primary are streamed to it and deleted after its acks.
    /// A primary whose transfer fails gets no more this round. Returns how many hints were
    /// delivered.
    pub async fn handoff_round(&self) -> Result<usize> {
        let mut up = Vec::new();
        let mut converted = 0;
        for for_node in self.kernel().store.hint_targets()? {
            if !self.layout().topology().contains(for_node) {
                converted += self.adopt_hints_of_departed(for_node)?;
            } else if self.is_up(for_node) {
                up.push(for_node);
            }
        }
        if converted > 0 {
            tracing::info!(node = %self.id(), converted, "hints of departed nodes became own data");
        }
        let concurrency = self.kernel().cfg.handoff_concurrency.max(1);
        let delivered: Vec<usize> = futures_util::stream::iter(up)
            .map(|to| self.hand_off_hints_to(to))
            .buffer_unordered(concurrency)
            .collect()
            .await;
        Ok(delivered.into_iter().sum())
    }

    /// Hints held for a node that left the cluster become this node's own data, which
    /// ownership handoff delivers to the keys' current owners. At most `handoff_batch` per
    /// round.
    fn adopt_hints_of_departed(&self, for_node: NodeId) -> Result<usize> {
        let store = &self.kernel().store;
        let hints = store.hints_for(for_node, None, self.kernel().cfg.handoff_batch)?;
        for h in &hints {
            store.merge_apply(&h.key, &h.object, true)?;
            store.remove_hint(h.for_node, &h.key, &h.object)?;
            self.note_if_not_owned(&h.key);
        }
        Ok(hints.len())
    }

    /// Streams up to `handoff_batch` of the hints held for `to` to it, batch after batch;
    /// returns how many it acknowledged.
    async fn hand_off_hints_to(&self, to: NodeId) -> usize {
        let cfg = &self.kernel().cfg;
        let store = &self.kernel().store;
        let mut left = cfg.handoff_batch;
        let mut after: Option<bytes::Bytes> = None;
        let mut delivered = 0;
        while left > 0 {
            let hints = match store.hints_for(to, after.as_deref(), BATCH_HINTS.min(left)) {
                Ok(h) if h.is_empty() => break,
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(node = %self.id(), error = %e, "reading hints failed");
                    break;
                }
            };
            let (batch, bytes) = take_batch(hints);
            left = left.saturating_sub(batch.len());
            after = batch.last().map(|h| h.key.clone());
            self.wan_pace(to, bytes as u64).await;
            let msg = Msg::Handoff(HandoffMsg::Objects {
                items: batch
                    .iter()
                    .map(|h| AaeItem {
                        key: h.key.to_vec(),
                        object: Some(h.object.clone()),
                    })
                    .collect(),
            });
            match self
                .kernel()
                .transport
                .request(to, msg, cfg.handoff_timeout)
                .await
            {
                Ok(Msg::Handoff(HandoffMsg::Ack)) => {}
                other => {
                    tracing::debug!(node = %self.id(), %to, reply = ?other, "hand-off transfer failed");
                    break;
                }
            }
            let c = &self.kernel().counters;
            for h in &batch {
                match store.remove_hint(to, &h.key, &h.object) {
                    Ok(true) => {
                        c.hinted_handoffs.fetch_add(1, Ordering::Relaxed);
                        c.handoff_bytes
                            .fetch_add(encoded_len(&h.object) as u64, Ordering::Relaxed);
                    }
                    // Written again since it was read: the next round sends the new hint.
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(node = %self.id(), error = %e, "deleting a delivered hint failed");
                    }
                }
                delivered += 1;
            }
        }
        delivered
    }
}

/// The longest prefix of `hints` within [`BATCH_BYTES`] (at least one hint), and its size.
fn take_batch(mut hints: Vec<Hint>) -> (Vec<Hint>, usize) {
    let mut bytes = 0;
    let mut n = 0;
    for h in &hints {
        let size = encoded_len(&h.object) + h.key.len();
        if n > 0 && bytes + size > BATCH_BYTES {
            break;
        }
        bytes += size;
        n += 1;
    }
    hints.truncate(n);
    (hints, bytes)
}
