//! The eventual buckets' Redis CRDTs under faults: clients in every DC drive sets, lists,
//! sorted-set counters and HyperLogLogs through the real dispatch facade
//! ([`meridian_replication::Dispatch`]: `element_update`, `sequence_update`,
//! `register_update`, the same calls a cluster node's RESP front end makes), while the
//! scenario's faults run; after heal, quiescence and anti-entropy, a checker judges what
//! every replica holds.
//!
//! Each client writes only values of its own (`c<client>-<n>`), so what it was told is
//! checkable:
//! - **sets** (`set:<k>`): every acknowledged SADD's member is present; every member a client
//!   removed (SREM acknowledged after its SADD was acknowledged, no other client adds it) is
//!   absent;
//! - **lists** (`list:<k>`): every acknowledged RPUSH/LPUSH's element is present, once;
//! - **counters** (`zset:<k>`, one member): the score is at least the acknowledged ZINCRBYs'
//!   sum and at most every attempted one's (a failed write may still have applied);
//! - **HLLs** (`hll:<k>`): each acknowledged PFADD's element has raised its register;
//! - **convergence**: every replica of every key shows the same value.
//!
//! The commands' meaning here is the stored forms' ([`meridian_core::collection_data`],
//! [`meridian_core::list_data`], [`meridian_core::hll`]): the closures do what SADD, SREM,
//! RPUSH, LPUSH, ZINCRBY and PFADD do to them, without the Redis layer above.

use crate::checker::{Verdict, convergence};
use crate::cluster::LiveNodes;
use crate::history::History;
use crate::scenario::{Report, Scenario};
use crate::workload::{OpCounts, pick_coordinator};
use bytes::Bytes;
use meridian_core::envelope::{Entry, Kind};
use meridian_core::{DcId, NodeId, Timestamp, collection_data, hll, list_data};
use meridian_replication::eventual::counter;
use meridian_replication::{Dispatch, ReplicationError};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The CRDT clients of a scenario.
#[derive(Debug, Clone, Copy)]
pub struct CrdtRun {
    /// Clients in each DC.
    pub clients_per_dc: u32,
    /// Operations per second per client.
    pub rate: f64,
    /// Keys of each type.
    pub keys: u32,
}

impl Default for CrdtRun {
    fn default() -> Self {
        CrdtRun {
            clients_per_dc: 3,
            rate: 10.0,
            keys: 4,
        }
    }
}

/// What the clients were told, and what they tried.
#[derive(Debug, Default)]
struct Log {
    counts: OpCounts,
    /// Per set key: members whose SADD was acknowledged.
    added: BTreeMap<Bytes, BTreeSet<Bytes>>,
    /// Per set key: members an acknowledged SREM removed (after their SADD was
    /// acknowledged).
    removed: BTreeMap<Bytes, BTreeSet<Bytes>>,
    /// Per set key: members whose SREM failed (it may have applied): not judged.
    maybe_removed: BTreeMap<Bytes, BTreeSet<Bytes>>,
    /// Per list key: elements whose push was acknowledged.
    pushed: BTreeMap<Bytes, BTreeSet<Bytes>>,
    /// Per counter key: acknowledged and attempted increments.
    increments: BTreeMap<Bytes, (u64, u64)>,
    /// Per HLL key: elements whose PFADD was acknowledged.
    counted: BTreeMap<Bytes, BTreeSet<Bytes>>,
}

/// What a command stores, and whether it changed the value.
type Shown = (Option<Option<Entry>>, bool);

/// The set `e` shows (empty when absent).
fn set_members(e: Option<&Entry>) -> Vec<Bytes> {
    e.filter(|e| e.kind == Kind::Set)
        .and_then(|e| collection_data::decode_set(&e.data).ok())
        .unwrap_or_default()
}

/// The list `e` shows (empty when absent).
fn list_elems(e: Option<&Entry>) -> Vec<Bytes> {
    e.filter(|e| e.kind == Kind::List)
        .and_then(|e| list_data::decode(&e.data).ok())
        .map(|l| l.into_iter().map(Bytes::copy_from_slice).collect())
        .unwrap_or_default()
}

