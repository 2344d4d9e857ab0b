//! Simulated clients of a timeline bucket (`specs/timeline.md`), and the recorder of a
//! timeline run: the client history ([`TlHistory`]) plus every node's issue and apply logs
//! ([`Issued`], [`Applied`]), all stamped with the simulation's global virtual time.
//!
//! - **Clients.** In each DC, `clients_per_dc` clients start operations at a fixed rate (open
//!   loop, as in [`crate::workload`]) against a random up node of their DC: `read_any`,
//!   `read_critical`, `read_latest`, `write`, `test_and_set`, `delete` and insert-if-absent, in
//!   the proportions of [`TlMix`].
//! - **Locality.** Key `i` has home DC `i mod dcs`; a client picks one of its home keys with
//!   probability `locality`, else one of the others. Writes therefore come mostly from one DC
//!   per key, and masters migrate there (after `migration_threshold` consecutive writes).
//! - **Sessions.** Each client remembers the highest version (in merge precedence) it has seen
//!   of each key, from reads, acknowledged writes and mismatches. `read_critical` asks for
//!   that version (read-your-writes and monotonic reads), and a test-and-set expects it. A
//!   client that has seen nothing of the key reads with `read_any` and inserts with
//!   insert-if-absent instead.
//! - **Values** are unique per run (`c<client>-<n>`), as the checkers require.
//! - **Outcomes.** Reads: the version and value, or [`TlResult::Failed`]. Writes: the issued
//!   version; [`TlResult::Mismatch`] for `version_mismatch` / `already_exists`;
//!   [`TlResult::Failed`] only when the error says the write was surely not applied
//!   (`maybe_applied = false`, input errors); [`TlResult::Unknown`] otherwise (timeouts,
//!   "may have applied", anything unexpected). An operation still running after `timeout` is
//!   abandoned and recorded as failed (reads) or unknown (writes). So is one whose
//!   coordinator crashed while it ran (a real client loses its connection and never hears
//!   what the dying node's code returned). With [`TlWorkloadConfig::trust_failures`] off,
//!   every write error but a mismatch is recorded as unknown.
//! - **Logs.** [`TlRecorder::observer`] is installed on every node
//!   ([`crate::cluster::SimCluster::set_timeline_observer`], restarted nodes included): each
//!   [`TlTrace::Issued`] becomes an [`Issued`], each [`TlTrace::Applied`] an [`Applied`].
//!
//! Each client's choices come from its own ChaCha8 RNG seeded from the run's seed.

