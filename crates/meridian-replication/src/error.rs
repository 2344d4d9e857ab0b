//! The crate's one error type, [`ReplicationError`].
//!
//! Every variant is one of the spec's codes (`placement-and-quorums.md` §11) or a local
//! failure, and carries the figures a user needs to act (`need`, `got`, which replicas were
//! missing). `Display` is the snake_case code followed by its figures
//! (`r_val_unsatisfied need=2 got=1`), so a front end can forward it after its own prefix
//! (`-UNAVAILABLE`, `-ERR`, `-TIMEOUT`); [`ReplicationError::code`] is the code alone and
//! [`ReplicationError::class`] tells the edge which HTTP/RESP family it belongs to.
//!
//! The type is serializable because a coordinator that forwards a client write (§6.1) gets
//! the remote coordinator's result, error included, back over the wire unchanged.

use crate::bucket_type::BucketType;
use crate::timeline::{ReplicaRef, Version};
use meridian_cluster::QuorumError;
use meridian_core::{DcId, NodeId};
use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// The figures of a timeout error: the quorum, what arrived, and who did not answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing(pub Vec<NodeId>);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("-");
        }
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// Why a replicated request was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum ReplicationError {
    /// A quorum rule refused or failed the request: a pre-check (`n_val_violation`,
    /// `pr_val_unsatisfied`, `pw_val_unsatisfied`, `insufficient_vnodes`,
    /// `node_confirms_val_unsatisfied`, `dc_confirms_val_unsatisfied`) or a reply rule
    /// (`r_val_unsatisfied`, `w_val_unsatisfied`, `dw_val_unsatisfied`, ...), with its figures.
    #[error(transparent)]
    Quorum(QuorumError),
    /// A replica shed the request; retry later.
    #[error("overload")]
    Overload,
    /// The request timer expired before enough replies arrived.
    #[error("timeout need={need} ok={ok} nf={nf} fail={fail} missing={missing}")]
    Timeout {
        /// R (GET) or W (PUT).
        need: u32,
        /// ok replies (GET) or w-acks (PUT).
        ok: u32,
        /// notfound replies not counted as ok (GET; 0 for PUT).
        nf: u32,
        /// Failed replies.
        fail: u32,
        /// The apl members (or the forwarding target) that had not answered.
        missing: Missing,
    },
    /// A client write would leave more siblings than `siblings_max` (§7 limits).
    #[error("too_many_siblings n={n} max={max}")]
    TooManySiblings {
        /// Siblings the write would leave.
        n: usize,
        /// The limit.
        max: usize,
    },
    /// A client value is larger than `object_max` (§7 limits).
    #[error("object_too_large len={len} max={max}")]
    ObjectTooLarge {
        /// The value's length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The causal context the client sent back does not decode.
    #[error("invalid_context {reason}")]
    InvalidContext {
        /// What is wrong with it.
        reason: String,
    },
    /// The key starts with the byte reserved for internal key spaces (hints), `0xFF`.
    #[error("reserved_key keys must not start with byte 0xff")]
    ReservedKey,
    /// Bucket properties that fail validation.
    #[error("invalid_bucket bucket={bucket} {reason}")]
    InvalidBucket {
        /// The bucket's name.
        bucket: String,
        /// What is wrong.
        reason: String,
    },
    /// A write's preference list has no primary to coordinate it: every primary of the
    /// partition is down (see the `node` module docs for why fallbacks do not coordinate).
    #[error("no_coordinator partition={partition} apl_len={apl_len}")]
    NoCoordinator {
        /// The key's partition.
        partition: u32,
        /// Entries (all fallbacks) in the preference list.
        apl_len: u32,
    },
    /// The local storage engine refuses writes: its disk is full (it resumes by itself
    /// once space returns).
    #[error("disk_full {reason}")]
    DiskFull {
        /// The engine's error, in words (the path and the free space).
        reason: String,
    },
    /// The local storage engine failed, or a stored object does not decode.
    #[error("storage_error {reason}")]
    Storage {
        /// The engine's error, in words.
        reason: String,
    },
    /// A forwarded request could not reach, or got no usable answer from, its coordinator.
    #[error("forward_failed node={node} {reason}")]
    ForwardFailed {
        /// The coordinator the request was forwarded to.
        node: NodeId,
        /// The network error, in words.
        reason: String,
    },
    /// A membership or cluster-metadata change was refused (unknown or duplicate node, a
    /// handoff still in progress, a layout that cannot be built).
    #[error("membership_refused {reason}")]
    MembershipRefused {
        /// Why, and what to do.
        reason: String,
    },
    /// The node that serializes cluster-metadata changes (the claimant: the lowest node id
    /// of the layout) did not answer.
    #[error("claimant_unreachable node={node} {reason}")]
    ClaimantUnreachable {
        /// The claimant.
        node: NodeId,
        /// The network error, in words.
        reason: String,
    },
    /// This node has not been admitted to a cluster yet (it was started to join one and no
    /// member has sent it the cluster's metadata).
    #[error("not_joined node={node} this node is waiting to be added with a join request")]
    NotJoined {
        /// This node.
        node: NodeId,
    },
    /// A timeline request needs the record's master (write, test-and-set, delete,
    /// read-latest), and the master is down per the failure detector or did not answer
    /// within `master_timeout_ms` (`timeline.md` §7). `read_any` still works.
    #[error(
        "master_unavailable key={key} master={master} dc={dc} {reason}{}",
        if *.maybe_applied { " (the write may have applied)" } else { "" }
    )]
    MasterUnavailable {
        /// The client key (lossy UTF-8).
        key: String,
        /// The master this node tried.
        master: NodeId,
        /// The master's DC.
        dc: DcId,
        /// What failed, in words.
        reason: String,
        /// The request reached the master, or may have: a write's outcome is unknown.
        maybe_applied: bool,
    },
    /// `read_critical(required)` found only an older version locally, and the master that
    /// holds a fresh enough one is unreachable.
    #[error(
        "stale_version_unavailable required={required} local={} master={master} {reason}",
        match .local { Some(v) => v.to_string(), None => "none".to_owned() }
    )]
    StaleVersionUnavailable {
        /// The version the read needs.
        required: Version,
        /// The local replica's version, if it holds the record.
        local: Option<Version>,
        /// The master that could not serve it.
        master: NodeId,
        /// What failed, in words.
        reason: String,
    },
    /// An insert of a new timeline key needs its partition's insert arbiter (§5), which is
    /// down or did not answer. There is no fallback: two arbiters could both admit it.
    #[error(
        "insert_arbiter_unavailable partition={partition} node={node} {reason}{}",
        if *.maybe_applied { " (the insert may have applied)" } else { "" }
    )]
    InsertArbiterUnavailable {
        /// The key's partition.
        partition: u32,
        /// The arbiter (the partition's first primary).
        node: NodeId,
        /// What failed, in words.
        reason: String,
        /// The request reached the arbiter, or may have.
        maybe_applied: bool,
    },
    /// A timeline test-and-set found another version (`None`: the record is absent).
    #[error(
        "version_mismatch current={}",
        match .current { Some(v) => v.to_string(), None => "none".to_owned() }
    )]
    VersionMismatch {
        /// The record's current version at the master.
        current: Option<Version>,
    },
    /// A timeline insert-if-absent found a live record.
    #[error("already_exists current={current}")]
    AlreadyExists {
        /// The live record's version.
        current: Version,
    },
    /// Internal to the timeline write path: the receiver is not the record's master; the
    /// coordinator retries once at `hint`.
    #[error("not_master hint={hint} await={await_ver}")]
    NotMaster {
        /// The master per the receiver's record.
        hint: ReplicaRef,
        /// The receiver's version of the record (the new master waits until it has it).
        await_ver: Version,
    },
    /// A forced re-master could not run: no replica in the DC holds the record, or none is
    /// reachable.
    #[error("force_master_refused key={key} {reason}")]
    ForceMasterRefused {
        /// The client key (lossy UTF-8).
        key: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The operation does not exist for the key's bucket type (a timeline read mode on an
    /// eventual bucket, a causal context on a timeline bucket, ...).
    #[error("wrong_bucket_type bucket={bucket} is {actual}: {hint}")]
    WrongBucketType {
        /// The bucket's name.
        bucket: String,
        /// Its type.
        actual: String,
        /// What to do instead.
        hint: String,
    },
    /// A transaction aborted (retryable, no effect) or could not run (spec `transactions.md`).
    #[error(transparent)]
    Txn(meridian_txn::TxnError),
    /// A command that has no meaning on the key's bucket type (a read-modify-write such as
    /// `INCR` on either type, a `SET` option). Unlike the other variants its `Display` is a
    /// sentence led by the command, not by the code (`unsupported`), because that is what a
    /// Redis client shows: `INCR is not supported on eventual buckets (no atomic ...)`.
    #[error("{command} is not supported on {bucket_type} buckets{hint}")]
    Unsupported {
        /// The command or option, as the client named it (`INCR`, `SET option 'EX'`).
        command: String,
        /// The key's bucket type.
        bucket_type: BucketType,
        /// Why, and what to use instead, starting with its separator (`"; use GET"`).
        hint: String,
    },
    /// An increment the key's value refuses, with Redis's message: the value is not an
    /// integer, or the result would overflow.
    #[error("{0}")]
    Incr(crate::eventual::types::IncrError),
    /// A command of one Redis type on a key holding another (a hash command on a string or
    /// counter, an increment on a hash), with Redis's message; a front end shows it as Redis
    /// does (`-WRONGTYPE ...`).
    #[error("Operation against a key holding the wrong kind of value")]
    WrongType,
    /// A chunk of a large object could not be stored on enough replicas.
    #[error("chunk_write_failed need={need} ok={ok} {reason}")]
    ChunkWriteFailed {
        /// Acks needed (the bucket's W).
        need: u32,
        /// Acks received.
        ok: u32,
        /// The last failure heard.
        reason: String,
    },
    /// No replica could serve a chunk of a large object with bytes matching its digest.
    #[error("chunk_unavailable chunk={chunk} tried={tried}")]
    ChunkUnavailable {
        /// The chunk (`version/index`).
        chunk: String,
        /// Replicas asked.
        tried: u32,
    },
    /// The causal context decodes but claims what the coordinating replica cannot vouch
    /// for (a counter it never issued) or leaves it no fresh dot: refused, nothing written
    /// (`meridian_cluster::dvv`, "Client contexts"). Last, so the wire indices of the
    /// other variants (forwarded replies) do not move.
    #[error("invalid_context invalid CONTEXT: {0}")]
    ContextRefused(meridian_cluster::ContextError),
    /// A write refused for `maxmemory` before anything was applied: `node` (this
    /// coordinator or a replica the write would store on) is over its limit under
    /// `noeviction`, or too far over it for eviction to keep up (module [`crate::memory`]).
    /// A front end shows Redis's line, `-OOM command not allowed when used memory >
    /// 'maxmemory'.`; deletes are never refused.
    #[error("out_of_memory node={node}")]
    OutOfMemory {
        /// The node over its limit.
        node: NodeId,
    },
}

