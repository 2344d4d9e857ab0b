//! The object service's background passes: the rate-limited scrub (every chunk checked
//! against its digest), chunk repair (cluster mode: chunk versions a live manifest
//! references pushed to replicas that lack them), garbage collection of chunk versions no
//! manifest references, and the `BLOB.OPEN` handle table's entry points.

use super::*;

/// The chunk versions one chunk-repair pass looks at.
pub const REPAIR_VERSIONS_PER_PASS: usize = 256;

/// What one chunk-repair pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepairPass {
    /// Chunk versions looked at.
    pub versions: u64,
    /// Of those, how many a live manifest references.
    pub live: u64,
    /// Chunks sent to replicas that lacked them.
    pub sent: u64,
}

/// What one scrub pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrubPass {
    /// Chunks looked at.
    pub chunks: u64,
    /// Bytes read back and verified.
    pub bytes: u64,
    /// Copies that failed their digest (deleted).
    pub corrupt: u64,
    /// Of those, how many were fetched again from healthy replicas.
    pub repaired: u64,
}

/// What one garbage-collection pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcPass {
    /// Versions of chunks looked at.
    pub versions: u64,
    /// Versions deleted.
    pub deleted: u64,
    /// Bytes freed.
    pub bytes_freed: u64,
}

impl Objects {
    pub(super) fn chunk_store(&self) -> Arc<dyn ChunkStore> {
        match &self.backend {
            Backend::Local { chunks, .. } => chunks.clone(),
            Backend::Cluster(c) => c.node.chunk_store(),
        }
    }

    /// The manifests a key holds now (every sibling), as garbage collection sees them.
    async fn key_state(&self, key: &[u8]) -> KeyState {
        match self.manifests_of(key).await {
            Some(manifests) => KeyState::from_manifests(&manifests),
            None => KeyState::Unknown,
        }
    }

    /// The manifests a key holds now (every sibling); `None` when the read fails or a value
    /// does not decode (garbage collection then keeps everything of the key).
    async fn manifests_of(&self, key: &[u8]) -> Option<Vec<Manifest>> {
        let values: Vec<Bytes> = match &self.backend {
            Backend::Local { keyspace, .. } => keyspace.get(key).ok()?.into_iter().collect(),
            Backend::Cluster(c) => {
                use meridian_replication::dispatch::{Read, ReadOpts};
                match c.dispatch.read(key, ReadOpts::Default).await.ok()? {
                    Read::Eventual(meridian_replication::GetResult::Found { values, .. }) => values,
                    Read::Eventual(meridian_replication::GetResult::NotFound { .. }) => Vec::new(),
                    Read::Timeline(r) => r.value().cloned().into_iter().collect(),
                    Read::Transactional { value, .. } => value.into_iter().collect(),
                }
            }
        };
        let mut manifests = Vec::with_capacity(values.len());
        for v in &values {
            if let Some(m) = Manifest::decode(v).ok()? {
                manifests.push(m);
            }
        }
        Some(manifests)
    }

    /// One scrub pass (spec §8): every chunk this node stores is read back and checked
    /// against its digest, at most `blob.scrub_bytes_per_sec`. A corrupt copy is deleted and,
    /// in a cluster, read again through the replicas, whose read repair stores a good copy
    /// here (the digest comes from the key's manifest; a chunk no manifest names yet — an
    /// open upload's — is only deleted, and its upload will fail its completion's check).
    pub async fn scrub(&self) -> ObjResult<ScrubPass> {
        let store = self.chunk_store();
        let versions = on_store(&store, |s| s.versions()).await?;
        let rate = self.cfg.scrub_bytes_per_sec.max(1);
        let started = tokio::time::Instant::now();
        let mut pass = ScrubPass::default();
        for (version, info) in versions {
            let indexes = on_store(&store, move |s| s.indexes(version)).await?;
            for index in indexes {
                let id = ChunkId { version, index };
                pass.chunks += 1;
                match on_store(&store, move |s| s.get(id)).await {
                    Ok(Some(b)) => pass.bytes += b.len() as u64,
                    Ok(None) => {}
                    Err(ObjectError::Blob(BlobError::DigestMismatch { .. })) => {
                        pass.corrupt += 1;
                        tracing::warn!(chunk = ?id, "scrub: a stored chunk failed its digest");
                        on_store(&store, move |s| s.remove(id)).await?;
                        if self.refetch_chunk(&info.key, id).await {
                            pass.repaired += 1;
                        }
                    }
                    Err(e) => return Err(e),
                }
                // Paced: never ahead of `rate` bytes per second since the pass started.
                let due =
                    std::time::Duration::from_micros(pass.bytes.saturating_mul(1_000_000) / rate);
                let elapsed = started.elapsed();
                if due > elapsed {
                    tokio::time::sleep(due - elapsed).await;
                }
            }
        }
        Ok(pass)
    }

