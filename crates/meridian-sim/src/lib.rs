//! Meridian's deterministic simulator: the real cluster code (every node an
//! `EventualNode` on an in-process network behind the WAN emulator) run in virtual time from
//! one seed, with fault schedules, Jepsen-style history recording and the consistency
//! checkers that judge a run.
//!
//! [`scenario::run`] is the entry point: `(scenario, seed)` → a [`scenario::Report`] with the
//! operations, the faults injected, the checkers' verdicts and the recorded history. The same
//! seed gives the same history, byte for byte.
//!
//! Simulated clients record every invocation and completion into a [`Recorder`]; after the
//! run heals and quiesces, the checkers judge the [`History`] (and the replicas' final state)
//! and return a [`Verdict`] that explains the first violations with keys, op ids, virtual
//! times and values. Histories save to and load from JSON lines, so a failing run can be kept
//! and re-checked.
//!
//! Everything here is deterministic: time is tokio's paused clock, randomness comes from
//! ChaCha8 RNGs seeded from the run's seed, there are no threads and no output depends on
//! hash-map iteration order; the only I/O is the explicit JSON-lines save/load.
//!
//! | module | concept |
//! |---|---|
//! | [`scenario`] | named scenarios and [`scenario::run`]: cluster + workload + faults + checkers |
//! | [`cluster`] | [`cluster::SimCluster`]: the real nodes in virtual time, crash/restart, skewed clocks, timeline observers |
//! | [`disk`] | [`SimDisk`]: a node's storage across crashes, an in-memory `Engine` with an fsync policy whose crashes lose un-synced writes |
//! | [`faults`] | fault kinds, seeded schedules, applying and undoing them |
//! | [`workload`] | simulated clients per DC recording every operation |
//! | [`tl_workload`] | simulated clients of a timeline bucket (sessions, locality), and the recorder of a timeline run's issue log, apply log and client history |
//! | [`txn_workload`] | simulated clients of transactional buckets (bank, list-append, write skew, counter) and the run of a transactional scenario: SI, bank audits, negative controls |
//! | [`history`] | operations, outcomes, events, [`History`] (JSON lines), [`Recorder`] |
//! | [`checker`] | [`Verdict`]s; lost writes, quorum reads, convergence, linearizability; timeline invariants (order, forks, single writer, migration, reads, TAS); transaction histories (Elle JSON lines) under snapshot isolation, strong-session SI, serializability; bank audits |
//! | [`text`] | readable, round-trippable text for keys and values |
//! | [`error`] | the crate's [`enum@Error`] |

pub mod balance_run;
pub mod checker;
pub mod cluster;
pub mod crdt_workload;
pub mod disk;
pub mod error;
pub mod faults;
pub mod history;
pub mod scenario;
pub mod text;
pub mod tl_workload;
pub mod txn_workload;
pub mod workload;

pub use checker::convergence::check as check_convergence;
pub use checker::linearizability::check as check_linearizability;
pub use checker::lost_writes::check as check_lost_writes;
pub use checker::quorum_reads::check as check_quorum_reads;
pub use checker::si::{
    Anomaly, AnomalyKind, BankViolation, Model as TxnModel, SiReport, Workload as TxnWorkload,
    check as check_si, check_bank_audits,
};
pub use checker::timeline::{
    Applied, IssueKind, Issued, TlEvent, TlHistory, TlOp, TlOperation, TlResult, TlVersion,
    check_all as check_timeline,
};
pub use checker::{
    FinalState, ReplicaStates, Status, Undecided, Verdict, Violation, merge_replicas,
};
pub use disk::{CrashReport, DiskStats, MountedEngine, SimDisk, SyncPolicy};
pub use error::Error;
pub use history::{
    ClientId, Event, History, Micros, Op, OpId, OpResult, Operation, Outcome, Recorder,
};
