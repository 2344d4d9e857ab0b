//! The set commands over an in-memory view: replies and errors as `t_set.c` and
//! `tests/unit/type/set.tcl` say, a model test against a `BTreeSet`, and damaged data.

use super::*;
use crate::OwnedArgs;
use crate::scan::MAX_SCAN_COUNT;
use crate::view::Entry;
use meridian_core::Timestamp;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

use crate::test_view::TestView as SetView;

thread_local! {
    /// Whether [`view`] gives a view that keeps sets as objects (the keyspace's path).
    static HOLDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The view a test runs over: bytes, or held objects inside [`on_both_views`]'s second run.
fn view() -> SetView {
    if HOLDING.with(|h| h.get()) {
        SetView::holding()
    } else {
        SetView::new()
    }
}

/// Runs `body` over a view of bytes, then over one that keeps objects: the same assertions,
/// so the same replies, on both paths of `crate::collection`.
fn on_both_views(body: fn()) {
    for held in [false, true] {
        HOLDING.with(|h| h.set(held));
        let reset = Reset;
        body();
        drop(reset);
    }
}

/// Puts [`HOLDING`] back even when a body panics.
struct Reset;

impl Drop for Reset {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(false));
    }
}

/// Runs one command (any data command) over `v`, as EXEC would; the reply's bytes.
fn run_parts(v: &mut SetView, parts: &[&[u8]], resp3: bool) -> Vec<u8> {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    reply.resp3 = resp3;
    let r = if handles(cmd) {
        // No arity check first: the module must check it itself.
        exec_on_view(cmd, args, v, &mut reply)
    } else if cmd.spec().arity_ok(args.len()) {
        crate::types::exec_on_view(cmd, args, v, &mut reply)
    } else {
        Err(arity_error(cmd.spec().name))
    };
    if let Err(e) = r {
        reply.command_error(e);
    }
    reply.out.to_vec()
}

fn line(v: &mut SetView, l: &str) -> String {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    String::from_utf8(run_parts(v, &parts, false)).unwrap()
}

fn line3(v: &mut SetView, l: &str) -> String {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    String::from_utf8(run_parts(v, &parts, true)).unwrap()
}

/// A parsed reply, enough for these tests.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Resp {
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Resp>),
    Set(Vec<Resp>),
    Error(String),
    Simple(String),
}

fn parse(b: &[u8]) -> (Resp, &[u8]) {
    let end = b.windows(2).position(|w| w == b"\r\n").expect("a line");
    let head = std::str::from_utf8(&b[1..end]).unwrap();
    let rest = &b[end + 2..];
    match b[0] {
        b':' => (Resp::Int(head.parse().unwrap()), rest),
        b'-' => (Resp::Error(head.to_string()), rest),
        b'+' => (Resp::Simple(head.to_string()), rest),
        b'_' => (Resp::Null, rest),
        b'$' => {
            let n: i64 = head.parse().unwrap();
            if n < 0 {
                return (Resp::Null, rest);
            }
            let n = n as usize;
            (Resp::Bulk(rest[..n].to_vec()), &rest[n + 2..])
        }
        b'*' | b'~' => {
            let n: i64 = head.parse().unwrap();
            if n < 0 {
                return (Resp::Null, rest);
            }
            let mut items = Vec::new();
            let mut rest = rest;
            for _ in 0..n {
                let (item, r) = parse(rest);
                items.push(item);
                rest = r;
            }
            if b[0] == b'~' {
                (Resp::Set(items), rest)
            } else {
                (Resp::Array(items), rest)
            }
        }
        other => panic!("unexpected reply type {}", other as char),
    }
}

fn reply_of(bytes: &[u8]) -> Resp {
    let (r, rest) = parse(bytes);
    assert!(rest.is_empty(), "one reply");
    r
}

fn run(v: &mut SetView, l: &str) -> Resp {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    reply_of(&run_parts(v, &parts, false))
}

/// The members of an array/set reply, as strings (in reply order).
fn strs(r: &Resp) -> Vec<String> {
    match r {
        Resp::Array(items) | Resp::Set(items) => items
            .iter()
            .map(|i| match i {
                Resp::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
                other => panic!("not a bulk: {other:?}"),
            })
            .collect(),
        other => panic!("not a list: {other:?}"),
    }
}

fn sorted(v: &mut SetView, l: &str) -> Vec<String> {
    let mut s = strs(&run(v, l));
    s.sort();
    s
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[test]
fn basics_regular_set_and_intset() {
    on_both_views(basics_regular_set_and_intset_on_a_view);
}

fn basics_regular_set_and_intset_on_a_view() {
    let mut v = view();
    assert_eq!(line(&mut v, "SADD myset foo"), ":1\r\n");
    assert_eq!(line(&mut v, "SADD myset bar"), ":1\r\n");
    assert_eq!(line(&mut v, "SADD myset bar"), ":0\r\n");
    assert_eq!(line(&mut v, "SCARD myset"), ":2\r\n");
    assert_eq!(line(&mut v, "SISMEMBER myset foo"), ":1\r\n");
    assert_eq!(line(&mut v, "SISMEMBER myset bla"), ":0\r\n");
    assert_eq!(line(&mut v, "SMISMEMBER myset foo"), "*1\r\n:1\r\n");
    assert_eq!(
        line(&mut v, "SMISMEMBER myset bla foo"),
        "*2\r\n:0\r\n:1\r\n"
    );
    assert_eq!(
        line(&mut v, "SMISMEMBER nokey foo bar"),
        "*2\r\n:0\r\n:0\r\n"
    );
    assert_eq!(
        line(&mut v, "SMISMEMBER myset"),
        "-ERR wrong number of arguments for 'smismember' command\r\n"
    );
    assert_eq!(
        line(&mut v, "SMEMBERS myset"),
        "*2\r\n$3\r\nbar\r\n$3\r\nfoo\r\n"
    );
    assert_eq!(line(&mut v, "SMEMBERS nokey"), "*0\r\n");
    assert_eq!(line3(&mut v, "SMEMBERS nokey"), "~0\r\n");
    assert_eq!(
        line3(&mut v, "SMEMBERS myset"),
        "~2\r\n$3\r\nbar\r\n$3\r\nfoo\r\n",
        "a RESP3 set"
    );
    assert_eq!(line(&mut v, "SCARD nokey"), ":0\r\n");
    assert_eq!(line(&mut v, "SISMEMBER nokey a"), ":0\r\n");
    // Variadic SADD.
    assert_eq!(line(&mut v, "SADD v a b c"), ":3\r\n");
    assert_eq!(line(&mut v, "SADD v A a b c B"), ":2\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS v"), words("A B a b c"));
    assert_eq!(
        line(&mut v, "SADD v x x x"),
        ":1\r\n",
        "a member twice once"
    );
    // A huge integer is just a member.
    assert_eq!(
        line(&mut v, "SADD big 213244124402402314402033402"),
        ":1\r\n"
    );
    assert_eq!(
        line(&mut v, "SISMEMBER big 213244124402402314402033402"),
        ":1\r\n"
    );
    // SREM.
    assert_eq!(line(&mut v, "SADD r foo bar ciao"), ":3\r\n");
    assert_eq!(line(&mut v, "SREM r qux"), ":0\r\n");
    assert_eq!(line(&mut v, "SREM r foo"), ":1\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS r"), words("bar ciao"));
    assert_eq!(line(&mut v, "SREM r k k k"), ":0\r\n");
    assert_eq!(line(&mut v, "SREM nokey a"), ":0\r\n");
    assert_eq!(line(&mut v, "SADD three 1 2 3"), ":3\r\n");
    assert_eq!(line(&mut v, "SREM three 1 2 3 4 5 6 7 8"), ":3\r\n");
    assert_eq!(
        line(&mut v, "EXISTS three"),
        ":0\r\n",
        "an empty set is gone"
    );
    assert_eq!(line(&mut v, "TYPE r"), "+set\r\n");
    assert_eq!(
        line(&mut v, "SADD x"),
        "-ERR wrong number of arguments for 'sadd' command\r\n"
    );
    assert_eq!(
        line(&mut v, "SCARD"),
        "-ERR wrong number of arguments for 'scard' command\r\n",
        "no panic without a key"
    );
    assert_eq!(
        line(&mut v, "SISMEMBER a b c"),
        "-ERR wrong number of arguments for 'sismember' command\r\n"
    );
}

