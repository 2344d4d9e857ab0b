//! The **balance** protocol: read load balancing on a node (spec `load-balancing.md`), over
//! the pure strategies, sketches and planner of `meridian-balance`.
//!
//! | part | what | where |
//! |---|---|---|
//! | coordinator | reads that need one replica ([`Node::read_one`]): candidates (the up home replicas, then the extra copies the DC's map lists), ordered by the strategy's [`Balancer`] (immediate strategies, C3's token wait) or enqueued at every candidate (Naive, AVR); every reply's load fed back | `read.rs` |
//! | replica | the FIFO read queue served by `read_workers` workers under the [`ServiceModel`]; deferred entries, their claims and `Cancel`s; load feedback on every reply | here |
//! | root | one per DC (the lowest-id node its peers consider up): merges the coordinators' SpaceSaving summaries, runs the [`meridian_balance::CopyPlanner`], makes and drops extra copies, publishes the versioned map, answers AVR's average load, invalidates copies before a write is acknowledged | `root.rs` |
//!
//! ## Guarantees
//!
//! - A strategy only ever chooses a candidate the failure detector considers up; a failed or
//!   missing answer falls to the next candidate within the read's deadline.
//! - An extra copy is served only while its holder's lease from the current root runs
//!   (renewed every `balance_tick`, lasting `copy_lease`), after its digest was checked, and
//!   only to a coordinator whose map lists it.
//! - **Writes invalidate copies before they are acknowledged.** A copy is made only after
//!   every up home replica of the key in the DC has been told the key is hot; from then on a
//!   home replica applying a write of the key asks the root to drop every copy (and refuse
//!   copies made under the older generation) before it acknowledges the write. A write
//!   acknowledged by every home replica of the DC therefore leaves no copy that serves an
//!   older version; with fewer acks, a copy is no staler than the home replica it was made
//!   from (what an R=1 read of that replica would return anyway).
//! - With the `real` service model and an immediate strategy, a replica serves a read inline
//!   (no queue, no task): balancing costs the coordinator one lock and a sort.
//!
//! ## Choices and deviations
//!
//! - Copies travel as one message (the chunked transfer path of `large-objects.md` does not
//!   exist yet), checked with xxh3-64.
//! - The map's epoch is piggy-backed on the root's answer to the load report (every
//!   `balance_tick`), not on every read reply: a stale coordinator pulls within one tick.
//! - A root that just took over adopts the copies its nodes report during two periods, and
//!   meanwhile invalidates a key by asking every node of the DC.
//! - If the root cannot be reached, a replica applying a write to a hot key asks every node of
//!   the DC it considers up to drop the copy, then waits one lease. A holder partitioned from
//!   that replica but not from its root and the readers could keep serving until the root
//!   drops it: an intra-DC partition is outside what this cache promises.
//! - Worker pop order: the oldest assigned (or immediate) entry, else the oldest pending one
//!   (under Naive nothing is ever assigned, so this is plain FIFO).
//! - `deferred_claim = token` (the default, spec §2 [M]): before serving a deferred read a
//!   replica asks its coordinator, which grants the first claim only, so no deferred read is
//!   served twice. The study's `cancel` rule alone lets replicas that pop the same read at
//!   once both serve it; with a fixed service time a hot key's replicas then stay in lockstep
//!   and serve every read twice.

pub mod messages;
mod read;
mod root;

use crate::kernel::{Incoming, Msg, Node, Protocol};
use meridian_balance::{
    Balancer, BalancerConfig, DeferredClaim, EntryState, LoadFeedback, ReadQueue, ReqId,
    ServiceModel, SpaceSaving, Strategy,
};
use meridian_core::NodeId;
pub use messages::{BalanceMsg, CopyPayload, ExtraMap, ReadAnswer, ReadKind};
use parking_lot::{Mutex, RwLock};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
pub(crate) use read::{Cand, ReadFail, ReadPlan};
use root::RootState;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a replica waits for its coordinator's answer to a claim.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(1);
/// AVR's ε (spec §2 default).
const AVR_EPS: f64 = 0.1;
/// How long a key stays hot at a home replica after an `Announce` (the map keeps it hot
/// after that while it lists the key).
const ANNOUNCE_TTL: Duration = Duration::from_secs(10);
/// How long a holder remembers a drop's generation (longer than any copy takes to arrive).
const REFUSE_TTL: Duration = Duration::from_secs(30);

