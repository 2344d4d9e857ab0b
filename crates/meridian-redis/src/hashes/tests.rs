//! The hash commands over a plain map view: the semantics alone. (Over the standalone
//! keyspace, with a model test, in `meridian-server`'s `keyspace::hash_tests`.)

use super::*;
use crate::OwnedArgs;
use crate::test_view::TestView as MapView;
use crate::view::Entry;

/// Builds the arguments of `parts` and runs them with `f`, returning the reply's bytes.
fn with_args(parts: &[&[u8]], f: impl FnOnce(Cmd, Args<'_>, &mut Reply)) -> Vec<u8> {
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    f(cmd, args, &mut reply);
    reply.out.to_vec()
}

/// Runs one command (hash or string) over `v`, as EXEC would.
fn run_on(v: &mut dyn View, parts: &[&[u8]], resp3: bool) -> Vec<u8> {
    with_args(parts, |cmd, args, reply| {
        reply.resp3 = resp3;
        let r = if handles(cmd) {
            exec_on_view(cmd, args, v, reply)
        } else if cmd.spec().arity_ok(args.len()) {
            crate::strings::exec_on_view(cmd, args, v, reply)
        } else {
            Err(arity_error(cmd.spec().name))
        };
        if let Err(e) = r {
            reply.command_error(e);
        }
    })
}

fn line(v: &mut MapView, l: &str) -> String {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    String::from_utf8(run_on(v, &parts, false)).unwrap()
}

fn map_view() -> MapView {
    let mut v = MapView::new();
    v.max = 64;
    v
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[test]
fn hash_commands_reply_as_redis() {
    let mut v = map_view();
    assert_eq!(line(&mut v, "HSET h b 2 a 1"), ":2\r\n");
    assert_eq!(
        line(&mut v, "HSET h a 9 c 3"),
        ":1\r\n",
        "a updated, c created"
    );
    assert_eq!(line(&mut v, "HMSET h d 4"), "+OK\r\n");
    assert_eq!(
        line(&mut v, "HSET h a"),
        "-ERR wrong number of arguments for 'hset' command\r\n"
    );
    assert_eq!(
        line(&mut v, "HSET h a 1 b"),
        "-ERR wrong number of arguments for 'hset' command\r\n"
    );
    assert_eq!(
        line(&mut v, "HMSET h a 1 b"),
        "-ERR wrong number of arguments for 'hmset' command\r\n"
    );
    assert_eq!(line(&mut v, "HGET h a"), "$1\r\n9\r\n");
    assert_eq!(line(&mut v, "HGET h zz"), "$-1\r\n");
    assert_eq!(line(&mut v, "HGET nokey a"), "$-1\r\n");
    assert_eq!(
        line(&mut v, "HMGET h a zz b"),
        "*3\r\n$1\r\n9\r\n$-1\r\n$1\r\n2\r\n"
    );
    assert_eq!(line(&mut v, "HMGET nokey a b"), "*2\r\n$-1\r\n$-1\r\n");
    assert_eq!(line(&mut v, "HLEN h"), ":4\r\n");
    assert_eq!(line(&mut v, "HLEN nokey"), ":0\r\n");
    assert_eq!(
        line(&mut v, "HGETALL h"),
        "*8\r\n$1\r\na\r\n$1\r\n9\r\n$1\r\nb\r\n$1\r\n2\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nd\r\n$1\r\n4\r\n",
        "sorted by field"
    );
    assert_eq!(
        line(&mut v, "HKEYS h"),
        "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"
    );
    assert_eq!(
        line(&mut v, "HVALS h"),
        "*4\r\n$1\r\n9\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n"
    );
    assert_eq!(line(&mut v, "HGETALL nokey"), "*0\r\n");
    assert_eq!(line(&mut v, "HEXISTS h a"), ":1\r\n");
    assert_eq!(line(&mut v, "HEXISTS h zz"), ":0\r\n");
    assert_eq!(line(&mut v, "HSTRLEN h a"), ":1\r\n");
    assert_eq!(line(&mut v, "HSTRLEN h zz"), ":0\r\n");
    assert_eq!(line(&mut v, "HSETNX h a 5"), ":0\r\n");
    assert_eq!(line(&mut v, "HSETNX h e 5"), ":1\r\n");
    assert_eq!(line(&mut v, "HINCRBY h a 1"), ":10\r\n");
    assert_eq!(line(&mut v, "HINCRBY h new -5"), ":-5\r\n");
    assert_eq!(
        line(&mut v, "HINCRBY h a x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(line(&mut v, "HSET h s abc"), ":1\r\n");
    assert_eq!(
        line(&mut v, "HINCRBY h s 1"),
        "-ERR hash value is not an integer\r\n"
    );
    assert_eq!(
        line(&mut v, "HINCRBY h a 9223372036854775807"),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(line(&mut v, "HINCRBYFLOAT h a 0.5"), "$4\r\n10.5\r\n");
    assert_eq!(
        line(&mut v, "HINCRBYFLOAT h s 1"),
        "-ERR hash value is not a float\r\n"
    );
    assert_eq!(
        line(&mut v, "HINCRBYFLOAT h a x"),
        "-ERR value is not a valid float\r\n"
    );
    assert_eq!(
        line(&mut v, "HINCRBYFLOAT h a inf"),
        "-ERR value is NaN or Infinity\r\n"
    );
    assert_eq!(line(&mut v, "HSET h big 1e308"), ":1\r\n");
    assert_eq!(
        line(&mut v, "HINCRBYFLOAT h big 1e308"),
        "-ERR increment would produce NaN or Infinity\r\n"
    );
    assert_eq!(
        line(&mut v, "HDEL h a a zz"),
        ":1\r\n",
        "a field twice counts once"
    );
    assert_eq!(line(&mut v, "HDEL nokey a"), ":0\r\n");
    assert_eq!(line(&mut v, "TYPE h"), "+hash\r\n");
    assert_eq!(line(&mut v, "HDEL h b c d e new s big"), ":7\r\n");
    assert_eq!(
        line(&mut v, "EXISTS h"),
        ":0\r\n",
        "an empty hash does not exist"
    );
    assert_eq!(line(&mut v, "TYPE h"), "+none\r\n");
    assert_eq!(
        line(&mut v, "HGET"),
        "-ERR wrong number of arguments for 'hget' command\r\n",
        "a caller that skipped the arity check gets the error, not a panic"
    );
}

#[test]
fn wrong_type_both_ways_and_type_agnostic_commands() {
    let mut v = map_view();
    line(&mut v, "SET s v");
    line(&mut v, "HSET h f 1");
    for cmd in [
        "HSET s f 1",
        "HSETNX s f 1",
        "HMSET s f 1",
        "HGET s f",
        "HMGET s f",
        "HGETALL s",
        "HDEL s f",
        "HEXISTS s f",
        "HLEN s",
        "HSTRLEN s f",
        "HINCRBY s f 1",
        "HINCRBYFLOAT s f 1",
        "HKEYS s",
        "HVALS s",
        "HSCAN s 0",
        "HSCAN s 0 BADOPT",
        "HRANDFIELD s",
        "HRANDFIELD s 2",
    ] {
        assert_eq!(line(&mut v, cmd), WRONGTYPE, "{cmd}");
    }
    for cmd in [
        "GET h",
        "SET h v GET",
        "SET h v NX GET",
        "GETSET h v",
        "GETDEL h",
        "GETEX h",
        "GETEX h PERSIST",
        "GETEX h EX x",
        "INCR h",
        "DECR h",
        "INCRBY h 1",
        "DECRBY h 1",
        "INCRBYFLOAT h 1",
        "INCRBYFLOAT h x",
        "APPEND h x",
        "STRLEN h",
        "GETRANGE h 0 -1",
        "SUBSTR h 0 -1",
        "SETRANGE h 0 x",
        "SETRANGE h 0 ",
    ] {
        let parts: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
        assert_eq!(
            String::from_utf8(run_on(&mut v, &parts, false)).unwrap(),
            WRONGTYPE,
            "{cmd}"
        );
    }
    // Argument errors Redis reports before the type.
    assert_eq!(
        line(&mut v, "INCRBY h x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        line(&mut v, "SETRANGE h -1 x"),
        "-ERR offset is out of range\r\n"
    );
    assert_eq!(
        line(&mut v, "HINCRBY s f x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(line(&mut v, "HSCAN s x"), "-ERR invalid cursor\r\n");
    assert_eq!(
        line(&mut v, "GETEX nokey EX x"),
        "$-1\r\n",
        "a missing key first"
    );
    // MGET: nil for a non-string; SETNX/MSETNX see a key; the rest is type-agnostic.
    assert_eq!(
        line(&mut v, "MGET h s nokey"),
        "*3\r\n$-1\r\n$1\r\nv\r\n$-1\r\n"
    );
    assert_eq!(line(&mut v, "SETNX h x"), ":0\r\n");
    assert_eq!(line(&mut v, "MSETNX h x"), ":0\r\n");
    assert_eq!(line(&mut v, "SET h v XX KEEPTTL"), "+OK\r\n");
    assert_eq!(
        line(&mut v, "TYPE h"),
        "+string\r\n",
        "SET overwrites a hash"
    );
    line(&mut v, "DEL h");
    line(&mut v, "HSET h f 1");
    assert_eq!(line(&mut v, "EXPIRE h 100"), ":1\r\n");
    assert_eq!(line(&mut v, "HSET h g 2"), ":1\r\n");
    assert_eq!(
        line(&mut v, "TTL h"),
        ":100\r\n",
        "a hash write keeps the TTL"
    );
    assert_eq!(line(&mut v, "TYPE h"), "+hash\r\n", "EXPIRE keeps the type");
    assert_eq!(line(&mut v, "PERSIST h"), ":1\r\n");
    assert_eq!(
        line(&mut v, "TYPE h"),
        "+hash\r\n",
        "PERSIST keeps the type"
    );
    assert_eq!(line(&mut v, "HLEN h"), ":2\r\n");
    assert_eq!(line(&mut v, "EXISTS h s"), ":2\r\n");
    assert_eq!(line(&mut v, "DEL h s"), ":2\r\n");
}

#[test]
fn hscan_and_hrandfield_arguments() {
    let mut v = map_view();
    line(&mut v, "HSET h a 1 b 2 ab 3");
    let all = "*2\r\n$1\r\n0\r\n*6\r\n$1\r\na\r\n$1\r\n1\r\n$2\r\nab\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n";
    assert_eq!(line(&mut v, "HSCAN h 0"), all);
    assert_eq!(
        line(&mut v, "HSCAN h 123 COUNT 1"),
        all,
        "one call, cursor 0"
    );
    assert_eq!(line(&mut v, "HSCAN h 18446744073709551615"), all);
    assert_eq!(
        line(&mut v, "HSCAN h 0 MATCH a*"),
        "*2\r\n$1\r\n0\r\n*4\r\n$1\r\na\r\n$1\r\n1\r\n$2\r\nab\r\n$1\r\n3\r\n"
    );
    assert_eq!(
        line(&mut v, "HSCAN h 0 MATCH a* NOVALUES"),
        "*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$2\r\nab\r\n"
    );
    for bad in [
        "HSCAN h 0 COUNT 0",
        "HSCAN h 0 COUNT -1",
        "HSCAN h 0 MATCH",
        "HSCAN h 0 COUNT",
        "HSCAN h 0 TYPE string",
        "HSCAN h 0 BADOPT",
    ] {
        assert_eq!(line(&mut v, bad), "-ERR syntax error\r\n", "{bad}");
    }
    assert_eq!(
        line(&mut v, "HSCAN h 0 COUNT 99999999999999999999"),
        "-ERR value is not an integer or out of range\r\n"
    );
    for bad in ["HSCAN h x", "HSCAN h -1", "HSCAN h 18446744073709551616"] {
        assert_eq!(line(&mut v, bad), "-ERR invalid cursor\r\n", "{bad}");
    }
    assert_eq!(
        line(&mut v, "HSCAN nokey 0 BADOPT"),
        "*2\r\n$1\r\n0\r\n*0\r\n",
        "a missing key: the empty scan whatever the options"
    );
    // HRANDFIELD.
    let one = line(&mut v, "HRANDFIELD h");
    assert!(
        ["$1\r\na\r\n", "$1\r\nb\r\n", "$2\r\nab\r\n"].contains(&one.as_str()),
        "{one}"
    );
    assert_eq!(line(&mut v, "HRANDFIELD nokey"), "$-1\r\n");
    assert_eq!(line(&mut v, "HRANDFIELD nokey 5"), "*0\r\n");
    assert_eq!(line(&mut v, "HRANDFIELD h 0"), "*0\r\n");
    assert_eq!(
        line(&mut v, "HRANDFIELD h 10 WITHVALUES"),
        "*6\r\n$1\r\na\r\n$1\r\n1\r\n$2\r\nab\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n"
    );
    assert!(line(&mut v, "HRANDFIELD h 2").starts_with("*2\r\n"));
    let rep = line(&mut v, "HRANDFIELD h -7");
    assert!(rep.starts_with("*7\r\n"), "repetitions: {rep}");
    assert!(line(&mut v, "HRANDFIELD h -7 withvalues").starts_with("*14\r\n"));
    let mut r3 = |l: &str| {
        let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
        String::from_utf8(run_on(&mut v, &parts, true)).unwrap()
    };
    assert!(
        r3("HRANDFIELD h -2 WITHVALUES").starts_with("*2\r\n*2\r\n"),
        "RESP3 pairs"
    );
    assert!(r3("HGETALL h").starts_with("%3\r\n"), "RESP3 map");
    assert_eq!(
        line(&mut v, "HRANDFIELD h x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        line(&mut v, "HRANDFIELD h -9223372036854775808"),
        "-ERR value is out of range, value must between -9223372036854775807 and \
         9223372036854775807\r\n"
    );
    assert_eq!(
        line(&mut v, "HRANDFIELD h 9223372036854775807 WITHVALUES"),
        "-ERR value is out of range\r\n"
    );
    assert_eq!(
        line(&mut v, "HRANDFIELD h -9223372036854775807"),
        "-ERR value is out of range\r\n",
        "a reply of 2^63 elements is refused, not built"
    );
    assert_eq!(
        line(&mut v, "HRANDFIELD h 5 WITHVALUE"),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        line(&mut v, "HRANDFIELD h 5 WITHVALUES x"),
        "-ERR syntax error\r\n"
    );
}

#[test]
fn the_value_limit_holds_for_the_encoded_hash() {
    let mut v = map_view();
    let long = "x".repeat(40);
    assert_eq!(line(&mut v, &format!("HSET h a {long}")), ":1\r\n");
    assert_eq!(
        line(&mut v, &format!("HSET h b {long}")),
        "-ERR hash exceeds maximum allowed size (proto-max-bulk-len)\r\n"
    );
    assert_eq!(line(&mut v, "HLEN h"), ":1\r\n", "nothing changed");
}

#[test]
fn damaged_hash_data_is_an_error_not_a_panic() {
    let mut v = map_view();
    v.map.insert(
        b"h".to_vec(),
        Entry::hash(Bytes::from_static(&[0xff, 0xff, 0xff])),
    );
    for cmd in ["HGET h a", "HLEN h", "HSET h a 1", "HGETALL h", "HSCAN h 0"] {
        assert!(line(&mut v, cmd).starts_with("-ERR stored value"), "{cmd}");
    }
    assert_eq!(line(&mut v, "DEL h"), ":1\r\n");
}
