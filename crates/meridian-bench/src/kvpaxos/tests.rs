//! Tests of the kvpaxos port: generated request streams against the upstream generator
//! and the request-file format round trip.

use super::*;
use proptest::prelude::*;
// Both globs export a `RngCore`; ours is rand 0.9's, the one `KeyGen::draw` takes.
use rand::RngCore;
use std::collections::HashMap;
use std::io::Cursor;

fn all(w: &Workload, seed: u64) -> Vec<Request> {
    generate(w, seed).unwrap().collect()
}

/// An RNG that replays fixed 32-bit words, standing in for kvpaxos' `mt19937`.
struct Words(Vec<u32>, usize);

impl RngCore for Words {
    fn next_u32(&mut self) -> u32 {
        let w = self.0[self.1 % self.0.len()];
        self.1 += 1;
        w
    }
    fn next_u64(&mut self) -> u64 {
        u64::from(self.next_u32())
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for b in dst {
            *b = self.next_u32() as u8;
        }
    }
}

const WORDS: [u32; 12] = [
    0,
    100_000_000,
    300_000_000,
    1_000_000_000,
    2_000_000_000,
    3_000_000_000,
    4_000_000_000,
    u32::MAX,
    123_456_789,
    987_654_321,
    2_500_000_000,
    3_900_000_000,
];

// The expected values below were produced by compiling the repository's own
// `src/request/{scrambled_zipfian,skewed_latest,zipfian}_int_distribution.cpp` and
// `acknowledged_counter.cpp` (commit 2afa8ab) with g++ 12.2, driving them with a URNG
// that returns WORDS.

#[test]
fn fnv_fold_matches_compiled_kvpaxos() {
    let inputs = [
        0u64,
        1,
        2,
        3,
        255,
        256,
        1_000_000,
        123_456_789,
        9_999_999_999,
    ];
    let expected = [
        672_807_365u64,
        489_353_124,
        1_039_715_847,
        856_261_606,
        481_713_382,
        700_029_206,
        1_557_423_800,
        685_322_727,
        1_480_930_078,
    ];
    for (x, e) in inputs.iter().zip(expected) {
        assert_eq!(kvpaxos_fnv_hash(*x), e, "fnvhash64({x})");
    }
}

#[test]
fn scrambled_zipfian_matches_compiled_kvpaxos() {
    // scrambled_zipfian_int_distribution<long>(0, 1_500_000): 1_500_001 items.
    let w = Workload {
        n_records: 1_000_000,
        n_operations: 5_000_000,
        insert_proportion: 0.05,
        ..Workload::ycsb_e(1_000_000, 5_000_000)
    };
    assert_eq!(w.expected_new_keys(), 500_000);
    let mut keys = KeyGen::new(&w);
    let mut rng = Words(WORDS.to_vec(), 0);
    let got: Vec<u64> = (0..WORDS.len())
        .map(|_| keys.draw(&mut rng, u64::MAX).unwrap())
        .collect();
    let expected = [
        806_917u64, 806_917, 215_154, 616_641, 322_853, 24_373, 199_245, 1_326_053, 806_917,
        754_285, 167_154, 1_008_638,
    ];
    assert_eq!(got, expected);
}

#[test]
fn skewed_latest_matches_compiled_kvpaxos() {
    // acknowledged_counter(1000) and zipfian(0, 999). Before every third draw, one insert is
    // acknowledged.
    let w = Workload::ycsb_d(1000, 100);
    let mut keys = KeyGen::new(&w);
    let mut rng = Words(WORDS.to_vec(), 0);
    let (mut next, mut last) = (1000u64, 999u64);
    let mut got = Vec::new();
    for i in 0..2 * WORDS.len() {
        if i % 3 == 2 {
            last = last.max(next);
            next += 1;
        }
        got.push(keys.draw(&mut rng, last).unwrap());
    }
    let expected = [
        999u64, 999, 1000, 998, 984, 899, 403, 0, 1002, 1000, 961, 501, 1003, 1003, 1004, 1002,
        988, 903, 405, 0, 1006, 1004, 964, 502,
    ];
    assert_eq!(got, expected);
}

