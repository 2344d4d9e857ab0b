//! The standalone keyspace's own tests: strings, expiry, SCAN, WATCH, maxmemory and
//! eviction, concurrency.

use super::*;
use meridian_core::ManualClock;
use meridian_redis::options::SetCondition;
use meridian_storage::MemEngine;

const START: Timestamp = Timestamp(1_700_000_000_000_000);

fn setup() -> (Keyspace, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(START));
    let ks = Keyspace::new(Arc::new(MemEngine::new()), clock.clone());
    (ks, clock)
}

fn opts(args: &[&str], ks: &Keyspace) -> Result<SetOptions> {
    SetOptions::parse(args.iter().map(|a| a.as_bytes()), "set", ks.now())
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn values_are_enveloped_and_read_zero_copy() {
    let (ks, _) = setup();
    ks.set(b"k", b"hello", SetOptions::default()).unwrap();
    let raw = ks
        .engine()
        .get_value(b"k", Timestamp::MAX)
        .unwrap()
        .unwrap();
    assert_eq!(&raw[..], b"\0hello");
    let v = ks.get(b"k").unwrap().unwrap();
    assert_eq!(v, b("hello"));
    ks.set(b"t", b"x", SetOptions::with_ttl(Duration::from_secs(1)))
        .unwrap();
    let raw = ks
        .engine()
        .get_value(b"t", Timestamp::MAX)
        .unwrap()
        .unwrap();
    assert_eq!(raw.len(), 10);
    assert_eq!(raw[0], 0x01, "the expiry flag");
}

/// Whether a transaction with `watches` would run now (nothing queued).
fn exec_runs(ks: &Keyspace, ws: &WatchSet) -> bool {
    ks.transaction(std::iter::empty(), false, ws.watches(), |_| ())
        .unwrap()
        .is_some()
}

fn watching(ks: &Arc<Keyspace>, key: &[u8]) -> WatchSet {
    let mut ws = WatchSet::new(ks.clone());
    ws.watch(key);
    ws
}

#[test]
fn watch_detects_every_modification_and_nothing_else() {
    let clock = Arc::new(ManualClock::new(START));
    let ks = Arc::new(Keyspace::new(Arc::new(MemEngine::new()), clock.clone()));
    let o = SetOptions::default();
    // Shadowed sets stay alive to the end of the block, then unregister.
    {
        // Untouched: runs.
        let ws = watching(&ks, b"w");
        assert!(exec_runs(&ks, &ws));
        // Written by anyone.
        let ws = watching(&ks, b"w");
        ks.set(b"w", b"1", o).unwrap();
        assert!(!exec_runs(&ks, &ws));
        // Deleted, then absent again with no tombstone left (retention zero): still a change.
        ks.del(&[b"w"]).unwrap();
        let ws = watching(&ks, b"w");
        ks.set(b"w", b"1", o).unwrap();
        ks.del(&[b"w"]).unwrap();
        assert!(
            ks.engine().get_latest(b"w").unwrap().is_none(),
            "no tombstone left"
        );
        assert!(!exec_runs(&ks, &ws));
        // A write that changes nothing is no modification (SET NX over a live key).
        ks.set(b"w", b"1", o).unwrap();
        let ws = watching(&ks, b"w");
        let nx = SetOptions {
            condition: SetCondition::IfAbsent,
            ..o
        };
        assert!(!ks.set(b"w", b"2", nx).unwrap().written);
        assert!(exec_runs(&ks, &ws));
        // Another key of the same stripe is not this key.
        let twin = (0..100_000)
            .map(|i| format!("t{i}"))
            .find(|k| stripe_of(k.as_bytes()) == stripe_of(b"w"))
            .unwrap();
        ks.set(twin.as_bytes(), b"x", o).unwrap();
        assert!(exec_runs(&ks, &ws));
        // Expiring between WATCH and EXEC is a change, deleted or not yet.
        ks.set(b"e", b"1", SetOptions::with_ttl(Duration::from_millis(5)))
            .unwrap();
        let ws = watching(&ks, b"e");
        clock.advance(Duration::from_millis(10));
        assert!(!exec_runs(&ks, &ws));
        // Already expired at WATCH: its deletion by the active expirer is not a change.
        ks.set(b"x", b"1", SetOptions::with_ttl(Duration::from_millis(5)))
            .unwrap();
        clock.advance(Duration::from_millis(10));
        let ws = watching(&ks, b"x");
        while ks.expire_cycle(usize::MAX).expired > 0 {}
        assert!(exec_runs(&ks, &ws));
        // FLUSHALL changes the watched keys that existed, not the absent ones.
        ks.set(b"w", b"1", o).unwrap();
        let (live, absent) = (watching(&ks, b"w"), watching(&ks, b"nope"));
        ks.flush().unwrap();
        assert!(!exec_runs(&ks, &live));
        assert!(exec_runs(&ks, &absent));
    }
    // Dropped watch sets leave no registration behind.
    assert!(ks.stripes.iter().all(|s| s.lock().watched.is_empty()));
}

#[test]
fn transaction_overlay_reads_its_writes_and_commits_one_batch() {
    let (ks, _) = setup();
    ks.set(b"a", b"old", SetOptions::default()).unwrap();
    let keys: [&[u8]; 3] = [b"a", b"b", b"n"];
    let out = ks
        .transaction(keys.into_iter(), false, &[], |ov| {
            strings::set(ov, b"a", b"new", SetOptions::default()).unwrap();
            strings::set(ov, b"b", b"x", SetOptions::default()).unwrap();
            assert_eq!(strings::get(ov, b"a").unwrap(), Some(b("new")));
            assert_eq!(strings::incr_by(ov, b"n", 5).unwrap(), 5);
            assert_eq!(strings::incr_by(ov, b"n", 1).unwrap(), 6);
            assert_eq!(strings::del(ov, [&b"b"[..], b"b"]).unwrap(), 1);
            // Nothing reached the engine yet.
            assert_eq!(
                ks.engine()
                    .get_value(b"a", Timestamp::MAX)
                    .unwrap()
                    .unwrap()[1..],
                b"old"[..]
            );
            assert!(ks.engine().get_latest(b"n").unwrap().is_none());
            // A key outside the locked stripes is refused, not written unserialized.
            let outside = (0..100_000)
                .map(|i| format!("o{i}"))
                .find(|k| !keys.iter().any(|l| stripe_of(l) == stripe_of(k.as_bytes())))
                .unwrap();
            assert!(strings::get(ov, outside.as_bytes()).is_err());
            ov.dbsize().unwrap()
        })
        .unwrap();
    assert_eq!(out, Some(2), "a and n");
    assert_eq!(ks.get(b"a").unwrap(), Some(b("new")));
    assert_eq!(ks.get(b"n").unwrap(), Some(b("6")));
    assert_eq!(ks.get(b"b").unwrap(), None);
    let ts = |k: &[u8]| ks.engine().get_latest(k).unwrap().unwrap().ts;
    assert_eq!(ts(b"a"), ts(b"n"), "one batch at one time");
}

/// What the used-memory estimate should be: every live key's length, its stored value's
/// length and the overhead, by a full scan of the engine (what the keyspace must not do).
fn scanned_memory(ks: &Keyspace) -> u64 {
    ks.engine()
        .scan(
            Bound::Unbounded,
            Bound::Unbounded,
            Timestamp::MAX,
            1 << 20,
            false,
        )
        .unwrap()
        .iter()
        .map(|(k, v)| entry_bytes(k.len(), v.value.as_ref().unwrap().len()))
        .sum()
}

#[test]
fn used_memory_is_kept_incrementally_and_matches_a_scan() {
    let (ks, clock) = setup();
    // Exact accounting runs while a limit is set.
    ks.set_maxmemory(u64::MAX).unwrap();
    assert_eq!(ks.used_memory(), 0);
    // Grows with value sizes.
    ks.set(b"k", vec![b'x'; 10], SetOptions::default()).unwrap();
    let small = ks.used_memory();
    assert_eq!(small, entry_bytes(1, 11));
    ks.set(b"k", vec![b'x'; 1010], SetOptions::default())
        .unwrap();
    assert_eq!(ks.used_memory(), small + 1000);
    ks.set(b"k", b"", SetOptions::default()).unwrap();
    assert_eq!(ks.used_memory(), small - 10);
    // A model run over every write path: single-key writes, overlays (MSET, DEL,
    // transactions), TTLs, lazy and active expiry.
    let mut x: u64 = 7;
    let mut rand = |n: u64| {
        x = splitmix(x);
        x % n
    };
    for step in 0..3_000 {
        let key = format!("key{}", rand(40));
        let k = key.as_bytes();
        let len = rand(300) as usize;
        match rand(12) {
            0..=2 => {
                ks.set(k, vec![b'v'; len], SetOptions::default()).unwrap();
            }
            3 => {
                let ttl = Duration::from_millis(1 + rand(50));
                ks.set(k, vec![b't'; len], SetOptions::with_ttl(ttl))
                    .unwrap();
            }
            4 => {
                ks.append(k, &vec![b'a'; len]).unwrap();
            }
            5 => {
                let _ = ks.incr_by(k, 1);
            }
            6 => {
                ks.del(&[k, &b"key1"[..]]).unwrap();
            }
            7 => {
                let other = format!("key{}", rand(40));
                ks.mset(&[(k, &b"m"[..]), (other.as_bytes(), &vec![b'n'; len][..])])
                    .unwrap();
            }
            8 => {
                ks.getdel(k).unwrap();
            }
            9 => {
                let _ = ks.expire(
                    k,
                    Deadline::After(Duration::from_millis(rand(20))),
                    ExpireCondition::default(),
                );
            }
            10 => {
                clock.advance(Duration::from_millis(rand(30)));
                ks.get(k).unwrap();
                ks.expire_cycle(usize::MAX);
            }
            _ => {
                let keys: [&[u8]; 2] = [k, b"key2"];
                ks.transaction(keys.into_iter(), false, &[], |ov| {
                    strings::set(ov, k, &vec![b'e'; len], SetOptions::default()).unwrap();
                    strings::del(ov, [&b"key2"[..]]).unwrap();
                })
                .unwrap();
            }
        }
        assert_eq!(ks.used_memory(), scanned_memory(&ks), "after step {step}");
    }
    // Deleting everything returns to the baseline, key by key or all at once.
    let keys = ks.keys(b"*").unwrap();
    ks.set(b"one-more", b"x", SetOptions::default()).unwrap();
    ks.del(&keys).unwrap();
    assert_eq!(ks.used_memory(), entry_bytes(8, 2));
    ks.flush().unwrap();
    assert_eq!(ks.used_memory(), 0);
    ks.set(b"t", b"x", SetOptions::with_ttl(Duration::from_millis(5)))
        .unwrap();
    clock.advance(Duration::from_millis(10));
    ks.expire_cycle(usize::MAX);
    assert_eq!(ks.used_memory(), 0, "active expiry releases it");
}

#[test]
fn used_memory_is_rebuilt_when_a_keyspace_opens_over_data() {
    let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
    let clock = Arc::new(ManualClock::new(START));
    let limited = || KeyspaceConfig {
        maxmemory: u64::MAX,
        ..KeyspaceConfig::default()
    };
    let ks = Keyspace::with_config(engine.clone(), clock.clone(), limited());
    ks.set(b"a", b"12345", SetOptions::default()).unwrap();
    ks.set(b"b", b"x", SetOptions::with_ttl(Duration::from_secs(9)))
        .unwrap();
    let used = ks.used_memory();
    drop(ks);
    let again = Keyspace::with_config(engine.clone(), clock.clone(), limited());
    assert_eq!(again.used_memory(), used);
    drop(again);
    // Without a limit nothing is recorded per key: the figure is the engine's; setting a
    // limit builds the records from the engine, removing it drops them.
    let open = Keyspace::new(engine, clock);
    assert!(
        open.used_memory() >= used,
        "the engine's count has the same parts"
    );
    open.set_maxmemory(u64::MAX).unwrap();
    assert_eq!(open.used_memory(), used);
    open.set_maxmemory(0).unwrap();
    open.set(b"c", b"v", SetOptions::default()).unwrap();
    open.set_maxmemory(u64::MAX).unwrap();
    assert_eq!(open.used_memory(), used + entry_bytes(1, 2));
    open.del(&[b"a", b"b", b"c"]).unwrap();
    assert_eq!(open.used_memory(), 0);
}

/// A keyspace under `policy` with a limit too high to matter yet (records are kept).
fn limited(policy: MaxmemoryPolicy) -> (Keyspace, Arc<ManualClock>) {
    let (ks, clock) = setup();
    ks.set_maxmemory_policy(policy);
    ks.set_maxmemory(u64::MAX).unwrap();
    (ks, clock)
}

#[test]
fn noeviction_refuses_over_the_limit_until_keys_are_deleted() {
    let (ks, _) = limited(MaxmemoryPolicy::NoEviction);
    assert!(ks.make_room(), "no limit");
    for i in 0..10 {
        ks.set(format!("k{i}"), vec![b'v'; 100], SetOptions::default())
            .unwrap();
    }
    ks.set_maxmemory(ks.used_memory()).unwrap();
    assert!(
        !ks.over_maxmemory() && ks.make_room(),
        "at the limit is not over it"
    );
    ks.set(b"k10", b"v", SetOptions::default()).unwrap();
    assert!(ks.over_maxmemory());
    assert!(!ks.make_room(), "noeviction evicts nothing");
    assert_eq!(ks.dbsize(), 11);
    assert_eq!(ks.stats().evicted_keys, 0);
    ks.del(&[b"k0"]).unwrap();
    assert!(ks.make_room());
    ks.set_maxmemory(0).unwrap();
    assert!(!ks.over_maxmemory());
}

#[test]
fn allkeys_lru_evicts_the_least_recently_used_and_keeps_under_the_limit() {
    let (ks, clock) = limited(MaxmemoryPolicy::AllkeysLru);
    for k in ["a", "b", "c", "d", "e"] {
        ks.set(k, vec![b'v'; 50], SetOptions::default()).unwrap();
        clock.advance(Duration::from_secs(1));
    }
    // Reads count as uses: a and b are now the most recent; c the least.
    ks.get(b"a").unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(ks.mget(&[b"b", b"d"]).unwrap().len(), 2);
    ks.set_maxmemory(ks.used_memory() - 1).unwrap();
    assert!(ks.make_room());
    // Five keys, five samples: every key is compared, so the choice is exact.
    assert_eq!(ks.get(b"c").unwrap(), None, "the least recently used");
    assert_eq!(ks.dbsize(), 4);
    assert_eq!(ks.stats().evicted_keys, 1);
    assert!(ks.used_memory() <= ks.maxmemory());
    // Under a steady stream of writes, every command starts within the limit.
    let max = 20_000;
    ks.set_maxmemory(max).unwrap();
    for i in 0..2_000 {
        assert!(ks.make_room());
        assert!(ks.used_memory() <= max);
        ks.set(format!("w{i}"), vec![b'w'; 100], SetOptions::default())
            .unwrap();
        assert_eq!(ks.used_memory(), scanned_memory(&ks));
    }
    assert!(ks.stats().evicted_keys > 1_500);
    assert!(ks.get(b"w1999").unwrap().is_some(), "the newest survives");
}

#[test]
fn allkeys_lfu_keeps_the_frequently_read_key() {
    let (ks, clock) = limited(MaxmemoryPolicy::AllkeysLfu);
    for k in ["hot", "c1", "c2", "c3"] {
        ks.set(k, b"v", SetOptions::default()).unwrap();
    }
    for _ in 0..50 {
        ks.get(b"hot").unwrap();
        clock.advance(Duration::from_millis(1));
    }
    for _ in 0..3 {
        ks.set_maxmemory(ks.used_memory() - 1).unwrap();
        assert!(ks.make_room());
    }
    assert_eq!(ks.dbsize(), 1);
    assert!(ks.get(b"hot").unwrap().is_some());
}

#[test]
fn volatile_policies_evict_only_keys_with_a_ttl() {
    for policy in [
        MaxmemoryPolicy::VolatileTtl,
        MaxmemoryPolicy::VolatileLru,
        MaxmemoryPolicy::VolatileLfu,
        MaxmemoryPolicy::VolatileRandom,
    ] {
        let (ks, _) = limited(policy);
        for i in 0..5 {
            ks.set(format!("p{i}"), b"persistent", SetOptions::default())
                .unwrap();
        }
        for (k, secs) in [("v100", 100), ("v10", 10), ("v50", 50)] {
            ks.set(
                k,
                b"volatile",
                SetOptions::with_ttl(Duration::from_secs(secs)),
            )
            .unwrap();
        }
        ks.set_maxmemory(ks.used_memory() - 1).unwrap();
        assert!(ks.make_room(), "{policy}");
        assert_eq!(ks.dbsize(), 7, "{policy}");
        if policy == MaxmemoryPolicy::VolatileTtl {
            assert_eq!(ks.get(b"v10").unwrap(), None, "the soonest to expire");
        }
        // A limit only the persistent keys exceed: every volatile key goes, then OOM.
        ks.set_maxmemory(1).unwrap();
        assert!(!ks.make_room(), "{policy}");
        assert_eq!(ks.stats().expires, 0, "{policy}");
        assert_eq!(
            ks.dbsize(),
            5,
            "{policy}: persistent keys are never evicted"
        );
        assert_eq!(ks.stats().evicted_keys, 3, "{policy}");
    }
}

#[test]
fn allkeys_random_evicts_until_it_fits() {
    let (ks, _) = limited(MaxmemoryPolicy::AllkeysRandom);
    for i in 0..100 {
        ks.set(format!("k{i}"), vec![b'v'; 100], SetOptions::default())
            .unwrap();
    }
    let half = ks.used_memory() / 2;
    ks.set_maxmemory(half).unwrap();
    assert!(ks.make_room());
    assert!(ks.used_memory() <= half);
    assert!((49..=51).contains(&ks.dbsize()), "{}", ks.dbsize());
    ks.set_maxmemory(1).unwrap();
    assert!(ks.make_room(), "fits once everything is evicted");
    assert_eq!(ks.dbsize(), 0);
    assert_eq!(ks.used_memory(), 0);
}

#[test]
fn only_the_latest_version_is_kept_by_default() {
    let (ks, _) = setup();
    for i in 0..10 {
        ks.set(b"k", i.to_string(), SetOptions::default()).unwrap();
    }
    assert_eq!(ks.engine().versions(b"k").unwrap().len(), 1);
    assert_eq!(ks.del(&[b"k"]).unwrap(), 1);
    assert!(
        ks.engine().versions(b"k").unwrap().is_empty(),
        "tombstone pruned too"
    );
}

#[test]
fn retention_keeps_recent_versions_for_snapshots() {
    let clock = Arc::new(ManualClock::new(START));
    let ks = Keyspace::new(Arc::new(MemEngine::new()), clock.clone())
        .with_retention(Duration::from_secs(10));
    ks.set(b"k", b"a", SetOptions::default()).unwrap();
    clock.advance(Duration::from_secs(1));
    ks.set(b"k", b"b", SetOptions::default()).unwrap();
    assert_eq!(ks.engine().versions(b"k").unwrap().len(), 2);
    clock.advance(Duration::from_secs(20));
    ks.set(b"k", b"c", SetOptions::default()).unwrap();
    // The version visible at the horizon (b) stays; older ones go.
    let v = ks.engine().versions(b"k").unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].value.as_deref(), Some(&b"\0b"[..]));
}

