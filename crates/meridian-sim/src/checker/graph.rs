//! The supersession graph of one key, shared by the eventual-consistency checkers.
//!
//! Nodes are the key's writes (any outcome; a CAS unless it was rejected) and deletes (any
//! outcome): the operations that may have changed the key. An edge `s -> u` means `s`
//! supersedes `u`'s value (it is in `s`'s causal context). Since causal pasts are transitive
//! (a context that covers a value covers everything that value's write covered), "`s`
//! supersedes `u`" means a path `s ->+ u`. Values are resolved within the key; a superseded
//! value no write of the key produced is ignored here (the read that returned it is reported
//! by the quorum-read checker).

use crate::error::Error;
use crate::history::{Op, OpId, OpResult, Operation, Outcome};
use crate::text;
use meridian_core::{Key, Value};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Fails with [`Error::DuplicateValue`] if two writes (or CAS) anywhere in the history write
/// the same value.
pub(crate) fn check_unique_values(by_key: &BTreeMap<Key, Vec<Operation>>) -> Result<(), Error> {
    let mut writer: BTreeMap<&Value, OpId> = BTreeMap::new();
    for op in by_key.values().flatten() {
        if let Some(value) = op.op.written_value()
            && let Some(first) = writer.insert(value, op.id)
        {
            return Err(Error::DuplicateValue {
                value: text::show(value),
                first,
                second: op.id,
            });
        }
    }
    Ok(())
}

/// One operation that may have changed the key.
pub(crate) struct Node {
    /// Index into the key's operations.
    pub(crate) op: usize,
    /// The value it writes (`None`: a delete).
    pub(crate) value: Option<Value>,
    /// The nodes whose values it supersedes directly (sorted, no duplicates).
    pub(crate) sup: Vec<usize>,
}

/// The key's operations and their supersession graph.
pub(crate) struct KeyGraph<'a> {
    pub(crate) ops: &'a [Operation],
    pub(crate) nodes: Vec<Node>,
    /// Written value -> node.
    pub(crate) by_value: BTreeMap<&'a [u8], usize>,
}

impl<'a> KeyGraph<'a> {
    /// The graph of one key's operations (values must be unique: see [`check_unique_values`]).
    pub(crate) fn new(ops: &'a [Operation]) -> KeyGraph<'a> {
        let mut nodes = Vec::new();
        let mut by_value = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            let value = match &op.op {
                Op::Read => continue,
                Op::Cas { .. } if op.outcome == Outcome::Ok(OpResult::CasRejected) => continue,
                Op::Write { value, .. } | Op::Cas { new: value, .. } => {
                    by_value.insert(&value[..], nodes.len());
                    Some(value.clone())
                }
                Op::Delete { .. } => None,
            };
            nodes.push(Node {
                op: i,
                value,
                sup: Vec::new(),
            });
        }
        for node in &mut nodes {
            let mut sup: Vec<usize> = ops[node.op]
                .op
                .supersedes()
                .iter()
                .filter_map(|v| by_value.get(&v[..]).copied())
                .collect();
            sup.sort_unstable();
            sup.dedup();
            node.sup = sup;
        }
        KeyGraph {
            ops,
            nodes,
            by_value,
        }
    }

    /// The operation behind node `n`.
    pub(crate) fn op(&self, n: usize) -> &'a Operation {
        &self.ops[self.nodes[n].op]
    }

    /// The node writing `value`, if any.
    pub(crate) fn node_of(&self, value: &[u8]) -> Option<usize> {
        self.by_value.get(value).copied()
    }

    /// Marks `roots` and every node they supersede, transitively.
    pub(crate) fn mark_down(&self, roots: impl IntoIterator<Item = usize>, marked: &mut [bool]) {
        let mut stack: Vec<usize> = roots.into_iter().collect();
        while let Some(n) = stack.pop() {
            if !std::mem::replace(&mut marked[n], true) {
                stack.extend(self.nodes[n].sup.iter().copied());
            }
        }
    }

    /// For each node, the first of `superseders` (in the order given) that supersedes it,
    /// transitively (a node does not supersede itself unless through a cycle).
    pub(crate) fn first_superseder(
        &self,
        superseders: impl IntoIterator<Item = usize>,
    ) -> Vec<Option<usize>> {
        // A node marked by an earlier superseder had everything below it marked then (or
        // before), so the walk stops at marked nodes: linear time overall.
        let mut first = vec![None; self.nodes.len()];
        let mut stack = Vec::new();
        for s in superseders {
            stack.extend(self.nodes[s].sup.iter().copied());
            while let Some(n) = stack.pop() {
                if first[n].is_none() {
                    first[n] = Some(s);
                    stack.extend(self.nodes[n].sup.iter().copied());
                }
            }
        }
        first
    }

    /// For each node, the nodes that supersede it directly (ascending).
    pub(crate) fn above(&self) -> Vec<Vec<usize>> {
        let mut above: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (s, node) in self.nodes.iter().enumerate() {
            for &u in &node.sup {
                above[u].push(s);
            }
        }
        above
    }

    /// A topological rank per node such that `s -> u` implies `rank[u] < rank[s]`, earlier
    /// invocations first among unconstrained nodes; `None` if the graph has a cycle.
    pub(crate) fn topo_ranks(&self) -> Option<Vec<usize>> {
        let n = self.nodes.len();
        let above = self.above();
        let mut pending: Vec<usize> = self.nodes.iter().map(|node| node.sup.len()).collect();
        let mut ready: BinaryHeap<Reverse<(u64, usize)>> = (0..n)
            .filter(|&s| pending[s] == 0)
            .map(|s| Reverse((self.op(s).invoked_at, s)))
            .collect();
        let mut rank = vec![0; n];
        let mut next = 0;
        while let Some(Reverse((_, u))) = ready.pop() {
            rank[u] = next;
            next += 1;
            for &s in &above[u] {
                pending[s] -= 1;
                if pending[s] == 0 {
                    ready.push(Reverse((self.op(s).invoked_at, s)));
                }
            }
        }
        (next == n).then_some(rank)
    }
}
