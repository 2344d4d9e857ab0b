//! Lua scripting on a single node, end to end over RESP: EVAL/EVALSHA/SCRIPT with Redis 7's
//! replies and errors, scripts atomic against concurrent clients, the busy script that
//! SCRIPT KILL stops while the node serves on, sandbox escapes refused over the wire, and the
//! `redis` crate's `Script` API (EVALSHA with its EVAL fallback).

use super::*;

fn bulk(s: &str) -> Frame {
    Frame::Bulk(bytes::Bytes::copy_from_slice(s.as_bytes()))
}

#[tokio::test]
async fn eval_evalsha_and_script_answer_as_redis() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"EVAL \"return redis.call('set', KEYS[1], ARGV[1])\" 1 k v\r\n",
        b"+OK\r\n",
    )
    .await;
    c.roundtrip(
        b"EVAL \"return {redis.call('get', KEYS[1]), 1, true, false, 3.9}\" 1 k\r\n",
        b"*5\r\n$1\r\nv\r\n:1\r\n:1\r\n$-1\r\n:3\r\n",
    )
    .await;
    let sha = meridian_lua::sha1_hex(b"return ARGV[1]");
    c.roundtrip(
        b"SCRIPT LOAD \"return ARGV[1]\"\r\n",
        format!("$40\r\n{sha}\r\n").as_bytes(),
    )
    .await;
    c.roundtrip(
        format!(
            "EVALSHA {} 0 hi\r\nSCRIPT EXISTS {sha} nope\r\n",
            sha.to_uppercase()
        )
        .as_bytes(),
        b"$2\r\nhi\r\n*2\r\n:1\r\n:0\r\n",
    )
    .await;
    c.roundtrip(
        b"SCRIPT FLUSH\r\nEVALSHA ffffffffffffffffffffffffffffffffffffffff 0\r\n",
        b"+OK\r\n-NOSCRIPT No matching script. Please use EVAL.\r\n",
    )
    .await;
    c.roundtrip(
        b"EVAL \"return 1\" 2 a\r\nEVAL \"return 1\" -1\r\nEVAL \"return 1\" x\r\n",
        b"-ERR Number of keys can't be greater than number of args\r\n\
          -ERR Number of keys can't be negative\r\n\
          -ERR value is not an integer or out of range\r\n",
    )
    .await;
    // Command errors inside scripts: raised by redis.call, returned by redis.pcall.
    let body = "return redis.call('nosuch')";
    c.roundtrip(
        format!("EVAL \"{body}\" 0\r\n").as_bytes(),
        format!(
            "-ERR Unknown Redis command called from script script: {}, on @user_script:1.\r\n",
            meridian_lua::sha1_hex(body.as_bytes())
        )
        .as_bytes(),
    )
    .await;
    c.roundtrip(
        b"EVAL \"return redis.pcall('incr', KEYS[1])\" 1 k\r\n",
        b"-ERR value is not an integer or out of range\r\n",
    )
    .await;
    for (body, want) in [
        (
            "return redis.call('multi')",
            "This Redis command is not allowed from script",
        ),
        (
            "return redis.call('get')",
            "Wrong number of args calling Redis command from script",
        ),
    ] {
        let Frame::Error(e) = c.cmd(&[b"EVAL", body.as_bytes(), b"1", b"k"]).await else {
            panic!("{body} fails");
        };
        assert!(String::from_utf8_lossy(&e).contains(want), "{body}: {e:?}");
    }
    // A key the script did not declare: the script runs again under every lock, its first
    // attempt's writes discarded (the counter moves once).
    c.roundtrip(b"SET other o\r\nSET n 0\r\n", b"+OK\r\n+OK\r\n")
        .await;
    c.roundtrip(
        b"EVAL \"redis.call('incr', KEYS[1]) return {redis.call('get', 'other'), redis.call('get', KEYS[1]), #redis.call('keys', '*')}\" 1 n\r\n",
        b"*3\r\n$1\r\no\r\n$1\r\n1\r\n:3\r\n",
    )
    .await;
    // One that published first cannot be run again, but takes the undeclared key's lock when
    // no one holds it, as Redis (single-threaded) lets it reach any key.
    assert_eq!(
        c.cmd(&[
            b"EVAL",
            b"redis.call('publish', 'ch', 'm') return redis.call('get', 'other')",
            b"1",
            b"k",
        ])
        .await,
        bulk("o")
    );
    // Read-only forms and no-writes scripts refuse writes.
    let Frame::Error(e) = c
        .cmd(&[b"EVAL_RO", b"return redis.call('del', KEYS[1])", b"1", b"k"])
        .await
    else {
        panic!("a write in EVAL_RO fails");
    };
    assert!(e.starts_with(b"ERR Write commands are not allowed from read-only scripts."));
    assert_eq!(
        c.cmd(&[b"EVAL_RO", b"#!lua\nreturn 1", b"0"]).await,
        Frame::Error("ERR Can not execute a script with write flag using *_ro command.".into())
    );
    assert_eq!(
        c.cmd(&[
            b"EVAL_RO",
            b"#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])",
            b"1",
            b"k"
        ])
        .await,
        bulk("v")
    );
    // RESP3: the script's RESP3 replies come back typed.
    c.roundtrip(b"HELLO 3\r\n", b"").await;
    let _ = c.frame().await;
    c.roundtrip(
        b"EVAL \"redis.setresp(3) return {double = 1.5}\" 0\r\nEVAL \"redis.setresp(3) return true\" 0\r\n",
        b",1.5\r\n#t\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_scripts_lose_no_update() {
    let s = Server::default().await;
    let body = "local v = tonumber(redis.call('get', KEYS[1]) or '0') \
                redis.call('set', KEYS[1], v + 1) return v + 1";
    let clients = (0..4).map(|_| {
        let url = s.url();
        tokio::task::spawn_blocking(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            let script = redis::Script::new(body);
            for _ in 0..250 {
                let _: i64 = script.key("counter").invoke(&mut con).unwrap();
            }
        })
    });
    for c in clients.collect::<Vec<_>>() {
        tokio::time::timeout(PATIENCE, c).await.unwrap().unwrap();
    }
    let mut c = s.connect().await;
    c.roundtrip(b"GET counter\r\n", b"$4\r\n1000\r\n").await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_script_is_killed_while_the_node_serves() {
    let s = Server::default().await;
    let mut admin = s.connect().await;
    admin
        .roundtrip(
            b"CONFIG SET busy-reply-threshold 100\r\nSET k v\r\n",
            b"+OK\r\n+OK\r\n",
        )
        .await;
    let mut looping = s.connect().await;
    looping.send(b"EVAL \"while true do end\" 0\r\n").await;
    // Another client is answered BUSY once the threshold passed, and SCRIPT KILL works.
    let mut other = s.connect().await;
    loop {
        match other.cmd(&[b"GET", b"k"]).await {
            Frame::Error(e) if e.starts_with(b"BUSY ") => break,
            // The script may not have started yet.
            Frame::Bulk(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            f => panic!("GET while busy: {f:?}"),
        }
    }
    admin.roundtrip(b"SCRIPT KILL\r\n", b"+OK\r\n").await;
    let Frame::Error(e) = looping.frame().await else {
        panic!("the killed script fails");
    };
    assert!(e.starts_with(b"ERR Script killed by user with SCRIPT KILL..."));
    other.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n").await;
    admin
        .roundtrip(
            b"SCRIPT KILL\r\n",
            b"-NOTBUSY No scripts in execution right now.\r\n",
        )
        .await;
    // A script that wrote cannot be killed: it runs to its end, and its writes apply whole.
    looping
        .send(b"EVAL \"redis.call('set', 'w', '1') local i = 0 while i < 3e6 do i = i + 1 end return i\" 0\r\n")
        .await;
    loop {
        match admin.cmd(&[b"SCRIPT", b"KILL"]).await {
            Frame::Error(e) if e.starts_with(b"UNKILLABLE ") => break,
            Frame::Error(e) if e.starts_with(b"NOTBUSY ") => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            f => panic!("SCRIPT KILL of a writer: {f:?}"),
        }
    }
    assert_eq!(looping.frame().await, Frame::Integer(3_000_000));
    other.roundtrip(b"GET w\r\n", b"$1\r\n1\r\n").await;
    s.stop().await;
}

#[tokio::test]
async fn sandbox_escapes_are_refused_over_the_wire() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    for body in [
        "return os.execute('id')",
        "return io.open('/etc/passwd'):read('*a')",
        "return loadstring(string.dump(function() return 1 end))()",
        "return debug.getinfo(1)",
        "return require('os')",
        "package = 1",
        "redis.call = nil",
        "setmetatable(_G, nil)",
    ] {
        let Frame::Error(_) = c.cmd(&[b"EVAL", body.as_bytes(), b"0"]).await else {
            panic!("{body} is refused");
        };
    }
    // The node still serves, scripts included.
    c.roundtrip(b"EVAL \"return 'alive'\" 0\r\n", b"$5\r\nalive\r\n")
        .await;
    s.stop().await;
}

