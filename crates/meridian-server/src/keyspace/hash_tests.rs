//! The hash commands over the standalone keyspace (kind, TTL, WATCH counts, SCAN TYPE, INFO
//! counts), and a model test: random sequences of hash and string commands against a
//! `BTreeMap` model, reply for reply. (The semantics alone, over a plain map view, are tested
//! in `meridian_redis::hashes`.)

use crate::keyspace::Keyspace;
use bytes::Bytes;
use meridian_core::{ManualClock, Timestamp};
use meridian_redis::RedisError;
use meridian_redis::error::arity_error;
use meridian_redis::value::parse_i64;
use meridian_redis::{Args, Cmd, Kind, OwnedArgs, Reply, View, hashes, strings};
use meridian_storage::MemEngine;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
        let r = if hashes::handles(cmd) {
            hashes::exec_on_view(cmd, args, v, reply)
        } else if cmd.spec().arity_ok(args.len()) {
            strings::exec_on_view(cmd, args, v, reply)
        } else {
            Err(arity_error(cmd.spec().name))
        };
        if let Err(e) = r {
            reply.command_error(e);
        }
    })
}

const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

// ----- over the standalone keyspace ------------------------------------------------------

fn keyspace() -> (Arc<Keyspace>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000_000)));
    let ks = Arc::new(Keyspace::new(Arc::new(MemEngine::new()), clock.clone()));
    (ks, clock)
}

fn exec_ks(ks: &Keyspace, parts: &[&[u8]]) -> Vec<u8> {
    with_args(parts, |cmd, args, reply| {
        let r = if cmd.spec().arity_ok(args.len()) {
            ks.execute(cmd, args, reply)
        } else {
            Err(arity_error(cmd.spec().name))
        };
        if let Err(e) = r {
            reply.command_error(e);
        }
    })
}

fn ks_line(ks: &Keyspace, l: &str) -> String {
    let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
    String::from_utf8(exec_ks(ks, &parts)).unwrap()
}

#[test]
fn the_keyspace_stores_hashes_with_their_kind_ttl_and_counts() {
    let (ks, clock) = keyspace();
    assert_eq!(ks_line(&ks, "HSET h f 1 g 2"), ":2\r\n");
    assert_eq!(ks_line(&ks, "SET s v"), "+OK\r\n");
    assert_eq!(ks.key_type(b"h").unwrap(), "hash");
    assert_eq!(ks.key_type(b"s").unwrap(), "string");
    assert!(matches!(ks.get(b"h"), Err(RedisError::WrongType)));
    assert_eq!(
        ks.mget(&[&b"h"[..], b"s"]).unwrap(),
        [None, Some(Bytes::from("v"))]
    );
    assert_eq!(ks.stats().keys, 2, "INFO's keys= counts the hash");
    assert_eq!(ks_line(&ks, "PEXPIRE h 1000"), ":1\r\n");
    assert_eq!(ks.stats().expires, 1);
    assert_eq!(ks_line(&ks, "HSET h k 3"), ":1\r\n");
    assert_eq!(
        ks.stats().expires,
        1,
        "HSET keeps the TTL (and its index entry)"
    );
    assert_eq!(ks_line(&ks, "PTTL h"), ":1000\r\n");
    // SCAN ... TYPE.
    assert_eq!(
        ks.scan_type(0, None, 100, Some(Kind::Hash)).unwrap().1,
        [Bytes::from("h")]
    );
    assert_eq!(
        ks.scan_type(0, None, 100, Some(Kind::String)).unwrap().1,
        [Bytes::from("s")]
    );
    assert_eq!(ks.scan(0, None, 100).unwrap().1.len(), 2);
    // Expiry removes the whole hash.
    clock.advance(Duration::from_millis(1001));
    assert_eq!(ks_line(&ks, "HGET h f"), "$-1\r\n");
    assert_eq!(ks_line(&ks, "EXISTS h"), ":0\r\n");
    assert_eq!(ks.stats().expires, 0);
    // HDEL of the last field deletes the key.
    ks_line(&ks, "HSET h2 f 1");
    assert_eq!(ks_line(&ks, "HDEL h2 f"), ":1\r\n");
    assert_eq!(ks.stats().keys, 1);
    assert_eq!(ks.key_type(b"h2").unwrap(), "none");
}

