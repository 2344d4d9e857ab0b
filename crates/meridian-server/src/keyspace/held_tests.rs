//! Collections held in memory (`held`), against the same commands on a keyspace that stores
//! them as bytes: random sequences of list, set, sorted-set and generic commands (TTLs,
//! RENAME, COPY, DEL, SET over a collection, expiry, MULTI) must answer byte for byte alike
//! and leave the same keyspace; and what holding keeps of the keyspace's own guarantees
//! (markers the listings understand, WATCH, memory, FLUSHALL).

use crate::keyspace::{Keyspace, KeyspaceConfig};
use bytes::Bytes;
use meridian_core::envelope::FLAG_HELD;
use meridian_core::{ManualClock, Timestamp};
use meridian_redis::error::arity_error;
use meridian_redis::{Cmd, Kind, OwnedArgs, Reply};
use meridian_storage::MemEngine;
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;

fn keyspace(hold: bool) -> (Arc<Keyspace>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000_000)));
    let config = KeyspaceConfig {
        hold_collections: hold,
        ..KeyspaceConfig::default()
    };
    let ks = Keyspace::with_config(Arc::new(MemEngine::new()), clock.clone(), config);
    (Arc::new(ks), clock)
}

/// Runs one command line (words split on spaces) as the RESP front end does.
fn run(ks: &Keyspace, line: &str) -> String {
    let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let owned = OwnedArgs::from_slices(parts.iter().copied());
    let args = owned.get();
    let cmd = Cmd::lookup(parts[0]).expect("a known command");
    let mut reply = Reply::new(64);
    let r = if cmd.spec().arity_ok(args.len()) {
        ks.execute(cmd, args, &mut reply)
    } else {
        Err(arity_error(cmd.spec().name))
    };
    if let Err(e) = r {
        reply.command_error(e);
    }
    String::from_utf8_lossy(&reply.out).into_owned()
}

/// Runs `lines` as one MULTI/EXEC over every stripe.
fn exec(ks: &Keyspace, lines: &[String]) -> String {
    let out = ks
        .transaction(std::iter::empty(), true, &[], |ov| {
            let mut all = String::new();
            for line in lines {
                let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
                let owned = OwnedArgs::from_slices(parts.iter().copied());
                let cmd = Cmd::lookup(parts[0]).expect("a known command");
                let mut reply = Reply::new(64);
                if let Err(e) =
                    meridian_redis::types::exec_on_view(cmd, owned.get(), ov, &mut reply)
                {
                    reply.command_error(e);
                }
                all.push_str(&String::from_utf8_lossy(&reply.out));
            }
            all
        })
        .expect("EXEC runs");
    out.expect("nothing watched")
}

/// Whether the engine holds `key` as a held marker.
fn is_held(ks: &Keyspace, key: &[u8]) -> bool {
    ks.engine()
        .get_value(key, Timestamp::MAX)
        .unwrap()
        .is_some_and(|raw| raw[0] & FLAG_HELD != 0)
}