#[test]
fn expiry_at_exact_times() {
    let (ks, clock) = setup();
    ks.set(b"k", b"v", opts(&["EX", "10"], &ks).unwrap())
        .unwrap();
    match ks.ttl(b"k").unwrap() {
        KeyTtl::Expires { remaining, .. } => {
            assert!(remaining <= Duration::from_secs(10));
            assert!(remaining > Duration::from_millis(9_999));
        }
        other => panic!("{other:?}"),
    }
    clock.advance(Duration::from_millis(9_999));
    assert_eq!(ks.get(b"k").unwrap(), Some(b("v")));
    assert_eq!(ks.stats().expires, 1);
    clock.advance(Duration::from_millis(2));
    assert_eq!(ks.get(b"k").unwrap(), None, "expired after 10 s");
    let st = ks.stats();
    assert_eq!(
        (st.expired_keys, st.expires, st.keys),
        (1, 0, 0),
        "deleted lazily"
    );
    assert_eq!(
        (st.hits, st.misses),
        (2, 1),
        "TTL counts as a read, as in Redis"
    );
    assert_eq!(ks.ttl(b"k").unwrap(), KeyTtl::Missing);
}

#[test]
fn absolute_expiry_in_the_past_deletes() {
    let (ks, _) = setup();
    ks.set(b"k", b"v", SetOptions::default()).unwrap();
    let past = (START.0 / 1000 - 1).to_string();
    ks.set(b"k", b"w", opts(&["PXAT", &past], &ks).unwrap())
        .unwrap();
    assert_eq!(ks.get(b"k").unwrap(), None);
    assert_eq!(ks.dbsize(), 0);
    ks.set(b"k", b"v", SetOptions::default()).unwrap();
    assert!(
        ks.expire(
            b"k",
            Deadline::At(Timestamp::MIN),
            ExpireCondition::default()
        )
        .unwrap()
    );
    assert_eq!(ks.dbsize(), 0);
    assert!(
        !ks.expire(
            b"k",
            Deadline::After(Duration::from_secs(1)),
            ExpireCondition::default()
        )
        .unwrap()
    );
}

