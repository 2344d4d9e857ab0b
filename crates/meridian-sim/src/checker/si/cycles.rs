//! The cycle search: strongly connected components (Tarjan) over the edge kinds a model
//! forbids, and one witness cycle per class and component (`G0`, `G1c`, `G-single`,
//! `G-nonadjacent`, `G2-item`, and their `-process` forms), found by breadth-first search.

use super::{Analysis, AnomalyKind, Edge, PROC, RW, WR, WW, kind_index};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

impl<'a> Analysis<'a> {
    /// Searches the graph for cycles; with `process`, only for cycles through process edges.
    pub(super) fn cycles(&mut self, process: bool) {
        let dep = if process { WW | WR | PROC } else { WW | WR };
        let require = if process { PROC } else { 0 };
        let mut found: Vec<(AnomalyKind, Vec<(usize, u8)>)> = Vec::new();
        if !process {
            for comp in sccs(&self.adj, WW) {
                if let Some(c) = self.cycle_through(&comp, WW, WW, WW, 0) {
                    found.push((AnomalyKind::G0, c));
                }
            }
        }
        for comp in sccs(&self.adj, dep) {
            let first = if process { PROC } else { WR };
            if let Some(c) = self.cycle_through(&comp, first, dep, dep, require) {
                let kind = if process {
                    AnomalyKind::G1cProcess
                } else {
                    AnomalyKind::G1c
                };
                found.push((kind, c));
            }
        }
        for comp in sccs(&self.adj, dep | RW) {
            if let Some(c) = self.cycle_through(&comp, RW, dep, dep, require) {
                let kind = if process {
                    AnomalyKind::GSingleProcess
                } else {
                    AnomalyKind::GSingle
                };
                found.push((kind, c));
            } else if let Some(c) = self.nonadjacent(&comp, dep, require) {
                let kind = if process {
                    AnomalyKind::GNonadjacentProcess
                } else {
                    AnomalyKind::GNonadjacent
                };
                found.push((kind, c));
            } else if !process
                && let Some(c) = self.cycle_through(&comp, RW, dep | RW, dep | RW, 0)
                && !found
                    .iter()
                    .any(|(_, f)| f.iter().any(|&(t, _)| comp.contains(&t)))
            {
                found.push((AnomalyKind::G2Item, c));
            }
        }
        for (kind, cycle) in found {
            let text = self.show_cycle(&cycle);
            let txns = cycle.iter().map(|&(t, _)| t).collect();
            self.report(kind, txns, None, text);
        }
    }

    /// A shortest cycle inside `comp` that starts with an edge of kind `first` and continues
    /// through edges in `rest`, taking at least one edge of kind `require` (if not 0).
    /// Edges are labelled with the first kind of `label` they carry, in WW, WR, PROC, RW
    /// order. Returns (node, kind of the edge leaving it).
    fn cycle_through(
        &self,
        comp: &[usize],
        first: u8,
        rest: u8,
        label: u8,
        require: u8,
    ) -> Option<Vec<(usize, u8)>> {
        let inside: BTreeSet<usize> = comp.iter().copied().collect();
        for &a in comp {
            for (&b, e) in &self.adj[a] {
                if e.mask & first == 0 || !inside.contains(&b) {
                    continue;
                }
                let got = first & require != 0;
                if let Some(path) = self.bfs(&inside, b, a, rest, label, require, got) {
                    let mut cycle = vec![(a, first)];
                    cycle.extend(path);
                    return Some(cycle);
                }
            }
        }
        None
    }

