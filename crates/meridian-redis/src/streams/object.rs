//! [`Stream`]: a stream in memory — its entries, its metadata (last generated ID, entries
//! ever added, the largest deleted ID, the recorded first ID) and its consumer groups.
//!
//! **Layout**: entries live in *nodes*, as Redis's radix tree holds listpacks: a node is a
//! run of consecutive entries keyed by its first ID, closed once it holds
//! `stream-node-max-entries` entries (deleted ones counted, as Redis counts them) or its
//! estimated bytes reach `stream-node-max-bytes`. A deleted entry stays in its node as a
//! tombstone until the whole node is gone. Nodes matter to users only through approximate
//! trimming (`MAXLEN ~`, `MINID ~`), which removes whole nodes, so a stream trimmed with `~`
//! keeps exactly the entries Redis would keep.
//!
//! **Cost**: append O(1) amortized (plus O(log n) for a new node); a lookup or the start of
//! a range O(log n + node size); deleting an entry O(log n + node size).
//!
//! Invariants: node keys ascend, entries ascend within and across nodes, every ID is at
//! most `last_id`; `length` counts the live entries; a node with no live entry is removed.

use super::groups::ConsumerGroup;
use super::id::StreamId;
use bytes::Bytes;
use std::collections::BTreeMap;

/// An entry: its ID and its field-value pairs, flat (`[f1, v1, f2, v2, ...]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The entry's ID.
    pub id: StreamId,
    /// Field, value, field, value, ...
    pub fields: Vec<Bytes>,
    deleted: bool,
}

#[derive(Clone, Debug, Default)]
struct Node {
    entries: Vec<Item>,
    live: usize,
    /// Redis's listpack size, estimated: what decides when a node is full.
    bytes: usize,
}

pub use crate::view::NodeLimits;

/// The bytes a node's listpack is never allowed to reach (Redis's `STREAM_LISTPACK_MAX_SIZE`).
pub const MAX_NODE_BYTES: u64 = 1 << 30;

/// How to trim (XADD's and XTRIM's options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Keep the entries with IDs at least this.
    MinId(StreamId),
}

/// A stream. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Stream {
    nodes: BTreeMap<StreamId, Node>,
    length: u64,
    /// The last ID generated (or set by XSETID).
    pub last_id: StreamId,
    /// The first live entry's ID as last recorded (0-0 when empty).
    pub first_id: StreamId,
    /// The largest ID ever deleted (XDEL).
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// The consumer groups, by name.
    pub groups: BTreeMap<Bytes, ConsumerGroup>,
    /// Heap bytes held by entries, approximately.
    heap: usize,
}

/// The estimated listpack bytes of an entry with these pairs.
fn entry_bytes(fields: &[Bytes]) -> usize {
    fields.iter().map(|f| f.len() + 2).sum::<usize>() + 8
}

impl Stream {
    /// Live entries.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether it holds no live entry (it may still exist as a key).
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// How many nodes hold its entries (XINFO's `radix-tree-keys`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Heap bytes, approximately (entries plus groups).
    pub fn memory(&self) -> usize {
        self.heap
            + self
                .groups
                .values()
                .map(ConsumerGroup::memory)
                .sum::<usize>()
            + 64
    }

    /// Appends an entry with `id`, which must be greater than `last_id` (the caller checks).
    pub fn append(&mut self, id: StreamId, fields: Vec<Bytes>, limits: NodeLimits) {
        let bytes = entry_bytes(&fields);
        let value_bytes: usize = fields.iter().map(Bytes::len).sum();
        let max_bytes = match limits.bytes {
            0 => MAX_NODE_BYTES,
            b => b.min(MAX_NODE_BYTES),
        };
        let fits = self.nodes.last_key_value().is_some_and(|(_, n)| {
            ((n.bytes + value_bytes) as u64) < max_bytes
                && (limits.entries == 0 || (n.entries.len() as u64) < limits.entries)
        });
        if !fits {
            self.nodes.insert(id, Node::default());
        }
        let Some(mut last) = self.nodes.last_entry() else {
            return;
        };
        let node = last.get_mut();
        self.heap += value_bytes + fields.len() * 32 + 48;
        node.bytes += bytes;
        node.live += 1;
        node.entries.push(Item {
            id,
            fields,
            deleted: false,
        });
        if self.length == 0 {
            self.first_id = id;
        }
        self.length += 1;
        self.entries_added = self.entries_added.saturating_add(1);
        self.last_id = id;
    }

    /// The node holding `id`, if any could: the last whose key is at most `id`.
    fn node_of(&self, id: StreamId) -> Option<(&StreamId, &Node)> {
        self.nodes.range(..=id).next_back()
    }

