//! The DC's root (spec §3) and the extra-copy protocol (spec §4): the periodic load report
//! every node sends, the root's merge of the hot-key sketches, its copy decisions, the copy
//! transfer, the map's publication, and invalidation before a write is acknowledged.

use super::{BalanceMsg, CopyPayload, ExtraMap, copy_digest};
use crate::kernel::{Msg, Node};
use meridian_balance::{CopyAction, CopyPlanner, PlannerConfig, Summary};
use meridian_cluster::bucket_and_key;
use meridian_core::NodeId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Copy-creation times kept for the metrics.
const CREATE_TIMES_KEPT: usize = 1024;

/// What the root of a DC holds (soft state, rebuilt by a new root within two periods).
#[derive(Debug)]
pub(crate) struct RootState {
    since: Instant,
    loads: BTreeMap<NodeId, (u64, Instant)>,
    reports: Vec<Summary>,
    planner: CopyPlanner,
    epoch: u64,
    /// Usable copies: key → (holder, creation time in balancer µs).
    copies: BTreeMap<Vec<u8>, Vec<(NodeId, u64)>>,
    /// Copies being made: key → holders.
    pending: BTreeMap<Vec<u8>, Vec<NodeId>>,
    /// Invalidation generation per key (bumped by every invalidating write).
    gens: BTreeMap<Vec<u8>, u64>,
    /// Keys invalidated while this root was warming up (their reported copies are stale).
    warm_invalidated: BTreeSet<Vec<u8>>,
    pub(crate) copy_create_ms: VecDeque<u64>,
    pub(crate) error_bound: u64,
}

impl RootState {
    fn new(nodes: usize) -> RootState {
        RootState {
            since: Instant::now(),
            loads: BTreeMap::new(),
            reports: Vec::new(),
            planner: CopyPlanner::new(PlannerConfig {
                nodes: nodes.max(1),
                ..PlannerConfig::default()
            }),
            epoch: 1,
            copies: BTreeMap::new(),
            pending: BTreeMap::new(),
            gens: BTreeMap::new(),
            warm_invalidated: BTreeSet::new(),
            copy_create_ms: VecDeque::new(),
            error_bound: 0,
        }
    }

    /// The key's invalidation generation. Generations are clock readings (µs), so that a
    /// new root's copies are not refused by holders that remember a previous root's drops,
    /// and a copy made under a previous root before a drop is.
    fn generation(&mut self, key: &[u8], wall: u64) -> u64 {
        *self.gens.entry(key.to_vec()).or_insert(wall)
    }

    fn map(&self, root: NodeId) -> ExtraMap {
        ExtraMap {
            root,
            epoch: self.epoch,
            copies: self
                .copies
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|(n, _)| *n).collect()))
                .collect(),
        }
    }
}

impl Node {
    /// This DC's members.
    fn dc_members(&self) -> Vec<NodeId> {
        let dc = self.dc();
        self.kernel()
            .view
            .read()
            .meta
            .members
            .iter()
            .filter(|m| m.dc == dc)
            .map(|m| m.id)
            .collect()
    }

    /// The DC's root as this node sees it: the lowest id it considers up.
    pub(crate) fn dc_root(&self) -> NodeId {
        self.dc_members()
            .into_iter()
            .filter(|&n| self.is_up(n))
            .min()
            .unwrap_or(self.id())
    }

    /// Whether this node sees a majority of its DC up. A node that does not (it is cut off)
    /// never acts as a root: a lone node would otherwise renew its own copies' leases while
    /// the DC's real root, unable to reach it, waits them out before acknowledging a write.
    fn sees_dc_majority(&self) -> bool {
        let members = self.dc_members();
        let up = members.iter().filter(|&&n| self.is_up(n)).count();
        up * 2 > members.len()
    }

