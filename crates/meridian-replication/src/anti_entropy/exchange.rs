//! The anti-entropy exchange protocol (§10) over the trees of [`super::AaeTrees`]: every
//! `anti_entropy_interval` a node compares one `(partition, peer)` pair, round-robin from a
//! seeded start, with a peer the detector says is up, and syncs at most
//! `anti_entropy_max_keys` differing keys both ways through `merge_apply` (a repair path: no
//! client limits), so both replicas end with the same object.

use super::messages::{AaeItem, AaeMsg};
use super::{AaeError, AaeTrees, KEYS_PER_SYNC, SEGMENTS_PER_REQUEST};
use crate::kernel::{Incoming, Msg, Node, Protocol, RemoteError};
use crate::object_store::is_reserved_key;
use bytes::Bytes;
use meridian_cluster::{Exchange, HashRequest, SegmentId, diff_keys};
use meridian_core::{NodeId, PartitionId};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

/// Anti-entropy's state on a node.
#[derive(Debug)]
pub(crate) struct Aae {
    /// Index of the next `(partition, peer)` pair.
    cursor: Mutex<usize>,
}

impl Aae {
    /// A state whose round robin starts at `start` (drawn from the node's seeded RNG).
    pub(crate) fn new(start: usize) -> Aae {
        Aae {
            cursor: Mutex::new(start),
        }
    }
}

impl Node {
    /// Anti-entropy's state (registered with the kernel when the node is built).
    pub(crate) fn aae_state(&self) -> &Aae {
        self.protocol::<Aae>()
    }
}

impl Protocol for Aae {
    type Msg = AaeMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: AaeMsg) {
        match msg {
            AaeMsg::Hashes { partition, request } => {
                if let Some(req) = req.refuse_if_overloaded() {
                    match check_hash_request(&request) {
                        Ok(()) => req.answer(node.aae_answer_hashes(partition, &request)),
                        Err(why) => req.refuse_oversized(node, why),
                    }
                }
            }
            AaeMsg::Keys {
                partition,
                segments,
            } => {
                if let Some(req) = req.refuse_if_overloaded() {
                    match check_segments(&segments) {
                        Ok(()) => req.answer(node.aae_answer_keys(partition, &segments)),
                        Err(why) => req.refuse_oversized(node, why),
                    }
                }
            }
            AaeMsg::Sync { partition, items } => {
                if let Some(req) = req.refuse_if_overloaded() {
                    if items.len() > KEYS_PER_SYNC {
                        let why = format!(
                            "AaeMsg::Sync.items has {} items: at most {KEYS_PER_SYNC}",
                            items.len()
                        );
                        req.refuse_oversized(node, why);
                    } else {
                        req.answer(node.aae_answer_sync(partition, items));
                    }
                }
            }
            other @ (AaeMsg::HashReply(_) | AaeMsg::KeysReply(_) | AaeMsg::SyncReply(_)) => {
                req.unexpected(node, &other)
            }
        }
    }
}