fn set_entry(members: &BTreeSet<Bytes>) -> Option<Entry> {
    let sorted: Vec<&Bytes> = members.iter().collect();
    (!sorted.is_empty()).then(|| Entry {
        data: Bytes::from(collection_data::encode_set(&sorted)),
        expiry: None,
        kind: Kind::Set,
    })
}

/// SADD (`add`) or SREM of `member`.
fn sadd_or_srem(live: Option<Entry>, member: &Bytes, add: bool) -> Shown {
    let mut members: BTreeSet<Bytes> = set_members(live.as_ref()).into_iter().collect();
    let changed = if add {
        members.insert(member.clone())
    } else {
        members.remove(member)
    };
    (changed.then(|| set_entry(&members)), changed)
}

/// RPUSH (`right`) or LPUSH of `elem`.
fn push(live: Option<Entry>, elem: &Bytes, right: bool) -> Shown {
    let mut elems = list_elems(live.as_ref());
    if right {
        elems.push(elem.clone());
    } else {
        elems.insert(0, elem.clone());
    }
    let data = list_data::encode(elems.iter().map(|e| &e[..])).map(Bytes::from);
    let entry = data.map(|data| Entry {
        data,
        expiry: None,
        kind: Kind::List,
    });
    (Some(entry), true)
}

/// ZINCRBY key 1 m.
fn zincr(live: Option<Entry>) -> Shown {
    let score = live
        .filter(|e| e.kind == Kind::ZSet)
        .and_then(|e| collection_data::decode_zset(&e.data).ok())
        .and_then(|z| z.first().map(|(s, _)| *s))
        .unwrap_or(0.0);
    let data = collection_data::encode_zset([(score + 1.0, &b"m"[..])].into_iter());
    let entry = Entry {
        data: Bytes::from(data),
        expiry: None,
        kind: Kind::ZSet,
    };
    (Some(Some(entry)), true)
}

/// PFADD of `elem`.
fn pfadd(live: Option<Entry>, elem: &Bytes) -> Shown {
    let mut h = match live.filter(|e| hll::encoding(&e.data).is_ok()) {
        Some(e) => hll::Hll::from_value(&e.data),
        None => hll::Hll::new_sparse(),
    };
    let (index, rank) = hll::register_and_rank(elem);
    let _ = h.raise(index, rank);
    h.invalidate_cache();
    let entry = Entry::new(Bytes::copy_from_slice(h.bytes()));
    (Some(Some(entry)), true)
}

/// One client: its id, DC nodes, RNG, and what it wrote.
struct Client {
    id: u32,
    nodes_in_dc: Vec<NodeId>,
    live: LiveNodes,
    rng: ChaCha8Rng,
    keys: u32,
    written: u64,
    /// Its own set members whose SADD was acknowledged, by key, not yet removed.
    mine: BTreeMap<Bytes, Vec<Bytes>>,
    log: Arc<Mutex<Log>>,
}

impl Client {
    fn key(&mut self, kind: &str) -> Bytes {
        let k = self.rng.random_range(0..self.keys);
        Bytes::from(format!("default:{kind}:{k}"))
    }

    fn value(&mut self) -> Bytes {
        self.written += 1;
        Bytes::from(format!("c{}-{}", self.id, self.written))
    }

    /// Counts an outcome; whether it was acknowledged.
    fn done<T>(&self, r: &Result<T, ReplicationError>) -> bool {
        let mut log = self.log.lock();
        match r {
            Ok(_) => log.counts.ok += 1,
            Err(_) => log.counts.unknown += 1,
        }
        r.is_ok()
    }

