//! Snapshot-isolation transactions for Meridian's `transactional` buckets: the protocol core
//! of Clock-SI (Du, Elnikety, Zwaenepoel, SRDS 2013) and of the conventional-SI baseline with
//! a central timestamp oracle, without I/O (spec `transactions.md`).
//!
//! | module | what |
//! |---|---|
//! | [`types`] | ids, per-bucket properties ([`TxnProps`]), typed aborts, the error, limits |
//! | [`leader`] | a partition leader's rules: its clock, R1, R2, certification, `commit_ts` |
//! | [`store`] | versions, prepared records, decisions and the oracle's bound over the engine |
//! | [`tso`] | the oracle's state: ranges, persisted bound, capacity |
//! | [`messages`] | the wire messages |
//! | [`placement`] | the key directory overriding hash placement, and the planner proposing moves (spec `repartitioning.md` §6) |
//! | [`moves`] | moving a key between leaders: freeze, export, install with the clock rule, redirect |
//!
//! The serving side — leaders answering reads with their waits, two-phase commit, the decision
//! log's replay, the oracle's RPCs and the batched client — is the `txn` module of
//! `meridian-replication`, a protocol on the node kernel; this crate holds what it decides
//! with, so the rules are tested deterministically (a fake clock, no sleeps).
//!
//! Not built: `txn_backups > 0` (shipping records to backups and moving a leader by
//! recovering from a backup's log). A leader's partition is unavailable for transactions
//! while the leader is down, and recovers from the leader's own log when it restarts;
//! configurations asking for backups are refused rather than silently unprotected.

pub mod leader;
pub mod messages;
pub mod moves;
pub mod placement;
pub mod store;
pub mod tso;
pub mod types;

pub use leader::{Controls, LeaderClock, Mark, ReadCheck};
pub use meridian_core::envelope::Entry;
pub use messages::{Found, Outcome, TxnMsg};
pub use moves::{Exported, KeyMove, MoveOutcome, MoveTable};
pub use placement::{
    DirChange, KeyDirectory, Move, PartInfo, Placement, Plan, Planner, PlannerConfig, Route,
};
pub use store::{Decision, KeyVersions, PreparedRecord, TxnStore, Write};
pub use tso::{Grant, TsoServer};
pub use types::{
    Abort, Committed, Result, TimestampSource, TsoBatching, TxId, TxnError, TxnLimits, TxnProps,
};