#[test]
fn active_expiry_deletes_unread_keys_with_bounded_work() {
    let (ks, clock) = setup();
    for i in 0..100 {
        let ttl = if i % 2 == 0 { 1 } else { 100 };
        ks.set(
            format!("k{i}"),
            b"v",
            SetOptions::with_ttl(Duration::from_secs(ttl)),
        )
        .unwrap();
    }
    for i in 0..50 {
        ks.set(format!("p{i}"), b"v", SetOptions::default())
            .unwrap();
    }
    assert_eq!(ks.stats().expires, 100);
    assert_eq!(
        ks.expire_cycle(1000),
        ExpireCycle {
            examined: 100,
            expired: 0
        }
    );
    clock.advance(Duration::from_secs(2));
    let small = ks.expire_cycle(10);
    assert!(
        small.examined >= 10 && small.examined < 100,
        "bounded: {small:?}"
    );
    let mut expired = small.expired;
    while expired < 50 {
        expired += ks.expire_cycle(10).expired;
    }
    assert_eq!(expired, 50);
    let st = ks.stats();
    assert_eq!((st.keys, st.expires, st.expired_keys), (100, 50, 50));
}

#[tokio::test(start_paused = true)]
async fn active_expirer_task_runs_until_shutdown() {
    let (ks, clock) = setup();
    let ks = Arc::new(ks);
    ks.set(b"k", b"v", SetOptions::with_ttl(Duration::from_millis(500)))
        .unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(ks.clone().run_active_expiry(stop.clone()));
    clock.advance(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(ks.dbsize(), 0);
    assert_eq!(ks.stats().expired_keys, 1);
    stop.cancel();
    task.await.unwrap();
}

#[test]
fn ttl_index_is_rebuilt_on_open() {
    let clock = Arc::new(ManualClock::new(START));
    let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
    let ks = Keyspace::new(engine.clone(), clock.clone());
    for i in 0..3000 {
        let o = if i % 3 == 0 {
            SetOptions::with_ttl(Duration::from_secs(5))
        } else {
            SetOptions::default()
        };
        ks.set(format!("k{i:05}"), b"v", o).unwrap();
    }
    drop(ks);
    let ks = Keyspace::new(engine, clock.clone());
    assert_eq!(ks.stats().expires, 1000);
    clock.advance(Duration::from_secs(6));
    let mut n = 0;
    for _ in 0..10 {
        n += ks.expire_cycle(usize::MAX).expired;
    }
    assert_eq!(n, 1000);
}

#[test]
fn incr_like_redis() {
    let (ks, _) = setup();
    assert_eq!(ks.incr_by(b"n", 1).unwrap(), 1);
    assert_eq!(ks.incr_by(b"n", -11).unwrap(), -10);
    assert_eq!(ks.get(b"n").unwrap(), Some(b("-10")));
    ks.set(b"n", i64::MAX.to_string(), SetOptions::default())
        .unwrap();
    assert!(matches!(ks.incr_by(b"n", 1), Err(RedisError::Overflow)));
    assert_eq!(
        ks.incr_by(b"n", 1).unwrap_err().to_string(),
        "increment or decrement would overflow"
    );
    assert!(matches!(
        ks.decr_by(b"n", i64::MIN),
        Err(RedisError::DecrementOverflow)
    ));
    for bad in [
        "",
        " 1",
        "1 ",
        "+1",
        "01",
        "-0",
        "1.0",
        "abc",
        "99999999999999999999",
    ] {
        ks.set(b"s", bad, SetOptions::default()).unwrap();
        let e = ks.incr_by(b"s", 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "value is not an integer or out of range",
            "{bad:?}"
        );
    }
    ks.set(b"m", i64::MIN.to_string(), SetOptions::default())
        .unwrap();
    assert!(matches!(ks.incr_by(b"m", -1), Err(RedisError::Overflow)));
    assert_eq!(ks.incr_by(b"m", 1).unwrap(), i64::MIN + 1);
}

#[test]
fn incr_and_append_keep_the_ttl_set_clears_it() {
    let (ks, _) = setup();
    ks.set(b"n", b"1", SetOptions::with_ttl(Duration::from_secs(50)))
        .unwrap();
    ks.incr_by(b"n", 1).unwrap();
    ks.append(b"n", b"0").unwrap();
    assert_eq!(ks.get(b"n").unwrap(), Some(b("20")));
    assert!(matches!(ks.ttl(b"n").unwrap(), KeyTtl::Expires { .. }));
    ks.set(b"n", b"x", opts(&["KEEPTTL"], &ks).unwrap())
        .unwrap();
    assert!(matches!(ks.ttl(b"n").unwrap(), KeyTtl::Expires { .. }));
    ks.set(b"n", b"x", SetOptions::default()).unwrap();
    assert_eq!(ks.ttl(b"n").unwrap(), KeyTtl::Persistent);
    assert_eq!(ks.stats().expires, 0);
}

#[test]
fn incr_by_float() {
    let (ks, _) = setup();
    assert_eq!(ks.incr_by_float(b"f", 10.5).unwrap(), b("10.5"));
    assert_eq!(ks.incr_by_float(b"f", 0.1).unwrap(), b("10.6"));
    assert_eq!(ks.incr_by_float(b"f", -10.6).unwrap(), b("0"));
    assert_eq!(ks.incr_by_float(b"f", 5e3).unwrap(), b("5000"));
    assert!(matches!(
        ks.incr_by_float(b"f", f64::INFINITY),
        Err(RedisError::NanOrInfinity)
    ));
    ks.set(b"s", b"abc", SetOptions::default()).unwrap();
    assert!(matches!(
        ks.incr_by_float(b"s", 1.0),
        Err(RedisError::NotAFloat)
    ));
}

#[test]
fn set_option_combinations() {
    let (ks, _) = setup();
    let err = |args: &[&str]| opts(args, &ks).unwrap_err().to_string();
    assert_eq!(err(&["NX", "XX"]), "syntax error");
    assert_eq!(err(&["EX", "1", "PX", "1"]), "syntax error");
    assert_eq!(err(&["EX", "1", "KEEPTTL"]), "syntax error");
    assert_eq!(err(&["KEEPTTL", "EXAT", "1"]), "syntax error");
    assert_eq!(err(&["EX"]), "syntax error");
    assert_eq!(err(&["FOO"]), "syntax error");
    assert_eq!(err(&["EX", "0"]), "invalid expire time in 'set' command");
    assert_eq!(err(&["PX", "-5"]), "invalid expire time in 'set' command");
    assert_eq!(
        err(&["EX", "9223372036854776"]),
        "invalid expire time in 'set' command"
    );
    assert_eq!(
        err(&["PX", "9223372036854775807"]),
        "invalid expire time in 'set' command"
    );
    assert_eq!(
        err(&["EX", "ten"]),
        "value is not an integer or out of range"
    );
    assert!(
        opts(&["nx", "get", "ex", "5", "EX", "6"], &ks).is_ok(),
        "same option twice"
    );

    // NX / XX / GET.
    let nx = opts(&["NX"], &ks).unwrap();
    assert!(ks.set(b"k", b"1", nx).unwrap().written);
    assert!(!ks.set(b"k", b"2", nx).unwrap().written);
    let xx_get = opts(&["XX", "GET"], &ks).unwrap();
    let out = ks.set(b"k", b"3", xx_get).unwrap();
    assert_eq!(
        out,
        SetOutcome {
            written: true,
            previous: Some(b("1"))
        }
    );
    let out = ks.set(b"missing", b"3", xx_get).unwrap();
    assert_eq!(
        out,
        SetOutcome {
            written: false,
            previous: None
        }
    );
    assert_eq!(ks.get(b"missing").unwrap(), None);
    let nx_get = opts(&["NX", "GET"], &ks).unwrap();
    let out = ks.set(b"k", b"4", nx_get).unwrap();
    assert_eq!(
        out,
        SetOutcome {
            written: false,
            previous: Some(b("3"))
        }
    );
    // PX then KEEPTTL on an expired key: the key is new, without a TTL.
    let (ks, clock) = setup();
    ks.set(b"t", b"v", opts(&["PX", "100"], &ks).unwrap())
        .unwrap();
    clock.advance(Duration::from_millis(200));
    ks.set(b"t", b"w", opts(&["KEEPTTL"], &ks).unwrap())
        .unwrap();
    assert_eq!(ks.ttl(b"t").unwrap(), KeyTtl::Persistent);
    assert_eq!(ks.stats().expired_keys, 1);
}

#[test]
fn expire_conditions() {
    let (ks, _) = setup();
    let c = |args: &[&str]| ExpireCondition::parse(args.iter().map(|a| a.as_bytes()));
    assert_eq!(
        c(&["NX", "GT"]).unwrap_err().to_string(),
        "NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        c(&["GT", "lt"]).unwrap_err().to_string(),
        "GT and LT options at the same time are not compatible"
    );
    assert_eq!(c(&["XY"]).unwrap_err().to_string(), "Unsupported option XY");
    let after = |s| Deadline::After(Duration::from_secs(s));
    ks.set(b"k", b"v", SetOptions::default()).unwrap();
    assert!(!ks.expire(b"k", after(10), c(&["XX"]).unwrap()).unwrap());
    assert!(
        !ks.expire(b"k", after(10), c(&["GT"]).unwrap()).unwrap(),
        "none is infinite"
    );
    assert!(ks.expire(b"k", after(10), c(&["LT"]).unwrap()).unwrap());
    assert!(!ks.expire(b"k", after(20), c(&["NX"]).unwrap()).unwrap());
    assert!(!ks.expire(b"k", after(20), c(&["LT"]).unwrap()).unwrap());
    assert!(
        ks.expire(b"k", after(20), c(&["XX", "GT"]).unwrap())
            .unwrap()
    );
    assert!(ks.persist(b"k").unwrap());
    assert!(!ks.persist(b"k").unwrap());
    assert_eq!(ks.stats().expires, 0);
}

#[test]
fn multi_key_operations() {
    let (ks, _) = setup();
    ks.mset(&[("a", "1"), ("b", "2"), ("a", "3")]).unwrap();
    assert_eq!(
        ks.mget(&["a", "b", "c"]).unwrap(),
        vec![Some(b("3")), Some(b("2")), None]
    );
    assert!(!ks.msetnx(&[("c", "1"), ("a", "1")]).unwrap());
    assert_eq!(ks.get(b"c").unwrap(), None);
    assert!(ks.msetnx(&[("c", "1"), ("d", "1")]).unwrap());
    assert_eq!(ks.exists(&["a", "a", "x"]).unwrap(), 2);
    assert_eq!(ks.del(&["a", "a", "x", "b"]).unwrap(), 2);
    assert_eq!(ks.dbsize(), 2);
    assert_eq!(ks.getdel(b"c").unwrap(), Some(b("1")));
    assert_eq!(ks.getdel(b"c").unwrap(), None);
}

#[test]
fn ranges() {
    let (ks, _) = setup();
    ks.set(b"s", b"Hello World", SetOptions::default()).unwrap();
    let r = |s, e| ks.getrange(b"s", s, e).unwrap();
    assert_eq!(r(0, 4), b("Hello"));
    assert_eq!(r(-5, -1), b("World"));
    assert_eq!(r(5, 2), b(""));
    assert_eq!(r(-1, -5), b(""));
    assert_eq!(r(0, 100), b("Hello World"));
    assert_eq!(ks.getrange(b"none", 0, 1).unwrap(), b(""));
    assert_eq!(ks.setrange(b"s", 6, b"Redis").unwrap(), 11);
    assert_eq!(ks.get(b"s").unwrap(), Some(b("Hello Redis")));
    assert_eq!(ks.setrange(b"z", 3, b"x").unwrap(), 4);
    assert_eq!(ks.get(b"z").unwrap(), Some(b("\0\0\0x")));
    assert_eq!(ks.setrange(b"e", 3, b"").unwrap(), 0);
    assert_eq!(ks.get(b"e").unwrap(), None);
    assert!(matches!(
        ks.setrange(b"z", -1, b"x"),
        Err(RedisError::OffsetOutOfRange)
    ));
    let small = Keyspace::with_config(
        Arc::new(MemEngine::new()),
        Arc::new(ManualClock::new(START)),
        KeyspaceConfig {
            max_value_len: 8,
            ..KeyspaceConfig::default()
        },
    );
    small.append(b"a", b"12345678").unwrap();
    assert!(matches!(
        small.append(b"a", b"9"),
        Err(RedisError::ValueTooLarge)
    ));
    assert!(matches!(
        small.setrange(b"a", 8, b"9"),
        Err(RedisError::ValueTooLarge)
    ));
}

#[test]
fn getex_changes_ttl() {
    let (ks, clock) = setup();
    ks.set(b"k", b"v", SetOptions::default()).unwrap();
    let at = ks.now().saturating_add(Duration::from_secs(5));
    assert_eq!(
        ks.getex(b"k", GetExExpiry::At(Deadline::At(at))).unwrap(),
        Some(b("v"))
    );
    assert!(matches!(ks.ttl(b"k").unwrap(), KeyTtl::Expires { .. }));
    assert_eq!(ks.getex(b"k", GetExExpiry::Persist).unwrap(), Some(b("v")));
    assert_eq!(ks.ttl(b"k").unwrap(), KeyTtl::Persistent);
    assert_eq!(
        ks.getex(b"k", GetExExpiry::At(Deadline::At(Timestamp(1))))
            .unwrap(),
        Some(b("v"))
    );
    assert_eq!(ks.get(b"k").unwrap(), None);
    clock.advance(Duration::from_secs(1));
}

#[test]
fn storage_errors_come_through() {
    let (ks, _) = setup();
    let key = vec![b'k'; meridian_storage::MAX_KEY_LEN + 1];
    let e = ks.set(&key, b"v", SetOptions::default()).unwrap_err();
    assert!(e.is_client_error());
    assert!(e.to_string().contains("largest key accepted"), "{e}");
    ks.engine()
        .put(b("foreign"), ks.now(), b("\x07raw"))
        .unwrap();
    assert!(matches!(ks.get(b"foreign"), Err(RedisError::Corrupt(_))));
    assert_eq!(
        ks.del(&["foreign"]).unwrap(),
        1,
        "foreign values can still be deleted"
    );
}

#[test]
fn scan_returns_every_key_and_respects_match() {
    let (ks, _) = setup();
    let mut all = std::collections::BTreeSet::new();
    for i in 0..250 {
        let k = format!("{}:{i}", if i % 5 == 0 { "user" } else { "item" });
        ks.set(&k, b"v", SetOptions::default()).unwrap();
        all.insert(b(&k));
    }
    let collect = |pattern: Option<&[u8]>, count| {
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            let (next, keys) = ks.scan(cursor, pattern, count).unwrap();
            seen.extend(keys);
            calls += 1;
            if next == 0 {
                return (seen, calls);
            }
            cursor = next;
        }
    };
    let (seen, calls) = collect(None, 10);
    assert_eq!(seen, all);
    assert!(calls >= 25);
    let (users, calls) = collect(Some(b"user:*"), 10);
    assert_eq!(users.len(), 50);
    assert!(
        calls <= 6,
        "the literal prefix narrows the scan: {calls} calls"
    );
    let (twos, _) = collect(Some(b"*:2?"), 7);
    assert_eq!(twos.len(), 10, "{twos:?}");
    // An unknown cursor restarts from the beginning.
    let (_, first) = ks.scan(0, None, 5).unwrap();
    let (_, again) = ks.scan(123, None, 5).unwrap();
    assert_eq!(first, again);
    assert_eq!(ks.keys(b"user:1*").unwrap().len(), 22, "10, 15, 100..=195");
    assert_eq!(ks.keys(b"*").unwrap().len(), 250);
    ks.flush().unwrap();
    assert_eq!(ks.dbsize(), 0);
    assert!(ks.keys(b"*").unwrap().is_empty());
}

