//! The eventual protocol's request and result types, shared by its coordinator and its wire
//! messages (a forwarded write carries [`PutOptions`] and answers a [`PutResult`]), so the
//! messages do not depend on the coordinator; and the increment errors ([`IncrError`]), which
//! the crate's error type names without importing the counters.

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    /// An operation on the key's CRDT (a PN-counter's increment, a map's field updates): the
    /// coordinating replica ignores the request's value and context and writes the CRDT's
    /// next state, computed under the key's lock from what it holds, and answers
    /// [`PutResult::crdt`]. Needs `allow_mult`.
    pub crdt: Option<CrdtOp>,
}

/// An operation on an eventual key's CRDT, applied by its coordinating replica (see
/// [`PutOptions::crdt`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrdtOp {
    /// Redis's `INCRBY`: add this much to the key's PN-counter (`eventual::counter`).
    CounterAdd(i64),
    /// A Redis hash command on the key's map (`eventual::map`).
    HashUpdate(HashOps),
    /// What a set or sorted-set command changed, applied to the key's collection
    /// (`eventual::elements`).
    Elements(Box<ElementOps>),
    /// The registers a PFADD raised, `(index, value)` ascending, raised in the key's HLL
    /// (`eventual::registers`).
    Registers(Vec<(u16, u8)>),
    /// What a list command changed, applied to the key's sequence (`eventual::sequence`).
    Sequence(Box<SequenceOps>),
}

impl CrdtOp {
    /// The Redis command family it serves (for refusals).
    pub fn command(&self) -> &'static str {
        match self {
            CrdtOp::CounterAdd(_) => "INCR",
            CrdtOp::HashUpdate(ops) => ops.command(),
            CrdtOp::Elements(ops) if ops.zset => "ZADD",
            CrdtOp::Elements(_) => "SADD",
            CrdtOp::Registers(_) => "PFADD",
            CrdtOp::Sequence(_) => "LPUSH",
        }
    }
}

/// The hash commands an eventual bucket's map serves, one per Redis command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashOps {
    /// `HSET key field value [field value ...]` (and `HMSET`): sets every field, in order
    /// (a field given twice ends with its last value). Answers [`HashReply::Added`].
    Set(Vec<(Bytes, Bytes)>),
    /// `HDEL key field [field ...]`: removes the fields. Answers [`HashReply::Removed`].
    Del(Vec<Bytes>),
    /// `HINCRBY key field delta`: adds `delta` to the field's integer (0 when absent),
    /// merged with concurrent increments. Answers [`HashReply::Value`].
    IncrBy {
        /// The field.
        field: Bytes,
        /// What to add.
        delta: i64,
    },
    /// `HSETNX key field value`: sets the field if it is absent. Answers
    /// [`HashReply::Set`].
    SetNx {
        /// The field.
        field: Bytes,
        /// Its value.
        value: Bytes,
    },
}

impl HashOps {
    /// The Redis command it is.
    pub fn command(&self) -> &'static str {
        match self {
            HashOps::Set(_) => "HSET",
            HashOps::Del(_) => "HDEL",
            HashOps::IncrBy { .. } => "HINCRBY",
            HashOps::SetNx { .. } => "HSETNX",
        }
    }
}

/// What a hash command answers, as Redis replies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashReply {
    /// `HSET`: how many fields were added (not present before).
    Added(u64),
    /// `HDEL`: how many fields were removed (present before).
    Removed(u64),
    /// `HINCRBY`: the field's value after the increment, at the coordinating replica.
    Value(i64),
    /// `HSETNX`: whether the field was set.
    Set(bool),
}

/// What a command changed in a set or sorted set, as its front end worked it out over the
/// collection it read; applied by the key's coordinator (see `eventual::elements`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ElementOps {
    /// A sorted set (else a set).
    pub zset: bool,
    /// The clock of the collection the command read (`None`: it read a value that was no
    /// element CRDT, so a removal removes what the coordinator holds).
    pub observed: Option<Vec<(u64, u64)>>,
    /// Members added, or whose score a `ZADD` set, with the score (sets: `None`).
    pub puts: Vec<(Bytes, Option<f64>)>,
    /// Sorted-set members whose score an increment changed, by how much.
    pub incrs: Vec<(Bytes, f64)>,
    /// Members removed.
    pub removes: Vec<Bytes>,
}

// Scores are compared as numbers; a NaN one is refused by the coordinator, so equality is
// an equivalence on every op that is applied.
impl Eq for ElementOps {}

impl ElementOps {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.puts.is_empty() && self.incrs.is_empty() && self.removes.is_empty()
    }

    /// Whether it only removes (it frees memory, so it runs over `maxmemory`).
    pub fn only_removes(&self) -> bool {
        self.puts.is_empty() && self.incrs.is_empty()
    }

    /// How many members and bytes it names, for the bound a peer's request is checked by.
    pub fn size(&self) -> usize {
        let names = self.puts.iter().map(|p| &p.0);
        let names = names.chain(self.incrs.iter().map(|p| &p.0));
        names.chain(&self.removes).map(|m| m.len() + 16).sum()
    }
}

/// What a list command changed, as one run of the list replaced: the places (digit strings,
/// see `eventual::sequence`) of the elements it removed, of the run's neighbours, and the
/// new elements, in order; applied by the key's coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceOps {
    /// The places of the elements removed.
    pub removes: Vec<Vec<u32>>,
    /// The place of the element before the run (`None`: the run starts the list).
    pub after: Option<Vec<u32>>,
    /// The place of the element after the run (`None`: the run ends the list).
    pub before: Option<Vec<u32>>,
    /// The run's new elements, in order.
    pub values: Vec<Bytes>,
}

impl SequenceOps {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.removes.is_empty() && self.values.is_empty()
    }
}

/// What the coordinating replica answers to a [`CrdtOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrdtReply {
    /// The counter's value after the increment.
    Counter(i64),
    /// The hash command's answer.
    Hash(HashReply),
    /// A set, sorted set or HLL took the change (its command's answer is its front end's).
    Elements,
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
    /// The answer to the write's [`PutOptions::crdt`] operation, if it had one.
    #[serde(default)]
    pub crdt: Option<CrdtReply>,
}

/// Why an increment cannot apply: Redis's own errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum IncrError {
    /// The key holds a value that is not a 64-bit integer.
    #[error("value is not an integer or out of range")]
    NotAnInteger,
    /// The result would not fit a 64-bit integer.
    #[error("increment or decrement would overflow")]
    Overflow,
    /// `HINCRBY` on a hash field whose value is not a 64-bit integer.
    #[error("hash value is not an integer")]
    HashNotAnInteger,
}
