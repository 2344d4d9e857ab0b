//! Crash tests: a writer process is killed with SIGKILL, and what it acknowledged must be
//! there when the engine is reopened.
//!
//! The writer is this very test binary, re-executed with [`WRITER_DIR`] set: the test
//! [`crash_writer`] then opens a [`FjallEngine`] on that directory, writes forever (single puts
//! and small batches), and prints `ack <n>` on stdout after each write returns. Run normally,
//! that test does nothing.

use super::common::*;
use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_storage::{Durability, Engine, WriteBatch};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::ops::Bound;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Directory the writer process writes to; its presence makes [`crash_writer`] a writer.
const WRITER_DIR: &str = "MERIDIAN_CRASH_WRITER_DIR";
/// The writer's durability policy.
const WRITER_POLICY: &str = "MERIDIAN_CRASH_WRITER_POLICY";
/// The first write number of the writer.
const WRITER_START: &str = "MERIDIAN_CRASH_WRITER_START";

/// Write number `n` is a batch of this many keys when `n` is a multiple of [`BATCH_EVERY`],
/// else a single put.
const BATCH_KEYS: u64 = 4;
const BATCH_EVERY: u64 = 3;

/// The keys write number `n` writes (its version is at timestamp `n`).
fn keys_of(n: u64) -> Vec<Bytes> {
    if n.is_multiple_of(BATCH_EVERY) {
        (0..BATCH_KEYS).map(|j| b(format!("b{n:08}-{j}"))).collect()
    } else {
        vec![b(format!("p{n:08}"))]
    }
}

/// The value write number `n` stores under `key`: self-describing, and sometimes large enough
/// to be compressed in the journal.
fn value_of(n: u64, key: &[u8]) -> Bytes {
    let mut v = key.to_vec();
    v.extend_from_slice(format!("={n}").as_bytes());
    if n.is_multiple_of(7) {
        v.resize(6000, (n % 251) as u8);
    }
    Bytes::from(v)
}

/// The writer loop, run in the child process. Never returns.
fn write_forever(dir: &Path, durability: Durability, start: u64) -> ! {
    let e = open_fjall(dir, durability);
    let mut out = std::io::stdout().lock();
    for n in start.. {
        let keys = keys_of(n);
        if keys.len() == 1 {
            let v = value_of(n, &keys[0]);
            e.put(keys[0].clone(), Timestamp(n), v).unwrap();
        } else {
            let mut batch = WriteBatch::new();
            for k in &keys {
                batch.put(k.clone(), Timestamp(n), value_of(n, k));
            }
            e.write_batch(batch).unwrap();
        }
        // If the parent is gone, stop rather than write forever.
        if writeln!(out, "ack {n}").and_then(|()| out.flush()).is_err() {
            std::process::exit(1);
        }
    }
    unreachable!("the writer runs until it is killed")
}

/// The child side: a writer when [`WRITER_DIR`] is set, otherwise nothing.
#[test]
fn crash_writer() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let policy: Durability = std::env::var(WRITER_POLICY).unwrap().parse().unwrap();
    let start: u64 = std::env::var(WRITER_START).unwrap().parse().unwrap();
    write_forever(Path::new(&dir), policy, start);
}

/// A child process that is killed when dropped, so a failing test leaves no writer behind.
struct Writer(Child);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a writer on `dir`, reads `acks` acknowledgements, kills it with SIGKILL, and
/// returns every write number it acknowledged (including those still in the pipe).
fn run_writer_and_kill(dir: &Path, durability: Durability, start: u64, acks: usize) -> Vec<u64> {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--exact",
            "crash::crash_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WRITER_DIR, dir)
        .env(WRITER_POLICY, durability.to_string())
        .env(WRITER_START, start.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut writer = Writer(child);
    let mut stdout = BufReader::new(writer.0.stdout.take().unwrap());
    let mut acked = Vec::new();
    let mut line = String::new();
    let parse = |line: &str| {
        line.trim()
            .strip_prefix("ack ")
            .map(|n| n.parse::<u64>().unwrap())
    };
    while acked.len() < acks {
        line.clear();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            let _ = writer.0.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the writer exited after {} acks: {err}", acked.len());
        }
        acked.extend(parse(&line));
    }
    // SIGKILL: no destructor, no flush, no fsync runs in the writer.
    writer.0.kill().unwrap();
    let status = writer.0.wait().unwrap();
    assert!(!status.success(), "the writer was killed");
    // What it printed before dying was acknowledged too.
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    acked.extend(rest.lines().filter_map(parse));
    acked
}

/// Every write `n` either is entirely there with its values, or entirely absent; returns the
/// write numbers present.
fn present_writes(e: &dyn Engine) -> BTreeSet<u64> {
    let all = e
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            usize::MAX,
            true,
        )
        .unwrap();
    let mut present = BTreeSet::new();
    for (k, v) in &all {
        let n = v.ts.0;
        assert!(keys_of(n).contains(k), "unexpected key {k:?} at {n}");
        assert_eq!(v.value.as_ref(), Some(&value_of(n, k)), "value of {k:?}");
        present.insert(n);
    }
    for n in &present {
        for k in keys_of(*n) {
            assert!(
                all.iter().any(|(key, _)| *key == k),
                "write {n} is there without its batch-mate {k:?}"
            );
        }
    }
    assert_eq!(e.stats().live_keys, all.len() as u64);
    present
}

/// Kills writers repeatedly and checks recovery: every acknowledged write is there (the
/// policy is `Always`; for the others, whatever reached the OS survives a process crash, which
/// fjall's journal guarantees too), batches are whole, and what is there is a prefix of the
/// writes.
fn crash_rounds(durability: Durability, rounds: usize, acks: usize) {
    let dir = tempfile::tempdir().unwrap();
    let mut start = 1;
    let mut all_acked = BTreeSet::new();
    for round in 0..rounds {
        let acked = run_writer_and_kill(dir.path(), durability, start, acks);
        assert!(acked.len() >= acks);
        all_acked.extend(acked.iter().copied());
        let e = open_fjall(dir.path(), durability);
        let present = present_writes(&e);
        let missing: Vec<_> = all_acked.difference(&present).collect();
        assert!(
            missing.is_empty(),
            "{durability}, round {round}: acknowledged writes lost: {missing:?}"
        );
        // The writer writes in order, so what survives is a prefix of what it attempted,
        // possibly longer than what it acknowledged.
        let last = *present.last().unwrap();
        assert_eq!(
            present.len() as u64,
            last,
            "{durability}: a hole in {present:?}"
        );
        drop(e);
        start = last + 1;
    }
}

#[test]
fn acknowledged_writes_survive_sigkill_with_always() {
    crash_rounds(Durability::Always, 3, 300);
}

#[test]
fn writes_survive_sigkill_whole_with_everysec() {
    crash_rounds(Durability::Everysec, 2, 300);
}

#[test]
fn writes_survive_sigkill_whole_with_never() {
    crash_rounds(Durability::Never, 2, 300);
}
