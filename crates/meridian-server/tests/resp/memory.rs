//! What the node says about itself (CONFIG GET, INFO server/persistence) is what it runs
//! with; `maxmemory` and `maxmemory-policy` as in Redis: set in the configuration file or
//! with CONFIG SET, `-OOM` under `noeviction`, eviction under the others, reported by INFO
//! and `/metrics`.

use super::*;
use meridian_server::NodeConfig;
use meridian_server::node::{Listeners, NodeState};
use meridian_storage::Durability;

const OOM: &[u8] = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";

/// CONFIG GET of one parameter: its value, `None` when the reply is empty.
async fn config_get(c: &mut Raw, name: &str) -> Option<String> {
    let Frame::Array(kv) = c.cmd(&[b"CONFIG", b"GET", name.as_bytes()]).await else {
        panic!("CONFIG GET {name}: not an array")
    };
    match &kv[..] {
        [] => None,
        [Frame::Bulk(k), Frame::Bulk(v)] => {
            assert_eq!(&k[..], name.as_bytes());
            Some(String::from_utf8(v.to_vec()).unwrap())
        }
        other => panic!("CONFIG GET {name}: {other:?}"),
    }
}

async fn info(c: &mut Raw, section: &str) -> String {
    let Frame::Bulk(text) = c.cmd(&[b"INFO", section.as_bytes()]).await else {
        panic!("INFO {section}")
    };
    String::from_utf8(text.to_vec()).unwrap()
}

/// The value of an INFO field.
fn field(text: &str, name: &str) -> String {
    text.split("\r\n")
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{name} not in {text}"))
        .to_string()
}

