use super::*;
use proptest::prelude::*;

fn b(s: &str) -> Bytes {
    Bytes::from(s.to_owned())
}

fn set_ops(puts: &[&str], removes: &[&str], observed: &Elements) -> ElementOps {
    ElementOps {
        zset: false,
        observed: Some(observed.observed()),
        puts: puts.iter().map(|m| (b(m), None)).collect(),
        incrs: Vec::new(),
        removes: removes.iter().map(|m| b(m)).collect(),
    }
}

fn names(e: &Elements) -> Vec<String> {
    e.members()
        .map(|(m, _)| String::from_utf8_lossy(m).into_owned())
        .collect()
}

#[test]
fn a_remove_takes_only_what_it_observed() {
    let mut dc1 = Elements::default();
    dc1.apply(1, &set_ops(&["x"], &[], &Elements::default()), 10);
    let mut dc2 = dc1.clone();
    // DC 1 removes x; DC 2, concurrently, adds it again after its own remove.
    let seen = dc1.clone();
    dc1.apply(1, &set_ops(&[], &["x"], &seen), 20);
    let seen2 = dc2.clone();
    dc2.apply(2, &set_ops(&[], &["x"], &seen2), 20);
    let seen2 = dc2.clone();
    dc2.apply(2, &set_ops(&["x"], &[], &seen2), 21);
    assert_eq!(names(&dc1.merge(&dc2)), ["x"], "the unseen add wins");
    assert_eq!(dc1.merge(&dc2), dc2.merge(&dc1));
}

#[test]
fn a_removed_member_leaves_no_tombstone() {
    let mut e = Elements::default();
    let empty = e.clone();
    e.apply(1, &set_ops(&["a", "b", "c"], &[], &empty), 1);
    let seen = e.clone();
    e.apply(1, &set_ops(&[], &["a", "b"], &seen), 2);
    assert_eq!(names(&e), ["c"]);
    assert_eq!(e.members.len(), 1);
    assert_eq!(e.clock.len(), 1);
    assert_eq!(e.members[&b("c")].parts.len(), 1);
}

#[test]
fn concurrent_increments_all_count_and_a_newer_zadd_supersedes_them() {
    let zincr = |m: &str, d: f64| ElementOps {
        zset: true,
        observed: Some(Vec::new()),
        incrs: vec![(b(m), d)],
        ..ElementOps::default()
    };
    let mut a = Elements::over(true, Stamp::default());
    let mut c = a.clone();
    a.apply(1, &zincr("m", 2.5), 10);
    c.apply(2, &zincr("m", 4.0), 10);
    c.apply(2, &zincr("m", 1.0), 11);
    let merged = a.merge(&c);
    assert_eq!(merged.members().next().map(|(_, s)| s), Some(7.5));
    let mut later = merged.clone();
    let put = ElementOps {
        zset: true,
        observed: Some(merged.observed()),
        puts: vec![(b("m"), Some(1.0))],
        ..ElementOps::default()
    };
    later.apply(1, &put, 30);
    assert_eq!(later.merge(&a).members().next().map(|(_, s)| s), Some(1.0));
    // An increment the ZADD did not see is superseded; one made after it counts.
    let mut unseen = c.clone();
    unseen.apply(2, &zincr("m", 10.0), 31);
    let mut after = later.merge(&unseen);
    assert_eq!(after.members().next().map(|(_, s)| s), Some(1.0));
    after.apply(2, &zincr("m", 10.0), 32);
    assert_eq!(after.members().next().map(|(_, s)| s), Some(11.0));
}

#[test]
fn entries_show_as_the_redis_layer_stores_them() {
    let mut z = Elements::over(true, Stamp::default());
    let put = ElementOps {
        zset: true,
        observed: Some(Vec::new()),
        puts: vec![
            (b("b"), Some(1.0)),
            (b("a"), Some(2.0)),
            (b("c"), Some(1.0)),
        ],
        ..ElementOps::default()
    };
    z.apply(1, &put, 1);
    let e = z.live_entry(Timestamp(1)).unwrap();
    assert_eq!(e.kind, Kind::ZSet);
    let order: Vec<(f64, Bytes)> = data::decode_zset(&e.data).unwrap();
    assert_eq!(order, vec![(1.0, b("b")), (1.0, b("c")), (2.0, b("a"))]);
    let back = Elements::decode(&z.encode()).unwrap();
    assert_eq!(back, z);
    assert!(Elements::decode(&z.encode()[..3]).is_none());
    assert!(is_elements(&z.encode()));
}

