//! The bitmap commands over an in-memory view: replies and errors as `bitops.c`,
//! `tests/unit/bitops.tcl`, `tests/unit/bitfield.tcl` and the bit tests of
//! `tests/unit/type/string.tcl` say, and model tests of BITCOUNT, BITPOS, BITOP and BITFIELD
//! against bit-by-bit implementations.

use super::*;
use crate::OwnedArgs;
use crate::test_view::TestView as MapView;
use proptest::prelude::*;

fn view() -> MapView {
    let mut v = MapView::new();
    v.max = 512 * 1024 * 1024;
    v
}

fn put(v: &mut MapView, key: &str, kind: Kind, data: &[u8], expiry: Option<u64>) {
    v.map.insert(
        key.as_bytes().to_vec(),
        Entry {
            data: Bytes::copy_from_slice(data),
            expiry,
            kind,
        },
    );
}

fn set(v: &mut MapView, key: &str, data: &[u8]) {
    put(v, key, Kind::String, data, None);
}

fn get(v: &MapView, key: &str) -> Option<Vec<u8>> {
    v.map.get(key.as_bytes()).map(|e| e.data.to_vec())
}

/// Runs one command given as byte-string arguments; the reply's bytes.
fn run_args(v: &mut MapView, parts: &[&[u8]]) -> Vec<u8> {
    run_resp(v, parts, false)
}

fn run_resp(v: &mut MapView, parts: &[&[u8]], resp3: bool) -> Vec<u8> {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let spec = cmd.spec();
    let arity_ok = if spec.arity >= 0 {
        parts.len() == spec.arity as usize
    } else {
        parts.len() >= spec.arity.unsigned_abs() as usize
    };
    assert!(arity_ok, "test calls respect the arity");
    let mut reply = Reply::new(64);
    reply.resp3 = resp3;
    if let Err(e) = exec_on_view(cmd, owned.get(), v, &mut reply) {
        assert!(reply.out.is_empty(), "nothing written before an error");
        reply.command_error(e);
    }
    reply.out.to_vec()
}

/// Runs a command given as space-separated words.
fn run(v: &mut MapView, line: &str) -> Vec<u8> {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    run_args(v, &parts)
}

fn int(reply: &[u8]) -> i64 {
    let s = std::str::from_utf8(reply).unwrap();
    s.strip_prefix(':')
        .and_then(|s| s.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("not an integer reply: {s:?}"))
        .parse()
        .unwrap()
}

fn ri(v: &mut MapView, line: &str) -> i64 {
    int(&run(v, line))
}

fn err(reply: Vec<u8>) -> String {
    let s = String::from_utf8(reply).unwrap();
    assert!(s.starts_with('-'), "not an error: {s:?}");
    s[1..].trim_end().to_string()
}

/// An array of integers and nils, as `Some`/`None`.
fn array(reply: &[u8]) -> Vec<Option<i64>> {
    let s = std::str::from_utf8(reply).unwrap();
    let mut lines = s.split("\r\n");
    let head = lines.next().unwrap();
    let n: usize = head.strip_prefix('*').expect("an array").parse().unwrap();
    let out: Vec<Option<i64>> = lines
        .take(n)
        .map(|l| match l {
            "$-1" | "_" => None,
            l => Some(l.strip_prefix(':').expect("an integer").parse().unwrap()),
        })
        .collect();
    assert_eq!(out.len(), n);
    out
}

fn bf(v: &mut MapView, line: &str) -> Vec<Option<i64>> {
    array(&run(v, line))
}

const OFFSET: &str = "ERR bit offset is not an integer or out of range";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// ----- SETBIT and GETBIT (tests/unit/type/string.tcl) ----------------------------------

#[test]
fn setbit_against_missing_string_and_integer_keys() {
    let mut v = view();
    assert_eq!(ri(&mut v, "SETBIT mykey 1 1"), 0);
    assert_eq!(get(&v, "mykey").unwrap(), b"\x40");
    set(&mut v, "mykey", b"@");
    assert_eq!(ri(&mut v, "SETBIT mykey 2 1"), 0);
    assert_eq!(get(&v, "mykey").unwrap(), b"\x60");
    assert_eq!(ri(&mut v, "SETBIT mykey 1 0"), 1);
    assert_eq!(get(&v, "mykey").unwrap(), b"\x20");
    // "1" is 0x31.
    set(&mut v, "mykey", b"1");
    assert_eq!(ri(&mut v, "SETBIT mykey 6 1"), 0);
    assert_eq!(get(&v, "mykey").unwrap(), b"3");
    assert_eq!(ri(&mut v, "SETBIT mykey 2 0"), 1);
    assert_eq!(get(&v, "mykey").unwrap(), b"\x13");
    // Growing pads with zeros.
    assert_eq!(ri(&mut v, "SETBIT mykey 23 1"), 0);
    assert_eq!(get(&v, "mykey").unwrap(), b"\x13\x00\x01");
}

#[test]
fn setbit_and_getbit_errors() {
    let mut v = view();
    put(&mut v, "list", Kind::List, b"x", None);
    assert_eq!(err(run(&mut v, "SETBIT list 0 1")), WRONGTYPE);
    assert_eq!(err(run(&mut v, "GETBIT list 0")), WRONGTYPE);
    // The offset is checked before the key, then the bit.
    assert_eq!(err(run(&mut v, "SETBIT list 4294967296 1")), OFFSET);
    assert_eq!(err(run(&mut v, "SETBIT list -1 1")), OFFSET);
    assert_eq!(err(run(&mut v, "SETBIT list abc 1")), OFFSET);
    assert_eq!(err(run(&mut v, "SETBIT list 01 1")), OFFSET);
    assert_eq!(err(run(&mut v, "GETBIT list 4294967296")), OFFSET);
    for bad in ["-1", "2", "10", "20", "x", "1.0", ""] {
        assert_eq!(
            err(run_args(
                &mut v,
                &[b"SETBIT", b"list", b"0", bad.as_bytes()]
            )),
            "ERR bit is not an integer or out of range",
            "{bad:?}"
        );
    }
    assert_eq!(v.stores, 0);
    // The largest offset is 2^32 - 1.
    assert_eq!(ri(&mut v, "GETBIT nokey 4294967295"), 0);
    assert_eq!(ri(&mut v, "GETBIT nokey 0"), 0);
}