#[tokio::test]
async fn config_get_reports_the_running_configuration() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    assert_eq!(
        config_get(&mut c, "bind").await.as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        config_get(&mut c, "port").await,
        Some(s.addr.port().to_string())
    );
    // The in-memory engine writes nothing to disk.
    assert_eq!(
        config_get(&mut c, "appendonly").await.as_deref(),
        Some("no")
    );
    assert_eq!(
        config_get(&mut c, "appendfsync").await.as_deref(),
        Some("no")
    );
    assert_eq!(
        field(&info(&mut c, "persistence").await, "aof_enabled"),
        "0"
    );
    assert_eq!(
        config_get(&mut c, "maxclients").await.as_deref(),
        Some("10000")
    );
    assert_eq!(config_get(&mut c, "timeout").await.as_deref(), Some("0"));
    assert_eq!(
        config_get(&mut c, "tcp-keepalive").await.as_deref(),
        Some("0")
    );
    assert_eq!(config_get(&mut c, "databases").await.as_deref(), Some("1"));
    assert_eq!(config_get(&mut c, "maxmemory").await.as_deref(), Some("0"));
    assert_eq!(
        config_get(&mut c, "maxmemory-policy").await.as_deref(),
        Some("noeviction")
    );
    // Parameters Meridian does not have answer like Redis's unknown ones: nothing.
    assert_eq!(
        config_get(&mut c, "lua-time-limit").await.as_deref(),
        Some("5000")
    );
    for unknown in ["io-threads", "no-such-parameter"] {
        assert_eq!(config_get(&mut c, unknown).await, None, "{unknown}");
    }
    c.roundtrip(b"CONFIG GET nope*\r\n", b"*0\r\n").await;
    let Frame::Array(all) = c.cmd(&[b"CONFIG", b"GET", b"*"]).await else {
        panic!()
    };
    assert!(all.len() >= 30 && all.len().is_multiple_of(2), "{all:?}");
    s.stop().await;

    // The durable engine's journal is the append-only file, fsynced as configured.
    for (d, fsync) in [
        (Durability::Always, "always"),
        (Durability::Everysec, "everysec"),
        (Durability::Never, "no"),
    ] {
        let s = Server::start(RespConfig {
            durability: Some(d),
            ..RespConfig::default()
        })
        .await;
        let mut c = s.connect().await;
        assert_eq!(
            config_get(&mut c, "appendonly").await.as_deref(),
            Some("yes")
        );
        assert_eq!(
            config_get(&mut c, "appendfsync").await.as_deref(),
            Some(fsync)
        );
        assert_eq!(
            field(&info(&mut c, "persistence").await, "aof_enabled"),
            "1"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn info_server_names_meridian_beside_the_redis_version() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let text = info(&mut c, "server").await;
    assert!(
        text.starts_with("# Server\r\nredis_version:7.2.0\r\n"),
        "{text}"
    );
    assert_eq!(field(&text, "server_name"), "meridian");
    assert_eq!(field(&text, "meridian_version"), env!("CARGO_PKG_VERSION"));
    s.stop().await;
}

#[tokio::test]
async fn config_set_maxmemory_round_trips_and_refuses_bad_values() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(b"CONFIG SET maxmemory 100mb\r\n", b"+OK\r\n")
        .await;
    assert_eq!(
        config_get(&mut c, "maxmemory").await.as_deref(),
        Some("104857600")
    );
    c.roundtrip(
        b"CONFIG SET maxmemory 1gb maxmemory-policy ALLKEYS-LRU\r\n",
        b"+OK\r\n",
    )
    .await;
    assert_eq!(
        config_get(&mut c, "maxmemory").await.as_deref(),
        Some("1073741824")
    );
    assert_eq!(
        config_get(&mut c, "maxmemory-policy").await.as_deref(),
        Some("allkeys-lru")
    );
    let text = info(&mut c, "memory").await;
    assert_eq!(field(&text, "maxmemory"), "1073741824");
    assert_eq!(field(&text, "maxmemory_human"), "1.00G");
    assert_eq!(field(&text, "maxmemory_policy"), "allkeys-lru");
    // Redis's messages; nothing applied when one pair is wrong.
    c.roundtrip(
        b"CONFIG SET maxmemory-policy noeviction maxmemory 12qb\r\n",
        b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must \
          be a memory value\r\n",
    )
    .await;
    c.roundtrip(
        b"CONFIG SET maxmemory-policy allkeys-fifo\r\n",
        b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - \
          argument(s) must be one of the following: volatile-lru, allkeys-lru, volatile-lfu, \
          allkeys-lfu, volatile-random, allkeys-random, volatile-ttl, noeviction\r\n",
    )
    .await;
    c.roundtrip(
        b"CONFIG SET maxmemory 1 maxmemory 2\r\n",
        b"-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - duplicate \
          parameter\r\n",
    )
    .await;
    assert_eq!(
        config_get(&mut c, "maxmemory-policy").await.as_deref(),
        Some("allkeys-lru")
    );
    let Frame::Error(e) = c.cmd(&[b"CONFIG", b"SET", b"timeout", b"10"]).await else {
        panic!()
    };
    assert!(e.starts_with(b"ERR CONFIG SET is not supported by Meridian for 'timeout'"));
    c.roundtrip(
        b"CONFIG SET maxmemory\r\n",
        b"-ERR wrong number of arguments for 'config|set' command\r\n",
    )
    .await;
    c.roundtrip(b"CONFIG SET maxmemory 0\r\n", b"+OK\r\n").await;
    assert_eq!(
        field(&info(&mut c, "memory").await, "maxmemory_human"),
        "0B"
    );
    s.stop().await;
}