#[test]
fn pushes_adds_and_pops_change_the_held_object_not_the_engine() {
    let (ks, _) = keyspace(true);
    assert_eq!(run(&ks, "RPUSH l a b c"), ":3\r\n");
    assert_eq!(run(&ks, "SADD s x y"), ":2\r\n");
    assert_eq!(run(&ks, "ZADD z 1 m 2 n"), ":2\r\n");
    for k in [&b"l"[..], b"s", b"z"] {
        assert!(is_held(&ks, k), "{:?} is held", k);
    }
    assert_eq!(run(&ks, "LPUSH l z"), ":4\r\n");
    // A key after numkeys is locked and found as any key.
    assert_eq!(
        run(&ks, "LMPOP 1 l RIGHT"),
        "*2\r\n$1\r\nl\r\n*1\r\n$1\r\nc\r\n"
    );
    assert_eq!(run(&ks, "RPUSH l c"), ":4\r\n");
    assert_eq!(
        run(&ks, "LRANGE l 0 -1"),
        "*4\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    );
    // Listings see the markers' types; TYPE and EXISTS read through them.
    assert_eq!(
        ks.scan_type(0, None, 10, Some(Kind::List)).unwrap().1,
        [Bytes::from("l")]
    );
    assert_eq!(ks.keys(b"*").unwrap().len(), 3);
    assert_eq!(ks.dbsize(), 3);
    assert_eq!(run(&ks, "TYPE z"), "+zset\r\n");
    assert_eq!(run(&ks, "EXISTS l s z"), ":3\r\n");
    // The last element popped deletes the key, marker and object.
    assert!(run(&ks, "SPOP s 5").starts_with("*2"));
    assert_eq!(run(&ks, "EXISTS s"), ":0\r\n");
    assert!(
        ks.engine()
            .get_value(b"s", Timestamp::MAX)
            .unwrap()
            .is_none()
    );
    // A string written over a held list replaces it.
    assert_eq!(run(&ks, "SET l str"), "+OK\r\n");
    assert_eq!(run(&ks, "GET l"), "$3\r\nstr\r\n");
    assert!(!is_held(&ks, b"l"));
    ks.flush().unwrap();
    assert_eq!(ks.dbsize(), 0);
    assert_eq!(run(&ks, "ZCARD z"), ":0\r\n");
}

#[test]
fn expire_and_persist_keep_the_object_and_expiry_removes_it() {
    let (ks, clock) = keyspace(true);
    run(&ks, "RPUSH l a b");
    assert_eq!(run(&ks, "PEXPIRE l 1000"), ":1\r\n");
    assert!(is_held(&ks, b"l"), "EXPIRE keeps the held object");
    assert_eq!(run(&ks, "RPUSH l c"), ":3\r\n");
    assert_eq!(run(&ks, "PTTL l"), ":1000\r\n");
    assert_eq!(ks.stats().expires, 1);
    assert_eq!(run(&ks, "PERSIST l"), ":1\r\n");
    assert!(is_held(&ks, b"l"));
    assert_eq!(run(&ks, "TTL l"), ":-1\r\n");
    assert_eq!(ks.stats().expires, 0);
    run(&ks, "PEXPIRE l 1000");
    clock.advance(Duration::from_millis(1001));
    assert_eq!(run(&ks, "LLEN l"), ":0\r\n");
    assert_eq!(ks.dbsize(), 0);
    assert_eq!(ks.stats().expired_keys, 1);
    // Active expiry deletes a held key nobody reads.
    run(&ks, "ZADD z 1 m");
    run(&ks, "PEXPIRE z 10");
    clock.advance(Duration::from_millis(11));
    assert_eq!(ks.expire_cycle(100).expired, 1);
    assert_eq!(ks.dbsize(), 0);
}

#[test]
fn watch_sees_changes_in_place_and_memory_counts_held_objects() {
    let (ks, _) = keyspace(true);
    run(&ks, "RPUSH l a");
    let mut ws = crate::keyspace::WatchSet::new(ks.clone());
    ws.watch(b"l");
    let before = ks.used_memory();
    run(&ks, &format!("RPUSH l {}", "x".repeat(10_000)));
    assert!(
        ks.used_memory() >= before + 10_000,
        "held memory is counted"
    );
    let ran = ks
        .transaction(std::iter::empty(), false, ws.watches(), |_| ())
        .unwrap();
    assert!(
        ran.is_none(),
        "EXEC fails: the watched list changed in place"
    );
    let usage = ks.memory_usage(b"l").unwrap().unwrap();
    assert!(usage >= 10_000, "MEMORY USAGE counts the object: {usage}");
    run(&ks, "DEL l");
    assert!(ks.used_memory() < before + 10_000);
}

#[test]
fn a_multi_changes_held_objects_in_place_and_reads_its_own_writes() {
    let (ks, _) = keyspace(true);
    run(&ks, "RPUSH q a b");
    let lines: Vec<String> = [
        "RPUSH q c",
        "LPOP q",
        "LMOVE q q2 LEFT RIGHT",
        "LRANGE q 0 -1",
        "SET s str",
        "DEL s",
        "SADD s m",
        "SCARD s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        exec(&ks, &lines),
        ":3\r\n$1\r\na\r\n$1\r\nb\r\n*1\r\n$1\r\nc\r\n+OK\r\n:1\r\n:1\r\n:1\r\n"
    );
    assert!(is_held(&ks, b"q") && is_held(&ks, b"q2") && is_held(&ks, b"s"));
    assert_eq!(run(&ks, "LRANGE q2 0 -1"), "*1\r\n$1\r\nb\r\n");
}

// ----- held against bytes, command for command ---------------------------------------------

/// One step of a random history.
#[derive(Clone, Debug)]
enum Step {
    Line(String),
    Multi(Vec<String>),
    Advance(u64),
}

fn line() -> impl Strategy<Value = String> {
    let key = prop::sample::select(vec!["a", "b", "c"]);
    let val = prop::sample::select(vec!["x", "y", "z", "1", "2", "10"]);
    let templates = vec![
        "RPUSH {k} {v} {v}",
        "LPUSH {k} {v}",
        "LPOP {k}",
        "RPOP {k} 2",
        "LRANGE {k} 0 -1",
        "LINDEX {k} 1",
        "LSET {k} 0 {v}",
        "LREM {k} 0 {v}",
        "LTRIM {k} 1 -1",
        "LINSERT {k} BEFORE {v} {v}",
        "LMOVE {k} {k} LEFT RIGHT",
        "RPOPLPUSH {k} {k}",
        "LLEN {k}",
        // The key after numkeys: its stripe is the one to lock.
        "LMPOP 1 {k} RIGHT COUNT 2",
        "ZMPOP 1 {k} MIN",
        "SINTERCARD 1 {k}",
        "SADD {k} {v} {v}",
        "SREM {k} {v}",
        "SISMEMBER {k} {v}",
        "SCARD {k}",
        "SORT {k} ALPHA",
        "SMOVE {k} {k} {v}",
        "SINTERSTORE {k} {k} {k}",
        "SUNIONSTORE {k} {k} {k}",
        "ZADD {k} {v} {v}",
        "ZADD {k} INCR {v} {v}",
        "ZREM {k} {v}",
        "ZRANGE {k} 0 -1 WITHSCORES",
        "ZPOPMIN {k}",
        "ZRANK {k} {v}",
        "ZSCORE {k} {v}",
        "ZUNIONSTORE {k} 2 {k} {k}",
        // Deadlines a quarter second off whole seconds: the manual clock moves a microsecond
        // per read, and the two keyspaces read it a different number of times.
        "PEXPIRE {k} 5250",
        "PERSIST {k}",
        "TTL {k}",
        "TYPE {k}",
        "EXISTS {k}",
        "DEL {k}",
        "SET {k} {v}",
        "RENAME {k} {k}",
        "COPY {k} {k} REPLACE",
        "DUMP {k}",
        "DBSIZE",
    ];
    (
        prop::sample::select(templates),
        prop::collection::vec(key, 3),
        prop::collection::vec(val, 3),
    )
        .prop_map(|(t, ks, vs)| {
            let (mut out, mut ki, mut vi) = (String::new(), 0, 0);
            let mut rest = t;
            while let Some(i) = rest.find('{') {
                out.push_str(&rest[..i]);
                if rest[i..].starts_with("{k}") {
                    out.push_str(ks[ki % 3]);
                    ki += 1;
                } else {
                    out.push_str(vs[vi % 3]);
                    vi += 1;
                }
                rest = &rest[i + 3..];
            }
            out.push_str(rest);
            out
        })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => line().prop_map(Step::Line),
        1 => prop::collection::vec(line(), 1..5).prop_map(Step::Multi),
        1 => (1u64..4).prop_map(Step::Advance),
    ]
}

