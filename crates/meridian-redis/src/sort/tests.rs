//! SORT and SORT_RO over an in-memory view: replies and errors as `sort.c` and
//! `tests/unit/sort.tcl` say, `strtod`'s grammar, hostile LIMITs and patterns, and a model
//! test of numeric and ALPHA sorting with LIMIT and DESC against a sorted `Vec`.

use super::*;
use crate::OwnedArgs;
use crate::view::Entry;
use crate::zsets::{Score, ZSet};

use proptest::prelude::*;

use crate::test_view::TestView as MapView;

fn view() -> MapView {
    MapView::new()
}

fn put(v: &mut MapView, key: &str, kind: Kind, data: Vec<u8>) {
    v.map.insert(
        key.as_bytes().to_vec(),
        Entry {
            data: Bytes::from(data),
            expiry: None,
            kind,
        },
    );
}

fn set_string(v: &mut MapView, key: &str, value: &str) {
    put(v, key, Kind::String, value.as_bytes().to_vec());
}

/// RPUSH order.
fn set_list<E: AsRef<[u8]>>(v: &mut MapView, key: &str, elems: &[E]) {
    // An empty list is never stored.
    if let Some(data) = crate::lists::encoding::encode(elems.iter().map(AsRef::as_ref)) {
        put(v, key, Kind::List, data);
    }
}

fn set_set<E: AsRef<[u8]>>(v: &mut MapView, key: &str, members: &[E]) {
    let mut m: Vec<&[u8]> = members.iter().map(AsRef::as_ref).collect();
    m.sort();
    m.dedup();
    if !m.is_empty() {
        put(v, key, Kind::Set, crate::sets::encode(&m));
    }
}

fn set_zset(v: &mut MapView, key: &str, entries: &[(f64, &str)]) {
    let mut z = ZSet::default();
    for &(s, m) in entries {
        z.insert(m.as_bytes(), Score::new(s).unwrap());
    }
    put(v, key, Kind::ZSet, z.encode());
}

fn set_hash(v: &mut MapView, key: &str, fields: &[(&str, &str)]) {
    let mut f: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|(a, b)| (a.as_bytes(), b.as_bytes()))
        .collect();
    f.sort();
    put(
        v,
        key,
        Kind::Hash,
        meridian_core::hash::encode(f.into_iter()),
    );
}

fn list_of(v: &MapView, key: &str) -> Option<Vec<Vec<u8>>> {
    let e = v.map.get(key.as_bytes())?;
    assert_eq!(e.kind, Kind::List);
    Some(
        crate::lists::encoding::decode(&e.data)
            .unwrap()
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect(),
    )
}

fn run_parts(v: &mut MapView, parts: &[&[u8]], resp3: bool) -> Vec<u8> {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).unwrap();
    let mut reply = Reply::new(64);
    reply.resp3 = resp3;
    if let Err(e) = crate::keys::exec_on_view(cmd, args, v, &mut reply) {
        reply.command_error(e);
    }
    reply.out.to_vec()
}

fn run(v: &mut MapView, line: &str) -> Vec<u8> {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, false)
}

