//! Chunk handoff (spec large-objects.md §9): the one path that moves chunks to the nodes that
//! should hold them. Chunks this node holds whose home key (`Placement::home`: the object's
//! key, or a spread chunk's own) it no longer holds — a fallback stood in for a down primary
//! (hinted), or a layout change moved the key away (ownership) — are sent to each of the home
//! key's replicas that lacks them, on the same bulk path and with the same digests as a
//! client upload, and deleted here once every replica holds every one of them.
//!
//! Chunk repair ([`Node::repair_chunk_version`], the anti-entropy of chunks) uses the same
//! path the other way round: for a version a live manifest references (the object service
//! checks), it sends the key's other replicas the chunks they lack — a replica that was down
//! while the object was written and had no fallback standing in, or lost a chunk from its
//! disk, gets them back without waiting for a read to repair them.
//!
//! Guarantees:
//! - a chunk is only ever sent as bytes that passed their digest here, and the receiver
//!   checks it again before storing it (so a moved object verifies to the same digest,
//!   invariant 8); a copy that fails here is dropped, not spread;
//! - nothing is deleted here before every replica of the key acknowledged every chunk this
//!   node holds of that version, and not while a layout change has given the key back;
//! - one chunk is in flight at a time per node, chunks to another DC wait for that DC's WAN
//!   budget (`repair_wan_bytes_per_sec`, shared with read repair), and a round looks at no
//!   more than [`VERSIONS_PER_ROUND`] versions, so handoff never crowds out client
//!   transfers; a replica that is down is skipped until the detector says it is up.

use super::{BlobMsg, LocalChunk, read_local, storage};
use crate::error::{ReplicationError, Result};
use crate::kernel::{Msg, Node};
use bytes::Bytes;
use meridian_blob::{ChunkId, Placement, on_store};
use meridian_core::NodeId;
use meridian_net::Payload;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// The most chunk versions one handoff round considers.
pub const VERSIONS_PER_ROUND: usize = 1024;

impl Node {
    /// One chunk-handoff round (run by the handoff task after the object rounds): sends the
    /// chunks of keys this node does not hold to their replicas and deletes them here once
    /// all have them. Returns how many chunks were sent.
    pub async fn chunk_handoff_round(&self) -> Result<usize> {
        let pending = &self.handoff_state().chunks_pending;
        if !pending.swap(false, Ordering::SeqCst) {
            return Ok(0);
        }
        // Anything left (a replica down, a failed transfer, more than a round's versions)
        // sets it again.
        let mut left = false;
        let result = self.move_chunks(&mut left).await;
        if left || result.is_err() {
            pending.store(true, Ordering::SeqCst);
        }
        result
    }

    /// The body of [`Node::chunk_handoff_round`]; sets `left` when chunks remain to move.
    async fn move_chunks(&self, left: &mut bool) -> Result<usize> {
        let store = self.chunk_store();
        let versions = on_store(&store, |s| s.versions()).await.map_err(storage)?;
        let me = self.id();
        let mut sent = 0;
        // A version kept with its manifest, whose key this node holds, stays whole: skipped
        // without listing its chunks.
        let candidates = versions.into_iter().filter(|(version, info)| {
            Placement::of_version(*version) == Placement::Spread || !self.holds_home(&info.key)
        });
        let mut candidates = candidates.peekable();
        for (version, info) in candidates.by_ref().take(VERSIONS_PER_ROUND) {
            let indexes = on_store(&store, move |s| s.indexes(version))
                .await
                .map_err(storage)?;
            // The chunks this node should not hold, by home key (one for a version kept
            // with its manifest, one per chunk for a spread one).
            let mut homes: BTreeMap<Vec<u8>, Vec<u32>> = BTreeMap::new();
            for &index in &indexes {
                let home = Placement::home(&info.key, version, index);
                if !self.holds_home(&home) {
                    homes.entry(home.into_owned()).or_default().push(index);
                }
            }
            for (home, moving) in homes {
                let targets = self.chunk_owners(&home);
                if targets.is_empty() || targets.iter().any(|&n| !self.is_up(n)) {
                    *left = true;
                    continue;
                }
                let mut everywhere = true;
                for &to in &targets {
                    match self.push_chunks(to, &info.key, version, &moving).await {
                        Ok(n) => sent += n,
                        Err(e) => {
                            tracing::debug!(node = %me, %to, error = %e, "chunk handoff failed");
                            everywhere = false;
                            *left = true;
                            break;
                        }
                    }
                }
                if everywhere && !self.holds_home(&home) {
                    let whole = moving.len() == indexes.len();
                    on_store(&store, move |s| {
                        if whole {
                            s.delete_version(version)?;
                        } else {
                            for index in moving {
                                s.remove(ChunkId { version, index })?;
                            }
                        }
                        Ok(())
                    })
                    .await
                    .map_err(storage)?;
                }
            }
        }
        *left |= candidates.peek().is_some();
        Ok(sent)
    }

