//! The **eventual** protocol: eventual-consistency buckets on a node — the GET and PUT
//! coordinators of spec §§5–6 ([`Node::get`], [`Node::put`], [`Node::delete`]), forwarding
//! to a primary, the replica side, read repair (§8) and sloppy quorums whose fallbacks keep
//! hints (delivered by [`crate::handoff::hinted`]). Messages: [`EventualMsg`]; request and
//! result types: [`types`].
//!
//! ## How a request runs
//!
//! - **Preference list.** `preflist(layout, p, N, my_dc, up)` where `up` is the failure
//!   detector's verdict at the node clock's `now()`; a node always considers itself up.
//! - **GET** (§5): pre-checks, then `Get` to every apl entry (the local replica is read
//!   directly); each reply feeds a [`GetTally`]; the client gets its answer as soon as the
//!   tally is enough. Collection then continues until every apl member answered or the
//!   request deadline passed, and **read repair** sends the merge of every object received
//!   to each replica that answered notfound or an object different from (hence dominated
//!   by) the merge. A timeout is reported as `timeout` with the apl members that did not
//!   answer.
//! - **PUT / DELETE** (§6): pre-checks, then the write is coordinated by a **primary** of
//!   the key's partition: this node if it is a primary in the apl, else the request is
//!   forwarded (`Forward`) to the first primary of the apl (local DC first, so normally a
//!   LAN hop) which runs it and returns its result. The coordinator applies
//!   `coordinator_put` locally (counting as its own w, dw and pw), sends `Replicate` to every
//!   other apl member and answers per the [`PutTally`] rules. A write to a fallback carries
//!   `hint_for`; the fallback stores it in its hint space (not as its own data), and reads
//!   sent to a fallback read that hint space.
//! - **Hinted handoff** (§9, module [`crate::handoff::hinted`]): every `handoff_interval`
//!   the hints of each primary the detector says is up are streamed to it in batches; after
//!   the ack each hint is deleted (only if unchanged since it was sent).
//! - **LWW buckets** (`allow_mult = false`): every merge and coordinator write is followed by
//!   `lww`; the clock is kept.
//! - **Active anti-entropy** (§10, module [`crate::anti_entropy`]): the node keeps a Merkle
//!   tree per held partition over its own objects (not hints), built from the engine in
//!   [`Node::new`] and updated on every object write. Every
//!   `anti_entropy_interval` (0 disables it) it compares one `(partition, peer)` pair,
//!   round-robin from a seeded start, with a peer the detector says is up, and syncs at most
//!   `anti_entropy_max_keys` differing keys both ways through `merge_apply` (a repair path:
//!   no client limits), so both replicas end with the same object.
//!
//! ## Guarantees
//!
//! - Never answers ok with fewer acks / oks than the resolved parameters require (the
//!   tallies decide); an error never rolls back replicas that applied a write ("maybe
//!   written").
//! - A request's answer arrives by its deadline (`timeout_ms`, tokio time); replica
//!   requests still in flight at that point are abandoned.
//! - Time comes only from the node's [`meridian_core::Clock`] and tokio timers (see the
//!   kernel's determinism rules).
//!
//! ## Choices and deviations from the spec
//!
//! - **Only primaries coordinate writes.** A dot `(partition, node, incarnation, n)` must
//!   never be issued twice. A primary's stored object carries its highest counter; a
//!   fallback's hint is deleted after handoff, so a fallback coordinating later writes
//!   could reissue a dot and silently lose a write. When the apl has no primary at all
//!   (every primary of the partition down) a write fails with `no_coordinator`, where Riak
//!   would accept it. A forwarded write that lands on a node which is not a primary in its
//!   own apl (layouts or detector views differ) also fails with `no_coordinator` rather
//!   than being forwarded again.
//! - `read_fanout = quorum` sends the GET to the first R apl entries (local first) and asks
//!   the next entry when a reply fails or does not count as ok, and every `hedge_ms` while
//!   the tally is undecided; read repair then covers only the replicas that were asked.
//! - `dw`: a durable ack means the write is on disk. An engine that fsyncs before a write
//!   returns (`always`) acks at once; one that fsyncs later (`everysec`, `never`) syncs
//!   first, sharing one fsync with concurrent writes (group commit), when the coordinator
//!   counts that ack (`want_durable`: some dw is asked for and the reply can still matter).
//!   The coordinator's own dw waits for its own sync the same way. An engine without a disk
//!   (`MemEngine`) acks dw with w, as the spec says.
//! - Tombstones are reaped as the bucket's `delete_mode` says (default 3000 ms) once a GET
//!   found the same tombstone on every primary with nothing to repair and no handoff under
//!   way, in two steps (see [`Node::reap_round`]): every other member first merges the
//!   tombstone into any hint or copy of the key it holds, so no older copy can bring the
//!   key back; then each primary forgets the key if it still holds exactly that tombstone.
//!   Cross-DC read repairs draw from the
//!   node's WAN budget of background traffic (`repair_wan_bytes_per_sec`, one bucket per
//!   other DC, shared with anti-entropy and handoff rather than one just for read repair).
//!   Anti-entropy departs from the spec as its module documents (in-memory trees rebuilt at
//!   node creation, smaller default tree).
//! - **Membership** (the kernel and [`crate::handoff::ownership`]): during an ownership
//!   handoff a GET also asks the key's previous owners and a PUT also needs a write quorum
//!   among them. Ownership handoff sends whole objects in batched messages rather than the
//!   chunked stream of `large-objects.md` (not built yet).
//! - A replica refuses `Get`, `Replicate` and `Forward` with `overload` while more than
//!   `overload_backlog` messages wait in its inbox; `Repair` is always applied.

pub mod counter;
pub mod elements;
pub mod map;
pub mod messages;
pub mod registers;
pub mod sequence;
pub mod shared;
pub mod types;

use crate::balance::{Cand, ReadAnswer, ReadFail, ReadKind, ReadPlan};
use crate::error::{Missing, ReplicationError, Result};
use crate::kernel::{Incoming, Msg, Node, Protocol, RemoteError};
use crate::object_store::is_reserved_key;
use bytes::Bytes;
use meridian_cluster::dvv::{self, Clock as CausalClock, Content, Object, ReplicaId};
use meridian_cluster::{
    ApEntry, AplSummary, DeleteMode, FailKind, GetReply, GetTally, Preflist, PutTally, QuorumError,
    ReadFanout, ReplicaLoad, ReplicaSelection, Role, bucket_and_key, precheck_get, precheck_put,
};
use meridian_core::NodeId;
use meridian_net::NetError;
pub use messages::EventualMsg;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
pub use types::{
    CrdtOp, CrdtReply, ElementOps, GetOptions, GetResult, HashOps, HashReply, PutOptions,
    PutResult, SequenceOps,
};