/// Verbatim copies of the repository's `experiments/workloads/ycsb_{d,e}_1000000.toml`.
const YCSB_D_TOML: &str = r#"# base manager configuration
workload.n_records = 1000000
workload.n_operations = 50000000

workload.single_distribution = true
workload.data_distribution = "LATEST"
workload.scan_length_distribution = "UNIFORM"
workload.read_proportion = 0.95
workload.update_proportion = 0.0
workload.scan_proportion = 0.0
workload.insert_proportion = 0.05

workload.min_scan_length = 2
workload.max_scan_length = 8

# export
export = true
output.requests.export_path = "requests.txt"

# shoul execute
execution.execute_requests = false
output.info_path = "info.txt"

workload.requests.import_requests = false
"#;
const YCSB_E_TOML: &str = r#"# base manager configuration
workload.n_records = 1000000
workload.n_operations = 5000000

workload.single_distribution = true
workload.data_distribution = "ZIPFIAN"
workload.scan_length_distribution = "UNIFORM"
workload.read_proportion = 0.0
workload.update_proportion = 0.0
workload.scan_proportion = 0.95
workload.insert_proportion = 0.05

workload.min_scan_length = 2
workload.max_scan_length = 8

# export
export = true
output.requests.export_path = "requests.txt"

# shoul execute
execution.execute_requests = false
output.info_path = "info.txt"

workload.requests.import_requests = false
"#;

#[test]
fn presets_match_the_repository_workload_files() {
    assert_eq!(
        Workload::from_kvpaxos_toml(YCSB_D_TOML).unwrap(),
        Workload::ycsb_d(1_000_000, 50_000_000)
    );
    assert_eq!(
        Workload::from_kvpaxos_toml(YCSB_E_TOML).unwrap(),
        Workload::ycsb_e(1_000_000, 5_000_000)
    );
    let e = Workload::ycsb_e(1_000_000, 5_000_000);
    assert_eq!((e.insert_proportion, e.update_proportion), (0.05, 0.0));
}

#[test]
fn toml_errors_name_the_property() {
    let prop = |text: &str| match Workload::from_kvpaxos_toml(text) {
        Err(BenchError::InvalidProperty { property, .. }) => property,
        other => panic!("expected InvalidProperty, got {other:?}"),
    };
    assert_eq!(
        prop(&YCSB_E_TOML.replace("\"ZIPFIAN\"", "\"HOTSPOT\"")),
        "workload.data_distribution"
    );
    assert_eq!(
        prop(&YCSB_E_TOML.replace("workload.n_records = 1000000\n", "")),
        "workload.n_records"
    );
    assert_eq!(
        prop(&YCSB_E_TOML.replace(
            "scan_length_distribution = \"UNIFORM\"",
            "scan_length_distribution = \"ZIPFIAN\""
        )),
        "workload.scan_length_distribution"
    );
    assert_eq!(
        prop(&YCSB_E_TOML.replace("single_distribution = true", "single_distribution = false")),
        "workload.single_distribution"
    );
    assert_eq!(prop("workload = ["), "workload");
}

#[test]
fn validation_refuses_workloads_kvpaxos_would_loop_on() {
    let bad = |w: Workload| match w.validate() {
        Err(BenchError::InvalidProperty { property, .. }) => property,
        other => panic!("expected InvalidProperty, got {other:?}"),
    };
    assert_eq!(bad(Workload::ycsb_d(1, 10)), "workload.n_records");
    assert_eq!(bad(Workload::ycsb_e(9, 10)), "workload.n_records");
    assert!(Workload::ycsb_e(10, 10).validate().is_ok());
    let mut w = Workload::ycsb_e(1000, 10);
    w.max_scan_length = 1000;
    assert_eq!(bad(w.clone()), "workload.max_scan_length");
    w.max_scan_length = 8;
    w.min_scan_length = 0;
    assert_eq!(bad(w.clone()), "workload.min_scan_length");
    w.min_scan_length = 9;
    assert_eq!(bad(w), "workload.min_scan_length");
    let mut w = Workload::ycsb_d(1000, 10);
    w.read_proportion = f64::NAN;
    assert_eq!(bad(w.clone()), "workload.read_proportion");
    w.read_proportion = 0.0;
    w.insert_proportion = 0.0;
    assert_eq!(bad(w), "workload.read_proportion");
    assert_eq!(
        bad(Workload::ycsb_d(u32::MAX - 5, 10)),
        "workload.n_operations"
    );
    assert!(generate(&Workload::ycsb_d(1, 10), 1).is_err());
}

