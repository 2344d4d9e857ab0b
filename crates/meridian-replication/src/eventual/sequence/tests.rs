use super::*;
use proptest::prelude::*;

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_owned())
}

fn shown(s: &Sequence) -> Vec<String> {
    s.elems
        .values()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// The ops of pushing `values` at the head (`left`) or tail of what `s` holds.
fn push(s: &Sequence, left: bool, values: &[&str]) -> SequenceOps {
    let places = s.places();
    let values: Vec<Bytes> = values.iter().map(|v| b(v)).collect();
    SequenceOps {
        removes: Vec::new(),
        after: if left { None } else { places.last().cloned() },
        before: if left { places.first().cloned() } else { None },
        values,
    }
}

#[test]
fn pushes_keep_their_order_and_both_sides_concurrent_pushes_merge_in_one_order() {
    let mut dc1 = Sequence::default();
    dc1.apply(1, &push(&dc1.clone(), false, &["a", "b", "c"]));
    dc1.apply(1, &push(&dc1.clone(), true, &["z"]));
    assert_eq!(shown(&dc1), ["z", "a", "b", "c"]);
    let mut dc2 = dc1.clone();
    dc1.apply(1, &push(&dc1.clone(), false, &["x1", "x2"]));
    dc2.apply(2, &push(&dc2.clone(), false, &["y1", "y2"]));
    dc2.apply(2, &push(&dc2.clone(), true, &["h"]));
    let m = dc1.merge(&dc2);
    assert_eq!(m, dc2.merge(&dc1));
    let order = shown(&m);
    assert_eq!(order.len(), 9);
    assert_eq!(&order[..5], ["h", "z", "a", "b", "c"]);
    // Each side's run stays together and in its own order.
    let at = |v: &str| order.iter().position(|o| o == v).unwrap();
    assert!(at("x1") + 1 == at("x2") && at("y1") + 1 == at("y2"));
}

#[test]
fn a_remove_takes_only_what_it_saw() {
    let mut dc1 = Sequence::default();
    dc1.apply(1, &push(&dc1.clone(), false, &["a", "b"]));
    let mut dc2 = dc1.clone();
    // DC 1 trims to nothing; DC 2 pushes concurrently.
    let places = dc1.places();
    dc1.apply(
        1,
        &SequenceOps {
            removes: places,
            ..SequenceOps::default()
        },
    );
    dc2.apply(2, &push(&dc2.clone(), false, &["c"]));
    assert_eq!(shown(&dc1.merge(&dc2)), ["c"]);
    assert_eq!(dc1.merge(&dc2).elems.len(), 1, "no tombstone kept");
}

#[test]
fn diff_names_the_one_run_a_command_replaced() {
    let list = |v: &[&str]| Entry {
        data: Bytes::from(list_data::encode(v.iter().map(|s| s.as_bytes())).unwrap()),
        expiry: None,
        kind: Kind::List,
    };
    let mut s = Sequence::default();
    s.apply(1, &push(&s.clone(), false, &["a", "b", "c", "d"]));
    let p = s.places();
    // LSET 2 x.
    let ops = diff(
        Some(&list(&["a", "b", "c", "d"])),
        &p,
        Some(&list(&["a", "b", "x", "d"])),
    )
    .unwrap();
    assert_eq!(ops.removes, vec![p[2].clone()]);
    assert_eq!(
        (ops.after.as_ref(), ops.before.as_ref()),
        (Some(&p[1]), Some(&p[3]))
    );
    assert_eq!(ops.values, vec![b("x")]);
    s.apply(1, &ops);
    assert_eq!(shown(&s), ["a", "b", "x", "d"]);
    // LTRIM 1 1 and a delete.
    let ops = diff(
        Some(&list(&["a", "b", "x", "d"])),
        &s.places(),
        Some(&list(&["b"])),
    )
    .unwrap();
    assert_eq!(
        ops.removes.len(),
        4,
        "one run: the kept element is re-placed"
    );
    let ops = diff(Some(&list(&["a"])), &p[..1], None).unwrap();
    assert_eq!(ops.removes, vec![p[0].clone()]);
    assert!(diff(Some(&Entry::new(b("s"))), &[], None).is_err());
}

#[test]
fn hostile_ops_are_refused() {
    let deep = vec![7u32; MAX_PLACE + 1];
    let ops = SequenceOps {
        removes: vec![deep],
        ..SequenceOps::default()
    };
    assert!(update(None, 1, &ops, Timestamp(0), |_, _, _| None).is_err());
    let reversed = SequenceOps {
        after: Some(vec![9, 0, 0, 0, 1]),
        before: Some(vec![1, 0, 0, 0, 1]),
        values: vec![b("v")],
        ..SequenceOps::default()
    };
    assert!(update(None, 1, &reversed, Timestamp(0), |_, _, _| None).is_err());
}

#[test]
fn many_pushes_at_one_end_keep_places_short() {
    let mut s = Sequence::default();
    for i in 0..2000 {
        let v = i.to_string();
        s.apply(1, &push(&s.clone(), i % 2 == 0, &[v.as_str()]));
    }
    assert_eq!(s.elems.len(), 2000);
    assert!(
        s.places().iter().all(|p| p.len() <= 6),
        "one digit and the dot"
    );
}

/// A place as allocations make them: never ending in a zero digit.
fn place() -> impl Strategy<Value = Vec<u32>> {
    let digit = prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()];
    (proptest::collection::vec(digit, 0..4), 1..=u32::MAX).prop_map(|(mut p, last)| {
        p.push(last);
        p
    })
}