use crate::checker::timeline::{
    Applied, IssueKind, Issued, MigrationTarget, MigrationTargets, TlHistory, TlOp, TlResult,
    TlVersion,
};
use crate::cluster::{CrashCounts, LiveNodes};
use crate::history::{ClientId, OpId};
use crate::text;
use crate::workload::micros_since;
use bytes::Bytes;
use meridian_core::{DcId, NodeId};
use meridian_replication::timeline::{Content, Expect, Version};
use meridian_replication::{
    EventualNode, ReadMode, ReplicationError, TlIssueKind, TlObserver, TlTrace,
};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The proportions of the operations (weights; they need not sum to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TlMix {
    /// `read_any`.
    pub read_any: f64,
    /// `read_critical` at the session's version.
    pub read_critical: f64,
    /// `read_latest`.
    pub read_latest: f64,
    /// Blind `write`.
    pub write: f64,
    /// `test_and_set` expecting the session's version.
    pub test_and_set: f64,
    /// `delete`.
    pub delete: f64,
    /// Insert-if-absent (a test-and-set expecting no record).
    pub insert: f64,
}

impl Default for TlMix {
    fn default() -> Self {
        TlMix {
            read_any: 0.2,
            read_critical: 0.15,
            read_latest: 0.15,
            write: 0.25,
            test_and_set: 0.15,
            delete: 0.04,
            insert: 0.06,
        }
    }
}

/// What the timeline clients do.
#[derive(Debug, Clone)]
pub struct TlWorkloadConfig {
    /// Clients in each DC.
    pub clients_per_dc: u32,
    /// Operations per second per client.
    pub rate: f64,
    /// Distinct keys (`<bucket>:k<i>`); key `i`'s home DC is `i mod dcs`.
    pub keys: u32,
    /// The keys' bucket (a timeline bucket).
    pub bucket: String,
    /// Probability that a client picks one of its DC's home keys.
    pub locality: f64,
    /// The operation mix.
    pub mix: TlMix,
    /// How long a client waits for an operation before abandoning it; an operation that
    /// takes this long is reported by the fail-fast check as hung. The default, 20 s, is ten
    /// times the scenarios' `master_timeout_ms`: a coordinator cut off from every replica
    /// tries them one after the other, each for `master_timeout_ms`, and `read_critical` may
    /// do that twice before asking the master (up to about 9 timeouts with N = 3).
    pub timeout: Duration,
    /// Whether a write error that says the write surely did not apply is recorded as
    /// [`TlResult::Failed`] (the checkers then hold the protocol to it); when false every
    /// write error but a mismatch is recorded as [`TlResult::Unknown`].
    pub trust_failures: bool,
}

impl Default for TlWorkloadConfig {
    fn default() -> Self {
        TlWorkloadConfig {
            clients_per_dc: 3,
            rate: 20.0,
            keys: 24,
            bucket: "tl".into(),
            locality: 0.9,
            mix: TlMix::default(),
            timeout: Duration::from_secs(20),
            trust_failures: true,
        }
    }
}

impl TlWorkloadConfig {
    /// Every key the clients use.
    pub fn all_keys(&self) -> Vec<Bytes> {
        (0..self.keys).map(|i| self.key(i)).collect()
    }

    fn key(&self, i: u32) -> Bytes {
        Bytes::from(format!("{}:k{i}", self.bucket))
    }
}

/// The checkers' version of a protocol version.
pub fn tl_version(v: Version) -> TlVersion {
    TlVersion::new(v.generation, v.mepoch, v.seq)
}

/// The logs of a timeline run (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct TlLogs {
    /// Every version a master issued, in issue order.
    pub issued: Vec<Issued>,
    /// Every record a replica stored, in apply order.
    pub applied: Vec<Applied>,
    /// What the clients asked and were told.
    pub history: TlHistory,
    /// For every write issued by a master outside the write's origin DC, where a migration
    /// could go per the issuer's layout and failure detector at that moment; for every write by
    /// a master no longer among the key's primaries, that fact. Filled only by
    /// [`TlRecorder::observer_with`].
    pub migration_targets: MigrationTargets,
}

impl TlLogs {
    /// The logs as readable text, one line per entry, merged in time order: `issue`,
    /// `apply`, and each client operation at its invocation (`op`). For saving a failing
    /// run; not meant to be parsed back.
    pub fn dump(&self) -> String {
        let mut lines: Vec<(u64, u8, String)> = Vec::new();
        for i in &self.issued {
            lines.push((
                i.at,
                0,
                format!(
                    "issue {} {} by {} ({}) as {} from {}: {} master {} ({})",
                    text::show(&i.key),
                    i.ver,
                    i.by_node,
                    i.by_dc,
                    i.kind,
                    i.origin_dc,
                    i.content
                        .as_ref()
                        .map_or("<tombstone>".into(), |v| text::show(v)),
                    i.new_master_node,
                    i.new_master_dc
                ),
            ));
        }
        for a in &self.applied {
            lines.push((
                a.at,
                1,
                format!(
                    "apply {} {} at {}: {}",
                    text::show(&a.key),
                    a.ver,
                    a.node,
                    a.content
                        .as_ref()
                        .map_or("<tombstone>".into(), |v| text::show(v)),
                ),
            ));
        }
        match self.history.operations() {
            Ok(ops) => {
                for op in ops {
                    lines.push((
                        op.invoked_at,
                        2,
                        format!("op {}: {op}", text::show(&op.key)),
                    ));
                }
            }
            Err(e) => lines.push((0, 2, format!("malformed history: {e}"))),
        }
        lines.sort_by_key(|l| (l.0, l.1));
        let mut out = String::new();
        for (at, _, l) in lines {
            out.push_str(&format!("{at:>10} {l}\n"));
        }
        out
    }
}

