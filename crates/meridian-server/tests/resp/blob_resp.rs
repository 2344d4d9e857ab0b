//! Large objects on RESP (spec `large-objects.md` §5): `BLOB.READ key offset len` at random
//! ranges equals slices of the object, `GET` returns an object's whole bytes (inline or
//! chunked) up to `blob.resp_get_max` and Redis's error above it, `STRLEN` is the object's
//! size, `MGET` shows a chunked object as nil, other string commands refuse a large object
//! and change nothing, and the argument errors are Redis's. On a whole single node (the
//! chunk reads deferred to the connection task) and through every node of an embedded
//! 2-DC × 2-node cluster. Objects are put through the node's object service directly.

use super::objects::body;
use super::{PATIENCE, blocking};
use meridian_server::NodeConfig;
use meridian_server::cluster::EmbeddedConfig;
use meridian_server::objects::{BlobConfig, Objects};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::Duration;

const CS: usize = 64 << 10;
/// Objects up to this many bytes are inline in their manifest.
const THRESHOLD: u64 = 1000;
/// `blob.resp_get_max` of the test nodes.
const GET_MAX: u64 = 1 << 20;

fn blob_config() -> BlobConfig {
    BlobConfig {
        chunk_size: CS as u32,
        threshold: THRESHOLD,
        resp_get_max: GET_MAX,
        ..BlobConfig::default()
    }
}

