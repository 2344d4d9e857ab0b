//! The replica-side FIFO read queue (spec §0 and §2): immediate reads, and the entries of the
//! deferred strategies — Naive (first free replica claims) and AVR (asynchronous peeling
//! against the root's average load).
//!
//! Pure: the node's read workers pop entries, the node sends the `Cancel`s the methods ask
//! for. `load` is what the replica reports (queued entries; the caller adds those in
//! service).
//!
//! An immediate read is allocated work like an assigned one: it weighs `w_assigned` in
//! AVR's load, AVR's workers serve it in the same FIFO as assigned entries, and no
//! `Cancel` removes it (nobody else holds a copy). Pending entries are claimed only when
//! no allocated work waits. Between two replicas that both assigned a read, the lower node
//! id keeps it, so exactly one of them drops it whatever order the cancels cross in.

use crate::Micros;
use meridian_core::NodeId;

/// A deferred read's id: its coordinator and that coordinator's sequence number.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ReqId {
    /// The coordinator that enqueued the read.
    pub coord: NodeId,
    /// Its sequence number there.
    pub seq: u64,
}

/// The state of a queued read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// Sent to this replica only (an immediate strategy chose it).
    Immediate,
    /// Deferred, enqueued at every candidate, not claimed yet.
    Pending,
    /// Deferred and claimed here by AVR's peeling (allocated work).
    Assigned,
}

/// A queued read.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueEntry<T> {
    /// Its id (immediate reads get one too, for cancellation and tracing).
    pub id: ReqId,
    /// Its state when it left (or sits in) the queue.
    pub state: EntryState,
    /// When it was enqueued.
    pub enqueued_at: Micros,
    /// The caller's payload (the read and its reply handle).
    pub item: T,
}

/// The queue. See the module docs.
#[derive(Debug)]
pub struct ReadQueue<T> {
    w_assigned: u64,
    entries: std::collections::VecDeque<QueueEntry<T>>,
    /// Entries that are `Pending`.
    pending: usize,
}

impl<T> ReadQueue<T> {
    /// An empty queue; AVR weighs assigned (and immediate) entries `w_assigned` times a
    /// pending one (2 by default, spec §2).
    pub fn new(w_assigned: u64) -> ReadQueue<T> {
        ReadQueue {
            w_assigned,
            entries: Default::default(),
            pending: 0,
        }
    }

    /// Entries waiting (not in service).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Enqueues a read an immediate strategy sent here.
    pub fn push_immediate(&mut self, id: ReqId, item: T, now: Micros) {
        self.push(id, EntryState::Immediate, item, now);
    }

    /// Enqueues a deferred read (Naive or AVR) as pending.
    pub fn push_deferred(&mut self, id: ReqId, item: T, now: Micros) {
        self.push(id, EntryState::Pending, item, now);
    }

    /// AVR's load: `w_assigned · |assigned and immediate| + |pending|`.
    pub fn avr_load(&self) -> u64 {
        let allocated = (self.entries.len() - self.pending) as u64;
        self.w_assigned
            .saturating_mul(allocated)
            .saturating_add(self.pending as u64)
    }

    /// AVR's peeling step, run on every enqueue and tick: if `avr_load() <= (1 + eps) · avg`,
    /// every pending entry becomes assigned; returns their ids (the caller cancels them at
    /// the other candidates).
    pub fn avr_assign(&mut self, avg: f64, eps: f64) -> Vec<ReqId> {
        // NaN compares false: no average, no assignment.
        let within = self.avr_load() as f64 <= (1.0 + eps) * avg;
        if self.pending == 0 || !within {
            return Vec::new();
        }
        self.pending = 0;
        self.entries
            .iter_mut()
            .filter(|e| e.state == EntryState::Pending)
            .map(|e| {
                e.state = EntryState::Assigned;
                e.id
            })
            .collect()
    }