#[tokio::test]
async fn functions_load_list_call_dump_and_restore() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let code = "#!lua name=mylib\n\
                redis.register_function('incr_by', function(keys, args) \
                return redis.call('incrby', keys[1], args[1]) end)\n\
                redis.register_function{function_name='peek', flags={'no-writes'}, \
                callback=function(keys) return redis.call('get', keys[1]) end}";
    assert_eq!(
        c.cmd(&[b"FUNCTION", b"LOAD", code.as_bytes()]).await,
        bulk("mylib")
    );
    c.roundtrip(
        b"FCALL incr_by 1 n 5\r\nFCALL_RO PEEK 1 n\r\nFCALL_RO incr_by 1 n 1\r\n",
        b":5\r\n$1\r\n5\r\n-ERR Can not execute a script with write flag using *_ro command.\r\n",
    )
    .await;
    c.roundtrip(
        b"FUNCTION LIST\r\n",
        b"*1\r\n*6\r\n$12\r\nlibrary_name\r\n$5\r\nmylib\r\n$6\r\nengine\r\n$3\r\nLUA\r\n\
          $9\r\nfunctions\r\n*2\r\n\
          *6\r\n$4\r\nname\r\n$7\r\nincr_by\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*0\r\n\
          *6\r\n$4\r\nname\r\n$4\r\npeek\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*1\r\n$9\r\nno-writes\r\n",
    )
    .await;
    let Frame::Bulk(dump) = c.cmd(&[b"FUNCTION", b"DUMP"]).await else {
        panic!("DUMP answers a payload");
    };
    c.roundtrip(
        b"FUNCTION FLUSH\r\nFCALL incr_by 1 n 1\r\n",
        b"+OK\r\n-ERR Function not found\r\n",
    )
    .await;
    assert_eq!(
        c.cmd(&[b"FUNCTION", b"RESTORE", &dump]).await,
        Frame::Simple("OK".into())
    );
    c.roundtrip(b"FCALL incr_by 1 n 1\r\n", b":6\r\n").await;
    // A damaged payload is refused and changes nothing.
    let mut bad = dump.to_vec();
    bad[0] ^= 1;
    assert_eq!(
        c.cmd(&[b"FUNCTION", b"RESTORE", &bad, b"FLUSH"]).await,
        Frame::Error("ERR DUMP payload version or checksum are wrong".into())
    );
    c.roundtrip(b"FCALL incr_by 1 n 1\r\n", b":7\r\n").await;
    // SCRIPT FLUSH leaves the libraries.
    c.roundtrip(b"SCRIPT FLUSH\r\nFCALL incr_by 1 n 1\r\n", b"+OK\r\n:8\r\n")
        .await;
    s.stop().await;
}

