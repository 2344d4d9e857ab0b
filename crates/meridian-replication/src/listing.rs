//! Listing the live keys this replica holds: what Redis's `SCAN`, `KEYS` and `DBSIZE`
//! answer in cluster mode.
//!
//! A listing walks this replica's eventual objects, then its timeline records, each in key
//! order, then the transactional keys of each partition leader in turn (asked over the
//! network, [`crate::txn`]'s `listing.rs`), from a [`ListPos`] that names the last key
//! examined. What it guarantees:
//!
//! - **stable positions**: a key that this replica holds from the start of a listing to its
//!   end is listed exactly once, whatever is written or deleted meanwhile (keys written
//!   during the walk are listed if they sort after the position, and never twice);
//! - **bounded work per page**: at most `budget` stored keys are examined per call, so a
//!   page may list fewer keys than asked, or none, and still have a next position, as
//!   Redis's SCAN may;
//! - **only live keys**: a key is listed when the value the Redis view shows for it is live
//!   at `now` (not a tombstone, not expired, not hidden by its bucket's truncation mark),
//!   with its Redis type;
//! - **the caller chooses the keys**: only keys of the home partitions it marks as served
//!   (the front end marks those this node answers for), and of those the ones `select` keeps
//!   (MATCH's pattern, a slot), each seen before its value is decoded.
//!
//! What a replica holds is what reached it: a write acknowledged elsewhere and not yet
//! replicated here (or waiting in a hint while this node was down) is not listed until it
//! arrives. Transactional keys are listed as their leaders hold them, only those whose home
//! partition the caller marks as served (so the nodes of a DC, each marking its own, list each
//! key once); a leader that does not answer fails the page with its error.

use crate::Result;
use crate::bucket::BucketType;
use crate::eventual::counter;
use crate::kernel::Node;
use crate::timeline::Content;
use bytes::Bytes;
use meridian_cluster::dvv::{self, Object};
use meridian_core::envelope::{Entry, Kind};
use meridian_core::{NodeId, Timestamp};
use std::ops::Bound;

/// Where a listing resumes: after `after` in the store of `phase`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPos {
    phase: Phase,
    after: Option<Bytes>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Eventual,
    Timeline,
    /// The transactional keys held by this leader.
    Txn(NodeId),
}

impl ListPos {
    /// The start of a listing.
    pub fn start() -> ListPos {
        ListPos {
            phase: Phase::Eventual,
            after: None,
        }
    }

    /// The bytes a front end keeps to resume at this position (its SCAN cursor's payload).
    pub fn encode(&self) -> Bytes {
        let mut v = Vec::with_capacity(5 + self.after.as_ref().map_or(0, |a| a.len()));
        match self.phase {
            Phase::Eventual => v.push(b'e'),
            Phase::Timeline => v.push(b't'),
            Phase::Txn(leader) => {
                v.push(b'x');
                v.extend_from_slice(&leader.0.to_be_bytes());
            }
        }
        if let Some(a) = &self.after {
            v.extend_from_slice(a);
        }
        Bytes::from(v)
    }

    /// The position [`ListPos::encode`] gave `raw` (a resume key of length 0 resumes at the
    /// start of its phase).
    pub fn decode(raw: &Bytes) -> Option<ListPos> {
        let (phase, rest) = match raw.first()? {
            b'e' => (Phase::Eventual, 1),
            b't' => (Phase::Timeline, 1),
            b'x' => {
                let id: [u8; 4] = raw.get(1..5)?.try_into().ok()?;
                (Phase::Txn(NodeId(u32::from_be_bytes(id))), 5)
            }
            _ => return None,
        };
        let after = (raw.len() > rest).then(|| raw.slice(rest..));
        Some(ListPos { phase, after })
    }
}

/// One page of a listing: the live keys selected, with their types, and where the next page
/// starts (`None`: the listing is complete).
pub type ListPage = (Vec<(Bytes, Kind)>, Option<ListPos>);

/// One page of one store: the live keys selected, with their types, and the key to resume
/// after (`None`: the store has no more).
pub type StorePage = (Vec<(Bytes, Kind)>, Option<Bytes>);

/// The value the Redis view shows for eventual object `o` at `now`, if it is live.
fn shown_entry(o: &Object, now: Timestamp) -> Option<Entry> {
    let values: Vec<(&dvv::Sibling, Bytes)> = o
        .siblings()
        .iter()
        .filter_map(|s| match &s.content {
            dvv::Content::Value(v) => Some((s, v.clone())),
            dvv::Content::Tombstone => None,
        })
        .collect();
    let latest = values
        .iter()
        .enumerate()
        .max_by_key(|(_, (s, _))| (s.meta.ts_us, s.dot))
        .map(|(i, _)| i)?;
    let raw: Vec<Bytes> = values.into_iter().map(|(_, v)| v).collect();
    counter::resolve(&raw, latest, now)
}

