//! Where a node keeps chunks. A chunk is immutable: it is stored once under its [`ChunkId`]
//! (the upload that wrote it and its index there) with its xxh3-128 digest, checked before it
//! is stored and again whenever it is read, so a bit flipped at rest is a
//! [`BlobError::DigestMismatch`], never wrong bytes.
//!
//! Every version also records which key it belongs to and when it was first written
//! ([`VersionInfo`]): garbage collection asks that key's manifest whether the version is still
//! referenced.
//!
//! - [`MemChunkStore`]: in memory (the nodes of an embedded or simulated cluster).
//! - [`FileChunkStore`]: one file per chunk under `DIR/<version>/<index>`, holding the digest
//!   then the bytes, written to a temporary name and renamed (a crash leaves a whole chunk or
//!   none), fsynced when asked; a plain file so the TCP path can `sendfile(2)` it.
//!
//! The trait is synchronous: the memory store never blocks, and callers run a store that
//! [`ChunkStore::blocks`] on tokio's blocking pool.

use crate::digest::{ChunkDigest, chunk_digest};
use crate::error::{BlobError, Result};
use bytes::Bytes;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A chunk's name: the upload (object version or multipart upload) that wrote it, and its
/// index there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkId {
    /// The upload's id.
    pub version: u128,
    /// The chunk's index within the upload.
    pub index: u32,
}

/// Which key a stored version belongs to, and when this node first stored one of its chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// The object's full key (`bucket:key`).
    pub key: Bytes,
    /// µs of the storing node's clock.
    pub created_us: u64,
}

/// A node's chunks.
pub trait ChunkStore: Send + Sync + 'static {
    /// Stores a chunk after checking `bytes` against `digest` (a mismatch stores nothing). The
    /// first chunk of a version records `info`. Storing a chunk that is already there is a
    /// no-op.
    fn put(&self, id: ChunkId, bytes: &[u8], digest: ChunkDigest, info: &VersionInfo)
    -> Result<()>;
    /// A chunk's bytes, checked against the digest stored with them.
    fn get(&self, id: ChunkId) -> Result<Option<Bytes>>;
    /// The indexes stored for a version, ascending (what a resumed upload need not resend).
    fn indexes(&self, version: u128) -> Result<Vec<u32>>;
    /// Every stored version and what it belongs to.
    fn versions(&self) -> Result<Vec<(u128, VersionInfo)>>;
    /// Deletes one chunk (a copy that failed its digest, before a healthy replica's copy
    /// replaces it); returns whether it was there.
    fn remove(&self, id: ChunkId) -> Result<bool>;
    /// Deletes a version's chunks and record; returns the bytes freed.
    fn delete_version(&self, version: u128) -> Result<u64>;
    /// Flips bit `bit` (modulo the chunk's length) of a stored chunk, leaving its digest:
    /// fault injection for corruption tests and the scrub. False if the chunk is absent.
    fn flip_bit(&self, id: ChunkId, bit: usize) -> Result<bool>;
    /// The file holding a chunk, as (path, offset of the bytes), for `sendfile(2)`.
    fn file(&self, id: ChunkId) -> Option<(PathBuf, u64)>;
    /// Bytes of chunk data stored.
    fn stored_bytes(&self) -> u64;
    /// Whether calls block on disk (run them with `spawn_blocking`).
    fn blocks(&self) -> bool;
}

/// Runs a chunk-store call from async code: on the blocking pool when the store touches the
/// disk ([`ChunkStore::blocks`]), inline otherwise.
pub async fn on_store<T: Send + 'static>(
    store: &Arc<dyn ChunkStore>,
    f: impl FnOnce(&dyn ChunkStore) -> Result<T> + Send + 'static,
) -> Result<T> {
    if store.blocks() {
        let s = store.clone();
        crate::blocking::run(move || f(s.as_ref()))
            .await
            .map_err(|e| BlobError::Io(std::io::Error::other(format!("chunk store task: {e}"))))?
    } else {
        f(store.as_ref())
    }
}

fn check(id: ChunkId, bytes: &[u8], digest: ChunkDigest) -> Result<()> {
    if chunk_digest(bytes) == digest {
        Ok(())
    } else {
        Err(BlobError::DigestMismatch {
            version: id.version,
            index: id.index,
        })
    }
}

#[derive(Default)]
struct MemVersion {
    info: Option<VersionInfo>,
    chunks: BTreeMap<u32, (Bytes, ChunkDigest)>,
}

/// Chunks in memory.
#[derive(Default)]
pub struct MemChunkStore {
    versions: Mutex<HashMap<u128, MemVersion>>,
    bytes: AtomicU64,
}

