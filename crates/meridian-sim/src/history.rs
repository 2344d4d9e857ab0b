//! Jepsen-style histories: what every simulated client asked for and what it was told.
//!
//! A [`History`] is a sequence of [`Event`]s: an [`Event::Invoke`] when a client sends an
//! [`Op`] on one key, and at most one [`Event::Complete`] when it learns the [`Outcome`]:
//! - [`Outcome::Ok`]: the operation took effect, with its [`OpResult`] (a read's sibling
//!   values, `done` for a write or delete, `cas_rejected` for a compare-and-set whose
//!   expectation did not hold);
//! - [`Outcome::Fail`]: the client was told it did not happen (strong modes rely on this; the
//!   eventual-consistency checkers treat it like `Unknown`, because a write that missed its
//!   quorum may still have reached a replica);
//! - [`Outcome::Unknown`]: a timeout or lost connection: it may or may not have happened. An
//!   operation with no completion at the end of the history counts as unknown.
//!
//! Causality is recorded by value: a write or delete carries `supersedes`, the values its
//! client's causal context covered (a write issued with the context of a read supersedes
//! exactly the values that read returned; a blind write supersedes nothing).
//!
//! Times are virtual microseconds ([`Micros`]) on the simulation's global clock. A
//! [`Recorder`] is the cheap, cloneable, thread-safe handle many clients append through.
//!
//! Guarantees: the JSON-lines form ([`History::save`] / [`History::load`]) round-trips
//! exactly, one event per line, fields in a fixed order and bytes as readable text
//! ([`crate::text`]), so the same history always saves to the same bytes; [`History::operations`]
//! pairs invocations with completions and rejects malformed histories with an
//! [`enum@Error`] naming the operation at fault.

use crate::error::Error;
use crate::text;
use meridian_core::{DcId, Key, Value};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

/// Virtual time: microseconds on the simulation's global clock.
pub type Micros = u64;

/// A simulated client (one logical session issuing one operation at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClientId(pub u32);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// One operation of a history; unique within it, allocated in invocation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OpId(pub u64);

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "op{}", self.0)
    }
}

/// What a client asks for on one key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Op {
    /// Read the key's value (eventual: its sibling set).
    Read,
    /// Write `value`, with a causal context covering the values in `supersedes`.
    Write {
        /// The value written; unique per history for the eventual checkers.
        #[serde(with = "text::one")]
        value: Value,
        /// The values the client's causal context covered (empty: a blind write).
        #[serde(with = "text::many", default)]
        supersedes: Vec<Value>,
    },
    /// Delete the key, with a causal context covering the values in `supersedes`.
    Delete {
        /// The values the client's causal context covered.
        #[serde(with = "text::many", default)]
        supersedes: Vec<Value>,
    },
    /// Compare-and-set (strong modes): if the key holds `expected` (`None`: absent), write
    /// `new`.
    Cas {
        /// The value the key must hold for the write to apply (`None`: the key is absent).
        #[serde(with = "text::opt")]
        expected: Option<Value>,
        /// The value written when it applies.
        #[serde(with = "text::one")]
        new: Value,
    },
}

impl Op {
    /// A write of `value` whose context covered `supersedes`.
    pub fn write(
        value: impl Into<Value>,
        supersedes: impl IntoIterator<Item = impl Into<Value>>,
    ) -> Op {
        Op::Write {
            value: value.into(),
            supersedes: supersedes.into_iter().map(Into::into).collect(),
        }
    }

    /// A write with an empty context.
    pub fn blind_write(value: impl Into<Value>) -> Op {
        Op::Write {
            value: value.into(),
            supersedes: Vec::new(),
        }
    }

    /// A delete whose context covered `supersedes`.
    pub fn delete(supersedes: impl IntoIterator<Item = impl Into<Value>>) -> Op {
        Op::Delete {
            supersedes: supersedes.into_iter().map(Into::into).collect(),
        }
    }

    /// A compare-and-set from `expected` (`None`: absent) to `new`.
    pub fn cas(expected: Option<impl Into<Value>>, new: impl Into<Value>) -> Op {
        Op::Cas {
            expected: expected.map(Into::into),
            new: new.into(),
        }
    }

