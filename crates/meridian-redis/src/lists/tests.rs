//! The list commands over an in-memory view: replies and errors as `t_list.c` and the suite
//! (`tests/unit/type/list.tcl`) have them, a model test against a `VecDeque`, and damaged
//! bytes.

use super::encoding::{self, Raw};
use super::quicklist;
use super::*;
use crate::OwnedArgs;

use proptest::prelude::*;
use std::collections::VecDeque;

use crate::test_view::TestView as MapView;

fn view() -> MapView {
    MapView::new()
}

/// A view holding bytes and one keeping objects, as the keyspace does: the behaviour tests
/// run over both and expect the same replies.
fn views() -> [MapView; 2] {
    [MapView::new(), MapView::holding()]
}

/// Runs one command (list, or string/keyspace for TYPE, SET, EXPIRE...) over `v`.
fn run_parts(v: &mut MapView, parts: &[&[u8]], resp3: bool) -> String {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    reply.resp3 = resp3;
    let r = if handles(cmd) {
        exec_on_view(cmd, args, v, &mut reply)
    } else if crate::hashes::handles(cmd) {
        crate::hashes::exec_on_view(cmd, args, v, &mut reply)
    } else if cmd.spec().arity_ok(args.len()) {
        crate::strings::exec_on_view(cmd, args, v, &mut reply)
    } else {
        Err(arity_error(cmd.spec().name))
    };
    if let Err(e) = r {
        assert!(reply.out.is_empty(), "an error leaves no partial reply");
        reply.command_error(e);
    }
    String::from_utf8_lossy(&reply.out).into_owned()
}

fn line(v: &mut MapView, l: &str) -> String {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, false)
}

fn line3(v: &mut MapView, l: &str) -> String {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, true)
}

/// The RESP2 array of bulk strings `elems` (space-separated; "" for none).
fn arr(elems: &str) -> String {
    let items: Vec<&str> = if elems.is_empty() {
        Vec::new()
    } else {
        elems.split(' ').collect()
    };
    let mut s = format!("*{}\r\n", items.len());
    for e in items {
        s.push_str(&format!("${}\r\n{e}\r\n", e.len()));
    }
    s
}