impl Node {
    pub(crate) async fn anti_entropy(self, shutdown: CancellationToken) {
        let every = self.kernel().cfg.anti_entropy_interval;
        if every.is_zero() || self.kernel().store.trees().is_none() {
            return;
        }
        // Like hand-off: the first round after one interval plus a seeded jitter.
        let mut tick = self.ticker(every, every / 4, every);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                r = self.anti_entropy_round() => {
                    if let Err(e) = r {
                        tracing::debug!(node = %self.id(), error = %e, "anti-entropy exchange failed");
                    }
                }
            }
        }
    }

    /// The next `(partition, peer)` pair, round-robin, whose peer is up; advances the
    /// cursor past it.
    fn aae_next_pair(&self, trees: &AaeTrees) -> Option<(PartitionId, NodeId)> {
        let me = self.id();
        let pairs: Vec<(PartitionId, NodeId)> = {
            let l = self.layout();
            trees
                .partitions()
                .flat_map(|p| {
                    l.replicas(p)
                        .iter()
                        .filter(|&&n| n != me)
                        .map(move |&n| (p, n))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        if pairs.is_empty() {
            return None;
        }
        let mut cursor = self.aae_state().cursor.lock();
        for i in 0..pairs.len() {
            let idx = (*cursor + i) % pairs.len();
            let (p, peer) = pairs[idx];
            if self.is_up(peer) {
                *cursor = idx + 1;
                return Some((p, peer));
            }
        }
        None
    }

    /// One anti-entropy exchange (normally run every `anti_entropy_interval` by the
    /// background task) with the next `(partition, peer)` pair whose peer is up. Returns the
    /// number of differing keys synced (0 also when anti-entropy is disabled or no peer is
    /// up).
    pub async fn anti_entropy_round(&self) -> std::result::Result<usize, AaeError> {
        let Some(trees) = self.kernel().store.trees().cloned() else {
            return Ok(0);
        };
        let Some((p, peer)) = self.aae_next_pair(&trees) else {
            return Ok(0);
        };
        self.anti_entropy_with(p, peer).await
    }

    async fn aae_request(&self, peer: NodeId, msg: Msg) -> std::result::Result<Msg, AaeError> {
        let timeout = self.kernel().cfg.anti_entropy_timeout;
        match self.kernel().transport.request(peer, msg, timeout).await {
            Ok(Msg::Error(e)) => Err(AaeError::Peer {
                peer,
                reason: format!("refused: {e:?}"),
            }),
            Ok(m) => Ok(m),
            Err(e) => Err(AaeError::Peer {
                peer,
                reason: e.to_string(),
            }),
        }
    }

    /// One anti-entropy exchange of `partition` with `peer` (module [`crate::anti_entropy`]):
    /// compare the trees, list the differing keys (at most `anti_entropy_max_keys`), and
    /// sync their objects both ways. Returns the number of keys synced.
    pub async fn anti_entropy_with(
        &self,
        partition: PartitionId,
        peer: NodeId,
    ) -> std::result::Result<usize, AaeError> {
        let Some(trees) = self.kernel().store.trees().cloned() else {
            return Ok(0);
        };
        let bad = |reason: String| AaeError::Peer { peer, reason };
        let mut ex = Exchange::new(trees.config());
        while let Some(request) = ex.request() {
            let reply = match self
                .aae_request(peer, Msg::Aae(AaeMsg::Hashes { partition, request }))
                .await?
            {
                Msg::Aae(AaeMsg::HashReply(r)) => r,
                other => return Err(bad(format!("unexpected reply {other:?}"))),
            };
            trees
                .with_tree(partition, |t| ex.receive(t, &reply))
                .ok_or_else(|| bad(format!("partition {} is not held here", partition.0)))?
                .map_err(|e| bad(e.to_string()))?;
        }
        let segments = ex.segments().unwrap_or_default().to_vec();

        let me = self.id();
        let max = self.kernel().cfg.anti_entropy_max_keys.max(1);
        let mut keys: Vec<Bytes> = Vec::new();
        'segments: for chunk in segments.chunks(SEGMENTS_PER_REQUEST) {
            let msg = Msg::Aae(AaeMsg::Keys {
                partition,
                segments: chunk.to_vec(),
            });
            let lists = match self.aae_request(peer, msg).await? {
                Msg::Aae(AaeMsg::KeysReply(l)) if l.len() == chunk.len() => l,
                other => return Err(bad(format!("unexpected reply {other:?}"))),
            };
            let listed: usize = lists
                .iter()
                .flat_map(|l| &l.entries)
                .map(|e| e.key.len() + 16)
                .sum();
            self.wan_pace(peer, listed as u64).await;
            for (&seg, remote) in chunk.iter().zip(lists) {
                let local = trees
                    .with_tree(partition, |t| t.key_hashes(seg))
                    .map(|l| l.entries)
                    .unwrap_or_default();
                for k in diff_keys(&local, &remote.entries) {
                    // Only keys both replicas should hold (a bucket may have a smaller
                    // n_val than the layout's replica count).
                    if is_reserved_key(&k)
                        || trees.partition_of(&k) != partition
                        || !self.holds(me, partition, &k)
                        || !self.holds(peer, partition, &k)
                    {
                        continue;
                    }
                    keys.push(k);
                    if keys.len() >= max {
                        break 'segments;
                    }
                }
            }
        }

        let mut synced = 0;
        for chunk in keys.chunks(KEYS_PER_SYNC) {
            let mut items = Vec::with_capacity(chunk.len());
            for k in chunk {
                items.push(AaeItem {
                    key: k.to_vec(),
                    object: self.kernel().store.get(k)?,
                });
            }
            // Both directions of a sync count against the WAN budget: the objects sent
            // before they go, the peer's answers before the next batch.
            self.wan_pace(peer, sync_bytes(&items)).await;
            let replies = match self
                .aae_request(peer, Msg::Aae(AaeMsg::Sync { partition, items }))
                .await?
            {
                Msg::Aae(AaeMsg::SyncReply(r)) => r,
                other => return Err(bad(format!("unexpected reply {other:?}"))),
            };
            self.wan_pace(peer, sync_bytes(&replies)).await;
            for item in replies {
                let Some(o) = item.object else { continue };
                if !chunk.iter().any(|k| k[..] == item.key[..]) {
                    continue;
                }
                let (allow_mult, _) = self.bucket_params(&item.key);
                self.kernel().store.merge_apply(&item.key, &o, allow_mult)?;
            }
            synced += chunk.len();
            self.kernel()
                .counters
                .aae_keys_repaired
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        self.kernel()
            .counters
            .aae_exchanges
            .fetch_add(1, Ordering::Relaxed);
        Ok(synced)
    }

    /// The trees, if anti-entropy is on and `partition` is held; else why not.
    fn aae_trees(&self, partition: PartitionId) -> std::result::Result<&Arc<AaeTrees>, String> {
        let trees = self
            .kernel()
            .store
            .trees()
            .ok_or_else(|| "anti-entropy is disabled".to_owned())?;
        if trees.tree_len(partition).is_none() {
            return Err(format!("partition {} is not held", partition.0));
        }
        Ok(trees)
    }

    fn aae_answer_hashes(&self, partition: PartitionId, request: &HashRequest) -> Msg {
        let trees = match self.aae_trees(partition) {
            Ok(t) => t,
            Err(why) => return Msg::Error(RemoteError::BadRequest(why)),
        };
        match trees.with_tree(partition, |t| t.answer(request)) {
            Some(Ok(r)) => Msg::Aae(AaeMsg::HashReply(r)),
            Some(Err(e)) => Msg::Error(RemoteError::BadRequest(e.to_string())),
            None => Msg::Error(RemoteError::BadRequest("partition not held".into())),
        }
    }

    fn aae_answer_keys(&self, partition: PartitionId, segments: &[SegmentId]) -> Msg {
        let trees = match self.aae_trees(partition) {
            Ok(t) => t,
            Err(why) => return Msg::Error(RemoteError::BadRequest(why)),
        };
        let lists = trees
            .with_tree(partition, |t| {
                segments.iter().map(|&s| t.key_hashes(s)).collect()
            })
            .unwrap_or_default();
        Msg::Aae(AaeMsg::KeysReply(lists))
    }

    fn aae_answer_sync(&self, partition: PartitionId, items: Vec<AaeItem>) -> Msg {
        let trees = match self.aae_trees(partition) {
            Ok(t) => t,
            Err(why) => return Msg::Error(RemoteError::BadRequest(why)),
        };
        let mut out = Vec::with_capacity(items.len());
        for AaeItem { key, object } in items {
            if is_reserved_key(&key)
                || trees.partition_of(&key) != partition
                || !self.holds(self.id(), partition, &key)
            {
                continue;
            }
            let (allow_mult, _) = self.bucket_params(&key);
            // A repair path: merge_apply, no client limits.
            let r = match object {
                Some(o) => self
                    .kernel()
                    .store
                    .merge_apply(&key, &o, allow_mult)
                    .map(Some),
                None => self.kernel().store.get(&key),
            };
            match r {
                Ok(object) => out.push(AaeItem { key, object }),
                Err(e) => return Msg::Error(RemoteError::Storage(e.to_string())),
            }
        }
        Msg::Aae(AaeMsg::SyncReply(out))
    }
}

/// Refuses a hash request whose parents repeat or are out of order: the answer holds
/// `fanout` hashes per parent, so with parents strictly ascending and inside the tree
/// ([`meridian_cluster::MerkleTree::answer`] checks the largest) it is at most one level of
/// this node's own tree, whatever the peer sends.
fn check_hash_request(request: &HashRequest) -> std::result::Result<(), String> {
    match request {
        HashRequest::Children { parents, .. } if !strictly_ascending(parents) => {
            Err("AaeMsg::Hashes.request.parents must be strictly ascending (no repeats)".into())
        }
        _ => Ok(()),
    }
}

/// Refuses a key-list request for more than [`SEGMENTS_PER_REQUEST`] segments, or with
/// repeats or out of order: each segment's key list is copied into the answer once.
fn check_segments(segments: &[SegmentId]) -> std::result::Result<(), String> {
    if segments.len() > SEGMENTS_PER_REQUEST {
        return Err(format!(
            "AaeMsg::Keys.segments has {} ids: at most {SEGMENTS_PER_REQUEST}",
            segments.len()
        ));
    }
    let ids: Vec<u32> = segments.iter().map(|s| s.0).collect();
    if !strictly_ascending(&ids) {
        return Err("AaeMsg::Keys.segments must be strictly ascending (no repeats)".into());
    }
    Ok(())
}

/// Whether every element is larger than the one before it.
fn strictly_ascending(ids: &[u32]) -> bool {
    ids.windows(2).all(|w| w[0] < w[1])
}

/// The bytes of a sync batch on the wire, near enough for pacing.
fn sync_bytes(items: &[AaeItem]) -> u64 {
    items
        .iter()
        .map(|i| {
            i.key.len()
                + i.object
                    .as_ref()
                    .map_or(1, crate::object_store::encoded_len)
        })
        .sum::<usize>() as u64
}