/// The shared, cloneable recorder of a timeline run's [`TlLogs`], with times in virtual µs
/// since `origin`.
#[derive(Clone)]
pub struct TlRecorder {
    logs: Arc<Mutex<TlLogs>>,
    origin: Instant,
}

impl TlRecorder {
    /// An empty recorder whose times count from `origin`.
    pub fn new(origin: Instant) -> TlRecorder {
        TlRecorder {
            logs: Arc::new(Mutex::new(TlLogs::default())),
            origin,
        }
    }

    /// A copy of the logs so far.
    pub fn snapshot(&self) -> TlLogs {
        self.logs.lock().clone()
    }

    /// The observer to install on every node: it appends to the issue and apply logs.
    pub fn observer(&self) -> TlObserver {
        self.make_observer(None)
    }

    /// [`TlRecorder::observer`] that also records [`TlLogs::migration_targets`], asking the
    /// issuing node (found in `live`) for the key's first `n_val` replicas and which of them
    /// it believes up.
    pub fn observer_with(&self, live: LiveNodes, n_val: usize) -> TlObserver {
        self.make_observer(Some((live, n_val)))
    }

    fn make_observer(&self, placement: Option<(LiveNodes, usize)>) -> TlObserver {
        let logs = self.logs.clone();
        let origin = self.origin;
        Arc::new(move |t: TlTrace| {
            let at = micros_since(origin);
            if let (
                Some((live, n_val)),
                TlTrace::Issued {
                    key,
                    record,
                    kind: TlIssueKind::Write,
                    by,
                    origin_dc,
                },
            ) = (&placement, &t)
                && let Some(node) = live.read().get(&by.node)
            {
                let target = {
                    let layout = node.layout();
                    let p = layout.ring().partition_of(key);
                    let all = layout.replicas(p);
                    let primaries = &all[..(*n_val).min(all.len())];
                    if !primaries.contains(&by.node) {
                        Some(MigrationTarget::NotAPrimary)
                    } else if *origin_dc != by.dc {
                        let first = primaries
                            .iter()
                            .find(|r| {
                                layout.topology().dc_of(**r) == Some(*origin_dc) && node.is_up(**r)
                            })
                            .copied();
                        Some(MigrationTarget::FirstUp(first))
                    } else {
                        None
                    }
                };
                if let Some(target) = target {
                    logs.lock()
                        .migration_targets
                        .insert((key.clone(), tl_version(record.ver)), target);
                }
            }
            match t {
                TlTrace::Issued {
                    key,
                    record,
                    kind,
                    by,
                    origin_dc,
                } => logs.lock().issued.push(Issued {
                    key,
                    ver: tl_version(record.ver),
                    kind: match kind {
                        TlIssueKind::Insert => IssueKind::Insert,
                        TlIssueKind::Write => IssueKind::Write,
                        TlIssueKind::ForceMaster => IssueKind::ForceMaster,
                    },
                    content: record.content.value().cloned(),
                    by_node: by.node,
                    by_dc: by.dc,
                    origin_dc,
                    new_master_node: record.master.node,
                    new_master_dc: record.master.dc,
                    at,
                }),
                TlTrace::Applied { key, node, record } => logs.lock().applied.push(Applied {
                    key,
                    node,
                    ver: tl_version(record.ver),
                    content: record.content.value().cloned(),
                    at,
                }),
            }
        })
    }

    fn invoke(&self, client: ClientId, dc: DcId, key: &Bytes, op: TlOp) -> OpId {
        let at = micros_since(self.origin);
        self.logs
            .lock()
            .history
            .invoke(client, dc, key.clone(), op, at)
    }

