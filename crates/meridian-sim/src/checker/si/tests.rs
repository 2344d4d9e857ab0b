//! Tests of the snapshot-isolation checker: hand-built histories with known anomalies and
//! property tests over generated ones.

use super::*;
use crate::checker::txn_history::EventType;
use proptest::prelude::*;

/// One transaction of a hand-made history: process, completed micro-ops, outcome and
/// optional (snapshot_ts, commit_ts).
type Spec = (u64, Vec<Mop>, EventType, Option<(u64, u64)>);

fn history(specs: &[Spec]) -> TxnHistory {
    let mut h = TxnHistory::new();
    for (i, (p, ops, kind, ts)) in specs.iter().enumerate() {
        let t = 10 * i as u64;
        h.invoke(*p, ops, t);
        let e = h.record(*kind, *p, ops.clone(), t + 5);
        if let Some((s, c)) = ts {
            e.snapshot_ts = Some(*s);
            e.commit_ts = Some(*c);
        }
    }
    h
}

fn ok(p: u64, ops: Vec<Mop>) -> Spec {
    (p, ops, EventType::Ok, None)
}

fn check_all(specs: &[Spec]) -> [SiReport; 3] {
    let h = history(specs);
    [
        Model::SnapshotIsolation,
        Model::StrongSessionSnapshotIsolation,
        Model::Serializable,
    ]
    .map(|m| check(&h, m).unwrap())
}

fn si(specs: &[Spec]) -> SiReport {
    check(&history(specs), Model::SnapshotIsolation).unwrap()
}

fn r(k: i64, v: &[i64]) -> Mop {
    Mop::read_list(k, v)
}

fn rr(k: i64, v: Option<i64>) -> Mop {
    Mop::read_register(k, v)
}

#[test]
fn valid_list_append_history_passes_every_model() {
    let reports = check_all(&[
        ok(0, vec![Mop::append(1, 1)]),
        ok(1, vec![r(1, &[1]), Mop::append(1, 2), r(1, &[1, 2])]),
        ok(2, vec![r(1, &[1, 2]), r(2, &[])]),
        (3, vec![Mop::append(2, 9)], EventType::Fail, None),
        ok(0, vec![Mop::append(2, 3), r(2, &[3])]),
    ]);
    for rep in &reports {
        assert!(rep.valid && rep.anomalies.is_empty(), "{rep}");
        assert_eq!(rep.workload, Workload::ListAppend);
    }
}

#[test]
fn valid_register_history_passes_every_model() {
    let reports = check_all(&[
        ok(0, vec![rr(1, None), Mop::write(1, 1)]),
        ok(1, vec![rr(1, Some(1)), Mop::write(1, 2), rr(1, Some(2))]),
        ok(2, vec![rr(1, Some(2)), rr(2, None)]),
    ]);
    for rep in &reports {
        assert!(rep.valid && rep.anomalies.is_empty(), "{rep}");
        assert_eq!(rep.workload, Workload::RwRegister);
    }
}

#[test]
fn internal_inconsistency_is_caught() {
    let rep = si(&[ok(0, vec![Mop::append(1, 1), r(1, &[])])]);
    assert!(!rep.valid && rep.has(AnomalyKind::Internal), "{rep}");
    let rep = si(&[
        ok(0, vec![Mop::write(1, 1), rr(1, Some(2))]),
        ok(1, vec![Mop::write(1, 2)]),
    ]);
    assert!(rep.has(AnomalyKind::Internal), "{rep}");
    assert_eq!(rep.anomalies[0].txns, vec![0]);
}

#[test]
fn g0_write_cycle_is_caught() {
    let rep = si(&[
        ok(0, vec![Mop::append(1, 1), Mop::append(2, 2)]),
        ok(1, vec![Mop::append(1, 3), Mop::append(2, 4)]),
        ok(2, vec![r(1, &[1, 3]), r(2, &[4, 2])]),
    ]);
    assert!(!rep.valid && rep.has(AnomalyKind::G0), "{rep}");
    let g0 = rep
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::G0)
        .unwrap();
    assert_eq!(g0.txns, vec![0, 1]);
    assert!(
        g0.explanation
            .contains("T0 -ww(key 1)-> T1 -ww(key 2)-> T0"),
        "{g0}"
    );
}