#[test]
fn integer_sets_answer_in_numeric_order_others_in_byte_order() {
    on_both_views(integer_sets_answer_in_numeric_order_others_in_byte_order_on_a_view);
}

fn integer_sets_answer_in_numeric_order_others_in_byte_order_on_a_view() {
    let mut v = view();
    line(&mut v, "SADD i 10 9 -1 2 100");
    assert_eq!(strs(&run(&mut v, "SMEMBERS i")), words("-1 2 9 10 100"));
    assert_eq!(
        strs(&run(&mut v, "SRANDMEMBER i 100")),
        words("-1 2 9 10 100")
    );
    assert_eq!(
        strs_of_scan(&run(&mut v, "SSCAN i 0")).1,
        words("-1 2 9 10 100")
    );
    assert_eq!(strs(&run(&mut v, "SINTER i i")), words("-1 2 9 10 100"));
    // "01" is not an integer in Redis's sense: the set is not an intset.
    line(&mut v, "SADD j 10 9 01");
    assert_eq!(strs(&run(&mut v, "SMEMBERS j")), words("01 10 9"));
    // Beyond set-max-intset-entries: byte order.
    let many: Vec<String> = (0..=INTSET_MAX_ENTRIES).map(|i| i.to_string()).collect();
    line(&mut v, &format!("SADD k {}", many.join(" ")));
    let got = strs(&run(&mut v, "SMEMBERS k"));
    let mut bytewise = many.clone();
    bytewise.sort();
    assert_eq!(got, bytewise);
}

/// Lets a test index an SSCAN reply's two parts.
impl std::ops::Index<std::ops::RangeFull> for Resp {
    type Output = [Resp];
    fn index(&self, _: std::ops::RangeFull) -> &[Resp] {
        match self {
            Resp::Array(items) | Resp::Set(items) => items,
            _ => &[],
        }
    }
}

fn strs_of_scan(r: &Resp) -> (u64, Vec<String>) {
    let parts = &r[..];
    let Resp::Bulk(c) = &parts[0] else {
        panic!("cursor {r:?}")
    };
    (
        std::str::from_utf8(c).unwrap().parse().unwrap(),
        strs(&parts[1]),
    )
}

#[test]
fn wrong_type_for_every_command() {
    on_both_views(wrong_type_for_every_command_on_a_view);
}

fn wrong_type_for_every_command_on_a_view() {
    let mut v = view();
    line(&mut v, "SET s v");
    line(&mut v, "SADD set a b c");
    for cmd in [
        "SADD s a",
        "SREM s a",
        "SMOVE s set a",
        "SMOVE set s a",
        "SISMEMBER s a",
        "SMISMEMBER s a",
        "SCARD s",
        "SPOP s",
        "SPOP s 2",
        "SRANDMEMBER s",
        "SRANDMEMBER s 2",
        "SRANDMEMBER s -2",
        "SINTER s",
        "SINTER s noset",
        "SINTER noset s",
        "SINTER set s",
        "SINTERCARD 1 s",
        "SINTERCARD 2 set s",
        "SINTERCARD 2 s noset",
        "SINTERSTORE d s",
        "SUNION s noset",
        "SUNION noset s",
        "SUNIONSTORE d set s",
        "SDIFF s noset",
        "SDIFF noset s",
        "SDIFF set s",
        "SDIFFSTORE d noset s",
        "SMEMBERS s",
        "SSCAN s 0",
        "SSCAN s 0 BADOPT",
    ] {
        assert_eq!(line(&mut v, cmd), WRONGTYPE, "{cmd}");
    }
    assert_eq!(line(&mut v, "EXISTS d"), ":0\r\n", "nothing stored");
    assert_eq!(line(&mut v, "GET set"), WRONGTYPE, "and strings see a set");
    // The argument errors Redis checks before the key's type.
    assert_eq!(
        line(&mut v, "SPOP s x"),
        "-ERR value is out of range, must be positive\r\n"
    );
    assert_eq!(
        line(&mut v, "SRANDMEMBER s x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(line(&mut v, "SSCAN s x"), "-ERR invalid cursor\r\n");
    assert_eq!(
        line(&mut v, "SINTERCARD 1 s LIMIT -1"),
        "-ERR LIMIT can't be negative\r\n"
    );
    // A missing SMOVE source answers 0 before the destination's type is looked at.
    assert_eq!(line(&mut v, "SMOVE nosrc s a"), ":0\r\n");
}

#[test]
fn sintercard_arguments_as_t_set_c() {
    on_both_views(sintercard_arguments_as_t_set_c_on_a_view);
}

fn sintercard_arguments_as_t_set_c_on_a_view() {
    let mut v = view();
    line(&mut v, "SADD set1 0 1 2 3 4 5 195 196 197 198 199 foo");
    line(&mut v, "SADD set2 195 196 197 198 199 200 foo");
    line(&mut v, "SADD set3 199 195 1000 2000 foo");
    for (cmd, err) in [
        (
            "SINTERCARD",
            "-ERR wrong number of arguments for 'sintercard' command\r\n",
        ),
        (
            "SINTERCARD 1",
            "-ERR wrong number of arguments for 'sintercard' command\r\n",
        ),
        (
            "SINTERCARD 0 myset",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "SINTERCARD a myset",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "SINTERCARD -1 myset",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "SINTERCARD 99999999999999999999 myset",
            "-ERR numkeys should be greater than 0\r\n",
        ),
        (
            "SINTERCARD 2 myset",
            "-ERR Number of keys can't be greater than number of args\r\n",
        ),
        (
            "SINTERCARD 9223372036854775807 myset",
            "-ERR Number of keys can't be greater than number of args\r\n",
        ),
        ("SINTERCARD 1 myset myset2", "-ERR syntax error\r\n"),
        ("SINTERCARD 1 myset bar_arg", "-ERR syntax error\r\n"),
        ("SINTERCARD 1 myset LIMIT", "-ERR syntax error\r\n"),
        (
            "SINTERCARD 1 myset LIMIT -1",
            "-ERR LIMIT can't be negative\r\n",
        ),
        (
            "SINTERCARD 1 myset LIMIT a",
            "-ERR LIMIT can't be negative\r\n",
        ),
    ] {
        assert_eq!(line(&mut v, cmd), err, "{cmd}");
    }
    assert_eq!(line(&mut v, "SINTERCARD 1 nokey"), ":0\r\n");
    assert_eq!(line(&mut v, "SINTERCARD 1 nokey limit 0"), ":0\r\n");
    assert_eq!(line(&mut v, "SINTERCARD 2 set1 set2"), ":6\r\n");
    assert_eq!(line(&mut v, "SINTERCARD 2 set1 set2 limit 0"), ":6\r\n");
    assert_eq!(line(&mut v, "SINTERCARD 2 set1 set2 limit 3"), ":3\r\n");
    assert_eq!(line(&mut v, "SINTERCARD 2 set1 set2 LIMIT 10"), ":6\r\n");
    assert_eq!(
        line(&mut v, "SINTERCARD 2 set1 set2 LIMIT 1 LIMIT 2"),
        ":2\r\n",
        "the last LIMIT wins"
    );
    assert_eq!(line(&mut v, "SINTERCARD 3 set1 set2 set3"), ":3\r\n");
    assert_eq!(
        line(&mut v, "SINTERCARD 3 set1 set2 set3 limit 2"),
        ":2\r\n"
    );
    assert_eq!(line(&mut v, "SINTERCARD 2 set1 nokey"), ":0\r\n");
}

#[test]
fn sinter_sunion_sdiff_and_their_store_variants() {
    on_both_views(sinter_sunion_sdiff_and_their_store_variants_on_a_view);
}

fn sinter_sunion_sdiff_and_their_store_variants_on_a_view() {
    let mut v = view();
    line(&mut v, "SADD set1 a b c 1 2 3");
    line(&mut v, "SADD set2 b c d 3");
    line(&mut v, "SADD set3 c 3 zz");
    assert_eq!(sorted(&mut v, "SINTER set1 set2"), words("3 b c"));
    assert_eq!(sorted(&mut v, "SINTER set1 set2 set3"), words("3 c"));
    assert_eq!(
        sorted(&mut v, "SINTER set1 set2 nokey"),
        Vec::<String>::new()
    );
    assert_eq!(
        sorted(&mut v, "SINTER set1 set1 set1"),
        words("1 2 3 a b c")
    );
    assert_eq!(sorted(&mut v, "SUNION set1 set2"), words("1 2 3 a b c d"));
    assert_eq!(
        sorted(&mut v, "SUNION nokey1 set1 set2 nokey2"),
        words("1 2 3 a b c d")
    );
    assert_eq!(sorted(&mut v, "SDIFF set1 set2"), words("1 2 a"));
    assert_eq!(sorted(&mut v, "SDIFF set1 set2 set3"), words("1 2 a"));
    assert_eq!(sorted(&mut v, "SDIFF set1 set1"), Vec::<String>::new());
    assert_eq!(sorted(&mut v, "SDIFF nokey set1"), Vec::<String>::new());
    assert_eq!(sorted(&mut v, "SDIFF set1 nokey"), words("1 2 3 a b c"));
    // RESP3: sets, empty ones too.
    assert!(line3(&mut v, "SINTER set1 set2").starts_with("~3\r\n"));
    assert_eq!(line3(&mut v, "SINTER set1 nokey"), "~0\r\n");
    assert!(line3(&mut v, "SUNION set1").starts_with("~6\r\n"));
    assert_eq!(line3(&mut v, "SDIFF set1 set1"), "~0\r\n");
    assert_eq!(line(&mut v, "SINTER set1 nokey"), "*0\r\n");
    // STORE variants.
    assert_eq!(line(&mut v, "SINTERSTORE res set1 set2"), ":3\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS res"), words("3 b c"));
    assert_eq!(line(&mut v, "SUNIONSTORE res set1 set2"), ":7\r\n");
    assert_eq!(line(&mut v, "SDIFFSTORE res set1 set2 set3"), ":3\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS res"), words("1 2 a"));
    // The destination may be an input.
    assert_eq!(line(&mut v, "SUNIONSTORE res res set3"), ":6\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS res"), words("1 2 3 a c zz"));
    // An empty result deletes the destination, whatever it held, and replies 0.
    line(&mut v, "SET str xxx");
    assert_eq!(line(&mut v, "SINTERSTORE str foo111 bar222"), ":0\r\n");
    assert_eq!(line(&mut v, "EXISTS str"), ":0\r\n");
    line(&mut v, "SET str xxx");
    assert_eq!(line(&mut v, "SUNIONSTORE str foo111 bar222"), ":0\r\n");
    assert_eq!(line(&mut v, "EXISTS str"), ":0\r\n");
    line(&mut v, "SET str xxx");
    assert_eq!(line(&mut v, "SDIFFSTORE str foo111 bar222"), ":0\r\n");
    assert_eq!(line(&mut v, "EXISTS str"), ":0\r\n");
    assert_eq!(line(&mut v, "SDIFFSTORE res set1 set1"), ":0\r\n");
    assert_eq!(line(&mut v, "EXISTS res"), ":0\r\n");
    // A string destination is replaced by the set; its TTL goes.
    line(&mut v, "SET str xxx EX 100");
    assert_eq!(line(&mut v, "SUNIONSTORE str set3"), ":3\r\n");
    assert_eq!(line(&mut v, "TYPE str"), "+set\r\n");
    assert_eq!(line(&mut v, "TTL str"), ":-1\r\n");
    // A wrong-typed input leaves the destination as it was.
    line(&mut v, "SET key1 x");
    line(&mut v, "DEL set3");
    line(&mut v, "SADD set3 e");
    for cmd in [
        "SINTERSTORE set3 key1 set2 noset",
        "SINTERSTORE set3 noset key1 set2",
        "SUNIONSTORE set3 set1 key1",
        "SDIFFSTORE set3 set1 key1 set2",
    ] {
        assert_eq!(line(&mut v, cmd), WRONGTYPE, "{cmd}");
        assert_eq!(sorted(&mut v, "SMEMBERS set3"), words("e"), "{cmd}");
    }
    assert_eq!(
        line(&mut v, "SINTERSTORE d"),
        "-ERR wrong number of arguments for 'sinterstore' command\r\n"
    );
    assert_eq!(
        line(&mut v, "SINTER"),
        "-ERR wrong number of arguments for 'sinter' command\r\n"
    );
}

