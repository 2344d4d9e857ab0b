//! The coordinator: a client's [`Transaction`] handle (spec §2 BEGIN/READ/WRITE/COMMIT, §4
//! for the oracle's timestamps) and the re-sending of logged decisions.
//!
//! Guarantees:
//! - the snapshot is fixed by the first operation and every read of the transaction is at
//!   it; a transaction reads its own buffered writes;
//! - with a session token (the client's last commit timestamp) the snapshot is above it, so
//!   a client reads its own commits at every partition (R1 makes the leaders wait for it);
//! - a commit with one participant leader under Clock-SI is one round trip
//!   (`CommitLocal`); otherwise two-phase commit, whose commit point is the decision logged
//!   here before any `Commit` is sent; the client learns the outcome after the log write;
//! - every abort is typed and leaves nothing behind: participants that voted are told to
//!   abort, and one that never hears it asks this node, which answers `Aborted` for any
//!   transaction it neither collects votes for nor has a decision on (presumed abort);
//! - a transaction touches each key at one partition only: the partition a key was first
//!   routed to (by the key directory) is remembered, and a key the directory has since moved
//!   aborts the transaction with the retryable `KeyMoving` rather than being read or written
//!   at a second partition (spec `repartitioning.md` invariant 9).

use super::{Result, Txn};
use crate::bucket::BucketType;
use crate::kernel::{Msg, Node};
use bytes::Bytes;
use futures_util::future::join_all;
use meridian_cluster::bucket_and_key;
use meridian_core::{NodeId, PartitionId, Timestamp};
use meridian_txn::{
    Abort, Decision, Found, TimestampSource, TxId, TxnError, TxnMsg, TxnProps, Write,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// How a transaction starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnOptions {
    /// Writes are refused; the commit is free and never aborts.
    pub read_only: bool,
    /// The session token: the commit timestamp of this client's last transaction. The
    /// snapshot is taken above it (read-your-commits across partitions).
    pub session: Option<Timestamp>,
}

/// An open transaction. Reads go to the keys' leaders at the snapshot; writes and watches
/// are buffered until [`Transaction::commit`]. Dropping it aborts it (nothing is held at any
/// leader before the commit).
#[derive(Debug)]
pub struct Transaction {
    node: Node,
    txid: TxId,
    opts: TxnOptions,
    source: Option<(TimestampSource, TxnProps)>,
    snap: Option<Timestamp>,
    writes: BTreeMap<Bytes, Option<Bytes>>,
    watches: BTreeSet<Bytes>,
    write_bytes: usize,
    started: Instant,
    /// The partition each key touched was routed to (reads, then writes and watches).
    routes: BTreeMap<Bytes, PartitionId>,
}

/// Per leader: its writes and its watched keys.
type Participants = BTreeMap<NodeId, (Vec<Write>, Vec<Bytes>)>;

fn net_abort(leader: NodeId, what: &str, e: impl std::fmt::Display) -> TxnError {
    Abort::Timeout(format!("{what} at {leader}: {e}")).into()
}

/// Unwraps a reply of the expected variant.
pub(super) fn reply<T>(
    leader: NodeId,
    what: &str,
    r: std::result::Result<Msg, meridian_net::NetError>,
    pick: impl FnOnce(TxnMsg) -> Option<Result<T>>,
) -> Result<T> {
    match r {
        Ok(Msg::Txn(m)) => pick(m).unwrap_or_else(|| {
            Err(TxnError::BadRequest(format!(
                "{what}: unexpected reply from {leader}"
            )))
        }),
        Ok(Msg::Error(e)) => Err(net_abort(leader, what, format!("{e:?}"))),
        Ok(_) => Err(TxnError::BadRequest(format!(
            "{what}: unexpected reply from {leader}"
        ))),
        Err(e) => Err(net_abort(leader, what, e)),
    }
}

impl Node {
    /// Starts a transaction on transactional buckets, coordinated by this node.
    pub fn begin(&self, opts: TxnOptions) -> Transaction {
        Transaction {
            node: self.clone(),
            txid: self.txn_state().next_txid(self.id()),
            opts,
            source: None,
            snap: None,
            writes: BTreeMap::new(),
            watches: BTreeSet::new(),
            write_bytes: 0,
            started: Instant::now(),
            routes: BTreeMap::new(),
        }
    }

