//! Transaction histories in Elle's JSON-lines form, for the snapshot-isolation checker
//! ([`super::si`]).
//!
//! One event per line, as Elle (and `adya`, `elle-cli`) read and write them:
//!
//! ```text
//! {"type":"invoke","process":0,"f":"txn","value":[["append",1,3],["r",2,null]],"time":10,"index":0}
//! {"type":"ok","process":0,"f":"txn","value":[["append",1,3],["r",2,[1,4]]],"time":25,"index":1,"commit_ts":7,"snapshot_ts":5}
//! ```
//!
//! Keys and values are integers. Micro-operations are `["append",k,v]` and `["r",k,[v...]]`
//! (list-append), or `["w",k,v]` and `["r",k,v]` (rw-register); a read's value is `null`
//! in an invocation (not known yet), and in an `ok` rw-register read it means the initial
//! nil. `commit_ts` and `snapshot_ts` are Meridian's optional extensions on the completion
//! (the timestamps the transaction committed at and read at); other tools ignore them.
//!
//! Each process runs one transaction at a time: an `invoke` is completed by the process's
//! next event, `ok` (committed), `fail` (certainly aborted) or `info` (outcome unknown); an
//! invocation never completed is treated as `info`. Lines whose `f` is not `txn` (a
//! nemesis, say) are skipped on load.

use crate::error::Error;
use serde::de::{self, Deserializer};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

/// The value a read returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadValue {
    /// A list-append read: the whole list.
    List(Vec<i64>),
    /// An rw-register read: one value.
    Register(i64),
}

/// One micro-operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mop {
    /// `["append", key, value]`: list-append.
    Append {
        /// The key.
        key: i64,
        /// The element appended (unique per key across the history).
        value: i64,
    },
    /// `["w", key, value]`: rw-register.
    Write {
        /// The key.
        key: i64,
        /// The value written (unique per key across the history).
        value: i64,
    },
    /// `["r", key, value]`: `None` is JSON `null` (unknown in an invocation; the initial
    /// nil in a completed rw-register read, the empty list in a list-append one).
    Read {
        /// The key.
        key: i64,
        /// What was read.
        value: Option<ReadValue>,
    },
}

impl Mop {
    /// `["append", key, value]`.
    pub fn append(key: i64, value: i64) -> Mop {
        Mop::Append { key, value }
    }

    /// `["w", key, value]`.
    pub fn write(key: i64, value: i64) -> Mop {
        Mop::Write { key, value }
    }

    /// `["r", key, null]`: a read whose result is not known (an invocation's).
    pub fn read(key: i64) -> Mop {
        Mop::Read { key, value: None }
    }

    /// `["r", key, [values...]]`: a list-append read.
    pub fn read_list(key: i64, values: &[i64]) -> Mop {
        Mop::Read {
            key,
            value: Some(ReadValue::List(values.to_vec())),
        }
    }

    /// `["r", key, value]`, `None` meaning nil: an rw-register read.
    pub fn read_register(key: i64, value: Option<i64>) -> Mop {
        Mop::Read {
            key,
            value: value.map(ReadValue::Register),
        }
    }

    /// The key it touches.
    pub fn key(&self) -> i64 {
        match self {
            Mop::Append { key, .. } | Mop::Write { key, .. } | Mop::Read { key, .. } => *key,
        }
    }

    /// The same micro-operation as an invocation carries it (a read's result unknown).
    pub fn as_invoked(&self) -> Mop {
        match self {
            Mop::Read { key, .. } => Mop::read(*key),
            other => other.clone(),
        }
    }
}

impl Serialize for Mop {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(3))?;
        match self {
            Mop::Append { key, value } => {
                seq.serialize_element("append")?;
                seq.serialize_element(key)?;
                seq.serialize_element(value)?;
            }
            Mop::Write { key, value } => {
                seq.serialize_element("w")?;
                seq.serialize_element(key)?;
                seq.serialize_element(value)?;
            }
            Mop::Read { key, value } => {
                seq.serialize_element("r")?;
                seq.serialize_element(key)?;
                match value {
                    None => seq.serialize_element(&())?,
                    Some(ReadValue::List(list)) => seq.serialize_element(list)?,
                    Some(ReadValue::Register(v)) => seq.serialize_element(v)?,
                }
            }
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for Mop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Mop, D::Error> {
        let (f, key, value): (String, i64, serde_json::Value) = Deserialize::deserialize(d)?;
        let int = |v: &serde_json::Value| {
            v.as_i64()
                .ok_or_else(|| de::Error::custom(format!("expected an integer, found {v}")))
        };
        match f.as_str() {
            "append" => Ok(Mop::Append {
                key,
                value: int(&value)?,
            }),
            "w" => Ok(Mop::Write {
                key,
                value: int(&value)?,
            }),
            "r" => {
                let value = match &value {
                    serde_json::Value::Null => None,
                    serde_json::Value::Array(items) => Some(ReadValue::List(
                        items.iter().map(int).collect::<Result<_, _>>()?,
                    )),
                    other => Some(ReadValue::Register(int(other)?)),
                };
                Ok(Mop::Read { key, value })
            }
            other => Err(de::Error::custom(format!(
                "unknown micro-operation {other:?} (expected append, w or r)"
            ))),
        }
    }
}

