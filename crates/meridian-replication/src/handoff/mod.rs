//! **Handoff**: moving objects to the nodes that should hold them, in one background task.
//!
//! - [`hinted`] (spec §9): a fallback that took writes for a down primary keeps them as hints
//!   and, every `handoff_interval`, streams the hints of each primary the detector says is up
//!   to it in batched [`HandoffMsg::Objects`], deleting each after the ack if unchanged since
//!   it was sent.
//! - [`ownership`]: after a layout change each node streams the objects it no longer owns to
//!   their owners ([`HandoffMsg::Objects`]) and deletes each once every owner acked it
//!   unchanged; reads and writes span both layouts meanwhile.
//!
//! - chunk handoff ([`crate::blob::handoff`]): large-object chunks held for keys this node
//!   no longer holds go to the keys' replicas, on the bulk path.
//!
//! The rounds run in turn in one task, at once after a layout change and then every
//! `handoff_interval`.

pub mod hinted;
pub mod messages;
pub mod ownership;

use crate::kernel::{Incoming, Node, Protocol};
pub use messages::HandoffMsg;
use ownership::Ownership;
use parking_lot::Mutex;
use std::sync::atomic::AtomicBool;
use tokio_util::sync::CancellationToken;

/// Handoff's state on a node.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    /// Ownership-handoff bookkeeping (module [`ownership`]).
    pub(crate) ownership: Mutex<Ownership>,
    /// Set when the node may hold objects it does not own (a layout change, or a write of a
    /// key it does not own); the handoff task then scans and hands them off.
    pub(crate) drain_needed: AtomicBool,
    /// Set when the node may hold chunks whose home it does not hold (a layout change, or a
    /// chunk stored here as a fallback); the chunk-handoff round scans the chunk store only
    /// then, not every interval.
    pub(crate) chunks_pending: AtomicBool,
    /// Wakes the handoff task early (a layout change).
    pub(crate) drain_wake: tokio::sync::Notify,
}

/// The most objects one [`HandoffMsg::Objects`] may carry: the larger of the two senders'
/// batches ([`hinted::BATCH_HINTS`], [`ownership::HANDOFF_BATCH_KEYS`]).
pub const MAX_HANDOFF_ITEMS: usize = if hinted::BATCH_HINTS > ownership::HANDOFF_BATCH_KEYS {
    hinted::BATCH_HINTS
} else {
    ownership::HANDOFF_BATCH_KEYS
};

impl Node {
    /// Ownership and hinted handoff's state (registered with the kernel when the node is built).
    pub(crate) fn handoff_state(&self) -> &Handoff {
        self.protocol::<Handoff>()
    }
}

impl Protocol for Handoff {
    type Msg = HandoffMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: HandoffMsg) {
        match msg {
            HandoffMsg::Objects { items } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                if items.len() > MAX_HANDOFF_ITEMS {
                    let why = format!(
                        "HandoffMsg::Objects.items has {} objects: at most {MAX_HANDOFF_ITEMS}",
                        items.len()
                    );
                    return req.refuse_oversized(node, why);
                }
                // Extra copies of a hot key are invalidated before the owner acknowledges,
                // as for a replicated write.
                let hot: Vec<Vec<u8>> = items
                    .iter()
                    .filter(|i| node.is_hot(&i.key))
                    .map(|i| i.key.clone())
                    .collect();
                let answer = node.accept_handoff(items);
                if hot.is_empty() {
                    req.answer(answer);
                } else {
                    let node = node.clone();
                    tokio::spawn(async move {
                        for key in hot {
                            node.invalidate_if_hot(&key).await;
                        }
                        req.answer(answer);
                    });
                }
            }
            other @ HandoffMsg::Ack => req.unexpected(node, &other),
        }
    }
}

impl Node {
    pub(crate) async fn handoffs(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.handoff_interval;
        // No round at start-up: the first comes after one interval (plus a seeded jitter of
        // up to a quarter interval, so nodes do not hand off in lockstep).
        let mut tick = self.ticker(every, every / 4, every);
        // A store reopened after a restart may hold chunks it should hand off: look once.
        self.handoff_state()
            .chunks_pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
                // A layout change: hand off at once rather than after up to an interval.
                _ = self.handoff_state().drain_wake.notified() => {}
            }
            let rounds = async {
                if let Err(e) = self.handoff_round().await {
                    tracing::warn!(node = %self.id(), error = %e, "hinted handoff round failed");
                }
                if let Err(e) = self.ownership_round().await {
                    tracing::warn!(node = %self.id(), error = %e, "ownership handoff round failed");
                }
                if let Err(e) = self.chunk_handoff_round().await {
                    tracing::warn!(node = %self.id(), error = %e, "chunk handoff round failed");
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                () = rounds => {}
            }
        }
    }
}
