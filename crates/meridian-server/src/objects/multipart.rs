//! Multipart uploads (S3's CreateMultipartUpload, UploadPart, ListParts, Complete, Abort,
//! ListMultipartUploads, and the HTTP API's uploads by byte range): each part is a manifest
//! of its own under `B:\xffmpu/{ID}/NNNNN`, and completion writes one manifest over every
//! part's chunks, the commit point, before the part records go.

use super::*;

/// Part records a finished or aborted upload deletes at once.
pub(super) const FORGET_PARALLEL: usize = 16;

impl Objects {
    /// CreateMultipartUpload: opens an upload of `key`; returns its id.
    pub async fn create_upload(
        &self,
        bucket: &str,
        key: &[u8],
        meta: ObjectMeta,
    ) -> ObjResult<u128> {
        let id = self.new_id();
        let record = UploadRecord {
            key: Bytes::copy_from_slice(key),
            meta,
            created_us: self.now_us(),
        };
        let value = postcard::to_stdvec(&record).unwrap_or_default();
        self.backend
            .set_value(&upload_key(bucket, id), Bytes::from(value))
            .await?;
        Ok(id)
    }

    async fn upload(&self, bucket: &str, key: &[u8], id: u128) -> ObjResult<UploadRecord> {
        let value = self
            .backend
            .get_value(&upload_key(bucket, id))
            .await?
            .ok_or(ObjectError::NoSuchUpload)?;
        let record: UploadRecord =
            postcard::from_bytes(&value).map_err(|_| ObjectError::NoSuchUpload)?;
        if record.key != key {
            return Err(ObjectError::NoSuchUpload);
        }
        Ok(record)
    }

    /// UploadPart: stores part `number` of upload `id`; returns its quoted ETag. S3 numbers
    /// parts 1..=10000 (its front end checks that); the HTTP API's uploads by byte range
    /// number them by chunk ([`Objects::range_part_number`]), up to `u32::MAX`.
    pub async fn upload_part(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        number: u32,
        body: ByteStream,
        content_md5: Option<[u8; 16]>,
    ) -> ObjResult<String> {
        self.upload(bucket, key, id).await?;
        let _permit = self.admit().await?;
        let full = object_key(bucket, key);
        // Each upload of a part has its own chunk version: a part sent twice never mixes.
        let version = self.new_version();
        let md5 = self.cfg.md5_etag || content_md5.is_some();
        let stored = self.store_body(&full, version, 0, 0, md5, body).await?;
        // A part is never inline (not even an empty one): the object is its parts' chunks.
        let stored = Stored {
            inline: None,
            ..stored
        };
        let part = self.manifest_of(version, stored, content_md5, ObjectMeta::default())?;
        self.backend
            .set_value(&part_key(bucket, id, number), part.encode())
            .await?;
        Ok(part.meta.s3_etag)
    }

    async fn part(&self, bucket: &str, id: u128, number: u32) -> ObjResult<Option<Manifest>> {
        match self
            .backend
            .get_value(&part_key(bucket, id, number))
            .await?
        {
            Some(v) => Ok(Manifest::decode(&v)?),
            None => Ok(None),
        }
    }

    /// ListParts: the parts uploaded so far, by number, after `marker`, at most `limit`;
    /// and whether more follow.
    pub async fn list_parts(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        marker: u32,
        limit: usize,
    ) -> ObjResult<(Vec<PartEntry>, bool)> {
        self.upload(bucket, key, id).await?;
        let Some(first) = marker.checked_add(1) else {
            return Ok((Vec::new(), false));
        };
        let start = part_key(bucket, id, first);
        let (entries, more) = self
            .backend
            .list(start, parts_end(bucket, id), limit)
            .await?;
        let prefix_len = upload_key(bucket, id).len() + 1;
        let parts = entries
            .into_iter()
            .filter_map(|l| {
                let number = part_number(&l.key, prefix_len)?;
                Some(PartEntry {
                    number,
                    size: l.size,
                    etag: l.s3_etag.unwrap_or_default(),
                    modified_ms: l.modified_us / 1000,
                })
            })
            .collect();
        Ok((parts, more))
    }