/// The eventual protocol's state on a node (objects live in the kernel's object store,
/// counters in the kernel's): the keys whose tombstones are being reaped.
#[derive(Debug, Default)]
pub(crate) struct Eventual {
    reaping: parking_lot::Mutex<std::collections::BTreeSet<Vec<u8>>>,
}

/// Most keys a node reaps at once; tombstones found beyond it stay for a later GET.
const MAX_REAPING: usize = 10_000;

impl Node {
    /// The eventual protocol's state (registered with the kernel when the node is built).
    pub(crate) fn eventual_state(&self) -> &Eventual {
        self.protocol::<Eventual>()
    }
}

impl Protocol for Eventual {
    type Msg = EventualMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: EventualMsg) {
        match msg {
            EventualMsg::Get { key, hint_for } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                if !node.service_model().is_real() {
                    // A modelled service time: the read waits its turn in the read queue.
                    let node = node.clone();
                    tokio::spawn(async move {
                        let kind = ReadKind::Eventual { hint_for };
                        let (answer, load) = node.serve_read_queued(&key, &kind).await;
                        req.answer(match answer {
                            ReadAnswer::Object(object) => {
                                Msg::Eventual(EventualMsg::GetReply { object, load })
                            }
                            other => Msg::Error(RemoteError::Storage(format!("{other:?}"))),
                        });
                    });
                    return;
                }
                let store = &node.kernel().store;
                let started = Instant::now();
                let r = match hint_for {
                    Some(n) => store.get_hint(n, &key),
                    None => store.get(&key),
                };
                let load = ReplicaLoad {
                    queue: u32::try_from(req.backlog).unwrap_or(u32::MAX),
                    service_us: u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX),
                };
                req.answer(match r {
                    Ok(object) => Msg::Eventual(EventualMsg::GetReply { object, load }),
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            EventualMsg::Replicate {
                key,
                object,
                hint_for,
                allow_mult,
                want_durable,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let applied = node.apply(&key, &object, hint_for, allow_mult);
                let must_sync = applied.is_ok() && want_durable && node.kernel().store.needs_sync();
                let hot = hint_for.is_none() && node.is_hot(&key);
                if !must_sync && !hot {
                    let durable = !node.kernel().store.needs_sync();
                    req.answer(ack(applied, durable));
                    return;
                }
                let node = node.clone();
                tokio::spawn(async move {
                    if hot {
                        // Extra copies of a hot key go before the replica acknowledges.
                        node.invalidate_if_hot(&key).await;
                    }
                    let store = &node.kernel().store;
                    let durable = if must_sync {
                        store.sync_written().await
                    } else {
                        !store.needs_sync()
                    };
                    req.answer(ack(applied, durable));
                });
            }
            EventualMsg::Repair {
                key,
                object,
                hint_for,
                allow_mult,
            } => {
                if let Err(e) = node.apply(&key, &object, hint_for, allow_mult) {
                    tracing::warn!(node = %node.id(), error = %e, "read repair failed");
                }
            }
            EventualMsg::Reap { key, object } => node.reap(&key, &object),
            EventualMsg::Bury { key, object } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                req.answer(match node.bury(&key, &object) {
                    Ok(()) => Msg::Eventual(EventualMsg::Buried),
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                });
            }
            EventualMsg::Forward {
                key,
                value,
                context,
                opts,
            } => {
                let Some(req) = req.refuse_if_overloaded() else {
                    return;
                };
                let node = node.clone();
                tokio::spawn(async move {
                    let content = match value {
                        Some(v) => Content::Value(Bytes::from(v)),
                        None => Content::Tombstone,
                    };
                    let r = node.write(&key, content, &context, opts, true).await;
                    req.answer(EventualMsg::ForwardReply(r));
                });
            }
            other @ (EventualMsg::GetReply { .. }
            | EventualMsg::Buried
            | EventualMsg::Ack { .. }
            | EventualMsg::ForwardReply(_)) => req.unexpected(node, &other),
        }
    }
}

/// What a GET that heard every replica it asked may do with a tombstone they all hold.
#[derive(Debug, Clone, Copy)]
struct Reaping {
    mode: DeleteMode,
    /// Primaries that must all have returned it.
    n: u32,
}

/// A replica's answer to a `Get`, as the coordinator classifies it.
type GetAnswer = std::result::Result<Option<Object>, FailKind>;
/// Counts the coordinator's own durable ack once its sync is done (a failed sync fails its
/// dw: the write is applied here but not on disk).
fn count_own_sync(tally: &mut PutTally, on_disk: bool) {
    if on_disk {
        tally.dw_ack(true);
    } else {
        tally.dw_fail();
    }
}

/// A replica's reply to a `Replicate` it applied (or failed to).
fn ack(applied: Result<()>, durable: bool) -> Msg {
    match applied {
        Ok(()) => Msg::Eventual(EventualMsg::Ack { durable }),
        Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
    }
}

/// A replica's answer to a `Replicate`: durable or not, or a failure.
type PutAnswer = std::result::Result<bool, FailKind>;

fn fail_kind(e: &NetError) -> FailKind {
    match e {
        NetError::Timeout { .. } => FailKind::Timeout,
        NetError::Overloaded { .. } => FailKind::Overload,
        _ => FailKind::Error,
    }
}

fn remote_fail(e: &RemoteError) -> FailKind {
    match e {
        RemoteError::Overload => FailKind::Overload,
        _ => FailKind::Error,
    }
}

fn hint_for(e: &ApEntry) -> Option<NodeId> {
    match e.role {
        Role::Primary { .. } => None,
        Role::Fallback { for_node, .. } => Some(for_node),
    }
}