#[test]
fn getbit_against_string_and_integer_keys() {
    let mut v = view();
    set(&mut v, "mykey", b"`");
    let bits: Vec<i64> = (0..8)
        .map(|i| ri(&mut v, &format!("GETBIT mykey {i}")))
        .collect();
    assert_eq!(bits, [0, 1, 1, 0, 0, 0, 0, 0]);
    for far in [8, 100, 10000] {
        assert_eq!(ri(&mut v, &format!("GETBIT mykey {far}")), 0);
    }
    set(&mut v, "mykey", b"1");
    let bits: Vec<i64> = (0..8)
        .map(|i| ri(&mut v, &format!("GETBIT mykey {i}")))
        .collect();
    assert_eq!(bits, [0, 0, 1, 1, 0, 0, 0, 1]);
}

#[test]
fn setbit_keeps_the_ttl_and_stores_only_changes() {
    let mut v = view();
    put(&mut v, "k", Kind::String, b"\x00", Some(99_000_000));
    assert_eq!(ri(&mut v, "SETBIT k 0 0"), 0);
    assert_eq!(v.stores, 0, "the same bit within the string stores nothing");
    assert_eq!(ri(&mut v, "SETBIT k 0 1"), 0);
    assert_eq!(v.stores, 1);
    assert_eq!(v.map[&b"k"[..]].expiry, Some(99_000_000));
    // Growing stores even when the bit is already 0.
    assert_eq!(ri(&mut v, "SETBIT k 90 0"), 0);
    assert_eq!(v.stores, 2);
    assert_eq!(get(&v, "k").unwrap().len(), 12);
    assert_eq!(v.map[&b"k"[..]].expiry, Some(99_000_000));
    // A missing key is created, even by a 0.
    assert_eq!(ri(&mut v, "SETBIT new 0 0"), 0);
    assert_eq!(get(&v, "new").unwrap(), b"\x00");
    // An expired key is a missing one: created anew, without the TTL.
    put(&mut v, "old", Kind::String, b"\xff", Some(1));
    assert_eq!(ri(&mut v, "SETBIT old 1 1"), 0);
    assert_eq!(get(&v, "old").unwrap(), b"\x40");
    assert_eq!(v.map[&b"old"[..]].expiry, None);
}