/// The balance protocol's counters on one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BalanceStats {
    /// Extra copies held here now.
    pub extra_copies: u64,
    /// Reads this node served from its extra copies.
    pub extra_reads: u64,
    /// Reads asked of an extra copy this node did not (or no longer) hold.
    pub extra_misses: u64,
    /// Deferred reads served by more than one replica (counted by the coordinator).
    pub duplicate_services: u64,
    /// Deferred reads dropped here because another candidate served them.
    pub cancelled: u64,
    /// Reads refused because C3's backlog was full.
    pub c3_overloads: u64,
    /// Reads queued or in service here now.
    pub queue: u64,
    /// Copies this node made usable as a root, and how long each took from the decision
    /// (the most recent 1024, milliseconds).
    pub copy_create_ms: Vec<u64>,
    /// The root's merged sketch's error bound (0 on other nodes).
    pub sketch_error_bound: u64,
    /// Reads sent to each peer by this coordinator's strategies, and its view of them.
    pub peers: Vec<meridian_balance::PeerView>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) extra_reads: AtomicU64,
    pub(crate) extra_misses: AtomicU64,
    pub(crate) duplicate_services: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) c3_overloads: AtomicU64,
}

/// A read waiting in the replica's queue.
#[derive(Debug)]
struct Job {
    key: Vec<u8>,
    kind: ReadKind,
    extra: bool,
    /// The other candidates of a deferred read (cancelled when this replica claims it).
    others: Vec<NodeId>,
    done: oneshot::Sender<(ReadAnswer, LoadFeedback)>,
}

/// An extra copy held by this node.
#[derive(Debug, Clone)]
pub(crate) struct Extra {
    payload: CopyPayload,
    /// The root whose map lists it (leases come from that root only).
    root: NodeId,
    /// Whether that root's map has listed it (until then it is not renewed, and a map that
    /// does not list it yet is no reason to drop it).
    published: bool,
    lease_until: Instant,
}

/// What this node knows of its DC's extra-copy map.
#[derive(Debug, Default)]
pub(crate) struct LocalMap {
    pub(crate) root: Option<NodeId>,
    pub(crate) epoch: u64,
    pub(crate) copies: BTreeMap<Vec<u8>, Vec<NodeId>>,
}

/// The balance protocol's state on a node. See the module docs.
#[derive(Debug)]
pub(crate) struct Balance {
    /// The zero of the strategies' microsecond clock (tokio time: virtual in the simulator).
    base: Instant,
    pub(crate) balancer: Mutex<Balancer>,
    seq: AtomicU64,
    queue: Mutex<ReadQueue<Job>>,
    /// AVR entries enqueued and not yet served (the peeling runs only when some are).
    avr_waiting: AtomicU64,
    work: Notify,
    in_service: AtomicU32,
    model: RwLock<ServiceModel>,
    rng: Mutex<ChaCha8Rng>,
    pub(crate) sketch: Mutex<SpaceSaving>,
    extras: Mutex<BTreeMap<Vec<u8>, Extra>>,
    refused: Mutex<BTreeMap<Vec<u8>, (u64, Instant)>>,
    pub(crate) map: RwLock<LocalMap>,
    announced: Mutex<BTreeMap<Vec<u8>, Instant>>,
    /// The DC's average load, in thousandths.
    avg: Mutex<u64>,
    /// Whether this node's root may not know every copy yet (it took over recently, or
    /// this node has not heard from it since it started).
    root_warming: std::sync::atomic::AtomicBool,
    root: Mutex<Option<RootState>>,
    /// Deferred reads this node coordinates and is waiting for, and the replica whose claim
    /// it granted (`deferred_claim = token`).
    claims: Mutex<BTreeMap<ReqId, Option<NodeId>>>,
    pub(crate) counters: Counters,
}

