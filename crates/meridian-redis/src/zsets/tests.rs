//! The sorted-set commands over a plain in-memory view: replies and errors compared with
//! Redis 7.0.15's (`t_zset.c`, `tests/unit/type/zset.tcl`), a model test against a
//! `BTreeMap`, and the decoders on damaged bytes.

use super::*;
use crate::OwnedArgs;
use crate::test_view::TestView;
use crate::view::EntryRef;
use bytes::Bytes;
use std::collections::BTreeMap;

/// A view over a map that keeps bytes, as a cluster's one-key view or a MULTI overlay does.
fn view() -> TestView {
    TestView::new()
}

/// Both kinds of view: bytes, and objects kept in memory as the standalone keyspace keeps
/// them. Every behaviour test runs on each and must answer the same.
fn views() -> [TestView; 2] {
    [TestView::new(), TestView::holding()]
}

/// Whether `key` exists (as bytes or as a held object).
fn has(v: &mut TestView, key: &str) -> bool {
    v.load(key.as_bytes()).unwrap().is_some()
}

/// How many keys exist.
fn key_count(v: &TestView) -> usize {
    v.map.len() + v.held_count()
}

/// `key`'s expiry.
fn expiry_of(v: &mut TestView, key: &str) -> Option<u64> {
    v.load(key.as_bytes()).unwrap().unwrap().expiry
}

/// Sets `key`'s expiry (storing its bytes: a held object is read back from them next time).
fn set_expiry(v: &mut TestView, key: &str, at: Option<u64>) {
    let e = v.load(key.as_bytes()).unwrap().unwrap();
    v.store(
        key.as_bytes(),
        Some(EntryRef {
            data: &e.data,
            expiry: at,
            kind: e.kind,
        }),
    )
    .unwrap();
}

/// Runs one command given as its parts; returns the reply's bytes.
fn run_parts(v: &mut TestView, parts: &[&[u8]], resp3: bool) -> String {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    reply.resp3 = resp3;
    if let Err(e) = exec_on_view(cmd, args, v, &mut reply) {
        reply.command_error(e);
    }
    String::from_utf8_lossy(&reply.out).into_owned()
}

fn r2(v: &mut TestView, line: &str) -> String {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, false)
}

fn r3(v: &mut TestView, line: &str) -> String {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    run_parts(v, &parts, true)
}