#[tokio::test]
async fn noeviction_answers_oom_to_writes_and_still_serves_reads_and_deletes() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    let mut other = s.connect().await;
    // A limit too high to matter: from now on used memory is counted per key.
    c.roundtrip(b"CONFIG SET maxmemory 1gb\r\n", b"+OK\r\n")
        .await;
    c.roundtrip(b"SET big 0123456789\r\nSET small x\r\n", b"+OK\r\n+OK\r\n")
        .await;
    let used: u64 = field(&info(&mut c, "memory").await, "used_memory")
        .parse()
        .unwrap();
    assert!(used > 20, "{used}");
    // A transaction queued within the limit, executed over it: aborted, as in Redis.
    c.roundtrip(b"MULTI\r\nSET queued 1\r\n", b"+OK\r\n+QUEUED\r\n")
        .await;
    other
        .roundtrip(
            format!("CONFIG SET maxmemory {}\r\n", used - 1).as_bytes(),
            b"+OK\r\n",
        )
        .await;
    c.send(b"EXEC\r\n").await;
    c.expect(
        b"-EXECABORT Transaction discarded because of: OOM command not allowed when used \
          memory > 'maxmemory'.\r\n",
    )
    .await;
    for write in [
        &b"SET k v\r\n"[..],
        b"SETEX k 10 v\r\n",
        b"APPEND small y\r\n",
        b"INCR n\r\n",
        b"MSET a 1 b 2\r\n",
        b"SETRANGE small 0 z\r\n",
    ] {
        c.send(write).await;
        c.expect(OOM).await;
    }
    // Reads, TTL changes and deletes still run.
    c.roundtrip(b"GET small\r\n", b"$1\r\nx\r\n").await;
    c.roundtrip(b"EXISTS big small\r\n", b":2\r\n").await;
    c.roundtrip(b"EXPIRE small 100\r\n", b":1\r\n").await;
    // Inside MULTI every command is refused and the transaction flagged.
    c.roundtrip(
        b"MULTI\r\nGET small\r\nEXEC\r\n",
        b"+OK\r\n-OOM command not allowed when used memory > 'maxmemory'.\r\n\
          -EXECABORT Transaction discarded because of previous errors.\r\n",
    )
    .await;
    c.roundtrip(b"DEL big\r\n", b":1\r\n").await;
    // Back under the limit: writes run again.
    c.roundtrip(b"SET k v\r\n", b"+OK\r\n").await;
    let text = info(&mut c, "stats").await;
    assert_eq!(field(&text, "evicted_keys"), "0");
    // With a real client: the error reaches the application as Redis's.
    let url = s.url();
    let err = blocking(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = con.set("filler", "x".repeat(1000)).unwrap_or(());
        con.set::<_, _, ()>("again", "v").unwrap_err()
    })
    .await;
    assert_eq!(err.code(), Some("OOM"), "{err}");
    s.stop().await;
}

#[tokio::test]
async fn allkeys_lru_evicts_to_stay_under_maxmemory() {
    let s = Server::default().await;
    let url = s.url();
    let (used, max, evicted, dbsize, newest) = blocking(move || {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("allkeys-lru")
            .arg("maxmemory")
            .arg("20kb")
            .query::<()>(&mut con)
            .unwrap();
        for i in 0..1_000 {
            let _: () = con.set(format!("key:{i}"), "v".repeat(100)).unwrap();
        }
        let info: redis::InfoDict = redis::cmd("INFO").query(&mut con).unwrap();
        let used: u64 = info.get("used_memory").unwrap();
        let max: u64 = info.get("maxmemory").unwrap();
        let evicted: u64 = info.get("evicted_keys").unwrap();
        let dbsize: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        let newest: Option<String> = con.get("key:999").unwrap();
        (used, max, evicted, dbsize, newest)
    })
    .await;
    assert_eq!(max, 20 * 1024);
    // Each write starts within the limit, so at most its own key is over it.
    assert!(used <= max + 300, "used {used}");
    assert!(
        dbsize < 200 && evicted > 800,
        "dbsize {dbsize}, evicted {evicted}"
    );
    assert_eq!(dbsize + evicted, 1_000);
    assert!(newest.is_some(), "the most recent key was not evicted");
    s.stop().await;
}