    fn complete(&self, op: OpId, result: TlResult) {
        let at = micros_since(self.origin);
        self.logs.lock().history.complete(op, result, at);
    }
}

/// Whether a write error says the write surely did not apply.
fn surely_not_applied(e: &ReplicationError) -> bool {
    match e {
        ReplicationError::MasterUnavailable { maybe_applied, .. }
        | ReplicationError::InsertArbiterUnavailable { maybe_applied, .. } => !maybe_applied,
        ReplicationError::ReservedKey
        | ReplicationError::ObjectTooLarge { .. }
        | ReplicationError::NotJoined { .. }
        | ReplicationError::WrongBucketType { .. } => true,
        _ => false,
    }
}

/// The recorded result of a write, TAS or delete (`trust`: see
/// [`TlWorkloadConfig::trust_failures`]).
fn write_result(r: Option<Result<Version, ReplicationError>>, trust: bool) -> TlResult {
    match r {
        None => TlResult::Unknown("the client gave up waiting".into()),
        Some(Ok(v)) => TlResult::Written { ver: tl_version(v) },
        Some(Err(ReplicationError::VersionMismatch { current })) => TlResult::Mismatch {
            current: current.map(tl_version),
        },
        Some(Err(ReplicationError::AlreadyExists { current })) => TlResult::Mismatch {
            current: Some(tl_version(current)),
        },
        Some(Err(e)) if trust && surely_not_applied(&e) => TlResult::Failed(e.to_string()),
        Some(Err(e)) => TlResult::Unknown(e.to_string()),
    }
}

/// What one scheduled operation does.
#[derive(Debug, Clone)]
enum Plan {
    ReadAny,
    ReadCritical(Version),
    ReadLatest,
    Write(Bytes),
    TestAndSet(Version, Bytes),
    Delete,
    Insert(Bytes),
}

/// A client's session: the highest version (in merge precedence) seen of each key.
type Session = Arc<Mutex<BTreeMap<Bytes, Version>>>;

fn see(session: &Session, key: &Bytes, v: Version) {
    let mut s = session.lock();
    match s.get(key) {
        Some(old) if old.precedence() >= v.precedence() => {}
        _ => {
            s.insert(key.clone(), v);
        }
    }
}

/// Who runs an operation: the client's recorder, patience, identity and session.
#[derive(Clone)]
struct Ctx {
    rec: TlRecorder,
    timeout: Duration,
    client: ClientId,
    dc: DcId,
    session: Session,
    crashes: CrashCounts,
    trust_failures: bool,
}

impl Ctx {
    fn crashes_of(&self, node: &EventualNode) -> u32 {
        self.crashes.read().get(&node.id()).copied().unwrap_or(0)
    }

    /// A recorded read.
    async fn read(&self, node: &EventualNode, key: &Bytes, mode: ReadMode) {
        let op = match mode {
            ReadMode::Any => TlOp::ReadAny,
            ReadMode::Critical(v) => TlOp::ReadCritical { min: tl_version(v) },
            ReadMode::Latest => TlOp::ReadLatest,
        };
        let id = self.rec.invoke(self.client, self.dc, key, op);
        let life = self.crashes_of(node);
        let r = tokio::time::timeout(self.timeout, node.tl_get(key, mode)).await;
        let result = match r {
            _ if self.crashes_of(node) != life => {
                TlResult::Failed("the coordinator crashed (connection lost)".into())
            }
            Err(_) => TlResult::Failed("the client gave up waiting".into()),
            Ok(Err(e)) => TlResult::Failed(e.to_string()),
            Ok(Ok(r)) => {
                if let Some(v) = r.version() {
                    see(&self.session, key, v);
                }
                TlResult::Read {
                    ver: r.version().map(tl_version),
                    value: r.value().cloned(),
                }
            }
        };
        self.rec.complete(id, result);
    }