    /// CompleteMultipartUpload: assembles the listed parts (ascending numbers, ETags as
    /// UploadPart returned them) into the object and commits it; the upload's records are
    /// deleted. The object's BLAKE3 is computed by reading the parts back, which also checks
    /// every chunk once more before the object becomes visible.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        parts: &[(u32, String)],
    ) -> ObjResult<Manifest> {
        let record = self.upload(bucket, key, id).await?;
        if parts.is_empty() {
            return Err(ObjectError::InvalidPart("no parts were listed".into()));
        }
        if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(ObjectError::InvalidPartOrder);
        }
        let _permit = self.admit().await?;
        let mut chunks = Vec::new();
        let mut md5s = Vec::with_capacity(parts.len() * 16);
        let mut size = 0u64;
        for (i, (number, etag)) in parts.iter().enumerate() {
            let part = self.part(bucket, id, *number).await?.ok_or_else(|| {
                ObjectError::InvalidPart(format!("part {number} was not uploaded"))
            })?;
            let want = etag.trim_matches('"');
            if part.meta.s3_etag.trim_matches('"') != want {
                return Err(ObjectError::InvalidPart(format!(
                    "part {number}'s ETag is {}, not {etag}",
                    part.meta.s3_etag
                )));
            }
            if i + 1 < parts.len() && part.size < MIN_PART_SIZE {
                return Err(ObjectError::EntityTooSmall {
                    part: *number,
                    size: part.size,
                });
            }
            // S3's multipart ETag is the MD5 of the parts' MD5s; parts uploaded with
            // `blob.md5_etag` off contribute their BLAKE3 instead (the ETag is then no MD5).
            match etag_md5(&part.meta.s3_etag) {
                Some(m) => md5s.extend_from_slice(&m),
                None => md5s.extend_from_slice(&part.digest),
            }
            size += part.size;
            chunks.extend(part.chunks);
        }
        let etag = format!("\"{}-{}\"", hex(&md5(&md5s)), parts.len());
        self.commit_parts(bucket, key, id, record, (chunks, size), Some(etag))
            .await
    }

    /// Commits upload `id` of `key` as its parts' `chunks` (`size` bytes in all), in order,
    /// and deletes the upload's records: what [`Objects::complete_upload`] and
    /// [`Objects::complete_range_upload`] share once they have checked the parts. Every
    /// chunk is read back (checked against its digest) for the object's BLAKE3, and, when
    /// `etag` is `None`, for the S3 ETag a single PUT of the same bytes gets (their MD5
    /// under `blob.md5_etag`, else their BLAKE3); the manifest is written last, the commit
    /// point.
    async fn commit_parts(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        record: UploadRecord,
        (chunks, size): (Vec<ChunkRef>, u64),
        etag: Option<String>,
    ) -> ObjResult<Manifest> {
        if size > self.cfg.max_object {
            return Err(ObjectError::TooLarge {
                max: self.cfg.max_object,
            });
        }
        let mut manifest = Manifest {
            version: id,
            size,
            chunk_size: self.cfg.chunk_size,
            chunks,
            inline: None,
            digest: [0; 32],
            placement: self.cfg.chunk_placement,
            created_us: self.now_us(),
            meta: record.meta,
        };
        // Read every chunk back (checked against its digest) for the object's digests.
        let full = object_key(bucket, key);
        let md5_wanted = etag.is_none() && self.cfg.md5_etag;
        let mut hasher = ParallelHasher::start(ObjectHasher::new(), md5_wanted);
        let mut q = FuturesOrdered::new();
        let mut next = 0usize;
        loop {
            while q.len() < self.cfg.prefetch
                && let Some(&c) = manifest.chunks.get(next)
            {
                let backend = self.backend.clone();
                let full = full.clone();
                let stream = stream_of(ChunkId {
                    version: c.version,
                    index: c.index,
                });
                q.push_back(async move { backend.get_chunk(&full, c, stream).await });
                next += 1;
            }
            match q.next().await {
                Some(b) => hasher.update(b?).await,
                None => break,
            }
        }
        let (blake3, md5) = hasher
            .finish()
            .await
            .ok_or_else(|| ObjectError::Body("a digest thread failed".into()))?;
        manifest.digest = blake3;
        manifest.meta.s3_etag = match (etag, md5) {
            (Some(etag), _) => etag,
            (None, Some(m)) => md5_etag(&m),
            (None, None) => format!("\"{}\"", hex(&blake3)),
        };
        self.backend.set_value(&full, manifest.encode()).await?;
        self.forget_upload(bucket, id).await;
        Ok(manifest)
    }

    /// The part number of the part of an upload by byte range (the HTTP API's resumable
    /// uploads) that starts at byte `offset`, a multiple of the chunk size: its chunk's index
    /// plus one, so that the part records list in byte order and completion knows each
    /// part's place ([`Objects::range_part_offset`]). `None` past what a part number holds.
    pub fn range_part_number(&self, offset: u64) -> Option<u32> {
        let index = offset / u64::from(self.cfg.chunk_size);
        u32::try_from(index).ok()?.checked_add(1)
    }

    /// The first byte of part `number` of an upload by byte range.
    pub fn range_part_offset(&self, number: u32) -> u64 {
        u64::from(number.saturating_sub(1)) * u64::from(self.cfg.chunk_size)
    }

    /// Completes an upload whose parts were sent by byte range: part `n` holds the bytes
    /// from [`Objects::range_part_offset`]`(n)`, and the parts must cover `0..size` exactly,
    /// contiguous and without overlap, all stored with this node's chunk size (else
    /// `InvalidPart` naming the first gap or overlap, and nothing is committed). Unlike S3's
    /// completion no part size is too small and no ETag list is asked for; the object's
    /// ETag is the one a single PUT of the same bytes gets. Commits as
    /// [`Objects::complete_upload`] does (the manifest last, then the records go).
    pub async fn complete_range_upload(
        &self,
        bucket: &str,
        key: &[u8],
        id: u128,
        size: u64,
    ) -> ObjResult<Manifest> {
        let record = self.upload(bucket, key, id).await?;
        if size == 0 {
            return Err(ObjectError::InvalidPart(
                "size is 0: an upload by ranges has at least one part (PUT an empty object \
                 whole)"
                    .into(),
            ));
        }
        if size > self.cfg.max_object {
            return Err(ObjectError::TooLarge {
                max: self.cfg.max_object,
            });
        }
        let _permit = self.admit().await?;
        let cs = self.cfg.chunk_size;
        let prefix_len = upload_key(bucket, id).len() + 1;
        let mut chunks = Vec::new();
        // The end of the bytes the parts so far cover.
        let mut end = 0u64;
        let mut start = part_key(bucket, id, 1);
        loop {
            let (entries, more) = self
                .backend
                .list(start.clone(), parts_end(bucket, id), 1000)
                .await?;
            for l in &entries {
                let Some(number) = part_number(&l.key, prefix_len) else {
                    continue;
                };
                let offset = self.range_part_offset(number);
                let part = self.part(bucket, id, number).await?.ok_or_else(|| {
                    ObjectError::InvalidPart(format!(
                        "the part at byte {offset} went away while completing (a concurrent \
                         abort?)"
                    ))
                })?;
                if part.chunk_size != cs {
                    return Err(ObjectError::InvalidPart(format!(
                        "the part at byte {offset} was stored with chunk size {}, not this \
                         node's {cs}: send it again",
                        part.chunk_size
                    )));
                }
                if offset > end {
                    return Err(ObjectError::InvalidPart(format!(
                        "gap: no part holds bytes {end}-{} (send them, then complete)",
                        offset - 1
                    )));
                }
                if offset < end {
                    return Err(ObjectError::InvalidPart(format!(
                        "overlap: the part at bytes {offset}-{} overlaps the one before it, \
                         which ends at byte {} (send one part per range)",
                        offset.saturating_add(part.size).saturating_sub(1),
                        end - 1
                    )));
                }
                end = offset.saturating_add(part.size);
                if end > size {
                    return Err(ObjectError::InvalidPart(format!(
                        "the part at bytes {offset}-{} reaches past size {size}",
                        end - 1
                    )));
                }
                chunks.extend(part.chunks);
            }
            match entries.last() {
                Some(last) if more => start = key_after(&last.key),
                _ => break,
            }
        }
        if end < size {
            return Err(ObjectError::InvalidPart(format!(
                "gap: no part holds bytes {end}-{} (send them, then complete)",
                size - 1
            )));
        }
        self.commit_parts(bucket, key, id, record, (chunks, size), None)
            .await
    }

    /// AbortMultipartUpload: deletes the upload and its parts' records; their chunks are
    /// garbage.
    pub async fn abort_upload(&self, bucket: &str, key: &[u8], id: u128) -> ObjResult<()> {
        self.upload(bucket, key, id).await?;
        self.forget_upload(bucket, id).await;
        Ok(())
    }

    async fn forget_upload(&self, bucket: &str, id: u128) {
        let _ = self.backend.del(&upload_key(bucket, id)).await;
        let mut marker = 0u32;
        loop {
            let Some(first) = marker.checked_add(1) else {
                return;
            };
            let start = part_key(bucket, id, first);
            let Ok((entries, more)) = self.backend.list(start, parts_end(bucket, id), 1000).await
            else {
                return;
            };
            let prefix_len = upload_key(bucket, id).len() + 1;
            if let Some(n) = entries
                .iter()
                .filter_map(|l| part_number(&l.key, prefix_len))
                .max()
            {
                marker = n;
            }
            // Part records go FORGET_PARALLEL at a time: one round trip each, one after
            // another, made a 128-part upload's completion wait 128 round trips.
            futures_util::stream::iter(&entries)
                .for_each_concurrent(FORGET_PARALLEL, |l| async move {
                    let _ = self.backend.del(&l.key).await;
                })
                .await;
            if !more || entries.is_empty() {
                return;
            }
        }
    }

    /// ListMultipartUploads' scan: the open uploads of `bucket` whose keys start with
    /// `prefix`, after upload `after`, in ascending upload id (the order their records are
    /// stored in), at most `limit`, within `budget`. Part records are passed over, the rest of an upload's parts skipped with a
    /// new listing once a batch reaches them (an upload may have 10 000).
    pub async fn list_uploads(
        &self,
        bucket: &str,
        prefix: &[u8],
        after: Option<u128>,
        limit: usize,
        budget: &mut ListBudget,
    ) -> ObjResult<UploadPage> {
        let base = object_key(bucket, b"").len();
        let (mut start, end) = uploads_range(bucket);
        if let Some(id) = after {
            start = start.max(parts_end(bucket, id));
        }
        let limit = limit.max(1);
        let mut page = UploadPage::default();
        // The last upload id the scan passed (its records are all behind it).
        let mut passed: Option<u128> = None;
        loop {
            // The budget applies once the page has moved on, so that every page does.
            if passed.is_some() && budget.exhausted() {
                page.next = passed;
                return Ok(page);
            }
            let want = limit
                .saturating_sub(page.uploads.len())
                .saturating_add(1)
                .min(1000);
            let want = budget.call(want);
            let (entries, more) = self.backend.list(start.clone(), end.clone(), want).await?;
            for l in &entries {
                let Some((id, is_upload)) = mpu_record(&l.key, base) else {
                    continue;
                };
                if passed == Some(id) {
                    continue;
                }
                if is_upload {
                    if page.uploads.len() >= limit || (passed.is_some() && budget.exhausted()) {
                        page.next = passed;
                        return Ok(page);
                    }
                    budget.read(1);
                    if let Some(v) = self.backend.get_value(&l.key).await?
                        && let Ok(r) = postcard::from_bytes::<UploadRecord>(&v)
                        && r.key.starts_with(prefix)
                    {
                        page.uploads.push((r.key, id, r.created_us / 1000));
                    }
                }
                // A part whose upload record is gone (an abort half done) is passed too.
                passed = Some(id);
            }
            let Some(last) = entries.last() else {
                return Ok(page);
            };
            if !more {
                return Ok(page);
            }
            start = key_after(&last.key);
            if let Some(id) = passed {
                start = start.max(parts_end(bucket, id));
            }
        }
    }

    /// The keys of `bucket` with an open upload, all of them (garbage collection must keep
    /// every version of those).
    pub(super) async fn upload_keys(&self, bucket: &str) -> ObjResult<HashSet<Bytes>> {
        let mut keys = HashSet::new();
        let mut after = None;
        let mut budget = ListBudget::UNLIMITED;
        loop {
            let page = self
                .list_uploads(bucket, b"", after, usize::MAX, &mut budget)
                .await?;
            keys.extend(page.uploads.into_iter().map(|(key, _, _)| key));
            match page.next {
                Some(id) => after = Some(id),
                None => return Ok(keys),
            }
        }
    }
}