impl MemChunkStore {
    /// An empty store.
    pub fn new() -> MemChunkStore {
        MemChunkStore::default()
    }
}

impl ChunkStore for MemChunkStore {
    fn put(
        &self,
        id: ChunkId,
        bytes: &[u8],
        digest: ChunkDigest,
        info: &VersionInfo,
    ) -> Result<()> {
        check(id, bytes, digest)?;
        let mut versions = self.versions.lock();
        let v = versions.entry(id.version).or_default();
        if v.info.is_none() {
            v.info = Some(info.clone());
        }
        match v.chunks.entry(id.index) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert((Bytes::copy_from_slice(bytes), digest));
                self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            }
            // A good copy stays; a damaged one (a repair's target) is replaced.
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let (stored, stored_digest) = e.get();
                if chunk_digest(stored) != *stored_digest {
                    e.insert((Bytes::copy_from_slice(bytes), digest));
                }
            }
        }
        Ok(())
    }

    fn get(&self, id: ChunkId) -> Result<Option<Bytes>> {
        let found = self
            .versions
            .lock()
            .get(&id.version)
            .and_then(|v| v.chunks.get(&id.index).cloned());
        match found {
            Some((bytes, digest)) => check(id, &bytes, digest).map(|()| Some(bytes)),
            None => Ok(None),
        }
    }

    fn indexes(&self, version: u128) -> Result<Vec<u32>> {
        Ok(self
            .versions
            .lock()
            .get(&version)
            .map(|v| v.chunks.keys().copied().collect())
            .unwrap_or_default())
    }

    fn versions(&self) -> Result<Vec<(u128, VersionInfo)>> {
        let versions = self.versions.lock();
        let mut out: Vec<(u128, VersionInfo)> = versions
            .iter()
            .filter_map(|(v, e)| e.info.clone().map(|i| (*v, i)))
            .collect();
        out.sort_by_key(|(v, _)| *v);
        Ok(out)
    }

    fn remove(&self, id: ChunkId) -> Result<bool> {
        let removed = self
            .versions
            .lock()
            .get_mut(&id.version)
            .and_then(|v| v.chunks.remove(&id.index));
        if let Some((b, _)) = &removed {
            self.bytes.fetch_sub(b.len() as u64, Ordering::Relaxed);
        }
        Ok(removed.is_some())
    }

    fn delete_version(&self, version: u128) -> Result<u64> {
        let freed = self
            .versions
            .lock()
            .remove(&version)
            .map(|v| v.chunks.values().map(|(b, _)| b.len() as u64).sum())
            .unwrap_or(0);
        self.bytes.fetch_sub(freed, Ordering::Relaxed);
        Ok(freed)
    }

    fn flip_bit(&self, id: ChunkId, bit: usize) -> Result<bool> {
        let mut versions = self.versions.lock();
        let Some((bytes, _)) = versions
            .get_mut(&id.version)
            .and_then(|v| v.chunks.get_mut(&id.index))
        else {
            return Ok(false);
        };
        let mut data = bytes.to_vec();
        let at = bit / 8 % data.len().max(1);
        let Some(byte) = data.get_mut(at) else {
            return Ok(false);
        };
        *byte ^= 1 << (bit % 8);
        *bytes = Bytes::from(data);
        Ok(true)
    }

    fn file(&self, _id: ChunkId) -> Option<(PathBuf, u64)> {
        None
    }

    fn stored_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn blocks(&self) -> bool {
        false
    }
}

/// The name of a version's directory.
fn version_dir(root: &Path, version: u128) -> PathBuf {
    root.join(format!("{version:032x}"))
}

const INFO_FILE: &str = "version";
const DIGEST_LEN: u64 = 16;

/// Chunks as files: `DIR/<version hex>/<index hex>` = digest ‖ bytes, and
/// `DIR/<version hex>/version` = the [`VersionInfo`].
pub struct FileChunkStore {
    root: PathBuf,
    fsync: bool,
    bytes: AtomicU64,
    /// Numbers temporary files, so concurrent writers never share one.
    next_tmp: AtomicU64,
}

