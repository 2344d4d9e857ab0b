//! Redis hashes on a single node, end to end over RESP: Redis 7's exact replies and errors
//! (checked against redis-server 7.0 by `scripts/redis-txn-diff.sh`), hostile arguments,
//! WRONGTYPE both ways, the type-agnostic commands, MULTI/EXEC and WATCH on hash keys,
//! COMMAND's table, INFO's counts, and the HTTP API's answer for a hash key.

use super::*;

const WRONGTYPE: &[u8] = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

#[tokio::test]
async fn hash_commands_answer_exactly_as_redis() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"HSET h b 2 a 1\r\nHSET h a 9 c 3\r\nHMSET h d 4\r\nHSETNX h a x\r\nHSETNX h e 5\r\n",
        b":2\r\n:1\r\n+OK\r\n:0\r\n:1\r\n",
    )
    .await;
    c.roundtrip(
        b"HGET h a\r\nHGET h nope\r\nHGET nokey a\r\nHMGET h a nope b\r\nHLEN h\r\nHLEN nokey\r\n",
        b"$1\r\n9\r\n$-1\r\n$-1\r\n*3\r\n$1\r\n9\r\n$-1\r\n$1\r\n2\r\n:5\r\n:0\r\n",
    )
    .await;
    c.roundtrip(
        // Insertion order, as Redis answers a small hash.
        b"HKEYS h\r\nHVALS h\r\n",
        b"*5\r\n$1\r\nb\r\n$1\r\na\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n\
          *5\r\n$1\r\n2\r\n$1\r\n9\r\n$1\r\n3\r\n$1\r\n4\r\n$1\r\n5\r\n",
    )
    .await;
    c.roundtrip(
        b"HEXISTS h a\r\nHEXISTS h z\r\nHSTRLEN h a\r\nHSTRLEN h z\r\nHINCRBY h a 1\r\n\
          HINCRBYFLOAT h a 0.5\r\nHINCRBYFLOAT h f 1.25\r\n",
        b":1\r\n:0\r\n:1\r\n:0\r\n:10\r\n$4\r\n10.5\r\n$4\r\n1.25\r\n",
    )
    .await;
    c.roundtrip(
        b"HDEL h a a nope\r\nHDEL h b c d e f\r\nEXISTS h\r\nTYPE h\r\nHGETALL h\r\n",
        b":1\r\n:5\r\n:0\r\n+none\r\n*0\r\n",
    )
    .await;
    // Binary-safe fields and values; RESP3 answers HGETALL with a map.
    let r = c
        .cmd(&[b"HSET", b"bin", b"f\r\n\0", b"\xff\x00v", b"", b""])
        .await;
    assert_eq!(r, Frame::Integer(2));
    let r = c.cmd(&[b"HGET", b"bin", b"f\r\n\0"]).await;
    assert_eq!(r, Frame::bulk(b"\xff\x00v".to_vec()));
    c.send(b"HELLO 3\r\n").await;
    let _ = c.frame().await;
    c.roundtrip(
        b"HSET m a 1 b 2\r\nHGETALL m\r\nHGETALL nokey\r\n",
        b":2\r\n%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n%0\r\n",
    )
    .await;
    c.roundtrip(
        b"HRANDFIELD m 5 WITHVALUES\r\n",
        b"*2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn hostile_arguments_get_redis_errors_and_never_a_crash() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"HSET h f 1\r\n", b":1\r\n").await;
    // Arity: the table's, then HSET's own odd-pairs check.
    c.roundtrip(
        b"HSET h\r\nHSET h f\r\nHSET h f 1 g\r\nHMSET h f 1 g\r\nHGET h\r\nHDEL h\r\nHSCAN h\r\nHRANDFIELD\r\n",
        b"-ERR wrong number of arguments for 'hset' command\r\n\
          -ERR wrong number of arguments for 'hset' command\r\n\
          -ERR wrong number of arguments for 'hset' command\r\n\
          -ERR wrong number of arguments for 'hmset' command\r\n\
          -ERR wrong number of arguments for 'hget' command\r\n\
          -ERR wrong number of arguments for 'hdel' command\r\n\
          -ERR wrong number of arguments for 'hscan' command\r\n\
          -ERR wrong number of arguments for 'hrandfield' command\r\n",
    )
    .await;
    // Increments: not integers, not floats, overflow, infinities.
    c.roundtrip(
        b"HINCRBY h f x\r\nHINCRBY h f 1.5\r\nHINCRBY h f 99999999999999999999\r\n\
          HSET h s abc\r\nHINCRBY h s 1\r\nHINCRBYFLOAT h s 1\r\n\
          HINCRBY h f 9223372036854775806\r\nHINCRBY h f 1\r\nHINCRBY h f -9223372036854775808\r\n",
        b"-ERR value is not an integer or out of range\r\n\
          -ERR value is not an integer or out of range\r\n\
          -ERR value is not an integer or out of range\r\n:1\r\n\
          -ERR hash value is not an integer\r\n-ERR hash value is not a float\r\n\
          :9223372036854775807\r\n-ERR increment or decrement would overflow\r\n:-1\r\n",
    )
    .await;
    c.roundtrip(
        b"HINCRBYFLOAT h f x\r\nHINCRBYFLOAT h f inf\r\nHINCRBYFLOAT h f nan\r\n\
          HSET h big 1e308\r\nHINCRBYFLOAT h big 1e308\r\nHGET h big\r\n",
        b"-ERR value is not a valid float\r\n-ERR value is NaN or Infinity\r\n\
          -ERR value is not a valid float\r\n:1\r\n\
          -ERR increment would produce NaN or Infinity\r\n$5\r\n1e308\r\n",
    )
    .await;
    // Cursors and options of HSCAN; huge counts.
    c.roundtrip(
        b"HSCAN h x\r\nHSCAN h 18446744073709551616\r\nHSCAN h -1\r\nHSCAN h 0 COUNT 0\r\n\
          HSCAN h 0 COUNT 99999999999999999999\r\nHSCAN h 0 MATCH\r\nHSCAN h 0 TYPE hash\r\n\
          HSCAN nokey 0 ANYTHING\r\n",
        b"-ERR invalid cursor\r\n-ERR invalid cursor\r\n-ERR invalid cursor\r\n\
          -ERR syntax error\r\n-ERR value is not an integer or out of range\r\n\
          -ERR syntax error\r\n-ERR syntax error\r\n*2\r\n$1\r\n0\r\n*0\r\n",
    )
    .await;
    c.roundtrip(
        b"HSCAN h 0 MATCH f* COUNT 9223372036854775807 NOVALUES\r\n",
        b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nf\r\n",
    )
    .await;
    c.roundtrip(
        b"HRANDFIELD h 9223372036854775807\r\nHRANDFIELD h -9223372036854775808\r\n\
          HRANDFIELD h -9223372036854775807\r\nHRANDFIELD h 4611686018427387904 WITHVALUES\r\n\
          HRANDFIELD h 1 WITHVALUES x\r\nHRANDFIELD h 0\r\n",
        b"*3\r\n$1\r\nf\r\n$1\r\ns\r\n$3\r\nbig\r\n\
          -ERR value is out of range, value must between -9223372036854775807 and \
          9223372036854775807\r\n-ERR value is out of range\r\n-ERR value is out of range\r\n\
          -ERR syntax error\r\n*0\r\n",
    )
    .await;
    // A long request of many pairs, then of many fields to delete.
    let mut hset: Vec<Vec<u8>> = vec![b"HSET".to_vec(), b"many".to_vec()];
    for i in 0..5000 {
        hset.push(format!("field{i:05}").into_bytes());
        hset.push(format!("{i}").into_bytes());
    }
    let parts: Vec<&[u8]> = hset.iter().map(|a| &a[..]).collect();
    assert_eq!(c.cmd(&parts).await, Frame::Integer(5000));
    assert_eq!(
        c.cmd(&[b"HGET", b"many", b"field04999"]).await,
        bulk("4999")
    );
    let mut hdel: Vec<&[u8]> = vec![b"HDEL", b"many"];
    hdel.extend(parts[2..].iter().step_by(2));
    assert_eq!(c.cmd(&hdel).await, Frame::Integer(5000));
    c.roundtrip(b"EXISTS many\r\n", b":0\r\n").await;
    s.stop().await;
}

