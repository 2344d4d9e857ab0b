//! [`View`]: what every data type's commands need from a backend, for the keys one command
//! (or one EXEC) runs over — the command's time, each key's live typed value, and a way to
//! store or delete it. A backend makes the view atomic (a locked stripe, an overlay that
//! becomes one write batch, a record's master, a one-key transaction); the commands written
//! over it never know which.
//!
//! Every stored value is an envelope `[flags][expiry µs BE if flagged][data]`
//! (`meridian_core::envelope`'s [`Entry`]) carrying its Redis type, so a TTL replicates with
//! its value and a type check is one byte comparison.
//!
//! A view's `now` must not move during one command (Redis decides expiry at one time per
//! command; a whole EXEC uses one time too).

use crate::collection::Collection;
use crate::error::{RedisError, Result};
use bytes::Bytes;
use meridian_core::Timestamp;
pub use meridian_core::envelope::{Entry, Kind};
use meridian_storage::Version;

/// Redis's `proto-max-bulk-len`, the default longest value.
const DEFAULT_MAX_VALUE_LEN: usize = 512 * 1024 * 1024;

/// Where a stream's nodes close (`crate::streams`), from Redis's `stream-node-max-entries`
/// and `stream-node-max-bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    /// Entries per node (0: no limit).
    pub entries: u64,
    /// Estimated bytes per node (0: Redis's 1 GiB listpack cap).
    pub bytes: u64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        Self {
            entries: 100,
            bytes: 4096,
        }
    }
}

/// A value to store, borrowed: SET stores the request's bytes without an intermediate copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// The value ([`meridian_core::hash::encode`]'s field list for a hash).
    pub data: &'a [u8],
    /// When it expires (always after the view's `now`: the functions here delete instead).
    pub expiry: Option<u64>,
    /// Its Redis type: a view must store it with the value (`Entry::kind`), or a hash's TTL
    /// change (EXPIRE, PERSIST) would turn it into a string.
    pub kind: Kind,
}

impl<'a> EntryRef<'a> {
    /// A string value.
    #[inline]
    pub fn string(data: &'a [u8], expiry: Option<u64>) -> Self {
        Self {
            data,
            expiry,
            kind: Kind::String,
        }
    }

    /// The owned entry (a copy of the data): what a buffering view keeps.
    pub fn to_entry(self) -> Entry {
        Entry {
            data: Bytes::copy_from_slice(self.data),
            expiry: self.expiry,
            kind: self.kind,
        }
    }
}

/// What a command sees of the keys it runs over. See the module docs.
pub trait View {
    /// The command's time: expiry decisions and relative TTLs are taken against it.
    fn now(&self) -> Timestamp;
    /// The live value of `key`: `None` if absent or expired at [`View::now`].
    fn load(&mut self, key: &[u8]) -> Result<Option<Entry>>;
    /// Stores `value` as `key`'s value, or deletes `key` (`None`).
    fn store(&mut self, key: &[u8], value: Option<EntryRef<'_>>) -> Result<()>;
    /// The longest value APPEND, SETRANGE, INCRBYFLOAT may produce.
    fn max_value_len(&self) -> usize {
        DEFAULT_MAX_VALUE_LEN
    }
    /// Where a stream's nodes close (Redis's `stream-node-max-entries` and
    /// `stream-node-max-bytes`), which decides what approximate trimming removes.
    fn stream_node_limits(&self) -> NodeLimits {
        NodeLimits::default()
    }
    /// Records a read that found (`hit`) or missed its key, for INFO's keyspace_hits/misses.
    fn count_read(&mut self, _key: &[u8], _hit: bool) {}

    /// The type and expiry of `key`'s live value, its data left out: what [`View::load`]
    /// would answer otherwise (an expired key is absent). TYPE, EXISTS, TTL and EXPIRE need
    /// no more, and a view that keeps collections in memory answers without materializing.
    fn header(&mut self, key: &[u8]) -> Result<Option<(Kind, Option<u64>)>> {
        Ok(self.load(key)?.map(|e| (e.kind, e.expiry)))
    }

    /// Sets the expiry of `key`'s live value (after [`View::now`], or none), keeping its data
    /// and type (EXPIRE, PERSIST). Does nothing when the key is absent.
    fn retime(&mut self, key: &[u8], expiry: Option<u64>) -> Result<()> {
        retime_stored(self, key, expiry)
    }

    /// The live collection at `key` and its expiry, if this view keeps it in memory as an
    /// object ([`crate::collection`]): `None` when the key is absent, expired, or held as
    /// bytes (then [`View::load`] has it). Views that keep no objects answer `None`.
    fn object_mut(&mut self, _key: &[u8]) -> Result<Option<(&mut dyn Collection, Option<u64>)>> {
        Ok(None)
    }

    /// Records that a command changed the object [`View::object_mut`] returned for `key`
    /// (a write for WATCH, blocked clients and memory), deleting the key if the collection
    /// is now empty.
    fn object_changed(&mut self, _key: &[u8]) -> Result<()> {
        Ok(())
    }

    /// Stores `obj` with `expiry` as `key`'s value, kept in memory, replacing what the key
    /// held; `obj` is never empty. A view that keeps no objects hands it back
    /// (`Some(obj)`), and the caller stores its encoding with [`View::store`].
    fn store_object(
        &mut self,
        _key: &[u8],
        obj: Box<dyn Collection>,
        _expiry: Option<u64>,
    ) -> Result<Option<Box<dyn Collection>>> {
        Ok(Some(obj))
    }
}

/// [`View::retime`] by storing the key's value again with `expiry`: what a view does for a
/// value it does not hold in memory.
pub fn retime_stored<V: View + ?Sized>(v: &mut V, key: &[u8], expiry: Option<u64>) -> Result<()> {
    match v.load(key)? {
        None => Ok(()),
        Some(e) => v.store(
            key,
            Some(EntryRef {
                data: &e.data,
                expiry,
                kind: e.kind,
            }),
        ),
    }
}

// ----- the envelope ----------------------------------------------------------------------

/// Decodes an envelope in place (no copy of the data).
pub fn decode(raw: Bytes) -> Result<Entry> {
    Entry::decode(raw).map_err(|e| RedisError::Corrupt(e.0))
}

/// Decodes an engine version: a tombstone or no version is `None`.
pub fn decode_version(v: Option<Version>) -> Result<Option<Entry>> {
    match v {
        Some(Version {
            value: Some(raw), ..
        }) => decode(raw).map(Some),
        _ => Ok(None),
    }
}