#[test]
fn a_transaction_runs_hash_commands_over_its_overlay_and_watch_sees_them() {
    let (ks, _clock) = keyspace();
    ks_line(&ks, "HSET h f 1");
    let w = ks.watch(b"h");
    // A hash write by someone else is a modification of the watched key.
    ks_line(&ks, "HINCRBY h f 1");
    let ran = ks
        .transaction(
            std::iter::once(&b"h"[..]),
            false,
            std::slice::from_ref(&w),
            |_| (),
        )
        .unwrap();
    assert!(ran.is_none(), "EXEC fails after a watched hash changed");
    ks.unwatch(&w);
    // Inside one overlay: writes, then reads of the same hash, then a type error.
    let out = ks
        .transaction(std::iter::once(&b"h"[..]), false, &[], |ov| {
            let mut out = String::new();
            for l in [
                "HSET h g 5",
                "HGETALL h",
                "HDEL h f g",
                "EXISTS h",
                "HSET h x 1",
                "GET h",
            ] {
                let parts: Vec<&[u8]> = l.split(' ').map(str::as_bytes).collect();
                out.push_str(&String::from_utf8(run_on(ov, &parts, false)).unwrap());
            }
            out
        })
        .unwrap()
        .unwrap();
    assert_eq!(
        out,
        format!(
            ":1\r\n*4\r\n$1\r\nf\r\n$1\r\n2\r\n$1\r\ng\r\n$1\r\n5\r\n:2\r\n:0\r\n:1\r\n{WRONGTYPE}"
        )
    );
    assert_eq!(ks_line(&ks, "HGETALL h"), "*2\r\n$1\r\nx\r\n$1\r\n1\r\n");
    assert_eq!(
        ks.key_type(b"h").unwrap(),
        "hash",
        "the batch kept the kind"
    );
}

/// SORT's `*->field` patterns read hashes the keyspace holds in memory, whatever stripes
/// they sit in (the command then runs with every stripe locked), and a held hash is never
/// materialized for them.
#[test]
fn sort_reads_held_hashes_through_field_patterns() {
    let (ks, _clock) = keyspace();
    ks_line(&ks, "RPUSH l a b c d");
    for (elem, weight) in [("a", 4), ("b", 1), ("c", 3), ("d", 2)] {
        ks_line(&ks, &format!("HSET w_{elem} weight {weight} name n{elem}"));
    }
    let sorted = "*4\r\n$1\r\nb\r\n$1\r\nd\r\n$1\r\nc\r\n$1\r\na\r\n";
    assert_eq!(ks_line(&ks, "SORT l BY w_*->weight"), sorted);
    assert_eq!(ks_line(&ks, "SORT_RO l BY w_*->weight"), sorted);
    assert_eq!(
        ks_line(&ks, "SORT l BY nosort GET w_*->name"),
        "*4\r\n$2\r\nna\r\n$2\r\nnb\r\n$2\r\nnc\r\n$2\r\nnd\r\n"
    );
}

// ----- the model test --------------------------------------------------------------------

/// A hash as Redis keeps a small one (a listpack): fields in insertion order, a deletion
/// closing the gap — the order a held hash of a few fields answers in.
#[derive(Clone, Debug, Default, PartialEq)]
struct ModelHash(Vec<(Vec<u8>, Vec<u8>)>);