    /// A recorded write, TAS or delete.
    async fn write(
        &self,
        node: &EventualNode,
        key: &Bytes,
        op: TlOp,
        content: Content,
        expect: Expect,
    ) {
        let id = self.rec.invoke(self.client, self.dc, key, op);
        let life = self.crashes_of(node);
        let r = tokio::time::timeout(self.timeout, node.tl_put(key, content, expect))
            .await
            .ok()
            .map(|r| r.map(|w| w.record.ver));
        if self.crashes_of(node) != life {
            let lost = TlResult::Unknown("the coordinator crashed (connection lost)".into());
            self.rec.complete(id, lost);
            return;
        }
        match &r {
            Some(Ok(v)) => see(&self.session, key, *v),
            Some(Err(ReplicationError::VersionMismatch { current: Some(v) })) => {
                see(&self.session, key, *v)
            }
            Some(Err(ReplicationError::AlreadyExists { current })) => {
                see(&self.session, key, *current)
            }
            _ => {}
        }
        self.rec.complete(id, write_result(r, self.trust_failures));
    }

    /// Runs one planned operation.
    async fn execute(self, node: EventualNode, key: Bytes, plan: Plan) {
        match plan {
            Plan::ReadAny => self.read(&node, &key, ReadMode::Any).await,
            Plan::ReadCritical(v) => self.read(&node, &key, ReadMode::Critical(v)).await,
            Plan::ReadLatest => self.read(&node, &key, ReadMode::Latest).await,
            Plan::Write(value) => {
                let op = TlOp::Write {
                    value: value.clone(),
                };
                self.write(&node, &key, op, Content::Value(value), Expect::Any)
                    .await
            }
            Plan::TestAndSet(v, value) => {
                let op = TlOp::TestAndSet {
                    expected: Some(tl_version(v)),
                    value: value.clone(),
                };
                self.write(&node, &key, op, Content::Value(value), Expect::Version(v))
                    .await
            }
            Plan::Delete => {
                self.write(&node, &key, TlOp::Delete, Content::Tombstone, Expect::Any)
                    .await
            }
            Plan::Insert(value) => {
                let op = TlOp::TestAndSet {
                    expected: None,
                    value: value.clone(),
                };
                self.write(&node, &key, op, Content::Value(value), Expect::Absent)
                    .await
            }
        }
    }
}

/// One client (see the module docs).
struct Client {
    id: ClientId,
    dc: DcId,
    dcs: u32,
    nodes_in_dc: Vec<NodeId>,
    live: LiveNodes,
    cfg: TlWorkloadConfig,
    ctx: Ctx,
    rng: ChaCha8Rng,
    written: u64,
}

impl Client {
    fn coordinator(&mut self) -> Option<EventualNode> {
        crate::workload::pick_coordinator(&self.live, &self.nodes_in_dc, &mut self.rng)
    }

    fn next_value(&mut self) -> Bytes {
        crate::workload::unique_value(self.id, &mut self.written)
    }

    fn pick_key(&mut self) -> Bytes {
        let keys = self.cfg.keys.max(1);
        let home = self.rng.random_bool(self.cfg.locality.clamp(0.0, 1.0));
        let candidates: Vec<u32> = (0..keys)
            .filter(|i| (i % self.dcs == self.dc.0) == home)
            .collect();
        let i = if candidates.is_empty() {
            self.rng.random_range(0..keys)
        } else {
            candidates[self.rng.random_range(0..candidates.len())]
        };
        self.cfg.key(i)
    }

