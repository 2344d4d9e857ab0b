//! Model tests: random operation sequences applied to an engine and to a `BTreeMap` of every
//! version ever written; any difference is a bug.
//!
//! Keys come from a tiny alphabet with `0x00` and `0xFF` bytes, so the same keys are hit
//! again and again and their encodings sit next to each other. Once a gc horizon exists, reads
//! are compared only at or above the highest horizon (modulo buried tombstones, see
//! [`assert_get`]), and writes go above it: the horizon promises nobody reads below it, and a
//! write below it may meet a tombstone that gc already removed.

use super::common::*;
use bytes::Bytes;
use meridian_core::Timestamp;
use meridian_storage::{Durability, MemEngine, WriteBatch, WriteOp};
use proptest::prelude::*;
use std::ops::Bound;

/// One step of a sequence. Timestamps of writes and reads are relative to the current
/// horizon, so the sequence stays meaningful after gc.
#[derive(Clone, Debug)]
enum Op {
    Put(Bytes, u64, Bytes),
    Delete(Bytes, u64),
    Batch(Vec<(Bytes, u64, Option<Bytes>)>),
    Get(Bytes, u64),
    Scan {
        start: Bound<Bytes>,
        end: Bound<Bytes>,
        at: u64,
        limit: usize,
        include_tombstones: bool,
    },
    Versions(Bytes),
    /// gc at the current horizon plus this much.
    Gc(u64),
    /// `set_gc_horizon` at the current horizon plus this much.
    SetHorizon(u64),
    Clear,
    /// Close and reopen (durable engines only).
    Reopen,
    /// Move the memtable to a disk table (durable engines only).
    ToDisk,
}

fn key() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(prop::sample::select(vec![0x00u8, 0x01, b'a', 0xFF]), 0..4)
        .prop_map(Bytes::from)
}

fn value() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..6).prop_map(Bytes::from),
        1 => (0usize..3).prop_map(|n| Bytes::from(vec![7u8; 5000 * n])),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Bytes>> {
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => key().prop_map(Bound::Included),
        2 => key().prop_map(Bound::Excluded),
    ]
}

/// One operation; `Reopen` and `ToDisk` do nothing to engines without a disk.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (key(), 0u64..12, value()).prop_map(|(k, t, v)| Op::Put(k, t, v)),
        4 => (key(), 0u64..12).prop_map(|(k, t)| Op::Delete(k, t)),
        4 => prop::collection::vec((key(), 0u64..12, prop::option::weighted(0.7, value())), 0..6)
            .prop_map(Op::Batch),
        8 => (key(), 0u64..16).prop_map(|(k, t)| Op::Get(k, t)),
        4 => (bound(), bound(), 0u64..16, 0usize..6, any::<bool>()).prop_map(
            |(start, end, at, limit, include_tombstones)| Op::Scan {
                start,
                end,
                at,
                limit,
                include_tombstones,
            }
        ),
        2 => key().prop_map(Op::Versions),
        2 => (0u64..8).prop_map(Op::Gc),
        1 => (0u64..8).prop_map(Op::SetHorizon),
        1 => Just(Op::Clear),
        2 => Just(Op::Reopen),
        2 => Just(Op::ToDisk),
    ]
}