    /// Shortest path `from` -> `to` over edges in `mask` within `inside`, taking an edge of
    /// kind `require` unless `got`. Returns (node, kind of the edge leaving it) per step.
    #[allow(clippy::too_many_arguments)]
    fn bfs(
        &self,
        inside: &BTreeSet<usize>,
        from: usize,
        to: usize,
        mask: u8,
        label: u8,
        require: u8,
        got: bool,
    ) -> Option<Vec<(usize, u8)>> {
        let start = (from, got || require == 0);
        let mut prev: BTreeMap<(usize, bool), ((usize, bool), u8)> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        let mut seen = BTreeSet::from([start]);
        while let Some(s) = queue.pop_front() {
            if s == (to, true) {
                let mut path = Vec::new();
                let mut cur = s;
                while cur != start {
                    let (p, kind) = prev[&cur];
                    path.push((p.0, kind));
                    cur = p;
                }
                path.reverse();
                return Some(path);
            }
            for (&b, e) in &self.adj[s.0] {
                if !inside.contains(&b) || e.mask & mask == 0 {
                    continue;
                }
                // Prefer the required kind when it is still missing.
                let kinds: Vec<u8> = [require, WW, WR, PROC, RW]
                    .into_iter()
                    .filter(|&k| {
                        k != 0 && e.mask & mask & k != 0 && (k & label != 0 || k == require)
                    })
                    .collect();
                let Some(&kind) = kinds
                    .iter()
                    .find(|&&k| !s.1 && k == require)
                    .or(kinds.first())
                else {
                    continue;
                };
                let next = (b, s.1 || kind == require);
                if seen.insert(next) {
                    prev.insert(next, (s, kind));
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// A closed walk in `comp` with rw edges, never two in a row (each rw followed by a
    /// `dep` edge), taking a `require` edge if not 0.
    fn nonadjacent(&self, comp: &[usize], dep: u8, require: u8) -> Option<Vec<(usize, u8)>> {
        let inside: BTreeSet<usize> = comp.iter().copied().collect();
        // States (node, after_rw, got_required).
        type State = (usize, bool, bool);
        for &a in comp {
            for (&b, e) in &self.adj[a] {
                if e.mask & RW == 0 || !inside.contains(&b) {
                    continue;
                }
                let start: State = (b, true, require == 0);
                let goal: State = (a, false, true);
                let mut prev: BTreeMap<State, (State, u8)> = BTreeMap::new();
                let mut seen = BTreeSet::from([start]);
                let mut queue = VecDeque::from([start]);
                while let Some(s) = queue.pop_front() {
                    if s == goal {
                        let mut path = Vec::new();
                        let mut cur = s;
                        while cur != start {
                            let (p, kind) = prev[&cur];
                            path.push((p.0, kind));
                            cur = p;
                        }
                        path.reverse();
                        let mut cycle = vec![(a, RW)];
                        cycle.extend(path);
                        return Some(cycle);
                    }
                    for (&c, e) in &self.adj[s.0] {
                        if !inside.contains(&c) {
                            continue;
                        }
                        for kind in [require, WW, WR, PROC, RW] {
                            if kind == 0 || e.mask & kind == 0 {
                                continue;
                            }
                            if kind == RW && s.1 {
                                continue;
                            }
                            if kind != RW && dep & kind == 0 {
                                continue;
                            }
                            let next = (c, kind == RW, s.2 || kind == require);
                            if seen.insert(next) {
                                prev.insert(next, (s, kind));
                                queue.push_back(next);
                            }
                        }
                    }
                }
            }
        }
        None
    }

    fn show_cycle(&self, cycle: &[(usize, u8)]) -> String {
        let mut out = String::new();
        for (i, &(t, kind)) in cycle.iter().enumerate() {
            let next = cycle[(i + 1) % cycle.len()].0;
            let label = match kind {
                WW => "ww",
                WR => "wr",
                RW => "rw",
                _ => "process",
            };
            let key = self.adj[t]
                .get(&next)
                .filter(|_| kind != PROC)
                .map(|e| format!("(key {})", e.keys[kind_index(kind)]))
                .unwrap_or_default();
            out.push_str(&format!("T{t} -{label}{key}-> "));
        }
        if let Some(&(t, _)) = cycle.first() {
            out.push_str(&format!("T{t}"));
        }
        out
    }
}

/// Tarjan's strongly connected components over edges whose kinds meet `mask`, keeping those
/// with more than one node; each sorted, in order of their smallest node.
fn sccs(adj: &[BTreeMap<usize, Edge>], mask: u8) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, successors, position in them)
        let succ = |v: usize| -> Vec<usize> {
            adj[v]
                .iter()
                .filter(|(_, e)| e.mask & mask != 0)
                .map(|(&w, _)| w)
                .collect()
        };
        let mut call: Vec<(usize, Vec<usize>, usize)> = vec![(root, succ(root), 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(frame) = call.last_mut() {
            let v = frame.0;
            if let Some(&w) = frame.1.get(frame.2) {
                frame.2 += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, succ(w), 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(parent) = call.last() {
                low[parent.0] = low[parent.0].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort_unstable();
                    out.push(comp);
                }
            }
        }
    }
    out.sort();
    out
}