    /// `read`, `write`, `delete` or `cas`.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write { .. } => "write",
            Op::Delete { .. } => "delete",
            Op::Cas { .. } => "cas",
        }
    }

    /// The value this operation stores when it takes effect (writes and CAS).
    pub fn written_value(&self) -> Option<&Value> {
        match self {
            Op::Write { value, .. } => Some(value),
            Op::Cas { new, .. } => Some(new),
            Op::Read | Op::Delete { .. } => None,
        }
    }

    /// The values this operation supersedes when it takes effect: a write's or delete's
    /// context, a CAS's expected value.
    pub fn supersedes(&self) -> &[Value] {
        match self {
            Op::Write { supersedes, .. } | Op::Delete { supersedes } => supersedes,
            Op::Cas { expected, .. } => expected.as_slice(),
            Op::Read => &[],
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Read => write!(f, "read"),
            Op::Write { value, supersedes } if supersedes.is_empty() => {
                write!(f, "blind write {}", text::show(value))
            }
            Op::Write { value, supersedes } => write!(
                f,
                "write {} superseding {}",
                text::show(value),
                text::show_set(supersedes)
            ),
            Op::Delete { supersedes } => {
                write!(f, "delete superseding {}", text::show_set(supersedes))
            }
            Op::Cas { expected, new } => write!(
                f,
                "cas {} -> {}",
                expected
                    .as_deref()
                    .map_or("<absent>".to_string(), text::show),
                text::show(new)
            ),
        }
    }
}

/// What an acknowledged operation returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpResult {
    /// A read's sibling values (empty: not found); exactly one value in strong modes.
    Read(#[serde(with = "text::many")] Vec<Value>),
    /// A write, delete or compare-and-set took effect.
    Done,
    /// A compare-and-set found another value than expected and did nothing.
    CasRejected,
}

impl fmt::Display for OpResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpResult::Read(values) => write!(f, "returned {}", text::show_set(values)),
            OpResult::Done => write!(f, "acknowledged"),
            OpResult::CasRejected => write!(f, "rejected"),
        }
    }
}

/// How an operation ended, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It took effect, with this result.
    Ok(OpResult),
    /// It definitely did not take effect (the reason as the client saw it).
    Fail(String),
    /// It may or may not have taken effect (timeout, lost connection).
    Unknown(String),
}

impl Outcome {
    /// An acknowledged read that returned `values`.
    pub fn read(values: impl IntoIterator<Item = impl Into<Value>>) -> Outcome {
        Outcome::Ok(OpResult::Read(values.into_iter().map(Into::into).collect()))
    }

    /// An acknowledged write, delete or applied compare-and-set.
    pub fn done() -> Outcome {
        Outcome::Ok(OpResult::Done)
    }

    /// An acknowledged compare-and-set that did not apply.
    pub fn cas_rejected() -> Outcome {
        Outcome::Ok(OpResult::CasRejected)
    }

    /// A failure with `reason`.
    pub fn fail(reason: impl Into<String>) -> Outcome {
        Outcome::Fail(reason.into())
    }

    /// An unknown outcome with `reason`.
    pub fn unknown(reason: impl Into<String>) -> Outcome {
        Outcome::Unknown(reason.into())
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(result) => write!(f, "{result}"),
            Outcome::Fail(reason) => write!(f, "failed: {reason}"),
            Outcome::Unknown(reason) => write!(f, "outcome unknown: {reason}"),
        }
    }
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A client sends an operation.
    Invoke {
        /// The operation's id.
        op_id: OpId,
        /// The client sending it.
        client: ClientId,
        /// The client's data center.
        dc: DcId,
        /// The key it acts on.
        #[serde(with = "text::one")]
        key: Key,
        /// What it asks for.
        op: Op,
        /// When it was sent.
        at: Micros,
    },
    /// The client learns how the operation ended.
    Complete {
        /// The operation's id.
        op_id: OpId,
        /// How it ended.
        outcome: Outcome,
        /// When the client learned it.
        at: Micros,
    },
}

/// An invocation paired with its completion: the unit the checkers reason about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The operation's id.
    pub id: OpId,
    /// The client that sent it.
    pub client: ClientId,
    /// The client's data center.
    pub dc: DcId,
    /// The key it acts on.
    pub key: Key,
    /// What was asked.
    pub op: Op,
    /// When it was sent.
    pub invoked_at: Micros,
    /// When the client learned the outcome; `None` if the history ended first.
    pub completed_at: Option<Micros>,
    /// How it ended; [`Outcome::Unknown`] if it never completed.
    pub outcome: Outcome,
}