/// The RESP2 array of bulk strings (`None` for a null).
fn arr(items: &[Option<&str>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for i in items {
        match i {
            Some(s) => out.extend_from_slice(format!("${}\r\n{s}\r\n", s.len()).as_bytes()),
            None => out.extend_from_slice(b"$-1\r\n"),
        }
    }
    out
}

fn words(s: &str) -> Vec<u8> {
    let items: Vec<Option<&str>> = s.split_whitespace().map(Some).collect();
    arr(&items)
}

fn strs(l: Option<Vec<Vec<u8>>>) -> Option<Vec<String>> {
    l.map(|l| {
        l.into_iter()
            .map(|e| String::from_utf8(e).unwrap())
            .collect()
    })
}

/// sort.tcl's fixture: `tosort` holds 0..16 in a scrambled order, `weight_<i>` and
/// `wobj_<i>->weight` its weight; `result` is the elements ordered by weight.
fn fixture(v: &mut MapView) -> Vec<String> {
    let weights = [37, 5, 91, 12, 64, 3, 77, 28, 50, 19, 83, 41, 8, 70, 56, 33];
    let order = [7, 2, 13, 0, 9, 15, 4, 11, 1, 14, 6, 3, 10, 8, 12, 5];
    let elems: Vec<String> = order.iter().map(|i: &usize| i.to_string()).collect();
    set_list(v, "tosort", &elems);
    for (i, w) in weights.iter().enumerate() {
        set_string(v, &format!("weight_{i}"), &w.to_string());
        set_hash(v, &format!("wobj_{i}"), &[("weight", &w.to_string())]);
    }
    let mut result: Vec<usize> = (0..16).collect();
    result.sort_by_key(|&i| weights[i]);
    result.iter().map(usize::to_string).collect()
}

#[test]
fn by_key_by_hash_field_limit_store() {
    let mut v = view();
    let result = fixture(&mut v);
    let all = words(&result.join(" "));
    assert_eq!(run(&mut v, "SORT tosort BY weight_*"), all);
    assert_eq!(run(&mut v, "SORT tosort BY wobj_*->weight"), all);
    assert_eq!(
        run(&mut v, "SORT tosort BY weight_* LIMIT 5 5"),
        words(&result[5..10].join(" "))
    );
    assert_eq!(
        run(&mut v, "SORT tosort BY weight_* store sort-res"),
        b":16\r\n"
    );
    assert_eq!(strs(list_of(&v, "sort-res")), Some(result.clone()));
    assert_eq!(
        run(&mut v, "SORT tosort BY wobj_*->weight STORE sort-res"),
        b":16\r\n"
    );
    assert_eq!(strs(list_of(&v, "sort-res")), Some(result.clone()));
    // A pqsort'ed LIMIT with DESC.
    let mut rev = result.clone();
    rev.reverse();
    assert_eq!(
        run(&mut v, "SORT tosort BY weight_* DESC LIMIT 2 3"),
        words(&rev[2..5].join(" "))
    );
}

#[test]
fn get_patterns() {
    let mut v = view();
    fixture(&mut v);
    let numeric: Vec<String> = (0..16).map(|i: i32| i.to_string()).collect();
    assert_eq!(run(&mut v, "SORT tosort GET #"), words(&numeric.join(" ")));
    assert_eq!(run(&mut v, "SORT tosort GET foo"), arr(&[None; 16]));
    // GET # GET weight_* and GET # GET wobj_*->weight agree with the keys.
    let mut expected = Vec::new();
    for i in 0..16 {
        expected.push(i.to_string());
        let w = &v.map[format!("weight_{i}").as_bytes()].data;
        expected.push(String::from_utf8(w.to_vec()).unwrap());
    }
    let e = words(&expected.join(" "));
    assert_eq!(run(&mut v, "SORT tosort GET # GET weight_*"), e);
    assert_eq!(run(&mut v, "SORT tosort GET # GET wobj_*->weight"), e);
    // Missing keys, keys of another type and missing fields are nil; STORE stores "".
    assert_eq!(
        run(
            &mut v,
            "SORT tosort LIMIT 0 2 GET wobj_*->nope GET wobj_* GET weight_*->weight"
        ),
        arr(&[None, None, None, None, None, None])
    );
    assert_eq!(
        run(&mut v, "SORT tosort LIMIT 0 2 GET nope_* STORE d"),
        b":2\r\n"
    );
    assert_eq!(
        strs(list_of(&v, "d")),
        Some(vec![String::new(), String::new()])
    );
    // DESC reverses the tiebreak too.
    assert_eq!(
        run(&mut v, "SORT tosort DESC LIMIT 0 3 GET #"),
        words("15 14 13")
    );
}

#[test]
fn sort_tcl_cases() {
    let mut v = view();
    set_list(&mut v, "mylist", &["10", "3", "1", "2"]);
    assert_eq!(run(&mut v, "SORT mylist alpha"), words("1 10 2 3"));
    assert_eq!(run(&mut v, "SORT mylist"), words("1 2 3 10"));
    assert_eq!(run(&mut v, "SORT mylist DESC"), words("10 3 2 1"));

    let z = [(1.0, "a"), (5.0, "b"), (2.0, "c"), (10.0, "d"), (3.0, "e")];
    set_zset(&mut v, "zset", &z);
    assert_eq!(run(&mut v, "sort zset alpha desc"), words("e d c b a"));
    assert_eq!(run(&mut v, "sort zset by nosort asc"), words("a c e b d"));
    assert_eq!(run(&mut v, "sort zset by nosort desc"), words("d b e c a"));
    assert_eq!(run(&mut v, "sort zset by nosort asc limit 0 1"), words("a"));
    assert_eq!(
        run(&mut v, "sort zset by nosort desc limit 0 1"),
        words("d")
    );
    assert_eq!(
        run(&mut v, "sort zset by nosort asc limit 0 2"),
        words("a c")
    );
    assert_eq!(
        run(&mut v, "sort zset by nosort desc limit 0 2"),
        words("d b")
    );
    assert_eq!(
        run(&mut v, "sort zset by nosort desc limit 1 2"),
        words("b e")
    );
    assert_eq!(run(&mut v, "sort zset by nosort limit 5 10"), words(""));
    assert_eq!(
        run(&mut v, "sort zset by nosort limit -10 100"),
        words("a c e b d")
    );

    // Issue #19: floats.
    let floats = [
        "1.1", "5.10", "3.10", "7.44", "2.1", "5.75", "6.12", "0.25", "1.15",
    ];
    set_list(&mut v, "floats", &floats);
    assert_eq!(
        run(&mut v, "SORT floats"),
        words("0.25 1.1 1.15 2.1 3.10 5.10 5.75 6.12 7.44")
    );

    // Issues 224 and 227: STORE of an empty result.
    assert_eq!(run(&mut v, "sort foo store bar"), b":0\r\n");
    assert!(!v.map.contains_key(&b"bar"[..]));
    set_list(&mut v, "foo", &["bar"]);
    assert_eq!(
        run(&mut v, "sort foo alpha limit 10 10 store zap"),
        b":0\r\n"
    );
    assert!(!v.map.contains_key(&b"zap"[..]));
    assert_eq!(run(&mut v, "sort emptylist store foo"), b":0\r\n");
    assert!(!v.map.contains_key(&b"foo"[..]));

    // BY <constant> and STORE of a set still orders the output (ALPHA), DESC included.
    let members = "a b c d e f g h i l m n o p q r s t u v z aa aaa azz";
    let m: Vec<&str> = members.split(' ').collect();
    set_set(&mut v, "myset", &m);
    let sorted = "a aa aaa azz b c d e f g h i l m n o p q r s t u v z";
    assert_eq!(
        run(&mut v, "sort myset alpha by _ store mylist"),
        b":24\r\n"
    );
    assert_eq!(
        strs(list_of(&v, "mylist")).unwrap().join(" "),
        sorted.to_string()
    );
    run(&mut v, "sort myset by _ desc store mylist");
    let mut rev: Vec<&str> = sorted.split(' ').collect();
    rev.reverse();
    assert_eq!(strs(list_of(&v, "mylist")).unwrap(), rev);
    // Without STORE a set is answered unsorted (its own order), DESC ignored.
    assert_eq!(run(&mut v, "sort myset by _ desc limit 0 2"), words("a aa"));

    // Sub-sorts by the element when the scores are equal.
    for e in &m {
        set_string(&mut v, &format!("score:{e}"), "100");
    }
    assert_eq!(run(&mut v, "sort myset by score:*"), words(sorted));

    // `x:*->` with nothing after the arrow is a plain key.
    set_list(&mut v, "one", &["a"]);
    set_string(&mut v, "x:a->", "100");
    assert_eq!(run(&mut v, "sort one by num get x:*->"), words("100"));
    assert_eq!(run(&mut v, "sort_ro one by nosort get x:*->"), words("100"));

    // BY nosort keeps a list's order, with STORE and LIMIT too.
    set_list(&mut v, "testa", &["5", "3", "4", "1", "2"]);
    assert_eq!(run(&mut v, "sort testa by nosort"), words("5 3 4 1 2"));
    assert_eq!(run(&mut v, "sort testa by nosort desc"), words("2 1 4 3 5"));
    assert_eq!(run(&mut v, "sort testa by nosort store testb"), b":5\r\n");
    assert_eq!(
        strs(list_of(&v, "testb")).unwrap().join(" "),
        "5 3 4 1 2".to_string()
    );
    assert_eq!(
        run(&mut v, "sort testa by nosort limit 0 3 store testb"),
        b":3\r\n"
    );
    assert_eq!(
        strs(list_of(&v, "testb")).unwrap().join(" "),
        "5 3 4".to_string()
    );
    assert_eq!(
        run(&mut v, "sort testa by nosort desc limit 1 2 store testb"),
        b":2\r\n"
    );
    assert_eq!(
        strs(list_of(&v, "testb")).unwrap().join(" "),
        "1 4".to_string()
    );
}

#[test]
fn errors() {
    let mut v = view();
    set_set(&mut v, "myset", &["1", "2", "3", "4", "not-a-double"]);
    assert_eq!(
        run(&mut v, "sort myset"),
        b"-ERR One or more scores can't be converted into double\r\n"
    );
    // ...and nothing is stored.
    assert_eq!(
        run(&mut v, "sort myset store d"),
        b"-ERR One or more scores can't be converted into double\r\n"
    );
    assert!(!v.map.contains_key(&b"d"[..]));
    set_set(&mut v, "nums", &["1", "2", "3", "4"]);
    for (i, s) in ["10", "20", "30", "not-a-double"].iter().enumerate() {
        set_string(&mut v, &format!("score:{}", i + 1), s);
    }
    assert_eq!(
        run(&mut v, "sort nums by score:*"),
        b"-ERR One or more scores can't be converted into double\r\n"
    );
    assert_eq!(run(&mut v, "sort nums by score:* alpha"), words("1 2 3 4"));

    assert_eq!(
        run(&mut v, "sort_ro foolist STORE bar"),
        b"-ERR syntax error\r\n"
    );
    for bad in [
        "sort l LIMIT 1",
        "sort l BY",
        "sort l GET",
        "sort l STORE",
        "sort l sideways",
        "sort l ALPHA DESC foo",
    ] {
        assert_eq!(run(&mut v, bad), b"-ERR syntax error\r\n", "{bad}");
    }
    for bad in [
        "sort l LIMIT x 1",
        "sort l LIMIT 0 1.5",
        "sort l LIMIT 9223372036854775808 1",
    ] {
        assert_eq!(
            run(&mut v, bad),
            b"-ERR value is not an integer or out of range\r\n",
            "{bad}"
        );
    }
    assert_eq!(
        run(&mut v, "sort"),
        b"-ERR wrong number of arguments for 'sort' command\r\n"
    );
    // Options before the key's type; the key's type before the scores.
    set_string(&mut v, "s", "x");
    assert_eq!(run(&mut v, "sort s LIMIT"), b"-ERR syntax error\r\n");
    assert_eq!(
        run(&mut v, "sort s"),
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
    set_hash(&mut v, "h", &[("a", "b")]);
    assert_eq!(
        run(&mut v, "sort_ro h alpha"),
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
}

#[test]
fn limits_clamp_and_never_overflow() {
    let mut v = view();
    set_list(&mut v, "L", &["0", "1", "2"]);
    assert_eq!(
        run(&mut v, "sort_ro L by a limit 2 9223372036854775807"),
        words("2")
    );
    assert_eq!(run(&mut v, "sort_ro L by a limit 2 2147483647"), words("2"));
    assert_eq!(
        run(
            &mut v,
            "sort L limit 9223372036854775807 9223372036854775807"
        ),
        words("")
    );
    assert_eq!(
        run(
            &mut v,
            "sort L limit -9223372036854775808 -9223372036854775808"
        ),
        words("0 1 2")
    );
    assert_eq!(
        run(
            &mut v,
            "sort L limit -9223372036854775808 9223372036854775807 desc"
        ),
        words("2 1 0")
    );
    assert_eq!(run(&mut v, "sort L limit 1 0"), words(""));
    assert_eq!(run(&mut v, "sort L limit 1 -1"), words("1 2"));
    assert_eq!(run(&mut v, "sort L limit 3 -1"), words(""));
    assert_eq!(run(&mut v, "sort L by nosort limit 2 -5"), words("2"));
    assert_eq!(
        run(&mut v, "sort nothing limit -1 -1 get # get #"),
        words("")
    );

    for (offset, count, n) in [
        (0, -1, 0usize),
        (5, 5, 3),
        (-3, 2, 3),
        (i64::MIN, i64::MAX, 4),
        (i64::MAX, i64::MIN, 4),
        (2, i64::MAX, 4),
    ] {
        let (s, l) = limit_range(offset, count, n);
        assert!(s.saturating_add(l) <= n, "{offset} {count} {n}");
    }
}

#[test]
fn ties_missing_keys_and_options_order() {
    let mut v = view();
    // -0 and 0 tie numerically: the elements' bytes decide.
    set_list(&mut v, "z", &["0", "-0", "0.0", "-1"]);
    assert_eq!(run(&mut v, "sort z"), words("-1 -0 0 0.0"));
    assert_eq!(run(&mut v, "sort z desc"), words("0.0 0 -0 -1"));
    // A missing BY key sorts as 0 (numeric) and first (ALPHA).
    set_list(&mut v, "l", &["a", "b", "c"]);
    set_string(&mut v, "w_a", "5");
    set_string(&mut v, "w_c", "-5");
    assert_eq!(run(&mut v, "sort l by w_*"), words("c b a"));
    set_string(&mut v, "w_a", "x");
    set_string(&mut v, "w_c", "y");
    assert_eq!(run(&mut v, "sort l by w_* alpha"), words("b a c"));
    assert_eq!(run(&mut v, "sort l by w_* alpha desc"), words("c a b"));
    // A BY key of another type is missing.
    set_list(&mut v, "w_b", &["zzz"]);
    assert_eq!(run(&mut v, "sort l by w_* alpha"), words("b a c"));
    // Options are case-insensitive, the last ASC/DESC wins, a later BY with `*` does not
    // undo a BY without one (sort.c keeps `dontsort`).
    assert_eq!(run(&mut v, "SoRt l aLpHa DeSc AsC"), words("a b c"));
    assert_eq!(run(&mut v, "sort l by nosort by w_* alpha"), words("a b c"));
    // The last STORE wins.
    assert_eq!(run(&mut v, "sort l alpha store d1 store d2"), b":3\r\n");
    assert!(!v.map.contains_key(&b"d1"[..]));
    assert!(v.map.contains_key(&b"d2"[..]));
    // `#` only as the whole pattern; a pattern with `*` in a field.
    set_hash(&mut v, "h_a", &[("f*", "1"), ("#", "2")]);
    assert_eq!(
        run(
            &mut v,
            "sort l alpha limit 0 1 get # get h_*->f* get h_*-># get #*"
        ),
        arr(&[Some("a"), Some("1"), Some("2"), None])
    );
}

#[test]
fn store_replaces_and_is_bounded() {
    let mut v = view();
    set_list(&mut v, "l", &["3", "1", "2"]);
    v.map.insert(
        b"dst".to_vec(),
        Entry {
            data: Bytes::from_static(b"old"),
            expiry: Some(99_000_000),
            kind: Kind::String,
        },
    );
    assert_eq!(run(&mut v, "sort l store dst"), b":3\r\n");
    let e = &v.map[&b"dst"[..]];
    assert_eq!((e.kind, e.expiry), (Kind::List, None));
    assert_eq!(strs(list_of(&v, "dst")).unwrap(), ["1", "2", "3"]);
    // Sorting a key into itself.
    assert_eq!(run(&mut v, "sort l desc store l"), b":3\r\n");
    assert_eq!(strs(list_of(&v, "l")).unwrap(), ["3", "2", "1"]);
    // GET multiplies the count.
    assert_eq!(run(&mut v, "sort l get # get # get x_*"), {
        let mut o = Vec::new();
        for e in ["1", "2", "3"] {
            o.extend([Some(e), Some(e), None]);
        }
        arr(&o)
    });
    assert_eq!(run(&mut v, "sort l get # get # store dst"), b":6\r\n");
    assert_eq!(list_of(&v, "dst").unwrap().len(), 6);
    // The view's limit: nothing is written.
    v.max = HEADER + 3 * elem_len(1);
    assert_eq!(run(&mut v, "sort l store dst2"), b":3\r\n");
    assert_eq!(
        run(&mut v, "sort l get # get # store dst3"),
        b"-ERR list exceeds maximum allowed size (proto-max-bulk-len)\r\n"
    );
    assert!(!v.map.contains_key(&b"dst3"[..]));
}

#[test]
fn replies_a_plain_array_in_resp3() {
    let mut v = view();
    set_list(&mut v, "l", &["b", "a"]);
    let parts: [&[u8]; 6] = [b"SORT", b"l", b"ALPHA", b"GET", b"#", b"GET"];
    let mut p = parts.to_vec();
    p.push(b"nope_*");
    assert_eq!(
        run_parts(&mut v, &p, true),
        b"*4\r\n$1\r\na\r\n_\r\n$1\r\nb\r\n_\r\n"
    );
}

#[test]
fn patterns_with_nul_bytes_read_as_c_strings() {
    let mut v = view();
    set_list(&mut v, "l", &["a"]);
    set_string(&mut v, "k_a", "v");
    // "#\0x" is "#" to C.
    let r = run_parts(&mut v, &[b"SORT", b"l", b"ALPHA", b"GET", b"#\0x"], false);
    assert_eq!(r, words("a"));
    // A `*` after a NUL is not seen: no `*`, so nil (and BY is a constant).
    let r = run_parts(
        &mut v,
        &[b"SORT", b"l", b"BY", b"k\0*", b"GET", b"k\0*"],
        false,
    );
    assert_eq!(r, arr(&[None]));
    // An element with a NUL is substituted whole.
    set_list(&mut v, "n", &[&b"a\0b"[..]]);
    put(&mut v, "k_a\0b", Kind::String, b"w".to_vec());
    let r = run_parts(&mut v, &[b"SORT", b"n", b"ALPHA", b"GET", b"k_*"], false);
    assert_eq!(r, words("w"));
}

#[test]
fn reads_are_counted() {
    let mut v = view();
    set_list(&mut v, "l", &["a", "b"]);
    run(&mut v, "sort l alpha by w_* get # get x_*");
    // The key, two BY lookups, two GET x_* lookups (`#` reads nothing).
    assert_eq!(v.reads(), 5);
}

#[test]
fn scores_read_as_strtod() {
    let ok: &[(&[u8], f64)] = &[
        (b"", 0.0),
        (b"1", 1.0),
        (b"  \t1.5", 1.5),
        (b"-2", -2.0),
        (b"+2e3", 2000.0),
        (b".5", 0.5),
        (b"5.", 5.0),
        (b"1E-2", 0.01),
        (b"inf", f64::INFINITY),
        (b"-Infinity", f64::NEG_INFINITY),
        (b"0x10", 16.0),
        (b"0X1p-2", 0.25),
        (b"-0x.8", -0.5),
        (b"0x1.8P1", 3.0),
        (b"1\0junk", 1.0),
        (b"\0", 0.0),
        (b"0e999", 0.0),
        (b"1e308", 1e308),
    ];
    for (s, want) in ok {
        assert_eq!(
            parse_score(s),
            Some(*want),
            "{:?}",
            String::from_utf8_lossy(s)
        );
    }
    let bad: &[&[u8]] = &[
        b" ",
        b"1 ",
        b"x",
        b"-",
        b"+-1",
        b"--1",
        b"nan",
        b"-NaN",
        b"1e",
        b"1e400",
        b"-1e400",
        b"1e-400",
        b"4e-320",
        b"0x",
        b"0x1p",
        b"0xg",
        b"0x1p99999",
        b"1_0",
        b"\xff",
        b"infx",
    ];
    for s in bad {
        assert_eq!(parse_score(s), None, "{:?}", String::from_utf8_lossy(s));
    }
    // A hexadecimal float with more digits than an f64 holds rounds like a decimal one.
    assert_eq!(
        parse_score(b"0x1234567890abcdef1234567890abcdef"),
        Some(0x1234_5678_90ab_cdef_1234_5678_90ab_cdef_u128 as f64)
    );
}

// ----- a model ---------------------------------------------------------------------------

/// The model: what SORT answers, computed from a plain Vec.
fn model(
    elems: &[Vec<u8>],
    alpha: bool,
    desc: bool,
    limit: Option<(i64, i64)>,
) -> Option<Vec<Vec<u8>>> {
    let mut keyed: Vec<(f64, Vec<u8>)> = Vec::new();
    for e in elems {
        let score = if alpha {
            0.0
        } else {
            std::str::from_utf8(e).ok()?.parse::<f64>().ok()?
        };
        keyed.push((score, e.clone()));
    }
    keyed.sort_by(|a, b| {
        if alpha {
            a.1.cmp(&b.1)
        } else {
            a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1))
        }
    });
    if desc {
        keyed.reverse();
    }
    let (offset, count) = limit.unwrap_or((0, -1));
    let skip = usize::try_from(offset.max(0)).unwrap_or(usize::MAX);
    let take = usize::try_from(count).unwrap_or(usize::MAX);
    Some(
        keyed
            .into_iter()
            .skip(skip)
            .take(take)
            .map(|(_, e)| e)
            .collect(),
    )
}

fn element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (-1000i64..1000).prop_map(|i| i.to_string().into_bytes()),
        (-100.0f64..100.0).prop_map(|f| format!("{f}").into_bytes()),
        prop::sample::select(vec!["0", "-0", "1e3", "inf", "-inf", "2.50", "02"])
            .prop_map(|s| s.as_bytes().to_vec()),
        // Never a number to `strtod` or to Rust: letters without e, i, n, x; high bytes.
        "[g-hj-mo-wyz]{1,3}".prop_map(String::into_bytes),
        prop::collection::vec(0x80u8.., 1..4),
    ]
}