#[tokio::test]
async fn wrongtype_both_ways_and_the_commands_of_any_type() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"SET s v\r\nHSET h f 1\r\n", b"+OK\r\n:1\r\n")
        .await;
    for cmd in [
        &b"HSET s f 1\r\n"[..],
        b"HSETNX s f 1\r\n",
        b"HGET s f\r\n",
        b"HMGET s f g\r\n",
        b"HGETALL s\r\n",
        b"HDEL s f\r\n",
        b"HEXISTS s f\r\n",
        b"HLEN s\r\n",
        b"HSTRLEN s f\r\n",
        b"HINCRBY s f 1\r\n",
        b"HINCRBYFLOAT s f 1\r\n",
        b"HKEYS s\r\n",
        b"HVALS s\r\n",
        b"HSCAN s 0 COUNT 0\r\n",
        b"HRANDFIELD s\r\n",
        b"GET h\r\n",
        b"SET h v GET\r\n",
        b"GETSET h v\r\n",
        b"GETDEL h\r\n",
        b"GETEX h PERSIST\r\n",
        b"INCR h\r\n",
        b"INCRBYFLOAT h x\r\n",
        b"APPEND h x\r\n",
        b"STRLEN h\r\n",
        b"GETRANGE h 0 -1\r\n",
        b"SETRANGE h 0 x\r\n",
    ] {
        c.send(cmd).await;
        c.expect(WRONGTYPE).await;
    }
    // Unchanged by the refused writes.
    c.roundtrip(
        b"GET s\r\nHGETALL h\r\nMGET h s nokey\r\n",
        b"$1\r\nv\r\n*2\r\n$1\r\nf\r\n$1\r\n1\r\n*3\r\n$-1\r\n$1\r\nv\r\n$-1\r\n",
    )
    .await;
    // TYPE, the TTL family, EXISTS, SCAN ... TYPE, KEYS, DEL work on any type.
    c.roundtrip(
        b"TYPE h\r\nTYPE s\r\nTYPE nokey\r\nEXPIRE h 100\r\nHSET h g 2\r\nTTL h\r\n\
          PERSIST h\r\nTTL h\r\nTYPE h\r\nEXISTS h s nokey\r\n",
        b"+hash\r\n+string\r\n+none\r\n:1\r\n:1\r\n:100\r\n:1\r\n:-1\r\n+hash\r\n:2\r\n",
    )
    .await;
    c.roundtrip(
        b"SCAN 0 TYPE hash\r\nSCAN 0 TYPE string\r\nSCAN 0 TYPE list\r\nKEYS *\r\n",
        b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nh\r\n*2\r\n$1\r\n0\r\n*1\r\n$1\r\ns\r\n\
          *2\r\n$1\r\n0\r\n*0\r\n*2\r\n$1\r\nh\r\n$1\r\ns\r\n",
    )
    .await;
    // Plain SET overwrites a hash; expiry removes a whole hash.
    c.roundtrip(
        b"SET h v\r\nTYPE h\r\nHSET x f 1\r\nPEXPIRE x 30\r\n",
        b"+OK\r\n+string\r\n:1\r\n:1\r\n",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    c.roundtrip(b"HGET x f\r\nEXISTS x\r\n", b"$-1\r\n:0\r\n")
        .await;
    // INFO's keyspace line counts hashes (and their TTLs).
    c.roundtrip(b"HSET y f 1\r\nEXPIRE y 100\r\n", b":1\r\n:1\r\n")
        .await;
    let Frame::Bulk(info) = c.cmd(&[b"INFO", b"keyspace"]).await else {
        panic!("INFO is a bulk string")
    };
    let info = String::from_utf8(info.to_vec()).unwrap();
    assert!(info.contains("db0:keys=3,expires=1,"), "{info}");
    c.roundtrip(b"DEL y h s\r\nDBSIZE\r\n", b":3\r\n:0\r\n")
        .await;
    s.stop().await;
}