/// A whole node from its configuration file: `[memory]` applies, `/metrics` reports it, and
/// CONFIG GET tells the durable engine's real fsync policy and listen address.
#[tokio::test]
async fn node_applies_the_memory_section_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig::from_toml(
        "[memory]\nmaxmemory = \"1mb\"\nmaxmemory_policy = \"volatile-ttl\"\n\
         [storage]\nengine = \"fjall\"\nfsync = \"always\"\n\
         [resp]\nlisten = \"127.0.0.1:0\"\n[http]\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    config.storage.data_dir = dir.path().to_path_buf();
    let node = NodeState::open(config).unwrap();
    assert_eq!(node.keyspace.maxmemory(), 1 << 20);
    assert_eq!(node.keyspace.maxmemory_policy().name(), "volatile-ttl");
    let listeners = Listeners::bind(&node.config).await.unwrap();
    let (resp, listeners_http) = listeners.addrs().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(meridian_server::run(
        node.clone(),
        listeners,
        shutdown.clone(),
    ));
    let mut c = Raw {
        stream: TcpStream::connect(resp).await.unwrap(),
        buf: BytesMut::new(),
    };
    assert_eq!(
        config_get(&mut c, "maxmemory").await.as_deref(),
        Some("1048576")
    );
    assert_eq!(
        config_get(&mut c, "maxmemory-policy").await.as_deref(),
        Some("volatile-ttl")
    );
    assert_eq!(
        config_get(&mut c, "appendonly").await.as_deref(),
        Some("yes")
    );
    assert_eq!(
        config_get(&mut c, "appendfsync").await.as_deref(),
        Some("always")
    );
    assert_eq!(
        config_get(&mut c, "bind").await.as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        config_get(&mut c, "port").await,
        Some(resp.port().to_string())
    );
    c.roundtrip(b"SET a 1\r\n", b"+OK\r\n").await;
    // HTTP writes are held to the same limit: with noeviction, refused over it.
    let http = listeners_http;
    assert_eq!(http_put(http, "/kv/h", "v").await.0, 204);
    c.roundtrip(b"CONFIG SET maxmemory-policy noeviction\r\n", b"+OK\r\n")
        .await;
    c.roundtrip(b"CONFIG SET maxmemory 1\r\n", b"+OK\r\n").await;
    let (status, body) = http_put(http, "/kv/h2", "v").await;
    assert_eq!(status, 507, "{body}");
    assert!(body.contains("OOM command not allowed"), "{body}");
    assert_eq!(node.keyspace.get(b"h2").unwrap(), None);
    c.roundtrip(b"CONFIG SET maxmemory 1mb\r\n", b"+OK\r\n")
        .await;
    c.roundtrip(b"CONFIG SET maxmemory-policy volatile-ttl\r\n", b"+OK\r\n")
        .await;
    let metrics = node.render_metrics();
    assert!(
        metrics.contains("\nmeridian_maxmemory_bytes 1048576\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nmeridian_evicted_keys_total 0\n"),
        "{metrics}"
    );
    let used = node.keyspace.used_memory();
    assert!(used > 0);
    assert!(
        metrics.contains(&format!("\nmeridian_used_memory_bytes {used}\n")),
        "{metrics}"
    );
    shutdown.cancel();
    tokio::time::timeout(PATIENCE, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn errorstats_count_error_replies_by_code_until_resetstat() {
    let s = Server::default().await;
    let mut c = s.connect().await;
    c.roundtrip(
        b"SET k v\r\nLPUSH k x\r\nNOSUCH\r\nINCR k\r\nEVAL \"return redis.error_reply('MY_CODE custom')\" 0\r\n",
        b"+OK\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n\
          -ERR unknown command 'NOSUCH', with args beginning with: \r\n\
          -ERR value is not an integer or out of range\r\n-MY_CODE custom\r\n",
    )
    .await;
    let text = info(&mut c, "errorstats").await;
    assert_eq!(
        text,
        "# Errorstats\r\nerrorstat_ERR:count=2\r\nerrorstat_MY_CODE:count=1\r\n\
         errorstat_WRONGTYPE:count=1\r\n"
    );
    assert_eq!(
        field(&info(&mut c, "stats").await, "total_error_replies"),
        "4"
    );
    c.roundtrip(b"CONFIG RESETSTAT\r\n", b"+OK\r\n").await;
    assert_eq!(info(&mut c, "errorstats").await, "# Errorstats\r\n");
    // An error among EXEC's replies counts too (Redis's unit/info), EXEC itself not.
    c.roundtrip(
        b"MULTI\r\nSET a b\r\nINCR a\r\nEXEC\r\n",
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n\
          -ERR value is not an integer or out of range\r\n",
    )
    .await;
    assert_eq!(
        info(&mut c, "errorstats").await,
        "# Errorstats\r\nerrorstat_ERR:count=1\r\n"
    );
    c.roundtrip(b"CONFIG RESETSTAT\r\n", b"+OK\r\n").await;
    assert_eq!(
        field(&info(&mut c, "stats").await, "total_error_replies"),
        "0"
    );
    s.stop().await;
}