impl Node {
    /// One page of the live keys listed from `from`, examining at most `budget` stored keys:
    /// those of the home partitions `served` marks (by partition index) that `select` keeps
    /// (see the module docs).
    pub async fn list_live_keys(
        &self,
        from: ListPos,
        budget: usize,
        served: &[bool],
        select: impl Fn(&[u8]) -> bool,
    ) -> Result<ListPage> {
        let budget = budget.max(1);
        let ring = self.kernel().view.read().meta.layout.ring();
        let wanted = |key: &[u8]| {
            served
                .get(ring.partition_of(key).0 as usize)
                .copied()
                .unwrap_or(false)
                && select(key)
        };
        let ListPos { phase, after } = from;
        let leader = match phase {
            Phase::Eventual => return self.list_replica_keys(true, after, budget, wanted),
            Phase::Timeline => return self.list_replica_keys(false, after, budget, wanted),
            Phase::Txn(leader) => leader,
        };
        let (keys, next) = self.txn_list_keys(leader, after, budget, served).await?;
        let keys = keys.into_iter().filter(|(k, _)| select(k)).collect();
        let next = match next {
            Some(after) => Some(ListPos {
                phase,
                after: Some(after),
            }),
            None => self.next_leader_after(Some(leader)),
        };
        Ok((keys, next))
    }

    /// Where the transactional phase starts after `leader` (`None`: at the first leader), or
    /// `None` when no leader is left — or no bucket is transactional, so a cluster without
    /// one never asks the leaders (a round trip each, some across the WAN).
    fn next_leader_after(&self, leader: Option<NodeId>) -> Option<ListPos> {
        if !self.has_txn_buckets() {
            return None;
        }
        let next = self
            .txn_leaders()
            .into_iter()
            .find(|&l| leader.is_none_or(|prev| l > prev))?;
        Some(ListPos {
            phase: Phase::Txn(next),
            after: None,
        })
    }

    /// One page of the eventual (`eventual`) or timeline keys this replica holds.
    fn list_replica_keys(
        &self,
        eventual: bool,
        after: Option<Bytes>,
        budget: usize,
        select: impl Fn(&[u8]) -> bool,
    ) -> Result<ListPage> {
        let now = self.kernel().clock.now();
        let (keys, next_after) = if eventual {
            self.eventual_page(after, budget, now, select)?
        } else {
            self.timeline_page(after, budget, now, select)?
        };
        let phase = if eventual {
            Phase::Eventual
        } else {
            Phase::Timeline
        };
        let next = match (next_after, eventual) {
            (Some(after), _) => Some(ListPos {
                phase,
                after: Some(after),
            }),
            (None, true) => Some(ListPos {
                phase: Phase::Timeline,
                after: None,
            }),
            (None, false) => self.next_leader_after(None),
        };
        Ok((keys, next))
    }

    /// One page of this replica's eventual objects after `after`: the live keys selected,
    /// and where the next page starts (`None`: no more).
    fn eventual_page(
        &self,
        after: Option<Bytes>,
        budget: usize,
        now: Timestamp,
        select: impl Fn(&[u8]) -> bool,
    ) -> Result<StorePage> {
        let start = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        let (objects, next) = self.kernel().store.objects_from(start, budget)?;
        let mut keys = Vec::new();
        for (key, mut o) in objects {
            self.kernel().store.visible(&key, &mut o);
            if select(&key)
                && self.bucket_type(&key) == BucketType::Eventual
                && let Some(e) = shown_entry(&o, now)
            {
                keys.push((key, e.kind));
            }
        }
        Ok((keys, next))
    }

    /// One page of this replica's timeline records after `after`, as [`Node::eventual_page`].
    fn timeline_page(
        &self,
        after: Option<Bytes>,
        budget: usize,
        now: Timestamp,
        select: impl Fn(&[u8]) -> bool,
    ) -> Result<StorePage> {
        let (records, next) = self.tl_records_after(after.as_deref(), budget)?;
        let mut keys = Vec::new();
        for (key, r) in records {
            if !select(&key) || self.bucket_type(&key) != BucketType::Timeline {
                continue;
            }
            if let Content::Value(v) = &r.content
                && let Some(e) = Entry::live(Some(v.clone()), now)
            {
                keys.push((key, e.kind));
            }
        }
        Ok((keys, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip() {
        for p in [
            ListPos::start(),
            ListPos {
                phase: Phase::Timeline,
                after: Some(Bytes::from("k")),
            },
            ListPos {
                phase: Phase::Eventual,
                after: Some(Bytes::from("bucket:key")),
            },
            ListPos {
                phase: Phase::Txn(NodeId(7)),
                after: None,
            },
            ListPos {
                phase: Phase::Txn(NodeId(u32::MAX)),
                after: Some(Bytes::from("x")),
            },
        ] {
            assert_eq!(ListPos::decode(&p.encode()), Some(p));
        }
        assert_eq!(ListPos::decode(&Bytes::new()), None);
        assert_eq!(ListPos::decode(&Bytes::from("q")), None);
        assert_eq!(
            ListPos::decode(&Bytes::from("x\0\0\0")),
            None,
            "a short leader id"
        );
    }
}