impl FileChunkStore {
    /// Opens (creating) a store under `root`, removing temporary files a crash left and
    /// counting the bytes stored. With `fsync`, a chunk is on disk before `put` returns.
    pub fn open(root: impl Into<PathBuf>, fsync: bool) -> Result<FileChunkStore> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        let mut bytes = 0u64;
        for dir in std::fs::read_dir(&root)? {
            let dir = dir?;
            if !dir.file_type()?.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(dir.path())? {
                let f = f?;
                let name = f.file_name();
                let name = name.to_string_lossy();
                if name.ends_with(".tmp") {
                    std::fs::remove_file(f.path())?;
                } else if name != INFO_FILE {
                    bytes += f.metadata()?.len().saturating_sub(DIGEST_LEN);
                }
            }
        }
        Ok(FileChunkStore {
            root,
            fsync,
            bytes: AtomicU64::new(bytes),
            next_tmp: AtomicU64::new(0),
        })
    }

    fn chunk_path(&self, id: ChunkId) -> PathBuf {
        version_dir(&self.root, id.version).join(format!("{:08x}", id.index))
    }

    /// Writes `path` through a temporary file of this writer's own and a rename, so a
    /// reader sees the old file or the whole new one, and concurrent writers of one path
    /// (two chunks of a version both recording it, a repair racing a handoff) never clash.
    fn write_atomically(&self, path: &Path, parts: &[&[u8]]) -> Result<()> {
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".{n}.tmp"));
        let tmp = path.with_file_name(name);
        let mut f = std::fs::File::create(&tmp)?;
        for p in parts {
            f.write_all(p)?;
        }
        if self.fsync {
            f.sync_all()?;
        }
        drop(f);
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        if self.fsync {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

impl ChunkStore for FileChunkStore {
    fn put(
        &self,
        id: ChunkId,
        bytes: &[u8],
        digest: ChunkDigest,
        info: &VersionInfo,
    ) -> Result<()> {
        check(id, bytes, digest)?;
        let dir = version_dir(&self.root, id.version);
        let path = self.chunk_path(id);
        // A good copy stays; a damaged one (a repair's target) is replaced.
        let replacing = match self.get(id) {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => false,
            Err(BlobError::DigestMismatch { .. }) => true,
            Err(e) => return Err(e),
        };
        let info_path = dir.join(INFO_FILE);
        if !info_path.exists() {
            std::fs::create_dir_all(&dir)?;
            self.sync_dir(&self.root)?;
            let encoded = postcard::to_stdvec(info).unwrap_or_default();
            self.write_atomically(&info_path, &[&encoded])?;
        }
        self.write_atomically(&path, &[&digest, bytes])?;
        self.sync_dir(&dir)?;
        if !replacing {
            self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn get(&self, id: ChunkId) -> Result<Option<Bytes>> {
        let data = match std::fs::read(self.chunk_path(id)) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Some((digest, body)) = data.split_first_chunk::<16>() else {
            return Err(BlobError::DigestMismatch {
                version: id.version,
                index: id.index,
            });
        };
        check(id, body, *digest)?;
        let mut bytes = Bytes::from(data);
        Ok(Some(bytes.split_off(DIGEST_LEN as usize)))
    }

    fn indexes(&self, version: u128) -> Result<Vec<u32>> {
        let dir = version_dir(&self.root, version);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for e in entries {
            let name = e?.file_name();
            if let Some(i) = name.to_str().and_then(|n| u32::from_str_radix(n, 16).ok()) {
                out.push(i);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn versions(&self) -> Result<Vec<(u128, VersionInfo)>> {
        let mut out = Vec::new();
        for dir in std::fs::read_dir(&self.root)? {
            let dir = dir?;
            let Some(version) = dir
                .file_name()
                .to_str()
                .and_then(|n| u128::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            match std::fs::read(dir.path().join(INFO_FILE)) {
                Ok(raw) => {
                    if let Ok(info) = postcard::from_bytes::<VersionInfo>(&raw) {
                        out.push((version, info));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        out.sort_by_key(|(v, _)| *v);
        Ok(out)
    }

    fn remove(&self, id: ChunkId) -> Result<bool> {
        let path = self.chunk_path(id);
        let len = match std::fs::metadata(&path) {
            Ok(m) => m.len().saturating_sub(DIGEST_LEN),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        std::fs::remove_file(&path)?;
        self.bytes
            .fetch_sub(len.min(self.stored_bytes()), Ordering::Relaxed);
        Ok(true)
    }

    fn delete_version(&self, version: u128) -> Result<u64> {
        let dir = version_dir(&self.root, version);
        let mut freed = 0u64;
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        for e in entries {
            let e = e?;
            if e.file_name() != INFO_FILE {
                freed += e.metadata()?.len().saturating_sub(DIGEST_LEN);
            }
        }
        std::fs::remove_dir_all(&dir)?;
        self.bytes
            .fetch_sub(freed.min(self.stored_bytes()), Ordering::Relaxed);
        Ok(freed)
    }

    fn flip_bit(&self, id: ChunkId, bit: usize) -> Result<bool> {
        let path = self.chunk_path(id);
        let mut raw = match std::fs::read(&path) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let body = raw.len().saturating_sub(DIGEST_LEN as usize);
        if body == 0 {
            return Ok(false);
        }
        let at = DIGEST_LEN as usize + bit / 8 % body;
        raw[at] ^= 1 << (bit % 8);
        self.write_atomically(&path, &[&raw])?;
        Ok(true)
    }

    fn file(&self, id: ChunkId) -> Option<(PathBuf, u64)> {
        let path = self.chunk_path(id);
        path.exists().then_some((path, DIGEST_LEN))
    }

    fn stored_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn blocks(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> VersionInfo {
        VersionInfo {
            key: Bytes::from_static(b"b:k"),
            created_us: 9,
        }
    }

    fn conformance(store: &dyn ChunkStore) {
        let id = ChunkId {
            version: 0xabc,
            index: 3,
        };
        let data = b"some chunk bytes";
        assert!(
            store
                .put(id, data, chunk_digest(b"other"), &info())
                .is_err()
        );
        assert_eq!(store.get(id).unwrap(), None);
        store.put(id, data, chunk_digest(data), &info()).unwrap();
        store.put(id, data, chunk_digest(data), &info()).unwrap();
        let id0 = ChunkId {
            version: 0xabc,
            index: 0,
        };
        store.put(id0, b"x", chunk_digest(b"x"), &info()).unwrap();
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
        assert_eq!(store.indexes(0xabc).unwrap(), vec![0, 3]);
        assert_eq!(store.versions().unwrap(), vec![(0xabc, info())]);
        assert_eq!(store.stored_bytes(), data.len() as u64 + 1);
        assert!(store.remove(id0).unwrap());
        assert!(!store.remove(id0).unwrap());
        store.put(id0, b"x", chunk_digest(b"x"), &info()).unwrap();
        assert_eq!(store.delete_version(0xabc).unwrap(), data.len() as u64 + 1);
        assert_eq!(store.get(id).unwrap(), None);
        assert!(store.versions().unwrap().is_empty());
        assert_eq!(store.stored_bytes(), 0);
        // A put over a damaged copy (a repair) replaces it; over a good one it changes nothing.
        store.put(id, data, chunk_digest(data), &info()).unwrap();
        assert!(store.flip_bit(id, 5).unwrap());
        assert!(store.get(id).is_err());
        store.put(id, data, chunk_digest(data), &info()).unwrap();
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&data[..]));
        assert_eq!(store.stored_bytes(), data.len() as u64);
        assert_eq!(store.delete_version(0xabc).unwrap(), data.len() as u64);
    }

    #[test]
    fn memory_store_conforms_and_detects_flips() {
        let store = MemChunkStore::new();
        conformance(&store);
        let id = ChunkId {
            version: 1,
            index: 0,
        };
        store
            .put(id, b"abcd", chunk_digest(b"abcd"), &info())
            .unwrap();
        assert!(store.flip_bit(id, 9).unwrap());
        assert!(matches!(
            store.get(id),
            Err(BlobError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn concurrent_puts_of_one_version_all_land() {
        // Every chunk of an upload is in flight at once: they all record the version.
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileChunkStore::open(dir.path(), false).unwrap());
        for version in 0..20u128 {
            let threads: Vec<_> = (0..8u32)
                .map(|index| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        let bytes = vec![index as u8; 1000];
                        let id = ChunkId { version, index };
                        store.put(id, &bytes, chunk_digest(&bytes), &info())
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap().unwrap();
            }
            assert_eq!(store.indexes(version).unwrap(), (0..8).collect::<Vec<_>>());
        }
        assert_eq!(store.versions().unwrap().len(), 20);
    }

    #[test]
    fn file_store_conforms_survives_reopen_and_detects_flips() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileChunkStore::open(dir.path(), true).unwrap();
        conformance(&store);
        let id = ChunkId {
            version: 2,
            index: 1,
        };
        store
            .put(id, b"abcd", chunk_digest(b"abcd"), &info())
            .unwrap();
        drop(store);
        let store = FileChunkStore::open(dir.path(), false).unwrap();
        assert_eq!(store.stored_bytes(), 4);
        assert_eq!(store.get(id).unwrap().as_deref(), Some(&b"abcd"[..]));
        let (path, offset) = store.file(id).unwrap();
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(&raw[offset as usize..], b"abcd");
        assert!(store.flip_bit(id, 3).unwrap());
        assert!(matches!(
            store.get(id),
            Err(BlobError::DigestMismatch { .. })
        ));
    }
}