    /// The live entry `id`.
    pub fn get(&self, id: StreamId) -> Option<&Item> {
        let (_, node) = self.node_of(id)?;
        let at = node.entries.binary_search_by(|e| e.id.cmp(&id)).ok()?;
        Some(&node.entries[at]).filter(|e| !e.deleted)
    }

    /// Deletes the live entry `id`; false if there is none. Keeps `first_id` and
    /// `max_deleted` as XDEL does.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&key, _)) = self.node_of(id) else {
            return false;
        };
        let Some(node) = self.nodes.get_mut(&key) else {
            return false;
        };
        let Ok(at) = node.entries.binary_search_by(|e| e.id.cmp(&id)) else {
            return false;
        };
        let item = &mut node.entries[at];
        if item.deleted {
            return false;
        }
        item.deleted = true;
        let freed = std::mem::take(&mut item.fields);
        self.heap = self
            .heap
            .saturating_sub(freed.iter().map(|f| f.len() + 32).sum::<usize>() + 48);
        node.live -= 1;
        if node.live == 0 {
            self.nodes.remove(&key);
        }
        self.length -= 1;
        if id > self.max_deleted {
            self.max_deleted = id;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if id == self.first_id {
            self.first_id = self.first_live().unwrap_or_default();
        }
        true
    }

    /// The first live entry's ID.
    pub fn first_live(&self) -> Option<StreamId> {
        self.nodes
            .values()
            .flat_map(|n| n.entries.iter())
            .find(|e| !e.deleted)
            .map(|e| e.id)
    }

    /// The last live entry's ID.
    pub fn last_live(&self) -> Option<StreamId> {
        self.nodes
            .values()
            .rev()
            .flat_map(|n| n.entries.iter().rev())
            .find(|e| !e.deleted)
            .map(|e| e.id)
    }

    /// The live entries in `start..=end`, at most `count` (0: all), in order.
    pub fn range(&self, start: StreamId, end: StreamId, count: usize, rev: bool) -> Vec<&Item> {
        if start > end {
            return Vec::new();
        }
        let first_node = self.node_of(start).map_or(StreamId::MIN, |(k, _)| *k);
        let live = move |e: &&Item| !e.deleted && e.id >= start && e.id <= end;
        let nodes = self.nodes.range(first_node..=end);
        let take = if count == 0 { usize::MAX } else { count };
        if rev {
            nodes
                .rev()
                .flat_map(|(_, n)| n.entries.iter().rev())
                .filter(live)
                .take(take)
                .collect()
        } else {
            nodes
                .flat_map(|(_, n)| n.entries.iter())
                .filter(live)
                .take(take)
                .collect()
        }
    }

    /// Trims as Redis's `streamTrim`: whole nodes from the head while the rule allows; then,
    /// unless `approx`, entries of the next node. At most `limit` entries (0: no limit, and
    /// `limit` only bounds whole-node removal as in Redis). Answers how many were removed.
    pub fn trim(&mut self, rule: Trim, approx: bool, limit: u64) -> u64 {
        let mut deleted = 0u64;
        while let Some(mut entry) = self.nodes.first_entry() {
            if let Trim::MaxLen(max) = rule
                && self.length <= max
            {
                break;
            }
            let node = entry.get_mut();
            let live = node.live as u64;
            if limit != 0 && deleted + live > limit {
                break;
            }
            let remove_node = match rule {
                Trim::MaxLen(max) => self.length - live >= max,
                Trim::MinId(min) => node.entries.last().is_some_and(|e| e.id < min),
            };
            if remove_node {
                let node = entry.remove();
                self.forget_heap(&node.entries);
                self.length -= live;
                deleted += live;
                continue;
            }
            if approx {
                break;
            }
            let mut freed = Vec::new();
            for e in node.entries.iter_mut() {
                let stop = match rule {
                    Trim::MaxLen(max) => self.length <= max,
                    Trim::MinId(min) => e.id >= min,
                };
                if stop {
                    break;
                }
                if !e.deleted {
                    e.deleted = true;
                    freed.push(std::mem::take(&mut e.fields));
                    node.live -= 1;
                    self.length -= 1;
                    deleted += 1;
                }
            }
            for f in freed {
                self.heap = self
                    .heap
                    .saturating_sub(f.iter().map(|f| f.len() + 32).sum::<usize>() + 48);
            }
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.first_live().unwrap_or_default();
        }
        deleted
    }

    fn forget_heap(&mut self, entries: &[Item]) {
        let bytes: usize = entries
            .iter()
            .filter(|e| !e.deleted)
            .map(|e| e.fields.iter().map(|f| f.len() + 32).sum::<usize>() + 48)
            .sum();
        self.heap = self.heap.saturating_sub(bytes);
    }

    /// Every node's entries, tombstones included, for the stored form: `(node key, [(id,
    /// fields or None for a tombstone)])`.
    pub(super) fn nodes(&self) -> impl Iterator<Item = (StreamId, &[Item])> {
        self.nodes.iter().map(|(k, n)| (*k, n.entries.as_slice()))
    }

    /// Rebuilds a node from its stored form (the caller checks order and counts).
    pub(crate) fn push_node(
        &mut self,
        key: StreamId,
        entries: Vec<(StreamId, Option<Vec<Bytes>>)>,
    ) {
        let mut node = Node::default();
        for (id, fields) in entries {
            let deleted = fields.is_none();
            let fields = fields.unwrap_or_default();
            node.bytes += entry_bytes(&fields);
            if !deleted {
                node.live += 1;
                self.length += 1;
                self.heap += fields.iter().map(|f| f.len() + 32).sum::<usize>() + 48;
            }
            node.entries.push(Item {
                id,
                fields,
                deleted,
            });
        }
        if node.live > 0 {
            self.nodes.insert(key, node);
        }
    }

    /// Whether `self` is a tombstone-free equal of `other` in entries (tests).
    #[cfg(test)]
    pub(crate) fn live_items(&self) -> Vec<(StreamId, Vec<Bytes>)> {
        self.range(StreamId::MIN, StreamId::MAX, 0, false)
            .into_iter()
            .map(|e| (e.id, e.fields.clone()))
            .collect()
    }
}