/// What a keyspace holds, as Redis would show it: each key's type and contents.
fn snapshot(ks: &Keyspace) -> Vec<String> {
    ks.keys(b"*")
        .unwrap()
        .iter()
        .map(|k| {
            let k = String::from_utf8_lossy(k).into_owned();
            let contents = match run(ks, &format!("TYPE {k}")).as_str() {
                "+list\r\n" => run(ks, &format!("LRANGE {k} 0 -1")),
                "+set\r\n" => run(ks, &format!("SORT {k} ALPHA")),
                "+zset\r\n" => run(ks, &format!("ZRANGE {k} 0 -1 WITHSCORES")),
                _ => run(ks, &format!("DUMP {k}")),
            };
            format!("{k} {contents} {}", run(ks, &format!("TTL {k}")))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn held_collections_answer_as_stored_ones(steps in prop::collection::vec(step(), 1..60)) {
        let (held, held_clock) = keyspace(true);
        let (plain, plain_clock) = keyspace(false);
        for s in &steps {
            match s {
                Step::Line(l) => prop_assert_eq!(run(&held, l), run(&plain, l), "{}", l),
                Step::Multi(ls) => prop_assert_eq!(exec(&held, ls), exec(&plain, ls), "{:?}", ls),
                Step::Advance(secs) => {
                    held_clock.advance(Duration::from_secs(*secs));
                    plain_clock.advance(Duration::from_secs(*secs));
                }
            }
        }
        prop_assert_eq!(snapshot(&held), snapshot(&plain));
        prop_assert_eq!(held.stats().expires, plain.stats().expires);
    }
}