fn bulk(e: &str) -> String {
    format!("${}\r\n{e}\r\n", e.len())
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
const SYNTAX_ERR: &str = "-ERR syntax error\r\n";

fn stored(v: &mut MapView, key: &str) -> Vec<Vec<u8>> {
    let e = v.load(key.as_bytes()).unwrap().expect("the key exists");
    assert_eq!(e.kind, Kind::List);
    encoding::decode(&e.data)
        .unwrap()
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect()
}

#[test]
fn push_pop_len_range_index() {
    for mut v in views() {
        assert_eq!(line(&mut v, "LPUSH l a b c d"), ":4\r\n");
        assert_eq!(line(&mut v, "RPUSH l 0 1 2 3"), ":8\r\n");
        assert_eq!(line(&mut v, "LRANGE l 0 -1"), arr("d c b a 0 1 2 3"));
        assert_eq!(line(&mut v, "LLEN l"), ":8\r\n");
        assert_eq!(line(&mut v, "LLEN nokey"), ":0\r\n");
        assert_eq!(line(&mut v, "LINDEX l 0"), bulk("d"));
        assert_eq!(line(&mut v, "LINDEX l -1"), bulk("3"));
        assert_eq!(line(&mut v, "LINDEX l 5"), bulk("1"));
        assert_eq!(line(&mut v, "LINDEX l 8"), "$-1\r\n");
        assert_eq!(line(&mut v, "LINDEX l -9"), "$-1\r\n");
        assert_eq!(line(&mut v, "LINDEX nokey 3"), "$-1\r\n");
        assert_eq!(line(&mut v, "LINDEX nokey x"), "$-1\r\n", "the key first");
        assert_eq!(
            line(&mut v, "LINDEX l x"),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(line(&mut v, "LRANGE l 1 2"), arr("c b"));
        assert_eq!(line(&mut v, "LRANGE l -3 -2"), arr("1 2"));
        assert_eq!(line(&mut v, "LRANGE l -100 1"), arr("d c"));
        assert_eq!(line(&mut v, "LRANGE l 6 100"), arr("2 3"));
        assert_eq!(line(&mut v, "LRANGE l 5 2"), arr(""));
        assert_eq!(line(&mut v, "LRANGE l 8 10"), arr(""));
        assert_eq!(line(&mut v, "LRANGE l 0 -9"), arr(""));
        assert_eq!(
            line(&mut v, "LRANGE l -9223372036854775808 9223372036854775807"),
            arr("d c b a 0 1 2 3")
        );
        assert_eq!(line(&mut v, "LRANGE nokey 0 -1"), arr(""));
        assert_eq!(
            line(&mut v, "LRANGE nokey x 1"),
            "-ERR value is not an integer or out of range\r\n",
            "indexes before the key"
        );
        assert_eq!(line(&mut v, "LPOP l"), bulk("d"));
        assert_eq!(line(&mut v, "RPOP l"), bulk("3"));
        assert_eq!(line(&mut v, "LPOP l 2"), arr("c b"));
        assert_eq!(line(&mut v, "RPOP l 2"), arr("2 1"));
        assert_eq!(line(&mut v, "RPOP l 123"), arr("0 a"));
        assert_eq!(
            line(&mut v, "EXISTS l"),
            ":0\r\n",
            "an empty list does not exist"
        );
        assert_eq!(line(&mut v, "LPUSHX l a"), ":0\r\n");
        assert_eq!(line(&mut v, "RPUSHX l a"), ":0\r\n");
        assert_eq!(line(&mut v, "EXISTS l"), ":0\r\n");
        assert_eq!(line(&mut v, "RPUSH l a"), ":1\r\n");
        assert_eq!(line(&mut v, "LPUSHX l x y"), ":3\r\n");
        assert_eq!(line(&mut v, "RPUSHX l z"), ":4\r\n");
        assert_eq!(line(&mut v, "LRANGE l 0 -1"), arr("y x a z"));
        assert_eq!(line(&mut v, "TYPE l"), "+list\r\n");
        assert!(v.reads() > 0, "reads are counted");
        // An empty element, and long ones (multi-byte lengths).
        let long = "x".repeat(200);
        let longer = "y".repeat(20_000);
        run_parts(
            &mut v,
            &[b"RPUSH", b"e", b"", long.as_bytes(), longer.as_bytes()],
            false,
        );
        assert_eq!(line(&mut v, "LINDEX e 0"), "$0\r\n\r\n");
        assert_eq!(line(&mut v, "LINDEX e -2"), bulk(&long));
        assert_eq!(line(&mut v, "RPOP e"), bulk(&longer));
        assert_eq!(line(&mut v, "LPOP e"), "$0\r\n\r\n");
        assert_eq!(stored(&mut v, "e"), vec![long.into_bytes()]);
    }
}

#[test]
fn pop_counts_and_null_shapes_in_both_protocols() {
    for mut v in views() {
        line(&mut v, "LPUSH listcount zero");
        for resp3 in [false, true] {
            let r = |v: &mut MapView, l: &str| if resp3 { line3(v, l) } else { line(v, l) };
            assert_eq!(r(&mut v, "LPOP listcount 0"), "*0\r\n");
            assert_eq!(r(&mut v, "RPOP listcount 0"), "*0\r\n");
            let (null, null_array) = if resp3 {
                ("_\r\n", "_\r\n")
            } else {
                ("$-1\r\n", "*-1\r\n")
            };
            assert_eq!(r(&mut v, "LPOP nokey"), null);
            assert_eq!(r(&mut v, "RPOP nokey"), null);
            for c in [
                "LPOP nokey 0",
                "LPOP nokey 1",
                "RPOP nokey 0",
                "RPOP nokey 1",
            ] {
                assert_eq!(r(&mut v, c), null_array, "{c}");
            }
        }
        assert_eq!(
            line(&mut v, "LLEN listcount"),
            ":1\r\n",
            "count 0 pops nothing"
        );
        assert_eq!(
            line(&mut v, "LPOP key 1 1"),
            "-ERR wrong number of arguments for 'lpop' command\r\n"
        );
        assert_eq!(
            line(&mut v, "RPOP key 2 2"),
            "-ERR wrong number of arguments for 'rpop' command\r\n"
        );
        for bad in ["LPOP nokey -123", "LPOP listcount x", "RPOP listcount -1"] {
            assert_eq!(
                line(&mut v, bad),
                "-ERR value is out of range, must be positive\r\n",
                "{bad}"
            );
        }
        assert_eq!(
            line(&mut v, "LPOP listcount 9223372036854775807"),
            arr("zero")
        );
        assert_eq!(
            line(&mut v, "LPOP"),
            "-ERR wrong number of arguments for 'lpop' command\r\n"
        );
    }
}

#[test]
fn lset_linsert_lrem_ltrim() {
    for mut v in views() {
        line(&mut v, "RPUSH l 99 98 97 96 95");
        assert_eq!(line(&mut v, "LSET l 1 foo"), "+OK\r\n");
        assert_eq!(line(&mut v, "LSET l -1 bar"), "+OK\r\n");
        let big = "z".repeat(300);
        assert_eq!(line(&mut v, &format!("LSET l 2 {big}")), "+OK\r\n");
        assert_eq!(
            line(&mut v, "LRANGE l 0 -1"),
            arr(&format!("99 foo {big} 96 bar"))
        );
        assert_eq!(line(&mut v, "LSET l 2 97"), "+OK\r\n");
        assert_eq!(line(&mut v, "LSET l 10 foo"), "-ERR index out of range\r\n");
        assert_eq!(line(&mut v, "LSET l -6 foo"), "-ERR index out of range\r\n");
        assert_eq!(
            line(&mut v, "LSET nosuchkey 10 foo"),
            "-ERR no such key\r\n"
        );
        assert_eq!(line(&mut v, "LSET nosuchkey x foo"), "-ERR no such key\r\n");
        assert_eq!(
            line(&mut v, "LSET l x foo"),
            "-ERR value is not an integer or out of range\r\n"
        );
        // LINSERT.
        assert_eq!(line(&mut v, "LINSERT l BEFORE 99 a"), ":6\r\n");
        assert_eq!(line(&mut v, "LINSERT l after bar z"), ":7\r\n");
        assert_eq!(line(&mut v, "LINSERT l after 97 m"), ":8\r\n");
        assert_eq!(line(&mut v, "LINSERT l before bad x"), ":-1\r\n");
        assert_eq!(line(&mut v, "LINSERT nokey before a x"), ":0\r\n");
        assert_eq!(line(&mut v, "LINSERT l aft3r aa 42"), SYNTAX_ERR);
        assert_eq!(
            line(&mut v, "LINSERT nokey aft3r aa 42"),
            SYNTAX_ERR,
            "before the key"
        );
        assert_eq!(line(&mut v, "LRANGE l 0 -1"), arr("a 99 foo 97 m 96 bar z"));
        // LREM.
        line(&mut v, "DEL r");
        line(&mut v, "RPUSH r x a x b x c x");
        assert_eq!(line(&mut v, "LREM r 2 x"), ":2\r\n");
        assert_eq!(line(&mut v, "LRANGE r 0 -1"), arr("a b x c x"));
        assert_eq!(line(&mut v, "LREM r -1 x"), ":1\r\n");
        assert_eq!(line(&mut v, "LRANGE r 0 -1"), arr("a b x c"));
        assert_eq!(line(&mut v, "LREM r 0 x"), ":1\r\n");
        assert_eq!(line(&mut v, "LREM r 0 nothere"), ":0\r\n");
        assert_eq!(line(&mut v, "LREM nokey 0 x"), ":0\r\n");
        assert_eq!(
            line(&mut v, "LREM nokey x x"),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(line(&mut v, "LREM r -9223372036854775808 a"), ":1\r\n");
        line(&mut v, "RPUSH same q q q");
        assert_eq!(line(&mut v, "LREM same 0 q"), ":3\r\n");
        assert_eq!(line(&mut v, "EXISTS same"), ":0\r\n");
        // LTRIM.
        line(&mut v, "RPUSH t 1 2 3 4 5");
        assert_eq!(line(&mut v, "LTRIM t 1 -2"), "+OK\r\n");
        assert_eq!(line(&mut v, "LRANGE t 0 -1"), arr("2 3 4"));
        assert_eq!(line(&mut v, "LTRIM t -100 100"), "+OK\r\n");
        assert_eq!(line(&mut v, "LRANGE t 0 -1"), arr("2 3 4"));
        assert_eq!(line(&mut v, "LTRIM t 0 0"), "+OK\r\n");
        assert_eq!(line(&mut v, "LRANGE t 0 -1"), arr("2"));
        assert_eq!(line(&mut v, "LTRIM t 5 10"), "+OK\r\n");
        assert_eq!(line(&mut v, "EXISTS t"), ":0\r\n");
        assert_eq!(line(&mut v, "LTRIM nokey 0 1"), "+OK\r\n");
        assert_eq!(
            line(&mut v, "LTRIM nokey 0 x"),
            "-ERR value is not an integer or out of range\r\n"
        );
    }
}

#[test]
fn lpos_as_the_suite_has_it() {
    for mut v in views() {
        line(&mut v, "RPUSH mylist a b c 1 2 3 c c");
        let cases = [
        ("LPOS mylist a", ":0\r\n".to_string()),
        ("LPOS mylist c", ":2\r\n".to_string()),
        ("LPOS mylist c RANK 1", ":2\r\n".to_string()),
        ("LPOS mylist c RANK 2", ":6\r\n".to_string()),
        ("LPOS mylist c RANK 4", "$-1\r\n".to_string()),
        ("LPOS mylist c RANK -1", ":7\r\n".to_string()),
        ("LPOS mylist c RANK -2", ":6\r\n".to_string()),
        (
            "LPOS mylist c COUNT 0",
            "*3\r\n:2\r\n:6\r\n:7\r\n".to_string(),
        ),
        ("LPOS mylist c COUNT 1", "*1\r\n:2\r\n".to_string()),
        ("LPOS mylist c COUNT 2", "*2\r\n:2\r\n:6\r\n".to_string()),
        (
            "LPOS mylist c COUNT 100",
            "*3\r\n:2\r\n:6\r\n:7\r\n".to_string(),
        ),
        (
            "LPOS mylist c COUNT 0 RANK 2",
            "*2\r\n:6\r\n:7\r\n".to_string(),
        ),
        (
            "LPOS mylist c COUNT 2 RANK -1",
            "*2\r\n:7\r\n:6\r\n".to_string(),
        ),
        ("LPOS mylistxxx c COUNT 0 RANK 2", "*0\r\n".to_string()),
        ("LPOS mylistxxx c", "$-1\r\n".to_string()),
        ("LPOS mylist x COUNT 2 RANK -1", "*0\r\n".to_string()),
        ("LPOS mylist x RANK -1", "$-1\r\n".to_string()),
        ("LPOS mylist a COUNT 0 MAXLEN 1", "*1\r\n:0\r\n".to_string()),
        ("LPOS mylist c COUNT 0 MAXLEN 1", "*0\r\n".to_string()),
        ("LPOS mylist c COUNT 0 MAXLEN 3", "*1\r\n:2\r\n".to_string()),
        (
            "LPOS mylist c COUNT 0 MAXLEN 3 RANK -1",
            "*2\r\n:7\r\n:6\r\n".to_string(),
        ),
        (
            "LPOS mylist c COUNT 0 MAXLEN 7 RANK 2",
            "*1\r\n:6\r\n".to_string(),
        ),
        (
            "LPOS mylist c rank 9223372036854775807",
            "$-1\r\n".to_string(),
        ),
        (
            "LPOS mylist c RANK 0",
            "-ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... \
             or use negative to start from the end of the list\r\n"
                .to_string(),
        ),
        (
            "LPOS mylist c RANK -9223372036854775808",
            "-ERR value is out of range, value must between -9223372036854775807 and \
             9223372036854775807\r\n"
                .to_string(),
        ),
        (
            "LPOS mylist c RANK x",
            "-ERR value is not an integer or out of range\r\n".to_string(),
        ),
        (
            "LPOS mylist c COUNT -1",
            "-ERR COUNT can't be negative\r\n".to_string(),
        ),
        (
            "LPOS mylist c COUNT x",
            "-ERR COUNT can't be negative\r\n".to_string(),
        ),
        (
            "LPOS mylist c MAXLEN -1",
            "-ERR MAXLEN can't be negative\r\n".to_string(),
        ),
        ("LPOS mylist c RANK", SYNTAX_ERR.to_string()),
        ("LPOS mylist c FOO 1", SYNTAX_ERR.to_string()),
        ("LPOS nokey c FOO 1", SYNTAX_ERR.to_string()),
    ];
        for (cmd, want) in cases {
            assert_eq!(line(&mut v, cmd), want, "{cmd}");
        }
        assert_eq!(line3(&mut v, "LPOS mylist x"), "_\r\n");
        line(&mut v, "DEL mylist");
        line(&mut v, "LPUSH mylist a");
        assert_eq!(line(&mut v, "LPOS mylist b COUNT 10 RANK 5"), "*0\r\n");
    }
}

#[test]
fn lmove_and_rpoplpush() {
    for mut v in views() {
        line(&mut v, "RPUSH src a b c");
        assert_eq!(line(&mut v, "RPOPLPUSH src dst"), bulk("c"));
        assert_eq!(line(&mut v, "LMOVE src dst LEFT RIGHT"), bulk("a"));
        assert_eq!(line(&mut v, "LRANGE dst 0 -1"), arr("c a"));
        assert_eq!(line(&mut v, "LMOVE src dst left left"), bulk("b"));
        assert_eq!(line(&mut v, "EXISTS src"), ":0\r\n");
        assert_eq!(line(&mut v, "LRANGE dst 0 -1"), arr("b c a"));
        assert_eq!(line(&mut v, "LMOVE src dst LEFT RIGHT"), "$-1\r\n");
        assert_eq!(line3(&mut v, "RPOPLPUSH src dst"), "_\r\n");
        // Rotation on one key.
        assert_eq!(line(&mut v, "RPOPLPUSH dst dst"), bulk("a"));
        assert_eq!(line(&mut v, "LRANGE dst 0 -1"), arr("a b c"));
        assert_eq!(line(&mut v, "LMOVE dst dst LEFT RIGHT"), bulk("a"));
        assert_eq!(line(&mut v, "LRANGE dst 0 -1"), arr("b c a"));
        assert_eq!(line(&mut v, "LMOVE dst dst RIGHT RIGHT"), bulk("a"));
        assert_eq!(line(&mut v, "LRANGE dst 0 -1"), arr("b c a"));
        line(&mut v, "RPUSH one x");
        assert_eq!(line(&mut v, "LMOVE one one LEFT RIGHT"), bulk("x"));
        assert_eq!(line(&mut v, "LRANGE one 0 -1"), arr("x"));
        // Errors: directions first, then the source, then the destination's type.
        assert_eq!(line(&mut v, "LMOVE dst dst UP RIGHT"), SYNTAX_ERR);
        assert_eq!(line(&mut v, "LMOVE dst dst LEFT DOWN"), SYNTAX_ERR);
        line(&mut v, "SET str x");
        assert_eq!(line(&mut v, "LMOVE str dst LEFT RIGHT"), WRONGTYPE);
        assert_eq!(line(&mut v, "LMOVE dst str LEFT RIGHT"), WRONGTYPE);
        assert_eq!(line(&mut v, "RPOPLPUSH dst str"), WRONGTYPE);
        assert_eq!(
            line(&mut v, "LRANGE dst 0 -1"),
            arr("b c a"),
            "nothing changed"
        );
        assert_eq!(
            line(&mut v, "RPOPLPUSH nokey str"),
            "$-1\r\n",
            "no source: no check"
        );
        // TTLs: the source's kept, the destination's kept.
        line(&mut v, "RPUSH s1 a b");
        line(&mut v, "RPUSH d1 z");
        line(&mut v, "EXPIRE s1 100");
        line(&mut v, "EXPIRE d1 200");
        line(&mut v, "LMOVE s1 d1 LEFT LEFT");
        assert_eq!(line(&mut v, "TTL s1"), ":100\r\n");
        assert_eq!(line(&mut v, "TTL d1"), ":200\r\n");
        line(&mut v, "LMOVE s1 fresh LEFT LEFT");
        assert_eq!(line(&mut v, "TTL fresh"), ":-1\r\n");
    }
}

#[test]
fn lmpop_arguments_and_replies() {
    for mut v in views() {
        for (cmd, want) in [
            (
                "LMPOP",
                "-ERR wrong number of arguments for 'lmpop' command\r\n",
            ),
            (
                "LMPOP 1",
                "-ERR wrong number of arguments for 'lmpop' command\r\n",
            ),
            (
                "LMPOP 1 mylist",
                "-ERR wrong number of arguments for 'lmpop' command\r\n",
            ),
            (
                "LMPOP 0 mylist LEFT",
                "-ERR numkeys should be greater than 0\r\n",
            ),
            (
                "LMPOP a mylist LEFT",
                "-ERR numkeys should be greater than 0\r\n",
            ),
            (
                "LMPOP -1 mylist RIGHT",
                "-ERR numkeys should be greater than 0\r\n",
            ),
            ("LMPOP 1 mylist bad_where", SYNTAX_ERR),
            ("LMPOP 1 mylist LEFT bar_arg", SYNTAX_ERR),
            ("LMPOP 1 mylist RIGHT LEFT", SYNTAX_ERR),
            ("LMPOP 1 mylist COUNT", SYNTAX_ERR),
            ("LMPOP 1 mylist LEFT COUNT 1 COUNT 2", SYNTAX_ERR),
            ("LMPOP 2 mylist mylist2 bad_arg", SYNTAX_ERR),
            ("LMPOP 3 mylist mylist2 LEFT", SYNTAX_ERR),
            ("LMPOP 9223372036854775807 mylist LEFT", SYNTAX_ERR),
            (
                "LMPOP 1 mylist LEFT COUNT 0",
                "-ERR count should be greater than 0\r\n",
            ),
            (
                "LMPOP 1 mylist RIGHT COUNT a",
                "-ERR count should be greater than 0\r\n",
            ),
            (
                "LMPOP 1 mylist LEFT COUNT -1",
                "-ERR count should be greater than 0\r\n",
            ),
            (
                "LMPOP 2 mylist mylist2 RIGHT COUNT -1",
                "-ERR count should be greater than 0\r\n",
            ),
        ] {
            assert_eq!(line(&mut v, cmd), want, "{cmd}");
        }
        let kv = |k: &str, elems: &str| format!("*2\r\n{}{}", bulk(k), arr(elems));
        line(&mut v, "RPUSH mylist a b c d e f");
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist left count 2"),
            kv("mylist", "a b")
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist right count 2"),
            kv("mylist", "f e")
        );
        assert_eq!(line(&mut v, "LLEN mylist"), ":2\r\n");
        line(&mut v, "DEL mylist");
        line(&mut v, "RPUSH mylist a b c d e");
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist2 left count 1"),
            kv("mylist", "a")
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist2 LEFT"),
            kv("mylist", "b")
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist2 right count 10"),
            kv("mylist", "e d c")
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist2 right count 1"),
            "*-1\r\n"
        );
        assert_eq!(
            line3(&mut v, "LMPOP 2 mylist mylist2 right count 1"),
            "_\r\n"
        );
        line(&mut v, "RPUSH mylist2 1 2 3 4 5");
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist2 right count 1"),
            kv("mylist2", "5")
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 mylist mylist2 left count 10"),
            kv("mylist2", "1 2 3 4")
        );
        assert_eq!(line(&mut v, "EXISTS mylist mylist2"), ":0\r\n");
        line(&mut v, "SET notalist x");
        line(&mut v, "RPUSH full a");
        assert_eq!(
            line(&mut v, "LMPOP 2 notalist full left count 1"),
            WRONGTYPE
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 nokey notalist right count 10"),
            WRONGTYPE
        );
        assert_eq!(
            line(&mut v, "LMPOP 2 full notalist left"),
            kv("full", "a"),
            "the first list with data is served before a later key's type is seen"
        );
    }
}

