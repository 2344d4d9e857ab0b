//! The eventual protocol's request and result types, shared by its coordinator and its wire
//! messages (a forwarded write carries [`PutOptions`] and answers a [`PutResult`]), so the
//! messages do not depend on the coordinator.

use bytes::Bytes;
use meridian_cluster::Props;
use serde::{Deserialize, Serialize};

/// Per-request overrides of a GET.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetOptions {
    /// Overrides of the bucket's parameters (`r`, `pr`, `notfound_ok`, `basic_quorum`,
    /// `timeout_ms`, ...); unset fields use the bucket's.
    pub props: Props,
    /// Reply a tombstone's context instead of a bare notfound (Riak's `deletedvclock`).
    pub deleted_context: bool,
}

/// Per-request overrides of a PUT or DELETE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutOptions {
    /// Overrides of the bucket's parameters (`w`, `dw`, `pw`, `node_confirms`,
    /// `dc_confirms`, `timeout_ms`, ...); unset fields use the bucket's.
    pub props: Props,
    /// Return the coordinator's values after the write.
    pub return_body: bool,
    /// Ignore the request's context and supersede every value the coordinating replica holds
    /// for the key, taking its own stored clock as the context under the key's lock (a Redis
    /// `SET`: no quorum read first). Values the coordinator has not seen yet stay siblings,
    /// as they would after a read that missed them.
    pub supersede_local: bool,
    /// An increment of the key's PN-counter (`counter`) by this much: the coordinating
    /// replica ignores the request's value and context and writes its counter's next state,
    /// computed under the key's lock from what it holds. Needs `allow_mult`.
    pub counter_add: Option<i64>,
}

/// The answer to a GET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetResult {
    /// The key has values: one, or several concurrent siblings (in dot order).
    Found {
        /// The live values.
        values: Vec<Bytes>,
        /// The opaque causal context to send back with the next write.
        context: Bytes,
        /// Index in `values` of the sibling with the greatest `(meta.ts_us, dot)`: the one
        /// last-writer-wins would keep (front ends that must show one value show it).
        latest: usize,
    },
    /// No value: never written, or deleted.
    NotFound {
        /// The tombstone's context, when the key was deleted and the request asked for it.
        deleted_context: Option<Bytes>,
    },
}

impl GetResult {
    /// The values (empty for notfound).
    pub fn values(&self) -> &[Bytes] {
        match self {
            GetResult::Found { values, .. } => values,
            GetResult::NotFound { .. } => &[],
        }
    }

    /// The value last-writer-wins would keep (greatest `(meta.ts_us, dot)`), if any.
    pub fn latest(&self) -> Option<&Bytes> {
        match self {
            GetResult::Found { values, latest, .. } => values.get(*latest),
            GetResult::NotFound { .. } => None,
        }
    }

    /// The context to write back with (empty bytes, a blind write, for a plain notfound).
    pub fn context(&self) -> Bytes {
        match self {
            GetResult::Found { context, .. } => context.clone(),
            GetResult::NotFound { deleted_context } => deleted_context.clone().unwrap_or_default(),
        }
    }
}

/// The answer to a successful PUT or DELETE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutResult {
    /// The context of the coordinator's object after the write (writing with it supersedes
    /// every value the coordinator held).
    pub context: Vec<u8>,
    /// The coordinator's live values after the write, when `return_body` was set.
    pub values: Option<Vec<Vec<u8>>>,
    /// Whether the write's critical path crossed a DC boundary: it was forwarded to a
    /// coordinator in another DC, or the acknowledgement that completed the write quorum came
    /// from another DC (spec `experiments.md` §3, "local vs remote").
    #[serde(default)]
    pub remote: bool,
}