/// An event's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// The transaction starts.
    Invoke,
    /// It committed.
    Ok,
    /// It certainly aborted.
    Fail,
    /// Its outcome is unknown.
    Info,
}

fn txn_f() -> String {
    "txn".to_string()
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Mop>, D::Error> {
    Ok(Option::<Vec<Mop>>::deserialize(d)?.unwrap_or_default())
}

/// One line of an Elle history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnEvent {
    /// `invoke`, `ok`, `fail` or `info`.
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The logical process (one transaction at a time each).
    pub process: u64,
    /// Always `txn` for transactions.
    #[serde(default = "txn_f")]
    pub f: String,
    /// The micro-operations (reads unknown in an invocation).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub value: Vec<Mop>,
    /// When it happened, in nanoseconds.
    #[serde(default)]
    pub time: u64,
    /// Its position in the history.
    #[serde(default)]
    pub index: u64,
    /// Meridian extension (on `ok`): the commit timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ts: Option<u64>,
    /// Meridian extension (on `ok`): the snapshot timestamp the transaction read at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_ts: Option<u64>,
}

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnStatus {
    /// `ok`: it committed.
    Committed,
    /// `fail`: it certainly did not commit.
    Aborted,
    /// `info`, or never completed: it may or may not have committed.
    Unknown,
}

/// One transaction: an invocation paired with its completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    /// Its position in [`TxnHistory::txns`] (invocation order); anomalies name it `T<id>`.
    pub id: usize,
    /// Its process.
    pub process: u64,
    /// How it ended.
    pub status: TxnStatus,
    /// Its micro-operations: the completion's (with the reads' results) when it has them,
    /// else the invocation's.
    pub ops: Vec<Mop>,
    /// The invocation's `index`.
    pub invoke_index: u64,
    /// The completion's `index`, if it completed.
    pub complete_index: Option<u64>,
    /// The invocation's `time`.
    pub invoked_at: u64,
    /// The completion's `time`, if it completed.
    pub completed_at: Option<u64>,
    /// The commit timestamp, if the history carries one.
    pub commit_ts: Option<u64>,
    /// The snapshot timestamp, if the history carries one.
    pub snapshot_ts: Option<u64>,
}

impl Txn {
    /// Whether it writes (appends to or writes) anything.
    pub fn writes(&self) -> bool {
        self.ops.iter().any(|m| !matches!(m, Mop::Read { .. }))
    }
}

/// A transaction history: Elle events in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnHistory {
    /// The events, in history order.
    pub events: Vec<TxnEvent>,
}

impl TxnHistory {
    /// An empty history.
    pub fn new() -> TxnHistory {
        TxnHistory::default()
    }

    /// Appends an event as given.
    pub fn push(&mut self, event: TxnEvent) {
        self.events.push(event);
    }

    /// Appends an event of `kind` for `process` (`index` = its position, `time` as given)
    /// and returns it, so that timestamps can be set on it.
    pub fn record(
        &mut self,
        kind: EventType,
        process: u64,
        value: Vec<Mop>,
        time: u64,
    ) -> &mut TxnEvent {
        let index = self.events.len() as u64;
        self.events.push(TxnEvent {
            kind,
            process,
            f: txn_f(),
            value,
            time,
            index,
            commit_ts: None,
            snapshot_ts: None,
        });
        let last = self.events.len() - 1;
        &mut self.events[last]
    }