/// How the edge should present an error (spec §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The request is malformed for this bucket (HTTP 400, RESP `-ERR`).
    BadRequest,
    /// A quorum cannot be met now (HTTP 503, RESP `-UNAVAILABLE`).
    Unavailable,
    /// Shed load (HTTP 503 + `Retry-After`, RESP `-TRYAGAIN`).
    Overload,
    /// The request timer expired (HTTP 504, RESP `-TIMEOUT`).
    Timeout,
    /// The write is too large or has too many siblings (HTTP 413, RESP `-ERR`).
    TooLarge,
    /// A server-side failure (HTTP 500, RESP `-ERR`).
    Internal,
    /// A test-and-set precondition failed (HTTP 412, RESP `-CONFLICT`).
    Conflict,
    /// The node's disk is full: writes are refused until space returns (HTTP 507, RESP
    /// `-MISCONF`, as Redis answers when it cannot persist).
    DiskFull,
    /// A transactional key is moving between partitions (spec `repartitioning.md` §6:
    /// `KeyMoving`, or a `WrongPartition` the coordinator's own retries did not absorb):
    /// nothing was applied and the same request succeeds once the move ends (HTTP 503 +
    /// `Retry-After`, RESP `-TRYAGAIN`, which cluster clients retry as during resharding).
    Moving,
}