/// One page of a bucket's open multipart uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadPage {
    /// (key, upload id, initiated ms), by upload id.
    pub uploads: Vec<(Bytes, u128, u64)>,
    /// When more may follow (the page is truncated): the upload id to go on after.
    pub next: Option<u128>,
}

/// The range of `bucket`'s multipart records: `bucket:0xFF` up to `bucket:0xFF 0xFF`.
pub(super) fn uploads_range(bucket: &str) -> (Bytes, Bytes) {
    let mut start = object_key(bucket, b"").to_vec();
    start.push(0xFF);
    let mut end = start.clone();
    end.push(0xFF);
    (Bytes::from(start), Bytes::from(end))
}

/// The upload id a multipart record names (`base`: the length of its bucket's key prefix),
/// and whether it is the upload's own record (`…mpu/{ID}`), not a part's (`…mpu/{ID}/N`).
pub(super) fn mpu_record(key: &[u8], base: usize) -> Option<(u128, bool)> {
    let rest = key.get(base..)?.strip_prefix(b"\xffmpu/{")?;
    let id = parse_upload_id(std::str::from_utf8(rest.get(..32)?).ok()?)?;
    match rest.get(32..)? {
        b"}" => Some((id, true)),
        tail => tail.starts_with(b"}/").then_some((id, false)),
    }
}