impl ModelHash {
    fn insert(&mut self, f: Vec<u8>, v: Vec<u8>) -> Option<Vec<u8>> {
        match self.0.iter_mut().find(|(x, _)| *x == f) {
            Some((_, old)) => Some(std::mem::replace(old, v)),
            None => {
                self.0.push((f, v));
                None
            }
        }
    }
    fn remove(&mut self, f: &[u8]) -> Option<Vec<u8>> {
        let at = self.0.iter().position(|(x, _)| x == f)?;
        Some(self.0.remove(at).1)
    }
    fn get(&self, f: &[u8]) -> Option<&Vec<u8>> {
        self.0.iter().find(|(x, _)| x == f).map(|(_, v)| v)
    }
    fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<u8>)> {
        self.0.iter().map(|(f, v)| (f, v))
    }
    fn contains_key(&self, f: &[u8]) -> bool {
        self.get(f).is_some()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Str(Vec<u8>),
    Hash(ModelHash),
}

#[derive(Clone, Debug)]
enum Op {
    Hset(u8, Vec<(u8, u8)>),
    Hsetnx(u8, u8, u8),
    Hdel(u8, Vec<u8>),
    Hget(u8, u8),
    Hmget(u8, Vec<u8>),
    Hincrby(u8, u8, i64),
    Hlen(u8),
    Hgetall(u8),
    Hexists(u8, u8),
    Hstrlen(u8, u8),
    Set(u8, u8),
    Get(u8),
    Del(u8),
    Type(u8),
    Append(u8, u8),
    Mget(u8, u8),
}

const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];
const FIELDS: [&[u8]; 4] = [b"f", b"g", b"h", b""];
const VALUES: [&[u8]; 5] = [b"1", b"-3", b"x", b"", b"9223372036854775807"];

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..3;
    let f = 0u8..4;
    let v = 0u8..5;
    prop_oneof![
        (
            k.clone(),
            prop::collection::vec((f.clone(), v.clone()), 1..4)
        )
            .prop_map(|(k, p)| Op::Hset(k, p)),
        (k.clone(), f.clone(), v.clone()).prop_map(|(k, f, v)| Op::Hsetnx(k, f, v)),
        (k.clone(), prop::collection::vec(f.clone(), 1..4)).prop_map(|(k, f)| Op::Hdel(k, f)),
        (k.clone(), f.clone()).prop_map(|(k, f)| Op::Hget(k, f)),
        (k.clone(), prop::collection::vec(f.clone(), 1..4)).prop_map(|(k, f)| Op::Hmget(k, f)),
        (
            k.clone(),
            f.clone(),
            prop_oneof![-3i64..4, Just(i64::MAX), Just(i64::MIN)]
        )
            .prop_map(|(k, f, d)| Op::Hincrby(k, f, d)),
        k.clone().prop_map(Op::Hlen),
        k.clone().prop_map(Op::Hgetall),
        (k.clone(), f.clone()).prop_map(|(k, f)| Op::Hexists(k, f)),
        (k.clone(), f.clone()).prop_map(|(k, f)| Op::Hstrlen(k, f)),
        (k.clone(), v.clone()).prop_map(|(k, v)| Op::Set(k, v)),
        k.clone().prop_map(Op::Get),
        k.clone().prop_map(Op::Del),
        k.clone().prop_map(Op::Type),
        (k.clone(), v.clone()).prop_map(|(k, v)| Op::Append(k, v)),
        (k.clone(), k).prop_map(|(a, b)| Op::Mget(a, b)),
    ]
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn opt_bulk(out: &mut Vec<u8>, b: Option<&Vec<u8>>) {
    match b {
        Some(b) => bulk(out, b),
        None => out.extend_from_slice(b"$-1\r\n"),
    }
}

fn int(out: &mut Vec<u8>, i: i64) {
    out.extend_from_slice(format!(":{i}\r\n").as_bytes());
}