/// Applies `ops` to the engine of `h` and to the model, comparing after every step.
fn run(h: &mut dyn Harness, ops: &[Op]) {
    let mut m = Model::new();
    // The highest horizon given to the engine; 0 = none yet.
    let mut horizon = 0u64;
    // Writes land strictly above the horizon once there is one; reads at or above it.
    let write_ts = |horizon: u64, t: u64| ts(if horizon == 0 { t } else { horizon + 1 + t });
    let read_ts = |horizon: u64, t: u64| ts(horizon + t);
    for (step, op) in ops.iter().enumerate() {
        let e = h.engine();
        let h_ts = Timestamp(horizon);
        match op {
            Op::Put(k, t, v) => {
                let t = write_ts(horizon, *t);
                model_apply(
                    &mut m,
                    &WriteOp::Put {
                        key: k.clone(),
                        ts: t,
                        value: v.clone(),
                    },
                );
                e.put(k.clone(), t, v.clone()).unwrap();
            }
            Op::Delete(k, t) => {
                let t = write_ts(horizon, *t);
                model_apply(
                    &mut m,
                    &WriteOp::Delete {
                        key: k.clone(),
                        ts: t,
                    },
                );
                e.delete(k.clone(), t).unwrap();
            }
            Op::Batch(writes) => {
                let mut batch = WriteBatch::new();
                for (k, t, v) in writes {
                    let t = write_ts(horizon, *t);
                    match v {
                        Some(v) => batch.put(k.clone(), t, v.clone()),
                        None => batch.delete(k.clone(), t),
                    };
                }
                for op in &batch.ops {
                    model_apply(&mut m, op);
                }
                e.write_batch(batch).unwrap();
            }
            Op::Get(k, t) => {
                let at = read_ts(horizon, *t);
                assert_get(&m, k, at, h_ts, e.get(k, at).unwrap());
                assert_eq!(
                    e.get_value(k, at).unwrap(),
                    model_get(&m, k, at).and_then(|v| v.value),
                    "step {step}: get_value({k:?}, {at:?})"
                );
            }
            Op::Scan {
                start,
                end,
                at,
                limit,
                include_tombstones,
            } => {
                let at = read_ts(horizon, *at);
                let got = e
                    .scan(start.clone(), end.clone(), at, *limit, *include_tombstones)
                    .unwrap();
                assert_scan(&m, start, end, at, *limit, *include_tombstones, h_ts, &got);
            }
            Op::Versions(k) => {
                let got = e.versions(k).unwrap();
                let want: Vec<_> = m
                    .get(k)
                    .map(|c| {
                        c.iter()
                            .map(|(t, v)| meridian_storage::Version {
                                ts: *t,
                                value: v.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                // Every version above the horizon is there; below it, only model versions.
                let above = |vs: &[meridian_storage::Version]| {
                    vs.iter()
                        .filter(|v| v.ts > h_ts)
                        .cloned()
                        .collect::<Vec<_>>()
                };
                assert_eq!(above(&got), above(&want), "step {step}: versions({k:?})");
                assert!(got.iter().all(|v| want.contains(v)), "step {step}: {got:?}");
                assert!(got.windows(2).all(|w| w[0].ts < w[1].ts), "oldest first");
            }
            Op::Gc(d) => {
                horizon += d;
                e.gc(Timestamp(horizon)).unwrap();
            }
            Op::SetHorizon(d) => {
                horizon += d;
                e.set_gc_horizon(Timestamp(horizon));
            }
            Op::Clear => {
                m.clear();
                e.clear().unwrap();
            }
            Op::Reopen => {
                // The horizon is not persisted, which is allowed: it only permits pruning.
                h.reopen();
            }
            Op::ToDisk => h.to_disk(),
        }
        assert_eq!(
            h.engine().stats().live_keys,
            model_live(&m),
            "step {step}: live_keys after {op:?}"
        );
    }
    // A final full comparison at the horizon and at the top.
    let e = h.engine();
    for at in [ts(horizon), Timestamp::MAX] {
        for tombs in [false, true] {
            let got = e
                .scan(Bound::Unbounded, Bound::Unbounded, at, usize::MAX, tombs)
                .unwrap();
            assert_scan(
                &m,
                &Bound::Unbounded,
                &Bound::Unbounded,
                at,
                usize::MAX,
                tombs,
                ts(horizon),
                &got,
            );
        }
    }
}

/// The number of cases: `default`, or `PROPTEST_CASES` for longer soak runs.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn mem_engine_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(&mut MemEngine::new(), &ops);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(96), ..ProptestConfig::default() })]

    #[test]
    fn fjall_engine_matches_the_model(
        ops in prop::collection::vec(op(), 1..60),
        durability in prop::sample::select(vec![
            Durability::Always,
            Durability::Everysec,
            Durability::Never,
        ]),
    ) {
        run(&mut FjallHarness::new(durability), &ops);
    }
}