#[test]
fn blocking_commands_serve_or_answer_the_timeout() {
    for mut v in views() {
        // Nothing there: the timeout's reply (what Redis answers inside MULTI too).
        assert_eq!(line(&mut v, "BLPOP a b 0"), "*-1\r\n");
        assert_eq!(line(&mut v, "BRPOP a 1.5"), "*-1\r\n");
        assert_eq!(line3(&mut v, "BLPOP a 0"), "_\r\n");
        assert_eq!(line(&mut v, "BLMOVE a b LEFT RIGHT 0"), "$-1\r\n");
        assert_eq!(line(&mut v, "BRPOPLPUSH a b 0"), "$-1\r\n");
        assert_eq!(line3(&mut v, "BRPOPLPUSH a b 0"), "_\r\n");
        assert_eq!(line(&mut v, "BLMPOP 0 2 a b LEFT"), "*-1\r\n");
        assert_eq!(line3(&mut v, "BLMPOP 0 2 a b LEFT COUNT 3"), "_\r\n");
        // Data there: served as a blocked client would be.
        line(&mut v, "RPUSH b 1 2 3 4 5 6");
        assert_eq!(
            line(&mut v, "BLPOP a b 0"),
            format!("*2\r\n{}{}", bulk("b"), bulk("1"))
        );
        assert_eq!(
            line(&mut v, "BRPOP a b a 0"),
            format!("*2\r\n{}{}", bulk("b"), bulk("6"))
        );
        assert_eq!(line(&mut v, "BLMOVE b c RIGHT LEFT 0"), bulk("5"));
        assert_eq!(line(&mut v, "BRPOPLPUSH b c 0"), bulk("4"));
        assert_eq!(line(&mut v, "LRANGE c 0 -1"), arr("4 5"));
        assert_eq!(
            line(&mut v, "BLMPOP 0 2 a b LEFT COUNT 5"),
            format!("*2\r\n{}{}", bulk("b"), arr("2 3"))
        );
        assert_eq!(
            line(&mut v, "BLMPOP 1 1 c RIGHT"),
            format!("*2\r\n{}{}", bulk("c"), arr("5"))
        );
        // Types.
        line(&mut v, "SET notalist x");
        assert_eq!(line(&mut v, "BLPOP notalist 0"), WRONGTYPE);
        assert_eq!(line(&mut v, "BRPOP nokey notalist c 0"), WRONGTYPE);
        assert_eq!(
            line(&mut v, "BLMPOP 0 2 notalist c LEFT COUNT 1"),
            WRONGTYPE
        );
        assert_eq!(line(&mut v, "BLMOVE notalist c LEFT LEFT 0"), WRONGTYPE);
        assert_eq!(line(&mut v, "BLMOVE c notalist LEFT LEFT 0"), WRONGTYPE);
        assert_eq!(
            line(&mut v, "BLMOVE nokey notalist LEFT LEFT 0"),
            "$-1\r\n",
            "the destination is looked at when there is something to move"
        );
        // Arguments, in Redis's order.
        for (cmd, want) in [
            ("BLPOP a -1", "-ERR timeout is negative\r\n"),
            (
                "BLPOP notalist x",
                "-ERR timeout is not a float or out of range\r\n",
            ),
            ("BRPOP notalist inf", "-ERR timeout is out of range\r\n"),
            ("BLMOVE a b UP LEFT x", SYNTAX_ERR),
            (
                "BLMOVE notalist b LEFT LEFT -1",
                "-ERR timeout is negative\r\n",
            ),
            ("BRPOPLPUSH notalist b -1", "-ERR timeout is negative\r\n"),
            (
                "BLMPOP -1 0 a LEFT",
                "-ERR numkeys should be greater than 0\r\n",
            ),
            ("BLMPOP -1 1 a UP", SYNTAX_ERR),
            (
                "BLMPOP -1 1 a LEFT COUNT 0",
                "-ERR count should be greater than 0\r\n",
            ),
            ("BLMPOP -1 1 notalist LEFT", "-ERR timeout is negative\r\n"),
            (
                "BLMPOP x 1 notalist LEFT",
                "-ERR timeout is not a float or out of range\r\n",
            ),
            (
                "BLPOP a",
                "-ERR wrong number of arguments for 'blpop' command\r\n",
            ),
            (
                "BLMPOP 0 1 a",
                "-ERR wrong number of arguments for 'blmpop' command\r\n",
            ),
        ] {
            assert_eq!(line(&mut v, cmd), want, "{cmd}");
        }
    }
}