#[test]
fn offsets_are_bounded_by_the_views_longest_value() {
    let mut v = view();
    v.max = 8;
    assert_eq!(ri(&mut v, "SETBIT k 63 1"), 0);
    assert_eq!(get(&v, "k").unwrap().len(), 8);
    assert_eq!(err(run(&mut v, "SETBIT k 64 1")), OFFSET);
    assert_eq!(err(run(&mut v, "GETBIT k 64")), OFFSET);
    assert_eq!(err(run(&mut v, "BITFIELD k GET u8 64")), OFFSET);
    // The offset is within bounds but the field is not: nothing written.
    let stores = v.stores;
    assert_eq!(
        err(run(&mut v, "BITFIELD k SET u8 60 1")),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    assert_eq!(
        err(run(&mut v, "BITFIELD nokey SET u8 60 1")),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    assert_eq!(v.stores, stores);
    assert!(get(&v, "nokey").is_none());
    // Reading is fine past the end.
    assert_eq!(bf(&mut v, "BITFIELD k GET u8 60"), [Some(0x10)]);
}

#[test]
fn large_objects_are_refused() {
    let mut v = view();
    let m = meridian_blob::Manifest {
        version: 7,
        size: 5,
        chunk_size: 1 << 20,
        chunks: Vec::new(),
        inline: Some(Bytes::from_static(b"hello")),
        digest: [0; 32],
        placement: meridian_blob::Placement::default(),
        created_us: 1,
        meta: meridian_blob::ObjectMeta::default(),
    };
    let raw = m.encode();
    put(&mut v, "obj", Kind::String, &raw, None);
    set(&mut v, "s", b"a");
    for line in [
        "SETBIT obj 0 1",
        "GETBIT obj 0",
        "BITCOUNT obj",
        "BITPOS obj 1",
        "BITOP OR d s obj",
        "BITFIELD obj GET u8 0",
        "BITFIELD obj SET u8 0 1",
        "BITFIELD_RO obj GET u8 0",
    ] {
        let e = err(run(&mut v, line));
        assert!(
            e.starts_with("ERR the key holds a large object (5 bytes)"),
            "{line}: {e}"
        );
    }
    assert_eq!(get(&v, "obj").unwrap(), raw);
    assert!(get(&v, "d").is_none());
    // As a destination it is overwritten.
    assert_eq!(ri(&mut v, "BITOP NOT obj s"), 1);
    assert_eq!(get(&v, "obj").unwrap(), [!b'a']);
}

// ----- BITCOUNT --------------------------------------------------------------------------

fn count_bits(s: &[u8]) -> i64 {
    s.iter().map(|b| b.count_ones() as i64).sum()
}

/// Bits `start..=end` (bit positions) set.
fn count_bits_range(s: &[u8], start: usize, end: usize) -> i64 {
    (start..=end.min(s.len() * 8 - 1))
        .filter(|&i| s[i / 8] & (0x80 >> (i % 8)) != 0)
        .count() as i64
}

#[test]
fn bitcount_basics() {
    let mut v = view();
    assert_eq!(ri(&mut v, "BITCOUNT no-key"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT no-key 0 1000 bit"), 0);
    // A missing key is 0 whatever the other arguments.
    assert_eq!(ri(&mut v, "BITCOUNT no-key 0"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT no-key a b c d"), 0);
    set(&mut v, "str", b"xxxx");
    assert_eq!(ri(&mut v, "BITCOUNT str 4 10"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT str 32 87 bit"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT str -6 -7"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT str -6 -15 bit"), 0);
    // Two negative indexes with start after end answer 0 before BYTE|BIT is read.
    assert_eq!(ri(&mut v, "BITCOUNT str -1 -2 foo"), 0);
    for vec in [&b""[..], b"\xaa", b"\x00\x00\xff", b"foobar", b"123"] {
        set(&mut v, "str", vec);
        assert_eq!(ri(&mut v, "BITCOUNT str"), count_bits(vec));
        assert_eq!(ri(&mut v, "BITCOUNT str 0 -1 bit"), count_bits(vec));
        assert_eq!(ri(&mut v, "BITCOUNT str 0 -1 BYTE"), count_bits(vec));
    }
    let s = b"foobar";
    set(&mut v, "s", s);
    assert_eq!(ri(&mut v, "BITCOUNT s 0 -1"), count_bits(s));
    assert_eq!(ri(&mut v, "BITCOUNT s 1 -2"), count_bits(b"ooba"));
    assert_eq!(ri(&mut v, "BITCOUNT s -2 1"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT s 0 1000"), count_bits(s));
    assert_eq!(
        ri(&mut v, "BITCOUNT s 10 14 bit"),
        count_bits_range(s, 10, 14)
    );
    assert_eq!(
        ri(&mut v, "BITCOUNT s 3 14 bit"),
        count_bits_range(s, 3, 14)
    );
    assert_eq!(
        ri(&mut v, "BITCOUNT s 3 29 bit"),
        count_bits_range(s, 3, 29)
    );
    assert_eq!(
        ri(&mut v, "BITCOUNT s 10 -34 bit"),
        count_bits_range(s, 10, 14)
    );
    assert_eq!(
        ri(&mut v, "BITCOUNT s 3 -34 bit"),
        count_bits_range(s, 3, 14)
    );
    assert_eq!(
        ri(&mut v, "BITCOUNT s 3 -19 bit"),
        count_bits_range(s, 3, 29)
    );
    assert_eq!(ri(&mut v, "BITCOUNT s -2 1 bit"), 0);
    assert_eq!(ri(&mut v, "BITCOUNT s 0 1000 bit"), count_bits(s));
    assert_eq!(ri(&mut v, "BITCOUNT s 0 4294967296"), count_bits(s));
    assert_eq!(
        ri(
            &mut v,
            "BITCOUNT s -9223372036854775808 9223372036854775807 bit"
        ),
        count_bits(s)
    );
    assert_eq!(err(run(&mut v, "BITCOUNT s 0")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITCOUNT s 0 1 hello")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITCOUNT s 0 1 bit x")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITCOUNT s a 1")), NOT_INT);
    assert_eq!(
        err(run(&mut v, "BITCOUNT s 0 9223372036854775808")),
        NOT_INT
    );
    set(&mut v, "str", b"ab");
    assert_eq!(ri(&mut v, "BITCOUNT str 1 -1"), 3);
    set(&mut v, "str", b"__PPxxxxxxxxxxxxxxxxRR__");
    assert_eq!(ri(&mut v, "BITCOUNT str 2 -3"), 74);
    put(&mut v, "h", Kind::Hash, b"", None);
    assert_eq!(err(run(&mut v, "BITCOUNT h")), WRONGTYPE);
    assert_eq!(
        err(run(&mut v, "BITCOUNT h 0")),
        WRONGTYPE,
        "the type before the syntax"
    );
}

// ----- BITPOS ----------------------------------------------------------------------------

#[test]
fn bitpos_cases_of_bitops_tcl() {
    let mut v = view();
    assert_eq!(ri(&mut v, "BITPOS str 0"), 0);
    assert_eq!(ri(&mut v, "BITPOS str 0 0 -1 bit"), 0);
    assert_eq!(ri(&mut v, "BITPOS str 1"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 1 0 -1"), -1);
    // A missing key answers before the range is read.
    assert_eq!(ri(&mut v, "BITPOS str 1 x y z"), -1);

    set(&mut v, "str", b"\xff\xf0\x00");
    assert_eq!(ri(&mut v, "BITPOS str 0"), 12);
    assert_eq!(ri(&mut v, "BITPOS str 0 0 -1 bit"), 12);
    assert_eq!(ri(&mut v, "BITPOS str 0 1"), 12);
    assert_eq!(ri(&mut v, "BITPOS str 0 1 -1 bit"), 12);
    set(&mut v, "str", b"\x00\x0f\x00");
    assert_eq!(ri(&mut v, "BITPOS str 1"), 12);
    assert_eq!(ri(&mut v, "BITPOS str 1 0 -1 bit"), 12);
    set(&mut v, "str", b"\x00\x0f\xff");
    assert_eq!(ri(&mut v, "BITPOS str 1 1"), 12);
    assert_eq!(ri(&mut v, "BITPOS str 1 1 -1 bit"), 12);

    for (fill, last, bit) in [(0xffu8, 0x0fu8, 0), (0x00, 0xf0, 1)] {
        let mut s = vec![fill; 27];
        s.push(last);
        set(&mut v, "str", &s);
        for start in 0..=8 {
            assert_eq!(ri(&mut v, &format!("BITPOS str {bit} {start}")), 216);
        }
        for start in [1, 9, 17, 25, 33, 41, 49, 57, 65] {
            assert_eq!(ri(&mut v, &format!("BITPOS str {bit} {start} -1 bit")), 216);
        }
    }

    let mut s = Vec::new();
    for _ in 0..20 {
        set(&mut v, "str", &s);
        assert_eq!(ri(&mut v, "BITPOS str 1"), -1);
        assert_eq!(ri(&mut v, "BITPOS str 1 0 -1 bit"), -1);
        s.push(0);
    }

    set(&mut v, "str", b"\x00\xff\x00");
    assert_eq!(ri(&mut v, "BITPOS str 0 0 -1"), 0);
    assert_eq!(ri(&mut v, "BITPOS str 0 1 -1"), 16);
    assert_eq!(ri(&mut v, "BITPOS str 0 2 -1"), 16);
    assert_eq!(ri(&mut v, "BITPOS str 0 2 200"), 16);
    assert_eq!(ri(&mut v, "BITPOS str 0 1 1"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 0 0 -1 bit"), 0);
    assert_eq!(ri(&mut v, "BITPOS str 0 8 -1 bit"), 16);
    assert_eq!(ri(&mut v, "BITPOS str 0 16 -1 bit"), 16);
    assert_eq!(ri(&mut v, "BITPOS str 0 16 200 bit"), 16);
    assert_eq!(ri(&mut v, "BITPOS str 0 8 8 bit"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 1 0 -1"), 8);
    assert_eq!(ri(&mut v, "BITPOS str 1 1 -1"), 8);
    assert_eq!(ri(&mut v, "BITPOS str 1 2 -1"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 1 2 200"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 1 1 1"), 8);
    assert_eq!(ri(&mut v, "BITPOS str 1 0 -1 bit"), 8);
    assert_eq!(ri(&mut v, "BITPOS str 1 8 -1 bit"), 8);
    assert_eq!(ri(&mut v, "BITPOS str 1 16 -1 bit"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 1 16 200 bit"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 1 8 8 bit"), 8);

    // A 0 not found: past the string without an end, -1 with one.
    set(&mut v, "str", b"\xff\xff\xff");
    assert_eq!(ri(&mut v, "BITPOS str 0"), 24);
    assert_eq!(ri(&mut v, "BITPOS str 0 0"), 24);
    assert_eq!(ri(&mut v, "BITPOS str 0 1"), 24);
    assert_eq!(ri(&mut v, "BITPOS str 0 -1"), 24);
    assert_eq!(ri(&mut v, "BITPOS str 0 0 -1"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 0 0 -1 bit"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 0 0 2 byte"), -1);
    // An empty range (start past the end) is -1 for either bit.
    assert_eq!(ri(&mut v, "BITPOS str 0 3"), -1);
    assert_eq!(ri(&mut v, "BITPOS str 0 2 1"), -1);
    // An empty string is an empty range.
    set(&mut v, "empty", b"");
    assert_eq!(ri(&mut v, "BITPOS empty 0"), -1);
    assert_eq!(ri(&mut v, "BITPOS empty 1"), -1);
    assert_eq!(ri(&mut v, "BITPOS empty 0 0"), -1);
}

#[test]
fn bitpos_errors_in_redis_order() {
    let mut v = view();
    put(&mut v, "h", Kind::Hash, b"", None);
    set(&mut v, "s", b"\x0f");
    assert_eq!(err(run(&mut v, "BITPOS h x")), NOT_INT);
    assert_eq!(
        err(run(&mut v, "BITPOS h 2")),
        "ERR The bit argument must be 1 or 0."
    );
    assert_eq!(
        err(run(&mut v, "BITPOS h -1")),
        "ERR The bit argument must be 1 or 0."
    );
    assert_eq!(err(run(&mut v, "BITPOS h 1 x")), WRONGTYPE);
    assert_eq!(err(run(&mut v, "BITPOS s 1 x")), NOT_INT);
    assert_eq!(err(run(&mut v, "BITPOS s 1 0 x")), NOT_INT);
    // BYTE|BIT is read before the end.
    assert_eq!(err(run(&mut v, "BITPOS s 1 0 x nope")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITPOS s 1 0 x bit")), NOT_INT);
    assert_eq!(err(run(&mut v, "BITPOS s 1 0 1 bit x")), "ERR syntax error");
    assert_eq!(ri(&mut v, "BITPOS s 1 0 7 BiT"), 4);
    assert_eq!(ri(&mut v, "BITPOS s 1 0 1 BiT"), -1);
}

// ----- BITOP -----------------------------------------------------------------------------

#[test]
fn bitop_cases_of_bitops_tcl() {
    let mut v = view();
    set(&mut v, "s", b"");
    assert_eq!(ri(&mut v, "BITOP NOT dest s"), 0);
    assert!(get(&v, "dest").is_none());
    set(&mut v, "s", b"\xaa\x00\xff\x55");
    assert_eq!(ri(&mut v, "BITOP NOT dest s"), 4);
    assert_eq!(get(&v, "dest").unwrap(), b"\x55\xff\x00\xaa");
    assert_eq!(ri(&mut v, "BITOP not s s"), 4);
    assert_eq!(get(&v, "s").unwrap(), b"\x55\xff\x00\xaa");

    set(&mut v, "a", b"\x01\x02\xff");
    for op in ["and", "or", "xor"] {
        assert_eq!(ri(&mut v, &format!("BITOP {op} res a")), 3);
        assert_eq!(get(&v, "res").unwrap(), b"\x01\x02\xff");
    }
    ri(&mut v, "BITOP and res1 no-such-key a");
    ri(&mut v, "BITOP or res2 no-such-key a no-such-key");
    ri(&mut v, "BITOP xor res3 no-such-key a");
    assert_eq!(get(&v, "res1").unwrap(), b"\x00\x00\x00");
    assert_eq!(get(&v, "res2").unwrap(), b"\x01\x02\xff");
    assert_eq!(get(&v, "res3").unwrap(), b"\x01\x02\xff");

    set(&mut v, "a", b"\x01\x02\xff\xff");
    set(&mut v, "b", b"\x01\x02\xff");
    ri(&mut v, "BITOP and res1 a b");
    ri(&mut v, "BITOP or res2 a b");
    ri(&mut v, "BITOP xor res3 a b");
    assert_eq!(get(&v, "res1").unwrap(), b"\x01\x02\xff\x00");
    assert_eq!(get(&v, "res2").unwrap(), b"\x01\x02\xff\xff");
    assert_eq!(get(&v, "res3").unwrap(), b"\x00\x00\x00\xff");

    set(&mut v, "a", b"1");
    set(&mut v, "b", b"2");
    assert_eq!(ri(&mut v, "BITOP xor dest a b a"), 1);
    assert_eq!(get(&v, "dest").unwrap(), b"2");

    put(&mut v, "c", Kind::List, b"x", None);
    let stores = v.stores;
    assert_eq!(err(run(&mut v, "BITOP xor dest a b c d")), WRONGTYPE);
    assert_eq!(v.stores, stores);

    set(&mut v, "a", &[0; 32]);
    v.map.remove(&b"b"[..]);
    assert_eq!(ri(&mut v, "BITOP or x a b"), 32);
}

#[test]
fn bitop_destination_and_errors() {
    let mut v = view();
    // The destination loses its TTL and its type.
    put(&mut v, "d", Kind::Hash, b"whatever", Some(99_000_000));
    set(&mut v, "a", b"\x0f");
    assert_eq!(ri(&mut v, "BITOP OR d a"), 1);
    let d = &v.map[&b"d"[..]];
    assert_eq!(
        (d.kind, d.expiry, &d.data[..]),
        (Kind::String, None, &b"\x0f"[..])
    );
    // An empty result deletes it (whatever its type), or writes nothing.
    put(&mut v, "d", Kind::Set, b"whatever", None);
    assert_eq!(ri(&mut v, "BITOP AND d nope1 nope2"), 0);
    assert!(get(&v, "d").is_none());
    let stores = v.stores;
    assert_eq!(ri(&mut v, "BITOP AND d nope1 nope2"), 0);
    assert_eq!(v.stores, stores);
    assert_eq!(
        err(run(&mut v, "BITOP NOT d a a")),
        "ERR BITOP NOT must be called with a single source key."
    );
    assert_eq!(err(run(&mut v, "BITOP NAND d a a")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITOP ORR d a")), "ERR syntax error");
    // C's strcasecmp stops at a NUL.
    assert_eq!(int(&run_args(&mut v, &[b"BITOP", b"or\0x", b"d", b"a"])), 1);
    // Sources are read in order: WRONGTYPE at the first bad one, after missing ones.
    put(&mut v, "h", Kind::Hash, b"", None);
    assert_eq!(err(run(&mut v, "BITOP OR d nope h a")), WRONGTYPE);
    assert_eq!(v.reads(), 8);
}

// ----- BITFIELD (tests/unit/bitfield.tcl) -------------------------------------------------

#[test]
fn bitfield_cases_of_bitfield_tcl() {
    let mut v = view();
    assert_eq!(bf(&mut v, "BITFIELD bits set i8 0 -100"), [Some(0)]);
    assert_eq!(bf(&mut v, "BITFIELD bits set i8 0 101"), [Some(-100)]);
    assert_eq!(bf(&mut v, "BITFIELD bits get i8 0"), [Some(101)]);

    v.map.clear();
    assert_eq!(bf(&mut v, "BITFIELD bits set u8 0 255"), [Some(0)]);
    assert_eq!(bf(&mut v, "BITFIELD bits set u8 0 100"), [Some(255)]);
    assert_eq!(bf(&mut v, "BITFIELD bits get u8 0"), [Some(100)]);

    v.map.clear();
    assert_eq!(
        bf(&mut v, "BITFIELD bits set i8 0 255 set i8 0 100 get i8 0"),
        [Some(0), Some(-1), Some(100)]
    );
    v.map.clear();
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD bits set u8 0 255 incrby u8 0 100 get u8 0"
        ),
        [Some(0), Some(99), Some(99)]
    );
    v.map.clear();
    assert_eq!(run(&mut v, "BITFIELD bits"), b"*0\r\n");
    assert!(get(&v, "bits").is_none());

    bf(&mut v, "BITFIELD bits set u8 #0 65");
    bf(&mut v, "BITFIELD bits set u8 #1 66");
    bf(&mut v, "BITFIELD bits set u8 #2 67");
    assert_eq!(get(&v, "bits").unwrap(), b"ABC");

    v.map.clear();
    bf(&mut v, "BITFIELD bits set u8 #0 10");
    assert_eq!(bf(&mut v, "BITFIELD bits incrby u8 #0 100"), [Some(110)]);
    assert_eq!(bf(&mut v, "BITFIELD bits incrby u8 #0 100"), [Some(210)]);
    v.map.clear();
    bf(&mut v, "BITFIELD bits set u8 #0 10");
    assert_eq!(
        bf(&mut v, "BITFIELD bits incrby u8 #0 100 incrby u8 #0 100"),
        [Some(110), Some(210)]
    );

    for (ty, ow, a, b, want) in [
        ("u8", "wrap", "257", "255", [101, 101, 100, 100]),
        ("u8", "sat", "257", "-255", [255, 255, 0, 0]),
        ("i8", "wrap", "257", "255", [101, 101, 100, 100]),
        ("i8", "sat", "257", "-255", [127, 127, -128, -128]),
    ] {
        v.map.clear();
        bf(&mut v, &format!("BITFIELD bits set {ty} #0 100"));
        let got = [
            bf(
                &mut v,
                &format!("BITFIELD bits overflow {ow} incrby {ty} #0 {a}"),
            )[0],
            bf(&mut v, &format!("BITFIELD bits get {ty} #0"))[0],
            bf(
                &mut v,
                &format!("BITFIELD bits overflow {ow} incrby {ty} #0 {b}"),
            )[0],
            bf(&mut v, &format!("BITFIELD bits get {ty} #0"))[0],
        ];
        assert_eq!(got, want.map(Some), "{ty} {ow}");
    }

    set(&mut v, "bits", b"1");
    assert_eq!(bf(&mut v, "BITFIELD bits get u1 0"), [Some(0)]);

    v.map.clear();
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD mystring SET i8 0 10 SET i8 64 10 INCRBY i8 10 99900"
        ),
        [Some(0), Some(0), Some(60)]
    );

    v.map.clear();
    assert_eq!(bf(&mut v, "BITFIELD bits set u8 0 255"), [Some(0)]);
    assert_eq!(bf(&mut v, "BITFIELD bits set u8 0 100"), [Some(255)]);
    assert_eq!(bf(&mut v, "BITFIELD_RO bits get u8 0"), [Some(100)]);
    assert_eq!(run(&mut v, "BITFIELD_RO bits"), b"*0\r\n");
    assert_eq!(
        err(run(&mut v, "BITFIELD_RO bits set u8 0 100 get u8 0")),
        "ERR BITFIELD_RO only supports the GET subcommand"
    );
}

#[test]
fn bitfield_fail_and_changes() {
    let mut v = view();
    // FAIL answers nil and writes nothing, but the key is created (as Redis does).
    assert_eq!(
        run(&mut v, "BITFIELD k OVERFLOW FAIL SET u2 0 5"),
        b"*1\r\n$-1\r\n"
    );
    assert_eq!(get(&v, "k").unwrap(), b"\x00");
    assert_eq!(
        run_resp(
            &mut v,
            &[
                b"BITFIELD",
                b"k",
                b"OVERFLOW",
                b"FAIL",
                b"INCRBY",
                b"i2",
                b"0",
                b"2"
            ],
            true
        ),
        b"*1\r\n_\r\n"
    );
    // OVERFLOW applies to what follows it only.
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k INCRBY u2 0 5 OVERFLOW FAIL INCRBY u2 0 5 OVERFLOW SAT INCRBY u2 0 5"
        ),
        [Some(1), None, Some(3)]
    );
    // Nothing changed, nothing stored; a TTL is kept.
    put(&mut v, "t", Kind::String, b"\x05", Some(99_000_000));
    let stores = v.stores;
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD t SET u8 0 5 OVERFLOW FAIL INCRBY u8 0 255"
        ),
        [Some(5), None]
    );
    assert_eq!(v.stores, stores);
    assert_eq!(bf(&mut v, "BITFIELD t SET i5 0 1"), [Some(0)]);
    assert_eq!(v.stores, stores + 1);
    assert_eq!(v.map[&b"t"[..]].expiry, Some(99_000_000));
    // Growing counts as a change.
    assert_eq!(bf(&mut v, "BITFIELD t SET i5 90 0"), [Some(0)]);
    assert_eq!(v.stores, stores + 2);
    assert_eq!(get(&v, "t").unwrap().len(), 12);
    // GETs see earlier writes of the same command, and read zeros past the end.
    v.map.clear();
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k GET u8 0 SET u4 4 15 GET u8 0 GET u8 100 GET i64 0"
        ),
        [Some(0), Some(0), Some(15), Some(0), Some(15 << 56)]
    );
    assert_eq!(get(&v, "k").unwrap(), b"\x0f");
}

#[test]
fn bitfield_edges_of_bitops_c() {
    let mut v = view();
    // 64-bit signed fields at an unaligned offset.
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k SET i64 3 -2 GET i64 3 GET u63 3 GET u1 66 INCRBY i64 3 1"
        ),
        [Some(0), Some(-2), Some(i64::MAX), Some(0), Some(-1)]
    );
    assert_eq!(
        get(&v, "k").unwrap(),
        b"\x1f\xff\xff\xff\xff\xff\xff\xff\xe0"
    );
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k OVERFLOW SAT INCRBY i64 3 -9223372036854775808"
        ),
        [Some(i64::MIN)]
    );
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW WRAP INCRBY i64 3 -1"),
        [Some(i64::MAX)]
    );
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW FAIL INCRBY i64 3 1"),
        [None]
    );
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW SAT INCRBY i64 3 1"),
        [Some(i64::MAX)]
    );
    // An unsigned SET of a negative value is the huge value it casts to.
    v.map.clear();
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW SAT SET u8 0 -1 GET u8 0"),
        [Some(0), Some(255)]
    );
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW SAT SET u8 0 -300 GET u8 0"),
        [Some(255), Some(255)]
    );
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW WRAP SET u8 0 -2 GET u8 0"),
        [Some(255), Some(254)]
    );
    assert_eq!(bf(&mut v, "BITFIELD k OVERFLOW FAIL SET u8 0 -2"), [None]);
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW SAT SET u63 0 -1 GET u63 0"),
        [Some(254 << 55), Some(i64::MAX)]
    );
    // A signed SAT of the most negative 64-bit values saturates at the maximum
    // (`checkSignedBitfieldOverflow`'s wrapped `maxincr`).
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k OVERFLOW SAT SET i8 0 -9223372036854775808 GET i8 0"
        ),
        [Some(-1), Some(127)]
    );
    assert_eq!(
        bf(&mut v, "BITFIELD k OVERFLOW SAT SET i8 0 -1000 GET i8 0"),
        [Some(127), Some(-128)]
    );
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k OVERFLOW WRAP SET i8 0 -9223372036854775808 GET i8 0"
        ),
        [Some(-128), Some(0)]
    );
    // u1 and i1.
    v.map.clear();
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k INCRBY u1 0 1 INCRBY u1 0 1 INCRBY i1 0 -1 INCRBY i1 0 -1"
        ),
        [Some(1), Some(0), Some(-1), Some(0)]
    );
    assert_eq!(
        bf(
            &mut v,
            "BITFIELD k OVERFLOW SAT INCRBY i1 0 5 INCRBY i1 0 -5"
        ),
        [Some(0), Some(-1)]
    );
}