#[test]
fn g1a_aborted_read_is_caught() {
    let rep = si(&[
        (0, vec![Mop::append(1, 1)], EventType::Fail, None),
        ok(1, vec![r(1, &[1])]),
    ]);
    assert!(!rep.valid && rep.has(AnomalyKind::G1a), "{rep}");
    assert_eq!(rep.anomalies[0].txns, vec![1, 0]);
}

#[test]
fn g1b_intermediate_read_is_caught() {
    let rep = si(&[
        ok(0, vec![Mop::write(1, 1), Mop::write(1, 2)]),
        ok(1, vec![rr(1, Some(1))]),
    ]);
    assert!(!rep.valid && rep.has(AnomalyKind::G1b), "{rep}");
    let rep = si(&[
        ok(0, vec![Mop::append(1, 1), Mop::append(1, 2)]),
        ok(1, vec![r(1, &[1])]),
    ]);
    assert!(rep.has(AnomalyKind::G1b), "{rep}");
}

#[test]
fn g1c_circular_information_flow_is_caught() {
    let rep = si(&[
        ok(0, vec![Mop::append(1, 1), r(2, &[2])]),
        ok(1, vec![Mop::append(2, 2), r(1, &[1])]),
    ]);
    assert!(!rep.valid && rep.has(AnomalyKind::G1c), "{rep}");
    assert!(!rep.has(AnomalyKind::G0));
}

#[test]
fn read_skew_is_g_single() {
    // T1 sees T0's y but not T0's x.
    let rep = si(&[
        ok(0, vec![Mop::write(1, 1), Mop::write(2, 1)]),
        ok(1, vec![rr(1, None), rr(2, Some(1))]),
    ]);
    assert!(!rep.valid && rep.has(AnomalyKind::GSingle), "{rep}");
    let a = rep
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::GSingle)
        .unwrap();
    assert!(a.explanation.contains("-rw(key 1)->"), "{a}");
    assert!(a.explanation.contains("-wr(key 2)->"), "{a}");
}

#[test]
fn g_nonadjacent_is_caught() {
    let rep = check_all(&[
        ok(0, vec![rr(1, None), rr(4, Some(1))]),
        ok(1, vec![Mop::write(1, 1), Mop::write(2, 1)]),
        ok(2, vec![rr(2, Some(1)), rr(3, None)]),
        ok(3, vec![Mop::write(3, 1), Mop::write(4, 1)]),
    ]);
    for rep in &rep {
        assert!(!rep.valid && rep.has(AnomalyKind::GNonadjacent), "{rep}");
        assert!(!rep.has(AnomalyKind::GSingle), "{rep}");
    }
}

#[test]
fn lost_update_is_caught() {
    let rep = si(&[
        ok(0, vec![rr(1, None), Mop::write(1, 1)]),
        ok(1, vec![rr(1, None), Mop::write(1, 2)]),
    ]);
    assert!(!rep.valid && rep.has(AnomalyKind::LostUpdate), "{rep}");
    let lu = rep
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::LostUpdate)
        .unwrap();
    assert_eq!((lu.txns.clone(), lu.key), (vec![0, 1], Some(1)));
    let rep = si(&[
        ok(0, vec![r(1, &[]), Mop::append(1, 1)]),
        ok(1, vec![r(1, &[]), Mop::append(1, 2)]),
        ok(2, vec![r(1, &[1, 2])]),
    ]);
    assert!(rep.has(AnomalyKind::LostUpdate), "{rep}");
}

#[test]
fn write_skew_is_si_but_not_serializable() {
    for specs in [
        vec![
            ok(0, vec![rr(1, None), rr(2, None), Mop::write(1, 1)]),
            ok(1, vec![rr(1, None), rr(2, None), Mop::write(2, 1)]),
        ],
        vec![
            ok(0, vec![r(1, &[]), r(2, &[]), Mop::append(1, 1)]),
            ok(1, vec![r(1, &[]), r(2, &[]), Mop::append(2, 1)]),
        ],
    ] {
        let [si, session, ser] = check_all(&specs);
        assert!(si.valid, "{si}");
        assert!(session.valid, "{session}");
        assert!(!ser.valid, "{ser}");
        assert_eq!(ser.kinds(), BTreeSet::from([AnomalyKind::G2Item]), "{ser}");
        assert!(si.has(AnomalyKind::G2Item), "reported but allowed: {si}");
        assert!(si.to_string().contains("(allowed)"), "{si}");
    }
}