#[test]
fn blocking_source_keys_name_the_popped_keys() {
    let keys = |l: &str| {
        let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
        let owned = OwnedArgs::from_slices(parts.iter().copied());
        blocking_source_keys(Cmd::lookup(parts[0]).unwrap(), owned.get())
    };
    assert_eq!(keys("BLPOP a b c 0"), [1, 2, 3]);
    assert_eq!(keys("BRPOP a 0"), [1]);
    assert_eq!(keys("BLMOVE a b LEFT RIGHT 0"), [1]);
    assert_eq!(keys("BRPOPLPUSH a b 0"), [1]);
    assert_eq!(keys("BLMPOP 0 2 a b LEFT COUNT 2"), [3, 4]);
    assert_eq!(
        keys("BLMPOP 0 9 a b LEFT"),
        [3, 4, 5],
        "cut to the arguments"
    );
    assert_eq!(keys("BLMPOP 0 9223372036854775807 a LEFT"), [3, 4]);
    assert!(keys("BLMPOP 0 0 a LEFT").is_empty());
    assert!(keys("BLMPOP 0 x a LEFT").is_empty());
    assert!(keys("BLMPOP 0").is_empty());
    assert!(keys("BLPOP").is_empty());
    assert!(keys("LPOP a").is_empty());
    assert!(keys("LMPOP 1 a LEFT").is_empty());
}

#[test]
fn wrong_type_everywhere_and_ttl_kept() {
    for mut v in views() {
        line(&mut v, "SET s v");
        line(&mut v, "HSET h f v");
        for key in ["s", "h"] {
            for cmd in [
                "LPUSH {} a",
                "RPUSH {} a",
                "LPUSHX {} a",
                "RPUSHX {} a",
                "LINSERT {} BEFORE a b",
                "LPOP {}",
                "RPOP {} 2",
                "LPOP {} 0",
                "LLEN {}",
                "LRANGE {} 0 -1",
                "LINDEX {} 0",
                "LINDEX {} x",
                "LSET {} 0 a",
                "LSET {} x a",
                "LREM {} 0 a",
                "LTRIM {} 0 1",
                "LPOS {} a",
                "LPOS {} a COUNT 0",
                "LMOVE {} d LEFT LEFT",
                "RPOPLPUSH {} d",
                "LMPOP 1 {} LEFT",
                "BLPOP {} 0",
                "BRPOP {} 0",
                "BLMOVE {} d LEFT LEFT 0",
                "BRPOPLPUSH {} d 0",
                "BLMPOP 0 1 {} LEFT",
            ] {
                let cmd = cmd.replace("{}", key);
                assert_eq!(line(&mut v, &cmd), WRONGTYPE, "{cmd}");
            }
        }
        line(&mut v, "RPUSH l a b c");
        for cmd in ["GET l", "HGET l f", "INCR l", "APPEND l x"] {
            let r = line(&mut v, cmd);
            assert!(
                r == WRONGTYPE || r.starts_with("-ERR unknown"),
                "{cmd}: {r}"
            );
        }
        assert_eq!(line(&mut v, "EXPIRE l 100"), ":1\r\n");
        for cmd in [
            "LPUSH l x",
            "RPOP l",
            "LSET l 0 y",
            "LINSERT l AFTER y z",
            "LREM l 1 z",
            "LTRIM l 0 -1",
            "RPOPLPUSH l l",
        ] {
            line(&mut v, cmd);
            assert_eq!(line(&mut v, "TTL l"), ":100\r\n", "after {cmd}");
            assert_eq!(line(&mut v, "TYPE l"), "+list\r\n");
        }
        assert_eq!(line(&mut v, "SET l v"), "+OK\r\n", "SET overwrites a list");
        assert_eq!(line(&mut v, "TYPE l"), "+string\r\n");
    }
}

#[test]
fn the_value_limit_holds_and_changes_nothing() {
    let mut v = view();
    v.max = 64;
    let long = "x".repeat(40);
    assert_eq!(line(&mut v, &format!("RPUSH l {long}")), ":1\r\n");
    let too_large = "-ERR list exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    assert_eq!(line(&mut v, &format!("RPUSH l {long}")), too_large);
    assert_eq!(line(&mut v, &format!("LPUSH new {long} {long}")), too_large);
    assert_eq!(line(&mut v, "EXISTS new"), ":0\r\n");
    assert_eq!(
        line(&mut v, &format!("LINSERT l BEFORE {long} {long}")),
        too_large
    );
    assert_eq!(line(&mut v, &format!("LSET l 0 {long}{long}")), too_large);
    line(&mut v, &format!("RPUSH d {long}"));
    assert_eq!(line(&mut v, "LMOVE l d LEFT LEFT"), too_large);
    assert_eq!(line(&mut v, "LLEN l"), ":1\r\n", "nothing changed");
    assert_eq!(line(&mut v, "LLEN d"), ":1\r\n");
    assert_eq!(
        line(&mut v, "LMOVE l l LEFT RIGHT"),
        bulk(&long),
        "a rotation fits"
    );
    // A view that keeps objects has no value limit (memory bounds a list there).
    let mut v = MapView::holding();
    v.max = 64;
    assert_eq!(line(&mut v, &format!("RPUSH l {long} {long}")), ":2\r\n");
    assert_eq!(line(&mut v, "LLEN l"), ":2\r\n");
}