/// The command's arguments and the model's reply (applying it to `m`).
fn model(m: &mut BTreeMap<Vec<u8>, Val>, op: &Op) -> (Vec<Vec<u8>>, Vec<u8>) {
    let key = |k: &u8| KEYS[*k as usize].to_vec();
    let fld = |f: &u8| FIELDS[*f as usize].to_vec();
    let val = |v: &u8| VALUES[*v as usize].to_vec();
    let mut out = Vec::new();
    let wrongtype = WRONGTYPE.as_bytes().to_vec();
    // The hash at `k` for a hash command: Err(reply) for a string.
    fn hash_of<'m>(
        m: &'m mut BTreeMap<Vec<u8>, Val>,
        k: &[u8],
    ) -> std::result::Result<Option<&'m mut ModelHash>, ()> {
        match m.get_mut(k) {
            None => Ok(None),
            Some(Val::Hash(h)) => Ok(Some(h)),
            Some(Val::Str(_)) => Err(()),
        }
    }
    let args: Vec<Vec<u8>> = match op {
        Op::Hset(k, pairs) => {
            let mut a = vec![b"HSET".to_vec(), key(k)];
            for (f, v) in pairs {
                a.push(fld(f));
                a.push(val(v));
            }
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => {
                    let mut h = h.cloned().unwrap_or_default();
                    let mut created = 0;
                    for (f, v) in pairs {
                        created += h.insert(fld(f), val(v)).is_none() as i64;
                    }
                    m.insert(key(k), Val::Hash(h));
                    int(&mut out, created);
                }
            }
            a
        }
        Op::Hsetnx(k, f, v) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => {
                    let mut h = h.cloned().unwrap_or_default();
                    let new = !h.contains_key(&fld(f));
                    if new {
                        h.insert(fld(f), val(v));
                    }
                    m.insert(key(k), Val::Hash(h));
                    int(&mut out, new as i64);
                }
            }
            vec![b"HSETNX".to_vec(), key(k), fld(f), val(v)]
        }
        Op::Hdel(k, fs) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(None) => int(&mut out, 0),
                Ok(Some(h)) => {
                    let n = fs.iter().filter(|f| h.remove(&fld(f)).is_some()).count();
                    if h.is_empty() {
                        m.remove(&key(k));
                    }
                    int(&mut out, n as i64);
                }
            }
            let mut a = vec![b"HDEL".to_vec(), key(k)];
            a.extend(fs.iter().map(fld));
            a
        }
        Op::Hget(k, f) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => opt_bulk(&mut out, h.and_then(|h| h.get(&fld(f)))),
            }
            vec![b"HGET".to_vec(), key(k), fld(f)]
        }
        Op::Hmget(k, fs) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => {
                    out.extend_from_slice(format!("*{}\r\n", fs.len()).as_bytes());
                    for f in fs {
                        opt_bulk(&mut out, h.as_ref().and_then(|h| h.get(&fld(f))));
                    }
                }
            }
            let mut a = vec![b"HMGET".to_vec(), key(k)];
            a.extend(fs.iter().map(fld));
            a
        }
        Op::Hincrby(k, f, d) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => {
                    let mut h = h.cloned().unwrap_or_default();
                    let old = h.get(&fld(f)).map(|v| parse_i64(v));
                    match old {
                        Some(None) => {
                            out = b"-ERR hash value is not an integer\r\n".to_vec();
                        }
                        o => match o.flatten().unwrap_or(0).checked_add(*d) {
                            None => {
                                out = b"-ERR increment or decrement would overflow\r\n".to_vec()
                            }
                            Some(n) => {
                                h.insert(fld(f), n.to_string().into_bytes());
                                m.insert(key(k), Val::Hash(h));
                                int(&mut out, n);
                            }
                        },
                    }
                }
            }
            vec![
                b"HINCRBY".to_vec(),
                key(k),
                fld(f),
                d.to_string().into_bytes(),
            ]
        }
        Op::Hlen(k) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => int(&mut out, h.map_or(0, |h| h.len() as i64)),
            }
            vec![b"HLEN".to_vec(), key(k)]
        }
        Op::Hgetall(k) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => {
                    let h = h.cloned().unwrap_or_default();
                    out.extend_from_slice(format!("*{}\r\n", h.len() * 2).as_bytes());
                    for (f, v) in h.iter() {
                        bulk(&mut out, f);
                        bulk(&mut out, v);
                    }
                }
            }
            vec![b"HGETALL".to_vec(), key(k)]
        }
        Op::Hexists(k, f) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => int(&mut out, h.is_some_and(|h| h.contains_key(&fld(f))) as i64),
            }
            vec![b"HEXISTS".to_vec(), key(k), fld(f)]
        }
        Op::Hstrlen(k, f) => {
            match hash_of(m, &key(k)) {
                Err(()) => out = wrongtype,
                Ok(h) => int(
                    &mut out,
                    h.and_then(|h| h.get(&fld(f))).map_or(0, |v| v.len() as i64),
                ),
            }
            vec![b"HSTRLEN".to_vec(), key(k), fld(f)]
        }
        Op::Set(k, v) => {
            m.insert(key(k), Val::Str(val(v)));
            out = b"+OK\r\n".to_vec();
            vec![b"SET".to_vec(), key(k), val(v)]
        }
        Op::Get(k) => {
            match m.get(&key(k)) {
                Some(Val::Hash(_)) => out = wrongtype,
                Some(Val::Str(s)) => bulk(&mut out, s),
                None => out = b"$-1\r\n".to_vec(),
            }
            vec![b"GET".to_vec(), key(k)]
        }
        Op::Del(k) => {
            int(&mut out, m.remove(&key(k)).is_some() as i64);
            vec![b"DEL".to_vec(), key(k)]
        }
        Op::Type(k) => {
            out = match m.get(&key(k)) {
                Some(Val::Hash(_)) => b"+hash\r\n".to_vec(),
                Some(Val::Str(_)) => b"+string\r\n".to_vec(),
                None => b"+none\r\n".to_vec(),
            };
            vec![b"TYPE".to_vec(), key(k)]
        }
        Op::Append(k, v) => {
            match m.get_mut(&key(k)) {
                Some(Val::Hash(_)) => out = wrongtype,
                Some(Val::Str(s)) => {
                    s.extend_from_slice(&val(v));
                    int(&mut out, s.len() as i64);
                }
                None => {
                    m.insert(key(k), Val::Str(val(v)));
                    int(&mut out, val(v).len() as i64);
                }
            }
            vec![b"APPEND".to_vec(), key(k), val(v)]
        }
        Op::Mget(a, b) => {
            out.extend_from_slice(b"*2\r\n");
            for k in [a, b] {
                match m.get(&key(k)) {
                    Some(Val::Str(s)) => bulk(&mut out, s),
                    _ => out.extend_from_slice(b"$-1\r\n"),
                }
            }
            vec![b"MGET".to_vec(), key(a), key(b)]
        }
    };
    (args, out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random hash and string commands on a few keys, fields and values (integers, an
    /// overflow's edge, non-integers, empty strings) over the standalone keyspace, against a
    /// `BTreeMap` model: every reply equal, and the keyspace's types and sizes the model's.
    #[test]
    fn the_keyspace_matches_a_model(ops in prop::collection::vec(op(), 1..60)) {
        let (ks, _clock) = keyspace();
        let mut m = BTreeMap::new();
        for op in &ops {
            let (args, want) = model(&mut m, op);
            let parts: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            let got = exec_ks(&ks, &parts);
            prop_assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want),
                "{:?}",
                op
            );
        }
        prop_assert_eq!(ks.dbsize(), m.len() as u64);
        for k in KEYS {
            let want = match m.get(k) {
                Some(Val::Hash(_)) => "hash",
                Some(Val::Str(_)) => "string",
                None => "none",
            };
            prop_assert_eq!(ks.key_type(k).unwrap(), want);
        }
    }
}
