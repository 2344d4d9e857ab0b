//! The coordinator's side of a read that needs one replica ([`Node::read_one`]): the
//! candidates, the strategy's order or deferred fan-out, failover, hedging and feedback.

use super::{BalanceMsg, ReadAnswer, ReadKind};
use crate::kernel::{Msg, Node};
use meridian_balance::{LoadFeedback, Strategy};
use meridian_core::{DcId, NodeId};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

/// A candidate of a one-replica read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cand {
    /// The node.
    pub(crate) node: NodeId,
    /// Its DC.
    pub(crate) dc: DcId,
    /// What to read there.
    pub(crate) kind: ReadKind,
    /// Whether it is an extra copy rather than a home replica.
    pub(crate) extra: bool,
    /// Asked only when every strategy-chosen candidate failed (a fallback standing in for a
    /// down primary: it holds only hints, so a read it answers may miss the value).
    pub(crate) failover_only: bool,
}

/// How a one-replica read went.
#[derive(Debug)]
pub(crate) struct OneRead {
    /// The candidate that answered.
    pub(crate) cand: Cand,
    /// Its answer (an object or a record).
    pub(crate) answer: ReadAnswer,
}

/// Why a one-replica read failed.
#[derive(Debug)]
pub(crate) enum ReadFail {
    /// No candidate answered by the deadline (these failed).
    Failed(Vec<NodeId>),
    /// C3's backlog is full: the coordinator sheds the read.
    Overload,
}

/// Settings of one read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadPlan {
    pub(crate) strategy: Strategy,
    /// Ask the next candidate too after this long without an answer (`None`: never).
    pub(crate) hedge: Option<Duration>,
    pub(crate) deadline: Instant,
    /// Count the key in the hot-key sketch and consider extra copies.
    pub(crate) hot_copies: bool,
}

type Answer = (Cand, Result<(ReadAnswer, LoadFeedback), ()>, Duration);

impl Node {
    /// Reads `key` from one of `homes` (its up home replicas, in preference-list order) or
    /// one of its extra copies, as `plan.strategy` chooses. Returns the first answer holding
    /// a value or a definite absence; `Err` with the candidates that failed when none did by
    /// the deadline.
    pub(crate) async fn read_one(
        &self,
        key: &[u8],
        homes: Vec<Cand>,
        plan: ReadPlan,
    ) -> Result<OneRead, ReadFail> {
        let mut cands = homes;
        if plan.hot_copies {
            self.bal().sketch.lock().observe(key);
            self.add_extra_candidates(key, &mut cands);
        }
        // The strategy chooses among this DC's home replicas and copies; other DCs' replicas
        // and fallbacks are the failover.
        let (local, remote): (Vec<Cand>, Vec<Cand>) = cands
            .into_iter()
            .partition(|c| c.dc == self.dc() && !c.failover_only);
        if plan.strategy.is_deferred() && local.len() > 1 {
            let homes: Vec<Cand> = local.iter().filter(|c| !c.extra).cloned().collect();
            return match self.read_deferred(key, local, plan).await {
                Ok(one) => Ok(one),
                Err(mut failed) => {
                    // Every candidate failed, or the one that claimed the read no longer held
                    // its extra copy (the others were cancelled): ask the home replicas, then
                    // the other DCs, one at a time.
                    let mut retry = homes;
                    retry.extend(remote);
                    let r = self.read_in_order(key, retry, plan).await;
                    r.map_err(|f| {
                        failed.extend(f);
                        ReadFail::Failed(failed)
                    })
                }
            };
        }
        let mut ordered = local;
        if ordered.len() > 1 {
            let now = self.bal().now_us();
            let nodes: Vec<NodeId> = ordered.iter().map(|c| c.node).collect();
            let mut order = self.bal().balancer.lock().order(plan.strategy, &nodes, now);
            if plan.strategy == Strategy::C3 {
                let first = self.c3_admit(&order, plan.deadline).await?;
                order.retain(|&n| n != first);
                order.insert(0, first);
            }
            ordered.sort_by_key(|c| order.iter().position(|n| *n == c.node));
        }
        ordered.extend(remote);
        if ordered.is_empty() {
            return Err(ReadFail::Failed(Vec::new()));
        }
        self.read_in_order(key, ordered, plan)
            .await
            .map_err(ReadFail::Failed)
    }