/// A GET's result from the objects received: their merge, notfound when only tombstones are
/// left (with the tombstones' context if asked), else the live values and the newest one.
fn get_result<'a>(
    objects: impl Iterator<Item = &'a Object>,
    allow_mult: bool,
    deleted_context: bool,
) -> GetResult {
    let merged = merge_all(objects, allow_mult).unwrap_or_default();
    let context = Bytes::from(merged.clock().encode());
    if merged.is_tombstone_only() {
        return GetResult::NotFound {
            deleted_context: deleted_context.then_some(context),
        };
    }
    let live = merged
        .siblings()
        .iter()
        .filter(|s| matches!(s.content, Content::Value(_)));
    let latest = live
        .enumerate()
        .max_by_key(|(_, s)| (s.meta.ts_us, s.dot))
        .map_or(0, |(i, _)| i);
    GetResult::Found {
        values: merged.values().cloned().collect(),
        context,
        latest,
    }
}

fn missing(apl: &Preflist, answered: &[NodeId]) -> Missing {
    Missing(apl.nodes().filter(|n| !answered.contains(n)).collect())
}
impl Node {
    /// Refuses the eventual operations on a bucket of another type.
    fn eventual_only(&self, bucket: &[u8]) -> Result<()> {
        let ty = self.registry().props_for(bucket).bucket_type;
        if ty == crate::bucket::BucketType::Eventual {
            return Ok(());
        }
        Err(ReplicationError::WrongBucketType {
            bucket: String::from_utf8_lossy(bucket).into_owned(),
            actual: format!("{ty:?}").to_lowercase(),
            hint: "use the timeline operations (read modes and versions) on its keys".into(),
        })
    }
    /// Applies a replicated or repaired object: to the hint space of `hint_for`, else as
    /// this replica's own data (noting a key this node does not own for handoff).
    pub(crate) fn apply(
        &self,
        key: &[u8],
        object: &Object,
        hint_for: Option<NodeId>,
        allow_mult: bool,
    ) -> Result<()> {
        match hint_for {
            Some(n) => {
                self.kernel().store.add_hint(n, key, object, allow_mult)?;
            }
            None => {
                self.kernel().store.merge_apply(key, object, allow_mult)?;
                self.note_if_not_owned(key);
            }
        }
        Ok(())
    }
    // ----- client API: GET -----

    /// Reads `key` (`bucket:rest`) with the bucket's parameters overridden by `opts`.
    ///
    /// Returns the values (siblings possible) and their context, or notfound; or the spec's
    /// error (`insufficient_vnodes`, `pr_val_unsatisfied`, `r_val_unsatisfied`, `overload`,
    /// `timeout` naming the replicas that did not answer, ...).
    pub async fn get(&self, key: &[u8], opts: GetOptions) -> Result<GetResult> {
        self.get_with_path(key, opts).await.map(|(r, _)| r)
    }

    /// [`Self::get`], also saying whether the read's critical path crossed a DC boundary:
    /// the reply that completed the read quorum came from another DC.
    pub async fn get_with_path(&self, key: &[u8], opts: GetOptions) -> Result<(GetResult, bool)> {
        if is_reserved_key(key) {
            return Err(ReplicationError::ReservedKey);
        }
        self.check_joined()?;
        let (bucket, _) = bucket_and_key(key);
        self.eventual_only(bucket)?;
        let params = self.registry().resolve(bucket, &opts.props);
        let (p, mut apl) = self.preflist_for(key, params.n_val);
        let gp = precheck_get(&params, AplSummary::from(&apl))?;
        let deadline = instant_after(Duration::from_millis(params.timeout_ms));
        let allow_mult = params.allow_mult;
        let reaping = Reaping {
            mode: params.delete_mode,
            n: params.n_val,
        };
        // During ownership handoff, previous owners may still hold what the new ones lack.
        let mut previous = self.previous_owners(key, p, params.n_val, &apl, deadline);
        let strategy = params.replica_selection;
        let extra_copies = self.kernel().has_extra_copies.load(Ordering::Relaxed)
            && self.registry().props_for(bucket).extra_copies == Some(true);
        if gp.r == 1
            && gp.pr <= 1
            && gp.notfound_ok
            && params.read_fanout == ReadFanout::Quorum
            && previous.is_empty()
            && (strategy != ReplicaSelection::LocalFirst
                || extra_copies
                || !self.service_model().is_real())
        {
            return self
                .get_one(
                    key,
                    &apl,
                    params,
                    gp.pr == 1,
                    deadline,
                    opts.deleted_context,
                )
                .await;
        }

        let (tx, mut rx) = mpsc::unbounded_channel::<(ApEntry, GetAnswer)>();
        let ask = |e: ApEntry| {
            let hint = hint_for(&e);
            if e.node == self.id() {
                let r = match hint {
                    Some(n) => self.kernel().store.get_hint(n, key),
                    None => self.kernel().store.get(key),
                };
                let _ = tx.send((e, r.map_err(|_| FailKind::Error)));
                return;
            }
            let (node, tx, key) = (self.clone(), tx.clone(), key.to_vec());
            tokio::spawn(async move {
                let timeout = deadline.saturating_duration_since(Instant::now());
                let msg = Msg::Eventual(EventualMsg::Get {
                    key,
                    hint_for: hint,
                });
                let a = match node.kernel().transport.request(e.node, msg, timeout).await {
                    Ok(Msg::Eventual(EventualMsg::GetReply { object, load })) => {
                        node.note_load(e.node, load);
                        Ok(object)
                    }
                    Ok(Msg::Error(re)) => Err(remote_fail(&re)),
                    Ok(_) => Err(FailKind::Error),
                    Err(ne) => Err(fail_kind(&ne)),
                };
                let _ = tx.send((e, a));
            });
        };
        // The bucket's replica selection orders the replicas (those of this DC first); `all`
        // asks them all at once, `quorum` the first R, more on failure or hedge timeout.
        if strategy != ReplicaSelection::LocalFirst {
            let nodes: Vec<NodeId> = apl.nodes().collect();
            let now = self.bal().now_us();
            let order = self.bal().balancer.lock().order(strategy, &nodes, now);
            let my_dc = self.dc();
            apl.reorder(|entries| {
                entries.sort_by_key(|e| (e.dc != my_dc, order.iter().position(|n| *n == e.node)))
            });
        }
        let entries = apl.entries();
        let mut asked = match params.read_fanout {
            ReadFanout::All => entries.len(),
            ReadFanout::Quorum => (gp.r as usize).min(entries.len()),
        };
        entries[..asked].iter().for_each(|&e| ask(e));
        let hedge = Duration::from_millis(params.hedge_ms.max(1));
        let mut hedge_at = instant_after(hedge);

        let mut tally = GetTally::new(gp, apl.len() as u32);
        let mut replies: Vec<(ApEntry, Option<Object>)> = Vec::new();
        let mut answered: Vec<NodeId> = Vec::new();
        // The tally is decided by the last answer counted, so its DC says where the read
        // waited.
        let mut remote;
        let outcome = loop {
            // An answer already waiting is taken before the timers are polled, so a read
            // its local replica answers registers no timer at all.
            let next = tokio::select! {
                biased;
                r = rx.recv() => r,
                _ = sleep_until(deadline) => None,
                _ = sleep_until(hedge_at), if asked < entries.len() => {
                    ask(entries[asked]);
                    asked += 1;
                    hedge_at += hedge;
                    continue;
                }
            };
            let Some((e, a)) = next else {
                let mut err = ReplicationError::from(tally.timed_out());
                if let ReplicationError::Timeout { missing: m, .. } = &mut err {
                    *m = missing(&apl, &answered);
                }
                self.read_repair(key, &replies, &[], allow_mult, None);
                return Err(err);
            };
            answered.push(e.node);
            remote = e.dc != self.dc();
            let counts_ok = match a {
                Ok(Some(o)) => {
                    tally.ok(e.is_primary(), o.is_tombstone_only());
                    replies.push((e, Some(o)));
                    true
                }
                Ok(None) => {
                    tally.notfound(e.is_primary());
                    replies.push((e, None));
                    gp.notfound_ok
                }
                Err(k) => {
                    tally.fail(k);
                    false
                }
            };
            if let Some(out) = tally.outcome() {
                break out;
            }
            if !counts_ok && asked < entries.len() {
                ask(entries[asked]);
                asked += 1;
            }
        };

        let extra: Vec<Object> = match outcome {
            Ok(_) => previous.collect(deadline).await,
            Err(_) => Vec::new(),
        };
        let outcome = match outcome {
            Ok(GetReply::NotFound) if !extra.is_empty() => Ok(GetReply::Merge),
            o => o,
        };
        let result = match outcome {
            Err(q) => Err(ReplicationError::from(q)),
            Ok(GetReply::NotFound) => Ok(GetResult::NotFound {
                deleted_context: None,
            }),
            Ok(GetReply::Merge) => Ok(get_result(
                replies
                    .iter()
                    .filter_map(|(_, o)| o.as_ref())
                    .chain(extra.iter()),
                allow_mult,
                opts.deleted_context,
            )),
        };

        // Keep collecting until every asked replica answered or the deadline, then repair.
        let total = asked;
        if answered.len() >= total {
            // Every asked replica has answered (a read decided by its local replica alone):
            // repair now rather than wake a task for it.
            self.read_repair(key, &replies, &extra, allow_mult, Some(reaping));
            return result.map(|r| (r, remote));
        }
        let node = self.clone();
        let key = key.to_vec();
        tokio::spawn(async move {
            let mut replies = replies;
            let mut seen = answered.len();
            while seen < total {
                let next = tokio::select! {
                    biased;
                    _ = sleep_until(deadline) => None,
                    r = rx.recv() => r,
                };
                let Some((e, a)) = next else { break };
                seen += 1;
                if let Ok(o) = a {
                    replies.push((e, o));
                }
            }
            node.read_repair(&key, &replies, &extra, allow_mult, Some(reaping));
        });
        result.map(|r| (r, remote))
    }