#[test]
fn deterministic_by_seed() {
    for w in [
        Workload::ycsb_d(10_000, 5_000),
        Workload::ycsb_e(10_000, 5_000),
    ] {
        assert_eq!(all(&w, 7), all(&w, 7));
        assert_ne!(all(&w, 7), all(&w, 8));
    }
    let g = generate(&Workload::ycsb_e(100, 1234), 1).unwrap();
    assert_eq!(g.len(), 1234);
}

#[test]
fn proportions_within_tolerance() {
    let n = 100_000u64;
    let count = |reqs: &[Request], op| reqs.iter().filter(|r| r.op == op).count() as f64;
    let d = all(&Workload::ycsb_d(100_000, n), 1);
    assert_eq!(d.len() as u64, n);
    assert!((count(&d, Op::Read) / n as f64 - 0.95).abs() < 0.005);
    assert!((count(&d, Op::Write) / n as f64 - 0.05).abs() < 0.005);
    let e = all(&Workload::ycsb_e(100_000, n), 1);
    assert!((count(&e, Op::Scan) / n as f64 - 0.95).abs() < 0.005);
    assert!((count(&e, Op::Write) / n as f64 - 0.05).abs() < 0.005);
    assert_eq!(count(&e, Op::Read) + count(&e, Op::Update), 0.0);
    // Proportions are normalised by their sum, as in kvpaxos.
    let w = Workload {
        read_proportion: 2.0,
        update_proportion: 1.0,
        insert_proportion: 1.0,
        ..Workload::ycsb_d(100_000, n)
    };
    let m = all(&w, 3);
    for (op, p) in [(Op::Read, 0.5), (Op::Update, 0.25), (Op::Write, 0.25)] {
        assert!((count(&m, op) / n as f64 - p).abs() < 0.01, "{op}");
    }
}

#[test]
fn inserts_are_sequential_from_n_records() {
    for w in [
        Workload::ycsb_d(5_000, 20_000),
        Workload::ycsb_e(5_000, 20_000),
    ] {
        let inserts: Vec<u32> = all(&w, 5)
            .iter()
            .filter(|r| r.op == Op::Write)
            .map(|r| r.key)
            .collect();
        assert!(!inserts.is_empty());
        let expected: Vec<u32> = (5_000..5_000 + inserts.len() as u32).collect();
        assert_eq!(inserts, expected);
    }
}

/// Reads and updates stay below the last value, and scans end below it. The last value
/// starts at `n_records − 1` and becomes the newest insert.
fn assert_bounded(w: &Workload, seed: u64) {
    let mut g = generate(w, seed).unwrap();
    let mut last = u64::from(w.n_records) - 1;
    for r in g.by_ref() {
        match r.op {
            Op::Write => last = last.max(u64::from(r.key)),
            Op::Scan => assert!(u64::from(r.key) + u64::from(r.arg) < last, "{r:?} {last}"),
            Op::Read | Op::Update => assert!(u64::from(r.key) < last, "{r:?} {last}"),
        }
    }
    assert_eq!(u64::from(g.last_value()), last);
}

#[test]
fn keys_never_beyond_the_last_inserted() {
    for distribution in [
        KeyDistribution::Uniform,
        KeyDistribution::Zipfian,
        KeyDistribution::Latest,
    ] {
        let w = Workload {
            read_proportion: 0.4,
            update_proportion: 0.1,
            insert_proportion: 0.1,
            scan_proportion: 0.4,
            distribution,
            ..Workload::ycsb_e(200, 20_000)
        };
        assert_bounded(&w, 11);
    }
    assert_bounded(&Workload::ycsb_d(50, 20_000), 2);
    assert_bounded(&Workload::ycsb_e(10, 20_000), 2);
}

