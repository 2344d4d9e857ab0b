//! The hash commands over a plain map view: the semantics alone. (Over the standalone
//! keyspace, with a model test, in `meridian-server`'s `keyspace::hash_tests`.)

use super::*;
use crate::OwnedArgs;
use crate::test_view::TestView as MapView;
use crate::view::Entry;
use proptest::prelude::*;

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

/// The bulk strings of a reply, in order (for replies whose strings hold no CR or LF).
fn bulks(reply: &str) -> Vec<String> {
    let lines: Vec<&str> = reply.split("\r\n").collect();
    lines
        .windows(2)
        .filter(|w| w[0].starts_with('$') && w[0] != "$-1")
        .map(|w| w[1].to_string())
        .collect()
}

/// Both kinds of view: one of bytes (a cluster's, a MULTI overlay) and one that holds
/// hashes in memory as tables (the standalone keyspace's path).
fn both_views() -> [MapView; 2] {
    [MapView::new(), MapView::holding()]
}

/// HSCAN over a hash beyond [`HSCAN_WHOLE`] fields iterates with a cursor: a field present
/// for the whole iteration comes exactly once, though other fields come and go between
/// calls, and the iteration ends within its bound of calls; MATCH and NOVALUES apply to each
/// call. A hash of at most `HSCAN_WHOLE` fields comes whole, cursor 0.
#[test]
fn hscan_of_a_large_hash_returns_every_lasting_field_once() {
    for mut v in both_views() {
        let size = 1000usize;
        let pairs: Vec<String> = (0..size).map(|i| format!("s{i} v{i}")).collect();
        line(&mut v, &format!("HSET h {}", pairs.join(" ")));
        let (mut cursor, mut calls) = (0u64, 0usize);
        let mut seen: Vec<String> = Vec::new();
        loop {
            let got = bulks(&line(&mut v, &format!("HSCAN h {cursor} COUNT 20")));
            cursor = got[0].parse().unwrap();
            for pair in got[1..].chunks(2) {
                let want = if pair[0].starts_with('s') {
                    format!("v{}", &pair[0][1..])
                } else {
                    "x".into()
                };
                assert_eq!(pair[1], want, "a field with its value");
                seen.push(pair[0].clone());
            }
            // Churn between calls: a field added, and another (never a lasting one) removed.
            line(&mut v, &format!("HSET h t{calls} x"));
            line(&mut v, &format!("HDEL h t{}", calls / 2));
            calls += 1;
            assert!(
                calls <= crate::scan::ELEMENT_SCAN_PASSES + 2 + size / 20,
                "terminates"
            );
            if cursor == 0 {
                break;
            }
        }
        assert!(calls > 1, "a large hash takes more than one call");
        let lasting: Vec<&String> = seen.iter().filter(|f| f.starts_with('s')).collect();
        let distinct: std::collections::BTreeSet<&&String> = lasting.iter().collect();
        assert_eq!(lasting.len(), size, "each lasting field exactly once");
        assert_eq!(distinct.len(), size);

        let got = bulks(&line(&mut v, "HSCAN h 0 MATCH s99* NOVALUES COUNT 100000"));
        assert!(got[1..].iter().all(|f| f.starts_with("s99")), "{got:?}");

        line(&mut v, "DEL small");
        let fields: Vec<String> = (0..HSCAN_WHOLE).map(|i| format!("f{i} 1")).collect();
        line(&mut v, &format!("HSET small {}", fields.join(" ")));
        let got = bulks(&line(&mut v, "HSCAN small 77 COUNT 1"));
        assert_eq!((got[0].as_str(), got.len()), ("0", 1 + 2 * HSCAN_WHOLE));
    }
}

#[derive(Clone, Debug)]
enum HashOp {
    Set(Vec<(u8, u8)>),
    SetNx(u8, u8),
    Del(Vec<u8>),
    IncrBy(u8, i8),
    Read(&'static str, u8),
}

fn hash_op() -> impl Strategy<Value = HashOp> {
    use proptest::collection::vec;
    prop_oneof![
        4 => vec((0u8..30, any::<u8>()), 1..4).prop_map(HashOp::Set),
        1 => (0u8..30, any::<u8>()).prop_map(|(f, v)| HashOp::SetNx(f, v)),
        2 => vec(0u8..30, 1..4).prop_map(HashOp::Del),
        1 => (0u8..30, any::<i8>()).prop_map(|(f, d)| HashOp::IncrBy(f, d)),
        3 => (
            prop::sample::select(vec!["HGET", "HEXISTS", "HSTRLEN", "HLEN", "HGETALL",
                "HKEYS", "HVALS", "HSCAN", "HMGET", "HRANDFIELD_ALL", "TYPE"]),
            0u8..30,
        ).prop_map(|(c, f)| HashOp::Read(c, f)),
    ]
}

fn hash_op_line(op: &HashOp) -> String {
    match op {
        HashOp::Set(pairs) => {
            let p: Vec<String> = pairs
                .iter()
                .map(|(f, v)| format!("f{f} {}", v % 7))
                .collect();
            format!("HSET h {}", p.join(" "))
        }
        HashOp::SetNx(f, v) => format!("HSETNX h f{f} {v}"),
        HashOp::Del(fs) => {
            let f: Vec<String> = fs.iter().map(|f| format!("f{f}")).collect();
            format!("HDEL h {}", f.join(" "))
        }
        HashOp::IncrBy(f, d) => format!("HINCRBY h f{f} {d}"),
        HashOp::Read("HSCAN", _) => "HSCAN h 0 COUNT 1000".to_string(),
        HashOp::Read("HRANDFIELD_ALL", _) => "HRANDFIELD h 100 WITHVALUES".to_string(),
        HashOp::Read(c @ ("HLEN" | "HGETALL" | "HKEYS" | "HVALS" | "TYPE"), _) => format!("{c} h"),
        HashOp::Read(c, f) => format!("{c} h f{f}"),
    }
}

proptest! {
    /// A view of bytes and a view holding the hash as a table answer every sequence of hash
    /// commands alike, reply for reply (orders included), and store the same hash.
    #[test]
    fn held_and_stored_hashes_answer_alike(ops in proptest::collection::vec(hash_op(), 1..60)) {
        let [mut bytes, mut held] = both_views();
        for op in &ops {
            let l = hash_op_line(op);
            let (b, h) = (line(&mut bytes, &l), line(&mut held, &l));
            if matches!(op, HashOp::Read("HGETALL" | "HKEYS" | "HVALS" | "HSCAN" | "HRANDFIELD_ALL", _)) {
                // A held small hash answers in insertion order, a stored one in field order.
                let (mut b, mut h) = (bulks(&b), bulks(&h));
                b.sort();
                h.sort();
                prop_assert_eq!(b, h, "{}", l);
            } else {
                prop_assert_eq!(b, h, "{}", l);
            }
        }
        prop_assert_eq!(held.held_count(), usize::from(line(&mut held, "EXISTS h") == ":1\r\n"));
    }
}