    /// Runs `body` in a transaction and commits it; on a retryable abort (a conflict, a
    /// blocked read, an old snapshot, a clock stepping back, a key moving between leaders or
    /// a directory that had not caught up with a move) runs it again at a fresh
    /// snapshot, at most `attempts` times, after an exponential backoff (0.5 ms doubling to
    /// 100 ms) with seeded jitter. `body` gets the transaction and hands it back with its
    /// output; the answer is that output and the commit timestamp.
    pub async fn retry_txn<T, F, Fut>(
        &self,
        opts: TxnOptions,
        attempts: u32,
        mut body: F,
    ) -> Result<(T, Timestamp)>
    where
        F: FnMut(Transaction) -> Fut,
        Fut: std::future::Future<Output = Result<(Transaction, T)>>,
    {
        let mut backoff_us = 500u64;
        let mut attempt = 1;
        loop {
            let run = async {
                let (t, out) = body(self.begin(opts)).await?;
                Ok::<_, TxnError>((out, t.commit().await?))
            };
            match run.await {
                Ok(done) => return Ok(done),
                Err(e) if e.is_retryable() && attempt < attempts => {
                    attempt += 1;
                    let jitter = {
                        use rand::Rng;
                        self.kernel().rng.lock().random_range(0..=backoff_us)
                    };
                    tokio::time::sleep(Duration::from_micros(backoff_us / 2 + jitter / 2)).await;
                    backoff_us = (backoff_us * 2).min(100_000);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Counts a transaction's refusal because of a key move (`KeyMoving`,
    /// `WrongPartition`) for `/metrics`; other errors are not counted here.
    fn txn_count_move_refusal(&self, e: &TxnError) {
        let c = &self.txn_state().counters;
        match e {
            TxnError::Aborted(Abort::KeyMoving(_)) => {
                c.key_moving_aborts.fetch_add(1, Ordering::Relaxed);
            }
            TxnError::WrongPartition { .. } => {
                c.wrong_partition.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Waits (at most a second) until this node's key directory reached `epoch`, and a
    /// little in any case (the answering leader's own copy may be the stale one).
    pub(crate) async fn txn_await_directory(&self, epoch: u64) {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let now = self.kernel().view.read().meta.key_directory.epoch();
            if now >= epoch || Instant::now() >= deadline {
                return;
            }
        }
    }

    pub(super) fn txn_timeout(&self) -> Duration {
        let l = &self.txn_state().limits;
        Duration::from_micros(l.prepare_timeout_us + l.read_wait_max_us)
    }

    /// Sends the commit to every participant that has not acknowledged it, until all have;
    /// then drops the decision.
    pub(crate) async fn txn_send_commits(self, mut d: Decision) {
        let mut backoff = Duration::from_millis(50);
        loop {
            let txid = d.txid;
            let ts = d.commit_ts;
            let acks = join_all(d.pending.iter().map(|&p| {
                let node = self.clone();
                async move {
                    let ok = if p == node.id() {
                        node.txn_finish(txid, Some(ts)).is_ok()
                    } else {
                        let r = node
                            .kernel()
                            .transport
                            .request(p, TxnMsg::Commit { txid, ts }.into(), node.txn_timeout())
                            .await;
                        matches!(r, Ok(Msg::Txn(TxnMsg::Ack)))
                    };
                    (p, ok)
                }
            }))
            .await;
            let before = d.pending.len();
            d.pending
                .retain(|p| !acks.iter().any(|(q, ok)| q == p && *ok));
            let t = self.txn_state();
            if d.pending.is_empty() {
                if let Err(e) = t.store.forget_decision(txid) {
                    tracing::warn!(node = %self.id(), %txid, error = %e, "decision not dropped");
                }
                return;
            }
            if d.pending.len() < before {
                let _ = t.store.log_decision(&d);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

impl Transaction {
    /// The transaction's id.
    pub fn id(&self) -> TxId {
        self.txid
    }

    /// The snapshot, once an operation fixed it.
    pub fn snapshot(&self) -> Option<Timestamp> {
        self.snap
    }

    /// Whether nothing was written or watched.
    pub fn is_read_only(&self) -> bool {
        self.writes.is_empty() && self.watches.is_empty()
    }

    fn txn(&self) -> &Txn {
        self.node.txn_state()
    }

    /// `key`'s leader now; `KeyMoving` if the directory moved it since this transaction
    /// first touched it at another partition.
    fn route(&mut self, key: &Bytes) -> Result<NodeId> {
        let (p, leader) = self.node.txn_leader(key);
        match self.routes.get(key) {
            Some(&was) if was != p => Err(Abort::KeyMoving(key.to_vec()).into()),
            Some(_) => Ok(leader),
            None => {
                self.routes.insert(key.clone(), p);
                Ok(leader)
            }
        }
    }

    /// Checks `key`'s bucket: transactional, with the same timestamp source as the keys
    /// before it.
    fn check_key(&mut self, key: &[u8]) -> Result<()> {
        let (bucket, _) = bucket_and_key(key);
        let props = *self.node.registry().props_for(bucket);
        if props.bucket_type != BucketType::Transactional {
            return Err(TxnError::BadRequest(format!(
                "bucket {} is {}, not transactional: transactions only cover transactional buckets",
                String::from_utf8_lossy(bucket),
                props.bucket_type
            )));
        }
        let source = props.txn.source();
        match self.source {
            None => self.source = Some((source, props.txn)),
            Some((s, _)) if s != source => {
                return Err(TxnError::BadRequest(format!(
                    "bucket {} takes {} timestamps and this transaction {}: one transaction uses one timestamp source",
                    String::from_utf8_lossy(bucket),
                    source.as_str(),
                    s.as_str()
                )));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Fixes the snapshot if no operation has (spec: `clock_O() − Δ`, or the oracle's).
    async fn ensure_snapshot(&mut self) -> Result<Timestamp> {
        if let Some(s) = self.snap {
            return Ok(s);
        }
        let (source, props) = self.source.unwrap_or_default();
        let snap = match source {
            TimestampSource::ClockSi => {
                let now = self.node.txn_clock_read()?;
                let delta = props.snapshot_delta_us.unwrap_or(0);
                let s = Timestamp(now.0.saturating_sub(delta));
                match self.opts.session {
                    Some(last) => s.max(above_session(last)?),
                    None => s,
                }
            }
            TimestampSource::Tso => self.node.oracle_get(&props).await?,
        };
        self.snap = Some(snap);
        Ok(snap)
    }

    /// Reads `keys` at the snapshot (own writes first): values, `None` for absent.
    pub async fn read(&mut self, keys: &[Bytes]) -> Result<Vec<Option<Bytes>>> {
        Ok(self
            .read_versions(keys)
            .await?
            .into_iter()
            .map(|f| f.and_then(|(_, v)| v))
            .collect())
    }

    /// Reads `keys` at the snapshot with each version's commit timestamp (a key this
    /// transaction wrote answers its buffered value at `Timestamp::MAX`).
    ///
    /// A leader answering `WrongPartition` (this node's key directory is older than a move)
    /// makes the read wait until the directory caught up and go again, at most three times —
    /// unless the transaction already touched one of those keys at the old partition: then
    /// it aborts with `KeyMoving` (see the module docs).
    pub async fn read_versions(&mut self, keys: &[Bytes]) -> Result<Vec<Found>> {
        for k in keys {
            self.check_key(k)?;
        }
        let snap = self.ensure_snapshot().await?;
        let mut attempt = 0;
        loop {
            let fresh: Vec<Bytes> = keys
                .iter()
                .filter(|k| !self.routes.contains_key(*k) && !self.writes.contains_key(*k))
                .cloned()
                .collect();
            let r = self.read_at_leaders(keys, snap).await;
            if let Err(e) = &r {
                self.node.txn_count_move_refusal(e);
            }
            match r {
                Err(TxnError::WrongPartition { dir_epoch, .. }) if attempt < 3 => {
                    attempt += 1;
                    // Nothing was read: the keys first routed by this call are untouched.
                    for k in &fresh {
                        self.routes.remove(k);
                    }
                    self.node.txn_await_directory(dir_epoch).await;
                }
                r => return r,
            }
        }
    }

    async fn read_at_leaders(&mut self, keys: &[Bytes], snap: Timestamp) -> Result<Vec<Found>> {
        let (source, _) = self.source.unwrap_or_default();
        let mut out: Vec<Option<Found>> = vec![None; keys.len()];
        let mut by_leader: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            if let Some(v) = self.writes.get(k) {
                out[i] = Some(Some((Timestamp::MAX, v.clone())));
            } else {
                let leader = self.route(k)?;
                by_leader.entry(leader).or_default().push(i);
            }
        }
        let txid = Some(self.txid);
        let node = &self.node;
        let answers = join_all(by_leader.into_iter().map(|(leader, idx)| {
            let ks: Vec<Bytes> = idx.iter().map(|&i| keys[i].clone()).collect();
            async move {
                let r = if leader == node.id() {
                    node.txn_leader_read(txid, snap, source, &ks).await
                } else {
                    let msg = TxnMsg::Read {
                        txid,
                        snap,
                        source,
                        keys: ks,
                    };
                    let r = node
                        .kernel()
                        .transport
                        .request(leader, msg.into(), node.txn_timeout())
                        .await;
                    reply(leader, "read", r, |m| match m {
                        TxnMsg::ReadReply(r) => Some(r),
                        _ => None,
                    })
                };
                (idx, r)
            }
        }))
        .await;
        for (idx, r) in answers {
            let found = r?;
            if found.len() != idx.len() {
                return Err(TxnError::BadRequest(
                    "a leader answered a different number of keys".into(),
                ));
            }
            for (i, f) in idx.into_iter().zip(found) {
                out[i] = Some(f);
            }
        }
        Ok(out.into_iter().map(Option::flatten).collect())
    }

    /// Buffers a write (`None`: delete).
    pub fn write(&mut self, key: Bytes, value: Option<Bytes>) -> Result<()> {
        if self.opts.read_only {
            return Err(TxnError::BadRequest(
                "the transaction is read-only (started with READONLY)".into(),
            ));
        }
        self.check_key(&key)?;
        let add = key.len() + value.as_ref().map_or(0, Bytes::len);
        let limit = self.txn().limits.max_write_bytes;
        if self.write_bytes + add > limit {
            return Err(TxnError::TxnTooLarge {
                bytes: self.write_bytes + add,
                limit,
            });
        }
        self.write_bytes += add;
        self.writes.insert(key, value);
        Ok(())
    }

    /// Holds `keys` against other writers from the snapshot to the commit (Redis `WATCH`):
    /// the commit aborts with `WwConflict` if any was committed by another transaction after
    /// the snapshot. Fixes the snapshot.
    pub async fn watch(&mut self, keys: &[Bytes]) -> Result<()> {
        for k in keys {
            self.check_key(k)?;
        }
        self.ensure_snapshot().await?;
        self.watches.extend(keys.iter().cloned());
        Ok(())
    }

    /// Commits: the commit timestamp, or a typed abort (retryable, no effect).
    pub async fn commit(mut self) -> Result<Timestamp> {
        let node = self.node.clone();
        let r = self.commit_inner().await;
        let c = &node.txn_state().counters;
        match &r {
            Ok(_) => {
                c.commits.fetch_add(1, Ordering::Relaxed);
                node.txn_trace(std::mem::take(&mut self.routes).into_keys().collect());
            }
            Err(e) => {
                c.aborts.fetch_add(1, Ordering::Relaxed);
                node.txn_count_move_refusal(e);
            }
        };
        r
    }

    async fn commit_inner(&mut self) -> Result<Timestamp> {
        if self.writes.is_empty() && self.watches.is_empty() {
            return match self.snap {
                Some(s) => Ok(s),
                None => self.node.txn_clock_read(),
            };
        }
        let limits = self.txn().limits;
        if Instant::now().duration_since(self.started).as_micros() as u64
            > limits.max_txn_duration_us
        {
            return Err(
                Abort::Timeout("the transaction ran longer than max_txn_duration".into()).into(),
            );
        }
        let snap = self.ensure_snapshot().await?;
        let (source, props) = self.source.unwrap_or_default();
        let mut parts: Participants = BTreeMap::new();
        for (k, v) in std::mem::take(&mut self.writes) {
            let leader = self.route(&k)?;
            parts.entry(leader).or_default().0.push((k, v));
        }
        for k in std::mem::take(&mut self.watches) {
            let leader = self.route(&k)?;
            let e = parts.entry(leader).or_default();
            if !e.0.iter().any(|(w, _)| *w == k) {
                e.1.push(k);
            }
        }
        if source == TimestampSource::ClockSi && parts.len() == 1 {
            let Some((leader, (writes, watches))) = parts.pop_first() else {
                return Err(TxnError::BadRequest("no participant".into()));
            };
            return self.commit_one(leader, snap, writes, watches).await;
        }
        self.two_phase(snap, source, &props, parts).await
    }

    async fn commit_one(
        &self,
        leader: NodeId,
        snap: Timestamp,
        writes: Vec<Write>,
        watches: Vec<Bytes>,
    ) -> Result<Timestamp> {
        let node = &self.node;
        if leader == node.id() {
            return node
                .txn_commit_local(self.txid, snap, writes, watches)
                .await;
        }
        let msg = TxnMsg::CommitLocal {
            txid: self.txid,
            snap,
            writes,
            watches,
        };
        let r = node
            .kernel()
            .transport
            .request(leader, msg.into(), node.txn_timeout())
            .await;
        // Sent and unanswered, the commit may have happened: not an abort (an abort has no
        // effect, and a retry of an increment would apply it twice).
        let r = match r {
            Err(e @ (meridian_net::NetError::Timeout { .. } | meridian_net::NetError::Closed)) => {
                return Err(TxnError::OutcomeUnknown(format!("commit at {leader}: {e}")));
            }
            r => r,
        };
        reply(leader, "commit", r, |m| match m {
            TxnMsg::Committed(r) => Some(r),
            _ => None,
        })
    }

    async fn two_phase(
        &self,
        snap: Timestamp,
        source: TimestampSource,
        props: &TxnProps,
        parts: Participants,
    ) -> Result<Timestamp> {
        let node = &self.node;
        let t = self.txn();
        let txid = self.txid;
        t.active.lock().insert(txid);
        let leaders: Vec<NodeId> = parts.keys().copied().collect();
        let timeout = node.txn_timeout();
        let votes = join_all(
            parts
                .into_iter()
                .map(|(leader, (writes, watches))| async move {
                    if leader == node.id() {
                        return node.txn_prepare(txid, snap, source, writes, watches).await;
                    }
                    let msg = TxnMsg::Prepare {
                        txid,
                        snap,
                        source,
                        writes,
                        watches,
                    };
                    let r = node
                        .kernel()
                        .transport
                        .request(leader, msg.into(), timeout)
                        .await;
                    reply(leader, "prepare", r, |m| match m {
                        TxnMsg::Vote(v) => Some(v),
                        _ => None,
                    })
                }),
        )
        .await;
        let decided = async {
            let mut prepared = Vec::with_capacity(votes.len());
            for v in votes {
                prepared.push(v?);
            }
            let commit_ts = match source {
                TimestampSource::ClockSi => meridian_txn::leader::commit_ts(prepared)
                    .ok_or_else(|| TxnError::BadRequest("no participant".into()))?,
                TimestampSource::Tso => node.oracle_get(props).await?,
            };
            let d = Decision {
                txid,
                commit_ts,
                pending: leaders.clone(),
            };
            t.store.log_decision(&d)?;
            Ok::<_, TxnError>(d)
        }
        .await;
        t.active.lock().remove(&txid);
        match decided {
            Ok(d) => {
                t.counters.two_phase_commits.fetch_add(1, Ordering::Relaxed);
                let ts = d.commit_ts;
                tokio::spawn(node.clone().txn_send_commits(d));
                Ok(ts)
            }
            Err(e) => {
                for leader in leaders {
                    if leader == node.id() {
                        let _ = node.txn_finish(txid, None);
                    } else {
                        // One-way: a participant that misses it asks later (presumed abort).
                        let _ = node
                            .kernel()
                            .transport
                            .send(leader, TxnMsg::Abort { txid }.into());
                    }
                }
                Err(e)
            }
        }
    }
}

/// The least snapshot above the client's session token `last` (its last commit timestamp):
/// `last + 1`, refused when the token is the largest timestamp (no snapshot is above it).
fn above_session(last: Timestamp) -> Result<Timestamp> {
    last.0.checked_add(1).map(Timestamp).ok_or_else(|| {
        TxnError::BadRequest(format!(
            "session {} is the largest timestamp: no snapshot can follow it",
            last.0
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_at_the_largest_timestamp_is_refused_naming_the_session() {
        assert_eq!(above_session(Timestamp(41)).unwrap(), Timestamp(42));
        // `last + 1` overflowed here: a panic in debug builds, a snapshot of 0 in release.
        match above_session(Timestamp(u64::MAX)) {
            Err(TxnError::BadRequest(m)) => assert!(m.starts_with("session "), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