    /// One chunk-repair pass (spec §9, anti-entropy on the chunk path), in cluster mode: the
    /// next [`REPAIR_VERSIONS_PER_PASS`] chunk versions this node stores (in version order,
    /// from where the last pass stopped, wrapping around), and for each one its key's live
    /// manifests reference, every other replica of its chunks' home keys is sent the chunks
    /// it lacks (`EventualNode::repair_chunk_version`). Versions no manifest references —
    /// replaced, deleted, or never committed — are left to garbage collection, so a pass
    /// never brings back chunks a replica has collected.
    pub async fn repair_chunks(&self) -> ObjResult<RepairPass> {
        let Backend::Cluster(c) = &self.backend else {
            return Ok(RepairPass::default());
        };
        let store = self.chunk_store();
        let mut versions = on_store(&store, |s| s.versions()).await?;
        versions.sort_unstable_by_key(|(v, _)| *v);
        let after = *self.repair_cursor.lock();
        let start = versions.partition_point(|(v, _)| *v <= after);
        let round: Vec<(u128, VersionInfo)> = versions[start..]
            .iter()
            .chain(&versions[..start])
            .take(REPAIR_VERSIONS_PER_PASS)
            .cloned()
            .collect();
        let mut pass = RepairPass::default();
        for (version, info) in round {
            *self.repair_cursor.lock() = version;
            pass.versions += 1;
            let Some(manifests) = self.manifests_of(&info.key).await else {
                continue;
            };
            if !manifests
                .iter()
                .any(|m| m.chunks.iter().any(|r| r.version == version))
            {
                continue;
            }
            pass.live += 1;
            pass.sent += c.node.repair_chunk_version(&info.key, version).await? as u64;
        }
        Ok(pass)
    }

    /// Runs [`Objects::repair_chunks`] every `blob.chunk_repair_interval_ms` until `stop`.
    pub async fn run_chunk_repair(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = self.cfg.chunk_repair_interval_ms;
        every(
            period,
            stop,
            "chunk repair pass",
            || self.repair_chunks(),
            |p| {
                if p.sent > 0 {
                    tracing::info!(chunks = p.sent, "chunk repair sent missing chunks");
                }
            },
        )
        .await;
    }

    /// Reads chunk `id` of `key`'s object through its replicas (so the read's repair puts a
    /// good copy back on this node); whether it was found.
    async fn refetch_chunk(&self, key: &Bytes, id: ChunkId) -> bool {
        let Backend::Cluster(c) = &self.backend else {
            return false;
        };
        let Some(manifests) = self.manifests_of(key).await else {
            return false;
        };
        let Some(chunk) = manifests
            .iter()
            .flat_map(|m| m.chunks.iter())
            .find(|c| c.version == id.version && c.index == id.index)
        else {
            return false;
        };
        c.node
            .blob_get_chunk(key, id, chunk.digest, 0)
            .await
            .is_ok()
    }