impl Operation {
    /// Whether it is acknowledged as having taken effect (for a CAS: and applied).
    pub fn is_acknowledged(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Ok(OpResult::Read(_) | OpResult::Done)
        )
    }

    /// The values an acknowledged read returned.
    pub fn read_values(&self) -> Option<&[Value]> {
        match &self.outcome {
            Outcome::Ok(OpResult::Read(values)) => Some(values),
            _ => None,
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} in {}: {}, invoked at {}µs, ",
            self.id, self.client, self.dc, self.op, self.invoked_at
        )?;
        match self.completed_at {
            Some(at) => write!(f, "completed at {at}µs, {})", self.outcome),
            None => write!(f, "never completed)"),
        }
    }
}

/// An event of an [`EventLog`]: it may invoke an operation under an id.
pub trait LogEvent {
    /// The id this event invokes, if it is an invocation.
    fn invoked(&self) -> Option<OpId>;
}

/// A recorded history: the events in the order they were appended, and the next fresh
/// operation id. [`History`] (operations on eventual buckets) and
/// [`TlHistory`](crate::checker::timeline::TlHistory) (timeline operations) are its two kinds;
/// each adds its own `invoke`, `complete` and `operations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventLog<E> {
    events: Vec<E>,
    /// One more than the largest invoked op id, for the next invocation.
    next_op: u64,
}

impl<E> Default for EventLog<E> {
    fn default() -> Self {
        EventLog {
            events: Vec::new(),
            next_op: 0,
        }
    }
}

/// A recorded history of operations on eventual buckets.
pub type History = EventLog<Event>;

impl<E: LogEvent> EventLog<E> {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// A history of these events (not validated; see the kinds' `operations`).
    pub fn from_events(events: Vec<E>) -> Self {
        let mut history = Self::new();
        for event in events {
            history.push(event);
        }
        history
    }

    /// The events, in append order.
    pub fn events(&self) -> &[E] {
        &self.events
    }

    /// The events, by value.
    pub fn into_events(self) -> Vec<E> {
        self.events
    }

    /// The number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Appends one event as is.
    pub fn push(&mut self, event: E) {
        if let Some(op_id) = event.invoked() {
            self.next_op = self.next_op.max(op_id.0.saturating_add(1));
        }
        self.events.push(event);
    }

    /// The id the next invocation gets (ids increase from 0).
    pub(crate) fn fresh_id(&self) -> OpId {
        OpId(self.next_op)
    }
}

impl LogEvent for Event {
    fn invoked(&self) -> Option<OpId> {
        match self {
            Event::Invoke { op_id, .. } => Some(*op_id),
            Event::Complete { .. } => None,
        }
    }
}

impl History {
    /// Records the invocation of `op` and returns its fresh id (ids increase from 0).
    pub fn invoke(
        &mut self,
        client: ClientId,
        dc: DcId,
        key: impl Into<Key>,
        op: Op,
        at: Micros,
    ) -> OpId {
        let op_id = self.fresh_id();
        self.push(Event::Invoke {
            op_id,
            client,
            dc,
            key: key.into(),
            op,
            at,
        });
        op_id
    }

    /// Records the completion of `op_id`.
    pub fn complete(&mut self, op_id: OpId, outcome: Outcome, at: Micros) {
        self.push(Event::Complete { op_id, outcome, at });
    }

