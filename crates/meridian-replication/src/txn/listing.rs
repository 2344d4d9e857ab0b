//! Listing the live keys of transactional buckets, for SCAN, KEYS and DBSIZE in cluster mode
//! (the eventual and timeline keys a replica holds are listed by [`crate::listing`]).
//!
//! A transactional key's versions live only at its leader, so a listing asks each leader in
//! turn ([`Node::txn_leaders`]) for pages of the keys it holds. What a leader answers
//! ([`Node::txn_list_held`]):
//!
//! - only keys whose **home partition** (hash placement) is in the asker's set, so nodes that
//!   each ask for their own partitions list every key exactly once between them, wherever the
//!   key directory moved it;
//! - only keys it **serves** now (its table of keys moving away and its directory copy agree):
//!   a key in the middle of a move may be missed or listed twice, as Redis's SCAN may;
//! - only **live** keys: its newest version is a value, not hidden by its bucket's truncation
//!   mark, not expired at the leader's clock — each with its Redis type;
//! - at most [`MAX_LIST_BUDGET`] stored keys examined per request, whatever the asker says.

use super::coordinator::reply;
use crate::Result;
use crate::kernel::Node;
use crate::listing::StorePage;
use crate::msg::Msg;
use bytes::Bytes;
use meridian_core::envelope::{Entry, Kind};
use meridian_core::{NodeId, Timestamp};
use meridian_txn::TxnError;
use meridian_txn::messages::{KeysPage, TxnMsg};

/// The most stored keys a leader examines for one [`TxnMsg::ListKeys`]: a request's work is
/// the leader's to bound, whatever budget the asker names.
pub const MAX_LIST_BUDGET: u32 = 10_000;

/// Whether bit `p` of a partition bitmap is set.
fn has_partition(bitmap: &[u8], p: usize) -> bool {
    bitmap.get(p / 8).is_some_and(|b| b & (1 << (p % 8)) != 0)
}

/// The bitmap of [`TxnMsg::ListKeys`] for the partitions marked `true` in `served` (by index).
pub fn partition_bitmap(served: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; served.len().div_ceil(8)];
    for (p, _) in served.iter().enumerate().filter(|(_, s)| **s) {
        out[p / 8] |= 1 << (p % 8);
    }
    out
}

impl Node {
    /// The nodes that lead a partition now (each partition's first replica), in id order.
    pub fn txn_leaders(&self) -> Vec<NodeId> {
        let v = self.kernel().view.read();
        let layout = &v.meta.layout;
        let mut out: Vec<NodeId> = layout
            .ring()
            .partitions()
            .filter_map(|p| layout.replicas(p).first().copied())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Serves [`TxnMsg::ListKeys`] at this leader (see the module docs).
    pub(crate) fn txn_list_held(
        &self,
        after: Option<&[u8]>,
        budget: u32,
        partitions: &[u8],
    ) -> std::result::Result<KeysPage, TxnError> {
        let budget = budget.clamp(1, MAX_LIST_BUDGET) as usize;
        let (rows, next) = self.txn_state().store.heads_after(after, budget)?;
        let now = self.kernel().clock.now();
        let ring = self.kernel().view.read().meta.layout.ring();
        let keys = rows
            .into_iter()
            .filter(|(key, _, _)| has_partition(partitions, ring.partition_of(key).0 as usize))
            .filter(|(key, _, _)| self.txn_admit_listing(key))
            .filter_map(|(key, ts, value)| {
                let (_, value) = self.txn_visible(&key, Some((ts, value)))?;
                let entry = Entry::live(value, now)?;
                Some((key, entry.kind.code()))
            })
            .collect();
        Ok((keys, next))
    }

    /// Whether this leader serves `key` for a read now (not moving away, not moved).
    fn txn_admit_listing(&self, key: &[u8]) -> bool {
        self.txn_admit(key, Some(Timestamp::MAX)).is_ok()
    }

    /// One page of `leader`'s live transactional keys whose home partition is marked in
    /// `served`, after `after`, examining at most `budget` stored keys there.
    pub async fn txn_list_keys(
        &self,
        leader: NodeId,
        after: Option<Bytes>,
        budget: usize,
        served: &[bool],
    ) -> Result<StorePage> {
        let partitions = partition_bitmap(served);
        let budget = u32::try_from(budget).unwrap_or(MAX_LIST_BUDGET);
        let (keys, next) = if leader == self.id() {
            self.txn_list_held(after.as_deref(), budget, &partitions)?
        } else {
            let msg = TxnMsg::ListKeys {
                after,
                budget,
                partitions,
            };
            let r = self
                .kernel()
                .transport
                .request(leader, Msg::from(msg), self.txn_timeout())
                .await;
            reply(leader, "list", r, |m| match m {
                TxnMsg::KeysPage(r) => Some(r),
                _ => None,
            })?
        };
        let keys = keys
            .into_iter()
            .map(|(k, code)| {
                Kind::from_code(code).map(|kind| (k, kind)).ok_or_else(|| {
                    TxnError::BadRequest(format!("list: unknown type code {code} from {leader}"))
                })
            })
            .collect::<std::result::Result<Vec<_>, TxnError>>()?;
        Ok((keys, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_bitmaps_mark_exactly_the_served_partitions() {
        let served: Vec<bool> = (0..70).map(|p| p % 3 == 0 || p == 69).collect();
        let bitmap = partition_bitmap(&served);
        assert_eq!(bitmap.len(), 9);
        for (p, s) in served.iter().enumerate() {
            assert_eq!(has_partition(&bitmap, p), *s, "partition {p}");
        }
        // Beyond the bitmap (a hostile or short one): not wanted.
        assert!(!has_partition(&bitmap, 72));
        assert!(!has_partition(&[], 0));
    }
}