    /// Every second until `stop`: frees upload buffers that went unused for a second, and
    /// closes handles idle or old past their limits.
    pub async fn run_housekeeping(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {
                    self.buffers.trim();
                    let now = self.now_us();
                    self.handles.lock().expire(now);
                }
            }
        }
    }

    /// `BLOB.OPEN`: a new handle on `pinned`, what `key` (the RESP key) holds now.
    pub fn open_handle(&self, key: &[u8], pinned: Pinned) -> Result<u64, HandleFault> {
        let version = match &pinned {
            Pinned::Chunked(m) => m.version,
            Pinned::Bytes(_) => 0,
        };
        let now = self.now_us();
        let mut table = self.handles.lock();
        // Ids are drawn at random (63 bits: a RESP integer), so one client cannot walk
        // another's handles by counting.
        let id = loop {
            let id = (self.new_id() as u64) & (i64::MAX as u64);
            if id != 0 && !table.contains(id) {
                break id;
            }
        };
        table.open(id, Bytes::copy_from_slice(key), version, pinned, now)?;
        Ok(id)
    }

    /// What handle `id` of `key` reads (a use: it stays open another `handle_idle_ms`).
    pub fn handle(&self, key: &[u8], id: u64) -> Result<Pinned, HandleFault> {
        let now = self.now_us();
        self.handles.lock().get(key, id, now)
    }

    /// `BLOB.CLOSE`: whether handle `id` of `key` was open.
    pub fn close_handle(&self, key: &[u8], id: u64) -> bool {
        self.handles.lock().close(key, id)
    }

    /// Handles open now and bytes they pin.
    pub fn handle_usage(&self) -> (usize, u64) {
        let t = self.handles.lock();
        (t.len(), t.pinned_bytes())
    }

    /// Runs [`Objects::scrub`] every `blob.scrub_interval_ms` until `stop`.
    pub async fn run_scrub(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = self.cfg.scrub_interval_ms;
        every(
            period,
            stop,
            "scrub pass",
            || self.scrub(),
            |p| {
                tracing::info!(
                    chunks = p.chunks,
                    corrupt = p.corrupt,
                    repaired = p.repaired,
                    "scrub pass done"
                );
            },
        )
        .await;
    }

    /// One pass of chunk garbage collection on this node: every stored version old enough
    /// to be garbage is checked against its key's manifests (and the key's open multipart
    /// uploads, which keep all its unreferenced versions), and deleted when the rules of
    /// `meridian_blob::gc` say so.
    pub async fn collect_garbage(&self) -> ObjResult<GcPass> {
        let store = self.chunk_store();
        let versions = on_store(&store, |s| s.versions()).await?;
        let cfg = GcConfig {
            version_grace_us: self.cfg.version_grace_ms * 1000,
            orphan_ttl_us: self.cfg.orphan_ttl_ms * 1000,
        };
        let now = self.now_us();
        let mut pass = GcPass::default();
        // The keys with open uploads, by bucket: listed once a pass, when a bucket's first
        // deletion is due (`None`: the listing failed, and the bucket's versions are kept).
        // Every version was stored before the listing (`versions` was read first), so an
        // upload a version belongs to was created before it too.
        let mut uploads: HashMap<Bytes, Option<HashSet<Bytes>>> = HashMap::new();
        for (version, info) in versions {
            pass.versions += 1;
            if now.saturating_sub(info.created_us) < cfg.version_grace_us {
                continue;
            }
            let state = self.key_state(&info.key).await;
            // An open upload keeps the version, so the uploads are only read for a deletion.
            if decide(&cfg, version, info.created_us, &state, false, now) != GcDecision::Delete {
                continue;
            }
            let (bucket, key) = meridian_cluster::bucket_and_key(&info.key);
            // No upload is ever opened in a bucket whose name is not UTF-8.
            let upload_open = match std::str::from_utf8(bucket) {
                Err(_) => false,
                Ok(name) => {
                    let open = match uploads.entry(Bytes::copy_from_slice(bucket)) {
                        Entry::Occupied(o) => o.into_mut(),
                        Entry::Vacant(v) => v.insert(self.upload_keys(name).await.ok()),
                    };
                    open.as_ref().is_none_or(|keys| keys.contains(key))
                }
            };
            if !upload_open {
                pass.bytes_freed += on_store(&store, move |s| s.delete_version(version)).await?;
                pass.deleted += 1;
                self.gc_deleted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(pass)
    }

    /// Runs [`Objects::collect_garbage`] every `blob.gc_interval_ms` until `stop`.
    pub async fn run_gc(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let period = self.cfg.gc_interval_ms;
        every(
            period,
            stop,
            "chunk garbage collection",
            || self.collect_garbage(),
            |p| {
                if p.deleted > 0 {
                    tracing::info!(
                        deleted = p.deleted,
                        bytes = p.bytes_freed,
                        "chunk garbage collected"
                    );
                }
            },
        )
        .await;
    }
}

/// Runs `pass` every `period_ms` until `stop`, the first time one period after the start (a
/// pass that overruns delays the next rather than bunching them); `done` reports a pass that
/// succeeded, a failure is logged as `what` and retried at the next tick. `stop` also ends a
/// pass under way: a pass deletes only what it has found garbage or corrupt, one item at a
/// time, so a pass cut short leaves nothing half done (the next one goes on).
pub(super) async fn every<T, F: Future<Output = ObjResult<T>>>(
    period_ms: u64,
    stop: tokio_util::sync::CancellationToken,
    what: &'static str,
    mut pass: impl FnMut() -> F,
    mut done: impl FnMut(T),
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(period_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => tokio::select! {
                _ = stop.cancelled() => return,
                r = pass() => r,
            },
        };
        match outcome {
            Ok(p) => done(p),
            Err(e) => tracing::warn!(error = %e, "{what} failed; will retry"),
        }
    }
}