    fn plan(&mut self) -> (Bytes, Plan) {
        let key = self.pick_key();
        let seen = self.ctx.session.lock().get(&key).copied();
        let m = self.cfg.mix;
        let weights = [
            m.read_any,
            m.read_critical,
            m.read_latest,
            m.write,
            m.test_and_set,
            m.delete,
            m.insert,
        ];
        let total: f64 = weights.iter().map(|w| w.max(0.0)).sum();
        let mut roll = self.rng.random::<f64>() * total;
        let mut pick = weights.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            if roll < w.max(0.0) {
                pick = i;
                break;
            }
            roll -= w.max(0.0);
        }
        let plan = match (pick, seen) {
            (0, _) | (1, None) => Plan::ReadAny,
            (1, Some(v)) => Plan::ReadCritical(v),
            (2, _) => Plan::ReadLatest,
            (3, _) => Plan::Write(self.next_value()),
            (4, Some(v)) => Plan::TestAndSet(v, self.next_value()),
            (5, _) => Plan::Delete,
            _ => Plan::Insert(self.next_value()),
        };
        (key, plan)
    }

    async fn run(mut self, until: CancellationToken) {
        let phase = self.rng.random::<f64>();
        crate::workload::open_loop(self.cfg.rate, phase, until, || {
            let Some(node) = self.coordinator() else {
                return;
            };
            let (key, plan) = self.plan();
            tokio::spawn(self.ctx.clone().execute(node, key, plan));
        })
        .await;
    }
}

/// Starts the timeline clients (`machines`: every node with its DC). They stop starting
/// operations when `until` is cancelled; operations already started end within the config's
/// `timeout`.
pub fn spawn_clients(
    cfg: &TlWorkloadConfig,
    seed: u64,
    machines: &[(NodeId, DcId)],
    live: LiveNodes,
    crashes: CrashCounts,
    rec: TlRecorder,
    until: CancellationToken,
) {
    for slot in crate::workload::client_slots(machines, cfg.clients_per_dc) {
        let client = Client {
            id: slot.id,
            dc: slot.dc,
            dcs: slot.dcs,
            nodes_in_dc: slot.nodes_in_dc,
            live: live.clone(),
            cfg: cfg.clone(),
            ctx: Ctx {
                rec: rec.clone(),
                timeout: cfg.timeout,
                client: slot.id,
                dc: slot.dc,
                session: Session::default(),
                crashes: crashes.clone(),
                trust_failures: cfg.trust_failures,
            },
            rng: ChaCha8Rng::seed_from_u64(seed ^ (u64::from(slot.id.0) << 40) ^ 0x71e1),
            written: 0,
        };
        tokio::spawn(client.run(until.clone()));
    }
}

/// The outcome counts of a timeline history (an operation that never completed counts as
/// unknown; a mismatch as ok).
pub fn count(history: &TlHistory) -> crate::workload::OpCounts {
    let mut c = crate::workload::OpCounts::default();
    for op in history.operations().unwrap_or_default() {
        match op.result {
            TlResult::Failed(_) => c.failed += 1,
            TlResult::Unknown(_) => c.unknown += 1,
            _ => c.ok += 1,
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_errors_map_to_the_checkers_outcomes() {
        let v = Version::new(5, 0, 2);
        assert_eq!(
            write_result(Some(Ok(v)), true),
            TlResult::Written {
                ver: TlVersion::new(5, 0, 2)
            }
        );
        assert_eq!(
            write_result(
                Some(Err(ReplicationError::VersionMismatch { current: None })),
                true
            ),
            TlResult::Mismatch { current: None }
        );
        assert_eq!(
            write_result(
                Some(Err(ReplicationError::AlreadyExists { current: v })),
                true
            ),
            TlResult::Mismatch {
                current: Some(TlVersion::new(5, 0, 2))
            }
        );
        let unavailable = |maybe_applied| ReplicationError::MasterUnavailable {
            key: "k".into(),
            master: NodeId(1),
            dc: DcId(0),
            reason: "down".into(),
            maybe_applied,
        };
        assert!(matches!(
            write_result(Some(Err(unavailable(false))), true),
            TlResult::Failed(_)
        ));
        assert!(matches!(
            write_result(Some(Err(unavailable(false))), false),
            TlResult::Unknown(_)
        ));
        assert!(matches!(
            write_result(Some(Err(unavailable(true))), true),
            TlResult::Unknown(_)
        ));
        assert!(matches!(write_result(None, true), TlResult::Unknown(_)));
        assert!(matches!(
            write_result(Some(Err(ReplicationError::Overload)), true),
            TlResult::Unknown(_)
        ));
    }
}