    /// Adds the extra copies the DC's map lists for `key` (on nodes considered up, not
    /// already candidates) after the home replicas.
    fn add_extra_candidates(&self, key: &[u8], cands: &mut Vec<Cand>) {
        let holders = match self.bal().map.read().copies.get(key) {
            Some(h) => h.clone(),
            None => return,
        };
        let Some(kind) = cands.first().map(|c| match &c.kind {
            ReadKind::Eventual { .. } => ReadKind::Eventual { hint_for: None },
            ReadKind::Timeline => ReadKind::Timeline,
        }) else {
            return;
        };
        for h in holders {
            // A fallback on the holder stands in for a down primary (failover only): the
            // copy is a candidate of its own.
            if cands.iter().any(|c| c.node == h && !c.failover_only) || !self.is_up(h) {
                continue;
            }
            cands.push(Cand {
                node: h,
                dc: self.dc(),
                kind: kind.clone(),
                extra: true,
                failover_only: false,
            });
        }
    }

    /// Waits for a C3 token for one of `order` (backpressure), within the deadline.
    async fn c3_admit(&self, order: &[NodeId], deadline: Instant) -> Result<NodeId, ReadFail> {
        let b = self.bal();
        let mut waiting = false;
        let r = loop {
            let now = b.now_us();
            let next = b.balancer.lock().c3_admit(order, now);
            match next {
                Ok(n) => break Ok(n),
                Err(at) => {
                    if !waiting {
                        if !b.balancer.lock().c3_wait_begin() {
                            b.counters.c3_overloads.fetch_add(1, Ordering::Relaxed);
                            return Err(ReadFail::Overload);
                        }
                        waiting = true;
                    }
                    let wake =
                        Instant::now() + Duration::from_micros(at.saturating_sub(now).max(1));
                    if wake >= deadline {
                        break Err(ReadFail::Failed(Vec::new()));
                    }
                    sleep_until(wake).await;
                }
            }
        };
        if waiting {
            b.balancer.lock().c3_wait_end();
        }
        r
    }

    /// Asks `c` (read `id`; `others`: a deferred read's other candidates) and sends its
    /// answer, with the round trip, on `tx`.
    #[allow(clippy::too_many_arguments)]
    fn ask_one(
        &self,
        key: &[u8],
        c: Cand,
        strategy: Strategy,
        others: Vec<NodeId>,
        id: meridian_balance::ReqId,
        deadline: Instant,
        tx: mpsc::UnboundedSender<Answer>,
    ) {
        let node = self.clone();
        let key = key.to_vec();
        self.bal()
            .balancer
            .lock()
            .on_send(c.node, self.bal().now_us());
        tokio::spawn(async move {
            let started = Instant::now();
            let r = if c.node == node.id() {
                Ok(node
                    .serve_read_local(&key, &c.kind, c.extra, strategy, id, others)
                    .await)
            } else {
                let msg = Msg::Balance(BalanceMsg::Read {
                    id,
                    key,
                    kind: c.kind.clone(),
                    others,
                    strategy,
                    extra: c.extra,
                });
                let timeout = deadline.saturating_duration_since(Instant::now());
                match node.kernel().transport.request(c.node, msg, timeout).await {
                    Ok(Msg::Balance(BalanceMsg::ReadReply { answer, load })) => Ok((answer, load)),
                    _ => Err(()),
                }
            };
            let _ = tx.send((c, r, started.elapsed()));
        });
    }

