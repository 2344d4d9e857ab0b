//! Chunk handoff (spec large-objects.md §9): the one path that moves chunks to the nodes that
//! should hold them. Chunks this node holds for a key it no longer holds — a fallback stood in
//! for a down primary (hinted), or a layout change moved the key away (ownership) — are sent
//! to each of the key's replicas that lacks them, on the same bulk path and with the same
//! digests as a client upload, and deleted here once every replica holds every chunk.
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
use meridian_blob::{ChunkId, on_store};
use meridian_core::NodeId;
use meridian_net::Payload;
use std::sync::atomic::Ordering;

/// The most chunk versions one handoff round considers.
pub const VERSIONS_PER_ROUND: usize = 1024;

impl Node {
    /// One chunk-handoff round (run by the handoff task after the object rounds): sends the
    /// chunks of keys this node does not hold to their replicas and deletes them here once
    /// all have them. Returns how many chunks were sent.
    pub async fn chunk_handoff_round(&self) -> Result<usize> {
        let store = self.chunk_store();
        let versions = on_store(&store, |s| s.versions()).await.map_err(storage)?;
        let me = self.id();
        let mut sent = 0;
        let orphans = versions.into_iter().filter(|(_, info)| {
            let p = self.layout().ring().partition_of(&info.key);
            !self.holds(me, p, &info.key)
        });
        for (version, info) in orphans.take(VERSIONS_PER_ROUND) {
            let key = info.key;
            let targets = self.chunk_owners(&key);
            if targets.is_empty() || targets.iter().any(|&n| !self.is_up(n)) {
                continue;
            }
            let indexes = on_store(&store, move |s| s.indexes(version))
                .await
                .map_err(storage)?;
            let mut everywhere = true;
            for &to in &targets {
                match self.push_chunks(to, &key, version, &indexes).await {
                    Ok(n) => sent += n,
                    Err(e) => {
                        tracing::debug!(node = %me, %to, error = %e, "chunk handoff failed");
                        everywhere = false;
                        break;
                    }
                }
            }
            let p = self.layout().ring().partition_of(&key);
            if everywhere && !self.holds(me, p, &key) {
                on_store(&store, move |s| s.delete_version(version))
                    .await
                    .map_err(storage)?;
            }
        }
        Ok(sent)
    }

    /// The replicas that should hold `key`'s chunks under the current layout (not this node).
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
            self.repair_budget(to, len).await;
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