proptest! {
    /// `between` is strictly between its bounds, and no prefix of the upper one.
    #[test]
    fn between_is_strictly_between(a in place(), c in place()) {
        let (lo, hi) = if a < c { (a, c) } else { (c, a) };
        prop_assume!(lo != hi);
        let mid = between(Some(&lo), Some(&hi));
        let mut full = mid.clone();
        full.extend_from_slice(&dot_digits(u64::MAX, u64::MAX));
        prop_assert!(lo < mid && full < hi, "{lo:?} < {mid:?} < {hi:?}");
        prop_assert!(between(None, Some(&hi)) < hi);
        prop_assert!(between(Some(&lo), None) > lo);
    }

    /// Random pushes, inserts and removes at three replicas, delivered in any order and any
    /// number of times, leave every replica with one list.
    #[test]
    fn replicas_converge(steps in proptest::collection::vec((0..3usize, 0..5u8, 0..3usize, any::<u16>()), 0..40)) {
        let mut replicas = vec![Sequence::default(); 3];
        for (r, what, other, pick) in steps {
            let s = replicas[r].clone();
            let places = s.places();
            let n = places.len();
            let ops = match what {
                0 => push(&s, true, &["l"]),
                1 => push(&s, false, &["r", "r2"]),
                2 if n > 0 => {
                    let i = usize::from(pick) % n;
                    SequenceOps { removes: vec![places[i].clone()], ..SequenceOps::default() }
                }
                3 if n > 1 => {
                    let i = usize::from(pick) % (n - 1);
                    SequenceOps {
                        after: Some(places[i].clone()),
                        before: Some(places[i + 1].clone()),
                        values: vec![b("m")],
                        ..SequenceOps::default()
                    }
                }
                _ => {
                    replicas[r] = replicas[r].merge(&replicas[other]);
                    continue;
                }
            };
            replicas[r].apply(r as u64 + 1, &ops);
            prop_assert!(replicas[r].places().windows(2).all(|w| w[0] < w[1]));
        }
        let all = replicas.iter().fold(Sequence::default(), |a, b| a.merge(b));
        let back = replicas.iter().rev().fold(Sequence::default(), |a, b| a.merge(b).merge(b));
        prop_assert_eq!(&all, &back);
        for r in &replicas {
            prop_assert_eq!(r.merge(&all), all.clone());
        }
        prop_assert_eq!(Sequence::decode(&all.encode()), Some(all.clone()));
    }
}

/// A client inserting again and again at one spot (LINSERT after the same element) deepens
/// the places there; it meets a clean refusal at `MAX_PLACE`, never a panic or a place out
/// of order.
#[test]
fn inserts_at_one_spot_deepen_places_until_a_clean_refusal() {
    let mut s = Sequence::default();
    s.apply(1, &push(&s.clone(), false, &["a", "b"]));
    let (first, last) = (s.places()[0].clone(), s.places()[1].clone());
    let mut hi = last;
    let mut refused = false;
    for _ in 0..20_000 {
        let ops = SequenceOps {
            after: Some(first.clone()),
            before: Some(hi.clone()),
            values: vec![b("i")],
            ..SequenceOps::default()
        };
        if !well_formed(&ops) {
            refused = true;
            break;
        }
        s.apply(1, &ops);
        let places = s.places();
        assert!(places.windows(2).all(|w| w[0] < w[1]));
        hi = places[1].clone();
        if hi.len() > MAX_PLACE {
            refused = true;
            break;
        }
    }
    assert!(refused, "places grew to {} digits", hi.len());
}