    /// Feeds one answer to the balancer; returns it when it settles the read.
    fn feed(&self, (c, r, rtt): Answer) -> Option<OneRead> {
        let now = self.bal().now_us();
        let rtt_us = u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX);
        let mut bal = self.bal().balancer.lock();
        match r {
            Ok((answer, load)) => {
                bal.on_reply(c.node, rtt_us, Some(load), now);
                drop(bal);
                match answer {
                    ReadAnswer::Object(_) | ReadAnswer::Record(_) => {
                        if c.node != self.id() {
                            self.note_load(c.node, load);
                        }
                        Some(OneRead { cand: c, answer })
                    }
                    ReadAnswer::Miss | ReadAnswer::Cancelled | ReadAnswer::Failed(_) => None,
                }
            }
            Err(()) => {
                bal.on_failure(c.node, now);
                None
            }
        }
    }

    /// Immediate strategies: asks `ordered[0]`, the next on a failure or a miss and every
    /// `hedge` while no answer came.
    async fn read_in_order(
        &self,
        key: &[u8],
        ordered: Vec<Cand>,
        plan: ReadPlan,
    ) -> Result<OneRead, Vec<NodeId>> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        // A deferred read's failover asks one replica at a time: the replica must serve it as
        // an immediate read, not queue it as pending and claim it.
        let strategy = if plan.strategy.is_deferred() {
            Strategy::LocalFirst
        } else {
            plan.strategy
        };
        let mut next = 0;
        let mut failed = Vec::new();
        let mut pending = 0usize;
        let hedge = plan.hedge.unwrap_or(Duration::MAX);
        let mut hedge_at = Instant::now().checked_add(hedge);
        loop {
            if pending == 0 {
                let Some(c) = ordered.get(next).cloned() else {
                    return Err(failed);
                };
                next += 1;
                pending += 1;
                self.ask_one(
                    key,
                    c,
                    strategy,
                    Vec::new(),
                    self.bal().next_id(self.id()),
                    plan.deadline,
                    tx.clone(),
                );
                hedge_at = Instant::now().checked_add(hedge);
            }
            let hedge_wait = async {
                match hedge_at {
                    Some(t) if next < ordered.len() => sleep_until(t).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                a = rx.recv() => {
                    let Some(a) = a else { return Err(failed) };
                    pending -= 1;
                    let node = a.0.node;
                    if let Some(done) = self.feed(a) {
                        return Ok(done);
                    }
                    failed.push(node);
                }
                _ = sleep_until(plan.deadline) => return Err(failed),
                _ = hedge_wait => {
                    if let Some(c) = ordered.get(next).cloned() {
                        next += 1;
                        pending += 1;
                        self.ask_one(key, c, strategy, Vec::new(), self.bal().next_id(self.id()), plan.deadline, tx.clone());
                    }
                    hedge_at = Instant::now().checked_add(hedge);
                }
            }
        }
    }

    /// Takes claims of deferred read `id` until the guard drops (then every claim is denied).
    fn await_claims(&self, id: meridian_balance::ReqId) -> ClaimWindow<'_> {
        self.bal().claims.lock().insert(id, None);
        ClaimWindow { node: self, id }
    }

    /// Deferred strategies: the read is enqueued at every candidate; the first answer wins and
    /// later ones are counted as duplicate services.
    async fn read_deferred(
        &self,
        key: &[u8],
        cands: Vec<Cand>,
        plan: ReadPlan,
    ) -> Result<OneRead, Vec<NodeId>> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let nodes: Vec<NodeId> = cands.iter().map(|c| c.node).collect();
        let id = self.bal().next_id(self.id());
        let _claims = self.await_claims(id);
        for c in &cands {
            let others: Vec<NodeId> = nodes.iter().copied().filter(|&n| n != c.node).collect();
            self.ask_one(
                key,
                c.clone(),
                plan.strategy,
                others,
                id,
                plan.deadline,
                tx.clone(),
            );
        }
        drop(tx);
        let mut failed = Vec::new();
        let mut left = cands.len();
        let won = loop {
            let a = tokio::select! {
                biased;
                a = rx.recv() => a,
                _ = sleep_until(plan.deadline) => None,
            };
            let Some(a) = a else { break None };
            left -= 1;
            let node = a.0.node;
            if let Some(done) = self.feed(a) {
                break Some(done);
            }
            failed.push(node);
        };
        let Some(won) = won else {
            return Err(failed);
        };
        if left > 0 {
            // The other candidates answer Cancelled, or a duplicate service.
            let node = self.clone();
            tokio::spawn(async move {
                while let Some(a) = rx.recv().await {
                    if node.feed(a).is_some() {
                        node.bal()
                            .counters
                            .duplicate_services
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        Ok(won)
    }
}

/// While it lives, the coordinator grants the first claim of its deferred read.
struct ClaimWindow<'a> {
    node: &'a Node,
    id: meridian_balance::ReqId,
}

impl Drop for ClaimWindow<'_> {
    fn drop(&mut self) {
        self.node.bal().claims.lock().remove(&self.id);
    }
}