/// A whole single node on loopback ports with `blob` as its `[blob]` settings.
async fn single_node(blob: BlobConfig) -> super::RunningNode {
    let mut config = NodeConfig::default();
    config.resp.listen = "127.0.0.1:0".parse().unwrap();
    config.http.listen = "127.0.0.1:0".parse().unwrap();
    config.blob = blob;
    super::RunningNode::start(config).await
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// The objects every test puts: (RESP key, bytes).
struct Fixture {
    big: Vec<u8>,
    small: Vec<u8>,
    huge: Vec<u8>,
    /// `b:pin`, which the handle checks replace.
    pin: Vec<u8>,
}

async fn put_all(o: &Objects) -> Fixture {
    let f = Fixture {
        big: data(1, 10 * CS + 123),
        small: data(2, 700),
        huge: data(3, GET_MAX as usize + 1),
        pin: data(4, 3 * CS + 5),
    };
    for (key, d) in [
        ("big", &f.big),
        ("small", &f.small),
        ("huge", &f.huge),
        ("pin", &f.pin),
    ] {
        let m = o
            .put("b", key.as_bytes(), body(d), Default::default(), None)
            .await
            .unwrap();
        assert_eq!(m.size, d.len() as u64);
        assert_eq!(m.inline.is_some(), d.len() as u64 <= THRESHOLD, "{key}");
    }
    f
}

fn err_text(e: &redis::RedisError) -> String {
    format!("{e}")
}

/// Every check, over one connection to `addr` (blocking: the `redis` crate's sync client).
fn check_all(addr: SocketAddr, f: &Fixture, seed: u64, single_node: bool) {
    let mut con = redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection_with_timeout(PATIENCE)
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let read = |con: &mut redis::Connection, key: &str, off: i64, len: i64| {
        redis::cmd("BLOB.READ")
            .arg(key)
            .arg(off)
            .arg(len)
            .query::<Option<Vec<u8>>>(con)
    };

    // GET: whole objects, inline and chunked; never the manifest.
    let got: Vec<u8> = redis::cmd("GET").arg("b:big").query(&mut con).unwrap();
    assert!(got == f.big, "GET of a chunked object is its bytes");
    let got: Vec<u8> = redis::cmd("GET").arg("b:small").query(&mut con).unwrap();
    assert!(got == f.small, "GET of an inline object is its bytes");
    let e = redis::cmd("GET")
        .arg("b:huge")
        .query::<Vec<u8>>(&mut con)
        .unwrap_err();
    let want = format!(
        "object is {} bytes, above blob.resp_get_max ({GET_MAX}): read it with BLOB.READ key \
         offset len or the S3 endpoint",
        f.huge.len()
    );
    assert!(err_text(&e).contains(&want), "{e}");
    assert_eq!(e.code(), Some("ERR"), "{e}");

    // BLOB.READ: random ranges equal slices (fewer bytes at the end, none past it).
    for (key, d) in [
        ("b:big", &f.big),
        ("b:small", &f.small),
        ("b:huge", &f.huge),
    ] {
        let size = d.len() as i64;
        let mut cases: Vec<(i64, i64)> = (0..12)
            .map(|_| {
                (
                    rng.random_range(0..size + 10),
                    rng.random_range(0..3 * CS as i64),
                )
            })
            .collect();
        cases.extend([
            (0, size.min(GET_MAX as i64)),
            ((size - GET_MAX as i64 / 2).max(0), GET_MAX as i64),
            (0, 1),
            (size - 1, 5),
            (size, 5),
            (size + 1000, 5),
            (7, 0),
            (CS as i64 - 3, 6),
        ]);
        for (off, len) in cases {
            let got = read(&mut con, key, off, len).unwrap().expect("not nil");
            let a = (off as usize).min(d.len());
            let b = (off.saturating_add(len) as usize).min(d.len());
            assert!(
                got[..] == d[a..b],
                "{key} BLOB.READ {off} {len}: {} bytes",
                got.len()
            );
        }
    }
    // A missing key is nil; a plain value reads like an object.
    assert_eq!(read(&mut con, "b:nope", 0, 10).unwrap(), None);
    let _: () = redis::cmd("SET")
        .arg("b:plain")
        .arg("hello world")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        read(&mut con, "b:plain", 6, 100).unwrap().unwrap(),
        b"world"
    );
    assert_eq!(read(&mut con, "b:plain", 11, 1).unwrap().unwrap(), b"");

    // Argument errors, as Redis phrases them.
    for (off, len) in [("-1", "5"), ("0", "-5"), ("x", "5"), ("0", "1.5")] {
        let e = redis::cmd("BLOB.READ")
            .arg("b:big")
            .arg(off)
            .arg(len)
            .query::<Option<Vec<u8>>>(&mut con)
            .unwrap_err();
        assert!(
            err_text(&e).contains("value is not an integer or out of range"),
            "{off} {len}: {e}"
        );
    }
    let e = read(&mut con, "b:big", 0, GET_MAX as i64 + 1).unwrap_err();
    assert!(
        err_text(&e).contains(&format!("blob.resp_get_max ({GET_MAX})")),
        "{e}"
    );
    let e = redis::cmd("BLOB.READ")
        .arg("b:big")
        .arg(0)
        .query::<Option<Vec<u8>>>(&mut con)
        .unwrap_err();
    assert!(
        err_text(&e).contains("wrong number of arguments for 'blob.read' command"),
        "{e}"
    );

    // STRLEN is the object's size; MGET shows a chunked object as nil.
    for (key, d) in [
        ("b:big", &f.big),
        ("b:small", &f.small),
        ("b:huge", &f.huge),
    ] {
        let n: u64 = redis::cmd("STRLEN").arg(key).query(&mut con).unwrap();
        assert_eq!(n, d.len() as u64, "STRLEN {key}");
    }
    let got: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
        .arg("b:big")
        .arg("b:small")
        .arg("b:plain")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        got,
        vec![None, Some(f.small.clone()), Some(b"hello world".to_vec())]
    );
    let ty: String = redis::cmd("TYPE").arg("b:big").query(&mut con).unwrap();
    assert_eq!(ty, "string");

    // Commands that would read or change the bytes refuse a large object (single node; in
    // cluster mode they are refused on eventual buckets anyway), and change nothing.
    if single_node {
        for args in [
            &["APPEND", "b:big", "x"][..],
            &["SETRANGE", "b:small", "0", "x"],
            &["GETRANGE", "b:big", "0", "10"],
            &["INCR", "b:small"],
            &["GETDEL", "b:big"],
            &["GETSET", "b:small", "x"],
            &["SET", "b:big", "x", "GET"],
        ] {
            let e = redis::cmd(args[0])
                .arg(&args[1..])
                .query::<redis::Value>(&mut con)
                .unwrap_err();
            let text = err_text(&e);
            assert!(
                text.contains("holds a large object") && text.contains("BLOB.READ"),
                "{args:?}: {text}"
            );
        }
        let got: Vec<u8> = redis::cmd("GET").arg("b:big").query(&mut con).unwrap();
        assert!(got == f.big, "unchanged");
        let got: Vec<u8> = redis::cmd("GET").arg("b:small").query(&mut con).unwrap();
        assert!(got == f.small, "unchanged");
    }

    // A pipeline keeps request order around the chunk reads.
    let (a, ok, x, b, n): (Vec<u8>, String, String, Vec<u8>, u64) = redis::pipe()
        .cmd("BLOB.READ")
        .arg("b:big")
        .arg(CS - 10)
        .arg(20)
        .cmd("SET")
        .arg("b:x")
        .arg("1")
        .cmd("GET")
        .arg("b:x")
        .cmd("GET")
        .arg("b:big")
        .cmd("STRLEN")
        .arg("b:huge")
        .query(&mut con)
        .unwrap();
    assert_eq!(a, f.big[CS - 10..CS + 10]);
    assert_eq!((ok.as_str(), x.as_str()), ("OK", "1"));
    assert!(b == f.big);
    assert_eq!(n, f.huge.len() as u64);
}

