//! Simulated clients: in each DC, clients issue reads, read-modify-writes, blind writes and
//! deletes against a node of their DC at a fixed rate (open loop: an operation starts at its
//! scheduled time whether or not the client's earlier ones finished), and record every
//! invocation and completion in a [`Recorder`] with virtual timestamps.
//!
//! - A read-modify-write is recorded as two operations: the read, then the write carrying the
//!   read's causal context — so the write **supersedes exactly the values the read returned**
//!   (what the checkers need). A delete is the same with a tombstone. A blind write carries no
//!   context and supersedes nothing.
//! - A hostile write (`forged_contexts` share) reads, then writes with the read's context
//!   forged or mutated (random bytes, a counter raised, to `u64::MAX` too, an entry moved to
//!   another node); it is recorded as superseding what the read returned, which is exact
//!   only when the coordinator refuses or caps the forgery down to that read.
//! - Every written value is unique (`c<client>-<n>`), as the checkers require.
//! - Outcomes: a successful request is `Ok`; a failed read is `Fail` (it returned nothing);
//!   a failed write is `Unknown` unless it failed before anything was sent (a client-side
//!   refusal or a pre-check), since a replica may have applied it ("maybe written").
//! - Each client's choices come from its own ChaCha8 RNG seeded from the run's seed.

use crate::cluster::LiveNodes;
use crate::history::{ClientId, Op, Outcome, Recorder};
use bytes::Bytes;
use meridian_cluster::QuorumError;
use meridian_cluster::dvv::Clock as CausalClock;
use meridian_core::{DcId, NodeId};
use meridian_replication::{EventualNode, GetOptions, GetResult, PutOptions, ReplicationError};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What the clients do.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Clients in each DC.
    pub clients_per_dc: u32,
    /// Operations per second per client.
    pub rate: f64,
    /// Distinct keys (`<bucket>:k<i>`).
    pub keys: u32,
    /// The keys' bucket.
    pub bucket: String,
    /// Share of plain reads.
    pub reads: f64,
    /// Share of blind writes (no context).
    pub blind_writes: f64,
    /// Share of deletes (with a read's context); the rest are read-modify-writes.
    pub deletes: f64,
    /// Request timeout.
    pub timeout: Duration,
    /// Share of hostile writes: a read, then a write carrying a forged or mutated context
    /// (random bytes, the context with a counter raised to `u64::MAX` or by a little, an
    /// entry moved to another node), taken from the read-modify-writes' share.
    pub forged_contexts: f64,
    /// Hostile writes are drawn only this long from the start of the run, so the writes
    /// after the last forgery of a key ended can be judged for loss
    /// (`checker::forged`).
    pub forged_until: Duration,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            clients_per_dc: 4,
            rate: 20.0,
            keys: 40,
            bucket: "default".into(),
            reads: 0.4,
            blind_writes: 0.1,
            deletes: 0.05,
            timeout: Duration::from_secs(3),
            forged_contexts: 0.0,
            forged_until: Duration::MAX,
        }
    }
}

impl WorkloadConfig {
    /// Every key the clients use.
    pub fn all_keys(&self) -> Vec<Bytes> {
        (0..self.keys)
            .map(|i| Bytes::from(format!("{}:k{i}", self.bucket)))
            .collect()
    }
}

/// Counters of a run's operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Completed `Ok`.
    pub ok: u64,
    /// Completed `Fail`.
    pub failed: u64,
    /// Completed `Unknown`.
    pub unknown: u64,
}

/// Virtual microseconds since `origin`.
pub fn micros_since(origin: Instant) -> u64 {
    Instant::now().duration_since(origin).as_micros() as u64
}

/// Whether a write error happened before anything was sent (so the write surely did not
/// happen).
fn refused_before_sending(e: &ReplicationError) -> bool {
    matches!(
        e,
        ReplicationError::Quorum(
            QuorumError::NValViolation { .. }
                | QuorumError::PrValUnsatisfied { .. }
                | QuorumError::PwValUnsatisfied { .. }
                | QuorumError::InsufficientVnodes { .. }
                | QuorumError::NodeConfirmsValUnsatisfied { .. }
        ) | ReplicationError::InvalidContext { .. }
            | ReplicationError::ContextRefused(_)
            | ReplicationError::ReservedKey
            | ReplicationError::ObjectTooLarge { .. }
            | ReplicationError::TooManySiblings { .. }
            | ReplicationError::NoCoordinator { .. }
            | ReplicationError::NotJoined { .. }
    )
}