#[test]
fn bitfield_parse_errors() {
    let mut v = view();
    const TYPE: &str = "ERR Invalid bitfield type. Use something like i16 u8. \
                        Note that u64 is not supported but i64 is.";
    for ty in [
        "u64", "i65", "i0", "u0", "x8", "I8", "U8", "u", "i", "i08", "i+8", "i-1", "i 8", "",
    ] {
        assert_eq!(
            err(run_args(
                &mut v,
                &[b"BITFIELD", b"k", b"GET", ty.as_bytes(), b"0"]
            )),
            TYPE,
            "{ty:?}"
        );
    }
    // C stops reading the width at a NUL.
    assert_eq!(
        bf_args(&mut v, &[b"BITFIELD", b"k", b"GET", b"u8\0junk", b"0"]),
        [Some(0)]
    );
    for off in [
        "-1",
        "x",
        "#x",
        "##1",
        "#-1",
        "1.5",
        "4294967296",
        "#536870912",
        "#9223372036854775807",
        "#",
    ] {
        assert_eq!(
            err(run_args(
                &mut v,
                &[b"BITFIELD", b"k", b"GET", b"u8", off.as_bytes()]
            )),
            OFFSET,
            "{off:?}"
        );
    }
    assert_eq!(
        bf(&mut v, "BITFIELD k GET u8 4294967295 GET u8 #536870911"),
        [Some(0), Some(0)]
    );
    assert_eq!(err(run(&mut v, "BITFIELD k SET u8 0 x")), NOT_INT);
    assert_eq!(
        err(run(&mut v, "BITFIELD k INCRBY u8 0 9223372036854775808")),
        NOT_INT
    );
    assert_eq!(
        err(run(&mut v, "BITFIELD k OVERFLOW nope GET u8 0")),
        "ERR Invalid OVERFLOW type specified"
    );
    assert_eq!(err(run(&mut v, "BITFIELD k OVERFLOW")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITFIELD k GET u8")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITFIELD k SET u8 0")), "ERR syntax error");
    assert_eq!(err(run(&mut v, "BITFIELD k FOO u8 0")), "ERR syntax error");
    // Every subcommand parses before the key is read, and before BITFIELD_RO's refusal.
    put(&mut v, "h", Kind::Hash, b"", None);
    assert_eq!(err(run(&mut v, "BITFIELD h GET u8 0 GET u64 0")), TYPE);
    assert_eq!(err(run(&mut v, "BITFIELD h GET u8 0")), WRONGTYPE);
    assert_eq!(err(run(&mut v, "BITFIELD h SET u8 0 1")), WRONGTYPE);
    assert_eq!(err(run(&mut v, "BITFIELD h")), WRONGTYPE);
    assert_eq!(err(run(&mut v, "BITFIELD_RO h SET u8 0 1 GET u64 0")), TYPE);
    assert_eq!(
        err(run(&mut v, "BITFIELD_RO h SET u8 0 1")),
        "ERR BITFIELD_RO only supports the GET subcommand"
    );
    assert_eq!(err(run(&mut v, "BITFIELD_RO h GET u8 0")), WRONGTYPE);
    assert_eq!(run(&mut v, "BITFIELD_RO nokey OVERFLOW SAT"), b"*0\r\n");
    assert_eq!(v.stores, 0);
    assert!(get(&v, "nokey").is_none());
}