#[tokio::test]
async fn hashes_in_multi_exec_and_watch() {
    let s = Server::default().await;
    let mut a = s.connect().await;
    let mut b = s.connect().await;
    // Queued hash commands, their runtime errors inside the array, atomically applied.
    a.roundtrip(
        b"SET s v\r\nMULTI\r\nHSET h f 1 g 2\r\nHINCRBY h f 5\r\nHSET s f 1\r\nHSET h x\r\n\
          HSET h odd 1 pairs\r\nHGETALL h\r\nHDEL h f g\r\nEXISTS h\r\nGET s\r\nEXEC\r\n",
        b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
          -ERR wrong number of arguments for 'hset' command\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
          +QUEUED\r\n+QUEUED\r\n\
          -EXECABORT Transaction discarded because of previous errors.\r\n",
    )
    .await;
    a.roundtrip(
        b"MULTI\r\nHSET h f 1 g 2\r\nHINCRBY h f 5\r\nHSET s f 1\r\nHSET h odd 1 pairs\r\n\
          HGETALL h\r\nHDEL h f g\r\nEXISTS h\r\nHSET h z 1\r\nTYPE h\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n\
          +QUEUED\r\n+QUEUED\r\n*9\r\n:2\r\n:6\r\n-WRONGTYPE Operation against a key holding \
          the wrong kind of value\r\n-ERR wrong number of arguments for 'hset' command\r\n\
          *4\r\n$1\r\nf\r\n$1\r\n6\r\n$1\r\ng\r\n$1\r\n2\r\n:2\r\n:0\r\n:1\r\n+hash\r\n",
    )
    .await;
    // WATCH of a hash key: another client's field write fails EXEC...
    a.roundtrip(b"WATCH h\r\n", b"+OK\r\n").await;
    b.roundtrip(b"HSET h z 2\r\n", b":0\r\n").await;
    a.roundtrip(
        b"MULTI\r\nHSET h mine 1\r\nEXEC\r\nHEXISTS h mine\r\n",
        b"+OK\r\n+QUEUED\r\n*-1\r\n:0\r\n",
    )
    .await;
    // ... but a read, an HDEL that removes nothing and a refused (WRONGTYPE) command modify
    // nothing, so EXEC runs.
    a.roundtrip(b"WATCH h\r\n", b"+OK\r\n").await;
    b.roundtrip(
        b"HGET h z\r\nHDEL h nope\r\nGET h\r\n",
        b"$1\r\n2\r\n:0\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
    )
    .await;
    a.roundtrip(
        b"MULTI\r\nHSET h mine 1\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n*1\r\n:1\r\n",
    )
    .await;
    // Deleting the last field deletes the key: a modification of the watched key.
    a.roundtrip(b"WATCH h\r\n", b"+OK\r\n").await;
    b.roundtrip(b"HDEL h z mine\r\n", b":2\r\n").await;
    a.roundtrip(
        b"MULTI\r\nHLEN h\r\nEXEC\r\nEXISTS h\r\n",
        b"+OK\r\n+QUEUED\r\n*-1\r\n:0\r\n",
    )
    .await;
    // SCAN ... TYPE inside EXEC sees the transaction's own hash.
    a.roundtrip(
        b"MULTI\r\nHSET t f 1\r\nSCAN 0 TYPE hash\r\nSCAN 0 TYPE string\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n:1\r\n*2\r\n$1\r\n0\r\n*1\r\n$1\r\nt\r\n\
          *2\r\n$1\r\n0\r\n*1\r\n$1\r\ns\r\n",
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn concurrent_hincrby_loses_no_increment() {
    let s = Server::default().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut c = s.connect().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..100 {
                let r = c.cmd(&[b"HINCRBY", b"h", b"n", b"1"]).await;
                assert!(matches!(r, Frame::Integer(_)), "{r:?}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut c = s.connect().await;
    c.roundtrip(b"HGET h n\r\n", b"$3\r\n800\r\n").await;
    s.stop().await;
}

#[tokio::test]
async fn command_table_lists_the_hash_commands_as_redis_does() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let r = c.cmd(&[b"COMMAND", b"INFO", b"hset", b"hgetall"]).await;
    let Frame::Array(infos) = r else {
        panic!("{r:?}")
    };
    let head = |f: &Frame| -> (Frame, Frame, Frame, Frame, Frame) {
        let Frame::Array(v) = f else { panic!("{f:?}") };
        (
            v[0].clone(),
            v[1].clone(),
            v[3].clone(),
            v[4].clone(),
            v[5].clone(),
        )
    };
    assert_eq!(
        head(&infos[0]),
        (
            bulk("hset"),
            Frame::Integer(-4),
            Frame::Integer(1),
            Frame::Integer(1),
            Frame::Integer(1)
        )
    );
    assert_eq!(head(&infos[1]).1, Frame::Integer(2));
    let Frame::Integer(n) = c.cmd(&[b"COMMAND", b"COUNT"]).await else {
        panic!("COMMAND COUNT is an integer")
    };
    let Frame::Array(all) = c.cmd(&[b"COMMAND"]).await else {
        panic!("COMMAND is an array")
    };
    assert_eq!(n as usize, all.len());
    s.stop().await;
}

#[tokio::test]
async fn http_get_of_a_hash_key_says_it_is_a_hash() {
    let mut config = meridian_server::NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    let node = RunningNode::start(config).await;
    let mut c = Raw {
        stream: TcpStream::connect(node.resp).await.unwrap(),
        buf: BytesMut::new(),
    };
    c.roundtrip(b"HSET h f 1\r\nSET s v\r\n", b":1\r\n+OK\r\n")
        .await;
    let get = |path: &'static str| async move {
        let mut stream = TcpStream::connect(node.http).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: meridian\r\nConnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        String::from_utf8_lossy(&raw).into_owned()
    };
    let r = get("/kv/h").await;
    assert!(r.starts_with("HTTP/1.1 409"), "{r}");
    assert!(
        r.contains("\"WRONG_TYPE\"") && r.contains("holds a hash"),
        "{r}"
    );
    let r = get("/kv/s").await;
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("\r\n\r\nv"),
        "{r}"
    );
    // PUT overwrites the hash, as SET does.
    let (status, _) = http_put(node.http, "/kv/h", "now a string").await;
    assert_eq!(status, 204);
    c.roundtrip(b"TYPE h\r\n", b"+string\r\n").await;
    node.stop().await;
}
