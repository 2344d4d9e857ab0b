//! The coordinator's side of timeline reads (spec §2), and how it finds and asks a record's
//! master for reads and writes alike.
//!
//! `read_any` answers from the local replica or the nearest up replica (or as the replica
//! selection chooses); `read_critical(v)` goes to the master only when that copy is older than
//! `v`; `read_latest` asks the master. A master that is marked down or does not answer within
//! `master_timeout_ms` fails the request with the matching `*_unavailable` error, never a
//! silent stale answer.

use super::{Ask, Placement, ReadMode, Target, TlReadResult, at_least, lossy};
use crate::balance::{Cand, ReadAnswer, ReadFail, ReadKind, ReadPlan};
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node, RemoteError};
use crate::timeline::{Record, ReplicaRef, TimelineMsg, Version};
use bytes::Bytes;
use meridian_cluster::bucket_and_key;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// How many masters a read_latest or a write tries, each named by the previous one's
/// redirect (with the version to wait for), before answering "the mastership is moving": a
/// record written from two DCs may migrate again while a request chases it.
pub(super) const MASTER_REDIRECTS: u8 = 4;

impl Node {
    /// A timeline read of `key` (spec §2). See the module docs for the routing.
    ///
    /// # Errors
    /// `wrong_bucket_type`, `reserved_key`, `not_joined`; `master_unavailable` (read_latest)
    /// or `stale_version_unavailable` (read_critical) when the master is down or silent;
    /// `timeout` when no replica answers a read_any.
    pub async fn tl_get(&self, key: &[u8], mode: ReadMode) -> Result<TlReadResult> {
        self.tl_get_with(key, mode, None).await
    }