#[test]
fn a_held_list_changes_in_place_and_its_last_pop_deletes_it() {
    let mut v = MapView::holding();
    assert_eq!(line(&mut v, "RPUSH l a b"), ":2\r\n");
    assert_eq!(v.held_count(), 1);
    for (cmd, want) in [
        ("RPUSH l c", ":3\r\n"),
        ("LPUSH l z", ":4\r\n"),
        ("RPUSHX l d", ":5\r\n"),
        ("LPUSHX l y", ":6\r\n"),
        ("LSET l 1 Z", "+OK\r\n"),
        ("LINSERT l AFTER Z m", ":7\r\n"),
        ("LPOP l", "$1\r\ny\r\n"),
        ("LMOVE l l LEFT RIGHT", "$1\r\nZ\r\n"),
        ("LREM l 1 m", ":1\r\n"),
        ("LTRIM l 0 -1", "+OK\r\n"),
    ] {
        assert_eq!(line(&mut v, cmd), want, "{cmd}");
        assert_eq!(v.held_count(), 1, "{cmd}: still held");
        assert!(!v.map.contains_key(&b"l"[..]), "{cmd}: not stored as bytes");
    }
    assert_eq!(line(&mut v, "LRANGE l 0 -1"), arr("a b c d Z"));
    // Expiry and type checks on the held object.
    assert_eq!(line(&mut v, "EXPIRE l 100"), ":1\r\n");
    line(&mut v, "RPUSH l e");
    assert_eq!(line(&mut v, "TTL l"), ":100\r\n");
    // Moving between two held lists keeps both held.
    assert_eq!(line(&mut v, "LMOVE l other RIGHT LEFT"), bulk("e"));
    assert_eq!(v.held_count(), 2);
    assert_eq!(line(&mut v, "RPOP other"), bulk("e"));
    assert_eq!(v.held_count(), 1, "its last pop deletes it");
    assert_eq!(line(&mut v, "EXISTS other"), ":0\r\n");
    assert_eq!(line(&mut v, "RPOP l 10"), arr("Z d c b a"));
    assert_eq!(v.held_count(), 0);
    assert!(v.load(b"l").unwrap().is_none());
    assert_eq!(line(&mut v, "EXISTS l"), ":0\r\n");
    // A list stored as bytes (a RESTORE, say) is taken in as an object on its first write.
    v.map.insert(
        b"b".to_vec(),
        Entry {
            data: Bytes::from(encoding::encode([&b"x"[..], b"y"]).unwrap()),
            expiry: None,
            kind: Kind::List,
        },
    );
    assert_eq!(line(&mut v, "LLEN b"), ":2\r\n");
    assert_eq!(line(&mut v, "RPUSH b z"), ":3\r\n");
    assert_eq!(v.held_count(), 1);
    assert!(!v.map.contains_key(&b"b"[..]));
    assert_eq!(line(&mut v, "LRANGE b 0 -1"), arr("x y z"));
}

/// A write that changes nothing records no write: on a view that keeps objects the object
/// is left alone; on one that holds bytes nothing is stored.
#[test]
fn writes_that_change_nothing_store_nothing() {
    for mut v in views() {
        line(&mut v, "RPUSH l a b c");
        let before = v.load(b"l").unwrap();
        for (cmd, want) in [
            ("LSET l 5 x", "-ERR index out of range\r\n"),
            ("LINSERT l BEFORE nothere x", ":-1\r\n"),
            ("LREM l 0 nothere", ":0\r\n"),
            ("LPOP l 0", "*0\r\n"),
        ] {
            assert_eq!(line(&mut v, cmd), want, "{cmd}");
            assert_eq!(v.load(b"l").unwrap(), before, "{cmd}");
        }
    }
}

/// A tiny deterministic generator (xorshift), so a long run is the same every time.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A Redis index into a list of `len`: in range from either end, or a little out.
    fn index(&mut self, len: usize) -> i64 {
        let i = self.below(len as u64 + 4) as i64 - 2;
        if self.below(2) == 0 {
            i
        } else {
            i - len as i64
        }
    }
    fn elem(&mut self) -> Vec<u8> {
        match self.below(10) {
            0 => Vec::new(),
            1 => vec![b'L'; 200 + self.below(5000) as usize],
            2..=4 => format!("m{}", self.below(4)).into_bytes(),
            _ => format!("e{}", self.next() % 100_000).into_bytes(),
        }
    }
}

/// A long run of random commands over lists of thousands of elements (many chunks, elements
/// larger than a chunk among them), on both views against a `VecDeque`.
#[test]
fn long_runs_across_chunks_match_a_vecdeque() {
    for mut v in views() {
        v.max = 64 << 20;
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut m: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
        for step in 0..3000 {
            let l = &mut m[0];
            let len = l.len();
            let (got, want): (Vec<u8>, Vec<u8>) = match rng.below(12) {
                0..=3 => {
                    let left = rng.below(2) == 0;
                    let n = 1 + rng.below(if len < 3000 { 40 } else { 5 }) as usize;
                    let elems: Vec<Vec<u8>> = (0..n).map(|_| rng.elem()).collect();
                    let cmd: &[u8] = if left { b"LPUSH" } else { b"RPUSH" };
                    let mut parts: Vec<&[u8]> = vec![cmd, b"k1"];
                    parts.extend(elems.iter().map(Vec::as_slice));
                    for e in &elems {
                        if left {
                            l.push_front(e.clone());
                        } else {
                            l.push_back(e.clone());
                        }
                    }
                    (raw_run(&mut v, &parts), int_of(l.len() as i64))
                }
                4 => {
                    let left = rng.below(2) == 0;
                    let n = rng.below(30) as usize;
                    let c = n.to_string();
                    let cmd: &[u8] = if left { b"LPOP" } else { b"RPOP" };
                    let want = if l.is_empty() {
                        b"*-1\r\n".to_vec()
                    } else {
                        let popped: Vec<Vec<u8>> = (0..n.min(len))
                            .filter_map(|_| if left { l.pop_front() } else { l.pop_back() })
                            .collect();
                        arr_of(&popped)
                    };
                    (raw_run(&mut v, &[cmd, b"k1", c.as_bytes()]), want)
                }
                5 => {
                    let (a, b) = (rng.index(len), rng.index(len));
                    let want = match model_range(len, a, b) {
                        None => arr_of([]),
                        Some((s, e)) => arr_of(l.range(s..=e)),
                    };
                    let (a, b) = (a.to_string(), b.to_string());
                    (
                        raw_run(&mut v, &[b"LRANGE", b"k1", a.as_bytes(), b.as_bytes()]),
                        want,
                    )
                }
                6 => {
                    let i = rng.index(len);
                    let idx = if i < 0 { len as i64 + i } else { i };
                    let want = match usize::try_from(idx).ok().and_then(|i| l.get(i)) {
                        Some(e) => bulk_of(e),
                        None => b"$-1\r\n".to_vec(),
                    };
                    let i = i.to_string();
                    (raw_run(&mut v, &[b"LINDEX", b"k1", i.as_bytes()]), want)
                }
                7 => {
                    let i = rng.index(len);
                    let e = rng.elem();
                    let idx = if i < 0 { len as i64 + i } else { i };
                    let want = if l.is_empty() {
                        b"-ERR no such key\r\n".to_vec()
                    } else if let Some(slot) = usize::try_from(idx).ok().and_then(|i| l.get_mut(i))
                    {
                        *slot = e.clone();
                        b"+OK\r\n".to_vec()
                    } else {
                        b"-ERR index out of range\r\n".to_vec()
                    };
                    let i = i.to_string();
                    (raw_run(&mut v, &[b"LSET", b"k1", i.as_bytes(), &e]), want)
                }
                8 => {
                    let before = rng.below(2) == 0;
                    let pivot = match l.get(rng.below(len as u64 + 1) as usize) {
                        Some(p) if rng.below(4) > 0 => p.clone(),
                        _ => rng.elem(),
                    };
                    let e = rng.elem();
                    let want = if l.is_empty() {
                        int_of(0)
                    } else {
                        match l.iter().position(|x| *x == pivot) {
                            None => int_of(-1),
                            Some(p) => {
                                l.insert(if before { p } else { p + 1 }, e.clone());
                                int_of(l.len() as i64)
                            }
                        }
                    };
                    let place: &[u8] = if before { b"BEFORE" } else { b"AFTER" };
                    (
                        raw_run(&mut v, &[b"LINSERT", b"k1", place, &pivot, &e]),
                        want,
                    )
                }
                9 => {
                    let count = rng.below(7) as i64 - 3;
                    let e = format!("m{}", rng.below(4)).into_bytes();
                    let limit = if count == 0 {
                        usize::MAX
                    } else {
                        count.unsigned_abs() as usize
                    };
                    let mut idx: Vec<usize> = (0..l.len()).filter(|&i| l[i] == e).collect();
                    if count < 0 {
                        idx.reverse();
                    }
                    idx.truncate(limit);
                    idx.sort_unstable();
                    for &i in idx.iter().rev() {
                        l.remove(i);
                    }
                    let c = count.to_string();
                    (
                        raw_run(&mut v, &[b"LREM", b"k1", c.as_bytes(), &e]),
                        int_of(idx.len() as i64),
                    )
                }
                10 => {
                    // Trim a little from each end (a large cut now and then).
                    let cut = |rng: &mut Rng| {
                        (if rng.below(50) == 0 {
                            rng.below(len as u64 / 2 + 1)
                        } else {
                            rng.below(20)
                        }) as i64
                    };
                    let (a, b) = (cut(&mut rng), -1 - cut(&mut rng));
                    match model_range(len, a, b) {
                        None => l.clear(),
                        Some((s, e)) => {
                            l.truncate(e + 1);
                            l.drain(..s);
                        }
                    }
                    let (a, b) = (a.to_string(), b.to_string());
                    (
                        raw_run(&mut v, &[b"LTRIM", b"k1", a.as_bytes(), b.as_bytes()]),
                        b"+OK\r\n".to_vec(),
                    )
                }
                _ => {
                    let (from_left, to_left) = (rng.below(2) == 0, rng.below(2) == 0);
                    let dst2 = rng.below(2) == 0;
                    let want = match if from_left {
                        m[0].pop_front()
                    } else {
                        m[0].pop_back()
                    } {
                        None => b"$-1\r\n".to_vec(),
                        Some(e) => {
                            let d = &mut m[dst2 as usize];
                            if to_left {
                                d.push_front(e.clone());
                            } else {
                                d.push_back(e.clone());
                            }
                            bulk_of(&e)
                        }
                    };
                    let parts: [&[u8]; 5] =
                        [b"LMOVE", b"k1", name(dst2), side(from_left), side(to_left)];
                    (raw_run(&mut v, &parts), want)
                }
            };
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "step {step}"
            );
            if step % 50 == 0 {
                same_lists(&mut v, &m, &step);
            }
        }
        same_lists(&mut v, &m, &"the end");
        assert!(
            m[0].len() > 1000,
            "the run grew a long list: {}",
            m[0].len()
        );
    }
}