    /// The operations, in invocation order, each paired with its completion.
    ///
    /// Errors: an id invoked twice, a completion without invocation (in event order), a
    /// second completion, a completion earlier than its invocation, or a result that does not
    /// fit the operation.
    pub fn operations(&self) -> Result<Vec<Operation>, Error> {
        let steps = self.events.iter().map(|e| match e {
            Event::Invoke {
                op_id,
                client,
                dc,
                key,
                op,
                at,
            } => Step::Invoke {
                op_id: *op_id,
                client: *client,
                dc: *dc,
                key,
                op,
                at: *at,
            },
            Event::Complete { op_id, outcome, at } => Step::Complete {
                op_id: *op_id,
                result: outcome,
                at: *at,
            },
        });
        let fits = |op: &Op, outcome: &Outcome| match outcome {
            Outcome::Ok(result) => matches!(
                (op, result),
                (Op::Read, OpResult::Read(_))
                    | (Op::Write { .. } | Op::Delete { .. }, OpResult::Done)
                    | (Op::Cas { .. }, OpResult::Done | OpResult::CasRejected)
            )
            .then_some(())
            .ok_or_else(|| (op.kind(), result.to_string())),
            _ => Ok(()),
        };
        let paired = pair_steps(steps, Outcome::Unknown("never completed".into()), fits)?;
        Ok(paired
            .into_iter()
            .map(|p| Operation {
                id: p.id,
                client: p.client,
                dc: p.dc,
                key: p.key,
                op: p.op,
                invoked_at: p.invoked_at,
                completed_at: p.completed_at,
                outcome: p.result,
            })
            .collect())
    }

    /// [`History::operations`] grouped by key, keys in byte order, each key's operations in
    /// invocation order.
    pub fn operations_by_key(&self) -> Result<BTreeMap<Key, Vec<Operation>>, Error> {
        let mut by_key: BTreeMap<Key, Vec<Operation>> = BTreeMap::new();
        for op in self.operations()? {
            by_key.entry(op.key.clone()).or_default().push(op);
        }
        Ok(by_key)
    }

    /// Writes the history as JSON lines, one event per line.
    pub fn save(&self, mut out: impl Write) -> Result<(), Error> {
        for event in &self.events {
            serde_json::to_writer(&mut out, event).map_err(std::io::Error::from)?;
            out.write_all(b"\n")?;
        }
        out.flush()?;
        Ok(())
    }

    /// Reads a history written by [`History::save`]; blank lines are skipped.
    pub fn load(input: impl BufRead) -> Result<History, Error> {
        let mut history = History::new();
        for (i, line) in input.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let event = serde_json::from_str(&line).map_err(|source| Error::Json {
                line: i + 1,
                source,
            })?;
            history.push(event);
        }
        Ok(history)
    }

    /// [`History::save`] to a new (or truncated) file at `path`.
    pub fn save_to_path(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let file = std::fs::File::create(path)?;
        self.save(BufWriter::new(file))
    }

    /// [`History::load`] from the file at `path`.
    pub fn load_from_path(path: impl AsRef<Path>) -> Result<History, Error> {
        let file = std::fs::File::open(path)?;
        History::load(std::io::BufReader::new(file))
    }
}

/// One event of a history, borrowed and generic over the operation type `O` and the result
/// type `R`, so every history kind (this module's, the timeline checker's) pairs invocations
/// with completions through [`pair_steps`].
pub(crate) enum Step<'a, O, R> {
    /// An invocation.
    Invoke {
        op_id: OpId,
        client: ClientId,
        dc: DcId,
        key: &'a Key,
        op: &'a O,
        at: Micros,
    },
    /// A completion.
    Complete {
        op_id: OpId,
        result: &'a R,
        at: Micros,
    },
}

/// An invocation paired with its completion (`completed_at: None` and the `never` result when
/// it never completed).
pub(crate) struct Paired<O, R> {
    pub(crate) id: OpId,
    pub(crate) client: ClientId,
    pub(crate) dc: DcId,
    pub(crate) key: Key,
    pub(crate) op: O,
    pub(crate) invoked_at: Micros,
    pub(crate) completed_at: Option<Micros>,
    pub(crate) result: R,
}