#[test]
fn scan_skips_and_deletes_expired_keys() {
    let (ks, clock) = setup();
    ks.set(b"a", b"v", SetOptions::with_ttl(Duration::from_secs(1)))
        .unwrap();
    ks.set(b"b", b"v", SetOptions::default()).unwrap();
    clock.advance(Duration::from_secs(2));
    assert_eq!(ks.scan(0, None, 10).unwrap(), (0, vec![b("b")]));
    assert_eq!(ks.stats().expired_keys, 1);
    assert_eq!(ks.dbsize(), 1);
}

#[test]
fn literal_prefixes() {
    assert_eq!(literal_prefix(b"user:*"), b"user:");
    assert_eq!(literal_prefix(b"u?"), b"u");
    assert_eq!(literal_prefix(b"plain"), b"plain");
    assert_eq!(prefix_end(b"a\xff"), Bound::Excluded(b("b")));
    assert_eq!(prefix_end(b"\xff"), Bound::Unbounded);
    assert_eq!(prefix_end(b""), Bound::Unbounded);
}

#[test]
fn concurrent_incr_loses_nothing() {
    let (ks, _) = setup();
    let ks = Arc::new(ks);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let ks = ks.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    ks.incr_by(b"n", 1).unwrap();
                    ks.append(b"s", b"x").unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(ks.get(b"n").unwrap(), Some(b("4000")));
    assert_eq!(ks.strlen(b"s").unwrap(), 4000);
}

mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Model time is in whole milliseconds; advances are even and TTLs odd, so the few
    /// microseconds a manual clock gains per read can never decide an expiry.
    #[derive(Clone, Debug)]
    enum Op {
        Set(u8, &'static str, Option<u64>),
        SetNx(u8, &'static str),
        SetKeepTtl(u8, &'static str),
        Get(u8),
        Del(u8),
        Incr(u8, i64),
        Append(u8, &'static str),
        Expire(u8, u64),
        Persist(u8),
        Ttl(u8),
        Advance(u64),
        ActiveExpire,
        Scan,
    }

    const VALUES: [&str; 7] = ["0", "1", "-7", "abc", "9223372036854775806", "", "07"];

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u8..4;
        let val = proptest::sample::select(&VALUES[..]);
        let ttl = (0u64..20).prop_map(|t| 2 * t + 1);
        prop_oneof![
            (key.clone(), val.clone(), proptest::option::of(ttl.clone()))
                .prop_map(|(k, v, t)| Op::Set(k, v, t)),
            (key.clone(), val.clone()).prop_map(|(k, v)| Op::SetNx(k, v)),
            (key.clone(), val.clone()).prop_map(|(k, v)| Op::SetKeepTtl(k, v)),
            key.clone().prop_map(Op::Get),
            key.clone().prop_map(Op::Del),
            (
                key.clone(),
                prop_oneof![Just(1i64), Just(-3), Just(i64::MAX)]
            )
                .prop_map(|(k, d)| Op::Incr(k, d)),
            (key.clone(), val).prop_map(|(k, v)| Op::Append(k, v)),
            (key.clone(), ttl).prop_map(|(k, t)| Op::Expire(k, t)),
            key.clone().prop_map(Op::Persist),
            key.prop_map(Op::Ttl),
            (1u64..15).prop_map(|t| Op::Advance(2 * t)),
            Just(Op::ActiveExpire),
            Just(Op::Scan),
        ]
    }

    /// Value and expiry (model ms) of each live key.
    #[derive(Default)]
    struct Model {
        now: u64,
        map: BTreeMap<u8, (Vec<u8>, Option<u64>)>,
    }

    impl Model {
        fn live(&mut self, k: u8) -> Option<&mut (Vec<u8>, Option<u64>)> {
            let now = self.now;
            if self
                .map
                .get(&k)
                .is_some_and(|(_, e)| e.is_some_and(|e| now > e))
            {
                self.map.remove(&k);
            }
            self.map.get_mut(&k)
        }

        fn purge(&mut self) {
            let now = self.now;
            self.map.retain(|_, (_, e)| !e.is_some_and(|e| now > e));
        }
    }

    fn key(k: u8) -> Vec<u8> {
        vec![b'k', b'0' + k]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn keyspace_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..120)) {
            run_model(ops)?;
        }
    }

    fn run_model(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
        let clock = Arc::new(ManualClock::new(START));
        let ks = Keyspace::new(Arc::new(MemEngine::new()), clock.clone());
        let mut m = Model::default();
        let at_ms = |t: u64| START.0 + t * 1000;
        for op in ops {
            match op {
                Op::Set(k, v, ttl) => {
                    let o = SetOptions {
                        ttl: ttl.map(Duration::from_millis),
                        ..SetOptions::default()
                    };
                    ks.set(key(k), v, o).unwrap();
                    m.map
                        .insert(k, (v.as_bytes().to_vec(), ttl.map(|t| m.now + t)));
                }
                Op::SetNx(k, v) => {
                    let o = SetOptions {
                        condition: SetCondition::IfAbsent,
                        ..SetOptions::default()
                    };
                    let written = ks.set(key(k), v, o).unwrap().written;
                    let absent = m.live(k).is_none();
                    prop_assert_eq!(written, absent);
                    if absent {
                        m.map.insert(k, (v.as_bytes().to_vec(), None));
                    }
                }
                Op::SetKeepTtl(k, v) => {
                    let o = SetOptions {
                        keep_ttl: true,
                        ..SetOptions::default()
                    };
                    ks.set(key(k), v, o).unwrap();
                    let ttl = m.live(k).and_then(|e| e.1);
                    m.map.insert(k, (v.as_bytes().to_vec(), ttl));
                }
                Op::Get(k) => {
                    let got = ks.get(&key(k)).unwrap().map(|b| b.to_vec());
                    prop_assert_eq!(got, m.live(k).map(|e| e.0.clone()));
                }
                Op::Del(k) => {
                    let n = ks.del(&[key(k)]).unwrap();
                    let existed = m.live(k).is_some();
                    m.map.remove(&k);
                    prop_assert_eq!(n, existed as u64);
                }
                Op::Incr(k, d) => {
                    let got = ks.incr_by(&key(k), d);
                    let cur = m.live(k).map(|e| e.0.clone());
                    let parsed = match &cur {
                        None => Some(0),
                        Some(v) => std::str::from_utf8(v)
                            .ok()
                            .and_then(|s| s.parse::<i64>().ok())
                            .filter(|n| n.to_string().as_bytes() == &v[..]),
                    };
                    match parsed {
                        None => prop_assert!(matches!(got, Err(RedisError::NotAnInteger))),
                        Some(n) => match n.checked_add(d) {
                            None => prop_assert!(matches!(got, Err(RedisError::Overflow))),
                            Some(new) => {
                                prop_assert_eq!(got.unwrap(), new);
                                let ttl = m.live(k).and_then(|e| e.1);
                                m.map.insert(k, (new.to_string().into_bytes(), ttl));
                            }
                        },
                    }
                }
                Op::Append(k, v) => {
                    let n = ks.append(&key(k), v.as_bytes()).unwrap();
                    let e = match m.live(k) {
                        Some(e) => e,
                        None => m.map.entry(k).or_insert((Vec::new(), None)),
                    };
                    e.0.extend_from_slice(v.as_bytes());
                    prop_assert_eq!(n, e.0.len() as u64);
                }
                Op::Expire(k, t) => {
                    let d = Deadline::After(Duration::from_millis(t));
                    let ok = ks.expire(&key(k), d, ExpireCondition::default()).unwrap();
                    let now = m.now;
                    match m.live(k) {
                        Some(e) => {
                            prop_assert!(ok);
                            e.1 = Some(now + t);
                        }
                        None => prop_assert!(!ok),
                    }
                }
                Op::Persist(k) => {
                    let ok = ks.persist(&key(k)).unwrap();
                    let had = m.live(k).map(|e| e.1.take().is_some()).unwrap_or(false);
                    prop_assert_eq!(ok, had);
                }
                Op::Ttl(k) => {
                    let now = m.now;
                    match (ks.ttl(&key(k)).unwrap(), m.live(k)) {
                        (KeyTtl::Missing, None) => {}
                        (KeyTtl::Persistent, Some((_, None))) => {}
                        (KeyTtl::Expires { remaining, .. }, Some((_, Some(e)))) => {
                            let want = (*e - now) as u128 * 1000;
                            let got = remaining.as_micros();
                            prop_assert!(got.abs_diff(want) < 1000, "{got} vs {want}");
                        }
                        (got, want) => prop_assert!(false, "ttl {got:?} vs model {want:?}"),
                    }
                }
                Op::Advance(t) => {
                    m.now += t;
                    clock.set(Timestamp(at_ms(m.now)));
                }
                Op::ActiveExpire => {
                    while ks.expire_cycle(usize::MAX).expired > 0 {}
                    m.purge();
                    prop_assert_eq!(ks.dbsize(), m.map.len() as u64);
                    let with_ttl = m.map.values().filter(|e| e.1.is_some()).count();
                    prop_assert_eq!(ks.stats().expires, with_ttl as u64);
                }
                Op::Scan => {
                    let (next, keys) = ks.scan(0, None, 100).unwrap();
                    prop_assert_eq!(next, 0);
                    m.purge();
                    let want: Vec<Vec<u8>> = m.map.keys().map(|&k| key(k)).collect();
                    let got: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
                    prop_assert_eq!(got, want);
                }
            }
        }
        Ok(())
    }
}

/// RANDOMKEY: nothing from an empty keyspace; only live keys, every one of them in time; an
/// expired key it draws is deleted, never answered.
#[test]
fn random_key_draws_live_keys_and_deletes_expired_ones() {
    let (ks, clock) = setup();
    assert_eq!(ks.random_key().unwrap(), None);
    for i in 0..20 {
        ks.set(b(&format!("k{i}")), b("v"), opts(&[], &ks).unwrap())
            .unwrap();
    }
    for i in 0..20 {
        ks.set(
            b(&format!("gone{i}")),
            b("v"),
            opts(&["PX", "5"], &ks).unwrap(),
        )
        .unwrap();
    }
    clock.advance(Duration::from_millis(10));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..2_000 {
        let k = ks.random_key().unwrap().expect("a live key");
        assert!(k.starts_with(b"k"), "expired {k:?} answered");
        seen.insert(k);
    }
    assert_eq!(seen.len(), 20, "every live key drawn in 2000 draws");
    assert_eq!(ks.dbsize(), 20, "the expired keys drawn were deleted");
}