#[test]
fn a_quicklist_is_compact_and_counts_its_memory() {
    use crate::collection::{Collection, Typed};
    // Small values, pushed at the tail: about 5 bytes each (Redis: about 10).
    let mut l = Quicklist::default();
    for i in 0..300_000u32 {
        l.push(End::Right, format!("{:03}", i % 1000).as_bytes());
    }
    l.check();
    assert_eq!(l.len(), 300_000);
    let per_elem = l.memory() as f64 / 3e5;
    assert!(per_elem < 6.0, "{per_elem} bytes per element");
    // Pushed at the head, the same.
    let mut h = Quicklist::default();
    for i in 0..100_000u32 {
        h.push(End::Left, format!("{:03}", i % 1000).as_bytes());
    }
    h.check();
    assert!(h.memory() < 100_000 * 6, "{}", h.memory());
    // Decoded from its encoding: the same elements, chunks as full.
    let back = Quicklist::decode(&Bytes::from(l.encode())).unwrap();
    back.check();
    assert_eq!(back, l, "the same elements");
    assert_eq!(back.chunk_count(), l.chunk_count(), "as full chunks");
    assert!(back.memory() <= l.memory());
    assert!(back.chunk_count() < 300_000 / 500);
    // Popping it all gives the memory back; elements larger than a chunk get one each.
    while l.pop(End::Left).is_some() {}
    assert!(l.is_empty());
    assert_eq!(l.chunk_count(), 0);
    let big = vec![b'B'; 3 * quicklist::CHUNK_BYTES];
    for e in [&b"a"[..], &big, b"b", &big, &big] {
        l.push(End::Left, e);
    }
    l.check();
    assert_eq!(l.chunk_count(), 5);
    assert!(l.set(2, &big) && l.set(1, b"small") && l.insert(3, &big));
    l.check();
    assert_eq!(l.len(), 6);
    // Pushed at the head: big big b big a; then b replaced, the second big made small, and
    // a big inserted before the fourth.
    let want: Vec<&[u8]> = vec![&big, b"small", &big, &big, &big, b"a"];
    assert!(l.iter().eq(want.iter().copied()));
    assert!(l.iter().rev().eq(want.iter().rev().copied()));
    for (i, w) in want.iter().enumerate() {
        assert_eq!(l.get(i), Some(*w));
        assert!(l.range(i, 10).eq(want[i..].iter().copied()));
    }
    assert_eq!(l.get(6), None);
    assert!(!l.set(6, b"x") && !l.insert(7, b"x"));
    l.trim(1, 4);
    l.check();
    assert!(l.iter().eq(want[1..=4].iter().copied()));
}

#[test]
fn damaged_list_data_is_an_error_not_a_panic() {
    let good = encoding::encode([&b"abc"[..], b"", b"defgh"]).unwrap();
    let mut samples: Vec<Vec<u8>> = vec![
        vec![],
        vec![encoding::TAG],
        vec![encoding::TAG, 0, 0, 0, 0],
        vec![encoding::TAG, 1, 0, 0, 0],
        vec![encoding::TAG, 1, 0, 0, 0, 0xff, 0xff],
        vec![encoding::TAG, 255, 255, 255, 255, 1, 1],
        vec![encoding::TAG, 1, 0, 0, 0, 5, b'a', 5],
        vec![encoding::TAG, 1, 0, 0, 0, 1, b'a', 2],
        vec![
            encoding::TAG,
            1,
            0,
            0,
            0,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
            0x80,
        ],
        vec![2, 1, 0, 0, 0, 0, 0],
    ];
    // Every truncation, a wrong count each way, trailing bytes, and each byte flipped.
    for n in 0..good.len() {
        samples.push(good[..n].to_vec());
    }
    for count in [2u8, 4] {
        let mut s = good.clone();
        s[1] = count;
        samples.push(s);
    }
    let mut trailing = good.clone();
    trailing.extend_from_slice(&[0, 0]);
    samples.push(trailing);
    for i in 0..good.len() {
        for bit in [0x01, 0x80] {
            let mut s = good.clone();
            s[i] ^= bit;
            samples.push(s);
        }
    }
    let commands = [
        "LLEN l",
        "LRANGE l 0 -1",
        "LRANGE l -1 -1",
        "LINDEX l 0",
        "LINDEX l -1",
        "LINDEX l 1",
        "LPOP l",
        "RPOP l",
        "LPOP l 10",
        "RPOP l 2",
        "LPUSH l x",
        "RPUSH l x",
        "LSET l 1 x",
        "LINSERT l BEFORE defgh x",
        "LREM l 0 x",
        "LTRIM l 1 1",
        "LPOS l x COUNT 0",
        "LMOVE l d LEFT RIGHT",
        "LMOVE l l RIGHT LEFT",
        "LMPOP 1 l RIGHT COUNT 3",
        "BLPOP l 0",
        "BLMPOP 0 1 l LEFT COUNT 9",
    ];
    for s in &samples {
        for (cmd, mut v) in commands
            .iter()
            .flat_map(|&cmd| views().map(move |v| (cmd, v)))
        {
            v.map.insert(
                b"l".to_vec(),
                Entry {
                    data: Bytes::from(s.clone()),
                    expiry: None,
                    kind: Kind::List,
                },
            );
            let r = line(&mut v, cmd);
            // Whatever it answers, it does not panic; an error is the corruption error (or
            // LSET's range, checked against the header); damaged bytes are never answered
            // from nor written over (a write decodes the whole list; LLEN reads the header's
            // count alone, LINDEX and LRANGE check the elements they walk to); and from a
            // well-formed list it stores well-formed lists.
            if r.starts_with('-') {
                assert!(
                    r.starts_with("-ERR stored value") || r == "-ERR index out of range\r\n",
                    "{cmd} on {s:?}: {r}"
                );
            }
            let ok = encoding::decode(s).is_ok();
            let walks = ["LLEN", "LINDEX", "LRANGE"]
                .iter()
                .any(|c| cmd.starts_with(c));
            assert!(ok || r.starts_with('-') || walks, "{cmd} on {s:?}: {r}");
            if ok {
                for k in [&b"l"[..], b"d"] {
                    if let Some(e) = v.load(k).unwrap() {
                        assert!(
                            encoding::decode(&e.data).is_ok(),
                            "{cmd} on {s:?} stored {k:?}"
                        );
                    }
                }
            }
        }
        if encoding::decode(s).is_err() {
            // A full walk finds every damage.
            let mut v = view();
            v.map.insert(
                b"l".to_vec(),
                Entry {
                    data: Bytes::from(s.clone()),
                    expiry: None,
                    kind: Kind::List,
                },
            );
            assert!(
                line(&mut v, "LRANGE l 0 -1").starts_with("-ERR stored value"),
                "{s:?}"
            );
            assert!(
                line(&mut v, "LREM l 0 zz").starts_with("-ERR stored value"),
                "{s:?}"
            );
        }
    }
}