/// Pairs `steps` into operations in invocation order. `fits` says whether a result suits its
/// operation (else `Err((op kind, result text))`).
///
/// Errors: an id invoked twice, a completion without invocation (in event order), a second
/// completion, a completion earlier than its invocation, or a result that does not fit.
pub(crate) fn pair_steps<'a, O: Clone + 'a, R: Clone + 'a>(
    steps: impl IntoIterator<Item = Step<'a, O, R>>,
    never: R,
    fits: impl Fn(&O, &R) -> Result<(), (&'static str, String)>,
) -> Result<Vec<Paired<O, R>>, Error> {
    let mut ops: Vec<Paired<O, R>> = Vec::new();
    let mut index: BTreeMap<OpId, usize> = BTreeMap::new();
    for step in steps {
        match step {
            Step::Invoke {
                op_id,
                client,
                dc,
                key,
                op,
                at,
            } => {
                let Entry::Vacant(slot) = index.entry(op_id) else {
                    return Err(Error::DuplicateInvoke { op: op_id });
                };
                slot.insert(ops.len());
                ops.push(Paired {
                    id: op_id,
                    client,
                    dc,
                    key: key.clone(),
                    op: op.clone(),
                    invoked_at: at,
                    completed_at: None,
                    result: never.clone(),
                });
            }
            Step::Complete { op_id, result, at } => {
                let Some(&i) = index.get(&op_id) else {
                    return Err(Error::CompleteWithoutInvoke { op: op_id });
                };
                let operation = &mut ops[i];
                if operation.completed_at.is_some() {
                    return Err(Error::DuplicateComplete { op: op_id });
                }
                if at < operation.invoked_at {
                    return Err(Error::CompletedBeforeInvoked {
                        op: op_id,
                        invoked_at: operation.invoked_at,
                        completed_at: at,
                    });
                }
                if let Err((op_kind, result)) = fits(&operation.op, result) {
                    return Err(Error::ResultMismatch {
                        op: op_id,
                        op_kind,
                        result,
                    });
                }
                operation.completed_at = Some(at);
                operation.result = result.clone();
            }
        }
    }
    Ok(ops)
}

/// The shared, append-only history that many simulated clients record into.
///
/// Cloning is cheap (one `Arc`); every clone appends to the same history. Op ids are
/// allocated in invocation order, so a deterministic simulation records identical histories.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    history: Arc<Mutex<History>>,
}

impl Recorder {
    /// A recorder with an empty history.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// Records the invocation of `op` and returns its fresh id.
    pub fn invoke(
        &self,
        client: ClientId,
        dc: DcId,
        key: impl Into<Key>,
        op: Op,
        at: Micros,
    ) -> OpId {
        self.history.lock().invoke(client, dc, key, op, at)
    }

    /// Records the completion of `op_id`.
    pub fn complete(&self, op_id: OpId, outcome: Outcome, at: Micros) {
        self.history.lock().complete(op_id, outcome, at);
    }

    /// A copy of the history so far.
    pub fn snapshot(&self) -> History {
        self.history.lock().clone()
    }

    /// The number of events so far.
    pub fn len(&self) -> usize {
        self.history.lock().len()
    }