#[test]
fn scan_lengths_within_bounds() {
    let e = all(&Workload::ycsb_e(10_000, 50_000), 9);
    let mut seen = [0u32; 9];
    for r in e.iter().filter(|r| r.op == Op::Scan) {
        assert!((2..=8).contains(&r.arg), "{r:?}");
        seen[r.arg as usize] += 1;
    }
    assert!(seen[2..=8].iter().all(|&c| c > 0), "{seen:?}");
    assert!(e.iter().filter(|r| r.op != Op::Scan).all(|r| r.arg == 0));
}

#[test]
fn zipfian_is_skewed_and_scrambled() {
    let n_records = 100_000u32;
    let w = Workload {
        read_proportion: 1.0,
        insert_proportion: 0.0,
        scan_proportion: 0.0,
        ..Workload::ycsb_e(n_records, 100_000)
    };
    let mut freq: HashMap<u32, u32> = HashMap::new();
    for r in all(&w, 4) {
        *freq.entry(r.key).or_default() += 1;
    }
    let mut by_freq: Vec<(u32, u32)> = freq.into_iter().map(|(k, c)| (c, k)).collect();
    by_freq.sort_unstable_by(|a, b| b.cmp(a));
    // Uniform would give each key about 1 access; the top rank has ≈ 1/ζ ≈ 3.8 %.
    assert!(by_freq[0].0 > 1_000, "top key {by_freq:?}");
    // Scrambled: the hot keys are spread over the key space, not clustered at 0.
    let hot: Vec<u32> = by_freq[..10].iter().map(|&(_, k)| k).collect();
    assert!(hot.iter().any(|&k| k > n_records / 2), "hot keys {hot:?}");
    assert!(!hot.iter().all(|&k| k < n_records / 10), "hot keys {hot:?}");
}

#[test]
fn latest_concentrates_near_the_newest_key() {
    let n = 100_000u32;
    let reqs = all(&Workload::ycsb_d(n, 100_000), 6);
    let mut last = u64::from(n) - 1;
    let (mut near, mut reads) = (0u32, 0u32);
    for r in &reqs {
        match r.op {
            Op::Write => last = u64::from(r.key),
            _ => {
                reads += 1;
                if last - u64::from(r.key) <= u64::from(n / 100) {
                    near += 1;
                }
            }
        }
    }
    // The newest 1 % of the keys would get 1 % of uniform reads. Under LATEST they get
    // (ζ(1000) − 1)/(ζ(10⁵) − 1) ≈ 0.6.
    assert!(
        f64::from(near) / f64::from(reads) > 0.4,
        "{near} of {reads} reads within n/100 of the newest key"
    );
}

#[test]
fn population_writes_zero_through_n_records() {
    let p: Vec<Request> = population(4).collect();
    assert_eq!(p.len(), 5);
    assert!(p.iter().all(|r| r.op == Op::Write && r.arg == 0));
    assert_eq!(
        p.iter().map(|r| r.key).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    // The first generated insert is key n_records again, as in kvpaxos.
    let first_insert = all(&Workload::ycsb_d(4, 200), 1)
        .into_iter()
        .find(|r| r.op == Op::Write)
        .unwrap();
    assert_eq!(first_insert.key, 4);
}

#[test]
fn key_bytes_are_big_endian() {
    assert_eq!(key_bytes(0x0102_0304), [1, 2, 3, 4]);
    assert!(key_bytes(255) < key_bytes(256));
    let scan = Request {
        op: Op::Scan,
        key: 10,
        arg: 3,
    };
    assert_eq!(scan.keys(), 10..13);
    let read = Request {
        op: Op::Read,
        key: u32::MAX,
        arg: 0,
    };
    assert_eq!(read.keys().len(), 0, "saturates rather than overflowing");
}

#[test]
fn writes_kvpaxos_lines() {
    let reqs = [
        Request {
            op: Op::Read,
            key: 5,
            arg: 0,
        },
        Request {
            op: Op::Scan,
            key: 7,
            arg: 3,
        },
        Request {
            op: Op::Write,
            key: 1_000_000,
            arg: 0,
        },
        Request {
            op: Op::Update,
            key: 1,
            arg: 0,
        },
    ];
    let mut out = Vec::new();
    assert_eq!(write_requests(&mut out, reqs).unwrap(), 4);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "0,5,,\n2,7,3,\n1,1000000,,\n5,1,,\n"
    );
}