fn bf_args(v: &mut MapView, parts: &[&[u8]]) -> Vec<Option<i64>> {
    array(&run_args(v, parts))
}

#[test]
fn popcount_of_long_runs() {
    for len in [0, 1, 7, 8, 239, 240, 241, 480, 4096 + 13] {
        assert_eq!(bits::popcount(&vec![0xff; len]), 8 * len as u64, "{len}");
        assert_eq!(bits::popcount(&vec![0x00; len]), 0);
        assert_eq!(bits::popcount(&vec![0x81; len]), 2 * len as u64);
    }
}

// ----- model tests -----------------------------------------------------------------------

fn bit_at(s: &[u8], i: usize) -> bool {
    s[i / 8] & (0x80 >> (i % 8)) != 0
}

/// `clamp`, written as the Tcl tests think of ranges: bit positions `lo..=hi`, or `None`.
fn model_range(start: i64, end: i64, len: usize, in_bits: bool) -> Option<(usize, usize)> {
    let total = if in_bits { len * 8 } else { len } as i128;
    let norm = |x: i64| {
        let x = x as i128;
        (if x < 0 { total + x } else { x }).max(0)
    };
    let (s, e) = (norm(start), norm(end).min(total - 1));
    if s > e {
        return None;
    }
    let (s, e) = (s as usize, e as usize);
    Some(if in_bits { (s, e) } else { (s * 8, e * 8 + 7) })
}

