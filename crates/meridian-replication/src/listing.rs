//! Listing the live keys this replica holds: what Redis's `SCAN`, `KEYS` and `DBSIZE`
//! answer in cluster mode.
//!
//! A listing walks this replica's eventual objects, then its timeline records, each in key
//! order, from a [`ListPos`] that names the last key examined. What it guarantees:
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
//! - **the caller chooses the keys**: `select` sees each key before its value is decoded (the
//!   front end keeps the slots this node answers for, and MATCH's pattern).
//!
//! What a replica holds is what reached it: a write acknowledged elsewhere and not yet
//! replicated here (or waiting in a hint while this node was down) is not listed until it
//! arrives. Transactional buckets keep their versions at their partitions' leaders under
//! reserved keys, and are not listed here.

use crate::Result;
use crate::bucket::BucketType;
use crate::eventual::counter;
use crate::kernel::Node;
use crate::timeline::Content;
use bytes::Bytes;
use meridian_cluster::dvv::{self, Object};
use meridian_core::Timestamp;
use meridian_core::envelope::{Entry, Kind};
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
        let tag = match self.phase {
            Phase::Eventual => b'e',
            Phase::Timeline => b't',
        };
        let mut v = Vec::with_capacity(1 + self.after.as_ref().map_or(0, |a| a.len()));
        v.push(tag);
        if let Some(a) = &self.after {
            v.extend_from_slice(a);
        }
        Bytes::from(v)
    }

    /// The position [`ListPos::encode`] gave `raw` (a resume key of length 0 resumes at the
    /// start of its phase).
    pub fn decode(raw: &Bytes) -> Option<ListPos> {
        let phase = match raw.first()? {
            b'e' => Phase::Eventual,
            b't' => Phase::Timeline,
            _ => return None,
        };
        let after = (raw.len() > 1).then(|| raw.slice(1..));
        Some(ListPos { phase, after })
    }
}

/// One page of a listing: the live keys selected, with their types, and where the next page
/// starts (`None`: the listing is complete).
pub type ListPage = (Vec<(Bytes, Kind)>, Option<ListPos>);

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

/// A store page's next start, and whether the store has no more pages.
fn exhausted(next: Option<Bytes>) -> (Option<Bytes>, bool) {
    let done = next.is_none();
    (next, done)
}

impl Node {
    /// One page of the live keys this replica holds from `from`, examining at most `budget`
    /// stored keys; `select` chooses among them by key (see the module docs).
    pub fn list_live_keys(
        &self,
        from: ListPos,
        budget: usize,
        select: impl Fn(&[u8]) -> bool,
    ) -> Result<ListPage> {
        let budget = budget.max(1);
        let now = self.kernel().clock.now();
        let mut keys = Vec::new();
        let ListPos { phase, after } = from;
        let (next_after, exhausted) = match phase {
            Phase::Eventual => {
                let start = match &after {
                    Some(k) => Bound::Excluded(k.clone()),
                    None => Bound::Unbounded,
                };
                let (objects, next) = self.kernel().store.objects_from(start, budget)?;
                for (key, mut o) in objects {
                    self.kernel().store.visible(&key, &mut o);
                    if select(&key)
                        && self.bucket_type(&key) == BucketType::Eventual
                        && let Some(e) = shown_entry(&o, now)
                    {
                        keys.push((key, e.kind));
                    }
                }
                exhausted(next)
            }
            Phase::Timeline => {
                let (records, next) = self.tl_records_after(after.as_deref(), budget)?;
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
                exhausted(next)
            }
        };
        let next = match (phase, exhausted) {
            (_, false) => Some(ListPos {
                phase,
                after: next_after,
            }),
            (Phase::Eventual, true) => Some(ListPos {
                phase: Phase::Timeline,
                after: None,
            }),
            (Phase::Timeline, true) => None,
        };
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
        ] {
            assert_eq!(ListPos::decode(&p.encode()), Some(p));
        }
        assert_eq!(ListPos::decode(&Bytes::new()), None);
        assert_eq!(ListPos::decode(&Bytes::from("x")), None);
    }
}