/// What one scheduled operation does (drawn by its client when it is due).
#[derive(Debug, Clone)]
enum Plan {
    Read,
    BlindWrite(Bytes),
    /// Read, then write the value (`None`: delete) with the read's context.
    ReadModifyWrite(Option<Bytes>),
    /// Read, then write the value with the read's context mutated by `Forgery`.
    ForgedWrite(Bytes, Forgery),
}

/// How a hostile client mutates a context (drawn from its RNG, so runs replay by seed).
#[derive(Debug, Clone)]
enum Forgery {
    /// Arbitrary bytes instead of the context.
    Bytes(Vec<u8>),
    /// Entry `index` (modulo the entry count) raised to `counter`.
    Raise { index: usize, counter: u64 },
    /// Entry `index` copied to node `node` with `counter`.
    OtherNode {
        index: usize,
        node: u32,
        counter: u64,
    },
}

impl Forgery {
    fn draw(rng: &mut ChaCha8Rng) -> Forgery {
        let counter = match rng.random_range(0..3) {
            0 => u64::MAX,
            1 => u64::MAX - 1,
            _ => rng.random_range(1..20),
        };
        let index = rng.random_range(0..8);
        match rng.random_range(0..3) {
            0 => Forgery::Bytes((0..rng.random_range(0..24)).map(|_| rng.random()).collect()),
            1 => Forgery::Raise { index, counter },
            _ => Forgery::OtherNode {
                index,
                node: rng.random_range(0..8),
                counter,
            },
        }
    }

    /// The forged context made from the real one `ctx`.
    fn apply(&self, ctx: &[u8]) -> Vec<u8> {
        let entry = |index: usize| {
            let clock = CausalClock::decode(ctx).ok()?;
            let n = clock.len();
            (n > 0).then(|| {
                (
                    clock.clone(),
                    clock.iter().nth(index % n).expect("in range"),
                )
            })
        };
        match self {
            Forgery::Bytes(b) => b.clone(),
            Forgery::Raise { index, counter } => match entry(*index) {
                Some((clock, (r, _))) => clock.with_entry(r, *counter).encode(),
                None => ctx.to_vec(),
            },
            Forgery::OtherNode {
                index,
                node,
                counter,
            } => match entry(*index) {
                Some((clock, (mut r, _))) => {
                    r.node = NodeId(*node);
                    clock.with_entry(r, *counter).encode()
                }
                None => ctx.to_vec(),
            },
        }
    }
}

/// The shared state of a run's operations.
#[derive(Clone)]
struct Runner {
    recorder: Recorder,
    origin: Instant,
    cfg: WorkloadConfig,
}

impl Runner {
    fn get_opts(&self) -> GetOptions {
        let mut o = GetOptions::default();
        o.props.timeout_ms = Some(self.cfg.timeout.as_millis() as u64);
        o
    }

    fn put_opts(&self) -> PutOptions {
        let mut o = PutOptions::default();
        o.props.timeout_ms = Some(self.cfg.timeout.as_millis() as u64);
        o
    }

    /// A recorded read; returns its result if it succeeded.
    async fn read(
        &self,
        client: ClientId,
        dc: DcId,
        node: &EventualNode,
        key: &Bytes,
    ) -> Option<GetResult> {
        let op = self
            .recorder
            .invoke(client, dc, key.clone(), Op::Read, micros_since(self.origin));
        let r = node.get(key, self.get_opts()).await;
        let outcome = match &r {
            Ok(g) => Outcome::read(g.values().iter().cloned()),
            Err(e) => Outcome::fail(e.to_string()),
        };
        self.recorder
            .complete(op, outcome, micros_since(self.origin));
        r.ok()
    }

    /// A recorded write (`value: None`: a delete) with the context of `read`, superseding
    /// exactly the values it returned.
    async fn write(
        &self,
        client: ClientId,
        dc: DcId,
        node: &EventualNode,
        key: &Bytes,
        value: Option<Bytes>,
        read: Option<&GetResult>,
    ) {
        let supersedes: Vec<Bytes> = read.map(|g| g.values().to_vec()).unwrap_or_default();
        let context = read.map(GetResult::context);
        let op = match &value {
            Some(v) => Op::write(v.clone(), supersedes),
            None => Op::delete(supersedes),
        };
        let id = self
            .recorder
            .invoke(client, dc, key.clone(), op, micros_since(self.origin));
        let r = match value {
            Some(v) => node.put(key, v, context.as_deref(), self.put_opts()).await,
            None => node.delete(key, context.as_deref(), self.put_opts()).await,
        };
        self.recorder
            .complete(id, write_outcome(r), micros_since(self.origin));
    }