impl ReplicationError {
    /// The snake_case code without figures (`"w_val_unsatisfied"`).
    pub fn code(&self) -> &'static str {
        use ReplicationError::*;
        match self {
            Quorum(q) => q.code(),
            Overload => "overload",
            Timeout { .. } => "timeout",
            TooManySiblings { .. } => "too_many_siblings",
            ObjectTooLarge { .. } => "object_too_large",
            InvalidContext { .. } | ContextRefused(_) => "invalid_context",
            ReservedKey => "reserved_key",
            InvalidBucket { .. } => "invalid_bucket",
            NoCoordinator { .. } => "no_coordinator",
            DiskFull { .. } => "disk_full",
            Storage { .. } => "storage_error",
            ForwardFailed { .. } => "forward_failed",
            MembershipRefused { .. } => "membership_refused",
            ClaimantUnreachable { .. } => "claimant_unreachable",
            NotJoined { .. } => "not_joined",
            MasterUnavailable { .. } => "master_unavailable",
            StaleVersionUnavailable { .. } => "stale_version_unavailable",
            InsertArbiterUnavailable { .. } => "insert_arbiter_unavailable",
            VersionMismatch { .. } => "version_mismatch",
            AlreadyExists { .. } => "already_exists",
            NotMaster { .. } => "not_master",
            WrongBucketType { .. } => "wrong_bucket_type",
            ForceMasterRefused { .. } => "force_master_refused",
            Unsupported { .. } => "unsupported",
            Incr(
                crate::eventual::types::IncrError::NotAnInteger
                | crate::eventual::types::IncrError::HashNotAnInteger,
            ) => "not_an_integer",
            WrongType => "wrong_type",
            Incr(crate::eventual::types::IncrError::Overflow) => "increment_overflow",
            ChunkWriteFailed { .. } => "chunk_write_failed",
            ChunkUnavailable { .. } => "chunk_unavailable",
            OutOfMemory { .. } => "out_of_memory",
            Txn(t) => match t {
                meridian_txn::TxnError::Aborted(meridian_txn::Abort::KeyMoving(_)) => "key_moving",
                meridian_txn::TxnError::Aborted(_) => "txn_aborted",
                meridian_txn::TxnError::SnapshotTooOld { .. } => "snapshot_too_old",
                meridian_txn::TxnError::TxnTooLarge { .. } => "txn_too_large",
                meridian_txn::TxnError::ClockWentBackward { .. } => "clock_went_backward",
                meridian_txn::TxnError::Storage(_) => "txn_storage",
                meridian_txn::TxnError::BadRequest(_) => "txn_bad_request",
                meridian_txn::TxnError::OutcomeUnknown(_) => "txn_outcome_unknown",
                meridian_txn::TxnError::WrongPartition { .. } => "wrong_partition",
                meridian_txn::TxnError::Plan(_) => "txn_plan",
            },
        }
    }

    /// The family the edge maps this error to.
    pub fn class(&self) -> ErrorClass {
        use ReplicationError::*;
        match self {
            Quorum(QuorumError::NValViolation { .. })
            | InvalidContext { .. }
            | ContextRefused(_)
            | ReservedKey
            | InvalidBucket { .. }
            | MembershipRefused { .. }
            | WrongBucketType { .. }
            | Unsupported { .. }
            | Incr(_)
            | WrongType
            | ForceMasterRefused { .. } => ErrorClass::BadRequest,
            VersionMismatch { .. } | AlreadyExists { .. } => ErrorClass::Conflict,
            Txn(t) => match t {
                // A move, not a conflict on the client's data: retry the same request.
                meridian_txn::TxnError::Aborted(meridian_txn::Abort::KeyMoving(_))
                | meridian_txn::TxnError::WrongPartition { .. } => ErrorClass::Moving,
                meridian_txn::TxnError::Aborted(_)
                | meridian_txn::TxnError::SnapshotTooOld { .. } => ErrorClass::Conflict,
                meridian_txn::TxnError::TxnTooLarge { .. } => ErrorClass::TooLarge,
                meridian_txn::TxnError::Storage(_) | meridian_txn::TxnError::Plan(_) => {
                    ErrorClass::Internal
                }
                meridian_txn::TxnError::BadRequest(_) => ErrorClass::BadRequest,
                meridian_txn::TxnError::ClockWentBackward { .. } => ErrorClass::Unavailable,
                meridian_txn::TxnError::OutcomeUnknown(_) => ErrorClass::Timeout,
            },
            Overload => ErrorClass::Overload,
            Timeout { .. } => ErrorClass::Timeout,
            TooManySiblings { .. } | ObjectTooLarge { .. } => ErrorClass::TooLarge,
            DiskFull { .. } => ErrorClass::DiskFull,
            Storage { .. } => ErrorClass::Internal,
            _ => ErrorClass::Unavailable,
        }
    }
}