    /// Chunk repair of `version` of `key`'s object (which the caller found referenced by a
    /// live manifest): for every chunk of it stored here whose home key this node holds,
    /// each other replica of that key that is up and lacks it is sent it (asked with
    /// `Indexes` first, verified here and there, paced by the WAN budget). Nothing is deleted.
    /// Returns how many chunks were sent.
    pub async fn repair_chunk_version(&self, key: &Bytes, version: u128) -> Result<usize> {
        let store = self.chunk_store();
        let indexes = on_store(&store, move |s| s.indexes(version))
            .await
            .map_err(storage)?;
        let mut homes: BTreeMap<Vec<u8>, Vec<u32>> = BTreeMap::new();
        for &index in &indexes {
            let home = Placement::home(key, version, index);
            if self.holds_home(&home) {
                homes.entry(home.into_owned()).or_default().push(index);
            }
        }
        let mut sent = 0;
        for (home, held) in homes {
            for to in self.chunk_owners(&home) {
                if !self.is_up(to) {
                    continue;
                }
                match self.push_chunks(to, key, version, &held).await {
                    Ok(n) => sent += n,
                    Err(e) => {
                        tracing::debug!(node = %self.id(), %to, error = %e, "chunk repair failed");
                    }
                }
            }
        }
        Ok(sent)
    }

    /// Whether this node holds `home` (a chunk's home key) under the current layouts.
    pub(crate) fn holds_home(&self, home: &[u8]) -> bool {
        let p = self.layout().ring().partition_of(home);
        self.holds(self.id(), p, home)
    }

    /// The replicas that should hold the chunks whose home key is `key` under the current
    /// layout (not this node).
    fn chunk_owners(&self, key: &[u8]) -> Vec<NodeId> {
        let (_, n_val) = self.bucket_params(key);
        let layout = self.layout();
        let p = layout.ring().partition_of(key);
        layout
            .replicas(p)
            .iter()
            .take(n_val as usize)
            .copied()
            .filter(|&n| n != self.id())
            .collect()
    }

    /// Sends `to` the chunks of `version` (among `indexes`) it lacks; returns how many.
    async fn push_chunks(
        &self,
        to: NodeId,
        key: &Bytes,
        version: u128,
        indexes: &[u32],
    ) -> Result<usize> {
        let timeout = self.kernel().cfg.handoff_timeout;
        let transport = &self.kernel().transport;
        let fail = |what: String| ReplicationError::Storage {
            reason: format!("{to}: {what}"),
        };
        let has = match transport
            .request(to, Msg::Blob(BlobMsg::Indexes { version }), timeout)
            .await
        {
            Ok(Msg::Blob(BlobMsg::HasIndexes { indexes })) => indexes,
            other => return Err(fail(format!("{other:?}"))),
        };
        let mut sent = 0;
        for &index in indexes.iter().filter(|i| has.binary_search(i).is_err()) {
            let id = ChunkId { version, index };
            let LocalChunk::Found(bytes) = read_local(&self.chunk_store(), id).await? else {
                // Collected, or corrupt (and now deleted) here: the replicas' own copies and
                // read repair are what is left for it.
                continue;
            };
            let digest = meridian_blob::chunk_digest(&bytes);
            let len = bytes.len() as u64;
            self.wan_pace(to, len).await;
            let msg = Msg::Blob(BlobMsg::PutChunk {
                key: key.clone(),
                id,
                digest,
            });
            match transport
                .request_with(to, msg, Some(Payload::bytes(bytes)), timeout)
                .await
            {
                Ok((Msg::Blob(BlobMsg::Stored), _)) => {
                    sent += 1;
                    let c = &self.kernel().counters;
                    c.handoff_bytes.fetch_add(len, Ordering::Relaxed);
                }
                other => return Err(fail(format!("{other:?}"))),
            }
        }
        Ok(sent)
    }
}