    /// Records the invocation of `ops` by `process` (reads' results blanked).
    pub fn invoke(&mut self, process: u64, ops: &[Mop], time: u64) {
        let ops = ops.iter().map(Mop::as_invoked).collect();
        self.record(EventType::Invoke, process, ops, time);
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

    /// The history as one JSON-lines string.
    pub fn to_jsonl(&self) -> String {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail, and the events always serialize.
        if self.save(&mut out).is_err() {
            return String::new();
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Reads a JSON-lines history; blank lines and events whose `f` is not `txn` are
    /// skipped.
    pub fn load(input: impl BufRead) -> Result<TxnHistory, Error> {
        let mut history = TxnHistory::new();
        for (i, line) in input.lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let json = |source| Error::Json {
                line: i + 1,
                source,
            };
            let raw: serde_json::Value = serde_json::from_str(&line).map_err(json)?;
            if raw
                .get("f")
                .and_then(|f| f.as_str())
                .is_some_and(|f| f != "txn")
            {
                continue;
            }
            history.push(serde_json::from_value(raw).map_err(json)?);
        }
        Ok(history)
    }

    /// [`TxnHistory::load`] from a string.
    pub fn from_jsonl(text: &str) -> Result<TxnHistory, Error> {
        TxnHistory::load(text.as_bytes())
    }

    /// Pairs invocations with completions into transactions, in invocation order.
    ///
    /// Fails if a process invokes while its previous transaction is open, or completes
    /// with nothing open.
    pub fn txns(&self) -> Result<Vec<Txn>, Error> {
        let mut txns: Vec<Txn> = Vec::new();
        let mut open: BTreeMap<u64, usize> = BTreeMap::new();
        for (pos, e) in self.events.iter().enumerate() {
            let bad = |reason: String| Error::TxnHistory {
                index: if e.index == 0 { pos as u64 } else { e.index },
                reason,
            };
            match e.kind {
                EventType::Invoke => {
                    if let Some(&t) = open.get(&e.process) {
                        return Err(bad(format!(
                            "process {} invokes while its transaction invoked at index {} is \
                             still open",
                            e.process, txns[t].invoke_index
                        )));
                    }
                    open.insert(e.process, txns.len());
                    txns.push(Txn {
                        id: txns.len(),
                        process: e.process,
                        status: TxnStatus::Unknown,
                        ops: e.value.clone(),
                        invoke_index: e.index,
                        complete_index: None,
                        invoked_at: e.time,
                        completed_at: None,
                        commit_ts: e.commit_ts,
                        snapshot_ts: e.snapshot_ts,
                    });
                }
                EventType::Ok | EventType::Fail | EventType::Info => {
                    let Some(t) = open.remove(&e.process) else {
                        return Err(bad(format!(
                            "process {} completes a transaction it never invoked",
                            e.process
                        )));
                    };
                    let txn = &mut txns[t];
                    txn.status = match e.kind {
                        EventType::Ok => TxnStatus::Committed,
                        EventType::Fail => TxnStatus::Aborted,
                        _ => TxnStatus::Unknown,
                    };
                    if e.kind == EventType::Ok || !e.value.is_empty() {
                        txn.ops = e.value.clone();
                    }
                    txn.complete_index = Some(e.index);
                    txn.completed_at = Some(e.time);
                    txn.commit_ts = e.commit_ts.or(txn.commit_ts);
                    txn.snapshot_ts = e.snapshot_ts.or(txn.snapshot_ts);
                }
            }
        }
        Ok(txns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mops_serialize_as_elle_writes_them() {
        let ops = vec![
            Mop::append(1, 2),
            Mop::read_list(1, &[2, 3]),
            Mop::read(4),
            Mop::write(5, 6),
            Mop::read_register(5, Some(6)),
        ];
        let text = serde_json::to_string(&ops).unwrap();
        assert_eq!(
            text,
            r#"[["append",1,2],["r",1,[2,3]],["r",4,null],["w",5,6],["r",5,6]]"#
        );
        let back: Vec<Mop> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ops);
        assert!(serde_json::from_str::<Mop>(r#"["cas",1,2]"#).is_err());
        assert!(serde_json::from_str::<Mop>(r#"["w",1,"x"]"#).is_err());
    }

    #[test]
    fn jsonl_round_trip_and_pairing() {
        let mut h = TxnHistory::new();
        let ops = [Mop::append(1, 1), Mop::read_list(2, &[])];
        h.invoke(0, &ops, 10);
        h.invoke(1, &[Mop::write(3, 1)], 11);
        let ok = h.record(EventType::Ok, 0, ops.to_vec(), 20);
        ok.commit_ts = Some(7);
        ok.snapshot_ts = Some(5);
        h.record(EventType::Fail, 1, vec![Mop::write(3, 1)], 21);
        h.invoke(2, &[Mop::read(3)], 30);
        let text = h.to_jsonl();
        assert_eq!(text.lines().count(), 5);
        assert!(text.lines().nth(2).unwrap().contains(r#""commit_ts":7"#));
        let back = TxnHistory::from_jsonl(&format!(
            "{text}\n{{\"type\":\"info\",\"process\":\"nemesis\",\"f\":\"start\",\"value\":null}}\n"
        ))
        .unwrap();
        assert_eq!(back, h);
        let txns = back.txns().unwrap();
        assert_eq!(txns.len(), 3);
        assert_eq!(txns[0].status, TxnStatus::Committed);
        assert_eq!(txns[0].ops, ops.to_vec());
        assert_eq!((txns[0].commit_ts, txns[0].snapshot_ts), (Some(7), Some(5)));
        assert_eq!(txns[1].status, TxnStatus::Aborted);
        assert_eq!(txns[2].status, TxnStatus::Unknown);
        assert_eq!(txns[2].completed_at, None);
    }

    #[test]
    fn bad_pairing_and_bad_lines_are_errors() {
        let mut h = TxnHistory::new();
        h.invoke(0, &[Mop::read(1)], 0);
        h.invoke(0, &[Mop::read(1)], 1);
        assert!(matches!(h.txns(), Err(Error::TxnHistory { index: 1, .. })));
        let mut h = TxnHistory::new();
        h.record(EventType::Ok, 3, vec![], 0);
        assert!(h.txns().is_err());
        let err =
            TxnHistory::from_jsonl("{\"type\":\"invoke\",\"process\":0,\"value\":[[\"r\"]]}\n")
                .unwrap_err();
        assert!(matches!(err, Error::Json { line: 1, .. }), "{err}");
    }
}