#[test]
fn strong_session_needs_own_writes() {
    let specs = [ok(0, vec![Mop::write(1, 1)]), ok(0, vec![rr(1, None)])];
    let [si, session, _] = check_all(&specs);
    assert!(si.valid, "{si}");
    assert!(
        !session.valid && session.has(AnomalyKind::GSingleProcess),
        "{session}"
    );
    // Another process may miss it.
    let [_, session, _] = check_all(&[ok(0, vec![Mop::write(1, 1)]), ok(1, vec![rr(1, None)])]);
    assert!(session.valid, "{session}");
}

#[test]
fn incompatible_list_orders_are_reported() {
    let rep = si(&[
        ok(0, vec![Mop::append(1, 1)]),
        ok(1, vec![Mop::append(1, 2)]),
        ok(2, vec![r(1, &[1, 2])]),
        ok(3, vec![r(1, &[2, 1])]),
        ok(4, vec![r(1, &[1, 1])]),
    ]);
    assert!(
        !rep.valid && rep.has(AnomalyKind::IncompatibleOrder),
        "{rep}"
    );
    assert!(rep.has(AnomalyKind::DuplicateElements), "{rep}");
}

#[test]
fn garbage_reads_and_bad_inputs() {
    let rep = si(&[ok(0, vec![rr(1, Some(7))])]);
    assert!(rep.has(AnomalyKind::GarbageRead), "{rep}");
    let dup = history(&[ok(0, vec![Mop::write(1, 1)]), ok(1, vec![Mop::write(1, 1)])]);
    assert!(matches!(
        check(&dup, Model::SnapshotIsolation),
        Err(Error::TxnHistory { .. })
    ));
    let mixed = history(&[
        ok(0, vec![Mop::write(1, 1)]),
        ok(1, vec![Mop::append(2, 1)]),
    ]);
    assert!(check(&mixed, Model::SnapshotIsolation).is_err());
}

#[test]
fn timestamps_order_versions_and_check_snapshot_reads() {
    let ts = |p, ops, s, c| (p, ops, EventType::Ok, Some((s, c)));
    // Clock-SI-correct history.
    let good = [
        ts(0, vec![rr(1, None), Mop::write(1, 1)], 1, 5),
        ts(1, vec![rr(1, Some(1)), Mop::write(1, 2)], 6, 8),
        ts(2, vec![rr(1, Some(1))], 7, 7),
        ts(3, vec![rr(1, Some(2))], 9, 9),
    ];
    assert!(si(&good).anomalies.is_empty(), "{}", si(&good));
    // T1 reads nil although T0 committed below its snapshot.
    let stale = [
        ts(0, vec![Mop::write(1, 1)], 1, 5),
        ts(1, vec![rr(1, None)], 9, 9),
    ];
    let rep = si(&stale);
    assert!(
        !rep.valid && rep.has(AnomalyKind::StaleSnapshotRead),
        "{rep}"
    );
    assert!(check(&history(&stale), Model::Serializable).unwrap().valid);
    // Two concurrent blind writers both commit; one commits below its snapshot.
    let rep = si(&[
        ts(0, vec![Mop::write(1, 1)], 1, 5),
        ts(1, vec![Mop::write(1, 2)], 3, 3),
    ]);
    assert!(rep.has(AnomalyKind::WwConflict), "{rep}");
    assert!(rep.has(AnomalyKind::TimestampOrder), "{rep}");
    // A list whose order disagrees with commit timestamps.
    let rep = si(&[
        ts(0, vec![Mop::append(1, 1)], 1, 9),
        ts(1, vec![Mop::append(1, 2)], 10, 12),
        ok(2, vec![r(1, &[2, 1])]),
    ]);
    assert!(rep.has(AnomalyKind::TimestampOrder), "{rep}");
}