#[test]
fn encoding_round_trips_and_reads_from_both_ends() {
    for n in [0usize, 1, 127, 128, 129, 16_383, 16_384, 70_000] {
        assert_eq!(encoding::varint_len(n), {
            let mut out = Vec::new();
            encoding::put_elem(&mut out, &vec![7; n]);
            (out.len() - n) / 2
        });
    }
    let big = vec![b'q'; 16_384];
    let elems: Vec<&[u8]> = vec![b"a", b"", &big, b"hello", &big[..127], &big[..128]];
    let data = encoding::encode(elems.iter().copied()).unwrap();
    assert_eq!(encoding::decode(&data).unwrap(), elems);
    let raw = Raw::parse(&data).unwrap();
    let back: Vec<&[u8]> = raw
        .elems()
        .rev()
        .map(|e| {
            let e = e.unwrap();
            &raw.body()[e.start..e.end]
        })
        .collect();
    let mut want = elems.clone();
    want.reverse();
    assert_eq!(back, want);
    assert!(encoding::encode(std::iter::empty::<&[u8]>()).is_none());
}

// ----- the model test --------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Push(bool, bool, Vec<u8>, Vec<u8>),
    /// Enough elements at once to fill chunks.
    PushMany(bool, bool, Vec<Vec<u8>>),
    Pop(bool, Option<u8>),
    Range(i64, i64),
    Index(i64),
    Set(i64, Vec<u8>),
    Insert(bool, Vec<u8>, Vec<u8>),
    Rem(i8, Vec<u8>),
    Trim(i64, i64),
    Pos(Vec<u8>, i8, Option<u8>, u8),
    Move(bool, bool, bool, bool),
    Mpop(bool, bool, u8),
    Len(bool),
}

fn elem() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![b"a".to_vec(), b"b".to_vec(), b"".to_vec(), b"ccc".to_vec()]),
        1 => prop::collection::vec(any::<u8>(), 0..200),
    ]
}

/// Elements of a bulk push: mostly distinct, some the small ones `elem` draws.
fn many() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            1 => elem(),
            3 => (any::<u16>(), 0usize..40).prop_map(|(n, pad)| {
                let mut e = n.to_string().into_bytes();
                e.resize(e.len() + pad, b'.');
                e
            }),
        ],
        50..400,
    )
}

/// An index: near either end, or anywhere in a list of a few chunks.
fn index() -> impl Strategy<Value = i64> {
    prop_oneof![any::<i8>().prop_map(i64::from), -1500i64..1500]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), any::<bool>(), elem(), elem()).prop_map(|(l, x, a, b)| Op::Push(l, x, a, b)),
        1 => (any::<bool>(), any::<bool>(), many()).prop_map(|(l, x, e)| Op::PushMany(l, x, e)),
        2 => (any::<bool>(), prop::option::of(0u8..6)).prop_map(|(l, c)| Op::Pop(l, c)),
        2 => (index(), index()).prop_map(|(a, b)| Op::Range(a, b)),
        1 => index().prop_map(Op::Index),
        1 => (index(), elem()).prop_map(|(i, e)| Op::Set(i, e)),
        1 => (any::<bool>(), elem(), elem()).prop_map(|(b, p, e)| Op::Insert(b, p, e)),
        1 => (-3i8..4, elem()).prop_map(|(c, e)| Op::Rem(c, e)),
        1 => (index(), index()).prop_map(|(a, b)| Op::Trim(a, b)),
        1 => (elem(), prop_oneof![-3i8..0, 1i8..4], prop::option::of(0u8..4), 0u8..6)
            .prop_map(|(e, r, c, m)| Op::Pos(e, r, c, m)),
        1 => (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(a, b, c, d)| Op::Move(a, b, c, d)),
        1 => (any::<bool>(), any::<bool>(), 1u8..5).prop_map(|(a, b, c)| Op::Mpop(a, b, c)),
        1 => any::<bool>().prop_map(Op::Len),
    ]
}

fn name(second: bool) -> &'static [u8] {
    if second { b"k2" } else { b"k1" }
}

fn side(left: bool) -> &'static [u8] {
    if left { b"LEFT" } else { b"RIGHT" }
}

fn model_range(len: usize, a: i64, b: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let a = if a < 0 { (len + a).max(0) } else { a };
    let b = if b < 0 { len + b } else { b };
    if a > b || a >= len {
        None
    } else {
        Some((a as usize, b.min(len - 1) as usize))
    }
}

fn arr_of<'a>(items: impl IntoIterator<Item = &'a Vec<u8>>) -> Vec<u8> {
    let items: Vec<&Vec<u8>> = items.into_iter().collect();
    let mut s = format!("*{}\r\n", items.len()).into_bytes();
    for e in items {
        s.extend_from_slice(format!("${}\r\n", e.len()).as_bytes());
        s.extend_from_slice(e);
        s.extend_from_slice(b"\r\n");
    }
    s
}

fn bulk_of(e: &[u8]) -> Vec<u8> {
    let mut s = format!("${}\r\n", e.len()).into_bytes();
    s.extend_from_slice(e);
    s.extend_from_slice(b"\r\n");
    s
}

fn int_of(i: i64) -> Vec<u8> {
    format!(":{i}\r\n").into_bytes()
}

fn raw_run(v: &mut MapView, parts: &[&[u8]]) -> Vec<u8> {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let cmd = Cmd::lookup(parts[0]).unwrap();
    let mut reply = Reply::new(64);
    if let Err(e) = exec_on_view(cmd, owned.get(), v, &mut reply) {
        reply.command_error(e);
    }
    reply.out.to_vec()
}