    /// Naive: the head of the queue (the caller cancels it elsewhere if it was pending).
    pub fn pop_naive(&mut self) -> Option<QueueEntry<T>> {
        self.remove_at(0)
    }

    /// AVR: the oldest assigned or immediate entry; if there is none, the oldest pending one
    /// (claimed: the caller cancels it elsewhere).
    pub fn pop_avr(&mut self) -> Option<QueueEntry<T>> {
        let at = self
            .entries
            .iter()
            .position(|e| e.state != EntryState::Pending)
            .unwrap_or(0);
        self.remove_at(at)
    }

    /// A `Cancel` for `id` from replica `from` arrived at replica `me`: a pending entry is
    /// removed; an assigned one is kept by the lower node id (removed here iff `from < me`).
    /// Returns the removed entry.
    pub fn cancel(&mut self, id: ReqId, from: NodeId, me: NodeId) -> Option<QueueEntry<T>> {
        let at = self.entries.iter().position(|e| {
            e.id == id
                && match e.state {
                    EntryState::Pending => true,
                    EntryState::Assigned => from < me,
                    EntryState::Immediate => false,
                }
        })?;
        self.remove_at(at)
    }

    /// Removes every entry (the node is stopping); the caller answers them.
    pub fn drain(&mut self) -> Vec<QueueEntry<T>> {
        self.pending = 0;
        self.entries.drain(..).collect()
    }

    fn push(&mut self, id: ReqId, state: EntryState, item: T, now: Micros) {
        if state == EntryState::Pending {
            self.pending += 1;
        }
        self.entries.push_back(QueueEntry {
            id,
            state,
            enqueued_at: now,
            item,
        });
    }

    fn remove_at(&mut self, at: usize) -> Option<QueueEntry<T>> {
        let e = self.entries.remove(at)?;
        if e.state == EntryState::Pending {
            self.pending -= 1;
        }
        Some(e)
    }
}