    /// A hostile write: `value` with the forged `context` made from `read`'s. Recorded as
    /// superseding what the read returned: the coordinator caps a forged context at what its
    /// copy holds, so a write claiming more than it saw supersedes at most what the read
    /// returned plus what the coordinator held that the client could have read.
    async fn forged_write(
        &self,
        (client, dc): (ClientId, DcId),
        node: &EventualNode,
        key: &Bytes,
        value: Bytes,
        (read, context): (&GetResult, Vec<u8>),
    ) {
        let supersedes: Vec<Bytes> = read.values().to_vec();
        let op = Op::write(value.clone(), supersedes);
        let id = self
            .recorder
            .invoke(client, dc, key.clone(), op, micros_since(self.origin));
        let r = node.put(key, value, Some(&context), self.put_opts()).await;
        self.recorder
            .complete(id, write_outcome(r), micros_since(self.origin));
    }

    async fn execute(self, client: ClientId, dc: DcId, node: EventualNode, key: Bytes, plan: Plan) {
        match plan {
            Plan::Read => {
                self.read(client, dc, &node, &key).await;
            }
            Plan::BlindWrite(v) => self.write(client, dc, &node, &key, Some(v), None).await,
            Plan::ReadModifyWrite(value) => {
                // A write after a failed read would be blind; skip it to keep the mix honest.
                if let Some(read) = self.read(client, dc, &node, &key).await {
                    self.write(client, dc, &node, &key, value, Some(&read))
                        .await;
                }
            }
            Plan::ForgedWrite(value, forgery) => {
                if let Some(read) = self.read(client, dc, &node, &key).await {
                    let context = forgery.apply(&read.context());
                    self.forged_write((client, dc), &node, &key, value, (&read, context))
                        .await;
                }
            }
        }
    }
}

/// One client: it draws an operation at each scheduled time and starts it, whether or not
/// its earlier ones finished (open loop, no coordinated omission).
struct Client {
    id: ClientId,
    dc: DcId,
    nodes_in_dc: Vec<NodeId>,
    live: LiveNodes,
    runner: Runner,
    rng: ChaCha8Rng,
    written: u64,
}

impl Client {
    fn coordinator(&mut self) -> Option<EventualNode> {
        pick_coordinator(&self.live, &self.nodes_in_dc, &mut self.rng)
    }

    fn next_value(&mut self) -> Bytes {
        unique_value(self.id, &mut self.written)
    }

    /// The value of a hostile write: unique like the others, marked as forged
    /// ([`is_forged_value`]) so the checkers can tell what a forged context may supersede.
    fn next_forged_value(&mut self) -> Bytes {
        let v = unique_value(self.id, &mut self.written);
        let mut marked = FORGED_VALUE_PREFIX.to_vec();
        marked.extend_from_slice(&v);
        Bytes::from(marked)
    }

    fn plan(&mut self) -> (Bytes, Plan) {
        let cfg = &self.runner.cfg;
        let key = Bytes::from(format!(
            "{}:k{}",
            cfg.bucket,
            self.rng.random_range(0..cfg.keys)
        ));
        let (reads, blind, deletes) = (cfg.reads, cfg.blind_writes, cfg.deletes);
        let roll: f64 = self.rng.random();
        let plan = if roll < reads {
            Plan::Read
        } else if roll < reads + blind {
            Plan::BlindWrite(self.next_value())
        } else if roll >= 1.0 - deletes {
            Plan::ReadModifyWrite(None)
        } else if roll >= 1.0 - deletes - cfg.forged_contexts
            && u128::from(micros_since(self.runner.origin)) < cfg.forged_until.as_micros()
        {
            let forgery = Forgery::draw(&mut self.rng);
            Plan::ForgedWrite(self.next_forged_value(), forgery)
        } else {
            Plan::ReadModifyWrite(Some(self.next_value()))
        };
        (key, plan)
    }

    async fn run(mut self, until: CancellationToken) {
        let phase = self.rng.random::<f64>();
        open_loop(self.runner.cfg.rate, phase, until, || {
            let Some(node) = self.coordinator() else {
                return;
            };
            let (key, plan) = self.plan();
            tokio::spawn(
                self.runner
                    .clone()
                    .execute(self.id, self.dc, node, key, plan),
            );
        })
        .await;
    }
}