/// Applies `op` to the model and to the view; the replies must agree.
fn check(v: &mut MapView, m: &mut [VecDeque<Vec<u8>>; 2], op: &Op) {
    let (got, want): (Vec<u8>, Vec<u8>) = match op {
        Op::Push(left, second, a, b) => {
            let l = &mut m[*second as usize];
            let cmd: &[u8] = if *left { b"LPUSH" } else { b"RPUSH" };
            for e in [a, b] {
                if *left {
                    l.push_front(e.clone());
                } else {
                    l.push_back(e.clone());
                }
            }
            (
                raw_run(v, &[cmd, name(*second), a, b]),
                int_of(l.len() as i64),
            )
        }
        Op::PushMany(left, second, elems) => {
            let l = &mut m[*second as usize];
            let cmd: &[u8] = if *left { b"LPUSH" } else { b"RPUSH" };
            for e in elems {
                if *left {
                    l.push_front(e.clone());
                } else {
                    l.push_back(e.clone());
                }
            }
            let mut parts: Vec<&[u8]> = vec![cmd, name(*second)];
            parts.extend(elems.iter().map(Vec::as_slice));
            (raw_run(v, &parts), int_of(l.len() as i64))
        }
        Op::Pop(left, count) => {
            let l = &mut m[0];
            let cmd: &[u8] = if *left { b"LPOP" } else { b"RPOP" };
            let mut parts = vec![cmd, b"k1"];
            let c = count.map(|c| c.to_string());
            if let Some(c) = &c {
                parts.push(c.as_bytes());
            }
            let want = if l.is_empty() {
                if count.is_some() {
                    b"*-1\r\n".to_vec()
                } else {
                    b"$-1\r\n".to_vec()
                }
            } else {
                let n = count.map_or(1, usize::from).min(l.len());
                let popped: Vec<Vec<u8>> = (0..n)
                    .map(|_| if *left { l.pop_front() } else { l.pop_back() }.unwrap())
                    .collect();
                match count {
                    None => bulk_of(&popped[0]),
                    Some(_) => arr_of(&popped),
                }
            };
            (raw_run(v, &parts), want)
        }
        Op::Range(a, b) => {
            let l = &m[0];
            let want = match model_range(l.len(), *a, *b) {
                None => arr_of([]),
                Some((s, e)) => arr_of(l.range(s..=e)),
            };
            let (a, b) = (a.to_string(), b.to_string());
            (
                raw_run(v, &[b"LRANGE", b"k1", a.as_bytes(), b.as_bytes()]),
                want,
            )
        }
        Op::Index(i) => {
            let l = &m[0];
            let len = l.len() as i64;
            let i64_ = *i;
            let idx = if i64_ < 0 { len + i64_ } else { i64_ };
            let want = match (0..len).contains(&idx) {
                true => bulk_of(&l[idx as usize]),
                false => b"$-1\r\n".to_vec(),
            };
            let i = i.to_string();
            (raw_run(v, &[b"LINDEX", b"k1", i.as_bytes()]), want)
        }
        Op::Set(i, e) => {
            let l = &mut m[0];
            let len = l.len() as i64;
            let i64_ = *i;
            let idx = if i64_ < 0 { len + i64_ } else { i64_ };
            let want = if l.is_empty() {
                b"-ERR no such key\r\n".to_vec()
            } else if (0..len).contains(&idx) {
                l[idx as usize] = e.clone();
                b"+OK\r\n".to_vec()
            } else {
                b"-ERR index out of range\r\n".to_vec()
            };
            let i = i.to_string();
            (raw_run(v, &[b"LSET", b"k1", i.as_bytes(), e]), want)
        }
        Op::Insert(before, pivot, e) => {
            let l = &mut m[0];
            let want = if l.is_empty() {
                int_of(0)
            } else {
                match l.iter().position(|x| x == pivot) {
                    None => int_of(-1),
                    Some(p) => {
                        l.insert(if *before { p } else { p + 1 }, e.clone());
                        int_of(l.len() as i64)
                    }
                }
            };
            let place: &[u8] = if *before { b"BEFORE" } else { b"AFTER" };
            (raw_run(v, &[b"LINSERT", b"k1", place, pivot, e]), want)
        }
        Op::Rem(count, e) => {
            let l = &mut m[0];
            let limit = if *count == 0 {
                usize::MAX
            } else {
                count.unsigned_abs() as usize
            };
            let mut idx: Vec<usize> = (0..l.len()).filter(|&i| &l[i] == e).collect();
            if *count < 0 {
                idx.reverse();
            }
            idx.truncate(limit);
            idx.sort_unstable();
            for &i in idx.iter().rev() {
                l.remove(i);
            }
            let c = count.to_string();
            (
                raw_run(v, &[b"LREM", b"k1", c.as_bytes(), e]),
                int_of(idx.len() as i64),
            )
        }
        Op::Trim(a, b) => {
            let l = &mut m[0];
            match model_range(l.len(), *a, *b) {
                None => l.clear(),
                Some((s, e)) => {
                    l.truncate(e + 1);
                    l.drain(..s);
                }
            }
            let (a, b) = (a.to_string(), b.to_string());
            (
                raw_run(v, &[b"LTRIM", b"k1", a.as_bytes(), b.as_bytes()]),
                b"+OK\r\n".to_vec(),
            )
        }
        Op::Pos(e, rank, count, maxlen) => {
            let l = &m[0];
            let n = l.len();
            let scan: Vec<usize> = if *rank > 0 {
                (0..n).collect()
            } else {
                (0..n).rev().collect()
            };
            let limit = if *maxlen == 0 {
                n
            } else {
                usize::from(*maxlen).min(n)
            };
            let hits: Vec<usize> = scan[..limit]
                .iter()
                .copied()
                .filter(|&i| &l[i] == e)
                .skip(rank.unsigned_abs() as usize - 1)
                .collect();
            let want = match count {
                None => match hits.first() {
                    Some(&i) => int_of(i as i64),
                    None => b"$-1\r\n".to_vec(),
                },
                Some(c) => {
                    let take = if *c == 0 {
                        hits.len()
                    } else {
                        usize::from(*c).min(hits.len())
                    };
                    let mut s = format!("*{take}\r\n").into_bytes();
                    for &i in &hits[..take] {
                        s.extend(int_of(i as i64));
                    }
                    s
                }
            };
            let (r, ml) = (rank.to_string(), maxlen.to_string());
            let c = count.map(|c| c.to_string());
            let mut parts: Vec<&[u8]> = vec![
                b"LPOS",
                b"k1",
                e,
                b"RANK",
                r.as_bytes(),
                b"MAXLEN",
                ml.as_bytes(),
            ];
            if let Some(c) = &c {
                parts.extend([&b"COUNT"[..], c.as_bytes()]);
            }
            (raw_run(v, &parts), want)
        }
        Op::Move(src2, dst2, from_left, to_left) => {
            let (s, d) = (*src2 as usize, *dst2 as usize);
            let want = match if *from_left {
                m[s].pop_front()
            } else {
                m[s].pop_back()
            } {
                None => b"$-1\r\n".to_vec(),
                Some(e) => {
                    if *to_left {
                        m[d].push_front(e.clone());
                    } else {
                        m[d].push_back(e.clone());
                    }
                    bulk_of(&e)
                }
            };
            let parts: [&[u8]; 5] = [
                b"LMOVE",
                name(*src2),
                name(*dst2),
                side(*from_left),
                side(*to_left),
            ];
            (raw_run(v, &parts), want)
        }
        Op::Mpop(left, first2, count) => {
            let order = if *first2 { [1, 0] } else { [0, 1] };
            let want = match order.into_iter().find(|&i| !m[i].is_empty()) {
                None => b"*-1\r\n".to_vec(),
                Some(i) => {
                    let l = &mut m[i];
                    let n = usize::from(*count).min(l.len());
                    let popped: Vec<Vec<u8>> = (0..n)
                        .map(|_| if *left { l.pop_front() } else { l.pop_back() }.unwrap())
                        .collect();
                    let mut s = b"*2\r\n".to_vec();
                    s.extend(bulk_of(name(i == 1)));
                    s.extend(arr_of(&popped));
                    s
                }
            };
            let c = count.to_string();
            let parts: [&[u8]; 7] = [
                b"LMPOP",
                b"2",
                name(order[0] == 1),
                name(order[1] == 1),
                side(*left),
                b"COUNT",
                c.as_bytes(),
            ];
            (raw_run(v, &parts), want)
        }
        Op::Len(second) => (
            raw_run(v, &[b"LLEN", name(*second)]),
            int_of(m[*second as usize].len() as i64),
        ),
    };
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "{op:?}"
    );
    same_lists(v, m, op);
}

/// The stored values are exactly the model's lists (an empty one does not exist), and a
/// list kept as an object keeps its invariants.
fn same_lists(v: &mut MapView, m: &[VecDeque<Vec<u8>>; 2], op: &dyn std::fmt::Debug) {
    for (i, l) in m.iter().enumerate() {
        let key = name(i == 1);
        if let Some((obj, _)) = v.object_mut(key).unwrap() {
            let q = obj.as_any().downcast_ref::<Quicklist>().expect("a list");
            q.check();
            assert!(q.iter().eq(l.iter().map(Vec::as_slice)), "{op:?}");
        }
        match v.load(key).unwrap() {
            None => assert!(l.is_empty(), "{op:?}: key {i} missing"),
            Some(e) => {
                let got = encoding::decode(&e.data).unwrap();
                assert!(
                    got.iter().copied().eq(l.iter().map(Vec::as_slice)),
                    "{op:?}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn commands_match_a_vecdeque_model(ops in prop::collection::vec(op(), 1..60)) {
        // Both views against one model each: the same replies, the same lists.
        for mut v in views() {
            let mut m = [VecDeque::new(), VecDeque::new()];
            for op in &ops {
                check(&mut v, &mut m, op);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..64), tag in any::<bool>()) {
        let mut data = data;
        if tag && !data.is_empty() {
            data[0] = encoding::TAG;
        }
        for cmd in ["LRANGE l 0 -1", "RPOP l 3", "LINDEX l -2", "LPUSH l x", "LREM l -1 a"] {
            let mut v = view();
            v.map.insert(b"l".to_vec(), Entry { data: Bytes::from(data.clone()), expiry: None, kind: Kind::List });
            let r = line(&mut v, cmd);
            prop_assert!(!r.starts_with('-') || r.starts_with("-ERR stored value"), "{}", r);
        }
    }
}
