//! Large objects between nodes (spec `large-objects.md` §4, §5, §8): storing a chunk on its
//! replicas, fetching one with its digest checked, and listing a bucket's keys across the
//! cluster. The manifest itself is an ordinary value written and read through the bucket's
//! own protocol (the dispatch facade), so this module never decides consistency.
//!
//! Guarantees:
//! - a chunk is acknowledged only once a replica stored it after checking its xxh3-128 digest,
//!   and [`Node::blob_put_chunk`] returns only after the bucket's W replicas did;
//! - [`Node::blob_get_chunk`] returns bytes only if they match the digest the manifest names:
//!   a copy that fails the check (at rest: the replica deletes it and says so; on the wire:
//!   the coordinator sees it) is skipped, the next replica asked, and the bad replica — or a
//!   replica of the key that lacks the chunk (down while it was written) — is sent the good
//!   bytes (read repair of chunks);
//! - [`Node::blob_list`] asks, for every partition, one up replica (this DC's first) and
//!   merges their sorted pages, cutting the result where a replica's page ended, so a listing
//!   never skips a key a replica holds.
//!
//! Placement: a chunk lives on the preference list (primaries, or fallbacks standing in for
//! down ones) of its home key — its object's key (`with_manifest`), or for a version marked
//! spread a key hashing the version and index ([`Placement::home`]), so a large object's
//! chunks spread over the cluster; [`handoff`] moves chunks held by a fallback, or left
//! behind by a layout change, to their home key's replicas.

pub mod handoff;
pub mod messages;

pub use messages::{BlobMsg, Listed};

use crate::error::{ReplicationError, Result};
use crate::kernel::{Incoming, Msg, Node, Protocol, RemoteError};
use bytes::Bytes;
use meridian_blob::{
    ChunkDigest, ChunkId, ChunkStore, Manifest, MemChunkStore, Placement, VersionInfo, on_store,
};
use meridian_cluster::{Props, bucket_and_key};
use meridian_core::{NodeId, PartitionId};
use meridian_net::{FileSlice, Payload};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The blob protocol's state: the node's chunk store.
#[derive(Default)]
pub(crate) struct Blob {
    chunks: OnceLock<Arc<dyn ChunkStore>>,
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Blob")
    }
}

impl Blob {
    fn store(&self) -> &Arc<dyn ChunkStore> {
        self.chunks.get_or_init(|| Arc::new(MemChunkStore::new()))
    }
}

/// The most partitions one `List` request may name (a node holds far fewer; more is an
/// attack or a bug, refused before any work).
const MAX_LIST_PARTITIONS: usize = 65_536;

/// The most entries one `List` request may ask for.
const MAX_LIST_LIMIT: u32 = 10_000;

pub(crate) fn storage(e: meridian_blob::BlobError) -> ReplicationError {
    ReplicationError::Storage {
        reason: e.to_string(),
    }
}