#[test]
fn round_trip() {
    let mut reqs = all(&Workload::ycsb_e(1_000, 5_000), 3);
    reqs.extend(all(&Workload::ycsb_d(1_000, 5_000), 3));
    reqs.push(Request {
        op: Op::Update,
        key: u32::MAX,
        arg: 0,
    });
    reqs.push(Request {
        op: Op::Read,
        key: 3,
        arg: 42,
    });
    reqs.push(Request {
        op: Op::Scan,
        key: u32::MAX - MAX_SCAN_LENGTH,
        arg: MAX_SCAN_LENGTH,
    });
    let mut file = Vec::new();
    write_requests(&mut file, reqs.iter().copied()).unwrap();
    assert_eq!(read_requests(Cursor::new(&file), reqs.len()).unwrap(), reqs);
}

#[test]
fn reads_kvpaxos_variants() {
    let r = |text: &str| read_requests(Cursor::new(text.as_bytes()), 10).unwrap();
    let expected = vec![
        Request {
            op: Op::Read,
            key: 1,
            arg: 0,
        },
        Request {
            op: Op::Scan,
            key: 2,
            arg: 8,
        },
    ];
    assert_eq!(r("0,1,,\n2,2,8,\n"), expected);
    assert_eq!(r("0,1,,\r\n2,2,8,\r\n"), expected, "CRLF");
    assert_eq!(r("0,1,,\n2,2,8,"), expected, "no final newline");
    assert_eq!(r("0,1,\n2,2,8\n"), expected, "no trailing comma");
    assert_eq!(r("0,0001,,\n2,2,08,\n"), expected, "leading zeros");
    assert!(r("").is_empty());
}

#[test]
fn hostile_lines_name_line_and_field() {
    let good = "0,1,,\n1,2,,\n";
    let cases: &[(&str, Field)] = &[
        ("7,1,,", Field::Type),
        ("3,1,,", Field::Type),
        ("6,1,,", Field::Type),
        ("-1,1,,", Field::Type),
        ("99999999999,1,,", Field::Type),
        (",1,,", Field::Type),
        ("x,1,,", Field::Type),
        ("0,-1,,", Field::Key),
        ("0,4294967296,,", Field::Key),
        ("0,+1,,", Field::Key),
        ("0, 1,,", Field::Key),
        ("0,1.5,,", Field::Key),
        ("0,,,", Field::Key),
        ("0", Field::Key),
        ("0,1", Field::Arg),
        ("2,1,,", Field::Arg),
        ("2,1,0,", Field::Arg),
        ("2,1,1000,", Field::Arg),
        ("2,4294967295,2,", Field::Arg),
        ("2,1,abc,", Field::Arg),
        ("0,1,x,", Field::Arg),
        ("0,1,,x", Field::Line),
        ("0,1,,,", Field::Line),
        ("0,1,2,3,4,5", Field::Line),
        ("", Field::Line),
        ("\r", Field::Line),
    ];
    for (bad, field) in cases {
        let text = format!("{good}{bad}\n0,3,,\n");
        let err = read_requests(Cursor::new(text.as_bytes()), 100).unwrap_err();
        assert_eq!(err.line(), 3, "{bad:?}: {err}");
        assert_eq!(err.field(), *field, "{bad:?}: {err}");
        assert!(err.to_string().starts_with("line 3: "), "{err}");
    }
}

#[test]
fn huge_line_is_refused_without_buffering_it() {
    let mut text = b"0,1,,\n".to_vec();
    text.extend(std::iter::repeat_n(b'1', 10 << 20));
    let mut cursor = Cursor::new(&text);
    let err = read_requests(&mut cursor, 100).unwrap_err();
    assert_eq!(
        err,
        KvpaxosError::LineTooLong {
            line: 2,
            max: MAX_LINE_LEN
        }
    );
    assert!(cursor.position() <= (6 + MAX_LINE_LEN + 1) as u64);
    // Exactly MAX_LINE_LEN bytes (valid, thanks to leading zeros) is still a line.
    let line = format!("0,{:0>width$},,\n", 7, width = MAX_LINE_LEN - 4);
    assert_eq!(line.len(), MAX_LINE_LEN + 1);
    assert_eq!(
        read_requests(Cursor::new(line.as_bytes()), 1).unwrap()[0].key,
        7
    );
    let long = format!("0,{:0>width$},,\n", 7, width = MAX_LINE_LEN - 3);
    assert!(matches!(
        read_requests(Cursor::new(long.as_bytes()), 1),
        Err(KvpaxosError::LineTooLong { line: 1, .. })
    ));
}