#[tokio::test]
async fn scripts_queue_in_multi_and_exec_runs_them_atomically() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"MULTI\r\nSET a 1\r\nEVAL \"return redis.call('incr', KEYS[1]) + redis.call('incr', 'b')\" 1 a\r\nFCALL nope 0\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n:3\r\n-ERR Function not found\r\n",
    )
    .await;
    // The node still serves the keys EXEC locked.
    c.roundtrip(b"MGET a b\r\n", b"*2\r\n$1\r\n2\r\n$1\r\n1\r\n")
        .await;
    s.stop().await;
}

#[tokio::test]
async fn hostile_scripts_are_bounded_and_the_node_serves_on() {
    let s = Server::start(RespConfig {
        limits: RespLimits {
            max_script_memory: 8 << 20,
            ..RespLimits::default()
        },
        ..RespConfig::default()
    })
    .await;
    let mut c = s.connect().await;
    for (body, want) in [
        // Memory past the cap.
        (
            "local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 100) .. i end",
            "not enough memory",
        ),
        // Deep recursion.
        (
            "local function f(n) return f(n + 1) + 1 end return f(1)",
            "stack overflow",
        ),
    ] {
        let got = c.cmd(&[b"EVAL", body.as_bytes(), b"0"]).await;
        assert!(format!("{got:?}").contains(want), "{body}: {got:?}");
    }
    // A table that contains itself: nested arrays down to Redis's error, as Redis replies.
    let mut want = "*1\r\n".repeat(201);
    want.push_str("-ERR reached lua stack limit\r\n");
    c.roundtrip(
        b"EVAL \"local t = {} t[1] = t return t\" 0\r\n",
        want.as_bytes(),
    )
    .await;
    // As many arguments as Lua can pass to one call.
    c.roundtrip(
        b"EVAL \"local t = {'del'} for i = 1, 7000 do t[#t + 1] = 'k' .. i end return redis.call(unpack(t))\" 0\r\n",
        b":0\r\n",
    )
    .await;
    c.roundtrip(b"EVAL \"return 'alive'\" 0\r\n", b"$5\r\nalive\r\n")
        .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_a_script_that_never_ends() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.send(b"EVAL \"redis.call('set', 'w', '1') while true do end\" 0\r\n")
        .await;
    let mut other = s.connect().await;
    // Wait until it runs (it has written, so SCRIPT KILL cannot stop it).
    loop {
        match other.cmd(&[b"SCRIPT", b"KILL"]).await {
            Frame::Error(e) if e.starts_with(b"UNKILLABLE") => break,
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    let ks = s.ctx.keyspace().clone();
    // `stop` waits for every connection: the script is halted and its write discarded.
    s.stop().await;
    assert_eq!(ks.get(b"w").unwrap(), None);
}

#[tokio::test]
async fn min_replicas_to_write_refuses_writes_as_a_primary_without_replicas() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    const NOREPLICAS: &[u8] = b"-NOREPLICAS Not enough good replicas to write.\r\n";
    c.roundtrip(
        b"SET x v\r\nCONFIG SET min-replicas-to-write 1\r\nCONFIG GET min-replicas-to-write\r\n",
        b"+OK\r\n+OK\r\n*2\r\n$21\r\nmin-replicas-to-write\r\n$1\r\n1\r\n",
    )
    .await;
    // Reads run; writes, a transaction queuing one, and scripts that may write do not.
    c.roundtrip(b"GET x\r\n", b"$1\r\nv\r\n").await;
    c.roundtrip(b"SET x w\r\n", NOREPLICAS).await;
    c.roundtrip(
        b"MULTI\r\nSET x w\r\nEXEC\r\n",
        b"+OK\r\n-NOREPLICAS Not enough good replicas to write.\r\n\
          -EXECABORT Transaction discarded because of previous errors.\r\n",
    )
    .await;
    let get = |body: &'static str| [b"EVAL".as_slice(), body.as_bytes(), b"1", b"x"];
    let v = Frame::Bulk("v".into());
    assert_eq!(
        c.cmd(&get("#!lua flags=no-writes\nreturn redis.call('get','x')"))
            .await,
        v
    );
    assert_eq!(c.cmd(&get("return redis.call('get','x')")).await, v);
    assert_eq!(
        c.cmd(&get("#!lua\nreturn redis.call('get','x')")).await,
        Frame::Error("NOREPLICAS Not enough good replicas to write.".into())
    );
    let Frame::Error(e) = c
        .cmd(&[b"EVAL", b"return redis.call('set','x','w')", b"1", b"x"])
        .await
    else {
        panic!("a script's write is refused");
    };
    assert!(
        e.starts_with(b"NOREPLICAS Not enough good replicas to write."),
        "{e:?}"
    );
    c.roundtrip(
        b"CONFIG SET min-replicas-to-write 0\r\nSET x w\r\nGET x\r\n",
        b"+OK\r\n+OK\r\n$1\r\nw\r\n",
    )
    .await;
    c.roundtrip(
        b"CONFIG SET min-replicas-to-write -1\r\n",
        b"-ERR CONFIG SET failed (possibly related to argument 'min-replicas-to-write') - \
          argument couldn't be parsed into an integer\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_script_calls_run_in_order_with_other_commands() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let incr =
        "*4\r\n$4\r\nEVAL\r\n$34\r\nreturn redis.call('incr', KEYS[1])\r\n$1\r\n1\r\n$1\r\nn\r\n";
    // Script calls back to back, then a plain command, a script again, a MULTI the scripts
    // queue in, and an inline request: every reply in order, every call counted.
    let before = processed(&mut c).await;
    let pipeline =
        format!("{incr}{incr}{incr}SET m x\r\n{incr}MULTI\r\n{incr}EXEC\r\nGET n\r\n{incr}{incr}");
    c.roundtrip(
        pipeline.as_bytes(),
        b":1\r\n:2\r\n:3\r\n+OK\r\n:4\r\n+OK\r\n+QUEUED\r\n*1\r\n:5\r\n$1\r\n5\r\n:6\r\n:7\r\n",
    )
    .await;
    // 11 requests (the queued call counted once, when EXEC runs it) and the first INFO.
    assert_eq!(processed(&mut c).await - before, 12);
    // More calls than one batch runs: the rest follow in the next turns, in order.
    let expected: String = (8..108).map(|i| format!(":{i}\r\n")).collect();
    c.roundtrip(incr.repeat(100).as_bytes(), expected.as_bytes())
        .await;
    s.stop().await;
}

/// INFO's `total_commands_processed` (the INFO call itself not yet counted).
async fn processed(c: &mut Raw) -> u64 {
    let Frame::Bulk(text) = c.cmd(&[b"INFO", b"stats"]).await else {
        panic!("INFO is a bulk string");
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    text.split("\r\n")
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.parse().ok())
        .expect("total_commands_processed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scripts_are_atomic_over_their_keys_on_ordered_buckets() {
    use meridian_replication::BucketProps;
    // `meridian up`'s default (timeline) bucket, an eventual one and a transactional one.
    let c = super::cluster_mode::timeline_cluster(vec![
        ("ev".to_owned(), BucketProps::default()),
        (
            "tx".to_owned(),
            BucketProps::transactional(Default::default()),
        ),
    ])
    .await;
    let (mut a, mut b) = (
        super::cluster_mode::connect(&c, 0).await,
        super::cluster_mode::connect(&c, 3).await,
    );
    // A lock release: compare-and-delete, from either DC.
    let release = b"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
    assert_eq!(
        a.cmd(&[b"SET", b"{l}lock", b"me", b"NX", b"PX", b"60000"])
            .await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        b.cmd(&[b"EVAL", release, b"1", b"{l}lock", b"other"]).await,
        Frame::Integer(0)
    );
    assert_eq!(
        b.cmd(&[b"EVAL", release, b"1", b"{l}lock", b"me"]).await,
        Frame::Integer(1)
    );
    assert_eq!(a.cmd(&[b"EXISTS", b"{l}lock"]).await, Frame::Integer(0));
    // Concurrent increments through scripts from both DCs lose nothing.
    let incr = b"local v = redis.call('incr', KEYS[1]) redis.call('rpush', KEYS[2], v) return v";
    let (mut x, mut y) = (
        super::cluster_mode::connect(&c, 1).await,
        super::cluster_mode::connect(&c, 2).await,
    );
    let run = |mut conn: Raw| async move {
        for _ in 0..20 {
            let f = conn
                .cmd(&[b"EVAL", incr, b"2", b"{n}count", b"{n}log"])
                .await;
            assert!(matches!(f, Frame::Integer(_)), "{f:?}");
        }
        conn
    };
    let (x2, y2) = tokio::join!(run(x), run(y));
    (x, y) = (x2, y2);
    assert_eq!(x.cmd(&[b"GET", b"{n}count"]).await, bulk("40"));
    assert_eq!(y.cmd(&[b"LLEN", b"{n}log"]).await, Frame::Integer(40));
    // EVALSHA, FUNCTION LOAD and FCALL on the node they were loaded on.
    let Frame::Bulk(sha) = a
        .cmd(&[b"SCRIPT", b"LOAD", b"return redis.call('get', KEYS[1])"])
        .await
    else {
        panic!("SCRIPT LOAD answers the SHA-1");
    };
    assert_eq!(
        a.cmd(&[b"EVALSHA", &sha, b"1", b"{n}count"]).await,
        bulk("40")
    );
    let lib = b"#!lua name=lib\nredis.register_function('bump', function(k) return redis.call('incrby', k[1], 2) end)";
    assert_eq!(a.cmd(&[b"FUNCTION", b"LOAD", lib]).await, bulk("lib"));
    assert_eq!(
        a.cmd(&[b"FCALL", b"bump", b"1", b"{n}count"]).await,
        Frame::Integer(42)
    );
    // A transactional bucket's keys: one transaction.
    assert_eq!(
        a.cmd(&[
            b"EVAL",
            b"redis.call('set', KEYS[1], 'v') return redis.call('get', KEYS[1])",
            b"1",
            b"tx:{t}k"
        ])
        .await,
        bulk("v")
    );
    // What a script cannot do on a cluster node, each refused with the reason.
    let refused = |f: Frame| match f {
        Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    };
    let e = refused(
        a.cmd(&[b"EVAL", b"return redis.call('get', 'x')", b"1", b"{n}count"])
            .await,
    );
    assert!(e.contains("did not declare"), "{e}");
    let e = refused(
        a.cmd(&[b"EVAL", b"return redis.call('publish', 'ch', 'm')", b"0"])
            .await,
    );
    assert!(e.contains("PUBLISH is not served inside a script"), "{e}");
    let e = refused(
        a.cmd(&[
            b"EVAL",
            b"return redis.call('set', KEYS[1], 1)",
            b"1",
            b"ev:{e}k",
        ])
        .await,
    );
    assert!(e.contains("eventual"), "{e}");
    // A read-only script reads an eventual bucket's keys as GET does (from the writer's
    // node: an eventual read elsewhere may not see the write yet).
    assert_eq!(
        a.cmd(&[b"SET", b"ev:{e}k", b"seen"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        a.cmd(&[
            b"EVAL_RO",
            b"return redis.call('get', KEYS[1])",
            b"1",
            b"ev:{e}k"
        ])
        .await,
        bulk("seen")
    );
    let e = refused(a.cmd(&[b"EVAL", b"return 1", b"2", b"{a}x", b"{b}y"]).await);
    assert!(e.contains("CROSSSLOT") || e.contains("MOVED"), "{e}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_reaching_an_undeclared_key_applies_each_command_once() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    // BullMQ's shape: a list move over declared keys, then a job key it builds itself. The
    // move changed a held list in place: the script takes the new key's lock and goes on,
    // never running (and applying) the move twice.
    let script = b"redis.call('rpush', KEYS[1], 'a', 'b') \
        local id = redis.call('rpoplpush', KEYS[1], KEYS[2]) \
        redis.call('hset', 'job:' .. id, 'state', 'active') \
        return {redis.call('llen', KEYS[1]), redis.call('llen', KEYS[2])}";
    assert_eq!(
        c.cmd(&[b"EVAL", script, b"2", b"wait", b"active"]).await,
        Frame::Array(vec![Frame::Integer(1), Frame::Integer(1)])
    );
    assert_eq!(c.cmd(&[b"HGET", b"job:b", b"state"]).await, bulk("active"));
    assert_eq!(
        c.cmd(&[b"LRANGE", b"wait", b"0", b"-1"]).await,
        Frame::Array(vec![bulk("a")])
    );
    s.stop().await;
}