/// Stores a chunk in this node's store, recording the version under `key`.
async fn store_chunk(
    node: &Node,
    key: Bytes,
    id: ChunkId,
    digest: ChunkDigest,
    bytes: Bytes,
) -> Result<()> {
    if !node.holds_home(&Placement::home(&key, id.version, id.index)) {
        // Stored as a fallback: the chunk-handoff round has something to move.
        node.handoff_state()
            .chunks_pending
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    let info = VersionInfo {
        key,
        created_us: node.clock_now().0,
    };
    on_store(&node.chunk_store(), move |s| {
        s.put(id, &bytes, digest, &info)
    })
    .await
    .map_err(storage)
}

impl Node {
    /// The blob protocol's state (registered with the kernel when the node is built).
    pub(crate) fn blob_state(&self) -> &Blob {
        self.protocol::<Blob>()
    }
}

impl Protocol for Blob {
    type Msg = BlobMsg;

    fn handle(&self, node: &Node, req: Incoming, msg: BlobMsg) {
        let Some(mut req) = req.refuse_if_overloaded() else {
            return;
        };
        let store = self.store().clone();
        let node = node.clone();
        match msg {
            BlobMsg::PutChunk { key, id, digest } => {
                let Some(payload) = req.payload.take() else {
                    req.answer(RemoteError::BadRequest("a chunk without its bytes".into()));
                    return;
                };
                tokio::spawn(async move {
                    let stored = match payload.into_bytes().await {
                        Ok(bytes) => store_chunk(&node, key, id, digest, bytes).await,
                        Err(e) => Err(ReplicationError::Storage {
                            reason: e.to_string(),
                        }),
                    };
                    match stored {
                        Ok(()) => req.answer(BlobMsg::Stored),
                        Err(e) => req.answer(RemoteError::Storage(e.to_string())),
                    }
                });
            }
            BlobMsg::GetChunk { id, stream } => {
                tokio::spawn(async move {
                    match serve_chunk(&store, id).await {
                        Ok((found, corrupt, payload)) => req.answer_with(
                            BlobMsg::Chunk { found, corrupt },
                            payload.map(|p| p.on_stream(stream)),
                        ),
                        Err(e) => req.answer(RemoteError::Storage(e.to_string())),
                    }
                });
            }
            BlobMsg::Indexes { version } => {
                tokio::spawn(async move {
                    match on_store(&store, move |s| s.indexes(version)).await {
                        Ok(indexes) => req.answer(BlobMsg::HasIndexes { indexes }),
                        Err(e) => req.answer(RemoteError::Storage(e.to_string())),
                    }
                });
            }
            BlobMsg::List {
                partitions,
                start,
                end,
                limit,
            } => {
                if partitions.len() > MAX_LIST_PARTITIONS || limit > MAX_LIST_LIMIT {
                    req.answer(RemoteError::BadRequest(format!(
                        "a listing names at most {MAX_LIST_PARTITIONS} partitions and {MAX_LIST_LIMIT} entries"
                    )));
                    return;
                }
                let answer = match node.list_local(&partitions, start, end, limit as usize) {
                    Ok((entries, more)) => Msg::Blob(BlobMsg::Listed { entries, more }),
                    Err(e) => Msg::Error(RemoteError::Storage(e.to_string())),
                };
                req.answer(answer);
            }
            other @ (BlobMsg::Stored
            | BlobMsg::Chunk { .. }
            | BlobMsg::HasIndexes { .. }
            | BlobMsg::Listed { .. }) => req.unexpected(&node, &other),
        }
    }
}

/// What a replica found for a chunk in its own store.
pub(crate) enum LocalChunk {
    Found(Bytes),
    Missing,
    /// The stored copy failed its digest and was deleted.
    Corrupt,
}

/// Reads a chunk from `store`, checking its digest; a copy failing it is deleted.
pub(crate) async fn read_local(store: &Arc<dyn ChunkStore>, id: ChunkId) -> Result<LocalChunk> {
    on_store(store, move |s| match s.get(id) {
        Ok(Some(b)) => Ok(LocalChunk::Found(b)),
        Ok(None) => Ok(LocalChunk::Missing),
        Err(meridian_blob::BlobError::DigestMismatch { .. }) => {
            tracing::warn!(chunk = ?id, "a stored chunk failed its digest; deleting it");
            s.remove(id)?;
            Ok(LocalChunk::Corrupt)
        }
        Err(e) => Err(e),
    })
    .await
    .map_err(storage)
}

/// A replica's answer to `GetChunk`: (found, corrupt, the bytes). A chunk stored as a file
/// goes out as that file's range — `sendfile(2)` on TCP, unread by this node: the reader
/// checks its digest and repairs this copy if it fails. Other stores are read and checked
/// here.
async fn serve_chunk(
    store: &Arc<dyn ChunkStore>,
    id: ChunkId,
) -> Result<(bool, bool, Option<Payload>)> {
    if let Some((path, offset)) = store.file(id) {
        let opened = meridian_blob::blocking::run(move || -> std::io::Result<Option<FileSlice>> {
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            let len = file.metadata()?.len();
            Ok((len >= offset).then(|| FileSlice::new(Arc::new(file), offset, len - offset)))
        })
        .await
        .map_err(|e| ReplicationError::Storage {
            reason: e.to_string(),
        })?
        .map_err(|e| ReplicationError::Storage {
            reason: e.to_string(),
        })?;
        return Ok(match opened {
            Some(slice) => (true, false, Some(Payload::file(slice))),
            None => (false, false, None),
        });
    }
    Ok(match read_local(store, id).await? {
        LocalChunk::Found(b) => (true, false, Some(Payload::bytes(b))),
        LocalChunk::Missing => (false, false, None),
        LocalChunk::Corrupt => (false, true, None),
    })
}

impl Node {
    /// Gives the node its chunk store (before it serves; by default chunks live in memory).
    /// Returns false if a store was already in use.
    pub fn set_chunk_store(&self, store: Arc<dyn ChunkStore>) -> bool {
        self.blob_state().chunks.set(store).is_ok()
    }

    /// The node's chunk store.
    pub fn chunk_store(&self) -> Arc<dyn ChunkStore> {
        self.blob_state().store().clone()
    }

    /// The nodes chunk `id` of `key`'s object goes to (the preference list of its home key —
    /// the object's key, or its own for a spread chunk — this DC first), the acks a write
    /// needs (the bucket's W) and the request timeout.
    fn chunk_targets(&self, key: &[u8], id: ChunkId) -> (Vec<NodeId>, u32, Duration) {
        let home = Placement::home(key, id.version, id.index);
        let (bucket, _) = bucket_and_key(&home);
        let p = self.registry().resolve(bucket, &Props::default());
        let (_, apl) = self.preflist_for(&home, p.n_val);
        let mut nodes: Vec<NodeId> = Vec::with_capacity(apl.len());
        for n in apl.nodes() {
            if !nodes.contains(&n) {
                nodes.push(n);
            }
        }
        let w = p.w.resolve(p.n_val).max(1);
        (nodes, w, Duration::from_millis(p.timeout_ms.max(1)))
    }

    /// Stores one chunk of `key`'s object on its replicas, sending it on bulk stream `stream`
    /// (a client's parallel stream); returns once the bucket's W of them stored it (the others
    /// keep going).
    pub async fn blob_put_chunk(
        &self,
        key: &[u8],
        id: ChunkId,
        digest: ChunkDigest,
        bytes: Bytes,
        stream: u32,
    ) -> Result<()> {
        let (nodes, need, timeout) = self.chunk_targets(key, id);
        let key = Bytes::copy_from_slice(key);
        let (tx, mut rx) =
            tokio::sync::mpsc::channel::<std::result::Result<(), String>>(nodes.len().max(1));
        for n in &nodes {
            let tx = tx.clone();
            let (node, n, key, bytes) = (self.clone(), *n, key.clone(), bytes.clone());
            tokio::spawn(async move {
                let r = if n == node.id() {
                    store_chunk(&node, key, id, digest, bytes)
                        .await
                        .map_err(|e| e.to_string())
                } else {
                    let msg = Msg::Blob(BlobMsg::PutChunk { key, id, digest });
                    let payload = Payload::bytes(bytes).on_stream(stream);
                    match node
                        .kernel()
                        .transport
                        .request_with(n, msg, Some(payload), timeout)
                        .await
                    {
                        Ok((Msg::Blob(BlobMsg::Stored), _)) => Ok(()),
                        Ok((Msg::Error(e), _)) => Err(format!("{n}: {e:?}")),
                        Ok((other, _)) => Err(format!("{n}: unexpected {other:?}")),
                        Err(e) => Err(format!("{n}: {e}")),
                    }
                };
                let _ = tx.send(r).await;
            });
        }
        drop(tx);
        let (mut ok, mut last) = (0u32, String::from("no replica"));
        while let Some(r) = rx.recv().await {
            match r {
                Ok(()) => {
                    ok += 1;
                    if ok >= need {
                        return Ok(());
                    }
                }
                Err(e) => last = e,
            }
        }
        Err(ReplicationError::ChunkWriteFailed {
            need,
            ok,
            reason: last,
        })
    }

    /// One chunk of `key`'s object, checked against `digest`, read on bulk stream `stream`:
    /// this node's copy if it has a good one, else each replica in turn. Replicas found
    /// without a good copy (missing, corrupt at rest, or damaged on the way) are sent the good
    /// bytes afterwards.
    pub async fn blob_get_chunk(
        &self,
        key: &[u8],
        id: ChunkId,
        digest: ChunkDigest,
        stream: u32,
    ) -> Result<Bytes> {
        let (mut nodes, _, timeout) = self.chunk_targets(key, id);
        let replicas = nodes.clone();
        if let Some(i) = nodes.iter().position(|&n| n == self.id()) {
            nodes.swap(0, i);
        } else {
            nodes.insert(0, self.id());
        }
        let mut damaged = Vec::new();
        let mut tried = 0u32;
        for n in nodes {
            tried += 1;
            let found = if n == self.id() {
                read_local(&self.chunk_store(), id).await
            } else {
                self.fetch_chunk(n, id, stream, timeout).await
            };
            match found {
                Ok(LocalChunk::Found(b)) if meridian_blob::chunk_digest(&b) == digest => {
                    self.repair_chunks(key, id, digest, &b, damaged);
                    return Ok(b);
                }
                Ok(LocalChunk::Found(_)) => {
                    tracing::warn!(peer = %n, chunk = ?id, "a chunk arrived failing its digest");
                    damaged.push(n);
                }
                Ok(LocalChunk::Corrupt) => damaged.push(n),
                // A replica without the chunk (down while it was written, or wiped): read
                // repair, as for a corrupt copy.
                Ok(LocalChunk::Missing) if replicas.contains(&n) => damaged.push(n),
                Ok(LocalChunk::Missing) => {}
                Err(e) => {
                    tracing::debug!(peer = %n, chunk = ?id, error = %e, "chunk read failed");
                }
            }
        }
        Err(ReplicationError::ChunkUnavailable {
            chunk: format!("{:032x}/{}", id.version, id.index),
            tried,
        })
    }

    /// Asks replica `n` for a chunk.
    async fn fetch_chunk(
        &self,
        n: NodeId,
        id: ChunkId,
        stream: u32,
        timeout: Duration,
    ) -> Result<LocalChunk> {
        let msg = Msg::Blob(BlobMsg::GetChunk { id, stream });
        let fail = |reason: String| ReplicationError::Storage {
            reason: format!("{n}: {reason}"),
        };
        match self
            .kernel()
            .transport
            .request_with(n, msg, None, timeout)
            .await
        {
            Ok((Msg::Blob(BlobMsg::Chunk { found: true, .. }), Some(p))) => p
                .into_bytes()
                .await
                .map(LocalChunk::Found)
                .map_err(|e| fail(e.to_string())),
            Ok((Msg::Blob(BlobMsg::Chunk { corrupt: true, .. }), _)) => Ok(LocalChunk::Corrupt),
            Ok((Msg::Blob(BlobMsg::Chunk { found: false, .. }), _)) => Ok(LocalChunk::Missing),
            Ok((other, _)) => Err(fail(format!("unexpected {other:?}"))),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// Sends a good copy of a chunk to the replicas that lacked one.
    fn repair_chunks(
        &self,
        key: &[u8],
        id: ChunkId,
        digest: ChunkDigest,
        bytes: &Bytes,
        damaged: Vec<NodeId>,
    ) {
        let key = Bytes::copy_from_slice(key);
        for n in damaged {
            tracing::info!(peer = %n, chunk = ?id, "repairing a chunk");
            if n == self.id() {
                let (node, key, bytes) = (self.clone(), key.clone(), bytes.clone());
                tokio::spawn(async move {
                    let _ = store_chunk(&node, key, id, digest, bytes).await;
                });
            } else {
                let msg = Msg::Blob(BlobMsg::PutChunk {
                    key: key.clone(),
                    id,
                    digest,
                });
                let (node, bytes) = (self.clone(), bytes.clone());
                tokio::spawn(async move {
                    node.wan_pace(n, bytes.len() as u64).await;
                    let payload = Payload::bytes(bytes);
                    let _ = node.kernel().transport.send_with(n, msg, Some(payload));
                });
            }
        }
    }

    /// This node's live keys in `[start, end)` (empty `end`: unbounded) of `partitions`, in
    /// key order, at most `limit`, and whether the scan stopped at the limit.
    pub(crate) fn list_local(
        &self,
        partitions: &[PartitionId],
        start: Bytes,
        end: Bytes,
        limit: usize,
    ) -> Result<(Vec<Listed>, bool)> {
        let limit = limit.clamp(1, 10_000);
        let ring = self.layout().ring();
        let wanted: std::collections::BTreeSet<PartitionId> = partitions.iter().copied().collect();
        let mut out = Vec::new();
        let mut from = Bound::Included(start);
        let now = self.kernel().clock.now();
        loop {
            let (page, next) = self.kernel().store.objects_from(from, 256)?;
            for (k, mut o) in page {
                if !end.is_empty() && k >= end {
                    return Ok((out, false));
                }
                if !wanted.contains(&ring.partition_of(&k)) {
                    continue;
                }
                self.kernel().store.visible(&k, &mut o);
                let Some((value, ts)) = o
                    .siblings()
                    .iter()
                    .filter_map(|s| match &s.content {
                        meridian_cluster::Content::Value(v) => Some((v, s.meta.ts_us)),
                        meridian_cluster::Content::Tombstone => None,
                    })
                    .max_by_key(|(_, ts)| *ts)
                else {
                    continue;
                };
                // Values are stored in the Redis view's envelope; an expired one is no
                // longer listed (a counter is listed as its stored bytes).
                let value = match meridian_core::envelope::Entry::decode(value.clone()) {
                    Ok(e) if e.is_expired(now) => continue,
                    Ok(e) => e.data,
                    Err(_) => value.clone(),
                };
                out.push(match Manifest::decode(&value) {
                    Ok(Some(m)) => Listed {
                        key: k,
                        size: m.size,
                        s3_etag: Some(m.meta.s3_etag),
                        modified_us: m.created_us,
                    },
                    _ => Listed {
                        key: k,
                        size: value.len() as u64,
                        s3_etag: None,
                        modified_us: ts,
                    },
                });
                if out.len() >= limit {
                    return Ok((out, true));
                }
            }
            match next {
                Some(n) => from = Bound::Excluded(n),
                None => return Ok((out, false)),
            }
        }
    }

    /// Live keys of eventual buckets in `[start, end)` (empty `end`: unbounded) across the
    /// cluster, in key order, at most `limit`; and whether more may follow. Each partition is
    /// listed by one up replica, this DC's first.
    pub async fn blob_list(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<(Vec<Listed>, bool)> {
        let limit = limit.clamp(1, 10_000);
        let mut by_node: BTreeMap<NodeId, Vec<PartitionId>> = BTreeMap::new();
        {
            let layout = self.layout();
            let now = self.kernel().clock.now();
            let det = self.kernel().detector.lock();
            let me = self.id();
            let up = |n: NodeId| n == me || det.is_up(n, now);
            let view = self.kernel().view.read();
            let dc_of = |n: NodeId| view.meta.member(n).map(|m| m.dc);
            for p in layout.ring().partitions() {
                let reps = layout.replicas(p);
                let pick = reps
                    .iter()
                    .copied()
                    .find(|&n| n == me)
                    .or_else(|| {
                        reps.iter()
                            .copied()
                            .find(|&n| up(n) && dc_of(n) == Some(self.dc()))
                    })
                    .or_else(|| reps.iter().copied().find(|&n| up(n)));
                match pick {
                    Some(n) => by_node.entry(n).or_default().push(p),
                    None => {
                        return Err(ReplicationError::ChunkUnavailable {
                            chunk: format!("listing of partition {p}"),
                            tried: 0,
                        });
                    }
                }
            }
        }
        let timeout = Duration::from_secs(10);
        let mut pages = Vec::new();
        let asks = by_node.into_iter().map(|(n, parts)| {
            let node = self.clone();
            let (start, end) = (Bytes::copy_from_slice(start), Bytes::copy_from_slice(end));
            async move {
                if n == node.id() {
                    return node.list_local(&parts, start, end, limit);
                }
                let msg = Msg::Blob(BlobMsg::List {
                    partitions: parts,
                    start,
                    end,
                    limit: limit as u32,
                });
                match node.kernel().transport.request(n, msg, timeout).await {
                    Ok(Msg::Blob(BlobMsg::Listed { entries, more })) => Ok((entries, more)),
                    Ok(Msg::Error(RemoteError::Overload)) => Err(ReplicationError::Overload),
                    Ok(other) => Err(ReplicationError::Storage {
                        reason: format!("{n} answered a listing with {other:?}"),
                    }),
                    Err(e) => Err(ReplicationError::ChunkUnavailable {
                        chunk: format!("listing at {n}: {e}"),
                        tried: 1,
                    }),
                }
            }
        });
        for r in futures_util::future::join_all(asks).await {
            pages.push(r?);
        }
        Ok(merge_pages(pages, limit))
    }
}

/// Merges sorted pages: keys past the smallest last key of a cut page are dropped (that
/// replica may hold keys before them it did not send), duplicates kept once.
fn merge_pages(pages: Vec<(Vec<Listed>, bool)>, limit: usize) -> (Vec<Listed>, bool) {
    let cut: Option<Bytes> = pages
        .iter()
        .filter(|(e, more)| *more && !e.is_empty())
        .filter_map(|(e, _)| e.last().map(|l| l.key.clone()))
        .min();
    let mut all: Vec<Listed> = pages.into_iter().flat_map(|(e, _)| e).collect();
    all.sort_by(|a, b| a.key.cmp(&b.key));
    all.dedup_by(|a, b| a.key == b.key);
    let mut more = false;
    if let Some(c) = cut {
        all.retain(|l| l.key <= c);
        more = true;
    }
    if all.len() > limit {
        all.truncate(limit);
        more = true;
    }
    (all, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(k: &str) -> Listed {
        Listed {
            key: Bytes::copy_from_slice(k.as_bytes()),
            size: 1,
            s3_etag: None,
            modified_us: 0,
        }
    }

    fn keys(v: &[Listed]) -> Vec<&[u8]> {
        v.iter().map(|l| &l.key[..]).collect()
    }

    #[test]
    fn merging_cuts_at_the_first_full_page() {
        let (all, more) = merge_pages(
            vec![
                (vec![l("a"), l("c"), l("e")], true),
                (vec![l("b"), l("d"), l("f"), l("g")], false),
                (vec![l("c")], false),
            ],
            10,
        );
        assert_eq!(keys(&all), vec![&b"a"[..], b"b", b"c", b"d", b"e"]);
        assert!(more);
        let (all, more) = merge_pages(vec![(vec![l("a"), l("b")], false)], 1);
        assert_eq!(keys(&all), vec![&b"a"[..]]);
        assert!(more);
        let (all, more) = merge_pages(vec![(vec![l("a")], false), (vec![], false)], 5);
        assert_eq!(keys(&all), vec![&b"a"[..]]);
        assert!(!more);
    }
}