    async fn step(&mut self) {
        let Some(node) = pick_coordinator(&self.live, &self.nodes_in_dc, &mut self.rng) else {
            return;
        };
        let d = Dispatch::new(node);
        match self.rng.random_range(0..6) {
            0 | 1 => {
                let (key, member) = (self.key("set"), self.value());
                let r = d.element_update(&key, false, |l, _| sadd_or_srem(l, &member, true));
                if self.done(&r.await) {
                    self.log
                        .lock()
                        .added
                        .entry(key.clone())
                        .or_default()
                        .insert(member.clone());
                    self.mine.entry(key).or_default().push(member);
                }
            }
            2 => {
                let key = self.key("set");
                let Some(member) = self.mine.get_mut(&key).and_then(Vec::pop) else {
                    return;
                };
                let r = d
                    .element_update(&key, false, |l, _| sadd_or_srem(l, &member, false))
                    .await;
                let mut log = self.log.lock();
                match r {
                    // A read that missed the member removes nothing: it stays.
                    Ok(removed) => {
                        log.counts.ok += 1;
                        if removed {
                            log.removed.entry(key).or_default().insert(member);
                        }
                    }
                    Err(_) => {
                        log.counts.unknown += 1;
                        log.maybe_removed.entry(key).or_default().insert(member);
                    }
                }
            }
            3 => {
                let (key, elem, right) = (self.key("list"), self.value(), self.rng.random());
                let r = d.sequence_update(&key, |l, _| push(l, &elem, right));
                if self.done(&r.await) {
                    self.log.lock().pushed.entry(key).or_default().insert(elem);
                }
            }
            4 => {
                let key = self.key("zset");
                self.log.lock().increments.entry(key.clone()).or_default().1 += 1;
                let r = d.element_update(&key, true, |l, _| zincr(l));
                if self.done(&r.await) {
                    self.log.lock().increments.entry(key).or_default().0 += 1;
                }
            }
            _ => {
                let (key, elem) = (self.key("hll"), self.value());
                let r = d.register_update(&key, |l, _| pfadd(l, &elem));
                if self.done(&r.await) {
                    self.log.lock().counted.entry(key).or_default().insert(elem);
                }
            }
        }
    }

    /// Runs operations one after the other (each awaited: a client's SREM follows its
    /// acknowledged SADD) at about `rate` a second until `until`.
    async fn run(mut self, rate: f64, until: CancellationToken) {
        let gap = Duration::from_secs_f64(1.0 / rate.max(0.001));
        while !until.is_cancelled() {
            self.step().await;
            tokio::time::sleep(gap).await;
        }
    }
}

fn spawn(
    run: &CrdtRun,
    seed: u64,
    machines: &[(NodeId, DcId)],
    live: &LiveNodes,
    log: &Arc<Mutex<Log>>,
    until: &CancellationToken,
) {
    for slot in crate::workload::client_slots(machines, run.clients_per_dc) {
        let client = Client {
            id: slot.id.0,
            nodes_in_dc: slot.nodes_in_dc,
            live: live.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ (u64::from(slot.id.0) << 40) ^ 0xc4d7),
            keys: run.keys,
            written: 0,
            mine: BTreeMap::new(),
            log: log.clone(),
        };
        tokio::spawn(client.run(run.rate, until.clone()));
    }
}

/// Every key the clients may write.
fn all_keys(run: &CrdtRun) -> Vec<Bytes> {
    let kinds = ["set", "list", "zset", "hll"];
    kinds
        .iter()
        .flat_map(|kind| (0..run.keys).map(move |k| Bytes::from(format!("default:{kind}:{k}"))))
        .collect()
}

/// What a replica's siblings show (`None`: nothing).
fn shown(values: &[Bytes]) -> Option<Entry> {
    counter::resolve(values, values.len().checked_sub(1)?, Timestamp(0))
}