/// A RESP2 array of bulk strings.
fn bulks(items: &[&str]) -> String {
    let mut s = format!("*{}\r\n", items.len());
    for i in items {
        s.push_str(&format!("${}\r\n{}\r\n", i.len(), i));
    }
    s
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

fn err(msg: &str) -> String {
    format!("-ERR {msg}\r\n")
}

fn put_string(v: &mut TestView, key: &str) {
    v.store(key.as_bytes(), Some(EntryRef::string(b"bar", None)))
        .unwrap();
}

fn put_set(v: &mut TestView, key: &str, members: &[&str]) {
    let ms: Vec<&[u8]> = members.iter().map(|m| m.as_bytes()).collect();
    let data = crate::sets::encode(&ms);
    v.store(
        key.as_bytes(),
        Some(EntryRef {
            data: &data,
            expiry: None,
            kind: Kind::Set,
        }),
    )
    .unwrap();
}

#[test]
fn zadd_and_zrange_basics() {
    for mut v in views() {
        assert_eq!(r2(&mut v, "ZADD z 10 x 20 y 30 z"), int(3));
        assert_eq!(r2(&mut v, "ZRANGE z 0 -1"), bulks(&["x", "y", "z"]));
        assert_eq!(r2(&mut v, "ZADD z 1 y"), int(0));
        assert_eq!(r2(&mut v, "ZRANGE z 0 -1"), bulks(&["y", "x", "z"]));
        assert_eq!(
            r2(&mut v, "ZRANGE z 0 -1 WITHSCORES"),
            bulks(&["y", "1", "x", "10", "z", "30"])
        );
        assert_eq!(
            r3(&mut v, "ZRANGE z 0 1 WITHSCORES"),
            "*2\r\n*2\r\n$1\r\ny\r\n,1\r\n*2\r\n$1\r\nx\r\n,10\r\n",
            "RESP3: [member, double] pairs"
        );
        // Equal scores order by member bytes.
        assert_eq!(r2(&mut v, "ZADD e 1 b 1 a 1 c 0 d"), int(4));
        assert_eq!(r2(&mut v, "ZRANGE e 0 -1"), bulks(&["d", "a", "b", "c"]));
    }
}

#[test]
fn zadd_options_as_the_suite_asserts() {
    for mut v in views() {
        assert_eq!(r2(&mut v, "ZADD ztmp xx 10 x 20"), err("syntax error"));
        assert_eq!(r2(&mut v, "ZADD ztmp xx 10 x"), int(0));
        assert!(key_count(&v) == 0, "XX on a missing key creates nothing");
        assert_eq!(r2(&mut v, "ZADD ztmp 10 x"), int(1));
        assert_eq!(r2(&mut v, "ZADD ztmp xx 20 y"), int(0));
        assert_eq!(r2(&mut v, "ZCARD ztmp"), int(1));
        assert_eq!(r2(&mut v, "ZADD ztmp 10 x 20 y 30 z"), int(2));
        assert_eq!(r2(&mut v, "ZADD ztmp gt ch 5 foo 11 x 21 y 29 z"), int(3));
        assert_eq!(r2(&mut v, "ZSCORE ztmp z"), "$2\r\n30\r\n");
        assert_eq!(r2(&mut v, "ZADD ztmp lt ch 5 foo2 12 x 20 y 29 z"), int(3));
        assert_eq!(r2(&mut v, "ZSCORE ztmp x"), "$2\r\n11\r\n");
        assert_eq!(r2(&mut v, "ZADD ztmp gt xx ch 5 new 100 x"), int(1));
        assert_eq!(r2(&mut v, "ZSCORE ztmp new"), "$-1\r\n");
        assert_eq!(
            r2(&mut v, "ZADD ztmp xx nx 10 x"),
            err("XX and NX options at the same time are not compatible")
        );
        for o in ["gt nx", "lt nx", "lt gt"] {
            assert_eq!(
                r2(&mut v, &format!("ZADD ztmp {o} 10 x")),
                err("GT, LT, and/or NX options at the same time are not compatible")
            );
        }
        assert_eq!(
            r2(&mut v, "ZADD ztmp INCR 15 x 10 y"),
            err("INCR option supports a single increment-element pair")
        );
        // NX adds only new members.
        assert_eq!(r2(&mut v, "ZADD ztmp nx 1 x 1 brand"), int(1));
        assert_eq!(r2(&mut v, "ZSCORE ztmp x"), "$3\r\n100\r\n");
        // CH counts changed members; unchanged scores do not count.
        assert_eq!(r2(&mut v, "ZADD c 10 x 20 y 30 z"), int(3));
        assert_eq!(r2(&mut v, "ZADD c 11 x 21 y 30 z"), int(0));
        assert_eq!(r2(&mut v, "ZADD c ch 12 x 22 y 30 z"), int(2));
        // INCR.
        assert_eq!(r2(&mut v, "ZADD c INCR 15 x"), "$2\r\n27\r\n");
        assert_eq!(r3(&mut v, "ZADD c INCR 0.5 x"), ",27.5\r\n");
        assert_eq!(r2(&mut v, "ZADD c XX INCR 1 nope"), "$-1\r\n");
        assert_eq!(r2(&mut v, "ZADD missing XX INCR 1 nope"), "$-1\r\n");
        assert_eq!(r2(&mut v, "ZADD c NX INCR 1 x"), "$-1\r\n");
        // INCR with LT/GT replies nil when the score is not updated, inf included.
        assert_eq!(r2(&mut v, "ZADD t 28 x +inf i -inf n"), int(3));
        assert_eq!(r2(&mut v, "ZADD t lt incr 1 x"), "$-1\r\n");
        assert_eq!(r2(&mut v, "ZADD t gt incr -1 x"), "$-1\r\n");
        assert_eq!(r2(&mut v, "ZSCORE t x"), "$2\r\n28\r\n");
        for cmd in [
            "lt incr 1 i",
            "gt incr -1 i",
            "lt incr -1 i",
            "gt incr 1 i",
            "lt incr 1 n",
            "gt incr -1 n",
            "lt incr -1 n",
            "gt incr 1 n",
        ] {
            assert_eq!(r2(&mut v, &format!("ZADD t {cmd}")), "$-1\r\n", "{cmd}");
        }
        assert_eq!(r2(&mut v, "ZSCORE t i"), "$3\r\ninf\r\n");
        assert_eq!(r2(&mut v, "ZSCORE t n"), "$4\r\n-inf\r\n");
        // Scores: not floats, NaN, empty; a variadic ZADD is all or nothing.
        assert_eq!(
            r2(&mut v, "ZADD f nan abc"),
            err("value is not a valid float")
        );
        assert_eq!(
            run_parts(&mut v, &[b"ZADD", b"f", b"", b"abc"], false),
            err("value is not a valid float")
        );
        assert_eq!(
            r2(&mut v, "ZADD f 10 a 20 b 30.badscore c"),
            err("value is not a valid float")
        );
        assert!(!has(&mut v, "f"));
        assert_eq!(r2(&mut v, "ZADD f 10 a 20 b 30 c 40"), err("syntax error"));
        assert_eq!(
            r2(&mut v, "ZADD f 10"),
            err("wrong number of arguments for 'zadd' command")
        );
    }
}

#[test]
fn zincrby_as_redis() {
    for mut v in views() {
        assert_eq!(r2(&mut v, "ZINCRBY z 10 a"), "$2\r\n10\r\n");
        assert_eq!(r2(&mut v, "ZINCRBY z -2.5 a"), "$3\r\n7.5\r\n");
        assert_eq!(
            r2(&mut v, "ZINCRBY z 0.1 b"),
            "$19\r\n0.10000000000000001\r\n"
        );
        assert_eq!(r2(&mut v, "ZINCRBY z +inf abc"), "$3\r\ninf\r\n");
        assert_eq!(
            r2(&mut v, "ZINCRBY z -inf abc"),
            err("resulting score is not a number (NaN)")
        );
        assert_eq!(r2(&mut v, "ZSCORE z abc"), "$3\r\ninf\r\n");
        assert_eq!(
            r2(&mut v, "ZINCRBY z 10 a 20 b 30 c"),
            err("wrong number of arguments for 'zincrby' command")
        );
        assert_eq!(
            r2(&mut v, "ZINCRBY z x a"),
            err("value is not a valid float")
        );
        // Redis parses ZINCRBY's arguments as ZADD's: an option word is an option.
        assert_eq!(r2(&mut v, "ZINCRBY z nx a"), err("syntax error"));
        put_string(&mut v, "s");
        assert_eq!(r2(&mut v, "ZINCRBY s 1 a"), WRONGTYPE);
    }
}

#[test]
fn reads_on_missing_and_wrong_keys() {
    for mut v in views() {
        put_string(&mut v, "s");
        for cmd in [
            "ZADD s 1 a",
            "ZREM s a",
            "ZCARD s",
            "ZSCORE s a",
            "ZMSCORE s a",
            "ZRANK s a",
            "ZREVRANK s a",
            "ZRANGE s 0 -1",
            "ZRANGEBYSCORE s -inf +inf",
            "ZRANGEBYLEX s - +",
            "ZCOUNT s -inf +inf",
            "ZLEXCOUNT s - +",
            "ZREMRANGEBYRANK s 0 -1",
            "ZREMRANGEBYSCORE s -inf +inf",
            "ZREMRANGEBYLEX s - +",
            "ZPOPMIN s",
            "ZPOPMIN s 0",
            "ZPOPMAX s 2",
            "ZRANDMEMBER s",
            "ZRANDMEMBER s 2",
            "ZSCAN s 0",
            "ZUNION 1 s",
            "ZRANGESTORE d s 0 -1",
            "ZMPOP 1 s MIN",
            "BZPOPMIN s 1",
            "BZPOPMAX s 1",
            "BZMPOP 1 1 s MIN COUNT 10",
        ] {
            assert_eq!(r2(&mut v, cmd), WRONGTYPE, "{cmd}");
        }
        assert_eq!(r2(&mut v, "ZCARD nope"), int(0));
        assert_eq!(r2(&mut v, "ZSCORE nope a"), "$-1\r\n");
        assert_eq!(r3(&mut v, "ZSCORE nope a"), "_\r\n");
        assert_eq!(r2(&mut v, "ZMSCORE nope a b"), "*2\r\n$-1\r\n$-1\r\n");
        assert_eq!(r2(&mut v, "ZRANK nope a"), "$-1\r\n");
        assert_eq!(r3(&mut v, "ZRANGE nope 0 -1"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZREM nope a"), int(0));
        assert_eq!(r2(&mut v, "ZCOUNT nope 0 1"), int(0));
        assert_eq!(
            r2(&mut v, "ZMSCORE nope"),
            err("wrong number of arguments for 'zmscore' command")
        );
    }
}

#[test]
fn score_lookups_ranks_and_removal() {
    for mut v in views() {
        r2(&mut v, "ZADD z 1 a 2 b 3 c 0.1 d -0 e");
        assert_eq!(r2(&mut v, "ZSCORE z d"), "$19\r\n0.10000000000000001\r\n");
        assert_eq!(r3(&mut v, "ZSCORE z e"), ",-0\r\n");
        assert_eq!(r3(&mut v, "ZMSCORE z a x c"), "*3\r\n,1\r\n_\r\n,3\r\n");
        assert_eq!(r2(&mut v, "ZRANK z e"), int(0));
        assert_eq!(r2(&mut v, "ZRANK z c"), int(4));
        assert_eq!(r2(&mut v, "ZREVRANK z c"), int(0));
        assert_eq!(r2(&mut v, "ZREVRANK z e"), int(4));
        assert_eq!(r2(&mut v, "ZRANK z x"), "$-1\r\n");
        // An equal score leaves the entry as stored (Redis compares with `!=`): -0 stays -0,
        // while the reply is the computed score.
        assert_eq!(r2(&mut v, "ZINCRBY z 0 e"), "$1\r\n0\r\n");
        assert_eq!(r2(&mut v, "ZSCORE z e"), "$2\r\n-0\r\n");
        assert_eq!(r2(&mut v, "ZADD z CH 0 e"), int(0));
        assert_eq!(r2(&mut v, "ZREM z a a x"), int(1));
        assert_eq!(r2(&mut v, "ZCARD z"), int(4));
        assert_eq!(r2(&mut v, "ZREM z b c d e"), int(4));
        assert!(key_count(&v) == 0, "an empty sorted set does not exist");
    }
}

#[test]
fn writes_keep_the_ttl_and_refuse_oversized_values() {
    for mut v in views() {
        r2(&mut v, "ZADD z 1 a");
        set_expiry(&mut v, "z", Some(99_000_000));
        r2(&mut v, "ZADD z 2 b");
        r2(&mut v, "ZINCRBY z 2 b");
        r2(&mut v, "ZREM z a");
        assert_eq!(expiry_of(&mut v, "z"), Some(99_000_000));
        r2(&mut v, "ZUNIONSTORE z 1 z");
        assert_eq!(expiry_of(&mut v, "z"), None, "a STORE replaces the key");
        let mut v = view();
        v.max = 40;
        assert_eq!(r2(&mut v, "ZADD z 1 aaaaaaaaaa 2 bbbbbbbbbb"), int(2));
        assert_eq!(
            r2(&mut v, "ZADD z 3 cccccccccc"),
            err("zset exceeds maximum allowed size (proto-max-bulk-len)")
        );
        assert_eq!(r2(&mut v, "ZCARD z"), int(2), "nothing changed");
    }
}

#[test]
fn rank_ranges() {
    for mut v in views() {
        r2(&mut v, "ZADD z 1 a 2 b 3 c 4 d");
        assert_eq!(r2(&mut v, "ZRANGE z 0 -1"), bulks(&["a", "b", "c", "d"]));
        assert_eq!(r2(&mut v, "ZRANGE z 0 -2"), bulks(&["a", "b", "c"]));
        assert_eq!(r2(&mut v, "ZRANGE z 1 -1"), bulks(&["b", "c", "d"]));
        assert_eq!(r2(&mut v, "ZRANGE z -1 -1"), bulks(&["d"]));
        assert_eq!(r2(&mut v, "ZRANGE z -2 -1"), bulks(&["c", "d"]));
        assert_eq!(r2(&mut v, "ZRANGE z 5 -1"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGE z 0 -5"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGE z -5 1"), bulks(&["a", "b"]));
        assert_eq!(r2(&mut v, "ZRANGE z 0 5"), bulks(&["a", "b", "c", "d"]));
        assert_eq!(
            r2(&mut v, "ZRANGE z -9223372036854775808 9223372036854775807"),
            bulks(&["a", "b", "c", "d"])
        );
        assert_eq!(r2(&mut v, "ZREVRANGE z 0 -1"), bulks(&["d", "c", "b", "a"]));
        assert_eq!(r2(&mut v, "ZREVRANGE z 1 2"), bulks(&["c", "b"]));
        assert_eq!(
            r2(&mut v, "ZRANGE z 0 -1 REV"),
            bulks(&["d", "c", "b", "a"])
        );
        assert_eq!(r2(&mut v, "ZREVRANGE z 0 0 WITHSCORES"), bulks(&["d", "4"]));
        assert_eq!(
            r2(&mut v, "ZRANGE z a 1"),
            err("value is not an integer or out of range")
        );
        // LIMIT -1 is "no limit", so it is accepted with a rank range, as in Redis.
        assert_eq!(r2(&mut v, "ZRANGE z 0 0 LIMIT 0 -1"), bulks(&["a"]));
    }
}

#[test]
fn zrange_option_errors() {
    for mut v in views() {
        r2(&mut v, "ZADD z1 1 a 2 b 3 c");
        let limit_err = err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
        assert_eq!(r2(&mut v, "ZRANGE z1 0 -1 limit 1 2"), limit_err);
        assert_eq!(
            r2(&mut v, "ZRANGE z1 0 -1 BYLEX WITHSCORES"),
            err("syntax error, WITHSCORES not supported in combination with BYLEX")
        );
        assert_eq!(r2(&mut v, "ZREVRANGE z1 0 -1 BYSCORE"), err("syntax error"));
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z1 0 -1 REV"), err("syntax error"));
        assert_eq!(
            r2(&mut v, "ZRANGE z1 0 -1 BYSCORE BYLEX"),
            err("syntax error")
        );
        assert_eq!(r2(&mut v, "ZRANGE z1 0 -1 LIMIT 1"), err("syntax error"));
        assert_eq!(
            r2(&mut v, "ZRANGE z1 0 -1 BYSCORE LIMIT x 1"),
            err("value is not an integer or out of range")
        );
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 z1 0 -1 limit 1 2"), limit_err);
        assert_eq!(
            r2(&mut v, "ZRANGESTORE z2 z1 0 -1 WITHSCORES"),
            err("syntax error")
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE fooz str 1"),
            err("min or max is not a float")
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE fooz 1 str"),
            err("min or max is not a float")
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE fooz 1 NaN"),
            err("min or max is not a float")
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE fooz (1 (x"),
            err("min or max is not a float")
        );
        let lex_err = err("min or max not valid string range item");
        for bad in ["foo bar", "[foo bar", "foo [bar", "+x [bar", "-x [bar"] {
            assert_eq!(
                r2(&mut v, &format!("ZRANGEBYLEX fooz {bad}")),
                lex_err,
                "{bad}"
            );
        }
        assert_eq!(
            run_parts(&mut v, &[b"ZLEXCOUNT", b"z1", b"", b"+"], false),
            lex_err
        );
    }
}

#[test]
fn score_ranges() {
    for mut v in views() {
        r2(&mut v, "ZADD z -inf a 1 b 2 c 3 d 4 e 5 f +inf g");
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 2 4"), bulks(&["c", "d", "e"]));
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z (2 (4"), bulks(&["d"]));
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z -inf 1"), bulks(&["a", "b"]));
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z (-inf (1"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 5 +inf"), bulks(&["f", "g"]));
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 4 2"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z (2 2"), "*0\r\n");
        assert_eq!(
            r2(&mut v, "ZREVRANGEBYSCORE z 4 2"),
            bulks(&["e", "d", "c"])
        );
        assert_eq!(r2(&mut v, "ZREVRANGEBYSCORE z (4 (2"), bulks(&["d"]));
        assert_eq!(
            r2(&mut v, "ZRANGE z 4 2 BYSCORE REV"),
            bulks(&["e", "d", "c"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE z 1 3 WITHSCORES"),
            bulks(&["b", "1", "c", "2", "d", "3"])
        );
        assert_eq!(
            r3(&mut v, "ZRANGEBYSCORE z 1 1 WITHSCORES"),
            "*1\r\n*2\r\n$1\r\nb\r\n,1\r\n"
        );
        // LIMIT: offset then count; a negative count is no limit, a negative offset nothing.
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE z 0 10 LIMIT 0 2"),
            bulks(&["b", "c"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE z 0 10 LIMIT 2 3"),
            bulks(&["d", "e", "f"])
        );
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 0 10 LIMIT 4 -1"), bulks(&["f"]));
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 0 10 LIMIT 10 1"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 0 10 LIMIT -1 1"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGEBYSCORE z 0 10 LIMIT 0 0"), "*0\r\n");
        assert_eq!(
            r2(
                &mut v,
                "ZRANGEBYSCORE z 0 10 LIMIT 9223372036854775807 9223372036854775807"
            ),
            "*0\r\n"
        );
        assert_eq!(
            r2(&mut v, "ZREVRANGEBYSCORE z 10 0 LIMIT 1 2"),
            bulks(&["e", "d"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYSCORE z 0 10 WITHSCORES LIMIT 1 1"),
            bulks(&["c", "2"])
        );
        // strtod's reading: white space first, exponents, an empty bound is 0.
        assert_eq!(r2(&mut v, "ZCOUNT z 1e0 3.0e0"), int(3));
        assert_eq!(
            run_parts(&mut v, &[b"ZCOUNT", b"z", b" 1", b"2"], false),
            int(2)
        );
        assert_eq!(
            run_parts(&mut v, &[b"ZCOUNT", b"z", b"(", b"1"], false),
            int(1)
        );
        assert_eq!(r2(&mut v, "ZCOUNT z -inf +inf"), int(7));
        assert_eq!(r2(&mut v, "ZCOUNT z (1 3"), int(2));
        assert_eq!(r2(&mut v, "ZREMRANGEBYSCORE z (1 3"), int(2));
        assert_eq!(
            r2(&mut v, "ZRANGE z 0 -1"),
            bulks(&["a", "b", "e", "f", "g"])
        );
        assert_eq!(
            r2(&mut v, "ZREMRANGEBYSCORE z 1 str"),
            err("min or max is not a float")
        );
        assert_eq!(r2(&mut v, "ZREMRANGEBYSCORE z -inf +inf"), int(5));
        assert!(key_count(&v) == 0);
        assert_eq!(r2(&mut v, "ZREMRANGEBYSCORE z -inf +inf"), int(0));
    }
}

#[test]
fn lex_ranges() {
    for mut v in views() {
        r2(
            &mut v,
            "ZADD z 0 alpha 0 bar 0 cool 0 down 0 elephant 0 foo 0 great 0 hill 0 omega",
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYLEX z - [cool"),
            bulks(&["alpha", "bar", "cool"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYLEX z - (cool"),
            bulks(&["alpha", "bar"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYLEX z [bar [down"),
            bulks(&["bar", "cool", "down"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYLEX z (great +"),
            bulks(&["hill", "omega"])
        );
        assert_eq!(r2(&mut v, "ZRANGEBYLEX z + -"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGEBYLEX z - -"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANGEBYLEX z + +"), "*0\r\n");
        assert_eq!(
            r2(&mut v, "ZREVRANGEBYLEX z [cool -"),
            bulks(&["cool", "bar", "alpha"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGE z (great + BYLEX"),
            bulks(&["hill", "omega"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGE z + (great BYLEX REV"),
            bulks(&["omega", "hill"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYLEX z - + LIMIT 1 2"),
            bulks(&["bar", "cool"])
        );
        assert_eq!(
            r2(&mut v, "ZREVRANGEBYLEX z + - LIMIT 1 2"),
            bulks(&["hill", "great"])
        );
        assert_eq!(
            r2(&mut v, "ZRANGEBYLEX z - + WITHSCORES"),
            err("syntax error, WITHSCORES not supported in combination with BYLEX")
        );
        assert_eq!(r2(&mut v, "ZLEXCOUNT z - +"), int(9));
        assert_eq!(r2(&mut v, "ZLEXCOUNT z [bar (foo"), int(4));
        assert_eq!(r2(&mut v, "ZREMRANGEBYLEX z [alpha [cool"), int(3));
        assert_eq!(r2(&mut v, "ZREMRANGEBYLEX z (hill +"), int(1));
        assert_eq!(
            r2(&mut v, "ZRANGE z 0 -1"),
            bulks(&["down", "elephant", "foo", "great", "hill"])
        );
        assert_eq!(
            r2(&mut v, "ZREMRANGEBYLEX z a b"),
            err("min or max not valid string range item")
        );
    }
}

#[test]
fn remrangebyrank() {
    for mut v in views() {
        r2(&mut v, "ZADD z 1 a 2 b 3 c 4 d 5 e");
        assert_eq!(r2(&mut v, "ZREMRANGEBYRANK z 1 2"), int(2));
        assert_eq!(r2(&mut v, "ZRANGE z 0 -1"), bulks(&["a", "d", "e"]));
        assert_eq!(r2(&mut v, "ZREMRANGEBYRANK z 5 10"), int(0));
        assert_eq!(r2(&mut v, "ZREMRANGEBYRANK z 0 -10"), int(0));
        assert_eq!(r2(&mut v, "ZREMRANGEBYRANK z -1 -1"), int(1));
        assert_eq!(
            r2(&mut v, "ZREMRANGEBYRANK z x 1"),
            err("value is not an integer or out of range")
        );
        assert_eq!(r2(&mut v, "ZREMRANGEBYRANK z 0 100"), int(2));
        assert!(key_count(&v) == 0);
    }
}

#[test]
fn zrangestore() {
    for mut v in views() {
        r2(&mut v, "ZADD z1 1 a 2 b 3 c 4 d");
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 z1 0 -1"), int(4));
        assert_eq!(
            r2(&mut v, "ZRANGE z2 0 -1 WITHSCORES"),
            r2(&mut v, "ZRANGE z1 0 -1 WITHSCORES")
        );
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 z1 0 1 REV"), int(2));
        assert_eq!(r2(&mut v, "ZRANGE z2 0 -1"), bulks(&["c", "d"]));
        assert_eq!(
            r2(&mut v, "ZRANGESTORE z2 z1 2 +inf BYSCORE LIMIT 1 1"),
            int(1)
        );
        assert_eq!(r2(&mut v, "ZRANGE z2 0 -1 WITHSCORES"), bulks(&["c", "3"]));
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 z1 [b [c BYLEX"), int(2));
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 z1 5 6"), int(0));
        assert!(
            !has(&mut v, "z2"),
            "an empty result deletes the destination"
        );
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 missing 0 -1"), int(0));
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 z1 [f [g BYLEX"), int(0));
        r2(&mut v, "ZADD z2 1 a");
        put_string(&mut v, "foo");
        assert_eq!(r2(&mut v, "ZRANGESTORE z2 foo 0 -1"), WRONGTYPE);
        assert_eq!(r2(&mut v, "ZRANGE z2 0 -1"), bulks(&["a"]));
        // The destination may hold any type: it is replaced.
        assert_eq!(r2(&mut v, "ZRANGESTORE foo z1 0 0"), int(1));
        assert_eq!(r2(&mut v, "ZRANGE foo 0 -1"), bulks(&["a"]));
    }
}

#[test]
fn pops() {
    for mut v in views() {
        r2(&mut v, "ZADD z 1 a 2 b 3 c");
        assert_eq!(r2(&mut v, "ZPOPMIN z"), bulks(&["a", "1"]));
        assert_eq!(
            r3(&mut v, "ZPOPMAX z"),
            "*2\r\n$1\r\nc\r\n,3\r\n",
            "flat without a count"
        );
        r2(&mut v, "ZADD z 1 a 3 c");
        assert_eq!(r2(&mut v, "ZPOPMIN z 2"), bulks(&["a", "1", "b", "2"]));
        assert_eq!(
            r3(&mut v, "ZPOPMIN z 5"),
            "*1\r\n*2\r\n$1\r\nc\r\n,3\r\n",
            "pairs in RESP3"
        );
        assert!(key_count(&v) == 0);
        assert_eq!(r2(&mut v, "ZPOPMIN z"), "*0\r\n");
        assert_eq!(r3(&mut v, "ZPOPMIN z 3"), "*0\r\n");
        r2(&mut v, "ZADD z 1 a");
        assert_eq!(r2(&mut v, "ZPOPMIN z 0"), "*0\r\n");
        for n in ["-1", "-2"] {
            assert_eq!(
                r2(&mut v, &format!("ZPOPMIN z {n}")),
                err("value is out of range, must be positive")
            );
        }
        assert_eq!(
            r2(&mut v, "ZPOPMAX z x"),
            err("value is not an integer or out of range")
        );
        assert_eq!(r2(&mut v, "ZPOPMAX z 1 2"), err("syntax error"));
        assert_eq!(
            r2(&mut v, "ZPOPMAX z 9223372036854775807"),
            bulks(&["a", "1"])
        );
    }
}

#[test]
fn zmpop_and_its_errors() {
    for mut v in views() {
        put_string(&mut v, "foo");
        assert_eq!(r2(&mut v, "ZMPOP 1 foo min"), WRONGTYPE);
        assert_eq!(r2(&mut v, "ZMPOP 1 foo max count 200"), WRONGTYPE);
        assert_eq!(r2(&mut v, "ZMPOP 2 nokey foo min"), WRONGTYPE);
        assert_eq!(r2(&mut v, "ZMPOP 2 foo nokey max count 1"), WRONGTYPE);
        for (cmd, want) in [
            (
                "ZMPOP",
                err("wrong number of arguments for 'zmpop' command"),
            ),
            (
                "ZMPOP 1",
                err("wrong number of arguments for 'zmpop' command"),
            ),
            (
                "ZMPOP 1 z",
                err("wrong number of arguments for 'zmpop' command"),
            ),
            ("ZMPOP 0 z MIN", err("numkeys should be greater than 0")),
            ("ZMPOP a z MIN", err("numkeys should be greater than 0")),
            ("ZMPOP -1 z MAX", err("numkeys should be greater than 0")),
            ("ZMPOP 9223372036854775807 z MAX", err("syntax error")),
            ("ZMPOP 1 z bad_where", err("syntax error")),
            ("ZMPOP 1 z MIN bar_arg", err("syntax error")),
            ("ZMPOP 1 z MAX MIN", err("syntax error")),
            ("ZMPOP 1 z COUNT", err("syntax error")),
            ("ZMPOP 1 z MAX COUNT 1 COUNT 2", err("syntax error")),
            ("ZMPOP 2 z z2 bad_arg", err("syntax error")),
            (
                "ZMPOP 1 z MIN COUNT 0",
                err("count should be greater than 0"),
            ),
            (
                "ZMPOP 1 z MAX COUNT a",
                err("count should be greater than 0"),
            ),
            (
                "ZMPOP 1 z MIN COUNT -1",
                err("count should be greater than 0"),
            ),
            (
                "ZMPOP 2 z z2 MAX COUNT -1",
                err("count should be greater than 0"),
            ),
        ] {
            let got = if cmd == "ZMPOP" {
                run_parts(&mut v, &[b"ZMPOP"], false)
            } else {
                r2(&mut v, cmd)
            };
            assert_eq!(got, want, "{cmd}");
        }
        assert_eq!(r2(&mut v, "ZMPOP 2 a b MIN"), "*-1\r\n");
        assert_eq!(r3(&mut v, "ZMPOP 2 a b MIN"), "_\r\n");
        r2(&mut v, "ZADD b 1 x 2 y 3 z");
        assert_eq!(
            r2(&mut v, "ZMPOP 2 a b MAX COUNT 2"),
            "*2\r\n$1\r\nb\r\n*2\r\n*2\r\n$1\r\nz\r\n$1\r\n3\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n"
        );
        assert_eq!(
            r3(&mut v, "ZMPOP 2 a b MIN COUNT 10"),
            "*2\r\n$1\r\nb\r\n*1\r\n*2\r\n$1\r\nx\r\n,1\r\n"
        );
        assert!(key_count(&v) == 1, "b was emptied and deleted");
    }
}

#[test]
fn blocking_pops_serve_or_answer_the_timeout_reply() {
    for mut v in views() {
        put_string(&mut v, "foo");
        assert_eq!(r2(&mut v, "BZPOPMIN foo 1"), WRONGTYPE);
        assert_eq!(r2(&mut v, "BZPOPMAX foo 1"), WRONGTYPE);
        assert_eq!(r2(&mut v, "BZMPOP 1 1 foo min"), WRONGTYPE);
        assert_eq!(r2(&mut v, "BZMPOP 1 2 nokey foo min"), WRONGTYPE);
        assert_eq!(r2(&mut v, "BZMPOP 1 2 foo nokey max count 1"), WRONGTYPE);
        for (cmd, want) in [
            (
                "BZMPOP 0 1",
                err("wrong number of arguments for 'bzmpop' command"),
            ),
            (
                "BZMPOP 0 1 z",
                err("wrong number of arguments for 'bzmpop' command"),
            ),
            ("BZMPOP 1 0 z MIN", err("numkeys should be greater than 0")),
            ("BZMPOP 1 a z MIN", err("numkeys should be greater than 0")),
            ("BZMPOP 1 -1 z MAX", err("numkeys should be greater than 0")),
            ("BZMPOP 1 1 z bad_where", err("syntax error")),
            ("BZMPOP 1 1 z MIN bar_arg", err("syntax error")),
            ("BZMPOP 1 1 z MAX MIN", err("syntax error")),
            ("BZMPOP 1 1 z COUNT", err("syntax error")),
            ("BZMPOP 1 1 z MIN COUNT 1 COUNT 2", err("syntax error")),
            ("BZMPOP 1 2 z z2 bad_arg", err("syntax error")),
            (
                "BZMPOP 1 1 z MIN COUNT 0",
                err("count should be greater than 0"),
            ),
            (
                "BZMPOP 1 1 z MAX COUNT a",
                err("count should be greater than 0"),
            ),
            // BZMPOP reads its timeout after the rest, BZPOPMIN before its keys.
            (
                "BZMPOP x 1 foo MIN COUNT 0",
                err("count should be greater than 0"),
            ),
            (
                "BZMPOP x 1 foo MIN",
                err("timeout is not a float or out of range"),
            ),
            ("BZMPOP -1 1 foo MIN", err("timeout is negative")),
            (
                "BZPOPMIN foo x",
                err("timeout is not a float or out of range"),
            ),
            ("BZPOPMAX foo -1", err("timeout is negative")),
            (
                "BZPOPMIN foo",
                err("wrong number of arguments for 'bzpopmin' command"),
            ),
        ] {
            assert_eq!(r2(&mut v, cmd), want, "{cmd}");
        }
        // Every source absent: the timeout reply.
        assert_eq!(r2(&mut v, "BZPOPMIN a b 0"), "*-1\r\n");
        assert_eq!(r3(&mut v, "BZPOPMAX a b 0"), "_\r\n");
        assert_eq!(r2(&mut v, "BZMPOP 0 2 a b MIN"), "*-1\r\n");
        r2(&mut v, "ZADD b 1 x 2 y");
        assert_eq!(r2(&mut v, "BZPOPMIN a b 0"), bulks(&["b", "x", "1"]));
        assert_eq!(
            r3(&mut v, "BZPOPMAX a b 0.5"),
            "*3\r\n$1\r\nb\r\n$1\r\ny\r\n,2\r\n"
        );
        assert!(!has(&mut v, "b"));
        r2(&mut v, "ZADD c 1 x 2 y");
        assert_eq!(
            r2(&mut v, "BZMPOP 0 2 a c MAX COUNT 5"),
            "*2\r\n$1\r\nc\r\n*2\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n*2\r\n$1\r\nx\r\n$1\r\n1\r\n"
        );
    }
}

#[test]
fn blocking_source_key_positions() {
    let keys = |line: &str| {
        let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let owned = OwnedArgs::from_slices(parts.iter().copied());
        blocking_source_keys(Cmd::lookup(parts[0]).unwrap(), owned.get())
    };
    assert_eq!(keys("BZPOPMIN a b c 0"), [1, 2, 3]);
    assert_eq!(keys("BZPOPMAX a 0"), [1]);
    assert!(keys("BZPOPMAX 0").is_empty());
    assert_eq!(keys("BZMPOP 0 2 a b MIN"), [3, 4]);
    assert_eq!(
        keys("BZMPOP 0 9 a b MIN"),
        [3, 4, 5],
        "cut to the arguments"
    );
    assert_eq!(keys("BZMPOP 0 9223372036854775807 a MIN"), [3, 4]);
    assert!(keys("BZMPOP 0 0 a MIN").is_empty());
    assert!(keys("BZMPOP 0 x a MIN").is_empty());
    assert!(keys("ZPOPMIN a").is_empty());
}

#[test]
fn union_inter_diff() {
    for mut v in views() {
        r2(&mut v, "ZADD zseta 1 a 2 b 3 c");
        r2(&mut v, "ZADD zsetb 1 b 2 c 3 d");
        assert_eq!(r2(&mut v, "ZUNIONSTORE zsetc 2 zseta zsetb"), int(4));
        assert_eq!(
            r2(&mut v, "ZRANGE zsetc 0 -1 WITHSCORES"),
            bulks(&["a", "1", "b", "3", "d", "3", "c", "5"])
        );
        assert_eq!(
            r2(&mut v, "ZUNION 2 zseta zsetb WITHSCORES"),
            bulks(&["a", "1", "b", "3", "d", "3", "c", "5"])
        );
        assert_eq!(
            r3(&mut v, "ZUNION 2 zseta zsetb"),
            "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nd\r\n$1\r\nc\r\n"
        );
        assert_eq!(
            r3(&mut v, "ZINTER 2 zseta zsetb WITHSCORES"),
            "*2\r\n*2\r\n$1\r\nb\r\n,3\r\n*2\r\n$1\r\nc\r\n,5\r\n"
        );
        assert_eq!(r2(&mut v, "ZINTERSTORE zsetc 2 zseta zsetb"), int(2));
        assert_eq!(
            r2(&mut v, "ZRANGE zsetc 0 -1 WITHSCORES"),
            bulks(&["b", "3", "c", "5"])
        );
        assert_eq!(
            r2(&mut v, "ZDIFF 2 zseta zsetb WITHSCORES"),
            bulks(&["a", "1"])
        );
        assert_eq!(r2(&mut v, "ZDIFFSTORE zsetc 2 zseta zsetb"), int(1));
        assert_eq!(r2(&mut v, "ZDIFF 1 nokey"), "*0\r\n");
        // WEIGHTS and AGGREGATE.
        assert_eq!(
            r2(&mut v, "ZUNION 2 zseta zsetb WEIGHTS 2 3 WITHSCORES"),
            bulks(&["a", "2", "b", "7", "d", "9", "c", "12"])
        );
        assert_eq!(
            r2(&mut v, "ZUNION 2 zseta zsetb AGGREGATE MAX WITHSCORES"),
            bulks(&["a", "1", "b", "2", "c", "3", "d", "3"])
        );
        assert_eq!(
            r2(&mut v, "ZINTER 2 zseta zsetb AGGREGATE min WITHSCORES"),
            bulks(&["b", "1", "c", "2"])
        );
        // inf * 0 and inf + -inf are 0.
        r2(&mut v, "ZADD zinf +inf a");
        r2(&mut v, "ZADD zninf -inf a");
        assert_eq!(
            r2(&mut v, "ZUNION 1 zinf WEIGHTS 0 WITHSCORES"),
            bulks(&["a", "0"])
        );
        assert_eq!(
            r2(&mut v, "ZUNION 2 zinf zninf WITHSCORES"),
            bulks(&["a", "0"])
        );
        assert_eq!(
            r2(&mut v, "ZINTER 2 zinf zninf WITHSCORES"),
            bulks(&["a", "0"])
        );
        // Sets count as score 1.
        put_set(&mut v, "set", &["a", "b", "x"]);
        assert_eq!(
            r2(&mut v, "ZUNION 2 zseta set WITHSCORES"),
            bulks(&["x", "1", "a", "2", "b", "3", "c", "3"])
        );
        assert_eq!(
            r2(&mut v, "ZINTER 2 set zseta WEIGHTS 10 1 WITHSCORES"),
            bulks(&["a", "11", "b", "12"])
        );
        assert_eq!(r2(&mut v, "ZDIFF 2 set zseta"), bulks(&["x"]));
        assert_eq!(r2(&mut v, "ZINTERCARD 2 set zseta"), int(2));
        // An empty result deletes the destination (whatever it held).
        put_string(&mut v, "dst");
        assert_eq!(r2(&mut v, "ZINTERSTORE dst 2 zseta nokey"), int(0));
        assert!(!has(&mut v, "dst"));
        // ZINTERCARD.
        assert_eq!(r2(&mut v, "ZINTERCARD 2 zseta zsetb"), int(2));
        assert_eq!(r2(&mut v, "ZINTERCARD 2 zseta zsetb limit 0"), int(2));
        assert_eq!(r2(&mut v, "ZINTERCARD 2 zseta zsetb limit 1"), int(1));
        assert_eq!(r2(&mut v, "ZINTERCARD 2 zseta zsetb limit 10"), int(2));
    }
}

#[test]
fn union_inter_diff_errors() {
    for mut v in views() {
        r2(&mut v, "ZADD zseta 1 a");
        put_string(&mut v, "str");
        for (cmd, name) in [
            ("ZUNION 0 k", "zunion"),
            ("ZUNIONSTORE d 0 k", "zunionstore"),
            ("ZINTER 0 k", "zinter"),
            ("ZINTERSTORE d 0 k", "zinterstore"),
            ("ZDIFF 0 k", "zdiff"),
            ("ZDIFFSTORE d 0 k", "zdiffstore"),
            ("ZINTERCARD 0 k", "zintercard"),
            ("ZUNION -1 k", "zunion"),
        ] {
            assert_eq!(
                r2(&mut v, cmd),
                err(&format!(
                    "at least 1 input key is needed for '{name}' command"
                ))
            );
        }
        for cmd in [
            "ZUNIONSTORE foo 2 zseta zsetb WITHSCORES",
            "ZINTERSTORE foo 2 zseta zsetb WITHSCORES",
            "ZDIFFSTORE foo 2 zseta zsetb WITHSCORES",
            "ZINTERCARD 1 zseta zseta",
            "ZINTERCARD 1 zseta bar_arg",
            "ZINTERCARD 1 zseta LIMIT",
            "ZUNION 3 a b",
            "ZUNION 9223372036854775807 a",
            "ZUNION 2 a b WEIGHTS 1",
            "ZUNION 1 a AGGREGATE avg",
            "ZUNION 1 a AGGREGATE",
            "ZDIFF 1 a WEIGHTS 1",
            "ZINTERCARD 1 a WITHSCORES",
        ] {
            assert_eq!(r2(&mut v, cmd), err("syntax error"), "{cmd}");
        }
        assert_eq!(
            r2(&mut v, "ZINTERCARD 1 zseta LIMIT -1"),
            err("LIMIT can't be negative")
        );
        assert_eq!(
            r2(&mut v, "ZINTERCARD 1 zseta LIMIT a"),
            err("LIMIT can't be negative")
        );
        assert_eq!(
            r2(&mut v, "ZUNION 2 zseta zseta WEIGHTS 1 x"),
            err("weight value is not a float")
        );
        assert_eq!(
            r2(&mut v, "ZUNION x zseta"),
            err("value is not an integer or out of range")
        );
        // The sources' types are checked before the options.
        assert_eq!(r2(&mut v, "ZUNION 2 zseta str bad_option"), WRONGTYPE);
        assert_eq!(r2(&mut v, "ZINTERSTORE d 2 str zseta"), WRONGTYPE);
    }
}

#[test]
fn zrandmember() {
    for mut v in views() {
        assert_eq!(r2(&mut v, "ZRANDMEMBER nokey"), "$-1\r\n");
        assert_eq!(r3(&mut v, "ZRANDMEMBER nokey 100"), "*0\r\n");
        r2(&mut v, "ZADD z 1 a 2 b 3 c");
        assert_eq!(r2(&mut v, "ZRANDMEMBER z 0"), "*0\r\n");
        assert_eq!(r2(&mut v, "ZRANDMEMBER z 10"), bulks(&["a", "b", "c"]));
        assert_eq!(
            r2(&mut v, "ZRANDMEMBER z 3 WITHSCORES"),
            bulks(&["a", "1", "b", "2", "c", "3"])
        );
        assert_eq!(
            r3(&mut v, "ZRANDMEMBER z 3 WITHSCORES"),
            "*3\r\n*2\r\n$1\r\na\r\n,1\r\n*2\r\n$1\r\nb\r\n,2\r\n*2\r\n$1\r\nc\r\n,3\r\n"
        );
        let one = r2(&mut v, "ZRANDMEMBER z");
        assert!(["$1\r\na\r\n", "$1\r\nb\r\n", "$1\r\nc\r\n"].contains(&one.as_str()));
        let two = r2(&mut v, "ZRANDMEMBER z 2");
        assert!(two.starts_with("*2\r\n"));
        let many = r2(&mut v, "ZRANDMEMBER z -20 WITHSCORES");
        assert!(many.starts_with("*40\r\n"));
        for cmd in [
            "ZRANDMEMBER z -9223372036854770000 WITHSCORES",
            "ZRANDMEMBER z -9223372036854775808 WITHSCORES",
            "ZRANDMEMBER z -9223372036854775808",
            "ZRANDMEMBER z -2000000",
        ] {
            assert!(
                r2(&mut v, cmd).starts_with("-ERR value is out of range"),
                "{cmd}"
            );
        }
        assert_eq!(
            r2(&mut v, "ZRANDMEMBER z 1 WITHSCORES x"),
            err("syntax error")
        );
        assert_eq!(r2(&mut v, "ZRANDMEMBER z 1 foo"), err("syntax error"));
        assert_eq!(
            r2(&mut v, "ZRANDMEMBER z x"),
            err("value is not an integer or out of range")
        );
    }
}

#[test]
fn zscan() {
    for mut v in views() {
        assert_eq!(r2(&mut v, "ZSCAN nokey 0 MATCH"), "*2\r\n$1\r\n0\r\n*0\r\n");
        r2(&mut v, "ZADD z 1 foo 2.5 bar 0.1 food");
        assert_eq!(
            r2(&mut v, "ZSCAN z 0"),
            format!(
                "*2\r\n$1\r\n0\r\n{}",
                bulks(&["food", "0.10000000000000001", "foo", "1", "bar", "2.5"])
            )
        );
        assert_eq!(
            r2(&mut v, "ZSCAN z 0 MATCH foo* COUNT 10000"),
            format!(
                "*2\r\n$1\r\n0\r\n{}",
                bulks(&["food", "0.10000000000000001", "foo", "1"])
            )
        );
        assert_eq!(r2(&mut v, "ZSCAN z x"), err("invalid cursor"));
        assert_eq!(r2(&mut v, "ZSCAN z 0 COUNT 0"), err("syntax error"));
        assert_eq!(r2(&mut v, "ZSCAN z 0 COUNT"), err("syntax error"));
        assert_eq!(r2(&mut v, "ZSCAN z 0 TYPE zset"), err("syntax error"));
    }
}

// ----- the encoding on damaged bytes ----------------------------------------------------

fn sample() -> ZSet {
    let mut z = ZSet::default();
    for (m, s) in [("a", 1.0), ("bb", -0.0), ("c", f64::INFINITY), ("d", 1.0)] {
        z.insert(m.as_bytes(), Score::new(s).unwrap());
    }
    z
}

#[test]
fn encoding_round_trips_and_documents_its_layout() {
    let z = sample();
    let data = Bytes::from(z.encode());
    // count, then (score BE, len, member) in (score, member) order.
    assert_eq!(data[0], 4);
    assert_eq!(&data[1..9], &(-0.0f64).to_be_bytes());
    assert_eq!(&data[9..12], b"\x02bb");
    let back = ZSet::decode(&data).unwrap();
    let got: Vec<(f64, Member)> = back.iter().map(|(s, m)| (s, m.clone())).collect();
    let want: Vec<(f64, Member)> = z.iter().map(|(s, m)| (s, m.clone())).collect();
    assert_eq!(got, want);
    assert_eq!(encoding::encoded_len(&data), Ok(4));
    assert!(
        ZSet::decode(&Bytes::from(ZSet::default().encode()))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn damaged_bytes_are_corrupt_never_a_panic() {
    let good = sample().encode();
    let entry = |data: Vec<u8>| {
        let mut d = vec![1u8];
        d.extend_from_slice(&data);
        Bytes::from(d)
    };
    let cases: Vec<(&str, Bytes)> = vec![
        ("empty", Bytes::new()),
        ("truncated", Bytes::from(good[..good.len() - 1].to_vec())),
        ("trailing", Bytes::from([&good[..], b"x"].concat())),
        (
            "count beyond the bytes",
            Bytes::from(vec![0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0]),
        ),
        ("varint too long", Bytes::from(vec![0x80; 11])),
        (
            "varint overflow",
            Bytes::from([vec![0xff; 9], vec![0x02]].concat()),
        ),
        (
            "NaN score",
            entry([f64::NAN.to_be_bytes().to_vec(), vec![1, b'a']].concat()),
        ),
        (
            "member length beyond the bytes",
            entry([1.0f64.to_be_bytes().to_vec(), vec![0xff, 0xff, 0x03, b'a']].concat()),
        ),
        (
            "out of order",
            Bytes::from(
                [
                    vec![2],
                    2.0f64.to_be_bytes().to_vec(),
                    vec![1, b'a'],
                    1.0f64.to_be_bytes().to_vec(),
                    vec![1, b'b'],
                ]
                .concat(),
            ),
        ),
        (
            "repeated member",
            Bytes::from(
                [
                    vec![2],
                    1.0f64.to_be_bytes().to_vec(),
                    vec![1, b'a'],
                    2.0f64.to_be_bytes().to_vec(),
                    vec![1, b'a'],
                ]
                .concat(),
            ),
        ),
    ];
    for (why, data) in cases {
        assert!(ZSet::decode(&data).is_err(), "{why}");
        // Through a command too: an error reply, never a panic.
        let mut v = view();
        v.map.insert(
            b"z".to_vec(),
            Entry {
                data: data.clone(),
                expiry: None,
                kind: Kind::ZSet,
            },
        );
        let line = r2(&mut v, "ZRANGE z 0 -1");
        assert!(
            line.starts_with("-ERR stored value is not"),
            "{why}: {line}"
        );
    }
    // The stand-in set decoder is as defensive.
    for (why, data) in [
        ("count beyond the bytes", vec![5u8, 1, b'a']),
        ("out of order", vec![2, 1, b'b', 1, b'a']),
        ("repeated", vec![2, 1, b'a', 1, b'a']),
        ("trailing", vec![1, 1, b'a', 0]),
        ("truncated", vec![1, 3, b'a']),
    ] {
        let e = Entry {
            data: Bytes::from(data),
            expiry: None,
            kind: Kind::Set,
        };
        assert!(
            matches!(crate::sets::members(&e), Err(RedisError::Corrupt(_))),
            "{why}"
        );
    }
}

// ----- a model test ---------------------------------------------------------------------

mod model {
    use super::*;
    use proptest::prelude::*;

    const SCORES: [f64; 8] = [
        f64::NEG_INFINITY,
        -1.5,
        -0.0,
        0.0,
        1.0,
        2.5,
        1e20,
        f64::INFINITY,
    ];
    const MEMBERS: [&str; 6] = ["a", "b", "c", "dd", "e", ""];

    #[derive(Clone, Debug)]
    enum Op {
        Add(Vec<(usize, usize)>, u8),
        Incr(usize, usize),
        Rem(Vec<usize>),
        Pop(bool, u8),
        RemByScore(usize, usize),
        RemByRank(i64, i64),
        /// ZRANGEBYSCORE / ZREVRANGEBYSCORE over two scores, each bound maybe exclusive.
        ByScore(usize, bool, usize, bool, bool),
        /// ZRANGE / ZREVRANGE by rank.
        ByRank(i64, i64, bool),
        /// ZRANGEBYLEX / ZREVRANGEBYLEX (`[m`, `(m`, `-`, `+`).
        ByLex(usize, u8, usize, u8, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        let pair = (0..SCORES.len(), 0..MEMBERS.len());
        prop_oneof![
            (proptest::collection::vec(pair, 1..4), 0u8..6).prop_map(|(p, f)| Op::Add(p, f)),
            (0..SCORES.len(), 0..MEMBERS.len()).prop_map(|(s, m)| Op::Incr(s, m)),
            proptest::collection::vec(0..MEMBERS.len(), 1..4).prop_map(Op::Rem),
            (any::<bool>(), 0u8..4).prop_map(|(max, n)| Op::Pop(max, n)),
            (0..SCORES.len(), 0..SCORES.len()).prop_map(|(a, b)| Op::RemByScore(a, b)),
            (-4i64..4, -4i64..4).prop_map(|(a, b)| Op::RemByRank(a, b)),
            (
                0..SCORES.len(),
                any::<bool>(),
                0..SCORES.len(),
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(a, ax, b, bx, rev)| Op::ByScore(a, ax, b, bx, rev)),
            (-7i64..7, -7i64..7, any::<bool>()).prop_map(|(a, b, rev)| Op::ByRank(a, b, rev)),
            (
                0..MEMBERS.len(),
                0u8..4,
                0..MEMBERS.len(),
                0u8..4,
                any::<bool>()
            )
                .prop_map(|(a, ak, b, bk, rev)| Op::ByLex(a, ak, b, bk, rev)),
        ]
    }

    fn arg(s: f64) -> String {
        format_double(s)
    }

    fn sorted(m: &BTreeMap<String, f64>) -> Vec<(f64, String)> {
        let mut v: Vec<(f64, String)> = m.iter().map(|(k, s)| (*s, k.clone())).collect();
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then_with(|| a.1.cmp(&b.1)));
        v
    }

    fn flat(items: &[(f64, String)]) -> String {
        let mut s = format!("*{}\r\n", items.len() * 2);
        for (sc, m) in items {
            let d = format_double(*sc);
            s.push_str(&format!(
                "${}\r\n{}\r\n${}\r\n{}\r\n",
                m.len(),
                m,
                d.len(),
                d
            ));
        }
        s
    }

    fn run(v: &mut TestView, parts: &[String]) -> String {
        let p: Vec<&[u8]> = parts.iter().map(|s| s.as_bytes()).collect();
        run_parts(v, &p, false)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn commands_match_a_btreemap(ops in proptest::collection::vec(op(), 1..30)) {
            for mut v in views() {
            let mut model: BTreeMap<String, f64> = BTreeMap::new();
            for op in ops.clone() {
                let (parts, want): (Vec<String>, String) = match &op {
                    Op::Add(pairs, f) => {
                        let flag = ["", "NX", "XX", "GT", "LT", "CH"][*f as usize];
                        let mut parts = vec!["ZADD".to_string(), "z".into()];
                        if !flag.is_empty() { parts.push(flag.into()); }
                        let (mut added, mut changed) = (0, 0);
                        for &(s, m) in pairs {
                            let (s, m) = (SCORES[s], MEMBERS[m]);
                            parts.push(arg(s));
                            parts.push(m.into());
                            match model.get(m).copied() {
                                Some(_) if flag == "NX" => {}
                                Some(cur) => {
                                    if (flag == "GT" && s <= cur) || (flag == "LT" && s >= cur) {
                                        continue;
                                    }
                                    // An equal score (-0 for 0) leaves the entry alone.
                                    if s != cur {
                                        changed += 1;
                                        model.insert(m.into(), s);
                                    }
                                }
                                None if flag == "XX" => {}
                                None => { added += 1; model.insert(m.into(), s); }
                            }
                        }
                        let n = if flag == "CH" { added + changed } else { added };
                        (parts, int(n))
                    }
                    Op::Incr(s, m) => {
                        let (d, m) = (SCORES[*s], MEMBERS[*m]);
                        // A new member takes the increment as its score (-0 stays -0).
                        let cur = model.get(m).copied();
                        let new = cur.map_or(d, |c| c + d);
                        let want = if new.is_nan() {
                            err("resulting score is not a number (NaN)")
                        } else {
                            if cur != Some(new) {
                                model.insert(m.into(), new);
                            }
                            let t = format_double(new);
                            format!("${}\r\n{}\r\n", t.len(), t)
                        };
                        (vec!["ZINCRBY".into(), "z".into(), arg(d), m.into()], want)
                    }
                    Op::Rem(ms) => {
                        let mut parts = vec!["ZREM".to_string(), "z".into()];
                        let mut n = 0;
                        for &m in ms {
                            parts.push(MEMBERS[m].into());
                            n += model.remove(MEMBERS[m]).is_some() as i64;
                        }
                        (parts, int(n))
                    }
                    Op::Pop(max, n) => {
                        let mut all = sorted(&model);
                        if *max { all.reverse(); }
                        all.truncate(*n as usize);
                        for (_, m) in &all { model.remove(m); }
                        let cmd = if *max { "ZPOPMAX" } else { "ZPOPMIN" };
                        (vec![cmd.into(), "z".into(), n.to_string()], flat(&all))
                    }
                    Op::RemByScore(a, b) => {
                        let (lo, hi) = (SCORES[*a], SCORES[*b]);
                        let before = model.len();
                        model.retain(|_, s| !(*s >= lo && *s <= hi));
                        let n = (before - model.len()) as i64;
                        (vec!["ZREMRANGEBYSCORE".into(), "z".into(), arg(lo), arg(hi)], int(n))
                    }
                    Op::RemByRank(a, b) => {
                        let all = sorted(&model);
                        let len = all.len() as i64;
                        let s = if *a < 0 { len + a } else { *a }.max(0);
                        let e = if *b < 0 { len + b } else { *b }.min(len - 1);
                        let mut n = 0;
                        if s <= e && s < len {
                            for (_, m) in &all[s as usize..=e as usize] {
                                model.remove(m);
                                n += 1;
                            }
                        }
                        (vec!["ZREMRANGEBYRANK".into(), "z".into(), a.to_string(), b.to_string()], int(n))
                    }
                    Op::ByScore(a, ax, b, bx, rev) => {
                        let (lo, hi) = (SCORES[*a], SCORES[*b]);
                        let above = |s: f64| if *ax { s > lo } else { s >= lo };
                        let below = |s: f64| if *bx { s < hi } else { s <= hi };
                        let mut all = sorted(&model);
                        if *rev { all.reverse(); }
                        all.retain(|(s, _)| above(*s) && below(*s));
                        let bound = |x: bool, s: f64| format!("{}{}", if x { "(" } else { "" }, arg(s));
                        let (l, h) = (bound(*ax, lo), bound(*bx, hi));
                        let parts = if *rev {
                            vec!["ZREVRANGEBYSCORE".into(), "z".into(), h, l, "WITHSCORES".into()]
                        } else {
                            vec!["ZRANGEBYSCORE".into(), "z".into(), l, h, "WITHSCORES".into()]
                        };
                        (parts, flat(&all))
                    }
                    Op::ByRank(a, b, rev) => {
                        let mut all = sorted(&model);
                        if *rev { all.reverse(); }
                        let len = all.len() as i64;
                        let s = if *a < 0 { len + a } else { *a }.max(0);
                        let e = if *b < 0 { len + b } else { *b }.min(len - 1);
                        let got = if s <= e && s < len { all[s as usize..=e as usize].to_vec() } else { Vec::new() };
                        let cmd = if *rev { "ZREVRANGE" } else { "ZRANGE" };
                        (vec![cmd.into(), "z".into(), a.to_string(), b.to_string(), "WITHSCORES".into()], flat(&got))
                    }
                    Op::ByLex(a, ak, b, bk, rev) => {
                        // Redis's walk: from the first entry inside the near bound, while
                        // inside the far one (what it answers whatever the scores).
                        let bound = |m: usize, k: u8| match k {
                            0 => "-".to_string(),
                            1 => "+".to_string(),
                            2 => format!("[{}", MEMBERS[m]),
                            _ => format!("({}", MEMBERS[m]),
                        };
                        let (lo, hi) = (bound(*a, *ak), bound(*b, *bk));
                        let ge = |m: &str| match *ak { 0 => true, 1 => false, 2 => m >= MEMBERS[*a], _ => m > MEMBERS[*a] };
                        let le = |m: &str| match *bk { 0 => false, 1 => true, 2 => m <= MEMBERS[*b], _ => m < MEMBERS[*b] };
                        let mut all = sorted(&model);
                        if *rev { all.reverse(); }
                        type Test<'t> = &'t dyn Fn(&str) -> bool;
                        let (near, far): (Test, Test) =
                            if *rev { (&le, &ge) } else { (&ge, &le) };
                        let got: Vec<String> = all
                            .iter()
                            .skip_while(|(_, m)| !near(m))
                            .take_while(|(_, m)| far(m))
                            .map(|(_, m)| m.clone())
                            .collect();
                        let got: Vec<&str> = got.iter().map(String::as_str).collect();
                        let parts = if *rev {
                            vec!["ZREVRANGEBYLEX".into(), "z".into(), hi, lo]
                        } else {
                            vec!["ZRANGEBYLEX".into(), "z".into(), lo, hi]
                        };
                        (parts, bulks(&got))
                    }
                };
                prop_assert_eq!(run(&mut v, &parts), want, "{:?}", op);
                let all = sorted(&model);
                let parts: Vec<String> =
                    ["ZRANGE", "z", "0", "-1", "WITHSCORES"].iter().map(|s| s.to_string()).collect();
                prop_assert_eq!(run(&mut v, &parts), flat(&all));
                prop_assert_eq!(has(&mut v, "z"), !model.is_empty());
                prop_assert_eq!(v.held_count(), usize::from(v.hold_objects && !model.is_empty()));
                for (rank, (_, m)) in all.iter().enumerate() {
                    let parts = vec!["ZRANK".to_string(), "z".into(), m.clone()];
                    prop_assert_eq!(run(&mut v, &parts), int(rank as i64));
                }
            }
            }
        }

        #[test]
        fn decoding_any_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ZSet::decode(&Bytes::from(data.clone()));
            let _ = crate::sets::members(&Entry { data: Bytes::from(data), expiry: None, kind: Kind::Set });
        }

        #[test]
        fn hostile_range_arguments_never_panic(
            a in any::<i64>(), b in any::<i64>(), c in any::<i64>(), d in any::<i64>()
        ) {
            let mut v = view();
            r2(&mut v, "ZADD z 1 a 2 b 3 c");
            for cmd in [
                format!("ZRANGE z {a} {b}"),
                format!("ZREVRANGE z {a} {b} WITHSCORES"),
                format!("ZRANGE z -inf +inf BYSCORE LIMIT {c} {d}"),
                format!("ZRANGE z + - BYLEX REV LIMIT {c} {d}"),
                format!("ZPOPMIN z {c}"),
                format!("ZMPOP {a} z MIN COUNT {d}"),
                format!("ZRANDMEMBER z {c}"),
                format!("ZUNION {a} z"),
                format!("ZREMRANGEBYRANK z {a} {b}"),
            ] {
                let out = r2(&mut v, &cmd);
                prop_assert!(!out.is_empty());
            }
        }
    }
}

// ----- a view that keeps objects ---------------------------------------------------------

/// On a view that keeps objects, a write to an existing set changes the held object: nothing
/// is encoded into the map, and the set emptied deletes the key.
#[test]
fn a_held_set_is_changed_in_place() {
    let mut v = TestView::holding();
    assert_eq!(r2(&mut v, "ZADD z 1 a 2 b 3 c"), int(3));
    assert_eq!(v.held_count(), 1);
    assert!(!v.map.contains_key(&b"z"[..]), "held, not encoded");
    for (cmd, want) in [
        ("ZADD z 4 d", int(1)),
        ("ZADD z XX CH 5 d", int(1)),
        ("ZINCRBY z 1 a", "$1\r\n2\r\n".to_string()),
        ("ZREM z b", int(1)),
        ("ZREMRANGEBYSCORE z 5 5", int(1)),
        ("ZPOPMAX z", bulks(&["c", "3"])),
        ("ZCARD z", int(1)),
        ("ZSCORE z a", "$1\r\n2\r\n".to_string()),
        ("ZRANK z a", int(0)),
    ] {
        assert_eq!(r2(&mut v, cmd), want, "{cmd}");
        assert_eq!(v.held_count(), 1, "{cmd}");
        assert!(!v.map.contains_key(&b"z"[..]), "{cmd}: not re-encoded");
    }
    // The held object is the one ZADD created: its expiry survives the writes.
    set_expiry(&mut v, "z", Some(99_000_000));
    assert!(v.map.contains_key(&b"z"[..]));
    r2(&mut v, "ZADD z 7 q");
    assert_eq!((v.held_count(), v.map.contains_key(&b"z"[..])), (1, false));
    r2(&mut v, "ZADD z 8 q");
    assert_eq!(expiry_of(&mut v, "z"), Some(99_000_000));
    // A STORE keeps its result as an object too.
    assert_eq!(r2(&mut v, "ZUNIONSTORE u 1 z"), int(2));
    assert_eq!((v.held_count(), v.map.contains_key(&b"u"[..])), (2, false));
    // Emptied: deleted.
    assert_eq!(r2(&mut v, "ZPOPMIN z 5"), bulks(&["a", "2", "q", "8"]));
    assert!(!has(&mut v, "z"));
    assert_eq!(v.held_count(), 1);
    assert_eq!(r2(&mut v, "ZREMRANGEBYRANK u 0 -1"), int(2));
    assert_eq!(key_count(&v), 0);
    // Through the `zsets::zadd` API others call (GEOADD), and `store`.
    let mut z = ZSet::default();
    z.insert(b"m", Score::new(1.0).unwrap());
    store(&mut v, b"s", &z, None).unwrap();
    let out = zadd(&mut v, b"s", ZaddFlags::default(), &[(2.0, b"n")]).unwrap();
    assert_eq!(out.added, 1);
    assert_eq!((v.held_count(), v.map.len()), (1, 0));
}

/// A write that changes nothing records no write: the held object is not reported changed
/// (WATCH and blocked clients see nothing, as in Redis), and a bytes view stores nothing.
#[test]
fn a_write_that_changes_nothing_stores_nothing() {
    let mut v = view();
    r2(&mut v, "ZADD z 1 a");
    // A marker: a store would replace it.
    set_expiry(&mut v, "z", Some(99_000_000));
    let before = v.map[&b"z"[..]].data.clone();
    for cmd in [
        "ZADD z 1 a",
        "ZADD z NX 5 a",
        "ZADD z XX 1 b",
        "ZADD z GT 0 a",
        "ZREM z x",
        "ZREMRANGEBYSCORE z 5 6",
        "ZPOPMIN z 0",
        "ZADD nokey XX 1 a",
    ] {
        r2(&mut v, cmd);
        assert_eq!(v.map[&b"z"[..]].data, before, "{cmd}");
        assert_eq!(
            v.map[&b"z"[..]].data.as_ptr(),
            before.as_ptr(),
            "{cmd}: not rewritten"
        );
    }
    assert!(!has(&mut v, "nokey"));
}

/// One script of commands — every sorted-set command, errors included — answers the same on
/// a view of bytes and on one that keeps objects, and leaves the same data.
#[test]
fn bytes_and_held_views_answer_alike() {
    let script = [
        "ZADD z 1 a 2 b 3 c 4 d 5 e",
        "ZADD z NX 9 a 6 f",
        "ZADD z XX CH 7 a 8 zz",
        "ZADD z GT CH 1 b 10 c",
        "ZADD z LT CH 0 d",
        "ZADD z INCR 2 b",
        "ZADD z INCR GT 1 b",
        "ZINCRBY z 1.5 e",
        "ZINCRBY z +inf e",
        "ZINCRBY z -inf e",
        "ZADD l 0 a 0 b 0 c 0 d 0 e 0 f 0 g",
        "ZRANGE z 0 -1 WITHSCORES",
        "ZRANGE z -2 -1",
        "ZRANGE z 1 100 REV WITHSCORES",
        "ZRANGE z (1 +inf BYSCORE LIMIT 1 2 WITHSCORES",
        "ZRANGE z +inf (1 BYSCORE REV LIMIT 0 3",
        "ZRANGEBYSCORE z -inf 4",
        "ZREVRANGEBYSCORE z (7 -inf WITHSCORES",
        "ZRANGEBYLEX l [b (f",
        "ZREVRANGEBYLEX l (f [b LIMIT 1 2",
        "ZRANGEBYLEX l - +",
        "ZRANGEBYLEX z - +",
        "ZLEXCOUNT l (a [e",
        "ZCOUNT z (1 7",
        "ZCARD z",
        "ZSCORE z b",
        "ZMSCORE z a nope b",
        "ZRANK z c",
        "ZREVRANK z c",
        "ZSCAN z 0",
        "ZSCAN z 0 MATCH *a* COUNT 10",
        "ZSCAN z 0 BAD",
        "ZRANDMEMBER z 100 WITHSCORES",
        "ZRANDMEMBER z -3",
        "ZRANDMEMBER nokey",
        "ZUNION 2 z l WITHSCORES",
        "ZINTER 2 z l AGGREGATE MAX WITHSCORES",
        "ZDIFF 2 l z",
        "ZINTERCARD 2 z l LIMIT 1",
        "ZUNIONSTORE u 2 z l WEIGHTS 2 3",
        "ZINTERSTORE i 2 z l",
        "ZDIFFSTORE d 2 l z",
        "ZRANGESTORE r z 0 2",
        "ZRANGE u 0 -1 WITHSCORES",
        "ZRANGE r 0 -1 WITHSCORES",
        "ZREM z a nope",
        "ZREMRANGEBYRANK l 1 2",
        "ZREMRANGEBYLEX l [e +",
        "ZREMRANGEBYSCORE z 7 +inf",
        "ZPOPMIN z",
        "ZPOPMAX z 2",
        "ZMPOP 2 nokey l MAX COUNT 2",
        "BZPOPMIN nokey z 0",
        "BZMPOP 0 1 z MIN COUNT 9",
        "BZPOPMAX nokey 0",
        "SET-STRING s",
        "ZADD s 1 a",
        "ZRANGE s 0 -1",
        "ZUNION 1 s",
        "ZCARD s",
        "ZRANGE l 0 -1 WITHSCORES",
        "ZRANGE z 0 -1 WITHSCORES",
    ];
    let [mut bytes, mut held] = views();
    for line in script {
        if let Some(key) = line.strip_prefix("SET-STRING ") {
            put_string(&mut bytes, key);
            put_string(&mut held, key);
            continue;
        }
        for resp3 in [false, true] {
            let run = |v: &mut TestView| {
                let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
                run_parts(v, &parts, resp3)
            };
            let (a, b) = (run(&mut bytes), run(&mut held));
            // ZRANDMEMBER's picks are random: compare their shape only.
            if line.starts_with("ZRANDMEMBER") {
                assert_eq!(a.len(), b.len(), "{line}");
            } else {
                assert_eq!(a, b, "{line} (resp3: {resp3})");
            }
        }
    }
    for key in ["z", "l", "u", "i", "d", "r", "s"] {
        assert_eq!(
            bytes.load(key.as_bytes()).unwrap(),
            held.load(key.as_bytes()).unwrap(),
            "{key}"
        );
    }
    assert!(held.held_count() > 0);
    assert_eq!(bytes.held_count(), 0);
    assert_eq!((bytes.hits, bytes.misses), (held.hits, held.misses));
}

/// `memory()` follows the members inserted and removed, in O(1).
#[test]
fn memory_follows_the_members() {
    use crate::collection::Collection;
    let mut z = ZSet::default();
    let empty = Collection::memory(&z);
    z.insert(&[b'x'; 1000], Score::new(1.0).unwrap());
    let one = Collection::memory(&z);
    assert!(one >= empty + 1000, "{empty} {one}");
    z.insert(&[b'x'; 1000], Score::new(2.0).unwrap());
    assert_eq!(Collection::memory(&z), one, "a new score, no new bytes");
    z.insert(&[b'y'; 10], Score::new(2.0).unwrap());
    z.remove(&[b'y'; 10]);
    assert_eq!(Collection::memory(&z), one);
    z.pop(false);
    assert_eq!(Collection::memory(&z), empty);
    let back = ZSet::decode(&Bytes::from(sample().encode())).unwrap();
    assert_eq!(Collection::memory(&back), Collection::memory(&sample()));
}