impl From<QuorumError> for ReplicationError {
    fn from(e: QuorumError) -> Self {
        match e {
            QuorumError::Overload => ReplicationError::Overload,
            QuorumError::Timeout { need, ok, nf, fail } => ReplicationError::Timeout {
                need,
                ok,
                nf,
                fail,
                missing: Missing(Vec::new()),
            },
            other => ReplicationError::Quorum(other),
        }
    }
}

impl From<meridian_storage::StorageError> for ReplicationError {
    fn from(e: meridian_storage::StorageError) -> Self {
        if e.is_disk_full() {
            return ReplicationError::DiskFull {
                reason: e.to_string(),
            };
        }
        ReplicationError::Storage {
            reason: e.to_string(),
        }
    }
}

impl From<meridian_txn::TxnError> for ReplicationError {
    fn from(e: meridian_txn::TxnError) -> Self {
        ReplicationError::Txn(e)
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = ReplicationError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_code_and_figures() {
        let e = ReplicationError::from(QuorumError::RValUnsatisfied { need: 2, got: 1 });
        assert_eq!(e.to_string(), "r_val_unsatisfied need=2 got=1");
        assert_eq!(e.code(), "r_val_unsatisfied");
        assert_eq!(e.class(), ErrorClass::Unavailable);
        let t = ReplicationError::Timeout {
            need: 2,
            ok: 1,
            nf: 0,
            fail: 0,
            missing: Missing(vec![NodeId(4), NodeId(5)]),
        };
        assert_eq!(
            t.to_string(),
            "timeout need=2 ok=1 nf=0 fail=0 missing=n4,n5"
        );
        assert_eq!(t.class(), ErrorClass::Timeout);
    }

    #[test]
    fn every_quorum_error_keeps_its_code() {
        let all = [
            QuorumError::NValViolation { n: 3 },
            QuorumError::PrValUnsatisfied { need: 3, got: 2 },
            QuorumError::PwValUnsatisfied { need: 3, got: 2 },
            QuorumError::InsufficientVnodes { have: 1, need: 2 },
            QuorumError::NodeConfirmsValUnsatisfied { need: 3, got: 2 },
            QuorumError::DcConfirmsValUnsatisfied { need: 3, got: 2 },
            QuorumError::RValUnsatisfied { need: 2, got: 1 },
            QuorumError::WValUnsatisfied { need: 2, got: 1 },
            QuorumError::DwValUnsatisfied { need: 2, got: 1 },
            QuorumError::Overload,
        ];
        for q in all {
            let r = ReplicationError::from(q);
            assert_eq!(r.code(), q.code());
            assert_eq!(r.to_string(), q.to_string());
        }
    }
}