proptest! {
    #[test]
    fn matches_the_model(
        elems in prop::collection::vec(element(), 0..24),
        kind in 0u8..3,
        alpha in any::<bool>(),
        desc in any::<bool>(),
        limit in prop::option::of((-5i64..30, -3i64..30)),
        store in any::<bool>(),
    ) {
        let mut v = view();
        // The source: a list, a set (distinct members), a sorted set (arbitrary scores).
        let elems: Vec<Vec<u8>> = match kind {
            0 => { set_list(&mut v, "src", &elems); elems }
            1 => {
                let mut m = elems.clone();
                m.sort();
                m.dedup();
                set_set(&mut v, "src", &m);
                m
            }
            _ => {
                let mut z = ZSet::default();
                for (i, e) in elems.iter().enumerate() {
                    z.insert(e, Score::new((i % 5) as f64).unwrap());
                }
                if !z.is_empty() {
                    put(&mut v, "src", Kind::ZSet, z.encode());
                }
                z.members().map(|(m, _)| m.to_vec()).collect()
            }
        };
        let mut parts: Vec<Vec<u8>> = vec![b"SORT".to_vec(), b"src".to_vec()];
        if let Some((o, c)) = limit {
            parts.extend([b"LIMIT".to_vec(), o.to_string().into_bytes(), c.to_string().into_bytes()]);
        }
        if alpha { parts.push(b"ALPHA".to_vec()); }
        if desc { parts.push(b"DESC".to_vec()); }
        if store { parts.extend([b"STORE".to_vec(), b"dst".to_vec()]); }
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let got = run_parts(&mut v, &refs, false);
        // The model's numbers are Rust's; `element()` yields only strings both read alike,
        // or bytes neither reads as a number (refused by both).
        match model(&elems, alpha, desc, limit) {
            None => prop_assert_eq!(got, b"-ERR One or more scores can't be converted into double\r\n".to_vec()),
            Some(want) => {
                if store {
                    prop_assert_eq!(got, format!(":{}\r\n", want.len()).into_bytes());
                    let stored = v.map.get(&b"dst"[..]).map(|e| crate::lists::encoding::decode(&e.data).unwrap().into_iter().map(<[u8]>::to_vec).collect::<Vec<_>>());
                    prop_assert_eq!(stored.unwrap_or_default(), want);
                } else {
                    let mut reply = Reply::new(64);
                    reply.array(want.len());
                    for w in &want { reply.bulk(w); }
                    prop_assert_eq!(got, reply.out.to_vec());
                }
            }
        }
    }

    #[test]
    fn hostile_arguments_never_panic(
        words in prop::collection::vec(prop::sample::select(vec![
            "LIMIT", "BY", "GET", "STORE", "ASC", "DESC", "ALPHA", "#", "*", "w_*", "w_*->f",
            "*->", "->", "-1", "0", "3", "9223372036854775807", "-9223372036854775808", "nosort",
        ]), 0..12),
        ro in any::<bool>(),
    ) {
        let mut v = view();
        set_list(&mut v, "l", &["1", "b", "3"]);
        set_string(&mut v, "w_1", "2");
        set_hash(&mut v, "w_b", &[("f", "x")]);
        let mut parts: Vec<&[u8]> = vec![if ro { b"SORT_RO" } else { b"SORT" }, b"l"];
        parts.extend(words.iter().map(|w| w.as_bytes()));
        let r = run_parts(&mut v, &parts, false);
        prop_assert!(r.starts_with(b"*") || r.starts_with(b":") || r.starts_with(b"-"));
    }
}
