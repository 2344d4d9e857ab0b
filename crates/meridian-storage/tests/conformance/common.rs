//! Helpers shared by the suites: byte helpers, engines in temporary directories, and the
//! reference model every engine is compared with.

use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_storage::{Durability, Engine, FjallConfig, FjallEngine, Version, WriteOp};
use std::collections::BTreeMap;
use std::ops::Bound;
use tempfile::TempDir;

/// Bytes from anything byte-like.
pub fn b(s: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(s.as_ref())
}

/// A timestamp.
pub fn ts(t: u64) -> Timestamp {
    Timestamp(t)
}

/// A value version.
pub fn val(t: u64, v: impl AsRef<[u8]>) -> Version {
    Version {
        ts: ts(t),
        value: Some(b(v)),
    }
}

/// A tombstone version.
pub fn tomb(t: u64) -> Version {
    Version {
        ts: ts(t),
        value: None,
    }
}

/// A [`FjallEngine`] in its own temporary directory, which can be closed and reopened.
pub struct FjallHarness {
    dir: TempDir,
    durability: Durability,
    engine: Option<FjallEngine>,
}

impl FjallHarness {
    /// A fresh engine with the given policy.
    pub fn new(durability: Durability) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = Some(open_fjall(dir.path(), durability));
        Self {
            dir,
            durability,
            engine,
        }
    }

    /// The open engine.
    pub fn engine(&self) -> &FjallEngine {
        self.engine.as_ref().expect("engine is open")
    }

    /// Closes the engine (dropping it) and opens it again on the same directory.
    pub fn reopen(&mut self) {
        drop(self.engine.take());
        self.engine = Some(open_fjall(self.dir.path(), self.durability));
    }
}

/// Opens a [`FjallEngine`] on `path`.
pub fn open_fjall(path: &std::path::Path, durability: Durability) -> FjallEngine {
    FjallEngine::open(FjallConfig::new(path, durability)).expect("open fjall engine")
}

/// The reference: every version of every key, never pruned.
pub type Model = BTreeMap<Bytes, BTreeMap<Timestamp, Option<Bytes>>>;

/// Applies one write to the model.
pub fn model_apply(m: &mut Model, op: &WriteOp) {
    let v = op.version();
    m.entry(op.key().clone()).or_default().insert(v.ts, v.value);
}

/// The model's answer to `get(key, at)`.
pub fn model_get(m: &Model, key: &[u8], at: Timestamp) -> Option<Version> {
    let chain = m.get(key)?;
    chain.range(..=at).next_back().map(|(t, v)| Version {
        ts: *t,
        value: v.clone(),
    })
}

/// Whether `k` lies within `(start, end)`.
pub fn in_range(k: &[u8], start: &Bound<Bytes>, end: &Bound<Bytes>) -> bool {
    let above = match start {
        Bound::Included(s) => k >= &s[..],
        Bound::Excluded(s) => k > &s[..],
        Bound::Unbounded => true,
    };
    let below = match end {
        Bound::Included(e) => k <= &e[..],
        Bound::Excluded(e) => k < &e[..],
        Bound::Unbounded => true,
    };
    above && below
}

/// The model's answer to `scan(start, end, at, limit, include_tombstones)`.
pub fn model_scan(
    m: &Model,
    start: &Bound<Bytes>,
    end: &Bound<Bytes>,
    at: Timestamp,
    limit: usize,
    include_tombstones: bool,
) -> Vec<(Bytes, Version)> {
    m.keys()
        .filter(|k| in_range(k, start, end))
        .filter_map(|k| model_get(m, k, at).map(|v| (k.clone(), v)))
        .filter(|(_, v)| include_tombstones || !v.is_tombstone())
        .take(limit)
        .collect()
}

/// Keys whose latest version is a value.
pub fn model_live(m: &Model) -> u64 {
    m.values()
        .filter(|chain| chain.values().next_back().is_some_and(|v| v.is_some()))
        .count() as u64
}

/// Whether `v`, the model's version of some key visible to a read at or above `horizon`, is a
/// tombstone at or below the horizon: garbage collection may have removed it (when it was the
/// key's latest version at the time), and to reads at or above the horizon an absent key and
/// a deleted one are the same.
pub fn is_buried(v: &Version, horizon: Timestamp) -> bool {
    v.is_tombstone() && v.ts <= horizon
}

/// Asserts `got == get(key, at)` of the model, for a read at or above `horizon` (use
/// `Timestamp::MIN` when no horizon was ever set): a buried tombstone may read as absent.
pub fn assert_get(m: &Model, key: &[u8], at: Timestamp, horizon: Timestamp, got: Option<Version>) {
    let want = model_get(m, key, at);
    if got.is_none()
        && let Some(w) = &want
        && is_buried(w, horizon)
    {
        return;
    }
    assert_eq!(got, want, "get({key:?}, {at:?}) with horizon {horizon:?}");
}

/// Asserts `got` is the answer to a scan at or above `horizon` (see [`assert_get`]): buried
/// tombstones may be missing, and then later keys take their places within `limit`.
#[allow(clippy::too_many_arguments)]
pub fn assert_scan(
    m: &Model,
    start: &Bound<Bytes>,
    end: &Bound<Bytes>,
    at: Timestamp,
    limit: usize,
    include_tombstones: bool,
    horizon: Timestamp,
    got: &[(Bytes, Version)],
) {
    let ctx = || {
        format!(
            "scan({start:?}, {end:?}, at {at:?}, limit {limit}, tombstones {include_tombstones}) \
             with horizon {horizon:?}"
        )
    };
    let all = model_scan(m, start, end, at, usize::MAX, include_tombstones);
    let mut want = all.iter().peekable();
    for entry in got {
        // Skip the model's buried tombstones the engine no longer has.
        while let Some(w) = want.peek() {
            if w.0 != entry.0 && is_buried(&w.1, horizon) {
                want.next();
            } else {
                break;
            }
        }
        assert_eq!(Some(entry), want.next(), "{}", ctx());
    }
    if got.len() < limit {
        for rest in want {
            assert!(is_buried(&rest.1, horizon), "{}: missing {rest:?}", ctx());
        }
    }
}

/// A tiny deterministic generator, so the suites need no RNG crate.
pub struct XorShift(u64);

impl XorShift {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// An engine under test that can also be closed and reopened (durable engines only).
pub trait Harness {
    /// The engine.
    fn engine(&self) -> &dyn Engine;
    /// Closes and reopens the engine; false for engines that keep nothing.
    fn reopen(&mut self) -> bool;
    /// Moves what the engine holds in memory to disk, if it has a disk.
    fn to_disk(&self) {}
}

impl Harness for meridian_storage::MemEngine {
    fn engine(&self) -> &dyn Engine {
        self
    }
    fn reopen(&mut self) -> bool {
        false
    }
}

impl Harness for FjallHarness {
    fn engine(&self) -> &dyn Engine {
        FjallHarness::engine(self)
    }
    fn reopen(&mut self) -> bool {
        FjallHarness::reopen(self);
        true
    }
    fn to_disk(&self) {
        FjallHarness::engine(self).flush_memtable().unwrap();
    }
}