#[test]
fn smove_as_set_tcl() {
    on_both_views(smove_as_set_tcl_on_a_view);
}

fn smove_as_set_tcl_on_a_view() {
    let setup = |v: &mut SetView| {
        line(v, "DEL myset1 myset2 myset3");
        line(v, "SADD myset1 1 a b");
        line(v, "SADD myset2 2 3 4");
    };
    let mut v = view();
    setup(&mut v);
    assert_eq!(line(&mut v, "SMOVE myset1 myset2 a"), ":1\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS myset1"), words("1 b"));
    assert_eq!(sorted(&mut v, "SMEMBERS myset2"), words("2 3 4 a"));
    setup(&mut v);
    assert_eq!(line(&mut v, "SMOVE myset2 myset1 2"), ":1\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS myset1"), words("1 2 a b"));
    assert_eq!(sorted(&mut v, "SMEMBERS myset2"), words("3 4"));
    setup(&mut v);
    assert_eq!(line(&mut v, "SMOVE myset1 myset2 foo"), ":0\r\n");
    assert_eq!(line(&mut v, "SMOVE myset1 myset1 foo"), ":0\r\n");
    assert_eq!(line(&mut v, "SMOVE myset1 myset1 a"), ":1\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS myset1"), words("1 a b"));
    assert_eq!(line(&mut v, "SMOVE noset myset2 foo"), ":0\r\n");
    assert_eq!(line(&mut v, "SMOVE myset1 myset3 a"), ":1\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS myset3"), words("a"));
    // Into a set that already has it: removed from the source only.
    line(&mut v, "SADD myset2 b");
    assert_eq!(line(&mut v, "SMOVE myset1 myset2 b"), ":1\r\n");
    assert_eq!(sorted(&mut v, "SMEMBERS myset1"), words("1"));
    assert_eq!(sorted(&mut v, "SMEMBERS myset2"), words("2 3 4 b"));
    // The last member moved: the source is gone.
    assert_eq!(line(&mut v, "SMOVE myset1 myset2 1"), ":1\r\n");
    assert_eq!(line(&mut v, "EXISTS myset1"), ":0\r\n");
    line(&mut v, "SET x 10");
    assert_eq!(line(&mut v, "SMOVE x myset2 foo"), WRONGTYPE);
    assert_eq!(line(&mut v, "SMOVE myset2 x foo"), WRONGTYPE);
    assert_eq!(line(&mut v, "SMOVE myset2 x 2"), WRONGTYPE);
    assert_eq!(sorted(&mut v, "SMEMBERS myset2"), words("1 2 3 4 b"));
    // TTLs stay with their keys.
    line(&mut v, "EXPIRE myset2 100");
    line(&mut v, "SADD myset3 q");
    line(&mut v, "EXPIRE myset3 200");
    assert_eq!(line(&mut v, "SMOVE myset2 myset3 2"), ":1\r\n");
    assert_eq!(line(&mut v, "TTL myset2"), ":100\r\n");
    assert_eq!(line(&mut v, "TTL myset3"), ":200\r\n");
    assert_eq!(
        line(&mut v, "SMOVE a b"),
        "-ERR wrong number of arguments for 'smove' command\r\n"
    );
}

#[test]
fn spop_as_set_tcl() {
    on_both_views(spop_as_set_tcl_on_a_view);
}