    /// A read that needs one replica (R = 1, `read_fanout = quorum`, PR ≤ 1, no handoff in
    /// progress) under a strategy other than plain `local_first`, or with extra copies or a
    /// modelled service time: the balance protocol picks the replica ([`Node::read_one`]).
    /// No read repair: one answer is all the read has.
    async fn get_one(
        &self,
        key: &[u8],
        apl: &Preflist,
        params: meridian_cluster::Params,
        gp_pr_one: bool,
        deadline: Instant,
        deleted_context: bool,
    ) -> Result<(GetResult, bool)> {
        // Primaries first (fallbacks hold only hints: failover only).
        let mut homes: Vec<Cand> = apl
            .entries()
            .iter()
            .map(|e| Cand {
                node: e.node,
                dc: e.dc,
                kind: ReadKind::Eventual {
                    hint_for: hint_for(e),
                },
                extra: false,
                failover_only: !e.is_primary(),
            })
            .collect();
        homes.sort_by_key(|c| c.failover_only);
        if gp_pr_one {
            // PR = 1: the answer must come from a primary's data (a primary, or an extra
            // copy made from one), never from a fallback's hints.
            homes.retain(|c| !c.failover_only);
        }
        let (bucket, _) = bucket_and_key(key);
        let extra_copies = self.registry().props_for(bucket).extra_copies == Some(true);
        let plan = ReadPlan {
            strategy: params.replica_selection,
            hedge: Some(Duration::from_millis(params.hedge_ms.max(1))),
            deadline,
            hot_copies: extra_copies,
        };
        match self.read_one(key, homes, plan).await {
            Ok(one) => {
                let remote = one.cand.dc != self.dc();
                let object = match one.answer {
                    ReadAnswer::Object(o) => o,
                    _ => None,
                };
                let r = match object {
                    None => GetResult::NotFound {
                        deleted_context: None,
                    },
                    Some(o) => get_result(std::iter::once(&o), params.allow_mult, deleted_context),
                };
                Ok((r, remote))
            }
            Err(ReadFail::Overload) => Err(ReplicationError::Overload),
            Err(ReadFail::Failed(failed)) => Err(ReplicationError::Timeout {
                need: 1,
                ok: 0,
                nf: 0,
                fail: failed.len() as u32,
                missing: missing(apl, &failed),
            }),
        }
    }