impl Item {
    /// Whether it was deleted (a tombstone in its node).
    pub fn is_deleted(&self) -> bool {
        self.deleted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64) -> StreamId {
        StreamId::new(ms, 0)
    }

    fn filled(n: u64, per_node: u64) -> Stream {
        let mut s = Stream::default();
        let limits = NodeLimits {
            entries: per_node,
            bytes: 4096,
        };
        for i in 1..=n {
            s.append(
                id(i),
                vec![Bytes::from_static(b"f"), Bytes::from(i.to_string())],
                limits,
            );
        }
        s
    }

    #[test]
    fn nodes_close_at_the_entry_limit() {
        let s = filled(250, 100);
        assert_eq!(s.node_count(), 3);
        assert_eq!(s.len(), 250);
        assert_eq!(s.first_id, id(1));
        assert_eq!(s.last_id, id(250));
    }

    #[test]
    fn approximate_trim_removes_whole_nodes_only() {
        let mut s = filled(1000, 100);
        assert_eq!(s.trim(Trim::MaxLen(555), true, 10_000), 400);
        assert_eq!(s.len(), 600);
        assert_eq!(s.trim(Trim::MaxLen(555), false, 0), 45);
        assert_eq!(s.len(), 555);
        assert_eq!(s.first_id, id(446));
    }

    #[test]
    fn trim_limit_stops_before_a_node_it_cannot_take_whole() {
        let mut s = filled(100, 10);
        assert_eq!(s.trim(Trim::MaxLen(55), true, 30), 30);
        assert_eq!(s.len(), 70);
        let mut s = filled(3, 2);
        assert_eq!(s.trim(Trim::MaxLen(0), true, 1), 0);
        assert_eq!(s.trim(Trim::MaxLen(0), true, 2), 2);
    }

    #[test]
    fn minid_trim_and_delete_keep_the_first_id() {
        let mut s = filled(10, 4);
        assert_eq!(s.trim(Trim::MinId(id(6)), false, 0), 5);
        assert_eq!(s.first_id, id(6));
        assert!(s.delete(id(6)));
        assert!(!s.delete(id(6)));
        assert_eq!(s.first_id, id(7));
        assert_eq!(s.max_deleted, id(6));
        assert!(s.get(id(6)).is_none());
        assert_eq!(s.get(id(7)).map(|e| e.id), Some(id(7)));
    }

    #[test]
    fn ranges_match_a_model_after_deletes() {
        let mut s = filled(300, 7);
        let mut model: Vec<u64> = (1..=300).collect();
        for d in (3..300).step_by(5) {
            assert!(s.delete(id(d)));
            model.retain(|&x| x != d);
        }
        for (lo, hi) in [(1, 300), (10, 20), (299, 300), (301, 400), (0, 0)] {
            let got: Vec<u64> = s
                .range(id(lo), id(hi), 0, false)
                .iter()
                .map(|e| e.id.ms)
                .collect();
            let want: Vec<u64> = model
                .iter()
                .copied()
                .filter(|&x| x >= lo && x <= hi)
                .collect();
            assert_eq!(got, want);
            let mut rev: Vec<u64> = s
                .range(id(lo), id(hi), 0, true)
                .iter()
                .map(|e| e.id.ms)
                .collect();
            rev.reverse();
            assert_eq!(rev, want);
        }
        assert_eq!(s.len(), model.len() as u64);
    }
}