fn spop_as_set_tcl_on_a_view() {
    let mut v = view();
    for contents in ["a b c", "1 2 3"] {
        line(&mut v, &format!("SADD myset {contents}"));
        let mut got: Vec<String> = (0..3)
            .map(|_| match run(&mut v, "SPOP myset") {
                Resp::Bulk(b) => String::from_utf8(b).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        got.sort();
        assert_eq!(got, words(contents));
        assert_eq!(line(&mut v, "SCARD myset"), ":0\r\n");
        assert_eq!(line(&mut v, "EXISTS myset"), ":0\r\n");
        line(&mut v, &format!("SADD myset {contents}"));
        let mut got = Vec::new();
        for _ in 0..3 {
            got.extend(strs(&run(&mut v, "SPOP myset 1")));
        }
        got.sort();
        assert_eq!(got, words(contents));
        assert_eq!(line(&mut v, "EXISTS myset"), ":0\r\n");
    }
    let letters = "a b c d e f g h i j k l m n o p q r s t u v w x y z";
    line(&mut v, &format!("SADD myset {letters}"));
    let mut got = Vec::new();
    for c in [11, 9, 0, 4, 1, 0, 1, 0] {
        let r = strs(&run(&mut v, &format!("SPOP myset {c}")));
        assert_eq!(r.len(), c);
        got.extend(r);
    }
    got.sort();
    assert_eq!(got, words(letters));
    assert_eq!(line(&mut v, "SCARD myset"), ":0\r\n");
    // Code paths: all, a few, almost all.
    let content: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
    for (count, left) in [(30, 0), (2, 18), (18, 2)] {
        line(&mut v, &format!("SADD myset {}", content.join(" ")));
        let popped = strs(&run(&mut v, &format!("SPOP myset {count}")));
        assert_eq!(popped.len(), 20 - left);
        assert_eq!(line(&mut v, "SCARD myset"), format!(":{left}\r\n"));
        let mut union = popped;
        union.extend(strs(&run(&mut v, "SMEMBERS myset")));
        union.sort();
        let mut want = content.clone();
        want.sort();
        assert_eq!(union, want);
        line(&mut v, "DEL myset");
    }
    assert_eq!(line(&mut v, "SPOP nonexisting_key 100"), "*0\r\n");
    assert_eq!(line3(&mut v, "SPOP nonexisting_key 100"), "~0\r\n");
    assert_eq!(line(&mut v, "SPOP nonexisting_key"), "$-1\r\n");
    assert_eq!(line3(&mut v, "SPOP nonexisting_key"), "_\r\n");
    line(&mut v, "SADD s a");
    assert_eq!(line3(&mut v, "SPOP s 0"), "~0\r\n");
    assert_eq!(line3(&mut v, "SPOP s 5"), "~1\r\n$1\r\na\r\n");
    assert_eq!(
        line(&mut v, "SPOP s -1"),
        "-ERR value is out of range, must be positive\r\n"
    );
    assert_eq!(
        line(&mut v, "SPOP s 99999999999999999999"),
        "-ERR value is out of range, must be positive\r\n"
    );
    assert_eq!(line(&mut v, "SPOP s 1 2"), "-ERR syntax error\r\n");
    // SPOP keeps the TTL of what is left.
    line(&mut v, "SADD t a b c");
    line(&mut v, "EXPIRE t 100");
    run(&mut v, "SPOP t");
    run(&mut v, "SPOP t 1");
    assert_eq!(line(&mut v, "TTL t"), ":100\r\n");
}

#[test]
fn srandmember_as_set_tcl() {
    on_both_views(srandmember_as_set_tcl_on_a_view);
}

fn srandmember_as_set_tcl_on_a_view() {
    let mut v = view();
    let contents: Vec<String> = (0..50).map(|i| i.to_string()).collect();
    line(&mut v, &format!("SADD myset {}", contents.join(" ")));
    let all: BTreeSet<String> = contents.iter().cloned().collect();
    assert_eq!(line(&mut v, "SRANDMEMBER myset 0"), "*0\r\n");
    assert_eq!(line3(&mut v, "SRANDMEMBER myset 0"), "*0\r\n");
    assert_eq!(line(&mut v, "SRANDMEMBER nonexisting_key 100"), "*0\r\n");
    assert_eq!(line3(&mut v, "SRANDMEMBER nonexisting_key 100"), "*0\r\n");
    assert_eq!(line(&mut v, "SRANDMEMBER nonexisting_key"), "$-1\r\n");
    let res = strs(&run(&mut v, "SRANDMEMBER myset -100"));
    assert_eq!(res.len(), 100);
    assert!(res.iter().all(|m| all.contains(m)));
    for size in [50, 100] {
        let res = strs(&run(&mut v, &format!("SRANDMEMBER myset {size}")));
        assert_eq!(res.iter().cloned().collect::<BTreeSet<_>>(), all);
        assert_eq!(res.len(), 50);
    }
    for size in [45, 5, 1] {
        let res = strs(&run(&mut v, &format!("SRANDMEMBER myset {size}")));
        assert_eq!(res.len(), size);
        let distinct: BTreeSet<String> = res.iter().cloned().collect();
        assert_eq!(distinct.len(), size, "distinct");
        assert!(distinct.is_subset(&all));
    }
    // Eventually every member comes out.
    let mut seen = BTreeSet::new();
    for _ in 0..1000 {
        seen.extend(strs(&run(&mut v, "SRANDMEMBER myset -10")));
        if seen == all {
            break;
        }
    }
    assert_eq!(seen, all);
    let one = run(&mut v, "SRANDMEMBER myset");
    assert!(matches!(one, Resp::Bulk(ref b) if all.contains(std::str::from_utf8(b).unwrap())));
    assert!(
        line3(&mut v, "SRANDMEMBER myset 3").starts_with("*3\r\n"),
        "an array in RESP3"
    );
    assert_eq!(
        line(&mut v, "SRANDMEMBER myset -9223372036854775808"),
        "-ERR value is out of range, value must between -9223372036854775807 and \
         9223372036854775807\r\n"
    );
    assert_eq!(
        line(&mut v, "SRANDMEMBER myset -9223372036854775807"),
        "-ERR value is out of range\r\n",
        "a reply of 2^63 elements is refused, not built"
    );
    assert_eq!(
        line(
            &mut v,
            &format!("SRANDMEMBER myset -{}", MAX_RANDOM_REPEATS + 1)
        ),
        "-ERR value is out of range\r\n"
    );
    assert_eq!(
        line(&mut v, "SRANDMEMBER nokey -9223372036854775807"),
        "*0\r\n",
        "a missing key first"
    );
    assert!(line(&mut v, "SRANDMEMBER myset 9223372036854775807").starts_with("*50\r\n"));
    assert_eq!(
        line(&mut v, "SRANDMEMBER myset x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        line(&mut v, "SRANDMEMBER myset 1 2"),
        "-ERR syntax error\r\n"
    );
}

#[test]
fn sscan_small_whole_large_with_a_cursor() {
    on_both_views(sscan_small_whole_large_with_a_cursor_on_a_view);
}

fn sscan_small_whole_large_with_a_cursor_on_a_view() {
    let mut v = view();
    line(&mut v, "SADD s foo fab fiz foobar 1 2 3 4");
    let (c, got) = strs_of_scan(&run(&mut v, "SSCAN s 0"));
    assert_eq!(c, 0);
    assert_eq!(got, words("1 2 3 4 fab fiz foo foobar"));
    let (_, got) = strs_of_scan(&run(&mut v, "SSCAN s 0 MATCH foo* COUNT 10000"));
    assert_eq!(got, words("foo foobar"));
    let (_, got) = strs_of_scan(&run(&mut v, "SSCAN s 77 MATCH * COUNT 1"));
    assert_eq!(got.len(), 8, "a small set whole, whatever the cursor");
    assert_eq!(
        line(&mut v, "SSCAN nokey 0 BADOPT"),
        "*2\r\n$1\r\n0\r\n*0\r\n"
    );
    for bad in [
        "SSCAN s 0 COUNT 0",
        "SSCAN s 0 COUNT -1",
        "SSCAN s 0 MATCH",
        "SSCAN s 0 COUNT",
        "SSCAN s 0 TYPE string",
        "SSCAN s 0 NOVALUES",
    ] {
        assert_eq!(line(&mut v, bad), "-ERR syntax error\r\n", "{bad}");
    }
    assert_eq!(
        line(&mut v, "SSCAN s 0 COUNT x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    for bad in ["SSCAN s x", "SSCAN s -1", "SSCAN s 18446744073709551616"] {
        assert_eq!(line(&mut v, bad), "-ERR invalid cursor\r\n", "{bad}");
    }
    assert_eq!(
        line(&mut v, "SSCAN s"),
        "-ERR wrong number of arguments for 'sscan' command\r\n"
    );
    // A large set iterates; members removed mid-way do not hide the others (scan.tcl's
    // "SCAN regression test for issue #4906").
    for (numele, del_at) in [(1100usize, 3usize), (600, 0), (2000, 7)] {
        line(&mut v, "DEL big");
        let members: Vec<String> = (0..numele).map(|i| i.to_string()).collect();
        line(&mut v, &format!("SADD big x {}", members.join(" ")));
        let toremove: Vec<String> = (100..numele).map(|i| i.to_string()).collect();
        let mut found = BTreeSet::new();
        let mut cursor = 0u64;
        let mut iteration = 0;
        loop {
            let (next, got) = strs_of_scan(&run(&mut v, &format!("SSCAN big {cursor}")));
            assert!(got.len() <= MAX_SCAN_COUNT + 8);
            found.extend(got);
            iteration += 1;
            if iteration == del_at {
                line(&mut v, &format!("SREM big {}", toremove.join(" ")));
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
            assert!(iteration < 200, "terminates");
        }
        assert!(iteration > 1 || numele < SSCAN_WHOLE);
        for j in 0..100 {
            assert!(found.contains(&j.to_string()), "{j} of {numele}");
        }
    }
    // Without changes, a full iteration lists each member exactly once, and COUNT sizes
    // the batches.
    line(&mut v, "DEL big");
    let members: Vec<String> = (0..3000).map(|i| format!("m:{i}")).collect();
    line(&mut v, &format!("SADD big {}", members.join(" ")));
    let mut listed = Vec::new();
    let mut cursor = 0u64;
    let mut calls = 0;
    loop {
        let (next, got) = strs_of_scan(&run(&mut v, &format!("SSCAN big {cursor} COUNT 500")));
        calls += 1;
        listed.extend(got);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(calls, 6);
    listed.sort();
    let mut want = members;
    want.sort();
    assert_eq!(listed, want);
    // RESP3: the same shape (arrays).
    assert!(line3(&mut v, "SSCAN s 0").starts_with("*2\r\n$1\r\n0\r\n*8\r\n"));
}

#[test]
fn writes_keep_the_ttl_and_the_size_limit_holds() {
    on_both_views(writes_keep_the_ttl_and_the_size_limit_holds_on_a_view);
}

fn writes_keep_the_ttl_and_the_size_limit_holds_on_a_view() {
    let mut v = view();
    line(&mut v, "SADD s a");
    line(&mut v, "EXPIRE s 100");
    line(&mut v, "SADD s b c");
    line(&mut v, "SREM s c");
    assert_eq!(line(&mut v, "TTL s"), ":100\r\n");
    assert_eq!(line(&mut v, "TYPE s"), "+set\r\n");
    // An expired set is gone for the set commands.
    v.now = Timestamp(10_000_000 + 200_000_000);
    assert_eq!(line(&mut v, "SCARD s"), ":0\r\n");
    assert_eq!(line(&mut v, "SADD s z"), ":1\r\n");
    assert_eq!(line(&mut v, "TTL s"), ":-1\r\n");

    // The longest value bounds what a view of bytes stores (a held set is bounded by the
    // server's memory instead).
    let mut v = SetView::new();
    v.max = 40;
    let long = "x".repeat(30);
    assert_eq!(line(&mut v, &format!("SADD s {long}")), ":1\r\n");
    let too_large = "-ERR set exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(line(&mut v, &format!("SADD s y{long}")), too_large);
    assert_eq!(line(&mut v, "SCARD s"), ":1\r\n", "nothing changed");
    assert_eq!(
        line(&mut v, &format!("SADD s {long}")),
        ":0\r\n",
        "no write"
    );
    line(&mut v, &format!("SADD t y{long}"));
    assert_eq!(line(&mut v, &format!("SMOVE t s y{long}")), too_large);
    assert_eq!(line(&mut v, "SCARD t"), ":1\r\n", "the source kept it");
    assert_eq!(line(&mut v, "SUNIONSTORE s s t"), too_large);
    assert_eq!(line(&mut v, "SCARD s"), ":1\r\n");
    line(&mut v, "SET d v");
    assert_eq!(line(&mut v, "SUNIONSTORE d s t"), too_large);
    assert_eq!(
        line(&mut v, "TYPE d"),
        "+string\r\n",
        "destination untouched"
    );
}

#[test]
fn reads_count_hits_and_misses() {
    on_both_views(reads_count_hits_and_misses_on_a_view);
}

fn reads_count_hits_and_misses_on_a_view() {
    let mut v = view();
    line(&mut v, "SADD s a");
    let (h, m) = (v.hits, v.misses);
    line(&mut v, "SISMEMBER s a");
    line(&mut v, "SCARD nokey");
    line(&mut v, "SINTER s nokey");
    assert_eq!((v.hits - h, v.misses - m), (2, 2));
}

#[test]
fn damaged_set_data_is_an_error_not_a_panic() {
    on_both_views(damaged_set_data_is_an_error_not_a_panic_on_a_view);
}

fn damaged_set_data_is_an_error_not_a_panic_on_a_view() {
    let good = Bytes::from(encode(&[&b"a"[..], b"bc", b"d"]));
    assert_eq!(
        decode_data(&good).unwrap(),
        vec![
            Bytes::from_static(b"a"),
            Bytes::from_static(b"bc"),
            Bytes::from_static(b"d")
        ]
    );
    for cut in 0..good.len() {
        assert!(decode_data(&good.slice(..cut)).is_err(), "{cut}");
    }
    let mut trailing = good.to_vec();
    trailing.push(0);
    for bad in [
        trailing,
        vec![2, 1, b'b', 1, b'a'],
        vec![2, 1, b'a', 1, b'a'],
        vec![0xff; 12],
        vec![0xff, 0xff, 0xff, 0xff, 0x0f],
        vec![1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
        vec![3, 0, 0, 0],
    ] {
        assert!(decode_data(&Bytes::from(bad.clone())).is_err(), "{bad:?}");
    }
    assert!(data_len(&[0xff, 0xff, 0xff, 0x7f]).is_err());
    assert_eq!(data_len(&good).unwrap(), 3);
    // The empty member is a member; the empty set's encoding decodes.
    assert_eq!(
        decode_data(&Bytes::from(encode(&[&b""[..]]))).unwrap(),
        vec![Bytes::new()]
    );
    assert_eq!(
        decode_data(&Bytes::from_static(&[0])).unwrap(),
        Vec::<Bytes>::new()
    );
    // Through the commands.
    let mut v = view();
    let mut e = Entry::new(Bytes::from_static(&[0xff, 0xff, 0xff]));
    e.kind = Kind::Set;
    v.map.insert(b"s".to_vec(), e);
    for cmd in [
        "SADD s a",
        "SREM s a",
        "SCARD s",
        "SISMEMBER s a",
        "SMEMBERS s",
        "SPOP s",
        "SRANDMEMBER s -3",
        "SINTER s",
        "SUNIONSTORE d s",
        "SSCAN s 0",
        "SMOVE s d a",
    ] {
        assert!(line(&mut v, cmd).starts_with("-ERR stored value"), "{cmd}");
    }
    assert_eq!(line(&mut v, "DEL s"), ":1\r\n");
    // `members` refuses another kind.
    let hash = Entry::hash(Bytes::from_static(&[0]));
    assert!(matches!(members(&hash), Err(RedisError::WrongType)));
}

#[test]
fn encoding_is_the_documented_format() {
    on_both_views(encoding_is_the_documented_format_on_a_view);
}

fn encoding_is_the_documented_format_on_a_view() {
    let long = vec![b'z'; 200];
    let data = encode(&[&b"a"[..], &long[..]]);
    let mut want = vec![2, 1, b'a', 0xc8, 0x01];
    want.extend_from_slice(&long);
    assert_eq!(data, want);
    let mut v = view();
    line(&mut v, "SADD s b a");
    let e = v.load(b"s").unwrap().expect("stored");
    assert_eq!(&e.data[..], &[2, 1, b'a', 1, b'b']);
    assert_eq!(e.kind, Kind::Set);
    line(&mut v, "SADD s 10 9 c");
    let e = v.load(b"s").unwrap().expect("stored");
    assert_eq!(
        members(&e).unwrap(),
        ["10", "9", "a", "b", "c"].map(Bytes::from).to_vec(),
        "byte order, whatever the set holds"
    );
    line(&mut v, "DEL s");
    line(&mut v, "SADD s 10 9 -1");
    let e = v.load(b"s").unwrap().expect("stored");
    assert_eq!(&e.data[..], &[3, 2, b'-', b'1', 2, b'1', b'0', 1, b'9']);
}

// ----- the model test ----------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Sadd(u8, Vec<u8>),
    Srem(u8, Vec<u8>),
    Smove(u8, u8, u8),
    Spop(u8, Option<u8>),
    Store(Cmd, u8, Vec<u8>),
    Combine(Cmd, Vec<u8>),
    Sintercard(Vec<u8>, u8),
    Read(u8, u8),
    Srandmember(u8, i8),
    /// SADD (true) or SREM of the integers `from..from + n`: sets cross
    /// `set-max-intset-entries` and shrink back.
    Ints(bool, u8, u16, u16),
}

const KEYS: [&str; 3] = ["a", "b", "c"];
const MEMBERS: [&str; 8] = ["1", "2", "10", "-3", "x", "y", "zz", ""];

fn key(i: u8) -> &'static str {
    KEYS[i as usize % KEYS.len()]
}

fn member(i: u8) -> &'static str {
    MEMBERS[i as usize % MEMBERS.len()]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..3;
    let m = 0u8..8;
    let ms = prop::collection::vec(0u8..8, 1..4);
    let ks = prop::collection::vec(0u8..3, 1..4);
    prop_oneof![
        (k.clone(), ms.clone()).prop_map(|(k, m)| Op::Sadd(k, m)),
        (k.clone(), ms).prop_map(|(k, m)| Op::Srem(k, m)),
        (k.clone(), k.clone(), m.clone()).prop_map(|(a, b, m)| Op::Smove(a, b, m)),
        (k.clone(), prop::option::of(0u8..5)).prop_map(|(k, c)| Op::Spop(k, c)),
        (
            prop::sample::select(vec![Cmd::Sinterstore, Cmd::Sunionstore, Cmd::Sdiffstore]),
            k.clone(),
            ks.clone()
        )
            .prop_map(|(c, d, ks)| Op::Store(c, d, ks)),
        (
            prop::sample::select(vec![Cmd::Sinter, Cmd::Sunion, Cmd::Sdiff]),
            ks.clone()
        )
            .prop_map(|(c, ks)| Op::Combine(c, ks)),
        (ks, 0u8..4).prop_map(|(ks, l)| Op::Sintercard(ks, l)),
        (k.clone(), m).prop_map(|(k, m)| Op::Read(k, m)),
        (k.clone(), -5i8..6).prop_map(|(k, c)| Op::Srandmember(k, c)),
        (any::<bool>(), k, 0u16..700, 1u16..600).prop_map(|(a, k, f, n)| Op::Ints(a, k, f, n)),
    ]
}

type Model = BTreeMap<&'static str, BTreeSet<String>>;

fn model_combine(model: &Model, cmd: Cmd, ks: &[u8]) -> BTreeSet<String> {
    let get = |k: u8| model.get(key(k)).cloned().unwrap_or_default();
    let mut acc = get(ks[0]);
    for &k in &ks[1..] {
        let s = get(k);
        acc = match cmd {
            Cmd::Sinter | Cmd::Sinterstore => acc.intersection(&s).cloned().collect(),
            Cmd::Sunion | Cmd::Sunionstore => acc.union(&s).cloned().collect(),
            _ => acc.difference(&s).cloned().collect(),
        };
    }
    acc
}

fn cmd_name(c: Cmd) -> &'static str {
    c.spec().name
}

/// Runs `parts` (members may be empty strings, so not split on spaces).
fn run_list(v: &mut SetView, parts: &[&str]) -> Resp {
    let bytes: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
    reply_of(&run_parts(v, &bytes, false))
}

fn as_set(r: &Resp) -> BTreeSet<String> {
    strs(r).into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The commands against a `BTreeSet` per key, over a view of bytes and over one that
    /// keeps objects.
    #[test]
    fn commands_match_a_btreeset_model(ops in prop::collection::vec(op(), 1..40)) {
        run_model(&ops, SetView::new())?;
        run_model(&ops, SetView::holding())?;
    }
}

/// Every member of the set at `key`, by a full SSCAN iteration (each member once).
fn full_scan(v: &mut SetView, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    for _ in 0..10_000 {
        let c = cursor.to_string();
        let (next, got) = strs_of_scan(&run_list(v, &["SSCAN", key, &c, "COUNT", "100"]));
        out.extend(got);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    out
}

fn run_model(ops: &[Op], mut v: SetView) -> std::result::Result<(), TestCaseError> {
    {
        let mut model: Model = BTreeMap::new();
        for op in ops.iter().cloned() {
            match op {
                Op::Sadd(k, ms) => {
                    let mut parts = vec!["SADD", key(k)];
                    parts.extend(ms.iter().map(|&m| member(m)));
                    let s = model.entry(key(k)).or_default();
                    let before = s.len();
                    s.extend(ms.iter().map(|&m| member(m).to_string()));
                    let added = (s.len() - before) as i64;
                    prop_assert_eq!(run_list(&mut v, &parts), Resp::Int(added));
                }
                Op::Ints(add, k, from, n) => {
                    let ints: Vec<String> = (from..from + n).map(|i| i.to_string()).collect();
                    let mut parts = vec![if add { "SADD" } else { "SREM" }, key(k)];
                    parts.extend(ints.iter().map(String::as_str));
                    let s = model.entry(key(k)).or_default();
                    let before = s.len();
                    for i in &ints {
                        if add {
                            s.insert(i.clone());
                        } else {
                            s.remove(i);
                        }
                    }
                    let changed = s.len().abs_diff(before) as i64;
                    prop_assert_eq!(run_list(&mut v, &parts), Resp::Int(changed));
                }
                Op::Srem(k, ms) => {
                    let mut parts = vec!["SREM", key(k)];
                    parts.extend(ms.iter().map(|&m| member(m)));
                    let mut removed = 0;
                    if let Some(s) = model.get_mut(key(k)) {
                        for &m in &ms {
                            removed += s.remove(member(m)) as i64;
                        }
                    }
                    prop_assert_eq!(run_list(&mut v, &parts), Resp::Int(removed));
                }
                Op::Smove(a, b, m) => {
                    let m = member(m);
                    let moved = model.get_mut(key(a)).is_some_and(|s| s.contains(m));
                    if moved && key(a) != key(b) {
                        model.get_mut(key(a)).unwrap().remove(m);
                        model.entry(key(b)).or_default().insert(m.to_string());
                    }
                    prop_assert_eq!(
                        run_list(&mut v, &["SMOVE", key(a), key(b), m]),
                        Resp::Int(moved as i64)
                    );
                }
                Op::Spop(k, count) => {
                    let s = model.entry(key(k)).or_default();
                    match count {
                        None => match run_list(&mut v, &["SPOP", key(k)]) {
                            Resp::Null => prop_assert!(s.is_empty()),
                            Resp::Bulk(b) => {
                                prop_assert!(s.remove(std::str::from_utf8(&b).unwrap()));
                            }
                            other => prop_assert!(false, "{:?}", other),
                        },
                        Some(c) => {
                            let r = run_list(&mut v, &["SPOP", key(k), &c.to_string()]);
                            let popped = strs(&r);
                            prop_assert_eq!(popped.len(), (c as usize).min(s.len()));
                            for p in popped {
                                prop_assert!(s.remove(&p));
                            }
                        }
                    }
                }
                Op::Store(cmd, d, ks) => {
                    let result = model_combine(&model, cmd, &ks);
                    let mut parts = vec![cmd_name(cmd), key(d)];
                    parts.extend(ks.iter().map(|&k| key(k)));
                    prop_assert_eq!(run_list(&mut v, &parts), Resp::Int(result.len() as i64));
                    model.insert(key(d), result);
                }
                Op::Combine(cmd, ks) => {
                    let result = model_combine(&model, cmd, &ks);
                    let mut parts = vec![cmd_name(cmd)];
                    parts.extend(ks.iter().map(|&k| key(k)));
                    let r = run_list(&mut v, &parts);
                    prop_assert_eq!(strs(&r).len(), result.len(), "no repeats");
                    prop_assert_eq!(as_set(&r), result);
                }
                Op::Sintercard(ks, limit) => {
                    let n = model_combine(&model, Cmd::Sinter, &ks).len();
                    let want = if limit == 0 { n } else { n.min(limit as usize) };
                    let nk = ks.len().to_string();
                    let l = limit.to_string();
                    let mut parts = vec!["SINTERCARD", &nk];
                    parts.extend(ks.iter().map(|&k| key(k)));
                    parts.extend(["LIMIT", &l]);
                    prop_assert_eq!(run_list(&mut v, &parts), Resp::Int(want as i64));
                }
                Op::Read(k, m) => {
                    let s = model.get(key(k)).cloned().unwrap_or_default();
                    prop_assert_eq!(
                        run_list(&mut v, &["SCARD", key(k)]),
                        Resp::Int(s.len() as i64)
                    );
                    prop_assert_eq!(
                        run_list(&mut v, &["SISMEMBER", key(k), member(m)]),
                        Resp::Int(s.contains(member(m)) as i64)
                    );
                    let all = run_list(&mut v, &["SMEMBERS", key(k)]);
                    prop_assert_eq!(strs(&all).len(), s.len());
                    prop_assert_eq!(as_set(&all), s.clone());
                    let scanned = full_scan(&mut v, key(k));
                    prop_assert_eq!(scanned.len(), s.len(), "each member once");
                    prop_assert_eq!(scanned.into_iter().collect::<BTreeSet<_>>(), s);
                }
                Op::Srandmember(k, c) => {
                    let s = model.get(key(k)).cloned().unwrap_or_default();
                    let r = run_list(&mut v, &["SRANDMEMBER", key(k), &c.to_string()]);
                    let got = strs(&r);
                    let want_len = if c < 0 {
                        if s.is_empty() {
                            0
                        } else {
                            c.unsigned_abs() as usize
                        }
                    } else {
                        (c as usize).min(s.len())
                    };
                    prop_assert_eq!(got.len(), want_len);
                    prop_assert!(got.iter().all(|m| s.contains(m)));
                    if c > 0 {
                        prop_assert_eq!(got.iter().collect::<BTreeSet<_>>().len(), got.len());
                    }
                }
            }
            // Empty sets never exist; every stored set is canonical.
            model.retain(|_, s| !s.is_empty());
            let mut stored: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for k in KEYS {
                if let Some(e) = v.load(k.as_bytes()).unwrap() {
                    let ms = members(&e).expect("a valid set");
                    stored.insert(
                        k.to_string(),
                        ms.iter()
                            .map(|m| String::from_utf8(m.to_vec()).unwrap())
                            .collect(),
                    );
                }
            }
            let want: BTreeMap<String, BTreeSet<String>> = model
                .iter()
                .map(|(k, s)| (k.to_string(), s.clone()))
                .collect();
            prop_assert_eq!(stored, want);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn encoding_round_trips(set in prop::collection::btree_set(prop::collection::vec(any::<u8>(), 0..300), 0..20)) {
        let ms: Vec<Vec<u8>> = set.into_iter().collect();
        let data = Bytes::from(encode(&ms));
        let back = decode_data(&data).unwrap();
        prop_assert_eq!(back.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), ms.clone());
        prop_assert_eq!(data_len(&data).unwrap(), ms.len());
    }

    #[test]
    fn decoding_random_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_data(&Bytes::from(bytes.clone()));
        let _ = data_len(&bytes);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Redis's SSCAN guarantee: a member present from the start to the end of a full
    /// iteration is returned, whatever else is added or removed meanwhile, and an iteration
    /// over an unchanged set returns every member exactly once.
    #[test]
    fn sscan_returns_every_member_present_throughout(
        size in (SSCAN_WHOLE + 1)..2500usize,
        count in 1usize..400,
        churn in prop::collection::vec((any::<bool>(), 0usize..5000), 0..30),
    ) {
        for mut v in [SetView::new(), SetView::holding()] {
            let stable: Vec<String> = (0..size).map(|i| format!("s{i}")).collect();
            let mut parts = vec!["SADD", "k"];
            parts.extend(stable.iter().map(String::as_str));
            run_list(&mut v, &parts);
            let mut seen: Vec<String> = Vec::new();
            let mut cursor = 0u64;
            let mut calls = 0usize;
            loop {
                let c = cursor.to_string();
                let n = count.to_string();
                let (next, got) = strs_of_scan(&run_list(&mut v, &["SSCAN", "k", &c, "COUNT", &n]));
                seen.extend(got);
                if let Some(&(add, i)) = churn.get(calls) {
                    let m = format!("t{i}");
                    run_list(&mut v, &[if add { "SADD" } else { "SREM" }, "k", &m]);
                }
                calls += 1;
                prop_assert!(calls <= crate::scan::ELEMENT_SCAN_PASSES + 2 + size.div_ceil(count), "terminates");
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            let found: BTreeSet<&String> = seen.iter().collect();
            for m in &stable {
                prop_assert!(found.contains(m), "{} missing", m);
            }
            let stable_seen = seen.iter().filter(|m| m.starts_with('s')).count();
            prop_assert_eq!(stable_seen, size, "each stable member exactly once");
        }
    }
}

// ----- held sets: changed in place ------------------------------------------------------

/// The address of the object the view holds at `key`.
fn held_addr(v: &mut SetView, key: &[u8]) -> usize {
    let (obj, _) = v.object_mut(key).unwrap().expect("held");
    obj.as_any() as *const dyn std::any::Any as *const u8 as usize
}

#[test]
fn a_held_set_changes_in_place_and_its_last_member_deletes_it() {
    let mut v = SetView::holding();
    assert_eq!(line(&mut v, "SADD s a b c"), ":3\r\n");
    assert_eq!(v.held_count(), 1);
    assert!(
        !v.map.contains_key(&b"s"[..]),
        "kept as an object, not bytes"
    );
    let at = held_addr(&mut v, b"s");
    // Writes and reads on an existing set: the same object, never re-encoded into bytes.
    for cmd in [
        "SADD s d e",
        "SADD s a",
        "SREM s e",
        "SISMEMBER s a",
        "SMISMEMBER s a z",
        "SCARD s",
        "SMEMBERS s",
        "SRANDMEMBER s",
        "SRANDMEMBER s -5",
        "SSCAN s 0",
        "SPOP s",
        "SPOP s 1",
        "SINTER s s",
        "SMOVE s t nothere",
    ] {
        line(&mut v, cmd);
        assert_eq!(v.held_count(), 1, "{cmd}");
        assert!(!v.map.contains_key(&b"s"[..]), "{cmd}");
        assert_eq!(held_addr(&mut v, b"s"), at, "{cmd}: changed in place");
    }
    assert_eq!(line(&mut v, "SCARD s"), ":2\r\n");
    // An integer set grows into a table in place too (the object stays; its inside changes).
    let many: Vec<String> = (0..=INTSET_MAX_ENTRIES).map(|i| i.to_string()).collect();
    line(&mut v, "SADD n 1 2 3");
    let at = held_addr(&mut v, b"n");
    line(&mut v, &format!("SADD n {}", many.join(" ")));
    assert_eq!(held_addr(&mut v, b"n"), at);
    assert_eq!(
        line(&mut v, "SCARD n"),
        format!(":{}\r\n", INTSET_MAX_ENTRIES + 1)
    );
    // The last member removed, popped or moved: the key is gone, object and all.
    let gone = |v: &mut SetView, key: &[u8]| {
        v.object_mut(key).unwrap().is_none() && v.load(key).unwrap().is_none()
    };
    line(&mut v, "DEL n");
    let members: Vec<String> = strs(&run(&mut v, "SMEMBERS s"));
    let srem = format!("SREM s {}", members.join(" "));
    assert_eq!(line(&mut v, &srem), ":2\r\n");
    assert!(gone(&mut v, b"s"));
    assert_eq!(v.held_count(), 0);
    line(&mut v, "SADD s x");
    run(&mut v, "SPOP s");
    assert!(gone(&mut v, b"s"));
    line(&mut v, "SADD s x y");
    run(&mut v, "SPOP s 2");
    assert!(gone(&mut v, b"s"));
    line(&mut v, "SADD s x");
    assert_eq!(line(&mut v, "SMOVE s t x"), ":1\r\n");
    assert!(gone(&mut v, b"s"));
    assert_eq!(v.held_count(), 1, "t holds x");
    assert_eq!(line(&mut v, "EXISTS s"), ":0\r\n");
    // A STORE variant keeps its result as an object too.
    line(&mut v, "SADD u 1 2");
    assert_eq!(line(&mut v, "SUNIONSTORE d t u"), ":3\r\n");
    assert!(!v.map.contains_key(&b"d"[..]));
    assert_eq!(v.held_count(), 3);
}

/// Deterministic commands answer byte for byte the same on a view of bytes and on one that
/// keeps objects, reply order included.
#[test]
fn both_views_answer_alike_byte_for_byte() {
    let script = [
        "SADD a 3 1 2 10 -5",
        "SADD b x 1 y 2 zz",
        "SADD c foo bar baz 2",
        "SMEMBERS a",
        "SMEMBERS b",
        "SSCAN b 0 MATCH * COUNT 2",
        "SINTER a b",
        "SUNION a b c",
        "SDIFF b a c",
        "SINTERSTORE d a b",
        "SUNIONSTORE e a c",
        "SMEMBERS e",
        "SDIFFSTORE f c b",
        "SMEMBERS f",
        "SINTERCARD 2 a b LIMIT 1",
        "SMISMEMBER b x q 1",
        "SMOVE a b 3",
        "SMEMBERS b",
        "SREM b x y zz",
        "SMEMBERS b",
        "SRANDMEMBER a 100",
        "SPOP a 100",
        "EXISTS a",
        "SCARD b",
        "SET s v",
        "SADD s x",
        "SUNIONSTORE s b",
        "TYPE s",
    ];
    let mut big: Vec<String> = (0..700).map(|i| format!("m{i}")).collect();
    let add_big = format!("SADD big {}", big.join(" "));
    big.truncate(300);
    let rem_big = format!("SREM big {}", big.join(" "));
    let mut bytes = SetView::new();
    let mut held = SetView::holding();
    let mut lines: Vec<String> = script.iter().map(|s| s.to_string()).collect();
    lines.extend([
        add_big,
        "SSCAN big 0 COUNT 50".into(),
        "SSCAN big 9223372036854775808 COUNT 50".into(),
        "SMEMBERS big".into(),
        rem_big,
        "SSCAN big 0".into(),
        "SCARD big".into(),
    ]);
    for l in &lines {
        let (a, b) = (line(&mut bytes, l), line(&mut held, l));
        assert_eq!(a, b, "{l}");
    }
    assert!(held.held_count() > 0);
}

// ----- randomness ------------------------------------------------------------------------

/// Pearson's chi-square statistic of `counts` against a uniform expectation.
fn chi_square(counts: &BTreeMap<String, u64>, buckets: usize) -> f64 {
    let total: u64 = counts.values().sum();
    let expected = total as f64 / buckets as f64;
    let seen: f64 = counts
        .values()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // Members never drawn count too.
    seen + (buckets - counts.len()) as f64 * expected
}

/// SRANDMEMBER and SPOP draw every member, uniformly (a chi-square test as `set.tcl`'s,
/// with a bound a uniform draw exceeds with probability about 1e-9), from integer sets and
/// tables, on both views.
#[test]
fn random_members_are_uniform() {
    for held in [false, true] {
        for members in [
            (0..50).map(|i| i.to_string()).collect::<Vec<_>>(),
            (0..50).map(|i| format!("m{i}")).collect(),
        ] {
            let mut v = if held {
                SetView::holding()
            } else {
                SetView::new()
            };
            line(&mut v, &format!("SADD s {}", members.join(" ")));
            // With repetitions, one command.
            let mut counts = BTreeMap::new();
            for m in strs(&run(&mut v, "SRANDMEMBER s -20000")) {
                *counts.entry(m).or_insert(0u64) += 1;
            }
            assert_eq!(counts.len(), 50, "every member drawn");
            let chi = chi_square(&counts, 50);
            assert!(
                chi < 135.0,
                "SRANDMEMBER -n: chi-square {chi} (held: {held})"
            );
            // Distinct members, and one at a time.
            let mut counts = BTreeMap::new();
            for _ in 0..1000 {
                for m in strs(&run(&mut v, "SRANDMEMBER s 10")) {
                    *counts.entry(m).or_insert(0u64) += 1;
                }
                if let Resp::Bulk(b) = run(&mut v, "SRANDMEMBER s") {
                    *counts.entry(String::from_utf8(b).unwrap()).or_insert(0) += 1;
                }
            }
            let chi = chi_square(&counts, 50);
            assert!(
                chi < 135.0,
                "SRANDMEMBER n: chi-square {chi} (held: {held})"
            );
            // SPOP: which member goes first, and which 5 go together, from the same set.
            let mut counts = BTreeMap::new();
            for _ in 0..1000 {
                if let Resp::Bulk(b) = run(&mut v, "SPOP s") {
                    let m = String::from_utf8(b).unwrap();
                    line(&mut v, &format!("SADD s {m}"));
                    *counts.entry(m).or_insert(0u64) += 1;
                }
                let popped = strs(&run(&mut v, "SPOP s 5"));
                assert_eq!(popped.len(), 5);
                line(&mut v, &format!("SADD s {}", popped.join(" ")));
                for m in popped {
                    *counts.entry(m).or_insert(0u64) += 1;
                }
            }
            assert_eq!(counts.len(), 50, "every member popped");
            let chi = chi_square(&counts, 50);
            assert!(chi < 135.0, "SPOP: chi-square {chi} (held: {held})");
            assert_eq!(line(&mut v, "SCARD s"), ":50\r\n");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Popping a set one member at a time (SPOP, or SPOP with counts) returns each member
    /// exactly once and leaves nothing, on both views and both representations.
    #[test]
    fn spop_returns_every_member_once(
        members in prop::collection::btree_set("[0-9]{1,3}|[a-c]{1,4}", 1..700),
        counts in prop::collection::vec(0u8..40, 1..10),
    ) {
        for mut v in [SetView::new(), SetView::holding()] {
            let ms: Vec<&str> = members.iter().map(String::as_str).collect();
            let mut parts = vec!["SADD", "s"];
            parts.extend(ms.iter().copied());
            run_list(&mut v, &parts);
            let mut popped: Vec<String> = Vec::new();
            let mut i = 0;
            while popped.len() < members.len() {
                match counts[i % counts.len()] {
                    0 => match run_list(&mut v, &["SPOP", "s"]) {
                        Resp::Bulk(b) => popped.push(String::from_utf8(b).unwrap()),
                        other => prop_assert!(false, "{:?}", other),
                    },
                    c => popped.extend(strs(&run_list(&mut v, &["SPOP", "s", &c.to_string()]))),
                }
                i += 1;
                prop_assert!(i <= members.len() + 1);
            }
            prop_assert_eq!(popped.len(), members.len());
            prop_assert_eq!(popped.into_iter().collect::<BTreeSet<_>>(), members.clone());
            prop_assert_eq!(run_list(&mut v, &["EXISTS", "s"]), Resp::Int(0));
            prop_assert_eq!(v.held_count(), 0);
        }
    }
}

/// A set that reaches a holding view as bytes (a TTL change, RESTORE, a restart) is decoded
/// once, kept, and changed in place after.
#[test]
fn a_set_stored_as_bytes_is_kept_at_its_next_write() {
    let mut v = SetView::holding();
    let members: Vec<String> = (0..2000).map(|i| format!("m{i}")).collect();
    let refs: Vec<&[u8]> = members.iter().map(|m| m.as_bytes()).collect();
    let mut sorted = refs.clone();
    sorted.sort();
    let mut e = Entry::new(Bytes::from(encode(&sorted)));
    e.kind = Kind::Set;
    v.map.insert(b"s".to_vec(), e);
    assert_eq!(line(&mut v, "SISMEMBER s m7"), ":1\r\n");
    assert_eq!(v.held_count(), 0, "a read keeps bytes as they are");
    assert_eq!(line(&mut v, "SADD s new"), ":1\r\n");
    assert_eq!(v.held_count(), 1);
    assert!(!v.map.contains_key(&b"s"[..]));
    let at = held_addr(&mut v, b"s");
    for cmd in [
        "SADD s other",
        "SREM s m1 m2 m3 m4 m5 m6",
        "SPOP s",
        "SPOP s 3",
    ] {
        line(&mut v, cmd);
        assert_eq!(held_addr(&mut v, b"s"), at, "{cmd}");
    }
    assert_eq!(line(&mut v, "SCARD s"), ":1992\r\n");
}