/// Handles over one connection to `addr`: `BLOB.PREAD` reads the version `BLOB.OPEN` saw
/// however the key changes, only with its own key, until `BLOB.CLOSE`; the argument errors.
/// Replaces `b:pin`.
fn check_handles(addr: SocketAddr, f: &Fixture, seed: u64) {
    let mut con = redis::Client::open(format!("redis://{addr}/"))
        .unwrap()
        .get_connection_with_timeout(PATIENCE)
        .unwrap();
    let open = |con: &mut redis::Connection, key: &str| -> Option<(u64, u64)> {
        redis::cmd("BLOB.OPEN").arg(key).query(con).unwrap()
    };
    let pread = |con: &mut redis::Connection, key: &str, h: u64, off: u64, len: u64| {
        redis::cmd("BLOB.PREAD")
            .arg(key)
            .arg(h)
            .arg(off)
            .arg(len)
            .query::<Vec<u8>>(con)
    };
    assert_eq!(open(&mut con, "b:absent"), None);
    let (h, size) = open(&mut con, "b:pin").unwrap();
    assert_eq!(size, f.pin.len() as u64);
    let (plain, plain_size) = {
        let _: () = redis::cmd("SET")
            .arg("b:plain")
            .arg("hello world")
            .query(&mut con)
            .unwrap();
        open(&mut con, "b:plain").unwrap()
    };
    assert_eq!(plain_size, 11);
    // The key changes: handles still read what they pinned; BLOB.READ reads the new value.
    let _: () = redis::cmd("SET")
        .arg("b:pin")
        .arg("replaced")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("b:plain")
        .arg("bye")
        .query(&mut con)
        .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..30 {
        let off = rng.random_range(0..f.pin.len() as u64 + 10);
        let len = rng.random_range(0..2 * CS as u64);
        let want = {
            let a = (off as usize).min(f.pin.len());
            let b = (off.saturating_add(len) as usize).min(f.pin.len());
            &f.pin[a..b]
        };
        assert!(
            pread(&mut con, "b:pin", h, off, len).unwrap() == want,
            "{off}+{len}"
        );
    }
    assert_eq!(pread(&mut con, "b:plain", plain, 6, 100).unwrap(), b"world");
    let now: Vec<u8> = redis::cmd("BLOB.READ")
        .arg("b:pin")
        .arg(0)
        .arg(100)
        .query(&mut con)
        .unwrap();
    assert_eq!(now, b"replaced");
    // A handle is known only with its own key.
    let e = pread(&mut con, "b:plain", h, 0, 1).unwrap_err();
    assert!(err_text(&e).contains("no such blob handle"), "{e}");
    // Argument errors.
    for (handle, off, len, want) in [
        ("-1", "0", "1", "invalid blob handle"),
        ("x", "0", "1", "value is not an integer or out of range"),
        (
            &*h.to_string(),
            "-1",
            "1",
            "value is not an integer or out of range",
        ),
        (
            &*h.to_string(),
            "0",
            &*(GET_MAX + 1).to_string(),
            "above blob.resp_get_max",
        ),
    ] {
        let e = redis::cmd("BLOB.PREAD")
            .arg("b:pin")
            .arg(handle)
            .arg(off)
            .arg(len)
            .query::<redis::Value>(&mut con)
            .unwrap_err();
        assert!(err_text(&e).contains(want), "{handle} {off} {len}: {e}");
    }
    let e = redis::cmd("BLOB.OPEN")
        .query::<redis::Value>(&mut con)
        .unwrap_err();
    assert!(err_text(&e).contains("wrong number of arguments"), "{e}");
    // Closed: gone.
    let closed: i64 = redis::cmd("BLOB.CLOSE")
        .arg("b:pin")
        .arg(h)
        .query(&mut con)
        .unwrap();
    assert_eq!(closed, 1);
    let closed: i64 = redis::cmd("BLOB.CLOSE")
        .arg("b:pin")
        .arg(h)
        .query(&mut con)
        .unwrap();
    assert_eq!(closed, 0);
    let e = pread(&mut con, "b:pin", h, 0, 1).unwrap_err();
    assert!(err_text(&e).contains("no such blob handle"), "{e}");
    let closed: i64 = redis::cmd("BLOB.CLOSE")
        .arg("b:plain")
        .arg(plain)
        .query(&mut con)
        .unwrap();
    assert_eq!(closed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blob_read_and_get_on_a_single_node() {
    let node = single_node(blob_config()).await;
    let (resp, state) = (node.resp, node.state.clone());
    let f = put_all(&state.objects).await;

    let f = blocking(move || {
        check_all(resp, &f, 11, true);
        check_handles(resp, &f, 12);
        f
    })
    .await;
    // Inside MULTI/EXEC only what the view holds is served: inline objects, not chunks.
    let small = f.small.clone();
    blocking(move || {
        let mut con = redis::Client::open(format!("redis://{resp}/"))
            .unwrap()
            .get_connection_with_timeout(PATIENCE)
            .unwrap();
        let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
        for args in [&["GET", "b:small"][..], &["BLOB.READ", "b:small", "1", "3"]] {
            let q: String = redis::cmd(args[0]).arg(&args[1..]).query(&mut con).unwrap();
            assert_eq!(q, "QUEUED");
        }
        let got: Vec<Vec<u8>> = redis::cmd("EXEC").query(&mut con).unwrap();
        assert_eq!(got, vec![small.clone(), small[1..4].to_vec()]);
        // The client surfaces the EXEC element's error as the reply's.
        let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
        let _: String = redis::cmd("GET").arg("b:big").query(&mut con).unwrap();
        let e = redis::cmd("EXEC")
            .query::<redis::Value>(&mut con)
            .unwrap_err();
        assert!(
            err_text(&e).contains("large object of 655483 bytes stored in chunks"),
            "{e}"
        );
    })
    .await;

    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blob_read_and_get_through_every_node_of_a_cluster() {
    let mut cfg = EmbeddedConfig {
        dcs: 2,
        nodes_per_dc: 2,
        wan_latency: Duration::from_millis(2),
        heartbeat: Duration::from_millis(100),
        ..EmbeddedConfig::default()
    };
    cfg.node.blob = blob_config();
    let c = crate::start_serving(cfg, Duration::from_secs(60))
        .await
        .unwrap();
    let f = std::sync::Arc::new(put_all(&c.states[0].objects).await);
    for (i, m) in c.members.iter().enumerate() {
        let addr = m.resp.expect("a RESP address");
        let f = f.clone();
        blocking(move || check_all(addr, &f, 100 + i as u64, false)).await;
    }
    let (first, second) = (
        c.members[0].resp.expect("a RESP address"),
        c.members[1].resp.expect("a RESP address"),
    );
    blocking(move || {
        check_handles(first, &f, 200);
        // A handle lives on the node that opened it.
        let con = |addr: SocketAddr| {
            redis::Client::open(format!("redis://{addr}/"))
                .unwrap()
                .get_connection_with_timeout(PATIENCE)
                .unwrap()
        };
        let (h, _): (u64, u64) = redis::cmd("BLOB.OPEN")
            .arg("b:big")
            .query(&mut con(first))
            .unwrap();
        let pread = |addr| {
            redis::cmd("BLOB.PREAD")
                .arg("b:big")
                .arg(h)
                .arg(0)
                .arg(10)
                .query::<Vec<u8>>(&mut con(addr))
        };
        let e = pread(second).unwrap_err();
        assert!(err_text(&e).contains("no such blob handle"), "{e}");
        assert_eq!(pread(first).unwrap(), f.big[..10]);
    })
    .await;
    c.shutdown().await;
}

/// `blob.max_open_handles` refuses with the limit named, a closed handle makes room, idle
/// handles close by themselves, and handles are refused inside MULTI/EXEC (single node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blob_handles_are_bounded_and_close_when_idle() {
    let node = single_node(BlobConfig {
        max_open_handles: 3,
        handle_idle_ms: 200,
        ..blob_config()
    })
    .await;
    let (resp, state) = (node.resp, node.state.clone());
    put_all(&state.objects).await;
    blocking(move || {
        let mut con = redis::Client::open(format!("redis://{resp}/"))
            .unwrap()
            .get_connection_with_timeout(PATIENCE)
            .unwrap();
        let open = |con: &mut redis::Connection| {
            redis::cmd("BLOB.OPEN")
                .arg("b:big")
                .query::<(u64, u64)>(con)
        };
        let handles: Vec<u64> = (0..3).map(|_| open(&mut con).unwrap().0).collect();
        let e = open(&mut con).unwrap_err();
        assert!(
            err_text(&e).contains("blob handle limit reached")
                && err_text(&e).contains("blob.max_open_handles 3"),
            "{e}"
        );
        let closed: i64 = redis::cmd("BLOB.CLOSE")
            .arg("b:big")
            .arg(handles[0])
            .query(&mut con)
            .unwrap();
        assert_eq!(closed, 1);
        let fresh = open(&mut con).unwrap().0;
        // Unused for well past blob.handle_idle_ms (and a housekeeping tick): all closed,
        // and the limit has room again.
        std::thread::sleep(Duration::from_millis(2500));
        let e = redis::cmd("BLOB.PREAD")
            .arg("b:big")
            .arg(fresh)
            .arg(0)
            .arg(1)
            .query::<Vec<u8>>(&mut con)
            .unwrap_err();
        assert!(err_text(&e).contains("no such blob handle"), "{e}");
        for _ in 0..3 {
            open(&mut con).unwrap();
        }
        // Not inside a transaction.
        let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
        let q: String = redis::cmd("BLOB.OPEN")
            .arg("b:big")
            .query(&mut con)
            .unwrap();
        assert_eq!(q, "QUEUED");
        let e = redis::cmd("EXEC")
            .query::<redis::Value>(&mut con)
            .unwrap_err();
        assert!(
            err_text(&e).contains("cannot run inside a transaction"),
            "{e}"
        );
    })
    .await;
    assert_eq!(state.objects.handle_usage().0, 3);
    node.stop().await;
}
