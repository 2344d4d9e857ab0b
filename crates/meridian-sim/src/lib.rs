//! Meridian's simulator support: Jepsen-style history recording and the consistency checkers
//! that judge a run.
//!
//! Simulated clients record every invocation and completion into a [`Recorder`]; after the
//! run heals and quiesces, the checkers judge the [`History`] (and the replicas' final state)
//! and return a [`Verdict`] that explains the first violations with keys, op ids, virtual
//! times and values. Histories save to and load from JSON lines, so a failing run can be kept
//! and re-checked.
//!
//! Everything here is pure and deterministic: no clock, no randomness, no I/O besides the
//! explicit JSON-lines save/load, and no output that depends on hash-map iteration order.
//!
//! | module | concept |
//! |---|---|
//! | [`history`] | operations, outcomes, events, [`History`] (JSON lines), [`Recorder`] |
//! | [`checker`] | [`Verdict`]s; lost writes, quorum reads, convergence, linearizability |
//! | [`text`] | readable, round-trippable text for keys and values |
//! | [`error`] | the crate's [`enum@Error`] |

pub mod checker;
pub mod error;
pub mod history;
pub mod text;

pub use checker::convergence::check as check_convergence;
pub use checker::linearizability::check as check_linearizability;
pub use checker::lost_writes::check as check_lost_writes;
pub use checker::quorum_reads::check as check_quorum_reads;
pub use checker::{
    FinalState, ReplicaStates, Status, Undecided, Verdict, Violation, merge_replicas,
};
pub use error::Error;
pub use history::{
    ClientId, Event, History, Micros, Op, OpId, OpResult, Operation, Outcome, Recorder,
};