impl<T> ReadQueue<T> {
    /// The queued entry `id`, if it waits here.
    pub fn get(&self, id: ReqId) -> Option<&QueueEntry<T>> {
        self.entries.iter().find(|e| e.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::seq::index::sample;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::{BTreeMap, BTreeSet};

    fn rid(seq: u64) -> ReqId {
        ReqId {
            coord: NodeId(9),
            seq,
        }
    }

    fn ids<T>(v: &[QueueEntry<T>]) -> Vec<u64> {
        v.iter().map(|e| e.id.seq).collect()
    }

    #[test]
    fn naive_is_fifo_over_every_state() {
        let mut q = ReadQueue::new(2);
        assert!(q.is_empty());
        q.push_deferred(rid(1), "a", 10);
        q.push_immediate(rid(2), "b", 11);
        q.push_deferred(rid(3), "c", 12);
        assert_eq!(q.len(), 3);
        let first = q.pop_naive().unwrap();
        assert_eq!(
            (first.id, first.state, first.enqueued_at, first.item),
            (rid(1), EntryState::Pending, 10, "a")
        );
        assert_eq!(q.pop_naive().unwrap().state, EntryState::Immediate);
        assert_eq!(q.pop_naive().unwrap().id, rid(3));
        assert!(q.pop_naive().is_none());
        assert_eq!(q.avr_load(), 0);
    }

    #[test]
    fn load_weighs_allocated_work() {
        let mut q = ReadQueue::new(2);
        q.push_deferred(rid(1), (), 0);
        q.push_deferred(rid(2), (), 0);
        assert_eq!(q.avr_load(), 2);
        q.push_immediate(rid(3), (), 0);
        assert_eq!(q.avr_load(), 4, "an immediate read counts as assigned work");
        assert_eq!(q.avr_assign(4.0, 0.0), vec![rid(1), rid(2)]);
        assert_eq!(q.avr_load(), 6);
        let mut w3 = ReadQueue::new(3);
        w3.push_immediate(rid(1), (), 0);
        w3.push_deferred(rid(2), (), 0);
        assert_eq!(w3.avr_load(), 4);
    }

    #[test]
    fn assigns_iff_load_within_eps_of_average() {
        let mut q = ReadQueue::new(2);
        for s in 0..4 {
            q.push_deferred(rid(s), (), 0);
        }
        // load 4: above 1.1 · 3.5 = 3.85, nothing moves.
        assert!(q.avr_assign(3.5, 0.1).is_empty());
        assert!(q.avr_assign(f64::NAN, 0.1).is_empty());
        assert_eq!(q.avr_load(), 4);
        // 4 ≤ 1.1 · 3.7 = 4.07: everything pending is assigned, in FIFO order.
        assert_eq!(q.avr_assign(3.7, 0.1), vec![rid(0), rid(1), rid(2), rid(3)]);
        assert_eq!(q.avr_load(), 8);
        // Nothing pending: nothing to return even when far below the average.
        assert!(q.avr_assign(100.0, 0.0).is_empty());
        // Exactly at the bound with ε = 0 assigns.
        let mut e = ReadQueue::new(2);
        e.push_deferred(rid(7), (), 0);
        assert_eq!(e.avr_assign(1.0, 0.0), vec![rid(7)]);
    }

    #[test]
    fn avr_serves_allocated_work_first_then_the_oldest_pending() {
        let mut q = ReadQueue::new(2);
        q.push_deferred(rid(1), (), 0);
        q.push_deferred(rid(2), (), 0);
        q.avr_assign(10.0, 0.0);
        q.push_deferred(rid(3), (), 1);
        q.push_immediate(rid(4), (), 2);
        q.push_deferred(rid(5), (), 3);
        let order: Vec<(u64, EntryState)> = std::iter::from_fn(|| q.pop_avr())
            .map(|e| (e.id.seq, e.state))
            .collect();
        assert_eq!(
            order,
            vec![
                (1, EntryState::Assigned),
                (2, EntryState::Assigned),
                (4, EntryState::Immediate),
                (3, EntryState::Pending),
                (5, EntryState::Pending),
            ]
        );
    }

    #[test]
    fn cancel_rules() {
        let (lo, hi) = (NodeId(1), NodeId(2));
        let mut q = ReadQueue::new(2);
        q.push_deferred(rid(1), (), 0);
        q.push_deferred(rid(2), (), 0);
        q.avr_assign(10.0, 0.0);
        q.push_deferred(rid(3), (), 0);
        q.push_immediate(rid(4), (), 0);
        // Pending: removed whoever cancels.
        assert_eq!(q.cancel(rid(3), hi, lo).map(|e| e.id), Some(rid(3)));
        // Assigned here: the lower id keeps it.
        assert!(
            q.cancel(rid(1), hi, lo).is_none(),
            "me = n1 < from = n2 keeps it"
        );
        assert_eq!(
            q.cancel(rid(1), lo, hi).map(|e| e.state),
            Some(EntryState::Assigned)
        );
        // Immediate reads are never cancelled.
        assert!(q.cancel(rid(4), lo, hi).is_none());
        // Unknown ids: nothing.
        assert!(q.cancel(rid(99), lo, hi).is_none());
        assert_eq!(ids(&q.drain()), vec![2, 4]);
        assert!(q.is_empty());
        assert_eq!(q.avr_load(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Imm,
        Def,
        Assign(u8, u8),
        PopNaive,
        PopAvr,
        Cancel(u8, bool),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        prop_oneof![
            Just(Op::Imm),
            Just(Op::Def),
            (0u8..20, 0u8..3).prop_map(|(a, e)| Op::Assign(a, e)),
            Just(Op::PopNaive),
            Just(Op::PopAvr),
            (0u8..40, any::<bool>()).prop_map(|(s, lower)| Op::Cancel(s, lower)),
        ]
    }

    proptest! {
        /// Random operations against a plain vector model of the documented rules.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec(op(), 0..80), w in 1u64..4) {
            let mut q = ReadQueue::new(w);
            let mut model: Vec<(u64, EntryState)> = Vec::new();
            let (me, other) = (NodeId(5), NodeId(3));
            for (seq, op) in ops.into_iter().enumerate() {
                let seq = seq as u64;
                match op {
                    Op::Imm => { q.push_immediate(rid(seq), seq, seq); model.push((seq, EntryState::Immediate)); }
                    Op::Def => { q.push_deferred(rid(seq), seq, seq); model.push((seq, EntryState::Pending)); }
                    Op::Assign(avg, eps) => {
                        let load = model.iter().map(|e| if e.1 == EntryState::Pending { 1 } else { w }).sum::<u64>();
                        let eps = f64::from(eps) / 2.0;
                        let expect: Vec<ReqId> = if load as f64 <= (1.0 + eps) * f64::from(avg) {
                            model.iter_mut().filter(|e| e.1 == EntryState::Pending).map(|e| { e.1 = EntryState::Assigned; rid(e.0) }).collect()
                        } else { vec![] };
                        prop_assert_eq!(q.avr_assign(f64::from(avg), eps), expect);
                    }
                    Op::PopNaive => {
                        let expect = if model.is_empty() { None } else { Some(model.remove(0)) };
                        prop_assert_eq!(q.pop_naive().map(|e| (e.item, e.state)), expect);
                    }
                    Op::PopAvr => {
                        let at = model.iter().position(|e| e.1 != EntryState::Pending).unwrap_or(0);
                        let expect = if model.is_empty() { None } else { Some(model.remove(at)) };
                        prop_assert_eq!(q.pop_avr().map(|e| (e.item, e.state)), expect);
                    }
                    Op::Cancel(s, from_lower) => {
                        let from = if from_lower { other } else { NodeId(7) };
                        let at = model.iter().position(|e| e.0 == u64::from(s) && match e.1 {
                            EntryState::Pending => true,
                            EntryState::Assigned => from < me,
                            EntryState::Immediate => false,
                        });
                        let expect = at.map(|i| model.remove(i));
                        prop_assert_eq!(q.cancel(rid(u64::from(s)), from, me).map(|e| (e.item, e.state)), expect);
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                let load: u64 = model.iter().map(|e| if e.1 == EntryState::Pending { 1 } else { w }).sum();
                prop_assert_eq!(q.avr_load(), load);
            }
        }
    }

    /// Spec invariant 7, as a pure discrete-event run: 6 replicas with one worker each and a
    /// fixed 10 ms service, requests on random candidate sets of 3 at ~80 % of capacity for
    /// 2 s, AVR with w_a = 2 and ε = 0.1, root ticks every 100 ms, zero-latency cancels.
    /// After arrivals stop every request is served, within a bounded number of ticks, and an
    /// assignment never lifts allocated load above (1+ε)·avg plus the batch it assigned.
    #[test]
    fn avr_serves_every_request_without_starvation() {
        const N: usize = 6;
        const SERVICE: Micros = 10_000;
        const TICK: Micros = 100_000;
        const STOP: Micros = 2_000_000;
        let (w, eps) = (2u64, 0.1);
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        enum Ev {
            Done(usize),
            Tick,
            Arrive,
        }
        let mut rng = ChaCha8Rng::seed_from_u64(42);
        let mut queues: Vec<ReadQueue<()>> = (0..N).map(|_| ReadQueue::new(w)).collect();
        let mut busy: Vec<Option<ReqId>> = vec![None; N];
        let mut events: BTreeMap<(Micros, u64), Ev> = BTreeMap::new();
        let mut seq = 0u64;
        let mut at = |events: &mut BTreeMap<(Micros, u64), Ev>, t: Micros, ev: Ev| {
            seq += 1;
            events.insert((t, seq), ev);
        };
        at(&mut events, 0, Ev::Tick);
        at(&mut events, 0, Ev::Arrive);
        let mut cands_of: BTreeMap<ReqId, Vec<usize>> = BTreeMap::new();
        let mut served: BTreeMap<ReqId, u32> = BTreeMap::new();
        let mut avg = 0.0;
        let mut next_req = 0u64;
        let mut last_done = 0;

        // Cancels travel instantly: `from` tells every other candidate.
        fn cancel_elsewhere(queues: &mut [ReadQueue<()>], cands: &[usize], id: ReqId, from: usize) {
            for &c in cands.iter().filter(|&&c| c != from) {
                queues[c].cancel(id, NodeId(from as u32), NodeId(c as u32));
            }
        }
        let assign = |queues: &mut [ReadQueue<()>],
                      r: usize,
                      avg: f64,
                      cands_of: &BTreeMap<ReqId, Vec<usize>>| {
            let before = queues[r].avr_load();
            let got = queues[r].avr_assign(avg, eps);
            if !got.is_empty() {
                assert!(before as f64 <= (1.0 + eps) * avg);
                let allocated = queues[r].avr_load();
                assert!(allocated as f64 <= (1.0 + eps) * avg + (w * got.len() as u64) as f64);
            }
            for id in got {
                cancel_elsewhere(queues, &cands_of[&id], id, r);
            }
        };

        while let Some(((now, _), ev)) = events.pop_first() {
            match ev {
                Ev::Arrive => {
                    let id = ReqId {
                        coord: NodeId(100),
                        seq: next_req,
                    };
                    next_req += 1;
                    let cands: Vec<usize> = sample(&mut rng, N, 3).into_vec();
                    cands_of.insert(id, cands.clone());
                    for &c in &cands {
                        queues[c].push_deferred(id, (), now);
                    }
                    for &c in &cands {
                        assign(&mut queues, c, avg, &cands_of);
                    }
                    // Poisson at 480 req/s (80 % of 6 / 10 ms).
                    let gap = (-(1.0 - rng.random::<f64>()).ln() / 480.0 * 1e6) as Micros;
                    if now + gap < STOP {
                        at(&mut events, now + gap, Ev::Arrive);
                    }
                }
                Ev::Tick => {
                    let total: u64 = (0..N)
                        .map(|r| queues[r].avr_load() + if busy[r].is_some() { w } else { 0 })
                        .sum();
                    avg = total as f64 / N as f64;
                    for r in 0..N {
                        assign(&mut queues, r, avg, &cands_of);
                    }
                    let idle =
                        queues.iter().all(ReadQueue::is_empty) && busy.iter().all(Option::is_none);
                    if now < STOP || !idle {
                        at(&mut events, now + TICK, Ev::Tick);
                    }
                }
                Ev::Done(r) => {
                    if let Some(id) = busy[r].take() {
                        *served.entry(id).or_insert(0) += 1;
                        last_done = now;
                    }
                }
            }
            for r in 0..N {
                if busy[r].is_none()
                    && let Some(e) = queues[r].pop_avr()
                {
                    if e.state == EntryState::Pending {
                        cancel_elsewhere(&mut queues, &cands_of[&e.id], e.id, r);
                    }
                    busy[r] = Some(e.id);
                    at(&mut events, now + SERVICE, Ev::Done(r));
                }
            }
        }
        assert!(next_req > 800, "{next_req} requests");
        let all: BTreeSet<ReqId> = cands_of.keys().copied().collect();
        let done: BTreeSet<ReqId> = served.keys().copied().collect();
        assert_eq!(all, done, "every request is served");
        assert!(queues.iter().all(ReadQueue::is_empty));
        // Bounded: everything is served within 10 ticks of the last arrival.
        assert!(last_done <= STOP + 10 * TICK, "last service at {last_done}");
        let duplicates: u32 = served.values().map(|&c| c - 1).sum();
        assert!(
            duplicates * 20 < next_req as u32,
            "{duplicates} duplicate services"
        );
    }
}