#[test]
fn diff_names_what_a_command_changed() {
    let set = |m: &[&str]| Entry {
        data: Bytes::from(data::encode_set(m)),
        expiry: None,
        kind: Kind::Set,
    };
    let ops = diff(
        Some(&set(&["a", "b"])),
        Some(&set(&["b", "c"])),
        false,
        None,
    )
    .unwrap();
    assert_eq!(ops.puts, vec![(b("c"), None)]);
    assert_eq!(ops.removes, vec![b("a")]);
    let gone = diff(Some(&set(&["a"])), None, false, None).unwrap();
    assert_eq!(gone.removes, vec![b("a")]);
    let s = Entry::new(b("x"));
    assert!(matches!(
        diff(Some(&s), Some(&set(&["a"])), false, None),
        Err(ReplicationError::WrongType)
    ));
}

#[test]
fn hostile_ops_are_refused() {
    let nan = ElementOps {
        zset: true,
        puts: vec![(b("m"), Some(f64::NAN))],
        ..ElementOps::default()
    };
    assert!(update(None, 1, &nan, Timestamp(1), |_, _, _| None).is_err());
    let scored_set = ElementOps {
        zset: false,
        incrs: vec![(b("m"), 1.0)],
        ..ElementOps::default()
    };
    assert!(update(None, 1, &scored_set, Timestamp(1), |_, _, _| None).is_err());
}

/// One replica's step in a random history: an op made at one of three replicas over what
/// it holds, or a delivery of one replica's state to another.
#[derive(Debug, Clone)]
enum Step {
    Add(usize, u8, i8),
    Remove(usize, u8),
    Incr(usize, u8, i8),
    Deliver(usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 0..6u8, any::<i8>()).prop_map(|(r, m, s)| Step::Add(r, m, s)),
        (0..3usize, 0..6u8).prop_map(|(r, m)| Step::Remove(r, m)),
        (0..3usize, 0..6u8, any::<i8>()).prop_map(|(r, m, s)| Step::Incr(r, m, s)),
        (0..3usize, 0..3usize).prop_map(|(a, b)| Step::Deliver(a, b)),
    ]
}

fn run(steps: &[Step]) -> Vec<Elements> {
    let mut replicas = vec![Elements::over(true, Stamp::default()); 3];
    for (t, s) in steps.iter().enumerate() {
        let now = t as u64 + 1;
        let member = |m: &u8| Bytes::from(vec![b'a' + m]);
        match s {
            Step::Add(r, m, score) | Step::Incr(r, m, score) => {
                let seen = replicas[*r].observed();
                let ops = ElementOps {
                    zset: true,
                    observed: Some(seen),
                    puts: matches!(s, Step::Add(..))
                        .then(|| (member(m), Some(f64::from(*score))))
                        .into_iter()
                        .collect(),
                    incrs: matches!(s, Step::Incr(..))
                        .then(|| (member(m), f64::from(*score)))
                        .into_iter()
                        .collect(),
                    removes: Vec::new(),
                };
                replicas[*r].apply(*r as u64 + 1, &ops, now);
            }
            Step::Remove(r, m) => {
                let ops = ElementOps {
                    zset: true,
                    observed: Some(replicas[*r].observed()),
                    removes: vec![member(m)],
                    ..ElementOps::default()
                };
                replicas[*r].apply(*r as u64 + 1, &ops, now);
            }
            Step::Deliver(from, to) => {
                replicas[*to] = replicas[*to].merge(&replicas[*from]);
            }
        }
    }
    replicas
}

proptest! {
    /// Whatever the history, delivering every state everywhere, in any order and any number
    /// of times, leaves every replica with the same collection (a join).
    #[test]
    fn replicas_converge(steps in proptest::collection::vec(step(), 0..40), order in any::<u64>()) {
        let replicas = run(&steps);
        let forward = replicas.iter().skip(1).fold(replicas[0].clone(), |a, b| a.merge(b));
        let mut shuffled = replicas.clone();
        let n = shuffled.len();
        shuffled.rotate_left((order % n as u64) as usize);
        if order & 8 != 0 {
            shuffled.reverse();
        }
        let other = shuffled.iter().fold(Elements::over(true, Stamp::default()), |a, b| a.merge(b).merge(b));
        prop_assert_eq!(&forward, &other);
        prop_assert_eq!(forward.merge(&forward), forward.clone());
        for r in &replicas {
            prop_assert_eq!(r.merge(&forward), forward.clone());
        }
    }

    /// A state survives its stored bytes.
    #[test]
    fn states_round_trip(steps in proptest::collection::vec(step(), 0..30)) {
        for r in run(&steps) {
            prop_assert_eq!(Elements::decode(&r.encode()), Some(r));
        }
    }

    /// Damaged bytes decode to nothing or to a state, never a panic.
    #[test]
    fn damaged_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..80)) {
        let mut raw = raw;
        if let Some(f) = raw.first_mut() {
            *f = FLAG_CRDT | 0x18;
        }
        let _ = Elements::decode(&raw).map(|e| e.live_entry(Timestamp(0)));
    }
}