/// The checker (see the module docs) over each key's value merged from every replica.
fn check(log: &Log, merged: &BTreeMap<Bytes, Option<Entry>>) -> Verdict {
    let mut v = Verdict::new("crdt-acknowledged");
    let entry = |k: &Bytes| merged.get(k).cloned().flatten();
    for (key, added) in &log.added {
        let present: BTreeSet<Bytes> = set_members(entry(key).as_ref()).into_iter().collect();
        let removed = log.removed.get(key).cloned().unwrap_or_default();
        let unknown = log.maybe_removed.get(key).cloned().unwrap_or_default();
        for m in added.iter().filter(|m| !unknown.contains(*m)) {
            let gone = removed.contains(m);
            if present.contains(m) == gone {
                let what = if gone {
                    "removed but present"
                } else {
                    "added but lost"
                };
                v.violation(key, Vec::new(), format!("member {m:?} {what}"));
            }
        }
    }
    for (key, pushed) in &log.pushed {
        let elems = list_elems(entry(key).as_ref());
        for e in pushed {
            let n = elems.iter().filter(|x| *x == e).count();
            if n != 1 {
                v.violation(key, Vec::new(), format!("pushed {e:?} shows {n} times"));
            }
        }
    }
    for (key, (acked, tried)) in &log.increments {
        let score = entry(key)
            .and_then(|e| collection_data::decode_zset(&e.data).ok())
            .and_then(|z| z.first().map(|(s, _)| *s))
            .unwrap_or(0.0);
        if score < *acked as f64 || score > *tried as f64 {
            let why = format!("score {score} outside [{acked} acknowledged, {tried} tried]");
            v.violation(key, Vec::new(), why);
        }
    }
    for (key, counted) in &log.counted {
        let mut regs = [0u8; hll::REGISTERS];
        if let Some(e) = entry(key).filter(|e| hll::encoding(&e.data).is_ok()) {
            let _ = hll::merge_into(&mut regs, &e.data);
        }
        for el in counted {
            let (index, rank) = hll::register_and_rank(el);
            if regs[index] < rank {
                v.violation(key, Vec::new(), format!("PFADD of {el:?} not counted"));
            }
        }
    }
    v.checked = format!(
        "{} SADDs, {} pushes, {} ZINCRBYs, {} PFADDs acknowledged",
        log.added.values().map(BTreeSet::len).sum::<usize>(),
        log.pushed.values().map(BTreeSet::len).sum::<usize>(),
        log.increments.values().map(|i| i.0).sum::<u64>(),
        log.counted.values().map(BTreeSet::len).sum::<usize>(),
    );
    v
}

/// Runs a CRDT scenario with `seed` (see the module docs).
pub(crate) async fn run(scenario: &Scenario, run: &CrdtRun, seed: u64) -> Report {
    let start = Instant::now();
    let (mut cluster, schedule) = crate::scenario::start_cluster(scenario, seed).await;
    let log = Arc::new(Mutex::new(Log::default()));
    let until = CancellationToken::new();
    spawn(
        run,
        seed,
        &cluster.machines(),
        &cluster.live(),
        &log,
        &until,
    );
    let origin = Instant::now();
    let baseline = cluster.wan().config().inter_dc;
    let faults = crate::scenario::faults_until(
        &mut cluster,
        &schedule,
        origin,
        scenario.duration,
        &baseline,
    )
    .await;
    until.cancel();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let wan = crate::scenario::heal(&mut cluster, baseline).await;
    crate::scenario::force_anti_entropy(&cluster).await;

    let keys = all_keys(run);
    let replicas = cluster.replica_values(&keys, scenario.cluster.n as usize);
    let merged: BTreeMap<Bytes, Option<Entry>> = crate::checker::merge_replicas(&replicas)
        .into_iter()
        .map(|(k, values)| (k, shown(&values)))
        .collect();
    let log = std::mem::take(&mut *log.lock());
    let verdicts = vec![check(&log, &merged), convergence::check(&replicas)];
    let passed = verdicts.iter().all(Verdict::passed);
    let messages = wan.stats().sent;
    cluster.shutdown();
    Report {
        scenario: scenario.name.to_owned(),
        seed,
        duration: scenario.duration,
        ops: log.counts,
        faults,
        verdicts,
        passed,
        history: History::new(),
        messages,
        simulated: Instant::now().duration_since(start),
        timeline: None,
        tl_stats: None,
        notes: Vec::new(),
        txn: None,
    }
}