    /// Whether nothing has been recorded yet.
    pub fn is_empty(&self) -> bool {
        self.history.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn sample() -> History {
        let rec = Recorder::new();
        let other = rec.clone();
        let w = rec.invoke(ClientId(1), DcId(0), "k1", Op::blind_write("v1"), 10);
        let r = other.invoke(ClientId(2), DcId(1), "k1", Op::Read, 12);
        rec.complete(w, Outcome::done(), 20);
        other.complete(r, Outcome::read(["v1"]), 25);
        let d = rec.invoke(
            ClientId(1),
            DcId(0),
            Bytes::from_static(&[0xff, 0]),
            Op::delete([Bytes::from_static(b"\x80")]),
            30,
        );
        rec.complete(d, Outcome::unknown("timeout"), 1_030);
        let c = rec.invoke(ClientId(3), DcId(1), "k2", Op::cas(None::<Value>, "v2"), 40);
        rec.complete(c, Outcome::cas_rejected(), 41);
        rec.invoke(ClientId(4), DcId(1), "k2", Op::write("v3", ["v2"]), 50);
        rec.snapshot()
    }

    #[test]
    fn json_lines_round_trip_readably() {
        let history = sample();
        let mut out = Vec::new();
        history.save(&mut out).unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), history.len());
        assert_eq!(
            lines[0],
            r#"{"event":"invoke","op_id":0,"client":1,"dc":0,"key":"k1","op":{"type":"write","value":"v1","supersedes":[]},"at":10}"#
        );
        assert_eq!(
            lines[3],
            r#"{"event":"complete","op_id":1,"outcome":{"ok":{"read":["v1"]}},"at":25}"#
        );
        assert!(lines[4].contains(r#""key":"hex:ff00""#), "{}", lines[4]);
        assert!(
            lines[4].contains(r#""supersedes":["hex:80"]"#),
            "{}",
            lines[4]
        );
        assert!(
            lines[5].contains(r#"{"unknown":"timeout"}"#),
            "{}",
            lines[5]
        );
        assert!(lines[6].contains(r#""expected":null"#), "{}", lines[6]);
        let loaded = History::load(&out[..]).unwrap();
        assert_eq!(loaded, history);
        let mut again = Vec::new();
        loaded.save(&mut again).unwrap();
        assert_eq!(again, out, "saving is deterministic");
    }

    #[test]
    fn save_to_path_and_back() {
        let history = sample();
        let dir = std::env::temp_dir().join(format!("meridian-sim-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("history.jsonl");
        history.save_to_path(&path).unwrap();
        assert_eq!(History::load_from_path(&path).unwrap(), history);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn load_reports_the_bad_line() {
        let input = "\n{\"event\":\"complete\",\"op_id\":1,\"outcome\":{\"ok\":\"done\"},\"at\":3}\n{oops}\n";
        match History::load(input.as_bytes()) {
            Err(Error::Json { line: 3, .. }) => {}
            other => panic!("expected a JSON error on line 3, got {other:?}"),
        }
        let bad_hex = r#"{"event":"invoke","op_id":0,"client":1,"dc":0,"key":"hex:zz","op":{"type":"read"},"at":1}"#;
        assert!(matches!(
            History::load(bad_hex.as_bytes()),
            Err(Error::Json { line: 1, .. })
        ));
    }

    #[test]
    fn operations_pair_events_and_mark_pending_as_unknown() {
        let ops = sample().operations().unwrap();
        assert_eq!(ops.len(), 5);
        assert_eq!(ops[0].completed_at, Some(20));
        assert!(ops[0].is_acknowledged());
        assert_eq!(ops[1].read_values(), Some(&[Bytes::from("v1")][..]));
        assert!(
            !ops[3].is_acknowledged(),
            "a rejected cas is not acknowledged"
        );
        assert_eq!(ops[4].completed_at, None);
        assert!(matches!(ops[4].outcome, Outcome::Unknown(_)));
        let by_key = sample().operations_by_key().unwrap();
        let keys: Vec<&[u8]> = by_key.keys().map(|k| &k[..]).collect();
        assert_eq!(keys, vec![&b"k1"[..], b"k2", &[0xff, 0]]);
        assert_eq!(
            ops[0].to_string(),
            "op0 (c1 in dc0: blind write \"v1\", invoked at 10µs, completed at 20µs, acknowledged)"
        );
        assert_eq!(
            ops[4].to_string(),
            "op4 (c4 in dc1: write \"v3\" superseding {\"v2\"}, invoked at 50µs, never completed)"
        );
    }

    #[test]
    fn malformed_histories_are_rejected() {
        let mut h = History::new();
        let a = h.invoke(ClientId(1), DcId(0), "k", Op::Read, 10);
        h.push(Event::Invoke {
            op_id: a,
            client: ClientId(1),
            dc: DcId(0),
            key: "k".into(),
            op: Op::Read,
            at: 11,
        });
        assert!(matches!(h.operations(), Err(Error::DuplicateInvoke { .. })));

        let mut h = History::new();
        h.complete(OpId(7), Outcome::done(), 3);
        assert!(matches!(
            h.operations(),
            Err(Error::CompleteWithoutInvoke { .. })
        ));

        let mut h = History::new();
        let a = h.invoke(ClientId(1), DcId(0), "k", Op::Read, 10);
        h.complete(a, Outcome::read(["x"]), 12);
        h.complete(a, Outcome::read(["x"]), 13);
        assert!(matches!(
            h.operations(),
            Err(Error::DuplicateComplete { .. })
        ));

        let mut h = History::new();
        let a = h.invoke(ClientId(1), DcId(0), "k", Op::Read, 10);
        h.complete(a, Outcome::read(["x"]), 9);
        assert!(matches!(
            h.operations(),
            Err(Error::CompletedBeforeInvoked { .. })
        ));

        let mut h = History::new();
        let a = h.invoke(ClientId(1), DcId(0), "k", Op::Read, 10);
        h.complete(a, Outcome::done(), 12);
        let err = h.operations().unwrap_err();
        assert_eq!(err.to_string(), "op0: a read cannot return acknowledged");
    }
}