/// A client's open loop: calls `start` (which starts one operation without waiting for it)
/// every `1 / rate` seconds until `until` is cancelled, the first call after `phase` (in
/// `[0, 1)`) of a period, so clients drawn with different phases do not move in lockstep.
pub(crate) async fn open_loop(
    rate: f64,
    phase: f64,
    until: CancellationToken,
    mut start: impl FnMut(),
) {
    let every = Duration::from_secs_f64(1.0 / rate.max(1e-6));
    let mut next = Instant::now() + every.mul_f64(phase);
    loop {
        tokio::select! {
            biased;
            _ = until.cancelled() => break,
            _ = tokio::time::sleep_until(next) => {}
        }
        next += every;
        start();
    }
}

/// Starts the clients (`machines`: every node with its DC). They stop starting operations
/// when `until` is cancelled; operations already started finish within the request timeout.
pub fn spawn_clients(
    cfg: &WorkloadConfig,
    seed: u64,
    machines: &[(NodeId, DcId)],
    live: LiveNodes,
    recorder: Recorder,
    origin: Instant,
    until: CancellationToken,
) {
    let runner = Runner {
        recorder,
        origin,
        cfg: cfg.clone(),
    };
    for slot in client_slots(machines, cfg.clients_per_dc) {
        let client = Client {
            id: slot.id,
            dc: slot.dc,
            nodes_in_dc: slot.nodes_in_dc,
            live: live.clone(),
            runner: runner.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ (u64::from(slot.id.0) << 40) ^ 0xc11e),
            written: 0,
        };
        tokio::spawn(client.run(until.clone()));
    }
}

/// Where one workload client runs.
pub(crate) struct ClientSlot {
    /// Its id: clients are numbered from 1, DC by DC.
    pub id: ClientId,
    /// Its DC.
    pub dc: DcId,
    /// The number of DCs.
    pub dcs: u32,
    /// The nodes of its DC, its coordinators.
    pub nodes_in_dc: Vec<NodeId>,
}

/// `per_dc` clients in every DC of `machines` (every node with its DC), in id order.
pub(crate) fn client_slots(machines: &[(NodeId, DcId)], per_dc: u32) -> Vec<ClientSlot> {
    let dcs = machines.iter().map(|m| m.1.0).max().map_or(0, |d| d + 1);
    let mut slots = Vec::new();
    for dc in 0..dcs {
        let nodes_in_dc: Vec<NodeId> = machines
            .iter()
            .filter(|m| m.1 == DcId(dc))
            .map(|m| m.0)
            .collect();
        for i in 0..per_dc {
            slots.push(ClientSlot {
                id: ClientId(dc * per_dc + i + 1),
                dc: DcId(dc),
                dcs,
                nodes_in_dc: nodes_in_dc.clone(),
            });
        }
    }
    slots
}

/// The outcome counts of a history's operations (an operation that never completed counts
/// as unknown).
pub fn count(history: &crate::History) -> OpCounts {
    let mut c = OpCounts::default();
    for op in history.operations().unwrap_or_default() {
        match op.outcome {
            Outcome::Ok(_) => c.ok += 1,
            Outcome::Fail(_) => c.failed += 1,
            Outcome::Unknown(_) => c.unknown += 1,
        }
    }
    c
}

/// A random up node of `nodes_in_dc` (a client's coordinator), `None` if all are down.
pub(crate) fn pick_coordinator(
    live: &LiveNodes,
    nodes_in_dc: &[NodeId],
    rng: &mut ChaCha8Rng,
) -> Option<EventualNode> {
    let live = live.read();
    let up: Vec<&EventualNode> = nodes_in_dc.iter().filter_map(|n| live.get(n)).collect();
    if up.is_empty() {
        return None;
    }
    Some(up[rng.random_range(0..up.len())].clone())
}

/// What a write's or delete's result says happened: refused before it was sent (it did
/// not happen), or failed later (it may have).
fn write_outcome<T>(r: Result<T, ReplicationError>) -> Outcome {
    match r {
        Ok(_) => Outcome::done(),
        Err(e) if refused_before_sending(&e) => Outcome::fail(e.to_string()),
        Err(e) => Outcome::unknown(e.to_string()),
    }
}

/// What the values of hostile writes start with (see [`is_forged_value`]).
const FORGED_VALUE_PREFIX: &[u8] = b"forged-";

/// Whether `value` was written by a hostile write (one carrying a forged context).
pub fn is_forged_value(value: &[u8]) -> bool {
    value.starts_with(FORGED_VALUE_PREFIX)
}

/// Client `id`'s next written value, `c<id>-<n>`: unique per run, as the checkers need.
pub(crate) fn unique_value(id: ClientId, written: &mut u64) -> Bytes {
    *written += 1;
    Bytes::from(format!("c{}-{}", id.0, written))
}