#[test]
fn binary_garbage_is_an_error() {
    let mut text = b"0,1,,\n".to_vec();
    text.extend([0xff, 0xfe, 0x00, b',', 0x80, b',', 0x1b, b'\n']);
    let err = read_requests(Cursor::new(&text), 100).unwrap_err();
    assert_eq!((err.line(), err.field()), (2, Field::Type));
    let err = read_requests(Cursor::new(b"0,\xff\xff,,\n"), 100).unwrap_err();
    assert_eq!((err.line(), err.field()), (1, Field::Key));
    assert!(err.to_string().contains("\\xff"), "{err}");
}

#[test]
fn max_requests_is_enforced() {
    let text = "0,1,,\n0,2,,\n0,3,,\n";
    assert_eq!(read_requests(Cursor::new(text), 3).unwrap().len(), 3);
    assert_eq!(
        read_requests(Cursor::new(text), 2).unwrap_err(),
        KvpaxosError::TooManyRequests { line: 3, max: 2 }
    );
    assert_eq!(
        read_requests(Cursor::new(text), 0).unwrap_err(),
        KvpaxosError::TooManyRequests { line: 1, max: 0 }
    );
    // A huge bound does not allocate up front.
    assert_eq!(
        read_requests(Cursor::new(text), usize::MAX).unwrap().len(),
        3
    );
}

/// A reader that fails after its first line.
struct Failing(Cursor<&'static [u8]>);

impl Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.0.read(buf)? {
            0 => Err(io::Error::other("disk on fire")),
            n => Ok(n),
        }
    }
}

#[test]
fn io_errors_carry_the_line() {
    let r = io::BufReader::new(Failing(Cursor::new(b"0,1,,\n")));
    match read_requests(r, 10).unwrap_err() {
        KvpaxosError::Io { line, kind, .. } => {
            assert_eq!((line, kind), (2, io::ErrorKind::Other));
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn bench_error_wraps_it() {
    let e: BenchError = read_requests(Cursor::new("9,1,,\n"), 1).unwrap_err().into();
    assert!(e.to_string().contains("line 1: type"), "{e}");
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Read),
        Just(Op::Write),
        Just(Op::Scan),
        Just(Op::Update)
    ]
}

proptest! {
    #[test]
    fn read_never_panics_on_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        max in 0usize..64,
    ) {
        if let Ok(reqs) = read_requests(Cursor::new(&bytes), max) {
            prop_assert!(reqs.len() <= max);
        }
    }

    #[test]
    fn read_never_panics_on_near_valid_lines(
        lines in proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![
                    Just("0".to_owned()), Just("2".to_owned()), Just("5".to_owned()),
                    Just("4294967295".to_owned()), Just("4294967296".to_owned()),
                    Just("-1".to_owned()), Just(String::new()), Just("999".to_owned()),
                    Just("1000".to_owned()), "[0-9]{1,12}", "\\PC{0,3}",
                ],
                0..6,
            ),
            0..20,
        ),
    ) {
        let text: String = lines.iter().map(|f| f.join(",") + "\n").collect();
        let _ = read_requests(Cursor::new(text.as_bytes()), 100);
    }

    #[test]
    fn arbitrary_valid_requests_round_trip(
        raw in proptest::collection::vec(
            (op_strategy(), any::<u32>(), 1u32..=MAX_SCAN_LENGTH, any::<u32>()),
            0..100,
        ),
    ) {
        let reqs: Vec<Request> = raw
            .into_iter()
            .map(|(op, key, len, arg)| match op {
                Op::Scan => Request { op, key: key.min(u32::MAX - len), arg: len },
                _ => Request { op, key, arg },
            })
            .collect();
        let mut file = Vec::new();
        write_requests(&mut file, reqs.iter().copied()).unwrap();
        prop_assert_eq!(read_requests(Cursor::new(&file), reqs.len()).unwrap(), reqs);
    }
}