    /// [`Self::tl_get`] with a replica-selection strategy for a `read_any` (default: the
    /// bucket's `replica_selection`).
    pub async fn tl_get_with(
        &self,
        key: &[u8],
        mode: ReadMode,
        selection: Option<meridian_balance::Strategy>,
    ) -> Result<TlReadResult> {
        let pl = self.tl_check(key)?;
        let r = match mode {
            ReadMode::Any => self.tl_read_any(key, &pl, selection).await,
            ReadMode::Latest => self.tl_read_latest(key, &pl, None).await,
            ReadMode::Critical(v) => self.tl_read_critical(key, &pl, v).await,
        };
        self.forget_master_on_failure(key, &r);
        if let Ok(r) = &r {
            let c = &self.tl_state().counters;
            let n = if r.remote {
                &c.remote_reads
            } else {
                &c.local_reads
            };
            n.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// A record from one replica (or extra copy), as the bucket's (or the request's) replica
    /// selection chooses: by default the nearest replica — local if this node is one, else
    /// the up replicas in order (own DC first).
    async fn tl_read_any(
        &self,
        key: &[u8],
        pl: &Placement,
        selection: Option<meridian_balance::Strategy>,
    ) -> Result<TlReadResult> {
        let (bucket, _) = bucket_and_key(key);
        let (strategy, extra_copies) = {
            let reg = self.registry();
            let s = selection.unwrap_or(reg.resolve(bucket, &Default::default()).replica_selection);
            (s, reg.props_for(bucket).extra_copies.unwrap_or(false))
        };
        let plain = strategy == meridian_balance::Strategy::LocalFirst
            && !extra_copies
            && self.service_model().is_real();
        if plain && pl.holds(self.id()) {
            return Ok(TlReadResult {
                record: self.tl_state().store.get(key)?,
                served_by: self.id(),
                remote: false,
            });
        }
        // One budget for all attempts, so a read never takes more than master_timeout_ms.
        let deadline = Instant::now() + Duration::from_millis(pl.props.master_timeout_ms);
        let me = self.id();
        let mut homes: Vec<Cand> = pl
            .replicas
            .iter()
            .filter(|r| r.node == me || self.is_up(r.node))
            .map(|r| Cand {
                node: r.node,
                dc: r.dc,
                kind: ReadKind::Timeline,
                extra: false,
                failover_only: false,
            })
            .collect();
        homes.sort_by_key(|c| (c.node != me, c.dc != self.dc()));
        let plan = ReadPlan {
            strategy,
            hedge: None,
            deadline,
            hot_copies: extra_copies,
        };
        match self.read_one(key, homes, plan).await {
            Ok(one) => {
                let record = match one.answer {
                    ReadAnswer::Record(r) => r,
                    _ => None,
                };
                if let Some(rec) = &record {
                    self.remember_master(key, rec);
                }
                Ok(TlReadResult {
                    record,
                    served_by: one.cand.node,
                    remote: one.cand.dc != self.dc(),
                })
            }
            Err(ReadFail::Overload) => Err(ReplicationError::Overload),
            Err(ReadFail::Failed(failed)) => Err(ReplicationError::Timeout {
                need: 1,
                ok: 0,
                nf: 0,
                fail: failed.len() as u32,
                missing: crate::error::Missing(
                    pl.replicas
                        .iter()
                        .map(|r| r.node)
                        .filter(|n| !failed.contains(n))
                        .collect(),
                ),
            }),
        }
    }

    /// The master's record: at the hinted master, retrying once at the hint a stale master
    /// returns.
    async fn tl_read_latest(
        &self,
        key: &[u8],
        pl: &Placement,
        local: Option<std::result::Result<&TlReadResult, ()>>,
    ) -> Result<TlReadResult> {
        if local.is_none()
            && let Some(mine) = self.tl_read_mine(key, pl)?
        {
            return Ok(mine);
        }
        let (target, await_ver) = match local {
            Some(Ok(l)) => match &l.record {
                Some(r) => (Target::Master(r.master), Some(r.ver)),
                None => (Target::Arbiter(pl.arbiter()), None),
            },
            // The replicas did not answer: a cached hint, else the arbiter (which redirects).
            Some(Err(())) => match self.tl_state().hints.lock().get(key) {
                Some((m, v)) => (Target::Master(*m), Some(*v)),
                None => (Target::Arbiter(pl.arbiter()), None),
            },
            None => self.master_target(key, pl).await?,
        };
        let (target, mut await_ver) = self.tl_live_target(key, pl, (target, await_ver)).await?;
        let timeout = Duration::from_millis(pl.props.master_timeout_ms);
        let mut to = target.replica();
        // A stale master in another DC that redirects to one in ours still cost a WAN trip.
        let mut crossed = false;
        for attempt in 0..MASTER_REDIRECTS {
            crossed |= to.dc != self.dc();
            let r = if to.node == self.id() {
                self.tl_serve_read(key, true, await_ver).await
            } else {
                let msg = Msg::Timeline(TimelineMsg::Read {
                    key: key.to_vec(),
                    latest: true,
                    await_ver,
                });
                let ask = Ask {
                    key,
                    pl,
                    target,
                    to,
                    write: false,
                };
                match self.tl_ask(&ask, msg, timeout).await {
                    Ok(Msg::Timeline(TimelineMsg::ReadReply(r))) => r,
                    Ok(other) => Err(self.unexpected(&ask, &other)),
                    Err(e) => Err(e),
                }
            };
            match r {
                Ok(record) => {
                    if let Some(rec) = &record {
                        self.remember_master(key, rec);
                    }
                    return Ok(TlReadResult {
                        record,
                        served_by: to.node,
                        remote: crossed,
                    });
                }
                Err(ReplicationError::NotMaster { hint, await_ver: v })
                    if attempt + 1 < MASTER_REDIRECTS =>
                {
                    to = hint;
                    await_ver = Some(v);
                }
                Err(ReplicationError::NotMaster { hint, .. }) => {
                    return Err(ReplicationError::MasterUnavailable {
                        key: lossy(key),
                        master: hint.node,
                        dc: hint.dc,
                        reason: "the mastership is moving: retry".into(),
                        maybe_applied: false,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns on its last attempt")
    }

    async fn tl_read_critical(
        &self,
        key: &[u8],
        pl: &Placement,
        min: Version,
    ) -> Result<TlReadResult> {
        let local = self.tl_read_any(key, pl, None).await.ok();
        if let Some(l) = &local
            && l.version().is_some_and(|v| at_least(&v, &min))
        {
            return Ok(l.clone());
        }
        let stale =
            |master: ReplicaRef, reason: String| ReplicationError::StaleVersionUnavailable {
                required: min,
                local: local.as_ref().and_then(TlReadResult::version),
                master: master.node,
                reason,
            };
        let known = Some(local.as_ref().ok_or(()));
        match self.tl_read_latest(key, pl, known).await {
            Ok(r) if r.version().is_some_and(|v| at_least(&v, &min)) => Ok(r),
            Ok(r) => Err(stale(
                ReplicaRef {
                    node: r.served_by,
                    dc: self.dc(),
                },
                format!(
                    "the master holds {}: version {min} was never issued",
                    r.version().map_or("nothing".to_owned(), |v| v.to_string())
                ),
            )),
            Err(ReplicationError::MasterUnavailable {
                master, dc, reason, ..
            }) => Err(stale(ReplicaRef { node: master, dc }, reason)),
            Err(e) => Err(e),
        }
    }

    /// A read_latest this node answers from its own copy, read once: the record's master is
    /// this node, which sees a majority and has confirmed the record since it became master
    /// (what [`Node::tl_serve_read`] would check, re-reading the copy). `None`: the general
    /// path decides (another master, an absent record, a record to confirm first, an emulated
    /// service model).
    fn tl_read_mine(&self, key: &[u8], pl: &Placement) -> Result<Option<TlReadResult>> {
        let me = self.id();
        if !pl.holds(me) || !self.service_model().is_real() || !self.tl_confirmed(key) {
            return Ok(None);
        }
        let Some(record) = self.tl_state().store.get(key)? else {
            return Ok(None);
        };
        if record.master.node != me {
            return Ok(None);
        }
        self.tl_check_majority(key, pl)?;
        Ok(Some(TlReadResult {
            record: Some(record),
            served_by: me,
            remote: false,
        }))
    }

    /// Where a write or read_latest of `key` goes first (§3's `master_hint`), and the
    /// version of the record that named that master: the target waits until it has applied
    /// it, so a hint fresher than the target's own copy (just after a migration) costs no
    /// bounce through the old master.
    pub(super) async fn master_target(
        &self,
        key: &[u8],
        pl: &Placement,
    ) -> Result<(Target, Option<Version>)> {
        if !pl.holds(self.id())
            && let Some((m, v)) = self.tl_state().hints.lock().get(key)
        {
            return Ok((Target::Master(*m), Some(*v)));
        }
        let near = self.tl_read_any(key, pl, None).await?;
        Ok(match near.record {
            Some(r) => (Target::Master(r.master), Some(r.ver)),
            None => (Target::Arbiter(pl.arbiter()), None),
        })
    }

    /// `found` (where the master is, and the version that says so), or the new master when
    /// the found one is down and the bucket fails over ([`Node::tl_fail_over`]).
    pub(super) async fn tl_live_target(
        &self,
        key: &[u8],
        pl: &Placement,
        found: (Target, Option<Version>),
    ) -> Result<(Target, Option<Version>)> {
        let Target::Master(m) = found.0 else {
            return Ok(found);
        };
        Ok(match self.tl_fail_over(key, pl, m).await? {
            Some(r) => (Target::Master(r.master), Some(r.ver)),
            None => found,
        })
    }

    /// Remembers where `key`'s master is, for a coordinator that holds no copy of it
    /// ([`Node::master_target`]). A record this node masters is not remembered: this node
    /// holds a copy, so the hint would never be read (and inserting it was a sixth of a
    /// GET's CPU at the master).
    pub(super) fn remember_master(&self, key: &[u8], record: &Record) {
        if record.master.node == self.id() {
            return;
        }
        let mut h = self.tl_state().hints.lock();
        if h.len() >= self.kernel().cfg.tl_hint_cache && !h.contains_key(key) {
            // A full cache starts over: hints are only an optimisation.
            h.clear();
        }
        h.insert(Bytes::copy_from_slice(key), (record.master, record.ver));
    }

    /// Drops the cached hint of a key whose master failed, so the next request asks a
    /// replica again (the mastership may have moved, or been forced elsewhere).
    pub(super) fn forget_master_on_failure<T>(&self, key: &[u8], r: &Result<T>) {
        if matches!(
            r,
            Err(ReplicationError::MasterUnavailable { .. }
                | ReplicationError::StaleVersionUnavailable { .. })
        ) {
            self.tl_state().hints.lock().remove(key);
        }
    }

    /// Sends `msg` to `ask.to` and returns the reply. A target the detector marks down fails
    /// at once, unsent. A shed request is `overload`; a
    /// transport failure is `master_unavailable` (`insert_arbiter_unavailable` when asking the
    /// arbiter), and for a write "may have applied": once the request left this node, a
    /// timeout or a peer that left after receiving it says nothing about the outcome.
    pub(super) async fn tl_ask(&self, ask: &Ask<'_>, msg: Msg, timeout: Duration) -> Result<Msg> {
        if !self.is_up(ask.to.node) {
            // Fail fast; the request never left, so nothing can have applied.
            return Err(self.unavailable(
                ask.key,
                ask.to,
                ask.pl,
                ask.target,
                "the failure detector marks it down",
                false,
            ));
        }
        match self
            .kernel()
            .transport
            .request(ask.to.node, msg, timeout)
            .await
        {
            Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
            Ok(m) => Ok(m),
            Err(e) => Err(self.unavailable(
                ask.key,
                ask.to,
                ask.pl,
                ask.target,
                &e.to_string(),
                ask.write,
            )),
        }
    }

    /// The error for a reply of the wrong kind to a [`Node::tl_ask`].
    pub(super) fn unexpected(&self, ask: &Ask<'_>, reply: &Msg) -> ReplicationError {
        self.unavailable(
            ask.key,
            ask.to,
            ask.pl,
            ask.target,
            &format!("unexpected reply {reply:?}"),
            ask.write,
        )
    }

    fn unavailable(
        &self,
        key: &[u8],
        to: ReplicaRef,
        pl: &Placement,
        target: Target,
        reason: &str,
        maybe_applied: bool,
    ) -> ReplicationError {
        match target {
            Target::Arbiter(a) if a == to => ReplicationError::InsertArbiterUnavailable {
                partition: pl.partition.0,
                node: to.node,
                reason: reason.to_owned(),
                maybe_applied,
            },
            _ => ReplicationError::MasterUnavailable {
                key: lossy(key),
                master: to.node,
                dc: to.dc,
                reason: reason.to_owned(),
                maybe_applied,
            },
        }
    }
}