    /// Read repair (§8): sends the merge of every object received (`extra`: from previous
    /// owners during a handoff, which are not repaired themselves) to each replica that
    /// answered notfound or something other than the merge. When the merge is a tombstone
    /// that every primary returned as it is, nothing needed repair and no handoff is under
    /// way, the tombstone is reaped as the bucket's `delete_mode` says (`reaping`; `None`: a
    /// read that did not hear from every replica it asked).
    fn read_repair(
        &self,
        key: &[u8],
        replies: &[(ApEntry, Option<Object>)],
        extra: &[Object],
        allow_mult: bool,
        reaping: Option<Reaping>,
    ) {
        let objects = replies.iter().filter_map(|(_, o)| o.as_ref());
        let Some(merged) = merge_all(objects.chain(extra), allow_mult) else {
            return;
        };
        if let Some(r) = reaping
            && extra.is_empty()
            && merged.is_tombstone_only()
            && replies.iter().all(|(_, o)| o.as_ref() == Some(&merged))
        {
            let primaries: std::collections::BTreeSet<NodeId> = replies
                .iter()
                .filter(|(e, _)| e.is_primary())
                .map(|(e, _)| e.node)
                .collect();
            if primaries.len() as u32 >= r.n {
                self.schedule_reap(key, merged, r.mode, primaries);
            }
            return;
        }
        // The repair's size on the wire, for the WAN budget (measured once, if needed).
        let mut repair_bytes: Option<u64> = None;
        for (e, o) in replies {
            if o.as_ref() == Some(&merged) {
                continue;
            }
            let hint = hint_for(e);
            if e.node == self.id() {
                if let Err(err) = self.apply(key, &merged, hint, allow_mult) {
                    tracing::warn!(node = %self.id(), error = %err, "local read repair failed");
                    continue;
                }
            } else {
                // Cross-DC repairs draw from the WAN budget; what it cannot cover now is left
                // to anti-entropy (§8).
                let bytes = *repair_bytes.get_or_insert_with(|| {
                    (crate::object_store::encoded_len(&merged) + key.len()) as u64
                });
                if !self.wan_try(e.node, bytes) {
                    self.kernel()
                        .counters
                        .read_repairs_deferred
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let msg = Msg::Eventual(EventualMsg::Repair {
                    key: key.to_vec(),
                    object: merged.clone(),
                    hint_for: hint,
                    allow_mult,
                });
                if self.kernel().transport.send(e.node, msg).is_err() {
                    continue;
                }
            }
            self.kernel()
                .counters
                .read_repairs
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reaps `key`'s tombstone after `mode`'s delay (`Keep`: never) with
    /// [`Node::reap_round`], unless this node is already reaping it or too many keys.
    fn schedule_reap(
        &self,
        key: &[u8],
        tombstone: Object,
        mode: DeleteMode,
        primaries: std::collections::BTreeSet<NodeId>,
    ) {
        let delay = match mode {
            DeleteMode::Keep => return,
            DeleteMode::Immediate => Duration::ZERO,
            DeleteMode::DelayMs(ms) => Duration::from_millis(ms),
        };
        {
            let mut reaping = self.eventual_state().reaping.lock();
            if reaping.len() >= MAX_REAPING || !reaping.insert(key.to_vec()) {
                return;
            }
        }
        let (node, key) = (self.clone(), key.to_vec());
        tokio::spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let reaped = node.reap_round(&key, &tombstone, &primaries).await;
            tracing::trace!(node = %node.id(), reaped, "reap round");
            node.eventual_state().reaping.lock().remove(&key);
        });
    }

    /// Reaps `tombstone`, which a GET found on every primary in `primaries`, in two steps:
    /// 1. every other member of the cluster merges it into any hint or copy of `key` it
    ///    holds ([`EventualMsg::Bury`]) — a hint or handoff copy older than the delete,
    ///    delivered after the primaries forgot the key, would otherwise bring it back;
    /// 2. only if every member acknowledged, each primary forgets `key` if it still holds
    ///    exactly `tombstone` ([`EventualMsg::Reap`]; a write since keeps the key).
    ///
    /// A member that does not answer leaves the tombstone in place for a later GET. Returns
    /// whether step 2 ran.
    pub(crate) async fn reap_round(
        &self,
        key: &[u8],
        tombstone: &Object,
        primaries: &std::collections::BTreeSet<NodeId>,
    ) -> bool {
        let me = self.id();
        let members: Vec<NodeId> = self
            .layout()
            .topology()
            .members()
            .iter()
            .map(|m| m.id)
            .filter(|&n| n != me && !primaries.contains(&n))
            .collect();
        if self.bury(key, tombstone).is_err() {
            return false;
        }
        let timeout = self.kernel().cfg.handoff_timeout;
        let asks = members.iter().map(|&n| {
            let msg = Msg::Eventual(EventualMsg::Bury {
                key: key.to_vec(),
                object: tombstone.clone(),
            });
            self.kernel().transport.request(n, msg, timeout)
        });
        let all_buried = futures_util::future::join_all(asks)
            .await
            .into_iter()
            .all(|r| matches!(r, Ok(Msg::Eventual(EventualMsg::Buried))));
        if !all_buried {
            return false;
        }
        for &n in primaries {
            if n == me {
                self.reap(key, tombstone);
            } else {
                let msg = Msg::Eventual(EventualMsg::Reap {
                    key: key.to_vec(),
                    object: tombstone.clone(),
                });
                let _ = self.kernel().transport.send(n, msg);
            }
        }
        true
    }

    /// Reaping's first step on this node: merges `tombstone` into every hint of `key` it
    /// holds, and into its own copy if it holds one (a primary's copy already is the
    /// tombstone, or newer).
    fn bury(&self, key: &[u8], tombstone: &Object) -> Result<()> {
        if !tombstone.is_tombstone_only() || is_reserved_key(key) {
            return Ok(());
        }
        let (allow_mult, _) = self.bucket_params(key);
        let store = &self.kernel().store;
        for n in store.hint_targets()? {
            if store.get_hint(n, key)?.is_some() {
                store.add_hint(n, key, tombstone, allow_mult)?;
            }
        }
        if store.get(key)?.is_some() {
            store.merge_apply(key, tombstone, allow_mult)?;
        }
        Ok(())
    }

    /// Forgets `key` if this replica still holds exactly `tombstone` (a write since then
    /// keeps it).
    fn reap(&self, key: &[u8], tombstone: &Object) {
        if !tombstone.is_tombstone_only() {
            return;
        }
        let reaped = self
            .kernel()
            .store
            .reap_if_unchanged(key, tombstone, self.id());
        self.count_reap(reaped);
    }

    // ----- client API: PUT / DELETE -----

    /// Writes `value` to `key` (`bucket:rest`). `context` is the opaque context of a previous
    /// GET (or PUT) of the key — the values it covers are superseded — or `None` for a blind
    /// write (which adds a sibling).
    ///
    /// An error never rolls back replicas that applied the write: treat it as "maybe
    /// written".
    pub async fn put(
        &self,
        key: &[u8],
        value: Bytes,
        context: Option<&[u8]>,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if value.len() > self.kernel().cfg.object_max {
            return Err(ReplicationError::ObjectTooLarge {
                len: value.len(),
                max: self.kernel().cfg.object_max,
            });
        }
        self.write(
            key,
            Content::Value(value),
            context.unwrap_or_default(),
            opts,
            false,
        )
        .await
    }

    /// Deletes `key`: a write of a tombstone with `context` (a GET's context, so the
    /// values it returned are superseded). GETs answer notfound once the tombstone is all
    /// that is left.
    pub async fn delete(
        &self,
        key: &[u8],
        context: Option<&[u8]>,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.write(
            key,
            Content::Tombstone,
            context.unwrap_or_default(),
            opts,
            false,
        )
        .await
    }

    async fn write(
        &self,
        key: &[u8],
        content: Content,
        context: &[u8],
        opts: PutOptions,
        forwarded: bool,
    ) -> Result<PutResult> {
        if is_reserved_key(key) {
            return Err(ReplicationError::ReservedKey);
        }
        self.check_joined()?;
        let ctx = CausalClock::decode(context).map_err(|e| ReplicationError::InvalidContext {
            reason: e.to_string(),
        })?;
        let (bucket, _) = bucket_and_key(key);
        self.eventual_only(bucket)?;
        let params = self.registry().resolve(bucket, &opts.props);
        let (partition, apl) = self.preflist_for(key, params.n_val);
        let pp = precheck_put(&params, AplSummary::from(&apl))?;
        let timeout = Duration::from_millis(params.timeout_ms);
        let deadline = instant_after(timeout);
        let me = self.id();

        if let Some(op) = opts.crdt.as_ref().filter(|_| !params.allow_mult) {
            // Last-writer-wins would keep one of two concurrent updates.
            return Err(ReplicationError::Unsupported {
                command: op.command().into(),
                bucket_type: crate::bucket::BucketType::Eventual,
                hint: format!(
                    " with allow_mult = false (bucket '{}'): a counter's or a hash's concurrent \
                     updates are kept as siblings and merged, which needs allow_mult = true",
                    String::from_utf8_lossy(bucket)
                ),
            });
        }
        let local_primary = apl.get(me).is_some_and(ApEntry::is_primary);
        if !local_primary {
            let no_coordinator = ReplicationError::NoCoordinator {
                partition: partition.0,
                apl_len: apl.len() as u32,
            };
            if forwarded {
                return Err(no_coordinator);
            }
            let Some(target) = apl.entries().iter().find(|e| e.is_primary()).copied() else {
                return Err(no_coordinator);
            };
            return self
                .forward(target, key, content, context, opts, timeout, pp.w)
                .await;
        }

        // Coordinate: apply locally first (our own w, dw and pw).
        let rid = ReplicaId {
            partition,
            node: me,
            incarnation: self.kernel().cfg.incarnation,
            epoch: self.replica_epoch(partition),
        };
        let store = &self.kernel().store;
        let siblings_max = self.kernel().cfg.siblings_max;
        let mut crdt = None;
        let object = if let Some(op) = &opts.crdt {
            let now = self.kernel().clock.now();
            let horizon_us = u64::try_from(self.kernel().cfg.map_tombstone_horizon.as_micros())
                .unwrap_or(u64::MAX);
            let object_max = self.kernel().cfg.object_max;
            // An element's dot names the coordinator's incarnation too: a wiped node must
            // never reissue one.
            let actor = (u64::from(self.kernel().cfg.incarnation) << 32) | u64::from(me.0);
            let make = |local: Option<&Object>| match op {
                CrdtOp::CounterAdd(delta) => counter::increment(local, me.0, *delta, now)
                    .map(|(c, v)| (Some(c), CrdtReply::Counter(v))),
                CrdtOp::HashUpdate(ops) => map::update(local, me.0, ops, now, horizon_us)
                    .and_then(|(c, r)| bounded(c, object_max).map(|c| (c, CrdtReply::Hash(r)))),
                CrdtOp::Elements(ops) => {
                    elements::update(local, actor, ops, now, counter::crdt_live)
                        .and_then(|c| bounded(c, object_max).map(|c| (c, CrdtReply::Elements)))
                }
                CrdtOp::Registers(regs) => registers::update(local, regs, now, counter::crdt_live)
                    .map(|c| (c, CrdtReply::Elements)),
                CrdtOp::Sequence(ops) => {
                    sequence::update(local, actor, ops, now, counter::crdt_live)
                        .and_then(|c| bounded(c, object_max).map(|c| (c, CrdtReply::Elements)))
                }
            };
            let (object, reply) =
                store.coordinator_update(key, make, rid, params.allow_mult, siblings_max)?;
            let Some(object) = object else {
                // The operation changed nothing: nothing to replicate.
                return Ok(PutResult {
                    context: Vec::new(),
                    values: opts.return_body.then(Vec::new),
                    remote: false,
                    crdt: Some(reply),
                });
            };
            crdt = Some(reply);
            object
        } else if opts.supersede_local {
            store.coordinator_overwrite(key, content, rid, params.allow_mult, siblings_max)?
        } else {
            self.catch_up_for_context(key, &ctx, rid, &apl, params.allow_mult, deadline)
                .await;
            store.coordinator_put(key, &ctx, content, rid, params.allow_mult, siblings_max)?
        };
        // Extra copies of a hot key go before the write is acknowledged.
        self.invalidate_if_hot(key).await;
        let siblings = object.siblings().len();
        if siblings >= self.kernel().cfg.siblings_warn {
            tracing::warn!(node = %me, key = ?String::from_utf8_lossy(key), siblings, "many siblings");
        }
        let mut tally = PutTally::new(pp, apl.len() as u32);
        tally.w_ack(me, self.dc());
        // The outcome is checked after every answer, so the last ack's DC says where the
        // write waited.
        let mut remote = false;
        // Our own durable ack: at once if the write is on disk when it returns (or there is
        // no disk), else once a sync covers it — and only if some dw is asked for.
        let want_durable = pp.dw > 0;
        let mut local_sync = want_durable && store.needs_sync();
        if !local_sync {
            tally.dw_ack(true);
        }
        let mut answered = vec![me];
        // During an ownership handoff the write must also reach a write quorum of the key's
        // previous owners, so a coordinator still placing keys with the previous layout (its
        // metadata not yet updated) reads it too.
        let previous = self.previous_replicas(partition, params.n_val);
        let need_previous = if previous.is_empty() {
            0
        } else {
            pp.w.max(pp.pw).min(previous.len() as u32) as usize
        };
        let mut previous_acks: Vec<NodeId> =
            previous.iter().copied().filter(|&n| n == me).collect();

        // Decided by the local apply alone (W = DW = 1, no handoff): the other replicas'
        // acks can no longer change the reply, so they are sent the object one-way: no
        // task, timer or ack per replica. A copy lost on the way is repaired by read repair
        // or anti-entropy, as it was when its failed request arrived after the reply.
        if need_previous == 0 && matches!(tally.outcome(), Some(Ok(_))) {
            let transport = &self.kernel().transport;
            for &e in apl.entries().iter().filter(|e| e.node != me) {
                let msg = Msg::Eventual(EventualMsg::Replicate {
                    key: key.to_vec(),
                    object: object.clone(),
                    hint_for: hint_for(&e),
                    allow_mult: params.allow_mult,
                    want_durable: false,
                });
                if let Err(err) = transport.send(e.node, msg) {
                    tracing::debug!(node = %me, peer = %e.node, error = %err, "replicate not sent");
                }
            }
            return Ok(PutResult {
                context: object.clock().encode(),
                values: opts
                    .return_body
                    .then(|| object.values().map(|v| v.to_vec()).collect()),
                remote: false,
                crdt,
            });
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<(Option<ApEntry>, NodeId, PutAnswer)>();
        let replicate = |to: NodeId, entry: Option<ApEntry>, hint: Option<NodeId>| {
            let (t, tx) = (self.kernel().transport.clone(), tx.clone());
            let msg = Msg::Eventual(EventualMsg::Replicate {
                key: key.to_vec(),
                object: object.clone(),
                hint_for: hint,
                allow_mult: params.allow_mult,
                want_durable,
            });
            tokio::spawn(async move {
                let timeout = deadline.saturating_duration_since(Instant::now());
                let a = match t.request(to, msg, timeout).await {
                    Ok(Msg::Eventual(EventualMsg::Ack { durable })) => Ok(durable),
                    Ok(Msg::Error(re)) => Err(remote_fail(&re)),
                    Ok(_) => Err(FailKind::Error),
                    Err(ne) => Err(fail_kind(&ne)),
                };
                let _ = tx.send((entry, to, a));
            });
        };
        for &e in apl.entries().iter().filter(|e| e.node != me) {
            replicate(e.node, Some(e), hint_for(&e));
        }
        for &n in previous
            .iter()
            .filter(|&&n| n != me && apl.get(n).is_none())
        {
            replicate(n, None, None);
        }
        drop(tx);

        let synced = store.sync_written();
        tokio::pin!(synced);
        let outcome = loop {
            if let Some(out) = tally.outcome()
                && (out.is_err() || previous_acks.len() >= need_previous)
            {
                break out;
            }
            let next = tokio::select! {
                biased;
                _ = sleep_until(deadline) => None,
                on_disk = &mut synced, if local_sync => {
                    local_sync = false;
                    count_own_sync(&mut tally, on_disk);
                    continue;
                }
                r = rx.recv() => Some(r),
            };
            let Some(next) = next else {
                let mut err = ReplicationError::from(tally.timed_out());
                if let ReplicationError::Timeout { missing: m, .. } = &mut err {
                    *m = missing(&apl, &answered);
                }
                return Err(err);
            };
            let Some((entry, from, a)) = next else {
                if local_sync {
                    // Every reply is in; our own sync still decides.
                    local_sync = false;
                    count_own_sync(&mut tally, (&mut synced).await);
                    continue;
                }
                // Every reply is in: the tally is decided, the previous owners fell short.
                return Err(ReplicationError::Quorum(QuorumError::WValUnsatisfied {
                    need: need_previous as u32,
                    got: previous_acks.len() as u32,
                }));
            };
            if a.is_ok() && previous.contains(&from) && !previous_acks.contains(&from) {
                previous_acks.push(from);
            }
            let Some(e) = entry else { continue };
            answered.push(e.node);
            match a {
                Ok(durable) => {
                    remote = e.dc != self.dc();
                    tally.w_ack(e.node, e.dc);
                    if durable {
                        tally.dw_ack(e.is_primary());
                    } else if want_durable {
                        // Applied but not on disk (its sync failed).
                        tally.dw_fail();
                    }
                }
                Err(k) => tally.fail(k),
            }
        };
        outcome?;
        Ok(PutResult {
            context: object.clock().encode(),
            values: opts
                .return_body
                .then(|| object.values().map(|v| v.to_vec()).collect()),
            remote,
            crdt,
        })
    }

    /// When the client's `ctx` claims more for other replicas than this coordinator's copy
    /// of `key` has seen (a context read from more up-to-date replicas), pulls `key` from
    /// the other apl members and merges their copies in first, so the capping of
    /// `dvv::vouched_context` (a client context may only claim what this replica's copy
    /// has seen) leaves a legitimate context its full effect. Best effort, one round, by
    /// `deadline`: what a member does not answer with stays capped (a concurrent sibling,
    /// never a loss). A forged context costs the attacker one such round per write.
    async fn catch_up_for_context(
        &self,
        key: &[u8],
        ctx: &CausalClock,
        me: ReplicaId,
        apl: &Preflist,
        allow_mult: bool,
        deadline: Instant,
    ) {
        let store = &self.kernel().store;
        let Ok(local) = store.get(key) else { return };
        let local = local.map(|o| o.clock().clone()).unwrap_or_default();
        if dvv::vouches_for_others(ctx, &local, me) {
            return;
        }
        let transport = &self.kernel().transport;
        let asks = apl.entries().iter().filter(|e| e.node != me.node).map(|e| {
            let msg = Msg::Eventual(EventualMsg::Get {
                key: key.to_vec(),
                hint_for: hint_for(e),
            });
            let timeout = deadline.saturating_duration_since(Instant::now());
            transport.request(e.node, msg, timeout)
        });
        for reply in futures_util::future::join_all(asks).await {
            if let Ok(Msg::Eventual(EventualMsg::GetReply {
                object: Some(o), ..
            })) = reply
                && let Err(e) = store.merge_apply(key, &o, allow_mult)
            {
                tracing::debug!(error = %e, "catch-up merge failed");
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn forward(
        &self,
        target: ApEntry,
        key: &[u8],
        content: Content,
        context: &[u8],
        mut opts: PutOptions,
        timeout: Duration,
        w: u32,
    ) -> Result<PutResult> {
        self.kernel()
            .counters
            .coord_redirs
            .fetch_add(1, Ordering::Relaxed);
        let reserve = self.kernel().cfg.forward_reserve.min(timeout / 10);
        let budget = (timeout - reserve).as_millis().max(1) as u64;
        opts.props.timeout_ms = Some(budget);
        let msg = Msg::Eventual(EventualMsg::Forward {
            key: key.to_vec(),
            value: match content {
                Content::Value(v) => Some(v.to_vec()),
                Content::Tombstone => None,
            },
            context: context.to_vec(),
            opts,
        });
        let target_remote = target.dc != self.dc();
        let target = target.node;
        match self.kernel().transport.request(target, msg, timeout).await {
            Ok(Msg::Eventual(EventualMsg::ForwardReply(r))) => r.map(|mut r| {
                r.remote |= target_remote;
                r
            }),
            Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
            Ok(other) => Err(ReplicationError::ForwardFailed {
                node: target,
                reason: format!("unexpected reply {other:?}"),
            }),
            Err(NetError::Timeout { .. }) => Err(ReplicationError::Timeout {
                need: w,
                ok: 0,
                nf: 0,
                fail: 0,
                missing: Missing(vec![target]),
            }),
            Err(e) => Err(ReplicationError::ForwardFailed {
                node: target,
                reason: e.to_string(),
            }),
        }
    }
}
/// The longest wait [`instant_after`] falls back to: a year, far beyond any deadline.
const FAR_FUTURE: Duration = Duration::from_secs(365 * 86_400);

/// `now + d` without the panic of `Instant + Duration` overflowing: a bucket's `timeout_ms`
/// or `hedge_ms` out of range waits [`FAR_FUTURE`] at most instead.
/// A CRDT's new content, unless it grew past `object_max`: a map or collection grows one
/// bounded request at a time, and what it grows to is bounded as a plain PUT's value is.
fn bounded(c: Option<Content>, object_max: usize) -> Result<Option<Content>> {
    match &c {
        Some(Content::Value(v)) if v.len() > object_max => Err(ReplicationError::ObjectTooLarge {
            len: v.len(),
            max: object_max,
        }),
        _ => Ok(c),
    }
}

fn instant_after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(FAR_FUTURE))
        .unwrap_or(now)
}

fn merge_all<'a>(objs: impl Iterator<Item = &'a Object>, allow_mult: bool) -> Option<Object> {
    objs.fold(None, |acc: Option<Object>, o| {
        Some(match acc {
            None if allow_mult => o.clone(),
            None => dvv::lww(o.clone()),
            Some(a) => dvv::merge_with(&a, o, allow_mult),
        })
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::{BucketProps, Buckets};
    use crate::kernel::{EventualNode, NodeConfig};
    use crate::membership::ClusterMeta;
    use meridian_cluster::Props;
    use meridian_cluster::{Member, Ring, Topology, claim};
    use meridian_core::DcId;
    use meridian_core::Timestamp;
    use meridian_net::MemNetwork;
    use meridian_storage::MemEngine;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    /// A one-node "cluster" with N=1: the full request paths without a network.
    async fn single() -> (EventualNode, CancellationToken) {
        let topo = Topology::new([Member::new(NodeId(1), DcId(0))]).unwrap();
        let layout = claim(&topo, Ring::new(64).unwrap(), 1).unwrap();
        let shape = crate::bucket::ClusterShape::of(&layout);
        let mut map = std::collections::BTreeMap::new();
        map.insert(
            "default".to_owned(),
            BucketProps {
                props: Props {
                    n_val: Some(1),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        let buckets = Buckets::from_map(shape, map).unwrap();
        let net = MemNetwork::<Msg>::new();
        let (t, inbox) = net.join(NodeId(1)).unwrap();
        let node = EventualNode::new(
            NodeConfig::new(NodeId(1)),
            Arc::new(MemEngine::new()),
            Arc::new(crate::TokioClock::new(Timestamp(1_000_000))),
            t,
            ClusterMeta::new(
                layout,
                vec![crate::MemberRecord::in_process(NodeId(1), DcId(0))],
                &buckets,
            )
            .unwrap(),
        );
        let stop = CancellationToken::new();
        node.spawn(inbox, stop.clone());
        (node, stop)
    }

    #[tokio::test(start_paused = true)]
    async fn put_get_delete_on_one_node() {
        let (n, stop) = single().await;
        let o = GetOptions::default();
        let w = PutOptions::default();
        assert_eq!(
            n.get(b"k", o).await.unwrap(),
            GetResult::NotFound {
                deleted_context: None
            }
        );
        n.put(b"k", Bytes::from_static(b"v1"), None, w.clone())
            .await
            .unwrap();
        let g = n.get(b"k", o).await.unwrap();
        assert_eq!(g.values(), [Bytes::from_static(b"v1")]);
        n.put(
            b"k",
            Bytes::from_static(b"v2"),
            Some(&g.context()),
            w.clone(),
        )
        .await
        .unwrap();
        let g = n.get(b"k", o).await.unwrap();
        assert_eq!(g.values(), [Bytes::from_static(b"v2")]);
        n.delete(b"k", Some(&g.context()), w.clone()).await.unwrap();
        let d = n
            .get(
                b"k",
                GetOptions {
                    deleted_context: true,
                    ..o
                },
            )
            .await
            .unwrap();
        assert!(matches!(
            d,
            GetResult::NotFound {
                deleted_context: Some(_)
            }
        ));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn client_input_is_checked() {
        let (n, stop) = single().await;
        let w = PutOptions::default();
        let e = n
            .get(b"\xffh-nope", GetOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e, ReplicationError::ReservedKey);
        let e = n
            .put(b"k", Bytes::from_static(b"v"), Some(b"\x07junk"), w.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code(), "invalid_context");
        let e = n
            .put(
                b"k",
                Bytes::from(vec![0u8; (50 << 20) + 1]),
                None,
                w.clone(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), "object_too_large");
        let mut r2 = GetOptions::default();
        r2.props.r = Some(meridian_cluster::Quorum::Count(2));
        let e = n.get(b"k", r2).await.unwrap_err();
        assert_eq!(e.to_string(), "n_val_violation n=1");
        stop.cancel();
    }
}
