//! The WAN budgets of background traffic: one token bucket per other DC
//! ([`meridian_blob::Budget`], `repair_wan_bytes_per_sec`), shared by everything a node sends
//! that no client waits for — chunk handoff and repair, read repair, anti-entropy and hinted
//! handoff — so that together they never take a WAN link from clients.
//!
//! Guarantees: over any interval `t`, the background bytes a node sends to one other DC
//! through these calls stay within `rate × t + burst`; traffic inside the node's DC, and
//! every kind when the rate is 0, is not paced. Read repair uses [`Node::wan_try`] (what the
//! bucket cannot cover now is dropped and left to anti-entropy, spec §8); the others wait.

use super::Node;
use meridian_blob::Budget;
use meridian_core::{DcId, NodeId};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The most a budget lets through at once (four default chunks); a slower budget holds one
/// second of its rate.
const MAX_BURST: u64 = 4 << 20;

/// The budgets of one node, created on first use per DC.
#[derive(Debug, Default)]
pub(crate) struct WanBudgets {
    per_dc: Mutex<BTreeMap<DcId, Arc<Budget>>>,
}

impl Node {
    /// The budget of background bytes to `to`'s DC, or `None` when they are not paced (the
    /// node's own DC, an unknown node, or a rate of 0).
    fn wan_budget(&self, to: NodeId) -> Option<Arc<Budget>> {
        let rate = self.kernel().cfg.repair_wan_bytes_per_sec;
        let dc = self.layout().topology().dc_of(to)?;
        if dc == self.dc() || rate == 0 {
            return None;
        }
        Some(
            self.kernel()
                .wan_budgets
                .per_dc
                .lock()
                .entry(dc)
                .or_insert_with(|| Arc::new(Budget::new(rate, rate.min(MAX_BURST))))
                .clone(),
        )
    }

    /// Waits until the WAN budget lets `bytes` of background traffic go to `to`.
    pub(crate) async fn wan_pace(&self, to: NodeId, bytes: u64) {
        if let Some(b) = self.wan_budget(to) {
            b.take(bytes).await;
        }
    }

    /// Whether `bytes` of background traffic may go to `to` now (counted if so).
    pub(crate) fn wan_try(&self, to: NodeId, bytes: u64) -> bool {
        self.wan_budget(to)
            .is_none_or(|b| b.try_take(bytes, tokio::time::Instant::now()))
    }
}
