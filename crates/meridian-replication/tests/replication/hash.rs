//! Redis hashes on eventual buckets (`eventual::map`): a map CRDT merged field by field, so
//! hash commands made concurrently in both DCs all take effect; WRONGTYPE between hashes and
//! strings; a hash's TTL.

use super::*;
use meridian_core::envelope::Kind;
use meridian_replication::{Dispatch, Entry, HashOps, HashReply, Read, ReadOpts, ReplicationError};
use std::collections::BTreeMap;

fn hset(pairs: &[(&str, &str)]) -> HashOps {
    HashOps::Set(pairs.iter().map(|(f, v)| (b(f), b(v))).collect())
}

/// The fields a plain GET of `key` shows through `d` (`None`: no hash).
async fn fields(d: &Dispatch, key: &[u8]) -> Option<BTreeMap<Bytes, Bytes>> {
    let e = d.get_entry(key).await.unwrap()?;
    assert_eq!(e.kind, Kind::Hash);
    Some(meridian_core::hash::decode(&e.data).unwrap())
}

/// Clients on nodes of both DCs concurrently HSET their own fields and HINCRBY one shared
/// field of one key: once replication settles, every node shows every field and the exact
/// sum of the increments.
#[tokio::test(start_paused = true)]
async fn concurrent_hash_commands_from_two_dcs_all_take_effect() {
    let c = Cluster::start_with(47, |_| {}).await;
    let key = &b"plain:hash"[..];
    let mut tasks = tokio::task::JoinSet::new();
    for node in [1, 2, 4, 5] {
        for t in 0..3 {
            let d = Dispatch::new(c.node(NodeId(node)).clone());
            tasks.spawn(async move {
                for i in 0..4 {
                    let field = format!("f{node}-{t}-{i}");
                    let added = d.hash_update(key, hset(&[(&field, "v")])).await.unwrap();
                    assert_eq!(added, HashReply::Added(1));
                    let delta = if (t + i) % 3 == 0 { -1 } else { 2 };
                    let incr = HashOps::IncrBy {
                        field: b("n"),
                        delta,
                    };
                    assert!(matches!(
                        d.hash_update(key, incr).await.unwrap(),
                        HashReply::Value(_)
                    ));
                }
            });
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let want: i64 = (0..3)
        .map(|t| {
            (0..4)
                .map(|i| if (t + i) % 3 == 0 { -1 } else { 2 })
                .sum::<i64>()
        })
        .sum::<i64>()
        * 4;
    sleep(Duration::from_secs(2)).await;
    for node in 1..=6 {
        let d = Dispatch::new(c.node(NodeId(node)).clone());
        let got = fields(&d, key).await.expect("a hash");
        assert_eq!(got.len(), 4 * 3 * 4 + 1, "node {node}: {got:?}");
        for n in [1, 2, 4, 5] {
            for t in 0..3 {
                for i in 0..4 {
                    let f = b(&format!("f{n}-{t}-{i}"));
                    assert_eq!(got.get(&f), Some(&b("v")), "node {node}: {f:?}");
                }
            }
        }
        assert_eq!(got.get(&b("n")), Some(&b(&want.to_string())), "node {node}");
        // A full read shows the one merged hash.
        match d.read(key, ReadOpts::Default).await.unwrap() {
            Read::Eventual(GetResult::Found { values, latest, .. }) => {
                assert_eq!(values.len(), 1, "node {node}");
                assert_eq!(latest, 0);
                assert_eq!(meridian_core::hash::decode(&values[0]).unwrap(), got);
            }
            other => panic!("node {node}: {other:?}"),
        }
    }
    // HDEL answers what it removed; a hash with no field left does not exist.
    let d = Dispatch::new(c.node(NodeId(4)).clone());
    let mut all: Vec<Bytes> = fields(&d, key).await.unwrap().into_keys().collect();
    all.push(b("never"));
    assert_eq!(
        d.hash_update(key, HashOps::Del(all)).await.unwrap(),
        HashReply::Removed(4 * 3 * 4 + 1)
    );
    sleep(Duration::from_secs(1)).await;
    for node in 1..=6 {
        let d = Dispatch::new(c.node(NodeId(node)).clone());
        assert_eq!(d.get_entry(key).await.unwrap(), None, "node {node}");
        assert!(!d.exists(key).await.unwrap());
    }
    // HSETNX sets an absent field only.
    let nx = |v: &str| HashOps::SetNx {
        field: b("x"),
        value: b(v),
    };
    assert_eq!(
        d.hash_update(key, nx("1")).await.unwrap(),
        HashReply::Set(true)
    );
    assert_eq!(
        d.hash_update(key, nx("2")).await.unwrap(),
        HashReply::Set(false)
    );
    assert_eq!(fields(&d, key).await.unwrap().get(&b("x")), Some(&b("1")));
}

/// A hash command on a string (plain or counter) and an increment of a hash are WRONGTYPE;
/// a SET replaces a hash, as on Redis.
#[tokio::test(start_paused = true)]
async fn hashes_and_strings_refuse_each_others_commands() {
    let c = Cluster::start_with(48, |_| {}).await;
    let d = Dispatch::new(c.node(NodeId(1)).clone());
    let other = Dispatch::new(c.node(NodeId(5)).clone());
    d.set(b"plain:s", b("text")).await.unwrap();
    d.incr_by(b"plain:n", 1).await.unwrap();
    // Replicated to the other DC's coordinator (an update it has not seen yet would be a
    // concurrent sibling, resolved by last-writer-wins on read).
    sleep(Duration::from_secs(1)).await;
    for key in [&b"plain:s"[..], b"plain:n"] {
        let e = other
            .hash_update(key, hset(&[("f", "v")]))
            .await
            .unwrap_err();
        assert_eq!(e, ReplicationError::WrongType, "{key:?}");
        assert_eq!(e.code(), "wrong_type");
        assert_eq!(
            e.to_string(),
            "Operation against a key holding the wrong kind of value"
        );
    }
    d.hash_update(b"plain:h", hset(&[("f", "1")]))
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(
        other.incr_by(b"plain:h", 1).await.unwrap_err(),
        ReplicationError::WrongType
    );
    // HINCRBY of a field that is no integer: Redis's error.
    other
        .hash_update(b"plain:h", hset(&[("t", "text")]))
        .await
        .unwrap();
    let incr = HashOps::IncrBy {
        field: b("t"),
        delta: 1,
    };
    let e = other.hash_update(b"plain:h", incr).await.unwrap_err();
    assert_eq!(e.to_string(), "hash value is not an integer");
    // A SET over the hash replaces it with a string.
    d.set(b"plain:h", b("now a string")).await.unwrap();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(d.get(b"plain:h").await.unwrap(), Some(b("now a string")));
    assert_eq!(
        d.hash_update(b"plain:h", hset(&[("f", "v")]))
            .await
            .unwrap_err(),
        ReplicationError::WrongType
    );
    // Hash commands need siblings, as counters do.
    c.set_bucket(
        "lww",
        BucketProps {
            props: Props {
                allow_mult: Some(false),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await;
    let e = d
        .hash_update(b"lww:h", hset(&[("f", "v")]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unsupported", "{e}");
}

/// A TTL set on a hash (EXPIRE through `Dispatch::update`) is kept by later field writes,
/// expires the whole hash at once, and the expiry sweep deletes it for good.
#[tokio::test(start_paused = true)]
async fn a_hash_expires_whole_and_the_sweep_reaps_it() {
    let c = Cluster::start_with(49, |_| {}).await;
    let d = Dispatch::new(c.node(NodeId(2)).clone());
    let key = &b"plain:ttl"[..];
    d.hash_update(key, hset(&[("a", "1")])).await.unwrap();
    let at = c.node(NodeId(2)).clock_now().0 + 2_000_000;
    let kept = d
        .update(key, |e, _| match e {
            Some(e) => (
                Some(Some(Entry {
                    expiry: Some(at),
                    ..e
                })),
                true,
            ),
            None => (None, false),
        })
        .await
        .unwrap();
    assert!(kept);
    // A field written after the EXPIRE keeps the TTL; the hash stays a map (fields merge).
    let other = Dispatch::new(c.node(NodeId(4)).clone());
    sleep(Duration::from_millis(500)).await;
    other.hash_update(key, hset(&[("b", "2")])).await.unwrap();
    let e = other.get_entry(key).await.unwrap().unwrap();
    assert_eq!(e.expiry, Some(at));
    assert_eq!(meridian_core::hash::decode(&e.data).unwrap().len(), 2);
    sleep(Duration::from_secs(2)).await;
    for n in 1..=6 {
        let d = Dispatch::new(c.node(NodeId(n)).clone());
        assert_eq!(d.get_entry(key).await.unwrap(), None, "node {n}");
    }
    sleep(Duration::from_secs(3)).await;
    for n in [1, 4] {
        let got = c
            .node(NodeId(n))
            .get(
                key,
                GetOptions {
                    deleted_context: true,
                    ..GetOptions::default()
                },
            )
            .await
            .unwrap();
        // Tombstoned, or already reaped.
        assert!(
            matches!(got, GetResult::NotFound { .. }),
            "node {n}: {got:?}"
        );
    }
    // A new hash on the key starts afresh, with no TTL and none of the old fields.
    d.hash_update(key, hset(&[("c", "3")])).await.unwrap();
    let e = d.get_entry(key).await.unwrap().unwrap();
    assert_eq!(e.expiry, None);
    assert_eq!(
        meridian_core::hash::decode(&e.data)
            .unwrap()
            .into_keys()
            .collect::<Vec<_>>(),
        vec![b("c")]
    );
}

/// A hash grows one bounded request at a time: its coordinator refuses the update that would
/// take it past `object_max`, as a plain PUT of that size is refused, and keeps what it had.
#[tokio::test(start_paused = true)]
async fn a_hash_cannot_grow_past_the_largest_object() {
    let c = Cluster::start_with(49, |cfg| cfg.object_max = 4096).await;
    let d = Dispatch::new(c.node(NodeId(1)).clone());
    let field = "v".repeat(1000);
    for i in 0..3 {
        let f = format!("f{i}");
        d.hash_update(b"plain:big", hset(&[(&f, &field)]))
            .await
            .unwrap();
    }
    let e = d
        .hash_update(b"plain:big", hset(&[("f9", &field), ("f8", &field)]))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ReplicationError::ObjectTooLarge { max: 4096, .. }),
        "{e:?}"
    );
    assert_eq!(fields(&d, b"plain:big").await.unwrap().len(), 3);
}