fn small_index() -> impl Strategy<Value = i64> {
    prop_oneof![-300i64..300, Just(i64::MIN), Just(i64::MAX)]
}

proptest! {
    #[test]
    fn bitcount_and_bitpos_match_a_bit_by_bit_model(
        s in prop::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..100),
        start in small_index(),
        end in small_index(),
        in_bits in any::<bool>(),
        with_end in any::<bool>(),
        bit in any::<bool>(),
    ) {
        let mut v = view();
        set(&mut v, "k", &s);
        let unit = if in_bits { "BIT" } else { "BYTE" };
        // BITCOUNT
        let got = ri(&mut v, &format!("BITCOUNT k {start} {end} {unit}"));
        let want = if start < 0 && end < 0 && start > end {
            0
        } else {
            model_range(start, end, s.len(), in_bits)
                .map_or(0, |(a, b)| (a..=b).filter(|&i| bit_at(&s, i)).count() as i64)
        };
        prop_assert_eq!(got, want);
        prop_assert_eq!(ri(&mut v, "BITCOUNT k"), count_bits(&s));
        // BITPOS
        let b = u8::from(bit);
        let (line, range, end_given) = if with_end {
            let range = model_range(start, end, s.len(), in_bits);
            (format!("BITPOS k {b} {start} {end} {unit}"), range, true)
        } else {
            let range = model_range(start, s.len() as i64 - 1, s.len(), false);
            (format!("BITPOS k {b} {start}"), range, false)
        };
        let want = match range {
            None => -1,
            Some((a, z)) => match (a..=z).find(|&i| bit_at(&s, i) == bit) {
                Some(p) => p as i64,
                None if !bit && !end_given => z as i64 + 1,
                None => -1,
            },
        };
        prop_assert_eq!(ri(&mut v, &line), want);
        let whole = (0..s.len() * 8).find(|&i| bit_at(&s, i) == bit).map(|p| p as i64);
        let want = whole.unwrap_or(if bit || s.is_empty() { -1 } else { s.len() as i64 * 8 });
        prop_assert_eq!(ri(&mut v, &format!("BITPOS k {b}")), want);
    }

    #[test]
    fn bitop_matches_a_byte_by_byte_model(
        vecs in prop::collection::vec(
            prop::option::of(prop::collection::vec(any::<u8>(), 0..80)),
            1..6,
        ),
        op in 0..4usize,
    ) {
        let mut v = view();
        let names: Vec<String> = (0..vecs.len()).map(|i| format!("v{i}")).collect();
        for (name, s) in names.iter().zip(&vecs) {
            if let Some(s) = s {
                set(&mut v, name, s);
            }
        }
        let (op, vecs) = if op == 3 {
            ("NOT", &vecs[..1])
        } else {
            (["AND", "OR", "XOR"][op], &vecs[..])
        };
        let line = format!("BITOP {op} dest {}", names[..vecs.len()].join(" "));
        let max = vecs.iter().map(|s| s.as_ref().map_or(0, Vec::len)).max().unwrap();
        let byte = |s: &Option<Vec<u8>>, i: usize| {
            s.as_ref().and_then(|s| s.get(i).copied()).unwrap_or(0)
        };
        let want: Vec<u8> = (0..max)
            .map(|i| {
                let first = byte(&vecs[0], i);
                vecs[1..].iter().fold(if op == "NOT" { !first } else { first }, |acc, s| match op {
                    "AND" => acc & byte(s, i),
                    "OR" => acc | byte(s, i),
                    _ => acc ^ byte(s, i),
                })
            })
            .collect();
        prop_assert_eq!(ri(&mut v, &line), max as i64);
        if max == 0 {
            prop_assert!(get(&v, "dest").is_none());
        } else {
            prop_assert_eq!(get(&v, "dest").unwrap(), want);
        }
    }

    #[test]
    fn setbit_getbit_match_a_bool_vector(
        ops in prop::collection::vec((0u64..200, any::<bool>()), 1..60),
    ) {
        let mut v = view();
        let mut model: Vec<bool> = Vec::new();
        let mut exists = false;
        for (off, on) in ops {
            let i = off as usize;
            let was = model.get(i).copied().unwrap_or(false);
            let line = format!("SETBIT k {off} {}", u8::from(on));
            prop_assert_eq!(ri(&mut v, &line), i64::from(was));
            let len = model.len().max((i / 8 + 1) * 8);
            model.resize(len, false);
            model[i] = on;
            exists = true;
            prop_assert_eq!(ri(&mut v, &format!("GETBIT k {off}")), i64::from(on));
        }
        prop_assert!(exists);
        let bytes: Vec<u8> = model
            .chunks(8)
            .map(|c| c.iter().fold(0u8, |acc, &b| acc << 1 | u8::from(b)))
            .collect();
        prop_assert_eq!(get(&v, "k").unwrap(), bytes);
    }

    #[test]
    fn bitfield_matches_an_arbitrary_precision_model(
        init in prop::collection::vec(any::<u8>(), 0..12),
        signed in any::<bool>(),
        width in 1u32..=64,
        offset in 0u64..40,
        value in prop_oneof![any::<i64>(), -300i64..300],
        incr in prop_oneof![any::<i64>(), -300i64..300],
        ow in 0..3usize,
    ) {
        let width = if signed { width } else { width.min(63) };
        let mut v = view();
        set(&mut v, "k", &init);
        let ty = format!("{}{width}", if signed { 'i' } else { 'u' });
        let ow_name = ["WRAP", "SAT", "FAIL"][ow];
        let (min, max): (i128, i128) = if signed {
            (-(1i128 << (width - 1)), (1i128 << (width - 1)) - 1)
        } else {
            (0, (1i128 << width) - 1)
        };
        let range = 1i128 << width;
        // What a field holds after storing `x` under the mode, or None for FAIL.
        let store = |x: i128| -> Option<i128> {
            if (min..=max).contains(&x) {
                return Some(x);
            }
            match ow {
                0 => Some((x - min).rem_euclid(range) + min),
                1 => Some(if x > max { max } else { min }),
                _ => None,
            }
        };
        // Bits before the field keep their value; the field reads through the model.
        let old_model = {
            let mut x: i128 = 0;
            for i in 0..u64::from(width) {
                let p = (offset + i) as usize;
                let b = p / 8 < init.len() && bit_at(&init, p);
                x = x << 1 | i128::from(b);
            }
            if signed && x >= 1i128 << (width - 1) { x - range } else { x }
        };
        // SET: an unsigned type takes the value as C's cast to uint64 does; a signed one
        // saturates as `bitops.c` does (the most negative values to the maximum).
        let set_value: i128 = if signed { i128::from(value) } else { i128::from(value as u64) };
        let mut sat_quirk = false;
        if signed && ow == 1 && width < 64 && (max - i128::from(value)) > i128::from(i64::MAX) {
            sat_quirk = true;
        }
        let after_set = if sat_quirk { Some(max) } else { store(set_value) };
        let line =
            format!("BITFIELD k OVERFLOW {ow_name} SET {ty} {offset} {value} GET {ty} {offset}");
        let got = bf(&mut v, &line);
        let current = after_set.unwrap_or(old_model);
        prop_assert_eq!(got[0], after_set.map(|_| old_model as i64));
        prop_assert_eq!(got[1], Some(current as i64));
        // INCRBY
        let after_incr = store(current + i128::from(incr));
        let line =
            format!("BITFIELD k OVERFLOW {ow_name} INCRBY {ty} {offset} {incr} GET {ty} {offset}");
        let got = bf(&mut v, &line);
        prop_assert_eq!(got[0], after_incr.map(|x| x as i64));
        prop_assert_eq!(got[1], Some(after_incr.unwrap_or(current) as i64));
        // Bits outside the field are untouched.
        let data = get(&v, "k").unwrap();
        for p in 0..data.len() * 8 {
            if p < offset as usize || p >= (offset + u64::from(width)) as usize {
                let before = p / 8 < init.len() && bit_at(&init, p);
                prop_assert_eq!(bit_at(&data, p), before, "bit {}", p);
            }
        }
    }

    #[test]
    fn popcount_and_first_byte_match_naive(
        s in prop::collection::vec(prop_oneof![Just(0u8), Just(0xff), any::<u8>()], 0..1000),
        skip in prop_oneof![Just(0u8), Just(0xff)],
    ) {
        prop_assert_eq!(bits::popcount(&s) as i64, count_bits(&s));
        let mut all = s.clone();
        all.iter_mut().for_each(|b| *b = skip);
        let end = all.len() as u64 * 8;
        let data = [&all[..], &[!skip]].concat();
        prop_assert_eq!(bits::first_bit(&data, 0, end + 7, skip == 0), Some(end));
    }
}