#[test]
fn jsonl_round_trip_keeps_the_verdict() {
    let h = history(&[
        ok(0, vec![Mop::write(1, 1), Mop::write(2, 1)]),
        ok(1, vec![rr(1, None), rr(2, Some(1))]),
        (2, vec![Mop::write(1, 5)], EventType::Info, None),
    ]);
    let text = h.to_jsonl();
    let back = TxnHistory::from_jsonl(&text).unwrap();
    assert_eq!(back, h);
    assert_eq!(
        check(&back, Model::SnapshotIsolation).unwrap(),
        check(&h, Model::SnapshotIsolation).unwrap()
    );
}

#[test]
fn bank_audits() {
    let audit = |b: &[i64]| {
        b.iter()
            .copied()
            .enumerate()
            .collect::<BTreeMap<usize, i64>>()
    };
    let good = [audit(&[100, 100]), audit(&[50, 150]), audit(&[0, 200])];
    assert_eq!(check_bank_audits(&good, Some(200)), Ok(()));
    assert_eq!(check_bank_audits(&good, None), Ok(()));
    let bad = [audit(&[100, 100]), audit(&[50, 100]), audit(&[-1, 201])];
    assert_eq!(check_bank_audits(&bad, None).unwrap_err().audit, 1);
    let negative = [audit(&[100, 100]), audit(&[-1, 201])];
    let err = check_bank_audits(&negative, None).unwrap_err();
    assert_eq!(err.audit, 1);
    assert!(err.reason.contains("negative"), "{}", err.reason);
}

/// A random transaction: (is list-append, micro-op choices (kind, key)).
fn txn_strategy() -> impl Strategy<Value = Vec<(bool, i64)>> {
    prop::collection::vec((any::<bool>(), 0i64..4), 1..5)
}

/// Runs `txns` one at a time over a map, as processes `i % 3`, every 5th one aborted,
/// with Clock-SI-style timestamps if `stamps`.
fn serial(list: bool, txns: &[Vec<(bool, i64)>], stamps: bool) -> TxnHistory {
    let mut lists: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    let mut regs: BTreeMap<i64, i64> = BTreeMap::new();
    let mut h = TxnHistory::new();
    let mut next = 0i64;
    let mut clock = 0u64;
    for (i, txn) in txns.iter().enumerate() {
        let abort = i % 5 == 4;
        let (mut l2, mut r2) = (lists.clone(), regs.clone());
        let mut ops = Vec::new();
        for &(write, key) in txn {
            next += 1;
            ops.push(match (list, write) {
                (true, true) => {
                    l2.entry(key).or_default().push(next);
                    Mop::append(key, next)
                }
                (true, false) => r(key, l2.get(&key).map_or(&[][..], Vec::as_slice)),
                (false, true) => {
                    r2.insert(key, next);
                    Mop::write(key, next)
                }
                (false, false) => rr(key, r2.get(&key).copied()),
            });
        }
        let p = (i % 3) as u64;
        h.invoke(p, &ops, clock);
        if abort {
            h.record(
                EventType::Fail,
                p,
                ops.iter().map(Mop::as_invoked).collect(),
                clock,
            );
            continue;
        }
        (lists, regs) = (l2, r2);
        let snap = clock + 1;
        let writes = ops.iter().any(|m| !matches!(m, Mop::Read { .. }));
        clock += 2;
        let e = h.record(EventType::Ok, p, ops, clock);
        if stamps {
            e.snapshot_ts = Some(snap);
            e.commit_ts = Some(if writes { snap + 1 } else { snap });
        }
    }
    h
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn serial_histories_are_valid(
        list in any::<bool>(),
        stamps in any::<bool>(),
        txns in prop::collection::vec(txn_strategy(), 0..25),
    ) {
        let h = serial(list, &txns, stamps);
        for model in [
            Model::SnapshotIsolation,
            Model::StrongSessionSnapshotIsolation,
            Model::Serializable,
        ] {
            let rep = check(&h, model).unwrap();
            prop_assert!(rep.valid && rep.anomalies.is_empty(), "{}\n{}", rep, h.to_jsonl());
        }
    }
}