impl Balance {
    /// The state of a node among `coordinators` nodes, `dc_nodes` of them in its DC.
    pub(crate) fn new(
        cfg: &crate::kernel::NodeConfig,
        coordinators: u32,
        dc_nodes: u32,
        seed: u64,
    ) -> Balance {
        let bc = BalancerConfig {
            coordinators: coordinators.max(1),
            ..BalancerConfig::default()
        };
        Balance {
            base: Instant::now(),
            balancer: Mutex::new(Balancer::new(bc, seed)),
            seq: AtomicU64::new(0),
            queue: Mutex::new(ReadQueue::new(2)),
            avr_waiting: AtomicU64::new(0),
            work: Notify::new(),
            in_service: AtomicU32::new(0),
            model: RwLock::new(cfg.service_model),
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed ^ 0x005e_41ce)),
            sketch: Mutex::new(SpaceSaving::new(2 * dc_nodes.max(1) as usize)),
            extras: Mutex::new(BTreeMap::new()),
            refused: Mutex::new(BTreeMap::new()),
            map: RwLock::new(LocalMap::default()),
            announced: Mutex::new(BTreeMap::new()),
            avg: Mutex::new(0),
            root_warming: std::sync::atomic::AtomicBool::new(true),
            root: Mutex::new(None),
            claims: Mutex::new(BTreeMap::new()),
            counters: Counters::default(),
        }
    }

    /// Microseconds since the node started, on tokio's clock.
    pub(crate) fn now_us(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn next_id(&self, me: NodeId) -> ReqId {
        ReqId {
            coord: me,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Reads queued or in service here.
    fn load(&self) -> u32 {
        let queued = u32::try_from(self.queue.lock().len()).unwrap_or(u32::MAX);
        queued.saturating_add(self.in_service.load(Ordering::Relaxed))
    }
}

impl Node {
    /// The read-balancing protocol's state (registered with the kernel when the node is built).
    pub(crate) fn balance_state(&self) -> &Balance {
        self.protocol::<Balance>()
    }
}

impl Protocol for Balance {
    type Msg = BalanceMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: BalanceMsg) {
        match msg {
            BalanceMsg::Read {
                id,
                key,
                kind,
                others,
                strategy,
                extra,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let backlog = req.backlog;
                match node.serve_read_now(&key, &kind, extra, strategy) {
                    Some((answer, mut load)) => {
                        load.queue = load.queue.saturating_add(clamp_u32(backlog));
                        req.answer(BalanceMsg::ReadReply { answer, load });
                    }
                    None => {
                        let rx = node.enqueue_read(id, key, kind, extra, others, strategy);
                        tokio::spawn(async move {
                            if let Ok((answer, load)) = rx.await {
                                req.answer(BalanceMsg::ReadReply { answer, load });
                            }
                        });
                    }
                }
            }
            BalanceMsg::Cancel { id } => node.cancel_read(id, req.from),
            BalanceMsg::Claim { id } => {
                let granted = node.grant_claim(id, req.from);
                req.answer(BalanceMsg::Claimed { granted });
            }
            BalanceMsg::Load { load, copies } => {
                let from = req.from;
                req.answer(node.root_on_load(from, load, copies));
            }
            BalanceMsg::Sketch(summary) => node.root_on_sketch(summary),
            BalanceMsg::GetMap => req.answer(BalanceMsg::Map(node.root_map())),
            BalanceMsg::Map(map) => node.adopt_map(map),
            BalanceMsg::Announce { key } => {
                node.announce(key);
                req.answer(BalanceMsg::Done(Ok(())));
            }
            BalanceMsg::MakeCopy {
                key,
                to,
                generation,
            } => {
                let node = node.clone();
                let root = req.from;
                tokio::spawn(async move {
                    let r = node.send_copy(key, to, generation, root).await;
                    req.answer(BalanceMsg::Done(r));
                });
            }
            BalanceMsg::StoreCopy {
                key,
                generation,
                root,
                payload,
                digest,
            } => req.answer(BalanceMsg::Done(
                node.store_copy(key, generation, root, payload, digest),
            )),
            BalanceMsg::Invalidate { key } => {
                let node = node.clone();
                tokio::spawn(async move {
                    node.root_invalidate(key).await;
                    req.answer(BalanceMsg::Done(Ok(())));
                });
            }
            BalanceMsg::DropCopy { key, generation } => {
                node.drop_copy(&key, generation);
                req.answer(BalanceMsg::Done(Ok(())));
            }
            other @ (BalanceMsg::ReadReply { .. }
            | BalanceMsg::Claimed { .. }
            | BalanceMsg::LoadReply { .. }
            | BalanceMsg::Done(_)) => req.unexpected(node, &other),
        }
    }
}

fn clamp_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

impl Node {
    pub(crate) fn bal(&self) -> &Balance {
        self.balance_state()
    }

    // ----- replica side -----

    /// Serves a read at once when it needs no queue (the `real` model and an immediate
    /// strategy); `None` when it must be queued.
    fn serve_read_now(
        &self,
        key: &[u8],
        kind: &ReadKind,
        extra: bool,
        strategy: Strategy,
    ) -> Option<(ReadAnswer, LoadFeedback)> {
        let b = self.bal();
        if strategy.is_deferred() || !b.model.read().is_real() {
            return None;
        }
        b.in_service.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let answer = self.read_here(key, kind, extra);
        let service_us = micros(started.elapsed());
        b.in_service.fetch_sub(1, Ordering::Relaxed);
        // The reads waiting or in service besides this one.
        let queue = b.load();
        Some((answer, LoadFeedback { queue, service_us }))
    }

    /// Queues a read for the workers; the receiver gets its answer.
    fn enqueue_read(
        &self,
        id: ReqId,
        key: Vec<u8>,
        kind: ReadKind,
        extra: bool,
        others: Vec<NodeId>,
        strategy: Strategy,
    ) -> oneshot::Receiver<(ReadAnswer, LoadFeedback)> {
        let b = self.bal();
        let (done, rx) = oneshot::channel();
        let job = Job {
            key,
            kind,
            extra,
            others,
            done,
        };
        let now = b.now_us();
        let assigned = {
            let mut q = b.queue.lock();
            if strategy.is_deferred() {
                q.push_deferred(id, job, now);
            } else {
                q.push_immediate(id, job, now);
            }
            if strategy == Strategy::Avr {
                b.avr_waiting.fetch_add(1, Ordering::Relaxed);
                self.avr_peel(&mut q)
            } else {
                Vec::new()
            }
        };
        self.send_cancels(assigned);
        b.work.notify_one();
        rx
    }

    /// Serves a read at this node the way a remote one is served (the coordinator's own
    /// replica, or its own extra copy).
    pub(crate) async fn serve_read_local(
        &self,
        key: &[u8],
        kind: &ReadKind,
        extra: bool,
        strategy: Strategy,
        id: ReqId,
        others: Vec<NodeId>,
    ) -> (ReadAnswer, LoadFeedback) {
        if let Some(a) = self.serve_read_now(key, kind, extra, strategy) {
            return a;
        }
        let rx = self.enqueue_read(id, key.to_vec(), kind.clone(), extra, others, strategy);
        rx.await.unwrap_or((
            ReadAnswer::Failed("node stopping".into()),
            LoadFeedback::default(),
        ))
    }

    /// Serves an immediate read of this node's own data through the read queue (a quorum
    /// read under a modelled service time).
    pub(crate) async fn serve_read_queued(
        &self,
        key: &[u8],
        kind: &ReadKind,
    ) -> (ReadAnswer, LoadFeedback) {
        let id = self.bal().next_id(self.id());
        self.serve_read_local(key, kind, false, Strategy::LocalFirst, id, Vec::new())
            .await
    }

    /// AVR's peeling against the DC's last average; returns the newly assigned entries'
    /// cancels to send.
    fn avr_peel(&self, q: &mut ReadQueue<Job>) -> Vec<(ReqId, Vec<NodeId>)> {
        let avg = *self.bal().avg.lock() as f64 / 1000.0;
        let ids = q.avr_assign(avg, AVR_EPS);
        ids.into_iter()
            .filter_map(|id| q.get(id).map(|e| (id, e.item.others.clone())))
            .collect()
    }

    fn send_cancels(&self, cancels: Vec<(ReqId, Vec<NodeId>)>) {
        for (id, others) in cancels {
            for o in others {
                let _ = self
                    .kernel()
                    .transport
                    .send(o, Msg::Balance(BalanceMsg::Cancel { id }));
            }
        }
    }

    fn cancel_read(&self, id: ReqId, from: NodeId) {
        let removed = self.bal().queue.lock().cancel(id, from, self.id());
        if let Some(e) = removed {
            self.bal()
                .counters
                .cancelled
                .fetch_add(1, Ordering::Relaxed);
            let load = LoadFeedback {
                queue: self.bal().load(),
                service_us: 0,
            };
            let _ = e.item.done.send((ReadAnswer::Cancelled, load));
        }
    }

    /// Asks deferred read `id`'s coordinator whether this replica may serve it; only its
    /// first claim is granted. An unreachable coordinator denies (its read is lost anyway).
    async fn claim(&self, id: ReqId) -> bool {
        if id.coord == self.id() {
            return self.grant_claim(id, self.id());
        }
        if !self.is_up(id.coord) {
            // A coordinator the detector calls down cannot answer its client: drop its reads
            // without holding a worker for the claim's timeout each.
            return false;
        }
        let msg = Msg::Balance(BalanceMsg::Claim { id });
        matches!(
            self.kernel()
                .transport
                .request(id.coord, msg, CLAIM_TIMEOUT)
                .await,
            Ok(Msg::Balance(BalanceMsg::Claimed { granted: true }))
        )
    }

    /// The coordinator's side of a claim: grants deferred read `id` to `replica` if it is
    /// still waiting and no other replica has it.
    fn grant_claim(&self, id: ReqId, replica: NodeId) -> bool {
        match self.bal().claims.lock().get_mut(&id) {
            Some(holder @ None) => {
                *holder = Some(replica);
                true
            }
            Some(Some(h)) => *h == replica,
            None => false,
        }
    }

    /// Reads `key` from this node's own store, or from its extra copies.
    fn read_here(&self, key: &[u8], kind: &ReadKind, extra: bool) -> ReadAnswer {
        if extra {
            return self.read_extra(key);
        }
        match kind {
            ReadKind::Eventual { hint_for } => {
                let store = &self.kernel().store;
                let r = match hint_for {
                    Some(n) => store.get_hint(*n, key),
                    None => store.get(key),
                };
                match r {
                    Ok(o) => ReadAnswer::Object(o),
                    Err(e) => ReadAnswer::Failed(e.to_string()),
                }
            }
            ReadKind::Timeline => match self.tl_local(key) {
                Ok(r) => ReadAnswer::Record(r),
                Err(e) => ReadAnswer::Failed(e.to_string()),
            },
        }
    }

    /// Whether this node holds a copy of `key` whose lease runs.
    fn serves_copy(&self, key: &[u8]) -> bool {
        let now = Instant::now();
        self.bal()
            .extras
            .lock()
            .get(key)
            .is_some_and(|e| e.lease_until > now)
    }

    fn read_extra(&self, key: &[u8]) -> ReadAnswer {
        let b = self.bal();
        let now = Instant::now();
        let answer = match b.extras.lock().get(key) {
            Some(e) if e.lease_until > now => Some(match &e.payload {
                CopyPayload::Object(o) => ReadAnswer::Object(Some(o.clone())),
                CopyPayload::Record(r) => ReadAnswer::Record(Some(r.clone())),
            }),
            _ => None,
        };
        match answer {
            Some(a) => {
                b.counters.extra_reads.fetch_add(1, Ordering::Relaxed);
                a
            }
            None => {
                b.counters.extra_misses.fetch_add(1, Ordering::Relaxed);
                ReadAnswer::Miss
            }
        }
    }

    /// One read worker: serves the queue until `shutdown`.
    async fn read_worker(self, shutdown: CancellationToken) {
        let b = self.bal();
        loop {
            let entry = {
                let mut q = b.queue.lock();
                q.pop_avr()
            };
            let Some(entry) = entry else {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => break,
                    _ = b.work.notified() => continue,
                }
            };
            if entry.state != EntryState::Immediate {
                // Deferred entries are AVR's or Naive's; AVR's count leaves with them.
                let _ = b
                    .avr_waiting
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
            if entry.item.extra && !self.serves_copy(&entry.item.key) {
                // The copy is gone (dropped, or its lease ran out): answer at once, without
                // claiming the read or spending a service time on it. A deferred read stays
                // with its other candidates.
                b.counters.extra_misses.fetch_add(1, Ordering::Relaxed);
                let load = LoadFeedback {
                    queue: b.load(),
                    service_us: 0,
                };
                let _ = entry.item.done.send((ReadAnswer::Miss, load));
                continue;
            }
            let deferred = entry.state != EntryState::Immediate;
            if deferred && self.kernel().cfg.deferred_claim == DeferredClaim::Token {
                let granted = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => false,
                    g = self.claim(entry.id) => g,
                };
                if !granted {
                    // Another candidate serves it (or its coordinator gave up).
                    b.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    let load = LoadFeedback {
                        queue: b.load(),
                        service_us: 0,
                    };
                    let _ = entry.item.done.send((ReadAnswer::Cancelled, load));
                    continue;
                }
            }
            if entry.state == EntryState::Pending {
                // Claimed here: the other candidates drop their copies of it.
                self.send_cancels(vec![(entry.id, entry.item.others.clone())]);
            }
            b.in_service.fetch_add(1, Ordering::Relaxed);
            let started = Instant::now();
            let model = *b.model.read();
            let sampled = model.sample(&mut *b.rng.lock());
            if let Some(us) = sampled {
                tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => {
                        b.in_service.fetch_sub(1, Ordering::Relaxed);
                        break;
                    }
                    _ = tokio::time::sleep(Duration::from_micros(us)) => {}
                }
            }
            let job = entry.item;
            let answer = self.read_here(&job.key, &job.kind, job.extra);
            let service_us = micros(started.elapsed());
            b.in_service.fetch_sub(1, Ordering::Relaxed);
            let queue = b.load();
            let _ = job.done.send((answer, LoadFeedback { queue, service_us }));
        }
        for e in b.queue.lock().drain() {
            let _ = e.item.done.send((
                ReadAnswer::Failed("node stopping".into()),
                LoadFeedback::default(),
            ));
        }
    }

    /// The read workers of this node (spawned with the node).
    pub(crate) async fn serve_read_queue(self, shutdown: CancellationToken) {
        let n = self.kernel().cfg.read_workers.max(1);
        let workers = (0..n).map(|_| self.clone().read_worker(shutdown.clone()));
        futures_util::future::join_all(workers).await;
    }

    /// Changes this node's service model (the slow-node experiments).
    pub fn set_service_model(&self, model: ServiceModel) {
        *self.bal().model.write() = model;
        // Workers asleep on an empty queue need no wake-up; a queued read is served under
        // the new model from its next pop.
    }

    /// This node's read workers.
    pub fn read_workers(&self) -> usize {
        self.kernel().cfg.read_workers.max(1)
    }

    /// This node's service model.
    pub fn service_model(&self) -> ServiceModel {
        *self.bal().model.read()
    }

    // ----- extra copies: holder side -----

    /// Keeps an extra copy made for `root` after checking its digest and generation.
    pub(crate) fn store_copy(
        &self,
        key: Vec<u8>,
        generation: u64,
        root: NodeId,
        payload: CopyPayload,
        digest: u64,
    ) -> Result<(), String> {
        let b = self.bal();
        if b.refused
            .lock()
            .get(&key)
            .is_some_and(|&(g, _)| generation < g)
        {
            return Err("the copy was invalidated by a write while it travelled".into());
        }
        if copy_digest(&payload) != digest {
            return Err("the copy's digest does not match its content".into());
        }
        let lease_until = Instant::now() + self.kernel().cfg.copy_lease;
        b.extras.lock().insert(
            key,
            Extra {
                payload,
                root,
                published: false,
                lease_until,
            },
        );
        Ok(())
    }

    /// Drops the copy of `key` (if any) and refuses copies of generations below `generation`.
    fn drop_copy(&self, key: &[u8], generation: u64) {
        let b = self.bal();
        b.extras.lock().remove(key);
        let now = Instant::now();
        let mut refused = b.refused.lock();
        refused.retain(|_, (_, at)| now.duration_since(*at) < REFUSE_TTL);
        let e = refused.entry(key.to_vec()).or_insert((0, now));
        *e = (e.0.max(generation), now);
    }

    /// Adopts the root's map: renews the leases of the copies it lists for this node and
    /// drops the other copies it made and had published (one not published yet may be newer
    /// than the map). A copy made for a previous root is left to its lease
    /// (nobody renews it; the new root re-makes it from a home replica if it is still hot).
    fn adopt_map(&self, map: ExtraMap) {
        let b = self.bal();
        let me = self.id();
        let root = map.root;
        let listed: BTreeSet<Vec<u8>> = map
            .copies
            .iter()
            .filter(|(_, h)| h.contains(&me))
            .map(|(k, _)| k.clone())
            .collect();
        {
            let mut local = b.map.write();
            if local.root == Some(root) && local.epoch > map.epoch {
                return;
            }
            local.root = Some(root);
            local.epoch = map.epoch;
            local.copies = map.copies.into_iter().collect();
        }
        let lease_until = Instant::now() + self.kernel().cfg.copy_lease;
        b.extras.lock().retain(|k, e| {
            if listed.contains(k) {
                e.root = root;
                e.published = true;
                e.lease_until = lease_until;
                true
            } else {
                e.root != root || !e.published
            }
        });
    }

    /// Renews the leases of the copies `root` lists for this node at the epoch this node
    /// knows.
    fn renew_leases(&self, root: NodeId) {
        let lease_until = Instant::now() + self.kernel().cfg.copy_lease;
        for e in self.bal().extras.lock().values_mut() {
            if e.root == root && e.published {
                e.lease_until = lease_until;
            }
        }
    }

    fn announce(&self, key: Vec<u8>) {
        let mut a = self.bal().announced.lock();
        let now = Instant::now();
        a.retain(|_, until| *until > now);
        a.insert(key, now + ANNOUNCE_TTL);
    }

    /// Whether writes of `key` must invalidate extra copies first (it is in the map or was
    /// announced, or this node cannot tell).
    pub(crate) fn is_hot(&self, key: &[u8]) -> bool {
        if !self.kernel().has_extra_copies.load(Ordering::Relaxed) {
            return false;
        }
        let b = self.bal();
        // A node that has not heard from its root since it started, or whose root took over
        // recently, cannot know which keys have copies: every write invalidates.
        if b.root_warming.load(Ordering::Relaxed) {
            let (bucket, _) = meridian_cluster::bucket_and_key(key);
            return self.registry().props_for(bucket).extra_copies == Some(true);
        }
        if b.map.read().copies.contains_key(key) {
            return true;
        }
        let a = b.announced.lock();
        !a.is_empty() && a.get(key).is_some_and(|&until| until > Instant::now())
    }

    /// The balance protocol's counters.
    pub fn balance_stats(&self) -> BalanceStats {
        let b = self.bal();
        let c = &b.counters;
        let (copy_create_ms, sketch_error_bound) = match &*b.root.lock() {
            Some(r) => (r.copy_create_ms.iter().copied().collect(), r.error_bound),
            None => (Vec::new(), 0),
        };
        BalanceStats {
            extra_copies: b.extras.lock().len() as u64,
            extra_reads: c.extra_reads.load(Ordering::Relaxed),
            extra_misses: c.extra_misses.load(Ordering::Relaxed),
            duplicate_services: c.duplicate_services.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            c3_overloads: c.c3_overloads.load(Ordering::Relaxed),
            queue: u64::from(b.load()),
            copy_create_ms,
            sketch_error_bound,
            peers: b.balancer.lock().peers(),
        }
    }

    /// The DC's extra-copy map as this node knows it: the root, its epoch, and every key with
    /// copies and their holders.
    pub fn extra_map(&self) -> ExtraMap {
        let m = self.bal().map.read();
        ExtraMap {
            root: m.root.unwrap_or(self.id()),
            epoch: m.epoch,
            copies: m
                .copies
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// The keys this node holds extra copies of that can serve now (their lease runs).
    pub fn extra_keys(&self) -> Vec<Vec<u8>> {
        let now = Instant::now();
        self.bal()
            .extras
            .lock()
            .iter()
            .filter(|(_, e)| e.lease_until > now)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The digest a copy travels with.
pub(crate) fn copy_digest(payload: &CopyPayload) -> u64 {
    let bytes = postcard::to_stdvec(payload).unwrap_or_default();
    xxhash_rust::xxh3::xxh3_64(&bytes)
}