    /// The home replicas of `key` in this DC (its first `n_val` replicas that live here).
    pub(crate) fn dc_homes(&self, key: &[u8]) -> Vec<NodeId> {
        let (bucket, _) = bucket_and_key(key);
        let n = self.registry().resolve(bucket, &Default::default()).n_val as usize;
        let dc = self.dc();
        let layout = self.layout();
        let topo = layout.topology();
        let p = layout.ring().partition_of(key);
        let list = layout.replicas(p);
        list[..n.min(list.len())]
            .iter()
            .copied()
            .filter(|&r| topo.dc_of(r) == Some(dc))
            .collect()
    }

    async fn ask(&self, to: NodeId, msg: BalanceMsg, timeout: Duration) -> Option<BalanceMsg> {
        match self
            .kernel()
            .transport
            .request(to, Msg::Balance(msg), timeout)
            .await
        {
            Ok(Msg::Balance(m)) => Some(m),
            _ => None,
        }
    }

    /// Every `balance_tick`: the load report to the root (and the map's epoch back), AVR's
    /// peeling, lease renewals; every `hot_period`, the sketch to the root and, at the root,
    /// a decision period.
    pub(crate) async fn balance_ticks(self, shutdown: CancellationToken) {
        let tick = self.kernel().cfg.balance_tick.max(Duration::from_millis(1));
        let per = (self.kernel().cfg.hot_period.as_micros() / tick.as_micros()).max(1) as u64;
        let mut every = self.ticker(tick, tick, tick);
        let mut n: u64 = 0;
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = every.tick() => {}
            }
            n += 1;
            self.balance_tick(tick, n.is_multiple_of(per)).await;
        }
    }

    async fn balance_tick(&self, tick: Duration, period: bool) {
        let me = self.id();
        let root = self.dc_root();
        let majority = self.sees_dc_majority();
        {
            let mut r = self.bal().root.lock();
            if root == me && majority {
                if r.is_none() {
                    *r = Some(RootState::new(self.dc_members().len()));
                }
            } else {
                *r = None;
            }
        }
        if !majority {
            // Cut off: no lease is renewed, so this node's copies stop serving.
            return;
        }
        let load = u64::from(self.bal().load());
        let copies = self.extra_keys();
        let reply = if root == me {
            Some(self.root_on_load(me, load, copies))
        } else {
            self.ask(root, BalanceMsg::Load { load, copies }, tick * 5)
                .await
        };
        if let Some(BalanceMsg::LoadReply {
            avg_milli,
            root,
            epoch,
            warming,
        }) = reply
        {
            *self.bal().avg.lock() = avg_milli;
            self.bal().root_warming.store(warming, Ordering::Relaxed);
            if self.bal().avr_waiting.load(Ordering::Relaxed) > 0 {
                let cancels = self.avr_peel(&mut self.bal().queue.lock());
                self.send_cancels(cancels);
            }
            let known = {
                let m = self.bal().map.read();
                (m.root, m.epoch)
            };
            if known != (Some(root), epoch) {
                let map = if root == me {
                    Some(self.root_map())
                } else {
                    match self.ask(root, BalanceMsg::GetMap, tick * 5).await {
                        Some(BalanceMsg::Map(m)) => Some(m),
                        _ => None,
                    }
                };
                if let Some(m) = map {
                    self.adopt_map(m);
                }
            } else {
                self.renew_leases(root);
            }
        }
        if period {
            let summary = self.bal().sketch.lock().take();
            if root == me {
                self.root_on_sketch(summary);
                self.root_period();
            } else if summary.total > 0 {
                let _ = self
                    .kernel()
                    .transport
                    .send(root, Msg::Balance(BalanceMsg::Sketch(summary)));
            }
        }
    }

    /// The root's answer to a load report. While the root warms up, the copies the reporter
    /// still holds are re-made from a home replica (announced first, like any new copy), so
    /// they keep serving under the new root without trusting what the previous one knew.
    pub(crate) fn root_on_load(&self, from: NodeId, load: u64, copies: Vec<Vec<u8>>) -> BalanceMsg {
        let me = self.id();
        let warmup = self.kernel().cfg.hot_period * 2;
        let now = Instant::now();
        let mut remake = Vec::new();
        let reply = {
            let wall = self.kernel().clock.now().micros();
            let mut guard = self.bal().root.lock();
            let Some(st) = guard.as_mut() else {
                // Not the root (any more): say so with this node's id; the reporter's view
                // converges with its detector.
                return BalanceMsg::LoadReply {
                    avg_milli: 0,
                    root: me,
                    epoch: 0,
                    warming: true,
                };
            };
            st.loads.insert(from, (load, now));
            let warming = now.duration_since(st.since) < warmup;
            if warming {
                for k in copies {
                    let known = st
                        .copies
                        .get(&k)
                        .is_some_and(|h| h.iter().any(|(n, _)| *n == from))
                        || st.pending.get(&k).is_some_and(|p| p.contains(&from));
                    if known || st.warm_invalidated.contains(&k) {
                        continue;
                    }
                    st.pending.entry(k.clone()).or_default().push(from);
                    let generation = st.generation(&k, wall);
                    remake.push((k, generation));
                }
            }
            let fresh = self.kernel().cfg.balance_tick * 3;
            let live: Vec<u64> = st
                .loads
                .iter()
                .filter(|(_, (_, at))| now.duration_since(*at) <= fresh)
                .map(|(_, (l, _))| *l)
                .collect();
            let avg_milli = match live.len() as u64 {
                0 => 0,
                n => live.iter().sum::<u64>().saturating_mul(1000) / n,
            };
            BalanceMsg::LoadReply {
                avg_milli,
                root: me,
                epoch: st.epoch,
                warming,
            }
        };
        for (key, generation) in remake {
            let node = self.clone();
            tokio::spawn(async move { node.make_copy(key, from, generation, now).await });
        }
        reply
    }

    pub(crate) fn root_on_sketch(&self, summary: Summary) {
        if let Some(st) = self.bal().root.lock().as_mut() {
            st.reports.push(summary);
        }
    }

    /// The root's map (an empty one from a node that is not the root).
    pub(crate) fn root_map(&self) -> ExtraMap {
        match self.bal().root.lock().as_ref() {
            Some(st) => st.map(self.id()),
            None => ExtraMap {
                root: self.id(),
                epoch: 0,
                copies: Vec::new(),
            },
        }
    }

    /// One decision period at the root: merge the sketches, plan, act.
    fn root_period(&self) {
        let now = Instant::now();
        let now_us = self.bal().now_us();
        let fresh = self.kernel().cfg.balance_tick * 3;
        let k = 2 * self.dc_members().len().max(1);
        let actions = {
            let mut guard = self.bal().root.lock();
            let Some(st) = guard.as_mut() else { return };
            let loads: BTreeMap<NodeId, u64> = st
                .loads
                .iter()
                .filter(|(n, (_, at))| now.duration_since(*at) <= fresh && self.is_up(**n))
                .map(|(n, (l, _))| (*n, *l))
                .collect();
            let merged = Summary::merge(&std::mem::take(&mut st.reports), k);
            st.error_bound = merged.error_bound();
            st.planner.set_nodes(self.dc_members().len());
            let mut have = st.copies.clone();
            for (key, to) in &st.pending {
                let e = have.entry(key.clone()).or_default();
                e.extend(to.iter().map(|&n| (n, now_us)));
            }
            let homes = |key: &[u8]| self.dc_homes(key);
            st.planner.period(now_us, &merged, &homes, &loads, &have)
        };
        let mut dropped = false;
        for a in actions {
            match a {
                CopyAction::Make { key, to } => {
                    let generation = {
                        let wall = self.kernel().clock.now().micros();
                        let mut guard = self.bal().root.lock();
                        let Some(st) = guard.as_mut() else { return };
                        st.pending.entry(key.clone()).or_default().push(to);
                        st.generation(&key, wall)
                    };
                    let node = self.clone();
                    tokio::spawn(async move { node.make_copy(key, to, generation, now).await });
                }
                CopyAction::Drop { key, from } => {
                    let generation = {
                        let wall = self.kernel().clock.now().micros();
                        let mut guard = self.bal().root.lock();
                        let Some(st) = guard.as_mut() else { return };
                        if let Some(h) = st.copies.get_mut(&key) {
                            h.retain(|(n, _)| *n != from);
                            if h.is_empty() {
                                st.copies.remove(&key);
                            }
                        }
                        st.epoch += 1;
                        st.generation(&key, wall)
                    };
                    dropped = true;
                    if from == self.id() {
                        self.drop_copy(&key, generation);
                    } else {
                        let msg = Msg::Balance(BalanceMsg::DropCopy { key, generation });
                        let _ = self.kernel().transport.send(from, msg);
                    }
                }
            }
        }
        if dropped {
            self.publish_map();
        }
    }

    /// Sends the root's map to every node of the DC (and adopts it here).
    fn publish_map(&self) {
        let map = self.root_map();
        for n in self.dc_members() {
            if n == self.id() {
                self.adopt_map(map.clone());
            } else {
                let msg = Msg::Balance(BalanceMsg::Map(map.clone()));
                let _ = self.kernel().transport.send(n, msg);
            }
        }
    }

    /// Makes one extra copy (at the root): announce the key to its home replicas, have one of
    /// them send the copy, then publish it if no write invalidated it meanwhile.
    async fn make_copy(&self, key: Vec<u8>, to: NodeId, generation: u64, decided: Instant) {
        let timeout = self.kernel().cfg.copy_timeout;
        let homes: Vec<NodeId> = self
            .dc_homes(&key)
            .into_iter()
            .filter(|&h| self.is_up(h))
            .collect();
        let mut ok = !homes.is_empty();
        for &h in &homes {
            if !ok {
                break;
            }
            if h == self.id() {
                self.announce(key.clone());
            } else {
                let msg = BalanceMsg::Announce { key: key.clone() };
                ok = matches!(
                    self.ask(h, msg, timeout).await,
                    Some(BalanceMsg::Done(Ok(())))
                );
            }
        }
        if ok {
            let src = homes[0];
            ok = if src == self.id() {
                self.send_copy(key.clone(), to, generation, self.id())
                    .await
                    .is_ok()
            } else {
                let msg = BalanceMsg::MakeCopy {
                    key: key.clone(),
                    to,
                    generation,
                };
                matches!(
                    self.ask(src, msg, timeout).await,
                    Some(BalanceMsg::Done(Ok(())))
                )
            };
        }
        let now_us = self.bal().now_us();
        let (publish, stale_gen) = {
            let wall = self.kernel().clock.now().micros();
            let mut guard = self.bal().root.lock();
            let Some(st) = guard.as_mut() else { return };
            if let Some(p) = st.pending.get_mut(&key) {
                p.retain(|&n| n != to);
                if p.is_empty() {
                    st.pending.remove(&key);
                }
            }
            let current = st.generation(&key, wall);
            if ok && current == generation {
                st.copies.entry(key.clone()).or_default().push((to, now_us));
                st.epoch += 1;
                let ms = u64::try_from(decided.elapsed().as_millis()).unwrap_or(u64::MAX);
                st.copy_create_ms.push_back(ms);
                if st.copy_create_ms.len() > CREATE_TIMES_KEPT {
                    st.copy_create_ms.pop_front();
                }
                (true, None)
            } else {
                (false, ok.then_some(current))
            }
        };
        if let Some(g) = stale_gen {
            // Made from a version a write has since replaced.
            let msg = Msg::Balance(BalanceMsg::DropCopy { key, generation: g });
            let _ = self.kernel().transport.send(to, msg);
        }
        if publish {
            self.publish_map();
        }
    }

    /// At a home replica: sends its copy of `key` to `to`.
    pub(crate) async fn send_copy(
        &self,
        key: Vec<u8>,
        to: NodeId,
        generation: u64,
        root: NodeId,
    ) -> Result<(), String> {
        let (bucket, _) = bucket_and_key(&key);
        let ty = self.registry().props_for(bucket).bucket_type;
        let payload = match ty {
            crate::bucket::BucketType::Timeline => self
                .tl_local(&key)
                .map_err(|e| e.to_string())?
                .map(CopyPayload::Record),
            crate::bucket::BucketType::Eventual => self
                .kernel()
                .store
                .get(&key)
                .map_err(|e| e.to_string())?
                .map(CopyPayload::Object),
            crate::bucket::BucketType::Transactional => {
                return Err("transactional buckets have no extra copies".into());
            }
        };
        let payload = payload.ok_or_else(|| "nothing to copy".to_string())?;
        let digest = copy_digest(&payload);
        if to == self.id() {
            return self.store_copy(key, generation, root, payload, digest);
        }
        let msg = BalanceMsg::StoreCopy {
            key,
            generation,
            root,
            payload,
            digest,
        };
        match self.ask(to, msg, self.kernel().cfg.copy_timeout).await {
            Some(BalanceMsg::Done(r)) => r,
            _ => Err(format!("{to} did not answer")),
        }
    }

    /// At the root: drops every copy of `key` (and those being made) before a write of it is
    /// acknowledged; waits for the holders, or for a silent holder's lease to run out.
    pub(crate) async fn root_invalidate(&self, key: Vec<u8>) {
        let warmup = self.kernel().cfg.hot_period * 2;
        let plan = {
            let wall = self.kernel().clock.now().micros();
            let mut guard = self.bal().root.lock();
            guard.as_mut().map(|st| {
                let g = st.gens.entry(key.clone()).or_insert(0);
                *g = (*g + 1).max(wall);
                let generation = *g;
                let mut targets: BTreeSet<NodeId> = BTreeSet::new();
                if let Some(h) = st.copies.remove(&key) {
                    targets.extend(h.into_iter().map(|(n, _)| n));
                }
                if let Some(p) = st.pending.remove(&key) {
                    targets.extend(p);
                }
                let warming = Instant::now().duration_since(st.since) < warmup;
                if warming {
                    st.warm_invalidated.insert(key.clone());
                }
                st.epoch += 1;
                (targets, generation, warming)
            })
        };
        let (mut targets, generation, everyone) = match plan {
            Some(p) => p,
            None => (BTreeSet::new(), u64::MAX, true),
        };
        if everyone {
            targets.extend(self.dc_members());
        }
        self.drop_everywhere(&key, generation, targets).await;
        self.publish_map();
    }

    /// Sends `DropCopy` to `targets` and waits for them; if one stays silent, waits one
    /// lease (its copy stops serving by then, as nobody renews it).
    async fn drop_everywhere(&self, key: &[u8], generation: u64, targets: BTreeSet<NodeId>) {
        let lease = self.kernel().cfg.copy_lease;
        let asks = targets.into_iter().map(|t| {
            let key = key.to_vec();
            async move {
                if t == self.id() {
                    self.drop_copy(&key, generation);
                    return true;
                }
                matches!(
                    self.ask(t, BalanceMsg::DropCopy { key, generation }, lease)
                        .await,
                    Some(BalanceMsg::Done(Ok(())))
                )
            }
        });
        let started = Instant::now();
        let acks = futures_util::future::join_all(asks).await;
        if acks.iter().any(|ok| !ok) {
            tokio::time::sleep_until(started + lease).await;
        }
    }

    /// A home replica applying a write of `key`: if the key is hot, the root drops its copies
    /// first (or, with the root silent, every node of the DC is asked to).
    pub(crate) async fn invalidate_if_hot(&self, key: &[u8]) {
        if !self.is_hot(key) {
            return;
        }
        let root = self.dc_root();
        if root == self.id() {
            return self.root_invalidate(key.to_vec()).await;
        }
        let msg = BalanceMsg::Invalidate { key: key.to_vec() };
        let lease = self.kernel().cfg.copy_lease;
        if matches!(
            self.ask(root, msg, lease * 2).await,
            Some(BalanceMsg::Done(Ok(())))
        ) {
            return;
        }
        let everyone: BTreeSet<NodeId> = self.dc_members().into_iter().collect();
        self.drop_everywhere(key, u64::MAX, everyone).await;
    }
}
